#pragma once
// Calibration: run the measurement programs (LibTorch layers and kernels,
// Gloo or NCCL collectives, host-device copies), fit cost models to what they
// measured (Eigen least squares), and write one HDF5 profile the simulator
// prices plans with. This half needs no LibTorch: the measurement programs
// are separate executables whose tab-separated output is parsed here.

#include <cstdint>
#include <string>
#include <vector>

#include "dtsim/sim/error.hpp"
#include "dtsim/sim/profile.hpp"

namespace dtsim::calib {

/// Least squares on relative error (each row divided by its measured time,
/// so small and large samples weigh alike), coefficients kept >= 0 (a
/// negative seconds-per-byte is not physical: such a feature is dropped and
/// the rest refitted). `rows[i][j]` is feature j of sample i.
sim::LinearFit fit_linear(const std::vector<std::string>& features, const std::vector<std::vector<double>>& rows,
                          const std::vector<double>& seconds);

/// t = alpha + beta * bytes (features "1", "bytes").
sim::LinearFit fit_alpha_beta(const std::vector<double>& bytes, const std::vector<double>& seconds);

/// (Re)fits every model a profile's samples support, replacing `p.fits`:
/// kernels per class and precision, collectives per backend, op and rank
/// count (and ranks per node where they spanned nodes: imported runs),
/// copies per direction. Names as cost_profile.hpp makes them.
void fit_profile(sim::Profile& p);

/// Note [The slowest rank sets the pace]: for every layer and kernel point
/// both profiles measured, `p` keeps the slower median of each pass (and
/// that copy's min and max). Ranks sharing a CPU do not slow each other
/// alike, and a synchronous step goes at its slowest rank's speed. The
/// machine probe (info "torch.probe_s") too: the slower one (Note [The
/// slowest copy's probe] in fit.cpp). Returns how many points took
/// `other`'s time.
int keep_slowest(sim::Profile& p, const sim::Profile& other);

/// The median over the layer passes both profiles measured of other's time
/// over p's: how fast two concurrent copies ran beside each other (1 when
/// equal; 0 when they share no point). A copy far from 1 means the cores
/// were not equally free while calibrating.
double median_time_ratio(const sim::Profile& p, const sim::Profile& other);

/// Note [Probe and loop interleaved] (driver.cpp): the kernels of several
/// rounds' runs pooled, one sample per (kind, precision, m, n, k, batch)
/// any round timed: its median the median of the rounds' medians (the
/// middle two's mean for an even count), its min and max over all, its
/// repetitions summed; in the order first timed. A round's run that lacks a
/// point leaves the others' to decide it.
std::vector<sim::KernelSample> pool_rounds(const std::vector<sim::Profile>& rounds);

/// Note [Cold optimizer step] (torch_bench.cpp): the bytes an optimizer
/// point's rotating sets fill, so that a last-level cache of `cache_bytes`
/// holds none of the set a run updates: twice the cache,
/// at least 64 MiB (a cache a system under-reports) and at most 256 MiB
/// (hypervisors report a whole socket's L3, 512 MB on the CI machine's
/// EPYC, where one core sees 32 MB); 256 MiB where the size is unknown (<= 0).
std::int64_t eviction_bytes(std::int64_t cache_bytes);

/// One `progress` line of a measurement program.
struct Progress {
  int done = 0;
  int total = 0;
  std::string label;
};

/// Parses one line a measurement program printed into `p` (samples, info as
/// "<source>.<key>") or `progress`. Returns true if the line was progress.
/// Throws CalibrationError naming `source` and the line if it is malformed.
bool parse_bench_line(const std::string& line, const std::string& source, sim::Profile& p, Progress* progress);

struct CalibrateOptions {
  std::string device = "cpu";   ///< "cpu" or "cuda"
  int procs = 2;                ///< ranks for collectives (cpu: local processes)
  int threads = 1;              ///< intra-op threads per process on CPU (one core per rank)
  bool quick = false;           ///< the reduced sweep (minutes on a laptop; CI runs it)
  std::string out;              ///< profile path
  std::vector<std::string> models;  ///< layer sweeps for these models (default gpt2, bert-base, bilstm)
  std::string bin_dir;          ///< where the measurement programs are; empty: the build's
  /// Stop measuring after this many seconds and write what was measured
  /// (Note [A calibration cut short] in src/driver.cpp); 0: no limit.
  double time_limit_s = 0;
  std::string command_line;     ///< recorded in the profile
  /// The Python whose loop's host cost is timed (Note [Python host probe]
  /// in src/driver.cpp): a path or a name looked up on PATH; "none" skips it.
  std::string python = "python3";
  /// Where `python` cannot import torch, try /usr/bin/python3 (Debian's
  /// python3-torch) before skipping; the CLI sets it false when --python
  /// names one (Note [Debian's Python] in src/driver.cpp).
  bool python_fallback = true;
};

/// Calibration was stopped by SIGINT or SIGTERM (Note [Stopping calibration]
/// in src/driver.cpp): every program it started was stopped, its temporary
/// files removed, and no profile written. A CalibrationError, so the CLI
/// prints its one line and exits 2.
class InterruptedError : public CalibrationError {
 public:
  /// `sig`: the signal received; `what`: the whole one-line message.
  InterruptedError(int sig, const std::string& what) : CalibrationError(what), signal_(sig) {}
  /// SIGINT or SIGTERM.
  int signal() const { return signal_; }

 private:
  int signal_;
};

/// Note [Check the output first] (src/driver.cpp): throws IoError, one line
/// naming `out` and what is wrong, when a profile could not be written
/// there: its directory is missing, not a directory or takes no new file
/// (read-only, no permission), or `out` is a directory.
void check_output(const std::string& out);

/// Runs the measurements with a progress line and ETA on stderr, fits, and
/// writes `out` atomically. Checks `out` first (check_output). Throws
/// CalibrationError / IoError with one line; InterruptedError on SIGINT or
/// SIGTERM, after stopping every program it started (Note [Stopping
/// calibration]).
sim::Profile calibrate(const CalibrateOptions& options);

/// `dtsim profile show`: provenance, measured ranges and every fit with its error.
std::string format_profile(const sim::Profile& p);
/// The same as JSON.
std::string profile_to_json(const sim::Profile& p);

}  // namespace dtsim::calib
