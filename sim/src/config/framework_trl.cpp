// A TRL training config (the YAML `trl sft --config FILE` reads) into
// dtsim's plan and model keys (Note [Framework configs] in
// framework_config.cpp).
//
// Note [TRL configs]
// TRL's CLI fills its script's dataclasses from one flat mapping: for sft,
// ScriptArguments, SFTConfig (transformers' TrainingArguments with TRL's
// defaults), ModelConfig and DatasetMixtureConfig; what none of them takes
// goes to `accelerate launch` (trl/scripts/utils.py TrlParser.
// parse_args_and_config, trl/cli/commands/training.py; trl/trainer/
// sft_config.py, base_config.py, model_config.py, sft_trainer.py,
// utils.py get_peft_config, get_quantization_config; all read at f2cd5771
// for this note):
// - model_name_or_path (required) is a hub id or a local directory, read as
//   axolotl's base_model is (Note [axolotl configs]).
// - dtype (torch_dtype before it, said: TRL now hands that name to the
//   launcher) is the dtype the model is loaded in:
//   float32 by default ("If `dtype` is not specified ... it defaults to
//   `float32`"), bfloat16, float16, or auto (the checkpoint's: priced as
//   bfloat16, said). sft.py replaces SFTConfig's model_init_kwargs with
//   ModelConfig's dtype and attn_implementation: one the YAML gives is said.
// - bf16 is true unless fp16 (_BaseConfig.__post_init__): autocast, which
//   TrainingArguments writes into ACCELERATE_MIXED_PRECISION over what an
//   accelerate config says (FrameworkConfig::binding_defaults). A full
//   fine-tune loaded in fp32 is autocast over fp32 weights: dtsim's master
//   copies. Loaded in bfloat16 under bf16, or with neither bf16 nor fp16,
//   the weights are stepped as they are, their optimizer states in the
//   load dtype (plan.master_weights false), under DDP: DeepSpeed keeps fp32
//   partitions and accelerate upcasts what FSDP trains (Note [accelerate
//   under a trainer]). fp16 autocast over fp16 weights all trained is
//   refused under DDP, as PyTorch's GradScaler refuses it ("Attempting to
//   unscale FP16 gradients.").
// - use_peft (false) trains LoRA: lora_r (16), lora_target_modules (unset:
//   PEFT's default for the model's type, TRANSFORMERS_MODELS_TO_LORA_
//   TARGET_MODULES_MAPPING, read at peft 5d602fdb: q_proj and v_proj for
//   Llama-style types, gpt2's c_attn, nemotron_h's four projections, and
//   refused for the types it has none for, as PEFT refuses them; a list of
//   names; one string, which ModelConfig makes of a list of one and PEFT
//   full-matches against whole module paths: all-linear, every nn.Linear
//   but the head, a pattern priced as all-linear and said, or a plain name
//   refused, as it matches nothing). The base loaded in fp32 under autocast
//   is `peft: lora_fp32` (Note [fp32 base] in models/src/peft.cpp), but
//   under DeepSpeed, which casts the module to 16 bits, or a sharding FSDP
//   (priced in 16 bits, said). load_in_4bit is QLoRA's NF4 base (model.peft
//   qlora; TRL's use_bnb_nested_quant defaults to false, priced double-
//   quantized and said), load_in_8bit LLM.int8's (lora_int8); either
//   without use_peft is refused (a quantized model trains no weight), both
//   are refused as ModelConfig refuses them, and over a quantized base TRL
//   casts the adapters to bf16 (plan.master_weights false, under DDP).
//   lora_modules_to_save, lora_target_parameters, DoRA and the adapters'
//   dropout (0.05 by default) are listed where written.
// - per_device_train_batch_size (8) and gradient_accumulation_steps (1);
//   max_length (1024; max_seq_length before TRL 0.20, said) is the sequence,
//   null none (priced at the model's maximum, said). packing with
//   packing_strategy bfd (the default) or bfd_split runs padding-free, each
//   sample attending within itself (said: set plan.document_len); wrapped
//   concatenates samples that attend across each other: one sequence,
//   exactly. Unpacked, each batch is padded to its longest sample, priced
//   at max_length (said).
// - gradient_checkpointing is true by default (plan.recompute full);
//   activation_offloading (TRL's OffloadActivations over what autograd
//   saves: the checkpoints, or with gradient_checkpointing false every
//   saved tensor) is plan.enable_activation_offloading.
//   attn_implementation eager keeps the scores (plan.attention eager).
// - loss_type: chunked_nll by default, nll under use_liger_kernel
//   (plan.loss_kernel chunked_nll, Note [Fused linear cross-entropy]; its
//   chunks project h.float() @ w.float(), in fp32 where nothing autocasts:
//   under DeepSpeed's engine, which accelerate runs without autocast
//   (Accelerator.native_amp), or over 16-bit weights with neither bf16 nor
//   fp16: chunked_nll_fp32); nll and dft are PyTorch's cross-entropy, dft
//   under Liger its fused loss (use_token_scaling); chunked_nll with
//   use_liger_kernel, and with an adapter on lm_head, are refused as TRL
//   refuses them. use_liger_kernel applies Liger's kernels (plan.kernels
//   fused, plan.loss_kernel liger_fused_linear) to the model types Liger
//   patches (of dtsim's built-ins, not gpt2, DeepSeek-V2 and V3, GLM-4.5,
//   GLM-5, MiniMax-M2, Nemotron-H and Kimi: said, not applied);
//   torch_compile is plan.kernels fused.
// - deepspeed (a file from the working directory or beside the config, or
//   the mapping) and fsdp with fsdp_config are TrainingArguments' own, read
//   as LLaMA-Factory's are; else DDP, with ddp_bucket_cap_mb. optim:
//   transformers' names (detail::hf_optimizer).
// - accelerate_config (the launcher's, from what no dataclass takes): one
//   of TRL's built-ins (trl/accelerate_configs: single_gpu, multi_gpu,
//   zero1, zero2, zero3, fsdp1, fsdp2; each bf16 over 8 processes, fsdp1
//   FULL_SHARD with backward and forward prefetch, fsdp2 resharding after
//   forward, zero3 with zero3_init) or an accelerate config's path, folded
//   in as `--accelerate` folds one (Note [accelerate under a trainer]);
//   num_processes, a launcher flag, is plan.dp over it (beside its tp or
//   cp, left to --set plan.dp and said). Other launcher flags are listed.
// Keys that set no cost (datasets, logging, learning rates, checkpoints,
// evaluation, the hub) are read silently; any other key given is listed.
// transformers' Trainer runs no pipeline and no forward parameter gather:
// pp 1 and overlap_param_gather false, which a search keeps.
#include <algorithm>
#include <cctype>
#include <filesystem>
#include <string>
#include <vector>

