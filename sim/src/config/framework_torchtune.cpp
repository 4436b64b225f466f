// A torchtune recipe config (recipes/configs/*/*.yaml, what `tune run
// RECIPE --config FILE` reads) into dtsim's plan and model keys (Note
// [Framework configs] in framework_config.cpp).
//
// Note [torchtune configs]
// torchtune builds everything from its YAML (torchtune/config/_instantiate.py
// instantiates each `_component_`); its recipes (recipes/full_finetune_*.py,
// lora_finetune_*.py) read the rest with cfg.get and these defaults, as
// lora_finetune_distributed.py and lora_finetune_single_device.py have
// them (read for this note):
// - model._component_: a model builder, torchtune.models.<family>.
//   [lora_|qlora_]<family>_<size>[_base|_instruct]. A built-in of the same
//   shape where dtsim has one (kBuilders); lora_ is a LoRA fine-tune
//   (model.peft: lora), qlora_ (or quantize_base: true) the same over an
//   NF4 base (peft: qlora). Its lora_attn_modules name HuggingFace's
//   projections (q_proj, k_proj, v_proj, output_proj: dtsim's o_proj), and
//   apply_lora_to_mlp adds gate_proj, up_proj, down_proj (w1, w3, w2:
//   Note [LoRA] in models/src/peft.cpp); lora_rank is the rank; lora_alpha
//   scales the output and costs nothing.
// - batch_size is each rank's micro-batch, gradient_accumulation_steps the
//   micro-batches a step; tokenizer.max_seq_len the sequence (null, most
//   shipped configs': each sample as long as it is, which dtsim cannot
//   price: the model's longest sequence unless --set plan.seq_len, and a
//   line says so). dataset.packed packs samples into max_seq_len tokens,
//   each attending within itself (set plan.document_len to their length,
//   Note [Packed sequences]); unpacked, padded_collate_sft pads each batch
//   to its longest sample, priced at the whole sequence (said). A builder
//   without lora_rank has rank 8, its default.
// - dtype bf16: the model is built in bf16 and the optimizer steps it as
//   it is, no fp32 master (plan.master_weights false, Note [No master
//   weights]); fp32: fp32 throughout.
// - enable_activation_checkpointing (False): every layer's input kept, its
//   forward rerun (plan.recompute full); compile (False): torch.compile of
//   each layer (plan.kernels fused, Note [Fused kernels]).
// - The distributed recipes shard with FSDP2 (training.shard_model:
//   fully_shard on each layers.<i>, then on the model: fsdp full_shard,
//   fsdp_version 2, fsdp_wrap blocks, Note [Frozen weights under FSDP]);
//   fsdp_reshard_after_forward False is SHARD_GRAD_OP's behaviour,
//   fsdp_cpu_offload its CPUOffloadPolicy (parameters, gradients and
//   optimizer state on the host), custom_sharded_layers [tok_embeddings,
//   output] units of their own (fsdp_wrap layers); beside a LoRA's frozen
//   base, or without resharding, those knobs are said, not applied (FSDP2's
//   SHARD_GRAD_OP there is not modelled). Which recipe runs is the
//   command's, not the file's: a file named *single_device* is read as the
//   single-device recipes' (one GPU, plan.dp 1, no FSDP), any other as the
//   distributed ones'.
// - optimizer._component_: torch.optim.AdamW, Adam or SGD (fused or not,
//   the same bytes); bitsandbytes' AdamW8bit, Adam8bit and their paged
//   versions, and torchao's AdamW8bit, as AdamW or Adam with
//   plan.optim_bits 8 (Note [8-bit optimizer]; a paged one's states are
//   said to be priced on the device). optimizer_in_bwd (False) steps each
//   parameter as its gradient is made: plan.optimizer_in_backward in the
//   single-device full fine-tune (Note [Optimizer in backward]), listed
//   under FSDP2 and for a LoRA recipe, which does not read it.
//   enable_activation_offloading (False) moves each block's saved tensors
//   to the host between its forward and backward
//   (plan.enable_activation_offloading, Note [Saved-tensor offload]; not
//   searched), and needs enable_activation_checkpointing, as the recipes
//   raise. Other optimizers and other losses than
//   CrossEntropyLoss and the chunked ones (CEWithChunkedOutputLoss,
//   LinearCrossEntropyLoss: plan.loss_chunks, num_output_chunks, 8 by
//   default; Note [Chunked loss]) are listed as not modelled.
// Keys that set no cost (seed, checkpointer, metric_logger, output_dir,
// lr_scheduler, ...) are read silently; any other top-level key is listed,
// not dropped (what a known section holds beyond the keys above is not).
#include <algorithm>
#include <map>
#include <set>
#include <string>
#include <vector>

