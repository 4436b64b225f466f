// dtsim_torch_bench: times every distinct layer of the requested models
// (forward and backward, LibTorch, CPU or CUDA) over a sweep of shapes, and
// GEMM / grouped GEMM (Note [Grouped GEMMs] in sim/src/cost/cost_profile.cpp)
// / attention / element-wise / norm kernels and the optimizer step
// (adam, sgd, and the gradient buckets' copies bucket_in, bucket_out: m
// parameters in n tensors) over sizes, printing the
// calibration record protocol (calibrate/README.md) on stdout.
//   dtsim_torch_bench --device cpu|cuda [--quick] [--threads N]
//                     [--models gpt2,bert-base,bilstm] [--precision fp32,bf16]
//                     [--budget-s S] [--tp 2,4] [--cp 2,4] [--passes N] [--lockstep DIR,RANK,N]
// --precision may repeat or list several (default: fp32 on CPU, fp32 and bf16
// on CUDA); --budget-s is the measuring time per point after the warm-ups;
// --tp adds the tensor-parallel shares of those degrees (signatures with
// tp=k: one rank's computation, its collectives priced apart by the simulator);
// --cp likewise the context-parallel shares of GPT and Llama blocks (cp=k);
// the --tp degrees also give MoE blocks' expert-parallel shares (ep=k, Note
// [Expert-parallel shares]).
// --passes times the layer sweep N times over (Note [Sweep passes]).
// --lockstep makes N concurrent copies start every point together (Note
// [Copies in lockstep]); `dtsim calibrate` passes it.
// Bad arguments, or --device cuda without CUDA, give one line on stderr and
// exit status 2.
// Layers come from the analytic models (models::load_model), so the
// signatures measured are exactly those the simulator looks up.
#include <torch/torch.h>
#include <fcntl.h>
#include <sys/file.h>
#include <unistd.h>

#include <algorithm>
#include <array>
#include <chrono>
#include <cstdio>
#include <cerrno>
#include <cstring>
#include <cmath>
#include <fstream>
#include <functional>
#include <map>
#include <new>
#include <optional>
#include <set>
#include <stdexcept>
#include <string>
#include <thread>
#include <vector>

#ifdef DTSIM_TORCH_CUDA
#include <c10/cuda/CUDACachingAllocator.h>
#include <c10/cuda/CUDAFunctions.h>
#include <c10/cuda/CUDAStream.h>
#include <cuda_runtime_api.h>
#endif

#include <CLI/CLI.hpp>

// Note [Layers in a data-parallel step]: the copies all-reduce their chained
// step's gradients over Gloo where this LibTorch has its headers (Debian's;
// PyTorch's wheels ship none, as runtime/src/comm.cpp says).
#if __has_include(<gloo/algorithm.h>) || __has_include(<gloo/rendezvous/store.h>)
#define DTSIM_BENCH_GLOO 1
#include <torch/csrc/distributed/c10d/FileStore.hpp>
#include <torch/csrc/distributed/c10d/ProcessGroupGloo.hpp>
#endif

#include "bench_common.hpp"
#include "dtsim/calibrate/calibrate.hpp"
#include "dtsim/cli/parse.hpp"
#include "dtsim/models/models.hpp"
#include "dtsim/models/torch_layers.hpp"
#include "dtsim/platform/process.hpp"
#include "dtsim/sim/error.hpp"

#include <c10/core/CPUAllocator.h>
#include <c10/core/impl/alloc_cpu.h>
#include <torch/version.h>

#include <atomic>

namespace {

using Clock = std::chrono::steady_clock;

// ---- Note [Layer memory] on a CPU: a counting allocator --------------------------------
// The runtime counts a CPU rank's bytes with its own allocator
// (runtime/src/memory.cpp, Note [Counting allocator]); the bench counts
// them the same way, so a layer's transient and backward rise are measured
// in the bytes the runtime's peak is. A 64-byte header before each block
// holds its size.
std::atomic<std::int64_t> g_cpu_current{0}, g_cpu_peak{0};

void cpu_release(void* data) {
  void* base = static_cast<char*>(data) - 64;
  g_cpu_current.fetch_sub(static_cast<std::int64_t>(*static_cast<std::size_t*>(base)), std::memory_order_relaxed);
  c10::free_cpu(base);
}

// LibTorch 2.3 made Allocator::allocate non-const and added copy_data.
#if TORCH_VERSION_MAJOR > 2 || (TORCH_VERSION_MAJOR == 2 && TORCH_VERSION_MINOR >= 3)
#define DTSIM_BENCH_ALLOCATE_CONST
#define DTSIM_BENCH_COPY_DATA 1
#else
#define DTSIM_BENCH_ALLOCATE_CONST const
#endif

class CountingCpuAllocator final : public c10::Allocator {
 public:
  c10::DataPtr allocate(std::size_t n) DTSIM_BENCH_ALLOCATE_CONST override {
    const auto bytes = static_cast<std::int64_t>(n);
    const std::int64_t now = g_cpu_current.fetch_add(bytes, std::memory_order_relaxed) + bytes;
    std::int64_t peak = g_cpu_peak.load(std::memory_order_relaxed);
    while (now > peak && !g_cpu_peak.compare_exchange_weak(peak, now, std::memory_order_relaxed)) {
    }
    void* base = c10::alloc_cpu(n + 64);
    *static_cast<std::size_t*>(base) = n;
    void* data = static_cast<char*>(base) + 64;
    return {data, data, &cpu_release, c10::Device(c10::DeviceType::CPU)};
  }
  c10::DeleterFnPtr raw_deleter() const override { return &cpu_release; }
#if defined(DTSIM_BENCH_COPY_DATA)
  void copy_data(void* dest, const void* src, std::size_t count) const override { default_copy_data(dest, src, count); }
#endif
};

CountingCpuAllocator g_cpu_allocator;

struct Options {
  std::string device = "cpu";
  bool quick = false;
  int threads = 0;
  std::vector<std::string> models{"gpt2", "bert-base", "bilstm"};
  bool models_given = false;
  std::vector<std::string> precisions;
  double budget_s = 0;  // per measurement point; 0: by sweep
  std::vector<int> tp{1};  // tensor-parallel degrees whose layer shares are timed
  std::vector<int> cp{1};  // context-parallel degrees whose blocks' shares are timed (Note [Context parallelism])
  int passes = 0;  // of the layer sweep (Note [Sweep passes]); 0: 3 on a CPU's full sweep, else 1
  std::string lockstep_dir;  // Note [Copies in lockstep]; empty: alone
  int lockstep_rank = 0, lockstep_n = 1;
  bool host_probe = false;  // Note [Probe and loop interleaved] (driver.cpp): the host kinds alone
};

[[noreturn]] void usage_error(const std::string& why) {
  std::fprintf(stderr, "dtsim_torch_bench: %s\n", why.c_str());
  std::exit(2);
}

/// A whole number or a positive real from an option's value, or a one-line error.
long long whole_number(const std::string& option, const std::string& v) {
  try {
    std::size_t used = 0;
    const long long n = std::stoll(v, &used);
    if (used == v.size()) return n;
  } catch (const std::logic_error&) {
  }
  usage_error(option + ": '" + v + "' is not a whole number");
}

double positive_seconds(const std::string& option, const std::string& v) {
  try {
    std::size_t used = 0;
    const double x = std::stod(v, &used);
    if (used == v.size() && x > 0 && std::isfinite(x)) return x;
  } catch (const std::logic_error&) {
  }
  usage_error(option + ": '" + v + "' is not a positive number of seconds");
}

std::vector<std::string> split(const std::string& s) {
  std::vector<std::string> out;
  std::string cur;
  for (char c : s + ",") {
    if (c == ',') {
      if (!cur.empty()) out.push_back(cur);
      cur.clear();
    } else {
      cur += c;
    }
  }
  return out;
}

Options parse(int argc, char** argv) {
  Options o;
  CLI::App app{"dtsim_torch_bench: times layers and kernels in LibTorch; `dtsim calibrate` runs it and reads its records",
               "dtsim_torch_bench"};
  dtsim::cli::house_style(app);
  std::map<std::string, std::string> v;
  auto value = [&](const std::string& name, const std::string& type, const std::string& help) {
    app.add_option("--" + name, v[name], help)->type_name(type);
  };
  value("device", "cpu|cuda", "Where to measure (default cpu)");
  app.add_flag("--quick", o.quick, "Fewer sizes and repetitions");
  value("threads", "T", "Intra-op threads, 1..1024");
  value("models", "a,b", "Models whose layers to time");
  value("precision", "p,q", "Precisions: fp32, fp16, bf16 (default fp32; fp32,fp16 on cuda)");
  value("budget-s", "S", "Stop sweeping after this many seconds");
  value("tp", "n,m", "Tensor-parallel degrees, 2..64, to time layers' shards at");
  value("cp", "n,m", "Context-parallel degrees, 2..64");
  value("passes", "N", "Passes over every point, 1..10");
  value("lockstep", "DIR,RANK,N", "Start every point together with N-1 copies (Note [Copies in lockstep])");
  app.add_flag("--host-probe", o.host_probe, "Time only the C++ side of the Python host probe (host_ops, host_step)");
  if (const int status = dtsim::cli::parse_main(app, argc, argv); status >= 0) std::exit(status);
  auto given = [&](const std::string& name) -> std::optional<std::string> {
    if (app.count("--" + name) == 0) return std::nullopt;
    return v[name];
  };
  if (const auto x = given("device")) {
    o.device = *x;
    if (o.device != "cpu" && o.device != "cuda") usage_error("--device: '" + o.device + "' is not one of cpu, cuda");
  }
  if (const auto x = given("threads")) {
    const long long n = whole_number("--threads", *x);
    if (n < 1 || n > 1024) usage_error("--threads: " + std::to_string(n) + " is not in 1..1024");
    o.threads = static_cast<int>(n);
  }
  if (const auto x = given("models")) {
    o.models = split(*x);
    o.models_given = true;
    if (o.models.empty()) usage_error("--models: expected a comma-separated list of model names");
  }
  if (const auto x = given("precision")) {
    for (const auto& p : split(*x)) {
      if (p != "fp32" && p != "fp16" && p != "bf16") usage_error("--precision: '" + p + "' is not one of fp32, fp16, bf16");
      if (std::find(o.precisions.begin(), o.precisions.end(), p) == o.precisions.end()) o.precisions.push_back(p);
    }
  }
  if (const auto x = given("budget-s")) o.budget_s = positive_seconds("--budget-s", *x);
  if (const auto x = given("tp")) {
    for (const auto& t : split(*x)) {
      const long long n = whole_number("--tp", t);
      if (n < 2 || n > 64) usage_error("--tp: " + t + " is not in 2..64");
      o.tp.push_back(static_cast<int>(n));
    }
  }
  if (const auto x = given("cp")) {
    for (const auto& t : split(*x)) {
      const long long n = whole_number("--cp", t);
      if (n < 2 || n > 64) usage_error("--cp: " + t + " is not in 2..64");
      o.cp.push_back(static_cast<int>(n));
    }
  }
  if (const auto x = given("passes")) {
    const long long n = whole_number("--passes", *x);
    if (n < 1 || n > 10) usage_error("--passes: " + std::to_string(n) + " is not in 1..10");
    o.passes = static_cast<int>(n);
  }
  if (const auto x = given("lockstep")) {
    const auto parts = split(*x);
    if (parts.size() != 3) usage_error("--lockstep: expected DIR,RANK,N");
    o.lockstep_dir = parts[0];
    o.lockstep_rank = static_cast<int>(whole_number("--lockstep", parts[1]));
    o.lockstep_n = static_cast<int>(whole_number("--lockstep", parts[2]));
    if (o.lockstep_n < 1 || o.lockstep_rank < 0 || o.lockstep_rank >= o.lockstep_n) usage_error("--lockstep: RANK must be in 0..N-1");
  }
  if (o.precisions.empty()) {
    o.precisions = o.device == "cuda" ? std::vector<std::string>{"fp32", "fp16"} : std::vector<std::string>{"fp32"};
  }
  // Note [GPU sweep]: on a GPU, by default every model of GPU size dtsim
  // validates there, and the layer kinds of the newer families: a 1B-class
  // Llama, Mixtral's blocks (8 experts of SwiGLU 14336, top-2: validated as
  // a 2-layer Mixtral, bench/gpu-cases.txt) and the tiny CPU twins.
  if (!o.models_given && o.device == "cuda") {
    o.models = {"gpt2",         "gpt2-medium",  "gpt2-large", "gpt2-xl",  "bert-base", "bert-large",
                "bilstm",       "llama-3.2-1b", "mixtral-8x7b", "llama-tiny", "moe-tiny"};
  }
  return o;
}

torch::Dtype dtype_of(const std::string& p) {
  if (p == "fp16") return torch::kHalf;
  if (p == "bf16") return torch::kBFloat16;
  return torch::kFloat;
}

int element_size(const std::string& p) { return p == "fp32" ? 4 : 2; }

/// The longest sequence a GPU sweep times a model at (Note [GPU sweep]).
constexpr std::int64_t kGpuSweepSeq = 4096;

// Note [Python host probe] (driver.cpp): the shapes calibrate/src/python_host_probe.py
// times from Python, timed here from C++.
constexpr std::int64_t kProbeWidth = 64, kProbeRows = 8, kProbeElements = 64;
constexpr int kProbeRepeats = 16;

/// The first line of a LibTorch message (the rest is context and backtrace).
std::string first_line(const std::string& what) { return what.substr(0, what.find('\n')); }

/// Median, min and max of repeated timings.
struct Stats {
  double median = 0, min = 0, max = 0, mean = 0;
  int reps = 0;
};

Stats stats(std::vector<double> v) {
  Stats s;
  if (v.empty()) return s;
  std::sort(v.begin(), v.end());
  s.median = v.size() % 2 ? v[v.size() / 2] : 0.5 * (v[v.size() / 2 - 1] + v[v.size() / 2]);
  s.min = v.front();
  s.max = v.back();
  double sum = 0;
  for (double x : v) sum += x;
  s.mean = sum / static_cast<double>(v.size());
  s.reps = static_cast<int>(v.size());
  return s;
}

/// Marks points in time. On GPUs, CUDA events on the current stream: the
/// GPU's own clock, so the intervals are the device's time for the work
/// between marks, without host synchronisation in between. On CPUs, the
/// steady clock.
class Stopwatch {
 public:
  Stopwatch(bool cuda, int marks) : cuda_(cuda), host_(static_cast<std::size_t>(marks), 0.0) {
#ifdef DTSIM_TORCH_CUDA
    if (cuda_) {
      events_.resize(static_cast<std::size_t>(marks));
      for (auto& e : events_) check(cudaEventCreate(&e), "cudaEventCreate");
    }
#endif
  }
  ~Stopwatch() {
#ifdef DTSIM_TORCH_CUDA
    for (auto& e : events_) cudaEventDestroy(e);
#endif
  }
  Stopwatch(const Stopwatch&) = delete;
  Stopwatch& operator=(const Stopwatch&) = delete;

