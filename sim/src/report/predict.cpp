#include "dtsim/sim/predict.hpp"

#include <algorithm>
#include <array>
#include <optional>
#include <string>

#include <fmt/format.h>

#include "dtsim/sim/cost.hpp"
#include "dtsim/sim/cost_profile.hpp"
#include "dtsim/sim/partition.hpp"
#include "dtsim/sim/rules.hpp"
#include "dtsim/sim/error.hpp"
#include "dtsim/sim/lowering.hpp"
#include "lowering/lowering_common.hpp"
#include "report/steady_state.hpp"
#include "report/text.hpp"

namespace dtsim::sim {

// Note [Pipeline breakdown]
// A pipeline's iteration has no single critical path worth splitting: the
// bubble is time a stage spends waiting for another. So a pipeline's
// breakdown is that of its busiest stage (most compute), instant by instant
// over the whole iteration: computing if its compute stream runs a kernel
// task, else the optimizer, else a collective or send of its own in flight
// (exposed communication), else an offload copy, else idle: the bubble.
// The parts sum to the iteration time, and with uniform stages and free
// communication the bubble is (p - 1)/(m + p - 1) of it for GPipe and 1F1B
// (Narayanan et al. 2021, section 2.2).
namespace detail {

namespace {
bool is_compute(Phase p) { return p == Phase::kForward || p == Phase::kBackward || p == Phase::kRecompute; }
/// The length of [a, b) within [t0, t1).
TimeNs overlap(TimeNs a, TimeNs b, TimeNs t0, TimeNs t1) { return std::max<TimeNs>(0, std::min(b, t1) - std::max(a, t0)); }
}  // namespace

std::vector<TimeNs> stage_busy(const TaskGraph& g, const std::vector<Span>& spans, TimeNs t0, TimeNs t1) {
  std::vector<TimeNs> busy(g.ranks.size(), 0);
  for (std::size_t i = 0; i < g.tasks.size(); ++i) {
    const Task& t = g.tasks[i];
    if (is_compute(t.phase)) busy[t.rank] += overlap(spans[i].start, spans[i].end, t0, t1);
  }
  return busy;
}

StageClasses stage_classes(const TaskGraph& g, const std::vector<Span>& spans, int rank, TimeNs t0, TimeNs t1) {
  // Classes by priority: 0 compute, 1 optimizer, 2 comm, 3 offload; 4 idle.
  struct Edge {
    TimeNs at;
    int cls;
    int delta;
  };
  std::vector<Edge> edges;
  for (std::size_t i = 0; i < g.tasks.size(); ++i) {
    const Task& t = g.tasks[i];
    if (t.rank != rank || spans[i].end <= spans[i].start || spans[i].end <= t0 || spans[i].start >= t1) continue;
    int cls = 2;
    if (is_compute(t.phase)) cls = 0;
    if (t.phase == Phase::kOptimizer) cls = 1;
    if (t.phase == Phase::kOffload) cls = 3;
    edges.push_back({std::max(spans[i].start, t0), cls, +1});
    edges.push_back({std::min(spans[i].end, t1), cls, -1});
  }
  std::sort(edges.begin(), edges.end(), [](const Edge& a, const Edge& b) { return a.at < b.at; });
  std::array<int, 4> active{};
  StageClasses total{};
  TimeNs prev = t0;
  auto account = [&](TimeNs until) {
    if (until <= prev) return;
    int cls = 4;
    for (int c = 0; c < 4; ++c) {
      if (active[c] > 0) {
        cls = c;
        break;
      }
    }
    total[cls] += until - prev;
    prev = until;
  };
  for (const Edge& e : edges) {
    account(e.at);
    active[e.cls] += e.delta;
  }
  account(t1);
  return total;
}

TimeBreakdown to_breakdown(const StageClasses& c) {
  TimeBreakdown b;
  b.compute = c[0];
  b.optimizer = c[1];
  b.exposed_comm = c[2];
  b.offload = c[3];
  b.bubble = c[4];
  return b;
}

}  // namespace detail

TimeBreakdown stage_breakdown(const TaskGraph& g, const ExecResult& exec) {
  const std::vector<TimeNs> busy = detail::stage_busy(g, exec.spans, 0, exec.makespan);
  const int ref = static_cast<int>(std::max_element(busy.begin(), busy.end()) - busy.begin());
  return detail::to_breakdown(detail::stage_classes(g, exec.spans, ref, 0, exec.makespan));
}

namespace {

// Note [Library workspaces]
// A CUDA process's allocator holds, beside the tensors, the workspaces of
// the libraries it ran: cuBLAS keeps one per thread and stream that ran a
// matmul (PyTorch's CUDABlas.cpp, getCurrentCUDABlasHandle: the forward's
// thread and autograd's), 65 MiB at rest on the H100 after GPT-2's steps.
// cuDNN takes a convolution's workspace for the call and gives it back. So
// a model that multiplies through no cuBLAS (a network of convolutions
// alone, Model::runs_cublas) holds none: seed 003's ConvAutoencoder peaked
// at 14 MiB allocated on the H100 where 65 MiB of cuBLAS workspaces had
// been counted, and its MLP, all linear layers, at 73 MiB, 65 of them
// workspaces (docs/validation-gpu.md).

/// The cost models a prediction prices with: the datasheet's, or a
/// profile's with the measured runtime overhead (CUDA context, the
/// libraries' workspaces) in place of the datasheet's.
class Pricing {
 public:
  /// `runtime`: the plan's training loop; a Python loop's host cost is
  /// the profile's (Note [Python host cost]), and where it has none a
  /// line in `warnings` says so.
  Pricing(const ClusterSpec& cluster, const PredictOptions& options, CostSources* sources, const Model& model,
          Runtime runtime, Fp8Recipe fp8_recipe, std::vector<std::string>* warnings = nullptr)
      : cluster_(cluster) {
    // Note [FP8 training] (cost_compute.cpp): what the recipe's casts move
    // and MXFP8's GEMMs.
    cluster_.device.fp8_recipe = fp8_recipe;
    outside_allocator_ = cluster.device.runtime_reserved;
    if (!options.profile) {
      compute_ = std::make_unique<RooflineComputeModel>(cluster_.device);
      comm_ = std::make_unique<AnalyticCommModel>(cluster_);
      python_host(runtime, options, warnings);
      return;
    }
    const auto& mem = options.profile->profile().memory;
    if (const auto it = mem.find("cuda_context_bytes"); it != mem.end()) {
      cluster_.device.runtime_reserved = it->second;
      outside_allocator_ = it->second;
      // The libraries' workspaces inside the caching allocator: all of them
      // as calibration found them at rest after training steps (a cuBLAS
      // workspace for the forward's thread and one for autograd's), else
      // the first matmul's; none where nothing runs cuBLAS (Note [Library
      // workspaces]).
      Bytes workspaces = 0;
      for (const char* key : {"cublas_workspace_bytes", "workspace_at_rest_bytes"}) {
        if (const auto ws = mem.find(key); ws != mem.end()) workspaces = std::max(workspaces, ws->second);
      }
      if (model.runs_cublas()) cluster_.device.runtime_reserved += workspaces;
    }
    options.profile->calibrate_interference(cluster_.device);  // Note [Interference fit]
    compute_ = std::make_unique<ProfileComputeModel>(options.profile, cluster_.device, sources);
    comm_ = std::make_unique<ProfileCommModel>(options.profile, cluster_, sources);
    python_host(runtime, options, warnings);
  }
  Pricing(const Pricing&) = delete;
  Pricing& operator=(const Pricing&) = delete;

