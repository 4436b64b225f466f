#include "dtsim/sim/engine.hpp"

#include <algorithm>
#include <functional>

#include "dtsim/sim/error.hpp"

namespace dtsim::sim {

// An EventId is the event's sequence number above its slot's index.
constexpr int kSlotBits = 24;
constexpr EventId kSlotMask = (EventId{1} << kSlotBits) - 1;

EventId EventQueue::schedule(TimeNs at, Callback cb) {
  DTSIM_ASSERT(at >= now_, "event scheduled in the past");
  std::uint32_t slot;
  if (free_.empty()) {
    DTSIM_ASSERT(slots_.size() <= kSlotMask, "more than 2^24 events pending at once");
    slot = static_cast<std::uint32_t>(slots_.size());
    slots_.emplace_back();
  } else {
    slot = free_.back();
    free_.pop_back();
  }
  const EventId seq = next_++;
  slots_[slot] = Slot{std::move(cb), seq};
  heap_.push_back(Entry{at, seq, slot});
  std::push_heap(heap_.begin(), heap_.end(), std::greater<>());
  ++live_;
  return seq << kSlotBits | slot;
}

void EventQueue::cancel(EventId id) {
  const EventId slot = id & kSlotMask;
  if (slot < slots_.size() && slots_[slot].seq == id >> kSlotBits && slots_[slot].cb) {
    slots_[slot].cb = nullptr;
    --live_;
  }
}

bool EventQueue::step() {
  while (!heap_.empty()) {
    std::pop_heap(heap_.begin(), heap_.end(), std::greater<>());
    const Entry e = heap_.back();
    heap_.pop_back();
    Callback cb = std::move(slots_[e.slot].cb);
    slots_[e.slot].cb = nullptr;
    free_.push_back(e.slot);
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
