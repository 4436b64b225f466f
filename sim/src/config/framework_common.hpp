#pragma once
// What the framework importers share (framework_config.hpp): reading a
// bounded file, the list of overrides each builds, and reading a YAML's
// fields with file:line in every message (YamlFields).

#include <cstdint>
#include <functional>
#include <map>
#include <set>
#include <string>
#include <vector>

#include <yaml-cpp/yaml.h>

#include "dtsim/sim/framework_config.hpp"

namespace dtsim::sim::detail {

/// A config file's text, refused before reading past kMaxConfigBytes;
/// throws IoError (missing, a directory, unreadable) or ConfigError.
std::string read_config_text(const std::string& path);

/// Collects a FrameworkConfig's overrides: each key once, with where it came
/// from. finish() resets every plan key the starting plan may set and the
/// framework did not (Note [Framework configs]).
class OverrideList {
 public:
  explicit OverrideList(FrameworkConfig& fc) : fc_(fc) {}
  /// plan.KEY=VALUE from `from` ("file:line (key)"); a later set of the same key replaces it.
  void plan(const std::string& key, const std::string& value, const std::string& from);
  /// model.KEY=VALUE.
  void model(const std::string& key, const std::string& value, const std::string& from);
  bool has_plan(const std::string& key) const { return set_.count("plan." + key) > 0; }
  /// Appends "null" for every plan key not set, naming the file.
  void finish();

 private:
  void add(const std::string& section, const std::string& key, const std::string& value, const std::string& from);
  FrameworkConfig& fc_;
  std::set<std::string> set_;
};

/// Reading the fields of a framework's YAML (torchtune's, axolotl's), each
/// message naming "file:line" and the key.
class YamlFields {
 public:
  explicit YamlFields(std::string file) : file_(std::move(file)) {}
  static bool null(const YAML::Node& n) { return !n || n.IsNull(); }
  const std::string& file() const { return file_; }
  /// "file:line" of a node (the file alone where it has no mark).
  std::string where(const YAML::Node& n) const;
  /// "file:line (key)", an override's origin.
  std::string from(const YAML::Node& n, const std::string& key) const { return where(n) + " (" + key + ")"; }
  [[noreturn]] void fail(const YAML::Node& n, const std::string& key, const std::string& message) const;
  /// A scalar's text; a mapping or a list fails.
  std::string word(const YAML::Node& n, const std::string& key) const;
  /// A positive integer, as written ("8").
  std::string positive(const YAML::Node& n, const std::string& key) const;
  std::int64_t count(const YAML::Node& n, const std::string& key) const { return std::stoll(positive(n, key)); }
  /// A YAML 1.1 boolean as PyYAML reads one: true, True,
  /// yes, on and their opposites; `fallback` when absent.
  bool flag(const YAML::Node& n, const std::string& key, bool fallback) const;

