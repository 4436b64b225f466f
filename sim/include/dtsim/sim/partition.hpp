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

/// Each layer of one micro-batch on one rank, priced once: the partition
/// balances these figures and the pipeline lowering reuses them.
struct PricedLayers {
  LayerList layers;  ///< the model's, shared (Note [Layer memo] in model.hpp)
  std::vector<TimeNs> forward, backward;  ///< per layer
  /// Per layer: the share of forward, backward and recompute in memory-bound
  /// kernels (ComputeModel::memory_share; Note [Interference] in engine/executor.cpp).
  std::vector<float> forward_memory, backward_memory, recompute_memory;
  /// Per layer: what backward adds again (full recompute: the forward and
  /// its tensor-parallel collectives; selective: the attention core).
  std::vector<TimeNs> recompute;
  /// Per layer under zb-h1 (else empty): the part of `backward` that is the
  /// weight-gradient pass W (Note [Zero bubble] in lowering/lower.cpp).
  std::vector<TimeNs> weight;
  /// Its tensor-parallel collectives and expert-parallel all-to-alls, serial after it.
  std::vector<TimeNs> tp_forward, tp_backward;
  /// The same as the compute stream runs them: under tp_comm_overlap the
  /// tensor-parallel part only as far as its GEMMs leave it exposed (Note
  /// [TP comm overlap]), as the lowering prices it; the search's bounds.
  std::vector<TimeNs> tp_forward_exposed, tp_backward_exposed;
  /// Per layer under overlap_moe_expert_parallel_comm (else empty): its
  /// expert all-to-alls, forward and backward, which run on a stream of
  /// their own (Note [Expert-parallel overlap] in lowering/layer_stage.cpp).
  std::vector<TimeNs> ep_off_stream;
  /// Per layer: forward + backward + recompute + collectives, what partition() balances.
  std::vector<double> costs() const;
};
PricedLayers price_layers(const Model& model, const ResolvedPlan& plan, const ClusterSpec& cluster,
                          const ComputeModel& compute, const CommModel& comm);

/// The recompute each of `layers` (the model's, in order) runs under
/// `plan`: plan.recompute, except under Megatron's block method
/// (plan.recompute_blocks > 0), where a block past the first
/// recompute_blocks of its model chunk runs none (Note [Block recompute]).
std::vector<Recompute> layer_recomputes(const ResolvedPlan& plan, const std::vector<Layer>& layers);
/// Per layer that full recompute reruns, the index of the first block of
/// its rerun group (itself, but under Megatron's uniform method with
/// plan.recompute_group > 1, where a chunk's blocks go in groups of that
/// many from one checkpoint); -1 for the others (Note [Block recompute]).
std::vector<int> recompute_groups(const ResolvedPlan& plan, const std::vector<Layer>& layers);

/// Fills plan.stage_layers (one entry per model chunk, pp x
/// virtual_stages; one entry holding every layer without a pipeline),
/// keeping a split the plan gave; prices the layers where it must balance.
void partition(ResolvedPlan& plan, const Model& model, const ClusterSpec& cluster, const ComputeModel& compute,
               const CommModel& comm);
/// The same with the layers priced already (price_layers of this plan).
void partition(ResolvedPlan& plan, const Model& model, const PricedLayers& priced);

}  // namespace dtsim::sim