  void mark(int i) {
#ifdef DTSIM_TORCH_CUDA
    if (cuda_) {
      check(cudaEventRecord(events_[static_cast<std::size_t>(i)], c10::cuda::getCurrentCUDAStream().stream()), "cudaEventRecord");
      return;
    }
#endif
    host_[static_cast<std::size_t>(i)] = std::chrono::duration<double>(Clock::now().time_since_epoch()).count();
  }
  /// Seconds from mark a to mark b (waits for mark b on GPUs).
  double seconds(int a, int b) {
#ifdef DTSIM_TORCH_CUDA
    if (cuda_) {
      check(cudaEventSynchronize(events_[static_cast<std::size_t>(b)]), "cudaEventSynchronize");
      float ms = 0;
      check(cudaEventElapsedTime(&ms, events_[static_cast<std::size_t>(a)], events_[static_cast<std::size_t>(b)]), "cudaEventElapsedTime");
      return ms / 1e3;
    }
#endif
    return host_[static_cast<std::size_t>(b)] - host_[static_cast<std::size_t>(a)];
  }

 private:
#ifdef DTSIM_TORCH_CUDA
  static void check(cudaError_t e, const char* what) {
    if (e != cudaSuccess) throw std::runtime_error(std::string(what) + ": " + cudaGetErrorString(e));
  }
  std::vector<cudaEvent_t> events_;
#endif
  bool cuda_;
  std::vector<double> host_;
};

class Bench {
 public:
  explicit Bench(Options o) : o_(std::move(o)), cuda_(o_.device == "cuda") { announce_alive(); }
  ~Bench() {
    if (alive_fd_ >= 0) ::close(alive_fd_);
  }
  Bench(const Bench&) = delete;
  Bench& operator=(const Bench&) = delete;

  void sync() const {
    if (cuda_) torch::cuda::synchronize();
  }
  double now() const { return std::chrono::duration<double>(Clock::now().time_since_epoch()).count(); }

  /// Calls f(false) for kWarmups warm-ups (allocator, lazy initialisation,
  /// cuBLAS heuristics, caches), then f(true) until `budget` seconds have
  /// passed, at least 3 (CPU) or 10 (CUDA) and at most 10000 times.
  /// Returns false without measuring when one warm-up took longer than
  /// `cap` seconds: the point does not fit the program's time.
  template <class F>
  bool repeat(F&& f, double budget, double cap) const {
    for (int i = 0; i < kWarmups; ++i) {
      const double t0 = now();
      f(false);
      if (now() - t0 > cap) return false;
    }
    const int min_reps = cuda_ ? 10 : 3;
    const double start = now();
    for (int r = 0; r < 10000; ++r) {
      f(true);
      if (r + 1 >= min_reps && now() - start > budget) break;
    }
    return true;
  }

  /// Measuring time per layer point (after the warm-ups).
  /// GPUs are steady: 0.15 s holds at least the 10 runs repeat() takes.
  double layer_budget() const { return o_.budget_s > 0 ? o_.budget_s : (cuda_ ? 0.15 : (o_.quick ? 0.2 : 1.0)); }

  // Note [Loop and step interleaved]
  // The simulator scales a layer's sweep times by its time in the chained
  // step over its time alone in a loop (Note [Layers in a step]), so the
  // two must meet the machine at one speed. Timed one after the other
  // (the loops for half a budget, then the step for one), they met two:
  // on the AMD VM, whose speed moves between two levels for minutes at a
  // time (Note [A pass at the machine's usual speed]), one calibration
  // timed seq2seq-tiny's encoder at 1.01 ms forward in the loop, where the
  // sweep at the usual speed had 1.74 and the step 1.84: a ratio of 1.83
  // that priced its DDP step at 19.2 ms where the calibration made 20
  // minutes before priced it at 9.3 (ratio 0.94), and the step measured
  // 15.0-16.5. So a CPU's full sweep times them in kStepRounds rounds,
  // each the loops for a round's share of their budget and then the step
  // for its share, and pools each series' runs over the rounds: a spell
  // that falls in some rounds slows both series alike, and the two series'
  // medians (or fastest runs) compare like with like. GPUs, steady, and
  // the quick sweep keep one round; the profile records the rounds (info
  // torch.step_rounds). The simulator's choice between the two series'
  // typical and fastest runs (Note [Small layers in a step] in
  // sim/src/cost/cost_profile.cpp) stands: with rounds, always the typical
  // runs was tried on one tiny-model calibration and its suite, and moved
  // bilstm-tiny's nine rows about 17 points toward the measured steps
  // (its chained LSTM's fastest forward 1.87 ms against the loop's 2.69,
  // medians 3.18 and 3.39) and gpt2-tiny's ten about 11 points away (its
  // block's loop median 9.79 ms, fastest 7.46, the chain's 7.88 and 7.31):
  // four rounds of seconds each still meet a spell in one series and not
  // the other (docs/validation-cpu.md, 2026-12-03, night).
  //
  // Note [A step's ratio round by round]
  // Pooled over the rounds, a spell that falls on one series in one round
  // still moves that series' median (or fastest run) and not the other's.
  // Each round's loop and chain run seconds apart, so the ratio of the
  // round's two medians compares one speed of the machine; the median of
  // those ratios over the rounds drops the round a spell split. Each
  // "|in-step" record carries it (LayerSample::round_ratio_*; a copy's
  // rounds, the copies' mean in the profile), and the simulator takes it
  // as the step's typical ratio where it is there (Note [Small layers in a
  // step] in sim/src/cost/cost_profile.cpp). On the AMD VM the rounds'
  // ratios of one layer spread 1.19-1.57x (quartiles of max over min over
  // a seed 003 sweep's 56 series), and the same calibrations' suites
  // replayed with each rule (docs/validation-cpu.md, 2026-12-03, late):
  // the tiny models' 29 rows 7.2% -> 4.3% median, the worst +41.4% ->
  // +24.2% (bilstm-tiny's LSTMs, whose rounds' ratios ran 0.6-2.4), and
  // 10.6% -> 8.6% on a second set; three seed 003 sets 20.3% -> 17.1%,
  // 16.6% -> 16.6% and 13.8% -> 16.4%.
  static constexpr int kStepRounds = 4;
  int step_rounds() const { return cuda_ || o_.quick ? 1 : kStepRounds; }

  /// Seconds one warm-up run may take before its point is skipped: a point
  /// whose single run is this slow would hold the sweep for minutes.
  double time_cap(double budget) const { return std::max(o_.quick ? 5.0 : 30.0, 10 * budget); }

  torch::TensorOptions options(const std::string& precision) const {
    return torch::TensorOptions().dtype(dtype_of(precision)).device(cuda_ ? torch::kCUDA : torch::kCPU);
  }

  void progress(const std::string& label) {
    lockstep();
    std::printf("progress\t%d\t%d\t%s\n", done_++, total_, label.c_str());
    std::fflush(stdout);
  }

  // Note [Copies in lockstep]
  // On a CPU, calibration times the layers while copies of this program run
  // the same sweep beside it (Note [Ranks share a CPU] in driver.cpp): the
  // ranks of a job compute the same layers at the same time. Started
  // together, the copies drift apart within minutes (their warm-ups and
  // skips differ), and then one copy times an LSTM beside the other's GEMMs
  // or optimizer sweeps: in one calibration on the CI machine every LSTM
  // point of the step phase came out 37% slower than the same shape in the
  // sweep. So every point (and probe) starts with a barrier: each copy
  // creates the file "<barrier>-<rank>" in the shared directory and waits
  // until all N exist; the copies number their barriers alike.
  // A copy that does not arrive within a minute (its point took over its time
  // cap) ends the lockstep for this copy, which goes on alone; so does a copy
  // that is gone (Note [Partner gone]), as soon as it is found gone.
  //
  // Note [Partner gone]
  // A copy that died (crashed, killed, or stopped with the calibration that
  // started it) never reaches the barrier, and its partners used to wait the
  // whole minute for it, alone, re-parented to init. So each copy holds an
  // exclusive flock(2) on "alive-<rank>" in the shared folder for as long as
  // it lives: the kernel releases it when the process ends however it ends
  // ("locks are released ... when all file descriptors referring to the open
  // file description are closed", which exit does; flock(2)), zombie or not,
  // and a reused pid cannot fake it. A waiting copy tries that lock every
  // 50 ms: if it gets it, the partner is gone. The file is locked under a
  // temporary name and renamed into place, so a partner that has not started
  // yet (no file) is never mistaken for one that has gone (a free lock).
  void announce_alive() {
    if (o_.lockstep_dir.empty() || o_.lockstep_n <= 1) return;
    const std::string path = alive_file(o_.lockstep_rank), tmp = path + ".tmp";
    alive_fd_ = ::open(tmp.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0600);
    if (alive_fd_ < 0 || ::flock(alive_fd_, LOCK_EX) != 0 || std::rename(tmp.c_str(), path.c_str()) != 0) {
      std::fprintf(stderr, "dtsim_torch_bench: cannot create %s: %s; going on without lockstep\n", path.c_str(), std::strerror(errno));
      o_.lockstep_dir.clear();
    }
  }
  std::string alive_file(int rank) const { return o_.lockstep_dir + "/alive-" + std::to_string(rank); }
  /// Note [Partner gone]: whether copy `rank` started and has ended since.
  bool partner_gone(int rank) const {
    const int fd = ::open(alive_file(rank).c_str(), O_RDONLY | O_CLOEXEC);
    if (fd < 0) return false;  // not started yet
    const bool gone = ::flock(fd, LOCK_EX | LOCK_NB) == 0;
    ::close(fd);  // releases the lock if we took it
    return gone;
  }
  void lockstep() {
    if (o_.lockstep_dir.empty() || o_.lockstep_n <= 1) return;
    const int point = barriers_++;
    const auto file = [&](int k, int r) { return o_.lockstep_dir + "/" + std::to_string(k) + "-" + std::to_string(r); };
    std::FILE* f = std::fopen(file(point, o_.lockstep_rank).c_str(), "w");
    if (f == nullptr) {
      o_.lockstep_dir.clear();
      return;
    }
    std::fclose(f);
    const auto until = Clock::now() + std::chrono::seconds(60);
    for (int r = 0; r < o_.lockstep_n; ++r) {
      auto next_check = Clock::now() + std::chrono::milliseconds(50);
      while (::access(file(point, r).c_str(), F_OK) != 0) {
        if (Clock::now() > next_check) {
          next_check = Clock::now() + std::chrono::milliseconds(50);
          // Gone, and not just after arriving (its barrier file would be there).
          if (partner_gone(r) && ::access(file(point, r).c_str(), F_OK) != 0) {
            std::fprintf(stderr, "dtsim_torch_bench: copy %d ended before barrier %d; going on without lockstep\n", r, point);
            o_.lockstep_dir.clear();
            return;
          }
        }
        if (Clock::now() > until) {
          std::fprintf(stderr, "dtsim_torch_bench: copy %d did not reach barrier %d within 60 s; going on without lockstep\n", r, point);
          o_.lockstep_dir.clear();
          return;
        }
        std::this_thread::sleep_for(std::chrono::microseconds(200));
      }
    }
    // Every copy has passed the previous barrier: its file is no longer read.
    if (point > 0) std::remove(file(point - 1, o_.lockstep_rank).c_str());
  }
  // Note [Layers in a data-parallel step]
  // A data-parallel rank on a CPU runs its layers slower than one process
  // alone, on the same core and with its thread on that core throughout:
  // on the AMD VM (docs/validation-cpu.md, 2026-12-04) mlp's layers took
  // 1.4-1.8x their time in a single process pinned alike, vgg11-tiny's
  // 1.28-1.35x, conv-autoencoder's 1.18-1.26x, while two single
  // processes, one a core, ran as fast as one. Gloo's all-reduce is what
  // differs: its TCP thread and two workers share the rank's core, and
  // its bytes go through the kernel twice (the kernel took 43% of both
  // cores in an mlp DDP run), emptying the caches the next step's layers
  // would find warm; a loopback stream of the gradients' size beside a
  // single process reproduced it for mlp but not for conv-autoencoder,
  // whose small convolutions feel the threads' switching more than the
  // bytes. So where copies run in lockstep on a CPU (a full sweep), every
  // chained step (Note [Layers in a step]) is followed in each round by as
  // many steps that all-reduce their gradients between the copies over
  // Gloo, as dtsim_worker's DDP does (one flat buffer after the backward,
  // summed, then averaged back; the rank polls its collective as a bound
  // worker does, Note [Busy waits] in runtime/src/comm.cpp), and each
  // layer's times in those steps are a record of signature
  // "<signature>|in-dp-step" with its ratio over the loop round by round
  // (Note [A step's ratio round by round]). Every copy runs as many of
  // them as the copy whose plain steps ran most (an all-reduce of the
  // counts), so the collectives pair. A group that does not form, or a
  // collective that fails, within a minute ends these steps for the rest
  // of the sweep, which goes on as before. The simulator prices a rank
  // whose gradients are reduced over a data-parallel group by that ratio
  // (Note [Layers in a data-parallel step] in sim/src/cost/cost_profile.cpp).
#if defined(DTSIM_BENCH_GLOO)
  using DpGroup = c10::intrusive_ptr<c10d::ProcessGroupGloo>;
#else
  struct DpGroup {
    explicit operator bool() const { return false; }
    void reset() {}
  };
#endif
  static constexpr int kDpTimeoutS = 60;

