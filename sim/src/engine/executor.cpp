// Runs a TaskGraph on the event queue.
//
// Note [Stream semantics]
// Each rank's streams behave like CUDA streams: a task starts only after the
// task before it on the same stream has finished, and after every task it
// depends on (cudaStreamWaitEvent). A collective additionally waits until
// every participant has reached it, then all start together.
//
// Note [Shared links]
// A collective is a fixed latency followed by a flow of bytes through its
// rank's bottleneck link. Flows on one link share its capacity max-min fairly
// (water-filling, each flow capped at its own rate); whenever a flow starts or
// ends the remaining bytes are advanced and the link's next completion is
// rescheduled (SimGrid's EngineImpl::solve does the same with its LMM solver).
//
// Note [Host launch]
// A framework in eager mode issues every kernel from a host thread (the
// forward's, then autograd's, then the optimizer's), and a GPU runs a
// kernel only once it is issued; the host does not wait for the GPU, so it
// runs ahead while kernels are long and falls behind while they are short.
// A compute task with a launch cost is issued by its rank's host in the
// order the tasks were created (the program's order), each right after the
// one before: it cannot end before its issue does, and otherwise ends when
// its kernels have run. So a step whose layers are short (a 16-bit BERT-base)
// takes as long as the host takes to issue it, and one whose layers are long
// (fp32) hides the host under them, including much of an optimizer step of
// hundreds of small per-tensor updates. The host's lead is not bounded (CUDA
// queues about a thousand launches; a lead that long only arises where the
// GPU is the bottleneck anyway).
//
// Note [Interference]
// A collective is kernels too: NCCL runs each channel as a thread block on
// an SM of its own and streams its buffers through the same HBM, so a
// kernel that overlaps it has fewer SMs and less bandwidth and runs slower
// (the figures and their sources: Note [Interference prior] in
// sim/src/config/device_db.cpp). Which of the two it feels depends on what
// bounds it: a GEMM is bound by its SMs, an elementwise kernel, a norm or
// the optimizer's update by HBM, which it saturates with fewer SMs than it
// has. So a compute task's time is split by Task::memory_share (its
// memory-bound kernels' share, from the cost model's kernels): while any
// of its rank's collectives is between its start and its end, the
// compute-bound part runs 1 + comm_slowdown times as long, and the
// memory-bound part 1 + m h / (1 - h) times, h the HBM share the running
// collectives take: for each link class with one running, the traffic of
// a flow at that class's rate (SimRank::hbm_slowdown, set by lowering:
// about 3 bytes of HBM a byte on the link, Jeaugey in NVIDIA/nccl #1428),
// added over the classes and at most kMaxHbmShare; m is the device's
// comm_hbm_contention (SimRank::hbm_contention: 1, or as a profile
// measured it, Note [Interference fit]). So the same kernel beside an
// NVLink all-gather (h 0.43 on an A100) slows more than beside a
// reduction across nodes, and a GEMM the same by either. Host copies run on
// copy engines, and a pipeline's sends on a channel or two (no
// measurement is cited for them): neither counts. Whenever the set of
// running collectives' link classes changes, the work left of each
// running compute task is advanced and its end rescheduled. The
// collectives themselves keep their speed.
//
// Note [Busy sender]
// Where ranks are CPU cores (Gloo), the receiver's notice that it has
// posted a receive is handled by a thread of the sender's own, on the one
// core its compute runs on. Gloo's TCP send is a rendezvous: Pair::send
// writes the data in the caller's thread where the receiver's
// NOTIFY_RECV_READY has already been handled; otherwise it queues the data
// and the sender's device thread writes it when that notice is handled
// (handleRemotePendingRecv in gloo/transport/tcp/pair.cc). A receiver posts
// its receive where its schedule needs the data (Note [Gloo rendezvous] in
// lowering/passes/pipeline.cpp), often while the sender computes a pass:
// its device thread, woken, gets the core when the compute thread blocks,
// or when that thread has used the slice it began as it woke, which the
// scheduler checks at its ticks (EEVDF's run-to-parity; CONFIG_HZ=250: 4
// ms). Measured, bilstm-tiny, 2 ranks of one core each, one clock:
// - 1F1B: an activation asked for 0.6 ms after the sender woke to compute
//   arrived 3.3 ms later, 4.0 ms after it woke, as its second forward ended;
//   one asked for as the sender woke to a 4.5 ms backward arrived 4.2 ms
//   later, mid-backward.
// - GPipe: one asked for 5.2 ms into the sender's unbroken forwards arrived
//   0.2 ms later; one asked for 0.5 ms after the sender resumed from a wait
//   arrived 4.1 ms later, mid-forward.
// So the pipeline pass puts the receiver's notice (Task::collective
// kRecvNotice, no bytes) before each send on the sender's send stream, and
// a notice on a rank with SimRank::send_waits_for_core > 0 (W) that arrives
// while a compute task runs on that rank's compute stream is handled once
// none does (a rank waiting on a collective leaves its core to Gloo), or
// the rank ends a pass (Note [Quiet sender]), or W after the stream last
// came from idle, whichever comes first (at once if that is past); the
// send behind it goes once it is issued. GPUs' sends run on their own
// engines and SMs: 0. (Measured with Gloo's loop at the rank's priority,
// as Gloo starts it; the runtime now lowers it: Note [Quiet sender].)
//
// Note [Quiet sender]
// dtsim's runtime runs a bound rank's Gloo loops at the lowest priority
// (Note [Gloo's event loop] in platform/src/process.cpp): a loop woken by a
// notice no longer takes the core at a tick, but waits for the rank's main
// thread to let go of it. Measured with validate --trace, bilstm-tiny, 2
// ranks of one core each (docs/validation-cpu.md, 2026-12-04, afternoon):
// - GPipe: each activation asked for while the sender ran a 1.6-1.8 ms
//   forward arrived as that forward ended (held 1.2-1.5 ms), never cut at
//   a tick;
// - 1F1B: an activation asked for as the first stage began a 3.6-4.1 ms
//   backward arrived 0.04-0.12 ms after that backward ended, though the
//   first stage sends nothing after a backward.
// So a rank lets go of its core at the end of each pass, the last task of
// one micro-batch's forward, or backward, on its compute stream (then the
// runtime beats its heartbeat, issues its send or posts its next receive),
// and at any task a send of its rank waits on; a held notice is handled
// then. A profile that records its loops at the lowest priority sets no
// bound (W = kUntilPassEnds, DeviceSpec::send_waits_for_core, as the cpu
// device's default); one from before that record, W = the tick
// (ProfileCommModel::send_waits_for_core). And a notice reaches its sender
// after the latency of the message it asks for (the same link, a message
// as small as the sends' latency counts). In 1F1B a receiver posts its
// next receive just after sending the gradient its sender waits on, so the
// notice and the gradient race; the simulation's notice wins (it leaves
// as the gradient does and has no bytes to carry). The traced run lost 5
// of the step's 7 (held a whole backward), and a 1F1B of short passes is
// priced short (bilstm-tiny's by about 17%): mostly the loop, at nice 19,
// picked while the main thread had run ahead and spinning for a tick on a
// pair's mutex (docs/validation-cpu.md, 2026-12-04, afternoon: with
// SCHED_IDLE the row ran within 6% of its price, but other rows slowed).
//
// Note [Resuming after a wait]
// A CPU rank that waits on a collective leaves its core to Gloo's threads,
// the kernel and whatever else the host runs; the layer it runs next finds
// its caches cold and pays for it, which neither a layer's loop nor a
// whole step of one process (Note [Layers in a step] in
// cost/cost_profile.cpp) ever meets. Measured on the 2-vCPU AMD VM
// (python3-torch, one thread pinned; docs/validation-cpu.md, 2026-12-03,
// day): the CNN's first convolution at 4 images took 104 us in a loop and
// 124 us right after a 1 ms wait polling sched_yield as dtsim_worker
// waits (226-260 against 143-158 us in a slow minute), a 400 x 120 linear
// 19-27 against 31 us. dtsim_c10d_bench times it where the rank waits as
// a step does (Note [Timing the resume] in calibrate/src/gloo_bench.cpp):
// the first forward and backward of its lead's MLP after each in-step
// all-reduce against that MLP's time in the lead, after the all-reduce's
// wait of each size measured. So a compute task (not the host's work)
// that became ready when a collective it waited on ended (a stage's
// forward after its receive, the optimizer after its all-reduce) pays
// SimRank::resume at the time since its rank's last compute task ended:
// nothing after no wait, the extra measured after the waits measured,
// straight lines between, the last past it. The extra lengthens the task
// (its span and its rank's busy time), as the cold caches do the layer.
// Only a layer's work counts as computing, pays and ends the wait: not a
// marker of no duration (one between the collective and the layer is
// looked through), and not a CPU collective's time on the cores (the
// "(cores)" tasks of Note [CPU collectives] in lowering/layer_context.hpp,
// Phase::kComm), which is itself the wait. Only ranks whose collectives
// need their cores (CPU ranks: DeviceSpec::comm_overlaps_compute false)
// are given points.
//
// Note [Sizes in 64 bits]
// Times are int64 nanoseconds and sizes int64 bytes: exact and reproducible,
// but a hostile or mistaken config (a device of 1e-6 TFLOP/s, a model of
// 10,000 layers of width 16M) could wrap them, and signed overflow is
// undefined behaviour. So durations are bounded where they are made
// (seconds_to_ns refuses past kMaxSimTime, 2^62 ns), every time this
// executor adds is checked against it, and every memory sum against
// kMaxSimBytes (2^59 B = 512 PiB per category, so the few categories of a
// snapshot still sum in 64 bits); past either, the prediction is refused
// with UnsupportedError, one line, exit status 2. The models bound their
// own sizes where they make them (models/src/zoo.cpp, layers.cpp).
//
// Note [Compact state]
// A pipeline of many stages and micro-batches is hundreds of thousands of
// tasks, each a few hundred bytes (its name, its dependencies, its memory
// operations): the hot loop does not touch them. Where each task runs and
// who waits on it (one flat array, offsets per task) are copied out once,
// so finishing a task reads a few words per dependent, not a Task each.
// And the executor keeps no more per task than it must, every byte of it
// first touched in a page the kernel faults in (GPT-1T: 458k tasks, issue
// 26): a task's start, end and slowdown are written into the Span the
// result hands back, the host's issue times are kept only where some
// task has a launch cost, and a flow's slot is taken again once its flow
// has ended (a pipeline starts one a send).
//
// Note [Critical path]
// Each task remembers what made it ready last: the task before it on its
// stream or a dependency (for a collective, the last participant to arrive).
// Walking that chain back from the last task to finish gives the critical
// path; its tasks' phases split the iteration time into compute, exposed
// communication, optimizer, offload, and so on, summing exactly to the total.
#include "dtsim/sim/executor.hpp"

