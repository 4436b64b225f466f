// A nanotron training config (the YAML `torchrun ... run_train.py
// --config-file FILE` reads) into dtsim's plan and model keys (Note
// [Framework configs] in framework_config.cpp).
//
// Note [nanotron configs]
// nanotron (HuggingFace's 3D-parallel pre-training library, SmolLM's) reads
// one YAML into its Config dataclasses with dacite, strictly (nanotron/
// config/config.py, parallelism_config.py, models_config.py; read at
// 2411b022 for this note), and trains it as trainer.py and helpers.py do:
// - parallelism: dp, tp, pp (required), context_parallel_size. The ranks
//   are laid out tp innermost, then cp, dp, pp (parallel/context.py):
//   plan.placement tp,cp,dp,pp. expert_parallel_size above 1 fails there
//   (the ranks are shaped ep x pp x dp x cp x tp out of a world of
//   tp x pp x cp x dp), so it is refused. pp_engine afab (its default) is
//   GPipe's all forwards then all backwards, 1f1b 1F1B, which asserts at
//   least pp - 1 micro-batches. tp_mode ALL_REDUCE (its default) is
//   Megatron's tensor parallelism, REDUCE_SCATTER adds sequence
//   parallelism; tp_linear_async_communication overlaps a column-parallel
//   GEMM's all-gather with its own shard's rows (priced without overlap,
//   said) and raises under ALL_REDUCE (tensor_parallel/nn.py);
//   tp_recompute_allgather false keeps the gathered input for the backward
//   (priced as gathered again, said). recompute_layer reruns each decoder
//   layer: plan.recompute full.
// - tokens: micro_batch_size sequences of sequence_length a rank,
//   batch_accumulation_per_replica micro-batches a step (the pipeline's
//   micro-batches too); the global batch is their product with dp.
// - model: dtype (bfloat16 by default) is the parameters' and activations'
//   type, no autocast; make_vocab_size_divisible_by pads the vocabulary to
//   a multiple of it times tp (helpers.py, _vocab_size_with_padding);
//   ddp_bucket_cap_mb is DDP's bucket (plan.bucket_mb). model_config is a
//   LlamaConfig where every key is one of its fields and its float fields
//   are numbers to PyYAML (dacite tries it first, strictly, an int passing
//   for a float), else a Starcoder2Config where its fields hold every key
//   (refused), else a Qwen2Config (ModelArgs builds one from the mapping,
//   which raises on a key it has no field for: refused): dtsim's llama
//   family of that shape, heads hidden // heads wide (a Llama's dividing
//   it, as llama.py asserts), Qwen2's attention_bias a bias on q, k and v (the
//   Llama model has none, and runs FlashAttention-2 whatever
//   _attn_implementation says), a gelu hidden_act GeGLU,
//   sliding_window_size every layer's window, moe_config Qwen2's experts
//   (nn/moe.py: a grouped GEMM of moe_intermediate_size experts, an
//   optional shared expert of shared_expert_intermediate_size with its
//   sigmoid gate, on the layers whose index `layers` holds, exactly [-1]
//   every layer). Its experts are whole on every tensor-parallel rank and
//   tied across them (etp 1, said). nanotron's own checks (config.py:
//   heads divisible by tp, at least tp key/value heads; Qwen2Config's on
//   ring attention, windows and NoPE layers) are refused as it refuses
//   them. A Starcoder2Config or a Mamba model is refused.
// - optimizer: accumulate_grad_in_fp32 (true in every config nanotron
//   ships) is its fp32 gradient accumulator, fp32 masters beside the
//   16-bit parameters (plan.fp32_grad_accumulator, Note [nanotron's fp32
//   accumulator] in sim/src/lowering/emitter.hpp); without it torch.optim
//   steps the 16-bit parameters themselves (plan.master_weights false).
//   zero_stage above 0 is its ZeroDistributedOptimizer, ZeRO-1 whatever the
//   number, over DDP's all-reduce (plan.reduce_scatter false), sharding
//   over dp alone (over one data-parallel rank: nothing, stage 0); with the
//   accumulator over more than one data-parallel rank it fails (the fp32
//   DDP hook raises NotImplementedError for ZeRO's reduce-scatter, and
//   without DDP context parallelism raises in trainer.py), so that is
//   refused; without the accumulator it shards over dp alone (dp_pg), which
//   beside cp is said. optimizer_factory's adamW is AdamW, sgd SGD without
//   momentum. A search from the file keeps what nanotron has no other
//   setting for: its pipeline engine, its ZeRO stage, its recompute, the
//   experts whole on every rank, no expert parallelism, FSDP or offload,
//   and a Llama's cp (FrameworkConfig::search_fixed).
// Sections without a cost (general, checkpoints, logging, tokenizer,
// lighteval, s3_upload, metrics_logging) are read silently; a data stage's
// own sequence_length, a profiler, and any key nanotron's dataclasses do not
// have are listed, not dropped. A key a mapping repeats counts as PyYAML
// counts it, the last, and is said (nanotron's examples/
// config_qwen_with_moe.yaml writes moe_config twice, null then its experts).
#include <algorithm>
#include <cctype>
#include <filesystem>
#include <map>
#include <regex>
#include <set>
#include <string>
#include <vector>

#include "dtsim/sim/config_node.hpp"
#include "dtsim/sim/error.hpp"
#include "dtsim/sim/framework_config.hpp"
#include "framework_common.hpp"