  /// The copies' Gloo group for one step point, or none (a GPU, a quick
  /// sweep, no lockstep, or a group that failed before).
  DpGroup dp_group() {
#if defined(DTSIM_BENCH_GLOO)
    if (cuda_ || o_.quick || dp_off_ || o_.lockstep_dir.empty() || o_.lockstep_n <= 1) return {};
    const std::string path = o_.lockstep_dir + "/dp-" + std::to_string(dp_groups_++);
    try {
      auto store = c10::make_intrusive<c10d::FileStore>(path, o_.lockstep_n);
      store->setTimeout(std::chrono::seconds(kDpTimeoutS));
      auto opt = c10d::ProcessGroupGloo::Options::create(std::chrono::seconds(kDpTimeoutS));
      // Note [Gloo's event loop] (platform/src/process.cpp): as dtsim_worker's.
      dtsim::platform::lower_threads_started_by(dtsim::platform::lowers_event_loops(cpus_), [&] {
        opt->devices.push_back(c10d::ProcessGroupGloo::createDeviceForHostname("127.0.0.1"));
      });
      opt->threads = 2;  // as dtsim_worker's groups (runtime/src/comm.cpp)
      return c10::make_intrusive<c10d::ProcessGroupGloo>(store, o_.lockstep_rank, o_.lockstep_n, opt);
    } catch (const std::exception& e) {
      dp_failed(e.what());
    }
#endif
    return {};
  }

  void dp_failed(const std::string& what) {
    if (!dp_off_) {
      std::fprintf(stderr, "dtsim_torch_bench: the copies' all-reduce failed (%s); the steps go on without it\n",
                   first_line(what).c_str());
    }
    dp_off_ = true;
  }

  /// The most `mine` of every copy (at least 3 and at most 10,000), or
  /// nothing where the group failed (then `dp` is reset).
  std::optional<std::int64_t> agreed_count(DpGroup& dp, std::int64_t mine) {
#if defined(DTSIM_BENCH_GLOO)
    auto t = torch::full({1}, std::clamp<std::int64_t>(mine, 3, 10000), torch::kLong);
    std::vector<torch::Tensor> v{t};
    c10d::AllreduceOptions opt;
    opt.reduceOp = c10d::ReduceOp::MAX;
    try {
      dp->allreduce(v, opt)->wait();
      return t.item<std::int64_t>();
    } catch (const std::exception& e) {
      dp_failed(e.what());
    }
#else
    (void)mine;
#endif
    dp.reset();
    return std::nullopt;
  }

  /// The parameters' gradients summed over the copies and averaged, through
  /// one flat buffer (`flat`, kept between steps); `dp` is reset if it fails.
  void all_reduce_grads(DpGroup& dp, const std::vector<torch::Tensor>& params, torch::Tensor& flat) {
#if defined(DTSIM_BENCH_GLOO)
    if (!dp) return;
    torch::NoGradGuard no_grad;
    std::int64_t total = 0;
    for (const auto& prm : params) total += prm.grad().defined() ? prm.grad().numel() : 0;
    if (total == 0) return;
    if (!flat.defined() || flat.numel() != total) flat = torch::empty({total}, params.front().options());
    std::int64_t off = 0;
    for (const auto& prm : params) {
      if (!prm.grad().defined()) continue;
      flat.narrow(0, off, prm.grad().numel()).copy_(prm.grad().reshape({-1}));
      off += prm.grad().numel();
    }
    std::vector<torch::Tensor> v{flat};
    try {
      auto work = dp->allreduce(v);
      if (!cpus_.empty()) {
        while (!work->isCompleted()) std::this_thread::yield();
      }
      work->wait();
    } catch (const std::exception& e) {
      dp_failed(e.what());
      dp.reset();
      return;
    }
    flat.div_(o_.lockstep_n);
    off = 0;
    for (const auto& prm : params) {
      if (!prm.grad().defined()) continue;
      prm.grad().copy_(flat.narrow(0, off, prm.grad().numel()).view_as(prm.grad()));
      off += prm.grad().numel();
    }
#else
    (void)params;
    (void)flat;
    dp.reset();
#endif
  }

  void skip(const std::string& label, const std::string& why) {
    std::printf("skip\t%s\t%s\n", label.c_str(), why.c_str());
    std::fflush(stdout);
  }

  // ---- layers ----
  struct LayerPoint {
    std::string signature, precision;
    std::int64_t b, s;
  };

  /// A model's layers chained as one training step (Note [Layers in a step]).
  struct StepPoint {
    std::string model;
    std::vector<std::string> chain;  ///< signatures, in the model's order
    std::string precision;
    std::int64_t b, s;
    int tp;
    int ep = 1;  ///< Note [Expert-parallel shares]
  };

  /// (tp, cp) pairs of the given degrees whose product is at most `most`, tp-major.
  static std::vector<std::pair<int, int>> degrees(const std::vector<int>& tps, const std::vector<int>& cps, int most) {
    std::vector<std::pair<int, int>> out;
    for (const int tp : tps) {
      for (const int cp : cps) {
        if (tp * cp <= most) out.push_back({tp, cp});
      }
    }
    return out;
  }

  /// Seed 003's families: the image models (one image a sample) and the
  /// bag-of-words and encoder-decoder text models.
  static bool seed003_family(const dtsim::sim::Model& model) {
    if (model.max_seq_len() == 1) return true;
    dtsim::sim::WorkloadShape shape;
    shape.seq_len = model.max_seq_len();
    const auto layers = model.layers(shape);
    if (layers.empty()) return false;
    const std::string& sig = layers.front().signature;
    return sig.rfind("bag.", 0) == 0 || sig.rfind("s2s.", 0) == 0;
  }

  /// The micro-batches and sequence lengths model `name`'s layers are swept at.
  std::pair<std::vector<std::int64_t>, std::vector<std::int64_t>> sweep_shapes(const std::string& name,
                                                                                const dtsim::sim::Model& model) const {
    const bool lstm = name.find("lstm") != std::string::npos;
    std::vector<std::int64_t> bs, ss;
    if (cuda_) {
      // Note [GPU sweep]
      // Seven models in three precisions at every shape of the CPU's
      // sweep would take a quarter of an hour on an H100, mostly in
      // shapes no run uses: a model trains at its context length, and a
      // 16-bit gpt2-xl holds 25 GB of states before a single activation.
      // So a model is swept at its own sequence length (other lengths
      // are interpolated in tokens), in fp32 and fp16 (bf16 runs on the
      // same tensor cores at the same speed: the simulator takes fp16's
      // times for it, Note [Profile lookups]), and models over 500M
      // parameters at micro-batches up to 4; no whole-model steps (see
      // below). With steps at micro-batch 4 it took 4 min 18 s on an H100;
      // the first try, with a quarter of the length too, three precisions
      // and steps at micro-batch 16, did not finish in seven and a half.
      // The Llama family's configs give their longest context (Llama 3.2:
      // 131,072 tokens; Mixtral: 32,768) where pre-training runs at a few
      // thousand: those are swept at 4,096, where the GPU rows run.
      const std::int64_t full = std::min<std::int64_t>(model.max_seq_len(), kGpuSweepSeq);
      bs = o_.quick ? std::vector<std::int64_t>{1, 4} : std::vector<std::int64_t>{1, 2, 4, 8, 16};
      if (!o_.quick && model.parameters() > 500'000'000) bs = {1, 2, 4};
      ss = o_.quick ? std::vector<std::int64_t>{std::min<std::int64_t>(128, full), std::min<std::int64_t>(512, full)}
                    : std::vector<std::int64_t>{full};
    } else {
      bs = o_.quick ? std::vector<std::int64_t>{1, 2} : std::vector<std::int64_t>{1, 2, 4};
      ss = o_.quick ? std::vector<std::int64_t>{64, 128} : std::vector<std::int64_t>{64, 128, 256, 512};
    }
    if (lstm && !cuda_) ss = o_.quick ? std::vector<std::int64_t>{32, 64} : std::vector<std::int64_t>{32, 64, 128, 256};
    // Shorter models are swept at their own length: seed 003's encoder-
    // decoder at its 32 tokens, the image models at one image a sample,
    // where the batch is what varies (they train at 4 to 128 images).
    for (auto& s : ss) s = std::min(s, model.max_seq_len());
    ss.erase(std::unique(ss.begin(), ss.end()), ss.end());
    if (model.max_seq_len() == 1) bs = o_.quick ? std::vector<std::int64_t>{4, 16} : std::vector<std::int64_t>{4, 16, 64};
    // Note [GPU sweep]: on a GPU seed 003's models train at 4 to 512
    // samples (examples/README.md: the CNN at 4, the encoder-decoder at
    // 128, NBoW at 512) and their layers are so small that a batch under
    // 64 times launches, not work: swept up to 256, so the rows' batches
    // are measured or one step from a measured one, not extrapolated from
    // a launch-bound 16.
    if (cuda_ && !o_.quick && seed003_family(model)) bs = {4, 16, 64, 256};
    return {bs, ss};
  }

