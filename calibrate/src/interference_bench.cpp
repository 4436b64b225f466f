// dtsim_interference_bench: how much slower a GPU's kernels run beside a
// collective's, for the calibration driver (Note [Bench line protocol] in
// bench_common.hpp; its records are `interference` and `info`). Plain CUDA
// runtime (its library API loads the kernels), cuBLAS for the matrix
// product, and NVRTC for the kernels of its own, all built by the host
// compiler (no .cu files, no link to the driver: a machine without one
// gets exit status 3).
//
//   dtsim_interference_bench [--quick] [--channels 8,12,16,20,24,28,32,48] [--rates 250,500,1000,1500]
//                            [--gemm 8192,4096] [--reps 30] [--verbose]
//
// Exit status: 0 done, 2 a usage or CUDA error (one stderr line naming the
// call), 3 no CUDA device (the driver reports the phase as skipped).
//
// Note [Measuring interference]
// Note [Interference prior] (sim/src/config/device_db.cpp) prices what a
// collective takes from the kernels it overlaps: its channels' SMs (NCCL
// runs a channel as one thread block that holds its SM for the whole
// collective: S. Jeaugey, NVIDIA/nccl #689) and the HBM bandwidth its
// buffers stream through (Jeaugey, NVIDIA/nccl #1428). On a machine of one
// GPU no collective crosses a link, so this program stands a stand-in for
// one beside the kernels: the proxy, one thread block per channel, each
// holding an SM alone (all the shared memory a block may take, so no other
// block that needs shared memory, a GEMM's, fits beside it), copying its
// share of a 1 GiB buffer (over 16x any L2 so far) with 16-byte loads and
// stores as NCCL's Simple protocol streams a channel's chunks, either as
// fast as it can or throttled to a given HBM rate (read and written bytes
// a second), the rate of the link a real collective would wait on times
// the HBM bytes it moves per link byte. It runs until the kernels it
// stands beside are done:
//  - the proxy is launched first on a stream of its own; on the other
//    stream a one-thread kernel waits until the proxy's first block has
//    started, so the timed kernels never start before it;
//  - the victims (each `--reps` times, one event pair each, their median):
//    a bf16 matrix product through cuBLAS (n x n x n, fp32 accumulation:
//    compute-bound, what Megatron's layers spend most of their time in) and
//    a STREAM triad over 1 GiB fp32 arrays (y = a x + y: 12 bytes an
//    element, memory-bound, as an optimizer step or a norm is);
//  - then a one-thread kernel raises the flag the proxy polls after each
//    chunk, and the proxy records the bytes it moved and its start and end
//    on the GPU's global timer: its HBM rate while the victims ran;
//  - each victim is also timed alone, before the proxied runs, and the
//    triad alone gives the HBM rate the device reaches (`hbm_Bps`).
// A record per victim and setting:
//   interference <gemm|stream> <channels> <sms> <proxy_Bps> <hbm_Bps> <alone_s> <beside_s> <reps>
// fit.cpp (Note [Interference fit]) turns them into the slowdowns the
// simulator applies. What this cannot see: a real collective's own
// synchronisation between GPUs, NVLink's traffic (the proxy's bytes all
// stay in this GPU's HBM) and NCCL's exact channel count on a machine of
// many GPUs; the channel count is swept instead (--channels).
#include <cublas_v2.h>
#include <cuda_runtime.h>
#include <nvrtc.h>

#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>
#include <vector>

#include <CLI/CLI.hpp>

#include "bench_common.hpp"

