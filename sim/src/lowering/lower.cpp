// lower(): one walk over every stage's schedule builds every rank's task graph.
//
// Note [One walk]
// A data-parallel plan is a pipeline of one stage: lower() asks
// pipeline_order() for each stage's steps (for one stage, 1F1B's order: the
// forward and backward of each micro-batch in turn) and hands each step to
// the stage emitter. A single stage is emitted layer by layer (ZeRO-3's
// gathers, per-layer reductions and offload copies hang on layers; cost
// grows with layers x micro-batches); pipeline stages chunk by chunk, one
// task per chunk and pass (cost grows with stages x micro-batches x chunks,
// never with layers or GPUs). Both make every task through one TaskBuilder,
// give their ranks resident memory through add_resident(), take their
// groups from the plan's mesh, their stage split from the partition step
// and their buckets from buckets.hpp.
//
// Note [Zero bubble]
// ZB-H1 (Qi et al. 2023, "Zero Bubble Pipeline Parallelism", section 3.1 and
// Figure 3) splits each backward into B, the gradient of the chunk's input,
// which the previous stage waits for, and W, the gradients of its weights,
// which nobody waits for. Stage s of pp runs 1F1B's pp - s - 1 warm-up
// forwards, then s forward + B pairs whose W it defers, then forward, B and
// the oldest deferred W in turn, then the cool-down's B and W in turn, and
// last the s deferred W passes, in the bubble 1F1B leaves at the end of the
// later stages (the ZeroBubbleH1Pipeline of sail-sg/zero-bubble-pipeline-
// parallelism, with its exact semantics). Stage 0 runs 1F1B, each B
// followed by its W. The micro-batches in flight are 1F1B's, so the peak
// activations are too, plus what a deferred W still needs: the inputs of
// the chunk's weight GEMMs and the gradients of their outputs (WeightGradStore
// keeps the pair for each). The paper gives the bubble as
// (pp - 1)(T_F + T_B - T_W) against 1F1B's (pp - 1)(T_F + T_B + T_W) where
// communication is free and T_W <= T_F; tests/sim/test_zero_bubble.cpp
// checks both. The partition prices B and W apart (PricedLayers::weight,
// the layers' weight-gradient GEMMs and embedding scatters priced by the
// plan's compute model over its whole backward).
//
// Note [Graph size]
// A graph holds every task of the iteration, about 260 bytes each with
// its span and the executor's state: GPT-1T on 3,072 GPUs is 458k tasks.
// A plan of absurdly many micro-batches (global_batch may be up to 2^40)
// simulated in full (a GPipe schedule, --unabridged, or a plan no steady
// state shortens) would allocate past any machine's memory, and an
// allocation that big fails as std::bad_alloc or the kernel's OOM killer,
// neither of them a message. So lower() refuses, before allocating, a
// graph of more than kMaxGraphTasks tasks (2^25: about 9 GB, 73 times
// GPT-1T's), counting the fewest it could have: a forward and a backward
// of every stage chunk, or without a pipeline of every layer, for every
// micro-batch (check_graph_size). A long 1F1B or interleaved pipeline's
// prediction simulates a few dozen micro-batches (Note [Steady state]) and
// is not refused; its trace would hold them all (Note [Steady state
// timelines]), so predict() asks the same check before splicing it.
#include <algorithm>
#include <memory>

#include <fmt/format.h>

#include "dtsim/sim/error.hpp"
#include "dtsim/sim/lowering.hpp"
#include "lowering/emitter.hpp"
#include "lowering/lowering_common.hpp"

