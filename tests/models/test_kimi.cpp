// Kimi Linear and Kimi K3: Kimi Delta Attention, K3's gated latent
// attention, SiTU, the latent experts' norm and Block Attention Residuals,
// each against counts derived by hand from Megatron-Bridge's modules
// (Note [Kimi Delta Attention], Note [Kimi K3], Note [Attention residuals]
// in models/src/llama.cpp).
#include <catch2/catch.hpp>

#include "model_test_util.hpp"

#include <algorithm>
#include <fstream>
#include <string>
#include <vector>

#include "dtsim/models/models.hpp"
#include "dtsim/sim/config_node.hpp"
#include "dtsim/sim/error.hpp"

using namespace dtsim;
using namespace dtsim::models;
using dtsim::test::error_of;
using dtsim::test::find_kernel;
using dtsim::test::tokens;
using dtsim::test::write_file;

namespace {

std::ptrdiff_t index_of(const std::vector<sim::Kernel>& ks, const std::string& name) {
  const auto it = std::find_if(ks.begin(), ks.end(), [&](const sim::Kernel& k) { return k.name == name; });
  return it == ks.end() ? -1 : it - ks.begin();
}

// Two blocks: Kimi Delta Attention (2 heads of 16, 4 taps), then attention
// (4 heads of 16); h 64, SwiGLU 128, vocab 256.
const char* const kKdaYaml =
    "family: llama\nlayers: 2\nhidden: 64\nheads: 4\nkv_heads: 4\nhead_dim: 16\nintermediate: 128\nvocab: 256\nseq_len: 256\n"
    "layer_mixers: L*\nkda: true\nlinear_key_heads: 2\nlinear_value_heads: 2\nlinear_key_dim: 16\nlinear_value_dim: 16\nlinear_conv_kernel: 4\n";

// Four plain blocks with Block Attention Residuals every 2 layers.
const char* const kResYaml =
    "family: llama\nlayers: 4\nhidden: 64\nheads: 4\nkv_heads: 4\nintermediate: 128\nvocab: 256\nseq_len: 256\nattn_res_block: 2\n";

}  // namespace

