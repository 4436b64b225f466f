// The layer-wise stage emitter: a plan of one stage lowered layer by layer
// into the task graph of one iteration (the walk: lower.cpp). It emits each
// layer's forward and backward kernels and the activations they keep; data
// parallelism, ZeRO / FSDP, offload, tensor parallelism and recompute add
// theirs as passes (Note [Strategy passes] in pass.hpp).
//
// Note [Symmetry]
// Every data-parallel replica runs the same program on its own shard of the
// batch, so one simulated rank stands for all `dp` of them; collectives are
// priced for the real group size. Cost grows with layers x micro-steps, never
// with the GPU count.
#include "dtsim/sim/lowering.hpp"

#include <algorithm>
#include <string>

#include "dtsim/sim/buckets.hpp"
#include "dtsim/sim/error.hpp"
#include "dtsim/sim/partition.hpp"
#include "lowering/fine_grained_offload.hpp"
#include "lowering/layer_context.hpp"
#include "lowering/lowering_common.hpp"

namespace dtsim::sim {
namespace {

class LayerStage final : public detail::StageEmitter {
 public:
  explicit LayerStage(const detail::LoweringInputs& in) : ctx_(in), passes_(ctx_) {
    detail::LayerContext& c = ctx_;
    const ResolvedPlan& p = c.plan;
    const WorkloadShape shape = detail::workload_shape(p, c.cluster.device);
    c.layers = c.model.shared_layers(shape);
    DTSIM_ASSERT(!c.layers.empty(), "model has no layers");
    c.zero = p.zero_stage;
    c.n = p.shard_group;
    c.frozen_sharded = shards_frozen(p);
    c.tp_group = axis_group(p.mesh, Axis::kTp, c.cluster.gpus_per_node);
    c.cp_group = axis_group(p.mesh, Axis::kCp, c.cluster.gpus_per_node);
    c.dp_group = data_group(p.mesh, c.cluster.gpus_per_node);
    c.ep_group = expert_dispatch_group(p.mesh, p.etp, p.ep, p.moe_dispatcher, c.cluster.gpus_per_node);
    c.edp_group = expert_group(p.mesh, p.etp, p.ep, Axis::kDp, c.cluster.gpus_per_node);
    // Every micro-step repeats the same layer work: price each layer once.
    const ComputeModel& cm = c.compute_model;
    c.recompute = layer_recomputes(p, c.layers);  // Note [Block recompute] in parallel/partition.cpp
    c.recompute_group = recompute_groups(p, c.layers);
    for (std::size_t l = 0; l < c.layers.size(); ++l) {
      const Layer& L = c.layers[l];
      c.fwd_time.push_back(cm.layer_time(L, Pass::kForward, p.precision, shape));
      c.bwd_time.push_back(cm.layer_time(L, Pass::kBackward, p.precision, shape));
      const auto& rerun = detail::partially_recomputed_kernels(L, c.recompute[l]);
      c.core_time.push_back(rerun.empty() ? 0 : cm.recompute_time(L, rerun, p.precision, shape));
      c.memory.push_back(cm.layer_memory(L, p.precision, shape));
      c.fwd_launch.push_back(cm.layer_launch_time(L, Pass::kForward, p.precision));
      c.fwd_memory.push_back(static_cast<float>(cm.memory_share(L, Pass::kForward, p.precision)));
      c.bwd_memory.push_back(static_cast<float>(cm.memory_share(L, Pass::kBackward, p.precision)));
      c.bwd_launch.push_back(cm.layer_launch_time(L, Pass::kBackward, p.precision));
      c.tp_fwd.push_back(detail::sum_costs(L.tp_forward, c.tp_group, c.comm));
      c.tp_bwd_ops.push_back(detail::tp_backward_ops(L, p, c.cluster.device));
      c.tp_bwd.push_back(detail::sum_costs(c.tp_bwd_ops.back(), c.tp_group, c.comm));
      c.params += L.params;
      c.expert_params += L.expert_params;
    }
    c.sp_params.assign(1, 0);
    for (const auto& L : c.layers) c.sp_params[0] += L.sp_params;
    overlap_ = p.overlap_moe_expert_parallel_comm && p.ep > 1;
    make_units();
    make_rank();
    // Outermost first (Note [Strategy passes]): the gradient reductions
    // follow everything a layer's backward does; ZeRO-3's gather comes
    // before recompute's rematerialisation; the tensor-parallel collectives
    // sit right after the kernels.
    if (c.zero < 3) passes_.add(detail::data_parallel_pass(c));
    passes_.add(detail::sequence_parallel_pass(c));  // after the reductions, before the step
    passes_.add(detail::offload_pass(c));
    if (c.plan.zero3_modules()) {
      passes_.add(detail::zero3_modules_pass(c));
    } else if (c.zero == 3) {
      passes_.add(detail::sharded_parameters_pass(c));
    }
    // Before recompute: a checkpoint comes back (and is gathered) before
    // the rerun that reads it (Note [DeepSpeed checkpoints]).
    passes_.add(detail::deepspeed_checkpoints_pass(c));
    passes_.add(detail::saved_tensor_offload_pass(c));  // likewise (Note [Saved-tensor offload])
    passes_.add(detail::recompute_pass(c));
    // Its copies follow the block's forward, tensor-parallel collectives
    // included (Note [Activation offload]).
    passes_.add(detail::activation_offload_pass(c));
    {
      // Note [Fine-grained offload]: one model chunk, a layer a unit.
      detail::OffloadUnits units{c.layers, c.fwd_time, c.bwd_time, {}, true};
      for (std::size_t l = 0; l < c.layers.size(); ++l) units.units.emplace_back(l, 1);
      passes_.add(detail::fine_grained_offload_pass(c, units));
    }
    passes_.add(detail::context_parallel_pass(c));
    passes_.add(detail::expert_parallel_pass(c));
    passes_.add(detail::sync_batch_norm_pass(c));
    passes_.add(detail::tensor_parallel_pass(c));
  }