#include "dtsim/sim/config_node.hpp"
#include "dtsim/sim/error.hpp"
#include "dtsim/sim/framework_config.hpp"
#include "framework_common.hpp"

namespace dtsim::sim {
namespace {

/// torchtune's model builders (torchtune/models/*/_model_builders.py) and
/// dtsim's built-in of each shape.
constexpr const char* kBuilders[][2] = {
    {"llama2_7b", "llama-2-7b"},       {"llama2_13b", "llama-2-13b"},       {"llama2_70b", "llama-2-70b"},
    {"llama3_8b", "llama-3-8b"},       {"llama3_70b", "llama-3-70b"},       {"llama3_1_8b", "llama-3.1-8b"},
    {"llama3_1_70b", "llama-3.1-70b"}, {"llama3_1_405b", "llama-3.1-405b"}, {"llama3_2_1b", "llama-3.2-1b"},
    {"llama3_2_3b", "llama-3.2-3b"},   {"llama3_3_70b", "llama-3.3-70b"},   {"mistral_7b", "mistral-7b"},
    {"qwen2_5_7b", "qwen2.5-7b"},      {"qwen2_5_14b", "qwen2.5-14b"},      {"qwen2_5_32b", "qwen2.5-32b"},
    {"qwen2_5_72b", "qwen2.5-72b"},    {"qwen3_0_6b", "qwen3-0.6b"},        {"qwen3_1_7b", "qwen3-1.7b"},
    {"qwen3_4b", "qwen3-4b"},          {"qwen3_8b", "qwen3-8b"},            {"qwen3_14b", "qwen3-14b"},
    {"qwen3_32b", "qwen3-32b"},        {"gemma2_2b", "gemma-2-2b"},         {"gemma2_9b", "gemma-2-9b"},
    {"gemma2_27b", "gemma-2-27b"},     {"phi3_mini", "phi-3-mini"},
};

/// The top-level keys the recipes read: those read above, and those that
/// set nothing dtsim prices (the recipes' bookkeeping).
constexpr const char* kKnown[] = {
    "output_dir", "tokenizer", "checkpointer", "resume_from_checkpoint", "save_adapter_weights_only", "seed", "shuffle",
    "lr_scheduler", "epochs", "max_steps_per_epoch", "metric_logger", "log_every_n_steps", "log_peak_memory_stats",
    "log_level", "device", "profiler", "clip_grad_norm", "dataset", "dataset_val", "run_val_every_n_steps", "validation",
    "enable_kv_cache", "cudnn_deterministic_mode", "compile", "dtype", "batch_size", "batch_size_val", "gradient_accumulation_steps",
    "model", "optimizer", "loss", "enable_activation_checkpointing", "enable_activation_offloading", "optimizer_in_bwd",
    "fsdp_cpu_offload", "fsdp_reshard_after_forward", "custom_sharded_layers", "tensor_parallel_dim",
    "tensor_parallel_plan", "data_parallel_replicate_dim", "low_cpu_ram", "collate_fn", "save_every_n_steps"};

class Reader : detail::YamlFields {
 public:
  Reader(YAML::Node root, std::string file) : YamlFields(std::move(file)), root_(std::move(root)) {}

