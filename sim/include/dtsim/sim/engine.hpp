#pragma once
// The discrete-event core: a binary-heap event queue ordered by (time,
// sequence number), so equal-time events run in the order they were scheduled
// and every run is reproducible bit for bit (ns-3's scheduler does the same).
// Cancellation marks an event; the loop skips it. A callback lives in a
// slot that the next event scheduled reuses once it has run, so the queue
// holds as many as are pending, not one for every event of the run. No
// global state: each simulation owns its queue.

#include <cstdint>
#include <functional>
#include <vector>

#include "dtsim/sim/units.hpp"

namespace dtsim::sim {

/// Identifies a scheduled event (for cancellation).
using EventId = std::uint64_t;

/// Time-ordered event queue.
class EventQueue {
 public:
  using Callback = std::function<void()>;

  /// Schedules `cb` at absolute time `at` (>= now()).
  EventId schedule(TimeNs at, Callback cb);
  /// Marks an event as cancelled; it will not run. Unknown ids are ignored.
  void cancel(EventId id);
  /// Runs events until the queue is empty.
  void run();
  /// Runs the next live event; false if none is left.
  bool step();
  /// The time of the event being (or last) run.
  TimeNs now() const { return now_; }
  /// Events run so far (cancelled ones excluded).
  std::uint64_t processed() const { return processed_; }
  /// Live events still queued.
  std::size_t pending() const { return live_; }

 private:
  struct Entry {
    TimeNs at;
    EventId seq;
    std::uint32_t slot;
    bool operator>(const Entry& o) const { return at != o.at ? at > o.at : seq > o.seq; }
  };
  struct Slot {
    Callback cb;     ///< empty once run or cancelled
    EventId seq = 0; ///< the event it holds
  };
  std::vector<Entry> heap_;
  std::vector<Slot> slots_;
  std::vector<std::uint32_t> free_;  ///< slots whose event has left the heap
  EventId next_ = 0;
  TimeNs now_ = 0;
  std::uint64_t processed_ = 0;
  std::size_t live_ = 0;
};

}  // namespace dtsim::sim
