// A DeepSpeed config JSON into dtsim's plan keys (Note [Framework configs]
// in framework_config.cpp). Keys and defaults as deepspeed/runtime/config.py,
// deepspeed/runtime/constants.py and deepspeed/runtime/zero/config.py have
// them; "auto" is HuggingFace's placeholder (transformers' HfDeepSpeedConfig
// fills it from TrainingArguments), read as "not given".
#include <cmath>
#include <optional>

#include "dtsim/sim/error.hpp"
#include "dtsim/sim/framework_config.hpp"
#include "framework_common.hpp"

namespace dtsim::sim {
namespace {

using detail::format_number;

/// "file:line (key)" for an override's origin.
std::string from(const ConfigMap& c, const std::string& key) { return c.where(key) + " (" + c.full_key(key) + ")"; }

std::string scalar_text(const YAML::Node& n) {
  if (n.IsScalar()) return n.Scalar();
  if (n.IsMap()) return "{...}";
  if (n.IsSequence()) return "[...]";
  return "null";
}

bool is_auto(const ConfigMap& c, const YAML::Node& node, const std::string& key) {
  return c.has(key) && node[key].IsScalar() && node[key].Scalar() == "auto";
}

/// An integer >= 1 or "auto" (nullopt); absent: nullopt.
std::optional<std::int64_t> batch_value(const ConfigMap& c, const YAML::Node& node, const std::string& key) {
  if (!c.has(key) || is_auto(c, node, key)) return std::nullopt;
  return c.get_int(key, 0, 1, std::int64_t{1} << 40);
}

/// A size in elements (DeepSpeed writes 5e8 or 500000000); nullopt for "auto".
std::optional<double> elements(const ConfigMap& c, const YAML::Node& node, const std::string& key) {
  if (!c.has(key) || is_auto(c, node, key)) return std::nullopt;
  return c.get_double(key, 0, 0, 1e15);
}

bool flag(const ConfigMap& c, const YAML::Node& node, const std::string& key, bool fallback) {
  if (is_auto(c, node, key)) return fallback;
  return c.get_bool(key, fallback);
}

}  // namespace

FrameworkConfig parse_deepspeed_config(const std::string& json_text, const std::string& file) {
  return detail::interpret_deepspeed(parse_config_text(json_text, file, true), file);
}

FrameworkConfig detail::interpret_deepspeed(const YAML::Node& root, const std::string& file) {
  if (!root.IsMap()) {
    throw ConfigError(file + ": a DeepSpeed config is a JSON object of keys (train_batch_size, zero_optimization, ...)");
  }
  FrameworkConfig fc;
  fc.framework = "DeepSpeed";
  fc.file = file;
  detail::OverrideList out(fc);
  const ConfigMap c(root, file, "");
  auto unmodelled = [&](const std::string& key, const YAML::Node& value, const std::string& why = "") {
    fc.unmodelled.push_back(key + "=" + scalar_text(value) + (why.empty() ? "" : " (" + why + ")"));
  };

  // Precision first: it sets the bytes of a gradient element in a bucket.
  // config.py: fp16 and bf16 cannot both be enabled.
  std::string precision = "fp32";
  std::string precision_from = file;
  for (const char* section : {"fp16", "bf16", "bfloat16", "amp"}) {
    if (!c.has(section)) continue;
    const ConfigMap s = c.sub(section);
    const YAML::Node n = root[section];
    if (is_auto(s, n, "enabled")) {
      unmodelled(std::string(section) + ".enabled", n["enabled"], "left to HuggingFace; dtsim's precision kept");
      continue;
    }
    if (!s.get_bool("enabled", false)) continue;
    const std::string p = std::string(section) == "fp16" || std::string(section) == "amp" ? "fp16" : "bf16";
    if (precision != "fp32" && precision != p) {
      s.fail("enabled", "true with " + precision + " enabled too; DeepSpeed refuses both (\"bf16 and fp16 modes cannot be simultaneously enabled\")");
    }
    precision = p;
    precision_from = from(s, "enabled");
  }
  const int grad_bytes = precision == "fp32" ? 4 : 2;
  out.plan("precision", precision, precision_from);

  // The batch: train_batch_size = train_micro_batch_size_per_gpu x
  // gradient_accumulation_steps x the data-parallel size (config.py,
  // _batch_assertion); given two, DeepSpeed derives the third
  // (_set_batch_related_parameters), as resolve() does once dp is known.
  const auto train = batch_value(c, root, "train_batch_size");
  const auto micro = batch_value(c, root, "train_micro_batch_size_per_gpu");
  const auto accum = batch_value(c, root, "gradient_accumulation_steps");
  if (train && micro && accum && *train % (*micro * *accum) != 0) {
    c.fail("train_batch_size", std::to_string(*train) + " != train_micro_batch_size_per_gpu x gradient_accumulation_steps x data-parallel size for any size: " +
                                   std::to_string(*micro) + " x " + std::to_string(*accum) + " = " + std::to_string(*micro * *accum) +
                                   " does not divide it (DeepSpeed's rule, config.py _batch_assertion); give two of the three");
  }
  if (!train && !micro) {
    const bool any_auto = is_auto(c, root, "train_batch_size") || is_auto(c, root, "train_micro_batch_size_per_gpu");
    if (!any_auto) {
      throw ConfigError((accum ? c.where("gradient_accumulation_steps") : file) + ": neither train_batch_size nor train_micro_batch_size_per_gpu is given; "
                        "DeepSpeed needs one (\"Either train_batch_size or train_micro_batch_size_per_gpu needs to be provided\")");
    }
  }
  out.plan("global_batch", train ? std::to_string(*train) : "null", train ? from(c, "train_batch_size") : file);
  out.plan("micro_batch", micro ? std::to_string(*micro) : "null", micro ? from(c, "train_micro_batch_size_per_gpu") : file);
  // With train_batch_size alone or the micro-batch alone DeepSpeed sets
  // gradient_accumulation_steps = 1; resolve() does the same.
  out.plan("grad_accum", accum && (train || micro) ? std::to_string(*accum) : "null",
           accum ? from(c, "gradient_accumulation_steps") : file);
  if (train) fc.global_batch = *train;

  // ZeRO (zero/config.py, DeepSpeedZeroConfig).
  int stage = 0;
  bool offload_optimizer = false;
  if (c.has("zero_optimization")) {
    const ConfigMap z = c.sub("zero_optimization");
    const YAML::Node zn = root["zero_optimization"];
    stage = static_cast<int>(z.get_int("stage", 0, 0, 3));
    out.plan("zero_stage", std::to_string(stage), from(z, "stage"));
    // overlap_comm defaults to true for stage 3, false otherwise (zero/config.py, overlap_comm_valid).
    const bool overlap = flag(z, zn, "overlap_comm", stage == 3);
    out.plan("overlap", overlap ? "true" : "false", z.has("overlap_comm") ? from(z, "overlap_comm") : file + " (DeepSpeed's overlap_comm default)");
    // Buckets count elements (default 5e8); a gradient element is 2 bytes in fp16/bf16, 4 in fp32.
    if (stage > 0) {
      if (is_auto(z, zn, "reduce_bucket_size")) {
        unmodelled("zero_optimization.reduce_bucket_size", zn["reduce_bucket_size"], "HuggingFace's hidden^2; dtsim's bucket_mb kept");
      } else {
        const double e = elements(z, zn, "reduce_bucket_size").value_or(5e8);
        out.plan("bucket_mb", format_number(e * grad_bytes / 1e6),
                 z.has("reduce_bucket_size") ? from(z, "reduce_bucket_size") : file + " (DeepSpeed's reduce_bucket_size default 5e8)");
      }
    }
    for (const char* section : {"offload_optimizer", "offload_param"}) {
      if (!z.has(section)) continue;
      const ConfigMap o = z.sub(section);
      const YAML::Node on = zn[section];
      const std::string device = o.get_string("device", "none");
      const std::string key = std::string(section) == "offload_optimizer" ? "offload_optimizer" : "offload_params";
      if (device == "cpu" || device == "nvme") {
        out.plan(key, "cpu", from(o, "device"));
        if (key == "offload_optimizer") offload_optimizer = true;
        if (device == "nvme") unmodelled("zero_optimization." + std::string(section) + ".device", on["device"], "priced as cpu");
      } else if (device == "none") {
        out.plan(key, "none", from(o, "device"));
      } else {
        o.fail("device", "'" + device + "' is not one of none, cpu, nvme (DeepSpeed's OffloadDeviceEnum)");
      }
      // pin_memory, buffer_count, fast_init, nvme_path, ratio: host-side details.
      for (const auto& k : o.keys()) {
        if (k == "device" || k == "pin_memory" || k == "nvme_path") continue;
        unmodelled("zero_optimization." + std::string(section) + "." + k, on[k]);
      }
    }
    // The deprecated booleans (zero/config.py: cpu_offload -> offload_optimizer, cpu_offload_params -> offload_param).
    if (z.has("cpu_offload") && z.get_bool("cpu_offload", false)) {
      out.plan("offload_optimizer", "cpu", from(z, "cpu_offload"));
      offload_optimizer = true;
    }
    if (z.has("cpu_offload_params") && z.get_bool("cpu_offload_params", false)) out.plan("offload_params", "cpu", from(z, "cpu_offload_params"));

    // ZeRO-3's coordinator, modelled as DeepSpeed runs it (Note [ZeRO-3
    // modules] in sim/src/lowering/zero3_coordinator.hpp); HuggingFace's
    // "auto" (0.9 h^2, 10 h) is left at DeepSpeed's defaults and said.
    // DeepSpeedZeroConfig's fields are prefetch_bucket_size and the like,
    // stage3_... their aliases (zero/config.py, Field(alias=...), populated
    // by either name): axolotl's deepspeed_configs write max_live_parameters.
    for (const char* k : {"stage3_prefetch_bucket_size", "stage3_max_live_parameters", "stage3_max_reuse_distance",
                          "stage3_param_persistence_threshold"}) {
      const std::string field = std::string(k).substr(std::string("stage3_").size());
      if (z.has(k) && z.has(field)) {
        z.fail(field, "given beside " + std::string(k) + ", its alias (DeepSpeed's zero/config.py); give one");
      }
      const std::string key = z.has(k) ? k : field;
      if (!z.has(key)) continue;
      if (is_auto(z, zn, key)) {
        unmodelled("zero_optimization." + key, zn[key], "HuggingFace's auto; DeepSpeed's default kept");
      } else if (const auto e = elements(z, zn, key)) {
        out.plan(k, format_number(*e), from(z, key));
      }
    }
    // Read but only noted when they differ from what dtsim assumes.
    struct Knob {
      const char* key;
      double dtsim;  // the value dtsim's model amounts to (DeepSpeed's default unless said)
    };
    for (const auto& k : {Knob{"allgather_bucket_size", 5e8}, Knob{"sub_group_size", 1e9}, Knob{"zero_hpz_partition_size", 1}, Knob{"mics_shard_size", -1}}) {
      if (!z.has(k.key)) continue;
      if (is_auto(z, zn, k.key) || z.get_double(k.key, 0, -1, 1e18) != k.dtsim) unmodelled("zero_optimization." + std::string(k.key), zn[k.key]);
    }
    // reduce_scatter and allgather_partitions default to true, which is what
    // dtsim models (reduce-scatter, all-gather); under stage 1
    // reduce_scatter false all-reduces each bucket (average_tensor's
    // gradient_reduction_w_predivide: Note [ZeRO-1's reduction]), elsewhere
    // it is noted; contiguous_gradients false under stage 3 (its buffers are
    // not modelled apart) is noted.
    if (stage != 2 && z.has("contiguous_gradients") && !flag(z, zn, "contiguous_gradients", true)) {
      unmodelled("zero_optimization.contiguous_gradients", zn["contiguous_gradients"]);
    }
    // Note [ZeRO-2's buffers]: contiguous_gradients (default true) sets where
    // ZeRO-2's gradients wait for their reduction.
    if (stage == 2) {
      const bool contiguous = flag(z, zn, "contiguous_gradients", true);
      out.plan("contiguous_gradients", contiguous ? "true" : "false",
               z.has("contiguous_gradients") ? from(z, "contiguous_gradients") : file + " (DeepSpeed's contiguous_gradients default)");
    }
    if (stage == 1) {
      const bool rs = flag(z, zn, "reduce_scatter", true);
      out.plan("reduce_scatter", rs ? "true" : "false",
               z.has("reduce_scatter") ? from(z, "reduce_scatter") : file + " (DeepSpeed's reduce_scatter default)");
    }
    for (const char* k : {"reduce_scatter", "allgather_partitions"}) {
      if (stage == 1 && std::string(k) == "reduce_scatter") continue;
      if (z.has(k) && !flag(z, zn, k, true)) unmodelled("zero_optimization." + std::string(k), zn[k]);
    }
    for (const char* k : {"zero_quantized_weights", "zero_quantized_gradients", "zero_quantized_nontrainable_weights",
                          "round_robin_gradients", "mics_hierarchical_params_gather", "use_multi_rank_bucket_allreduce"}) {
      if (z.has(k) && flag(z, zn, k, false)) unmodelled("zero_optimization." + std::string(k), zn[k]);
    }
    // Checkpointing and loading only.
    const char* const kIgnored[] = {"stage", "overlap_comm", "reduce_bucket_size", "offload_optimizer", "offload_param",
                                    "cpu_offload", "cpu_offload_params", "cpu_offload_use_pin_memory",
                                    "stage3_gather_16bit_weights_on_model_save", "stage3_gather_fp16_weights_on_model_save",
                                    "gather_16bit_weights_on_model_save", "elastic_checkpoint", "load_from_fp32_weights",
                                    "ignore_unused_parameters", "legacy_stage1", "memory_efficient_linear", "log_trace_cache_warnings"};
    for (const auto& k : z.keys()) {
      bool known = false;
      for (const char* i : kIgnored) known = known || k == i;
      for (const char* i : {"allgather_bucket_size", "stage3_prefetch_bucket_size", "stage3_max_live_parameters",
                            "stage3_max_reuse_distance", "stage3_param_persistence_threshold", "prefetch_bucket_size",
                            "max_live_parameters", "max_reuse_distance", "param_persistence_threshold", "sub_group_size",
                            "zero_hpz_partition_size", "mics_shard_size", "contiguous_gradients", "reduce_scatter",
                            "allgather_partitions", "zero_quantized_weights", "zero_quantized_gradients",
                            "zero_quantized_nontrainable_weights", "round_robin_gradients",
                            "mics_hierarchical_params_gather", "use_multi_rank_bucket_allreduce"}) {
        known = known || k == i;
      }
      if (!known) unmodelled("zero_optimization." + k, zn[k]);
    }
  } else {
    out.plan("zero_stage", "0", file + " (no zero_optimization)");
  }

  // The optimizer (config.py: the type's name, in any case; engine.py runs
  // "Adam" as AdamW unless adam_w_mode is false, which costs the same).
  if (c.has("optimizer")) {
    const ConfigMap o = c.sub("optimizer");
    const std::string type = o.get_string("type", "");
    std::string lower;
    for (char ch : type) lower += static_cast<char>(std::tolower(static_cast<unsigned char>(ch)));
    if (lower == "adam" || lower == "fusedadam" || lower == "cpuadam" || lower == "deepspeedcpuadam") {
      out.plan("optimizer", "adam", from(o, "type"));
    } else if (lower == "adamw") {
      out.plan("optimizer", "adamw", from(o, "type"));
    } else if (lower == "sgd") {
      out.plan("optimizer", "sgd", from(o, "type"));
      // Note [SGD momentum] (plan.cpp): torch.optim.SGD with the config's
      // params, so momentum 0 (no buffer) unless params.momentum says.
      if (o.has("params") && o.sub("params").has("momentum")) {
        const ConfigMap params = o.sub("params");
        out.plan("sgd_momentum", format_number(params.get_double("momentum", 0, 0, 1)), from(params, "momentum"));
      } else {
        out.plan("sgd_momentum", "0", from(o, "type") + " (torch.optim.SGD's momentum default)");
      }
    } else if (!type.empty()) {
      unmodelled("optimizer.type", root["optimizer"]["type"], "priced as adamw");
      out.plan("optimizer", "adamw", from(o, "type"));
    }
  }

  // DeepSpeed's activation checkpointing configures deepspeed.checkpointing,
  // which Megatron-DeepSpeed calls around every transformer layer: full recompute.
  if (c.has("activation_checkpointing")) {
    const ConfigMap a = c.sub("activation_checkpointing");
    const YAML::Node an = root["activation_checkpointing"];
    out.plan("recompute", "full", c.where("activation_checkpointing") + " (activation_checkpointing)");
    // Note [DeepSpeed checkpoints] (lowering/passes/deepspeed_checkpointing.cpp).
    for (const char* k : {"partition_activations", "cpu_checkpointing"}) {
      if (a.has(k) && flag(a, an, k, false)) out.plan(k, "true", c.where("activation_checkpointing") + " (activation_checkpointing." + k + ")");
    }
    if (a.has("contiguous_memory_optimization") && flag(a, an, "contiguous_memory_optimization", false)) {
      unmodelled("activation_checkpointing.contiguous_memory_optimization", an["contiguous_memory_optimization"]);
    }
    if (a.has("number_checkpoints")) unmodelled("activation_checkpointing.number_checkpoints", an["number_checkpoints"]);
  }

  // Keys that change neither time nor memory, or are read above.
  const char* const kSkipped[] = {"train_batch_size", "train_micro_batch_size_per_gpu", "gradient_accumulation_steps",
                                  "zero_optimization", "fp16", "bf16", "bfloat16", "amp", "optimizer",
                                  "activation_checkpointing", "scheduler", "gradient_clipping", "steps_per_print",
                                  "wall_clock_breakdown", "dump_state", "tensorboard", "wandb", "csv_monitor", "comet",
                                  "comms_logger", "flops_profiler", "memory_breakdown", "zero_allow_untested_optimizer",
                                  "zero_force_ds_cpu_optimizer", "checkpoint", "prescale_gradients", "gradient_predivide_factor",
                                  "seed", "autotuning", "timers", "monitor_config", "disable_allgather"};
  for (const auto& k : c.keys()) {
    bool skip = false;
    for (const char* s : kSkipped) skip = skip || k == s;
    if (!skip) unmodelled(k, root[k]);
  }
  fc.plan = stage == 0 ? "ddp" : stage == 1 ? "zero1" : stage == 2 ? (offload_optimizer ? "zero2-offload" : "zero2") : "zero3";
  out.finish();
  return fc;
}

FrameworkConfig read_deepspeed_config(const std::string& path) {
  return parse_deepspeed_config(detail::read_config_text(path), path);
}

}  // namespace dtsim::sim
