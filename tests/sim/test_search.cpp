// Plan search: it only returns plans that fit, and it beats every shipped plan.
#include <catch2/catch.hpp>

#include <cmath>

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
  CHECK(r.simulated + r.pruned_memory + r.pruned_time == r.enumerated);
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

TEST_CASE("search: pruning by the time bound keeps the ranking and the Pareto front of simulating every plan", "[search]") {
  // gpt2-xl on 16 A100s: a few thousand plans, most of them far slower
  // than the best ten (Note [Search]).
  const auto model = models::load_model("gpt2-xl");
  const ClusterSpec cluster = load_cluster("dgx-a100", {parse_override("cluster.nodes=2")});
  SearchOptions o = fp16_adam(128);
  o.top = 10;
  o.threads = 1;  // which plans get skipped depends on the order threads finish in
  const SearchResult pruned = search(*model, cluster, o);
  o.prune_by_time = false;
  const SearchResult all = search(*model, cluster, o);
  CHECK(all.pruned_time == 0);
  CHECK(pruned.pruned_time > all.simulated / 4);
  CHECK(pruned.enumerated == all.enumerated);
  CHECK(pruned.simulated + pruned.pruned_memory + pruned.pruned_time == pruned.enumerated);
  auto same = [](const std::vector<SearchEntry>& a, const std::vector<SearchEntry>& b) {
    REQUIRE(a.size() == b.size());
    for (std::size_t i = 0; i < a.size(); ++i) {
      INFO("entry " << i);
      CHECK(a[i].iteration_time == b[i].iteration_time);
      CHECK(a[i].peak == b[i].peak);
      CHECK(a[i].plan.spec.dp == b[i].plan.spec.dp);
      CHECK(a[i].plan.spec.tp == b[i].plan.spec.tp);
      CHECK(a[i].plan.spec.pp == b[i].plan.spec.pp);
      CHECK(a[i].plan.spec.schedule == b[i].plan.spec.schedule);
      CHECK(a[i].plan.spec.micro_batch == b[i].plan.spec.micro_batch);
      CHECK(a[i].plan.spec.zero_stage == b[i].plan.spec.zero_stage);
      CHECK(a[i].plan.spec.recompute == b[i].plan.spec.recompute);
    }
  };
  same(pruned.top, all.top);
  same(pruned.pareto, all.pareto);
  // The front stops at twice the fastest plan's time.
  REQUIRE_FALSE(all.pareto.empty());
  CHECK(all.pareto.back().iteration_time <= 2 * all.top.front().iteration_time);
}

TEST_CASE("search: the time bound is below every shipped plan's simulated time", "[search]") {
  // X = one micro-batch's work on the compute streams (kernels, recompute,
  // tensor-parallel collectives); the bound is X / (1 - (1 - 1/m)^pp), and
  // m X / pp for interleaving (Note [Search]); predictions only add to it.
  int zero3_bounds = 0;
  for (const char* name : {"gpt2", "bert-large", "llama-tiny", "gpt-7.5b"}) {
    const auto model = models::load_model(name);
    for (int nodes : {1, 8}) {
      const ClusterSpec cluster = load_cluster("dgx-a100", {parse_override("cluster.nodes=" + std::to_string(nodes))});
      for (const auto& plan_name : list_configs("plans")) {
        INFO(name << " " << plan_name << " on " << nodes << " nodes");
        Prediction p;
        try {
          p = predict(*model, load_plan(plan_name), cluster);
        } catch (const ConfigError&) {
          continue;
        }
        const double x = static_cast<double>(micro_batch_compute(*model, p.plan, cluster));
        const double m = static_cast<double>(p.plan.grad_accum);
        CHECK(x > 0);
        const double bound = p.plan.pp > 1 && p.plan.schedule == Schedule::kInterleaved
                                 ? x * m / p.plan.pp
                                 : x / (1 - std::pow(1 - 1 / m, p.plan.pp));
        CHECK(bound <= static_cast<double>(p.iteration_time));
        CHECK(pipeline_time_bound(static_cast<TimeNs>(x), 1.0, p.plan.pp, p.plan.grad_accum, p.plan.schedule) <=
              p.iteration_time);
        if (p.plan.pp == 1) {
          // With the slowdown of compute beside the data-parallel collectives
          // (Note [Search]): m X + C c / (1 + c), c = 24 / 84 on an A100.
          const TimeNs slow = interference_time_bound(p.plan, model->parameters(), model->layer_count(), cluster,
                                                      AnalyticCommModel(cluster));
          if (p.plan.dp > 1) CHECK(slow > 0);
          CHECK(static_cast<TimeNs>(x * m) + slow <= p.iteration_time);
          if (p.plan.zero_stage == 3) ++zero3_bounds;
        }
        if (p.plan.pp == 1 || p.plan.schedule != Schedule::k1f1b) continue;
        // The same plan under ZB-H1: phi X / (1 - (1 - phi/m)^pp), phi the
        // smallest forward share of a layer.
        PlanSpec zb = load_plan(plan_name);
        zb.schedule = Schedule::kZbH1;
        Prediction z;
        try {
          z = predict(*model, zb, cluster);
        } catch (const ConfigError&) {
          continue;
        }
        double phi = 0;
        const TimeNs xz = micro_batch_compute(*model, z.plan, cluster, {}, &phi);
        CHECK(phi > 0.2);  // a forward is about a third of a layer's work
        CHECK(phi < 0.6);
        const double mz = static_cast<double>(z.plan.grad_accum);
        const double zbound = phi * static_cast<double>(xz) / (1 - std::pow(1 - phi / mz, z.plan.pp));
        CHECK(zbound > static_cast<double>(xz) * mz / z.plan.pp);  // tighter than m X / pp
        CHECK(zbound <= static_cast<double>(z.iteration_time));
        CHECK(pipeline_time_bound(xz, phi, z.plan.pp, z.plan.grad_accum, Schedule::kZbH1) <= z.iteration_time);
      }
    }
  }
  CHECK(zero3_bounds >= 8);  // zero3 and fsdp, 4 models, 1 and 8 nodes
}

