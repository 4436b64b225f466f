// The zero-bubble schedule ZB-H1 (Qi et al. 2023, "Zero Bubble Pipeline
// Parallelism", section 3.1) against the paper's formulas and a schedule
// drawn by hand.
#include <catch2/catch.hpp>

#include <algorithm>

#include "dtsim/sim/config_io.hpp"
#include "dtsim/sim/error.hpp"
#include "dtsim/sim/executor.hpp"
#include "dtsim/sim/lowering.hpp"
#include "dtsim/sim/predict.hpp"
#include "fake_model.hpp"

using namespace dtsim;
using namespace dtsim::sim;

namespace {

constexpr TimeNs kMs = 1'000'000;

using Run = test::PlanRun;

Run run(const Model& m, const std::string& yaml, const ClusterSpec& c, const CommModel& comm) {
  return test::run_plan(m, yaml, c, comm, kMs);  // 1 GFLOP: 1 ms
}

// 8 layers, each 1 ms forward, 1 ms input gradient, 1 ms weight gradient per
// sequence; 1000 B kept per layer, and a dW kernel of 750 B whose operands
// (500 B, Note [Zero bubble]) a deferred W keeps.
const test::FakeModel kEight = test::FakeModel(8, 1, 1000).split_backward(750);

}  // namespace

TEST_CASE("zb-h1 order: warm-up, s deferred weight passes, each micro-batch's W once", "[pipeline][zb]") {
  using S = PipeStep;
  // p = 3, m = 4. Stage 2 (the last): no warm-up, 2 forward + B pairs, then
  // F B W until the forwards run out, then B W, then the 2 deferred W.
  CHECK(pipeline_order(Schedule::kZbH1, 3, 1, 2, 4) ==
        std::vector<S>{{true, 0, 0}, {false, 0, 0}, {true, 0, 1}, {false, 0, 1}, {true, 0, 2}, {false, 0, 2},
                       {false, 0, 0, true}, {true, 0, 3}, {false, 0, 3}, {false, 0, 1, true}, {false, 0, 2, true},
                       {false, 0, 3, true}});
  // Stage 0 is 1F1B with each W right after its B.
  CHECK(pipeline_order(Schedule::kZbH1, 3, 1, 0, 4) ==
        std::vector<S>{{true, 0, 0}, {true, 0, 1}, {true, 0, 2}, {false, 0, 0}, {false, 0, 0, true}, {true, 0, 3},
                       {false, 0, 1}, {false, 0, 1, true}, {false, 0, 2}, {false, 0, 2, true}, {false, 0, 3},
                       {false, 0, 3, true}});
  for (int p : {2, 4, 8}) {
    for (int m : {1, 3, 8, 16}) {
      for (int s = 0; s < p; ++s) {
        const auto order = pipeline_order(Schedule::kZbH1, p, 1, s, m);
        INFO("p " << p << " m " << m << " stage " << s);
        CHECK(order.size() == static_cast<std::size_t>(3 * m));
        // Each W after its own B.
        for (int i = 0; i < m; ++i) {
          const auto b = std::find(order.begin(), order.end(), S{false, 0, i, false});
          const auto w = std::find(order.begin(), order.end(), S{false, 0, i, true});
          CHECK(b < w);
          CHECK(w != order.end());
        }
      }
    }
  }
}

TEST_CASE("zb-h1's bubble is (p-1)(tf + tb - tw), 1F1B's (p-1)(tf + tb + tw)", "[pipeline][zb]") {
  // Qi et al. 2023, Table 1 and section 3.1, communication free. p = 4 stages
  // of 2 layers: tf = tb = tw = 2 ms a stage; m = 8. Compute on each stage
  // m (tf + tb + tw) = 48 ms; ZB-H1 adds (p-1)(2 + 2 - 2) = 6 ms, 1F1B
  // (p-1)(2 + 2 + 2) = 18 ms.
  const test::FreeComm comm;
  const std::string base = "pp: 4\nmicro_batches: 8\nmicro_batch: 1\nschedule: ";
  const Run zb = run(kEight, base + "zb-h1\n", test::round_cluster(1, 4), comm);
  const Run ofob = run(kEight, base + "1f1b\n", test::round_cluster(1, 4), comm);
  CHECK(zb.graph.stage_layers == std::vector<int>{2, 2, 2, 2});
  CHECK(stage_breakdown(zb.graph, zb.exec).compute == 48 * kMs);
  CHECK(stage_breakdown(zb.graph, zb.exec).bubble / 1000 == 6 * kMs / 1000);
  CHECK(zb.exec.makespan / 1000 == 54 * kMs / 1000);  // + the 1-parameter steps' nanoseconds
  CHECK(stage_breakdown(ofob.graph, ofob.exec).bubble / 1000 == 18 * kMs / 1000);
  CHECK(ofob.exec.makespan / 1000 == 66 * kMs / 1000);
}

