#include "dtsim/platform/process.hpp"

#include <limits>  // first: any libc header defines __GLIBC__

#ifdef __GLIBC__
#include <malloc.h>
#endif
#ifdef __linux__
#include <dirent.h>
#include <sched.h>
#include <sys/mman.h>
#include <sys/resource.h>
#include <unistd.h>
#endif

#include <algorithm>
#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <string>

namespace dtsim::platform {

// Note [Freed memory stays]
// glibc serves blocks over its mmap threshold (128 KiB, rising to at most
// 32 MiB) with mmap and unmaps them on free, and trims the heap's top once
// 128 KiB of it is free. A program that allocates and frees the same large
// buffers over and over then faults them in again, one 4 KiB page at a time:
//  - dtsim search: thousands of simulations build task graphs of many MB;
//    the faults doubled the search's time (sys 13 s of 39 s).
//  - the explorer (dtsim-gui) predicts again at every knob change: GPT-1T's
//    prediction in a loop faulted about 20k pages each time and took 10% longer
//    (bench/README.md, issue 26).
//  - LibTorch's CPU allocator is posix_memalign/free with no cache, so each
//    training step faulted its activations in again: bert-tiny (a single
//    process, 10 steps) took a median 390 ms with steps spread over 2x, and
//    157 ms, spread 15%, with the settings below. A GPU run never pays this
//    (the caching allocator keeps its blocks), nor does a CPU run under
//    jemalloc or tcmalloc, so the validation runtime and the calibration
//    keep freed memory alike; the peaks they report are unchanged (the
//    counting allocator counts requests).
// So: no mmap for large blocks (M_MMAP_MAX 0; a larger M_MMAP_THRESHOLD is
// capped at 32 MiB), and no trimming.
void retain_freed_memory() {
#ifdef __GLIBC__
  ::mallopt(M_MMAP_MAX, 0);
  ::mallopt(M_TRIM_THRESHOLD, std::numeric_limits<int>::max());
  ::mallopt(M_TOP_PAD, 64 << 20);
#endif
}

// Note [Huge pages]
// A large simulation walks a task graph of hundreds of megabytes (GPT-1T on
// 3072 GPUs: 458k tasks, 137 MB resident) in no order the hardware can
// prefetch, and with 4 KiB pages most of its loads miss the TLB as well as
// the cache. Where the kernel gives transparent huge pages only to memory
// that asks for them (/sys/kernel/mm/transparent_hugepage/enabled at
// "madvise", as on the AMD EPYC VM of 2026-12-02), the heap never asks:
// glibc would (its tunable glibc.malloc.hugetlb=1), but a tunable is read
// from the environment at start-up only. So the simulator's front ends
// (prepare_simulator_heap) allocate 512 MiB once (virtual memory; nothing
// is touched), mark that range MADV_HUGEPAGE, and free it into the heap, which with Note [Freed memory stays] is never trimmed: the first
// 2 MiB a range touches comes as one page. Measured there (bench/README.md, "Huge pages"), without and with
// 512 MiB advised, alternated, pinned to one core:
//  - dtsim_bench_pipeline, GPT-1T in-process, medians of 7: 157.2-163.2 ->
//    143.2-147.4 ms (-9%), gpt-175b with every micro-batch simulated
//    11.07-11.37 -> 9.84-10.45 ms; earlier the same hour 189.1-191.7 ->
//    148.1-150.9 ms (medians of 5);
//  - `dtsim predict` of GPT-1T, a whole process faulting its graph in:
//    1.02 and 0.89 s -> 0.54 and 0.24 s, 9-12 MB more resident; gpt2's
//    start-up unchanged (41.5-41.7 ms against 41.7-42.3 here);
//  - `dtsim search` of gpt-175b on 64 GPUs, one thread: 1.45 and 1.00 s ->
//    1.05 and 0.71 s; on 1024 GPUs, two threads: 4.64-4.68 -> 4.28-4.36 s
//    (the workers' own arenas are not covered), the same output.
// Where the kernel gives huge pages to everything or to nothing this
// changes nothing. Where memory is fragmented, a fault in the range may
// wait for the kernel to compact a huge page (its defrag setting), the
// price glibc's tunable pays too: DTSIM_HUGE_PAGES=off in the environment
// leaves the heap as it is. The validation runtime and calibration do not
// call it: their ranks' memory is what they measure.
void advise_huge_pages(std::size_t bytes) {
#if defined(__GLIBC__) && defined(__linux__) && defined(MADV_HUGEPAGE)
  // DTSIM_HUGE_PAGES=off (or 0, no, false) leaves the heap as it is.
  if (const char* v = std::getenv("DTSIM_HUGE_PAGES"); v != nullptr) {
    for (const char* off : {"off", "0", "no", "false"}) {
      if (std::strcmp(v, off) == 0) return;
    }
  }
  constexpr std::uintptr_t kHuge = std::uintptr_t{2} << 20;
  void* block = std::malloc(bytes);
  if (block == nullptr) return;  // no room (ulimit -v): leave the heap as it is
  // The whole huge pages of the block, wherever glibc carved it: from free
  // space the heap already had at its top, or from the break it moved.
  // Freed, it joins the top of the heap the next allocations come from.
  const auto lo = reinterpret_cast<std::uintptr_t>(block);
  const std::uintptr_t a = (lo + kHuge - 1) / kHuge * kHuge, b = (lo + bytes) / kHuge * kHuge;
  if (b > a) ::madvise(reinterpret_cast<void*>(a), b - a, MADV_HUGEPAGE);
  std::free(block);
#else
  (void)bytes;
#endif
}

void prepare_simulator_heap() {
  retain_freed_memory();
  advise_huge_pages(std::size_t{512} << 20);
}

long long host_memory_available() {
  long long avail = 0;
  std::ifstream info("/proc/meminfo");
  for (std::string key; info >> key;) {
    long long kb = 0;
    info >> kb;
    info.ignore(std::numeric_limits<std::streamsize>::max(), '\n');
    if (key == "MemAvailable:") {
      avail = kb * 1024;
      break;
    }
  }
  // A container's cgroup may allow less than the host has free.
  std::ifstream max_file("/sys/fs/cgroup/memory.max"), current_file("/sys/fs/cgroup/memory.current");
  long long max = 0, current = 0;
  if ((max_file >> max) && (current_file >> current) && max > current) {  // "max" (no limit) reads as nothing
    avail = avail > 0 ? std::min(avail, max - current) : max - current;
  }
  return avail;
}

// Note [A CPU rank's memory limit]
// A CPU has no device memory to run out of: a plan too large for the host
// (a model's whole context, a checkpoint's size) would have dtsim
// validate's ranks page and then meet the kernel's OOM killer, which may
// take another program (deepseek-v2-lite on this 24 GiB VM: two minutes of
// paging, then SIGKILL at 24.4 GB resident). Without --mem-limit each rank
// may take its share of what the host (or its cgroup) has available as it
// starts, and an allocation past it fails as a GPU's would: "out of
// memory" in one line, the run stopped, nothing else touched. Three
// quarters of it: the rest of a rank is not tensors (its libraries, Gloo's
// buffers, the heap's freed blocks). dtsim validate refuses before any
// rank starts a plan whose predicted peak is over twice that share: it
// would only run out.
long long cpu_rank_memory_share(long long available, int local_ranks) {
  return available <= 0 ? 0 : available / 4 * 3 / std::max(1, local_ranks);
}

// Note [A rank's own cores]
// Left to the scheduler, two ranks on this 2-vCPU VM do not keep a core
// each: a rank's Gloo threads wake on whichever core is free, the ranks
// trade cores, and one rank runs behind the other for a whole run. Six
// alternating runs, the same profile: gpt2-tiny DDP took 43.6, 43.6 and
// 44.1 ms with each rank bound to its own core and 45.4, 47.0 and 44.9 ms
// without; bilstm-tiny DDP 15.3 and 16.9 ms bound (and 22.7 in a slow
// spell) against 19.3, 19.1 and 15.7, and its ranks' compute 0-12% apart
// bound against 3-20% without. Training launchers bind ranks for the same
// reason (mpirun binds each rank to a core by default, torchrun to its
// NUMA node on request). So the CPU validation runtime binds local rank i
// of n to the i-th of n equal shares of the CPUs it may use, and
// calibration binds its concurrent copies and its Gloo bench ranks alike,
// so that a profile prices the ranks as validation runs them. A process an
// outer launcher bound already (its CPUs narrower than the online ones)
// keeps that binding; DTSIM_BIND=none turns binding off.
std::vector<int> cpu_share(const std::vector<int>& allowed, int online, int index, int count) {
  const int n = static_cast<int>(allowed.size());
  if (count < 2 || index < 0 || index >= count || n == 0 || n < online) return {};
  if (n < count) return {allowed[static_cast<std::size_t>(index % n)]};
  const int per = n / count;
  return {allowed.begin() + index * per, allowed.begin() + (index + 1) * per};
}

bool polls_collectives(const std::string& binding) {
  const char* mode = std::getenv("DTSIM_WAIT");
  return !binding.empty() && (mode == nullptr || std::strcmp(mode, "block") != 0);
}

// Note [Gloo's event loop]
// A Gloo TCP device runs one thread, its event loop, that reads and writes
// its pairs' sockets (gloo/transport/tcp/loop.cc), and a collective's own
// thread (a ProcessGroupGloo worker) writes a message in place where the
// socket takes it, holding the pair's mutex throughout (Pair::send,
// sendAsyncMode). The loop handles a socket's events only if it gets that
// mutex at once: if not, it returns to epoll_wait, which, level-triggered,
// hands it the same event again at once (Pair::handleEvents, try_to_lock;
// gloo 2022-05-18, Debian's). On a rank bound to one core (Note [A rank's
// own cores]) the loop, woken by the peer's bytes, preempts the worker
// that is writing (the scheduler favours a thread waking), then spins on
// the mutex the worker holds until the scheduler's next tick takes the
// core back (CONFIG_HZ=250: up to 4 ms). Seen with `perf sched timehist`
// in an mlp DDP run (2 ranks, one core each, 2.7 MB of gradients): the
// loop ran 3.5-5.4 ms without a break while its rank's worker, preempted,
// and its main thread waited, and the other rank polled; most steps took
// such a stall (3.5 ms or 7-8 ms a step). On a machine with cores to
// spare the loop spins on another core while the writer finishes. So a
// bound rank gives its Gloo event loops the lowest priority (nice 19):
// they no longer preempt the rank's threads, still run whenever those
// wait, and a worker woken while one spins takes the core back at once.
// mlp DDP's median step (60 steps, three runs each way, alternating):
// 4.3, 5.5 and 5.6 ms against 8.7, 5.5 and 7.7 ms, its slowest 6.5-6.8
// against 12.8-14.2 ms; the other seed 003 models' DDP steps 5-37%
// shorter but seq2seq's 4-5% longer (docs/validation-cpu.md, 2026-12-04,
// morning). Calibration lowers its Gloo benches' and its copies' loops
// alike, so a profile prices the collectives as validation runs them;
// DTSIM_GLOO_LOOP=normal leaves the loops as Gloo starts them. Raising a
// nice value needs no privilege, lowering it again would: only the loop,
// which never needs it back, is lowered.
std::vector<int> thread_ids() {
  std::vector<int> ids;
#ifdef __linux__
  DIR* dir = ::opendir("/proc/self/task");
  if (dir == nullptr) return ids;
  while (const dirent* e = ::readdir(dir)) {
    char* end = nullptr;
    const long id = std::strtol(e->d_name, &end, 10);
    if (end != e->d_name && *end == 0 && id > 0 && id <= std::numeric_limits<int>::max()) ids.push_back(static_cast<int>(id));
  }
  ::closedir(dir);
  std::sort(ids.begin(), ids.end());
#endif
  return ids;
}

bool lowers_event_loops(const std::string& binding) {
  const char* mode = std::getenv("DTSIM_GLOO_LOOP");
  return !binding.empty() && (mode == nullptr || std::strcmp(mode, "normal") != 0);
}

int lower_new_threads(const std::vector<int>& before) {
  int lowered = 0;
#ifdef __linux__
  for (int id : thread_ids()) {
    if (std::binary_search(before.begin(), before.end(), id)) continue;
    // Raising a nice value needs no privilege; a thread that has ended since is skipped.
    if (::setpriority(PRIO_PROCESS, static_cast<id_t>(id), kLowestPriority) == 0) ++lowered;
  }
#else
  (void)before;
#endif
  return lowered;
}

std::string bind_cpu_share(int index, int count) {
#ifdef __linux__
  if (const char* b = std::getenv("DTSIM_BIND"); b != nullptr && std::strcmp(b, "none") == 0) return "";
  cpu_set_t set;
  CPU_ZERO(&set);
  if (::sched_getaffinity(0, sizeof set, &set) != 0) return "";
  std::vector<int> allowed;
  for (int c = 0; c < CPU_SETSIZE; ++c) {
    if (CPU_ISSET(c, &set)) allowed.push_back(c);
  }
  const std::vector<int> mine = cpu_share(allowed, static_cast<int>(::sysconf(_SC_NPROCESSORS_ONLN)), index, count);
  if (mine.empty()) return "";
  CPU_ZERO(&set);
  for (int c : mine) CPU_SET(c, &set);
  if (::sched_setaffinity(0, sizeof set, &set) != 0) return "";
  std::string out = mine.size() == 1 ? "cpu " : "cpus ";
  for (std::size_t i = 0; i < mine.size(); ++i) out += (i ? "," : "") + std::to_string(mine[i]);
  return out;
#else
  (void)index;
  (void)count;
  return "";
#endif
}

}  // namespace dtsim::platform
