#pragma once
// Plans as users already write them: a DeepSpeed config JSON, a Megatron-LM
// command line, a Megatron-Bridge config YAML, a torchtitan job TOML, a
// torchtune, axolotl, LLaMA-Factory, TRL or nanotron YAML, an accelerate config. Each
// importer reads the knobs dtsim models into `--set`-style overrides on
// dtsim's own keys (plan.*, model.*),
// names a shipped plan to start from, and lists the knobs it read but dtsim
// does not model, so nothing is dropped silently (Note [Framework configs]
// in sim/src/config/framework_config.cpp). A front end wires one in a few
// lines:
//
//   auto fc = sim::read_deepspeed_config(path);
//   plan = fc.plan.value_or(user_plan);
//   overrides = sim::with_user_overrides(fc, user_sets);   // the user's --set wins
//   if (auto w = sim::unmodelled_warning(fc); !w.empty()) warn(w);

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "dtsim/sim/config_node.hpp"
#include "dtsim/sim/plan.hpp"

namespace dtsim::sim {

/// What a framework's config says, in dtsim's terms.
struct FrameworkConfig {
  std::string framework;                      ///< "DeepSpeed", "Megatron-LM", "Megatron-Bridge", "torchtitan", "torchtune", "axolotl", "LLaMA-Factory", "TRL", "nanotron", "accelerate"
  std::string file;                           ///< the file read, as given
  std::optional<std::string> plan;            ///< the shipped plan to start from ("zero2"), or none
  /// plan.* (and model.* for a Megatron command line) in the order read,
  /// each with Override::from naming "file:line (key)"; "null" resets a key
  /// the starting plan sets to dtsim's default. Apply before the user's --set.
  std::vector<Override> overrides;
  std::optional<std::string> model;           ///< a built-in model the config names or builds ("llama-3-8b")
  std::optional<std::int64_t> global_batch;   ///< sequences per iteration, for `dtsim search --global-batch`
  /// Knobs read but not modelled, as written ("zero_optimization.stage3_max_live_parameters=1e9").
  std::vector<std::string> unmodelled;
  /// Plan keys the framework has no other setting for ("pp": axolotl runs
  /// no pipeline), which a search from the config keeps as it sets them.
  std::vector<std::string> search_fixed;
  /// A trainer's config names how it distributes (its deepspeed or fsdp):
  /// an accelerate config beside it does not (Note [accelerate under a trainer]).
  bool own_distribution = false;
  /// DeepSpeed's engine runs the model (a DeepSpeed config it names, or
  /// accelerate's DEEPSPEED), which casts the whole module to its 16-bit
  /// type (Note [fp32 base] in models/src/peft.cpp).
  bool deepspeed = false;
  /// Plan keys the trainer sets even where its file leaves them to its
  /// default, over what an accelerate config writes (TRL's bf16, which
  /// TrainingArguments turns into ACCELERATE_MIXED_PRECISION; Note
  /// [accelerate under a trainer]).
  std::vector<std::string> binding_defaults;
};

/// Reads a DeepSpeed config JSON (deepspeed/runtime/config.py and
/// zero/config.py keys); throws IoError, or ConfigError with file:line.
FrameworkConfig read_deepspeed_config(const std::string& path);
/// The same for text already read; `file` names it in errors.
FrameworkConfig parse_deepspeed_config(const std::string& json_text, const std::string& file);

/// Reads Megatron-LM's arguments (megatron/training/arguments.py) from a
/// file: a launch script's flags, shell-quoted, with backslash-newline
/// continuations and # comments; lines that are not flags (VAR=..., torchrun
/// pretrain_gpt.py) are skipped.
FrameworkConfig read_megatron_args(const std::string& path);
/// The same for a command line already read; `file` names it in errors.
FrameworkConfig parse_megatron_args(const std::string& args, const std::string& file);

/// Reads Megatron-Bridge's ConfigContainer YAML (the run_config.yaml of its
/// checkpoints, logger.save_config_filepath, or a file of the same sections):
/// its model, train, optimizer, ddp, mixed_precision and comm_overlap fields
/// by the rules of Megatron-LM's flags (Note [Megatron-Bridge configs] in
/// sim/src/config/framework_megatron_bridge.cpp).
FrameworkConfig read_megatron_bridge_config(const std::string& path);
/// The same for text already read; `file` names it in errors.
FrameworkConfig parse_megatron_bridge_config(const std::string& yaml_text, const std::string& file);

/// Reads a torchtitan job TOML (torchtitan/config/job_config.py).
FrameworkConfig read_torchtitan_config(const std::string& path);
/// The same for text already read; `file` names it in errors.
FrameworkConfig parse_torchtitan_config(const std::string& toml_text, const std::string& file);

/// Reads a torchtune recipe config YAML (recipes/configs/*/*.yaml: its model
/// builder, LoRA's adapters, batch, sequence, dtype, checkpointing, compile
/// and FSDP2 knobs; Note [torchtune configs] in
/// sim/src/config/framework_torchtune.cpp).
FrameworkConfig read_torchtune_config(const std::string& path);
/// The same for text already read; `file` names it in errors (and, as the
/// recipe's, says single-device where it has "single_device").
FrameworkConfig parse_torchtune_config(const std::string& yaml_text, const std::string& file);

/// Reads an axolotl config YAML (`axolotl train FILE`: its base_model, adapter,
/// batch, precision, checkpointing, kernels, DeepSpeed or FSDP and parallel
/// sizes; Note [axolotl configs] in sim/src/config/framework_axolotl.cpp).
FrameworkConfig read_axolotl_config(const std::string& path);
/// The same for text already read; `file` names it in errors and is where a
/// relative deepspeed: path or local base_model is looked for beside.
FrameworkConfig parse_axolotl_config(const std::string& yaml_text, const std::string& file);
/// Reads a LLaMA-Factory training config YAML (`llamafactory-cli train
/// FILE`: its model_name_or_path, finetuning_type, LoRA, quantization,
/// batch, precision, checkpointing, kernels, DeepSpeed or FSDP; Note
/// [LLaMA-Factory configs] in sim/src/config/framework_llamafactory.cpp).
FrameworkConfig read_llamafactory_config(const std::string& path);
/// The same for text already read; `file` names it in errors and is where a
/// relative deepspeed: path or local model is looked for beside.
FrameworkConfig parse_llamafactory_config(const std::string& yaml_text, const std::string& file);
/// Reads a TRL training config YAML (`trl sft --config FILE`: its
/// model_name_or_path and dtype, use_peft's LoRA, a quantized base, batch,
/// max_length, packing, precision, checkpointing, loss_type, kernels,
/// DeepSpeed or FSDP, and accelerate_config, folded in as with_accelerate
/// folds one; Note [TRL configs] in sim/src/config/framework_trl.cpp).
FrameworkConfig read_trl_config(const std::string& path);
/// The same for text already read; `file` names it in errors and is where a
/// relative deepspeed: path, accelerate_config or local model is looked for beside.
FrameworkConfig parse_trl_config(const std::string& yaml_text, const std::string& file);
/// Reads a nanotron training config YAML (run_train.py --config-file FILE:
/// its parallelism, tokens, model (a LlamaConfig or Qwen2Config, experts
/// included) and optimizer, with nanotron's defaults and its own refusals;
/// Note [nanotron configs] in sim/src/config/framework_nanotron.cpp).
FrameworkConfig read_nanotron_config(const std::string& path);
/// The same for text already read; `file` names it in errors (and the model, after its stem).
FrameworkConfig parse_nanotron_config(const std::string& yaml_text, const std::string& file);
/// Reads an accelerate config YAML (`accelerate launch --config_file FILE`:
/// its distributed_type, num_processes, mixed_precision, fsdp_config,
/// deepspeed_config, parallelism_config; Note [accelerate configs] in
/// sim/src/config/framework_accelerate.cpp). Alone it is a plan; under a
/// trainer's config, with_accelerate folds it in.
FrameworkConfig read_accelerate_config(const std::string& path);
/// The same for text already read; `file` names it in errors and is where a
/// relative deepspeed_config_file is looked for beside.
FrameworkConfig parse_accelerate_config(const std::string& yaml_text, const std::string& file);
/// A transformers-based trainer's config (axolotl's, LLaMA-Factory's, TRL's) run
/// under `accelerate launch --config_file` (Note [accelerate under a
/// trainer]): accelerate's distribution unless the trainer's config names
/// its own, the trainer's keys where its file writes them.
FrameworkConfig with_accelerate(const FrameworkConfig& trainer, const FrameworkConfig& accelerate);
/// dtsim's built-in of a HuggingFace hub id's model ("NousResearch/Meta-Llama-3.1-8B"
/// -> "llama-3.1-8b"), or "" (Note [axolotl configs]).
std::string axolotl_builtin_of(const std::string& hub_id);
/// The built-ins axolotl_builtin_of can name.
std::vector<std::string> axolotl_builtins();

/// fc.overrides, then the user's own (so a user's --set wins).
std::vector<Override> with_user_overrides(const FrameworkConfig& fc, const std::vector<Override>& user);

/// One warning line, "FILE: DeepSpeed knobs dtsim does not model, ignored:
/// a=1, b=2", or "" when there are none.
std::string unmodelled_warning(const FrameworkConfig& fc);

/// A framework's config as a front end gives it: `kind` "deepspeed",
/// "megatron-bridge", "torchtitan", "torchtune", "axolotl", "llamafactory", "trl", "nanotron" or "accelerate" with a file's path, or "megatron" with
/// a file of flags or the flags themselves (a `source` starting "--"; errors
/// then name it `--megatron-args`). Throws ConfigError naming the valid kinds.
/// `accelerate`, an accelerate config's path, launches it (Note [accelerate
/// under a trainer]): with `kind` "llamafactory", "axolotl" or "trl" (one
/// that names no accelerate_config), or alone (`kind` empty); beside any
/// other kind it is refused in one line.
FrameworkConfig read_framework_config(const std::string& kind, const std::string& source, const std::string& accelerate = "");

/// A scenario with a framework's config folded in (Note [Framework
/// options] in sim/src/config/framework_config.cpp).
struct FrameworkScenario {
  std::string model;                         ///< "" where neither the user nor the config names one
  std::string plan;                          ///< the shipped plan or file to start from
  std::vector<Override> overrides;           ///< the config's keys, then the user's (which win)
  std::optional<std::int64_t> global_batch;  ///< the config's global batch, for the search
  std::string warning;                       ///< unmodelled_warning(fc)
  std::vector<std::string> search_fixed;     ///< FrameworkConfig's
};

/// Folds `fc` into a scenario: its plan, and its model unless the user
/// names one (`model` non-empty: the config's model.* keys are dropped).
FrameworkScenario apply_framework_config(const FrameworkConfig& fc, const std::string& model, const std::vector<Override>& user);

/// The fixed knobs of a search from a framework's config (Note [Search
/// from a framework config] in framework_config.cpp): of `overrides` (the
/// config's first, then `user_count` of the user's), the config's numerics
/// and model keys, the plan keys the framework cannot set otherwise
/// (`framework_fixed`: FrameworkConfig::search_fixed), and every one of the user's.
std::vector<Override> search_fixed_overrides(const std::vector<Override>& overrides, std::size_t user_count,
                                             const std::vector<std::string>& framework_fixed = {});

/// PyTorch FSDP's ShardingStrategy names (FULL_SHARD, SHARD_GRAD_OP,
/// NO_SHARD, HYBRID_SHARD) and dtsim's (full_shard, ...) in any case, with
/// or without "ShardingStrategy."; throws ConfigError (message without a
/// location) naming the valid ones.
FsdpMode parse_fsdp_mode(const std::string& name);

/// "deepspeed", "torchtitan", "torchtune", "axolotl", "llamafactory", "trl", "nanotron", "megatron" or "megatron-bridge" when `text` (a file named `path`)
/// is that framework's config rather than a dtsim plan, else "".
std::string framework_of(const std::string& text, const std::string& path);

}  // namespace dtsim::sim