TEST_CASE("zb-h1 keeps 1F1B's micro-batches in flight, a deferred W holding its GEMMs' operands", "[pipeline][zb]") {
  // Stage s keeps K = 2 x 1000 B per micro-batch until its B, then H = 2 x
  // 500 B until its W. Its warm-up's p - s - 1 forwards and the s B whose W
  // it defers are all in flight at the next forward: (p - s) K + s H, i.e.
  // 8000, 7000, 6000 and 5000 B; 1F1B's (p - s) K, 8000 down to 2000 B.
  const test::FreeComm comm;
  const std::string base = "pp: 4\nmicro_batches: 8\nmicro_batch: 1\nschedule: ";
  const Run zb = run(kEight, base + "zb-h1\n", test::round_cluster(1, 4), comm);
  const Run ofob = run(kEight, base + "1f1b\n", test::round_cluster(1, 4), comm);
  for (int s = 0; s < 4; ++s) {
    INFO("stage " << s);
    CHECK(zb.peak_activations(s) == (4 - s) * 2000 + s * 1000);
    CHECK(ofob.peak_activations(s) == (4 - s) * 2000);
  }
}

TEST_CASE("zb-h1 reduces a chunk's gradients after its last weight pass", "[pipeline][zb]") {
  // dp 2 x pp 2, 8 layers of 10M fp32 parameters: a bucket per layer (40 MB
  // over 25 MB), each all-reduce over 2 ranks in a node 0.4 ms at 100 GB/s +
  // latency, hidden behind the next layer's 1 ms weight pass but the last.
  // Stage 0's last W ends the backward: the iteration is dp 1's plus one
  // bucket's all-reduce, as for 1F1B's last backward.
  const test::FakeModel m = test::FakeModel(8, 10'000'000, 1000).split_backward(750);
  const ClusterSpec c = test::round_cluster(1, 4);
  const AnalyticCommModel comm(c);
  const std::string base = "pp: 2\nmicro_batches: 4\nmicro_batch: 1\nprecision: fp32\nschedule: zb-h1\n";
  const Run one = run(m, base + "dp: 1\n", c, comm);
  const Run two = run(m, base + "dp: 2\n", c, comm);
  CommGroup g;  // the data-parallel pair of a stage, in one node of 4 holding two such pairs
  g.ranks = 2;
  g.ranks_per_node = 2;
  g.groups_per_node = 2;
  const CollectiveCost bucket = comm.collective(CollectiveOp::kAllReduce, 40'000'000, g);
  // The step of 40M parameters at 28 B each over 1 TB/s is the same in both.
  CHECK(two.exec.makespan - one.exec.makespan == bucket.total());
  // Every bucket's all-reduce starts after the stage's last W began (the
  // 1 ms segment of its first bucket).
  TimeNs last_w = -1;
  for (std::size_t t = 0; t < two.graph.tasks.size(); ++t) {
    if (two.graph.tasks[t].rank == 0 && two.graph.tasks[t].name == "bwd weight chunk 0 [mb 3] bucket 0") {
      last_w = two.exec.spans[t].start + kMs;
    }
  }
  CHECK(last_w > 0);
  for (std::size_t t = 0; t < two.graph.tasks.size(); ++t) {
    if (two.graph.tasks[t].rank == 0 && two.graph.tasks[t].name.find("all_reduce grads") == 0) {
      CHECK(two.exec.spans[t].start >= last_w);
    }
  }
}

TEST_CASE("zb-h1 is refused with interleaving's virtual stages", "[pipeline][zb]") {
  const test::FreeComm comm;
  try {
    run(kEight, "pp: 2\nmicro_batches: 4\nschedule: zb-h1\nvirtual_stages: 2\n", test::round_cluster(1, 4), comm);
    FAIL("accepted");
  } catch (const Error& e) {
    CHECK(std::string(e.what()).find("virtual_stages") != std::string::npos);
    CHECK(std::string(e.what()).find("interleaved") != std::string::npos);
  }
}
