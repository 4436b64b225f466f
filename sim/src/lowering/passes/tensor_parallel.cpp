// The tensor-parallel pass: Megatron-LM's collectives (Shoeybi et al. 2019;
// with sequence parallelism, Korthikanti et al. 2022, their all-gathers and
// reduce-scatters) after a unit's kernels, run serially on the compute
// stream as Megatron runs them. A layer's or chunk's collectives are one
// task, priced as one flow (sum_costs in lowering_common.hpp) over the
// tensor-parallel group of the mesh.
#include "lowering/pass.hpp"

namespace dtsim::sim::detail {
namespace {

class TensorParallel final : public StrategyPass {
 public:
  explicit TensorParallel(StageContext& ctx) : ctx_(ctx) {}

  TaskId after_forward(const At& at, TaskId last) override { return after(at, last, true); }
  TaskId after_backward(const At& at, TaskId last) override { return after(at, last, false); }

 private:
  TaskId after(const At& at, TaskId last, bool forward) {
    const Unit& u = ctx_.units[at.unit];
    const std::vector<LayerComm>* ops = forward ? u.tp_forward : u.tp_backward;
    if (ctx_.plan.tp <= 1 || ops == nullptr || ops->empty()) return last;
    Bytes bytes = 0;
    for (const auto& o : *ops) bytes += o.bytes * o.count;
    return ctx_.b.collective(ctx_.tag(at.micro, std::string(forward ? "tp fwd " : "tp bwd ") + u.name), at.rank,
                             ctx_.stream(Stream::kCompute), ops->front().axis, ops->front().op, bytes,
                             forward ? u.tp_forward_cost : u.tp_backward_cost, {last});
  }

  StageContext& ctx_;
};

}  // namespace

std::unique_ptr<StrategyPass> tensor_parallel_pass(StageContext& ctx) {
  if (ctx.plan.tp <= 1) return nullptr;
  return std::make_unique<TensorParallel>(ctx);
}

}  // namespace dtsim::sim::detail