TEST_CASE("Kimi Delta Attention: parameters, kept bytes and FLOPs of a small hybrid by hand (Note [Kimi Delta Attention])", "[llama][kda]") {
  test::TempDir dir("kda");
  const std::string yaml = write_file(dir, "kda.yaml", kKdaYaml);
  const auto m = load_model(yaml);
  // KDA (H 2, d 16, P = 32): q, k, v 3 x 64 x 32, b_proj 64 x 2, f_a_proj
  // 64 x 16, f_b_proj 16 x 32, g_proj 64 x 32, three convolutions 3 x 32
  // x 4, A_log 2, dt_bias 32, o_norm 16, o_proj 32 x 64.
  const std::int64_t kda = 6144 + 128 + 1024 + 512 + 2048 + 384 + 2 + 32 + 16 + 2048;
  CHECK(kda == 12'338);
  // Each block: two norms of 64 and a SwiGLU 3 x 64 x 128; attention q, k,
  // v, o 4 x 64 x 64; embedding and head 2 x 256 x 64, the final norm.
  const std::int64_t rest = 128 + 3 * 64 * 128, attention = 4 * 64 * 64;
  CHECK(m->parameters() == kda + attention + 2 * rest + 2 * 256 * 64 + 64);
  CHECK(m->parameters() == 110'962);
  const auto layers = m->layers(tokens(128));
  REQUIRE(layers.size() == 4);
  CHECK(layers[1].signature.rfind("llama.block:kda=1,h=64,kh=2,dk=16,ck=4,f=128,", 0) == 0);
  CHECK(layers[2].signature.rfind("llama.block:h=64,a=4,kv=4,d=16,f=128,", 0) == 0);
  CHECK(layers[1].params == kda + rest);
  // Tensors the optimizer steps one by one: KDA's 14 (q, k, v, b, f_a,
  // f_b, g, three convolutions, A_log, dt_bias, o_norm, o_proj), two
  // norms, gate, up and down.
  CHECK(layers[1].param_tensors == 14 + 2 + 3);
  // Kimi Linear's low-rank output gate (g_a_proj 64 x 8, g_b_proj 8 x 32)
  // in place of g_proj's 64 x 32.
  std::vector<sim::Override> low_rank{sim::parse_override("model.kda_gate_rank=8")};
  CHECK(load_model(yaml, low_rank)->parameters() == 110'962 - 2048 + 512 + 256);
  // What the KDA layer keeps, 128 tokens of 2 bytes, composite norms:
  //   two RMSNorms: x.float(), the normed fp32 x (4 + 2 an element of
  //     8192) and rsqrt a row (4 x 128), each               2 x 49,664
  //   their GEMMs' inputs (2 x 8192 each)                    2 x 16,384
  //   the convolutions' inputs, q, k, v (3 x 2 x 4096)           24,576
  //   f_b_proj's input, f_a_proj's output (2 x 128 x 16)          4,096
  //   the rule: normed q, k and v (3 x 2 x 4096), the raw decay and
  //     its fp32 cumsum ((2 + 4) x 4096), two rstds and beta in
  //     fp32 (12 x 256 rows), Aqk and Akk (2 x 2 x 256 x 64)    117,760
  //   o_norm: its two inputs (2 x 2 x 4096) and rstd (4 x 256)   17,408
  //   o_proj's input (2 x 4096)                                   8,192
  //   SwiGLU: gate, up, silu's output, down's input (8 x 16,384) 131,072
  CHECK(layers[1].saved_bytes == 2 * 49'664 + 2 * 16'384 + 24'576 + 4'096 + 117'760 + 17'408 + 8'192 + 131'072);
  CHECK(layers[1].saved_bytes == 435'200);
  // The projections as the GEMMs Bridge runs: q, k, v together, beta, the
  // decay's two, the output gate.
  const sim::Kernel* qkv = find_kernel(layers[1].forward, "attn.qkv");
  REQUIRE(qkv != nullptr);
  CHECK((qkv->m == 128 && qkv->n == 96 && qkv->k == 64));
  const sim::Kernel* f_a = find_kernel(layers[1].forward, "attn.f_a_proj");
  const sim::Kernel* f_b = find_kernel(layers[1].forward, "attn.f_b_proj");
  REQUIRE(f_a != nullptr);
  REQUIRE(f_b != nullptr);
  CHECK((f_a->n == 16 && f_a->k == 64 && f_b->n == 32 && f_b->k == 16));
  // The rule's forward: 256 rows (token and head) of 2 x 64 x (5 x 16) + 6
  // x 16 x 16 (Gated DeltaNet's with d-wide keys and values), and the
  // decay applied to q and k, 4 an element of 4096.
  const sim::Kernel* core = find_kernel(layers[1].forward, "kda.core");
  REQUIRE(core != nullptr);
  CHECK(core->flops == Approx(256.0 * (2 * 64 * 80 + 6 * 256) + 4 * 4096));
  CHECK(core->flops == Approx(3'031'040.0));
  // tp splits the heads; cp is refused as KimiK3Attention refuses it.
  CHECK(m->tp_error(2).empty());
  CHECK(m->tp_error(4).find("2 Kimi Delta Attention heads (linear_attn_config.num_heads) are not divisible by tp=4") != std::string::npos);
  // ZeRO-3 gathers KimiK3Attention's modules: they hold the layer's
  // parameters, at tp 1 and at tp 2.
  for (const int tp : {1, 2}) {
    sim::WorkloadShape w = tokens(128);
    w.tp = tp;
    const sim::Layer kl = m->layers(w)[1];
    std::int64_t held = 0;
    for (const auto& module : kl.modules) {
      for (const std::int64_t n : module.tensors) held += n;
    }
    INFO("tp " << tp);
    CHECK(held == kl.params);
    CHECK(static_cast<int>(kl.modules.size()) >= 10);
  }
  CHECK(m->cp_error(1).empty());
  CHECK(m->cp_error(2).find("Kimi Delta Attention takes no context parallelism in Megatron-Bridge") != std::string::npos);
  // Keys that contradict it are refused at their key.
  std::vector<sim::Override> no_letters{sim::parse_override("model.layer_mixers=\"**\"")};
  CHECK(error_of([&] { load_model(yaml, no_letters); }).find("model.kda: true needs layer_mixers with L layers") != std::string::npos);
  std::vector<sim::Override> uneven{sim::parse_override("model.linear_value_heads=4")};
  CHECK(error_of([&] { load_model(yaml, uneven); }).find("q, k and v have the same heads and width") != std::string::npos);
  std::vector<sim::Override> rank_alone{sim::parse_override("model.kda=false"), sim::parse_override("model.kda_gate_rank=8")};
  CHECK(error_of([&] { load_model(yaml, rank_alone); }).find("model.kda_gate_rank: is read only with kda: true") != std::string::npos);
  std::vector<sim::Override> bad_letter{sim::parse_override("model.layer_mixers=LX")};
  CHECK(error_of([&] { load_model(yaml, bad_letter); })
            .find("letter 2 is 'X'; valid: M (a Mamba-2 block), L (a linear-attention block) or * (an attention block)") != std::string::npos);
}

TEST_CASE("Block Attention Residuals: aggregates, kept bytes, outputs and pipeline payloads by hand (Note [Attention residuals])",
          "[llama][attn_res]") {
  test::TempDir dir("attn-res");
  const std::string yaml = write_file(dir, "res.yaml", kResYaml);
  const auto m = load_model(yaml);
  std::vector<sim::Override> plain_res{sim::parse_override("model.attn_res_block=0")};
  const auto plain = load_model(yaml, plain_res);
  // Each layer's two score norms and projections (4 x 64), the last
  // layer's output pair (2 x 64).
  CHECK(m->parameters() - plain->parameters() == 4 * 4 * 64 + 2 * 64);
  const auto with = m->layers(tokens(128)), without = plain->layers(tokens(128));
  REQUIRE(with.size() == 6);
  // Layer i reads ceil(i / 2) snapshots and layers 0 and 2 write one; an
  // aggregate over R rows of 128 x 64 keeps the fp32 rows and the normed
  // rows (8 R x 8192) and a rsqrt and weight a row (8 R x 128): 66,560 R.
  //   layer 0: the MLP's over its snapshot and the sum (R 2)
  //   layer 1: attention's and the MLP's over 1 + 1 (R 2 each)
  //   layer 2: attention's over 1 + 1, the MLP's over 2 + 1 after writing
  //   layer 3: attention's, the MLP's and the output's over 2 + 1
  const Bytes row = 66'560;
  const std::vector<Bytes> extra{2 * row, 4 * row, 5 * row, 9 * row};
  for (int i = 0; i < 4; ++i) {
    INFO("layer " << i);
    const sim::Layer& a = with[static_cast<std::size_t>(i + 1)];
    const sim::Layer& b = without[static_cast<std::size_t>(i + 1)];
    CHECK(a.saved_bytes - b.saved_bytes == extra[static_cast<std::size_t>(i)]);
    CHECK(a.params - b.params == (i == 3 ? 6 : 4) * 64);
    CHECK((find_kernel(a.forward, "attn_res.attn") != nullptr) == (i > 0));
    CHECK((find_kernel(a.forward, "attn_res.out") != nullptr) == (i == 3));
    // The MLP's aggregate runs just before its norm, its backward after the norm's.
    CHECK(index_of(a.forward, "attn_res.mlp") + 1 == index_of(a.forward, "post_attention_layernorm"));
    CHECK(index_of(a.backward, "attn_res.mlp.bwd") == index_of(a.backward, "post_attention_layernorm.bwd") + 1);
  }
  // Layer 1's attention aggregate, R 2 over n = 16,384 elements and 8,192
  // out: reads (2 x 2 + 28) n + 4 x 8192, writes (2 + 20) n + 6 x 8192.
  const sim::Kernel* agg = find_kernel(with[2].forward, "attn_res.attn");
  REQUIRE(agg != nullptr);
  CHECK(agg->bytes == 32 * 16'384 + 4 * 8'192 + 22 * 16'384 + 6 * 8'192);
  // What a layer hands on (e t h = 16,384 bytes): its sum, and a writing
  // layer's new bank; a stage ending after it sends the sum and the bank
  // (1 + snapshots after it); a stage starting at it keeps the received
  // tensor (1 + snapshots before it), and under full recompute the bank it
  // unpacks too unless it writes a new one at once.
  const Bytes eth = 16'384;
  // The last layer hands on its output aggregate alone (e t h).
  const std::vector<Bytes> output{2 * eth, eth, 3 * eth, eth}, boundary{2 * eth, 2 * eth, 3 * eth, 0}, sent{2 * eth, 2 * eth, 3 * eth, eth},
      kept{0, 2 * eth, 2 * eth, 3 * eth}, checkpoint{0, 3 * eth, 2 * eth, 5 * eth};
  for (std::size_t i = 0; i < 4; ++i) {
    INFO("layer " << i);
    CHECK(with[i + 1].output_bytes == output[i]);
    CHECK(with[i + 1].boundary_bytes == boundary[i]);
    CHECK(with[i + 1].sent_bytes() == sent[i]);
    CHECK(with[i + 1].entry_kept_bytes == kept[i]);
    CHECK(with[i + 1].entry_checkpoint_bytes == checkpoint[i]);
    CHECK(without[i + 1].sent_bytes() == eth);
  }
  // Signatures carry the bank's state, so calibration tells the layers apart.
  CHECK(with[4].signature.find(",ar=2,arr=2,arl=1") != std::string::npos);
  CHECK(with[3].signature.find(",ar=2,arr=1,arw=1") != std::string::npos);
  // It replaces the residual: hyper-connections and single-part layers contradict it.
  std::vector<sim::Override> gemma{sim::parse_override("model.gemma_norms=true")};
  CHECK(error_of([&] { load_model(yaml, gemma); }).find("model.attn_res_block: Block Attention Residuals mix before the sublayers' pre-norms") !=
        std::string::npos);
  std::vector<sim::Override> streams{sim::parse_override("model.hc_mult=4")};
  CHECK(error_of([&] { load_model(yaml, streams); }).find("model.attn_res_block: Block Attention Residuals replace the residual; they "
                                                           "contradict hc_mult") != std::string::npos);
}

TEST_CASE("Kimi K3 and Kimi Linear: parameters by hand, built in and read from their configs (Note [Kimi K3])", "[llama][kda][hf]") {
  // Kimi K3 (h 7168): a KDA layer (H 96, d 128, P 12,288) as in the KDA
  // test above; a latent attention layer: q_a 7168 x 1536 and its norm,
  // q_b 1536 x 96 x 192, kv_a 7168 x 576 and its norm 512, kv_b 512 x 96 x
  // 256, g_proj and o_proj 7168 x 12,288 each; the dense SwiGLU 3 x 7168 x
  // 33,792; a latent MoE layer: the router 7168 x 896, fc1/fc2_latent_proj
  // 2 x 7168 x 3584 and the latent's norm, 896 experts of 3 x 3584 x 3072,
  // the shared 3 x 7168 x 6144. Every layer two norms and AttnRes' four h;
  // the last two h more; embedding and head 2 x 163,840 x 7168, final norm.
  const std::int64_t h = 7168, P = 12'288;
  const std::int64_t kda = 3 * h * P + h * 96 + h * 128 + 128 * P + h * P + 3 * P * 4 + 96 + P + 128 + P * h;
  const std::int64_t mla = h * 1536 + 1536 + 1536LL * 96 * 192 + h * 576 + 512 + 512LL * 96 * 256 + 2 * h * 96 * 128;
  const std::int64_t expert = 3LL * 3584 * 3072, moe_rest = h * 896 + 2 * h * 3584 + 3584 + 3 * h * 6144;
  CHECK(kda == 443'740'384);
  CHECK(mla == 232'196'096);
  const std::int64_t common = 93 * 6 * h + 2 * h + 2LL * 163'840 * h + h;
  const std::int64_t total = 69 * kda + 24 * mla + 3 * h * 33'792 + 92 * (moe_rest + 896 * expert) + common;
  CHECK(total == 2'779'484'393'568);
  const auto k3 = load_model("kimi-k3");
  CHECK(k3->parameters() == total);
  CHECK(k3->active_parameters() == total - 92LL * (896 - 16) * expert);
  CHECK(k3->active_parameters() == 105'363'935'328);
  // Its layers: KDA except every 4th and the last (1-indexed).
  sim::WorkloadShape w = tokens(4096);
  w.flash_attention = true;
  const auto layers = k3->layers(w);
  REQUIRE(layers.size() == 95);
  for (int i = 0; i < 93; ++i) {
    const bool attends = (i + 1) % 4 == 0 || i == 92;
    INFO("layer " << i << ": " << layers[static_cast<std::size_t>(i + 1)].signature);
    CHECK(layers[static_cast<std::size_t>(i + 1)].signature.find(attends ? ":mla=1," : ":kda=1,") != std::string::npos);
  }
  // Its attention's output gate, NoPE, SiTU and the latent's norm.
  const sim::Layer& attention = layers[4];
  CHECK(find_kernel(attention.forward, "attn.g_proj") != nullptr);
  CHECK(find_kernel(attention.forward, "attn.rotary") == nullptr);
  CHECK(find_kernel(attention.forward, "moe.latent.norm") != nullptr);
  CHECK(attention.signature.find(",situ=1") != std::string::npos);
  // The gate on latent attention is K3's dense latent attention's, not DeepSeek's sparse one.
  std::vector<sim::Override> sparse{sim::parse_override("model.index_topk=2048")};
  CHECK(error_of([&] { load_model("kimi-k3", sparse); }).find("model.attn_output_gate: with latent attention is Kimi K3's gate") != std::string::npos);

  // Kimi K3's config (its text_config as Megatron-Bridge's tests hold it,
  // all 93 layers) reads to the same model.
  std::string kda_layers, full_layers;
  for (int n = 1; n <= 93; ++n) ((n % 4 == 0 || n == 93) ? full_layers : kda_layers) += (std::string(", ") + std::to_string(n));
  const std::string text =
      R"("attention_bias": false, "attn_res_block_size": 12, "first_k_dense_replace": 1, "head_dim": 256, "hidden_act": "situ",
      "hidden_size": 7168, "intermediate_size": 33792, "kv_lora_rank": 512, "latent_moe_use_norm": true,
      "linear_attn_config": {"gate_lower_bound": -5.0, "head_dim": 128, "kda_layers": [)" + kda_layers.substr(2) +
      R"(], "full_attn_layers": [)" + full_layers.substr(2) + R"(], "num_heads": 96, "short_conv_kernel_size": 4},
      "max_position_embeddings": 1048576, "moe_intermediate_size": 3072, "moe_layer_freq": 1, "moe_router_activation_func": "sigmoid",
      "num_attention_heads": 96, "num_expert_group": 1, "num_experts": 896, "num_experts_per_token": 16, "num_hidden_layers": 93,
      "num_key_value_heads": 96, "num_shared_experts": 2, "q_lora_rank": 1536, "qk_nope_head_dim": 128, "qk_rope_head_dim": 64,
      "rms_norm_eps": 1e-5, "routed_expert_hidden_size": 3584, "routed_scaling_factor": 1.0, "tie_word_embeddings": false,
      "topk_group": 1, "use_grouped_topk": true, "v_head_dim": 128, "vocab_size": 163840)";
  test::TempDir dir("kimi");
  const std::string k3_json =
      write_file(dir, "k3.json", R"({"architectures": ["KimiK3ForConditionalGeneration"], "model_type": "kimi_k3", "text_config": {)" + text + "}}");
  const auto read = load_model(k3_json);
  CHECK(read->parameters() == total);
  const auto read_layers = read->layers(w);
  REQUIRE(read_layers.size() == layers.size());
  for (std::size_t i = 0; i < layers.size(); ++i) CHECK(read_layers[i].signature == layers[i].signature);
  CHECK(read->notes().size() == 1);

  // Kimi-Linear-48B-A3B (h 2304; its config.json's keys): 20 KDA layers
  // (H 32, d 128, P 4096, the output gate through rank 128), 7 latent ones
  // (q_proj 2304 x 32 x 192, no gate), a dense SwiGLU 9216 on layer 1, 26
  // MoE of 256 experts of 1024 with a shared one.
  const std::int64_t lh = 2304, lp = 4096;
  const std::int64_t lkda = 3 * lh * lp + lh * 32 + lh * 128 + 128 * lp + (lh * 128 + 128 * lp) + 3 * lp * 4 + 32 + lp + 128 + lp * lh;
  const std::int64_t lmla = lh * 32 * 192 + lh * 576 + 512 + 512 * 32 * 256 + 32 * 128 * lh;
  const std::int64_t lmoe = lh * 256 + 256LL * 3 * lh * 1024 + 3 * lh * 1024;
  CHECK(lkda == 39'514'272);
  CHECK(lmla == 29'114'880);
  CHECK(lmoe == 1'819'607'040);
  const std::int64_t linear = 20 * lkda + 7 * lmla + 3 * lh * 9216 + 26 * lmoe + 27 * 2 * lh + lh + 2LL * 163'840 * lh;
  CHECK(linear == 49'122'675'072);
  const std::string linear_json = write_file(dir, "linear.json", R"({
  "architectures": ["KimiLinearForCausalLM"], "model_type": "kimi_linear", "first_k_dense_replace": 1, "head_dim": 72, "hidden_act": "silu",
  "hidden_size": 2304, "intermediate_size": 9216, "kv_lora_rank": 512,
  "linear_attn_config": {"full_attn_layers": [4, 8, 12, 16, 20, 24, 27], "head_dim": 128,
    "kda_layers": [1, 2, 3, 5, 6, 7, 9, 10, 11, 13, 14, 15, 17, 18, 19, 21, 22, 23, 25, 26], "num_heads": 32, "short_conv_kernel_size": 4},
  "mla_use_nope": true, "moe_intermediate_size": 1024, "moe_layer_freq": 1, "moe_renormalize": true, "moe_router_activation_func": "sigmoid",
  "num_attention_heads": 32, "num_expert_group": 1, "num_experts": 256, "num_experts_per_token": 8, "num_hidden_layers": 27,
  "num_key_value_heads": 32, "num_nextn_predict_layers": 0, "num_shared_experts": 1, "q_lora_rank": null, "qk_nope_head_dim": 128,
  "qk_rope_head_dim": 64, "vocab_size": 163840
})");
  const auto lin = load_model(linear_json);
  CHECK(lin->parameters() == linear);
  CHECK(lin->active_parameters() == linear - 26LL * (256 - 8) * 3 * lh * 1024);
  CHECK(lin->active_parameters() == 3'484'453'248);

  // A damaged layer list is refused at its key, naming what would be valid.
  auto edited = [&](const std::string& from, const std::string& to) {
    std::string text = test::slurp(linear_json);
    const auto at = text.find(from);
    REQUIRE(at != std::string::npos);
    text.replace(at, from.size(), to);
    return write_file(dir, "edited.json", text);
  };
  CHECK(error_of([&] { load_model(edited("\"kda_layers\": [1,", "\"kda_layers\": [28,")); })
            .find("config.linear_attn_config.kda_layers: holds 28; valid: layer numbers 1 to 27 (num_hidden_layers)") != std::string::npos);
  CHECK(error_of([&] { load_model(edited("\"kda_layers\": [1, 2,", "\"kda_layers\": [1, 1,")); }).find("lists layer 1 twice") != std::string::npos);
  CHECK(error_of([&] { load_model(edited("[4, 8, 12", "[3, 8, 12")); })
            .find("config.linear_attn_config.full_attn_layers: holds 3, which kda_layers lists") != std::string::npos);
  CHECK(error_of([&] { load_model(edited("[4, 8, 12, 16, 20, 24, 27]", "[4, 8, 12, 16, 20, 24]")); })
            .find("with kda_layers leaves layers out") != std::string::npos);
  CHECK(error_of([&] { load_model(edited("\"silu\"", "\"gelu\"")); }).find("config.hidden_act: 'gelu'; valid: silu (Kimi Linear's), situ (Kimi K3's)") !=
        std::string::npos);
  CHECK(error_of([&] { load_model(edited("\"moe_layer_freq\": 1", "\"moe_layer_freq\": 2")); })
            .find("config.moe_layer_freq: only 1 is modelled") != std::string::npos);
  CHECK(error_of([&] { load_model(edited("\"linear_attn_config\"", "\"linear_config\"")); })
            .find("config.linear_attn_config: missing or not a mapping") != std::string::npos);
}

TEST_CASE("SiTU and the latent experts' norm keep what Kimi K3's modules keep (Note [Kimi K3])", "[llama][kda][moe]") {
  // A dense block: SiTU keeps six fp32 tensors of the intermediate's
  // elements (24 bytes each) where composite SiLU keeps gate, up and silu's
  // output in 2 bytes (6): 18 bytes more an element, 128 x 128 of them.
  test::TempDir dir("situ");
  const std::string yaml = write_file(dir, "situ.yaml",
                                 "family: llama\nlayers: 1\nhidden: 64\nheads: 4\nintermediate: 128\nvocab: 256\nseq_len: 256\nsitu: true\n");
  std::vector<sim::Override> silu{sim::parse_override("model.situ=false")};
  const auto situ = load_model(yaml)->layers(tokens(128)), plain = load_model(yaml, silu)->layers(tokens(128));
  CHECK(situ[1].saved_bytes - plain[1].saved_bytes == 18 * 128 * 128);
  // Whatever the plan's kernels: SiTUAndMul is composite ops.
  sim::WorkloadShape fused = tokens(128);
  fused.fused_kernels = true;
  const auto situ_fused = load_model(yaml)->layers(fused), plain_fused = load_model(yaml, silu)->layers(fused);
  CHECK(situ_fused[1].saved_bytes - plain_fused[1].saved_bytes == (24 - 4) * 128 * 128);
  std::vector<sim::Override> relu2{sim::parse_override("model.squared_relu=true")};
  CHECK(error_of([&] { load_model(yaml, relu2); }).find("model.squared_relu: true is an ungated MLP; it contradicts situ: true") != std::string::npos);
  std::vector<sim::Override> geglu{sim::parse_override("model.gelu=true")};
  CHECK(error_of([&] { load_model(yaml, geglu); }).find("model.situ: true is Kimi K3's activation; it contradicts gelu: true") != std::string::npos);
  // The latent norm: KimiRMSNorm over 128 tokens of latent 16 keeps the
  // fp32 input and its 2-byte output (6 x 2048) and rsqrt a row (4 x 128).
  const std::string moe = write_file(dir, "moe.yaml",
                                "family: llama\nlayers: 1\nhidden: 64\nheads: 4\nintermediate: 128\nvocab: 256\nseq_len: 256\n"
                                "experts: 4\ntop_k: 2\nexpert_intermediate: 32\nmoe_latent: 16\nlatent_norm: true\n");
  std::vector<sim::Override> unnormed{sim::parse_override("model.latent_norm=false")};
  const auto normed = load_model(moe), bare = load_model(moe, unnormed);
  CHECK(normed->parameters() - bare->parameters() == 16);
  CHECK(normed->layers(tokens(128))[1].saved_bytes - bare->layers(tokens(128))[1].saved_bytes == 6 * 2048 + 4 * 128);
  std::vector<sim::Override> no_latent{sim::parse_override("model.moe_latent=0")};
  CHECK(error_of([&] { load_model(moe, no_latent); }).find("model.latent_norm: is read only with moe_latent") != std::string::npos);
}
