#pragma once
// What lower() shares with the two ways of emitting a stage (private to
// sim/): the task builder every task goes through, the memory a rank holds
// before the iteration, and the emitter interface the schedule walk calls
// (Note [One walk] in lower.cpp).

#include <algorithm>
#include <cmath>
#include <memory>
#include <string>
#include <vector>

#include "dtsim/sim/buckets.hpp"
#include "dtsim/sim/cluster.hpp"
#include "dtsim/sim/cost.hpp"
#include "dtsim/sim/lowering.hpp"
#include "dtsim/sim/model.hpp"
#include "dtsim/sim/plan.hpp"
#include "dtsim/sim/task_graph.hpp"
#include "lowering/lowering_common.hpp"

namespace dtsim::sim::detail {

/// Adds tasks to one graph; every task of every lowering is made here.
class TaskBuilder {
 public:
  explicit TaskBuilder(bool named) : named_(named) {}
  TaskGraph& graph() { return g_; }
  /// Whether tasks get names (search leaves them empty).
  bool named() const { return named_; }
  /// Tasks made from now on belong to micro-batch `m` (-1: to none), Task::micro.
  void set_micro(std::int32_t m) { micro_ = m; }

  /// A kernel (or, on the host stream, the host's work) of `duration`.
  TaskId compute(std::string name, int rank, int stream, Phase phase, TimeNs duration, TaskDeps deps = {},
                 MemOps on_start = {}, MemOps on_end = {}, bool host = false) {
    Task& t = make();
    t.name = named_ ? std::move(name) : std::string();
    t.kind = host ? TaskKind::kHostCompute : TaskKind::kCompute;
    t.phase = phase;
    t.rank = rank;
    t.stream = stream;
    t.duration = duration;
    t.deps = std::move(deps);
    g_.set_memory(t, on_start, on_end);
    t.micro = micro_;
    if (!host && rank >= 0) add_computed(rank, duration);  // Note [A collective's lead]
    return static_cast<TaskId>(g_.tasks.size() - 1);
  }
  /// A collective (or point-to-point send) over the group of mesh axis `axis`.
  TaskId collective(std::string name, int rank, int stream, Axis axis, CollectiveOp op, Bytes bytes,
                    const CollectiveCost& cost, TaskDeps deps, MemOps on_start = {},
                    MemOps on_end = {}) {
    Task& t = make();
    t.name = named_ ? std::move(name) : std::string();
    t.kind = TaskKind::kCollective;
    t.phase = Phase::kComm;
    t.rank = rank;
    t.stream = stream;
    t.op = op;
    t.axis = axis;
    t.bytes = bytes;
    t.cost = g_.task_cost(cost);
    // Note [A collective's stalls] (cost/cost_profile.cpp): the rank's
    // collectives so far have met `seen` stalls on average; this one pays
    // those by which the rounded count grows. A gradient collective of the
    // data-parallel axis is launched as the backward's work ends: where the
    // profile timed it so, its stalls are those (Note [Collectives in a
    // step] in calibrate/src/gloo_bench.cpp), and its typical time is
    // longer there by what the profile measured (Note [A collective in a
    // step] in cost/cost_profile.cpp).
    const bool in_step = axis == Axis::kDp && ((cost.step_stalls > 0 && cost.step_stall > 0) || cost.step_extra > 0);
    const double stalls = in_step ? cost.step_stalls : cost.stalls;
    const TimeNs stall = in_step ? cost.step_stall : cost.stall;
    if (in_step) t.cost.latency += step_extra(cost, rank);
    if (stalls > 0 && stall > 0 && rank >= 0) {
      if (static_cast<std::size_t>(rank) >= stalls_seen_.size()) stalls_seen_.resize(static_cast<std::size_t>(rank) + 1, 0.0);
      double& seen = stalls_seen_[static_cast<std::size_t>(rank)];
      const double before = std::floor(seen + 0.5);
      seen += stalls;
      t.cost.latency += stall * static_cast<TimeNs>(std::floor(seen + 0.5) - before);
    }
    t.deps = std::move(deps);
    g_.set_memory(t, on_start, on_end);
    t.micro = micro_;
    return static_cast<TaskId>(g_.tasks.size() - 1);
  }
  /// A copy between host and device over PCIe (ZeRO-Offload), with what it
  /// allocates as it starts (a copy up into new device memory).
  TaskId host_copy(std::string name, int rank, int stream, Bytes bytes, const CollectiveCost& cost, TaskDeps deps,
                   MemOps on_start = {}) {
    Task& t = make();
    t.name = named_ ? std::move(name) : std::string();
    t.kind = TaskKind::kCollective;
    t.phase = Phase::kOffload;
    t.rank = rank;
    t.stream = stream;
    t.op = CollectiveOp::kSendRecv;
    t.bytes = bytes;
    t.cost = g_.task_cost(cost);
    t.deps = std::move(deps);
    g_.set_memory(t, on_start, {});
    t.micro = micro_;
    return static_cast<TaskId>(g_.tasks.size() - 1);
  }

