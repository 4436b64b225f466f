#pragma once
// The fine-grained offload pass (private to sim/): what each emitter tells
// it of its units (Note [Fine-grained offload] in
// passes/fine_grained_offload.cpp).
#include <memory>
#include <utility>
#include <vector>

#include "lowering/pass.hpp"

namespace dtsim::sim::detail {

/// An emitter's units as the pass sees them.
struct OffloadUnits {
  const std::vector<Layer>& layers;        ///< the model's
  const std::vector<TimeNs>& forward;      ///< per layer, one micro-batch
  const std::vector<TimeNs>& backward;     ///< per layer, one micro-batch
  /// Each unit's layers: (first, count), by StageContext::units index.
  std::vector<std::pair<std::size_t, std::size_t>> units;
  /// The units are one model chunk (a one-stage plan's layers); else each
  /// unit is a chunk of its own (a pipeline's virtual stages).
  bool whole_stage = false;
};

/// Megatron-Core's fine-grained activation offloading; none where the plan
/// names no offload_modules.
std::unique_ptr<StrategyPass> fine_grained_offload_pass(StageContext& ctx, const OffloadUnits& units);

}  // namespace dtsim::sim::detail