#include <algorithm>
#include <cmath>
#include <limits>
#include <unordered_map>

#include "dtsim/sim/engine.hpp"
#include "dtsim/sim/error.hpp"

namespace dtsim::sim {

Bytes MemSnapshot::total() const {
  Bytes t = 0;
  for (Bytes b : bytes) t += b;
  return t;
}

namespace {

constexpr EventId kNoEvent = std::numeric_limits<EventId>::max();
constexpr int kLinkClasses = 3;
/// The most bytes of one category a rank may hold (Note [Sizes in 64 bits]).
constexpr Bytes kMaxSimBytes = Bytes{1} << 59;

/// `now` + `d`, refused past kMaxSimTime (Note [Sizes in 64 bits]).
TimeNs later(TimeNs now, TimeNs d) {
  TimeNs t = 0;
  if (__builtin_add_overflow(now, d, &t) || t > kMaxSimTime) duration_too_long(ns_to_seconds(now) + ns_to_seconds(d));
  return t;
}

/// Seconds to ns, rounded up (a flow is not done before its last byte).
TimeNs seconds_to_ns_ceil(double seconds) {
  const double ns = std::ceil(seconds * 1e9 - 1e-6);
  if (!(ns < static_cast<double>(kMaxSimTime))) duration_too_long(seconds);
  return static_cast<TimeNs>(ns);
}

struct Flow {
  double remaining = 0;   // bytes
  BytesPerSec max_rate = 0;
  BytesPerSec rate = 0;
  TaskId owner = -1;
  std::uint64_t serial = 0;  ///< flows started before it: water-filling's order among equal caps
};

struct Link {
  BytesPerSec capacity = 0;
  std::vector<int> flows;  // indices into Executor::flows_
  TimeNs last = 0;
  EventId pending = kNoEvent;
};

/// What an event asks of the executor (Note [Plain events] in engine.hpp).
enum class Action : std::int32_t { kFinish, kStartFlow, kLinkEvent, kCoreFree, kNoticeArrives };

class Executor {
 public:
  Executor(const TaskGraph& g, const ExecOptions& o) : g_(g), opt_(o) {}

