// A LLaMA-Factory training config (the YAML `llamafactory-cli train FILE`
// reads, examples/train_*/*.yaml) into dtsim's plan and model keys (Note
// [Framework configs] in framework_config.cpp).
//
// Note [LLaMA-Factory configs]
// LLaMA-Factory fine-tunes HuggingFace models through transformers' Trainer;
// its YAML is one flat mapping of its ModelArguments, DataArguments,
// FinetuningArguments and transformers' Seq2SeqTrainingArguments
// (src/llamafactory/hparams/*.py; parser.py; model/adapter.py, patcher.py,
// model_utils/checkpointing.py, attention.py, liger_kernel.py,
// quantization.py; all read at ff6d4d12 for this note):
// - model_name_or_path (required) is a HuggingFace hub id or a local
//   directory, read as axolotl's base_model is (Note [axolotl configs]).
// - stage: pt or sft (the default) train a language model on its tokens;
//   rm, ppo, dpo and kto add a value head, a reference or reward model and
//   paired samples, which dtsim does not price: refused in one line.
// - finetuning_type: lora (the default), full; freeze (only the last
//   freeze_trainable_layers trained) and oft are refused. lora_rank (8),
//   lora_target ("all": find_all_linear_modules, every nn.Linear but the
//   head: q_proj, k_proj, v_proj, o_proj, gate_proj, up_proj, down_proj on
//   a Llama-style model; or names separated by commas) are model.lora_rank
//   and model.lora_targets. quantization_bit 4 under the default method,
//   bitsandbytes, is its NF4 base (model.peft qlora), 8 LLM.int8 (lora_int8,
//   Note [8-bit base]); HQQ's and EETQ's are priced at the same widths
//   (said), and quantization beside a full fine-tune is refused as
//   parser.py refuses it, as are EETQ at other than 8 bits, HQQ at 7 or
//   beside ZeRO-3 or FSDP, and quantization beside fp8. additional_target
//   (modules trained whole), new tokens (resize_vocab, add_tokens,
//   add_special_tokens: under LoRA the embedding and head trained whole),
//   a saved adapter resumed (its own rank and targets), DoRA, adapter
//   dropout and LLaMA Pro are listed as not modelled.
// - per_device_train_batch_size (transformers' default 8) is each rank's
//   micro-batch, gradient_accumulation_steps (1) the micro-batches a step;
//   cutoff_len (2048) is the sequence. packing (on by default only for pt)
//   concatenates samples into cutoff_len tokens that attend across each
//   other: priced as one sequence, exactly; neat_packing keeps each sample
//   to itself (block-diagonal attention: set plan.document_len, Note
//   [Packed sequences]); unpacked, each batch is padded to its longest
//   sample, priced at cutoff_len (said).
// - Precision: bf16 or fp16 is autocast over fp32 trainable parameters
//   (init_adapter casts them to fp32 unless pure_bf16: a LoRA's adapters,
//   a full fine-tune's every weight, the frozen base staying in bf16):
//   dtsim's master copies, its default. pure_bf16 trains the bf16 weights
//   as they are, states in bf16 (plan.master_weights false; refused beside
//   ZeRO-3, as parser.py refuses it). Neither: a full fine-tune runs in
//   fp32; a LoRA's frozen base is loaded in bf16 (infer_optim_dtype, a bf16
//   checkpoint on a GPU that has it) and priced so.
// - Gradient checkpointing is on unless disable_gradient_checkpointing
//   (prepare_model_for_training), and with transformers' own
//   gradient_checkpointing whatever that says: plan.recompute full. use_unsloth_gc
//   moves the checkpoints to the host (said, priced as kept).
//   flash_attn disabled is eager attention (plan.attention eager); auto,
//   sdpa, fa2, fa3 keep no scores. enable_liger_kernel (pt and sft), on
//   a model type liger_kernel.py lists (else said, not applied), applies
//   Liger's RMSNorm, SwiGLU and fused linear cross-entropy
//   (plan.kernels fused, plan.loss_kernel liger_fused_linear, Note [Fused
//   linear cross-entropy]); torch_compile is plan.kernels fused.
// - deepspeed (a path from the working directory or beside the config, or
//   the mapping) is read as --deepspeed reads it, its "auto" filled from
//   the keys above; fsdp (transformers' words: full_shard, shard_grad_op,
//   hybrid_shard, offload) with fsdp_config's fsdp_version and
//   activation_checkpointing is FSDP, priced as axolotl's is (a LoRA under
//   FSDP1 as FSDP2); else DDP, with ddp_bucket_cap_mb.
// - optim: transformers' names (detail::hf_optimizer); GaLore, APOLLO,
//   BAdam, Adam-mini and Muon (use_galore, ...) are said, priced as AdamW.
// Keys that set no cost (datasets, templates, logging, learning rates,
// checkpoints, evaluation) are read silently; any other key given is
// listed, not dropped. transformers' Trainer runs no pipeline and no
// forward parameter gather: pp 1 and overlap_param_gather false, which a
// search keeps.
#include <algorithm>
#include <cctype>
#include <filesystem>
#include <sstream>
#include <string>
#include <vector>