namespace dtsim::sim {
namespace {

using detail::YamlFields;

/// A mapping's value for `key` as PyYAML reads a mapping: the last of a
/// repeated key's; a null node where it has none.
YAML::Node last(const YAML::Node& map, const std::string& key) {
  YAML::Node found;  // null where it has none
  if (map && map.IsMap()) {
    for (auto it = map.begin(); it != map.end(); ++it) {
      if (it->first.IsScalar() && it->first.Scalar() == key) found.reset(it->second);
    }
  }
  return found;
}

/// The keys of a mapping, each once, in order.
std::vector<std::string> keys_of(const YAML::Node& map) {
  std::vector<std::string> out;
  std::set<std::string> seen;
  if (!map || !map.IsMap()) return out;
  for (auto it = map.begin(); it != map.end(); ++it) {
    std::string k = it->first.IsScalar() ? it->first.Scalar() : "?";
    if (seen.insert(k).second) out.push_back(std::move(k));
  }
  return out;
}

template <typename Words>
bool among(const std::string& k, const Words& set) {
  return std::any_of(std::begin(set), std::end(set), [&](const char* s) { return k == s; });
}
bool among(const std::string& k, std::initializer_list<const char*> set) { return among<std::initializer_list<const char*>>(k, set); }

/// LlamaConfig's fields (models_config.py): a model_config of these alone is one.
constexpr const char* kLlamaFields[] = {
    "bos_token_id", "eos_token_id", "hidden_act", "hidden_size", "initializer_range", "intermediate_size", "is_llama_config",
    "max_position_embeddings", "num_attention_heads", "num_hidden_layers", "attention_bias", "num_key_value_heads",
    "pad_token_id", "pretraining_tp", "rms_norm_eps", "rope_scaling", "rope_theta", "rope_interleaved",
    "tie_word_embeddings", "use_cache", "vocab_size", "_attn_implementation", "z_loss_enabled", "z_loss_coefficient"};
/// The config classes' fields of type float (not Optional), which dacite checks.
constexpr const char* kFloatFields[] = {"initializer_range", "rms_norm_eps", "rope_theta", "z_loss_coefficient"};

/// Whether PyYAML reads a scalar as a number dacite takes for a float: a
/// float, an int or a bool (PEP 484's numeric tower; YAML 1.1's resolver:
/// a float has a dot and an exponent only with its sign, so 1e-06 is a
/// string). A quoted scalar is a string; an explicit !!float or !!int a
/// number. Past 64 characters it is taken for a string: the regex would
/// recurse a frame a character on a hostile line of millions.
bool pyyaml_number(const YAML::Node& n) {
  if (!n.IsScalar()) return false;
  const std::string& tag = n.Tag();
  if (tag == "tag:yaml.org,2002:float" || tag == "tag:yaml.org,2002:int" || tag == "tag:yaml.org,2002:bool") return true;
  if (tag != "?" || n.Scalar().size() > 64) return false;
  static const std::regex kNumber(
      R"([-+]?[0-9][0-9_]*\.[0-9_]*([eE][-+][0-9]+)?|\.[0-9][0-9_]*([eE][-+][0-9]+)?|[-+]?[0-9][0-9_]*(:[0-5]?[0-9])+\.[0-9_]*|)"
      R"([-+]?\.(inf|Inf|INF)|\.(nan|NaN|NAN)|)"
      R"([-+]?0b[0-1_]+|[-+]?0[0-7_]+|[-+]?(0|[1-9][0-9_]*)|[-+]?0x[0-9a-fA-F_]+|[-+]?[1-9][0-9_]*(:[0-5]?[0-9])+|)"
      R"(yes|Yes|YES|no|No|NO|true|True|TRUE|false|False|FALSE|on|On|ON|off|Off|OFF)");
  return std::regex_match(n.Scalar(), kNumber);
}

/// Starcoder2Config's fields (models_config.py): dacite tries it after LlamaConfig.
constexpr const char* kStarcoder2Fields[] = {
    "activation_function", "attention_softmax_in_fp32", "attn_pdrop", "bos_token_id", "embd_pdrop", "eos_token_id",
    "global_attn_layers", "grouped_query", "hidden_size", "initializer_range", "intermediate_size", "is_starcoder2_config",
    "layer_norm_epsilon", "max_position_embeddings", "multi_query", "num_attention_heads", "num_hidden_layers", "num_kv_heads",
    "resid_pdrop", "rope_theta", "scale_attention_softmax_in_fp32", "scale_attn_weights", "sliding_window_size",
    "use_position_embeddings", "use_rotary_embeddings", "vocab_size", "_attn_implementation"};

/// Qwen2Config's fields beyond LlamaConfig's.
constexpr const char* kQwen2Fields[] = {
    "is_qwen2_config", "rope_seq_len_interpolation_factor", "flex_attention_mask", "sliding_window_size", "no_rope_layer",
    "_fused_rotary_emb", "_fused_rms_norm", "_use_qkv_packed", "_use_doc_masking", "log_attn_probs",
    "ring_attn_heads_k_stride", "moe_config"};

class Reader {
 public:
  Reader(YAML::Node root, const std::string& file) : root_(std::move(root)), y_(file), out_(fc_) {
    fc_.framework = "nanotron";
    fc_.file = file;
  }

  FrameworkConfig read() {
    if (!root_.IsMap()) {
      throw ConfigError(y_.where(root_) + ": expected a mapping of nanotron's sections (general, parallelism, model, tokens, optimizer, ...)");
    }
    repeated(root_, "");
    parallelism();
    tokens();
    model();
    optimizer();
    rest();
    out_.finish();
    return std::move(fc_);
  }

 private:
  /// Keys a mapping under `at` gives twice, said: the last is read.
  void repeated(const YAML::Node& n, const std::string& at, int depth = 0) {
    if (!n.IsMap() || depth > 8) return;
    std::map<std::string, YAML::Node> lasts;  // one pass: a hostile file's keys each once
    std::set<std::string> said;
    for (auto it = n.begin(); it != n.end(); ++it) {
      const std::string k = it->first.IsScalar() ? it->first.Scalar() : "?";
      const auto [at_k, fresh] = lasts.try_emplace(k);
      if (!fresh && said.insert(k).second) fc_.unmodelled.push_back(at + k + " (given twice: the last read, as PyYAML reads it)");
      at_k->second.reset(it->second);
    }
    for (const auto& [k, v] : lasts) repeated(v, at + k + ".", depth + 1);
  }

