// The Llama family, fused attention and context parallelism on the model
// side: parameter counts against HuggingFace's, K/V projection sizes under
// grouped-query attention, saved bytes by formula, and the K/V exchange.
#include <catch2/catch.hpp>

#include "test_util.hpp"

#include <algorithm>
#include <fstream>
#include <tuple>
#include <optional>
#include <cstdlib>

#include "dtsim/models/models.hpp"
#include "dtsim/sim/cost.hpp"
#include "dtsim/sim/error.hpp"

using namespace dtsim;
using namespace dtsim::models;
using dtsim::test::error_of;
using dtsim::test::slurp;

namespace {

std::string hf(const std::string& folder) { return std::string(DTSIM_TEST_DATA) + "/hf/" + folder + "/config.json"; }

/// HuggingFace's count for a LlamaForCausalLM-shaped model: embed_tokens
/// V h; per layer q_proj h(a d), k_proj and v_proj h(kv d) each, o_proj
/// (a d) h, gate/up/down 3 h f, two RMSNorms 2h (+ q/k-norm weights 2d,
/// + q/k/v biases (a + 2kv) d); the final norm h; lm_head V h if untied.
std::int64_t llama_params(std::int64_t layers, std::int64_t h, std::int64_t a, std::int64_t kv, std::int64_t d, std::int64_t f,
                          std::int64_t v, bool tied, bool qk_norm = false, bool qkv_bias = false) {
  const std::int64_t block = h * a * d + 2 * h * kv * d + a * d * h + 3 * h * f + 2 * h + (qk_norm ? 2 * d : 0) +
                             (qkv_bias ? (a + 2 * kv) * d : 0);
  return v * h + layers * block + h + (tied ? 0 : v * h);
}

sim::WorkloadShape shape(std::int64_t b, std::int64_t s, int e) {
  sim::WorkloadShape w;
  w.micro_batch = b;
  w.seq_len = s;
  w.act_bytes = e;
  return w;
}

/// A small DeepSeek-shaped model: MLA (q_lora 32, kv_lora 16, nope 8, rope
/// 4, v 8, 4 heads), one dense block (f 256), then a MoE block (4 experts of
/// fe 32, top-2, one shared expert of 48), h 64, vocab 100.
LlamaConfig mla_moe_config() {
  LlamaConfig c;
  c.name = "mla-moe-test";
  c.layers = 2;
  c.hidden = 64;
  c.heads = 4;
  c.intermediate = 256;
  c.vocab = 100;
  c.seq_len = 16;
  c.experts = 4;
  c.top_k = 2;
  c.expert_intermediate = 32;
  c.shared_intermediate = 48;
  c.first_dense = 1;
  c.q_lora_rank = 32;
  c.kv_lora_rank = 16;
  c.qk_nope_dim = 8;
  c.qk_rope_dim = 4;
  c.v_head_dim = 8;
  return c;
}

}  // namespace