  ExecResult run() {
    setup();
    for (std::size_t r = 0; r < stream_tasks_.size(); ++r) {
      for (std::size_t s = 0; s < stream_tasks_[r].size(); ++s) try_start_head(static_cast<int>(r), static_cast<int>(s));
    }
    while (const auto e = q_.next()) {
      // Note [Plain events]: what each kind asks.
      switch (static_cast<Action>(e->kind)) {
        case Action::kFinish: finish(e->arg); break;
        case Action::kStartFlow: start_flow(e->arg); break;
        case Action::kLinkEvent: on_link_event(e->arg); break;
        case Action::kCoreFree: release_notice(e->arg); break;
        case Action::kNoticeArrives: notice_arrives(e->arg); break;
      }
      if (opt_.record_event_times) event_times_.push_back(q_.now());
    }
    check_all_done();
    return collect();
  }

 private:
  void setup() {
    const std::size_t n = g_.tasks.size();
    deps_left_.assign(n, 0);
    where_.resize(n);
    arrived_.assign(n, 0);
    // Note [Compact state]: each task's span is written where the result
    // keeps it.
    spans_.resize(n);
    for (std::size_t i = 0; i < n; ++i) spans_[i].task = static_cast<TaskId>(i);
    started_.assign(n, 0);
    done_.assign(n, 0);
    ready_by_.assign(n, -1);
    ready_at_.assign(n, 0);
    crit_pred_.assign(n, -1);
    stream_tasks_.resize(g_.ranks.size());
    head_.resize(g_.ranks.size());
    for (std::size_t r = 0; r < g_.ranks.size(); ++r) {
      stream_tasks_[r].resize(std::max<std::size_t>(1, g_.ranks[r].streams.size()));
      head_[r].assign(stream_tasks_[r].size(), 0);
    }
    // Who waits on each task, flat (Note [Compact state]).
    dependents_start_.assign(n + 1, 0);
    for (std::size_t i = 0; i < n; ++i) {
      for (TaskId d : g_.tasks[i].deps) {
        if (d >= 0 && static_cast<std::size_t>(d) < n) ++dependents_start_[static_cast<std::size_t>(d) + 1];
      }
    }
    for (std::size_t i = 0; i < n; ++i) dependents_start_[i + 1] += dependents_start_[i];
    dependents_.assign(dependents_start_[n], 0);
    std::vector<std::uint32_t> fill(dependents_start_.begin(), dependents_start_.end() - 1);
    for (std::size_t i = 0; i < n; ++i) {
      const Task& t = g_.tasks[i];
      DTSIM_ASSERT(t.rank >= 0 && static_cast<std::size_t>(t.rank) < g_.ranks.size(),
                   "task '" + t.name + "' on unknown rank");
      DTSIM_ASSERT(t.stream >= 0 && static_cast<std::size_t>(t.stream) < stream_tasks_[t.rank].size(),
                   "task '" + t.name + "' on unknown stream");
      where_[i] = {t.rank, t.stream};
      stream_tasks_[t.rank][t.stream].push_back(static_cast<TaskId>(i));
      for (TaskId d : t.deps) {
        DTSIM_ASSERT(d >= 0 && static_cast<std::size_t>(d) < n, "task '" + t.name + "' depends on an unknown task");
        DTSIM_ASSERT(static_cast<std::size_t>(d) != i, "task '" + t.name + "' depends on itself");
        dependents_[fill[d]++] = static_cast<TaskId>(i);
        ++deps_left_[i];
      }
      if (t.kind == TaskKind::kCollective && t.participants > 1) {
        DTSIM_ASSERT(t.collective >= 0, "collective '" + t.name + "' with several participants needs a key");
        members_[t.collective].push_back(static_cast<TaskId>(i));
      }
    }
    for (const auto& [key, ids] : members_) {
      DTSIM_ASSERT(static_cast<int>(ids.size()) == g_.tasks[ids.front()].participants,
                   "collective '" + g_.tasks[ids.front()].name + "': participants do not match");
    }
    links_.resize(g_.ranks.size() * kLinkClasses);
    for (std::size_t r = 0; r < g_.ranks.size(); ++r) {
      for (int c = 0; c < kLinkClasses; ++c) links_[r * kLinkClasses + c].capacity = g_.ranks[r].link_capacity[c];
    }
    memory_.resize(g_.ranks.size());
    current_.resize(g_.ranks.size());
    total_.assign(g_.ranks.size(), 0);
    peak_total_.assign(g_.ranks.size(), 0);
    slowdown_.resize(g_.ranks.size());
    hbm_share_.assign(g_.ranks.size(), {});
    for (std::size_t r = 0; r < g_.ranks.size(); ++r) {
      slowdown_[r] = std::max(0.0, g_.ranks[r].comm_slowdown);
      // s = h / (1 - h) back to the share h, which adds over link classes.
      for (std::size_t c = 0; c < kLinkClasses; ++c) {
        const double s = std::max(0.0, g_.ranks[r].hbm_slowdown[c]);
        hbm_share_[r][c] = s / (1 + s);
      }
    }
    // Note [Busy sender]: each rank's compute stream and what runs on it.
    compute_stream_.assign(g_.ranks.size(), -1);
    computing_.assign(g_.ranks.size(), -1);
    busy_since_.assign(g_.ranks.size(), 0);
    held_notices_.resize(g_.ranks.size());
    for (std::size_t r = 0; r < g_.ranks.size(); ++r) {
      if (g_.ranks[r].send_waits_for_core <= 0) continue;
      const auto& names = g_.ranks[r].streams;
      for (std::size_t k = 0; k < names.size(); ++k) {
        if (names[k] == to_string(Stream::kCompute)) compute_stream_[r] = static_cast<int>(k);
      }
      if (held_.empty()) held_.assign(n, 0);
      core_waits_ = true;
    }
    // Note [Quiet sender]: the tasks whose end lets go of their rank's core:
    // the last of a pass on its compute stream (the next is another
    // micro-batch's, or the other direction's, or none), and any a send of
    // its rank waits on.
    if (core_waits_) {
      yields_.assign(n, 0);
      const auto pass = [](Phase p) {
        return p == Phase::kForward ? 0 : (p == Phase::kBackward || p == Phase::kRecompute) ? 1 : 2;
      };
      for (std::size_t r = 0; r < g_.ranks.size(); ++r) {
        if (compute_stream_[r] < 0) continue;
        const auto& list = stream_tasks_[r][static_cast<std::size_t>(compute_stream_[r])];
        for (std::size_t k = 0; k < list.size(); ++k) {
          const Task& t = g_.tasks[list[k]];
          const Task* next = k + 1 < list.size() ? &g_.tasks[list[k + 1]] : nullptr;
          if (next == nullptr || next->micro != t.micro || pass(next->phase) != pass(t.phase)) yields_[list[k]] = 1;
        }
      }
      for (std::size_t i = 0; i < n; ++i) {
        const Task& t = g_.tasks[i];
        if (t.kind != TaskKind::kCollective || t.op != CollectiveOp::kSendRecv || t.collective == kRecvNotice) continue;
        for (TaskId d : t.deps) {
          if (g_.tasks[d].rank == t.rank) yields_[d] = 1;
        }
      }
    }
    // Note [Resuming after a wait]: by rank, when its last compute task ended.
    last_compute_end_.assign(g_.ranks.size(), -1);
    for (const SimRank& r : g_.ranks) resumes_ = resumes_ || !r.resume.empty();
    comm_active_.assign(g_.ranks.size(), {});
    running_.resize(g_.ranks.size());
    for (std::size_t r = 0; r < g_.ranks.size(); ++r) {
      for (const MemOp& op : g_.ranks[r].resident) apply_mem(static_cast<int>(r), op);
    }
    // Note [Host launch]: each rank's host issues its tasks in program order
    // (no array where no task has a launch cost).
    std::vector<TimeNs> host(g_.ranks.size(), 0);
    for (std::size_t i = 0; i < n; ++i) {
      const Task& t = g_.tasks[i];
      if (t.kind != TaskKind::kCompute || t.launch <= 0) continue;
      if (issue_end_.empty()) issue_end_.assign(n, 0);
      host[t.rank] = later(host[t.rank], t.launch);
      issue_end_[i] = host[t.rank];
    }
  }

