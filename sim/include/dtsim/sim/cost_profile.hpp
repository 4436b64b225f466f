#pragma once
// Cost models that answer from a calibration profile (profile.hpp) and fall
// back to the datasheet models where it has nothing to say, counting which
// source priced what so a report can say so.

#include <array>
#include <map>
#include <memory>
#include <optional>
#include <string>
#include <tuple>
#include <unordered_map>
#include <utility>
#include <vector>

#include "dtsim/sim/cost.hpp"
#include "dtsim/sim/profile.hpp"

namespace dtsim::sim {

/// A fit's coefficients by feature, resolved once from LinearFit's named
/// features (0 where a feature is absent), so pricing does no name lookups.
struct FitTerms {
  double constant = 0;  ///< seconds ("1")
  double per_byte = 0;  ///< seconds per byte ("bytes")
  double per_flop = 0;  ///< seconds per FLOP ("flops")
  double per_mn = 0;    ///< seconds per output element ("mn")
  double seconds(double bytes, double flops = 0, double mn = 0) const {
    return constant + per_byte * bytes + per_flop * flops + per_mn * mn;
  }
};

/// The measured times of one collective (one operation, rank count and
/// placement), by size: Note [Measured collectives] in cost_profile.cpp.
class MeasuredCollective {
 public:
  /// From (bytes, seconds) samples in any order: samples of equal size are
  /// averaged; those of no bytes or no time are left out.
  explicit MeasuredCollective(const std::vector<std::pair<double, double>>& samples);
  /// A size's stalls (Note [A collective's stalls] in cost_profile.cpp):
  /// its mean over its median, and its slowest run over its median, in seconds.
  struct Tail {
    double bytes = 0, excess = 0, spread = 0;
  };
  /// As above, with the sizes' tails.
  MeasuredCollective(const std::vector<std::pair<double, double>>& samples, const std::vector<Tail>& tails);
  /// From `profile`'s samples of op over `ranks` by `backend`, on one node
  /// (`ranks_per_node` 0) or spanning nodes of `ranks_per_node` each: each
  /// at its median, its mean's excess and its slowest run as its tail.
  static MeasuredCollective of(const Profile& profile, const std::string& backend, CollectiveOp op, int ranks,
                               int ranks_per_node);
  /// Distinct sizes measured: pricing needs two.
  std::size_t sizes() const { return bytes_.size(); }
  double min_bytes() const { return bytes_.front(); }
  double max_bytes() const { return bytes_.back(); }
  /// A time split as a fixed latency and the seconds its bytes take on the
  /// wire, the two summing to the priced time.
  struct Split {
    double latency = 0, wire = 0;  ///< seconds
  };
  /// The time of `bytes`: the measured time at a measured size, the
  /// straight line between the two measured sizes around it, and outside
  /// the range the line of the nearest two (Note [Measured collectives]).
  Split at(double bytes) const;
  /// Note [A collective's stalls]: how long one stall lasts (0: the
  /// profile saw none), and how many of them one collective of `bytes`
  /// meets on average (its mean's excess over the stall, interpolated as
  /// at() interpolates the time; never negative).
  double stall() const { return stall_; }
  double stalls_at(double bytes) const;
  /// A size's stalls as a training step meets them (Note [Collectives in a
  /// step] in calibrate/src/gloo_bench.cpp): its share of stalled runs, how
  /// much longer than its median a stalled one took, that median, and the
  /// computing before each launch, in seconds (0: not measured).
  struct StepTail {
    double bytes = 0, frac = 0, stall = 0, median = 0, lead = 0;
  };
  /// Gives it the stalls measured as a step meets it (any number of sizes).
  void set_step_tails(const std::vector<StepTail>& tails);
  /// How long a stall in a step lasts (the median over the sizes that
  /// stalled; 0: none measured), and how many one collective of `bytes`
  /// meets: the share stalled at the measured sizes, a straight line in
  /// bytes between them, the nearest one's outside them.
  double step_stall() const { return step_stall_; }
  double step_stalls_at(double bytes) const;
  /// How much longer a collective of `bytes` typically takes in a step than
  /// back to back (Note [A collective in a step]): at a size timed in a
  /// step, its median there over at(); a straight line in bytes between
  /// such sizes, the nearest one's outside them; never negative.
  double step_excess_at(double bytes) const;
  /// The computing before each launch those medians were timed after (the
  /// median over the sizes; 0: not recorded): Note [A collective's lead]
  /// in cost_profile.cpp.
  double step_lead() const { return step_lead_; }