  /// A section nanotron needs, a mapping.
  YAML::Node section(const std::string& name) const {
    const YAML::Node s = last(root_, name);
    if (YamlFields::null(s)) {
      throw ConfigError(y_.file() + ": no " + name + " section; nanotron's trainer needs one (" + name + ": a mapping)");
    }
    if (!s.IsMap()) y_.fail(s, name, "expected a mapping");
    return s;
  }
  /// An integer from lo to hi; `fallback` where absent or null.
  std::int64_t integer(const YAML::Node& n, const std::string& key, std::int64_t lo, std::int64_t hi, std::int64_t fallback) const {
    if (YamlFields::null(n)) return fallback;
    const std::string s = y_.word(n, key);
    const std::size_t digits = s.size() - (s.rfind('-', 0) == 0 ? 1 : 0);
    const bool ok = digits > 0 && digits <= 12 &&
                    std::all_of(s.end() - static_cast<std::ptrdiff_t>(digits), s.end(), [](char c) { return c >= '0' && c <= '9'; });
    if (!ok || std::stoll(s) < lo || std::stoll(s) > hi) {
      y_.fail(n, key, "'" + s + "'; valid: an integer from " + std::to_string(lo) + " to " + std::to_string(hi));
    }
    return std::stoll(s);
  }
  /// A field nanotron requires.
  std::int64_t required(const YAML::Node& map, const std::string& section, const std::string& key, std::int64_t lo, std::int64_t hi) const {
    const YAML::Node n = last(map, key);
    if (YamlFields::null(n)) y_.fail(map, section + "." + key, "missing; nanotron requires it (an integer from " + std::to_string(lo) + ")");
    return integer(n, section + "." + key, lo, hi, 0);
  }
  /// `key`'s node, or where it would be (its mapping) when absent: for an error's line.
  static YAML::Node at(const YAML::Node& map, const std::string& key) {
    const YAML::Node n = last(map, key);
    return YamlFields::null(n) ? map : n;
  }
  std::string from(const YAML::Node& map, const std::string& section, const std::string& key) const {
    const YAML::Node n = last(map, key);
    return YamlFields::null(n) ? y_.where(map) + " (" + section + "." + key + ", nanotron's default)" : y_.from(n, section + "." + key);
  }
  /// Keys of `map` that `known` does not name, listed as not nanotron's.
  void unknown(const YAML::Node& map, const std::string& section, const std::string& cls, std::initializer_list<const char*> known) {
    for (const auto& k : keys_of(map)) {
      if (!among(k, known)) fc_.unmodelled.push_back(section + "." + k + " (a key nanotron's " + cls + " does not have)");
    }
  }

  void parallelism() {
    const YAML::Node par = section("parallelism");
    constexpr std::int64_t kDegree = 1 << 16;
    dp_ = required(par, "parallelism", "dp", 1, 1 << 24);
    tp_ = required(par, "parallelism", "tp", 1, kDegree);
    pp_ = required(par, "parallelism", "pp", 1, kDegree);
    cp_ = integer(last(par, "context_parallel_size"), "parallelism.context_parallel_size", 1, kDegree, 1);
    const YAML::Node epn = last(par, "expert_parallel_size");
    if (const std::int64_t ep = integer(epn, "parallelism.expert_parallel_size", 1, kDegree, 1); ep > 1) {
      y_.fail(epn, "parallelism.expert_parallel_size",
              std::to_string(ep) + ": nanotron's ParallelContext (parallel/context.py) shapes the ranks ep x pp x dp x cp x tp out of a "
              "world of tp x pp x cp x dp, which fails for any ep above 1; valid: 1");
    }
    out_.plan("dp", std::to_string(dp_), from(par, "parallelism", "dp"));
    out_.plan("tp", std::to_string(tp_), from(par, "parallelism", "tp"));
    out_.plan("pp", std::to_string(pp_), from(par, "parallelism", "pp"));
    out_.plan("cp", std::to_string(cp_), from(par, "parallelism", "context_parallel_size"));
    out_.plan("placement", "tp,cp,dp,pp", y_.where(par) + " (nanotron's rank layout, parallel/context.py)");
    // pp_engine: cast_str_to_pipeline_engine takes "afab" and "1f1b" as written.
    const YAML::Node eng = last(par, "pp_engine");
    const std::string engine = YamlFields::null(eng) ? "afab" : y_.word(eng, "parallelism.pp_engine");
    if (engine != "afab" && engine != "1f1b") y_.fail(eng, "parallelism.pp_engine", "'" + engine + "'; valid: afab, 1f1b");
    one_f_one_b_ = engine == "1f1b";
    // Written with or without a pipeline, so that a search keeps to nanotron's two engines.
    out_.plan("schedule", one_f_one_b_ ? "1f1b" : "gpipe", from(par, "parallelism", "pp_engine"));
    // tp_mode: TensorParallelLinearMode[x.upper()].
    const YAML::Node mode = last(par, "tp_mode");
    std::string m = YamlFields::null(mode) ? "ALL_REDUCE" : y_.word(mode, "parallelism.tp_mode");
    for (char& c : m) c = static_cast<char>(std::toupper(static_cast<unsigned char>(c)));
    if (m != "ALL_REDUCE" && m != "REDUCE_SCATTER") y_.fail(mode, "parallelism.tp_mode", "'" + mode.Scalar() + "'; valid: ALL_REDUCE, REDUCE_SCATTER");
    const bool scatter = m == "REDUCE_SCATTER";
    sequence_parallel_ = scatter && tp_ > 1;
    out_.plan("sequence_parallel", scatter && tp_ > 1 ? "true" : "false", from(par, "parallelism", "tp_mode"));
    const YAML::Node async = last(par, "tp_linear_async_communication");
    if (y_.flag(async, "parallelism.tp_linear_async_communication", false)) {
      if (!scatter) {
        y_.fail(async, "parallelism.tp_linear_async_communication",
                "true with tp_mode ALL_REDUCE, which nanotron's TensorParallelRowLinear refuses (\"async_communication is not supported "
                "for ALL_REDUCE mode\", tensor_parallel/nn.py); valid: false, or tp_mode REDUCE_SCATTER");
      }
      if (tp_ > 1) {
        fc_.unmodelled.push_back("parallelism.tp_linear_async_communication=true (each column-parallel GEMM's all-gather beside its own "
                                 "shard's rows: priced without overlap)");
      }
    }
    if (const YAML::Node r = last(par, "tp_recompute_allgather");
        !y_.flag(r, "parallelism.tp_recompute_allgather", true) && scatter && tp_ > 1) {
      fc_.unmodelled.push_back("parallelism.tp_recompute_allgather=false (the gathered input kept for the backward: priced as gathered again)");
    }
    const YAML::Node rl = last(par, "recompute_layer");
    out_.plan("recompute", y_.flag(rl, "parallelism.recompute_layer", false) ? "full" : "none", from(par, "parallelism", "recompute_layer"));
    unknown(par, "parallelism", "ParallelismArgs",
            {"dp", "pp", "tp", "pp_engine", "tp_mode", "tp_linear_async_communication", "recompute_layer", "tp_recompute_allgather",
             "expert_parallel_size", "context_parallel_size"});
  }

