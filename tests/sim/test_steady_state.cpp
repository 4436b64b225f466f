// The steady-state abridgement of long pipelines (Note [Steady state] in
// sim/src/report/steady_state.cpp): the papers' formulas at 512
// micro-batches through the abridged run, and every shipped pipeline plan
// over 1 to 512 micro-batches giving what the full simulation gives.
#include <catch2/catch.hpp>

#include <algorithm>
#include <array>
#include <map>
#include <string>
#include <vector>

#include "dtsim/models/models.hpp"
#include "dtsim/sim/config_io.hpp"
#include "dtsim/sim/error.hpp"
#include "dtsim/sim/partition.hpp"
#include "dtsim/sim/predict.hpp"
#include "fake_model.hpp"
#include "report/steady_state.hpp"

using namespace dtsim;
using namespace dtsim::sim;

namespace {

using test::FreeComm;

constexpr TimeNs kMs = 1'000'000;

/// 8 identical layers of 1 ms forward and 2 ms backward (test_pipeline.cpp's).
std::optional<detail::SteadyState> abridged(const std::string& yaml) {
  static const test::FakeModel eight(8, 1, 1000);
  static const FreeComm comm;
  static const test::FixedCompute compute(kMs);
  const ClusterSpec c = test::round_cluster(1, 4);
  ResolvedPlan plan = resolve(parse_plan(yaml, "test.yaml"), eight, c);
  partition(plan, eight, c, compute, comm);
  return detail::simulate_steady(eight, plan, c, CostModels{&compute, &comm});
}

}  // namespace

TEST_CASE("steady state: 1F1B over 512 micro-batches takes (m + p - 1)(tf + tb) from a few dozen simulated", "[steady]") {
  // Narayanan et al. 2021 section 2.2.1 with p = 4 stages of tf = 2 ms,
  // tb = 4 ms: (512 + 3) x 6 ms = 3090 ms, of which the busiest stage
  // computes 512 x 6 = 3072 ms and idles (p - 1)(tf + tb) = 18 ms; stage s
  // keeps p - s micro-batches of 2 x 1000 B (the optimizer's ns aside).
  const auto s = abridged("pp: 4\nschedule: 1f1b\nmicro_batches: 512\nmicro_batch: 1\n");
  REQUIRE(s.has_value());
  CHECK(s->simulated_micro_batches < 64);
  CHECK(s->makespan / 1000 == 3090 * kMs / 1000);
  CHECK(s->breakdown.compute == 3072 * kMs);
  CHECK(s->breakdown.bubble / 1000 == 18 * kMs / 1000);
  REQUIRE(s->peaks.size() == 4);
  for (int st = 0; st < 4; ++st) {
    INFO("stage " << st);
    CHECK(s->peaks[st].bytes[static_cast<int>(MemCategory::kActivations)] == (4 - st) * 2000);
  }
  // Each micro-batch is a forward and a backward on each of the 4 stages
  // and a send each way between neighbours (3 + 3), plus 4 optimizer steps.
  CHECK(s->tasks == 512 * (8 + 6) + 4);
}

TEST_CASE("steady state: interleaving over 512 micro-batches divides the bubble by v", "[steady]") {
  // Section 2.2.2: m(tf + tb) + (p - 1)(tf + tb)/v = 3072 + 9 = 3081 ms; the
  // first stage keeps 1 + (p - 1)/(pv) times 1F1B's 8000 B (Korthikanti et
  // al. 2022, section 4.2.3): 11000 B.
  const auto s = abridged("pp: 4\nschedule: interleaved\nvirtual_stages: 2\nmicro_batches: 512\nmicro_batch: 1\n");
  REQUIRE(s.has_value());
  CHECK(s->simulated_micro_batches < 128);
  CHECK(s->makespan / 1000 == 3081 * kMs / 1000);
  CHECK(s->breakdown.bubble / 1000 == 9 * kMs / 1000);
  CHECK(s->peaks[0].bytes[static_cast<int>(MemCategory::kActivations)] == 11000);
}

