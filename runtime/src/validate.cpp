// `dtsim validate`: options, run set-up, rank measurements and the report.
#include "dtsim/runtime/validate.hpp"

#include <CLI/CLI.hpp>
#include <nlohmann/json.hpp>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <map>
#include <memory>
#include <optional>
#include <set>
#include <sstream>

#include "dtsim/cli/parse.hpp"
#include "dtsim/cli/scenario_options.hpp"
#include "dtsim/models/models.hpp"
#include "dtsim/runtime/data.hpp"
#include "dtsim/sim/config_io.hpp"
#include "dtsim/sim/config_node.hpp"
#include "dtsim/sim/error.hpp"
#include "dtsim/sim/json_writer.hpp"
#include "dtsim/sim/profile.hpp"
#include "dtsim/sim/rules.hpp"

namespace dtsim::runtime {
namespace {

std::int64_t parse_int(const std::string& key, const std::string& v, std::int64_t lo, std::int64_t hi) {
  try {
    std::size_t used = 0;
    const long long x = std::stoll(v, &used);
    if (used == v.size() && x >= lo && x <= hi) return x;
  } catch (const std::exception&) {
  }
  throw ConfigError("dtsim validate: --" + key + " " + v + ": expected an integer from " + std::to_string(lo) + " to " +
                    std::to_string(hi));
}

double parse_positive(const std::string& key, const std::string& v) {
  try {
    std::size_t used = 0;
    const double x = std::stod(v, &used);
    if (used == v.size() && x > 0 && std::isfinite(x)) return x;
  } catch (const std::exception&) {
  }
  throw ConfigError("dtsim validate: --" + key + " " + v + ": expected a positive number");
}

std::string fmt(const char* f, double x) {
  char buf[64];
  std::snprintf(buf, sizeof buf, f, x);
  return buf;
}

std::string human_seconds(double s) {
  if (s >= 1) return fmt("%.3f s", s);
  if (s >= 1e-3) return fmt("%.2f ms", s * 1e3);
  return fmt("%.1f us", s * 1e6);
}

std::string human_bytes(double b) {
  if (b >= 1024.0 * 1024 * 1024) return fmt("%.2f GiB", b / (1024.0 * 1024 * 1024));
  if (b >= 1024.0 * 1024) return fmt("%.1f MiB", b / (1024.0 * 1024));
  return fmt("%.1f KiB", b / 1024.0);
}

/// Predicted compute per phase of the simulated rank standing for `stage`
/// (forward, backward with recompute, optimizer), in seconds.
struct StagePhases {
  double forward = 0, backward = 0, optimizer = 0;
};

StagePhases predicted_phases(const sim::Prediction& p, int stage) {
  StagePhases out;
  int sim_rank = -1;
  for (std::size_t r = 0; r < p.graph.ranks.size(); ++r) {
    if (p.graph.ranks[r].stage == stage) {
      sim_rank = static_cast<int>(r);
      break;
    }
  }
  if (sim_rank < 0 || p.exec.spans.size() != p.graph.tasks.size()) return out;
  for (std::size_t t = 0; t < p.graph.tasks.size(); ++t) {
    const sim::Task& task = p.graph.tasks[t];
    if (task.rank != sim_rank || task.kind == sim::TaskKind::kCollective) continue;
    const double s = static_cast<double>(p.exec.spans[t].end - p.exec.spans[t].start) * 1e-9;
    switch (task.phase) {
      case sim::Phase::kForward: out.forward += s; break;
      case sim::Phase::kBackward:
      case sim::Phase::kRecompute: out.backward += s; break;
      case sim::Phase::kOptimizer: out.optimizer += s; break;
      default: break;
    }
  }
  return out;
}

Bytes predicted_peak(const sim::Prediction& p, int stage) {
  for (const auto& r : p.ranks) {
    if (r.stage == stage) return r.peak;
  }
  return p.ranks.empty() ? 0 : p.ranks.front().peak;
}

}  // namespace

std::function<ValidateOptions()> add_validate_options(CLI::App& app) {
  // The values as given; checked and converted by the returned function.
  struct Given {
    cli::ScenarioOptions scenario;
    std::map<std::string, std::string> values;
    bool json = false, quiet = false;
  };
  auto g = std::make_shared<Given>();
  cli::add_scenario_options(app, g->scenario, cli::kScenario);
  auto value = [&](const std::string& name, const std::string& type, const std::string& help) {
    app.add_option("--" + name, g->values[name], help)->type_name(type);
  };
  value("device", "cpu|cuda", "Train on the CPU (Gloo, default) or GPUs (NCCL; --cluster then required)");
  value("procs", "N", "Local ranks to start (default: the plan's rank count)");
  value("steps", "K", "Steps measured (default 10)");
  value("warmup", "W", "Steps run first and not measured (default 8)");
  value("data", "FILE.h5", "Train on this dataset (scripts/make-sample-data; default: synthetic)");
  value("trace", "FILE", "Write the measured timeline as Chrome Trace Event JSON");
  value("timeout", "S", "A rank silent this many seconds is hung (default 300)");
  value("run-dir", "DIR", "Keep each rank's measurements and logs here");
  value("measured", "DIR", "Report a kept --run-dir against this build's prediction, running nothing");
  value("seed", "N", "Seed of the weights and synthetic data (default 1234)");
  value("lr", "X", "Learning rate (default 1e-3)");
  value("mem-limit", "BYTES", "Memory per rank (default: the device's on cuda; on cpu 3/4 of the host's available memory over its local ranks)");
  value("fault", "KIND@RANK[:STEP]", "Inject crash|hang|stop|oom|error at a rank (testing)");
  app.add_flag("--json", g->json, "Print the report as JSON (the explorer overlays it)");
  app.add_flag("--quiet", g->quiet, "No progress line");
  const CLI::App* parsed = &app;
  return [g, parsed] {
    ValidateOptions o;
    auto get = [&](const std::string& k) -> std::optional<std::string> {
      if (parsed->count("--" + k) == 0) return std::nullopt;
      const auto it = g->values.find(k);
      const std::string v = it != g->values.end()                ? it->second
                            : k == "model"                         ? g->scenario.model
                            : k == "plan"                          ? g->scenario.plan
                            : k == "cluster"                       ? g->scenario.cluster
                                                                   : g->scenario.profile;
      if (v.empty()) throw ConfigError("dtsim validate: --" + k + ": missing value");
      return v;
    };
    if (!get("model")) throw ConfigError("dtsim validate: --model is required; e.g. --model gpt2-tiny (see dtsim list models)");
    o.model = *get("model");
    o.sets = g->scenario.overrides();
    o.json = g->json;
    o.quiet = g->quiet;
    if (auto x = get("plan")) o.plan = *x;
    if (auto x = get("cluster")) o.cluster = *x;
    if (auto x = get("profile")) o.profile = *x;
    if (auto x = get("device")) {
      if (*x != "cpu" && *x != "cuda") throw ConfigError("dtsim validate: --device " + *x + ": expected cpu or cuda");
      o.device = *x;
    }
    if (auto x = get("data")) o.data = *x;
    if (auto x = get("trace")) o.trace = *x;
    if (auto x = get("run-dir")) o.run_dir = *x;
    if (auto x = get("measured")) o.measured = *x;
    if (auto x = get("procs")) o.procs = static_cast<int>(parse_int("procs", *x, 1, 4096));
    if (auto x = get("steps")) o.steps = static_cast<int>(parse_int("steps", *x, 1, 1000000));
    if (auto x = get("warmup")) o.warmup = static_cast<int>(parse_int("warmup", *x, 0, 1000000));
    if (auto x = get("seed")) o.seed = static_cast<std::uint64_t>(parse_int("seed", *x, 0, std::int64_t{1} << 62));
    if (auto x = get("timeout")) {
      o.timeout_s = parse_positive("timeout", *x);
      // A week: beyond it Gloo's store timeout (milliseconds in 64 bits) and
      // the watchdog's clock overflow; no rank is silent that long and well.
      if (o.timeout_s > 604800) throw ConfigError("dtsim validate: --timeout " + *x + ": expected at most 604800 seconds (a week)");
    }
    if (auto x = get("lr")) o.lr = parse_positive("lr", *x);
    if (auto x = get("mem-limit")) o.mem_limit = parse_int("mem-limit", *x, 1, std::int64_t{1} << 60);
    if (auto x = get("fault")) {
      const auto at = x->find('@');
      const std::string kind = x->substr(0, at);
      if (at == std::string::npos || (kind != "crash" && kind != "hang" && kind != "stop" && kind != "oom" && kind != "error")) {
        throw ConfigError("dtsim validate: --fault " + *x + ": expected crash|hang|stop|oom|error@RANK[:STEP]");
      }
      // RANK and STEP as the worker reads them (std::stoi): whole numbers, the
      // rank one of the ranks started where --procs says how many.
      const auto colon = x->find(':', at);
      const std::string rank_text = x->substr(at + 1, colon == std::string::npos ? std::string::npos : colon - at - 1);
      const std::string step_text = colon == std::string::npos ? "0" : x->substr(colon + 1);
      const auto whole = [](const std::string& t) {
        return !t.empty() && t.size() <= 6 && std::all_of(t.begin(), t.end(), [](char c) { return c >= '0' && c <= '9'; });
      };
      if (!whole(rank_text) || !whole(step_text)) {
        throw ConfigError("dtsim validate: --fault " + *x + ": RANK and STEP are whole numbers from 0 (crash|hang|stop|oom|error@RANK[:STEP])");
      }
      if (o.procs > 0 && std::stoi(rank_text) >= o.procs) {
        throw ConfigError("dtsim validate: --fault " + *x + ": rank " + rank_text + " of --procs " + std::to_string(o.procs) +
                          "; valid: 0 to " + std::to_string(o.procs - 1));
      }
      o.fault = *x;
    }
    return o;
  };
}

ValidateOptions parse_validate_args(const std::vector<std::string>& args) {
  CLI::App app{"dtsim validate", "dtsim validate"};
  cli::house_style(app);
  const auto finish = add_validate_options(app);
  try {
    cli::parse_or_throw(app, args);
  } catch (const CLI::Success&) {
    throw ConfigError("dtsim validate: --help and --version are the command line's, not options of a run");
  }
  return finish();
}

RunSetup setup_run(const ValidateOptions& o, int world) {
  RunSetup s;
  s.model = models::load_model(o.model, o.sets);
  std::string cluster = o.cluster;
  if (cluster.empty()) {
    if (o.device != "cpu") {
      throw ConfigError("dtsim validate: --cluster is required with --device cuda (e.g. --cluster 2xa100-80g)");
    }
    cluster = "local-cpu";
  }
  s.cluster = sim::load_cluster(cluster, o.sets);
  if (o.device == "cpu") {
    // Local CPU ranks: one node of `world` processes.
    s.cluster.nodes = 1;
    s.cluster.gpus_per_node = world;
  }
  s.spec = sim::load_plan(o.plan, o.sets);
  if (sim::quantized_gemms(s.spec.precision)) {
    // Note [FP8 training] (sim/src/cost/cost_compute.cpp): the runtime's
    // LibTorch 1.13 has no FP8 or FP4 dtype or scaled GEMM, on a CPU or a GPU.
    const std::string p = sim::to_string(s.spec.precision);
    throw UnsupportedError("dtsim validate: " + s.spec.origins.of("plan.precision") + ": precision " + p + " is not run: LibTorch 1.13 has no " +
                           (p == "fp8" ? "FP8" : "FP4") + " GEMMs (the simulator predicts it); use bf16");
  }
  if (!s.spec.master_weights) {
    // Note [No master weights] (sim/src/parallel/plan.cpp): the runtime's
    // mixed-precision step keeps fp32 masters; the simulator predicts the
    // step without them, which validate would not be comparing.
    throw UnsupportedError("dtsim validate: " + s.spec.origins.of("plan.master_weights") +
                           ": master_weights false is not run: the runtime's optimizer keeps fp32 masters (the simulator "
                           "predicts the step without); use true");
  }
  if (s.spec.fsdp == sim::FsdpMode::kFullShard && s.spec.pp > 1) {
    // Note [FSDP under a pipeline] (sim/src/lowering/passes/fsdp_pipeline.cpp):
    // the runtime's pipeline reduces DDP's way or ZeRO-1's.
    throw UnsupportedError("dtsim validate: " + s.spec.origins.of("plan.fsdp") +
                           ": fsdp full_shard with pp > 1 is not run: the runtime's pipeline stages reduce as DDP or ZeRO-1 "
                           "(the simulator predicts torch.distributed.pipelining's FSDP2); use zero_stage 0 or 1");
  }
  if (s.spec.runtime == sim::Runtime::kPython) {
    // Note [Python host cost] (sim/src/cost/cost_python.cpp): validate runs
    // dtsim's own C++ loop, and a prediction of a Python loop set beside
    // it would compare two programs.
    throw UnsupportedError("dtsim validate: " + s.spec.origins.of("plan.runtime") +
                           ": runtime python is not run: validate trains dtsim's C++ loop (dtsim_worker); use libtorch "
                           "(bench/python-reference.py trains the Python loop beside it: docs/validation-cpu.md)");
  }
  {
    // Note [Attention dropout] (models/src/llama.cpp): priced, not run.
    const auto layers = s.model->layers(sim::WorkloadShape{});
    if (std::any_of(layers.begin(), layers.end(),
                    [](const sim::Layer& l) { return l.signature.find(",adrop=") != std::string::npos; })) {
      throw UnsupportedError("dtsim validate: " + o.model +
                             ": attention dropout is not run: the LibTorch twins have none (the simulator prices it); "
                             "use model.attention_dropout=0");
    }
    // Note [LoRA] (models/src/peft.cpp): priced, not run.
    if (s.model->trainable_parameters() < s.model->parameters()) {
      throw UnsupportedError("dtsim validate: " + o.model +
                             ": a LoRA fine-tune is not run: the runtime trains every parameter (the simulator prices "
                             "the frozen base and its adapters); use model.peft=none");
    }
    // Note [Multi-token prediction] (models/src/llama.cpp): priced, not run.
    if (std::any_of(layers.begin(), layers.end(), [](const sim::Layer& l) { return l.signature.rfind("llama.mtp:", 0) == 0; })) {
      throw UnsupportedError("dtsim validate: " + o.model +
                             ": multi-token prediction is not run: the LibTorch twins have no MTP depth (the simulator prices "
                             "it); use model.mtp_layers=0");
    }
  }
  if (s.spec.document_len > 0) {
    // Note [Packed sequences] (models/src/layers.cpp): priced, not run.
    throw UnsupportedError("dtsim validate: " + s.spec.origins.of("plan.document_len") +
                           ": packed documents are not run: the runtime attends over each whole sequence (the simulator "
                           "prices varlen attention); use document_len: 0");
  }
  if (s.spec.loss_chunks > 1) {
    // Note [Chunked loss] (models/src/layers.cpp): priced, not run.
    throw UnsupportedError("dtsim validate: " + s.spec.origins.of("plan.loss_chunks") +
                           ": a chunked cross-entropy is not run: the runtime takes the loss over the whole logits (the "
                           "simulator prices the chunks); use loss_chunks: 1");
  }
  if (s.spec.enable_activation_offloading) {
    // Note [Saved-tensor offload] (lowering/passes/saved_tensor_offload.cpp): priced, not run.
    throw UnsupportedError("dtsim validate: " + s.spec.origins.of("plan.enable_activation_offloading") +
                           ": activations offloaded to the host are not run: the runtime keeps them on the device; use "
                           "enable_activation_offloading: false");
  }
  if (s.spec.optim_bits != 32 || s.spec.optimizer_in_backward) {
    // Note [8-bit optimizer] (plan.cpp) and Note [Optimizer in backward] (layer_stage.cpp): priced, not run.
    const bool bits = s.spec.optim_bits != 32;
    throw UnsupportedError("dtsim validate: " + s.spec.origins.of(bits ? "plan.optim_bits" : "plan.optimizer_in_backward") +
                           (bits ? ": 8-bit optimizer states are not run: the runtime's Adam keeps them as torch.optim does; use optim_bits: 32"
                                 : ": the runtime steps after the backward, not in it; use optimizer_in_backward: false"));
  }
  if (s.spec.fp32_grad_accumulator) {
    // Note [nanotron's fp32 accumulator] (lowering/emitter.hpp): priced, not run.
    throw UnsupportedError("dtsim validate: " + s.spec.origins.of("plan.fp32_grad_accumulator") +
                           ": nanotron's fp32 gradient accumulator is not run: the runtime's gradients are the parameters' type; use "
                           "fp32_grad_accumulator: false");
  }
  if (s.spec.loss_kernel != sim::LossKernel::kCrossEntropy) {
    // Note [Fused linear cross-entropy] (models/src/layers.cpp): priced, not run.
    throw UnsupportedError("dtsim validate: " + s.spec.origins.of("plan.loss_kernel") + ": " + sim::to_string(s.spec.loss_kernel) +
                           " is not run: the runtime takes PyTorch's cross-entropy over the whole logits (the simulator "
                           "prices the fused kernel); use loss_kernel: cross_entropy");
  }
  if (s.spec.moe_experts == sim::MoeExperts::kDense) {
    // Note [Dense experts] (models/src/llama.cpp): priced, not run.
    throw UnsupportedError("dtsim validate: " + s.spec.origins.of("plan.moe_experts") +
                           ": moe_experts dense is not run: the LibTorch twin routes each token to its experts (the simulator "
                           "prices HuggingFace's dense bmm); use moe_experts: grouped");
  }
  if (s.spec.cpu_offloading_num_layers > 0) {
    // Note [Activation offload] (sim/src/lowering/passes/activation_offload.cpp): priced, not run.
    throw UnsupportedError("dtsim validate: " + s.spec.origins.of("plan.cpu_offloading_num_layers") +
                           ": cpu_offloading_num_layers is not run: dtsim's runtime keeps every activation on its device "
                           "(the simulator prices Transformer Engine's offload); use cpu_offloading_num_layers: 0");
  }
  if (s.spec.fine_grained_activation_offloading) {
    // Note [Fine-grained offload] (sim/src/lowering/passes/fine_grained_offload.cpp): priced, not run.
    throw UnsupportedError("dtsim validate: " + s.spec.origins.of("plan.fine_grained_activation_offloading") +
                           ": fine_grained_activation_offloading is not run: dtsim's runtime keeps every activation on its "
                           "device (the simulator prices Megatron-Core's offload groups); use fine_grained_activation_offloading: false");
  }
  if (s.spec.tp_comm_overlap) {
    // Note [Userbuffers' chunks] (models/src/layers.cpp): priced, not run.
    throw UnsupportedError("dtsim validate: " + s.spec.origins.of("plan.tp_comm_overlap") +
                           ": tp_comm_overlap is not run: dtsim's runtime runs its tensor-parallel collectives between the "
                           "GEMMs (the simulator prices Transformer Engine's userbuffers); use tp_comm_overlap: false");
  }
  for (const auto& [key, on] : {std::pair<const char*, bool>{"partition_activations", s.spec.partition_activations},
                                std::pair<const char*, bool>{"cpu_checkpointing", s.spec.cpu_checkpointing}}) {
    // Note [DeepSpeed checkpoints] (sim/src/lowering/passes/deepspeed_checkpointing.cpp): priced, not run.
    if (!on) continue;
    throw UnsupportedError("dtsim validate: " + s.spec.origins.of(std::string("plan.") + key) + ": " + key +
                           " is not run: dtsim's runtime keeps each checkpoint whole on its device (the simulator prices "
                           "DeepSpeed's); use " + key + ": false");
  }
  if (s.spec.recompute == sim::Recompute::kOp) {
    // Note [Op-level recompute] (models/src/llama.cpp): torchtitan's policy
    // saves by aten op; the runtime's layers recompute the attention core
    // or the whole block only.
    throw UnsupportedError("dtsim validate: " + s.spec.origins.of("plan.recompute") +
                           ": recompute op is not run: the runtime recomputes the attention core (selective) or whole "
                           "blocks (full); use selective or full");
  }
  if (s.spec.recompute == sim::Recompute::kSelective && s.spec.recompute_modules != sim::kRecomputeModulesDefault) {
    // Note [Recompute modules] (sim/include/dtsim/sim/model.hpp): priced, not run.
    throw UnsupportedError("dtsim validate: " + s.spec.origins.of("plan.recompute_modules") + ": recompute_modules " +
                           sim::recompute_modules_string(s.spec.recompute_modules) +
                           " is not run: the runtime's selective recompute reruns the attention core alone; use core_attn");
  }
  if (s.spec.recompute == sim::Recompute::kFull && s.spec.recompute_method == sim::RecomputeMethod::kUniform &&
      s.spec.recompute_num_layers > 1) {
    // Note [Block recompute]: the runtime checkpoints each block alone.
    throw UnsupportedError("dtsim validate: " + s.spec.origins.of("plan.recompute_num_layers") + ": recompute_num_layers " +
                           std::to_string(s.spec.recompute_num_layers) +
                           " with recompute_method uniform (groups under one checkpoint) is not run: the runtime reruns "
                           "each block from its own input; use 1, or recompute_method: block");
  }
  const auto& d = s.cluster.device;
  if ((s.spec.precision == sim::Precision::kFp16 && d.peak_fp16 <= 0) ||
      (s.spec.precision == sim::Precision::kBf16 && d.peak_bf16 <= 0) || o.device == "cpu") {
    if (s.spec.precision != sim::Precision::kFp32) {
      s.notes.push_back(std::string("precision ") + sim::to_string(s.spec.precision) + " -> fp32: mixed precision needs a GPU (" +
                        s.spec.origins.of("plan.precision") + ")");
      s.spec.precision = sim::Precision::kFp32;
    }
  }
  if (s.spec.accumulate_allreduce_grads_in_fp32) {
    // Note [Megatron's gradient buffer] (sim/src/lowering/emitter.hpp): the
    // runtime's gradients are PyTorch's, in the parameters' type, bucketed
    // as DDP does; predict what runs.
    s.notes.push_back("accumulate_allreduce_grads_in_fp32 -> false: the runtime keeps PyTorch's gradients in the parameters' "
                      "type, not Megatron-Core's fp32 buffer (" + s.spec.origins.of("plan.accumulate_allreduce_grads_in_fp32") + ")");
    s.spec.accumulate_allreduce_grads_in_fp32 = false;
  } else if (s.spec.megatron_grad_buffer) {
    s.notes.push_back("megatron_grad_buffer -> false: the runtime keeps PyTorch's gradients, made by the backward and freed by "
                      "the step, not Megatron-Core's buffer (" + s.spec.origins.of("plan.megatron_grad_buffer") + ")");
  }
  s.spec.megatron_grad_buffer = false;
  if (s.spec.use_precision_aware_optimizer) {
    // Note [Precision-aware optimizer] (sim/src/parallel/plan.cpp): the
    // runtime's Adam keeps fp32 masters and moments, not Transformer
    // Engine's FusedAdam's; predict what runs.
    s.notes.push_back("use_precision_aware_optimizer -> false: the runtime's Adam keeps its states in fp32, not Transformer "
                      "Engine's FusedAdam's types (" + s.spec.origins.of("plan.use_precision_aware_optimizer") + ")");
    s.spec.use_precision_aware_optimizer = false;
    s.spec.main_params_dtype = s.spec.exp_avg_dtype = s.spec.exp_avg_sq_dtype = sim::StateDtype::kFp32;
  }
  if (s.spec.moe_dispatcher == sim::MoeDispatcher::kDeepEp) {
    // Note [DeepEP] (sim/src/cost/cost_comm.cpp): DeepEP's kernels (NVSHMEM
    // between GPUs) are not in the runtime, whose alltoall dispatcher moves
    // the same rows by NCCL's or Gloo's all-to-all; predict what runs.
    if (s.model->experts() > 0) {
      s.notes.push_back("moe_dispatcher -> alltoall: the runtime dispatches by all-to-all, not DeepEP's kernels (" +
                        s.spec.origins.of("plan.moe_dispatcher") + ")");
    }
    s.spec.moe_dispatcher = sim::MoeDispatcher::kAllToAll;
  }
  if (s.spec.kernels == sim::Kernels::kFused) {
    // Note [Fused kernels] (models/src/llama.cpp): the LibTorch twins run
    // PyTorch's composite norms and SwiGLU; predict what runs, and say so
    // where the model has them (the rules table offers fused there only).
    if (sim::PlanRules(*s.model, s.cluster).kernels().size() > 1) {
      s.notes.push_back("kernels -> composite: the runtime's LibTorch twins run PyTorch's composite RMSNorm and SwiGLU (" +
                        s.spec.origins.of("plan.kernels") + ")");
    }
    s.spec.kernels = sim::Kernels::kComposite;
  }
  if (s.spec.deallocate_pipeline_outputs && s.spec.schedule == sim::Schedule::kZbH1) {
    // Note [Zero bubble passes] (trainer.cpp): the weight pass runs again
    // from the stage's output, whose data it needs.
    s.notes.push_back("deallocate_pipeline_outputs -> false: the runtime's zb-h1 weight pass starts again from each stage's output (" +
                      s.spec.origins.of("plan.deallocate_pipeline_outputs") + ")");
    s.spec.deallocate_pipeline_outputs = false;
  }
  if (s.spec.zero_stage == 3 && s.spec.fsdp == sim::FsdpMode::kNone && !s.spec.z3_leaf_layers) {
    // Note [ZeRO-3 modules] (sim/src/lowering/zero3_coordinator.hpp): the
    // runtime gathers each layer as one flat unit, one layer ahead, as
    // DeepSpeed does with every layer a leaf module; predict what runs.
    s.notes.push_back("z3_leaf_layers -> true: the runtime gathers each layer whole, one ahead, not DeepSpeed's module by "
                      "module coordinator (" + s.spec.origins.of("plan.zero_stage") + ")");
    s.spec.z3_leaf_layers = true;
  }
  if (s.spec.zero_stage == 2 && s.spec.fsdp == sim::FsdpMode::kNone && s.spec.contiguous_gradients) {
    // Note [ZeRO-2's buffers] (sim/src/lowering/passes/data_parallel.cpp):
    // the runtime copies a bucket's gradients into a flat tensor of its own
    // when the bucket is full; predict what runs.
    s.notes.push_back("contiguous_gradients -> false: the runtime keeps each bucket's gradients until it reduces them, not "
                      "DeepSpeed's preallocated buffers (" + s.spec.origins.of("plan.zero_stage") + ")");
    s.spec.contiguous_gradients = false;
  }
  if (s.spec.zero_stage == 1 && s.spec.fsdp == sim::FsdpMode::kNone && s.spec.reduce_scatter && s.spec.runtime != sim::Runtime::kPython) {
    // Note [ZeRO-1's reduction] (sim/src/lowering/passes/data_parallel.cpp):
    // the runtime all-reduces each bucket (launch_bucket) where Megatron's
    // distributed optimizer and DeepSpeed reduce-scatter it; predict what runs.
    s.notes.push_back("reduce_scatter -> false: the runtime's ZeRO-1 all-reduces each bucket, as DDP under "
                      "ZeroRedundancyOptimizer does, not Megatron's and DeepSpeed's reduce-scatter (" +
                      s.spec.origins.of("plan.zero_stage") + ")");
    s.spec.reduce_scatter = false;
  }
  if (s.spec.overlap_param_gather) {
    // Note [Overlapped parameter gather] (sim/src/lowering/passes/data_parallel.cpp):
    // the runtime gathers every parameter after the step; predict what runs.
    s.notes.push_back("overlap_param_gather -> false: the runtime gathers the parameters after the step, not in the next "
                      "forward (" + s.spec.origins.of("plan.overlap_param_gather") + ")");
    s.spec.overlap_param_gather = false;
  }
  if (s.spec.fsdp_version == 2) {
    // Note [FSDP2's reduce-scatter wait] (sim/src/lowering/passes/data_parallel.cpp):
    // the runtime's FSDP reduces as FSDP1 does, never waiting; predict what runs.
    s.notes.push_back("fsdp_version -> 1: the runtime's FSDP never waits for the reduce-scatter before, as FSDP1 (" +
                      s.spec.origins.of("plan.fsdp_version") + ")");
    s.spec.fsdp_version = 1;
  }
  if (s.spec.fsdp != sim::FsdpMode::kNone && s.spec.fsdp_wrap != sim::FsdpWrap::kLayers) {
    // Note [FSDP's root unit] (sim/src/lowering/passes/sharded_parameters.cpp):
    // the runtime makes every layer a unit, the embedding and the head too,
    // each gathered again for its backward; predict what runs.
    s.notes.push_back(std::string("fsdp_wrap -> layers: the runtime gathers every layer as its own unit, the embedding and the head "
                      "too, each again for its backward, not ") +
                      (s.spec.fsdp_wrap == sim::FsdpWrap::kBlocks ? "the rest of the model in one root unit"
                                                                  : "torchtitan's [norm, output] kept from forward to backward") +
                      " (" + s.spec.origins.of("plan.fsdp") + ")");
    s.spec.fsdp_wrap = sim::FsdpWrap::kLayers;
  }
  if (s.spec.tp > 1 && sim::resolved_loss_parallel(s.spec.loss_parallel, s.spec.fsdp != sim::FsdpMode::kNone) ==
                           sim::LossParallel::kDtensor) {
    // Note [Vocab-parallel cross-entropy] (models/torch): the runtime's LM
    // heads run Megatron's; predict what runs.
    s.notes.push_back(std::string("loss_parallel ") + sim::to_string(s.spec.loss_parallel) +
                      " -> megatron: the runtime's vocab-parallel heads run Megatron's cross-entropy" +
                      (s.spec.loss_parallel == sim::LossParallel::kAuto ? ", where auto under FSDP prices DTensor's" : "") + " (" +
                      s.spec.origins.of(s.spec.loss_parallel == sim::LossParallel::kAuto ? "plan.fsdp" : "plan.loss_parallel") + ")");
    s.spec.loss_parallel = sim::LossParallel::kMegatron;
  }
  if (s.spec.cp > 1 && s.spec.cp_comm == sim::CpComm::kP2p && s.model->layers({}).front().signature.rfind("gpt2.", 0) == 0) {
    // Note [Ring attention] (models/torch): the Llama blocks run the p2p
    // ring, GPT-2's gather the keys and values; predict what runs.
    s.notes.push_back("cp_comm p2p -> all_gather: the runtime's GPT-2 blocks exchange keys and values by one all-gather, not the p2p "
                      "ring (" + s.spec.origins.of("plan.cp_comm") + ")");
    s.spec.cp_comm = sim::CpComm::kAllGather;
  }
  if (!o.profile.empty()) s.profile = std::make_shared<const sim::ProfileCosts>(sim::load_profile(o.profile));
  // Resolved and partitioned as the simulator splits it (by cost, with the
  // profile when given), so both run the same layers per stage.
  sim::PredictOptions po;
  po.profile = s.profile;
  s.plan = sim::plan_for(*s.model, s.spec, s.cluster, po);
  const auto& p = s.plan;
  if (p.gpus_used() != world) {
    throw ConfigError("dtsim validate: plan '" + s.spec.name + "' uses " + std::to_string(p.gpus_used()) + " ranks (dp " +
                      std::to_string(p.dp) + " x tp " + std::to_string(p.tp) + " x pp " + std::to_string(p.pp) +
                      (p.cp > 1 ? " x cp " + std::to_string(p.cp) : std::string()) + ") but the run has " +
                      std::to_string(world) + "; use --procs " + std::to_string(p.gpus_used()) + " or --set plan.dp=N");
  }
  if (p.pp > 1 && p.schedule == sim::Schedule::kInterleaved) {
    throw UnsupportedError("dtsim validate: " + s.spec.origins.of("plan.schedule") +
                           ": the runtime runs gpipe, 1f1b and naive model parallel, not interleaved (the simulator predicts it)");
  }
  if (p.pp > 1 && p.zero_stage >= 2) {
    throw UnsupportedError("dtsim validate: ZeRO-" + std::to_string(p.zero_stage) +
                           " with a pipeline is not run (DeepSpeed refuses it too); use zero_stage 0 or 1 with pp > 1");
  }
  if (p.offload_params == sim::Offload::kCpu) {
    throw UnsupportedError("dtsim validate: " + s.spec.origins.of("plan.offload_params") +
                           ": parameter offload is not run; optimizer offload (offload_optimizer: cpu) is");
  }
  {
    // Note [The twin's sparse attention] (models/torch): what it does not run.
    sim::WorkloadShape shape;
    shape.seq_len = p.seq_len;
    for (const auto& layer : s.model->layers(shape)) {
      const std::string& sig = layer.signature;
      if (sig.find(",dsa=") == std::string::npos) continue;
      if (sig.find(",dk=1") != std::string::npos) {
        throw UnsupportedError("dtsim validate: model.dsa_kernels dense (Megatron-Core's masked dense DSA kernels) is not run by the LibTorch "
                               "twin; set model.dsa_kernels=sparse (the simulator predicts it)");
      }
      if (sig.find(",ix=0") != std::string::npos) {
        throw UnsupportedError("dtsim validate: model.indexer_layers: a layer reusing another layer's top-k (S) is not run by the LibTorch "
                               "twin; set every layer to F (the simulator predicts it)");
      }
    }
  }
  if (p.cp > 1) {
    sim::WorkloadShape shape;
    shape.seq_len = p.seq_len;
    shape.cp = p.cp;
    for (const auto& layer : s.model->layers(shape)) {
      if (layer.signature.rfind("llama.", 0) != 0 && layer.signature.rfind("gpt2.", 0) != 0) {
        throw UnsupportedError("dtsim validate: plan.cp " + std::to_string(p.cp) + ": context parallelism is run for the GPT-2 and Llama families only, not " +
                               s.model->name() + " (the simulator predicts it)");
      }
      if (layer.signature.find(":gdn=1,") != std::string::npos || layer.signature.find(":mamba=1,") != std::string::npos) {
        // Note [Gated DeltaNet], Note [Mamba-2] (models/src/llama.cpp): the simulator's all-to-all of heads; the twin runs cp 1.
        const char* what = layer.signature.find(":gdn=1,") != std::string::npos ? "Gated DeltaNet" : "Mamba-2";
        throw UnsupportedError("dtsim validate: plan.cp " + std::to_string(p.cp) + ": context parallelism of " + s.model->name() + "'s " + what +
                               " layers is not run: they run at cp 1 in the LibTorch twin (the simulator predicts it)");
      }
      if (layer.signature.find("mla=1") != std::string::npos) {
        // Note [Multi-head latent attention] (models/src/llama.cpp): its keys
        // and values differ in width, which the twin's exchanges send as one.
        throw UnsupportedError("dtsim validate: plan.cp " + std::to_string(p.cp) + ": context parallelism of latent attention (" +
                               s.model->name() + "'s) is not run; use cp 1 (the simulator predicts it)");
      }
    }
  }
  if (p.tp > 1) {
    // Note [Expert parallelism] (models/torch): nor at ep 1.
    sim::WorkloadShape shape;
    shape.seq_len = p.seq_len;
    shape.tp = p.tp;
    for (const auto& layer : s.model->layers(shape)) {
      if (p.sequence_parallel && p.zero_stage >= 2 && layer.kind == sim::LayerKind::kEmbedding) {
        // Note [Sequence-parallel gradients] (trainer.cpp): under ZeRO-2/3
        // the norms' parts are summed inside each rank's shard, which the
        // tp ranks must lay out alike; a vocabulary tp does not divide
        // gives the ranks embeddings of different sizes (Megatron pads it:
        // --make-vocab-size-divisible-by; the twins do not, which would
        // change the loss).
        const auto v = layer.signature.find(",v=");
        const long long vocab = v == std::string::npos ? 0 : std::atoll(layer.signature.c_str() + v + 3);
        if (vocab % p.tp != 0) {
          throw UnsupportedError("dtsim validate: " + s.spec.origins.of("plan.sequence_parallel") + ": sequence parallelism under ZeRO-" +
                                 std::to_string(p.zero_stage) + " needs a vocabulary tp divides (" + s.model->name() + "'s " +
                                 std::to_string(vocab) + " over tp " + std::to_string(p.tp) + "); set model.vocab to a multiple of " +
                                 std::to_string(p.tp) + " or zero_stage 0 or 1 (the simulator predicts it)");
        }
      }
      if (layer.signature.find(":gdn=1,") != std::string::npos || layer.signature.find(":mamba=1,") != std::string::npos) {
        // Note [Gated DeltaNet], Note [Mamba-2] (models/src/llama.cpp): the analytic model splits their heads; the twin does not.
        const char* what = layer.signature.find(":gdn=1,") != std::string::npos ? "Gated DeltaNet" : "Mamba-2";
        throw UnsupportedError("dtsim validate: " + s.spec.origins.of("plan.tp") + ": plan.tp " + std::to_string(p.tp) + " with " +
                               s.model->name() + "'s " + what + " layers is not run: they run at tp 1 in the LibTorch twin (the simulator "
                               "predicts it)");
      }
      if (layer.signature.find(",dsa=") != std::string::npos) {
        // Note [The twin's sparse attention] (models/torch): the twin runs DeepSeek Sparse Attention at tp 1.
        throw UnsupportedError("dtsim validate: " + s.spec.origins.of("plan.tp") + ": plan.tp " + std::to_string(p.tp) + " with " +
                               s.model->name() + "'s DeepSeek Sparse Attention is not run: it runs at tp 1 in the LibTorch twin (the "
                               "simulator predicts it)");
      }
      if (p.sequence_parallel && layer.signature.rfind("bert.", 0) == 0) {
        // Note [Sequence parallelism] (models/torch): built for GPT-2 and the Llama family.
        throw UnsupportedError("dtsim validate: " + s.spec.origins.of("plan.sequence_parallel") + ": sequence parallelism of " +
                               s.model->name() + " (BERT) is not run; set plan.sequence_parallel=false (the simulator predicts it)");
      }
      if (layer.signature.rfind("moe.block:", 0) == 0) {
        // Note [Experts under tensor parallelism] (models/torch).
        if (!p.sequence_parallel) {
          throw UnsupportedError("dtsim validate: " + s.spec.origins.of("plan.tp") + ": plan.tp " + std::to_string(p.tp) +
                                 " with " + s.model->name() + "'s MoE layers is run with sequence parallelism only, as Megatron-Core "
                                 "trains it; set plan.sequence_parallel=true (the simulator predicts both)");
        }
        if (layer.signature.find(",mb=1") != std::string::npos) {
          throw UnsupportedError("dtsim validate: " + s.spec.origins.of("plan.tp") + ": plan.tp " + std::to_string(p.tp) + " with " +
                                 s.model->name() + "'s expert biases is not run; use tp 1 (the simulator predicts it)");
        }
      }
    }
  }
  if (p.zero_stage >= 3 && (p.ep > 1 || (p.etp != p.tp && s.model->experts() > 0))) {
    // Note [Expert gradients] (trainer.cpp): ZeRO-3 and FSDP gather each
    // layer as one flat unit sharded over the dp x cp group; a MoE layer's
    // experts would need a second unit sharded over the edp group (spread
    // over ep ranks, or whole on each tp rank: an edp group of tp ranks).
    const bool ep = p.ep > 1;
    throw UnsupportedError("dtsim validate: " + s.spec.origins.of(p.fsdp ? "plan.fsdp" : "plan.zero_stage") + ": " +
                           (p.fsdp ? std::string("FSDP") : "ZeRO-3") +
                           (ep ? " with plan.ep " + std::to_string(p.ep) : " with plan.etp 1 at tp " + std::to_string(p.tp)) +
                           " is not run (its per-layer units do not split the experts over the expert data-parallel group); " +
                           (ep ? "with ep > 1 use zero_stage 0, 1 or 2" : "use zero_stage 0, 1 or 2, or leave plan.etp at tp") +
                           " (the simulator predicts it)");
  }
  if (p.hybrid_shard) {
    throw UnsupportedError("dtsim validate: FSDP hybrid_shard is not run; use full_shard or shard_grad_op");
  }
  return s;
}

void check_run_data(const ValidateOptions& o, const RunSetup& s) {
  if (o.data.empty()) return;
  // The layers as the worker builds them (trainer.cpp): the first reads the
  // inputs, the last the labels or targets.
  const auto& p = s.plan;
  sim::WorkloadShape shape;
  shape.micro_batch = p.micro_batch;
  shape.seq_len = p.seq_len;
  shape.tp = p.tp;
  shape.cp = p.cp;
  shape.ep = p.ep;
  shape.etp = p.etp;
  const auto layers = s.model->layers(shape);
  if (layers.empty()) return;
  check_dataset_fits(load_dataset(o.data), data_needs(s.model->name(), layers.front().signature, layers.back().signature), p.seq_len);
}

sim::Prediction predict_run(const RunSetup& s) {
  sim::PredictOptions po;
  po.keep_graph = true;
  po.profile = s.profile;
  return sim::predict(*s.model, s.spec, s.cluster, po);
}

// ---- rank measurements ---------------------------------------------------------

double median(std::vector<double> v) {
  if (v.empty()) return 0;
  std::sort(v.begin(), v.end());
  const std::size_t n = v.size();
  return n % 2 ? v[n / 2] : 0.5 * (v[n / 2 - 1] + v[n / 2]);
}

std::string rank_to_json(const RankMeasurement& m) {
  sim::JsonWriter w;
  w.begin_object();
  w.field("rank", m.rank).field("stage", m.stage).field("device", m.device);
  w.key("step_s").begin_array();
  for (double x : m.step_s) w.value(x);
  w.end_array();
  w.field("forward_s", m.forward_s).field("backward_s", m.backward_s).field("optimizer_s", m.optimizer_s).field("wait_s", m.wait_s);
  w.field("peak_bytes", m.peak_bytes).field("reserved_peak_bytes", m.reserved_peak_bytes).field("host_peak_bytes", m.host_peak_bytes);
  w.field("mem_limit_bytes", m.mem_limit_bytes);
  w.key("losses").begin_array();
  for (double x : m.losses) w.value(x);
  w.end_array();
  w.field("probe_s", m.probe_s).field("probe_end_s", m.probe_end_s).field("cpus", m.cpus);
  w.field("gloo_loops_lowered", m.gloo_loops_lowered);
  w.key("memory_trace").begin_array();
  for (const auto& k : m.memory_trace) {
    w.begin_object().field("what", k.what).field("current", k.current).field("peak", k.peak).end_object();
  }
  w.end_array();
  w.end_object();
  return w.str();
}

RankMeasurement rank_from_json(const std::string& text, const std::string& source) {
  // Strict JSON (nlohmann-json): a torn or hand-edited file is refused with
  // its line and column, a missing or mistyped field by name.
  RankMeasurement m;
  nlohmann::json n;
  try {
    n = nlohmann::json::parse(text);
  } catch (const nlohmann::json::parse_error& e) {
    throw ConfigError(sim::text_position(text, e.byte, source) + ": not a rank measurement: malformed JSON: " +
                      sim::json_error_text(e.what()));
  }
  try {
    if (!n.is_object()) throw ConfigError(source + ": expected a JSON object");
    m.rank = n.at("rank").get<int>();
    m.stage = n.at("stage").get<int>();
    m.device = n.at("device").get<std::string>();
    for (const auto& x : n.at("step_s")) m.step_s.push_back(x.get<double>());
    m.forward_s = n.at("forward_s").get<double>();
    m.backward_s = n.at("backward_s").get<double>();
    m.optimizer_s = n.at("optimizer_s").get<double>();
    m.wait_s = n.at("wait_s").get<double>();
    m.peak_bytes = n.at("peak_bytes").get<std::int64_t>();
    m.host_peak_bytes = n.at("host_peak_bytes").get<std::int64_t>();
    if (n.contains("reserved_peak_bytes")) m.reserved_peak_bytes = n["reserved_peak_bytes"].get<std::int64_t>();
    if (n.contains("mem_limit_bytes")) m.mem_limit_bytes = n["mem_limit_bytes"].get<std::int64_t>();
    for (const auto& x : n.at("losses")) m.losses.push_back(x.get<double>());
    if (n.contains("probe_s")) m.probe_s = n["probe_s"].get<double>();
    if (n.contains("probe_end_s")) m.probe_end_s = n["probe_end_s"].get<double>();
    if (n.contains("cpus")) m.cpus = n["cpus"].get<std::string>();
    if (n.contains("gloo_loops_lowered")) m.gloo_loops_lowered = n["gloo_loops_lowered"].get<int>();
    if (n.contains("memory_trace")) {
      for (const auto& k : n["memory_trace"]) {
        m.memory_trace.push_back({k.at("what").get<std::string>(), k.at("current").get<std::int64_t>(), k.at("peak").get<std::int64_t>()});
      }
    }
  } catch (const nlohmann::json::exception& e) {
    throw ConfigError(source + ": not a rank measurement (" + sim::json_error_text(e.what()) + ")");
  }
  return m;
}

Measured combine(std::vector<RankMeasurement> ranks) {
  Measured m;
  std::sort(ranks.begin(), ranks.end(), [](const auto& a, const auto& b) { return a.rank < b.rank; });
  m.ranks = std::move(ranks);
  std::size_t steps = 0;
  for (const auto& r : m.ranks) steps = std::max(steps, r.step_s.size());
  std::vector<double> per_step(steps, 0.0);
  for (const auto& r : m.ranks) {
    for (std::size_t i = 0; i < r.step_s.size(); ++i) per_step[i] = std::max(per_step[i], r.step_s[i]);
  }
  if (!per_step.empty()) {
    m.iteration_median_s = median(per_step);
    m.iteration_min_s = *std::min_element(per_step.begin(), per_step.end());
    m.iteration_max_s = *std::max_element(per_step.begin(), per_step.end());
  }
  // The loss: the first rank that has one (the last stage's, dp-averaged).
  for (const auto& r : m.ranks) {
    if (!r.losses.empty()) {
      m.losses = r.losses;
      break;
    }
  }
  // Note [Unequal ranks]
  // Ranks of one stage do the same work (data-parallel replicas, ZeRO
  // shards, tensor-parallel shares), and every collective makes the faster
  // wait for the slower, so a step runs at the slowest rank's pace. On the
  // CI machine (2 vCPUs) one of two ranks was at times 30-55% slower than the
  // other for a whole run, on identical layers, while a single process was
  // steady within 2%: the cores were not equally free. The simulator prices
  // equal ranks, so the report shows the spread it measured.
  std::map<int, std::pair<const RankMeasurement*, const RankMeasurement*>> extremes;  // stage -> (fastest, slowest)
  const auto compute = [](const RankMeasurement* r) { return r->forward_s + r->backward_s; };
  for (const auto& r : m.ranks) {
    m.probe_s = std::max(m.probe_s, r.probe_s);  // Note [Machine probe]: the slowest rank
    m.probe_end_s = std::max(m.probe_end_s, r.probe_end_s);
    if (compute(&r) <= 0) continue;
    auto [it, fresh] = extremes.try_emplace(r.stage, &r, &r);
    if (fresh) continue;
    auto& [fast, slow] = it->second;
    if (compute(&r) < compute(fast)) {
      fast = &r;
    } else if (slow == fast || compute(&r) > compute(slow)) {
      slow = &r;
    }
  }
  for (const auto& [stage, e] : extremes) {
    const auto [fast, slow] = e;
    if (fast == slow || (m.slow_rank >= 0 && compute(slow) / compute(fast) - 1 <= m.compute_skew)) continue;
    m.compute_skew = compute(slow) / compute(fast) - 1;
    m.slow_rank = slow->rank;
    m.fast_rank = fast->rank;
  }
  return m;
}

double profile_probe_seconds(const sim::Profile& p) {
  const auto it = p.info.find("torch.probe_s");
  return it == p.info.end() ? 0 : std::max(0.0, std::atof(it->second.c_str()));
}

double probe_ratio(const RunSetup& s, const Measured& m) {
  if (s.profile == nullptr || m.probe_s <= 0) return 0;
  const double calibrated = profile_probe_seconds(s.profile->profile());
  if (calibrated <= 0) return 0;
  const double before = m.probe_s / calibrated;
  if (m.probe_end_s <= 0) return before;
  const double after = m.probe_end_s / calibrated;
  return std::abs(std::log(after)) > std::abs(std::log(before)) ? after : before;
}

// ---- the report ----------------------------------------------------------------

double ReportRow::error() const { return measured == 0 ? 0 : (predicted - measured) / measured; }

std::vector<ReportRow> report_rows(const sim::Prediction& p, const Measured& m) {
  std::vector<ReportRow> rows;
  rows.push_back({"iteration", "s", static_cast<double>(p.iteration_time) * 1e-9, m.iteration_median_s});
  const int pp = p.plan.pp;
  for (int s = 0; s < pp; ++s) {
    std::vector<double> f, b, o, w;
    for (const auto& r : m.ranks) {
      if (r.stage != s) continue;
      f.push_back(r.forward_s);
      b.push_back(r.backward_s);
      o.push_back(r.optimizer_s);
      w.push_back(r.wait_s);
    }
    if (f.empty()) continue;
    const StagePhases ph = predicted_phases(p, s);
    const double it = static_cast<double>(p.iteration_time) * 1e-9;
    const std::string pre = pp > 1 ? "stage " + std::to_string(s) + " " : "";
    rows.push_back({pre + "forward", "s", ph.forward, median(f)});
    rows.push_back({pre + "backward", "s", ph.backward, median(b)});
    rows.push_back({pre + "comm/pipeline wait", "s", std::max(0.0, it - ph.forward - ph.backward - ph.optimizer), median(w)});
    rows.push_back({pre + "optimizer", "s", ph.optimizer, median(o)});
  }
  // Peak memory as the framework's allocator counts it: the simulated peak
  // less what lies outside it (the CUDA context; nothing on a CPU), against
  // torch.cuda.max_memory_allocated() or the counting allocator's peak.
  for (const auto& r : m.ranks) {
    rows.push_back({"rank " + std::to_string(r.rank) + " peak memory", "B",
                    static_cast<double>(predicted_peak(p, r.stage) - p.outside_allocator), static_cast<double>(r.peak_bytes)});
  }
  return rows;
}

std::string format_report(const ValidateOptions& o, const RunSetup& s, const sim::Prediction& p, const Measured& m) {
  std::ostringstream out;
  const auto& pl = s.plan;
  out << "dtsim validate: " << s.model->name() << ", plan " << s.spec.name << " (dp " << pl.dp << ", tp " << pl.tp;
  if (pl.sequence_parallel) out << " sequence parallel";
  out << ", pp " << pl.pp;
  if (pl.cp > 1) out << ", cp " << pl.cp << " (" << sim::to_string(pl.cp_comm) << ")";
  if (pl.zero_stage) out << ", zero " << pl.zero_stage;
  if (pl.pp > 1) out << ", " << sim::to_string(pl.schedule) << " x" << pl.grad_accum;
  else if (pl.grad_accum > 1) out << ", accumulation x" << pl.grad_accum;
  out << ", micro-batch " << pl.micro_batch << " x " << pl.seq_len << " tokens, " << sim::to_string(pl.precision);
  if (pl.recompute != sim::Recompute::kNone) out << ", recompute " << sim::to_string(pl.recompute);
  if (pl.recompute_blocks > 0) out << " (the first " << pl.recompute_blocks << " blocks of each chunk)";
  if (pl.offload_optimizer == sim::Offload::kCpu) out << ", optimizer on the host";
  out << ")\n";
  out << "  " << pl.gpus_used() << " ranks on " << o.device << " (" << s.cluster.name << "), " << o.steps << " measured steps after "
      << o.warmup << " warm-up, " << (o.data.empty() ? "synthetic data" : "data " + o.data) << ", prediction from "
      << p.cost_source << "\n";
  for (const auto& n : s.notes) out << "  note: " << n << "\n";
  for (const auto& w : p.warnings) out << "  warning: " << w << "\n";  // the prediction's (Note [Quick profiles])
  if (m.partial) {
    out << "\n  PARTIAL RUN, not a measurement: " << m.partial_reason << "\n";
    return out.str();
  }
  out << "\n";
  char line[200];
  std::snprintf(line, sizeof line, "  %-28s %12s %12s %8s\n", "", "predicted", "measured", "error");
  out << line;
  for (const auto& r : report_rows(p, m)) {
    const auto show = [&](double x) { return r.unit == "B" ? human_bytes(x) : human_seconds(x); };
    std::snprintf(line, sizeof line, "  %-28s %12s %12s %+7.1f%%\n", r.what.c_str(), show(r.predicted).c_str(), show(r.measured).c_str(),
                  100 * r.error());
    out << line;
  }
  out << "\n  iteration measured: median " << human_seconds(m.iteration_median_s) << ", min " << human_seconds(m.iteration_min_s)
      << ", max " << human_seconds(m.iteration_max_s) << " (a step lasts as long as its slowest rank)\n";
  if (m.slow_rank >= 0) {
    out << "  ranks' compute on the same work: rank " << m.slow_rank << " took " << fmt("%.0f%%", 100 * m.compute_skew)
        << " longer than rank " << m.fast_rank
        << (m.compute_skew > 0.1 ? " (the simulator assumes equal ranks: the cores were not equally free)" : "") << "\n";
  }
  // Note [A rank's own cores] (platform/src/process.cpp): where each rank ran.
  std::string cores;
  for (const auto& r : m.ranks) {
    if (!r.cpus.empty()) cores += (cores.empty() ? "" : ", ") + ("rank " + std::to_string(r.rank) + " on " + r.cpus);
  }
  if (!cores.empty()) out << "  cores: " << cores << " (Note [A rank's own cores]; DTSIM_BIND=none leaves them to the scheduler)\n";
  if (const double k = probe_ratio(s, m); k > 0) {
    out << "  machine: the reference Bi-LSTM layer (Note [Machine probe]) ran " << fmt("%.2fx", k) << " its time at calibration";
    if (const double cal = profile_probe_seconds(s.profile->profile()); m.probe_end_s > 0 && cal > 0) {
      out << " (" << fmt("%.2fx", m.probe_s / cal) << " before the run, " << fmt("%.2fx", m.probe_end_s / cal) << " after)";
    }
    if (k > 1.15 || k < 1 / 1.15) {
      out << ": the machine is " << (k > 1 ? "slower" : "faster") << " than when the profile was measured, and the errors above include it";
    }
    out << "\n";
  }
  // The caching allocator's reserve: allocated peak, cached free blocks and
  // rounding to its segments; measured, not predicted (docs/validation-gpu.md).
  for (const auto& r : m.ranks) {
    if (r.reserved_peak_bytes <= 0) continue;
    out << "  rank " << r.rank << " reserved: " << human_bytes(static_cast<double>(r.reserved_peak_bytes)) << " at its peak ("
        << fmt("%+.1f%%", 100.0 * (static_cast<double>(r.reserved_peak_bytes) / std::max<double>(1, static_cast<double>(r.peak_bytes)) - 1))
        << " over allocated); with the CUDA context the device holds "
        << human_bytes(static_cast<double>(r.reserved_peak_bytes + p.outside_allocator)) << " (predicted "
        << human_bytes(static_cast<double>(predicted_peak(p, r.stage))) << " without the cache)\n";
  }
  if (!m.losses.empty()) {
    out << "  loss: " << fmt("%.4f", m.losses.front()) << " at step 1 -> " << fmt("%.4f", m.losses.back()) << " at step "
        << m.losses.size() << "\n";
  }
  return out.str();
}

std::string report_json(const ValidateOptions& o, const RunSetup& s, const sim::Prediction& p, const Measured& m) {
  sim::JsonWriter w;
  w.begin_object();
  w.header();
  w.field("model", s.model->name()).field("plan", s.spec.name).field("cluster", s.cluster.name).field("device", o.device);
  w.field("procs", s.plan.gpus_used()).field("dp", s.plan.dp).field("tp", s.plan.tp).field("pp", s.plan.pp).field("cp", s.plan.cp);
  w.field("ep", s.plan.ep).field("moe_force_load_balance", s.plan.moe_force_load_balance);
  w.field("sync_batchnorm", s.plan.sync_batchnorm);
  w.field("steps", o.steps).field("warmup", o.warmup).field("data", o.data.empty() ? std::string("synthetic") : o.data);
  w.key("notes").begin_array();
  for (const auto& n : s.notes) w.value(n);
  w.end_array();
  w.key("warnings").begin_array();
  for (const auto& x : p.warnings) w.value(x);
  w.end_array();
  w.key("measured").begin_object();
  w.field("partial", m.partial);
  if (m.partial) w.field("partial_reason", m.partial_reason);
  w.key("iteration_time_s").begin_object();
  w.field("median", m.iteration_median_s).field("min", m.iteration_min_s).field("max", m.iteration_max_s);
  w.end_object();
  // Phases of the slowest rank per phase, as the explorer draws one bar.
  double f = 0, b = 0, c = 0, opt = 0;
  for (const auto& r : m.ranks) {
    f = std::max(f, r.forward_s);
    b = std::max(b, r.backward_s);
    c = std::max(c, r.wait_s);
    opt = std::max(opt, r.optimizer_s);
  }
  w.field("compute_skew", m.compute_skew).field("slow_rank", m.slow_rank).field("fast_rank", m.fast_rank);
  w.field("probe_s", m.probe_s).field("probe_end_s", m.probe_end_s).field("probe_ratio", probe_ratio(s, m));
  w.key("phases_s").begin_object();
  w.field("forward", f).field("backward", b).field("comm_wait", c).field("optimizer", opt);
  w.end_object();
  w.key("ranks").begin_array();
  for (const auto& r : m.ranks) {
    w.begin_object();
    w.field("rank", r.rank).field("stage", r.stage).field("peak_bytes", r.peak_bytes).field("reserved_peak_bytes", r.reserved_peak_bytes);
    w.field("host_peak_bytes", r.host_peak_bytes).field("mem_limit_bytes", r.mem_limit_bytes);
    w.field("forward_s", r.forward_s).field("backward_s", r.backward_s).field("wait_s", r.wait_s).field("optimizer_s", r.optimizer_s);
    w.field("cpus", r.cpus).field("gloo_loops_lowered", r.gloo_loops_lowered);
    w.end_object();
  }
  w.end_array();
  w.key("losses").begin_array();
  for (double x : m.losses) w.value(x);
  w.end_array();
  w.end_object();
  w.key("predicted").begin_object();
  w.field("iteration_time_s", sim::Decimal{p.iteration_time, 9}).field("cost_source", p.cost_source);
  w.field("outside_allocator_bytes", p.outside_allocator);
  w.key("ranks").begin_array();
  for (const auto& r : p.ranks) {
    w.begin_object();
    w.field("rank", r.rank).field("stage", r.stage).field("peak_bytes", r.peak);
    w.end_object();
  }
  w.end_array();
  w.end_object();
  if (!m.partial) {
    w.key("comparison").begin_array();
    for (const auto& r : report_rows(p, m)) {
      w.begin_object();
      w.field("what", r.what).field("unit", r.unit).field("predicted", r.predicted).field("measured", r.measured).field("error", r.error());
      w.end_object();
    }
    w.end_array();
  }
  w.end_object();
  return w.str();
}

std::string merge_traces(const std::vector<std::string>& rank_event_arrays) {
  std::string out = "{\"displayTimeUnit\":\"ms\",\"traceEvents\":[";
  bool first = true;
  for (const auto& a : rank_event_arrays) {
    const auto lo = a.find('['), hi = a.rfind(']');
    if (lo == std::string::npos || hi == std::string::npos || hi <= lo + 1) continue;
    const std::string body = a.substr(lo + 1, hi - lo - 1);
    if (body.find_first_not_of(" \n\t\r") == std::string::npos) continue;
    if (!first) out += ",";
    out += body;
    first = false;
  }
  out += "]}\n";
  return out;
}

}  // namespace dtsim::runtime
