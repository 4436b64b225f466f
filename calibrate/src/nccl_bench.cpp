// dtsim_nccl_bench: nccl-tests-like sweep of NCCL collectives and CUDA copies
// on the GPUs of one machine, for the calibration driver (Note [Bench line
// protocol] in bench_common.hpp gives the output format). Plain CUDA runtime
// + NCCL, built by the host compiler; no kernels of its own.
//
//   dtsim_nccl_bench [--quick] [--gpus N] [--ops all_reduce,...,all_to_all] [--verbose]
//
// Exit status: 0 done, 2 a usage, CUDA or NCCL error (one stderr line naming
// the call), 3 no CUDA device (the driver reports the benchmark as skipped).
//
// Note [NCCL bench timing]
// One process drives the first k visible GPUs through ncclCommInitAll, for
// every k in 1..N, one stream per GPU, each iteration's per-GPU calls inside
// ncclGroupStart/End. Per point: 2 warm-up iterations, then timed
// iterations in batches until the time budget (0.2 s quick, 1 s full) of GPU
// time is spent, at least 5, at most kMaxReps (Note [Bench batches] in
// bench_common.hpp). A batch's iterations are enqueued back to back (as
// nccl-tests does); after each one, GPU 0's stream waits for an event
// recorded on every other GPU's stream and then records a timing event, so
// event i marks the moment all k GPUs had finished iteration i. An
// iteration's time is the elapsed time between consecutive events on GPU 0:
// the per-iteration time of the slowest GPU in a steady stream of
// collectives. send_recv (k = 2 only) is ncclSend on GPU 0 with ncclRecv on
// GPU 1, one direction: its time is the one-way time of one message.
// all_to_all is nccl-tests' alltoall_perf (src/alltoall.cu): every GPU
// ncclSend's chunk j of its send buffer to GPU j and ncclRecv's chunk j of
// its receive buffer from GPU j, itself included, all in the iteration's
// group; `bytes` is one GPU's whole send buffer. Copies
// (h2d, d2h from/to pinned host memory, d2d within GPU 0) are timed the same
// way with cudaMemcpyAsync on GPU 0's stream.
#include <cuda_runtime.h>
#include <nccl.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <functional>
#include <string>
#include <vector>

#include <CLI/CLI.hpp>

#include "bench_common.hpp"
#include "dtsim/cli/parse.hpp"

