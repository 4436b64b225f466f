#pragma once
// Runs a TaskGraph on the event queue and measures it: when each task ran, the
// memory peak of each rank (found by simulating allocations and frees), and
// the critical path that sets the iteration time, split by phase.

#include <array>
#include <cstdint>
#include <string>
#include <vector>

#include "dtsim/sim/task_graph.hpp"

namespace dtsim::sim {

/// When a task ran.
struct Span {
  TaskId task = 0;
  TimeNs start = 0;
  TimeNs end = 0;
  /// Of a compute task's time, what its rank's collectives cost it by
  /// slowing it (Note [Interference] in executor.cpp); of a receiver's
  /// notice to a Gloo pipeline sender, how long it waited for the sender's
  /// core (Note [Busy sender] there); 0 otherwise.
  TimeNs slowed = 0;
};

/// A rank's memory at one instant, by category.
struct MemSnapshot {
  TimeNs time = 0;
  std::array<Bytes, kMemCategories> bytes{};
  Bytes total() const;
};

/// The peak of one rank, with its breakdown at the peak.
struct RankMemoryPeak {
  MemSnapshot at_peak;
  std::vector<MemSnapshot> timeline;  ///< every change, when recorded
};

/// What the executor measured.
struct ExecResult {
  TimeNs makespan = 0;                       ///< end of the last task
  std::vector<Span> spans;                   ///< one per task, by TaskId
  std::vector<RankMemoryPeak> memory;        ///< per simulated rank
  /// By Phase; sums to makespan (all zero where a pipeline's spans were
  /// spliced from its steady state: Prediction::exec).
  std::array<TimeNs, 8> critical_path{};
  std::uint64_t events = 0;                  ///< events processed
  std::vector<TimeNs> event_times;           ///< when each ran, when recorded
};

/// Executor options.
struct ExecOptions {
  bool record_memory_timeline = false;       ///< for trace counter tracks
  bool record_event_times = false;           ///< for the steady-state abridgement
};

/// Where two runs of one iteration part (runs_differ): tasks matched by
/// where each runs, (rank, stream, place on the stream), since two graphs of
/// one iteration may number their tasks apart.
struct RunsDiffer {
  std::size_t tasks = 0;  ///< tasks whose name, kind, phase, micro-batch, duration, bytes, memory
                          ///< operations, dependencies, collective partners, start, end or slowdown differ
  bool shape = false;     ///< the runs' ranks, streams or task counts differ
  bool memory = false;    ///< a rank's peak or its memory over time differs
  bool any() const { return tasks > 0 || shape || memory; }
};

/// Compares two runs of one iteration task for task (Note [Steady state
/// timelines]: a spliced timeline against the full simulation's).
RunsDiffer runs_differ(const TaskGraph& a, const ExecResult& ax, const TaskGraph& b, const ExecResult& bx);

/// Runs the graph. Throws InternalError on a cycle or a deadlock (a task that
/// can never start), naming the task.
ExecResult execute(const TaskGraph& graph, const ExecOptions& options = {});

}  // namespace dtsim::sim
