#include <catch2/catch.hpp>

#include <algorithm>
#include <limits>
#include <map>

#include "dtsim/sim/config_io.hpp"
#include "dtsim/sim/error.hpp"
#include "dtsim/sim/executor.hpp"
#include "dtsim/sim/lowering.hpp"
#include "dtsim/sim/predict.hpp"
#include "dtsim/sim/report.hpp"
#include "lowering/lowering_common.hpp"
#include "dtsim/models/models.hpp"
#include "fake_model.hpp"
#include "test_util.hpp"

using namespace dtsim;
using namespace dtsim::sim;

namespace {

using test::round_cluster;

struct Run {
  TaskGraph graph;
  ExecResult exec;
  int count(CollectiveOp op) const {
    return static_cast<int>(std::count_if(graph.tasks.begin(), graph.tasks.end(), [&](const Task& t) {
      return t.kind == TaskKind::kCollective && t.phase == Phase::kComm && t.op == op;
    }));
  }
  TimeNs phase(Phase p) const { return exec.critical_path[static_cast<int>(p)]; }
};

Run run(const Model& m, const std::string& plan_yaml, const ClusterSpec& c, TimeNs ns_per_gflop) {
  ResolvedPlan plan = resolve(parse_plan(plan_yaml, "test.yaml"), m, c);
  const test::FixedCompute compute(ns_per_gflop);
  const AnalyticCommModel comm(c);
  partition(plan, m, c, compute, comm);
  Run r;
  r.graph = lower(m, plan, c, CostModels{&compute, &comm});
  r.exec = execute(r.graph);
  return r;
}

}  // namespace

TEST_CASE("single GPU: forward, backward and the optimizer, in order", "[lowering]") {
  // 4 layers x 1000 params, fp32 Adam. Forward 1 GFLOP = 1 us per layer,
  // backward 2 us. Optimizer: 4000 params x 28 B at 1 TB/s = 112 ns.
  const test::FakeModel m(4, 1000, 10);
  const Run r = run(m, "dp: 1\nprecision: fp32\noptimizer: adam\n", round_cluster(), 1000);
  CHECK(r.exec.makespan == 4 * 1000 + 4 * 2000 + 112);
  CHECK(r.phase(Phase::kForward) == 4000);
  CHECK(r.phase(Phase::kBackward) == 8000);
  CHECK(r.phase(Phase::kOptimizer) == 112);
  CHECK(r.count(CollectiveOp::kAllReduce) == 0);
  // Peak at the start of the last backward: parameters 16000 B, all four
  // layers' fp32 gradients 16000 B, Adam's m and v 32000 B, and the first
  // layer's 10 B of activations still held.
  const MemSnapshot& peak = r.exec.memory[0].at_peak;
  CHECK(peak.total() == 64010);
  CHECK(peak.bytes[static_cast<int>(MemCategory::kParameters)] == 16000);
  CHECK(peak.bytes[static_cast<int>(MemCategory::kGradients)] == 16000);
  CHECK(peak.bytes[static_cast<int>(MemCategory::kOptimizer)] == 32000);
  CHECK(peak.bytes[static_cast<int>(MemCategory::kActivations)] == 10);
}

TEST_CASE("DDP: a single small bucket is all-reduced after backward, fully exposed", "[lowering]") {
  // All 16000 B of gradients fit PyTorch's 1 MiB first bucket: one all-reduce
  // after the last backward. Ring over 2 ranks: 6 us + 2 hops x 1 us +
  // 2(1/2) x 16000 B / 100 GB/s = 160 ns.
  const test::FakeModel m(4, 1000, 10);
  const Run r = run(m, "dp: 2\nprecision: fp32\noptimizer: adam\n", round_cluster(), 1000);
  CHECK(r.count(CollectiveOp::kAllReduce) == 1);
  CHECK(r.phase(Phase::kComm) == 8000 + 160);
  CHECK(r.exec.makespan == 12000 + 8160 + 112);
}

