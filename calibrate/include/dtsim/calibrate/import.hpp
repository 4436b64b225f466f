#pragma once
// Calibrating from the user's own cluster without running dtsim there:
// importing what NVIDIA's nccl-tests printed (collective fits for that
// cluster's topology) and what PyTorch's profiler recorded of a real
// training step (kernel fits by kind), into a new profile or one that
// exists. Note [Importing measurements] in src/import_profile.cpp.

#include <cstdint>
#include <map>
#include <string>
#include <vector>

#include "dtsim/sim/profile.hpp"

namespace dtsim::calib {

/// One nccl-tests log (the text all_reduce_perf and its siblings print) as read.
struct NcclTestsRun {
  std::string file;                  ///< the path it was read from (or the name given)
  std::string test;                  ///< "all_reduce_perf", ... (from the file name or the command in the log)
  sim::CollectiveOp op = sim::CollectiveOp::kAllReduce;
  int ranks = 0;                     ///< "# Rank" lines
  int ranks_per_node = 0;            ///< ranks of the host with the most (every host must have as many)
  int nodes = 0;                     ///< distinct host names
  int threads = 1;                   ///< "nThread" (-t)
  int gpus_per_thread = 1;           ///< "nGpus" (-g)
  std::string device;                ///< rank 0's device name, "NVIDIA A100-SXM4-80GB"
  std::string data_type;             ///< nccl-tests' type column, "float"
  bool in_place = false;             ///< whether `rows` hold the in-place columns
  /// One size: nccl-tests' columns of the chosen placement.
  struct Row {
    Bytes bytes = 0;                 ///< "size" (B): all_gather's output, reduce_scatter's input, all_to_all's whole send buffer
    std::int64_t count = 0;          ///< "count" (elements)
    double time_us = 0;              ///< "time" (us): the mean over iterations (and ranks, -a 1)
    double algbw_gbs = 0;            ///< "algbw" (GB/s = 1e9 B/s): size / time
    double busbw_gbs = 0;            ///< "busbw" (GB/s): algbw x the op's factor
    int line = 0;                    ///< 1-based line in the file
  };
  std::vector<Row> rows;
  int wrong_rows = 0;                ///< rows left out: nccl-tests' data check found wrong values in them
  int iters = 20;                    ///< "iters:" of the header (nccl-tests' default 20)
  double avg_busbw_gbs = 0;          ///< "# Avg bus bandwidth", 0 where absent
};

/// Parses nccl-tests' stdout `text`; `name` names it in errors and, where
/// the log does not echo its command, tells the test (all_reduce_perf.txt).
/// `in_place`: keep the in-place columns instead of the out-of-place ones.
/// Throws ConfigError "NAME:LINE: what was expected" on a malformed line.
NcclTestsRun parse_nccl_tests(const std::string& text, const std::string& name, bool in_place = false);
/// Reads a log file (IoError if it cannot) and parses it.
NcclTestsRun read_nccl_tests(const std::string& path, bool in_place = false);

/// What an import does besides reading (the CLI's flags).
struct ImportOptions {
  std::string out;           ///< the profile to write (the *_command functions)
  std::string into;          ///< an existing profile to merge into; "" for a new one
  std::string cluster;       ///< a cluster name or YAML: checks ranks per node and the device, prices what was imported; "" none
  bool in_place = false;     ///< nccl-tests' in-place columns
  std::string command_line;  ///< recorded as provenance
};

/// What an import added.
struct ImportResult {
  int samples = 0;                      ///< samples added (comm or kernel)
  int replaced = 0;                     ///< samples of the same op, ranks and placement dropped for the new ones
  std::vector<std::string> fits;        ///< fit names (re)made
  std::map<std::string, int> unused;    ///< events not used, by reason (trace import)
  std::vector<std::string> lines;       ///< the summary, one line each
  std::string summary() const;          ///< `lines` joined, each ending in a newline
};

/// Adds the collectives of nccl-tests logs to `profile` as samples of
/// backend "nccl" keyed by op, ranks and ranks per node, and fits them as
/// calibration does (fit_alpha_beta on every size; Note [Collectives across
/// nodes] for runs spanning hosts). Samples of the same op, ranks and
/// placement already there are replaced; everything else is kept.
/// Provenance under info "import.nccl-tests.*". Throws ConfigError / IoError.
ImportResult import_nccl_tests(const std::vector<std::string>& logs, sim::Profile& profile, const ImportOptions& options = {});

/// Adds what a PyTorch profiler Chrome trace (torch.profiler's
/// export_chrome_trace, Kineto) saw to `profile`: its GPU kernels, grouped
/// by the CPU op that launched them (External id) and that op's shapes
/// (record_shapes=True), as kernel samples of the kinds the profile fits
/// (gemm, attention, grouped_gemm, elementwise, norm, adam, sgd), and its
/// NCCL kernels with message sizes as collective samples; refits those
/// kinds. What it could not use is counted by reason in the result.
/// Throws ConfigError naming the file (and line and column) for a damaged trace.
ImportResult import_kineto_trace(const std::string& path, sim::Profile& profile, const ImportOptions& options = {});

/// Adds to `profile` every layer record (signature and precision) of the
/// profile at `older` that `profile` lacks, with all its shapes; nothing
/// else changes (Note [Importing layers] in src/import_layers.cpp). The two
/// must be calibrations of the same device; throws ConfigError naming both
/// where not, IoError / CalibrationError for an unreadable file.
ImportResult import_layers(const std::string& older, sim::Profile& profile, const ImportOptions& options = {});

/// Puts in `profile` the Python loop's host cost the calibration at
/// `other` timed (its python_ops, python_step, host_ops and host_step
/// probes, in place of `profile`'s; Note [Importing the Python host cost]
/// in src/import_layers.cpp); nothing else changes. Throws ConfigError
/// where `other` has none or another device measured it.
ImportResult import_python_host(const std::string& other, sim::Profile& profile, const ImportOptions& options = {});

/// Puts the `interference` records dtsim_interference_bench printed (the
/// file at `path`) in place of `profile`'s and fits them again (Note
/// [Importing interference] in src/import_interference.cpp); the bench's
/// device must be the profile's. Throws ConfigError naming the file (and
/// line), IoError where it cannot be read.
ImportResult import_interference(const std::string& path, sim::Profile& profile, const ImportOptions& options = {});

/// `dtsim profile import-nccl-tests LOG... --out FILE.h5 [--into EXISTING.h5]
/// [--cluster C] [--in-place]`: loads --into (or starts a profile), imports,
/// writes --out atomically; returns the summary to print.
std::string import_nccl_tests_command(const std::vector<std::string>& logs, const ImportOptions& options);
/// `dtsim profile import-trace TRACE.json --out FILE.h5 [--into EXISTING.h5]
/// [--cluster C]`: the same for a profiler trace.
std::string import_trace_command(const std::string& trace, const ImportOptions& options);
/// `dtsim profile import-layers OLDER.h5 --into NEWER.h5 --out FILE.h5`:
/// NEWER with OLDER's layers it lacks, written atomically to --out.
std::string import_layers_command(const std::string& older, const ImportOptions& options);
/// `dtsim profile import-python-host OTHER.h5 --into PROFILE.h5 --out FILE.h5`.
std::string import_python_host_command(const std::string& other, const ImportOptions& options);
/// `dtsim profile import-interference BENCH.txt --out FILE.h5 [--into EXISTING.h5]`.
std::string import_interference_command(const std::string& path, const ImportOptions& options);

}  // namespace dtsim::calib
