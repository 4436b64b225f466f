#pragma once
// What predict() and the steady-state abridgement share (private to sim/):
// the pipeline breakdown's sweep over a window of time, and the abridged
// simulation of a long pipeline (Note [Steady state] in steady_state.cpp).

#include <array>
#include <cstdint>
#include <optional>
#include <vector>

#include "dtsim/sim/executor.hpp"
#include "dtsim/sim/lowering.hpp"
#include "dtsim/sim/predict.hpp"
#include "dtsim/sim/task_graph.hpp"

namespace dtsim::sim::detail {

/// A pipeline stage's time by what it did, in Note [Pipeline breakdown]'s
/// order of priority: compute, optimizer, communication, offload, idle.
using StageClasses = std::array<TimeNs, 5>;

/// Each rank's compute (forward, backward, recompute kernels) within [t0, t1).
std::vector<TimeNs> stage_busy(const TaskGraph& g, const std::vector<Span>& spans, TimeNs t0, TimeNs t1);
/// Rank `rank`'s time within [t0, t1) by class (Note [Pipeline breakdown]).
StageClasses stage_classes(const TaskGraph& g, const std::vector<Span>& spans, int rank, TimeNs t0, TimeNs t1);
/// The breakdown of those classes, the idle time being the bubble.
TimeBreakdown to_breakdown(const StageClasses& c);

/// A long pipeline's iteration as its full simulation would find it,
/// simulated with few micro-batches and its steady state's period repeated.
struct SteadyState {
  std::int64_t simulated_micro_batches = 0;  ///< micro-batches the abridged run simulated
  TimeNs makespan = 0;
  TimeBreakdown breakdown;                   ///< of the busiest stage (Note [Pipeline breakdown])
  std::vector<MemSnapshot> peaks;            ///< each simulated rank's, at its peak
  std::uint64_t events = 0;
  std::size_t tasks = 0;
  std::vector<SimRank> rank_info;            ///< the simulated ranks, as the full graph has them
};

/// The abridged prediction of a partitioned pipelined plan (pp > 1, 1F1B or
/// interleaved), or nothing where its micro-batches are too few to gain or
/// no period is found: then the full simulation runs.
std::optional<SteadyState> simulate_steady(const Model& model, const ResolvedPlan& plan, const ClusterSpec& cluster,
                                           const CostModels& costs);

}  // namespace dtsim::sim::detail