  /// Note [Host launch]: when the host has issued task `id` (0: free to issue).
  TimeNs issued(TaskId id) const { return issue_end_.empty() ? 0 : issue_end_[id]; }

  bool at_head(TaskId id) const {
    const Where w = where_[id];
    const auto& list = stream_tasks_[w.rank][w.stream];
    const std::size_t h = head_[w.rank][w.stream];
    return h < list.size() && list[h] == id;
  }

  void try_start_head(int rank, int stream) {
    const auto& list = stream_tasks_[rank][stream];
    const std::size_t h = head_[rank][stream];
    if (h >= list.size()) return;
    const TaskId id = list[h];
    if (!started_[id] && !arrived_flag(id) && deps_left_[id] == 0) arrive(id);
  }

  bool arrived_flag(TaskId id) const { return arrived_[id] != 0; }

  void arrive(TaskId id) {
    const Task& t = g_.tasks[id];
    if (t.kind != TaskKind::kCollective || t.participants <= 1) {
      crit_pred_[id] = ready_by_[id];
      begin(id);
      return;
    }
    arrived_[id] = 1;
    auto& ids = members_[t.collective];
    const bool all = std::all_of(ids.begin(), ids.end(), [&](TaskId m) { return arrived_[m] != 0; });
    if (!all) return;
    TaskId last = ids.front();
    for (TaskId m : ids) {
      if (ready_at_[m] > ready_at_[last]) last = m;
    }
    for (TaskId m : ids) {
      crit_pred_[m] = ready_by_[last];
      begin(m);
    }
  }