TEST_CASE("search: the peak's lower bound, by hand (Note [Search])", "[search]") {
  const Bytes G = 1'000'000'000;
  // One stage: states plus one micro-batch's activations.
  CHECK(peak_lower_bound(10 * G, 40 * G, 1, 8, Schedule::k1f1b) == 50 * G);
  // GPipe over 4 stages keeps all 8 micro-batches: 10 + 40 x 8 / 4.
  CHECK(peak_lower_bound(10 * G, 40 * G, 4, 8, Schedule::kGpipe) == 90 * G);
  // 1F1B over 4 stages, 8 micro-batches: the average stage holds 10 + 40/4 =
  // 20; stage s holds c_s = 4, 3, 2, 1 micro-batches, sum 1/c_s = 25/12, so
  // (4 x 10 / 4 + 40) / (25/12) = 24.
  CHECK(peak_lower_bound(10 * G, 40 * G, 4, 8, Schedule::k1f1b) == 24 * G);
  CHECK(peak_lower_bound(10 * G, 40 * G, 4, 8, Schedule::kZbH1) == 24 * G);
  // 2 micro-batches: c_s = 2, 2, 2, 1, sum 5/2: (40 / 2 + 40) / 2.5 = 24.
  CHECK(peak_lower_bound(10 * G, 40 * G, 4, 2, Schedule::k1f1b) == 24 * G);
  // Little activation: the average (10 + 1/4 = 10.25) beats (10 + 1) x 12/25 = 5.28.
  CHECK(peak_lower_bound(10 * G, 1 * G, 4, 8, Schedule::k1f1b) == 10 * G + G / 4);
  // Interleaving keeps the average.
  CHECK(peak_lower_bound(10 * G, 40 * G, 4, 8, Schedule::kInterleaved) == 20 * G);
}

TEST_CASE("search: pruning by the memory bound drops only plans that do not fit", "[search]") {
  // gpt2-xl on 8 V100-16GB: many pipelines and micro-batches that overflow 16 GB.
  const auto model = models::load_model("gpt2-xl");
  const ClusterSpec cluster = load_cluster("8xv100-16g");
  SearchOptions o = fp16_adam(64);
  o.top = 10;
  o.threads = 1;
  o.prune_by_time = false;  // every plan left is simulated: the counts compare
  const SearchResult pruned = search(*model, cluster, o);
  o.prune_by_memory = false;
  const SearchResult all = search(*model, cluster, o);
  CHECK(all.pruned_memory == 0);
  CHECK(pruned.pruned_memory > 0);
  CHECK(pruned.enumerated == all.enumerated);
  // Every plan the bound dropped was simulated without it and did not fit.
  CHECK(pruned.simulated - pruned.not_fitting == all.simulated - all.not_fitting);
  CHECK(all.not_fitting - pruned.not_fitting == pruned.pruned_memory);
  REQUIRE(pruned.top.size() == all.top.size());
  for (std::size_t i = 0; i < all.top.size(); ++i) CHECK(pruned.top[i].iteration_time == all.top[i].iteration_time);
}
