// An axolotl config (the YAML `axolotl train FILE` reads, examples/*/*.yml)
// into dtsim's plan and model keys (Note [Framework configs] in
// framework_config.cpp).
//
// Note [axolotl configs]
// axolotl fine-tunes HuggingFace models through transformers' Trainer and
// accelerate; its YAML names the model, the adapter, the batch and how to
// distribute (src/axolotl/utils/schemas/*.py; normalize_config and
// resolve_dtype in utils/config/__init__.py; loaders/adapter.py;
// setup_fsdp_envs in utils/trainer.py; all read at 067b021c for this note):
// - base_model: a HuggingFace hub id (NousResearch/Meta-Llama-3.1-8B) or a
//   local directory. A hub id is dtsim's built-in of the same name
//   (axolotl_builtin_of: the organisation, a leading meta-, and suffixes such as
//   -hf, -Instruct, -fp16, -v0.1, -4k dropped, then compared without - . _);
//   a directory (or base_model_config) with a config.json is read as one;
//   any other hub id is looked up in the HuggingFace cache, as --model
//   reads one (Note [HuggingFace cache]).
// - adapter: lora or qlora (qlora needs load_in_4bit, and only it is given
//   bitsandbytes' NF4 base: peft: qlora, as is a -bnb-4bit checkpoint under
//   lora; loaders/model.py). lora_r is the rank (PEFT's LoraConfig(r=),
//   required: axolotl passes None through and PEFT refuses it);
//   lora_target_linear adds every nn.Linear but the head (find_all_linear_
//   names: q_proj, k_proj, v_proj, o_proj, gate_proj, up_proj, down_proj on
//   a Llama-style model) to lora_target_modules. load_in_8bit under lora is
//   bitsandbytes' LLM.int8 base (peft: lora_int8, Note [8-bit base]).
//   lora_modules_to_save (the embedding and head trained whole), DoRA and
//   unfrozen_parameters are listed as not modelled.
// - micro_batch_size is each rank's micro-batch, gradient_accumulation_steps
//   the micro-batches a step (or batch_size / micro_batch_size); the global
//   batch is theirs times world_size / (tp x cp), as normalize_config has it.
//   sequence_len (512 by default) is the sequence; sample_packing packs
//   samples into it, each attending within itself (set plan.document_len,
//   Note [Packed sequences]); unpacked, each batch is padded to its longest
//   sample, priced at the whole sequence (both said).
// - Precision (resolve_dtype): bf16 (true or auto, on a GPU that has it),
//   else fp16, else fp32; the model is loaded in that type. Where the
//   weights stay in it (DDP or one GPU, a full fine-tune) torch.optim keeps
//   its states in it too: plan.master_weights false (Note [No master
//   weights]). Under FSDP accelerate upcasts every trainable parameter to
//   fp32 before wrapping ("FSDP upcast of low precision parameters",
//   accelerator.py prepare_model and fsdp_utils.py fsdp2_prepare_model), and
//   PEFT makes a LoRA's adapters fp32 (autocast_adapter_dtype): master
//   copies, dtsim's default. Under DeepSpeed its own rules hold.
// - gradient_checkpointing (true) is HuggingFace's per decoder layer:
//   plan.recompute full; fsdp_config's activation_checkpointing the same.
//   Its deprecated "offload" and "offload_disk" are activation_offloading
//   true and disk (validation.py check_gradient_checkpointing_w_offload).
//   activation_offloading (which needs gradient_checkpointing, as the
//   schema refuses it without) moves saved tensors to the host:
//   plan.enable_activation_offloading (Note [Saved-tensor offload]). true
//   and disk run TRL's OffloadActivations; beside an adapter it replaces
//   recompute (the trainer turns HuggingFace's checkpointing off and
//   loaders/model.py wraps only a full fine-tune: plan.recompute none),
//   and a full fine-tune keeps it, offloading the checkpoints; legacy
//   (synchronous copies) and hidden_states offload the checkpoints' inputs
//   under HuggingFace's checkpointing. disk and legacy are said. attn_implementation eager (or
//   eager_attention) is plan.attention eager; flash_attention_2, sdpa and
//   the other kernels keep no scores. torch_compile is plan.kernels fused;
//   so are Liger's RMSNorm and SwiGLU together (liger_rms_norm,
//   liger_glu_activation: they save their inputs and rstd and recompute
//   silu, as Note [Fused kernels] has it). liger_fused_linear_cross_entropy
//   and cut_cross_entropy are plan.loss_kernel liger_fused_linear and
//   cut_cross_entropy (Note [Fused linear cross-entropy]; with
//   tensor_parallel_size said, not applied); axolotl's chunked_cross_entropy
//   chunks the loss alone over logits made whole: priced unchunked (said).
// - deepspeed: a DeepSpeed JSON (a path, which axolotl opens from the
//   working directory and dtsim also looks for beside the config; or the
//   mapping itself)
//   read as --deepspeed reads it, HuggingFace's "auto" filled from the
//   keys above (transformers' HfTrainerDeepSpeedConfig).
// - fsdp_config or the deprecated fsdp: list (either turns FSDP on,
//   prepare_optim_env; fsdp_version alone does not, and FSDP beside
//   deepspeed is refused) is FSDP through accelerate: fsdp_version 1 unless
//   2 (top level or inside), keys with or without the fsdp_ prefix.
//   setup_fsdp_envs hands accelerate no sharding strategy from fsdp_config
//   and sets reshard_after_forward only when true, so those are said; the
//   fsdp: list's words reach it through TrainingArguments (full_shard,
//   shard_grad_op, hybrid_shard, offload). offload_params is CPUOffload
//   (parameters, gradients and optimizer state on the host);
//   dp_replicate_size above 1 is HSDP, priced as dtsim's hybrid_shard
//   (within a node; said). An 8-bit base under FSDP is refused where the
//   plan is resolved (FSDP flattens no integer tensor: Note [8-bit base]). Beside a LoRA, transformers' Trainer
//   wraps FSDP1 with PEFT's fsdp_auto_wrap_policy (each adapter a unit of
//   its own, the frozen base in its layer's): priced as FSDP2's
//   per-parameter sharding of the same bytes, the adapters' small
//   collectives not priced (said).
// - tensor_parallel_size, context_parallel_size (or sequence_parallel_
//   degree), expert_parallel_size: plan.tp, cp, ep.
// - optimizer: adamw_torch, adamw_torch_fused and the like are AdamW, sgd
//   SGD; adamw_bnb_8bit, adamw_8bit, paged_adamw_8bit (bitsandbytes) and
//   adamw_torch_8bit (torchao) AdamW with plan.optim_bits 8 (Note [8-bit
//   optimizer]; a paged one's states said to be priced on the device);
//   the 32-bit paged ones and the other optimizers are priced as AdamW
//   with states in the weights' type (said).
// Keys that set no cost (logging, datasets, tokens, learning rates,
// checkpoints) are read silently; any other key given is listed, not
// dropped.
#include <algorithm>
#include <cctype>
#include <filesystem>
#include <sstream>
#include <string>
#include <tuple>
#include <vector>