#include "dtsim/sim/config_node.hpp"
#include "dtsim/sim/error.hpp"
#include "dtsim/sim/framework_config.hpp"
#include "framework_common.hpp"

namespace dtsim::sim {
namespace {

/// The keys that set no cost, read without a word (LLaMA-Factory's own and
/// transformers' TrainingArguments').
constexpr const char* kSilent[] = {
    "trust_remote_code", "do_train", "do_eval", "do_predict", "dataset", "eval_dataset", "dataset_dir", "media_dir", "template",
    "max_samples", "preprocessing_num_workers", "preprocessing_batch_size", "output_dir", "overwrite_output_dir", "plot_loss",
    "report_to", "run_name", "learning_rate", "num_train_epochs", "max_steps", "lr_scheduler_type", "lr_scheduler_kwargs",
    "warmup_ratio", "warmup_steps", "weight_decay", "adam_beta1", "adam_beta2", "adam_epsilon", "max_grad_norm", "ddp_timeout",
    "resume_from_checkpoint", "val_size", "per_device_eval_batch_size", "eval_strategy", "evaluation_strategy", "seed",
    "data_seed", "lora_alpha", "use_rslora", "loraplus_lr_ratio", "loraplus_lr_embedding", "pissa_init", "pissa_iter",
    "pissa_convert", "create_new_adapter", "adapter_folder", "cache_dir", "use_fast_tokenizer",
    "split_special_tokens", "init_special_tokens", "model_revision", "low_cpu_mem_usage", "rope_scaling", "infer_dtype", "infer_backend",
    "offload_folder", "use_kv_cache", "train_on_prompt", "mask_history", "streaming", "buffer_size", "mix_strategy",
    "interleave_probs", "overwrite_cache", "tokenized_path", "tool_format", "ignore_pad_token_for_loss", "default_system",
    "enable_thinking", "compute_accuracy", "disable_shuffling", "early_stopping_steps", "include_effective_tokens_per_second",
    "include_num_input_tokens_seen", "include_tokens_per_second", "predict_with_generate", "remove_unused_columns",
    "freeze_vision_tower", "freeze_multi_modal_projector", "freeze_language_model", "moe_aux_loss_coef", "upcast_layernorm",
    "use_reentrant_gc", "gradient_checkpointing_kwargs", "quantization_type",
    "quantization_device_map", "ddp_find_unused_parameters", "ddp_backend", "ddp_broadcast_buffers", "local_rank",
    "load_best_model_at_end", "metric_for_best_model", "greater_is_better", "label_smoothing_factor", "length_column_name",
    "group_by_length", "torch_empty_cache_steps", "max_new_tokens", "generation_max_length", "generation_num_beams",
    "print_param_status", "use_swanlab", "fp16_full_eval", "bf16_full_eval", "use_cpu", "no_cuda", "optim_args",
    "optim_target_modules", "torch_compile_backend", "torch_compile_mode", "freeze_trainable_layers",
    "freeze_trainable_modules", "freeze_extra_modules",
    // The keys read below.
    "model_name_or_path", "stage", "finetuning_type", "lora_rank", "lora_target", "additional_target", "use_dora",
    "lora_dropout", "use_llama_pro", "quantization_bit", "quantization_method", "double_quantization",
    "per_device_train_batch_size", "gradient_accumulation_steps", "cutoff_len", "packing", "neat_packing", "bf16", "fp16",
    "pure_bf16", "disable_gradient_checkpointing", "use_unsloth_gc", "flash_attn", "enable_liger_kernel", "use_unsloth",
    "torch_compile", "upcast_lmhead_output", "fp8", "shift_attn", "mixture_of_depths", "deepspeed", "fsdp", "fsdp_config",
    "ddp_bucket_cap_mb", "resize_vocab", "add_tokens", "add_special_tokens", "new_special_tokens_config", "gradient_checkpointing",
    "tf32", "adapter_name_or_path", "optim", "use_galore", "use_apollo", "use_badam", "use_adam_mini", "use_muon", "use_mca",
    "use_megatron_bridge", "use_hyper_parallel", "use_kt"};

/// Prefixes of groups of keys that set no cost (a tracker's, evaluation's,
/// a modality's, an RLHF stage's, a GaLore-like optimizer's own settings).
constexpr const char* kSilentPrefixes[] = {"swanlab_", "image_", "video_", "audio_", "export_", "vllm_", "sglang_", "ref_model",
                                           "reward_model", "pref_", "ppo_", "kto_", "dpo_", "simpo_", "galore_", "apollo_",
                                           "badam_", "eval_", "logging_", "save_", "push_", "hub_", "dataloader_", "oft_"};

/// dtsim's built-ins whose model types liger_kernel.py does not list.
constexpr const char* kNoLiger[] = {"smollm3", "deepseek", "glm-4.5", "llama-4", "gpt2"};

/// The projections dtsim's LoRA can target.
constexpr const auto& kLinear = detail::kHfLinear;

std::string lower(std::string s) {
  for (char& ch : s) ch = static_cast<char>(std::tolower(static_cast<unsigned char>(ch)));
  return s;
}

std::string trim(const std::string& s) {
  const auto b = s.find_first_not_of(" \t");
  if (b == std::string::npos) return "";
  return s.substr(b, s.find_last_not_of(" \t") - b + 1);
}

class Reader : detail::YamlFields {
 public:
  Reader(YAML::Node root, std::string file) : YamlFields(std::move(file)), root_(std::move(root)) {}

