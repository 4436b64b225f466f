// Process settings: the CPU share a rank binds to (Note [A rank's own cores]).
#include <catch2/catch.hpp>

#include <vector>

#include "dtsim/platform/process.hpp"

using dtsim::platform::cpu_share;

TEST_CASE("cpu_share: n ranks on equal, contiguous, disjoint shares", "[process]") {
  // 2 ranks, 2 CPUs (this CI machine): one CPU each.
  CHECK(cpu_share({0, 1}, 2, 0, 2) == std::vector<int>{0});
  CHECK(cpu_share({0, 1}, 2, 1, 2) == std::vector<int>{1});
  // 3 ranks, 8 CPUs: floor(8 / 3) = 2 CPUs each, from the front; 6 and 7 stay free.
  CHECK(cpu_share({0, 1, 2, 3, 4, 5, 6, 7}, 8, 0, 3) == std::vector<int>{0, 1});
  CHECK(cpu_share({0, 1, 2, 3, 4, 5, 6, 7}, 8, 2, 3) == std::vector<int>{4, 5});
  // The allowed CPUs as listed, gaps and all (a cgroup's cpuset 2,3,8,9 of 4 online).
  CHECK(cpu_share({2, 3, 8, 9}, 4, 1, 2) == std::vector<int>{8, 9});
}

TEST_CASE("cpu_share: more ranks than CPUs go round the CPUs", "[process]") {
  // 4 ranks on 2 CPUs: ranks 0 and 2 on CPU 0, ranks 1 and 3 on CPU 1.
  CHECK(cpu_share({0, 1}, 2, 2, 4) == std::vector<int>{0});
  CHECK(cpu_share({0, 1}, 2, 3, 4) == std::vector<int>{1});
}

TEST_CASE("cpu_share: leaves the binding alone where it is not ours to set", "[process]") {
  CHECK(cpu_share({0, 1}, 2, 0, 1).empty());   // one rank: all of it
  CHECK(cpu_share({0, 1}, 2, 2, 2).empty());   // index outside 0..count-1
  CHECK(cpu_share({0, 1}, 2, -1, 2).empty());
  CHECK(cpu_share({1}, 2, 0, 2).empty());      // bound already (mpirun, taskset): 1 of 2 online CPUs
  CHECK(cpu_share({}, 2, 0, 2).empty());
}