  void begin_stage(int s, const std::vector<PipeStep>& order) override { passes_.begin_stage(s, order); }
  void step(int, std::size_t, const PipeStep& st) override {
    // One stage, one chunk: forward and backward of each micro-batch in turn.
    const std::int64_t m = st.micro, last = ctx_.plan.grad_accum - 1;
    if (!overlap_) {
      if (st.forward) {
        forward(m);
      } else {
        backward(m, m == last);
      }
      return;
    }
    // Note [Expert-parallel overlap]: F0, then F(m+1) beside B(m), then
    // B(last) alone; a forward the pair before emitted is skipped.
    if (st.forward) {
      if (m == 0) forward(0);
    } else if (m < last) {
      combined(m + 1, m);
    } else {
      backward(m, true);
    }
  }
  void end_stage(int) override { optimizer_step(); }
  TaskGraph& graph() override { return ctx_.g; }
  TaskGraph finish() override {
    passes_.finish();
    return std::move(ctx_.g);
  }

 private:
  /// What the passes need of each layer (pass.hpp).
  void make_units() {
    detail::LayerContext& c = ctx_;
    for (std::size_t l = 0; l < c.layers.size(); ++l) {
      const Layer& L = c.layers[l];
      detail::Unit u;
      u.name = L.name;
      u.tp_forward = &L.tp_forward;
      u.tp_backward = &c.tp_bwd_ops[l];
      u.tp_forward_cost = detail::tp_exposed_cost(L.tp_forward, c.tp_group, c.comm, L, Pass::kForward, c.plan, c.compute_model);
      u.tp_backward_cost = detail::tp_exposed_cost(c.tp_bwd_ops[l], c.tp_group, c.comm, L, Pass::kBackward, c.plan, c.compute_model);
      if (c.plan.cp > 1) {
        u.cp_forward_cost = detail::cp_exposed_cost(L, Pass::kForward, c.plan, c.cp_group, c.comm, c.compute_model, u.cp_forward_bytes);
        u.cp_backward_cost = detail::cp_exposed_cost(L, Pass::kBackward, c.plan, c.cp_group, c.comm, c.compute_model, u.cp_backward_bytes);
      }
      detail::add_comms(L.ep_forward, c.ep_group, c.comm, u.ep_forward_cost, u.ep_forward_bytes, &L.ep_route);
      detail::add_comms(L.ep_backward, c.ep_group, c.comm, u.ep_backward_cost, u.ep_backward_bytes, &L.ep_route);
      detail::add_comms(L.dp_forward, c.dp_group, c.comm, u.dp_forward_cost, u.dp_forward_bytes);
      detail::add_comms(L.dp_backward, c.dp_group, c.comm, u.dp_backward_cost, u.dp_backward_bytes);
      if (c.recompute[l] == Recompute::kFull && L.is_block()) {
        // Full recompute keeps only the layer's input (the checkpoint) and
        // runs the forward again, its tensor-parallel collectives included;
        // under Megatron's uniform groups (Note [Block recompute]) only a
        // group's first block keeps its input, and before the backward of
        // its last every member's forward runs again at once. A block alone
        // is a group of one.
        const std::size_t group = static_cast<std::size_t>(c.recompute_group[l]);
        const auto checkpoint = [&](std::size_t k) -> Bytes { return k == group && k > 0 ? c.layers[k - 1].output_bytes : 0; };
        u.forward_drop = L.saved_bytes - checkpoint(l);
        if (l + 1 == c.layers.size() || c.recompute_group[l + 1] != c.recompute_group[l]) {
          TimeNs time = 0, launch = 0;
          Bytes rebuilt = 0, transients = 0;
          double memory_ns = 0;
          for (std::size_t k = group; k <= l; ++k) {
            const detail::Unit& uk = k == l ? u : c.units[k];
            time += c.fwd_time[k] + c.tp_fwd[k].total() + uk.ep_forward_cost.total() + uk.dp_forward_cost.total();
            launch += c.fwd_launch[k];
            rebuilt += c.layers[k].saved_bytes - checkpoint(k);
            transients = std::max<Bytes>(transients, c.memory[k] ? c.memory[k]->forward_transient : 0);
            memory_ns += static_cast<double>(c.fwd_memory[k]) * static_cast<double>(c.fwd_time[k]);
          }
          u.recompute = {true, "recompute", time, launch, rebuilt + transients, transients};
          // Its memory-bound kernels' time over all of it, collectives
          // included (PricedLayers::recompute_memory reckons the same).
          u.recompute.memory_share = time > 0 ? static_cast<float>(memory_ns / static_cast<double>(time)) : 0.0F;
        }
      } else if (const Bytes drop = detail::partially_recomputed_bytes(L, c.recompute[l]); drop > 0) {
        // Selective recompute drops the attention core and rebuilds it; the
        // op-level policy what it does not save (Note [Op-level recompute]).
        const char* label = c.plan.recompute == Recompute::kOp                             ? "recompute ops"
                            : c.plan.recompute_modules == kRecomputeModulesDefault ? "recompute attention"
                                                                                     : "recompute modules";
        // Megatron's "moe" reruns the layer's all-to-alls on the compute
        // stream too (Note [Recompute modules]).
        const TimeNs a2a = L.recompute_ep && c.recompute[l] == Recompute::kSelective ? u.ep_forward_cost.total() : 0;
        u.recompute = {true, label, c.core_time[l] + a2a, 0, drop, 0};
        const double share =
            c.compute_model.memory_share(detail::partially_recomputed_kernels(L, c.recompute[l]), kernel_precision(L, c.plan.precision));
        u.recompute.memory_share =
            static_cast<float>(a2a > 0 ? share * static_cast<double>(c.core_time[l]) / static_cast<double>(c.core_time[l] + a2a) : share);
        u.forward_drop = drop;
      }
      c.units.push_back(std::move(u));
    }
  }

