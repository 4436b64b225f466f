// What the framework importers share, FSDP's ShardingStrategy names, and
// telling a framework's config from a dtsim plan.
//
// Note [Framework configs]
// A DeepSpeed JSON, a Megatron-LM command line and a torchtitan TOML each
// describe a whole plan, so an importer gives a complete one: the shipped
// plan nearest to it (for its name and description) and an override for
// every plan key, either the framework's value, mapped onto dtsim's key, or
// "null", which resets a key the starting plan set to dtsim's default (a
// ConfigMap treats a null value as absent). Values the framework defaults
// differently from dtsim are written out with the framework's default
// (DeepSpeed's 5e8-element buckets and overlap_comm, Megatron's unoverlapped
// gradient reduction). The overrides go before the user's --set, so the user
// has the last word; each carries "file:line (key)" as its origin, so a
// problem resolve() finds later (a train_batch_size that dp does not divide)
// names the line of the framework's file. A knob read that dtsim has no key
// for, or whose value dtsim does not model, goes to `unmodelled` as written,
// for one warning line; knobs that change neither time nor memory (learning
// rates, paths, logging) are skipped on purpose, and any knob the importer
// does not know is listed rather than dropped.
#include "dtsim/sim/framework_config.hpp"

#include <algorithm>
#include <cctype>
#include <cmath>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <sstream>

#include "dtsim/sim/error.hpp"
#include "framework_common.hpp"

