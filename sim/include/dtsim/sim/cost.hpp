#pragma once
// Cost models: how long a kernel takes on a device and how a collective moves
// over the cluster's links. The analytic implementations here work from the
// device database; calibration profiles (a later issue) plug in behind the
// same interfaces.

#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <utility>

#include "dtsim/sim/cluster.hpp"
#include "dtsim/sim/model.hpp"
#include "dtsim/sim/plan.hpp"

namespace dtsim::sim {

// CollectiveOp (the NCCL operations) is declared in model.hpp, where layers
// name the tensor-parallel collectives they need.
/// "all_reduce", "reduce_scatter", "all_gather", "broadcast", "send_recv",
/// "all_to_all".
const char* to_string(CollectiveOp op);
/// Parses the names above; returns false if unknown.
bool parse_collective(const std::string& text, CollectiveOp* out);

/// nccl-tests' bus-bandwidth factor (PERFORMANCE.md): all-reduce 2(n-1)/n,
/// reduce-scatter, all-gather and all-to-all (n-1)/n, broadcast and
/// send/recv 1.
double bus_bandwidth_factor(CollectiveOp op, int ranks);

/// Which links a communicator spans.
enum class LinkClass { kIntraNode, kInterNode, kHostDevice };

/// A group of ranks a collective runs over, as placed on the cluster.
struct CommGroup {
  int ranks = 1;           ///< participants
  int ranks_per_node = 1;  ///< participants sharing one node (1..ranks)
  int groups_per_node = 1; ///< identical groups running at once that share a node's NICs
  /// Nodes spanned.
  int nodes() const { return (ranks + ranks_per_node - 1) / ranks_per_node; }
};

/// The communicator along `axis` of a mesh on nodes of `per_node` GPUs
/// numbered consecutively: `members` ranks (0: the axis's size) `step`
/// coordinates apart (a sub-group, as FSDP's HYBRID_SHARD splits dp).
CommGroup axis_group(const Mesh& mesh, Axis axis, int per_node, int members = 0, int step = 1);
/// The gradient communicator of a plan: the data-parallel axis, or with
/// context parallelism the data- and context-parallel axes together
/// (Megatron-Core reduces gradients and shards the distributed optimizer
/// over its dp x cp group; torchtitan shards FSDP over dp_shard x cp).
CommGroup data_group(const Mesh& mesh, int per_node);

/// A communicator of the expert view of a mesh (Note [Expert mesh] in
/// cost_comm.cpp): each stage's tp x cp x dp ranks refolded, in rank order,
/// as etp x ep x edp, innermost first; `axis` is Axis::kTp (the expert
/// tensor-parallel group), kEp or kDp (the expert data-parallel group).
/// `members` and `step` pick a sub-group of the expert data-parallel axis,
/// as axis_group does (HYBRID_SHARD's expert shards and their replicas).
CommGroup expert_group(const Mesh& mesh, int etp, int ep, Axis axis, int per_node, int members = 0, int step = 1);
/// The group a MoE layer's dispatcher exchanges tokens over at ep > 1: the
/// ep group (alltoall, DeepEP), or the etp x ep ranks together, Megatron-
/// Core's tp_ep group (allgather).
CommGroup expert_dispatch_group(const Mesh& mesh, int etp, int ep, MoeDispatcher dispatcher, int per_node);

/// A collective's time alone on its link: its latency, then its wire bytes
/// at `rate` (CollectiveCost::total, TaskCost::total).
inline TimeNs collective_time(TimeNs latency, double wire_bytes, BytesPerSec rate) {
  return latency + (wire_bytes > 0 ? transfer_ns(wire_bytes, rate) : 0);
}

/// The cost of one collective, split so the engine can share link bandwidth:
/// a fixed latency, then `wire_bytes` that flow over `link` at up to `rate`.
struct CollectiveCost {
  /// "ring", "tree", "nvls", "nvlstree", "local", "p2p", "measured", ...:
  /// always a string literal, so a view (Note [Compact tasks] in task_graph.hpp).
  std::string_view algorithm;
  /// NCCL's protocol: "LL", "LL128" or "Simple" (Note [NCCL protocols] in
  /// cost_comm.cpp); empty where the cluster's collectives take one line
  /// (Gloo, RCCL, a profile's fit).
  std::string_view protocol;
  TimeNs latency = 0;       ///< alpha terms: hops x per-hop latency + base
  double wire_bytes = 0;    ///< bytes through the bottleneck link, per rank
  BytesPerSec rate = 0;     ///< the bottleneck link's bandwidth for this flow
  LinkClass link = LinkClass::kIntraNode;
  /// Note [A collective's stalls] (cost_profile.cpp): a measured
  /// collective's typical time above; how long one stall takes and how
  /// many one meets on average. The task builder lets a rank's collectives
  /// pay them as a median step does (none in total() or in bounds).
  TimeNs stall = 0;
  double stalls = 0;
  /// The same, measured as a training step meets the collective (Note
  /// [Collectives in a step] in calibrate/src/gloo_bench.cpp): where the
  /// profile has them, a data-parallel gradient collective pays these in
  /// place of the back-to-back ones above (0: not measured).
  TimeNs step_stall = 0;
  double step_stalls = 0;
  /// And how much longer than its typical time above it takes there (Note
  /// [A collective in a step] in cost_profile.cpp; 0: not measured).
  TimeNs step_extra = 0;
  /// The computing before each launch it was timed after (Note [A
  /// collective's lead] in cost_profile.cpp; 0: all of step_extra is paid).
  TimeNs step_lead = 0;
  /// Time if nothing else shares the link.
  TimeNs total() const;
};

/// Prices collectives.
class CommModel {
 public:
  virtual ~CommModel() = default;
  /// Cost of `op` on a buffer of `bytes` (nccl-tests' "size") over `group`.
  virtual CollectiveCost collective(CollectiveOp op, Bytes bytes, const CommGroup& group) const = 0;
  /// A host<->device copy of `bytes` (offload).
  virtual CollectiveCost host_copy(Bytes bytes) const = 0;
  /// DeepEP's dispatch (or combine) of a rank's `bytes` of routed tokens
  /// over the expert-parallel `group` (Note [DeepEP] in cost_comm.cpp); by
  /// default the all-to-all it replaces.
  virtual CollectiveCost expert_dispatch(Bytes bytes, const ExpertRoute& /*route*/, const CommGroup& group) const {
    return collective(CollectiveOp::kAllToAll, bytes, group);
  }
  /// Note [Resuming after a wait] (engine/executor.cpp): what a rank's
  /// compute pays more after waiting on a collective, as (wait, extra)
  /// points in increasing wait (SimRank::resume); none by default.
  virtual std::vector<std::pair<TimeNs, TimeNs>> resume_after_wait() const { return {}; }
  /// Note [Quiet sender] (engine/executor.cpp): how long a receiver's
  /// notice waits for a busy sender's core at most, as the ranks measured
  /// ran their Gloo loops (DeviceSpec::send_waits_for_core); nothing: the
  /// device's.
  virtual std::optional<TimeNs> send_waits_for_core() const { return std::nullopt; }
};

/// NCCL's ring and tree algorithms as alpha-beta per hop (Thakur et al. 2005;
/// NCCL docs), and NVLink SHARP's all-reduce inside a node, over the intra-
/// and inter-node links of a cluster; picks the faster algorithm as NCCL's
/// tuner does.
class AnalyticCommModel final : public CommModel {
 public:
  explicit AnalyticCommModel(const ClusterSpec& cluster);
  CollectiveCost collective(CollectiveOp op, Bytes bytes, const CommGroup& group) const override;
  CollectiveCost host_copy(Bytes bytes) const override;
  CollectiveCost expert_dispatch(Bytes bytes, const ExpertRoute& route, const CommGroup& group) const override;
  /// Bandwidth that concurrent flows on a link class share, per rank.
  BytesPerSec link_capacity(LinkClass link, int groups_per_node = 1) const;
  /// One algorithm only ("ring", "tree", "nvls" or "nvlstree"), for tests and `dtsim comm`;
  /// the fastest of its protocols NCCL would enable.
  CollectiveCost with_algorithm(const std::string& algorithm, CollectiveOp op, Bytes bytes,
                                const CommGroup& group) const;
  /// One algorithm in one protocol ("LL", "LL128", "Simple"; Note [NCCL
  /// protocols]), whether or not NCCL would enable it, for tests.
  CollectiveCost with_protocol(const std::string& algorithm, const std::string& protocol, CollectiveOp op,
                               Bytes bytes, const CommGroup& group) const;
  /// NCCL's protocols price this cluster's collectives (Note [NCCL protocols]).
  bool protocol_model() const;
  /// NCCL may reduce in the NVSwitch (Note [NVLink SHARP] in cost_comm.cpp).
  bool nvls_available() const;