#include "dtsim/sim/config_node.hpp"
#include "dtsim/sim/error.hpp"
#include "dtsim/sim/framework_config.hpp"
#include "framework_common.hpp"

namespace dtsim::sim {
namespace {

/// dtsim's built-in language models, by name (models/src/zoo.cpp): what a
/// hub id can name (tests/sim/test_framework_config.cpp keeps the list
/// true to the zoo).
constexpr const char* kBuiltins[] = {
    "llama-2-7b", "llama-2-13b", "llama-2-70b", "llama-3-8b", "llama-3-70b", "llama-3.1-8b", "llama-3.1-70b",
    "llama-3.1-405b", "llama-3.2-1b", "llama-3.2-3b", "llama-3.3-70b", "mistral-7b", "mistral-nemo-12b", "mixtral-8x7b",
    "mixtral-8x22b", "qwen2.5-7b", "qwen2.5-14b", "qwen2.5-32b", "qwen2.5-72b", "qwen3-0.6b", "qwen3-1.7b", "qwen3-4b",
    "qwen3-8b", "qwen3-14b", "qwen3-32b", "qwen3-30b-a3b", "qwen3-235b-a22b", "qwen3-next-80b-a3b", "qwen3.5-35b-a3b",
    "smollm3-3b", "phi-3-mini", "phi-3-medium", "granite-3.3-8b", "olmo-2-7b", "olmo-2-13b", "gemma-2-2b", "gemma-2-9b",
    "gemma-2-27b", "gemma-3-1b", "gemma-3-4b", "gemma-3-12b", "gemma-3-27b", "deepseek-v2-lite", "deepseek-v2",
    "deepseek-v3", "gpt-oss-20b", "gpt-oss-120b", "glm-4.5-air", "glm-4.5", "llama-4-scout", "llama-4-maverick",
    "gpt2", "gpt2-medium", "gpt2-large", "gpt2-xl"};

/// The keys that set no cost (datasets, tokens, logging, learning rates,
/// checkpoints, evaluation), read without a word.
constexpr const char* kSilent[] = {
    "base_model_ignore_patterns", "revision_of_model", "model_type", "tokenizer_type", "tokenizer_config", "tokenizer_use_fast",
    "tokenizer_legacy", "tokenizer_use_mistral_common", "tokenizer_save_jinja_files", "processor_type", "processor_kwargs",
    "trust_remote_code", "output_dir", "datasets", "test_datasets", "dataset_prepared_path", "dataset_processes",
    "dataset_num_proc", "dataset_shard_num", "dataset_shard_idx", "dataset_exact_deduplication", "dataset_keep_in_memory",
    "shuffle_merged_datasets", "shuffle_before_merging_datasets", "skip_prepare_dataset", "num_dataset_shards_to_save",
    "push_dataset_to_hub", "val_set_size", "chat_template", "chat_template_jinja", "chat_template_kwargs", "default_system_message",
    "special_tokens", "tokens", "added_tokens_overrides", "eot_tokens", "fix_untrained_tokens", "bos_token", "eos_token",
    "pad_token", "unk_token", "hub_model_id", "hub_strategy", "hub_revision", "hf_use_auth_token", "save_safetensors",
    "wandb_project", "wandb_entity", "wandb_watch", "wandb_name", "wandb_run_id", "wandb_log_model", "wandb_mode", "use_wandb",
    "mlflow_tracking_uri", "mlflow_experiment_name", "mlflow_run_name", "hf_mlflow_log_artifacts", "use_mlflow", "use_comet",
    "comet_api_key", "comet_workspace", "comet_project_name", "comet_experiment_key", "comet_mode", "comet_online",
    "comet_experiment_config", "use_tensorboard", "use_trackio", "trackio_project_name", "trackio_run_name", "trackio_space_id",
    "use_otel_metrics", "otel_metrics_host", "otel_metrics_port", "learning_rate", "lr_scheduler", "lr_scheduler_kwargs",
    "lr_quadratic_warmup", "cosine_min_lr_ratio", "cosine_constant_lr_ratio", "lr_div_factor", "lr_groups", "warmup_ratio",
    "warmup_steps", "weight_decay", "adam_beta1", "adam_beta2", "adam_beta3", "adam_epsilon", "adam_epsilon2", "max_grad_norm",
    "optim_args", "embedding_lr", "embedding_lr_scale", "loraplus_lr_ratio", "loraplus_lr_embedding", "num_epochs", "max_steps",
    "evals_per_epoch", "eval_steps", "eval_strategy", "eval_batch_size", "eval_sample_packing", "eval_sequence_len",
    "eval_table_size", "eval_max_new_tokens", "eval_causal_lm_metrics", "do_causal_lm_eval", "do_bench_eval", "bench_dataset",
    "bench_split", "saves_per_epoch", "save_steps", "save_strategy", "save_total_limit", "save_first_step", "save_only_model",
    "logging_steps", "resume_from_checkpoint", "auto_resume_from_checkpoints", "early_stopping_patience",
    "load_best_model_at_end", "metric_for_best_model", "greater_is_better", "seed", "strict", "train_on_inputs",
    "group_by_length", "dataloader_num_workers", "dataloader_pin_memory", "dataloader_prefetch_factor", "dataloader_drop_last",
    "remove_unused_columns", "lora_alpha", "lora_model_dir", "lora_fan_in_fan_out", "peft_init_lora_weights", "peft_use_rslora",
    "is_falcon_derived_model", "is_llama_derived_model", "is_mistral_derived_model", "is_qwen_derived_model", "ddp_timeout",
    "ddp_find_unused_parameters", "ddp_broadcast_buffers", "gradient_checkpointing_kwargs", "tf32", "low_cpu_mem_usage",
    "include_tokens_per_second", "include_tkps", "profiler_steps", "profiler_steps_start", "gc_steps", "gc_collect_steps",
    "torch_empty_cache_steps", "sample_packing_bin_size", "sample_packing_group_size", "sample_packing_eff_est",
    "sample_packing_sequentially", "sample_packing_mp_start_method", "min_sample_len", "max_prompt_len", "excess_length_strategy",
    "curriculum_sampling", "multipack_real_batches", "total_num_tokens", "total_supervised_tokens", "world_size", "local_rank",
    "ddp", "axolotl_config_path", "is_preprocess", "merge_lora", "merge_method", "mean_resizing_embeddings",
    "resize_token_embeddings_to_32x", "shrink_embeddings", "loss_watchdog_threshold", "loss_watchdog_patience",
    "fsdp_final_state_dict_type", "plugins", "liger_rope", "liger_layer_norm", "liger_cross_entropy", "embeddings_skip_upcast",
    "pad_to_sequence_len", "sample_packing", "gradient_checkpointing", "activation_offloading", "cls_model_config",
    "streaming", "device", "device_map", "bf16", "fp16", "bfloat16", "float16", "float32", "base_model", "base_model_config",
    "adapter", "load_in_4bit", "load_in_8bit", "lora_r", "lora_target_linear", "lora_target_modules", "lora_modules_to_save",
    "lora_dropout", "peft_use_dora", "unfrozen_parameters", "micro_batch_size", "gradient_accumulation_steps", "batch_size",
    "sequence_len", "attn_implementation", "flash_attention", "sdp_attention", "xformers_attention", "flex_attention",
    "sage_attention", "eager_attention", "torch_compile", "torch_compile_backend", "torch_compile_mode", "liger_rms_norm",
    "liger_glu_activation", "liger_fused_linear_cross_entropy", "cut_cross_entropy", "chunked_cross_entropy",
    "chunked_cross_entropy_num_chunks", "deepspeed", "fsdp", "fsdp_config", "fsdp_version", "tensor_parallel_size",
    "context_parallel_size", "sequence_parallel_degree", "expert_parallel_size", "dp_shard_size", "dp_replicate_size",
    "optimizer", "ddp_bucket_cap_mb", "fp8"};

std::string lower(std::string s) {
  for (char& ch : s) ch = static_cast<char>(std::tolower(static_cast<unsigned char>(ch)));
  return s;
}

std::string squeeze(const std::string& s) {
  std::string out;
  for (char ch : s) {
    if (ch != '-' && ch != '.' && ch != '_') out += ch;
  }
  return out;
}

/// Drops one suffix a hub id adds to a model's name ("-instruct", "-v0.1",
/// "-4k", "-2507"); false when there is none.
bool drop_suffix(std::string& n) {
  for (const char* s : {"-hf", "-fp16", "-bf16", "-instruct", "-it", "-chat", "-base", "-bnb-4bit", "-4bit", "-unsloth"}) {
    if (n.ends_with(s) && n.size() > std::string(s).size()) {
      n.resize(n.size() - std::string(s).size());
      return true;
    }
  }
  // -v0.1, -v3, -4k, -128k, -2507: a version, a context length, a date.
  const std::size_t dash = n.rfind('-');
  if (dash == std::string::npos || dash == 0) return false;
  const std::string tail = n.substr(dash + 1);
  const auto digits = [](const std::string& t) { return !t.empty() && std::all_of(t.begin(), t.end(), [](char c) { return std::isdigit(static_cast<unsigned char>(c)) || c == '.'; }); };
  const bool version = tail.size() > 1 && tail[0] == 'v' && digits(tail.substr(1));
  const bool context = tail.size() > 1 && tail.back() == 'k' && digits(tail.substr(0, tail.size() - 1));
  const bool date = tail.size() == 4 && digits(tail);
  if (!version && !context && !date) return false;
  n.resize(dash);
  return true;
}

}  // namespace

std::string axolotl_builtin_of(const std::string& hub_id) {
  std::string n = lower(hub_id.substr(hub_id.rfind('/') == std::string::npos ? 0 : hub_id.rfind('/') + 1));
  if (n.rfind("meta-", 0) == 0) n = n.substr(5);
  for (int i = 0; i < 8 && drop_suffix(n); ++i) {
  }
  const std::string key = squeeze(n);
  for (const char* b : kBuiltins) {
    if (squeeze(b) == key) return b;
  }
  return "";
}

std::vector<std::string> axolotl_builtins() { return {std::begin(kBuiltins), std::end(kBuiltins)}; }

namespace {

class Reader : detail::YamlFields {
 public:
  Reader(YAML::Node root, std::string file) : YamlFields(std::move(file)), root_(std::move(root)) {}