  std::vector<LayerPoint> layer_points(std::vector<StepPoint>* steps = nullptr) const {
    std::vector<LayerPoint> out;
    std::set<std::string> seen;
    for (const auto& name : o_.models) {
      const auto model = dtsim::models::load_model(name);
      dtsim::sim::WorkloadShape shape;
      shape.seq_len = std::min<std::int64_t>(64, model->max_seq_len());
      const auto [bs, ss] = sweep_shapes(name, *model);
      // Note [Context parallelism] (models/torch): a cp=k block is one
      // rank's share, its s/k queries against the whole sequence's keys.
      // Shares of tp x cp ranks up to the most ranks a degree asks for.
      const int most = std::max(*std::max_element(o_.tp.begin(), o_.tp.end()), *std::max_element(o_.cp.begin(), o_.cp.end()));
      // One share's layers (those not swept yet) and its whole-model steps.
      const auto share = [&](int tp, int cp, int ep, bool sp = false) {
        shape.tp = tp;
        shape.etp = tp;  // a MoE block's experts split over tp: Megatron-Core's default, the plans' (etp 0)
        shape.cp = cp;
        shape.ep = ep;
        shape.sequence_parallel = sp;
        // Note [Dispatchers swept]: a tp share's chain as megatron-tp runs a
        // MoE block (Megatron-Core's allgather dispatcher), an ep share's as
        // megatron-moe does (alltoall); the other dispatcher's blocks swept
        // beside them.
        shape.moe_allgather = sp && tp > 1;
        std::vector<std::string> chain;
        bool fresh = false;
        // Every precision and shape of a signature not swept yet; false if it was.
        const auto sweep = [&](const std::string& sig) {
          if (!seen.insert(sig).second) return false;
          for (const auto& p : o_.precisions) {
            for (auto s : ss) {
              if (s > model->max_seq_len()) continue;
              for (auto b : bs) out.push_back({sig, p, b, s});
            }
          }
          return true;
        };
        for (const auto& layer : model->layers(shape)) {
          chain.push_back(layer.signature);
          if (sweep(layer.signature)) fresh = true;
        }
        // A sequence-parallel share's MoE blocks with their experts whole
        // on each rank too (etp=1, as Megatron-Core's MoE recipes run them:
        // Note [Experts under tensor parallelism] in models/torch).
        if (sp && tp > 1) {
          dtsim::sim::WorkloadShape whole = shape;
          whole.etp = 1;
          for (const auto& layer : model->layers(whole)) {
            if (layer.signature.rfind("moe.block:", 0) == 0) sweep(layer.signature);
          }
        }
        // Note [Dispatchers swept]
        // A MoE block's work differs by dispatcher where it gathers (etp x ep
        // > 1): the allgather dispatcher's experts pick their rows from every
        // gathered token and scatter into a buffer of all of them, the
        // alltoall dispatcher's permute the rank's own (models/src/llama.cpp,
        // Note [Mixture of experts]); each signature names its own (ag=1).
        if (model->experts() > 0 && ((sp && tp > 1) || ep > 1)) {
          dtsim::sim::WorkloadShape other = shape;
          other.moe_allgather = !shape.moe_allgather;
          for (const auto& layer : model->layers(other)) {
            if (layer.signature.rfind("moe.block:", 0) == 0) sweep(layer.signature);
          }
        }
        // Note [GPU sweep]: on a GPU the Llama family's blocks also as SDPA
        // runs them (flash=1: what a 16-bit plan runs there by default); the
        // GPT-2 and BERT twins run eager attention only.
        if (cuda_) {
          dtsim::sim::WorkloadShape fs = shape;
          fs.flash_attention = true;
          for (const auto& layer : model->layers(fs)) {
            const std::string& sig = layer.signature;
            const bool llama = sig.rfind("llama.", 0) == 0 || sig.rfind("moe.", 0) == 0;
            if (llama && sig.find(",flash=1") != std::string::npos) sweep(sig);
          }
        }
        // A context-parallel share's blocks both ways: on the p2p ring (the
        // default) and after an all-gather (cpag=1; Note [Ring attention]
        // in models/torch/src/torch_layers.cpp), whose attention differs.
        if (cp > 1) {
          dtsim::sim::WorkloadShape ag = shape;
          ag.cp_all_gather = true;
          for (const auto& layer : model->layers(ag)) {
            if (layer.signature.find(",cpag=1") != std::string::npos) sweep(layer.signature);
          }
        }
        // The whole model once per sequence length at the largest
        // micro-batch (the quick sweep: the shortest only). Not on a GPU:
        // its profiles price the step by Note [Host launch] instead of
        // in-step ratios (sim/src/cost/cost_profile.cpp), and the steps took a
        // minute of the H100's calibration.
        // No whole-model steps of context- or sequence-parallel shares: a step record names its tp only.
        if (!fresh || steps == nullptr || cuda_ || cp > 1 || sp) return;
        // Note [Small steps]
        // Where the sweep's micro-batches span more than a factor of four
        // (seed 003's image models: 4 to 64 images), the smallest too. A
        // layer in a step pays for what the layers between its runs pushed
        // out of cache, its weights and LibTorch's dispatch state, which
        // does not shrink with the batch: the CNN's first convolution took
        // 2.55 ms in the loop and 2.63 in a step of 64 images (1.03x), and
        // at 4 images 93 us in the loop and about 176 us in a validated
        // step, where the 64-image ratio priced 100 us (its model-parallel
        // row -35%, every phase short: docs/validation-cpu.md).
        const auto step_bs = dtsim::calib::bench::step_batches(bs);
        for (const auto& p : o_.precisions) {
          for (auto s : ss) {
            if (s > model->max_seq_len()) continue;
            for (const auto b : step_bs) steps->push_back({name, chain, p, b, s, tp, ep});
            if (o_.quick) break;
          }
        }
      };
      // Note [Sequence-parallel shares]: a tensor-parallel share's layers
      // under sequence parallelism too (sp=1: the norms and residuals on
      // s/tp tokens, the column-parallel linears gathering theirs), where
      // the twins run it (GPT-2 and the Llama family; MoE blocks with
      // their experts split over tp, Note [Experts under tensor
      // parallelism] in models/torch, but not gpt-oss's, whose experts
      // have biases).
      const auto sp_runs = [&](int tp) {
        dtsim::sim::WorkloadShape probe = shape;
        probe.tp = probe.etp = tp;
        probe.cp = probe.ep = 1;
        for (const auto& layer : model->layers(probe)) {
          const auto& sig = layer.signature;
          const bool moe = sig.rfind("moe.block:", 0) == 0 && sig.find(",mb=1") == std::string::npos;
          if (sig.rfind("gpt2.", 0) != 0 && sig.rfind("llama.", 0) != 0 && !moe) return false;
        }
        return true;
      };
      for (const auto& [tp, cp] : degrees(o_.tp, o_.cp, most)) {
        if (!model->tp_error(tp).empty()) continue;  // the Bi-LSTM has no tensor-parallel split
        if (!model->cp_error(cp, tp).empty()) continue;  // nor a context-parallel one
        share(tp, cp, 1);
        if (tp > 1 && cp == 1 && sp_runs(tp)) share(tp, 1, 1, true);
      }
      // Note [Expert-parallel shares]
      // A MoE block at ep=k is one rank's share: the rows of its E/k experts
      // and the dispatch's bookkeeping, not E/k of the whole block's time
      // (moe-tiny's block at b 4, s 128 took as long at ep 2 as at ep 1,
      // 5.2 ms forward: the same rows through half the experts, where its
      // kernels priced it at 3.3 ms). So the blocks of every
      // degree --tp names that divides the experts are timed too (tp 1), as
      // the grouped GEMMs below are, each built alone with a loopback
      // exchange (make_torch_layer): the all-to-alls are priced apart. Only
      // the moe.block signatures change with ep; the other layers were swept.
      for (const int ep : o_.tp) {
        if (ep > 1 && model->experts() > 0 && model->ep_error(ep).empty()) share(1, 1, ep);
      }
      // Note [Balanced blocks]
      // A moe.block's signature without load= is the balanced block the
      // simulator prices (moe_imbalance 1), so its blocks are timed routing
      // round-robin (models::force_moe_balance, Note [Forced balance] in
      // models/torch/src/torch_layers.cpp). The router of a freshly drawn
      // block is not balanced: at ep 2 the loopback doubles this rank's own
      // skew, and moe-tiny's untrained router sends one rank 1.2-1.3x its
      // share (docs/validation-cpu.md), which the profile then took for
      // the balanced block's time.
    }
    return out;
  }

