#pragma once
// DeepSpeed ZeRO-3's parameter coordinator (private to sim/): which
// parameters each module's hook gathers, prefetches and releases over one
// micro-step's trace of module uses. A pure function of the trace and the
// knobs, so the lowering (passes/zero3_modules.cpp) and the tests ask the
// same thing.
//
// Note [ZeRO-3 modules]
// DeepSpeed's stage 3 gathers parameters by module, not by layer
// (deepspeed/runtime/zero/partitioned_param_coordinator.py and
// parameter_offload.py, as of v0.15; read for this note):
// - Each module's pre-forward hook (pre-backward in the backward, and
//   again in a checkpointed block's recomputed forward) fetches the
//   module's own parameters (recurse=False) that are not yet gathered, and
//   waits for them.
// - It then prefetches along the trace it recorded on the first step: it
//   pops the parameters of the modules that follow, gathering those not
//   yet gathered, while the elements it is prefetching are under
//   min(stage3_prefetch_bucket_size, stage3_max_live_parameters less the
//   elements gathered). The check comes before each parameter is added, so
//   the last one may overshoot, and nothing is prefetched once max_live is
//   reached: max_live bounds the prefetch only, never the module in hand.
//   Already-gathered parameters are popped too; their later use is noted,
//   and they are not released before it.
// - A module's post-forward (post-backward) hook releases its parameters,
//   except those the trace uses again before stage3_max_reuse_distance
//   elements of modules have gone by (counted from the next module, each
//   module's parameters counted in full).
// - Parameters of at most stage3_param_persistence_threshold elements
//   (`ds_persist`) stay whole on every rank; they are never gathered or
//   released, and one all-gather after the optimizer step refreshes them.
// Module names and sizes come from the model (Layer::modules); a layer
// without them is one module of one tensor. What dtsim leaves out: the
// parameter-less container modules (they only add steps of 0 elements to
// the trace), and the order of a module's tensors within one coalesced
// gather.
#include <cstdint>
#include <vector>

#include "dtsim/sim/model.hpp"

namespace dtsim::sim::detail {

/// A layer's modules (Layer::modules), or the layer as one module of one
/// tensor where the model does not say (its params and borrowed_params);
/// frozen weights no module describes (Layer::frozen_params) as one frozen
/// module before them.
std::vector<ParamModule> modules_of(const Layer& layer);

/// Elements of the trained parameters DeepSpeed keeps whole on every rank:
/// each tensor of at most `threshold` elements, a tied one counted with its
/// owner (frozen ones are not: no step changes them).
std::int64_t persistent_elements(const std::vector<Layer>& layers, std::int64_t threshold);

/// The coordinator's knobs, in elements (ResolvedPlan's stage3_*).
struct Zero3Knobs {
  std::int64_t prefetch_bucket = 50000000;
  std::int64_t max_live = 1000000000;
  std::int64_t max_reuse = 1000000000;
};

/// What the coordinator does at one step of the trace (one module's pass).
struct Zero3Step {
  std::vector<int> fetch;     ///< gathered by the module's hook and waited for
  std::vector<int> prefetch;  ///< gathered next, ahead of the modules that use them
  std::vector<int> release;   ///< freed as the module's pass ends
  std::int64_t live = 0;      ///< elements gathered while the module runs (after fetch and prefetch)
};

/// Runs the coordinator over one micro-step: `trace[t]` the parameters
/// (ids into `numel`) of the module used at step t, `persist[p]` whether
/// parameter p stays whole. Starts with nothing gathered; parameters still
/// gathered at the end are released with the last step.
std::vector<Zero3Step> coordinate_zero3(const std::vector<std::vector<int>>& trace, const std::vector<std::int64_t>& numel,
                                        const std::vector<bool>& persist, const Zero3Knobs& knobs);

}  // namespace dtsim::sim::detail
