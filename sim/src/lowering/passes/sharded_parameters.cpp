// The sharded-parameters pass: FSDP, and ZeRO-3 with every layer a leaf
// module (z3_leaf_layers), on a one-stage plan (DeepSpeed's own module by
// module coordinator is passes/zero3_modules.cpp, Note [ZeRO-3 modules]). Each
// layer's parameters are gathered before its forward and again before its
// backward, its gradients reduce-scattered right after its backward, and the
// layers kept whole are refreshed after the step. ZeRO-Infinity's parameter
// offload copies each shard up before its gather.
//
// Note [FSDP's reduce dtype]
// PyTorch FSDP computes in MixedPrecision's param_dtype (bf16) but reduces
// gradients in its reduce_dtype: FSDP1 casts a unit's unsharded gradient
// to it before the reduce-scatter (torch/distributed/fsdp/
// _runtime_utils.py, _reduce_grad), FSDP2 reduce-scatters in
// MixedPrecisionPolicy.reduce_dtype (_fsdp_collectives.py,
// foreach_reduce). torchtitan's mixed_precision_reduce defaults to
// float32, as Composer's DEFAULT mixed precision (llm-foundry's benchmark
// runs) does: with plan.reduce_dtype fp32 each unit's reduce-scatter moves
// 4 bytes a gradient, from an fp32 copy held beside the bf16 gradient
// while it runs (a buffer of the unit's size). The sharded result is
// counted as before (the model states' gradient bytes a parameter).
//
// Note [ZeRO]
// DeepSpeed ZeRO (Rajbhandari et al. 2020): stage 1 shards optimizer state,
// all-reduces gradient buckets at the accumulation boundary, steps its shard
// and all-gathers the updated parameters; stage 2 also shards gradients,
// reduce-scattering each bucket every micro-step; stage 3 also shards
// parameters, all-gathering each layer before its forward and again before its
// backward (prefetching the next layer while the current one computes) and
// reduce-scattering its gradients right after its backward (as this pass
// lowers it: layer by layer; DeepSpeed itself goes module by module, Note
// [ZeRO-3 modules]). Parameters of layers under 1e5 elements stay whole on every rank
// (stage3_param_persistence_threshold): resident, never gathered per layer,
// and refreshed by one all-gather of their shards after the optimizer step.
// PyTorch FSDP (Zhao et al. 2023) is stage 3 with one unit per layer and no
// persistence threshold; SHARD_GRAD_OP is stage 2 and HYBRID_SHARD shards
// within a node and all-reduces the shards across nodes. FSDP's
// limit_all_gathers (True by default) holds the host back from issuing a
// unit's all-gather until the unit two before it has freed its parameters
// (_runtime_utils.py, _limit_all_gathers: at most two in flight); without
// it, gathers are issued as fast as the host runs.
//
// Note [FSDP's root unit]
// FSDP gathers by the units it was wrapped into, not by dtsim's layers. With
// the usual wrapping, transformer_auto_wrap_policy over the block class
// (FSDP1) or fully_shard on each block and then on the model (FSDP2), each
// block is a unit and everything outside the blocks (the embeddings, the
// final norm, the head; a tied head's weight once) is the root's. The root
// is gathered in its pre-forward, before the first block, and is not
// resharded after the forward, "with the intention that they are
// immediately used for backward computation" (FSDP1,
// torch/distributed/fsdp/_runtime_utils.py, _post_forward_reshard: not
// state._is_root; FSDP2, _fsdp_state.py, _lazy_init: the root's
// post_forward_mesh_info = None). So the root's parameters stay whole from
// the start of each micro-batch's forward to the end of its backward, and
// its gradients (the head's, produced first) wait until the last of them,
// the embedding's, when the root's one reduce-scatter takes them all.
// fsdp_wrap: layers (every layer its own unit, as dtsim's runtime wraps
// them) lowers every layer as a block. fsdp_wrap: torchtitan is its apply_fsdp
// (torchtitan/models/llama3/infra/parallelize.py): fully_shard on
// tok_embeddings, on each block and on [norm, output], the last with
// reshard_after_forward=False under the default reshard_after_forward_policy
// ("As an optimization, do not reshard_after_forward the last layers by
// default since FSDP would prefetch them immediately after the forward
// pass"). So the last unit (dtsim's head layer, the final norm and the
// output projection) is gathered once a micro-batch, before its forward,
// and kept whole until its backward ends; every other layer is a unit of
// its own. (A tied output weight, which torchtitan groups with
// tok_embeddings, is not told apart.) A model without blocks keeps a unit
// per layer (a size-based policy's).
//
// Note [One process group]
// The gathers and the reduce-scatters go over the same data-parallel
// process group, and ProcessGroupNCCL runs every collective of a group on
// one NCCL stream, in the order they were issued: a gather queued behind a
// reduce-scatter waits for it. FSDP's backward (BACKWARD_PRE, the default)
// issues the prefetch of the unit below before the unit's own backward
// runs, and the unit's reduce-scatter after it: ..., reduce-scatter i+1,
// gather i-1, reduce-scatter i, gather i-2, ... (DeepSpeed's coordinator
// prefetches in the same order). So where the network is slower than the
// backward, the backward waits for the gathers queued behind the
// reductions, and the gradients in flight stay bounded. Over Gloo (ranks
// on CPU cores) the collectives run where the layers do (Note [CPU
// collectives]) and keep their streams.
// Collective buffers, held while a collective runs: a reduce-scatter
// receives the rank's shard with NCCL, the whole bucket with Gloo (an
// all-to-all, then a local sum, as dtsim validate's runtime does in LibTorch
// 1.13); a Gloo all-gather takes a copy of the shard and gathers into a flat
// buffer of the whole before copying out, where NCCL gathers in place.
// Under fp8 with fp8_param_gather the transformer blocks' GEMM weights are
// gathered in FP8, 1 byte an element (torchao's
// Float8LinearConfig.enable_fsdp_float8_all_gather, Megatron-LM's
// --fp8-param-gather; Note [FP8 memory] in lowering/emitter.hpp).
//
// Note [FSDP2's copy-out]
// FSDP2 (fully_shard) all-gathers a unit's shards into one flat buffer on
// its all-gather stream; the unit's pre-forward, and again its
// pre-backward, then waits for it on the compute stream, allocates each
// parameter's unsharded tensor and copies the flat buffer out into them
// (FSDPParamGroup.wait_for_unshard -> foreach_all_gather_copy_out,
// split_with_sizes_copy; torch/distributed/fsdp/_fully_shard/
// _fsdp_collectives.py), and the flat buffer is freed. FSDP1 gathers
// straight into its FlatParameter's padded unsharded storage, whose views
// the parameters are (flat_param.py, _all_gather_flat_param): no copy.
// So under fsdp_version 2 every gather of a unit (the root's too) costs
// the compute stream, right before the pass that needs it, one kernel
// that reads and writes the unit's gathered bytes, priced as the cost
// model prices an elementwise kernel (the HBM's bandwidth on the
// datasheet); the flat buffer is held (as a buffer) from the gather's
// start to the copy's end, the unsharded parameters from the copy's start.
//
// Note [Frozen weights under FSDP]
// FSDP2 (fully_shard) shards a LoRA fine-tune's frozen base weights with the
// adapters, each parameter on its own (torch/distributed/fsdp/_fully_shard/
// _fsdp_param_group.py, read for this note): a unit's pre-forward and
// pre-backward all-gather every one of its parameters, frozen or not
// (unshard: foreach_all_gather over all fsdp_params); the unsharded frozen
// ones keep requires_grad False, so no weight gradient is computed for
// them; and post_backward reduce-scatters only the parameters that got a
// gradient (fsdp_params_with_grad), returning early where none did. A unit
// whose outputs need no gradient (a fine-tune's frozen embedding, fed token
// ids) never has its pre-backward hook fire (_fsdp_state.py hooks outputs
// that require grad), so it is not gathered in the backward; any other
// frozen unit is (the backward still computes its input's gradient). So
// under fsdp_version 2 at full_shard and hybrid_shard a rank holds its
// shard of the frozen weights (resident_frozen(), none where parameters are
// offloaded), gathers them with its unit's trained ones, and reduces the
// adapters' gradients alone. This is torchtune's lora_finetune_distributed
// recipe (training/_distributed.py, shard_model: fully_shard on each
// layers.<i>, then on the model, the root kept whole after its forward),
// dtsim's fsdp_wrap: blocks. FSDP1's flat parameters are not modelled beside
// frozen weights: with use_orig_params False a FlatParameter refuses frozen
// and trained tensors together ("Must flatten tensors with uniform
// requires_grad"), and with it True the flat parameter requires grad
// whenever one of its tensors does, so the forward's views all do and
// autograd computes and reduce-scatters the frozen weights' gradients as
// if trained (_flat_param.py, _validate_tensors_to_flatten and
// _use_unsharded_views(as_params=False)); torchtune's old FSDP1 recipe
// wrapped each adapter as a unit of its own instead. (DeepSpeed's ZeRO-3
// shards them too: Note [Frozen weights under ZeRO-3] in
// passes/zero3_modules.cpp.) SHARD_GRAD_OP, pipelines and expert
// parallelism beside frozen weights are refused where the plan is resolved.
#include <algorithm>
#include <string>