  void tokens() {
    const YAML::Node tok = section("tokens");
    seq_ = required(tok, "tokens", "sequence_length", 1, std::int64_t{1} << 30);
    const std::int64_t mbs = required(tok, "tokens", "micro_batch_size", 1, std::int64_t{1} << 30);
    const std::int64_t acc = required(tok, "tokens", "batch_accumulation_per_replica", 1, std::int64_t{1} << 30);
    // Config.global_batch_size, bounded before it is multiplied out.
    constexpr std::int64_t kMaxBatch = std::int64_t{1} << 40;
    if (mbs > kMaxBatch / acc / dp_) {
      y_.fail(at(tok, "batch_accumulation_per_replica"), "tokens.batch_accumulation_per_replica",
              std::to_string(acc) + " x micro_batch_size " + std::to_string(mbs) + " x dp " + std::to_string(dp_) +
                  " sequences a step is absurd; valid: a global batch up to 2^40");
    }
    if (pp_ > 1 && one_f_one_b_ && acc < pp_ - 1) {
      y_.fail(at(tok, "batch_accumulation_per_replica"), "tokens.batch_accumulation_per_replica",
              std::to_string(acc) + " micro-batches under pp_engine 1f1b over pp " + std::to_string(pp_) +
                  ": nanotron asserts at least pp - 1 (\"Number of microbatches ... must be at least PP_SIZE-1\"); valid: " +
                  std::to_string(pp_ - 1) + " or more");
    }
    from_tokens_ = from(tok, "tokens", "sequence_length");
    out_.plan("seq_len", std::to_string(seq_), from_tokens_);
    out_.plan("micro_batch", std::to_string(mbs), from(tok, "tokens", "micro_batch_size"));
    out_.plan("grad_accum", std::to_string(acc), from(tok, "tokens", "batch_accumulation_per_replica"));
    fc_.global_batch = mbs * acc * dp_;
    unknown(tok, "tokens", "TokensArgs",
            {"sequence_length", "train_steps", "micro_batch_size", "batch_accumulation_per_replica", "val_check_interval",
             "limit_val_batches", "limit_test_batches"});
  }

  void model() {
    const YAML::Node mo = section("model");
    const YAML::Node dt = last(mo, "dtype");
    dtype_ = YamlFields::null(dt) ? "bfloat16" : y_.word(dt, "model.dtype");
    if (dtype_ != "bfloat16" && dtype_ != "float16" && dtype_ != "float32") {
      y_.fail(dt, "model.dtype", "'" + dtype_ + "'; valid: bfloat16, float16, float32");
    }
    out_.plan("precision", dtype_ == "bfloat16" ? "bf16" : dtype_ == "float16" ? "fp16" : "fp32", from(mo, "model", "dtype"));
    const std::int64_t multiple = integer(last(mo, "make_vocab_size_divisible_by"), "model.make_vocab_size_divisible_by", 1, 1 << 20, 1);
    const std::int64_t bucket = integer(last(mo, "ddp_bucket_cap_mb"), "model.ddp_bucket_cap_mb", 1, 1 << 20, 25);
    out_.plan("bucket_mb", std::to_string(bucket), from(mo, "model", "ddp_bucket_cap_mb"));
    const YAML::Node mc = last(mo, "model_config");
    if (YamlFields::null(mc)) y_.fail(mo, "model.model_config", "missing; nanotron builds the model from it (a LlamaConfig's or Qwen2Config's fields)");
    if (!mc.IsMap()) y_.fail(mc, "model.model_config", "expected a mapping of a LlamaConfig's or Qwen2Config's fields");
    model_config(mc, multiple);
    unknown(mo, "model", "ModelArgs", {"model_config", "init_method", "dtype", "make_vocab_size_divisible_by", "ddp_bucket_cap_mb"});
  }