 private:
  /// A new task at the graph's end, made in place (Note [Compact tasks] in task_graph.hpp).
  Task& make() { return g_.tasks.emplace_back(); }

  // What Note [A collective's lead] (cost/cost_profile.cpp) asks: a
  // data-parallel collective pays the excess its profile timed in a step
  // (Note [A collective in a step] in cost/cost_profile.cpp) in proportion
  // to what its rank computed since its previous data-parallel collective
  // or the graph's start (the sum of the rank's kernels made since, as the
  // task builder makes them in program order), up to the lead the excess
  // was timed after: all of it where the profile recorded no lead.
  TimeNs& computed(int rank) {
    if (static_cast<std::size_t>(rank) >= computed_.size()) computed_.resize(static_cast<std::size_t>(rank) + 1, 0);
    return computed_[static_cast<std::size_t>(rank)];
  }
  /// The sum stops at kMaxSimTime: a kernel of an absurd duration (a device
  /// of 1e-6 TFLOP/s) must not overflow it before the engine refuses the
  /// plan as beyond what it simulates (Note [Sizes in 64 bits]).
  void add_computed(int rank, TimeNs duration) {
    TimeNs& since = computed(rank);
    since = duration >= kMaxSimTime - since ? kMaxSimTime : since + duration;
  }
  TimeNs step_extra(const CollectiveCost& cost, int rank) {
    if (rank < 0) return cost.step_extra;
    TimeNs& since = computed(rank);
    const TimeNs lead = since;
    since = 0;
    if (cost.step_lead <= 0 || lead >= cost.step_lead) return cost.step_extra;
    return static_cast<TimeNs>(std::llround(static_cast<double>(cost.step_extra) * static_cast<double>(lead) /
                                            static_cast<double>(cost.step_lead)));
  }

