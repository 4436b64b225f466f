#include "dtsim/sim/allocator.hpp"

#include <limits>  // first: any libc header defines __GLIBC__

#ifdef __GLIBC__
#include <malloc.h>
#endif

namespace dtsim::sim {

// Note [Freed memory stays]
// glibc serves blocks over its mmap threshold (128 KiB, rising to at most
// 32 MiB) with mmap and unmaps them on free, and trims the heap's top once
// 128 KiB of it is free. A program that allocates and frees the same large
// buffers over and over then faults them in again, one 4 KiB page at a time:
//  - dtsim search: thousands of simulations build task graphs of many MB;
//    the faults doubled the search's time (sys 13 s of 39 s).
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

}  // namespace dtsim::sim
