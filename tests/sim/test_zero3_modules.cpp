// DeepSpeed ZeRO-3 module by module (Note [ZeRO-3 modules] in
// sim/src/lowering/zero3_coordinator.hpp): the coordinator's decisions on
// hand-built traces, derived step by step from partitioned_param_coordinator.py's
// rules, and the lowering's memory and collectives that follow from them.
#include <catch2/catch.hpp>

#include <string>
#include <vector>

#include "dtsim/models/models.hpp"
#include "dtsim/sim/config_io.hpp"
#include "dtsim/sim/partition.hpp"
#include "dtsim/sim/predict.hpp"
#include "fake_model.hpp"
#include "test_util.hpp"
#include "lowering/zero3_coordinator.hpp"

using namespace dtsim;
using namespace dtsim::sim;
using detail::coordinate_zero3;
using detail::Zero3Knobs;
using detail::Zero3Step;

namespace {

using Ids = std::vector<int>;

// Four modules A, B, C, D of 30 elements each (ids 0-3), none persistent.
const std::vector<std::int64_t> kThirty(4, 30);
const std::vector<bool> kNone(4, false);

std::vector<Ids> fetches(const std::vector<Zero3Step>& s) {
  std::vector<Ids> out;
  for (const auto& x : s) out.push_back(x.fetch);
  return out;
}
std::vector<Ids> prefetches(const std::vector<Zero3Step>& s) {
  std::vector<Ids> out;
  for (const auto& x : s) out.push_back(x.prefetch);
  return out;
}
std::vector<Ids> releases(const std::vector<Zero3Step>& s) {
  std::vector<Ids> out;
  for (const auto& x : s) out.push_back(x.release);
  return out;
}
std::vector<std::int64_t> lives(const std::vector<Zero3Step>& s) {
  std::vector<std::int64_t> out;
  for (const auto& x : s) out.push_back(x.live);
  return out;
}

}  // namespace

TEST_CASE("ZeRO-3's coordinator prefetches up to the bucket, checking before it adds", "[zero3][coordinator]") {
  // Trace A B C D, bucket 40, reuse distance 0 (release at once).
  // t0: fetch A (30 live); prefetch B (0 < 40: add, 30), C (30 < 40: add,
  //     60; stop): 90 live; A released -> 60.
  // t1: B was prefetched; prefetch D (0 < 40), the queue is empty: 90;
  //     B released -> 60.  t2: C: 60, released -> 30.  t3: D: 30.
  const auto s = coordinate_zero3({{0}, {1}, {2}, {3}}, kThirty, kNone, {40, 1000, 0});
  CHECK(fetches(s) == std::vector<Ids>{{0}, {}, {}, {}});
  CHECK(prefetches(s) == std::vector<Ids>{{1, 2}, {3}, {}, {}});
  CHECK(lives(s) == std::vector<std::int64_t>{90, 90, 60, 30});
  CHECK(releases(s) == std::vector<Ids>{{0}, {1}, {2}, {3}});
}

TEST_CASE("ZeRO-3's coordinator: max_live bounds the prefetch, never the module in hand", "[zero3][coordinator]") {
  // max_live 50: at t0 A is fetched (30), room min(50 - 30, 40) = 20, B
  // added (0 < 20): 60 live, 10 over max_live (the check comes first).
  // Every later step: one module left (30), room 20, the next added: 60.
  auto s = coordinate_zero3({{0}, {1}, {2}, {3}}, kThirty, kNone, {40, 50, 0});
  CHECK(lives(s) == std::vector<std::int64_t>{60, 60, 60, 30});
  CHECK(prefetches(s) == std::vector<Ids>{{1}, {2}, {3}, {}});
  // max_live 30: no room after the module itself; each fetched in turn,
  // and the gathered never exceed max_live.
  s = coordinate_zero3({{0}, {1}, {2}, {3}}, kThirty, kNone, {40, 30, 0});
  CHECK(fetches(s) == std::vector<Ids>{{0}, {1}, {2}, {3}});
  CHECK(lives(s) == std::vector<std::int64_t>{30, 30, 30, 30});
}

TEST_CASE("ZeRO-3's coordinator keeps what the trace reuses within max_reuse_distance", "[zero3][coordinator]") {
  // Forward A B, backward B A; no prefetch (bucket 0).
  // Reuse 1000: A's next use is within reach, kept from t0 to t3; B kept at
  // t1 (used at t2), released at t2 (A alone follows). Nothing fetched twice.
  auto s = coordinate_zero3({{0}, {1}, {1}, {0}}, kThirty, kNone, {0, 1000, 1000});
  CHECK(fetches(s) == std::vector<Ids>{{0}, {1}, {}, {}});
  CHECK(releases(s) == std::vector<Ids>{{}, {}, {1}, {0}});
  CHECK(lives(s) == std::vector<std::int64_t>{30, 60, 60, 30});
  // Reuse 30: at A's release the walk stops after B (30 >= 30), so A goes
  // and is fetched again at t3; B's next use is the very next step.
  s = coordinate_zero3({{0}, {1}, {1}, {0}}, kThirty, kNone, {0, 1000, 30});
  CHECK(fetches(s) == std::vector<Ids>{{0}, {1}, {}, {0}});
  CHECK(releases(s) == std::vector<Ids>{{0}, {}, {1}, {0}});
}