  FrameworkConfig read() {
    if (!root_.IsMap()) throw ConfigError(file() + ": a torchtune config is a mapping of its components and keys");
    fc_.framework = "torchtune";
    fc_.file = file();
    detail::OverrideList out(fc_);
    model(out);
    // Batch and sequence.
    if (const YAML::Node b = root_["batch_size"]; !null(b)) out.plan("micro_batch", positive(b, "batch_size"), from(b, "batch_size"));
    if (const YAML::Node g = root_["gradient_accumulation_steps"]; !null(g)) {
      out.plan("grad_accum", positive(g, "gradient_accumulation_steps"), from(g, "gradient_accumulation_steps"));
    }
    const YAML::Node tok = root_["tokenizer"];
    const YAML::Node len = tok && tok.IsMap() ? tok["max_seq_len"] : YAML::Node();
    if (!null(len)) {
      out.plan("seq_len", positive(len, "tokenizer.max_seq_len"), from(len, "tokenizer.max_seq_len"));
    } else {
      const bool given = tok && tok.IsMap() && tok["max_seq_len"];
      fc_.unmodelled.push_back("tokenizer.max_seq_len " + std::string(given ? "null" : "unset") +
                               " (each sample as long as it is: priced at the model's longest sequence; give --set plan.seq_len=N)");
    }
    const YAML::Node ds = root_["dataset"];
    if (ds && ds.IsMap() && flag(ds["packed"], "dataset.packed", false)) {
      fc_.unmodelled.push_back("dataset.packed=True (each sample attends within itself: set plan.document_len to their length)");
    } else {
      fc_.unmodelled.push_back("dataset not packed (each batch padded to its longest sample: priced at the full sequence)");
    }
    // Numerics and memory.
    if (const YAML::Node d = root_["dtype"]; !null(d)) {
      const std::string t = word(d, "dtype");
      if (t == "bf16" || t == "bfloat16") {
        out.plan("precision", "bf16", from(d, "dtype"));
        out.plan("master_weights", "false", from(d, "dtype"));
      } else if (t == "fp32" || t == "float32") {
        out.plan("precision", "fp32", from(d, "dtype"));
      } else {
        fail(d, "dtype", "'" + t + "'; valid: bf16, fp32 (torchtune's training dtypes)");
      }
    }
    if (const YAML::Node a = root_["enable_activation_checkpointing"]; !null(a)) {
      out.plan("recompute", flag(a, "enable_activation_checkpointing", false) ? "full" : "none", from(a, "enable_activation_checkpointing"));
    }
    if (const YAML::Node c = root_["compile"]; !null(c)) {
      // A bool, or (full fine-tuning) a mapping of what to compile: the model among them.
      const bool model = c.IsMap() ? flag(c["model"], "compile.model", false) : flag(c, "compile", false);
      if (model) out.plan("kernels", "fused", from(c, "compile"));
    }
    // Note [Saved-tensor offload] (lowering/passes/saved_tensor_offload.cpp):
    // torchtune's OffloadActivations, which its recipes run only beside
    // activation checkpointing.
    if (const YAML::Node o = root_["enable_activation_offloading"]; flag(o, "enable_activation_offloading", false)) {
      if (!flag(root_["enable_activation_checkpointing"], "enable_activation_checkpointing", false)) {
        fail(o, "enable_activation_offloading", "True without enable_activation_checkpointing: True (torchtune's recipes raise "
                                                "\"enable_activation_offloading should only be True when "
                                                "enable_activation_checkpointing is True\"); set both, or False here");
      }
      out.plan("enable_activation_offloading", "true", from(o, "enable_activation_offloading"));
    }
    optimizer(out);
    if (const YAML::Node l = root_["loss"]; l && l.IsMap() && l["_component_"] && l["_component_"].IsScalar()) {
      // CEWithChunkedOutputLoss, LinearCrossEntropyLoss: the logits a chunk
      // of the sequence at a time, num_output_chunks of them (8), Note
      // [Chunked loss].
      const std::string c = l["_component_"].Scalar();
      const YAML::Node tpd = root_["tensor_parallel_dim"];
      const bool tp = !null(tpd) && !(tpd.IsScalar() && tpd.Scalar() == "1");
      if (tp && c != "torch.nn.CrossEntropyLoss") {
        // Under TP the loss is vocab-parallel (loss_parallel): not chunked here.
        fc_.unmodelled.push_back("loss=" + c + " (with tensor_parallel_dim: priced as one vocab-parallel cross-entropy)");
      } else if (c == "torchtune.modules.loss.CEWithChunkedOutputLoss" || c == "torchtune.modules.loss.LinearCrossEntropyLoss") {
        const YAML::Node n = l["num_output_chunks"];
        out.plan("loss_chunks", null(n) ? "8" : positive(n, "loss.num_output_chunks"), from(null(n) ? l["_component_"] : n, "loss"));
      } else if (c != "torch.nn.CrossEntropyLoss") {
        fc_.unmodelled.push_back("loss=" + c + " (priced as one cross-entropy over the whole logits)");
      }
    }
    sharding(out);
    // torchtune's recipes run no pipeline, and shard with FSDP2 alone: a
    // search keeps them so.
    out.plan("pp", "1", file() + " (torchtune runs no pipeline parallelism)");
    fc_.search_fixed = {"pp"};
    if (fc_.plan == std::optional<std::string>("fsdp")) {
      fc_.search_fixed.insert(fc_.search_fixed.end(), {"fsdp", "fsdp_version"});
    } else {
      fc_.search_fixed.push_back("dp");  // a single-device recipe's one GPU
    }
    for (auto it = root_.begin(); it != root_.end(); ++it) {
      const std::string key = it->first.IsScalar() ? it->first.Scalar() : "";
      if (std::find_if(std::begin(kKnown), std::end(kKnown), [&](const char* k) { return key == k; }) == std::end(kKnown)) {
        fc_.unmodelled.push_back(key + " (not read by dtsim)");
      }
    }
    out.finish();
    return fc_;
  }

