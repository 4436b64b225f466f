#pragma once
// What the layer-wise stage emitter (layer_stage.cpp) shares with its passes
// (private to sim/): the layers priced once, the data-parallel groups and
// the tasks of the micro-batch being emitted.
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "lowering/pass.hpp"

namespace dtsim::sim::detail {

/// A one-stage plan's state, one simulated rank standing for every replica
/// (Note [Symmetry] in layer_stage.cpp).
struct LayerContext : StageContext {
  using StageContext::StageContext;

  LayerList layers;  ///< the model's, shared (Note [Layer memo] in model.hpp)
  std::vector<TimeNs> fwd_time, bwd_time, core_time;  ///< per layer, one micro-batch
  std::vector<TimeNs> fwd_launch, bwd_launch;         ///< per layer: Note [Host launch] (executor.cpp)
  std::vector<float> fwd_memory, bwd_memory;          ///< per layer: Task::memory_share of its passes
  std::vector<CollectiveCost> tp_fwd, tp_bwd;         ///< per layer, one micro-batch
  std::vector<std::vector<LayerComm>> tp_bwd_ops;     ///< per layer: tp_backward_ops (Note [Sequence-parallel re-gather])
  std::vector<std::optional<LayerMemory>> memory;     ///< per layer: Note [Layer memory], where measured
  std::vector<Recompute> recompute;                   ///< per layer: what it reruns (layer_recomputes)
  std::vector<int> recompute_group;                   ///< per layer: its rerun group's first block (recompute_groups)
  std::int64_t params = 0;                            ///< this rank's (a tensor-parallel shard)
  std::int64_t expert_params = 0;                     ///< of them, routed experts' (Layer::expert_params)
  int zero = 0;                                       ///< the plan's ZeRO stage
  int n = 1;                                          ///< ranks a shard is split over (plan.shard_group)
  /// FSDP2 shards the frozen weights too (resident_frozen() < frozen).
  bool frozen_sharded = false;
  CommGroup shard_group, replica_group;               ///< Note [ZeRO] in passes/sharded_parameters.cpp
  /// HYBRID_SHARD's replicas of the experts' shards (Note [Hybrid sharding]
  /// in parallel/plan.cpp; edp_group is then the shards' own group).
  CommGroup expert_replica_group;
  std::vector<TaskId> fwd;                            ///< this micro-batch's forward exits, by layer
  std::vector<TaskId> bwd;                            ///< this micro-batch's backward exits, by layer
  /// The forward exits of the micro-batch whose backward is being emitted,
  /// moved out of `fwd` as it begins: under Note [Expert-parallel overlap]
  /// (layer_stage.cpp) the next micro-batch's forward fills `fwd` beside it.
  std::vector<TaskId> fwd_of_bwd;
  TaskId last_bwd = -1;                               ///< the last backward's final task

  Bytes grad_bytes(const Layer& l) const { return l.params * gw; }
  /// Of them, the routed experts' (reduced over the expert data-parallel group).
  Bytes expert_grad_bytes(const Layer& l) const { return l.expert_params * gw; }
  /// A layer's frozen weights that FSDP2 shards and gathers with its
  /// trained ones (a tied copy included), 0 where they stay whole (Note
  /// [Frozen weights under FSDP] in passes/sharded_parameters.cpp).
  std::int64_t gathered_frozen(const Layer& l) const { return frozen_sharded ? l.frozen_params : 0; }
  /// Bytes of a layer's parameters once gathered whole (a tied copy
  /// included; NF4 frozen weights at their size: torchao's NF4Tensor is
  /// gathered packed, fsdp_pre_all_gather, bitsandbytes' 4-bit weights in a
  /// 16-bit container, bnb_4bit_quant_storage; FSDP wraps no 8-bit ones).
  Bytes full_param_bytes(const Layer& l) const {
    return (l.params + l.borrowed_params) * w +
           (frozen_sharded ? frozen_weight_bytes(l.frozen_params, l.frozen_quantized, l.frozen_quantized_bytes, w) : 0);
  }
  /// What ZeRO-3 / FSDP's all-gather of a layer moves and leaves whole: its
  /// parameters, the FP8 GEMM weights at 1 byte an element under
  /// fp8_param_gather (torchao's enable_fsdp_float8_all_gather casts the
  /// shard to FP8 before the gather, and the GEMM takes the gathered FP8
  /// weight as it is); NVFP4's at 0.5625, mxfp8's in bf16 (gathered_weight_bytes()).
  Bytes gathered_param_bytes(const Layer& l) const {
    const Fp8Gemms fp8 = fp8_gemms(l, plan.precision);
    const std::int64_t quantized = frozen_sharded ? l.frozen_quantized : 0;
    return gathered_bytes_of(plan, l.params + l.borrowed_params + gathered_frozen(l) - quantized,
                             fp8.weight_elements + (frozen_sharded ? fp8.frozen_elements : 0)) +
           (frozen_sharded ? l.frozen_quantized_bytes : 0);
  }
  static Bytes ceil_div(Bytes a, Bytes b) { return (a + b - 1) / b; }