namespace dtsim::calib::bench {
namespace {

constexpr const char* kProg = "dtsim_interference_bench";
/// The proxy's threads a block (NCCL's Simple protocol runs 512-640).
constexpr int kProxyThreads = 512;
/// Bytes each proxy block copies before it looks at the flag and the clock.
constexpr Bytes kProxyChunk = 1 * kMiB;
/// The proxy's buffer, read, and as much again written.
constexpr Bytes kProxyBuffer = 1 * kGiB;
/// The triad's arrays: 1 GiB each.
constexpr std::size_t kTriadElems = std::size_t{1} << 28;
/// The proxy gives up after this long whatever the flag says (a victim
/// that never finishes must not hang the GPU).
constexpr unsigned long long kProxyMaxNs = 20ull * 1000 * 1000 * 1000;

const char* base_name(const char* path) {
  const char* slash = std::strrchr(path, '/');
  return slash ? slash + 1 : path;
}

[[noreturn]] void fail(const char* file, int line, const char* call, const std::string& what) {
  std::fprintf(stderr, "%s: %s:%d: %s: %s\n", kProg, base_name(file), line, call, what.c_str());
  std::exit(2);
}

void check(cudaError_t e, const char* call, const char* file, int line) {
  if (e != cudaSuccess) fail(file, line, call, cudaGetErrorString(e));
}
void check(cublasStatus_t e, const char* call, const char* file, int line) {
  if (e != CUBLAS_STATUS_SUCCESS) fail(file, line, call, "cuBLAS status " + std::to_string(static_cast<int>(e)));
}
void check(nvrtcResult e, const char* call, const char* file, int line) {
  if (e != NVRTC_SUCCESS) fail(file, line, call, nvrtcGetErrorString(e));
}
#define DTSIM_CHECK(call) ::dtsim::calib::bench::check((call), #call, __FILE__, __LINE__)

// The kernels, compiled for the device at hand by NVRTC.
constexpr const char* kKernels = R"(
__device__ __forceinline__ unsigned long long global_ns() {
  unsigned long long t;
  asm volatile("mov.u64 %0, %%globaltimer;" : "=l"(t));
  return t;
}
// One block per channel. Block b copies chunks of its own slice of src into
// dst, round and round, until *stop (or max_ns); out[3b..3b+2] = bytes
// moved (read + written), start and end ns. ns_per_chunk > 0 throttles it.
extern "C" __global__ void proxy(const int4* __restrict__ src, int4* __restrict__ dst, unsigned long long slice,
                                 unsigned long long chunk, volatile int* stop, volatile int* started,
                                 unsigned long long* out, unsigned long long ns_per_chunk, unsigned long long max_ns) {
  __shared__ int done;
  const unsigned long long base = blockIdx.x * slice;
  const unsigned long long t0 = global_ns();
  if (threadIdx.x == 0 && blockIdx.x == 0) *started = 1;
  unsigned long long offset = 0, chunks = 0;
  for (;;) {
    const int4* s = src + base + offset;
    int4* d = dst + base + offset;
    // Four 16-byte loads in flight a thread before their stores, as NCCL's
    // copy loops unroll theirs: one at a time, a block moves a third as much.
    for (unsigned long long i = threadIdx.x; i < chunk; i += 4 * blockDim.x) {
      const int4 a = s[i], b = s[i + blockDim.x], c = s[i + 2 * blockDim.x], e = s[i + 3 * blockDim.x];
      d[i] = a;
      d[i + blockDim.x] = b;
      d[i + 2 * blockDim.x] = c;
      d[i + 3 * blockDim.x] = e;
    }
    offset = offset + chunk >= slice ? 0 : offset + chunk;
    ++chunks;
    __syncthreads();
    if (threadIdx.x == 0) {
      unsigned long long now = global_ns();
      if (ns_per_chunk > 0) {
        const unsigned long long due = t0 + chunks * ns_per_chunk;
        while (now < due && *stop == 0) {
          __nanosleep(500);
          now = global_ns();
        }
      }
      done = *stop != 0 || now - t0 > max_ns;
    }
    __syncthreads();
    if (done) break;
  }
  if (threadIdx.x == 0) {
    out[3 * blockIdx.x] = chunks * chunk * 32ull;
    out[3 * blockIdx.x + 1] = t0;
    out[3 * blockIdx.x + 2] = global_ns();
  }
}
// Gives up after a second: a proxy that never started must not hang the GPU.
extern "C" __global__ void wait_started(volatile int* started) {
  const unsigned long long t0 = global_ns();
  while (*started == 0 && global_ns() - t0 < 1000000000ull) __nanosleep(200);
}
// Raises the flag, and says when on the global timer (*at).
extern "C" __global__ void raise_flag(int* stop, unsigned long long* at) {
  *at = global_ns();
  *stop = 1;
}
// n4: float4 elements of each array, one a thread, as PyTorch's elementwise
// kernels launch (a block per 256 x 4 floats, so the blocks balance over the
// SMs free; a fixed grid striding over the arrays would wait on its blocks
// that found no SM).
extern "C" __global__ void triad(float4* __restrict__ y, const float4* __restrict__ x, unsigned long long n4, float a) {
  const unsigned long long i = blockIdx.x * (unsigned long long)blockDim.x + threadIdx.x;
  if (i < n4) {
    const float4 u = x[i], v = y[i];
    y[i] = make_float4(a * u.x + v.x, a * u.y + v.y, a * u.z + v.z, a * u.w + v.w);
  }
}
)";

struct Options {
  bool quick = false;
  bool verbose = false;
  std::vector<int> channels{8, 12, 16, 20, 24, 28, 32, 48};
  std::vector<double> rates_gbs{250, 500, 1000, 1500};  ///< throttled proxy HBM rates at the reference channels
  int reference_channels = 24;
  std::vector<int> gemm{8192, 4096};
  int reps = 30;
};

Options parse_args(int argc, char** argv) {
  Options o;
  CLI::App app{"dtsim_interference_bench: times a GEMM and a memory-bound kernel beside a stand-in for a collective's "
               "channels; `dtsim calibrate --device cuda` runs it",
               kProg};
  app.add_flag("--quick", o.quick, "Five channel counts from 8 to 48, no throttled rates, 10 repetitions");
  app.add_option("--channels", o.channels, "Proxy thread blocks (channels) to sweep, as fast as they copy")
      ->delimiter(',')
      ->check(CLI::Range(1, 1024))
      ->type_name("a,b");
  app.add_option("--rates", o.rates_gbs, "Throttled proxy HBM rates, GB/s (read + written), at --reference-channels")
      ->delimiter(',')
      ->check(CLI::Range(1.0, 1e5))
      ->type_name("a,b");
  app.add_option("--reference-channels", o.reference_channels, "Channels of the throttled runs (NCCL on NVSwitch: 24)")
      ->check(CLI::Range(1, 1024));
  app.add_option("--gemm", o.gemm, "The matrix products' n (n x n x n, bf16), one victim each")
      ->delimiter(',')
      ->check(CLI::Range(256, 32768))
      ->type_name("a,b");
  app.add_option("--reps", o.reps, "Timed repetitions of each victim per setting")->check(CLI::Range(3, 10000));
  app.add_flag("-v,--verbose", o.verbose, "Say what each step does");
  try {
    app.parse(argc, argv);
  } catch (const CLI::CallForHelp&) {
    std::fputs(app.help().c_str(), stdout);
    std::exit(0);
  } catch (const CLI::ParseError& e) {
    std::fprintf(stderr, "%s: %s (see %s --help)\n", kProg, e.what(), kProg);
    std::exit(2);
  }
  // Quick: the same spread of channel counts (the median of the GEMMs'
  // ratios depends on it: on the H200 three counts from 16 to 32 put it
  // near 2.3 where the full sweep's was 1.57), fewer repetitions, no
  // throttled rates.
  if (o.quick) {
    if (app.count("--channels") == 0) o.channels = {8, 16, 24, 32, 48};
    if (app.count("--rates") == 0) o.rates_gbs.clear();
    o.reps = std::min(o.reps, 10);
  }
  return o;
}

class Bench {
 public:
  explicit Bench(const Options& o) : o_(o) {
    DTSIM_CHECK(cudaSetDevice(0));
    DTSIM_CHECK(cudaGetDeviceProperties(&prop_, 0));
    DTSIM_CHECK(cudaDeviceGetAttribute(&max_smem_, cudaDevAttrMaxSharedMemoryPerBlockOptin, 0));
    compile();
    DTSIM_CHECK(cudaStreamCreateWithFlags(&victim_, cudaStreamNonBlocking));
    DTSIM_CHECK(cudaStreamCreateWithFlags(&side_, cudaStreamNonBlocking));
    DTSIM_CHECK(cublasCreate(&blas_));
    DTSIM_CHECK(cublasSetStream(blas_, victim_));
    const std::size_t n = static_cast<std::size_t>(*std::max_element(o_.gemm.begin(), o_.gemm.end()));
    for (void** p : {&a_, &b_, &c_}) DTSIM_CHECK(cudaMalloc(p, n * n * 2));
    DTSIM_CHECK(cudaMemset(a_, 0x3c, n * n * 2));  // bf16 0x3c3c: about 0.0115, finite products
    DTSIM_CHECK(cudaMemset(b_, 0x3c, n * n * 2));
    DTSIM_CHECK(cudaMalloc(&x_, kTriadElems * 4));
    DTSIM_CHECK(cudaMalloc(&y_, kTriadElems * 4));
    DTSIM_CHECK(cudaMemset(x_, 0, kTriadElems * 4));
    DTSIM_CHECK(cudaMemset(y_, 0, kTriadElems * 4));
    DTSIM_CHECK(cudaMalloc(&src_, kProxyBuffer));
    DTSIM_CHECK(cudaMalloc(&dst_, kProxyBuffer));
    DTSIM_CHECK(cudaMemset(src_, 1, kProxyBuffer));
    DTSIM_CHECK(cudaMalloc(&flags_, 2 * sizeof(int)));
    DTSIM_CHECK(cudaMalloc(&out_, 3 * 1024 * sizeof(unsigned long long)));
    DTSIM_CHECK(cudaMalloc(&raised_, sizeof(unsigned long long)));
    warm_up();
  }

