// The FSDP pass of a pipeline: FULL_SHARD stages as torch.distributed.pipelining
// runs them (torchtitan's FSDP + PP, NeMo Automodel's).
//
// Note [FSDP under a pipeline]
// DeepSpeed refuses ZeRO-2 and -3 with its pipeline engine, but PyTorch's
// pipelining runs a stage module wrapped by FSDP2 (fully_shard), as
// torchtitan and NeMo Automodel do, keeping the sharding and changing when
// it gathers and reduces:
//  - every backward of a stage, the last micro-batch's too, runs with
//    set_requires_gradient_sync(False), set_reshard_after_backward(False)
//    and set_is_last_backward(False) (torch/distributed/pipelining/
//    stage.py, _PipelineStageBase.backward_maybe_with_nosync): the
//    gradients are not reduce-scattered but accumulate unsharded, in FSDP's
//    reduce dtype where it differs from the parameters' (_fsdp_param.py,
//    to_accumulated_grad_if_needed upcasts the first bf16 gradient to an
//    fp32 unsharded_accumulated_grad, accumulate_unsharded_grad_if_needed
//    adds the next ones into it; fp32 under torchtitan's
//    mixed_precision_reduce default and Automodel's MoE policy), and the
//    parameters stay gathered;
//  - under a pipeline torchtitan does not reshard after forward
//    (torchtitan/distributed/fsdp.py, get_fsdp_reshard_after_forward_policy:
//    "default" is `not pp_enabled`, "to avoid per-microbatch all-gathers";
//    Automodel's MoE parallelizer the same, reshard_after_forward False):
//    unshard() is a no-op once gathered, so a unit is gathered at the first
//    micro-batch's forward and stays whole through every micro-batch;
//  - after the stage's last backward has run whole, each param group's
//    post_backward is called by hand with the flags set back (the reshard,
//    then one reduce-scatter of the accumulated gradient on FSDP's
//    reduce-scatter stream) and the root's final callback makes the stream
//    wait for them (PyTorch 2.6 to 2.9, and Automodel's patched copy of
//    it); PyTorch 2.10 moves the same calls into the schedule
//    (perform_reduce_grad, after the stage's last backward-like action,
//    PR #165106 and #166449, so other stages are not held by the wait).
//    Either way the reductions follow the stage's backward and do not
//    overlap it, and the step follows them.
// So each chunk (a stage module; v of them a stage when interleaved) is
// lowered as: one all-gather of its parameters in working precision over
// the data-parallel group, issued as the forward before its first one
// starts (FSDP2's prefetch of the next unit; the stage's first chunk at
// the start), its first forward after it; its parameters whole from then
// to its last backward; its gradients, params x the reduce dtype's bytes,
// from its first backward; after its last backward one reduce-scatter of
// them, the gathered parameters freed as it starts (the reshard) and the
// unsharded gradients as it ends. The sharded states are resident as under
// FSDP without a pipeline (model_states at stage 3), the step updates the
// shard and gathers nothing after it. One unit a chunk, not one a block:
// the gathers all happen before the first micro-batch's forwards and the
// reductions after the last backward, so only their total is exposed, not
// the units' overlap inside a pass, which this leaves out. Not modelled:
// PyTorch 2.10's multi-stage runtime unsharding and resharding a rank's
// stages in a window of three (_add_unshard_reshard, max_active_stages=3),
// which gathers again within a step where a rank holds more than three
// chunks; reshard_after_forward "always" (gathered again for each backward).
// Each gather lands in FSDP2's flat buffers, copied out into the parameters
// on the compute stream before the chunk's first forward (Note [FSDP2's
// copy-out] in passes/sharded_parameters.cpp): its time, not the one
// block's buffer it holds beside them.
#include <algorithm>
#include <string>
#include <vector>

#include "lowering/chunk_context.hpp"
#include "lowering/layer_context.hpp"
#include "lowering/lowering_common.hpp"

namespace dtsim::sim::detail {
namespace {

class FsdpPipeline final : public StrategyPass {
 public:
  explicit FsdpPipeline(ChunkContext& ctx) : ctx_(ctx) {
    gather_.assign(ctx.chunks.size(), -1);
    last_forward_.assign(static_cast<std::size_t>(ctx.plan.pp), -1);
  }

