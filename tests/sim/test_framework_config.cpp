// The framework importers (framework_config.hpp) on the sample files of
// configs/frameworks/: every expected value below is read off the sample by
// hand and mapped as the framework's own source defines it (cited per test).
#include <catch2/catch.hpp>

#include "test_util.hpp"

#include <algorithm>
#include <filesystem>
#include <fstream>
#include <map>
#include <string>

#include <unistd.h>

#include "dtsim/models/models.hpp"
#include "dtsim/sim/config_io.hpp"
#include "dtsim/sim/error.hpp"
#include "dtsim/sim/framework_config.hpp"
#include "dtsim/sim/lowering.hpp"
#include "dtsim/sim/plan.hpp"
#include "dtsim/sim/predict.hpp"

using namespace dtsim;
using namespace dtsim::sim;
using dtsim::test::error_of;

namespace {

std::string sample(const std::string& rel) { return std::string(DTSIM_CONFIG_DIR_FOR_TESTS) + "/frameworks/" + rel; }

/// "plan.tp" -> "8", for the overrides an importer gave.
std::map<std::string, std::string> keys(const FrameworkConfig& fc) {
  std::map<std::string, std::string> out;
  for (const auto& o : fc.overrides) out[o.section + "." + o.path] = o.value;
  return out;
}

std::string from_of(const FrameworkConfig& fc, const std::string& key) {
  for (const auto& o : fc.overrides) {
    if (o.section + "." + o.path == key) return o.from;
  }
  return "";
}

bool listed(const FrameworkConfig& fc, const std::string& prefix) {
  return std::any_of(fc.unmodelled.begin(), fc.unmodelled.end(), [&](const std::string& u) { return u.rfind(prefix, 0) == 0; });
}

/// The overrides of one section.
std::vector<Override> section(const FrameworkConfig& fc, const std::string& name) {
  std::vector<Override> out;
  for (const auto& o : fc.overrides) {
    if (o.section == name) out.push_back(o);
  }
  return out;
}

ResolvedPlan resolve_with(const FrameworkConfig& fc, const std::string& model, const std::string& cluster, int nodes,
                          const std::vector<Override>& user = {}) {
  const auto all = with_user_overrides(fc, user);
  const PlanSpec spec = load_plan(*fc.plan, all);
  const auto m = models::load_model(model, section(fc, "model"));
  const ClusterSpec c = load_cluster(cluster, {{"cluster", "nodes", std::to_string(nodes)}});
  return resolve(spec, *m, c);
}

}  // namespace

// deepspeed/runtime/zero/config.py: overlap_comm as given; buckets count
// elements, 2 bytes each in fp16; offload_optimizer.device cpu.
// allgather_bucket_size 2e8 differs from the 5e8 dtsim assumes.
TEST_CASE("DeepSpeed ZeRO-2 with CPU offload", "[framework]") {
  const FrameworkConfig fc = read_deepspeed_config(sample("deepspeed/zero2_offload.json"));
  CHECK(fc.framework == "DeepSpeed");
  REQUIRE(fc.plan == std::optional<std::string>("zero2-offload"));
  auto k = keys(fc);
  CHECK(k["plan.zero_stage"] == "2");
  CHECK(k["plan.offload_optimizer"] == "cpu");
  CHECK(k["plan.precision"] == "fp16");
  CHECK(k["plan.accumulate_allreduce_grads_in_fp32"] == "null");  // reset to false: DeepSpeed has no fp32 gradient buffer
  CHECK(k["plan.deallocate_pipeline_outputs"] == "null");  // reset to false, the default
  CHECK(k["plan.micro_batch"] == "4");
  CHECK(k["plan.grad_accum"] == "8");
  CHECK(k["plan.global_batch"] == "null");  // derived: 4 x 8 x dp
  CHECK(k["plan.overlap"] == "true");
  CHECK(k["plan.bucket_mb"] == "400");       // 2e8 elements x 2 bytes
  CHECK(k["plan.optimizer"] == "adamw");
  CHECK(k["plan.tp"] == "null");             // everything else reset to dtsim's default
  CHECK_FALSE(fc.model);
  CHECK_FALSE(fc.global_batch);
  CHECK(fc.unmodelled == std::vector<std::string>{"zero_optimization.allgather_bucket_size=2e8"});
  CHECK(unmodelled_warning(fc) == sample("deepspeed/zero2_offload.json") +
                                      ": DeepSpeed settings dtsim does not model, ignored: zero_optimization.allgather_bucket_size=2e8");
  CHECK(from_of(fc, "plan.micro_batch") == sample("deepspeed/zero2_offload.json") + ":2 (train_micro_batch_size_per_gpu)");

  // On one DGX A100 (8 GPUs): global = 4 x 8 x 8 = 256 (config.py's rule).
  const ResolvedPlan r = resolve_with(fc, "gpt2-xl", "dgx-a100", 1);
  CHECK(r.zero_stage == 2);
  CHECK(r.offload_optimizer == Offload::kCpu);
  CHECK(r.global_batch == 256);
  CHECK(r.bucket_bytes == 400 * 1000 * 1000);
  CHECK(r.precision == Precision::kFp16);
}

// train_batch_size 512 and the micro-batch 8 given: DeepSpeed derives
// gradient_accumulation_steps = 512 / 8 / dp (config.py,
// _set_batch_related_parameters); activation_checkpointing: full recompute.
TEST_CASE("DeepSpeed ZeRO-3 with bf16 and activation checkpointing", "[framework]") {
  const FrameworkConfig fc = read_deepspeed_config(sample("deepspeed/zero3.json"));
  REQUIRE(fc.plan == std::optional<std::string>("zero3"));
  auto k = keys(fc);
  CHECK(k["plan.zero_stage"] == "3");
  CHECK(k["plan.precision"] == "bf16");
  CHECK(k["plan.global_batch"] == "512");
  CHECK(k["plan.micro_batch"] == "8");
  CHECK(k["plan.grad_accum"] == "null");
  CHECK(k["plan.bucket_mb"] == "1000");  // 5e8 elements x 2 bytes
  CHECK(k["plan.overlap"] == "true");
  CHECK(k["plan.optimizer"] == "adam");
  CHECK(k["plan.recompute"] == "full");
  CHECK(fc.global_batch == std::optional<std::int64_t>(512));
  // The coordinator's knobs as written (Note [ZeRO-3 modules]); the
  // persistence threshold 1e6 is ten times DeepSpeed's default.
  CHECK(k["plan.stage3_prefetch_bucket_size"] == "50000000");
  CHECK(k["plan.stage3_max_live_parameters"] == "1000000000");
  CHECK(k["plan.stage3_max_reuse_distance"] == "1000000000");
  CHECK(k["plan.stage3_param_persistence_threshold"] == "1000000");
  // sub_group_size 1e9 is DeepSpeed's default, which dtsim assumes.
  CHECK(fc.unmodelled.empty());
  // 8 GPUs: 512 / (8 x 8) = 8 micro-steps.
  const ResolvedPlan r = resolve_with(fc, "gpt2-xl", "dgx-a100", 1);
  CHECK(r.zero_stage == 3);
  CHECK(r.grad_accum == 8);
  CHECK(r.recompute == Recompute::kFull);
}

TEST_CASE("DeepSpeed's batch rule: checked where all three are given, derived otherwise", "[framework]") {
  // 8 x 3 = 24 does not divide 100: no data-parallel size satisfies 100 = 8 x 3 x dp.
  const std::string bad = "{\n  \"train_batch_size\": 100,\n  \"train_micro_batch_size_per_gpu\": 8,\n  \"gradient_accumulation_steps\": 3\n}\n";
  const std::string e = error_of([&] { parse_deepspeed_config(bad, "ds.json"); });
  CHECK(e.rfind("ds.json:2: train_batch_size: 100", 0) == 0);
  CHECK(e.find("train_micro_batch_size_per_gpu") != std::string::npos);
  CHECK(e.find("gradient_accumulation_steps") != std::string::npos);

  // 96 = 4 x 3 x dp holds for dp 8, not for the 16 GPUs of two nodes: resolve
  // names the DeepSpeed file's line and key.
  const std::string three = "{\n  \"train_batch_size\": 96,\n  \"train_micro_batch_size_per_gpu\": 4,\n  \"gradient_accumulation_steps\": 3\n}\n";
  const FrameworkConfig fc = parse_deepspeed_config(three, "ds.json");
  CHECK(resolve_with(fc, "gpt2", "dgx-a100", 1).dp == 8);
  const std::string e2 = error_of([&] { resolve_with(fc, "gpt2", "dgx-a100", 2); });
  CHECK(e2.find("ds.json:2 (train_batch_size): plan.global_batch: 96 != micro_batch x grad_accum x dp = 4 x 3 x 16") !=
        std::string::npos);

  // "auto" (HuggingFace's placeholder) counts as not given: micro-batch alone
  // gives accumulation 1 and train_batch_size = 4 x 8 GPUs.
  const FrameworkConfig a = parse_deepspeed_config(
      "{\"train_batch_size\": \"auto\", \"train_micro_batch_size_per_gpu\": 4, \"gradient_accumulation_steps\": \"auto\"}", "a.json");
  const ResolvedPlan ra = resolve_with(a, "gpt2", "dgx-a100", 1);
  CHECK(ra.grad_accum == 1);
  CHECK(ra.global_batch == 32);
  // train_batch_size alone: accumulation 1, micro-batch 64 / 8.
  const ResolvedPlan rt = resolve_with(parse_deepspeed_config("{\"train_batch_size\": 64}", "t.json"), "gpt2", "dgx-a100", 1);
  CHECK(rt.micro_batch == 8);
  CHECK(rt.grad_accum == 1);
  // Neither: DeepSpeed's assertion.
  const std::string e3 = error_of([] { parse_deepspeed_config("{\"gradient_accumulation_steps\": 4}", "n.json"); });
  CHECK(e3.find("neither train_batch_size nor train_micro_batch_size_per_gpu") != std::string::npos);
}

TEST_CASE("DeepSpeed: malformed JSON and bad values name the file and line", "[framework]") {
  // A trailing comma: nlohmann-json stops at the closing brace, line 3, column 1.
  const std::string e = error_of([] { parse_deepspeed_config("{\n  \"train_batch_size\": 64,\n}\n", "bad.json"); });
  CHECK(e.rfind("bad.json:3:1: malformed JSON", 0) == 0);
  const std::string e2 = error_of([] {
    parse_deepspeed_config("{\"train_batch_size\": 8,\n \"zero_optimization\": {\"stage\": 3,\n  \"offload_param\": {\"device\": \"gpu\"}}}", "o.json");
  });
  CHECK(e2.rfind("o.json:3: zero_optimization.offload_param.device: 'gpu' is not one of none, cpu, nvme", 0) == 0);
  const std::string e3 = error_of([] { parse_deepspeed_config("{\"train_batch_size\": 8,\n\"zero_optimization\": {\"stage\": 4}}", "s.json"); });
  CHECK(e3.rfind("s.json:2: zero_optimization.stage: 4 is out of range", 0) == 0);
  const std::string e4 = error_of([] {
    parse_deepspeed_config("{\"train_batch_size\": 8, \"fp16\": {\"enabled\": true},\n\"bf16\": {\"enabled\": true}}", "p.json");
  });
  CHECK(e4.find("p.json:2: bf16.enabled: true with fp16 enabled too") == 0);
  // NVMe offload is priced as the host's; parameters offloaded under stage 3.
  const FrameworkConfig fc = parse_deepspeed_config(
      "{\"train_batch_size\": 8, \"zero_optimization\": {\"stage\": 3, \"offload_param\": {\"device\": \"nvme\", \"nvme_path\": \"/local\"}}}",
      "n.json");
  CHECK(keys(fc)["plan.offload_params"] == "cpu");
  CHECK(listed(fc, "zero_optimization.offload_param.device=nvme"));
  // Keys dtsim has no model of are listed, never dropped.
  const FrameworkConfig p = parse_deepspeed_config("{\"train_batch_size\": 8, \"pipeline\": {\"stages\": 2}}", "x.json");
  CHECK(p.unmodelled == std::vector<std::string>{"pipeline={...}"});
}

// deepspeed/runtime/zero/stage_1_and_2.py, average_tensor: under stage 1
// zero_optimization.reduce_scatter (default true) reduces each slice to its
// owner, false all-reduces (Note [ZeRO-1's reduction]); at stage 2 false is
// not modelled and is listed.
TEST_CASE("DeepSpeed's reduce_scatter: ZeRO-1's reduction as configured", "[framework]") {
  const FrameworkConfig def = parse_deepspeed_config("{\"train_batch_size\": 8, \"zero_optimization\": {\"stage\": 1}}", "d.json");
  CHECK(keys(def)["plan.reduce_scatter"] == "true");
  CHECK(from_of(def, "plan.reduce_scatter") == "d.json (DeepSpeed's reduce_scatter default)");
  const FrameworkConfig off =
      parse_deepspeed_config("{\"train_batch_size\": 8,\n\"zero_optimization\": {\"stage\": 1,\n \"reduce_scatter\": false}}", "o.json");
  CHECK(keys(off)["plan.reduce_scatter"] == "false");
  CHECK(from_of(off, "plan.reduce_scatter") == "o.json:3 (zero_optimization.reduce_scatter)");
  CHECK(off.unmodelled.empty());
  const ResolvedPlan r = resolve_with(off, "gpt2", "dgx-a100", 1);
  CHECK(r.zero_stage == 1);
  CHECK_FALSE(r.reduce_scatter);
  const FrameworkConfig two =
      parse_deepspeed_config("{\"train_batch_size\": 8, \"zero_optimization\": {\"stage\": 2, \"reduce_scatter\": false}}", "t.json");
  CHECK(keys(two)["plan.reduce_scatter"] == "null");
  CHECK(listed(two, "zero_optimization.reduce_scatter=false"));
}

// megatron/training/arguments.py: virtual stages = (96 / 8) / 6 = 2; the
// distributed optimizer is ZeRO-1; --overlap-grad-reduce overlaps; GPT-2's
// BPE vocabulary 50,257 padded to a multiple of 128 x 8 is 51,200; ffn 4h.
TEST_CASE("Megatron-LM: GPT-3 175B launch script", "[framework]") {
  const std::string file = sample("megatron/gpt3-175b.sh");
  const FrameworkConfig fc = read_megatron_args(file);
  CHECK(fc.framework == "Megatron-LM");
  REQUIRE(fc.plan == std::optional<std::string>("megatron-3d"));
  auto k = keys(fc);
  CHECK(k["plan.tp"] == "8");
  CHECK(k["plan.pp"] == "8");
  CHECK(k["plan.schedule"] == "interleaved");
  CHECK(k["plan.virtual_stages"] == "2");
  CHECK(k["plan.sequence_parallel"] == "true");
  CHECK(k["plan.recompute"] == "selective");
  CHECK(k["plan.micro_batch"] == "1");
  CHECK(k["plan.global_batch"] == "1536");
  CHECK(k["plan.grad_accum"] == "null");
  CHECK(k["plan.seq_len"] == "2048");
  CHECK(k["plan.precision"] == "fp16");
  CHECK(k["plan.accumulate_allreduce_grads_in_fp32"] == "false");  // fp16 keeps 16-bit gradients unless asked (megatron-3d sets true)
  // argument_utils.py frees every stage's output once sent (Note [Deallocated outputs]).
  CHECK(k["plan.deallocate_pipeline_outputs"] == "true");
  CHECK(k["plan.optimizer"] == "adam");
  CHECK(k["plan.zero_stage"] == "1");
  CHECK(k["plan.overlap"] == "true");
  CHECK(k["plan.attention"] == "null");  // megatron-3d's eager reset to auto
  CHECK(k["model.family"] == "gpt");
  CHECK(k["model.layers"] == "96");
  CHECK(k["model.hidden"] == "12288");
  CHECK(k["model.heads"] == "96");
  CHECK(k["model.ffn_hidden"] == "49152");
  CHECK(k["model.seq_len"] == "2048");
  CHECK(k["model.vocab"] == "51200");
  CHECK(k["model.tied_head"] == "true");
  CHECK(k.count("model.name") == 0);
  CHECK(fc.model == std::optional<std::string>("gpt-175b"));
  CHECK(fc.global_batch == std::optional<std::int64_t>(1536));
  CHECK(from_of(fc, "plan.tp") == file + ":55 (--tensor-model-parallel-size)");
  CHECK(from_of(fc, "plan.global_batch") == file + ":35 (--global-batch-size)");
  // Learning rates, data and logging are skipped on purpose; torchrun's own flags too.
  CHECK(fc.unmodelled == std::vector<std::string>{"--rampup-batch-size 16 16 5859375"});

  // On 64 A100s: tp 8 x pp 8, dp 1, 1536 micro-batches (a multiple of pp, as interleaving needs).
  const ResolvedPlan r = resolve_with(fc, "gpt-175b", "dgx-a100", 8);
  CHECK(r.tp == 8);
  CHECK(r.pp == 8);
  CHECK(r.dp == 1);
  CHECK(r.virtual_stages == 2);
  CHECK(r.grad_accum == 1536);
  CHECK(r.zero_stage == 1);
  CHECK(models::load_model("gpt-175b", section(fc, "model"))->name() == "gpt-175b");
}

// arguments.py: --group-query-attention with --num-query-groups 8; --swiglu
// with --ffn-hidden-size 14336; untied; no biases; Llama 3 8B's shape.
TEST_CASE("Megatron-LM: Llama 3 8B arguments", "[framework]") {
  const FrameworkConfig fc = read_megatron_args(sample("megatron/llama3-8b.args"));
  REQUIRE(fc.plan == std::optional<std::string>("megatron-tp"));
  auto k = keys(fc);
  CHECK(k["plan.tp"] == "2");
  CHECK(k["plan.pp"] == "1");
  CHECK(k["plan.cp"] == "2");
  CHECK(k["plan.schedule"] == "null");
  CHECK(k["plan.sequence_parallel"] == "true");
  CHECK(k["plan.zero_stage"] == "1");
  CHECK(k["plan.precision"] == "bf16");
  // arguments.py turns --accumulate-allreduce-grads-in-fp32 on under bf16.
  CHECK(k["plan.accumulate_allreduce_grads_in_fp32"] == "true");
  CHECK(k["plan.recompute"] == "full");  // uniform, 1 layer: every layer
  CHECK(k["plan.micro_batch"] == "1");    // --micro-batch-size=1
  CHECK(k["plan.global_batch"] == "128");
  CHECK(k["plan.seq_len"] == "8192");
  CHECK(k["model.family"] == "llama");
  CHECK(k["model.kv_heads"] == "8");
  CHECK(k["model.intermediate"] == "14336");
  CHECK(k["model.tied_head"] == "false");
  CHECK(k["model.qkv_bias"] == "false");
  CHECK(k["model.head_dim"] == "null");  // --kv-channels 128 = 4096 / 32
  CHECK(k.count("model.vocab") == 0);    // the tokenizer's, not in the flags
  CHECK(fc.model == std::optional<std::string>("llama-3-8b"));
  CHECK(listed(fc, "--tokenizer-type HuggingFaceTokenizer (vocabulary not known"));
  // DistributedDataParallelConfig.overlap_param_gather (Note [Overlapped
  // parameter gather]).
  CHECK(k["plan.overlap_param_gather"] == "true");
  CHECK_FALSE(listed(fc, "--overlap-param-gather"));
  CHECK(listed(fc, "--attention-backend fused"));
  CHECK(fc.unmodelled.size() == 2);
  // 8 GPUs: dp = 8 / (2 x 2) = 2; 128 / (1 x 2) = 64 micro-steps.
  const ResolvedPlan r = resolve_with(fc, "llama-3-8b", "dgx-a100", 1);
  CHECK(r.dp == 2);
  CHECK(r.cp == 2);
  CHECK(r.grad_accum == 64);
  CHECK(r.overlap_param_gather);
}

TEST_CASE("Megatron-LM: shell words, and flags missing or malformed", "[framework]") {
  // Quotes, --flag=value, a comment, a continuation, a variable holding flags.
  const FrameworkConfig fc = parse_megatron_args(
      "# a comment --num-layers 7\nARGS=\"--tensor-model-parallel-size 2 --micro-batch-size 3\"\n"
      "torchrun pretrain_gpt.py $ARGS \\\n  --global-batch-size='48' --tokenizer-model \"a b\" --my-flag x y\n",
      "cmd");
  auto k = keys(fc);
  CHECK(k["plan.tp"] == "2");
  CHECK(k["plan.micro_batch"] == "3");
  CHECK(k["plan.global_batch"] == "48");
  CHECK(from_of(fc, "plan.global_batch") == "cmd:4 (--global-batch-size)");  // the line it stands on, after a continuation
  CHECK(fc.unmodelled == std::vector<std::string>{"--my-flag x y"});
  CHECK_FALSE(fc.model);
  // Megatron-Core's RMSNorm and SwiGLU are fused kernels under either
  // --transformer-impl (Note [Fused kernels]); unfusing the SwiGLU is noted.
  CHECK(k["plan.kernels"] == "fused");
  CHECK(parse_megatron_args("--micro-batch-size 1 --transformer-impl local --no-bias-swiglu-fusion\n", "cmd").unmodelled ==
        std::vector<std::string>{"--no-bias-swiglu-fusion (priced as the fused SwiGLU, which keeps one intermediate less)"});
  // --fp8-recipe: delayed, tensorwise and mxfp8 modelled, Hopper's
  // blockwise scaling noted (Note [FP8 training]).
  CHECK(keys(parse_megatron_args("--micro-batch-size 1 --fp8-format hybrid --fp8-recipe tensorwise\n", "cmd"))["plan.fp8_recipe"] == "tensorwise");
  const auto mx = parse_megatron_args("--micro-batch-size 1 --fp8-format e4m3 --fp8-recipe mxfp8\n", "cmd");
  CHECK(keys(mx)["plan.fp8_recipe"] == "mxfp8");
  CHECK(mx.unmodelled.empty());
  // --fp4-format e2m1: NVFP4 (Note [NVFP4 training]); its primary weights
  // as fp8_param_gather; never beside --fp8-format.
  const auto fp4 = parse_megatron_args("--micro-batch-size 1 --fp4-format e2m1 --fp4-recipe nvfp4 --fp4-param-gather\n", "cmd");
  CHECK(keys(fp4)["plan.precision"] == "fp4");
  CHECK(keys(fp4)["plan.fp8_param_gather"] == "true");
  CHECK(fp4.unmodelled.empty());
  // --first-last-layers-bf16 (Note [BF16 layers]): TransformerConfig's counts, 1 each unless given.
  const auto kept = parse_megatron_args("--micro-batch-size 1 --fp4-format e2m1 --first-last-layers-bf16 --num-layers-at-end-in-bf16 14\n", "cmd");
  CHECK(kept.unmodelled.empty());
  CHECK(keys(kept)["plan.first_last_layers_bf16"] == "true");
  CHECK(keys(kept)["plan.num_layers_at_start_in_bf16"] == "1");
  CHECK(keys(kept)["plan.num_layers_at_end_in_bf16"] == "14");
  CHECK(parse_megatron_args("--micro-batch-size 1 --fp4-format e2m1 --num-layers-at-start-in-bf16 2\n", "cmd").unmodelled ==
        std::vector<std::string>{"--num-layers-at-start-in-bf16 2 (read only with --first-last-layers-bf16)"});
  CHECK(error_of([] { parse_megatron_args("--micro-batch-size 1 --fp8-format e4m3 --fp4-format e2m1\n", "cmd"); }) ==
        "cmd:1: --fp4-format: given with --fp8-format; Megatron refuses both");
  CHECK(error_of([] { parse_megatron_args("--micro-batch-size 1 --fp4-format e3m0\n", "cmd"); }) ==
        "cmd:1: --fp4-format: 'e3m0' is not one of e2m1");
  CHECK(parse_megatron_args("--micro-batch-size 1 --fp8-format hybrid --fp8-recipe blockwise\n", "cmd").unmodelled ==
        std::vector<std::string>{"--fp8-recipe blockwise (blockwise scaling priced as delayed scaling's casts)"});

  CHECK(error_of([] { parse_megatron_args("--micro-batch-size 1 \\\n--tensor-model-parallel-size\n", "cmd"); }) ==
        "cmd:2: --tensor-model-parallel-size: needs an integer after it (--tensor-model-parallel-size N or --tensor-model-parallel-size=N)");
  CHECK(error_of([] { parse_megatron_args("--pipeline-model-parallel-size=four", "cmd"); })
            .rfind("cmd:1: --pipeline-model-parallel-size: 'four' is not an integer", 0) == 0);
  CHECK(error_of([] { parse_megatron_args("\n--tensor-model-parallel-size $TP", "cmd"); }).find("shell variables are not expanded") !=
        std::string::npos);
  {
    // Note [Block recompute]: --recompute-method block passes its count on,
    // and so do uniform groups of 4.
    const FrameworkConfig block = parse_megatron_args(
        "--micro-batch-size 1 --recompute-granularity full --recompute-method block --recompute-num-layers 5", "cmd");
    auto k = keys(block);
    CHECK(k["plan.recompute"] == "full");
    CHECK(k["plan.recompute_method"] == "block");
    CHECK(k["plan.recompute_num_layers"] == "5");
    CHECK(block.unmodelled.empty());
    const FrameworkConfig groups = parse_megatron_args(
        "--micro-batch-size 1 --recompute-granularity full --recompute-method uniform --recompute-num-layers 4", "cmd");
    CHECK(keys(groups)["plan.recompute_method"] == "null");
    CHECK(keys(groups)["plan.recompute_num_layers"] == "4");
    CHECK(groups.unmodelled.empty());
  }
  {
    // Note [Recompute modules]: --recompute-modules (nargs '*') under
    // selective; under full Megatron reads none of them.
    const FrameworkConfig modules = parse_megatron_args(
        "--micro-batch-size 1 --recompute-granularity selective --recompute-modules layernorm moe_act\n--bf16", "cmd");
    CHECK(keys(modules)["plan.recompute"] == "selective");
    CHECK(keys(modules)["plan.recompute_modules"] == "[layernorm moe_act]");
    CHECK(keys(modules)["plan.precision"] == "bf16");
    CHECK(parse_plan("recompute_modules: [layernorm moe_act]\n", "p").recompute_modules == (kRecomputeLayernorm | kRecomputeMoeAct));
    const FrameworkConfig full =
        parse_megatron_args("--micro-batch-size 1 --recompute-granularity full --recompute-modules mlp", "cmd");
    CHECK(keys(full)["plan.recompute_modules"] == "null");
  }
  {
    // Note [Multi-token prediction]: --mtp-num-layers, the llama family's.
    const FrameworkConfig mtp = parse_megatron_args("--micro-batch-size 1 --mtp-num-layers 1", "cmd");
    CHECK(keys(mtp)["model.mtp_layers"] == "1");
    const FrameworkConfig gpt =
        parse_megatron_args("--micro-batch-size 1 --num-layers 2 --hidden-size 64 --num-attention-heads 4 --mtp-num-layers 1", "cmd");
    CHECK(keys(gpt).count("model.mtp_layers") == 0);
    CHECK(std::find(gpt.unmodelled.begin(), gpt.unmodelled.end(),
                    "--mtp-num-layers 1 (multi-token prediction is the llama family's; add --swiglu)") != gpt.unmodelled.end());
  }
  CHECK(error_of([] { parse_megatron_args("--recompute-granularity partial", "cmd"); }) ==
        "cmd:1: --recompute-granularity: 'partial' is not one of full, selective");
  CHECK(error_of([] { parse_megatron_args("--tokenizer-model 'abc", "cmd"); }).rfind("cmd:1: unterminated single quote", 0) == 0);
  CHECK(error_of([] { parse_megatron_args("--sequence-parallel=true", "cmd"); }).find("takes no value") != std::string::npos);
  // Megatron-LM's validate_args asserts a micro-batch size; dtsim does not guess one.
  CHECK(error_of([] { parse_megatron_args("--tensor-model-parallel-size 8 --global-batch-size 1536", "--megatron-args"); }) ==
        "--megatron-args: --micro-batch-size is missing; Megatron-LM has no default for it (validate_args asserts it): add e.g. "
        "--micro-batch-size 1");
  // Inline flags that describe a model no built-in has name it by its shape.
  const FrameworkConfig inline_model = parse_megatron_args(
      "--micro-batch-size 1 --num-layers 6 --hidden-size 512 --num-attention-heads 8 --seq-length 1024 --max-position-embeddings 1024",
      "--megatron-args");
  CHECK(keys(inline_model)["model.name"] == "megatron-gpt-6l-512h");
}

// torchtitan/config/job_config.py: data_parallel_shard_degree -1 takes the
// rest (FSDP over every GPU); local_batch_size sequences per rank, global
// batch local x dp; mixed_precision_param bfloat16 by default; selective
// activation checkpointing with the op policy.
TEST_CASE("torchtitan: Llama 3 8B job", "[framework]") {
  const FrameworkConfig fc = read_torchtitan_config(sample("torchtitan/llama3_8b.toml"));
  CHECK(fc.framework == "torchtitan");
  REQUIRE(fc.plan == std::optional<std::string>("fsdp"));
  auto k = keys(fc);
  CHECK(k["plan.fsdp"] == "full_shard");
  // apply_fsdp wraps tok_embeddings, each block and [norm, output], the
  // last not resharded after its forward (Note [FSDP's root unit]).
  CHECK(k["plan.fsdp_wrap"] == "torchtitan");
  // fully_shard: FSDP2 (Note [FSDP2's reduce-scatter wait]).
  CHECK(k["plan.fsdp_version"] == "2");
  CHECK(k["plan.dp"] == "null");
  CHECK(k["plan.tp"] == "1");
  CHECK(k["plan.micro_batch"] == "1");
  CHECK(k["plan.grad_accum"] == "1");
  CHECK(k["plan.global_batch"] == "null");
  CHECK(k["plan.seq_len"] == "8192");
  CHECK(k["plan.precision"] == "bf16");
  // selective_ac_option "op": the op-level policy (Note [Op-level recompute]).
  CHECK(k["plan.recompute"] == "op");
  CHECK(k["plan.optimizer"] == "adamw");
  CHECK(fc.model == std::optional<std::string>("llama-3-8b"));
  CHECK(fc.unmodelled.empty());
  CHECK(unmodelled_warning(fc).empty());
  const ResolvedPlan r = resolve_with(fc, *fc.model, "dgx-a100", 1);
  CHECK(r.dp == 8);
  CHECK(r.zero_stage == 3);
  CHECK(r.fsdp);
  CHECK(r.fsdp_wrap == FsdpWrap::kTorchtitan);
  CHECK(r.fsdp_version == 2);
  CHECK(r.recompute == Recompute::kOp);
  CHECK(r.global_batch == 8);
  // With tensor parallelism the op policy reruns its all-gathers, which
  // are not described: priced as Megatron's selective, and said so.
  const FrameworkConfig tp2 = parse_torchtitan_config(
      "[parallelism]\ntensor_parallel_degree = 2\n[activation_checkpoint]\nmode = \"selective\"\nselective_ac_option = \"op\"\n",
      "t.toml");
  CHECK(keys(tp2)["plan.recompute"] == "selective");
  const FrameworkConfig gathered = parse_torchtitan_config("[parallelism]\ntensor_parallel_degree = 2\ndisable_loss_parallel = true\n", "t.toml");
  CHECK(keys(gathered)["plan.loss_parallel"] == "dtensor");
  CHECK(listed(gathered, "parallelism.disable_loss_parallel"));
  CHECK(listed(tp2, "activation_checkpoint.selective_ac_option"));
  // training.dtype bfloat16: everything in bf16 "without an extra copy of
  // fp32 weights" (Note [No master weights]); float32 is mixed precision's.
  CHECK(keys(fc)["plan.master_weights"] == "null");
  const FrameworkConfig pure = parse_torchtitan_config("[training]\ndtype = \"bfloat16\"\nmixed_precision_param = \"float32\"\n", "t.toml");
  CHECK(keys(pure)["plan.master_weights"] == "false");
  CHECK(keys(pure)["plan.precision"] == "bf16");
  CHECK_FALSE(listed(pure, "training.dtype"));  // modelled now, not listed as ignored
  const ResolvedPlan rp = resolve_with(pure, *fc.model, "dgx-a100", 1);
  CHECK_FALSE(rp.master_weights);
  CHECK_THROWS_WITH(parse_torchtitan_config("[training]\ndtype = \"float16\"\n", "t.toml"),
                    Catch::Contains("training.dtype: 'float16' is not one of float32, bfloat16"));
}

