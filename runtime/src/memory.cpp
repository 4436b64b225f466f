// The counting CPU allocator: per-rank peak memory of a CPU validation run.
//
// Note [Counting allocator]: LibTorch allocates every CPU tensor through
// c10::GetCPUAllocator(); c10::SetCPUAllocator replaces it. Ours puts a
// 64-byte header before each block holding its size and whether it counts as
// host memory (allocated inside a HostScope: offloaded optimizer state), keeps
// atomic current and peak counters for both, and refuses an allocation that
// would take device memory past the limit, as a GPU would run out.
// The block comes from malloc, 64 bytes more than it needs so the data can
// start on a 64-byte boundary, not from c10::alloc_cpu's posix_memalign:
// glibc serves a memalign by carving a larger chunk and freeing its tail
// into a small bin, so a freed block is too small for the next memalign of
// the same size and the heap (never trimmed: Note [Freed memory stays])
// grew by every temporary of a model's initialisation. deepseek-v2-lite's
// rank held 20.3 GiB at 11.4 GiB of tensors; a malloc of the same size
// takes the freed block back.
#include <c10/core/CPUAllocator.h>
#include <torch/version.h>

#if defined(DTSIM_WORKER_CUDA)
#include <c10/cuda/CUDACachingAllocator.h>
#include <c10/cuda/CUDAFunctions.h>
#include <c10/cuda/CUDAStream.h>
#include <cuda_runtime_api.h>
#endif

#include <algorithm>
#include <atomic>
#include <cerrno>
#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <mutex>
#include <stdexcept>
#include <string>

#include "worker.hpp"