  void before_forward(const At& at, TaskDeps& deps) override {
    if (gather_[at.unit] >= 0 || !sharded()) return;
    ChunkContext& c = ctx_;
    const Chunk& ch = c.chunks[at.unit];
    const Bytes bytes = ch.params * c.w;
    // Issued as the stage's forward before this chunk's first one starts
    // (FSDP2's prefetch of the next unit); the stage's first, at the start.
    TaskDeps after;
    if (last_forward_[static_cast<std::size_t>(at.rank)] >= 0) after.push_back(last_forward_[static_cast<std::size_t>(at.rank)]);
    const TaskId g = c.b.collective(c.named ? "all_gather params chunk " + std::to_string(at.unit) : std::string(), at.rank,
                                    c.stream(Stream::kGradComm), Axis::kDp, CollectiveOp::kAllGather, bytes,
                                    c.grad_cost(CollectiveOp::kAllGather, bytes, std::min(bytes, ch.expert_params * c.w), c.dp_group),
                                    std::move(after), {{MemCategory::kParameters, bytes}});
    // Note [FSDP2's copy-out]: the flat buffer copied into the parameters.
    // FSDP gathers a block at a time, so the flat buffer is a block's, not
    // the chunk's this pass gathers at once: its time is counted, its
    // memory (one block beside the chunk's parameters) is not.
    gather_[at.unit] = c.b.compute(c.named ? "copy out params chunk " + std::to_string(at.unit) : std::string(), at.rank,
                                   c.stream(Stream::kCompute), Phase::kForward, fsdp2_copy_out_time(c, bytes), {g});
    c.g.tasks[gather_[at.unit]].memory_share = 1;  // a copy (Note [Interference] in engine/executor.cpp)
    deps.push_back(gather_[at.unit]);
  }

  TaskId after_forward(const At& at, TaskId last) override {
    last_forward_[static_cast<std::size_t>(at.rank)] = ctx_.f_entry[ctx_.cell(static_cast<int>(at.unit), at.micro)];
    return last;
  }

  TaskId after_backward(const At& at, TaskId last) override {
    if (!at.last_backward) return last;
    ChunkContext& c = ctx_;
    const Chunk& ch = c.chunks[at.unit];
    const Bytes rb = ch.params * c.accumulated_w;
    if (!sharded()) {
      // One rank: the accumulated gradients are the shard the model states count.
      c.b.compute(c.named ? "keep grads chunk " + std::to_string(at.unit) : std::string(), at.rank, c.stream(Stream::kCompute),
                  Phase::kBackward, 0, {last}, {}, {{MemCategory::kGradients, -rb}});
      return last;
    }
    const TaskId rs = c.b.collective(
        c.named ? "reduce_scatter grads chunk " + std::to_string(at.unit) : std::string(), at.rank, c.stream(Stream::kGradComm),
        Axis::kDp, CollectiveOp::kReduceScatter, rb,
        c.grad_cost(CollectiveOp::kReduceScatter, rb, std::min(rb, ch.expert_params * c.accumulated_w), c.dp_group), {last},
        {{MemCategory::kParameters, -ch.params * c.w}}, {{MemCategory::kGradients, -rb}});
    c.reduced(at, rs, 0);
    return last;
  }
  /// Under zb-h1 the gradients are final with the chunk's last weight pass.
  TaskId after_weight(const At& at, TaskId last) override { return after_backward(at, last); }

 private:
  /// Whether the data-parallel group shards at all (one rank: no collectives).
  bool sharded() const { return ctx_.plan.shard_group > 1; }

  ChunkContext& ctx_;
  std::vector<TaskId> gather_;        ///< by chunk: its gather (-1: not yet)
  std::vector<TaskId> last_forward_;  ///< by stage: its latest forward's first task
};

}  // namespace

std::unique_ptr<StrategyPass> fsdp_pipeline_pass(ChunkContext& ctx) { return std::make_unique<FsdpPipeline>(ctx); }

}  // namespace dtsim::sim::detail
