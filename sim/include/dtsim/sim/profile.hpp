#pragma once
// Calibration profiles: what `dtsim calibrate` measured on real hardware
// (layer, kernel, collective and copy timings, runtime memory overheads), the
// models fitted to it, and where it came from. One HDF5 file; the layout is
// documented in configs/profiles/README.md. The simulator prices work from a
// profile through ProfileCosts (cost_profile.hpp); this header is only the
// data and its file I/O.

#include <cstdint>
#include <map>
#include <string>
#include <vector>

#include "dtsim/sim/cluster.hpp"
#include "dtsim/sim/cost.hpp"
#include "dtsim/sim/units.hpp"

namespace dtsim::sim {

/// The spread of repeated runs of one measurement.
struct Timing {
  double median_s = 0;
  double min_s = 0;
  double max_s = 0;
  int reps = 0;
  /// Mean; 0 where not measured (profiles before it, layer timings). On a
  /// loopback TCP a collective's tail is heavy: its fit takes the mean (Note
  /// [A collective costs its mean] in calibrate/src/fit.cpp), its measured
  /// sizes the median and stalls (Note [A collective's stalls] in cost_profile.cpp).
  double mean_s = 0;
};

/// Forward and backward time of one layer (by signature) at one shape.
struct LayerSample {
  std::string signature;  ///< Layer::signature
  Precision precision = Precision::kFp32;
  std::int64_t micro_batch = 0;
  std::int64_t seq_len = 0;
  Timing forward, backward;
  /// Note [Layer memory] (sim/src/cost/cost_profile.cpp), measured on GPUs; -1
  /// where not measured (CPUs, profiles before it): the most the forward
  /// held above what it left allocated, and the most the backward held
  /// above what was allocated as it began.
  Bytes forward_transient = -1, backward_rise = -1;
  /// Note [A step's ratio round by round] (calibrate/src/torch_bench.cpp),
  /// on an "|in-step" record timed in rounds beside its loop: the median
  /// over the rounds of the round's in-step median over its loop median
  /// (the copies' mean), forward and backward; 0 where not timed so.
  double round_ratio_forward = 0, round_ratio_backward = 0;
};

/// One kernel class measured at one size.
struct KernelSample {
  std::string kind;  ///< "gemm", "grouped_gemm" (batch = groups), "attention", "elementwise", "norm", ...
  Precision precision = Precision::kFp32;
  std::int64_t m = 0, n = 0, k = 0, batch = 1;
  double flops = 0, bytes = 0;
  Timing time;
};

/// One collective measured at one size and rank count.
struct CommSample {
  std::string backend;  ///< "gloo", "nccl"
  CollectiveOp op = CollectiveOp::kAllReduce;
  int ranks = 0;
  Bytes bytes = 0;  ///< nccl-tests' "size"
  Timing time;
  /// Ranks on each node where the ranks spanned nodes (an imported
  /// multi-node nccl-tests run, calibrate/src/import_nccl_tests.cpp); 0:
  /// all on one node, as every calibration measures.
  int ranks_per_node = 0;
};

/// A collective timed as a training step meets it: after `lead_s` of
/// computing on the launching thread, launch to completion (Note
/// [Collectives in a step] in calibrate/src/gloo_bench.cpp).
struct StepCommSample {
  std::string backend;  ///< "gloo"
  CollectiveOp op = CollectiveOp::kAllReduce;
  int ranks = 0;
  Bytes bytes = 0;      ///< nccl-tests' "size", as CommSample's
  double lead_s = 0;    ///< computing before each launch
  double median_s = 0, mean_s = 0;
  double stall_frac = 0;  ///< share of the iterations that stalled (0..1)
  double stall_s = 0;     ///< a stalled one's excess over the median (median over them)
  int reps = 0;
  /// Note [Resuming after a wait] (sim/src/engine/executor.cpp): how much
  /// longer the launching thread's first computing after the collective's
  /// wait took than the same computing in the lead (the median over the
  /// iterations, the largest over the ranks; may be negative), and that
  /// wait (the median from launch to completion); 0 and 0: not measured.
  double resume_s = 0, wait_s = 0;
};

/// A kernel timed alone and beside a stand-in for a collective's channels
/// (Note [Measuring interference] in calibrate/src/interference_bench.cpp).
struct InterferenceSample {
  std::string victim;     ///< "gemm" (compute-bound) or "stream" (memory-bound)
  int channels = 0;       ///< the stand-in's thread blocks, an SM each
  int sms = 0;            ///< the device's SMs
  double proxy_Bps = 0;   ///< the HBM bytes a second (read + written) the stand-in moved
  double hbm_Bps = 0;     ///< the HBM rate the memory-bound kernel reached alone
  double alone_s = 0;     ///< the kernel's median time alone
  double beside_s = 0;    ///< and beside the stand-in
  int reps = 0;
};

/// "" where `x` is a measurement that can be, else what is wrong with it
/// (a victim not gemm or stream, channels not in 1..sms - 1, a time or rate
/// not positive and finite).
std::string check_interference(const InterferenceSample& x);

/// One host<->device copy.
struct CopySample {
  std::string direction;  ///< "h2d", "d2h", "d2d"
  Bytes bytes = 0;
  Timing time;
};

/// A least-squares model time = sum_i coef[i] * feature_i, with its error
/// over the samples it was fitted to (relative: (model - measured) / measured).
struct LinearFit {
  std::vector<std::string> features;  ///< "1", "bytes", "flops", "mn", ...
  std::vector<double> coef;           ///< seconds per unit of each feature
  double rms_rel_error = 0;
  double max_rel_error = 0;
  int samples = 0;
};

/// Everything one calibration produced.
struct Profile {
  /// 2: the file starts with a checksummed header (Note [Profile integrity]
  /// in sim/src/profile/profile_io.cpp); 1 (read still): without it.
  static constexpr int kFormatVersion = 2;
  std::string path;                          ///< where it was read from (not stored)
  /// How its bytes were checked when read (not stored): "crc64-xz", or
  /// "none" for a format-1 file written before checksums.
  std::string integrity;
  std::map<std::string, std::string> info;   ///< provenance: device, versions, threads, date, command
  std::vector<LayerSample> layers;
  std::vector<KernelSample> kernels;
  std::vector<CommSample> comm;
  /// Collectives timed as a step meets them (optional; Note [Collectives in
  /// a step]); apart from `comm`, which the fits and measured sizes read.
  std::vector<StepCommSample> comm_in_step;
  std::vector<CopySample> copies;
  /// Compute beside collectives (optional; Note [Interference fit] in
  /// calibrate/src/fit.cpp makes the fits the simulator reads).
  std::vector<InterferenceSample> interference;
  std::map<std::string, Bytes> memory;       ///< runtime overheads: "cuda_context_bytes", ...
  /// Fitted models by name: "kernel.gemm.fp32", "comm.gloo.all_reduce.2", "copy.h2d".
  std::map<std::string, LinearFit> fits;
};

/// Writes `p` to `path` as HDF5, atomically (a temporary file beside it, then
/// rename): an interrupted write never leaves a broken profile. Throws IoError.
void save_profile(const Profile& p, const std::string& path);

/// Reads a profile; throws CalibrationError naming the file and what is wrong
/// (missing, not HDF5, truncated, another format or a newer version, a
/// dataset missing or of the wrong type or length).
Profile load_profile(const std::string& path);

}  // namespace dtsim::sim