#include "dtsim/sim/config_node.hpp"
#include "dtsim/sim/error.hpp"
#include "dtsim/sim/framework_config.hpp"
#include "framework_common.hpp"

namespace dtsim::sim {
namespace {

/// Keys that set no cost, read without a word (TRL's dataclasses' and
/// transformers' TrainingArguments').
constexpr const char* kSilent[] = {
    "dataset_name", "dataset_config", "dataset_train_split", "dataset_test_split", "dataset_streaming", "datasets", "streaming",
    "test_split_size", "gradient_checkpointing_use_reentrant", "ignore_bias_buffers", "env", "model_revision", "trust_remote_code",
    "chat_template_path", "dataset_text_field", "dataset_kwargs", "dataset_num_proc", "eos_token", "pad_token", "truncation_mode",
    "shuffle_dataset", "eval_packing", "completion_only_loss", "assistant_only_loss", "pad_to_multiple_of", "lora_alpha", "use_rslora",
    "lora_task_type", "bnb_4bit_quant_type", "bnb_4bit_quant_storage", "router_aux_loss_coef", "output_dir", "overwrite_output_dir",
    "do_train", "do_eval", "do_predict", "report_to", "run_name", "learning_rate", "lr_scheduler_type", "lr_scheduler_kwargs",
    "warmup_ratio", "warmup_steps", "weight_decay", "adam_beta1", "adam_beta2", "adam_epsilon", "max_grad_norm", "num_train_epochs",
    "max_steps", "seed", "data_seed", "per_device_eval_batch_size", "eval_strategy", "evaluation_strategy", "remove_unused_columns",
    "gradient_checkpointing_kwargs", "ddp_timeout", "ddp_find_unused_parameters", "ddp_backend", "ddp_broadcast_buffers", "local_rank",
    "resume_from_checkpoint", "load_best_model_at_end", "metric_for_best_model", "greater_is_better", "label_names",
    "label_smoothing_factor", "log_level", "log_level_replica", "disable_tqdm", "ignore_data_skip", "torch_empty_cache_steps",
    "group_by_length", "length_column_name", "optim_args", "torch_compile_backend", "torch_compile_mode", "use_cpu", "no_cuda",
    "bf16_full_eval", "fp16_full_eval", "prediction_loss_only", "skip_memory_metrics", "average_tokens_across_devices",
    "accelerator_config", "main_process_port", "main_process_ip", "machine_rank", "num_machines",
    // The keys read below.
    "model_name_or_path", "dtype", "torch_dtype", "attn_implementation", "model_init_kwargs", "use_peft", "lora_r",
    "lora_target_modules", "lora_target_parameters", "lora_modules_to_save", "lora_dropout", "use_dora", "load_in_4bit",
    "load_in_8bit", "use_bnb_nested_quant", "per_device_train_batch_size", "gradient_accumulation_steps", "max_length",
    "max_seq_length", "packing", "packing_strategy", "padding_free", "bf16", "fp16", "tf32", "gradient_checkpointing",
    "activation_offloading", "use_liger_kernel", "liger_kernel_config", "loss_type", "torch_compile", "optim", "deepspeed", "fsdp",
    "fsdp_config", "ddp_bucket_cap_mb", "accelerate_config", "num_processes"};

/// Prefixes of groups of keys that set no cost.
constexpr const char* kSilentPrefixes[] = {"logging_", "save_", "eval_", "push_", "hub_", "dataloader_", "include_", "trackio_",
                                           "wandb_"};

/// dtsim's built-ins whose model types Liger does not patch
/// (liger_kernel/transformers/monkey_patch.py MODEL_TYPE_TO_APPLY_LIGER_FN).
constexpr const char* kNoLiger[] = {"gpt2", "deepseek-v2", "deepseek-v3", "glm-4.5", "glm-5", "minimax", "nemotron-h", "nemotron-nano",
                                    "nemotron-3", "kimi"};

/// TRL's built-in accelerate configs (trl/accelerate_configs/NAME.yaml), as
/// the keys dtsim reads of them (Note [TRL configs]).
struct BuiltinAccelerate {
  const char* name;
  const char* text;
};
constexpr BuiltinAccelerate kAccelerate[] = {
    {"single_gpu", "distributed_type: \"NO\"\nmixed_precision: bf16\nnum_processes: 8\n"},
    {"multi_gpu", "distributed_type: MULTI_GPU\nmixed_precision: bf16\nnum_processes: 8\n"},
    {"zero1", "distributed_type: DEEPSPEED\ndeepspeed_config:\n  zero_stage: 1\n  gradient_accumulation_steps: 1\nmixed_precision: bf16\nnum_processes: 8\n"},
    {"zero2", "distributed_type: DEEPSPEED\ndeepspeed_config:\n  zero_stage: 2\n  offload_optimizer_device: none\n  offload_param_device: none\n"
              "mixed_precision: bf16\nnum_processes: 8\n"},
    {"zero3", "distributed_type: DEEPSPEED\ndeepspeed_config:\n  zero_stage: 3\n  offload_optimizer_device: none\n  offload_param_device: none\n"
              "mixed_precision: bf16\nnum_processes: 8\n"},
    {"fsdp1", "distributed_type: FSDP\nfsdp_config:\n  fsdp_version: 1\n  fsdp_auto_wrap_policy: TRANSFORMER_BASED_WRAP\n"
              "  fsdp_backward_prefetch: BACKWARD_PRE\n  fsdp_forward_prefetch: true\n  fsdp_offload_params: false\n"
              "  fsdp_reshard_after_forward: FULL_SHARD\n  fsdp_activation_checkpointing: false\nmixed_precision: bf16\nnum_processes: 8\n"},
    {"fsdp2", "distributed_type: FSDP\nfsdp_config:\n  fsdp_version: 2\n  fsdp_auto_wrap_policy: TRANSFORMER_BASED_WRAP\n"
              "  fsdp_offload_params: false\n  fsdp_reshard_after_forward: true\n  fsdp_activation_checkpointing: false\n"
              "mixed_precision: bf16\nnum_processes: 8\n"}};

/// The projections dtsim's LoRA can target.
constexpr const auto& kLinear = detail::kHfLinear;

std::string lower(std::string s) {
  for (char& ch : s) ch = static_cast<char>(std::tolower(static_cast<unsigned char>(ch)));
  return s;
}

class Reader : detail::YamlFields {
 public:
  Reader(YAML::Node root, std::string file) : YamlFields(std::move(file)), root_(std::move(root)) {}

