// The SyncBatchNorm pass: the statistics a batch norm layer gathers over
// the data-parallel group in forward and the gradient sums it all-reduces in
// backward (Note [SyncBatchNorm] in models/src/convnet.cpp). PyTorch runs
// them inside the layer's autograd function on the compute stream, so a
// unit's are one task right after its kernels (as the expert-parallel
// all-to-alls are), priced as one flow over the data-parallel group.
#include "lowering/lowering_common.hpp"
#include "lowering/pass.hpp"

namespace dtsim::sim::detail {
namespace {

class SyncBatchNorm final : public StrategyPass {
 public:
  explicit SyncBatchNorm(StageContext& ctx) : ctx_(ctx) {}

  TaskId after_forward(const At& at, TaskId last) override { return after(at, last, true); }
  TaskId after_backward(const At& at, TaskId last) override { return after(at, last, false); }

 private:
  TaskId after(const At& at, TaskId last, bool forward) {
    const Unit& u = ctx_.units[at.unit];
    const Bytes bytes = forward ? u.dp_forward_bytes : u.dp_backward_bytes;
    if (bytes <= 0) return last;
    return ctx_.b.collective(ctx_.tag(at.micro, forward ? "sync bn fwd " : "sync bn bwd ", u.name), at.rank,
                             ctx_.stream(Stream::kCompute), Axis::kDp,
                             forward ? CollectiveOp::kAllGather : CollectiveOp::kAllReduce, bytes,
                             forward ? u.dp_forward_cost : u.dp_backward_cost, {last});
  }

  StageContext& ctx_;
};

}  // namespace

std::unique_ptr<StrategyPass> sync_batch_norm_pass(StageContext& ctx) {
  if (!ctx.plan.sync_batchnorm || ctx.plan.dp <= 1) return nullptr;
  return std::make_unique<SyncBatchNorm>(ctx);
}

}  // namespace dtsim::sim::detail