  /// A kernel on `stream` (on the host stream: the host's own work).
  TaskId compute(const std::string& name, Phase phase, TimeNs duration, TaskDeps deps,
                 MemOps on_start = {}, MemOps on_end = {}, Stream s = Stream::kCompute) {
    return b.compute(name, 0, stream(s), phase, duration, std::move(deps), std::move(on_start), std::move(on_end),
                     s == Stream::kHost);
  }

  /// A collective over the data-parallel axis (or a sub-group of it).
  /// `expert` of the `bytes` are routed experts' (StageContext::grad_cost).
  TaskId collective(const std::string& name, CollectiveOp op, Bytes bytes, const CommGroup& group, Stream s,
                    TaskDeps deps, MemOps on_start = {}, MemOps on_end = {},
                    Bytes expert = 0, const CommGroup* expert_over = nullptr) {
    // Note [CPU collectives]: where ranks are CPU cores, a gradient collective
    // runs on the cores the ranks compute on and cannot overlap their compute.
    // Parameter gathers keep their stream: they are issued a layer ahead
    // (FSDP's prefetch, as dtsim_worker does too), so their buffers are alive
    // early; the sharded-parameters pass puts their time on the compute
    // stream beside them, before the layer that needs them. Without overlap
    // (plan.overlap false) the reductions already wait for the whole
    // backward: they keep their stream (on the compute stream they would
    // queue ahead of the backward they depend on).
    const bool serial = !cluster.device.comm_overlaps_compute && s != Stream::kParamComm && plan.overlap;
    return b.collective(name, 0, stream(serial ? Stream::kCompute : s), Axis::kDp, op, bytes,
                        grad_cost(op, bytes, expert, group, expert_over), std::move(deps), std::move(on_start), std::move(on_end));
  }

  /// A copy between host and device over PCIe.
  /// `on_start`: what it allocates as it starts (a copy up into new memory).
  TaskId copy(const std::string& name, Bytes bytes, Stream s, TaskDeps deps, MemOps on_start = {}) {
    return b.host_copy(name, 0, stream(s), bytes, comm.host_copy(bytes), std::move(deps), std::move(on_start));
  }

  /// Note [Gradient buckets] (models/torch): a bucket's gradients copied in
  /// before its collective or back out after it, on the compute stream (the
  /// reducer's copies run where backward does); where the cost model prices
  /// it at 0 (the datasheet), no task: the first of `deps` stands for it.
  TaskId bucket_copy(const std::string& name, double params, int tensors, bool out, TaskDeps deps) {
    const TimeNs t = bucket_copy_time(params, tensors, out);
    if (t == 0) return deps.front();
    const TaskId id = compute(name, Phase::kBackward, t, std::move(deps));
    g.tasks[id].memory_share = 1;  // a copy (Note [Interference] in engine/executor.cpp)
    return id;
  }