  int run() {
    emit_info("device", prop_.name);
    emit_info("sms", std::to_string(prop_.multiProcessorCount));
    emit_info("proxy", std::to_string(kProxyThreads) + " threads and " + std::to_string(max_smem_) +
                           " bytes of shared memory a block, " + std::to_string(kProxyChunk / kMiB) + " MiB chunks");
    for (int n : o_.gemm) emit_info("gemm." + std::to_string(n), "bf16 " + std::to_string(n) + "^3 through cublasGemmEx, fp32 accumulation");
    emit_info("stream", "triad over " + std::to_string(kTriadElems * 4 / kMiB) + " MiB fp32 arrays");
    const int sms = prop_.multiProcessorCount;
    struct Setting {
      int channels;
      double rate_gbs;  ///< 0: as fast as it copies
    };
    std::vector<Setting> settings;
    for (int c : o_.channels) {
      if (c < sms) settings.push_back({c, 0});
    }
    if (o_.reference_channels < sms) {
      for (double r : o_.rates_gbs) settings.push_back({o_.reference_channels, r});
    }
    // Victims 0 .. gemm.size() - 1: the matrix products; the last: the triad.
    const int victims = static_cast<int>(o_.gemm.size()) + 1;
    const int total = victims * (1 + static_cast<int>(settings.size()));
    int done = 0;
    // Alone first: the references every setting is divided by.
    std::vector<double> alone;
    for (int v = 0; v < victims; ++v) {
      alone.push_back(median(time_victim(v)));
      emit_progress(++done, total, name(v) + " alone");
    }
    const double hbm_bps = 12.0 * static_cast<double>(kTriadElems) / alone.back();
    emit_info("hbm_Bps", fmt_seconds(hbm_bps));
    if (o_.verbose) {
      for (int v = 0; v + 1 < victims; ++v) {
        const double n = o_.gemm[static_cast<std::size_t>(v)];
        std::fprintf(stderr, "%s: %s alone %.3f ms (%.0f TFLOP/s)\n", kProg, name(v).c_str(), alone[static_cast<std::size_t>(v)] * 1e3,
                     2 * n * n * n / alone[static_cast<std::size_t>(v)] / 1e12);
      }
      std::fprintf(stderr, "%s: triad alone %.3f ms (%.0f GB/s)\n", kProg, alone.back() * 1e3, hbm_bps / 1e9);
    }
    for (const Setting& s : settings) {
      for (int v = 0; v < victims; ++v) {
        double proxy_bps = 0;
        const std::vector<double> t = time_beside(v, s.channels, s.rate_gbs * 1e9, &proxy_bps);
        const double a = alone[static_cast<std::size_t>(v)];
        emit({"interference", v + 1 < victims ? "gemm" : "stream", std::to_string(s.channels), std::to_string(sms),
              fmt_seconds(proxy_bps), fmt_seconds(hbm_bps), fmt_seconds(a), fmt_seconds(median(t)),
              std::to_string(t.size())});
        if (o_.verbose) {
          std::fprintf(stderr, "%s: %s beside %d channels (%s): %+.1f%%, proxy %.0f GB/s\n", kProg, name(v).c_str(),
                       s.channels, s.rate_gbs > 0 ? (std::to_string(static_cast<int>(s.rate_gbs)) + " GB/s").c_str() : "unthrottled",
                       100 * (median(t) / a - 1), proxy_bps / 1e9);
        }
        emit_progress(++done, total, name(v) + " beside " + std::to_string(s.channels) + " channels");
      }
    }
    return 0;
  }