  FrameworkConfig read() {
    if (!root_.IsMap()) throw ConfigError(file() + ": an axolotl config is a mapping of its keys (base_model, adapter, micro_batch_size, ...)");
    fc_.framework = "axolotl";
    fc_.file = file();
    detail::OverrideList out(fc_);
    // prepare_optim_env: fsdp or fsdp_config turns FSDP on (fsdp_version alone does not), else deepspeed.
    const bool fsdp_on = given("fsdp") || given("fsdp_config");
    if (fsdp_on && given("deepspeed")) {
      fail(root_["deepspeed"], "deepspeed", "given beside fsdp or fsdp_config; transformers' Trainer runs one of DeepSpeed and FSDP; give one");
    }
    distributed_ = fsdp_on ? "fsdp" : given("deepspeed") ? "deepspeed" : "ddp";
    fc_.own_distribution = distributed_ != "ddp";
    // DeepSpeed's JSON first: axolotl's own keys fill its "auto" and win.
    if (distributed_ == "deepspeed") deepspeed(out);
    model(out);
    batch(out);
    precision(out);
    memory(out);
    optimizer(out);
    if (distributed_ == "fsdp") fsdp(out);
    parallel(out);
    detail::hf_trainer_tail(root_, out, fc_, "axolotl", silent);
    out.finish();
    return fc_;
  }