  // Note [Layers in a step]
  // A layer timed alone in a loop keeps its weights, activations and
  // LibTorch's own dispatch state in cache from one run to the next. In a
  // training step the layers before it have run in between. On the CI
  // machine a bilstm-tiny LSTM layer's backward took 3.6 ms in the loop and
  // 4.1 ms in a real step, and a gpt2-tiny step 6-8% more than its layers'
  // loop times; touching 8 MB between runs of the loop doubled the LSTM's.
  // So each model's layers are also run chained, as one step (outputs feed
  // the next layer's input, backward runs layer by layer from the loss, the
  // runtime's Adam updates every parameter after it, untimed), and
  // every layer's own forward and backward inside that step are printed as
  // layer records of signature "<signature>|in-step", beside its loop times
  // taken in the same minute ("<signature>|loop", in rounds with the step's:
  // Note [Loop and step interleaved]). The simulator scales a layer's
  // loop times by the in-step over loop ratio at the nearest step shape.
  void measure_step(const StepPoint& pt) {
    const std::string label = pt.model + (pt.tp > 1 ? " tp=" + std::to_string(pt.tp) : "") +
                              (pt.ep > 1 ? " ep=" + std::to_string(pt.ep) : "") + " step " + pt.precision +
                              " b=" + std::to_string(pt.b) + " s=" + std::to_string(pt.s);
    progress(label);
    try {
      const auto opts = options(pt.precision);
      const std::size_t n = pt.chain.size();
      std::vector<std::unique_ptr<dtsim::models::TorchLayer>> layers;
      std::vector<std::vector<torch::Tensor>> inputs;
      for (const auto& sig : pt.chain) {
        layers.push_back(dtsim::models::make_torch_layer(sig));
        dtsim::models::force_moe_balance(*layers.back());  // Note [Balanced blocks]
        layers.back()->module().to(opts.device(), dtype_of(pt.precision));
        layers.back()->module().train();
        inputs.push_back(layers.back()->make_inputs(pt.b, pt.s, opts));
      }
      const double budget = layer_budget();
      // Each distinct layer alone, moments before the chain, so the ratio
      // of the two is not the machine's drift between the sweep and the
      // step (on the CI machine a gpt2-tiny block's loop time moved by 25%
      // between two calibrations half an hour apart); in rounds, each
      // round the loops then the chain (Note [Loop and step interleaved]).
      std::vector<std::size_t> distinct;  // the first layer of each signature
      {
        std::set<std::string> looped;
        for (std::size_t i = 0; i < n; ++i) {
          if (looped.insert(pt.chain[i]).second) distinct.push_back(i);
        }
      }
      std::vector<std::vector<double>> loop_fwd(n), loop_bwd(n);
      std::vector<std::vector<double>> fwd(n), bwd(n);
      Stopwatch fw(cuda_, static_cast<int>(n) + 1), bw(cuda_, static_cast<int>(n) + 1);
      // The runtime's Adam over every parameter after the backward, untimed
      // (Note [Layers in a step]: the next forward finds its weights where
      // the optimizer left them).
      std::vector<torch::Tensor> params;
      for (auto& l : layers) {
        for (auto& prm : l->module().parameters()) params.push_back(prm);
      }
      std::vector<dtsim::models::AdamState> states(params.size());
      std::int64_t steps_done = 0;
      // Note [Layers in a data-parallel step]: the copies' group, the
      // gradients' flat buffer, and the layers' times in those steps.
      auto dp = dp_group();
      torch::Tensor flat;
      std::vector<std::vector<double>> dp_fwd(n), dp_bwd(n);
      auto run_step = [&](bool record, bool reduce) {
        std::vector<torch::Tensor> outs(n), ins(n);
        for (std::size_t i = 0; i < n; ++i) {
          layers[i]->module().zero_grad(/*set_to_none=*/true);
          for (auto& t : inputs[i]) {
            if (t.requires_grad() && t.grad().defined()) t.mutable_grad() = torch::Tensor();
          }
        }
        sync();
        fw.mark(0);
        for (std::size_t i = 0; i < n; ++i) {
          auto in = inputs[i];
          // The previous layer's output is this one's input, as a leaf that
          // takes its gradient (dtsim_worker's units do the same).
          if (i > 0) in[0] = outs[i - 1].detach().requires_grad_(true);
          ins[i] = in[0];
          outs[i] = layers[i]->forward(in);
          fw.mark(static_cast<int>(i) + 1);
        }
        const auto dy = outs[n - 1].dim() == 0 ? torch::Tensor() : torch::ones_like(outs[n - 1]);
        bw.mark(static_cast<int>(n));
        torch::Tensor grad;
        for (std::size_t i = n; i-- > 0;) {
          if (i + 1 == n) {
            if (dy.defined()) outs[i].backward(dy);
            else outs[i].backward();
          } else {
            outs[i].backward(grad);
          }
          grad = ins[i].requires_grad() ? ins[i].grad() : torch::Tensor();
          bw.mark(static_cast<int>(i));
          if (i > 0 && !grad.defined()) throw std::runtime_error("layer " + pt.chain[i] + " passed no gradient back");
        }
        ++steps_done;
        if (reduce) all_reduce_grads(dp, params, flat);
        for (std::size_t k = 0; k < params.size(); ++k) {
          if (params[k].grad().defined()) dtsim::models::adam_update(params[k], params[k].grad(), states[k], steps_done, {});
        }
        if (record) {
          auto& f = reduce ? dp_fwd : fwd;
          auto& g = reduce ? dp_bwd : bwd;
          for (std::size_t i = 0; i < n; ++i) {
            f[i].push_back(fw.seconds(static_cast<int>(i), static_cast<int>(i) + 1));
            g[i].push_back(bw.seconds(static_cast<int>(i) + 1, static_cast<int>(i)));
          }
        }
      };
      auto step = [&](bool record) { run_step(record, false); };
      const auto loop = [&](std::size_t k, double share) {
        const std::size_t i = distinct[k];
        if (time_loop_samples(*layers[i], inputs[i], share, time_cap(budget / 2), loop_fwd[i], loop_bwd[i])) return true;
        skip(label, "one run of " + pt.chain[i] + " took over the time cap");
        return false;
      };
      // Where each round ended in each series (Note [A step's ratio round by round]).
      std::vector<std::vector<std::size_t>> loop_ends, step_ends, dp_ends;
      const auto chained = [&](double share) {
        if (repeat(step, share, time_cap(budget))) {
          loop_ends.emplace_back();
          step_ends.emplace_back();
          for (std::size_t i = 0; i < n; ++i) {
            loop_ends.back().push_back(loop_fwd[i].size());
            step_ends.back().push_back(fwd[i].size());
          }
          // Note [Layers in a data-parallel step]: as many steps again with
          // the all-reduce, every copy the most any copy's plain steps ran.
          if (dp) {
            const std::size_t ran = step_ends.size() > 1 ? step_ends.back()[0] - step_ends[step_ends.size() - 2][0] : step_ends.back()[0];
            if (const auto count = agreed_count(dp, static_cast<std::int64_t>(ran))) {
              run_step(false, true);  // a warm-up: the group's first use connects its pairs
              for (std::int64_t k = 0; k < *count && dp; ++k) run_step(true, true);
            }
            if (dp) {
              dp_ends.emplace_back();
              for (std::size_t i = 0; i < n; ++i) dp_ends.back().push_back(dp_fwd[i].size());
            } else {
              dp_ends.clear();  // a round cut short: no ratio from these rounds
            }
          }
          return true;
        }
        skip(label, "one run took over " + std::to_string(static_cast<int>(time_cap(budget))) + " s");
        return false;
      };
      if (!dtsim::calib::bench::interleaved(step_rounds(), distinct.size(), budget / 2, budget, loop, chained)) return;
      for (const std::size_t i : distinct) {
        print_layer(pt.chain[i] + "|loop", pt.precision, pt.b, pt.s, stats(loop_fwd[i]), stats(loop_bwd[i]));
      }
      // Layers of one signature (the blocks) pool their timings.
      std::vector<std::string> order;
      std::map<std::string, std::pair<std::vector<double>, std::vector<double>>> pooled;
      for (std::size_t i = 0; i < n; ++i) {
        auto& [f, g] = pooled[pt.chain[i]];
        if (f.empty()) order.push_back(pt.chain[i]);
        f.insert(f.end(), fwd[i].begin(), fwd[i].end());
        g.insert(g.end(), bwd[i].begin(), bwd[i].end());
      }
      // Note [A step's ratio round by round]: each round's runs, the step's
      // pooled over the layers of one signature as above.
      const auto rounds_of = [](const std::vector<double>& v, const std::vector<std::vector<std::size_t>>& ends, std::size_t i,
                                std::vector<std::vector<double>>& out) {
        out.resize(ends.size());
        for (std::size_t r = 0; r < ends.size(); ++r) {
          const std::size_t a = r ? ends[r - 1][i] : 0, b = ends[r][i];
          out[r].insert(out[r].end(), v.begin() + static_cast<std::ptrdiff_t>(a), v.begin() + static_cast<std::ptrdiff_t>(b));
        }
      };
      for (const auto& sig : order) {
        std::vector<std::vector<double>> step_f, step_b, loop_f, loop_b;
        for (std::size_t i = 0; i < n; ++i) {
          if (pt.chain[i] != sig) continue;
          if (loop_f.empty()) {  // the loop times the first of a signature's layers
            rounds_of(loop_fwd[i], loop_ends, i, loop_f);
            rounds_of(loop_bwd[i], loop_ends, i, loop_b);
          }
          rounds_of(fwd[i], step_ends, i, step_f);
          rounds_of(bwd[i], step_ends, i, step_b);
        }
        const double rf = dtsim::calib::bench::round_ratio(step_f, loop_f), rb = dtsim::calib::bench::round_ratio(step_b, loop_b);
        print_layer(sig + "|in-step", pt.precision, pt.b, pt.s, stats(pooled[sig].first), stats(pooled[sig].second), -1, -1, rf, rb);
        // Note [Layers in a data-parallel step]: the same layers in the steps
        // that all-reduced, where every round ran them.
        if (dp_ends.size() != loop_ends.size() || dp_ends.size() < 2) continue;
        std::vector<std::vector<double>> dp_f, dp_b;
        std::vector<double> all_f, all_b;
        for (std::size_t i = 0; i < n; ++i) {
          if (pt.chain[i] != sig) continue;
          rounds_of(dp_fwd[i], dp_ends, i, dp_f);
          rounds_of(dp_bwd[i], dp_ends, i, dp_b);
          all_f.insert(all_f.end(), dp_fwd[i].begin(), dp_fwd[i].end());
          all_b.insert(all_b.end(), dp_bwd[i].begin(), dp_bwd[i].end());
        }
        print_layer(sig + "|in-dp-step", pt.precision, pt.b, pt.s, stats(all_f), stats(all_b), -1, -1,
                    dtsim::calib::bench::round_ratio(dp_f, loop_f), dtsim::calib::bench::round_ratio(dp_b, loop_b));
      }
    } catch (const c10::Error& e) {
      skip(label, first_line(e.what_without_backtrace()));
    } catch (const std::bad_alloc&) {
      skip(label, "out of host memory");
    } catch (const std::runtime_error& e) {
      skip(label, e.what());
    }
  }

  /// Note [Machine probe] (torch_layers.hpp): the reference workload, the
  /// copies together; CPUs only. Returns its seconds (0 on CUDA).
  double probe() {
    if (cuda_) return 0;
    lockstep();
    return dtsim::models::probe_seconds(0.5);
  }

  // Note [Sweep passes]
  // This CPU's speed moves over seconds to minutes: in one calibration on
  // the CI machine one LSTM point took 3.27 ms where its neighbours, timed
  // a second before and after, took 1.9, and the runtime measured 2.0
  // minutes later. A point timed in one window takes whatever state the
  // machine was in. So on CPUs the layer sweep runs three times over, each
  // pass with a third of the measuring time, and a point's median is the
  // fastest of its three passes' medians (its min and max over all passes):
  // a disturbance only ever slows a run, so the fastest pass is the least
  // disturbed (on a CPU now the fastest at the usual speed: the Note
  // below). (The median of the three did not do: with each point the
  // slower of two copies, a bert-tiny layer backward at b 4, s 512 came out
  // at 62.0 ms where the same layer took 37.2 ms in the step minutes later
  // and its fastest run in the sweep 35.4 ms.) GPUs are steady: one pass.
  //
  // Note [A pass at the machine's usual speed]
  // The fastest pass assumes one undisturbed speed. The 2-vCPU AMD VM has
  // two for minutes at a time: on 2026-12-03 the reference layer read 5.1
  // ms across a morning calibration and 9.4-11.2 ms across an afternoon
  // one, and in a single sweep its probes ranged 5.2-13.7 ms; the conv
  // autoencoder's first convolution at 4 images took 36 us in the passes
  // probed at 5.4 ms and 76 us in the one probed at 11.1. So a layer was priced from whichever
  // pass met a fast spell, while the profile's probe, the speed against
  // which a validation round is judged quiet (Note [Machine probe]), was
  // the sweep's usual one: rounds judged quiet were priced short, and the
  // CPU suite's rows were short in nearly every set. So on a CPU's full
  // sweep each point's timing is preceded by a short probe (two warm-ups
  // and three runs, 30-60 ms; the copies run it together, after the
  // point's barrier), the profile's probe is the median of all of them
  // (the usual speed), and a point takes the fastest of its passes probed
  // within kUsualSpeed of it, as a quiet validation round is, or, where
  // none was, the pass probed nearest it (pass_at_usual_speed in
  // bench_common.hpp). Not scaled by the probe: a spell slows layers by
  // its ratio to the power 0.4-0.85 (log-log slope over one sweep's
  // passes: fully-connected 0.40, convolutions 0.46, the LSTMs 0.73-0.79).
  // One set of rounds replayed against profiles made with either rule
  // (docs/validation-cpu.md, 2026-12-03, evening): seed 003's median error
  // 28.1% (every row short) with the fastest pass, 14.1-14.2% with this
  // one; the tiny models' 29 rows 13.0% (28 short) against 5.9-8.0%.
  // Quick and GPU sweeps run one pass and are unchanged.
  struct PassTimes {
    std::vector<Stats> forward, backward;
    std::vector<double> probes;  ///< Note [A pass at the machine's usual speed]: each pass's, where probed
    bool failed = false;
    std::int64_t forward_transient = -1, backward_rise = -1;  ///< Note [Layer memory]; -1: not measured
  };

  static Stats of_pass(const std::vector<Stats>& passes, std::size_t chosen) {
    Stats out;
    for (const Stats& s : passes) {
      out.min = out.reps == 0 ? s.min : std::min(out.min, s.min);
      out.max = std::max(out.max, s.max);
      out.reps += s.reps;
    }
    out.median = passes[chosen].median;
    out.mean = passes[chosen].mean;
    return out;
  }

  int passes() const { return o_.passes > 0 ? o_.passes : (cuda_ || o_.quick ? 1 : 3); }
  /// Note [A pass at the machine's usual speed]: a CPU's sweep of several passes.
  bool probe_points() const { return !cuda_ && passes() > 1; }

  // Note [One layer per series]
  // Building a layer initialises its weights on the host, then copies them
  // to the device. On the 2-core CI machine (one LibTorch thread) building
  // Llama 3.2's embedding (263M parameters) took 7.6 s and casting it to
  // fp16 3.9 s; a Mixtral block (1.4B) 85 s and 22 s. The H100's sweep of
  // the newer families ran at 4 s a point against a timing budget of
  // 0.15 s, 25 minutes for 396 (docs/validation-gpu.md). The sweep's points
  // of one signature and precision are consecutive (layer_points), so the
  // module is built once for them and kept until the next series; its
  // gradients are set to none before every run, as for a fresh one.
  std::unique_ptr<dtsim::models::TorchLayer> layer_;
  std::string layer_series_;

  void measure_layer(const LayerPoint& pt, int pass, PassTimes& out) {
    const std::string label = pt.signature + " " + pt.precision + " b=" + std::to_string(pt.b) + " s=" + std::to_string(pt.s) +
                              (passes() > 1 ? " (pass " + std::to_string(pass + 1) + "/" + std::to_string(passes()) + ")" : "");
    progress(label);
    if (out.failed) return;  // skipped in an earlier pass, and said so then
    // Points are swept by growing tokens: once one is over the time cap, the
    // larger ones of that layer and precision are skipped without trying.
    const std::string series = pt.signature + " " + pt.precision;
    if (const auto it = too_slow_.find(series); pass == 0 && it != too_slow_.end() && pt.b * pt.s >= it->second) {
      out.failed = true;
      skip(label, "a point with fewer tokens already exceeded the time cap");
      return;
    }
    const double budget = layer_budget() / passes();
    try {
      // Note [One layer per series]: the points of a layer and precision
      // come one after another and share the module.
      if (series != layer_series_) {
        layer_.reset();  // its device memory first
        layer_series_.clear();
        layer_ = dtsim::models::make_torch_layer(pt.signature);
        dtsim::models::force_moe_balance(*layer_);  // Note [Balanced blocks]
        layer_->module().to(options(pt.precision).device(), dtype_of(pt.precision));
        layer_->module().train();
        layer_series_ = series;
      }
      auto* layer = layer_.get();
      const auto opts = options(pt.precision);
      auto inputs = layer->make_inputs(pt.b, pt.s, opts);
      Stats f, g;
      // Note [A pass at the machine's usual speed]: the machine's speed as
      // this pass times the point (the copies together, after its barrier).
      const double speed = probe_points() ? dtsim::models::probe_seconds(0) : 0;
      if (!time_loop(*layer, inputs, budget, &f, &g)) {
        too_slow_[series] = pt.b * pt.s;
        out.failed = true;
        skip(label, "one run took over " + std::to_string(static_cast<int>(time_cap(budget))) + " s");
      } else {
        out.forward.push_back(f);
        out.backward.push_back(g);
        if (speed > 0) out.probes.push_back(speed);
        if (pass == 0) layer_memory(*layer, inputs, &out.forward_transient, &out.backward_rise);
      }
    } catch (const c10::Error& e) {
      // Out of memory (c10::OutOfMemoryError is a c10::Error) or an op this
      // device or dtype lacks (e.g. fp16 matmul on a CPU).
      out.failed = true;
      skip(label, first_line(e.what_without_backtrace()));
    } catch (const std::bad_alloc&) {
      out.failed = true;
      skip(label, "out of host memory");
    } catch (const dtsim::UnsupportedError& e) {
      // A layer the LibTorch twins cannot build in this share (a moe.block
      // split over tp without sequence parallelism, or with etp 1): the
      // simulator prices it from its kernels.
      out.failed = true;
      skip(label, e.what());
    }
    if (out.failed) {  // a failed point (out of memory, mid-run) leaves no module behind
      layer_.reset();
      layer_series_.clear();
    }
#ifdef DTSIM_TORCH_CUDA
    if (cuda_) c10::cuda::CUDACachingAllocator::emptyCache();
#endif
  }