  FrameworkConfig read() {
    if (!root_.IsMap()) throw ConfigError(file() + ": a TRL config is a mapping of its keys (model_name_or_path, use_peft, max_length, ...)");
    fc_.framework = "TRL";
    fc_.file = file();
    detail::OverrideList out(fc_);
    const bool fsdp_on = given("fsdp");
    if (fsdp_on && given("deepspeed")) {
      fail(root_["deepspeed"], "deepspeed", "given beside fsdp; transformers' Trainer runs one of DeepSpeed and FSDP; give one");
    }
    distributed_ = fsdp_on ? "fsdp" : given("deepspeed") ? "deepspeed" : "ddp";
    fc_.own_distribution = distributed_ != "ddp";
    peft_ = flag(root_["use_peft"], "use_peft", false);
    // DeepSpeed's JSON first: the trainer's own keys fill its "auto" and win.
    if (distributed_ == "deepspeed") {
      const FrameworkConfig ds = detail::deepspeed_at(root_["deepspeed"], *this, "deepspeed", "");
      detail::merge_hf_deepspeed(ds, out, fc_, host_adam_);
    }
    model(out);
    batch(out);
    precision(out);
    memory(out);
    const YAML::Node o = root_["optim"];
    if (null(o)) {
      out.plan("optimizer", "adamw", file() + " (optim unset: transformers' adamw_torch)");
    } else {
      detail::hf_optimizer(out, fc_, "optim", lower(word(o, "optim")), from(o, "optim"), host_adam_);
    }
    if (distributed_ == "fsdp") detail::hf_trainer_fsdp(root_, *this, out, fc_, peft_);
    if (distributed_ != "fsdp" && given("fsdp_config")) fc_.unmodelled.push_back("fsdp_config without fsdp (transformers runs no FSDP then)");
    if (distributed_ == "ddp") {
      fc_.plan = "ddp";
      if (given("ddp_bucket_cap_mb")) {
        out.plan("bucket_mb", std::to_string(count(root_["ddp_bucket_cap_mb"], "ddp_bucket_cap_mb")), from(root_["ddp_bucket_cap_mb"], "ddp_bucket_cap_mb"));
      }
    }
    base(out);
    if (given("model_init_kwargs")) {
      fc_.unmodelled.push_back("model_init_kwargs (trl sft replaces it with ModelConfig's dtype and attn_implementation: not read)");
    }
    if (const YAML::Node np = root_["num_processes"]; !null(np)) {
      // A launcher flag (Note [TRL configs]): the ranks, over accelerate_config's.
      out.plan("dp", std::to_string(count(np, "num_processes")), from(np, "num_processes"));
    }
    detail::hf_trainer_tail(root_, out, fc_, "TRL", silent);
    out.finish();
    return fc_;
  }

