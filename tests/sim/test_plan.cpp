#include <catch2/catch.hpp>

#include "test_util.hpp"

#include <functional>

#include "dtsim/models/models.hpp"
#include "dtsim/sim/config_io.hpp"
#include "dtsim/sim/rules.hpp"
#include "dtsim/sim/error.hpp"
#include "dtsim/sim/plan.hpp"
#include "dtsim/sim/predict.hpp"
#include "fake_model.hpp"

using namespace dtsim;
using namespace dtsim::sim;
using dtsim::test::error_of;

namespace {
ClusterSpec eight() {
  ClusterSpec c;
  c.name = "eight";
  c.gpus_per_node = 8;
  c.device.name = "dev";
  c.device.peak_bf16 = 1e12;
  return c;
}
const test::FakeModel kModel(4, 1000, 10);
}  // namespace

TEST_CASE("loss_parallel auto is DTensor's under FSDP and Megatron's otherwise", "[plan]") {
  // Resolved whatever tp is (it matters only to a tensor-parallel head).
  CHECK(resolve(parse_plan("dp: 8\n", "p"), kModel, eight()).loss_parallel == LossParallel::kMegatron);
  CHECK(resolve(parse_plan("fsdp: full_shard\n", "p"), kModel, eight()).loss_parallel == LossParallel::kDtensor);
  CHECK(resolve(parse_plan("fsdp: full_shard\nloss_parallel: megatron\n", "p"), kModel, eight()).loss_parallel ==
        LossParallel::kMegatron);
  CHECK(resolve(parse_plan("loss_parallel: dtensor\n", "p"), kModel, eight()).loss_parallel == LossParallel::kDtensor);
  CHECK(error_of([] { parse_plan("loss_parallel: fused\n", "p.yaml"); }).find("auto, megatron, dtensor") != std::string::npos);
}

TEST_CASE("dp defaults to every GPU", "[plan]") {
  const ResolvedPlan r = resolve(parse_plan("micro_batch: 2\n", "p.yaml"), kModel, eight());
  CHECK(r.dp == 8);
  CHECK(r.grad_accum == 1);
  CHECK(r.global_batch == 16);
  CHECK(r.seq_len == 1024);
}

TEST_CASE("any two batch figures determine the third (DeepSpeed's rule)", "[plan]") {
  // global = micro x accum x dp
  CHECK(resolve(parse_plan("dp: 4\nglobal_batch: 64\nmicro_batch: 2\n", "p"), kModel, eight()).grad_accum == 8);
  CHECK(resolve(parse_plan("dp: 4\nglobal_batch: 64\ngrad_accum: 4\n", "p"), kModel, eight()).micro_batch == 4);
  CHECK(resolve(parse_plan("dp: 4\nmicro_batch: 3\ngrad_accum: 5\n", "p"), kModel, eight()).global_batch == 60);
  const ResolvedPlan only_global = resolve(parse_plan("dp: 8\nglobal_batch: 64\n", "p"), kModel, eight());
  CHECK(only_global.micro_batch == 8);
  CHECK(only_global.grad_accum == 1);
}

// Note [A batch key given way to] (config_io.cpp): a file's key gives way
// to an override of another. dp 4 throughout, so global = micro x accum x 4.
TEST_CASE("an override of one batch figure re-derives one the file gave", "[plan]") {
  const std::string file = "dp: 4\nmicro_batch: 4\ngrad_accum: 1\n";  // as fsdp.yaml writes them: global 16
  auto with = [&](std::vector<Override> o) { return resolve(parse_plan(file, "p.yaml", o), kModel, eight()); };
  // The global batch set: the file's grad_accum derived, 128 / (4 x 4) = 8.
  const ResolvedPlan g = with({{"plan", "global_batch", "128"}});
  CHECK(g.micro_batch == 4);
  CHECK(g.grad_accum == 8);
  // With the micro-batch set too: 128 / (2 x 4) = 16.
  CHECK(with({{"plan", "global_batch", "128"}, {"plan", "micro_batch", "2"}}).grad_accum == 16);
  // With grad_accum set instead, the file's micro-batch gives way: 128 / (2 x 4) = 16.
  const ResolvedPlan a = with({{"plan", "global_batch", "128"}, {"plan", "grad_accum", "2"}});
  CHECK(a.micro_batch == 16);
  CHECK(a.grad_accum == 2);
  // Megatron's micro_batches (GPipe's chunks) counts as grad_accum.
  CHECK(with({{"plan", "global_batch", "128"}, {"plan", "micro_batches", "4"}}).micro_batch == 8);
  // A file that gives the global batch keeps it: micro_batch set, 64 / (8 x 4) = 2 micro-steps;
  // grad_accum set, 64 / (8 x 4) = 2 a micro-batch.
  const std::string global = "dp: 4\nmicro_batch: 4\ngrad_accum: 4\nglobal_batch: 64\n";
  CHECK(resolve(parse_plan(global, "g.yaml", {{"plan", "micro_batch", "8"}}), kModel, eight()).grad_accum == 2);
  CHECK(resolve(parse_plan(global, "g.yaml", {{"plan", "grad_accum", "8"}}), kModel, eight()).micro_batch == 2);
  // The derived figure must still divide, and three set at once must agree.
  CHECK(error_of([&] { with({{"plan", "global_batch", "100"}}); }) ==
        "--set plan.global_batch: 100 is not a multiple of micro_batch x dp = 16");
  CHECK_THAT(error_of([&] { with({{"plan", "global_batch", "128"}, {"plan", "micro_batch", "2"}, {"plan", "grad_accum", "2"}}); }),
             Catch::Contains("128 != micro_batch x grad_accum x dp = 2 x 2 x 4"));
  // Nothing overridden: a file's three that disagree are still refused.
  CHECK_THAT(error_of([] { resolve(parse_plan("dp: 4\nmicro_batch: 4\ngrad_accum: 1\nglobal_batch: 128\n", "p.yaml"), kModel, eight()); }),
             Catch::Contains("128 != micro_batch x grad_accum x dp = 4 x 1 x 4"));
}