 private:
  static double median(std::vector<double> v) { return summarize(std::move(v)).median_s; }

  bool is_gemm(int victim) const { return victim < static_cast<int>(o_.gemm.size()); }
  std::string name(int victim) const {
    return is_gemm(victim) ? "gemm " + std::to_string(o_.gemm[static_cast<std::size_t>(victim)]) : "triad";
  }

  void compile() {
    nvrtcProgram prog;
    DTSIM_CHECK(nvrtcCreateProgram(&prog, kKernels, "interference.cu", 0, nullptr, nullptr));
    const std::string arch = "--gpu-architecture=sm_" + std::to_string(prop_.major) + std::to_string(prop_.minor);
    const char* opts[] = {arch.c_str(), "--std=c++17"};
    if (nvrtcCompileProgram(prog, 2, opts) != NVRTC_SUCCESS) {
      std::size_t n = 0;
      nvrtcGetProgramLogSize(prog, &n);
      std::string log(n, '\0');
      nvrtcGetProgramLog(prog, log.data());
      std::replace(log.begin(), log.end(), '\n', ' ');
      fail(__FILE__, __LINE__, "nvrtcCompileProgram", log);
    }
    std::size_t size = 0;
    DTSIM_CHECK(nvrtcGetCUBINSize(prog, &size));
    std::string cubin(size, '\0');
    DTSIM_CHECK(nvrtcGetCUBIN(prog, cubin.data()));
    DTSIM_CHECK(nvrtcDestroyProgram(&prog));
    DTSIM_CHECK(cudaLibraryLoadData(&library_, cubin.data(), nullptr, nullptr, 0, nullptr, nullptr, 0));
    DTSIM_CHECK(cudaLibraryGetKernel(&proxy_, library_, "proxy"));
    DTSIM_CHECK(cudaLibraryGetKernel(&wait_started_, library_, "wait_started"));
    DTSIM_CHECK(cudaLibraryGetKernel(&raise_flag_, library_, "raise_flag"));
    DTSIM_CHECK(cudaLibraryGetKernel(&triad_, library_, "triad"));
    DTSIM_CHECK(cudaFuncSetAttribute(reinterpret_cast<const void*>(proxy_), cudaFuncAttributeMaxDynamicSharedMemorySize,
                                     max_smem_ - 1024));
  }

