#pragma once
// The front door of the core: predict one plan, returning every figure the
// reports print. Front ends (CLI, GUI, search) call this with plain structs.

#include <cstdint>
#include <string>
#include <vector>

#include <memory>

#include "dtsim/sim/cluster.hpp"
#include "dtsim/sim/cost_profile.hpp"
#include "dtsim/sim/executor.hpp"
#include "dtsim/sim/model.hpp"
#include "dtsim/sim/partition.hpp"
#include "dtsim/sim/plan.hpp"
#include "dtsim/sim/task_graph.hpp"

namespace dtsim::sim {

/// Options of a prediction.
struct PredictOptions {
  /// Keep the task graph and spans (for --trace and the explorer): every
  /// task of every micro-batch, a long pipeline's spliced from its steady
  /// state (Note [Steady state timelines] in report/steady_state.cpp).
  bool keep_graph = false;
  /// With keep_graph: what a trace shows beyond the spans, every task's
  /// name ("fwd chunk 3 [mb 7]") and each rank's memory over time; false
  /// leaves both out (the explorer's timeline draws neither).
  bool trace_detail = true;
  /// Simulate every micro-batch of a long pipeline, not its steady state
  /// once (Note [Steady state] in report/steady_state.cpp); same results.
  bool unabridged = false;
  /// Add advice() to the warnings (the search, which ranks plans and
  /// prints no warnings, turns it off).
  bool advise = true;
  /// Measured costs (dtsim calibrate); null: the datasheet models.
  std::shared_ptr<const ProfileCosts> profile;
};

/// Time of one iteration split by what the critical path spent it on.
struct TimeBreakdown {
  TimeNs compute = 0;       ///< forward, backward and recompute kernels
  TimeNs exposed_comm = 0;  ///< collectives not hidden behind compute
  TimeNs bubble = 0;        ///< pipeline idle (0 without pipelining)
  TimeNs optimizer = 0;     ///< optimizer step (device or host)
  TimeNs offload = 0;       ///< host<->device copies not hidden
  TimeNs other = 0;         ///< anything else
};

/// Peak memory of one simulated rank, with the breakdown at the peak.
struct RankMemory {
  int rank = 0;             ///< first real rank of the class
  int stage = 0;
  int replicas = 1;         ///< real ranks with this same figure
  Bytes peak = 0;
  Bytes parameters = 0, gradients = 0, optimizer = 0, activations = 0, buffers = 0;
};

/// Everything predicted for one plan.
struct Prediction {
  std::string model_name;
  std::int64_t model_parameters = 0;
  /// Of them, those trained (Model::trainable_parameters: a LoRA fine-tune's adapters).
  std::int64_t trainable_parameters = 0;
  int model_layers = 0;
  /// Whether the model attends (a kernel of KernelKind::kAttention; looked
  /// for under PredictOptions::advise, else taken as true) and reads
  /// sequences (max_seq_len > 1): the plan line names its attention and
  /// sequence length only then (a CNN has neither).
  bool model_attention = true, model_sequence = true;
  std::string cluster_name;
  int gpus = 0;
  std::string device_name;
  ResolvedPlan plan;

  TimeNs iteration_time = 0;
  double samples_per_s = 0;
  double tokens_per_s = 0;
  double tflops_per_gpu = 0;   ///< model FLOPs / s / GPU (no recompute), in TFLOP/s
  double mfu = 0;              ///< model FLOP utilisation against dense peak
  double hfu = 0;              ///< hardware FLOP utilisation (recompute and dense experts counted)
  TimeBreakdown breakdown;

  Bytes capacity = 0;          ///< device memory
  /// Of each rank's peak, the bytes no framework allocator hands out: the
  /// CUDA context (measured by calibration where a profile has it, else the
  /// device's runtime_reserved). peak - outside_allocator is what PyTorch's
  /// torch.cuda.max_memory_allocated() reports.
  Bytes outside_allocator = 0;
  bool fits = true;            ///< every rank's peak <= capacity
  Bytes shortfall = 0;         ///< worst peak - capacity, if it does not fit
  std::vector<RankMemory> ranks;

  std::string cost_source = "analytic";  ///< "analytic" or "profile:<path>"
  CostSources sources;         ///< which source priced each cost (with a profile)
  std::vector<std::string> warnings;  ///< e.g. a profile measured on another device