  void model_config(const YAML::Node& mc, std::int64_t multiple) {
    const std::vector<std::string> keys = keys_of(mc);
    const auto has = [&](const char* k) { return std::find(keys.begin(), keys.end(), k) != keys.end(); };
    if (has("d_state") || has("ssm_cfg") || has("is_mamba_config")) {
      y_.fail(mc, "model.model_config", "a Mamba model (nanotron's examples/mamba), which dtsim does not price from nanotron's config; "
                                        "valid: a LlamaConfig or a Qwen2Config");
    }
    const auto all_of_class = [&](const auto& fields) {
      return std::all_of(keys.begin(), keys.end(), [&](const std::string& k) { return among(k, fields); });
    };
    // dacite's typed match: each float field present a number, none null.
    const bool typed = std::all_of(std::begin(kFloatFields), std::end(kFloatFields), [&](const char* k) {
      return !has(k) || pyyaml_number(last(mc, k));
    });
    const std::string p = "model.model_config.";
    // dacite tries LlamaConfig, then Starcoder2Config, then Qwen2Config
    // (strictly: a class's fields alone, each of its type; a float field
    // that PyYAML reads as a string, 1e-06, or null fails it). Failing
    // every class, the mapping becomes Qwen2Config(**dict)
    // (ModelArgs.__post_init__), which raises on a key it has no field for.
    const bool llama = all_of_class(kLlamaFields) && typed;
    if (!llama && (has("is_starcoder2_config") || has("grouped_query") || has("multi_query") || all_of_class(kStarcoder2Fields))) {
      y_.fail(mc, "model.model_config", "a Starcoder2Config (dacite matches one before a Qwen2Config), which dtsim has no model for; "
                                        "valid: a LlamaConfig or a Qwen2Config");
    }
    for (const auto& k : keys) {
      if (!among(k, kLlamaFields) && !among(k, kQwen2Fields)) {
        y_.fail(at(mc, k), p + k, "not a field of LlamaConfig or Qwen2Config (nanotron's Qwen2Config(**model_config) raises a TypeError)");
      }
    }
    if (!llama && has("is_llama_config")) {
      y_.fail(at(mc, "is_llama_config"), p + "is_llama_config",
              "beside what a LlamaConfig cannot take (a Qwen2Config field, or a float field PyYAML reads as a string or null): "
              "nanotron's Qwen2Config(**model_config) raises a TypeError on is_llama_config");
    }
    if (!typed && !YamlFields::null(last(mc, "moe_config"))) {
      y_.fail(at(mc, "moe_config"), p + "moe_config",
              "beside a float field PyYAML reads as a string or null (write 1.0e-06, not 1e-06): dacite then leaves moe_config a "
              "dict, and Qwen2Config raises an AttributeError on its .layers");
    }
    constexpr std::int64_t kBig = std::int64_t{1} << 40;
    const std::int64_t hidden = integer(last(mc, "hidden_size"), p + "hidden_size", 1, kBig, 4096);
    const std::int64_t inter = integer(last(mc, "intermediate_size"), p + "intermediate_size", 1, kBig, 11008);
    const std::int64_t layers = integer(last(mc, "num_hidden_layers"), p + "num_hidden_layers", 1, 10000, 32);
    const std::int64_t heads = integer(last(mc, "num_attention_heads"), p + "num_attention_heads", 1, 1 << 20, 32);
    const std::int64_t kv = integer(last(mc, "num_key_value_heads"), p + "num_key_value_heads", 1, 1 << 20, heads);
    // config.py's model verifications, as nanotron makes them.
    if (heads % tp_ != 0) {
      y_.fail(at(mc, "num_attention_heads"), p + "num_attention_heads",
              std::to_string(heads) + " is not divisible by tp " + std::to_string(tp_) + " (nanotron asserts it)");
    }
    if (kv > heads || heads % kv != 0) {
      y_.fail(at(mc, "num_key_value_heads"), p + "num_key_value_heads",
              std::to_string(kv) + " does not divide num_attention_heads " + std::to_string(heads) + " (nanotron asserts it)");
    }
    if (kv < tp_) {
      y_.fail(at(mc, "num_key_value_heads"), p + "num_key_value_heads",
              std::to_string(kv) + " is below tp " + std::to_string(tp_) + " (nanotron asserts num_key_value_heads >= tp)");
    }
    if (llama && hidden % heads != 0) {
      y_.fail(at(mc, "hidden_size"), p + "hidden_size",
              std::to_string(hidden) + " is not divisible by num_attention_heads " + std::to_string(heads) + " (nanotron's Llama model asserts it)");
    }
    if (hidden < heads) {
      y_.fail(at(mc, "hidden_size"), p + "hidden_size",
              std::to_string(hidden) + " is below num_attention_heads " + std::to_string(heads) + ": heads hidden_size // num_attention_heads = 0 wide");
    }
    // vocab_size -1 takes the dataset's (Config.__post_init__, a Nanoset's vocab_size).
    const YAML::Node vn = last(mc, "vocab_size");
    std::int64_t vocab = integer(vn, p + "vocab_size", -1, kBig, 32000);
    std::string vocab_from = from(mc, "model.model_config", "vocab_size");
    if (vocab == 0) y_.fail(vn, p + "vocab_size", "0; valid: the vocabulary's size, or -1 (the dataset's)");
    if (vocab == -1) {
      const YAML::Node stages = last(root_, "data_stages");
      YAML::Node dv;
      if (stages && stages.IsSequence()) {
        for (const auto& st : stages) {
          const YAML::Node v = last(last(last(st, "data"), "dataset"), "vocab_size");
          if (!YamlFields::null(v)) {
            dv.reset(v);
            break;
          }
        }
      }
      if (YamlFields::null(dv)) {
        y_.fail(vn, p + "vocab_size", "-1 takes the dataset's vocab_size, which no data stage gives; valid: the vocabulary's size");
      }
      vocab = integer(dv, "data_stages.data.dataset.vocab_size", 1, kBig, 1);
      vocab_from = y_.from(dv, "data_stages.data.dataset.vocab_size");
    }
    const std::int64_t step = multiple * tp_;
    const std::int64_t padded = (vocab + step - 1) / step * step;  // helpers.py, _vocab_size_with_padding
    const std::int64_t positions = integer(last(mc, "max_position_embeddings"), p + "max_position_embeddings", 1, kBig, 2048);
    const bool tied = y_.flag(last(mc, "tie_word_embeddings"), p + "tie_word_embeddings", false);
    const std::string from_mc = y_.where(mc) + " (model.model_config)";
    const std::string stem = std::filesystem::path(y_.file()).stem().string();
    out_.model("name", "nanotron-" + (stem.empty() ? std::string("model") : stem), from_mc);
    out_.model("family", "llama", from_mc);
    out_.model("layers", std::to_string(layers), from(mc, "model.model_config", "num_hidden_layers"));
    out_.model("hidden", std::to_string(hidden), from(mc, "model.model_config", "hidden_size"));
    out_.model("heads", std::to_string(heads), from(mc, "model.model_config", "num_attention_heads"));
    out_.model("kv_heads", std::to_string(kv), from(mc, "model.model_config", "num_key_value_heads"));
    // Both models' heads are hidden_size // num_attention_heads wide.
    out_.model("head_dim", std::to_string(hidden / heads), from(mc, "model.model_config", "num_attention_heads"));
    out_.model("intermediate", std::to_string(inter), from(mc, "model.model_config", "intermediate_size"));
    out_.model("vocab", std::to_string(padded), padded == vocab ? vocab_from : vocab_from + " padded to a multiple of " + std::to_string(step));
    // RotaryEmbedding doubles its table as longer sequences come (its `end`),
    // so a sequence past max_position_embeddings runs: the longer is the model's.
    out_.model("seq_len", std::to_string(std::max(positions, seq_)),
               positions >= seq_ ? from(mc, "model.model_config", "max_position_embeddings") : from_tokens_);
    out_.model("tied_head", tied ? "true" : "false", from(mc, "model.model_config", "tie_word_embeddings"));
    // Qwen2's attention_bias is the q, k and v projections' (qwen.py); the Llama model has none.
    const bool bias = !llama && y_.flag(last(mc, "attention_bias"), p + "attention_bias", false);
    out_.model("qkv_bias", bias ? "true" : "false", from(mc, "model.model_config", "attention_bias"));
    out_.model("o_bias", "false", from_mc);
    out_.model("mlp_bias", "false", from_mc);
    const YAML::Node act = last(mc, "hidden_act");
    const std::string a = YamlFields::null(act) ? "silu" : y_.word(act, p + "hidden_act");
    if (a.rfind("gelu", 0) == 0) {
      out_.model("gelu", "true", y_.from(act, p + "hidden_act"));
    } else if (a != "silu" && a != "swish") {
      fc_.unmodelled.push_back(p + "hidden_act=" + a + " (priced as silu)");
    }
    llama_ = llama;
    attention(mc, llama, has("_attn_implementation"));
    if (!llama) qwen2(mc);
    if (y_.flag(last(mc, "z_loss_enabled"), p + "z_loss_enabled", false)) {
      fc_.unmodelled.push_back(p + "z_loss_enabled=true (the logits' log-sum-exp squared: not priced)");
    }
  }