  void print_layer(const std::string& signature, const std::string& precision, std::int64_t b, std::int64_t s, const Stats& f,
                   const Stats& g, std::int64_t forward_transient = -1, std::int64_t backward_rise = -1, double round_ratio_forward = 0,
                   double round_ratio_backward = 0) {
    std::printf("layer\t%s\t%s\t%lld\t%lld\t%.9g\t%.9g\t%.9g\t%.9g\t%.9g\t%.9g\t%d\t%.9g\t%.9g", signature.c_str(),
                precision.c_str(), static_cast<long long>(b), static_cast<long long>(s), f.median, f.min, f.max, g.median, g.min,
                g.max, f.reps, f.mean, g.mean);
    const bool ratios = round_ratio_forward > 0 || round_ratio_backward > 0;
    if ((forward_transient >= 0 && backward_rise >= 0) || ratios) {
      std::printf("\t%lld\t%lld", static_cast<long long>(forward_transient), static_cast<long long>(backward_rise));
    }
    if (ratios) std::printf("\t%.9g\t%.9g", round_ratio_forward, round_ratio_backward);
    std::printf("\n");
    std::fflush(stdout);
  }

  // Note [Layer memory]
  // What a layer holds for backward follows from what it saves (the
  // analytic models' formulas), but some of what it holds for a moment does
  // not: cuDNN's LSTM takes a workspace of its own choosing, a head holds
  // fp32 logits and their gradients, a block's masks and upcasts come and
  // go; nor do oneDNN's blocked-format copies of a convolution's output on
  // a CPU. So each layer point runs once more untimed, reading the caching
  // allocator on a GPU (its books are kept on the host as work is queued)
  // and the counting allocator on a CPU (the runtime's way of counting):
  // how far the forward rose above what it left allocated (its transient),
  // and how far the backward rose above what was allocated as it began (its
  // gradients, the input's gradient and its workspaces). The simulator
  // holds a layer's pass at those heights where a profile measured them.
  void layer_memory(dtsim::models::TorchLayer& layer, std::vector<torch::Tensor>& inputs, std::int64_t* forward_transient,
                    std::int64_t* backward_rise) {
    // A failure here costs the point its memory, never its timings.
    try {
      layer.module().zero_grad(/*set_to_none=*/true);
      for (auto& t : inputs) {
        if (t.requires_grad() && t.grad().defined()) t.mutable_grad() = torch::Tensor();
      }
      sync();
      reset_peak();
      auto y = layer.forward(inputs);
      const std::int64_t fwd_peak = peak_bytes(), fwd_current = current_bytes();
      const auto dy = y.dim() == 0 ? torch::Tensor() : torch::ones_like(y);
      const std::int64_t before = current_bytes();
      reset_peak();
      if (dy.defined()) {
        y.backward(dy);
      } else {
        y.backward();
      }
      const std::int64_t bwd_peak = peak_bytes();
      sync();
      *forward_transient = std::max<std::int64_t>(0, fwd_peak - fwd_current);
      *backward_rise = std::max<std::int64_t>(0, bwd_peak - before);
    } catch (const std::exception&) {
      *forward_transient = *backward_rise = -1;
    }
  }
  /// The allocated bytes now and at their peak since reset_peak(): the
  /// caching allocator's on a GPU, the counting allocator's on a CPU.
  std::int64_t current_bytes() const {
#ifdef DTSIM_TORCH_CUDA
    if (cuda_) return c10::cuda::CUDACachingAllocator::getDeviceStats(c10::cuda::current_device()).allocated_bytes[0].current;
#endif
    return g_cpu_current.load();
  }
  std::int64_t peak_bytes() const {
#ifdef DTSIM_TORCH_CUDA
    if (cuda_) return c10::cuda::CUDACachingAllocator::getDeviceStats(c10::cuda::current_device()).allocated_bytes[0].peak;
#endif
    return g_cpu_peak.load();
  }
  void reset_peak() {
#ifdef DTSIM_TORCH_CUDA
    if (cuda_) {
      c10::cuda::CUDACachingAllocator::resetPeakStats(c10::cuda::current_device());
      return;
    }
#endif
    g_cpu_peak.store(g_cpu_current.load());
  }

  /// Times one layer's forward and backward alone, in a loop; false when
  /// one warm-up run took over the time cap.
  bool time_loop(dtsim::models::TorchLayer& layer, std::vector<torch::Tensor>& inputs, double budget, Stats* f_out, Stats* g_out) {
    std::vector<double> fwd, bwd;
    if (!time_loop_samples(layer, inputs, budget, time_cap(budget), fwd, bwd)) return false;
    *f_out = stats(fwd);
    *g_out = stats(bwd);
    return true;
  }

  /// time_loop's runs, appended to `fwd` and `bwd`; false where a warm-up
  /// run took over `cap` seconds.
  bool time_loop_samples(dtsim::models::TorchLayer& layer, std::vector<torch::Tensor>& inputs, double budget, double cap,
                         std::vector<double>& fwd, std::vector<double>& bwd) {
    Stopwatch watch(cuda_, 4);
    auto step = [&](bool record) {
      // Gradients set to none, as PyTorch 2's optimizer.zero_grad() does
      // (LibTorch 1.13 and 2.x differ in zero_grad's default): backward
      // writes them fresh instead of accumulating. Input gradients too,
      // including a tied head's borrowed embedding.
      layer.module().zero_grad(/*set_to_none=*/true);
      for (auto& t : inputs) {
        if (t.requires_grad() && t.grad().defined()) t.mutable_grad() = torch::Tensor();
      }
      sync();
      watch.mark(0);
      auto y = layer.forward(inputs);
      watch.mark(1);
      // The output gradient is made outside both timings.
      const auto dy = y.dim() == 0 ? torch::Tensor() : torch::ones_like(y);
      watch.mark(2);
      if (dy.defined()) {
        y.backward(dy);
      } else {
        y.backward();
      }
      watch.mark(3);
      const double backward_s = watch.seconds(2, 3);  // waits for the GPU
      if (record) {
        fwd.push_back(watch.seconds(0, 1));
        bwd.push_back(backward_s);
      }
    };
    return repeat(step, budget, cap);
  }

  // ---- kernels ----
  struct KernelPoint {
    std::string kind, precision;
    std::int64_t m, n, k, batch;
  };

  /// Note [Python host probe] (driver.cpp): this loop's side of what a
  /// Python loop adds, the same work as calibrate/src/python_host_probe.py;
  /// timed with `--host-probe` alone, in rounds with the Python probe's
  /// (Note [Probe and loop interleaved]), not in the sweep.
  static std::vector<KernelPoint> host_probe_points() {
    std::vector<KernelPoint> out{{"host_ops", "fp32", kProbeRepeats * 4, 1, 1, 1}};
    for (std::int64_t tensors : {1, 16}) out.push_back({"host_step", "fp32", kProbeElements * tensors, tensors, 1, 1});
    return out;
  }

  std::vector<KernelPoint> kernel_points() const {
    std::vector<KernelPoint> out;
    std::vector<std::int64_t> squares;
    std::vector<std::array<std::int64_t, 3>> shapes;  // transformer GEMMs: tokens x out x in
    std::vector<std::int64_t> elems;
    if (cuda_) {
      squares = o_.quick ? std::vector<std::int64_t>{256, 1024, 4096} : std::vector<std::int64_t>{128, 256, 512, 1024, 2048, 4096, 8192, 16384};
      for (std::int64_t t : {512, 2048, 8192}) {
        for (std::int64_t h : {768, 1600}) {
          shapes.push_back({t, 3 * h, h});
          shapes.push_back({t, h, 4 * h});
          shapes.push_back({t, 4 * h, h});
        }
      }
      for (std::int64_t e = 1 << 12; e <= (o_.quick ? 1 << 24 : 1 << 28); e <<= 2) elems.push_back(e);
    } else {
      squares = o_.quick ? std::vector<std::int64_t>{64, 128, 256, 512, 1024} : std::vector<std::int64_t>{64, 128, 256, 512, 1024, 2048, 4096};
      for (std::int64_t t : {64, 256}) {
        shapes.push_back({t, 2304, 768});
        shapes.push_back({t, 768, 3072});
        shapes.push_back({t, 3072, 768});
      }
      for (std::int64_t e = 1 << 12; e <= (o_.quick ? 1 << 22 : 1 << 26); e <<= 2) elems.push_back(e);
    }
    for (const auto& p : o_.precisions) {
      for (auto s : squares) out.push_back({"gemm", p, s, s, s, 1});
      for (const auto& sh : shapes) out.push_back({"gemm", p, sh[0], sh[1], sh[2], 1});
      // Attention: scores (s x s over d = 64) and context (s x 64 over s), batch x heads = 12 or 48.
      for (std::int64_t s : cuda_ ? std::vector<std::int64_t>{128, 512, 1024} : std::vector<std::int64_t>{64, 128}) {
        for (std::int64_t bh : {12, 48}) {
          out.push_back({"attention", p, s, s, 64, bh});
          out.push_back({"attention", p, s, 64, s, bh});
        }
      }
      for (auto e : elems) out.push_back({"elementwise", p, e, 1, 1, 1});
      for (std::int64_t rows : {256, 1024, 4096}) {
        for (std::int64_t width : {768, 1600}) out.push_back({"norm", p, rows, width, 1, 1});
      }
      for (const auto& g : grouped_gemms()) out.push_back({"grouped_gemm", p, g[0], g[1], g[2], g[3]});
    }
    // The runtime's optimizer step (models::adam_update) over P parameters in
    // T tensors, fp32 as its states are: m = P, n = T.
    std::vector<std::int64_t> params;
    for (std::int64_t e = cuda_ ? 1 << 20 : 1 << 16; e <= (cuda_ ? 1 << 26 : (o_.quick ? 1 << 22 : 1 << 24)); e <<= 2) params.push_back(e);
    // And its gradient buckets' copies (Note [Gradient buckets], models::flatten_grads, unflatten_grads).
    for (const char* opt : {"adam", "sgd", "bucket_in", "bucket_out"}) {
      for (auto n : params) {
        for (std::int64_t tensors : {1, 16}) out.push_back({opt, "fp32", n, tensors, 1, 1});
      }
    }
    if (cuda_) {
      // Mixed precision: 16-bit parameters stepped through fp32 masters
      // (Note [Mixed-precision step] in models/torch), which launch more
      // kernels per tensor than an fp32 step.
      for (auto n : params) {
        for (std::int64_t tensors : {1, 16}) out.push_back({"adam", "bf16", n, tensors, 1, 1});
      }
      // ZeRO-Offload's step on the host (Note [Offloaded step] in runtime/src/trainer.cpp).
      // In both 16-bit formats: the H100 runs' fp16 steps took 2-4x the
      // bf16 step calibration had timed (docs/validation-gpu.md). Up to
      // 256M parameters: the runs' shards are 110M-355M, where the step
      // cost 1.9-2.3 us a parameter on both H100 hosts, and the cost per
      // parameter grows with the size (0.54 us at 4M, 0.75 us at 16M in
      // the 2026-11-24 profile): a smaller largest point prices them short.
      for (const char* p : {"bf16", "fp16"}) {
        for (std::int64_t n = 1 << 22; n <= (o_.quick ? 1 << 24 : 1 << 28); n <<= 2) out.push_back({"host_adam", p, n, 1, 1, 1});
      }
    }
    return out;
  }