TEST_CASE("ZeRO-3's coordinator never gathers a persistent parameter", "[zero3][coordinator]") {
  // Module A holds a weight (id 0, 30) and a bias (id 1, 10) kept whole;
  // the prefetcher pops the bias's uses without counting it.
  const auto s = coordinate_zero3({{0, 1}, {2}}, {30, 10, 30}, {false, true, false}, {40, 1000, 0});
  CHECK(fetches(s) == std::vector<Ids>{{0}, {}});
  CHECK(prefetches(s) == std::vector<Ids>{{2}, {}});
  CHECK(lives(s) == std::vector<std::int64_t>{60, 30});
  CHECK(releases(s) == std::vector<Ids>{{0}, {2}});
}

namespace {

/// The most parameter bytes one rank holds over an iteration, and the
/// names of its tasks.
struct Run {
  Bytes params = 0;
  std::vector<std::string> names;
};

Run run(const Model& m, const std::string& yaml) {
  const test::FixedComm comm(1000);
  const test::PlanRun pr = test::run_plan_with(m, yaml, test::round_cluster(), comm, 1'000'000, true);
  const TaskGraph& g = pr.graph;
  const ExecResult& r = pr.exec;
  Run out;
  for (const MemSnapshot& s : r.memory[0].timeline) out.params = std::max(out.params, s.bytes[static_cast<int>(MemCategory::kParameters)]);
  for (const Task& t : g.tasks) out.names.push_back(t.name);
  return out;
}

std::size_t count_prefix(const std::vector<std::string>& names, const std::string& prefix) {
  std::size_t n = 0;
  for (const auto& s : names) n += s.rfind(prefix, 0) == 0 ? 1 : 0;
  return n;
}

}  // namespace

TEST_CASE("ZeRO-3 module by module: the gathered parameters stay within max_live, FSDP's units do not",
          "[zero3][lowering][memory]") {
  // Two layers, each modules a (400k elements) and b (600k), fp16 on 2
  // ranks: the resident shard is 2 x 1M x 2 B / 2 = 2 MB.
  const test::FakeModel m = test::FakeModel(2, 1'000'000, 0).with_modules({{"a", {400'000}, ""}, {"b", {600'000}, ""}});
  const Bytes shard = 2'000'000;
  const std::string base = "dp: 2\nprecision: fp16\nmicro_batch: 1\ngrad_accum: 1\n";
  // max_live 1M, reuse 0. The trace is 0a 0b 1a 1b | 1b 1a 0b 0a:
  // t0 fetch 0a, prefetch 0b (room 600k): 1M; 0a goes. t1 prefetch 1a
  // (room 400k): 1M; 0b goes. t2 prefetch 1b: 1M; 1a goes. t3 pops 1b's
  // backward use (gathered), prefetches 1a (room 400k): 1M; 1b goes, its
  // noted use (t4) not beyond t + 1. t4 fetches 1b again: 1M, no room.
  // t5 prefetch 0b, t6 prefetch 0a: 1M each. Never more than 1M elements
  // (2 MB) whole: each gather starts after the module before it has freed.
  const Run z3 = run(m, base + "zero_stage: 3\nstage3_max_live_parameters: 1000000\nstage3_max_reuse_distance: 0\n");
  CHECK(z3.params == shard + 2'000'000);
  // Eight gathers: t0's fetch and prefetch, t1-t3's prefetches, t4's
  // fetch, t5-t6's prefetches.
  CHECK(count_prefix(z3.names, "all_gather") == 8);
  // The defaults (bucket 5e7, max_live and reuse 1e9): t0 prefetches every
  // parameter, and none is released before its last use: the model whole.
  const Run all = run(m, base + "zero_stage: 3\n");
  CHECK(all.params == shard + 4'000'000);
  CHECK(count_prefix(all.names, "all_gather") == 2);
  // FSDP gathers whole layers, one ahead: both layers whole at the start.
  const Run fsdp = run(m, base + "fsdp: full_shard\n");
  CHECK(fsdp.params >= shard + 4'000'000);
  CHECK(count_prefix(fsdp.names, "all_gather") == 4);  // each layer before its forward and its backward
}

TEST_CASE("ZeRO-3 module by module: gradients reduce-scattered a bucket at a time", "[zero3][lowering]") {
  // The same model with a bucket of 1M elements (bucket_mb 2 at 2 bytes):
  // the backward makes 1b (600k), 1a (400k: 1M, not over), 0b (over: the
  // bucket's 1M reduce-scattered first), 0a (1M), the rest reduce-scattered
  // as the backward ends: two reduce-scatters of 2 MB.
  const test::FakeModel m = test::FakeModel(2, 1'000'000, 0).with_modules({{"a", {400'000}, ""}, {"b", {600'000}, ""}});
  const Run r = run(m, "dp: 2\nprecision: fp16\nmicro_batch: 1\ngrad_accum: 1\nzero_stage: 3\nbucket_mb: 2\n");
  CHECK(count_prefix(r.names, "reduce_scatter bucket") == 2);
  CHECK(count_prefix(r.names, "copy grads in") == 4);
}