  /// _attn_implementation (ALL_ATTENTION_FUNCTIONS, nn/attention.py) and
  /// what context parallelism moves with it; `given`: the key is written (null too).
  void attention(const YAML::Node& mc, bool llama, bool given) {
    const std::string key = "model.model_config._attn_implementation";
    const YAML::Node n = last(mc, "_attn_implementation");
    const std::string impl = YamlFields::null(n) ? "flash_attention_2" : y_.word(n, key);
    if (!among(impl, {"flash_attention_2", "flex_attention", "sdpa", "ring_flash_triton", "ring", "llama3_ring_attention"})) {
      y_.fail(n, key, "'" + impl + "'; valid: flash_attention_2, flex_attention, sdpa, ring_flash_triton, ring, llama3_ring_attention");
    }
    const std::string impl_at = YamlFields::null(n) ? y_.where(mc) + " (" + key + ", nanotron's flash_attention_2 default)" : y_.from(n, key);
    // nanotron's Llama model calls flash_attn_varlen_func whatever the key says (models/llama.py).
    if (llama) {
      out_.plan("attention", "flash", y_.where(mc) + " (a LlamaConfig: nanotron's Llama model runs FlashAttention-2)");
    } else {
      if (impl != "sdpa" && impl != "flex_attention") out_.plan("attention", "flash", impl_at);
      if (impl == "flex_attention") fc_.unmodelled.push_back(key + "=flex_attention (priced as PyTorch's choice of SDPA kernel)");
      // Qwen2Config.__post_init__'s asserts; a null kernel is looked up by None.
      if (given && n.IsNull()) y_.fail(n, key, "null; valid: flash_attention_2, flex_attention, sdpa, ring_flash_triton, ring, llama3_ring_attention");
      if ((impl == "llama3_ring_attention") == YamlFields::null(last(mc, "ring_attn_heads_k_stride"))) {
        y_.fail(impl == "llama3_ring_attention" ? n : at(mc, "ring_attn_heads_k_stride"), key,
                impl == "llama3_ring_attention" ? "llama3_ring_attention without ring_attn_heads_k_stride, which nanotron asserts it has"
                                                : impl + " beside ring_attn_heads_k_stride, which nanotron asserts only llama3_ring_attention takes");
      }
      if (const YAML::Node f = last(mc, "flex_attention_mask"); !YamlFields::null(f)) {
        const std::string mask = y_.word(f, "model.model_config.flex_attention_mask");
        if (impl != "flex_attention" || !among(mask, {"sliding_window", "document", "sliding_window_document"})) {
          y_.fail(f, "model.model_config.flex_attention_mask",
                  "'" + mask + "' under " + impl + ": nanotron asserts a mask of sliding_window, document or sliding_window_document, "
                  "under flex_attention");
        }
      }
      if (!YamlFields::null(last(mc, "sliding_window_size")) && !among(impl, {"flex_attention", "flash_attention_2", "llama3_ring_attention"})) {
        y_.fail(at(mc, "sliding_window_size"), "model.model_config.sliding_window_size",
                "with " + key + " " + impl + ": nanotron asserts a window runs under flex_attention, flash_attention_2 or "
                "llama3_ring_attention");
      }
    }
    if (cp_ == 1) return;
    // Context parallelism: the Llama 3 paper's all-gather of K and V
    // (llama3_ring_attention), or a ring of sends (ring, ring_flash_triton);
    // the other kernels take no ring_pg.
    if (!llama && (impl == "ring" || impl == "ring_flash_triton")) {
      out_.plan("cp_comm", "p2p", impl_at);
    } else {
      out_.plan("cp_comm", "all_gather", impl_at);
      if (impl != "llama3_ring_attention" || llama) {
        fc_.unmodelled.push_back("parallelism.context_parallel_size=" + std::to_string(cp_) + " with " +
                                 (llama ? std::string("a LlamaConfig (nanotron's Llama model has no context parallelism)")
                                        : key + "=" + impl + " (no ring_pg)") +
                                 ": priced as llama3_ring_attention's all-gather");
      }
    }
  }

