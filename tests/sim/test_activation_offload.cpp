// Megatron-Core's CPU offloading of activations (Note [Activation offload]
// in sim/src/lowering/passes/activation_offload.cpp): what it frees, what
// its copies cost where nothing hides them, and what Megatron-Core refuses.
#include <catch2/catch.hpp>

#include <cmath>
#include <string>
#include <vector>

#include "dtsim/models/models.hpp"
#include "dtsim/sim/config_io.hpp"
#include "dtsim/sim/framework_config.hpp"
#include "dtsim/sim/predict.hpp"
#include "dtsim/sim/search.hpp"
#include "lowering/lowering_common.hpp"
#include "fake_model.hpp"
#include "test_util.hpp"

using namespace dtsim;
using namespace dtsim::sim;
using dtsim::test::error_of;

namespace {

/// GPT-2 (12 blocks) on one H100 at micro-batch 8, one micro-batch, with
/// `n` blocks offloaded; a host link of 50 GB/s (PCIe Gen5, dgx-h100).
Prediction gpt2(int n, const std::string& extra = "", const PredictOptions& options = {}) {
  const auto model = models::load_model("gpt2");
  std::vector<Override> o = {parse_override("plan.dp=1"), parse_override("plan.micro_batch=8"),
                             parse_override("plan.grad_accum=1"), parse_override("plan.precision=bf16"),
                             parse_override("plan.cpu_offloading_num_layers=" + std::to_string(n))};
  if (!extra.empty()) o.push_back(parse_override(extra));
  const ClusterSpec c = load_cluster("dgx-h100", {parse_override("cluster.gpus_per_node=1")});
  return predict(*model, load_plan("ddp", o), c, options);
}

/// The shipped ddp plan with `sets` applied.
PlanSpec plan(const std::vector<std::string>& sets) {
  std::vector<Override> o;
  for (const auto& s : sets) o.push_back(parse_override(s));
  return load_plan("ddp", o);
}

TaskId task(const TaskGraph& g, const std::string& name) { return dtsim::test::task_named(g, name); }
using dtsim::test::waits_for;

/// What one GPT-2 block keeps for backward at that shape.
Bytes block_saved() {
  const auto model = models::load_model("gpt2");
  const ResolvedPlan r = gpt2(0).plan;
  for (const Layer& l : model->layers(detail::workload_shape(r, *find_device("H100-SXM")))) {
    if (l.is_block()) return l.saved_bytes;
  }
  return 0;
}

}  // namespace

TEST_CASE("offloaded blocks leave the GPU between their forward and backward", "[offload][activations]") {
  // Every block keeps the same bytes. The peak comes as the head's backward
  // starts, with every kept activation still held: without offload all 12
  // blocks'; with N offloaded, blocks N .. 11 (block i's memory went once
  // block 12 - N + i's forward began, and none has come back yet). So the
  // peak falls by exactly N blocks' activations, and nothing else moves.
  const Bytes saved = block_saved();
  REQUIRE(saved > 0);
  const Prediction none = gpt2(0);
  for (int n : {1, 4, 11}) {
    const Prediction off = gpt2(n);
    CHECK(none.ranks[0].activations - off.ranks[0].activations == n * saved);
    CHECK(none.ranks[0].peak - off.ranks[0].peak == n * saved);
    CHECK(off.ranks[0].parameters == none.ranks[0].parameters);
    CHECK(off.ranks[0].optimizer == none.ranks[0].optimizer);
  }
}

TEST_CASE("block L - N + i waits for block i's copy down; block i's copy up waits for block L - N + i's backward", "[offload][activations]") {
  // N = 4 of 12, two micro-batches: h.8 waits for h.0's copy, h.11 for
  // h.3's; h.3's copy up starts after h.11's backward and h.3's backward
  // waits for it; each micro-batch its own copies.
  PredictOptions o;
  o.keep_graph = true;
  const Prediction p = gpt2(4, "plan.grad_accum=2", o);
  const TaskGraph& g = p.graph;
  for (const std::string mb : {"0", "1"}) {
    const auto at = [&](const std::string& what) { return task(g, what + " [mb " + mb + "]"); };
    for (int i = 0; i < 4; ++i) {
      const std::string b = "h." + std::to_string(i), partner = "h." + std::to_string(8 + i);
      const TaskId down = at("d2h activations " + b), up = at("h2d activations " + b);
      REQUIRE(down >= 0);
      REQUIRE(up >= 0);
      CHECK(waits_for(g, down, at("fwd " + b)));
      CHECK(waits_for(g, at("fwd " + partner), down));
      // Block i is freed as block L - N + i's forward starts, before that
      // forward allocates its own: never L - N + 1 blocks at once.
      const auto ops = g.on_start(g.tasks[static_cast<std::size_t>(at("fwd " + partner))]);
      REQUIRE(ops.size() >= 2);
      CHECK(ops[0].category == MemCategory::kActivations);
      CHECK(ops[0].bytes == -block_saved());
      CHECK(ops[1].bytes > 0);
      CHECK(waits_for(g, up, at("bwd " + partner)));
      CHECK(waits_for(g, at("bwd " + b), up));
      // Transformer Engine's own side stream, apart from ZeRO's copies.
      CHECK(g.ranks[0].streams[static_cast<std::size_t>(g.tasks[static_cast<std::size_t>(down)].stream)] == "offload");
    }
    CHECK(at("d2h activations h.4") < 0);  // blocks 4 to 11 keep theirs
  }
}

