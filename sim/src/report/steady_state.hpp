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

  /// Where simulate_steady was asked to keep it (Note [Steady state
  /// timelines]): the abridged run, and its window [tau, tau + period),
  /// which advances c micro-batches and the full run repeats q more times.
  TaskGraph graph;
  ExecResult exec;
  TimeNs tau = 0, period = 0;
  std::int64_t c = 0, q = 0;
};

/// The abridged prediction of a partitioned pipelined plan (pp > 1, 1F1B or
/// interleaved), or nothing where its micro-batches are too few to gain or
/// no period is found: then the full simulation runs.
/// With `keep_run`, the abridged run is kept for splice_timeline.
std::optional<SteadyState> simulate_steady(const Model& model, const ResolvedPlan& plan, const ClusterSpec& cluster,
                                           const CostModels& costs, bool keep_run = false);

/// The full run as the full lowering and simulation would make it.
struct SplicedRun {
  TaskGraph graph;
  ExecResult exec;
};

/// The full run from the abridged one (Note [Steady state timelines]):
/// every task of every micro-batch, with its name, dependencies and memory
/// operations, in each stream's order (not lower()'s task ids), started,
/// ended and slowed as the abridged run's task it repeats, whole periods
/// later; each rank's memory peak, and its memory over time where
/// `memory_timeline`, the same way; the makespan and the events as `s`
/// counts them. The critical path is not walked (all zero: a pipeline's
/// time is split by its breakdown). Nothing where the abridged run does not
/// repeat that simply: then the full simulation runs. `s` must have been
/// made with keep_run.
std::optional<SplicedRun> splice_timeline(const SteadyState& s, bool memory_timeline);

}  // namespace dtsim::sim::detail
