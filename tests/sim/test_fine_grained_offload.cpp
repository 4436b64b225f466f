// Megatron-Core's fine-grained activation offloading (Note [Fine-grained
// offload] in sim/src/lowering/passes/fine_grained_offload.cpp): which
// groups go, what they free, what their copies leave exposed, and what
// Megatron-Core refuses.
#include <catch2/catch.hpp>

#include <algorithm>
#include <cmath>
#include <map>
#include <string>
#include <vector>

#include "dtsim/models/models.hpp"
#include "dtsim/sim/config_io.hpp"
#include "dtsim/sim/framework_config.hpp"
#include "dtsim/sim/predict.hpp"
#include "dtsim/sim/search.hpp"
#include "test_util.hpp"

using namespace dtsim;
using namespace dtsim::sim;
using dtsim::test::error_of;

namespace {

// GPT-2 at micro-batch 8 of 1,024 tokens in bf16 with fused attention: a
// block's Q, K and V (the core_attn group: its log-sum-exp, 8 x 12 x 1,024
// fp32, is under the 2^20 elements Megatron-Core offloads at least) and
// linear_proj's input (attn_proj) are t h = 6,291,456 elements, 2 bytes
// each: "eth" bytes apiece.
constexpr std::int64_t kTh = 8LL * 1024 * 768;
constexpr Bytes kEth = 2 * kTh;

/// GPT-2 on dgx-h100 GPUs (one a stage) at micro-batch 8, `sets` applied;
/// a host link of 10^6 GB/s unless `sets` says otherwise, so that a copy
/// is its 10 us launch.
Prediction gpt2(std::vector<std::string> sets, const PredictOptions& options = {}) {
  const auto model = models::load_model("gpt2");
  std::vector<Override> plan = {parse_override("plan.dp=1"), parse_override("plan.micro_batch=8"), parse_override("plan.precision=bf16")};
  std::vector<Override> cluster = {parse_override("cluster.host.device_bandwidth_GBps=1000000")};
  int pp = 1;
  for (const auto& s : sets) {
    (s.rfind("cluster.", 0) == 0 ? cluster : plan).push_back(parse_override(s));
    if (s.rfind("plan.pp=", 0) == 0) pp = std::stoi(s.substr(8));
  }
  cluster.push_back(parse_override("cluster.gpus_per_node=" + std::to_string(pp)));
  return predict(*model, load_plan("ddp", plan), load_cluster("dgx-h100", cluster), options);
}

const std::vector<std::string> kAttention = {"plan.fine_grained_activation_offloading=true", "plan.offload_modules=[core_attn,attn_proj]"};

std::vector<std::string> with(std::vector<std::string> a, const std::vector<std::string>& b) {
  a.insert(a.end(), b.begin(), b.end());
  return a;
}

TaskId task(const TaskGraph& g, const std::string& name) { return dtsim::test::task_named(g, name); }
using dtsim::test::waits_for;

}  // namespace

TEST_CASE("fine-grained offload: one stage frees every block's groups but the last block's", "[offload][fine-grained]") {
  // One stage: each micro-batch's backward comes right after its forward,
  // so Megatron-Core keeps each module's last group (h.11's core_attn and
  // attn_proj). The peak is as the head's backward begins, every block's
  // activations held: h.0 to h.10's 3 + 1 eth went, 44 eth in all.
  const std::vector<std::string> one = {"plan.grad_accum=1"};
  const Prediction none = gpt2(one), off = gpt2(with(one, kAttention));
  CHECK(none.ranks[0].peak - off.ranks[0].peak == 44 * kEth);
  CHECK(off.ranks[0].parameters == none.ranks[0].parameters);
  // Exposed: h.N's core_attn copy comes back as its attn_proj's backward
  // ends, which is right where its own begins: the whole copy, 10 us and
  // 3 eth over 10^15 B/s (37.7 ns, rounded up), for h.0 .. h.10. The
  // attn_proj copies come back behind the MLP's backward.
  const TimeNs copy = 10'000 + static_cast<TimeNs>(std::ceil(3.0 * static_cast<double>(kEth) / 1e15 * 1e9));
  CHECK(off.breakdown.offload == 11 * copy);
  CHECK(off.iteration_time - none.iteration_time == 11 * copy);
}