TEST_CASE("sequence parallelism splits each rank's tokens evenly over tp, or is refused (Megatron asserts it)", "[plan][bad-input]") {
  // The rules table: 32 tokens over tp 2, yes; 33, no; under cp 2, each
  // rank's 4104 / 2 = 2052 tokens over tp 4 (513 each), yes; over tp 8, no.
  const PlanRules rules(kModel, eight());
  CHECK(rules.sequence_parallel_values(2, 1, 32) == std::vector<bool>{false, true});
  CHECK(rules.sequence_parallel_values(2, 1, 33) == std::vector<bool>{false});
  CHECK(rules.sequence_parallel_values(4, 2, 4104) == std::vector<bool>{false, true});
  CHECK(rules.sequence_parallel_values(8, 2, 4104) == std::vector<bool>{false});
  CHECK(rules.sequence_parallel_values(1, 1, 32) == std::vector<bool>{false});
  const auto gpt2 = models::load_model("gpt2");
  CHECK(error_of([&] { resolve(parse_plan("tp: 2\nsequence_parallel: true\nseq_len: 33\n", "p.yaml"), *gpt2, eight()); }) ==
        "p.yaml:2: plan.sequence_parallel: true splits each rank's 33 tokens of a sequence over tp 2, which does not divide them; "
        "set seq_len to a multiple of 2 or sequence_parallel: false");
}

TEST_CASE("inconsistent batches are named", "[plan][bad-input]") {
  CHECK(error_of([] { resolve(parse_plan("dp: 4\nglobal_batch: 63\nmicro_batch: 2\n", "p.yaml"), kModel, eight()); }) ==
        "p.yaml:2: plan.global_batch: 63 is not a multiple of micro_batch x dp = 8");
  CHECK_THAT(error_of([] { resolve(parse_plan("dp: 4\nglobal_batch: 64\nmicro_batch: 2\ngrad_accum: 2\n", "p.yaml"), kModel, eight()); }),
             Catch::Contains("64 != micro_batch x grad_accum x dp = 2 x 2 x 4"));
}

TEST_CASE("dp must divide the GPUs", "[plan][bad-input]") {
  CHECK(error_of([] { resolve(parse_plan("dp: 3\n", "p.yaml"), kModel, eight()); }) ==
        "p.yaml:1: plan.dp: 3 does not divide the 8 GPUs of eight; valid: 1, 2, 4, 8");
}

TEST_CASE("parameter offload needs stage 3", "[plan][bad-input]") {
  CHECK_THAT(error_of([] { resolve(parse_plan("zero_stage: 2\noffload_params: cpu\n", "p.yaml"), kModel, eight()); }),
             Catch::StartsWith("p.yaml:2: plan.offload_params: cpu needs zero_stage 3"));
  CHECK_THAT(error_of([] { resolve(parse_plan("offload_optimizer: cpu\n", "p.yaml"), kModel, eight()); }),
             Catch::StartsWith("p.yaml:1: plan.offload_optimizer: cpu needs zero_stage 1, 2 or 3"));
  CHECK_NOTHROW(resolve(parse_plan("zero_stage: 3\noffload_params: cpu\n", "p.yaml"), kModel, eight()));
}

