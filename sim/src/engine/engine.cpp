#include "dtsim/sim/engine.hpp"

#include "dtsim/sim/error.hpp"

namespace dtsim::sim {

// Note [Event heap]
// The queue is a binary min-heap of (time, sequence) written out here, not
// std::push_heap / pop_heap with a comparator object: the pop moves the
// hole left by the first entry down along the earlier of each pair of
// children to a leaf, then lifts the last entry from there (Floyd's; most
// entries scheduled later belong near the leaves), each step one compare of
// two 64-bit keys where times differ. GPT-1T's 719k events (issue 26) spent
// a fifth of its prediction's instructions in the library's heap.

namespace {
/// Whether `a` runs before `b`: earlier, or as early and scheduled first.
template <typename E>
inline bool before(const E& a, const E& b) {
  return a.at < b.at || (a.at == b.at && a.seq < b.seq);
}

/// Puts `x` into the hole at `i` of heap `h`, or above it, moving down the
/// parents it runs before.
template <typename E>
inline void lift(E* h, std::size_t i, const E& x) {
  while (i > 0) {
    const std::size_t parent = (i - 1) / 2;
    if (!before(x, h[parent])) break;
    h[i] = h[parent];
    i = parent;
  }
  h[i] = x;
}
}  // namespace

EventId EventQueue::schedule(TimeNs at, Event e) {
  DTSIM_ASSERT(at >= now_, "event scheduled in the past");
  const EventId seq = state_.size();
  state_.push_back(kQueued);
  const Entry x{at, seq, e};
  heap_.push_back(x);
  lift(heap_.data(), heap_.size() - 1, x);
  ++live_;
  return seq;
}

void EventQueue::cancel(EventId id) {
  if (id < state_.size() && state_[id] == kQueued) {
    state_[id] = kCancelled;
    --live_;
  }
}

std::optional<Event> EventQueue::next() {
  while (!heap_.empty()) {
    Entry* h = heap_.data();
    const Entry top = h[0];
    const Entry last = heap_.back();
    heap_.pop_back();
    const std::size_t n = heap_.size();
    if (n > 0) {
      // Floyd's: the hole at the root down to a leaf, then `last` up into it.
      std::size_t i = 0;
      for (std::size_t c = 1; c < n; c = 2 * i + 1) {
        if (c + 1 < n && before(h[c + 1], h[c])) ++c;
        h[i] = h[c];
        i = c;
      }
      lift(h, i, last);
    }
    if (state_[top.seq] != kQueued) continue;  // cancelled
    state_[top.seq] = kTaken;
    --live_;
    now_ = top.at;
    ++processed_;
    return top.e;
  }
  return std::nullopt;
}

}  // namespace dtsim::sim
