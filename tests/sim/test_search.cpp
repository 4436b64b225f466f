// Plan search: it only returns plans that fit, and it beats every shipped plan.
#include <catch2/catch.hpp>

#include <algorithm>
#include <array>
#include <cmath>
#include <cstdio>

#include "dtsim/models/models.hpp"
#include "dtsim/sim/config_io.hpp"
#include "dtsim/sim/error.hpp"
#include "dtsim/sim/lowering.hpp"
#include "dtsim/sim/predict.hpp"
#include "dtsim/sim/rules.hpp"
#include "dtsim/sim/search.hpp"
#include "fake_model.hpp"

using namespace dtsim;
using namespace dtsim::sim;

namespace {

/// A search of `o` pruned by its memory bound against the same search
/// simulating every plan (Note [Search]): the bound dropped plans, and only
/// plans the simulation finds do not fit (each dropped one simulated
/// without it and over capacity); the ranking is the same. Returns the
/// unpruned search.
SearchResult check_memory_bound(const Model& model, const ClusterSpec& cluster, SearchOptions o) {
  o.top = 10;
  o.threads = 1;
  o.prune_by_time = false;  // every plan left is simulated: the counts compare
  const SearchResult pruned = search(model, cluster, o);
  o.prune_by_memory = false;
  SearchResult all = search(model, cluster, o);
  CHECK(all.pruned_memory == 0);
  CHECK(pruned.pruned_memory > 0);
  CHECK(pruned.enumerated == all.enumerated);
  CHECK(pruned.simulated - pruned.not_fitting == all.simulated - all.not_fitting);
  CHECK(all.not_fitting - pruned.not_fitting == pruned.pruned_memory);
  REQUIRE(pruned.top.size() == all.top.size());
  REQUIRE_FALSE(all.top.empty());
  for (std::size_t i = 0; i < all.top.size(); ++i) CHECK(pruned.top[i].iteration_time == all.top[i].iteration_time);
  return all;
}

SearchOptions fp16_adam(std::int64_t global_batch) {
  SearchOptions o;
  o.global_batch = global_batch;
  o.top = 1000000;
  o.threads = 2;
  o.base.precision = Precision::kFp16;
  o.base.optimizer = Optimizer::kAdam;
  return o;
}

/// A pruned search's first ten entries against an unpruned one's: the same
/// time and peak, and whatever `also` checks of each pair.
template <typename F>
void same_first_ten(const SearchResult& pruned, const SearchResult& all, F also) {
  REQUIRE(pruned.top.size() >= 10);
  REQUIRE(all.top.size() >= 10);
  for (std::size_t i = 0; i < 10; ++i) {
    INFO("entry " << i);
    CHECK(pruned.top[i].iteration_time == all.top[i].iteration_time);
    CHECK(pruned.top[i].peak == all.top[i].peak);
    also(pruned.top[i], all.top[i]);
  }
}

/// `spec` predicted on its own against the search's `e`: the same time and
/// the same peak on the fullest GPU.
void check_same_as(const Model& model, const PlanSpec& spec, const ClusterSpec& cluster, const SearchEntry& e) {
  const Prediction p = predict(model, spec, cluster);
  Bytes peak = 0;
  for (const auto& rm : p.ranks) peak = std::max(peak, rm.peak);
  CHECK(p.iteration_time == e.iteration_time);
  CHECK(peak == e.peak);
}

/// The plans enumerate_plans makes under `overrides` (search_base_plan's),
/// counted: [0] where `applies` with `knob` on, [1] where `applies` with it
/// off, [2] where not `applies` with it on.
template <class Applies, class Knob>
std::array<int, 3> count_plans(const Model& model, const ClusterSpec& cluster, const std::vector<Override>& overrides,
                               Applies applies, Knob knob) {
  SearchOptions o = fp16_adam(128);
  o.base = search_base_plan(cluster, overrides);
  std::array<int, 3> n{};
  for (const PlanSpec& p : enumerate_plans(model, cluster, o)) {
    if (applies(p)) ++n[knob(p) ? 0 : 1];
    else if (knob(p)) ++n[2];
  }
  return n;
}

/// Every fitting plan of an unpruned search under `overrides` with `knob`
/// on, predicted alone with it turned off by `off`: no faster, the same
/// peak. Returns the plans checked and how many of them were slower.
template <class Knob, class Off>
std::pair<int, int> never_slower(const Model& model, const ClusterSpec& cluster, const std::vector<Override>& overrides,
                                 Knob knob, Off off) {
  SearchOptions o = fp16_adam(128);
  o.base = search_base_plan(cluster, overrides);
  o.threads = 1;
  o.prune_by_time = false;
  const SearchResult r = search(model, cluster, o);
  int checked = 0, slower = 0;
  for (const SearchEntry& e : r.top) {
    if (!knob(e.plan)) continue;
    ++checked;
    PlanSpec without = e.plan.spec;
    off(without);
    const Prediction p = predict(model, without, cluster);
    Bytes peak = 0;
    for (const auto& rm : p.ranks) peak = std::max(peak, rm.peak);
    CHECK(p.iteration_time >= e.iteration_time);
    CHECK(peak == e.peak);
    slower += p.iteration_time > e.iteration_time ? 1 : 0;
  }
  REQUIRE_FALSE(r.top.empty());
  check_same_as(model, r.top.front().plan.spec, cluster, r.top.front());
  return {checked, slower};
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
  // A split the held keys forbid names them: 32 samples on 8 GPUs with
  // micro-batches of 1,000,000 (a review found "give a multiple of the GPU
  // count" said of 32, which is one).
  o = fp16_adam(32);
  o.base = search_base_plan(cluster, {parse_override("plan.micro_batch=1000000")});
  CHECK_THROWS_WITH(search(*model, cluster, o),
                    "--global-batch 32: no plan of 8 GPUs splits it with what is held (plan.micro_batch); give a multiple of the "
                    "GPU count or hold fewer keys");
  // 2^40 samples on 8 GPUs: 2^37 a GPU, over the 2^14 searched; refused at
  // once (it had walked 2^37 micro-batch sizes one by one).
  o = fp16_adam(std::int64_t{1} << 40);
  CHECK_THROWS_WITH(search(*model, cluster, o), "--global-batch 1099511627776: 137438953472 samples a GPU a step, more than dtsim "
                                                "searches (16384); valid: up to 131072 on 8 GPUs (dtsim predict prices any plan)");
}

TEST_CASE("search: a shape knob fixed by --set holds every candidate; a degree the rules never allow is refused", "[search]") {
  // Note [Fixed knobs]: `dtsim search --help` offers plan.tp=2 as a knob to
  // fix, and it had been walked like any other. gpt2 (12 heads) on the 8
  // GPUs of a DGX A100: a tensor-parallel degree divides both the heads and
  // a node's GPUs, so 1, 2 and 4.
  const auto model = models::load_model("gpt2");
  const ClusterSpec cluster = load_cluster("dgx-a100");
  SearchOptions o = fp16_adam(32);
  o.base = search_base_plan(cluster, {parse_override("plan.tp=2"), parse_override("plan.pp=2"), parse_override("plan.zero_stage=1")});
  const std::vector<PlanSpec> plans = enumerate_plans(*model, cluster, o);
  REQUIRE(!plans.empty());
  for (const PlanSpec& p : plans) {
    CHECK(p.tp == 2);
    CHECK(p.pp == 2);
    CHECK(p.zero_stage == 1);
    CHECK(p.fsdp == FsdpMode::kNone);
    CHECK(p.dp == 2);  // 8 GPUs / (tp 2 x pp 2), cp 1 at 1,024 tokens
  }
  o.base = search_base_plan(cluster, {parse_override("plan.tp=1000")});
  CHECK_THROWS_WITH(enumerate_plans(*model, cluster, o),
                    "--set plan.tp: 1000 is not a tensor-parallel degree gpt2 on 8 GPUs allows; valid: 1, 2, 4");
  // A precision the device lacks (fp8 on an A100) is refused as predict
  // refuses it; it had searched nothing and said "no plan fits".
  o.base = search_base_plan(cluster, {parse_override("plan.precision=fp8")});
  CHECK_THROWS_WITH(enumerate_plans(*model, cluster, o), "--set plan.precision: fp8 is not a precision A100-SXM4-80GB runs; valid: fp32, fp16, bf16");
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
      CHECK(a[i].plan.spec.overlap_param_gather == b[i].plan.spec.overlap_param_gather);
      CHECK(a[i].plan.spec.recompute == b[i].plan.spec.recompute);
    }
  };
  same(pruned.top, all.top);
  same(pruned.pareto, all.pareto);
  // The front stops at twice the fastest plan's time.
  REQUIRE_FALSE(all.pareto.empty());
  CHECK(all.pareto.back().iteration_time <= 2 * all.top.front().iteration_time);
}