  /// Schedules `what` on `arg` (a task or a link) at `when` (Note [Plain events]).
  EventId at(TimeNs when, Action what, std::int32_t arg) { return q_.schedule(when, {static_cast<std::int32_t>(what), arg}); }

  /// Note [Interference]: a compute task running on a rank whose compute
  /// slows, and where it stands.
  struct Progress {
    TaskId id = -1;
    double left = 0;  ///< ns of work at full speed
    TimeNs since = 0;
    double rate = 1;
    double share = 0;  ///< Task::memory_share
    EventId event = kNoEvent;
    double slowed = 0;  ///< ns its work has taken beyond full speed so far

    /// Work done since `since` at `rate`, up to `now`: what is left, and the
    /// time lost to the slowdown.
    void advance(TimeNs now) {
      const double wall = std::min(static_cast<double>(now - since), left / rate);
      left -= wall * rate;
      slowed += wall * (1 - rate);
      since = now;
    }
  };

  void begin(TaskId id) {
    const Task& t = g_.tasks[id];
    started_[id] = 1;
    spans_[id].start = q_.now();
    for (const MemOp& op : g_.on_start(t)) apply_mem(t.rank, op);
    // Note [Resuming after a wait]: what it pays more for a wait before it.
    const TimeNs resume = resumes_ && computes(t) ? resume_extra(id, t.rank) : 0;
    if (core_waits_ && t.kind == TaskKind::kCompute && t.stream == compute_stream_[t.rank]) {
      // Note [Busy sender]: busy since the core last came from idle.
      if (computing_[t.rank] == -1) busy_since_[t.rank] = q_.now();
      computing_[t.rank] = id;
    }
    if (t.kind == TaskKind::kCollective) {
      if (interferes(t) && comm_active_[t.rank][link_of(t)]++ == 0) rerate(t.rank);
      if (core_waits_ && t.collective == kRecvNotice) {
        // Note [Quiet sender]: the notice reaches the sender after its latency.
        at(later(q_.now(), t.cost.latency), Action::kNoticeArrives, id);
      } else {
        at(later(q_.now(), t.cost.latency), Action::kStartFlow, id);
      }
    } else if (t.kind == TaskKind::kCompute && slowdown_[t.rank] > 0 && t.duration > 0) {
      // Note [Interference]: its end moves with the rank's collectives.
      Progress p;
      p.id = id;
      p.left = static_cast<double>(t.duration) + static_cast<double>(resume);
      p.since = q_.now();
      p.share = t.memory_share;
      p.rate = rate(t.rank, p.share);
      schedule_end(p);
      running_[t.rank].push_back(p);
    } else {
      // Note [Host launch]: not before the host has issued it.
      const TimeNs end =
          std::max(later(later(q_.now(), t.duration), resume), t.kind == TaskKind::kCompute ? issued(id) : TimeNs{0});
      at(end, Action::kFinish, id);
    }
  }

  /// Note [Resuming after a wait]: what compute task `id` on `rank` pays
  /// more, where a collective made it ready, for the time since the rank's
  /// last compute task ended.
  TimeNs resume_extra(TaskId id, int rank) const {
    const auto& points = g_.ranks[rank].resume;
    const TimeNs last = last_compute_end_[rank];
    if (points.empty() || last < 0) return 0;
    // What made it ready, through the markers of no duration between.
    TaskId by = ready_by_[id];
    while (by >= 0 && g_.tasks[by].duration == 0 && g_.tasks[by].kind != TaskKind::kCollective) by = ready_by_[by];
    if (by < 0 || computes(g_.tasks[by])) return 0;  // a layer after a layer
    const TimeNs wait = q_.now() - last;
    if (wait <= 0) return 0;
    TimeNs w0 = 0, x0 = 0;
    for (const auto& [w, x] : points) {
      if (wait <= w) {
        return std::max<TimeNs>(0, x0 + static_cast<TimeNs>(std::llround(static_cast<double>(x - x0) *
                                                                         static_cast<double>(wait - w0) /
                                                                         static_cast<double>(w - w0))));
      }
      w0 = w;
      x0 = x;
    }
    return std::max<TimeNs>(0, x0);
  }
  /// Note [Resuming after a wait]: a task that computes, as a layer does:
  /// not a collective, not the host's work, not a marker of no duration,
  /// and not a CPU collective's time on the cores (Phase::kComm).
  static bool computes(const Task& t) {
    return t.kind == TaskKind::kCompute && t.duration > 0 && t.phase != Phase::kComm;
  }