TEST_CASE("steady state: 10^8 micro-batches predict from a few dozen; simulating them one by one is refused in one line",
          "[steady]") {
  // (m + p - 1)(tf + tb) as above, m = 10^8: 600,000,018 ms.
  const auto s = abridged("pp: 4\nschedule: 1f1b\nmicro_batches: 100000000\nmicro_batch: 1\n");
  REQUIRE(s.has_value());
  CHECK(s->simulated_micro_batches < 64);
  CHECK(s->makespan / 1000 == (100'000'000LL + 3) * 6 * kMs / 1000);
  CHECK(s->tasks == 100'000'000ULL * (8 + 6) + 4);  // as above
  // Note [Graph size]: a trace, --unabridged or GPipe would hold every task,
  // at least a forward and a backward of each of the shipped plan's 2
  // stages for each micro-batch: 2 x 2 x 10^8 = 4 x 10^8 > 2^25.
  const auto model = models::load_model("gpt2");
  const auto cluster = load_cluster("dgx-a100", {});
  const PlanSpec plan = load_plan("1f1b", {parse_override("plan.micro_batches=100000000")});
  CHECK(predict(*model, plan, cluster).abridged_to > 0);
  PredictOptions traced, full;
  traced.keep_graph = true;
  full.unabridged = true;
  for (const PredictOptions& o : {traced, full}) {
    try {
      (void)predict(*model, plan, cluster, o);
      FAIL("predicted 10^8 micro-batches one by one");
    } catch (const UnsupportedError& e) {
      const std::string what = e.what();
      CHECK_THAT(what, Catch::Contains("100000000 micro-batches") && Catch::Contains("400000000 tasks") &&
                           Catch::Contains("without --trace and --unabridged"));
      CHECK(what.find('\n') == std::string::npos);
    }
  }
  try {
    (void)predict(*model, load_plan("gpipe", {parse_override("plan.micro_batches=100000000")}), cluster);
    FAIL("predicted GPipe's 10^8 micro-batches");
  } catch (const UnsupportedError& e) {
    // GPipe is never abridged: no advice to drop a trace.
    CHECK_THAT(std::string(e.what()), Catch::Contains("use fewer") && !Catch::Contains("--trace"));
  }
}

TEST_CASE("steady state: too few micro-batches to gain and GPipe simulate every micro-batch", "[steady]") {
  // 1F1B on 4 stages holds 4 micro-batches; the abridged run takes 3 x 4 +
  // 16 = 28 (Note [Steady state]), worth it where that is 3/4 of m or less:
  // from m = 38 (28 x 4 = 112 <= 3 x 38), not at 37.
  CHECK_FALSE(abridged("pp: 4\nschedule: 1f1b\nmicro_batches: 37\nmicro_batch: 1\n").has_value());
  const auto at_38 = abridged("pp: 4\nschedule: 1f1b\nmicro_batches: 38\nmicro_batch: 1\n");
  REQUIRE(at_38.has_value());
  CHECK(at_38->simulated_micro_batches == 28);
  CHECK(at_38->makespan / 1000 == (38 + 3) * 6 * kMs / 1000);  // (m + p - 1)(tf + tb), as above
  CHECK_FALSE(abridged("pp: 4\nschedule: gpipe\nmicro_batches: 512\nmicro_batch: 1\n").has_value());
  const auto model = models::load_model("gpt2");
  const auto cluster = load_cluster("dgx-a100", {});
  const auto plan = load_plan("1f1b", {parse_override("plan.micro_batches=256")});
  CHECK(predict(*model, plan, cluster).abridged_to > 0);
  // A trace (every task) is spliced from the same abridged run (Note
  // [Steady state timelines]; compared span for span below).
  PredictOptions traced;
  traced.keep_graph = true;
  const Prediction p = predict(*model, plan, cluster, traced);
  CHECK(p.abridged_to > 0);
  CHECK(p.graph.tasks.size() == p.tasks);
}

