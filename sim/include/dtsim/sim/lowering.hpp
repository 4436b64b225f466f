#pragma once
// Lowering: (model, plan, cluster) -> the per-rank task graph of one training
// iteration, as PyTorch DDP, DeepSpeed ZeRO and PyTorch FSDP schedule it.

#include "dtsim/sim/cost.hpp"
#include "dtsim/sim/model.hpp"
#include "dtsim/sim/partition.hpp"
#include "dtsim/sim/plan.hpp"
#include "dtsim/sim/task_graph.hpp"

namespace dtsim::sim {

/// The cost models lowering prices tasks with.
struct CostModels {
  const ComputeModel* compute = nullptr;
  const CommModel* comm = nullptr;
  bool name_tasks = true;  ///< false leaves task names empty (search never shows them)
  /// The plan's layers as partition priced them with these models
  /// (price_layers), reused by the pipeline lowering; null: priced again.
  const PricedLayers* priced = nullptr;
};

/// Model-state bytes one rank holds on the device (ZeRO paper, Rajbhandari et
/// al. 2020, section 5.1 and Figure 1): parameters in the working precision,
/// gradients, and optimizer state (K bytes per parameter), each sharded over
/// `plan.shard_group` ranks from stages 3, 2 and 1 respectively; offloaded
/// states live on the host instead.
struct ModelStates {
  Bytes parameters = 0;
  Bytes gradients = 0;
  Bytes optimizer = 0;
  Bytes total() const { return parameters + gradients + optimizer; }
};
/// `expert_parameters` of `parameters` are routed experts', sharded over
/// plan.expert_shard_group rather than plan.shard_group.
ModelStates model_states(const ResolvedPlan& plan, std::int64_t parameters, std::int64_t expert_parameters = 0);

/// Whether `plan` shards a fine-tune's frozen weights with its trained ones:
/// at stage 3 over more than one rank, which beside frozen weights resolve
/// allows as FSDP2's full_shard and hybrid_shard alone (Note [Frozen weights
/// under FSDP] in sim/src/lowering/passes/sharded_parameters.cpp).
bool shards_frozen(const ResolvedPlan& plan);
/// Of a rank's `frozen` bytes of frozen weights, those it holds on the device
/// between passes: all of them, its shard where shards_frozen(), none where
/// those shards are offloaded.
Bytes resident_frozen(const ResolvedPlan& plan, Bytes frozen);

/// How much longer a memory-bound kernel takes on `device` beside a
/// collective whose flow runs at `link_rate` bytes a second (Note
/// [Interference] in engine/executor.cpp; SimRank::hbm_slowdown): h / (1 -
/// h), h the HBM share the flow's traffic takes, before the executor adds
/// the classes' shares and applies comm_hbm_contention; 0 where the
/// device's compute does not slow beside collectives (comm_slowdown 0).
double hbm_slowdown(const DeviceSpec& device, BytesPerSec link_rate);

/// The most tasks a graph may have: 2^25, about 9 GB with their spans and
/// the executor's state (Note [Graph size] in lowering/lower.cpp).
inline constexpr std::size_t kMaxGraphTasks = std::size_t{1} << 25;

/// Throws UnsupportedError, in one line naming the micro-batches, where the
/// graph of every task of a partitioned plan would have more than
/// kMaxGraphTasks (Note [Graph size] in lowering/lower.cpp).
void check_graph_size(const ResolvedPlan& plan);

/// Builds the task graph of one iteration of a partitioned plan
/// (partition.hpp: stage_layers filled). Only ranks that differ are
/// simulated: data- and tensor-parallel replicas collapse into one SimRank,
/// so a pipeline has one simulated rank per stage. Throws as
/// check_graph_size where it would have more than kMaxGraphTasks.
TaskGraph lower(const Model& model, const ResolvedPlan& plan, const ClusterSpec& cluster,
                const CostModels& costs);

/// One step of a pipeline rank's schedule: the forward or backward pass of
/// micro-batch `micro` through the rank's model chunk `chunk` (0-based among
/// its own chunks; virtual stage chunk x pp + stage). Under zb-h1 a
/// backward computes the gradient of the chunk's input only (B) and a step
/// with `weight` set (forward false) the gradients of its weights (W).
struct PipeStep {
  bool forward = true;
  int chunk = 0;
  int micro = 0;
  bool weight = false;
  bool operator==(const PipeStep&) const = default;
};

/// The order in which pipeline stage `stage` of `pp` runs its passes over
/// `micro_batches` micro-batches and `virtual_stages` chunks: GPipe (all
/// forwards, then backwards in reverse), 1F1B (pp - stage - 1 warm-up
/// forwards, then one forward one backward, then the remaining backwards;
/// Narayanan et al. 2021 Fig. 4), interleaved (Megatron-LM's
/// forward_backward_pipelining_with_interleaving), naive (F0 B0 F1 B1 ...)
/// or zb-h1 (Note [Zero bubble] in lower.cpp). `ep_overlap`: Megatron's
/// --overlap-moe-expert-parallel-comm, whose interleaved schedule runs one
/// more warm-up forward, so that each 1F1B step's forward and backward are
/// independent (get_pp_rank_microbatches in schedules.py).
std::vector<PipeStep> pipeline_order(Schedule schedule, int pp, int virtual_stages, int stage, int micro_batches,
                                     bool ep_overlap = false);


}  // namespace dtsim::sim
