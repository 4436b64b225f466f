#include "dtsim/sim/predict.hpp"

#include <algorithm>

#include "dtsim/sim/cost.hpp"
#include "dtsim/sim/error.hpp"
#include "dtsim/sim/lowering.hpp"

namespace dtsim::sim {

Prediction predict(const Model& model, const PlanSpec& spec, const ClusterSpec& cluster, const PredictOptions& options) {
  Prediction p;
  p.plan = resolve(spec, model, cluster);
  p.model_name = model.name();
  p.model_parameters = model.parameters();
  p.model_layers = model.blocks();
  p.cluster_name = cluster.name;
  p.gpus = cluster.gpus();
  p.device_name = cluster.device.name;

  TaskGraph graph;
  if (options.profile) {
    // A measured runtime overhead (CUDA context, cuBLAS workspace) replaces the datasheet's.
    ClusterSpec measured = cluster;
    const auto& mem = options.profile->profile().memory;
    if (const auto it = mem.find("cuda_context_bytes"); it != mem.end()) {
      measured.device.runtime_reserved = it->second;
      if (const auto ws = mem.find("cublas_workspace_bytes"); ws != mem.end()) measured.device.runtime_reserved += ws->second;
    }
    const ProfileComputeModel compute(options.profile, measured.device, &p.sources);
    const ProfileCommModel comm(options.profile, measured, &p.sources);
    graph = lower(model, p.plan, measured, CostModels{&compute, &comm});
    p.cost_source = "profile:" + options.profile->profile().path;
    if (auto w = profile_device_mismatch(options.profile->profile(), cluster.device); !w.empty()) p.warnings.push_back(w);
  } else {
    const RooflineComputeModel compute(cluster.device);
    const AnalyticCommModel comm(cluster);
    graph = lower(model, p.plan, cluster, CostModels{&compute, &comm});
  }
  ExecOptions eo;
  eo.record_memory_timeline = options.keep_graph;
  ExecResult exec = execute(graph, eo);

  p.iteration_time = exec.makespan;
  const double t = std::max(1e-12, ns_to_seconds(exec.makespan));
  p.samples_per_s = static_cast<double>(p.plan.global_batch) / t;
  p.tokens_per_s = p.samples_per_s * static_cast<double>(p.plan.seq_len);

  // Model FLOPs per GPU per iteration: one replica runs grad_accum micro-batches.
  WorkloadShape shape;
  shape.micro_batch = p.plan.micro_batch;
  shape.seq_len = p.plan.seq_len;
  shape.act_bytes = element_bytes(p.plan.precision);
  shape.tp = p.plan.tp;
  const double micro_steps = static_cast<double>(p.plan.grad_accum);
  const Flops model_flops = model.model_flops(shape) * micro_steps;
  Flops hw_flops = model_flops;
  if (p.plan.recompute == Recompute::kFull) {
    for (const auto& l : model.layers(shape)) {
      if (l.type == "transformer" || l.type == "lstm") hw_flops += l.forward_flops() * micro_steps;
    }
  }
  const double peak = cluster.device.peak_for(p.plan.precision);
  p.tflops_per_gpu = model_flops / t / kTera;
  p.mfu = model_flops / t / peak;
  p.hfu = hw_flops / t / peak;

  const auto& cp = exec.critical_path;
  auto at = [&](Phase ph) { return cp[static_cast<int>(ph)]; };
  p.breakdown.compute = at(Phase::kForward) + at(Phase::kBackward) + at(Phase::kRecompute);
  p.breakdown.exposed_comm = at(Phase::kComm);
  p.breakdown.bubble = at(Phase::kBubble);
  p.breakdown.optimizer = at(Phase::kOptimizer);
  p.breakdown.offload = at(Phase::kOffload);
  p.breakdown.other = at(Phase::kOther);

  p.capacity = cluster.device.memory;
  for (std::size_t r = 0; r < graph.ranks.size(); ++r) {
    const auto& snap = exec.memory[r].at_peak;
    RankMemory rm;
    rm.rank = graph.ranks[r].rank;
    rm.stage = graph.ranks[r].stage;
    rm.replicas = graph.ranks[r].replicas;
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
  p.events = exec.events;
  p.tasks = graph.tasks.size();
  if (options.keep_graph) {
    p.graph = std::move(graph);
    p.exec = std::move(exec);
  }
  return p;
}

}  // namespace dtsim::sim
