#pragma once
// The partition step, between resolve and lowering: which layers each
// pipeline stage (each model chunk, with virtual stages) holds. As the plan
// gives them (stage_layers), or balanced by their priced cost. After it the
// plan is complete: lowering and the runtime read the split from it, and
// nothing needs a simulation to learn it.

#include <vector>

#include "dtsim/sim/cluster.hpp"
#include "dtsim/sim/cost.hpp"
#include "dtsim/sim/model.hpp"
#include "dtsim/sim/plan.hpp"

namespace dtsim::sim {

/// Splits layers with these costs into `chunks` contiguous non-empty groups
/// minimising the costliest group; returns the layer count of each.
std::vector<int> balance_layers(const std::vector<double>& costs, int chunks);

/// The time one micro-batch spends in each layer on one rank (forward,
/// backward, recompute and tensor-parallel collectives), as partition()
/// balances it.
std::vector<double> layer_costs(const Model& model, const ResolvedPlan& plan, const ClusterSpec& cluster,
                                const ComputeModel& compute, const CommModel& comm);

/// Fills plan.stage_layers (one entry per model chunk, pp x
/// virtual_stages; one entry holding every layer without a pipeline),
/// keeping a split the plan gave.
void partition(ResolvedPlan& plan, const Model& model, const ClusterSpec& cluster, const ComputeModel& compute,
               const CommModel& comm);

}  // namespace dtsim::sim
