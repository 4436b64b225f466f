// An accelerate config (the YAML `accelerate config` writes and `accelerate
// launch --config_file FILE` reads) into dtsim's plan keys, alone or under a
// transformers-based trainer's config (Note [Framework configs] in
// framework_config.cpp).
//
// Note [accelerate configs]
// accelerate launch turns its config into the environment the training
// script's Accelerator reads (commands/config/config_args.py ClusterConfig;
// utils/launch.py prepare_multi_gpu_env, prepare_deepspeed_cmd_env;
// utils/dataclasses.py FullyShardedDataParallelPlugin.__post_init__ and
// DeepSpeedPlugin; all read at 16cb6eb8 for this note):
// - distributed_type: NO (one process), MULTI_GPU (DDP; MULTI_CPU and the
//   other accelerators' MULTI_ too, said), FSDP, DEEPSPEED; XLA and
//   MEGATRON_LM are refused in one line. PyYAML reads a bare NO as false,
//   which is NO.
// - num_processes (of all machines) is the ranks launched: plan.dp, over
//   parallelism_config's tp, cp and sp sizes where they are given (sp's
//   sequence parallelism is said, not priced).
// - mixed_precision: no (fp32), fp16, bf16, fp8 (autocast in bf16 around
//   FP8 GEMMs: Transformer Engine's delayed scaling, plan.fp8_recipe
//   delayed; torchao's, backend AO, tensorwise, its
//   enable_fsdp_float8_all_gather plan.fp8_param_gather; MS-AMP, or no
//   backend, which accelerate picks by what is installed, said). Under
//   DeepSpeed a config file's own bf16 or fp16 stands
//   (DeepSpeedPlugin.set_mixed_precision fills only what it leaves out).
// - fsdp_config: fsdp_version (1 unless 2); FSDP1's fsdp_sharding_strategy
//   (FULL_SHARD, SHARD_GRAD_OP, NO_SHARD, HYBRID_SHARD, HYBRID_SHARD_ZERO2, or
//   their numbers 1-5; FULL_SHARD by default; where it is absent, FSDP1's
//   fsdp_reshard_after_forward, which takes the same names), FSDP2's
//   fsdp_reshard_after_forward (true by default; false keeps the gathered
//   parameters to the backward: SHARD_GRAD_OP); fsdp_offload_params
//   (CPUOffload: parameters, gradients and optimizer state on the host);
//   fsdp_activation_checkpointing (each wrapped block checkpointed:
//   plan.recompute full); fsdp_auto_wrap_policy TRANSFORMER_BASED_WRAP (a
//   unit a decoder layer, dtsim's); NO_WRAP (the plugin's default where the
//   key is absent: the whole model one unit) and SIZE_BASED_WRAP are priced
//   as it and said; FSDP1 without BACKWARD_PRE backward prefetch (the
//   plugin passes none where unset) or with forward prefetch is said. Keys
//   are read with or without their fsdp_ prefix, as the launcher adds it.
//   FSDP's mixed precision gathers and reduces in the
//   working type (set_mixed_precision: param_dtype = reduce_dtype), dtsim's
//   default; the trained weights are upcast to fp32, dtsim's master copies.
//   parallelism_config's dp_replicate_size above 1 is HSDP (hybrid_shard,
//   within a node, said).
// - deepspeed_config: deepspeed_config_file (a path from the working
//   directory, else beside this file) read as --deepspeed reads it; or the
//   plugin's own fields, zero_stage (2, DeepSpeedPlugin's default),
//   offload_optimizer_device and offload_param_device (none, cpu, nvme:
//   the host), gradient_accumulation_steps, read as the same DeepSpeed
//   config would be. mixed_precision fills its bf16 or fp16
//   (DeepSpeedPlugin.set_mixed_precision).
// - dynamo_config's dynamo_backend other than NO compiles the model:
//   plan.kernels fused.
// Launcher keys (machine rank, addresses, the rendezvous, TPU settings)
// are read silently; any other key is listed. The Accelerator runs no
// pipeline and no forward parameter gather: pp 1 and overlap_param_gather
// false, which a search keeps.
//
// Note [accelerate under a trainer]
// transformers' Trainer (axolotl's, LLaMA-Factory's) runs under `accelerate
// launch --config_file`: the config's distribution is the run's unless the
// trainer's own config names one (its deepspeed, at any stage, or fsdp,
// which TrainingArguments hands the Accelerator: FrameworkConfig::
// own_distribution; the config's is then said, not applied, but its ranks,
// numerics and compilation still hold). The trainer's keys win where its
// config writes them (TrainingArguments' bf16 or fp16 sets
// ACCELERATE_MIXED_PRECISION over the launcher's); where it only falls
// back to its framework's default (an override with no line of its file),
// what accelerate's file writes wins, but mixed_precision 'no', which
// leaves the trainer's own inference (LLaMA-Factory loads a LoRA's base in
// bf16 whatever autocast does) and the defaults the trainer sets
// itself (FrameworkConfig::binding_defaults: TRL's bf16, true unless fp16,
// which TrainingArguments writes into ACCELERATE_MIXED_PRECISION). A base
// the trainer loads in fp32 is priced in 16 bits under accelerate's
// DeepSpeed or a sharding FSDP (Note [fp32 base] in models/src/peft.cpp). DDP's bucket cap means nothing under
// accelerate's FSDP or DeepSpeed and is dropped; num_processes over a
// trainer's own tp or cp is left to --set plan.dp (said). A LoRA under
// FSDP1 or SHARD_GRAD_OP is priced as FSDP2's full_shard (said), as the
// trainers' own FSDP keys are.
#include <algorithm>
#include <cctype>
#include <set>
#include <string>
#include <vector>