  /// accelerate_config: a built-in's name or a file's path, read; empty
  /// where the config names none.
  std::optional<FrameworkConfig> accelerate() const {
    const YAML::Node a = root_["accelerate_config"];
    if (null(a)) return std::nullopt;
    const std::string name = word(a, "accelerate_config");
    if (name.empty()) fail(a, "accelerate_config", "empty; give one of TRL's (zero3, fsdp2, ...) or an accelerate config's path");
    // TRL's resolve_accelerate_config_argument: a file first, else a built-in.
    std::error_code ec;
    if (std::filesystem::is_regular_file(name, ec)) return read_accelerate_config(name);
    for (const BuiltinAccelerate& b : kAccelerate) {
      if (name == b.name) return parse_accelerate_config(b.text, std::string("trl/accelerate_configs/") + b.name + ".yaml");
    }
    if (const std::string beside = detail::locate_beside(name, file()); !beside.empty()) return read_accelerate_config(beside);
    std::string valid;
    for (const BuiltinAccelerate& b : kAccelerate) valid += (valid.empty() ? "" : ", ") + std::string(b.name);
    fail(a, "accelerate_config", "'" + name + "' is neither a file (from the working directory or beside " + file() + ") nor one of TRL's: " + valid);
  }

  /// fp16 autocast over float16 weights all trained, where the run `merged`
  /// (this config, with its accelerate config folded in) uses neither
  /// DeepSpeed nor FSDP: PyTorch's GradScaler refuses it.
  void refuse_fp16(const FrameworkConfig& merged) const {
    if (!fp16_weights_ || merged.deepspeed || merged.plan == std::optional<std::string>("fsdp")) return;
    const char* k = !null(root_["dtype"]) ? "dtype" : "torch_dtype";
    fail(root_[k], k, "float16 beside fp16 with every weight trained; PyTorch's GradScaler refuses to unscale fp16 gradients "
                      "(\"Attempting to unscale FP16 gradients.\"): load in float32, train in bf16, or run DeepSpeed or FSDP");
  }

  /// The config gives num_processes, a launcher flag.
  bool names_processes() const { return !null(root_["num_processes"]); }

 private:
  static bool unset(const YAML::Node& n) { return detail::yaml_unset(n); }
  static bool silent(const std::string& key) {
    if (std::find_if(std::begin(kSilent), std::end(kSilent), [&](const char* k) { return key == k; }) != std::end(kSilent)) return true;
    return std::find_if(std::begin(kSilentPrefixes), std::end(kSilentPrefixes), [&](const char* p) { return key.rfind(p, 0) == 0; }) !=
           std::end(kSilentPrefixes);
  }
  bool given(const char* key) const { return !unset(root_[key]); }
  /// ModelConfig's key, or `alias`, its older name (sft.py builds
  /// model_init_kwargs from them, replacing any the YAML gives).
  YAML::Node model_key(const std::string& key, const std::string& alias, std::string& name) const {
    for (const std::string& k : {key, alias}) {
      if (!k.empty() && !null(root_[k])) {
        name = k;
        return root_[k];
      }
    }
    return YAML::Node();
  }

