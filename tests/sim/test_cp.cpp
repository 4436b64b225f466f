// Context parallelism as an axis and a pass: resolve's checks, the mesh and
// the dp x cp gradient group, the ring's exposed time by formula, and the
// search walking cp, attention and precision.
#include <catch2/catch.hpp>

#include <algorithm>
#include <memory>

#include "dtsim/models/models.hpp"
#include "dtsim/sim/config_io.hpp"
#include "dtsim/sim/cost_profile.hpp"
#include "dtsim/sim/error.hpp"
#include "dtsim/sim/executor.hpp"
#include "dtsim/sim/lowering.hpp"
#include "dtsim/sim/predict.hpp"
#include "dtsim/sim/rules.hpp"
#include "dtsim/sim/search.hpp"
#include "fake_model.hpp"
#include "test_util.hpp"

using namespace dtsim;
using namespace dtsim::sim;
using dtsim::test::error_of;
using dtsim::test::FixedComm;

namespace {

TimeNs makespan(const Model& m, const std::string& yaml, const ClusterSpec& c, const CommModel& comm, int* cp_tasks = nullptr) {
  ResolvedPlan p = resolve(parse_plan(yaml, "cp.yaml"), m, c);
  const test::FixedCompute compute(1'000'000);  // 1 ms per GFLOP
  partition(p, m, c, compute, comm);
  const TaskGraph g = lower(m, p, c, CostModels{&compute, &comm});
  if (cp_tasks != nullptr) {
    *cp_tasks = static_cast<int>(std::count_if(g.tasks.begin(), g.tasks.end(), [](const Task& t) { return t.axis == Axis::kCp && t.kind == TaskKind::kCollective; }));
  }
  return execute(g).makespan;
}

}  // namespace

TEST_CASE("cp: resolve places the axis, checks the sequence and the model", "[cp]") {
  const auto llama = models::load_model("llama-tiny");  // seq 128
  const ClusterSpec c = test::round_cluster(2, 4);      // 8 GPUs, 4 a node
  const ResolvedPlan p = resolve(parse_plan("tp: 2\ncp: 2\n", "p.yaml"), *llama, c);
  CHECK(p.dp == 2);  // 8 / (tp x cp)
  CHECK(p.gpus_used() == 8);
  // cp sits next to tp unless placed (Megatron-Core's tp-cp-...-dp-pp).
  CHECK(p.mesh.size(Axis::kCp) == 2);
  CHECK(p.mesh.stride(Axis::kCp) == 2);
  CHECK(p.mesh.stride(Axis::kDp) == 4);
  CHECK(p.mesh.placement() == "tp,cp,pp,dp");
  // ZeRO shards over dp x cp.
  const ResolvedPlan z = resolve(parse_plan("cp: 2\nzero_stage: 3\n", "p.yaml"), *llama, c);
  CHECK(z.shard_group == 8);
  // Its gradient group: cp innermost (tp = 1; stride 1, both on a node)
  // and dp at stride 2 (2 of its 4 on a node): 8 ranks, 4 on each node,
  // the node's only such group.
  const CommGroup g = data_group(z.mesh, 4);
  CHECK(g.ranks == 8);
  CHECK(g.ranks_per_node == 2 * 2);
  CHECK(g.groups_per_node == 1);

  // 2 cp chunks per rank: seq 100 splits over cp = 2 (4 chunks of 25) but
  // not over cp = 4 (8 chunks); valid cp are those dividing 8 / tp that cut
  // 100 into 2 cp equal chunks.
  CHECK(error_of([&] { resolve(parse_plan("cp: 4\nseq_len: 100\n", "p.yaml"), *llama, c); }) ==
        "p.yaml:1: plan.cp: 4 does not split seq_len 100: context parallelism cuts a sequence into 2 x cp = 8 equal chunks; "
        "valid cp: 1, 2");
  const auto bert = models::load_model("bert-tiny");
  CHECK_THAT(error_of([&] { resolve(parse_plan("cp: 2\n", "p.yaml"), *bert, c); }),
             Catch::Contains("plan.cp: 2: this model has no context-parallel split"));
  CHECK_THAT(error_of([&] { resolve(parse_plan("tp: 2\ncp: 8\n", "p.yaml"), *llama, c); }),
             Catch::Contains("tp x cp x pp = 16 does not divide the 8 GPUs"));
  CHECK_THAT(error_of([&] { resolve(parse_plan("cp: 2\nfsdp: hybrid_shard\n", "p.yaml"), *llama, c); }),
             Catch::Contains("hybrid_shard with cp > 1 is not modelled"));
  // DeepSeek Sparse Attention gathers its keys (Megatron-Core asserts
  // cp_comm_type allgather): the rules offer nothing else and resolve takes it.
  const auto dsa = models::load_model("llama-tiny", {parse_override("model.kv_lora_rank=16"), parse_override("model.index_topk=8")});
  CHECK(resolve(parse_plan("cp: 2\n", "p.yaml"), *dsa, c).cp_comm == CpComm::kAllGather);
  CHECK(resolve(parse_plan("cp: 2\n", "p.yaml"), *llama, c).cp_comm == CpComm::kP2p);
  CHECK(PlanRules(*dsa, c).cp_comms(2) == std::vector<CpComm>{CpComm::kAllGather});
  CHECK(PlanRules(*llama, c).cp_comms(2).size() == 2);
}