#include "dtsim/sim/config_node.hpp"
#include "dtsim/sim/error.hpp"
#include "dtsim/sim/framework_config.hpp"
#include "framework_common.hpp"

namespace dtsim::sim {
namespace {

/// Launcher keys that set no cost.
constexpr const char* kSilent[] = {"compute_environment", "debug", "downcast_bf16", "machine_rank", "main_training_function",
                                   "rdzv_backend", "same_network", "tpu_env", "tpu_use_cluster", "tpu_use_sudo", "tpu_name",
                                   "tpu_zone", "gpu_ids", "main_process_ip", "main_process_port", "enable_cpu_affinity",
                                   "mpirun_config", "command_file", "commands", "tpu_vm", "num_machines", "ipex_config",
                                   "megatron_lm_config", "fp8_config", "distributed_type", "mixed_precision", "num_processes",
                                   "use_cpu", "fsdp_config", "deepspeed_config", "parallelism_config", "dynamo_config"};

/// fsdp_config keys that set no cost dtsim prices.
constexpr const char* kFsdpSilent[] = {"fsdp_cpu_ram_efficient_loading",
                                       "fsdp_state_dict_type", "fsdp_sync_module_states", "fsdp_use_orig_params",
                                       "fsdp_transformer_layer_cls_to_wrap", "fsdp_min_num_params", "fsdp_ignored_modules"};

std::string upper(std::string s) {
  for (char& ch : s) ch = static_cast<char>(std::toupper(static_cast<unsigned char>(ch)));
  return s;
}

class Reader : detail::YamlFields {
 public:
  Reader(YAML::Node root, std::string file) : YamlFields(std::move(file)), root_(std::move(root)) {}