 private:
  /// model: its builder, and a LoRA's adapters (Note [torchtune configs]).
  void model(detail::OverrideList& out) {
    const YAML::Node m = root_["model"];
    if (null(m) || !m.IsMap() || null(m["_component_"])) {
      throw ConfigError(where(m ? m : root_) + ": model._component_: missing; a torchtune config names its model builder "
                                               "(torchtune.models.llama3_1.lora_llama3_1_8b)");
    }
    const YAML::Node comp = m["_component_"];
    const std::string full = word(comp, "model._component_");
    std::string name = full.substr(full.rfind('.') == std::string::npos ? 0 : full.rfind('.') + 1);
    std::string peft = "none";
    for (const char* prefix : {"qlora_", "lora_"}) {
      if (name.rfind(prefix, 0) == 0) {
        peft = std::string(prefix) == "qlora_" ? "qlora" : "lora";
        name = name.substr(std::string(prefix).size());
        break;
      }
    }
    for (const char* suffix : {"_base", "_instruct"}) {
      const std::string s = suffix;
      if (name.size() > s.size() && name.compare(name.size() - s.size(), s.size(), s) == 0) name.resize(name.size() - s.size());
    }
    for (const auto& b : kBuilders) {
      if (name == b[0]) fc_.model = b[1];
    }
    if (!fc_.model) {
      std::string valid;
      for (const auto& b : kBuilders) valid += (valid.empty() ? "" : ", ") + std::string(b[0]);
      fc_.unmodelled.push_back("model._component_=" + full + " (no built-in of its shape; pass --model, built in: " + valid + ")");
    }
    if (flag(m["quantize_base"], "model.quantize_base", false)) peft = "qlora";
    if (peft == "none") {
      for (const char* k : {"lora_attn_modules", "apply_lora_to_mlp", "lora_rank"}) {
        if (!null(m[k])) fail(m[k], std::string("model.") + k, "is a LoRA builder's; " + full + " builds no adapters");
      }
      return;
    }
    out.model("peft", peft, from(comp, "model._component_"));
    peft_ = true;
    std::vector<std::string> targets;
    if (const YAML::Node a = m["lora_attn_modules"]; !null(a)) {
      if (!a.IsSequence()) fail(a, "model.lora_attn_modules", "expected a list of q_proj, k_proj, v_proj, output_proj");
      for (const YAML::Node& t : a) {
        const std::string w = word(t, "model.lora_attn_modules");
        if (w == "q_proj" || w == "k_proj" || w == "v_proj") {
          targets.push_back(w);
        } else if (w == "output_proj") {
          targets.push_back("o_proj");
        } else {
          fail(t, "model.lora_attn_modules", "'" + w + "'; valid: q_proj, k_proj, v_proj, output_proj");
        }
      }
    }
    if (flag(m["apply_lora_to_mlp"], "model.apply_lora_to_mlp", false)) targets.insert(targets.end(), {"gate_proj", "up_proj", "down_proj"});
    if (targets.empty()) fail(m, "model.lora_attn_modules", "names no module and apply_lora_to_mlp is False: no adapter to train");
    std::string list;
    for (const auto& t : targets) list += (list.empty() ? "" : ",") + t;
    out.model("lora_targets", "[" + list + "]", from(m["lora_attn_modules"] ? m["lora_attn_modules"] : comp, "model.lora_attn_modules"));
    // The builders' default rank is 8 (lora_llama3_1_8b's lora_rank: int = 8).
    const YAML::Node r = m["lora_rank"];
    out.model("lora_rank", null(r) ? "8" : positive(r, "model.lora_rank"), null(r) ? from(comp, "model._component_") : from(r, "model.lora_rank"));
    if (flag(m["apply_lora_to_output"], "model.apply_lora_to_output", false)) {
      fc_.unmodelled.push_back("model.apply_lora_to_output=True (the LM head's adapter is not priced)");
    }
    if (flag(m["use_dora"], "model.use_dora", false)) fc_.unmodelled.push_back("model.use_dora=True (priced as LoRA)");
    if (const YAML::Node d = m["lora_dropout"]; !null(d) && d.IsScalar() && d.Scalar() != "0" && d.Scalar() != "0.0") {
      fc_.unmodelled.push_back("model.lora_dropout=" + d.Scalar() + " (the adapters' dropout is not priced)");
    }
  }

