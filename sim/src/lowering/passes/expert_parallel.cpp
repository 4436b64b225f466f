// The expert-parallel pass: a mixture-of-experts layer's token dispatch and
// combine, all-to-all over the expert-parallel group (Note [Mixture of
// experts] in models/src/llama.cpp, Note [Expert mesh] in cost_comm.cpp).
// Megatron-Core's alltoall dispatcher runs them on the compute stream,
// between the router and the experts and after the experts, so a unit's
// all-to-alls are one task right after its kernels (as the tensor-parallel
// collectives are), priced as one flow. Under --overlap-moe-expert-parallel-comm
// that task runs on a stream of its own, and the emitter makes the unit's
// next pass wait for it (Note [Expert-parallel overlap] in layer_stage.cpp).
#include "lowering/lowering_common.hpp"
#include "lowering/pass.hpp"

namespace dtsim::sim::detail {
namespace {

class ExpertParallel final : public StrategyPass {
 public:
  explicit ExpertParallel(StageContext& ctx)
      : ctx_(ctx), stream_(ctx.plan.overlap_moe_expert_parallel_comm ? Stream::kEpComm : Stream::kCompute) {}

  TaskId after_forward(const At& at, TaskId last) override { return after(at, last, true); }
  TaskId after_backward(const At& at, TaskId last) override { return after(at, last, false); }

 private:
  TaskId after(const At& at, TaskId last, bool forward) {
    const Unit& u = ctx_.units[at.unit];
    const Bytes bytes = forward ? u.ep_forward_bytes : u.ep_backward_bytes;
    if (bytes <= 0) return last;
    return ctx_.b.collective(ctx_.tag(at.micro, forward ? "ep fwd " : "ep bwd ", u.name), at.rank,
                             ctx_.stream(stream_), Axis::kEp, CollectiveOp::kAllToAll, bytes,
                             forward ? u.ep_forward_cost : u.ep_backward_cost, {last});
  }

  StageContext& ctx_;
  Stream stream_;
};

}  // namespace

std::unique_ptr<StrategyPass> expert_parallel_pass(StageContext& ctx) {
  if (ctx.plan.ep <= 1) return nullptr;
  return std::make_unique<ExpertParallel>(ctx);
}

}  // namespace dtsim::sim::detail
