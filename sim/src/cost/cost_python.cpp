// Note [Python host cost]
// dtsim_worker, which calibration times and `dtsim validate` runs, is a C++
// loop over LibTorch: each op of a forward is a C++ call into the
// dispatcher. Most users train from Python instead: torch.nn modules whose
// forward the interpreter runs op by op (each call parsing its arguments,
// wrapping its result, and each module's __call__ checking for hooks) and
// torch.optim, whose AdamW steps CPU tensors one at a time in a Python loop
// (_single_tensor_adamw, PyTorch's default where foreach is not given and a
// tensor is not on a GPU) where dtsim_worker runs models::adam_update in
// C++. The kernels are the same; the host's time around them is not.
// Autograd's backward runs in C++ in both (its engine walks the graph), and
// so do the collectives, which the worker issues through c10d's C++
// ProcessGroup as DistributedDataParallel's reducer does.
//
// Calibration measures the difference where python3 imports torch
// (calibrate/src/driver.cpp, Note [Python host probe]): the same sequence of
// torch.nn modules on tiny tensors (Linear, LayerNorm, GELU and a residual
// add: four eager ops a repeat, with autograd recording as in training)
// timed from Python and from C++ (kernels "python_ops", "host_ops", m = ops
// a run), and an AdamW step over 1 and 16 tensors of 64 elements from
// torch.optim and from models::adam_update ("python_step", "host_step", m =
// parameters, n = tensors). Tiny tensors leave the host's time alone:
// per_op_s = Python's time an op - C++'s, per_tensor_s = the slope of the
// step's difference over its tensors (what the step's own call costs,
// once a step, is left out), both at least 0.
//
// A plan with `runtime: python` (Runtime::kPython) then pays, per forward
// of a layer, per_op_s for each of its kernels (an LSTM's time steps count
// once: nn.LSTM loops in C++), and per optimizer step per_tensor_s for each
// of its updates. On a CPU the host is the device: the pass takes that much
// longer. On a GPU the host issues while the GPU runs, so the cost joins
// the host's time to issue the pass (Note [Host launch] in
// engine/executor.cpp) and shows only where the host falls behind. The
// layer's described kernels stand in for the ops its Python forward calls:
// a layer of few large GEMMs is close, one written as many small ops (a
// hand-written attention's views and transposes) calls more. ZeRO-1 under
// `runtime: python` is PyTorch's ZeroRedundancyOptimizer, which steps whole
// tensors and broadcasts each from its owner where dtsim_worker steps and
// all-gathers one flat buffer (Note [ZeroRedundancyOptimizer] in
// lowering/passes/data_parallel.cpp).
#include <algorithm>
#include <cmath>
#include <map>

#include "dtsim/sim/cost.hpp"
#include "dtsim/sim/cost_profile.hpp"
#include "dtsim/sim/error.hpp"

namespace dtsim::sim {

std::int64_t python_forward_ops(const Layer& layer) {
  std::int64_t ops = 0;
  for (const Kernel& k : layer.forward) ops += k.kind == KernelKind::kRecurrent ? 1 : std::max<std::int64_t>(1, k.repeat);
  return ops;
}

std::optional<PythonHostCost> python_host_cost(const Profile& profile) {
  // Seconds an op of each loop's sequence, and each loop's step by tensors.
  double py_op = -1, cpp_op = -1;
  std::map<std::int64_t, double> py_step, cpp_step;
  for (const KernelSample& k : profile.kernels) {
    if (k.m <= 0 || !(k.time.median_s > 0) || !std::isfinite(k.time.median_s)) continue;  // a damaged record prices nothing
    if (k.kind == "python_ops") py_op = k.time.median_s / static_cast<double>(k.m);
    if (k.kind == "host_ops") cpp_op = k.time.median_s / static_cast<double>(k.m);
    if (k.kind == "python_step") py_step[k.n] = k.time.median_s;
    if (k.kind == "host_step") cpp_step[k.n] = k.time.median_s;
  }
  if (py_op < 0 || cpp_op < 0) return std::nullopt;
  PythonHostCost c;
  c.per_op_s = std::max(0.0, py_op - cpp_op);
  if (!std::isfinite(c.per_op_s)) return std::nullopt;
  // The difference's slope over the tensors, between the fewest and the
  // most both timed (the probes time 1 and 16).
  std::map<std::int64_t, double> diff;  // by tensors, seconds
  for (const auto& [tensors, t] : py_step) {
    if (const auto it = cpp_step.find(tensors); it != cpp_step.end()) diff[tensors] = t - it->second;
  }
  if (diff.size() >= 2) {
    const auto& [lo, d_lo] = *diff.begin();
    const auto& [hi, d_hi] = *diff.rbegin();
    const double slope = (d_hi - d_lo) / static_cast<double>(hi - lo);
    if (std::isfinite(slope)) c.per_tensor_s = std::max(0.0, slope);
  }
  return c;
}

PythonHostComputeModel::PythonHostComputeModel(const ComputeModel& base, PythonHostCost cost, bool gpu)
    : base_(base), cost_(cost), gpu_(gpu) {}

TimeNs PythonHostComputeModel::forward_host(const Layer& layer) const {
  return seconds_to_ns(cost_.per_op_s * static_cast<double>(python_forward_ops(layer)));
}

TimeNs PythonHostComputeModel::step_host(int tensors) const {
  return seconds_to_ns(cost_.per_tensor_s * std::max(1, tensors));
}

TimeNs PythonHostComputeModel::kernel_time(const Kernel& k, Precision p) const { return base_.kernel_time(k, p); }

TimeNs PythonHostComputeModel::layer_time(const Layer& layer, Pass pass, Precision p, const WorkloadShape& shape) const {
  const TimeNs t = base_.layer_time(layer, pass, p, shape);
  return gpu_ || pass != Pass::kForward ? t : t + forward_host(layer);
}

TimeNs PythonHostComputeModel::optimizer_time(double params, int tensors, Optimizer o, Precision p,
                                              const DeviceSpec& device) const {
  const TimeNs t = base_.optimizer_time(params, tensors, o, p, device);
  return gpu_ || params <= 0 ? t : t + step_host(tensors);
}

TimeNs PythonHostComputeModel::host_optimizer_time(double params, Optimizer o, Precision p, const ClusterSpec& cluster) const {
  return base_.host_optimizer_time(params, o, p, cluster);
}

TimeNs PythonHostComputeModel::bucket_copy_time(double params, int tensors, bool out) const {
  return base_.bucket_copy_time(params, tensors, out);
}

std::optional<LayerMemory> PythonHostComputeModel::layer_memory(const Layer& layer, Precision p,
                                                                const WorkloadShape& shape) const {
  return base_.layer_memory(layer, p, shape);
}

TimeNs PythonHostComputeModel::recompute_time(const Layer& layer, const std::vector<Kernel>& kernels, Precision p,
                                              const WorkloadShape& shape) const {
  return base_.recompute_time(layer, kernels, p, shape);
}

TimeNs PythonHostComputeModel::layer_launch_time(const Layer& layer, Pass pass, Precision p) const {
  const TimeNs t = base_.layer_launch_time(layer, pass, p);
  return gpu_ && pass == Pass::kForward ? t + forward_host(layer) : t;
}

TimeNs PythonHostComputeModel::optimizer_launch_time(double params, int updates, Optimizer o, Precision p) const {
  const TimeNs t = base_.optimizer_launch_time(params, updates, o, p);
  return gpu_ && params > 0 ? t + step_host(updates) : t;
}

}  // namespace dtsim::sim