  /// Note [Busy sender]: a receiver's notice to a sender whose core is computing.
  bool waits_for_core(const Task& t) const {
    if (!core_waits_ || t.collective != kRecvNotice || computing_[t.rank] < 0) return false;
    const TimeNs w = g_.ranks[t.rank].send_waits_for_core;
    return w == kUntilPassEnds || later(busy_since_[t.rank], w) > q_.now();
  }

  /// Notes [Busy sender] and [Quiet sender]: a receiver's notice reaches its
  /// sender: handled at once where the sender's core is free, else held until
  /// its compute stream is idle or ends a pass, or W after it last came from
  /// idle (no bound: kUntilPassEnds).
  void notice_arrives(TaskId id) {
    const Task& t = g_.tasks[id];
    if (!waits_for_core(t)) {
      start_flow(id);
      return;
    }
    held_[id] = 1;
    held_notices_[t.rank].push_back(id);
    const TimeNs w = g_.ranks[t.rank].send_waits_for_core;
    if (w != kUntilPassEnds) at(later(busy_since_[t.rank], w), Action::kCoreFree, id);
  }

  /// Note [Busy sender]: a held notice is handled (then the send behind it
  /// on its stream may go); one already handled is left alone.
  void release_notice(TaskId id) {
    if (held_[id] == 0) return;
    held_[id] = 0;
    auto& held = held_notices_[g_.tasks[id].rank];
    held.erase(std::find(held.begin(), held.end(), id));
    // What traces show of the wait for the core (the notice's way there apart).
    spans_[id].slowed = q_.now() - spans_[id].start - g_.tasks[id].cost.latency;
    start_flow(id);
  }

  /// Note [Interference]: a collective that slows its rank's compute.
  bool interferes(const Task& t) const {
    return slowdown_[t.rank] > 0 && t.phase == Phase::kComm && t.op != CollectiveOp::kSendRecv;
  }
  /// The link class a collective's flow takes (Note [Interference]).
  static std::size_t link_of(const Task& t) { return static_cast<std::size_t>(t.cost.link); }
  /// The speed now of a compute task on rank r whose memory-bound kernels
  /// take `share` of its time: its compute-bound part slowed by the SMs any
  /// running collective takes, its memory-bound part by the HBM bandwidth
  /// the running collectives' link classes take together (at most
  /// kMaxHbmShare of it, as for one; lowering_common.hpp).
  double rate(int r, double share) const {
    const auto& active = comm_active_[r];
    double hbm = 0;
    bool any = false;
    for (std::size_t c = 0; c < active.size(); ++c) {
      if (active[c] == 0) continue;
      any = true;
      hbm += hbm_share_[r][c];
    }
    if (!any) return 1.0;
    hbm = std::min(hbm, kMaxHbmShare);
    return 1.0 / (1.0 + (1 - share) * slowdown_[r] + share * g_.ranks[r].hbm_contention * hbm / (1 - hbm));
  }

  /// A running compute task's end: its work left at its rate, and not
  /// before the host has issued it (Note [Host launch]).
  void schedule_end(Progress& p) {
    const double ns = std::max(0.0, std::ceil(p.left / p.rate - 1e-6));
    if (!(ns < static_cast<double>(kMaxSimTime))) duration_too_long(ns * 1e-9);
    const TaskId id = p.id;
    const TimeNs end = std::max(later(q_.now(), static_cast<TimeNs>(ns)), issued(id));
    p.event = at(end, Action::kFinish, id);
  }

  /// Rank r's running collectives now take a link class more or one fewer:
  /// its running compute tasks go on at their new speeds.
  void rerate(int r) {
    for (Progress& p : running_[r]) {
      const double now_rate = rate(r, p.share);
      p.advance(q_.now());
      if (p.rate == now_rate) continue;
      p.rate = now_rate;
      q_.cancel(p.event);
      schedule_end(p);
    }
  }

  void start_flow(TaskId id) {
    const Task& t = g_.tasks[id];
    if (t.cost.wire_bytes <= 0) {
      flow_done(id);
      return;
    }
    const int li = t.rank * kLinkClasses + static_cast<int>(t.cost.link);
    Link& link = links_[li];
    advance(link);
    // A slot a finished flow left, or a new one (Note [Compact state]: a
    // pipeline starts a flow a send, hundreds of thousands).
    const Flow f{t.cost.wire_bytes, t.cost.rate, 0, id, flows_started_++};
    int slot = 0;
    if (free_flows_.empty()) {
      slot = static_cast<int>(flows_.size());
      flows_.push_back(f);
    } else {
      slot = free_flows_.back();
      free_flows_.pop_back();
      flows_[static_cast<std::size_t>(slot)] = f;
    }
    link.flows.push_back(slot);
    reshare_and_schedule(li);
  }

  void advance(Link& link) {
    const double dt = ns_to_seconds(q_.now() - link.last);
    if (dt > 0) {
      for (int f : link.flows) flows_[f].remaining -= flows_[f].rate * dt;
    }
    link.last = q_.now();
  }

