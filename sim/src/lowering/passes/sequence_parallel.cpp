// The sequence-parallel pass: the gradients of the parameters used on a
// rank's tokens only, summed over the tensor-parallel group before the step.
//
// Note [Sequence-parallel gradients]
// Under sequence parallelism (Korthikanti et al. 2022) each tensor-parallel
// rank runs the norms, the biases added after a reduce-scatter, and the
// layers that read the residual stream before a gather (a latent
// attention's down-projections, a router) on its 1/tp of the tokens, so it
// holds part of their gradients (Layer::sp_params). Megatron-Core sums them
// once a step, after the data-parallel reduction and before the optimizer:
// finalize_model_grads' _allreduce_non_tensor_model_parallel_grads
// (megatron/core/distributed/finalize_model_grads.py) flattens every such
// gradient (main_grad: fp32 under accumulate_allreduce_grads_in_fp32, so
// the gradient element's bytes) into one all-reduce over the group. So a
// stage's step waits for one all-reduce of sp_params x the gradient
// element's bytes over its tensor-parallel group, after its reductions.
// dtsim validate's runtime does the same (trainer.cpp).
#include "lowering/lowering_common.hpp"
#include "lowering/pass.hpp"

namespace dtsim::sim::detail {
namespace {

class SequenceParallel final : public StrategyPass {
 public:
  explicit SequenceParallel(StageContext& ctx) : ctx_(ctx) {}

  void before_step(int stage, TaskDeps& deps, MemOps&) override {
    const auto s = static_cast<std::size_t>(stage);
    if (s >= ctx_.sp_params.size() || ctx_.sp_params[s] <= 0) return;
    // nanotron sums them from its fp32 accumulator (sync_tied_weights_gradients): wire_bytes.
    const Bytes bytes = ctx_.wire_bytes(ctx_.sp_params[s] * ctx_.gw);
    const TaskId t = ctx_.b.collective(ctx_.named ? "all_reduce sequence-parallel grads" : std::string(), stage,
                                       ctx_.stream(Stream::kGradComm), Axis::kTp, CollectiveOp::kAllReduce, bytes,
                                       ctx_.comm.collective(CollectiveOp::kAllReduce, bytes, ctx_.tp_group), deps);
    deps.push_back(t);
  }

 private:
  StageContext& ctx_;
};

}  // namespace

std::unique_ptr<StrategyPass> sequence_parallel_pass(StageContext& ctx) {
  if (!ctx.plan.sequence_parallel || ctx.plan.tp <= 1) return nullptr;
  return std::make_unique<SequenceParallel>(ctx);
}

}  // namespace dtsim::sim::detail