// Note [NVFP4 training]: on a B200 the rules table adds fp4 to the walked
// precisions; the bounds (its gathers at 0.5625 bytes a weight, its saved
// inputs) stay lower bounds, so pruning still drops no plan of the top ten.
TEST_CASE("search: on a B200 fp4 is walked too, and pruning keeps the top ten", "[search][fp4]") {
  const auto model = models::load_model("llama-3.2-1b");
  const ClusterSpec cluster = load_cluster("dgx-b200");
  SearchOptions o = fp16_adam(64);
  o.base.seq_len = 4096;
  o.threads = 1;
  const SearchResult pruned = search(*model, cluster, o);
  o.prune_by_time = false;
  o.prune_by_memory = false;
  const SearchResult all = search(*model, cluster, o);
  CHECK(all.pruned_time + all.pruned_memory == 0);
  CHECK(pruned.pruned_time + pruned.pruned_memory > 0);
  same_first_ten(pruned, all, [](const SearchEntry& a, const SearchEntry& b) { CHECK(a.plan.spec.precision == b.plan.spec.precision); });
  const auto count = [&](Precision p) {
    return std::count_if(all.top.begin(), all.top.end(), [&](const SearchEntry& e) { return e.plan.spec.precision == p; });
  };
  CHECK(count(Precision::kFp4) > 0);
  CHECK(count(Precision::kFp8) > 0);
  CHECK(count(Precision::kBf16) > 0);
  CHECK(count(Precision::kFp16) == 0);  // bf16 is there: no fp16
}

// The explorer searches from its scenario's plan: FSDP's own knobs there
// (FSDP2, its units, its reduce dtype) go back to their defaults in the
// candidates that are not FSDP's, which resolve would refuse otherwise.
TEST_CASE("search: a base plan's FSDP knobs keep the candidates that are not FSDP's", "[search]") {
  const auto model = models::load_model("gpt2");
  const ClusterSpec cluster = load_cluster("dgx-a100");
  SearchOptions o = fp16_adam(64);
  o.threads = 1;
  const SearchResult plain = search(*model, cluster, o);
  o.base.fsdp_version = 2;
  o.base.fsdp_wrap = FsdpWrap::kLayers;
  o.base.fsdp_reduce_fp32 = true;
  const SearchResult fsdp2 = search(*model, cluster, o);
  const auto without_fsdp = [](const SearchResult& r) {
    return std::count_if(r.top.begin(), r.top.end(), [](const SearchEntry& e) { return e.plan.spec.fsdp == FsdpMode::kNone; });
  };
  REQUIRE(without_fsdp(plain) > 0);
  CHECK(without_fsdp(fsdp2) == without_fsdp(plain));
  // And the FSDP2 candidates are FSDP2's.
  for (const SearchEntry& e : fsdp2.top) {
    if (e.plan.spec.fsdp == FsdpMode::kFullShard || e.plan.spec.fsdp == FsdpMode::kShardGradOp) CHECK(e.plan.fsdp_version == 2);
  }
}

// Issue 26: pruning never drops a plan of the top ten, for a mixture of
// experts too, whose bounds price each expert layout's all-to-alls.
TEST_CASE("search: a mixture of experts' plans, pruned, keep the top ten of simulating every plan", "[search][moe]") {
  const auto model = models::load_model("moe-tiny");  // 4 experts: ep 1, 2 or 4
  const ClusterSpec cluster = load_cluster("dgx-h100");
  SearchOptions o = fp16_adam(64);
  o.top = 10;  // the time bound drops what cannot rank among these
  o.threads = 1;
  const SearchResult pruned = search(*model, cluster, o);
  o.prune_by_time = false;
  o.prune_by_memory = false;
  o.top = 1000000;  // and every plan, for the walk's check below
  const SearchResult all = search(*model, cluster, o);
  CHECK(all.pruned_time + all.pruned_memory == 0);
  CHECK(pruned.pruned_time > 0);
  CHECK(pruned.enumerated == all.enumerated);
  CHECK(pruned.top.size() == 10);
  same_first_ten(pruned, all, [](const SearchEntry& a, const SearchEntry& b) {
    CHECK(a.plan.spec.ep == b.plan.spec.ep);
    CHECK(a.plan.spec.etp == b.plan.spec.etp);
  });
  // Expert parallelism was walked: plans at ep 2 and 4 were simulated.
  const auto at_ep = [&](int ep) {
    return std::count_if(all.top.begin(), all.top.end(), [&](const SearchEntry& e) { return e.plan.spec.ep == ep; });
  };
  CHECK(at_ep(2) > 0);
  CHECK(at_ep(4) > 0);
  // moe-tiny routes top-2: where only the expert tensor-parallel ranks
  // exchange (ep 1, etp > 1) the allgather dispatcher moves less, alltoall
  // everywhere else (PlanRules::dispatcher_values).
  const auto with = [&](MoeDispatcher d, bool split_ep1) {
    return std::count_if(all.top.begin(), all.top.end(), [&](const SearchEntry& e) {
      const bool ep1_split = e.plan.ep == 1 && e.plan.etp > 1;
      return e.plan.spec.moe_dispatcher == d && ep1_split == split_ep1;
    });
  };
  CHECK(with(MoeDispatcher::kAllGather, true) > 0);
  CHECK(with(MoeDispatcher::kAllToAll, true) == 0);
  CHECK(with(MoeDispatcher::kAllGather, false) == 0);
}

