// Shared helpers of the standalone collective benchmarks (dtsim_gloo_bench,
// dtsim_nccl_bench): the line protocol the calibration driver parses, size
// sweeps, repetition counts and summary statistics. Header-only, standard
// library and POSIX only, so each program stays one translation unit.
//
// Note [Bench line protocol]
// stdout carries TAB-separated records and nothing else; each is flushed as
// soon as it is written:
//   info     <key> <value>
//   progress <done> <total> <label>
//   comm     <backend> <op> <ranks> <bytes> <median_s> <min_s> <max_s> <reps> [<mean_s>]
//   comm_step <backend> <op> <ranks> <bytes> <lead_s> <median_s> <mean_s> <stall_frac> <stall_s> <reps> [<resume_s>]
//            (a collective timed after computing, as a step meets it:
//            Note [Collectives in a step] in gloo_bench.cpp; and how much
//            longer the computing right after its wait took: Note [Timing
//            the resume] there)
//   copy     <h2d|d2h|d2d> <bytes> <median_s> <min_s> <max_s> <reps>
// `bytes` is nccl-tests' "size": the buffer of all_reduce and broadcast, the
// OUTPUT of all_gather (ranks x chunk), the INPUT of reduce_scatter, the
// message of send_recv, the whole send buffer of one rank in all_to_all
// (ranks x chunk, a chunk to every rank itself included). Human diagnostics
// go to stderr.
#pragma once

#include <unistd.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <fstream>
#include <stdexcept>
#include <string>
#include <string_view>
#include <vector>

