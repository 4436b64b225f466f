#include "dtsim/sim/engine.hpp"

#include <algorithm>
#include <functional>

#include "dtsim/sim/error.hpp"

namespace dtsim::sim {

EventId EventQueue::schedule(TimeNs at, Callback cb) {
  DTSIM_ASSERT(at >= now_, "event scheduled in the past");
  const EventId id = callbacks_.size();
  callbacks_.push_back(std::move(cb));
  heap_.push_back(Entry{at, id});
  std::push_heap(heap_.begin(), heap_.end(), std::greater<>());
  ++live_;
  return id;
}

void EventQueue::cancel(EventId id) {
  if (id < callbacks_.size() && callbacks_[id]) {
    callbacks_[id] = nullptr;
    --live_;
  }
}

bool EventQueue::step() {
  while (!heap_.empty()) {
    std::pop_heap(heap_.begin(), heap_.end(), std::greater<>());
    const Entry e = heap_.back();
    heap_.pop_back();
    Callback cb = std::move(callbacks_[e.seq]);
    callbacks_[e.seq] = nullptr;
    if (!cb) continue;  // cancelled
    --live_;
    now_ = e.at;
    ++processed_;
    cb();
    return true;
  }
  return false;
}

void EventQueue::run() {
  while (step()) {
  }
}

}  // namespace dtsim::sim