  /// model_name_or_path, the adapter and a quantized base.
  void model(detail::OverrideList& out) {
    const YAML::Node m = root_["model_name_or_path"];
    if (null(m)) fail(root_, "model_name_or_path", "missing; TRL's sft script loads the model it names: a hub id such as Qwen/Qwen3-8B or a directory");
    const std::string id = word(m, "model_name_or_path");
    fc_.model = detail::hf_model_of({id}, id, file());
    const bool nf4 = flag(root_["load_in_4bit"], "load_in_4bit", false);
    const bool int8 = flag(root_["load_in_8bit"], "load_in_8bit", false);
    if (nf4 && int8) fail(root_["load_in_8bit"], "load_in_8bit", "beside load_in_4bit; TRL's ModelConfig refuses both (\"You can't use 8 bit and 4 bit precision at the same time\")");
    quantized_ = nf4 || int8;
    if (!peft_) {
      if (quantized_) {
        const char* k = nf4 ? "load_in_4bit" : "load_in_8bit";
        fail(root_[k], k, "without use_peft; a quantized model trains no weight of its own (transformers' Trainer refuses to fine-tune a purely quantized model): set use_peft: true");
      }
      for (const char* k : {"lora_r", "lora_target_modules", "lora_modules_to_save", "lora_target_parameters", "use_dora"}) {
        if (given(k)) fc_.unmodelled.push_back(std::string(k) + " (an adapter's, without use_peft: not read)");
      }
      return;
    }
    peft_from_ = nf4 ? from(root_["load_in_4bit"], "load_in_4bit") : int8 ? from(root_["load_in_8bit"], "load_in_8bit") : from(root_["use_peft"], "use_peft");
    if (nf4 && !flag(root_["use_bnb_nested_quant"], "use_bnb_nested_quant", false)) {
      fc_.unmodelled.push_back("use_bnb_nested_quant false (TRL's default: an fp32 absmax a block of 64, 0.5625 bytes a weight; priced double-quantized, 0.516)");
    }
    peft_kind_ = nf4 ? "qlora" : int8 ? "lora_int8" : "lora";
    const YAML::Node r = root_["lora_r"];
    out.model("lora_rank", null(r) ? "16" : std::to_string(count(r, "lora_r")), null(r) ? file() + " (lora_r, TRL's default 16)" : from(r, "lora_r"));
    // lora_target_modules: unset (PEFT's per model type), all-linear, names,
    // or a pattern; ModelConfig makes a list of one its one string.
    const YAML::Node t = root_["lora_target_modules"];
    std::vector<std::string> names;
    std::string origin = from(t, "lora_target_modules");
    std::string one;  // a string: PEFT full-matches it against module paths
    if (null(t)) {
      names = default_targets(origin);
    } else if (t.IsSequence() && t.size() != 1) {
      for (const YAML::Node& n : t) names.push_back(word(n, "lora_target_modules"));
    } else {
      one = t.IsSequence() ? word(t[0], "lora_target_modules") : word(t, "lora_target_modules");
    }
    if (!one.empty() && lower(one) == "all-linear") {
      names.assign(std::begin(kLinear), std::end(kLinear));
    } else if (one.find_first_of(".*[]()|\\^$?+{}") != std::string::npos) {
      names.assign(std::begin(kLinear), std::end(kLinear));
      fc_.unmodelled.push_back("lora_target_modules=" + one + " (a pattern: priced as all-linear)");
    } else if (!one.empty()) {
      fail(t, "lora_target_modules", "'" + one + "' is one name: TRL passes one as a string, which PEFT full-matches as a pattern against whole "
                                     "module paths (model.layers.0.self_attn." + one + "), matching none (\"Target modules ... not found\"); "
                                     "give a list of two or more, all-linear, or a pattern such as .*" + one);
    }
    std::vector<std::string> targets;
    const bool gpt2 = fc_.model.value_or("").rfind("gpt2", 0) == 0;
    for (std::string n : names) {
      // gpt2's fused query, key and value projection (a Conv1D): dtsim's linear_qkv.
      if (gpt2 && n == "c_attn") n = "linear_qkv";
      if (n == "lm_head" && lower(word_or(root_["loss_type"], "chunked_nll")) == "chunked_nll" && !flag(root_["use_liger_kernel"], "use_liger_kernel", false)) {
        fail(t, "lora_target_modules", "names lm_head beside loss_type chunked_nll (TRL's default); TRL refuses it (\"`loss_type='chunked_nll'` is not supported when `lm_head` is wrapped by a PEFT adapter\"): set loss_type: nll");
      }
      if ((gpt2 && n == "linear_qkv") || std::find_if(std::begin(kLinear), std::end(kLinear), [&](const char* k) { return n == k; }) != std::end(kLinear)) {
        if (std::find(targets.begin(), targets.end(), n) == targets.end()) targets.push_back(n);
      } else if (!n.empty()) {
        fc_.unmodelled.push_back("lora_target_modules " + n + " (its adapter is not priced; dtsim's: all-linear, q_proj, k_proj, v_proj, o_proj, gate_proj, up_proj, down_proj)");
      }
    }
    if (targets.empty()) {
      fail(t, "lora_target_modules", "names no module dtsim prices: no adapter to train (valid: all-linear, or q_proj, k_proj, v_proj, o_proj, gate_proj, up_proj, down_proj)");
    }
    std::string list;
    for (const auto& x : targets) list += (list.empty() ? "" : ",") + x;
    out.model("lora_targets", "[" + list + "]", origin);
    if (given("lora_modules_to_save")) {
      fc_.unmodelled.push_back("lora_modules_to_save (those modules trained whole beside the adapters: their gradients and optimizer states are not priced)");
    }
    if (given("lora_target_parameters")) fc_.unmodelled.push_back("lora_target_parameters (adapters on parameters, an MoE's experts: not priced)");
    if (flag(root_["use_dora"], "use_dora", false)) fc_.unmodelled.push_back("use_dora=true (priced as LoRA)");
    if (const YAML::Node d = root_["lora_dropout"]; !null(d) && d.IsScalar() && std::strtod(d.Scalar().c_str(), nullptr) != 0.0) {
      fc_.unmodelled.push_back("lora_dropout=" + d.Scalar() + " (the adapters' dropout is not priced)");
    }
  }

