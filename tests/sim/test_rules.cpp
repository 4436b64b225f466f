#include <catch2/catch.hpp>

#include "test_util.hpp"

#include "dtsim/models/models.hpp"
#include "dtsim/sim/config_io.hpp"
#include "dtsim/sim/rules.hpp"

using namespace dtsim;
using namespace dtsim::sim;
using dtsim::test::error_of;

TEST_CASE("the rules table: gpt2 on a DGX A100", "[rules]") {
  const auto gpt2 = models::load_model("gpt2");  // 12 heads, MLP 3072, 12 blocks + embedding + head = 14 layers
  const ClusterSpec dgx = load_cluster("dgx-a100");  // 1 node x 8 GPUs
  const PlanRules rules(*gpt2, dgx);
  // tp: divisors of the node's 8 GPUs that divide 12 heads: 8 does not.
  CHECK(rules.tp_values() == std::vector<int>{1, 2, 4});
  // pp: divisors of 8 / tp, at most 14 layers: all of them here.
  CHECK(rules.pp_values(1) == std::vector<int>{1, 2, 4, 8});
  CHECK(rules.pp_values(4) == std::vector<int>{1, 2});
  CHECK(rules.dp_values(2, 2) == std::vector<int>{1, 2});
  // Interleaving: 8 micro-batches over 4 stages allow 2 or 3 chunks (4 x 3 <= 14 < 4 x 4); 6 micro-batches none.
  CHECK(rules.virtual_stage_values(4, 8) == std::vector<int>{2, 3});
  CHECK(rules.virtual_stage_values(4, 6).empty());
  CHECK(rules.zero_stages(2) == std::vector<int>{0, 1});
  CHECK(rules.zero_stages(1) == std::vector<int>{0, 1, 2, 3});
  CHECK(rules.recomputes().size() == 3);  // none, selective (it has attention), full
  CHECK(rules.precisions().size() == 3);  // the A100 has bf16
  // Megatron's overlapped parameter gather: the distributed optimizer with
  // overlapped reduction only (arguments.py), never under the Python loop.
  using V = std::vector<bool>;
  CHECK(rules.overlap_param_gather_values(1, false, true, Runtime::kLibtorch) == V{false, true});
  for (int z : {0, 2, 3}) CHECK(rules.overlap_param_gather_values(z, false, true, Runtime::kLibtorch) == V{false});
  CHECK(rules.overlap_param_gather_values(1, true, true, Runtime::kLibtorch) == V{false});
  CHECK(rules.overlap_param_gather_values(1, false, false, Runtime::kLibtorch) == V{false});
  CHECK(rules.overlap_param_gather_values(1, false, true, Runtime::kPython) == V{false});
  // FSDP2 where fully_shard has the strategy (Note [FSDP2's reduce-scatter
  // wait]): full, shard-grad-op and hybrid shard; never NO_SHARD or ZeRO,
  // nor without the overlap and the all-gather limit it always has.
  using I = std::vector<int>;
  for (FsdpMode f : {FsdpMode::kFullShard, FsdpMode::kShardGradOp, FsdpMode::kHybridShard}) CHECK(PlanRules::fsdp_versions(f, true, true) == I{1, 2});
  CHECK(PlanRules::fsdp_versions(FsdpMode::kNoShard, true, true) == I{1});
  CHECK(PlanRules::fsdp_versions(FsdpMode::kNone, true, true) == I{1});
  CHECK(PlanRules::fsdp_versions(FsdpMode::kFullShard, false, true) == I{1});
  CHECK(PlanRules::fsdp_versions(FsdpMode::kFullShard, true, false) == I{1});
  // Transformer Engine's TP overlap needs sequence parallelism (tp > 1).
  CHECK(PlanRules::tp_comm_overlap_values(2, true) == V{false, true});
  CHECK(PlanRules::tp_comm_overlap_values(2, false) == V{false});
  CHECK(PlanRules::tp_comm_overlap_values(1, false) == V{false});
}

