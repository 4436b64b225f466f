#pragma once
// Per-rank task graphs: what lowering produces and the executor runs. Each
// simulated rank has streams (in-order queues, like CUDA streams); a task runs
// on one stream once every dependency has finished and the tasks before it on
// its stream are done. Collectives with the same `collective` key start
// together once every participant has reached them. Memory is allocated and
// freed by tasks as they start and end.

#include <array>
#include <cstdint>
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "dtsim/sim/cost.hpp"
#include "dtsim/sim/small_vector.hpp"
#include "dtsim/sim/units.hpp"

namespace dtsim::sim {

using TaskId = std::int32_t;

// Note [Inline dependencies]
// Almost every task waits on one to four others, and a pipeline makes
// hundreds of thousands of tasks: their lists of dependencies are kept
// inline up to four, so making one is not a heap allocation (a quarter of a
// pipeline prediction's instructions were malloc and free).
using TaskDeps = SmallVector<TaskId, 4>;

/// What a task does.
enum class TaskKind {
  kCompute,     ///< kernels on a device stream: fixed duration
  kCollective,  ///< latency, then a flow over a link shared with other flows
  kHostCompute, ///< work on the host CPU (offloaded optimizer): fixed duration
};

/// What the time of a task counts as in the iteration's breakdown.
enum class Phase { kForward, kBackward, kRecompute, kOptimizer, kComm, kOffload, kBubble, kOther };
/// "forward", "backward", ...
const char* to_string(Phase p);

/// The streams a rank's tasks run on, in order: lowering names a rank's
/// streams from this one list and front ends (the GUI's lanes) read them
/// back through it.
enum class Stream { kCompute, kGradComm, kParamComm, kD2H, kH2D, kHost, kSendFwd, kSendBwd, kOffload, kEpComm };
/// "compute", "grad comm", "param comm", "d2h", "h2d", "host", "send fwd", "send bwd", "offload",
/// "ep comm" (Transformer Engine's side stream for activations: Note [Activation offload];
/// the expert-parallel all-to-alls' under Note [Expert-parallel overlap]).
const char* to_string(Stream s);
/// The stream of that name, or nothing.
std::optional<Stream> stream_from_string(std::string_view name);

/// Memory categories of the per-rank breakdown.
enum class MemCategory { kParameters, kGradients, kOptimizer, kActivations, kBuffers };
inline constexpr int kMemCategories = 5;
/// "parameters", "gradients", "optimizer", "activations", "buffers".
const char* to_string(MemCategory c);

/// A change of allocated memory on the task's rank: +bytes allocates, -bytes frees.
struct MemOp {
  MemCategory category = MemCategory::kActivations;
  Bytes bytes = 0;
};

/// Memory operations as lowering gathers them for a task, up to four inline
/// (Note [Inline dependencies]); the graph keeps them pooled (Note [Pooled
/// memory operations]).
using MemOps = SmallVector<MemOp, 4>;

// Note [Pooled memory operations]
// Most tasks change no memory (57% of GPT-1T's 458k), and a pipeline's
// backward frees up to three things as it ends. Kept in each Task as two
// inline lists of two they took 96 of its 320 bytes, and the 65k lists of
// three went to the heap. A graph keeps every task's operations in one
// array instead, each task's as it starts, then as it ends, at the offset
// the task holds (TaskGraph::on_start, on_end): 8 bytes a task, and 16 an
// operation.

// Note [Compact tasks]
// GPT-1T's interleaved pipeline is 458k tasks of 320 bytes, and its
// prediction moved and copied them as it made them: each built aside and
// moved into the graph, the graph's vector copied at every doubling (the
// moves and memcpy were 9% of its instructions under callgrind, issue 26).
// So the task builder makes each task in place at the graph's end, the
// pipeline lowering reserves the graph once its first stage is made (the
// other stages make about as many), and a collective's algorithm is a view
// of a string literal, not a string of its own to copy. Its memory
// operations left it for the graph's pool (Note [Pooled memory
// operations]): a task is 224 bytes now.

// Note [A task's cost]
// Every task carried a collective's whole cost (80 bytes: its algorithm's
// and protocol's names as views, the stalls the task builder pays out),
// where the executor reads four numbers of it and most tasks are kernels.
// A task keeps those four (TaskCost, 32 bytes) and the index of its
// (algorithm, protocol) pair among the few its graph has seen
// (TaskGraph::cost_labels), which traces print.

/// What the executor needs of a collective's cost (CollectiveCost).
struct TaskCost {
  TimeNs latency = 0;       ///< CollectiveCost::latency, with its stalls paid
  double wire_bytes = 0;    ///< bytes through the bottleneck link, per rank
  BytesPerSec rate = 0;     ///< the bottleneck link's bandwidth for this flow
  LinkClass link = LinkClass::kIntraNode;
  std::uint16_t label = 0;  ///< TaskGraph::cost_labels index: (algorithm, protocol)
  /// Time if nothing else shares the link (CollectiveCost::total()).
  TimeNs total() const { return collective_time(latency, wire_bytes, rate); }
};

/// One unit of work on one simulated rank.
struct Task {
  std::string name;
  TaskKind kind = TaskKind::kCompute;
  Phase phase = Phase::kOther;
  int rank = 0;                ///< index into TaskGraph::ranks
  int stream = 0;              ///< index into that rank's streams
  TimeNs duration = 0;         ///< kCompute / kHostCompute
  /// kCompute: the host's time to issue its kernels (Note [Host launch] in
  /// executor.cpp); 0: not modelled (issuing is free).
  TimeNs launch = 0;
  /// kCompute: the share of its time its memory-bound kernels take (0 to
  /// 1), what a collective's HBM traffic slows (Note [Interference] in
  /// executor.cpp); the rest is slowed by the SMs the collective takes.
  float memory_share = 0;
  CollectiveOp op = CollectiveOp::kAllReduce;  ///< kCollective (beside memory_share: no padding)
  TaskCost cost;               ///< kCollective (Note [A task's cost])
  /// kCollective: the mesh axis whose group runs it (none: a host copy).
  std::optional<Axis> axis;
  Bytes bytes = 0;             ///< payload, for reports and traces
  std::int64_t collective = -1;  ///< participants share this key (-1: this rank alone; kRecvNotice)
  int participants = 1;        ///< simulated ranks taking part
  /// The micro-batch whose pass made it (a pipeline's forward, backward,
  /// send or recompute), or -1 (the step, the reductions at the end): what
  /// the steady-state abridgement matches tasks by (Note [Steady state] in
  /// report/steady_state.cpp).
  std::int32_t micro = -1;
  TaskDeps deps;               ///< Note [Inline dependencies]
  /// Its memory operations, TaskGraph::mem_ops from `mem_first`: `n_start`
  /// applied when it starts, then `n_end` when it ends (Note [Pooled memory
  /// operations]; TaskGraph::on_start, on_end and set_memory).
  std::uint32_t mem_first = 0;
  std::uint16_t n_start = 0, n_end = 0;
};

/// Task::collective of a receiver's notice to a Gloo pipeline sender that
/// it has posted its receive: a task of no cost on the sender's send stream
/// that waits for the sender's core (Note [Busy sender] in executor.cpp).
inline constexpr std::int64_t kRecvNotice = -2;

/// The most of a device's HBM bandwidth its running collectives are taken
/// to use (SimRank::hbm_slowdown; Note [Interference] in executor.cpp).
inline constexpr double kMaxHbmShare = 0.8;

/// A simulated rank: one per class of identical real ranks.
struct SimRank {
  int rank = 0;                ///< the first real rank it stands for
  int stage = 0;               ///< pipeline stage (0 without pipelining)
  int replicas = 1;            ///< real ranks that behave identically
  std::vector<std::string> streams;  ///< stream names, e.g. {"compute", "comm"}
  std::vector<MemOp> resident; ///< allocated before the iteration starts
  /// Capacity of each link class (indexed by LinkClass) that flows share.
  std::array<BytesPerSec, 3> link_capacity{};
  /// How much longer its compute-bound kernels take while one of its
  /// collectives runs (0.1: at 1/1.1 of their speed), for the SMs the
  /// collective takes; Note [Interference] in executor.cpp. 0: compute
  /// does not slow beside collectives (and hbm_slowdown is not applied).
  double comm_slowdown = 0;
  /// How much longer its memory-bound kernels take while a collective over
  /// each link class (indexed by LinkClass) runs, for the HBM bandwidth the
  /// collective's traffic takes (Note [Interference]).
  std::array<double, 3> hbm_slowdown{};
  /// How much more than h / (1 - h) its memory-bound kernels slow, h the
  /// running classes' shares added (DeviceSpec::comm_hbm_contention).
  double hbm_contention = 1;
  /// Note [Busy sender] in executor.cpp: a receiver's notice to this rank
  /// is handled once its compute stream is idle, or has been busy this long
  /// since it last came from idle (DeviceSpec::send_waits_for_core); 0: at once.
  TimeNs send_waits_for_core = 0;
  /// Note [Resuming after a wait] in executor.cpp: what a compute task
  /// that waited on a collective pays more, by how long its rank's core
  /// had computed nothing: (wait, extra) points in increasing wait,
  /// straight lines from (0, 0) between them, the last extra past the
  /// last (CommModel::resume_after_wait); empty: nothing.
  std::vector<std::pair<TimeNs, TimeNs>> resume;
};

/// The whole program of one training iteration.
struct TaskGraph {
  std::vector<SimRank> ranks;
  std::vector<Task> tasks;
  /// Layers of each model chunk as lowered (one entry without pipelining).
  std::vector<int> stage_layers;
  /// Every task's memory operations (Note [Pooled memory operations]).
  std::vector<MemOp> mem_ops;
  /// The (algorithm, protocol) pairs of the graph's collectives, string
  /// literals, by TaskCost::label; the first is none (Note [A task's cost]).
  std::vector<std::pair<std::string_view, std::string_view>> cost_labels{{"", ""}};