  void make_rank() {
    detail::LayerContext& c = ctx_;
    SimRank rank;
    rank.rank = 0;
    rank.stage = 0;
    rank.replicas = c.plan.dp * c.plan.tp * c.plan.cp;
    const Stream streams[] = {Stream::kCompute, Stream::kGradComm, Stream::kParamComm, Stream::kD2H, Stream::kH2D, Stream::kHost};
    for (Stream s : streams) {
      c.streams[static_cast<std::size_t>(s)] = static_cast<int>(rank.streams.size());
      rank.streams.push_back(to_string(s));
    }
    // Transformer Engine's (or torchtune's) side stream for offloaded
    // activations, both ways, apart from ZeRO's offload copies (Note
    // [Activation offload], Note [Saved-tensor offload]).
    if (c.plan.cpu_offloading_num_layers > 0 || c.plan.enable_activation_offloading) {
      c.streams[static_cast<std::size_t>(Stream::kOffload)] = static_cast<int>(rank.streams.size());
      rank.streams.push_back(to_string(Stream::kOffload));
    }
    // Note [Expert-parallel overlap]: the all-to-alls' own stream.
    if (overlap_) {
      c.streams[static_cast<std::size_t>(Stream::kEpComm)] = static_cast<int>(rank.streams.size());
      rank.streams.push_back(to_string(Stream::kEpComm));
    }
    setup_groups(rank);
    // ZeRO-3's persistent layers are whole on every rank besides their shard.
    detail::Fp8Gemms fp8;
    for (const Layer& L : c.layers) fp8 += detail::fp8_gemms(L, c.plan.precision);
    detail::add_resident(rank, c.plan, c.cluster, c.params, detail::persistent_params(c.plan, c.layers), fp8, c.expert_params);
    Bytes module_buffers = 0;  // Layer::buffer_bytes
    Bytes frozen = 0;          // Layer::frozen_params: one stage holds the tied weight once
    for (const Layer& L : c.layers) {
      module_buffers += L.buffer_bytes;
      frozen += frozen_weight_bytes(L.frozen_params - L.frozen_tied, L.frozen_quantized, L.frozen_quantized_bytes, c.w);
    }
    if (frozen > 0) rank.resident.push_back({MemCategory::kParameters, resident_frozen(c.plan, frozen)});
    if (module_buffers > 0) rank.resident.push_back({MemCategory::kBuffers, module_buffers});
    // Note [ZeRO-3 modules]: DeepSpeed's gradient bucket, allocated whole at start.
    if (c.plan.zero3_modules()) rank.resident.push_back({MemCategory::kBuffers, detail::zero3_bucket_elements(c.plan) * c.gw});
    c.g.ranks.push_back(rank);
    c.g.stage_layers = {static_cast<int>(c.layers.size())};
    // Forward, backward and up to four communication tasks per layer and
    // micro-step: reserving avoids copying the task list as it grows.
    c.g.tasks.reserve(c.layers.size() * static_cast<std::size_t>(c.plan.grad_accum) * 6 + 16);
  }

