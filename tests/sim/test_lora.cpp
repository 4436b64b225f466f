// LoRA fine-tuning (Note [LoRA] and Note [Frozen weights] in
// models/src/peft.cpp): the adapters' counts, kernels, collectives and saved
// bytes, the frozen weights' memory and their sharding by FSDP2 and ZeRO-3, and
// Megatron-Bridge's peft section, against values derived by hand.
#include <catch2/catch.hpp>

#include <algorithm>
#include <map>
#include <string>
#include <vector>

#include "dtsim/models/models.hpp"
#include "dtsim/sim/config_io.hpp"
#include "dtsim/sim/error.hpp"
#include "dtsim/sim/executor.hpp"
#include "dtsim/sim/framework_config.hpp"
#include "dtsim/sim/lowering.hpp"
#include "dtsim/sim/partition.hpp"
#include "dtsim/sim/predict.hpp"
#include "dtsim/sim/report.hpp"
#include "dtsim/sim/rules.hpp"
#include "fake_model.hpp"
#include "test_util.hpp"

using namespace dtsim;
using namespace dtsim::sim;
using dtsim::test::error_of;

namespace {

std::vector<Override> sets(const std::vector<std::string>& s) {
  std::vector<Override> o;
  for (const auto& x : s) o.push_back(parse_override(x));
  return o;
}

/// One sequence of 4096 tokens in bf16, flash attention, split over `tp` with sequence parallelism.
WorkloadShape seq4096(int tp = 1) {
  WorkloadShape w;
  w.seq_len = 4096;
  w.act_bytes = 2;
  w.flash_attention = true;
  w.tp = tp;
  w.sequence_parallel = tp > 1;
  return w;
}

const Kernel* kernel(const std::vector<Kernel>& ks, const std::string& name) {
  const auto it = std::find_if(ks.begin(), ks.end(), [&](const Kernel& k) { return k.name == name; });
  return it == ks.end() ? nullptr : &*it;
}

/// Rank 0's resident bytes of one category.
Bytes resident(const TaskGraph& g, MemCategory category) {
  Bytes b = 0;
  for (const auto& m : g.ranks[0].resident) {
    if (m.category == category) b += m.bytes;
  }
  return b;
}

/// Rank 0's resident parameter bytes of `model` under `plan_yaml` on `c`,
/// resolved, partitioned and lowered at fixed costs.
Bytes resident_params(const Model& model, const std::string& plan_yaml, const ClusterSpec& c) {
  ResolvedPlan r = resolve(parse_plan(plan_yaml, "p.yaml"), model, c);
  const test::FixedCompute compute(1000);
  const test::FixedComm comm(1000);
  partition(r, model, c, compute, comm);
  return resident(lower(model, r, c, CostModels{&compute, &comm}), MemCategory::kParameters);
}

Flops weight_grad_flops(const Layer& l) {
  Flops f = 0;
  for (const Kernel& k : l.backward) {
    if (k.kind == KernelKind::kGemm && k.name.ends_with(".wgrad")) f += k.flops;
  }
  return f;
}

}  // namespace

TEST_CASE("LoRA's adapters: Megatron's fused modules, counted by hand (Note [LoRA])", "[lora]") {
  const auto base = models::load_model("llama-3-8b");
  const auto lora = models::load_model("llama-3-8b", sets({"model.peft=lora", "model.lora_rank=16"}));
  // Rank 16 beside linear_qkv (4096 -> 6144), linear_proj (4096 -> 4096),
  // linear_fc1 (4096 -> 2 x 14336) and linear_fc2 (14336 -> 4096): 16 (in
  // + out) each, 163,840 + 131,072 + 524,288 + 294,912 = 1,114,112 a block,
  // 32 blocks. (HuggingFace PEFT's seven unfused modules make 41,943,040.)
  CHECK(lora->trainable_parameters() == 32 * 1'114'112);
  CHECK(lora->trainable_parameters() == 35'651'584);
  CHECK(lora->parameters() == base->parameters() + 35'651'584);
  CHECK(base->trainable_parameters() == base->parameters());
  CHECK(lora->name() == "llama-3-8b+lora16");
  // Bridge's 70B benchmark: rank 16 on linear_qkv alone (8192 -> 10240), 80 blocks.
  const auto qkv = models::load_model("llama-3-70b", sets({"model.peft=lora", "model.lora_rank=16", "model.lora_targets=[linear_qkv]"}));
  CHECK(qkv->trainable_parameters() == 80 * 16 * (8192 + 10240));
}

