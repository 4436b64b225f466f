// Process settings: the CPU share a rank binds to (Note [A rank's own cores]),
// the heap's huge pages (Note [Huge pages]) and the priority of Gloo's event
// loops (Note [Gloo's event loop]).
#include <catch2/catch.hpp>

#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <fstream>
#include <iterator>
#include <sstream>
#include <string>
#include <thread>
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

namespace {

// The VmFlags of the mapping of /proc/self/smaps that holds `address`, "" if none.
std::string vm_flags_at(std::uintptr_t address) {
  std::ifstream in("/proc/self/smaps");
  bool inside = false;
  for (std::string line; std::getline(in, line);) {
    unsigned long lo = 0, hi = 0;
    if (std::sscanf(line.c_str(), "%lx-%lx ", &lo, &hi) == 2 && line.find(':') > line.find(' ')) {
      inside = address >= lo && address < hi;
    } else if (inside && line.rfind("VmFlags:", 0) == 0) {
      return line.substr(8);
    }
  }
  return "";
}

}  // namespace

TEST_CASE("advise_huge_pages: the heap the simulator allocates from next asks for huge pages (Note [Huge pages])", "[process]") {
  // Only where the kernel gives huge pages to memory that asks for them: the
  // mode in brackets is "madvise" or "always".
  std::ifstream mode_file("/sys/kernel/mm/transparent_hugepage/enabled");
  std::string mode;
  std::getline(mode_file, mode);
  if (mode.find("[never]") != std::string::npos || mode.empty()) {
    WARN("transparent huge pages are off here (" << (mode.empty() ? "no /sys/kernel/mm/transparent_hugepage" : mode) << "): not checked");
    return;
  }
  // In a child: the settings are the whole process's.
  const pid_t child = ::fork();
  REQUIRE(child >= 0);
  if (child == 0) {
    dtsim::platform::retain_freed_memory();
    // Only where malloc takes its memory from the program break, as glibc's
    // does: a sanitizer's allocator (scripts/sanitize) or jemalloc does not,
    // and there the function leaves the heap alone (exit 64: not checked).
    {
      const auto was = reinterpret_cast<std::uintptr_t>(::sbrk(0));
      void* q = std::malloc(std::size_t{4} << 20);
      const auto at = reinterpret_cast<std::uintptr_t>(q), now = reinterpret_cast<std::uintptr_t>(::sbrk(0));
      std::free(q);
      if (q == nullptr || at < was - (std::size_t{64} << 20) || at >= now) ::_exit(64);
    }
    // The probe left tens of MiB free at the heap's top, as a front end's
    // start-up does: what comes next is carved from that free space, and
    // must still be marked "hg" (MADV_HUGEPAGE, by
    // Documentation/filesystems/proc.rst's VmFlags) over the 64 MiB asked
    // for, whole 2 MiB pages: its first and its last.
    dtsim::platform::advise_huge_pages(std::size_t{64} << 20);
    void* p = std::malloc(std::size_t{8} << 20);
    const auto at = reinterpret_cast<std::uintptr_t>(p);
    const bool first = vm_flags_at(at + (std::size_t{4} << 20)).find(" hg") != std::string::npos;
    const bool last = vm_flags_at(at + (std::size_t{60} << 20)).find(" hg") != std::string::npos;
    std::free(p);
    ::_exit(first && last ? 0 : 1 + !first + 2 * !last);
  }
  int status = 0;
  REQUIRE(::waitpid(child, &status, 0) == child);
  REQUIRE(WIFEXITED(status));
  if (WEXITSTATUS(status) == 64) {
    WARN("malloc does not take its memory from the program break here (a sanitizer's allocator?): not checked");
    return;
  }
  CHECK(WEXITSTATUS(status) == 0);  // 1 + 1: the first page not marked, + 2: the last
  // DTSIM_HUGE_PAGES=off (or 0, no, false): nothing allocated, nothing asked.
  for (const char* value : {"off", "0", "no", "false"}) {
    const pid_t off = ::fork();
    REQUIRE(off >= 0);
    if (off == 0) {
      ::setenv("DTSIM_HUGE_PAGES", value, 1);
      dtsim::platform::retain_freed_memory();
      const auto before = reinterpret_cast<std::uintptr_t>(::sbrk(0));
      dtsim::platform::advise_huge_pages(std::size_t{64} << 20);
      ::_exit(reinterpret_cast<std::uintptr_t>(::sbrk(0)) == before ? 0 : 1);
    }
    REQUIRE(::waitpid(off, &status, 0) == off);
    REQUIRE(WIFEXITED(status));
    CHECK(WEXITSTATUS(status) == 0);
  }
}

