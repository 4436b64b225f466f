// A torchtitan job TOML into dtsim's plan keys (Note [Framework configs] in
// framework_config.cpp). Sections, keys and defaults as
// torchtitan/config/job_config.py has them (Parallelism, Training,
// ActivationCheckpoint, Model, Optimizer, Float8), and the shape of its
// train_configs/*.toml; parsed by toml++ (header-only), whose errors carry
// the line and column.
#define TOML_HEADER_ONLY 1
#define TOML_EXCEPTIONS 1
#include <toml++/toml.h>

#include <algorithm>
#include <cctype>
#include <optional>

#include "dtsim/sim/error.hpp"
#include "dtsim/sim/framework_config.hpp"
#include "framework_common.hpp"

namespace dtsim::sim {
namespace {

/// A value as written, for the unmodelled list.
std::string toml_text(const toml::node& n) {
  if (const auto* s = n.as_string()) return s->get();
  if (const auto* i = n.as_integer()) return std::to_string(i->get());
  if (const auto* b = n.as_boolean()) return b->get() ? "true" : "false";
  if (const auto* f = n.as_floating_point()) return detail::format_number(f->get());
  if (const auto* a = n.as_array()) {
    std::string out = "[";
    for (std::size_t i = 0; i < a->size(); ++i) out += (i ? ", " : "") + toml_text((*a)[i]);
    return out + "]";
  }
  return "{...}";
}

/// A value in an error: a string quoted and named as one.
std::string describe(const toml::node& n) {
  if (const auto* s = n.as_string()) return "\"" + s->get() + "\" (a string)";
  return toml_text(n);
}

/// One [section] being read: typed getters whose errors name file:line and the key.
class Section {
 public:
  Section(const toml::table* t, std::string file, std::string name) : t_(t), file_(std::move(file)), name_(std::move(name)) {}
  bool has(const std::string& key) const { return t_ != nullptr && t_->contains(key); }
  const toml::node& node(const std::string& key) const { return *t_->get(key); }
  std::string where(const std::string& key) const {
    const auto& src = has(key) ? node(key).source() : t_ != nullptr ? t_->source() : toml::source_region{};
    return file_ + (src.begin.line > 0 ? ":" + std::to_string(src.begin.line) : std::string());
  }
  /// "file:line (section.key)"
  std::string from(const std::string& key) const { return where(key) + " (" + name_ + "." + key + ")"; }
  [[noreturn]] void fail(const std::string& key, const std::string& message) const {
    throw ConfigError(where(key) + ": " + name_ + "." + key + ": " + message);
  }
  std::int64_t get_int(const std::string& key, std::int64_t fallback) const {
    if (!has(key)) return fallback;
    if (const auto* i = node(key).as_integer()) return i->get();
    fail(key, "expected an integer, got " + describe(node(key)));
  }
  std::string get_string(const std::string& key, const std::string& fallback) const {
    if (!has(key)) return fallback;
    if (const auto* s = node(key).as_string()) return s->get();
    fail(key, "expected a string, got " + describe(node(key)));
  }
  bool get_bool(const std::string& key, bool fallback) const {
    if (!has(key)) return fallback;
    if (const auto* b = node(key).as_boolean()) return b->get();
    fail(key, "expected true or false, got " + describe(node(key)));
  }
  std::vector<std::string> keys() const {
    std::vector<std::string> out;
    if (t_ != nullptr) {
      for (auto&& [k, v] : *t_) out.emplace_back(k.str());
    }
    return out;
  }
  const std::string& name() const { return name_; }

