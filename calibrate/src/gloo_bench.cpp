// dtsim_gloo_bench: nccl-tests-like sweep of Gloo collectives over loopback
// TCP, for the calibration driver (Note [Bench line protocol] in
// bench_common.hpp gives the output format).
//
//   dtsim_gloo_bench --procs N [--quick] [--ops all_reduce,...,all_to_all] [--timeout S] [--verbose]
//   dtsim_c10d_bench (the same options)
//
// Note [c10d collectives]
// This file builds two programs. dtsim_gloo_bench calls libgloo directly.
// dtsim_c10d_bench (built with DTSIM_BENCH_C10D where LibTorch is) issues
// the same collectives through c10d's ProcessGroupGloo exactly as
// dtsim_worker does (runtime/src/comm.cpp: two Gloo threads, loopback, the
// reduce-scatter as an all-to-all and a local sum, the all-gather into the
// ranks' views, the all-to-all as alltoall_base of equal splits), so a CPU
// profile prices what validation runs. The layer
// above costs real time: on the 2-vCPU CI machine a 4 MiB all-reduce took a
// median 4.9 ms through ProcessGroupGloo where libgloo's fit gives 3.0 ms,
// and a 256 KiB one 0.53 ms against 0.38 ms (the hand-off to the group's
// worker thread and the wake-up of the waiting one). The calibration driver runs
// dtsim_c10d_bench where it was built and dtsim_gloo_bench otherwise; both
// report as backend "gloo".
//
// Note [Gloo bench processes]
// The program forks N rank processes and only supervises them: it never
// touches Gloo itself, so a rank that dies (exception, signal) or hangs is
// reported as one stderr line and a non-zero exit, never a hang. Ranks
// rendezvous through a gloo::rendezvous::FileStore in a fresh mkdtemp
// directory (removed at the end) and talk over gloo::transport::tcp bound to
// 127.0.0.1. A "world" context of all N ranks only provides barriers; for
// each rank count k = 2..N the first k ranks connect a context of their own
// (PrefixStore "k<k>") and measure, while ranks >= k wait at a world barrier.
// Safety nets: every Gloo operation has the context timeout; the supervisor
// kills all ranks at a global deadline (--timeout, default from the plan);
// ranks die with their supervisor (PR_SET_PDEATHSIG).
//
// Note [Gloo bench timing]
// Per point: 2 warm-up iterations (the first also checks the result), then
// timed iterations in batches until the time budget (0.2 s quick, 1 s full)
// is spent, at least 5 (Note [Bench batches] in bench_common.hpp). Within a
// batch each rank runs the iterations back to back and records each one's
// duration (steady_clock between consecutive completions), the
// per-iteration cost of a steady stream of collectives as nccl-tests
// measures it; a barrier precedes the first batch and the agreement on the
// time spent separates the batches. Each rank summarises its own times
// (median, min, max, mean); the line reports the maximum over ranks of each, i.e.
// the slowest rank's view. send_recv is measured once, with ranks = 2: in
// dtsim_gloo_bench as a ping-pong between ranks 0 and 1 (rank 0 sends, rank 1
// receives and sends back), its times round trip / 2; in dtsim_c10d_bench as
// a pipeline sends it (Note [Waiting receiver]).
//
// Note [Waiting receiver]
// In a pipeline a stage posts its receive and then waits for the stage before
// it to finish a layer: milliseconds with nothing to run, so its CPU goes
// idle, and on a VM an idle vCPU is descheduled by the host and has to be
// woken. A ping-pong never lets either side idle that long. On the 2-vCPU CI
// machine a 64 KiB ping-pong took 58 us one way (mean 69 us), but the same
// message to a receiver that had waited 1-12 ms took a median 360-500 us
// from the sender's clock to the receiver's (mean 590-700 us), and a
// bilstm-tiny 1F1B step waited 14 ms for its 16 messages where 62 us each
// and the bubble priced 5.8 ms. So dtsim_c10d_bench measures send_recv as
// the pipeline runs it: ranks 0 and 1 take turns to send; the receiver posts
// its receive at once, the sender computes for kSendLead (about a CPU
// layer's time), stamps steady_clock (CLOCK_MONOTONIC, one clock for every
// process of a host) into the payload's first 8 bytes and sends; the
// receiver's time is its completion minus that stamp: the one-way time of
// a message to a waiting receiver, wake-up included. Each rank records the
// messages it received.
//
// Note [Collectives in a step]
// Back to back, a collective's ranks are already in step and nothing else
// wants their cores; in a training step each rank computes its backward
// first and launches a gradient bucket's all-reduce as that work ends. On
// this project's 2-vCPU machines the second is slower, and not by its
// median: a DDP step of gpt2-tiny (2 ranks, one core each) spent about 3 ms
// more on its two buckets' all-reduces than their back-to-back timing,
// with or without overlap (docs/validation-cpu.md, 2026-12-03), and
// python3-torch's Gloo, 1.5 MB, 2 ranks pinned, after 0, 2 and 20 ms of
// computing: a median of 0.60, 0.67 and 0.71 ms, but over median + 1 ms in
// 5%, 15% and 22-30% (two runs) of the iterations (a stall of about a tick,
// 4 ms here, while a rank's Gloo threads wait for its core). So
// dtsim_c10d_bench also times each all-reduce size of kStepSizes as a step
// meets it: every iteration a barrier, kStepLead of computing on the
// launching thread (forwards and backwards of a small MLP: Note [A backward
// before the launch]), then the collective, waited
// for as dtsim_worker waits; the time from launch to completion. It reports
// the median and mean, and the stalls: the iterations more than the larger
// of 1 ms and the median over the median, their share and the median of
// their excess, each the largest over the ranks (a stall of one rank holds
// the collective on all). A profile keeps them apart from the back-to-back
// sweep (Profile::comm_in_step), and the simulator counts a data-parallel
// all-reduce's stalls from them (Note [A collective's stalls] in
// sim/src/cost/cost_profile.cpp) and adds its median's excess over the
// back-to-back one (Note [A collective in a step], there).
//
// Note [Timing the resume]
// Right after each in-step all-reduce completes, the rank runs its lead's
// computing once more (one forward and backward of the MLP of Note [A
// backward before the launch]) and times it; its excess over the median
// pass of the lead just before is what computing pays for resuming after
// the wait (Note [Resuming after a wait] in sim/src/engine/executor.cpp).
// The median over the iterations, the largest over the ranks, is reported
// with the all-reduce's median (the wait it followed) at each size: a
// short wait (256 KiB) and a long one (4 MiB).
//
// Note [Gloo reduce_scatter]
// Gloo 0.5.0 has no reduce_scatter in its options API, only the
// gloo::ReduceScatterHalvingDoubling algorithm class, and that class races:
// at the end of run() a rank moves its reduced chunk to the front of its
// buffer without waiting for its own earlier send from that region to
// complete, so a slow peer can receive reduced data in place of inputs. On
// this machine, 2 ranks, it returned wrong sums at the tail of rank 0's chunk
// now and then from 512 KiB up (seen at 512 KiB and 2 MiB). So reduce_scatter
// is measured as gloo::allreduce of the whole input followed by a local copy
// of this rank's chunk, which is also what a Gloo user without a native
// reduce_scatter pays.
//
// Note [Gloo all_to_all]
// As nccl-tests' alltoall_perf measures it (src/alltoall.cu): each rank's
// send buffer of `bytes` (rounded down to a multiple of ranks x 4 B) is
// ranks chunks, chunk j for rank j, itself included; every rank receives
// the same size. dtsim_gloo_bench calls gloo::alltoall (AlltoallOptions,
// out of place); dtsim_c10d_bench calls ProcessGroupGloo::alltoall_base
// with equal splits, as dtsim_worker issues an expert-parallel token
// exchange of balanced experts. Rank r fills chunk j with r x ranks + j,
// so the checked warm-up finds s x ranks + r in the chunk from rank s.
#include <signal.h>
#include <sys/prctl.h>
#include <sys/types.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <exception>
#include <filesystem>
#include <functional>
#include <fstream>
#include <memory>
#include <sstream>
#include <string>
#include <thread>
#include <vector>