 private:
  static bool unset(const YAML::Node& n) { return detail::yaml_unset(n); }
  static bool silent(const std::string& key) {
    return std::find_if(std::begin(kSilent), std::end(kSilent), [&](const char* k) { return key == k; }) != std::end(kSilent);
  }
  bool given(const char* key) const { return !unset(root_[key]); }
  /// Whether plugins: names an axolotl plugin (axolotl.integrations.liger.LigerPlugin) by its class.
  bool plugin_(const std::string& name) const {
    const YAML::Node p = root_["plugins"];
    if (!p || !p.IsSequence()) return false;
    for (const YAML::Node& n : p) {
      if (n.IsScalar() && (n.Scalar() == name || n.Scalar().ends_with("." + name))) return true;
    }
    return false;
  }

  /// base_model and the adapter (Note [axolotl configs]).
  void model(detail::OverrideList& out) {
    const YAML::Node b = root_["base_model"];
    if (null(b)) throw ConfigError(file() + ": base_model: missing; an axolotl config names its model (NousResearch/Meta-Llama-3.1-8B)");
    const std::string id = word(b, "base_model");
    // A local model: its config.json (base_model_config names another);
    // else the built-in, else the hub id itself (the loader's one line on
    // fetching it where the HuggingFace cache has none).
    const YAML::Node bc = root_["base_model_config"];
    fc_.model = detail::hf_model_of({null(bc) ? std::string() : word(bc, "base_model_config"), id}, id, file());
    const YAML::Node a = root_["adapter"];
    const std::string adapter = unset(a) ? "" : word(a, "adapter");
    const bool four = flag(root_["load_in_4bit"], "load_in_4bit", false);
    const bool eight = flag(root_["load_in_8bit"], "load_in_8bit", false);
    if (adapter.empty()) {
      if (four || eight) fc_.unmodelled.push_back(std::string(four ? "load_in_4bit" : "load_in_8bit") + "=true without an adapter (priced in the training precision)");
      for (const char* k : {"lora_r", "lora_target_modules", "lora_target_linear"}) {
        if (given(k)) fail(root_[k], k, "is an adapter's; the config sets no adapter (adapter: lora or qlora)");
      }
      if (given("unfrozen_parameters")) fc_.unmodelled.push_back("unfrozen_parameters (only some weights trained: priced as all)");
      return;
    }
    if (adapter != "lora" && adapter != "qlora") {
      fail(a, "adapter", "'" + adapter + "'; valid: lora, qlora (dtsim prices LoRA and QLoRA; llama-adapter and others are not modelled)");
    }
    peft_ = true;
    // loaders/model.py: bitsandbytes' NF4 config only for adapter qlora with
    // load_in_4bit (which the schema requires of qlora), its 8-bit one only
    // for adapter lora with load_in_8bit; a checkpoint already quantized
    // (a hub id ending -bnb-4bit) brings its own 4-bit config.
    if (adapter == "qlora" && !four) fail(a, "adapter", "qlora needs load_in_4bit: true (axolotl: \"Require cfg.load_in_4bit to be True for qlora\")");
    const bool prequantized = lower(id).ends_with("-bnb-4bit");
    const bool nf4 = adapter == "qlora" || prequantized;
    const bool int8 = !nf4 && eight;  // Note [8-bit base] (models/src/peft.cpp)
    out.model("peft", nf4 ? "qlora" : int8 ? "lora_int8" : "lora",
              int8 ? from(root_["load_in_8bit"], "load_in_8bit")
                   : from(a, "adapter") + (prequantized && adapter == "lora" ? " (a -bnb-4bit checkpoint: its base in NF4)" : ""));
    if (adapter == "lora" && four && !prequantized) fc_.unmodelled.push_back("load_in_4bit=true with adapter lora (axolotl quantizes only for qlora: a 16-bit base)");
    const YAML::Node r = root_["lora_r"];
    if (null(r)) fail(a, "lora_r", "missing; axolotl passes it to PEFT's LoraConfig(r=), which needs a rank (8, 16, 32, ...)");
    out.model("lora_rank", std::to_string(count(r, "lora_r")), from(r, "lora_r"));
    // The targets: lora_target_modules, and with lora_target_linear every linear but the head.
    std::vector<std::string> targets;
    const auto add = [&](const std::string& t) {
      if (std::find(targets.begin(), targets.end(), t) == targets.end()) targets.push_back(t);
    };
    const auto& kLinear = detail::kHfLinear;
    const YAML::Node tm = root_["lora_target_modules"];
    if (!unset(tm)) {
      if (tm.IsScalar()) {
        fc_.unmodelled.push_back("lora_target_modules=" + tm.Scalar() + " (a pattern: priced as every linear layer, lora_target_linear)");
        for (const char* t : kLinear) add(t);
      } else if (tm.IsSequence()) {
        for (const YAML::Node& t : tm) {
          const std::string w = word(t, "lora_target_modules");
          if (std::find_if(std::begin(kLinear), std::end(kLinear), [&](const char* k) { return w == k; }) != std::end(kLinear)) {
            add(w);
          } else {
            fc_.unmodelled.push_back("lora_target_modules " + w + " (its adapter is not priced; dtsim's: q_proj, k_proj, v_proj, o_proj, gate_proj, up_proj, down_proj)");
          }
        }
      } else {
        fail(tm, "lora_target_modules", "expected a list of module names (q_proj, v_proj, ...)");
      }
    }
    const YAML::Node tl = root_["lora_target_linear"];
    if (flag(tl, "lora_target_linear", false)) {
      for (const char* t : kLinear) add(t);
    }
    if (targets.empty()) {
      fail(unset(tm) ? a : tm, "lora_target_modules", "names no module dtsim prices and lora_target_linear is not true: no adapter to train "
                                                     "(valid: q_proj, k_proj, v_proj, o_proj, gate_proj, up_proj, down_proj)");
    }
    std::string list;
    for (const auto& t : targets) list += (list.empty() ? "" : ",") + t;
    out.model("lora_targets", "[" + list + "]", from(unset(tm) ? tl : tm, unset(tm) ? "lora_target_linear" : "lora_target_modules"));
    if (given("lora_modules_to_save")) {
      fc_.unmodelled.push_back("lora_modules_to_save (those modules trained whole beside the adapters: their gradients and optimizer states are not priced)");
    }
    if (flag(root_["peft_use_dora"], "peft_use_dora", false)) fc_.unmodelled.push_back("peft_use_dora=true (priced as LoRA)");
    if (const YAML::Node d = root_["lora_dropout"]; !null(d) && d.IsScalar() && std::strtod(d.Scalar().c_str(), nullptr) != 0.0) {
      fc_.unmodelled.push_back("lora_dropout=" + d.Scalar() + " (the adapters' dropout is not priced)");
    }
    if (given("unfrozen_parameters")) fc_.unmodelled.push_back("unfrozen_parameters (beside an adapter: not priced)");
  }