#include "dtsim/sim/buckets.hpp"
#include "lowering/layer_context.hpp"
#include "lowering/lowering_common.hpp"
#include "lowering/zero3_coordinator.hpp"

namespace dtsim::sim::detail {
namespace {

class ShardedParameters final : public StrategyPass {
 public:
  explicit ShardedParameters(LayerContext& ctx) : ctx_(ctx), persistent_(persistent_params(ctx.plan, ctx.layers)) {
    // Note [FSDP's root unit]: the layers outside the blocks, where there are blocks.
    const auto& layers = ctx.layers;
    in_root_ = fsdp_root_layers(ctx.plan, layers);
    for (std::size_t l = 0; l < in_root_.size(); ++l) {
      if (!in_root_[l]) continue;
      if (root_first_ < 0) root_first_ = static_cast<std::int64_t>(l);
      root_params_ += layers[l].params;
      root_tensors_ += std::max(1, layers[l].param_tensors);
      // A tied head's weight is the embedding's: one copy in the root's FlatParameter.
      const Bytes tied = (layers[l].borrowed_params + (ctx.frozen_sharded ? layers[l].frozen_tied : 0)) * ctx.w;
      root_gathered_ += ctx.gathered_param_bytes(layers[l]) - tied;
      root_stored_ += ctx.full_param_bytes(layers[l]) - tied;
    }
  }