  /// optimizer and optimizer_in_bwd.
  void optimizer(detail::OverrideList& out) {
    const YAML::Node o = root_["optimizer"];
    if (o && o.IsMap() && o["_component_"] && o["_component_"].IsScalar()) {
      const std::string c = o["_component_"].Scalar();
      static const std::map<std::string, std::string> known = {
          {"torch.optim.AdamW", "adamw"}, {"torch.optim.Adam", "adam"}, {"torch.optim.SGD", "sgd"}};
      // Note [8-bit optimizer] (parallel/plan.cpp): bitsandbytes' and torchao's block-wise 8-bit states.
      static const std::map<std::string, std::string> eight = {
          {"bitsandbytes.optim.AdamW8bit", "adamw"}, {"bitsandbytes.optim.PagedAdamW8bit", "adamw"},
          {"bitsandbytes.optim.Adam8bit", "adam"}, {"bitsandbytes.optim.PagedAdam8bit", "adam"},
          {"torchao.optim.AdamW8bit", "adamw"}, {"torchao.prototype.low_bit_optim.AdamW8bit", "adamw"}};
      const std::string origin = from(o["_component_"], "optimizer._component_");
      if (const auto it = known.find(c); it != known.end()) {
        out.plan("optimizer", it->second, origin);
      } else if (const auto e = eight.find(c); e != eight.end()) {
        out.plan("optimizer", e->second, origin);
        out.plan("optim_bits", "8", origin);
        if (c.find(".Paged") != std::string::npos) {
          fc_.unmodelled.push_back("optimizer=" + c + " (paged: its states are priced on the device, where they stay while they "
                                   "fit; torchtune's logged peak, PyTorch's allocator's, leaves them out)");
        }
      } else {
        fc_.unmodelled.push_back("optimizer=" + c + " (priced as AdamW with states in the weights' type)");
      }
    }
    // Note [Optimizer in backward] (lowering/layer_stage.cpp): the single-device recipe's.
    if (const YAML::Node b = root_["optimizer_in_bwd"]; flag(b, "optimizer_in_bwd", false)) {
      if (peft_) {
        fc_.unmodelled.push_back("optimizer_in_bwd=True (torchtune's LoRA recipes do not read it: priced as one step after the backward)");
      } else if (single_device()) {
        out.plan("optimizer_in_backward", "true", from(b, "optimizer_in_bwd"));
      } else {
        fc_.unmodelled.push_back("optimizer_in_bwd=True (under FSDP2 each shard stepped after its reduce-scatter: priced as one "
                                 "step after the backward)");
      }
    }
  }