  /// Batch and sequence.
  void batch(detail::OverrideList& out) {
    const YAML::Node mb = root_["micro_batch_size"];
    const YAML::Node ga = root_["gradient_accumulation_steps"];
    const YAML::Node bs = root_["batch_size"];
    std::int64_t micro = 0;
    if (!null(mb)) {
      micro = count(mb, "micro_batch_size");
      out.plan("micro_batch", std::to_string(micro), from(mb, "micro_batch_size"));
    }
    if (!null(ga)) {
      out.plan("grad_accum", std::to_string(count(ga, "gradient_accumulation_steps")), from(ga, "gradient_accumulation_steps"));
    } else if (!null(bs)) {
      // normalize_config: gradient_accumulation_steps = batch_size // micro_batch_size.
      const std::int64_t b = count(bs, "batch_size");
      if (micro == 0) fail(bs, "batch_size", "given without micro_batch_size; axolotl divides it by micro_batch_size");
      if (b < micro) fail(bs, "batch_size", std::to_string(b) + " is below micro_batch_size " + std::to_string(micro) + "; it is micro_batch_size x gradient_accumulation_steps");
      out.plan("grad_accum", std::to_string(b / micro), from(bs, "batch_size") + " (batch_size // micro_batch_size)");
    }
    const YAML::Node sl = root_["sequence_len"];
    out.plan("seq_len", null(sl) ? "512" : std::to_string(count(sl, "sequence_len")),
             null(sl) ? file() + " (sequence_len, axolotl's default 512)" : from(sl, "sequence_len"));
    if (flag(root_["sample_packing"], "sample_packing", false)) {
      fc_.unmodelled.push_back("sample_packing=true (each sample attends within itself: set plan.document_len to their length)");
    } else if (!flag(root_["pad_to_sequence_len"], "pad_to_sequence_len", false)) {
      fc_.unmodelled.push_back("sample_packing unset (each batch padded to its longest sample: priced at sequence_len)");
    }
  }