namespace dtsim::runtime {
namespace {

constexpr std::size_t kHeader = 64;  // keeps the 64-byte alignment LibTorch expects
constexpr std::size_t kAlign = 64;

struct Header {
  std::size_t bytes;
  bool host;
  void* block;  // what malloc returned
};

std::atomic<std::int64_t> g_current[2];
std::atomic<std::int64_t> g_peak[2];
std::int64_t g_limit = 0;
std::string g_limit_what;  // where the limit came from, for the message (empty: --mem-limit)
std::mutex g_oom_mutex;
std::string g_oom;
thread_local bool t_host = false;

void raise_peak(int k, std::int64_t now) {
  std::int64_t peak = g_peak[k].load(std::memory_order_relaxed);
  while (now > peak && !g_peak[k].compare_exchange_weak(peak, now, std::memory_order_relaxed)) {
  }
}

/// Frees a block by its data pointer (the header sits just before it). Data
/// and context are the same pointer, as Allocator::raw_allocate requires.
void release(void* data) {
  void* base = static_cast<char*>(data) - kHeader;
  const auto* h = static_cast<const Header*>(base);
  g_current[h->host ? 1 : 0].fetch_sub(static_cast<std::int64_t>(h->bytes), std::memory_order_relaxed);
  std::free(h->block);
}

std::string mib(std::int64_t b) { return std::to_string((b + (1 << 19)) >> 20) + " MiB"; }

// LibTorch 2.3 made Allocator::allocate non-const and added copy_data.
#if TORCH_VERSION_MAJOR > 2 || (TORCH_VERSION_MAJOR == 2 && TORCH_VERSION_MINOR >= 3)
#define DTSIM_ALLOCATE_CONST
#define DTSIM_ALLOCATOR_COPY_DATA 1
#else
#define DTSIM_ALLOCATE_CONST const
#endif

class CountingAllocator final : public c10::Allocator {
 public:
  c10::DataPtr allocate(std::size_t n) DTSIM_ALLOCATE_CONST override {
    const int k = t_host ? 1 : 0;
    const auto bytes = static_cast<std::int64_t>(n);
    const std::int64_t now = g_current[k].fetch_add(bytes, std::memory_order_relaxed) + bytes;
    if (k == 0 && g_limit > 0 && now > g_limit) {
      g_current[k].fetch_sub(bytes, std::memory_order_relaxed);
      std::string msg = "out of memory: tried to allocate " + mib(bytes) + " with " + mib(now - bytes) + " in use of the " +
                        mib(g_limit) + " limit" + (g_limit_what.empty() ? "" : " (" + g_limit_what + ")");
      {
        std::lock_guard<std::mutex> lock(g_oom_mutex);
        if (g_oom.empty()) g_oom = msg;
      }
      throw c10::Error({__func__, __FILE__, static_cast<std::uint32_t>(__LINE__)}, "dtsim: " + msg);
    }
    raise_peak(k, now);
    void* block = std::malloc(n + kHeader + kAlign);
    if (block == nullptr) {
      g_current[k].fetch_sub(bytes, std::memory_order_relaxed);
      throw c10::Error({__func__, __FILE__, static_cast<std::uint32_t>(__LINE__)},
                       "dtsim: out of memory: the host refused " + mib(bytes) + " (" + std::strerror(ENOMEM) + ")");
    }
    void* base = reinterpret_cast<void*>((reinterpret_cast<std::uintptr_t>(block) + kAlign - 1) & ~std::uintptr_t{kAlign - 1});
    auto* h = static_cast<Header*>(base);
    h->bytes = n;
    h->host = k == 1;
    h->block = block;
    void* data = static_cast<char*>(base) + kHeader;
    return {data, data, &release, c10::Device(c10::DeviceType::CPU)};
  }
  c10::DeleterFnPtr raw_deleter() const override { return &release; }
#if defined(DTSIM_ALLOCATOR_COPY_DATA)
  void copy_data(void* dest, const void* src, std::size_t count) const override { default_copy_data(dest, src, count); }
#endif
};

CountingAllocator g_allocator;

}  // namespace

void install_counting_allocator(std::int64_t limit, const std::string& what) {
  g_limit = limit;
  g_limit_what = what;
  // Priority above the default's, so nothing replaces ours later.
  c10::SetCPUAllocator(&g_allocator, /*priority=*/100);
}

std::int64_t cpu_memory_limit() { return g_limit; }

std::int64_t cpu_current_bytes(bool host) { return g_current[host ? 1 : 0].load(); }
std::int64_t cpu_peak_bytes(bool host) { return g_peak[host ? 1 : 0].load(); }

void reset_cpu_peaks() {
  for (int k = 0; k < 2; ++k) g_peak[k].store(g_current[k].load());
}

std::string cpu_oom_message() {
  std::lock_guard<std::mutex> lock(g_oom_mutex);
  return g_oom;
}

#if defined(DTSIM_WORKER_CUDA)
// Stat index 0 is StatType::AGGREGATE (all pools), in c10::cuda::CUDACachingAllocator
// up to LibTorch 2.4 and in c10::CachingAllocator since.
std::int64_t cuda_peak() {
  return c10::cuda::CUDACachingAllocator::getDeviceStats(c10::cuda::current_device()).allocated_bytes[0].peak;
}
std::int64_t cuda_current() {
  return c10::cuda::CUDACachingAllocator::getDeviceStats(c10::cuda::current_device()).allocated_bytes[0].current;
}
std::int64_t cuda_reserved_peak() {
  return c10::cuda::CUDACachingAllocator::getDeviceStats(c10::cuda::current_device()).reserved_bytes[0].peak;
}
void reset_cuda_peak() { c10::cuda::CUDACachingAllocator::resetPeakStats(c10::cuda::current_device()); }
void cuda_synchronize() { c10::cuda::device_synchronize(); }

namespace {
void cuda_check(cudaError_t e, const char* what) {
  if (e != cudaSuccess) throw std::runtime_error(std::string(what) + ": " + cudaGetErrorString(e));
}
}  // namespace

GpuMarks::~GpuMarks() {
  for (void* e : events_) cudaEventDestroy(static_cast<cudaEvent_t>(e));
}

int GpuMarks::mark() {
  if (used_ == static_cast<int>(events_.size())) {
    cudaEvent_t e = nullptr;
    cuda_check(cudaEventCreate(&e), "cudaEventCreate");
    events_.push_back(e);
  }
  cuda_check(cudaEventRecord(static_cast<cudaEvent_t>(events_[used_]), c10::cuda::getCurrentCUDAStream().stream()), "cudaEventRecord");
  return used_++;
}

double GpuMarks::seconds(int a, int b) {
  auto* eb = static_cast<cudaEvent_t>(events_.at(b));
  cuda_check(cudaEventSynchronize(eb), "cudaEventSynchronize");
  float ms = 0;
  cuda_check(cudaEventElapsedTime(&ms, static_cast<cudaEvent_t>(events_.at(a)), eb), "cudaEventElapsedTime");
  return ms * 1e-3;
}
void cuda_limit(std::int64_t bytes) {
  if (bytes <= 0) return;
  std::size_t free = 0, total = 0;
  if (cudaMemGetInfo(&free, &total) != cudaSuccess || total == 0) return;
  c10::cuda::CUDACachingAllocator::setMemoryFraction(std::min(1.0, static_cast<double>(bytes) / static_cast<double>(total)),
                                                     c10::cuda::current_device());
}
#endif

HostScope::HostScope() : previous_(t_host) { t_host = true; }
HostScope::~HostScope() { t_host = previous_; }

}  // namespace dtsim::runtime