  /// PEFT's target_modules for the model's type where TRL gives none
  /// (peft/utils/constants.py TRANSFORMERS_MODELS_TO_LORA_TARGET_MODULES_MAPPING,
  /// read at 5d602fdb), `origin` saying so; a built-in whose type has none is
  /// refused as PEFT refuses it.
  std::vector<std::string> default_targets(std::string& origin) {
    const std::string m = fc_.model.value_or("");
    const auto starts = [&](std::initializer_list<const char*> ps) {
      return std::any_of(ps.begin(), ps.end(), [&](const char* p) { return m.rfind(p, 0) == 0; });
    };
    // Of dtsim's built-ins, the dense Qwen3s are qwen3's type; the others qwen3_moe, qwen3_next, qwen3_5.
    const bool qwen3_dense = starts({"qwen3-0.6b", "qwen3-1.7b", "qwen3-4b", "qwen3-8b", "qwen3-14b", "qwen3-32b"});
    // Gemma 3 1B alone is gemma3_text; the larger ones are gemma3, which the table leaves out.
    if (starts({"llama-2", "llama-3", "llama-4", "mistral", "mixtral", "qwen2.5", "gemma-2", "gemma-3-1b", "gemma-4"}) || qwen3_dense) {
      origin = file() + " (lora_target_modules unset: PEFT's default for " + m + "'s model type, q_proj and v_proj)";
      return {"q_proj", "v_proj"};
    }
    if (starts({"nemotron-h", "nemotron-nano-9b", "nemotron-3"})) {
      origin = file() + " (lora_target_modules unset: PEFT's default for nemotron_h, q_proj, k_proj, v_proj and o_proj)";
      return {"q_proj", "k_proj", "v_proj", "o_proj"};
    }
    if (starts({"gpt2"})) {
      origin = file() + " (lora_target_modules unset: PEFT's default for gpt2, c_attn: the fused query, key and value projection)";
      return {"c_attn"};
    }
    // dtsim's built-ins whose model types PEFT's table leaves out.
    if (starts({"deepseek-", "glm-", "kimi-", "minimax-", "qwen3-30b-a3b", "qwen3-235b", "qwen3-next", "qwen3.5", "gpt-oss", "olmo-",
                "granite-", "phi-3", "smollm3", "gemma-3"})) {
      fail(root_["use_peft"], "use_peft", "without lora_target_modules on " + m + ", whose model type PEFT has no default targets for "
                                          "(\"Please specify `target_modules` in `peft_config`\"); give lora_target_modules (all-linear, or names)");
    }
    origin = file() + " (lora_target_modules unset: PEFT's default for the model's type, priced as q_proj and v_proj)";
    fc_.unmodelled.push_back("lora_target_modules unset on " + m + " (PEFT's default for its model type: priced as q_proj and v_proj)");
    return {"q_proj", "v_proj"};
  }

  /// A scalar's text, or `fallback` where it is absent.
  std::string word_or(const YAML::Node& n, const std::string& fallback) const { return null(n) ? fallback : word(n, "loss_type"); }

  /// Batch and sequence.
  void batch(detail::OverrideList& out) {
    detail::hf_batch(root_, *this, out);
    // max_length, or its name before TRL 0.20; written null: no truncation.
    const char* lk = root_["max_length"] ? "max_length" : root_["max_seq_length"] ? "max_seq_length" : "max_length";
    if (std::string(lk) == "max_seq_length") {
      fc_.unmodelled.push_back("max_seq_length (TRL's name before max_length: read as max_length; current TRL hands it to accelerate launch, which refuses it: rename it max_length)");
    }
    const YAML::Node ml = root_[lk];
    if (ml && ml.IsNull()) {
      fc_.unmodelled.push_back(std::string(lk) + " null (no truncation: priced at the model's maximum; give --set plan.seq_len)");
    } else {
      out.plan("seq_len", null(ml) ? "1024" : std::to_string(count(ml, lk)), null(ml) ? file() + " (max_length, TRL's default 1024)" : from(ml, lk));
    }
    const bool packing = flag(root_["packing"], "packing", false);
    const YAML::Node ps = root_["packing_strategy"];
    const std::string strategy = null(ps) ? "bfd" : lower(word(ps, "packing_strategy"));
    if (strategy != "bfd" && strategy != "bfd_split" && strategy != "bfd-requeue" && strategy != "wrapped") {
      fail(ps, "packing_strategy", "'" + strategy + "'; valid: bfd, bfd_split, wrapped");
    }
    if (packing && strategy != "wrapped") {
      fc_.unmodelled.push_back("packing with packing_strategy " + strategy + " (padding-free, each sample attending within itself: set plan.document_len to their length)");
    } else if (!packing && flag(root_["padding_free"], "padding_free", false)) {
      fc_.unmodelled.push_back("padding_free without packing (each batch flattened to its samples' tokens, max_length not enforced: priced at max_length)");
    } else if (!packing) {
      fc_.unmodelled.push_back("packing false (each batch padded to its longest sample: priced at max_length)");
    }
  }

