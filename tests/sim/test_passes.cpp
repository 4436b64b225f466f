// The contract of the lowering's strategy passes (Note [Strategy passes] in
// sim/src/lowering/pass.hpp): which hook runs when, in what order, and who
// wins where one pass takes a step over. A white-box test of a private
// header: every emitter relies on this order to nest its strategies.
#include <catch2/catch.hpp>

#include <string>
#include <vector>

#include "dtsim/sim/config_io.hpp"
#include "fake_model.hpp"
#include "lowering/pass.hpp"

using namespace dtsim;
using namespace dtsim::sim;

namespace {

/// Writes "<name>.<hook>" to a shared log; takes the backward or the step
/// over where told to.
class Recorder final : public detail::StrategyPass {
 public:
  Recorder(std::string name, std::vector<std::string>& log, bool takes_over = false)
      : name_(std::move(name)), log_(log), takes_over_(takes_over) {}
  void before_forward(const detail::At&, TaskDeps& deps) override {
    // The passes before this one added theirs already: one each.
    deps.push_back(static_cast<TaskId>(deps.size()));
    note("before_forward");
  }
  TaskId after_forward(const detail::At&, TaskId last) override {
    note("after_forward");
    return last + 1;  // as a pass that adds one task after the last
  }
  Span run_backward(const detail::At&, MemOps&, MemOps&) override {
    note("run_backward");
    return takes_over_ ? Span{10, 11} : Span{};
  }
  TaskId after_backward(const detail::At&, TaskId last) override {
    note("after_backward");
    return last;
  }
  void gradients_reduced(const detail::At&, TaskId reduce, Bytes) override { note("reduced " + std::to_string(reduce)); }
  TaskId optimizer_step(int, const TaskDeps&, MemOps&) override {
    note("optimizer_step");
    return takes_over_ ? 42 : -1;
  }
  void after_step(int, TaskId) override { note("after_step"); }

 private:
  void note(const std::string& hook) { log_.push_back(name_ + "." + hook); }
  std::string name_;
  std::vector<std::string>& log_;
  bool takes_over_ = false;
};

}  // namespace

TEST_CASE("strategy passes: before hooks in list order, after hooks in reverse", "[lowering][passes]") {
  const test::FakeModel m(2, 1000, 10);
  const ClusterSpec c = test::round_cluster();
  const ResolvedPlan plan = resolve(parse_plan("dp: 1\n", "test.yaml"), m, c);
  const test::FixedCompute compute(1000);
  const AnalyticCommModel comm(c);
  const detail::LoweringInputs in{m, plan, c, compute, comm};
  detail::StageContext ctx(in);
  detail::PassList passes(ctx);
  std::vector<std::string> log;
  passes.add(std::make_unique<Recorder>("dp", log));
  passes.add(std::make_unique<Recorder>("zero3", log, true));
  passes.add(std::make_unique<Recorder>("tp", log));
  passes.add(nullptr);  // a strategy the plan does not use adds no pass
  const detail::At at;

  SECTION("forward: the outermost pass first before, last after") {
    TaskDeps deps;
    passes.before_forward(at, deps);
    // Each after hook gets the exit the one inside it returned: 7 + 3 passes.
    CHECK(passes.after_forward(at, 7) == 10);
    CHECK(log == std::vector<std::string>{"dp.before_forward", "zero3.before_forward", "tp.before_forward",
                                          "tp.after_forward", "zero3.after_forward", "dp.after_forward"});
    CHECK(deps == std::vector<TaskId>{0, 1, 2});
  }
  SECTION("backward: the first pass that runs it wins; the rest are not asked") {
    MemOps on_start, on_end;
    const detail::StrategyPass::Span s = passes.run_backward(at, on_start, on_end);
    CHECK(s.first == 10);
    CHECK(s.last == 11);
    passes.after_backward(at, s.last);
    CHECK(log == std::vector<std::string>{"dp.run_backward", "zero3.run_backward", "tp.after_backward",
                                          "zero3.after_backward", "dp.after_backward"});
  }
  SECTION("step: one pass may run it; every pass hears of a reduction") {
    MemOps frees;
    CHECK(passes.optimizer_step(0, {}, frees) == 42);
    passes.after_step(0, 42);
    ctx.reduced(at, 5, 100);
    CHECK(ctx.reductions == std::vector<TaskId>{5});
    CHECK(log == std::vector<std::string>{"dp.optimizer_step", "zero3.optimizer_step", "tp.after_step",
                                          "zero3.after_step", "dp.after_step", "dp.reduced 5", "zero3.reduced 5",
                                          "tp.reduced 5"});
  }
}