  void before_forward(const At& at, TaskDeps& deps) override {
    const std::size_t l = at.unit;
    if (l == 0 && root_first_ >= 0) {  // Note [FSDP's root unit]: the root's pre-forward
      root_gather_ = gather_root(at.micro);
      if (copy_out_) root_gather_ = copy_out(at.micro, "fwd", "root", root_gathered_, root_gather_);
    }
    if (in_root(l)) {
      deps.push_back(root_gather_);
      return;
    }
    if (!gathered(ctx_.layers[l])) return;
    // Prefetch one layer ahead: gather l may start once l-2 has run.
    std::vector<TaskId> after;
    if (l >= 2 && limit_) after.push_back(ctx_.fwd[l - 2]);
    deps.push_back(unsharded(at.micro, l, "fwd", gather(at.micro, l, "fwd", std::move(after))));
  }

  void forward_memory(const At& at, MemOps&, MemOps& on_end) override {
    if (!kept_after_forward(at.unit)) free_gathered(at, on_end);
  }

  void before_backward(const At& at, TaskDeps& deps) override {
    const std::size_t i = at.unit;
    // Note [FSDP's root unit]: torchtitan's last unit is still whole. Note
    // [Frozen weights under FSDP]: a unit without a backward gathers none.
    const bool own = unit_gathered(i) && !kept_after_forward(i) && has_backward(i);
    if (!one_group_) {
      if (own) deps.push_back(unsharded(at.micro, i, "bwd", backward_gather(at.micro, i)));
      return;
    }
    // Note [One process group]: layer i's gather (where not prefetched),
    // then the prefetch of the layer below, both queued before layer i's
    // reduce-scatter.
    if (i + 1 == ctx_.layers.size()) bwd_gather_.assign(ctx_.layers.size(), -1);
    if (own) {
      if (bwd_gather_[i] < 0) bwd_gather_[i] = backward_gather(at.micro, i);
      deps.push_back(unsharded(at.micro, i, "bwd", bwd_gather_[i]));
    }
    if (i >= 1 && unit_gathered(i - 1) && has_backward(i - 1)) bwd_gather_[i - 1] = backward_gather(at.micro, i - 1);
  }