  void setup_groups(SimRank& rank) {
    detail::LayerContext& c = ctx_;
    const int per_node = c.cluster.gpus_per_node;
    // With context parallelism the shards spread over dp x cp (data_group).
    c.shard_group = c.plan.cp > 1 ? c.dp_group : axis_group(c.plan.mesh, Axis::kDp, per_node, c.n);
    int inter_groups = c.dp_group.ranks_per_node < c.dp_group.ranks ? c.dp_group.groups_per_node : 1;
    if (c.plan.hybrid_shard && c.plan.dp > c.n) {
      // The replicas of each shard, n data-parallel ranks apart (a node's
      // shard group apart); every local rank's group crosses the network at once.
      c.replica_group = axis_group(c.plan.mesh, Axis::kDp, per_node, c.plan.dp / c.n, c.n);
      inter_groups = c.replica_group.groups_per_node;
    }
    if (c.plan.hybrid_shard && c.plan.ep > 1) {
      // Note [Hybrid sharding] (parallel/plan.cpp): the experts' shards over
      // the expert data-parallel ranks of a node, their replicas across.
      const int ne = std::max(1, c.plan.expert_shard_group);
      c.edp_group = expert_group(c.plan.mesh, c.plan.etp, c.plan.ep, Axis::kDp, per_node, ne, 1);
      if (c.plan.edp > ne) {
        c.expert_replica_group = expert_group(c.plan.mesh, c.plan.etp, c.plan.ep, Axis::kDp, per_node, c.plan.edp / ne, ne);
        inter_groups = std::max(inter_groups, c.expert_replica_group.groups_per_node);
      }
    }
    detail::set_link_capacity(rank, c.cluster, c.comm, inter_groups);
    detail::set_interference(rank, c.cluster, c.comm);
  }

  void forward(std::int64_t m) {
    ctx_.fwd.assign(ctx_.layers.size(), -1);
    for (std::size_t l = 0; l < ctx_.layers.size(); ++l) forward_layer(m, l);
  }