  /// Launches each kernel once, alone, before anything is timed. CUDA loads
  /// a kernel at its first launch (lazy loading, the default since CUDA
  /// 12.2), and a load waits for the kernels running: the first raise_flag
  /// beside a running proxy waited for the proxy's 20 s limit, so the
  /// kernels timed "beside" it ran after it had stopped (+0.0%, the first
  /// setting of each run on the H200 before this).
  void warm_up() {
    int* stop = flags_;
    int* started = flags_ + 1;
    DTSIM_CHECK(cudaMemset(flags_, 0, 2 * sizeof(int)));
    DTSIM_CHECK(cudaDeviceSynchronize());  // the memset (legacy stream) before the non-blocking streams' kernels
    void* rargs[] = {&stop, &raised_};
    launch(raise_flag_, 1, 1, 0, victim_, rargs);  // stop = 1: the proxy below runs one chunk
    DTSIM_CHECK(cudaStreamSynchronize(victim_));
    unsigned long long slice = 4ull * kProxyThreads, chunk = slice, ns = 0, max_ns = kProxyMaxNs;
    void* pargs[] = {&src_, &dst_, &slice, &chunk, &stop, &started, &out_, &ns, &max_ns};
    launch(proxy_, 1, kProxyThreads, static_cast<unsigned>(max_smem_ - 1024), side_, pargs);
    DTSIM_CHECK(cudaStreamSynchronize(side_));
    void* wargs[] = {&started};  // started = 1 by the proxy: returns at once
    launch(wait_started_, 1, 1, 0, victim_, wargs);
    unsigned long long n4 = 0;
    float a = 0;
    void* targs[] = {&y_, &x_, &n4, &a};
    launch(triad_, 1, 256, 0, victim_, targs);
    DTSIM_CHECK(cudaDeviceSynchronize());
  }