TEST_CASE("fine-grained offload: the first backward and a backward right after its forward keep each module's last group",
          "[offload][fine-grained][pipeline]") {
  // pp 2, 1F1B: stage 0 holds the embedding and h.0 .. h.7, stage 1 h.8 ..
  // h.11 and the head (gpt2's balanced split, [9, 5]).
  const std::vector<std::string> pipe = {"plan.pp=2", "plan.schedule=1f1b"};
  {
    // One micro-batch: each stage's only backward is its first. Stage 0
    // keeps h.7's groups, offloads h.0 .. h.6 (28 eth); at its backward's
    // start the last offloaded group (h.6's attn_proj, 1 eth) and the
    // largest other (a core_attn, 3 eth) are back: 24 eth less. Stage 1
    // keeps h.11's and offloads h.8 .. h.10 (12 eth): 12 - 1 - 3 = 8 less.
    const std::vector<std::string> one = with(pipe, {"plan.grad_accum=1"});
    const Prediction none = gpt2(one), off = gpt2(with(one, kAttention));
    REQUIRE(off.ranks.size() == 2);
    CHECK(none.ranks[0].peak - off.ranks[0].peak == 24 * kEth);
    CHECK(none.ranks[1].peak - off.ranks[1].peak == 8 * kEth);
  }
  // Four micro-batches: stage 0's first backward is micro-batch 0's (it
  // keeps h.7's groups, 28 eth go); micro-batches 1 to 3 run their
  // backward after another's forward and offload all 8 blocks' (32 eth).
  // Stage 1 runs every backward right after its forward: 12 eth each. Each
  // chunk's copy up carries what it offloaded (Task::bytes).
  PredictOptions o;
  o.keep_graph = true;
  const Prediction four = gpt2(with(with(pipe, {"plan.grad_accum=4"}), kAttention), o);
  for (int mb = 0; mb < 4; ++mb) {
    const std::string at = " [mb " + std::to_string(mb) + "]";
    const TaskId s0 = task(four.graph, "h2d activations chunk 0" + at), s1 = task(four.graph, "h2d activations chunk 1" + at);
    REQUIRE(s0 >= 0);
    REQUIRE(s1 >= 0);
    CHECK(four.graph.tasks[static_cast<std::size_t>(s0)].bytes == (mb == 0 ? 28 : 32) * kEth);
    CHECK(four.graph.tasks[static_cast<std::size_t>(s1)].bytes == 12 * kEth);
    // The chunk's backward waits for its copies up; micro-batch m's copy
    // up starts once the stage's previous backward is done.
    const TaskId wait = task(four.graph, "reload wait chunk 0" + at);
    REQUIRE(wait >= 0);
    CHECK(waits_for(four.graph, wait, s0));
    if (mb > 0) CHECK(waits_for(four.graph, s0, task(four.graph, "bwd chunk 0 [mb " + std::to_string(mb - 1) + "]")));
  }
}