  FrameworkConfig read() {
    if (!root_.IsMap()) {
      throw ConfigError(file() + ": a LLaMA-Factory config is a mapping of its keys (model_name_or_path, finetuning_type, ...)");
    }
    fc_.framework = "LLaMA-Factory";
    fc_.file = file();
    detail::OverrideList out(fc_);
    stage();
    const bool fsdp_on = given("fsdp");
    if (fsdp_on && given("deepspeed")) {
      fail(root_["deepspeed"], "deepspeed", "given beside fsdp; transformers' Trainer runs one of DeepSpeed and FSDP; give one");
    }
    distributed_ = fsdp_on ? "fsdp" : given("deepspeed") ? "deepspeed" : "ddp";
    fc_.own_distribution = distributed_ != "ddp";
    // DeepSpeed's JSON first: the trainer's own keys fill its "auto" and win.
    if (distributed_ == "deepspeed") deepspeed(out);
    model(out);
    batch(out);
    precision(out);
    memory(out);
    optimizer(out);
    if (distributed_ == "fsdp") detail::hf_trainer_fsdp(root_, *this, out, fc_, lora_);
    if (distributed_ != "fsdp" && given("fsdp_config")) fc_.unmodelled.push_back("fsdp_config without fsdp (transformers runs no FSDP then)");
    if (distributed_ == "ddp") {
      fc_.plan = "ddp";
      if (given("ddp_bucket_cap_mb")) {
        out.plan("bucket_mb", std::to_string(count(root_["ddp_bucket_cap_mb"], "ddp_bucket_cap_mb")), from(root_["ddp_bucket_cap_mb"], "ddp_bucket_cap_mb"));
      }
    }
    for (const char* k : {"use_mca", "use_megatron_bridge", "use_hyper_parallel", "use_kt"}) {
      if (flag(root_[k], k, false)) fc_.unmodelled.push_back(std::string(k) + "=true (another training backend: priced as transformers' Trainer)");
    }
    detail::hf_trainer_tail(root_, out, fc_, "LLaMA-Factory", silent);
    out.finish();
    return fc_;
  }