  FrameworkConfig read() {
    if (!root_.IsMap()) throw ConfigError(file() + ": an accelerate config is a mapping of its keys (distributed_type, num_processes, ...)");
    fc_.framework = "accelerate";
    fc_.file = file();
    detail::OverrideList out(fc_);
    const YAML::Node dt = root_["distributed_type"];
    if (null(dt)) fail(root_, "distributed_type", "missing; an accelerate config names one (NO, MULTI_GPU, FSDP, DEEPSPEED)");
    // PyYAML reads a bare NO (YAML 1.1) as false.
    const std::string w = upper(word(dt, "distributed_type"));
    type_ = w == "FALSE" || w == "NO" ? "NO" : w;
    // The DeepSpeed config's keys first: the launcher's ranks win over the
    // dp it leaves unset.
    if (type_ == "DEEPSPEED") deepspeed(out);
    parallel(out);
    if (type_ == "FSDP") {
      fsdp(out);
    } else if (type_ == "DEEPSPEED") {
      // Read above.
    } else if (type_ == "NO" || type_.rfind("MULTI_", 0) == 0) {
      fc_.plan = "ddp";
      if (type_ == "MULTI_CPU") fc_.unmodelled.push_back("distributed_type=MULTI_CPU (DDP over the cluster given)");
    } else if (type_ == "MEGATRON_LM") {
      fail(dt, "distributed_type", "MEGATRON_LM: accelerate hands the model to Megatron-LM; give its flags with --megatron-args");
    } else {
      fail(dt, "distributed_type", "'" + w + "'; valid: NO, MULTI_GPU, FSDP, DEEPSPEED (XLA and the others are not modelled)");
    }
    precision(out);
    if (const YAML::Node d = root_["dynamo_config"]; !null(d)) {
      if (!d.IsMap()) fail(d, "dynamo_config", "expected a mapping (dynamo_backend: INDUCTOR, ...)");
      if (const YAML::Node b = d["dynamo_backend"]; !null(b) && upper(word(b, "dynamo_config.dynamo_backend")) != "NO") {
        out.plan("kernels", "fused", from(b, "dynamo_config.dynamo_backend"));
      }
    }
    if (flag(root_["use_cpu"], "use_cpu", false)) fc_.unmodelled.push_back("use_cpu=true (priced on the cluster given)");
    // accelerate's Accelerator runs no pipeline and no forward parameter
    // gather (its MEGATRON_LM type is refused above): a search keeps them so.
    out.plan("pp", "1", file() + " (accelerate runs no pipeline parallelism)");
    out.plan("overlap_param_gather", "false", file() + " (no forward parameter gather outside Megatron)");
    fc_.search_fixed = {"pp", "overlap_param_gather"};
    for (auto it = root_.begin(); it != root_.end(); ++it) {
      const std::string key = it->first.IsScalar() ? it->first.Scalar() : "";
      if (std::find(std::begin(kSilent), std::end(kSilent), key) != std::end(kSilent) || null(it->second)) continue;
      fc_.unmodelled.push_back(key + (it->second.IsScalar() ? "=" + it->second.Scalar() : std::string()) + " (not read by dtsim)");
    }
    out.finish();
    return fc_;
  }

 private:
  /// num_processes and parallelism_config.
  void parallel(detail::OverrideList& out) {
    const YAML::Node pc = root_["parallelism_config"];
    if (!null(pc) && !pc.IsMap()) fail(pc, "parallelism_config", "expected a mapping (parallelism_config_tp_size, ...)");
    const auto size = [&](const char* k) -> std::int64_t {
      if (null(pc)) return 1;
      const YAML::Node n = pc[std::string("parallelism_config_") + k];
      return null(n) ? 1 : count(n, std::string("parallelism_config_") + k);
    };
    const std::int64_t tp = size("tp_size"), cp = size("cp_size"), sp = size("sp_size");
    if (sp > 1) {
      fc_.unmodelled.push_back("parallelism_config_sp_size=" + std::to_string(sp) +
                               " (sequence parallelism over those ranks is not priced; dp counts num_processes over it)");
    }
    if (!null(pc) && !null(pc["parallelism_config_cp_comm_strategy"])) {
      fc_.unmodelled.push_back("parallelism_config_cp_comm_strategy=" + word(pc["parallelism_config_cp_comm_strategy"], "parallelism_config_cp_comm_strategy") +
                               " (priced as dtsim's ring exchange)");
    }
    if (tp > 1) out.plan("tp", std::to_string(tp), from(pc["parallelism_config_tp_size"], "parallelism_config_tp_size"));
    if (cp > 1) out.plan("cp", std::to_string(cp), from(pc["parallelism_config_cp_size"], "parallelism_config_cp_size"));
    replicate_ = size("dp_replicate_size");
    const YAML::Node np = root_["num_processes"];
    std::int64_t procs = 0;
    if (!null(np) && np.IsScalar() && np.Scalar() != "-1") procs = count(np, "num_processes");
    if (type_ == "NO") procs = 1;
    if (procs > 0) {
      if (procs % (tp * cp * sp) != 0) {
        fail(np, "num_processes", std::to_string(procs) + " is not a multiple of tp x cp" + (sp > 1 ? " x sp" : "") + " = " +
                                      std::to_string(tp * cp * sp) + " (parallelism_config)");
      }
      out.plan("dp", std::to_string(procs / (tp * cp * sp)),
               type_ == "NO" ? from(root_["distributed_type"], "distributed_type") + " (one process)" : from(np, "num_processes"));
    }
  }

