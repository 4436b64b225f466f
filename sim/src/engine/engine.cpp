#include "dtsim/sim/engine.hpp"

#include <algorithm>
#include <functional>

#include "dtsim/sim/error.hpp"

namespace dtsim::sim {

EventId EventQueue::schedule(TimeNs at, Event e) {
  DTSIM_ASSERT(at >= now_, "event scheduled in the past");
  const EventId seq = state_.size();
  state_.push_back(kQueued);
  heap_.push_back(Entry{at, seq, e});
  std::push_heap(heap_.begin(), heap_.end(), std::greater<>());
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
    std::pop_heap(heap_.begin(), heap_.end(), std::greater<>());
    const Entry top = heap_.back();
    heap_.pop_back();
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