namespace dtsim::calib::bench {
namespace {

constexpr const char* kProg = "dtsim_nccl_bench";
constexpr const char* kBackend = "nccl";
constexpr int kMaxReps = 10000;
/// GPU memory left free beside the benchmark's buffers, for NCCL's own.
constexpr Bytes kNcclReserve = 2 * kGiB;

// ---------------------------------------------------------------- checks

const char* base_name(const char* path) {
  const char* slash = std::strrchr(path, '/');
  return slash ? slash + 1 : path;
}

void check_cuda(cudaError_t err, const char* call, const char* file, int line) {
  if (err == cudaSuccess) return;
  std::fprintf(stderr, "%s: %s:%d: %s: %s\n", kProg, base_name(file), line, call, cudaGetErrorString(err));
  std::exit(2);
}

void check_nccl(ncclResult_t res, const char* call, const char* file, int line) {
  if (res == ncclSuccess) return;
  const char* detail = ncclGetLastError(nullptr);
  std::fprintf(stderr, "%s: %s:%d: %s: %s%s%s\n", kProg, base_name(file), line, call, ncclGetErrorString(res),
               detail && *detail ? ": " : "", detail && *detail ? detail : "");
  std::exit(2);
}

/// Checks a CUDA runtime call: on error one stderr line (call, file:line,
/// cudaGetErrorString), exit status 2.
#define DTSIM_CUDA_CHECK(call) ::dtsim::calib::bench::check_cuda((call), #call, __FILE__, __LINE__)
/// Checks an NCCL call: on error one stderr line (call, file:line,
/// ncclGetErrorString and ncclGetLastError), exit status 2.
#define DTSIM_NCCL_CHECK(call) ::dtsim::calib::bench::check_nccl((call), #call, __FILE__, __LINE__)

// ---------------------------------------------------------------- options

struct Options {
  bool quick = false;
  bool verbose = false;
  int gpus = 0;  ///< 0: all visible
  std::vector<Op> ops{std::begin(kAllOps), std::end(kAllOps)};
  Bytes max_bytes() const { return quick ? 64 * kMiB : 1 * kGiB; }
  Bytes copy_max_bytes() const { return quick ? 64 * kMiB : 1 * kGiB; }
  double budget_s() const { return quick ? 0.2 : 1.0; }
};

/// Parses the command line (CLI11, dtsim/cli/parse.hpp); exits after --help
/// or a malformed command line, throws std::invalid_argument for a bad value.
Options parse_args(int argc, char** argv) {
  Options o;
  CLI::App app{"dtsim_nccl_bench: times NCCL collectives and copies across local GPUs; `dtsim calibrate` runs it", kProg};
  dtsim::cli::house_style(app);
  std::string gpus, ops;
  app.add_flag("--quick", o.quick, "Sizes up to 64 MiB, shorter budgets");
  app.add_option("--gpus", gpus, "GPUs to use (default: every visible one)")->type_name("N");
  app.add_option("--ops", ops, std::string("Collectives to time: ") + kOpNames)->type_name("a,b");
  app.add_flag("-v,--verbose", o.verbose, "Say what each step does");
  if (const int status = dtsim::cli::parse_main(app, argc, argv); status >= 0) std::exit(status);
  if (app.count("--gpus") > 0) o.gpus = static_cast<int>(std::min(parse_positive("--gpus", gpus.c_str()), 1024L));
  if (app.count("--ops") > 0) o.ops = parse_ops(ops.c_str());
  return o;
}

// ---------------------------------------------------------------- plan

/// One measured point: a collective at a GPU count and a size, or a copy.
struct Point {
  bool is_copy = false;
  cudaMemcpyKind kind = cudaMemcpyHostToDevice;  ///< copies only
  int ranks = 0;                                 ///< collectives only
  Op op = Op::kAllReduce;                        ///< collectives only
  Bytes bytes = 0;  ///< nccl-tests "size" (Note [Bench line protocol])
};

const char* copy_name(cudaMemcpyKind kind) {
  switch (kind) {
    case cudaMemcpyHostToDevice: return "h2d";
    case cudaMemcpyDeviceToHost: return "d2h";
    default: return "d2d";
  }
}

std::vector<Point> make_plan(const Options& o, int gpus, Bytes max_bytes, Bytes copy_max) {
  std::vector<Point> plan;
  for (cudaMemcpyKind kind : {cudaMemcpyHostToDevice, cudaMemcpyDeviceToHost, cudaMemcpyDeviceToDevice}) {
    for (Bytes b : pow2_sizes(4 * kKiB, copy_max)) {
      Point p;
      p.is_copy = true;
      p.kind = kind;
      p.bytes = b;
      plan.push_back(p);
    }
  }
  // Collectives over two GPUs or more: over one they move nothing (nccl-tests'
  // bus bandwidth is 0 there by definition), and no plan runs one.
  for (int k = 2; k <= gpus; ++k) {
    for (Op op : o.ops) {
      if (op == Op::kSendRecv && k != 2) continue;
      Bytes last = 0;
      for (Bytes size : pow2_sizes(8, max_bytes)) {
        const Bytes b = measured_bytes(op, size, k);
        if (b == last) continue;
        last = b;
        Point p;
        p.ranks = k;
        p.op = op;
        p.bytes = b;
        plan.push_back(p);
      }
    }
  }
  return plan;
}

std::string point_label(const Point& p) {
  if (p.is_copy) return std::string("copy ") + copy_name(p.kind) + " " + human_bytes(p.bytes);
  return std::string(op_name(p.op)) + " ranks=" + std::to_string(p.ranks) + " " + human_bytes(p.bytes);
}

// ---------------------------------------------------------------- GPUs

/// Buffers, streams and events of the GPUs under test.
class Gpus {
 public:
  Gpus(int n, Bytes buffer_bytes) : n_(n), bytes_(buffer_bytes) {
    send_.resize(static_cast<std::size_t>(n));
    recv_.resize(static_cast<std::size_t>(n));
    streams_.resize(static_cast<std::size_t>(n));
    done_.resize(static_cast<std::size_t>(n));
    for (int i = 0; i < n; ++i) {
      const auto u = static_cast<std::size_t>(i);
      DTSIM_CUDA_CHECK(cudaSetDevice(i));
      DTSIM_CUDA_CHECK(cudaStreamCreateWithFlags(&streams_[u], cudaStreamNonBlocking));
      DTSIM_CUDA_CHECK(cudaEventCreateWithFlags(&done_[u], cudaEventDisableTiming));
      if (bytes_ > 0) {
        DTSIM_CUDA_CHECK(cudaMalloc(&send_[u], bytes_));
        DTSIM_CUDA_CHECK(cudaMalloc(&recv_[u], bytes_));
        DTSIM_CUDA_CHECK(cudaMemset(send_[u], 0, bytes_));
        DTSIM_CUDA_CHECK(cudaMemset(recv_[u], 0, bytes_));
      }
    }
    DTSIM_CUDA_CHECK(cudaSetDevice(0));
  }
  Gpus(const Gpus&) = delete;
  Gpus& operator=(const Gpus&) = delete;
  ~Gpus() {
    for (int i = 0; i < n_; ++i) {
      const auto u = static_cast<std::size_t>(i);
      cudaSetDevice(i);
      cudaStreamSynchronize(streams_[u]);
      if (send_[u]) cudaFree(send_[u]);
      if (recv_[u]) cudaFree(recv_[u]);
      cudaEventDestroy(done_[u]);
      cudaStreamDestroy(streams_[u]);
    }
    cudaSetDevice(0);
    for (cudaEvent_t e : timing_) cudaEventDestroy(e);
  }

