#include "dtsim/platform/process.hpp"

#include <limits>  // first: any libc header defines __GLIBC__

#ifdef __GLIBC__
#include <malloc.h>
#endif
#ifdef __linux__
#include <sched.h>
#include <sys/mman.h>
#include <unistd.h>
#endif

#include <cstdint>
#include <cstdlib>
#include <cstring>

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
