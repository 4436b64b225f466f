// The tensor-parallel pass: Megatron-LM's collectives (Shoeybi et al. 2019;
// with sequence parallelism, Korthikanti et al. 2022, their all-gathers and
// reduce-scatters) after a unit's kernels, run serially on the compute
// stream as Megatron runs them. A layer's or chunk's collectives are one
// task, priced as one flow (sum_costs in lowering_common.hpp) over the
// tensor-parallel group of the mesh.
#include <algorithm>

#include "lowering/lowering_common.hpp"
#include "lowering/pass.hpp"

namespace dtsim::sim::detail {

// Note [TP comm overlap]
// With --tp-comm-overlap Megatron-Core hands sequence parallelism's
// all-gathers and reduce-scatters to Transformer Engine's userbuffers, which
// split each GEMM beside one into tp chunks and move chunk i's data while
// chunk i-1 multiplies (TE's ring-exchange overlap). The first chunk's
// transfer waits for nothing to hide behind; the other tp - 1 hide behind
// the GEMMs, so a layer exposes
//   T_comm / tp + (tp - 1) / tp x max(0, T_comm - T_gemm)
// with T_comm its collectives' time and T_gemm its GEMMs' in that pass.
// A plain NCCL call beside them (LayerComm::serial: a LoRA adapter's) is
// not the userbuffers' and stays whole.
static CollectiveCost hidden_cost(const CollectiveCost& cost, const Layer& layer, Pass pass, const ResolvedPlan& plan,
                           const ComputeModel& compute) {
  std::vector<Kernel> gemms;
  for (const auto& k : pass == Pass::kForward ? layer.forward : layer.backward) {
    if (k.kind == KernelKind::kGemm) gemms.push_back(k);
  }
  const double t_gemm = static_cast<double>(compute.kernels_time(gemms, kernel_precision(layer, plan.precision)));
  const double t_comm = static_cast<double>(cost.total());
  if (t_comm <= 0) return cost;
  const double tp = plan.tp;
  const double exposed = t_comm / tp + (tp - 1) / tp * std::max(0.0, t_comm - t_gemm);
  CollectiveCost out = cost;
  const double part = std::min(1.0, exposed / t_comm);
  out.latency = static_cast<TimeNs>(static_cast<double>(cost.latency) * part);
  out.wire_bytes *= part;
  return out;
}

CollectiveCost tp_exposed_cost(const std::vector<LayerComm>& ops, const CommGroup& group, const CommModel& comm, const Layer& layer,
                               Pass pass, const ResolvedPlan& plan, const ComputeModel& compute) {
  if (!plan.tp_comm_overlap || plan.tp <= 1) return sum_costs(ops, group, comm);
  // Every layer but a LoRA fine-tune's: no copies on the lowering's path.
  if (std::none_of(ops.begin(), ops.end(), [](const LayerComm& o) { return o.serial; })) {
    return hidden_cost(sum_costs(ops, group, comm), layer, pass, plan, compute);
  }
  std::vector<LayerComm> hidden, serial;
  for (const LayerComm& o : ops) (o.serial ? serial : hidden).push_back(o);
  CollectiveCost out = hidden_cost(sum_costs(hidden, group, comm), layer, pass, plan, compute);
  if (!serial.empty()) add_flow(out, sum_costs(serial, group, comm));
  return out;
}

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
    return ctx_.b.collective(ctx_.tag(at.micro, forward ? "tp fwd " : "tp bwd ", u.name), at.rank,
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