TEST_CASE("offloading all but the last block exposes every copy, down and up", "[offload][activations]") {
  // At N = L - 1 block i + 1's forward waits for block i's copy down, which
  // starts as block i's forward ends (nothing is between them), and block
  // i's backward waits for its copy up, which starts as block i + 1's
  // backward ends: each of the 11 copies each way adds its whole time. A
  // copy is cudaMemcpyAsync's 10 us and the bytes over the host link, 50
  // GB/s on a DGX H100 (PCIe Gen5 x16), rounded up to the nanosecond.
  const Bytes saved = block_saved();
  const double copy_ns = 10e3 + std::ceil(static_cast<double>(saved) / 50e9 * 1e9);
  const double added = static_cast<double>(gpt2(11).iteration_time - gpt2(0).iteration_time);
  CHECK(added == Approx(2 * 11 * copy_ns).epsilon(1e-6));
  CHECK(gpt2(11).plan.cpu_offloading_num_layers == 11);
}

TEST_CASE("CPU offloading is refused where Megatron-Core refuses it, in one line", "[offload][bad-input]") {
  const auto model = models::load_model("gpt2");
  const ClusterSpec c = load_cluster("dgx-h100");
  CHECK_THAT(error_of([&] { predict(*model, plan({"plan.cpu_offloading_num_layers=12"}), c); }),
             Catch::Contains("plan.cpu_offloading_num_layers: 12 of the 12 transformer layers of gpt2; valid: 0 to 11"));
  // Megatron-Core offloads transformer layers only; a CPU's are on the host.
  CHECK_THAT(error_of([&] { predict(*models::load_model("bilstm"), plan({"plan.cpu_offloading_num_layers=1"}), c); }),
             Catch::Contains("bilstm has no transformer layers, the only ones Megatron-Core offloads; valid: 0"));
  CHECK_THAT(error_of([&] { predict(*model, plan({"plan.cpu_offloading_num_layers=1"}), load_cluster("local-cpu")); }),
             Catch::Contains("a CPU's activations are in host memory already; valid: 0"));
  CHECK_THAT(error_of([&] { predict(*model, load_plan("zero3", {parse_override("plan.cpu_offloading_num_layers=1")}), c); }),
             Catch::Contains("with DeepSpeed's ZeRO-3, which gathers module by module"));
  CHECK_THAT(error_of([&] { predict(*model, plan({"plan.cpu_offloading_num_layers=4", "plan.recompute=selective"}), c); }),
             Catch::Contains("does not work with activation recomputation"));
  CHECK_THAT(error_of([&] { predict(*model, plan({"plan.cpu_offloading_num_layers=4", "plan.pp=2", "plan.dp=4"}), c); }),
             Catch::Contains("no CPU offloading under pipeline parallelism; valid there: 0"));
  CHECK_THAT(error_of([&] { load_plan("ddp", {parse_override("plan.cpu_offloading_num_layers=-1")}); }),
             Catch::Contains("plan.cpu_offloading_num_layers: -1 is out of range"));
}

TEST_CASE("Megatron-LM's --cpu-offloading-num-layers is the plan's count", "[offload][megatron]") {
  const FrameworkConfig on = parse_megatron_args("--micro-batch-size 1 --cpu-offloading --cpu-offloading-num-layers 40", "cmd");
  bool found = false;
  for (const Override& o : on.overrides) {
    if (o.section + "." + o.path == "plan.cpu_offloading_num_layers") {
      CHECK(o.value == "40");
      found = true;
    }
  }
  CHECK(found);
  CHECK(on.unmodelled.empty());
  // Megatron-LM's default count is 0: --cpu-offloading alone offloads nothing.
  const FrameworkConfig zero = parse_megatron_args("--micro-batch-size 1 --cpu-offloading", "cmd");
  for (const Override& o : zero.overrides) {
    if (o.section + "." + o.path == "plan.cpu_offloading_num_layers") CHECK(o.value == "null");
  }
}