#if defined(DTSIM_BENCH_C10D)
#include <torch/torch.h>
#include <torch/csrc/distributed/c10d/FileStore.hpp>
#include <torch/csrc/distributed/c10d/ProcessGroupGloo.hpp>
#endif
#include <gloo/allgather.h>
#include <gloo/allreduce.h>
#include <gloo/alltoall.h>
#include <gloo/barrier.h>
#include <gloo/broadcast.h>
#include <gloo/config.h>
#include <gloo/math.h>
#include <gloo/rendezvous/context.h>
#include <gloo/rendezvous/file_store.h>
#include <gloo/rendezvous/prefix_store.h>
#include <gloo/transport/tcp/device.h>
#include <gloo/transport/unbound_buffer.h>
#include <gloo/types.h>

#include <CLI/CLI.hpp>

#include "bench_common.hpp"
#include "dtsim/cli/parse.hpp"
#if defined(DTSIM_BENCH_C10D)
#include "dtsim/platform/process.hpp"
#endif

namespace dtsim::calib::bench {
namespace {

#if defined(DTSIM_BENCH_C10D)
constexpr const char* kProg = "dtsim_c10d_bench";
#else
constexpr const char* kProg = "dtsim_gloo_bench";
#endif
constexpr const char* kBackend = "gloo";
constexpr const char* kHost = "127.0.0.1";
constexpr int kMaxProcs = 64;
constexpr int kMaxReps = 100000;
/// Time limit of one Gloo operation (and of connecting a context).
constexpr std::chrono::milliseconds kOpTimeout{120'000};
/// Slot prefix of the send_recv ping-pong; Gloo's collectives use small ones.
constexpr std::uint8_t kPingSlotPrefix = 0xd7;
/// How long a send_recv sender computes before it sends (Note [Waiting receiver]).
constexpr std::chrono::microseconds kSendLead{2000};
/// Note [Collectives in a step]: the computing before each launch, the
/// all-reduce sizes timed so, and the iterations of each (quick, full).
constexpr std::chrono::microseconds kStepLead{10000};
constexpr Bytes kStepSizes[] = {256 * kKiB, 4 * kMiB};
constexpr int kStepReps[2] = {20, 60};
/// A step's iteration stalled where it took this much over its median, or the median if that is longer.
constexpr double kStallMinS = 1e-3;

using Clock = std::chrono::steady_clock;

double seconds_since(Clock::time_point t0, Clock::time_point t1) {
  return std::chrono::duration<double>(t1 - t0).count();
}

struct Options {
  int procs = 0;
  bool quick = false;
  bool verbose = false;
  std::vector<Op> ops{std::begin(kAllOps), std::end(kAllOps)};
  double timeout_s = 0;  ///< 0: derived from the plan
  Bytes max_bytes() const { return quick ? 4 * kMiB : 64 * kMiB; }
  double budget_s() const { return quick ? 0.2 : 1.0; }
};

/// Parses the command line (CLI11, dtsim/cli/parse.hpp); exits after --help
/// or a malformed command line, throws std::invalid_argument for a bad value.
Options parse_args(int argc, char** argv) {
  Options o;
  CLI::App app{std::string(kProg) + ": times collectives between local processes; `dtsim calibrate` runs it", kProg};
  dtsim::cli::house_style(app);
  std::string procs, ops, timeout;
  app.add_option("--procs", procs, "Processes, 2.." + std::to_string(kMaxProcs) + " (required)")->type_name("N");
  app.add_flag("--quick", o.quick, "Smaller sizes, shorter budgets");
  app.add_option("--ops", ops, std::string("Collectives to time: ") + kOpNames)->type_name("a,b");
  app.add_option("--timeout", timeout, "Seconds one operation may take (default: derived from the plan)")->type_name("SECONDS");
  app.add_flag("-v,--verbose", o.verbose, "Say what each rank does");
  if (const int status = dtsim::cli::parse_main(app, argc, argv); status >= 0) std::exit(status);
  if (app.count("--procs") > 0) {
    long n = parse_positive("--procs", procs.c_str());
    if (n > kMaxProcs) throw std::invalid_argument("--procs: at most " + std::to_string(kMaxProcs));
    o.procs = static_cast<int>(n);
  }
  if (app.count("--ops") > 0) o.ops = parse_ops(ops.c_str());
  if (app.count("--timeout") > 0) o.timeout_s = parse_seconds("--timeout", timeout.c_str());
  if (o.procs == 0) throw std::invalid_argument("--procs N is required");
  return o;
}

/// One measured point: an op at a rank count and a size.
struct Point {
  int ranks = 0;
  Op op = Op::kAllReduce;
  Bytes bytes = 0;  ///< nccl-tests "size" (Note [Bench line protocol])
};

/// Every point of the run, in order; all ranks compute the same plan.
std::vector<Point> make_plan(const Options& o) {
  std::vector<Point> plan;
  for (int k = 2; k <= o.procs; ++k) {
    for (Op op : o.ops) {
      if (op == Op::kSendRecv && k != 2) continue;
      Bytes last = 0;
      for (Bytes size : pow2_sizes(8, o.max_bytes())) {
        const Bytes b = measured_bytes(op, size, k);
        if (b == last) continue;  // rounding made it a repeat
        last = b;
        plan.push_back({k, op, b});
      }
    }
  }
  return plan;
}

std::string point_label(const Point& p) {
  return std::string(op_name(p.op)) + " ranks=" + std::to_string(p.ranks) + " " + human_bytes(p.bytes);
}

// ---------------------------------------------------------------- rank side

#if defined(DTSIM_BENCH_C10D)
/// A c10d Gloo group as dtsim_worker builds one (Note [c10d collectives]).
struct C10dGroup {
  c10::intrusive_ptr<c10d::ProcessGroupGloo> pg;
  int rank = 0;
  int size = 0;
};
using ContextPtr = std::shared_ptr<C10dGroup>;

/// Note [Busy waits] (runtime/src/comm.cpp): a rank bound to its own core
/// polls its collectives as dtsim_worker's ranks do; send/recv sleep.
bool g_busy_wait = false;
/// Note [Gloo's event loop] (platform/src/process.cpp): a bound rank's
/// loops at the lowest priority, as dtsim_worker's.
bool g_lower_loops = false;

void finish(const c10::intrusive_ptr<c10d::Work>& work) {
  if (g_busy_wait) {
    while (!work->isCompleted()) std::this_thread::yield();
  }
  work->wait();
}

/// Where the groups meet: one c10d FileStore file per group in `dir`.
struct Rendezvous {
  std::string dir;
};

ContextPtr connect(Rendezvous& rv, const std::string& prefix, int rank, int size) {
  auto store = c10::make_intrusive<c10d::FileStore>(rv.dir + "/store-" + prefix, size);
  auto o = c10d::ProcessGroupGloo::Options::create(kOpTimeout);
  dtsim::platform::lower_threads_started_by(g_lower_loops, [&] { o->devices.push_back(c10d::ProcessGroupGloo::createDeviceForHostname(kHost)); });
  o->threads = 2;  // as runtime/src/comm.cpp
  auto g = std::make_shared<C10dGroup>();
  g->pg = c10::make_intrusive<c10d::ProcessGroupGloo>(store, rank, size, o);
  g->rank = rank;
  g->size = size;
  return g;
}

void barrier(const ContextPtr& ctx, std::chrono::milliseconds timeout) { ctx->pg->barrier()->wait(timeout); }

/// Element-wise maximum of `n` doubles over the ranks of `ctx`, in place.
void allreduce_max(const ContextPtr& ctx, double* v, std::size_t n) {
  std::vector<at::Tensor> t{torch::from_blob(v, {static_cast<std::int64_t>(n)}, torch::kDouble)};
  c10d::AllreduceOptions o;
  o.reduceOp = c10d::ReduceOp::MAX;
  ctx->pg->allreduce(t, o)->wait();
}
#else
using ContextPtr = std::shared_ptr<gloo::Context>;

void barrier(const ContextPtr& ctx, std::chrono::milliseconds timeout) {
  gloo::BarrierOptions opts(ctx);
  opts.setTimeout(timeout);
  gloo::barrier(opts);
}

/// Element-wise maximum of `n` doubles over the ranks of `ctx`, in place.
void allreduce_max(const ContextPtr& ctx, double* v, std::size_t n) {
  gloo::AllreduceOptions opts(ctx);
  opts.setOutput(v, n);
  opts.setReduceFunction([](void* c, const void* a, const void* b, std::size_t m) {
    auto* out = static_cast<double*>(c);
    const auto* x = static_cast<const double*>(a);
    const auto* y = static_cast<const double*>(b);
    for (std::size_t i = 0; i < m; ++i) out[i] = x[i] > y[i] ? x[i] : y[i];
  });
  gloo::allreduce(opts);
}
#endif

void check(bool ok, const Point& p, const std::string& what) {
  if (!ok) throw std::runtime_error("wrong result of " + point_label(p) + ": " + what);
}

/// One rank's side of the measurements on a context of `k` ranks.
class RankBench {
 public:
  RankBench(ContextPtr ctx, const Options& opt)
      : ctx_(std::move(ctx)), opt_(opt), rank_(ctx_->rank), k_(ctx_->size) {
    std::size_t n = static_cast<std::size_t>(opt_.max_bytes() / kElementBytes);
    in_.assign(n, 0.0f);
    out_.assign(n, 0.0f);
    slice_.assign(n / 2, 0.0f);  // a reduce_scatter chunk, k >= 2
  }

  /// Measures `p` (p.ranks == k); returns the summary over ranks (the same
  /// on every rank) and the number of timed iterations.
  std::pair<Summary, int> measure(const Point& p) {
    std::function<void()> run = prepare(p);
    // Warm-up 1 checks the result (prepare filled the inputs for it).
    run();
    verify(p);
    for (int i = 1; i < kWarmupIters; ++i) run();

    std::vector<double> times;
    received_.clear();
    double spent_s = 0;  // agreed: sum over batches of the slowest rank's batch time
    barrier(ctx_, kOpTimeout);
    for (int batch = next_batch(0, 0, opt_.budget_s(), kMaxReps); batch > 0;
         batch = next_batch(static_cast<int>(times.size()), spent_s, opt_.budget_s(), kMaxReps)) {
      double batch_s[1] = {0};
      auto prev = Clock::now();
      for (int i = 0; i < batch; ++i) {
        run();
        auto now = Clock::now();
        times.push_back(seconds_since(prev, now));
        batch_s[0] += times.back();
        prev = now;
      }
      allreduce_max(ctx_, batch_s, 1);
      spent_s += batch_s[0];
    }
    if (p.op == Op::kSendRecv) {
#if defined(DTSIM_BENCH_C10D)
      times = received_;  // this rank's receives (Note [Waiting receiver])
#else
      for (double& t : times) t *= 0.5;  // round trip -> one way
#endif
    }
    Summary s = times.empty() ? Summary{} : summarize(times);
    double v[4] = {s.median_s, s.min_s, s.max_s, s.mean_s};
    allreduce_max(ctx_, v, 4);
    return {Summary{v[0], v[1], v[2], v[3]}, static_cast<int>(times.size())};
  }

#if defined(DTSIM_BENCH_C10D)
  /// Times `p` as a training step meets it (Note [Collectives in a step]):
  /// the summary over ranks and the iterations timed.
  std::pair<StepSummary, int> measure_in_step(const Point& p) {
    std::function<void()> run = prepare(p);
    run();
    verify(p);
    const int reps = kStepReps[opt_.quick ? 0 : 1];
    std::vector<double> times, resumes;
    for (int i = 0; i < reps; ++i) {
      barrier(ctx_, kOpTimeout);
      const double typical = compute_for(kStepLead);
      const auto t0 = Clock::now();
      run();
      times.push_back(seconds_since(t0, Clock::now()));
      // Note [Timing the resume]: the lead's computing once more, at once.
      resumes.push_back(backward_once() - typical);
    }
    const Summary s = summarize(times);
    std::vector<double> excess;
    for (double t : times) {
      if (t - s.median_s > std::max(kStallMinS, s.median_s)) excess.push_back(t - s.median_s);
    }
    double v[5] = {s.median_s, s.mean_s, static_cast<double>(excess.size()) / static_cast<double>(times.size()),
                   excess.empty() ? 0.0 : summarize(excess).median_s, summarize(resumes).median_s};
    allreduce_max(ctx_, v, 5);
    StepSummary out;
    out.lead_s = std::chrono::duration<double>(kStepLead).count();
    out.median_s = v[0];
    out.mean_s = v[1];
    out.stall_frac = v[2];
    out.stall_s = v[3];
    out.resume_s = v[4];
    return {out, reps};
  }
#endif

 private:
#if defined(DTSIM_BENCH_C10D)
  /// Keeps this thread computing for `d` (Note [Collectives in a step]):
  /// multiply-adds over 64 KiB of floats, the clock read between passes.
  // Note [A backward before the launch]
  // What a rank does before it launches a gradient bucket changes how often
  // the launch stalls. Measured with python3-torch's Gloo (2 ranks, one core
  // each, two all-reduces of 1.6 and 0.5 MB launched after the lead, the
  // later arrival to the last completion, 60 runs each, the two leads
  // alternating in one run, five runs on 2026-12-03): after a LibTorch
  // forward and backward of a small transformer the pair took over its
  // median by 1 ms in 33-45% of the runs (means 3.1-3.8 ms); after 30 ms of
  // GEMMs in 22-45% (2.4-3.4 ms); this bench's first lead, a loop of
  // multiply-adds that allocates nothing, saw 7-13% in the profiles made
  // with it. A backward allocates and frees its tensors and leaves its
  // caches cold; gpt2-tiny's real DDP step, traced, paid 4.5-6 ms from the
  // later rank's last backward to its optimizer where those profiles priced
  // about 1.5 (docs/validation-cpu.md, 2026-12-03, morning). So the lead is
  // a backward: a two-layer MLP (128 -> 512 -> 128, GELU, 256 rows: about
  // 0.3 ms on this machine) run forward and backward with its gradients
  // freed each time, as a training step's layers are, until the lead is
  // spent. It returns the median time of those passes, the lead's typical one.
  double compute_for(std::chrono::microseconds d) {
    const auto until = Clock::now() + d;
    std::vector<double> passes;
    while (Clock::now() < until) passes.push_back(backward_once());
    return passes.empty() ? 0.0 : summarize(passes).median_s;
  }

  /// One forward and backward of compute_for's MLP, its gradients freed:
  /// how long it took.
  double backward_once() {
    torch::NoGradGuard outside;  // the weights are made without a graph
    if (!lead_w1_.defined()) {
      at::set_num_threads(1);
      lead_w1_ = torch::randn({512, 128}).mul_(0.05).requires_grad_(true);
      lead_w2_ = torch::randn({128, 512}).mul_(0.05).requires_grad_(true);
      lead_x_ = torch::randn({256, 128});
    }
    const auto t0 = Clock::now();
    torch::AutoGradMode grad(true);
    auto h = torch::gelu(torch::nn::functional::linear(lead_x_, lead_w1_));
    auto y = torch::nn::functional::linear(h, lead_w2_);
    y.square().mean().backward();
    sink_ = lead_w1_.grad().index({0, 0}).item<float>();
    lead_w1_.mutable_grad() = torch::Tensor();
    lead_w2_.mutable_grad() = torch::Tensor();
    return seconds_since(t0, Clock::now());
  }

  static at::Tensor view(std::vector<float>& v, std::size_t offset, std::size_t n) {
    return torch::from_blob(v.data() + offset, {static_cast<std::int64_t>(n)}, torch::kFloat);
  }

  /// The collective of `p` as dtsim_worker issues it (runtime/src/comm.cpp),
  /// its inputs filled for the checked warm-up; results land where verify()
  /// looks.
  std::function<void()> prepare(const Point& p) {
    const float me = static_cast<float>(rank_ + 1);
    auto pg = ctx_->pg;
    switch (p.op) {
      case Op::kAllReduce: {
        // In place (out_ starts as this rank's input).
        const std::size_t n = static_cast<std::size_t>(p.bytes / kElementBytes);
        elems_ = n;
        std::fill_n(out_.begin(), n, me);
        auto t = std::make_shared<std::vector<at::Tensor>>(std::vector<at::Tensor>{view(out_, 0, n)});
        return [pg, t] { finish(pg->allreduce(*t)); };
      }
      case Op::kReduceScatter: {
        // An all-to-all of equal chunks into in_, then the sum of the k
        // received chunks into slice_.
        const std::size_t chunk = chunk_elems(p.bytes, k_), n = chunk * static_cast<std::size_t>(k_);
        elems_ = chunk;
        std::fill_n(out_.begin(), n, me);
        std::fill_n(slice_.begin(), chunk, 0.0f);
        at::Tensor send = view(out_, 0, n), recv = view(in_, 0, n), slice = view(slice_, 0, chunk);
        const std::int64_t k = k_, c = static_cast<std::int64_t>(chunk);
        return [pg, send, recv, slice, k, c]() mutable {
          std::vector<std::int64_t> splits(static_cast<std::size_t>(k), c);
          finish(pg->alltoall_base(recv, send, splits, splits));
          torch::sum_out(slice, recv.view({k, c}), 0);
        };
      }
      case Op::kAllGather: {
        const std::size_t chunk = chunk_elems(p.bytes, k_);
        elems_ = chunk;
        std::fill_n(in_.begin(), chunk, me);
        std::fill_n(out_.begin(), chunk * static_cast<std::size_t>(k_), 0.0f);
        auto outs = std::make_shared<std::vector<std::vector<at::Tensor>>>(1);
        for (int r = 0; r < k_; ++r) (*outs)[0].push_back(view(out_, static_cast<std::size_t>(r) * chunk, chunk));
        auto ins = std::make_shared<std::vector<at::Tensor>>(std::vector<at::Tensor>{view(in_, 0, chunk)});
        return [pg, outs, ins] { finish(pg->allgather(*outs, *ins)); };
      }
      case Op::kBroadcast: {
        const std::size_t n = static_cast<std::size_t>(p.bytes / kElementBytes);
        elems_ = n;
        std::fill_n(out_.begin(), n, rank_ == 0 ? 1.0f : 0.0f);
        auto t = std::make_shared<std::vector<at::Tensor>>(std::vector<at::Tensor>{view(out_, 0, n)});
        return [pg, t] {
          c10d::BroadcastOptions o;
          o.rootRank = 0;
          finish(pg->broadcast(*t, o));
        };
      }
      case Op::kSendRecv: {
        // Ranks 0 and 1 take turns to send to a waiting receiver
        // (Note [Waiting receiver]); the payload starts with the send time.
        const std::size_t n = static_cast<std::size_t>(p.bytes / kElementBytes);
        elems_ = n;
        std::fill_n(in_.begin(), n, me);
        std::fill_n(out_.begin(), n, 0.0f);
        if (rank_ > 1) return [] {};
        auto send = std::make_shared<std::vector<at::Tensor>>(std::vector<at::Tensor>{view(in_, 0, n)});
        auto recv = std::make_shared<std::vector<at::Tensor>>(std::vector<at::Tensor>{view(out_, 0, n)});
        const int me_rank = rank_, peer = 1 - rank_;
        return [this, pg, send, recv, me_rank, peer, turn = 0]() mutable {
          const bool sending = (turn++ % 2 == 0) == (me_rank == 0);
          if (sending) {
            const auto go = Clock::now() + kSendLead;
            while (Clock::now() < go) {
            }
            const double stamp = std::chrono::duration<double>(Clock::now().time_since_epoch()).count();
            std::memcpy(in_.data(), &stamp, sizeof stamp);
            pg->send(*send, peer, me_rank)->wait();
          } else {
            pg->recv(*recv, peer, peer)->wait();
            const double done = std::chrono::duration<double>(Clock::now().time_since_epoch()).count();
            double stamp = 0;
            std::memcpy(&stamp, out_.data(), sizeof stamp);
            received_.push_back(done - stamp);
          }
        };
      }
      case Op::kAllToAll: {
        // Note [Gloo all_to_all]: equal splits, out of place (out_ to in_).
        const std::size_t chunk = fill_all_to_all(p), n = chunk * static_cast<std::size_t>(k_);
        at::Tensor send = view(out_, 0, n), recv = view(in_, 0, n);
        const std::int64_t k = k_, c = static_cast<std::int64_t>(chunk);
        return [pg, send, recv, k, c]() mutable {
          std::vector<std::int64_t> splits(static_cast<std::size_t>(k), c);
          finish(pg->alltoall_base(recv, send, splits, splits));
        };
      }
    }
    throw std::logic_error("unknown op");
  }
#else
  /// Builds the options of `p` and fills the buffers for the checked warm-up.
  std::function<void()> prepare(const Point& p) {
    const float me = static_cast<float>(rank_ + 1);
    switch (p.op) {
      case Op::kAllReduce: {
        std::size_t n = static_cast<std::size_t>(p.bytes / kElementBytes);
        elems_ = n;
        std::fill_n(in_.begin(), n, me);
        std::fill_n(out_.begin(), n, 0.0f);
        auto opts = std::make_shared<gloo::AllreduceOptions>(ctx_);
        opts->setInput(in_.data(), n);
        opts->setOutput(out_.data(), n);
        opts->setReduceFunction(
            static_cast<void (*)(void*, const void*, const void*, std::size_t)>(&gloo::sum<float>));
        return [opts] { gloo::allreduce(*opts); };
      }
      case Op::kReduceScatter: {
        // Note [Gloo reduce_scatter]: all-reduce of the k x chunk input,
        // then rank r copies chunk r out.
        std::size_t chunk = chunk_elems(p.bytes, k_);
        std::size_t n = chunk * static_cast<std::size_t>(k_);
        elems_ = chunk;
        std::fill_n(in_.begin(), n, me);
        std::fill_n(out_.begin(), n, 0.0f);
        std::fill_n(slice_.begin(), chunk, 0.0f);
        auto opts = std::make_shared<gloo::AllreduceOptions>(ctx_);
        opts->setInput(in_.data(), n);
        opts->setOutput(out_.data(), n);
        opts->setReduceFunction(
            static_cast<void (*)(void*, const void*, const void*, std::size_t)>(&gloo::sum<float>));
        const float* mine = out_.data() + static_cast<std::size_t>(rank_) * chunk;
        float* slice = slice_.data();
        return [opts, mine, slice, chunk] {
          gloo::allreduce(*opts);
          std::memcpy(slice, mine, chunk * sizeof(float));
        };
      }
      case Op::kAllGather: {
        std::size_t chunk = chunk_elems(p.bytes, k_);
        elems_ = chunk;
        std::fill_n(in_.begin(), chunk, me);
        std::fill_n(out_.begin(), chunk * static_cast<std::size_t>(k_), 0.0f);
        auto opts = std::make_shared<gloo::AllgatherOptions>(ctx_);
        opts->setInput(in_.data(), chunk);
        opts->setOutput(out_.data(), chunk * static_cast<std::size_t>(k_));
        return [opts] { gloo::allgather(*opts); };
      }
      case Op::kBroadcast: {
        // In place on out_, root 0.
        std::size_t n = static_cast<std::size_t>(p.bytes / kElementBytes);
        elems_ = n;
        std::fill_n(out_.begin(), n, rank_ == 0 ? 1.0f : 0.0f);
        auto opts = std::make_shared<gloo::BroadcastOptions>(ctx_);
        opts->setOutput(out_.data(), n);
        opts->setRoot(0);
        return [opts] { gloo::broadcast(*opts); };
      }
      case Op::kSendRecv: {
        // Ping-pong between ranks 0 and 1 with unbound buffers: rank 0 sends
        // in_ and receives into out_, rank 1 receives into out_ and sends it
        // back.
        std::size_t n = static_cast<std::size_t>(p.bytes / kElementBytes);
        elems_ = n;
        std::fill_n(in_.begin(), n, me);
        std::fill_n(out_.begin(), n, 0.0f);
        const uint64_t ping = gloo::Slot::build(kPingSlotPrefix, 0);
        const uint64_t pong = gloo::Slot::build(kPingSlotPrefix, 1);
        const std::size_t nbytes = n * sizeof(float);
        std::shared_ptr<gloo::transport::UnboundBuffer> send = ctx_->createUnboundBuffer(
            rank_ == 0 ? static_cast<void*>(in_.data()) : static_cast<void*>(out_.data()), nbytes);
        std::shared_ptr<gloo::transport::UnboundBuffer> recv = ctx_->createUnboundBuffer(out_.data(), nbytes);
        const auto timeout = kOpTimeout;
        auto wait_ok = [](bool ok, const char* what) {
          if (!ok) throw std::runtime_error(std::string("send_recv: ") + what + " was aborted");
        };
        if (rank_ == 0) {
          return [send, recv, ping, pong, timeout, wait_ok] {
            recv->recv(1, pong);
            send->send(1, ping);
            wait_ok(send->waitSend(timeout), "waitSend");
            wait_ok(recv->waitRecv(timeout), "waitRecv");
          };
        }
        if (rank_ == 1) {
          return [send, recv, ping, pong, timeout, wait_ok] {
            recv->recv(0, ping);
            wait_ok(recv->waitRecv(timeout), "waitRecv");
            send->send(0, pong);
            wait_ok(send->waitSend(timeout), "waitSend");
          };
        }
        return [] {};
      }
      case Op::kAllToAll: {
        // Note [Gloo all_to_all]: out of place, out_ to in_.
        const std::size_t n = fill_all_to_all(p) * static_cast<std::size_t>(k_);
        auto opts = std::make_shared<gloo::AlltoallOptions>(ctx_);
        opts->setInput(out_.data(), n);
        opts->setOutput(in_.data(), n);
        return [opts] { gloo::alltoall(*opts); };
      }
    }
    throw std::logic_error("unknown op");
  }
#endif

  /// Note [Gloo all_to_all]: fills this rank's send buffer (out_) with
  /// chunk j = rank x k + j and clears the receive buffer (in_); returns the
  /// elements of one chunk.
  std::size_t fill_all_to_all(const Point& p) {
    const std::size_t chunk = chunk_elems(p.bytes, k_);
    elems_ = chunk;
    for (int j = 0; j < k_; ++j) {
      std::fill_n(out_.begin() + static_cast<std::ptrdiff_t>(static_cast<std::size_t>(j) * chunk), chunk,
                  static_cast<float>(rank_ * k_ + j));
    }
    std::fill_n(in_.begin(), chunk * static_cast<std::size_t>(k_), -1.0f);
    return chunk;
  }

  /// Checks the result of the first warm-up iteration; inputs were rank + 1
  /// (all_to_all: Note [Gloo all_to_all]).
  void verify(const Point& p) const {
    const float sum = static_cast<float>(k_ * (k_ + 1) / 2);
    const std::size_t n = elems_;
    switch (p.op) {
      case Op::kAllReduce:
        for (std::size_t i = 0; i < n; ++i) check(out_[i] == sum, p, "element " + std::to_string(i));
        break;
      case Op::kReduceScatter:
        for (std::size_t i = 0; i < n; ++i) check(slice_[i] == sum, p, "element " + std::to_string(i));
        break;
      case Op::kAllGather:
        for (int r = 0; r < k_; ++r) {
          for (std::size_t i = 0; i < n; ++i) {
            check(out_[static_cast<std::size_t>(r) * n + i] == static_cast<float>(r + 1), p,
                  "chunk " + std::to_string(r));
          }
        }
        break;
      case Op::kBroadcast:
        for (std::size_t i = 0; i < n; ++i) check(out_[i] == 1.0f, p, "element " + std::to_string(i));
        break;
      case Op::kAllToAll:
        for (int s = 0; s < k_; ++s) {
          for (std::size_t i = 0; i < n; ++i) {
            check(in_[static_cast<std::size_t>(s) * n + i] == static_cast<float>(s * k_ + rank_), p,
                  "chunk from rank " + std::to_string(s));
          }
        }
        break;
      case Op::kSendRecv:
#if defined(DTSIM_BENCH_C10D)
        // Rank 1 received rank 0's ones after the 8-byte stamp, whose
        // message took between 0 and a minute.
        if (rank_ == 1) {
          for (std::size_t i = 2; i < n; ++i) check(out_[i] == 1.0f, p, "element " + std::to_string(i));
          check(!received_.empty() && received_.back() >= 0 && received_.back() < 60, p, "the send time stamp");
        }
#else
        // Rank 1 got rank 0's ones; rank 0 got them back.
        if (rank_ <= 1) {
          for (std::size_t i = 0; i < n; ++i) check(out_[i] == 1.0f, p, "element " + std::to_string(i));
        }
#endif
        break;
    }
  }

  ContextPtr ctx_;
  const Options& opt_;
  int rank_;
  int k_;
  std::vector<float> in_;
  std::vector<float> out_;
  std::vector<float> slice_;
  std::size_t elems_ = 0;
  /// send_recv: one-way seconds of the messages this rank received.
  std::vector<double> received_;
#if defined(DTSIM_BENCH_C10D)
  torch::Tensor lead_w1_, lead_w2_, lead_x_;  ///< compute_for's MLP (Note [A backward before the launch])
  volatile float sink_ = 0;  ///< keeps compute_for's work from being optimised away
#endif
};

#if !defined(DTSIM_BENCH_C10D)
/// Where the contexts meet: a gloo FileStore in the run's directory and one
/// TCP device on the loopback.
struct Rendezvous {
  explicit Rendezvous(const std::string& dir) : store(dir) {
    gloo::transport::tcp::attr attr;
    attr.hostname = kHost;
    dev = gloo::transport::tcp::CreateDevice(attr);
  }
  gloo::rendezvous::FileStore store;
  std::shared_ptr<gloo::transport::Device> dev;
};

ContextPtr connect(Rendezvous& rv, const std::string& prefix, int rank, int size) {
  gloo::rendezvous::PrefixStore ps(prefix, rv.store);
  auto ctx = std::make_shared<gloo::rendezvous::Context>(rank, size);
  ctx->setTimeout(kOpTimeout);
  ctx->connectFullMesh(ps, rv.dev);
  return ctx;
}
#endif

void report(const Options& opt, const Point& p, const Summary& s, int reps) {
  emit_comm(kBackend, p.op, p.ranks, p.bytes, s, reps);
  if (opt.verbose) {
    double algbw = static_cast<double>(p.bytes) / s.median_s / 1e9;
    std::fprintf(stderr, "%s: %-14s ranks=%d %10s  median %10.2f us  algbw %7.3f GB/s  busbw %7.3f GB/s  reps %d\n",
                 kProg, op_name(p.op), p.ranks, human_bytes(p.bytes).c_str(), s.median_s * 1e6, algbw,
                 algbw * busbw_factor(p.op, p.ranks), reps);
  }
}

/// Body of rank `rank` (Note [Gloo bench processes]).
void run_rank(int rank, const Options& opt, const std::string& dir, const std::vector<Point>& plan,
              std::chrono::milliseconds idle_timeout) {
#if defined(DTSIM_BENCH_C10D)
  // Note [A rank's own cores] (platform/src/process.cpp): as dtsim_worker binds its ranks.
  const std::string cpus = dtsim::platform::bind_cpu_share(rank, opt.procs);
  g_busy_wait = dtsim::platform::polls_collectives(cpus);
  g_lower_loops = dtsim::platform::lowers_event_loops(cpus);
  if (rank == 0) {
    emit_info("cpus", cpus.empty() ? "unbound" : cpus);
    emit_info("collective_wait", g_busy_wait ? "polling (Note [Busy waits])" : "blocking");
    emit_info("gloo_loop", g_lower_loops ? "lowest priority (Note [Gloo's event loop])" : "as Gloo starts it");
  }
#endif
  Rendezvous rv{dir};
  auto world = connect(rv, "world", rank, opt.procs);

  // Note [Collectives in a step]: the in-step points after each rank count's sweep.
  int in_step = 0;
#if defined(DTSIM_BENCH_C10D)
  if (std::find(opt.ops.begin(), opt.ops.end(), Op::kAllReduce) != opt.ops.end()) {
    for (Bytes b : kStepSizes) in_step += b <= opt.max_bytes() ? opt.procs - 1 : 0;
  }
#endif
  const int total = static_cast<int>(plan.size()) + in_step;
  int done = 0;
  for (int k = 2; k <= opt.procs; ++k) {
    if (rank < k) {
      auto ctx = connect(rv, "k" + std::to_string(k), rank, k);
      RankBench bench(ctx, opt);
      for (const Point& p : plan) {
        if (p.ranks != k) continue;
        if (rank == 0) emit_progress(done, total, point_label(p));
        auto [s, reps] = bench.measure(p);
        if (rank == 0) report(opt, p, s, reps);
        ++done;
      }
#if defined(DTSIM_BENCH_C10D)
      // Note [Collectives in a step]: the all-reduce as a step meets it.
      if (std::find(opt.ops.begin(), opt.ops.end(), Op::kAllReduce) != opt.ops.end()) {
        for (Bytes b : kStepSizes) {
          if (b > opt.max_bytes()) continue;
          const Point p{k, Op::kAllReduce, b};
          if (rank == 0) emit_progress(done, total, point_label(p) + " in a step");
          auto [s, reps] = bench.measure_in_step(p);
          if (rank == 0) emit_comm_step(kBackend, p.op, p.ranks, p.bytes, s, reps);
          ++done;
        }
      }
#endif
    } else {
      for (const Point& p : plan) done += p.ranks == k ? 1 : 0;
#if defined(DTSIM_BENCH_C10D)
      if (std::find(opt.ops.begin(), opt.ops.end(), Op::kAllReduce) != opt.ops.end()) {
        for (Bytes b : kStepSizes) done += b <= opt.max_bytes() ? 1 : 0;
      }
#endif
    }
    barrier(world, idle_timeout);
  }
  if (rank == 0 && total > 0) emit_progress(total, total, "done");
}

// ------------------------------------------------------------ supervisor side

volatile sig_atomic_t g_stop_signal = 0;

extern "C" void on_stop_signal(int sig) { g_stop_signal = sig; }

std::string error_file(const std::string& dir, int rank) {
  return dir + "/error." + std::to_string(rank);
}

/// Child body: runs the rank, reports an exception through the error file.
[[noreturn]] void child_main(int rank, pid_t parent, const Options& opt, const std::string& dir,
                             const std::vector<Point>& plan, std::chrono::milliseconds idle_timeout) {
  prctl(PR_SET_PDEATHSIG, SIGKILL);
  if (getppid() != parent) _exit(1);  // the supervisor died before prctl
  signal(SIGPIPE, SIG_IGN);
  signal(SIGINT, SIG_DFL);
  signal(SIGTERM, SIG_DFL);
  signal(SIGHUP, SIG_DFL);
  std::string msg;
  try {
    run_rank(rank, opt, dir, plan, idle_timeout);
    std::fflush(stdout);
    _exit(0);
  } catch (const std::exception& e) {
    msg = e.what();
  } catch (...) {
    msg = "unknown exception";
  }
  // Gloo messages may span lines: join them so the supervisor prints one.
  for (char& c : msg) {
    if (c == '\n' || c == '\r' || c == '\t') c = ' ';
  }
  std::ofstream(error_file(dir, rank)) << msg;
  _exit(1);
}

std::string read_error(const std::string& dir, int rank) {
  std::ifstream in(error_file(dir, rank));
  std::stringstream ss;
  ss << in.rdbuf();
  return ss.str();
}

void print_info(const Options& opt) {
  emit_info("backend", kBackend);
#if defined(DTSIM_BENCH_C10D)
  emit_info("api", "c10d ProcessGroupGloo (LibTorch " + std::to_string(TORCH_VERSION_MAJOR) + "." + std::to_string(TORCH_VERSION_MINOR) +
                       "), as dtsim_worker issues collectives (Note [c10d collectives])");
#else
  emit_info("api", "libgloo");
#endif
  emit_info("gloo_version", std::to_string(GLOO_VERSION_MAJOR) + "." + std::to_string(GLOO_VERSION_MINOR) + "." +
                                std::to_string(GLOO_VERSION_PATCH));
  emit_info("transport", "tcp");
  emit_info("address", std::string(kHost) + " (loopback, lo)");
  emit_info("hostname", host_name());
  emit_info("cpu", cpu_model());
  emit_info("cpu_threads", std::to_string(std::thread::hardware_concurrency()));
  emit_info("ranks", std::to_string(opt.procs));
  emit_info("rank_counts", opt.procs >= 2 ? "2.." + std::to_string(opt.procs) : "none");
  emit_info("processes", "one process per rank, forked by the supervisor; FileStore rendezvous in a mkdtemp directory");
  emit_info("dtype", "float32");
  emit_info("mode", opt.quick ? "quick" : "full");
  emit_info("sizes", "powers of 2 from 8 B to " + human_bytes(opt.max_bytes()));
  emit_info("time_budget_s", fmt_seconds(opt.budget_s()));
  emit_info("warmup_iters", std::to_string(kWarmupIters));
  emit_info("min_reps", std::to_string(kMinReps));
  emit_info("timing",
            "back-to-back iterations in batches until the time budget is spent (barrier before the first, "
            "agreement on the time spent between batches), steady_clock per iteration on each rank; "
            "median/min/max/mean per rank, then the maximum over ranks");
#if defined(DTSIM_BENCH_C10D)
  emit_info("all_reduce_impl", "ProcessGroupGloo::allreduce (sum, in place, 2 group threads)");
  emit_info("all_reduce_in_step",
            "256 KiB and 4 MiB again as a step meets them: a barrier, 10 ms of computing, then the all-reduce; launch to "
            "completion, its stalls (over median + max(1 ms, median)) counted (Note [Collectives in a step]); then "
            "the computing once more, its excess over the lead's median pass (Note [Timing the resume])");
  emit_info("reduce_scatter_impl",
            "ProcessGroupGloo::alltoall_base of equal chunks, then a local sum of the ranks' chunks "
            "(LibTorch 1.13's Gloo group has no reduce_scatter; dtsim_worker does the same); bytes = input size");
  emit_info("all_gather_impl", "ProcessGroupGloo::allgather into the ranks' views of one output; bytes = output size");
  emit_info("broadcast_impl", "ProcessGroupGloo::broadcast (root 0, in place)");
  emit_info("send_recv_impl",
            "ProcessGroupGloo send/recv, ranks 0 and 1 taking turns, ranks = 2 only: the sender computes 2 ms, stamps "
            "steady_clock into the payload and sends to a receiver waiting since; time = the receiver's completion minus "
            "the stamp (Note [Waiting receiver])");
  emit_info("all_to_all_impl",
            "ProcessGroupGloo::alltoall_base of equal splits, out of place, as dtsim_worker exchanges tokens; "
            "bytes = one rank's whole send buffer (Note [Gloo all_to_all])");
#else
  emit_info("all_reduce_impl", "gloo::allreduce (AllreduceOptions, sum, out of place)");
  emit_info("reduce_scatter_impl",
            "gloo::allreduce of the ranks x chunk input, then a local copy of this rank's chunk "
            "(gloo::ReduceScatterHalvingDoubling of libgloo 0.5.0 races and returns wrong sums for large buffers); "
            "bytes = input size");
  emit_info("all_gather_impl", "gloo::allgather (AllgatherOptions); bytes = output size");
  emit_info("broadcast_impl", "gloo::broadcast (BroadcastOptions, root 0, in place)");
  emit_info("send_recv_impl",
            "unbound-buffer ping-pong rank 0 <-> 1, ranks = 2 only; time = round trip / 2");
  emit_info("all_to_all_impl",
            "gloo::alltoall (AlltoallOptions, out of place); bytes = one rank's whole send buffer (Note [Gloo all_to_all])");
#endif
  emit_info("size_rule", "all_gather/reduce_scatter/all_to_all sizes rounded down to a multiple of ranks x 4 B");
}

int supervise(const Options& opt) {
  const std::vector<Point> plan = make_plan(opt);
  print_info(opt);
  if (opt.procs < 2) {
    std::fprintf(stderr, "%s: nothing to measure with --procs 1 (collectives need 2 ranks)\n", kProg);
    return 0;
  }
  double budget_total = 0;
  for (std::size_t i = 0; i < plan.size(); ++i) budget_total += opt.budget_s();
  const double timeout_s = opt.timeout_s > 0 ? opt.timeout_s : std::max(600.0, 120.0 + 3.0 * budget_total);
  const auto idle_timeout = std::chrono::milliseconds(static_cast<long long>(timeout_s * 1000.0));

  std::string tmpl = (std::filesystem::temp_directory_path() / "dtsim-gloo-XXXXXX").string();
  if (mkdtemp(tmpl.data()) == nullptr) {
    std::fprintf(stderr, "%s: mkdtemp %s: %s\n", kProg, tmpl.c_str(), std::strerror(errno));
    return 1;
  }
  const std::string dir = tmpl;
  auto cleanup = [&] {
    std::error_code ec;
    std::filesystem::remove_all(dir, ec);
  };

  struct sigaction sa {};
  sa.sa_handler = on_stop_signal;
  sigemptyset(&sa.sa_mask);
  for (int sig : {SIGINT, SIGTERM, SIGHUP}) sigaction(sig, &sa, nullptr);

  std::fflush(stdout);
  std::fflush(stderr);
  const pid_t parent = getpid();
  std::vector<pid_t> pids(static_cast<std::size_t>(opt.procs), -1);
  auto kill_all = [&] {
    for (pid_t& p : pids) {
      if (p > 0) kill(p, SIGKILL);
    }
    for (pid_t& p : pids) {
      if (p > 0) waitpid(p, nullptr, 0);
      p = -1;
    }
  };
  for (int r = 0; r < opt.procs; ++r) {
    pid_t pid = fork();
    if (pid < 0) {
      std::fprintf(stderr, "%s: fork: %s\n", kProg, std::strerror(errno));
      kill_all();
      cleanup();
      return 1;
    }
    if (pid == 0) child_main(r, parent, opt, dir, plan, idle_timeout);
    pids[static_cast<std::size_t>(r)] = pid;
  }

  const auto deadline = Clock::now() + std::chrono::duration<double>(timeout_s);
  int alive = opt.procs;
  while (alive > 0) {
    int status = 0;
    pid_t pid = waitpid(-1, &status, WNOHANG);
    if (pid > 0) {
      int rank = -1;
      for (int r = 0; r < opt.procs; ++r) {
        if (pids[static_cast<std::size_t>(r)] == pid) rank = r;
      }
      if (rank < 0) continue;
      pids[static_cast<std::size_t>(rank)] = -1;
      --alive;
      if (WIFEXITED(status) && WEXITSTATUS(status) == 0) continue;
      std::string why;
      if (WIFSIGNALED(status)) {
        why = "killed by signal " + std::to_string(WTERMSIG(status)) + " (" + strsignal(WTERMSIG(status)) + ")";
      } else {
        std::string msg = read_error(dir, rank);
        why = "failed: " + (msg.empty() ? "exit status " + std::to_string(WEXITSTATUS(status)) : msg);
      }
      kill_all();
      cleanup();
      std::fprintf(stderr, "%s: rank %d %s\n", kProg, rank, why.c_str());
      return 1;
    }
    if (pid < 0 && errno != EINTR) {
      std::fprintf(stderr, "%s: waitpid: %s\n", kProg, std::strerror(errno));
      kill_all();
      cleanup();
      return 1;
    }
    if (g_stop_signal != 0) {
      int sig = g_stop_signal;
      kill_all();
      cleanup();
      std::fprintf(stderr, "%s: stopped by signal %d (%s)\n", kProg, sig, strsignal(sig));
      return 128 + sig;
    }
    if (Clock::now() > deadline) {
      std::string running;
      for (int r = 0; r < opt.procs; ++r) {
        if (pids[static_cast<std::size_t>(r)] > 0) running += " " + std::to_string(r);
      }
      kill_all();
      cleanup();
      std::fprintf(stderr, "%s: timed out after %.0f s (ranks still running:%s)\n", kProg, timeout_s,
                   running.c_str());
      return 1;
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(20));
  }
  cleanup();
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
  return supervise(opt);
}