 private:
  static bool unset(const YAML::Node& n) { return detail::yaml_unset(n); }
  static bool silent(const std::string& key) {
    if (std::find_if(std::begin(kSilent), std::end(kSilent), [&](const char* k) { return key == k; }) != std::end(kSilent)) return true;
    return std::find_if(std::begin(kSilentPrefixes), std::end(kSilentPrefixes), [&](const char* p) { return key.rfind(p, 0) == 0; }) !=
           std::end(kSilentPrefixes);
  }
  bool given(const char* key) const { return !unset(root_[key]); }

  /// stage and finetuning_type: what dtsim prices.
  void stage() {
    const YAML::Node s = root_["stage"];
    const std::string st = null(s) ? "sft" : lower(word(s, "stage"));
    if (st == "rm" || st == "ppo" || st == "dpo" || st == "kto") {
      fail(s, "stage", "'" + st + "'; dtsim prices pt and sft (the " + st + " stage adds " +
                           (st == "rm" ? "a value head and paired samples" : st == "ppo" ? "a reward model and generation" : "a reference model and paired samples") +
                           ", which it does not model)");
    }
    if (st != "pt" && st != "sft") fail(s, "stage", "'" + st + "'; valid: pt, sft, rm, ppo, dpo, kto (dtsim prices pt and sft)");
    pretrain_ = st == "pt";
    const YAML::Node f = root_["finetuning_type"];
    const std::string ft = null(f) ? "lora" : lower(word(f, "finetuning_type"));
    if (ft == "freeze" || ft == "oft") {
      fail(f, "finetuning_type", "'" + ft + "'; dtsim prices full and lora (" +
                                     (ft == "freeze" ? std::string("freeze trains only the last freeze_trainable_layers, which it does not model")
                                                     : std::string("OFT's orthogonal adapters are not modelled")) +
                                     ")");
    }
    if (ft != "lora" && ft != "full") fail(f, "finetuning_type", "'" + ft + "'; valid: lora, oft, freeze, full (dtsim prices lora and full)");
    lora_ = ft == "lora";
  }