  void backward_memory(const At& at, MemOps&, MemOps& on_end) override {
    // Note [FSDP's root unit]: the root's parameters go after its last backward.
    if (static_cast<std::int64_t>(at.unit) == root_first_) on_end.push_back({MemCategory::kParameters, -root_gathered_});
    if (has_backward(at.unit) || kept_after_forward(at.unit)) free_gathered(at, on_end);
  }

  TaskId after_backward(const At& at, TaskId last) override {
    LayerContext& c = ctx_;
    const Layer& L = c.layers[at.unit];
    const std::int64_t m = at.micro;
    // Note [FSDP's root unit]: the root's gradients wait for its last backward.
    const bool root = in_root(at.unit);
    if (root && static_cast<std::int64_t>(at.unit) != root_first_) return last;
    const std::int64_t params = root ? root_params_ : L.params;
    if (params == 0) return last;
    // One reduce-scatter per unit (a layer, or the root), every micro-step (Note [ZeRO]).
    const Bytes b = params * c.gw;
    if (c.n == 1) {
      c.compute(c.tag(m, "keep grads ", L.name), Phase::kBackward, 0, {last}, {}, {{MemCategory::kGradients, -b}});
      return last;
    }
    const std::string unit = root ? std::string("root") : L.name;
    // Note [FSDP2's reduce-scatter wait] (passes/data_parallel.cpp): FSDP2's
    // post_backward first waits for the unit before's reduce-scatter (freeing
    // its input), then copies this unit's gradients into its own input, in
    // the reduce dtype, held until the next unit's wait.
    const bool fsdp2 = c.plan.fsdp_version == 2;
    // Note [FSDP's reduce dtype]: what the reduce-scatter moves, and the
    // fp32 copy it reduces from.
    const int rw = fsdp_reduce_element_bytes(c.plan);
    const Bytes rb = params * rw, cast = rw != c.gw ? rb : 0;
    const Bytes recv = c.receive_bytes(rb);
    const TaskId waited = fsdp2 ? fsdp2_post_backward(c, m, unit, last, b, rb, previous_, held_) : last;
    const TaskId in = c.bucket_copy(c.tag(m, "copy grads in ", unit), static_cast<double>(params),
                                    root ? root_tensors_ : std::max(1, L.param_tensors), false, {waited});
    MemOps taken{{MemCategory::kBuffers, recv + cast}}, freed{{MemCategory::kGradients, -b}, {MemCategory::kBuffers, -recv - cast}};
    if (fsdp2) {
      taken = {{MemCategory::kBuffers, recv}};
      freed = {{MemCategory::kBuffers, -recv}};
    }
    TaskId rs = c.collective(c.tag(m, "reduce_scatter ", unit), CollectiveOp::kReduceScatter, rb, c.shard_group,
                             one_group_ ? Stream::kParamComm : Stream::kGradComm, {in}, std::move(taken), std::move(freed),
                             root ? 0 : L.expert_params * rw);
    const TaskId scattered = rs;
    // Note [Hybrid sharding]: the dense shard over n ranks, the experts'
    // over ne (the whole experts where ne is 1).
    const Bytes expert_rb = root ? 0 : L.expert_params * rw;
    const std::int64_t ne = std::max(1, c.plan.expert_shard_group);
    const Bytes shard_rb = LayerContext::ceil_div(rb - expert_rb, c.n) + LayerContext::ceil_div(expert_rb, ne);
    if (c.replica_group.ranks > 1 || c.expert_replica_group.ranks > 1) {
      // HYBRID_SHARD: the shards all-reduced across the replicas; reduce-
      // scattered where the optimizer state is sharded across them too.
      const bool outer = c.plan.outer_optim;
      rs = c.collective(c.tag(m, outer ? "reduce_scatter shard " : "all_reduce shard ", unit),
                        outer ? CollectiveOp::kReduceScatter : CollectiveOp::kAllReduce, shard_rb, c.replica_group, Stream::kGradComm, {rs}, {}, {},
                        LayerContext::ceil_div(expert_rb, ne), &c.expert_replica_group);
    }
    c.reduced(at, rs, root ? LayerContext::ceil_div(b, c.n) : LayerContext::ceil_div(b - L.expert_params * c.gw, c.n) +
                                                                  LayerContext::ceil_div(L.expert_params * c.gw, ne));
    if (!fsdp2) return last;
    // The next unit's wait is for this reduce-scatter, not the all-reduce across replicas.
    previous_ = scattered;
    return waited;
  }