  /// Qwen2Config's own fields: a window, NoPE layers, document masking and its experts.
  void qwen2(const YAML::Node& mc) {
    const std::string p = "model.model_config.";
    const std::int64_t layers = integer(last(mc, "num_hidden_layers"), p + "num_hidden_layers", 1, 10000, 32);
    if (const YAML::Node w = last(mc, "sliding_window_size"); !YamlFields::null(w)) {
      out_.model("sliding_window", std::to_string(integer(w, p + "sliding_window_size", 1, std::int64_t{1} << 40, 1)),
                 y_.from(w, p + "sliding_window_size"));
    }
    if (const YAML::Node n = last(mc, "no_rope_layer"); !YamlFields::null(n)) {
      const std::int64_t every = integer(n, p + "no_rope_layer", 1, 10000, 1);
      if (layers % every != 0) {
        y_.fail(n, p + "no_rope_layer", std::to_string(every) + " does not divide num_hidden_layers " + std::to_string(layers) + " (nanotron asserts it)");
      }
      fc_.unmodelled.push_back(p + "no_rope_layer=" + std::to_string(every) + " (every such layer without RoPE: priced with it)");
    }
    if (y_.flag(last(mc, "_use_doc_masking"), p + "_use_doc_masking", false)) {
      fc_.unmodelled.push_back(p + "_use_doc_masking=true (attention within each document: priced over the whole sequence; "
                                   "--set plan.document_len=N prices documents of N tokens)");
    }
    if (const YAML::Node f = last(mc, "flex_attention_mask"); !YamlFields::null(f)) {
      fc_.unmodelled.push_back(p + "flex_attention_mask=" + y_.word(f, p + "flex_attention_mask") + " (its sparsity not priced)");
    }
    const YAML::Node moe = last(mc, "moe_config");
    if (YamlFields::null(moe)) return;
    const std::string q = p + "moe_config.";
    if (!moe.IsMap()) y_.fail(moe, p + "moe_config", "expected a mapping (num_experts, top_k, moe_intermediate_size, ...) or null");
    // MoEConfig's defaults and checks (models_config.py).
    const std::int64_t experts = integer(last(moe, "num_experts"), q + "num_experts", 1, 1 << 20, 8);
    const std::int64_t top_k = integer(last(moe, "top_k"), q + "top_k", 1, 1 << 20, 2);
    if (top_k > experts) {
      y_.fail(at(moe, "top_k"), q + "top_k", std::to_string(top_k) + " is more than num_experts " + std::to_string(experts) + " (nanotron raises)");
    }
    const YAML::Node dn = last(moe, "token_dispatcher_type");
    const std::string dispatcher = YamlFields::null(dn) ? "alltoall" : y_.word(dn, q + "token_dispatcher_type");
    if (dispatcher != "alltoall" && dispatcher != "allgather") {
      y_.fail(dn, q + "token_dispatcher_type", "'" + dispatcher + "'; valid: alltoall, allgather");
    }
    const std::int64_t inter = integer(last(moe, "moe_intermediate_size"), q + "moe_intermediate_size", 1, std::int64_t{1} << 40, 1408);
    // layers: exactly [-1] is every layer (MoEConfig.__post_init__); any
    // other list names the layers whose index it holds, so negative indices
    // and those past the model name none.
    const YAML::Node ln = last(moe, "layers");
    std::vector<std::int64_t> listed_layers;
    if (ln.IsSequence()) {
      for (const auto& e : ln) listed_layers.push_back(integer(e, q + "layers", -(1 << 20), 1 << 20, 0));
    } else if (!YamlFields::null(ln)) {
      y_.fail(ln, q + "layers", "expected a list of layer indices ([-1]: every layer)");
    }
    std::set<std::int64_t> moe_layers;
    if (YamlFields::null(ln) || listed_layers == std::vector<std::int64_t>{-1}) {
      for (std::int64_t i = 0; i < layers; ++i) moe_layers.insert(i);
    } else {
      for (const std::int64_t i : listed_layers) {
        if (i >= 0 && i < layers) moe_layers.insert(i);
      }
    }
    if (moe_layers.empty()) {
      if (!YamlFields::null(ln) && ln.size() > 0) fc_.unmodelled.push_back(q + "layers (names no layer of the model: priced dense)");
      return;
    }
    const std::string moe_at = y_.from(moe, p + "moe_config");
    out_.model("experts", std::to_string(experts), from(moe, "model.model_config.moe_config", "num_experts"));
    out_.model("top_k", std::to_string(top_k), from(moe, "model.model_config.moe_config", "top_k"));
    out_.model("expert_intermediate", std::to_string(inter), from(moe, "model.model_config.moe_config", "moe_intermediate_size"));
    if (y_.flag(last(moe, "enable_shared_expert"), q + "enable_shared_expert", false)) {
      const std::int64_t shared =
          integer(last(moe, "shared_expert_intermediate_size"), q + "shared_expert_intermediate_size", 1, std::int64_t{1} << 40, 5632);
      out_.model("shared_intermediate", std::to_string(shared), from(moe, "model.model_config.moe_config", "shared_expert_intermediate_size"));
      out_.model("shared_expert_gate", "true", y_.from(last(moe, "enable_shared_expert"), q + "enable_shared_expert"));
    }
    // A tail of the layers is first_dense dense ones before it.
    const std::int64_t first = *moe_layers.begin();
    if (static_cast<std::int64_t>(moe_layers.size()) != layers - first) {
      fc_.unmodelled.push_back(q + "layers (not every layer from the first MoE one: priced as MoE from layer " + std::to_string(first) + " on)");
    }
    out_.model("first_dense", std::to_string(first), YamlFields::null(ln) ? moe_at : y_.from(ln, q + "layers"));
    out_.plan("etp", "1", moe_at);  // whole on every tensor-parallel rank
    if (tp_ > 1) {
      // Unsharded, the experts and router are tied across the tensor-parallel
      // ranks (trainer.py): under REDUCE_SCATTER each rank routes its own
      // tokens and their gradients are summed after the step's data-parallel
      // reduction; under ALL_REDUCE every rank runs every token through them.
      fc_.unmodelled.push_back(q.substr(0, q.size() - 1) + " with tp " + std::to_string(tp_) +
                               " (nanotron's GroupedMLP is whole on every tensor-parallel rank, tied across them" +
                               (sequence_parallel_ ? ", its gradients summed after the data-parallel reduction"
                                                   : ", every token through it on every rank") +
                               ": priced as etp 1)");
    }
  }

