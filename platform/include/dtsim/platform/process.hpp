#pragma once
// Process-wide settings for long runs (searches, training steps): the
// allocator, and the CPUs a rank runs on.

#include <cstddef>

namespace dtsim::platform {

/// Keeps freed memory inside the process (Note [Freed memory stays]): glibc
/// otherwise returns large blocks to the kernel on every free and the next
/// use faults them in again. Call it once, early; a no-op without glibc.
void retain_freed_memory();

/// Note [Huge pages] (src/process.cpp): allocates `bytes` of virtual memory
/// from the heap, asks the kernel for transparent huge pages over it and
/// frees it, for a simulator that walks large task graphs. Call it once,
/// after retain_freed_memory(); a no-op where the heap cannot grow, where the
/// environment sets DTSIM_HUGE_PAGES=off (or 0, no, false), or without
/// glibc and Linux.
void advise_huge_pages(std::size_t bytes);

/// The heap of a simulator front end (predict, search, the explorer, the
/// benches): retain_freed_memory(), then advise_huge_pages(512 MiB).
void prepare_simulator_heap();

/// Bytes this process may still take: the kernel's MemAvailable, or less
/// where its cgroup (v2) allows less (memory.max less memory.current);
/// 0 where neither can be read.
long long host_memory_available();

/// Note [A CPU rank's memory limit] (src/process.cpp): what each of
/// `local_ranks` CPU ranks of dtsim validate may allocate without
/// --mem-limit, 3/4 of `available` over them; 0 where `available` is 0.
long long cpu_rank_memory_share(long long available, int local_ranks);

}  // namespace dtsim::platform

#include <string>
#include <vector>

namespace dtsim::platform {

/// Note [A rank's own cores] (src/process.cpp): the CPUs of share `index` of
/// `count` equal, contiguous shares of `allowed` (the CPUs this process may
/// run on, ascending). Where there are fewer CPUs than shares, share i gets
/// CPU allowed[i % size]. Empty (leave the binding alone) when count < 2,
/// index is outside [0, count), or `allowed` is narrower than the `online`
/// CPUs: someone (mpirun, srun, taskset) bound the process already.
std::vector<int> cpu_share(const std::vector<int>& allowed, int online, int index, int count);

/// Binds this process's calling thread, and the threads it starts after, to
/// cpu_share(its allowed CPUs, the online CPUs, index, count). Returns what
/// it did in words ("cpu 1", "cpus 0,1,2,3") or "" where it left things alone
/// (also where the environment sets DTSIM_BIND=none, or without Linux).
std::string bind_cpu_share(int index, int count);

/// Note [Busy waits] (runtime/src/comm.cpp): whether a rank bound as
/// `binding` (bind_cpu_share's answer) polls its collectives: when it is
/// bound and the environment does not set DTSIM_WAIT=block.
bool polls_collectives(const std::string& binding);

/// Note [Gloo's event loop] (src/process.cpp): whether a rank bound as
/// `binding` lowers the priority of its Gloo devices' event loops: when it
/// is bound and the environment does not set DTSIM_GLOO_LOOP=normal.
bool lowers_event_loops(const std::string& binding);

/// The ids of this process's threads now, ascending (empty without Linux).
std::vector<int> thread_ids();

/// The nice value lower_new_threads() gives: the lowest priority.
inline constexpr int kLowestPriority = 19;

/// Note [Gloo's event loop]: gives every thread of this process that is not
/// in `before` (thread_ids() taken earlier) the nice value kLowestPriority,
/// and returns how many it lowered (0 without Linux).
int lower_new_threads(const std::vector<int>& before);

/// Note [Gloo's event loop]: runs `start` (what starts a Gloo device) and,
/// where `on`, gives the threads it started the lowest priority; returns
/// how many it lowered.
template <typename Start>
int lower_threads_started_by(bool on, Start&& start) {
  if (!on) {
    start();
    return 0;
  }
  const std::vector<int> before = thread_ids();
  start();
  return lower_new_threads(before);
}

}  // namespace dtsim::platform