TEST_CASE("the rules table: pp is bounded by the layers, on many GPUs", "[rules]") {
  // gpt2-tiny: 2 blocks + embedding + head = 4 layers; 16 nodes of 8 GPUs.
  const auto tiny = models::load_model("gpt2-tiny");
  const ClusterSpec big = load_cluster("dgx-a100", {{"cluster", "nodes", "16"}});
  const PlanRules rules(*tiny, big);
  CHECK(rules.pp_values(1) == std::vector<int>{1, 2, 4});
  // A Bi-LSTM has no attention core: nothing for selective recompute to drop.
  // (PlanRules keeps a reference: the model must outlive it.)
  const auto bilstm = models::load_model("bilstm");
  const PlanRules lstm(*bilstm, big);
  CHECK(lstm.recomputes() == std::vector<Recompute>{Recompute::kNone, Recompute::kFull});
  // A CNN has no blocks either: full recompute has nothing to checkpoint,
  // and no attention to choose.
  const auto cnn = models::load_model("cnn");
  const PlanRules conv(*cnn, big);
  CHECK(conv.recomputes() == std::vector<Recompute>{Recompute::kNone});
  CHECK(conv.attentions() == std::vector<Attention>{Attention::kAuto});
}

TEST_CASE("resolve reports every problem of a plan at once, each with its line and key", "[rules][plan][bad-input]") {
  const auto gpt2 = models::load_model("gpt2");
  const ClusterSpec v100 = load_cluster("8xv100-16g");  // no bf16
  const std::string yaml = "tp: 5\nseq_len: 4096\nprecision: bf16\n";
  const std::string err = error_of([&] { resolve(parse_plan(yaml, "p.yaml"), *gpt2, v100); });
  CHECK(err ==
        "p.yaml:1: plan.tp: 5: 12 attention heads are not divisible by tp=5\n"
        "p.yaml:2: plan.seq_len: 4096 exceeds gpt2's maximum of 1024; valid: 1 to 1024\n"
        "p.yaml:3: plan.precision: bf16 needs bfloat16 support, which V100-SXM2-16GB lacks; valid: fp32, fp16");
}

TEST_CASE("a wrong tp is reported once, not again through dp", "[rules][plan][bad-input]") {
  const auto gpt2 = models::load_model("gpt2");
  const ClusterSpec dgx = load_cluster("dgx-a100");
  const std::string err = error_of([&] { resolve(parse_plan("tp: 8\ndp: 3\n", "p.yaml"), *gpt2, dgx); });
  CHECK(err == "p.yaml:1: plan.tp: 8: 12 attention heads are not divisible by tp=8");
}

TEST_CASE("attention: flash in fp32 with grouped key/value heads is PyTorch's math path, priced as eager (Note [SDPA in fp32])",
          "[rules]") {
  const ClusterSpec h100 = load_cluster("1xh100");
  // Llama 3.2 1B: 32 query heads, 8 key/value heads, no sliding window.
  const auto llama = models::load_model("llama-3.2-1b");
  const PlanRules l(*llama, h100);
  CHECK(l.flash_attention(Attention::kFlash, Precision::kFp16));
  CHECK(l.flash_attention(Attention::kFlash, Precision::kBf16));
  CHECK_FALSE(l.flash_attention(Attention::kFlash, Precision::kFp32));
  CHECK_FALSE(l.flash_attention(Attention::kAuto, Precision::kFp32));
  CHECK(l.flash_attention(Attention::kAuto, Precision::kBf16));
  // GPT-2 has as many key/value heads as query heads: SDPA's memory-efficient
  // kernel takes fp32 without enable_gqa.
  const auto gpt2 = models::load_model("gpt2");
  CHECK(PlanRules(*gpt2, h100).flash_attention(Attention::kFlash, Precision::kFp32));
  // Mistral's sliding window goes to SDPA as a mask with the heads expanded: no enable_gqa either.
  const auto mistral = models::load_model("mistral-7b");
  CHECK(PlanRules(*mistral, h100).flash_attention(Attention::kFlash, Precision::kFp32));
}