  void* send(int i) const { return send_[static_cast<std::size_t>(i)]; }
  void* recv(int i) const { return recv_[static_cast<std::size_t>(i)]; }
  cudaStream_t stream(int i) const { return streams_[static_cast<std::size_t>(i)]; }

  void sync(int k) const {
    for (int i = 0; i < k; ++i) {
      DTSIM_CUDA_CHECK(cudaSetDevice(i));
      DTSIM_CUDA_CHECK(cudaStreamSynchronize(streams_[static_cast<std::size_t>(i)]));
    }
    DTSIM_CUDA_CHECK(cudaSetDevice(0));
  }

  /// Runs `launch` `iters` times back to back on the first `k` GPUs and
  /// returns each iteration's time in seconds (Note [NCCL bench timing]).
  std::vector<double> time_iters(int k, int iters, const std::function<void()>& launch) {
    DTSIM_CUDA_CHECK(cudaSetDevice(0));
    while (timing_.size() < static_cast<std::size_t>(iters) + 1) {
      cudaEvent_t e;
      DTSIM_CUDA_CHECK(cudaEventCreate(&e));
      timing_.push_back(e);
    }
    sync(k);
    DTSIM_CUDA_CHECK(cudaEventRecord(timing_[0], streams_[0]));
    for (int it = 0; it < iters; ++it) {
      launch();
      for (int i = 1; i < k; ++i) {
        const auto u = static_cast<std::size_t>(i);
        DTSIM_CUDA_CHECK(cudaSetDevice(i));
        DTSIM_CUDA_CHECK(cudaEventRecord(done_[u], streams_[u]));
        DTSIM_CUDA_CHECK(cudaSetDevice(0));
        DTSIM_CUDA_CHECK(cudaStreamWaitEvent(streams_[0], done_[u], 0));
      }
      DTSIM_CUDA_CHECK(cudaSetDevice(0));
      DTSIM_CUDA_CHECK(cudaEventRecord(timing_[static_cast<std::size_t>(it) + 1], streams_[0]));
    }
    sync(k);
    std::vector<double> times(static_cast<std::size_t>(iters));
    for (int it = 0; it < iters; ++it) {
      float ms = 0;
      DTSIM_CUDA_CHECK(cudaEventElapsedTime(&ms, timing_[static_cast<std::size_t>(it)],
                                            timing_[static_cast<std::size_t>(it) + 1]));
      times[static_cast<std::size_t>(it)] = static_cast<double>(ms) * 1e-3;
    }
    return times;
  }

