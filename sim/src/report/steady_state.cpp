// The steady-state abridgement of a long pipeline.
//
// Note [Steady state]
// A 1F1B, ZB-H1 or interleaved pipeline of m micro-batches fills (warm-up), then
// repeats one pattern of forwards, backwards and sends for every few
// micro-batches (the steady state), then drains (cool-down). Its graph is
// the same for micro-batch i + c as for i wherever neither is in the
// warm-up or cool-down (the granule c is 1 for 1F1B and ZB-H1, pp for
// interleaving, whose micro-batches go round in groups of pp), and the
// simulation is deterministic, so once the whole state (every task under
// way, its progress, every flow's bytes left on its link, each rank's
// memory) at time tau + P is that at tau shifted by P, everything after
// repeats: an iteration of m + c micro-batches is one of m with one more
// period [tau, tau + P) spliced in. The period need not be one granule: the
// sends of 1F1B on 8 stages share links in a pattern that repeats every 6
// micro-batches.
//
// So a pipeline of many micro-batches is simulated with m' of them, few and
// set by the depth of the pipeline alone (enough for the warm-up, a few
// periods and the cool-down), and in that run the steady state is found:
// the smallest c (a multiple of the granule) and the run of micro-batches
// i whose tasks, matched one to one in the order they were made, each
// start and end exactly P later for i + c; a window [tau, tau + P) in the
// middle of that run is the period when every task overlapping it belongs
// to the run (so the state at its two ends is the same, shifted) and every
// rank's memory is the same at both ends. The full run of m = m' + q x c
// micro-batches is then the abridged one with q more windows: its time is
// the abridged time + q x P; each stage's busy time, the busiest stage's
// time by class (Note [Pipeline breakdown] in predict.cpp), the tasks and
// the events each add q times what the window holds; and each rank's
// memory peaks at the same bytes, since the window repeats the same
// allocations and frees. Where (m - m') is not a multiple of c the
// abridged run is repeated with m' + (m - m') mod c micro-batches. Where no
// window is found (a second try doubles m'), or m' is over 3/4 of m (too
// few to gain), the full simulation runs, as it does under
// PredictOptions::unabridged (a trace, which shows every micro-batch, is
// spliced from the abridged run: Note [Steady state timelines]);
// tests/sim/test_steady_state.cpp shows both equal over every shipped
// pipeline plan and 1 to 512 micro-batches.
#include "report/steady_state.hpp"

#include <algorithm>
#include <cstdint>
#include <vector>

#include "dtsim/sim/error.hpp"