  /// bf16, fp16 and the dtype the model is loaded in (Note [TRL configs]).
  void precision(detail::OverrideList& out) {
    const YAML::Node bf = root_["bf16"];
    const YAML::Node hf = root_["fp16"];
    const bool fp16 = flag(hf, "fp16", false);
    if (fp16 && flag(bf, "bf16", false)) fail(hf, "fp16", "beside bf16; transformers' TrainingArguments takes one of them");
    const bool bf16 = !fp16 && flag(bf, "bf16", true);
    std::string dk;
    const YAML::Node d = model_key("dtype", "torch_dtype", dk);
    std::string dtype = null(d) ? "float32" : lower(word(d, dk));
    if (dtype.rfind("torch.", 0) == 0) dtype = dtype.substr(6);
    if (dtype == "bf16") dtype = "bfloat16";
    if (dtype == "fp16" || dtype == "half") dtype = "float16";
    if (dtype == "fp32" || dtype == "float") dtype = "float32";
    if (dtype != "float32" && dtype != "bfloat16" && dtype != "float16" && dtype != "auto") {
      fail(d, dk, "'" + dtype + "'; valid: float32, bfloat16, float16, auto");
    }
    if (dtype == "auto") {
      fc_.unmodelled.push_back(dk + "=auto (the checkpoint's dtype: priced as bfloat16)");
      dtype = "bfloat16";
    }
    const std::string dfrom = null(d) ? file() + " (dtype unset: TRL loads the model in float32)" : from(d, dk);
    if (dk == "torch_dtype") {
      fc_.unmodelled.push_back("torch_dtype (TRL's name before dtype: read as dtype; current TRL hands it to accelerate launch, which refuses it: rename it dtype)");
    }
    if (peft_ && quantized_ && dtype == "float32") {
      fc_.unmodelled.push_back("dtype float32 beside a quantized base (its embedding, norms and head in fp32: priced in the working precision)");
    }
    fp32_load_ = dtype == "float32";
    autocast_ = bf16 || fp16;
    // A plain GradScaler's refusal (DeepSpeed and FSDP keep fp32 copies):
    // checked once accelerate's distribution is known (refuse_fp16).
    fp16_weights_ = fp16 && dtype == "float16" && !peft_;
    if (bf16) {
      // TRL's bf16 default: TrainingArguments sets ACCELERATE_MIXED_PRECISION whatever accelerate's file says.
      out.plan("precision", "bf16", null(bf) ? file() + " (bf16 unset: TRL's default true where fp16 is not)" : from(bf, "bf16"));
      fc_.binding_defaults.push_back("precision");
    } else if (fp16) {
      out.plan("precision", "fp16", from(hf, "fp16"));
      fc_.binding_defaults.push_back("precision");
    } else if (dtype == "float32") {
      // No autocast: accelerate's mixed_precision, where one launches it, still applies.
      out.plan("precision", "fp32", file() + " (bf16 false, no fp16: no autocast over the float32 weights)");
    } else {
      out.plan("precision", dtype == "bfloat16" ? "bf16" : "fp16", dfrom + " (no autocast: the weights' own dtype)");
    }
    if (peft_ && quantized_ && distributed_ == "ddp") {
      // TRL casts the adapters over a quantized base to bf16: no fp32 copy.
      out.plan("master_weights", "false", peft_from_ + " (TRL casts the adapters over a quantized base to bf16)");
    } else if (!peft_ && !fp32_load_ && distributed_ == "ddp") {
      // The weights stepped in their load dtype, the optimizer's states too
      // (DeepSpeed and accelerate's FSDP keep fp32 copies whatever the load).
      out.plan("master_weights", "false", dfrom + " (the weights trained in their load dtype, no fp32 copy)");
      if (autocast_ && (dtype == "bfloat16") != bf16) fc_.unmodelled.push_back(dk + "=" + dtype + " under the other 16-bit autocast (priced in the autocast dtype)");
    } else if (!peft_ && !autocast_ && flag(root_["tf32"], "tf32", false)) {
      fc_.unmodelled.push_back("tf32=true (fp32 matmuls on TF32 tensor cores: priced on the FP32 units)");
    }
  }

  /// The adapter's base: an fp32 load under autocast (Note [fp32 base]),
  /// unless DeepSpeed casts it or FSDP shards it.
  void base(detail::OverrideList& out) {
    if (!peft_) return;
    std::string kind = peft_kind_;
    std::string origin = peft_from_;
    if (kind == "lora" && fp32_load_ && autocast_) {
      const bool sharded = distributed_ == "fsdp" && std::none_of(fc_.overrides.begin(), fc_.overrides.end(), [](const Override& o) {
                             return o.section == "plan" && o.path == "fsdp" && o.value == "no_shard";
                           });
      if (fc_.deepspeed) {
        origin += " (DeepSpeed casts the float32 base to its 16-bit type)";
      } else if (sharded) {
        origin += " (FSDP's shards of the float32 base gathered in 16 bits)";
        fc_.unmodelled.push_back("the base loaded in float32 under FSDP (its shards priced in 16 bits)");
      } else {
        kind = "lora_fp32";
        origin += " (the frozen base loaded in float32 under autocast)";
      }
    }
    out.model("peft", kind, origin);
  }