 private:
  /// `algorithm` on one alpha-beta line (Note [Collective cost model]): its
  /// links, rate and wire bytes, which NCCL's protocols start from.
  CollectiveCost priced(const std::string& algorithm, CollectiveOp op, Bytes bytes, const CommGroup& group) const;
  /// The latency and rate of `line` (a ring or a tree from priced) in NCCL
  /// protocol p; `rate` enters as the line's.
  void in_protocol(const CollectiveCost& line, int p, CollectiveOp op, Bytes bytes, const CommGroup& group,
                   TimeNs& latency, double& rate) const;
  bool protocol_enabled(int protocol, const CommGroup& group) const;
  std::pair<double, double> step_latency_us(int algorithm, int protocol, const CommGroup& group) const;
  /// A ring's (a tree's) latency, and its rate from the link's, in `protocol`.
  void nccl_ring(TimeNs& latency, double& rate, int protocol, CollectiveOp op, Bytes bytes, const CommGroup& group) const;
  void nccl_tree(TimeNs& latency, double& rate, int protocol, Bytes bytes, const CommGroup& group) const;
  BytesPerSec ll_max_bus_bandwidth(int nodes) const;
  ClusterSpec cluster_;
  // Note [NCCL protocols], from the cluster once.
  bool protocols_ = false;     ///< protocol_model()
  int intra_hw_ = 0;           ///< NCCL's hardware row of the intra-node link
  double intra_wire_us_ = 0;   ///< the intra-node link's latency above NCCL's LL step
  double inter_wire_us_ = 0;   ///< the network's, NCCL's latencyInter
  bool ll128_ = false;         ///< NCCL enables LL128 inside a node
  bool ll128_across_ = false;  ///< ... and across nodes
};

/// Which half of a layer's work.
enum class Pass { kForward, kBackward };

/// The precision a layer's kernels run in under plan precision p: p itself,
/// except that under fp8 only transformer blocks have FP8 GEMMs (Transformer
/// Engine's modules); every other layer (embeddings, LM head, pooler, LSTMs)
/// runs as bf16 (Note [FP8 training] in cost_compute.cpp).
Precision kernel_precision(const Layer& layer, Precision p);

/// Under fp8, the time of Transformer Engine's cast of a GEMM's (m, k)
/// operand to FP8 before it: a memory-bound pass of fp8_cast_bytes() an
/// element for the forward and dgrad GEMMs, none for wgrad, whose operands
/// those casts wrote (Note [FP8 casts] in cost_compute.cpp); 0 for other
/// kernels and precisions.
TimeNs fp8_cast_time(const Kernel& k, Precision p, const DeviceSpec& device);
/// Bytes one FP8 cast writes an element under `recipe` on a GPU of that
/// compute capability (x 10): the copies a Linear's GEMMs read, which is
/// also what Transformer Engine caches of a weight (Note [FP8 casts]).
double fp8_copy_bytes(Fp8Recipe recipe, int compute_capability);
/// Bytes one FP8 cast moves an element: the bf16 read, fp8_copy_bytes() and
/// current scaling's amax read (Note [FP8 casts]).
double fp8_cast_bytes(Fp8Recipe recipe, int compute_capability);
/// Elements an MXFP8 scale covers (TE's MXFP8_BLOCK_SCALING_SIZE).
inline constexpr int kMxfp8BlockElements = 32;
/// How much longer an MXFP8 GEMM runs than a per-tensor FP8 one (Note [FP8
/// training]: TE's GEMM profiling tutorial on a B300, 7.161 / 6.812 ms).
inline constexpr double kMxfp8GemmSlowdown = 7.161 / 6.812;
/// An NVFP4 GEMM's time over the per-tensor FP8 one's (Note [NVFP4 training]:
/// TE's GEMM profiling tutorial on a B300, 3.764 / 6.812 ms).
inline constexpr double kNvfp4GemmTimeRatio = 3.764 / 6.812;
/// Bytes an NVFP4 cast writes an element, its row-wise and column-wise
/// copies with their scales, which is also what a weight's cached copies
/// take; one copy, what --fp4-param-gather gathers, is half.
inline constexpr double kNvfp4WeightCopyBytes = 2 * (0.5 + 1.0 / 16);
/// Bytes an NVFP4 cast moves an element: the amax pass's read, the cast's
/// read and kNvfp4WeightCopyBytes.
inline constexpr double kNvfp4CastBytes = 2 + 2 + kNvfp4WeightCopyBytes;
/// kMxfp8GemmSlowdown for an FP8 GEMM under fp8_recipe mxfp8,
/// kNvfp4GemmTimeRatio for an NVFP4 GEMM, else 1.
double fp8_gemm_time_scale(const Kernel& k, Precision p, const DeviceSpec& device);

/// A layer's memory as calibration measured it (Note [Layer memory] in
/// cost_profile.cpp): above what the forward leaves allocated, the most it
/// held while it ran; above what was allocated as the backward began, the
/// most the backward held (its gradients, the input's and its workspaces).
struct LayerMemory {
  Bytes forward_transient = 0;
  Bytes backward_rise = 0;
};

/// One of the chunks `k` runs as (Kernel::splits; Note [Userbuffers'
/// chunks] in models/src/layers.cpp): m / splits rows, its share of the
/// FLOPs, the whole weight and its share of the input and output; `k`
/// itself (splits 1) where it is one GEMM.
Kernel gemm_chunk(const Kernel& k);

/// Prices kernels on one device.
class ComputeModel {
 public:
  virtual ~ComputeModel() = default;
  /// Time of one launch of `k` in precision p (repeats not included).
  virtual TimeNs kernel_time(const Kernel& k, Precision p) const = 0;
  /// Time of a list of kernels, repeats included.
  TimeNs kernels_time(const std::vector<Kernel>& ks, Precision p) const;
  /// The share of a layer's pass (0 to 1) that its memory-bound kernels
  /// take (elementwise, norms, embeddings; GEMMs, attention and recurrences
  /// are compute-bound), each priced by kernel_time: what a collective's
  /// HBM traffic slows (Note [Interference] in engine/executor.cpp). A
  /// profile's whole-layer time is split in the same proportion.
  double memory_share(const Layer& layer, Pass pass, Precision p) const;
  /// The same over a list of kernels run in precision p.
  double memory_share(const std::vector<Kernel>& ks, Precision p) const;
  /// Time of one pass of a layer for a micro-batch of `shape`. By default the
  /// sum of its kernels; a profile answers from whole-layer measurements.
  virtual TimeNs layer_time(const Layer& layer, Pass pass, Precision p, const WorkloadShape& shape) const;
  /// One optimizer step over `params` parameters in `tensors` updates on
  /// `device`. By default memory-bound at its achievable bandwidth plus a
  /// launch per tensor; a profile answers from the step it timed (Note
  /// [Optimizer step] in cost_compute.cpp).
  virtual TimeNs optimizer_time(double params, int tensors, Optimizer o, Precision p, const DeviceSpec& device) const;
  /// ZeRO-Offload's step of `params` parameters on the host's cores (Note
  /// [Offload] in lowering/passes/offload.cpp): by default bound by the host's memory
  /// bandwidth or arithmetic, its share for one of the node's GPUs; a
  /// profile answers from the host step it timed.
  virtual TimeNs host_optimizer_time(double params, Optimizer o, Precision p, const ClusterSpec& cluster) const;
  /// Copying the gradients of `params` parameters in `tensors` tensors into
  /// a flat bucket before their collective (`out` false), or the reduced
  /// bucket back into them, divided (`out` true): Note [Gradient buckets] in
  /// models/torch. 0 by default: on a GPU they are two memory passes over
  /// the gradients, under 1% of a step; a profile answers from the copies it
  /// timed (on a CPU a few LibTorch ops per tensor).
  virtual TimeNs bucket_copy_time(double params, int tensors, bool out) const;
  /// A layer's measured memory at `shape` (Note [Layer memory]); none by
  /// default: the analytic models' formulas stand.
  virtual std::optional<LayerMemory> layer_memory(const Layer& layer, Precision p, const WorkloadShape& shape) const;
  /// Partial recompute's cost for a layer: `kernels`, part of its forward,
  /// run again (selective recompute's Layer::attention_core, op-level
  /// recompute's Layer::op_recompute). By default those kernels.
  virtual TimeNs recompute_time(const Layer& layer, const std::vector<Kernel>& kernels, Precision p,
                                const WorkloadShape& shape) const;
  /// The host's time to issue one pass of a layer (Note [Host launch] in
  /// executor.cpp); 0 by default: issuing is not modelled.
  virtual TimeNs layer_launch_time(const Layer& layer, Pass pass, Precision p) const;
  /// The host's time to issue an optimizer step of `updates` flat updates
  /// (Note [Optimizer updates]); 0 by default.
  virtual TimeNs optimizer_launch_time(double params, int updates, Optimizer o, Precision p) const;
};

/// Note [Optimizer updates]
/// dtsim_worker's optimizer (models::adam_update) steps a tensor a chunk of
/// at most kUpdateChunk elements at a time, each chunk a handful of
/// kernels, so a step costs per chunk ("update") and per parameter, not per
/// tensor: gpt2's 148 tensors are 157 updates (its 38.6M-element token
/// embedding ten of them), a ZeRO shard of 31M parameters 8. Lowering counts
/// them with layer_updates() and flat_updates().
inline constexpr std::int64_t kUpdateChunk = std::int64_t{1} << 22;
/// Updates of a layer's parameters: a chunk per tensor, and more where its
/// tensors together exceed a chunk each (the largest tensor takes them).
int layer_updates(std::int64_t params, int tensors);
/// Updates of one flat tensor (a ZeRO shard, an FSDP unit) of `params`.
int flat_updates(std::int64_t params);

/// Note [Unfused step]
/// A fused optimizer (apex's and DeepSpeed's FusedAdam, PyTorch's
/// fused=True) updates in place. An unfused one makes temporaries: the
/// runtime's adam_update holds, for the chunk of at most kUpdateChunk
/// elements it is stepping, Adam's fp32 denominator ((v / bc2).sqrt_().add_(eps))
/// and, under mixed precision, the gradient's fp32 copy; torch.optim.Adam's
/// for-loop implementation (_single_tensor_adam, PyTorch's default for CPU
/// tensors) the denominator of the whole tensor. So a step holds, at its
/// largest, 4 bytes (8 mixed) an element of the largest tensor (or chunk) it
/// steps: measured by dtsim validate on this CPU, mlp's peak at the step was
/// its states and gradients and 4 x 784 x 512 B + 12, the denominator of its
/// first weight (docs/validation-cpu.md). Devices with
/// DeviceSpec::fused_optimizer false (the CPU) are priced so; SGD makes none.
/// `largest` is the largest tensor's elements (Layer::largest_param_tensor,
/// where the model says it, or a flat shard under ZeRO).
/// Without master weights (Note [No master weights] in sim/src/parallel/plan.cpp) the
/// denominator is in the parameters' dtype and no gradient is copied: 2 bytes an element in 16 bits.
Bytes unfused_step_bytes(std::int64_t largest, Optimizer o, Precision p, bool fused, bool master_weights = true);

/// Bytes the optimizer reads and writes per parameter in one step
/// (multi-tensor Adam: read grad, master, m, v; write master, m, v, and the
/// working copy under mixed precision; momentum SGD drops v).
double update_bytes_per_param(Optimizer o, Precision p, bool master_weights = true);
/// The same for a plan: without master weights as above, and under
/// use_precision_aware_optimizer as Transformer Engine's FusedAdam streams
/// its states (Note [Precision-aware step] in cost_compute.cpp).
double update_bytes_per_param(const ResolvedPlan& plan);

/// What a Python training loop's host adds to dtsim's C++ loop for the
/// same work (Note [Python host cost] in cost_python.cpp), as calibration
/// measures it where python3 imports torch.
struct PythonHostCost {
  double per_op_s = 0;      ///< an eager op called from a torch.nn module's forward
  double per_tensor_s = 0;  ///< a parameter tensor stepped by torch.optim's AdamW
};

/// The eager ops a layer's forward calls from Python: its kernels, a
/// recurrence's time steps as one (nn.LSTM loops in C++).
std::int64_t python_forward_ops(const Layer& layer);

/// `base`'s costs for a plan run by a Python loop (Runtime::kPython): each
/// forward pays `cost.per_op_s` an op and each optimizer step
/// `cost.per_tensor_s` an update on the host; on a CPU the host is the
/// device and the pass takes that much longer, on a GPU it is the host's
/// time to issue (Note [Host launch] in engine/executor.cpp). Autograd's
/// backward runs in C++ and pays nothing more.
class PythonHostComputeModel final : public ComputeModel {
 public:
  PythonHostComputeModel(const ComputeModel& base, PythonHostCost cost, bool gpu);
  TimeNs kernel_time(const Kernel& k, Precision p) const override;
  TimeNs layer_time(const Layer& layer, Pass pass, Precision p, const WorkloadShape& shape) const override;
  TimeNs optimizer_time(double params, int tensors, Optimizer o, Precision p, const DeviceSpec& device) const override;
  TimeNs host_optimizer_time(double params, Optimizer o, Precision p, const ClusterSpec& cluster) const override;
  TimeNs bucket_copy_time(double params, int tensors, bool out) const override;
  std::optional<LayerMemory> layer_memory(const Layer& layer, Precision p, const WorkloadShape& shape) const override;
  TimeNs recompute_time(const Layer& layer, const std::vector<Kernel>& kernels, Precision p,
                        const WorkloadShape& shape) const override;
  TimeNs layer_launch_time(const Layer& layer, Pass pass, Precision p) const override;
  TimeNs optimizer_launch_time(double params, int updates, Optimizer o, Precision p) const override;