  // Note [Grouped GEMMs] (sim/src/cost/cost_profile.cpp): a mixture of
  // experts' routed experts run as one grouped GEMM per matrix, `batch` =
  // the rank's experts, m = the rows each gets (tokens x top-k / experts).
  // Timed as torch::bmm of equal groups: a sweep of expert widths, group
  // counts and rows per expert, and every expert GEMM (forward, dgrad,
  // wgrad) the simulator looks up for the MoE models given (--models) at
  // their layer sweep's shapes, without and with expert parallelism over the
  // --tp degrees (the ranks calibration runs), tp 1.
  std::vector<std::array<std::int64_t, 4>> grouped_gemms() const {
    std::set<std::array<std::int64_t, 4>> seen;
    std::vector<std::array<std::int64_t, 4>> out;  // m, n, k, batch
    const auto add = [&](std::int64_t m, std::int64_t n, std::int64_t k, std::int64_t batch) {
      if (m > 0 && n > 0 && k > 0 && batch > 1 && seen.insert({m, n, k, batch}).second) out.push_back({m, n, k, batch});
    };
    // The experts' SwiGLU, h wide in and out, fe wide inside: gate_up (2 fe x h), down (h x fe).
    struct Width {
      std::int64_t h, fe;
    };
    const std::vector<Width> widths = cuda_ ? std::vector<Width>{{2048, 1408}, {4096, 14336}} : std::vector<Width>{{256, 512}};
    for (const auto& w : widths) {
      const bool big = w.fe > 8192;  // Mixtral's: 8 experts
      if (big && o_.quick) continue;
      for (std::int64_t batch : big ? std::vector<std::int64_t>{8} : std::vector<std::int64_t>{4, 8, 32}) {
        if (!cuda_ && batch > 8) continue;
        for (std::int64_t m : cuda_ ? std::vector<std::int64_t>{128, 512, 2048} : std::vector<std::int64_t>{32, 128}) {
          if (big && m > 512) continue;
          add(m, 2 * w.fe, w.h, batch);
          add(m, w.h, w.fe, batch);
        }
      }
    }
    for (const auto& name : o_.models) {
      const auto model = dtsim::models::load_model(name);
      if (model->experts() == 0) continue;
      const auto [bs, ss] = sweep_shapes(name, *model);
      for (const int ep : o_.tp) {
        if (!model->ep_error(ep).empty()) continue;
        for (auto s : ss) {
          for (auto b : bs) {
            if (s > model->max_seq_len()) continue;
            dtsim::sim::WorkloadShape shape;
            shape.micro_batch = b;
            shape.seq_len = s;
            shape.ep = ep;
            for (const auto& layer : model->layers(shape)) {
              for (const auto* pass : {&layer.forward, &layer.backward}) {
                for (const auto& k : *pass) {
                  if (k.kind == dtsim::sim::KernelKind::kGemm && k.batch > 1) add(k.m, k.n, k.k, k.batch);
                }
              }
            }
          }
        }
      }
    }
    return out;
  }

  void measure_kernel(const KernelPoint& k) {
    const std::string label = k.kind + " " + k.precision + " " + std::to_string(k.m) + "x" + std::to_string(k.n) + "x" +
                              std::to_string(k.k) + (k.batch > 1 ? " batch " + std::to_string(k.batch) : "");
    progress(label);
    const auto opts = options(k.precision);
    const double e = element_size(k.precision);
    double flops = 0, bytes = 0;
    std::function<torch::Tensor()> op;
    try {
      if (k.kind == "gemm") {
        auto a = torch::randn({k.m, k.k}, opts), b = torch::randn({k.k, k.n}, opts);
        op = [a, b] { return torch::mm(a, b); };
        flops = 2.0 * k.m * k.n * k.k;
        bytes = e * (k.m * k.k + k.k * k.n + k.m * k.n);
      } else if (k.kind == "attention" || k.kind == "grouped_gemm") {
        auto a = torch::randn({k.batch, k.m, k.k}, opts), b = torch::randn({k.batch, k.k, k.n}, opts);
        op = [a, b] { return torch::bmm(a, b); };
        flops = 2.0 * k.batch * k.m * k.n * k.k;
        bytes = e * k.batch * (k.m * k.k + k.k * k.n + k.m * k.n);
      } else if (k.kind == "elementwise") {
        auto a = torch::randn({k.m}, opts), b = torch::randn({k.m}, opts);
        op = [a, b] { return a + b; };
        flops = static_cast<double>(k.m);
        bytes = 3 * e * k.m;
      } else if (k.kind == "adam" || k.kind == "sgd") {
        // A step updates every tensor in turn; the states persist across
        // steps, as training's do. Runs rotate over sets that fill twice
        // the cache (Note [Cold optimizer step]).
        struct Param {
          torch::Tensor p, g;
          dtsim::models::AdamState state;
        };
        dtsim::models::AdamConfig config;
        config.sgd = k.kind == "sgd";
        config.momentum = config.sgd ? 0.9 : 0;  // the runtime's SGD (trainer.cpp)
        // The runtime's default optimizer, AdamW at 0.01 (trainer.cpp); its
        // samples say so by their bytes (Note [Adam's decay] in sim/src/cost/cost_profile.cpp).
        config.weight_decay = config.sgd ? 0 : 0.01;
        const std::int64_t set_bytes = k.m * (config.sgd ? 12 : 16);  // fp32 weight and gradient, m (and v)
        const std::int64_t sets = std::max<std::int64_t>(1, dtsim::calib::eviction_bytes(last_level_cache()) / set_bytes);
        auto ps = std::make_shared<std::vector<std::vector<Param>>>(sets);
        for (auto& set : *ps) {
          for (std::int64_t t = 0; t < k.n; ++t) {
            set.push_back({torch::randn({k.m / k.n}, opts), torch::randn({k.m / k.n}, opts), {}});
            dtsim::models::adam_update(set.back().p, set.back().g, set.back().state, 1, config);  // the states' first allocation
          }
        }
        op = [ps, config, step = std::int64_t{1}]() mutable {
          ++step;
          auto& set = (*ps)[static_cast<std::size_t>(step) % ps->size()];
          for (auto& q : set) dtsim::models::adam_update(q.p, q.g, q.state, step, config);
          return set.front().p;
        };
        // AdamW: read grad, weight, m, v; write weight, m, v (28 B), and
        // the decay's read and write of the weight (8 B). The runtime's
        // momentum SGD: the buffer scaled (read, write), the gradient added
        // (read both, write), the step (read weight and buffer, write
        // weight): 32 B.
        bytes = static_cast<double>(k.m) * (config.sgd ? 32 : 36);
      } else if (k.kind == "host_ops") {
        // Linear, LayerNorm, GELU and a residual add on a tiny input,
        // kProbeRepeats times, autograd recording as in a forward: the
        // probe's forward, op for op.
        torch::nn::Linear lin(kProbeWidth, kProbeWidth);
        torch::nn::LayerNorm norm(torch::nn::LayerNormOptions({kProbeWidth}));
        torch::nn::GELU act;
        lin->to(opts.device());
        norm->to(opts.device());
        auto x = torch::randn({kProbeRows, kProbeWidth}, opts);
        op = [lin, norm, act, x]() mutable {
          torch::AutoGradMode grad(true);
          auto y = x;
          for (int r = 0; r < kProbeRepeats; ++r) y = act(norm(lin(y))) + y;
          return y;
        };
      } else if (k.kind == "host_step") {
        // The runtime's step (models::adam_update) over n tensors of
        // kProbeElements, warm: the host's time, as the probe's torch.optim.AdamW.
        struct Param {
          torch::Tensor p, g;
          dtsim::models::AdamState state;
        };
        // AdamW as the runtime's (weight decay 0.01, runtime/src/trainer.cpp)
        // and torch.optim.AdamW's default.
        dtsim::models::AdamConfig config;
        config.lr = 1e-4;
        config.weight_decay = 0.01;
        auto set = std::make_shared<std::vector<Param>>();
        for (std::int64_t t = 0; t < k.n; ++t) {
          set->push_back({torch::zeros({kProbeElements}, opts), torch::randn({kProbeElements}, opts), {}});
          dtsim::models::adam_update(set->back().p, set->back().g, set->back().state, 1, config);
        }
        op = [set, config, step = std::int64_t{1}]() mutable {
          ++step;
          for (auto& q : *set) dtsim::models::adam_update(q.p, q.g, q.state, step, config);
          return set->front().p;
        };
      } else if (k.kind == "host_adam") {
        // Note [Offloaded step] (runtime/src/trainer.cpp): the 16-bit
        // gradient shard in a pinned host buffer, Adam on the fp32 master
        // and moments in host memory, and the 16-bit parameters written
        // into a pinned buffer for the copy back: all on the host's cores.
        const auto host = torch::TensorOptions().device(torch::kCPU);
        const auto half = host.dtype(dtype_of(k.precision)).pinned_memory(cuda_);
        auto grad = torch::randn({k.m}, host).to(half.dtype()).pin_memory();
        auto master = torch::randn({k.m}, host);
        auto up = torch::empty({k.m}, half);
        auto state = std::make_shared<dtsim::models::AdamState>();
        dtsim::models::AdamConfig config;
        if (k.precision == "fp16") config.grad_scale = 1024;  // as the runtime scales fp16's loss
        dtsim::models::adam_update(master, grad, *state, 1, config);  // the moments' first allocation
        op = [grad, master, up, state, config, step = std::int64_t{1}]() mutable {
          dtsim::models::adam_update(master, grad, *state, ++step, config);
          up.copy_(master);
          return up;
        };
        bytes = static_cast<double>(k.m) * 30;  // the update's 28 (2-byte gradient) and the 16-bit copy out
      } else if (k.kind == "bucket_in" || k.kind == "bucket_out") {
        // A bucket of n gradients in and out of its flat buffer, cold as the
        // optimizer's states are (sets filling twice the cache).
        struct Bucket {
          std::vector<torch::Tensor> params;
          torch::Tensor flat;
        };
        const std::int64_t set_bytes = k.m * 8;  // fp32 gradients and the flat bucket
        const std::int64_t sets = std::max<std::int64_t>(1, dtsim::calib::eviction_bytes(last_level_cache()) / set_bytes);
        auto bs = std::make_shared<std::vector<Bucket>>(sets);
        for (auto& b : *bs) {
          for (std::int64_t t = 0; t < k.n; ++t) {
            b.params.push_back(torch::randn({k.m / k.n}, opts).requires_grad_(true));
            b.params.back().mutable_grad() = torch::randn({k.m / k.n}, opts);
          }
          b.flat = torch::randn({k.m / k.n * k.n}, opts);
        }
        const bool in = k.kind == "bucket_in";
        op = [bs, in, run = std::int64_t{0}]() mutable {
          auto& b = (*bs)[static_cast<std::size_t>(++run) % bs->size()];
          if (in) {
            dtsim::models::flatten_grads(b.params, b.flat, false);
          } else {
            dtsim::models::unflatten_grads(b.params, b.flat, 2.0);
          }
          return b.flat;
        };
        // In: read the gradient, write the bucket; out: read the bucket, write
        // the gradient, then divide it in place.
        bytes = static_cast<double>(k.m) * (in ? 8 : 16);
      } else {
        auto x = torch::randn({k.m, k.n}, opts);
        auto w = torch::ones({k.n}, opts), bias = torch::zeros({k.n}, opts);
        op = [x, w, bias, n = k.n] { return torch::layer_norm(x, {n}, w, bias); };
        flops = 5.0 * k.m * k.n;  // mean, variance, normalise, scale, shift
        bytes = 2 * e * k.m * k.n;
      }
      torch::NoGradGuard no_grad;
      std::vector<double> times;
      Stopwatch watch(cuda_ && k.kind != "host_adam", 2);  // the host's step on the host's clock
      const double budget = o_.budget_s > 0 ? o_.budget_s : (cuda_ ? 0.1 : (o_.quick ? 0.05 : 0.2));
      const bool measured = repeat([&](bool record) {
        sync();
        watch.mark(0);
        auto y = op();
        watch.mark(1);
        const double t = watch.seconds(0, 1);  // waits for the GPU
        if (record) times.push_back(t);
      }, budget, time_cap(budget));
      if (!measured) {
        skip(label, "one run took over " + std::to_string(static_cast<int>(time_cap(budget))) + " s");
        return;
      }
      const Stats s = stats(times);
      std::printf("kernel\t%s\t%s\t%lld\t%lld\t%lld\t%lld\t%.9g\t%.9g\t%.9g\t%.9g\t%.9g\t%d\n", k.kind.c_str(), k.precision.c_str(),
                  static_cast<long long>(k.m), static_cast<long long>(k.n), static_cast<long long>(k.k), static_cast<long long>(k.batch),
                  flops, bytes, s.median, s.min, s.max, s.reps);
      std::fflush(stdout);
    } catch (const c10::Error& err) {
      skip(label, first_line(err.what_without_backtrace()));
    } catch (const std::bad_alloc&) {
      skip(label, "out of host memory");
    }
  }