  // Note [Expert-parallel overlap]
  // Megatron-Core's --overlap-moe-expert-parallel-comm (combined_1f1b.py,
  // combined_1f1b_schedule_for_no_pipelining) runs the first micro-batch's
  // forward alone, then each next one's forward beside the backward of the
  // one before, and the last backward alone. The two go layer by layer,
  // the forward through the layers in order and the backward in reverse
  // (TransformerModelChunkSchedulePlan.run), and each layer pair puts one's
  // dispatch and combine all-to-alls on a communication stream while the
  // other's attention or experts run (TransformerLayerSchedulePlan.run:
  // comm "combine_bwd | dispatch_fwd, dispatch_bwd | combine_fwd" under
  // comp "pre_dispatch_fwd | mlp_bwd, mlp_bwd_dw, mlp_fwd | pre_dispatch_bwd").
  // dtsim keeps a layer's pass one task and its all-to-alls one task after
  // it (passes/expert_parallel.cpp), so here: forward of layer i of m + 1,
  // then backward of layer n - 1 - i of m on the compute stream, each one's
  // all-to-alls on the "ep comm" stream, and each pass waiting on its own
  // micro-batch's layer before (across streams, so by a dependency). An
  // all-to-all as long as the other micro-batch's pass beside it is
  // hidden; the lone first forward and last backward hide none. The
  // forward keeps its layers as the backward beside it frees the other's,
  // so memory peaks about where it did: a layer above it at most.
  // In an interleaved pipeline (combined_1f1b_schedule_for_interleaved_
  // pipelining) each 1F1B step's forward and backward go together so, a
  // chunk each: chunk_stage.cpp puts the all-to-alls on their own stream
  // and lets a step wait for the one before only where both go the same
  // way (the warm-up's forwards, the cool-down's backwards), and
  // pipeline_order() runs one more warm-up forward, as Megatron does so
  // that each step's two are independent.
  void combined(std::int64_t fm, std::int64_t bm) {
    detail::LayerContext& c = ctx_;
    const std::size_t n = c.layers.size();
    begin_backward();
    c.fwd.assign(n, -1);
    for (std::size_t i = 0; i < n; ++i) {
      forward_layer(fm, i);
      backward_layer(bm, n - 1 - i, false);
    }
    end_backward(bm, false);
  }

  void forward_layer(std::int64_t m, std::size_t l) {
    detail::LayerContext& c = ctx_;
    const Layer& L = c.layers[l];
    const detail::At at{0, 0, l, m};
    TaskDeps deps;
    passes_.before_forward(at, deps);
    if (overlap_ && l > 0) deps.push_back(c.fwd[l - 1]);
    // Note [Layer memory]: what the pass holds for a moment, where measured.
    const Bytes transient = c.memory[l] ? c.memory[l]->forward_transient : 0;
    MemOps on_start{{MemCategory::kActivations, L.saved_bytes + transient}};
    MemOps on_end;
    detail::add_bytes(on_end, MemCategory::kActivations, -transient);
    passes_.forward_memory(at, on_start, on_end);
    TaskId f = passes_.run_layer(at, {Pass::kForward, c.fwd_time[l], c.fwd_launch[l], c.fwd_memory[l]}, deps, on_start, on_end).last;
    if (f < 0) {
      f = c.compute(c.tag(m, "fwd ", L.name), Phase::kForward, c.fwd_time[l], deps, on_start, on_end);
      c.g.tasks[f].launch = c.fwd_launch[l];  // Note [Host launch] in executor.cpp
      c.g.tasks[f].memory_share = c.fwd_memory[l];  // Note [Interference] in executor.cpp
    }
    c.fwd[l] = passes_.after_forward(at, f);
  }

  void backward(std::int64_t m, bool last_micro) {
    begin_backward();
    for (std::size_t i = ctx_.layers.size(); i-- > 0;) backward_layer(m, i, last_micro);
    end_backward(m, last_micro);
  }

  /// The micro-batch in backward is the one whose forward `fwd` holds: its
  /// exits move to fwd_of_bwd (the next forward fills `fwd` anew).
  void begin_backward() {
    ctx_.fwd_of_bwd.swap(ctx_.fwd);
    ctx_.bwd.assign(ctx_.layers.size(), -1);
  }

