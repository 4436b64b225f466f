#include <catch2/catch.hpp>

#include <vector>

#include "dtsim/sim/engine.hpp"
#include "dtsim/sim/error.hpp"

using namespace dtsim;
using namespace dtsim::sim;

TEST_CASE("events run in time order", "[engine]") {
  EventQueue q;
  std::vector<int> order;
  q.schedule(30, [&] { order.push_back(3); });
  q.schedule(10, [&] { order.push_back(1); });
  q.schedule(20, [&] { order.push_back(2); });
  q.run();
  CHECK(order == std::vector<int>{1, 2, 3});
  CHECK(q.now() == 30);
  CHECK(q.processed() == 3);
}

TEST_CASE("events at the same time run in the order they were scheduled", "[engine]") {
  // (time, sequence) ordering: ties are deterministic, never heap-order dependent.
  EventQueue q;
  std::vector<int> order;
  for (int i = 0; i < 100; ++i) q.schedule(5, [&order, i] { order.push_back(i); });
  q.run();
  REQUIRE(order.size() == 100);
  for (int i = 0; i < 100; ++i) CHECK(order[i] == i);
}

TEST_CASE("events scheduled from callbacks at the current time run after those already queued", "[engine]") {
  EventQueue q;
  std::vector<int> order;
  q.schedule(0, [&] {
    order.push_back(1);
    q.schedule(0, [&] { order.push_back(3); });
  });
  q.schedule(0, [&] { order.push_back(2); });
  q.run();
  CHECK(order == std::vector<int>{1, 2, 3});
}

TEST_CASE("cancelled events do not run", "[engine]") {
  EventQueue q;
  int ran = 0;
  const EventId a = q.schedule(10, [&] { ran += 1; });
  q.schedule(20, [&] { ran += 10; });
  q.cancel(a);
  q.cancel(a);      // twice is harmless
  q.cancel(12345);  // unknown ids are ignored
  CHECK(q.pending() == 1);
  q.run();
  CHECK(ran == 10);
  CHECK(q.processed() == 1);
}

TEST_CASE("scheduling in the past is an internal error", "[engine]") {
  EventQueue q;
  q.schedule(100, [] {});
  q.run();
  CHECK_THROWS_AS(q.schedule(50, [] {}), InternalError);
}

TEST_CASE("the id of an event that has run cancels nothing, though a later event has taken its slot", "[engine]") {
  // Slots are reused once their event leaves the queue (engine.hpp); an id
  // names the event, not the slot.
  EventQueue q;
  int ran = 0;
  const EventId a = q.schedule(10, [&] { ran += 1; });
  q.run();
  const EventId b = q.schedule(20, [&] { ran += 10; });
  CHECK(b != a);
  q.cancel(a);
  CHECK(q.pending() == 1);
  q.run();
  CHECK(ran == 11);
}
