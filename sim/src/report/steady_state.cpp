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
// few to gain), the full simulation runs, as it does for traces (which show every micro-batch) and under
// PredictOptions::unabridged; tests/sim/test_steady_state.cpp shows both
// equal over every shipped pipeline plan and 1 to 512 micro-batches.
#include "report/steady_state.hpp"

#include <algorithm>

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
};

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
  return r;
}

/// Whether micro-batch j + c's tasks are those of j, each `shift` later;
/// `shift` is set from the first pair.
bool shifted(const Run& r, std::int64_t j, std::int64_t c, TimeNs& shift) {
  const auto& a = r.by_micro[static_cast<std::size_t>(j)];
  const auto& b = r.by_micro[static_cast<std::size_t>(j + c)];
  if (a.size() != b.size() || a.empty()) return false;
  shift = r.exec.spans[b[0]].start - r.exec.spans[a[0]].start;
  if (shift <= 0) return false;
  for (std::size_t k = 0; k < a.size(); ++k) {
    const Task& x = r.g.tasks[a[k]];
    const Task& y = r.g.tasks[b[k]];
    if (x.rank != y.rank || x.stream != y.stream || x.kind != y.kind || x.phase != y.phase || x.duration != y.duration ||
        x.bytes != y.bytes || x.n_start != y.n_start || x.n_end != y.n_end) {
      return false;
    }
    const Span& sx = r.exec.spans[a[k]];
    const Span& sy = r.exec.spans[b[k]];
    if (sy.start - sx.start != shift || sy.end - sx.end != shift) return false;
  }
  return true;
}

/// Rank r's memory once every event at or before `t` has run.
const std::array<Bytes, kMemCategories>* memory_at(const RankMemoryPeak& m, TimeNs t) {
  const auto it = std::upper_bound(m.timeline.begin(), m.timeline.end(), t,
                                   [](TimeNs x, const MemSnapshot& s) { return x < s.time; });
  if (it == m.timeline.begin()) return nullptr;
  return &std::prev(it)->bytes;
}

/// Whether [tau, tau + p) is a period of a run of micro-batches [a, a +
/// len), each repeated c later shifted by p: every task under way at some
/// instant of it is one of theirs, and every rank's memory is the same at
/// both ends.
bool is_window(const Run& r, std::int64_t a, std::int64_t len, TimeNs tau, TimeNs p) {
  for (std::size_t i = 0; i < r.g.tasks.size(); ++i) {
    const Span& s = r.exec.spans[i];
    if (s.end < tau || s.start > tau + p) continue;
    const std::int32_t mb = r.g.tasks[i].micro;
    if (mb < a || mb >= a + len) return false;
  }
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
  for (std::int64_t j = a; j + c <= a + len; ++j) {
    const TimeNs tau = r.exec.spans[r.by_micro[static_cast<std::size_t>(j)].front()].start;
    if (is_window(r, a, len, tau, p)) return Period{c, tau, p, j};
  }
  return std::nullopt;
}

/// The steady state's window with period c (a multiple of `granule`), the
/// smallest found, or only `only_c` where given.
std::optional<Period> find_period(const Run& r, std::int64_t granule, std::int64_t span, std::int64_t only_c) {
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
                                           const CostModels& costs) {
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
    s.rank_info = std::move(r.g.ranks);
    return s;
  }
  return std::nullopt;
}

}  // namespace dtsim::sim::detail