  void reshare_and_schedule(int li) {
    Link& link = links_[li];
    if (link.flows.size() == 1) {
      // One flow alone takes what water-filling gives it: the link, up to its cap.
      Flow& f = flows_[link.flows.front()];
      f.rate = std::min(f.max_rate, link.capacity > 0 ? link.capacity : std::numeric_limits<double>::infinity());
    } else {
      reshare(link);
    }
    if (link.pending != kNoEvent) q_.cancel(link.pending);
    link.pending = kNoEvent;
    if (link.flows.empty()) return;
    double soonest = std::numeric_limits<double>::infinity();
    for (int f : link.flows) soonest = std::min(soonest, std::max(0.0, flows_[f].remaining) / flows_[f].rate);
    const TimeNs when = later(q_.now(), seconds_to_ns_ceil(soonest));
    link.pending = at(when, Action::kLinkEvent, li);
  }

  /// Water-filling: serve flows in order of their caps (in a scratch
  /// vector: this runs at every flow's start and end).
  void reshare(Link& link) {
    std::vector<int>& order = order_;
    order.assign(link.flows.begin(), link.flows.end());
    std::sort(order.begin(), order.end(), [&](int a, int b) {
      return flows_[a].max_rate != flows_[b].max_rate ? flows_[a].max_rate < flows_[b].max_rate
                                                      : flows_[a].serial < flows_[b].serial;
    });
    double left = link.capacity > 0 ? link.capacity : std::numeric_limits<double>::infinity();
    std::size_t n = order.size();
    for (int f : order) {
      const double share = left / static_cast<double>(n);
      flows_[f].rate = std::min(flows_[f].max_rate, share);
      left -= flows_[f].rate;
      --n;
    }
  }

  void on_link_event(int li) {
    Link& link = links_[li];
    link.pending = kNoEvent;
    advance(link);
    // The flows done leave the link (in order); a scratch list, taken while
    // their tasks finish, for this runs at every flow's end.
    std::vector<TaskId> finished;
    finished.swap(finished_);
    finished.clear();
    std::size_t kept = 0;
    for (int f : link.flows) {
      // Done when what is left would take under a nanosecond.
      if (flows_[f].remaining <= flows_[f].rate * 1e-9 + 1e-6) {
        finished.push_back(flows_[f].owner);
        free_flows_.push_back(f);
      } else {
        link.flows[kept++] = f;
      }
    }
    link.flows.resize(kept);
    reshare_and_schedule(li);
    for (TaskId id : finished) flow_done(id);
    finished.swap(finished_);
  }

  void flow_done(TaskId id) { finish(id); }

  void finish(TaskId id) {
    const Task& t = g_.tasks[id];
    done_[id] = 1;
    spans_[id].end = q_.now();
    if (slowdown_[t.rank] > 0) {
      if (t.kind == TaskKind::kCollective && interferes(t) && --comm_active_[t.rank][link_of(t)] == 0) rerate(t.rank);
      auto& run = running_[t.rank];
      for (std::size_t k = 0; k < run.size(); ++k) {
        if (run[k].id != id) continue;
        run[k].advance(q_.now());
        if (run[k].slowed > 0) spans_[id].slowed = static_cast<TimeNs>(std::llround(run[k].slowed));
        run[k] = run.back();
        run.pop_back();
        break;
      }
    }
    for (const MemOp& op : g_.on_end(t)) apply_mem(t.rank, op);
    if (core_waits_ && computing_[t.rank] == id) computing_[t.rank] = -2;  // Note [Busy sender]: ending
    if (resumes_ && computes(t)) last_compute_end_[t.rank] = q_.now();  // Note [Resuming after a wait]
    // The next task on this stream may now run.
    std::size_t& h = head_[t.rank][t.stream];
    ++h;
    const auto& list = stream_tasks_[t.rank][t.stream];
    if (h < list.size()) {
      const TaskId next = list[h];
      if (deps_left_[next] == 0) mark_ready(next, id);
      try_start_head(t.rank, t.stream);
    }
    for (std::uint32_t k = dependents_start_[id]; k < dependents_start_[id + 1]; ++k) {
      const TaskId d = dependents_[k];
      if (--deps_left_[d] == 0 && at_head(d)) {
        mark_ready(d, id);
        try_start_head(where_[d].rank, where_[d].stream);
      }
    }
    // Note [Busy sender]: the core is free unless the next compute task
    // began; Note [Quiet sender]: or this task ended a pass.
    if (core_waits_ && (computing_[t.rank] == -2 || yields_[id])) {
      if (computing_[t.rank] == -2) computing_[t.rank] = -1;
      while (!held_notices_[t.rank].empty()) release_notice(held_notices_[t.rank].front());
    }
  }

  void mark_ready(TaskId id, TaskId by) {
    ready_by_[id] = by;
    ready_at_[id] = q_.now();
  }

  void apply_mem(int rank, const MemOp& op) {
    auto& cur = current_[rank];
    const int c = static_cast<int>(op.category);
    // Note [Sizes in 64 bits]: a sum past kMaxSimBytes is refused, not wrapped.
    if (__builtin_add_overflow(cur[c], op.bytes, &cur[c]) || cur[c] > kMaxSimBytes) {
      throw UnsupportedError("rank " + std::to_string(rank) + " would hold over " + std::to_string(kMaxSimBytes >> 50) +
                             " PiB of " + to_string(op.category) +
                             ", beyond what dtsim counts in 64 bits: check the model's and plan's sizes");
    }
    DTSIM_ASSERT(cur[c] >= 0, std::string("rank frees more ") + to_string(op.category) + " than it allocated");
    // Each category is under 2^59 B, so their sum is exact in 64 bits.
    const Bytes total = (total_[rank] += op.bytes);
    auto& m = memory_[rank];
    if (total <= peak_total_[rank] && !opt_.record_memory_timeline) return;
    MemSnapshot snap;
    snap.time = q_.now();
    snap.bytes = cur;
    if (total > peak_total_[rank]) {
      m.at_peak = snap;
      peak_total_[rank] = total;
    }
    if (opt_.record_memory_timeline) {
      if (!m.timeline.empty() && m.timeline.back().time == snap.time) {
        m.timeline.back() = snap;
      } else {
        m.timeline.push_back(snap);
      }
    }
  }