  void optimizer() {
    const YAML::Node op = section("optimizer");
    const YAML::Node zn = last(op, "zero_stage");
    if (YamlFields::null(zn)) y_.fail(op, "optimizer.zero_stage", "missing; nanotron requires it (0, or 1 for its ZeRO-1)");
    const std::int64_t zero = integer(zn, "optimizer.zero_stage", 0, 1 << 20, 0);
    const YAML::Node an = last(op, "accumulate_grad_in_fp32");
    if (YamlFields::null(an)) y_.fail(op, "optimizer.accumulate_grad_in_fp32", "missing; nanotron requires it (true or false)");
    const bool fp32_accum = y_.flag(an, "optimizer.accumulate_grad_in_fp32", false);
    const std::string accum_from = y_.from(an, "optimizer.accumulate_grad_in_fp32");
    if (fp32_accum && dtype_ == "float32") {
      y_.fail(an, "optimizer.accumulate_grad_in_fp32",
              "true with model.dtype float32: nanotron's accumulator asserts no parameter is float (optim/gradient_accumulator.py); valid: false");
    }
    if (zero > 0 && fp32_accum && (dp_ > 1 || cp_ > 1)) {
      y_.fail(zn, "optimizer.zero_stage",
              std::to_string(zero) + " with accumulate_grad_in_fp32 over " +
                  (dp_ > 1 ? "dp " + std::to_string(dp_) +
                                 ": nanotron's fp32 DDP hook raises NotImplementedError for ZeRO's reduce-scatter (optim/gradient_accumulator.py, get_fp32_accum_hook)"
                           : "context_parallel_size " + std::to_string(cp_) +
                                 ": without DDP nanotron's trainer raises \"Context parallel size > 1 is not supported yet without DDP\"") +
                  "; valid: 0, or accumulate_grad_in_fp32: false");
    }
    // Note [nanotron's fp32 accumulator]; without it torch.optim steps the 16-bit parameters.
    if (dtype_ != "float32") {
      out_.plan("fp32_grad_accumulator", fp32_accum ? "true" : "false", accum_from);
      out_.plan("master_weights", fp32_accum ? "true" : "false", accum_from);
    }
    // ZeroDistributedOptimizer shards over dp_pg (helpers.py), without cp:
    // over one data-parallel rank it shards nothing, which is stage 0.
    out_.plan("zero_stage", zero > 0 && dp_ > 1 ? "1" : "0",
              y_.from(zn, "optimizer.zero_stage") + (zero > 0 && dp_ == 1 ? " (nanotron's ZeRO-1 over dp 1 shards nothing)" : ""));
    if (zero > 0 && dp_ > 1) {
      // ZeroDistributedOptimizer over DDP's all-reduce (optim/zero.py).
      out_.plan("reduce_scatter", "false", y_.from(zn, "optimizer.zero_stage") + " (nanotron's ZeRO-1 all-reduces over DDP)");
      if (zero > 1) fc_.unmodelled.push_back("optimizer.zero_stage=" + std::to_string(zero) + " (nanotron's ZeRO is stage 1 for any stage above 0)");
      // helpers.py: ZeroDistributedOptimizer(dp_pg=...), the data-parallel group without cp.
      if (cp_ > 1) {
        fc_.unmodelled.push_back("optimizer.zero_stage with context_parallel_size " + std::to_string(cp_) +
                                 " (nanotron shards over dp alone: priced over dp x cp)");
      }
    }
    const YAML::Node f = last(op, "optimizer_factory");
    if (!YamlFields::null(f) && !f.IsMap()) y_.fail(f, "optimizer.optimizer_factory", "expected a mapping (name: adamW or sgd, ...)");
    const YAML::Node nn = last(f, "name");
    const std::string name = YamlFields::null(nn) ? "adamW" : y_.word(nn, "optimizer.optimizer_factory.name");
    const std::string nfrom = YamlFields::null(nn) ? y_.where(YamlFields::null(f) ? op : f) + " (optimizer_factory.name, nanotron's adamW default)"
                                                   : y_.from(nn, "optimizer.optimizer_factory.name");
    if (name == "adamW") {
      out_.plan("optimizer", "adamw", nfrom);
    } else if (name == "sgd") {
      out_.plan("optimizer", "sgd", nfrom);
      out_.plan("sgd_momentum", "0", nfrom + " (torch.optim.SGD without momentum)");
    } else {
      y_.fail(nn, "optimizer.optimizer_factory.name", "'" + name + "'; valid: adamW, sgd (nanotron raises \"Optimizer ... is not supported\")");
    }
    // Older nanotron kept Adam's knobs in OptimizerArgs itself (before optimizer_factory).
    unknown(op, "optimizer", "OptimizerArgs",
            {"optimizer_factory", "zero_stage", "weight_decay", "clip_grad", "accumulate_grad_in_fp32", "learning_rate_scheduler",
             "weight_decay_exclude_named_params", "adam_beta1", "adam_beta2", "adam_eps", "torch_adam_is_fused"});
  }

  /// The other sections: a stage's own sequence length, a profiler, and
  /// what nanotron's Config does not have.
  void rest() {
    const YAML::Node stages = last(root_, "data_stages");
    if (stages && stages.IsSequence()) {
      for (const auto& st : stages) {
        const YAML::Node s = last(st, "sequence_length");
        if (YamlFields::null(s)) continue;
        const std::int64_t len = integer(s, "data_stages.sequence_length", 1, std::int64_t{1} << 30, seq_);
        if (len != seq_) {
          const YAML::Node name = last(st, "name");
          fc_.unmodelled.push_back("data_stages" + (YamlFields::null(name) || !name.IsScalar() ? std::string() : "[" + name.Scalar() + "]") +
                                   ".sequence_length=" + std::to_string(len) + " (priced at tokens.sequence_length " + std::to_string(seq_) + ")");
        }
      }
    }
    if (!YamlFields::null(last(root_, "profiler"))) fc_.unmodelled.push_back("profiler (section: torch.profiler's own cost not priced)");
    for (const auto& k : keys_of(root_)) {
      if (!among(k, {"general", "parallelism", "model", "tokenizer", "checkpoints", "logging", "metrics_logging", "tokens", "optimizer",
                     "data_stages", "profiler", "lighteval", "s3_upload"})) {
        fc_.unmodelled.push_back(k + " (a section nanotron's Config does not have)");
      }
    }
    fc_.model = "llama-3-8b";  // its shape all set by model_config (the Megatron-LM reader's base)
    fc_.plan = pp_ > 1 ? (one_f_one_b_ ? "1f1b" : "gpipe") : "ddp";
    // What nanotron has no other setting for, which a search keeps as this
    // file has it (Note [Search from a framework config]): its pipeline
    // engine, its ZeRO stage (stage 0 or its own stage 1, which the
    // accumulator refuses over dp), its recompute (every layer or none),
    // experts whole on every rank, no expert parallelism, FSDP or offload,
    // and under a LlamaConfig no context parallelism. (The search lays
    // ranks out its own ways.)
    for (const auto& [key, value] : {std::pair{"ep", "1"}, std::pair{"fsdp", "none"}, std::pair{"offload_optimizer", "none"},
                                     std::pair{"offload_params", "none"}, std::pair{"overlap_param_gather", "false"}}) {
      out_.plan(key, value, y_.file() + " (nanotron has no such setting)");
    }
    fc_.search_fixed = {"schedule", "zero_stage", "reduce_scatter", "ep", "etp", "fsdp", "offload_optimizer", "offload_params",
                        "overlap_param_gather", "recompute"};
    if (llama_) fc_.search_fixed.push_back("cp");  // nanotron's Llama model has no context parallelism
  }

  YAML::Node root_;
  detail::YamlFields y_;
  FrameworkConfig fc_;
  detail::OverrideList out_;
  std::int64_t dp_ = 1, tp_ = 1, pp_ = 1, cp_ = 1, seq_ = 0;
  bool one_f_one_b_ = false;
  bool sequence_parallel_ = false;  ///< tp_mode REDUCE_SCATTER over tp > 1
  bool llama_ = false;              ///< model_config is a LlamaConfig
  std::string dtype_ = "bfloat16";
  std::string from_tokens_;  ///< where tokens.sequence_length is
};

}  // namespace

FrameworkConfig parse_nanotron_config(const std::string& yaml_text, const std::string& file) {
  if (yaml_text.size() > kMaxConfigBytes) throw ConfigError(file + ": larger than a config may be");
  Reader reader(parse_config_text(yaml_text, file, false, true), file);
  return reader.read();
}

FrameworkConfig read_nanotron_config(const std::string& path) { return parse_nanotron_config(detail::read_config_text(path), path); }

}  // namespace dtsim::sim