TEST_CASE("DDP: bucket all-reduces overlap the rest of backward", "[lowering]") {
  // 4 layers x 10M fp32 params = 40 MB each: one bucket per layer. Backward
  // takes 1 ms per layer; each all-reduce 8 us + 40 MB / 100 GB/s = 408 us,
  // so only the last one (after layer 0) is exposed. Optimizer: 40M x 28 B
  // at 1 TB/s = 1.12 ms.
  const test::FakeModel m(4, 10'000'000, 10);
  const Run r = run(m, "dp: 2\nprecision: fp32\noptimizer: adam\n", round_cluster(), 500'000);
  CHECK(r.count(CollectiveOp::kAllReduce) == 4);
  CHECK(r.phase(Phase::kComm) == 408'000);
  CHECK(r.exec.makespan == 2'000'000 + 4'000'000 + 408'000 + 1'120'000);
  SECTION("without overlap every all-reduce waits for the end of backward") {
    const Run n = run(m, "dp: 2\nprecision: fp32\noptimizer: adam\noverlap: false\n", round_cluster(), 500'000);
    CHECK(n.phase(Phase::kComm) == 4 * 408'000);
    CHECK(n.exec.makespan == 6'000'000 + 4 * 408'000 + 1'120'000);
  }
}

TEST_CASE("DDP under gradient accumulation communicates only on the last micro-step", "[lowering]") {
  const test::FakeModel m(4, 10'000'000, 10);
  const Run r = run(m, "dp: 2\nmicro_batch: 1\ngrad_accum: 4\nprecision: fp32\n", round_cluster(), 500'000);
  CHECK(r.count(CollectiveOp::kAllReduce) == 4);  // 4 buckets, once
  // Three micro-steps of 6 ms with no communication, then the last as above.
  CHECK(r.exec.makespan == 4 * 6'000'000 + 408'000 + 1'120'000);
}

TEST_CASE("ZeRO-2 reduce-scatters every micro-step and all-gathers the parameters", "[lowering]") {
  const test::FakeModel m(4, 10'000'000, 10);
  const Run r = run(m, "dp: 2\ngrad_accum: 2\nprecision: fp16\nzero_stage: 2\n", round_cluster(), 500'000);
  // fp16 buckets of 25 MB (12.5M elements) of 10M-parameter layers: DeepSpeed
  // reduces before a layer would overflow one (10M + 10M > 12.5M, Note
  // [Bucket rules]): a bucket a layer, 4 a micro-step.
  CHECK(r.count(CollectiveOp::kReduceScatter) == 4 * 2);
  CHECK(r.count(CollectiveOp::kAllGather) == 1);
  CHECK(r.count(CollectiveOp::kAllReduce) == 0);
}

TEST_CASE("FSDP's reduce_dtype fp32 reduce-scatters 4 bytes a gradient (Note [FSDP's reduce dtype])", "[lowering]") {
  const test::FakeModel m(4, 10'000'000, 10);
  auto scattered = [](const Run& r) {
    Bytes b = 0;
    for (const Task& t : r.graph.tasks) {
      if (t.kind == TaskKind::kCollective && t.op == CollectiveOp::kReduceScatter) b += t.bytes;
    }
    return b;
  };
  const std::string fsdp = "dp: 2\nprecision: fp16\nfsdp: full_shard\n";
  const Run param = run(m, fsdp, round_cluster(), 500'000);
  const Run fp32 = run(m, fsdp + "reduce_dtype: fp32\n", round_cluster(), 500'000);
  // A unit a layer: 4 reduce-scatters of 10M gradients, 2 bytes each in
  // fp16 (PyTorch's default, reduce_dtype None: the param dtype), 4 in fp32.
  CHECK(param.count(CollectiveOp::kReduceScatter) == 4);
  CHECK(scattered(param) == 4 * 10'000'000 * 2);
  CHECK(scattered(fp32) == 4 * 10'000'000 * 4);
  // The same gathers; the fp32 copy a unit at a time (40 MB) is held while
  // its reduce-scatter runs, so the peak is no lower.
  CHECK(fp32.count(CollectiveOp::kAllGather) == param.count(CollectiveOp::kAllGather));
  CHECK(fp32.exec.memory[0].at_peak.total() >= param.exec.memory[0].at_peak.total());
  // Only FSDP's per-unit lowering has it.
  CHECK(test::error_of([&] { run(m, "dp: 2\nprecision: fp16\nzero_stage: 2\nreduce_dtype: fp32\n", round_cluster(), 500'000); }) ==
        "test.yaml:4: plan.reduce_dtype: fp32 is FSDP's MixedPrecision reduce_dtype, modelled for fsdp: full_shard or hybrid_shard "
        "(the plan has zero_stage 2); valid here: param (Megatron's fp32 gradients: accumulate_allreduce_grads_in_fp32)");
}

TEST_CASE("ZeRO-3 gathers each layer before forward and backward", "[lowering]") {
  const test::FakeModel m(4, 10'000'000, 10);
  // Each layer a leaf module (z3_leaf_layers): gathered whole for each pass.
  const Run r = run(m, "dp: 2\nprecision: fp16\nzero_stage: 3\nz3_leaf_layers: true\n", round_cluster(), 500'000);
  CHECK(r.count(CollectiveOp::kAllGather) == 2 * 4);
  CHECK(r.count(CollectiveOp::kReduceScatter) == 4);
  // DeepSpeed's coordinator (Note [ZeRO-3 modules]): the first hook fetches
  // layer 0 and, the 40M elements being under max_live (1e9), prefetches
  // the other three at once (30M < the 5e7 bucket); the reuse distance
  // (1e9) keeps all until their last use: two gathers. The gradients go
  // through a bucket of 25 MB / 2 B = 12.5M elements, one 10M layer at a
  // time: a reduce-scatter when each next layer would overflow it, and
  // the last as the backward ends.
  const Run ds = run(m, "dp: 2\nprecision: fp16\nzero_stage: 3\n", round_cluster(), 500'000);
  CHECK(ds.count(CollectiveOp::kAllGather) == 2);
  CHECK(ds.count(CollectiveOp::kReduceScatter) == 4);
  // Layers under DeepSpeed's persistence threshold (1e5 parameters) stay
  // whole: no per-layer gathers, one all-gather of their shards after the step.
  const test::FakeModel small(4, 1000, 10);
  const Run persistent = run(small, "dp: 2\nprecision: fp16\nzero_stage: 3\n", round_cluster(), 500'000);
  CHECK(persistent.count(CollectiveOp::kAllGather) == 1);
  // Resident parameters: the fp16 shard, 4000 / 2 x 2 B = 4000 B, and the
  // whole persistent layers, 4000 x 2 B = 8000 B.
  Bytes resident = 0;
  for (const auto& [category, bytes] : persistent.graph.ranks.at(0).resident) {
    if (category == MemCategory::kParameters) resident += bytes;
  }
  CHECK(resident == 12000);
  // FSDP wraps every layer.
  CHECK(run(small, "dp: 2\nprecision: fp16\nfsdp: full_shard\n", round_cluster(), 500'000).count(CollectiveOp::kAllGather) == 8);
}

TEST_CASE("ZeRO model states per stage (ZeRO paper section 5.1, Figure 1)", "[lowering]") {
  // Psi = 7.5B, N_d = 64, mixed-precision Adam (K = 12): the paper's 120 GB,
  // 31.4 GB, 16.6 GB and 1.9 GB are 16 Psi, (4 + 12/64) Psi, (2 + 14/64) Psi
  // and 16 Psi / 64.
  const std::int64_t psi = 7'500'000'000;
  ResolvedPlan p;
  p.precision = Precision::kFp16;
  p.optimizer = Optimizer::kAdam;
  p.dp = p.shard_group = 64;
  const Bytes expected[4] = {120'000'000'000, 31'406'250'000, 16'640'625'000, 1'875'000'000};
  for (int stage = 0; stage <= 3; ++stage) {
    p.zero_stage = stage;
    p.shard_group = stage == 0 ? 1 : 64;
    CHECK(model_states(p, psi).total() == expected[stage]);
  }
  // ZeRO-Offload (Ren et al. 2021, section 4.1) keeps only the fp16
  // parameters on the GPU: the gradient partition and the optimizer states
  // (and step) are the CPU's. 2 Psi.
  p.zero_stage = 2;
  p.offload_optimizer = Offload::kCpu;
  CHECK(model_states(p, psi).total() == 2 * psi);
}

TEST_CASE("the simulated peak holds the ZeRO model states", "[lowering]") {
  const test::FakeModel m(4, 10'000'000, 10);
  const Run r = run(m, "dp: 2\nprecision: fp16\noptimizer: adam\nzero_stage: 1\n", round_cluster(), 500'000);
  const MemSnapshot& peak = r.exec.memory[0].at_peak;
  const std::int64_t psi = 40'000'000;
  CHECK(peak.bytes[static_cast<int>(MemCategory::kParameters)] == 2 * psi);
  // The peak is the step's (Note [fp32 gradient partition]): the 16-bit
  // gradients of the rank's half, 2 Psi / 2, and their fp32 copy, 4 Psi / 2,
  // above the backward's 2 Psi of 16-bit gradients.
  CHECK(peak.bytes[static_cast<int>(MemCategory::kGradients)] == 2 * psi / 2 + 4 * psi / 2);
  CHECK(peak.bytes[static_cast<int>(MemCategory::kOptimizer)] == 12 * psi / 2);
}

TEST_CASE("ZeRO-Offload steps on the host and moves gradients and parameters over PCIe", "[lowering]") {
  const test::FakeModel m(4, 10'000'000, 10);
  const Run r = run(m, "dp: 2\nprecision: fp16\nzero_stage: 2\noffload_optimizer: cpu\n", round_cluster(), 500'000);
  const auto host = std::count_if(r.graph.tasks.begin(), r.graph.tasks.end(),
                                  [](const Task& t) { return t.kind == TaskKind::kHostCompute; });
  CHECK(host == 1);
  const auto copies = std::count_if(r.graph.tasks.begin(), r.graph.tasks.end(),
                                    [](const Task& t) { return t.phase == Phase::kOffload; });
  CHECK(copies == 4 + 1);  // one d2h per reduce-scattered bucket (a layer each, as above), one h2d of parameters
  CHECK(r.exec.memory[0].at_peak.bytes[static_cast<int>(MemCategory::kOptimizer)] == 0);
  CHECK(r.phase(Phase::kOptimizer) > 0);
}

TEST_CASE("data-parallel replicas are simulated once", "[lowering]") {
  const test::FakeModel m(8, 10'000'000, 10);
  const Run small = run(m, "precision: fp16\n", round_cluster(1, 8), 500'000);
  const Run big = run(m, "precision: fp16\n", round_cluster(128, 8), 500'000);
  CHECK(small.graph.ranks.size() == 1);
  CHECK(big.graph.ranks.size() == 1);
  CHECK(big.graph.ranks[0].replicas == 1024);
  CHECK(small.graph.tasks.size() == big.graph.tasks.size());
}

TEST_CASE("FSDP HYBRID_SHARD shards within a node and all-reduces shards across nodes", "[lowering]") {
  // 2 nodes x 8: each layer's gradients are reduce-scattered over the 8 local
  // ranks, then each 1/8 shard is all-reduced between the 2 nodes (one rank
  // per node, 8 such groups sharing the node's NIC).
  const test::FakeModel m(4, 10'000'000, 10);
  const Run r = run(m, "precision: fp16\nfsdp: hybrid_shard\n", round_cluster(2, 8), 500'000);
  CHECK(r.count(CollectiveOp::kReduceScatter) == 4);
  CHECK(r.count(CollectiveOp::kAllReduce) == 4);
  CHECK(r.count(CollectiveOp::kAllGather) == 8);
  for (const Task& t : r.graph.tasks) {
    if (t.kind == TaskKind::kCollective && t.op == CollectiveOp::kAllReduce) {
      CHECK(t.bytes == 20'000'000 / 8);
      CHECK(t.cost.link == LinkClass::kInterNode);
      CHECK(t.cost.rate == Approx(10e9 / 8));  // one 10 GB/s NIC shared by 8 groups
    }
    if (t.kind == TaskKind::kCollective && t.op == CollectiveOp::kReduceScatter) {
      CHECK(t.cost.link == LinkClass::kIntraNode);
    }
  }
}

TEST_CASE("on a CPU cluster collectives do not overlap compute: exposed comm is every collective's time", "[lowering]") {
  // Note [CPU collectives]: Gloo runs on the ranks' own cores. So the
  // critical path's exposed communication is the sum of rank 0's collective
  // durations; with overlap allowed, the buckets hide partly behind backward.
  ClusterSpec cpu = load_cluster("local-cpu");
  REQUIRE_FALSE(cpu.device.comm_overlaps_compute);
  const auto model_ptr = models::load_model("gpt2");  // 12 blocks: buckets fill early in backward
  const Model& model = *model_ptr;
  PlanSpec spec = parse_plan("dp: 2\nmicro_batch: 1\nseq_len: 128\nbucket_mb: 25\n", "<test>");
  PredictOptions o;
  o.keep_graph = true;
  auto exposed_and_sum = [&](const ClusterSpec& c) {
    const Prediction p = predict(model, spec, c, o);
    double sum = 0;
    for (std::size_t t = 0; t < p.graph.tasks.size(); ++t) {
      const Task& task = p.graph.tasks[t];
      if (task.rank == 0 && task.kind == TaskKind::kCollective) sum += static_cast<double>(p.exec.spans[t].end - p.exec.spans[t].start);
    }
    return std::make_pair(static_cast<double>(p.breakdown.exposed_comm), sum);
  };
  const auto [serial, serial_sum] = exposed_and_sum(cpu);
  REQUIRE(serial_sum > 0);
  CHECK(serial == Approx(serial_sum));
  ClusterSpec overlapped = cpu;
  overlapped.device.comm_overlaps_compute = true;
  const auto [hidden, hidden_sum] = exposed_and_sum(overlapped);
  CHECK(hidden_sum == Approx(serial_sum));
  CHECK(hidden < 0.5 * hidden_sum);
  // overlap: false already puts the reductions after backward: the same
  // exposure, and no deadlock from queueing them on the compute stream.
  spec.overlap = false;
  const auto [after, after_sum] = exposed_and_sum(cpu);
  CHECK(after == Approx(after_sum));
  CHECK(after_sum == Approx(serial_sum));
}

namespace {
/// Bytes a task holds in buffers while it runs (on_start; on_end must give them back).
Bytes buffers_held(const TaskGraph& g, const Task& t) {
  Bytes held = 0, back = 0;
  for (const MemOp& op : g.on_start(t)) {
    if (op.category == MemCategory::kBuffers) held += op.bytes;
  }
  for (const MemOp& op : g.on_end(t)) {
    if (op.category == MemCategory::kBuffers) back += op.bytes;
  }
  CHECK(back == -held);
  return held;
}
}  // namespace

TEST_CASE("collective buffers with NCCL and with Gloo (Note [ZeRO])", "[lowering][zero]") {
  for (const bool gloo : {false, true}) {
    INFO("gloo " << gloo);
    ClusterSpec c = round_cluster();
    c.device.gloo_collectives = gloo;
    const auto held = [](const Run& r, CollectiveOp op, const std::string& name_part) {
      std::vector<Bytes> out;
      for (const Task& t : r.graph.tasks) {
        if (t.kind == TaskKind::kCollective && t.op == op && t.name.find(name_part) != std::string::npos) {
          out.push_back(buffers_held(r.graph, t));
        }
      }
      return out;
    };
    // ZeRO-2, 4 layers x 1000 fp32 params: one 16000 B bucket over 2 ranks.
    // NCCL receives the 8000 B shard; Gloo's all-to-all the whole bucket.
    // The updated parameters come back by an all-gather of 16000 B: Gloo
    // copies the 8000 B shard and gathers into a flat 16000 B first.
    const test::FakeModel small(4, 1000, 10);
    const Run z2 = run(small, "dp: 2\nzero_stage: 2\nprecision: fp32\noptimizer: adam\n", c, 1000);
    CHECK(held(z2, CollectiveOp::kReduceScatter, "") == std::vector<Bytes>{gloo ? 16000 : 8000});
    CHECK(held(z2, CollectiveOp::kAllGather, "all_gather params") == std::vector<Bytes>{gloo ? 8000 + 16000 : 0});
    // ZeRO-3 keeps layers under 1e5 parameters whole (persistent) and
    // gathers them after the step into one flat 16000 B buffer copied out.
    const Run z3 = run(small, "dp: 2\nzero_stage: 3\nprecision: fp32\noptimizer: adam\n", c, 1000);
    CHECK(held(z3, CollectiveOp::kAllGather, "persistent") == std::vector<Bytes>{16000 + (gloo ? 8000 + 16000 : 0)});
    // Layers of 200,000 parameters are gathered before forward and backward
    // (800,000 B each): Gloo adds the 400,000 B shard copy and a flat 800,000 B.
    const test::FakeModel big(2, 200'000, 10);
    const Run z3b = run(big, "dp: 2\nzero_stage: 3\nz3_leaf_layers: true\nprecision: fp32\noptimizer: adam\n", c, 1000);
    const auto gathers = held(z3b, CollectiveOp::kAllGather, "all_gather ");
    CHECK(gathers.size() == 4);
    for (Bytes b : gathers) CHECK(b == (gloo ? 1'200'000 : 0));
  }
}

TEST_CASE("times and sizes past 64 bits are refused, never wrapped (Note [Sizes in 64 bits])", "[lowering][bad-input]") {
  // 2^62 ns = 4.61e18 ns = 4.61e9 s is the longest simulated time.
  CHECK(seconds_to_ns(1e9) == 1'000'000'000'000'000'000);
  CHECK_THROWS_AS(seconds_to_ns(5e9), UnsupportedError);
  CHECK_THROWS_AS(seconds_to_ns(std::numeric_limits<double>::infinity()), UnsupportedError);
  CHECK_THROWS_AS(seconds_to_ns(std::numeric_limits<double>::quiet_NaN()), UnsupportedError);
  // Four layers that each keep 2^58 bytes for backward: after two the rank
  // holds 2^59 B of activations, the third would pass the 512 PiB a
  // category may hold.
  const test::FakeModel m(4, 1000, Bytes{1} << 58);
  try {
    run(m, "dp: 1\nprecision: fp32\noptimizer: adam\n", test::round_cluster(), 1000);
    FAIL("2^60 bytes of activations were simulated");
  } catch (const UnsupportedError& e) {
    CHECK_THAT(e.what(), Catch::Contains("rank 0 would hold over 512 PiB of activations"));
  }
  // Two layers reach exactly 2^59: still simulated.
  const test::FakeModel two(2, 1000, Bytes{1} << 58);
  const Run r = run(two, "dp: 1\nprecision: fp32\noptimizer: adam\n", test::round_cluster(), 1000);
  CHECK(r.exec.memory[0].at_peak.bytes[static_cast<int>(MemCategory::kActivations)] == Bytes{1} << 59);
}

// Note [Megatron's gradient buffer]: Megatron-LM's
// theoretical_memory_usage.py counts 18 bytes a parameter, or 6 + 12/dp
// with the distributed optimizer (bf16 weights 2, fp32 main gradients 4,
// fp32 master weights and Adam's moments 12), as Korthikanti et al. 2022
// (Figure 1) do.
TEST_CASE("Megatron's fp32 gradient buffer: 18 and 6 + 12/dp bytes a parameter", "[lowering][memory]") {
  const std::int64_t psi = 7'500'000'000;
  ResolvedPlan p;
  p.precision = Precision::kBf16;
  p.optimizer = Optimizer::kAdam;
  p.accumulate_allreduce_grads_in_fp32 = true;
  p.dp = 64;
  p.zero_stage = 0;
  p.shard_group = 1;
  CHECK(model_states(p, psi).total() == 18 * psi);  // 135 GB
  p.zero_stage = 1;
  p.shard_group = 64;
  CHECK(model_states(p, psi).total() == 6 * psi + 12 * psi / 64);  // 46,406,250,000
  p.accumulate_allreduce_grads_in_fp32 = false;
  CHECK(model_states(p, psi).total() == 4 * psi + 12 * psi / 64);  // bf16 gradients: the ZeRO paper's 4 + 12/N

  // Simulated: 4 layers of 10M parameters, dp 2, fp16 Adam with the flag
  // (the test device has no bf16; the buffer is the same). The buffer is
  // there from the start (gradients at their 4 bytes at the peak, DDP's
  // bucket copy gone from the buffers) and each bucket all-reduces 40 MB,
  // 8 us + 40 MB / 100 GB/s = 408 us (20 MB in fp16: 208 us); only the
  // last is exposed.
  const test::FakeModel m(4, 10'000'000, 10);
  const std::int64_t small = 40'000'000;
  const Run on = run(m, "dp: 2\nprecision: fp16\noptimizer: adam\naccumulate_allreduce_grads_in_fp32: true\n", round_cluster(), 500'000);
  const Run off = run(m, "dp: 2\nprecision: fp16\noptimizer: adam\n", round_cluster(), 500'000);
  const MemSnapshot& a = on.exec.memory[0].at_peak;
  const MemSnapshot& b = off.exec.memory[0].at_peak;
  CHECK(a.bytes[static_cast<int>(MemCategory::kGradients)] == 4 * small);
  CHECK(a.bytes[static_cast<int>(MemCategory::kOptimizer)] == 12 * small);
  CHECK(b.bytes[static_cast<int>(MemCategory::kGradients)] == 2 * small);
  CHECK(b.bytes[static_cast<int>(MemCategory::kBuffers)] - a.bytes[static_cast<int>(MemCategory::kBuffers)] == 2 * small);
  CHECK(on.phase(Phase::kComm) == 408'000);
  CHECK(off.phase(Phase::kComm) == 208'000);
  // The distributed optimizer: the whole buffer, half the states.
  const Run d = run(m, "dp: 2\nprecision: fp16\noptimizer: adam\nzero_stage: 1\naccumulate_allreduce_grads_in_fp32: true\n",
                    round_cluster(), 500'000);
  CHECK(d.exec.memory[0].at_peak.bytes[static_cast<int>(MemCategory::kGradients)] == 4 * small);
  CHECK(d.exec.memory[0].at_peak.bytes[static_cast<int>(MemCategory::kOptimizer)] == 6 * small);
  // Megatron-Core has no ZeRO-2: one line naming the key.
  CHECK_THROWS_WITH(resolve(parse_plan("dp: 2\nprecision: fp16\nzero_stage: 2\naccumulate_allreduce_grads_in_fp32: true\n", "p.yaml"),
                            m, round_cluster()),
                    "p.yaml:4: plan.accumulate_allreduce_grads_in_fp32: true is Megatron-Core's whole gradient buffer, which its "
                    "distributed optimizer (zero_stage 1) keeps too; with zero_stage 2 valid: false");

  // The shipped megatron-3d (bf16, the distributed optimizer, the buffer on):
  // GPT-3 175B on 64 A100s is dp 1, so each rank keeps 2 + 4 + 12 = 18 bytes
  // a parameter of its stage; on 512 (dp 8), 2 + 4 + 12/8 = 7.5.
  const auto gpt = models::load_model("gpt-175b");
  for (const auto& [nodes, per_param] : {std::pair{8, 18.0}, std::pair{64, 7.5}}) {
    INFO(nodes << " nodes");
    const ClusterSpec c = load_cluster("dgx-a100", {parse_override("cluster.nodes=" + std::to_string(nodes))});
    const Prediction pr = predict(*gpt, load_plan("megatron-3d"), c);
    const RankMemory& r0 = pr.ranks.front();
    CHECK(r0.gradients == 2 * r0.parameters);
    CHECK(static_cast<double>(r0.parameters + r0.gradients + r0.optimizer) == Approx(per_param / 2 * static_cast<double>(r0.parameters)));
  }
}

// Note [nanotron's fp32 accumulator] (lowering/emitter.hpp): nanotron's
// FP32GradientAccumulator keeps a whole fp32 buffer of the gradients for
// the run, beside DDP's 16-bit gradients (made by each backward, added into
// the buffer and freed as it ends) and DDP's bucket copy; the hook
// all-reduces the fp32 buffer, 4 bytes a gradient.
TEST_CASE("nanotron's fp32 gradient accumulator: a whole fp32 buffer, 16-bit gradients freed each backward, fp32 all-reduces",
          "[lowering][memory]") {
  const test::FakeModel m(4, 10'000'000, 10);
  const std::int64_t small = 40'000'000;  // 4 layers x 10M parameters
  const auto sum = [](const auto& ops, MemCategory c) {
    Bytes b = 0;
    for (const MemOp& op : ops) b += op.category == c ? op.bytes : 0;
    return b;
  };
  const auto named = [](const Run& r, const std::string& part) {
    std::vector<const Task*> out;
    for (const Task& t : r.graph.tasks) {
      if (t.name.find(part) != std::string::npos) out.push_back(&t);
    }
    return out;
  };
  const std::string base = "dp: 2\nprecision: fp16\noptimizer: adam\ngrad_accum: 2\n";
  const Run on = run(m, base + "fp32_grad_accumulator: true\n", round_cluster(), 500'000);
  const Run off = run(m, base, round_cluster(), 500'000);
  // Resident from the start: the fp32 buffer (4 B x 40M); DDP's bucket copy
  // (2 B x 40M) in both; fp32 masters and Adam's moments 12 B x 40M in both.
  CHECK(sum(on.graph.ranks[0].resident, MemCategory::kGradients) == 4 * small);
  CHECK(sum(off.graph.ranks[0].resident, MemCategory::kGradients) == 0);
  CHECK(sum(on.graph.ranks[0].resident, MemCategory::kBuffers) == 2 * small);
  CHECK(sum(off.graph.ranks[0].resident, MemCategory::kBuffers) == 2 * small);
  CHECK(sum(on.graph.ranks[0].resident, MemCategory::kOptimizer) == 12 * small);
  // Each micro-batch's backward ends adding its 16-bit gradients into the
  // buffer, freeing them: 40M elements at 1 GFLOP a 0.5 ms = 20 us each.
  const auto acc = named(on, "fp32 accumulate");
  REQUIRE(acc.size() == 2);
  for (const Task* t : acc) {
    CHECK(t->duration == 20'000);
    CHECK(sum(on.graph.on_end(*t), MemCategory::kGradients) == -2 * small);
  }
  CHECK(named(off, "fp32 accumulate").empty());
  // Every micro-batch's backward makes its 16-bit gradients anew (4 layers
  // x 2 micro-batches); without the accumulator only the first does.
  const auto making = [&](const Run& r) {
    int n = 0;
    for (const Task& t : r.graph.tasks) n += sum(r.graph.on_start(t), MemCategory::kGradients) > 0 ? 1 : 0;
    return n;
  };
  CHECK(making(on) == 8);
  CHECK(making(off) == 4);
  // On a roofline device of 1 TB/s, an addition reads 2 + 4 and writes 4
  // bytes a gradient, 400 us for 40M; the first micro-batch's zeroes the
  // buffer too (4 more written): 560 us.
  const RooflineComputeModel roofline(round_cluster().device);
  CHECK(detail::fp32_accumulate_time(roofline, small, false) == 400'000);
  CHECK(detail::fp32_accumulate_time(roofline, small, true) == 560'000);
  // So the step frees no gradient; without it, the step frees the 16-bit ones.
  const auto step_on = named(on, "optimizer step"), step_off = named(off, "optimizer step");
  REQUIRE(step_on.size() == 1);
  REQUIRE(step_off.size() == 1);
  CHECK(sum(on.graph.on_end(*step_on[0]), MemCategory::kGradients) == 0);
  CHECK(sum(off.graph.on_end(*step_off[0]), MemCategory::kGradients) == -2 * small);
  // The all-reduces move the fp32 buffer: 160 MB against 80 MB, each layer's
  // bucket 40 MB, 8 us + 40 MB / 100 GB/s = 408 us, the last exposed.
  const auto bytes = [](const Run& r) {
    Bytes b = 0;
    for (const Task& t : r.graph.tasks) b += t.kind == TaskKind::kCollective && t.op == CollectiveOp::kAllReduce ? t.bytes : 0;
    return b;
  };
  CHECK(bytes(on) == 4 * small);
  CHECK(bytes(off) == 2 * small);
  CHECK(on.phase(Phase::kComm) == 408'000);
  CHECK(off.phase(Phase::kComm) == 208'000);
  // A pipeline of 2 stages, 2 layers (20M parameters) each: every
  // micro-batch's backward of a stage ends with its own addition.
  const Run pipe = run(m, "pp: 2\nschedule: 1f1b\nprecision: fp16\noptimizer: adam\ngrad_accum: 2\nfp32_grad_accumulator: true\n",
                       round_cluster(), 500'000);
  const auto pacc = named(pipe, "fp32 accumulate");
  CHECK(pacc.size() == 4);
  for (const Task* t : pacc) {
    CHECK(t->duration == 10'000);
    CHECK(sum(pipe.graph.on_end(*t), MemCategory::kGradients) == -small);
  }
  CHECK(sum(pipe.graph.ranks[0].resident, MemCategory::kGradients) == 2 * small);
  // With dp 2 beside the pipeline each stage all-reduces its fp32 buffer:
  // 2 stages x 20M x 4 B, twice the 16-bit gradients.
  const std::string pipe_dp = "pp: 2\ndp: 2\nschedule: 1f1b\nprecision: fp16\noptimizer: adam\ngrad_accum: 2\n";
  CHECK(bytes(run(m, pipe_dp + "fp32_grad_accumulator: true\n", round_cluster(1, 4), 500'000)) == 4 * small);
  CHECK(bytes(run(m, pipe_dp, round_cluster(1, 4), 500'000)) == 2 * small);
  // The sums of tied weights come from the buffer too: gpt2-tiny's tied
  // embedding (1024 x 128), summed by each of its 2 stages, 4 bytes an element, not 2;
  // llama-tiny's sequence-parallel norms, twice their 16-bit bytes.
  const auto named_bytes = [&](const Run& r, const std::string& part) {
    Bytes b = 0;
    for (const Task* t : named(r, part)) b += t->kind == TaskKind::kCollective ? t->bytes : 0;
    return b;
  };
  const auto gpt2 = models::load_model("gpt2-tiny");
  const std::string tied = "pp: 2\nschedule: 1f1b\nprecision: fp16\noptimizer: adam\ngrad_accum: 2\n";
  CHECK(named_bytes(run(*gpt2, tied + "fp32_grad_accumulator: true\n", round_cluster(), 1000), "all_reduce tied embedding") == 2 * 1024 * 128 * 4);
  CHECK(named_bytes(run(*gpt2, tied, round_cluster(), 1000), "all_reduce tied embedding") == 2 * 1024 * 128 * 2);
  const auto llama = models::load_model("llama-tiny");
  const std::string sp = "tp: 2\nsequence_parallel: true\nprecision: fp16\noptimizer: adam\n";
  const Bytes sp_on = named_bytes(run(*llama, sp + "fp32_grad_accumulator: true\n", round_cluster(), 1000), "sequence-parallel grads");
  const Bytes sp_off = named_bytes(run(*llama, sp, round_cluster(), 1000), "sequence-parallel grads");
  CHECK(sp_off > 0);
  CHECK(sp_on == 2 * sp_off);
  // What nanotron's accumulator cannot run beside, one line each.
  const auto refused = [&](const std::string& extra, const std::string& dp = "dp: 2\n") {
    return test::error_of([&] { resolve(parse_plan(dp + "fp32_grad_accumulator: true\n" + extra, "p.yaml"), m, round_cluster()); });
  };

  CHECK(refused("precision: fp32\n") ==
        "p.yaml:2: plan.fp32_grad_accumulator: true with precision fp32: it accumulates 16-bit gradients (nanotron asserts no "
        "parameter is float); valid: fp16 or bf16");
  CHECK(refused("precision: fp16\nzero_stage: 2\n") ==
        "p.yaml:2: plan.fp32_grad_accumulator: true with zero_stage 2: it keeps every gradient whole, beside nanotron's ZeRO-1 at "
        "most; valid: zero_stage 0, or 1 over one rank");
  CHECK(refused("precision: fp16\nmaster_weights: false\n") ==
        "p.yaml:2: plan.fp32_grad_accumulator: true contradicts master_weights: false (the accumulator keeps the fp32 masters the "
        "optimizer steps); set only one");
  // nanotron's hook raises for ZeRO's reduce-scatter: ZeRO-1 over one rank only.
  CHECK(refused("precision: fp16\nzero_stage: 1\n") ==
        "p.yaml:2: plan.fp32_grad_accumulator: true with zero_stage 1 over 2 ranks: nanotron's fp32 DDP hook raises "
        "NotImplementedError for ZeRO's reduce-scatter (optim/gradient_accumulator.py, get_fp32_accum_hook); valid: zero_stage 0");
  CHECK(refused("precision: fp16\nzero_stage: 1\n", "dp: 1\n") == "(no error)");
}

TEST_CASE("optimizer_in_backward steps each layer after its backward and keeps no gradient beyond the one being made "
          "(Note [Optimizer in backward])",
          "[lowering][memory]") {
  // 4 layers x 1000 params, fp32 Adam, as "single GPU: forward, backward
  // and the optimizer, in order": forward 1 us and backward 2 us a layer;
  // each layer's step 1000 x 28 B at 1 TB/s = 28 ns, right after its
  // backward, so the iteration is as long as before: 4 + 8 us + 4 x 28 ns.
  const test::FakeModel m(4, 1000, 10);
  const Run r = run(m, "dp: 1\nprecision: fp32\noptimizer: adam\noptimizer_in_backward: true\n", round_cluster(), 1000);
  CHECK(r.exec.makespan == 4 * 1000 + 4 * 2000 + 112);
  CHECK(r.phase(Phase::kOptimizer) == 112);
  // The last layer's step runs between its backward (4 to 6 us) and the next layer's.
  bool found = false;
  for (std::size_t t = 0; t < r.graph.tasks.size(); ++t) {
    if (!r.graph.tasks[t].name.starts_with("step L3")) continue;
    found = true;
    CHECK(r.exec.spans[t].start == 6000);
    CHECK(r.exec.spans[t].end == 6028);
  }
  CHECK(found);
  // Peak at the start of the first backward: parameters 16000 B, Adam's m
  // and v 32000 B, all four layers' 10 B of activations, and that layer's
  // 4000 B of gradients (the fake layer is one tensor): 52040, where the
  // step after the backward peaks at 64010 with every gradient.
  const MemSnapshot& peak = r.exec.memory[0].at_peak;
  CHECK(peak.total() == 52040);
  CHECK(peak.bytes[static_cast<int>(MemCategory::kGradients)] == 4000);
  CHECK(peak.bytes[static_cast<int>(MemCategory::kActivations)] == 40);
  // model_states (what the search bounds and the breakdown start from) keeps none.
  const ResolvedPlan rp = resolve(parse_plan("dp: 1\nprecision: fp32\noptimizer: adam\noptimizer_in_backward: true\n", "p.yaml"), m, round_cluster());
  CHECK(model_states(rp, 4000).gradients == 0);
  // torchtune's rules: one GPU, one micro-batch, no ZeRO.
  CHECK_THROWS_WITH(resolve(parse_plan("dp: 2\noptimizer_in_backward: true\n", "p.yaml"), m, round_cluster()),
                    "p.yaml:2: plan.optimizer_in_backward: true on 2 GPUs: dtsim steps in the backward as torchtune's "
                    "single-device recipe does, on one GPU; valid here: false");
  CHECK_THROWS_WITH(resolve(parse_plan("dp: 1\nmicro_batch: 1\nglobal_batch: 4\noptimizer_in_backward: true\n", "p.yaml"), m,
                            round_cluster()),
                    Catch::Contains("plan.optimizer_in_backward: true with 4 micro-batches a step"));
  CHECK_THROWS_WITH(resolve(parse_plan("dp: 1\nzero_stage: 1\noptimizer_in_backward: true\n", "p.yaml"), m, round_cluster()),
                    Catch::Contains("valid: zero_stage 0"));
}

TEST_CASE("8-bit optimizer states: a byte each and an fp32 scale for each 256, streamed in one kernel (Note [8-bit optimizer])",
          "[lowering][memory]") {
  // bitsandbytes' AdamW8bit over 7.5B bf16 parameters without masters:
  // two uint8 states, 2 bytes a parameter, and two fp32 absmax for each
  // block of 256: 8 x 7.5e9 / 256 = 234,375,000 bytes more.
  const std::int64_t psi = 7'500'000'000;
  ResolvedPlan p;
  p.precision = Precision::kBf16;
  p.optimizer = Optimizer::kAdamW;
  p.master_weights = false;
  p.optim_bits = 8;
  CHECK(model_states(p, psi).optimizer == 2 * psi + 234'375'000);
  // Beside an fp32 master (a model under autocast): 4 more a parameter.
  p.master_weights = true;
  CHECK(model_states(p, psi).optimizer == 6 * psi + 234'375'000);
  // SGD's one momentum buffer: a byte and one scale a block.
  p.optimizer = Optimizer::kSgd;
  p.master_weights = false;
  CHECK(model_states(p, psi).optimizer == psi + 117'187'500);
  // The kernel reads the bf16 gradient and parameter, each state's byte
  // and its scale (4 / 256), and writes all but the gradient: 2 + 2 + 2 +
  // 2 x 2 x (1 + 1/64) = 10.0625 bytes, where torch.optim streams 14.
  p.optimizer = Optimizer::kAdamW;
  CHECK(update_bytes_per_param(p) == Approx(10.0625));

  // Simulated (4 layers of 10M parameters, one fp16 device): at the peak
  // 2 x 40M + 8 x 40M / 256 = 81,250,000 bytes of state; the step 10.0625
  // / 14 as long as torch.optim's without masters.
  const test::FakeModel m(4, 10'000'000, 10);
  const Run pure = run(m, "precision: fp16\noptimizer: adam\nmaster_weights: false\n", round_cluster(), 500'000);
  const Run eight = run(m, "precision: fp16\noptimizer: adam\nmaster_weights: false\noptim_bits: 8\n", round_cluster(), 500'000);
  CHECK(eight.exec.memory[0].at_peak.bytes[static_cast<int>(MemCategory::kOptimizer)] == 81'250'000);
  CHECK(static_cast<double>(eight.phase(Phase::kOptimizer)) ==
        Approx(static_cast<double>(pure.phase(Phase::kOptimizer)) * 10.0625 / 14).epsilon(1e-6));
  // One line each where it means nothing or contradicts the plan.
  CHECK_THROWS_WITH(resolve(parse_plan("optim_bits: 16\n", "p.yaml"), m, round_cluster()),
                    "p.yaml:1: plan.optim_bits: 16 is not a width bitsandbytes keeps states in; valid: 32 or 8");
  CHECK_THROWS_WITH(resolve(parse_plan("optimizer: sgd\nsgd_momentum: 0\noptim_bits: 8\n", "p.yaml"), m, round_cluster()),
                    Catch::Contains("which keeps no state to quantize"));
  CHECK_THROWS_WITH(resolve(parse_plan("dp: 2\nzero_stage: 1\nprecision: bf16\nuse_precision_aware_optimizer: true\noptim_bits: 8\n",
                                       "p.yaml"),
                            m, round_cluster()),
                    Catch::Contains("plan.optim_bits: 8 contradicts use_precision_aware_optimizer: true"));
}

TEST_CASE("without master weights Adam keeps 4 bytes a parameter and streams 14 a step, not 12 and 28 (Note [No master weights])",
          "[lowering][memory]") {
  // torch.optim.Adam over bf16 parameters: exp_avg and exp_avg_sq in bf16,
  // no fp32 copy: 2 + 2 + 4 bytes a parameter (params, grads, states) where
  // mixed precision keeps 2 + 2 + 12; ZeRO-1 over 64 shards the 4.
  const std::int64_t psi = 7'500'000'000;
  ResolvedPlan p;
  p.precision = Precision::kBf16;
  p.optimizer = Optimizer::kAdam;
  p.master_weights = false;
  CHECK(model_states(p, psi).total() == 8 * psi);
  p.zero_stage = 1;
  p.shard_group = 64;
  CHECK(model_states(p, psi).optimizer == 4 * psi / 64);
  CHECK(optimizer_state_bytes_per_param(Optimizer::kSgd, Precision::kBf16, false) == 2);      // momentum in bf16
  CHECK(optimizer_state_bytes_per_param(Optimizer::kSgdPlain, Precision::kBf16, false) == 0);
  CHECK(optimizer_state_bytes_per_param(Optimizer::kAdam, Precision::kFp16, true) == 12);
  // The step reads the gradient, the parameter and both states and writes
  // the last three, 2 bytes each: 14; mixed: 2 + 4 + 8 read, 4 + 8 + 2 written.
  CHECK(update_bytes_per_param(Optimizer::kAdam, Precision::kBf16, false) == 14);
  CHECK(update_bytes_per_param(Optimizer::kAdam, Precision::kBf16) == 28);

  // Simulated (4 layers of 10M parameters, one fp16 device): the states
  // 4 bytes a parameter at the peak, the step half as long.
  const test::FakeModel m(4, 10'000'000, 10);
  const std::int64_t all = 40'000'000;
  const Run mixed = run(m, "precision: fp16\noptimizer: adam\n", round_cluster(), 500'000);
  const Run pure = run(m, "precision: fp16\noptimizer: adam\nmaster_weights: false\n", round_cluster(), 500'000);
  CHECK(mixed.exec.memory[0].at_peak.bytes[static_cast<int>(MemCategory::kOptimizer)] == 12 * all);
  CHECK(pure.exec.memory[0].at_peak.bytes[static_cast<int>(MemCategory::kOptimizer)] == 4 * all);
  CHECK(static_cast<double>(pure.phase(Phase::kOptimizer)) == Approx(static_cast<double>(mixed.phase(Phase::kOptimizer)) / 2).epsilon(1e-6));
  // One line each where it means nothing or contradicts the plan.
  CHECK_THROWS_WITH(resolve(parse_plan("precision: fp32\nmaster_weights: false\n", "p.yaml"), m, round_cluster()),
                    "p.yaml:2: plan.master_weights: false with precision fp32, whose parameters are their own master; valid: true, "
                    "or precision fp16 or bf16");
  CHECK_THROWS_WITH(
      resolve(parse_plan("dp: 2\nprecision: fp16\naccumulate_allreduce_grads_in_fp32: true\nmaster_weights: false\n", "p.yaml"), m,
              round_cluster()),
      Catch::Contains("plan.master_weights: false contradicts accumulate_allreduce_grads_in_fp32: true"));
}

// Note [Megatron's gradient buffer] in 16 bits: 4 layers of 10M bf16
// parameters on 2 ranks. The buffer holds every gradient (2 B x 40M = 80M
// B) from the start; under the distributed optimizer the step adds an
// fp32 copy of the rank's shard (4 B x 20M = 80M), where DeepSpeed's ZeRO-1
// (no buffer) frees the 40M B outside the shard first (Note [fp32 gradient
// partition]): 160M against 120M at the step, where both peak. DDP keeps
// no bucket copy beside the buffer (2 B x 40M without it).
TEST_CASE("Megatron's 16-bit gradient buffer: resident, reduced where it lies, its shard copied to fp32 at the step",
          "[lowering][memory]") {
  const test::FakeModel m(4, 10'000'000, 10);
  const std::int64_t all = 40'000'000, shard = 20'000'000;
  ClusterSpec bf16 = round_cluster();
  bf16.device.peak_bf16 = 1e12;
  auto at_peak = [](const Run& r, MemCategory c) { return r.exec.memory[0].at_peak.bytes[static_cast<int>(c)]; };
  const std::string zero1 = "dp: 2\nprecision: bf16\noptimizer: adam\nzero_stage: 1\n";
  const Run deepspeed = run(m, zero1, bf16, 500'000);
  const Run megatron = run(m, zero1 + "megatron_grad_buffer: true\n", bf16, 500'000);
  const Run aware = run(m, zero1 + "megatron_grad_buffer: true\nuse_precision_aware_optimizer: true\n", bf16, 500'000);
  CHECK(at_peak(deepspeed, MemCategory::kGradients) == 2 * all - 2 * shard + 4 * shard);
  CHECK(at_peak(megatron, MemCategory::kGradients) == 2 * all + 4 * shard);
  CHECK(at_peak(aware, MemCategory::kGradients) == 2 * all);  // FusedAdam reads the bf16 shard as it is
  const std::string ddp = "dp: 2\nprecision: bf16\noptimizer: adam\n";
  const Run buckets = run(m, ddp, bf16, 500'000);
  const Run in_place = run(m, ddp + "megatron_grad_buffer: true\n", bf16, 500'000);
  CHECK(at_peak(buckets, MemCategory::kBuffers) == 2 * all);
  CHECK(at_peak(in_place, MemCategory::kBuffers) == 0);
  CHECK(at_peak(in_place, MemCategory::kGradients) == 2 * all);
  CHECK_THROWS_WITH(resolve(parse_plan("dp: 2\nprecision: bf16\nzero_stage: 2\nmegatron_grad_buffer: true\n", "p.yaml"), m, bf16),
                    "p.yaml:4: plan.megatron_grad_buffer: true is Megatron-Core's DistributedDataParallel buffer, under its "
                    "distributed optimizer (zero_stage 1) or without one; with zero_stage 2 valid: false");
  CHECK_THROWS_WITH(
      resolve(parse_plan("dp: 2\nprecision: bf16\nzero_stage: 1\noffload_optimizer: cpu\nmegatron_grad_buffer: true\n", "p.yaml"), m, bf16),
      "p.yaml:5: plan.megatron_grad_buffer: true with offload_optimizer cpu is not modelled (Megatron-Core keeps its gradient "
      "buffer on the GPU); valid: false");
}

TEST_CASE("Megatron's precision-aware optimizer: states in their own types, fp32 copies while it steps, more bytes streamed "
          "(Note [Precision-aware optimizer])",
          "[lowering][memory]") {
  // Per parameter of a shard (transformer_engine/pytorch/optimizers/
  // fused_adam.py): the master, exp_avg and exp_avg_sq.
  ResolvedPlan p;
  p.precision = Precision::kBf16;
  p.optimizer = Optimizer::kAdam;
  p.zero_stage = 1;
  CHECK(optimizer_state_bytes_per_param(p) == 12);  // without it: 4 + 4 + 4
  p.use_precision_aware_optimizer = true;
  CHECK(optimizer_state_bytes_per_param(p) == 10);  // the bf16 parameter's 16-bit remainder, 2 + 4 + 4
  CHECK(optimizer_step_copy_bytes_per_param(p) == 0);
  p.store_param_remainders = false;
  CHECK(optimizer_state_bytes_per_param(p) == 12);
  p.store_param_remainders = true;
  p.exp_avg_dtype = p.exp_avg_sq_dtype = StateDtype::kBf16;
  CHECK(optimizer_state_bytes_per_param(p) == 2 + 2 + 2);
  CHECK(optimizer_step_copy_bytes_per_param(p) == 4 + 4);  // each moment copied to fp32
  p.precision = Precision::kFp16;  // fp16 parameters keep a whole fp32 master
  CHECK(optimizer_state_bytes_per_param(p) == 4 + 2 + 2);
  p.precision = Precision::kFp8;
  p.fp8_recipe = Fp8Recipe::kMxfp8;  // Megatron-Core's own fp32 master (no_fp8_or_ds_fp8 false)
  CHECK_FALSE(p.te_master_weights());
  CHECK(optimizer_state_bytes_per_param(p) == 4 + 2 + 2);
  p.fp8_recipe = Fp8Recipe::kDelayed;  // FusedAdam's, of the bf16 parameters
  CHECK(p.te_master_weights());
  CHECK(optimizer_state_bytes_per_param(p) == 2 + 2 + 2);
  p.fp8_param_gather = true;  // FP8 primary weights: no remainder
  CHECK(optimizer_state_bytes_per_param(p) == 4 + 2 + 2);
  p.precision = Precision::kBf16;
  p.fp8_param_gather = false;
  p.exp_avg_dtype = p.exp_avg_sq_dtype = StateDtype::kFp8;
  CHECK(optimizer_state_bytes_per_param(p) == 2 + 1 + 1);
  p.exp_avg_dtype = p.exp_avg_sq_dtype = StateDtype::kFp32;
  p.main_params_dtype = StateDtype::kFp16;  // an fp16 master, copied to fp32 for the step
  CHECK(optimizer_state_bytes_per_param(p) == 2 + 4 + 4);
  CHECK(optimizer_step_copy_bytes_per_param(p) == 4);
  p.main_params_dtype = StateDtype::kFp32;
  p.precision = Precision::kFp32;  // the parameters are the masters
  p.exp_avg_dtype = StateDtype::kBf16;
  CHECK(optimizer_state_bytes_per_param(p) == 2 + 4);
  // The step's bytes (Note [Precision-aware step]): the gradient from its
  // buffer, the fp32 moments read and written (16), the remainder and the
  // bf16 parameter read and written (8); a bf16 moment 16 more, an fp8 14.
  p.precision = Precision::kBf16;
  p.exp_avg_dtype = StateDtype::kFp32;
  p.accumulate_allreduce_grads_in_fp32 = true;
  CHECK(update_bytes_per_param(p) == 4 + 16 + 8);
  p.accumulate_allreduce_grads_in_fp32 = false;
  CHECK(update_bytes_per_param(p) == 2 + 16 + 8);
  p.exp_avg_dtype = p.exp_avg_sq_dtype = StateDtype::kBf16;
  CHECK(update_bytes_per_param(p) == 2 + 16 + 8 + 2 * 16);
  p.exp_avg_dtype = p.exp_avg_sq_dtype = StateDtype::kFp8;
  CHECK(update_bytes_per_param(p) == 2 + 16 + 8 + 2 * 14);
  p.precision = Precision::kFp8;
  p.fp8_recipe = Fp8Recipe::kMxfp8;  // the mixed step's 28, with the moments' copies
  p.exp_avg_dtype = p.exp_avg_sq_dtype = StateDtype::kBf16;
  CHECK(update_bytes_per_param(p) == 28 + 2 * 16);

  // Simulated: 4 layers of 10M parameters on 2 ranks, bf16, the
  // distributed optimizer and Megatron's fp32 gradient buffer; the step
  // streams 1 TB/s (FixedCompute), so the plain one takes 20M x 28 B = 560 us.
  const test::FakeModel m(4, 10'000'000, 10);
  const std::int64_t shard = 20'000'000;
  ClusterSpec bf16 = round_cluster();
  bf16.device.peak_bf16 = 1e12;
  const std::string base = "dp: 2\nprecision: bf16\noptimizer: adam\nzero_stage: 1\naccumulate_allreduce_grads_in_fp32: true\n";
  const Run plain = run(m, base, bf16, 500'000);
  const Run aware = run(m, base + "use_precision_aware_optimizer: true\n", bf16, 500'000);
  const Run narrow = run(m, base + "use_precision_aware_optimizer: true\nexp_avg_dtype: bf16\nexp_avg_sq_dtype: bf16\n", bf16, 500'000);
  auto optimizer_at_peak = [](const Run& r) { return r.exec.memory[0].at_peak.bytes[static_cast<int>(MemCategory::kOptimizer)]; };
  CHECK(optimizer_at_peak(plain) == 12 * shard);
  CHECK(optimizer_at_peak(aware) == 10 * shard);
  // bf16 moments: 6 bytes kept, and at the step (where this peaks) 8 more.
  CHECK(optimizer_at_peak(narrow) == (6 + 8) * shard);
  CHECK(plain.phase(Phase::kOptimizer) == 560'000);
  CHECK(aware.phase(Phase::kOptimizer) == 560'000);
  CHECK(narrow.phase(Phase::kOptimizer) == 1'200'000);  // 20M x 60 B
  // With bf16 gradients the plain step copies its shard's to fp32
  // (distrib_optimizer.py, .float(): 4 B x 20M), priced as DeepSpeed's
  // ZeRO-1 step, which frees the gradients outside the shard as it starts
  // (2 B x 20M; Note [fp32 gradient partition]): 40M B more than the 80M
  // of bf16 gradients both keep until the step. FusedAdam reads them as
  // they are: no copy.
  const std::string bf16_grads = "dp: 2\nprecision: bf16\noptimizer: adam\nzero_stage: 1\n";
  const Run copied = run(m, bf16_grads, bf16, 500'000);
  const Run decoupled = run(m, bf16_grads + "use_precision_aware_optimizer: true\n", bf16, 500'000);
  auto grads_at_peak = [](const Run& r) { return r.exec.memory[0].at_peak.bytes[static_cast<int>(MemCategory::kGradients)]; };
  CHECK(grads_at_peak(decoupled) == 2 * 2 * shard);
  CHECK(grads_at_peak(copied) - grads_at_peak(decoupled) == (4 - 2) * shard);

  // As Megatron-Core asserts, one line each.
  CHECK_THROWS_WITH(resolve(parse_plan("dp: 2\nprecision: bf16\nuse_precision_aware_optimizer: true\n", "p.yaml"), m, bf16),
                    "p.yaml:3: plan.use_precision_aware_optimizer: true needs zero_stage 1, Megatron-Core's distributed optimizer "
                    "(\"only supported with distributed optimizer\"); with zero_stage 0 valid: false");
  CHECK_THROWS_WITH(resolve(parse_plan("dp: 2\nprecision: bf16\noptimizer: sgd\nzero_stage: 1\nuse_precision_aware_optimizer: true\n", "p.yaml"),
                            m, bf16),
                    "p.yaml:5: plan.use_precision_aware_optimizer: true needs optimizer adam or adamw (Transformer Engine's FusedAdam); "
                    "with sgd valid: false");
  CHECK_THROWS_WITH(resolve(parse_plan("dp: 2\nprecision: bf16\nzero_stage: 1\nexp_avg_dtype: bf16\n", "p.yaml"), m, bf16),
                    "p.yaml:4: plan.exp_avg_dtype: bf16 needs use_precision_aware_optimizer: true (Megatron-Core asserts \"exp_avg_dtype "
                    "can only be fp32 when not using precision-aware optimizer\"); valid without it: fp32");
  CHECK_THROWS_WITH(
      resolve(parse_plan("dp: 2\nprecision: bf16\nzero_stage: 1\nuse_precision_aware_optimizer: true\nmaster_weights: false\n", "p.yaml"), m,
              bf16),
      "p.yaml:5: plan.master_weights: false contradicts use_precision_aware_optimizer: true (its FusedAdam keeps masters); set only one");
  CHECK_THROWS_WITH(
      resolve(parse_plan("dp: 2\nprecision: bf16\nzero_stage: 1\nruntime: python\nreduce_scatter: false\nuse_precision_aware_optimizer: true\n",
                         "p.yaml"),
              m, bf16),
      "p.yaml:6: plan.use_precision_aware_optimizer: true with runtime: python, whose optimizer is torch.optim's; valid there: false");
  CHECK_THROWS_WITH(parse_plan("main_params_dtype: bf16\n", "p.yaml"), Catch::StartsWith("p.yaml:1: plan.main_params_dtype: 'bf16' is not one of fp32, fp16"));
}

TEST_CASE("ZeRO-2's backward waits for the bucket before: two buckets of gradients in flight (Note [Two buckets in flight])",
          "[lowering][memory]") {
  // 8 layers of 20M fp32 parameters (80 MB of gradients each, over the
  // 25 MB bucket: a bucket each) on 2 ranks; fp32, so that the step holds
  // no fp32 copy of the shard beyond it (Note [fp32 gradient partition]).
  // The backward of a layer takes 2 GFLOP x 1000 ns = 2 us; every
  // collective 1 ms (FixedComm): the reduce-scatters are 500x slower than
  // the backward.
  const test::FakeModel m(8, 20'000'000, 10);
  const ClusterSpec c = round_cluster();
  const Bytes layer = 20'000'000 * 4;
  // The resident gradient shard: 8 layers x 80 MB / 2 ranks.
  const Bytes shard = 8 * layer / 2;
  const test::FixedComm slow(1'000'000);
  const auto peak_grads = [&](const std::string& yaml) {
    const test::PlanRun r = test::run_plan(m, yaml, c, slow, 1000);
    return r.exec.memory[0].at_peak.bytes[static_cast<int>(MemCategory::kGradients)];
  };
  // DeepSpeed: bucket k's reduce-scatter is queued once the backward has
  // waited for bucket k-1's; while layer i computes, layer i+1's gradients
  // are still being reduced: two layers' worth.
  CHECK(peak_grads("dp: 2\nprecision: fp32\nzero_stage: 2\n") == shard + 2 * layer);
  // FSDP's SHARD_GRAD_OP does not wait: all eight pile up behind the network.
  CHECK(peak_grads("dp: 2\nprecision: fp32\nfsdp: shard_grad_op\n") == shard + 8 * layer);
  // FSDP2 (fully_shard) does (Note [FSDP2's reduce-scatter wait]): layer
  // i's post_backward waits for layer i+1's reduce-scatter, frees its
  // input, and copies layer i's gradients into its own: two layers in
  // flight, as DeepSpeed's, one as gradients (the layer being computed),
  // one as the running reduce-scatter's input (a buffer), beside its
  // receive buffer (the rank's half, NCCL's: layer / 2).
  {
    const test::PlanRun r = test::run_plan(m, "dp: 2\nprecision: fp32\nfsdp: shard_grad_op\nfsdp_version: 2\n", c, slow, 1000);
    const auto& at = r.exec.memory[0].at_peak.bytes;
    CHECK(at[static_cast<int>(MemCategory::kGradients)] == shard + layer);
    CHECK(at[static_cast<int>(MemCategory::kBuffers)] == layer + layer / 2);
  }
  // And the iteration: eight reduce-scatters of 1 ms, one after the other,
  // then the parameters' all-gather (1 ms): at least 9 ms either way.
  const test::PlanRun r = test::run_plan(m, "dp: 2\nprecision: fp16\nzero_stage: 2\n", c, slow, 1000);
  CHECK(r.exec.makespan >= 9'000'000);
  // Where the backward waits: FSDP1's forward (8 x 1 us) and backward
  // (8 x 2 us) end at 24 us; FSDP2's layer i waits for layer i+2's
  // reduce-scatter, the (6 - i)-th of the 1 ms ones queued back to back
  // from layer 7's backward's end (10 us), so layer 0's runs from 6.010 ms.
  const auto backward_end = [&](const std::string& yaml) {
    const test::PlanRun run = test::run_plan(m, yaml, c, slow, 1000);
    TimeNs end = 0;
    for (std::size_t t = 0; t < run.graph.tasks.size(); ++t) {
      const Task& k = run.graph.tasks[t];
      if (k.kind == TaskKind::kCompute && k.phase == Phase::kBackward && k.duration > 0) end = std::max(end, run.exec.spans[t].end);
    }
    return end;
  };
  CHECK(backward_end("dp: 2\nprecision: fp32\nfsdp: shard_grad_op\n") == 24'000);
  CHECK(backward_end("dp: 2\nprecision: fp32\nfsdp: shard_grad_op\nfsdp_version: 2\n") == 6'012'000);
}

TEST_CASE("FSDP2's FULL_SHARD: its waits are the gathers' already; its reduce-scatter inputs live until the next unit's wait",
          "[lowering][memory]") {
  // Note [FSDP2's reduce-scatter wait], Note [One process group]: layer
  // i-1's backward needs its gather, queued behind layer i+1's
  // reduce-scatter on the one stream, so FSDP2's wait for that
  // reduce-scatter moves no task; the gradients it holds longer do move
  // the peak, never down. Eight 20M-parameter layers, every collective 1 ms.
  const test::FakeModel m(8, 20'000'000, 10);
  const ClusterSpec c = round_cluster();
  const test::FixedComm slow(1'000'000);
  const test::PlanRun v1 = test::run_plan(m, "dp: 2\nprecision: fp32\nfsdp: full_shard\n", c, slow, 1000);
  const test::PlanRun v2 = test::run_plan(m, "dp: 2\nprecision: fp32\nfsdp: full_shard\nfsdp_version: 2\n", c, slow, 1000);
  CHECK(v2.exec.makespan == v1.exec.makespan);
  // A post_backward after each of the 8 layers (layer 7's waits for
  // nothing, but copies its gradients in) and one wait at the backward's
  // end; a copy-out after each of the 16 gathers (Note [FSDP2's copy-out],
  // free under FixedCompute, which prices FLOPs alone).
  CHECK(v2.graph.tasks.size() == v1.graph.tasks.size() + 9 + 16);
  // FSDP2's input is a buffer; FSDP1's gradients wait in their category.
  const auto kept = [](const test::PlanRun& r) {
    const auto& at = r.exec.memory[0].at_peak.bytes;
    return at[static_cast<int>(MemCategory::kGradients)] + at[static_cast<int>(MemCategory::kBuffers)];
  };
  CHECK(kept(v2) >= kept(v1));
}

TEST_CASE("FSDP2 copies each gathered unit out of its flat buffer on the compute stream, FSDP1 does not (Note [FSDP2's copy-out])",
          "[lowering][memory]") {
  // Eight layers of 20M fp32 parameters on 2 ranks, FULL_SHARD: each
  // gather brings 80 MB. A kernel takes 1 ms a GFLOP plus its bytes at 1 TB/s
  // (a layer's forward 1 ms, its backward 2 ms), every collective 1 us, so
  // the gathers are always ready and the compute stream is the whole step.
  // FSDP2's copy-out reads and writes the 80 MB: 160 MB / 1 TB/s = 160 us,
  // 16 of them (8 gathers in the forward, 8 in the backward) in line with
  // the layers: 2.56 ms more.
  struct BytesCompute final : ComputeModel {
    TimeNs kernel_time(const Kernel& k, Precision) const override {
      return static_cast<TimeNs>(k.flops / 1e9 * 1e6 + static_cast<double>(k.bytes) / 1e12 * 1e9);
    }
  };
  const test::FakeModel m(8, 20'000'000, 10);
  const ClusterSpec c = round_cluster();
  const test::FixedComm fast(1'000);
  const BytesCompute compute;
  const auto run = [&](const std::string& yaml) {
    test::PlanRun r;
    r.plan = resolve(parse_plan(yaml, "test.yaml"), m, c);
    partition(r.plan, m, c, compute, fast);
    r.graph = lower(m, r.plan, c, CostModels{&compute, &fast});
    r.exec = execute(r.graph, ExecOptions{});
    return r;
  };
  const test::PlanRun v1 = run("dp: 2\nprecision: fp32\nfsdp: full_shard\n");
  const test::PlanRun v2 = run("dp: 2\nprecision: fp32\nfsdp: full_shard\nfsdp_version: 2\n");
  int copies = 0;
  for (const Task& t : v2.graph.tasks) {
    if (t.name.rfind("copy out ", 0) != 0) continue;
    ++copies;
    CHECK(t.duration == 160'000);
    CHECK(t.memory_share == 1);
  }
  CHECK(copies == 16);
  for (const Task& t : v1.graph.tasks) CHECK(t.name.rfind("copy out ", 0) != 0);
  CHECK(v2.exec.makespan - v1.exec.makespan == 16 * 160'000);
  // SHARD_GRAD_OP keeps the parameters whole from step to step: one gather
  // of all 8 x 80 MB after the step, one copy-out of 1.28 GB, 1.28 ms.
  const test::PlanRun sgo = run("dp: 2\nprecision: fp32\nfsdp: shard_grad_op\nfsdp_version: 2\n");
  copies = 0;
  for (const Task& t : sgo.graph.tasks) {
    if (t.name != "copy out params") continue;
    ++copies;
    CHECK(t.duration == 1'280'000);
  }
  CHECK(copies == 1);
}

TEST_CASE("DeepSpeed's ZeRO-2 holds its gradients in reduce_bucket_size buffers, one without overlap_comm (Note [ZeRO-2's buffers])",
          "[lowering][memory]") {
  // 8 layers of 5M fp32 parameters (20 MB of gradients each) on 2 ranks, a
  // 50 MB bucket (12.5M elements): DeepSpeed reduces before a layer would
  // overflow it (20 + 20 + 20 > 50), so 4 buckets of 2 layers. fp32, so the
  // step holds no fp32 copy beyond the shard (Note [fp32 gradient
  // partition]). A backward takes 2 us, every collective 1 ms.
  const test::FakeModel m(8, 5'000'000, 10);
  const ClusterSpec c = round_cluster();
  const Bytes layer = 5'000'000 * 4, bucket = 2 * layer;
  const Bytes shard = 8 * layer / 2;  // the resident gradient partition
  const test::FixedComm slow(1'000'000);
  struct Most {
    Bytes grads = 0, buffers = 0;
    TimeNs makespan = 0;
    int inline_reductions = 0;  // reduce-scatters on the compute stream
  };
  const auto most = [&](const std::string& extra) {
    const test::PlanRun r = test::run_plan_with(m, "dp: 2\nprecision: fp32\nzero_stage: 2\nbucket_mb: 50\n" + extra, c, slow, 1000, true);
    const TaskGraph& g = r.graph;
    const ExecResult& e = r.exec;
    Most out;
    for (const MemSnapshot& s : e.memory[0].timeline) {
      out.grads = std::max(out.grads, s.bytes[static_cast<int>(MemCategory::kGradients)]);
      out.buffers = std::max(out.buffers, s.bytes[static_cast<int>(MemCategory::kBuffers)]);
    }
    for (const Task& t : g.tasks) {
      if (t.op == CollectiveOp::kReduceScatter && t.kind == TaskKind::kCollective &&
          g.ranks[t.rank].streams[t.stream] == "compute") {
        ++out.inline_reductions;
      }
    }
    out.makespan = e.makespan;
    return out;
  };
  const Most gathered = most("contiguous_gradients: false\n");
  const Most ds = most("");
  const Most serial = most("overlap: false\n");
  // contiguous_gradients false: each bucket's gradients wait where autograd
  // made them; the backward waits for the bucket before (Note [Two buckets
  // in flight]): two buckets, four layers, besides the shard.
  CHECK(gathered.grads == shard + 2 * bucket);
  // DeepSpeed's default: every layer's gradients go into the buffers as
  // its backward ends: one layer's besides the shard, and two buffers of
  // 50 MB more than without them.
  CHECK(ds.grads == shard + layer);
  CHECK(ds.buffers - gathered.buffers == 2 * 50'000'000);
  // Without overlap_comm: one buffer, each bucket reduced on the compute
  // stream as it fills, the backward waiting for it: 4 reduce-scatters of
  // 1 ms in turn, then the parameters' all-gather (1 ms).
  CHECK(serial.grads == shard + layer);
  CHECK(serial.buffers - gathered.buffers == 50'000'000);
  CHECK(serial.inline_reductions == 4);
  CHECK(ds.inline_reductions == 0);
  CHECK(serial.makespan >= 5'000'000);
}

TEST_CASE("a Python loop's ZeRO-1 is ZeroRedundancyOptimizer: a broadcast a tensor (Note [ZeroRedundancyOptimizer])", "[lowering]") {
  // Its partition by hand: tensors 5, 4, 3, 3, 1 over 2 ranks, largest
  // first to the emptier rank (the lower on a tie): 5 -> r0, 4 -> r1,
  // 3 -> r1 (7), 3 -> r0 (8), 1 -> r1 (8). Both hold 8; r1 has 3 tensors.
  const sim::detail::ZeroRedundancyShare share = sim::detail::zero_redundancy_share({3, 5, 1, 4, 3}, 2);
  CHECK(share.elements == 8);
  CHECK(share.tensors == 3);
  // 4 layers of 1M parameters in 2 tensors each (500,000 elements, 2 MB in
  // fp32): 8 broadcasts of 1 ms each (FixedComm) after the step, where the
  // C++ loop's ZeRO-1 all-gathers one flat buffer.
  const test::FakeModel m(4, 1'000'000, 10, 2);
  const test::FixedComm comm(1'000'000);
  const test::PlanRun py = test::run_plan(m, "dp: 2\nprecision: fp32\nzero_stage: 1\nruntime: python\n", round_cluster(), comm, 1000);
  const test::PlanRun cpp = test::run_plan(m, "dp: 2\nprecision: fp32\nzero_stage: 1\n", round_cluster(), comm, 1000);
  const auto of = [](const TaskGraph& g, CollectiveOp op) {
    std::vector<const Task*> out;
    for (const Task& t : g.tasks) {
      if (t.kind == TaskKind::kCollective && t.op == op) out.push_back(&t);
    }
    return out;
  };
  const auto casts = of(py.graph, CollectiveOp::kBroadcast);
  REQUIRE(casts.size() == 1);
  CHECK(casts[0]->cost.latency == 8 * 1'000'000);
  CHECK(casts[0]->bytes == 8 * 500'000 * 4);
  CHECK(of(py.graph, CollectiveOp::kAllGather).empty());
  CHECK(of(cpp.graph, CollectiveOp::kBroadcast).empty());
  CHECK(of(cpp.graph, CollectiveOp::kAllGather).size() == 1);
  // Seven broadcast latencies more than the one all-gather's.
  CHECK(py.exec.makespan - cpp.exec.makespan >= 7 * 1'000'000);
}

namespace {
/// The distributed optimizer as Megatron-LM runs it under 16 bits (fp16 on
/// the round cluster, which has no bf16): ZeRO-1 with Adam and the fp32
/// gradient buffer (Note [Megatron's gradient buffer]); the two tests below.
constexpr const char* kDistributedOptimizer =
    "precision: fp16\noptimizer: adam\nzero_stage: 1\naccumulate_allreduce_grads_in_fp32: true\n";

/// It on 4 layers of 10M parameters at dp 2 (`piped`: 2 stages of 2
/// layers, 4 micro-batches), as it is and with `knob` added.
std::pair<Run, Run> with_and_without(const std::string& knob, bool piped) {
  const test::FakeModel m(4, 10'000'000, 10);
  const std::string plan = std::string(piped ? "pp: 2\ndp: 2\nmicro_batches: 4\n" : "dp: 2\n") + kDistributedOptimizer;
  const ClusterSpec c = piped ? round_cluster(1, 4) : round_cluster();
  return {run(m, plan, c, 500'000), run(m, plan + knob, c, 500'000)};
}
}  // namespace

// Note [ZeRO-1's reduction]: Megatron-Core's distributed optimizer
// reduce-scatters each bucket (param_and_grad_buffer.py, start_grad_sync),
// DeepSpeed's stage 1 reduces each slice to its owner; ZeroRedundancyOptimizer
// over DDP and dtsim's runtime all-reduce it. 4 layers of 10M parameters,
// dp 2 on round_cluster (100 GB/s, 6 us + 1 us a ring step), Megatron's
// fp32 gradient buffer: a 40 MB bucket a layer, reduced in place (no bucket
// copies). A reduce-scatter: 6 + 1 us + 40 MB x 1/2 / 100 GB/s = 207 us; an
// all-reduce: 6 + 2 us + 40 MB x 2/2 / 100 GB/s = 408 us. Only the last
// bucket's reduction is exposed, then the step (40M parameters, 28 B each
// at 1 TB/s: 1,120 us over 2 shards: 560 us), then the all-gather of the
// 2-byte parameters: 6 + 1 us + 80 MB / 2 / 100 GB/s = 407 us.
TEST_CASE("ZeRO-1 reduce-scatters its buckets as Megatron and DeepSpeed do, all-reduces them with reduce_scatter: false",
          "[lowering][zero]") {
  const test::FakeModel m(4, 10'000'000, 10);
  const auto [rs, ar] = with_and_without("reduce_scatter: false\n", false);
  CHECK(rs.count(CollectiveOp::kReduceScatter) == 4);
  CHECK(rs.count(CollectiveOp::kAllReduce) == 0);
  CHECK(ar.count(CollectiveOp::kAllReduce) == 4);
  CHECK(ar.count(CollectiveOp::kReduceScatter) == 0);
  for (const Run* r : {&rs, &ar}) {
    for (const Task& t : r->graph.tasks) {
      if (t.kind != TaskKind::kCollective || t.phase != Phase::kComm) continue;
      if (t.op == CollectiveOp::kReduceScatter) CHECK(t.cost.total() == 207'000);
      if (t.op == CollectiveOp::kAllReduce) CHECK(t.cost.total() == 408'000);
      if (t.op == CollectiveOp::kReduceScatter || t.op == CollectiveOp::kAllReduce) CHECK(t.bytes == 40'000'000);
    }
  }
  CHECK(rs.phase(Phase::kComm) == 207'000 + 407'000);
  CHECK(ar.phase(Phase::kComm) == 408'000 + 407'000);
  CHECK(ar.exec.makespan - rs.exec.makespan == 408'000 - 207'000);
  // The same memory either way: the reduction works where the gradients lie.
  CHECK(rs.exec.memory[0].at_peak.bytes == ar.exec.memory[0].at_peak.bytes);
  // A Python loop's ZeRO-1 is ZeroRedundancyOptimizer over DDP: all-reduced,
  // and asking it for a reduce-scatter is one line naming the key.
  CHECK_FALSE(resolve(parse_plan("dp: 2\nzero_stage: 1\nruntime: python\n", "p.yaml"), m, round_cluster()).reduce_scatter);
  CHECK_THROWS_WITH(resolve(parse_plan("dp: 2\nzero_stage: 1\nruntime: python\nreduce_scatter: true\n", "p.yaml"), m, round_cluster()),
                    "p.yaml:4: plan.reduce_scatter: true with runtime: python, whose ZeRO-1 is PyTorch's "
                    "ZeroRedundancyOptimizer over DDP, which all-reduces every bucket; valid there: false");
  // In a pipeline, each chunk's buckets: 2 stages of 2 layers, dp 2 on 4
  // GPUs, 4 micro-batches; a reduction a layer either way, 40 MB each.
  const auto [prs, par] = with_and_without("reduce_scatter: false\n", true);
  CHECK(prs.count(CollectiveOp::kReduceScatter) == 4);
  CHECK(prs.count(CollectiveOp::kAllReduce) == 0);
  CHECK(par.count(CollectiveOp::kAllReduce) == 4);
  CHECK(par.count(CollectiveOp::kReduceScatter) == 0);
  CHECK(prs.exec.makespan < par.exec.makespan);
}

// Note [Overlapped parameter gather]: Megatron-LM's --overlap-param-gather
// gathers each bucket as the next forward reaches it, one ahead, instead of
// all after the step. The model above (micro-batch 1: a layer's forward
// 1 GFLOP x 500 us, its backward 1,000 us), a 10M-parameter bucket a
// layer: each gather 10M x 2 B = 20 MB, 6 + 1 us + 20 MB / 2 / 100 GB/s =
// 107 us. The first is exposed before layer 0's forward; each of the others
// runs during the 500 us forward of the layer before it. After the step
// nothing: the 407 us gather of all 80 MB leaves the iteration, 107 us come
// in, 300 us less in all.
TEST_CASE("Megatron's overlapped parameter gather: bucket by bucket in the next forward, one ahead", "[lowering][zero]") {
  const test::FakeModel m(4, 10'000'000, 10);
  const auto [after, early] = with_and_without("overlap_param_gather: true\n", false);
  CHECK(after.count(CollectiveOp::kAllGather) == 1);
  REQUIRE(early.count(CollectiveOp::kAllGather) == 4);
  std::vector<TaskId> gathers;
  for (TaskId t = 0; t < static_cast<TaskId>(early.graph.tasks.size()); ++t) {
    const Task& k = early.graph.tasks[t];
    if (k.kind == TaskKind::kCollective && k.op == CollectiveOp::kAllGather) gathers.push_back(t);
  }
  for (std::size_t i = 0; i < gathers.size(); ++i) {
    const Task& k = early.graph.tasks[gathers[i]];
    CHECK(k.bytes == 20'000'000);
    CHECK(k.cost.total() == 107'000);
    // Back to back on the communication stream from the start.
    CHECK(early.exec.spans[gathers[i]].start == static_cast<TimeNs>(i) * 107'000);
  }
  CHECK(early.phase(Phase::kComm) == 107'000 + 207'000);
  CHECK(after.exec.makespan - early.exec.makespan == 407'000 - 107'000);
  CHECK(early.exec.memory[0].at_peak.bytes == after.exec.memory[0].at_peak.bytes);
  // Megatron-LM's arguments.py: only with the distributed optimizer and --overlap-grad-reduce.
  CHECK_THROWS_WITH(resolve(parse_plan("dp: 2\nzero_stage: 2\noverlap_param_gather: true\n", "p.yaml"), m, round_cluster()),
                    "p.yaml:3: plan.overlap_param_gather: true needs the distributed optimizer (zero_stage: 1), as "
                    "Megatron-LM's --overlap-param-gather does; with zero_stage 2 valid: false");
  CHECK_THROWS_WITH(resolve(parse_plan("dp: 2\nzero_stage: 1\noverlap: false\noverlap_param_gather: true\n", "p.yaml"), m,
                            round_cluster()),
                    Catch::Contains("plan.overlap_param_gather: true needs overlap: true"));
  // A pipeline: 2 stages of 2 layers, a bucket a layer. Each chunk's
  // buckets are gathered from the start, one after another (107 us each),
  // its first forward waiting for the first alone; after the step nothing
  // (there each stage gathered its 40 MB, 6 + 1 us + 200 us = 207 us). Stage
  // 0 starts first and ends last under 1F1B, so the iteration starts 107 us
  // later and ends 207 us sooner: 100 us less.
  const auto [pafter, pearly] = with_and_without("overlap_param_gather: true\n", true);
  CHECK(pafter.count(CollectiveOp::kAllGather) == 2);
  REQUIRE(pearly.count(CollectiveOp::kAllGather) == 4);
  std::vector<TimeNs> starts;
  for (TaskId t = 0; t < static_cast<TaskId>(pearly.graph.tasks.size()); ++t) {
    const Task& k = pearly.graph.tasks[t];
    if (k.kind != TaskKind::kCollective || k.op != CollectiveOp::kAllGather) continue;
    CHECK(k.bytes == 20'000'000);
    CHECK(k.cost.total() == 107'000);
    starts.push_back(pearly.exec.spans[t].start);
  }
  std::sort(starts.begin(), starts.end());
  CHECK(starts == std::vector<TimeNs>{0, 0, 107'000, 107'000});
  CHECK(pafter.exec.makespan - pearly.exec.makespan == 207'000 - 107'000);
}

namespace {
/// Reduce-scatters take 3 ms, every other collective 1 ms.
class SlowReduceComm final : public CommModel {
 public:
  CollectiveCost collective(CollectiveOp op, Bytes, const CommGroup&) const override {
    CollectiveCost c;
    c.algorithm = "fixed";
    c.latency = op == CollectiveOp::kReduceScatter ? 3'000'000 : 1'000'000;
    return c;
  }
  CollectiveCost host_copy(Bytes) const override { return {}; }
};
}  // namespace

TEST_CASE("FSDP's gathers queue behind its reduce-scatters on one process group (Note [One process group])",
          "[lowering][memory]") {
  // 8 layers of 20M fp16 parameters (40 MB of gradients each) on 2 ranks;
  // the backward of a layer takes 2 us, a gather 1 ms, a reduce-scatter 3 ms.
  const test::FakeModel m(8, 20'000'000, 10);
  const Bytes layer = 20'000'000 * 2, shard = 8 * layer / 2;
  const SlowReduceComm comm;
  const auto grads = [&](const ClusterSpec& c) {
    const test::PlanRun r = test::run_plan(m, "dp: 2\nprecision: fp16\nfsdp: full_shard\n", c, comm, 1000);
    return r.exec.memory[0].at_peak.bytes[static_cast<int>(MemCategory::kGradients)];
  };
  // One stream: ..., gather 7, gather 6, reduce-scatter 7, gather 5,
  // reduce-scatter 6, ... Layer 5's backward needs gather 5, which waits for
  // reduce-scatter 7: at t = 10 ms layers 7 and 6 hold gradients (7's freed
  // at 13), at 14 layers 6 and 5 (6's freed at 17): two layers, never more.
  CHECK(grads(round_cluster()) == shard + 2 * layer);
  // Where the collectives run on the ranks' cores (Gloo: Note [CPU
  // collectives]) each reduce-scatter ends before the next backward starts:
  // one layer at a time.
  ClusterSpec cpu = round_cluster();
  cpu.device.comm_overlaps_compute = false;
  CHECK(grads(cpu) == shard + 1 * layer);
}

TEST_CASE("FSDP's limit_all_gathers: off, the gathers run ahead of the layers", "[lowering][memory]") {
  // 8 layers of 20M fp16 parameters (40 MB each when gathered) on 2 ranks,
  // the resident shard 8 x 40 MB / 2. A forward takes 1 ms, a backward 2 ms,
  // a gather 1 us: the network runs far ahead of the layers if let.
  const test::FakeModel m(8, 20'000'000, 10);
  const Bytes layer = 20'000'000 * 2, shard = 8 * layer / 2;
  const test::FixedComm comm(1000);
  const auto params = [&](const std::string& yaml) {
    ResolvedPlan plan = resolve(parse_plan(yaml, "test.yaml"), m, round_cluster());
    const test::FixedCompute compute(1'000'000);
    partition(plan, m, round_cluster(), compute, comm);
    ExecOptions o;
    o.record_memory_timeline = true;
    const ExecResult r = execute(lower(m, plan, round_cluster(), CostModels{&compute, &comm}), o);
    Bytes most = 0;
    for (const MemSnapshot& s : r.memory[0].timeline) most = std::max(most, s.bytes[static_cast<int>(MemCategory::kParameters)]);
    return most;
  };
  // Limited: a gather waits for the layer two before it, so while layer l
  // computes only l and l + 1 are whole; the most is during the last
  // forward, layer 7's own plus the backward's gathers of 7 and 6 (they
  // wait for the forwards of 6 and 5): three layers.
  CHECK(params("dp: 2\nprecision: fp16\nfsdp: full_shard\n") == shard + 3 * layer);
  // Unlimited: the eight forward gathers and the backward's first two (7,
  // and the prefetch of 6) all run at the start; the next backward gather
  // queues behind layer 7's reduce-scatter (Note [One process group]).
  // While layer 0 computes, ten layers are whole.
  CHECK(params("dp: 2\nprecision: fp16\nfsdp: full_shard\nlimit_all_gathers: false\n") == shard + 10 * layer);
}

TEST_CASE("FSDP's root unit: the layers outside the blocks gathered once a micro-batch and kept whole until the backward's end (Note [FSDP's root unit])",
          "[lowering][memory]") {
  // An embedding of 30M fp16 parameters, 4 blocks of 20M, a head of 10M,
  // on 2 ranks; every collective takes 1 us, a layer's forward 1 us.
  const test::FakeModel m = test::FakeModel(4, 20'000'000, 10).with_ends(30'000'000, 10'000'000);
  const Bytes root = (30'000'000 + 10'000'000) * 2;                         // the root, whole, fp16
  const Bytes shard = (30'000'000 + 4 * 20'000'000 + 10'000'000) * 2 / 2;  // each rank's half of all
  const test::FixedComm comm(1000);
  struct Lowered {
    TaskGraph g;
    ExecResult r;
    /// The collectives of kind `op`, by name without the micro-batch tag, with their bytes.
    std::map<std::string, Bytes> collectives(CollectiveOp op) const {
      std::map<std::string, Bytes> out;
      for (const Task& t : g.tasks) {
        if (t.kind == TaskKind::kCollective && t.op == op && t.rank == 0) out[t.name.substr(0, t.name.find(" [mb"))] = t.bytes;
      }
      return out;
    }
    const Span& span(const std::string& name) const {
      for (std::size_t i = 0; i < g.tasks.size(); ++i) {
        if (g.tasks[i].rank == 0 && g.tasks[i].name == name) return r.spans[i];
      }
      FAIL("no task " << name);
      return r.spans.front();
    }
    /// The fewest parameter bytes the rank held from `from` to `to`.
    Bytes least_params(TimeNs from, TimeNs to) const {
      Bytes least = std::numeric_limits<Bytes>::max();
      for (const MemSnapshot& s : r.memory[0].timeline) {
        if (s.time >= from && s.time < to) least = std::min(least, s.bytes[static_cast<int>(MemCategory::kParameters)]);
      }
      return least;
    }
  };
  const auto lowered = [&](const std::string& wrap) {
    ResolvedPlan plan = resolve(parse_plan("dp: 2\nprecision: fp16\nfsdp: full_shard\nfsdp_wrap: " + wrap + "\n", "test.yaml"), m,
                                round_cluster());
    const test::FixedCompute compute(1'000'000);
    partition(plan, m, round_cluster(), compute, comm);
    ExecOptions o;
    o.record_memory_timeline = true;
    Lowered l;
    l.g = lower(m, plan, round_cluster(), CostModels{&compute, &comm});
    l.r = execute(l.g, o);
    return l;
  };
  {
    // blocks (the default): one gather of the root's 80 MB before the
    // forward, and none of the embedding's or the head's own; one
    // reduce-scatter of the root's 80 MB of fp16 gradients, after the
    // embedding's backward.
    const Lowered b = lowered("blocks");
    const std::map<std::string, Bytes> gathers = b.collectives(CollectiveOp::kAllGather);
    const Bytes layer = 20'000'000 * 2;
    const std::map<std::string, Bytes> want_gathers{{"all_gather fwd root", root}, {"all_gather fwd L0", layer}, {"all_gather fwd L1", layer},
                                                    {"all_gather fwd L2", layer},  {"all_gather fwd L3", layer}, {"all_gather bwd L0", layer},
                                                    {"all_gather bwd L1", layer},  {"all_gather bwd L2", layer}, {"all_gather bwd L3", layer}};
    CHECK(gathers == want_gathers);
    const std::map<std::string, Bytes> reductions = b.collectives(CollectiveOp::kReduceScatter);
    CHECK(reductions.size() == 5);
    CHECK(reductions.at("reduce_scatter root") == root);
    CHECK(b.span("reduce_scatter root [mb 0]").start >= b.span("bwd embed [mb 0]").end);
    // Whole from its gather to the end of the last backward: never fewer
    // parameters than every rank's shard and the root.
    const TimeNs from = b.span("all_gather fwd root [mb 0]").end, to = b.span("bwd embed [mb 0]").end;
    CHECK(b.least_params(from, to) >= shard + root);
  }
  {
    // layers: the embedding and the head are units of their own, gathered
    // before each of their passes and freed after it.
    const Lowered l = lowered("layers");
    const std::map<std::string, Bytes> gathers = l.collectives(CollectiveOp::kAllGather);
    CHECK(gathers.count("all_gather fwd root") == 0);
    CHECK(gathers.at("all_gather fwd embed") == 30'000'000 * 2);
    CHECK(gathers.at("all_gather bwd embed") == 30'000'000 * 2);
    CHECK(gathers.at("all_gather fwd head") == 10'000'000 * 2);
    CHECK(l.collectives(CollectiveOp::kReduceScatter).size() == 6);
    // While L1 computes its forward the embedding is freed and the head not
    // yet gathered: at most L1 and the prefetched L2 beside the shard.
    const Span& f1 = l.span("fwd L1 [mb 0]");
    CHECK(l.least_params(f1.start, f1.end) <= shard + 2 * 20'000'000 * 2);
  }
  {
    // torchtitan: the same units, but the last ([norm, output], the head)
    // is not resharded after its forward: gathered once, before its
    // forward, whole until its backward ends, then reduce-scattered; every
    // other unit as under layers.
    const Lowered t = lowered("torchtitan");
    const std::map<std::string, Bytes> gathers = t.collectives(CollectiveOp::kAllGather);
    const Bytes head = 10'000'000 * 2;
    CHECK(gathers.at("all_gather fwd head") == head);
    CHECK(gathers.count("all_gather bwd head") == 0);
    CHECK(gathers.at("all_gather bwd embed") == 30'000'000 * 2);
    CHECK(gathers.at("all_gather bwd L3") == 20'000'000 * 2);
    CHECK(gathers.size() == 11);  // 6 forward, 5 backward (layers: 12)
    CHECK(t.collectives(CollectiveOp::kReduceScatter).size() == 6);
    // From the end of its forward to the end of its backward the head is
    // whole beside the shard.
    const TimeNs from = t.span("fwd head [mb 0]").end, to = t.span("bwd head [mb 0]").end;
    CHECK(t.least_params(from, to) >= shard + head);
    const Lowered l = lowered("layers");
    CHECK(l.collectives(CollectiveOp::kAllGather).size() == 12);
    CHECK(l.collectives(CollectiveOp::kAllGather).at("all_gather bwd head") == head);
  }
}

TEST_CASE("the simulated ranks slow their compute beside collectives by the device's comm_slowdown (Note [Interference])",
          "[lowering][interference]") {
  // ZeRO-3 on one DGX A100 gathers every layer beside the one computing.
  // A100's prior for the SMs is 24 / 84 (Note [Interference prior]); for
  // the HBM, the NVLink collectives' 3 bytes of HBM a link byte at
  // 300 GB/s x 0.783 over 2,039 GB/s x 0.80 (h = 0.432, h / (1 - h) =
  // 0.761), and 8 HDR NICs' 25 x 0.96 x 8 GB/s across nodes (h = 0.353).
  const double sm = 24.0 / 84;
  const double h_intra = 3 * 300e9 * 0.783 / (2039e9 * 0.80), h_inter = 3 * 25e9 * 0.96 * 8 / (2039e9 * 0.80);
  const double s_intra = h_intra / (1 - h_intra);
  const auto gpt = models::load_model("gpt2-medium");
  PredictOptions o;
  o.keep_graph = true;
  const Prediction with = predict(*gpt, load_plan("zero3"), load_cluster("dgx-a100"), o);
  REQUIRE(!with.graph.ranks.empty());
  const SimRank& rank = with.graph.ranks[0];
  CHECK(rank.comm_slowdown == Approx(sm));
  CHECK(rank.hbm_slowdown[static_cast<int>(LinkClass::kIntraNode)] == Approx(s_intra));
  CHECK(rank.hbm_slowdown[static_cast<int>(LinkClass::kInterNode)] == Approx(h_inter / (1 - h_inter)));
  CHECK(rank.hbm_slowdown[static_cast<int>(LinkClass::kHostDevice)] == 0);  // copy engines
  const Prediction without = predict(*gpt, load_plan("zero3"),
                                     load_cluster("dgx-a100", {parse_override("cluster.device={base: A100-SXM4-80GB, comm_slowdown: 0}")}), o);
  CHECK(without.graph.ranks[0].comm_slowdown == 0);
  CHECK(without.graph.ranks[0].hbm_slowdown[0] == 0);  // one switch for both
  CHECK(with.iteration_time > without.iteration_time);
  CHECK(static_cast<double>(with.iteration_time) <= static_cast<double>(without.iteration_time) * (1 + std::max(sm, s_intra)));
  // A layer's passes carry their memory-bound kernels' share (GPT-2's
  // LayerNorms, GeLU, softmax, dropout and residual adds beside its GEMMs:
  // some, not all), the optimizer step all of it.
  bool layer_share = false;
  for (const Task& t : with.graph.tasks) {
    if (t.phase == Phase::kForward && t.kind == TaskKind::kCompute && t.duration > 0 && t.memory_share > 0 && t.memory_share < 1) layer_share = true;
    if (t.phase == Phase::kOptimizer) CHECK(t.memory_share == 1);
  }
  CHECK(layer_share);
  // Each slowed kernel says by how much, in its span and in the trace: at
  // most 1 - 1 / (1 + s) of its time, s = (1 - m) x 24 / 84 + m x 0.761 for
  // its memory share m (the gathers run over NVLink only).
  int slowed = 0;
  for (const Span& s : with.exec.spans) {
    if (s.slowed == 0) continue;
    ++slowed;
    const Task& t = with.graph.tasks[static_cast<std::size_t>(s.task)];
    CHECK(t.kind == TaskKind::kCompute);
    const double most = (1 - t.memory_share) * sm + t.memory_share * s_intra;
    CHECK(static_cast<double>(s.slowed) <= static_cast<double>(s.end - s.start) * (1 - 1 / (1 + most)) + 1);
  }
  CHECK(slowed > 0);
  CHECK(to_chrome_trace(with).find("\"slowed_by_collectives\"") != std::string::npos);
  for (const Span& s : without.exec.spans) CHECK(s.slowed == 0);
  // CPU ranks: Gloo's collectives take the cores instead (Note [CPU collectives]).
  const Prediction cpu = predict(*gpt, load_plan("zero3"), load_cluster("local-cpu"), o);
  CHECK(cpu.graph.ranks[0].comm_slowdown == 0);
  CHECK(cpu.graph.ranks[0].hbm_slowdown[0] == 0);
}

TEST_CASE("DeepSpeed's ZeRO-1/2 step holds the shard's gradients in fp32 (Note [fp32 gradient partition])", "[lowering][zero]") {
  // 8 layers of 1e6 parameters over 8 ranks: a shard of 1e6. In fp16,
  // while the step runs a rank holds its shard's 16-bit gradients (2 B) and
  // their fp32 copy (4 B): 6e6 B of gradients; under ZeRO-1 the rest of the
  // full gradients went as the step began. In fp32 the cast is a no-op: the
  // shard's 4e6 B. The estimate's 2 + 18/N bytes a parameter (DeepSpeed's
  // estimate_zero2_model_states_mem_needs) is this step: 2 (fp16 weights)
  // + (2 grads16 + 4 grads32 + 12 Adam) / N.
  const test::FakeModel m(8, 1'000'000, 1000);
  const test::FreeComm comm;
  const test::FixedCompute compute(1'000'000);
  auto grads_in_step = [&](const std::string& yaml) {
    ResolvedPlan plan = resolve(parse_plan(yaml, "t.yaml"), m, test::round_cluster(1, 8));
    partition(plan, m, test::round_cluster(1, 8), compute, comm);
    const TaskGraph g = lower(m, plan, test::round_cluster(1, 8), CostModels{&compute, &comm});
    ExecOptions o;
    o.record_memory_timeline = true;
    const ExecResult r = execute(g, o);
    TaskId step = -1;
    for (std::size_t i = 0; i < g.tasks.size(); ++i) {
      if (g.tasks[i].name == "optimizer step") step = static_cast<TaskId>(i);
    }
    REQUIRE(step >= 0);
    Bytes most = 0;
    for (const MemSnapshot& s : r.memory[0].timeline) {
      if (s.time >= r.spans[step].start && s.time < r.spans[step].end) {
        most = std::max(most, s.bytes[static_cast<int>(MemCategory::kGradients)]);
      }
    }
    return most;
  };
  CHECK(grads_in_step("zero_stage: 2\nprecision: fp16\nmicro_batch: 1\n") == 6'000'000);
  CHECK(grads_in_step("zero_stage: 1\nprecision: fp16\nmicro_batch: 1\n") == 6'000'000);
  CHECK(grads_in_step("zero_stage: 2\nprecision: fp32\nmicro_batch: 1\n") == 4'000'000);
}

// Note [Layers in a data-parallel step] (sim/src/cost/cost_profile.cpp): a
// rank whose gradients are reduced over a group of more than one (dp, or
// cp, which reduces over dp x cp) is shaped so, and priced from the steps
// that all-reduced where its ranks are CPU cores; dp 1 reduces nothing,
// with or without a pipeline.
TEST_CASE("a rank whose gradients are reduced over a data-parallel group is shaped so (Note [Layers in a data-parallel step])",
          "[lowering]") {
  const test::FakeModel m(4, 1'000'000, 10);
  const ClusterSpec c = round_cluster(1, 4);
  const auto shaped = [&](const std::string& yaml) {
    return detail::workload_shape(resolve(parse_plan(yaml, "p.yaml"), m, c), c.device).dp_step;
  };
  CHECK_FALSE(shaped("dp: 1\n"));
  CHECK(shaped("dp: 2\n"));
  CHECK(shaped("dp: 4\nzero_stage: 3\n"));
  CHECK_FALSE(shaped("pp: 2\ndp: 1\nmicro_batches: 4\n"));
  CHECK(shaped("pp: 2\nmicro_batches: 4\n"));  // the other two GPUs: dp 2
}

TEST_CASE("sequence parallelism sums its norms' gradients over tp once a step, after the reductions (Note [Sequence-parallel gradients])",
          "[lowering][tp][sp]") {
  // gpt2 (h 768, 12 blocks): a block's two LayerNorms and two row-parallel
  // biases, 6 h, and ln_f, 2 h: 12 x 4,608 + 1,536 = 56,832 elements, in
  // 16-bit gradients 113,664 bytes over the tp group.
  const auto gpt2 = models::load_model("gpt2");
  const auto sp_tasks = [&](const std::string& yaml) {
    const Run r = run(*gpt2, yaml, round_cluster(1, 8), 1000);
    std::vector<TaskId> out;
    for (std::size_t i = 0; i < r.graph.tasks.size(); ++i) {
      if (r.graph.tasks[i].name == "all_reduce sequence-parallel grads") out.push_back(static_cast<TaskId>(i));
    }
    return std::make_pair(r, out);
  };
  const auto [one, ids] = sp_tasks("tp: 2\nsequence_parallel: true\nprecision: fp16\nmicro_batch: 1\n");
  REQUIRE(ids.size() == 1);
  const Task& t = one.graph.tasks[ids[0]];
  CHECK(t.bytes == 113'664);
  CHECK(t.op == CollectiveOp::kAllReduce);
  CHECK(t.axis == std::optional<Axis>(Axis::kTp));
  // After every data-parallel reduction, before the step.
  for (std::size_t i = 0; i < one.graph.tasks.size(); ++i) {
    const Task& u = one.graph.tasks[i];
    if (u.kind == TaskKind::kCollective && u.axis == std::optional<Axis>(Axis::kDp)) {
      CHECK(one.exec.spans[i].end <= one.exec.spans[ids[0]].start);
    }
    if (u.phase == Phase::kOptimizer) CHECK(one.exec.spans[i].start >= one.exec.spans[ids[0]].end);
  }
  // Two stages each sum their own; Megatron's fp32 main gradients, 4 bytes an element.
  const auto [two, stage_ids] =
      sp_tasks("tp: 2\npp: 2\nschedule: 1f1b\nmicro_batches: 4\nsequence_parallel: true\nprecision: fp16\naccumulate_allreduce_grads_in_fp32: true\n");
  REQUIRE(stage_ids.size() == 2);
  CHECK(two.graph.tasks[stage_ids[0]].bytes + two.graph.tasks[stage_ids[1]].bytes == 56'832 * 4);
  // None without sequence parallelism.
  CHECK(sp_tasks("tp: 2\nprecision: fp16\nmicro_batch: 1\n").second.empty());
}

TEST_CASE("where collectives take the ranks' cores, a sequence-parallel backward pays its re-gathers (Note [Sequence-parallel re-gather])",
          "[lowering][tp][sp]") {
  // gpt2-tiny (h 128), 4 x 128 tokens in fp32: each of a block's all-gathers
  // and reduce-scatters moves 4 x 512 x 128 = 262,144 bytes. Backward, two
  // of each (tp_pairs); on a CPU (Gloo) also the two column-parallel inputs
  // gathered again, which a GPU hides behind the input-gradient GEMM.
  const auto m = models::load_model("gpt2-tiny");
  const std::string plan = "tp: 2\nsequence_parallel: true\nprecision: fp32\nmicro_batch: 4\nseq_len: 128\n";
  const auto block_backward = [&](const ClusterSpec& c) {
    const Run r = run(*m, plan, c, 1000);
    for (const Task& t : r.graph.tasks) {
      if (t.name.rfind("tp bwd h.0", 0) == 0) return t.bytes;
    }
    return Bytes{-1};
  };
  CHECK(block_backward(load_cluster("local-cpu")) == 6 * 262'144);
  CHECK(block_backward(round_cluster(1, 2)) == 4 * 262'144);
}
