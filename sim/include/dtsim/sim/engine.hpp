#pragma once
// The discrete-event core: a binary-heap event queue ordered by (time,
// sequence number), so equal-time events come out in the order they were
// scheduled and every run is reproducible bit for bit (ns-3's scheduler does
// the same). An event is two small integers, what to do and to what, that
// its owner dispatches (Note [Plain events]); cancellation marks it and
// next() skips it. No global state: each simulation owns its queue.
//
// Note [Plain events]
// A pipeline's simulation runs about 1.6 events a task, 720k for GPT-1T on
// 3072 GPUs (issue 26). Each had been a std::function in a slot of its own,
// made, moved out and destroyed around one indirect call: with the heap's
// work, a sixth of the prediction's instructions under callgrind. What an
// executor schedules is always one of a few actions on one task or link, so
// an event is that pair, kept in the heap entry itself. The heap is written out
// (Note [Event heap] in engine.cpp).

#include <cstdint>
#include <optional>
#include <vector>

#include "dtsim/sim/units.hpp"

namespace dtsim::sim {

/// Identifies a scheduled event (for cancellation): its sequence number.
using EventId = std::uint64_t;

/// What an event asks of its owner: an action (`kind`, the owner's own
/// numbering) on a thing (`arg`: a task, a link).
struct Event {
  std::int32_t kind = 0;
  std::int32_t arg = 0;
};

/// Time-ordered event queue.
class EventQueue {
 public:
  /// Schedules `e` at absolute time `at` (>= now()).
  EventId schedule(TimeNs at, Event e);
  /// Marks an event as cancelled; next() will skip it. Ids of events that
  /// have come out of next() or are unknown are ignored.
  void cancel(EventId id);
  /// Takes the next live event, making its time now(); nothing once none is left.
  std::optional<Event> next();
  /// The time of the event being (or last) run.
  TimeNs now() const { return now_; }
  /// Events taken so far (cancelled ones excluded).
  std::uint64_t processed() const { return processed_; }
  /// Live events still queued.
  std::size_t pending() const { return live_; }

 private:
  struct Entry {
    TimeNs at;
    EventId seq;
    Event e;
  };
  enum : std::uint8_t { kQueued, kCancelled, kTaken };
  std::vector<Entry> heap_;
  std::vector<std::uint8_t> state_;  ///< by sequence number
  TimeNs now_ = 0;
  std::uint64_t processed_ = 0;
  std::size_t live_ = 0;
};

}  // namespace dtsim::sim
