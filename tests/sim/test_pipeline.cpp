// Pipeline, tensor-parallel and recompute lowering against the formulas of
// the papers that define them.
#include <catch2/catch.hpp>

#include <algorithm>

#include "dtsim/models/models.hpp"
#include "dtsim/sim/config_io.hpp"
#include "dtsim/sim/error.hpp"
#include "dtsim/sim/executor.hpp"
#include "dtsim/sim/lowering.hpp"
#include "dtsim/sim/partition.hpp"
#include "dtsim/sim/predict.hpp"
#include "dtsim/sim/report.hpp"
#include "fake_model.hpp"

using namespace dtsim;
using namespace dtsim::sim;

namespace {

using test::round_cluster;

using test::FreeComm;

using Run = test::PlanRun;
constexpr auto run = &test::run_plan;

std::string error_of(const std::function<void()>& f) {
  try {
    f();
  } catch (const Error& e) {
    return e.what();
  }
  return "";
}

// 8 identical layers, 1 GFLOP forward (1 ms at 1e6 ns/GFLOP) and 2 GFLOP
// backward per micro-batch of one sequence; 1 parameter each so the
// optimizer step is ~1 ns; 1000 activation bytes per layer and sequence.
const test::FakeModel kEight(8, 1, 1000);
constexpr TimeNs kMs = 1'000'000;

/// A GPT of `layers` blocks of h 1024, 16 heads, f 4096, 512 tokens.
ModelPtr gpt_1024(int layers) {
  models::GptConfig cfg;
  cfg.layers = layers;
  cfg.hidden = 1024;
  cfg.heads = 16;
  cfg.ffn_hidden = 4096;
  cfg.seq_len = 512;
  return models::make_gpt(cfg);
}

}  // namespace

TEST_CASE("GPipe: the bubble is (p-1)/(m+p-1) of the iteration with uniform stages and free communication", "[pipeline]") {
  // Narayanan et al. 2021 section 2.2.1: t = (m + p - 1)(tf + tb) per
  // stage's tf, tb. p = 4 stages of 2 layers: tf = 2 ms, tb = 4 ms; m = 8.
  const FreeComm comm;
  const Run r = run(kEight, "pp: 4\nschedule: gpipe\nmicro_batches: 8\nmicro_batch: 1\n", round_cluster(1, 4), comm, kMs);
  CHECK(r.graph.stage_layers == std::vector<int>{2, 2, 2, 2});
  const TimeNs pipeline = (8 + 4 - 1) * 6 * kMs;  // 66 ms
  CHECK(r.exec.makespan >= pipeline);
  CHECK(r.exec.makespan <= pipeline + 100);  // + the 1-parameter optimizer step (ns)
}

TEST_CASE("pipeline breakdown: the simulated bubble is (p-1)(tf + tb) for GPipe and 1F1B", "[pipeline]") {
  // Busiest stage: compute m(tf + tb) = 48 ms, bubble (p-1)(tf + tb) = 18 ms,
  // i.e. 3/11 of the 66 ms (the optimizer's nanoseconds aside).
  const FreeComm comm;
  for (const char* schedule : {"gpipe", "1f1b"}) {
    INFO(schedule);
    const Run r = run(kEight, std::string("pp: 4\nschedule: ") + schedule + "\nmicro_batches: 8\nmicro_batch: 1\n",
                      round_cluster(1, 4), comm, kMs);
    const TimeBreakdown b = stage_breakdown(r.graph, r.exec);
    CHECK(b.compute == 48 * kMs);
    CHECK(b.bubble / 1000 == 18 * kMs / 1000);
    CHECK(b.compute + b.bubble + b.optimizer + b.exposed_comm + b.offload + b.other == r.exec.makespan);
  }
}

TEST_CASE("1F1B takes as long as GPipe but keeps at most p - s micro-batches of activations", "[pipeline]") {
  const FreeComm comm;
  const std::string base = "pp: 4\nmicro_batches: 8\nmicro_batch: 1\nschedule: ";
  const Run gpipe = run(kEight, base + "gpipe\n", round_cluster(1, 4), comm, kMs);
  const Run ofob = run(kEight, base + "1f1b\n", round_cluster(1, 4), comm, kMs);
  CHECK(ofob.exec.makespan == gpipe.exec.makespan);
  // A stage of 2 layers keeps 2 x 1000 B per micro-batch in flight. GPipe:
  // all 8 on every stage; 1F1B: p - s on stage s (4, 3, 2, 1).
  for (int s = 0; s < 4; ++s) {
    INFO("stage " << s);
    CHECK(gpipe.peak_activations(s) == 8 * 2000);
    CHECK(ofob.peak_activations(s) == (4 - s) * 2000);
  }
}

TEST_CASE("interleaving v chunks per stage divides the bubble by v", "[pipeline]") {
  // Narayanan et al. 2021 section 2.2.2: bubble (p-1)(tf + tb)/v. Stages of
  // 2 layers split into v = 2 chunks of one: t = m(tf + tb) + (p-1)(tf + tb)/2
  // = 48 + 9 = 57 ms.
  const FreeComm comm;
  const Run r = run(kEight, "pp: 4\nschedule: interleaved\nvirtual_stages: 2\nmicro_batches: 8\nmicro_batch: 1\n",
                    round_cluster(1, 4), comm, kMs);
  CHECK(r.graph.stage_layers == std::vector<int>{1, 1, 1, 1, 1, 1, 1, 1});
  CHECK(stage_breakdown(r.graph, r.exec).bubble / 1000 == 9 * kMs / 1000);
  CHECK(r.exec.makespan / 1000 == 57 * kMs / 1000);
}

TEST_CASE("interleaving raises the first stage's activations by 1 + (p-1)/(pv) (Korthikanti et al. 2022)", "[pipeline]") {
  // Section 4.2.3: with 1F1B the first stage keeps p micro-batches of its L/p
  // layers; interleaving over v chunks multiplies that by 1 + (p-1)/(p v).
  // p = 4, v = 2, 8 layers of 1000 B per micro-batch: 1F1B 4 x 2 x 1000 =
  // 8000 B, interleaved 8000 x (1 + 3/8) = 11000 B.
  const FreeComm comm;
  const std::string base = "pp: 4\nmicro_batches: 8\nmicro_batch: 1\n";
  const Run ofob = run(kEight, base + "schedule: 1f1b\n", round_cluster(1, 4), comm, kMs);
  const Run inter = run(kEight, base + "schedule: interleaved\nvirtual_stages: 2\n", round_cluster(1, 4), comm, kMs);
  CHECK(ofob.peak_activations(0) == 8000);
  CHECK(inter.peak_activations(0) == 11000);
}

TEST_CASE("a pipeline's data-parallel all-reduce overlaps the last backward but its last bucket", "[pipeline]") {
  // 8 layers of 10M fp32 parameters: 40 MB of gradients each, over the 25 MB
  // bucket, so a bucket per layer; its all-reduce over 2 ranks in a node
  // (0.4 ms at 100 GB/s) hides behind the next layer's 2 ms backward. Only
  // the last bucket of stage 0 (the last to finish in 1F1B) is exposed: the
  // iteration is that of dp = 1 plus one bucket's all-reduce.
  const test::FakeModel m(8, 10'000'000, 1000);
  const ClusterSpec c = round_cluster(1, 4);
  const AnalyticCommModel comm(c);
  const std::string base = "pp: 2\nmicro_batches: 4\nmicro_batch: 1\nprecision: fp32\nschedule: 1f1b\n";
  const Run one = run(m, base + "dp: 1\n", c, comm, kMs);
  const Run two = run(m, base + "dp: 2\n", c, comm, kMs);
  CommGroup g;
  g.ranks = 2;
  g.ranks_per_node = 2;
  g.groups_per_node = 2;
  const TimeNs bucket = comm.collective(CollectiveOp::kAllReduce, 40'000'000, g).total();
  CHECK(two.exec.makespan == one.exec.makespan + bucket);
}