TEST_CASE("Llama-family parameter counts equal HuggingFace's, from config.json and built in", "[llama]") {
  // Published totals (model cards) agree with the formula:
  // Llama-3-8B 8,030,261,248; -70B 70,553,706,496; 3.1-405B 405,853,388,800;
  // Mistral-7B 7,241,732,096; Qwen3-8B 8,190,735,360 (tests/data/hf/PARAMS.md).
  const std::int64_t l8 = llama_params(32, 4096, 32, 8, 128, 14336, 128256, false);
  const std::int64_t l70 = llama_params(80, 8192, 64, 8, 128, 28672, 128256, false);
  const std::int64_t l405 = llama_params(126, 16384, 128, 8, 128, 53248, 128256, false);
  const std::int64_t m7 = llama_params(32, 4096, 32, 8, 128, 14336, 32000, false);
  const std::int64_t q8 = llama_params(36, 4096, 32, 8, 128, 12288, 151936, false, true);
  // Qwen2-7B: 28 layers, h 3584, 28 heads of 128, 4 KV heads, f 18944,
  // V 152064, q/k/v biases (o_proj has none), untied.
  const std::int64_t q2 = llama_params(28, 3584, 28, 4, 128, 18944, 152064, false, false, true);
  CHECK(l8 == 8'030'261'248);
  CHECK(l70 == 70'553'706'496);
  CHECK(l405 == 405'853'388'800);
  CHECK(m7 == 7'241'732'096);
  CHECK(q8 == 8'190'735'360);
  CHECK(load_model(hf("llama-3-8b"))->parameters() == l8);
  CHECK(load_model(hf("llama-3-70b"))->parameters() == l70);
  CHECK(load_model(hf("llama-3.1-405b"))->parameters() == l405);
  CHECK(load_model(hf("mistral-7b"))->parameters() == m7);
  CHECK(load_model(hf("qwen3-8b"))->parameters() == q8);
  CHECK(load_model(hf("qwen2-7b"))->parameters() == q2);
  CHECK(load_model("llama-3-8b")->parameters() == l8);
  CHECK(load_model("llama-3-70b")->parameters() == l70);
  CHECK(load_model("llama-3.1-405b")->parameters() == l405);
  CHECK(load_model("mistral-7b")->parameters() == m7);
  CHECK(load_model("qwen3-8b")->parameters() == q8);
  // Llama-3.2-1B: 16 layers, h 2048, 32 heads of 64, 8 KV heads, f 8192,
  // V 128256, head tied to the embedding (tie_word_embeddings: true), so V*h
  // once: 1,235,814,400, the model card's 1.24B (tests/data/hf/PARAMS.md).
  const std::int64_t l1 = llama_params(16, 2048, 32, 8, 64, 8192, 128256, true);
  CHECK(l1 == 1'235'814'400);
  CHECK(load_model(hf("llama-3.2-1b"))->parameters() == l1);
  CHECK(load_model("llama-3.2-1b")->parameters() == l1);
  // llama-tiny: 2 layers, h 128, 4 heads of 32, 2 KV heads, f 352, V 1024, untied: 631,424.
  CHECK(load_model("llama-tiny")->parameters() == 631'424);
  // BertForMaskedLM (architectures): no pooler, the MLM transform and the
  // decoder's bias: 109,514,298.
  CHECK(load_model(hf("bert-base-mlm"))->parameters() == 109'514'298);
}

TEST_CASE("the more built-ins have their checkpoints' parameter totals (Note [More built-ins])", "[llama]") {
  // The published totals (tests/data/hf/PARAMS.md, "More built-ins"): the
  // hub's safetensors totals, and for Qwen3 0.6B and 1.7B (tied heads)
  // their model cards' counts without the embedding, 0.44B and 1.4B.
  // {name, published total, embedding left out of it (0: none)}.
  const std::tuple<const char*, std::int64_t, std::int64_t> published[] = {
      {"llama-2-7b", 6'738'415'616, 0},         {"llama-2-13b", 13'015'864'320, 0},
      {"llama-2-70b", 68'976'648'192, 0},       {"llama-3.1-8b", 8'030'261'248, 0},
      {"llama-3.1-70b", 70'553'706'496, 0},     {"llama-3.3-70b", 70'553'706'496, 0},
      {"llama-3.2-3b", 3'212'749'824, 0},       {"mistral-nemo-12b", 12'247'782'400, 0},
      {"qwen3-0.6b", 440'467'456, 151'936LL * 1024}, {"qwen3-1.7b", 1'409'410'048, 151'936LL * 2048},
      {"qwen3-4b", 4'022'468'096, 0},           {"qwen3-14b", 14'768'307'200, 0},
      {"qwen3-32b", 32'762'123'264, 0},         {"qwen2.5-7b", 7'615'616'512, 0},
      {"qwen2.5-14b", 14'770'033'664, 0},       {"qwen2.5-32b", 32'763'876'352, 0},
      {"qwen2.5-72b", 72'706'203'648, 0}};
  for (const auto& [name, total, embedding] : published) {
    INFO(name);
    CHECK(load_model(name)->parameters() - embedding == total);
  }
  // The 3.1 models are Llama 3's shapes at a longer context.
  CHECK(load_model("llama-3.1-8b")->max_seq_len() == 131072);
  CHECK(load_model("llama-3-8b")->max_seq_len() == 8192);
  CHECK(load_model("llama-2-70b")->max_seq_len() == 4096);
}

namespace {

/// Sets an environment variable for a scope, restoring it after.
struct ScopedEnv {
  std::string key;
  std::optional<std::string> old;
  ScopedEnv(std::string k, const std::optional<std::string>& value) : key(std::move(k)) {
    if (const char* v = std::getenv(key.c_str())) old = v;
    if (value) {
      ::setenv(key.c_str(), value->c_str(), 1);
    } else {
      ::unsetenv(key.c_str());
    }
  }
  ~ScopedEnv() {
    if (old) {
      ::setenv(key.c_str(), old->c_str(), 1);
    } else {
      ::unsetenv(key.c_str());
    }
  }
};

}  // namespace

TEST_CASE("a hub repository is read from the HuggingFace cache, a model's folder from its config.json (Note [HuggingFace cache])",
          "[llama][hf]") {
  test::TempDir dir("hf-cache");
  namespace fs = std::filesystem;
  // huggingface_hub's precedence: HF_HUB_CACHE, HUGGINGFACE_HUB_CACHE, HF_HOME/hub, XDG_CACHE_HOME/huggingface/hub, ~/.cache/huggingface/hub.
  {
    ScopedEnv a("HF_HUB_CACHE", std::nullopt), b("HUGGINGFACE_HUB_CACHE", std::nullopt), c("HF_HOME", std::nullopt),
        d("XDG_CACHE_HOME", std::nullopt), home("HOME", "/home/u");
    CHECK(models::huggingface_hub_cache() == "/home/u/.cache/huggingface/hub");
    ScopedEnv xdg("XDG_CACHE_HOME", "/x");
    CHECK(models::huggingface_hub_cache() == "/x/huggingface/hub");
    ScopedEnv hf_home("HF_HOME", "~/hf");
    CHECK(models::huggingface_hub_cache() == "/home/u/hf/hub");
    ScopedEnv legacy("HUGGINGFACE_HUB_CACHE", "/legacy");
    CHECK(models::huggingface_hub_cache() == "/legacy");
    ScopedEnv now("HF_HUB_CACHE", "/now");
    CHECK(models::huggingface_hub_cache() == "/now");
  }
  ScopedEnv cache("HF_HUB_CACHE", dir.str());
  // models--ORG--NAME/refs/main names the snapshot; an older one beside it is not read.
  const fs::path repo = dir.path / "models--meta-llama--Llama-3.1-8B";
  fs::create_directories(repo / "refs");
  fs::create_directories(repo / "snapshots" / "0123abcd");
  fs::create_directories(repo / "snapshots" / "old");
  std::ofstream(repo / "refs" / "main") << "0123abcd\n";
  fs::copy_file(hf("llama-3-8b"), repo / "snapshots" / "0123abcd" / "config.json");
  fs::copy_file(hf("llama-3.2-1b"), repo / "snapshots" / "old" / "config.json");
  const auto m = load_model("meta-llama/Llama-3.1-8B");
  CHECK(m->name() == "Llama-3.1-8B");
  CHECK(m->parameters() == 8'030'261'248);  // llama-3-8b's config.json (tests/data/hf/PARAMS.md)
  // refs/main naming no snapshot with a config.json, or no hash, is refused, not another snapshot read.
  std::ofstream(repo / "refs" / "main") << "deadbeef\n";
  CHECK_THAT(error_of([] { load_model("meta-llama/Llama-3.1-8B"); }), Catch::Contains("names snapshot deadbeef, which holds no config.json"));
  std::ofstream(repo / "refs" / "main") << "..\n";
  CHECK_THAT(error_of([] { load_model("meta-llama/Llama-3.1-8B"); }), Catch::Contains("refs/main holds no commit hash"));
  // Without refs/main, two snapshots are one too many; one is the one.
  fs::remove(repo / "refs" / "main");
  CHECK_THAT(error_of([] { load_model("meta-llama/Llama-3.1-8B"); }),
             Catch::Contains("holds 2 snapshots with a config.json and no refs/main to choose one"));
  fs::remove_all(repo / "snapshots" / "old");
  CHECK(load_model("meta-llama/Llama-3.1-8B")->parameters() == 8'030'261'248);
  // Not cached: where it looked, how to fetch it, and the built-in of that name.
  CHECK(error_of([] { load_model("Qwen/Qwen2.5-7B"); }) ==
        "--model Qwen/Qwen2.5-7B: no such file or folder here, nor in the HuggingFace cache (" + dir.str() +
            " has no models--Qwen--Qwen2.5-7B) and dtsim reads no network; `huggingface-cli download Qwen/Qwen2.5-7B "
            "config.json` puts its config.json there, or give a config.json's path, or the built-in 'qwen2.5-7b'");
  // A model's folder: its config.json, named by the folder.
  CHECK(load_model(fs::path(hf("qwen3-8b")).parent_path().string())->name() == "qwen3-8b");
  CHECK_THAT(error_of([&] { load_model(dir.str()); }), Catch::Contains(": a folder without a config.json; valid: a model's folder"));
  // Neither a repository nor a file.
  CHECK_THAT(error_of([] { load_model("a/b/c"); }), Catch::Contains("--model a/b/c: expected a built-in name"));
}

TEST_CASE("a config.json is named from _name_or_path or its folder, not 'config'", "[llama]") {
  CHECK(load_model(hf("llama-3-8b"))->name() == "llama-3-8b");
  CHECK(load_model(hf("qwen3-8b"))->name() != "config");
}

TEST_CASE("grouped-query attention: K and V projections per KV head, split by tp", "[llama]") {
  const auto m = load_model("llama-3-8b");
  auto w = shape(1, 8192, 2);
  const auto one = m->layers(w);
  REQUIRE(one.size() == 34);
  // QKV as one GEMM: (32 + 2 x 8) heads of 128 = 6144 columns.
  CHECK(one[1].forward[1].name == "attn.qkv");
  CHECK(one[1].forward[1].n == 6144);
  // Its parameters: 4096 x 6144 + o_proj 4096^2 + 3 x 4096 x 14336 + 2 x 4096.
  CHECK(one[1].params == 4096LL * 6144 + 4096LL * 4096 + 3LL * 4096 * 14336 + 2 * 4096);
  w.tp = 8;
  const auto split = m->layers(w);
  CHECK(split[1].forward[1].n == (4 + 2 * 1) * 128);
  CHECK(split[1].params == (4096LL * 6144 + 4096LL * 4096 + 3LL * 4096 * 14336) / 8 + 2 * 4096);
  CHECK(m->tp_error(16) == "8 key/value heads (num_key_value_heads) are not divisible by tp=16");
}

TEST_CASE("fused attention keeps the output and log-sum-exp, not the scores", "[llama][attention]") {
  const auto m = load_model("llama-tiny");  // h 128, a 4, kv 2, d 32, f 352
  const std::int64_t b = 2, s = 128, t = b * s, h = 128, e = 2, f = 352;
  auto w = shape(b, s, e);
  const sim::Layer eager = m->layers(w)[1];
  w.flash_attention = true;
  const sim::Layer flash = m->layers(w)[1];
  // Note [Llama activations]: two RMSNorms (4 + e) th + 4t + e th each; Q
  // and o_proj's input e t a d each; SwiGLU (3e + e) t f.
  const std::int64_t norms = 2 * ((4 + e) * t * h + 4 * t + e * t * h);
  const std::int64_t mlp = 4 * e * t * f;
  const std::int64_t q = t * 4 * 32, kv = t * 2 * 32;
  // Eager (HF): K and V expanded to the 4 query heads (2 e b s a d), the
  // fp32 softmax and its e-byte cast over b a s^2.
  const std::int64_t scores = b * 4 * s * s;
  CHECK(eager.saved_bytes == norms + e * q + e * q + 2 * e * b * s * 4 * 32 + (e + 4) * scores + mlp);
  CHECK(eager.attention_core_bytes == 2 * e * b * s * 4 * 32 + (e + 4) * scores);
  // Fused: local K and V, the output O beside o_proj's input, and the fp32
  // log-sum-exp per query row and head.
  CHECK(flash.saved_bytes == norms + e * q + 2 * e * kv + e * q + e * q + 4 * b * 4 * s + mlp);
  CHECK(flash.attention_core_bytes == 0);
  CHECK(flash.attention_core.empty());
  CHECK(flash.signature.find(",flash=1") != std::string::npos);
  // Its FLOPs: QK^T and PV, 4 b a s^2 d, halved by the causal mask; the
  // backward's five matmuls 2.5x that.
  const sim::Kernel* fwd = nullptr;
  for (const auto& k : flash.forward) {
    if (k.name == "attn.flash") fwd = &k;
  }
  REQUIRE(fwd != nullptr);
  CHECK(fwd->flops == Approx(4.0 * b * 4 * s * s * 32 * 0.5));
  double bwd = 0;
  for (const auto& k : flash.backward) {
    if (k.name == "attn.flash.bwd") bwd = k.flops;
  }
  CHECK(bwd == Approx(2.5 * fwd->flops));
  // MFU counts attention whole, as eager computes it.
  w.flash_attention = false;
  CHECK(m->model_flops(w) > 0);
}

TEST_CASE("Megatron-Core's fused RMSNorm and SwiGLU keep their inputs only (Note [Fused kernels])", "[llama][memory]") {
  const auto m = load_model("llama-tiny");  // h 128, a 4, kv 2, d 32, f 352
  const std::int64_t b = 2, s = 128, t = b * s, h = 128, f = 352;
  for (const int e : {2, 4}) {
    INFO("e " << e);
    auto w = shape(b, s, e);
    w.flash_attention = true;
    const std::vector<sim::Layer> composite = m->layers(w);
    w.fused_kernels = true;
    const std::vector<sim::Layer> fused = m->layers(w);
    // Each of the block's two norms drops x.to(float32), 4 t h (TE's
    // LayerNormLinear saves the input and rsigma); the SwiGLU drops silu's
    // output, e t f (fused_bias_swiglu.py saves gate and up).
    CHECK(composite[1].saved_bytes - fused[1].saved_bytes == 2 * 4 * t * h + e * t * f);
    // The final norm drops its fp32 copy too.
    CHECK(composite.back().saved_bytes - fused.back().saved_bytes == 4 * t * h);
    // As kernels: the norm reads its input and writes its output once, the
    // SwiGLU writes one tensor of t f.
    auto kernel = [](const sim::Layer& l, const std::string& name) {
      for (const auto& k : l.forward) {
        if (k.name == name) return k;
      }
      FAIL("no kernel " << name);
      return sim::Kernel{};
    };
    CHECK(kernel(fused[1], "input_layernorm").bytes == 2 * e * t * h);
    CHECK(kernel(composite[1], "input_layernorm").bytes == 2 * (e + 8) * t * h);
    CHECK(kernel(fused[1], "mlp.swiglu").bytes == 3 * e * t * f);
    CHECK(kernel(composite[1], "mlp.swiglu").bytes == 4 * e * t * f);
    // A profile timed PyTorch's composite blocks: the fused block and head
    // are signatures of their own; the embedding is the same layer.
    CHECK(fused[1].signature == composite[1].signature + ",fk=1");
    CHECK(fused.back().signature == composite.back().signature + ",fk=1");
    CHECK(fused[0].signature == composite[0].signature);
  }
}

TEST_CASE("attention dropout keeps its mask and dropped probabilities under eager attention only (Note [Attention dropout])",
          "[llama][attention]") {
  const std::int64_t b = 2, s = 128, e = 2;
  const std::int64_t scores = b * 4 * s * s;  // llama-tiny: 4 heads
  auto w = shape(b, s, e);
  w.mask_bytes = 1;  // a bool mask, as PyTorch's native_dropout returns
  const auto plain = load_model("llama-tiny");
  const auto dropped = load_model("llama-tiny", {sim::parse_override("model.attention_dropout=0.1")});
  const sim::Layer a = plain->layers(w)[1], d = dropped->layers(w)[1];
  // HF's eager path in 16 bits: softmax in fp32 (kept, 4 bytes), cast to
  // e bytes, dropped, then the GEMM with V. Without dropout the GEMM keeps
  // the cast (e); with it, the dropped copy (e) instead, and native_dropout
  // keeps its 1-byte mask: 1 byte more an element of b a s^2.
  CHECK(d.saved_bytes - a.saved_bytes == 1 * scores);
  // In fp32 no cast: the softmax's output is dropout's input, kept apart
  // from the dropped copy: e + 1 = 5 bytes more.
  {
    auto w32 = shape(b, s, 4);
    w32.mask_bytes = 1;
    CHECK(dropped->layers(w32)[1].saved_bytes - plain->layers(w32)[1].saved_bytes == 5 * scores);
  }
  CHECK(d.forward.size() == a.forward.size() + 1);
  // A fused kernel regenerates its mask: nothing more kept.
  w.flash_attention = true;
  CHECK(dropped->layers(w)[1].saved_bytes == plain->layers(w)[1].saved_bytes);
  // HF's config.json key reads the same (llama-tiny's shape as a LlamaConfig).
  const std::string hf = R"({"architectures": ["LlamaForCausalLM"], "model_type": "llama", "hidden_size": 128,
    "intermediate_size": 352, "num_attention_heads": 4, "num_key_value_heads": 2, "num_hidden_layers": 2,
    "vocab_size": 512, "max_position_embeddings": 256, "attention_dropout": 0.1})";
  w.flash_attention = false;
  const auto from_hf = parse_model(hf, "config.json", true);
  std::string no_dropout = hf;
  no_dropout.replace(no_dropout.find("0.1"), 3, "0.0");
  CHECK(from_hf->layers(w)[1].saved_bytes - parse_model(no_dropout, "config.json", true)->layers(w)[1].saved_bytes ==
        1 * scores);
  // A probability of 1 would drop everything.
  CHECK_THAT(error_of([] { load_model("llama-tiny", {sim::parse_override("model.attention_dropout=1")}); }),
             Catch::Contains("model.attention_dropout") && Catch::Contains("0.99"));
}

TEST_CASE("op-level recompute keeps every other GEMM's output, attention's and the block's input (Note [Op-level recompute])",
          "[llama][recompute]") {
  const auto m = load_model("llama-tiny");  // h 128, a 4, kv 2, d 32, f 352
  const std::int64_t b = 2, s = 128, t = b * s, h = 128, e = 2, f = 352, d = 32;
  auto w = shape(b, s, e);
  w.flash_attention = true;
  const sim::Layer block = m->layers(w)[1];
  // torchtitan's mms in order wq, wk, wv, wo, w1, w3, w2: the odd ones kept
  // (wq, wv, w1, w2), SDPA's O and log-sum-exp, and the checkpoint's input.
  const std::int64_t q = t * 4 * d, kv = t * 2 * d;
  const std::int64_t kept = e * (t * h + q + kv + q + t * f + t * h) + 4 * t * 4;
  CHECK(block.saved_bytes - block.op_recompute_bytes == kept);
  // Rerun: wk, wo and w3 (GEMM FLOPs 2 t x out x in), the norms, rotary,
  // the residual and SwiGLU's product.
  double gemm = 0;
  int norms = 0;
  for (const auto& k : block.op_recompute) {
    if (k.kind == sim::KernelKind::kGemm) gemm += k.flops;
    if (k.kind == sim::KernelKind::kNorm) ++norms;
  }
  CHECK(gemm == Approx(2.0 * t * (2 * d * h + h * 4 * d + f * h)));
  CHECK(norms == 2);
  // Not described with tensor parallelism, or eager attention.
  w.tp = 2;
  CHECK(m->layers(w)[1].op_recompute_bytes == 0);
  w.tp = 1;
  w.flash_attention = false;
  CHECK(m->layers(w)[1].op_recompute.empty());
}

TEST_CASE("a sliding window bounds the keys a fused kernel visits", "[llama][attention]") {
  // Mistral's window 4096 at s = 8192: rows see min(i, w) keys, sum =
  // w s - w(w-1)/2 of the s^2 scores.
  const auto m = load_model("mistral-7b");
  auto w = shape(1, 8192, 2);
  w.flash_attention = true;
  const auto l = m->layers(w)[1];
  double flops = 0;
  for (const auto& k : l.forward) {
    if (k.name == "attn.flash") flops = k.flops;
  }
  const double pairs = 4096.0 * 8192 - 4096.0 * 4095 / 2;
  CHECK(flops == Approx(4.0 * 32 * 128 * pairs));
}

TEST_CASE("context parallelism divides activations by cp and passes K/V around the ring", "[llama][cp]") {
  const auto m = load_model("llama-3-8b");
  const std::int64_t b = 1, s = 8192, e = 2, cp = 4;
  auto w = shape(b, s, e);
  w.flash_attention = true;
  const sim::Layer whole = m->layers(w)[1];
  w.cp = cp;
  const sim::Layer part = m->layers(w)[1];
  // Fused attention keeps only per-token tensors: exactly a cp-th.
  CHECK(part.saved_bytes * cp == whole.saved_bytes);
  CHECK(part.signature.find(",cp=4") != std::string::npos);
  // Each of cp - 1 ring steps moves this rank's K and V: 2 e b (s/cp) kv d.
  const std::int64_t block = 2 * e * b * (s / cp) * 8 * 128;
  REQUIRE(part.cp_forward.size() == 1);
  CHECK(part.cp_forward[0].op == sim::CollectiveOp::kSendRecv);
  CHECK(part.cp_forward[0].axis == sim::Axis::kCp);
  CHECK(part.cp_forward[0].bytes == block);
  CHECK(part.cp_forward[0].count == cp - 1);
  // Backward passes K/V and their gradients: twice the bytes.
  REQUIRE(part.cp_backward.size() == 1);
  CHECK(part.cp_backward[0].bytes == 2 * block);
  // The ring hides behind the attention kernels it marks.
  bool marked = false;
  for (const auto& k : part.forward) marked = marked || (k.cp_overlap && k.name == "attn.flash");
  CHECK(marked);
  // The all-gather variant gathers the whole sequence's K/V once, and
  // backward gathers again and reduce-scatters their gradients.
  w.cp_all_gather = true;
  const sim::Layer ag = m->layers(w)[1];
  REQUIRE(ag.cp_forward.size() == 1);
  CHECK(ag.cp_forward[0].op == sim::CollectiveOp::kAllGather);
  CHECK(ag.cp_forward[0].bytes == cp * block);
  REQUIRE(ag.cp_backward.size() == 2);
  CHECK(ag.cp_backward[1].op == sim::CollectiveOp::kReduceScatter);
  // Embedding and head work on this rank's s/cp tokens: the head keeps the
  // fp32 log-softmax of b (s/cp) tokens over the vocabulary, among others.
  CHECK(m->layers(w).back().backward_workspace_bytes == 8 * b * (s / cp) * 128256);
  // The signatures tell the two apart: calibration times the ring's
  // attention or the all-gather's.
  CHECK(ag.signature.find(",cp=4,cpag=1") != std::string::npos);
  CHECK(part.signature.find("cpag") == std::string::npos);
}

TEST_CASE("eager attention on the p2p ring keeps the log-sum-exp, not the scores (Note [Ring attention])", "[llama][cp]") {
  const auto m = load_model("llama-3-8b");  // 32 heads of 128, 8 key-value heads
  const std::int64_t b = 1, s = 8192, e = 2, cp = 4, c = s / (2 * cp);
  auto w = shape(b, s, e);
  w.cp = cp;
  w.flash_attention = true;
  const sim::Layer flash = m->layers(w)[1];
  w.flash_attention = false;
  const sim::Layer ring = m->layers(w)[1];
  w.cp_all_gather = true;
  const sim::Layer gathered = m->layers(w)[1];
  // The ring keeps what fused attention keeps: its output O (e t a d, t =
  // b s/cp tokens), the last K/V block it held (2 e t kv d) and the fp32
  // log-sum-exp (4 t a). After an all-gather, eager attention keeps instead
  // this rank's scores against the whole sequence with their fp32 softmax
  // ((e + 4) b a (s/cp) s) and the gathered K, V expanded to every head
  // (e b s a 2d).
  CHECK(ring.saved_bytes == flash.saved_bytes);
  const std::int64_t t = b * (s / cp);
  CHECK(gathered.saved_bytes - ring.saved_bytes ==
        (e + 4) * b * 32 * (s / cp) * s + e * b * s * 32 * 256 - (e * t * 32 * 128 + 2 * e * t * 8 * 128 + 4 * t * 32));
  // Scores for 2 cp + 2 = 10 of the 16 chunk pairs of c = 1,024 tokens
  // (the own block's 4, masked, and 2 of each other rank's): 2 b a 10 c^2 d FLOPs.
  double scores = 0;
  int gemms_bwd = 0;
  for (const auto& k : ring.forward) {
    if (k.name == "attn.ring.scores") scores = k.flops;
  }
  for (const auto& k : ring.backward) gemms_bwd += k.name.rfind("attn.ring.scores", 0) == 0 || k.name.rfind("attn.ring.av", 0) == 0;
  CHECK(scores == Approx(2.0 * b * 32 * 10 * c * c * 128));
  CHECK(gemms_bwd == 5);  // the scores again, dV, dP, dQ, dK
}

TEST_CASE("FP8 saves the Linear layers' inputs at 1 byte, NVFP4 at 9/16", "[llama][fp8][fp4]") {
  const auto m = load_model("llama-tiny");
  const std::int64_t b = 1, s = 128, t = b * s, h = 128, e = 2, f = 352;
  auto w = shape(b, s, e);
  w.flash_attention = true;
  const sim::Layer bf16 = m->layers(w)[1];
  w.fp8 = true;
  const sim::Layer fp8 = m->layers(w)[1];
  // Four GEMM inputs go from e to 1 byte: q/k/v's and gate/up's (t h
  // each), o_proj's (t a d = t h here) and down_proj's (t f).
  CHECK(bf16.saved_bytes - fp8.saved_bytes == (e - 1) * (2 * t * h + t * h + t * f));
  // NVFP4 (Note [NVFP4 training]): each of those inputs as its FP4
  // column-wise copy, half a byte and a scale byte per 16 elements: 9/16 of
  // a byte, so 7/16 below FP8's on t h, t h, t h and t f elements (all
  // multiples of 16 here).
  w.fp4 = true;
  const sim::Layer fp4 = m->layers(w)[1];
  CHECK(fp8.saved_bytes - fp4.saved_bytes == 7 * (3 * t * h + t * f) / 16);
  sim::WorkloadShape odd;
  odd.fp8 = odd.fp4 = true;
  CHECK(odd.saved_gemm_input(17) == 10);  // 17 x 9 / 16 = 9.56, rounded up
}

TEST_CASE("bad Llama-family input: one line naming file, key and what is valid", "[llama]") {
  const std::string dir = std::string(DTSIM_TEST_DATA) + "/hf/";
  CHECK_THAT(error_of([] { load_model("llama-tiny", {sim::parse_override("model.kv_heads=3")}); }),
             Catch::Contains("model.kv_heads: 3 does not divide the 4 attention heads") && Catch::Contains("valid: 1, 2, 4"));
  CHECK_THAT(error_of([] { load_model("llama-tiny", {sim::parse_override("model.qk_norm=maybe")}); }),
             Catch::Contains("model.qk_norm"));
  // config.json: the key where it stands, and what is valid.
  dtsim::test::TempDir dir_json("llama-bad");
  auto write = [&](const std::string& name, const std::string& text) {
    std::ofstream(dir_json.file(name)) << text;
    return dir_json.file(name);
  };
  const std::string kv = write("kv.json", "{\"model_type\": \"llama\",\n \"num_attention_heads\": 32,\n \"num_key_value_heads\": 6\n}\n");
  CHECK_THAT(error_of([&] { load_model(kv); }),
             Catch::Contains("kv.json:3") && Catch::Contains("config.num_key_value_heads: 6 does not divide the 32 attention heads"));
  const std::string type = write("t.json", "{\"model_type\": \"mamba\"}\n");
  CHECK_THAT(error_of([&] { load_model(type); }),
             Catch::Contains("'mamba' is not supported; valid: gpt2, bert, llama, mistral, mistral3, qwen2, qwen2_5_vl, qwen3"));
  const std::string arch = write("a.json", "{\"model_type\": \"llama\", \"architectures\": [\"LlamaForSequenceClassification\"]}\n");
  CHECK_THAT(error_of([&] { load_model(arch); }), Catch::Contains("valid: LlamaForCausalLM"));
}

// ---- Phi-3 (Note [Phi-3] in models/src/llama.cpp) ----------------------------

namespace {

/// A config.json of `text` in `dir`, where the test can read it.
std::string write_json(const test::TempDir& dir, const std::string& text) {
  const std::string path = dir.file("config.json");
  std::ofstream(path) << text;
  return path;
}

/// tests/data/hf/`folder`'s config.json with `from` replaced by `to`,
/// written into `dir` (REQUIREs `from` there).
std::string edited_hf(const test::TempDir& dir, const std::string& folder, const std::string& from, const std::string& to) {
  std::string text = slurp(hf(folder));
  REQUIRE(text.find(from) != std::string::npos);
  text.replace(text.find(from), from.size(), to);
  return write_json(dir, text);
}

}  // namespace

TEST_CASE("Phi-3 parameter counts equal HuggingFace's, from config.json and built in", "[llama][phi3]") {
  // Phi3ForCausalLM: qkv_proj and gate_up_proj hold Llama's q/k/v and
  // gate/up numbers in one Linear each, no biases, untied head
  // (tests/data/hf/PARAMS.md). Phi-3-mini: 3,821,079,552, Keras Hub's count
  // for phi3_mini_4k_instruct_en; Phi-3-medium: 13,960,238,080.
  const std::int64_t mini = llama_params(32, 3072, 32, 32, 96, 8192, 32064, false);
  const std::int64_t medium = llama_params(40, 5120, 40, 10, 128, 17920, 32064, false);
  CHECK(mini == 3'821'079'552);
  CHECK(medium == 13'960'238'080);
  CHECK(load_model(hf("phi-3-mini-4k"))->parameters() == mini);
  CHECK(load_model(hf("phi-3-medium-4k"))->parameters() == medium);
  CHECK(load_model("phi-3-mini")->parameters() == mini);
  CHECK(load_model("phi-3-medium")->parameters() == medium);
  // The hub file's _name_or_path names it.
  CHECK(load_model(hf("phi-3-mini-4k"))->name() == "Phi-3-mini-4k-instruct");
}

TEST_CASE("a Phi-3 config.json is its built-in model: every layer, the 2047-token window included", "[llama][phi3]") {
  const sim::WorkloadShape w = shape(1, 4096, 2);
  for (const auto& [file, builtin] : {std::pair{"phi-3-mini-4k", "phi-3-mini"}, std::pair{"phi-3-medium-4k", "phi-3-medium"}}) {
    INFO(file);
    const auto from_hf = load_model(hf(file))->layers(w);
    const auto ours = load_model(builtin)->layers(w);
    REQUIRE(from_hf.size() == ours.size());
    for (std::size_t i = 0; i < ours.size(); ++i) {
      CHECK(from_hf[i].signature == ours[i].signature);
      CHECK(from_hf[i].forward_flops() == ours[i].forward_flops());
      CHECK(from_hf[i].saved_bytes == ours[i].saved_bytes);
    }
    // Every block attends within the window (Phi3Attention hands
    // config.sliding_window to every layer's attention).
    for (std::size_t i = 1; i + 1 < ours.size(); ++i) CHECK(ours[i].signature.find(",sw=2047") != std::string::npos);
  }
  // "sliding_window": null (the 128k models' files set 262144; a null
  // window is none): full causal attention, so at 4096 tokens a fused
  // kernel does more work (eager attention computes every score either way).
  test::TempDir dir("phi3-window");
  std::string text = slurp(hf("phi-3-mini-4k"));
  const std::string from = "\"sliding_window\": 2047";
  REQUIRE(text.find(from) != std::string::npos);
  text.replace(text.find(from), from.size(), "\"sliding_window\": null");
  const auto full = load_model(write_json(dir, text))->layers(w);
  CHECK(full[1].signature.find(",sw=") == std::string::npos);
  sim::WorkloadShape fa = w;
  fa.flash_attention = true;
  CHECK(load_model(write_json(dir, text))->layers(fa)[1].forward_flops() > load_model("phi-3-mini")->layers(fa)[1].forward_flops());
}

TEST_CASE("bad Phi-3 config.json: one line naming the key and what is valid", "[llama][phi3]") {
  test::TempDir dir("phi3-bad");
  auto with = [&](const std::string& from, const std::string& to) {
    std::string text = slurp(hf("phi-3-mini-4k"));
    REQUIRE(text.find(from) != std::string::npos);
    text.replace(text.find(from), from.size(), to);
    return write_json(dir, text);
  };
  const std::string resid = with("\"resid_pdrop\": 0.0", "\"resid_pdrop\": 0.1");
  CHECK_THAT(error_of([&] { load_model(resid); }),
             Catch::Contains("config.resid_pdrop") && Catch::Contains("valid: 0.0") && Catch::Contains("config.json:"));
  const std::string embd = with("\"embd_pdrop\": 0.0", "\"embd_pdrop\": 0.2");
  CHECK_THAT(error_of([&] { load_model(embd); }), Catch::Contains("config.embd_pdrop"));
  const std::string arch = with("\"Phi3ForCausalLM\"", "\"Phi3SmallForCausalLM\"");
  CHECK_THAT(error_of([&] { load_model(arch); }), Catch::Contains("valid: Phi3ForCausalLM"));
  const std::string kv = with("\"num_key_value_heads\": 32", "\"num_key_value_heads\": 7");
  CHECK_THAT(error_of([&] { load_model(kv); }), Catch::Contains("config.num_key_value_heads: 7 does not divide the 32 attention heads"));
}

// ---- Granite (Note [Granite] in models/src/llama.cpp) -------------------------

namespace {

/// The sums over a layer's kernels: bytes and FLOPs of forward and backward.
struct KernelSums {
  double fwd_bytes = 0, bwd_bytes = 0, fwd_flops = 0, bwd_flops = 0;
};
KernelSums sums(const sim::Layer& l) {
  KernelSums k;
  for (const auto& x : l.forward) k.fwd_bytes += static_cast<double>(x.bytes * x.repeat), k.fwd_flops += x.flops * static_cast<double>(x.repeat);
  for (const auto& x : l.backward) k.bwd_bytes += static_cast<double>(x.bytes * x.repeat), k.bwd_flops += x.flops * static_cast<double>(x.repeat);
  return k;
}

}  // namespace

TEST_CASE("Granite's parameters equal HuggingFace's, from config.json and built in", "[llama][granite]") {
  // GraniteForCausalLM: Llama's tensors, no biases, the head tied
  // (tests/data/hf/PARAMS.md): 8,170,864,640 for Granite 3.3 8B.
  const std::int64_t g8 = llama_params(40, 4096, 32, 8, 128, 12800, 49159, true);
  CHECK(g8 == 8'170'864'640);
  CHECK(load_model(hf("granite-3.3-8b"))->parameters() == g8);
  CHECK(load_model("granite-3.3-8b")->parameters() == g8);
  // The config's layers are the built-in's, scalars included.
  const sim::WorkloadShape w = shape(1, 4096, 2);
  const auto a = load_model(hf("granite-3.3-8b"))->layers(w), b = load_model("granite-3.3-8b")->layers(w);
  REQUIRE(a.size() == b.size());
  for (std::size_t i = 0; i < a.size(); ++i) CHECK(a[i].signature == b[i].signature);
  CHECK(a[0].signature.find(",em=12000000") != std::string::npos);
  CHECK(a[1].signature.find(",rm=220000") != std::string::npos);
  CHECK(a.back().signature.find(",ls=16000000") != std::string::npos);
}

TEST_CASE("Granite's scalars: one pass each over what they scale, forward and backward, nothing kept", "[llama][granite]") {
  // llama-tiny (h 128, 4 heads, 2 KV heads, f 352, V 1024) at b 2, s 128 in
  // bf16: t = 256 tokens, e = 2. A scalar multiply reads and writes e bytes
  // an element, one FLOP; its gradient is the incoming one times the same
  // scalar, the same pass.
  const std::int64_t t = 256, h = 128, v = 1024, e = 2;
  const sim::WorkloadShape w = shape(2, 128, 2);
  const auto plain = load_model("llama-tiny")->layers(w);
  const auto granite = load_model("llama-tiny", {sim::parse_override("model.embedding_multiplier=12"),
                                                 sim::parse_override("model.residual_multiplier=0.22"),
                                                 sim::parse_override("model.logits_scaling=16")})
                           ->layers(w);
  REQUIRE(plain.size() == granite.size());
  // embedding: t h elements; each block: two outputs of t h; head: t v logits.
  const std::vector<std::int64_t> elements{t * h, 2 * t * h, 2 * t * h, t * v};
  for (std::size_t i = 0; i < plain.size(); ++i) {
    INFO(plain[i].name);
    const KernelSums p = sums(plain[i]), g = sums(granite[i]);
    const double n = static_cast<double>(elements[i]);
    CHECK(g.fwd_bytes - p.fwd_bytes == Approx(2 * e * n));
    CHECK(g.bwd_bytes - p.bwd_bytes == Approx(2 * e * n));
    CHECK(g.fwd_flops - p.fwd_flops == Approx(n));
    CHECK(g.bwd_flops - p.bwd_flops == Approx(n));
    CHECK(granite[i].saved_bytes == plain[i].saved_bytes);
    CHECK(granite[i].params == plain[i].params);
  }
}

TEST_CASE("bad Granite input: one line naming the key and what is valid", "[llama][granite]") {
  CHECK_THAT(error_of([] { load_model("gemma-tiny", {sim::parse_override("model.embedding_multiplier=12")}); }),
             Catch::Contains("model.embedding_multiplier") && Catch::Contains("contradicts embed_scale"));
  CHECK_THAT(error_of([] { load_model("gemma-tiny", {sim::parse_override("model.residual_multiplier=0.5")}); }),
             Catch::Contains("model.residual_multiplier"));
  CHECK_THAT(error_of([] { load_model("llama-tiny", {sim::parse_override("model.logits_scaling=-1")}); }),
             Catch::Contains("model.logits_scaling"));
  // The signatures carry the scalars in millionths.
  CHECK_THAT(error_of([] { load_model("llama-tiny", {sim::parse_override("model.residual_multiplier=1e-7")}); }),
             Catch::Contains("model.residual_multiplier: below 1e-6; valid: 0 (no such op) or 1e-6 to 1e6"));
  test::TempDir dir("granite-bad");
  std::string text = slurp(hf("granite-3.3-8b"));
  const std::string from = "\"num_attention_heads\": 32";
  REQUIRE(text.find(from) != std::string::npos);
  text.replace(text.find(from), from.size(), "\"num_attention_heads\": 48");
  CHECK_THAT(error_of([&] { load_model(write_json(dir, text)); }),
             Catch::Contains("config.num_attention_heads: 48 does not divide hidden_size 4096"));
}

// ---- OLMo 2 (Note [OLMo 2] in models/src/llama.cpp) ---------------------------

TEST_CASE("OLMo 2's parameters equal HuggingFace's, from config.json and built in", "[llama][olmo2]") {
  // Olmo2ForCausalLM: Llama's projections, two norms of h a layer (after
  // attention, after the MLP), q_norm over n d and k_norm over k d, untied.
  auto olmo2 = [](std::int64_t layers, std::int64_t h, std::int64_t a, std::int64_t kv, std::int64_t d, std::int64_t f, std::int64_t v) {
    return llama_params(layers, h, a, kv, d, f, v, false) + layers * (a + kv) * d;
  };
  // 7B: 32 x (67,108,864 + 135,266,304 + 8,192 + 8,192) + 2 x 411,041,792 + 4,096.
  CHECK(olmo2(32, 4096, 32, 32, 128, 11008, 100352) == 7'298'617'344);
  CHECK(olmo2(40, 5120, 40, 40, 128, 13824, 100352) == 13'716'198'400);
  CHECK(load_model("olmo-2-7b")->parameters() == 7'298'617'344);
  CHECK(load_model("olmo-2-13b")->parameters() == 13'716'198'400);
  // allenai/OLMo-2-1124-7B's keys (Olmo2Config's names) give the built-in.
  test::TempDir dir("olmo2");
  const std::string json = write_json(dir, R"({"architectures": ["Olmo2ForCausalLM"], "model_type": "olmo2", "hidden_size": 4096,
    "intermediate_size": 11008, "num_attention_heads": 32, "num_hidden_layers": 32, "num_key_value_heads": 32,
    "max_position_embeddings": 4096, "vocab_size": 100352, "tie_word_embeddings": false, "attention_bias": false})");
  CHECK(load_model(json)->parameters() == 7'298'617'344);
  const sim::WorkloadShape w = shape(1, 4096, 2);
  const auto a = load_model(json)->layers(w), b = load_model("olmo-2-7b")->layers(w);
  REQUIRE(a.size() == b.size());
  for (std::size_t i = 0; i < a.size(); ++i) CHECK(a[i].signature == b[i].signature);
}

TEST_CASE("SmolLM3: the Llama block without rotary on every 4th layer (Note [SmolLM3])", "[llama]") {
  // SmolLM3-3B's shape: 36 layers, h 2048, 16 heads of 128, 4 KV heads,
  // f 11008, V 128256, tied: 36 x (2048^2 x 2 + 2 x 2048 x 512 + 3 x 2048 x
  // 11008 + 2 x 2048) + 128256 x 2048 + 2048 = 3,075,098,624 (the card's 3.08B).
  CHECK(llama_params(36, 2048, 16, 4, 128, 11008, 128256, true) == 3'075'098'624);
  CHECK(load_model("smollm3-3b")->parameters() == 3'075'098'624);
  test::TempDir dir("smollm3");
  const std::string keys = R"("architectures": ["SmolLM3ForCausalLM"], "model_type": "smollm3", "hidden_size": 2048,
    "intermediate_size": 11008, "num_attention_heads": 16, "num_hidden_layers": 36, "num_key_value_heads": 4,
    "max_position_embeddings": 65536, "vocab_size": 128256, "tie_word_embeddings": true, "use_sliding_window": false,
    "no_rope_layer_interval": 4)";
  const auto m = load_model(write_json(dir, "{" + keys + "}"));
  CHECK(m->parameters() == 3'075'098'624);
  const auto layers = m->layers(shape(1, 4096, 2)), built = load_model("smollm3-3b")->layers(shape(1, 4096, 2));
  REQUIRE(layers.size() == 38);
  for (std::size_t i = 0; i < layers.size(); ++i) CHECK(layers[i].signature == built[i].signature);
  // Layers 3, 7, ..., 35 turn nothing: no rotary kernel, and "nope=1" in their signature; none has a window.
  for (int i = 0; i < 36; ++i) {
    INFO("layer " << i);
    const sim::Layer& l = layers[static_cast<std::size_t>(i) + 1];
    const bool nope = (i + 1) % 4 == 0;
    CHECK((l.signature.find(",nope=1") != std::string::npos) == nope);
    CHECK(l.signature.find(",sw=") == std::string::npos);
    CHECK(std::any_of(l.forward.begin(), l.forward.end(), [](const sim::Kernel& k) { return k.name == "attn.rotary"; }) == !nope);
  }
  // A listed no_rope_layers of that pattern is the same model; another is refused, as a sliding window is.
  std::string listed = ", \"no_rope_layers\": [";
  for (int i = 0; i < 36; ++i) listed += std::string(i == 0 ? "" : ", ") + ((i + 1) % 4 != 0 ? "1" : "0");
  CHECK(load_model(write_json(dir, "{" + keys + listed + "]}"))->layers(shape(1, 4096, 2))[4].signature == layers[4].signature);
  std::string other = listed;
  other.replace(other.find('1'), 1, "0");
  CHECK_THAT(error_of([&] { load_model(write_json(dir, "{" + keys + other + "]}")); }), Catch::Contains("config.no_rope_layers: differs from 0 on every 4-th layer"));
  std::string windowed = keys;
  windowed.replace(windowed.find("\"use_sliding_window\": false"), 27, "\"use_sliding_window\": true, \"sliding_window\": 4096");
  CHECK_THAT(error_of([&] { load_model(write_json(dir, "{" + windowed + "}")); }), Catch::Contains("use_sliding_window: true with a sliding_window"));
}

TEST_CASE("OLMo 3: OLMo 2's block with a full-attention layer every 4th, the others in a window", "[llama][olmo2]") {
  // Olmo3Config (configuration_olmo3.py): sliding_window 4096 and
  // layer_types with (i + 1) % 4 == 0 full by default. A small one: 8
  // layers, h 512, 8 heads of 64, 2 KV heads, f 1024, V 1000, window 64.
  // Per layer 512^2 (q) + 2 x 512 x 128 (k, v) + 512^2 (o) + 3 x 512 x 1024
  // + 2 x 512 (norms) + 8 x 64 + 2 x 64 (q/k norms) = 2,229,888; 8 layers,
  // the embedding and the untied head 2 x 512,000, the final norm 512:
  // 18,863,616.
  test::TempDir dir("olmo3");
  const std::string keys = R"("architectures": ["Olmo3ForCausalLM"], "model_type": "olmo3", "hidden_size": 512,
    "intermediate_size": 1024, "num_attention_heads": 8, "num_hidden_layers": 8, "num_key_value_heads": 2,
    "max_position_embeddings": 1024, "vocab_size": 1000, "tie_word_embeddings": false, "sliding_window": 64)";
  const auto m = load_model(write_json(dir, "{" + keys + "}"));
  CHECK(m->parameters() == 18'863'616);
  CHECK(m->parameters() == [] {
    return llama_params(8, 512, 8, 2, 64, 1024, 1000, false) + 8 * (8 + 2) * 64;
  }());
  const auto layers = m->layers(shape(1, 256, 2));
  REQUIRE(layers.size() == 10);
  for (int i = 0; i < 8; ++i) {
    INFO("layer " << i);
    const bool full = (i + 1) % 4 == 0;
    CHECK((layers[static_cast<std::size_t>(i) + 1].signature.find(",sw=64") == std::string::npos) == full);
  }
  // layer_types as the releases list them say the same; another pattern is refused at its key.
  const std::string listed = R"(, "layer_types": ["sliding_attention", "sliding_attention", "sliding_attention", "full_attention",
    "sliding_attention", "sliding_attention", "sliding_attention", "full_attention"])";
  const auto same = load_model(write_json(dir, "{" + keys + listed + "}"))->layers(shape(1, 256, 2));
  for (std::size_t i = 0; i < layers.size(); ++i) CHECK(same[i].signature == layers[i].signature);
  std::string odd = listed;
  odd.replace(odd.rfind("\"full_attention\""), 16, "\"sliding_attention\"");  // layer 7: full every 4th no longer
  CHECK_THAT(error_of([&] { load_model(write_json(dir, "{" + keys + odd + "}")); }), Catch::Contains("layer_types"));
  CHECK_THAT(error_of([&] {
               load_model(write_json(dir, "{" + keys.substr(0, keys.find(", \"sliding_window\"")) + ", \"sliding_window\": null}"));
             }),
             Catch::Contains("sliding_window: null"));
}

TEST_CASE("OLMo 2's block moves its norms, not its work: the q/k-normed Llama block's bytes, FLOPs and kept tensors", "[llama][olmo2]") {
  // Llama's block norms its input and the residual stream (keeping both and
  // the two normed GEMM inputs); OLMo 2's norms the attention's and the MLP's
  // outputs (keeping both, and the GEMMs keep the unnormed x and y): two
  // norms of t h each way, four tensors of t h kept each way. The q/k
  // norms cover q + kv elements either way. Only their weights differ:
  // (a + kv) d against 2d.
  const sim::WorkloadShape w = shape(2, 128, 2);
  const auto qwen = load_model("llama-tiny", {sim::parse_override("model.qk_norm=true")})->layers(w);
  const auto olmo = load_model("llama-tiny", {sim::parse_override("model.qk_norm=true"), sim::parse_override("model.olmo2_norms=true")})->layers(w);
  const sim::Layer& q = qwen[1];
  const sim::Layer& o = olmo[1];
  const KernelSums qs = sums(q), os = sums(o);
  CHECK(os.fwd_bytes == qs.fwd_bytes);
  CHECK(os.bwd_bytes == qs.bwd_bytes);
  CHECK(os.fwd_flops == qs.fwd_flops);
  CHECK(o.saved_bytes == q.saved_bytes);
  // llama-tiny: 4 heads of 32, 2 KV heads: (4 + 2) x 32 - 2 x 32 = 128 weights more.
  CHECK(o.params - q.params == (4 + 2) * 32 - 2 * 32);
  CHECK(o.forward.front().name == "attn.qkv");  // no norm before attention
  CHECK(q.forward.front().name == "input_layernorm");
}

TEST_CASE("bad OLMo 2 input: one line naming the key and what is valid", "[llama][olmo2]") {
  CHECK_THAT(error_of([] { load_model("llama-tiny", {sim::parse_override("model.olmo2_norms=true")}); }),
             Catch::Contains("model.olmo2_norms: true needs qk_norm: true"));
  CHECK_THAT(error_of([] { load_model("gemma-tiny", {sim::parse_override("model.olmo2_norms=true")}); }),
             Catch::Contains("contradicts gemma_norms"));
  CHECK_THAT(error_of([] { load_model("olmo-2-7b", {sim::parse_override("model.residual_multiplier=0.5")}); }),
             Catch::Contains("model.residual_multiplier: is Granite's block and olmo2_norms OLMo 2's"));
  CHECK_THAT(error_of([] { load_model("olmo-2-7b", {sim::parse_override("model.experts=8")}); }),
             Catch::Contains("model.olmo2_norms: true is OLMo 2's dense block; it contradicts experts"));
  // Tensor parallelism: the rules table asks the model, which says why.
  CHECK_THAT(load_model("olmo-2-7b")->tp_error(2), Catch::Contains("dtsim models it at tp=1"));
  CHECK(load_model("olmo-2-7b")->tp_error(1).empty());
}

// ---- Gemma 2 and 3 (Note [Gemma] in models/src/llama.cpp) -------------------

namespace {

/// HuggingFace's count for Gemma2ForCausalLM / Gemma3ForCausalLM
/// (tests/data/hf/PARAMS.md): the Llama block's tensors with four norms of h
/// (sandwich norms), q/k norms of d in Gemma 3, no biases, the head tied.
std::int64_t gemma_params(std::int64_t layers, std::int64_t h, std::int64_t a, std::int64_t kv, std::int64_t d, std::int64_t f,
                          std::int64_t v, bool qk_norm) {
  const std::int64_t block = h * a * d + 2 * h * kv * d + a * d * h + 3 * h * f + 4 * h + (qk_norm ? 2 * d : 0);
  return v * h + layers * block + h;
}

}  // namespace

TEST_CASE("Gemma 2 and 3 parameter counts equal HuggingFace's, from config.json and built in", "[llama][gemma]") {
  const std::int64_t g2 = gemma_params(26, 2304, 8, 4, 256, 9216, 256000, false);
  const std::int64_t g9 = gemma_params(42, 3584, 16, 8, 256, 14336, 256000, false);
  const std::int64_t g27 = gemma_params(46, 4608, 32, 16, 128, 36864, 256000, false);
  const std::int64_t g31 = gemma_params(26, 1152, 4, 1, 256, 6912, 262144, true);
  // The models' safetensors totals (tests/data/hf/PARAMS.md).
  CHECK(g2 == 2'614'341'888);
  CHECK(g9 == 9'241'705'984);
  CHECK(g27 == 27'227'128'320);
  CHECK(g31 == 999'885'952);
  CHECK(load_model(hf("gemma-2-9b"))->parameters() == g9);
  CHECK(load_model(hf("gemma-3-1b"))->parameters() == g31);
  CHECK(load_model("gemma-2-2b")->parameters() == g2);
  CHECK(load_model("gemma-2-9b")->parameters() == g9);
  CHECK(load_model("gemma-2-27b")->parameters() == g27);
  CHECK(load_model("gemma-3-1b")->parameters() == g31);
  // Gemma 3's language models: the text_config shapes of gemma-3-{4,12,27}b.
  CHECK(load_model("gemma-3-4b")->parameters() == gemma_params(34, 2560, 8, 4, 256, 10240, 262208, true));
  CHECK(load_model("gemma-3-12b")->parameters() == gemma_params(48, 3840, 16, 8, 256, 15360, 262208, true));
  CHECK(load_model("gemma-3-27b")->parameters() == gemma_params(62, 5376, 32, 16, 128, 21504, 262208, true));
}

TEST_CASE("Gemma interleaves sliding-window layers with global ones", "[llama][gemma]") {
  auto count_global = [](const std::vector<sim::Layer>& layers, std::vector<int>& which) {
    for (std::size_t i = 1; i + 1 < layers.size(); ++i) {
      if (layers[i].signature.find(",sw=") == std::string::npos) which.push_back(static_cast<int>(i) - 1);
    }
  };
  // Gemma 2: is_sliding = not layer_idx % 2 (modeling_gemma2.py): layer 0 local, 1 global, ...
  std::vector<int> g2;
  count_global(load_model(hf("gemma-2-9b"))->layers(shape(1, 8192, 2)), g2);
  CHECK(g2.size() == 21);
  CHECK(g2.front() == 1);
  CHECK(g2.back() == 41);
  // Gemma 3: sliding_window_pattern 6, a global layer where (i + 1) % 6 == 0.
  std::vector<int> g3;
  count_global(load_model(hf("gemma-3-1b"))->layers(shape(1, 8192, 2)), g3);
  CHECK(g3 == std::vector<int>{5, 11, 17, 23});
  // transformers >= 4.53 lists the layers instead; the same pattern reads the same.
  test::TempDir dir("gemma");
  std::string text = slurp(hf("gemma-3-1b"));
  std::string types = "\"layer_types\": [";
  for (int i = 0; i < 26; ++i) types += std::string(i ? ", " : "") + ((i + 1) % 6 == 0 ? "\"full_attention\"" : "\"sliding_attention\"");
  text.replace(text.find("\"max_position_embeddings\""), 0, types + "],\n  ");
  const auto listed = load_model(write_json(dir, text));
  std::vector<int> g3l;
  count_global(listed->layers(shape(1, 8192, 2)), g3l);
  CHECK(g3l == g3);
  // A list dtsim cannot express is one line naming the layer.
  std::string odd = text;
  odd.replace(odd.find("\"sliding_attention\""), std::string("\"sliding_attention\"").size(), "\"full_attention\"");
  CHECK(error_of([&] { load_model(write_json(dir, odd)); }).find("config.layer_types: layer 1 is 'sliding_attention'") != std::string::npos);
  // Fused attention prices a local layer's scores by its window: at s 8192
  // and w 4096 it computes (w s - w(w - 1)/2) / s^2 of them, a global one
  // half (causal).
  auto w = shape(1, 8192, 2);
  w.flash_attention = true;
  const auto layers = load_model("gemma-2-9b")->layers(w);
  auto flash_flops = [](const sim::Layer& l) {
    for (const auto& k : l.forward) {
      if (k.name == "attn.flash") return k.flops;
    }
    return 0.0;
  };
  const double s = 8192, win = 4096;
  CHECK(flash_flops(layers[1]) / flash_flops(layers[2]) == Approx((win * s - win * (win - 1) / 2) / (s * s) / 0.5));
}

TEST_CASE("Gemma's norms, GeGLU and soft caps: kernels and saved bytes by formula", "[llama][gemma]") {
  // A small Gemma-2-shaped model against the same Llama without Gemma's
  // pieces: h 128, 4 heads of 32, 2 KV heads, f 352, V 1024.
  const LlamaConfig base{.name = "base", .layers = 2, .hidden = 128, .heads = 4, .kv_heads = 2, .intermediate = 352, .vocab = 1024,
                         .seq_len = 128, .tied_head = true};
  LlamaConfig gemma = base;
  gemma.name = "gemma";
  gemma.gemma_norms = gemma.gelu = gemma.embed_scale = true;
  gemma.attn_softcap = 50;
  gemma.final_softcap = 30;
  const std::int64_t b = 2, s = 128, t = b * s, h = 128, v = 1024, e = 2;
  const auto l = make_llama(base)->layers(shape(b, s, e));
  const auto g = make_llama(gemma)->layers(shape(b, s, e));
  // Four norms of h where Llama has two.
  CHECK(g[1].params - l[1].params == 2 * h);
  CHECK(g[1].param_tensors - l[1].param_tensors == 2);
  // Saved: four Gemma norms, each its fp32 input and output (8 t h) and the
  // rsqrt (4 t), where Llama's two keep (4 + e) t h + 4 t; the soft cap's
  // tanh output over the eager scores (e b a s^2).
  const std::int64_t norms = 4 * (8 * t * h + 4 * t) - 2 * ((4 + e) * t * h + 4 * t);
  const std::int64_t softcap = e * b * 4 * s * s;
  CHECK(g[1].saved_bytes - l[1].saved_bytes == norms + softcap);
  // Under fused attention the cap is inside the kernel: only the norms differ.
  auto wf = shape(b, s, e);
  wf.flash_attention = true;
  CHECK(make_llama(gemma)->layers(wf)[1].saved_bytes - make_llama(base)->layers(wf)[1].saved_bytes == norms);
  auto names = [](const sim::Layer& layer) {
    std::vector<std::string> out;
    for (const auto& k : layer.forward) out.push_back(k.name);
    return out;
  };
  const auto gn = names(g[1]);
  // Sandwich norms: the attention's output normalised before its residual,
  // the MLP's input after it and its output before its residual.
  const std::vector<std::string> tail{"attn.o_proj", "post_attention_layernorm", "attn.residual", "pre_feedforward_layernorm", "mlp.gate_up",
                                      "mlp.geglu", "mlp.down", "post_feedforward_layernorm", "mlp.residual"};
  REQUIRE(gn.size() >= tail.size());
  CHECK(std::vector<std::string>(gn.end() - static_cast<std::ptrdiff_t>(tail.size()), gn.end()) == tail);
  // The embedding scaled by sqrt(h); the head's norm keeps 8 t h where
  // Llama's keeps (4 + e) t h, and the final soft cap its tanh over the
  // logits (e t v).
  CHECK(names(g[0]) == std::vector<std::string>{"embed.gather", "embed.scale"});
  CHECK(g.back().saved_bytes - l.back().saved_bytes == (8 - (4 + e)) * t * h + e * t * v);
  CHECK(names(g.back())[2] == "logits.softcap");
}

TEST_CASE("Gemma configs dtsim cannot model are one line each", "[llama][gemma]") {
  test::TempDir dir("gemma-bad");
  const std::string g2 = slurp(hf("gemma-2-9b"));
  // Gemma 2's keys at the top of an image-and-text config: its head is no
  // Gemma3ForConditionalGeneration; Gemma 1 is not read.
  std::string mm = g2;
  mm.replace(mm.find("\"gemma2\""), 8, "\"gemma3\"");
  CHECK(error_of([&] { load_model(write_json(dir, mm)); })
            .find("config.architectures: 'Gemma2ForCausalLM' is not a head dtsim models for model_type gemma3; valid: "
                  "Gemma3ForConditionalGeneration") != std::string::npos);
  std::string g1 = g2;
  g1.replace(g1.find("\"gemma2\""), 8, "\"gemma\"");
  CHECK(error_of([&] { load_model(write_json(dir, g1)); }).find("config.model_type: 'gemma' (Gemma 1) is not supported") != std::string::npos);
  std::string relu = g2;
  relu.replace(relu.find("\"hidden_activation\": \"gelu_pytorch_tanh\""), std::string("\"hidden_activation\": \"gelu_pytorch_tanh\"").size(),
               "\"hidden_activation\": \"relu\"");
  CHECK(error_of([&] { load_model(write_json(dir, relu)); }).find("config.hidden_activation: 'relu' is not modelled; valid: gelu_pytorch_tanh") !=
        std::string::npos);
  // Our YAML: global layers among none that slide.
  const std::string yaml = dir.file("model.yaml");
  std::ofstream(yaml) << "family: llama\nlayers: 2\nhidden: 64\nheads: 4\nintermediate: 128\nvocab: 256\nglobal_every: 2\n";
  CHECK(error_of([&] { load_model(yaml); }).find("global_every: 2 needs a sliding_window or an attention_chunk for the other layers") != std::string::npos);
}

// ---- gpt-oss (Note [gpt-oss] in models/src/llama.cpp) ---------------------------

namespace {

/// GptOssForCausalLM's count (tests/data/hf/PARAMS.md): q/k/v/o with biases,
/// a sink a head, two norms, the router with its bias, E experts with
/// gate_up (h x 2I + 2I) and down (I x h + h), an untied head.
std::int64_t gpt_oss_params(std::int64_t layers, std::int64_t h, std::int64_t a, std::int64_t kv, std::int64_t d, std::int64_t i,
                            std::int64_t experts, std::int64_t v) {
  const std::int64_t attention = (h * a * d + a * d) + 2 * (h * kv * d + kv * d) + (a * d * h + h) + a;
  const std::int64_t expert = 2 * h * i + 2 * i + i * h + h;
  return 2 * v * h + h + layers * (attention + 2 * h + (h * experts + experts) + experts * expert);
}

}  // namespace

TEST_CASE("gpt-oss's parameters equal HuggingFace's and the model card's, from config.json and built in", "[llama][gpt-oss]") {
  // The model card's 20.91B and 116.83B.
  CHECK(gpt_oss_params(24, 2880, 64, 8, 64, 2880, 32, 201088) == 20'914'757'184);
  CHECK(gpt_oss_params(36, 2880, 64, 8, 64, 2880, 128, 201088) == 116'829'156'672);
  CHECK(load_model("gpt-oss-20b")->parameters() == 20'914'757'184);
  CHECK(load_model("gpt-oss-120b")->parameters() == 116'829'156'672);
  CHECK(load_model(hf("gpt-oss-20b"))->parameters() == 20'914'757'184);
  // The hub file's layers are the built-in's: layer 0 slides over 128 keys,
  // layer 1 sees them all; sinks, the clamp at 7, GptOssRMSNorm, the router's bias.
  const sim::WorkloadShape w = shape(1, 4096, 2);
  const auto a = load_model(hf("gpt-oss-20b"))->layers(w), b = load_model("gpt-oss-20b")->layers(w);
  REQUIRE(a.size() == b.size());
  REQUIRE(a.size() == 26);
  for (std::size_t i = 0; i < a.size(); ++i) CHECK(a[i].signature == b[i].signature);
  CHECK(a[1].signature.find(",sw=128") != std::string::npos);
  CHECK(a[2].signature.find(",sw=") == std::string::npos);
  for (const char* key : {",sink=1", ",swl=7000000", ",fnw=1", ",rb=1", ",E=32,k=4"}) CHECK(a[1].signature.find(key) != std::string::npos);
  CHECK(a.back().signature.find(",fnw=1") != std::string::npos);
}

TEST_CASE("gpt-oss's clamped SwiGLU: seven passes and six tensors kept where SiLU's takes two and three", "[llama][gpt-oss]") {
  // moe-tiny (h 128, 4 experts of fe 176, top-2) at b 1, s 128 in fp32: t =
  // 128 tokens, 256 routed rows at ep 1 (balanced), n = 256 x 176 = 45,056
  // elements of the experts' intermediate. Composite ops: SiLU's SwiGLU
  // reads 2 and writes 2 e an element (6 FLOPs), keeps 3e + g; the clamped
  // one reads 9 and writes 7 (12 FLOPs), keeps 6e + g: 3 e n more
  // (Note [gpt-oss]). Backward passes twice forward's bytes and FLOPs.
  const double e = 4, n = 256 * 176;
  const sim::WorkloadShape w = shape(1, 128, 4);
  const auto plain = load_model("moe-tiny")->layers(w);
  const auto oss = load_model("moe-tiny", {sim::parse_override("model.swiglu_limit=7")})->layers(w);
  for (std::size_t i : {std::size_t{1}, std::size_t{2}}) {
    const KernelSums p = sums(plain[i]), o = sums(oss[i]);
    CHECK(static_cast<double>(oss[i].saved_bytes - plain[i].saved_bytes) == Approx(3 * e * n));
    CHECK(o.fwd_bytes - p.fwd_bytes == Approx(12 * e * n));
    CHECK(o.bwd_bytes - p.bwd_bytes == Approx(24 * e * n));
    CHECK(o.fwd_flops - p.fwd_flops == Approx(6 * n));
    CHECK(oss[i].params == plain[i].params);
  }
  // Megatron-Core's fused kernel (weighted_bias_quick_geglu_impl) keeps its
  // input as the fused SwiGLU does: the same bytes kept, and one pass.
  sim::WorkloadShape fused = w;
  fused.fused_kernels = true;
  const auto pf = load_model("moe-tiny")->layers(fused), of = load_model("moe-tiny", {sim::parse_override("model.swiglu_limit=7")})->layers(fused);
  CHECK(of[1].saved_bytes == pf[1].saved_bytes);
  CHECK(sums(of[1]).fwd_bytes == Approx(sums(pf[1]).fwd_bytes));
  // A dense block's MLP takes it too: t f = 128 x 352 elements.
  const auto dense = load_model("llama-tiny")->layers(w), clamped = load_model("llama-tiny", {sim::parse_override("model.swiglu_limit=7")})->layers(w);
  CHECK(static_cast<double>(clamped[1].saved_bytes - dense[1].saved_bytes) == Approx(3 * e * 128 * 352));
}

TEST_CASE("gpt-oss's sinks: a logit a head, and eager attention's softmax in the scores' dtype", "[llama][gpt-oss]") {
  // llama-tiny (4 heads, 2 KV heads) at b 1, s 128 in bf16: 4 x 128 x 128 =
  // 65,536 scores in 512 rows. HF's Llama eager softmax upcasts: it keeps
  // the fp32 output and the bf16 cast, 6 bytes a score. gpt-oss's keeps its
  // bf16 output over the rows one wider (2 x 66,048) and max's int64
  // indices (8 a row): 2 x 65,536 + 10 x 512 - 6 x 65,536 = -257,024 bytes.
  const double scores = 65'536, rows = 512, e = 2, wide = scores + rows;
  const sim::WorkloadShape w = shape(1, 128, 2);
  const auto plain = load_model("llama-tiny")->layers(w);
  const auto oss = load_model("llama-tiny", {sim::parse_override("model.attention_sinks=true")})->layers(w);
  for (std::size_t i : {std::size_t{1}, std::size_t{2}}) {
    CHECK(static_cast<double>(oss[i].saved_bytes - plain[i].saved_bytes) == Approx(2 * scores + 10 * rows - 6 * scores));
    CHECK(oss[i].params - plain[i].params == 4);
    // The sink column joined (read the scores, write them one wider), each
    // row's max read and subtracted (read, read and write), the softmax over
    // the wider rows: e (scores + 4 wide + 2 rows) bytes more forward.
    CHECK(sums(oss[i]).fwd_bytes - sums(plain[i]).fwd_bytes == Approx(e * (scores + 4 * wide + 2 * rows)));
  }
  CHECK(load_model("llama-tiny", {sim::parse_override("model.attention_sinks=true")})->parameters() -
            load_model("llama-tiny")->parameters() ==
        8);
  // A fused kernel takes the column in place: the same bytes kept.
  sim::WorkloadShape flash = w;
  flash.flash_attention = true;
  CHECK(load_model("llama-tiny", {sim::parse_override("model.attention_sinks=true")})->layers(flash)[1].saved_bytes ==
        load_model("llama-tiny")->layers(flash)[1].saved_bytes);
}

TEST_CASE("GptOssRMSNorm keeps its fp32 output for the weight's product: 4 bytes an element more in 16 bits", "[llama][gpt-oss]") {
  // llama-tiny at b 1, s 128 in bf16: t h = 16,384 elements a norm. Llama's
  // norm keeps x in fp32 and the normalised cast (4 + 2 an element),
  // GptOssRMSNorm x and the normalised fp32 (8): two norms a block, one in the head.
  const double th = 128 * 128;
  const sim::WorkloadShape w = shape(1, 128, 2);
  const auto plain = load_model("llama-tiny")->layers(w);
  const auto oss = load_model("llama-tiny", {sim::parse_override("model.fp32_norm_weight=true")})->layers(w);
  CHECK(static_cast<double>(oss[1].saved_bytes - plain[1].saved_bytes) == Approx(2 * 2 * th));
  CHECK(static_cast<double>(oss.back().saved_bytes - plain.back().saved_bytes) == Approx(2 * th));
  // In fp32 the cast is the fp32 tensor itself: nothing more.
  const sim::WorkloadShape f32 = shape(1, 128, 4);
  CHECK(load_model("llama-tiny", {sim::parse_override("model.fp32_norm_weight=true")})->layers(f32)[1].saved_bytes ==
        load_model("llama-tiny")->layers(f32)[1].saved_bytes);
}

TEST_CASE("bad gpt-oss input: one line naming the key and what is valid", "[llama][gpt-oss]") {
  CHECK_THAT(error_of([] { load_model("gemma-tiny", {sim::parse_override("model.swiglu_limit=7")}); }),
             Catch::Contains("model.swiglu_limit: is gpt-oss's clamped SwiGLU and gelu: true Gemma's GeGLU; set only one"));
  CHECK_THAT(error_of([] { load_model("gemma-tiny", {sim::parse_override("model.fp32_norm_weight=true")}); }),
             Catch::Contains("model.fp32_norm_weight: is gpt-oss's RMSNorm and gemma_norms Gemma's norms; set only one"));
  CHECK_THAT(error_of([] { load_model("deepseek-v3", {sim::parse_override("model.attention_sinks=true")}); }),
             Catch::Contains("model.attention_sinks: true is gpt-oss's grouped-query attention"));
  CHECK_THAT(error_of([] { load_model("llama-tiny", {sim::parse_override("model.swiglu_limit=1e-7")}); }),
             Catch::Contains("model.swiglu_limit: below 1e-6; valid: 0 (SiLU's SwiGLU) or 1e-6 to 1e6"));
  test::TempDir dir("gpt-oss-bad");
  auto with = [&](const std::string& from, const std::string& to) { return edited_hf(dir, "gpt-oss-20b", from, to); };
  CHECK_THAT(error_of([&] { load_model(with("\"num_experts_per_tok\": 4", "\"num_experts_per_tok\": 40")); }),
             Catch::Contains("config.num_experts_per_tok: 40 exceeds the 32 local experts"));
  // The config's range is the model's (2^20 experts): refused at its line,
  // where 2,000,000 had passed the config's check and failed the model's
  // under another key with another range.
  CHECK_THAT(error_of([&] { load_model(with("\"num_local_experts\": 32", "\"num_local_experts\": 2000000")); }),
             Catch::Contains("config.num_local_experts: 2000000 is out of range; valid: 2 to 1048576"));
  CHECK_THAT(error_of([&] { load_model(with("\"GptOssForCausalLM\"", "\"GptOssModel\"")); }), Catch::Contains("valid: GptOssForCausalLM"));
  // Layer 2 global where every other layer is: not a pattern dtsim models.
  CHECK_THAT(error_of([&] { load_model(with("\"full_attention\",\n    \"sliding_attention\"", "\"full_attention\",\n    \"full_attention\"")); }),
             Catch::Contains("config.layer_types: layer 2 is 'full_attention'"));
  // A list shorter than the layers (HF indexes layer_types by layer).
  CHECK_THAT(error_of([&] { load_model(with("\"sliding_attention\",\n    \"full_attention\",\n", "")); }),
             Catch::Contains("config.layer_types: lists 22 layers; valid: one for each of the 24 (num_hidden_layers)"));
  // HF's sliding mask cannot run without a window.
  CHECK_THAT(error_of([&] { load_model(with("\"sliding_window\": 128", "\"sliding_window\": null")); }),
             Catch::Contains("config.sliding_window: null, which GptOssModel's sliding_attention layers cannot run"));
}

TEST_CASE("gpt-oss's config defaults are GptOssConfig's: absent keys are gpt-oss-120b's, null ones HF's own rule", "[llama][gpt-oss]") {
  test::TempDir dir("gpt-oss-defaults");
  // Nothing but the type: GptOssConfig's defaults, gpt-oss-120b's shape.
  CHECK(load_model(write_json(dir, R"({"architectures": ["GptOssForCausalLM"], "model_type": "gpt_oss"})"))->parameters() ==
        116'829'156'672);
  // num_key_value_heads null: one a head (__post_init__), 64 for 8.
  CHECK(load_model(write_json(dir, R"({"model_type": "gpt_oss", "num_key_value_heads": null})"))->parameters() ==
        gpt_oss_params(36, 2880, 64, 64, 64, 2880, 128, 201088));
  // head_dim null: hidden_size // num_attention_heads = 45.
  CHECK(load_model(write_json(dir, R"({"model_type": "gpt_oss", "head_dim": null})"))->parameters() ==
        gpt_oss_params(36, 2880, 64, 8, 45, 2880, 128, 201088));
  // num_experts is num_local_experts' alias (attribute_map).
  CHECK(load_model(write_json(dir, R"({"model_type": "gpt_oss", "num_hidden_layers": 24, "num_experts": 32})"))->parameters() ==
        20'914'757'184);
}

TEST_CASE("null in a HuggingFace config is the class's None, not its default: Gemma 2's soft caps, DeepSeek's q_lora_rank", "[llama]") {
  // Gemma2Config: attn_logit_softcapping None caps nothing (Gemma2Attention
  // skips it), where an absent key is 50; DeepseekV3Config: q_lora_rank None
  // is a full q_proj (DeepSeek-V2-Lite's config), where an absent key is 1536.
  test::TempDir dir("hf-nulls");
  auto with = [&](const std::string& folder, const std::string& from, const std::string& to) { return edited_hf(dir, folder, from, to); };
  const sim::WorkloadShape w = shape(1, 4096, 2);
  const auto capped = load_model(hf("gemma-2-9b"))->layers(w);
  const auto none = load_model(with("gemma-2-9b", "\"attn_logit_softcapping\": 50.0", "\"attn_logit_softcapping\": null"))->layers(w);
  CHECK(capped[1].signature.find(",sc=50") != std::string::npos);
  CHECK(none[1].signature.find(",sc=") == std::string::npos);
  const auto lite = load_model(with("deepseek-v3", "\"q_lora_rank\": 1536", "\"q_lora_rank\": null"))->layers(w);
  CHECK(lite[1].signature.find(",qr=0,") != std::string::npos);
  CHECK(load_model(hf("deepseek-v3"))->layers(w)[1].signature.find(",qr=1536,") != std::string::npos);
}

// ---- GLM-4.5 and Kimi K2 (Note [GLM-4.5] in models/src/llama.cpp) -------------

TEST_CASE("GLM-4.5's and Kimi K2's parameters equal HuggingFace's, from config.json and built in", "[llama][glm]") {
  // Glm4MoeForCausalLM (tests/data/hf/PARAMS.md): q/k/v biases, no o_proj
  // bias, q/k norms on GLM-4.5 only, dense first layers, E routed experts
  // and one shared of Ie, an untied head.
  auto glm = [](std::int64_t h, std::int64_t layers, std::int64_t dense, std::int64_t a, std::int64_t kv, std::int64_t d, std::int64_t f,
                std::int64_t fe, std::int64_t experts, std::int64_t v, bool qk) {
    const std::int64_t attention = h * a * d + a * d + 2 * (h * kv * d + kv * d) + a * d * h + (qk ? 2 * d : 0);
    const std::int64_t dense_layer = attention + 2 * h + 3 * h * f;
    const std::int64_t moe_layer = attention + 2 * h + experts * h + experts * 3 * h * fe + 3 * h * fe;
    return dense * dense_layer + (layers - dense) * moe_layer + 2 * v * h + h;
  };
  CHECK(glm(4096, 46, 1, 96, 8, 128, 10944, 1408, 128, 151552, false) == 106'852'245'504);
  CHECK(glm(5120, 92, 3, 96, 8, 128, 12288, 1536, 160, 151552, true) == 352'797'814'784);
  CHECK(load_model("glm-4.5-air")->parameters() == 106'852'245'504);
  CHECK(load_model("glm-4.5")->parameters() == 352'797'814'784);
  CHECK(load_model(hf("glm-4.5-air"))->parameters() == 106'852'245'504);
  const sim::WorkloadShape w = shape(1, 4096, 2);
  const auto a = load_model(hf("glm-4.5-air"))->layers(w), b = load_model("glm-4.5-air")->layers(w);
  REQUIRE(a.size() == b.size());
  for (std::size_t i = 0; i < a.size(); ++i) CHECK(a[i].signature == b[i].signature);
  CHECK(a[1].signature.rfind("llama.block:", 0) == 0);  // layer 0 dense
  CHECK(a[2].signature.rfind("moe.block:", 0) == 0);
  CHECK(a[2].signature.find(",qkvb=1,ob=0,") != std::string::npos);
  CHECK(a[2].signature.find(",fs=1408,") != std::string::npos);
  // GLM-4.5's q/k norms from use_qk_norm, its three dense layers.
  test::TempDir dir("glm");
  std::string text = slurp(hf("glm-4.5-air"));
  for (const auto& [from, to] : {std::pair<std::string, std::string>{"\"hidden_size\": 4096", "\"hidden_size\": 5120"},
                                 {"\"intermediate_size\": 10944", "\"intermediate_size\": 12288"},
                                 {"\"moe_intermediate_size\": 1408", "\"moe_intermediate_size\": 1536"},
                                 {"\"n_routed_experts\": 128", "\"n_routed_experts\": 160"},
                                 {"\"num_hidden_layers\": 46", "\"num_hidden_layers\": 92"},
                                 {"\"first_k_dense_replace\": 1", "\"first_k_dense_replace\": 3"},
                                 {"\"use_qk_norm\": false", "\"use_qk_norm\": true"}}) {
    REQUIRE(text.find(from) != std::string::npos);
    text.replace(text.find(from), from.size(), to);
  }
  CHECK(load_model(write_json(dir, text))->parameters() == 352'797'814'784);
  // Kimi K2 is DeepSeek-V3's architecture (model_type kimi_k2): by the
  // formula that gives DeepSeek-V3's 671,026,404,352, 1,026,408,209,408.
  CHECK(load_model("deepseek-v3")->parameters() == 671'026'404'352);
  CHECK(load_model("kimi-k2")->parameters() == 1'026'408'209'408);
  const std::string kimi = write_json(dir, R"({"architectures": ["DeepseekV3ForCausalLM"], "model_type": "kimi_k2", "hidden_size": 7168,
    "intermediate_size": 18432, "moe_intermediate_size": 2048, "num_hidden_layers": 61, "num_attention_heads": 64,
    "num_key_value_heads": 64, "n_routed_experts": 384, "n_shared_experts": 1, "num_experts_per_tok": 8, "first_k_dense_replace": 1,
    "n_group": 1, "topk_group": 1, "q_lora_rank": 1536, "kv_lora_rank": 512, "qk_nope_head_dim": 128, "qk_rope_head_dim": 64,
    "v_head_dim": 128, "vocab_size": 163840, "max_position_embeddings": 131072, "tie_word_embeddings": false})");
  CHECK(load_model(kimi)->parameters() == 1'026'408'209'408);
  const auto k1 = load_model(kimi)->layers(w), k2 = load_model("kimi-k2")->layers(w);
  REQUIRE(k1.size() == k2.size());
  for (std::size_t i = 0; i < k1.size(); ++i) CHECK(k1[i].signature == k2[i].signature);
}

// ---- Llama 4 (Note [Llama 4] in models/src/llama.cpp) ----------------------------

namespace {

/// The kernel of that name among `ks` (REQUIREd).
const sim::Kernel& kernel_named(const std::vector<sim::Kernel>& ks, const std::string& name) {
  const auto it = std::find_if(ks.begin(), ks.end(), [&](const sim::Kernel& k) { return k.name == name; });
  REQUIRE(it != ks.end());
  return *it;
}
bool has_kernel(const std::vector<sim::Kernel>& ks, const std::string& name) {
  return std::any_of(ks.begin(), ks.end(), [&](const sim::Kernel& k) { return k.name == name; });
}

/// Scout's config.json made Maverick's (tests/data/hf/README.md): 128
/// experts on every other layer (1, 3, ...), no q/k norms.
std::string maverick_json() {
  std::string text = slurp(hf("llama-4-scout"));
  auto swap = [&](const std::string& from, const std::string& to) {
    REQUIRE(text.find(from) != std::string::npos);
    text.replace(text.find(from), from.size(), to);
  };
  swap("\"num_local_experts\": 16", "\"num_local_experts\": 128");
  swap("\"interleave_moe_layer_step\": 1", "\"interleave_moe_layer_step\": 2");
  swap("\"use_qk_norm\": true", "\"use_qk_norm\": false");
  swap("\"max_position_embeddings\": 262144", "\"max_position_embeddings\": 1048576");
  const std::size_t at = text.find("\"moe_layers\": ["), end = text.find(']', at);
  std::string odd = "\"moe_layers\": [1";
  for (int i = 3; i < 48; i += 2) odd += ", " + std::to_string(i);
  text.replace(at, end + 1 - at, odd + "]");
  return text;
}

}  // namespace

TEST_CASE("Llama 4's parameters equal HuggingFace's, from config.json and built in", "[llama][llama4]") {
  // Llama4ForConditionalGeneration's language model (tests/data/hf/PARAMS.md):
  // attention h(a d) + 2 h(kv d) + (a d) h, no biases; two RMSNorms; a MoE
  // layer's router E h, E experts of 3 h Ie and one shared of 3 h Ie; a
  // dense layer 3 h I; an untied head.
  auto llama4 = [](std::int64_t experts, std::int64_t moe_layers) {
    const std::int64_t h = 5120, attention = h * 40 * 128 + 2 * h * 8 * 128 + 40 * 128 * h;
    const std::int64_t moe = attention + 2 * h + experts * h + experts * 3 * h * 8192 + 3 * h * 8192;
    const std::int64_t dense = attention + 2 * h + 3 * h * 16384;
    return moe_layers * moe + (48 - moe_layers) * dense + 2 * 202048 * h + h;
  };
  CHECK(llama4(16, 48) == 107'769'861'120);
  CHECK(llama4(128, 24) == 400'711'848'960);
  CHECK(load_model("llama-4-scout")->parameters() == 107'769'861'120);
  CHECK(load_model("llama-4-maverick")->parameters() == 400'711'848'960);
  // One routed expert and the shared one a token: the cards' "17B active".
  CHECK(load_model("llama-4-scout")->active_parameters() == 17'172'894'720);
  CHECK(load_model("llama-4-maverick")->active_parameters() == 17'184'691'200);
  // The released config.json (model_type llama4) is read through its text_config.
  CHECK(load_model(hf("llama-4-scout"))->parameters() == 107'769'861'120);
  test::TempDir dir("llama4");
  const std::string maverick = write_json(dir, maverick_json());
  CHECK(load_model(maverick)->parameters() == 400'711'848'960);
  sim::WorkloadShape w = shape(1, 8192, 2);
  w.flash_attention = true;
  for (const auto& [file, name] : {std::pair{hf("llama-4-scout"), "llama-4-scout"}, std::pair{maverick, "llama-4-maverick"}}) {
    INFO(name);
    const auto a = load_model(file)->layers(w), b = load_model(name)->layers(w);
    REQUIRE(a.size() == b.size());
    for (std::size_t i = 0; i < a.size(); ++i) CHECK(a[i].signature == b[i].signature);
  }
  // Scout: experts everywhere, chunks and L2 norms on blocks 0-2, NoPE on 3.
  const auto scout = load_model("llama-4-scout")->layers(w);
  for (int i = 0; i < 48; ++i) {
    const std::string& sig = scout[static_cast<std::size_t>(i) + 1].signature;
    INFO(i << ": " << sig);
    CHECK(sig.rfind("moe.block:", 0) == 0);
    CHECK(sig.find(",E=16,k=1,fe=8192,fs=8192,") != std::string::npos);
    const bool nope = (i + 1) % 4 == 0;
    CHECK((sig.find(",chunk=8192,l2qk=1") != std::string::npos) == !nope);
    CHECK((sig.find(",nope=1,tt=1") != std::string::npos) == nope);
  }
  // Maverick: dense blocks of 16384 at even indices, no L2 norms.
  const auto mav = load_model("llama-4-maverick")->layers(w);
  CHECK(mav[1].signature.rfind("llama.block:", 0) == 0);
  CHECK(mav[1].signature.find(",f=16384,") != std::string::npos);
  CHECK(mav[2].signature.rfind("moe.block:", 0) == 0);
  CHECK(mav[2].signature.find(",E=128,k=1,") != std::string::npos);
  CHECK(mav[4].signature.find(",nope=1,tt=1") != std::string::npos);
  for (const auto& l : mav) CHECK(l.signature.find("l2qk") == std::string::npos);
}

TEST_CASE("Llama 4's chunked attention, NoPE layers and L2 q/k norms, priced by hand", "[llama][llama4]") {
  // A fused kernel's FLOPs: 2 b a s_q s_k (d + d) over the scores it
  // computes. Chunks of c = 8192 in s = 32768 tokens: 4 c(c+1)/2 of s^2;
  // in s = 10000: c(c+1)/2 + 1808 x 1809 / 2; a NoPE global layer the
  // causal half (a = 40, d = 128, b = 1, tp 1).
  const auto model = load_model("llama-4-scout");
  auto flash = [&](std::int64_t s, int block) {
    sim::WorkloadShape w = shape(1, s, 2);
    w.flash_attention = true;
    return kernel_named(model->layers(w)[static_cast<std::size_t>(block) + 1].forward, "attn.flash").flops;
  };
  CHECK(flash(32768, 0) == Approx(2.0 * 40 * 256 * (4.0 * 8192 * 8193 / 2)).epsilon(1e-12));
  CHECK(flash(10000, 0) == Approx(2.0 * 40 * 256 * (8192.0 * 8193 / 2 + 1808.0 * 1809 / 2)).epsilon(1e-12));
  CHECK(flash(32768, 3) == Approx(2.0 * 40 * 256 * 32768.0 * 32768 / 2).epsilon(1e-12));
  // At 8192 tokens a chunk is the whole sequence: the causal half, as global.
  CHECK(flash(8192, 0) == Approx(flash(8192, 3)).epsilon(1e-12));

  // The kernels: rotary and the L2 norms on local layers; the global
  // (NoPE) layer turns nothing and scales its queries instead, two
  // composite passes over t a d elements, (e + 4) bytes read and written.
  sim::WorkloadShape w = shape(2, 4096, 2);
  w.flash_attention = true;
  const auto layers = model->layers(w);
  const auto& local = layers[1].forward;
  const auto& global = layers[4].forward;
  CHECK(has_kernel(local, "attn.rotary"));
  CHECK(has_kernel(local, "attn.qk_l2norm"));
  CHECK_FALSE(has_kernel(local, "attn.temperature"));
  CHECK_FALSE(has_kernel(global, "attn.rotary"));
  CHECK_FALSE(has_kernel(global, "attn.qk_l2norm"));
  const std::int64_t t = 2 * 4096, q = t * 40 * 128, kv = t * 8 * 128;
  CHECK(kernel_named(global, "attn.temperature").bytes == (2 + 4) * q + (4 + 2) * q);
  // The L2 norms keep each element's fp32 copy and a rsqrt a head: the
  // local block keeps 4 (q + kv) + 4 t (a + kv) bytes more than Maverick's
  // shape without them (the same block otherwise: Scout's with l2_qk_norm off).
  const auto plain = load_model("llama-4-scout", {sim::parse_override("model.l2_qk_norm=false")})->layers(w);
  CHECK(layers[1].saved_bytes - plain[1].saved_bytes == 4 * (q + kv) + 4 * t * (40 + 8));
  CHECK(layers[4].saved_bytes == plain[4].saved_bytes);  // NoPE layers have none either way
  // Chunks change the work, not what eager attention keeps (it masks the whole square).
  sim::WorkloadShape eager = shape(1, 16384, 2);
  const auto unchunked = load_model("llama-4-scout", {sim::parse_override("model.attention_chunk=0")})->layers(eager);
  CHECK(model->layers(eager)[1].saved_bytes == unchunked[1].saved_bytes);
  CHECK(model->layers(eager)[1].forward_flops() == Approx(unchunked[1].forward_flops()).epsilon(1e-12));
}

TEST_CASE("Llama 4's config.json keys dtsim does not model, and contradictions, are refused in one line", "[llama][llama4][bad-input]") {
  test::TempDir dir("llama4-bad");
  auto with = [&](const std::string& from, const std::string& to) { return edited_hf(dir, "llama-4-scout", from, to); };
  CHECK_THAT(error_of([&] { load_model(with("\"interleave_moe_layer_step\": 1", "\"interleave_moe_layer_step\": 2")); }),
             Catch::Contains("config.text_config.moe_layers") && Catch::Contains("interleave_moe_layer_step"));
  CHECK_THAT(error_of([&] { load_model(with("\"no_rope_layers\": [\n      1,\n      1,\n      1,\n      0", "\"no_rope_layers\": [\n      1,\n      1,\n      0,\n      1")); }),
             Catch::Contains("config.text_config.no_rope_layers") && Catch::Contains("no_rope_layer_interval"));
  CHECK_THAT(error_of([&] { load_model(with("\"hidden_act\": \"silu\"", "\"hidden_act\": \"gelu\"")); }),
             Catch::Contains("config.text_config.hidden_act") && Catch::Contains("valid: silu"));
  CHECK_THAT(error_of([&] { load_model(with("\"model_type\": \"llama4_text\"", "\"model_type\": \"llama\"")); }),
             Catch::Contains("text_config.model_type") && Catch::Contains("valid: llama4_text"));
  CHECK_THAT(error_of([&] { load_model(write_json(dir, R"({"model_type": "llama4"})")); }), Catch::Contains("config.text_config: missing"));
  CHECK_THAT(error_of([&] { load_model(with("\"no_rope_layers\": [", "\"no_rope_layers\": 7, \"listed_before\": [")); }),
             Catch::Contains("config.text_config.no_rope_layers: expected a list"));
  CHECK_THAT(error_of([&] { load_model(with("\"use_cache\"", "\"layer_types\": [\"chunked_attention\"], \"use_cache\"")); }),
             Catch::Contains("config.text_config.layer_types: expected a list of one attention type a layer, 48"));
  CHECK_THAT(error_of([&] { load_model(with("\"attn_temperature_tuning\": 4", "\"attn_temperature_tuning\": \"yes\"")); }),
             Catch::Contains("config.text_config.attn_temperature_tuning: is a string"));
  // use_qk_norm null is HF's None: no L2 norms.
  for (const auto& l : load_model(with("\"use_qk_norm\": true", "\"use_qk_norm\": null"))->layers(shape(1, 4096, 2))) {
    CHECK(l.signature.find("l2qk") == std::string::npos);
  }
  // attn_temperature_tuning: the release's 4 is on, false and null off;
  // attention_chunk_size null: every layer sees all keys before it.
  sim::WorkloadShape w = shape(1, 4096, 2);
  w.flash_attention = true;
  CHECK(has_kernel(load_model(hf("llama-4-scout"))->layers(w)[4].forward, "attn.temperature"));
  CHECK_FALSE(has_kernel(load_model(with("\"attn_temperature_tuning\": 4", "\"attn_temperature_tuning\": false"))->layers(w)[4].forward,
                         "attn.temperature"));
  CHECK_FALSE(has_kernel(load_model(with("\"attn_temperature_tuning\": 4", "\"attn_temperature_tuning\": null"))->layers(w)[4].forward,
                         "attn.temperature"));
  for (const auto& l : load_model(with("\"attention_chunk_size\": 8192", "\"attention_chunk_size\": null"))->layers(w)) {
    CHECK(l.signature.find("chunk=") == std::string::npos);
  }
  // Our YAML's keys contradicting each other.
  auto yaml_error = [](const std::string& set) {
    return error_of([&] { load_model("llama-4-scout", {sim::parse_override(set)}); });
  };
  CHECK_THAT(yaml_error("model.sliding_window=128"), Catch::Contains("model.attention_chunk") && Catch::Contains("contradicts sliding_window"));
  CHECK_THAT(yaml_error("model.qk_norm=true"), Catch::Contains("model.l2_qk_norm") && Catch::Contains("contradicts qk_norm"));
  CHECK_THAT(error_of([] { load_model("llama-tiny", {sim::parse_override("model.nope_global=true")}); }),
             Catch::Contains("model.nope_global") && Catch::Contains("needs global_every"));
  CHECK_THAT(error_of([] { load_model("llama-tiny", {sim::parse_override("model.attn_temperature=true")}); }),
             Catch::Contains("model.attn_temperature") && Catch::Contains("nope_global"));
}

TEST_CASE("model FLOPs count no key beyond a sliding window or outside an attention chunk (Note [Model FLOPs of local attention])",
          "[llama][attention]") {
  // Eager attention computes every query against every key: 2 b a s s d
  // for the scores and as much for the weighted values, a layer's forward.
  // The model FLOPs (3 x the forward's, predict's MFU) count s x w of them
  // for a window w < s, and q c^2 + r^2 of the s^2 for chunks of c (s = q c + r).
  const auto flops = [](const sim::Model& m, std::int64_t s, bool model_flops) {
    sim::WorkloadShape shape;
    shape.seq_len = s;
    shape.act_bytes = 2;
    shape.model_flops = model_flops;
    return m.model_flops(shape);
  };
  // Mistral 7B: 32 layers of 32 heads of 128, every layer local, window 4096.
  const auto mistral = load_model("mistral-7b");
  const double s = 8192, whole = 4 * 32 * 128 * s * s;  // scores and values, one layer, b = 1
  CHECK(flops(*mistral, 8192, false) - flops(*mistral, 8192, true) == Approx(3 * 32 * whole * (1 - 4096 / s)).epsilon(1e-9));
  // Llama 4 Scout: 48 layers of 40 heads of 128, chunks of 8192 in the 36
  // that are not every 4th (global); s = 2 x 8192 + 4096.
  const auto scout = load_model("llama-4-scout");
  const double n = 20480, chunked = 4 * 40 * 128 * n * n;
  const double seen = (2 * 8192.0 * 8192 + 4096.0 * 4096) / (n * n);
  CHECK(flops(*scout, 20480, false) - flops(*scout, 20480, true) == Approx(3 * 36 * chunked * (1 - seen)).epsilon(1e-9));
  // A window as long as the sequence leaves every key in view.
  CHECK(flops(*mistral, 4096, false) == Approx(flops(*mistral, 4096, true)).epsilon(1e-12));
}

TEST_CASE("group-limited routing: n_group divides the routed experts and topk_group is one of the groups", "[llama][moe]") {
  // DeepseekV3TopkRouter views the 256 routed experts' scores as n_group
  // groups of equal size and keeps topk_group of them: 7 groups of 256 do
  // not exist, and 9 of 8 cannot be kept.
  test::TempDir dir("deepseek-groups");
  auto with = [&](const std::string& from, const std::string& to) { return edited_hf(dir, "deepseek-v3", from, to); };
  CHECK_THAT(error_of([&] { load_model(with("\"n_group\": 8", "\"n_group\": 7")); }),
             Catch::Contains("config.n_group: 7 does not divide the 256 routed experts"));
  CHECK_THAT(error_of([&] { load_model(with("\"topk_group\": 4", "\"topk_group\": 9")); }),
             Catch::Contains("config.topk_group: 9 is out of range; valid: 1 to 8"));
  CHECK(load_model(with("\"n_group\": 8", "\"n_group\": 16"))->parameters() == load_model(hf("deepseek-v3"))->parameters());
}

TEST_CASE("DeepSeek-V2 and V2-Lite: V3's layers with DeepseekV2Config's defaults and topk_method (Note [DeepSeek-V2])",
          "[llama][moe]") {
  // tests/data/hf/PARAMS.md: V2-Lite 15,706,484,224 (15.7B), V2 235,741,434,880 (236B).
  CHECK(load_model(hf("deepseek-v2-lite"))->parameters() == 15'706'484'224);
  CHECK(load_model("deepseek-v2-lite")->parameters() == 15'706'484'224);
  CHECK(load_model("deepseek-v2")->parameters() == 235'741'434'880);
  // The hub file and the built-in price the same layers.
  auto w = shape(1, 4096, 2);
  w.ep = 8;  // the all-to-all's routes are a layer's under expert parallelism, DeepEP's dispatcher
  w.moe_deepep = true;
  const auto file = load_model(hf("deepseek-v2-lite"))->layers(w), built = load_model("deepseek-v2-lite")->layers(w);
  REQUIRE(file.size() == built.size());
  REQUIRE(file.size() == 29);  // embedding, 27 blocks, head
  for (std::size_t i = 0; i < file.size(); ++i) CHECK(file[i].signature == built[i].signature);
  // No query latent (q_lora_rank null), 6 of 64 experts from any group.
  CHECK(file[2].signature.find(",qr=0,") != std::string::npos);
  CHECK(file[2].ep_route.top_k == 6);
  CHECK(file[2].ep_route.experts == 64);
  CHECK(file[2].ep_route.node_limit == 0);
  // DeepSeek-V2's device-limited routing: 3 of 8 groups.
  CHECK(load_model("deepseek-v2")->layers(w)[2].ep_route.node_limit == 3);
  test::TempDir dir("deepseek-v2");
  // The hub file with each (from, to) replaced.
  auto with = [&](std::vector<std::pair<std::string, std::string>> edits) {
    std::string text = slurp(hf("deepseek-v2-lite"));
    for (const auto& [from, to] : edits) {
      REQUIRE(text.find(from) != std::string::npos);
      text.replace(text.find(from), from.size(), to);
    }
    return write_json(dir, text);
  };
  const std::pair<std::string, std::string> group_limited{"\"topk_method\": \"greedy\"", "\"topk_method\": \"group_limited_greedy\""};
  const auto limited =
      load_model(with({group_limited, {"\"n_group\": 1", "\"n_group\": 8"}, {"\"topk_group\": 1", "\"topk_group\": 3"}}));
  CHECK(limited->layers(w)[2].ep_route.node_limit == 3);
  // Refused, each at its key: V3's router method, a missing top-k (the
  // class's default is None), a group-limited router without its groups.
  CHECK_THAT(error_of([&] { load_model(with({{"\"topk_method\": \"greedy\"", "\"topk_method\": \"noaux_tc\""}})); }),
             Catch::Contains("topk_method: 'noaux_tc'; valid: greedy, group_limited_greedy"));
  CHECK_THAT(error_of([&] { load_model(with({{"\"num_experts_per_tok\": 6,", ""}})); }),
             Catch::Contains("num_experts_per_tok: missing"));
  CHECK_THAT(error_of([&] { load_model(with({group_limited, {"\"n_group\": 1,", ""}})); }),
             Catch::Contains("n_group: missing: topk_method group_limited_greedy routes within n_group groups"));
}

TEST_CASE("Megatron's recompute modules free what each part keeps beyond its input (Note [Megatron's recompute modules])",
          "[llama][recompute][memory]") {
  const auto m = make_llama(mla_moe_config());
  // bf16 (e 2), Megatron's fused norms and SwiGLU, fused attention (its core
  // keeps nothing to recompute): t = 16 tokens, 16 rows for the norms.
  auto w = shape(1, 16, 2);
  w.fused_kernels = true;
  w.flash_attention = true;
  const std::int64_t t = 16, h = 64, e = 2;
  auto blocks_with = [&](std::uint8_t modules) {
    w.recompute_modules = modules;
    std::vector<sim::Layer> out;
    for (const auto& l : m->layers(w)) {
      if (l.is_block()) out.push_back(l);
    }
    REQUIRE(out.size() == 2);
    return out;
  };
  // A fused RMSNorm keeps its input and rsigma (e t h + 4 t); under
  // layernorm only its input stays: it frees rsigma and the GEMM input it
  // feeds (e t h): 64 + 2,048 = 2,112 a norm.
  const std::int64_t norm = 4 * t + e * t * h;
  // mla_up_proj: each latent's norm keeps beyond its input rsigma (4 t),
  // its up-projection's input (e t r), and Q, K at nope + rope = 12 and V
  // at 8 for 4 heads: 2 x 16 x 4 x (2 x 12 + 8) = 4,096.
  const std::int64_t up = (4 * t + e * t * 32) + (4 * t + e * t * 16) + e * t * 4 * (2 * 12 + 8);
  // mlp: the pre-MLP norm fused into fc1 (its 2,112) and the SwiGLU's
  // gate, up (2 e t f) and down's input (e t f), f 256.
  const std::int64_t mlp = norm + 3 * e * t * 256;
  // moe_act: of the activation's keeps (gate, up, and fc2's input over
  // k t = 32 rows of fe 32) all but fc1's output: fc2's input.
  const std::int64_t act = e * 32 * 32;
  // shared_experts: their SwiGLU's three tensors over t x 48.
  const std::int64_t shared = 3 * e * t * 48;
  CHECK(up == 5760);
  CHECK(mlp == 26688);

  const auto none = blocks_with(0);
  CHECK(none[0].attention_core_bytes == 0);
  CHECK(none[0].attention_core.empty());
  CHECK(none[0].recompute_described == (sim::kRecomputeLayernorm | sim::kRecomputeMlaUpProj | sim::kRecomputeMlp));
  CHECK(none[1].recompute_described == (sim::kRecomputeLayernorm | sim::kRecomputeMlaUpProj | sim::kRecomputeMoeAct |
                                        sim::kRecomputeSharedExperts | sim::kRecomputeMoe));
  // Megatron's default, the attention core, frees nothing from a fused kernel.
  CHECK(blocks_with(sim::kRecomputeModulesDefault)[0].attention_core_bytes == 0);

  auto names = [](const sim::Layer& l) {
    std::vector<std::string> out;
    for (const auto& k : l.attention_core) out.push_back(k.name);
    return out;
  };
  // layernorm: the dense block's input norm (an MLA block's own module);
  // the MoE block's pre-MLP norm too (a dense block's is fc1's).
  const auto ln = blocks_with(sim::kRecomputeLayernorm);
  CHECK(ln[0].attention_core_bytes == norm);
  CHECK(ln[1].attention_core_bytes == 2 * norm);
  CHECK(names(ln[1]) == std::vector<std::string>{"input_layernorm", "post_attention_layernorm"});
  const auto mla = blocks_with(sim::kRecomputeMlaUpProj);
  CHECK(mla[0].attention_core_bytes == up);
  CHECK(mla[1].attention_core_bytes == up);
  CHECK(names(mla[0]) ==
        std::vector<std::string>{"attn.q_a_layernorm", "attn.q_b_proj", "attn.kv_a_layernorm", "attn.kv_b_proj", "attn.rotary"});
  const auto dense = blocks_with(sim::kRecomputeMlp);
  CHECK(dense[0].attention_core_bytes == mlp);
  CHECK(names(dense[0]) == std::vector<std::string>{"post_attention_layernorm", "mlp.gate_up", "mlp.swiglu", "mlp.down"});
  CHECK(dense[1].attention_core_bytes == 0);  // a MoE block has no dense MLP
  const auto moe = blocks_with(sim::kRecomputeMoeAct | sim::kRecomputeSharedExperts);
  CHECK(moe[0].attention_core_bytes == 0);
  CHECK(moe[1].attention_core_bytes == act + shared);
  CHECK(names(moe[1]) == std::vector<std::string>{"moe.experts.swiglu", "moe.shared.gate_up", "moe.shared.swiglu", "moe.shared.down"});
  // moe: the whole MoE layer, all it keeps beyond its input: the router's
  // fp32 probabilities (4 t E) and weights (4 t k), the experts' input
  // (e k t h), their SwiGLU (act's and fc1's output), their outputs for the
  // weighted sum (e k t h) and the shared experts'; its all-to-alls rerun
  // too. moe_act and shared_experts inside it are not counted twice.
  const std::int64_t whole = 4 * t * 4 + 4 * t * 2 + e * 32 * h + (act + 2 * e * 32 * 32) + e * 32 * h + shared;
  CHECK(whole == 19328);
  const auto layer = blocks_with(sim::kRecomputeMoe | sim::kRecomputeMoeAct | sim::kRecomputeSharedExperts);
  CHECK(layer[1].attention_core_bytes == whole);
  CHECK(layer[1].recompute_ep);
  CHECK_FALSE(moe[1].recompute_ep);
  CHECK(names(layer[1]) == std::vector<std::string>{"moe.router", "moe.topk", "moe.permute", "moe.experts.gate_up", "moe.experts.swiglu",
                                                     "moe.experts.down", "moe.unpermute", "moe.shared.gate_up", "moe.shared.swiglu",
                                                     "moe.shared.down"});
  // The parts add, and each is a part of what the block keeps.
  const auto all = blocks_with(0x3F);
  CHECK(all[0].attention_core_bytes == norm + up + mlp);
  CHECK(all[1].attention_core_bytes == 2 * norm + up + act + shared);
  CHECK(all[1].attention_core_bytes < all[1].saved_bytes);
  CHECK(all[1].saved_bytes == none[1].saved_bytes);

  // Eager attention: the core is recomputable, core_attn its part alone.
  w.flash_attention = false;
  const auto core = blocks_with(sim::kRecomputeModulesDefault);
  const auto core_ln = blocks_with(sim::kRecomputeCoreAttn | sim::kRecomputeLayernorm);
  CHECK(core[0].attention_core_bytes > 0);
  CHECK(core[0].recompute_described == (sim::kRecomputeCoreAttn | sim::kRecomputeLayernorm | sim::kRecomputeMlaUpProj | sim::kRecomputeMlp));
  CHECK(core_ln[0].attention_core_bytes == core[0].attention_core_bytes + norm);
  CHECK(blocks_with(sim::kRecomputeLayernorm)[0].attention_core_bytes == norm);
}

TEST_CASE("multi-token prediction: each depth a layer before the head, which runs the shared head over it (Note [Multi-token prediction])",
          "[llama][mtp]") {
  LlamaConfig c = mla_moe_config();
  const auto plain = make_llama(c);
  c.mtp_layers = 1;
  const auto mtp = make_llama(c);
  auto w = shape(1, 16, 2);
  w.fused_kernels = true;
  w.flash_attention = true;
  const std::int64_t t = 16, h = 64, e = 2, v = 100;
  const auto a = plain->layers(w), b = mtp->layers(w);
  REQUIRE(b.size() == a.size() + 1);
  CHECK(mtp->layer_count() == static_cast<int>(b.size()));
  const sim::Layer& depth = b[b.size() - 2];
  const sim::Layer& moe_block = a[2];
  CHECK(depth.name == "mtp.0");
  CHECK(depth.signature == "llama.mtp:" + moe_block.signature.substr(moe_block.signature.find(':') + 1));
  CHECK_FALSE(depth.is_block());  // a pipeline counted in blocks puts it with the head
  // enorm, hnorm and the final norm (h each), eh_proj (2h x h) and a MoE block.
  CHECK(depth.params == 3 * h + 2 * h * h + moe_block.params);
  CHECK(depth.expert_params == moe_block.expert_params);
  CHECK(mtp->parameters() - plain->parameters() == depth.params);
  CHECK(depth.borrowed_params == v * h);  // the embedding table
  // Three fused norms keep their input and rsigma (e t h + 4 t), eh_proj
  // its 2h-wide input, and the block what a MoE block keeps.
  CHECK(depth.saved_bytes == 3 * (e * t * h + 4 * t) + e * t * 2 * h + moe_block.saved_bytes);
  CHECK(depth.output_bytes == 2 * e * t * h);
  double proj = 0;
  for (const auto& k : depth.forward) {
    if (k.name == "mtp.eh_proj") proj = k.flops;
  }
  CHECK(proj == 2.0 * t * 2 * h * h);
  CHECK(depth.forward_flops() == Approx(moe_block.forward_flops() + proj + 4.0 * t * h * 3).epsilon(1e-12));  // the norms 4 an element; embedding and concat move bytes
  // The head runs the shared head and a cross-entropy over the depth too:
  // its GEMM's input and the fp32 log-softmax kept, the same kernels again.
  CHECK(b.back().saved_bytes - a.back().saved_bytes == e * t * h + 4 * t * v);
  CHECK(b.back().params == a.back().params);
  CHECK(b.back().forward.size() == a.back().forward.size() + 3);
  CHECK(b.back().forward_flops() - a.back().forward_flops() ==
        Approx(a.back().forward_flops() - a.back().forward.front().flops).epsilon(1e-12));  // all but the final norm
  CHECK(b.back().signature == a.back().signature + ",mtp=1");
  // Under FP8 the depth's GEMMs run in FP8 as a block's (Transformer
  // Engine's Linears); the head's pass over it in bf16 as the head's.
  CHECK(sim::kernel_precision(depth, sim::Precision::kFp8) == sim::Precision::kFp8);
  CHECK(sim::kernel_precision(b.back(), sim::Precision::kFp8) == sim::Precision::kBf16);
  // DeepSeek-V3 with its one depth: 11.61 B more (DeepSeek-V3's card: 671 B
  // and 14 B of MTP, which counts its copies of the embedding and the head).
  const std::int64_t H = 7168;
  const std::int64_t mla = H * 1536 + 1536 + 1536 * 128 * 192 + H * 576 + 512 + 512 * 128 * 256 + 128 * 128 * H;
  const std::int64_t block = mla + 2 * H + H * 256 + 3 * H * 2048 + 256 * 3 * H * 2048;
  CHECK(load_model("deepseek-v3", {sim::parse_override("model.mtp_layers=1")})->parameters() -
            load_model("deepseek-v3")->parameters() ==
        block + 2 * H * H + 3 * H);
  CHECK(block + 2 * H * H + 3 * H == 11610067968);
  // Bad input: one line naming the key and the range.
  CHECK(error_of([] { load_model("deepseek-v3", {sim::parse_override("model.mtp_layers=65")}); }) ==
        "--set model.mtp_layers: 65 is out of range; valid: 0 to 64");
}

TEST_CASE("Image-and-text configs are read as their language model, with a note of what is left out", "[llama][gemma][hf]") {
  test::TempDir dir("multimodal");
  // Gemma 3 4B-27B's config.json (Gemma3ForConditionalGeneration): the
  // language model is text_config, here gemma-3-27b-pt's keys as the hub
  // file has them (vocab_size left to Gemma3TextConfig's 262208).
  const std::string g27 = write_json(dir, R"({
  "architectures": ["Gemma3ForConditionalGeneration"],
  "boi_token_index": 255999,
  "eoi_token_index": 256000,
  "image_token_index": 262144,
  "model_type": "gemma3",
  "text_config": {
    "head_dim": 128,
    "hidden_size": 5376,
    "intermediate_size": 21504,
    "model_type": "gemma3_text",
    "num_attention_heads": 32,
    "num_hidden_layers": 62,
    "num_key_value_heads": 16,
    "query_pre_attn_scalar": 168,
    "rope_scaling": {"factor": 8.0, "rope_type": "linear"},
    "sliding_window": 1024
  },
  "vision_config": {"hidden_size": 1152, "image_size": 896, "model_type": "siglip_vision_model", "num_hidden_layers": 27}
})");
  const auto gemma = load_model(g27);
  CHECK(gemma->parameters() == gemma_params(62, 5376, 32, 16, 128, 21504, 262208, true));
  REQUIRE(gemma->notes().size() == 1);
  CHECK(gemma->notes()[0] == g27 + ": Gemma3ForConditionalGeneration's language model (config.text_config) is what is predicted; its SigLIP "
                                   "vision tower and projector are not modelled, as in text-only training");
  // The same blocks as the built-in: 5 local layers of 1024 to one global.
  sim::WorkloadShape w = shape(1, 4096, 2);
  w.flash_attention = true;
  const auto a = gemma->layers(w), b = load_model("gemma-3-27b")->layers(w);
  REQUIRE(a.size() == b.size());
  for (std::size_t i = 0; i < a.size(); ++i) CHECK(a[i].signature == b[i].signature);
  CHECK(load_model("gemma-3-27b")->notes().empty());
  CHECK(load_model(hf("gemma-3-1b"))->notes().empty());

  // Mistral Small 3.1 (Mistral3ForConditionalGeneration): its text_config a
  // MistralConfig. HF's count by hand (PARAMS.md's decoder formula, h 5120,
  // 40 layers, 32 heads and 8 KV heads of 128, I 32768, V 131072, untied):
  // a layer 5120 x 4096 x 2 + 5120 x 1024 x 2 + 3 x 5120 x 32768 + 2 x 5120
  // = 555,755,520; x 40 = 22,230,220,800; + 2 x 131072 x 5120 + 5120 =
  // 23,572,403,200, the "24B" of its card less the vision encoder.
  const std::string text = R"("text_config": {
    "head_dim": 128,
    "hidden_act": "silu",
    "hidden_size": 5120,
    "intermediate_size": 32768,
    "max_position_embeddings": 131072,
    "model_type": "mistral",
    "num_attention_heads": 32,
    "num_hidden_layers": 40,
    "num_key_value_heads": 8,
    "rms_norm_eps": 1e-05,
    "rope_theta": 1000000000.0,
    "sliding_window": null,
    "vocab_size": 131072
  },)";
  auto mistral3 = [&](const std::string& text_config) {
    return write_json(dir, R"({
  "architectures": ["Mistral3ForConditionalGeneration"],
  "image_token_index": 10,
  "model_type": "mistral3",
  "multimodal_projector_bias": false,
  "projector_hidden_act": "gelu",
  "spatial_merge_size": 2,
  )" + text_config + R"(
  "vision_config": {"head_dim": 64, "hidden_size": 1024, "image_size": 1540, "model_type": "pixtral", "num_hidden_layers": 24, "patch_size": 14}
})");
  };
  const auto small = load_model(mistral3(text));
  CHECK(small->parameters() == 23'572'403'200);
  REQUIRE(small->notes().size() == 1);
  CHECK(small->notes()[0].find("Mistral3ForConditionalGeneration's language model (config.text_config) is what is predicted; its Pixtral "
                               "vision encoder and projector are not modelled") != std::string::npos);
  // No sliding window (null), so no sliding-window term in any block.
  for (const auto& l : small->layers(w)) CHECK(l.signature.find(",sw=") == std::string::npos);
  // Without a text_config, Mistral3Config's default is Mistral Small 3.1's.
  CHECK(load_model(mistral3(""))->parameters() == 23'572'403'200);
  // A text_config of another kind is one line, at its key.
  std::string llama = text;
  llama.replace(llama.find("\"model_type\": \"mistral\""), 23, "\"model_type\": \"llama\"");
  CHECK(error_of([&] { load_model(mistral3(llama)); })
            .find("config.text_config.model_type: 'llama'; valid: mistral, ministral3 (Mistral3ForConditionalGeneration's language model)") !=
        std::string::npos);
  CHECK(error_of([&] { load_model(mistral3(R"("text_config": [1, 2],)")); })
            .find("config.text_config: not a mapping; Mistral3ForConditionalGeneration's config holds the language model's keys there") !=
        std::string::npos);
  // Llama 4's released configs (Llama4ForConditionalGeneration) say so too.
  const auto scout = load_model(hf("llama-4-scout"));
  REQUIRE(scout->notes().size() == 1);
  CHECK(scout->notes()[0].find("Llama4ForConditionalGeneration's language model (config.text_config) is what is predicted; its vision encoder") !=
        std::string::npos);
  CHECK(load_model("llama-4-scout")->notes().empty());
}

TEST_CASE("Qwen2.5-VL's and Qwen3-VL's configs are read as their language models", "[llama][hf]") {
  test::TempDir dir("qwen-vl");
  // Qwen2.5-VL-7B-Instruct's config.json keeps its text keys at the top
  // level (Qwen2_5_VLConfig reads them there): Qwen2's decoder, q/k/v
  // biased, untied; by hand as Qwen2-7B's above, whose shape it has:
  // llama_params(28, 3584, 28, 4, 128, 18944, 152064, untied, q/k/v bias).
  const std::string q25 = write_json(dir, R"({
  "architectures": ["Qwen2_5_VLForConditionalGeneration"],
  "hidden_act": "silu",
  "hidden_size": 3584,
  "intermediate_size": 18944,
  "max_position_embeddings": 128000,
  "max_window_layers": 28,
  "model_type": "qwen2_5_vl",
  "num_attention_heads": 28,
  "num_hidden_layers": 28,
  "num_key_value_heads": 4,
  "rms_norm_eps": 1e-06,
  "rope_theta": 1000000.0,
  "sliding_window": 32768,
  "tie_word_embeddings": false,
  "use_sliding_window": false,
  "vision_config": {"depth": 32, "hidden_size": 1280, "out_hidden_size": 3584},
  "rope_scaling": {"type": "mrope", "mrope_section": [16, 24, 24]},
  "vocab_size": 152064
})");
  const auto vl = load_model(q25);
  CHECK(vl->parameters() == llama_params(28, 3584, 28, 4, 128, 18944, 152064, false, false, true));
  CHECK(vl->max_seq_len() == 128000);
  REQUIRE(vl->notes().size() == 1);
  CHECK(vl->notes()[0] == q25 + ": Qwen2_5_VLForConditionalGeneration's language model (its text keys) is what is predicted; its vision "
                                "encoder and merger are not modelled, as in text-only training");
  // Qwen3-VL-8B-Instruct: a Qwen3 decoder in text_config (Qwen3-8B's shape:
  // q8 above, llama_params(36, 4096, 32, 8, 128, 12288, 151936, untied, q/k norms)).
  auto qwen3_vl = [&](const std::string& type, const std::string& text, const std::string& top) {
    return write_json(dir, R"({
  "architectures": [")" + std::string(type == "qwen3_vl" ? "Qwen3VLForConditionalGeneration" : "Qwen3VLMoeForConditionalGeneration") +
                               R"("],
  "image_token_id": 151655,
  "model_type": ")" + type + R"(",
  "text_config": {)" + text + R"(},
  )" + top + R"("vision_config": {"depth": 27, "hidden_size": 1152, "model_type": "qwen3_vl", "out_hidden_size": 4096}
})");
  };
  const std::string q3_8b = R"("head_dim": 128, "hidden_size": 4096, "intermediate_size": 12288, "max_position_embeddings": 262144,
    "model_type": "qwen3_vl_text", "num_attention_heads": 32, "num_hidden_layers": 36, "num_key_value_heads": 8,
    "tie_word_embeddings": false, "vocab_size": 151936)";
  const auto v8 = load_model(qwen3_vl("qwen3_vl", q3_8b, R"("tie_word_embeddings": false, )"));
  CHECK(v8->parameters() == 8'190'735'360);
  CHECK(v8->parameters() == llama_params(36, 4096, 32, 8, 128, 12288, 151936, false, true));
  CHECK(v8->max_seq_len() == 262144);
  // The 4B's head tied by the wrapper's key where text_config has none
  // (Qwen3-4B's shape, tied: llama_params(36, 2560, 32, 8, 128, 9728, 151936, tied, q/k norms)).
  const std::string q3_4b = R"("head_dim": 128, "hidden_size": 2560, "intermediate_size": 9728, "model_type": "qwen3_vl_text",
    "num_attention_heads": 32, "num_hidden_layers": 36, "num_key_value_heads": 8, "vocab_size": 151936)";
  CHECK(load_model(qwen3_vl("qwen3_vl", q3_4b, R"("tie_word_embeddings": true, )"))->parameters() ==
        llama_params(36, 2560, 32, 8, 128, 9728, 151936, true, true));
  CHECK(load_model(qwen3_vl("qwen3_vl", q3_4b, ""))->parameters() == llama_params(36, 2560, 32, 8, 128, 9728, 151936, false, true));
  // Qwen3-VL-30B-A3B: Qwen3-MoE's decoder, Qwen3-30B-A3B's shape
  // (PARAMS.md: 30,532,122,624; 128 experts of 768, 8 a token).
  const auto moe = load_model(qwen3_vl("qwen3_vl_moe", R"("decoder_sparse_step": 1, "head_dim": 128, "hidden_size": 2048,
    "intermediate_size": 6144, "mlp_only_layers": [], "model_type": "qwen3_vl_moe_text", "moe_intermediate_size": 768,
    "norm_topk_prob": true, "num_attention_heads": 32, "num_experts": 128, "num_experts_per_tok": 8, "num_hidden_layers": 48,
    "num_key_value_heads": 4, "tie_word_embeddings": false, "vocab_size": 151936)", ""));
  CHECK(moe->parameters() == 30'532'122'624);
  CHECK(moe->experts() == 128);
  CHECK(moe->top_k() == 8);
  REQUIRE(moe->notes().size() == 1);
  CHECK(moe->notes()[0].find("Qwen3VLMoeForConditionalGeneration's language model (config.text_config)") != std::string::npos);
  // The dense wrapper around a MoE text_config is refused at its key.
  CHECK(error_of([&] { load_model(qwen3_vl("qwen3_vl", R"("model_type": "qwen3_vl_moe_text")", "")); })
            .find("config.text_config.model_type: 'qwen3_vl_moe_text'; valid: qwen3_vl_text (Qwen3VLForConditionalGeneration's language "
                  "model)") != std::string::npos);
}

TEST_CASE("MiniMax-M2: q/k norms over all heads in a mixture of experts, its parameters by hand (Note [MiniMax-M2])", "[llama][moe][hf]") {
  // HF's count (modeling_minimax_m2.py): a layer's q, k, v, o (3072 x 6144,
  // 3072 x 1024 twice, 6144 x 3072), q_norm 48 x 128 and k_norm 8 x 128,
  // two RMSNorms of 3072, the router 3072 x 256 and 256 experts of 3 x 3072
  // x 1536; the untied embedding and head 200064 x 3072 each, a final norm.
  const std::int64_t h = 3072, a = 48, kv = 8, d = 128, e = 256, f = 1536, v = 200064;
  const std::int64_t layer = h * a * d + 2 * h * kv * d + a * d * h + (a + kv) * d + 2 * h + h * e + e * 3 * h * f;
  CHECK(layer == 3'668'718'592);
  const std::int64_t total = 62 * layer + 2 * v * h + h;
  CHECK(total == 228'689'748'992);
  const auto m2 = load_model("minimax-m2");
  CHECK(m2->parameters() == total);
  CHECK(m2->experts() == 256);
  CHECK(m2->top_k() == 8);
  // Its config.json (the hub file's keys HF reads, and some it does not).
  test::TempDir dir("minimax");
  const std::string config = R"({
  "architectures": ["MiniMaxM2ForCausalLM"],
  "head_dim": 128,
  "hidden_act": "silu",
  "hidden_size": 3072,
  "intermediate_size": 1536,
  "max_position_embeddings": 196608,
  "model_type": "minimax_m2",
  "num_attention_heads": 48,
  "num_experts_per_tok": 8,
  "num_hidden_layers": 62,
  "num_key_value_heads": 8,
  "num_local_experts": 256,
  "num_mtp_modules": 3,
  "qk_norm_type": "per_layer",
  "rotary_dim": 64,
  "scoring_func": "sigmoid",
  "shared_intermediate_size": 0,
  "tie_word_embeddings": false,
  "use_qk_norm": true,
  "use_routing_bias": true,
  "vocab_size": 200064
})";
  const auto read = load_model(write_json(dir, config));
  CHECK(read->parameters() == total);
  sim::WorkloadShape w = shape(1, 4096, 2);
  w.flash_attention = true;
  const auto a_layers = read->layers(w), b_layers = m2->layers(w);
  REQUIRE(a_layers.size() == b_layers.size());
  for (std::size_t i = 0; i < a_layers.size(); ++i) CHECK(a_layers[i].signature == b_layers[i].signature);
  // Every block a MoE block with whole q/k norms, and the Llama block's pre-norms.
  for (int i = 1; i <= 62; ++i) {
    const std::string& sig = b_layers[static_cast<std::size_t>(i)].signature;
    INFO(sig);
    CHECK(sig.rfind("moe.block:", 0) == 0);
    CHECK(sig.find(",qkn=1,") != std::string::npos);
    CHECK(sig.find(",qkw=1") != std::string::npos);
    CHECK(sig.find(",on=1") == std::string::npos);
  }
  // Its norms span the heads: at tp 2 no rank has their statistics.
  CHECK(m2->tp_error(2).find("q and k norms over all heads (whole_qk_norm) each take their statistics over all heads at once") !=
        std::string::npos);
  CHECK(m2->tp_error(1).empty());
  // Qwen3's per-head norms of the same shape would weigh 2 d a layer, not (a + kv) d.
  std::vector<sim::Override> per_head{sim::parse_override("model.whole_qk_norm=false")};
  CHECK(load_model("minimax-m2", per_head)->parameters() == total - 62 * ((a + kv) * d - 2 * d));
  // A shared expert is no MiniMaxM2ForCausalLM; whole norms need the norms.
  std::string shared = config;
  shared.replace(shared.find("\"shared_intermediate_size\": 0"), 29, "\"shared_intermediate_size\": 1536");
  CHECK(error_of([&] { load_model(write_json(dir, shared)); })
            .find("config.shared_intermediate_size: 1536, a shared expert's width; MiniMaxM2ForCausalLM builds none; valid: 0") != std::string::npos);
  std::vector<sim::Override> no_norms{sim::parse_override("model.qk_norm=false")};
  CHECK(error_of([&] { load_model("minimax-m2", no_norms); }).find("model.whole_qk_norm: true needs qk_norm: true") != std::string::npos);
}

TEST_CASE("Ministral 3: Mistral's block with every layer's queries scaled by position (Note [Ministral 3])", "[llama][hf]") {
  // Ministral-3-8B's language model, in its Mistral3ForConditionalGeneration
  // wrapper: 34 layers, h 4096, 32 heads and 8 KV heads of 128, I 14336,
  // V 131072, untied (PARAMS.md's decoder formula): a layer 4096 x 4096 x 2
  // + 4096 x 1024 x 2 + 3 x 4096 x 14336 + 2 x 4096 = 218,112,000; x 34 =
  // 7,415,808,000; + 2 x 131072 x 4096 + 4096 = 8,489,553,920.
  test::TempDir dir("ministral3");
  auto wrapper = [&](const std::string& rope) {
    return write_json(dir, R"({
  "architectures": ["Mistral3ForConditionalGeneration"],
  "model_type": "mistral3",
  "text_config": {
    "head_dim": 128,
    "hidden_size": 4096,
    "intermediate_size": 14336,
    "max_position_embeddings": 262144,
    "model_type": "ministral3",
    "num_attention_heads": 32,
    "num_hidden_layers": 34,
    "num_key_value_heads": 8,
    )" + rope + R"(
    "sliding_window": null,
    "tie_word_embeddings": false,
    "vocab_size": 131072
  },
  "vision_config": {"hidden_size": 1024, "model_type": "pixtral", "num_hidden_layers": 24}
})");
  };
  const std::string file = wrapper(R"("rope_parameters": {"beta_fast": 32.0, "beta_slow": 1.0, "factor": 16.0, "llama_4_scaling_beta": 0.1,
      "original_max_position_embeddings": 16384, "rope_theta": 1000000.0, "rope_type": "yarn"},)");
  const auto m = load_model(file);
  CHECK(m->parameters() == 8'489'553'920);
  REQUIRE(m->notes().size() == 1);
  CHECK(m->notes()[0].find("Mistral3ForConditionalGeneration's language model (config.text_config)") != std::string::npos);
  // Every block carries the scale (0.1 in millionths, steps of 16384) and
  // prices it as one pass over q: 2 bytes read and written an element of
  // t a d = 4096 x 32 x 128, one multiply each.
  sim::WorkloadShape w = shape(1, 4096, 2);
  w.flash_attention = true;
  const auto layers = m->layers(w);
  const std::int64_t q = 4096LL * 32 * 128;
  for (int i = 1; i <= 34; ++i) {
    const auto& l = layers[static_cast<std::size_t>(i)];
    INFO(l.signature);
    CHECK(l.signature.find(",qs=100000,qsl=16384") != std::string::npos);
    int found = 0;
    for (const auto& k : l.forward) {
      if (k.name != "attn.q_scale") continue;
      ++found;
      CHECK(k.bytes == 2 * 2 * q);
      CHECK(k.flops == static_cast<double>(q));
    }
    CHECK(found == 1);
  }
  // Mistral 7B's block, the same shape, has no such pass.
  const auto mistral = load_model("mistral-7b")->layers(w);
  for (const auto& k : mistral[1].forward) CHECK(k.name != "attn.q_scale");
  // rope_scaling (transformers 4's name) is read the same; a block without
  // the beta is refused where HF's attention would fail on it.
  CHECK(load_model(wrapper(R"("rope_scaling": {"llama_4_scaling_beta": 0.1, "original_max_position_embeddings": 16384, "type": "yarn"},)"))
            ->layers(w)[1].signature == layers[1].signature);
  CHECK(error_of([&] { load_model(wrapper(R"("rope_parameters": {"rope_theta": 1000000.0, "rope_type": "yarn", "original_max_position_embeddings": 16384},)")); })
            .find("config.text_config.rope_parameters.llama_4_scaling_beta: missing; Ministral3Attention scales every query by it") !=
        std::string::npos);
  // Without a rope block: Ministral3Config's default (0.1, 16384).
  CHECK(load_model(wrapper(""))->layers(w)[1].signature == layers[1].signature);
  // Not with Llama 4's temperature.
  std::vector<sim::Override> both{sim::parse_override("model.q_scaling_beta=0.1"), sim::parse_override("model.attn_temperature=true"),
                                  sim::parse_override("model.nope_global=true"), sim::parse_override("model.global_every=4")};
  CHECK(error_of([&] { load_model("llama-tiny", both); }).find("model.q_scaling_beta: is Ministral 3's scaling of every query; it contradicts "
                                                               "attn_temperature") != std::string::npos);
}

TEST_CASE("LLaVA's configs are read as their language model: Vicuna's Llama, Mistral or Qwen2 (Note [Image-and-text configs])", "[llama][hf]") {
  test::TempDir dir("llava");
  // llava-hf/llava-1.5-7b-hf: a text_config of Vicuna 7B that names only
  // what differs from LlamaConfig's defaults (Llama 2 7B's shape: 32 layers,
  // h 4096, 32 heads of 128, I 11008), here a vocabulary of 32064: by hand
  // llama_params(32, 4096, 32, 32, 128, 11008, 32064, untied).
  const std::string llava = write_json(dir, R"({
  "architectures": ["LlavaForConditionalGeneration"],
  "ignore_index": -100,
  "image_token_index": 32000,
  "model_type": "llava",
  "projector_hidden_act": "gelu",
  "text_config": {
    "_name_or_path": "lmsys/vicuna-7b-v1.5",
    "architectures": ["LlamaForCausalLM"],
    "max_position_embeddings": 4096,
    "model_type": "llama",
    "rms_norm_eps": 1e-05,
    "torch_dtype": "float16",
    "vocab_size": 32064
  },
  "vision_config": {"hidden_size": 1024, "image_size": 336, "model_type": "clip_vision_model", "num_hidden_layers": 24},
  "vision_feature_layer": -2,
  "vision_feature_select_strategy": "default"
})");
  const auto m = load_model(llava);
  CHECK(m->parameters() == llama_params(32, 4096, 32, 32, 128, 11008, 32064, false));
  CHECK(m->parameters() == 6'738'939'904);
  REQUIRE(m->notes().size() == 1);
  CHECK(m->notes()[0].find("LlavaForConditionalGeneration's language model (config.text_config) is what is predicted; its vision tower and "
                           "projector are not modelled") != std::string::npos);
  // LLaVA-OneVision's text_config is Qwen2's (Qwen2-7B's shape: q2 above);
  // a Gemma text_config is none LLaVA dtsim reads.
  auto onevision = [&](const std::string& type) {
    return write_json(dir, R"({"architectures": ["LlavaOnevisionForConditionalGeneration"], "model_type": "llava_onevision",
  "text_config": {"hidden_size": 3584, "intermediate_size": 18944, "max_position_embeddings": 32768, "model_type": ")" + type +
                               R"(", "num_attention_heads": 28, "num_hidden_layers": 28, "num_key_value_heads": 4, "vocab_size": 152064}})");
  };
  CHECK(load_model(onevision("qwen2"))->parameters() == llama_params(28, 3584, 28, 4, 128, 18944, 152064, false, false, true));
  CHECK(error_of([&] { load_model(onevision("gemma2")); })
            .find("config.text_config.model_type: 'gemma2'; valid: qwen2, mistral, llama (LlavaOnevisionForConditionalGeneration's language "
                  "model)") != std::string::npos);
}

TEST_CASE("InternVL's and Qwen2-VL's configs are read as their language models (Note [Image-and-text configs])", "[llama][hf]") {
  test::TempDir dir("internvl");
  // InternVL3.5-8B as transformers writes it: a Qwen3 text_config of
  // Qwen3-8B's shape (8,190,735,360 by hand, q8 above).
  const auto internvl = load_model(write_json(dir, R"({"architectures": ["InternVLForConditionalGeneration"], "model_type": "internvl",
  "text_config": {"head_dim": 128, "hidden_size": 4096, "intermediate_size": 12288, "model_type": "qwen3", "num_attention_heads": 32,
    "num_hidden_layers": 36, "num_key_value_heads": 8, "tie_word_embeddings": false, "vocab_size": 151936},
  "vision_config": {"hidden_size": 1024, "model_type": "internvl_vision"}})"));
  CHECK(internvl->parameters() == llama_params(36, 4096, 32, 8, 128, 12288, 151936, false, true));
  REQUIRE(internvl->notes().size() == 1);
  CHECK(internvl->notes()[0].find("InternVLForConditionalGeneration's language model") != std::string::npos);
  // Qwen2-VL-7B-Instruct: its text keys at the top level, Qwen2-7B's shape.
  const auto qwen2_vl = load_model(write_json(dir, R"({"architectures": ["Qwen2VLForConditionalGeneration"], "model_type": "qwen2_vl",
  "hidden_size": 3584, "intermediate_size": 18944, "max_position_embeddings": 32768, "num_attention_heads": 28, "num_hidden_layers": 28,
  "num_key_value_heads": 4, "tie_word_embeddings": false, "use_sliding_window": false, "vocab_size": 152064,
  "vision_config": {"depth": 32, "embed_dim": 1280}})"));
  CHECK(qwen2_vl->parameters() == llama_params(28, 3584, 28, 4, 128, 18944, 152064, false, false, true));
  CHECK(qwen2_vl->notes()[0].find("Qwen2VLForConditionalGeneration's language model (its text keys)") != std::string::npos);
}

TEST_CASE("Gated DeltaNet layers: parameters, memory and FLOPs of a small hybrid by hand (Note [Gated DeltaNet])", "[llama][gdn]") {
  // Two layers: a GDN layer (2 key heads serving 4 value heads, each 16
  // wide, 4 taps), then an attention layer with a gated output (4 heads
  // of 16, 2 KV heads, q/k norms); Qwen3-Next's zero-centered norms.
  test::TempDir dir("gdn");
  const std::string yaml = dir.file("hybrid.yaml");
  std::ofstream(yaml) << "family: llama\nlayers: 2\nhidden: 64\nheads: 4\nkv_heads: 2\nhead_dim: 16\nintermediate: 128\nvocab: 256\n"
                         "seq_len: 256\nqk_norm: true\nzero_centered_norms: true\nattn_output_gate: true\nfull_attention_interval: 2\n"
                         "linear_key_heads: 2\nlinear_value_heads: 4\nlinear_key_dim: 16\nlinear_value_dim: 16\nlinear_conv_kernel: 4\n";
  const auto m = load_model(yaml);
  // GDN: in_proj 64 x (2 x 32 + 2 x 64 + 2 x 4), conv 128 x 4, dt_bias and
  // A_log 4 each, the gated norm 16, out_proj 64 x 64; attention: q_proj
  // 64 x 128 (queries and gates), k and v 64 x 32, o_proj 64 x 64, q/k
  // norms 16 each; each layer two norms of 64 and a SwiGLU 3 x 64 x 128;
  // embedding and head 256 x 64, final norm 64.
  const std::int64_t gdn = 64 * 200 + 512 + 8 + 16 + 4096, attention = 8192 + 2 * 2048 + 4096 + 32, rest = 128 + 3 * 64 * 128;
  CHECK(gdn == 17'432);
  CHECK(m->parameters() == gdn + attention + 2 * rest + 2 * 256 * 64 + 64);
  CHECK(m->parameters() == 116'088);
  const auto layers = m->layers(shape(1, 128, 2));
  REQUIRE(layers.size() == 4);
  CHECK(layers[1].signature.rfind("llama.block:gdn=1,h=64,kh=2,vh=4,dk=16,dv=16,ck=4,f=128,", 0) == 0);
  CHECK(layers[2].signature.rfind("llama.block:h=64,a=4,kv=2,d=16,f=128,", 0) == 0);
  CHECK(layers[2].signature.find(",zc=1,og=1") != std::string::npos);
  CHECK(layers[1].params == gdn + rest);
  CHECK(layers[2].params == attention + rest);
  // What autograd keeps in the GDN layer, 128 tokens of 2 bytes (composite
  // ops, HF's without FLA's fused norm, and FLA's chunked rule):
  //   input norm, zero-centered: x.float() and the fp32 normed x (8 x 8192)
  //     and rsqrt a row (4 x 128)                                 66,048
  //   in_proj's input (2 x 8192)                                  16,384
  //   the convolution's input, q, k and v (2 x 128 x 128)         32,768
  //   gates: softplus' input and output (4 + 4 x 512) over 128
  //     tokens x 4 value heads (sigmoid(b) is the rule's beta)     4,096
  //   the rule (ChunkGatedDeltaRuleFunction.save_for_backward):
  //     normed q and k repeated to 4 heads (2 x 2 x 8192), v
  //     (2 x 8192), g's fp32 cumsum and two rstds (12 x 512),
  //     beta (2 x 512), A (2 x 512 x 64)                         121,856
  //   gated norm: o.float(), z.float() and silu's output (4 x 8192
  //     each), the normed o in 2 bytes and its product with the weight
  //     (2 x 8192 each), rsqrt a row (4 x 512)                   133,120
  //   out_proj's input (2 x 8192)                                 16,384
  //   post-attention norm and gate_up's input               66,048 + 16,384
  //   SwiGLU: gate, up, silu's output, down's input (8 x 128 x 128) 131,072
  CHECK(layers[1].saved_bytes == 604'160);
  // The rule's forward FLOPs: 512 rows (token and value head) of
  // 2 x 64 x (3 x 16 + 2 x 16) + 6 x 16 x 16 (Note [Gated DeltaNet]).
  const auto core = std::find_if(layers[1].forward.begin(), layers[1].forward.end(), [](const sim::Kernel& k) { return k.name == "gdn.core"; });
  REQUIRE(core != layers[1].forward.end());
  CHECK(core->flops == Approx(512.0 * (2 * 64 * 80 + 6 * 256)));
  CHECK(core->flops == Approx(6'029'312.0));
  // The gated output keeps the attention's output and the sigmoid beside
  // o_proj's input: 2 x 2 x (128 x 64) more than without it.
  std::vector<sim::Override> ungated{sim::parse_override("model.attn_output_gate=false")};
  CHECK(layers[2].saved_bytes - load_model(yaml, ungated)->layers(shape(1, 128, 2))[2].saved_bytes == 2 * 2 * 128 * 64);
  // tp splits the linear heads as Megatron-Core's GatedDeltaNet does, and
  // cp hands each rank whole heads of the sequence: tp x cp must divide them.
  CHECK(m->tp_error(2).empty());
  CHECK(m->tp_error(4).find("2 key and 4 value heads of linear attention (linear_num_key_heads, linear_num_value_heads) are not both "
                            "divisible by tp=4") != std::string::npos);
  CHECK(m->cp_error(1).empty());
  CHECK(m->cp_error(2).empty());
  CHECK(m->cp_error(2, 2).find("2 key and 4 value heads of linear attention are not both divisible by tp x cp = 4") != std::string::npos);
  // At cp 2 a rank projects its 64 tokens (in_proj 64 x 200), sends them by
  // all-to-all (2 x 64 x 200 bytes) for 1 key and 2 value heads of all 128
  // tokens, and returns the gated norm's output (2 x 128 x 2 x 16 bytes):
  // half the rule's rows, half every kept byte.
  sim::WorkloadShape cp2 = shape(1, 128, 2);
  cp2.cp = 2;
  const auto halves = m->layers(cp2);
  CHECK(halves[1].saved_bytes == 604'160 / 2);
  const auto gdn_core = std::find_if(halves[1].forward.begin(), halves[1].forward.end(), [](const sim::Kernel& k) { return k.name == "gdn.core"; });
  REQUIRE(gdn_core != halves[1].forward.end());
  CHECK(gdn_core->flops == Approx(6'029'312.0 / 2));
  const auto in_proj = std::find_if(halves[1].forward.begin(), halves[1].forward.end(), [](const sim::Kernel& k) { return k.name == "attn.qkv"; });
  REQUIRE(in_proj != halves[1].forward.end());
  CHECK(in_proj->m == 64);
  CHECK(in_proj->n == 200);
  REQUIRE(halves[1].cp_forward.size() == 2);
  CHECK(halves[1].cp_forward[0].op == sim::CollectiveOp::kAllToAll);
  CHECK(halves[1].cp_forward[0].bytes == 2 * 64 * 200);
  CHECK(halves[1].cp_forward[1].bytes == 2 * 128 * 2 * 16);
  CHECK(halves[1].cp_backward.size() == 2);
  const auto o_proj = std::find_if(halves[1].forward.begin(), halves[1].forward.end(), [](const sim::Kernel& k) { return k.name == "attn.o_proj"; });
  REQUIRE(o_proj != halves[1].forward.end());
  CHECK(o_proj->m == 64);  // its own tokens again, all 64 of its value columns
  CHECK(o_proj->k == 64);
  // Bad values are refused at their key.
  std::vector<sim::Override> uneven{sim::parse_override("model.linear_value_heads=3")};
  CHECK(error_of([&] { load_model(yaml, uneven); }).find("model.linear_value_heads: 3 is not a multiple of linear_key_heads 2") != std::string::npos);
  std::vector<sim::Override> window{sim::parse_override("model.sliding_window=64")};
  CHECK(error_of([&] { load_model(yaml, window); }).find("model.sliding_window: contradicts full_attention_interval") != std::string::npos);
  std::vector<sim::Override> olmo{sim::parse_override("model.zero_centered_norms=false"), sim::parse_override("model.olmo2_norms=true")};
  CHECK(error_of([&] { load_model(yaml, olmo); }).find("model.olmo2_norms: contradicts full_attention_interval") != std::string::npos);
  // q, k and v with biases: the gated q_proj's is 2 x 4 x 16 wide, k's and v's 2 x 16 each.
  std::vector<sim::Override> biased{sim::parse_override("model.qkv_bias=true")};
  CHECK(load_model(yaml, biased)->parameters() == m->parameters() + 128 + 2 * 32);
}

TEST_CASE("Qwen3-Next and Qwen3.5 read from their config.json: parameters by hand (Note [Gated DeltaNet])", "[llama][moe][hf][gdn]") {
  // Qwen3-Next-80B-A3B (the Note's count): 12 attention layers, 36 GDN
  // layers, every layer's MoE and two norms, untied embedding and head.
  const std::int64_t attention = 2048 * 8192 + 2 * 2048 * 512 + 4096 * 2048 + 512;
  const std::int64_t gdn = 2048 * 12352 + 8192 * 4 + 64 + 128 + 4096 * 2048;
  const std::int64_t moe = 2048 * 512 + 512LL * 3 * 2048 * 512 + 3 * 2048 * 512 + 2048;
  CHECK(attention == 27'263'488);
  CHECK(gdn == 33'718'464);
  CHECK(moe == 1'614'809'088);
  const std::int64_t total = 12 * attention + 36 * gdn + 48 * (moe + 4096) + 2LL * 151936 * 2048 + 2048;
  CHECK(total == 79'674'391'296);
  const auto next = load_model("qwen3-next-80b-a3b");
  CHECK(next->parameters() == total);
  CHECK(next->experts() == 512);
  CHECK(next->top_k() == 10);
  // Its config.json (the hub file's keys HF reads, and some it does not).
  test::TempDir dir("qwen3-next");
  const std::string config = R"({
  "architectures": ["Qwen3NextForCausalLM"],
  "decoder_sparse_step": 1,
  "full_attention_interval": 4,
  "head_dim": 256,
  "hidden_size": 2048,
  "intermediate_size": 5120,
  "linear_conv_kernel_dim": 4,
  "linear_key_head_dim": 128,
  "linear_num_key_heads": 16,
  "linear_num_value_heads": 32,
  "linear_value_head_dim": 128,
  "max_position_embeddings": 262144,
  "mlp_only_layers": [],
  "model_type": "qwen3_next",
  "moe_intermediate_size": 512,
  "norm_topk_prob": true,
  "num_attention_heads": 16,
  "num_experts": 512,
  "num_experts_per_tok": 10,
  "num_hidden_layers": 48,
  "num_key_value_heads": 2,
  "partial_rotary_factor": 0.25,
  "rope_theta": 10000000,
  "shared_expert_intermediate_size": 512,
  "tie_word_embeddings": false,
  "vocab_size": 151936
})";
  const auto read = load_model(write_json(dir, config));
  CHECK(read->parameters() == total);
  sim::WorkloadShape w = shape(1, 4096, 2);
  w.flash_attention = true;
  const auto a_layers = read->layers(w), b_layers = next->layers(w);
  REQUIRE(a_layers.size() == b_layers.size());
  for (std::size_t i = 0; i < a_layers.size(); ++i) CHECK(a_layers[i].signature == b_layers[i].signature);
  for (int i = 1; i <= 48; ++i) {
    const std::string& sig = b_layers[static_cast<std::size_t>(i)].signature;
    INFO(sig);
    CHECK(sig.rfind(i % 4 == 0 ? "moe.block:h=2048,a=16,kv=2,d=256," : "moe.block:gdn=1,h=2048,kh=16,vh=32,dk=128,dv=128,ck=4,", 0) == 0);
  }
  // layer_types, where listed, must be that pattern.
  std::string types = config;
  std::string list = "\"layer_types\": [";
  for (int i = 0; i < 48; ++i) list += std::string(i ? ", " : "") + ((i + 1) % 4 == 0 ? "\"full_attention\"" : "\"linear_attention\"");
  types.insert(types.find("\"linear_conv_kernel_dim\""), list + "],\n  ");
  CHECK(load_model(write_json(dir, types))->parameters() == total);
  std::string swapped = types;
  swapped.replace(swapped.find("\"linear_attention\""), 18, "\"full_attention\"");
  CHECK(error_of([&] { load_model(write_json(dir, swapped)); })
            .find("config.layer_types: layer 1 is not 'full_attention'; dtsim models linear_attention layers with a full_attention one every "
                  "n-th (here n = 1)") != std::string::npos);
  CHECK(next->tp_error(32).find("16 key and 32 value heads of linear attention") != std::string::npos);
  CHECK(next->cp_error(4, 4).empty());
  CHECK(next->cp_error(8, 4).find("not both divisible by tp x cp = 32") != std::string::npos);
  // Qwen3.5-35B-A3B as released: the Qwen3_5MoeForConditionalGeneration
  // wrapper with its language model in text_config; 10 attention and 30 GDN
  // layers, 256 experts of 512 and a gated shared expert, vocab 248320.
  const std::int64_t moe35 = 2048 * 256 + 256LL * 3 * 2048 * 512 + 3 * 2048 * 512 + 2048;
  const std::int64_t total35 = 10 * attention + 30 * gdn + 40 * (moe35 + 4096) + 2LL * 248320 * 2048 + 2048;
  CHECK(load_model("qwen3.5-35b-a3b")->parameters() == total35);
  const auto wrapped = load_model(write_json(dir, R"({
  "architectures": ["Qwen3_5MoeForConditionalGeneration"],
  "model_type": "qwen3_5_moe",
  "text_config": {"model_type": "qwen3_5_moe_text", "hidden_size": 2048, "num_hidden_layers": 40, "num_experts": 256,
                  "num_experts_per_tok": 8, "max_position_embeddings": 262144, "full_attention_interval": 4},
  "vision_config": {"depth": 27, "hidden_size": 1152}
})"));
  CHECK(wrapped->parameters() == total35);
  REQUIRE(wrapped->notes().size() == 1);
  CHECK(wrapped->notes()[0].find("Qwen3_5MoeForConditionalGeneration's language model (config.text_config) is what is predicted") !=
        std::string::npos);
  // Qwen3.5's dense text model with Qwen3_5TextConfig's defaults: 32
  // layers of 4096 (8 attention of 16 heads of 256 and 4 KV heads, 24 GDN),
  // SwiGLU 12288, vocab 248320.
  const std::int64_t attn_d = 4096 * 8192 + 2 * 4096 * 1024 + 4096 * 4096 + 512;
  const std::int64_t gdn_d = 4096 * 12352 + 8192 * 4 + 64 + 128 + 4096 * 4096;
  const std::int64_t total_d = 8 * attn_d + 24 * gdn_d + 32 * (3LL * 4096 * 12288 + 8192) + 2LL * 248320 * 4096 + 4096;
  const auto dense = load_model(write_json(dir, R"({"architectures": ["Qwen3_5ForConditionalGeneration"], "model_type": "qwen3_5"})"));
  CHECK(dense->parameters() == total_d);
  CHECK(dense->experts() == 0);
  CHECK(error_of([&] { load_model(write_json(dir, R"({"model_type": "qwen3_5", "text_config": {"model_type": "qwen3_5_moe_text"}})")); })
            .find("config.text_config.model_type: 'qwen3_5_moe_text'; valid: qwen3_5_text") != std::string::npos);
}

TEST_CASE("Mamba-2 hybrids: parameters, memory and FLOPs of a small hybrid pattern by hand (Note [Mamba-2])", "[llama][mamba]") {
  // Four layers, Megatron-Core's letters M - * E: a Mamba-2 mixer (4 heads
  // of 32, 2 groups, state 16, 4 taps, chunks of 32), a squared-ReLU MLP,
  // attention without rotary (4 heads of 16, 2 KV heads), a MoE (4 experts
  // of 64, top-2, one shared of 64); hidden 64, each layer its own norm.
  test::TempDir dir("mamba");
  const std::string yaml = dir.file("hybrid.yaml");
  std::ofstream(yaml) << "family: llama\nhybrid_pattern: M-*E\nhidden: 64\nheads: 4\nkv_heads: 2\nhead_dim: 16\nintermediate: 128\n"
                         "vocab: 256\nseq_len: 256\nsquared_relu: true\nrotary: false\nmamba_head_dim: 32\nmamba_state: 16\nmamba_groups: 2\n"
                         "mamba_chunk: 32\nexperts: 4\ntop_k: 2\nexpert_intermediate: 64\nshared_intermediate: 64\n";
  const auto m = load_model(yaml);
  // Mamba (its heads 2 x 64 / 32 = 4, inner width 128, B and C 2 x 2 x 16):
  // in_proj 64 x (2 x 128 + 64 + 4), the convolution over 128 + 64
  // channels with its bias (x 5), dt_bias, A_log and D 4 each, the gated
  // norm 128, out_proj 128 x 64, its norm 64.
  const std::int64_t mamba = 64 * 324 + 192 * 5 + 12 + 128 + 128 * 64 + 64;
  CHECK(mamba == 30'092);
  const std::int64_t mlp = 2 * 64 * 128 + 64;                            // up and down, no gate; the norm
  const std::int64_t attention = 64 * 64 + 2 * 64 * 32 + 64 * 64 + 64;  // q, k, v, o, the norm
  const std::int64_t moe = 4 * 64 + 4 * 2 * 64 * 64 + 2 * 64 * 64 + 64;  // router, experts, shared, the norm
  CHECK(m->parameters() == mamba + mlp + attention + moe + 2 * 256 * 64 + 64);
  CHECK(m->parameters() == 133'004);
  CHECK(m->active_parameters() == 133'004 - 2 * 2 * 64 * 64);  // two of the four experts
  const auto layers = m->layers(shape(1, 128, 2));
  REQUIRE(layers.size() == 6);
  CHECK(layers[1].signature.rfind("llama.block:mamba=1,h=64,mh=4,mp=32,mn=16,mg=2,ck=4,mq=32,f=128,", 0) == 0);
  CHECK(layers[1].signature.ends_with(",relu2=1,part=1"));
  CHECK(layers[2].signature.ends_with(",relu2=1,part=2"));
  CHECK(layers[3].signature.find(",nope=1") != std::string::npos);
  CHECK(layers[3].signature.ends_with(",part=1"));
  CHECK(layers[4].signature.rfind("moe.block:", 0) == 0);
  CHECK(layers[4].signature.find(",part=2") != std::string::npos);
  CHECK(layers[1].params == mamba);
  CHECK(layers[2].params == mlp);
  CHECK(layers[3].params == attention);
  // What the Mamba layer keeps, 128 tokens of 2 bytes, composite norms:
  //   its norm: x.float() (4 x 8192), the normed x in 2 bytes (2 x
  //     8192), rsqrt a row (4 x 128)                                49,664
  //   in_proj's input (2 x 8192)                                    16,384
  //   mamba_split_conv1d_scan_combined: in_proj's output z, x, B, C,
  //     dt (2 x 128 x 324) and the ungated output (2 x 128 x 128)  115,712
  //   the grouped norm of the gated output: its fp32 copy (4 x
  //     16,384), the normed output in 2 bytes (2 x 16,384), rsqrt a
  //     token and group (4 x 256)                                   99,328
  //   out_proj's input (2 x 16,384)                                 32,768
  CHECK(layers[1].saved_bytes == 313'856);
  // The MLP layer: its norm and up's input (49,664 + 16,384), relu's
  // output, which pow keeps too, and down's input (2 x 2 x 16,384).
  CHECK(layers[2].saved_bytes == 131'584);
  // The attention layer turns nothing: no rotary kernel.
  CHECK(std::none_of(layers[3].forward.begin(), layers[3].forward.end(), [](const sim::Kernel& k) { return k.name == "attn.rotary"; }));
  // The scan's forward FLOPs: 512 rows (token and head) of 4 x 16 x 32
  // (the chunk's state and its contribution) + 32 x 32 (within the chunk)
  // + 10 x 32 (D and the gate), and 256 rows (token and group) of
  // 2 x 32 x 16 (C B^T).
  const auto named = [](const std::vector<sim::Kernel>& ks, const char* name) {
    return std::find_if(ks.begin(), ks.end(), [&](const sim::Kernel& k) { return k.name == name; });
  };
  const auto core = named(layers[1].forward, "mamba.core");
  REQUIRE(core != layers[1].forward.end());
  CHECK(core->flops == Approx(512.0 * (2048 + 1024 + 320) + 256.0 * 1024));
  CHECK(core->flops == Approx(1'998'848.0));
  const auto up = named(layers[2].forward, "mlp.up");
  REQUIRE(up != layers[2].forward.end());
  CHECK(up->n == 128);  // up alone, no gate
  // tp splits heads and groups; cp gives each rank whole heads, and whole
  // groups or one repeated.
  CHECK(m->tp_error(2).empty());
  CHECK(m->tp_error(4).find("4 Mamba heads and 2 groups (mamba_num_heads, n_groups) are not both divisible by tp=4") != std::string::npos);
  CHECK(m->cp_error(2).empty());
  CHECK(m->cp_error(4).empty());  // one head each, the 2 groups repeated to 4
  CHECK(m->cp_error(3).find("4 Mamba heads (mamba_num_heads) are not divisible by tp x cp = 3") != std::string::npos);
  CHECK(m->cp_error(4, 2).find("not divisible by tp x cp = 8") != std::string::npos);
  // At cp 2 a rank projects its 64 tokens (in_proj 64 x 324), sends them by
  // all-to-all (2 x 64 x 324 bytes) for 2 heads and 1 group of all 128
  // tokens, and sends the output back (2 x 64 x 128): half of every kept
  // byte and of the scan's FLOPs.
  sim::WorkloadShape cp2 = shape(1, 128, 2);
  cp2.cp = 2;
  const auto halves = m->layers(cp2);
  CHECK(halves[1].saved_bytes == 313'856 / 2);
  const auto half_core = named(halves[1].forward, "mamba.core");
  REQUIRE(half_core != halves[1].forward.end());
  CHECK(half_core->flops == Approx(1'998'848.0 / 2));
  const auto in_proj = named(halves[1].forward, "attn.qkv");
  REQUIRE(in_proj != halves[1].forward.end());
  CHECK(in_proj->m == 64);
  CHECK(in_proj->n == 324);
  REQUIRE(halves[1].cp_forward.size() == 2);
  CHECK(halves[1].cp_forward[0].op == sim::CollectiveOp::kAllToAll);
  CHECK(halves[1].cp_forward[0].bytes == 2 * 64 * 324);
  CHECK(halves[1].cp_forward[1].bytes == 2 * 64 * 128);
  CHECK(halves[1].cp_backward.size() == 2);
  // At cp 4 each rank holds 1 head; the 2 groups are repeated to 4, so the
  // first all-to-all carries B and C twice: 2 x 32 x (256 + 2 x 2 x 16 x 2 + 4).
  sim::WorkloadShape cp4 = shape(1, 128, 2);
  cp4.cp = 4;
  CHECK(m->layers(cp4)[1].cp_forward[0].bytes == 2 * 32 * (256 + 128 + 4));
  // Under tp 2 each part exchanges one pair of collectives; the MoE
  // without a shared expert none of its own.
  sim::WorkloadShape tp2 = shape(1, 128, 2);
  tp2.tp = 2;
  tp2.etp = 2;
  const auto split = m->layers(tp2);
  REQUIRE(split[1].tp_forward.size() == 1);
  CHECK(split[1].tp_forward[0].count == 1);
  CHECK(split[2].tp_forward[0].count == 1);
  CHECK(split[3].tp_forward[0].count == 1);
  CHECK(split[4].tp_forward[0].count == 1);  // the shared expert's pair
  // Bad values are refused at their key.
  std::vector<sim::Override> letter{sim::parse_override("model.hybrid_pattern=M-G*")};
  CHECK(error_of([&] { load_model(yaml, letter); }).find("model.hybrid_pattern: letter 3 is 'G'; valid: M (Mamba-2), * (attention)") != std::string::npos);
  std::vector<sim::Override> count{sim::parse_override("model.layers=3")};
  CHECK(error_of([&] { load_model(yaml, count); }).find("model.layers: 3 contradicts hybrid_pattern's 4 layers") != std::string::npos);
  std::vector<sim::Override> no_moe{sim::parse_override("model.hybrid_pattern=M-*-")};
  CHECK(error_of([&] { load_model(yaml, no_moe); }).find("model.experts: given, but hybrid_pattern has no E layer") != std::string::npos);
  std::vector<sim::Override> groups{sim::parse_override("model.mamba_groups=3")};
  CHECK(error_of([&] { load_model(yaml, groups); }).find("model.mamba_groups: 3 does not divide the 4 Mamba heads") != std::string::npos);
  std::vector<sim::Override> gdn{sim::parse_override("model.full_attention_interval=2")};
  CHECK(error_of([&] { load_model(yaml, gdn); }).find("model.full_attention_interval: is not modelled with a hybrid_pattern") != std::string::npos);
  std::vector<sim::Override> chunk{sim::parse_override("model.mamba_chunk=8192")};
  CHECK(error_of([&] { load_model(yaml, chunk); }).find("model.mamba_chunk") != std::string::npos);
  std::vector<sim::Override> sinks{sim::parse_override("model.attention_sinks=true")};
  CHECK(error_of([&] { load_model(yaml, sinks); }).find("model.attention_sinks: is not modelled with a hybrid_pattern") != std::string::npos);
  // Absurd Mamba widths are refused as parameters, not overflowed.
  std::vector<sim::Override> huge{sim::parse_override("model.mamba_head_dim=1048576"), sim::parse_override("model.mamba_heads=1048576"),
                                  sim::parse_override("model.mamba_groups=1"), sim::parse_override("model.hidden=4096")};
  // (4 layers of in_proj 4096 x 2^41 and out_proj 2^40 x 4096 alone: 5.41e16.)
  CHECK(error_of([&] { load_model(yaml, huge); }).find("model.layers: with the other sizes gives 5.41e+16 parameters, more than dtsim models") !=
        std::string::npos);
  // Absurd chunk states for one micro-batch are refused as such.
  std::vector<sim::Override> states{sim::parse_override("model.mamba_head_dim=65536"), sim::parse_override("model.mamba_heads=65536"),
                                    sim::parse_override("model.mamba_state=65536"), sim::parse_override("model.mamba_groups=1")};
  CHECK(error_of([&] { load_model(yaml, states)->layers(shape(1, 256, 2)); }).find("the Mamba-2 chunk states of one layer would exceed 100 TB") !=
        std::string::npos);
  // Latent attention keeps its rotary part: rotary false is refused with it.
  std::vector<sim::Override> latent{sim::parse_override("model.rotary=false"), sim::parse_override("model.kv_lora_rank=16")};
  CHECK(error_of([&] { load_model("llama-tiny", latent); }).find("model.rotary: false with latent attention") != std::string::npos);
  // Without attention layers tp asks nothing of the attention heads
  // (2 KV heads), and a part without attention has no q/k norms to keep
  // out of sequence parallelism: its norm alone is sequence-parallel.
  std::vector<sim::Override> no_attention{sim::parse_override("model.hybrid_pattern=M-ME"), sim::parse_override("model.qk_norm=true"),
                                          sim::parse_override("model.head_dim=64"), sim::parse_override("model.mamba_heads=8"),
                                          sim::parse_override("model.mamba_head_dim=16"), sim::parse_override("model.mamba_groups=4")};
  const auto mamba_only = load_model(yaml, no_attention);
  CHECK(mamba_only->tp_error(4).empty());
  sim::WorkloadShape sp = shape(1, 128, 2);
  sp.tp = 4;
  sp.etp = 4;
  sp.sequence_parallel = true;
  CHECK(mamba_only->layers(sp)[2].sp_params == 64);
}

TEST_CASE("Nemotron-H and Nemotron 3 Nano: built-ins, config.json and parameters by hand (Note [Mamba-2])", "[llama][mamba]") {
  // Nemotron-H 8B: 24 Mamba layers of 128 heads of 64 (inner 8192), 8
  // groups of state 128: in_proj 4096 x (2 x 8192 + 2048 + 128), conv
  // (8192 + 2048) x 5, 3 x 128, the norm 8192, out_proj 8192 x 4096, its
  // norm 4096; 24 MLPs 2 x 4096 x 21504 + 4096; 4 attention layers
  // 4096 x 4096 + 2 x 4096 x 1024 + 4096 x 4096 + 4096; untied 131072 x 4096
  // twice; the final norm.
  const std::int64_t m8 = 4096LL * 18560 + 10240 * 5 + 384 + 8192 + 8192LL * 4096 + 4096;
  const std::int64_t total8 = 24 * m8 + 24 * (2LL * 4096 * 21504 + 4096) + 4 * (2LL * 4096 * 4096 + 2LL * 4096 * 1024 + 4096) +
                              2LL * 131072 * 4096 + 4096;
  CHECK(total8 == 8'100'852'736);  // the card's 8B
  CHECK(load_model("nemotron-h-8b")->parameters() == total8);
  // Nemotron 3 Nano 30B-A3B: 23 Mamba layers (64 heads of 64, inner 4096),
  // 23 MoE layers (router 128 x 2688, 128 experts of 2 x 2688 x 1856, the
  // shared 2 x 2688 x 3712), 6 attention layers (32 heads of 128, 2 KV
  // heads), hidden 2688, untied 131072 x 2688 twice: the card's 31.6B
  // total and 3.6B active with embeddings.
  const std::int64_t mamba = 2688LL * (8192 + 2048 + 64) + 6144 * 5 + 192 + 4096 + 4096LL * 2688 + 2688;
  const std::int64_t expert = 2LL * 2688 * 1856;
  const std::int64_t moe_rest = 128LL * 2688 + 2LL * 2688 * 3712 + 2688;
  const std::int64_t attention = 2688LL * 4096 + 2LL * 2688 * 256 + 4096LL * 2688 + 2688;
  const std::int64_t outer = 2LL * 131072 * 2688 + 2688;
  const std::int64_t total = 23 * mamba + 23 * (moe_rest + 128 * expert) + 6 * attention + outer;
  const std::int64_t active = 23 * mamba + 23 * (moe_rest + 6 * expert) + 6 * attention + outer;
  CHECK(total == 31'577'937'344);
  CHECK(active == 3'580'073'408);
  const auto nano = load_model("nemotron-3-nano-30b-a3b");
  CHECK(nano->parameters() == total);
  CHECK(nano->active_parameters() == active);
  // Its config.json (the hub file's keys, NemotronHConfig's names).
  test::TempDir dir("nemotron-h");
  const std::string config = R"({
  "architectures": ["NemotronHForCausalLM"],
  "model_type": "nemotron_h",
  "hybrid_override_pattern": "MEMEM*EMEMEM*EMEMEM*EMEMEM*EMEMEM*EMEMEMEM*EMEMEMEME",
  "num_hidden_layers": 52,
  "hidden_size": 2688,
  "num_attention_heads": 32,
  "num_key_value_heads": 2,
  "head_dim": 128,
  "intermediate_size": 1856,
  "mamba_num_heads": 64,
  "mamba_head_dim": 64,
  "ssm_state_size": 128,
  "n_groups": 8,
  "conv_kernel": 4,
  "chunk_size": 128,
  "mlp_hidden_act": "relu2",
  "mamba_hidden_act": "silu",
  "n_routed_experts": 128,
  "num_experts_per_tok": 6,
  "moe_intermediate_size": 1856,
  "moe_shared_expert_intermediate_size": 3712,
  "n_shared_experts": 1,
  "n_group": 1,
  "topk_group": 1,
  "norm_topk_prob": true,
  "routed_scaling_factor": 2.5,
  "moe_latent_size": null,
  "use_conv_bias": true,
  "use_bias": false,
  "tie_word_embeddings": false,
  "max_position_embeddings": 262144,
  "vocab_size": 131072
})";
  const auto read = load_model(write_json(dir, config));
  CHECK(read->parameters() == total);
  sim::WorkloadShape w = shape(1, 4096, 2);
  w.flash_attention = true;
  const auto a_layers = read->layers(w), b_layers = nano->layers(w);
  REQUIRE(a_layers.size() == b_layers.size());
  for (std::size_t i = 0; i < a_layers.size(); ++i) CHECK(a_layers[i].signature == b_layers[i].signature);
  // The newer config's list of block types reads the same.
  std::string listed = config;
  const std::string pattern = "MEMEM*EMEMEM*EMEMEM*EMEMEM*EMEMEM*EMEMEMEM*EMEMEMEME";
  std::string types = "[";
  for (char ch : pattern) {
    types += std::string(types.size() > 1 ? ", " : "") + (ch == 'M' ? "\"mamba\"" : ch == 'E' ? "\"moe\"" : "\"attention\"");
  }
  listed.replace(listed.find("\"" + pattern + "\""), pattern.size() + 2, "null,\n  \"layers_block_type\": " + types + "]");
  CHECK(load_model(write_json(dir, listed))->parameters() == total);
  // A latent width (Note [Latent MoE]) narrows the 23 MoE layers' 128
  // experts from 2 x 2688 x 1856 to 2 x 1024 x 1856 each and adds their
  // projections, 2 x 2688 x 1024 a layer.
  std::string latent = config;
  latent.replace(latent.find("\"moe_latent_size\": null"), 23, "\"moe_latent_size\": 1024");
  CHECK(load_model(write_json(dir, latent))->parameters() == total - 23LL * 128 * 2 * (2688 - 1024) * 1856 + 23LL * 2 * 2688 * 1024);
  std::string gelu = config;
  gelu.replace(gelu.find("\"relu2\""), 7, "\"gelu\"");
  CHECK(error_of([&] { load_model(write_json(dir, gelu)); }).find("config.mlp_hidden_act: 'gelu'; dtsim models relu2") != std::string::npos);
  // A pattern without Mamba layers reads too (the mamba_* keys are then not ours to set).
  std::string attention_only = config;
  attention_only.replace(attention_only.find("\"MEMEM*EMEMEM"), 2 + pattern.size(), "\"*E*E\"");
  attention_only.replace(attention_only.find("\"num_hidden_layers\": 52"), 23, "\"num_hidden_layers\": 4");
  CHECK(load_model(write_json(dir, attention_only))->layers(w).size() == 6);
  std::string layers = config;
  layers.replace(layers.find("\"num_hidden_layers\": 52"), 23, "\"num_hidden_layers\": 50");
  CHECK(error_of([&] { load_model(write_json(dir, layers)); }).find("config.num_hidden_layers: contradicts the pattern's 52 layers") != std::string::npos);
}

TEST_CASE("LatentMoE: a small hybrid's experts on a latent width, by hand (Note [Latent MoE])", "[llama][mamba][latent]") {
  // The Mamba-2 test's four layers M - * E (hidden 64; 4 experts of 64,
  // top-2, one shared of 64) with the experts on a latent of 16.
  test::TempDir dir("latent");
  const std::string plain_yaml = dir.file("plain.yaml"), latent_yaml = dir.file("latent.yaml");
  const std::string body = "family: llama\nhybrid_pattern: M-*E\nhidden: 64\nheads: 4\nkv_heads: 2\nhead_dim: 16\nintermediate: 128\n"
                           "vocab: 256\nseq_len: 256\nsquared_relu: true\nrotary: false\nmamba_head_dim: 32\nmamba_state: 16\nmamba_groups: 2\n"
                           "mamba_chunk: 32\nexperts: 4\ntop_k: 2\nexpert_intermediate: 64\nshared_intermediate: 64\n";
  std::ofstream(plain_yaml) << body;
  std::ofstream(latent_yaml) << body << "moe_latent: 16\n";
  const auto plain = load_model(plain_yaml), m = load_model(latent_yaml);
  // The MoE layer: the router 64 x 4, fc1_latent_proj 64 x 16 and
  // fc2_latent_proj 16 x 64, four experts' up 16 x 64 and down 64 x 16, the
  // shared expert 2 x 64 x 64 on the hidden width, its norm 64.
  const std::int64_t moe = 4 * 64 + 2 * 64 * 16 + 4 * 2 * 16 * 64 + 2 * 64 * 64 + 64;
  CHECK(moe == 18'752);
  CHECK(m->parameters() == 133'004 - 41'280 + moe);  // the Mamba-2 test's total and MoE layer
  CHECK(m->active_parameters() == m->parameters() - 2 * 2 * 16 * 64);  // two of the four experts
  const auto layers = m->layers(shape(1, 128, 2)), plain_layers = plain->layers(shape(1, 128, 2));
  const sim::Layer& l = layers[4];
  CHECK(l.params == moe);
  CHECK(l.signature.find(",ml=16") != std::string::npos);
  CHECK(plain_layers[4].signature.find(",ml=") == std::string::npos);
  const auto named = [](const std::vector<sim::Kernel>& ks, const char* name) {
    const auto it = std::find_if(ks.begin(), ks.end(), [&](const sim::Kernel& k) { return k.name == name; });
    REQUIRE(it != ks.end());
    return *it;
  };
  // 128 tokens: the router on h (128 x 4 x 64), fc1 down to 16, the
  // experts' 256 rows (64 an expert) up from 16 to 64 and down, fc2 back.
  CHECK(named(l.forward, "moe.router").flops == Approx(2.0 * 128 * 4 * 64));
  CHECK(named(l.forward, "moe.latent.fc1").flops == Approx(2.0 * 128 * 16 * 64));
  CHECK(named(l.forward, "moe.experts.up").flops == Approx(2.0 * 256 * 64 * 16));
  CHECK(named(l.forward, "moe.experts.down").flops == Approx(2.0 * 256 * 16 * 64));
  CHECK(named(l.forward, "moe.latent.fc2").flops == Approx(2.0 * 128 * 64 * 16));
  CHECK(named(l.forward, "moe.shared.up").flops == Approx(2.0 * 128 * 64 * 64));
  // Kept, against the plain layer: fc2's input (2 x 128 x 16 bytes) more;
  // the experts' 256 input rows and their 256 output rows for the
  // weighted sum at 16 wide, not 64 (2 x 2 x 256 x 48 fewer).
  CHECK(l.saved_bytes == plain_layers[4].saved_bytes + 2 * 128 * 16 - 2 * 2 * 256 * 48);
  // Under ep 2 the rows go by all-to-all at 16 wide: 2 x 128 x 2 x 16
  // bytes each way, where the plain layer sends 64 wide.
  sim::WorkloadShape ep2 = shape(1, 128, 2);
  ep2.ep = 2;
  const auto sent = [](const sim::Layer& x) {
    for (const auto& c : x.ep_forward) {
      if (c.op == sim::CollectiveOp::kAllToAll && c.count == 2) return c.bytes;
    }
    return Bytes{-1};
  };
  CHECK(sent(m->layers(ep2)[4]) == 2 * 128 * 2 * 16);
  CHECK(sent(plain->layers(ep2)[4]) == 2 * 128 * 2 * 64);
  // At tp 2 with sequence parallelism the projections, whole on every
  // rank, are reduced over tp as the norm and the router are.
  sim::WorkloadShape tp2 = shape(1, 128, 2);
  tp2.tp = 2;
  tp2.sequence_parallel = true;
  CHECK(m->layers(tp2)[4].sp_params - plain->layers(tp2)[4].sp_params == 2 * 64 * 16);
  // The width needs experts; a yaml without them is refused at the key.
  const std::string bad = dir.file("bad.yaml");
  std::ofstream(bad) << "family: llama\nlayers: 2\nhidden: 64\nheads: 4\nintermediate: 128\nvocab: 256\nmoe_latent: 16\n";
  CHECK(error_of([&] { load_model(bad); }).find("moe_latent: is the routed experts' width; it needs experts (2 or more)") != std::string::npos);
}

TEST_CASE("a hybrid's multi-token prediction depths: attention then the MoE, one layer's weights where they repeat it (Note [Multi-token prediction])",
          "[llama][mamba][mtp]") {
  test::TempDir dir("mtp");
  const std::string yaml = dir.file("hybrid.yaml");
  const std::string body = "family: llama\nhybrid_pattern: M-*E\nhidden: 64\nheads: 4\nkv_heads: 2\nhead_dim: 16\nintermediate: 128\n"
                           "vocab: 256\nseq_len: 256\nsquared_relu: true\nrotary: false\nmamba_head_dim: 32\nmamba_state: 16\nmamba_groups: 2\n"
                           "mamba_chunk: 32\nexperts: 4\ntop_k: 2\nexpert_intermediate: 64\nshared_intermediate: 64\nmtp_layers: 2\n";
  std::ofstream(yaml) << body;
  const std::string repeated = dir.file("repeated.yaml");
  std::ofstream(repeated) << body << "mtp_repeated: true\n";
  // A depth: attention (q and o 64 x 64, k and v 64 x 32) and the MoE
  // (router 64 x 4, experts 4 x 2 x 64 x 64, shared 2 x 64 x 64) with
  // their two norms, eh_proj 2 x 64 x 64, enorm, hnorm and its final norm.
  const std::int64_t depth = 2 * 64 * 64 + 2 * 64 * 32 + 4 * 64 + 4 * 2 * 64 * 64 + 2 * 64 * 64 + 2 * 64 + 2 * 64 * 64 + 3 * 64;
  CHECK(depth == 62'016);
  CHECK(load_model(yaml)->parameters() == 133'004 + 2 * depth);  // the Mamba-2 test's model, two depths
  const auto m = load_model(repeated);
  CHECK(m->parameters() == 133'004 + depth);
  const auto layers = m->layers(shape(1, 128, 2));
  REQUIRE(layers.size() == 8);  // the embedding, four layers, two depths, the head
  CHECK(layers[5].name == "mtp.0");
  CHECK(layers[5].params == depth);
  CHECK(layers[6].name == "mtp.1");
  CHECK(layers[6].params == 0);  // depth 0's weights, run again
  CHECK(layers[6].signature == layers[5].signature + ",depth=r");
  // The same work: a depth runs an attention and a MoE layer over every token.
  double f0 = 0, f1 = 0;
  for (const auto& k : layers[5].forward) f0 += k.flops;
  for (const auto& k : layers[6].forward) f1 += k.flops;
  CHECK(f0 == Approx(f1));
  // mtp_repeated needs depths.
  std::ofstream(dir.file("alone.yaml")) << "family: llama\nlayers: 2\nhidden: 64\nheads: 4\nintermediate: 128\nvocab: 256\nmtp_repeated: true\n";
  CHECK(error_of([&] { load_model(dir.file("alone.yaml")); }).find("mtp_repeated: is read only with mtp_layers") != std::string::npos);
}

TEST_CASE("Nemotron 3 Super and Ultra: LatentMoE built-ins, parameters by hand (Note [Latent MoE])", "[llama][mamba][latent]") {
  // tests/data/hf/PARAMS.md derives both.
  const auto super = load_model("nemotron-3-super-120b-a12b"), ultra = load_model("nemotron-3-ultra-550b-a55b");
  CHECK(super->parameters() == 120'668'687'360);
  CHECK(super->active_parameters() == 12'770'216'960);
  CHECK(ultra->parameters() == 549'308'968'960);
  CHECK(ultra->active_parameters() == 56'058'818'560);
  // A config.json with the hub's keys (NemotronHConfig's names) reads as the built-in.
  test::TempDir dir("super");
  const std::string config = R"({
  "architectures": ["NemotronHForCausalLM"],
  "model_type": "nemotron_h",
  "hybrid_override_pattern": "MEMEMEM*EMEMEMEM*EMEMEMEM*EMEMEMEMEM*EMEMEMEMEM*EMEMEMEMEM*EMEMEMEMEM*EMEMEMEM*EMEMEMEME",
  "num_hidden_layers": 88,
  "hidden_size": 4096,
  "num_attention_heads": 32,
  "num_key_value_heads": 2,
  "head_dim": 128,
  "mamba_num_heads": 128,
  "mamba_head_dim": 64,
  "ssm_state_size": 128,
  "n_groups": 8,
  "conv_kernel": 4,
  "chunk_size": 128,
  "mlp_hidden_act": "relu2",
  "n_routed_experts": 512,
  "num_experts_per_tok": 22,
  "intermediate_size": 21504,
  "moe_intermediate_size": 2688,
  "moe_latent_size": 1024,
  "moe_shared_expert_intermediate_size": 5376,
  "n_shared_experts": 1,
  "n_group": 1,
  "topk_group": 1,
  "routed_scaling_factor": 5.0,
  "norm_topk_prob": true,
  "num_nextn_predict_layers": 1,
  "mtp_hybrid_override_pattern": "*E",
  "tie_word_embeddings": false,
  "max_position_embeddings": 262144,
  "vocab_size": 131072
})";
  const auto read = load_model(write_json(dir, config));
  CHECK(read->parameters() == 120'668'687'360);  // HuggingFace's model skips the MTP layer
  // Layer by layer the same work and memory (intermediate_size, NemotronHConfig's
  // 21504, sizes no layer here: the pattern has no dense MLP).
  sim::WorkloadShape w = shape(1, 4096, 2);
  w.flash_attention = true;
  const auto a = read->layers(w), b = super->layers(w);
  REQUIRE(a.size() == b.size());
  for (std::size_t i = 0; i < a.size(); ++i) {
    INFO(b[i].name);
    CHECK(a[i].params == b[i].params);
    CHECK(a[i].saved_bytes == b[i].saved_bytes);
    double fa = 0, fb = 0;
    for (const auto& k : a[i].forward) fa += k.flops;
    for (const auto& k : b[i].forward) fb += k.flops;
    CHECK(fa == Approx(fb));
  }
}

TEST_CASE("Granite 4.0-H: blocks whose mixer is Mamba-2 or attention, from config.json by hand (Note [Mamba-2])", "[llama][mamba]") {
  // Three blocks (mamba, attention, mamba) of hidden 64, each with Granite's
  // shared SwiGLU MLP of 48 beside 4 SwiGLU experts of 32 (top-2); Mamba-2
  // of 4 heads of 32 (mamba_expand 2 x 64 / 4), one group, state 16; 4
  // attention heads of 16, 2 KV heads, no positions; a tied embedding.
  test::TempDir dir("granite-h");
  const std::string config = R"({
  "architectures": ["GraniteMoeHybridForCausalLM"],
  "model_type": "granitemoehybrid",
  "hidden_size": 64, "num_hidden_layers": 3, "num_attention_heads": 4, "num_key_value_heads": 2,
  "intermediate_size": 32, "shared_intermediate_size": 48, "num_local_experts": 4, "num_experts_per_tok": 2,
  "vocab_size": 256, "max_position_embeddings": 256, "tie_word_embeddings": true,
  "embedding_multiplier": 12.0, "residual_multiplier": 0.22, "logits_scaling": 6.0, "attention_multiplier": 0.0625,
  "position_embedding_type": "nope", "layer_types": ["mamba", "attention", "mamba"],
  "mamba_n_heads": 4, "mamba_d_head": "auto", "mamba_n_groups": 1, "mamba_d_state": 16, "mamba_d_conv": 4, "mamba_expand": 2,
  "mamba_chunk_size": 32, "mamba_conv_bias": true, "mamba_proj_bias": false
})";
  const auto m = load_model(write_json(dir, config));
  // Mamba: in_proj 64 x (2 x 128 + 2 x 16 + 4), the convolution over 128 +
  // 32 channels with its bias (x 5), 3 x 4, the norm 128, out_proj 128 x 64;
  // attention: q 64 x 64, k and v 64 x 32, o 64 x 64; each block two norms
  // of 64, the router 4 x 64, the experts 4 x 3 x 64 x 32, the shared MLP
  // 3 x 64 x 48; the embedding 256 x 64, tied; the final norm.
  const std::int64_t mamba = 64 * 292 + 160 * 5 + 12 + 128 + 128 * 64, attention = 64 * 64 + 2 * 64 * 32 + 64 * 64;
  const std::int64_t rest = 128 + 4 * 64 + 4 * 3 * 64 * 32 + 3 * 64 * 48;
  CHECK(mamba == 27'820);
  CHECK(attention == 12'288);
  CHECK(m->parameters() == 2 * (mamba + rest) + attention + rest + 256 * 64 + 64);
  CHECK(m->parameters() == 186'904);
  CHECK(m->active_parameters() == 186'904 - 3 * 2 * 3 * 64 * 32);
  const auto layers = m->layers(shape(1, 64, 2));
  REQUIRE(layers.size() == 5);
  CHECK(layers[1].signature.rfind("moe.block:mamba=1,h=64,mh=4,mp=32,mn=16,mg=1,ck=4,mq=32,E=4,k=2,fe=32,fs=48,", 0) == 0);
  CHECK(layers[1].signature.find(",part=") == std::string::npos);  // whole blocks
  CHECK(layers[2].signature.rfind("moe.block:h=64,a=4,kv=2,d=16,", 0) == 0);
  CHECK(layers[2].signature.find(",nope=1") != std::string::npos);
  CHECK(layers[2].signature.find(",rm=220000") != std::string::npos);
  // Without layer_types every block is Mamba (the class's layers_block_type).
  std::string all_mamba = config;
  all_mamba.replace(all_mamba.find("\"layer_types\""), std::string("\"layer_types\": [\"mamba\", \"attention\", \"mamba\"],").size(), "");
  CHECK(load_model(write_json(dir, all_mamba))->parameters() == 3 * (mamba + rest) + 256 * 64 + 64);
  // What it does not hold is refused at its key.
  std::string moe_type = config;
  moe_type.replace(moe_type.find("\"attention\", \"mamba\"]"), 11, "\"moe\"");
  CHECK(error_of([&] { load_model(write_json(dir, moe_type)); }).find("config.layer_types: layer 1 is 'moe'; valid: mamba, attention") !=
        std::string::npos);
  std::string heads = config;
  heads.replace(heads.find("\"mamba_n_heads\": 4"), 18, "\"mamba_n_heads\": 5");
  CHECK(error_of([&] { load_model(write_json(dir, heads)); }).find("config.mamba_n_heads: 5 does not divide mamba_expand x hidden_size = 128") !=
        std::string::npos);
  // A dense Granite 4.0-H (no experts) has the shared MLP alone.
  std::string dense = config;
  dense.replace(dense.find("\"num_local_experts\": 4"), 22, "\"num_local_experts\": 0");
  CHECK(load_model(write_json(dir, dense))->parameters() == 2 * mamba + attention + 3 * (128 + 3 * 64 * 48) + 256 * 64 + 64);
  // layer_mixers in our YAML: refused beside a hybrid pattern.
  std::vector<sim::Override> both{sim::parse_override("model.layer_mixers=M*"), sim::parse_override("model.hybrid_pattern=M-")};
  CHECK(error_of([&] { load_model("llama-tiny", both); }).find("model.layer_mixers: contradicts hybrid_pattern") != std::string::npos);
}

namespace {

/// A small latent-attention model (4 heads; q_lora 32, kv_lora 16, nope 8,
/// rope 4, v 8; two dense SwiGLU layers of 256, hidden 64, vocab 100),
/// with DeepSeek Sparse Attention's `dsa` keys appended where given.
std::string dsa_yaml(const test::TempDir& dir, const std::string& name, const std::string& dsa) {
  const std::string path = dir.file(name + ".yaml");
  std::ofstream(path) << "family: llama\nlayers: 2\nhidden: 64\nheads: 4\nintermediate: 256\nvocab: 100\nseq_len: 16\n"
                         "q_lora_rank: 32\nkv_lora_rank: 16\nqk_nope_dim: 8\nqk_rope_dim: 4\nv_head_dim: 8\n"
                      << dsa;
  return path;
}

const sim::Kernel* find_kernel(const std::vector<sim::Kernel>& ks, const std::string& name) {
  const auto it = std::find_if(ks.begin(), ks.end(), [&](const sim::Kernel& k) { return k.name == name; });
  return it == ks.end() ? nullptr : &*it;
}

}  // namespace

TEST_CASE("DeepSeek Sparse Attention: parameters, kept bytes, FLOPs and collectives of a small model by hand "
          "(Note [DeepSeek Sparse Attention])",
          "[llama][dsa]") {
  test::TempDir dir("dsa");
  const std::string indexer = "index_topk: 4\nindex_heads: 2\nindex_head_dim: 8\n";
  const auto dsa = load_model(dsa_yaml(dir, "dsa", indexer));
  const auto mla = load_model(dsa_yaml(dir, "mla", ""));
  // A layer's latent attention: q_a 64 x 32, its norm 32, q_b 32 x 4 x 12,
  // kv_a 64 x 20, its norm 16, kv_b 16 x 4 x 16, o_proj 32 x 64 = 7,984;
  // the indexer: wq_b 32 x 2 x 8, wk 64 x 8, k_norm's weight and bias 16,
  // weights_proj 64 x 2 = 1,168; the MLP 3 x 64 x 256, two norms 128.
  const std::int64_t attention = 2048 + 32 + 1536 + 1280 + 16 + 1024 + 2048, index = 512 + 512 + 16 + 128;
  CHECK(attention == 7'984);
  CHECK(index == 1'168);
  const std::int64_t layer = attention + index + 3 * 64 * 256 + 128;
  CHECK(dsa->parameters() == 2 * layer + 2 * 100 * 64 + 64);
  CHECK(dsa->parameters() == 129'728);
  CHECK(dsa->parameters() - mla->parameters() == 2 * index);

  sim::WorkloadShape w = shape(1, 16, 2);
  w.flash_attention = true;
  const auto l = dsa->layers(w), m = mla->layers(w);
  REQUIRE(l.size() == 4);
  CHECK(l[1].params == layer);
  CHECK(l[1].signature.find(",dsa=4,ih=2,id=8,il=1,") != std::string::npos);
  // Kept beyond what both layers keep (the norms, the query latent, the MLP),
  // 16 tokens of 2 bytes:
  //   MLA with a fused kernel: the kv latent's norm (6 x 256 + 4 x 16) and
  //     kv_b_proj's input (2 x 256), Q, K and V (2 x 16 x 4 x 32), o_proj's
  //     input (1,024), the log-sum-exp (4 x 4 x 16), O (1,024):     12,672
  //   DSA: the kv latent's norm 1,600, q_absorb's input q_nope (a view
  //     keeping q_b_proj's output, 2 x 16 x 4 x 12), o_proj's input 1,024;
  //     the indexer's q (2 x 16 x 2 x 8), its
  //     weights (2 x 32), k and k's norm input (2 x 2 x 128), k's norm
  //     statistics (8 x 16), the int64 indices (8 x 16 x 4): 1,728; the
  //     sparse kernel's query copy padded to 16 heads (2 x 16 x 16 x 20), the
  //     key (2 x 16 x 20), the int32 indices (4 x 64), the latent output
  //     (2 x 16 x 4 x 16): 13,184                                    23,232
  CHECK(l[1].saved_bytes - m[1].saved_bytes == 23'232 - 12'672);
  // FLOPs: the sparse kernel, 16 queries x 16 padded heads x 4 keys x (20 +
  // 16) twice; backward the forward again and five GEMMs, 4 x 20 + 3 x 16.
  const sim::Kernel* core = find_kernel(l[1].forward, "attn.sparse_mla");
  REQUIRE(core != nullptr);
  CHECK(core->flops == Approx(2.0 * 16 * 16 * 4 * 36));
  const sim::Kernel* core_back = find_kernel(l[1].backward, "attn.sparse_mla.bwd");
  REQUIRE(core_back != nullptr);
  CHECK(core_back->flops == Approx(2.0 * 16 * 16 * 4 * 128));
  // The index scores: the causal half with its diagonal, 16 x 17 / 2 = 136
  // pairs, each 2 heads of a product of 8 twice, ReLU, weight and sum (3).
  const sim::Kernel* scores = find_kernel(l[1].forward, "dsa.index_scores");
  REQUIRE(scores != nullptr);
  CHECK(scores->flops == Approx(136.0 * 2 * (2 * 8 + 3)));
  // The loss's target: each token's 4 heads against its 4 keys at 20, then
  // the softmax and the sum (5); its gradient: the 4 selected scores again,
  // then dq, dk and the weights: 3 x 16 x 4 x 2 x 19.
  CHECK(find_kernel(l[1].forward, "dsa.loss_target")->flops == Approx(16.0 * 4 * 4 * 45));
  REQUIRE(find_kernel(l[1].backward, "dsa.index_scores.bwd") != nullptr);
  CHECK(find_kernel(l[1].backward, "dsa.index_scores.bwd")->flops == Approx(3.0 * 16 * 4 * 2 * 19));
  // The absorption's GEMMs do kv_b_proj's work: 2 x 16 x 4 x 8 x 16 each.
  CHECK(find_kernel(l[1].forward, "attn.q_absorb")->flops + find_kernel(l[1].forward, "attn.v_up")->flops ==
        Approx(find_kernel(m[1].forward, "attn.kv_b_proj")->flops));
  CHECK(find_kernel(l[1].forward, "attn.kv_b_proj") == nullptr);
  // The indexer's projections get weight gradients alone (detached inputs).
  CHECK(find_kernel(l[1].backward, "dsa.index_q.wgrad") != nullptr);
  CHECK(find_kernel(l[1].backward, "dsa.index_q.dgrad") == nullptr);

  SECTION("without a loss the indexer runs forward only and keeps nothing") {
    const auto none = load_model(dsa_yaml(dir, "none", indexer + "index_loss: none\n"))->layers(w);
    CHECK(l[1].saved_bytes - none[1].saved_bytes == 1'728);
    CHECK(find_kernel(none[1].backward, "dsa.index_scores.bwd") == nullptr);
    CHECK(find_kernel(none[1].backward, "dsa.index_q.wgrad") == nullptr);
    CHECK(find_kernel(none[1].forward, "dsa.loss_target") == nullptr);
    CHECK(none[1].signature.find(",il=0") != std::string::npos);
  }
  SECTION("the dense loss and Megatron-Core's dense kernels score every key") {
    const auto dense = load_model(dsa_yaml(dir, "dense", indexer + "index_loss: dense\ndsa_kernels: dense\n"))->layers(w);
    // The target: an fp32 bmm of 16 x 16 pairs for 4 heads at 20; backward
    // holds fp32 [16, 16] for twice the heads and the indexer's 2.
    CHECK(find_kernel(dense[1].forward, "dsa.loss_target")->flops == Approx(2.0 * 16 * 16 * 20 * 4));
    CHECK(dense[1].backward_workspace_bytes == 4 * 256 * (2 * 4 + 2));
    // Every pair scored (no causal skip) by the einsum, 256 x 2 heads x 16,
    // then ReLU, weight and sum (3 each) as a pass of their own; the masked
    // attention over all 16 x 16 pairs at 20.
    CHECK(find_kernel(dense[1].forward, "dsa.index_scores")->flops == Approx(256.0 * 2 * 16));
    CHECK(find_kernel(dense[1].forward, "dsa.index_relu_sum")->flops == Approx(256.0 * 2 * 3));
    CHECK(find_kernel(dense[1].forward, "attn.scores")->flops == Approx(2.0 * 16 * 16 * 20 * 4));
    CHECK(find_kernel(dense[1].forward, "attn.sparse_mla") == nullptr);
    // Kept by the masked attention: the fp32 q (4 x 16 x 4 x 20) and key
    // (4 x 16 x 20), the fp32 softmax and its cast (6 x 1,024 scores), the
    // mask (256), the key as the value (2 x 16 x 20): 13,440, where the
    // sparse kernel keeps 13,184; the indexer keeps the same.
    CHECK(dense[1].saved_bytes - l[1].saved_bytes == 13'440 - 13'184);
    CHECK(dense[1].signature.find(",il=2,dk=1") != std::string::npos);
  }
  SECTION("tensor and context parallelism: the gathers it adds") {
    sim::WorkloadShape t2 = w;
    t2.tp = 2;
    t2.sequence_parallel = true;
    const auto tp = dsa->layers(t2);
    // x and the query latent gathered for the indexer, 2 x 16 x (64 + 32);
    // the target's fp32 [16, 4] summed over tp.
    const auto has = [](const std::vector<sim::LayerComm>& cs, sim::CollectiveOp op, Bytes bytes) {
      return std::any_of(cs.begin(), cs.end(), [&](const sim::LayerComm& c) { return c.op == op && c.bytes == bytes; });
    };
    CHECK(has(tp[1].tp_forward, sim::CollectiveOp::kAllGather, 3'072));
    CHECK(has(tp[1].tp_forward, sim::CollectiveOp::kAllReduce, 256));
    // The indexer whole on each rank, its gradients reduced over tp.
    CHECK(tp[1].sp_params >= index);
    sim::WorkloadShape c2 = w;
    c2.cp = 2;
    const auto cp = dsa->layers(c2);
    // The key (2 x 16 x 20) and the indexer's k (2 x 16 x 8) gathered; their
    // gradients reduce-scattered.
    CHECK(has(cp[1].cp_forward, sim::CollectiveOp::kAllGather, 640));
    CHECK(has(cp[1].cp_forward, sim::CollectiveOp::kAllGather, 256));
    CHECK(has(cp[1].cp_backward, sim::CollectiveOp::kReduceScatter, 640));
    CHECK(has(cp[1].cp_backward, sim::CollectiveOp::kReduceScatter, 256));
  }
  SECTION("a layer reusing the last indexer's keys has none") {
    const auto shared = load_model(dsa_yaml(dir, "shared", indexer + "indexer_layers: FS\n"));
    CHECK(shared->parameters() == 129'728 - index);
    const auto s = shared->layers(w);
    CHECK(s[2].params == layer - index);
    CHECK(s[2].signature.ends_with(",ix=0"));
    CHECK(find_kernel(s[2].forward, "dsa.index_q") == nullptr);
    CHECK(find_kernel(s[2].forward, "attn.sparse_mla") != nullptr);
  }
  SECTION("refused in one line at the key") {
    CHECK_THAT(error_of([&] { load_model(dsa_yaml(dir, "bad", indexer + "indexer_layers: FX\n")); }),
               Catch::Contains("indexer_layers: letter 2 is 'X'; valid: F"));
    CHECK_THAT(error_of([&] { load_model(dsa_yaml(dir, "bad", indexer + "indexer_layers: SF\n")); }),
               Catch::Contains("indexer_layers: starts with S"));
    CHECK_THAT(error_of([&] { load_model(dsa_yaml(dir, "bad", indexer + "indexer_layers: F\n")); }),
               Catch::Contains("indexer_layers: 1 letters for the 2 layers"));
    CHECK_THAT(error_of([&] { load_model(dsa_yaml(dir, "bad", "index_heads: 4\n")); }),
               Catch::Contains("index_heads: is read only with index_topk"));
    CHECK_THAT(error_of([&] { load_model(dsa_yaml(dir, "bad", indexer + "index_loss: kl\n")); }), Catch::Contains("index_loss"));
    CHECK_THAT(error_of([&] { load_model("llama-tiny", {sim::parse_override("model.index_topk=8")}); }),
               Catch::Contains("index_topk: needs latent attention (kv_lora_rank)"));
    // Absurd sizes: 8 x 163,840 queries each of 163,840 keys of 576 x 2
    // bytes is 247 TB a layer, past the bound of Note [Model size bound].
    const auto huge = load_model("deepseek-v3.2", {sim::parse_override("model.index_topk=16777216")});
    CHECK_THAT(error_of([&] { huge->layers(shape(8, 163840, 2)); }), Catch::Contains("DSA selected keys"));
  }
}

TEST_CASE("DeepSeek-V3.2 and GLM-5: config.json, built-ins and parameters by hand (Note [DeepSeek Sparse Attention])",
          "[llama][dsa]") {
  // tests/data/hf/PARAMS.md: DeepSeek-V3's 671,026,404,352 and 61 indexers
  // of 13,959,424; active 37,552,282,624 + the indexers.
  const auto file = load_model(hf("deepseek-v3.2")), built = load_model("deepseek-v3.2");
  CHECK(file->parameters() == 671'877'929'216);
  CHECK(built->parameters() == 671'877'929'216);
  CHECK(built->active_parameters() == 38'403'807'488);
  auto w = shape(1, 4096, 2);
  w.flash_attention = true;
  w.ep = 8;
  const auto a = file->layers(w), b = built->layers(w);
  REQUIRE(a.size() == b.size());
  for (std::size_t i = 0; i < a.size(); ++i) CHECK(a[i].signature == b[i].signature);
  // GLM-5: GlmMoeDsaConfig's defaults, 743,911,199,232 and 41,784,709,632 active.
  const auto glm = load_model("glm-5");
  CHECK(glm->parameters() == 743'911'199'232);
  CHECK(glm->active_parameters() == 41'784'709'632);
  test::TempDir dir("glm5");
  CHECK(load_model(write_json(dir, R"({"architectures": ["GlmMoeDsaForCausalLM"], "model_type": "glm_moe_dsa"})"))->parameters() ==
        743'911'199'232);
  // indexer_types' shared layers have no indexer: 9,371,904 each fewer.
  std::string types = "\"full\"";
  for (int i = 1; i < 78; ++i) types += i % 2 == 1 ? ", \"shared\"" : ", \"full\"";
  const auto shared = load_model(write_json(dir, R"({"model_type": "glm_moe_dsa", "indexer_types": [)" + types + "]}"));
  CHECK(shared->parameters() == 743'911'199'232 - 39 * 9'371'904);
  // GlmMoeDsaConfig's index_topk_freq 2 from offset 2: layers 0, 1, 3, 5, ... run one (i - 1 even).
  const auto freq = load_model(write_json(dir, R"({"model_type": "glm_moe_dsa", "index_topk_freq": 2})"));
  CHECK(freq->parameters() == 743'911'199'232 - 38 * 9'371'904);
  CHECK_THAT(error_of([&] { load_model(write_json(dir, R"({"model_type": "glm_moe_dsa", "indexer_types": ["shared"]})")); }),
             Catch::Contains("indexer_types: lists 1 layers"));
  CHECK_THAT(error_of([&] { load_model(write_json(dir, R"({"model_type": "deepseek_v32", "index_topk": 0})")); }),
             Catch::Contains("index_topk"));
}

TEST_CASE("Megatron's fine-grained offload groups hold what each module saves (Note [Offload modules])", "[llama][offload][memory]") {
  const auto m = make_llama(mla_moe_config());
  // bf16 (e 2), fused norms and SwiGLU, fused attention: t = 16 tokens, h 64.
  auto w = shape(1, 16, 2);
  w.fused_kernels = true;
  w.flash_attention = true;
  w.offload_modules = 0x1FF;  // every module
  auto blocks = [&](std::uint8_t recompute) {
    w.recompute_modules = recompute;
    std::vector<sim::Layer> out;
    for (const auto& l : m->layers(w)) {
      if (l.is_block()) out.push_back(l);
    }
    REQUIRE(out.size() == 2);
    return out;
  };
  using T = std::vector<std::pair<std::int64_t, Bytes>>;
  auto tensors = [](const sim::Layer& l, std::uint16_t module) {
    T out;
    for (const auto& g : l.offload_groups) {
      if (g.module != module) continue;
      for (const auto& t : g.tensors) out.emplace_back(t.elements, t.bytes);
    }
    return out;
  };
  const auto none = blocks(0);
  // Multi-latent attention's input norm is a module of its own (TENorm):
  // its input (t h = 1,024 elements) and rsigma (16 fp32).
  CHECK(tensors(none[1], sim::kOffloadAttnNorm) == T{{1024, 2048}, {16, 64}});
  // qkv_linear: the down-projections' input (the norm's output), then each
  // latent's norm (its input, rsigma) and its up-projection's input: the
  // query latent of 32 (t x 32 = 512), the key-value latent of 16 (256).
  CHECK(tensors(none[1], sim::kOffloadQkvLinear) ==
        T{{1024, 2048}, {512, 1024}, {16, 64}, {512, 1024}, {256, 512}, {16, 64}, {256, 512}});
  // core_attn: Q and K at 4 heads of 12 (768), V and O at 8 (512), and the
  // fused kernel's own keeps (its log-sum-exp) last.
  const T core = tensors(none[1], sim::kOffloadCoreAttn);
  REQUIRE(core.size() == 5);
  CHECK(T(core.begin(), core.begin() + 4) == T{{768, 1536}, {768, 1536}, {512, 1024}, {512, 1024}});
  CHECK(core[4].second == 4 * core[4].first);  // the log-sum-exp, fp32
  CHECK(tensors(none[1], sim::kOffloadAttnProj) == T{{512, 1024}});
  // The MoE layer's norm (TENorm, the router's): as the attention's.
  CHECK(tensors(none[1], sim::kOffloadMlpNorm) == T{{1024, 2048}, {16, 64}});
  CHECK(tensors(none[0], sim::kOffloadMlpNorm).empty());  // fused into the dense block's fc1
  // The routed experts see k t = 32 rows of h 64: fc1's input 2,048; its
  // output (gate and up) 2 x 32 x 32; the probabilities, fp32; fc2's input 32 x 32.
  CHECK(tensors(none[1], sim::kOffloadExpertFc1) == T{{2048, 4096}});
  CHECK(tensors(none[1], sim::kOffloadMoeAct) == T{{2048, 4096}, {32, 128}});
  CHECK(tensors(none[1], sim::kOffloadFusedGroupMlp) == T{{2048, 4096}, {2048, 4096}, {32, 128}, {1024, 2048}});
  CHECK(none[0].offload_described == (sim::kOffloadAttnNorm | sim::kOffloadQkvLinear | sim::kOffloadCoreAttn | sim::kOffloadAttnProj));
  CHECK(none[1].offload_described == 0xFF);  // all but gdp_qkv
  // Groups in forward order, each over its own kernels.
  for (const auto& l : none) {
    for (std::size_t i = 0; i < l.offload_groups.size(); ++i) {
      const auto& g = l.offload_groups[i];
      CHECK(g.first < g.end);
      CHECK(g.end <= l.forward.size());
      if (i > 0) CHECK(l.offload_groups[i - 1].end <= g.end);
    }
  }
  // The groups that do not overlap hold no more than the block keeps.
  Bytes disjoint = 0;
  for (const auto& g : none[1].offload_groups) {
    if (g.module == sim::kOffloadExpertFc1 || g.module == sim::kOffloadMoeAct) continue;  // inside fused_group_mlp
    for (const auto& t : g.tensors) disjoint += t.bytes;
  }
  CHECK(disjoint <= none[1].saved_bytes);

  // Under mla_up_proj the up-projections' checkpoint keeps the latents
  // alone, and Q, K, V are rebuilt, not kept; under moe_act the
  // activation's checkpoint keeps fc1's output, and fc2's input goes.
  const auto rerun = blocks(sim::kRecomputeMlaUpProj | sim::kRecomputeMoeAct);
  CHECK(tensors(rerun[1], sim::kOffloadQkvLinear) == T{{1024, 2048}, {512, 1024}, {256, 512}});
  const T rerun_core = tensors(rerun[1], sim::kOffloadCoreAttn);
  REQUIRE(rerun_core.size() == 2);
  CHECK(rerun_core[0] == std::pair<std::int64_t, Bytes>{512, 1024});
  CHECK(tensors(rerun[1], sim::kOffloadMoeAct) == T{{2048, 4096}, {32, 128}});
  CHECK(tensors(rerun[1], sim::kOffloadFusedGroupMlp) == T{{2048, 4096}, {2048, 4096}, {32, 128}});
  // A norm's group commits after its sublayer's residual add: its copy
  // starts once the attention (or the MoE layer) is done.
  for (const auto& g : none[1].offload_groups) {
    if (g.module == sim::kOffloadAttnNorm) CHECK(none[1].forward[g.end - 1].name == "attn.residual");
    if (g.module == sim::kOffloadMlpNorm) CHECK(none[1].forward[g.end - 1].name == "mlp.residual");
  }
  // Nothing asked, no groups.
  w.offload_modules = 0;
  CHECK(blocks(0)[1].offload_groups.empty());
}

TEST_CASE("DeepSeek-V4-Flash: config.json, built-in and parameters by hand (Note [DeepSeek-V4], Note [Hyper-connections])",
          "[llama][dsv4]") {
  // Per layer, from the weights' shapes (h 4096, 64 heads of 512, q_lora
  // 1024, 8 output groups of rank 1024, one kv head):
  //   attention: wq_a 4096 x 1024, q_layernorm 1024, wq_b 1024 x 32768, wkv
  //     4096 x 512, kv_layernorm 512, wo_a 8 x 1024 x 4096, wo_b 8192 x
  //     4096, the sinks 64                                       106,956,352
  //   compressor at ratio 4 (coff 2): wkv and wgate 2 x 1024 x 4096, ape 4 x
  //     1024, norm 512: 8,393,216; at ratio 128 (coff 1): 2 x 512 x 4096,
  //     ape 128 x 512, norm 512: 4,260,352
  //   indexer (ratio 4): wq_b 1024 x 64 x 128, weights_proj 4096 x 64, its
  //     compressor 2 x 256 x 4096 + 4 x 256 + 128                 10,749,056
  //   hyper-connections, two sublayers: (16 + 8) x 4 x 4096 + 24 + 3 each
  //                                                                  786,486
  //   experts: 257 x 3 x 4096 x 2048 (one shared), router 256 x 4096
  //                                                             6,468,665,344
  //   two norms                                                        8,192
  const std::int64_t attention = 4'194'304 + 1'024 + 33'554'432 + 2'097'152 + 512 + 33'554'432 + 33'554'432 + 64;
  CHECK(attention == 106'956'352);
  const std::int64_t hc = 2 * ((16 + 8) * 4 * 4096 + 24 + 3), experts = 257LL * 3 * 4096 * 2048 + 256 * 4096;
  CHECK(hc == 786'486);
  const std::int64_t r0 = attention + hc + experts + 8192, r4 = r0 + 8'393'216 + 10'749'056, r128 = r0 + 4'260'352;
  CHECK(r0 == 6'576'416'374);
  // 2 window-only layers, 21 of ratio 4, 20 of ratio 128; the embedding and
  // the untied head 129280 x 4096 each, the final norm, the head's
  // contraction of the streams 4 x 4 x 4096 + 4 + 1: 284,332,230,231, the
  // model card's 284B.
  const std::int64_t total = 2 * r0 + 21 * r4 + 20 * r128 + 2 * 129280LL * 4096 + 4096 + 65'541;
  CHECK(total == 284'332'230'231);
  const auto from_hf = load_model(hf("deepseek-v4-flash"));
  CHECK(from_hf->parameters() == total);
  CHECK(load_model("deepseek-v4-flash")->parameters() == total);
  // Active: 6 routed experts and the shared one: 12,740,490,834 in the layers.
  const std::int64_t moe_active = 7LL * 3 * 4096 * 2048 + 256 * 4096;
  const std::int64_t active = 2 * (r0 - experts + moe_active) + 21 * (r4 - experts + moe_active) + 20 * (r128 - experts + moe_active);
  CHECK(active == 12'740'490'834);
  CHECK(from_hf->active_parameters() == active + 2 * 129280LL * 4096 + 4096 + 65'541);
  // The MTP depth (ratio 0, the list's 44th): its block, e_proj and h_proj
  // 4096 x 4096 each, three norms, its own contraction.
  const auto mtp = load_model("deepseek-v4-flash", {sim::parse_override("model.mtp_layers=1")});
  CHECK(mtp->parameters() == total + r0 + 2 * 4096LL * 4096 + 3 * 4096 + 65'541);

  sim::WorkloadShape w = shape(1, 4096, 2);
  w.flash_attention = true;
  w.fused_kernels = true;
  const auto l = from_hf->layers(w);
  REQUIRE(l.size() == 45);
  CHECK(l[1].params == r0);
  CHECK(l[3].params == r4);
  CHECK(l[4].params == r128);
  CHECK(l[3].signature.find("v4=1,h=4096,a=64,qr=1024,d=512,dr=64,cr=4,og=8,or=1024,dsa=512,ih=64,id=128,il=1,") != std::string::npos);
  CHECK(l[4].signature.find(",cr=128,og=8,or=1024,E=256") != std::string::npos);
  CHECK(l[4].signature.find(",hc=4,hs=20") != std::string::npos);
  // The streams between layers: 4 x 4096 x 4096 x 2 bytes, from the embedding on.
  CHECK(l[0].output_bytes == 4LL * 4096 * 4096 * 2);
  CHECK(l[1].output_bytes == 4LL * 4096 * 4096 * 2);
  // The sparse core's slots over the 4096 queries: ratio 0 the window of
  // 128; ratio 128 the window and 4096 / 128 = 32 entries, padded to 192;
  // ratio 4 compacted: sum of min(128, i + 1) = 128 x 129 / 2 + 3968 x 128
  // = 516,160, and of min(512, (i + 1) / 4) = 523,264 (to i = 2046) + 512 x
  // 2049 = 1,572,352: 2,088,512 (509.9 a query). Each slot 2 x 64 heads x
  // (512 + 512) forward, 2 x 64 x 5 x 512 backward (QK^T again, dV, dP, dQ, dK).
  const auto core = [&](int layer) { return find_kernel(l[static_cast<std::size_t>(layer)].forward, "attn.sparse_mla")->flops; };
  CHECK(core(1) == Approx(2.0 * 4096 * 128 * 64 * 1024));
  CHECK(core(4) == Approx(2.0 * 4096 * 192 * 64 * 1024));
  CHECK(core(3) == Approx(2.0 * 2'088'512 * 64 * 1024));
  CHECK(find_kernel(l[3].backward, "attn.sparse_mla.bwd")->flops == Approx(2.0 * 2'088'512 * 64 * 5 * 512));
  // The indexer's scores over each query's causal entries: sum of
  // min(1024, (i + 1) / 4) = floor sums to 4096: 2,096,128 pairs, each 64
  // heads x (2 x 128 + 3).
  CHECK(find_kernel(l[3].forward, "dsa.index_scores")->flops == Approx(2'096'128.0 * 64 * 259));
  // wo_a's einsum: 8 groups of 4096 x 1024 x 4096, in bf16 (not a Linear).
  const sim::Kernel* wo_a = find_kernel(l[1].forward, "attn.o_group_proj");
  REQUIRE(wo_a != nullptr);
  CHECK(wo_a->kind == sim::KernelKind::kAttention);
  CHECK(wo_a->flops == Approx(2.0 * 8 * 4096 * 1024 * 4096));
  CHECK(find_kernel(l[1].forward, "attn.compress") == nullptr);
  CHECK(find_kernel(l[4].forward, "attn.compress")->flops == Approx(2.0 * 4096 * 1024 * 4096));  // wkv and wgate, 512 each
  CHECK(find_kernel(l[4].forward, "dsa.index_q") == nullptr);
  // The indexer's own compressor takes the detached x: a weight gradient, no dgrad.
  CHECK(find_kernel(l[3].backward, "dsa.index_compress.wgrad") != nullptr);
  CHECK(find_kernel(l[3].backward, "dsa.index_compress.dgrad") == nullptr);
  CHECK(find_kernel(l[3].backward, "attn.compress.dgrad") != nullptr);
  // index_loss none (no dsa_indexer_loss_coeff): no target, no indexer
  // backward; dense: the target at every causal entry, 2,096,128 pairs (as the scores').
  const auto none = load_model(hf("deepseek-v4-flash"), {sim::parse_override("model.index_loss=none")})->layers(w);
  CHECK(find_kernel(none[3].forward, "dsa.loss_target") == nullptr);
  CHECK(find_kernel(none[3].backward, "dsa.index_q.wgrad") == nullptr);
  CHECK(none[3].saved_bytes < l[3].saved_bytes);
  const auto dense = load_model(hf("deepseek-v4-flash"), {sim::parse_override("model.index_loss=dense")})->layers(w);
  CHECK(find_kernel(dense[3].forward, "dsa.loss_target")->flops == Approx(2'096'128.0 * 64 * (2 * 512 + 5)));
  CHECK(find_kernel(l[3].forward, "dsa.loss_target")->flops == Approx(1'572'352.0 * 64 * (2 * 512 + 5)));
}

TEST_CASE("DeepSeek-V4-Pro: parameters by hand, the card's 1.6T total and 49B active (Note [DeepSeek-V4])", "[llama][dsv4]") {
  // h 7168, 128 heads of 512, q_lora 1536, 16 output groups of rank 1024:
  // attention 7168 x 1536 + 1536 + 1536 x 65536 + 7168 x 512 + 512 + 1024 x
  // 65536 + 16 x 1024 x 7168 + 128; hyper-connections 2 x (24 x 28672 + 27);
  // 385 experts of 3 x 7168 x 3072 and the router 384 x 7168; two norms.
  const std::int64_t attention = 11'010'048 + 1'536 + 100'663'296 + 3'670'016 + 512 + 67'108'864 + 117'440'512 + 128;
  const std::int64_t base = attention + 2 * (24 * 28'672 + 27) + 385LL * 3 * 7168 * 3072 + 384 * 7168 + 2 * 7168;
  // Ratio 4: the compressor 2 x 1024 x 7168 + 4 x 1024 + 512 and the
  // indexer 64 x 128 x 1536 + 64 x 7168 + 2 x 256 x 7168 + 4 x 256 + 128;
  // ratio 128: 2 x 512 x 7168 + 128 x 512 + 512. 30 and 31 of them.
  const std::int64_t r4 = base + 14'680'064 + 4'096 + 512 + 12'582'912 + 458'752 + 3'670'016 + 1'024 + 128;
  const std::int64_t r128 = base + 7'340'032 + 65'536 + 512;
  const std::int64_t total = 30 * r4 + 31 * r128 + 2 * 129280LL * 7168 + 7168 + 4 * 4 * 7168 + 4 + 1;
  CHECK(total == 1'572'997'179'491);
  const auto m = load_model("deepseek-v4-pro");
  CHECK(m->parameters() == total);
  // Active: 6 of the 384 routed experts.
  CHECK(m->active_parameters() == total - 61 * 378LL * 3 * 7168 * 3072);
  CHECK(m->active_parameters() == 49'779'058'787);
}

TEST_CASE("DeepSeek-V4: mla_up_proj frees q, kv and their norms' inputs; hyper-connections keep the streams, by hand",
          "[llama][dsv4]") {
  sim::WorkloadShape w = shape(1, 4096, 2);
  w.flash_attention = true;
  w.fused_kernels = true;
  w.recompute_modules = sim::kRecomputeMlaUpProj;
  const auto l = load_model("deepseek-v4-flash")->layers(w);
  // A window-only layer, 4096 tokens in bf16: the head norm's input q (64 x
  // 512 a token) and rsqrt (64), kv's norm (its input 512 and rsigma, 4
  // bytes), q and kv as the core kept them: 268,435,456 + 524,288 +
  // 4,210,688 + 268,435,456 + 4,194,304.
  CHECK(l[1].recompute_described & sim::kRecomputeMlaUpProj);
  CHECK(l[1].attention_core_bytes == 268'435'456 + 524'288 + 4'210'688 + 268'435'456 + 4'194'304);
  // With compressed entries the core keeps kv joined to them instead.
  CHECK(l[4].attention_core_bytes == 268'435'456 + 524'288 + 4'210'688 + 268'435'456);
  // Rerun: wq_b, the head norm, wkv, kv's norm, the rotary.
  std::vector<std::string> names;
  for (const auto& k : l[1].attention_core) names.push_back(k.name);
  CHECK(names == std::vector<std::string>{"attn.q_b_proj", "attn.q_norm", "attn.kv_proj", "attn.kv_layernorm", "attn.rotary"});

  // mhc (bf16: the norms' outputs are the GEMMs' kept inputs): each
  // sublayer's aggregate, its norm's output and the streams, 4096 x 4096 x
  // 2 x (1 + 1 + 4), twice; rerun: the aggregates, norms and h_post_bda.
  w.recompute_modules = sim::kRecomputeMhc;
  const auto mhc = load_model("deepseek-v4-flash")->layers(w);
  CHECK(mhc[4].attention_core_bytes == 2 * 4096LL * 4096 * 2 * 6);
  std::vector<std::string> rerun;
  for (const auto& k : mhc[4].attention_core) rerun.push_back(k.name);
  CHECK(rerun == std::vector<std::string>{"attn.hc_aggregate", "input_layernorm", "attn.residual", "mlp.hc_aggregate", "post_attention_layernorm",
                                          "mlp.residual"});
  w.recompute_modules = sim::kRecomputeMhc | sim::kRecomputeMlaUpProj;
  CHECK(load_model("deepseek-v4-flash")->layers(w)[4].attention_core_bytes ==
        2 * 4096LL * 4096 * 2 * 6 + 268'435'456 + 524'288 + 4'210'688 + 268'435'456);

  // Without hyper-connections a layer keeps, per sublayer, 4 x 4096 x 4096
  // x 2 (the streams) + 4096 x 4096 x 2 (the output) + 4096 x 4 x (2 x 24 +
  // 1) (the fp32 gates and RMS) less: 168,574,976 a sublayer.
  w.recompute_modules = 0;
  const auto plain = load_model("deepseek-v4-flash", {sim::parse_override("model.hc_mult=0")})->layers(w);
  const auto wide = load_model("deepseek-v4-flash")->layers(w);
  CHECK(wide[3].saved_bytes - plain[3].saved_bytes == 2 * 168'574'976LL);
  CHECK(wide[3].params - plain[3].params == 786'486);
  CHECK(plain[3].output_bytes == 4096LL * 4096 * 2);
  CHECK(find_kernel(plain[3].forward, "attn.hc_gates") == nullptr);
  CHECK(find_kernel(wide[3].forward, "attn.hc_gates") != nullptr);
  // Backward sums the streams' three gradients: 3 read and 1 written, 4 x 4096 x 4096 x 2 bytes each.
  REQUIRE(find_kernel(wide[3].backward, "mlp.hc_grad_sum") != nullptr);
  CHECK(find_kernel(wide[3].backward, "mlp.hc_grad_sum")->bytes == 4 * 4LL * 4096 * 4096 * 2);
  CHECK(find_kernel(plain[3].backward, "mlp.hc_grad_sum") == nullptr);
  CHECK(find_kernel(wide.back().forward, "hc_head.sum") != nullptr);
}

TEST_CASE("DeepSeek-V4: bad configs and plans are refused in one line naming the key", "[llama][dsv4][bad-input]") {
  using sim::parse_override;
  CHECK(error_of([] { load_model("deepseek-v4-flash", {parse_override("model.compress_ratios=[0, 5]")}); })
            .find("compress_ratios: entry 2 is 5; valid: 0 (the window alone), 4 (compressed sparse) or 128") != std::string::npos);
  CHECK(error_of([] { load_model("deepseek-v4-flash", {parse_override("model.compress_ratios=[0, 4]")}); })
            .find("compress_ratios: 2 ratios for the 43 layers") != std::string::npos);
  CHECK(error_of([] { load_model("deepseek-v4-flash", {parse_override("model.o_groups=3")}); })
            .find("o_groups: 3 does not divide the 64 heads") != std::string::npos);
  CHECK(error_of([] { load_model("deepseek-v4-flash", {parse_override("model.index_topk=0")}); })
            .find("index_topk: 0, but compress_ratios has ratio-4 layers") != std::string::npos);
  CHECK(error_of([] { load_model("deepseek-v4-flash", {parse_override("model.kv_lora_rank=512")}); })
            .find("kv_lora_rank: is not modelled with compress_ratios") != std::string::npos);
  CHECK(error_of([] { load_model("llama-3-8b", {parse_override("model.o_groups=8")}); })
            .find("o_groups: is read only with compress_ratios") != std::string::npos);
  CHECK(error_of([] { load_model("llama-3-8b", {parse_override("model.hc_sinkhorn_iters=5")}); })
            .find("hc_sinkhorn_iters: is read only with hc_mult") != std::string::npos);
  const auto m = load_model("deepseek-v4-flash");
  CHECK(m->tp_error(2).find("DeepSeek-V4's attention (Megatron-Core's dsv4_hybrid) runs at tp 1") != std::string::npos);
  CHECK(m->tp_error(1).empty());
  CHECK(m->cp_error(2).find("Megatron-Core's cp_partition_mode contiguous), which dtsim does not model") != std::string::npos);
  CHECK(m->ep_error(64).empty());
}

TEST_CASE("DeepSeek-V4's config.json in transformers' native form: layer_types with compress_rates", "[llama][dsv4]") {
  test::TempDir dir("dsv4-native");
  std::string text = slurp(hf("deepseek-v4-flash"));
  // compress_ratios replaced by layer_types (the MTP's dropped: 43 entries) and compress_rates.
  const auto at = text.find("\"compress_ratios\"");
  REQUIRE(at != std::string::npos);
  std::string types = "\"layer_types\": [\"sliding_attention\", \"sliding_attention\"";
  for (int i = 0; i < 20; ++i) types += ", \"compressed_sparse_attention\", \"heavily_compressed_attention\"";
  types += ", \"compressed_sparse_attention\"], \"compress_rates\": {\"compressed_sparse_attention\": 4, \"heavily_compressed_attention\": 128}\n}\n";
  text = text.substr(0, at) + types;
  const std::string path = (dir.path / "config.json").string();
  std::ofstream(path) << text;
  CHECK(load_model(path)->parameters() == load_model(hf("deepseek-v4-flash"))->parameters());
  std::string bad = text;
  bad.replace(bad.find("heavily_compressed_attention\""), 28, "global_attention");
  std::ofstream(path) << bad;
  CHECK(error_of([&] { load_model(path); }).find("layer_types: entry 4 is 'global_attention'; valid: sliding_attention") != std::string::npos);
  // Neither form of the ratios; more than one key-value head.
  std::ofstream(path) << text.substr(0, at) + "\"initializer_cutoff\": 0\n}\n";
  CHECK(error_of([&] { load_model(path); }).find("compress_ratios: missing (and no layer_types)") != std::string::npos);
  std::string heads = slurp(hf("deepseek-v4-flash"));
  heads.replace(heads.find("\"num_key_value_heads\": 1"), 24, "\"num_key_value_heads\": 8");
  std::ofstream(path) << heads;
  CHECK(error_of([&] { load_model(path); }).find("num_key_value_heads: 8; DeepSeek-V4 attends in one key-value head") != std::string::npos);
}