  void end_backward(const At& at, TaskId last) override {
    fsdp2_end_backward(ctx_, at, last, previous_, held_);
    previous_ = -1;
  }

  void after_step(int, TaskId step) override { gather_persistent(ctx_, persistent_, step); }

 private:
  /// Whether a layer's parameters are gathered (Note [ZeRO]).
  bool gathered(const Layer& l) const {
    const std::int64_t all = l.params + l.borrowed_params + ctx_.gathered_frozen(l);
    return ctx_.n > 1 && all > 0 && !zero3_keeps_whole(ctx_.plan, all);
  }
  /// Whether layer l runs a backward (Note [Frozen weights under FSDP]: a
  /// fine-tune's frozen embedding has none, and FSDP2's pre-backward hook,
  /// on outputs that need no gradient, never fires).
  bool has_backward(std::size_t l) const { return !ctx_.layers[l].backward.empty(); }

  /// Whether layer l is in FSDP's root unit (Note [FSDP's root unit]).
  bool in_root(std::size_t l) const { return !in_root_.empty() && in_root_[l]; }
  /// Whether layer l is gathered as a unit of its own, before each pass.
  bool unit_gathered(std::size_t l) const { return gathered(ctx_.layers[l]) && !in_root(l); }
  /// Whether layer l is torchtitan's last unit, kept whole from its forward
  /// to its backward (Note [FSDP's root unit]).
  bool kept_after_forward(std::size_t l) const {
    return ctx_.plan.fsdp_wrap == FsdpWrap::kTorchtitan && l + 1 == ctx_.layers.size() && unit_gathered(l);
  }

  /// A unit's gathered parameters go when its pass ends.
  void free_gathered(const At& at, MemOps& on_end) const {
    const Layer& L = ctx_.layers[at.unit];
    if (unit_gathered(at.unit)) on_end.push_back({MemCategory::kParameters, -ctx_.gathered_param_bytes(L)});
  }