  /// model_name_or_path, the adapter and the quantized base.
  void model(detail::OverrideList& out) {
    const YAML::Node m = root_["model_name_or_path"];
    if (null(m)) fail(root_, "model_name_or_path", "missing; LLaMA-Factory needs it (\"Please provide `model_name_or_path`.\"): a hub id such as Qwen/Qwen3-8B or a directory");
    const std::string id = word(m, "model_name_or_path");
    fc_.model = detail::hf_model_of({id}, id, file());
    // New tokens resize the embedding and head; under LoRA adapter.py then
    // trains both whole (modules_to_save).
    for (const char* k : {"resize_vocab", "add_tokens", "add_special_tokens", "new_special_tokens_config"}) {
      if (given(k)) {
        fc_.unmodelled.push_back(std::string(k) + (lora_ ? " (the embedding and head resized and trained whole beside the adapters: not priced)"
                                                         : " (the vocabulary resized: priced at the model's own)"));
      }
    }
    const YAML::Node qb = root_["quantization_bit"];
    const std::int64_t bits = null(qb) ? 0 : count(qb, "quantization_bit");
    if (!lora_) {
      if (bits) fail(qb, "quantization_bit", "beside finetuning_type full; LLaMA-Factory quantizes only under LoRA (\"Quantization is only compatible with the LoRA or OFT method.\")");
      for (const char* k : {"lora_rank", "lora_target", "additional_target"}) {
        if (given(k)) fc_.unmodelled.push_back(std::string(k) + " (an adapter's, beside finetuning_type full: not read)");
      }
      return;
    }
    std::string peft = "lora";
    std::string peft_from = null(root_["finetuning_type"]) ? file() + " (finetuning_type, LLaMA-Factory's default lora)" : from(root_["finetuning_type"], "finetuning_type");
    if (bits) {
      const YAML::Node qm = root_["quantization_method"];
      const std::string method = null(qm) ? "bnb" : lower(word(qm, "quantization_method"));
      if (method != "bnb" && method != "hqq" && method != "eetq") fail(qm, "quantization_method", "'" + method + "'; valid: bnb, hqq, eetq");
      if (method == "bnb" && bits != 4 && bits != 8) fail(qb, "quantization_bit", std::to_string(bits) + "; bitsandbytes takes 4 or 8");
      if (method == "eetq" && bits != 8) fail(qb, "quantization_bit", std::to_string(bits) + "; EETQ takes 8 (\"EETQ only accepts 8-bit quantization.\")");
      if (method == "hqq" && (bits < 1 || bits > 8 || bits == 7)) fail(qb, "quantization_bit", std::to_string(bits) + "; HQQ takes 1-6 or 8");
      if (method != "bnb" && (distributed_ == "fsdp" || zero3_)) {
        fail(qm, "quantization_method", method + " beside " + (zero3_ ? "DeepSpeed ZeRO-3" : "FSDP") + "; LLaMA-Factory refuses it (\"" +
                                            (method == "hqq" ? "HQQ" : "EETQ") + " quantization is incompatible with DeepSpeed ZeRO-3 or FSDP.\")");
      }
      if (flag(root_["fp8"], "fp8", false)) fail(qb, "quantization_bit", "beside fp8; LLaMA-Factory refuses it (\"FP8 training is not compatible with quantization.\")");
      if (bits <= 4) {
        peft = "qlora";
        if (method != "bnb" || bits != 4) fc_.unmodelled.push_back("quantization_bit=" + std::to_string(bits) + " with " + method + " (priced as bitsandbytes' 4-bit NF4 base)");
      } else {
        peft = "lora_int8";  // Note [8-bit base] (models/src/peft.cpp)
        if (method != "bnb" || bits != 8) fc_.unmodelled.push_back("quantization_bit=" + std::to_string(bits) + " with " + method + " (priced as bitsandbytes' 8-bit base)");
      }
      peft_from = from(qb, "quantization_bit");
      if (peft == "qlora" && !flag(root_["double_quantization"], "double_quantization", true)) {
        fc_.unmodelled.push_back("double_quantization=false (the NF4 scales priced double-quantized)");
      }
    }
    out.model("peft", peft, peft_from);
    const YAML::Node r = root_["lora_rank"];
    out.model("lora_rank", null(r) ? "8" : std::to_string(count(r, "lora_rank")), null(r) ? file() + " (lora_rank, LLaMA-Factory's default 8)" : from(r, "lora_rank"));
    // lora_target: "all", or module names separated by commas (a list also reads).
    const YAML::Node t = root_["lora_target"];
    std::vector<std::string> names;
    if (null(t)) {
      names.push_back("all");
    } else if (t.IsSequence()) {
      for (const YAML::Node& n : t) names.push_back(trim(word(n, "lora_target")));
    } else {
      std::istringstream in(word(t, "lora_target"));
      for (std::string w; std::getline(in, w, ',');) names.push_back(trim(w));
    }
    std::vector<std::string> targets;
    const auto add = [&](const std::string& n) {
      if (std::find(targets.begin(), targets.end(), n) == targets.end()) targets.push_back(n);
    };
    for (const std::string& n : names) {
      if (n == "all") {
        for (const char* k : kLinear) add(k);
      } else if (std::find_if(std::begin(kLinear), std::end(kLinear), [&](const char* k) { return n == k; }) != std::end(kLinear)) {
        add(n);
      } else if (!n.empty()) {
        fc_.unmodelled.push_back("lora_target " + n + " (its adapter is not priced; dtsim's: all, q_proj, k_proj, v_proj, o_proj, gate_proj, up_proj, down_proj)");
      }
    }
    if (targets.empty()) {
      fail(t, "lora_target", "names no module dtsim prices: no adapter to train (valid: all, or q_proj, k_proj, v_proj, o_proj, gate_proj, up_proj, down_proj)");
    }
    std::string list;
    for (const auto& x : targets) list += (list.empty() ? "" : ",") + x;
    out.model("lora_targets", "[" + list + "]", null(t) ? file() + " (lora_target, LLaMA-Factory's default all)" : from(t, "lora_target"));
    if (given("adapter_name_or_path")) {
      fc_.unmodelled.push_back("adapter_name_or_path (a saved adapter keeps its own rank and targets: priced as lora_rank and lora_target say)");
    }
    if (given("additional_target")) {
      fc_.unmodelled.push_back("additional_target (those modules trained whole beside the adapters: their gradients and optimizer states are not priced)");
    }
    if (flag(root_["use_dora"], "use_dora", false)) fc_.unmodelled.push_back("use_dora=true (priced as LoRA)");
    if (flag(root_["use_llama_pro"], "use_llama_pro", false)) fc_.unmodelled.push_back("use_llama_pro=true (the expanded blocks are not priced)");
    if (const YAML::Node d = root_["lora_dropout"]; !null(d) && d.IsScalar() && std::strtod(d.Scalar().c_str(), nullptr) != 0.0) {
      fc_.unmodelled.push_back("lora_dropout=" + d.Scalar() + " (the adapters' dropout is not priced)");
    }
  }