namespace dtsim::calib::bench {

/// Byte counts of buffers and messages.
using Bytes = std::uint64_t;

inline constexpr Bytes kKiB = 1024;
inline constexpr Bytes kMiB = 1024 * kKiB;
inline constexpr Bytes kGiB = 1024 * kMiB;

/// Bytes of one fp32 element, the only type the benchmarks move.
inline constexpr Bytes kElementBytes = 4;
/// Untimed iterations before each measured point.
inline constexpr int kWarmupIters = 2;
/// Fewest timed iterations of a point, whatever its time budget.
inline constexpr int kMinReps = 5;

/// The collectives both programs measure, in output order.
enum class Op { kAllReduce, kReduceScatter, kAllGather, kBroadcast, kSendRecv, kAllToAll };

inline constexpr Op kAllOps[] = {Op::kAllReduce, Op::kReduceScatter, Op::kAllGather,
                                 Op::kBroadcast, Op::kSendRecv,      Op::kAllToAll};

/// The --ops names, for usage lines and errors.
inline constexpr const char* kOpNames = "all_reduce,reduce_scatter,all_gather,broadcast,send_recv,all_to_all";

/// The protocol name of `op` (Note [Bench line protocol]).
inline const char* op_name(Op op) {
  switch (op) {
    case Op::kAllReduce: return "all_reduce";
    case Op::kReduceScatter: return "reduce_scatter";
    case Op::kAllGather: return "all_gather";
    case Op::kBroadcast: return "broadcast";
    case Op::kSendRecv: return "send_recv";
    case Op::kAllToAll: return "all_to_all";
  }
  return "?";
}

/// Parses "all_reduce,broadcast" into ops in kAllOps order; "all" means every
/// op. Throws std::invalid_argument naming an unknown op.
inline std::vector<Op> parse_ops(std::string_view list) {
  std::vector<bool> want(std::size(kAllOps), false);
  std::size_t start = 0;
  while (start <= list.size()) {
    std::size_t end = list.find(',', start);
    if (end == std::string_view::npos) end = list.size();
    std::string_view name = list.substr(start, end - start);
    if (name == "all") {
      std::fill(want.begin(), want.end(), true);
    } else if (!name.empty()) {
      bool found = false;
      for (std::size_t i = 0; i < std::size(kAllOps); ++i) {
        if (name == op_name(kAllOps[i])) {
          want[i] = true;
          found = true;
        }
      }
      if (!found) {
        throw std::invalid_argument(
            "--ops: '" + std::string(name) +
            "' is not one of all_reduce, reduce_scatter, all_gather, broadcast, send_recv, all_to_all, all");
      }
    }
    start = end + 1;
  }
  std::vector<Op> ops;
  for (std::size_t i = 0; i < std::size(kAllOps); ++i) {
    if (want[i]) ops.push_back(kAllOps[i]);
  }
  if (ops.empty()) throw std::invalid_argument("--ops: no operation named");
  return ops;
}

/// Parses a positive integer option value; throws std::invalid_argument.
inline long parse_positive(std::string_view flag, const char* text) {
  char* end = nullptr;
  long v = std::strtol(text, &end, 10);
  if (end == text || *end != '\0' || v <= 0) {
    throw std::invalid_argument(std::string(flag) + ": '" + text + "' is not a positive integer");
  }
  return v;
}

/// Parses a positive number of seconds; throws std::invalid_argument.
inline double parse_seconds(std::string_view flag, const char* text) {
  char* end = nullptr;
  double v = std::strtod(text, &end);
  if (end == text || *end != '\0' || !(v > 0.0)) {
    throw std::invalid_argument(std::string(flag) + ": '" + text + "' is not a positive number of seconds");
  }
  return v;
}

/// fp32 elements of one rank's chunk for a nominal size: all_gather's input,
/// reduce_scatter's output, all_to_all's message to each rank. nccl-tests
/// (src/all_gather.cu, reduce_scatter.cu, alltoall.cu: count / nranks) rounds
/// the size down to a multiple of ranks x 4 B; here at least one element.
inline std::size_t chunk_elems(Bytes bytes, int ranks) {
  const auto n = static_cast<std::size_t>(bytes / (kElementBytes * static_cast<Bytes>(ranks)));
  return n == 0 ? 1 : n;
}

/// The size a point of `op` over `ranks` measures for a nominal `size`
/// (Note [Bench line protocol]): ranks x chunk_elems x 4 B for the ops that
/// split their buffer among the ranks (all_gather, reduce_scatter,
/// all_to_all), `size` itself for the others.
inline Bytes measured_bytes(Op op, Bytes size, int ranks) {
  if (op == Op::kAllGather || op == Op::kReduceScatter || op == Op::kAllToAll) {
    return chunk_elems(size, ranks) * kElementBytes * static_cast<Bytes>(ranks);
  }
  return size;
}

/// Powers of two from `lo` to `hi` inclusive, `lo` and `hi` powers of two.
inline std::vector<Bytes> pow2_sizes(Bytes lo, Bytes hi) {
  std::vector<Bytes> sizes;
  for (Bytes b = lo; b <= hi; b *= 2) sizes.push_back(b);
  return sizes;
}

// Note [Bench batches]
// Timed iterations run in batches: kMinReps first, then enough to fill the
// rest of the time budget at the mean pace so far, at most doubling the
// count each time. Between batches the ranks agree on the time spent, so
// they all stop after the same iteration; one noisy warm-up can neither
// starve nor bloat a point.

/// Size of the next batch of timed iterations after `done` of them took
/// `spent_s` seconds in all: 0 once at least kMinReps ran and the budget is
/// spent, or `max_reps` ran (Note [Bench batches]).
inline int next_batch(int done, double spent_s, double budget_s, int max_reps) {
  if (done == 0) return std::min(kMinReps, max_reps);
  if (done >= max_reps) return 0;
  if (done >= kMinReps && spent_s >= budget_s) return 0;
  double per_iter = spent_s / done;
  double want = per_iter > 0 ? std::ceil((budget_s - spent_s) / per_iter) : done;
  double n = std::clamp(want, 1.0, static_cast<double>(done));
  return std::min(static_cast<int>(n), max_reps - done);
}

/// Median, minimum and maximum of per-iteration times, in seconds.
struct Summary {
  double median_s = 0;  ///< median (mean of the middle two for an even count)
  double min_s = 0;     ///< fastest iteration
  double max_s = 0;     ///< slowest iteration
  double mean_s = 0;    ///< mean: what a run of many iterations pays on average
};

/// Summary of `times_s`, which must not be empty.
inline Summary summarize(std::vector<double> times_s) {
  std::sort(times_s.begin(), times_s.end());
  std::size_t n = times_s.size();
  Summary s;
  s.median_s = n % 2 == 1 ? times_s[n / 2] : 0.5 * (times_s[n / 2 - 1] + times_s[n / 2]);
  s.min_s = times_s.front();
  s.max_s = times_s.back();
  double sum = 0;
  for (double t : times_s) sum += t;
  s.mean_s = sum / static_cast<double>(n);
  return s;
}

/// nccl-tests' bus-bandwidth factor (doc/PERFORMANCE.md in NVIDIA/nccl-tests;
/// all-to-all's (n-1)/n as src/alltoall.cu's AlltoAllGetBw computes it):
/// busbw = algbw x factor, algbw = bytes / time. Used for stderr diagnostics.
inline double busbw_factor(Op op, int ranks) {
  double n = ranks;
  switch (op) {
    case Op::kAllReduce: return ranks > 1 ? 2.0 * (n - 1) / n : 1.0;
    case Op::kReduceScatter:
    case Op::kAllGather:
    case Op::kAllToAll: return ranks > 1 ? (n - 1) / n : 1.0;
    case Op::kBroadcast:
    case Op::kSendRecv: return 1.0;
  }
  return 1.0;
}

/// Replaces TABs and line breaks so a value keeps its record on one line.
inline std::string clean_field(std::string s) {
  for (char& c : s) {
    if (c == '\t' || c == '\n' || c == '\r') c = ' ';
  }
  return s;
}

/// Where records go: stdout, or its private copy after
/// reserve_stdout_for_protocol().
inline FILE*& protocol_stream() {
  static FILE* stream = stdout;
  return stream;
}

/// Moves the protocol onto a private duplicate of stdout and points file
/// descriptor 1 at stderr, so a library that logs to stdout (NCCL_DEBUG does)
/// cannot corrupt the records. Best effort: on failure records stay on stdout.
inline void reserve_stdout_for_protocol() {
  std::fflush(stdout);
  int fd = dup(STDOUT_FILENO);
  if (fd < 0) return;
  FILE* f = fdopen(fd, "w");
  if (f == nullptr) {
    close(fd);
    return;
  }
  if (dup2(STDERR_FILENO, STDOUT_FILENO) < 0) {
    std::fclose(f);
    return;
  }
  protocol_stream() = f;
}

/// Writes one TAB-separated record to the protocol stream and flushes it.
inline void emit(const std::vector<std::string>& fields) {
  std::string line;
  for (std::size_t i = 0; i < fields.size(); ++i) {
    if (i) line += '\t';
    line += clean_field(fields[i]);
  }
  line += '\n';
  FILE* out = protocol_stream();
  std::fwrite(line.data(), 1, line.size(), out);
  std::fflush(out);
}

/// `info <key> <value>`.
inline void emit_info(const std::string& key, const std::string& value) {
  emit({"info", key, value});
}

/// A time in seconds as the protocol writes it (9 significant digits).
inline std::string fmt_seconds(double s) {
  char buf[40];
  std::snprintf(buf, sizeof buf, "%.9g", s);
  return buf;
}

/// `progress <done> <total> <label>`.
inline void emit_progress(int done, int total, const std::string& label) {
  emit({"progress", std::to_string(done), std::to_string(total), label});
}

/// `comm <backend> <op> <ranks> <bytes> <median_s> <min_s> <max_s> <reps>`.
inline void emit_comm(const char* backend, Op op, int ranks, Bytes bytes, const Summary& s, int reps) {
  emit({"comm", backend, op_name(op), std::to_string(ranks), std::to_string(bytes),
        fmt_seconds(s.median_s), fmt_seconds(s.min_s), fmt_seconds(s.max_s), std::to_string(reps), fmt_seconds(s.mean_s)});
}

/// A collective timed as a training step meets it (Note [Collectives in a
/// step] in gloo_bench.cpp): what `comm_step` carries.
struct StepSummary {
  double lead_s = 0;      ///< the rank's computing before each launch
  double median_s = 0;    ///< launch to completion, median
  double mean_s = 0;      ///< and mean
  double stall_frac = 0;  ///< share of the iterations that stalled
  double stall_s = 0;     ///< how much longer than the median a stalled one took (median over them)
  /// The computing right after the wait over the same in the lead (Note
  /// [Timing the resume] in gloo_bench.cpp); may be negative.
  double resume_s = 0;
};

/// `comm_step <backend> <op> <ranks> <bytes> <lead_s> <median_s> <mean_s> <stall_frac> <stall_s> <reps> <resume_s>`.
inline void emit_comm_step(const char* backend, Op op, int ranks, Bytes bytes, const StepSummary& s, int reps) {
  emit({"comm_step", backend, op_name(op), std::to_string(ranks), std::to_string(bytes), fmt_seconds(s.lead_s),
        fmt_seconds(s.median_s), fmt_seconds(s.mean_s), fmt_seconds(s.stall_frac), fmt_seconds(s.stall_s),
        std::to_string(reps), fmt_seconds(s.resume_s)});
}

/// "8 B", "4 KiB", "64 MiB": sizes in labels and diagnostics.
inline std::string human_bytes(Bytes b) {
  const char* units[] = {"B", "KiB", "MiB", "GiB", "TiB"};
  int u = 0;
  while (u < 4 && b >= 1024 && b % 1024 == 0) {
    b /= 1024;
    ++u;
  }
  return std::to_string(b) + " " + units[u];
}

/// This machine's host name, or "unknown".
inline std::string host_name() {
  char buf[256] = {};
  if (gethostname(buf, sizeof buf - 1) != 0) return "unknown";
  return buf;
}

/// The first "model name" of /proc/cpuinfo, or "unknown".
inline std::string cpu_model() {
  std::ifstream in("/proc/cpuinfo");
  std::string line;
  while (std::getline(in, line)) {
    if (line.rfind("model name", 0) == 0) {
      auto colon = line.find(':');
      if (colon != std::string::npos) {
        auto v = line.substr(colon + 1);
        v.erase(0, v.find_first_not_of(" \t"));
        return v;
      }
    }
  }
  return "unknown";
}

/// The micro-batches a model's layers are timed at chained as one step,
/// from those its layers are swept at (ascending, not empty): the largest,
/// and the smallest too where it is under a quarter of the largest (Note
/// [Small steps] in torch_bench.cpp).
inline std::vector<std::int64_t> step_batches(const std::vector<std::int64_t>& swept) {
  std::vector<std::int64_t> out{swept.back()};
  if (swept.back() > 4 * swept.front()) out.insert(out.begin(), swept.front());
  return out;
}

/// Note [A pass at the machine's usual speed] (torch_bench.cpp): the most
/// a pass's probe may differ from the sweep's usual one, either way, for
/// its timings to count as taken at that speed (the validation suite's
/// quiet rounds: Note [Machine probe]).
inline constexpr double kUsualSpeed = 1.15;

/// Whether a pass probed at `probe` seconds ran at the sweep's `usual`
/// speed: within kUsualSpeed of it, either way.
inline bool at_usual_speed(double probe, double usual) {
  return std::abs(std::log(probe / usual)) <= std::log(kUsualSpeed) + 1e-12;
}

/// Note [A pass at the machine's usual speed] (torch_bench.cpp): which of a
/// point's passes (their `medians`, and the probe each was preceded by)
/// it takes: the fastest of those whose probe is within kUsualSpeed of
/// `usual`, else the one whose probe is nearest it (by ratio); the fastest
/// of all where the passes were not probed (`usual` not above 0, or not a
/// probe a pass). `medians` is not empty.
inline std::size_t pass_at_usual_speed(const std::vector<double>& medians, const std::vector<double>& probes, double usual) {
  const bool probed = usual > 0 && probes.size() == medians.size();
  const auto off = [&](std::size_t k) { return std::abs(std::log(probes[k] / usual)); };
  std::size_t best = medians.size();
  for (std::size_t k = 0; k < medians.size(); ++k) {
    if (probed && !at_usual_speed(probes[k], usual)) continue;
    if (best == medians.size() || medians[k] < medians[best]) best = k;
  }
  if (best < medians.size()) return best;
  best = 0;
  for (std::size_t k = 1; k < medians.size(); ++k) {
    if (off(k) < off(best)) best = k;
  }
  return best;
}

/// Note [Loop and step interleaved] (torch_bench.cpp): `rounds` rounds,
/// each `loop(i, share)` for i = 0 .. loops - 1 and then `step(share)`,
/// every share that series' budget over `rounds`; false as soon as one of
/// them is (a run over its time cap), true once all have run.
template <class Loop, class Step>
bool interleaved(int rounds, std::size_t loops, double loop_budget, double step_budget, Loop&& loop, Step&& step) {
  for (int r = 0; r < rounds; ++r) {
    for (std::size_t i = 0; i < loops; ++i) {
      if (!loop(i, loop_budget / rounds)) return false;
    }
    if (!step(step_budget / rounds)) return false;
  }
  return true;
}

/// Note [A step's ratio round by round] (torch_bench.cpp): the median over
/// the rounds of the step series' median over the loop series' median in
/// that round (`step[r]`, `loop[r]`: round r's runs); 0 where fewer than
/// two rounds have runs of both, or the series do not have the same rounds.
inline double round_ratio(const std::vector<std::vector<double>>& step, const std::vector<std::vector<double>>& loop) {
  if (step.size() != loop.size()) return 0;
  std::vector<double> ratios;
  for (std::size_t r = 0; r < step.size(); ++r) {
    if (step[r].empty() || loop[r].empty()) continue;
    const double alone = summarize(loop[r]).median_s;
    if (alone > 0) ratios.push_back(summarize(step[r]).median_s / alone);
  }
  return ratios.size() >= 2 ? summarize(std::move(ratios)).median_s : 0;
}

}  // namespace dtsim::calib::bench