namespace {

// Thread `id`'s nice value, from field 19 of /proc/self/task/<id>/stat (after
// the command's closing parenthesis, which a name may itself contain).
int nice_of(int id) {
  std::ifstream in("/proc/self/task/" + std::to_string(id) + "/stat");
  std::string stat((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  std::istringstream rest(stat.substr(stat.rfind(')') + 2));
  std::string field;
  for (int i = 3; i <= 19; ++i) rest >> field;  // fields 3 (state) to 19 (nice)
  return std::stoi(field);
}

}  // namespace

TEST_CASE("lower_new_threads: only the threads started since the snapshot get the lowest priority (Note [Gloo's event loop])",
          "[process]") {
#ifndef __linux__
  SUCCEED("thread ids are read from /proc");
#else
  using namespace dtsim::platform;
  const int self = static_cast<int>(::gettid());
  const int base = nice_of(self);  // 0, or what a niced test runner gave the process
  std::atomic<int> early_id{0}, late_id{0};
  std::atomic<bool> stop{false};
  auto park = [&](std::atomic<int>& id) {
    id = static_cast<int>(::gettid());
    while (!stop) std::this_thread::sleep_for(std::chrono::milliseconds(1));
  };
  std::thread early(park, std::ref(early_id));
  while (early_id == 0) std::this_thread::yield();
  const std::vector<int> before = thread_ids();
  CHECK(std::is_sorted(before.begin(), before.end()));
  CHECK(std::find(before.begin(), before.end(), self) != before.end());
  CHECK(std::find(before.begin(), before.end(), early_id.load()) != before.end());
  std::thread late(park, std::ref(late_id));
  while (late_id == 0) std::this_thread::yield();
  // One thread started after the snapshot: it alone is lowered, to nice 19.
  CHECK(lower_new_threads(before) == 1);
  CHECK(nice_of(late_id) == kLowestPriority);
  CHECK(nice_of(early_id) == base);
  CHECK(nice_of(self) == base);
  stop = true;
  early.join();
  late.join();
#endif
}

TEST_CASE("lowers_event_loops: a bound rank, unless DTSIM_GLOO_LOOP=normal", "[process]") {
  using dtsim::platform::lowers_event_loops;
  ::unsetenv("DTSIM_GLOO_LOOP");
  CHECK(lowers_event_loops("cpu 1"));
  CHECK_FALSE(lowers_event_loops(""));  // not bound: the loop has other cores
  ::setenv("DTSIM_GLOO_LOOP", "normal", 1);
  CHECK_FALSE(lowers_event_loops("cpu 1"));
  ::unsetenv("DTSIM_GLOO_LOOP");
}

TEST_CASE("a CPU rank's share of the host: 3/4 of what is available over its local ranks (Note [A CPU rank's memory limit])",
          "[platform][process]") {
  constexpr long long GiB = 1LL << 30;
  CHECK(dtsim::platform::cpu_rank_memory_share(16 * GiB, 2) == 6 * GiB);  // 16 x 3/4 / 2
  CHECK(dtsim::platform::cpu_rank_memory_share(16 * GiB, 1) == 12 * GiB);
  CHECK(dtsim::platform::cpu_rank_memory_share(16 * GiB, 0) == 12 * GiB);  // no rank count: one
  CHECK(dtsim::platform::cpu_rank_memory_share(0, 2) == 0);                // nothing known: no limit
  // What the kernel says is free: more than nothing, less than the machine.
  const long long avail = dtsim::platform::host_memory_available();
  const long long pages = ::sysconf(_SC_PHYS_PAGES), page = ::sysconf(_SC_PAGE_SIZE);
  CHECK(avail > 0);
  CHECK(avail <= pages * page);
}
