// Note [GEMM efficiency]
// A GEMM reaches a fraction of peak that depends on its shape. cuBLAS tiles
// the (m, n) output into thread-block tiles (128 x 128 here) and runs them in
// waves over the SMs; the last wave is partly empty ("wave quantisation",
// NVIDIA Deep Learning Performance Guide, "Matrix Multiplication Background").
// A short reduction dimension k leaves too little work per tile to hide loads,
// so efficiency also falls as k / (k + k0). The best large-GEMM efficiency is
// a per-device figure (DeviceSpec::gemm_efficiency) until calibration
// replaces it with measurements.
#include <algorithm>
#include <cmath>

#include "dtsim/sim/cost.hpp"

namespace dtsim::sim {
namespace {
constexpr std::int64_t kTile = 128;
constexpr double kShortK = 48.0;

std::int64_t ceil_div(std::int64_t a, std::int64_t b) { return (a + b - 1) / b; }
}  // namespace

TimeNs ComputeModel::kernels_time(const std::vector<Kernel>& ks, Precision p) const {
  TimeNs t = 0;
  for (const auto& k : ks) t += kernel_time(k, p) * k.repeat;
  return t;
}

TimeNs ComputeModel::layer_time(const Layer& layer, Pass pass, Precision p, const WorkloadShape&) const {
  return kernels_time(pass == Pass::kForward ? layer.forward : layer.backward, p);
}

int flat_updates(std::int64_t params) { return params <= 0 ? 0 : static_cast<int>((params + kUpdateChunk - 1) / kUpdateChunk); }

int layer_updates(std::int64_t params, int tensors) {
  return params <= 0 ? 0 : std::max({1, tensors, flat_updates(params)});
}

double update_bytes_per_param(Optimizer o, Precision p) {
  const bool mixed = p != Precision::kFp32;
  const double states = o == Optimizer::kSgd ? 1 : 2;  // momentum (+ variance)
  const double grad = mixed ? 2 : 4;
  // read: grad + master + states; write: master + states (+ fp16 copy)
  return grad + 4 + 4 * states + 4 + 4 * states + (mixed ? 2 : 0);
}

// Note [Optimizer step]
// Without a profile, a step streams update_bytes_per_param bytes per
// parameter at the device's achievable bandwidth and launches its kernels
// once per tensor. Both ends of that are guesses on a CPU: the runtime's Adam
// (models::adam_update) is eight unfused passes, and which of its tensors
// stay in cache depends on their size. On the CI machine the formula priced
// bert-tiny's step (4.4M parameters) at 15.4 ms where it took 8.0. So
// calibration times that very function over parameter and tensor counts
// (kernels "adam" and "sgd": m parameters in n tensors), and
// ProfileComputeModel prices a step from those samples.
TimeNs ComputeModel::optimizer_time(double params, int tensors, Optimizer o, Precision p, const DeviceSpec& d) const {
  const double bytes = params * update_bytes_per_param(o, p);
  return seconds_to_ns(bytes / (d.memory_bandwidth * d.memory_efficiency)) + static_cast<TimeNs>(tensors) * d.kernel_launch;
}

TimeNs ComputeModel::bucket_copy_time(double /*params*/, int /*tensors*/, bool /*out*/) const { return 0; }

std::optional<LayerMemory> ComputeModel::layer_memory(const Layer& /*layer*/, Precision /*p*/, const WorkloadShape& /*shape*/) const {
  return std::nullopt;
}

TimeNs ComputeModel::attention_core_time(const Layer& layer, Precision p, const WorkloadShape& /*shape*/) const {
  return kernels_time(layer.attention_core, p);
}

TimeNs ComputeModel::layer_launch_time(const Layer& /*layer*/, Pass /*pass*/, Precision /*p*/) const { return 0; }

TimeNs ComputeModel::optimizer_launch_time(double /*params*/, int /*updates*/, Optimizer /*o*/, Precision /*p*/) const { return 0; }

TimeNs ComputeModel::host_optimizer_time(double params, Optimizer o, Precision /*p*/, const ClusterSpec& cluster) const {
  // Host Adam streams fp32 states through host memory, which the node's
  // GPUs share; DeepSpeed's CPU-Adam is vectorised, so bandwidth bounds it.
  const double host_bytes = params * update_bytes_per_param(o, Precision::kFp32);
  const double per_rank_bw = cluster.host_memory_bandwidth / cluster.gpus_per_node;
  const double per_rank_flops = cluster.host_flops / cluster.gpus_per_node;
  return seconds_to_ns(std::max(host_bytes / per_rank_bw, params * 12.0 / per_rank_flops));
}

RooflineComputeModel::RooflineComputeModel(const DeviceSpec& device) : device_(device) {}

double RooflineComputeModel::gemm_efficiency(std::int64_t m, std::int64_t n, std::int64_t k) const {
  if (m <= 0 || n <= 0 || k <= 0) return device_.gemm_efficiency;
  const double tiles = static_cast<double>(ceil_div(m, kTile) * ceil_div(n, kTile));
  const double units = std::max(1, device_.compute_units);
  const double waves = std::ceil(tiles / units);
  const double wave_util = tiles / (waves * units);
  const double k_util = static_cast<double>(k) / (static_cast<double>(k) + kShortK);
  return device_.gemm_efficiency * wave_util * k_util;
}

TimeNs RooflineComputeModel::kernel_time(const Kernel& k, Precision p) const {
  const double mem_s = static_cast<double>(k.bytes) / (device_.memory_bandwidth * device_.memory_efficiency);
  double compute_s = 0;
  switch (k.kind) {
    case KernelKind::kGemm:
    case KernelKind::kAttention:
    case KernelKind::kRecurrent: {
      // Batched GEMMs: the batch multiplies the tiles available to fill waves.
      const double eff = gemm_efficiency(k.m * std::max<std::int64_t>(1, k.batch), k.n, k.k);
      compute_s = k.flops / (device_.peak_for(p) * eff);
      break;
    }
    case KernelKind::kElementwise:
    case KernelKind::kNorm:
    case KernelKind::kEmbedding:
      compute_s = k.flops / device_.peak_fp32;
      break;
  }
  return seconds_to_ns(std::max(compute_s, mem_s)) + device_.kernel_launch;
}

}  // namespace dtsim::sim