TEST_CASE("rules: a MoE model's token dispatcher, allgather where only the expert tensor-parallel ranks exchange a top-2 router's tokens",
          "[rules][moe]") {
  const ClusterSpec c = load_cluster("dgx-h100");
  // The rules keep a reference to the model.
  const auto mixtral = models::load_model("mixtral-8x7b"), llama = models::load_model("llama-3-8b"), scout = models::load_model("llama-4-scout");
  const PlanRules moe(*mixtral, c);
  using D = std::vector<MoeDispatcher>;
  // Mixtral (top-2, E 8, h 4096) at tp 8, bf16, per token: alltoall gathers
  // 2 rows of 2 h bytes and reduce-scatters 2 fp32 parts, 2 (2 + 4) h =
  // 49,152 B; allgather the token (2 h), probabilities and map (5 x 8) and
  // one fp32 part (4 h), 24,616 B.
  CHECK(moe.dispatcher_values(1, 8) == D{MoeDispatcher::kAllGather});
  // Llama 4 Scout routes top-1: its one row is the token, alltoall moves no more.
  CHECK(PlanRules(*scout, c).dispatcher_values(1, 8) == D{MoeDispatcher::kAllToAll});
  CHECK(moe.dispatcher_values(8, 1) == D{MoeDispatcher::kAllToAll});
  CHECK(moe.dispatcher_values(2, 4) == D{MoeDispatcher::kAllToAll});
  CHECK(moe.dispatcher_values(1, 1) == D{MoeDispatcher::kAllToAll});
  CHECK(PlanRules(*llama, c).dispatcher_values(1, 8) == D{MoeDispatcher::kAllToAll});
}

TEST_CASE("search: one plan under two names is ranked once, its other names beside it (Note [Search twins])", "[search]") {
  // gpt2 on one DGX A100: a pipeline's placements tp,pp,dp and tp,dp,pp put
  // the same eight GPUs of one NVSwitch together, so they are one plan.
  const auto model = models::load_model("gpt2");
  const ClusterSpec cluster = load_cluster("dgx-a100");
  SearchOptions o = fp16_adam(32);
  o.top = 30;
  o.threads = 1;
  const SearchResult r = search(*model, cluster, o);
  REQUIRE(r.top.size() == 30);  // k plans, not k names
  int twins = 0;
  for (std::size_t i = 0; i < r.top.size(); ++i) {
    for (std::size_t j = i + 1; j < r.top.size(); ++j) CHECK_FALSE(same_plan(r.top[i], r.top[j]));
    const SearchEntry& e = r.top[i];
    if (e.also.empty()) continue;
    ++twins;
    INFO("entry " << i);
    REQUIRE(e.also == std::vector<std::string>{"placement tp,dp,pp"});
    CHECK(e.plan.spec.placement == "tp,pp,dp");
    // The other name, predicted on its own: the same time and peak.
    PlanSpec other = e.plan.spec;
    other.placement = "tp,dp,pp";
    check_same_as(*model, other, cluster, e);
  }
  CHECK(twins > 0);
  // Pruning counts plans too: the same ranking, the same other names.
  o.prune_by_time = false;
  const SearchResult all = search(*model, cluster, o);
  REQUIRE(all.top.size() == r.top.size());
  for (std::size_t i = 0; i < r.top.size(); ++i) {
    INFO("entry " << i);
    CHECK(all.top[i].iteration_time == r.top[i].iteration_time);
    CHECK(all.top[i].peak == r.top[i].peak);
    CHECK(all.top[i].also == r.top[i].also);
  }
  // Two nodes: the placements differ in what crosses the network; no twins.
  const SearchResult two = search(*model, load_cluster("dgx-a100", {parse_override("cluster.nodes=2")}), fp16_adam(64));
  for (const auto& e : two.top) CHECK(e.also.empty());
}

TEST_CASE("search: the same GPUs split another way between dp and cp, same time and peak, are ranked once (Note [Search twins])",
          "[search]") {
  // llama-3.2-1b at 8,192 tokens on one DGX H100, 32 sequences: dp 8 at
  // micro-batch 2, dp 4 x cp 2 at 4 and dp 2 x cp 4 at 8 each give a GPU
  // 2 x 8192 / 1 = 4 x 8192 / 2 = 8 x 8192 / 4 = 16,384 tokens a micro-step
  // and 32 / 16 = 2 micro-steps, and reduce over all 8 GPUs.
  const auto model = models::load_model("llama-3.2-1b");
  const ClusterSpec cluster = load_cluster("dgx-h100");
  SearchOptions o;
  o.global_batch = 32;
  o.top = 10;
  o.threads = 1;
  o.base = search_base_plan(cluster, {parse_override("plan.seq_len=8192")});
  const SearchResult r = search(*model, cluster, o);
  REQUIRE(r.top.size() == 10);
  int split = 0;
  for (std::size_t i = 0; i < r.top.size(); ++i) {
    for (std::size_t j = i + 1; j < r.top.size(); ++j) CHECK_FALSE(same_plan(r.top[i], r.top[j]));
    const SearchEntry& e = r.top[i];
    for (const std::string& name : e.also) {
      int dp = 0, cp = 0;
      long long mb = 0;
      if (std::sscanf(name.c_str(), "dp %d x cp %d at mb %lld", &dp, &cp, &mb) != 3) continue;
      ++split;
      INFO("entry " << i << " also " << name);
      CHECK(dp * cp == e.plan.dp * e.plan.cp);
      CHECK(mb * dp == e.plan.micro_batch * e.plan.dp);
      CHECK(cp > e.plan.cp);  // the enumeration's order: the smallest cp is shown
      // The other split, predicted on its own: the same time and peak.
      PlanSpec other = e.plan.spec;
      other.dp = dp;
      other.cp = cp;
      other.micro_batch = mb;
      check_same_as(*model, other, cluster, e);
    }
  }
  CHECK(split > 0);
  // The table's footnote says what was folded.
  const std::string text = format_search(r);
  CHECK(text.find("split another way between dp and cp") != std::string::npos);
}