 private:
  std::string file_;
};

/// A DeepSpeed config already parsed (a JSON file's, or a mapping inside
/// another framework's YAML: axolotl's deepspeed:), read as
/// parse_deepspeed_config reads one; `file` names it in messages.
FrameworkConfig interpret_deepspeed(const YAML::Node& root, const std::string& file);

/// transformers' TrainingArguments `optim` (OptimizerNames), which axolotl's
/// `optimizer` and LLaMA-Factory's `optim` pass on, as plan.optimizer and
/// plan.optim_bits (Note [8-bit optimizer]): adamw_torch and the like are
/// AdamW, sgd SGD; adamw_bnb_8bit, adamw_8bit, paged_adamw_8bit
/// (bitsandbytes) and adamw_torch_8bit (torchao) AdamW with 8-bit states,
/// except beside DeepSpeed's offload_optimizer (`host_adam`: its CPU Adam
/// keeps fp32 states); a paged one and every other name said in
/// fc.unmodelled. `key` names the field in what is said.
void hf_optimizer(OverrideList& out, FrameworkConfig& fc, const std::string& key, const std::string& name,
                  const std::string& from, bool host_adam);

/// A DeepSpeed config that a transformers-based trainer's YAML names
/// (axolotl's and LLaMA-Factory's `deepspeed:`), folded in: its plan, its
/// plan keys, and what it does not model as "deepspeed ..." (less the
/// precision HuggingFace fills from the trainer's own keys). Sets
/// `host_adam` where it offloads the optimizer, and fc.deepspeed.
void merge_hf_deepspeed(const FrameworkConfig& ds, OverrideList& out, FrameworkConfig& fc, bool& host_adam);

/// Whether DeepSpeed keeps fp32 masters of what a DeepSpeed config `ds`
/// (read by parse_deepspeed_config) trains, whatever the model was loaded
/// in: under ZeRO (stage_1_and_2.py's fp32 partitions, stage 3's), or at
/// stage 0 with its own fp16 or bf16 enabled (FP16_Optimizer,
/// BF16_Optimizer); at stage 0 without them it steps the weights as they are.
bool deepspeed_keeps_masters(const FrameworkConfig& ds);

/// Null, false, or an empty list or mapping: a trainer config's key that
/// changes nothing (axolotl's, LLaMA-Factory's).
bool yaml_unset(const YAML::Node& n);

/// A path as transformers-based trainers open it: from the working
/// directory, else (a relative one) beside `file`; "" where neither has it.
std::string locate_beside(const std::string& path, const std::string& file);

/// The DeepSpeed config a trainer's `key` names: a mapping read in place,
/// or a path found by locate_beside and read as --deepspeed reads it; a
/// missing file fails naming both places, then `hint` ("; ...", or "").
FrameworkConfig deepspeed_at(const YAML::Node& d, const YamlFields& y, const std::string& key, const std::string& hint);

/// What TRL's chunked loss does under ZeRO-3 that dtsim does not price
/// (trl/trainer/utils.py maybe_gather_lm_head_ctx, a chunk at a time).
inline constexpr const char* kChunkedNllZero3 =
    "loss_type=chunked_nll under ZeRO-3 (each chunk gathers the head's weight again, in both passes, maybe_gather_lm_head_ctx: not priced)";

/// The linear projections of a Llama-style block as PEFT names them
/// (find_all_linear_modules: every nn.Linear but the head), which dtsim's
/// LoRA targets (Note [LoRA] in models/src/peft.cpp).
inline constexpr const char* kHfLinear[] = {"q_proj", "k_proj", "v_proj", "o_proj", "gate_proj", "up_proj", "down_proj"};

/// transformers' `fsdp` words (TrainingArguments(fsdp=...), a list or a
/// string: full_shard, shard_grad_op, hybrid_shard, hybrid_shard_zero2,
/// no_shard, offload, auto_wrap) as plan keys; beside an adapter
/// shard_grad_op is priced as full_shard (Note [Frozen weights under FSDP]),
/// said in fc.unmodelled.
void hf_fsdp_words(const YAML::Node& l, const YamlFields& y, OverrideList& out, FrameworkConfig& fc, bool adapter);

/// The model a transformers-based trainer's config names, as --model takes
/// it: the config.json of the first of `dirs` (local directories, found by
/// locate_beside) that has one, else dtsim's built-in of the hub id `id`
/// (axolotl_builtin_of), else `id` itself, read from the HuggingFace cache
/// (Note [HuggingFace cache]).
std::string hf_model_of(const std::vector<std::string>& dirs, const std::string& id, const std::string& file);

/// transformers' per_device_train_batch_size (its default 8) as
/// plan.micro_batch and gradient_accumulation_steps as plan.grad_accum.
void hf_batch(const YAML::Node& root, const YamlFields& y, OverrideList& out);

/// A transformers-based trainer's `fsdp` words and `fsdp_config` mapping
/// (LLaMA-Factory's, TRL's: TrainingArguments' own, which it hands to
/// accelerate) as FSDP: its version (a LoRA under FSDP1 priced as FSDP2,
/// said), activation_checkpointing, and each other key not read listed.
void hf_trainer_fsdp(const YAML::Node& root, const YamlFields& y, OverrideList& out, FrameworkConfig& fc, bool adapter);

/// What every transformers-based trainer's config ends with: pp 1 and
/// overlap_param_gather false (the Trainer runs no pipeline, DeepSpeed's
/// ZeRO-1 no forward gather), which a search keeps; then each key of `root`
/// that is set and not `silent`, listed as not read. `who` names the trainer.
void hf_trainer_tail(const YAML::Node& root, OverrideList& out, FrameworkConfig& fc, const std::string& who,
                     const std::function<bool(const std::string&)>& silent);

/// `v` as the shortest decimal that reads back the same ("1000", "0.5").
std::string format_number(double v);

/// Megatron's arguments, read from a command line (framework_megatron.cpp)
/// or from Megatron-Bridge's YAML (framework_megatron_bridge.cpp), keyed by
/// Megatron-LM's flag names without their dashes ("tensor-model-parallel-size").
/// A switch given holds "true"; every other value is already checked against
/// the kind the flag takes (an integer >= 1, a number, a word).
struct MegatronArgs {
  struct Arg {
    std::string text;
    int line = 0;
  };
  std::string framework;  ///< "Megatron-LM", "Megatron-Bridge"
  std::string file;
  std::map<std::string, Arg> given;
  /// What the file set that dtsim does not read, as the file writes it, in order.
  std::vector<std::string> unknown;
  /// How the file names a flag in messages ("--micro-batch-size",
  /// "train.micro_batch_size"); unset: Megatron-LM's spelling.
  std::function<std::string(const std::string&)> spell;
  /// Between a name and its value in messages: " " on a command line, "=" in YAML.
  std::string value_sep = " ";
  /// The model's name where the shape matches no built-in; "" names it after the file.
  std::string model_name;
  std::string spelled(const std::string& flag) const;
};

/// Megatron's arguments as dtsim's plan and model keys, as arguments.py
/// reads them (the rules in framework_megatron.cpp).
FrameworkConfig interpret_megatron(const MegatronArgs& args);

}  // namespace dtsim::sim::detail