  /// mixed_precision (Note [accelerate configs]).
  void precision(detail::OverrideList& out) {
    const YAML::Node mp = root_["mixed_precision"];
    const std::string m = null(mp) ? "no" : word(mp, "mixed_precision");
    // DeepSpeedPlugin.set_mixed_precision fills only what the DeepSpeed
    // config leaves out or "auto"; its own bf16 or fp16 stands.
    if (ds_precision_) return;
    const std::string origin = null(mp) ? file() + " (mixed_precision, accelerate's default no)" : from(mp, "mixed_precision");
    if (m == "no" || m == "false") {
      out.plan("precision", "fp32", origin);
    } else if (m == "fp16" || m == "bf16") {
      out.plan("precision", m, origin);
    } else if (m == "fp8") {
      out.plan("precision", "fp8", origin);
      const YAML::Node fp8 = root_["fp8_config"];
      if (!null(fp8) && !fp8.IsMap()) fail(fp8, "fp8_config", "expected a mapping (backend, ...)");
      // Its keys with or without the fp8_ the launcher adds.
      const auto key = [&](const std::string& k) -> YAML::Node {
        if (null(fp8)) return YAML::Node();
        if (const YAML::Node n = fp8[k]; n) return n;
        return fp8["fp8_" + k];
      };
      const YAML::Node b = key("backend");
      const std::string backend = null(b) ? "" : upper(word(b, "fp8_config.backend"));
      if (backend == "AO") {
        out.plan("fp8_recipe", "tensorwise", from(b, "fp8_config.backend") + " (torchao's dynamic tensor-wise scaling)");
      } else if (backend.empty() || backend == "NO") {
        // Accelerator picks torchao where it is installed, else Transformer Engine, else MS-AMP.
        fc_.unmodelled.push_back("fp8_config.backend unset (accelerate picks torchao where installed, else Transformer Engine: priced as "
                                 "Transformer Engine's delayed scaling)");
      } else if (backend != "TE") {
        fc_.unmodelled.push_back("fp8_config.backend=" + backend + " (priced as Transformer Engine's delayed scaling)");
      }
      if (const YAML::Node g = key("enable_fsdp_float8_all_gather"); flag(g, "fp8_config.enable_fsdp_float8_all_gather", false)) {
        out.plan("fp8_param_gather", "true", from(g, "fp8_config.enable_fsdp_float8_all_gather"));
      }
    } else {
      fail(mp, "mixed_precision", "'" + m + "'; valid: no, fp16, bf16, fp8");
    }
  }