 private:
  std::vector<double> bytes_, seconds_, excess_;
  double stall_ = 0;
  std::vector<double> step_bytes_, step_frac_, step_excess_;
  double step_stall_ = 0;
  double step_lead_ = 0;
};

/// A profile indexed for lookups; build once, share between predictions.
class ProfileCosts {
 public:
  explicit ProfileCosts(Profile profile);
  const Profile& profile() const { return profile_; }
  /// Measured on a GPU (device_kind cuda): Note [Host launch] applies.
  bool gpu() const { return gpu_; }
  /// Note [GPU optimizer step]: the optimizer's cost per update and per
  /// parameter fitted to the timed steps of o in p's kind (none: not timed).
  struct UpdateCost {
    double per_update = 0, per_param = 0;  ///< seconds
  };
  std::optional<UpdateCost> update_cost(Optimizer o, Precision p) const;
  /// A step of `o` in p over the one the profile timed of its kind, as
  /// {bytes a parameter, kernels an update}: 1 where they match (Note [SGD
  /// momentum], Note [Adam's decay] in cost_profile.cpp).
  std::pair<double, double> step_scale(Optimizer o, Precision p) const;
  /// The host's time for a layer's pass: its fastest time at any shape
  /// measured (Note [Host launch]); 0 where unmeasured.
  double launch_seconds(const std::string& signature, Precision p, Pass pass) const;
  /// Note [Python host cost] (cost_python.cpp): a Python loop's host cost
  /// beyond dtsim's C++ loop, from the timed op sequences and optimizer
  /// steps of both (kernels "python_ops", "host_ops", "python_step",
  /// "host_step"); none where calibration did not time them.
  std::optional<PythonHostCost> python_host() const { return python_host_; }
  /// Note [Interference fit] (calibrate/src/fit.cpp): the measured
  /// slowdowns of compute beside collectives in place of `d`'s priors, where
  /// the profile has them: comm_slowdown (unless 0, off) and
  /// comm_hbm_contention. The same `d` twice gives the same result.
  void calibrate_interference(DeviceSpec& d) const;

  /// Measured layer samples of one signature and precision, by tokens.
  const std::vector<const LayerSample*>* layer_samples(const std::string& signature, Precision p) const;
  /// Note [Layers in a step] (calibrate/src/torch_bench.cpp): how much longer
  /// a layer's pass took inside a whole training step than alone in a loop,
  /// at the measured shape nearest in tokens to b x s (1 where the profile
  /// timed no step with it).
  /// `dp_step`: as timed in the steps that all-reduced their gradients,
  /// where the profile has them (Note [Layers in a data-parallel step]).
  double in_step_factor(const std::string& signature, Precision p, Pass pass, std::int64_t b, std::int64_t s,
                        bool dp_step = false) const;
  /// The kernel model that prices `kind` in precision p, or nullptr. A GEMM
  /// of `batch` > 1 (a mixture of experts' grouped GEMM, Note [Grouped
  /// GEMMs] in cost_profile.cpp) takes the grouped-GEMM model where the
  /// profile has one; it and attention fall back to the GEMM model.
  const FitTerms* kernel_fit(KernelKind kind, Precision p, std::int64_t batch = 1) const;
  /// The timed optimizer steps of o (Adam and AdamW both, step_scale
  /// between them) in precision p's kind
  /// (fp32, or 16-bit parameters with fp32 masters where the profile timed
  /// those, else fp32's), by tensors then parameters (KernelSample m =
  /// parameters, n = tensors); empty if none.
  const std::vector<const KernelSample*>& optimizer_samples(Optimizer o, Precision p = Precision::kFp32) const;
  /// The timed host steps of ZeRO-Offload (kernel "host_adam") of
  /// precision p where timed, else of any precision, by parameters; empty if none.
  const std::vector<const KernelSample*>& host_optimizer_samples(Precision p) const;
  /// The timed gradient-bucket copies (kernels "bucket_in", "bucket_out"),
  /// sorted as optimizer_samples; empty if none.
  const std::vector<const KernelSample*>& bucket_samples(bool out) const { return out ? bucket_out_ : bucket_in_; }
  /// Rank counts with an intra-node fit for op (any backend), ascending.
  std::vector<int> comm_ranks(CollectiveOp op) const;
  /// The intra-node alpha-beta of op over `ranks` (NCCL's before Gloo's), or nullptr.
  const FitTerms* comm_fit(CollectiveOp op, int ranks) const;
  /// The alpha-beta of op over `ranks` spanning nodes of `ranks_per_node`
  /// each (an imported multi-node nccl-tests run, Note [Collectives across
  /// nodes] in cost_profile.cpp), or nullptr.
  const FitTerms* comm_fit(CollectiveOp op, int ranks, int ranks_per_node) const;
  /// The measured times of op over `ranks` on one node (`ranks_per_node`
  /// 0) or spanning nodes of `ranks_per_node` each, of the backend whose
  /// fit comm_fit gives, where two sizes or more were measured; else nullptr
  /// (Note [Measured collectives] in cost_profile.cpp).
  const MeasuredCollective* comm_measured(CollectiveOp op, int ranks, int ranks_per_node = 0) const;
  /// The copy model of "h2d" or "d2h", or nullptr.
  const FitTerms* copy_fit(const std::string& direction) const;