  std::uint64_t events = 0;    ///< simulation events processed (by the full simulation)
  std::size_t tasks = 0;       ///< tasks in the graph (of the full simulation)
  /// Micro-batches a pipeline was simulated with where its steady state
  /// was simulated once (Note [Steady state]); else 0.
  std::int64_t abridged_to = 0;
  TaskGraph graph;             ///< when keep_graph
  /// When keep_graph (spans, memory timeline); where they were spliced from
  /// a pipeline's steady state (abridged_to > 0), its critical path is not
  /// walked (all zero): `breakdown` splits the time.
  ExecResult exec;
};

/// What would change a plan a user likely wrote by accident (Note [Advice]
/// in report/predict.cpp): a pipeline with fewer micro-batches a step than
/// stages, a plan that does not fit; predict() adds these to its warnings.
/// The knobs it names are those the rules table (PlanRules) allows `model`
/// on `cluster`.
std::vector<std::string> advice(const Prediction& p, const Model& model, const ClusterSpec& cluster);

/// Note [A long default sequence] (report/predict.cpp): where no seq_len was
/// given (`given_seq_len` 0) and `model`'s context is longer than a
/// pretraining sequence, what that means and how to set it; empty otherwise.
std::string long_default_sequence(const Model& model, std::int64_t given_seq_len);

/// The time breakdown of a pipeline's busiest stage, the bubble being the
/// time it idles (Note [Pipeline breakdown] in predict.cpp); sums to the makespan.
TimeBreakdown stage_breakdown(const TaskGraph& graph, const ExecResult& exec);

/// The plan resolved and partitioned as predict() would simulate it (the
/// stage split balanced with the same cost models), without simulating:
/// what the runtime needs to run it. Throws ConfigError as resolve().
ResolvedPlan plan_for(const Model& model, const PlanSpec& spec, const ClusterSpec& cluster,
                      const PredictOptions& options = {});

/// Note [Search]: what each layer of one micro-batch costs a rank, as the
/// stage bounds read it: the time its forward and its backward keep the
/// compute stream busy (kernels, recompute and the serial collectives, as
/// the lowering prices them), partition()'s cost, the bytes it
/// keeps for its backward (and, under ZB-H1, from its backward to its
/// weight pass), and its parameters on the rank.
struct LayerCosts {
  std::vector<TimeNs> forward, backward;
  std::vector<double> costs;
  std::vector<Bytes> kept, weight_hold;
  std::vector<std::int64_t> params, expert_params;
  /// Bytes of its frozen weights (Layer::frozen_params, a tied copy left
  /// out: the bounds stay below what the lowering holds; quantized ones at
  /// their size, Layer::frozen_quantized).
  std::vector<Bytes> frozen_bytes;
  /// Per layer, for Megatron's block recompute (Note [Block recompute]):
  /// whether it is a block; the recompute its backward above includes (0
  /// where it reruns nothing) and what full recompute would add; what it
  /// keeps rerun (its input) and not (its activations).
  std::vector<char> block;
  std::vector<TimeNs> rerun, rerun_full;
  std::vector<Bytes> checkpoint, whole;
  /// Per layer under overlap_moe_expert_parallel_comm (else empty): its
  /// all-to-alls on their own stream, off the compute stream's `forward`
  /// and `backward` (PricedLayers::ep_off_stream).
  std::vector<TimeNs> ep_off_stream;
  /// Over every layer, one micro-batch (the search's interference term,
  /// Note [Search]): the kernels' time (forward, backward, recompute), of it
  /// the memory-bound kernels' (PricedLayers' shares), and the serial
  /// collectives on the compute stream (tensor parallelism's, under
  /// tp_comm_overlap what its GEMMs leave exposed; expert parallelism's
  /// all-to-alls), ns.
  double kernels_ns = 0, memory_ns = 0, serial_comm_ns = 0;
};
LayerCosts layer_costs(const PricedLayers& priced, const ResolvedPlan& plan);

/// What one micro-batch's forward and backward through every layer keep
/// the compute streams busy with, priced as the lowering prices them for a
/// resolved `plan` (per GPU of its tp x cp shard): the kernels, recompute's
/// rematerialisation and the tensor-parallel collectives Megatron-LM runs
/// between them (under tp_comm_overlap what the GEMMs leave exposed). Each layer runs them
/// on its stage's compute stream, one after another, so an iteration takes
/// at least grad_accum x this / pp (Note [Search]); the sum of layer_costs.
/// `forward_share`, when given, receives the smallest share of any layer's
/// work that its forward (kernels and tensor-parallel collectives) takes.
TimeNs micro_batch_compute(const Model& model, const ResolvedPlan& plan, const ClusterSpec& cluster,
                           const PredictOptions& options = {}, double* forward_share = nullptr);

/// The plan's layers priced as predict() prices them (the profile's
/// figures where `options` gives one): what partition() balances and the
/// search's bounds read (Note [Search]).
PricedLayers price_plan_layers(const Model& model, const ResolvedPlan& plan, const ClusterSpec& cluster,
                               const PredictOptions& options = {});

/// Predicts one iteration of `spec` for `model` on `cluster`. Throws
/// ConfigError if the plan is invalid for them.
Prediction predict(const Model& model, const PlanSpec& spec, const ClusterSpec& cluster,
                   const PredictOptions& options = {});

}  // namespace dtsim::sim