namespace dtsim::sim {

std::vector<PipeStep> pipeline_order(Schedule schedule, int pp, int v, int stage, int m, bool ep_overlap) {
  std::vector<PipeStep> out;
  out.reserve(static_cast<std::size_t>(3 * m * std::max(1, v)));
  switch (schedule) {
    case Schedule::kGpipe:
      for (int i = 0; i < m; ++i) out.push_back({true, 0, i});
      for (int i = m; i-- > 0;) out.push_back({false, 0, i});
      break;
    case Schedule::kNaive:
      for (int i = 0; i < m; ++i) {
        out.push_back({true, 0, i});
        out.push_back({false, 0, i});
      }
      break;
    case Schedule::k1f1b: {
      const int warmup = std::min(pp - stage - 1, m);
      for (int i = 0; i < warmup; ++i) out.push_back({true, 0, i});
      for (int i = 0; i < m - warmup; ++i) {
        out.push_back({true, 0, warmup + i});
        out.push_back({false, 0, i});
      }
      for (int i = m - warmup; i < m; ++i) out.push_back({false, 0, i});
      break;
    }
    case Schedule::kZbH1: {
      const int warmup = std::min(pp - stage - 1, m);
      int f = 0, b = 0, w = 0;
      for (; f < warmup; ++f) out.push_back({true, 0, f});
      // The first stage runs each W right after its B; stage s keeps s back.
      for (int k = 0; k < stage && f < m; ++k, ++f, ++b) {
        out.push_back({true, 0, f});
        out.push_back({false, 0, b});
      }
      while (f < m) {
        out.push_back({true, 0, f++});
        out.push_back({false, 0, b++});
        out.push_back({false, 0, w++, true});
      }
      while (b < m) {
        out.push_back({false, 0, b++});
        out.push_back({false, 0, w++, true});
      }
      while (w < m) out.push_back({false, 0, w++, true});
      break;
    }
    case Schedule::kInterleaved: {
      // Megatron-LM get_model_chunk_id: steps go through pp micro-batches of
      // chunk 0, then of chunk 1, ...; backward visits chunks in reverse.
      const int total = m * v;
      auto chunk_of = [&](int k, bool fwd) {
        const int c = (k % (pp * v)) / pp;
        return fwd ? c : v - 1 - c;
      };
      auto micro_of = [&](int k) { return (k / (pp * v)) * pp + k % pp; };
      const int warmup = m == pp ? total : std::min((pp - stage - 1) * 2 + (v - 1) * pp + (ep_overlap ? 1 : 0), total);
      for (int k = 0; k < warmup; ++k) out.push_back({true, chunk_of(k, true), micro_of(k)});
      for (int j = 0; j < total - warmup; ++j) {
        out.push_back({true, chunk_of(warmup + j, true), micro_of(warmup + j)});
        out.push_back({false, chunk_of(j, false), micro_of(j)});
      }
      for (int k = total - warmup; k < total; ++k) out.push_back({false, chunk_of(k, false), micro_of(k)});
      break;
    }
  }
  return out;
}

double hbm_slowdown(const DeviceSpec& device, BytesPerSec link_rate) {
  // Note [Interference] (engine/executor.cpp); set_interference in lowering_common.hpp.
  const double hbm = device.memory_bandwidth * device.memory_efficiency;
  if (device.comm_slowdown <= 0 || hbm <= 0 || link_rate <= 0) return 0;
  const double h = std::min(kMaxHbmShare, device.comm_hbm_traffic * link_rate / hbm);
  return h / (1 - h);  // comm_hbm_contention: applied by the executor, after the classes' shares add
}

void check_graph_size(const ResolvedPlan& plan) {
  // The fewest tasks, in doubles (no overflow): a pass a stage chunk, or
  // without a pipeline a layer (plan.stage_layers: one entry a chunk).
  DTSIM_ASSERT(!plan.stage_layers.empty(), "sizing a plan that was not partitioned");
  const double passes = plan.pp > 1 ? static_cast<double>(plan.stage_layers.size())
                                    : static_cast<double>(std::max(1, plan.stage_layers.front()));
  const double fewest = 2 * passes * static_cast<double>(plan.grad_accum);
  if (fewest <= static_cast<double>(kMaxGraphTasks)) return;
  throw UnsupportedError(fmt::format(
      "plan: {} micro-batches a step (grad_accum) would be at least {:.0f} tasks to simulate one by one, more than "
      "dtsim holds ({}, about 9 GB); use fewer (plan.global_batch, plan.micro_batches){}",
      plan.grad_accum, fewest, kMaxGraphTasks,
      plan.pp > 1 && (plan.schedule == Schedule::k1f1b || plan.schedule == Schedule::kInterleaved ||
                      plan.schedule == Schedule::kZbH1)
          ? ", or predict without --trace and --unabridged (the steady state is simulated once)"
          : ""));
}

TaskGraph lower(const Model& model, const ResolvedPlan& plan, const ClusterSpec& cluster, const CostModels& costs) {
  DTSIM_ASSERT(costs.compute != nullptr && costs.comm != nullptr, "cost models missing");
  DTSIM_ASSERT(!plan.stage_layers.empty(), "lowering a plan that was not partitioned");
  check_graph_size(plan);
  const detail::LoweringInputs in{model, plan, cluster, *costs.compute, *costs.comm, costs.name_tasks, costs.priced};
  const std::unique_ptr<detail::StageEmitter> emit = plan.pp > 1 ? detail::chunk_emitter(in) : detail::layer_emitter(in);
  // One stage runs its micro-batches' forward and backward in turn, whatever
  // schedule the plan names (it has no pipeline to schedule).
  const Schedule schedule = plan.pp > 1 ? plan.schedule : Schedule::k1f1b;
  const int m = static_cast<int>(plan.grad_accum);
  for (int s = 0; s < plan.pp; ++s) {
    const std::vector<PipeStep> order =
        pipeline_order(schedule, plan.pp, plan.virtual_stages, s, m, plan.overlap_moe_expert_parallel_comm && plan.ep > 1);
    emit->begin_stage(s, order);
    for (std::size_t j = 0; j < order.size(); ++j) emit->step(s, j, order[j]);
    emit->end_stage(s);
    // Note [Compact tasks]: the other stages make about as many tasks and
    // memory operations as the first.
    if (s == 0 && plan.pp > 1) {
      TaskGraph& g = emit->graph();
      const auto stages = static_cast<std::size_t>(plan.pp);
      g.tasks.reserve(g.tasks.size() * stages * 9 / 8 + 64);
      g.mem_ops.reserve(g.mem_ops.size() * stages * 9 / 8 + 64);
    }
  }
  return emit->finish();
}

}  // namespace dtsim::sim