 private:
  TimeNs forward_host(const Layer& layer) const;
  TimeNs step_host(int tensors) const;
  const ComputeModel& base_;
  PythonHostCost cost_;
  bool gpu_;
};

/// Roofline: max(FLOPs / (peak x GEMM efficiency(shape)), bytes / (bandwidth x
/// memory efficiency)) + launch overhead. GEMM efficiency falls for small
/// shapes through wave quantisation over the compute units and a short-K
/// penalty (see Note [GEMM efficiency] in cost.cpp).
class RooflineComputeModel final : public ComputeModel {
 public:
  explicit RooflineComputeModel(const DeviceSpec& device);
  TimeNs kernel_time(const Kernel& k, Precision p) const override;
  /// The efficiency (0..1] the model assumes for a GEMM of this shape.
  /// `sm_margin` SMs kept for a collective beside it (Kernel::sm_margin):
  /// its waves over the rest.
  double gemm_efficiency(std::int64_t m, std::int64_t n, std::int64_t k, int sm_margin = 0) const;
  /// The share of the device's SMs `k` runs on (Kernel::sm_margin kept
  /// for a collective; Note [Userbuffers' chunks]): 1 for most kernels.
  double sm_share(const Kernel& k) const;

 private:
  DeviceSpec device_;
};

}  // namespace dtsim::sim
