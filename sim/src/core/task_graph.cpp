// The task graph's pooled memory operations (Note [Pooled memory operations]
// in task_graph.hpp).
#include "dtsim/sim/task_graph.hpp"

#include <limits>

#include "dtsim/sim/error.hpp"

namespace dtsim::sim {

void TaskGraph::set_memory(Task& t, std::span<const MemOp> start, std::span<const MemOp> end) {
  DTSIM_ASSERT(t.n_start == 0 && t.n_end == 0, "task '" + t.name + "' is given its memory operations twice");
  constexpr std::size_t kMost = std::numeric_limits<std::uint16_t>::max();
  DTSIM_ASSERT(start.size() <= kMost && end.size() <= kMost, "task '" + t.name + "' has too many memory operations");
  if (start.empty() && end.empty()) return;
  DTSIM_ASSERT(mem_ops.size() + start.size() + end.size() <= std::numeric_limits<std::uint32_t>::max(),
               "over 2^32 memory operations in one task graph");
  t.mem_first = static_cast<std::uint32_t>(mem_ops.size());
  t.n_start = static_cast<std::uint16_t>(start.size());
  t.n_end = static_cast<std::uint16_t>(end.size());
  for (const MemOp& op : start) mem_ops.push_back(op);
  for (const MemOp& op : end) mem_ops.push_back(op);
}

namespace {
/// The same view: the same literal (the cheap test, where most labels are
/// the pair named just before).
bool same(std::string_view a, std::string_view b) { return a.data() == b.data() && a.size() == b.size(); }
}  // namespace

std::uint16_t TaskGraph::label(std::string_view algorithm, std::string_view protocol) {
  // A handful of pairs in a graph ("ring"/"Simple", "p2p", "measured", ...),
  // each collective usually the pair of its kind before it.
  for (std::size_t i = cost_labels.size(); i-- > 0;) {
    if (same(cost_labels[i].first, algorithm) && same(cost_labels[i].second, protocol)) return static_cast<std::uint16_t>(i);
  }
  for (std::size_t i = 0; i < cost_labels.size(); ++i) {
    if (cost_labels[i].first == algorithm && cost_labels[i].second == protocol) return static_cast<std::uint16_t>(i);
  }
  DTSIM_ASSERT(cost_labels.size() < std::numeric_limits<std::uint16_t>::max(), "too many collective algorithms in one graph");
  cost_labels.emplace_back(algorithm, protocol);
  return static_cast<std::uint16_t>(cost_labels.size() - 1);
}

}  // namespace dtsim::sim