  /// Checkpointing, offloading, attention, kernels and the loss.
  void memory(detail::OverrideList& out) {
    const YAML::Node gc = root_["gradient_checkpointing"];
    const bool checkpointing = flag(gc, "gradient_checkpointing", true);
    if (checkpointing) {
      out.plan("recompute", "full", null(gc) ? file() + " (gradient_checkpointing, TRL's default true)" : from(gc, "gradient_checkpointing"));
    }
    if (const YAML::Node ao = root_["activation_offloading"]; flag(ao, "activation_offloading", false)) {
      out.plan("enable_activation_offloading", "true", from(ao, "activation_offloading"));
    }
    std::string ak;
    const YAML::Node ai = model_key("attn_implementation", "", ak);
    if (!null(ai) && lower(word(ai, ak)) == "eager") out.plan("attention", "eager", from(ai, ak));
    const bool liger = flag(root_["use_liger_kernel"], "use_liger_kernel", false);
    const YAML::Node lt = root_["loss_type"];
    const std::string loss = null(lt) ? (liger ? "nll" : "chunked_nll") : lower(word(lt, "loss_type"));
    if (loss != "nll" && loss != "dft" && loss != "chunked_nll") fail(lt, "loss_type", "'" + loss + "'; valid: nll, dft, chunked_nll");
    if (liger && loss == "chunked_nll") {
      fail(lt, "loss_type", "chunked_nll beside use_liger_kernel; TRL refuses it (\"`loss_type='chunked_nll'` is not compatible with `use_liger_kernel=True`.\"): set loss_type: nll");
    }
    const std::string m = fc_.model.value_or("");
    const bool unlisted = std::any_of(std::begin(kNoLiger), std::end(kNoLiger), [&](const char* p) { return m.rfind(p, 0) == 0; });
    const YAML::Node tc = root_["torch_compile"];
    if (liger && unlisted) {
      fc_.unmodelled.push_back("use_liger_kernel=true (" + m + "'s model type is not one Liger patches: not applied)");
    } else if (liger) {
      // _apply_liger_kernel_to_instance's defaults: RMSNorm, SwiGLU, RoPE and
      // the fused linear cross-entropy.
      out.plan("kernels", "fused", from(root_["use_liger_kernel"], "use_liger_kernel"));
      // Liger runs dft's token scaling inside its fused loss (use_token_scaling).
      if (loss == "nll" || loss == "dft") out.plan("loss_kernel", "liger_fused_linear", from(root_["use_liger_kernel"], "use_liger_kernel"));
      if (given("liger_kernel_config")) fc_.unmodelled.push_back("liger_kernel_config (priced as Liger's defaults: every kernel)");
    }
    if (!liger && flag(tc, "torch_compile", false)) out.plan("kernels", "fused", from(tc, "torch_compile"));
    if (loss == "chunked_nll") {
      // Its chunks project h.float() @ w.float(): in fp32 where no autocast
      // brings the GEMM back to 16 bits (none under DeepSpeed's engine).
      const std::string origin = null(lt) ? file() + " (loss_type, TRL's default chunked_nll)" : from(lt, "loss_type");
      if (fc_.deepspeed) {
        out.plan("loss_kernel", "chunked_nll_fp32", origin + " (DeepSpeed runs without autocast: the chunks project in fp32)");
        if (fc_.plan == std::optional<std::string>("zero3")) fc_.unmodelled.push_back(detail::kChunkedNllZero3);
      } else if (!autocast_ && !fp32_load_) {
        out.plan("loss_kernel", "chunked_nll_fp32", origin + " (no autocast over the 16-bit weights: the chunks project in fp32)");
      } else {
        out.plan("loss_kernel", "chunked_nll", origin);
      }
    }
    if (loss == "dft" && !liger) fc_.unmodelled.push_back("loss_type=dft (Dynamic Fine-Tuning's weights on the cross-entropy: priced as PyTorch's)");
  }

  YAML::Node root_;
  FrameworkConfig fc_;
  std::string distributed_;  ///< "ddp", "fsdp" or "deepspeed"
  std::string peft_kind_;    ///< lora, qlora, lora_int8 (before base())
  std::string peft_from_;
  bool host_adam_ = false;  ///< the deepspeed config offloads the optimizer (ZeRO-Offload)
  bool peft_ = false;       ///< use_peft
  bool quantized_ = false;  ///< load_in_4bit or load_in_8bit
  bool fp32_load_ = false;  ///< the model loaded in float32
  bool autocast_ = false;   ///< bf16 or fp16
  bool fp16_weights_ = false;  ///< fp16 autocast over float16 weights, all trained
};

}  // namespace

FrameworkConfig parse_trl_config(const std::string& yaml_text, const std::string& file) {
  if (yaml_text.size() > kMaxConfigBytes) throw ConfigError(file + ": larger than a config may be");
  Reader reader(parse_config_text(yaml_text, file, false), file);
  FrameworkConfig fc = reader.read();
  const std::optional<FrameworkConfig> acc = reader.accelerate();
  if (!acc) {
    reader.refuse_fp16(fc);
    return fc;
  }
  // Note [accelerate under a trainer]: num_processes, a launcher flag the
  // file writes, follows accelerate's own and wins; but not over
  // accelerate's tp and cp, which its num_processes was divided by and this
  // one is not.
  FrameworkConfig out = with_accelerate(fc, *acc);
  const bool split = std::any_of(acc->overrides.begin(), acc->overrides.end(), [](const Override& o) {
    return o.section == "plan" && (o.path == "tp" || o.path == "cp") && o.value != "null" && o.value != "1";
  });
  if (split && reader.names_processes()) {
    out.overrides.erase(std::remove_if(out.overrides.begin(), out.overrides.end(),
                                       [](const Override& o) { return o.section == "plan" && o.path == "dp"; }),
                        out.overrides.end());
    out.unmodelled.push_back("num_processes (over accelerate's tp and cp: give --set plan.dp)");
  }
  reader.refuse_fp16(out);
  return out;
}

FrameworkConfig read_trl_config(const std::string& path) { return parse_trl_config(detail::read_config_text(path), path); }

}  // namespace dtsim::sim