namespace {

/// Every shipped pipeline plan, as the two comparisons below run them.
struct Case {
  const char* model;
  const char* cluster;
  int nodes;
  const char* plan;
  std::vector<std::string> sets;
  int dp;  ///< replicas, where the plan fixes the global batch: it is micro-batches x dp
  bool abridges;
};

const std::vector<Case>& shipped_pipelines() {
  static const std::vector<Case> cases = {
      {"gpt2", "dgx-a100", 1, "1f1b", {}, 0, true},
      {"gpt2-xl", "dgx-a100", 1, "1f1b", {"plan.pp=4"}, 0, true},
      // The sends' sharing of links repeats every 6 micro-batches here.
      {"gpt2-xl", "dgx-a100", 1, "1f1b", {"plan.pp=8"}, 0, true},
      {"bert-large", "dgx-a100", 1, "1f1b", {"plan.pp=4", "plan.recompute=full", "plan.zero_stage=1"}, 0, true},
      {"gpt2-tiny", "local-cpu", 1, "1f1b", {}, 0, true},
      // Gloo's sends wait for their receivers, their window and the
      // sender's core (Notes [Gloo rendezvous], [Send window], [Busy sender]).
      {"gpt2-tiny", "local-cpu", 1, "interleaved", {}, 0, true},
      {"bilstm-tiny", "local-cpu", 1, "1f1b", {}, 0, true},
      {"gpt2-medium", "dgx-a100", 1, "interleaved", {}, 0, true},
      {"gpt-175b", "dgx-a100", 8, "megatron-3d", {}, 1, true},
      {"gpt-175b", "dgx-a100", 16, "megatron-3d", {}, 2, true},
      // Megatron's overlapped parameter gather (Note [Overlapped parameter
      // gather]): each chunk's buckets gathered before its first forward.
      {"gpt-175b", "dgx-a100", 16, "megatron-3d", {"plan.overlap_param_gather=true"}, 2, true},
      {"llama-3-8b", "dgx-h100", 2, "megatron-3d", {"plan.tp=2", "plan.pp=4", "plan.cp=2"}, 1, true},
      // ZB-H1 (Note [Zero bubble]): dense with data parallelism and ZeRO-1, and a mixture of experts.
      {"gpt2-xl", "dgx-a100", 1, "1f1b", {"plan.pp=4", "plan.schedule=zb-h1"}, 0, true},
      {"bert-large", "dgx-a100", 1, "1f1b", {"plan.pp=4", "plan.schedule=zb-h1", "plan.recompute=full", "plan.zero_stage=1"}, 0, true},
      {"mixtral-8x7b", "dgx-h100", 4, "1f1b", {"plan.pp=4", "plan.ep=8", "plan.schedule=zb-h1", "plan.seq_len=4096"}, 0, true},
      // Megatron-Core's mixture of experts as shipped: ep 8 within a node,
      // 4 interleaved stages of 8 chunks (one block each), dp 8 over 32 GPUs.
      {"mixtral-8x7b", "dgx-h100", 4, "megatron-moe", {}, 8, true},
      // FSDP2 stages (Note [FSDP under a pipeline]): a gather before each
      // chunk's first forward, a reduce-scatter after its last backward.
      {"gpt2-xl", "dgx-a100", 1, "fsdp-pp", {"plan.pp=4"}, 0, true},
      {"gpt2-xl", "dgx-a100", 2, "fsdp-pp", {"plan.pp=4", "plan.schedule=interleaved"}, 0, true},
      {"gpt2", "dgx-a100", 1, "gpipe", {}, 0, false},
      {"gpt2", "2x2080ti", 1, "model-parallel", {}, 0, false},
  };
  return cases;
}

/// 1 to 64 micro-batches and 13 counts up to 512.
const std::vector<int>& micro_batch_sweep() {
  static const std::vector<int> sweep = [] {
    std::vector<int> v;
    for (int m = 1; m <= 64; ++m) v.push_back(m);
    for (int m : {72, 96, 100, 127, 128, 160, 200, 255, 256, 320, 384, 511, 512}) v.push_back(m);
    return v;
  }();
  return sweep;
}

/// Runs `compare(m, plan)` for each micro-batch count of the sweep the
/// case's plan takes (interleaving needs a multiple of pp: a ConfigError,
/// from loading or from compare's predictions, skips the count); the number
/// compared.
template <typename F>
int for_each_count(const Case& c, F compare) {
  int compared = 0;
  for (int m : micro_batch_sweep()) {
    std::vector<Override> sets;
    for (const auto& s : c.sets) sets.push_back(parse_override(s));
    if (std::string(c.plan) == "model-parallel") {
      if (m > 1) break;  // no micro-batches: one pass
    } else {
      sets.push_back(parse_override(c.dp > 0 ? "plan.global_batch=" + std::to_string(m * c.dp)
                                              : "plan.micro_batches=" + std::to_string(m)));
    }
    try {
      compare(m, load_plan(c.plan, sets));
      ++compared;
    } catch (const ConfigError&) {
    }
  }
  return compared;
}

}  // namespace