TEST_CASE("cp: the ring exposes what its steps take beyond attention's (Note [Context-parallel exchange])", "[cp]") {
  const auto llama = models::load_model("llama-tiny");  // 2 blocks, a 4, d 32
  const ClusterSpec c = test::round_cluster(1, 2);
  const std::string base = "cp: 2\nmicro_batch: 1\nseq_len: 128\nprecision: fp16\nattention: flash\n";
  // Each rank's fused attention: 4 b a (s/cp) s d / 2 = 2,097,152 FLOPs
  // forward (2,097 ns at 1 ms/GFLOP), 2.5x backward (5,242 ns). One ring
  // step (cp - 1 = 1) costs 10,000 ns, so each block exposes
  // 10,000 - 2,097/2 = 8,951 forward and 10,000 - 5,242/2 = 7,379 backward.
  const FixedComm ring(10'000);
  const FixedComm free(0);
  int tasks = 0;
  const TimeNs with = makespan(*llama, base, c, ring, &tasks);
  const TimeNs without = makespan(*llama, base, c, free);
  CHECK(tasks == 4);  // two blocks, forward and backward
  // With dp = 1 the gradients are still all-reduced, over dp x cp = 2 ranks
  // (Megatron-Core's dp-cp group): one bucket (631,424 x 2 B < 25 MB),
  // exposed after the last backward, one more collective.
  const TimeNs reduce = 10'000;
  CHECK(with - without == Approx(2 * (8951 + 7379) + reduce).margin(4));
  // A ring faster than attention hides whole: no task, no time.
  const FixedComm fast(500);
  CHECK(makespan(*llama, base, c, fast, &tasks) == without + 500);
  CHECK(tasks == 0);
  // The all-gather runs before attention: forward one gather, backward a
  // gather and a reduce-scatter, each exposed: 3 x 10,000 per block.
  CHECK(makespan(*llama, base + "cp_comm: all_gather\n", c, ring) - without == 2 * 3 * 10'000 + reduce);
}

TEST_CASE("search walks cp, attention and precision unless the base plan sets them", "[cp][search]") {
  // llama-tiny stretched to 8,192 tokens, so context parallelism pays.
  const auto llama = models::load_model("llama-tiny", {parse_override("model.seq_len=8192")});
  ClusterSpec c = test::round_cluster(1, 4);
  c.device.peak_bf16 = 2e12;  // faster than fp32 (1e12), as on a GPU
  SearchOptions o;
  o.global_batch = 8;
  const auto plans = enumerate_plans(*llama, c, o);
  auto has = [&](const std::vector<PlanSpec>& ps, auto pred) { return std::any_of(ps.begin(), ps.end(), pred); };
  // cp: divisors of 4 / tp that leave at least 1,024 tokens a rank.
  CHECK(has(plans, [](const PlanSpec& p) { return p.cp == 4 && p.tp == 1; }));
  CHECK(has(plans, [](const PlanSpec& p) { return p.cp == 2 && p.tp == 2; }));
  // bf16 where the device has it faster than fp32; not fp16 nor fp32; no
  // fp8 without FP8 units. Fused attention, as auto picks it there.
  CHECK(std::all_of(plans.begin(), plans.end(), [](const PlanSpec& p) {
    return p.precision == Precision::kBf16 && p.attention == Attention::kFlash && p.recompute != Recompute::kSelective;
  }));
  // In fp32 auto picks eager: the search tries both.
  o.base = parse_plan("precision: fp32\n", "base.yaml");
  const auto fp32 = enumerate_plans(*llama, c, o);
  CHECK(has(fp32, [](const PlanSpec& p) { return p.attention == Attention::kEager; }));
  CHECK(has(fp32, [](const PlanSpec& p) { return p.attention == Attention::kFlash; }));
  // A short sequence gets no cp: 128 / 2 < 1,024 tokens a rank.
  o.base = parse_plan("seq_len: 128\n", "base.yaml");
  const auto short_seq = enumerate_plans(*llama, c, o);
  CHECK(std::all_of(short_seq.begin(), short_seq.end(), [](const PlanSpec& p) { return p.cp == 1; }));
  // Held where set.
  o.base = parse_plan("cp: 2\nattention: eager\nprecision: fp16\n", "base.yaml");
  const auto held = enumerate_plans(*llama, c, o);
  REQUIRE_FALSE(held.empty());
  CHECK(std::all_of(held.begin(), held.end(), [](const PlanSpec& p) {
    return p.cp == 2 && p.attention == Attention::kEager && p.precision == Precision::kFp16;
  }));
}

TEST_CASE("tp_comm_overlap hides sequence parallelism's collectives behind the GEMMs (Note [TP comm overlap])", "[tp]") {
  const auto llama = models::load_model("llama-tiny");
  const ClusterSpec c = test::round_cluster(1, 2);
  const std::string base = "tp: 2\nsequence_parallel: true\nmicro_batch: 1\nseq_len: 128\nprecision: fp16\n";
  // Collectives far slower than the GEMMs: each layer then exposes
  // T/tp + (tp - 1)/tp (T - G) = T - G/2 of T, saving half its GEMM time G
  // in each pass where it has collectives (the blocks and the head; the
  // embedding has no GEMM to hide behind).
  const FixedComm slow(1'000'000);
  const TimeNs serial = makespan(*llama, base, c, slow);
  const TimeNs overlapped = makespan(*llama, base + "tp_comm_overlap: true\n", c, slow);
  WorkloadShape w;
  w.micro_batch = 1;
  w.seq_len = 128;
  w.act_bytes = 2;
  w.tp = 2;
  w.sequence_parallel = true;
  const test::FixedCompute compute(1'000'000);
  double saved = 0;
  for (const Layer& l : llama->layers(w)) {
    for (const auto* pass : {&l.forward, &l.backward}) {
      const bool comms = pass == &l.forward ? !l.tp_forward.empty() : !l.tp_backward.empty();
      std::vector<Kernel> gemms;
      for (const auto& k : *pass) {
        if (k.kind == KernelKind::kGemm) gemms.push_back(k);
      }
      if (comms) saved += static_cast<double>(compute.kernels_time(gemms, Precision::kFp16)) / 2;
    }
  }
  CHECK(saved > 0);
  CHECK(static_cast<double>(serial - overlapped) == Approx(saved).epsilon(1e-3));
  CHECK_THAT(error_of([&] { resolve(parse_plan("tp: 2\ntp_comm_overlap: true\n", "p.yaml"), *llama, c); }),
             Catch::Contains("plan.tp_comm_overlap: true needs sequence_parallel: true"));
}

TEST_CASE("cp alone still reduces gradients: DDP keeps its buckets at dp 1, cp 2 (Megatron-Core's dp x cp group)", "[cp]") {
  // Each cp rank's gradients are its tokens' share, summed over the cp
  // group as over data-parallel ranks, so DDP keeps its bucket buffers (a
  // second copy of the gradients, Note [DDP buckets]: the parameters'
  // bytes again) with dp 1 as with dp 2, and a pipeline's stages all-reduce.
  const auto llama = models::load_model("llama-tiny");
  const ClusterSpec c = test::round_cluster(1, 2);
  auto memory = [&](const std::string& yaml) { return predict(*llama, parse_plan(yaml, "p.yaml"), c).ranks.at(0); };
  const RankMemory cp2 = memory("cp: 2\nprecision: fp32\nseq_len: 128\n");
  const RankMemory dp2 = memory("precision: fp32\nseq_len: 128\n");
  CHECK(cp2.buffers - c.device.runtime_reserved == cp2.parameters);
  CHECK(cp2.buffers == dp2.buffers);
  // Two stages of a cp 2 pipeline on 4 GPUs: each stage's ranks all-reduce over the cp group.
  const ClusterSpec four = test::round_cluster(1, 4);
  ResolvedPlan p = resolve(parse_plan("cp: 2\npp: 2\nmicro_batches: 2\nprecision: fp32\nseq_len: 128\n", "p.yaml"), *llama, four);
  REQUIRE(p.dp == 1);
  const test::FixedCompute compute(1'000'000);
  const FixedComm comm(1'000);
  partition(p, *llama, four, compute, comm);
  const TaskGraph g = lower(*llama, p, four, CostModels{&compute, &comm});
  const auto reduces = std::count_if(g.tasks.begin(), g.tasks.end(),
                                     [](const Task& t) { return t.kind == TaskKind::kCollective && t.op == CollectiveOp::kAllReduce; });
  CHECK(reduces > 0);
}

TEST_CASE("cp: a profile prices the embedding and the head at the rank's s/cp tokens, a cp block at the whole sequence (Note [Profile lookups])", "[cp][profile]") {
  // Calibration times a cp=2 block as one rank's share of sequences of s
  // (its s/2 queries against all s keys) and the head, which has no cp=,
  // at the tokens it is given. Under cp 2 the head sees s/2 tokens.
  Profile p;
  p.info["device_kind"] = "cpu";
  auto add = [&](const std::string& sig, std::int64_t s, double ms) {
    LayerSample x;
    x.signature = sig;
    x.precision = Precision::kFp32;
    x.micro_batch = 1;
    x.seq_len = s;
    x.forward.median_s = ms * 1e-3;
    x.backward.median_s = 2 * ms * 1e-3;
    p.layers.push_back(x);
  };
  add("llama.head:h=128,v=1024,tied=0", 64, 1.0);
  add("llama.head:h=128,v=1024,tied=0", 128, 2.0);
  add("llama.block:h=128,cp=2", 64, 5.0);
  add("llama.block:h=128,cp=2", 128, 7.0);
  const ProfileComputeModel m(std::make_shared<const ProfileCosts>(p), *find_device("cpu"), nullptr);
  Layer head;
  head.kind = LayerKind::kLmHead;
  head.signature = "llama.head:h=128,v=1024,tied=0";
  Layer block;
  block.kind = LayerKind::kTransformer;
  block.signature = "llama.block:h=128,cp=2";
  WorkloadShape shape;
  shape.micro_batch = 1;
  shape.seq_len = 128;
  CHECK(m.layer_time(head, Pass::kForward, Precision::kFp32, shape) == 2 * kNsPerMs);
  shape.cp = 2;
  CHECK(m.layer_time(head, Pass::kForward, Precision::kFp32, shape) == 1 * kNsPerMs);
  CHECK(m.layer_time(head, Pass::kBackward, Precision::kFp32, shape) == 2 * kNsPerMs);
  CHECK(m.layer_time(block, Pass::kForward, Precision::kFp32, shape) == 7 * kNsPerMs);
}