  /// resolve_dtype, and who holds master weights (Note [axolotl configs]).
  void precision(detail::OverrideList& out) {
    const YAML::Node bf = root_["bf16"];
    const bool fp16 = flag(root_["fp16"], "fp16", false);
    std::string p;
    YAML::Node at;  // where the precision came from (reset: assigning would write into the tree)
    std::string key = "bf16";
    bool amp = true;
    if (!bf.IsDefined() || (bf.IsScalar() && !bf.IsNull() && lower(bf.Scalar()) == "auto")) {
      // bf16 absent is "auto" (the schema's default): bf16 on a GPU that
      // has it, unless fp16; bf16 written null is None, no bf16.
      if (!fp16) p = "bf16", at.reset(bf);
    } else if (flag(bf, "bf16", false)) {
      p = "bf16", at.reset(bf);
    }
    if (p.empty() && fp16) p = "fp16", key = "fp16", at.reset(root_["fp16"]);
    // bfloat16, float16: the model in that type without autocast.
    if (p.empty() && flag(root_["bfloat16"], "bfloat16", false)) p = "bf16", key = "bfloat16", amp = false, at.reset(root_["bfloat16"]);
    if (p.empty() && flag(root_["float16"], "float16", false)) p = "fp16", key = "float16", amp = false, at.reset(root_["float16"]);
    if (p.empty()) p = "fp32";
    if (flag(root_["fp8"], "fp8", false)) fc_.unmodelled.push_back("fp8=true (torchao's float8 training: priced in " + p + ")");
    const std::string origin = !null(at) ? from(at, key)
                               : p == "bf16" ? file() + " (bf16 unset: axolotl's auto, bf16 on a GPU that has it)"
                                             : file() + " (bf16 false, no fp16: fp32)";
    out.plan("precision", p, origin);
    // tf32 (auto: on where the GPU has it) sets torch's fp32 matmul precision to high.
    if (p == "fp32" && (!root_["tf32"].IsDefined() || !unset(root_["tf32"]))) {
      fc_.unmodelled.push_back("tf32 (fp32 matmuls on TF32 tensor cores: priced on the FP32 units, PyTorch's default)");
    }
    // Weights in the loaded type and no master copy where nothing upcasts
    // them: one GPU or DDP, a full fine-tune; or no autocast at all, but
    // where DeepSpeed keeps fp32 masters of what it trains (its ZeRO's
    // partitions, or its fp16 or bf16 optimizer at stage 0).
    if (p != "fp32" && ((distributed_ == "ddp" && !peft_) || !amp) && !ds_masters_) {
      out.plan("master_weights", "false", origin + " (the model loaded in " + p + ", its optimizer states too)");
    }
  }

