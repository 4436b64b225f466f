#pragma once
// Lowering: (model, plan, cluster) -> the per-rank task graph of one training
// iteration, as PyTorch DDP, DeepSpeed ZeRO and PyTorch FSDP schedule it.

#include "dtsim/sim/cost.hpp"
#include "dtsim/sim/model.hpp"
#include "dtsim/sim/plan.hpp"
#include "dtsim/sim/task_graph.hpp"

namespace dtsim::sim {

/// The cost models lowering prices tasks with.
struct CostModels {
  const ComputeModel* compute = nullptr;
  const CommModel* comm = nullptr;
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
ModelStates model_states(const ResolvedPlan& plan, std::int64_t parameters);

/// Builds the task graph of one iteration. Only ranks that differ are
/// simulated: data-parallel replicas collapse into one SimRank.
TaskGraph lower(const Model& model, const ResolvedPlan& plan, const ClusterSpec& cluster,
                const CostModels& costs);

}  // namespace dtsim::sim