TEST_CASE("search: the stage bounds of an interleaved pipeline, by hand (Note [Search])", "[search]") {
  // 8 layers of 1 ms forward and 2 ms backward keeping 1000 B each, 4
  // stages of 2 chunks, 8 micro-batches. Time: stage 3 waits for chunk 0's
  // forwards on stages 0-2 (3 ms), runs 8 x 2 chunks x 3 ms = 48 ms, and
  // their backwards follow its last (6 ms): 57 ms, Narayanan et al. 2021
  // section 2.2.2's m (tf + tb) + (p - 1)(tf + tb) / v with tf + tb = 6 ms a
  // stage. Memory: stage 0's warm-up is (4 - 1) x 2 + (2 - 1) x 4 = 10
  // forwards and one more before its first backward, 7 of chunk 0 and 4 of
  // chunk 1: 11 x 1000 B, beside its 2 parameters' fp32 weights (4 B) and
  // AdamW moments (8 B): 11,024 B.
  const test::FakeModel eight(8, 1, 1000);
  const test::FreeComm comm;
  const test::FixedCompute compute(1'000'000);
  const ClusterSpec c = test::round_cluster(1, 4);
  const test::PlanRun run = test::run_plan(eight, "pp: 4\nschedule: interleaved\nvirtual_stages: 2\nmicro_batches: 8\nmicro_batch: 1\n", c, comm, 1'000'000);
  const ScheduleShape shape = schedule_shape(Schedule::kInterleaved, 4, 2, 8);
  using Held = ScheduleShape::Held;
  CHECK(shape.held[0] == std::vector<Held>{{{7, 4}, {0, 0}}});
  CHECK(shape.held[3] == std::vector<Held>{{{4, 1}, {0, 0}}});
  CHECK(shape.first_chunk == std::vector<int>{0, 0, 0, 0});
  CHECK(shape.last_chunk == std::vector<int>{0, 0, 0, 0});
  const LayerCosts costs = layer_costs(price_layers(eight, run.plan, c, compute, comm), run.plan);
  const PlanBounds b = plan_bounds(costs, shape, run.plan, c);
  CHECK(b.time == static_cast<TimeNs>(57'000'000 * (1 - 1e-9)));
  CHECK(b.peak == 11'024);
  // The simulation meets both: free sends and equal chunks leave no gap.
  CHECK(run.exec.makespan >= b.time);
  CHECK(run.exec.makespan < 58'000'000);
  CHECK(run.exec.memory[0].at_peak.total() >= b.peak);
  // The bound without the split (m X / pp) was 8 x 24 / 4 = 48 ms.
  CHECK(b.time > 48'000'000);
  // A gather after each stage's step (Note [Search]) of its 2 parameters:
  // stage s ends at s + 48 ms + the longer of the gather and the 2s ms of
  // backwards the stages before it still run. At 4 ms a parameter (8 ms):
  // 56, 57, 58 and 59 ms; at 2.5 ms (5 ms): 53, 54, 55 and 3 + 48 + 6 = 57.
  auto per_param = [](TimeNs ns) { return [ns](std::int64_t params) { return params * ns; }; };
  CHECK(plan_bounds(costs, shape, run.plan, c, per_param(4'000'000)).time == static_cast<TimeNs>(59'000'000 * (1 - 1e-9)));
  CHECK(plan_bounds(costs, shape, run.plan, c, per_param(2'500'000)).time == static_cast<TimeNs>(57'000'000 * (1 - 1e-9)));
  // Under the expert-parallel overlap each layer's all-to-alls run on a
  // stream of their own (LayerCosts::ep_off_stream): a stage is as busy as
  // the busier stream. At 4 ms a layer, a stage's two chunks take 8 ms of
  // all-to-alls a micro-batch against 6 ms of compute: 3 + 8 x 8 + 6 =
  // 73 ms. At 2 ms (4 ms a micro-batch) the compute stream stays the longer: 57 ms.
  LayerCosts overlapped = costs;
  overlapped.ep_off_stream.assign(costs.forward.size(), 4'000'000);
  CHECK(plan_bounds(overlapped, shape, run.plan, c).time == static_cast<TimeNs>(73'000'000 * (1 - 1e-9)));
  overlapped.ep_off_stream.assign(costs.forward.size(), 2'000'000);
  CHECK(plan_bounds(overlapped, shape, run.plan, c).time == static_cast<TimeNs>(57'000'000 * (1 - 1e-9)));
}

TEST_CASE("search: DeepSpeed ZeRO-2's buffers join its memory bound (Note [ZeRO-2's buffers])", "[search]") {
  // 8 layers of 1M fp32 parameters keeping 1000 B each, ZeRO-2 over 2 ranks,
  // 1 MB buckets: at its first backward a rank holds the 8M parameters'
  // weights (32 MB), its half of their gradients (4M x 4 B = 16 MB) and of
  // AdamW's moments (4M x 8 B = 32 MB), the forward's 8 x 1000 B, and
  // DeepSpeed's two 1 MB buffers (one without overlap_comm, none with
  // contiguous_gradients false): 80,008,000 B and the buffers. The step
  // (weights, gradient shard, moments, no activations) holds 80,000,000 B.
  const test::FakeModel m(8, 1'000'000, 1000);
  const test::FreeComm comm;
  const test::FixedCompute compute(1'000'000);
  const ClusterSpec c = test::round_cluster(1, 2);
  const ScheduleShape shape = schedule_shape(Schedule::k1f1b, 1, 1, 1);
  const auto bound = [&](const std::string& extra) {
    const test::PlanRun run = test::run_plan(m, "dp: 2\nprecision: fp32\nzero_stage: 2\nbucket_mb: 1\n" + extra, c, comm, 1'000'000);
    const LayerCosts costs = layer_costs(price_layers(m, run.plan, c, compute, comm), run.plan);
    const Bytes b = plan_bounds(costs, shape, run.plan, c).peak;
    CHECK(run.exec.memory[0].at_peak.total() >= b);  // a bound still
    return b - c.device.runtime_reserved;
  };
  CHECK(bound("") == 80'008'000 + 2'000'000);
  CHECK(bound("overlap: false\n") == 80'008'000 + 1'000'000);
  CHECK(bound("contiguous_gradients: false\n") == 80'008'000);
}

TEST_CASE("search: what a ZB-H1 stage holds, by hand (Note [Search])", "[search]") {
  // 4 stages, 8 micro-batches. Stage 0 runs 3 forwards, then F B W: 4
  // forwards alive before a B, 3 beside its pending W after it (it runs each
  // W right after its B). The last stage defers 3 weight passes: F0 B0 F1 B1 F2 B2, then F3 B3
  // W0 ...: after F3 one forward beside 3 pending passes, after B3 none
  // beside 4; neither holds more of both.
  using Held = ScheduleShape::Held;
  const ScheduleShape shape = schedule_shape(Schedule::kZbH1, 4, 1, 8);
  CHECK(shape.held[0] == std::vector<Held>{{{4}, {0}}, {{3}, {1}}});
  CHECK(shape.held[3] == std::vector<Held>{{{1}, {3}}, {{0}, {4}}});
  CHECK(shape.last_chunk == std::vector<int>{-1, -1, -1, -1});
  // 8 layers keeping 1000 B, whose weight GEMM of 300 B a sequence keeps
  // its two operands, 2/3 of it, for W: 2 x 200 B a stage and micro-batch.
  // Stage 3 holds max(2000 + 3 x 400, 4 x 400) = 3,200 B, stage 0 4 x 2000
  // = 8,000 B, beside 2 parameters' fp32 weights and AdamW moments (24 B).
  const test::FakeModel eight = test::FakeModel(8, 1, 1000).split_backward(300);
  const test::FreeComm comm;
  const test::FixedCompute compute(1'000'000);
  const ClusterSpec c = test::round_cluster(1, 4);
  const test::PlanRun run = test::run_plan(eight, "pp: 4\nschedule: zb-h1\nmicro_batches: 8\nmicro_batch: 1\n", c, comm, 1'000'000);
  const LayerCosts costs = layer_costs(price_layers(eight, run.plan, c, compute, comm), run.plan);
  CHECK(costs.weight_hold[0] == 200);
  // Stage 0 (8,000 B; 3 x 2000 + 400 after a B is less) is the plan's bound.
  CHECK(plan_bounds(costs, shape, run.plan, c).peak == 8'024);
  CHECK(run.exec.memory[0].at_peak.total() >= 8'024);
  CHECK(run.exec.memory[3].at_peak.total() >= 3'224);
}

TEST_CASE("search: the stage bounds are below every shipped plan's simulated time and peak, under each schedule", "[search]") {
  // Note [Search]: each stage's chain of passes and what it holds at its
  // first backward, from its layers' costs split as the partition splits
  // them; predictions only add (sends, waits, buffers) to both.
  int zero3_bounds = 0, schedules = 0, step_gathers = 0, tp_overlaps = 0, ep_overlaps = 0;
  for (const char* name : {"gpt2", "bert-large", "llama-tiny", "gpt-7.5b", "moe-tiny"}) {
    const auto model = models::load_model(name);
    for (int nodes : {1, 8}) {
      const ClusterSpec cluster = load_cluster("dgx-a100", {parse_override("cluster.nodes=" + std::to_string(nodes))});
      for (const auto& plan_name : list_configs("plans")) {
        const PlanSpec shipped = load_plan(plan_name);
        std::vector<PlanSpec> variants{shipped};
        {
          // Megatron's block method (Note [Block recompute]): one block a chunk rerun.
          PlanSpec v = shipped;
          v.recompute = Recompute::kFull;
          v.recompute_method = RecomputeMethod::kBlock;
          v.recompute_num_layers = 1;
          variants.push_back(v);
        }
        if (shipped.pp > 1) {
          for (Schedule sc : {Schedule::k1f1b, Schedule::kGpipe, Schedule::kZbH1, Schedule::kInterleaved}) {
            PlanSpec v = shipped;
            v.schedule = sc;
            v.virtual_stages = sc == Schedule::kInterleaved ? 2 : 0;
            if (sc != shipped.schedule || (sc == Schedule::kInterleaved && shipped.virtual_stages != 2)) variants.push_back(v);
          }
        }
        // Megatron's expert-parallel overlap (Note [Expert-parallel
        // overlap]): the all-to-alls on their own stream, the busier
        // stream's work counted.
        if (std::string(name) == "moe-tiny") {
          for (std::size_t k = 0, n = variants.size(); k < n; ++k) {
            PlanSpec v = variants[k];
            v.ep = 2;
            v.overlap_moe_expert_parallel_comm = true;
            variants.push_back(v);
          }
        }
        // Transformer Engine's TP overlap (Note [TP comm overlap]): the
        // bounds count what the GEMMs leave exposed.
        for (std::size_t k = 0, n = variants.size(); k < n; ++k) {
          if (!variants[k].sequence_parallel) continue;
          PlanSpec v = variants[k];
          v.tp_comm_overlap = true;
          variants.push_back(v);
        }
        for (const PlanSpec& spec : variants) {
          INFO(name << " " << plan_name << " (" << to_string(spec.schedule) << ") on " << nodes << " nodes");
          Prediction p;
          try {
            p = predict(*model, spec, cluster);
          } catch (const ConfigError&) {
            continue;
          }
          ++schedules;
          if (spec.tp_comm_overlap) ++tp_overlaps;
          if (p.plan.overlap_moe_expert_parallel_comm) ++ep_overlaps;
          const LayerCosts costs = layer_costs(price_plan_layers(*model, p.plan, cluster), p.plan);
          const ScheduleShape shape = schedule_shape(p.plan.schedule, p.plan.pp, p.plan.virtual_stages, p.plan.grad_accum);
          const AnalyticCommModel comm(cluster);
          const auto gather = step_gather_bound(p.plan, cluster, comm);
          const PlanBounds b = plan_bounds(costs, shape, p.plan, cluster, gather);
          Bytes peak = 0;
          for (const auto& rm : p.ranks) peak = std::max(peak, rm.peak);
          CHECK(b.time > 0);
          CHECK(b.time <= p.iteration_time);
          // The distributed optimizer's gather after the step lengthens
          // the bound (Note [Search]); gathering in the forward, none.
          if (gather) {
            ++step_gathers;
            CHECK(b.time > plan_bounds(costs, shape, p.plan, cluster).time);
            ResolvedPlan early = p.plan;
            early.overlap_param_gather = true;
            CHECK_FALSE(step_gather_bound(early, cluster, comm));
          }
          CHECK(b.peak > cluster.device.runtime_reserved);
          CHECK(b.peak <= peak);
          // Never below one micro-batch's work m X / pp, the bound that knows no split.
          const double x = static_cast<double>(micro_batch_compute(*model, p.plan, cluster));
          CHECK(static_cast<double>(b.time) + 1 >= x * static_cast<double>(p.plan.grad_accum) / p.plan.pp * (1 - 1e-6));
          if (p.plan.pp == 1) {
            // With the slowdown of compute beside the data-parallel collectives
            // (Note [Search]): m X plus the least their overlap can cost.
            const TimeNs slow = interference_time_bound(p.plan, model->parameters(), model->layer_count(), cluster,
                                                        AnalyticCommModel(cluster), costs, zero3_persistent_elements(*model, p.plan),
                                                        fsdp_root_elements(*model, p.plan));
            // Under tensor parallelism the collectives may overlap its
            // all-reduces on the compute stream, which slow nothing: the
            // term may be 0 there (a small model's gradients on one node).
            if (p.plan.dp > 1 && p.plan.tp == 1) CHECK(slow > 0);
            CHECK(b.time + slow <= p.iteration_time);
            if (p.plan.zero_stage == 3) ++zero3_bounds;
          }
        }
      }
    }
  }
  CHECK(zero3_bounds >= 8);  // zero3 and fsdp, 4 models, 1 and 8 nodes
  CHECK(step_gathers >= 10);  // zero1 and megatron-3d's distributed optimizer, 5 models, 1 and 8 nodes
  CHECK(tp_overlaps >= 8);  // megatron-3d's (tp 8) schedules with the overlap, 1 and 8 nodes
  INFO("expert-parallel overlaps " << ep_overlaps);
  CHECK(ep_overlaps >= 10);  // moe-tiny's one-stage and interleaved plans at ep 2, 1 and 8 nodes
  CHECK(schedules > 150);
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
  // One micro-batch, 4 of the 10 the gradients its backward makes: they
  // and the 40 it kept never all coexist: 6 + 40; at the step, the 10.
  CHECK(peak_lower_bound(10 * G, 40 * G, 1, 1, Schedule::k1f1b, 4 * G) == 46 * G);
  CHECK(peak_lower_bound(10 * G, 1 * G, 1, 1, Schedule::k1f1b, 4 * G) == 10 * G);
  // With two they do: the first micro-batch's gradients beside the second's activations.
  CHECK(peak_lower_bound(10 * G, 40 * G, 1, 2, Schedule::k1f1b, 4 * G) == 50 * G);
}

TEST_CASE("search: pruning by the memory bound drops only plans that do not fit", "[search]") {
  // gpt2-xl on 8 V100-16GB: many pipelines and micro-batches that overflow
  // 16 GB; gpt-3.6b, among them ZeRO-1 plans of one micro-batch that fit
  // only because their gradients come as their activations go.
  const std::string name = GENERATE(as<std::string>{}, "gpt2-xl", "gpt-3.6b");
  INFO(name);
  check_memory_bound(*models::load_model(name), load_cluster("8xv100-16g"), fp16_adam(64));
}

TEST_CASE("search: under the precision-aware optimizer the memory bound counts its narrow states (Note [Precision-aware optimizer])",
          "[search]") {
  // gpt-3.6b on 8 V100-16GB with bf16 moments: 4 + 2 + 2 bytes of state a
  // parameter of the shard, not 12. A bound that counted 12 would drop
  // plans that fit. The candidates without the distributed optimizer keep
  // fp32 states, as resolve asks.
  SearchOptions o = fp16_adam(64);
  o.base.use_precision_aware_optimizer = true;
  o.base.exp_avg_dtype = o.base.exp_avg_sq_dtype = StateDtype::kBf16;
  const SearchResult all = check_memory_bound(*models::load_model("gpt-3.6b"), load_cluster("8xv100-16g"), o);
  bool aware = false;
  for (const auto& e : all.top) {
    CHECK(e.plan.use_precision_aware_optimizer == (e.plan.zero_stage == 1 && !e.plan.fsdp));
    aware = aware || e.plan.use_precision_aware_optimizer;
  }
  CHECK(aware);
}

TEST_CASE("search: under fused kernels the memory bound still drops only plans that do not fit (Note [Fused kernels])", "[search]") {
  // A Llama at 4k tokens on 8 V100-16GB, its norms and SwiGLU as
  // Megatron-Core runs them: the bound's activations must be the fused
  // ones the simulation keeps, or it would drop plans that fit.
  SearchOptions o = fp16_adam(32);
  o.base.seq_len = 4096;
  o.base.kernels = Kernels::kFused;
  const SearchResult all = check_memory_bound(*models::load_model("llama-3.2-1b"), load_cluster("8xv100-16g"), o);
  CHECK(all.top.front().plan.kernels == Kernels::kFused);
}

TEST_CASE("search: torchtitan's op-level recompute where it is described, and nowhere else (Note [Op-level recompute])", "[search]") {
  // A dense Llama on 8 H100s in bf16: op recompute is described for its
  // blocks at tp 1 and cp 1 with fused attention (models/src/llama.cpp),
  // so the search tries it there and only there; GPT-2's blocks do not
  // describe it.
  const auto llama = models::load_model("llama-tiny");
  const ClusterSpec cluster = load_cluster("dgx-h100");
  SearchOptions o;
  o.global_batch = 16;
  o.top = 1000000;
  o.threads = 1;
  o.base.precision = Precision::kBf16;
  o.prune_by_time = false;
  const SearchResult r = search(*llama, cluster, o);
  int op = 0, op_tp1 = 0;
  for (const auto& e : r.top) {
    if (e.plan.spec.recompute != Recompute::kOp) continue;
    ++op;
    op_tp1 += e.plan.tp == 1 && e.plan.cp == 1 && e.plan.flash_attention ? 1 : 0;
  }
  CHECK(op > 0);
  CHECK(op_tp1 == op);
  // Each is what predict gives it alone: keeping less than none and more
  // than full.
  for (const auto& e : r.top) {
    if (e.plan.spec.recompute != Recompute::kOp) continue;
    const Prediction alone = predict(*llama, e.plan.spec, cluster);
    CHECK(alone.iteration_time == e.iteration_time);
    PlanSpec none = e.plan.spec, full = e.plan.spec;
    none.recompute = Recompute::kNone;
    full.recompute = Recompute::kFull;
    CHECK(predict(*llama, none, cluster).iteration_time < e.iteration_time);
    CHECK(predict(*llama, full, cluster).iteration_time > e.iteration_time);
    break;
  }
  // Pruning keeps the ranking with op among the choices.
  o.top = 20;
  o.prune_by_time = true;
  const SearchResult pruned = search(*llama, cluster, o);
  o.prune_by_time = false;
  const SearchResult all = search(*llama, cluster, o);
  REQUIRE(pruned.top.size() == all.top.size());
  for (std::size_t i = 0; i < all.top.size(); ++i) {
    CHECK(pruned.top[i].iteration_time == all.top[i].iteration_time);
    CHECK(pruned.top[i].plan.spec.recompute == all.top[i].plan.spec.recompute);
  }
  const auto gpt = models::load_model("gpt2-tiny");
  o.top = 1000000;
  for (const auto& e : search(*gpt, cluster, o).top) CHECK(e.plan.spec.recompute != Recompute::kOp);
}

TEST_CASE("search: Megatron's block recompute where the plan without recompute cannot fit (Note [Search recompute])", "[search]") {
  // llama-3.2-1b (16 blocks) at 65,536 tokens on 2 H100s in bf16, cp held
  // at 1: nothing fits without recompute, and rerunning a quarter, a half or
  // three quarters of the blocks (4, 8, 12) is tried between none and all.
  const auto model = models::load_model("llama-3.2-1b");
  const ClusterSpec cluster = load_cluster("dgx-h100");
  SearchOptions o;
  o.gpus = 2;
  o.global_batch = 4;
  o.top = 10;
  o.threads = 1;
  o.base = search_base_plan(cluster, {parse_override("plan.seq_len=65536"), parse_override("plan.precision=bf16"),
                                      parse_override("plan.cp=1")});
  const SearchResult r = search(*model, cluster, o);
  REQUIRE_FALSE(r.top.empty());
  int blocks = 0;
  for (const SearchEntry& e : r.top) {
    INFO(e.plan.recompute_blocks);
    CHECK(e.plan.spec.recompute != Recompute::kNone);
    if (e.plan.recompute_blocks == 0) continue;
    ++blocks;
    CHECK((e.plan.recompute_blocks == 4 || e.plan.recompute_blocks == 8 || e.plan.recompute_blocks == 12));
    // What predict gives it alone; its plan without recompute does not fit,
    // with every block rerun it is slower.
    check_same_as(*model, e.plan.spec, cluster, e);
    PlanSpec none = e.plan.spec, full = e.plan.spec;
    none.recompute = Recompute::kNone;
    none.recompute_method = RecomputeMethod::kUniform;
    none.recompute_num_layers = 0;
    full.recompute_method = RecomputeMethod::kUniform;
    full.recompute_num_layers = 0;
    CHECK_FALSE(predict(*model, none, cluster).fits);
    CHECK(predict(*model, full, cluster).iteration_time > e.iteration_time);
  }
  CHECK(blocks > 0);
  CHECK(r.top.front().plan.recompute_blocks > 0);  // the fastest reruns only some
  // Pruning keeps the ranking with the block method among the choices.
  o.prune_by_time = false;
  o.prune_by_memory = false;
  const SearchResult all = search(*model, cluster, o);
  CHECK(all.enumerated == r.enumerated);
  REQUIRE(all.top.size() == r.top.size());
  for (std::size_t i = 0; i < all.top.size(); ++i) {
    CHECK(all.top[i].iteration_time == r.top[i].iteration_time);
    CHECK(all.top[i].plan.recompute_blocks == r.top[i].plan.recompute_blocks);
  }
}

TEST_CASE("search: ZeRO-1 gathers in the forward where the rules allow it, in the step where set so", "[search]") {
  // gpt2-xl on 16 A100s (Note [Search]): every distributed-optimizer plan
  // gathers its parameters in the next forward (Note [Overlapped parameter
  // gather]), never slower and no larger; no other sharding has it.
  const auto model = models::load_model("gpt2-xl");
  const ClusterSpec cluster = load_cluster("dgx-a100", {parse_override("cluster.nodes=2")});
  const auto zero1 = [](const PlanSpec& p) { return p.zero_stage == 1 && p.fsdp == FsdpMode::kNone; };
  const auto gathers = [](const PlanSpec& p) { return p.overlap_param_gather; };
  const auto walked = count_plans(*model, cluster, {}, zero1, gathers);
  CHECK(walked[0] > 0);
  CHECK(walked[1] == 0);
  CHECK(walked[2] == 0);
  // In the step where set so, or where the rules refuse it (the Python
  // loop's ZeroRedundancyOptimizer, or no overlapped reduction).
  for (const char* o : {"plan.overlap_param_gather=false", "plan.runtime=python", "plan.overlap=false"}) {
    INFO(o);
    const auto n = count_plans(*model, cluster, {parse_override(o)}, zero1, gathers);
    CHECK((n[0] == 0 && n[1] == walked[0] && n[2] == 0));
  }
  const auto on = count_plans(*model, cluster, {parse_override("plan.overlap_param_gather=true")}, zero1, gathers);
  CHECK((on[0] == walked[0] && on[1] == 0 && on[2] == 0));
  // Asked for where no plan may have it: said, not refused.
  SearchOptions serial = fp16_adam(128);
  serial.top = 3;
  serial.base = search_base_plan(cluster, {parse_override("plan.overlap=false"), parse_override("plan.overlap_param_gather=true")});
  const SearchResult warned = search(*model, cluster, serial);
  CHECK_FALSE(warned.top.empty());
  CHECK(warned.warnings == std::vector<std::string>{
                               "plan.overlap_param_gather: true applies to no plan searched: it needs the distributed optimizer "
                               "(zero_stage 1, tried where dp > 1) with overlap: true, outside runtime: python"});
  CHECK(format_search(warned).find("\n  warning: plan.overlap_param_gather: true applies to no plan") != std::string::npos);

  // Every distributed-optimizer plan that fits, predicted alone with the
  // gather in the step, is no faster and peaks the same; the gather in the
  // forward takes it off the critical path, so where the gradients cross
  // the nodes (dp 16) it is strictly faster.
  const auto [checked, slower] = never_slower(
      *model, cluster, {}, [](const ResolvedPlan& p) { return p.zero1_gathers_in_forward(); },
      [](PlanSpec& p) { p.overlap_param_gather = false; });
  CHECK(checked > 20);
  CHECK(slower > 0);
}

TEST_CASE("search: the header names the tokens a sample, and a long default context is said (Note [A long default sequence])",
          "[search][advice]") {
  // llama-3.2-1b's context is 131,072 tokens; on 8 H100s, global batch 8.
  const auto model = models::load_model("llama-3.2-1b");
  const ClusterSpec cluster = load_cluster("dgx-h100");
  SearchOptions o;
  o.global_batch = 8;
  o.top = 1;
  o.base = search_base_plan(cluster, {parse_override("plan.seq_len=4096")});
  const SearchResult given = search(*model, cluster, o);
  CHECK(given.seq_len == 4096);
  CHECK(given.warnings.empty());
  CHECK(format_search(given).rfind("dtsim search: llama-3.2-1b on 8 GPUs of dgx-h100, global batch 8 of 4096 tokens (capacity", 0) == 0);
  CHECK(search_to_json(given).find("\"seq_len\": 4096") != std::string::npos);
  o.base = search_base_plan(cluster, {});
  const SearchResult whole = search(*model, cluster, o);
  CHECK(whole.seq_len == 131072);
  CHECK(whole.warnings == std::vector<std::string>{"plan.seq_len is llama-3.2-1b's whole context, 131072 tokens, as none was "
                                                   "given; set plan.seq_len to your run's sequence length (pretraining "
                                                   "typically runs 4096 or 8192)"});
  // A model without a sequence says no tokens.
  o.base = search_base_plan(load_cluster("dgx-a100"), {});
  const SearchResult mlp = search(*models::load_model("mlp"), load_cluster("dgx-a100"), o);
  CHECK(format_search(mlp).find("global batch 8 (capacity") != std::string::npos);
}

TEST_CASE("search: sequence parallelism's collectives overlap the GEMMs where set so and the rules allow it (Note [TP comm overlap])", "[search]") {
  // gpt2-large (20 heads: tp 2 and 4) on 16 A100s: with
  // plan.tp_comm_overlap set, every plan with sequence parallelism overlaps
  // its collectives (Transformer Engine's userbuffers), none without it
  // (which the rules refuse); unset, none.
  const auto model = models::load_model("gpt2-large");
  const ClusterSpec cluster = load_cluster("dgx-a100", {parse_override("cluster.nodes=2")});
  const auto sp = [](const PlanSpec& p) { return p.sequence_parallel; };
  const auto overlaps = [](const PlanSpec& p) { return p.tp_comm_overlap; };
  const std::vector<Override> set{parse_override("plan.tp_comm_overlap=true")};
  const auto on = count_plans(*model, cluster, set, sp, overlaps);
  CHECK((on[0] > 0 && on[1] == 0 && on[2] == 0));
  const auto unset = count_plans(*model, cluster, {}, sp, overlaps);
  CHECK((unset[0] == 0 && unset[1] == on[0] && unset[2] == 0));
  // gpt2-xl's 25 heads allow tp 1 alone: no plan has sequence parallelism,
  // and the search says so.
  SearchOptions one = fp16_adam(128);
  one.top = 3;
  one.base = search_base_plan(cluster, set);
  const SearchResult warned = search(*models::load_model("gpt2-xl"), cluster, one);
  CHECK(warned.warnings ==
        std::vector<std::string>{"plan.tp_comm_overlap: true applies to no plan searched: it needs sequence parallelism, so tp > 1"});
  one.base = search_base_plan(cluster, {});
  CHECK(search(*models::load_model("gpt2-xl"), cluster, one).warnings.empty());
  // Each overlapped plan that fits, predicted alone without the overlap,
  // exposes every collective and runs its GEMMs whole: without a pipeline
  // the same peak, and slower where its GEMMs' chunks still fill the GPU
  // (Note [TP comm overlap], Note [Userbuffers' chunks] in
  // models/src/layers.cpp).
  SearchOptions o = fp16_adam(128);
  o.base = search_base_plan(cluster, set);
  o.threads = 1;
  o.prune_by_time = false;
  const SearchResult r = search(*model, cluster, o);
  int checked = 0;
  for (const SearchEntry& e : r.top) {
    if (!e.plan.tp_comm_overlap) continue;
    PlanSpec without = e.plan.spec;
    without.tp_comm_overlap = false;
    const Prediction p = predict(*model, without, cluster);
    Bytes peak = 0;
    for (const auto& rm : p.ranks) peak = std::max(peak, rm.peak);
    // A pipeline's peak falls where its passes' timing puts it (whole
    // GEMMs change the forward's time and the backward's apart).
    if (e.plan.pp > 1) continue;
    ++checked;
    CHECK(peak == e.peak);
  }
  CHECK(checked > 20);
  // tp 4 at 4 sequences of 1,024 tokens a micro-batch: chunks of 1,024 rows
  // (8 x 8 tiles of 128 for the QKV GEMM's 3 x 1280 / 4 = 960 columns, as
  // many as whole at tp 1 and 1,024 tokens): the overlap hides more than
  // the chunks cost. At one sequence, chunks of 256 rows: 2 x 8 = 16 tiles
  // of the A100's 108 SMs where the whole GEMM has 64, each chunk at a
  // quarter of the efficiency: the overlap costs more than it hides.
  const auto step = [&](int micro_batch, bool overlap) {
    PlanSpec s = parse_plan("name: t\nprecision: fp16\n", "t.yaml");
    s.tp = 4;
    s.dp = 4;
    s.micro_batch = micro_batch;
    s.sequence_parallel = true;
    s.tp_comm_overlap = overlap;
    return predict(*model, s, cluster).iteration_time;
  };
  CHECK(step(4, true) < step(4, false));
  CHECK(step(1, true) > step(1, false));
}

TEST_CASE("search: the interference term by hand, cheapest overlap first (Note [Search])", "[search][interference]") {
  // Two GPUs of a round node, DDP: one all-reduce of 100 us (FixedComm);
  // the term is rounded down to whole ns (and a part in 1e9 below).
  // SMs' slowdown 0.25; NVLink at 100 GB/s with 3 bytes of HBM a link byte
  // over 600 GB/s: h = 0.5, the HBM's slowdown 1 (lowering_common.hpp).
  const test::FakeModel m(4, 1'000'000, 1000);
  sim::ClusterSpec c = test::round_cluster(1, 2);
  c.device.comm_slowdown = 0.25;
  c.device.memory_bandwidth = 6e11;
  REQUIRE(hbm_slowdown(c.device, c.intra_node.rate()) == Approx(1.0));
  const ResolvedPlan p = resolve(parse_plan("name: t\nmicro_batch: 1\nprecision: fp32\n", "t.yaml"), m, c);
  REQUIRE(p.dp == 2);
  const test::FixedComm comm(100 * kNsPerUs);
  const double us = static_cast<double>(kNsPerUs);
  LayerCosts work;
  // 200 us of kernels, 20 of them memory-bound: the compute-bound kernels
  // lose less (0.25 / 1.25 = 0.2 of what they overlap against 0.5) and can
  // cover 180 x 1.25 = 225 us: 100 x 0.2 = 20 us.
  work.kernels_ns = 200 * us;
  work.memory_ns = 20 * us;
  CHECK(static_cast<double>(interference_time_bound(p, m.parameters(), m.layer_count(), c, comm, work)) == Approx(20 * us).margin(1));
  // 40 us of kernels, 20 memory-bound: 25 us covered at 0.2 (5 us), 40 at
  // 0.5 (20 us), the last 35 us alone: 60 us.
  work.kernels_ns = 40 * us;
  CHECK(static_cast<double>(interference_time_bound(p, m.parameters(), m.layer_count(), c, comm, work)) == Approx(60 * us).margin(1));
  // 150 us of serial collectives on the compute stream cover it all: nothing.
  work.serial_comm_ns = 150 * us;
  CHECK(interference_time_bound(p, m.parameters(), m.layer_count(), c, comm, work) == 0);
  // 60 us of them: the other 40 us over the kernels, 25 at 0.2, 15 at 0.5.
  work.serial_comm_ns = 60 * us;
  CHECK(static_cast<double>(interference_time_bound(p, m.parameters(), m.layer_count(), c, comm, work)) == Approx(12.5 * us).margin(1));
}

TEST_CASE("search: selective candidates keep the plan's recompute modules, the others drop them (Note [Recompute modules])",
          "[search][recompute]") {
  const auto model = models::load_model("llama-tiny");
  const ClusterSpec cluster = load_cluster("dgx-a100", {});
  SearchOptions o = fp16_adam(64);
  o.base = search_base_plan(cluster, {parse_override("plan.recompute_modules=[mlp]"), parse_override("plan.precision=fp16")});
  int selective = 0;
  for (const PlanSpec& p : enumerate_plans(*model, cluster, o)) {
    if (p.recompute == Recompute::kSelective) {
      ++selective;
      CHECK(p.recompute_modules == kRecomputeMlp);
      CHECK(p.recompute_modules_set);
    } else {
      CHECK_FALSE(p.recompute_modules_set);  // resolve would refuse them otherwise
    }
  }
  CHECK(selective > 0);
  // Each selective plan the search returns, predicted on its own: the same
  // time and peak (its memory bound dropped what the modules drop).
  o.top = 1000000;
  const SearchResult r = search(*model, cluster, o);
  int checked = 0;
  for (const SearchEntry& e : r.top) {
    if (e.plan.spec.recompute != Recompute::kSelective || checked == 5) continue;
    ++checked;
    check_same_as(*model, e.plan.spec, cluster, e);
  }
  CHECK(checked == 5);
}

// Note [Your plan]: a plan given beside the search is predicted as written
// and placed among the ranked plans, 1 + the listed plans faster than it.
TEST_CASE("search: a plan of the user's ranked beside the search's (Note [Your plan])", "[search]") {
  const auto model = models::load_model("gpt2-xl");
  const ClusterSpec cluster = load_cluster("8xv100-16g");
  SearchOptions o = fp16_adam(64);
  o.top = 5;
  const SearchResult plain = search(*model, cluster, o);
  REQUIRE(plain.top.size() == 5);
  CHECK_FALSE(plain.compared);
  CHECK(plain.compared_error.empty());
  // The search's own third plan, given back, ranks third at its own time;
  // its winner ranks first.
  for (std::size_t k : {std::size_t{0}, std::size_t{2}}) {
    o.compare = plain.top[k].plan.spec;
    o.compare_name = "mine";
    const SearchResult r = search(*model, cluster, o);
    REQUIRE(r.compared);
    CHECK(r.compared_name == "mine");
    CHECK(r.compared->iteration_time == plain.top[k].iteration_time);
    CHECK(r.compared_rank == static_cast<int>(k) + 1);
    CHECK(r.top.size() == plain.top.size());
  }
  // Top 2: the third is outside the listed ones (rank 0); the text says so.
  o.top = 2;
  o.compare = plain.top[2].plan.spec;
  SearchResult r = search(*model, cluster, o);
  REQUIRE(r.compared);
  CHECK(r.compared_rank == 0);
  CHECK(format_search(r).find("slower than the 2 listed") != std::string::npos);
  // Plain DDP holds 1.56B x 16 B = 25 GB of model states on a 16 GB GPU:
  // predicted, said not to fit, unranked.
  o.compare = load_plan("ddp", {{"plan", "precision", "fp16"}});
  r = search(*model, cluster, o);
  REQUIRE(r.compared);
  CHECK_FALSE(r.compared->fits);
  CHECK(r.compared_rank == 0);
  CHECK(format_search(r).find("it does not fit") != std::string::npos);
  // The search's batch is the plan's unless asked another: 8 GPUs of DDP at
  // micro-batch 2 and 4 micro-steps is 64 sequences; asked 128, the plan
  // is predicted at 128 (8 micro-steps).
  o.global_batch = 0;
  o.compare = load_plan("ddp", {{"plan", "precision", "fp16"}, {"plan", "micro_batch", "2"}, {"plan", "grad_accum", "4"}});
  r = search(*model, cluster, o);
  CHECK(r.global_batch == 64);
  o.global_batch = 128;
  r = search(*model, cluster, o);
  CHECK(r.global_batch == 128);
  REQUIRE(r.compared);
  CHECK(r.compared->plan.global_batch == 128);
  CHECK(r.compared->plan.grad_accum == 8);
  // No plan on this cluster (tp 16 on 8 GPUs), or on a part of it: why, in its place.
  o.compare = load_plan("ddp", {{"plan", "tp", "16"}});
  r = search(*model, cluster, o);
  CHECK_FALSE(r.compared);
  CHECK(r.compared_error.find("plan.tp") != std::string::npos);
  CHECK(format_search(r).find("not a plan here: ") != std::string::npos);
  o.gpus = 4;
  o.global_batch = 64;
  o.compare = plain.top[0].plan.spec;
  r = search(*model, cluster, o);
  CHECK(r.compared_error ==
        "the plan uses 8 of the cluster's 8 GPUs and the search 4: search as many (--gpus 8), or set the cluster's size");
}

TEST_CASE("search: a held schedule binds the pipelines, and leaves the plans of one stage", "[search]") {
  // gpt2-xl on 16 A100s: held at GPipe, every pipeline searched is GPipe's,
  // and the plans without a pipeline (which run no schedule) are still there,
  // as many as when nothing is held.
  const auto model = models::load_model("gpt2-xl");
  const ClusterSpec cluster = load_cluster("dgx-a100", {parse_override("cluster.nodes=2")});
  const auto pipeline = [](const PlanSpec& p) { return p.pp > 1; };
  const auto gpipe = [](const PlanSpec& p) { return p.schedule == Schedule::kGpipe; };
  const auto held = count_plans(*model, cluster, {parse_override("plan.schedule=gpipe")}, pipeline, gpipe);
  CHECK(held[0] > 0);
  CHECK(held[1] == 0);
  const auto one_stage = [](const PlanSpec& p) { return p.pp == 1; };
  const auto any = [](const PlanSpec&) { return true; };
  const auto free = count_plans(*model, cluster, {}, one_stage, any);
  const auto bound = count_plans(*model, cluster, {parse_override("plan.schedule=gpipe")}, one_stage, any);
  CHECK(free[0] > 0);
  CHECK(bound[0] == free[0]);
}