  /// A reduce-scatter's receive buffer for `bytes` of gradients (Note [ZeRO]).
  Bytes receive_bytes(Bytes bytes) const { return cluster.device.gloo_collectives ? bytes : ceil_div(bytes, n); }
  /// An all-gather's buffers for `full` bytes gathered (Note [ZeRO]).
  Bytes gather_bytes(Bytes full) const { return cluster.device.gloo_collectives ? ceil_div(full, n) + full : 0; }
};

/// Parameters of the ZeRO-3 layers kept whole on every rank (Note [ZeRO]).
std::int64_t persistent_params(const ResolvedPlan& plan, const std::vector<Layer>& layers);
/// After the step at `step`: one all-gather brings the shards of the
/// `persistent` parameters kept whole back to every rank (Note [ZeRO]).
void gather_persistent(LayerContext& ctx, std::int64_t persistent, TaskId step);

/// DDP's buckets and ZeRO-1/2's bucketed reductions and parameter gather
/// (passes/data_parallel.cpp).
std::unique_ptr<StrategyPass> data_parallel_pass(LayerContext& ctx);
/// ZeRO-3 and FSDP: per-layer gathers, reduce-scatters and the persistent
/// layers (passes/sharded_parameters.cpp).
std::unique_ptr<StrategyPass> sharded_parameters_pass(LayerContext& ctx);
/// DeepSpeed ZeRO-3, module by module: the coordinator's gathers, the
/// gradient bucket's reduce-scatters, the persistent parameters
/// (passes/zero3_modules.cpp; Note [ZeRO-3 modules]).
std::unique_ptr<StrategyPass> zero3_modules_pass(LayerContext& ctx);
/// Elements of DeepSpeed ZeRO-3's gradient bucket (reduce_bucket_size).
std::int64_t zero3_bucket_elements(const ResolvedPlan& plan);
/// Note [FSDP2's reduce-scatter wait] (passes/data_parallel.cpp): FSDP2's
/// post_backward of a unit whose backward ended with `last`, as a
/// zero-time task: after the reduce-scatter before (`previous`, -1 for
/// none), freeing what `held` holds of its input; then this unit's `grads`
/// bytes of gradients copied into `input` bytes of the next reduce-scatter's
/// input, held (in `held`) until the next one. What follows on the compute
/// stream waits for the task returned.
TaskId fsdp2_post_backward(LayerContext& ctx, std::int64_t micro, const std::string& unit, TaskId last, Bytes grads, Bytes input,
                           TaskId previous, MemOps& held);
/// The root's final callback: the last reduce-scatter waited for and its
/// input freed (nothing where `held` is empty).
void fsdp2_end_backward(LayerContext& ctx, const At& at, TaskId last, TaskId previous, MemOps& held);
/// Note [FSDP2's copy-out] (passes/sharded_parameters.cpp): `full` gathered
/// bytes copied out of the flat buffer after `gathered`, on the compute
/// stream; it takes `on_start` and frees the flat buffer (`full` buffer
/// bytes) as it ends.
TaskId fsdp2_copy_out(LayerContext& ctx, const std::string& name, Phase phase, Bytes full, TaskId gathered, MemOps on_start = {});
/// Its time: a kernel reading and writing the `full` bytes.
TimeNs fsdp2_copy_out_time(const StageContext& ctx, Bytes full);
/// ZeRO-Offload: gradients down, the step on the host, parameters up
/// (passes/offload.cpp).
std::unique_ptr<StrategyPass> offload_pass(LayerContext& ctx);
/// Megatron-Core's cpu_offloading_num_layers (Note [Activation offload]).
std::unique_ptr<StrategyPass> activation_offload_pass(LayerContext& ctx);
/// torchtune's enable_activation_offloading (Note [Saved-tensor offload]).
std::unique_ptr<StrategyPass> saved_tensor_offload_pass(LayerContext& ctx);
/// DeepSpeed's partition_activations and cpu_checkpointing (Note [DeepSpeed checkpoints]).
std::unique_ptr<StrategyPass> deepspeed_checkpoints_pass(LayerContext& ctx);

}  // namespace dtsim::sim::detail