// Note [DeepSpeed checkpoints] in sim/src/lowering/passes/deepspeed_checkpointing.cpp.
namespace {

/// GPT-2 under full recompute on one H100 (or `tp` of a DGX H100), micro-batch 8.
Prediction gpt2_checkpointed(const std::vector<std::string>& sets, int tp = 1, const PredictOptions& options = {}) {
  const auto model = models::load_model("gpt2");
  std::vector<Override> o = {parse_override("plan.dp=1"), parse_override("plan.tp=" + std::to_string(tp)),
                             parse_override("plan.micro_batch=8"), parse_override("plan.grad_accum=1"),
                             parse_override("plan.precision=bf16"), parse_override("plan.recompute=full")};
  for (const auto& s : sets) o.push_back(parse_override(s));
  const ClusterSpec c = load_cluster("dgx-h100", {parse_override("cluster.gpus_per_node=" + std::to_string(tp))});
  return predict(*model, load_plan("ddp", o), c, options);
}

}  // namespace

TEST_CASE("DeepSpeed's cpu_checkpointing: every checkpoint down and back on the compute stream", "[offload][deepspeed]") {
  // Full recompute keeps each block's input: s x b x h x 2 bytes in bf16
  // (Korthikanti et al. 2022, Table 2's 2sbh) = 1024 x 8 x 768 x 2. A
  // blocking copy down before each of the 12 forwards and back before each
  // rerun, with nothing beside them on one GPU: 24 copies of 10 us and
  // the bytes at 50 GB/s (PCIe Gen5 on a DGX H100), rounded up to the ns.
  const Bytes checkpoint = 1024LL * 8 * 768 * 2;
  const double copy_ns = 10e3 + std::ceil(static_cast<double>(checkpoint) / 50e9 * 1e9);
  const Prediction none = gpt2_checkpointed({});
  const Prediction cpu = gpt2_checkpointed({"plan.cpu_checkpointing=true"});
  CHECK(static_cast<double>(cpu.iteration_time - none.iteration_time) == Approx(24 * copy_ns).epsilon(1e-6));
  // And the device holds none of the 12 checkpoints in between.
  CHECK(none.ranks[0].activations - cpu.ranks[0].activations <= 12 * checkpoint);
  CHECK(none.ranks[0].activations - cpu.ranks[0].activations >= 11 * checkpoint);
}

TEST_CASE("DeepSpeed's partition_activations: 1/tp of a checkpoint kept, all-gathered before the rerun", "[offload][deepspeed]") {
  const Bytes checkpoint = 1024LL * 8 * 768 * 2;  // the input, whole on each of the 2 ranks without sequence parallelism
  PredictOptions o;
  o.keep_graph = true;
  const Prediction p = gpt2_checkpointed({"plan.partition_activations=true"}, 2, o);
  const TaskGraph& g = p.graph;
  const TaskId fwd = task(g, "fwd h.5 [mb 0]"), gather = task(g, "gather checkpoint h.5 [mb 0]");
  REQUIRE(fwd >= 0);
  REQUIRE(gather >= 0);
  // The forward frees the other rank's half as it ends (besides what
  // recompute drops), and the gather brings it back.
  bool frees_half = false;
  for (const MemOp& op : g.on_end(g.tasks[static_cast<std::size_t>(fwd)])) frees_half = frees_half || op.bytes == -checkpoint / 2;
  CHECK(frees_half);
  const Task& t = g.tasks[static_cast<std::size_t>(gather)];
  CHECK(t.op == CollectiveOp::kAllGather);
  CHECK(t.axis == Axis::kTp);
  CHECK(t.bytes == checkpoint);
  REQUIRE(g.on_start(t).size() == 1);
  CHECK(g.on_start(t)[0].bytes == checkpoint / 2);
  // The rerun waits for it.
  const TaskId rerun = task(g, "recompute h.5 [mb 0]");
  REQUIRE(rerun >= 0);
  CHECK(waits_for(g, rerun, gather));
  // At tp 1 there is nothing to split: the plan says so, and nothing changes.
  const Prediction one = gpt2_checkpointed({"plan.partition_activations=true"});
  CHECK_FALSE(one.plan.partition_activations);
  CHECK(one.iteration_time == gpt2_checkpointed({}).iteration_time);
}