  void backward_layer(std::int64_t m, std::size_t i, bool last_micro) {
    detail::LayerContext& c = ctx_;
    const bool first_micro = m == 0;
    const Layer& L = c.layers[i];
    const detail::At at{0, 0, i, m, first_micro, last_micro};
    TaskDeps deps;
    passes_.before_backward(at, deps);
    // Note [Expert-parallel overlap]: after its own layer above, or its forward's end.
    if (overlap_) deps.push_back(i + 1 < c.layers.size() ? c.bwd[i + 1] : c.fwd_of_bwd.back());
    // Gradients: persistent full grads (stages 0/1, allocated on first use
    // and freed by the optimizer) or transient ones reduced away (2/3).
    // A recurrent layer's appear only as its backward ends (Layer::grads_at_end).
    // Megatron's buffer holds them all along (Note [Megatron's gradient buffer]).
    // Note [nanotron's fp32 accumulator]: every backward's, freed as it ends.
    const bool allocates = c.zero >= 2 || first_micro || c.plan.fp32_grad_accumulator;
    const bool new_grads = allocates && !c.resident_grads && !c.plan.optimizer_in_backward;
    // The gradient of the input and the backward's workspaces; where
    // calibration measured the backward's rise (Note [Layer memory]), that
    // rise less the gradients it includes (the runtime's, in the
    // parameters' type).
    Bytes held = L.output_bytes + L.backward_workspace_bytes;
    if (c.memory[i]) held = std::max<Bytes>(0, c.memory[i]->backward_rise - (allocates ? L.params * c.w : 0));
    MemOps on_start{{MemCategory::kActivations, held}};
    MemOps on_end{{MemCategory::kActivations, -held}, {MemCategory::kActivations, -L.saved_bytes}};
    auto& grads_op = L.grads_at_end() ? on_end : on_start;
    if (new_grads) grads_op.push_back({MemCategory::kGradients, c.grad_bytes(L)});
    if (c.plan.optimizer_in_backward) {
      // Note [Optimizer in backward]: one tensor's gradient at a time,
      // freed by the step that reads it.
      detail::add_bytes(on_start, MemCategory::kGradients, largest_tensor(L) * c.gw);
    }
    passes_.backward_memory(at, on_start, on_end);
    TaskId b = passes_.run_layer(at, {Pass::kBackward, c.bwd_time[i], c.bwd_launch[i], c.bwd_memory[i]}, deps, on_start, on_end).last;
    if (b < 0) {
      b = c.compute(c.tag(m, "bwd ", L.name), Phase::kBackward, c.bwd_time[i], deps, on_start, on_end);
      c.g.tasks[b].launch = c.bwd_launch[i];
      c.g.tasks[b].memory_share = c.bwd_memory[i];
    }
    c.bwd[i] = passes_.after_backward(at, b);
    if (c.plan.optimizer_in_backward && L.params > 0) step_in_backward(L, c.bwd[i]);
  }

  /// Elements of a layer's largest parameter tensor of its own: from its
  /// modules' tensors, or as it says; the whole layer where it says nothing.
  static std::int64_t largest_tensor(const Layer& L) {
    std::int64_t largest = L.largest_param_tensor;
    for (const ParamModule& m : L.modules) {
      if (!m.tied.empty() || m.frozen) continue;
      for (std::int64_t t : m.tensors) largest = std::max(largest, t);
    }
    return std::min(L.params, largest > 0 ? largest : L.params);
  }

  // Note [Optimizer in backward]
  // torchtune's optimizer_in_bwd (recipes/full_finetune_single_device.py;
  // training/memory.py, register_optim_in_bwd_hooks) gives each parameter an
  // optimizer of its own and registers a post-accumulate-grad hook that steps
  // it and sets its gradient to None as soon as autograd has made it. So no
  // gradient outlives its tensor's backward: where a step keeps every gradient
  // until it runs (a model's worth, 6 GiB for Llama 3.2 3B in bf16), this keeps
  // one tensor's, and the peak moves from the end of the backward to wherever
  // the activations peak. The steps run on the autograd thread between the
  // layers' backward kernels, on the same stream: dtsim puts a layer's updates,
  // priced as one step of its tensors (Note [Optimizer step] in
  // cost_compute.cpp), right after its backward, each holding the temporaries
  // an unfused step of its largest tensor makes (Note [Unfused step]) beside
  // that tensor's gradient, which the backward made and the step frees. A tied
  // weight's gradient is whole only once the embedding's part is added to the
  // LM head's, so autograd holds the head's part from the head's backward to
  // the embedding's (0.7 GiB for Llama 3.2 3B in bf16); dtsim counts a tied
  // weight's gradient at the embedding's backward, with or without this, so
  // that the two compare. Gradient accumulation has nothing to accumulate into
  // (torchtune refuses it, and gradient clipping); with more than one GPU each
  // rank's hook would step before its gradients are reduced, so resolve allows
  // it on one GPU, as torchtune's single-device recipe runs it (its distributed
  // recipe's FSDP2 steps each shard after its reduce-scatter, not modelled).
  // The step after the backward is then empty.
  void step_in_backward(const Layer& L, TaskId after) {
    detail::LayerContext& c = ctx_;
    const int updates = std::max(1, layer_updates(L.params, L.param_tensors));
    const double params = static_cast<double>(L.params);
    const std::int64_t largest = largest_tensor(L);
    MemOps on_start, frees;
    detail::add_step_temporaries(c.plan, c.cluster.device, largest, on_start, frees);
    detail::add_bytes(frees, MemCategory::kGradients, -largest * c.gw);  // the gradient it stepped
    const TimeNs t = detail::step_time(c.compute_model, params, updates, c.plan, c.cluster.device);
    const TaskId step = c.compute(c.tag(0, "step ", L.name), Phase::kOptimizer, t, {after}, std::move(on_start), frees);
    c.g.tasks[step].launch = c.compute_model.optimizer_launch_time(params, updates, c.plan.optimizer, c.plan.precision);
    c.g.tasks[step].memory_share = 1;
    stepped_ = step;
  }