  bool named_ = true;
  std::int32_t micro_ = -1;
  std::vector<double> stalls_seen_;  ///< by rank (Note [A collective's stalls])
  std::vector<TimeNs> computed_;     ///< by rank: kernels' time since its last data-parallel collective
  TaskGraph g_;
};

/// What a lowering is given.
struct LoweringInputs {
  const Model& model;
  const ResolvedPlan& plan;
  const ClusterSpec& cluster;
  const ComputeModel& compute;
  const CommModel& comm;
  bool named = true;
  const PricedLayers* priced = nullptr;  ///< the layers priced already (CostModels::priced), or null
};

// Note [FP8 memory]
// Under precision fp8 (Note [FP8 training] in cost/cost_compute.cpp) the
// model states are those of bf16 mixed precision: bf16 weights and
// gradients, 12 bytes of optimizer state per parameter (the fp32 master,
// Adam's m and v). Transformer Engine adds, for each FP8 GEMM's weight, its
// FP8 copies, cached between micro-batches in the module's
// `_fp8_workspaces` (transformer_engine/pytorch/module/base.py, which
// linear.py's weight quantisation fills): the copies one cast writes (Note
// [FP8 casts] in cost/cost_compute.cpp) less the read, fp8_weight_copy_bytes():
// the copy and its transpose for dgrad on Hopper (its FP8 GEMM takes only
// the TN layout), 2 bytes a weight element; one copy on Blackwell under
// per-tensor scaling, 1 byte; under mxfp8 a row-wise and a column-wise copy
// with a scale byte per 32 elements each, 2 + 2/32 bytes (NVFP4's: Note
// [NVFP4 training]). And its scaling state: DelayedScaling keeps an fp32 amax
// history of amax_history_len = 1024 entries (TE's default; Megatron-LM's
// --fp8-amax-history-len is 1) for each of a GEMM's 3 forward tensors
// (input, weight, output) and 2 backward ones (output gradient, input
// gradient), and a scale and its inverse for each: 20,520 bytes a GEMM.
// Both are counted with the parameters. Under ZeRO-3 / FSDP the FP8 copies
// are made from the gathered weight and go with it: they are not resident.
// With the distributed optimizer (ZeRO-1/2) and fp8_param_gather,
// Megatron-LM's --fp8-param-gather "keeps the compute param in fp8 (do not
// use any other intermediate dtype)" (megatron/training/arguments.py; the
// model is built under TE's fp8_model_init): each FP8 GEMM's weight is a
// Float8Tensor, its data and cached transpose the 2 bytes above, and its
// bf16 copy is not held at all (the fp32 master in the optimizer's shard
// is what the step updates and casts back): 2 bytes a weight element less.
// Under mxfp8 the weights are MXFP8 tensors, but the gather itself moves
// bf16: Megatron-Core gathers them into the gradient buffer (param_and_grad_
// buffer.py, "For MXFP8 param ... only half of the buffer is used to store
// params in bf16"; reuse_grad_buf_for_mxfp8_param_ag) and quantises them
// into their MXFP8 storage afterwards (copy_tensors_to_quantized_params, a
// pass over the weights once an iteration, not priced):
// gathered_weight_bytes() in lowering_common.hpp.

/// The FP8 GEMMs of a layer under precision p: elements of their weights
/// (k x n of each), and how many (Note [FP8 memory]); none unless p is fp8
/// and the layer a transformer block (kernel_precision()).
struct Fp8Gemms {
  std::int64_t weight_elements = 0;
  /// Of the frozen weights (Layer::frozen_params), those of FP8 GEMMs:
  /// their FP8 copies are held as the trained ones' are, but they are
  /// neither reduced nor gathered by the optimizer.
  std::int64_t frozen_elements = 0;
  std::int64_t gemms = 0;
  Fp8Gemms& operator+=(const Fp8Gemms& o) {
    weight_elements += o.weight_elements;
    frozen_elements += o.frozen_elements;
    gemms += o.gemms;
    return *this;
  }
};
inline Fp8Gemms fp8_gemms(const Layer& l, Precision p) {
  Fp8Gemms f;
  if (!quantized_gemms(kernel_precision(l, p))) return f;
  std::int64_t all = 0;
  for (const Kernel& k : l.forward) {
    if (k.kind != KernelKind::kGemm) continue;
    all += k.k * k.n;
    ++f.gemms;
  }
  f.weight_elements = std::min(all, l.params);
  f.frozen_elements = std::min(all, l.params + l.frozen_params) - f.weight_elements;
  return f;
}
/// TE's scaling state of one FP8 GEMM: (1024 amax + scale + scale_inv) x 5 tensors x fp32.
inline constexpr Bytes kFp8ScalingBytesPerGemm = (1024 + 2) * 5 * 4;

// Note [Megatron's gradient buffer]
// Megatron-Core's DistributedDataParallel keeps every gradient in one
// buffer allocated with the model (param_and_grad_buffer.py: grad_data, of
// grad_dtype = fp32 when grad_reduce_in_fp32, which --accumulate-allreduce-
// grads-in-fp32 sets and Megatron-LM's arguments.py turns on for bf16);
// param.main_grad is a view of it, the backward accumulates into it, its
// buckets are slices of it reduced in place (no copies in or out), and the
// optimizer reads it (distrib_optimizer.py casts the shard with .float(),
// free when it is fp32 already). So under accumulate_allreduce_grads_in_fp32
// the gradients are resident, 4 bytes each, for the whole run; with Adam's
// 12 bytes of state and the 2-byte bf16 parameters that is Megatron's own
// 18 bytes a parameter, or 6 + 12/dp with the distributed optimizer
// (megatron/training/theoretical_memory_usage.py; Korthikanti et al. 2022,
// Figure 1); the reductions move 4 bytes a gradient. The buffer is there
// in 16 bits too (grad_dtype is the parameters' where grad_reduce_in_fp32
// is off: Megatron-Bridge's performance recipes, --grad-reduce-in-bf16,
// fp16), plan.megatron_grad_buffer: the same residency at 2 bytes, and
// the distributed optimizer's .float() makes an fp32 copy of every
// parameter's shard of it at once, kept from the step's start to its end
// (add_step_fp32_grads), where FusedAdam does not read the 16 bits itself
// (Note [Precision-aware optimizer]).

// Note [nanotron's fp32 accumulator]
// nanotron (optimizer.accumulate_grad_in_fp32, true in every config it
// ships) builds an FP32GradientAccumulator (nanotron/optim/
// gradient_accumulator.py; helpers.py, init_optimizer_and_grad_accumulator):
// one contiguous fp32 buffer of every parameter's gradient, kept whole even
// under its ZeRO-1 ("we need to accumulate gradients for all parameters"),
// and fp32 copies of the parameters the rank steps, which torch.optim
// updates and which are copied back into the 16-bit ones after the step.
// The model stays in PyTorch's DDP (trainer.py, init_model: bucket_cap_mb
// from model.ddp_bucket_cap_mb), so autograd still makes 16-bit gradients
// and DDP still keeps its buckets (Note [DDP buckets]). After each
// micro-batch's backward every 16-bit gradient is added into the buffer
// and set to None (accumulator.backward, _accumulate_grad); on the last,
// DDP's communication hook (get_fp32_accum_hook) adds its bucket instead
// and all-reduces the buffer's slices in fp32, 4 bytes a gradient. The
// step reads the buffer and zero_grad zeroes it. So a rank holds 4 bytes
// a parameter more for the whole run (2 + 2 + 4 + 4 + 8 = 20 with Adam and
// DDP, against PyTorch AMP's 2 + 2 + 2 + 12 = 18 here), its 16-bit
// gradients live only within a backward, and its reductions move twice
// the bytes. dtsim prices each backward's additions (2 bytes read, 4 read
// and 4 written a gradient) as one elementwise task on the compute stream
// at the backward's end, where they free the 16-bit gradients; on the last
// micro-batch nanotron runs them bucket by bucket in the hook, the same
// bytes on the same stream. zero_grad's zeroing of the buffer (4 bytes
// written), after the step, is priced with the next step's first addition.
// The tied weights' sums (across the pipeline, and the sequence-parallel
// ones) come from the buffer too, in fp32.

/// The memory a rank holding `params` parameters has before the iteration
/// starts: its model states (ZeRO paper accounting, model_states()), the
/// ZeRO-3 layers kept whole (`persistent` parameters), DDP's bucket
/// buffers (Note [DDP buckets]: a second copy of the gradients), under fp8
/// the FP8 weight copies and scaling state of its `fp8` GEMMs (Note [FP8
/// memory]) and the runtime's own reservation; Megatron's gradient buffer
/// (Note [Megatron's gradient buffer]) instead of DDP's gradients and buckets.
inline void add_resident(SimRank& r, const ResolvedPlan& plan, const ClusterSpec& cluster, std::int64_t params,
                         std::int64_t persistent, const Fp8Gemms& fp8 = {}, std::int64_t expert_params = 0) {
  const Bytes w = element_bytes(plan.precision);
  const ModelStates ms = model_states(plan, params, expert_params);
  r.resident.push_back({MemCategory::kParameters, ms.parameters});
  if (persistent > 0) r.resident.push_back({MemCategory::kParameters, persistent * w});
  if (fp8.gemms > 0) {
    const double per_element = fp8_weight_copy_bytes(plan, cluster.device.compute_capability);
    const Bytes copies =
        plan.zero_stage >= 3 ? 0 : static_cast<Bytes>(std::ceil(per_element * static_cast<double>(fp8.weight_elements + fp8.frozen_elements)));
    // Note [NVFP4 training]: no amax history, a scale for each tensor.
    const Bytes scaling = plan.precision == Precision::kFp4 ? 0 : fp8.gemms * kFp8ScalingBytesPerGemm;
    // Note [FP8 memory]: FP8 primary weights, no working-precision copy.
    const Bytes primary =
        plan.fp8_param_gather && (plan.zero_stage == 1 || plan.zero_stage == 2) ? w * (fp8.weight_elements + fp8.frozen_elements) : 0;
    r.resident.push_back({MemCategory::kParameters, copies + scaling - primary});
  }
  const bool megatron_buffer = plan.grad_buffer();
  if (plan.zero_stage >= 2 || megatron_buffer) r.resident.push_back({MemCategory::kGradients, ms.gradients});
  // Note [nanotron's fp32 accumulator]: its buffer, whole.
  if (plan.fp32_grad_accumulator) r.resident.push_back({MemCategory::kGradients, 4 * params});
  r.resident.push_back({MemCategory::kOptimizer, ms.optimizer});
  if (plan.zero_stage == 0 && !megatron_buffer) {
    // DDP's copy of the gradients it reduces: all of them, or the experts'
    // alone where only they have peers (Note [Experts alone in a bucket] in
    // passes/data_parallel.cpp).
    const std::int64_t copied = plan.grad_group() > 1 ? params : plan.edp > 1 ? expert_params : 0;
    if (copied > 0) r.resident.push_back({MemCategory::kBuffers, copied * w});
  }
  r.resident.push_back({MemCategory::kBuffers, cluster.device.runtime_reserved});
}

/// One way of emitting a pipeline stage's tasks. lower() walks each
/// stage's schedule (pipeline_order) and hands it every step.
class StageEmitter {
 public:
  virtual ~StageEmitter() = default;
  /// Stage `stage` is about to run `order`.
  virtual void begin_stage(int stage, const std::vector<PipeStep>& order) = 0;
  /// Step `index` of the stage's order.
  virtual void step(int stage, std::size_t index, const PipeStep& step) = 0;
  /// The stage's steps are all emitted: its optimizer step and what follows.
  virtual void end_stage(int stage) = 0;
  /// Every stage is emitted: what joins them; the graph.
  virtual TaskGraph finish() = 0;
  /// The graph being made (Note [Compact tasks] in task_graph.hpp: lower() reserves it).
  virtual TaskGraph& graph() = 0;
};

/// A single stage, layer by layer (layer_stage.cpp), with the passes of data
/// parallelism, offload, ZeRO-3 / FSDP, recompute and tensor parallelism.
std::unique_ptr<StageEmitter> layer_emitter(const LoweringInputs& in);
/// Pipeline stages, one task per model chunk and pass (chunk_stage.cpp),
/// with the passes of data parallelism, the pipeline's sends, recompute and
/// tensor parallelism.
std::unique_ptr<StageEmitter> chunk_emitter(const LoweringInputs& in);

}  // namespace dtsim::sim::detail