  /// fsdp_config (Note [accelerate configs]).
  void fsdp(detail::OverrideList& out) {
    fc_.plan = "fsdp";
    const YAML::Node c = root_["fsdp_config"];
    if (!null(c) && !c.IsMap()) fail(c, "fsdp_config", "expected a mapping (fsdp_version, fsdp_sharding_strategy, ...)");
    // Its keys with or without the fsdp_ the launcher adds.
    const auto key = [&](const std::string& k) -> YAML::Node {
      if (null(c)) return YAML::Node();
      if (const YAML::Node n = c["fsdp_" + k]; n) return n;
      return c[k];
    };
    const YAML::Node v = key("version");
    const std::int64_t version = null(v) ? 1 : count(v, "fsdp_config.fsdp_version");
    if (version != 1 && version != 2) fail(v, "fsdp_config.fsdp_version", std::to_string(version) + "; valid: 1, 2");
    out.plan("fsdp_version", std::to_string(version), null(v) ? file() + " (fsdp_version, accelerate's default 1)" : from(v, "fsdp_config.fsdp_version"));
    std::string mode = "full_shard";
    std::string origin = file() + " (accelerate's FULL_SHARD)";
    if (version == 1) {
      // The deprecated fsdp_sharding_strategy, else fsdp_reshard_after_forward,
      // which names the same strategies under FSDP1 (the plugin's fallback).
      const bool deprecated = !null(key("sharding_strategy"));
      const std::string k = deprecated ? "fsdp_config.fsdp_sharding_strategy" : "fsdp_config.fsdp_reshard_after_forward";
      if (const YAML::Node s = deprecated ? key("sharding_strategy") : key("reshard_after_forward"); !null(s)) {
        static const char* const kNames[] = {"full_shard", "shard_grad_op", "no_shard", "hybrid_shard", "hybrid_shard_zero2"};
        const std::string t = upper(word(s, k));
        int index = -1;
        for (int i = 0; i < 5; ++i) {
          if (t == upper(kNames[i]) || t == std::to_string(i + 1)) index = i;
        }
        // A boolean is FSDP2's: accelerate refuses it under FSDP1.
        if (index < 0) {
          fail(s, k, "'" + t + "'; valid: FULL_SHARD, SHARD_GRAD_OP, NO_SHARD, HYBRID_SHARD, HYBRID_SHARD_ZERO2 (or 1-5)" +
                         (deprecated ? "" : ", a strategy's name under fsdp_version 1"));
        }
        mode = kNames[index];
        origin = from(s, k);
        if (mode == "hybrid_shard_zero2") {
          fc_.unmodelled.push_back("fsdp_sharding_strategy=HYBRID_SHARD_ZERO2 (SHARD_GRAD_OP within a node: priced as hybrid_shard)");
          mode = "hybrid_shard";
        }
      }
    } else if (const YAML::Node r = key("reshard_after_forward"); !null(r) && !flag(r, "fsdp_config.fsdp_reshard_after_forward", true)) {
      mode = "shard_grad_op";  // the gathered parameters kept from the forward to the backward
      origin = from(r, "fsdp_config.fsdp_reshard_after_forward");
    }
    if (replicate_ > 1) {
      mode = "hybrid_shard";
      origin = from(root_["parallelism_config"], "parallelism_config_dp_replicate_size");
      fc_.unmodelled.push_back("parallelism_config_dp_replicate_size=" + std::to_string(replicate_) +
                               " (HSDP priced as dtsim's hybrid_shard: sharded within each node, replicated across nodes)");
    }
    out.plan("fsdp", mode, origin);
    if (const YAML::Node o = key("offload_params"); flag(o, "fsdp_config.fsdp_offload_params", false)) {
      out.plan("offload_params", "cpu", from(o, "fsdp_config.fsdp_offload_params"));
      out.plan("offload_optimizer", "cpu", from(o, "fsdp_config.fsdp_offload_params"));
    }
    if (const YAML::Node a = key("activation_checkpointing"); flag(a, "fsdp_config.fsdp_activation_checkpointing", false)) {
      out.plan("recompute", "full", from(a, "fsdp_config.fsdp_activation_checkpointing"));
    }
    const YAML::Node w = key("auto_wrap_policy");
    const std::string policy = null(w) ? "NO_WRAP" : upper(word(w, "fsdp_config.fsdp_auto_wrap_policy"));
    if (policy != "TRANSFORMER_BASED_WRAP") {
      fc_.unmodelled.push_back("fsdp_auto_wrap_policy=" + policy + (null(w) ? " (the plugin's default where unset" : " (") +
                               "; priced as TRANSFORMER_BASED_WRAP, a unit a decoder layer)");
    }
    if (version == 1) {
      // FSDP1's overlap: dtsim prices BACKWARD_PRE and no forward prefetch;
      // the plugin passes None (no backward prefetch) where the key is unset.
      const YAML::Node bp = key("backward_prefetch");
      const std::string b = null(bp) ? "unset" : upper(word(bp, "fsdp_config.fsdp_backward_prefetch"));
      if (b != "BACKWARD_PRE") fc_.unmodelled.push_back("fsdp_backward_prefetch=" + b + " (priced as BACKWARD_PRE)");
      if (const YAML::Node fp = key("forward_prefetch"); flag(fp, "fsdp_config.fsdp_forward_prefetch", false)) {
        fc_.unmodelled.push_back("fsdp_forward_prefetch=true (priced without forward prefetch)");
      }
    }
    if (!null(c)) {
      for (auto it = c.begin(); it != c.end(); ++it) {
        std::string k = it->first.IsScalar() ? it->first.Scalar() : "";
        if (k.rfind("fsdp_", 0) != 0) k = "fsdp_" + k;
        static const char* const kRead[] = {"fsdp_version", "fsdp_sharding_strategy", "fsdp_reshard_after_forward", "fsdp_offload_params",
                                            "fsdp_activation_checkpointing", "fsdp_auto_wrap_policy", "fsdp_backward_prefetch",
                                            "fsdp_forward_prefetch"};
        if (std::find(std::begin(kRead), std::end(kRead), k) != std::end(kRead)) continue;
        if (std::find(std::begin(kFsdpSilent), std::end(kFsdpSilent), k) != std::end(kFsdpSilent) || null(it->second)) continue;
        fc_.unmodelled.push_back("fsdp_config." + k + (it->second.IsScalar() ? "=" + it->second.Scalar() : std::string()) + " (not read by dtsim)");
      }
    }
  }

