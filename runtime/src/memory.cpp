// The counting CPU allocator: per-rank peak memory of a CPU validation run.
//
// Note [Counting allocator]: LibTorch allocates every CPU tensor through
// c10::GetCPUAllocator(); c10::SetCPUAllocator replaces it. Ours puts a
// 64-byte header before each block holding its size and whether it counts as
// host memory (allocated inside a HostScope: offloaded optimizer state), keeps
// atomic current and peak counters for both, and refuses an allocation that
// would take device memory past the limit, as a GPU would run out.
#include <c10/core/CPUAllocator.h>
#include <c10/core/impl/alloc_cpu.h>

#if defined(DTSIM_WORKER_CUDA)
#include <c10/cuda/CUDACachingAllocator.h>
#include <c10/cuda/CUDAFunctions.h>
#include <cuda_runtime_api.h>
#endif

#include <atomic>
#include <cstring>
#include <mutex>

#include "worker.hpp"

namespace dtsim::runtime {
namespace {

constexpr std::size_t kHeader = 64;  // keeps the 64-byte alignment LibTorch expects

struct Header {
  std::size_t bytes;
  bool host;
};

std::atomic<std::int64_t> g_current[2];
std::atomic<std::int64_t> g_peak[2];
std::int64_t g_limit = 0;
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
  c10::free_cpu(base);
}

std::string mib(std::int64_t b) { return std::to_string((b + (1 << 19)) >> 20) + " MiB"; }

class CountingAllocator final : public c10::Allocator {
 public:
  c10::DataPtr allocate(std::size_t n) const override {
    const int k = t_host ? 1 : 0;
    const auto bytes = static_cast<std::int64_t>(n);
    const std::int64_t now = g_current[k].fetch_add(bytes, std::memory_order_relaxed) + bytes;
    if (k == 0 && g_limit > 0 && now > g_limit) {
      g_current[k].fetch_sub(bytes, std::memory_order_relaxed);
      std::string msg = "out of memory: tried to allocate " + mib(bytes) + " with " + mib(now - bytes) + " in use of the " +
                        mib(g_limit) + " limit";
      {
        std::lock_guard<std::mutex> lock(g_oom_mutex);
        if (g_oom.empty()) g_oom = msg;
      }
      throw c10::Error({__func__, __FILE__, static_cast<std::uint32_t>(__LINE__)}, "dtsim: " + msg);
    }
    raise_peak(k, now);
    void* base = c10::alloc_cpu(n + kHeader);
    auto* h = static_cast<Header*>(base);
    h->bytes = n;
    h->host = k == 1;
    void* data = static_cast<char*>(base) + kHeader;
    return {data, data, &release, c10::Device(c10::DeviceType::CPU)};
  }
  c10::DeleterFnPtr raw_deleter() const override { return &release; }
};

CountingAllocator g_allocator;

}  // namespace

void install_counting_allocator(std::int64_t limit) {
  g_limit = limit;
  // Priority above the default's, so nothing replaces ours later.
  c10::SetCPUAllocator(&g_allocator, /*priority=*/100);
}

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
std::int64_t cuda_peak() {
  const auto stats = c10::cuda::CUDACachingAllocator::getDeviceStats(c10::cuda::current_device());
  return stats.allocated_bytes[static_cast<std::size_t>(c10::cuda::CUDACachingAllocator::StatType::AGGREGATE)].peak;
}
void reset_cuda_peak() { c10::cuda::CUDACachingAllocator::resetPeakStats(c10::cuda::current_device()); }
void cuda_synchronize() { c10::cuda::device_synchronize(); }
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
