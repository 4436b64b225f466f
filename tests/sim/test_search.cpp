// Plan search: it only returns plans that fit, and it beats every shipped plan.
#include <catch2/catch.hpp>

#include "dtsim/models/models.hpp"
#include "dtsim/sim/config_io.hpp"
#include "dtsim/sim/error.hpp"
#include "dtsim/sim/predict.hpp"
#include "dtsim/sim/search.hpp"

using namespace dtsim;
using namespace dtsim::sim;

namespace {

SearchOptions fp16_adam(std::int64_t global_batch) {
  SearchOptions o;
  o.global_batch = global_batch;
  o.top = 1000000;
  o.threads = 2;
  o.base.precision = Precision::kFp16;
  o.base.optimizer = Optimizer::kAdam;
  return o;
}

}  // namespace

TEST_CASE("search: every plan it returns fits when predicted on its own", "[search]") {
  // gpt2-xl on 8 x V100-16GB: plain DDP needs 1.56B x 16 B = 25 GB of model
  // states alone, so many plans do not fit and must not be returned.
  const auto model = models::load_model("gpt2-xl");
  const ClusterSpec cluster = load_cluster("8xv100-16g");
  const SearchResult r = search(*model, cluster, fp16_adam(64));
  REQUIRE_FALSE(r.top.empty());
  CHECK(r.not_fitting + r.pruned_memory > 0);
  CHECK(r.simulated + r.pruned_memory == r.enumerated);
  for (const auto& e : r.top) {
    CHECK(e.fits);
    CHECK(e.peak <= cluster.device.memory);
    CHECK_FALSE((e.plan.zero_stage == 0 && e.plan.tp == 1 && e.plan.pp == 1));  // DDP cannot fit (see above)
  }
  // Re-predicting the winner from its plan gives the same time and fits.
  PlanSpec again = r.top.front().plan.spec;
  const Prediction p = predict(*model, again, cluster);
  CHECK(p.fits);
  CHECK(p.iteration_time == r.top.front().iteration_time);
  // The Pareto front is sorted by time with strictly falling memory.
  for (std::size_t i = 1; i < r.pareto.size(); ++i) {
    CHECK(r.pareto[i].iteration_time >= r.pareto[i - 1].iteration_time);
    CHECK(r.pareto[i].peak < r.pareto[i - 1].peak);
  }
}

TEST_CASE("search: the best plan is at least as fast as every shipped plan that fits", "[search]") {
  const auto model = models::load_model("gpt2-medium");
  const ClusterSpec cluster = load_cluster("dgx-a100");
  const SearchResult r = search(*model, cluster, fp16_adam(64));
  REQUIRE_FALSE(r.top.empty());
  int compared = 0;
  for (const auto& name : list_configs("plans")) {
    INFO(name);
    PlanSpec spec = load_plan(name);
    spec.precision = Precision::kFp16;
    spec.optimizer = Optimizer::kAdam;
    spec.global_batch = 64;
    spec.grad_accum = 0;  // derived from the global batch
    Prediction p;
    try {
      p = predict(*model, spec, cluster);
    } catch (const ConfigError&) {
      continue;  // e.g. megatron-3d needs 64 GPUs
    }
    if (!p.fits) continue;
    ++compared;
    CHECK(r.top.front().iteration_time <= p.iteration_time);
  }
  CHECK(compared >= 10);
}

TEST_CASE("search: a global batch no data-parallel degree divides is refused", "[search]") {
  const auto model = models::load_model("gpt2");
  const ClusterSpec cluster = load_cluster("dgx-a100");
  SearchOptions o = fp16_adam(0);
  o.gpus = 3;
  CHECK_THROWS_AS(search(*model, cluster, o), ConfigError);
}