TEST_CASE("ZeRO-3 on GPT-3 175B: the most parameters whole are one block's output projection and MLP",
          "[zero3][lowering][memory]") {
  // 1024 A100s, bf16, full recompute, DeepSpeed's knobs at their defaults.
  // A block's modules (Note [ZeRO-3 modules]): qkv 3h^2, proj h^2, fc1 and
  // fc2 4h^2 each; its biases and norms (13h) stay whole and are popped by
  // the prefetcher without counting. At ln_1's hook qkv and proj are
  // gathered (4h^2 < 1e9 elements, room 5e7): fc1 is prefetched, 8h^2. At
  // qkv's hook there is no room; qkv goes. At proj's hook proj and fc1 are
  // gathered (5h^2 = 755M, room min(1e9 - 755M, 5e7) > 0), so fc2 is
  // prefetched: h^2 + 4h^2 + 4h^2 = 9h^2 whole until proj's forward ends,
  // its buffer allocated as the hook issues it. Nothing holds more: after
  // proj goes, fc1 + fc2 (8h^2) leave no room until fc1 goes; the
  // recomputed forwards and the backward repeat the block's pattern; the
  // embedding (51200 x h, tied to the head) is kept across the turn with
  // the last block's qkv prefetched: 0.63B + 0.45B.
  const auto gpt = models::load_model("gpt-175b");
  const std::int64_t h = 12288, L = 96;
  PredictOptions o;
  o.keep_graph = true;
  const Prediction p =
      predict(*gpt, load_plan("zero3", {parse_override("plan.recompute=full"), parse_override("plan.precision=bf16"),
                                        parse_override("plan.micro_batch=1")}),
              load_cluster("dgx-a100", {parse_override("cluster.nodes=128")}), o);
  REQUIRE(!p.graph.ranks.empty());
  ExecOptions eo;
  eo.record_memory_timeline = true;
  const ExecResult r = execute(p.graph, eo);
  Bytes most = 0;
  for (const MemSnapshot& s : r.memory[0].timeline) most = std::max(most, s.bytes[static_cast<int>(MemCategory::kParameters)]);
  // Resident: the bf16 shard of every parameter, and the persistent ones
  // whole: 13h a block and ln_f's 2h.
  const std::int64_t psi = gpt->parameters();
  const Bytes resident = (psi + 1023) / 1024 * 2 + (13 * h * L + 2 * h) * 2;
  CHECK(most == resident + 9 * h * h * 2);
}

TEST_CASE("z3_leaf_layers is DeepSpeed ZeRO-3's, refused elsewhere in one line", "[zero3][plan][bad-input]") {
  const test::FakeModel m(2, 1'000'000, 0);
  const ClusterSpec c = test::round_cluster();
  CHECK(resolve(parse_plan("dp: 2\nzero_stage: 3\nz3_leaf_layers: true\n", "p.yaml"), m, c).z3_leaf_layers);
  CHECK_FALSE(resolve(parse_plan("dp: 2\nzero_stage: 3\nz3_leaf_layers: true\n", "p.yaml"), m, c).zero3_modules());
  CHECK(resolve(parse_plan("dp: 2\nzero_stage: 3\n", "p.yaml"), m, c).zero3_modules());
  CHECK_THAT(test::error_of([&] { resolve(parse_plan("dp: 2\nfsdp: full_shard\nz3_leaf_layers: true\n", "p.yaml"), m, c); }),
             Catch::StartsWith("p.yaml:3: plan.z3_leaf_layers: true is DeepSpeed ZeRO-3's (set_z3_leaf_modules)") &&
                 Catch::Contains("valid only with zero_stage 3 (the plan has fsdp: full_shard)"));
  CHECK_THAT(test::error_of([&] { resolve(parse_plan("dp: 2\nzero_stage: 2\nz3_leaf_layers: true\n", "p.yaml"), m, c); }),
             Catch::Contains("(the plan has zero_stage 2)"));
}

TEST_CASE("DeepSpeed's stage3 knobs out of range are refused in one line naming the key", "[zero3][plan][bad-input]") {
  for (const std::string key : {"stage3_prefetch_bucket_size", "stage3_max_live_parameters", "stage3_max_reuse_distance",
                                "stage3_param_persistence_threshold"}) {
    INFO(key);
    const std::string e = test::error_of([&] { parse_plan("zero_stage: 3\n" + key + ": -1\n", "p.yaml"); });
    CHECK_THAT(e, Catch::StartsWith("p.yaml:2: plan." + key + ": -1 is out of range; valid: 0 to"));
    CHECK(e.find('\n') == std::string::npos);
  }
}