  /// Checkpointing, attention, kernels and the loss.
  void memory(detail::OverrideList& out) {
    const YAML::Node gc = root_["gradient_checkpointing"];
    // Note [axolotl's activation offloading]: the deprecated offload words
    // of gradient_checkpointing are activation_offloading true and disk.
    std::string offload, offload_key;
    YAML::Node offload_at;
    if (!unset(gc)) {
      const std::string g = lower(word(gc, "gradient_checkpointing"));
      if (g == "offload" || g == "offload_disk") {
        offload = g == "offload" ? "true" : "disk";
        offload_at.reset(gc);
        offload_key = "gradient_checkpointing";
      } else if (g != "true" && g != "yes" && g != "on") {
        fail(gc, "gradient_checkpointing", "'" + gc.Scalar() + "'; valid: true, false, offload, offload_disk");
      }
      out.plan("recompute", "full", from(gc, "gradient_checkpointing"));
    }
    if (const YAML::Node ao = root_["activation_offloading"]; !unset(ao)) {
      const std::string a = lower(word(ao, "activation_offloading"));
      offload = a == "yes" || a == "on" ? "true" : a;
      offload_at.reset(ao);
      offload_key = "activation_offloading";
      if (offload != "true" && offload != "legacy" && offload != "disk" && offload != "hidden_states") {
        fail(ao, "activation_offloading", "'" + ao.Scalar() + "'; valid: true, false, legacy, disk, hidden_states");
      }
      if (unset(gc)) fail(ao, "activation_offloading", "without gradient_checkpointing; axolotl refuses it (\"activation_offloading requires gradient_checkpointing\")");
    }
    if (!offload.empty()) {
      const std::string at = from(offload_at, offload_key);
      out.plan("enable_activation_offloading", "true", at);
      if (peft_ && (offload == "true" || offload == "disk")) {
        // TRL's offloader replaces recompute beside an adapter (its
        // trainer turns HF's checkpointing off; loaders/model.py wraps
        // only a full fine-tune).
        out.plan("recompute", "none", at + " (TRL's offloader in place of recompute, beside an adapter)");
      }
      if (offload == "disk") fc_.unmodelled.push_back("activation_offloading=disk (to disk: priced as host memory)");
      if (offload == "legacy") fc_.unmodelled.push_back("activation_offloading=legacy (synchronous copies: priced on a stream of their own)");
    }
    // Attention: eager materialises the scores; every other kernel does not.
    const YAML::Node ai = root_["attn_implementation"];
    const bool eager = (!null(ai) && word(ai, "attn_implementation") == "eager") || flag(root_["eager_attention"], "eager_attention", false);
    if (eager) out.plan("attention", "eager", from(null(ai) ? root_["eager_attention"] : ai, null(ai) ? "eager_attention" : "attn_implementation"));
    // Kernels: torch.compile, or Liger's norm and SwiGLU together.
    const YAML::Node tc = root_["torch_compile"];
    const bool compiled = !null(tc) && (lower(word(tc, "torch_compile")) == "auto" || flag(tc, "torch_compile", false));
    const bool liger_keys = flag(root_["liger_rms_norm"], "liger_rms_norm", false) && flag(root_["liger_glu_activation"], "liger_glu_activation", false);
    const bool liger = liger_keys && plugin_("LigerPlugin");
    if (liger_keys && !liger) fc_.unmodelled.push_back("liger_rms_norm, liger_glu_activation without axolotl's LigerPlugin in plugins (not applied)");
    if (compiled || liger) out.plan("kernels", "fused", compiled ? from(tc, "torch_compile") : from(root_["liger_rms_norm"], "liger_rms_norm"));
    if (!liger_keys && (flag(root_["liger_rms_norm"], "liger_rms_norm", false) || flag(root_["liger_glu_activation"], "liger_glu_activation", false))) {
      fc_.unmodelled.push_back("liger_rms_norm or liger_glu_activation alone (fused kernels are priced for the two together)");
    }
    // The loss: Liger's or Apple's fused kernel (Note [Fused linear
    // cross-entropy]); their keys are their plugins' (integrations/config.py).
    const bool tp = given("tensor_parallel_size") && count(root_["tensor_parallel_size"], "tensor_parallel_size") > 1;
    if (flag(root_["liger_fused_linear_cross_entropy"], "liger_fused_linear_cross_entropy", false) &&
        flag(root_["cut_cross_entropy"], "cut_cross_entropy", false)) {
      fail(root_["cut_cross_entropy"], "cut_cross_entropy", "given beside liger_fused_linear_cross_entropy; axolotl runs one cross-entropy "
                                                            "optimization at a time (\"Only one cross entropy optimization can be enabled\")");
    }
    for (const auto& [k, kernel, plugin] : {std::tuple{"liger_fused_linear_cross_entropy", "liger_fused_linear", "LigerPlugin"},
                                            std::tuple{"cut_cross_entropy", "cut_cross_entropy", "CutCrossEntropyPlugin"}}) {
      if (!flag(root_[k], k, false)) continue;
      if (!plugin_(plugin)) {
        fc_.unmodelled.push_back(std::string(k) + "=true without axolotl's " + plugin + " in plugins (not applied)");
      } else if (tp) {
        fc_.unmodelled.push_back(std::string(k) + "=true with tensor_parallel_size (priced as one cross-entropy)");
      } else {
        out.plan("loss_kernel", kernel, from(root_[k], k));
      }
    }
    if (flag(root_["liger_cross_entropy"], "liger_cross_entropy", false) && plugin_("LigerPlugin")) {
      fc_.unmodelled.push_back("liger_cross_entropy=true (Liger's cross-entropy over the whole logits: priced as PyTorch's)");
    }
    if (flag(root_["chunked_cross_entropy"], "chunked_cross_entropy", false)) {
      fc_.unmodelled.push_back("chunked_cross_entropy=true (the logits made whole, the loss alone chunked: priced unchunked)");
    }
  }

  /// optimizer: transformers' OptimizerNames.
  void optimizer(detail::OverrideList& out) {
    const YAML::Node o = root_["optimizer"];
    if (null(o)) {
      // transformers' TrainingArguments default: adamw_torch (fused where it can).
      out.plan("optimizer", "adamw", file() + " (optimizer unset: transformers' adamw_torch)");
      return;
    }
    detail::hf_optimizer(out, fc_, "optimizer", lower(word(o, "optimizer")), from(o, "optimizer"), host_adam_);
  }

  /// deepspeed: a DeepSpeed JSON, read as --deepspeed reads it.
  void deepspeed(detail::OverrideList& out) {
    const FrameworkConfig ds =
        detail::deepspeed_at(root_["deepspeed"], *this, "deepspeed", "; `axolotl fetch deepspeed_configs` writes axolotl's own");
    ds_masters_ = detail::deepspeed_keeps_masters(ds);
    detail::merge_hf_deepspeed(ds, out, fc_, host_adam_);
  }