  /// Which recipe runs is the command's: a file named *single_device* is
  /// read as a single-device recipe's (Note [torchtune configs]).
  bool single_device() const { return file().find("single_device") != std::string::npos; }

  /// FSDP2 in the distributed recipes (Note [torchtune configs]).
  void sharding(detail::OverrideList& out) {
    if (single_device()) {
      // One GPU, whatever the cluster has.
      fc_.plan = "ddp";
      out.plan("dp", "1", file() + " (a single-device recipe's config)");
      return;
    }
    fc_.plan = "fsdp";
    const YAML::Node ra = root_["fsdp_reshard_after_forward"];
    bool reshard = flag(ra, "fsdp_reshard_after_forward", true);
    if (!reshard && peft_) {
      // FSDP2's SHARD_GRAD_OP beside frozen weights is not modelled (Note [Frozen weights under FSDP]).
      fc_.unmodelled.push_back("fsdp_reshard_after_forward=False (beside a LoRA's frozen base: priced as resharded)");
      reshard = true;
    }
    out.plan("fsdp", reshard ? "full_shard" : "shard_grad_op", ra ? from(ra, "fsdp_reshard_after_forward") : file());
    out.plan("fsdp_version", "2", file() + " (torchtune's distributed recipes: FSDP2)");
    if (const YAML::Node o = root_["fsdp_cpu_offload"]; flag(o, "fsdp_cpu_offload", false)) {
      if (reshard) {
        out.plan("offload_params", "cpu", from(o, "fsdp_cpu_offload"));
        out.plan("offload_optimizer", "cpu", from(o, "fsdp_cpu_offload"));
      } else {
        fc_.unmodelled.push_back("fsdp_cpu_offload=True (with fsdp_reshard_after_forward False: priced on the GPU)");
      }
    }
    if (const YAML::Node c = root_["custom_sharded_layers"]; !null(c)) {
      std::set<std::string> units;
      if (c.IsSequence()) {
        for (const YAML::Node& u : c) units.insert(word(u, "custom_sharded_layers"));
      }
      if (reshard && units == std::set<std::string>{"tok_embeddings", "output"}) {
        out.plan("fsdp_wrap", "layers", from(c, "custom_sharded_layers"));
      } else {
        std::string list;
        for (const auto& u : units) list += (list.empty() ? "" : ", ") + u;
        fc_.unmodelled.push_back("custom_sharded_layers=[" + list + "] (units of [tok_embeddings, output], resharded, alone are modelled)");
      }
    }
    if (const YAML::Node t = root_["tensor_parallel_dim"]; !null(t)) out.plan("tp", positive(t, "tensor_parallel_dim"), from(t, "tensor_parallel_dim"));
    if (const YAML::Node r = root_["data_parallel_replicate_dim"]; !null(r) && !(r.IsScalar() && r.Scalar() == "1")) {
      fc_.unmodelled.push_back("data_parallel_replicate_dim (HSDP's replicas: priced as one FSDP group)");
    }
  }

  YAML::Node root_;
  FrameworkConfig fc_;
  bool peft_ = false;  ///< a LoRA or QLoRA builder
};

}  // namespace

FrameworkConfig parse_torchtune_config(const std::string& yaml_text, const std::string& file) {
  if (yaml_text.size() > kMaxConfigBytes) throw ConfigError(file + ": larger than a config may be");
  return Reader(parse_config_text(yaml_text, file, false), file).read();
}

FrameworkConfig read_torchtune_config(const std::string& path) { return parse_torchtune_config(detail::read_config_text(path), path); }

}  // namespace dtsim::sim