  /// Layer i's gather for its backward: the prefetch as forward's, after
  /// the layer two above, or (for the top two layers) after the forward's
  /// last but one.
  TaskId backward_gather(std::int64_t m, std::size_t i) {
    std::vector<TaskId> after;
    if (!limit_) return gather(m, i, "bwd", std::move(after));
    if (i + 2 < ctx_.layers.size()) {
      after.push_back(ctx_.bwd[i + 2]);
    } else if (i >= 1) {
      after.push_back(ctx_.fwd_of_bwd[i - 1]);
    }
    return gather(m, i, "bwd", std::move(after));
  }

  /// (Offloaded parameters up, then) the all-gather of layer l; `after`
  /// bounds the prefetch.
  TaskId gather(std::int64_t m, std::size_t l, const char* pass, std::vector<TaskId> after) {
    const Layer& L = ctx_.layers[l];
    const Bytes full = ctx_.gathered_param_bytes(L);
    return gather_unit(m, pass, L.name, full, ctx_.full_param_bytes(L), std::min(full, ctx_.expert_grad_bytes(L)), std::move(after));
  }

  /// The root unit's gather, before micro-batch m's forward (Note [FSDP's root unit]).
  TaskId gather_root(std::int64_t m) { return gather_unit(m, "fwd", "root", root_gathered_, root_stored_, 0, {}); }

  /// What layer l's pass `pass` waits for: its gather, or under FSDP2 the
  /// copy-out after it (Note [FSDP2's copy-out]).
  TaskId unsharded(std::int64_t m, std::size_t l, const char* pass, TaskId gathered) {
    if (!copy_out_) return gathered;
    return copy_out(m, pass, ctx_.layers[l].name, ctx_.gathered_param_bytes(ctx_.layers[l]), gathered);
  }

  /// Note [FSDP2's copy-out]: `full` gathered bytes of unit `unit` copied
  /// out of the flat buffer on the compute stream, after `gathered`.
  TaskId copy_out(std::int64_t m, const char* pass, const std::string& unit, Bytes full, TaskId gathered) {
    return fsdp2_copy_out(ctx_, ctx_.tag(m, std::string("copy out ") + pass + " " + unit),
                          pass[0] == 'f' ? Phase::kForward : Phase::kBackward, full, gathered, {{MemCategory::kParameters, full}});
  }

  /// The all-gather of unit `unit` for pass `pass`: `full` bytes gathered,
  /// `stored` bytes as its parameters' type, `expert` of them the routed experts'.
  TaskId gather_unit(std::int64_t m, const char* pass, const std::string& unit, Bytes full, Bytes stored, Bytes expert,
                     std::vector<TaskId> after) {
    LayerContext& c = ctx_;
    TaskDeps deps = std::move(after);
    if (c.plan.offload_params == Offload::kCpu) {
      // The bf16 shard comes up; FP8 casts happen on the device.
      const Bytes shard = LayerContext::ceil_div(stored, c.n);
      deps.push_back(c.copy(c.tag(m, "h2d params ", unit), shard, Stream::kH2D, deps));
    }
    const Bytes buffers = c.gather_bytes(full);
    // Note [FSDP2's copy-out]: FSDP2 gathers into a flat buffer the copy-out frees.
    MemOps on_start{{copy_out_ ? MemCategory::kBuffers : MemCategory::kParameters, full}}, on_end;
    add_bytes(on_start, MemCategory::kBuffers, buffers);
    add_bytes(on_end, MemCategory::kBuffers, -buffers);
    const std::string name = std::string("all_gather ") + pass + " " + unit;
    const TaskId g = c.collective(c.tag(m, name), CollectiveOp::kAllGather, full, c.shard_group, Stream::kParamComm, deps,
                                  std::move(on_start), std::move(on_end), expert);
    if (!c.cluster.device.comm_overlaps_compute) {
      // Note [CPU collectives]: the gather is issued early (its buffer is
      // alive from then), but its transfers run on the cores the layers
      // compute on. Its time is taken from the compute stream, in order
      // before the layer that needs it.
      c.compute(c.tag(m, name + " (cores)"), Phase::kComm, c.g.tasks[g].cost.total(), std::move(deps));
    }
    return g;
  }