TEST_CASE("FSDP under a pipeline: a stage's parameters gathered once a step, its gradients accumulated in fp32 and "
          "reduce-scattered after its last backward (Note [FSDP under a pipeline])", "[pipeline][fsdp]") {
  // 4 layers of 1000 parameters and 10,000 B kept a micro-batch, 2 stages of
  // 2, dp 2, 2 micro-batches, fp16 with fp32 reduction, Adam. Stage 0
  // (1F1B: F0 F1 B0 B1) peaks as B0 starts:
  //   parameters: its shard, 1000 x 2 B, + the gathered stage, 2000 x 2 B = 6000
  //   gradients:  the shard, 1000 x 2 B, + the deeper layer's accumulated
  //               gradients, 1000 x 4 B (the first layer's come as B0 ends) = 6000
  //   optimizer:  the shard's fp32 master, m and v, 1000 x 12 B = 12,000
  //   activations: two micro-batches of two layers, 2 x 20,000 = 40,000.
  // Stage 1 (F0 B0 F1 B1) holds one micro-batch at a time and peaks as B1
  // starts, every accumulated gradient there: 6000 + (2000 + 8000) + 12,000
  // + 20,000.
  const test::FakeModel m(4, 1000, 10'000);
  const FreeComm free;
  const std::string plan = "pp: 2\ndp: 2\nmicro_batches: 2\nmicro_batch: 1\nprecision: fp16\noptimizer: adam\nschedule: 1f1b\n"
                           "fsdp: full_shard\nreduce_dtype: fp32\n";
  const Run r = run(m, plan, round_cluster(1, 4), free, kMs);
  auto at_peak = [&](int rank, MemCategory c) { return r.exec.memory[rank].at_peak.bytes[static_cast<int>(c)]; };
  CHECK(at_peak(0, MemCategory::kParameters) == 6000);
  CHECK(at_peak(0, MemCategory::kGradients) == 6000);
  CHECK(at_peak(0, MemCategory::kOptimizer) == 12'000);
  CHECK(at_peak(0, MemCategory::kActivations) == 40'000);
  CHECK(r.exec.memory[0].at_peak.total() == 64'000);
  CHECK(at_peak(1, MemCategory::kActivations) == 20'000);
  CHECK(at_peak(1, MemCategory::kGradients) == 10'000);
  CHECK(r.exec.memory[1].at_peak.total() == 6000 + 10'000 + 12'000 + 20'000);

  // Time: 8 layers of 10M parameters (4 a stage), over a node's links. Each
  // stage gathers its 40M fp16 parameters (80 MB) before its first forward
  // and, after its last backward, reduce-scatters their 160 MB of fp32
  // gradients; its step waits for that. One gather and one reduction a stage.
  const test::FakeModel big(8, 10'000'000, 1000);
  const ClusterSpec c = round_cluster(1, 4);
  const AnalyticCommModel comm(c);
  const Run t = run(big, "pp: 2\ndp: 2\nmicro_batches: 4\nmicro_batch: 1\nprecision: fp16\nschedule: 1f1b\nfsdp: full_shard\n"
                         "reduce_dtype: fp32\n",
                    c, comm, kMs);
  CommGroup g;
  g.ranks = 2;
  g.ranks_per_node = 2;
  g.groups_per_node = 2;
  const TimeNs gather = comm.collective(CollectiveOp::kAllGather, 80'000'000, g).total();
  const TimeNs reduce = comm.collective(CollectiveOp::kReduceScatter, 160'000'000, g).total();
  for (int s = 0; s < 2; ++s) {
    std::vector<TaskId> gathers, reduces, computes;
    TaskId step = -1;
    for (std::size_t i = 0; i < t.graph.tasks.size(); ++i) {
      const Task& k = t.graph.tasks[i];
      if (k.rank != s) continue;
      if (k.kind == TaskKind::kCollective && k.op == CollectiveOp::kAllGather) gathers.push_back(static_cast<TaskId>(i));
      if (k.kind == TaskKind::kCollective && k.op == CollectiveOp::kReduceScatter) reduces.push_back(static_cast<TaskId>(i));
      if (k.phase == Phase::kForward || k.phase == Phase::kBackward) computes.push_back(static_cast<TaskId>(i));
      if (k.phase == Phase::kOptimizer) step = static_cast<TaskId>(i);
    }
    REQUIRE(gathers.size() == 1);
    REQUIRE(reduces.size() == 1);
    REQUIRE(step >= 0);
    const Span& ag = t.exec.spans[gathers[0]];
    const Span& rs = t.exec.spans[reduces[0]];
    CHECK(t.graph.tasks[gathers[0]].bytes == 80'000'000);
    CHECK(t.graph.tasks[reduces[0]].bytes == 160'000'000);
    CHECK(ag.start == 0);
    CHECK(ag.end - ag.start == gather);
    // The stage's first forward waits for the gather; its reduction starts as its last backward ends.
    CHECK(t.exec.spans[computes.front()].start >= ag.end);
    if (s == 0) CHECK(t.exec.spans[computes.front()].start == ag.end);
    CHECK(rs.start == t.exec.spans[computes.back()].end);
    CHECK(rs.end - rs.start == reduce);
    CHECK(t.exec.spans[step].start == rs.end);
  }
}

TEST_CASE("naive model parallelism: one stage busy at a time", "[pipeline]") {
  // 2 stages of 4 layers, 2 micro-steps run one after the other:
  // 2 x (4 + 4 + 8 + 8) ms.
  const FreeComm comm;
  const Run r = run(kEight, "model_parallel: 2\ngrad_accum: 2\nmicro_batch: 1\n", round_cluster(1, 2), comm, kMs);
  CHECK(r.plan.pp == 2);
  CHECK(r.plan.schedule == Schedule::kNaive);
  CHECK(r.exec.makespan / 1000 == 48 * kMs / 1000);
}

TEST_CASE("pipeline_order: 1F1B warm-up and Megatron's interleaved order", "[pipeline]") {
  using S = PipeStep;
  // Stage 0 of 3, 4 micro-batches: 2 warm-up forwards, then F B pairs, then the rest.
  CHECK(pipeline_order(Schedule::k1f1b, 3, 1, 0, 4) ==
        std::vector<S>{{true, 0, 0}, {true, 0, 1}, {true, 0, 2}, {false, 0, 0}, {true, 0, 3}, {false, 0, 1},
                       {false, 0, 2}, {false, 0, 3}});
  // The last stage alternates from the start.
  CHECK(pipeline_order(Schedule::k1f1b, 3, 1, 2, 2) == std::vector<S>{{true, 0, 0}, {false, 0, 0}, {true, 0, 1}, {false, 0, 1}});
  // Interleaved, p = 2, v = 2, m = 4, stage 1: warm-up (p-s-1)*2 + (v-1)*p = 2
  // forwards (chunk 0 of micro-batches 0 and 1), then chunk 1 of 0 with the
  // first backward (chunk 1 of micro-batch 0).
  const auto order = pipeline_order(Schedule::kInterleaved, 2, 2, 1, 4);
  REQUIRE(order.size() == 16);
  CHECK(order[0] == S{true, 0, 0});
  CHECK(order[1] == S{true, 0, 1});
  CHECK(order[2] == S{true, 1, 0});
  CHECK(order[3] == S{false, 1, 0});
}

TEST_CASE("balance_layers: minimise the costliest stage", "[pipeline]") {
  CHECK(balance_layers({1, 1, 1, 1}, 2) == std::vector<int>{2, 2});
  CHECK(balance_layers({3, 1, 1, 1}, 2) == std::vector<int>{1, 3});
  CHECK(balance_layers({1, 1, 1, 5}, 2) == std::vector<int>{3, 1});
  CHECK(balance_layers({5, 5, 5}, 3) == std::vector<int>{1, 1, 1});
}

TEST_CASE("tensor parallelism moves 8bsh(t-1)/t elements per layer and micro-batch (Narayanan et al. 2021)", "[tp]") {
  // Section 3.2: two all-reduces of b x s x h in forward and two in backward;
  // a ring all-reduce pushes 2(t-1)/t of the buffer through each rank, so
  // 4 x 2(t-1)/t x bsh = 8bsh(t-1)/t elements, x 2 bytes in fp16.
  const auto gpt = models::load_model("gpt2");  // h = 768, 12 heads
  const ClusterSpec c = round_cluster(1, 4);
  const AnalyticCommModel comm(c);
  for (int t : {2, 4}) {
    INFO("tp " << t);
    const std::string yaml = "tp: " + std::to_string(t) + "\ndp: 1\nmicro_batch: 2\nseq_len: 128\nprecision: fp16\n";
    ResolvedPlan plan = resolve(parse_plan(yaml, "t.yaml"), *gpt, c);
    const RooflineComputeModel compute(c.device);
    partition(plan, *gpt, c, compute, comm);
    const TaskGraph g = lower(*gpt, plan, c, CostModels{&compute, &comm});
    double wire = 0;
    for (const Task& task : g.tasks) {
      if (task.name == "tp fwd h.3 [mb 0]" || task.name == "tp bwd h.3 [mb 0]") wire += task.cost.wire_bytes;
    }
    const double b = 2, s = 128, h = 768;
    CHECK(wire == Approx(8 * b * s * h * (t - 1) / t * 2));
  }
}

TEST_CASE("activation memory per layer follows Korthikanti et al. 2022, Table 2", "[tp][recompute]") {
  // fp16, dropout, f = 4h: bytes per layer
  //   tp:                 sbh (10 + 24/t + 5as/(ht))
  //   tp + sp:            sbh/t (34 + 5as/h)
  //   tp + selective:     sbh (10 + 24/t)
  //   tp + sp + selective sbh 34/t
  //   full recompute:     2sbh (the layer's input), 2sbh/t with sp
  const auto m = gpt_1024(2);
  const double s = 512, b = 2, h = 1024, a = 16;
  for (int t : {1, 2, 4, 8}) {
    INFO("tp " << t);
    for (bool sp : {false, true}) {
      if (sp && t == 1) continue;
      INFO("sp " << sp);
      WorkloadShape shape;
      shape.micro_batch = 2;
      shape.seq_len = 512;
      shape.act_bytes = 2;
      shape.tp = t;
      shape.sequence_parallel = sp;
      const auto layers = m->layers(shape);
      const Layer& l = layers[1];
      REQUIRE(l.kind == sim::LayerKind::kTransformer);
      const double sbh = s * b * h;
      const double none = sp ? sbh / t * (34 + 5 * a * s / h) : sbh * (10 + 24.0 / t + 5 * a * s / (h * t));
      const double selective = sp ? sbh * 34 / t : sbh * (10 + 24.0 / t);
      CHECK(static_cast<double>(l.saved_bytes) == Approx(none));
      CHECK(static_cast<double>(l.saved_bytes - l.attention_core_bytes) == Approx(selective));
      // Full recompute keeps the input: the previous layer's output.
      CHECK(static_cast<double>(layers[0].output_bytes) == Approx(sp ? 2 * sbh / t : 2 * sbh));
    }
  }
}

TEST_CASE("tensor-parallel shards own (4h^2 + 2hf + 3h + f)/t + 6h parameters per layer", "[tp]") {
  const auto gpt = models::load_model("gpt2-medium");  // h 1024, f 4096
  WorkloadShape shape;
  shape.tp = 4;
  const auto layers = gpt->layers(shape);
  const std::int64_t h = 1024, f = 4096;
  CHECK(layers[1].params == (4 * h * h + 2 * h * f + 3 * h + f) / 4 + 6 * h);
}

TEST_CASE("selective and full recompute through the pipeline: memory down, time up", "[recompute]") {
  const auto gpt = models::load_model("gpt2-medium");
  const ClusterSpec c = round_cluster(1, 2);
  // Eager attention: selective recompute drops its scores (a fused kernel
  // keeps none to drop).
  const std::string base = "pp: 2\nmicro_batches: 4\nmicro_batch: 2\nseq_len: 512\nprecision: fp16\nattention: eager\nrecompute: ";
  auto pred = [&](const char* r) { return predict(*gpt, parse_plan(base + r + "\n", "t.yaml"), c); };
  const Prediction none = pred("none"), sel = pred("selective"), full = pred("full");
  CHECK(sel.ranks[0].activations < none.ranks[0].activations);
  CHECK(full.ranks[0].activations < sel.ranks[0].activations);
  CHECK(none.iteration_time < sel.iteration_time);
  CHECK(sel.iteration_time < full.iteration_time);
}

TEST_CASE("full recompute keeps 2sbh a layer per micro-batch in flight, and the stage's output unless freed once sent",
          "[pipeline][recompute][memory]") {
  // Korthikanti et al. 2022, Table 2: full recompute keeps each layer's
  // input, 2sbh bytes in fp16. Under 1F1B stage s holds pp - s micro-batches
  // (Narayanan et al. 2021), so two middle stages of 2 blocks each differ by
  // one micro-batch: 2 x 2sbh of checkpoints, plus the stage's output (2sbh,
  // autograd's root) where it is kept until the backward; Megatron-LM frees
  // it once sent (Note [Deallocated outputs]). Everything else at the two
  // peaks is the same: parameters, gradients, optimizer states, the one
  // layer rebuilt, the gradient received, the last two send buffers.
  const auto m = gpt_1024(8);
  const Bytes sbh2 = 2 * 512 * 2 * 1024;  // 2sbh: s 512, b 2, h 1024, fp16
  // The embedding and 2 blocks, 2 + 2 blocks, 2 blocks and the head.
  const std::string base = "pp: 4\nstage_layers: [3, 2, 2, 3]\nmicro_batches: 8\nmicro_batch: 2\nseq_len: 512\n"
                           "precision: fp16\nattention: flash\nrecompute: full\n";
  const FreeComm comm;
  for (const bool freed : {false, true}) {
    INFO("deallocate_pipeline_outputs " << freed);
    const Run r = run(*m, base + "deallocate_pipeline_outputs: " + (freed ? "true" : "false") + "\n", round_cluster(1, 4),
                      comm, kMs);
    REQUIRE(r.graph.stage_layers == std::vector<int>{3, 2, 2, 3});
    const Bytes per_micro = 2 * sbh2 + (freed ? 0 : sbh2);
    CHECK(r.peak_activations(1) - r.peak_activations(2) == per_micro);
    CHECK(r.exec.memory[1].at_peak.total() - r.exec.memory[2].at_peak.total() == per_micro);
  }
}

TEST_CASE("Megatron's block recompute reruns the first N blocks of each model chunk (Note [Block recompute])",
          "[recompute][memory]") {
  // kEight: 8 blocks, 1 ms forward and 2 ms backward each, 1000 B saved a
  // sequence, no output bytes (so a checkpoint is 0 B). One micro-batch
  // of one sequence: no recompute 8 + 16 = 24 ms with all 8,000 B held at
  // the forward's end; full recompute reruns 8 forwards (32 ms) and holds
  // one block rebuilt (1,000 B); block 3 reruns blocks 0-2 (27 ms) and
  // keeps blocks 3-7 whole (5,000 B).
  const FreeComm comm;
  const ClusterSpec one = round_cluster(1, 1);
  const std::string base = "micro_batch: 1\noptimizer: sgd\nsgd_momentum: 0\n";
  const Run none = run(kEight, base, one, comm, kMs);
  const Run full = run(kEight, base + "recompute: full\n", one, comm, kMs);
  const Run block = run(kEight, base + "recompute: full\nrecompute_method: block\nrecompute_num_layers: 3\n", one, comm, kMs);
  CHECK(block.plan.recompute_blocks == 3);
  CHECK(static_cast<double>(none.exec.makespan) == Approx(24.0 * kMs).epsilon(1e-4));
  CHECK(static_cast<double>(full.exec.makespan) == Approx(32.0 * kMs).epsilon(1e-4));
  CHECK(static_cast<double>(block.exec.makespan) == Approx(27.0 * kMs).epsilon(1e-4));
  CHECK(none.peak_activations(0) == 8000);
  CHECK(full.peak_activations(0) == 1000);
  CHECK(block.peak_activations(0) == 5000);
  // At least as many as the chunk has: every block, as full recompute.
  const Run all = run(kEight, base + "recompute: full\nrecompute_method: block\nrecompute_num_layers: 8\n", one, comm, kMs);
  CHECK(all.exec.makespan == full.exec.makespan);
  CHECK(all.peak_activations(0) == full.peak_activations(0));

  // Megatron's uniform method in groups of 4 (Note [Block recompute]): 8
  // forwards rerun as under full recompute (32 ms), a group rebuilt at once
  // before its last block's backward: 4 x 1,000 B.
  const Run groups = run(kEight, base + "recompute: full\nrecompute_num_layers: 4\n", one, comm, kMs);
  CHECK(groups.plan.recompute_group == 4);
  CHECK(static_cast<double>(groups.exec.makespan) == Approx(32.0 * kMs).epsilon(1e-4));
  CHECK(groups.peak_activations(0) == 4000);
  // Groups of 3 over 8 blocks: 3, 3 and 2.
  const Run threes = run(kEight, base + "recompute: full\nrecompute_num_layers: 3\n", one, comm, kMs);
  CHECK(threes.peak_activations(0) == 3000);

  // The block list is a model chunk (TransformerBlock per virtual stage), so
  // an interleaved rank holding chunks [emb, b0, b1] and [b4, b5] reruns b0
  // and b4 at N 1, as four 1F1B stages of the same split do.
  const auto m = gpt_1024(8);
  const ClusterSpec four = round_cluster(1, 4);
  using R = Recompute;
  const std::vector<R> expected{R::kFull, R::kFull, R::kNone, R::kFull, R::kNone, R::kFull, R::kNone, R::kFull, R::kNone, R::kFull};
  for (const char* shape : {"pp: 4\nstage_layers: [3, 2, 2, 3]\nmicro_batches: 8\n",
                            "pp: 2\nschedule: interleaved\nvirtual_stages: 2\nstage_layers: [3, 2, 2, 3]\nmicro_batches: 8\n"}) {
    INFO(shape);
    const ResolvedPlan r =
        resolve(parse_plan(std::string(shape) + "recompute: full\nrecompute_method: block\nrecompute_num_layers: 1\n", "p.yaml"), *m, four);
    const auto layers = m->layers(WorkloadShape{});
    REQUIRE(layers.size() == expected.size());
    CHECK(layer_recomputes(r, layers) == expected);
  }

  // Through a 1F1B pipeline: two middle stages of 2 blocks each differ by one
  // micro-batch in flight (as in the full-recompute case above). At N 1 a
  // stage keeps its first block's input (2sbh) and its second block whole
  // (its saved bytes, Korthikanti et al. 2022 Table 2's sbh(34 + 5as/h)
  // less the scores flash attention does not keep), and its output (2sbh)
  // until the backward.
  const Bytes sbh2 = 2 * 512 * 2 * 1024;
  WorkloadShape ws;
  ws.micro_batch = 2;
  ws.seq_len = 512;
  ws.act_bytes = 2;
  ws.flash_attention = true;
  const Bytes whole = m->layers(ws)[4].saved_bytes;
  const Run r = run(*m, "pp: 4\nstage_layers: [3, 2, 2, 3]\nmicro_batches: 8\nmicro_batch: 2\nseq_len: 512\nprecision: fp16\n"
                         "attention: flash\nrecompute: full\nrecompute_method: block\nrecompute_num_layers: 1\n",
                    four, comm, kMs);
  CHECK(r.peak_activations(1) - r.peak_activations(2) == sbh2 + whole + sbh2);
  // Uniform groups of 2: each middle stage's two blocks rerun together from
  // the first one's input, so a micro-batch keeps 2sbh there (and the output).
  const Run g = run(*m, "pp: 4\nstage_layers: [3, 2, 2, 3]\nmicro_batches: 8\nmicro_batch: 2\nseq_len: 512\nprecision: fp16\n"
                         "attention: flash\nrecompute: full\nrecompute_num_layers: 2\n",
                    four, comm, kMs);
  CHECK(g.peak_activations(1) - g.peak_activations(2) == sbh2 + sbh2);
}

TEST_CASE("pipeline plans: bad combinations get one line naming the key", "[pipeline][plan]") {
  const auto gpt = models::load_model("gpt2");
  const ClusterSpec c = round_cluster(1, 8);
  auto err = [&](const std::string& yaml) { return error_of([&] { resolve(parse_plan(yaml, "p.yaml"), *gpt, c); }); };
  CHECK(err("pp: 2\nzero_stage: 2\n") == "p.yaml:2: plan.zero_stage: stage 2 with pp = 2: sharding gradients or parameters breaks the pipeline's gradient accumulation (DeepSpeed refuses it too); valid with pp > 1: zero_stage 0 or 1, or fsdp: full_shard (torch.distributed.pipelining's FSDP2)");
  CHECK(err("pp: 2\nzero_stage: 3\n").find("valid with pp > 1: zero_stage 0 or 1, or fsdp: full_shard") != std::string::npos);
  // Note [FSDP under a pipeline]: FULL_SHARD (and NO_SHARD) stages, not the others.
  CHECK(err("pp: 2\nfsdp: shard_grad_op\n") == "p.yaml:2: plan.fsdp: shard_grad_op with pp = 2 is not modelled: under torch.distributed.pipelining a stage's parameters stay gathered from its first forward to its last backward whatever the strategy; valid with pp > 1: full_shard, no_shard");
  CHECK(err("pp: 2\nfsdp: hybrid_shard\n").rfind("p.yaml:2: plan.fsdp: hybrid_shard with pp = 2 is not modelled", 0) == 0);
  CHECK(resolve(parse_plan("pp: 2\nfsdp: full_shard\n", "p.yaml"), *gpt, c).zero_stage == 3);
  CHECK(resolve(parse_plan("pp: 2\nfsdp: no_shard\n", "p.yaml"), *gpt, c).zero_stage == 0);
  CHECK(err("pp: 4\nschedule: interleaved\nmicro_batches: 6\n") == "p.yaml:3: plan.micro_batches: 6 micro-batches: the interleaved schedule needs a multiple of pp = 4 (as Megatron-LM)");
  CHECK(err("pp: 2\nstage_layers: [5, 5]\n") == "p.yaml:2: plan.stage_layers: the entries sum to 10; valid: 12 (the blocks of gpt2) or 14 (all its layers)");
  CHECK(err("tp: 5\n") == "p.yaml:1: plan.tp: 5: 12 attention heads are not divisible by tp=5");
  CHECK(err("tp: 2\nsequence_parallel: false\npp: 3\n") == "p.yaml:3: plan.pp: tp x pp = 6 does not divide the 8 GPUs of round; valid products: 1, 2, 4, 8");
  CHECK(err("sequence_parallel: true\n") == "p.yaml:1: plan.sequence_parallel: true needs tp > 1 (it splits what tensor parallelism replicates)");
  CHECK(err("placement: tp,dp\n") == "p.yaml:1: plan.placement: 'tp,dp' is not an order of tp, pp and dp (and cp); valid e.g. tp,pp,dp (the default), tp,dp,pp or tp,cp,dp,pp");
  // stage_layers in blocks: the embedding joins the first stage, the head the last.
  const ResolvedPlan r = resolve(parse_plan("pp: 2\nstage_layers: [3, 9]\n", "p.yaml"), *gpt, c);
  CHECK(r.stage_layers == std::vector<int>{4, 10});
}

TEST_CASE("a Bi-LSTM split over two CPU stages: what each stage holds at its peak (Note [LSTM memory], [Send buffers])",
          "[pipeline][memory]") {
  // bilstm-tiny (input 64, hidden H 64, 2 directions, 33 classes), b = 4,
  // s = 32 (t = 128), fp32 Adam, on CPU cores: ATen's LSTM cell, Gloo. The
  // byte counts below are those dtsim validate's counting allocator shows.
  const auto m = models::load_model("bilstm-tiny");
  ClusterSpec c = round_cluster(1, 2);
  c.device = *find_device("cpu");
  const FreeComm comm;
  const auto at = [](const Run& r, int rank, MemCategory k) { return r.exec.memory[rank].at_peak.bytes[static_cast<int>(k)]; };
  const std::string base = "pp: 2\nmicro_batch: 4\nseq_len: 32\nprecision: fp32\noptimizer: adam\nstage_layers: [1, 2]\n";

  // Naive split, one micro-batch. Stage 0 (lstm.0: 66,560 parameters) peaks
  // as its backward starts: the layer's saved 524,288 B (two time-major
  // input copies 2 x 128 x 64 x 4 and 7H a step: 2 x 128 x 7 x 64 x 4), the
  // output it keeps as autograd's root and its contiguous copy being sent
  // (65,536 B each), the gradient received for it (65,536 B) and W_hh's
  // gradient sum (3 x 4H x H x 4 = 196,608 B). No gradients yet: a recurrent
  // layer's appear as its backward ends.
  const Run naive = run(*m, "model_parallel: 2\nmicro_batch: 4\nseq_len: 32\nprecision: fp32\noptimizer: adam\nstage_layers: [1, 2]\n", c, comm, kMs);
  CHECK(at(naive, 0, MemCategory::kParameters) == 266'240);
  CHECK(at(naive, 0, MemCategory::kGradients) == 0);
  CHECK(at(naive, 0, MemCategory::kOptimizer) == 2 * 266'240);
  CHECK(at(naive, 0, MemCategory::kActivations) == 524'288 + 3 * 65'536 + 196'608);
  // Stage 1 (lstm.1, 99,328 parameters, and the head, 4,257): lstm.1 keeps
  // the received input, a copy per direction and 7H a step (65,536 +
  // 131,072 + 458,752); the head a view of the whole LSTM output and the
  // log-softmax (65,536 + 528). lstm.1's backward holds the head's gradient
  // of its output (65,536) and the W_hh sum (196,608); the head's gradients
  // (4,257 x 4 B) are there already.
  CHECK(at(naive, 1, MemCategory::kGradients) == 4'257 * 4);
  CHECK(at(naive, 1, MemCategory::kActivations) == 655'360 + 66'064 + 262'144);
  CHECK(naive.exec.memory[1].at_peak.total() == 2'243'616);

  // GPipe, 8 micro-batches: stage 0 holds 8 x (524,288 + 65,536), the last
  // two sends' copies (Note [Send buffers]), and the first backward's
  // received gradient and W_hh sum.
  const Run gpipe = run(*m, base + "schedule: gpipe\nmicro_batches: 8\n", c, comm, kMs);
  CHECK(at(gpipe, 0, MemCategory::kActivations) == 8 * 589'824 + 2 * 65'536 + 65'536 + 196'608);
  CHECK(at(gpipe, 0, MemCategory::kGradients) == 0);
}

TEST_CASE("a chunk's first backward: the deeper layers' gradients as it starts, its first layer's as it ends", "[pipeline][memory]") {
  // 4 layers of 1000 fp32 parameters (4000 B of gradients each) and 10,000 B
  // kept per micro-batch, split 2 + 2, one micro-batch. Backward runs layer 1
  // before layer 0: at its start stage 0 holds both layers' 20,000 B and
  // layer 1's gradients; layer 0's (an embedding, say) come at the end, when
  // the activations are gone. Peak: 8000 parameters + 4000 gradients +
  // 16,000 Adam + 20,000 activations.
  const test::FakeModel m(4, 1000, 10'000);
  const FreeComm comm;
  const Run r = run(m, "model_parallel: 2\nmicro_batch: 1\nprecision: fp32\noptimizer: adam\n", round_cluster(1, 2), comm, kMs);
  const MemSnapshot& peak = r.exec.memory[0].at_peak;
  CHECK(peak.bytes[static_cast<int>(MemCategory::kGradients)] == 4000);
  CHECK(peak.bytes[static_cast<int>(MemCategory::kActivations)] == 20'000);
  CHECK(peak.total() == 8000 + 4000 + 16'000 + 20'000);
}

TEST_CASE("the partition step: a resolved plan is split before lowering, as predict splits it", "[pipeline][partition]") {
  // Four identical layers over two stages: two each, by cost. Given
  // stage_layers are kept; one stage holds every layer.
  const test::FakeModel m(4, 1000, 10);
  const ClusterSpec c = round_cluster(1, 2);
  CHECK(plan_for(m, parse_plan("pp: 2\nmicro_batches: 4\n", "p"), c).stage_layers == std::vector<int>{2, 2});
  CHECK(plan_for(m, parse_plan("pp: 2\nstage_layers: [1, 3]\n", "p"), c).stage_layers == std::vector<int>{1, 3});
  CHECK(plan_for(m, parse_plan("dp: 2\n", "p"), c).stage_layers == std::vector<int>{4});
  // gpt2 (embedding, 12 blocks, head) over 4 stages: the split plan_for
  // gives without simulating is the one the prediction simulated.
  const auto gpt = models::load_model("gpt2");
  const ClusterSpec c4 = round_cluster(1, 4);
  const PlanSpec spec = parse_plan("pp: 4\nmicro_batches: 8\nprecision: fp16\n", "p");
  const ResolvedPlan split = plan_for(*gpt, spec, c4);
  CHECK(split.stage_layers.size() == 4);
  CHECK(split.stage_layers == predict(*gpt, spec, c4).plan.stage_layers);
}

TEST_CASE("advice: a sequence left to default to a long context says so (Note [A long default sequence])", "[advice]") {
  const ClusterSpec h100 = load_cluster("dgx-h100");
  const auto l31 = models::load_model("llama-3.1-8b"), l3 = models::load_model("llama-3-8b");
  Prediction p;
  p.fits = true;
  p.plan.seq_len = 131072;  // llama-3.1-8b's max_position_embeddings, none given
  auto said = advice(p, *l31, h100);
  REQUIRE(said.size() == 1);
  CHECK(said[0] == "plan.seq_len is llama-3.1-8b's whole context, 131072 tokens, as none was given; set plan.seq_len to "
                   "your run's sequence length (pretraining typically runs 4096 or 8192)");
  // Given, however long: nothing to say.
  p.plan.spec.seq_len = 131072;
  CHECK(advice(p, *l31, h100).empty());
  // Llama 3 8B's default is its 8,192: a pretraining length.
  p.plan.spec.seq_len = 0;
  p.plan.seq_len = 8192;
  CHECK(advice(p, *l3, h100).empty());
  // Mistral NeMo's 1,024,000 tokens at fp32 (eager attention): the scores
  // of one layer, 32 heads x 1,024,000^2 x 4 bytes, are past the 100 TB
  // any shape may price, and the refusal says where the length came from.
  const auto nemo = models::load_model("mistral-nemo-12b");
  PlanSpec spec;
  CHECK_THROWS_WITH(predict(*nemo, spec, h100),
                    "plan.micro_batch x plan.seq_len: the attention scores of one layer would exceed 100 TB; use a smaller "
                    "micro_batch or seq_len (plan.seq_len was not given: it is mistral-nemo-12b's whole context, 1024000 tokens)");
  spec.seq_len = 1024000;
  CHECK_THROWS_WITH(predict(*nemo, spec, h100), Catch::EndsWith("use a smaller micro_batch or seq_len"));
}

TEST_CASE("advice: a mixture of experts at tp > 1 without sequence parallelism, which Megatron-Core refuses to train", "[advice][moe]") {
  const ClusterSpec h100 = load_cluster("dgx-h100");
  Prediction p;
  p.fits = true;
  p.plan.tp = 2;
  p.plan.seq_len = 4096;
  p.plan.spec.seq_len = 4096;
  const auto mixtral = models::load_model("mixtral-8x7b");
  auto said = advice(p, *mixtral, h100);
  REQUIRE(said.size() == 1);
  CHECK(said[0] == "plan.tp=2 with mixtral-8x7b's mixture of experts and no sequence parallelism: Megatron-Core refuses to train it "
                   "(MoELayer.forward); set plan.sequence_parallel=true as its MoE recipes do");
  // With it, at tp 1, or for a dense model: nothing to say.
  p.plan.sequence_parallel = true;
  CHECK(advice(p, *mixtral, h100).empty());
  p.plan.sequence_parallel = false;
  p.plan.tp = 1;
  CHECK(advice(p, *mixtral, h100).empty());
  p.plan.tp = 2;
  CHECK(advice(p, *models::load_model("llama-3-8b"), h100).empty());
}

TEST_CASE("advice: the allgather dispatcher under expert parallelism gathers over etp x ep ranks", "[advice][moe]") {
  const ClusterSpec h100 = load_cluster("dgx-h100");
  Prediction p;
  p.fits = true;
  p.plan.tp = 2;
  p.plan.sequence_parallel = true;
  p.plan.seq_len = p.plan.spec.seq_len = 4096;
  p.plan.ep = 8;
  p.plan.etp = 2;
  p.plan.moe_dispatcher = MoeDispatcher::kAllGather;
  const auto mixtral = models::load_model("mixtral-8x7b");
  auto said = advice(p, *mixtral, h100);
  REQUIRE(said.size() == 1);
  CHECK(said[0] == "plan.moe_dispatcher=allgather at ep 8: every rank gathers the tokens of all 16 etp x ep ranks and reduce-scatters "
                   "its experts' parts of them (Megatron-Core's default dispatcher); its MoE recipes dispatch by all-to-all: "
                   "plan.moe_dispatcher=alltoall (--moe-token-dispatcher-type alltoall)");
  // At ep 1 (megatron-tp's case) or under alltoall: nothing to say.
  p.plan.ep = 1;
  CHECK(advice(p, *mixtral, h100).empty());
  p.plan.ep = 8;
  p.plan.moe_dispatcher = MoeDispatcher::kAllToAll;
  CHECK(advice(p, *mixtral, h100).empty());
}

TEST_CASE("advice: a pipeline that never fills, and what the fullest GPU holds most of (Note [Advice])", "[pipeline][advice]") {
  // Issue 21's 405B example as a user first writes it: 2048 nodes at tp 8,
  // pp 16, cp 2 leave dp = 16384 / 256 = 64, and its global batch of 256
  // sequences at micro-batch 4 is 256 / (4 x 64) = 1 micro-batch a step.
  // Here at tp 1: 64 x 16 x 2 = 2048 GPUs, 256 DGX H100 nodes.
  const ClusterSpec h100 = load_cluster("dgx-h100", {parse_override("cluster.nodes=256")});
  Prediction p;
  p.plan.pp = 16;
  p.plan.dp = 64;
  p.plan.cp = 2;
  p.plan.micro_batch = 4;
  p.plan.grad_accum = 1;
  p.plan.global_batch = 256;
  p.plan.seq_len = 131072;
  p.plan.spec.seq_len = 131072;  // given (Note [A long default sequence] has nothing to say)
  p.plan.schedule = Schedule::k1f1b;
  p.iteration_time = 16 * kMs;
  p.breakdown.bubble = 15 * kMs;  // one micro-batch through 16 equal stages: each busy 1/16 of the step
  p.fits = false;
  RankMemory first, second;
  first.rank = 0;
  second.rank = 16;
  second.stage = 1;
  first.peak = 100 * kGiB;
  second.peak = 200 * kGiB;
  second.parameters = 10 * kGiB;
  second.gradients = 5 * kGiB;
  second.optimizer = 35 * kGiB;
  second.activations = 144 * kGiB;
  second.buffers = 6 * kGiB;
  p.ranks = {first, second};
  const auto llama = models::load_model("llama-3.1-405b");  // 128 heads, 8 key/value heads, 126 blocks
  auto said = advice(p, *llama, h100);
  REQUIRE(said.size() == 2);
  // 16 micro-batches at micro-batch 4 over dp 64: a global batch of 4096.
  CHECK(said[0] ==
        "plan.pp=16 runs 1 micro-batch a step (global_batch 256 / (micro_batch 4 x dp 64)): the pipeline never fills and "
        "its busiest stage idles 94% of the step; give it at least 16: plan.grad_accum=16 (a global batch of 4096), or "
        "a smaller plan.micro_batch");  // 15/16 = 93.75%
  // The next tp a node and the key/value heads allow is 2 (2 x 16 x 2
  // divides 2048); the next cp that cuts 131,072 tokens into 2 cp chunks
  // and divides the GPUs, 4.
  CHECK(said[1] ==
        "does not fit: on rank 16 (stage 1) activations are 144.00 GiB of its 200.00 GiB peak; try plan.recompute=full, "
        "a smaller plan.micro_batch, plan.tp=2 or plan.cp=4; `dtsim search` lists the plans that fit");

  // Knobs already as far as they go are not offered again, nor a smaller
  // micro-batch to fill the pipeline at micro-batch 1.
  p.plan.recompute = Recompute::kFull;
  p.plan.micro_batch = 1;
  p.plan.global_batch = 64;
  said = advice(p, *llama, h100);
  REQUIRE(said.size() == 2);
  CHECK_THAT(said[0], Catch::EndsWith("give it at least 16: plan.grad_accum=16 (a global batch of 1024)"));
  CHECK(said[1].find("activations are 144.00 GiB of its 200.00 GiB peak; try plan.tp=2 or plan.cp=4;") != std::string::npos);

  // A model with neither split (the fake one) is offered neither, and one
  // without blocks to rerun (VGG11's convolutions) no recompute.
  CHECK(advice(p, kEight, h100)[1].find("peak; try a device with more memory;") != std::string::npos);
  p.plan.recompute = Recompute::kNone;
  CHECK(advice(p, kEight, h100)[1].find("peak; try plan.recompute=full; `dtsim search`") != std::string::npos);
  CHECK(advice(p, *models::load_model("vgg11"), h100)[1].find("peak; try a device with more memory;") != std::string::npos);

  // States above activations: with pipelines DeepSpeed allows ZeRO-1 at
  // most and no offload (PlanRules::zero_stages, optimizer_offloads); the
  // next pp that leaves each of the 128 layer slots a stage and divides
  // the GPUs at tp 1, cp 2 is 32.
  p.ranks[1].activations = 40 * kGiB;
  p.ranks[1].optimizer = 139 * kGiB;  // 10 + 5 + 139 = 154 GiB of states
  said = advice(p, *llama, h100);
  REQUIRE(said.size() == 2);
  CHECK(said[1] ==
        "does not fit: on rank 16 (stage 1) parameters, gradients and optimizer states are 154.00 GiB of its 200.00 GiB "
        "peak; try plan.zero_stage=1, plan.tp=2 or plan.pp=32; `dtsim search` lists the plans that fit");
  // The fake model's 8 layers allow no deeper pipeline than 8.
  CHECK(advice(p, kEight, h100)[1].find("peak; try plan.zero_stage=1; `dtsim search`") != std::string::npos);
  // Without a pipeline: ZeRO-3 (FSDP's sharding too), offload, and pp from 1 to 2.
  p.plan.pp = 1;
  p.plan.dp = 1024;
  REQUIRE(advice(p, *llama, h100).size() == 1);  // no pipeline to fill
  CHECK(advice(p, *llama, h100)[0].find("peak; try plan.zero_stage=3 (or --plan fsdp), plan.offload_optimizer=cpu, plan.tp=2 or plan.pp=2;") !=
        std::string::npos);

  // Enough micro-batches, a naive split (one micro-step at a time by
  // design) and a plan that fits: nothing to say.
  p.plan.pp = 16;
  p.plan.dp = 64;
  p.plan.grad_accum = 16;
  p.fits = true;
  CHECK(advice(p, *llama, h100).empty());
  p.plan.grad_accum = 1;
  p.plan.schedule = Schedule::kNaive;
  CHECK(advice(p, *llama, h100).empty());
}

TEST_CASE("advice: flash attention asked in fp32 of a grouped-query model is priced eager, and says so", "[advice][attention]") {
  // Note [SDPA in fp32]: Llama 3.2 1B (32 heads, 8 key/value heads) in fp32
  // on an H100 runs SDPA's math path.
  const auto m = models::load_model("llama-3.2-1b");
  const ClusterSpec h100 = load_cluster("dgx-h100", {parse_override("cluster.nodes=1")});
  auto said = [&](const char* precision) {
    const auto p = predict(*m, load_plan("single", {parse_override("plan.attention=flash"),
                                                   parse_override(std::string("plan.precision=") + precision),
                                                   parse_override("plan.micro_batch=1")}),
                           h100);
    for (const auto& w : p.warnings)
      if (w.rfind("plan.attention=flash:", 0) == 0) return w;
    return std::string();
  };
  CHECK(said("fp32") ==
        "plan.attention=flash: in fp32 PyTorch's SDPA runs this grouped-query model on its math path, which keeps the "
        "probabilities as eager attention does, and it is priced so (FlashAttention takes fp16 and bf16; bf16 runs it)");
  CHECK(said("bf16").empty());
}

TEST_CASE("advice reaches predict's warnings for an underfilled pipeline", "[pipeline][advice]") {
  // 8 fake layers over 4 stages, 2 sequences a step at micro-batch 2: one
  // micro-batch. With 8 it fills and nothing is said.
  const ClusterSpec c = round_cluster(1, 4);
  auto warned = [&](int global) {
    const auto p = predict(kEight, parse_plan("pp: 4\nmicro_batch: 2\nglobal_batch: " + std::to_string(global) + "\n", "t.yaml"), c);
    for (const auto& w : p.warnings)
      if (w.find("the pipeline never fills") != std::string::npos) return true;
    return false;
  };
  CHECK(warned(2));
  CHECK(warned(6));   // 3 micro-batches, 4 stages
  CHECK_FALSE(warned(8));
}

TEST_CASE("Gloo pipelines: a send waits for its receiver's notice, the sender's window and the sender's core "
          "(Note [Gloo rendezvous], [Send window], [Busy sender], [Quiet sender])",
          "[pipeline]") {
  // GPipe, p = 2 stages of 5 and 3 layers at 0.25 ms a layer forward, 0.5
  // backward (stage 0: tf 1.25 ms, tb 2.5 ms a micro-batch; stage 1: 0.75
  // and 1.5), m = 4, communication free. On GPUs (ms): stage 0's F0-F3 over
  // 0-5, stage 1's F_k as each arrives (1.25, 2.5, 3.75, 5), its B3-B0 over
  // 5.75-11.75, stage 0's B3-B0 over 7.25-17.25, then the ns-long step.
  const FreeComm comm;
  const TimeNs layer = kMs / 4;
  const std::string plan = "pp: 2\nschedule: gpipe\nmicro_batches: 4\nmicro_batch: 1\nstage_layers: [5, 3]\n";
  ClusterSpec gpu = round_cluster(1, 2);
  const Run g = run(kEight, plan, gpu, comm, layer);
  CHECK(g.exec.makespan / 1000 == 17250);

  ClusterSpec cpu = gpu;
  cpu.device.gloo_collectives = true;
  cpu.device.send_waits_for_core = kUntilPassEnds;
  const Run c = run(kEight, plan, cpu, comm, layer);
  const auto id = [&](const Run& r, const std::string& name) {
    for (std::size_t i = 0; i < r.graph.tasks.size(); ++i) {
      if (r.graph.tasks[i].name == name) return static_cast<TaskId>(i);
    }
    FAIL("no task " << name);
    return TaskId{-1};
  };
  const auto waits_on = [&](const Run& r, const std::string& task, const std::string& on) {
    const auto& deps = r.graph.tasks[static_cast<std::size_t>(id(r, task))].deps;
    return std::find(deps.begin(), deps.end(), id(r, on)) != deps.end();
  };
  const auto slowed = [&](const Run& r, const std::string& name) {
    return r.exec.spans[static_cast<std::size_t>(id(r, name))].slowed;
  };
  // Stage 1 posts the receive for micro-batch 1 once its forward of 0 is
  // done: its notice waits for that, and precedes the send on its stream.
  CHECK(waits_on(c, "notice act chunk 0 [mb 1]", "fwd chunk 1 [mb 0]"));
  CHECK(c.graph.tasks[static_cast<std::size_t>(id(c, "notice act chunk 0 [mb 1]"))].collective == kRecvNotice);
  CHECK(id(c, "notice act chunk 0 [mb 1]") + 1 == id(c, "send act chunk 0 [mb 1]"));
  // Micro-batch 0's is posted as stage 1 starts: handled before stage 0 computes.
  CHECK(c.graph.tasks[static_cast<std::size_t>(id(c, "notice act chunk 0 [mb 0]"))].collective == -1);
  for (const Task& t : g.graph.tasks) CHECK(t.collective != kRecvNotice);
  // Stage 0's third send waits for its first, and so does the pass after
  // the one that issued it (its forward of micro-batch 3).
  CHECK(waits_on(c, "send act chunk 0 [mb 2]", "send act chunk 0 [mb 0]"));
  CHECK(waits_on(c, "fwd chunk 0 [mb 3]", "send act chunk 0 [mb 0]"));
  CHECK_FALSE(waits_on(g, "fwd chunk 0 [mb 3]", "send act chunk 0 [mb 0]"));
  // Then by hand (ms). The notice for act1 comes at 2.0, as stage 1's F0
  // ends, mid-F1 on stage 0: held to 2.5, where F1 ends and its send is
  // issued anyway, and so act2's (3.25 to 3.75) and act3's (4.5 to 5):
  // the forwards run as on a GPU. Stage 0's notice for grad3 comes at 5
  // with stage 1 idle; B3 ends at 7.25, and stage 1 runs B2 7.25-8.75 and
  // B1 8.75-10.25. The notice for grad2 comes at 9.75 as stage 0's B3 ends,
  // mid-B1 on stage 1: held to 10.25, where B1's pass ends (Note [Quiet
  // sender]), so stage 0's B2 runs 10.25-12.75; grad1's and grad0's
  // notices find stage 1 done (B0 10.25-11.75): B1 12.75-15.25, B0
  // 15.25-17.75.
  CHECK(c.exec.makespan / 1000 == 17750);
  CHECK(slowed(c, "notice act chunk 0 [mb 1]") == kMs / 2);  // a trace's waited_for_core
  CHECK(slowed(c, "notice act chunk 0 [mb 3]") == kMs / 2);
  CHECK(slowed(c, "notice grad chunk 1 [mb 2]") == kMs / 2);
  CHECK(slowed(c, "notice grad chunk 1 [mb 3]") == 0);
  // Held at most a tick (4 ms, Gloo's loop at the rank's priority: Note
  // [Busy sender]): stage 1 has been busy since 5, so grad2's notice at
  // 9.75 is past 5 + 4 and handled at once, as on a GPU; act2's at 3.25 is
  // before 0 + 4 and still waits for F2's end at 3.75, act3's at 4.5 not.
  cpu.device.send_waits_for_core = 4 * kMs;
  const Run t = run(kEight, plan, cpu, comm, layer);
  CHECK(t.exec.makespan / 1000 == 17250);
  CHECK(slowed(t, "notice act chunk 0 [mb 2]") == kMs / 2);
  CHECK(slowed(t, "notice act chunk 0 [mb 3]") == 0);
  CHECK(slowed(t, "notice grad chunk 1 [mb 2]") == 0);
  PredictOptions traced;
  traced.keep_graph = true;
  const auto bilstm = models::load_model("bilstm-tiny");
  const std::string trace = to_chrome_trace(predict(*bilstm, load_plan("1f1b"), load_cluster("local-cpu"), traced));
  CHECK(trace.find("\"waited_for_core\"") != std::string::npos);
}

TEST_CASE("Megatron's recompute modules through a pipeline: the parts dropped, rebuilt before each backward (Note [Recompute modules])",
          "[recompute][memory]") {
  const auto moe = models::load_model("moe-tiny");
  const ClusterSpec c = round_cluster(1, 2);
  const std::string base = "pp: 2\nmicro_batches: 4\nmicro_batch: 2\nseq_len: 128\nprecision: fp16\nattention: flash\n"
                           "kernels: fused\nrecompute: ";
  auto pred = [&](const std::string& r) { return predict(*moe, parse_plan(base + r + "\n", "t.yaml"), c); };
  // Fused attention leaves the core nothing to drop: selective recompute of
  // it, or of no module, is no recompute at all.
  const Prediction none = pred("none"), core = pred("selective"), nothing = pred("selective\nrecompute_modules: []");
  for (const Prediction* p : {&core, &nothing}) {
    CHECK(p->iteration_time == none.iteration_time);
    CHECK(p->ranks[0].activations == none.ranks[0].activations);
  }
  // The norms and the experts' activation: kept bytes down, their
  // kernels rerun before each backward.
  const Prediction parts = pred("selective\nrecompute_modules: [layernorm, moe_act]");
  // What a block drops (the model's sum of the two parts, tested by hand
  // in test_llama.cpp) at b 2, s 128, fp16, fused kernels.
  WorkloadShape w;
  w.micro_batch = 2;
  w.seq_len = 128;
  w.act_bytes = 2;
  w.flash_attention = true;
  w.fused_kernels = true;
  w.recompute_modules = kRecomputeLayernorm | kRecomputeMoeAct;
  const Layer block = moe->layers(w)[1];
  REQUIRE(block.is_block());
  REQUIRE(block.attention_core_bytes > 0);
  // Each stage holds one block (stage_layers [2, 2]); a chunk's backward
  // holds its kept bytes and one layer's rebuilt part at once
  // (chunk_stage.cpp). Under 1F1B stage 0 holds 2 micro-batches at its
  // peak: the one in flight keeps a block's part less; stage 1 holds one,
  // whose part comes back before its backward.
  CHECK(none.ranks[0].activations - parts.ranks[0].activations == block.attention_core_bytes);
  CHECK(parts.ranks[1].activations == none.ranks[1].activations);
  CHECK(parts.iteration_time > none.iteration_time);
  // HFU counts the rerun kernels: each block's, for 4 micro-batches, a
  // GPU's share of a replica of 2 stages.
  double rerun = 0;
  for (const Layer& l : moe->layers(w)) {
    for (const Kernel& k : l.attention_core) rerun += k.flops * static_cast<double>(k.repeat);
  }
  REQUIRE(rerun > 0);
  CHECK(none.hfu == none.mfu);
  CHECK(parts.hfu - parts.mfu ==
        Approx(rerun * 4 / 2 / ns_to_seconds(parts.iteration_time) / c.device.peak_for(Precision::kFp16)).epsilon(1e-9));
}

TEST_CASE("multi-token prediction joins the head on the last stage where stages count blocks (Note [Multi-token prediction])",
          "[pipeline][mtp]") {
  const auto m = models::load_model("moe-tiny", {parse_override("model.mtp_layers=1")});
  const ClusterSpec c = round_cluster(1, 2);
  // The embedding and layers.0 | layers.1, mtp.0 and the head.
  const ResolvedPlan r = resolve(parse_plan("pp: 2\nstage_layers: [1, 1]\nmicro_batches: 2\n", "t"), *m, c);
  CHECK(r.stage_layers == std::vector<int>{2, 3});
  // The depth keeps a copy of the embedding table on the last stage, as a
  // tied head does: the last stage's parameters grow by it and the depth.
  const auto plain = models::load_model("moe-tiny");
  const Prediction with = predict(*m, parse_plan("pp: 2\nstage_layers: [1, 1]\nmicro_batches: 2\n", "t"), c);
  const Prediction without = predict(*plain, parse_plan("pp: 2\nstage_layers: [1, 1]\nmicro_batches: 2\n", "t"), c);
  const auto layers = m->layers(WorkloadShape{});
  const Layer& depth = layers[layers.size() - 2];
  REQUIRE(depth.name == "mtp.0");
  CHECK(with.ranks[0].parameters == without.ranks[0].parameters);
  CHECK(with.ranks[1].parameters - without.ranks[1].parameters == (depth.params + depth.borrowed_params) * 4);  // fp32
}

TEST_CASE("Block Attention Residuals through a pipeline: the boundary sends the bank, the next stage keeps it (Note [Attention residuals])",
          "[pipeline][memory][attn_res]") {
  // Four Llama blocks (h 64, 4 heads, SwiGLU 128) with a snapshot every 2
  // layers (model.attn_res_block), one sequence of 128 tokens in fp16: e t
  // h = 16,384 bytes. The stages split after layer 1: Megatron-Bridge sends
  // the running sum with layer 0's snapshot (pack_stage_boundary), 2 e t h,
  // and gets its gradient back.
  models::LlamaConfig cfg;
  cfg.name = "attn-res";
  cfg.layers = 4;
  cfg.hidden = 64;
  cfg.heads = 4;
  cfg.kv_heads = 4;
  cfg.intermediate = 128;
  cfg.vocab = 256;
  cfg.seq_len = 256;
  cfg.attn_res_block = 2;
  const auto m = models::make_llama(cfg);
  cfg.attn_res_block = 0;
  const auto plain = models::make_llama(cfg);
  const Bytes eth = 2 * 128 * 64;
  const std::string base = "pp: 2\nstage_layers: [3, 3]\nmicro_batch: 1\nseq_len: 128\nprecision: fp16\nschedule: gpipe\n";
  const FreeComm comm;
  auto sends = [](const Run& r) {
    std::vector<Bytes> out;
    for (const auto& t : r.graph.tasks) {
      if (t.kind == TaskKind::kCollective && t.axis == Axis::kPp && t.op == CollectiveOp::kSendRecv && t.bytes > 0) out.push_back(t.bytes);
    }
    return out;
  };
  const Run one = run(*m, base + "micro_batches: 1\n", round_cluster(1, 2), comm, kMs);
  REQUIRE(one.graph.stage_layers == std::vector<int>{3, 3});
  const auto sent = sends(one);
  CHECK_FALSE(sent.empty());
  for (const Bytes b : sent) CHECK(b == 2 * eth);
  for (const Bytes b : sends(run(*plain, base + "micro_batches: 1\n", round_cluster(1, 2), comm, kMs))) CHECK(b == eth);
  // What stage 1 keeps for each micro-batch in flight, over the plain
  // model's: under full recompute, its first checkpoint is the received
  // tensor (2 e t h against e t h; layer 2 writes a new bank at once, so
  // the unpacked one is not kept) and layer 3's is layer 2's sum with its
  // new bank of 2 snapshots (3 e t h against e t h): 3 e t h more. Without
  // recompute it keeps the received tensor, 2 e t h, which no layer's own
  // saved bytes hold (each norm keeps its aggregate's output instead).
  for (const bool full : {true, false}) {
    INFO("recompute full " << full);
    const std::string plan = base + (full ? "recompute: full\n" : "");
    auto per_micro = [&](const Model& model) {
      return run(model, plan + "micro_batches: 2\n", round_cluster(1, 2), comm, kMs).peak_activations(1) -
             run(model, plan + "micro_batches: 1\n", round_cluster(1, 2), comm, kMs).peak_activations(1);
    };
    const Bytes plain_micro = per_micro(*plain), res_micro = per_micro(*m);
    if (full) {
      CHECK(res_micro - plain_micro == 3 * eth);
    } else {
      // The aggregates' own kept bytes (test_kimi.cpp: 5 and 9 rows of
      // 66,560 for layers 2 and 3) and the received tensor.
      CHECK(res_micro - plain_micro == 14 * 66'560 + 2 * eth);
    }
  }
}