  void end_backward(std::int64_t m, bool last_micro) {
    detail::LayerContext& c = ctx_;
    c.last_bwd = c.bwd.front();
    if (c.plan.fp32_grad_accumulator) c.last_bwd = accumulate_fp32(m);
    passes_.end_backward(detail::At{0, 0, 0, m, m == 0, last_micro}, c.last_bwd);
  }

  /// Note [nanotron's fp32 accumulator] (emitter.hpp): the backward's
  /// 16-bit gradients added into the fp32 buffer, and freed.
  TaskId accumulate_fp32(std::int64_t m) {
    detail::LayerContext& c = ctx_;
    // c.params: the stage's layers' parameters, summed once when it was made.
    const TimeNs t = detail::fp32_accumulate_time(c.compute_model, c.params, m == 0);
    const TaskId acc = c.compute(c.tag(m, "fp32 accumulate"), Phase::kBackward, t, {c.last_bwd}, {},
                                 {{MemCategory::kGradients, -c.params * c.gw}});
    c.g.tasks[acc].memory_share = 1;  // streams the gradients (Note [Interference] in engine/executor.cpp)
    return acc;
  }

  void optimizer_step() {
    detail::LayerContext& c = ctx_;
    // Note [Hybrid sharding]: under the outer optimizer sharding a rank steps its part of its shard.
    const std::int64_t shard_params = c.zero >= 1 ? detail::optimizer_shard_of(c.plan, c.params, c.expert_params) : c.params;
    TaskDeps deps = c.reductions;
    deps.push_back(c.last_bwd);
    MemOps frees, on_start;
    if (c.plan.optimizer_in_backward) {
      // Note [Optimizer in backward]: every tensor was stepped as its gradient was made.
      if (stepped_ >= 0) deps.push_back(stepped_);
      passes_.before_step(0, deps, on_start);
      TaskId step = passes_.optimizer_step(0, deps, frees);
      if (step < 0) step = c.compute("optimizer step (in backward)", Phase::kOptimizer, 0, deps, std::move(on_start), frees);
      passes_.after_step(0, step);
      return;
    }
    if (c.zero <= 1 && !c.resident_grads && !c.plan.fp32_grad_accumulator) {
      // Stages 0 and 1 keep full gradients until the step frees them
      // (nanotron's accumulator frees each backward's: accumulate_fp32).
      Bytes grads = 0;
      for (const auto& l : c.layers) grads += c.grad_bytes(l);
      frees.push_back({MemCategory::kGradients, -grads});
    }
    detail::add_step_fp32_grads(c.plan, c.params, c.expert_params, shard_params, c.gw, on_start, frees);
    detail::add_step_state_copies(c.plan, c.params, c.expert_params, on_start, frees);
    {
      // Note [Unfused step]: the largest tensor it steps, a flat shard under ZeRO.
      std::int64_t largest = 0;
      for (const auto& l : c.layers) {
        largest = std::max(largest, c.zero == 3 ? detail::LayerContext::ceil_div(l.params, c.n) : l.largest_param_tensor);
      }
      if (c.zero == 1 || c.zero == 2) largest = shard_params;
      detail::add_step_temporaries(c.plan, c.cluster.device, largest, on_start, frees);
    }
    passes_.before_step(0, deps, on_start);
    TaskId step = passes_.optimizer_step(0, deps, frees);
    if (step < 0) {
      // Tensor by tensor (DDP), a flat shard per layer (ZeRO-3, FSDP's flat
      // parameters), or one flat shard (ZeRO-1/2, DeepSpeed's partition), as
      // dtsim_worker steps them, a chunk at a time (Note [Optimizer updates]).
      int updates = 0;
      for (const auto& l : c.layers) {
        updates += c.zero == 3 ? flat_updates(detail::LayerContext::ceil_div(l.params, c.n))
                               : layer_updates(l.params, l.param_tensors);
      }
      if (c.zero == 1 || c.zero == 2) updates = flat_updates(shard_params);
      double params = static_cast<double>(shard_params);
      if (detail::zero_redundancy_optimizer(c.plan)) {
        // Note [ZeroRedundancyOptimizer]: the busiest rank's tensors, one by one.
        const detail::ZeroRedundancyShare share = detail::zero_redundancy_share(detail::param_tensor_sizes(c.layers), c.n);
        updates = share.tensors;
        params = static_cast<double>(share.elements);
      }
      updates = std::max(1, updates);
      const TimeNs t = detail::step_time(c.compute_model, params, updates, c.plan, c.cluster.device);
      step = c.compute("optimizer step", Phase::kOptimizer, t, deps, std::move(on_start), frees);
      c.g.tasks[step].launch = c.compute_model.optimizer_launch_time(params, updates, c.plan.optimizer, c.plan.precision);
      c.g.tasks[step].memory_share = 1;  // streams its states (Note [Optimizer step] in cost_compute.cpp)
    }
    if (c.plan.outer_optim && (c.replica_group.ranks > 1 || c.expert_replica_group.ranks > 1)) {
      // Note [Hybrid sharding]: the updated parts of each shard gathered
      // back over the replicas (the dense over replica_group, the experts'
      // over theirs), in the parameters' type.
      const std::int64_t expert_shard = detail::LayerContext::ceil_div(c.expert_params, std::max(1, c.plan.expert_shard_group));
      const std::int64_t shard = detail::shard_of(c.plan, c.params, c.expert_params);
      step = c.collective("all_gather outer shards", CollectiveOp::kAllGather, shard * c.w, c.replica_group, Stream::kParamComm, {step}, {}, {},
                          expert_shard * c.w, &c.expert_replica_group);
    }
    passes_.after_step(0, step);
  }