TEST_CASE("steady state: every shipped pipeline plan predicts as the full simulation does, 1 to 512 micro-batches",
          "[steady]") {
  PredictOptions full;
  full.unabridged = true;
  for (const Case& c : shipped_pipelines()) {
    const auto model = models::load_model(c.model);
    const auto cluster = load_cluster(c.cluster, {parse_override("cluster.nodes=" + std::to_string(c.nodes))});
    int abridged_runs = 0;
    const int compared = for_each_count(c, [&](int m, const PlanSpec& plan) {
      const Prediction b = predict(*model, plan, cluster, full);
      const Prediction a = predict(*model, plan, cluster);
      INFO(c.model << " " << c.plan << " on " << c.nodes << " x " << c.cluster << ", " << m << " micro-batches");
      if (a.abridged_to > 0) ++abridged_runs;
      CHECK(b.abridged_to == 0);
      CHECK(a.iteration_time == b.iteration_time);
      CHECK(a.breakdown.compute == b.breakdown.compute);
      CHECK(a.breakdown.exposed_comm == b.breakdown.exposed_comm);
      CHECK(a.breakdown.bubble == b.breakdown.bubble);
      CHECK(a.breakdown.optimizer == b.breakdown.optimizer);
      CHECK(a.breakdown.offload == b.breakdown.offload);
      CHECK(a.breakdown.other == b.breakdown.other);
      CHECK(a.events == b.events);
      CHECK(a.tasks == b.tasks);
      REQUIRE(a.ranks.size() == b.ranks.size());
      for (std::size_t r = 0; r < a.ranks.size(); ++r) {
        INFO("rank " << r);
        CHECK(a.ranks[r].peak == b.ranks[r].peak);
        CHECK(a.ranks[r].parameters == b.ranks[r].parameters);
        CHECK(a.ranks[r].gradients == b.ranks[r].gradients);
        CHECK(a.ranks[r].optimizer == b.ranks[r].optimizer);
        CHECK(a.ranks[r].activations == b.ranks[r].activations);
        CHECK(a.ranks[r].buffers == b.ranks[r].buffers);
      }
    });
    INFO(c.model << " " << c.plan);
    CHECK(compared > 0);
    // The long runs of the abridging schedules do abridge.
    CHECK((abridged_runs > 0) == c.abridges);
  }
}

TEST_CASE("steady state: a timeline spliced from the steady state is the full simulation's, span for span", "[steady]") {
  // Note [Steady state timelines]: every task (where it runs, its name,
  // micro-batch, memory operations, dependencies and collective partners),
  // its start, end and slowdown, and each rank's memory over time and at
  // its peak, as the full lowering and simulation have them.
  PredictOptions traced, full;
  traced.keep_graph = full.keep_graph = true;
  full.unabridged = true;
  PredictOptions explorer = traced, explorer_full = full;
  explorer.trace_detail = explorer_full.trace_detail = false;
  for (const Case& c : shipped_pipelines()) {
    const auto model = models::load_model(c.model);
    const auto cluster = load_cluster(c.cluster, {parse_override("cluster.nodes=" + std::to_string(c.nodes))});
    int spliced = 0;
    const int compared = for_each_count(c, [&](int m, const PlanSpec& plan) {
      const Prediction b = predict(*model, plan, cluster, full);
      const Prediction a = predict(*model, plan, cluster, traced);
      INFO(c.model << " " << c.plan << " on " << c.nodes << " x " << c.cluster << ", " << m << " micro-batches");
      if (a.abridged_to > 0) ++spliced;
      CHECK(a.iteration_time == b.iteration_time);
      CHECK(a.exec.makespan == b.exec.makespan);
      CHECK(a.exec.events == b.exec.events);
      CHECK(a.tasks == a.graph.tasks.size());
      REQUIRE(a.graph.tasks.size() == b.graph.tasks.size());
      // Task for task where each runs (runs_differ): name, micro-batch,
      // memory, dependencies, collective partners and span.
      const RunsDiffer d = runs_differ(a.graph, a.exec, b.graph, b.exec);
      CHECK_FALSE(d.shape);
      CHECK(d.tasks == 0);
      CHECK_FALSE(d.memory);
      // The explorer's prediction (no names, no memory over time): the same spans.
      if (a.abridged_to > 0 && m == 512) {
        const Prediction e = predict(*model, plan, cluster, explorer);
        CHECK(e.abridged_to == a.abridged_to);
        const Prediction f = predict(*model, plan, cluster, explorer_full);
        const RunsDiffer de = runs_differ(e.graph, e.exec, f.graph, f.exec);
        CHECK_FALSE(de.shape);
        CHECK(de.tasks == 0);
        CHECK_FALSE(de.memory);
        for (const RankMemoryPeak& x : e.exec.memory) CHECK(x.timeline.empty());
      }
    });
    INFO(c.model << " " << c.plan);
    CHECK(compared > 0);
    CHECK((spliced > 0) == c.abridges);
  }
}