// torchtitan/models/llama4: flavor 17bx16e is Scout's shape without HF's
// L2 q/k norms and attention temperature (Note [Llama 4]).
TEST_CASE("torchtitan: Llama 4 Scout's preset, as torchtitan's model has it", "[framework]") {
  const FrameworkConfig fc = read_torchtitan_config(sample("torchtitan/llama4_17bx16e.toml"));
  CHECK(fc.model == std::optional<std::string>("llama-4-scout"));
  auto k = keys(fc);
  CHECK(k["model.l2_qk_norm"] == "false");
  CHECK(k["model.attn_temperature"] == "false");
  CHECK(from_of(fc, "model.l2_qk_norm").find("model.name") != std::string::npos);
  CHECK(fc.unmodelled.empty());
  const auto m = models::load_model(*fc.model, section(fc, "model"));
  CHECK(m->parameters() == 107'769'861'120);  // neither has weights
  WorkloadShape w;
  w.seq_len = 8192;
  for (const auto& l : m->layers(w)) {
    CHECK(l.signature.find("l2qk") == std::string::npos);
    CHECK(l.signature.find(",tt=") == std::string::npos);
  }
  CHECK(m->layers(w)[4].signature.find(",nope=1") != std::string::npos);
  const ResolvedPlan r = resolve_with(fc, *fc.model, "dgx-h100", 8);
  CHECK(r.tp == 8);
  CHECK(r.etp == 8);
  CHECK(r.ep == 1);
  CHECK(r.dp == 8);
  CHECK(r.fsdp);
  CHECK(r.recompute == Recompute::kFull);
  CHECK(r.micro_batch == 8);
  // Maverick's flavor likewise.
  const FrameworkConfig mav = parse_torchtitan_config("[model]\nname = \"llama4\"\nflavor = \"17bx128e\"\n", "t.toml");
  CHECK(mav.model == std::optional<std::string>("llama-4-maverick"));
  CHECK(keys(mav)["model.attn_temperature"] == "false");
}

// torchtitan/models/qwen3/__init__.py, qwen3_configs: the dense flavors
// 0.6B to 32B; 0.6B, 1.7B and 4B tie the head (enable_weight_tying=True).
TEST_CASE("torchtitan: Qwen3's dense flavors are the built-ins of their shapes", "[framework]") {
  const std::pair<const char*, const char*> flavors[] = {
      {"0.6B", "qwen3-0.6b"}, {"1.7B", "qwen3-1.7b"}, {"4B", "qwen3-4b"}, {"14B", "qwen3-14b"}, {"32B", "qwen3-32b"}};
  for (const auto& [flavor, name] : flavors) {
    INFO(flavor);
    const FrameworkConfig fc =
        parse_torchtitan_config(std::string("[model]\nname = \"qwen3\"\nflavor = \"") + flavor + "\"\n", "t.toml");
    CHECK(fc.model == std::optional<std::string>(name));
  }
  // 0.6B: dim 1024, 28 layers, 16 heads of 128, 8 KV heads, hidden 3072,
  // tied: 28 x 15,730,944 + 151,936 x 1024 + 1024 = 596,049,920.
  CHECK(models::load_model("qwen3-0.6b")->parameters() == 596'049'920);
  // A flavor it lacks: no model, and the list of those it has.
  const FrameworkConfig none = parse_torchtitan_config("[model]\nname = \"qwen3\"\nflavor = \"2B\"\n", "t.toml");
  CHECK_FALSE(none.model.has_value());
  CHECK(std::count_if(none.unmodelled.begin(), none.unmodelled.end(), [](const std::string& u) {
          return u.find("model.name=qwen3 flavor=2B (no built-in; built in: llama3 8B, 70B, 405B; qwen3 0.6B, 1.7B, 4B, 8B, 14B, "
                        "32B, 30B-A3B, 235B-A22B; deepseek_v3 16B, 236B, 671B;") == 0;
        }) == 1);
  // torchtitan's DeepSeek flavors 16B and 236B are DeepSeek-V2-Lite's and V2's shapes (Note [DeepSeek-V2]).
  const FrameworkConfig lite = parse_torchtitan_config("[model]\nname = \"deepseek_v3\"\nflavor = \"16B\"\n", "t.toml");
  CHECK(lite.model == std::optional<std::string>("deepseek-v2-lite"));
  const FrameworkConfig v2 = parse_torchtitan_config("[model]\nname = \"deepseek_v3\"\nflavor = \"236B\"\n", "t.toml");
  CHECK(v2.model == std::optional<std::string>("deepseek-v2"));
}

// Float8 training (model.converters) with FSDP's float8 all-gather; async TP
// over sequence parallelism; global 64 = 2 x 8 micro-steps x dp 4 on 32 GPUs.
TEST_CASE("torchtitan: Llama 3 70B with float8 and async tensor parallelism", "[framework]") {
  const FrameworkConfig fc = read_torchtitan_config(sample("torchtitan/llama3_70b.toml"));
  auto k = keys(fc);
  CHECK(k["plan.tp"] == "8");
  CHECK(k["plan.sequence_parallel"] == "true");
  CHECK(k["plan.tp_comm_overlap"] == "true");
  CHECK(k["plan.loss_parallel"] == "dtensor");  // torchtitan's loss_parallel with TP (disable_loss_parallel false)
  CHECK(k["plan.fsdp"] == "full_shard");
  CHECK(k["plan.micro_batch"] == "2");
  CHECK(k["plan.global_batch"] == "64");
  CHECK(k["plan.grad_accum"] == "null");
  CHECK(k["plan.precision"] == "fp8");
  CHECK(k["plan.fp8_recipe"] == "tensorwise");  // torchao's dynamic scaling
  CHECK(k["plan.fp8_param_gather"] == "true");
  CHECK(k["plan.reduce_dtype"] == "fp32");  // mixed_precision_reduce's float32 default (Note [FSDP's reduce dtype])
  CHECK(k["plan.recompute"] == "full");
  CHECK(fc.model == std::optional<std::string>("llama-3-70b"));
  CHECK(fc.global_batch == std::optional<std::int64_t>(64));
  CHECK(fc.unmodelled == std::vector<std::string>{"training.compile=true"});
  const ResolvedPlan r = resolve_with(fc, *fc.model, "dgx-h100", 4);
  CHECK(r.dp == 4);
  CHECK(r.grad_accum == 8);
  CHECK(r.precision == Precision::kFp8);
}

// torchao's MXFP8 Linear (converters = ["mx"], torchtitan's [mx]): fp8 with
// the mxfp8 recipe, Blackwell only (Note [FP8 training]).
TEST_CASE("torchtitan: MXFP8 through the mx converter", "[framework][fp8]") {
  const FrameworkConfig fc = parse_torchtitan_config(
      "[model]\nname = \"llama3\"\nflavor = \"8B\"\nconverters = [\"mx\"]\n[mx]\nrecipe_name = \"mxfp8_cublas\"\n"
      "[activation_checkpoint]\nmode = \"none\"\n",
      "m.toml");
  auto k = keys(fc);
  CHECK(k["plan.precision"] == "fp8");
  CHECK(k["plan.fp8_recipe"] == "mxfp8");
  CHECK(fc.unmodelled.empty());
  CHECK(resolve_with(fc, *fc.model, "dgx-b200", 1).fp8_recipe == Fp8Recipe::kMxfp8);
  CHECK(error_of([&] { resolve_with(fc, *fc.model, "dgx-h100", 1); }).find("plan.fp8_recipe: mxfp8 needs Blackwell") != std::string::npos);
  // torchao's row-wise Float8 recipes are priced as its per-tensor one.
  CHECK(parse_torchtitan_config("[model]\nconverters = [\"float8\"]\n[float8]\nrecipe_name = \"rowwise\"\n"
                                "[activation_checkpoint]\nmode = \"none\"\n",
                                "r.toml")
            .unmodelled == std::vector<std::string>{"float8.recipe_name=rowwise (priced as tensorwise)"});
  // An [mx] section the converters do not name converts nothing: listed.
  CHECK(parse_torchtitan_config("[mx]\nrecipe_name = \"mxfp8\"\n[activation_checkpoint]\nmode = \"none\"\n", "n.toml").unmodelled ==
        std::vector<std::string>{"mx (section; model.converters has no \"mx\")"});
  CHECK(error_of([] { parse_torchtitan_config("[model]\nconverters = [\"float8\", \"mx\"]\n", "b.toml"); }) ==
        "b.toml:2: model.converters: float8 and mx both convert the Linear layers; torchtitan takes one");
}

TEST_CASE("torchtitan: HSDP, DDP, pipelines and bad lines", "[framework]") {
  // Replicate 2 x shard 4: HSDP, dtsim's hybrid_shard (within a node).
  const FrameworkConfig h = parse_torchtitan_config(
      "[parallelism]\ndata_parallel_replicate_degree = 2\ndata_parallel_shard_degree = 4\n", "h.toml");
  CHECK(keys(h)["plan.fsdp"] == "hybrid_shard");
  CHECK(keys(h)["plan.dp"] == "8");
  CHECK(listed(h, "parallelism.data_parallel_shard_degree=4"));
  // Shard 1: replication only, DDP.
  const FrameworkConfig d = parse_torchtitan_config("[parallelism]\ndata_parallel_replicate_degree = 4\ndata_parallel_shard_degree = 1\n", "d.toml");
  CHECK(d.plan == std::optional<std::string>("ddp"));
  CHECK(keys(d)["plan.zero_stage"] == "0");
  CHECK(keys(d)["plan.dp"] == "4");
  // A pipeline of 2 interleaved stages: local 8 in micro-batches of 2 = 4 a step.
  const FrameworkConfig p = parse_torchtitan_config(
      "[training]\nlocal_batch_size = 8\n[parallelism]\npipeline_parallel_degree = 2\n"
      "pipeline_parallel_schedule = \"Interleaved1F1B\"\npipeline_parallel_microbatch_size = 2\n",
      "p.toml");
  auto k = keys(p);
  CHECK(k["plan.schedule"] == "interleaved");
  CHECK(k["plan.virtual_stages"] == "2");
  CHECK(k["plan.micro_batch"] == "2");
  CHECK(k["plan.grad_accum"] == "4");
  // FSDP2 stages under the pipeline (Note [FSDP under a pipeline]), reducing in fp32.
  CHECK(k["plan.fsdp"] == "full_shard");
  CHECK(k["plan.reduce_dtype"] == "fp32");
  CHECK_FALSE(listed(p, "parallelism.data_parallel_shard_degree=-1 with pipeline_parallel_degree=2"));
  // HSDP under a pipeline is priced as FSDP over both degrees, and said so.
  const FrameworkConfig hp = parse_torchtitan_config(
      "[parallelism]\npipeline_parallel_degree = 2\ndata_parallel_replicate_degree = 2\ndata_parallel_shard_degree = 4\n", "hp.toml");
  CHECK(keys(hp)["plan.fsdp"] == "full_shard");
  CHECK(listed(hp, "parallelism.data_parallel_replicate_degree=2 with pipeline_parallel_degree=2"));

  // A misspelt section is listed, not dropped (its degree then stays dtsim's default).
  const FrameworkConfig typo = parse_torchtitan_config("[paralellism]\ntensor_parallel_degree = 2\n", "typo.toml");
  CHECK(keys(typo)["plan.tp"] == "null");  // reset to dtsim's default, tp 1
  CHECK(listed(typo, "paralellism (section torchtitan does not have)"));
  CHECK_FALSE(listed(parse_torchtitan_config("[job]\ndump_folder = \"x\"\n[metrics]\nlog_freq = 1\n", "j.toml"), "job"));

  const std::string e = error_of([] { parse_torchtitan_config("[training]\nlocal_batch_size = \n", "t.toml"); });
  CHECK(e.rfind("t.toml:2:", 0) == 0);
  CHECK(e.find("malformed TOML") != std::string::npos);
  CHECK(error_of([] { parse_torchtitan_config("[parallelism]\ntensor_parallel_degree = \"8\"\n", "t.toml"); }) ==
        "t.toml:2: parallelism.tensor_parallel_degree: expected an integer, got \"8\" (a string)");
  CHECK(error_of([] { parse_torchtitan_config("[activation_checkpoint]\nmode = \"half\"\n", "t.toml"); }) ==
        "t.toml:2: activation_checkpoint.mode: 'half' is not one of none, selective, full");
  // Note [Non-ASCII outside strings]: where TOML takes no non-ASCII
  // character toml++ would reach undefined behaviour deciding whether it is
  // whitespace (scripts/fuzz: a Greek capital kappa, U+039A, for a number);
  // refused first, naming the line and column. In strings and comments it is TOML.
  CHECK(error_of([] { parse_torchtitan_config("[optimizer]\neps = \xce\x9a-8\n", "t.toml"); }) ==
        "t.toml:2:7: a non-ASCII character outside a string or comment; TOML takes one only inside strings and comments");
  CHECK(error_of([] { parse_torchtitan_config("[job]\ndescription = \"\"\"a \\\n  \xce\x9a\"\"\"\n", "t.toml"); })
            .rfind("t.toml:3:3: a non-ASCII character after a line-ending backslash", 0) == 0);
  const FrameworkConfig greek = parse_torchtitan_config(
      "# \xce\x9a\n[job]\ndescription = \"\xce\x9a\"\nnotes = '\xce\x9a'\nmore = \"\"\"\n\xce\x9a\"\"\"\n[parallelism]\ntensor_parallel_degree = 2\n", "g.toml");
  CHECK(keys(greek)["plan.tp"] == "2");
}

// torch/distributed/fsdp/api.py, ShardingStrategy: FULL_SHARD is ZeRO-3,
// SHARD_GRAD_OP ZeRO-2, NO_SHARD DDP, HYBRID_SHARD ZeRO-3 within a node.
TEST_CASE("FSDP's ShardingStrategy names in any spelling", "[framework][plan]") {
  const std::pair<const char*, FsdpMode> cases[] = {
      {"FULL_SHARD", FsdpMode::kFullShard},       {"full_shard", FsdpMode::kFullShard},
      {"ShardingStrategy.FULL_SHARD", FsdpMode::kFullShard}, {"Shard_Grad_Op", FsdpMode::kShardGradOp},
      {"ShardingStrategy.SHARD_GRAD_OP", FsdpMode::kShardGradOp}, {"NO_SHARD", FsdpMode::kNoShard},
      {"shardingstrategy.no_shard", FsdpMode::kNoShard}, {"HYBRID_SHARD", FsdpMode::kHybridShard},
  };
  for (const auto& [name, mode] : cases) {
    INFO(name);
    CHECK(parse_fsdp_mode(name) == mode);
    CHECK(parse_plan(std::string("fsdp: ") + name + "\n", "p.yaml").fsdp == mode);
    CHECK(parse_plan("", "p.yaml", {parse_override(std::string("plan.fsdp=") + name)}).fsdp == mode);
  }
  const auto model = models::load_model("gpt2");
  const ClusterSpec c = load_cluster("dgx-a100");
  CHECK(resolve(parse_plan("fsdp: FULL_SHARD\n", "p"), *model, c).zero_stage == 3);
  CHECK(resolve(parse_plan("fsdp: SHARD_GRAD_OP\n", "p"), *model, c).zero_stage == 2);
  CHECK(resolve(parse_plan("fsdp: NO_SHARD\n", "p"), *model, c).zero_stage == 0);
  CHECK(resolve(parse_plan("fsdp: HYBRID_SHARD\n", "p"), *model, c).hybrid_shard);
  CHECK(error_of([] { parse_plan("fsdp: _HYBRID_SHARD_ZERO2\n", "p.yaml"); })
            .rfind("p.yaml:1: plan.fsdp: '_HYBRID_SHARD_ZERO2' (SHARD_GRAD_OP within a node, replicated across nodes) is not modelled", 0) == 0);
  CHECK(error_of([] { parse_plan("", "p.yaml", {parse_override("plan.fsdp=SHARDED")}); })
            .rfind("--set plan.fsdp: 'SHARDED' is not one of none, full_shard, shard_grad_op, no_shard, hybrid_shard", 0) == 0);
}

TEST_CASE("a framework's config given as a plan says which option reads it", "[framework][plan]") {
  const std::string ds = sample("deepspeed/zero3.json");
  CHECK(error_of([&] { load_plan(ds); }) == ds + " looks like a DeepSpeed config; pass it as --deepspeed " + ds);
  const std::string tt = sample("torchtitan/llama3_8b.toml");
  CHECK(error_of([&] { load_plan(tt); }) == tt + " looks like a torchtitan TOML; pass it as --torchtitan " + tt);
  const std::string mg = sample("megatron/llama3-8b.args");
  CHECK(error_of([&] { load_plan(mg); }) == mg + " looks like a Megatron-LM command line; pass it as --megatron-args " + mg);
  CHECK(error_of([] { parse_plan("{\"train_batch_size\": 8, \"optimizer\": {\"type\": \"Adam\"}}", "ds_config.json"); }) ==
        "ds_config.json looks like a DeepSpeed config; pass it as --deepspeed ds_config.json");
  CHECK(error_of([] { parse_plan("[training]\nseq_len = 4\n", "job"); }) == "job looks like a torchtitan TOML; pass it as --torchtitan job");
}

TEST_CASE("the user's --set wins over a framework's config", "[framework]") {
  const FrameworkConfig fc = read_deepspeed_config(sample("deepspeed/zero2_offload.json"));
  const PlanSpec p = load_plan(*fc.plan, with_user_overrides(fc, {parse_override("plan.micro_batch=2")}));
  CHECK(p.micro_batch == 2);
  CHECK(p.grad_accum == 8);
  CHECK(p.origins.of("plan.micro_batch") == "--set plan.micro_batch");
  CHECK(p.origins.of("plan.grad_accum") == sample("deepspeed/zero2_offload.json") + ":3 (gradient_accumulation_steps)");
}

// Forced balance (Note [Forced balance] in models/torch/src/torch_layers.cpp):
// Megatron-Core's token dispatcher: --moe-token-dispatcher-type, whose
// default is allgather (TransformerConfig.moe_token_dispatcher_type in
// megatron/core/transformer/transformer_config.py), so a MoE run that does
// not name one is priced with Megatron-Core's gathers; flex is DeepEP's
// only with --moe-enable-deepep; a dense run gets no dispatcher.
TEST_CASE("Megatron-LM's token dispatcher, allgather where the flag is absent", "[framework][plan][moe]") {
  const FrameworkConfig none = parse_megatron_args("--micro-batch-size 1 --num-experts 8", "cmd");
  CHECK(keys(none)["plan.moe_dispatcher"] == "allgather");
  CHECK(from_of(none, "plan.moe_dispatcher") == "cmd:1 (--num-experts) (Megatron-Core's default --moe-token-dispatcher-type)");
  CHECK(keys(parse_megatron_args("--micro-batch-size 1 --num-experts 8 --moe-token-dispatcher-type alltoall", "cmd"))["plan.moe_dispatcher"] ==
        "alltoall");
  CHECK(keys(parse_megatron_args("--micro-batch-size 1 --num-experts 8 --moe-token-dispatcher-type flex --moe-enable-deepep", "cmd"))["plan.moe_dispatcher"] == "deepep");
  CHECK(keys(parse_megatron_args("--micro-batch-size 1", "cmd"))["plan.moe_dispatcher"] == "null");
  CHECK_THAT(error_of([] { parse_megatron_args("--micro-batch-size 1 --num-experts 8 --moe-token-dispatcher-type ring", "cmd"); }),
             Catch::Contains("moe-token-dispatcher-type") && Catch::Contains("allgather") && Catch::Contains("alltoall"));
}

// Megatron-Core's --moe-router-force-load-balancing (store_true,
// megatron/training/arguments.py), torchtitan's [debug]
// moe_force_load_balance and, in older releases, [training]
// debug_moe_force_load_balance (job_config.py) all set
// plan.moe_force_load_balance; the plan refuses it beside an imbalance.
TEST_CASE("forced MoE load balance from Megatron-LM and torchtitan, and not beside an imbalance", "[framework][plan]") {
  const FrameworkConfig m = parse_megatron_args("--micro-batch-size 1 --num-experts 8 --moe-router-force-load-balancing", "cmd");
  CHECK(keys(m)["plan.moe_force_load_balance"] == "true");
  CHECK(from_of(m, "plan.moe_force_load_balance") == "cmd:1 (--moe-router-force-load-balancing)");
  CHECK(keys(parse_megatron_args("--micro-batch-size 1 --num-experts 8", "cmd"))["plan.moe_force_load_balance"] == "null");
  const FrameworkConfig t = parse_torchtitan_config("[debug]\nmoe_force_load_balance = true\n", "t.toml");
  CHECK(keys(t)["plan.moe_force_load_balance"] == "true");
  CHECK(from_of(t, "plan.moe_force_load_balance") == "t.toml:2 (debug.moe_force_load_balance)");
  const FrameworkConfig old = parse_torchtitan_config("[training]\ndebug_moe_force_load_balance = true\n", "o.toml");
  CHECK(keys(old)["plan.moe_force_load_balance"] == "true");
  CHECK_FALSE(listed(old, "training.debug_moe_force_load_balance"));
  CHECK(keys(parse_torchtitan_config("[debug]\nmoe_force_load_balance = false\n", "f.toml"))["plan.moe_force_load_balance"] == "null");

  const auto model = models::load_model("moe-tiny");
  const ClusterSpec c = load_cluster("dgx-a100");
  CHECK(resolve(parse_plan("moe_force_load_balance: true\n", "p"), *model, c).moe_force_load_balance);
  CHECK_FALSE(resolve(parse_plan("", "p"), *model, c).moe_force_load_balance);
  CHECK(error_of([&] { resolve(parse_plan("moe_force_load_balance: true\nmoe_imbalance: 1.5\n", "p.yaml"), *model, c); }) ==
        "p.yaml:1: plan.moe_force_load_balance: true routes every expert the same share of tokens, so moe_imbalance must be 1 "
        "(it is 1.5); drop one of the two");
}

// Note [Megatron's gradient buffer]: --grad-reduce-in-bf16 keeps bf16
// gradients; the flag asks for fp32 ones under fp16 too.
TEST_CASE("Megatron-LM: the gradient buffer's type follows arguments.py", "[framework]") {
  auto fp32_grads = [](const std::string& flags) {
    return keys(parse_megatron_args("--micro-batch-size 1 " + flags, "cmd"))["plan.accumulate_allreduce_grads_in_fp32"];
  };
  CHECK(fp32_grads("--bf16") == "true");
  CHECK(fp32_grads("--bf16 --grad-reduce-in-bf16") == "false");
  CHECK(fp32_grads("--fp16") == "false");
  CHECK(fp32_grads("--fp16 --accumulate-allreduce-grads-in-fp32") == "true");
  // In 16 bits the buffer is there all the same (Note [Megatron's gradient
  // buffer]); Megatron-FSDP has its own.
  CHECK(keys(parse_megatron_args("--micro-batch-size 1 --bf16 --grad-reduce-in-bf16", "cmd"))["plan.megatron_grad_buffer"] == "true");
  CHECK(keys(parse_megatron_args("--micro-batch-size 1 --bf16 --use-megatron-fsdp", "cmd"))["plan.megatron_grad_buffer"] == "false");
}

// Megatron-LM's arguments.py: --use-precision-aware-optimizer with its four
// dtype flags (choices fp32/bf16, fp32/fp16, and fp32/fp16/bf16/fp8 for the
// moments); --main-grads-dtype bf16 keeps the gradient buffer in bf16, as
// it only turns accumulate_allreduce_grads_in_fp32 on while that is fp32.
TEST_CASE("Megatron-LM: the precision-aware optimizer's flags (Note [Precision-aware optimizer])", "[framework]") {
  const std::string base = "--micro-batch-size 1 --bf16 --use-distributed-optimizer ";
  const FrameworkConfig fc = parse_megatron_args(
      base + "--use-precision-aware-optimizer --main-grads-dtype bf16 --exp-avg-dtype bf16 --exp-avg-sq-dtype fp8", "cmd");
  auto k = keys(fc);
  CHECK(k["plan.use_precision_aware_optimizer"] == "true");
  CHECK(k["plan.exp_avg_dtype"] == "bf16");
  CHECK(k["plan.exp_avg_sq_dtype"] == "fp8");
  CHECK(k["plan.main_params_dtype"] == "null");  // Megatron's fp32, the plan's default
  CHECK(k["plan.accumulate_allreduce_grads_in_fp32"] == "false");
  CHECK(fc.unmodelled.empty());
  // The remainder of the bf16 parameter (2), a bf16 and an fp8 moment.
  const ResolvedPlan r = resolve_with(fc, "gpt2-xl", "dgx-a100", 1);
  CHECK(optimizer_state_bytes_per_param(r) == 2 + 2 + 1);
  CHECK(keys(parse_megatron_args(base + "--use-precision-aware-optimizer", "cmd"))["plan.accumulate_allreduce_grads_in_fp32"] == "true");
  // Its checks, each in one line naming the flag.
  CHECK_THROWS_WITH(parse_megatron_args(base + "--exp-avg-dtype bf16", "cmd"),
                    "cmd:1: --exp-avg-dtype: 'bf16' needs --use-precision-aware-optimizer (Megatron-Core's OptimizerConfig allows only "
                    "fp32 without it); valid without it: fp32");
  CHECK_THROWS_WITH(parse_megatron_args(base + "--use-precision-aware-optimizer --main-params-dtype bf16", "cmd"),
                    "cmd:1: --main-params-dtype: 'bf16' is not one of fp32, fp16");
  CHECK_THROWS_WITH(parse_megatron_args("--micro-batch-size 1 --bf16 --use-precision-aware-optimizer", "cmd"),
                    "cmd:1: --use-precision-aware-optimizer: needs --use-distributed-optimizer (\"only supported with distributed optimizer\")");
  CHECK_THROWS_WITH(parse_megatron_args(base + "--use-precision-aware-optimizer --optimizer sgd", "cmd"),
                    Catch::Contains("--use-precision-aware-optimizer: needs --optimizer adam"));
  CHECK_THROWS_WITH(parse_megatron_args(base + "--use-precision-aware-optimizer --main-grads-dtype bf16 --accumulate-allreduce-grads-in-fp32", "cmd"),
                    Catch::Contains("--main-grads-dtype: 'bf16' with --accumulate-allreduce-grads-in-fp32"));
}

// Megatron-Bridge dumps a torch dtype as {_call_: false, _target_:
// torch.bfloat16}; store_param_remainders false is Megatron-LM's missing
// negation.
TEST_CASE("Megatron-Bridge: the optimizer's dtypes and remainders (Note [Precision-aware optimizer])", "[framework]") {
  const std::string base = "train:\n  micro_batch_size: 1\nmodel:\n  bf16: true\nddp:\n  use_distributed_optimizer: true\noptimizer:\n";
  const FrameworkConfig fc = parse_megatron_bridge_config(
      base + "  use_precision_aware_optimizer: true\n  exp_avg_dtype:\n    _call_: false\n    _target_: torch.bfloat16\n"
             "  main_params_dtype: torch.float16\n  store_param_remainders: false\n",
      "rc.yaml");
  auto k = keys(fc);
  CHECK(k["plan.use_precision_aware_optimizer"] == "true");
  CHECK(k["plan.exp_avg_dtype"] == "bf16");
  CHECK(k["plan.main_params_dtype"] == "fp16");
  CHECK(k["plan.store_param_remainders"] == "false");
  CHECK(from_of(fc, "plan.exp_avg_dtype") == "rc.yaml:9 (optimizer.exp_avg_dtype)");
  CHECK(fc.unmodelled.empty());
  CHECK_THROWS_WITH(parse_megatron_bridge_config(base + "  use_precision_aware_optimizer: true\n  exp_avg_dtype: torch.int32\n", "rc.yaml"),
                    "rc.yaml:9: optimizer.exp_avg_dtype: expected a torch dtype (torch.float32, torch.float16, torch.bfloat16 or "
                    "torch.uint8), got 'torch.int32'");
  // Without the flag MCore's OptimizerConfig refuses a narrow state.
  CHECK_THROWS_WITH(parse_megatron_bridge_config(base + "  exp_avg_sq_dtype: torch.bfloat16\n", "rc.yaml"),
                    Catch::StartsWith("rc.yaml:8: optimizer.exp_avg_sq_dtype: 'bf16' needs optimizer.use_precision_aware_optimizer"));
}

TEST_CASE("SGD's momentum as each framework sets it (Note [SGD momentum])", "[framework]") {
  // Megatron-LM: --sgd-momentum, 0.9 by default (megatron/training/arguments.py);
  // read only for --optimizer sgd.
  auto megatron = [](const std::string& flags) { return keys(parse_megatron_args("--micro-batch-size 1 " + flags, "cmd")); };
  CHECK(megatron("--optimizer sgd")["plan.sgd_momentum"] == "0.9");
  CHECK(megatron("--optimizer sgd --sgd-momentum 0")["plan.sgd_momentum"] == "0");
  CHECK(megatron("--optimizer sgd --sgd-momentum=0.5")["plan.sgd_momentum"] == "0.5");
  CHECK(megatron("--optimizer adam --sgd-momentum 0.5")["plan.sgd_momentum"] == "null");
  // DeepSpeed runs "SGD" as torch.optim.SGD with the config's params:
  // momentum 0 unless params.momentum says.
  auto deepspeed = [](const std::string& optimizer) {
    return keys(parse_deepspeed_config("{\"train_micro_batch_size_per_gpu\": 4, \"optimizer\": " + optimizer + "}", "ds.json"));
  };
  CHECK(deepspeed("{\"type\": \"SGD\", \"params\": {\"lr\": 0.1}}")["plan.sgd_momentum"] == "0");
  CHECK(deepspeed("{\"type\": \"sgd\", \"params\": {\"lr\": 0.1, \"momentum\": 0.9}}")["plan.sgd_momentum"] == "0.9");
  CHECK(deepspeed("{\"type\": \"AdamW\"}")["plan.sgd_momentum"] == "null");
  CHECK(error_of([] {
          parse_deepspeed_config("{\"train_micro_batch_size_per_gpu\": 4,\n \"optimizer\": {\"type\": \"SGD\", \"params\": {\"momentum\": 2}}}",
                                 "ds.json");
        }) == "ds.json:2: optimizer.params.momentum: 2 is out of range; valid: 0 to 1");
}

// Megatron-LM's latent attention and MoE flags (arguments.py): MLA's
// defaults --kv-lora-rank 32, --qk-head-dim 128, --qk-pos-emb-head-dim 64,
// --v-head-dim 128 and no query compression; moe_freq_type's list
// expressions; group-limited routing as the model's route_nodes.
TEST_CASE("Megatron-LM: DeepSeek-V3's latent attention, layer pattern and grouped routing", "[framework]") {
  const std::string shape =
      "--micro-batch-size 1 --num-layers 61 --hidden-size 7168 --ffn-hidden-size 18432 --num-attention-heads 128 --swiglu "
      "--normalization RMSNorm --position-embedding-type rope --untie-embeddings-and-output-weights --disable-bias-linear "
      "--multi-latent-attention --q-lora-rank 1536 --kv-lora-rank 512 --qk-head-dim 128 --qk-pos-emb-head-dim 64 --v-head-dim 128 "
      "--qk-layernorm --num-experts 256 --moe-router-topk 8 --moe-ffn-hidden-size 2048 --moe-shared-expert-intermediate-size 2048 "
      "--moe-layer-freq \"([0]*3+[1]*58)\" --moe-router-num-groups 8 --moe-router-group-topk 4 --max-position-embeddings 163840 "
      "--padded-vocab-size 129280 --mtp-num-layers 1";
  const FrameworkConfig fc = parse_megatron_args(shape, "cmd");
  auto k = keys(fc);
  CHECK(k["model.q_lora_rank"] == "1536");
  CHECK(k["model.kv_lora_rank"] == "512");
  CHECK(k["model.qk_nope_dim"] == "128");
  CHECK(k["model.qk_rope_dim"] == "64");
  CHECK(k["model.v_head_dim"] == "128");
  CHECK(k["model.kv_heads"] == "128");
  CHECK(k.count("model.qk_norm") == 0);  // under MLA the latents' norms, which MLA has anyway
  CHECK(k["model.first_dense"] == "3");  // three 0s, then 58 1s
  CHECK(k["model.route_nodes"] == "4");
  CHECK(k["model.mtp_layers"] == "1");
  CHECK(fc.unmodelled.empty());
  // Note [Megatron's split]: a pipeline without a layout splits the blocks
  // evenly, the embedding and the loss counted where asked; the virtual
  // stages from --num-layers-per-virtual-pipeline-stage count them too
  // ((94 + 2) / pp 8 = 12 a rank, / 3 = 4), or come from the layout's stages.
  {
    const auto qwen = keys(parse_megatron_args(
        "--micro-batch-size 1 --pipeline-model-parallel-size 8 --num-layers 94 --hidden-size 4096 --num-attention-heads 64 --swiglu "
        "--account-for-embedding-in-pipeline-split --account-for-loss-in-pipeline-split --num-layers-per-virtual-pipeline-stage 3",
        "cmd"));
    CHECK(qwen.at("plan.pipeline_split") == "megatron");
    CHECK(qwen.at("plan.account_for_embedding_in_pipeline_split") == "true");
    CHECK(qwen.at("plan.account_for_loss_in_pipeline_split") == "true");
    CHECK(qwen.at("plan.virtual_stages") == "4");
    const auto uneven = keys(parse_megatron_args(
        "--micro-batch-size 1 --pipeline-model-parallel-size 16 --decoder-first-pipeline-num-layers 4 --decoder-last-pipeline-num-layers 1 "
        "--num-virtual-stages-per-pipeline-rank 2", "cmd"));
    CHECK(uneven.at("plan.num_layers_in_first_pipeline_stage") == "4");
    CHECK(uneven.at("plan.num_layers_in_last_pipeline_stage") == "1");
    CHECK(uneven.at("plan.virtual_stages") == "2");
    const auto laid = keys(parse_megatron_args("--micro-batch-size 1 --pipeline-model-parallel-size 8 --pipeline-model-parallel-layout "
                                               "\"Et|(tt|)*30mL\"", "cmd"));
    CHECK(laid.at("plan.virtual_stages") == "4");  // 32 stages / pp 8
    CHECK(laid.at("plan.pipeline_split") == "null");
    CHECK(error_of([] { parse_megatron_args("--micro-batch-size 1 --pipeline-model-parallel-size 3 --pipeline-model-parallel-layout 'Et|tL'", "cmd"); }) ==
          "cmd:1: --pipeline-model-parallel-layout: 2 stages do not divide over --pipeline-model-parallel-size 3 (Megatron asserts it)");
    CHECK(keys(parse_megatron_args("--micro-batch-size 1", "cmd")).at("plan.pipeline_split") == "null");  // no pipeline
  }
  // Megatron-FSDP: arguments.py's default strategy shards parameters,
  // gradients and states (FSDP's FULL_SHARD), its gradients reduced in
  // their buffer's type; optim_grads is ZeRO-2.
  {
    const auto fsdp = keys(parse_megatron_args("--micro-batch-size 1 --bf16 --use-megatron-fsdp --use-distributed-optimizer", "cmd"));
    CHECK(fsdp.at("plan.fsdp") == "full_shard");
    CHECK(fsdp.at("plan.zero_stage") == "null");
    CHECK(fsdp.at("plan.accumulate_allreduce_grads_in_fp32") == "false");
    CHECK(fsdp.at("plan.reduce_dtype") == "fp32");  // bf16: Megatron's fp32 gradient buffer
    CHECK(keys(parse_megatron_args("--micro-batch-size 1 --bf16 --grad-reduce-in-bf16 --use-megatron-fsdp", "cmd")).at("plan.reduce_dtype") ==
          "param");
    CHECK(keys(parse_megatron_args("--micro-batch-size 1 --use-megatron-fsdp --data-parallel-sharding-strategy optim_grads", "cmd"))
              .at("plan.zero_stage") == "2");
    CHECK(error_of([] { parse_megatron_args("--micro-batch-size 1 --use-megatron-fsdp --data-parallel-sharding-strategy all", "cmd"); }) ==
          "cmd:1: --data-parallel-sharding-strategy: 'all' is not one of no_shard, optim, optim_grads, optim_grads_params");
    // HSDP (Note [Hybrid sharding]): more than one optimizer instance, the
    // state sharded across them too where the outer strategy says optim.
    const auto hsdp = keys(parse_megatron_args("--micro-batch-size 1 --use-megatron-fsdp --num-distributed-optimizer-instances 4 "
                                               "--outer-dp-sharding-strategy optim", "cmd"));
    CHECK(hsdp.at("plan.fsdp") == "hybrid_shard");
    CHECK(hsdp.at("plan.outer_dp_sharding_strategy") == "optim");
    CHECK(listed(parse_megatron_args("--micro-batch-size 1 --use-distributed-optimizer --num-distributed-optimizer-instances 2", "cmd"),
                 "--num-distributed-optimizer-instances 2 (the distributed optimizer's copies priced as one, sharded over all of data parallelism)"));
    CHECK(error_of([] { parse_megatron_args("--micro-batch-size 1 --use-megatron-fsdp --num-distributed-optimizer-instances 2 "
                                            "--outer-dp-sharding-strategy grads", "cmd"); }) ==
          "cmd:1: --outer-dp-sharding-strategy: 'grads' is not one of no_shard, optim");
    // Megatron-Bridge's ddp fields are the same flags.
    const auto bridge = keys(parse_megatron_bridge_config("train:\n  micro_batch_size: 1\nddp:\n  use_megatron_fsdp: true\n"
                                                          "  data_parallel_sharding_strategy: optim_grads_params\n"
                                                          "  num_distributed_optimizer_instances: 4\n  outer_dp_sharding_strategy: optim\n", "rc.yaml"));
    CHECK(bridge.at("plan.fsdp") == "hybrid_shard");
    CHECK(bridge.at("plan.outer_dp_sharding_strategy") == "optim");
  }
  // Note [Pipeline layout]: the flag as the plan's key, checked when the plan is read.
  CHECK(keys(parse_megatron_args("--micro-batch-size 1 --pipeline-model-parallel-layout \"Et|(tt|)*30mL\"", "cmd"))
            .at("plan.pipeline_layout") == "\"Et|(tt|)*30mL\"");
  // The same model as the built-in, whose shape comes from HuggingFace's config.json.
  const auto from_flags = models::load_model(*fc.model, section(fc, "model"));
  const auto built_in = models::load_model("deepseek-v3", {{"model", "mtp_layers", "1"}});
  CHECK(from_flags->parameters() == built_in->parameters());

  // Arguments.py's defaults where the flags are left out, and q/k norms without MLA.
  const auto defaults = keys(parse_megatron_args(
      "--micro-batch-size 1 --num-layers 2 --hidden-size 256 --num-attention-heads 4 --swiglu --multi-latent-attention", "cmd"));
  CHECK(defaults.at("model.q_lora_rank") == "0");
  CHECK(defaults.at("model.kv_lora_rank") == "32");
  CHECK(defaults.at("model.qk_nope_dim") == "128");
  CHECK(keys(parse_megatron_args("--micro-batch-size 1 --num-layers 2 --hidden-size 256 --num-attention-heads 4 --swiglu --qk-layernorm",
                                 "cmd"))
            .at("model.qk_norm") == "true");
  // Patterns: interleaved dense layers are said; malformed ones refused at their line.
  const std::string four = "--micro-batch-size 1 --num-layers 4 --hidden-size 256 --num-attention-heads 4 --swiglu --num-experts 4 ";
  const auto alternate = parse_megatron_args(four + "--moe-layer-freq [1,0]*2", "cmd");
  CHECK(listed(alternate, "--moe-layer-freq [1,0]*2 (dense layers after the first MoE one: every layer after the first dense ones priced as MoE)"));
  CHECK(keys(parse_megatron_args(four + "--moe-layer-freq [0,1,1,1]", "cmd")).at("model.first_dense") == "1");
  CHECK(keys(parse_megatron_args(four + "--moe-layer-freq 1", "cmd")).count("model.first_dense") == 0);
  CHECK(error_of([&] { parse_megatron_args(four + "--moe-layer-freq [0]*3+[1]*2", "cmd"); }) ==
        "cmd:1: --moe-layer-freq: lists 5 layers where the model has 4 (Megatron asserts one entry a layer)");
  CHECK(error_of([&] { parse_megatron_args(four + "--moe-layer-freq '[0,2,1,1]'", "cmd"); }) ==
        "cmd:1: --moe-layer-freq: '[0,2,1,1]': 2 in a list; each layer is 0 (dense) or 1 (MoE)");
  CHECK(error_of([&] { parse_megatron_args(four + "--moe-layer-freq '([0]*3'", "cmd"); }) ==
        "cmd:1: --moe-layer-freq: '([0]*3': a parenthesis is not closed; valid: an integer >= 1, or a list expression of 0s and 1s "
        "such as \"([0]*3+[1]*58)\"");
  CHECK(error_of([&] { parse_megatron_args(four + "--moe-layer-freq '[1]*99999999'", "cmd"); }).find("is not understood") != std::string::npos);
  CHECK(error_of([&] { parse_megatron_args(four + "--moe-layer-freq '[1]*9999999'", "cmd"); }) ==
        "cmd:1: --moe-layer-freq: '[1]*9999999' lists more layers than a model may have");
  CHECK(error_of([&] { parse_megatron_args(four + "--moe-router-num-groups 3 --moe-router-group-topk 1", "cmd"); }) ==
        "cmd:1: --moe-router-num-groups: 3 does not divide the 4 experts");
  CHECK(error_of([&] {
          parse_megatron_args("--micro-batch-size 1 --num-layers 2 --hidden-size 256 --num-attention-heads 4 --swiglu "
                              "--group-query-attention --num-query-groups 2 --multi-latent-attention",
                              "cmd");
        }) == "cmd:1: --multi-latent-attention: given with --group-query-attention; Megatron refuses both");
}

// Note [Megatron-Bridge configs]: the recipe's run_config.yaml gives what
// the same run's Megatron-LM flags give (mixed_precision bf16_mixed: bf16,
// grad_reduce_in_fp32 true), each key from its line of the YAML.
TEST_CASE("Megatron-Bridge: Llama 3 8B's run_config.yaml is its Megatron-LM flags", "[framework]") {
  const std::string file = sample("megatron-bridge/llama3_8b_run_config.yaml");
  const FrameworkConfig fc = read_megatron_bridge_config(file);
  CHECK(fc.framework == "Megatron-Bridge");
  CHECK(fc.plan == std::optional<std::string>("ddp"));
  CHECK(fc.model == std::optional<std::string>("llama-3-8b"));  // the built-in of its shape (vocabulary 128,256, unpadded)
  CHECK(fc.unmodelled.empty());
  CHECK(fc.global_batch == std::optional<std::int64_t>(512));
  const FrameworkConfig flags = parse_megatron_args(
      "--tensor-model-parallel-size 1 --pipeline-model-parallel-size 1 --expert-model-parallel-size 1 "
      "--context-parallel-size 2 --use-distributed-optimizer --overlap-grad-reduce --overlap-param-gather "
      "--num-layers 32 --hidden-size 4096 --ffn-hidden-size 14336 --num-attention-heads 32 --group-query-attention "
      "--num-query-groups 8 --kv-channels 128 --seq-length 8192 --position-embedding-type rope --normalization RMSNorm --swiglu "
      "--untie-embeddings-and-output-weights --disable-bias-linear --padded-vocab-size 128256 --make-vocab-size-divisible-by 128 "
      "--micro-batch-size 1 --global-batch-size 512 --bf16 --accumulate-allreduce-grads-in-fp32 --tokenizer-type NullTokenizer "
      "--optimizer adam",
      "cmd");
  auto mine = keys(fc), theirs = keys(flags);
  for (const auto& [key, value] : theirs) CHECK(key + "=" + mine[key] == key + "=" + value);
  CHECK(mine.size() == theirs.size());
  CHECK(from_of(fc, "plan.cp") == file + ":55 (model.context_parallel_size)");
  CHECK(from_of(fc, "plan.micro_batch") == file + ":125 (train.micro_batch_size)");
  CHECK(from_of(fc, "plan.precision") == file + ":38 (mixed_precision.bf16)");
  // 8 GPUs: dp = 8 / cp 2 = 4; 512 / (1 x 4) = 128 micro-steps.
  const ResolvedPlan r = resolve_with(fc, *fc.model, "dgx-h100", 1);
  CHECK(r.dp == 4);
  CHECK(r.cp == 2);
  CHECK(r.grad_accum == 128);
}

// deepseek_v3_pretrain_1024gpu_h100_bf16_config: its layout of 16 stages
// (the embedding and 4 decoders, 14 x 4, then 1 decoder, the MTP depth and
// the loss), HybridEP under the flex dispatcher, and a MixedPrecisionConfig
// of bf16 with bf16 gradients; CommOverlapConfig's overlap and 128
// Mi-element buckets (2 bytes an element: 268.435456 MB).
TEST_CASE("Megatron-Bridge: DeepSeek-V3's recipe, its layout, dispatcher and precision", "[framework]") {
  const std::string file = sample("megatron-bridge/deepseek_v3_run_config.yaml");
  const FrameworkConfig fc = read_megatron_bridge_config(file);
  auto k = keys(fc);
  CHECK(fc.plan == std::optional<std::string>("megatron-3d"));
  CHECK(k["plan.tp"] == "2");
  CHECK(k["plan.pp"] == "16");
  CHECK(k["plan.ep"] == "64");
  CHECK(k["plan.etp"] == "1");
  CHECK(k["plan.sequence_parallel"] == "true");
  // The layout's 16 stages as Megatron's string (Note [Pipeline layout]).
  CHECK(k["plan.pipeline_layout"] == "\"Etttt|tttt|tttt|tttt|tttt|tttt|tttt|tttt|tttt|tttt|tttt|tttt|tttt|tttt|tttt|tmL\"");
  CHECK(from_of(fc, "plan.pipeline_layout") == file + ":140 (model.pipeline_model_parallel_layout)");
  CHECK(k["plan.moe_dispatcher"] == "deepep");
  CHECK(k["plan.precision"] == "bf16");
  CHECK(k["plan.accumulate_allreduce_grads_in_fp32"] == "false");
  CHECK(k["plan.megatron_grad_buffer"] == "true");  // in bf16
  CHECK(k["plan.overlap"] == "true");
  CHECK(k["plan.overlap_param_gather"] == "true");
  CHECK(k["plan.bucket_mb"] == "268.435456");
  CHECK(k["plan.zero_stage"] == "1");
  CHECK(k["model.name"] == "megatron-DeepSeekV3");
  CHECK(k["model.first_dense"] == "3");
  CHECK(k["model.route_nodes"] == "4");
  CHECK(k["model.mtp_layers"] == "1");
  CHECK(k["model.vocab"] == "129280");  // should_pad_vocab false: as written
  // Its precision-aware optimizer with bf16 moments (the recipe's
  // main_grads_dtype bf16 is ddp.grad_reduce_in_fp32 false's buffer):
  // per parameter of a shard, the bf16 parameter's 16-bit remainder and two
  // bf16 moments, 2 + 2 + 2 bytes (Note [Precision-aware optimizer]).
  CHECK(fc.unmodelled.empty());
  CHECK(k["plan.use_precision_aware_optimizer"] == "true");
  CHECK(k["plan.exp_avg_dtype"] == "bf16");
  CHECK(k["plan.exp_avg_sq_dtype"] == "bf16");
  CHECK(from_of(fc, "plan.exp_avg_dtype") == file + ":224 (optimizer.exp_avg_dtype)");
  // The blocks counted: the embedding joins the first stage, the MTP depth
  // and the head (norm and output layer) the last.
  const ResolvedPlan r = resolve_with(fc, *fc.model, "dgx-h100", 128);
  CHECK(r.stage_layers == std::vector<int>{5, 4, 4, 4, 4, 4, 4, 4, 4, 4, 4, 4, 4, 4, 4, 3});
  CHECK(r.dp == 32);
  CHECK(optimizer_state_bytes_per_param(r) == 6);
  CHECK(optimizer_step_copy_bytes_per_param(r) == 8);
  CHECK(models::load_model(*fc.model, section(fc, "model"))->parameters() ==
        models::load_model("deepseek-v3", {{"model", "mtp_layers", "1"}})->parameters());
}

TEST_CASE("Megatron-Bridge: mixed-precision recipes, comm_overlap, and bad fields named at their line", "[framework]") {
  const std::string base = "train:\n  micro_batch_size: 1\nmodel:\n  tensor_model_parallel_size: 2\n";
  auto parse = [&](const std::string& more) { return parse_megatron_bridge_config(base + more, "rc.yaml"); };
  // mixed_precision.py's recipes by name, with underscores or hyphens.
  const FrameworkConfig cs = parse("mixed_precision: bf16_with_fp8_current_scaling_mixed\n");
  CHECK(keys(cs)["plan.precision"] == "fp8");
  CHECK(keys(cs)["plan.fp8_recipe"] == "tensorwise");
  CHECK(keys(cs)["plan.fp8_param_gather"] == "true");
  // The current-scaling recipes keep a block first and last in bf16;
  // Nemotron 3 Super's NVFP4 recipe its last 14 (Note [BF16 layers]).
  CHECK(cs.unmodelled.empty());
  CHECK(keys(cs)["plan.first_last_layers_bf16"] == "true");
  CHECK(keys(cs)["plan.num_layers_at_start_in_bf16"] == "1");
  CHECK(keys(cs)["plan.num_layers_at_end_in_bf16"] == "1");
  const FrameworkConfig super = parse("mixed_precision: nemotron_3_super_bf16_with_nvfp4_mixed\n");
  CHECK(keys(super)["plan.precision"] == "fp4");
  CHECK(keys(super)["plan.num_layers_at_start_in_bf16"] == "0");
  CHECK(keys(super)["plan.num_layers_at_end_in_bf16"] == "14");
  // A mapping's counts default to MixedPrecisionConfig's 0.
  const FrameworkConfig counted = parse("mixed_precision:\n  bf16: true\n  fp8: hybrid\n  fp8_recipe: tensorwise\n  first_last_layers_bf16: true\n"
                                        "  num_layers_at_end_in_bf16: 3\n");
  CHECK(keys(counted)["plan.num_layers_at_start_in_bf16"] == "0");
  CHECK(keys(counted)["plan.num_layers_at_end_in_bf16"] == "3");
  CHECK(keys(parse("mixed_precision: bf16-with-mxfp8-mixed\n"))["plan.fp8_recipe"] == "mxfp8");
  const FrameworkConfig fp4 = parse("mixed_precision: bf16_with_nvfp4_mixed\n");
  CHECK(keys(fp4)["plan.precision"] == "fp4");
  CHECK(keys(fp4)["plan.fp8_param_gather"] == "true");
  const FrameworkConfig fp16 = parse("mixed_precision: fp16_mixed\n");
  CHECK(keys(fp16)["plan.precision"] == "fp16");
  CHECK(keys(fp16)["plan.accumulate_allreduce_grads_in_fp32"] == "false");
  // Its fields win over the model's (update_config_with_precision_overrides).
  const FrameworkConfig fields = parse("  fp8: e4m3\n  bf16: true\nmixed_precision:\n  bf16: true\n  fp8: hybrid\n  fp8_recipe: delayed\n");
  CHECK(keys(fields)["plan.precision"] == "fp8");
  CHECK(keys(fields)["plan.fp8_recipe"] == "delayed");
  CHECK(from_of(fields, "plan.fp8_recipe") == "rc.yaml:10 (mixed_precision.fp8_recipe)");
  CHECK(keys(parse("  fp8: hybrid\n  fp8_recipe: mxfp8\n"))["plan.fp8_recipe"] == "mxfp8");
  CHECK(keys(parse("  fp8: null\n  fp8_recipe: mxfp8\n"))["plan.fp8_recipe"] == "null");  // a recipe without FP8 is no FP8
  CHECK(error_of([&] { parse("mixed_precision: bf32_mixed\n"); }).rfind("rc.yaml:5: mixed_precision: 'bf32_mixed' is not one of Megatron-Bridge's recipes: bf16_mixed, fp16_mixed,", 0) == 0);
  // CommOverlapConfig: overlap with the distributed optimizer, tensor-parallel overlap only with sequence parallelism.
  const FrameworkConfig co = parse("ddp:\n  use_distributed_optimizer: true\ncomm_overlap:\n  tp_comm_overlap: true\n");
  CHECK(keys(co)["plan.overlap"] == "true");
  CHECK(keys(co)["plan.overlap_param_gather"] == "true");
  CHECK(keys(co)["plan.tp_comm_overlap"] == "null");  // no sequence parallelism: Bridge turns it off
  CHECK(keys(co)["plan.bucket_mb"] == "536.870912");   // 128 Mi elements, fp32 gradients under Megatron-LM's rule
  const FrameworkConfig sp = parse("  sequence_parallel: true\ncomm_overlap:\n  tp_comm_overlap: true\n  overlap_grad_reduce: false\n");
  CHECK(keys(sp)["plan.tp_comm_overlap"] == "true");
  CHECK(keys(sp)["plan.overlap"] == "false");
  CHECK(keys(sp)["plan.overlap_param_gather"] == "false");  // without the distributed optimizer
  // No configuration named: Transformer Engine's defaults; a recipe's
  // named one: the ring exchange (Note [Userbuffers' chunks]).
  CHECK(keys(sp)["plan.tp_comm_overlap_cfg"] == "te");
  const FrameworkConfig named =
      parse("  sequence_parallel: true\ncomm_overlap:\n  tp_comm_overlap: true\n  tp_comm_overlap_cfg:\n    qkv_fprop:\n      method: ring_exchange\n");
  CHECK(keys(named)["plan.tp_comm_overlap_cfg"] == "ring");
  CHECK(named.unmodelled ==
        std::vector<std::string>{"comm_overlap.tp_comm_overlap_cfg=given (its layers priced as Transformer Engine's ring exchange)"});
  // What dtsim does not model, said once; what it cannot read, refused at its line.
  const FrameworkConfig said = parse(
      "  cuda_graph_impl: full_iteration\n  pipeline_model_parallel_size: 2\n  num_layers_in_first_pipeline_stage: 3\n  gated_linear_unit: true\n  activation_func:\n"
      "    _target_: torch.nn.functional.gelu\n    _call_: false\npeft:\n  _target_: megatron.bridge.peft.lora.LoRA\n");
  CHECK(keys(said).at("plan.num_layers_in_first_pipeline_stage") == "3");  // modelled (Note [Megatron's split])
  CHECK(said.unmodelled == std::vector<std::string>{
                               "model.activation_func=torch.nn.functional.gelu (a gated unit priced as SwiGLU)",
                               "model.cuda_graph_impl=full_iteration (kernel launches priced as eager)"});
  // Its LoRA is read (Note [LoRA] in models/src/peft.cpp).
  CHECK(keys(said).at("model.peft") == "lora");
  // Megatron-FSDP as the flags.
  const auto mfsdp = keys(parse("ddp:\n  use_megatron_fsdp: true\n  data_parallel_sharding_strategy: optim_grads_params\n"));
  CHECK(mfsdp.at("plan.fsdp") == "full_shard");
  CHECK(keys(parse("ddp:\n  use_megatron_fsdp: false\n  data_parallel_sharding_strategy: optim_grads_params\n")).at("plan.fsdp") == "null");
  // Megatron's split knobs (Note [Megatron's split]).
  const auto acc = keys(parse("  pipeline_model_parallel_size: 8\n  account_for_embedding_in_pipeline_split: true\n"
                              "  num_layers_in_last_pipeline_stage: null\n"));
  CHECK(acc.at("plan.pipeline_split") == "megatron");
  CHECK(acc.at("plan.account_for_embedding_in_pipeline_split") == "true");
  CHECK(acc.at("plan.num_layers_in_last_pipeline_stage") == "null");
  // A layout as Megatron's string, or as stages of layer types; an embedding-only first stage is a chunk of one layer.
  CHECK(keys(parse("  pipeline_model_parallel_size: 2\n  pipeline_model_parallel_layout: [[embedding], [decoder, loss]]\n"))
            .at("plan.pipeline_layout") == "\"E|tL\"");
  CHECK(keys(parse("  pipeline_model_parallel_layout: Et*3|t*3L\n")).at("plan.pipeline_layout") == "\"Et*3|t*3L\"");
  CHECK(error_of([&] { parse("  pipeline_model_parallel_layout: [[embedding, attention]]\n"); }) ==
        "rc.yaml:5: model.pipeline_model_parallel_layout: stage 1: 'attention' is not a layer type; valid: embedding, decoder, mtp, loss");
  CHECK(error_of([&] { parse("  pipeline_model_parallel_size: two\n"); }) ==
        "rc.yaml:5: model.pipeline_model_parallel_size: expected an integer, got 'two'");
  CHECK(error_of([&] { parse("  sequence_parallel: 1.5\n"); }) == "rc.yaml:5: model.sequence_parallel: expected true or false, got '1.5'");
  CHECK(error_of([&] { parse("  context_parallel_size: 0\n"); }) ==
        "rc.yaml:5: model.context_parallel_size: 0 is below 1; valid: an integer >= 1");
  CHECK(error_of([&] { parse("  seq_length: 4096\ndataset:\n  seq_length: 8192\n"); }) ==
        "rc.yaml:7: dataset.seq_length: 8192 differs from model.seq_length 4096 (Megatron-Bridge asserts they match)");
  CHECK(error_of([&] { parse_megatron_bridge_config("model:\n  num_layers: 2\n", "rc.yaml"); }) ==
        "rc.yaml: train.micro_batch_size is missing; Megatron-LM has no default for it (validate_args asserts it): add e.g. "
        "train.micro_batch_size=1");
  CHECK(error_of([&] { parse_megatron_bridge_config("train: [1, 2]\n", "rc.yaml"); }) ==
        "rc.yaml:1: train: expected a mapping of its fields, got a list");
  CHECK(error_of([&] { parse_megatron_bridge_config("- model\n", "rc.yaml"); }) ==
        "rc.yaml: not a Megatron-Bridge config: its top level must be a mapping of sections (model:, train:, ddp:, ...)");
  // Absurd sizes are refused before the vocabulary is padded with them.
  CHECK(error_of([&] { parse("  vocab_size: 99999999999\n  should_pad_vocab: true\n"); }) ==
        "rc.yaml:5: model.vocab_size: 99999999999 is absurd; valid: 1 to 1073741824");
  CHECK(error_of([] {
          parse_megatron_args("--micro-batch-size 1 --num-layers 2 --hidden-size 64 --num-attention-heads 4 --vocab-size 100 "
                              "--make-vocab-size-divisible-by 4611686018427387904 --tensor-model-parallel-size 4",
                              "cmd");
        }) == "cmd:1: --make-vocab-size-divisible-by: 4611686018427387904 is absurd; valid: 1 to 1073741824");
  CHECK(error_of([&] { parse("  recompute_granularity: partial\n"); }) ==
        "rc.yaml:5: model.recompute_granularity: 'partial' is not one of full, selective");
  // Given where a plan goes, it names the option that reads it.
  const std::string mb = sample("megatron-bridge/llama3_8b_run_config.yaml");
  CHECK(error_of([&] { load_plan(mb); }) == mb + " looks like a Megatron-Bridge config; pass it as --megatron-bridge " + mb);
  CHECK(framework_of(base, "x.yaml") == "megatron-bridge");
}

// Note [Userbuffers' chunks] (models/src/layers.cpp): Megatron-LM's
// --tp-comm-overlap without --tp-comm-overlap-cfg runs Transformer Engine's
// defaults; a file's per-layer methods are not read (the ring exchange,
// said); Megatron-Bridge's recipes name theirs (the ring exchange), none
// TE's defaults; torchtitan's async TP is torch's AsyncTP.
TEST_CASE("the tensor-parallel overlap's configuration from Megatron-LM, Megatron-Bridge and torchtitan", "[framework][tp_overlap]") {
  const std::string base = "--micro-batch-size 1 --tensor-model-parallel-size 2 --sequence-parallel --tp-comm-overlap";
  const FrameworkConfig te = parse_megatron_args(base, "cmd");
  CHECK(keys(te)["plan.tp_comm_overlap"] == "true");
  CHECK(keys(te)["plan.tp_comm_overlap_cfg"] == "te");
  CHECK(te.unmodelled.empty());
  const FrameworkConfig file = parse_megatron_args(base + " --tp-comm-overlap-cfg ub.yaml", "cmd");
  CHECK(keys(file)["plan.tp_comm_overlap_cfg"] == "ring");
  CHECK(file.unmodelled ==
        std::vector<std::string>{"--tp-comm-overlap-cfg ub.yaml (its layers priced as Transformer Engine's ring exchange)"});
  CHECK(keys(parse_megatron_args("--micro-batch-size 1", "cmd"))["plan.tp_comm_overlap_cfg"] == "null");
  const FrameworkConfig tt = read_torchtitan_config(sample("torchtitan/llama3_70b.toml"));
  CHECK(keys(tt)["plan.tp_comm_overlap_cfg"] == "async_tp");
  // The plan's key: one of three, refused otherwise in one line.
  CHECK(parse_plan("name: t\ntp_comm_overlap_cfg: te\n", "t.yaml").tp_comm_overlap_cfg == TpOverlapCfg::kTe);
  CHECK(parse_plan("name: t\n", "t.yaml").tp_comm_overlap_cfg == TpOverlapCfg::kRing);
  CHECK_THAT(error_of([] { parse_plan("name: t\ntp_comm_overlap_cfg: bulk\n", "t.yaml"); }),
             Catch::Contains("t.yaml:2") && Catch::Contains("tp_comm_overlap_cfg") && Catch::Contains("ring") &&
                 Catch::Contains("async_tp"));
}

// Note [Gated DeltaNet] (models/src/llama.cpp): Megatron-Core's GatedDeltaNet
// layers (TransformerConfig's experimental_attention_variant "gdn", its
// linear_* fields and their defaults: 4 taps, heads of 128, 16 key and 32
// value heads), the gated attention output and the shared expert's gate,
// as a Qwen3.5-35B-A3B launch line spells them.
TEST_CASE("Megatron-LM: Qwen3.5's Gated DeltaNet layers, gated output and gated shared expert", "[framework][gdn]") {
  const std::string qwen =
      "--micro-batch-size 1 --num-layers 40 --hidden-size 2048 --num-attention-heads 16 --group-query-attention --num-query-groups 2 "
      "--kv-channels 256 --swiglu --normalization RMSNorm --apply-layernorm-1p --position-embedding-type rope --rotary-percent 0.25 "
      "--untie-embeddings-and-output-weights --disable-bias-linear --vocab-size 248320 --qk-layernorm --max-position-embeddings 262144 "
      "--num-experts 256 --moe-router-topk 8 --moe-ffn-hidden-size 512 --moe-shared-expert-intermediate-size 512 --moe-shared-expert-gate "
      "--attention-output-gate --experimental-attention-variant gdn --linear-attention-freq 4 --linear-num-value-heads 32";
  const FrameworkConfig fc = parse_megatron_args(qwen, "cmd");
  auto k = keys(fc);
  CHECK(k["model.full_attention_interval"] == "4");
  CHECK(k["model.linear_key_heads"] == "16");  // TransformerConfig's default
  CHECK(k["model.linear_value_heads"] == "32");
  CHECK(k["model.linear_key_dim"] == "128");
  CHECK(k["model.linear_conv_kernel"] == "4");
  CHECK(k["model.attn_output_gate"] == "true");
  CHECK(k["model.shared_expert_gate"] == "true");
  CHECK(k["model.zero_centered_norms"] == "true");  // --apply-layernorm-1p on RMSNorm
  CHECK(fc.unmodelled.empty());
  // The built-in's parameters (its shape from the checkpoint's config.json).
  const auto from_flags = models::load_model(*fc.model, section(fc, "model"));
  CHECK(from_flags->parameters() == models::load_model("qwen3.5-35b-a3b")->parameters());
  // Without the variant Megatron-LM builds attention layers: the flags are said, not modelled.
  const std::string plain = "--micro-batch-size 1 --num-layers 4 --hidden-size 256 --num-attention-heads 4 --swiglu ";
  const auto unread = parse_megatron_args(plain + "--linear-attention-freq 4", "cmd");
  CHECK(keys(unread).count("model.full_attention_interval") == 0);
  CHECK(listed(unread, "--linear-attention-freq 4 (read only with --experimental-attention-variant gdn; a custom --spec that builds them needs it too)"));
  CHECK(error_of([&] { parse_megatron_args(plain + "--experimental-attention-variant kda", "cmd"); }) ==
        "cmd:1: --experimental-attention-variant: 'kda' is not one of gdn, gated_delta_net, dsa, dsv4_hybrid");
  CHECK(error_of([&] { parse_megatron_args(plain + "--experimental-attention-variant gdn", "cmd"); }) ==
        "cmd:1: --experimental-attention-variant: gdn needs --linear-attention-freq (TransformerConfig asserts it)");
  CHECK(error_of([&] { parse_megatron_args(plain + "--experimental-attention-variant gdn --linear-attention-freq '([1]*3+[0])*1'", "cmd"); }) ==
        "cmd:1: --linear-attention-freq: '([1]*3+[0])*1'; dtsim models an integer N from 1 to 999999 (N - 1 linear attention layers, then "
        "one attention layer)");
}

TEST_CASE("Megatron-LM: a Mamba-2 hybrid's layer pattern, its segments and Nemotron 3 Nano's launch line", "[framework][mamba]") {
  // Megatron-LM's Nemotron-3-Nano-30B-A3B flags (--hybrid-layer-pattern, the
  // Mamba heads, squared ReLU, no positions) with the hub's vocabulary.
  const std::string nano =
      "--micro-batch-size 1 --hidden-size 2688 --num-attention-heads 32 --group-query-attention --num-query-groups 2 --kv-channels 128 "
      "--hybrid-layer-pattern MEMEM*EMEMEM*EMEMEM*EMEMEM*EMEMEM*EMEMEMEM*EMEMEMEME --mamba-num-heads 64 --mamba-head-dim 64 "
      "--ffn-hidden-size 1856 --num-experts 128 --moe-router-topk 6 --moe-ffn-hidden-size 1856 --moe-shared-expert-intermediate-size 3712 "
      "--squared-relu --position-embedding-type none --normalization RMSNorm --disable-bias-linear --untie-embeddings-and-output-weights "
      "--padded-vocab-size 131072 --max-position-embeddings 262144 "
      "--spec megatron.core.models.hybrid.hybrid_layer_specs hybrid_stack_spec";
  const FrameworkConfig fc = parse_megatron_args(nano, "cmd");
  auto k = keys(fc);
  CHECK(k["model.hybrid_pattern"] == "\"MEMEM*EMEMEM*EMEMEM*EMEMEM*EMEMEM*EMEMEMEM*EMEMEMEME\"");
  CHECK(k["model.layers"] == "52");  // the pattern's letters: num_layers is taken from it
  CHECK(k["model.mamba_heads"] == "64");
  CHECK(k["model.mamba_state"] == "128");  // TransformerConfig's defaults
  CHECK(k["model.mamba_groups"] == "8");
  CHECK(k["model.squared_relu"] == "true");
  CHECK(k["model.rotary"] == "false");
  CHECK(fc.unmodelled.empty());  // the hybrid spec is what the pattern says
  const auto from_flags = models::load_model(*fc.model, section(fc, "model"));
  CHECK(from_flags->parameters() == models::load_model("nemotron-3-nano-30b-a3b")->parameters());
  // "|" splits the pipeline's segments: a layout, segments / pp virtual stages.
  const std::string small = "--micro-batch-size 1 --hidden-size 256 --num-attention-heads 4 --pipeline-model-parallel-size 2 ";
  const auto segmented = parse_megatron_args(small + "--hybrid-layer-pattern 'M-|M*|-M|E-' --num-experts 4", "cmd");
  auto s = keys(segmented);
  CHECK(s["plan.pipeline_layout"] == "\"Ett|tt|tt|ttL\"");
  CHECK(s["plan.virtual_stages"] == "2");
  CHECK(s["plan.schedule"] == "interleaved");
  CHECK(s["model.hybrid_pattern"] == "\"M-M*-ME-\"");
  // Megatron's default GELU MLP is priced as squared ReLU, and said.
  CHECK(s["model.squared_relu"] == "true");
  CHECK(listed(segmented, "--hybrid-layer-pattern M-|M*|-M|E- (the MLP's default GELU priced as squared ReLU: the same two GEMMs and one pass)"));
  CHECK(error_of([&] { parse_megatron_args(small + "--hybrid-layer-pattern 'M-|M*|-M'", "cmd"); }) ==
        "cmd:1: --hybrid-layer-pattern: 3 segments do not divide over --pipeline-model-parallel-size 2 (Megatron asserts it)");
  CHECK(error_of([&] { parse_megatron_args(small + "--hybrid-layer-pattern 'M-G*'", "cmd"); })
            .find("--hybrid-layer-pattern: 'M-G*' has 'G'; dtsim models M (Mamba-2), * (attention), - (MLP), E (MoE)") != std::string::npos);
  // Multi-token prediction depths after '/' (hybrid_layer_allocation.py):
  // each the same pattern, dtsim's attention then the MoE or the MLP.
  CHECK(error_of([&] { parse_megatron_args(small + "--hybrid-layer-pattern 'M-M*/MM'", "cmd"); })
            .find("--hybrid-layer-pattern: 'M-M*/MM': a multi-token prediction depth of 'MM' is not modelled; valid: *E (attention, then the "
                  "MoE) or *- (attention, then the MLP)") != std::string::npos);
  CHECK(error_of([&] { parse_megatron_args(small + "--hybrid-layer-pattern 'M-M*/*-/*E'", "cmd"); })
            .find("multi-token prediction depths '*-' and '*E' differ (Megatron requires them identical)") != std::string::npos);
  CHECK(error_of([&] { parse_megatron_args(small + "--hybrid-layer-pattern 'M-M*/*E'", "cmd"); })
            .find("a multi-token prediction depth of '*E' where the model's MLPs are dense; dtsim's depth is '*-'") != std::string::npos);
  const auto depths = parse_megatron_args(small + "--hybrid-layer-pattern 'M-M*/*-/*-' --mtp-use-repeated-layer", "cmd");
  CHECK(keys(depths)["model.hybrid_pattern"] == "\"M-M*\"");
  CHECK(keys(depths)["model.mtp_layers"] == "2");
  CHECK(keys(depths)["model.mtp_repeated"] == "true");
  // arguments.py takes the pattern's depths over --mtp-num-layers, and says so.
  CHECK(listed(parse_megatron_args(small + "--hybrid-layer-pattern 'M-M*/*-/*-' --mtp-num-layers 1", "cmd"),
               "--mtp-num-layers 1 (conflicts with the 2 depths of --hybrid-layer-pattern; Megatron uses the pattern's)"));
  // The deprecated name reads the same; the Mamba flags without a pattern are said, not modelled.
  CHECK(keys(parse_megatron_args(small + "--hybrid-override-pattern 'M-M*-M'", "cmd"))["model.hybrid_pattern"] == "\"M-M*-M\"");
  // A pattern may open with attention or an MLP (quoted for YAML, which reads '*' as an alias).
  const auto star = parse_megatron_args(small + "--hybrid-layer-pattern '*-M-' --position-embedding-type none", "cmd");
  CHECK(models::load_model("llama-tiny", section(star, "model"))->blocks() == 4);
  // Megatron-LM's default positions are a learned table, which is said, not modelled.
  CHECK(listed(parse_megatron_args(small + "--hybrid-layer-pattern 'M-*-'", "cmd"),
               "--hybrid-layer-pattern M-*- (learned_absolute positions (Megatron-LM's default): their table of max positions x hidden is not modelled"));
  CHECK(error_of([&] { parse_megatron_args(small + "--hybrid-layer-pattern 'M-||*-'", "cmd"); }) ==
        "cmd:1: --hybrid-layer-pattern: 'M-||*-': pipeline segment 2 has no layers");
  const std::string one = "--micro-batch-size 1 --hidden-size 256 --num-attention-heads 4 ";
  CHECK(error_of([&] { parse_megatron_args(one + "--hybrid-layer-pattern 'M-|*-'", "cmd"); })
            .find("splits pipeline segments with '|' but --pipeline-model-parallel-size is 1") != std::string::npos);
  CHECK(error_of([&] { parse_megatron_args(one + "--hybrid-layer-pattern 'M-*-' --mtp-num-layers 1", "cmd"); })
            .find("--mtp-num-layers: given with --hybrid-layer-pattern but the pattern has no multi-token prediction depths") != std::string::npos);
  const auto unread = parse_megatron_args(small + "--num-layers 4 --swiglu --mamba-state-dim 64", "cmd");
  CHECK(keys(unread).count("model.mamba_state") == 0);
  CHECK(listed(unread, "--mamba-state-dim 64 (read only with --hybrid-layer-pattern)"));
}

TEST_CASE("Megatron-LM: Nemotron 3 Super's launch line, its latent experts and repeated prediction depths (Note [Latent MoE])", "[framework][mamba]") {
  // Megatron-LM's NVIDIA-Nemotron-3-Super-120B-A12B-BF16.sh model flags with
  // the release test's two prediction depths (nemotron3_super_release_gb200).
  const std::string pattern = "MEMEMEM*EMEMEMEM*EMEMEMEM*EMEMEMEMEM*EMEMEMEMEM*EMEMEMEMEM*EMEMEMEMEM*EMEMEMEM*EMEMEMEME";
  const std::string super =
      "--micro-batch-size 1 --num-experts 512 --moe-router-topk 22 --moe-shared-expert-intermediate-size 5376 --moe-latent-size 1024 "
      "--is-hybrid-model --mamba-num-heads 128 --mamba-head-dim 64 --hybrid-layer-pattern '" + pattern + "/*E/*E' --mtp-num-layers 2 "
      "--mtp-use-repeated-layer --untie-embeddings-and-output-weights --disable-bias-linear --position-embedding-type none --squared-relu "
      "--hidden-size 4096 --num-attention-heads 32 --group-query-attention --num-query-groups 2 --ffn-hidden-size 2688 --kv-channels 128 "
      "--normalization RMSNorm --seq-length 8192 --max-position-embeddings 8192 --padded-vocab-size 131072";
  const FrameworkConfig fc = parse_megatron_args(super, "cmd");
  auto k = keys(fc);
  CHECK(k["model.hybrid_pattern"] == "\"" + pattern + "\"");
  CHECK(k["model.moe_latent"] == "1024");
  CHECK(k["model.mtp_layers"] == "2");
  CHECK(k["model.mtp_repeated"] == "true");
  CHECK(k["model.expert_intermediate"] == "2688");  // --moe-ffn-hidden-size unset: --ffn-hidden-size
  const auto from_flags = models::load_model(*fc.model, section(fc, "model"));
  // The built-in's 120,668,687,360 (tests/data/hf/PARAMS.md) and one
  // prediction depth's weights, run twice: attention (4096 x 4096 twice,
  // 4096 x 256 twice), its two norms, the router 4096 x 512, the latent
  // projections 2 x 4096 x 1024, 512 experts of 2 x 1024 x 2688, the shared
  // expert 2 x 4096 x 5376; eh_proj 2 x 4096 x 4096 and three norms.
  const std::int64_t depth = 2 * 4096 * 4096 + 2 * 4096 * 256 + 2 * 4096 + 4096 * 512 + 2 * 4096 * 1024 + 512LL * 2 * 1024 * 2688 +
                             2 * 4096 * 5376 + 2 * 4096 * 4096 + 3 * 4096;
  CHECK(depth == 2'942'324'736);
  CHECK(from_flags->parameters() == 120'668'687'360 + depth);
  // Without --mtp-use-repeated-layer each depth has its own.
  const std::string separate = super.substr(0, super.find("--mtp-use-repeated-layer")) + super.substr(super.find("--untie"));
  CHECK(models::load_model(*fc.model, section(parse_megatron_args(separate, "cmd"), "model"))->parameters() == 120'668'687'360 + 2 * depth);
  CHECK(listed(parse_megatron_args("--micro-batch-size 1 --hidden-size 256 --num-attention-heads 4 --moe-latent-size 64 --swiglu --num-layers 2", "cmd"),
               "--moe-latent-size 64 (no experts (--num-experts) to project for)"));
  CHECK(error_of([&] { parse_megatron_args(super + " --moe-latent-size 0", "cmd"); }) ==
        "cmd:1: --moe-latent-size: '0' is not positive; valid: an integer >= 1");
}

// Note [Mamba-2] (models/src/llama.cpp): HybridModelProvider's fields are
// the hybrid flags; Nemotron's activation_func squared_relu is --squared-relu.
TEST_CASE("Megatron-Bridge: Nemotron 3 Nano's run_config.yaml is its Megatron-LM hybrid flags", "[framework][mamba]") {
  const std::string file = sample("megatron-bridge/nemotron_3_nano_run_config.yaml");
  const FrameworkConfig fc = read_megatron_bridge_config(file);
  auto k = keys(fc);
  CHECK(k["model.hybrid_pattern"] == "\"MEMEM*EMEMEM*EMEMEM*EMEMEM*EMEMEM*EMEMEMEM*EMEMEMEME\"");
  CHECK(k["model.layers"] == "52");
  CHECK(k["model.mamba_heads"] == "64");
  CHECK(k["model.mamba_head_dim"] == "64");
  CHECK(k["model.squared_relu"] == "true");
  CHECK(k["model.rotary"] == "false");
  CHECK(k["plan.ep"] == "8");
  CHECK(k["plan.moe_dispatcher"] == "deepep");
  CHECK(from_of(fc, "model.hybrid_pattern").find("(model.hybrid_override_pattern)") != std::string::npos);
  CHECK(from_of(fc, "model.squared_relu").find("(model.activation_func)") != std::string::npos);
  CHECK(fc.unmodelled.empty());
  const auto from_yaml = models::load_model(*fc.model, section(fc, "model"));
  CHECK(from_yaml->parameters() == models::load_model("nemotron-3-nano-30b-a3b")->parameters());
}

TEST_CASE("Megatron-Bridge: Nemotron 3 Super's run_config.yaml, its latent experts and prediction depths (Note [Latent MoE])", "[framework][mamba]") {
  const std::string file = sample("megatron-bridge/nemotron_3_super_run_config.yaml");
  const FrameworkConfig fc = read_megatron_bridge_config(file);
  auto k = keys(fc);
  CHECK(k["model.moe_latent"] == "1024");
  CHECK(k["model.mtp_layers"] == "2");  // mtp_hybrid_override_pattern '*E', mtp_num_layers 2
  CHECK(k["model.mtp_repeated"] == "true");
  CHECK(k["plan.ep"] == "64");
  CHECK(from_of(fc, "model.moe_latent").find("(model.moe_latent_size)") != std::string::npos);
  // The MTP layer kept in bf16 is said, not modelled.
  CHECK(listed(fc, "model.keep_mtp_spec_in_bf16=true (the multi-token prediction layers priced in the blocks' precision)"));
  const auto from_yaml = models::load_model(*fc.model, section(fc, "model"));
  // The built-in's and one repeated depth's (the Megatron-LM test above).
  CHECK(from_yaml->parameters() == 120'668'687'360 + 2'942'324'736);
}

TEST_CASE("Megatron-Bridge: Nemotron 3 Ultra's run_config.yaml, HSDP and its offloaded expert activations (Note [Fine-grained offload])",
          "[framework][mamba][offload]") {
  const std::string file = sample("megatron-bridge/nemotron_3_ultra_run_config.yaml");
  const FrameworkConfig fc = read_megatron_bridge_config(file);
  auto k = keys(fc);
  CHECK(k["plan.fine_grained_activation_offloading"] == "true");
  CHECK(k["plan.offload_modules"] == "[fused_group_mlp]");
  CHECK(k["plan.min_offloaded_tensor_size"] == "500000000");
  CHECK(k["plan.fsdp"] == "hybrid_shard");
  CHECK(k["plan.outer_dp_sharding_strategy"] == "optim");
  CHECK(k["plan.recompute_modules"] == "[moe_act]");
  // 256 GB300s, the experts over each NVLink domain of 64: one stage, so
  // each micro-batch's backward follows its forward and the last group
  // (the second multi-token prediction depth's) stays; the other 49 MoE
  // layers' fused grouped MLPs go, of which only fc1's output (the
  // activation's input, moe_act being rerun) is 500M elements or more:
  // 8,192 tokens x top-22 rows x 5,120 = 923M in bf16 (fc1's input, 22 x
  // 8,192 x the 2,048 latent = 369M, stays). The peak, as the head's
  // backward begins, falls by all 49.
  const auto model = models::load_model(*fc.model, section(fc, "model"));
  const ClusterSpec c = load_cluster("gb300-nvl72", {parse_override("cluster.gpus_per_node=64"), parse_override("cluster.nodes=4")});
  const Prediction off = predict(*model, load_plan(*fc.plan, with_user_overrides(fc, {})), c);
  const Prediction kept = predict(*model, load_plan(*fc.plan, with_user_overrides(fc, {parse_override("plan.fine_grained_activation_offloading=false"),
                                                                                          parse_override("plan.offload_modules=null")})),
                                  c);
  CHECK(kept.ranks[0].peak - off.ranks[0].peak == 49LL * 8192 * 22 * 5120 * 2);
  CHECK(off.fits);
  CHECK_FALSE(kept.fits);
}

TEST_CASE("Megatron-LM: DeepSeek Sparse Attention's flags (Note [DeepSeek Sparse Attention])", "[framework][dsa]") {
  // Megatron-LM's functional test gpt3_mcore_te_tp2_pp2_dsa's model flags,
  // with a loss coefficient and the sparse loss, and a top-k shared by pairs of layers.
  const std::string flags =
      "--micro-batch-size 4 --num-layers 4 --hidden-size 512 --num-attention-heads 8 --multi-latent-attention --q-lora-rank 192 "
      "--kv-lora-rank 64 --qk-head-dim 16 --qk-pos-emb-head-dim 8 --v-head-dim 16 --experimental-attention-variant dsa "
      "--disable-bias-linear --dsa-indexer-n-heads 64 --dsa-indexer-head-dim 128 --dsa-indexer-topk 2048 --dsa-indexer-loss-coeff 0.01 "
      "--seq-length 1024 --max-position-embeddings 1024 --swiglu --normalization RMSNorm --untie-embeddings-and-output-weights ";
  auto k = keys(parse_megatron_args(flags + "--dsa-indexer-use-sparse-loss --dsa-kernel-backend tilelang --dsa-indexer-topk-freq 2", "cmd"));
  CHECK(k["model.index_topk"] == "2048");
  CHECK(k["model.index_heads"] == "64");
  CHECK(k["model.index_head_dim"] == "128");
  CHECK(k["model.index_loss"] == "sparse");
  CHECK(k["model.dsa_kernels"] == "sparse");
  // dsa.py's is_dsa_skip_topk_layer, offset 0 taken as 1: layers 2 and 4 reuse.
  CHECK(k["model.indexer_layers"] == "FSFS");
  // Megatron-Core's defaults: the dense KL loss, the backend "none" (masked
  // dense attention); no coefficient, no loss.
  auto d = keys(parse_megatron_args(flags, "cmd"));
  CHECK(d["model.index_loss"] == "dense");
  CHECK(d["model.dsa_kernels"] == "dense");
  CHECK(d.count("model.indexer_layers") == 0);
  std::string no_loss = flags;
  no_loss.replace(no_loss.find("--dsa-indexer-loss-coeff 0.01 "), 30, "");
  CHECK(keys(parse_megatron_args(no_loss, "cmd"))["model.index_loss"] == "none");
  // The model the flags describe loads and has the indexer's parameters.
  const FrameworkConfig fc = parse_megatron_args(flags, "cmd");
  const auto model = models::load_model(*fc.model, section(fc, "model"));
  std::string plain = flags;
  plain.replace(plain.find("--experimental-attention-variant dsa "), 37, "");
  for (const char* f : {"--dsa-indexer-n-heads 64 ", "--dsa-indexer-head-dim 128 ", "--dsa-indexer-topk 2048 ", "--dsa-indexer-loss-coeff 0.01 "}) {
    plain.replace(plain.find(f), std::string(f).size(), "");
  }
  const FrameworkConfig pc = parse_megatron_args(plain, "cmd");
  // Four indexers: wq_b 192 x 64 x 128, wk 512 x 128, k_norm 256, weights_proj 512 x 64.
  CHECK(model->parameters() - models::load_model(*pc.model, section(pc, "model"))->parameters() ==
        4 * (192 * 64 * 128 + 512 * 128 + 256 + 512 * 64));
  // Refused at the flag: no latent attention, no indexer shape, an unknown backend.
  std::string gqa = flags;
  gqa.replace(gqa.find("--multi-latent-attention "), 25, "");
  CHECK_THAT(error_of([&] { parse_megatron_args(gqa, "cmd"); }), Catch::Contains("dsa needs --multi-latent-attention"));
  std::string no_topk = flags;
  no_topk.replace(no_topk.find("--dsa-indexer-topk 2048 "), 24, "");
  CHECK_THAT(error_of([&] { parse_megatron_args(no_topk, "cmd"); }), Catch::Contains("dsa needs --dsa-indexer-topk"));
  CHECK_THAT(error_of([&] { parse_megatron_args(flags + "--dsa-kernel-backend flash", "cmd"); }),
             Catch::Contains("--dsa-kernel-backend: 'flash' is not one of none, tilelang, cudnn"));
  CHECK_THAT(error_of([&] { parse_megatron_args(flags + "--context-parallel-size 2 --cp-comm-type p2p", "cmd"); }),
             Catch::Contains("--cp-comm-type: 'p2p' with --experimental-attention-variant dsa; valid: allgather"));
}

TEST_CASE("Megatron-Bridge: GLM-5.1's long-context recipe reads its DSA fields (Note [DeepSeek Sparse Attention])", "[framework][dsa]") {
  const std::string file = sample("megatron-bridge/glm5_1_run_config.yaml");
  const FrameworkConfig fc = read_megatron_bridge_config(file);
  auto k = keys(fc);
  CHECK(k["model.index_topk"] == "2048");
  CHECK(k["model.index_heads"] == "32");
  CHECK(k["model.index_head_dim"] == "128");
  CHECK(k["model.index_loss"] == "sparse");  // GLM5Bridge: coefficient 0.001, the sparse loss
  CHECK(k["model.dsa_kernels"] == "sparse");  // cudnn
  CHECK(k.count("model.indexer_layers") == 0);  // topk_freq 1: every layer its own indexer
  CHECK(k["model.mtp_layers"] == "1");
  CHECK(k["plan.cp"] == "32");
  CHECK(k["plan.cp_comm"] == "all_gather");
  CHECK(k["plan.pp"] == "13");
  CHECK(k["plan.virtual_stages"] == "2");
  CHECK(k["plan.ep"] == "32");
  CHECK(from_of(fc, "model.index_topk").find("(model.dsa_indexer_topk)") != std::string::npos);
  // Its model is GLM-5's with one MTP depth: a MoE block with the indexer,
  // eh_proj 2 x 6144^2 and three norms.
  const auto from_yaml = models::load_model(*fc.model, section(fc, "model"));
  const std::int64_t moe_layer = 9'877'404'416;  // tests/data/hf/PARAMS.md
  CHECK(from_yaml->parameters() == models::load_model("glm-5")->parameters() + moe_layer + 2 * 6144LL * 6144 + 3 * 6144);
  // A dump's DSA and Gated DeltaNet fields at their defaults say nothing for another model.
  const std::string plain = "--micro-batch-size 1 --num-layers 4 --hidden-size 256 --num-attention-heads 4 --swiglu "
                            "--dsa-indexer-topk-freq 1 --dsa-kernel-backend none --dsa-indexer-loss-coeff 0.0 --linear-conv-kernel-dim 4 "
                            "--linear-num-value-heads 32 ";
  const FrameworkConfig quiet = parse_megatron_args(plain, "cmd");
  for (const char* f : {"--dsa-indexer-topk-freq", "--dsa-kernel-backend", "--dsa-indexer-loss-coeff", "--linear-conv-kernel-dim",
                        "--linear-num-value-heads"}) {
    INFO(f);
    CHECK_FALSE(listed(quiet, f));
  }
  const std::string shared = "--micro-batch-size 1 --num-layers 4 --hidden-size 256 --num-attention-heads 4 --swiglu ";
  CHECK(listed(parse_megatron_args(shared + "--dsa-indexer-topk-freq 4", "cmd"),
               "--dsa-indexer-topk-freq 4 (read only with --experimental-attention-variant dsa)"));
}

TEST_CASE("Megatron-LM: DeepSeek-V4's flags, its ratios as a Python list expression (Note [DeepSeek-V4])", "[framework][dsv4]") {
  // Megatron-LM's dsv4_hybrid geometry: the MLA flags give the head's width
  // (v-head-dim), its rotary part and the query latent; the ratios come as
  // the expression arguments.py's compress_ratios_type evaluates.
  const std::string flags =
      "--micro-batch-size 1 --num-layers 15 --hidden-size 512 --num-attention-heads 8 --multi-latent-attention --q-lora-rank 64 "
      "--qk-pos-emb-head-dim 16 --v-head-dim 128 --experimental-attention-variant dsv4_hybrid --disable-bias-linear "
      "--dsa-indexer-n-heads 4 --dsa-indexer-head-dim 32 --dsa-indexer-topk 64 --dsa-indexer-loss-coeff 0.01 --dsa-indexer-use-sparse-loss "
      "--seq-length 1024 --max-position-embeddings 1024 --swiglu --normalization RMSNorm --untie-embeddings-and-output-weights "
      "--o-groups 4 --o-lora-rank 64 --csa-window-size 64 --enable-hyper-connections --num-residual-streams 2 ";
  auto k = keys(parse_megatron_args(flags + "--csa-compress-ratios \"([0]+[4,128]*2)*3\"", "cmd"));
  CHECK(k["model.compress_ratios"] == "[0, 4, 128, 4, 128, 0, 4, 128, 4, 128, 0, 4, 128, 4, 128]");
  CHECK(k["model.head_dim"] == "128");
  CHECK(k["model.qk_rope_dim"] == "16");
  CHECK(k["model.q_lora_rank"] == "64");
  CHECK(k["model.kv_heads"] == "1");
  CHECK(k["model.sliding_window"] == "64");
  CHECK(k["model.o_groups"] == "4");
  CHECK(k["model.o_lora_rank"] == "64");
  CHECK(k["model.index_topk"] == "64");
  CHECK(k["model.index_loss"] == "sparse");
  CHECK(k["model.hc_mult"] == "2");
  CHECK(k["model.hc_sinkhorn_iters"] == "20");
  CHECK(k.count("model.kv_lora_rank") == 0);
  // A Megatron-Bridge list reaches the same rule as words.
  CHECK(keys(parse_megatron_args(flags + "--csa-compress-ratios 0,4,128,4,128,0,4,128,4,128,0,4,128,4,128", "cmd"))["model.compress_ratios"] ==
        k["model.compress_ratios"]);
  const FrameworkConfig fc = parse_megatron_args(flags + "--csa-compress-ratios \"([0]+[4,128]*2)*3\"", "cmd");
  const auto model = models::load_model(*fc.model, section(fc, "model"));
  CHECK(model->layers(sim::WorkloadShape{}).at(2).signature.find("v4=1,h=512,a=8,qr=64,d=128,dr=16,cr=4,og=4,or=64,dsa=64,ih=4,id=32,il=1") !=
        std::string::npos);

  using dtsim::test::error_of;
  CHECK(error_of([&] { parse_megatron_args(flags + "--csa-compress-ratios [0,4,5]", "cmd"); })
            .find("--csa-compress-ratios: has 5; valid: 0, 4 or 128") != std::string::npos);
  CHECK(error_of([&] { parse_megatron_args(flags + "--csa-compress-ratios '([0]+[4)*3'", "cmd"); })
            .find("valid: a list of 0, 4 and 128, one a layer, like [0,0,4,128] or \"([0]+[4,128]*2)*3\"") != std::string::npos);
  CHECK(error_of([&] { parse_megatron_args(flags + "--csa-compress-ratios [0]*99999999", "cmd"); })
            .find("valid: a list of 0, 4 and 128") != std::string::npos);
  CHECK(error_of([&] { parse_megatron_args(flags + "--csa-compress-ratios \"[0,4]*8\" --dsa-kernel-backend none", "cmd"); })
            .find("--dsa-kernel-backend: dsv4_hybrid's unfused attention") != std::string::npos);
  CHECK(error_of([&] { parse_megatron_args(flags + "--csa-compress-ratios \"[0,4]*8\" --dsa-kernel-backend tilelang", "cmd"); })
            .find("--dsa-kernel-backend: tilelang with dsv4_hybrid: TransformerConfig raises") != std::string::npos);
  CHECK(error_of([&] { parse_megatron_args(flags + "--csa-compress-ratios \"[0,4]*8\" --no-dsa-kernel-fusion", "cmd"); })
            .find("--no-dsa-kernel-fusion: dsv4_hybrid's unfused attention") != std::string::npos);
  // TransformerConfig's asserts: a ratio a layer and an MTP depth, latent attention.
  CHECK(error_of([&] { parse_megatron_args(flags + "--csa-compress-ratios \"[0,4]*8\" --mtp-num-layers 2", "cmd"); })
            .find("--csa-compress-ratios: 16 ratios; TransformerConfig asserts at least num_layers + mtp_num_layers = 17") != std::string::npos);
  std::string no_mla = flags;
  no_mla.erase(no_mla.find("--multi-latent-attention "), 25);
  CHECK(error_of([&] { parse_megatron_args(no_mla + "--csa-compress-ratios \"[0,4]*8\"", "cmd"); })
            .find("dsv4_hybrid needs --multi-latent-attention (TransformerConfig asserts it)") != std::string::npos);
  const std::string no_indexer = flags.substr(0, flags.find("--dsa-indexer-n-heads")) + flags.substr(flags.find("--dsa-indexer-loss-coeff"));
  CHECK(error_of([&] { parse_megatron_args(no_indexer + "--dsa-indexer-topk 64 --csa-compress-ratios \"[0,4]*8\"", "cmd"); })
            .find("--csa-compress-ratios: has ratio-4 layers, whose indexer needs --dsa-indexer-n-heads") != std::string::npos);
}

TEST_CASE("Megatron-Bridge: DeepSeek-V4-Flash's run_config.yaml, the 26.08 perf recipe on 128 GB300s (Note [DeepSeek-V4])",
          "[framework][dsv4]") {
  const std::string file = sample("megatron-bridge/deepseek_v4_flash_run_config.yaml");
  const FrameworkConfig fc = read_megatron_bridge_config(file);
  auto k = keys(fc);
  CHECK(k["model.hc_mult"] == "4");
  CHECK(k["model.o_groups"] == "8");
  CHECK(k["model.o_lora_rank"] == "1024");
  CHECK(k["model.head_dim"] == "512");
  CHECK(k["model.q_lora_rank"] == "1024");
  CHECK(k["model.index_topk"] == "512");
  CHECK(k["model.sliding_window"] == "128");
  CHECK(k["plan.recompute_modules"] == "[mla_up_proj]");
  CHECK(k["plan.ep"] == "64");
  CHECK(k["model.compress_ratios"].find("[0, 0, 4, 128, 4, 128,") == 0);
  // The model DeepSeekV4Bridge provides is the HF config's, its MTP depth too.
  const auto model = models::load_model(*fc.model, section(fc, "model"));
  const auto hf = models::load_model(std::string(DTSIM_TEST_DATA) + "/hf/deepseek-v4-flash/config.json",
                                     {parse_override("model.mtp_layers=1")});
  CHECK(model->parameters() == hf->parameters());
  // The deprecated apply_dsa_kernel_fusion as TransformerConfig maps it:
  // true over a backend left at none is cudnn (the recipe sets it so);
  // false is the unfused path, refused; true beside tilelang conflicts.
  test::TempDir dir("dsv4-bridge");
  const std::string text = test::slurp(file), path = (dir.path / "run_config.yaml").string();
  const auto with = [&](const std::string& apply, const std::string& backend) {
    std::string t = text;
    t.replace(t.find("apply_dsa_kernel_fusion: true"), 29, "apply_dsa_kernel_fusion: " + apply);
    t.replace(t.find("dsa_kernel_backend: cudnn"), 25, "dsa_kernel_backend: " + backend);
    std::ofstream(path) << t;
  };
  with("true", "none");
  CHECK(keys(read_megatron_bridge_config(path))["model.compress_ratios"] == k["model.compress_ratios"]);
  with("false", "none");
  CHECK(test::error_of([&] { read_megatron_bridge_config(path); }).find("model.apply_dsa_kernel_fusion: dsv4_hybrid's unfused attention") !=
        std::string::npos);
  with("true", "tilelang");
  CHECK(test::error_of([&] { read_megatron_bridge_config(path); })
            .find("model.dsa_kernel_backend: 'tilelang' conflicts with model.apply_dsa_kernel_fusion") != std::string::npos);
}

// Note [torchtune configs] (sim/src/config/framework_torchtune.cpp).
TEST_CASE("torchtune: the 70B LoRA recipe config, FSDP2 over a frozen base", "[framework][lora]") {
  const FrameworkConfig fc = read_torchtune_config(sample("torchtune/llama3_1_70B_lora.yaml"));
  CHECK(fc.framework == "torchtune");
  REQUIRE(fc.plan == std::optional<std::string>("fsdp"));
  CHECK(fc.model == std::optional<std::string>("llama-3.1-70b"));
  auto k = keys(fc);
  // lora_llama3_1_70b with lora_attn_modules [q_proj, k_proj, v_proj], rank 16.
  CHECK(k["model.peft"] == "lora");
  CHECK(k["model.lora_targets"] == "[q_proj,k_proj,v_proj]");
  CHECK(k["model.lora_rank"] == "16");
  CHECK(k["plan.micro_batch"] == "2");
  CHECK(k["plan.grad_accum"] == "1");
  CHECK(k["plan.seq_len"] == "2048");
  // dtype bf16: bf16 weights stepped as they are.
  CHECK(k["plan.precision"] == "bf16");
  CHECK(k["plan.master_weights"] == "false");
  CHECK(k["plan.recompute"] == "full");
  CHECK(k["plan.kernels"] == "fused");
  CHECK(k["plan.optimizer"] == "adamw");
  // The distributed recipe's shard_model: fully_shard on each layer and the model.
  CHECK(k["plan.fsdp"] == "full_shard");
  CHECK(k["plan.fsdp_version"] == "2");
  CHECK(k["plan.dp"] == "null");
  CHECK(from_of(fc, "plan.micro_batch").find("llama3_1_70B_lora.yaml:35 (batch_size)") != std::string::npos);
  // CEWithChunkedOutputLoss: 8 chunks, its default (Note [Chunked loss]).
  CHECK(k["plan.loss_chunks"] == "8");
  // Packing is said, not dropped.
  CHECK(listed(fc, "dataset.packed=True"));
  CHECK(fc.unmodelled.size() == 1);
  const ResolvedPlan r = resolve_with(fc, *fc.model, "dgx-a100", 1);
  CHECK(r.dp == 8);
  CHECK(r.zero_stage == 3);
  CHECK(r.fsdp_version == 2);
  CHECK(r.global_batch == 16);
  // torchtune's recipes run no pipeline and shard with FSDP2 alone: a search keeps them so.
  CHECK(k["plan.pp"] == "1");
  CHECK(fc.search_fixed == std::vector<std::string>{"pp", "fsdp", "fsdp_version"});
}

TEST_CASE("torchtune: the 3B full single-device config, 8-bit states stepped in the backward", "[framework]") {
  const FrameworkConfig fc = read_torchtune_config(sample("torchtune/llama3_2_3B_full_single_device.yaml"));
  REQUIRE(fc.plan == std::optional<std::string>("ddp"));
  CHECK(fc.model == std::optional<std::string>("llama-3.2-3b"));
  auto k = keys(fc);
  CHECK(k["model.peft"].empty());
  // bitsandbytes.optim.PagedAdamW8bit: AdamW at optim_bits 8 (Note [8-bit
  // optimizer]), its paging said; optimizer_in_bwd True in the
  // single-device recipe (Note [Optimizer in backward]).
  CHECK(k["plan.optimizer"] == "adamw");
  CHECK(k["plan.optim_bits"] == "8");
  CHECK(k["plan.optimizer_in_backward"] == "true");
  CHECK(from_of(fc, "plan.optimizer_in_backward").find("llama3_2_3B_full_single_device.yaml:32 (optimizer_in_bwd)") != std::string::npos);
  CHECK(listed(fc, "optimizer=bitsandbytes.optim.PagedAdamW8bit (paged"));
  CHECK(k["plan.dp"] == "1");
  const ResolvedPlan r = resolve_with(fc, *fc.model, "dgx-a100", 1);
  CHECK(r.optim_bits == 8);
  CHECK(r.optimizer_in_backward);
  CHECK(r.gpus_used() == 1);
  // Llama 3.2 3B's 3,212,749,824 parameters (Llama-3.2-3B's config.json, the
  // head tied): 2 bytes of states each and 8 for each 256.
  const auto m = models::load_model("llama-3.2-3b");
  REQUIRE(m->parameters() == 3'212'749'824);
  CHECK(model_states(r, m->parameters()).optimizer == 2 * 3'212'749'824LL + 8 * 12'549'804LL);
  CHECK(model_states(r, m->parameters()).gradients == 0);
  // A search from it trains the same numbers: the loss's chunks, the 8-bit
  // states and the step in the backward stay as the config has them.
  std::vector<std::string> fixed;
  for (const auto& o : search_fixed_overrides(fc.overrides, 0, fc.search_fixed)) fixed.push_back(o.section + "." + o.path);
  for (const char* key : {"plan.loss_chunks", "plan.optim_bits", "plan.optimizer_in_backward", "plan.dp", "plan.pp"}) {
    INFO(key);
    CHECK(std::count(fixed.begin(), fixed.end(), key) == 1);
  }
  CHECK(std::count(fixed.begin(), fixed.end(), "plan.recompute") == 0);  // the search's
  // The distributed recipe's FSDP2 steps each shard after its reduce-scatter: said, not set.
  const FrameworkConfig dist = parse_torchtune_config(
      "model:\n  _component_: torchtune.models.llama3_2.llama3_2_3b\noptimizer_in_bwd: True\noptimizer:\n"
      "  _component_: torchao.optim.AdamW8bit\n", "t.yaml");
  CHECK(keys(dist)["plan.optimizer_in_backward"] == "null");
  CHECK(keys(dist)["plan.optim_bits"] == "8");
  CHECK(listed(dist, "optimizer_in_bwd=True (under FSDP2"));
  // torchtune's LoRA recipes do not read it; its offloading needs checkpointing, as the recipes raise.
  const FrameworkConfig lora = parse_torchtune_config(
      "model:\n  _component_: torchtune.models.llama3_2.lora_llama3_2_3b\n  lora_attn_modules: [q_proj]\noptimizer_in_bwd: True\n",
      "t_single_device.yaml");
  CHECK(keys(lora)["plan.optimizer_in_backward"] == "null");
  CHECK(listed(lora, "optimizer_in_bwd=True (torchtune's LoRA recipes do not read it"));
  CHECK_THAT(error_of([] {
               parse_torchtune_config("model:\n  _component_: torchtune.models.llama3_2.llama3_2_3b\nenable_activation_offloading: True\n",
                                      "t.yaml");
             }),
             Catch::Contains("t.yaml:3: enable_activation_offloading: True without enable_activation_checkpointing: True"));
}

TEST_CASE("torchtune: a single-device QLoRA config, builders and refusals", "[framework][lora][errors]") {
  const FrameworkConfig fc = read_torchtune_config(sample("torchtune/llama3_1_8B_qlora_single_device.yaml"));
  REQUIRE(fc.plan == std::optional<std::string>("ddp"));
  auto k = keys(fc);
  CHECK(k["model.peft"] == "qlora");
  // output_proj is HuggingFace's o_proj; apply_lora_to_mlp the MLP's three.
  CHECK(k["model.lora_targets"] == "[q_proj,v_proj,o_proj,gate_proj,up_proj,down_proj]");
  CHECK(k["model.lora_rank"] == "8");
  CHECK(k["plan.grad_accum"] == "8");
  CHECK(k["plan.fsdp"] == "null");
  CHECK(k["plan.loss_chunks"] == "8");  // LinearCrossEntropyLoss's chunks
  CHECK(fc.model == std::optional<std::string>("llama-3.1-8b"));
  CHECK(fc.search_fixed == std::vector<std::string>{"pp", "dp"});  // one GPU
  // torchtune's 8B QLoRA recipe: rank 8 on q (4096 -> 4096), v (-> 1024), o,
  // gate, up, down: 8 x (8192 + 5120 + 8192 + 3 x 18432) = 614,400 a block.
  const auto m = models::load_model(*fc.model, section(fc, "model"));
  CHECK(m->trainable_parameters() == 32 * 614'400);
  // Builders: the instruct and base suffixes, and a model dtsim lacks.
  CHECK(parse_torchtune_config("model:\n  _component_: torchtune.models.qwen2_5.lora_qwen2_5_7b_instruct\n  lora_attn_modules: [q_proj]\n",
                               "t.yaml")
            .model == std::optional<std::string>("qwen2.5-7b"));
  const FrameworkConfig other = parse_torchtune_config("model:\n  _component_: torchtune.models.gemma.gemma_2b\n", "t.yaml");
  CHECK(!other.model);
  CHECK(listed(other, "model._component_=torchtune.models.gemma.gemma_2b (no built-in of its shape"));
  CHECK(keys(other).count("model.peft") == 0);
  // Errors name the file, the line and the key.
  CHECK_THAT(error_of([] { parse_torchtune_config("batch_size: 2\n", "t.yaml"); }), Catch::Contains("model._component_: missing"));
  CHECK_THAT(error_of([] { parse_torchtune_config("model:\n  _component_: torchtune.models.llama3_1.llama3_1_8b\nbatch_size: 0\n", "t.yaml"); }),
             Catch::Contains("t.yaml:3: batch_size: '0'; expected an integer of at least 1"));
  CHECK_THAT(error_of([] { parse_torchtune_config("model:\n  _component_: torchtune.models.llama3_1.llama3_1_8b\ndtype: fp16\n", "t.yaml"); }),
             Catch::Contains("t.yaml:3: dtype: 'fp16'; valid: bf16, fp32"));
  CHECK_THAT(error_of([] {
               parse_torchtune_config("model:\n  _component_: torchtune.models.llama3_1.lora_llama3_1_8b\n  lora_attn_modules: [w_proj]\n", "t.yaml");
             }),
             Catch::Contains("t.yaml:3: model.lora_attn_modules: 'w_proj'; valid: q_proj, k_proj, v_proj, output_proj"));
  CHECK_THAT(error_of([] {
               parse_torchtune_config("model:\n  _component_: torchtune.models.llama3_1.llama3_1_8b\n  lora_rank: 8\n", "t.yaml");
             }),
             Catch::Contains("model.lora_rank: is a LoRA builder's; torchtune.models.llama3_1.llama3_1_8b builds no adapters"));
  CHECK_THAT(error_of([] {
               parse_torchtune_config("model:\n  _component_: torchtune.models.llama3_1.llama3_1_8b\ncompile: maybe\n", "t.yaml");
             }),
             Catch::Contains("t.yaml:3: compile: 'maybe'; expected true or false"));
  // YAML 1.1's booleans, yes and on too, as PyYAML reads them.
  CHECK(keys(parse_torchtune_config("model:\n  _component_: torchtune.models.llama3_1.llama3_1_8b\ncompile: yes\n", "t.yaml"))["plan.kernels"] ==
        "fused");
  CHECK_THAT(error_of([] { parse_torchtune_config("model:\n  _component_: torchtune.models.llama3_1.lora_llama3_1_8b\n", "t.yaml"); }),
             Catch::Contains("t.yaml:2: model.lora_attn_modules: names no module and apply_lora_to_mlp is False: no adapter to train"));
  // A key the recipes do not read is listed; FSDP's knobs as the recipe reads them.
  const FrameworkConfig knobs = parse_torchtune_config(
      "model:\n  _component_: torchtune.models.llama3_1.llama3_1_8b\nfsdp_cpu_offload: True\ncustom_sharded_layers: ['tok_embeddings', 'output']\n"
      "enable_activation_checkpointing: True\nenable_activation_offloading: True\noptimizer_in_bwd: True\nbatchsize: 4\n",
      "t.yaml");
  auto kk = keys(knobs);
  CHECK(kk["plan.offload_params"] == "cpu");
  CHECK(kk["plan.offload_optimizer"] == "cpu");
  CHECK(kk["plan.fsdp_wrap"] == "layers");
  // Note [Saved-tensor offload]: torchtune's OffloadActivations.
  CHECK(kk["plan.enable_activation_offloading"] == "true");
  CHECK(listed(knobs, "optimizer_in_bwd=True"));
  CHECK(listed(knobs, "batchsize (not read by dtsim)"));
  // Beside a LoRA's frozen base FSDP2's SHARD_GRAD_OP is not modelled: said,
  // and priced resharded; a compile mapping compiles the model where it says.
  const FrameworkConfig lora = parse_torchtune_config(
      "model:\n  _component_: torchtune.models.llama3_1.lora_llama3_1_8b\n  lora_attn_modules: [q_proj, v_proj]\n"
      "fsdp_reshard_after_forward: False\ncompile:\n  model: True\n  loss: False\n",
      "t.yaml");
  auto kl = keys(lora);
  CHECK(kl["plan.fsdp"] == "full_shard");
  CHECK(listed(lora, "fsdp_reshard_after_forward=False (beside a LoRA's frozen base"));
  CHECK(kl["plan.kernels"] == "fused");
  // The builders' default rank, 8; most shipped configs leave max_seq_len
  // null, which is said; an unpacked dataset is said.
  CHECK(kl["model.lora_rank"] == "8");
  CHECK(listed(lora, "tokenizer.max_seq_len unset (each sample as long as it is"));
  CHECK(listed(lora, "dataset not packed"));
  // Under tensor parallelism the loss is vocab-parallel: not chunked, said.
  const FrameworkConfig tpc = parse_torchtune_config(
      "model:\n  _component_: torchtune.models.llama3_3.llama3_3_70b\ntensor_parallel_dim: 8\n"
      "loss:\n  _component_: torchtune.modules.loss.LinearCrossEntropyLoss\n",
      "t.yaml");
  CHECK(keys(tpc)["plan.tp"] == "8");
  CHECK(keys(tpc)["plan.loss_chunks"] == "null");
  CHECK(listed(tpc, "loss=torchtune.modules.loss.LinearCrossEntropyLoss (with tensor_parallel_dim"));
  // A single-device recipe's config runs on one GPU, whatever the cluster.
  CHECK(keys(fc)["plan.dp"] == "1");
  CHECK(resolve_with(fc, *fc.model, "dgx-h100", 1).dp == 1);
  // Found as torchtune's, and refused as a plan with the option that reads it.
  CHECK(framework_of("model:\n  _component_: torchtune.models.llama3_1.lora_llama3_1_8b\n", "x.yaml") == "torchtune");
  CHECK_THAT(error_of([] { load_plan(sample("torchtune/llama3_1_70B_lora.yaml"), {}); }),
             Catch::Contains("looks like a torchtune recipe config; pass it as --torchtune"));
}

// Note [axolotl configs] (sim/src/config/framework_axolotl.cpp).
TEST_CASE("axolotl: LoRA on every linear layer of an 8-bit base under DDP", "[framework][lora]") {
  const FrameworkConfig fc = read_axolotl_config(sample("axolotl/llama-3.1-8b-lora.yml"));
  CHECK(fc.framework == "axolotl");
  REQUIRE(fc.plan == std::optional<std::string>("ddp"));
  // NousResearch/Meta-Llama-3.1-8B: the organisation and "Meta-" dropped.
  REQUIRE(fc.model == std::optional<std::string>("llama-3.1-8b"));
  auto k = keys(fc);
  // adapter lora with load_in_8bit: bitsandbytes' LLM.int8 base.
  CHECK(k["model.peft"] == "lora_int8");
  // lora_target_linear: find_all_linear_names, every nn.Linear but lm_head.
  CHECK(k["model.lora_targets"] == "[q_proj,k_proj,v_proj,o_proj,gate_proj,up_proj,down_proj]");
  CHECK(k["model.lora_rank"] == "32");
  CHECK(k["plan.micro_batch"] == "2");
  CHECK(k["plan.grad_accum"] == "4");
  CHECK(k["plan.seq_len"] == "4096");
  CHECK(k["plan.precision"] == "bf16");
  // PEFT's adapters are fp32 (autocast_adapter_dtype): dtsim's master copies stay.
  CHECK(k["plan.master_weights"] == "null");
  CHECK(k["plan.recompute"] == "full");
  CHECK(k["plan.optimizer"] == "adamw");
  CHECK(k["plan.attention"] == "null");  // flash_attention_2: dtsim's default
  CHECK(from_of(fc, "plan.micro_batch").find("llama-3.1-8b-lora.yml:28 (micro_batch_size)") != std::string::npos);
  CHECK(listed(fc, "sample_packing=true"));
  CHECK(fc.unmodelled.size() == 1);
  // Rank 32 on q (4096 -> 4096), k and v (-> 1024), o, gate, up (-> 14336)
  // and down: 32 x (8192 + 2 x 5120 + 8192 + 3 x 18432) = 2,621,440 a block.
  const auto m = models::load_model(*fc.model, section(fc, "model"));
  CHECK(m->trainable_parameters() == 32 * 2'621'440);
  const ResolvedPlan r = resolve_with(fc, *fc.model, "dgx-a100", 1);
  CHECK(r.dp == 8);
  CHECK(r.global_batch == 2 * 4 * 8);  // normalize_config: micro x accumulation x world
  // transformers' Trainer runs no pipeline, DeepSpeed's ZeRO-1 no forward
  // gather: a search from the config keeps both as they are.
  CHECK(k["plan.pp"] == "1");
  CHECK(k["plan.overlap_param_gather"] == "false");
  CHECK(fc.search_fixed == std::vector<std::string>{"pp", "overlap_param_gather"});
  const std::vector<Override> user = {{"plan", "tp", "2"}};
  const auto fixed_keys = [](const std::vector<Override>& ov) {
    std::vector<std::string> out;
    for (const auto& o : ov) out.push_back(o.section + "." + o.path);
    return out;
  };
  const auto with = fixed_keys(search_fixed_overrides(with_user_overrides(fc, user), 1, fc.search_fixed));
  const auto without = fixed_keys(search_fixed_overrides(with_user_overrides(fc, user), 1));
  CHECK(std::count(with.begin(), with.end(), "plan.pp") == 1);
  CHECK(std::count(without.begin(), without.end(), "plan.pp") == 0);
  CHECK(std::count(with.begin(), with.end(), "plan.tp") == 1);  // the user's, as always
  CHECK(std::count(with.begin(), with.end(), "plan.dp") == 0);  // the search's
}

TEST_CASE("axolotl: QLoRA of a 70B model under FSDP1 with offload", "[framework][lora]") {
  const FrameworkConfig fc = read_axolotl_config(sample("axolotl/llama-3-70b-qlora-fsdp.yaml"));
  REQUIRE(fc.plan == std::optional<std::string>("fsdp"));
  CHECK(fc.model == std::optional<std::string>("llama-3-70b"));  // casperhansen/llama-3-70b-fp16
  auto k = keys(fc);
  CHECK(k["model.peft"] == "qlora");
  CHECK(k["model.lora_rank"] == "8");
  CHECK(k["plan.seq_len"] == "512");
  CHECK(k["plan.micro_batch"] == "1");
  // The fsdp_ prefixed keys read as the bare ones; accelerate runs FULL_SHARD.
  CHECK(k["plan.fsdp"] == "full_shard");
  CHECK(k["plan.offload_params"] == "cpu");
  CHECK(k["plan.offload_optimizer"] == "cpu");
  // FSDP1 beside a LoRA is priced as FSDP2, and said.
  CHECK(k["plan.fsdp_version"] == "2");
  CHECK(listed(fc, "fsdp_version=1 with an adapter"));
  CHECK(k["plan.master_weights"] == "null");
  // pad_to_sequence_len: every batch as long as sequence_len, nothing to say.
  CHECK(fc.unmodelled.size() == 1);
  const ResolvedPlan r = resolve_with(fc, *fc.model, "dgx-a100", 1);
  CHECK(r.zero_stage == 3);
  CHECK(r.fsdp_version == 2);
  CHECK(r.offload_params == Offload::kCpu);
  CHECK(r.global_batch == 1 * 4 * 8);
}

TEST_CASE("axolotl: full fine-tuning with DeepSpeed ZeRO-3, its auto filled", "[framework]") {
  const FrameworkConfig fc = read_axolotl_config(sample("axolotl/llama-3.1-8b-fft-zero3.yaml"));
  REQUIRE(fc.plan == std::optional<std::string>("zero3"));
  CHECK(fc.model == std::optional<std::string>("llama-3.1-8b"));
  auto k = keys(fc);
  CHECK(k.count("model.peft") == 0);
  CHECK(k["plan.zero_stage"] == "3");
  // train_micro_batch_size_per_gpu and gradient_accumulation_steps "auto":
  // HuggingFace fills them from micro_batch_size and gradient_accumulation_steps.
  CHECK(k["plan.micro_batch"] == "1");
  CHECK(k["plan.grad_accum"] == "2");
  CHECK(from_of(fc, "plan.micro_batch").find("llama-3.1-8b-fft-zero3.yaml") != std::string::npos);
  CHECK(k["plan.precision"] == "bf16");
  // DeepSpeed keeps fp32 masters whatever the model was loaded in.
  CHECK(k["plan.master_weights"] == "null");
  // max_live_parameters is DeepSpeed's field, stage3_max_live_parameters its alias.
  CHECK(k["plan.stage3_max_live_parameters"] == "1000000000");
  // Liger's RMSNorm and SwiGLU together: the fused kernels; its fused
  // linear cross-entropy.
  CHECK(k["plan.kernels"] == "fused");
  CHECK(k["plan.loss_kernel"] == "liger_fused_linear");
  CHECK(listed(fc, "deepspeed zero_optimization.stage3_prefetch_bucket_size=auto"));
  const ResolvedPlan r = resolve_with(fc, *fc.model, "dgx-a100", 1);
  CHECK(r.zero_stage == 3);
  CHECK(r.master_weights);
  CHECK(r.global_batch == 1 * 2 * 8);
}

TEST_CASE("axolotl: hub ids, precision, FSDP knobs, keys listed and errors", "[framework][errors]") {
  // A hub id names dtsim's built-in of the same name.
  for (const auto& [id, name] : std::vector<std::pair<std::string, std::string>>{
           {"meta-llama/Llama-2-7b-hf", "llama-2-7b"},
           {"mistralai/Mistral-7B-v0.1", "mistral-7b"},
           {"Qwen/Qwen2.5-7B-Instruct", "qwen2.5-7b"},
           {"microsoft/Phi-3-mini-4k-instruct", "phi-3-mini"},
           {"Qwen/Qwen3-30B-A3B-Instruct-2507", "qwen3-30b-a3b"},
           {"google/gemma-2-9b-it", "gemma-2-9b"},
           {"mistral-community/Mixtral-8x22B-v0.1", "mixtral-8x22b"},
           {"unsloth/Llama-3.2-1B-Instruct-bnb-4bit", "llama-3.2-1b"},
           {"meta-llama/Meta-Llama-3-70B", "llama-3-70b"},
           {"TinyLlama/TinyLlama-1.1B-Chat-v1.0", ""},
           {"Qwen/Qwen3.5-27B", ""}}) {
    CHECK(axolotl_builtin_of(id) == name);
  }
  // Every name it can give is a built-in.
  for (const std::string& b : axolotl_builtins()) CHECK_NOTHROW(models::load_model(b, {}));
  const std::string head = "base_model: meta-llama/Llama-3.1-8B\nmicro_batch_size: 1\n";
  const auto read = [&](const std::string& rest) { return parse_axolotl_config(head + rest, "a.yml"); };
  // resolve_dtype: bf16 is "auto" unless given, and fp16 wins over auto.
  auto k = keys(read(""));
  CHECK(k["plan.precision"] == "bf16");
  CHECK(k["plan.seq_len"] == "512");  // the schema's default
  // A full fine-tune under DDP steps its bf16 weights as loaded.
  CHECK(k["plan.master_weights"] == "false");
  CHECK(keys(read("fp16: true\n"))["plan.precision"] == "fp16");
  CHECK(keys(read("bf16: false\n"))["plan.precision"] == "fp32");
  // bf16 written null is None (no bf16), not the schema's auto; fp32's
  // matmuls under tf32 (auto) are said.
  CHECK(keys(read("bf16:\n"))["plan.precision"] == "fp32");
  CHECK(listed(read("bf16: false\n"), "tf32 (fp32 matmuls on TF32 tensor cores"));
  CHECK(!listed(read("bf16: false\ntf32: false\n"), "tf32"));
  CHECK(keys(read("bf16: false\n"))["plan.master_weights"] == "null");
  // Under FSDP accelerate upcasts the trained weights to fp32; without
  // autocast (bfloat16) nothing does.
  CHECK(keys(read("fsdp_version: 2\nfsdp_config:\n  offload_params: false\n"))["plan.master_weights"] == "null");
  CHECK(keys(read("bf16: false\nbfloat16: true\nfsdp_version: 2\nfsdp_config: {}\nfsdp: [full_shard]\n"))["plan.master_weights"] == "false");
  // DeepSpeed's ZeRO keeps fp32 partitions of a model loaded in bf16; its stage 0 does not.
  CHECK(keys(read("bf16: false\nbfloat16: true\ndeepspeed: {train_micro_batch_size_per_gpu: auto, zero_optimization: {stage: 2}}\n"))
            ["plan.master_weights"] == "null");
  CHECK(keys(read("bf16: false\nbfloat16: true\ndeepspeed: {train_micro_batch_size_per_gpu: auto, zero_optimization: {stage: 0}}\n"))
            ["plan.master_weights"] == "false");
  // ... but with its own bf16 on, BF16_Optimizer's.
  CHECK(keys(read("bf16: false\nbfloat16: true\ndeepspeed: {train_micro_batch_size_per_gpu: auto, bf16: {enabled: true}}\n"))
            ["plan.master_weights"] == "null");
  // FSDP2 without an adapter keeps its version; reshard_after_forward false
  // and another sharding strategy are not passed on by axolotl: said.
  const FrameworkConfig f2 = read("fsdp_version: 2\nfsdp_config:\n  reshard_after_forward: false\n  sharding_strategy: SHARD_GRAD_OP\n"
                                  "  activation_checkpointing: true\ndp_replicate_size: 2\n");
  auto kf = keys(f2);
  CHECK(kf["plan.fsdp_version"] == "2");
  CHECK(kf["plan.fsdp"] == "hybrid_shard");
  CHECK(kf["plan.recompute"] == "full");
  CHECK(listed(f2, "fsdp_config.reshard_after_forward=false (axolotl passes it only when true"));
  CHECK(listed(f2, "fsdp_config.sharding_strategy=SHARD_GRAD_OP (axolotl does not pass it"));
  CHECK(keys(read("fsdp_config:\n  fsdp_offload_params: true\n"))["plan.fsdp_version"] == "1");
  CHECK(listed(f2, "dp_replicate_size=2 (HSDP priced as dtsim's hybrid_shard"));
  // fsdp_version alone turns nothing on (prepare_optim_env); FSDP beside DeepSpeed is refused.
  CHECK(read("fsdp_version: 2\n").plan == std::optional<std::string>("ddp"));
  CHECK_THAT(error_of([&] { read("fsdp: [full_shard]\ndeepspeed: x.json\n"); }), Catch::Contains("a.yml:4: deepspeed: given beside fsdp or fsdp_config"));
  // The fsdp: list's words reach accelerate through TrainingArguments.
  auto kw = keys(read("fsdp: [shard_grad_op, offload, auto_wrap]\n"));
  CHECK(kw["plan.fsdp"] == "shard_grad_op");
  CHECK(kw["plan.offload_params"] == "cpu");
  const FrameworkConfig sgo = read("adapter: lora\nlora_r: 8\nlora_target_linear: true\nfsdp: full_shard shard_grad_op\n");
  CHECK(keys(sgo)["plan.fsdp"] == "full_shard");
  CHECK(listed(sgo, "fsdp shard_grad_op with an adapter (priced as full_shard)"));
  CHECK_THAT(error_of([&] { read("fsdp: [zero3]\n"); }), Catch::Contains("a.yml:3: fsdp: 'zero3'; valid: full_shard"));
  // Kernels, attention, the loss, parallel sizes, the optimizer.
  auto kk = keys(read("attn_implementation: eager\ntorch_compile: true\ntensor_parallel_size: 2\ncontext_parallel_size: 4\n"
                      "optimizer: sgd\nddp_bucket_cap_mb: 100\n"));
  CHECK(kk["plan.attention"] == "eager");
  CHECK(kk["plan.kernels"] == "fused");
  CHECK(kk["plan.tp"] == "2");
  CHECK(kk["plan.cp"] == "4");
  CHECK(kk["plan.optimizer"] == "sgd");
  CHECK(kk["plan.bucket_mb"] == "100");
  // Liger's fused linear cross-entropy and Cut Cross-Entropy are loss
  // kernels, their keys read with their plugins alone.
  const std::string liger = "plugins: [axolotl.integrations.liger.LigerPlugin]\n";
  const std::string cce = "plugins:\n  - axolotl.integrations.cut_cross_entropy.CutCrossEntropyPlugin\n";
  CHECK(keys(read(liger + "liger_fused_linear_cross_entropy: true\n"))["plan.loss_kernel"] == "liger_fused_linear");
  CHECK(keys(read(cce + "cut_cross_entropy: true\n"))["plan.loss_kernel"] == "cut_cross_entropy");
  const FrameworkConfig bare = read("liger_fused_linear_cross_entropy: true\nliger_rms_norm: true\nliger_glu_activation: true\n");
  CHECK(keys(bare)["plan.loss_kernel"] == "null");
  CHECK(keys(bare)["plan.kernels"] == "null");
  CHECK(listed(bare, "liger_fused_linear_cross_entropy=true without axolotl's LigerPlugin in plugins (not applied)"));
  CHECK(listed(bare, "liger_rms_norm, liger_glu_activation without axolotl's LigerPlugin"));
  CHECK_THAT(error_of([&] { read(liger + "liger_fused_linear_cross_entropy: true\ncut_cross_entropy: true\n"); }),
             Catch::Contains("cut_cross_entropy: given beside liger_fused_linear_cross_entropy"));
  const FrameworkConfig tpl = read(cce + "cut_cross_entropy: true\ntensor_parallel_size: 2\n");
  CHECK(keys(tpl)["plan.loss_kernel"] == "null");
  CHECK(listed(tpl, "cut_cross_entropy=true with tensor_parallel_size"));
  const FrameworkConfig said = read("optimizer: adamw_bnb_8bit\nliger_rms_norm: true\nchunked_cross_entropy: true\n"
                                    "gradient_checkpointing: offload\nmystery_knob: 3\nwandb_project: x\nhub_model_id:\n");
  // Note [8-bit optimizer]: transformers' bitsandbytes AdamW at optim_bits 8.
  CHECK(keys(said)["plan.optimizer"] == "adamw");
  CHECK(keys(said)["plan.optim_bits"] == "8");
  CHECK(!listed(said, "optimizer=adamw_bnb_8bit"));
  const FrameworkConfig paged = read("optimizer: paged_adamw_8bit\n");
  CHECK(keys(paged)["plan.optim_bits"] == "8");
  CHECK(listed(paged, "optimizer=paged_adamw_8bit (paged: its states are priced on the device"));
  // Beside ZeRO-Offload DeepSpeed's CPU Adam steps with fp32 states: said, not 8 bits.
  const FrameworkConfig host =
      read("optimizer: adamw_bnb_8bit\ndeepspeed:\n  train_micro_batch_size_per_gpu: auto\n  zero_optimization:\n    stage: 2\n"
           "    offload_optimizer:\n      device: cpu\n");
  CHECK(keys(host)["plan.optim_bits"] == "null");
  CHECK(listed(host, "optimizer=adamw_bnb_8bit beside DeepSpeed's offload_optimizer"));
  const FrameworkConfig wide = read("optimizer: paged_adamw_32bit\n");
  CHECK(keys(wide)["plan.optim_bits"] == "null");
  CHECK(listed(wide, "optimizer=paged_adamw_32bit (priced as AdamW"));
  CHECK(listed(said, "liger_rms_norm or liger_glu_activation alone"));
  CHECK(listed(said, "chunked_cross_entropy=true"));
  // gradient_checkpointing: offload is activation_offloading: true (axolotl's
  // validation.py): a full fine-tune keeps recompute and offloads the checkpoints.
  CHECK(keys(said)["plan.recompute"] == "full");
  CHECK(keys(said)["plan.enable_activation_offloading"] == "true");
  // Beside an adapter TRL's offloader replaces recompute; hidden_states keeps it.
  const std::string lora16 = "adapter: lora\nlora_r: 16\nlora_target_linear: true\n";
  auto ka = keys(read(lora16 + "gradient_checkpointing: true\nactivation_offloading: true\n"));
  CHECK(ka["plan.enable_activation_offloading"] == "true");
  CHECK(ka["plan.recompute"] == "none");
  ka = keys(read(lora16 + "gradient_checkpointing: true\nactivation_offloading: hidden_states\n"));
  CHECK(ka["plan.enable_activation_offloading"] == "true");
  CHECK(ka["plan.recompute"] == "full");
  CHECK(listed(read("gradient_checkpointing: offload_disk\n"), "activation_offloading=disk (to disk"));
  CHECK_THAT(error_of([&] { read("activation_offloading: true\n"); }),
             Catch::Contains("a.yml:3: activation_offloading: without gradient_checkpointing; axolotl refuses it"));
  CHECK_THAT(error_of([&] { read("gradient_checkpointing: true\nactivation_offloading: nvme\n"); }),
             Catch::Contains("a.yml:4: activation_offloading: 'nvme'; valid: true, false, legacy, disk, hidden_states"));
  CHECK(listed(said, "mystery_knob=3 (not read by dtsim)"));
  CHECK(!listed(said, "wandb_project"));
  // An adapter's 8-bit base, a pattern of targets, names dtsim lacks.
  const FrameworkConfig lo = read("adapter: lora\nlora_r: 16\nload_in_8bit: true\nlora_target_modules: [q_proj, v_proj, lm_head]\n"
                                  "lora_modules_to_save: [embed_tokens]\n");
  auto kl = keys(lo);
  CHECK(kl["model.peft"] == "lora_int8");  // Note [8-bit base]
  CHECK(kl["model.lora_targets"] == "[q_proj,v_proj]");
  CHECK(listed(lo, "lora_target_modules lm_head"));
  CHECK(listed(lo, "lora_modules_to_save"));
  // loaders/model.py quantizes to NF4 for adapter qlora alone (which needs
  // load_in_4bit); a -bnb-4bit checkpoint is NF4 already.
  const FrameworkConfig l4 = read("adapter: lora\nlora_r: 8\nload_in_4bit: true\nlora_target_linear: true\n");
  CHECK(keys(l4)["model.peft"] == "lora");
  CHECK(listed(l4, "load_in_4bit=true with adapter lora (axolotl quantizes only for qlora"));
  CHECK(keys(parse_axolotl_config("base_model: unsloth/Meta-Llama-3.1-8B-bnb-4bit\nadapter: lora\nlora_r: 8\nlora_target_linear: true\n", "a.yml"))
            ["model.peft"] == "qlora");
  CHECK_THAT(error_of([&] { read("adapter: qlora\nlora_r: 8\nlora_target_linear: true\n"); }),
             Catch::Contains("a.yml:3: adapter: qlora needs load_in_4bit: true"));
  // batch_size // micro_batch_size is the accumulation (normalize_config).
  CHECK(keys(read("batch_size: 8\n"))["plan.grad_accum"] == "8");
  CHECK(keys(parse_axolotl_config("base_model: x\nbatch_size: 5\nmicro_batch_size: 2\n", "a.yml"))["plan.grad_accum"] == "2");
  // context_parallel_size wins over its older name.
  CHECK(keys(read("sequence_parallel_degree: 2\ncontext_parallel_size: 4\n"))["plan.cp"] == "4");
  CHECK(keys(read("context_parallel_size: 4\nsequence_parallel_degree: 2\n"))["plan.cp"] == "4");
  // deepspeed: a mapping inline, read as its JSON would be.
  const FrameworkConfig inl = read("deepspeed:\n  zero_optimization:\n    stage: 2\n    overlap_comm: true\n  train_micro_batch_size_per_gpu: auto\n");
  REQUIRE(inl.plan == std::optional<std::string>("zero2"));
  CHECK(keys(inl)["plan.zero_stage"] == "2");
  CHECK(keys(inl)["plan.overlap"] == "true");
  CHECK(keys(inl)["plan.micro_batch"] == "1");
  // A local model directory: its config.json.
  const dtsim::test::TempDir tmp("axolotl-local");
  const std::string dir = tmp.str();
  std::ofstream(tmp.file("config.json")) << "{}";
  CHECK(parse_axolotl_config("base_model: " + dir + "\n", "a.yml").model == std::optional<std::string>(dir + "/config.json"));
  // Any other hub id is the model's name, for the HuggingFace cache.
  const FrameworkConfig unknown = parse_axolotl_config("base_model: TinyLlama/TinyLlama-1.1B-Chat-v1.0\n", "a.yml");
  CHECK(unknown.model == std::optional<std::string>("TinyLlama/TinyLlama-1.1B-Chat-v1.0"));
  // Errors name the file, the line and the key.
  CHECK_THAT(error_of([] { parse_axolotl_config("micro_batch_size: 1\n", "a.yml"); }), Catch::Contains("a.yml: base_model: missing"));
  CHECK_THAT(error_of([&] { read("adapter: lora\nlora_target_linear: true\n"); }), Catch::Contains("a.yml:3: lora_r: missing"));
  CHECK_THAT(error_of([&] { read("adapter: llama-adapter\n"); }), Catch::Contains("a.yml:3: adapter: 'llama-adapter'; valid: lora, qlora"));
  CHECK_THAT(error_of([&] { read("adapter: lora\nlora_r: 8\nlora_target_modules: [lm_head]\n"); }),
             Catch::Contains("a.yml:5: lora_target_modules: names no module dtsim prices"));
  CHECK_THAT(error_of([&] { read("lora_r: 8\n"); }), Catch::Contains("a.yml:3: lora_r: is an adapter's"));
  CHECK_THAT(error_of([] { parse_axolotl_config("base_model: x\nmicro_batch_size: 0\n", "a.yml"); }),
             Catch::Contains("a.yml:2: micro_batch_size: '0'; expected an integer of at least 1"));
  CHECK_THAT(error_of([] { parse_axolotl_config("base_model: x\nbatch_size: 1\nmicro_batch_size: 2\n", "a.yml"); }),
             Catch::Contains("a.yml:2: batch_size: 1 is below micro_batch_size 2"));
  CHECK_THAT(error_of([&] { read("gradient_checkpointing: sometimes\n"); }), Catch::Contains("a.yml:3: gradient_checkpointing: 'sometimes'; valid: true"));
  CHECK_THAT(error_of([&] { read("fsdp_version: 3\nfsdp: [full_shard]\n"); }), Catch::Contains("a.yml:3: fsdp_version: 3; valid: 1, 2"));
  CHECK_THAT(error_of([&] { read("deepspeed: no/such.json\n"); }),
             Catch::Contains("a.yml:3: deepspeed: no/such.json: no such file (looked in the working directory and beside a.yml"));
  CHECK_THAT(error_of([] { parse_axolotl_config("- a\n- b\n", "a.yml"); }), Catch::Contains("a.yml: an axolotl config is a mapping"));
  // Found as axolotl's, and refused as a plan with the option that reads it.
  CHECK(framework_of(head, "x.yaml") == "axolotl");
  CHECK_THAT(error_of([] { load_plan(sample("axolotl/llama-3.1-8b-lora.yml"), {}); }),
             Catch::Contains("looks like an axolotl config; pass it as --axolotl"));
}

// Note [LLaMA-Factory configs]: examples/train_lora/qwen3_lora_sft.yaml.
TEST_CASE("LLaMA-Factory: LoRA on every linear layer of Qwen3 4B under DDP", "[framework][lora]") {
  const FrameworkConfig fc = read_llamafactory_config(sample("llamafactory/qwen3_lora_sft.yaml"));
  CHECK(fc.framework == "LLaMA-Factory");
  REQUIRE(fc.plan == std::optional<std::string>("ddp"));
  // Qwen/Qwen3-4B-Instruct-2507: the organisation, the date and -Instruct dropped.
  REQUIRE(fc.model == std::optional<std::string>("qwen3-4b"));
  auto k = keys(fc);
  CHECK(k["model.peft"] == "lora");
  // lora_target all: find_all_linear_modules, every nn.Linear but lm_head.
  CHECK(k["model.lora_targets"] == "[q_proj,k_proj,v_proj,o_proj,gate_proj,up_proj,down_proj]");
  CHECK(k["model.lora_rank"] == "8");
  CHECK(k["plan.micro_batch"] == "1");
  CHECK(k["plan.grad_accum"] == "8");
  CHECK(k["plan.seq_len"] == "2048");
  CHECK(k["plan.precision"] == "bf16");
  CHECK(k["plan.master_weights"] == "null");  // the adapters cast to fp32 (init_adapter)
  // Gradient checkpointing unless disable_gradient_checkpointing (prepare_model_for_training).
  CHECK(k["plan.recompute"] == "full");
  CHECK(from_of(fc, "plan.recompute").find("disable_gradient_checkpointing") != std::string::npos);
  CHECK(k["plan.optimizer"] == "adamw");
  CHECK(k["plan.attention"] == "null");
  CHECK(k["plan.pp"] == "1");
  CHECK(k["plan.overlap_param_gather"] == "false");
  CHECK(fc.search_fixed == std::vector<std::string>{"pp", "overlap_param_gather"});
  CHECK(from_of(fc, "plan.micro_batch").find("qwen3_lora_sft.yaml:35 (per_device_train_batch_size)") != std::string::npos);
  // sft without packing pads each batch; the dataset, output and schedule keys are silent.
  CHECK(listed(fc, "packing unset"));
  CHECK(fc.unmodelled.size() == 1);
  // Rank 8 on q (2560 -> 4096), k and v (-> 1024), o, gate and up (-> 9728),
  // down: 8 x (2 x 6656 + 2 x 3584 + 3 x 12288) = 458,752 a block, 36 blocks.
  const auto m = models::load_model(*fc.model, section(fc, "model"));
  CHECK(m->trainable_parameters() == 36 * 458'752);
  const ResolvedPlan r = resolve_with(fc, *fc.model, "dgx-h100", 1);
  CHECK(r.dp == 8);
  CHECK(r.global_batch == 1 * 8 * 8);
}

TEST_CASE("LLaMA-Factory: a full fine-tune under ZeRO-3 with neat packing and Liger", "[framework]") {
  const FrameworkConfig fc = read_llamafactory_config(sample("llamafactory/qwen3_full_sft_ds3.yaml"));
  // deepspeed: examples/deepspeed/ds_z3_config.json, found beside the config.
  REQUIRE(fc.plan == std::optional<std::string>("zero3"));
  auto k = keys(fc);
  CHECK(k.count("model.peft") == 0);
  CHECK(k["plan.zero_stage"] == "3");
  CHECK(k["plan.overlap"] == "false");  // its overlap_comm false
  CHECK(k["plan.stage3_max_live_parameters"] == "1000000000");
  // "auto" filled from per_device_train_batch_size and gradient_accumulation_steps.
  CHECK(k["plan.micro_batch"] == "2");
  CHECK(k["plan.grad_accum"] == "4");
  CHECK(k["plan.seq_len"] == "4096");
  CHECK(k["plan.precision"] == "bf16");
  CHECK(k["plan.master_weights"] == "null");
  // enable_liger_kernel: RMSNorm, SwiGLU and the fused linear cross-entropy.
  CHECK(k["plan.kernels"] == "fused");
  CHECK(k["plan.loss_kernel"] == "liger_fused_linear");
  CHECK(listed(fc, "neat_packing=true (each sample attends within itself"));
  CHECK(listed(fc, "deepspeed zero_optimization.stage3_prefetch_bucket_size=auto"));
  CHECK(!listed(fc, "packing unset"));
  const ResolvedPlan r = resolve_with(fc, *fc.model, "dgx-h100", 1);
  CHECK(r.zero_stage == 3);
  CHECK(r.global_batch == 2 * 4 * 8);
}

TEST_CASE("LLaMA-Factory: QLoRA with a paged 8-bit optimizer", "[framework][lora]") {
  const FrameworkConfig fc = read_llamafactory_config(sample("llamafactory/llama3_qlora_sft.yaml"));
  REQUIRE(fc.model == std::optional<std::string>("llama-3.1-8b"));  // meta-llama/Meta-Llama-3.1-8B-Instruct
  auto k = keys(fc);
  // quantization_bit 4 under bitsandbytes: the NF4 base.
  CHECK(k["model.peft"] == "qlora");
  CHECK(k["model.lora_targets"] == "[q_proj,k_proj,v_proj,o_proj]");
  CHECK(k["model.lora_rank"] == "16");
  CHECK(k["plan.optimizer"] == "adamw");
  CHECK(k["plan.optim_bits"] == "8");
  CHECK(k["plan.attention"] == "null");  // sdpa keeps no scores
  CHECK(listed(fc, "optim=paged_adamw_8bit (paged"));
  // Rank 16 on q and o (4096 -> 4096), k and v (-> 1024): 16 x (2 x 8192 + 2 x 5120) a block, 32 blocks.
  const auto m = models::load_model(*fc.model, section(fc, "model"));
  CHECK(m->trainable_parameters() == 32 * 16 * (2 * 8192 + 2 * 5120));
}

TEST_CASE("LLaMA-Factory: defaults, precision, stages, FSDP, keys listed and errors", "[framework][errors]") {
  const std::string head = "model_name_or_path: Qwen/Qwen3-8B\n";
  const auto read = [&](const std::string& rest) { return parse_llamafactory_config(head + rest, "lf.yaml"); };
  // Nothing but the model: LLaMA-Factory's defaults (LoRA rank 8 on every
  // linear, cutoff_len 2048, gradient checkpointing) and transformers'
  // (per_device_train_batch_size 8, no accumulation).
  FrameworkConfig fc = read("");
  REQUIRE(fc.model == std::optional<std::string>("qwen3-8b"));
  auto k = keys(fc);
  CHECK(k["model.peft"] == "lora");
  CHECK(k["model.lora_rank"] == "8");
  CHECK(k["model.lora_targets"] == "[q_proj,k_proj,v_proj,o_proj,gate_proj,up_proj,down_proj]");
  CHECK(k["plan.micro_batch"] == "8");
  CHECK(k["plan.grad_accum"] == "null");
  CHECK(k["plan.seq_len"] == "2048");
  CHECK(k["plan.recompute"] == "full");
  // Neither bf16 nor fp16 under LoRA: the frozen base loaded in bf16 (infer_optim_dtype).
  CHECK(k["plan.precision"] == "bf16");
  // A full fine-tune without them: fp32 throughout.
  CHECK(keys(read("finetuning_type: full\n"))["plan.precision"] == "fp32");
  CHECK(keys(read("finetuning_type: full\nfp16: true\n"))["plan.precision"] == "fp16");
  // pure_bf16: the bf16 weights stepped as they are, no master.
  k = keys(read("finetuning_type: full\npure_bf16: true\n"));
  CHECK(k["plan.precision"] == "bf16");
  CHECK(k["plan.master_weights"] == "false");
  CHECK_THAT(error_of([&] { read("finetuning_type: full\npure_bf16: true\ndeepspeed: {train_micro_batch_size_per_gpu: auto, zero_optimization: {stage: 3}}\n"); }),
             Catch::Contains("lf.yaml:3: pure_bf16: beside DeepSpeed ZeRO-3"));
  // Under DeepSpeed's ZeRO-2 the bf16 weights still get fp32 partitions to
  // step; at stage 0 (bf16 off: pure_bf16 fills "auto" with false) they are stepped as they are.
  CHECK(keys(read("finetuning_type: full\npure_bf16: true\ndeepspeed: {train_micro_batch_size_per_gpu: auto, zero_optimization: {stage: 0}}\n"))
            ["plan.master_weights"] == "false");
  // bf16: true beside it fills DeepSpeed's "auto" bf16 with true: its BF16_Optimizer keeps masters.
  CHECK(keys(read("finetuning_type: full\npure_bf16: true\nbf16: true\ndeepspeed: {train_micro_batch_size_per_gpu: auto, bf16: {enabled: auto}}\n"))
            ["plan.master_weights"] == "true");
  k = keys(read("finetuning_type: full\npure_bf16: true\ndeepspeed: {train_micro_batch_size_per_gpu: auto, zero_optimization: {stage: 2}}\n"));
  CHECK(k["plan.precision"] == "bf16");
  CHECK(k["plan.master_weights"] == "true");
  k = keys(read("disable_gradient_checkpointing: true\nflash_attn: disabled\n"));
  CHECK(k["plan.recompute"] == "null");
  CHECK(k["plan.attention"] == "eager");
  CHECK(listed(read("use_unsloth_gc: true\n"), "use_unsloth_gc=true (the checkpoints offloaded"));
  // pt packs by default, across samples: nothing to say.
  CHECK(!listed(read("stage: pt\n"), "packing unset"));
  CHECK(!listed(read("packing: true\n"), "packing unset"));
  // quantization_bit 8: LLM.int8; HQQ's 2 bits priced as NF4, said.
  CHECK(keys(read("quantization_bit: 8\n"))["model.peft"] == "lora_int8");
  fc = read("quantization_bit: 2\nquantization_method: hqq\n");
  CHECK(keys(fc)["model.peft"] == "qlora");
  CHECK(listed(fc, "quantization_bit=2 with hqq (priced as bitsandbytes' 4-bit NF4 base)"));
  // lora_target: names separated by commas; one dtsim does not price is said.
  fc = read("lora_target: q_proj, v_proj,lm_head\n");
  CHECK(keys(fc)["model.lora_targets"] == "[q_proj,v_proj]");
  CHECK(listed(fc, "lora_target lm_head (its adapter is not priced"));
  // LLaMA-Factory's own optimizers, other backends and unknown keys are listed; trackers are silent.
  fc = read("finetuning_type: full\nuse_galore: true\nuse_mca: true\nfrobnicate: 3\nswanlab_project: x\n");
  CHECK(listed(fc, "use_galore=true (priced as AdamW"));
  CHECK(listed(fc, "use_mca=true (another training backend"));
  CHECK(listed(fc, "frobnicate=3 (not read by dtsim)"));
  CHECK(!listed(fc, "swanlab_project"));
  CHECK(keys(read("ddp_bucket_cap_mb: 100\n"))["plan.bucket_mb"] == "100");
  // Keys that change what is trained or how, said where dtsim does not price them.
  CHECK(listed(read("add_special_tokens: <think>\n"), "add_special_tokens (the embedding and head resized and trained whole"));
  CHECK(listed(read("adapter_name_or_path: saves/lora\n"), "adapter_name_or_path (a saved adapter keeps its own rank"));
  CHECK(listed(read("finetuning_type: full\ntf32: true\n"), "tf32=true"));
  CHECK(listed(read("fsdp_config: {fsdp_version: 2}\n"), "fsdp_config without fsdp"));
  CHECK(listed(read("fsdp: full_shard\nfsdp_config: {fsdp_version: 2, xla: true}\n"), "fsdp_config.xla=true (not read by dtsim)"));
  // transformers' own gradient_checkpointing still checkpoints when LLaMA-Factory's is disabled.
  CHECK(keys(read("disable_gradient_checkpointing: true\ngradient_checkpointing: true\n"))["plan.recompute"] == "full");
  // Liger only for the model types liger_kernel.py lists.
  fc = parse_llamafactory_config("model_name_or_path: HuggingFaceTB/SmolLM3-3B\nenable_liger_kernel: true\n", "lf.yaml");
  CHECK(keys(fc)["plan.kernels"] == "null");
  CHECK(listed(fc, "enable_liger_kernel=true (smollm3-3b's model type is not one LLaMA-Factory applies Liger to"));
  // LoRA under ZeRO-3 (its examples/train_lora/qwen3_lora_sft_ds3.yaml):
  // the frozen base partitioned with the adapters (Note [Frozen weights
  // under ZeRO-3]); 8 GPUs of 1 x 8 x 2 accumulation steps.
  fc = read("deepspeed: {train_micro_batch_size_per_gpu: auto, gradient_accumulation_steps: auto, zero_optimization: {stage: 3}}\n"
            "per_device_train_batch_size: 1\ngradient_accumulation_steps: 2\nbf16: true\n");
  REQUIRE(fc.plan == std::optional<std::string>("zero3"));
  const ResolvedPlan z3 = resolve_with(fc, *fc.model, "dgx-h100", 1);
  CHECK(z3.zero_stage == 3);
  CHECK(!z3.fsdp);
  CHECK(z3.global_batch == 1 * 2 * 8);
  // FSDP through transformers' words; a LoRA under FSDP1 is priced as FSDP2.
  fc = read("finetuning_type: full\nfsdp: shard_grad_op offload auto_wrap\nfsdp_config:\n  fsdp_version: 2\n");
  REQUIRE(fc.plan == std::optional<std::string>("fsdp"));
  k = keys(fc);
  CHECK(k["plan.fsdp"] == "shard_grad_op");
  CHECK(k["plan.offload_params"] == "cpu");
  CHECK(k["plan.offload_optimizer"] == "cpu");
  CHECK(k["plan.fsdp_version"] == "2");
  fc = read("fsdp: full_shard auto_wrap\n");
  CHECK(keys(fc)["plan.fsdp_version"] == "2");
  CHECK(listed(fc, "fsdp_version=1 with an adapter"));
  // Errors: one line naming the file, the line and what is valid.
  CHECK_THAT(error_of([&] { read("stage: dpo\n"); }), Catch::Contains("lf.yaml:2: stage: 'dpo'; dtsim prices pt and sft"));
  CHECK_THAT(error_of([&] { read("finetuning_type: freeze\n"); }), Catch::Contains("lf.yaml:2: finetuning_type: 'freeze'; dtsim prices full and lora"));
  CHECK_THAT(error_of([&] { read("finetuning_type: full\nquantization_bit: 4\n"); }),
             Catch::Contains("lf.yaml:3: quantization_bit: beside finetuning_type full"));
  CHECK_THAT(error_of([&] { read("quantization_bit: 3\n"); }), Catch::Contains("lf.yaml:2: quantization_bit: 3; bitsandbytes takes 4 or 8"));
  CHECK_THAT(error_of([&] { read("quantization_bit: 4\nquantization_method: eetq\n"); }), Catch::Contains("lf.yaml:2: quantization_bit: 4; EETQ takes 8"));
  CHECK_THAT(error_of([&] { read("quantization_bit: 7\nquantization_method: hqq\n"); }), Catch::Contains("lf.yaml:2: quantization_bit: 7; HQQ takes 1-6 or 8"));
  CHECK_THAT(error_of([&] { read("quantization_bit: 4\nquantization_method: hqq\nfsdp: full_shard\n"); }),
             Catch::Contains("lf.yaml:3: quantization_method: hqq beside FSDP; LLaMA-Factory refuses it"));
  CHECK_THAT(error_of([&] { read("quantization_bit: 4\nfp8: true\n"); }), Catch::Contains("lf.yaml:2: quantization_bit: beside fp8"));
  CHECK_THAT(error_of([&] { read("stage: pt\nneat_packing: true\n"); }), Catch::Contains("lf.yaml:3: neat_packing: with stage pt"));
  CHECK_THAT(error_of([&] { read("lora_target: lm_head\n"); }), Catch::Contains("lf.yaml:2: lora_target: names no module dtsim prices"));
  CHECK_THAT(error_of([&] { read("flash_attn: fa9\n"); }), Catch::Contains("lf.yaml:2: flash_attn: 'fa9'; valid: auto, disabled, sdpa, fa2, fa3"));
  CHECK_THAT(error_of([&] { read("per_device_train_batch_size: 0\n"); }),
             Catch::Contains("lf.yaml:2: per_device_train_batch_size: '0'; expected an integer of at least 1"));
  CHECK_THAT(error_of([&] { read("deepspeed: no/such.json\n"); }),
             Catch::Contains("lf.yaml:2: deepspeed: no/such.json: no such file (looked in the working directory and beside lf.yaml"));
  CHECK_THAT(error_of([&] { read("deepspeed: {train_micro_batch_size_per_gpu: auto, zero_optimization: {stage: 2}}\nfsdp: full_shard\n"); }),
             Catch::Contains("lf.yaml:2: deepspeed: given beside fsdp"));
  CHECK_THAT(error_of([] { parse_llamafactory_config("stage: sft\n", "lf.yaml"); }), Catch::Contains("model_name_or_path: missing"));
  CHECK_THAT(error_of([] { parse_llamafactory_config("- a\n", "lf.yaml"); }), Catch::Contains("lf.yaml: a LLaMA-Factory config is a mapping"));
  // Found as LLaMA-Factory's by its template, stage or finetuning_type (a
  // bare model_name_or_path is TRL's), and refused as a plan with the option
  // that reads it.
  CHECK(framework_of(head + "template: qwen3\n", "x.yaml") == "llamafactory");
  CHECK(framework_of(head + "finetuning_type: lora\n", "x.yaml") == "llamafactory");
  CHECK_THAT(error_of([] { load_plan(sample("llamafactory/qwen3_lora_sft.yaml"), {}); }),
             Catch::Contains("looks like a LLaMA-Factory config; pass it as --llamafactory"));
  CHECK(read_framework_config("llamafactory", sample("llamafactory/qwen3_lora_sft.yaml")).framework == "LLaMA-Factory");
}

// Note [accelerate configs]: LLaMA-Factory's examples/accelerate/fsdp_config.yaml.
TEST_CASE("accelerate: FSDP, DeepSpeed and DDP as accelerate launch hands them to the script", "[framework]") {
  FrameworkConfig fc = read_accelerate_config(sample("llamafactory/fsdp_config.yaml"));
  CHECK(fc.framework == "accelerate");
  REQUIRE(fc.plan == std::optional<std::string>("fsdp"));
  CHECK(!fc.model);
  auto k = keys(fc);
  CHECK(k["plan.fsdp"] == "full_shard");
  CHECK(k["plan.fsdp_version"] == "1");
  CHECK(k["plan.precision"] == "bf16");
  CHECK(k["plan.dp"] == "8");  // num_processes
  CHECK(k["plan.offload_params"] == "null");
  CHECK(fc.unmodelled.empty());  // the launcher's keys and FSDP's loading and state-dict keys are silent
  // The Accelerator runs no pipeline: a search keeps pp 1.
  CHECK(k["plan.pp"] == "1");
  CHECK(fc.search_fixed == std::vector<std::string>{"pp", "overlap_param_gather"});
  const auto read = [](const std::string& text) { return parse_accelerate_config(text, "acc.yaml"); };
  // FSDP2: reshard_after_forward false keeps the gathered parameters (SHARD_GRAD_OP);
  // offload and checkpointing; without a wrap policy the plugin's NO_WRAP, said.
  fc = read("distributed_type: FSDP\nnum_processes: 16\nfsdp_config:\n  fsdp_version: 2\n  fsdp_reshard_after_forward: false\n"
            "  fsdp_offload_params: true\n  fsdp_activation_checkpointing: true\n");
  k = keys(fc);
  CHECK(k["plan.fsdp"] == "shard_grad_op");
  CHECK(k["plan.fsdp_version"] == "2");
  CHECK(k["plan.offload_params"] == "cpu");
  CHECK(k["plan.offload_optimizer"] == "cpu");
  CHECK(k["plan.recompute"] == "full");
  CHECK(k["plan.precision"] == "fp32");  // mixed_precision: no
  CHECK(listed(fc, "fsdp_auto_wrap_policy=NO_WRAP (the plugin's default"));
  // FSDP1's strategies by number (ShardingStrategy's values) and HSDP by parallelism_config.
  CHECK(keys(read("distributed_type: FSDP\nfsdp_config:\n  fsdp_sharding_strategy: 2\n  fsdp_auto_wrap_policy: TRANSFORMER_BASED_WRAP\n"))["plan.fsdp"] ==
        "shard_grad_op");
  fc = read("distributed_type: FSDP\nnum_processes: 16\nparallelism_config:\n  parallelism_config_dp_replicate_size: 2\n"
            "  parallelism_config_tp_size: 2\nfsdp_config:\n  fsdp_version: 2\n  fsdp_auto_wrap_policy: TRANSFORMER_BASED_WRAP\n");
  k = keys(fc);
  CHECK(k["plan.fsdp"] == "hybrid_shard");
  CHECK(k["plan.tp"] == "2");
  CHECK(k["plan.dp"] == "8");  // 16 processes over tp 2
  // DeepSpeedPlugin's own fields as the DeepSpeed config they make (stage 2 by default).
  fc = read("distributed_type: DEEPSPEED\nmixed_precision: bf16\nnum_processes: 8\ndeepspeed_config:\n  zero_stage: 3\n"
            "  offload_optimizer_device: cpu\n  gradient_accumulation_steps: 4\n");
  REQUIRE(fc.plan == std::optional<std::string>("zero3"));
  k = keys(fc);
  CHECK(k["plan.offload_optimizer"] == "cpu");
  CHECK(k["plan.grad_accum"] == "4");
  CHECK(k["plan.precision"] == "bf16");
  CHECK(read("distributed_type: DEEPSPEED\n").plan == std::optional<std::string>("zero2"));
  // deepspeed_config_file beside the config (axolotl's zero3_bf16.json).
  fc = parse_accelerate_config("distributed_type: DEEPSPEED\ndeepspeed_config:\n  deepspeed_config_file: deepspeed_configs/zero3_bf16.json\n",
                               sample("axolotl/acc.yaml"));
  CHECK(fc.plan == std::optional<std::string>("zero3"));
  // A bare NO is PyYAML's false: one process. MULTI_GPU is DDP; dynamo compiles.
  fc = read("distributed_type: NO\nmixed_precision: fp16\n");
  CHECK(fc.plan == std::optional<std::string>("ddp"));
  CHECK(keys(fc)["plan.dp"] == "1");
  CHECK(keys(fc)["plan.precision"] == "fp16");
  k = keys(read("distributed_type: MULTI_GPU\nnum_processes: 4\ndynamo_config:\n  dynamo_backend: INDUCTOR\n"));
  CHECK(k["plan.dp"] == "4");
  CHECK(k["plan.kernels"] == "fused");
  // fp8: Transformer Engine's delayed scaling, torchao's tensor-wise.
  CHECK(keys(read("distributed_type: MULTI_GPU\nmixed_precision: fp8\n"))["plan.fp8_recipe"] == "null");
  CHECK(keys(read("distributed_type: MULTI_GPU\nmixed_precision: fp8\nfp8_config:\n  backend: AO\n"))["plan.fp8_recipe"] == "tensorwise");
  CHECK(listed(read("distributed_type: MULTI_GPU\nfrobnicate: 1\n"), "frobnicate=1 (not read by dtsim)"));
  // Without a backend accelerate picks by what is installed (said); torchao's FSDP2 float8 all-gather.
  CHECK(listed(read("distributed_type: MULTI_GPU\nmixed_precision: fp8\n"), "fp8_config.backend unset"));
  CHECK(keys(read("distributed_type: FSDP\nmixed_precision: fp8\nfp8_config:\n  backend: AO\n  enable_fsdp_float8_all_gather: true\n"))
            ["plan.fp8_param_gather"] == "true");
  // fsdp_config's keys with or without their prefix; FSDP1 without backward prefetch said.
  CHECK(keys(read("distributed_type: FSDP\nfsdp_config:\n  version: 2\n  auto_wrap_policy: TRANSFORMER_BASED_WRAP\n"))["plan.fsdp_version"] == "2");
  CHECK(listed(read("distributed_type: FSDP\nfsdp_config:\n  fsdp_auto_wrap_policy: TRANSFORMER_BASED_WRAP\n"), "fsdp_backward_prefetch=unset (priced as BACKWARD_PRE)"));
  // Sequence parallelism's ranks counted out of dp, said.
  fc = read("distributed_type: FSDP\nnum_processes: 8\nparallelism_config:\n  parallelism_config_sp_size: 2\n");
  CHECK(keys(fc)["plan.dp"] == "4");
  CHECK(listed(fc, "parallelism_config_sp_size=2"));
  // A DeepSpeed file's own bf16 stands over mixed_precision: no (set_mixed_precision fills only what it leaves out).
  const std::string dsfile = (std::filesystem::temp_directory_path() / ("dtsim_acc_ds_" + std::to_string(::getpid()) + ".json")).string();
  std::ofstream(dsfile) << R"({"train_micro_batch_size_per_gpu": 1, "bf16": {"enabled": true}, "zero_optimization": {"stage": 2}})";
  fc = read("distributed_type: DEEPSPEED\nmixed_precision: 'no'\ndeepspeed_config:\n  deepspeed_config_file: " + dsfile + "\n");
  std::filesystem::remove(dsfile);
  CHECK(keys(fc)["plan.precision"] == "bf16");
  // Errors: one line naming the file, the line and what is valid.
  CHECK_THAT(error_of([&] { read("mixed_precision: bf16\n"); }), Catch::Contains("distributed_type: missing"));
  CHECK_THAT(error_of([&] { read("distributed_type: MEGATRON_LM\n"); }), Catch::Contains("acc.yaml:1: distributed_type: MEGATRON_LM"));
  CHECK_THAT(error_of([&] { read("distributed_type: XLA\n"); }), Catch::Contains("acc.yaml:1: distributed_type: 'XLA'; valid: NO, MULTI_GPU, FSDP, DEEPSPEED"));
  CHECK_THAT(error_of([&] { read("distributed_type: FSDP\nmixed_precision: int4\n"); }), Catch::Contains("acc.yaml:2: mixed_precision: 'int4'; valid: no, fp16, bf16, fp8"));
  CHECK_THAT(error_of([&] { read("distributed_type: FSDP\nnum_processes: 6\nparallelism_config:\n  parallelism_config_tp_size: 4\n"); }),
             Catch::Contains("acc.yaml:2: num_processes: 6 is not a multiple of tp x cp = 4"));
  CHECK_THAT(error_of([&] { read("distributed_type: FSDP\nfsdp_config:\n  fsdp_sharding_strategy: HALF_SHARD\n"); }),
             Catch::Contains("acc.yaml:3: fsdp_config.fsdp_sharding_strategy: 'HALF_SHARD'; valid: FULL_SHARD"));
  // FSDP1 takes its strategy from fsdp_reshard_after_forward where the
  // deprecated fsdp_sharding_strategy is absent (the plugin's fallback); a
  // boolean is FSDP2's.
  CHECK(keys(read("distributed_type: FSDP\nfsdp_config:\n  fsdp_version: 1\n  fsdp_reshard_after_forward: SHARD_GRAD_OP\n"))["plan.fsdp"] ==
        "shard_grad_op");
  CHECK(keys(read("distributed_type: FSDP\nfsdp_config:\n  fsdp_reshard_after_forward: 3\n"))["plan.fsdp"] == "no_shard");
  CHECK_THAT(error_of([&] { read("distributed_type: FSDP\nfsdp_config:\n  fsdp_reshard_after_forward: true\n"); }),
             Catch::Contains("acc.yaml:3: fsdp_config.fsdp_reshard_after_forward: 'TRUE'; valid: FULL_SHARD"));
  // DeepSpeed's ranks are the launcher's num_processes (the config's dp,
  // left unset by the plugin's fields, read first).
  CHECK(keys(read("distributed_type: DEEPSPEED\ndeepspeed_config:\n  zero_stage: 3\nnum_processes: 16\n"))["plan.dp"] == "16");
  CHECK_THAT(error_of([&] { read("distributed_type: DEEPSPEED\ndeepspeed_config:\n  deepspeed_config_file: no/such.json\n"); }),
             Catch::Contains("acc.yaml:3: deepspeed_config.deepspeed_config_file: no/such.json: no such file (looked in the working "
                             "directory and beside acc.yaml)"));
  CHECK_THAT(error_of([&] { read("distributed_type: DEEPSPEED\ndeepspeed_config:\n  deepspeed_config_file: {stage: 3}\n"); }),
             Catch::Contains("acc.yaml:3: deepspeed_config.deepspeed_config_file:"));
  CHECK_THAT(error_of([&] { read("distributed_type: DEEPSPEED\ndeepspeed_config:\n  zero_stage: 4\n"); }),
             Catch::Contains("acc.yaml:3: deepspeed_config.zero_stage: '4'; valid: 0, 1, 2, 3"));
  CHECK(framework_of("distributed_type: FSDP\n", "x.yaml") == "accelerate");
  CHECK_THAT(error_of([] { load_plan(sample("llamafactory/fsdp_config.yaml"), {}); }),
             Catch::Contains("looks like an accelerate config; pass it as --accelerate"));
}

// Note [accelerate under a trainer].
TEST_CASE("accelerate under a trainer's config: its distribution, the trainer's written keys", "[framework]") {
  const std::string acc = sample("llamafactory/fsdp_config.yaml");
  // LLaMA-Factory's LoRA example under accelerate's FSDP (LLaMA-Factory's
  // README: accelerate launch --config_file examples/accelerate/fsdp_config.yaml).
  FrameworkConfig fc = read_framework_config("llamafactory", sample("llamafactory/qwen3_lora_sft.yaml"), acc);
  CHECK(fc.framework == "LLaMA-Factory under accelerate");
  REQUIRE(fc.plan == std::optional<std::string>("fsdp"));
  REQUIRE(fc.model == std::optional<std::string>("qwen3-4b"));
  auto k = keys(fc);
  CHECK(k["plan.fsdp"] == "full_shard");
  CHECK(k["plan.fsdp_version"] == "2");  // FSDP1 beside a LoRA, priced as FSDP2
  CHECK(listed(fc, "fsdp_version=1 with an adapter"));
  CHECK(k["plan.micro_batch"] == "1");
  CHECK(k["plan.grad_accum"] == "8");
  CHECK(k["plan.recompute"] == "full");
  CHECK(k["plan.dp"] == "8");
  CHECK(k["model.peft"] == "lora");
  const ResolvedPlan r = resolve_with(fc, *fc.model, "dgx-h100", 1);
  CHECK(r.fsdp);
  CHECK(r.zero_stage == 3);
  CHECK(r.fsdp_version == 2);
  CHECK(r.global_batch == 1 * 8 * 8);
  // The trainer's written key wins (bf16: true over accelerate's fp16); a
  // default of its framework yields (a LoRA's inferred bf16 base).
  const std::string fp16 = "distributed_type: MULTI_GPU\nmixed_precision: fp16\nnum_processes: 2\n";
  const FrameworkConfig lf_bf16 = parse_llamafactory_config("model_name_or_path: Qwen/Qwen3-8B\nbf16: true\n", "lf.yaml");
  const FrameworkConfig lf_none = parse_llamafactory_config("model_name_or_path: Qwen/Qwen3-8B\n", "lf.yaml");
  const FrameworkConfig a16 = parse_accelerate_config(fp16, "acc.yaml");
  CHECK(keys(with_accelerate(lf_bf16, a16))["plan.precision"] == "bf16");
  CHECK(keys(with_accelerate(lf_none, a16))["plan.precision"] == "fp16");
  CHECK(keys(with_accelerate(lf_none, a16))["plan.dp"] == "2");
  // The trainer's own DeepSpeed runs; accelerate's ranks still count.
  const FrameworkConfig lf_ds = parse_llamafactory_config(
      "model_name_or_path: Qwen/Qwen3-8B\ndeepspeed: {train_micro_batch_size_per_gpu: auto, zero_optimization: {stage: 2}}\n", "lf.yaml");
  fc = with_accelerate(lf_ds, read_accelerate_config(acc));
  CHECK(fc.plan == std::optional<std::string>("zero2"));
  CHECK(keys(fc)["plan.dp"] == "8");
  CHECK(listed(fc, acc + " distributed_type (the trainer config's own zero2 runs)"));
  // A DeepSpeed config at stage 0 is the trainer's own distribution too (plan ddp, but DeepSpeed's).
  const FrameworkConfig lf_z0 = parse_llamafactory_config(
      "model_name_or_path: Qwen/Qwen3-8B\ndeepspeed: {train_micro_batch_size_per_gpu: auto, zero_optimization: {stage: 0}}\n", "lf.yaml");
  CHECK(with_accelerate(lf_z0, read_accelerate_config(acc)).plan == std::optional<std::string>("ddp"));
  // accelerate's written 'no' leaves a LoRA's bf16 base; DDP's bucket cap does nothing under its FSDP.
  const FrameworkConfig no = parse_accelerate_config("distributed_type: FSDP\nmixed_precision: 'no'\nnum_processes: 8\n", "acc.yaml");
  CHECK(keys(with_accelerate(lf_none, no))["plan.precision"] == "bf16");
  const FrameworkConfig lf_bucket = parse_llamafactory_config("model_name_or_path: Qwen/Qwen3-8B\nddp_bucket_cap_mb: 50\n", "lf.yaml");
  CHECK(keys(with_accelerate(lf_bucket, no))["plan.bucket_mb"] == "null");
  // Under the trainer's own FSDP accelerate's bf16 still holds for a full fine-tune that writes none.
  const FrameworkConfig lf_fsdp = parse_llamafactory_config("model_name_or_path: Qwen/Qwen3-8B\nfinetuning_type: full\nfsdp: full_shard\n", "lf.yaml");
  fc = with_accelerate(lf_fsdp, read_accelerate_config(acc));
  CHECK(fc.plan == std::optional<std::string>("fsdp"));
  CHECK(keys(fc)["plan.precision"] == "bf16");
  CHECK(keys(fc)["plan.dp"] == "8");
  CHECK_THAT(error_of([&] { read_framework_config("torchtune", sample("torchtune/llama3_1_70B_lora.yaml"), acc); }),
             Catch::Contains("an accelerate config launches transformers' Trainer; it combines with a LLaMA-Factory, axolotl or TRL config, not a torchtune config"));
  // Alone, it is the plan.
  CHECK(read_framework_config("", "", acc).plan == std::optional<std::string>("fsdp"));
}

TEST_CASE("deepspeed: ZeRO-3's knobs by their field names, stage3_ their aliases", "[framework][deepspeed]") {
  // zero/config.py: max_live_parameters = Field(..., alias="stage3_max_live_parameters").
  const FrameworkConfig fc = parse_deepspeed_config(
      R"({"train_micro_batch_size_per_gpu": 1, "zero_optimization": {"stage": 3, "max_live_parameters": 0, "prefetch_bucket_size": 2e7}})", "d.json");
  auto k = keys(fc);
  CHECK(k["plan.stage3_max_live_parameters"] == "0");
  CHECK(k["plan.stage3_prefetch_bucket_size"] == "20000000");
  CHECK(fc.unmodelled.empty());
  CHECK_THAT(error_of([] {
               parse_deepspeed_config(R"({"train_micro_batch_size_per_gpu": 1, "zero_optimization": {"stage": 3, "max_live_parameters": 0, )"
                                      R"("stage3_max_live_parameters": 1}})", "d.json");
             }),
             Catch::Contains("max_live_parameters: given beside stage3_max_live_parameters, its alias"));
}

// Note [TRL configs]: `trl sft --config`, LoRA on every linear layer over
// the model as TRL loads it (float32) under its bf16 default.
TEST_CASE("TRL: LoRA over Qwen3 8B loaded in float32, TRL's defaults, DDP over num_processes", "[framework][lora]") {
  const FrameworkConfig fc = read_trl_config(sample("trl/qwen3_8b_lora_sft.yaml"));
  CHECK(fc.framework == "TRL");
  REQUIRE(fc.plan == std::optional<std::string>("ddp"));
  REQUIRE(fc.model == std::optional<std::string>("qwen3-8b"));
  auto k = keys(fc);
  // ModelConfig's dtype defaults to float32; bf16 autocast over it: the
  // frozen base in fp32 (Note [fp32 base]).
  CHECK(k["model.peft"] == "lora_fp32");
  CHECK(k["model.lora_rank"] == "32");
  CHECK(k["model.lora_targets"] == "[q_proj,k_proj,v_proj,o_proj,gate_proj,up_proj,down_proj]");  // all-linear
  CHECK(k["plan.precision"] == "bf16");  // TRL's bf16 default
  CHECK(k["plan.master_weights"] == "null");  // PEFT keeps the adapters in fp32
  CHECK(k["plan.recompute"] == "full");       // TRL's gradient_checkpointing default
  CHECK(k["plan.loss_kernel"] == "chunked_nll");
  CHECK(k["plan.micro_batch"] == "4");
  CHECK(k["plan.grad_accum"] == "4");
  CHECK(k["plan.seq_len"] == "4096");
  CHECK(k["plan.dp"] == "8");  // num_processes, a launcher flag
  CHECK(k["plan.pp"] == "1");
  CHECK(from_of(fc, "plan.seq_len").find("qwen3_8b_lora_sft.yaml:14 (max_length)") != std::string::npos);
  // Wrapped packing is one sequence, exactly; the rest is silent.
  CHECK(fc.unmodelled.empty());
  // Rank 32 on q and o (4096 -> 4096), k and v (-> 1024), gate and up (->
  // 12288), down: 32 x (2 x 8192 + 2 x 5120 + 3 x 16384) = 2,424,832 a block.
  const auto m = models::load_model(*fc.model, section(fc, "model"));
  CHECK(m->trainable_parameters() == 36 * 2'424'832);
  const ResolvedPlan r = resolve_with(fc, *fc.model, "dgx-h100", 1);
  CHECK(r.dp == 8);
  CHECK(r.global_batch == 4 * 4 * 8);
  CHECK(r.loss_kernel == LossKernel::kChunkedNll);
}

TEST_CASE("TRL: a full fine-tune in bfloat16 under TRL's own accelerate_config zero3, with Liger", "[framework]") {
  const FrameworkConfig fc = read_trl_config(sample("trl/llama31_8b_full_zero3.yaml"));
  CHECK(fc.framework == "TRL under accelerate");
  REQUIRE(fc.plan == std::optional<std::string>("zero3"));
  REQUIRE(fc.model == std::optional<std::string>("llama-3.1-8b"));
  CHECK(fc.deepspeed);
  auto k = keys(fc);
  CHECK(k["plan.precision"] == "bf16");
  // Loaded in bfloat16, but DeepSpeed keeps fp32 partitions of what it trains.
  CHECK(k["plan.master_weights"] == "null");
  CHECK(std::any_of(fc.overrides.begin(), fc.overrides.end(),
                    [](const Override& o) { return o.path == "master_weights" && o.from.find("DeepSpeed keeps fp32 partitions") != std::string::npos; }));
  CHECK(k["plan.kernels"] == "fused");
  CHECK(k["plan.loss_kernel"] == "liger_fused_linear");  // loss_type nll under use_liger_kernel
  CHECK(k["plan.seq_len"] == "8192");
  CHECK(k["plan.dp"] == "8");  // trl/accelerate_configs/zero3.yaml's num_processes
  CHECK(from_of(fc, "plan.dp").find("trl/accelerate_configs/zero3.yaml") != std::string::npos);
  CHECK(listed(fc, "packing with packing_strategy bfd"));
  const ResolvedPlan r = resolve_with(fc, *fc.model, "dgx-h100", 1);
  CHECK(r.zero_stage == 3);
  CHECK(!r.fsdp);
  CHECK(r.master_weights);
}

TEST_CASE("TRL: defaults, dtype and precision, adapters, packing, loss, launcher keys and errors", "[framework][errors]") {
  const std::string head = "model_name_or_path: Qwen/Qwen3-8B\n";
  const auto read = [&](const std::string& rest) { return parse_trl_config(head + rest, "trl.yaml"); };
  // Nothing but the model: a full fine-tune loaded in float32 under bf16
  // autocast (master copies), 8 x 1024 tokens, checkpointed, the chunked loss.
  FrameworkConfig fc = read("");
  auto k = keys(fc);
  CHECK(k.count("model.peft") == 0);
  CHECK(k["plan.precision"] == "bf16");
  CHECK(fc.binding_defaults == std::vector<std::string>{"precision"});
  CHECK(k["plan.master_weights"] == "null");
  CHECK(k["plan.micro_batch"] == "8");
  CHECK(k["plan.seq_len"] == "1024");
  CHECK(k["plan.recompute"] == "full");
  CHECK(k["plan.loss_kernel"] == "chunked_nll");
  CHECK(k["plan.optimizer"] == "adamw");
  CHECK(listed(fc, "packing false"));
  // Loaded in bfloat16: stepped as it is, its states in bf16, under DDP;
  // FSDP keeps fp32 copies (accelerate upcasts what is trained).
  CHECK(keys(read("dtype: bfloat16\n"))["plan.master_weights"] == "false");
  CHECK(keys(read("torch_dtype: bfloat16\n"))["plan.master_weights"] == "false");
  // sft.py replaces model_init_kwargs with ModelConfig's dtype: said, not read.
  fc = read("model_init_kwargs: {dtype: bfloat16}\n");
  CHECK(keys(fc)["plan.master_weights"] == "null");
  CHECK(listed(fc, "model_init_kwargs (trl sft replaces it"));
  CHECK(keys(read("dtype: bfloat16\nfsdp: full_shard\n"))["plan.master_weights"] == "null");
  // No autocast: the load dtype's own arithmetic, accelerate's to decide.
  fc = read("bf16: false\n");
  CHECK(keys(fc)["plan.precision"] == "fp32");
  CHECK(from_of(fc, "plan.precision").rfind("trl.yaml (", 0) == 0);  // not written: accelerate's binds
  // Without autocast over 16-bit weights TRL's chunks project in fp32.
  fc = read("bf16: false\ndtype: bfloat16\n");
  CHECK(keys(fc)["plan.precision"] == "bf16");
  CHECK(keys(fc)["plan.loss_kernel"] == "chunked_nll_fp32");
  CHECK(keys(read("bf16: false\n"))["plan.loss_kernel"] == "chunked_nll");  // fp32 throughout
  CHECK(keys(read("fp16: true\n"))["plan.precision"] == "fp16");
  CHECK_THAT(error_of([&] { read("fp16: true\ndtype: float16\n"); }), Catch::Contains("trl.yaml:3: dtype: float16 beside fp16 with every weight trained"));
  CHECK_NOTHROW(read("fp16: true\ndtype: float16\nfsdp: full_shard\n"));  // FSDP keeps fp32 copies
  CHECK_NOTHROW(read("fp16: true\ndtype: float16\naccelerate_config: zero2\n"));  // so does DeepSpeed
  CHECK_THAT(error_of([&] { read("fp16: true\ndtype: float16\naccelerate_config: multi_gpu\n"); }),
             Catch::Contains("trl.yaml:3: dtype: float16 beside fp16 with every weight trained"));
  CHECK(listed(read("torch_dtype: bfloat16\n"), "torch_dtype (TRL's name before dtype"));
  CHECK_THAT(error_of([&] { read("dtype: float64\n"); }), Catch::Contains("trl.yaml:2: dtype: 'float64'; valid: float32, bfloat16, float16, auto"));
  CHECK(listed(read("dtype: auto\n"), "dtype=auto"));
  // LoRA: PEFT's default targets for Llama-style types, TRL's rank 16; a
  // bf16 base is dtsim's lora.
  fc = read("use_peft: true\ndtype: bfloat16\n");
  k = keys(fc);
  CHECK(k["model.peft"] == "lora");
  CHECK(k["model.lora_rank"] == "16");
  CHECK(k["model.lora_targets"] == "[q_proj,v_proj]");
  CHECK(from_of(fc, "model.lora_targets").find("PEFT's default for qwen3-8b's model type") != std::string::npos);
  CHECK(k["plan.master_weights"] == "null");
  // PEFT's defaults by model type: gpt2's fused c_attn, nemotron_h's four;
  // a type it has none for is refused as PEFT refuses it; a hub id dtsim
  // does not know is priced as q_proj and v_proj and said.
  const auto targets_of = [](const std::string& id) {
    return keys(parse_trl_config("model_name_or_path: " + id + "\nuse_peft: true\n", "trl.yaml"))["model.lora_targets"];
  };
  CHECK(targets_of("openai-community/gpt2") == "[linear_qkv]");  // c_attn
  CHECK(keys(parse_trl_config("model_name_or_path: gpt2\nuse_peft: true\nlora_target_modules: [c_attn, c_proj]\n", "trl.yaml"))["model.lora_targets"] ==
        "[linear_qkv]");
  CHECK_THAT(error_of([&] { read("use_peft: true\nlora_target_modules: [linear_qkv, c_attn]\n"); }),
             Catch::Contains("lora_target_modules: names no module dtsim prices"));  // no such module in a Llama
  CHECK(targets_of("google/gemma-3-1b-it") == "[q_proj,v_proj]");  // gemma3_text
  CHECK_THAT(error_of([] { parse_trl_config("model_name_or_path: google/gemma-3-4b-it\nuse_peft: true\n", "trl.yaml"); }),
             Catch::Contains("use_peft: without lora_target_modules on gemma-3-4b"));  // gemma3: none in PEFT's table
  CHECK(targets_of("nemotron-3-nano-30b-a3b") == "[q_proj,k_proj,v_proj,o_proj]");  // nemotron_h
  CHECK(targets_of("nemotron-h-8b") == "[q_proj,k_proj,v_proj,o_proj]");
  CHECK(targets_of("mistralai/Mixtral-8x7B-v0.1") == "[q_proj,v_proj]");
  CHECK_THAT(error_of([] { parse_trl_config("model_name_or_path: zai-org/GLM-4.5\nuse_peft: true\n", "trl.yaml"); }),
             Catch::Contains("trl.yaml:2: use_peft: without lora_target_modules on glm-4.5, whose model type PEFT has no default targets"));
  CHECK(listed(parse_trl_config("model_name_or_path: someorg/SomeModel-7B\nuse_peft: true\n", "trl.yaml"), "lora_target_modules unset on someorg/SomeModel-7B"));
  // A list of one is its one string (ModelConfig.__post_init__), a pattern
  // PEFT full-matches against whole module paths.
  CHECK(keys(read("use_peft: true\nlora_target_modules: [all-linear]\n"))["model.lora_targets"] == "[q_proj,k_proj,v_proj,o_proj,gate_proj,up_proj,down_proj]");
  CHECK_THAT(error_of([&] { read("use_peft: true\nlora_target_modules: [q_proj]\n"); }),
             Catch::Contains("trl.yaml:3: lora_target_modules: 'q_proj' is one name"));
  CHECK_THAT(error_of([&] { read("use_peft: true\nlora_target_modules: q_proj\n"); }), Catch::Contains("'q_proj' is one name"));
  CHECK(keys(read("use_peft: true\nlora_target_modules: [q_proj, o_proj, gate_proj]\n"))["model.lora_targets"] == "[q_proj,o_proj,gate_proj]");
  CHECK(listed(read("use_peft: true\nlora_target_modules: '.*proj'\n"), "lora_target_modules=.*proj (a pattern"));
  CHECK(listed(read("use_peft: true\nlora_dropout: 0.1\n"), "lora_dropout=0.1"));
  CHECK(listed(read("lora_r: 8\n"), "lora_r (an adapter's, without use_peft"));
  CHECK_THAT(error_of([&] { read("use_peft: true\nlora_target_modules: [lm_head, q_proj]\n"); }),
             Catch::Contains("lora_target_modules: names lm_head beside loss_type chunked_nll"));
  CHECK(keys(read("use_peft: true\nlora_target_modules: [lm_head, q_proj]\nloss_type: nll\n"))["model.lora_targets"] == "[q_proj]");
  // The fp32 base: DeepSpeed casts it, FSDP's shards are priced in 16 bits.
  CHECK(keys(read("use_peft: true\nfsdp: full_shard\n"))["model.peft"] == "lora");
  CHECK(listed(read("use_peft: true\nfsdp: full_shard\n"), "the base loaded in float32 under FSDP"));
  CHECK(keys(read("use_peft: true\nfsdp: no_shard\n"))["model.peft"] == "lora_fp32");
  fc = read("use_peft: true\naccelerate_config: zero2\n");
  CHECK(keys(fc)["model.peft"] == "lora");
  // DeepSpeed runs without autocast: TRL's chunks project in fp32.
  CHECK(keys(fc)["plan.loss_kernel"] == "chunked_nll_fp32");
  fc = read("deepspeed: {train_micro_batch_size_per_gpu: auto, zero_optimization: {stage: 3}}\n");
  CHECK(keys(fc)["plan.loss_kernel"] == "chunked_nll_fp32");
  CHECK(listed(fc, "loss_type=chunked_nll under ZeRO-3 (each chunk gathers the head's weight again"));
  CHECK(listed(read("accelerate_config: zero3\n"), "loss_type=chunked_nll under ZeRO-3"));
  CHECK(keys(read("use_peft: true\naccelerate_config: fsdp2\n"))["model.peft"] == "lora");
  CHECK(keys(read("use_peft: true\naccelerate_config: multi_gpu\n"))["model.peft"] == "lora_fp32");
  // A quantized base: adapters cast to bf16, TRL's unnested NF4 said.
  fc = read("use_peft: true\nload_in_4bit: true\n");
  k = keys(fc);
  CHECK(k["model.peft"] == "qlora");
  CHECK(k["plan.master_weights"] == "false");
  CHECK(listed(fc, "use_bnb_nested_quant false"));
  CHECK(listed(fc, "dtype float32 beside a quantized base"));
  CHECK(keys(read("use_peft: true\nload_in_8bit: true\n"))["model.peft"] == "lora_int8");
  // DeepSpeed keeps fp32 partitions of the adapters whatever their dtype.
  CHECK(keys(read("use_peft: true\nload_in_4bit: true\ndeepspeed: {train_micro_batch_size_per_gpu: auto, zero_optimization: {stage: 2}}\n"))
            ["plan.master_weights"] == "null");
  CHECK_THAT(error_of([&] { read("load_in_4bit: true\n"); }), Catch::Contains("trl.yaml:2: load_in_4bit: without use_peft"));
  CHECK_THAT(error_of([&] { read("use_peft: true\nload_in_4bit: true\nload_in_8bit: true\n"); }),
             Catch::Contains("load_in_8bit: beside load_in_4bit"));
  // The sequence: max_seq_length before TRL 0.20; null truncates nothing.
  CHECK(keys(read("max_seq_length: 2048\n"))["plan.seq_len"] == "2048");
  fc = read("max_length: null\n");
  CHECK(keys(fc)["plan.seq_len"] == "null");
  CHECK(listed(fc, "max_length null (no truncation"));
  CHECK(fc.unmodelled.size() == 2);  // and packing false
  CHECK(!listed(read("packing: true\npacking_strategy: wrapped\n"), "packing"));
  CHECK(listed(read("packing: true\n"), "packing with packing_strategy bfd"));
  CHECK(listed(read("padding_free: true\n"), "padding_free without packing"));
  CHECK_THAT(error_of([&] { read("packing_strategy: ffd\n"); }), Catch::Contains("trl.yaml:2: packing_strategy: 'ffd'; valid: bfd, bfd_split, wrapped"));
  // Checkpointing off, offloading on; eager attention.
  k = keys(read("gradient_checkpointing: false\nactivation_offloading: true\nattn_implementation: eager\n"));
  CHECK(k["plan.recompute"] == "null");
  CHECK(k["plan.enable_activation_offloading"] == "true");
  CHECK(k["plan.attention"] == "eager");
  // The loss: nll and dft unfused; Liger's fused loss, not beside chunked_nll,
  // and not on a model type Liger does not patch.
  CHECK(keys(read("loss_type: nll\n"))["plan.loss_kernel"] == "null");
  CHECK(listed(read("loss_type: dft\n"), "loss_type=dft"));
  CHECK(keys(read("loss_type: dft\nuse_liger_kernel: true\n"))["plan.loss_kernel"] == "liger_fused_linear");  // its use_token_scaling
  CHECK_THAT(error_of([&] { read("loss_type: ce\n"); }), Catch::Contains("loss_type: 'ce'; valid: nll, dft, chunked_nll"));
  CHECK_THAT(error_of([&] { read("use_liger_kernel: true\nloss_type: chunked_nll\n"); }),
             Catch::Contains("loss_type: chunked_nll beside use_liger_kernel; TRL refuses it"));
  fc = parse_trl_config("model_name_or_path: zai-org/GLM-4.5\nuse_liger_kernel: true\n", "trl.yaml");
  CHECK(listed(fc, "use_liger_kernel=true (glm-4.5's model type is not one Liger patches"));
  CHECK(keys(fc)["plan.kernels"] == "null");
  // Launcher keys: num_processes over accelerate_config's; others listed.
  CHECK(keys(read("accelerate_config: multi_gpu\nnum_processes: 4\n"))["plan.dp"] == "4");
  CHECK(keys(read("accelerate_config: single_gpu\n"))["plan.dp"] == "1");
  CHECK(listed(read("max_seq_length: 2048\n"), "max_seq_length (TRL's name before max_length"));
  CHECK_THAT(error_of([&] { read("accelerate_config: ''\n"); }), Catch::Contains("trl.yaml:2: accelerate_config: empty"));
  {
    // num_processes over an accelerate config that splits by tp: left to --set plan.dp.
    const std::filesystem::path acc = std::filesystem::temp_directory_path() / "dtsim-trl-acc-tp.yaml";
    std::ofstream(acc) << "distributed_type: FSDP\nnum_processes: 8\nparallelism_config:\n  parallelism_config_tp_size: 2\n";
    fc = read("accelerate_config: " + acc.string() + "\nnum_processes: 16\n");
    CHECK(keys(fc)["plan.tp"] == "2");
    CHECK(keys(fc).count("plan.dp") == 0);
    CHECK(listed(fc, "num_processes (over accelerate's tp and cp"));
    CHECK(keys(read("accelerate_config: " + acc.string() + "\n"))["plan.dp"] == "4");  // its own 8 over tp 2
    std::filesystem::remove(acc);
  }
  CHECK(listed(read("mixed_precision: fp16\n"), "mixed_precision=fp16 (not read by dtsim)"));
  CHECK(listed(read("frobnicate: 3\n"), "frobnicate=3 (not read by dtsim)"));
  CHECK_THAT(error_of([&] { read("accelerate_config: zero4\n"); }),
             Catch::Contains("trl.yaml:2: accelerate_config: 'zero4' is neither a file (from the working directory or beside trl.yaml) nor one of "
                             "TRL's: single_gpu, multi_gpu, zero1, zero2, zero3, fsdp1, fsdp2"));
  // TRL's fsdp1 prefetches forward: said.
  CHECK(listed(read("accelerate_config: fsdp1\n"), "trl/accelerate_configs/fsdp1.yaml fsdp_forward_prefetch=true"));
  CHECK_THAT(error_of([] { parse_trl_config("use_peft: true\n", "trl.yaml"); }), Catch::Contains("model_name_or_path: missing"));
  CHECK_THAT(error_of([] { parse_trl_config("- a\n", "trl.yaml"); }), Catch::Contains("trl.yaml: a TRL config is a mapping"));
  // Found as TRL's, refused as a plan with the option that reads it; an
  // accelerate config beside one that names its own is refused.
  CHECK(framework_of(head, "x.yaml") == "trl");
  CHECK_THAT(error_of([] { load_plan(sample("trl/qwen3_8b_lora_sft.yaml"), {}); }), Catch::Contains("looks like a TRL config; pass it as --trl"));
  CHECK(read_framework_config("trl", sample("trl/qwen3_8b_lora_sft.yaml")).framework == "TRL");
  CHECK_THAT(error_of([] { read_framework_config("trl", sample("trl/llama31_8b_full_zero3.yaml"), sample("llamafactory/fsdp_config.yaml")); }),
             Catch::Contains("llama31_8b_full_zero3.yaml: names its own accelerate_config; give it there or as"));
}

TEST_CASE("TRL under a separate accelerate config: its bf16 default binds, an fp32 base sharded is priced in 16 bits", "[framework]") {
  const FrameworkConfig trl = parse_trl_config("model_name_or_path: Qwen/Qwen3-8B\nuse_peft: true\n", "trl.yaml");
  CHECK(keys(trl)["model.peft"] == "lora_fp32");
  // TrainingArguments writes bf16 into ACCELERATE_MIXED_PRECISION over the
  // launcher's fp16.
  FrameworkConfig fc = with_accelerate(trl, parse_accelerate_config("distributed_type: MULTI_GPU\nmixed_precision: fp16\nnum_processes: 4\n", "acc.yaml"));
  auto k = keys(fc);
  CHECK(k["plan.precision"] == "bf16");
  CHECK(k["plan.dp"] == "4");
  CHECK(k["model.peft"] == "lora_fp32");
  // Under accelerate's FSDP the fp32 base's shards are gathered in 16 bits,
  // and FSDP1 beside the adapters is priced as FSDP2.
  fc = with_accelerate(trl, read_accelerate_config(sample("llamafactory/fsdp_config.yaml")));
  k = keys(fc);
  REQUIRE(fc.plan == std::optional<std::string>("fsdp"));
  CHECK(k["model.peft"] == "lora");
  CHECK(listed(fc, "the base loaded in float32 under FSDP"));
  CHECK(k["plan.fsdp_version"] == "2");
  // Under its DeepSpeed, cast whole to 16 bits.
  fc = with_accelerate(trl, parse_accelerate_config("distributed_type: DEEPSPEED\ndeepspeed_config:\n  zero_stage: 2\nmixed_precision: bf16\n", "acc.yaml"));
  CHECK(fc.deepspeed);
  CHECK(keys(fc)["model.peft"] == "lora");
  CHECK(from_of(fc, "model.peft").find("DeepSpeed casts the fp32 base") != std::string::npos);
}

// Note [nanotron configs] (sim/src/config/framework_nanotron.cpp).
TEST_CASE("nanotron: the SmolLM3-3B example, a Qwen2Config under tp 2 with sequence parallelism and the fp32 accumulator",
          "[framework]") {
  const FrameworkConfig fc = read_nanotron_config(sample("nanotron/smollm3_3b.yaml"));
  CHECK(fc.framework == "nanotron");
  REQUIRE(fc.plan == std::optional<std::string>("ddp"));
  REQUIRE(fc.model == std::optional<std::string>("llama-3-8b"));  // a base, its shape all set
  auto k = keys(fc);
  CHECK(k["plan.dp"] == "4");
  CHECK(k["plan.tp"] == "2");
  CHECK(k["plan.pp"] == "1");
  CHECK(k["plan.cp"] == "1");
  CHECK(k["plan.placement"] == "tp,cp,dp,pp");  // parallel/context.py: tp innermost, then cp, dp, pp
  CHECK(k["plan.sequence_parallel"] == "true");  // tp_mode REDUCE_SCATTER
  CHECK(k["plan.schedule"] == "1f1b");           // pp_engine, written without a pipeline too: a search keeps it
  CHECK(k["plan.recompute"] == "none");
  CHECK(k["plan.seq_len"] == "4096");
  CHECK(k["plan.micro_batch"] == "3");
  CHECK(k["plan.grad_accum"] == "1");
  CHECK(k["plan.precision"] == "bf16");
  CHECK(k["plan.bucket_mb"] == "50");
  CHECK(k["plan.fp32_grad_accumulator"] == "true");
  CHECK(k["plan.master_weights"] == "true");
  CHECK(k["plan.zero_stage"] == "0");
  CHECK(k["plan.optimizer"] == "adamw");
  CHECK(k["plan.attention"] == "flash");
  CHECK(k["plan.ep"] == "1");
  CHECK(k["plan.fsdp"] == "none");
  CHECK(fc.search_fixed == std::vector<std::string>{"schedule", "zero_stage", "reduce_scatter", "ep", "etp", "fsdp", "offload_optimizer",
                                                    "offload_params", "overlap_param_gather", "recompute"});
  CHECK(k["model.head_dim"] == "128");  // hidden_size // num_attention_heads
  CHECK(fc.global_batch == std::optional<std::int64_t>(3 * 1 * 4));  // micro x accumulation x dp
  CHECK(k["model.name"] == "nanotron-smollm3_3b");
  CHECK(k["model.layers"] == "36");
  CHECK(k["model.kv_heads"] == "4");
  CHECK(k["model.vocab"] == "128256");  // a multiple of 1 x tp 2 already
  CHECK(k["model.tied_head"] == "true");
  CHECK(k["model.qkv_bias"] == "false");
  CHECK(from_of(fc, "plan.micro_batch").find("smollm3_3b.yaml:95 (tokens.micro_batch_size)") != std::string::npos);
  CHECK(listed(fc, "parallelism.tp_linear_async_communication=true"));
  CHECK(listed(fc, "model.model_config.no_rope_layer=4"));
  CHECK(listed(fc, "model.model_config._use_doc_masking=true"));
  CHECK(fc.unmodelled.size() == 3);
  // Embedding 128,256 x 2048 (tied); each layer q and o 2048^2, k and v
  // 2048 x 512, the MLP 3 x 2048 x 11008, two norms; the final norm:
  // 262,668,288 + 36 x 78,123,008 + 2048.
  const auto m = models::load_model(*fc.model, section(fc, "model"));
  CHECK(m->trainable_parameters() == 3'075'098'624);
  const ResolvedPlan r = resolve_with(fc, *fc.model, "dgx-h100", 1);
  CHECK(r.dp == 4);
  CHECK(r.tp == 2);
  CHECK(r.sequence_parallel);
  CHECK(r.fp32_grad_accumulator);
  CHECK(r.global_batch == 12);
}

TEST_CASE("nanotron: a LlamaConfig over a 1f1b pipeline, recomputed, ZeRO-1 without the accumulator", "[framework]") {
  const FrameworkConfig fc = read_nanotron_config(sample("nanotron/llama_8b_pp.yaml"));
  REQUIRE(fc.plan == std::optional<std::string>("1f1b"));
  auto k = keys(fc);
  CHECK(k["plan.pp"] == "2");
  CHECK(k["plan.schedule"] == "1f1b");
  CHECK(k["plan.recompute"] == "full");
  CHECK(k["plan.zero_stage"] == "1");
  CHECK(k["plan.reduce_scatter"] == "false");  // ZeroDistributedOptimizer over DDP's all-reduce
  CHECK(k["plan.master_weights"] == "false");  // torch.optim steps the bf16 parameters
  CHECK(k["plan.fp32_grad_accumulator"] == "false");
  CHECK(k["model.intermediate"] == "14336");
  CHECK(fc.search_fixed.back() == "cp");  // nanotron's Llama model has no context parallelism
  CHECK(k["model.vocab"] == "128256");  // 32,064 x tp 4
  CHECK(fc.global_batch == std::optional<std::int64_t>(1 * 16 * 2));
  CHECK(fc.unmodelled.empty());
  const ResolvedPlan r = resolve_with(fc, *fc.model, "dgx-h100", 2);
  CHECK(r.pp == 2);
  CHECK(r.schedule == Schedule::k1f1b);
  CHECK(r.zero_stage == 1);
  CHECK(!r.master_weights);
  CHECK(r.grad_accum == 16);
}

TEST_CASE("nanotron: Qwen2's experts with a gated shared expert", "[framework]") {
  const FrameworkConfig fc = read_nanotron_config(sample("nanotron/qwen_moe.yaml"));
  auto k = keys(fc);
  CHECK(k["model.experts"] == "32");
  CHECK(k["model.top_k"] == "4");
  CHECK(k["model.expert_intermediate"] == "768");
  CHECK(k["model.shared_intermediate"] == "3072");
  CHECK(k["model.shared_expert_gate"] == "true");
  CHECK(k["model.first_dense"] == "0");  // layers [-1]: every layer
  CHECK(k["model.qkv_bias"] == "true");  // a Qwen2Config's attention_bias
  CHECK(k["plan.etp"] == "1");           // whole on every tensor-parallel rank, held by a search
  const auto m = models::load_model(*fc.model, section(fc, "model"));
  // Each layer: q 1536^2 + 1536 bias, k and v 1536 x 512 + 512 each, o
  // 1536^2; 32 experts of 3 x 1536 x 768, a shared one of 3 x 1536 x 3072,
  // its gate 1536, the router 1536 x 32; two norms. Embedding and head
  // 151,936 x 1536 each, the final norm.
  const std::int64_t attention = 2 * 1536 * 1536 + 1536 + 2 * (1536 * 512 + 512);
  const std::int64_t mlp = 32 * 3 * 1536 * 768 + 3 * 1536 * 3072 + 1536 + 1536 * 32;
  CHECK(m->trainable_parameters() == 16 * (attention + mlp + 2 * 1536) + 2 * 151'936 * 1536 + 1536);
}

TEST_CASE("nanotron: defaults, what it refuses and what is said", "[framework][errors]") {
  const std::string par = "parallelism:\n  dp: 2\n  tp: 1\n  pp: 1\n";
  const std::string tok = "tokens:\n  sequence_length: 2048\n  micro_batch_size: 4\n  batch_accumulation_per_replica: 2\n";
  const std::string mod = "model:\n  model_config:\n    hidden_size: 1024\n    num_hidden_layers: 8\n    num_attention_heads: 8\n    vocab_size: 50000\n";
  const std::string opt = "optimizer:\n  zero_stage: 0\n  accumulate_grad_in_fp32: true\n";
  const auto read = [](const std::string& text) { return parse_nanotron_config(text, "nt.yaml"); };
  // LlamaConfig's and nanotron's defaults.
  FrameworkConfig fc = read(par + tok + mod + opt);
  auto k = keys(fc);
  CHECK(k["plan.precision"] == "bf16");      // ModelArgs.dtype
  CHECK(k["plan.bucket_mb"] == "25");        // ddp_bucket_cap_mb
  CHECK(k["plan.sequence_parallel"] == "false");
  CHECK(k["plan.optimizer"] == "adamw");     // optimizer_factory's adamW
  CHECK(k["model.intermediate"] == "11008");
  CHECK(k["model.kv_heads"] == "8");         // None: the heads
  CHECK(k["model.seq_len"] == "2048");       // max_position_embeddings
  CHECK(k["model.tied_head"] == "false");
  CHECK(from_of(fc, "plan.precision") == "nt.yaml:10 (model.dtype, nanotron's default)");  // the model mapping's first key
  CHECK(fc.unmodelled.empty());
  // A LlamaConfig has no bias, whatever attention_bias says; a Qwen2Config's is q, k and v's.
  const std::string biased = mod + "    attention_bias: true\n";
  CHECK(keys(read(par + tok + biased + opt))["model.qkv_bias"] == "false");
  CHECK(keys(read(par + tok + biased + "    is_qwen2_config: true\n" + opt))["model.qkv_bias"] == "true");
  // dacite checks LlamaConfig's types, an int passing for a float (PEP
  // 484's numeric tower); a float PyYAML reads as a string (1e-06: YAML
  // 1.1's exponent needs a dot) fails it, and the mapping becomes a Qwen2Config.
  CHECK(keys(read(par + tok + biased + "    rope_theta: 500000.0\n" + opt))["model.qkv_bias"] == "false");
  CHECK(keys(read(par + tok + biased + "    rope_theta: 500000\n" + opt))["model.qkv_bias"] == "false");
  CHECK(keys(read(par + tok + biased + "    rms_norm_eps: 1.0e-06\n" + opt))["model.qkv_bias"] == "false");
  CHECK(keys(read(par + tok + biased + "    rms_norm_eps: 1e-06\n" + opt))["model.qkv_bias"] == "true");
  CHECK(keys(read(par + tok + biased + "    rms_norm_eps: \"1.0e-06\"\n" + opt))["model.qkv_bias"] == "true");  // quoted: a string
  CHECK_THAT(error_of([&] { read(par + tok + biased + "    rms_norm_eps: 1e-06\n    is_llama_config: true\n" + opt); }),
             Catch::Contains("nt.yaml:17: model.model_config.is_llama_config: beside what a LlamaConfig cannot take"));
  // ... and then a moe_config stays a dict, on which Qwen2Config raises.
  CHECK_THAT(error_of([&] { read(par + tok + mod + "    rms_norm_eps: 1e-06\n    moe_config:\n      num_experts: 4\n" + opt); }),
             Catch::Contains("nt.yaml:17: model.model_config.moe_config: beside a float field PyYAML reads as a string or null"));
  // Keys of Starcoder2Config alone: dacite matches it before Qwen2Config.
  CHECK_THAT(error_of([&] { read(par + tok + mod + "    layer_norm_epsilon: 1.0e-05\n" + opt); }), Catch::Contains("a Starcoder2Config"));
  // A Llama's heads must divide its width (llama.py asserts it); a Qwen2's are floored.
  CHECK_THAT(error_of([&] { read(par + tok + "model:\n  model_config:\n    hidden_size: 1000\n    num_attention_heads: 16\n" + opt); }),
             Catch::Contains("model.model_config.hidden_size: 1000 is not divisible by num_attention_heads 16 (nanotron's Llama model asserts it)"));
  CHECK(keys(read(par + tok + "model:\n  model_config:\n    hidden_size: 1000\n    num_attention_heads: 16\n    is_qwen2_config: true\n" + opt))
            ["model.head_dim"] == "62");
  // A field neither class has: Qwen2Config(**model_config) raises.
  CHECK(error_of([&] { read(par + tok + mod + "    head_size: 64\n" + opt); }) ==
        "nt.yaml:15: model.model_config.head_size: not a field of LlamaConfig or Qwen2Config (nanotron's "
        "Qwen2Config(**model_config) raises a TypeError)");
  // pp_engine: afab (GPipe) unless 1f1b, which asserts pp - 1 micro-batches.
  const std::string pp2 = "parallelism:\n  dp: 2\n  tp: 1\n  pp: 2\n";
  CHECK(keys(read(pp2 + tok + mod + opt))["plan.schedule"] == "gpipe");
  CHECK(read(pp2 + tok + mod + opt).plan == std::optional<std::string>("gpipe"));
  CHECK(error_of([&] { read("parallelism:\n  dp: 1\n  tp: 1\n  pp: 4\n  pp_engine: 1f1b\n" + tok + mod + opt); }) ==
        "nt.yaml:9: tokens.batch_accumulation_per_replica: 2 micro-batches under pp_engine 1f1b over pp 4: nanotron asserts at "
        "least pp - 1 (\"Number of microbatches ... must be at least PP_SIZE-1\"); valid: 3 or more");
  CHECK_THAT(error_of([&] { read(par + "  pp_engine: interleaved\n" + tok + mod + opt); }),
             Catch::Contains("nt.yaml:5: parallelism.pp_engine: 'interleaved'; valid: afab, 1f1b"));
  // Expert parallelism fails in nanotron's ParallelContext.
  CHECK_THAT(error_of([&] { read(par + "  expert_parallel_size: 2\n" + tok + mod + opt); }),
             Catch::Contains("nt.yaml:5: parallelism.expert_parallel_size: 2: nanotron's ParallelContext"));
  // tp_mode as TensorParallelLinearMode[x.upper()]; async needs REDUCE_SCATTER.
  const std::string tp2 = "parallelism:\n  dp: 1\n  tp: 2\n  pp: 1\n";
  CHECK(keys(read(tp2 + "  tp_mode: reduce_scatter\n" + tok + mod + opt))["plan.sequence_parallel"] == "true");
  CHECK_THAT(error_of([&] { read(tp2 + "  tp_linear_async_communication: true\n" + tok + mod + opt); }),
             Catch::Contains("nt.yaml:5: parallelism.tp_linear_async_communication: true with tp_mode ALL_REDUCE"));
  CHECK(listed(read(tp2 + "  tp_mode: REDUCE_SCATTER\n  tp_recompute_allgather: false\n" + tok + mod + opt),
               "parallelism.tp_recompute_allgather=false"));
  // config.py's checks: heads divisible by tp, at least tp key/value heads.
  CHECK_THAT(error_of([&] { read("parallelism:\n  dp: 1\n  tp: 16\n  pp: 1\n" + tok + mod + opt); }),
             Catch::Contains("model.model_config.num_attention_heads: 8 is not divisible by tp 16 (nanotron asserts it)"));
  CHECK_THAT(error_of([&] { read("parallelism:\n  dp: 1\n  tp: 4\n  pp: 1\n" + tok + mod + "    num_key_value_heads: 2\n" + opt); }),
             Catch::Contains("num_key_value_heads: 2 is below tp 4 (nanotron asserts num_key_value_heads >= tp)"));
  // ZeRO: stage 1 whatever the number; with the accumulator only on one data-parallel rank.
  const std::string zero1 = "optimizer:\n  zero_stage: 1\n  accumulate_grad_in_fp32: true\n";
  CHECK(error_of([&] { read(par + tok + mod + zero1); }) ==
        "nt.yaml:16: optimizer.zero_stage: 1 with accumulate_grad_in_fp32 over dp 2: nanotron's fp32 DDP hook raises "
        "NotImplementedError for ZeRO's reduce-scatter (optim/gradient_accumulator.py, get_fp32_accum_hook); valid: 0, or "
        "accumulate_grad_in_fp32: false");
  // Over one data-parallel rank its ZeRO-1 shards nothing: stage 0.
  fc = read("parallelism:\n  dp: 1\n  tp: 1\n  pp: 1\n" + tok + mod + zero1);
  k = keys(fc);
  CHECK(k["plan.zero_stage"] == "0");
  CHECK(from_of(fc, "plan.zero_stage") == "nt.yaml:16 (optimizer.zero_stage) (nanotron's ZeRO-1 over dp 1 shards nothing)");
  CHECK(k["plan.fp32_grad_accumulator"] == "true");
  fc = read(par + tok + mod + "optimizer:\n  zero_stage: 3\n  accumulate_grad_in_fp32: false\n  optimizer_factory:\n    name: sgd\n");
  k = keys(fc);
  CHECK(k["plan.zero_stage"] == "1");
  CHECK(k["plan.master_weights"] == "false");
  CHECK(k["plan.optimizer"] == "sgd");
  CHECK(k["plan.sgd_momentum"] == "0");
  CHECK(listed(fc, "optimizer.zero_stage=3 (nanotron's ZeRO is stage 1"));
  // fp32: no accumulator (nanotron asserts no parameter is float), no master key.
  const std::string fp32 = "model:\n  dtype: float32\n" + mod.substr(7);
  CHECK_THAT(error_of([&] { read(par + tok + fp32 + opt); }), Catch::Contains("optimizer.accumulate_grad_in_fp32: true with model.dtype float32"));
  k = keys(read(par + tok + fp32 + "optimizer:\n  zero_stage: 0\n  accumulate_grad_in_fp32: false\n"));
  CHECK(k["plan.precision"] == "fp32");
  CHECK(k["plan.master_weights"] == "null");
  CHECK_THAT(error_of([&] { read(par + tok + "model:\n  dtype: int8\n" + mod.substr(7) + opt); }),
             Catch::Contains("nt.yaml:10: model.dtype: 'int8'; valid: bfloat16, float16, float32"));
  // The vocabulary padded to make_vocab_size_divisible_by x tp: 50,000 to a multiple of 128.
  CHECK(keys(read(tp2 + tok + "model:\n  make_vocab_size_divisible_by: 64\n" + mod.substr(7) + opt))["model.vocab"] == "50048");
  // vocab_size -1 is the dataset's.
  const std::string unknown_vocab = "model:\n  model_config:\n    hidden_size: 1024\n    num_hidden_layers: 8\n    num_attention_heads: 8\n    vocab_size: -1\n";
  CHECK_THAT(error_of([&] { read(par + tok + unknown_vocab + opt); }),
             Catch::Contains("model.model_config.vocab_size: -1 takes the dataset's vocab_size, which no data stage gives"));
  CHECK(keys(read(par + tok + unknown_vocab + opt + "data_stages:\n- name: s\n  data:\n    dataset:\n      vocab_size: 32000\n"))["model.vocab"] == "32000");
  // A stage's own sequence length is said.
  CHECK(listed(read(par + tok + mod + opt + "data_stages:\n- name: long\n  sequence_length: 8192\n"), "data_stages[long].sequence_length=8192"));
  // Experts: moe_config written twice counts the last, as PyYAML does; a tail of the layers is first_dense.
  const std::string moe = mod + "    is_qwen2_config: true\n    moe_config: null\n    moe_config:\n      num_experts: 8\n      top_k: 2\n"
                                "      moe_intermediate_size: 512\n      layers: [2, 3, 4, 5, 6, 7]\n";
  fc = read(par + tok + moe + opt);
  k = keys(fc);
  CHECK(listed(fc, "model.model_config.moe_config (given twice: the last read, as PyYAML reads it)"));
  CHECK(k["model.experts"] == "8");
  CHECK(k["model.expert_intermediate"] == "512");
  CHECK(k["model.first_dense"] == "2");
  CHECK(k.count("model.shared_intermediate") == 0);
  CHECK(listed(read(par + tok + mod + "    moe_config:\n      layers: [0, 2]\n" + opt), "model.model_config.moe_config.layers (not every layer"));
  // Only exactly [-1] is every layer; -1 in another list, or past the model, names none.
  fc = read(par + tok + mod + "    moe_config:\n      layers: [-1, -1]\n" + opt);
  CHECK(keys(fc).count("model.experts") == 0);
  CHECK(listed(fc, "model.model_config.moe_config.layers (names no layer of the model: priced dense)"));
  CHECK(keys(read(par + tok + mod + "    moe_config:\n      layers: [-1, 5, 6, 7, 9]\n" + opt))["model.first_dense"] == "5");
  // A defaulted field's error names its mapping's line (top_k 2 by default).
  CHECK(error_of([&] { read(par + tok + mod + "    moe_config:\n      num_experts: 1\n" + opt); }) ==
        "nt.yaml:16: model.model_config.moe_config.top_k: 2 is more than num_experts 1 (nanotron raises)");
  // Context parallelism: llama3_ring_attention all-gathers K and V; other kernels take no ring.
  const std::string cp2 = "parallelism:\n  dp: 1\n  tp: 1\n  pp: 1\n  context_parallel_size: 2\n";
  const std::string ring = "    is_qwen2_config: true\n    _attn_implementation: llama3_ring_attention\n";
  CHECK_THAT(error_of([&] { read(cp2 + tok + mod + ring + opt); }), Catch::Contains("without ring_attn_heads_k_stride"));
  fc = read(cp2 + tok + mod + ring + "    ring_attn_heads_k_stride: 1\n" + opt);
  CHECK(keys(fc)["plan.cp_comm"] == "all_gather");
  CHECK(fc.unmodelled.empty());
  CHECK(listed(read(cp2 + tok + mod + "    is_qwen2_config: true\n" + opt), "parallelism.context_parallel_size=2 with model.model_config._attn_implementation=flash_attention_2"));
  // Qwen2Config's other asserts: a window's kernels, NoPE layers dividing the layers.
  CHECK_THAT(error_of([&] { read(par + tok + mod + "    _attn_implementation: sdpa\n    sliding_window_size: 512\n    is_qwen2_config: true\n" + opt); }),
             Catch::Contains("nanotron asserts a window runs under flex_attention, flash_attention_2 or llama3_ring_attention"));
  CHECK_THAT(error_of([&] { read(par + tok + mod + "    no_rope_layer: 3\n" + opt); }),
             Catch::Contains("model.model_config.no_rope_layer: 3 does not divide num_hidden_layers 8 (nanotron asserts it)"));
  // A Llama model runs FlashAttention-2 whatever the key says.
  CHECK(keys(read(par + tok + mod + "    _attn_implementation: sdpa\n" + opt))["plan.attention"] == "flash");
  CHECK(keys(read(par + tok + mod + "    _attn_implementation: sdpa\n    is_qwen2_config: true\n" + opt))["plan.attention"] == "null");
  // Models dtsim does not have, and what nanotron's dataclasses do not have.
  CHECK_THAT(error_of([&] { read(par + tok + mod + "    d_state: 16\n" + opt); }), Catch::Contains("a Mamba model"));
  CHECK_THAT(error_of([&] { read(par + tok + mod + "    is_starcoder2_config: true\n" + opt); }), Catch::Contains("a Starcoder2Config"));
  fc = read(par + "  paralell_mode: x\n" + tok + mod + opt + "trainer:\n  foo: 1\n");
  CHECK(listed(fc, "parallelism.paralell_mode (a key nanotron's ParallelismArgs does not have)"));
  CHECK(listed(fc, "trainer (a section nanotron's Config does not have)"));
  CHECK(error_of([&] { read(par + mod + opt); }) == "nt.yaml: no tokens section; nanotron's trainer needs one (tokens: a mapping)");
  CHECK(error_of([&] { read("parallelism:\n  dp: 2\n  tp: 1\n" + tok + mod + opt); }) ==
        "nt.yaml:2: parallelism.pp: missing; nanotron requires it (an integer from 1)");
  // Recognised as nanotron's, and refused as a plan with the option that reads it.
  CHECK(framework_of(par + tok + mod + opt, "run.yaml") == "nanotron");
  CHECK_THAT(error_of([&] { load_plan(sample("nanotron/smollm3_3b.yaml")); }),
             Catch::Contains("looks like a nanotron config; pass it as --nanotron"));
}