 private:
  const toml::table* t_;
  std::string file_, name_;
};

/// torchtitan's model names and flavors that dtsim has built in.
std::optional<std::string> builtin_model(const std::string& name, const std::string& flavor) {
  struct Entry {
    const char* name;
    const char* flavor;
    const char* dtsim;
  };
  static const Entry kModels[] = {
      {"llama3", "8B", "llama-3-8b"},          {"llama3", "70B", "llama-3-70b"},
      {"llama3", "405B", "llama-3.1-405b"},    {"qwen3", "0.6B", "qwen3-0.6b"},
      {"qwen3", "1.7B", "qwen3-1.7b"},         {"qwen3", "4B", "qwen3-4b"},
      {"qwen3", "8B", "qwen3-8b"},             {"qwen3", "14B", "qwen3-14b"},
      {"qwen3", "32B", "qwen3-32b"},
      {"qwen3", "30B-A3B", "qwen3-30b-a3b"},   {"qwen3", "235B-A22B", "qwen3-235b-a22b"},
      {"deepseek_v3", "16B", "deepseek-v2-lite"}, {"deepseek_v3", "236B", "deepseek-v2"},
      {"deepseek_v3", "671B", "deepseek-v3"},   {"llama4", "17bx16e", "llama-4-scout"},
      {"llama4", "17bx128e", "llama-4-maverick"},
  };
  for (const auto& e : kModels) {
    if (name == e.name && flavor == e.flavor) return std::string(e.dtsim);
  }
  return std::nullopt;
}

/// The name/flavor pairs builtin_model knows, for a message.
std::string builtin_models() {
  return "llama3 8B, 70B, 405B; qwen3 0.6B, 1.7B, 4B, 8B, 14B, 32B, 30B-A3B, 235B-A22B; deepseek_v3 16B, 236B, 671B; llama4 17bx16e, 17bx128e";
}

bool contains(const std::vector<std::string>& v, const std::string& x) { return std::find(v.begin(), v.end(), x) != v.end(); }

// Note [Non-ASCII outside strings]
// toml++ 3.3 (Debian's) decides whether a character is whitespace with
// is_non_ascii_horizontal_whitespace, which reaches TOML_UNREACHABLE
// (undefined behaviour) for most code points from U+00A1 to U+0499: found
// by scripts/fuzz as "eps = \u039a-8" (a Greek capital kappa where a number
// was). It asks only where TOML allows no such character: outside strings
// and comments, and in a multi-line basic string right after a line-ending
// backslash (and the whitespace it skips) or as an escape. So those are
// refused first, in one line naming the line and column.
void check_non_ascii(const std::string& text, const std::string& file) {
  enum class In { kCode, kComment, kBasic, kLiteral, kMultiBasic, kMultiLiteral } in = In::kCode;
  std::size_t line = 1, col = 1;
  bool skipping = false;  // in a multi-line basic string, after a line-ending backslash
  const auto bad = [&](const char* where) {
    throw ConfigError(file + ":" + std::to_string(line) + ":" + std::to_string(col) + ": a non-ASCII character " + where +
                      "; TOML takes one only inside strings and comments");
  };
  for (std::size_t i = 0; i < text.size(); ++i) {
    const auto c = static_cast<unsigned char>(text[i]);
    const auto starts = [&](const char* three) { return text.compare(i, 3, three) == 0; };
    std::size_t skip = 0;  // bytes taken with this one
    switch (in) {
      case In::kCode:
        if (c == '#') {
          in = In::kComment;
        } else if (starts("\"\"\"")) {
          in = In::kMultiBasic;
          skip = 2;
        } else if (starts("'''")) {
          in = In::kMultiLiteral;
          skip = 2;
        } else if (c == '"') {
          in = In::kBasic;
        } else if (c == '\'') {
          in = In::kLiteral;
        } else if (c >= 0x80) {
          bad("outside a string or comment");
        }
        break;
      case In::kComment:
        if (c == '\n') in = In::kCode;
        break;
      case In::kBasic:
        if (c == '\\') {
          skip = 1;
        } else if (c == '"' || c == '\n') {
          in = In::kCode;
        }
        break;
      case In::kLiteral:
        if (c == '\'' || c == '\n') in = In::kCode;
        break;
      case In::kMultiBasic:
        if (c == '\\') {
          if (i + 1 < text.size() && static_cast<unsigned char>(text[i + 1]) >= 0x80) bad("escaped in a multi-line string");
          skipping = i + 1 < text.size() && std::isspace(static_cast<unsigned char>(text[i + 1])) != 0;
          if (!skipping) skip = 1;
        } else if (starts("\"\"\"")) {
          in = In::kCode;
          skipping = false;
          skip = 2;
        } else if (c >= 0x80 && skipping) {
          bad("after a line-ending backslash");
        } else if (std::isspace(c) == 0) {
          skipping = false;
        }
        break;
      case In::kMultiLiteral:
        if (starts("'''")) {
          in = In::kCode;
          skip = 2;
        }
        break;
    }
    for (std::size_t k = 0; k <= skip && i < text.size(); ++k) {
      if (k > 0) ++i;
      if (text[i] == '\n') {
        ++line;
        col = 1;
      } else {
        ++col;
      }
    }
  }
}

}  // namespace

FrameworkConfig parse_torchtitan_config(const std::string& toml_text_in, const std::string& file) {
  if (toml_text_in.size() > kMaxConfigBytes) throw ConfigError(file + ": larger than a config may be");
  check_non_ascii(toml_text_in, file);  // Note [Non-ASCII outside strings]
  toml::table root;
  try {
    root = toml::parse(toml_text_in, file);
  } catch (const toml::parse_error& e) {
    const auto& b = e.source().begin;
    throw ConfigError(file + ":" + std::to_string(b.line) + ":" + std::to_string(b.column) + ": malformed TOML: " +
                      std::string(e.description()));
  }
  FrameworkConfig fc;
  fc.framework = "torchtitan";
  fc.file = file;
  detail::OverrideList out(fc);
  auto section = [&](const std::string& name) {
    const toml::node* n = root.get(name);
    if (n != nullptr && !n->is_table()) {
      throw ConfigError(file + ":" + std::to_string(n->source().begin.line) + ": " + name + ": expected a [" + name + "] table");
    }
    return Section(n != nullptr ? n->as_table() : nullptr, file, name);
  };
  auto unmodelled = [&](const Section& s, const std::string& key, const std::string& why = "") {
    fc.unmodelled.push_back(s.name() + "." + key + "=" + toml_text(s.node(key)) + (why.empty() ? "" : " (" + why + ")"));
  };
  /// Keys of `s` neither read nor skipped go to the unmodelled list.
  auto rest = [&](const Section& s, const std::vector<std::string>& read) {
    for (const auto& k : s.keys()) {
      if (!contains(read, k)) unmodelled(s, k);
    }
  };

  // [parallelism] (job_config.py, Parallelism).
  const Section par = section("parallelism");
  const std::int64_t replicate = par.get_int("data_parallel_replicate_degree", 1);
  const std::int64_t shard = par.get_int("data_parallel_shard_degree", -1);
  const std::int64_t tp = par.get_int("tensor_parallel_degree", 1);
  const std::int64_t pp = par.get_int("pipeline_parallel_degree", 1);
  const std::int64_t cp = par.get_int("context_parallel_degree", 1);
  const std::int64_t ep = par.get_int("expert_parallel_degree", 1);
  for (const char* k : {"data_parallel_replicate_degree", "tensor_parallel_degree", "pipeline_parallel_degree",
                        "context_parallel_degree", "expert_parallel_degree", "expert_tensor_parallel_degree",
                        "pipeline_parallel_microbatch_size"}) {
    if (par.has(k) && par.get_int(k, 1) < 1) par.fail(k, std::to_string(par.get_int(k, 1)) + " is not a degree; valid: 1 or more");
  }
  // -1: the ranks the other degrees leave (only the shard degree may be -1).
  if (shard == 0 || shard < -1) par.fail("data_parallel_shard_degree", std::to_string(shard) + "; valid: -1 (the rest) or 1 or more");
  if (par.has("data_parallel_replicate_degree") || par.has("data_parallel_shard_degree")) {
    const std::string dp_from = par.from(par.has("data_parallel_shard_degree") ? "data_parallel_shard_degree" : "data_parallel_replicate_degree");
    out.plan("dp", shard > 0 ? std::to_string(replicate * shard) : "null", dp_from);
  }
  if (par.has("tensor_parallel_degree")) out.plan("tp", std::to_string(tp), par.from("tensor_parallel_degree"));
  if (par.has("pipeline_parallel_degree")) out.plan("pp", std::to_string(pp), par.from("pipeline_parallel_degree"));
  if (par.has("context_parallel_degree")) out.plan("cp", std::to_string(cp), par.from("context_parallel_degree"));
  if (par.has("expert_parallel_degree")) out.plan("ep", std::to_string(ep), par.from("expert_parallel_degree"));
  if (par.has("expert_tensor_parallel_degree")) {
    out.plan("etp", std::to_string(par.get_int("expert_tensor_parallel_degree", 1)), par.from("expert_tensor_parallel_degree"));
  }
  // torchtitan's tensor parallelism always shards the norms' activations
  // along the sequence (SequenceParallel in parallelize.py); async TP
  // overlaps those collectives with the matmuls.
  if (tp > 1) out.plan("sequence_parallel", "true", par.from("tensor_parallel_degree"));
  if (par.get_bool("enable_async_tensor_parallel", false) && tp > 1) {
    out.plan("tp_comm_overlap", "true", par.from("enable_async_tensor_parallel"));
    out.plan("tp_comm_overlap_cfg", "async_tp", par.from("enable_async_tensor_parallel"));  // Note [Userbuffers' chunks]
  }
  if (cp > 1) {
    // context_parallel_rotate_method: "allgather" (the default) or "alltoall".
    const std::string rotate = par.get_string("context_parallel_rotate_method", "allgather");
    if (rotate == "allgather") {
      out.plan("cp_comm", "all_gather", par.has("context_parallel_rotate_method") ? par.from("context_parallel_rotate_method") : par.from("context_parallel_degree"));
    } else if (rotate == "alltoall") {
      unmodelled(par, "context_parallel_rotate_method", "priced as p2p");
      out.plan("cp_comm", "p2p", par.from("context_parallel_rotate_method"));
    } else {
      par.fail("context_parallel_rotate_method", "'" + rotate + "' is not one of allgather, alltoall");
    }
  }
  // Pipeline schedules (torch.distributed.pipelining's names).
  std::int64_t pp_micro = 0;
  if (pp > 1) {
    const std::string schedule = par.get_string("pipeline_parallel_schedule", "1F1B");
    const std::string sfrom = par.has("pipeline_parallel_schedule") ? par.from("pipeline_parallel_schedule") : par.from("pipeline_parallel_degree");
    if (schedule == "1F1B") {
      out.plan("schedule", "1f1b", sfrom);
    } else if (schedule == "GPipe") {
      out.plan("schedule", "gpipe", sfrom);
    } else if (schedule == "Interleaved1F1B") {
      // Multi-stage schedules run 2 stages a rank unless layers per stage say otherwise.
      out.plan("schedule", "interleaved", sfrom);
      out.plan("virtual_stages", "2", sfrom);
    } else {
      unmodelled(par, "pipeline_parallel_schedule", "priced as 1F1B");
      out.plan("schedule", "1f1b", sfrom);
    }
    pp_micro = par.get_int("pipeline_parallel_microbatch_size", 1);
  }
  // FSDP: sharded when the shard degree is not 1; with replication too, HSDP.
  const std::string reshard = par.get_string("fsdp_reshard_after_forward", "default");
  if (reshard != "default" && reshard != "always" && reshard != "never") {
    par.fail("fsdp_reshard_after_forward", "'" + reshard + "' is not one of default, always, never");
  }
  const std::string fsdp_from = par.from(par.has("data_parallel_shard_degree") ? "data_parallel_shard_degree" : "data_parallel_replicate_degree");
  std::string plan = "fsdp";
  bool fsdp_units = false;  // lowered as FSDP per unit (full_shard or hybrid_shard)
  if (shard == 1) {
    out.plan("zero_stage", "0", fsdp_from);
    plan = "ddp";
  } else if (pp > 1) {
    // fully_shard under a pipeline (Note [FSDP under a pipeline] in
    // sim/src/lowering/passes/fsdp_pipeline.cpp): "default" keeps a stage's
    // parameters gathered from its first forward to its last backward.
    out.plan("fsdp", "full_shard", fsdp_from);
    fsdp_units = true;  // its reduce-scatters move the reduce dtype
    if (replicate > 1) {
      fc.unmodelled.push_back("parallelism.data_parallel_replicate_degree=" + std::to_string(replicate) +
                              " with pipeline_parallel_degree=" + std::to_string(pp) + " (HSDP under a pipeline priced as FSDP over both)");
    }
    if (reshard == "always") unmodelled(par, "fsdp_reshard_after_forward", "'always' under a pipeline priced as 'default' (gathered once a step)");
    plan = "1f1b";
  } else if (replicate > 1) {
    out.plan("fsdp", "hybrid_shard", fsdp_from);
    fsdp_units = true;
    // Note [FSDP's root unit]: apply_fsdp (torchtitan/models/llama3/infra/
    // parallelize.py) wraps tok_embeddings, each block and [norm, output],
    // the last kept whole from its forward to its backward.
    out.plan("fsdp_wrap", reshard == "always" ? "layers" : "torchtitan", fsdp_from);
    if (shard > 1) fc.unmodelled.push_back("parallelism.data_parallel_shard_degree=" + std::to_string(shard) + " (dtsim's hybrid_shard shards within a node)");
  } else {
    // reshard_after_forward=False keeps the parameters gathered from forward to backward: SHARD_GRAD_OP.
    out.plan("fsdp", reshard == "never" ? "shard_grad_op" : "full_shard", par.has("fsdp_reshard_after_forward") ? par.from("fsdp_reshard_after_forward") : fsdp_from);
    fsdp_units = reshard != "never";
    if (reshard == "default") out.plan("fsdp_wrap", "torchtitan", fsdp_from);  // as above
    if (reshard == "always") out.plan("fsdp_wrap", "layers", fsdp_from);      // the last unit resharded too
  }
  // torchtitan shards with fully_shard: FSDP2 (Note [FSDP2's reduce-scatter
  // wait] in sim/src/lowering/passes/data_parallel.cpp). Under a pipeline
  // the stage's pass is FSDP2's already (fsdp_pipeline.cpp).
  if (shard != 1 && pp == 1) out.plan("fsdp_version", "2", fsdp_from);
  if (par.get_bool("enable_compiled_autograd", false)) unmodelled(par, "enable_compiled_autograd");
  // With TP the output projection's logits stay sharded and the loss is
  // DTensor's loss_parallel unless disable_loss_parallel (train.py); a
  // replicated loss over gathered logits is not modelled.
  if (tp > 1) {
    out.plan("loss_parallel", "dtensor", par.from("tensor_parallel_degree"));
    if (par.get_bool("disable_loss_parallel", false)) unmodelled(par, "disable_loss_parallel", "priced as loss_parallel");
  }
  rest(par, {"data_parallel_replicate_degree", "data_parallel_shard_degree", "tensor_parallel_degree",
             "pipeline_parallel_degree", "context_parallel_degree", "expert_parallel_degree",
             "expert_tensor_parallel_degree", "enable_async_tensor_parallel", "context_parallel_rotate_method",
             "pipeline_parallel_schedule", "pipeline_parallel_microbatch_size", "fsdp_reshard_after_forward",
             "enable_compiled_autograd", "disable_loss_parallel"});

  // [training] (job_config.py, Training): local_batch_size (batch_size before
  // it) sequences per data-parallel rank; global_batch_size -1 = local x dp,
  // more means gradient accumulation; under a pipeline local_batch_size is
  // cut into micro-batches of pipeline_parallel_microbatch_size.
  const Section tr = section("training");
  const std::string local_key = tr.has("local_batch_size") ? "local_batch_size" : "batch_size";
  const std::int64_t local = tr.get_int(local_key, 8);
  if (local < 1) tr.fail(local_key, std::to_string(local) + "; valid: 1 or more");
  const std::string local_from = tr.has(local_key) ? tr.from(local_key) : file + " (torchtitan's local_batch_size default 8)";
  if (pp > 1 && local % pp_micro != 0) {
    tr.fail(local_key, std::to_string(local) + " is not a multiple of parallelism.pipeline_parallel_microbatch_size " +
                           std::to_string(pp_micro) + " (torchtitan asserts it)");
  }
  const std::int64_t micro = pp > 1 ? pp_micro : local;
  out.plan("micro_batch", std::to_string(micro), pp > 1 && par.has("pipeline_parallel_microbatch_size") ? par.from("pipeline_parallel_microbatch_size") : local_from);
  const std::int64_t global = tr.get_int("global_batch_size", -1);
  if (global > 0) {
    if (global % local != 0) {
      tr.fail("global_batch_size", std::to_string(global) + " is not a multiple of " + local_key + " " + std::to_string(local) +
                                       " x the data-parallel degree (torchtitan asserts it)");
    }
    out.plan("global_batch", std::to_string(global), tr.from("global_batch_size"));
    fc.global_batch = global;
  } else {
    out.plan("grad_accum", std::to_string(local / micro), local_from);
  }
  if (tr.has("seq_len")) out.plan("seq_len", std::to_string(tr.get_int("seq_len", 2048)), tr.from("seq_len"));
  else out.plan("seq_len", "2048", file + " (torchtitan's seq_len default)");
  // mixed_precision_param defaults to bfloat16; fp32 master weights stay.
  const std::string param = tr.get_string("mixed_precision_param", "bfloat16");
  std::string precision = param == "bfloat16" ? "bf16" : param == "float16" ? "fp16" : param == "float32" ? "fp32" : "";
  if (precision.empty()) tr.fail("mixed_precision_param", "'" + param + "' is not one of bfloat16, float32");
  std::string precision_from = tr.has("mixed_precision_param") ? tr.from("mixed_precision_param") : file + " (torchtitan's bfloat16 default)";
  // Note [FSDP's reduce dtype]: FSDP reduce-scatters in mixed_precision_reduce
  // (float32 by default); modelled where dtsim lowers FSDP per unit.
  const std::string reduce = tr.get_string("mixed_precision_reduce", "float32");
  if (reduce != "float32" && reduce != "bfloat16") tr.fail("mixed_precision_reduce", "'" + reduce + "' is not one of float32, bfloat16");
  if (reduce == "float32" && precision != "fp32") {
    if (fsdp_units) {
      out.plan("reduce_dtype", "fp32", tr.has("mixed_precision_reduce") ? tr.from("mixed_precision_reduce") : file + " (torchtitan's float32 default)");
    } else if (shard > 1) {
      unmodelled(tr, "mixed_precision_reduce", "fp32 reduce priced in the working precision where FSDP is not lowered per unit");
    }
  }
  // Note [No master weights] (sim/src/parallel/plan.cpp): training.dtype
  // bfloat16 keeps "all parameters, gradients, and optimizer states in
  // bfloat16, without an extra copy of fp32 weights" (torchtitan's
  // JobConfig Training.dtype).
  if (const std::string dtype = tr.get_string("dtype", "float32"); dtype == "bfloat16") {
    precision = "bf16";
    precision_from = tr.from("dtype");
    out.plan("master_weights", "false", tr.from("dtype"));
  } else if (dtype != "float32") {
    tr.fail("dtype", "'" + dtype + "' is not one of float32, bfloat16");
  }
  if (tr.get_bool("enable_cpu_offload", false)) {
    // FSDP's CPUOffload: parameters, gradients and optimizer states on the host.
    out.plan("offload_optimizer", "cpu", tr.from("enable_cpu_offload"));
    out.plan("offload_params", "cpu", tr.from("enable_cpu_offload"));
  }
  if (tr.get_bool("compile", false)) unmodelled(tr, "compile");
  // Round-robin routing (TokenChoiceTopKRouter._debug_force_load_balance):
  // [training] debug_moe_force_load_balance in older torchtitan, [debug]
  // moe_force_load_balance in newer.
  const Section dbg = section("debug");
  if (tr.get_bool("debug_moe_force_load_balance", false)) {
    out.plan("moe_force_load_balance", "true", tr.from("debug_moe_force_load_balance"));
  } else if (dbg.get_bool("moe_force_load_balance", false)) {
    out.plan("moe_force_load_balance", "true", dbg.from("moe_force_load_balance"));
  }
  rest(tr, {"debug_moe_force_load_balance", "local_batch_size", "batch_size", "global_batch_size", "seq_len", "mixed_precision_param",
            "mixed_precision_reduce", "dtype", "enable_cpu_offload", "compile", "dataset", "dataset_path", "steps",
            "max_norm", "gc_freq", "seed", "deterministic", "warmup_steps", "gradient_accumulation_steps"});

  // [model]: a built-in where dtsim has it; converters = ["float8"] trains in
  // FP8, ["mx"] in MXFP8 (torchao's MXLinear, torchtitan's [mx] section).
  const Section mo = section("model");
  if (mo.has("name")) {
    const std::string name = mo.get_string("name", ""), flavor = mo.get_string("flavor", "");
    fc.model = builtin_model(name, flavor);
    if (!fc.model) {
      fc.unmodelled.push_back("model.name=" + name + " flavor=" + flavor + " (no built-in; built in: " + builtin_models() +
                              "; or pass --model)");
    }
    if (fc.model && name == "llama4") {
      // torchtitan's Llama 4 (torchtitan/models/llama4/model.py) has no q/k
      // norms and no attention temperature (Note [Llama 4] in
      // models/src/llama.cpp); its NoPE layers are 0, 4, 8, ... where HF's
      // are 3, 7, 11, ...: as many, not placed apart.
      out.model("l2_qk_norm", "false", mo.from("name"));
      out.model("attn_temperature", "false", mo.from("name"));
    }
  }
  bool float8 = false, mx = false;
  if (mo.has("converters")) {
    const toml::node& conv = mo.node("converters");
    const toml::array* list = conv.as_array();
    if (list == nullptr && !conv.is_string()) mo.fail("converters", "expected a list of names like [\"float8\"]");
    auto check = [&](const std::string& c) {
      if (c == "float8") float8 = true;
      else if (c == "mx") mx = true;
      else fc.unmodelled.push_back("model.converters=" + c);
    };
    if (list != nullptr) {
      for (const auto& c : *list) check(toml_text(c));
    } else {
      check(conv.as_string()->get());
    }
  }
  rest(mo, {"name", "flavor", "converters", "tokenizer_path", "hf_assets_path", "print_after_conversion"});
  // [float8] (Float8): FP8 all-gathers of FSDP's weights.
  const Section f8 = section("float8");
  if (float8) {
    precision = "fp8";
    precision_from = mo.from("converters");
    if (f8.get_bool("enable_fsdp_float8_all_gather", false)) out.plan("fp8_param_gather", "true", f8.from("enable_fsdp_float8_all_gather"));
    // torchao's Float8Linear scales each tensor by its own amax (dynamic
    // scaling, Float8LinearConfig's default and, since torchao dropped
    // delayed scaling, its only per-tensor recipe): fp8_recipe tensorwise
    // (Note [FP8 training]). Its "rowwise" recipes scale each row: priced so.
    out.plan("fp8_recipe", "tensorwise", mo.from("converters"));
    const std::string recipe = f8.get_string("recipe_name", "tensorwise");
    if (recipe != "tensorwise") fc.unmodelled.push_back("float8.recipe_name=" + recipe + " (priced as tensorwise)");
  }
  // [mx] (MX): torchao's MXFP8 Linear, a scale for each 32 elements; its
  // casts priced as Transformer Engine's (Note [FP8 training]: torchao casts
  // dim0 and dim1 in two kernels, which torch.compile may fuse), its
  // communication in bf16 ("All distributed communication for MXFP8
  // training is currently done in high precision", torchtitan docs/mxfp8.md).
  const Section mxs = section("mx");
  if (mx) {
    if (float8) mo.fail("converters", "float8 and mx both convert the Linear layers; torchtitan takes one");
    precision = "fp8";
    precision_from = mo.from("converters");
    out.plan("fp8_recipe", "mxfp8", mo.from("converters"));
    const std::string recipe = mxs.get_string("recipe_name", "mxfp8_cublas");
    if (recipe.rfind("mxfp8", 0) != 0) fc.unmodelled.push_back("mx.recipe_name=" + recipe + " (priced as mxfp8)");
  }
  out.plan("precision", precision, precision_from);

  // [activation_checkpoint] (ActivationCheckpoint): mode none, selective or full;
  // selective_ac_option "op" (the op-level policy) or N (every N-th layer in full).
  const Section ac = section("activation_checkpoint");
  const std::string mode = ac.get_string("mode", "selective");
  const std::string ac_from = ac.has("mode") ? ac.from("mode") : file + " (torchtitan's selective default)";
  if (mode == "none" || mode == "full") {
    out.plan("recompute", mode, ac_from);
  } else if (mode == "selective") {
    const std::string option = ac.get_string("selective_ac_option", "2");
    if (option == "op" && tp == 1 && cp == 1) {
      // Note [Op-level recompute] (models/src/llama.cpp).
      out.plan("recompute", "op", ac_from);
    } else if (option == "op") {
      out.plan("recompute", "selective", ac_from);
      unmodelled(ac, "selective_ac_option", "the op-level policy with tensor or context parallelism (its recomputed collectives); "
                                            "priced as Megatron's selective");
    } else if (option == "1") {
      out.plan("recompute", "full", ac.from("selective_ac_option"));
    } else {
      if (ac.has("selective_ac_option")) unmodelled(ac, "selective_ac_option", "every N-th layer recomputed; priced as every layer");
      else fc.unmodelled.push_back("activation_checkpoint.selective_ac_option=2 (torchtitan's default: every 2nd layer recomputed; priced as every layer)");
      out.plan("recompute", "full", ac_from);
    }
  } else {
    ac.fail("mode", "'" + mode + "' is not one of none, selective, full");
  }
  rest(ac, {"mode", "selective_ac_option", "per_op_sac_force_recompute_mm_shapes_by_fqns", "early_stop", "preserve_rng_state", "debug"});

  // [optimizer]: its name; rates and betas change neither time nor memory.
  const Section op = section("optimizer");
  const std::string opt = op.get_string("name", "AdamW");
  if (opt == "AdamW" || opt == "Adam") {
    std::string lower = opt == "AdamW" ? "adamw" : "adam";
    out.plan("optimizer", lower, op.has("name") ? op.from("name") : file + " (torchtitan's AdamW default)");
  } else {
    unmodelled(op, "name", "priced as adamw");
    out.plan("optimizer", "adamw", op.from("name"));
  }
  if (op.get_bool("early_step_in_backward", false)) unmodelled(op, "early_step_in_backward");
  rest(op, {"name", "lr", "eps", "beta1", "beta2", "weight_decay", "implementation", "early_step_in_backward"});

  // [compile] (newer torchtitan) and sections dtsim does not model at all.
  const Section co = section("compile");
  if (co.get_bool("enable", false)) unmodelled(co, "enable");
  for (const char* other : {"memory_estimation", "fault_tolerance", "experimental"}) {
    if (root.contains(other)) fc.unmodelled.push_back(std::string(other) + " (section)");
  }
  // [mx] without the mx converter converts nothing.
  if (root.contains("mx") && !mx) fc.unmodelled.push_back("mx (section; model.converters has no \"mx\")");
  // job, profiling, metrics, checkpoint, lr_scheduler, validation, comm: no effect on time or memory.
  // A section torchtitan's JobConfig (torchtitan/config/job_config.py) has
  // no field for is listed, not dropped: a misspelt [paralellism] would
  // otherwise train on dtsim's defaults without a word.
  static const char* const kSections[] = {"job", "profiling", "metrics", "model", "optimizer", "lr_scheduler", "training",
                                          "dataloader", "parallelism", "checkpoint", "activation_checkpoint", "compile",
                                          "float8", "mx", "quantize", "comm", "memory_estimation", "fault_tolerance",
                                          "experimental", "validation", "debug"};
  for (const auto& [key, node] : root) {
    const std::string name(key.str());
    if (std::find_if(std::begin(kSections), std::end(kSections), [&](const char* k) { return name == k; }) == std::end(kSections)) {
      fc.unmodelled.push_back(name + " (" + std::string(node.is_table() ? "section" : "key") + " torchtitan does not have)");
    }
  }
  fc.plan = plan;
  out.finish();
  return fc;
}

FrameworkConfig read_torchtitan_config(const std::string& path) {
  return parse_torchtitan_config(detail::read_config_text(path), path);
}

}  // namespace dtsim::sim