  void launch(cudaKernel_t f, unsigned grid, unsigned block, unsigned smem, cudaStream_t s, void** args) {
    DTSIM_CHECK(cudaLaunchKernel(reinterpret_cast<const void*>(f), dim3(grid), dim3(block), args, smem, s));
  }

  void victim_once(int victim) {
    if (is_gemm(victim)) {
      const float alpha = 1, beta = 0;
      const int n = o_.gemm[static_cast<std::size_t>(victim)];
      DTSIM_CHECK(cublasGemmEx(blas_, CUBLAS_OP_N, CUBLAS_OP_N, n, n, n, &alpha, a_, CUDA_R_16BF, n, b_, CUDA_R_16BF, n,
                               &beta, c_, CUDA_R_16BF, n, CUBLAS_COMPUTE_32F, CUBLAS_GEMM_DEFAULT));
    } else {
      unsigned long long n4 = kTriadElems / 4;
      float a = 0.5f;
      void* args[] = {&y_, &x_, &n4, &a};
      launch(triad_, static_cast<unsigned>((n4 + 255) / 256), 256, 0, victim_, args);
    }
  }

  /// Each repetition between its own pair of events on the victim stream.
  std::vector<double> time_reps(int victim) {
    std::vector<cudaEvent_t> ev(static_cast<std::size_t>(o_.reps) + 1);
    for (auto& e : ev) DTSIM_CHECK(cudaEventCreate(&e));
    DTSIM_CHECK(cudaEventRecord(ev[0], victim_));
    for (int i = 0; i < o_.reps; ++i) {
      victim_once(victim);
      DTSIM_CHECK(cudaEventRecord(ev[static_cast<std::size_t>(i) + 1], victim_));
    }
    DTSIM_CHECK(cudaEventSynchronize(ev.back()));
    std::vector<double> t;
    for (int i = 0; i < o_.reps; ++i) {
      float ms = 0;
      DTSIM_CHECK(cudaEventElapsedTime(&ms, ev[static_cast<std::size_t>(i)], ev[static_cast<std::size_t>(i) + 1]));
      t.push_back(ms * 1e-3);
    }
    for (auto& e : ev) DTSIM_CHECK(cudaEventDestroy(e));
    return t;
  }

  std::vector<double> time_victim(int victim) {
    for (int i = 0; i < 3; ++i) victim_once(victim);  // warm-up: cuBLAS picks its kernel, clocks rise
    DTSIM_CHECK(cudaStreamSynchronize(victim_));
    return time_reps(victim);
  }

