// Gemma 4's 31B and 26B-A4B: the global layers' own heads with their
// values their keys, the value norm and the MoE block's branches, against
// counts derived by hand (Note [Gemma 4] in models/src/llama.cpp).
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

// A local layer (4 heads of 16, 2 KV heads, a window of 8), then a global
// one (4 heads of 32, 1 KV head, its values its keys); Gemma's norms and
// GeGLU 128, h 64, vocab 256.
const char* const kGemma4Yaml =
    "family: llama\nlayers: 2\nhidden: 64\nheads: 4\nkv_heads: 2\nhead_dim: 16\nintermediate: 128\nvocab: 256\nseq_len: 256\n"
    "qk_norm: true\nv_norm: true\nsliding_window: 8\nglobal_every: 2\nglobal_head_dim: 32\nglobal_kv_heads: 1\nk_eq_v: true\n"
    "gemma_norms: true\ngelu: true\nembed_scale: true\ntied_head: true\nfinal_softcap: 30\n";

}  // namespace

TEST_CASE("Gemma 4's global layers: their own heads, their values their keys, by hand (Note [Gemma 4])", "[llama][gemma4]") {
  test::TempDir dir("gemma4");
  const std::string yaml = write_file(dir, "g4.yaml", kGemma4Yaml);
  const auto m = load_model(yaml);
  // Local: q, k, v, o 64 x 64, 64 x 32, 64 x 32, 64 x 64; q/k norms 16
  // each; four norms of 64; GeGLU 3 x 64 x 128. Global: q and o 64 x 128,
  // k 64 x 32 and no v, q/k norms 32 each, the same norms and GeGLU.
  const std::int64_t local = 4096 + 2048 + 2048 + 4096 + 32 + 256 + 24'576, global = 8192 + 2048 + 8192 + 64 + 256 + 24'576;
  CHECK(local == 37'152);
  CHECK(global == 43'328);
  CHECK(m->parameters() == local + global + 256 * 64 + 64);
  const auto layers = m->layers(tokens(128));
  REQUIRE(layers.size() == 4);
  CHECK(layers[1].params == local);
  CHECK(layers[2].params == global);
  CHECK(layers[1].signature.rfind("llama.block:h=64,a=4,kv=2,d=16,f=128,", 0) == 0);
  CHECK(layers[2].signature.rfind("llama.block:h=64,a=4,kv=1,d=32,kev=1,f=128,", 0) == 0);
  CHECK(layers[1].signature.find(",vn=1") != std::string::npos);
  // One GEMM projects q, k and v: (4 + 2 x 2) x 16 columns, or the
  // global's (4 + 1) x 32 with no values of its own.
  CHECK(find_kernel(layers[1].forward, "attn.qkv")->n == 128);
  CHECK(find_kernel(layers[2].forward, "attn.qkv")->n == 160);
  // The value norm, weightless, composite: the fp32 copy and the 2-byte
  // normed output of 128 x 2 x 16 elements and rsqrt a row (4 x 256).
  std::vector<sim::Override> no_vn{sim::parse_override("model.v_norm=false")};
  CHECK(layers[1].saved_bytes - load_model(yaml, no_vn)->layers(tokens(128))[1].saved_bytes == 6 * 4096 + 4 * 256);
  CHECK(m->parameters() == load_model(yaml, no_vn)->parameters());
  // At tp 2 the global layer's one key head is replicated: q and o halved
  // (8192), k whole (2048), the norms whole, the GeGLU halved.
  sim::WorkloadShape tp2 = tokens(128);
  tp2.tp = 2;
  CHECK(m->tp_error(2).empty());
  CHECK(m->layers(tp2)[2].params == 8192 + 2048 + 64 + 256 + 12'288);
  // At tp 4 the local layers' 2 key/value heads are replicated too (q and o
  // 4096 / 4 each, k and v 64 x 16 each, the norms, the GeGLU a quarter);
  // tp 3 divides neither.
  sim::WorkloadShape tp4 = tokens(128);
  tp4.tp = 4;
  CHECK(m->tp_error(4).empty());
  CHECK(m->layers(tp4)[1].params == 2 * 1024 + 2 * 1024 + 32 + 256 + 6144);
  CHECK(m->tp_error(3).find("2 key/value heads (num_key_value_heads) are not divisible by tp=3") != std::string::npos);
  // Keys that need global layers, or contradict them, are refused at theirs.
  std::vector<sim::Override> no_global{sim::parse_override("model.global_every=0"), sim::parse_override("model.sliding_window=0")};
  CHECK(error_of([&] { load_model(yaml, no_global); }).find("model.global_head_dim: is the global layers' and needs global_every") !=
        std::string::npos);
  std::vector<sim::Override> biased{sim::parse_override("model.qkv_bias=true")};
  CHECK(error_of([&] { load_model(yaml, biased); }).find("model.qkv_bias: true is not modelled with Gemma 4's attention") != std::string::npos);
  std::vector<sim::Override> uneven{sim::parse_override("model.global_kv_heads=3")};
  CHECK(error_of([&] { load_model(yaml, uneven); }).find("model.global_kv_heads: 3 does not divide the 4 heads") != std::string::npos);
}

TEST_CASE("Gemma 4's MoE block: a GeGLU beside the experts, each branch normed (Note [Gemma 4])", "[llama][gemma4][moe]") {
  test::TempDir dir("gemma4-moe");
  const std::string yaml = write_file(dir, "moe.yaml",
                                 std::string(kGemma4Yaml) + "experts: 4\ntop_k: 2\nexpert_intermediate: 32\nshared_intermediate: 64\n"
                                                            "router_bias: true\nmoe_branch_norms: true\n");
  std::vector<sim::Override> plain{sim::parse_override("model.moe_branch_norms=false")};
  const auto m = load_model(yaml), without = load_model(yaml, plain);
  // Three norms more (the experts' pre-norm, each branch's post-norm) and
  // the router's scale, 4 x 64 in each of the two layers.
  CHECK(m->parameters() - without->parameters() == 2 * 4 * 64);
  // Each of the four norms keeps Gemma's fp32 input and output (8 x 8192)
  // and rsqrt a row (4 x 128); the experts' normed input is kept apart
  // (2 x 8192).
  const auto a = m->layers(tokens(128)), b = without->layers(tokens(128));
  CHECK(a[1].saved_bytes - b[1].saved_bytes == 4 * (8 * 8192 + 4 * 128) + 2 * 8192);
  CHECK(find_kernel(a[1].forward, "pre_feedforward_layernorm_2") != nullptr);
  std::vector<sim::Override> no_dense{sim::parse_override("model.shared_intermediate=0")};
  CHECK(error_of([&] { load_model(yaml, no_dense); }).find("model.moe_branch_norms: is Gemma 4's mixture beside a dense MLP") != std::string::npos);
}

TEST_CASE("Gemma 4 31B and 26B-A4B: parameters by hand, built in and from their config (Note [Gemma 4])", "[llama][gemma4][hf]") {
  // 31B (h 5376, 32 heads): a local layer q, k, v, o of 256-wide heads (16
  // KV), a global one q and o of 512 (4 KV heads, k alone); q/k norms of
  // the head width, four norms, GeGLU 3 x 5376 x 21504; the tied 262,144 x
  // 5376 vocabulary and the final norm.
  const std::int64_t h = 5376, mlp = 3 * h * 21'504;
  const std::int64_t local = h * 32 * 256 + 2 * h * 16 * 256 + 32 * 256 * h + 2 * 256 + 4 * h + mlp;
  const std::int64_t global = h * 32 * 512 + h * 4 * 512 + 32 * 512 * h + 2 * 512 + 4 * h + mlp;
  CHECK(local == 478'959'104);
  CHECK(global == 534'009'856);
  CHECK(load_model("gemma-4-31b")->parameters() == 50 * local + 10 * global + 262'144LL * h + h);
  CHECK(load_model("gemma-4-31b")->parameters() == 30'697'345'280);
  // 26B-A4B (h 2816, 16 heads, 8 KV, 2 on the global layers): every layer
  // the GeGLU 3 x 2816 x 2112, 128 experts of 3 x 2816 x 704, the router
  // 2816 x 128, its per-expert scales (128) and scale (2816), seven norms.
  const std::int64_t g = 2816, expert = 3 * g * 704;
  const std::int64_t l26 = g * 16 * 256 + 2 * g * 8 * 256 + 16 * 256 * g + 2 * 256, g26 = g * 16 * 512 + g * 2 * 512 + 16 * 512 * g + 2 * 512;
  const std::int64_t moe = 3 * g * 2112 + g * 128 + 128 + g + 7 * g;
  const std::int64_t total = 25 * l26 + 5 * g26 + 30 * (moe + 128 * expert) + 262'144LL * g + g;
  CHECK(total == 25'233'141'760);
  const auto a4b = load_model("gemma-4-26b-a4b");
  CHECK(a4b->parameters() == total);
  CHECK(a4b->active_parameters() == total - 30LL * 120 * expert);
  CHECK(a4b->active_parameters() == 3'822'530'560);
  // Its config.json, the language model in text_config, reads the same.
  std::string types;
  for (int i = 0; i < 30; ++i) types += std::string(i ? ", " : "") + ((i + 1) % 6 == 0 ? "\"full_attention\"" : "\"sliding_attention\"");
  const std::string text = R"("model_type": "gemma4_text", "attention_k_eq_v": true, "enable_moe_block": true, "final_logit_softcapping": 30.0,
    "global_head_dim": 512, "head_dim": 256, "hidden_activation": "gelu_pytorch_tanh", "hidden_size": 2816,
    "hidden_size_per_layer_input": 0, "intermediate_size": 2112, "layer_types": [)" + types + R"(], "max_position_embeddings": 262144,
    "moe_intermediate_size": 704, "num_attention_heads": 16, "num_experts": 128, "num_global_key_value_heads": 2, "num_hidden_layers": 30,
    "num_key_value_heads": 8, "num_kv_shared_layers": 0, "sliding_window": 1024, "tie_word_embeddings": true, "top_k_experts": 8,
    "use_double_wide_mlp": false, "vocab_size": 262144)";
  test::TempDir dir("gemma4-hf");
  const std::string json = write_file(dir, "config.json", R"({"architectures": ["Gemma4ForConditionalGeneration"], "model_type": "gemma4",
    "text_config": {)" + text + "}}");
  const auto read = load_model(json);
  CHECK(read->parameters() == total);
  const auto x = read->layers(tokens(4096)), y = a4b->layers(tokens(4096));
  REQUIRE(x.size() == y.size());
  for (std::size_t i = 0; i < x.size(); ++i) CHECK(x[i].signature == y[i].signature);
  // Per-layer inputs are the dense models' (E2B, E4B): with experts they are refused at their key.
  std::string t = test::slurp(json);
  const std::string from = "\"hidden_size_per_layer_input\": 0";
  REQUIRE(t.find(from) != std::string::npos);
  t.replace(t.find(from), from.size(), "\"hidden_size_per_layer_input\": 256");
  const std::string ple_moe = write_file(dir, "ple-moe.json", t);
  CHECK(error_of([&] { load_model(ple_moe); }).find("ple_dim: is Gemma 4's dense grouped-query decoder; it is not modelled with latent attention, experts") !=
        std::string::npos);
}

TEST_CASE("Gemma 4 E2B and E4B: per-layer inputs and layers sharing keys and values, by hand (Note [Gemma 4])", "[llama][gemma4]") {
  // Four layers, the 2nd and 4th global (heads of 32, 2 KV heads); the last
  // reuses layer 1's keys and values with a GeGLU twice as wide; per-layer
  // inputs of 8.
  test::TempDir dir("gemma4-small");
  const std::string yaml = write_file(dir, "e.yaml",
                                 "family: llama\nlayers: 4\nhidden: 64\nheads: 4\nkv_heads: 2\nhead_dim: 16\nintermediate: 128\nvocab: 256\n"
                                 "seq_len: 256\nqk_norm: true\nv_norm: true\nsliding_window: 8\nglobal_every: 2\nglobal_head_dim: 32\n"
                                 "ple_dim: 8\nkv_shared_layers: 1\ndouble_wide_mlp: true\ngemma_norms: true\ngelu: true\nembed_scale: true\n"
                                 "tied_head: true\n");
  const auto m = load_model(yaml);
  // Local: q, k, v, o 4096 + 2048 + 2048 + 4096, q/k norms 32, four norms
  // 256, GeGLU 24,576, the per-layer gate and projection 2 x 64 x 8 and
  // their norm 64. Global: q, k, v, o of 32-wide heads 8192 + 4096 + 4096
  // + 8192, q/k norms 64.
  // The last (global, sharing): q and o alone, q_norm 32, GeGLU 3 x 64 x 256.
  // Embedding 256 x 64, the per-layer table 256 x 4 x 8, its projection
  // 64 x 32 and norm 8, the final norm.
  const std::int64_t local = 12'288 + 32 + 256 + 24'576 + 1088, global = 24'576 + 64 + 256 + 24'576 + 1088,
                     shared = 16'384 + 32 + 256 + 49'152 + 1088;
  CHECK(local == 38'240);
  CHECK(m->parameters() == 2 * local + global + shared + 16'384 + 8192 + 2048 + 8 + 64);
  CHECK(m->parameters() == 220'648);
  const auto layers = m->layers(tokens(128));
  REQUIRE(layers.size() == 6);
  CHECK(layers[4].params == shared);
  // Under sequence parallelism the norms and the per-layer parts run on a
  // rank's tokens (4 x 64 and 1088), q_norm after the gather.
  sim::WorkloadShape sp = tokens(128);
  sp.tp = 2;
  sp.sequence_parallel = true;
  CHECK(m->layers(sp)[4].sp_params == 256 + 1088);
  CHECK(layers[4].signature.find(",rkv=1,f=256,") != std::string::npos);
  // It projects queries alone: 4 x 32 columns.
  CHECK(find_kernel(layers[4].forward, "attn.qkv")->n == 128);
  // Without its own K it keeps neither K's norm (Gemma's fp32 output, 8 x
  // 128 x 2 x 32) nor V's (6 x 8192 and 4 x 256 rows).
  std::vector<sim::Override> unshared{sim::parse_override("model.kv_shared_layers=0"), sim::parse_override("model.double_wide_mlp=false")};
  const auto own = load_model(yaml, unshared);
  std::vector<sim::Override> narrow{sim::parse_override("model.double_wide_mlp=false")};
  CHECK(own->layers(tokens(128))[4].saved_bytes - load_model(yaml, narrow)->layers(tokens(128))[4].saved_bytes == 8 * 8192 + 6 * 8192 + 4 * 256);
  // A layer's per-layer part keeps the gate's input (2 x 8192), GELU's
  // input and output (2 x 2 x 128 x 8), the projection's input (2 x 1024)
  // and its norm's fp32 input and output (8 x 8192, 4 x 128).
  std::vector<sim::Override> no_ple{sim::parse_override("model.ple_dim=0")};
  const auto plain = load_model(yaml, no_ple)->layers(tokens(128));
  CHECK(layers[1].saved_bytes - plain[1].saved_bytes == 16'384 + 4096 + 2048 + 66'048);
  // The embedding keeps the projection's input (2 x 128 x 64), the per-layer
  // norm's (6 x 4096 and 4 x 512 rows) and the 4096 inputs themselves.
  CHECK(layers[0].saved_bytes - plain[0].saved_bytes == 16'384 + 6 * 4096 + 4 * 512 + 2 * 4096);
  CHECK(find_kernel(layers[0].forward, "ple.model_proj")->n == 32);
  // Neither crosses a pipeline send: pp is refused, as Bridge's dense provider refuses it.
  CHECK(m->pp_error(1).empty());
  CHECK(m->pp_error(2).find("per-layer inputs (ple_dim) reach across the blocks") != std::string::npos);
  // Keys that need another, or leave nothing to share from, are refused at theirs.
  for (const auto& [set, message] : std::vector<std::pair<std::vector<std::string>, std::string>>{
           {{"model.kv_shared_layers=4"}, "model.kv_shared_layers: 4 leaves no earlier layer to share keys and values from; valid: 0 to 3"},
           {{"model.kv_shared_layers=0", "model.double_wide_mlp=true"}, "model.double_wide_mlp: widens the kv_shared_layers' MLPs"},
           {{"model.ple_dim=0", "model.ple_vocab=64"}, "model.ple_vocab: is read only with ple_dim"},
           {{"model.kv_lora_rank=16", "model.global_head_dim=0", "model.global_every=0", "model.sliding_window=0", "model.kv_shared_layers=0",
             "model.double_wide_mlp=false", "model.ple_dim=0"},
            "model.v_norm: is Gemma 4's grouped-query attention; latent attention (kv_lora_rank) has none modelled"}}) {
    std::vector<sim::Override> overrides;
    for (const auto& o : set) overrides.push_back(sim::parse_override(o));
    INFO(message);
    CHECK(error_of([&] { load_model(yaml, overrides); }).find(message) != std::string::npos);
  }
  // A sharing layer needs an earlier one of its kind.
  std::vector<sim::Override> all_global_shared{sim::parse_override("model.kv_shared_layers=3")};
  CHECK(error_of([&] { load_model(yaml, all_global_shared); }).find("model.kv_shared_layers: 3 leaves a global layer with no earlier one of its kind") !=
        std::string::npos);

  // E2B and E4B built in (by the same counts at their sizes: the per-layer
  // table 262,144 x L x 256 is most of it).
  auto count = [](int L, std::int64_t h, std::int64_t kv, std::int64_t f, int every, int sharing, bool wide) {
    const std::int64_t V = 262'144, P = 256;
    std::int64_t total = V * h + V * L * P + h * L * P + P + h;
    for (int i = 0; i < L; ++i) {
      const bool g = (i + 1) % every == 0, s = i >= L - sharing;
      const std::int64_t d = g ? 512 : 256, ff = s && wide ? 2 * f : f;
      total += 2 * h * 8 * d + (s ? d : 2 * h * kv * d + 2 * d) + 4 * h + 3 * h * ff + 2 * h * P + h;
    }
    return total;
  };
  CHECK(load_model("gemma-4-e2b")->parameters() == count(35, 1536, 1, 6144, 5, 20, true));
  CHECK(load_model("gemma-4-e2b")->parameters() == 4'628'569'344);
  CHECK(load_model("gemma-4-e4b")->parameters() == count(42, 2560, 2, 10240, 6, 18, false));
  CHECK(load_model("gemma-4-e4b")->parameters() == 7'463'013'376);
  // Without the per-layer table, 2.3B and 4.6B: the cards' "effective" 2.3B and 4.5B.
  CHECK(load_model("gemma-4-e2b")->parameters() - 262'144LL * 35 * 256 == 2'279'759'104);
  CHECK(load_model("gemma-4-e4b")->parameters() - 262'144LL * 42 * 256 == 4'644'441'088);
  // E2B's config keys read to the built-in.
  std::string types;
  for (int i = 0; i < 35; ++i) types += std::string(i ? ", " : "") + ((i + 1) % 5 == 0 ? "\"full_attention\"" : "\"sliding_attention\"");
  const std::string e2b = write_file(dir, "config.json", R"({"architectures": ["Gemma4ForCausalLM"], "model_type": "gemma4_text",
    "attention_k_eq_v": false, "enable_moe_block": false, "final_logit_softcapping": 30.0, "global_head_dim": 512, "head_dim": 256,
    "hidden_activation": "gelu_pytorch_tanh", "hidden_size": 1536, "hidden_size_per_layer_input": 256, "intermediate_size": 6144,
    "layer_types": [)" + types + R"(], "max_position_embeddings": 131072, "num_attention_heads": 8, "num_global_key_value_heads": null,
    "num_hidden_layers": 35, "num_key_value_heads": 1, "num_kv_shared_layers": 20, "sliding_window": 512, "tie_word_embeddings": true,
    "use_double_wide_mlp": true, "vocab_size": 262144, "vocab_size_per_layer_input": 262144})");
  const auto read = load_model(e2b), built = load_model("gemma-4-e2b");
  CHECK(read->parameters() == built->parameters());
  const auto x = read->layers(tokens(4096)), y = built->layers(tokens(4096));
  REQUIRE(x.size() == y.size());
  for (std::size_t i = 0; i < x.size(); ++i) CHECK(x[i].signature == y[i].signature);
}