  void check_all_done() const {
    for (std::size_t i = 0; i < g_.tasks.size(); ++i) {
      if (done_[i]) continue;
      const Task& t = g_.tasks[i];
      std::string why = started_[i] ? "started but never finished"
                                    : (deps_left_[i] > 0 ? "waits on a dependency that never finished"
                                                         : "waits for a stream predecessor or collective peer");
      throw InternalError("deadlock in task graph: '" + t.name + "' on rank " + std::to_string(t.rank) + " " + why);
    }
  }

  ExecResult collect() {
    ExecResult r;
    r.events = q_.processed();
    TaskId last = -1;
    for (std::size_t i = 0; i < g_.tasks.size(); ++i) {
      if (last < 0 || spans_[i].end > spans_[last].end) last = static_cast<TaskId>(i);
    }
    r.makespan = last < 0 ? 0 : spans_[last].end;
    // Walk the critical path back (Note [Critical path]).
    TimeNs accounted_until = r.makespan;
    for (TaskId cur = last; cur >= 0;) {
      const Task& t = g_.tasks[cur];
      const Span& sp = spans_[cur];
      const TimeNs seg_end = std::min(accounted_until, sp.end);
      if (seg_end > sp.start) r.critical_path[static_cast<int>(t.phase)] += seg_end - sp.start;
      accounted_until = std::min(accounted_until, sp.start);
      const TaskId pred = crit_pred_[cur];
      const TimeNs pred_end = pred >= 0 ? spans_[pred].end : 0;
      if (accounted_until > pred_end) {
        r.critical_path[static_cast<int>(Phase::kOther)] += accounted_until - pred_end;
        accounted_until = pred_end;
      }
      cur = pred;
    }
    r.spans = std::move(spans_);
    r.memory = std::move(memory_);
    r.event_times = std::move(event_times_);
    return r;
  }

  const TaskGraph& g_;
  ExecOptions opt_;
  EventQueue q_;
  /// Where a task runs, apart from the rest of it (Note [Compact state]).
  struct Where {
    int rank, stream;
  };
  std::vector<Where> where_;
  std::vector<int> deps_left_;
  std::vector<std::uint32_t> dependents_start_;  ///< task i's dependents: dependents_[start[i] .. start[i + 1])
  std::vector<TaskId> dependents_;
  std::vector<TimeNs> ready_at_;
  std::vector<Span> spans_;  ///< by task: when it started and ended (Note [Compact state])
  std::vector<TimeNs> issue_end_;  ///< Note [Host launch]: when the host has issued each task (0: no cost)
  std::vector<char> started_, done_;  // bytes, not bits: read and set at every event
  std::vector<TaskId> ready_by_, crit_pred_;
  std::vector<std::vector<std::vector<TaskId>>> stream_tasks_;
  std::vector<std::vector<std::size_t>> head_;
  std::unordered_map<std::int64_t, std::vector<TaskId>> members_;
  std::vector<char> arrived_;  ///< a collective's participant has reached it
  std::vector<Link> links_;
  std::vector<Flow> flows_;
  std::vector<int> free_flows_;  ///< slots of flows_ whose flows have ended
  std::uint64_t flows_started_ = 0;
  std::vector<int> order_;         ///< reshare_and_schedule's scratch
  std::vector<TaskId> finished_;   ///< on_link_event's scratch
  std::vector<RankMemoryPeak> memory_;
  std::vector<std::array<Bytes, kMemCategories>> current_;
  std::vector<Bytes> total_, peak_total_;  ///< by rank: current_'s sum, and at_peak's
  /// Note [Interference]: each rank's slowdown, its collectives running and
  /// its compute tasks running.
  std::vector<double> slowdown_;
  std::vector<std::array<double, kLinkClasses>> hbm_share_;  ///< by rank and link class: h of SimRank::hbm_slowdown
  std::vector<std::array<int, kLinkClasses>> comm_active_;   ///< by rank and link class
  std::vector<std::vector<Progress>> running_;  ///< by rank (one task a compute stream)
  std::vector<TimeNs> event_times_;
  /// Note [Busy sender]: by rank, its compute stream (-1: notices never
  /// wait) and the compute task running on it (-1: none; -2: one ending);
  /// its held notices; by task, whether it is held (empty where none can be).
  std::vector<int> compute_stream_;
  std::vector<TaskId> computing_;
  std::vector<TimeNs> busy_since_;  ///< by rank: when its compute stream last came from idle
  std::vector<std::vector<TaskId>> held_notices_;
  std::vector<char> held_;
  std::vector<char> yields_;  ///< Note [Quiet sender]: by task, whether its end lets go of the core
  bool core_waits_ = false;  ///< some rank's notices wait for its core
  /// Note [Resuming after a wait]: by rank, when its last compute task
  /// ended (-1: none yet); whether any rank pays for resuming.
  std::vector<TimeNs> last_compute_end_;
  bool resumes_ = false;
};

}  // namespace

ExecResult execute(const TaskGraph& graph, const ExecOptions& options) {
  Executor e(graph, options);
  return e.run();
}

}  // namespace dtsim::sim
