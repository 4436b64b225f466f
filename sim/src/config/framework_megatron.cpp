// Megatron-LM's command line into dtsim's plan and model keys (Note
// [Framework configs] in framework_config.cpp). Flags, defaults and derived
// values as megatron/training/arguments.py has them (parse_args,
// validate_args); the padded vocabulary as _vocab_size_with_padding in
// megatron/training/tokenizer/tokenizer.py.
#include <algorithm>
#include <cmath>
#include <cstdlib>
#include <filesystem>
#include <functional>
#include <map>
#include <optional>
#include <tuple>

#include "dtsim/sim/error.hpp"
#include "dtsim/sim/framework_config.hpp"
#include "dtsim/sim/plan.hpp"
#include "framework_common.hpp"

namespace dtsim::sim {
namespace {


struct Token {
  std::string text;
  int line = 1;
};

bool is_name(const std::string& s) {
  if (s.empty() || !(std::isalpha(static_cast<unsigned char>(s[0])) || s[0] == '_')) return false;
  return std::all_of(s.begin(), s.end(), [](char ch) { return std::isalnum(static_cast<unsigned char>(ch)) || ch == '_'; });
}

/// Splits a launch script as a POSIX shell would into words: '...' literal,
/// "..." with \" \\ \$ \` escapes, a backslash outside quotes escaping the
/// next character, backslash-newline joining lines, # starting a comment at
/// a word's start; ; | & ( ) separate words. Each word keeps the line it
/// starts on. Variables are not expanded. `NAME="--a 1 --b 2"` is split
/// again, as `$NAME` would be where it is used.
void tokenize(const std::string& text, const std::string& file, int first_line, std::vector<Token>& out) {
  int line = first_line;
  std::string cur;
  bool in_word = false;
  int word_line = line;
  auto end_word = [&] {
    if (!in_word) return;
    const auto eq = cur.find('=');
    if (eq != std::string::npos && is_name(cur.substr(0, eq)) && cur.compare(eq + 1, 2, "--") == 0) {
      tokenize(cur.substr(eq + 1), file, word_line, out);
    } else {
      out.push_back({cur, word_line});
    }
    cur.clear();
    in_word = false;
  };
  auto start_word = [&] {
    if (!in_word) {
      in_word = true;
      word_line = line;
    }
  };
  for (std::size_t i = 0; i < text.size(); ++i) {
    const char ch = text[i];
    if (ch == '\\') {
      if (i + 1 < text.size() && text[i + 1] == '\n') {
        ++i;
        ++line;
        continue;
      }
      if (i + 1 < text.size()) {
        start_word();
        cur += text[++i];
      }
      continue;
    }
    if (ch == '\'' || ch == '"') {
      start_word();
      const int open_line = line;
      std::size_t j = i + 1;
      for (; j < text.size() && text[j] != ch; ++j) {
        if (text[j] == '\n') ++line;
        if (ch == '"' && text[j] == '\\' && j + 1 < text.size()) {
          const char next = text[j + 1];
          if (next == '\n') {
            ++line;
            ++j;
            continue;
          }
          if (next == '"' || next == '\\' || next == '$' || next == '`') {
            cur += next;
            ++j;
            continue;
          }
        }
        cur += text[j];
      }
      if (j >= text.size()) {
        throw ConfigError(file + ":" + std::to_string(open_line) + ": unterminated " + (ch == '"' ? "double" : "single") +
                          " quote; close it as the shell would need");
      }
      i = j;
      continue;
    }
    if (ch == '#' && !in_word) {
      while (i + 1 < text.size() && text[i + 1] != '\n') ++i;
      continue;
    }
    if (ch == '\n') {
      end_word();
      ++line;
      continue;
    }
    if (ch == ' ' || ch == '\t' || ch == '\r' || ch == ';' || ch == '|' || ch == '&' || ch == '(' || ch == ')') {
      end_word();
      continue;
    }
    start_word();
    cur += ch;
  }
  end_word();
}

/// A Python list expression of non-negative integers built with [..], +,
/// * and parentheses ("([0]*3+[1]*58)", "[0,0,4,128]", "([0]+[4,128]*2)*3"),
/// expanded, as Megatron-LM's moe_freq_type and compress_ratios_type
/// evaluate theirs. Throws ConfigError (message without a location, ending
/// with `valid`) for anything else, or for more than 2^20 entries.
std::vector<std::int64_t> list_expression(const std::string& text, const std::string& valid) {
  std::string s;
  for (char ch : text) {
    if (ch != ' ' && ch != '\t') s += ch;
  }
  constexpr std::size_t kMost = 1 << 20;
  std::size_t i = 0;
  auto integer = [&]() -> std::int64_t {
    std::size_t j = i;
    while (j < s.size() && std::isdigit(static_cast<unsigned char>(s[j]))) ++j;
    if (j == i || j - i > 7) throw ConfigError("'" + text + "' is not understood; " + valid);
    const std::int64_t v = std::stoll(s.substr(i, j - i));
    i = j;
    return v;
  };
  std::function<std::vector<std::int64_t>()> expr;
  auto atom = [&]() -> std::vector<std::int64_t> {
    std::vector<std::int64_t> v;
    if (i < s.size() && s[i] == '(') {
      ++i;
      v = expr();
      if (i >= s.size() || s[i] != ')') throw ConfigError("'" + text + "': a parenthesis is not closed; " + valid);
      ++i;
      return v;
    }
    if (i >= s.size() || s[i] != '[') throw ConfigError("'" + text + "' is not understood; " + valid);
    ++i;
    while (true) {
      v.push_back(integer());
      if (i < s.size() && s[i] == ',') {
        ++i;
        if (i < s.size() && s[i] == ']') break;  // a trailing comma
        continue;
      }
      break;
    }
    if (i >= s.size() || s[i] != ']') throw ConfigError("'" + text + "': a list is not closed; " + valid);
    ++i;
    return v;
  };
  auto term = [&]() {
    std::vector<std::int64_t> v = atom();
    while (i < s.size() && s[i] == '*') {
      ++i;
      const std::int64_t n = integer();
      if (n < 0 || static_cast<std::size_t>(n) * v.size() > kMost) throw ConfigError("'" + text + "' lists more layers than a model may have");
      std::vector<std::int64_t> r;
      for (std::int64_t k = 0; k < n; ++k) r.insert(r.end(), v.begin(), v.end());
      v = std::move(r);
    }
    return v;
  };
  expr = [&]() {
    std::vector<std::int64_t> v = term();
    while (i < s.size() && s[i] == '+') {
      ++i;
      const std::vector<std::int64_t> w = term();
      if (v.size() + w.size() > kMost) throw ConfigError("'" + text + "' lists more layers than a model may have");
      v.insert(v.end(), w.begin(), w.end());
    }
    return v;
  };
  std::vector<std::int64_t> v = expr();
  if (i != s.size()) throw ConfigError("'" + text + "' is not understood at '" + s.substr(i, 20) + "'; " + valid);
  if (v.empty()) throw ConfigError("'" + text + "' lists no layers; " + valid);
  return v;
}

/// moe_freq_type's value: an integer N >= 1 alone ({N}), or a list
/// expression of 0s and 1s ("([0]*3+[1]*58)", "[1,1,0]*2"), expanded.
/// Throws ConfigError (message without a location) for anything else.
std::vector<int> layer_pattern(const std::string& text) {
  const std::string valid = "valid: an integer >= 1, or a list expression of 0s and 1s such as \"([0]*3+[1]*58)\"";
  std::string s;
  for (char ch : text) {
    if (ch != ' ' && ch != '\t') s += ch;
  }
  if (!s.empty() && std::all_of(s.begin(), s.end(), [](char ch) { return std::isdigit(static_cast<unsigned char>(ch)); })) {
    if (s.size() > 7 || std::stoll(s) < 1) throw ConfigError("'" + text + "': " + valid);
    return {static_cast<int>(std::stoll(s))};
  }
  std::vector<int> out;
  for (const std::int64_t x : list_expression(text, valid)) {
    if (x > 1) throw ConfigError("'" + text + "': " + std::to_string(x) + " in a list; each layer is 0 (dense) or 1 (MoE)");
    out.push_back(static_cast<int>(x));
  }
  return out;
}

enum class Kind { kInt, kBool, kString, kFloat, kWords };

/// The flags read, with what each takes (argparse's type or store_true).
const std::map<std::string, Kind>& known_flags() {
  static const std::map<std::string, Kind> flags = {
      {"tensor-model-parallel-size", Kind::kInt}, {"pipeline-model-parallel-size", Kind::kInt},
      {"num-layers-per-virtual-pipeline-stage", Kind::kInt}, {"virtual-pipeline-model-parallel-size", Kind::kInt},
      {"context-parallel-size", Kind::kInt}, {"cp-comm-type", Kind::kString}, {"expert-model-parallel-size", Kind::kInt},
      {"expert-tensor-parallel-size", Kind::kInt}, {"sequence-parallel", Kind::kBool}, {"tp-comm-overlap", Kind::kBool},
      {"tp-comm-overlap-cfg", Kind::kString},
      {"recompute-granularity", Kind::kString}, {"recompute-modules", Kind::kWords}, {"recompute-method", Kind::kString}, {"recompute-num-layers", Kind::kInt},
      {"recompute-activations", Kind::kBool}, {"micro-batch-size", Kind::kInt}, {"global-batch-size", Kind::kInt},
      {"use-distributed-optimizer", Kind::kBool}, {"overlap-grad-reduce", Kind::kBool}, {"overlap-param-gather", Kind::kBool}, {"ddp-bucket-size", Kind::kInt},
      {"accumulate-allreduce-grads-in-fp32", Kind::kBool}, {"grad-reduce-in-bf16", Kind::kBool}, {"bf16", Kind::kBool}, {"fp16", Kind::kBool},
      {"fp8-format", Kind::kString}, {"fp8-param-gather", Kind::kBool}, {"optimizer", Kind::kString},
      {"use-flash-attn", Kind::kBool}, {"num-layers", Kind::kInt}, {"hidden-size", Kind::kInt},
      {"ffn-hidden-size", Kind::kInt}, {"num-attention-heads", Kind::kInt}, {"kv-channels", Kind::kInt},
      {"group-query-attention", Kind::kBool}, {"num-query-groups", Kind::kInt}, {"seq-length", Kind::kInt},
      {"max-position-embeddings", Kind::kInt}, {"swiglu", Kind::kBool}, {"normalization", Kind::kString},
      {"position-embedding-type", Kind::kString}, {"untie-embeddings-and-output-weights", Kind::kBool},
      {"disable-bias-linear", Kind::kBool}, {"add-qkv-bias", Kind::kBool}, {"vocab-size", Kind::kInt},
      {"padded-vocab-size", Kind::kInt}, {"make-vocab-size-divisible-by", Kind::kInt}, {"tokenizer-type", Kind::kString},
      {"num-experts", Kind::kInt}, {"moe-router-topk", Kind::kInt}, {"moe-ffn-hidden-size", Kind::kInt},
      {"moe-shared-expert-intermediate-size", Kind::kInt}, {"moe-expert-capacity-factor", Kind::kFloat},
      {"moe-pad-expert-input-to-capacity", Kind::kBool}, {"moe-token-dispatcher-type", Kind::kString},
      {"moe-enable-deepep", Kind::kBool}, {"moe-layer-freq", Kind::kString},
      {"moe-router-force-load-balancing", Kind::kBool}, {"mtp-num-layers", Kind::kInt}, {"sgd-momentum", Kind::kFloat},
      {"moe-latent-size", Kind::kInt}, {"mtp-use-repeated-layer", Kind::kBool},
      {"num-layers-at-start-in-bf16", Kind::kInt}, {"num-layers-at-end-in-bf16", Kind::kInt},
      {"no-bias-swiglu-fusion", Kind::kBool}, {"fp8-recipe", Kind::kString}, {"cpu-offloading", Kind::kBool},
      {"cpu-offloading-num-layers", Kind::kInt}, {"fp4-format", Kind::kString}, {"fp4-recipe", Kind::kString},
      {"fp4-param-gather", Kind::kBool}, {"first-last-layers-bf16", Kind::kBool},
      {"overlap-moe-expert-parallel-comm", Kind::kBool}, {"delay-wgrad-compute", Kind::kBool},
      {"multi-latent-attention", Kind::kBool}, {"q-lora-rank", Kind::kInt}, {"kv-lora-rank", Kind::kInt},
      {"qk-head-dim", Kind::kInt}, {"qk-pos-emb-head-dim", Kind::kInt}, {"v-head-dim", Kind::kInt},
      {"qk-layernorm", Kind::kBool}, {"moe-router-num-groups", Kind::kInt}, {"moe-router-group-topk", Kind::kInt},
      {"pipeline-model-parallel-layout", Kind::kString}, {"account-for-embedding-in-pipeline-split", Kind::kBool},
      {"account-for-loss-in-pipeline-split", Kind::kBool}, {"decoder-first-pipeline-num-layers", Kind::kInt},
      {"decoder-last-pipeline-num-layers", Kind::kInt}, {"num-virtual-stages-per-pipeline-rank", Kind::kInt},
      {"use-megatron-fsdp", Kind::kBool}, {"data-parallel-sharding-strategy", Kind::kString},
      {"outer-dp-sharding-strategy", Kind::kString}, {"num-distributed-optimizer-instances", Kind::kInt},
      {"experimental-attention-variant", Kind::kString}, {"linear-attention-freq", Kind::kString},
      {"hybrid-layer-pattern", Kind::kString}, {"hybrid-override-pattern", Kind::kString}, {"is-hybrid-model", Kind::kBool},
      {"mamba-state-dim", Kind::kInt}, {"mamba-head-dim", Kind::kInt}, {"mamba-num-groups", Kind::kInt}, {"mamba-num-heads", Kind::kInt},
      {"squared-relu", Kind::kBool}, {"use-rotary-position-embeddings", Kind::kBool}, {"spec", Kind::kWords},
      {"linear-conv-kernel-dim", Kind::kInt}, {"linear-key-head-dim", Kind::kInt}, {"linear-value-head-dim", Kind::kInt},
      {"linear-num-key-heads", Kind::kInt}, {"linear-num-value-heads", Kind::kInt}, {"attention-output-gate", Kind::kBool},
      {"moe-shared-expert-gate", Kind::kBool}, {"apply-layernorm-1p", Kind::kBool},
      {"dsa-indexer-n-heads", Kind::kInt}, {"dsa-indexer-head-dim", Kind::kInt}, {"dsa-indexer-topk", Kind::kInt},
      {"dsa-indexer-topk-freq", Kind::kInt}, {"dsa-indexer-skip-topk-offset", Kind::kInt}, {"dsa-indexer-loss-coeff", Kind::kFloat},
      {"dsa-indexer-use-sparse-loss", Kind::kBool}, {"dsa-kernel-backend", Kind::kString},
      {"fine-grained-activation-offloading", Kind::kBool}, {"offload-modules", Kind::kWords},
      {"min-offloaded-tensor-size", Kind::kInt}, {"activation-offload-fraction", Kind::kFloat},
      {"delta-offload-bytes-across-pp-ranks", Kind::kInt}, {"fine-grained-offloading-max-inflight-offloads", Kind::kInt},
      {"csa-compress-ratios", Kind::kString}, {"csa-window-size", Kind::kInt}, {"o-groups", Kind::kInt}, {"o-lora-rank", Kind::kInt},
      {"no-dsa-kernel-fusion", Kind::kBool}, {"enable-hyper-connections", Kind::kBool}, {"num-residual-streams", Kind::kInt},
      {"mhc-sinkhorn-iterations", Kind::kInt}, {"moe-n-hash-layers", Kind::kInt}, {"csa-dense-mode", Kind::kBool},
      {"use-precision-aware-optimizer", Kind::kBool}, {"main-grads-dtype", Kind::kString}, {"main-params-dtype", Kind::kString},
      {"exp-avg-dtype", Kind::kString}, {"exp-avg-sq-dtype", Kind::kString},
      // Megatron-Bridge's OptimizerConfig.store_param_remainders false;
      // Megatron-LM has no flag for it (true).
      {"no-store-param-remainders", Kind::kBool},
      // Megatron-Bridge's apply_dsa_kernel_fusion as it is (true or false);
      // Megatron-LM spells only its negation, --no-dsa-kernel-fusion.
      {"apply-dsa-kernel-fusion", Kind::kString}};
  return flags;
}

/// Flags that change neither time nor memory (learning rates, data, paths,
/// logging, checkpoints, initialisation, loss scaling): skipped on purpose.
bool skipped_flag(const std::string& name) {
  static const char* const kPrefixes[] = {
      "lr", "min-lr", "log-", "save", "load", "eval-", "tensorboard", "wandb", "ckpt", "exit-", "adam-", "sgd-",
      "data-path", "data-cache-path", "train-data-path", "valid-data-path", "test-data-path", "no-load", "timing-",
      "rotary-", "tokenizer-model", "vocab-file", "merge-file", "split", "seed", "train-iters", "train-samples",
      "weight-decay", "start-weight-decay", "end-weight-decay", "clip-grad", "init-method-std", "attention-dropout",
      "hidden-dropout", "distributed-backend", "distributed-timeout-minutes", "num-workers", "dataloader-type",
      "use-mcore-models", "transformer-impl", "attention-softmax-in-fp32", "loss-scale", "initial-loss-scale",
      "min-loss-scale", "hysteresis", "mock-data", "override-opt_param-scheduler", "use-checkpoint-opt_param-scheduler",
      "use-checkpoint-args", "finetune", "pretrained-checkpoint", "eod-mask-loss", "reset-position-ids",
      "reset-attention-mask", "use-dist-ckpt", "async-save", "dist-ckpt",
      "no-rope-fusion", "norm-epsilon", "layernorm-epsilon", "profile", "use-pytorch-profiler",
      "num-dataset-builder-threads", "object-storage-cache-path", "no-mmap-bin-files", "wall-clock-breakdown",
      // torchrun's own (the launcher's line shares the script)
      "nproc_per_node", "nproc-per-node", "nnodes", "node_rank", "node-rank", "master_addr", "master-addr",
      "master_port", "master-port", "rdzv"};
  for (const char* p : kPrefixes) {
    if (name.rfind(p, 0) == 0) return true;
  }
  return false;
}

struct Value {
  std::string text;
  int line = 0;
};

/// A model dtsim has built in, as Megatron's flags would describe it.
struct KnownShape {
  const char* name;
  bool llama;
  int layers;
  std::int64_t hidden, heads, kv_heads, ffn, seq, vocab;
  bool tied;
};

// The built-ins of models/src/zoo.cpp that Megatron trains: Narayanan et al.
// 2021 Table 1 and Korthikanti et al. 2022 Table 3 (f = 4h, vocabulary
// 51,200, sequence 2,048, tied), and Llama 3 (meta-llama config.json).
constexpr KnownShape kKnownShapes[] = {
    {"gpt-1.7b", false, 24, 2304, 24, 24, 4 * 2304, 2048, 51200, true},
    {"gpt-3.6b", false, 30, 3072, 32, 32, 4 * 3072, 2048, 51200, true},
    {"gpt-7.5b", false, 36, 4096, 32, 32, 4 * 4096, 2048, 51200, true},
    {"gpt-18b", false, 40, 6144, 48, 48, 4 * 6144, 2048, 51200, true},
    {"gpt-22b", false, 48, 6144, 64, 64, 4 * 6144, 2048, 51200, true},
    {"gpt-39b", false, 48, 8192, 64, 64, 4 * 8192, 2048, 51200, true},
    {"gpt-76b", false, 60, 10240, 80, 80, 4 * 10240, 2048, 51200, true},
    {"gpt-145b", false, 80, 12288, 96, 96, 4 * 12288, 2048, 51200, true},
    {"gpt-175b", false, 96, 12288, 96, 96, 4 * 12288, 2048, 51200, true},
    {"gpt-310b", false, 96, 16384, 128, 128, 4 * 16384, 2048, 51200, true},
    {"gpt-530b", false, 105, 20480, 128, 128, 4 * 20480, 2048, 51200, true},
    {"gpt-1t", false, 128, 25600, 160, 160, 4 * 25600, 2048, 51200, true},
    {"llama-3-8b", true, 32, 4096, 32, 8, 14336, 8192, 128256, false},
    {"llama-3-70b", true, 80, 8192, 64, 8, 28672, 8192, 128256, false},
    {"llama-3.1-405b", true, 126, 16384, 128, 8, 53248, 131072, 128256, false},
};

}  // namespace

FrameworkConfig parse_megatron_args(const std::string& args, const std::string& file) {
  if (args.size() > kMaxConfigBytes) throw ConfigError(file + ": larger than a config may be");
  std::vector<Token> tokens;
  tokenize(args, file, 1, tokens);

  // argparse: the last of a flag given twice wins; `--flag value` or `--flag=value`.
  std::map<std::string, Value> given;
  std::vector<std::string> order;  // unknown flags, in the order given
  std::map<std::string, Value> unknown;
  const auto& flags = known_flags();
  for (std::size_t i = 0; i < tokens.size(); ++i) {
    const Token& t = tokens[i];
    if (t.text.size() < 3 || t.text.compare(0, 2, "--") != 0) continue;  // not a flag: a program, a variable, a value
    std::string name = t.text.substr(2);
    std::optional<std::string> inline_value;
    if (const auto eq = name.find('='); eq != std::string::npos) {
      inline_value = name.substr(eq + 1);
      name = name.substr(0, eq);
    }
    const std::string where = file + ":" + std::to_string(t.line) + ": --" + name;
    const auto it = flags.find(name);
    auto next_value = [&]() -> std::optional<std::string> {
      if (inline_value) return inline_value;
      if (i + 1 < tokens.size() && tokens[i + 1].text.compare(0, 2, "--") != 0) return tokens[++i].text;
      return std::nullopt;
    };
    if (it == flags.end()) {
      if (skipped_flag(name)) {
        while (!inline_value && i + 1 < tokens.size() && tokens[i + 1].text.compare(0, 2, "--") != 0 &&
               tokens[i + 1].line == t.line) {
          ++i;  // its values
        }
        continue;
      }
      // Unknown: its values are the words after it on the same line, if any.
      std::string v;
      if (inline_value) {
        v = *inline_value;
      } else {
        while (i + 1 < tokens.size() && tokens[i + 1].text.compare(0, 2, "--") != 0 && tokens[i + 1].line == t.line) {
          v += (v.empty() ? "" : " ") + tokens[++i].text;
        }
      }
      if (!unknown.count(name)) order.push_back(name);
      unknown[name] = {v, t.line};
      continue;
    }
    if (it->second == Kind::kBool) {
      if (inline_value) throw ConfigError(where + ": takes no value (a switch); write --" + name + " alone");
      given[name] = {"true", t.line};
      continue;
    }
    if (it->second == Kind::kWords) {
      // argparse's nargs='*' (--recompute-modules core_attn mlp): the
      // words after it on its line.
      std::string v = inline_value ? *inline_value : "";
      while (!inline_value && i + 1 < tokens.size() && tokens[i + 1].text.compare(0, 2, "--") != 0 && tokens[i + 1].line == t.line) {
        v += (v.empty() ? "" : " ") + tokens[++i].text;
      }
      given[name] = {v, t.line};
      continue;
    }
    const auto v = next_value();
    if (!v) {
      const char* what = it->second == Kind::kInt ? "an integer" : it->second == Kind::kFloat ? "a number" : "a value";
      throw ConfigError(where + ": needs " + what + " after it (--" + name + " N or --" + name + "=N)");
    }
    if (it->second == Kind::kInt) {
      std::size_t pos = 0;
      bool ok = !v->empty();
      std::int64_t n = 0;
      try {
        n = std::stoll(*v, &pos);
        ok = pos == v->size();
      } catch (const std::exception&) {
        ok = false;
      }
      if (!ok || n < 1) {
        throw ConfigError(where + ": '" + *v + "' is not " + (ok ? "positive" : "an integer") + "; valid: an integer >= 1" +
                          (v->find('$') != std::string::npos ? " (shell variables are not expanded: write the number)" : ""));
      }
    } else if (it->second == Kind::kFloat) {
      std::size_t pos = 0;
      bool ok = !v->empty();
      try {
        (void)std::stod(*v, &pos);
        ok = pos == v->size();
      } catch (const std::exception&) {
        ok = false;
      }
      if (!ok) throw ConfigError(where + ": '" + *v + "' is not a number");
    }
    given[name] = {*v, t.line};
  }

  detail::MegatronArgs a;
  a.framework = "Megatron-LM";
  a.file = file;
  for (const auto& [name, v] : given) a.given[name] = {v.text, v.line};
  for (const auto& n : order) {
    const Value& v = unknown.at(n);
    a.unknown.push_back("--" + n + (v.text.empty() ? "" : " " + v.text));
  }
  return detail::interpret_megatron(a);
}

namespace detail {

std::string MegatronArgs::spelled(const std::string& flag) const { return spell ? spell(flag) : "--" + flag; }

FrameworkConfig interpret_megatron(const MegatronArgs& a) {
  const std::string& file = a.file;
  const auto& given = a.given;
  FrameworkConfig fc;
  fc.framework = a.framework;
  fc.file = file;
  detail::OverrideList out(fc);
  auto flag = [&](const std::string& n) { return a.spelled(n); };
  auto has = [&](const std::string& n) { return given.count(n) > 0; };
  auto at = [&](const std::string& n) { return file + ":" + std::to_string(given.at(n).line) + " (" + flag(n) + ")"; };
  auto num = [&](const std::string& n, std::int64_t fallback) { return has(n) ? std::stoll(given.at(n).text) : fallback; };
  auto text = [&](const std::string& n, const std::string& fallback) { return has(n) ? given.at(n).text : fallback; };
  auto fail = [&](const std::string& n, const std::string& message) -> void {
    throw ConfigError(file + ":" + std::to_string(given.at(n).line) + ": " + flag(n) + ": " + message);
  };
  auto choice = [&](const std::string& n, std::initializer_list<const char*> valid) {
    const std::string v = text(n, "");
    std::string list;
    for (const char* c : valid) {
      if (v == c) return v;
      list += std::string(list.empty() ? "" : ", ") + c;
    }
    fail(n, "'" + v + "' is not one of " + list);
    return v;
  };
  auto note = [&](const std::string& n, const std::string& why) {
    const std::string v = has(n) && given.at(n).text != "true" ? a.value_sep + given.at(n).text : "";
    fc.unmodelled.push_back(flag(n) + v + (why.empty() ? "" : " (" + why + ")"));
  };
  auto set_int = [&](const std::string& key, const std::string& n) {
    if (has(n)) out.plan(key, given.at(n).text, at(n));
  };

  // Parallelism.
  const std::int64_t tp = num("tensor-model-parallel-size", 1), pp = num("pipeline-model-parallel-size", 1);
  set_int("tp", "tensor-model-parallel-size");
  set_int("pp", "pipeline-model-parallel-size");
  set_int("cp", "context-parallel-size");
  set_int("ep", "expert-model-parallel-size");
  set_int("etp", "expert-tensor-parallel-size");
  if (has("cp-comm-type")) {
    // arguments.py spells them p2p, a2a, allgather, a2a+p2p.
    const std::string t = choice("cp-comm-type", {"p2p", "allgather", "a2a", "a2a+p2p"});
    if (t == "p2p" || t == "allgather") {
      out.plan("cp_comm", t == "p2p" ? "p2p" : "all_gather", at("cp-comm-type"));
    } else {
      note("cp-comm-type", "priced as p2p");
    }
  }
  // Note [Mamba-2] (models/src/llama.cpp): a hybrid model's layers, a
  // letter each (--hybrid-layer-pattern; --hybrid-override-pattern, its
  // deprecated name), "|" between pipeline segments (segment k on chunk k:
  // vpp = segments / pp) and "/" before multi-token prediction depths
  // (hybrid_layer_allocation.py); num_layers is the letters' count.
  const std::string hybrid_flag = has("hybrid-layer-pattern") ? "hybrid-layer-pattern" : "hybrid-override-pattern";
  const bool hybrid = has(hybrid_flag);
  std::string hybrid_pattern;                 // the letters, without separators
  std::vector<std::int64_t> hybrid_segments;  // layers a segment, where "|" splits them
  std::string mtp_pattern;                    // a multi-token prediction depth's letters, after '/'
  int mtp_depths = 0;                         // how many '/' depths (parse_hybrid_pattern's mtp_num_depths)
  if (hybrid) {
    const std::string given_pattern = text(hybrid_flag, "");
    const std::string main = given_pattern.substr(0, given_pattern.find('/'));
    if (main.size() != given_pattern.size()) {
      // Note [Multi-token prediction]: each depth after '/' repeats one
      // pattern (Megatron raises where they differ); dtsim's depth is
      // attention, then the MoE or the MLP.
      std::size_t at_slash = main.size();
      while (at_slash != std::string::npos) {
        const std::size_t next = given_pattern.find('/', at_slash + 1);
        const std::string depth = given_pattern.substr(at_slash + 1, next == std::string::npos ? std::string::npos : next - at_slash - 1);
        if (mtp_depths > 0 && depth != mtp_pattern) {
          fail(hybrid_flag, "'" + given_pattern + "': multi-token prediction depths '" + mtp_pattern + "' and '" + depth +
                                "' differ (Megatron requires them identical)");
        }
        mtp_pattern = depth;
        ++mtp_depths;
        at_slash = next;
      }
      if (mtp_pattern != "*E" && mtp_pattern != "*-") {
        fail(hybrid_flag, "'" + given_pattern + "': a multi-token prediction depth of '" + mtp_pattern +
                              "' is not modelled; valid: *E (attention, then the MoE) or *- (attention, then the MLP)");
      }
    }
    std::int64_t in_segment = 0;
    for (char ch : main) {
      if (ch == '|') {
        hybrid_segments.push_back(in_segment);
        in_segment = 0;
      } else if (ch == 'M' || ch == '*' || ch == '-' || ch == 'E') {
        hybrid_pattern += ch;
        ++in_segment;
      } else {
        fail(hybrid_flag, "'" + given_pattern + "' has '" + std::string(1, ch) +
                              "'; dtsim models M (Mamba-2), * (attention), - (MLP), E (MoE) and | between pipeline segments "
                              "(G, D and + layers are not modelled)");
      }
    }
    if (hybrid_pattern.empty()) fail(hybrid_flag, "has no layers; valid: a letter a layer (M, *, -, E)");
    if (!hybrid_segments.empty()) {
      hybrid_segments.push_back(in_segment);
      for (std::size_t k = 0; k < hybrid_segments.size(); ++k) {
        if (hybrid_segments[k] == 0) fail(hybrid_flag, "'" + given_pattern + "': pipeline segment " + std::to_string(k + 1) + " has no layers");
      }
      if (pp == 1) {
        fail(hybrid_flag, "'" + given_pattern + "' splits pipeline segments with '|' but " + flag("pipeline-model-parallel-size") +
                              " is 1; drop the '|' or set a pipeline");
      }
      if (static_cast<std::int64_t>(hybrid_segments.size()) % pp != 0) {
        fail(hybrid_flag, std::to_string(hybrid_segments.size()) + " segments do not divide over " + flag("pipeline-model-parallel-size") +
                              " " + std::to_string(pp) + " (Megatron asserts it)");
      }
    }
  }
  // --spec names the module that builds the layers: a hybrid model's
  // (hybrid_stack_spec) is what the pattern says; any other is not read.
  if (has("spec") && !hybrid) note("spec", "a custom layer spec; priced as the layers the other flags describe");
  // Interleaving (arguments.py): the layout's stages / pp where a layout
  // is given; else --num-virtual-stages-per-pipeline-rank, or
  // virtual_pipeline_model_parallel_size = (num_layers [+ 1 for an
  // embedding, + 1 for a loss counted in the split] / pp) /
  // num_layers_per_virtual_pipeline_stage.
  const std::int64_t counted = num("num-layers", 0) + (has("account-for-embedding-in-pipeline-split") ? 1 : 0) +
                               (has("account-for-loss-in-pipeline-split") ? 1 : 0);
  std::int64_t vpp = 0;
  std::string vpp_from;
  if (has("pipeline-model-parallel-layout")) {
    std::size_t stages = 0;
    try {
      stages = parse_pipeline_layout(text("pipeline-model-parallel-layout", "")).size();
    } catch (const ConfigError& e) {
      fail("pipeline-model-parallel-layout", e.what());
    }
    if (static_cast<std::int64_t>(stages) % pp != 0) {
      fail("pipeline-model-parallel-layout", std::to_string(stages) + " stages do not divide over " +
                                                 flag("pipeline-model-parallel-size") + " " + std::to_string(pp) + " (Megatron asserts it)");
    }
    vpp = static_cast<std::int64_t>(stages) / pp;
    vpp_from = at("pipeline-model-parallel-layout");
  } else if (hybrid_segments.size() > 1) {
    vpp = static_cast<std::int64_t>(hybrid_segments.size()) / pp;
    vpp_from = at(hybrid_flag);
  } else if (has("num-virtual-stages-per-pipeline-rank")) {
    vpp = num("num-virtual-stages-per-pipeline-rank", 1);
    vpp_from = at("num-virtual-stages-per-pipeline-rank");
  } else if (has("num-layers-per-virtual-pipeline-stage")) {
    if (!has("num-layers")) fail("num-layers-per-virtual-pipeline-stage", "needs " + flag("num-layers") + " to count the model chunks");
    const std::int64_t per = num("num-layers-per-virtual-pipeline-stage", 1);
    if (counted % pp != 0 || (counted / pp) % per != 0) {
      fail("num-layers-per-virtual-pipeline-stage", std::to_string(per) + " does not divide the " + std::to_string(counted) + " / " +
                                                        std::to_string(pp) + " layers of a pipeline stage (Megatron asserts it)");
    }
    vpp = counted / pp / per;
    vpp_from = at("num-layers-per-virtual-pipeline-stage");
  } else if (has("virtual-pipeline-model-parallel-size")) {
    vpp = num("virtual-pipeline-model-parallel-size", 1);
    vpp_from = at("virtual-pipeline-model-parallel-size");
  }
  if (vpp > 1) {
    out.plan("schedule", "interleaved", vpp_from);
    out.plan("virtual_stages", std::to_string(vpp), vpp_from);
  } else if (pp > 1) {
    out.plan("schedule", "1f1b", at("pipeline-model-parallel-size"));
  }
  // The layers over the chunks: a layout (Note [Pipeline layout] in
  // sim/src/parallel/plan.cpp), else Megatron's even split in blocks with
  // its knobs (Note [Megatron's split]).
  if (has("pipeline-model-parallel-layout")) {
    std::string quoted = "\"";
    for (char ch : text("pipeline-model-parallel-layout", "")) quoted += (ch == '"' || ch == '\\') ? std::string("\\") + ch : std::string(1, ch);
    out.plan("pipeline_layout", quoted + "\"", at("pipeline-model-parallel-layout"));
  } else if (hybrid_segments.size() > 1) {
    // A hybrid pattern's segments as a layout: the embedding on the first,
    // the loss on the last (Note [Pipeline layout] in sim/src/parallel/plan.cpp).
    std::string layout = "E";
    for (std::size_t k = 0; k < hybrid_segments.size(); ++k) {
      layout += (k > 0 ? "|" : "") + std::string(static_cast<std::size_t>(hybrid_segments[k]), 't');
    }
    out.plan("pipeline_layout", "\"" + layout + "L\"", at(hybrid_flag));
  } else if (pp > 1) {
    out.plan("pipeline_split", "megatron", at("pipeline-model-parallel-size") + " (Megatron-Core's even split)");
    for (const auto& [key, name] : {std::pair{"account_for_embedding_in_pipeline_split", "account-for-embedding-in-pipeline-split"},
                                    std::pair{"account_for_loss_in_pipeline_split", "account-for-loss-in-pipeline-split"}}) {
      if (has(name)) out.plan(key, "true", at(name));
    }
    for (const auto& [key, name] : {std::pair{"num_layers_in_first_pipeline_stage", "decoder-first-pipeline-num-layers"},
                                    std::pair{"num_layers_in_last_pipeline_stage", "decoder-last-pipeline-num-layers"}}) {
      set_int(key, name);
    }
  }
  // arguments.py: "Disabling sequence parallelism because tensor model parallelism is not enabled".
  if (has("sequence-parallel") && tp > 1) out.plan("sequence_parallel", "true", at("sequence-parallel"));
  if (has("tp-comm-overlap")) {
    out.plan("tp_comm_overlap", "true", at("tp-comm-overlap"));
    // Note [Userbuffers' chunks] (models/src/layers.cpp): without a
    // configuration file Transformer Engine overlaps each layer its own
    // way (initialize_ub's defaults); a file's per-layer methods are not
    // read, and priced as the ring exchange.
    if (has("tp-comm-overlap-cfg")) {
      out.plan("tp_comm_overlap_cfg", "ring", at("tp-comm-overlap-cfg"));
      note("tp-comm-overlap-cfg", "its layers priced as Transformer Engine's ring exchange");
    } else {
      out.plan("tp_comm_overlap_cfg", "te", at("tp-comm-overlap"));
    }
  }

  // Activation recomputation.
  if (has("recompute-activations")) out.plan("recompute", "selective", at("recompute-activations"));  // arguments.py: = selective
  if (has("recompute-granularity")) {
    const std::string g = choice("recompute-granularity", {"full", "selective"});
    out.plan("recompute", g, at("recompute-granularity"));
    // --recompute-modules (nargs '*', default core_attn) under selective:
    // Note [Recompute modules] in sim/include/dtsim/sim/model.hpp. The
    // plan reader checks the names; under full Megatron reads none.
    if (g == "selective" && has("recompute-modules")) {
      out.plan("recompute_modules", "[" + text("recompute-modules", "") + "]", at("recompute-modules"));
    }
    if (g == "full") {
      const std::string method = has("recompute-method") ? choice("recompute-method", {"uniform", "block"}) : "uniform";
      const std::int64_t n = num("recompute-num-layers", 1);
      // uniform, 1: every layer recomputed from its input, dtsim's full
      // recompute; block: the first n of each model chunk (Note [Block
      // recompute] in sim/src/parallel/partition.cpp).
      if (method == "block") {
        out.plan("recompute_method", "block", at("recompute-method"));
        out.plan("recompute_num_layers", std::to_string(n), has("recompute-num-layers") ? at("recompute-num-layers") : at("recompute-method"));
      } else if (n != 1) {
        out.plan("recompute_num_layers", std::to_string(n), at("recompute-num-layers"));  // uniform groups
      }
    }
  }

  // CPU offloading (Note [Activation offload]): --cpu-offloading with
  // --cpu-offloading-num-layers (default 0: nothing offloaded); from core
  // 0.16 a count above 0 turns it on alone.
  if (has("cpu-offloading-num-layers")) {
    const std::int64_t n = num("cpu-offloading-num-layers", 0);
    if (n > 0) out.plan("cpu_offloading_num_layers", std::to_string(n), at("cpu-offloading-num-layers"));
  }

  // Fine-grained activation offloading (Note [Fine-grained offload] in
  // sim/src/lowering/passes/fine_grained_offload.cpp): TransformerConfig's
  // fields as ArgumentGroupFactory makes flags of them; the modules and
  // knobs are read only where the switch is on, as Megatron-Core reads them.
  if (has("fine-grained-activation-offloading")) {
    out.plan("fine_grained_activation_offloading", "true", at("fine-grained-activation-offloading"));
    if (has("offload-modules")) out.plan("offload_modules", "[" + text("offload-modules", "") + "]", at("offload-modules"));
    if (has("activation-offload-fraction")) {
      out.plan("activation_offload_fraction", text("activation-offload-fraction", "1"), at("activation-offload-fraction"));
    }
    for (const char* n : {"min-offloaded-tensor-size", "delta-offload-bytes-across-pp-ranks", "fine-grained-offloading-max-inflight-offloads"}) {
      if (!has(n)) continue;
      std::string key = n;
      std::replace(key.begin(), key.end(), '-', '_');
      out.plan(key, std::to_string(num(n, 0)), at(n));
    }
  } else {
    for (const char* n : {"offload-modules", "min-offloaded-tensor-size", "activation-offload-fraction", "delta-offload-bytes-across-pp-ranks",
                          "fine-grained-offloading-max-inflight-offloads"}) {
      if (has(n)) note(n, "read only with " + flag("fine-grained-activation-offloading"));
    }
  }

  // Batch: global = micro x accumulation x dp (Megatron's num_microbatches).
  // --micro-batch-size has no default: validate_args asserts it is given
  // (megatron/training/arguments.py).
  if (!has("micro-batch-size")) {
    throw ConfigError(file + ": " + flag("micro-batch-size") + " is missing; Megatron-LM has no default for it (validate_args asserts it): add e.g. " +
                      flag("micro-batch-size") + a.value_sep + "1");
  }
  set_int("micro_batch", "micro-batch-size");
  set_int("global_batch", "global-batch-size");
  if (has("global-batch-size")) fc.global_batch = num("global-batch-size", 0);
  set_int("seq_len", "seq-length");

  // Precision and optimizer.
  if (has("fp16") && has("bf16")) fail("bf16", "given with " + flag("fp16") + "; Megatron refuses both");
  std::string precision = has("bf16") ? "bf16" : has("fp16") ? "fp16" : "fp32";
  std::string precision_from = has("bf16") ? at("bf16") : has("fp16") ? at("fp16") : file;
  if (has("fp8-format")) {
    choice("fp8-format", {"e4m3", "hybrid"});
    precision = "fp8";
    precision_from = at("fp8-format");
  }
  if (has("fp4-format")) {
    // Note [NVFP4 training]: arguments.py refuses FP4 beside FP8.
    if (has("fp8-format")) fail("fp4-format", "given with " + flag("fp8-format") + "; Megatron refuses both");
    choice("fp4-format", {"e2m1"});
    precision = "fp4";
    precision_from = at("fp4-format");
  }
  if (has("fp4-recipe")) {
    // transformer_config.py: nvfp4 (the default) or custom (a user's quantizer).
    if (choice("fp4-recipe", {"nvfp4", "custom"}) == "custom") note("fp4-recipe", "priced as NVFP4");
  }
  out.plan("precision", precision, precision_from);
  if (has("fp8-param-gather")) out.plan("fp8_param_gather", "true", at("fp8-param-gather"));
  // --fp4-param-gather: NVFP4 primary weights, gathered at 0.5625 bytes (plan.fp8_param_gather under fp4).
  if (has("fp4-param-gather")) out.plan("fp8_param_gather", "true", at("fp4-param-gather"));
  // Note [BF16 layers] (sim/src/core/model.cpp): TransformerConfig's
  // counts default to 1 each.
  if (has("first-last-layers-bf16")) {
    out.plan("first_last_layers_bf16", "true", at("first-last-layers-bf16"));
    for (const char* n : {"num-layers-at-start-in-bf16", "num-layers-at-end-in-bf16"}) {
      std::string key = n;
      std::replace(key.begin(), key.end(), '-', '_');
      out.plan(key, std::to_string(num(n, 1)), has(n) ? at(n) : at("first-last-layers-bf16"));
    }
  } else {
    for (const char* n : {"num-layers-at-start-in-bf16", "num-layers-at-end-in-bf16"}) {
      if (has(n)) note(n, "read only with " + flag("first-last-layers-bf16"));
    }
  }
  if (has("fp8-recipe")) {
    // arguments.py: delayed (the default), tensorwise, mxfp8, blockwise.
    const std::string recipe = choice("fp8-recipe", {"delayed", "tensorwise", "mxfp8", "blockwise"});
    if (recipe == "blockwise") {
      note("fp8-recipe", "blockwise scaling priced as delayed scaling's casts");
    } else {
      out.plan("fp8_recipe", recipe, at("fp8-recipe"));
    }
  }
  // Note [Fused kernels] (models/src/llama.cpp): Megatron-Core's RMSNorm is
  // one kernel under either --transformer-impl (Transformer Engine's, or
  // Apex's FusedRMSNorm under local), and its SwiGLU one under
  // --bias-swiglu-fusion, on unless --no-bias-swiglu-fusion.
  out.plan("kernels", "fused", file + " (Megatron-Core's fused RMSNorm and SwiGLU)");
  if (has("no-bias-swiglu-fusion")) note("no-bias-swiglu-fusion", "priced as the fused SwiGLU, which keeps one intermediate less");
  if (has("optimizer")) {
    out.plan("optimizer", choice("optimizer", {"adam", "sgd"}), at("optimizer"));
    // Note [SGD momentum] (plan.cpp): --sgd-momentum, 0.9 by default.
    if (text("optimizer", "") == "sgd") {
      out.plan("sgd_momentum", text("sgd-momentum", "0.9"), has("sgd-momentum") ? at("sgd-momentum") : file + " (Megatron's --sgd-momentum default)");
    }
  } else {
    out.plan("optimizer", "adam", file + " (Megatron's --optimizer default)");
  }
  out.plan("zero_stage", has("use-distributed-optimizer") ? "1" : "0",
           has("use-distributed-optimizer") ? at("use-distributed-optimizer") : file);
  // DistributedDataParallelConfig.overlap_grad_reduce defaults to false.
  out.plan("overlap", has("overlap-grad-reduce") ? "true" : "false",
           has("overlap-grad-reduce") ? at("overlap-grad-reduce") : file + " (no --overlap-grad-reduce)");
  // DistributedDataParallelConfig.overlap_param_gather defaults to false
  // (Note [Overlapped parameter gather]).
  out.plan("overlap_param_gather", has("overlap-param-gather") ? "true" : "false",
           has("overlap-param-gather") ? at("overlap-param-gather") : file + " (no --overlap-param-gather)");
  // Every Megatron-LM run frees a stage's output once sent (Note
  // [Deallocated outputs] in sim/src/lowering/passes/pipeline.cpp).
  out.plan("deallocate_pipeline_outputs", "true", file + " (megatron/training/argument_utils.py sets it)");
  // The gradient buffer (Note [Megatron's gradient buffer]): fp32 when
  // asked, and under bf16 unless --grad-reduce-in-bf16 (arguments.py forces
  // accumulate_allreduce_grads_in_fp32 there); in fp32 training it is fp32
  // anyway. Only fp16 keeps 16-bit gradients by default.
  // Note [Precision-aware optimizer] (sim/src/parallel/plan.cpp): the
  // flags' words as arguments.py's choices take them, and its checks.
  const bool precision_aware = has("use-precision-aware-optimizer");
  const std::string main_grads = has("main-grads-dtype") ? choice("main-grads-dtype", {"fp32", "bf16"}) : "fp32";
  for (const char* n : {"main-grads-dtype", "main-params-dtype", "exp-avg-dtype", "exp-avg-sq-dtype"}) {
    if (!has(n)) continue;
    const std::string v = std::string(n) == "main-grads-dtype"    ? main_grads
                          : std::string(n) == "main-params-dtype" ? choice(n, {"fp32", "fp16"})
                                                                  : choice(n, {"fp32", "fp16", "bf16", "fp8"});
    if (!precision_aware && v != "fp32") {
      fail(n, "'" + v + "' needs " + flag("use-precision-aware-optimizer") +
                  " (Megatron-Core's OptimizerConfig allows only fp32 without it); valid without it: fp32");
    }
  }
  if (main_grads == "bf16" && has("accumulate-allreduce-grads-in-fp32")) {
    fail("main-grads-dtype", "'bf16' with " + flag("accumulate-allreduce-grads-in-fp32") +
                                 ", which keeps the gradients in fp32 (arguments.py asserts); drop one");
  }
  if (precision_aware) {
    if (text("optimizer", "adam") != "adam") {
      fail("use-precision-aware-optimizer", "needs " + flag("optimizer") + " adam (Transformer Engine's FusedAdam; Megatron-Core asserts it)");
    }
    if (!has("use-distributed-optimizer") && !has("use-megatron-fsdp")) {
      fail("use-precision-aware-optimizer", "needs " + flag("use-distributed-optimizer") + " (\"only supported with distributed optimizer\")");
    }
    if (has("use-megatron-fsdp")) {
      note("use-precision-aware-optimizer", "Megatron-FSDP's optimizer states priced in fp32");
    } else {
      out.plan("use_precision_aware_optimizer", "true", at("use-precision-aware-optimizer"));
      for (const auto& [n, key] : {std::pair{"main-params-dtype", "main_params_dtype"}, std::pair{"exp-avg-dtype", "exp_avg_dtype"},
                                   std::pair{"exp-avg-sq-dtype", "exp_avg_sq_dtype"}}) {
        if (has(n)) out.plan(key, text(n, "fp32"), at(n));
      }
      if (has("no-store-param-remainders")) out.plan("store_param_remainders", "false", at("no-store-param-remainders"));
    }
  }
  // --main-grads-dtype bf16 keeps the buffer in bf16 as --grad-reduce-in-bf16
  // does: arguments.py turns accumulate_allreduce_grads_in_fp32 on under
  // bf16 only while main_grads_dtype is fp32.
  const bool fp32_grads =
      (precision != "fp16" && !has("grad-reduce-in-bf16") && main_grads == "fp32") || has("accumulate-allreduce-grads-in-fp32");
  out.plan("accumulate_allreduce_grads_in_fp32", fp32_grads ? "true" : "false",
           has("accumulate-allreduce-grads-in-fp32") ? at("accumulate-allreduce-grads-in-fp32")
           : has("grad-reduce-in-bf16")              ? at("grad-reduce-in-bf16")
           : main_grads == "bf16"                    ? at("main-grads-dtype")
                                                     : precision_from + " (Megatron-LM's gradient buffer)");
  // Whatever its type, Megatron-Core's DistributedDataParallel keeps every
  // gradient in its buffer (Note [Megatron's gradient buffer]).
  out.plan("megatron_grad_buffer", "true", file + " (Megatron-Core's DistributedDataParallel)");
  // Megatron-FSDP (--use-megatron-fsdp; megatron/core/distributed/fsdp):
  // data parallelism sharded as --data-parallel-sharding-strategy says
  // (arguments.py's default optim_grads_params): parameters, gradients and
  // optimizer states (priced as dtsim's FSDP FULL_SHARD, a unit a block,
  // which gathers ahead as Megatron-FSDP does), gradients and states
  // (ZeRO-2), the states alone (ZeRO-1), or none.
  if (has("use-megatron-fsdp")) {
    const std::string strategy = has("data-parallel-sharding-strategy")
                                     ? choice("data-parallel-sharding-strategy", {"no_shard", "optim", "optim_grads", "optim_grads_params"})
                                     : "optim_grads_params";
    const std::string from = has("data-parallel-sharding-strategy") ? at("data-parallel-sharding-strategy") : at("use-megatron-fsdp");
    // HSDP (--num-distributed-optimizer-instances > 1): sharded within an
    // instance, replicated across (dtsim's hybrid_shard shards within a
    // node: an NVLink domain of an NVL72, as the recipes size instances),
    // the optimizer state sharded across them too under
    // --outer-dp-sharding-strategy optim (Note [Hybrid sharding]).
    const bool hsdp = num("num-distributed-optimizer-instances", 1) > 1;
    // Megatron-FSDP's own buffers, priced as dtsim's sharding's.
    out.plan("megatron_grad_buffer", "false", from);
    if (strategy == "optim_grads_params") {
      out.plan("fsdp", hsdp ? "hybrid_shard" : "full_shard", hsdp ? at("num-distributed-optimizer-instances") : from);
      if (hsdp && has("outer-dp-sharding-strategy")) {
        out.plan("outer_dp_sharding_strategy", choice("outer-dp-sharding-strategy", {"no_shard", "optim"}), at("outer-dp-sharding-strategy"));
      }
      out.plan("zero_stage", "null", from);
      out.plan("overlap_param_gather", "false", from);
      // Its gradients reduce-scattered in their buffer's type: fp32 where
      // Megatron's gradient buffer is (dtsim's FSDP reduce_dtype).
      out.plan("accumulate_allreduce_grads_in_fp32", "false", from);
      out.plan("reduce_dtype", fp32_grads ? "fp32" : "param", from);
    } else {
      out.plan("zero_stage", strategy == "optim_grads" ? "2" : strategy == "optim" ? "1" : "0", from);
      if (hsdp) note("num-distributed-optimizer-instances", "HSDP priced only under " + flag("data-parallel-sharding-strategy") + " optim_grads_params");
    }
  } else {
    if (has("outer-dp-sharding-strategy")) note("outer-dp-sharding-strategy", "read only with " + flag("use-megatron-fsdp"));
    if (num("num-distributed-optimizer-instances", 1) > 1) {
      note("num-distributed-optimizer-instances", "the distributed optimizer's copies priced as one, sharded over all of data parallelism");
    }
  }
  if (has("ddp-bucket-size")) {
    // Elements of the gradient buffer, in its type.
    out.plan("bucket_mb", detail::format_number(static_cast<double>(num("ddp-bucket-size", 1)) * (fp32_grads ? 4 : 2) / 1e6),
             at("ddp-bucket-size"));
  }
  if (has("use-flash-attn")) out.plan("attention", "flash", at("use-flash-attn"));

  // Mixture-of-experts routing.
  if (has("moe-expert-capacity-factor")) out.plan("moe_capacity_factor", given.at("moe-expert-capacity-factor").text, at("moe-expert-capacity-factor"));
  if (has("moe-pad-expert-input-to-capacity")) out.plan("moe_pad", "true", at("moe-pad-expert-input-to-capacity"));
  // Random router logits (moe_utils.apply_random_logits): balanced in
  // expectation, which is what dtsim prices; validate routes round-robin.
  if (has("moe-router-force-load-balancing")) out.plan("moe_force_load_balance", "true", at("moe-router-force-load-balancing"));
  // The token dispatcher: allgather unless the flag says otherwise
  // (TransformerConfig.moe_token_dispatcher_type's default), so a MoE run
  // without the flag is priced as Megatron-Core runs it; flex without
  // DeepEP's kernels as alltoall.
  if (has("moe-token-dispatcher-type")) {
    const std::string d = choice("moe-token-dispatcher-type", {"allgather", "alltoall", "flex"});
    if (d == "flex" && has("moe-enable-deepep")) {
      out.plan("moe_dispatcher", "deepep", at("moe-enable-deepep"));
    } else if (d == "flex") {
      note("moe-token-dispatcher-type", "flex without --moe-enable-deepep priced as alltoall");
    } else {
      out.plan("moe_dispatcher", d, at("moe-token-dispatcher-type"));
    }
  } else if (has("num-experts")) {
    out.plan("moe_dispatcher", "allgather", at("num-experts") + " (Megatron-Core's default --moe-token-dispatcher-type)");
  }
  // --moe-layer-freq (moe_freq_type in arguments.py): N, one MoE layer in
  // N (layer i is one where i % N == 0), or a Python list expression of 0s
  // and 1s, one a layer ("([0]*3+[1]*58)": DeepSeek-V3's three dense layers
  // first). Dense layers first, then MoE, is the model's first_dense.
  int first_dense = 0;
  if (has("moe-layer-freq")) {
    const std::string f = text("moe-layer-freq", "1");
    std::vector<int> pattern;
    try {
      pattern = layer_pattern(f);
    } catch (const ConfigError& e) {
      fail("moe-layer-freq", e.what());
    }
    if (pattern.size() == 1 && f.find('[') == std::string::npos) {
      if (pattern[0] != 1) note("moe-layer-freq", "every layer priced as MoE");
    } else {
      const std::int64_t layers = num("num-layers", static_cast<std::int64_t>(pattern.size()));
      if (static_cast<std::int64_t>(pattern.size()) != layers) {
        fail("moe-layer-freq", "lists " + std::to_string(pattern.size()) + " layers where the model has " + std::to_string(layers) +
                                   " (Megatron asserts one entry a layer)");
      }
      const auto first_moe = std::find(pattern.begin(), pattern.end(), 1);
      if (std::find(first_moe, pattern.end(), 0) == pattern.end()) {
        first_dense = static_cast<int>(first_moe - pattern.begin());
      } else {
        note("moe-layer-freq", "dense layers after the first MoE one: every layer after the first dense ones priced as MoE");
        first_dense = static_cast<int>(first_moe - pattern.begin());
      }
    }
  }
  // Note [Expert-parallel overlap] (lowering/layer_stage.cpp).
  if (has("overlap-moe-expert-parallel-comm")) {
    out.plan("overlap_moe_expert_parallel_comm", "true", at("overlap-moe-expert-parallel-comm"));
  }
  if (has("delay-wgrad-compute")) note("delay-wgrad-compute", "the experts' weight gradients priced in their layer's backward");

  // The model, when the command line describes one.
  if ((has("num-layers") || hybrid) && has("hidden-size") && has("num-attention-heads")) {
    // A hybrid model is a llama (Note [Mamba-2] in models/src/llama.cpp).
    const bool llama = has("swiglu") || hybrid;
    const std::int64_t layers = hybrid ? static_cast<std::int64_t>(hybrid_pattern.size()) : num("num-layers", 1);
    const std::int64_t hidden = num("hidden-size", 1), heads = num("num-attention-heads", 1);
    if (hybrid && has("num-layers") && num("num-layers", 1) != layers) {
      note("num-layers", "the hybrid pattern's " + std::to_string(layers) + " layers are the model's, as Megatron takes them");
    }
    // arguments.py: ffn_hidden_size defaults to 4h, or int(4h x 2/3 / 64) x 64 with --swiglu.
    const std::int64_t ffn = has("ffn-hidden-size") ? num("ffn-hidden-size", 1)
                             : has("swiglu") ? static_cast<std::int64_t>(4.0 * static_cast<double>(hidden) * 2 / 3 / 64) * 64
                                     : 4 * hidden;
    const std::int64_t groups = has("group-query-attention") ? num("num-query-groups", 1) : heads;
    const std::int64_t max_pos = num("max-position-embeddings", num("seq-length", 0));
    const bool tied = !has("untie-embeddings-and-output-weights");
    const bool bias = !has("disable-bias-linear");
    // The vocabulary: the tokenizer's (GPT-2's BPE: 50,257; NullTokenizer:
    // --vocab-size + 1 for its end-of-document token) padded up to a multiple
    // of make_vocab_size_divisible_by (128) x tp.
    std::optional<std::int64_t> vocab;
    std::string vocab_from;
    const std::string tokenizer = text("tokenizer-type", "");
    if (has("padded-vocab-size")) {
      vocab = num("padded-vocab-size", 1);
      vocab_from = at("padded-vocab-size");
    } else {
      std::optional<std::int64_t> raw;
      if (has("vocab-size")) {
        raw = num("vocab-size", 1) + (tokenizer == "NullTokenizer" ? 1 : 0);
        vocab_from = at("vocab-size");
      } else if (tokenizer == "GPT2BPETokenizer") {
        raw = 50257;
        vocab_from = at("tokenizer-type");
      }
      if (raw) {
        // Both bounded first, so that the product and the rounding stay in range.
        for (const char* n : {"make-vocab-size-divisible-by", "tensor-model-parallel-size", "vocab-size"}) {
          if (num(n, 1) > (std::int64_t{1} << 30)) fail(n, text(n, "") + " is absurd; valid: 1 to " + std::to_string(std::int64_t{1} << 30));
        }
        const std::int64_t multiple = num("make-vocab-size-divisible-by", 128) * tp;
        vocab = (*raw + multiple - 1) / multiple * multiple;
      }
    }
    const std::string norm = has("normalization") ? choice("normalization", {"LayerNorm", "RMSNorm"}) : "LayerNorm";
    // --use-rotary-position-embeddings makes it rope (arguments.py).
    const std::string positions = has("use-rotary-position-embeddings") ? "rope"
                                  : has("position-embedding-type")      ? choice("position-embedding-type", {"learned_absolute", "rope", "none"})
                                                                        : "learned_absolute";
    if (llama && norm != "RMSNorm") note("normalization", "the llama family's is RMSNorm");
    if (!llama && norm != "LayerNorm") note("normalization", "the gpt family's is LayerNorm");
    if (llama && !hybrid && positions != "rope") note("position-embedding-type", "the llama family's is rope");
    // HybridModel passes the type to LanguageModelEmbedding: learned_absolute
    // (Megatron-LM's default) adds a table of positions, which dtsim's hybrids
    // do not have (Nemotron-H's scripts pass none).
    if (hybrid && positions == "learned_absolute") {
      note(has("position-embedding-type") ? "position-embedding-type" : hybrid_flag,
           "learned_absolute positions (Megatron-LM's default): their table of max positions x hidden is not modelled; "
           "Nemotron-H's launch scripts pass --position-embedding-type none");
    }
    if (!llama && positions != "learned_absolute") note("position-embedding-type", "the gpt family learns its positions");
    if (!llama && has("group-query-attention")) note("group-query-attention", "the gpt family has one key/value head per head; add " + flag("swiglu") + " for a llama");
    if (!llama && has("num-experts")) note("num-experts", "dtsim's experts are the llama family's; add " + flag("swiglu"));
    for (const char* n : {"experimental-attention-variant", "attention-output-gate"}) {
      if (!llama && has(n)) note(n, "Gated DeltaNet layers and gated outputs are the llama family's; add " + flag("swiglu"));
    }
    if (!llama && !bias) note("disable-bias-linear", "the gpt family has biases");
    // --kv-channels defaults to hidden / heads (arguments.py).
    const bool head_dim_default = !has("kv-channels") || num("kv-channels", 1) * heads == hidden;
    if (!llama && !head_dim_default) note("kv-channels", "the gpt family's heads are hidden / heads wide");

    // The built-in of the same shape, if there is one.
    const KnownShape* match = nullptr;
    for (const auto& k : kKnownShapes) {
      if (k.llama == llama && k.layers == layers && k.hidden == hidden && k.heads == heads && k.kv_heads == groups &&
          k.ffn == ffn && k.seq == max_pos && k.tied == tied && (!vocab || *vocab == k.vocab) && bias == !llama && !hybrid &&
          !has("num-experts") && head_dim_default && !has("add-qkv-bias") && !has("multi-latent-attention") && !has("qk-layernorm")) {
        match = &k;
      }
    }
    fc.model = match ? match->name : llama ? "llama-3-8b" : "gpt-1.7b";
    if (!match) {
      // Named after the launch script, or after its shape where the flags came inline.
      const std::string stem = a.model_name.empty() ? std::filesystem::path(file).stem().string() : a.model_name;
      const std::string name = stem.empty() || stem[0] == '-'
                                   ? std::string(llama ? "llama" : "gpt") + "-" + std::to_string(layers) + "l-" + std::to_string(hidden) + "h"
                                   : stem;
      out.model("name", "megatron-" + name, file);
    }
    if (!vocab) {
      std::int64_t kept = 51200;
      for (const auto& k : kKnownShapes) {
        if (k.name == *fc.model) kept = k.vocab;
      }
      fc.unmodelled.push_back((tokenizer.empty() ? std::string("the tokenizer's vocabulary") : flag("tokenizer-type") + a.value_sep + tokenizer) +
                              " (vocabulary not known from the flags; kept " + *fc.model + "'s " + std::to_string(kept) +
                              ": --set model.vocab=N)");
    }
    const std::string from_layers = hybrid ? at(hybrid_flag) : at("num-layers");
    out.model("family", llama ? "llama" : "gpt", has("swiglu") ? at("swiglu") : hybrid ? at(hybrid_flag) : file + " (no --swiglu)");
    out.model("layers", std::to_string(layers), from_layers);
    // Quoted: a pattern may start with '*' or '-', which YAML would read as an alias or a list.
    if (hybrid) out.model("hybrid_pattern", "\"" + hybrid_pattern + "\"", at(hybrid_flag));
    out.model("hidden", std::to_string(hidden), at("hidden-size"));
    out.model("heads", std::to_string(heads), at("num-attention-heads"));
    out.model(llama ? "intermediate" : "ffn_hidden", std::to_string(ffn), has("ffn-hidden-size") ? at("ffn-hidden-size") : at("hidden-size"));
    if (max_pos > 0) out.model("seq_len", std::to_string(max_pos), has("max-position-embeddings") ? at("max-position-embeddings") : at("seq-length"));
    if (vocab) out.model("vocab", std::to_string(*vocab), vocab_from);
    out.model("tied_head", tied ? "true" : "false", tied ? file + " (embeddings tied by default)" : at("untie-embeddings-and-output-weights"));
    if (llama) {
      out.model("kv_heads", std::to_string(groups), has("group-query-attention") ? at("group-query-attention") : at("num-attention-heads"));
      out.model("head_dim", head_dim_default ? "null" : given.at("kv-channels").text, head_dim_default ? file : at("kv-channels"));
      const std::string bias_from = bias ? file + " (no --disable-bias-linear)" : at("disable-bias-linear");
      out.model("qkv_bias", bias || has("add-qkv-bias") ? "true" : "false", has("add-qkv-bias") ? at("add-qkv-bias") : bias_from);
      out.model("o_bias", bias ? "true" : "false", bias_from);
      out.model("mlp_bias", bias ? "true" : "false", bias_from);
      // --qk-layernorm: RMSNorms on each head's query and key; under MLA the
      // norms of its latents, which the latent attention has anyway.
      if (has("qk-layernorm") && !has("multi-latent-attention")) out.model("qk_norm", "true", at("qk-layernorm"));
      // --apply-layernorm-1p (layernorm_zero_centered_gamma): RMSNorms that
      // scale by 1 + weight, Qwen3-Next's and Qwen3.5's (Note [Gated DeltaNet]
      // in models/src/llama.cpp); a zero-centered LayerNorm costs as LayerNorm.
      if (has("apply-layernorm-1p") && norm == "RMSNorm") out.model("zero_centered_norms", "true", at("apply-layernorm-1p"));
      const bool dsv4 = has("experimental-attention-variant") && text("experimental-attention-variant", "") == "dsv4_hybrid";
      if (dsv4) {
        // Note [DeepSeek-V4] (models/src/llama.cpp): Megatron-Core's
        // dsv4_hybrid attention, its geometry in the MLA flags (the head's
        // width --v-head-dim, its rotary part --qk-pos-emb-head-dim, the
        // query latent --q-lora-rank), the ratios a layer, the window, the
        // grouped output; the indexer's shape (no default) where a layer
        // has ratio 4; the fused kernels unless --dsa-kernel-backend none
        // (or the deprecated --no-dsa-kernel-fusion) picks the unfused path.
        const std::string variant = at("experimental-attention-variant");
        if (!has("multi-latent-attention")) {
          fail("experimental-attention-variant", "dsv4_hybrid needs " + flag("multi-latent-attention") + " (TransformerConfig asserts it)");
        }
        if (!has("csa-compress-ratios")) fail("experimental-attention-variant", "dsv4_hybrid needs " + flag("csa-compress-ratios") + " (TransformerConfig asserts it)");
        // arguments.py's compress_ratios_type evaluates a list expression; a
        // Megatron-Bridge dump's list arrives as its words.
        const std::string given_ratios = text("csa-compress-ratios", "");
        std::vector<std::int64_t> ratios;
        const std::string valid = "valid: a list of 0, 4 and 128, one a layer, like [0,0,4,128] or \"([0]+[4,128]*2)*3\"";
        // A Megatron-Bridge dump's words read as the list they were.
        std::string expression = given_ratios;
        if (expression.find_first_of("[(") == std::string::npos) {
          if (expression.find(',') == std::string::npos) std::replace(expression.begin(), expression.end(), ' ', ',');
          expression = "[" + expression + "]";
        }
        try {
          ratios = list_expression(expression, valid);
        } catch (const ConfigError& e) {
          fail("csa-compress-ratios", e.what());
        }
        std::string list;
        for (const std::int64_t r : ratios) {
          if (r != 0 && r != 4 && r != 128) fail("csa-compress-ratios", "has " + std::to_string(r) + "; valid: 0, 4 or 128 (TransformerConfig asserts it)");
          list += (list.empty() ? "" : ", ") + std::to_string(r);
        }
        // TransformerConfig asserts a ratio for each layer and each MTP depth.
        const std::int64_t wanted = num("num-layers", 0) + num("mtp-num-layers", 0);
        if (static_cast<std::int64_t>(ratios.size()) < wanted) {
          fail("csa-compress-ratios", std::to_string(ratios.size()) + " ratios; TransformerConfig asserts at least num_layers + mtp_num_layers = " +
                                          std::to_string(wanted));
        }
        out.model("compress_ratios", "[" + list + "]", at("csa-compress-ratios"));
        out.model("kv_heads", "1", variant);
        out.model("head_dim", std::to_string(num("v-head-dim", 128)), has("v-head-dim") ? at("v-head-dim") : variant);
        out.model("qk_rope_dim", std::to_string(num("qk-pos-emb-head-dim", 64)), has("qk-pos-emb-head-dim") ? at("qk-pos-emb-head-dim") : variant);
        if (!has("q-lora-rank")) fail("experimental-attention-variant", "dsv4_hybrid needs " + flag("q-lora-rank") + " (its query comes through a latent)");
        out.model("q_lora_rank", text("q-lora-rank", ""), at("q-lora-rank"));
        out.model("sliding_window", std::to_string(num("csa-window-size", 128)), has("csa-window-size") ? at("csa-window-size") : variant);
        out.model("o_groups", std::to_string(num("o-groups", 8)), has("o-groups") ? at("o-groups") : variant);
        out.model("o_lora_rank", std::to_string(num("o-lora-rank", 1024)), has("o-lora-rank") ? at("o-lora-rank") : variant);
        if (std::find(ratios.begin(), ratios.end(), 4) != ratios.end()) {
          for (const auto& [key, name] : {std::pair{"index_heads", "dsa-indexer-n-heads"}, std::pair{"index_head_dim", "dsa-indexer-head-dim"},
                                          std::pair{"index_topk", "dsa-indexer-topk"}}) {
            if (!has(name)) fail("csa-compress-ratios", std::string("has ratio-4 layers, whose indexer needs ") + a.spelled(name) + " (TransformerConfig has no default)");
            out.model(key, given.at(name).text, at(name));
          }
          const double coeff = has("dsa-indexer-loss-coeff") ? std::stod(given.at("dsa-indexer-loss-coeff").text) : 0.0;
          out.model("index_loss", coeff > 0 ? (has("dsa-indexer-use-sparse-loss") ? "sparse" : "dense") : "none",
                    has("dsa-indexer-loss-coeff") ? at("dsa-indexer-loss-coeff") : variant);
        }
        // The kernels: TransformerConfig maps the deprecated
        // apply_dsa_kernel_fusion (Bridge's field; --no-dsa-kernel-fusion
        // its false) to cudnn or none over a backend left at none, and
        // raises where they conflict; Megatron-LM resolves an omitted
        // backend to cudnn for dsv4_hybrid; tilelang it refuses.
        const std::string given_backend = has("dsa-kernel-backend") ? choice("dsa-kernel-backend", {"none", "tilelang", "cudnn"}) : "";
        std::string legacy, legacy_from;
        if (has("no-dsa-kernel-fusion")) {
          legacy = "none", legacy_from = "no-dsa-kernel-fusion";
        } else if (has("apply-dsa-kernel-fusion")) {
          const std::string v = text("apply-dsa-kernel-fusion", "");
          legacy = v == "true" || v == "True" ? "cudnn" : "none", legacy_from = "apply-dsa-kernel-fusion";
        }
        std::string backend = given_backend.empty() ? "cudnn" : given_backend;
        if (!legacy.empty()) {
          if (!given_backend.empty() && given_backend != "none" && given_backend != legacy) {
            fail("dsa-kernel-backend", "'" + given_backend + "' conflicts with " + flag(legacy_from) + " (TransformerConfig raises: \"Conflicting "
                                           "DSA kernel controls\"); drop one");
          }
          backend = legacy;
        }
        const std::string backend_from = !legacy.empty() ? legacy_from : "dsa-kernel-backend";
        if (backend == "tilelang") {
          fail(backend_from, "tilelang with dsv4_hybrid: TransformerConfig raises (\"dsv4_hybrid does not support "
                             "dsa_kernel_backend='tilelang'\"); valid: cudnn");
        }
        if (backend == "none") {
          fail(backend_from, "dsv4_hybrid's unfused attention (every query's keys gathered in fp32) is not modelled; valid: cudnn "
                             "(what Megatron-LM resolves for dsv4_hybrid when the flag is omitted)");
        }
        if (has("csa-dense-mode")) note("csa-dense-mode", "the indexer off, each ratio-4 layer attending every entry: priced as its indexer's top-k");
      } else if (has("multi-latent-attention")) {
        // Multi-head latent attention (Note [Multi-head latent attention] in
        // models/src/llama.cpp), with arguments.py's defaults: no query
        // compression (--q-lora-rank None), --kv-lora-rank 32,
        // --qk-head-dim 128, --qk-pos-emb-head-dim 64, --v-head-dim 128.
        if (has("group-query-attention")) fail("multi-latent-attention", "given with " + flag("group-query-attention") + "; Megatron refuses both");
        const std::string mla = at("multi-latent-attention");
        out.model("kv_heads", std::to_string(heads), mla);
        out.model("head_dim", "null", mla);
        out.model("q_lora_rank", has("q-lora-rank") ? text("q-lora-rank", "") : "0", has("q-lora-rank") ? at("q-lora-rank") : mla);
        for (const auto& [key, name, fallback] : {std::tuple{"kv_lora_rank", "kv-lora-rank", 32}, std::tuple{"qk_nope_dim", "qk-head-dim", 128},
                                                   std::tuple{"qk_rope_dim", "qk-pos-emb-head-dim", 64}, std::tuple{"v_head_dim", "v-head-dim", 128}}) {
          out.model(key, std::to_string(num(name, fallback)), has(name) ? at(name) : mla);
        }
      } else {
        for (const char* n : {"q-lora-rank", "kv-lora-rank", "qk-head-dim", "qk-pos-emb-head-dim", "v-head-dim"}) {
          if (has(n)) note(n, "read only with " + flag("multi-latent-attention"));
        }
      }
      // Note [Gated DeltaNet] (models/src/llama.cpp): Megatron-Core's
      // GatedDeltaNet layers (--experimental-attention-variant gdn, its
      // deprecated alias gated_delta_net), --linear-attention-freq N of them
      // N - 1 linear attention layers for each attention one, and
      // TransformerConfig's linear_* defaults; Qwen3-Next's gated output.
      const char* const kLinear[] = {"linear-attention-freq", "linear-conv-kernel-dim", "linear-key-head-dim", "linear-value-head-dim",
                                     "linear-num-key-heads", "linear-num-value-heads"};
      // TransformerConfig's defaults of the attention variants' fields: a
      // Megatron-Bridge dump holds every field, so one at its default says
      // nothing; `unread` is a given flag that differs (as a number where it is one).
      const std::map<std::string, std::string> variant_defaults{
          {"dsa-indexer-topk-freq", "1"}, {"dsa-indexer-skip-topk-offset", "0"}, {"dsa-kernel-backend", "none"},
          {"dsa-indexer-loss-coeff", "0"}, {"linear-conv-kernel-dim", "4"}, {"linear-key-head-dim", "128"},
          {"linear-value-head-dim", "128"}, {"linear-num-key-heads", "16"}, {"linear-num-value-heads", "32"}};
      const auto unread = [&](const char* n) {
        if (!has(n)) return false;
        const auto d = variant_defaults.find(n);
        if (d == variant_defaults.end()) return true;
        const std::string v = text(n, "");
        char* end = nullptr;
        const double x = std::strtod(v.c_str(), &end);
        if (end != v.c_str() && *end == '\0') return x != std::strtod(d->second.c_str(), nullptr);
        return v != d->second;
      };
      const char* const kDsa[] = {"dsa-indexer-n-heads", "dsa-indexer-head-dim", "dsa-indexer-topk", "dsa-indexer-topk-freq",
                                  "dsa-indexer-skip-topk-offset", "dsa-indexer-loss-coeff", "dsa-indexer-use-sparse-loss", "dsa-kernel-backend"};
      const bool dsa = has("experimental-attention-variant") && text("experimental-attention-variant", "") == "dsa";
      if (dsv4) {
        // Read with the variant above.
      } else if (dsa) {
        // Note [DeepSeek Sparse Attention] (models/src/llama.cpp):
        // Megatron-Core's DSAttention within its absorbed MLA. The
        // indexer's shape has no default (TransformerConfig's None), the
        // loss trains the indexer only with a coefficient, and the kernels
        // are dsa_kernel_backend's (none: masked dense attention).
        const std::string variant = at("experimental-attention-variant");
        if (!has("multi-latent-attention")) fail("experimental-attention-variant", "dsa needs " + flag("multi-latent-attention") + " (Megatron-Core asserts it)");
        for (const auto& [key, name] : {std::pair{"index_heads", "dsa-indexer-n-heads"}, std::pair{"index_head_dim", "dsa-indexer-head-dim"},
                                        std::pair{"index_topk", "dsa-indexer-topk"}}) {
          if (!has(name)) fail("experimental-attention-variant", std::string("dsa needs ") + a.spelled(name) + " (TransformerConfig has no default)");
          out.model(key, given.at(name).text, at(name));
        }
        const double coeff = has("dsa-indexer-loss-coeff") ? std::stod(given.at("dsa-indexer-loss-coeff").text) : 0.0;
        const bool sparse_loss = has("dsa-indexer-use-sparse-loss");
        out.model("index_loss", coeff > 0 ? (sparse_loss ? "sparse" : "dense") : "none",
                  has("dsa-indexer-loss-coeff") ? at("dsa-indexer-loss-coeff") : variant);
        if (sparse_loss && coeff <= 0) note("dsa-indexer-use-sparse-loss", "no loss without " + flag("dsa-indexer-loss-coeff") + " above 0");
        const std::string backend = has("dsa-kernel-backend") ? choice("dsa-kernel-backend", {"none", "tilelang", "cudnn"}) : "none";
        out.model("dsa_kernels", backend == "none" ? "dense" : "sparse", has("dsa-kernel-backend") ? at("dsa-kernel-backend") : variant);
        if (has("cp-comm-type") && text("cp-comm-type", "") != "allgather" && num("context-parallel-size", 1) > 1) {
          fail("cp-comm-type", "'" + text("cp-comm-type", "") + "' with " + flag("experimental-attention-variant") +
                                   " dsa; valid: allgather (Megatron-Core's DSAttention asserts it)");
        }
        // dsa.py's is_dsa_skip_topk_layer: layer L (from 1) reuses the top-k
        // where max(L - max(offset, 1), 0) % freq != 0.
        const std::int64_t freq = num("dsa-indexer-topk-freq", 1), offset = std::max<std::int64_t>(num("dsa-indexer-skip-topk-offset", 0), 1);
        if (freq < 1) fail("dsa-indexer-topk-freq", std::to_string(freq) + "; valid: 1 or more (Megatron-Core's dsa.py)");
        if (freq > 1) {
          if (!has("num-layers")) fail("dsa-indexer-topk-freq", "needs " + flag("num-layers") + " to say which layers run the indexer");
          const std::int64_t layers = num("num-layers", 1);
          if (layers > 10000) fail("num-layers", std::to_string(layers) + "; valid: 1 to 10000");
          std::string pattern;
          for (std::int64_t l = 1; l <= layers; ++l) pattern += std::max<std::int64_t>(l - offset, 0) % freq != 0 ? 'S' : 'F';
          out.model("indexer_layers", pattern, at("dsa-indexer-topk-freq"));
        }
      } else {
        for (const char* n : kDsa) {
          if (unread(n)) note(n, "read only with " + flag("experimental-attention-variant") + " dsa");
        }
      }
      if (has("experimental-attention-variant") && !dsa && !dsv4) {
        const std::string variant = choice("experimental-attention-variant", {"gdn", "gated_delta_net", "dsa", "dsv4_hybrid"});
        if (!has("linear-attention-freq")) {
          fail("experimental-attention-variant", variant + " needs " + flag("linear-attention-freq") + " (TransformerConfig asserts it)");
        }
        const std::string freq = text("linear-attention-freq", "");
        if (freq.empty() || freq.size() > 6 || !std::all_of(freq.begin(), freq.end(), [](char ch) { return ch >= '0' && ch <= '9'; }) ||
            std::stoll(freq) < 1) {
          fail("linear-attention-freq", "'" + freq + "'; dtsim models an integer N from 1 to 999999 (N - 1 linear attention layers, then one attention layer)");
        }
        out.model("full_attention_interval", freq, at("linear-attention-freq"));
        for (const auto& [key, name, fallback] : {std::tuple{"linear_conv_kernel", "linear-conv-kernel-dim", 4},
                                                   std::tuple{"linear_key_dim", "linear-key-head-dim", 128},
                                                   std::tuple{"linear_value_dim", "linear-value-head-dim", 128},
                                                   std::tuple{"linear_key_heads", "linear-num-key-heads", 16},
                                                   std::tuple{"linear_value_heads", "linear-num-value-heads", 32}}) {
          out.model(key, std::to_string(num(name, fallback)), has(name) ? at(name) : at("experimental-attention-variant"));
        }
      } else {
        for (const char* n : kLinear) {
          if (unread(n)) note(n, "read only with " + flag("experimental-attention-variant") + " gdn; a custom --spec that builds them needs it too");
        }
      }
      if (has("attention-output-gate")) out.model("attn_output_gate", "true", at("attention-output-gate"));
      // Note [Hyper-connections] (models/src/llama.cpp): TransformerConfig's
      // enable_hyper_connections with its streams (4) and Sinkhorn
      // iterations (20). Hash-routed layers (--moe-n-hash-layers) are priced
      // as routed ones (Note [DeepSeek-V4]).
      if (has("enable-hyper-connections")) {
        const std::string hc = at("enable-hyper-connections");
        out.model("hc_mult", std::to_string(num("num-residual-streams", 4)), has("num-residual-streams") ? at("num-residual-streams") : hc);
        out.model("hc_sinkhorn_iters", std::to_string(num("mhc-sinkhorn-iterations", 20)), has("mhc-sinkhorn-iterations") ? at("mhc-sinkhorn-iterations") : hc);
      } else {
        for (const char* n : {"num-residual-streams", "mhc-sinkhorn-iterations"}) {
          if (has(n) && text(n, "") != (std::string(n) == "num-residual-streams" ? "4" : "20")) note(n, "read only with " + flag("enable-hyper-connections"));
        }
      }
      if (!dsv4) {
        for (const char* n : {"csa-compress-ratios", "csa-window-size", "o-groups", "o-lora-rank", "no-dsa-kernel-fusion"}) {
          if (has(n) && !(std::string(n) == "csa-window-size" && text(n, "") == "128") && !(std::string(n) == "o-groups" && text(n, "") == "8") &&
              !(std::string(n) == "o-lora-rank" && text(n, "") == "1024")) {
            note(n, "read only with " + flag("experimental-attention-variant") + " dsv4_hybrid");
          }
        }
      }
      // Note [Mamba-2] (models/src/llama.cpp): TransformerConfig's mamba_*
      // (state 128, heads of 64, 8 groups; heads 2 hidden / head dim where
      // --mamba-num-heads is not given), squared ReLU where asked, and
      // rotary positions only under rope (learned ones are said above).
      const char* const kMamba[] = {"mamba-state-dim", "mamba-head-dim", "mamba-num-groups", "mamba-num-heads"};
      if (hybrid) {
        if (has("experimental-attention-variant")) {
          fail("experimental-attention-variant", "given with " + flag(hybrid_flag) + "; a hybrid model's Gated DeltaNet layers are its G letters, "
                                                 "which dtsim does not model");
        }
        if (hybrid_pattern.find('M') != std::string::npos) {
          for (const auto& [key, name, fallback] : {std::tuple{"mamba_state", "mamba-state-dim", 128}, std::tuple{"mamba_head_dim", "mamba-head-dim", 64},
                                                     std::tuple{"mamba_groups", "mamba-num-groups", 8}}) {
            out.model(key, std::to_string(num(name, fallback)), has(name) ? at(name) : at(hybrid_flag));
          }
          if (has("mamba-num-heads")) out.model("mamba_heads", given.at("mamba-num-heads").text, at("mamba-num-heads"));
        } else {
          for (const char* n : kMamba) {
            if (has(n)) note(n, "the pattern has no Mamba layer (M)");
          }
        }
        if (positions != "rope") out.model("rotary", "false", has("position-embedding-type") ? at("position-embedding-type") : at(hybrid_flag));
        if (has("squared-relu")) {
          if (has("swiglu")) fail("squared-relu", "given with " + flag("swiglu") + "; Megatron refuses both");
          out.model("squared_relu", "true", at("squared-relu"));
        } else if (!has("swiglu")) {
          // Megatron-LM's default activation, GELU, ungated: the same two GEMMs.
          out.model("squared_relu", "true", at(hybrid_flag));
          note(hybrid_flag, "the MLP's default GELU priced as squared ReLU: the same two GEMMs and one pass");
        }
      } else {
        for (const char* n : kMamba) {
          if (has(n)) note(n, "read only with " + flag("hybrid-layer-pattern"));
        }
        if (has("squared-relu")) note("squared-relu", "read only with " + flag("hybrid-layer-pattern") + "; the llama family's MLP is SwiGLU");
      }
      if (has("moe-shared-expert-gate")) {
        if (has("moe-shared-expert-intermediate-size")) {
          out.model("shared_expert_gate", "true", at("moe-shared-expert-gate"));
        } else {
          note("moe-shared-expert-gate", "no shared expert (" + flag("moe-shared-expert-intermediate-size") + ") to gate");
        }
      }
      if (has("num-experts")) {
        if (first_dense > 0 && hybrid) {
          // The hybrid stack places its MoE layers by the pattern's E letters.
          note("moe-layer-freq", "a hybrid model's MoE layers are its pattern's E letters");
        } else if (first_dense > 0) {
          out.model("first_dense", std::to_string(first_dense), at("moe-layer-freq"));
        }
        // Group-limited routing (--moe-router-num-groups groups of experts,
        // a token's top-k drawn from --moe-router-group-topk of them): with
        // a group a node, as DeepSeek-V3 places them, the model's route_nodes.
        if (has("moe-router-group-topk") && num("moe-router-num-groups", 1) > 1) {
          const std::int64_t groups = num("moe-router-num-groups", 1), experts = num("num-experts", 1);
          if (experts % groups != 0) {
            fail("moe-router-num-groups", std::to_string(groups) + " does not divide the " + std::to_string(experts) + " experts");
          }
          if (num("moe-router-group-topk", 1) > groups) {
            fail("moe-router-group-topk", text("moe-router-group-topk", "") + " exceeds the " + std::to_string(groups) + " groups");
          }
          out.model("route_nodes", text("moe-router-group-topk", ""), at("moe-router-group-topk"));
        }
        out.model("experts", given.at("num-experts").text, at("num-experts"));
        out.model("top_k", std::to_string(num("moe-router-topk", 2)), has("moe-router-topk") ? at("moe-router-topk") : at("num-experts"));
        out.model("expert_intermediate", std::to_string(num("moe-ffn-hidden-size", ffn)),
                  has("moe-ffn-hidden-size") ? at("moe-ffn-hidden-size") : at("num-experts"));
        if (has("moe-shared-expert-intermediate-size")) {
          out.model("shared_intermediate", given.at("moe-shared-expert-intermediate-size").text, at("moe-shared-expert-intermediate-size"));
        }
        // Note [Latent MoE] (models/src/llama.cpp).
        if (has("moe-latent-size")) out.model("moe_latent", given.at("moe-latent-size").text, at("moe-latent-size"));
      } else {
        out.model("experts", "0", file + " (no --num-experts)");
        if (has("moe-latent-size")) note("moe-latent-size", "no experts (" + flag("num-experts") + ") to project for");
      }
    }
  } else {
    for (const char* n : {"num-layers", "hidden-size", "num-attention-heads"}) {
      if (has(n)) note(n, "the model needs " + flag("num-layers") + ", " + flag("hidden-size") + " and " + flag("num-attention-heads") + "; pass --model");
    }
  }

  // Note [Multi-token prediction] (models/src/llama.cpp): the depths
  // trained beside the model, the Llama family's.
  if (mtp_depths > 0) {
    // arguments.py infers --mtp-num-layers from the pattern's depths, and
    // uses them where the flag says otherwise.
    if (has("mtp-num-layers") && num("mtp-num-layers", 0) != mtp_depths) {
      note("mtp-num-layers", "conflicts with the " + std::to_string(mtp_depths) + " depths of " + flag(hybrid_flag) + "; Megatron uses the pattern's");
    }
    const std::string want = hybrid_pattern.find('E') != std::string::npos ? "*E" : "*-";
    if (mtp_pattern != want) {
      fail(hybrid_flag, "a multi-token prediction depth of '" + mtp_pattern + "' where the model's " +
                            (want == "*E" ? "MLPs are experts" : "MLPs are dense") + "; dtsim's depth is '" + want + "'");
    }
    out.model("mtp_layers", std::to_string(mtp_depths), at(hybrid_flag));
  } else if (has("mtp-num-layers")) {
    if (hybrid) {
      fail("mtp-num-layers", "given with " + flag(hybrid_flag) + " but the pattern has no multi-token prediction depths ('/' and its layers, e.g. /*E)");
    }
    if (has("num-layers") && has("hidden-size") && has("num-attention-heads") && !has("swiglu")) {
      note("mtp-num-layers", "multi-token prediction is the llama family's; add " + flag("swiglu"));
    } else {
      out.model("mtp_layers", given.at("mtp-num-layers").text, at("mtp-num-layers"));
    }
  }
  if (has("mtp-use-repeated-layer")) {
    if (mtp_depths > 0 || has("mtp-num-layers")) {
      out.model("mtp_repeated", "true", at("mtp-use-repeated-layer"));
    } else {
      note("mtp-use-repeated-layer", "no multi-token prediction depths to repeat");
    }
  }
  for (const auto& u : a.unknown) fc.unmodelled.push_back(u);
  fc.plan = pp > 1 ? "megatron-3d" : tp > 1 ? "megatron-tp" : "ddp";
  out.finish();
  return fc;
}

}  // namespace detail

FrameworkConfig read_megatron_args(const std::string& path) {
  return parse_megatron_args(detail::read_config_text(path), path);
}

}  // namespace dtsim::sim