TEST_CASE("DeepSpeed's checkpoint knobs are refused where they do not apply, in one line", "[offload][deepspeed][bad-input]") {
  const auto model = models::load_model("gpt2");
  const ClusterSpec c = load_cluster("dgx-h100");
  CHECK_THAT(error_of([&] { predict(*model, plan({"plan.cpu_checkpointing=true", "plan.recompute=selective"}), c); }),
             Catch::Contains("plan.cpu_checkpointing: true is DeepSpeed's activation checkpointing, which reruns every block "
                             "from its own input: it needs recompute: full"));
  CHECK_THAT(error_of([&] { predict(*model, plan({"plan.cpu_checkpointing=true", "plan.recompute=full", "plan.pp=2", "plan.dp=4"}), c); }),
             Catch::Contains("plan.cpu_checkpointing: true with pp 2: not modelled under a pipeline; valid there: false"));
  CHECK_THAT(error_of([&] {
               predict(*model, plan({"plan.partition_activations=true", "plan.recompute=full", "plan.tp=2", "plan.dp=4",
                                     "plan.sequence_parallel=true"}), c);
             }),
             Catch::Contains("plan.partition_activations: true with sequence_parallel"));
  CHECK_THAT(error_of([&] { predict(*model, plan({"plan.cpu_checkpointing=true", "plan.recompute=full"}), load_cluster("local-cpu")); }),
             Catch::Contains("a CPU's checkpoints are in host memory already"));
}

TEST_CASE("a DeepSpeed config's partition_activations and cpu_checkpointing are read, not left unmodelled", "[offload][deepspeed]") {
  const FrameworkConfig fc = parse_deepspeed_config(
      R"({"train_micro_batch_size_per_gpu": 4, "zero_optimization": {"stage": 1},
          "activation_checkpointing": {"partition_activations": true, "cpu_checkpointing": true}})", "ds.json");
  int read = 0;
  for (const Override& o : fc.overrides) {
    const std::string key = o.section + "." + o.path;
    if (key == "plan.partition_activations" || key == "plan.cpu_checkpointing") read += o.value == "true";
    if (key == "plan.recompute") CHECK(o.value == "full");
  }
  CHECK(read == 2);
  CHECK(fc.unmodelled.empty());
}

TEST_CASE("the search leaves the offload and checkpoint knobs off, and says so", "[offload][search]") {
  // Its memory bound does not count them, so a plan pruned as too big
  // could have fitted with them: every searched plan runs without.
  const auto model = models::load_model("gpt2");
  SearchOptions o;
  o.base = plan({"plan.cpu_offloading_num_layers=4", "plan.cpu_checkpointing=true", "plan.recompute=full",
                 "plan.enable_activation_offloading=true"});
  o.global_batch = 64;
  o.threads = 1;
  const SearchResult r = search(*model, load_cluster("dgx-h100"), o);
  REQUIRE(!r.top.empty());
  for (const SearchEntry& e : r.top) {
    CHECK(e.plan.cpu_offloading_num_layers == 0);
    CHECK_FALSE(e.plan.cpu_checkpointing);
    CHECK_FALSE(e.plan.enable_activation_offloading);  // Note [Saved-tensor offload]
  }
  int said = 0;
  for (const std::string& w : r.warnings) {
    said += w.find("plan.cpu_offloading_num_layers: 4 is not searched") != std::string::npos;
    said += w.find("plan.cpu_checkpointing: true is not searched") != std::string::npos;
    said += w.find("plan.enable_activation_offloading: true is not searched") != std::string::npos;
  }
  CHECK(said == 3);
}