  /// A collective's cost as `t` keeps it (the latency as given).
  TaskCost task_cost(const CollectiveCost& c) {
    return TaskCost{c.latency, c.wire_bytes, c.rate, c.link, label(c.algorithm, c.protocol)};
  }
  /// The index of (algorithm, protocol) in cost_labels, added if new.
  std::uint16_t label(std::string_view algorithm, std::string_view protocol);
  std::string_view algorithm(const Task& t) const { return cost_labels[t.cost.label].first; }
  std::string_view protocol(const Task& t) const { return cost_labels[t.cost.label].second; }

  /// What `t` allocates and frees as it starts, and as it ends.
  std::span<const MemOp> on_start(const Task& t) const { return {mem_ops.data() + t.mem_first, t.n_start}; }
  std::span<const MemOp> on_end(const Task& t) const {
    return {mem_ops.data() + t.mem_first + t.n_start, t.n_end};
  }
  /// Gives `t` (a task of this graph with none yet) its memory operations.
  void set_memory(Task& t, std::span<const MemOp> start, std::span<const MemOp> end);
  /// Appends a task, with what it allocates and frees as it starts and ends,
  /// and returns its id.
  TaskId add(Task t, std::span<const MemOp> start = {}, std::span<const MemOp> end = {}) {
    tasks.push_back(std::move(t));
    set_memory(tasks.back(), start, end);
    return static_cast<TaskId>(tasks.size() - 1);
  }
};

}  // namespace dtsim::sim
