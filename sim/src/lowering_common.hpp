#pragma once
// Pieces both lowerings share (private to sim/): where a parallel dimension's
// groups sit on the cluster, the summed cost of a layer's tensor-parallel
// collectives, and the optimizer step's time.

#include <algorithm>
#include <vector>

#include "dtsim/sim/cluster.hpp"
#include "dtsim/sim/cost.hpp"
#include "dtsim/sim/model.hpp"
#include "dtsim/sim/plan.hpp"

namespace dtsim::sim::detail {

/// The communicator of one parallel dimension of `size` ranks whose members
/// are `stride` ranks apart (ResolvedPlan's strides), on nodes of `per_node`
/// GPUs numbered consecutively.
inline CommGroup dim_group(int size, int stride, int per_node) {
  CommGroup g;
  g.ranks = size;
  if (size <= 1) return g;
  g.ranks_per_node = stride >= per_node ? 1 : std::min(size, per_node / stride);
  // Groups interleaved on a node cross its NICs at once.
  g.groups_per_node = std::max(1, std::min(stride, per_node));
  return g;
}

/// Sum of `count` x cost of each collective, as one flow: latencies add,
/// wire bytes add, and the rate is chosen so the total time is exact when
/// nothing else shares the link.
inline CollectiveCost sum_costs(const std::vector<LayerComm>& comms, const CommGroup& group, const CommModel& model) {
  CollectiveCost out;
  double flow_seconds = 0;
  for (const auto& c : comms) {
    const CollectiveCost one = model.collective(c.op, c.bytes, group);
    if (out.algorithm.empty()) {
      out.algorithm = one.algorithm;
      out.link = one.link;
    }
    out.latency += one.latency * c.count;
    out.wire_bytes += one.wire_bytes * c.count;
    if (one.rate > 0) flow_seconds += one.wire_bytes * c.count / one.rate;
  }
  out.rate = flow_seconds > 0 ? out.wire_bytes / flow_seconds : 1e30;
  return out;
}

/// Bytes the optimizer reads and writes per parameter in one step
/// (multi-tensor Adam: read grad, master, m, v; write master, m, v, and the
/// working copy under mixed precision; momentum SGD drops v).
inline double update_bytes_per_param(Optimizer o, Precision p) {
  const bool mixed = p != Precision::kFp32;
  const double states = o == Optimizer::kSgd ? 1 : 2;  // momentum (+ variance)
  const double grad = mixed ? 2 : 4;
  // read: grad + master + states; write: master + states (+ fp16 copy)
  return grad + 4 + 4 * states + 4 + 4 * states + (mixed ? 2 : 0);
}

/// A device optimizer step over `params` parameters in `tensors` launches:
/// memory-bound at the device's achievable bandwidth.
inline TimeNs device_step_time(double params, int tensors, const ResolvedPlan& plan, const DeviceSpec& d) {
  const double bytes = params * update_bytes_per_param(plan.optimizer, plan.precision);
  return seconds_to_ns(bytes / (d.memory_bandwidth * d.memory_efficiency)) + static_cast<TimeNs>(tensors) * d.kernel_launch;
}

}  // namespace dtsim::sim::detail