 private:
  Profile profile_;
  bool gpu_ = false;
  std::optional<UpdateCost> adam_cost_, adam_mixed_cost_, sgd_cost_;
  /// Note [SGD momentum]: whether the "sgd" samples timed momentum SGD
  /// (32 B a parameter) or plain SGD (12 B: profiles made before the
  /// runtime kept momentum, and profiler traces of SGD at momentum 0).
  bool sgd_timed_momentum_ = true;
  /// Note [Adam's decay]: whether the "adam" samples timed AdamW (36 B a
  /// parameter) or Adam at weight decay 0 (28 B: profiles before 2026-11-29).
  bool adam_timed_decay_ = false;
  std::optional<PythonHostCost> python_host_;

  std::unordered_map<std::string, std::vector<const LayerSample*>> layers_;
  struct StepRatio {
    double tokens = 0, forward = 1, backward = 1;
  };
  std::unordered_map<std::string, std::vector<StepRatio>> in_step_;  ///< by layer_key, ascending tokens
  std::unordered_map<std::string, std::vector<StepRatio>> in_dp_step_;  ///< the same of "|in-dp-step" records
  std::array<std::optional<FitTerms>, 20> kernels_;  ///< 5 fitted classes x 4 precisions
  std::map<std::pair<CollectiveOp, int>, FitTerms> comm_;
  std::map<std::tuple<CollectiveOp, int, int>, FitTerms> comm_nodes_;  ///< by op, ranks, ranks per node
  std::map<std::tuple<CollectiveOp, int, int>, MeasuredCollective> measured_;  ///< by op, ranks, ranks per node (0: one node)
  std::map<std::string, FitTerms> copies_;
  std::vector<const KernelSample*> adam_, adam_mixed_, sgd_, bucket_in_, bucket_out_, host_adam_;
  std::map<Precision, std::vector<const KernelSample*>> host_adam_by_precision_;
};

/// Note [Python host cost] (cost_python.cpp): what a Python loop's host
/// adds, from a profile's timed op sequences and optimizer steps, or none.
std::optional<PythonHostCost> python_host_cost(const Profile& profile);

/// A warning if the profile was measured on another kind of device than
/// `device` (a CPU profile for a GPU cluster, an H100 profile for A100s), or
/// "" when they agree or cannot be told apart.
std::string profile_device_mismatch(const Profile& profile, const DeviceSpec& device);

/// How far a profile's times are to be trusted, where calibration cut them
/// short: a warning for a `--quick` sweep (Note [Quick profiles] in
/// cost_profile.cpp), "" for a full one or an imported profile.
std::string profile_sweep_warning(const Profile& profile);

/// How far a profile's times are to be trusted, where the machine's speed
/// moved while it was measured: a warning where the reference workload
/// (Note [Machine probe] in models/torch) took more than 1.15x as long at
/// one of its timings during calibration (before each pass of the layer
/// sweep, or their median in a profile made before each was kept, and at
/// the end) as at another (Note [A steady calibration] in
/// cost_profile.cpp); "" where it held, or was not timed (a GPU, an
/// imported profile).
std::string profile_speed_warning(const Profile& profile);

/// Fit names, shared by the calibration driver (which writes them) and the
/// cost models (which read them).
std::string kernel_fit_name(const std::string& kind, Precision p);    ///< "kernel.gemm.fp32"
std::string comm_fit_name(const std::string& backend, CollectiveOp op, int ranks);  ///< "comm.gloo.all_reduce.2"
/// Of ranks spanning nodes, `ranks_per_node` on each: "comm.nccl.all_reduce.16.per_node.8"; the
/// one-node name where ranks_per_node is 0 or >= ranks.
std::string comm_fit_name(const std::string& backend, CollectiveOp op, int ranks, int ranks_per_node);
std::string copy_fit_name(const std::string& direction);              ///< "copy.h2d"

/// How many costs came from each source during one prediction.
struct CostSources {
  int layers_measured = 0;      ///< a measured shape, the measured median
  int layers_interpolated = 0;  ///< between measured shapes of the same layer
  int layers_other_precision = 0;  ///< measured in another precision, scaled by the peak ratio
  int layers_fitted = 0;        ///< the fitted kernel models (outside the measured range)
  int layers_analytic = 0;      ///< datasheet roofline (nothing fitted)
  int optimizer_measured = 0;   ///< optimizer steps priced from the timed step
  int bucket_copies_measured = 0;  ///< gradient-bucket copies priced from the timed ones
  int comm_measured = 0;        ///< the measured times (or fit) of the same op and rank count
  int comm_scaled = 0;          ///< link latency/bandwidth derived from another rank count
  int comm_analytic = 0;        ///< datasheet links (e.g. across nodes)
  int copies_measured = 0;
  int copies_analytic = 0;
};

/// What priced `dtsim comm --profile`'s rows of `op` over `g`, in words
/// (Note [Profile lookups] in cost_profile.cpp), from the sources a
/// ProfileCommModel counted in `used`: the measured fit of the same
/// operation and rank count (its name, sizes and terms), the datasheet
/// formula over the link the profile's all-reduce fit gives, or the
/// datasheet links.
std::string comm_cost_source(const Profile& p, CollectiveOp op, const CommGroup& g, const CostSources& used);

/// Layer and kernel times from a profile (see Note [Profile lookups] in
/// cost_profile.cpp), else the roofline.
class ProfileComputeModel final : public ComputeModel {
 public:
  ProfileComputeModel(std::shared_ptr<const ProfileCosts> costs, const DeviceSpec& device, CostSources* sources);
  TimeNs kernel_time(const Kernel& k, Precision p) const override;
  TimeNs layer_time(const Layer& layer, Pass pass, Precision p, const WorkloadShape& shape) const override;
  TimeNs optimizer_time(double params, int tensors, Optimizer o, Precision p, const DeviceSpec& device) const override;
  TimeNs host_optimizer_time(double params, Optimizer o, Precision p, const ClusterSpec& cluster) const override;
  TimeNs layer_launch_time(const Layer& layer, Pass pass, Precision p) const override;
  TimeNs recompute_time(const Layer& layer, const std::vector<Kernel>& kernels, Precision p,
                        const WorkloadShape& shape) const override;
  TimeNs optimizer_launch_time(double params, int updates, Optimizer o, Precision p) const override;
  TimeNs bucket_copy_time(double params, int tensors, bool out) const override;
  std::optional<LayerMemory> layer_memory(const Layer& layer, Precision p, const WorkloadShape& shape) const override;