  /// deepspeed_config: its file, or DeepSpeedPlugin's own fields.
  void deepspeed(detail::OverrideList& out) {
    const YAML::Node c = root_["deepspeed_config"];
    if (!null(c) && !c.IsMap()) fail(c, "deepspeed_config", "expected a mapping (deepspeed_config_file, or zero_stage, ...)");
    FrameworkConfig ds;
    bool file_given = false;
    if (const YAML::Node f = null(c) ? YAML::Node() : c["deepspeed_config_file"]; !null(f)) {
      file_given = true;
      (void)word(f, "deepspeed_config.deepspeed_config_file");  // a path: a mapping fails here, as before
      ds = detail::deepspeed_at(f, *this, "deepspeed_config.deepspeed_config_file", "");
    } else {
      // DeepSpeedPlugin's fields as the DeepSpeed config they make.
      YAML::Node d(YAML::NodeType::Map);
      YAML::Node z(YAML::NodeType::Map);
      const YAML::Node st = null(c) ? YAML::Node() : c["zero_stage"];
      const std::string sw = null(st) ? "2" : word(st, "deepspeed_config.zero_stage");
      if (sw != "0" && sw != "1" && sw != "2" && sw != "3") fail(st, "deepspeed_config.zero_stage", "'" + sw + "'; valid: 0, 1, 2, 3");
      const std::int64_t stage = sw[0] - '0';
      z["stage"] = stage;
      for (const char* k : {"offload_optimizer_device", "offload_param_device"}) {
        const YAML::Node n = null(c) ? YAML::Node() : c[k];
        const std::string dev = null(n) ? "none" : word(n, std::string("deepspeed_config.") + k);
        if (dev != "none" && dev != "cpu" && dev != "nvme") fail(n, std::string("deepspeed_config.") + k, "'" + dev + "'; valid: none, cpu, nvme");
        if (dev == "none") continue;
        YAML::Node o(YAML::NodeType::Map);
        o["device"] = dev;
        z[std::string(k) == "offload_optimizer_device" ? "offload_optimizer" : "offload_param"] = o;
      }
      d["zero_optimization"] = z;
      d["train_micro_batch_size_per_gpu"] = "auto";
      ds = detail::interpret_deepspeed(d, file());
    }
    bool host_adam = false;
    detail::merge_hf_deepspeed(ds, out, fc_, host_adam);
    // A file's own bf16 or fp16 enabled (not "auto", which is left to accelerate).
    ds_precision_ = file_given && std::any_of(ds.overrides.begin(), ds.overrides.end(), [](const Override& o) {
      return o.section == "plan" && o.path == "precision" && (o.value == "bf16" || o.value == "fp16");
    });
    // The plugin's gradient_accumulation_steps (1 by default): the script's Accelerator's.
    if (const YAML::Node ga = null(c) ? YAML::Node() : c["gradient_accumulation_steps"]; !null(ga)) {
      out.plan("grad_accum", std::to_string(count(ga, "deepspeed_config.gradient_accumulation_steps")),
               from(ga, "deepspeed_config.gradient_accumulation_steps"));
    }
  }