 private:
  int n_;
  Bytes bytes_;
  std::vector<void*> send_;
  std::vector<void*> recv_;
  std::vector<cudaStream_t> streams_;
  std::vector<cudaEvent_t> done_;    ///< per GPU: "iteration finished here"
  std::vector<cudaEvent_t> timing_;  ///< on GPU 0: iteration boundaries
};

/// Warm-up, then timed iterations in batches until the budget is spent
/// (Note [Bench batches]); returns the summary and the number timed.
std::pair<Summary, int> measure(Gpus& gpus, int k, double budget_s, const std::function<void()>& launch) {
  gpus.time_iters(k, kWarmupIters, launch);
  std::vector<double> times;
  double spent_s = 0;
  for (int batch = next_batch(0, 0, budget_s, kMaxReps); batch > 0;
       batch = next_batch(static_cast<int>(times.size()), spent_s, budget_s, kMaxReps)) {
    for (double t : gpus.time_iters(k, batch, launch)) {
      times.push_back(t);
      spent_s += t;
    }
  }
  const int reps = static_cast<int>(times.size());
  return {summarize(std::move(times)), reps};
}

/// One iteration of collective `p` on the first p.ranks GPUs.
std::function<void()> collective(const Gpus& g, const std::vector<ncclComm_t>& comms, const Point& p) {
  const int k = p.ranks;
  const Op op = p.op;
  const std::size_t n = static_cast<std::size_t>(p.bytes / kElementBytes);
  const std::size_t chunk = chunk_elems(p.bytes, k);
  return [&g, &comms, k, op, n, chunk] {
    DTSIM_NCCL_CHECK(ncclGroupStart());
    if (op == Op::kSendRecv) {
      DTSIM_NCCL_CHECK(ncclSend(g.send(0), n, ncclFloat, 1, comms[0], g.stream(0)));
      DTSIM_NCCL_CHECK(ncclRecv(g.recv(1), n, ncclFloat, 0, comms[1], g.stream(1)));
    } else {
      for (int i = 0; i < k; ++i) {
        const auto u = static_cast<std::size_t>(i);
        switch (op) {
          case Op::kAllReduce:
            DTSIM_NCCL_CHECK(ncclAllReduce(g.send(i), g.recv(i), n, ncclFloat, ncclSum, comms[u], g.stream(i)));
            break;
          case Op::kReduceScatter:
            DTSIM_NCCL_CHECK(
                ncclReduceScatter(g.send(i), g.recv(i), chunk, ncclFloat, ncclSum, comms[u], g.stream(i)));
            break;
          case Op::kAllGather:
            DTSIM_NCCL_CHECK(ncclAllGather(g.send(i), g.recv(i), chunk, ncclFloat, comms[u], g.stream(i)));
            break;
          case Op::kBroadcast:
            DTSIM_NCCL_CHECK(ncclBroadcast(g.send(i), g.recv(i), n, ncclFloat, 0, comms[u], g.stream(i)));
            break;
          case Op::kAllToAll:
            // nccl-tests' AlltoAllRunColl: chunk j to and from GPU j, itself included.
            for (int j = 0; j < k; ++j) {
              const std::size_t at = static_cast<std::size_t>(j) * chunk;
              DTSIM_NCCL_CHECK(ncclSend(static_cast<const float*>(g.send(i)) + at, chunk, ncclFloat, j, comms[u], g.stream(i)));
              DTSIM_NCCL_CHECK(ncclRecv(static_cast<float*>(g.recv(i)) + at, chunk, ncclFloat, j, comms[u], g.stream(i)));
            }
            break;
          case Op::kSendRecv:
            break;
        }
      }
    }
    DTSIM_NCCL_CHECK(ncclGroupEnd());
  };
}

/// All-reduces a byte pattern once and checks two elements on every GPU, so
/// a broken setup fails loudly instead of timing garbage.
void sanity_check(Gpus& g, const std::vector<ncclComm_t>& comms, int k, Bytes buffer_bytes) {
  const std::size_t n = static_cast<std::size_t>(std::min<Bytes>(buffer_bytes, kMiB) / kElementBytes);
  for (int i = 0; i < k; ++i) {
    DTSIM_CUDA_CHECK(cudaSetDevice(i));
    DTSIM_CUDA_CHECK(cudaMemset(g.send(i), 0x3f, n * sizeof(float)));  // 0x3f3f3f3f = 0.7470...f
  }
  Point p;
  p.ranks = k;
  p.op = Op::kAllReduce;
  p.bytes = n * kElementBytes;
  collective(g, comms, p)();
  g.sync(k);
  float one;
  std::memset(&one, 0x3f, sizeof one);
  const double want = static_cast<double>(one) * k;
  for (int i = 0; i < k; ++i) {
    float got[2];
    DTSIM_CUDA_CHECK(cudaSetDevice(i));
    DTSIM_CUDA_CHECK(cudaMemcpy(&got[0], g.recv(i), sizeof(float), cudaMemcpyDeviceToHost));
    DTSIM_CUDA_CHECK(
        cudaMemcpy(&got[1], static_cast<float*>(g.recv(i)) + (n - 1), sizeof(float), cudaMemcpyDeviceToHost));
    for (float v : got) {
      if (std::fabs(v - want) > 1e-5 * want) {
        std::fprintf(stderr, "%s: ncclAllReduce over %d GPUs gave %g on GPU %d, expected %g\n", kProg, k,
                     static_cast<double>(v), i, want);
        std::exit(2);
      }
    }
  }
  DTSIM_CUDA_CHECK(cudaSetDevice(0));
}

// ---------------------------------------------------------------- info

std::string version_string(int v, bool nccl) {
  // NCCL >= 2.9 encodes X*10000 + Y*100 + Z, older X*1000 + Y*100 + Z;
  // CUDA encodes X*1000 + Y*10.
  if (!nccl) return std::to_string(v / 1000) + "." + std::to_string((v % 1000) / 10);
  if (v >= 10000) return std::to_string(v / 10000) + "." + std::to_string((v / 100) % 100) + "." + std::to_string(v % 100);
  return std::to_string(v / 1000) + "." + std::to_string((v / 100) % 10) + "." + std::to_string(v % 100);
}

void print_info(const Options& o, int visible, int used, Bytes max_bytes, Bytes copy_max) {
  int driver = 0;
  int runtime = 0;
  int nccl = 0;
  DTSIM_CUDA_CHECK(cudaDriverGetVersion(&driver));
  DTSIM_CUDA_CHECK(cudaRuntimeGetVersion(&runtime));
  DTSIM_NCCL_CHECK(ncclGetVersion(&nccl));
  emit_info("backend", kBackend);
  emit_info("nccl_version", version_string(nccl, true));
  emit_info("nccl_header_version",
            std::to_string(NCCL_MAJOR) + "." + std::to_string(NCCL_MINOR) + "." + std::to_string(NCCL_PATCH));
  emit_info("cuda_driver_version", version_string(driver, false));
  emit_info("cuda_runtime_version", version_string(runtime, false));
  emit_info("hostname", host_name());
  emit_info("cpu", cpu_model());
  emit_info("gpus_visible", std::to_string(visible));
  emit_info("ranks", std::to_string(used));
  for (int i = 0; i < used; ++i) {
    cudaDeviceProp prop{};
    DTSIM_CUDA_CHECK(cudaGetDeviceProperties(&prop, i));
    char bus[64] = {};
    DTSIM_CUDA_CHECK(cudaDeviceGetPCIBusId(bus, sizeof bus, i));
    std::string g = "gpu" + std::to_string(i);
    emit_info(g + "_name", prop.name);
    emit_info(g + "_memory_bytes", std::to_string(prop.totalGlobalMem));
    emit_info(g + "_pci_bus_id", bus);
    emit_info(g + "_compute_capability", std::to_string(prop.major) + "." + std::to_string(prop.minor));
    emit_info(g + "_sm_count", std::to_string(prop.multiProcessorCount));
    std::string peers;
    for (int j = 0; j < used; ++j) {
      int can = 0;
      if (j == i) continue;
      DTSIM_CUDA_CHECK(cudaDeviceCanAccessPeer(&can, i, j));
      if (can) peers += (peers.empty() ? "" : ",") + std::to_string(j);
    }
    emit_info(g + "_peer_access", peers.empty() ? "none" : peers);
  }
  emit_info("dtype", "float32");
  emit_info("mode", o.quick ? "quick" : "full");
  emit_info("sizes", "powers of 2 from 8 B to " + human_bytes(max_bytes));
  emit_info("copy_sizes", "powers of 2 from 4 KiB to " + human_bytes(copy_max));
  emit_info("time_budget_s", fmt_seconds(o.budget_s()));
  emit_info("warmup_iters", std::to_string(kWarmupIters));
  emit_info("min_reps", std::to_string(kMinReps));
  emit_info("timing",
            "back-to-back iterations, CUDA events on GPU 0 after its stream waited for every GPU's stream; "
            "median/min/max of the per-iteration times");
  emit_info("collectives", used < 2 ? std::string("none: one GPU has no collective to measure")
                                     : "ncclCommInitAll over GPUs 0..k-1 for k = 2.." + std::to_string(used) +
                                           ", one stream per GPU, ncclGroupStart/End per iteration, out of place");
  emit_info("send_recv_impl", "ncclSend GPU 0 -> ncclRecv GPU 1, ranks = 2 only; one-way time");
  emit_info("all_to_all_impl",
            "ncclSend + ncclRecv of one chunk to and from every GPU, itself included, in one group (nccl-tests' "
            "alltoall_perf); bytes = one GPU's whole send buffer");
  emit_info("size_rule", "all_gather/reduce_scatter/all_to_all sizes rounded down to a multiple of ranks x 4 B");
  emit_info("copy_impl", "cudaMemcpyAsync on GPU 0; h2d/d2h with cudaMallocHost pinned memory; d2d within GPU 0");
}

/// Largest power of two <= `cap` such that `buffers` of it fit in `free`
/// bytes with `reserve` left over; 0 if not even 4 KiB fits.
Bytes fit_pow2(Bytes cap, std::size_t buffers, Bytes free, Bytes reserve) {
  Bytes b = cap;
  while (b >= 4 * kKiB && b * buffers + reserve > free) b /= 2;
  return b >= 4 * kKiB ? b : 0;
}

void report(const Options& o, const Point& p, const Summary& s, int reps) {
  if (p.is_copy) {
    emit({"copy", copy_name(p.kind), std::to_string(p.bytes), fmt_seconds(s.median_s), fmt_seconds(s.min_s),
          fmt_seconds(s.max_s), std::to_string(reps)});
  } else {
    emit_comm(kBackend, p.op, p.ranks, p.bytes, s, reps);
  }
  if (o.verbose) {
    double algbw = static_cast<double>(p.bytes) / s.median_s / 1e9;
    double busbw = p.is_copy ? algbw : algbw * busbw_factor(p.op, p.ranks);
    std::fprintf(stderr, "%s: %-28s median %10.2f us  algbw %8.2f GB/s  busbw %8.2f GB/s  reps %d\n", kProg,
                 point_label(p).c_str(), s.median_s * 1e6, algbw, busbw, reps);
  }
}

int run(const Options& o) {
  int visible = 0;
  cudaError_t err = cudaGetDeviceCount(&visible);
  if (err == cudaErrorNoDevice || err == cudaErrorInsufficientDriver || (err == cudaSuccess && visible == 0)) {
    std::fprintf(stderr, "%s: no CUDA device\n", kProg);
    return 3;
  }
  DTSIM_CUDA_CHECK(err);
  int used = visible;
  if (o.gpus > 0) {
    if (o.gpus > visible) {
      std::fprintf(stderr, "%s: --gpus %d but only %d visible: using %d\n", kProg, o.gpus, visible, visible);
    }
    used = std::min(o.gpus, visible);
  }

  // Size the buffers to the memory free on the tightest GPU.
  Bytes free_min = ~Bytes{0};
  for (int i = 0; i < used; ++i) {
    std::size_t free = 0;
    std::size_t total = 0;
    DTSIM_CUDA_CHECK(cudaSetDevice(i));
    DTSIM_CUDA_CHECK(cudaMemGetInfo(&free, &total));
    free_min = std::min<Bytes>(free_min, free);
  }
  DTSIM_CUDA_CHECK(cudaSetDevice(0));
  const Bytes max_bytes = fit_pow2(o.max_bytes(), 2, free_min, kNcclReserve);
  Bytes copy_max = fit_pow2(o.copy_max_bytes(), 2, free_min, kGiB / 2);
  if (max_bytes < 8 || copy_max == 0) {
    std::fprintf(stderr, "%s: too little free GPU memory (%.2f GiB on the tightest GPU)\n", kProg,
                 static_cast<double>(free_min) / static_cast<double>(kGiB));
    return 2;
  }
  // Pinned host memory may be limited too: halve until it allocates.
  void* host = nullptr;
  while (copy_max >= 4 * kKiB) {
    if (cudaMallocHost(&host, copy_max) == cudaSuccess) break;
    (void)cudaGetLastError();
    host = nullptr;
    copy_max /= 2;
  }
  if (host == nullptr) {
    std::fprintf(stderr, "%s: cudaMallocHost: cannot pin even 4 KiB of host memory\n", kProg);
    return 2;
  }
  std::memset(host, 0, copy_max);

  print_info(o, visible, used, max_bytes, copy_max);
  const std::vector<Point> plan = make_plan(o, used, max_bytes, copy_max);
  const int total = static_cast<int>(plan.size());
  int done = 0;

  // Copies on GPU 0.
  {
    Gpus g(1, copy_max);
    for (const Point& p : plan) {
      if (!p.is_copy) continue;
      emit_progress(done, total, point_label(p));
      void* dst = p.kind == cudaMemcpyDeviceToHost ? host : g.recv(0);
      void* src = p.kind == cudaMemcpyHostToDevice ? host : g.send(0);
      const cudaMemcpyKind kind = p.kind;
      const std::size_t bytes = static_cast<std::size_t>(p.bytes);
      cudaStream_t s = g.stream(0);
      auto [sum, reps] = measure(g, 1, o.budget_s(), [=] {
        DTSIM_CUDA_CHECK(cudaMemcpyAsync(dst, src, bytes, kind, s));
      });
      report(o, p, sum, reps);
      ++done;
    }
  }
  DTSIM_CUDA_CHECK(cudaFreeHost(host));

  // Collectives over the first k GPUs.
  {
    Gpus g(used, max_bytes);
    for (int k = 2; k <= used; ++k) {
      std::vector<int> devs(static_cast<std::size_t>(k));
      for (int i = 0; i < k; ++i) devs[static_cast<std::size_t>(i)] = i;
      std::vector<ncclComm_t> comms(static_cast<std::size_t>(k));
      DTSIM_NCCL_CHECK(ncclCommInitAll(comms.data(), k, devs.data()));
      sanity_check(g, comms, k, max_bytes);
      for (const Point& p : plan) {
        if (p.is_copy || p.ranks != k) continue;
        emit_progress(done, total, point_label(p));
        auto [sum, reps] = measure(g, k, o.budget_s(), collective(g, comms, p));
        report(o, p, sum, reps);
        ++done;
      }
      g.sync(k);
      for (ncclComm_t c : comms) DTSIM_NCCL_CHECK(ncclCommDestroy(c));
    }
  }
  emit_progress(total, total, "done");
  return 0;
}

}  // namespace
}  // namespace dtsim::calib::bench

int main(int argc, char** argv) {
  using namespace dtsim::calib::bench;
  Options opt;
  try {
    opt = parse_args(argc, argv);
  } catch (const std::exception& e) {
    std::fprintf(stderr, "%s: %s (see %s --help)\n", kProg, e.what(), kProg);
    return 2;
  }
  // NCCL_DEBUG logs to stdout: keep the records on a stdout of their own.
  reserve_stdout_for_protocol();
  return run(opt);
}