  /// The victim's repetitions with `channels` proxy blocks copying beside
  /// them, throttled to `rate_bps` (0: not); the proxy's HBM rate over its
  /// run in `*proxy_bps`.
  std::vector<double> time_beside(int victim, int channels, double rate_bps, double* proxy_bps) {
    for (int i = 0; i < 2; ++i) victim_once(victim);
    DTSIM_CHECK(cudaMemset(flags_, 0, 2 * sizeof(int)));
    DTSIM_CHECK(cudaDeviceSynchronize());
    int* stop = flags_;
    int* started = flags_ + 1;
    unsigned long long slice = kProxyBuffer / 16 / static_cast<Bytes>(channels);
    const unsigned long long step = 4ull * kProxyThreads;  // int4s a block moves per unrolled pass
    unsigned long long chunk = std::min<unsigned long long>(kProxyChunk / 16, slice);
    chunk -= chunk % step;
    slice -= slice % chunk;
    // A chunk moves chunk x 16 bytes read and as many written.
    unsigned long long ns_per_chunk =
        rate_bps > 0 ? static_cast<unsigned long long>(32.0 * chunk * channels / rate_bps * 1e9) : 0;
    unsigned long long max_ns = kProxyMaxNs;
    void* pargs[] = {&src_, &dst_, &slice, &chunk, &stop, &started, &out_, &ns_per_chunk, &max_ns};
    launch(proxy_, static_cast<unsigned>(channels), kProxyThreads, static_cast<unsigned>(max_smem_ - 1024), side_, pargs);
    void* wargs[] = {&started};
    launch(wait_started_, 1, 1, 0, victim_, wargs);
    std::vector<double> t = time_reps(victim);
    void* rargs[] = {&stop, &raised_};
    launch(raise_flag_, 1, 1, 0, victim_, rargs);
    DTSIM_CHECK(cudaDeviceSynchronize());
    unsigned long long raised = 0;
    DTSIM_CHECK(cudaMemcpy(&raised, raised_, sizeof raised, cudaMemcpyDeviceToHost));
    int flags[2] = {0, 0};
    DTSIM_CHECK(cudaMemcpy(flags, flags_, sizeof flags, cudaMemcpyDeviceToHost));
    // wait_started gives up after a second: then the kernels ran alone.
    if (flags[1] == 0) fail(__FILE__, __LINE__, "time_beside", "the stand-in never started: not measured beside it");
    std::vector<unsigned long long> out(3 * static_cast<std::size_t>(channels));
    DTSIM_CHECK(cudaMemcpy(out.data(), out_, out.size() * sizeof(unsigned long long), cudaMemcpyDeviceToHost));
    unsigned long long bytes = 0, first = ~0ull, last = 0;
    for (int b = 0; b < channels; ++b) {
      bytes += out[3 * static_cast<std::size_t>(b)];
      first = std::min(first, out[3 * static_cast<std::size_t>(b) + 1]);
      last = std::max(last, out[3 * static_cast<std::size_t>(b) + 2]);
    }
    *proxy_bps = last > first ? static_cast<double>(bytes) / (static_cast<double>(last - first) * 1e-9) : 0;
    // The stand-in must have run until the kernels beside it were done (the
    // flag was raised after them): a stand-in that stopped first, at its
    // time limit, ran beside none of them.
    if (last < raised) {
      fail(__FILE__, __LINE__, "time_beside", "the stand-in stopped " + std::to_string((raised - last) / 1000) +
                                                 " us before the kernels beside it were done: not measured beside it");
    }
    return t;
  }

  Options o_;
  cudaDeviceProp prop_{};
  int max_smem_ = 0;
  cudaLibrary_t library_ = nullptr;
  cudaKernel_t proxy_ = nullptr, wait_started_ = nullptr, raise_flag_ = nullptr, triad_ = nullptr;
  cudaStream_t victim_ = nullptr, side_ = nullptr;
  cublasHandle_t blas_ = nullptr;
  void *a_ = nullptr, *b_ = nullptr, *c_ = nullptr, *x_ = nullptr, *y_ = nullptr, *src_ = nullptr, *dst_ = nullptr;
  int* flags_ = nullptr;
  unsigned long long* out_ = nullptr;
  unsigned long long* raised_ = nullptr;  ///< when raise_flag ran (global timer, ns)
};

}  // namespace
}  // namespace dtsim::calib::bench

int main(int argc, char** argv) {
  using namespace dtsim::calib::bench;
  const Options o = parse_args(argc, argv);
  int devices = 0;
  if (cudaGetDeviceCount(&devices) != cudaSuccess || devices == 0) {
    std::fprintf(stderr, "%s: no CUDA device\n", kProg);
    return 3;
  }
  reserve_stdout_for_protocol();
  return Bench(o).run();
}