  /// Batch and sequence.
  void batch(detail::OverrideList& out) {
    detail::hf_batch(root_, *this, out);
    const YAML::Node cl = root_["cutoff_len"];
    out.plan("seq_len", null(cl) ? "2048" : std::to_string(count(cl, "cutoff_len")),
             null(cl) ? file() + " (cutoff_len, LLaMA-Factory's default 2048)" : from(cl, "cutoff_len"));
    const bool neat = flag(root_["neat_packing"], "neat_packing", false);
    if (neat && pretrain_) fail(root_["neat_packing"], "neat_packing", "with stage pt; LLaMA-Factory refuses it (\"`neat_packing` cannot be set as True except SFT.\")");
    const bool packed = neat || flag(root_["packing"], "packing", pretrain_);
    if (neat) {
      fc_.unmodelled.push_back("neat_packing=true (each sample attends within itself: set plan.document_len to their length)");
    } else if (!packed) {
      fc_.unmodelled.push_back("packing unset (each batch padded to its longest sample: priced at cutoff_len)");
    }
  }

  /// bf16, fp16, pure_bf16, and who holds master weights (Note [LLaMA-Factory configs]).
  void precision(detail::OverrideList& out) {
    const YAML::Node pb = root_["pure_bf16"];
    const YAML::Node bf = root_["bf16"];
    const YAML::Node hf = root_["fp16"];
    if (flag(pb, "pure_bf16", false)) {
      if (zero3_) fail(pb, "pure_bf16", "beside DeepSpeed ZeRO-3; LLaMA-Factory refuses it (\"`pure_bf16` is incompatible with DeepSpeed ZeRO-3.\")");
      out.plan("precision", "bf16", from(pb, "pure_bf16"));
      // DeepSpeed's ZeRO-1 and -2 (stage_1_and_2.py, single_partition_of_fp32_groups)
      // keep fp32 partitions of what they train whatever the model was loaded
      // in; at stage 0 with its bf16 off (pure_bf16 alone leaves
      // TrainingArguments.bf16 false, which fills "auto") DeepSpeed steps the
      // bf16 weights as they are; bf16: true beside it turns on DeepSpeed's
      // BF16_Optimizer, which keeps them.
      const bool masters = ds_masters_ || (distributed_ == "deepspeed" && flag(bf, "bf16", false));
      out.plan("master_weights", masters ? "true" : "false",
               from(pb, "pure_bf16") + (masters ? " (DeepSpeed keeps fp32 masters of what it trains)"
                                                : " (the bf16 weights stepped as they are, their optimizer states in bf16)"));
    } else if (flag(bf, "bf16", false)) {
      out.plan("precision", "bf16", from(bf, "bf16"));
    } else if (flag(hf, "fp16", false)) {
      out.plan("precision", "fp16", from(hf, "fp16"));
    } else if (lora_) {
      out.plan("precision", "bf16", file() + " (neither bf16 nor fp16: the frozen base loaded in bf16, infer_optim_dtype's choice on a GPU that has it)");
    } else {
      out.plan("precision", "fp32", file() + " (neither bf16 nor fp16: the trained weights cast to fp32, no autocast)");
      if (flag(root_["tf32"], "tf32", false)) {
        fc_.unmodelled.push_back("tf32=true (fp32 matmuls on TF32 tensor cores: priced on the FP32 units)");
      }
    }
  }