TEST_CASE("FSDP strategies map onto ZeRO stages as PyTorch documents", "[plan]") {
  CHECK(resolve(parse_plan("fsdp: full_shard\n", "p"), kModel, eight()).zero_stage == 3);
  CHECK(resolve(parse_plan("fsdp: shard_grad_op\n", "p"), kModel, eight()).zero_stage == 2);
  CHECK(resolve(parse_plan("fsdp: no_shard\n", "p"), kModel, eight()).zero_stage == 0);
  ClusterSpec two_nodes = eight();
  two_nodes.nodes = 2;
  const ResolvedPlan h = resolve(parse_plan("fsdp: hybrid_shard\n", "p"), kModel, two_nodes);
  CHECK(h.zero_stage == 3);
  CHECK(h.shard_group == 8);  // shards within a node, replicas across nodes
  CHECK(h.dp == 16);
  CHECK_THAT(error_of([] { resolve(parse_plan("fsdp: full_shard\nzero_stage: 2\n", "p.yaml"), kModel, eight()); }),
             Catch::Contains("contradicts fsdp: full_shard"));
  // FSDP's rate limiter is FSDP's: refused with DeepSpeed's stage 3 and with SHARD_GRAD_OP.
  CHECK_FALSE(resolve(parse_plan("fsdp: full_shard\nlimit_all_gathers: false\n", "p"), kModel, eight()).limit_all_gathers);
  CHECK_THAT(error_of([] { resolve(parse_plan("zero_stage: 3\nlimit_all_gathers: false\n", "p.yaml"), kModel, eight()); }),
             Catch::StartsWith("p.yaml:2: plan.limit_all_gathers: false is FSDP's") &&
                 Catch::Contains("valid only with fsdp: full_shard or hybrid_shard (the plan has zero_stage 3)"));
  CHECK_THAT(error_of([] { resolve(parse_plan("fsdp: shard_grad_op\nlimit_all_gathers: false\n", "p.yaml"), kModel, eight()); }),
             Catch::Contains("(the plan has fsdp: shard_grad_op)"));
  // DeepSpeed's names for the bucket and the overlap (Note [DeepSpeed's knob
  // names]): 1.25e7 fp16 elements are 25 MB, fp32 ones 50 MB; DeepSpeed's
  // 5e8 default in bf16 is 1 GB.
  CHECK(resolve(parse_plan("zero_stage: 2\nprecision: fp16\nreduce_bucket_size: 1.25e7\n", "p"), kModel, eight()).bucket_bytes == 25'000'000);
  CHECK(resolve(parse_plan("zero_stage: 2\nprecision: fp32\nreduce_bucket_size: 1.25e7\n", "p"), kModel, eight()).bucket_bytes == 50'000'000);
  CHECK(resolve(parse_plan("zero_stage: 2\nprecision: bf16\nreduce_bucket_size: 5e8\n", "p"), kModel, eight()).bucket_bytes == 1'000'000'000);
  CHECK_FALSE(resolve(parse_plan("zero_stage: 2\noverlap_comm: false\n", "p"), kModel, eight()).overlap);
  CHECK_THAT(error_of([] { resolve(parse_plan("zero_stage: 2\nbucket_mb: 25\nreduce_bucket_size: 5e8\n", "p.yaml"), kModel, eight()); }),
             Catch::StartsWith("p.yaml:3: plan.reduce_bucket_size: set with bucket_mb, the same knob under dtsim's name"));
  CHECK_THAT(error_of([] { resolve(parse_plan("zero_stage: 2\noverlap: true\noverlap_comm: false\n", "p.yaml"), kModel, eight()); }),
             Catch::StartsWith("p.yaml:3: plan.overlap_comm: set with overlap"));
  // A --set of one name overrides a file's other, and a framework config's (as --deepspeed gives).
  {
    Override ds = parse_override("plan.bucket_mb=1000");
    ds.from = "ds_config.json:7";
    CHECK(resolve(parse_plan("zero_stage: 2\nprecision: fp16\n", "p", {ds, parse_override("plan.reduce_bucket_size=5e7")}), kModel,
                  eight())
              .bucket_bytes == 100'000'000);
    CHECK(resolve(parse_plan("zero_stage: 2\nprecision: fp16\nreduce_bucket_size: 5e7\n", "p", {ds}), kModel, eight()).bucket_bytes ==
          1'000'000'000);
  }
  CHECK(resolve(parse_plan("zero_stage: 2\nprecision: fp16\nbucket_mb: 25\n", "p", {parse_override("plan.reduce_bucket_size=5e7")}), kModel,
                eight())
            .bucket_bytes == 100'000'000);
  // Which FSDP (Note [FSDP2's reduce-scatter wait]): 1 by default; 2 only
  // where FSDP2 shards gradients (it has no NO_SHARD); 1 or 2.
  CHECK(resolve(parse_plan("fsdp: full_shard\n", "p"), kModel, eight()).fsdp_version == 1);
  CHECK(resolve(parse_plan("fsdp: shard_grad_op\nfsdp_version: 2\n", "p"), kModel, eight()).fsdp_version == 2);
  CHECK_THAT(error_of([] { resolve(parse_plan("zero_stage: 2\nfsdp_version: 2\n", "p.yaml"), kModel, eight()); }),
             Catch::StartsWith("p.yaml:2: plan.fsdp_version: 2 is PyTorch FSDP2 (fully_shard)") &&
                 Catch::Contains("(the plan has zero_stage 2)"));
  CHECK_THAT(error_of([] { resolve(parse_plan("fsdp: no_shard\nfsdp_version: 2\n", "p.yaml"), kModel, eight()); }),
             Catch::Contains("(the plan has fsdp: no_shard, which FSDP2 does not have; replicate() is DDP's)"));
  CHECK_THAT(error_of([] { resolve(parse_plan("fsdp: shard_grad_op\nfsdp_version: 2\noverlap: false\n", "p.yaml"), kModel, eight()); }),
             Catch::Contains("plan.fsdp_version: 2 with overlap: false"));
  CHECK_THAT(error_of([] { resolve(parse_plan("fsdp: full_shard\nfsdp_version: 2\nlimit_all_gathers: false\n", "p.yaml"), kModel, eight()); }),
             Catch::Contains("plan.fsdp_version: 2 with limit_all_gathers: false: FSDP2 (fully_shard) has no such knob"));
  CHECK_THAT(error_of([] { resolve(parse_plan("fsdp: full_shard\nfsdp_version: 3\n", "p.yaml"), kModel, eight()); }),
             Catch::StartsWith("p.yaml:2: plan.fsdp_version") && Catch::Contains("1, 2"));
  // FSDP's units (Note [FSDP's root unit]): blocks by default, layers on request; FSDP's only.
  CHECK(resolve(parse_plan("fsdp: full_shard\n", "p"), kModel, eight()).fsdp_wrap == FsdpWrap::kBlocks);
  CHECK(resolve(parse_plan("fsdp: full_shard\nfsdp_wrap: layers\n", "p"), kModel, eight()).fsdp_wrap == FsdpWrap::kLayers);
  CHECK_THAT(error_of([] { resolve(parse_plan("zero_stage: 3\nfsdp_wrap: layers\n", "p.yaml"), kModel, eight()); }),
             Catch::StartsWith("p.yaml:2: plan.fsdp_wrap: layers is FSDP's") &&
                 Catch::Contains("valid only with fsdp: full_shard or hybrid_shard (the plan has zero_stage 3)"));
  CHECK_THAT(error_of([] { parse_plan("fsdp: full_shard\nfsdp_wrap: modules\n", "p.yaml"); }),
             Catch::StartsWith("p.yaml:2: plan.fsdp_wrap") && Catch::Contains("blocks") && Catch::Contains("layers") &&
                 Catch::Contains("torchtitan"));
  CHECK(resolve(parse_plan("fsdp: full_shard\nfsdp_wrap: torchtitan\n", "p"), kModel, eight()).fsdp_wrap == FsdpWrap::kTorchtitan);
}

TEST_CASE("Megatron's recompute_method and recompute_num_layers go with full recompute (Note [Block recompute])", "[plan][bad-input]") {
  const auto& m = kModel;
  auto err = [&](const std::string& yaml) { return error_of([&] { resolve(parse_plan(yaml, "p.yaml"), m, eight()); }); };
  CHECK(err("recompute_method: block\nrecompute_num_layers: 2\n") ==
        "p.yaml:1: plan.recompute_method: applies to recompute: full (Megatron-Core's recompute_granularity full), not none; "
        "remove it or set recompute: full");
  CHECK(err("recompute: selective\nrecompute_num_layers: 1\n") ==
        "p.yaml:2: plan.recompute_num_layers: applies to recompute: full (Megatron-Core's recompute_granularity full), not "
        "selective; remove it or set recompute: full");
  CHECK(err("recompute: full\nrecompute_method: block\n") ==
        "p.yaml:2: plan.recompute_method: block needs recompute_num_layers, the blocks rerun in each model chunk (at least 1), "
        "as Megatron-Core's TransformerConfig requires");
  CHECK(err("recompute: full\nrecompute_num_layers: 4\nzero_stage: 3\n") ==
        "p.yaml:2: plan.recompute_num_layers: 4 with recompute_method uniform (groups of blocks under one checkpoint) is not "
        "modelled with ZeRO-3 or FSDP's sharded parameters; valid there: 1, or recompute_method: block");
  CHECK(resolve(parse_plan("recompute: full\nrecompute_num_layers: 4\n", "p.yaml"), m, eight()).recompute_group == 4);
  CHECK_THAT(err("recompute: full\nrecompute_method: blocks\n"), Catch::Contains("uniform, block"));
  CHECK_THAT(err("recompute: full\nrecompute_method: block\nrecompute_num_layers: 0\n"), Catch::Contains("recompute_num_layers"));
  CHECK(resolve(parse_plan("recompute: full\nrecompute_num_layers: 1\n", "p.yaml"), m, eight()).recompute_blocks == 0);
  CHECK(resolve(parse_plan("recompute: full\nrecompute_method: block\nrecompute_num_layers: 5\n", "p.yaml"), m, eight())
            .recompute_blocks == 5);
}

TEST_CASE("op-level recompute needs blocks that describe it (Note [Op-level recompute])", "[plan][bad-input]") {
  // The fake model's blocks say nothing of the op policy: refused in one line.
  CHECK_THAT(error_of([] { resolve(parse_plan("recompute: op\n", "p.yaml"), kModel, eight()); }),
             Catch::StartsWith("p.yaml:1: plan.recompute: op (torchtitan's op-level policy) is described for dense "
                               "Llama-family blocks") &&
                 Catch::Contains("need one of none, selective, full"));
  CHECK_THAT(error_of([] { parse_plan("recompute: ops\n", "p.yaml"); }), Catch::Contains("none, selective, full, op"));
}

TEST_CASE("bf16 needs a device that has it", "[plan][bad-input]") {
  ClusterSpec v100 = eight();
  v100.device.name = "V100";
  v100.device.peak_bf16 = 0;
  CHECK_THAT(error_of([&] { resolve(parse_plan("precision: bf16\n", "p.yaml"), kModel, v100); }),
             Catch::Contains("bf16 needs bfloat16 support, which V100 lacks; valid: fp32, fp16"));
}

TEST_CASE("seq_len cannot exceed the model's maximum", "[plan][bad-input]") {
  CHECK_THAT(error_of([] { resolve(parse_plan("seq_len: 2048\n", "p.yaml"), kModel, eight()); }),
             Catch::Contains("plan.seq_len: 2048 exceeds fake's maximum of 1024"));
}

TEST_CASE("optimizer state bytes per parameter (ZeRO paper section 3.1)", "[plan]") {
  CHECK(optimizer_state_bytes_per_param(Optimizer::kAdam, Precision::kFp16) == 12);
  CHECK(optimizer_state_bytes_per_param(Optimizer::kAdamW, Precision::kBf16) == 12);
  CHECK(optimizer_state_bytes_per_param(Optimizer::kAdam, Precision::kFp32) == 8);
  CHECK(optimizer_state_bytes_per_param(Optimizer::kSgd, Precision::kFp32) == 4);
  CHECK(optimizer_state_bytes_per_param(Optimizer::kSgd, Precision::kFp16) == 8);
  // Note [SGD momentum]: at momentum 0 no buffer; the fp32 master under mixed precision only.
  CHECK(optimizer_state_bytes_per_param(Optimizer::kSgdPlain, Precision::kFp32) == 0);
  CHECK(optimizer_state_bytes_per_param(Optimizer::kSgdPlain, Precision::kBf16) == 4);
  CHECK(effective_optimizer(Optimizer::kSgd, 0) == Optimizer::kSgdPlain);
  CHECK(effective_optimizer(Optimizer::kSgd, 0.9) == Optimizer::kSgd);
  CHECK(effective_optimizer(Optimizer::kAdam, 0) == Optimizer::kAdam);
}

TEST_CASE("Megatron-Core's recompute_modules: its names, under selective recompute, where the model has them (Note [Recompute modules])",
          "[plan][recompute][bad-input]") {
  CHECK(parse_plan("recompute: selective\nrecompute_modules: [layernorm, moe_act]\n", "p").recompute_modules ==
        (kRecomputeLayernorm | kRecomputeMoeAct));
  // One string, as a --set or Megatron's nargs write it; [] reruns nothing.
  CHECK(parse_plan("recompute_modules: mla_up_proj mlp\n", "p").recompute_modules == (kRecomputeMlaUpProj | kRecomputeMlp));
  CHECK(parse_plan("recompute_modules: []\n", "p").recompute_modules == 0);
  CHECK(parse_plan("recompute: selective\n", "p").recompute_modules == kRecomputeCoreAttn);  // Megatron-Core's default
  CHECK(error_of([] { parse_plan("recompute: selective\nrecompute_modules: [layernorm, moe_actt]\n", "p.yaml"); }) ==
        "p.yaml:2: plan.recompute_modules: 'moe_actt' is not one of Megatron-Core's modules (did you mean 'moe_act'?); valid: "
        "core_attn, layernorm, moe_act, mla_up_proj, mlp, shared_experts, moe, mhc");
  CHECK_THAT(error_of([] { parse_plan("recompute_modules: {a: 1}\n", "p.yaml"); }),
             Catch::StartsWith("p.yaml:1: plan.recompute_modules: expected a list of names"));
  CHECK(error_of([] { parse_plan("recompute_modules: [[mlp]]\n", "p.yaml"); }) ==
        "p.yaml:1: plan.recompute_modules: expected a list of names, found a list");

  ClusterSpec fp8 = eight();
  fp8.device.peak_fp8 = 2e12;
  auto err = [&](const std::string& model, const std::string& yaml) {
    const auto m = models::load_model(model);
    return error_of([&] { resolve(parse_plan(yaml, "p.yaml"), *m, fp8); });
  };
  CHECK(err("llama-tiny", "recompute_modules: [mlp]\n") ==
        "p.yaml:1: plan.recompute_modules: applies to recompute: selective (Megatron-Core's --recompute-granularity "
        "selective), not none; remove it or set recompute: selective");
  // A dense Llama block's norms are fused into the next GEMM in Megatron's
  // Transformer Engine spec: its modules are the core and the MLP.
  CHECK(err("llama-tiny", "recompute: selective\nrecompute_modules: [moe_act]\n") ==
        "p.yaml:2: plan.recompute_modules: moe_act needs a mixture-of-experts model (Megatron-Core raises without grouped "
        "experts); valid for llama-tiny: core_attn, mlp");
  CHECK(err("moe-tiny", "recompute: selective\nrecompute_modules: [mla_up_proj]\n") ==
        "p.yaml:2: plan.recompute_modules: mla_up_proj needs multi-latent attention whose up-projections the model describes "
        "(Megatron-Core raises without MLA; DeepSeek Sparse Attention's absorbed layers are not described); valid "
        "for moe-tiny: core_attn, layernorm, moe_act, moe");
  CHECK_THAT(err("deepseek-v3.2-tiny", "recompute: selective\nrecompute_modules: [mla_up_proj]\n"),
             Catch::Contains("DeepSeek Sparse Attention's absorbed layers are not described); valid for deepseek-v3.2-tiny: "));
  // Note [Hyper-connections]: mhc where the model has streams, not beside mlp.
  CHECK(err("llama-tiny", "recompute: selective\nrecompute_modules: [mhc]\n") ==
        "p.yaml:2: plan.recompute_modules: mhc needs hyper-connections (Megatron-Core raises \"'mhc' in recompute_modules "
        "requires enable_hyper_connections=True\"); valid for llama-tiny: core_attn, mlp");
  CHECK(err("deepseek-v4-tiny", "recompute: selective\nrecompute_modules: [mhc, mlp]\n") ==
        "p.yaml:2: plan.recompute_modules: mhc with mlp: Megatron-Core raises (\"They use different checkpoint mechanisms that "
        "may conflict\"); drop one");
  CHECK_THAT(err("deepseek-v4-tiny", "recompute: selective\nrecompute_modules: [mhc]\nfine_grained_activation_offloading: true\n"
                                     "offload_modules: [attn_norm]\nprecision: bf16\n"),
             Catch::Contains("plan.offload_modules: attn_norm with recompute_modules mhc: Megatron-Core raises"));
  CHECK_NOTHROW(resolve(parse_plan("recompute: selective\nrecompute_modules: [mhc, mla_up_proj]\n", "p.yaml"),
                        *models::load_model("deepseek-v4-tiny"), fp8));
  CHECK(err("llama-tiny", "recompute: selective\nrecompute_modules: [moe]\n") ==
        "p.yaml:2: plan.recompute_modules: moe needs a mixture-of-experts model (the whole MoE layer rerun); valid for "
        "llama-tiny: core_attn, mlp");
  CHECK(err("moe-tiny", "recompute: selective\nrecompute_modules: [moe]\nep: 2\noverlap_moe_expert_parallel_comm: true\n"
                        "precision: bf16\n") ==
        "p.yaml:2: plan.recompute_modules: moe with overlap_moe_expert_parallel_comm: Megatron-Core asserts \"disable moe in "
        "recompute_modules when enabling overlap_moe_expert_parallel_comm\"; drop one");
  CHECK_THAT(err("moe-tiny", "recompute: selective\nrecompute_modules: [moe_act]\nprecision: fp8\n"),
             Catch::Contains("moe_act and layernorm under fp8 need a recipe other than delayed"));
  CHECK(err("moe-tiny", "recompute: selective\nrecompute_modules: [moe_act]\nprecision: fp8\nfp8_recipe: tensorwise\n") ==
        "(no error)");
  CHECK(err("moe-tiny", "recompute: selective\nrecompute_modules: [layernorm, moe_act]\n") == "(no error)");
}

// Note [Pipeline layout]: Megatron-Core's layout string, unrolled as
// PipelineParallelLayerLayout.parse_str_to_list does: commas dropped,
// "(X)*n" then "c*n" repeated, stages split at '|'.
TEST_CASE("Megatron's pipeline layout: parsed, checked, and read as each chunk's layers", "[plan][pipeline]") {
  // DeepSeek-V3's recipe on 32 chunks: the embedding and a block, 30 x two
  // blocks, the MTP depth and the loss.
  const auto v3 = parse_pipeline_layout("Et|(tt|)*30mL");
  REQUIRE(v3.size() == 32);
  CHECK(v3.front() == "Et");
  CHECK(v3[1] == "tt");
  CHECK(v3.back() == "mL");
  // The docstring's example: "Ettt|(tt|)*29,m|L" -> [E,t,t,t] + [t,t] x 29 + [m] + [L].
  const auto doc = parse_pipeline_layout("Ettt|(tt|)*29,m|L");
  REQUIRE(doc.size() == 32);
  CHECK(doc[0] == "Ettt");
  CHECK(doc[29] == "tt");
  CHECK(doc[30] == "m");
  CHECK(doc[31] == "L");
  CHECK(parse_pipeline_layout("Et*3|t*2,tL") == std::vector<std::string>{"Ettt", "tttL"});
  // Megatron's own asserts, and dtsim's need of a layer in every chunk; one line each.
  CHECK(error_of([] { parse_pipeline_layout("t|EL"); }) == "'t|EL': the embedding (E) must come first and once (Megatron asserts it)");
  CHECK(error_of([] { parse_pipeline_layout("Et|Lt"); }) == "'Et|Lt': the loss (L) must come last and once (Megatron asserts it)");
  CHECK(error_of([] { parse_pipeline_layout("Em|tL"); }) ==
        "'Em|tL': a block (t) after an MTP depth (m); blocks come first (Megatron asserts it)");
  CHECK(error_of([] { parse_pipeline_layout("Et|t*0|tL"); }) == "'Et|t*0|tL': chunk 2 of 3 has no layer; dtsim needs one in each");
  CHECK(error_of([] { parse_pipeline_layout("Ex|L"); }).rfind("'Ex|L': 'x' is not a layer; valid: stages of E (the embedding)", 0) == 0);
  CHECK(error_of([] { parse_pipeline_layout("E(t|)*99999999L"); }) == "'E(t|)*99999999L' unrolls to more layers than a model may have");

  // As a plan key: each chunk's count of symbols is its count of layers
  // (gpt2: the embedding, 12 blocks, the head), the same split as
  // stage_layers [7, 7], so the same prediction.
  const auto gpt2 = models::load_model("gpt2");
  const ClusterSpec a100 = load_cluster("dgx-a100");
  const PlanSpec layout = load_plan("ddp", {{"plan", "pp", "2"}, {"plan", "micro_batches", "8"}, {"plan", "pipeline_layout", "Et*6|t*6L"}});
  CHECK(layout.stage_layers == std::vector<int>{7, 7});
  CHECK(layout.pipeline_layout == "Et*6|t*6L");
  const PlanSpec counts = load_plan("ddp", {{"plan", "pp", "2"}, {"plan", "micro_batches", "8"}, {"plan", "stage_layers", "[7, 7]"}});
  CHECK(predict(*gpt2, layout, a100).iteration_time == predict(*gpt2, counts, a100).iteration_time);
  // Its blocks and MTP depths are the model's, as validate_layer_layout asserts.
  CHECK(error_of([&] {
          resolve(load_plan("ddp", {{"plan", "pp", "2"}, {"plan", "micro_batches", "8"}, {"plan", "pipeline_layout", "Et*6|t*5L"}}), *gpt2,
                  a100);
        }) == "--set plan.pipeline_layout: 'Et*6|t*5L' lays out 11 blocks and 0 MTP depths; gpt2 has 12 blocks and 0 MTP depths "
              "(model.mtp_layers)");
  CHECK(error_of([] { load_plan("ddp", {{"plan", "pipeline_layout", "Et|tL"}, {"plan", "stage_layers", "[2, 2]"}}); })
            .find("given with stage_layers; both split the layers: give one") != std::string::npos);
  CHECK(error_of([] { load_plan("ddp", {{"plan", "pipeline_layout", "Et|Lt"}}); }) ==
        "--set plan.pipeline_layout: 'Et|Lt': the loss (L) must come last and once (Megatron asserts it)");
}

// Note [Megatron's split]: transformer_block.get_num_layers_to_build's rules,
// worked by hand on gpt2 (an embedding, 12 blocks, the head: 14 layers).
TEST_CASE("Megatron's even split of the blocks, its knobs and its asserts", "[plan][pipeline]") {
  const auto gpt2 = models::load_model("gpt2");
  const ClusterSpec a100 = load_cluster("dgx-a100");
  // On a node of pp GPUs (dp 1).
  auto split = [&](std::vector<Override> more) {
    std::vector<Override> o = {{"plan", "micro_batches", "8"}, {"plan", "pipeline_split", "megatron"}};
    o.insert(o.end(), more.begin(), more.end());
    const std::string pp = more.front().value;
    return resolve(load_plan("ddp", o), *gpt2, load_cluster("dgx-a100", {{"cluster", "gpus_per_node", pp}})).stage_layers;
  };
  // 12 blocks / pp 2 = 6 a rank; the embedding joins the first, the head the last.
  CHECK(split({{"plan", "pp", "2"}}) == std::vector<int>{7, 7});
  // Interleaved, pp 2 x vp 3: 6 a rank, 2 a chunk; chunk c is rank c % 2.
  CHECK(split({{"plan", "pp", "2"}, {"plan", "schedule", "interleaved"}, {"plan", "virtual_stages", "3"}}) ==
        std::vector<int>{3, 2, 2, 2, 2, 3});
  // The embedding and the loss counted as blocks: (12 + 2) / pp 7 = 2 a chunk,
  // the first and the last building one block less beside them.
  CHECK(split({{"plan", "pp", "7"}, {"plan", "account_for_embedding_in_pipeline_split", "true"},
               {"plan", "account_for_loss_in_pipeline_split", "true"}}) == std::vector<int>{2, 2, 2, 2, 2, 2, 2});
  // The first and last ranks given: 2 and 2, the 8 left on the rank between.
  CHECK(split({{"plan", "pp", "3"}, {"plan", "num_layers_in_first_pipeline_stage", "2"}, {"plan", "num_layers_in_last_pipeline_stage", "2"}}) ==
        std::vector<int>{3, 8, 3});
  // Megatron's asserts, each one line naming its key.
  CHECK(error_of([&] { split({{"plan", "pp", "5"}}); }).rfind(
            "--set plan.pipeline_split: megatron: 12 blocks do not split evenly over pp 5 (Megatron asserts it;", 0) == 0);
  CHECK(error_of([&] { split({{"plan", "pp", "4"}, {"plan", "schedule", "interleaved"}, {"plan", "virtual_stages", "2"}}); }) ==
        "--set plan.pipeline_split: pipeline rank 0's 3 blocks do not split over its 2 virtual stages (Megatron asserts it)");
  CHECK(error_of([&] {
          split({{"plan", "pp", "2"}, {"plan", "num_layers_in_first_pipeline_stage", "4"}, {"plan", "account_for_loss_in_pipeline_split", "true"}});
        }) == "--set plan.num_layers_in_first_pipeline_stage: given with account_for_embedding_in_pipeline_split or "
              "account_for_loss_in_pipeline_split; Megatron refuses both");
  CHECK(error_of([&] { split({{"plan", "pp", "4"}, {"plan", "num_layers_in_first_pipeline_stage", "3"}, {"plan", "num_layers_in_last_pipeline_stage", "4"}}); }) ==
        "--set plan.num_layers_in_first_pipeline_stage: leaves 5 of the 12 blocks for the 2 ranks between; Megatron asserts they divide evenly");
  // A knob alone asks for the split; beside pipeline_split: cost it is refused.
  CHECK(load_plan("ddp", {{"plan", "account_for_loss_in_pipeline_split", "true"}}).pipeline_split == PipelineSplit::kMegatron);
  CHECK(error_of([] { load_plan("ddp", {{"plan", "pipeline_split", "cost"}, {"plan", "num_layers_in_last_pipeline_stage", "2"}}); }) ==
        "--set plan.num_layers_in_last_pipeline_stage: is Megatron's split; it needs pipeline_split: megatron, not cost");
  // dtsim's own split balances priced cost, and a model not laid out as a GPT has no Megatron split.
  CHECK(load_plan("ddp").pipeline_split == PipelineSplit::kCost);
  CHECK(error_of([&] {
          resolve(load_plan("ddp", {{"plan", "pp", "2"}, {"plan", "micro_batches", "4"}, {"plan", "pipeline_split", "megatron"}}),
                  *models::load_model("bilstm"), a100);
        }).find("is not laid out as Megatron's GPT") != std::string::npos);
}