  LayerContext& ctx_;
  std::int64_t persistent_ = 0;  ///< parameters of the layers kept whole
  /// Note [One process group]: gathers and reduce-scatters queue on one
  /// stream (where collectives overlap compute at all).
  bool one_group_ = ctx_.cluster.device.comm_overlaps_compute;
  /// Gathers wait for the layer two back (FSDP's limit_all_gathers; ZeRO-3's prefetch).
  bool limit_ = ctx_.plan.limit_all_gathers;
  /// Note [FSDP2's copy-out]: each gather copied out on the compute stream.
  bool copy_out_ = ctx_.plan.fsdp_version == 2;
  std::vector<TaskId> bwd_gather_;  ///< this backward's gathers, by layer (-1: not yet)
  TaskId previous_ = -1;  ///< FSDP2: this backward's last reduce-scatter (Note [FSDP2's reduce-scatter wait])
  MemOps held_;           ///< FSDP2: its input, freed by the next wait
  // Note [FSDP's root unit] (empty in_root_: no root unit).
  std::vector<bool> in_root_;      ///< by layer
  std::int64_t root_first_ = -1;   ///< its first layer, whose backward is its last
  std::int64_t root_params_ = 0;   ///< its trained parameters (a tied weight once)
  int root_tensors_ = 0;
  Bytes root_gathered_ = 0;        ///< its bytes once gathered
  Bytes root_stored_ = 0;          ///< its bytes as stored (frozen ones too, where FSDP shards them)
  TaskId root_gather_ = -1;        ///< this micro-batch's gather of it
};

}  // namespace

std::int64_t persistent_params(const ResolvedPlan& plan, const std::vector<Layer>& layers) {
  // Note [ZeRO-3 modules]: DeepSpeed's coordinator keeps small tensors whole.
  if (plan.zero3_modules()) return persistent_elements(layers, plan.stage3_param_persistence_threshold);
  std::int64_t n = 0;
  for (const auto& l : layers) {
    if (zero3_keeps_whole(plan, l.params + l.borrowed_params)) n += l.params;
  }
  return n;
}

void gather_persistent(LayerContext& ctx, std::int64_t persistent, TaskId step) {
  if (persistent == 0) return;
  // The persistent parameters' shards, coalesced into one flat buffer, then
  // copied out to their tensors.
  const Bytes all = persistent * ctx.w, buffers = all + ctx.gather_bytes(all);
  ctx.collective("all_gather persistent params", CollectiveOp::kAllGather, all, ctx.shard_group, Stream::kGradComm, {step},
                 {{MemCategory::kBuffers, buffers}}, {{MemCategory::kBuffers, -buffers}});
}

TimeNs fsdp2_copy_out_time(const StageContext& c, Bytes full) {
  Kernel k;
  k.name = "fsdp.copy_out";
  k.kind = KernelKind::kElementwise;
  k.bytes = 2 * full;  // read the flat buffer, write the parameters
  return c.compute_model.kernel_time(k, c.plan.precision);
}

TaskId fsdp2_copy_out(LayerContext& c, const std::string& name, Phase phase, Bytes full, TaskId gathered, MemOps on_start) {
  const TaskId id = c.compute(name, phase, fsdp2_copy_out_time(c, full), {gathered}, std::move(on_start), {{MemCategory::kBuffers, -full}});
  c.g.tasks[id].memory_share = 1;  // a copy (Note [Interference] in engine/executor.cpp)
  return id;
}

std::unique_ptr<StrategyPass> sharded_parameters_pass(LayerContext& ctx) {
  return std::make_unique<ShardedParameters>(ctx);
}

}  // namespace dtsim::sim::detail