  /// Checkpointing, attention, kernels and the loss.
  void memory(detail::OverrideList& out) {
    const YAML::Node dg = root_["disable_gradient_checkpointing"];
    const YAML::Node hg = root_["gradient_checkpointing"];  // transformers' own, which the Trainer applies whatever LLaMA-Factory's says
    if (!flag(dg, "disable_gradient_checkpointing", false) || flag(hg, "gradient_checkpointing", false)) {
      out.plan("recompute", "full", !flag(dg, "disable_gradient_checkpointing", false)
                                        ? (null(dg) ? file() + " (LLaMA-Factory checkpoints every decoder layer unless disable_gradient_checkpointing)"
                                                    : from(dg, "disable_gradient_checkpointing"))
                                        : from(hg, "gradient_checkpointing"));
      if (flag(root_["use_unsloth_gc"], "use_unsloth_gc", false)) {
        fc_.unmodelled.push_back("use_unsloth_gc=true (the checkpoints offloaded to the host: priced as kept on the GPU)");
      }
    }
    const YAML::Node fa = root_["flash_attn"];
    if (!null(fa)) {
      const std::string a = lower(word(fa, "flash_attn"));
      if (a == "disabled") {
        out.plan("attention", "eager", from(fa, "flash_attn"));
      } else if (a != "auto" && a != "sdpa" && a != "fa2" && a != "fa3") {
        fail(fa, "flash_attn", "'" + a + "'; valid: auto, disabled, sdpa, fa2, fa3");
      }
    }
    const YAML::Node tc = root_["torch_compile"];
    // liger_kernel.py applies Liger to the model types it lists and warns
    // for the rest ("Current model does not support liger kernel."); of
    // dtsim's built-ins, these are not among them.
    const std::string m = fc_.model.value_or("");
    const bool unlisted = std::any_of(std::begin(kNoLiger), std::end(kNoLiger), [&](const char* p) { return m.rfind(p, 0) == 0; });
    if (flag(root_["enable_liger_kernel"], "enable_liger_kernel", false) && unlisted) {
      fc_.unmodelled.push_back("enable_liger_kernel=true (" + m + "'s model type is not one LLaMA-Factory applies Liger to: not applied)");
    } else if (flag(root_["enable_liger_kernel"], "enable_liger_kernel", false)) {
      // apply_liger_kernel_to_<model>'s defaults: RMSNorm, SwiGLU, RoPE and
      // the fused linear cross-entropy (pt and sft need no logits).
      out.plan("kernels", "fused", from(root_["enable_liger_kernel"], "enable_liger_kernel"));
      out.plan("loss_kernel", "liger_fused_linear", from(root_["enable_liger_kernel"], "enable_liger_kernel"));
    } else if (flag(tc, "torch_compile", false)) {
      out.plan("kernels", "fused", from(tc, "torch_compile"));
    }
    if (flag(root_["use_unsloth"], "use_unsloth", false)) fc_.unmodelled.push_back("use_unsloth=true (Unsloth's kernels: priced as transformers')");
    if (flag(root_["upcast_lmhead_output"], "upcast_lmhead_output", false)) {
      fc_.unmodelled.push_back("upcast_lmhead_output=true (the logits in fp32: priced in the working precision)");
    }
    if (flag(root_["fp8"], "fp8", false)) fc_.unmodelled.push_back("fp8=true (FP8 training through accelerate: priced in the working precision)");
    if (flag(root_["shift_attn"], "shift_attn", false)) fc_.unmodelled.push_back("shift_attn=true (LongLoRA's shifted short attention: priced as full attention)");
    if (given("mixture_of_depths")) fc_.unmodelled.push_back("mixture_of_depths (priced as every token through every layer)");
  }