  /// fsdp_config through accelerate (Note [axolotl configs]).
  void fsdp(detail::OverrideList& out) {
    fc_.plan = "fsdp";
    const YAML::Node c = root_["fsdp_config"];
    if (!null(c) && !c.IsMap()) fail(c, "fsdp_config", "expected a mapping of FSDP's settings (fsdp_version, offload_params, ...)");
    // A key with or without its fsdp_ prefix (check_fsdp_config_kwargs_prefix).
    const auto key = [&](const std::string& k) -> YAML::Node {
      if (null(c)) return YAML::Node();
      if (const YAML::Node n = c[k]; n) return n;
      return c["fsdp_" + k];
    };
    const YAML::Node top = root_["fsdp_version"];
    const YAML::Node v = null(top) ? key("version") : top;
    const std::int64_t version = null(v) ? 1 : count(v, "fsdp_version");
    if (version != 1 && version != 2) fail(v, "fsdp_version", std::to_string(version) + "; valid: 1, 2");
    const YAML::Node rep = root_["dp_replicate_size"];
    const bool hsdp = !null(rep) && count(rep, "dp_replicate_size") > 1;
    out.plan("fsdp", hsdp ? "hybrid_shard" : "full_shard", hsdp ? from(rep, "dp_replicate_size") : file() + " (accelerate's FULL_SHARD)");
    if (hsdp) {
      fc_.unmodelled.push_back("dp_replicate_size=" + rep.Scalar() + " (HSDP priced as dtsim's hybrid_shard: sharded within each node, "
                               "replicated across nodes)");
    }
    // The deprecated fsdp: list goes to TrainingArguments(fsdp=...), which
    // sets accelerate's FSDP_SHARDING_STRATEGY and FSDP_OFFLOAD_PARAMS from
    // its words (transformers' training_args.py).
    if (const YAML::Node l = root_["fsdp"]; !unset(l)) detail::hf_fsdp_words(l, *this, out, fc_, peft_);
    if (const YAML::Node s = key("sharding_strategy"); !null(s) && lower(word(s, "fsdp_config.sharding_strategy")) != "full_shard" &&
                                                        lower(s.Scalar()) != "1") {
      fc_.unmodelled.push_back("fsdp_config.sharding_strategy=" + s.Scalar() + " (axolotl does not pass it to accelerate: FULL_SHARD runs)");
    }
    if (const YAML::Node r = key("reshard_after_forward"); !null(r) && !flag(r, "fsdp_config.reshard_after_forward", true)) {
      fc_.unmodelled.push_back("fsdp_config.reshard_after_forward=false (axolotl passes it only when true: resharded, accelerate's default)");
    }
    if (peft_ && version == 1) {
      out.plan("fsdp_version", "2", from(null(v) ? c : v, "fsdp_version") + " (FSDP1 beside a LoRA: priced as FSDP2)");
      fc_.unmodelled.push_back("fsdp_version=1 with an adapter (PEFT's fsdp_auto_wrap_policy, each adapter a unit: priced as FSDP2's sharding of the same bytes, "
                               "the adapters' own small collectives not priced)");
    } else {
      out.plan("fsdp_version", std::to_string(version), null(v) ? file() + " (fsdp_version, axolotl's default 1)" : from(v, "fsdp_version"));
    }
    if (const YAML::Node o = key("offload_params"); flag(o, "fsdp_config.offload_params", false)) {
      out.plan("offload_params", "cpu", from(o, "fsdp_config.offload_params"));
      out.plan("offload_optimizer", "cpu", from(o, "fsdp_config.offload_params"));
    }
    if (const YAML::Node a = key("activation_checkpointing"); flag(a, "fsdp_config.activation_checkpointing", false)) {
      out.plan("recompute", "full", from(a, "fsdp_config.activation_checkpointing"));
    }
    if (const YAML::Node w = key("auto_wrap_policy"); !null(w) && word(w, "fsdp_config.auto_wrap_policy") != "TRANSFORMER_BASED_WRAP") {
      fc_.unmodelled.push_back("fsdp_config.auto_wrap_policy=" + w.Scalar() + " (priced as TRANSFORMER_BASED_WRAP, a unit a decoder layer)");
    }
  }

  /// tensor, context and expert parallelism, DDP's buckets.
  void parallel(detail::OverrideList& out) {
    if (given("tensor_parallel_size")) out.plan("tp", std::to_string(count(root_["tensor_parallel_size"], "tensor_parallel_size")), from(root_["tensor_parallel_size"], "tensor_parallel_size"));
    // context_parallel_size, or its older name sequence_parallel_degree where it is not given.
    for (const char* k : {"sequence_parallel_degree", "context_parallel_size"}) {
      if (given(k)) out.plan("cp", std::to_string(count(root_[k], k)), from(root_[k], k));
    }
    if (given("expert_parallel_size")) out.plan("ep", std::to_string(count(root_["expert_parallel_size"], "expert_parallel_size")), from(root_["expert_parallel_size"], "expert_parallel_size"));
    if (given("dp_replicate_size") && distributed_ != "fsdp") {
      fc_.unmodelled.push_back("dp_replicate_size without FSDP (priced as one data-parallel group)");
    }
    if (distributed_ == "ddp") {
      fc_.plan = "ddp";
      if (given("ddp_bucket_cap_mb")) out.plan("bucket_mb", std::to_string(count(root_["ddp_bucket_cap_mb"], "ddp_bucket_cap_mb")), from(root_["ddp_bucket_cap_mb"], "ddp_bucket_cap_mb"));
    }
  }

  YAML::Node root_;
  FrameworkConfig fc_;
  std::string distributed_;  ///< "ddp", "fsdp" or "deepspeed"
  bool host_adam_ = false;   ///< the deepspeed config offloads the optimizer (ZeRO-Offload)
  bool ds_masters_ = false;  ///< DeepSpeed keeps fp32 masters (detail::deepspeed_keeps_masters)
  bool peft_ = false;        ///< an adapter
};

}  // namespace

FrameworkConfig parse_axolotl_config(const std::string& yaml_text, const std::string& file) {
  if (yaml_text.size() > kMaxConfigBytes) throw ConfigError(file + ": larger than a config may be");
  return Reader(parse_config_text(yaml_text, file, false), file).read();
}

FrameworkConfig read_axolotl_config(const std::string& path) { return parse_axolotl_config(detail::read_config_text(path), path); }

}  // namespace dtsim::sim