// Note [Saved-tensor offload]: torchtune's enable_activation_offloading.
TEST_CASE("torchtune's offloading frees each block once the next layer saves and brings it back a layer ahead",
          "[offload][activations]") {
  // 4 blocks of 1000 fp32 parameters keeping 1 MB each; forward 1 ms and
  // backward 2 ms a block; a copy of 1 MB over the 10 GB/s host link 10 us
  // + 100 us. Without recompute a block saves its five tensors and more, so
  // block l leaves as block l + 1's forward starts, which waits for its
  // copy down: three copies exposed in the forward (the last block stays).
  // In the backward block 2 comes back as block 3's backward ends (exposed)
  // with block 1 behind it; block 0 as block 2's ends (hidden).
  const test::FakeModel m(4, 1000, 1'000'000);
  const AnalyticCommModel comm(test::round_cluster());
  const std::string plan = "dp: 1\nprecision: fp32\noptimizer: adam\n";
  const test::PlanRun off = test::run_plan(m, plan + "enable_activation_offloading: true\n", test::round_cluster(), comm, 1'000'000);
  const test::PlanRun on = test::run_plan(m, plan, test::round_cluster(), comm, 1'000'000);
  CHECK(on.exec.makespan == 12'000'112);
  CHECK(off.exec.makespan == 12'000'112 + 4 * 110'000);
  // Without it the peak is the first backward's start: every block's 1 MB,
  // block 3's 4000 B of gradients, parameters 16000 and Adam's 32000.
  CHECK(on.exec.memory[0].at_peak.total() == 4'052'000);
  // With it: block 1's backward starts with block 1 back and block 0
  // coming, three blocks' gradients: 2 MB + 12000 + 48000.
  CHECK(off.exec.memory[0].at_peak.total() == 2'060'000);
  CHECK(off.peak_activations(0) == 2'000'000);
  int down = 0, up = 0;
  for (const Task& t : off.graph.tasks) {
    down += t.name.find("d2h saved ") != std::string::npos;
    up += t.name.find("h2d saved ") != std::string::npos;
  }
  CHECK(down == 3);
  CHECK(up == 3);

  // Llama 3.2 3B on one A100, 2 x 4,096 tokens, every block checkpointed:
  // a block's checkpoint is its input, 2 x 4096 x 3072 x 2 bytes, and all
  // 28 move (the last two once the final norm's forward moves the stash
  // on), so the peak at the head's backward falls by 28 of them. The
  // copies hide behind the blocks but the last one's down, which the
  // head's forward waits for, and its way back up, which the head's
  // backward starts: two copies of 48 MiB over the 25 GB/s host link, 10 us
  // + 2,013,266 ns each.
  const auto llama = models::load_model("llama-3.2-3b");
  const ClusterSpec a100 = load_cluster("dgx-a100", {parse_override("cluster.gpus_per_node=1")});
  std::vector<Override> o = {parse_override("plan.dp=1"), parse_override("plan.micro_batch=2"), parse_override("plan.global_batch=2"),
                             parse_override("plan.seq_len=4096"), parse_override("plan.precision=bf16"),
                             parse_override("plan.recompute=full")};
  const Prediction kept = predict(*llama, load_plan("ddp", o), a100);
  o.push_back(parse_override("plan.enable_activation_offloading=true"));
  const Prediction moved = predict(*llama, load_plan("ddp", o), a100);
  CHECK(kept.ranks.front().peak - moved.ranks.front().peak == 28LL * 2 * 4096 * 3072 * 2);
  CHECK(moved.iteration_time - kept.iteration_time == 2 * (10'000 + 2'013'266));

  // One line each where it cannot run.
  CHECK_THAT(error_of([&] { predict(*llama, load_plan("ddp", {parse_override("plan.enable_activation_offloading=true"),
                                                               parse_override("plan.cpu_offloading_num_layers=2")}),
                                    a100); }),
             Catch::Contains("plan.enable_activation_offloading: true with Megatron-Core's cpu_offloading_num_layers: one offloading "
                             "of the activations at a time; drop one"));
  CHECK_THAT(error_of([&] { predict(*llama, load_plan("ddp", {parse_override("plan.enable_activation_offloading=true"),
                                                               parse_override("plan.recompute=full"),
                                                               parse_override("plan.cpu_checkpointing=true")}),
                                    a100); }),
             Catch::Contains("plan.enable_activation_offloading: true with DeepSpeed's cpu_checkpointing, which moves the same "
                             "checkpoints; drop one"));
  CHECK_THAT(error_of([&] { predict(*llama, load_plan("ddp", {parse_override("plan.enable_activation_offloading=true"),
                                                               parse_override("plan.recompute=full"),
                                                               parse_override("plan.recompute_num_layers=2")}),
                                    a100); }),
             Catch::Contains("torchtune checkpoints each block alone"));
  const ClusterSpec dgx = load_cluster("dgx-a100");
  CHECK_THAT(error_of([&] { predict(*llama, load_plan("ddp", {parse_override("plan.enable_activation_offloading=true"),
                                                               parse_override("plan.pp=2"), parse_override("plan.dp=4")}),
                                    dgx); }),
             Catch::Contains("true with pp 2: torchtune runs no pipeline"));
}