  /// optim, and LLaMA-Factory's own optimizers.
  void optimizer(detail::OverrideList& out) {
    const YAML::Node o = root_["optim"];
    if (null(o)) {
      out.plan("optimizer", "adamw", file() + " (optim unset: transformers' adamw_torch)");
    } else {
      detail::hf_optimizer(out, fc_, "optim", lower(word(o, "optim")), from(o, "optim"), host_adam_);
    }
    for (const char* k : {"use_galore", "use_apollo", "use_badam", "use_adam_mini", "use_muon"}) {
      if (flag(root_[k], k, false)) fc_.unmodelled.push_back(std::string(k) + "=true (priced as AdamW over every trained weight)");
    }
  }

  /// deepspeed: a DeepSpeed JSON, read as --deepspeed reads it.
  void deepspeed(detail::OverrideList& out) {
    const FrameworkConfig ds =
        detail::deepspeed_at(root_["deepspeed"], *this, "deepspeed", "; LLaMA-Factory's own are in its examples/deepspeed");
    zero3_ = ds.plan && *ds.plan == "zero3";
    ds_masters_ = detail::deepspeed_keeps_masters(ds);
    detail::merge_hf_deepspeed(ds, out, fc_, host_adam_);
  }

  YAML::Node root_;
  FrameworkConfig fc_;
  std::string distributed_;  ///< "ddp", "fsdp" or "deepspeed"
  bool host_adam_ = false;   ///< the deepspeed config offloads the optimizer (ZeRO-Offload)
  bool zero3_ = false;       ///< the deepspeed config is ZeRO-3
  bool ds_masters_ = false;  ///< DeepSpeed keeps fp32 masters (detail::deepspeed_keeps_masters)
  bool lora_ = false;        ///< finetuning_type lora
  bool pretrain_ = false;    ///< stage pt
};

}  // namespace

FrameworkConfig parse_llamafactory_config(const std::string& yaml_text, const std::string& file) {
  if (yaml_text.size() > kMaxConfigBytes) throw ConfigError(file + ": larger than a config may be");
  return Reader(parse_config_text(yaml_text, file, false), file).read();
}

FrameworkConfig read_llamafactory_config(const std::string& path) {
  return parse_llamafactory_config(detail::read_config_text(path), path);
}

}  // namespace dtsim::sim