TEST_CASE("fine-grained offload: the fraction, the per-stage delta and the smallest tensor", "[offload][fine-grained]") {
  const std::vector<std::string> one = {"plan.grad_accum=1"};
  const Prediction none = gpt2(one);
  // activation_offload_fraction 0.5: of the 22 groups left once h.11's
  // stay, the last 11 in forward order stay too (h.10 .. h.6, and h.5's
  // attn_proj): h.0 .. h.4 (4 eth each) and h.5's core_attn (3) go, 23 eth.
  CHECK(none.ranks[0].peak - gpt2(with(one, with(kAttention, {"plan.activation_offload_fraction=0.5"}))).ranks[0].peak == 23 * kEth);
  // Selective recompute of the core (Megatron-Core's default module) runs it
  // checkpointed, outside its group: only attn_proj goes, 11 eth.
  CHECK(none.ranks[0].peak - gpt2(with(one, with(kAttention, {"plan.recompute=selective"}))).ranks[0].peak == 11 * kEth);
  // min_offloaded_tensor_size: one element more than a block's tensors and
  // nothing goes; exactly theirs and all of them do.
  const Prediction small = gpt2(with(one, with(kAttention, {"plan.min_offloaded_tensor_size=" + std::to_string(kTh + 1)})));
  CHECK(small.ranks[0].peak == none.ranks[0].peak);
  CHECK(small.iteration_time == none.iteration_time);
  CHECK(none.ranks[0].peak - gpt2(with(one, with(kAttention, {"plan.min_offloaded_tensor_size=" + std::to_string(kTh)}))).ranks[0].peak ==
        44 * kEth);
  // delta_offload_bytes_across_pp_ranks 8 eth: stage 1 keeps 1 x 8 eth of
  // its first backward's groups (micro-batch 0: h.8's and h.9's, 3 + 1 + 3
  // + 1), so that one offloads h.10's 4 eth alone; stage 0 keeps none.
  PredictOptions o;
  o.keep_graph = true;
  const Prediction delta = gpt2(with({"plan.pp=2", "plan.schedule=1f1b", "plan.grad_accum=4",
                                      "plan.delta_offload_bytes_across_pp_ranks=" + std::to_string(8 * kEth)},
                                     kAttention),
                                o);
  const auto bytes = [&](const std::string& name) {
    const TaskId t = task(delta.graph, name);
    REQUIRE(t >= 0);
    return delta.graph.tasks[static_cast<std::size_t>(t)].bytes;
  };
  CHECK(bytes("h2d activations chunk 1 [mb 0]") == 4 * kEth);
  CHECK(bytes("h2d activations chunk 1 [mb 1]") == 12 * kEth);
  CHECK(bytes("h2d activations chunk 0 [mb 0]") == 28 * kEth);
}

