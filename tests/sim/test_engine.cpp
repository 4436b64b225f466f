#include <catch2/catch.hpp>

#include <cstdint>
#include <map>
#include <utility>
#include <vector>

#include "dtsim/sim/engine.hpp"
#include "dtsim/sim/error.hpp"

using namespace dtsim;
using namespace dtsim::sim;

namespace {

/// The args of the events, in the order next() gives them.
std::vector<int> drain(EventQueue& q) {
  std::vector<int> order;
  while (const auto e = q.next()) order.push_back(e->arg);
  return order;
}

}  // namespace

TEST_CASE("events run in time order", "[engine]") {
  EventQueue q;
  q.schedule(30, {0, 3});
  q.schedule(10, {0, 1});
  q.schedule(20, {0, 2});
  CHECK(drain(q) == std::vector<int>{1, 2, 3});
  CHECK(q.now() == 30);
  CHECK(q.processed() == 3);
}

TEST_CASE("events at the same time run in the order they were scheduled", "[engine]") {
  // (time, sequence) ordering: ties are deterministic, never heap-order dependent.
  EventQueue q;
  for (int i = 0; i < 100; ++i) q.schedule(5, {0, i});
  const std::vector<int> order = drain(q);
  REQUIRE(order.size() == 100);
  for (int i = 0; i < 100; ++i) CHECK(order[i] == i);
}

TEST_CASE("events scheduled while running at the current time run after those already queued", "[engine]") {
  EventQueue q;
  std::vector<int> order;
  q.schedule(0, {0, 1});
  q.schedule(0, {0, 2});
  while (const auto e = q.next()) {
    order.push_back(e->arg);
    if (e->arg == 1) q.schedule(0, {0, 3});
  }
  CHECK(order == std::vector<int>{1, 2, 3});
}

TEST_CASE("an event carries its kind and its arg", "[engine]") {
  EventQueue q;
  q.schedule(7, {2, -5});
  const auto e = q.next();
  REQUIRE(e.has_value());
  CHECK(e->kind == 2);
  CHECK(e->arg == -5);
  CHECK_FALSE(q.next().has_value());
}

TEST_CASE("cancelled events do not run", "[engine]") {
  EventQueue q;
  const EventId a = q.schedule(10, {0, 1});
  q.schedule(20, {0, 10});
  q.cancel(a);
  q.cancel(a);      // twice is harmless
  q.cancel(12345);  // unknown ids are ignored
  CHECK(q.pending() == 1);
  CHECK(drain(q) == std::vector<int>{10});
  CHECK(q.processed() == 1);
  CHECK(q.pending() == 0);
}

TEST_CASE("scheduling in the past is an internal error", "[engine]") {
  EventQueue q;
  q.schedule(100, {});
  drain(q);
  CHECK_THROWS_AS(q.schedule(50, {}), InternalError);
}

TEST_CASE("the id of an event that has run cancels nothing", "[engine]") {
  EventQueue q;
  const EventId a = q.schedule(10, {0, 1});
  CHECK(drain(q) == std::vector<int>{1});
  const EventId b = q.schedule(20, {0, 10});
  CHECK(b != a);
  q.cancel(a);
  CHECK(q.pending() == 1);
  CHECK(drain(q) == std::vector<int>{10});
}

TEST_CASE("the queue hands events out by (time, order scheduled), as a sorted list of them would", "[engine]") {
  // A reference: every event live, ordered by (time, sequence), the queue's
  // contract (engine.hpp). Random schedules, in bursts at one time
  // and spread over 2^10 to 2^61 ns ahead, cancellations (some of events run
  // already), and scheduling while draining at the current time.
  std::uint64_t s = 0x9E3779B97F4A7C15ull;
  auto rnd = [&s] {
    s ^= s << 13;
    s ^= s >> 7;
    s ^= s << 17;
    return s;
  };
  for (int round = 0; round < 40; ++round) {
    EventQueue q;
    std::map<std::pair<TimeNs, EventId>, int> live;  // (time, id) -> arg
    std::vector<EventId> ids;
    TimeNs now = 0;
    int arg = 0;
    auto add = [&](TimeNs at) {
      const EventId id = q.schedule(at, {0, arg});
      live[{at, id}] = arg++;
      ids.push_back(id);
    };
    std::size_t taken = 0;
    for (int step = 0; step < 3000; ++step) {
      const std::uint64_t r = rnd() % 10;
      if (r < 5) {
        const int spread = 10 + static_cast<int>(rnd() % 52);
        const TimeNs ahead = rnd() % 3 == 0 ? 0 : static_cast<TimeNs>(rnd() % (std::uint64_t{1} << spread));
        const int burst = 1 + static_cast<int>(rnd() % 4);
        for (int k = 0; k < burst; ++k) add(now + ahead);
      } else if (r < 6 && !ids.empty()) {
        const EventId id = ids[rnd() % ids.size()];
        q.cancel(id);
        for (auto it = live.begin(); it != live.end(); ++it) {
          if (it->first.second == id) {
            live.erase(it);
            break;
          }
        }
      } else {
        const auto e = q.next();
        if (live.empty()) {
          CHECK_FALSE(e.has_value());
          continue;
        }
        REQUIRE(e.has_value());
        const auto first = live.begin();
        CHECK(e->arg == first->second);
        CHECK(q.now() == first->first.first);
        now = first->first.first;
        live.erase(first);
        ++taken;
      }
      CHECK(q.pending() == live.size());
    }
    while (const auto e = q.next()) {
      REQUIRE_FALSE(live.empty());
      CHECK(e->arg == live.begin()->second);
      live.erase(live.begin());
      ++taken;
    }
    CHECK(live.empty());
    CHECK(q.processed() == taken);
  }
}

TEST_CASE("after the last events were cancelled the queue takes an event at the current time", "[engine]") {
  EventQueue q;
  q.schedule(10, {0, 1});
  const EventId later = q.schedule(1000, {0, 2});
  CHECK(q.next()->arg == 1);
  q.cancel(later);
  CHECK_FALSE(q.next().has_value());
  q.schedule(10, {0, 3});  // now is still 10: not in the past
  q.schedule(11, {0, 4});
  CHECK(drain(q) == std::vector<int>{3, 4});
}
