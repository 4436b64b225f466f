// The context-parallel pass: the exchange of keys and values among the
// ranks that split each sequence (Note [Context parallelism] in
// models/src/layers.cpp), over the mesh's cp axis.
#include <algorithm>

#include "lowering/lowering_common.hpp"
#include "lowering/pass.hpp"

namespace dtsim::sim::detail {

// Note [Context-parallel exchange]
// The p2p ring (Megatron-Core's default; Transformer Engine's
// AttnFuncWithCPAndKVP2P) runs cp steps of attention, each against one K/V
// block, and sends the block in hand on to the next rank while it computes:
// cp - 1 transfers, each hidden behind a step of attention. A step exposes
// what its transfer takes beyond its compute, so a layer exposes
//   (cp - 1) x max(0, T_comm / (cp - 1) - T_attention / cp)
// where T_attention is the time of the layer's attention kernels (marked
// Kernel::cp_overlap) and T_comm that of the whole exchange. The all-gather
// (the Llama 3 paper's scheme) runs before attention and is exposed whole.
// The exposed part is one task after the layer's kernels on the compute
// stream, priced on the link the exchange uses; a hidden ring leaves no
// task. Simulating each ring step would cost cp tasks per layer, growing
// with GPUs; this costs at most one.
CollectiveCost cp_exposed_cost(const Layer& layer, Pass pass, const ResolvedPlan& plan, const CommGroup& cp_group,
                               const CommModel& comm, const ComputeModel& compute, Bytes& bytes) {
  const auto& ops = pass == Pass::kForward ? layer.cp_forward : layer.cp_backward;
  bytes = 0;
  if (ops.empty()) return {};
  CollectiveCost all = sum_costs(ops, cp_group, comm);
  for (const auto& o : ops) bytes += o.bytes * o.count;
  if (plan.cp_comm == CpComm::kAllGather) return all;
  std::vector<Kernel> hiding;
  for (const auto& k : pass == Pass::kForward ? layer.forward : layer.backward) {
    if (k.cp_overlap) hiding.push_back(k);
  }
  const double t_attention = static_cast<double>(compute.kernels_time(hiding, kernel_precision(layer, plan.precision)));
  const double t_comm = static_cast<double>(all.total());
  const double steps = plan.cp - 1;
  const double exposed = steps * std::max(0.0, t_comm / steps - t_attention / plan.cp);
  if (t_comm <= 0 || exposed <= 0) return {};
  const double part = exposed / t_comm;
  all.latency = static_cast<TimeNs>(static_cast<double>(all.latency) * part);
  all.wire_bytes *= part;
  return all;
}

void add_flow(CollectiveCost& into, const CollectiveCost& one) {
  if (one.wire_bytes <= 0 && one.latency == 0) return;
  const double seconds = (into.rate > 0 ? into.wire_bytes / into.rate : 0) + (one.rate > 0 ? one.wire_bytes / one.rate : 0);
  if (into.algorithm.empty()) {
    into.algorithm = one.algorithm;
    into.link = one.link;
  }
  into.latency += one.latency;
  into.wire_bytes += one.wire_bytes;
  into.rate = seconds > 0 ? into.wire_bytes / seconds : 1e30;
  add_stalls(into, one, 1);
}

namespace {

class ContextParallel final : public StrategyPass {
 public:
  explicit ContextParallel(StageContext& ctx) : ctx_(ctx) {}

  TaskId after_forward(const At& at, TaskId last) override { return after(at, last, true); }
  TaskId after_backward(const At& at, TaskId last) override { return after(at, last, false); }

 private:
  TaskId after(const At& at, TaskId last, bool forward) {
    const Unit& u = ctx_.units[at.unit];
    const CollectiveCost& cost = forward ? u.cp_forward_cost : u.cp_backward_cost;
    if (cost.wire_bytes <= 0 && cost.latency == 0) return last;
    const CollectiveOp op = ctx_.plan.cp_comm == CpComm::kAllGather ? CollectiveOp::kAllGather : CollectiveOp::kSendRecv;
    return ctx_.b.collective(ctx_.tag(at.micro, forward ? "cp fwd " : "cp bwd ", u.name), at.rank,
                             ctx_.stream(Stream::kCompute), Axis::kCp, op,
                             forward ? u.cp_forward_bytes : u.cp_backward_bytes, cost, {last});
  }

  StageContext& ctx_;
};

}  // namespace

std::unique_ptr<StrategyPass> context_parallel_pass(StageContext& ctx) {
  if (ctx.plan.cp <= 1) return nullptr;
  return std::make_unique<ContextParallel>(ctx);
}

}  // namespace dtsim::sim::detail