namespace dtsim::sim::detail {
namespace {

/// Micro-batches a stage may hold at once: pp for 1F1B (stage 0's warm-up
/// and the one it runs), for ZB-H1 also the pp - 1 weight passes the last
/// stage defers (Note [Zero bubble]), and for interleaving stage 0's warm-up
/// steps ((pp - 1) x 2 + (v - 1) x pp, Megatron-LM's) over its v chunks.
std::int64_t in_flight(const ResolvedPlan& plan) {
  if (plan.schedule == Schedule::kZbH1) return 2 * plan.pp - 1;
  if (plan.schedule != Schedule::kInterleaved) return plan.pp;
  const std::int64_t v = plan.virtual_stages;
  return ((plan.pp - 1) * 2 + (v - 1) * plan.pp + v - 1) / v + 1;
}

/// The micro-batches of the first abridged run (Note [Steady state]), from
/// those a stage holds. The fewest in which the window was found, for
/// gpt-175b under megatron-3d at 4 to 32 stages with every other micro-batch
/// count the same: 1F1B 2.1-2.75 pp, interleaving 8-9 pp (6 x span covers
/// them), ZB-H1 about 4.5 pp + 77; with room for other models' transients.
std::int64_t first_run(Schedule schedule, std::int64_t span) {
  if (schedule == Schedule::kInterleaved) return 6 * span;
  if (schedule == Schedule::kZbH1) return 4 * span + 16;
  return 3 * span + 16;
}

/// The repeating window of an abridged run, where found.
struct Period {
  std::int64_t c = 0;     ///< micro-batches it advances
  TimeNs tau = 0, p = 0;  ///< [tau, tau + p)
  std::int64_t first = 0; ///< a micro-batch of the run of repeating ones, whose c successors make one period's tasks
};

struct Run {
  TaskGraph g;
  ExecResult exec;
  std::vector<std::vector<TaskId>> by_micro;  ///< each micro-batch's tasks, in the order they were made
  /// By micro-batch: a union-find of those found to be one another's
  /// shift (Note [Matching micro-batches]).
  std::vector<std::size_t> same;
};

/// Whether micro-batch k's tasks are those of j, each as much later as
/// k's first task is after j's (that difference may be of any sign).
bool same_relative(const Run& r, std::size_t j, std::size_t k) {
  const auto& a = r.by_micro[j];
  const auto& b = r.by_micro[k];
  if (a.size() != b.size() || a.empty()) return false;
  const TimeNs shift = r.exec.spans[b[0]].start - r.exec.spans[a[0]].start;
  for (std::size_t i = 0; i < a.size(); ++i) {
    const Task& x = r.g.tasks[a[i]];
    const Task& y = r.g.tasks[b[i]];
    if (x.rank != y.rank || x.stream != y.stream || x.kind != y.kind || x.phase != y.phase || x.duration != y.duration ||
        x.bytes != y.bytes || x.n_start != y.n_start || x.n_end != y.n_end) {
      return false;
    }
    const Span& sx = r.exec.spans[a[i]];
    const Span& sy = r.exec.spans[b[i]];
    if (sy.start - sx.start != shift || sy.end - sx.end != shift) return false;
  }
  return true;
}

// Note [Matching micro-batches]
// Finding the period asks, for every c and j, whether micro-batch j + c's
// tasks are j's shifted in time (shifted()), task by task. Every multiple
// of the period matches across the whole steady state, and a run too short
// for its window is scanned again for each larger c, so comparing afresh
// each time is quadratic in the micro-batches simulated (13-14% of a
// 131k-token search for llama-3.1-405b went there). Being one another's
// shift is an equivalence (same_relative(): the same tasks at the same
// times from each one's first), so each match found joins the two
// micro-batches' classes (a union-find), and a pair already in one class
// matches without a comparison; a pair in two classes is still compared
// task by task. The same answers, each match paid once. A window tried
// (is_window()) asks whether a task outside the run is under way in it:
// a pass over every task, and after 16 tries in one run a search in those
// tasks sorted once (Outsiders). Together they took that search's share
// from 13-14% to 6% (and 2% sorting), and left a megatron-3d prediction's
// as it was (255k instructions, 263k). A hash of each micro-batch to
// refuse mismatches at once cost more than it saved (8% of the search).
std::size_t root(std::vector<std::size_t>& parent, std::size_t j) {
  while (parent[j] != j) j = parent[j] = parent[parent[j]];
  return j;
}

Run simulate(const Model& model, const ResolvedPlan& plan, std::int64_t m, const ClusterSpec& cluster, const CostModels& costs) {
  ResolvedPlan abridged = plan;
  abridged.grad_accum = m;
  Run r;
  r.g = lower(model, abridged, cluster, costs);
  ExecOptions eo;
  eo.record_memory_timeline = true;
  eo.record_event_times = true;
  r.exec = execute(r.g, eo);
  r.by_micro.assign(static_cast<std::size_t>(m), {});
  for (std::size_t i = 0; i < r.g.tasks.size(); ++i) {
    const std::int32_t mb = r.g.tasks[i].micro;
    if (mb >= 0) r.by_micro[static_cast<std::size_t>(mb)].push_back(static_cast<TaskId>(i));
  }
  r.same.resize(static_cast<std::size_t>(m));
  for (std::size_t j = 0; j < r.same.size(); ++j) r.same[j] = j;
  return r;
}

/// Whether micro-batch j + c's tasks are those of j, each `shift` later,
/// `shift` being positive; `shift` is set from the first pair.
bool shifted(Run& r, std::int64_t j, std::int64_t c, TimeNs& shift) {
  const auto x = static_cast<std::size_t>(j), y = static_cast<std::size_t>(j + c);
  const auto& a = r.by_micro[x];
  const auto& b = r.by_micro[y];
  if (a.size() != b.size() || a.empty()) return false;
  shift = r.exec.spans[b[0]].start - r.exec.spans[a[0]].start;
  if (shift <= 0) return false;
  // Note [Matching micro-batches]: one class already, or compared and joined.
  const std::size_t rx = root(r.same, x), ry = root(r.same, y);
  if (rx == ry) return true;
  if (!same_relative(r, x, y)) return false;
  r.same[std::max(rx, ry)] = std::min(rx, ry);
  return true;
}

/// Rank r's memory once every event at or before `t` has run.
const std::array<Bytes, kMemCategories>* memory_at(const RankMemoryPeak& m, TimeNs t) {
  const auto it = std::upper_bound(m.timeline.begin(), m.timeline.end(), t,
                                   [](TimeNs x, const MemSnapshot& s) { return x < s.time; });
  if (it == m.timeline.begin()) return nullptr;
  return &std::prev(it)->bytes;
}

/// The tasks outside a run of micro-batches [a, a + len): whether one is
/// under way at some instant of [t0, t1]. The first questions are each a
/// pass over every task (few windows are usually tried); from the 17th,
/// about what sorting costs, the outside tasks are sorted by start with the
/// latest end of each prefix, and each question is a search.
class Outsiders {
 public:
  Outsiders(const Run& r, std::int64_t a, std::int64_t len) : r_(r), a_(a), len_(len) {}
  /// Whether one starts at or before t1 and ends at or after t0.
  bool overlap(TimeNs t0, TimeNs t1) {
    if (asked_++ < 16) {
      for (std::size_t i = 0; i < r_.g.tasks.size(); ++i) {
        const Span& s = r_.exec.spans[i];
        if (s.end < t0 || s.start > t1) continue;
        if (outside(i)) return true;
      }
      return false;
    }
    if (asked_ == 17) {
      for (std::size_t i = 0; i < r_.g.tasks.size(); ++i) {
        if (outside(i)) spans_.push_back(r_.exec.spans[i]);
      }
      std::sort(spans_.begin(), spans_.end(), [](const Span& x, const Span& y) { return x.start < y.start; });
      latest_.reserve(spans_.size());
      TimeNs most = 0;
      for (const Span& s : spans_) latest_.push_back(most = std::max(most, s.end));
    }
    const auto n = std::upper_bound(spans_.begin(), spans_.end(), t1, [](TimeNs t, const Span& s) { return t < s.start; }) -
                   spans_.begin();
    return n > 0 && latest_[static_cast<std::size_t>(n - 1)] >= t0;
  }

