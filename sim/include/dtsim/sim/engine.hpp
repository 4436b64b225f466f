#pragma once
// The discrete-event core: a binary-heap event queue ordered by (time,
// sequence number), so equal-time events run in the order they were scheduled
// and every run is reproducible bit for bit (ns-3's scheduler does the same).
// Cancellation marks an event; the loop skips it. No global state: each
// simulation owns its queue.

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
    bool operator>(const Entry& o) const { return at != o.at ? at > o.at : seq > o.seq; }
  };
  std::vector<Entry> heap_;
  std::vector<Callback> callbacks_;  // indexed by seq; empty once run or cancelled
  TimeNs now_ = 0;
  std::uint64_t processed_ = 0;
  std::size_t live_ = 0;
};

}  // namespace dtsim::sim