  const ClusterSpec& cluster() const { return cluster_; }
  const ComputeModel& compute() const { return python_ ? *python_ : *compute_; }
  const CommModel& comm() const { return *comm_; }
  Bytes outside_allocator() const { return outside_allocator_; }

 private:
  void python_host(Runtime runtime, const PredictOptions& options, std::vector<std::string>* warnings) {
    if (runtime != Runtime::kPython) return;
    const std::optional<PythonHostCost> cost = options.profile ? options.profile->python_host() : std::nullopt;
    if (cost) {
      python_ = std::make_unique<PythonHostComputeModel>(*compute_, *cost, options.profile->gpu());
    } else if (warnings != nullptr) {
      warnings->push_back(std::string("plan.runtime python: ") +
                          (options.profile ? "the profile " + options.profile->profile().path + " did not time"
                                           : "without a profile nothing times") +
                          " a Python loop's host cost (dtsim calibrate does where python3 imports torch); priced as "
                          "dtsim's C++ loop");
    }
  }
  ClusterSpec cluster_;
  std::unique_ptr<ComputeModel> compute_, python_;
  std::unique_ptr<CommModel> comm_;
  Bytes outside_allocator_ = 0;
};

}  // namespace

ResolvedPlan plan_for(const Model& model, const PlanSpec& spec, const ClusterSpec& cluster, const PredictOptions& options) {
  ResolvedPlan plan = resolve(spec, model, cluster);
  const Pricing pricing(cluster, options, nullptr, model, plan.runtime, plan.fp8_recipe);
  partition(plan, model, pricing.cluster(), pricing.compute(), pricing.comm());
  return plan;
}

PricedLayers price_plan_layers(const Model& model, const ResolvedPlan& plan, const ClusterSpec& cluster,
                               const PredictOptions& options) {
  const Pricing pricing(cluster, options, nullptr, model, plan.runtime, plan.fp8_recipe);
  return price_layers(model, plan, pricing.cluster(), pricing.compute(), pricing.comm());
}

LayerCosts layer_costs(const PricedLayers& priced, const ResolvedPlan& plan) {
  // Note [Search]: what each layer keeps its stage's compute stream busy with.
  LayerCosts out;
  const std::size_t n = priced.layers.size();
  out.forward.reserve(n);
  out.backward.reserve(n);
  out.kept.reserve(n);
  out.weight_hold.reserve(n);
  out.params.reserve(n);
  out.expert_params.reserve(n);
  out.costs = priced.costs();
  out.ep_off_stream = priced.ep_off_stream;
  const std::vector<Recompute> recomputes = layer_recomputes(plan, priced.layers);
  const std::vector<int> groups = recompute_groups(plan, priced.layers);
  for (std::size_t l = 0; l < n; ++l) {
    // The serial collectives as the compute stream runs them (under
    // tp_comm_overlap what the GEMMs leave of TP's; every all-to-all).
    const TimeNs tpf = priced.tp_forward_exposed[l], tpb = priced.tp_backward_exposed[l];
    out.forward.push_back(priced.forward[l] + tpf);
    out.backward.push_back(priced.backward[l] + priced.recompute[l] + tpb);
    const double f = static_cast<double>(priced.forward[l]), b = static_cast<double>(priced.backward[l]),
                 r = static_cast<double>(priced.recompute[l]);
    out.kernels_ns += f + b + r;
    out.memory_ns += f * priced.forward_memory[l] + b * priced.backward_memory[l] + r * priced.recompute_memory[l];
    out.serial_comm_ns += static_cast<double>(tpf + tpb);
    out.kept.push_back(detail::kept_bytes(priced.layers, l, recomputes[l], groups[l]));
    const bool block = priced.layers[l].is_block();
    out.block.push_back(block ? 1 : 0);
    out.rerun.push_back(recomputes[l] == Recompute::kFull && block ? priced.recompute[l] : 0);
    out.rerun_full.push_back(block ? priced.forward[l] + priced.tp_forward[l] : 0);  // partition.cpp's full recompute
    out.checkpoint.push_back(detail::kept_bytes(priced.layers, l, Recompute::kFull));
    out.whole.push_back(detail::kept_bytes(priced.layers, l, Recompute::kNone));
    // What a deferred weight pass would keep; only ZB-H1's order defers one.
    out.weight_hold.push_back(detail::weight_grad_hold(priced.layers[l]));
    out.params.push_back(priced.layers[l].params);
    const Layer& L = priced.layers[l];
    out.frozen_bytes.push_back(frozen_weight_bytes(L.frozen_params - L.frozen_tied, L.frozen_quantized, L.frozen_quantized_bytes, element_bytes(plan.precision)));
    out.expert_params.push_back(priced.layers[l].expert_params);
  }
  return out;
}

TimeNs micro_batch_compute(const Model& model, const ResolvedPlan& plan, const ClusterSpec& cluster,
                           const PredictOptions& options, double* forward_share) {
  const LayerCosts costs = layer_costs(price_plan_layers(model, plan, cluster, options), plan);
  TimeNs total = 0;
  double share = 1;
  for (std::size_t l = 0; l < costs.forward.size(); ++l) {
    const TimeNs all = costs.forward[l] + costs.backward[l];
    if (all > 0) share = std::min(share, static_cast<double>(costs.forward[l]) / static_cast<double>(all));
    total += all;
  }
  if (forward_share != nullptr) *forward_share = share;
  return total;
}

// Note [Advice]
// Plans a user easily writes by accident are reported with what would
// change them, as warnings (the figures stand; nothing is refused):
//   - `attention: flash` asked where it would not run fused (fp32 on a
//     grouped-query model: PyTorch's math path, Note [SDPA in fp32] in
//     parallel/rules.cpp) says it is priced as eager attention;
//   - a pipeline given fewer micro-batches a step than it has stages
//     (global_batch / (micro_batch x dp) < pp) never fills: each stage
//     idles while the others run, (pp - 1)/(m + pp - 1) of a 1F1B step
//     with m micro-batches (Narayanan et al. 2021, section 2.2); the
//     simulated bubble share is quoted;
//   - a plan that does not fit is told which share of the fullest GPU's
//     peak is the most, activations (what recompute, a smaller
//     micro-batch, tensor or context parallelism shrink) or the model's
//     states (what ZeRO, optimizer offload, tensor or pipeline parallelism
//     shrink), and `dtsim search`, which lists the plans that fit. A knob
//     is named with the next value the rules table allows this model on
//     this cluster (PlanRules: ZeRO-2/3 and offload not with pipelines,
//     tensor parallelism within a node, a degree the plan's GPUs divide by
//     at the others, a context split that cuts the sequence evenly), and
//     only where it would change something: not a knob already as far as
//     it goes, not recompute where the model has no blocks to rerun
//     (Layer::is_block: VGG11's convolutions), not ZeRO where gradients
//     are reduced over one rank.
/// Note [A long default sequence]: a default sequence longer than this is advised against.
constexpr std::int64_t kLongDefaultSequence = 8192;

std::string long_default_sequence(const Model& model, std::int64_t given_seq_len) {
  if (given_seq_len != 0 || model.max_seq_len() <= kLongDefaultSequence) return "";
  return fmt::format("plan.seq_len is {}'s whole context, {} tokens, as none was given; set plan.seq_len to your run's "
                     "sequence length (pretraining typically runs 4096 or 8192)",
                     model.name(), model.max_seq_len());
}

std::vector<std::string> advice(const Prediction& p, const Model& model, const ClusterSpec& cluster) {
  std::vector<std::string> out;
  const ResolvedPlan& plan = p.plan;
  if (plan.spec.attention == Attention::kFlash && !plan.flash_attention) {
    out.push_back(fmt::format(
        "plan.attention=flash: in {} PyTorch's SDPA runs this grouped-query model on its math path, which keeps the "
        "probabilities as eager attention does, and it is priced so (FlashAttention takes fp16 and bf16; bf16 runs it)",
        to_string(plan.precision)));
  }
  // Note [A long default sequence]: a plan without seq_len runs the model's
  // whole context, which for today's models (128k tokens and more) is their
  // long-context stage's, not the pretraining most runs are (Llama 3.1
  // 405B trained at 8,192 tokens before its context was extended; Dubey et
  // al. 2024, section 3.4), and at such lengths activations swamp the rest.
  if (plan.spec.seq_len == 0) {
    if (std::string w = long_default_sequence(model, 0); !w.empty()) out.push_back(std::move(w));
  }
  // Note [Experts under tensor parallelism] (models/torch): Megatron-Core
  // refuses to train a mixture of experts under tensor parallelism without
  // sequence parallelism (MoELayer.forward in megatron/core/transformer/
  // moe/moe_layer.py); dtsim prices it, as other frameworks may run it.
  if (model.experts() > 0 && plan.tp > 1 && !plan.sequence_parallel) {
    out.push_back(fmt::format(
        "plan.tp={} with {}'s mixture of experts and no sequence parallelism: Megatron-Core refuses to train it "
        "(MoELayer.forward); set plan.sequence_parallel=true as its MoE recipes do",
        plan.tp, model.name()));
  }
  // Note [Mixture of experts] (models/src/llama.cpp): the allgather
  // dispatcher (Megatron-Core's default, megatron-tp's and megatron-3d's)
  // gathers every token over the etp x ep ranks; with expert parallelism
  // that group spans the dispatch, where the alltoall dispatcher sends only
  // each token's k rows to its experts (Megatron-Core's MoE guide advises
  // alltoall once ep > 1).
  if (model.experts() > 0 && plan.ep > 1 && plan.moe_dispatcher == MoeDispatcher::kAllGather) {
    out.push_back(fmt::format(
        "plan.moe_dispatcher=allgather at ep {}: every rank gathers the tokens of all {} etp x ep ranks and reduce-scatters "
        "its experts' parts of them (Megatron-Core's default dispatcher); its MoE recipes dispatch by all-to-all: "
        "plan.moe_dispatcher=alltoall (--moe-token-dispatcher-type alltoall)",
        plan.ep, plan.ep * plan.etp));
  }
  if (plan.pp > 1 && plan.grad_accum < plan.pp && plan.schedule != Schedule::kNaive && p.iteration_time > 0) {
    const double idle = 100.0 * static_cast<double>(p.breakdown.bubble) / static_cast<double>(p.iteration_time);
    out.push_back(fmt::format(
        "plan.pp={} runs {} micro-batch{} a step (global_batch {} / (micro_batch {} x dp {})): the pipeline never "
        "fills and its busiest stage idles {:.0f}% of the step; give it at least {}: plan.grad_accum={} (a global "
        "batch of {}){}",
        plan.pp, plan.grad_accum, plan.grad_accum == 1 ? "" : "es", plan.global_batch, plan.micro_batch, plan.dp, idle,
        plan.pp, plan.pp, plan.pp * plan.micro_batch * plan.dp, plan.micro_batch > 1 ? ", or a smaller plan.micro_batch" : ""));
  }
  // Note [Fine-grained offload]: modules the model has not, skipped as
  // Megatron-Core's layers skip them.
  if (const std::uint16_t missing = plan.spec.fine_grained_activation_offloading
                                        ? static_cast<std::uint16_t>(plan.spec.offload_modules & ~plan.offload_modules)
                                        : std::uint16_t{0};
      missing != 0 && plan.offload_modules != 0) {
    out.push_back(fmt::format("plan.offload_modules: {}: {} has no such module, nothing of it is offloaded (as Megatron-Core skips "
                              "it){}{}",
                              offload_modules_string(missing), model.name(),
                              (missing & (kOffloadExpertFc1 | kOffloadMoeAct | kOffloadFusedGroupMlp)) != 0
                                  ? "; the expert modules need a mixture-of-experts model"
                                  : "",
                              (missing & (kOffloadAttnNorm | kOffloadMlpNorm)) != 0
                                  ? "; a norm is its own module only where Transformer Engine does not fuse it into the next linear "
                                    "(multi-latent attention's, a MoE layer's)"
                                  : ""));
  } else if (missing != 0) {
    out.push_back(fmt::format("plan.offload_modules: {}: {} has none of them, nothing is offloaded (as Megatron-Core skips them)",
                              offload_modules_string(missing), model.name()));
  }
  if (p.fits || p.ranks.empty()) return out;
  const RankMemory& full = *std::max_element(p.ranks.begin(), p.ranks.end(),
                                             [](const RankMemory& a, const RankMemory& b) { return a.peak < b.peak; });
  const Bytes states = full.parameters + full.gradients + full.optimizer;
  const int gpus = plan.gpus_used();
  const PlanRules rules(model, cluster, gpus);
  // The next degree above `now` the rules allow with the other axes as they are.
  auto next = [&](const std::vector<int>& allowed, int now, int others) {
    for (int v : allowed) {
      if (v > now && gpus % (v * others) == 0) return v;
    }
    return 0;
  };
  std::vector<std::string> knobs;
  std::string what;
  if (full.activations >= states) {
    what = fmt::format("activations are {} of its {} peak", detail::gib(full.activations), detail::gib(full.peak));
    const LayerList layers = model.shared_layers(WorkloadShape{});
    const bool blocks = std::any_of(layers.begin(), layers.end(), [](const Layer& l) { return l.is_block(); });
    if (blocks && plan.recompute != Recompute::kFull) knobs.push_back("plan.recompute=full");
    if (blocks && plan.recompute_blocks > 0) knobs.push_back(fmt::format("plan.recompute_num_layers above {}", plan.recompute_blocks));
    if (plan.micro_batch > 1) knobs.push_back("a smaller plan.micro_batch");
    if (const int tp = next(rules.tp_values(), plan.tp, plan.pp * plan.cp)) knobs.push_back(fmt::format("plan.tp={}", tp));
    if (const int cp = next(rules.cp_values(plan.tp, plan.seq_len), plan.cp, plan.tp * plan.pp)) {
      knobs.push_back(fmt::format("plan.cp={}", cp));
    }
  } else {
    what = fmt::format("parameters, gradients and optimizer states are {} of its {} peak", detail::gib(states),
                       detail::gib(full.peak));
    const auto zs = rules.zero_stages(plan.pp);
    const int zero = zs.empty() ? 0 : *std::max_element(zs.begin(), zs.end());
    if (plan.grad_group() > 1 && zero > plan.zero_stage) {
      knobs.push_back(fmt::format("plan.zero_stage={}{}", zero, zero == 3 ? " (or --plan fsdp)" : ""));
    }
    const auto offloads = rules.optimizer_offloads(std::max(plan.zero_stage, zero), plan.pp);
    if (plan.offload_optimizer == Offload::kNone && plan.grad_group() > 1 &&
        std::find(offloads.begin(), offloads.end(), Offload::kCpu) != offloads.end()) {
      knobs.push_back("plan.offload_optimizer=cpu");
    }
    if (const int tp = next(rules.tp_values(), plan.tp, plan.pp * plan.cp)) knobs.push_back(fmt::format("plan.tp={}", tp));
    if (const int pp = next(rules.pp_values(plan.tp), plan.pp, plan.tp * plan.cp)) knobs.push_back(fmt::format("plan.pp={}", pp));
  }
  if (knobs.empty()) knobs.push_back("a device with more memory");
  std::string list;
  for (std::size_t i = 0; i < knobs.size(); ++i) list += (i == 0 ? "" : i + 1 == knobs.size() ? " or " : ", ") + knobs[i];
  out.push_back(fmt::format("does not fit: on rank {} (stage {}) {}; try {}; `dtsim search` lists the plans that fit",
                            full.rank, full.stage, what, list));
  return out;
}

namespace {

Prediction predict_plan(const Model& model, const PlanSpec& spec, const ClusterSpec& cluster, const PredictOptions& options);

}  // namespace

Prediction predict(const Model& model, const PlanSpec& spec, const ClusterSpec& cluster, const PredictOptions& options) {
  try {
    return predict_plan(model, spec, cluster, options);
  } catch (const ConfigError& e) {
    // Note [A long default sequence]: a shape too large to price, from a
    // length nobody gave, says where the length came from.
    const std::string what = e.what();
    if (spec.seq_len != 0 || model.max_seq_len() <= kLongDefaultSequence || what.rfind("plan.micro_batch x plan.seq_len", 0) != 0) {
      throw;
    }
    throw ConfigError(what + " (plan.seq_len was not given: it is " + model.name() + "'s whole context, " +
                      std::to_string(model.max_seq_len()) + " tokens)");
  }
}

namespace {

Prediction predict_plan(const Model& model, const PlanSpec& spec, const ClusterSpec& cluster, const PredictOptions& options) {
  Prediction p;
  p.plan = resolve(spec, model, cluster);
  p.model_name = model.name();
  p.model_parameters = model.parameters();
  p.trainable_parameters = model.trainable_parameters();
  p.model_layers = model.blocks();
  p.model_sequence = model.max_seq_len() > 1;
  if (options.advise) {
    // For the plan line people read (0.25 ms of layers for DeepSeek-V3,
    // which the search's predictions, advising nobody, do without).
    p.model_attention = attends(model);
  }
  p.cluster_name = cluster.name;
  p.gpus = cluster.gpus();
  p.device_name = cluster.device.name;

  const Pricing pricing(cluster, options, &p.sources, model, p.plan.runtime, p.plan.fp8_recipe, &p.warnings);
  p.outside_allocator = pricing.outside_allocator();
  // A pipeline's layers are priced once, for the partition and the lowering.
  PricedLayers priced;
  if (p.plan.pp > 1) priced = price_layers(model, p.plan, pricing.cluster(), pricing.compute(), pricing.comm());
  partition(p.plan, model, priced);
  if (p.plan.pp > 1 && p.plan.recompute_blocks > 0) {
    // Note [Block recompute]: which blocks rerun depends on the split.
    priced = price_layers(model, p.plan, pricing.cluster(), pricing.compute(), pricing.comm());
  }
  const CostModels costs{&pricing.compute(), &pricing.comm(), options.keep_graph && options.trace_detail,
                         p.plan.pp > 1 ? &priced : nullptr};
  if (p.plan.runtime == Runtime::kPython && p.plan.pp > 1 && options.profile && options.profile->gpu() &&
      options.profile->python_host()) {
    // Note [Python host cost]: on a GPU it joins the host's issue, which a
    // pipeline's stages do not model (Note [Host launch]).
    p.warnings.push_back("plan.runtime python: a GPU pipeline's host issue is not modelled, so its Python host cost is "
                         "left out (it is priced without a pipeline, or on a CPU)");
  }
  if (options.advise) {
    // What the model's reader left out, for the person reading (the search
    // says it once for all its plans).
    for (std::string& n : model.notes()) p.warnings.push_back(std::move(n));
  }
  if (options.profile) {
    p.cost_source = "profile:" + options.profile->profile().path;
    if (auto w = profile_device_mismatch(options.profile->profile(), cluster.device); !w.empty()) p.warnings.push_back(w);
    if (auto w = profile_sweep_warning(options.profile->profile()); !w.empty()) p.warnings.push_back(w);
    if (auto w = profile_speed_warning(options.profile->profile()); !w.empty()) p.warnings.push_back(w);
  }
  // A long pipeline's steady state once (Note [Steady state]), else every
  // task; a timeline spliced from it (Note [Steady state timelines]).
  std::optional<detail::SteadyState> steady;
  if (!options.unabridged) steady = detail::simulate_steady(model, p.plan, pricing.cluster(), costs, options.keep_graph);
  TaskGraph graph;
  ExecResult exec;
  if (steady && options.keep_graph) {
    check_graph_size(p.plan);  // Note [Graph size]: a timeline holds every task, as lower()'s graph would
    if (auto spliced = detail::splice_timeline(*steady, options.trace_detail)) {
      graph = std::move(spliced->graph);
      exec = std::move(spliced->exec);
    } else {
      steady.reset();
    }
  }
  if (!steady) {
    graph = lower(model, p.plan, pricing.cluster(), costs);
    ExecOptions eo;
    eo.record_memory_timeline = options.keep_graph && options.trace_detail;
    exec = execute(graph, eo);
  }
  const TimeNs makespan = steady ? steady->makespan : exec.makespan;

  p.iteration_time = makespan;
  const double t = std::max(1e-12, ns_to_seconds(makespan));
  p.samples_per_s = static_cast<double>(p.plan.global_batch) / t;
  p.tokens_per_s = p.samples_per_s * static_cast<double>(p.plan.seq_len);

  // Model FLOPs per GPU per iteration: a replica (tp x pp x cp GPUs) runs
  // grad_accum micro-batches through the whole model. They count attention
  // whole, as eager attention computes it (the causal half a fused kernel
  // skips still counts: Korthikanti et al. 2022, Eq. 7, and the MFU of
  // Megatron-LM, torchtitan and llm-foundry count it so), but no key beyond
  // a local layer's window or chunk (Note [Model FLOPs of local attention]
  // in models/src/layers.cpp).
  WorkloadShape shape;
  shape.model_flops = true;
  shape.micro_batch = p.plan.micro_batch;
  shape.seq_len = p.plan.seq_len;
  shape.document_len = p.plan.document_len;
  shape.act_bytes = element_bytes(p.plan.precision);
  shape.fp8 = quantized_gemms(p.plan.precision);
  shape.fp4 = p.plan.precision == Precision::kFp4;
  const double micro_steps = static_cast<double>(p.plan.grad_accum) / (p.plan.tp * p.plan.pp * p.plan.cp);
  const Flops model_flops = model.model_flops(shape) * micro_steps;
  Flops hw_flops = model_flops;
  const bool dense_experts = p.plan.moe_experts == MoeExperts::kDense;
  if (dense_experts) {
    // Note [Dense experts]: the unchosen experts' work is the hardware's,
    // not the model's: what the dense layers compute beyond routed ones.
    WorkloadShape ds = shape, gs = shape;
    ds.flash_attention = gs.flash_attention = p.plan.flash_attention;
    ds.moe_dense = true;
    const LayerList dense = model.shared_layers(ds), grouped = model.shared_layers(gs);
    for (std::size_t i = 0; i < dense.size() && i < grouped.size(); ++i) {
      hw_flops += (dense[i].forward_flops() + dense[i].backward_flops() - grouped[i].forward_flops() - grouped[i].backward_flops()) *
                  micro_steps;
    }
  }
  if (p.plan.recompute != Recompute::kNone) {
    // Op-level recompute is described with the attention as it runs (Note
    // [Op-level recompute]; resolve allows it at tp 1 and cp 1 only).
    WorkloadShape rs = shape;
    rs.flash_attention = p.plan.flash_attention;
    rs.moe_dense = dense_experts;
    // Megatron's recompute modules rerun their parts (Note [Recompute modules]).
    rs.recompute_modules = effective_recompute_modules(p.plan.recompute == Recompute::kSelective, p.plan.recompute_modules);
    const LayerList layers = model.shared_layers(rs);
    const std::vector<Recompute> recomputes = layer_recomputes(p.plan, layers);
    for (std::size_t i = 0; i < layers.size(); ++i) {
      const Layer& l = layers[i];
      if (recomputes[i] == Recompute::kFull && l.is_block()) {
        hw_flops += l.forward_flops() * micro_steps;
      } else {
        for (const auto& k : detail::partially_recomputed_kernels(l, recomputes[i])) {
          hw_flops += k.flops * static_cast<double>(k.repeat) * micro_steps;
        }
      }
    }
  }
  const double peak = cluster.device.peak_for(p.plan.precision);
  p.tflops_per_gpu = model_flops / t / kTera;
  p.mfu = model_flops / t / peak;
  p.hfu = hw_flops / t / peak;

  if (steady) {
    p.breakdown = steady->breakdown;
  } else if (p.plan.pp > 1) {
    p.breakdown = stage_breakdown(graph, exec);
  } else {
    const auto& cp = exec.critical_path;
    auto at = [&](Phase ph) { return cp[static_cast<int>(ph)]; };
    p.breakdown.compute = at(Phase::kForward) + at(Phase::kBackward) + at(Phase::kRecompute);
    p.breakdown.exposed_comm = at(Phase::kComm);
    p.breakdown.bubble = at(Phase::kBubble);
    p.breakdown.optimizer = at(Phase::kOptimizer);
    p.breakdown.offload = at(Phase::kOffload);
    p.breakdown.other = at(Phase::kOther);
  }

  p.capacity = cluster.device.memory;
  const std::vector<SimRank>& ranks = steady ? steady->rank_info : graph.ranks;
  for (std::size_t r = 0; r < ranks.size(); ++r) {
    const auto& snap = steady ? steady->peaks[r] : exec.memory[r].at_peak;
    RankMemory rm;
    rm.rank = ranks[r].rank;
    rm.stage = ranks[r].stage;
    rm.replicas = ranks[r].replicas;
    rm.peak = snap.total();
    rm.parameters = snap.bytes[static_cast<int>(MemCategory::kParameters)];
    rm.gradients = snap.bytes[static_cast<int>(MemCategory::kGradients)];
    rm.optimizer = snap.bytes[static_cast<int>(MemCategory::kOptimizer)];
    rm.activations = snap.bytes[static_cast<int>(MemCategory::kActivations)];
    rm.buffers = snap.bytes[static_cast<int>(MemCategory::kBuffers)];
    if (rm.peak > p.capacity) {
      p.fits = false;
      p.shortfall = std::max(p.shortfall, rm.peak - p.capacity);
    }
    p.ranks.push_back(rm);
  }
  p.events = steady ? steady->events : exec.events;
  p.tasks = steady ? steady->tasks : graph.tasks.size();
  if (steady) p.abridged_to = steady->simulated_micro_batches;
  if (options.advise) {
    for (auto& w : advice(p, model, cluster)) p.warnings.push_back(std::move(w));
  }
  if (options.keep_graph) {
    p.graph = std::move(graph);
    p.exec = std::move(exec);
  }
  return p;
}

}  // namespace

}  // namespace dtsim::sim
