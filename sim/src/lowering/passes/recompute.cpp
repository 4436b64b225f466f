// The recompute pass: activation checkpointing (Chen et al. 2016; Megatron-LM's
// full and selective recompute, Korthikanti et al. 2022). A unit's forward
// frees what it will rebuild (Unit::forward_drop); before its backward one
// task runs the forward again (full) or the attention core (selective),
// allocating the activations it rebuilds. What each unit keeps and rebuilds
// is the emitter's pricing (Unit::Recompute; Note [Activation memory] in
// models/src/layers.cpp).
#include "lowering/lowering_common.hpp"
#include "lowering/pass.hpp"

namespace dtsim::sim::detail {
namespace {

class Recomputation final : public StrategyPass {
 public:
  explicit Recomputation(StageContext& ctx) : ctx_(ctx) {}

  void forward_memory(const At& at, MemOps&, MemOps& on_end) override {
    add_bytes(on_end, MemCategory::kActivations, -ctx_.units[at.unit].forward_drop);
  }

  void before_backward(const At& at, TaskDeps& deps) override {
    const Unit& u = ctx_.units[at.unit];
    if (!u.recompute.runs || u.recompute.taken) return;
    MemOps on_end;
    add_bytes(on_end, MemCategory::kActivations, -u.recompute.frees);
    const TaskId t = ctx_.b.compute(ctx_.tag(at.micro, u.recompute.label, " ", u.name), at.rank,
                                    ctx_.stream(Stream::kCompute), Phase::kRecompute, u.recompute.time, deps,
                                    {{MemCategory::kActivations, u.recompute.allocates}}, std::move(on_end));
    ctx_.g.tasks[t].launch = u.recompute.launch;
    ctx_.g.tasks[t].memory_share = u.recompute.memory_share;  // Note [Interference] in engine/executor.cpp
    deps.push_back(t);
  }

 private:
  StageContext& ctx_;
};

}  // namespace

std::unique_ptr<StrategyPass> recompute_pass(StageContext& ctx) {
  if (ctx.plan.recompute == Recompute::kNone) return nullptr;
  return std::make_unique<Recomputation>(ctx);
}

}  // namespace dtsim::sim::detail