TEST_CASE("LoRA on HuggingFace PEFT's modules: one adapter a projection, counted by hand (Note [LoRA])", "[lora]") {
  const auto base = models::load_model("llama-3-8b");
  const auto all = models::load_model(
      "llama-3-8b", sets({"model.peft=lora", "model.lora_rank=16", "model.lora_targets=[q_proj,k_proj,v_proj,o_proj,gate_proj,up_proj,down_proj]"}));
  // Rank 16 beside q (4096 -> 4096), k and v (4096 -> 1024 each), o (4096
  // -> 4096), gate and up (4096 -> 14336 each) and down (14336 -> 4096):
  // 16 x (8192 + 5120 + 5120 + 8192 + 3 x 18432) = 1,310,720 a block, 32
  // blocks: PEFT's print_trainable_parameters for Llama 3 8B, "trainable
  // params: 41,943,040 || all params: 8,072,204,288".
  CHECK(all->trainable_parameters() == 32 * 1'310'720);
  CHECK(all->trainable_parameters() == 41'943'040);
  CHECK(all->parameters() == 8'072'204'288);
  // torchtune's 8B LoRA recipe: q_proj, v_proj, output_proj and the MLP at
  // rank 8: 8 x (8192 + 5120 + 8192 + 3 x 18432) = 614,400 a block.
  const auto tune = models::load_model(
      "llama-3-8b", sets({"model.peft=lora", "model.lora_rank=8", "model.lora_targets=[q_proj,v_proj,o_proj,gate_proj,up_proj,down_proj]"}));
  CHECK(tune->trainable_parameters() == 32 * 614'400);
  // Each projection its own pair of GEMMs over its share of the fused one.
  const std::vector<Layer> ll = all->layers(seq4096()), bl = base->layers(seq4096());
  const Layer& l = ll[1];
  const Layer& b = bl[1];
  const Kernel* qa = kernel(l.forward, "attn.qkv.q_proj.lora_a");
  const Kernel* kb = kernel(l.forward, "attn.qkv.k_proj.lora_b");
  const Kernel* ub = kernel(l.forward, "mlp.gate_up.up_proj.lora_b");
  const Kernel* da = kernel(l.forward, "mlp.down.down_proj.lora_a");
  REQUIRE((qa != nullptr && kb != nullptr && ub != nullptr && da != nullptr));
  CHECK((qa->m == 4096 && qa->n == 16 && qa->k == 4096));
  CHECK((kb->m == 4096 && kb->n == 1024 && kb->k == 16));
  CHECK((ub->m == 4096 && ub->n == 14336 && ub->k == 16));
  CHECK((da->m == 4096 && da->n == 16 && da->k == 14336));
  CHECK(kernel(l.backward, "attn.qkv.v_proj.lora_b.wgrad") != nullptr);
  CHECK(l.params == 1'310'720);
  // Kept: q, k and v's adapters share the fused GEMM's input, which
  // replaces the base's saved copy once; each adds A's output, 4096 x 16 x 2
  // bytes: seven a block.
  CHECK(l.saved_bytes == b.saved_bytes + 7 * 4096 * 16 * 2);
  // GPT-2's fused c_attn has no q_proj; a mixture of experts, a
  // tensor-parallel split and a mix of the two namings are refused.
  CHECK_THAT(error_of([] { models::load_model("gpt2", sets({"model.peft=lora", "model.lora_targets=[q_proj]"})); }),
             Catch::Contains("model.lora_targets: q_proj match no linear layer of this model LoRA adapts; valid: linear_qkv, linear_proj, linear_fc1, linear_fc2"));
  CHECK_THAT(error_of([] { models::load_model("mixtral-8x7b", sets({"model.peft=lora", "model.lora_targets=[q_proj,v_proj]"})); }),
             Catch::Contains("model.lora_targets: HuggingFace PEFT's names on a mixture of experts are not modelled (transformers "
                             "releases differ on whether each expert's projections are modules PEFT matches); valid: Megatron-Core's "
                             "linear_qkv, linear_proj, linear_fc1, linear_fc2") &&
                 Catch::EndsWith("linear_fc2"));
  CHECK_THAT(error_of([] { models::load_model("llama-3-8b", sets({"model.peft=lora", "model.lora_targets=[linear_qkv,q_proj]"})); }),
             Catch::Contains("model.lora_targets: mixes Megatron-Core's module names with HuggingFace PEFT's"));
  CHECK_THAT(all->tp_error(2), Catch::Contains("HuggingFace PEFT's modules (q_proj, ..., down_proj) are adapted unsplit"));
  CHECK(all->tp_error(1).empty());
}

TEST_CASE("LoRA: the frozen base computes no weight gradient, the adapters their four GEMMs (Note [LoRA])", "[lora]") {
  const auto base = models::load_model("llama-3-8b");
  const auto lora = models::load_model("llama-3-8b", sets({"model.peft=lora", "model.lora_rank=16"}));
  const auto bl = base->layers(seq4096());
  const auto ll = lora->layers(seq4096());
  REQUIRE(ll.size() == bl.size());
  // The embedding: frozen, first, no backward.
  CHECK(ll[0].kind == LayerKind::kEmbedding);
  CHECK(ll[0].backward.empty());
  CHECK(ll[0].params == 0);
  CHECK(ll[0].frozen_params == 128256LL * 4096);
  const Layer& b = bl[1];
  const Layer& l = ll[1];
  CHECK(l.params == 1'114'112);
  CHECK(l.frozen_params == b.params);
  // A: 4096 tokens x 16 from 4096; B: 16 -> 6144.
  const Kernel* a = kernel(l.forward, "attn.qkv.lora_a");
  const Kernel* bk = kernel(l.forward, "attn.qkv.lora_b");
  REQUIRE(a != nullptr);
  REQUIRE(bk != nullptr);
  CHECK((a->m == 4096 && a->n == 16 && a->k == 4096));
  CHECK((bk->m == 4096 && bk->n == 6144 && bk->k == 16));
  CHECK(kernel(l.backward, "attn.qkv.wgrad") == nullptr);
  CHECK(kernel(l.backward, "attn.qkv.dgrad") != nullptr);
  CHECK(kernel(l.backward, "attn.qkv.lora_a.wgrad") != nullptr);
  CHECK(weight_grad_flops(l) == Approx(2.0 * 4096 * 16 * 69'632));  // only the adapters' dW: their forward's FLOPs
  // The base's weight gradients: the forward GEMMs' FLOPs, 2 x 4096 x 4096
  // x (6144 + 4096 + 28672 + 14336); the adapters' 2 x 4096 x 16 x (in +
  // out summed: 10240 + 8192 + 32768 + 18432 = 69,632), each forward once
  // and backward twice (dgrad and wgrad).
  const double base_wgrad = 2.0 * 4096 * 4096 * 53'248;
  const double adapters = 2.0 * 4096 * 16 * 69'632;
  CHECK(weight_grad_flops(b) == Approx(base_wgrad));
  CHECK(l.forward_flops() == Approx(b.forward_flops() + adapters));
  CHECK(l.backward_flops() == Approx(b.backward_flops() - base_wgrad + 2 * adapters));
  // Kept: each adapter's input replaces the base's (the same bf16 tensor
  // without sequence parallelism) and A's output, 4096 x 16 x 2 bytes, is new.
  CHECK(l.saved_bytes == b.saved_bytes + 4 * 4096 * 16 * 2);
  // Its modules (what DeepSpeed's ZeRO-3 gathers): the base's, frozen,
  // each GEMM's adapters, lora_A then lora_B, after the base modules of
  // that GEMM (the fused q, k, v GEMM's k_proj and v_proj too), as PEFT's
  // LoraLayer runs them (Note [Frozen weights under ZeRO-3]).
  REQUIRE(l.modules.size() == b.modules.size() + 8);
  std::int64_t frozen = 0, trained = 0;
  for (const ParamModule& m : l.modules) {
    for (std::int64_t t : m.tensors) (m.frozen ? frozen : trained) += t;
  }
  CHECK(frozen == b.params);
  CHECK(trained == l.params);
  std::vector<std::string> names;
  for (const ParamModule& m : l.modules) names.push_back(m.name + (m.frozen ? "" : "*"));
  CHECK(names == std::vector<std::string>{"input_layernorm", "attn.qkv", "attn.k_proj", "attn.v_proj", "attn.qkv.lora_a*",
                                          "attn.qkv.lora_b*", "attn.o_proj", "attn.o_proj.lora_a*", "attn.o_proj.lora_b*",
                                          "post_attention_layernorm", "mlp.gate_up", "mlp.up_proj", "mlp.gate_up.lora_a*",
                                          "mlp.gate_up.lora_b*", "mlp.down", "mlp.down.lora_a*", "mlp.down.lora_b*"});
  // A: 4096 x 16, B: 16 x 6144 over the fused q, k, v GEMM.
  CHECK(l.modules[4].tensors == std::vector<std::int64_t>{4096 * 16});
  CHECK(l.modules[5].tensors == std::vector<std::int64_t>{16 * 6144});
  // PEFT's own modules: each projection's adapters right after its weight.
  const auto hf = models::load_model("llama-3-8b", sets({"model.peft=lora", "model.lora_rank=16", "model.lora_targets=[q_proj,k_proj,v_proj]"}));
  std::vector<std::string> attn;
  const std::vector<Layer> hl = hf->layers(seq4096());
  for (const ParamModule& m : hl[1].modules) {
    if (m.name.rfind("attn.", 0) == 0) attn.push_back(m.name);
  }
  CHECK(attn == std::vector<std::string>{"attn.qkv", "attn.qkv.q_proj.lora_a", "attn.qkv.q_proj.lora_b", "attn.k_proj",
                                         "attn.qkv.k_proj.lora_a", "attn.qkv.k_proj.lora_b", "attn.v_proj", "attn.qkv.v_proj.lora_a",
                                         "attn.qkv.v_proj.lora_b", "attn.o_proj"});
  CHECK(l.signature == b.signature + ",lora=16:linear_qkv:linear_proj:linear_fc1:linear_fc2");
  // MFU's numerator: the base's less every frozen weight gradient (the
  // blocks' and the LM head's 2 x 4096 x 4096 x 128256), plus the adapters'
  // three passes in each of the 32 blocks.
  WorkloadShape mf;
  mf.seq_len = 4096;
  mf.model_flops = true;
  const double head_wgrad = 2.0 * 4096 * 4096 * 128'256;
  CHECK(lora->model_flops(mf) == Approx(base->model_flops(mf) - 32 * base_wgrad - head_wgrad + 32 * 3 * adapters));
}

TEST_CASE("LoRA under tensor and sequence parallelism: ParallelLinearAdapter's split and collectives (Note [LoRA])", "[lora]") {
  const auto base = models::load_model("llama-3-70b");
  const auto lora = models::load_model("llama-3-70b", sets({"model.peft=lora", "model.lora_rank=16", "model.lora_targets=[linear_qkv]"}));
  const Layer b = base->layers(seq4096(2))[1];
  const Layer l = lora->layers(seq4096(2))[1];
  // Column-parallel beside linear_qkv: A 8192 x 16/2, B 16 x 10240/2 a rank.
  CHECK(l.params == 8192 * 8 + 16 * 5120);
  CHECK(l.frozen_params == b.params);
  // Transformer Engine's norm-fused layer hands A its gathered input: A's
  // output (4096 x 16 bf16) gathered, B's input gradient all-reduced, both
  // plain NCCL calls.
  REQUIRE(l.tp_forward.size() == b.tp_forward.size() + 1);
  REQUIRE(l.tp_backward.size() == b.tp_backward.size() + 1);
  const LayerComm& gz = l.tp_forward.back();
  CHECK((gz.op == CollectiveOp::kAllGather && gz.bytes == 4096 * 16 * 2 && gz.serial));
  CHECK((l.tp_backward.back().op == CollectiveOp::kAllReduce && l.tp_backward.back().bytes == 4096 * 16 * 2 && l.tp_backward.back().serial));
  CHECK(std::none_of(b.tp_forward.begin(), b.tp_forward.end(), [](const LayerComm& c) { return c.serial; }));
  // Kept: the gathered input (4096 x 8192 x 2) in place of the base's
  // sequence shard (2048 x 8192 x 2), and A's output (4096 x 16 x 2).
  CHECK(l.saved_bytes == b.saved_bytes + 4096LL * 8192 * 2 - 2048LL * 8192 * 2 + 4096 * 16 * 2);
  // Where userbuffers gather the layer's input, the adapter gathers its own
  // (4096 x 8192 bf16) and reduce-scatters its gradient.
  WorkloadShape ub = seq4096(2);
  ub.tp_comm_overlap = true;
  const Layer bu = base->layers(ub)[1];
  const Layer lu = lora->layers(ub)[1];
  REQUIRE(lu.tp_forward.size() == bu.tp_forward.size() + 2);
  REQUIRE(lu.tp_backward.size() == bu.tp_backward.size() + 2);
  CHECK((lu.tp_forward[bu.tp_forward.size()].op == CollectiveOp::kAllGather && lu.tp_forward[bu.tp_forward.size()].bytes == 4096LL * 8192 * 2));
  CHECK((lu.tp_backward.back().op == CollectiveOp::kReduceScatter && lu.tp_backward.back().bytes == 4096LL * 8192 * 2));
  // Without sequence parallelism A's input gradient is all-reduced.
  WorkloadShape nosp = seq4096(2);
  nosp.sequence_parallel = false;
  const Layer ln = lora->layers(nosp)[1];
  const Layer bn = base->layers(nosp)[1];
  REQUIRE(ln.tp_backward.size() == bn.tp_backward.size() + 2);
  CHECK((ln.tp_backward.back().op == CollectiveOp::kAllReduce && ln.tp_backward.back().bytes == 4096LL * 8192 * 2));
  // Beside a row-parallel layer (linear_proj: 8192 -> 8192): A 8192/2 x 16
  // and B 16 x 8192/2 a rank; A's output all-reduced, B's gathered.
  const auto proj = models::load_model("llama-3-70b", sets({"model.peft=lora", "model.lora_rank=16", "model.lora_targets=[linear_proj]"}));
  const Layer lp = proj->layers(seq4096(2))[1];
  CHECK(lp.params == 4096 * 16 + 16 * 4096);
  REQUIRE(lp.tp_forward.size() == b.tp_forward.size() + 2);
  CHECK((lp.tp_forward[b.tp_forward.size()].op == CollectiveOp::kAllReduce && lp.tp_forward.back().op == CollectiveOp::kAllGather &&
         lp.tp_forward.back().bytes == 4096LL * 8192 * 2));
  // The rank divides over tp, as Bridge's column-parallel A divides it.
  const auto odd = models::load_model("llama-3-70b", sets({"model.peft=lora", "model.lora_rank=6"}));
  CHECK(odd->tp_error(2).empty());
  CHECK(odd->tp_error(4) == "LoRA's rank 6 does not split over 4 ranks (Megatron-Bridge's column-parallel adapter divides it)");
}

TEST_CASE("LoRA beside MLA's unsplit down-projections, Mamba-2's in_proj and out_proj, and targets a model lacks (Note [LoRA])", "[lora]") {
  // DeepSeek-V3's q_a_proj (7168 -> 1536), duplicated on every tp rank:
  // A and B column-parallel all the same, (7168 x 16 + 16 x 1536) / 2 a rank.
  const auto v3 = models::load_model("deepseek-v3", sets({"model.peft=lora", "model.lora_rank=16", "model.lora_targets=[linear_q_down_proj]"}));
  const Layer l = v3->layers(seq4096(2))[1];
  CHECK(l.params == (7168 * 16 + 16 * 1536) / 2);
  // Its multi-token prediction depth's embedding is the frozen table's: no scatter-add.
  const auto mtp = models::load_model("deepseek-v3", sets({"model.peft=lora", "model.lora_targets=[linear_q_down_proj]", "model.mtp_layers=1"}));
  const auto mtp_base = models::load_model("deepseek-v3", sets({"model.mtp_layers=1"}));
  auto scatters = [](const std::vector<Layer>& ls) {
    int n = 0;
    for (const Layer& x : ls) n += static_cast<int>(std::count_if(x.backward.begin(), x.backward.end(), [](const Kernel& k) { return k.kind == KernelKind::kEmbedding; }));
    return n;
  };
  CHECK(scatters(mtp_base->layers(seq4096())) == 2);  // the embedding's and the depth's
  CHECK(scatters(mtp->layers(seq4096())) == 0);
  // Nemotron 3 Nano's Mamba-2 layers: in_proj and out_proj, not linear_qkv.
  const auto base = models::load_model("nemotron-3-nano-30b-a3b");
  const auto mamba = models::load_model("nemotron-3-nano-30b-a3b", sets({"model.peft=lora", "model.lora_rank=8", "model.lora_targets=[in_proj]"}));
  const auto attention = models::load_model("nemotron-3-nano-30b-a3b", sets({"model.peft=lora", "model.lora_rank=8", "model.lora_targets=[linear_qkv]"}));
  std::int64_t in_proj = 0, qkv = 0;
  const auto bl = base->layers(seq4096());
  const auto ml = mamba->layers(seq4096());
  const auto al = attention->layers(seq4096());
  for (std::size_t i = 0; i < bl.size(); ++i) {
    const bool is_mamba = std::any_of(bl[i].forward.begin(), bl[i].forward.end(), [](const Kernel& k) { return k.name.rfind("mamba.", 0) == 0; });
    const Kernel* q = kernel(bl[i].forward, "attn.qkv");
    if (q == nullptr) continue;
    // 8 (in + out) beside each mixer's projection of h -> n columns.
    if (is_mamba) {
      in_proj += 8 * (q->k + q->n);
      CHECK(ml[i].params == 8 * (q->k + q->n));
      CHECK(al[i].params == 0);
    } else {
      qkv += 8 * (q->k + q->n);
      CHECK(ml[i].params == 0);
    }
  }
  CHECK(in_proj > 0);
  CHECK(qkv > 0);
  CHECK(mamba->trainable_parameters() == in_proj);
  CHECK(attention->trainable_parameters() == qkv);
  // A target the model lacks adapts nothing and says so; none matching is refused.
  const auto partly = models::load_model("llama-3-8b", sets({"model.peft=lora", "model.lora_targets=[linear_qkv,linear_q_down_proj]"}));
  REQUIRE(partly->notes().size() == 1);
  CHECK(partly->notes()[0] == "llama-3-8b: LoRA's linear_q_down_proj matches no layer of the model, which adapts none there (as "
                              "Megatron-Bridge's target_modules finds none)");
  CHECK(partly->trainable_parameters() == 32 * 32 * (4096 + 6144));  // rank 32, Bridge's default dim
}

TEST_CASE("LoRA: a fine-grained offload group spans its layer's adapters (Note [Offload modules])", "[lora]") {
  WorkloadShape w = seq4096();
  w.fused_kernels = true;
  w.offload_modules = kOffloadQkvLinear | kOffloadAttnProj;
  const auto base = models::load_model("llama-3-8b");
  const auto lora = models::load_model("llama-3-8b", sets({"model.peft=lora"}));
  const Layer b = base->layers(w)[1];
  const Layer l = lora->layers(w)[1];
  REQUIRE(l.offload_groups.size() == b.offload_groups.size());
  REQUIRE(l.offload_groups.size() == 2);
  auto names = [&](const OffloadGroup& g) {
    std::string out;
    for (std::size_t i = g.first; i < g.end; ++i) out += l.forward[i].name + " ";
    return out;
  };
  for (std::size_t i = 0; i < l.offload_groups.size(); ++i) {
    const OffloadGroup& g = l.offload_groups[i];
    // Each group spans its base kernels and, after each adapted GEMM, the
    // adapter's two: two more kernels a group.
    CHECK(g.end - g.first == b.offload_groups[i].end - b.offload_groups[i].first + 2);
    const std::string n = names(g);
    if (g.module == kOffloadQkvLinear) CHECK(n.find("attn.qkv attn.qkv.lora_a attn.qkv.lora_b") != std::string::npos);
    if (g.module == kOffloadAttnProj) CHECK(n.find("attn.o_proj attn.o_proj.lora_a attn.o_proj.lora_b") != std::string::npos);
  }
}

TEST_CASE("LoRA's memory: the frozen weights whole in bf16, the optimizer's states for the adapters alone (Note [Frozen weights])", "[lora]") {
  const auto lora = models::load_model("llama-3-8b", sets({"model.peft=lora", "model.lora_rank=16"}));
  const ClusterSpec c = load_cluster("dgx-h100", sets({"cluster.gpus_per_node=1"}));
  const auto spec = [](const std::vector<std::string>& extra) {
    std::vector<std::string> s = {"plan.dp=1", "plan.micro_batch=1", "plan.grad_accum=1", "plan.seq_len=4096", "plan.precision=bf16"};
    s.insert(s.end(), extra.begin(), extra.end());
    return load_plan("ddp", sets(s));
  };
  const Prediction p = predict(*lora, spec({}), c);
  REQUIRE(p.ranks.size() == 1);
  // Every weight in bf16: the base's 8,030,261,248 and the adapters' 35,651,584.
  CHECK(p.ranks[0].parameters == 2 * 8'065'912'832LL);
  // Adam's mixed-precision states (an fp32 master, two fp32 moments: K = 12,
  // Rajbhandari et al. 2020) of the adapters alone.
  CHECK(p.ranks[0].optimizer == 12 * 35'651'584LL);
  CHECK(p.trainable_parameters == 35'651'584);
  CHECK(format_table(p).find("8065.9M parameters, 35.65M trained") != std::string::npos);
  // FSDP1 and SHARD_GRAD_OP beside frozen weights are not modelled (Note
  // [Frozen weights under FSDP]): the rules table offers FSDP2's full_shard
  // and hybrid_shard on one stage alone, and resolve says why. DeepSpeed's
  // ZeRO-3 partitions a 16-bit or 4-bit base (Note [Frozen weights under
  // ZeRO-3]), not an 8-bit one.
  const PlanRules rules(*lora, c, 1);
  CHECK(rules.zero_stages(1) == std::vector<int>{0, 1, 2, 3});
  const auto int8 = models::load_model("llama-3-8b", sets({"model.peft=lora_int8", "model.lora_rank=16"}));
  CHECK(PlanRules(*int8, c, 1).zero_stages(1) == std::vector<int>{0, 1, 2});
  CHECK(rules.fsdp_modes(1) == std::vector<FsdpMode>{FsdpMode::kFullShard, FsdpMode::kNoShard, FsdpMode::kHybridShard});
  CHECK(rules.fsdp_modes(2) == std::vector<FsdpMode>{FsdpMode::kNoShard});
  CHECK_THAT(error_of([&] { predict(*int8, spec({"plan.zero_stage=3"}), c); }),
             Catch::Contains("plan.zero_stage: 3 with peft: lora_int8: DeepSpeed's ZeRO-3 does not partition bitsandbytes' 8-bit weights"));
  CHECK_THAT(error_of([&] { predict(*lora, spec({"plan.fsdp=full_shard"}), c); }),
             Catch::Contains("plan.fsdp_version: 1 with peft and fsdp: full_shard: FSDP1's flat parameters"));
  CHECK_THAT(error_of([&] { predict(*lora, spec({"plan.fsdp=shard_grad_op", "plan.fsdp_version=2"}), c); }),
             Catch::Contains("plan.fsdp: shard_grad_op with peft: sharding a fine-tune's frozen weights is modelled for FSDP2's full_shard"));
  CHECK_NOTHROW(predict(*lora, spec({"plan.zero_stage=2"}), c));
  const auto base = models::load_model("llama-3-8b");
  CHECK(PlanRules(*base, c, 1).zero_stages(1) == std::vector<int>{0, 1, 2, 3});
  // Under FP8 a frozen GEMM's weight keeps its FP8 copy and transpose (2
  // bytes an element on Hopper, Note [FP8 memory]) as a trained one does:
  // beside the base model's, the adapters add their bf16 weights (2 bytes),
  // their copies (2 more) and the scaling state of their 8 GEMMs a block
  // ((1024 + 2) x 5 x 4 bytes each, 32 blocks).
  const Prediction f8 = predict(*lora, spec({"plan.precision=fp8", "plan.recompute=full"}), c);
  const Prediction b8 = predict(*base, spec({"plan.precision=fp8", "plan.recompute=full"}), c);
  CHECK(f8.ranks[0].parameters - b8.ranks[0].parameters == 4 * 35'651'584LL + 32 * 8 * 20'520LL);
}

TEST_CASE("LoRA under FSDP2: the frozen base sharded and gathered with the adapters, their gradients alone reduced (Note [Frozen weights under FSDP])",
          "[lora][lowering]") {
  const auto lora = models::load_model("llama-3-8b", sets({"model.peft=lora", "model.lora_rank=16"}));
  const ClusterSpec c = load_cluster("dgx-h100");  // 8 GPUs
  const auto lowered = [&](const std::string& extra) {
    ResolvedPlan plan = resolve(parse_plan("dp: 8\nmicro_batch: 1\ngrad_accum: 1\nseq_len: 4096\nprecision: bf16\n"
                                           "fsdp: full_shard\nfsdp_version: 2\n" + extra,
                                           "p.yaml"),
                                *lora, c);
    const test::FixedCompute compute(1000);
    const test::FixedComm comm(1000);
    partition(plan, *lora, c, compute, comm);
    return lower(*lora, plan, c, CostModels{&compute, &comm});
  };
  const TaskGraph g = lowered("");
  // Llama-3-8B's block: q, k, v (4096 -> 6144), o (4096 -> 4096), the
  // gated MLP (3 x 4096 x 14336) and two norms: 218,112,000 frozen weights,
  // beside rank 16's 1,114,112 adapter weights (the first test case).
  // Each block is a unit gathered whole in bf16 before its forward and
  // again before its backward; the embedding, the final norm and the head
  // (2 x 128,256 x 4096 + 4096) are the root's, gathered once.
  const Bytes block = (218'112'000LL + 1'114'112) * 2;
  const Bytes root = (2LL * 128'256 * 4096 + 4096) * 2;
  std::map<std::string, Bytes> gathers, reductions;
  for (const Task& t : g.tasks) {
    if (t.kind != TaskKind::kCollective || t.rank != 0) continue;
    const std::string name = t.name.substr(0, t.name.find(" [mb"));
    if (t.op == CollectiveOp::kAllGather) gathers[name] = t.bytes;
    if (t.op == CollectiveOp::kReduceScatter) reductions[name] = t.bytes;
  }
  CHECK(gathers.size() == 1 + 2 * 32);
  CHECK(gathers.at("all_gather fwd root") == root);
  for (const auto& [name, bytes] : gathers) {
    if (name != "all_gather fwd root") CHECK(bytes == block);
  }
  // Only the adapters have gradients: one reduce-scatter a block, of its
  // 1,114,112 bf16 gradients (FSDP2's reduce dtype is the parameters'
  // unless set), and none of the root, which trains nothing.
  CHECK(reductions.size() == 32);
  for (const auto& [name, bytes] : reductions) CHECK(bytes == 1'114'112 * 2);
  // Each rank holds an eighth of every weight: the base's 8,030,261,248
  // and the adapters' 35,651,584, in bf16.
  const Bytes params = resident(g, MemCategory::kParameters), optimizer = resident(g, MemCategory::kOptimizer);
  CHECK(params == (8'030'261'248LL / 8 + 35'651'584 / 8) * 2);
  CHECK(optimizer == 12 * (35'651'584 / 8));
  // A unit of its own (fsdp_wrap: layers), the frozen embedding is gathered
  // for its forward and, fed token ids, never for a backward; every
  // gathered unit is freed, so the step ends holding what it began with.
  {
    ResolvedPlan plan = resolve(parse_plan("dp: 8\nmicro_batch: 1\ngrad_accum: 1\nseq_len: 4096\nprecision: bf16\n"
                                           "fsdp: full_shard\nfsdp_version: 2\nfsdp_wrap: layers\n",
                                           "p.yaml"),
                                *lora, c);
    const test::FixedCompute compute(1000);
    const test::FixedComm comm(1000);
    partition(plan, *lora, c, compute, comm);
    const TaskGraph lg = lower(*lora, plan, c, CostModels{&compute, &comm});
    std::map<std::string, Bytes> lgathers;
    for (const Task& t : lg.tasks) {
      if (t.kind == TaskKind::kCollective && t.rank == 0 && t.op == CollectiveOp::kAllGather) lgathers[t.name.substr(0, t.name.find(" [mb"))] = t.bytes;
    }
    CHECK(lgathers.at("all_gather fwd embed_tokens") == 128'256LL * 4096 * 2);
    CHECK(lgathers.count("all_gather bwd embed_tokens") == 0);
    CHECK(lgathers.count("all_gather bwd norm+lm_head") == 1);
    ExecOptions o;
    o.record_memory_timeline = true;
    const ExecResult r = execute(lg, o);
    const auto& timeline = r.memory[0].timeline;
    REQUIRE(!timeline.empty());
    CHECK(timeline.back().bytes[static_cast<int>(MemCategory::kParameters)] == timeline.front().bytes[static_cast<int>(MemCategory::kParameters)]);
  }
  // Offloaded, the shards live on the host (FSDP2's CPUOffloadPolicy).
  const Bytes offloaded = resident(lowered("offload_params: cpu\noffload_optimizer: cpu\n"), MemCategory::kParameters);
  CHECK(offloaded == 0);
}

TEST_CASE("LoRA under DeepSpeed ZeRO-3: the frozen base partitioned and gathered module by module, the adapters' gradients alone reduced (Note [Frozen weights under ZeRO-3])",
          "[lora][lowering][zero3]") {
  const auto lora = models::load_model("llama-3-8b", sets({"model.peft=lora", "model.lora_rank=16"}));
  const ClusterSpec c = load_cluster("dgx-h100");  // 8 GPUs
  // No tensor kept whole (persistence 0), nothing prefetched (bucket 0)
  // and each released after its use (reuse 0): every module's parameters
  // are gathered by its own hook for each of its passes.
  ResolvedPlan plan = resolve(parse_plan("dp: 8\nmicro_batch: 1\ngrad_accum: 1\nseq_len: 4096\nprecision: bf16\nzero_stage: 3\n"
                                         "stage3_param_persistence_threshold: 0\nstage3_max_reuse_distance: 0\n"
                                         "stage3_prefetch_bucket_size: 0\n",
                                         "p.yaml"),
                              *lora, c);
  REQUIRE(plan.zero3_modules());
  const test::FixedCompute compute(1000);
  const test::FixedComm comm(1000);
  partition(plan, *lora, c, compute, comm);
  const TaskGraph g = lower(*lora, plan, c, CostModels{&compute, &comm});
  Bytes gathered = 0, reduced = 0;
  for (const Task& t : g.tasks) {
    if (t.kind != TaskKind::kCollective || t.rank != 0) continue;
    if (t.op == CollectiveOp::kAllGather) gathered += t.bytes;
    if (t.op == CollectiveOp::kReduceScatter) reduced += t.bytes;
  }
  // Llama 3 8B's 8,030,261,248 frozen weights and rank 16's 35,651,584
  // adapters, in bf16: every one gathered for the forward and again for
  // the backward, but the embedding's 128,256 x 4096, fed token ids, whose
  // module has no backward hook.
  const std::int64_t all = 8'030'261'248LL + 35'651'584;
  CHECK(gathered == 2 * (2 * all - 128'256LL * 4096));
  // Only the adapters' bf16 gradients are reduce-scattered.
  CHECK(reduced == 2 * 35'651'584LL);
  // Each rank holds an eighth of every weight, and the optimizer states
  // (12 bytes: Note [Frozen weights]) of an eighth of the adapters.
  const Bytes params = resident(g, MemCategory::kParameters), optimizer = resident(g, MemCategory::kOptimizer);
  CHECK(params == (8'030'261'248LL / 8 + 35'651'584 / 8) * 2);
  CHECK(optimizer == 12 * (35'651'584 / 8));
  // QLoRA: a block's linear weights gathered at their NF4 bytes (112,513,024
  // with their scales, the QLoRA case below), beside its two norms and its
  // adapters in bf16; the embedding and the head (transformers leaves it
  // unquantized) at 2 bytes.
  {
    const auto q = models::load_model("llama-3-8b", sets({"model.peft=qlora", "model.lora_rank=16"}));
    ResolvedPlan qp = resolve(parse_plan("dp: 8\nmicro_batch: 1\ngrad_accum: 1\nseq_len: 4096\nprecision: bf16\nzero_stage: 3\n"
                                         "stage3_param_persistence_threshold: 0\nstage3_max_reuse_distance: 0\n"
                                         "stage3_prefetch_bucket_size: 0\n",
                                         "p.yaml"),
                              *q, c);
    partition(qp, *q, c, compute, comm);
    const TaskGraph qg = lower(*q, qp, c, CostModels{&compute, &comm});
    double qgathered = 0;
    for (const Task& t : qg.tasks) {
      if (t.kind == TaskKind::kCollective && t.rank == 0 && t.op == CollectiveOp::kAllGather) qgathered += static_cast<double>(t.bytes);
    }
    const double block = 112'513'024.0 + 2 * 4096 * 2 + 1'114'112 * 2;
    const double embedding = 128'256.0 * 4096 * 2, head = embedding + 4096 * 2;
    const double forward = 32 * block + embedding + head;
    CHECK(qgathered == Approx(2 * forward - embedding).epsilon(1e-6));
  }
  // An adapter under expert parallelism is refused in one line.
  const auto moe = models::load_model("mixtral-8x7b", sets({"model.peft=lora", "model.lora_rank=8", "model.lora_targets=[linear_qkv]"}));
  CHECK_THAT(error_of([&] {
               resolve(parse_plan("dp: 8\nep: 8\nmicro_batch: 1\nseq_len: 4096\nprecision: bf16\nzero_stage: 3\n", "p.yaml"), *moe, c);
             }),
             Catch::Contains("zero_stage: 3 with peft and ep = 8"));
}

TEST_CASE("QLoRA: the blocks' linear weights in NF4, dequantized before each GEMM and each input gradient (Note [QLoRA])", "[lora]") {
  const std::vector<std::string> all = {"model.peft=qlora", "model.lora_rank=16",
                                        "model.lora_targets=[q_proj,k_proj,v_proj,o_proj,gate_proj,up_proj,down_proj]"};
  const auto q = models::load_model("llama-3-8b", sets(all));
  CHECK(q->name() == "llama-3-8b+qlora16");
  CHECK(q->trainable_parameters() == 41'943'040);
  const std::vector<Layer> ql = q->layers(seq4096());
  // A block's linear weights: q, k, v (4096 x 6144), o (4096 x 4096), gate
  // and up (4096 x 28672), down (14336 x 4096): 218,103,808, its two norms
  // (8,192) left in bf16; the embedding and the LM head stay bf16 too.
  CHECK(ql[1].frozen_quantized == 218'103'808);
  CHECK(ql[0].frozen_quantized == 0);
  CHECK(ql.back().frozen_quantized == 0);
  // NF4 with double-quantized scales: 4 bits, an int8 absmax a block of 64
  // and an fp32 scale a block of 256 of those: 109,051,904 + 3,407,872 +
  // 53,248 = 112,513,024 bytes a block.
  CHECK(ql[1].frozen_quantized_bytes == 112'513'024);
  CHECK(ql[1].frozen_quantized_bits == 4);
  // Each linear GEMM dequantizes its weight first: read NF4 (12,582,912 +
  // 393,216 + 6,144 bytes for q, k, v's 25,165,824), write bf16.
  const Kernel* d = kernel(ql[1].forward, "attn.qkv.dequant");
  REQUIRE(d != nullptr);
  CHECK(d->bytes == 12'982'272 + 2 * 25'165'824);
  CHECK(d->kind == KernelKind::kElementwise);
  const auto at = [](const std::vector<Kernel>& ks, const std::string& name) {
    return std::find_if(ks.begin(), ks.end(), [&](const Kernel& k) { return k.name == name; }) - ks.begin();
  };
  CHECK(at(ql[1].forward, "attn.qkv.dequant") + 1 == at(ql[1].forward, "attn.qkv"));
  CHECK(at(ql[1].backward, "mlp.down.dequant") + 1 == at(ql[1].backward, "mlp.down.dgrad"));
  int dequants = 0;
  for (const auto* ks : {&ql[1].forward, &ql[1].backward}) {
    for (const Kernel& k : *ks) dequants += k.name.ends_with(".dequant") ? 1 : 0;
  }
  CHECK(dequants == 2 * 4);  // attn.qkv, attn.o_proj, mlp.gate_up, mlp.down, each twice
  // On one GPU: 32 NF4 blocks, their norms, the embedding, final norm and
  // head (2 x 128,256 x 4096 + 4096) and the adapters in bf16.
  const ClusterSpec one = load_cluster("dgx-h100", sets({"cluster.gpus_per_node=1"}));
  const std::string plan = "dp: 1\nmicro_batch: 1\ngrad_accum: 1\nseq_len: 4096\nprecision: bf16\n";
  const Bytes blocks = 32 * (112'513'024LL + 8192 * 2), rest = (2LL * 128'256 * 4096 + 4096) * 2, adapters = 41'943'040LL * 2;
  CHECK(resident_params(*q, plan, one) == blocks + rest + adapters);
  // FSDP2 shards them and gathers the NF4 bytes as they are (torchao's
  // fsdp_pre_all_gather): an eighth each on 8 GPUs.
  const ClusterSpec eight = load_cluster("dgx-h100");
  CHECK(resident_params(*q, "dp: 8\nmicro_batch: 1\ngrad_accum: 1\nseq_len: 4096\nprecision: bf16\nfsdp: full_shard\nfsdp_version: 2\n", eight) ==
        (blocks + rest) / 8 + adapters / 8);
  // bitsandbytes' and torchao's 4-bit weights are whole and compute in 16 bits.
  CHECK_THAT(q->tp_error(2), Catch::Contains("QLoRA's 4-bit base (bitsandbytes' Linear4bit, torchao's NF4Tensor) is not split"));
  CHECK_THAT(error_of([&] { resolve(parse_plan("dp: 1\nseq_len: 4096\nprecision: fp8\n", "p.yaml"), *q, one); }),
             Catch::Contains("precision: fp8: a quantized base (QLoRA's NF4, LLM.int8) is dequantized to its compute dtype"));
  CHECK_FALSE(PlanRules(*q, one, 1).precisions().back() == Precision::kFp8);
  const auto moe = models::load_model("mixtral-8x7b", sets({"model.peft=qlora"}));
  CHECK_THAT(moe->ep_error(2), Catch::Contains("a quantized base's experts (bitsandbytes', torchao's) are not spread over expert parallelism"));
  CHECK(moe->ep_error(1).empty());
}

TEST_CASE("An 8-bit LoRA: LLM.int8 weights with a scale an output row, dequantized as QLoRA's (Note [8-bit base])", "[lora]") {
  const std::vector<std::string> all = {"model.peft=lora_int8", "model.lora_rank=16",
                                        "model.lora_targets=[q_proj,k_proj,v_proj,o_proj,gate_proj,up_proj,down_proj]"};
  const auto q = models::load_model("llama-3-8b", sets(all));
  CHECK(q->name() == "llama-3-8b+lora16-int8");
  CHECK(q->trainable_parameters() == 41'943'040);
  const std::vector<Layer> ql = q->layers(seq4096());
  // A block's 218,103,808 linear weights a byte each, and bitsandbytes' SCB,
  // an fp32 absmax a row of each output: q, k, v 6,144 rows, o 4,096, gate
  // and up 28,672, down 4,096: 4 x 43,008 = 172,032 bytes.
  CHECK(ql[1].frozen_quantized == 218'103'808);
  CHECK(ql[1].frozen_quantized_bytes == 218'103'808 + 172'032);
  CHECK(ql.back().frozen_quantized == 0);
  const Kernel* d = kernel(ql[1].forward, "attn.qkv.dequant");
  REQUIRE(d != nullptr);
  CHECK(d->bytes == 25'165'824 + 4 * 6144 + 2 * 25'165'824);
  CHECK(ql[1].signature.find(",lora8=16") != std::string::npos);
  // On one GPU: the int8 blocks and their norms, the rest and the adapters in bf16.
  const ClusterSpec one = load_cluster("dgx-h100", sets({"cluster.gpus_per_node=1"}));
  CHECK(resident_params(*q, "dp: 1\nmicro_batch: 1\ngrad_accum: 1\nseq_len: 4096\nprecision: bf16\n", one) ==
        32 * (218'275'840LL + 8192 * 2) + (2LL * 128'256 * 4096 + 4096) * 2 + 41'943'040LL * 2);
  CHECK(ql[1].frozen_quantized_bits == 8);
  // FSDP wraps no integer tensor, sharded or not; nor are they split or in FP8.
  const ClusterSpec eight = load_cluster("dgx-h100");
  CHECK_THAT(error_of([&] { resolve(parse_plan("dp: 8\nseq_len: 4096\nprecision: bf16\nfsdp: full_shard\nfsdp_version: 2\n", "p.yaml"), *q, eight); }),
             Catch::Contains("plan.fsdp: full_shard with peft: lora_int8: FSDP does not wrap bitsandbytes' 8-bit weights"));
  CHECK_THAT(error_of([&] { resolve(parse_plan("dp: 8\nseq_len: 4096\nprecision: bf16\nfsdp: no_shard\n", "p.yaml"), *q, eight); }),
             Catch::Contains("plan.fsdp: no_shard with peft: lora_int8"));
  CHECK(PlanRules(*q, eight, 8).fsdp_modes(1).empty());
  CHECK_THAT(q->tp_error(2), Catch::Contains("an 8-bit base (bitsandbytes' Linear8bitLt) is not split"));
  CHECK_THAT(error_of([&] { resolve(parse_plan("dp: 1\nseq_len: 4096\nprecision: fp8\n", "p.yaml"), *q, one); }),
             Catch::Contains("a quantized base (QLoRA's NF4, LLM.int8) is dequantized"));
}

TEST_CASE("LoRA over an fp32 base under bf16 autocast: 4 bytes a frozen weight, cast before each GEMM, the copy kept (Note [fp32 base])", "[lora]") {
  const std::string targets = "model.lora_targets=[q_proj,k_proj,v_proj,o_proj,gate_proj,up_proj,down_proj]";
  const auto q = models::load_model("llama-3-8b", sets({"model.peft=lora_fp32", "model.lora_rank=16", targets}));
  const auto b16 = models::load_model("llama-3-8b", sets({"model.peft=lora", "model.lora_rank=16", targets}));
  CHECK(q->name() == "llama-3-8b+lora16-fp32");
  CHECK(q->trainable_parameters() == 41'943'040);
  const std::vector<Layer> ql = q->layers(seq4096());
  const std::vector<Layer> bl = b16->layers(seq4096());
  // Every frozen weight in 4 bytes: a block's 218,103,808 linear weights and
  // its two norms (8,192); the embedding's 128,256 x 4096 too.
  CHECK(ql[1].frozen_quantized == 218'112'000);
  CHECK(ql[1].frozen_quantized_bytes == 4 * 218'112'000LL);
  CHECK(ql[1].frozen_quantized_bits == 32);
  CHECK(ql[0].frozen_quantized == 525'336'576);
  // Autocast casts q, k, v's 25,165,824 weights before their GEMM: read 4
  // bytes each, write 2; once a GEMM in the forward, none in the backward,
  // which takes the saved copy.
  const Kernel* c = kernel(ql[1].forward, "attn.qkv.cast");
  REQUIRE(c != nullptr);
  CHECK(c->bytes == 6 * 25'165'824LL);
  int casts = 0;
  for (const Kernel& k : ql[1].forward) casts += k.name.ends_with(".cast") ? 1 : 0;
  for (const Kernel& k : ql[1].backward) casts += k.name.ends_with(".cast") ? 10 : 0;
  CHECK(casts == 4);  // attn.qkv, attn.o_proj, mlp.gate_up, mlp.down
  // Each GEMM keeps its bf16 copy for its input's gradient: 2 bytes a
  // linear weight above a 16-bit base's, the head's 128,256 x 4096 too.
  CHECK(ql[1].saved_bytes - bl[1].saved_bytes == 2 * 218'103'808LL);
  CHECK(ql.back().saved_bytes - bl.back().saved_bytes == 2 * 525'336'576LL);
  CHECK(ql[1].signature.find(",lora32=16") != std::string::npos);
  // On one GPU: all 8,030,261,248 weights in fp32, the adapters in bf16.
  const ClusterSpec one = load_cluster("dgx-h100", sets({"cluster.gpus_per_node=1"}));
  CHECK(resident_params(*q, "dp: 1\nmicro_batch: 1\ngrad_accum: 1\nseq_len: 4096\nprecision: bf16\n", one) ==
        4 * 8'030'261'248LL + 2 * 41'943'040LL);
  // Sharded, the base would be gathered in 16 bits: refused; nor in fp32 or fp8.
  const ClusterSpec eight = load_cluster("dgx-h100");
  CHECK_THAT(error_of([&] { resolve(parse_plan("dp: 8\nseq_len: 4096\nprecision: bf16\nfsdp: full_shard\nfsdp_version: 2\n", "p.yaml"), *q, eight); }),
             Catch::Contains("plan.fsdp: full_shard with peft: lora_fp32: a sharded fp32 base is gathered in 16 bits"));
  CHECK_THAT(error_of([&] { resolve(parse_plan("dp: 8\nseq_len: 4096\nprecision: bf16\nzero_stage: 3\n", "p.yaml"), *q, eight); }),
             Catch::Contains("plan.zero_stage: 3 with peft: lora_fp32"));
  CHECK(PlanRules(*q, eight, 8).zero_stages(1) == std::vector<int>{0});
  CHECK(PlanRules(*q, eight, 8).fsdp_modes(1) == std::vector<FsdpMode>{FsdpMode::kNoShard});
  CHECK_THAT(error_of([&] { resolve(parse_plan("dp: 1\nseq_len: 4096\nprecision: fp32\n", "p.yaml"), *q, one); }),
             Catch::Contains("precision: fp32: an fp32 base (peft: lora_fp32) is cast to its 16-bit compute dtype"));
  CHECK_THAT(error_of([&] { resolve(parse_plan("dp: 1\nseq_len: 4096\nprecision: fp8\n", "p.yaml"), *q, one); }),
             Catch::Contains("precision: fp8: an fp32 base"));
  // DeepSpeed casts it to 16 bits at every stage; DDP keeps it whole on each rank.
  CHECK_THAT(error_of([&] { resolve(parse_plan("dp: 8\nseq_len: 4096\nprecision: bf16\nzero_stage: 2\n", "p.yaml"), *q, eight); }),
             Catch::Contains("plan.zero_stage: 2 with peft: lora_fp32: DeepSpeed casts the module to its 16-bit type at every stage"));
  CHECK_NOTHROW(resolve(parse_plan("dp: 8\nseq_len: 4096\nprecision: bf16\n", "p.yaml"), *q, eight));
}

TEST_CASE("LoRA's keys: refused where they contradict or name no layer of the model", "[lora][errors]") {
  CHECK_THAT(error_of([] { models::load_model("llama-3-8b", sets({"model.lora_rank=8"})); }),
             Catch::Contains("model.lora_rank: is LoRA's; set peft: lora with it (valid peft: none, lora, qlora, lora_int8, lora_fp32)"));
  CHECK_THAT(error_of([] { models::load_model("llama-3-8b", sets({"model.peft=lora", "model.lora_targets=[linear_q_down_proj]"})); }),
             Catch::Contains("model.lora_targets: linear_q_down_proj match no linear layer of this model LoRA adapts; valid: linear_qkv, linear_proj, linear_fc1, linear_fc2"));
  CHECK_THAT(error_of([] { models::load_model("llama-3-8b", sets({"model.peft=dora"})); }), Catch::Contains("none, lora"));
  CHECK_THAT(error_of([] { models::load_model("llama-3-8b", sets({"model.peft=lora", "model.lora_rank=0"})); }), Catch::Contains("lora_rank"));
  // MLA's projections are their own modules (DeepSeek's recipes name them).
  const auto v3 = models::load_model("deepseek-v3", sets({"model.peft=lora", "model.lora_targets=[linear_q_down_proj,linear_kv_up_proj]"}));
  CHECK(v3->trainable_parameters() > 0);
}

TEST_CASE("Megatron-Bridge's peft section: LoRA's dim and target_modules as the model's keys (Note [Megatron-Bridge configs])", "[lora][framework]") {
  const std::string path = std::string(DTSIM_SOURCE_DIR) + "/configs/frameworks/megatron-bridge/llama3_70b_lora_run_config.yaml";
  const FrameworkConfig fc = read_megatron_bridge_config(path);
  auto value = [&](const std::string& key) {
    for (const auto& o : fc.overrides) {
      if (o.section == "model" && o.path == key) return o.value;
    }
    return std::string("<absent>");
  };
  CHECK(value("peft") == "lora");
  CHECK(value("lora_rank") == "16");
  CHECK(value("lora_targets") == "[linear_qkv]");
  for (const auto& u : fc.unmodelled) CHECK(u.rfind("peft", 0) != 0);
  // The user's model keeps the config's fine-tune.
  const FrameworkScenario s = apply_framework_config(fc, "llama-3-70b", {});
  CHECK(std::count_if(s.overrides.begin(), s.overrides.end(), [](const Override& o) { return o.section == "model"; }) == 3);
  // Other schemes are listed as not modelled.
  const FrameworkConfig dora = parse_megatron_bridge_config(
      "model:\n  num_layers: 2\n  hidden_size: 64\n  num_attention_heads: 4\ntrain:\n  micro_batch_size: 1\n  global_batch_size: 8\npeft:\n  _target_: megatron.bridge.peft.dora.DoRA\n  dim: 8\n",
      "rc.yaml");
  CHECK(std::count_if(dora.unmodelled.begin(), dora.unmodelled.end(), [](const std::string& u) {
          return u.rfind("peft=megatron.bridge.peft.dora.DoRA (only LoRA is modelled", 0) == 0;
        }) == 1);
  CHECK(std::none_of(dora.overrides.begin(), dora.overrides.end(), [](const Override& o) { return o.path == "peft"; }));
  CHECK_THAT(error_of([] { parse_megatron_bridge_config("train:\n  micro_batch_size: 1\n  global_batch_size: 8\npeft:\n  _target_: megatron.bridge.peft.lora.LoRA\n  target_modules: linear_qkv\n", "rc.yaml"); }),
             Catch::Contains("rc.yaml:6: peft.target_modules: expected a list of module names, got 'linear_qkv'"));
  // A rank that is not an integer, named at its line.
  const std::string head = "train:\n  micro_batch_size: 1\n  global_batch_size: 8\npeft:\n  _target_: megatron.bridge.peft.lora.LoRA\n";
  CHECK_THAT(error_of([&] { parse_megatron_bridge_config(head + "  dim: [4]\n", "rc.yaml"); }),
             Catch::Contains("rc.yaml:6: peft.dim: expected LoRA's rank, an integer, got a list"));
  const FrameworkConfig word = parse_megatron_bridge_config(head + "  dim: abc\n", "rc.yaml");
  CHECK_THAT(error_of([&] { models::load_model("llama-3-8b", word.overrides); }),
             Catch::Contains("rc.yaml:6 (peft.dim): model.lora_rank: 'abc' is not an integer"));
}