 private:
  bool fitted_kernel_time(const Kernel& k, Precision p, TimeNs* out) const;
  /// `count` false: not counted in the prediction's cost sources.
  bool measured_layer_time(const Layer& layer, Pass pass, Precision p, const WorkloadShape& shape, TimeNs* out,
                           bool count = true) const;
  TimeNs kernel_sum(const Layer& layer, Pass pass, Precision p, bool count = true) const;
  std::shared_ptr<const ProfileCosts> costs_;
  RooflineComputeModel roofline_;
  DeviceSpec device_;
  CostSources* sources_;
};

/// Collectives and copies from a profile's alpha-beta fits, else the
/// datasheet links.
class ProfileCommModel final : public CommModel {
 public:
  ProfileCommModel(std::shared_ptr<const ProfileCosts> costs, const ClusterSpec& cluster, CostSources* sources);
  CollectiveCost collective(CollectiveOp op, Bytes bytes, const CommGroup& group) const override;
  CollectiveCost host_copy(Bytes bytes) const override;
  /// DeepEP crosses nodes, where a CPU profile measured nothing: priced by
  /// the analytic model over the profile's links.
  CollectiveCost expert_dispatch(Bytes bytes, const ExpertRoute& route, const CommGroup& group) const override;
  /// What the profile's in-step collectives measured of a rank's compute
  /// after their waits (Profile::comm_in_step's resume_s at wait_s).
  std::vector<std::pair<TimeNs, TimeNs>> resume_after_wait() const override;
  /// Where the profile timed Gloo: kUntilPassEnds if its loops ran at the
  /// lowest priority (its gloo.gloo_loop), else kSchedulerTick (a profile
  /// from before that record ran them at the rank's own).
  std::optional<TimeNs> send_waits_for_core() const override;

 private:
  std::shared_ptr<const ProfileCosts> costs_;
  ClusterSpec cluster_;
  AnalyticCommModel analytic_;
  std::unique_ptr<AnalyticCommModel> scaled_;  ///< intra-node link from the fits, if any
  CostSources* sources_;
};

}  // namespace dtsim::sim