TEST_CASE("runs_differ finds a span, a dependency, a name, a memory change and another shape", "[steady]") {
  // gpt2's 1f1b plan on one DGX A100 at 8 micro-batches, traced in full:
  // compared with itself nothing differs; each change below is found.
  const auto model = models::load_model("gpt2");
  const auto cluster = load_cluster("dgx-a100", {});
  PredictOptions o;
  o.keep_graph = true;
  o.unabridged = true;
  const Prediction p = predict(*model, load_plan("1f1b", {parse_override("plan.micro_batches=8")}), cluster, o);
  REQUIRE(p.graph.tasks.size() > 10);
  CHECK_FALSE(runs_differ(p.graph, p.exec, p.graph, p.exec).any());
  // Two graphs numbering their tasks apart: the same run, its tasks
  // renumbered stream by stream (each stream's order kept), as the splice does.
  std::vector<std::size_t> order(p.graph.tasks.size());
  for (std::size_t i = 0; i < order.size(); ++i) order[i] = i;
  std::stable_sort(order.begin(), order.end(), [&](std::size_t i, std::size_t j) {
    const Task& a = p.graph.tasks[i];
    const Task& b = p.graph.tasks[j];
    return std::pair(a.rank, a.stream) < std::pair(b.rank, b.stream);
  });
  std::vector<TaskId> new_id(order.size());
  for (std::size_t k = 0; k < order.size(); ++k) new_id[order[k]] = static_cast<TaskId>(k);
  TaskGraph g = p.graph;
  ExecResult x = p.exec;
  std::size_t moved = 0;
  for (std::size_t k = 0; k < order.size(); ++k) {
    g.tasks[k] = p.graph.tasks[order[k]];
    for (TaskId& d : g.tasks[k].deps) d = new_id[static_cast<std::size_t>(d)];
    x.spans[k] = p.exec.spans[order[k]];
    moved += order[k] != k;
  }
  REQUIRE(moved > 0);
  CHECK_FALSE(runs_differ(p.graph, p.exec, g, x).any());
  {
    ExecResult y = p.exec;
    y.spans[5].end += 1;
    CHECK(runs_differ(p.graph, p.exec, p.graph, y).tasks == 1);
  }
  {
    TaskGraph h = p.graph;
    std::size_t k = 0;
    while (k < h.tasks.size() && h.tasks[k].deps.empty()) ++k;
    REQUIRE(k < h.tasks.size());
    h.tasks[k].deps.push_back(0);
    h.tasks[k].name += "'";
    CHECK(runs_differ(p.graph, p.exec, h, p.exec).tasks == 1);
  }
  {
    ExecResult y = p.exec;
    y.memory[0].at_peak.bytes[0] += 1;
    const RunsDiffer d = runs_differ(p.graph, p.exec, p.graph, y);
    CHECK(d.memory);
    CHECK(d.tasks == 0);
  }
  {
    TaskGraph h = p.graph;
    h.ranks[0].streams.push_back("extra");
    CHECK(runs_differ(p.graph, p.exec, h, p.exec).shape);
  }
}
