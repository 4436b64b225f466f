#include <catch2/catch.hpp>

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
