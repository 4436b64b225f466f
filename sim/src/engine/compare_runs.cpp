// runs_differ(): two runs of one iteration compared task for task.
#include <algorithm>
#include <array>
#include <map>
#include <utility>
#include <vector>

#include "dtsim/sim/executor.hpp"

namespace dtsim::sim {
namespace {

using Where = std::array<std::int64_t, 3>;  // rank, stream, place on the stream

/// A task as a timeline reads it, its dependencies and partners by where they run.
struct Placed {
  const Task* task = nullptr;
  const Span* span = nullptr;
  std::vector<Where> deps;  ///< sorted
  Where partners{-1, -1, -1};  ///< the first task of its collective (none: -1s)
};

std::vector<Placed> placed(const TaskGraph& g, const ExecResult& x) {
  std::vector<Where> where(g.tasks.size());
  std::map<std::pair<int, int>, std::int64_t> next;
  std::map<std::int64_t, Where> first_of;
  for (std::size_t i = 0; i < g.tasks.size(); ++i) {
    const Task& t = g.tasks[i];
    where[i] = {t.rank, t.stream, next[{t.rank, t.stream}]++};
    if (t.collective < 0) continue;
    auto [it, fresh] = first_of.emplace(t.collective, where[i]);
    if (!fresh) it->second = std::min(it->second, where[i]);
  }
  std::vector<std::pair<Where, Placed>> out;
  out.reserve(g.tasks.size());
  for (std::size_t i = 0; i < g.tasks.size(); ++i) {
    const Task& t = g.tasks[i];
    Placed p;
    p.task = &t;
    p.span = &x.spans[i];
    for (TaskId d : t.deps) {
      if (d >= 0 && static_cast<std::size_t>(d) < where.size()) p.deps.push_back(where[static_cast<std::size_t>(d)]);
    }
    std::sort(p.deps.begin(), p.deps.end());
    if (t.collective >= 0) p.partners = first_of.at(t.collective);
    out.emplace_back(where[i], std::move(p));
  }
  std::sort(out.begin(), out.end(), [](const auto& a, const auto& b) { return a.first < b.first; });
  std::vector<Placed> sorted;
  sorted.reserve(out.size());
  for (auto& e : out) sorted.push_back(std::move(e.second));
  return sorted;
}

bool same_ops(std::span<const MemOp> a, std::span<const MemOp> b) {
  return std::equal(a.begin(), a.end(), b.begin(), b.end(),
                    [](const MemOp& x, const MemOp& y) { return x.category == y.category && x.bytes == y.bytes; });
}

bool same(const TaskGraph& ga, const Placed& a, const TaskGraph& gb, const Placed& b) {
  const Task& x = *a.task;
  const Task& y = *b.task;
  return x.name == y.name && x.kind == y.kind && x.phase == y.phase && x.micro == y.micro && x.duration == y.duration &&
         x.bytes == y.bytes && same_ops(ga.on_start(x), gb.on_start(y)) && same_ops(ga.on_end(x), gb.on_end(y)) &&
         a.deps == b.deps && a.partners == b.partners && a.span->start == b.span->start && a.span->end == b.span->end &&
         a.span->slowed == b.span->slowed;
}

}  // namespace

RunsDiffer runs_differ(const TaskGraph& a, const ExecResult& ax, const TaskGraph& b, const ExecResult& bx) {
  RunsDiffer d;
  if (a.tasks.size() != b.tasks.size() || ax.spans.size() != a.tasks.size() || bx.spans.size() != b.tasks.size() ||
      a.ranks.size() != b.ranks.size()) {
    d.shape = true;
    return d;
  }
  for (std::size_t r = 0; r < a.ranks.size(); ++r) d.shape = d.shape || a.ranks[r].streams != b.ranks[r].streams;
  const std::vector<Placed> pa = placed(a, ax), pb = placed(b, bx);
  for (std::size_t i = 0; i < pa.size(); ++i) d.tasks += !same(a, pa[i], b, pb[i]);
  d.memory = ax.memory.size() != bx.memory.size();
  for (std::size_t r = 0; !d.memory && r < ax.memory.size(); ++r) {
    const RankMemoryPeak& x = ax.memory[r];
    const RankMemoryPeak& y = bx.memory[r];
    d.memory = x.at_peak.time != y.at_peak.time || x.at_peak.bytes != y.at_peak.bytes || x.timeline.size() != y.timeline.size();
    for (std::size_t k = 0; !d.memory && k < x.timeline.size(); ++k) {
      d.memory = x.timeline[k].time != y.timeline[k].time || x.timeline[k].bytes != y.timeline[k].bytes;
    }
  }
  return d;
}

}  // namespace dtsim::sim