  YAML::Node root_;
  FrameworkConfig fc_;
  std::string type_;            ///< distributed_type, upper case
  std::int64_t replicate_ = 1;  ///< parallelism_config_dp_replicate_size
  bool ds_precision_ = false;   ///< the DeepSpeed config's own bf16 or fp16
};

}  // namespace

FrameworkConfig parse_accelerate_config(const std::string& yaml_text, const std::string& file) {
  if (yaml_text.size() > kMaxConfigBytes) throw ConfigError(file + ": larger than a config may be");
  return Reader(parse_config_text(yaml_text, file, false), file).read();
}

FrameworkConfig read_accelerate_config(const std::string& path) { return parse_accelerate_config(detail::read_config_text(path), path); }

FrameworkConfig with_accelerate(const FrameworkConfig& trainer, const FrameworkConfig& accelerate) {
  // Note [accelerate under a trainer].
  FrameworkConfig out = trainer;
  out.framework = trainer.framework + " under accelerate";
  out.overrides.clear();
  const auto key = [](const Override& o) { return o.section + "." + o.path; };
  const auto written = [](const FrameworkConfig& fc, const Override& o) { return o.from.rfind(fc.file + ":", 0) == 0; };
  // accelerate's keys that bind: those its file writes, but a 32-bit "no",
  // which leaves the trainer's own inference (a LoRA's bf16 base) as it is.
  const auto binds = [&](const Override& o) {
    return o.value != "null" && written(accelerate, o) && !(o.path == "precision" && o.value == "fp32");
  };
  // Where the trainer's config names its own distribution, accelerate's
  // launch keys still hold: the ranks, the numerics, compilation.
  static const char* const kLaunch[] = {"dp", "tp", "cp", "precision", "fp8_recipe", "fp8_param_gather", "kernels"};
  const auto launch = [&](const Override& o) { return std::find(std::begin(kLaunch), std::end(kLaunch), o.path) != std::end(kLaunch); };
  std::set<std::string> bound;
  if (!trainer.own_distribution) {
    out.plan = accelerate.plan;
    out.overrides = accelerate.overrides;
    for (const Override& o : accelerate.overrides) {
      if (binds(o)) bound.insert(key(o));
    }
  } else {
    for (const Override& o : accelerate.overrides) {
      if (launch(o) && binds(o)) {
        out.overrides.push_back(o);
        bound.insert(key(o));
      }
    }
    out.unmodelled.push_back(accelerate.file + " distributed_type (the trainer config's own " + trainer.plan.value_or("plan") + " runs)");
  }
  bool trainer_splits = false;  // the trainer writes its own tp or cp
  for (const Override& o : trainer.overrides) {
    // The trainer's resets were against its own starting plan; its
    // defaults yield to what accelerate's file writes.
    if (o.value == "null" && (!trainer.own_distribution || bound.count(key(o)) > 0)) continue;
    const bool binding = std::find(trainer.binding_defaults.begin(), trainer.binding_defaults.end(), o.path) != trainer.binding_defaults.end();
    if (bound.count(key(o)) > 0 && !written(trainer, o) && !binding) continue;
    // DDP's bucket cap does nothing under accelerate's FSDP or DeepSpeed.
    if (!trainer.own_distribution && o.path == "bucket_mb" && accelerate.plan != std::optional<std::string>("ddp")) continue;
    trainer_splits = trainer_splits || ((o.path == "tp" || o.path == "cp") && o.value != "null" && o.value != "1");
    out.overrides.push_back(o);
  }
  if (trainer_splits && bound.count("plan.dp") > 0) {
    // num_processes over the trainer's tp and cp, which accelerate's file did not divide by.
    out.overrides.erase(std::remove_if(out.overrides.begin(), out.overrides.end(), [&](const Override& o) { return key(o) == "plan.dp"; }),
                        out.overrides.end());
    out.unmodelled.push_back(accelerate.file + " num_processes (over the trainer's tp and cp: give --set plan.dp)");
  }
  // A LoRA under FSDP1 or SHARD_GRAD_OP: priced as FSDP2's full_shard
  // (Note [Frozen weights under FSDP]), as the trainers' own FSDP keys are.
  const bool adapter = std::any_of(out.overrides.begin(), out.overrides.end(), [](const Override& o) { return o.section == "model" && o.path == "peft"; });
  if (adapter && out.plan == std::optional<std::string>("fsdp") && !trainer.own_distribution) {
    for (Override& o : out.overrides) {
      if (o.section == "plan" && o.path == "fsdp_version" && o.value == "1") {
        o.value = "2";
        o.from += " (FSDP1 beside a LoRA: priced as FSDP2)";
        out.unmodelled.push_back("fsdp_version=1 with an adapter (PEFT's fsdp_auto_wrap_policy, each adapter a unit: priced as FSDP2's "
                                 "sharding of the same bytes, the adapters' own small collectives not priced)");
      } else if (o.section == "plan" && o.path == "fsdp" && o.value == "shard_grad_op") {
        o.value = "full_shard";
        o.from += " (shard_grad_op beside an adapter: priced as full_shard)";
        out.unmodelled.push_back("SHARD_GRAD_OP with an adapter (priced as full_shard)");
      }
    }
  }
  // An fp32 base under DeepSpeed, which casts the module to 16 bits, or
  // sharded by FSDP, which gathers it in 16 bits: priced as a 16-bit base
  // (Note [fp32 base] in models/src/peft.cpp).
  if (!trainer.own_distribution) {
    out.deepspeed = accelerate.deepspeed;
    // Both keep fp32 copies of what is trained under mixed precision
    // (DeepSpeed's fp32 partitions; accelerate upcasts FSDP's trainable
    // parameters to fp32 where mixed_precision is not no), whatever dtype
    // the trainer loaded them in: accelerate's file's mixed_precision, or
    // the trainer's own autocast default (TRL's bf16).
    const auto mixed_value = [](const Override& o) {
      return o.section == "plan" && o.path == "precision" && (o.value == "bf16" || o.value == "fp16" || o.value == "fp8");
    };
    const bool trainer_autocast = std::find(trainer.binding_defaults.begin(), trainer.binding_defaults.end(), "precision") !=
                                  trainer.binding_defaults.end();
    const bool mixed = trainer_autocast || std::any_of(accelerate.overrides.begin(), accelerate.overrides.end(),
                                                       [&](const Override& o) { return mixed_value(o) && written(accelerate, o); });
    if (mixed && (accelerate.deepspeed || out.plan == std::optional<std::string>("fsdp"))) {
      for (Override& o : out.overrides) {
        if (o.section != "plan" || o.path != "master_weights" || o.value != "false") continue;
        o.value = "null";
        o.from += accelerate.deepspeed ? " (DeepSpeed keeps fp32 partitions of what is trained)" : " (accelerate upcasts FSDP's trainable parameters to fp32)";
      }
    }
    const bool sharded = std::any_of(out.overrides.begin(), out.overrides.end(), [&](const Override& o) {
      return out.plan == std::optional<std::string>("fsdp") && o.section == "plan" && o.path == "fsdp" && o.value != "no_shard";
    });
    for (Override& o : out.overrides) {
      // TRL's chunked loss: DeepSpeed runs without autocast, so its chunks
      // project in fp32 (Note [Fused linear cross-entropy]).
      if (accelerate.deepspeed && o.section == "plan" && o.path == "loss_kernel" && o.value == "chunked_nll") {
        o.value = "chunked_nll_fp32";
        o.from += " (DeepSpeed runs without autocast: the chunks project in fp32)";
        if (accelerate.plan == std::optional<std::string>("zero3")) out.unmodelled.push_back(detail::kChunkedNllZero3);
      }
      if (o.section != "model" || o.path != "peft" || o.value != "lora_fp32" || !(accelerate.deepspeed || sharded)) continue;
      o.value = "lora";
      o.from += accelerate.deepspeed ? " (DeepSpeed casts the fp32 base to its 16-bit type)" : " (FSDP's shards of the fp32 base gathered in 16 bits)";
      if (!accelerate.deepspeed) out.unmodelled.push_back("the base loaded in float32 under FSDP (its shards priced in 16 bits)");
    }
  }
  for (const std::string& u : accelerate.unmodelled) out.unmodelled.push_back(accelerate.file + " " + u);
  return out;
}

}  // namespace dtsim::sim