  detail::LayerContext ctx_;
  detail::PassList passes_;
  /// Note [Expert-parallel overlap]: the plan asks for it.
  bool overlap_ = false;
  /// Note [Optimizer in backward]: the last layer's step (-1: none yet).
  TaskId stepped_ = -1;
};

}  // namespace

ModelStates model_states(const ResolvedPlan& plan, std::int64_t parameters, std::int64_t expert_parameters) {
  const Bytes w = element_bytes(plan.precision);
  const Bytes psi = parameters;
  // Dense parameters shard over shard_group, routed experts' over the
  // expert data-parallel group (Note [Expert mesh] in cost_comm.cpp).
  const Bytes shard = detail::shard_of(plan, parameters, expert_parameters);
  ModelStates s;
  s.parameters = plan.zero_stage >= 3 ? shard * w : psi * w;
  if (plan.offload_params == Offload::kCpu) s.parameters = 0;
  const Bytes gw = gradient_element_bytes(plan);
  s.gradients = plan.zero_stage >= 2 ? shard * gw : psi * gw;
  // Note [Optimizer in backward]: a gradient lives only while its tensor's backward runs.
  if (plan.optimizer_in_backward) s.gradients = 0;
  s.optimizer = optimizer_state_bytes(plan, plan.zero_stage >= 1 ? detail::optimizer_shard_of(plan, parameters, expert_parameters) : psi);
  // Note [Offload]: the optimizer's states live on the host, and under
  // ZeRO-2 so does the reduced gradient partition (DeepSpeed copies each
  // reduced bucket down as the backward makes it); the device holds only
  // the gradients in flight (dtsim validate on an H100: gpt2-medium
  // zero2-offload at micro-batch 2 peaked 652 MiB under a prediction that
  // kept the 677 MiB partition resident).
  if (plan.offload_optimizer == Offload::kCpu) {
    s.optimizer = 0;
    if (plan.zero_stage >= 2) s.gradients = 0;
  }
  return s;
}

bool shards_frozen(const ResolvedPlan& plan) {
  // Beside frozen weights resolve allows stage 3 as FSDP2's alone.
  return plan.zero_stage == 3 && plan.shard_group > 1;
}

Bytes resident_frozen(const ResolvedPlan& plan, Bytes frozen) {
  if (!shards_frozen(plan)) return frozen;
  if (plan.offload_params == Offload::kCpu) return 0;
  return (frozen + plan.shard_group - 1) / plan.shard_group;
}

std::unique_ptr<detail::StageEmitter> detail::layer_emitter(const LoweringInputs& in) {
  return std::make_unique<LayerStage>(in);
}

}  // namespace dtsim::sim