 private:
  bool outside(std::size_t i) const {
    const std::int32_t mb = r_.g.tasks[i].micro;
    return mb < a_ || mb >= a_ + len_;
  }
  const Run& r_;
  std::int64_t a_, len_;
  std::vector<Span> spans_;
  std::vector<TimeNs> latest_;
  int asked_ = 0;
};

/// Whether [tau, tau + p) is a period of a run of micro-batches [a, a +
/// len), each repeated c later shifted by p: every task under way at some
/// instant of it is one of theirs (none of `outside`), and every rank's
/// memory is the same at both ends.
bool is_window(const Run& r, Outsiders& outside, TimeNs tau, TimeNs p) {
  if (outside.overlap(tau, tau + p)) return false;
  for (const RankMemoryPeak& m : r.exec.memory) {
    const auto* x = memory_at(m, tau);
    const auto* y = memory_at(m, tau + p);
    if (x == nullptr || y == nullptr || *x != *y) return false;
  }
  return true;
}

/// A period in that run: a window opening with the first task of one of its
/// micro-batches.
std::optional<Period> window(const Run& r, std::int64_t c, std::int64_t a, std::int64_t len, TimeNs p) {
  Outsiders outside(r, a, len);
  for (std::int64_t j = a; j + c <= a + len; ++j) {
    const TimeNs tau = r.exec.spans[r.by_micro[static_cast<std::size_t>(j)].front()].start;
    if (is_window(r, outside, tau, p)) return Period{c, tau, p, j};
  }
  return std::nullopt;
}

/// The steady state's window with period c (a multiple of `granule`), the
/// smallest found, or only `only_c` where given.
std::optional<Period> find_period(Run& r, std::int64_t granule, std::int64_t span, std::int64_t only_c) {
  const auto m = static_cast<std::int64_t>(r.by_micro.size());
  for (std::int64_t c = only_c > 0 ? only_c : granule; c <= (only_c > 0 ? only_c : m / 3); c += granule) {
    // The longest run of consecutive micro-batches repeating with one shift.
    std::int64_t best_a = 0, best_len = 0, a = 0, len = 0;
    TimeNs best_p = 0, cur_p = 0;
    for (std::int64_t j = 0; j + c < m; ++j) {
      TimeNs p = 0;
      if (!shifted(r, j, c, p)) {
        len = 0;
        continue;
      }
      if (len == 0 || p != cur_p) {  // a run starts here (with another shift)
        a = j;
        cur_p = p;
        len = 0;
      }
      ++len;
      if (len > best_len) {
        best_len = len;
        best_a = a;
        best_p = cur_p;
      }
    }
    // The run covers the micro-batches in flight on either side of one period.
    if (best_len < span + c) continue;
    if (auto w = window(r, c, best_a, best_len, best_p)) return w;
  }
  return std::nullopt;
}

}  // namespace

std::optional<SteadyState> simulate_steady(const Model& model, const ResolvedPlan& plan, const ClusterSpec& cluster,
                                           const CostModels& costs, bool keep_run) {
  if (plan.pp <= 1 || plan.schedule == Schedule::kGpipe || plan.schedule == Schedule::kNaive) return std::nullopt;
  const std::int64_t m = plan.grad_accum;
  const std::int64_t granule = plan.schedule == Schedule::kInterleaved ? plan.pp : 1;
  const std::int64_t span = in_flight(plan);
  // Enough for the warm-up, several periods and the cool-down, and a
  // quarter fewer than m at least, or the full run is as cheap.
  auto round_up = [&](std::int64_t x) { return (x + granule - 1) / granule * granule; };
  std::int64_t m1 = round_up(first_run(plan.schedule, span));
  for (int attempt = 0; attempt < 2 && 4 * m1 <= 3 * m; ++attempt, m1 = round_up(2 * m1)) {
    Run r = simulate(model, plan, m1, cluster, costs);
    std::optional<Period> w = find_period(r, granule, span, 0);
    if (!w) continue;
    if (const std::int64_t rest = (m - m1) % w->c; rest != 0) {
      // The same period, found again in a run whose distance to m it divides.
      r = simulate(model, plan, m1 + rest, cluster, costs);
      w = find_period(r, granule, span, w->c);
      if (!w) return std::nullopt;
    }
    const auto simulated = static_cast<std::int64_t>(r.by_micro.size());
    const std::int64_t q = (m - simulated) / w->c;
    SteadyState s;
    s.simulated_micro_batches = simulated;
    const TimeNs t0 = w->tau, t1 = w->tau + w->p;
    s.makespan = r.exec.makespan + q * w->p;
    // The busiest stage over the whole iteration, and its time by class.
    std::vector<TimeNs> busy = stage_busy(r.g, r.exec.spans, 0, r.exec.makespan);
    const std::vector<TimeNs> busy_w = stage_busy(r.g, r.exec.spans, t0, t1);
    for (std::size_t k = 0; k < busy.size(); ++k) busy[k] += q * busy_w[k];
    const int ref = static_cast<int>(std::max_element(busy.begin(), busy.end()) - busy.begin());
    StageClasses cls = stage_classes(r.g, r.exec.spans, ref, 0, r.exec.makespan);
    const StageClasses cls_w = stage_classes(r.g, r.exec.spans, ref, t0, t1);
    for (std::size_t k = 0; k < cls.size(); ++k) cls[k] += q * cls_w[k];
    s.breakdown = to_breakdown(cls);
    for (const RankMemoryPeak& pk : r.exec.memory) s.peaks.push_back(pk.at_peak);
    const auto ev_w = std::lower_bound(r.exec.event_times.begin(), r.exec.event_times.end(), t1) -
                      std::lower_bound(r.exec.event_times.begin(), r.exec.event_times.end(), t0);
    s.events = r.exec.events + static_cast<std::uint64_t>(q) * static_cast<std::uint64_t>(ev_w);
    std::size_t tasks_w = 0;
    for (std::int64_t j = w->first; j < w->first + w->c; ++j) tasks_w += r.by_micro[static_cast<std::size_t>(j)].size();
    s.tasks = r.g.tasks.size() + static_cast<std::size_t>(q) * tasks_w;
    if (keep_run) {
      s.rank_info = r.g.ranks;
      s.tau = w->tau;
      s.period = w->p;
      s.c = w->c;
      s.q = q;
      s.graph = std::move(r.g);
      s.exec = std::move(r.exec);
    } else {
      s.rank_info = std::move(r.g.ranks);
    }
    return s;
  }
  return std::nullopt;
}

// Note [Steady state timelines]
// A trace and the explorer's timeline show every task of the iteration,
// and simulating them all costs what the abridgement saves (gpt-175b under
// megatron-3d, 512 micro-batches: 56,330 tasks against 8,010); lowering
// them alone costs twice the abridged run. Neither is needed: by Note
// [Steady state] the full run of m = m' + q x c micro-batches is the
// abridged run of m' with q more periods spliced in after its window
// [tau, tau + P). So a task of the abridged run that starts before tau is
// in the full run as it is; one that starts within the window is there
// q + 1 times, k = 0 .. q, k x P later, for micro-batch + k x c; one that
// starts at tau + P or later once, q x P later, for micro-batch + q x c
// (the step's tasks, of no micro-batch, keep theirs). A stream runs its
// tasks in order, so on each (rank, stream) the three are runs of its
// list, and the full graph's list is the first, the window's q + 1 times,
// then the last. Each copy is the abridged task with its micro-batch, its
// name's "[mb i]" and its collective's key moved on, and its dependencies
// those of the abridged task moved as the graph repeats: a dependency on a
// task of micro-batch j becomes one on the same task of j + k x c (found by
// its place among its micro-batch's tasks), one on a task of no
// micro-batch, which exists once, stays. A rank's memory over time is
// spliced the same way (its state at tau + P is that at tau), and its peak
// is the abridged run's, first reached where the abridged run first
// reached it (q x P later only past the window, which the copies repeat
// below it). Where anything does not fit (a dependency of the step on a
// task of the window, a name without its micro-batch) the graph is lowered
// and simulated in full instead. tests/sim/test_steady_state.cpp compares
// every task (its place, name, micro-batch, dependencies, collective
// partners), every span and every memory change with the full lowering and
// simulation (runs_differ in executor.hpp) over every shipped pipeline plan,
// 1 to 512 micro-batches; bench/splice_check.cpp does so over the plans a
// search enumerates (bench/README.md: 6,897 spliced, none differing).
namespace {

/// Each (rank, stream)'s tasks in the order they run; false where a task
/// names a rank or stream the graph does not have.
bool stream_lists(const TaskGraph& g, std::vector<std::vector<std::vector<TaskId>>>& out) {
  out.assign(g.ranks.size(), {});
  for (std::size_t r = 0; r < g.ranks.size(); ++r) out[r].resize(std::max<std::size_t>(1, g.ranks[r].streams.size()));
  for (std::size_t i = 0; i < g.tasks.size(); ++i) {
    const Task& t = g.tasks[i];
    if (t.rank < 0 || static_cast<std::size_t>(t.rank) >= out.size() || t.stream < 0 ||
        static_cast<std::size_t>(t.stream) >= out[t.rank].size()) {
      return false;
    }
    out[t.rank][t.stream].push_back(static_cast<TaskId>(i));
  }
  return true;
}

/// `name` with its "[mb i]" (i = `micro`, the last such) made "[mb i +
/// dm]"; a name without one (a bucket's reduction) is the same for every copy.
void move_name(std::string& name, std::int32_t micro, std::int64_t dm) {
  const std::string was = "[mb " + std::to_string(micro) + "]";
  const std::size_t at = name.rfind(was);
  if (at != std::string::npos) name.replace(at, was.size(), "[mb " + std::to_string(micro + dm) + "]");
}

}  // namespace

std::optional<SplicedRun> splice_timeline(const SteadyState& s, bool memory_timeline) {
  const TaskGraph& a = s.graph;
  const ExecResult& ax = s.exec;
  const std::size_t na = a.tasks.size();
  if (na == 0 || ax.spans.size() != na || ax.memory.size() != a.ranks.size() || s.period <= 0 || s.c <= 0 || s.q < 0) {
    return std::nullopt;
  }
  const TimeNs tau = s.tau, end = s.tau + s.period, p = s.period;
  const std::int64_t m = s.simulated_micro_batches + s.q * s.c;
  std::vector<std::vector<std::vector<TaskId>>> lists;
  if (!stream_lists(a, lists)) return std::nullopt;
  // Each abridged task's place among its micro-batch's tasks, and the
  // collectives' key stride (copies take key + k x stride).
  std::vector<std::int32_t> place(na, 0);
  std::vector<std::int32_t> seen(static_cast<std::size_t>(s.simulated_micro_batches), 0);
  std::int64_t stride = 1;
  for (std::size_t i = 0; i < na; ++i) {
    const Task& t = a.tasks[i];
    if (t.micro >= s.simulated_micro_batches) return std::nullopt;
    if (t.micro >= 0) place[i] = seen[static_cast<std::size_t>(t.micro)]++;
    stride = std::max(stride, t.collective + 1);
  }
  SplicedRun out;
  TaskGraph& g = out.graph;
  ExecResult& x = out.exec;
  g.ranks = a.ranks;
  g.stage_layers = a.stage_layers;
  g.mem_ops = a.mem_ops;
  g.cost_labels = a.cost_labels;
  g.tasks.reserve(s.tasks);
  x.spans.reserve(s.tasks);
  std::vector<TaskId> from;       // by full task: the abridged task it repeats
  std::vector<std::int64_t> copy;  // and which copy (k)
  from.reserve(s.tasks);
  copy.reserve(s.tasks);
  std::vector<TaskId> once(na, -1);  // the full task of an abridged one outside the window
  std::vector<std::vector<TaskId>> by_place(static_cast<std::size_t>(m));  // full tasks by micro-batch and place
  const auto add = [&](TaskId xi, std::int64_t k, bool single) {
    const Task& t = a.tasks[xi];
    const auto id = static_cast<TaskId>(g.tasks.size());
    g.tasks.push_back(t);
    Task& y = g.tasks.back();
    y.deps.clear();
    if (k != 0) {
      if (t.micro >= 0) {
        y.micro = static_cast<std::int32_t>(t.micro + k * s.c);
        if (!y.name.empty()) move_name(y.name, t.micro, k * s.c);
      }
      if (t.collective >= 0) y.collective = t.collective + k * stride;
    }
    const Span& sx = ax.spans[xi];
    x.spans.push_back(Span{id, sx.start + k * p, sx.end + k * p, sx.slowed});
    from.push_back(xi);
    copy.push_back(k);
    if (y.micro >= 0) {
      auto& row = by_place[static_cast<std::size_t>(y.micro)];
      if (row.size() <= static_cast<std::size_t>(place[xi])) row.resize(static_cast<std::size_t>(place[xi]) + 1, -1);
      row[static_cast<std::size_t>(place[xi])] = id;
    }
    if (single) once[xi] = id;
  };
  std::vector<char> in_window(na, 0);
  for (const auto& rank : lists) {
    for (const std::vector<TaskId>& l : rank) {
      const auto starts_before = [&](TimeNs t) {
        return static_cast<std::size_t>(
            std::partition_point(l.begin(), l.end(), [&](TaskId id) { return ax.spans[id].start < t; }) - l.begin());
      };
      const std::size_t i1 = starts_before(tau), i2 = starts_before(end);
      for (std::size_t i = 0; i < i1; ++i) {
        add(l[i], 0, true);
      }
      for (std::size_t i = i1; i < i2; ++i) in_window[l[i]] = 1;
      for (std::int64_t k = 0; k <= s.q; ++k) {
        for (std::size_t i = i1; i < i2; ++i) {
          add(l[i], k, false);
        }
      }
      for (std::size_t i = i2; i < l.size(); ++i) {
        add(l[i], s.q, true);
      }
    }
  }
  if (g.tasks.size() != s.tasks) return std::nullopt;
  // Dependencies, moved as the graph repeats.
  for (std::size_t id = 0; id < g.tasks.size(); ++id) {
    const Task& t = a.tasks[from[id]];
    for (const TaskId d : t.deps) {
      const Task& dt = a.tasks[d];
      TaskId to = -1;
      if (dt.micro < 0 || t.micro < 0) {
        // A task of no micro-batch exists once, and the step waits on the
        // one copy of what it depends on (none of the window's).
        if (in_window[d]) return std::nullopt;
        to = once[d];
      } else {
        const std::int64_t j = dt.micro + copy[id] * s.c;
        if (j >= 0 && j < m) {
          const auto& row = by_place[static_cast<std::size_t>(j)];
          if (static_cast<std::size_t>(place[d]) < row.size()) to = row[static_cast<std::size_t>(place[d])];
        }
      }
      if (to < 0) return std::nullopt;
      g.tasks[id].deps.push_back(to);
    }
  }
  x.makespan = s.makespan;
  x.events = s.events;
  x.memory.resize(ax.memory.size());
  for (std::size_t r = 0; r < ax.memory.size(); ++r) {
    const RankMemoryPeak& mem = ax.memory[r];
    RankMemoryPeak& o = x.memory[r];
    o.at_peak = mem.at_peak;
    if (o.at_peak.time >= end) o.at_peak.time += s.q * p;
    if (!memory_timeline) continue;
    const auto before = [](const MemSnapshot& sn, TimeNs t) { return sn.time < t; };
    const auto first_in = std::lower_bound(mem.timeline.begin(), mem.timeline.end(), tau, before);
    const auto first_after = std::lower_bound(first_in, mem.timeline.end(), end, before);
    o.timeline.reserve(mem.timeline.size() + static_cast<std::size_t>(s.q) * static_cast<std::size_t>(first_after - first_in));
    o.timeline.insert(o.timeline.end(), mem.timeline.begin(), first_in);
    for (std::int64_t k = 0; k <= s.q; ++k) {
      for (auto it = first_in; it != first_after; ++it) {
        o.timeline.push_back(*it);
        o.timeline.back().time += k * p;
      }
    }
    for (auto it = first_after; it != mem.timeline.end(); ++it) {
      o.timeline.push_back(*it);
      o.timeline.back().time += s.q * p;
    }
  }
  return out;
}

}  // namespace dtsim::sim::detail
