// SmallVector (Note [Inline dependencies] in task_graph.hpp): the lists a
// task keeps, inline up to N and on the heap past it, behave as a vector.
#include <catch2/catch.hpp>

#include <algorithm>
#include <vector>

#include "dtsim/sim/error.hpp"
#include "dtsim/sim/small_vector.hpp"
#include "dtsim/sim/task_graph.hpp"

using namespace dtsim::sim;

namespace {

std::vector<int> as_vector(const SmallVector<int, 3>& v) { return {v.begin(), v.end()}; }

}  // namespace

TEST_CASE("SmallVector keeps N inline and grows past it as a vector does", "[sim]") {
  SmallVector<int, 3> v;
  CHECK(v.empty());
  CHECK(v.capacity() == 3);
  for (int i = 1; i <= 3; ++i) v.push_back(10 * i);
  CHECK(v.capacity() == 3);  // still inline
  v.push_back(40);           // the fourth moves it to the heap, doubled
  CHECK(v.capacity() == 6);
  CHECK(as_vector(v) == std::vector<int>{10, 20, 30, 40});
  CHECK(v.front() == 10);
  CHECK(v.back() == 40);
  // Pushing its own element while it grows reads it before the move.
  SmallVector<int, 3> w{1, 2, 3};
  w.push_back(w[0]);
  CHECK(as_vector(w) == std::vector<int>{1, 2, 3, 1});
  v.pop_back();
  CHECK(v.size() == 3);
  v.clear();
  CHECK(v.empty());
}

TEST_CASE("SmallVector copies, moves, inserts and erases", "[sim]") {
  const SmallVector<int, 3> small{1, 2};
  const SmallVector<int, 3> big{1, 2, 3, 4, 5};
  for (const auto* src : {&small, &big}) {
    SmallVector<int, 3> copy = *src;
    CHECK(copy == *src);
    SmallVector<int, 3> moved = std::move(copy);
    CHECK(moved == *src);
    CHECK(copy.empty());  // NOLINT(bugprone-use-after-move): moved-from is empty
    SmallVector<int, 3> assigned{9};
    assigned = *src;
    CHECK(assigned == *src);
    assigned = SmallVector<int, 3>{7};
    CHECK(as_vector(assigned) == std::vector<int>{7});
  }
  // From a std::vector, as the lowering's builders pass them.
  const std::vector<int> from{4, 5, 6, 7};
  CHECK(as_vector(SmallVector<int, 3>(from)) == from);
  // insert in the middle, past the inline room; erase what remove_if leaves.
  SmallVector<int, 3> v{1, 5};
  const int mid[] = {2, 3, 4};
  v.insert(v.begin() + 1, std::begin(mid), std::end(mid));
  CHECK(as_vector(v) == std::vector<int>{1, 2, 3, 4, 5});
  v.erase(std::remove_if(v.begin(), v.end(), [](int x) { return x % 2 == 0; }), v.end());
  CHECK(as_vector(v) == std::vector<int>{1, 3, 5});
  CHECK_FALSE(v == SmallVector<int, 3>{1, 3});
}

TEST_CASE("a task's dependencies are inline and its memory operations pooled in its graph", "[sim]") {
  Task t;
  t.deps = {1, 2, 3, 4};
  CHECK(t.deps.capacity() == 4);
  // Note [Pooled memory operations]: each task's as it starts, then as it ends.
  TaskGraph g;
  const MemOps three{{MemCategory::kActivations, 10}, {MemCategory::kGradients, 20}, {MemCategory::kBuffers, 30}};
  CHECK(three.capacity() == 4);  // gathered inline
  const TaskId a = g.add(Task{}, three, MemOps{{MemCategory::kActivations, -10}});
  const TaskId none = g.add(Task{});
  const TaskId b = g.add(Task{}, MemOps{}, MemOps{{MemCategory::kBuffers, -30}, {MemCategory::kGradients, -20}});
  REQUIRE(g.mem_ops.size() == 6);
  CHECK(g.on_start(g.tasks[a]).size() == 3);
  CHECK(g.on_start(g.tasks[a])[1].bytes == 20);
  REQUIRE(g.on_end(g.tasks[a]).size() == 1);
  CHECK(g.on_end(g.tasks[a])[0].bytes == -10);
  CHECK(g.on_start(g.tasks[none]).empty());
  CHECK(g.on_end(g.tasks[none]).empty());
  CHECK(g.on_start(g.tasks[b]).empty());
  REQUIRE(g.on_end(g.tasks[b]).size() == 2);
  CHECK(g.on_end(g.tasks[b])[0].category == MemCategory::kBuffers);
  CHECK(g.on_end(g.tasks[b])[1].bytes == -20);
  // A task is given its operations once.
  CHECK_THROWS_AS(g.set_memory(g.tasks[a], three, {}), dtsim::InternalError);
}