  // Note [Cold optimizer step]
  // In training, a step's optimizer finds its states where the previous
  // step left them: a whole forward and backward ago, long evicted. Timed in
  // a loop, they stay in cache from one run to the next. On the CI machine
  // (models::adam_update, one thread) 170K parameters in 16 tensors took
  // 263 us hot and 444 us with the caches evicted between runs, and the
  // runtime's bilstm-tiny step (170K in 18) took 490-580 us; 1M parameters
  // 1.07 ms hot, 1.36 ms cold. So an optimizer point keeps enough
  // independent sets of parameters, gradients and states to fill twice the
  // last-level cache, and each run updates the next set in turn: the one it
  // updates was last touched a full round ago. (Overwriting a buffer between
  // runs evicts as well, but on a CPU it streams hundreds of megabytes the
  // concurrent copy's layers then compete with: one calibration that did had
  // every LSTM point 60% slower than the runtime measured minutes later.)
  /// The last-level cache's bytes as the system reports them (0: unknown).
  std::int64_t last_level_cache() const {
#ifdef DTSIM_TORCH_CUDA
    if (cuda_) {
      cudaDeviceProp prop{};
      return cudaGetDeviceProperties(&prop, 0) == cudaSuccess ? prop.l2CacheSize : 0;
    }
#endif
    return std::max<long>(0, ::sysconf(_SC_LEVEL3_CACHE_SIZE));
  }

  void memory_records() {
#ifdef DTSIM_TORCH_CUDA
    if (!cuda_) return;
    namespace alloc = c10::cuda::CUDACachingAllocator;
    // Index 0 of the stat arrays is StatType::AGGREGATE (the enum moved
    // namespaces between LibTorch versions).
    const auto allocated = [] { return static_cast<long long>(alloc::getDeviceStats(0).allocated_bytes[0].current); };
    auto a = torch::randn({64, 64}, options("fp32"));
    torch::cuda::synchronize();
    const long long base = allocated();
    // cuBLAS's workspace, which recent LibTorch takes from the caching
    // allocator at the first matmul: what the product allocated beyond its output.
    auto b = torch::mm(a, a);
    torch::cuda::synchronize();
    std::printf("memory\tcublas_workspace_bytes\t%lld\n", allocated() - base - static_cast<long long>(b.nbytes()));
    // The CUDA context (and library handles): device memory in use that the
    // caching allocator did not reserve. Assumes no other process uses the GPU.
    std::size_t free = 0, total = 0;
    if (cudaMemGetInfo(&free, &total) == cudaSuccess) {
      const auto reserved = static_cast<long long>(alloc::getDeviceStats(0).reserved_bytes[0].current);
      std::printf("memory\tcuda_context_bytes\t%lld\n", static_cast<long long>(total - free) - reserved);
      std::printf("memory\tdevice_total_bytes\t%lld\n", static_cast<long long>(total));
    }
    // The caching allocator rounds requests up to 512-byte blocks: what one
    // odd-sized allocation costs beyond its size.
    const long long before_odd = allocated();
    auto odd = torch::empty({1001}, options("fp32").dtype(torch::kByte));
    std::printf("memory\tallocator_rounding_bytes\t%lld\n", allocated() - before_odd - 1001);
    std::fflush(stdout);
#endif
  }

  /// The caching allocator's bytes with no tensor alive, after training
  /// steps and kernels have run: the workspaces its libraries keep (a cuBLAS
  /// workspace per thread and stream that ran a matmul, the forward's and
  /// autograd's), which a training process holds throughout.
  void workspace_at_rest() {
#ifdef DTSIM_TORCH_CUDA
    if (!cuda_) return;
    // The last layer series' module (Note [One layer per series]) is not a
    // workspace: released first. (The seed-003 lease's calibration, which
    // kept it, read 71.2 MiB here where the full one had read 65 MiB, and
    // the MLP's run holds 65 MiB beside its states; its last module, a
    // small transposed convolution, is KiBs, so the rest is not explained.)
    layer_.reset();
    layer_series_.clear();
    torch::cuda::synchronize();
    c10::cuda::CUDACachingAllocator::emptyCache();
    const auto rest = c10::cuda::CUDACachingAllocator::getDeviceStats(c10::cuda::current_device()).allocated_bytes[0].current;
    std::printf("memory\tworkspace_at_rest_bytes\t%lld\n", static_cast<long long>(rest));
    std::fflush(stdout);
#endif
  }

  void info() const {
    std::string device = "cpu";
    if (cuda_) {
#ifdef DTSIM_TORCH_CUDA
      cudaDeviceProp prop{};
      if (cudaGetDeviceProperties(&prop, 0) == cudaSuccess) device = prop.name;
      int runtime = 0;
      cudaRuntimeGetVersion(&runtime);
      std::printf("info\tcuda_runtime\t%d\n", runtime);
      try {
        std::printf("info\tcudnn\t%ld\n", at::detail::getCUDAHooks().versionCuDNN());
      } catch (const c10::Error&) {
        // A LibTorch built without cuDNN: nothing to report.
      }
#else
      device = "cuda";
#endif
    } else {
      std::ifstream cpuinfo("/proc/cpuinfo");
      for (std::string line; std::getline(cpuinfo, line);) {
        if (line.rfind("model name", 0) == 0) {
          device = line.substr(line.find(':') + 2);
          break;
        }
      }
    }
    std::printf("info\tdevice\t%s\n", device.c_str());
    std::printf("info\ttorch_version\t%d.%d.%d\n", TORCH_VERSION_MAJOR, TORCH_VERSION_MINOR, TORCH_VERSION_PATCH);
    std::printf("info\tthreads\t%d\n", at::get_num_threads());
    std::printf("info\tcpus\t%s\n", cpus_.empty() ? "unbound" : cpus_.c_str());
    std::printf("info\tsweep\t%s\n", o_.quick ? "quick" : "full");
    std::fflush(stdout);
  }

  void run() {
    // Note [A rank's own cores] (platform/src/process.cpp): copy i of n on its own
    // share of the CPUs, as validation's local rank i runs.
    if (!cuda_) cpus_ = dtsim::platform::bind_cpu_share(o_.lockstep_rank, o_.lockstep_n);
    if (!cuda_ && o_.threads > 0) dtsim::models::set_cpu_threads(o_.threads);
    if (!cuda_) dtsim::platform::retain_freed_memory();  // as the runtime's ranks do
    torch::manual_seed(0);
    info();
    if (o_.host_probe) {
      const auto kernels = host_probe_points();
      total_ = static_cast<int>(kernels.size());
      for (const auto& k : kernels) measure_kernel(k);
      std::printf("progress\t%d\t%d\tdone\n", total_, total_);
      return;
    }
    memory_records();
    std::vector<StepPoint> steps;
    const auto layers = layer_points(&steps);
    const auto kernels = kernel_points();
    total_ = static_cast<int>(layers.size() * static_cast<std::size_t>(passes()) + steps.size() + kernels.size());
    // Note [Sweep passes]: the sweep, pass after pass; a point's record once all have run.
    // The probe before every pass: the sweep's points are of its passes,
    // and the profile's probe is the median of theirs (Note [Machine probe]).
    std::vector<PassTimes> times(layers.size());
    std::vector<double> probes;
    double usual = 0;  // Note [A pass at the machine's usual speed]: the points' median probe
    int at_usual = 0, recorded = 0;
    const auto record = [&](std::size_t i) {
      const PassTimes& t = times[i];
      if (t.failed || t.forward.empty()) return;
      const auto medians = [](const std::vector<Stats>& passes) {
        std::vector<double> m;
        for (const Stats& s : passes) m.push_back(s.median);
        return m;
      };
      using dtsim::calib::bench::at_usual_speed;
      using dtsim::calib::bench::pass_at_usual_speed;
      const std::size_t f = pass_at_usual_speed(medians(t.forward), t.probes, usual);
      const std::size_t g = pass_at_usual_speed(medians(t.backward), t.probes, usual);
      ++recorded;
      const bool probed = usual > 0 && t.probes.size() == t.forward.size();
      if (probed && at_usual_speed(t.probes[f], usual)) ++at_usual;
      print_layer(layers[i].signature, layers[i].precision, layers[i].b, layers[i].s, of_pass(t.forward, f),
                  of_pass(t.backward, g), t.forward_transient, t.backward_rise);
    };
    for (int pass = 0; pass < passes(); ++pass) {
      probes.push_back(probe());
      for (std::size_t i = 0; i < layers.size(); ++i) {
        measure_layer(layers[i], pass, times[i]);
        // Note [A calibration cut short] (driver.cpp): one pass, each record
        // as soon as it is measured, so a sweep stopped midway keeps it.
        if (passes() == 1) record(i);
      }
    }
    std::vector<double> point_probes;
    for (const PassTimes& t : times) point_probes.insert(point_probes.end(), t.probes.begin(), t.probes.end());
    if (!point_probes.empty()) usual = stats(point_probes).median;
    if (!cuda_) {
      // The machine's usual speed over the sweep: the points' probes where
      // they were taken (Note [A pass at the machine's usual speed]), else
      // the passes'.
      std::printf("info\tprobe_s\t%.9g\n", usual > 0 ? usual : stats(probes).median);
      // Note [A steady calibration] (sim/src/cost/cost_profile.cpp): each pass's.
      std::string each;
      for (double s : probes) {
        char buf[32];
        std::snprintf(buf, sizeof buf, "%.9g", s);
        each += (each.empty() ? "" : ",") + std::string(buf);
      }
      std::printf("info\tprobe_passes_s\t%s\n", each.c_str());
    }
    if (passes() > 1) {
      for (std::size_t i = 0; i < layers.size(); ++i) record(i);
      if (usual > 0) {
        const Stats spread = stats(point_probes);
        std::printf("info\tprobe_points\t%d of %d layer points from a pass whose probe was within %.2fx of the usual %.3g ms "
                    "(%zu probes, %.3g to %.3g ms), the rest from the nearest\n",
                    at_usual, recorded, dtsim::calib::bench::kUsualSpeed, usual * 1e3, point_probes.size(), spread.min * 1e3,
                    spread.max * 1e3);
      }
    }
    // Note [Loop and step interleaved]: how the steps' series were timed.
    if (!steps.empty()) std::printf("info\tstep_rounds\t%d\n", step_rounds());
    for (const auto& p : steps) measure_step(p);
    for (const auto& k : kernels) measure_kernel(k);
    workspace_at_rest();
    if (!cuda_) std::printf("info\tprobe_end_s\t%.9g\n", probe());  // after the steps and kernels, for the record
    std::printf("progress\t%d\t%d\tdone\n", total_, total_);
  }

 private:
  static constexpr int kWarmups = 2;

  Options o_;
  bool cuda_;
  int done_ = 0, total_ = 0;
  int barriers_ = 0;  // Note [Copies in lockstep]
  bool dp_off_ = false;  // Note [Layers in a data-parallel step]: a group failed once
  int dp_groups_ = 0;    // the copies' groups formed so far (their stores' names)
  int alive_fd_ = -1;  // Note [Partner gone]: holds this copy's lock
  std::string cpus_;  // Note [A rank's own cores]: this copy's binding; empty: none
  std::map<std::string, std::int64_t> too_slow_;  // layer series -> fewest tokens over the time cap
};

}  // namespace

int main(int argc, char** argv) {
  const Options o = parse(argc, argv);
  try {
    if (o.device == "cuda" && !torch::cuda::is_available()) {
#ifdef DTSIM_TORCH_CUDA
      std::fprintf(stderr, "dtsim_torch_bench: no CUDA device is visible to this LibTorch\n");
#else
      std::fprintf(stderr, "dtsim_torch_bench: this LibTorch has no CUDA\n");
#endif
      return 2;
    }
    for (const auto& m : o.models) dtsim::models::load_model(m);  // bad names fail before any measuring
    // Note [Layer memory]: a CPU's bytes counted as the runtime counts them.
    if (o.device != "cuda") c10::SetCPUAllocator(&g_cpu_allocator, /*priority=*/100);
    Bench(o).run();
  } catch (const dtsim::Error& e) {
    std::fprintf(stderr, "dtsim_torch_bench: %s\n", e.what());
    return 2;
  } catch (const c10::Error& e) {
    std::fprintf(stderr, "dtsim_torch_bench: LibTorch: %s\n", first_line(e.what_without_backtrace()).c_str());
    return 2;
  } catch (const std::exception& e) {
    std::fprintf(stderr, "dtsim_torch_bench: %s\n", e.what());
    return 2;
  }
  return 0;
}