TEST_CASE("fine-grained offload: a slow host link queues the copies down, and the copies up wait for them", "[offload][fine-grained]") {
  // At 1 GB/s a block's attn_proj copy (1 eth, 12.6 ms) outlasts every
  // forward: each block's copy down runs on after it, one after another on
  // the d2h stream, holding its memory until done; a block's copy up waits
  // for its copy down and the backward above it.
  PredictOptions o;
  o.keep_graph = true;
  const std::vector<std::string> slow = {"plan.grad_accum=1", "cluster.host.device_bandwidth_GBps=1", "plan.fine_grained_activation_offloading=true",
                                         "plan.offload_modules=[core_attn,attn_proj]"};
  const Prediction p = gpt2(slow, o);
  const TaskGraph& g = p.graph;
  const TimeNs copy = 10'000 + static_cast<TimeNs>(std::ceil(static_cast<double>(kEth) / 1e9 * 1e9));
  for (int b = 0; b < 11; ++b) {
    const std::string h = "h." + std::to_string(b);
    const TaskId down = task(g, "d2h activations " + h + " [mb 0]"), up = task(g, "h2d activations " + h + " [mb 0]");
    REQUIRE(down >= 0);
    REQUIRE(up >= 0);
    CHECK(waits_for(g, down, task(g, "fwd " + h + " [mb 0]")));
    CHECK(waits_for(g, up, down));
    CHECK(waits_for(g, up, task(g, "bwd h." + std::to_string(b + 1) + " [mb 0]")));
    CHECK(waits_for(g, task(g, "reload wait " + h + " [mb 0]"), up));
  }
  // Each block copies 4 eth down: at least 11 x 4 eth of copies run one
  // after another before h.10's backward may begin, and 11 x 4 more up.
  CHECK(p.iteration_time >= gpt2({"plan.grad_accum=1"}).iteration_time + 11 * 4 * (copy - 10'000));
  CHECK(p.breakdown.offload > 0);
}

TEST_CASE("fine-grained offload: max_inflight_offloads makes the compute stream wait for the copies down", "[offload][fine-grained]") {
  // At 1 GB/s: a block's core_attn copy is 10 us + 3 eth / 10^9 B/s, its
  // attn_proj copy 10 us + 1 eth's. N = 0: each commit waits for its own
  // copy, so each block h.0 .. h.10 (h.11's stay) waits both in turn after
  // its forward (the queue is empty as each starts: the block before
  // waited for all of its own).
  PredictOptions o;
  o.keep_graph = true;
  const std::vector<std::string> slow = {"plan.grad_accum=1", "cluster.host.device_bandwidth_GBps=1", "plan.fine_grained_activation_offloading=true",
                                         "plan.offload_modules=[core_attn,attn_proj]"};
  const auto copy = [](double bytes) { return 10'000 + static_cast<TimeNs>(std::ceil(bytes / 1e9 * 1e9)); };
  const Prediction zero = gpt2(with(slow, {"plan.fine_grained_offloading_max_inflight_offloads=0"}), o);
  for (int b = 0; b < 11; ++b) {
    const TaskId wait = task(zero.graph, "offload wait h." + std::to_string(b) + " [mb 0]");
    REQUIRE(wait >= 0);
    CHECK(zero.graph.tasks[static_cast<std::size_t>(wait)].duration == copy(3.0 * kEth) + copy(1.0 * kEth));
  }
  CHECK(task(zero.graph, "offload wait h.11 [mb 0]") < 0);
  // N = 1: block h.N's commits wait for h.N-1's copies of the same module
  // (the one-stage chunk's queue runs across its layers); h.0 waits for none.
  const Prediction one = gpt2(with(slow, {"plan.fine_grained_offloading_max_inflight_offloads=1"}), o);
  CHECK(task(one.graph, "offload wait h.0 [mb 0]") < 0);
  for (int b = 1; b < 11; ++b) {
    const TaskId wait = task(one.graph, "offload wait h." + std::to_string(b) + " [mb 0]");
    REQUIRE(wait >= 0);
    CHECK(waits_for(one.graph, wait, task(one.graph, "d2h activations h." + std::to_string(b - 1) + " [mb 0]")));
    CHECK(one.graph.tasks[static_cast<std::size_t>(wait)].duration == 0);
  }
}

TEST_CASE("fine-grained offload is refused where Megatron-Core refuses it, in one line", "[offload][fine-grained][bad-input]") {
  const auto gpt2 = models::load_model("gpt2");
  const auto moe = models::load_model("moe-tiny");
  const ClusterSpec c = load_cluster("dgx-h100");
  auto plan = [](const std::vector<std::string>& sets) {
    std::vector<Override> o;
    for (const auto& s : sets) o.push_back(parse_override(s));
    return load_plan("ddp", o);
  };
  const std::string on = "plan.fine_grained_activation_offloading=true";
  CHECK_THAT(error_of([&] { predict(*gpt2, plan({on}), c); }),
             Catch::Contains("plan.fine_grained_activation_offloading: true needs offload_modules (Megatron-Core asserts a non-empty "
                             "list); valid for gpt2: qkv_linear, core_attn, attn_proj"));
  CHECK_THAT(error_of([&] { predict(*gpt2, plan({"plan.offload_modules=[core_attn]"}), c); }),
             Catch::Contains("plan.offload_modules: core_attn is read only with fine_grained_activation_offloading: true"));
  CHECK_THAT(error_of([&] { predict(*gpt2, plan({on, "plan.offload_modules=[attn_proj]"}), c); }),
             Catch::Contains("plan.offload_modules: attn_proj without core_attn: Megatron-Core raises"));
  // A module the model has not is skipped, as Megatron-Core's layers skip
  // it, and said.
  const auto warned = [](const Prediction& p, const std::string& text) {
    return std::any_of(p.warnings.begin(), p.warnings.end(), [&](const std::string& w) { return w.find(text) != std::string::npos; });
  };
  const Prediction none = predict(*gpt2, plan({on, "plan.offload_modules=[expert_fc1]"}), c);
  CHECK(none.plan.offload_modules == 0);
  CHECK(warned(none, "plan.offload_modules: expert_fc1: gpt2 has none of them, nothing is offloaded (as Megatron-Core skips them)"));
  const Prediction some = predict(*gpt2, plan({on, "plan.offload_modules=[core_attn,mlp_norm]"}), c);
  CHECK(some.plan.offload_modules == kOffloadCoreAttn);
  CHECK(warned(some, "plan.offload_modules: mlp_norm: gpt2 has no such module, nothing of it is offloaded (as Megatron-Core skips it); "
                     "a norm is its own module only where Transformer Engine does not fuse it"));
  CHECK_THAT(error_of([&] { predict(*moe, plan({on, "plan.offload_modules=[fused_group_mlp,moe_act]"}), c); }),
             Catch::Contains("plan.offload_modules: fused_group_mlp with moe_act: Megatron-Core raises"));
  CHECK_THAT(error_of([&] { predict(*moe, plan({on, "plan.offload_modules=[expert_fc1]", "plan.recompute=selective",
                                                "plan.recompute_modules=[moe]"}), c); }),
             Catch::Contains("plan.offload_modules: expert_fc1 with recompute_modules moe: Megatron-Core asserts"));
  CHECK_THAT(error_of([&] { predict(*gpt2, plan({on, "plan.offload_modules=[core_attn]", "plan.cpu_offloading_num_layers=2"}), c); }),
             Catch::Contains("plan.fine_grained_activation_offloading: true with cpu_offloading_num_layers 2: Megatron-Core asserts"));
  CHECK_THAT(error_of([&] { predict(*gpt2, plan({on, "plan.offload_modules=[core_attn]", "plan.recompute=full"}), c); }),
             Catch::Contains("plan.fine_grained_activation_offloading: true with recompute full"));
  CHECK_THAT(error_of([&] { predict(*models::load_model("llama-tiny"), plan({on, "plan.offload_modules=[core_attn]", "plan.recompute=op"}), c); }),
             Catch::Contains("plan.fine_grained_activation_offloading: true with recompute op: torchtitan's op-level policy, not "
                             "Megatron-Core's; valid with it: recompute none or selective"));
  CHECK_THAT(error_of([&] { predict(*gpt2, plan({on, "plan.offload_modules=[core_attn]", "plan.pp=2", "plan.dp=4", "plan.schedule=zb-h1"}), c); }),
             Catch::Contains("plan.fine_grained_activation_offloading: true with schedule zb-h1: Megatron-Core has no zero-bubble schedule"));
  CHECK_THAT(error_of([&] { predict(*gpt2, plan({on, "plan.offload_modules=[core_attn]"}), load_cluster("local-cpu")); }),
             Catch::Contains("a CPU's activations are in host memory already; valid: false"));
  CHECK_THAT(error_of([&] { load_plan("ddp", {parse_override("plan.offload_modules=[core_atn]")}); }),
             Catch::Contains("plan.offload_modules: 'core_atn' is not one of Megatron-Core's offload modules (did you mean 'core_attn'?)"));
  CHECK_THAT(error_of([&] { load_plan("ddp", {parse_override("plan.activation_offload_fraction=1.5")}); }),
             Catch::Contains("plan.activation_offload_fraction: 1.5 is out of range"));
}

TEST_CASE("fine-grained offload is read from Megatron-LM's flags and Megatron-Bridge's fields", "[offload][fine-grained][config]") {
  const auto keys = [](const FrameworkConfig& fc) {
    std::map<std::string, std::string> out;
    for (const auto& o : fc.overrides) out[o.section + "." + o.path] = o.value;
    return out;
  };
  const FrameworkConfig args = parse_megatron_args(
      "--micro-batch-size 1 --fine-grained-activation-offloading --offload-modules core_attn attn_proj expert_fc1 "
      "--min-offloaded-tensor-size 500000000 --activation-offload-fraction 0.8 --delta-offload-bytes-across-pp-ranks 1073741824\n",
      "cmd");
  CHECK(args.unmodelled.empty());
  CHECK(keys(args)["plan.fine_grained_activation_offloading"] == "true");
  CHECK(keys(args)["plan.offload_modules"] == "[core_attn attn_proj expert_fc1]");
  CHECK(keys(args)["plan.min_offloaded_tensor_size"] == "500000000");
  CHECK(keys(args)["plan.activation_offload_fraction"] == "0.8");
  CHECK(keys(args)["plan.delta_offload_bytes_across_pp_ranks"] == "1073741824");
  CHECK(keys(parse_megatron_args("--micro-batch-size 1 --fine-grained-activation-offloading --offload-modules core_attn "
                                 "--fine-grained-offloading-max-inflight-offloads 1\n",
                                 "cmd"))["plan.fine_grained_offloading_max_inflight_offloads"] == "1");
  // Without the switch Megatron-Core reads none of them: said, not applied.
  const FrameworkConfig off = parse_megatron_args("--micro-batch-size 1 --offload-modules core_attn\n", "cmd");
  CHECK(keys(off)["plan.offload_modules"] == "null");  // every key a plan reads: the plan file's default
  CHECK(off.unmodelled == std::vector<std::string>{"--offload-modules core_attn (read only with --fine-grained-activation-offloading)"});
  const FrameworkConfig bridge = parse_megatron_bridge_config(
      "train:\n  micro_batch_size: 1\nmodel:\n  fine_grained_activation_offloading: true\n  offload_modules: [fused_group_mlp]\n"
      "  min_offloaded_tensor_size: 500000000\n",
      "run_config.yaml");
  CHECK(keys(bridge)["plan.fine_grained_activation_offloading"] == "true");
  CHECK(keys(bridge)["plan.offload_modules"] == "[fused_group_mlp]");
  CHECK(keys(bridge)["plan.min_offloaded_tensor_size"] == "500000000");
  // What Megatron-Core does beside it that dtsim does not model is said.
  const FrameworkConfig beside = parse_megatron_bridge_config(
      "train:\n  micro_batch_size: 1\nmodel:\n  delay_offload_until_cuda_graph: true\n  moe_paged_stash: true\n", "run_config.yaml");
  CHECK(beside.unmodelled == std::vector<std::string>{"model.delay_offload_until_cuda_graph=true (offload copies issued as eager)",
                                                       "model.moe_paged_stash=true (the experts' activations priced as kept at their rows)"});
  // The plan reads a list of names or one string.
  const PlanSpec p = load_plan("ddp", {parse_override("plan.fine_grained_activation_offloading=true"),
                                       parse_override("plan.offload_modules=core_attn,attn_proj")});
  CHECK(p.offload_modules == (kOffloadCoreAttn | kOffloadAttnProj));
}

TEST_CASE("fine-grained offload is not searched, and said so", "[offload][fine-grained][search]") {
  // As the other offloads: the search's memory bound does not count it.
  SearchOptions o;
  o.base = load_plan("ddp", {parse_override("plan.fine_grained_activation_offloading=true"), parse_override("plan.offload_modules=[core_attn]")});
  o.global_batch = 64;
  o.threads = 1;
  const auto model = models::load_model("gpt2");
  const SearchResult r = search(*model, load_cluster("dgx-h100"), o);
  REQUIRE(!r.top.empty());
  for (const SearchEntry& e : r.top) CHECK(e.plan.offload_modules == 0);
  bool said = false;
  for (const std::string& w : r.warnings) said = said || w.find("plan.fine_grained_activation_offloading: true is not searched") != std::string::npos;
  CHECK(said);
}