namespace dtsim::sim {
namespace detail {

std::string read_config_text(const std::string& path) {
  std::error_code ec;
  if (!std::filesystem::exists(path, ec)) throw IoError(path + ": no such file");
  if (std::filesystem::is_directory(path, ec)) throw IoError(path + ": is a directory, not a file");
  const std::uintmax_t size = std::filesystem::file_size(path, ec);
  if (!ec && size > kMaxConfigBytes) {
    throw ConfigError(path + ": " + std::to_string(size) + " bytes, larger than a config may be (limit " +
                      std::to_string(kMaxConfigBytes >> 20) + " MiB)");
  }
  // Read at most one byte past the limit: a device or a pipe (/dev/zero)
  // has no size to check first and may never end.
  std::ifstream in(path, std::ios::binary);
  std::string text;
  char buf[65536];
  while (in && text.size() <= kMaxConfigBytes) {
    in.read(buf, sizeof buf);
    text.append(buf, static_cast<std::size_t>(in.gcount()));
  }
  if (in.bad()) throw IoError(path + ": cannot be read");
  if (text.size() > kMaxConfigBytes) {
    throw ConfigError(path + ": larger than a config may be (limit " + std::to_string(kMaxConfigBytes >> 20) + " MiB)");
  }
  if (text.find('\0') != std::string::npos) throw ConfigError(path + ": a binary file (it holds NUL bytes), not a config's text");
  return text;
}

std::string YamlFields::where(const YAML::Node& n) const {
  return file_ + (n && n.Mark().line >= 0 ? ":" + std::to_string(n.Mark().line + 1) : std::string());
}

void YamlFields::fail(const YAML::Node& n, const std::string& key, const std::string& message) const {
  throw ConfigError(where(n) + ": " + key + ": " + message);
}

std::string YamlFields::word(const YAML::Node& n, const std::string& key) const {
  if (!n.IsScalar()) fail(n, key, "expected a word, got a " + std::string(n.IsMap() ? "mapping" : "list"));
  return n.Scalar();
}

std::string YamlFields::positive(const YAML::Node& n, const std::string& key) const {
  const std::string s = word(n, key);
  const bool digits = !s.empty() && s.size() <= 12 && std::all_of(s.begin(), s.end(), [](char c) { return c >= '0' && c <= '9'; });
  if (!digits || std::stoll(s) < 1) fail(n, key, "'" + s + "'; expected an integer of at least 1");
  return s;
}

bool YamlFields::flag(const YAML::Node& n, const std::string& key, bool fallback) const {
  if (null(n)) return fallback;
  std::string s = word(n, key);
  for (char& ch : s) ch = static_cast<char>(std::tolower(static_cast<unsigned char>(ch)));
  if (s == "true" || s == "yes" || s == "on") return true;
  if (s == "false" || s == "no" || s == "off") return false;
  fail(n, key, "'" + n.Scalar() + "'; expected true or false");
}

void OverrideList::add(const std::string& section, const std::string& key, const std::string& value,
                       const std::string& from) {
  const std::string full = section + "." + key;
  if (set_.insert(full).second) {
    fc_.overrides.push_back(Override{section, key, value, from});
    return;
  }
  for (auto& o : fc_.overrides) {
    if (o.section == section && o.path == key) {
      o.value = value;
      o.from = from;
    }
  }
}

void OverrideList::plan(const std::string& key, const std::string& value, const std::string& from) {
  add("plan", key, value, from);
}

void OverrideList::model(const std::string& key, const std::string& value, const std::string& from) {
  add("model", key, value, from);
}

void OverrideList::finish() {
  // Every key a PlanSpec reads (config_io.cpp, read_plan) but its name.
  static const char* const kPlanKeys[] = {
      "dp", "tp", "pp", "cp", "cp_comm", "attention", "ep", "etp", "moe_imbalance", "moe_force_load_balance",
      "moe_capacity_factor", "moe_pad", "moe_dispatcher", "overlap_moe_expert_parallel_comm", "moe_experts", "loss_parallel", "runtime", "kernels", "model_parallel", "schedule", "virtual_stages", "stage_layers", "sequence_parallel",
      "sync_batchnorm",
      "tp_comm_overlap", "tp_comm_overlap_cfg", "placement", "pipeline_layout", "pipeline_split", "account_for_embedding_in_pipeline_split",
      "account_for_loss_in_pipeline_split", "num_layers_in_first_pipeline_stage", "num_layers_in_last_pipeline_stage", "micro_batch", "grad_accum", "micro_batches", "global_batch", "seq_len", "loss_chunks", "loss_kernel",
      "precision", "fp8_param_gather", "fp8_recipe", "optimizer", "sgd_momentum", "zero_stage", "fsdp", "limit_all_gathers", "fsdp_wrap", "fsdp_version", "outer_dp_sharding_strategy", "reduce_dtype", "stage3_prefetch_bucket_size",
      "stage3_max_live_parameters", "stage3_max_reuse_distance", "stage3_param_persistence_threshold", "z3_leaf_layers",
      "offload_optimizer", "offload_params", "recompute", "recompute_modules", "recompute_method", "recompute_num_layers", "bucket_mb", "reduce_bucket_size", "overlap", "overlap_comm", "contiguous_gradients", "reduce_scatter", "overlap_param_gather", "accumulate_allreduce_grads_in_fp32", "megatron_grad_buffer", "fp32_grad_accumulator", "master_weights", "optim_bits", "optimizer_in_backward", "use_precision_aware_optimizer", "main_params_dtype", "exp_avg_dtype", "exp_avg_sq_dtype", "store_param_remainders", "deallocate_pipeline_outputs", "cpu_offloading_num_layers", "enable_activation_offloading", "fine_grained_activation_offloading", "offload_modules", "min_offloaded_tensor_size", "activation_offload_fraction", "delta_offload_bytes_across_pp_ranks", "fine_grained_offloading_max_inflight_offloads", "first_last_layers_bf16", "num_layers_at_start_in_bf16",
      "num_layers_at_end_in_bf16", "partition_activations", "cpu_checkpointing"};
  for (const char* k : kPlanKeys) {
    if (!has_plan(k)) plan(k, "null", fc_.file);
  }
}

namespace {

/// HuggingFace's optimizer names (transformers' OptimizerNames) that are
/// torch.optim's AdamW with the usual states.
constexpr const char* kHfAdamw[] = {"adamw_torch", "adamw_torch_fused", "adamw_apex_fused", "adamw_hf", "adamw_torch_xla",
                                    "adamw_torch_npu_fused", "adamw_anyprecision", "optimi_adamw"};
/// Those that are AdamW with block-wise 8-bit states (transformers'
/// get_optimizer_cls_and_kwargs: bitsandbytes' AdamW at optim_bits 8, and
/// torchao's AdamW8bit).
constexpr const char* kHfAdamw8bit[] = {"adamw_bnb_8bit", "adamw_8bit", "paged_adamw_8bit", "adamw_torch_8bit"};

bool listed(const std::string& name, const char* const* begin, const char* const* end) {
  return std::find_if(begin, end, [&](const char* k) { return name == k; }) != end;
}

}  // namespace

void hf_optimizer(OverrideList& out, FrameworkConfig& fc, const std::string& key, const std::string& name,
                  const std::string& from, bool host_adam) {
  if (name == "sgd") {
    out.plan("optimizer", "sgd", from);
    return;
  }
  out.plan("optimizer", "adamw", from);
  if (listed(name, std::begin(kHfAdamw), std::end(kHfAdamw))) return;
  if (!listed(name, std::begin(kHfAdamw8bit), std::end(kHfAdamw8bit))) {
    fc.unmodelled.push_back(key + "=" + name + " (priced as AdamW with states in the weights' type)");
    return;
  }
  // Note [8-bit optimizer] (parallel/plan.cpp): transformers' Trainer
  // builds bitsandbytes' AdamW with optim_bits 8 ("8bit" in the name),
  // paged where "paged" is; adamw_torch_8bit is torchao's AdamW8bit.
  if (host_adam) {
    // ZeRO-Offload steps with DeepSpeed's CPU Adam and its fp32 states.
    fc.unmodelled.push_back(key + "=" + name + " beside DeepSpeed's offload_optimizer (its CPU Adam keeps fp32 states: priced so)");
    return;
  }
  out.plan("optim_bits", "8", from);
  if (name.starts_with("paged_")) {
    fc.unmodelled.push_back(key + "=" + name + " (paged: its states are priced on the device, where they stay while they fit; "
                            "PyTorch's allocator statistics leave them out)");
  }
}

bool yaml_unset(const YAML::Node& n) {
  if (!n || n.IsNull()) return true;
  if (n.IsScalar()) {
    std::string s = n.Scalar();
    for (char& ch : s) ch = static_cast<char>(std::tolower(static_cast<unsigned char>(ch)));
    return s == "false" || s == "no" || s == "off" || s.empty();
  }
  return n.size() == 0;
}

std::string locate_beside(const std::string& path, const std::string& file) {
  std::error_code ec;
  if (std::filesystem::exists(path, ec)) return path;
  const std::filesystem::path beside = std::filesystem::path(file).parent_path() / path;
  if (!std::filesystem::path(path).is_absolute() && std::filesystem::exists(beside, ec)) return beside.string();
  return "";
}

FrameworkConfig deepspeed_at(const YAML::Node& d, const YamlFields& y, const std::string& key, const std::string& hint) {
  if (d.IsMap()) return interpret_deepspeed(d, y.file());
  const std::string path = y.word(d, key);
  const std::string found = locate_beside(path, y.file());
  if (found.empty()) y.fail(d, key, path + ": no such file (looked in the working directory and beside " + y.file() + hint + ")");
  return read_deepspeed_config(found);
}

void hf_fsdp_words(const YAML::Node& l, const YamlFields& y, OverrideList& out, FrameworkConfig& fc, bool adapter) {
  // TrainingArguments(fsdp=...) sets accelerate's FSDP_SHARDING_STRATEGY
  // and FSDP_OFFLOAD_PARAMS from its words (transformers' training_args.py).
  const char* valid = "full_shard, shard_grad_op, hybrid_shard, hybrid_shard_zero2, no_shard, offload, auto_wrap";
  if (!l.IsSequence() && !l.IsScalar()) y.fail(l, "fsdp", std::string("expected a list of ") + valid);
  const auto lower = [](std::string s) {
    for (char& ch : s) ch = static_cast<char>(std::tolower(static_cast<unsigned char>(ch)));
    return s;
  };
  std::vector<std::string> words;
  if (l.IsScalar()) {
    std::istringstream in(l.Scalar());
    for (std::string w; in >> w;) words.push_back(lower(w));
  } else {
    for (const YAML::Node& w : l) words.push_back(lower(y.word(w, "fsdp")));
  }
  const std::string from = y.from(l, "fsdp");
  for (const std::string& w : words) {
    if (w == "full_shard" || w == "shard_grad_op" || w == "hybrid_shard" || w == "no_shard") {
      out.plan("fsdp", w, from);
    } else if (w == "offload") {
      out.plan("offload_params", "cpu", from);
      out.plan("offload_optimizer", "cpu", from);
    } else if (w == "hybrid_shard_zero2") {
      fc.unmodelled.push_back("fsdp hybrid_shard_zero2 (SHARD_GRAD_OP within a node: priced as hybrid_shard)");
      out.plan("fsdp", "hybrid_shard", from);
    } else if (w != "auto_wrap" && w != "true") {
      y.fail(l, "fsdp", "'" + w + "'; valid: " + valid);
    }
  }
  if (adapter && std::find(words.begin(), words.end(), "shard_grad_op") != words.end()) {
    // Note [Frozen weights under FSDP]: SHARD_GRAD_OP beside a frozen base is not modelled.
    out.plan("fsdp", "full_shard", from + " (shard_grad_op beside an adapter: priced as full_shard)");
    fc.unmodelled.push_back("fsdp shard_grad_op with an adapter (priced as full_shard)");
  }
}

void hf_trainer_tail(const YAML::Node& root, OverrideList& out, FrameworkConfig& fc, const std::string& who,
                     const std::function<bool(const std::string&)>& silent) {
  out.plan("pp", "1", fc.file + " (" + who + " runs no pipeline parallelism)");
  out.plan("overlap_param_gather", "false", fc.file + " (no forward parameter gather outside Megatron)");
  fc.search_fixed = {"pp", "overlap_param_gather"};
  for (auto it = root.begin(); it != root.end(); ++it) {
    const std::string key = it->first.IsScalar() ? it->first.Scalar() : "";
    if (silent(key) || yaml_unset(it->second)) continue;
    fc.unmodelled.push_back(key + (it->second.IsScalar() ? "=" + it->second.Scalar() : std::string()) + " (not read by dtsim)");
  }
}

std::string hf_model_of(const std::vector<std::string>& dirs, const std::string& id, const std::string& file) {
  for (const std::string& dir : dirs) {
    if (dir.empty()) continue;
    const std::string found = locate_beside(dir, file);
    std::error_code ec;
    if (!found.empty() && std::filesystem::is_regular_file(std::filesystem::path(found) / "config.json", ec)) {
      return (std::filesystem::path(found) / "config.json").string();
    }
  }
  if (const std::string b = axolotl_builtin_of(id); !b.empty()) return b;
  return id;
}

void hf_batch(const YAML::Node& root, const YamlFields& y, OverrideList& out) {
  const YAML::Node mb = root["per_device_train_batch_size"];
  out.plan("micro_batch", YamlFields::null(mb) ? "8" : std::to_string(y.count(mb, "per_device_train_batch_size")),
           YamlFields::null(mb) ? y.file() + " (per_device_train_batch_size, transformers' default 8)" : y.from(mb, "per_device_train_batch_size"));
  const YAML::Node ga = root["gradient_accumulation_steps"];
  if (!YamlFields::null(ga)) out.plan("grad_accum", std::to_string(y.count(ga, "gradient_accumulation_steps")), y.from(ga, "gradient_accumulation_steps"));
}

void hf_trainer_fsdp(const YAML::Node& root, const YamlFields& y, OverrideList& out, FrameworkConfig& fc, bool adapter) {
  fc.plan = "fsdp";
  const YAML::Node l = root["fsdp"];
  out.plan("fsdp", "full_shard", y.from(l, "fsdp"));
  hf_fsdp_words(l, y, out, fc, adapter);
  const YAML::Node c = root["fsdp_config"];
  if (!YamlFields::null(c) && !c.IsMap()) y.fail(c, "fsdp_config", "expected a mapping (fsdp_version, activation_checkpointing, ...)");
  const auto key = [&](const std::string& k) -> YAML::Node {
    if (YamlFields::null(c)) return YAML::Node();
    if (const YAML::Node n = c[k]; n) return n;
    return c["fsdp_" + k];
  };
  const YAML::Node v = key("version");
  const std::int64_t version = YamlFields::null(v) ? 1 : y.count(v, "fsdp_config.fsdp_version");
  if (version != 1 && version != 2) y.fail(v, "fsdp_config.fsdp_version", std::to_string(version) + "; valid: 1, 2");
  if (adapter && version == 1) {
    out.plan("fsdp_version", "2", (YamlFields::null(v) ? y.file() : y.from(v, "fsdp_version")) + " (FSDP1 beside a LoRA: priced as FSDP2)");
    fc.unmodelled.push_back("fsdp_version=1 with an adapter (PEFT's fsdp_auto_wrap_policy, each adapter a unit: priced as FSDP2's sharding of the same bytes, "
                            "the adapters' own small collectives not priced)");
  } else {
    out.plan("fsdp_version", std::to_string(version),
             YamlFields::null(v) ? y.file() + " (fsdp_version, accelerate's default 1)" : y.from(v, "fsdp_version"));
  }
  if (const YAML::Node a = key("activation_checkpointing"); y.flag(a, "fsdp_config.activation_checkpointing", false)) {
    out.plan("recompute", "full", y.from(a, "fsdp_config.activation_checkpointing"));
  }
  if (!YamlFields::null(c)) {
    static const char* const kKnown[] = {"version", "activation_checkpointing", "transformer_layer_cls_to_wrap", "min_num_params",
                                         "backward_prefetch", "forward_prefetch", "limit_all_gathers", "use_orig_params",
                                         "sync_module_states", "cpu_ram_efficient_loading", "state_dict_type", "auto_wrap_policy"};
    for (auto it = c.begin(); it != c.end(); ++it) {
      std::string k = it->first.IsScalar() ? it->first.Scalar() : "";
      const std::string bare = k.rfind("fsdp_", 0) == 0 ? k.substr(5) : k;
      if (std::find(std::begin(kKnown), std::end(kKnown), bare) != std::end(kKnown) || YamlFields::null(it->second)) continue;
      fc.unmodelled.push_back("fsdp_config." + k + (it->second.IsScalar() ? "=" + it->second.Scalar() : std::string()) + " (not read by dtsim)");
    }
  }
}

bool deepspeed_keeps_masters(const FrameworkConfig& ds) {
  if (ds.plan && *ds.plan != "ddp") return true;
  return std::any_of(ds.overrides.begin(), ds.overrides.end(),
                     [](const Override& o) { return o.section == "plan" && o.path == "precision" && o.value != "fp32"; });
}

void merge_hf_deepspeed(const FrameworkConfig& ds, OverrideList& out, FrameworkConfig& fc, bool& host_adam) {
  fc.plan = ds.plan;
  fc.deepspeed = true;
  for (const auto& o : ds.overrides) {
    if (o.section == "plan") out.plan(o.path, o.value, o.from);
    if (o.section == "plan" && o.path == "offload_optimizer" && o.value == "cpu") host_adam = true;
  }
  for (const auto& u : ds.unmodelled) {
    // The precision HuggingFace fills from the trainer's own keys.
    if (u.find("left to HuggingFace") != std::string::npos) continue;
    fc.unmodelled.push_back("deepspeed " + u);
  }
}

std::string format_number(double v) {
  char text[64];
  if (v == std::floor(v) && std::fabs(v) < 1e15) {
    std::snprintf(text, sizeof text, "%.0f", v);
    return text;
  }
  for (int digits = 1; digits <= 17; ++digits) {
    std::snprintf(text, sizeof text, "%.*g", digits, v);
    if (std::stod(text) == v) break;
  }
  return text;
}

}  // namespace detail

std::vector<Override> with_user_overrides(const FrameworkConfig& fc, const std::vector<Override>& user) {
  std::vector<Override> all = fc.overrides;
  all.insert(all.end(), user.begin(), user.end());
  return all;
}

std::string unmodelled_warning(const FrameworkConfig& fc) {
  if (fc.unmodelled.empty()) return "";
  std::string line = fc.file + ": " + fc.framework + " settings dtsim does not model, ignored: ";
  for (std::size_t i = 0; i < fc.unmodelled.size(); ++i) line += (i ? ", " : "") + fc.unmodelled[i];
  return line;
}

// PyTorch's torch/distributed/fsdp/api.py, class ShardingStrategy:
// FULL_SHARD shards parameters, gradients and optimizer states (ZeRO-3);
// SHARD_GRAD_OP shards gradients and optimizer states, parameters only
// outside forward and backward (ZeRO-2); NO_SHARD is DDP; HYBRID_SHARD is
// FULL_SHARD within a node and replication across nodes; _HYBRID_SHARD_ZERO2
// is SHARD_GRAD_OP within a node and replication across, which dtsim does
// not lower (its hybrid sharding is ZeRO-3's).
FrameworkConfig read_framework_config(const std::string& kind, const std::string& source, const std::string& accelerate) {
  if (!accelerate.empty()) {
    if (kind.empty() || kind == "accelerate") return read_accelerate_config(accelerate);
    if (kind != "llamafactory" && kind != "axolotl" && kind != "trl") {
      throw ConfigError("an accelerate config launches transformers' Trainer; it combines with a LLaMA-Factory, axolotl or TRL config, not " +
                        std::string(kind == "megatron" ? "Megatron-LM's flags" : "a " + kind + " config"));
    }
    const FrameworkConfig trainer = read_framework_config(kind, source);
    if (trainer.framework.find(" under accelerate") != std::string::npos) {
      throw ConfigError(source + ": names its own accelerate_config; give it there or as " + accelerate + ", not both");
    }
    return with_accelerate(trainer, read_accelerate_config(accelerate));
  }
  if (kind == "deepspeed") return read_deepspeed_config(source);
  if (kind == "torchtitan") return read_torchtitan_config(source);
  if (kind == "torchtune") return read_torchtune_config(source);
  if (kind == "axolotl") return read_axolotl_config(source);
  if (kind == "llamafactory") return read_llamafactory_config(source);
  if (kind == "trl") return read_trl_config(source);
  if (kind == "nanotron") return read_nanotron_config(source);
  if (kind == "accelerate") return read_accelerate_config(source);
  if (kind == "megatron-bridge") return read_megatron_bridge_config(source);
  if (kind == "megatron") {
    // A file of flags (a launch script's), or the flags themselves.
    std::error_code ec;
    const bool is_file = source.rfind("--", 0) != 0 && std::filesystem::is_regular_file(source, ec);
    // One word that is no flag names a file, even one that is missing or
    // no regular file: read_megatron_args says what is wrong with it.
    const bool flags = source.rfind('-', 0) == 0 || source.find_first_of(" \t\n") != std::string::npos;
    return is_file || !flags ? read_megatron_args(source) : parse_megatron_args(source, "--megatron-args");
  }
  throw ConfigError("framework '" + kind + "': valid: deepspeed, megatron, megatron-bridge, torchtitan, torchtune, axolotl, llamafactory, trl, nanotron, accelerate");
}

// Note [Framework options]
// A framework's config describes a whole plan (every plan key it leaves
// unset is reset to dtsim's default), so a front end takes it instead of a
// plan, and at most one. The user's overrides apply after it and win. A
// Megatron command line describes the model too: its model.* keys apply
// only when the user names no model. What the config sets that dtsim does
// not model is one warning line, never dropped silently.
FrameworkScenario apply_framework_config(const FrameworkConfig& fc, const std::string& model, const std::vector<Override>& user) {
  FrameworkScenario r;
  r.model = model.empty() && fc.model ? *fc.model : model;
  r.plan = fc.plan.value_or("");
  FrameworkConfig kept = fc;
  if (!model.empty()) {
    // The user's model wins over the shape the flags describe, not over how
    // the config trains it (a LoRA fine-tune: Note [LoRA] in models/src/peft.cpp).
    kept.overrides.clear();
    for (const auto& o : fc.overrides) {
      if (o.section != "model" || o.path == "peft" || o.path.starts_with("lora_")) kept.overrides.push_back(o);
    }
  }
  r.overrides = with_user_overrides(kept, user);
  r.global_batch = fc.global_batch;
  r.warning = unmodelled_warning(fc);
  r.search_fixed = fc.search_fixed;
  return r;
}

// Note [Search from a framework config]
// `dtsim search --megatron-bridge FILE` (or --megatron-args, --deepspeed,
// --torchtitan, --torchtune, --axolotl, --llamafactory, --trl, --nanotron; Python's search(megatron_bridge=...)) asks which plan would
// train what the config trains faster: the config's model (its model.*
// keys) and, as fixed knobs, what decides the numbers it trains with
// (kFixedFromConfig: sequence and its packed documents, precision and its
// FP8 recipe, optimizer, its states' bits and whether it steps in the
// backward, gradient and master-weight types, kernels, the loss's chunks
// and kernel, the experts' routing) and how
// its framework splits a pipeline (Note [Megatron's split]: a Megatron
// config's candidates are the pipelines Megatron can split); every parallel
// and memory knob is the search's that the framework can set
// (FrameworkConfig::search_fixed keeps the rest as the config has them,
// each candidate held to it as to a --set, SearchOptions::hold: axolotl,
// LLaMA-Factory and torchtune run no pipeline, torchtune shards with FSDP2 alone or runs
// a single-device recipe on one GPU; axolotl's and LLaMA-Factory's overlap_param_gather false,
// DeepSpeed's ZeRO-1 gathering nothing in the next forward, holds as any
// knob a config sets does). Its global batch is the
// config's unless another is asked, and the config's own plan is predicted
// and ranked beside the search's (Note [Your plan] in
// sim/src/search/search.cpp). The user's --set fix knobs as always.
namespace {
constexpr const char* kFixedFromConfig[] = {
    "seq_len", "document_len", "loss_chunks", "precision", "fp8_recipe", "fp8_param_gather", "optimizer", "sgd_momentum",
    "master_weights", "optim_bits", "optimizer_in_backward",
    "use_precision_aware_optimizer", "main_params_dtype", "exp_avg_dtype", "exp_avg_sq_dtype", "store_param_remainders",
    "accumulate_allreduce_grads_in_fp32", "megatron_grad_buffer", "fp32_grad_accumulator", "reduce_dtype", "kernels", "loss_kernel", "attention", "runtime", "moe_dispatcher",
    "moe_capacity_factor", "moe_pad", "moe_force_load_balance", "moe_experts", "pipeline_split",
    "account_for_embedding_in_pipeline_split", "account_for_loss_in_pipeline_split"};
}  // namespace

std::vector<Override> search_fixed_overrides(const std::vector<Override>& overrides, std::size_t user_count,
                                             const std::vector<std::string>& framework_fixed) {
  std::vector<Override> fixed;
  const std::size_t config_count = overrides.size() - std::min(user_count, overrides.size());
  for (std::size_t i = 0; i < overrides.size(); ++i) {
    const Override& v = overrides[i];
    const bool numerics = v.section == "plan" && v.value != "null" &&
                          std::any_of(std::begin(kFixedFromConfig), std::end(kFixedFromConfig), [&](const char* k) { return v.path == k; });
    const bool framework = v.section == "plan" && std::find(framework_fixed.begin(), framework_fixed.end(), v.path) != framework_fixed.end();
    if (i >= config_count || v.section == "model" || numerics || framework) fixed.push_back(v);
  }
  return fixed;
}

FsdpMode parse_fsdp_mode(const std::string& name) {
  std::string n;
  for (char ch : name) n += static_cast<char>(std::tolower(static_cast<unsigned char>(ch)));
  const std::string prefix = "shardingstrategy.";
  if (n.rfind(prefix, 0) == 0) n = n.substr(prefix.size());
  if (n == "none") return FsdpMode::kNone;
  if (n == "full_shard") return FsdpMode::kFullShard;
  if (n == "shard_grad_op") return FsdpMode::kShardGradOp;
  if (n == "no_shard") return FsdpMode::kNoShard;
  if (n == "hybrid_shard") return FsdpMode::kHybridShard;
  if (n == "_hybrid_shard_zero2") {
    throw ConfigError("'" + name + "' (SHARD_GRAD_OP within a node, replicated across nodes) is not modelled; "
                      "valid: none, full_shard, shard_grad_op, no_shard, hybrid_shard (nearest: shard_grad_op, or hybrid_shard for ZeRO-3 within a node)");
  }
  throw ConfigError("'" + name + "' is not one of none, full_shard, shard_grad_op, no_shard, hybrid_shard "
                    "(PyTorch's ShardingStrategy names, FULL_SHARD or ShardingStrategy.FULL_SHARD, are accepted too)");
}

namespace {

bool ends_with(const std::string& s, const std::string& suffix) {
  return s.size() >= suffix.size() && s.compare(s.size() - suffix.size(), suffix.size(), suffix) == 0;
}

/// A line of TOML's own shape ("[section]" alone, or "[[table]]").
bool toml_header(const std::string& line) {
  std::size_t b = line.find_first_not_of(" \t");
  if (b == std::string::npos || line[b] != '[') return false;
  std::size_t e = line.find_last_not_of(" \t\r");
  std::string inner = line.substr(b, e - b + 1);
  if (inner.size() < 3 || inner.back() != ']') return false;
  for (char ch : inner) {
    if (!(std::isalnum(static_cast<unsigned char>(ch)) || ch == '_' || ch == '-' || ch == '.' || ch == '[' || ch == ']')) return false;
  }
  return true;
}

}  // namespace

std::string framework_of(const std::string& text, const std::string& path) {
  if (ends_with(path, ".toml")) return "torchtitan";
  if (ends_with(path, ".sh") || ends_with(path, ".args")) return "megatron";
  // DeepSpeed's own top-level keys (deepspeed/runtime/constants.py); no dtsim plan has them.
  for (const char* key : {"\"zero_optimization\"", "\"train_batch_size\"", "\"train_micro_batch_size_per_gpu\""}) {
    if (text.find(key) != std::string::npos) return "deepspeed";
  }
  for (const char* key : {"zero_optimization:", "train_batch_size:", "train_micro_batch_size_per_gpu:"}) {
    const auto at = text.find(key);
    if (at != std::string::npos && (at == 0 || text[at - 1] == '\n')) return "deepspeed";
  }
  // TOML: a [section] header followed somewhere by `key = value`.
  bool header = false, assignment = false;
  std::size_t start = 0;
  while (start < text.size()) {
    std::size_t end = text.find('\n', start);
    if (end == std::string::npos) end = text.size();
    const std::string line = text.substr(start, end - start);
    header = header || toml_header(line);
    const auto eq = line.find(" = ");
    assignment = assignment || (header && eq != std::string::npos && line.find(':') == std::string::npos);
    start = end + 1;
  }
  if (header && assignment) return "torchtitan";
  // torchtune's recipe configs build their model from torchtune's builders.
  if (text.find("_component_: torchtune.models.") != std::string::npos) return "torchtune";
  // axolotl's configs name a HuggingFace model at the top level; no plan does.
  if (text.rfind("base_model:", 0) == 0 || text.find("\nbase_model:") != std::string::npos) return "axolotl";
  // accelerate's say how the script is launched.
  if (text.rfind("distributed_type:", 0) == 0 || text.find("\ndistributed_type:") != std::string::npos) return "accelerate";
  // LLaMA-Factory's and TRL's name theirs by transformers' model_name_or_path;
  // LLaMA-Factory's alone have its template, stage or finetuning_type.
  const auto top = [&](const char* key) { return text.rfind(key, 0) == 0 || text.find(std::string("\n") + key) != std::string::npos; };
  if (top("model_name_or_path:")) return top("template:") || top("stage:") || top("finetuning_type:") ? "llamafactory" : "trl";
  // nanotron's: its parallelism: section beside tokens: or a model_config.
  if (top("parallelism:") && (top("tokens:") || text.find(" model_config:") != std::string::npos)) return "nanotron";
  // Megatron-Bridge's YAML: a model: section of Megatron-Core's fields, or a
  // ConfigContainer's class written by its to_yaml.
  if (text.find("_target_: megatron.bridge.training.config.ConfigContainer") != std::string::npos) return "megatron-bridge";
  if ((text.rfind("model:", 0) == 0 || text.find("\nmodel:") != std::string::npos) &&
      (text.find(" tensor_model_parallel_size:") != std::string::npos || text.find(" num_layers:") != std::string::npos)) {
    return "megatron-bridge";
  }
  if (text.find("--tensor-model-parallel-size") != std::string::npos ||
      text.find("--pipeline-model-parallel-size") != std::string::npos) {
    return "megatron";
  }
  return "";
}

}  // namespace dtsim::sim
