#pragma once
// Output: the readable table, the JSON document (schema in docs/json.md),
// the Chrome Trace Event timeline, and the nccl-tests-like collective table.

#include <string>
#include <utility>
#include <vector>

#include "dtsim/sim/cost.hpp"
#include "dtsim/sim/predict.hpp"

namespace dtsim::sim {

/// The table a person reads.
std::string format_table(const Prediction& p);
/// The JSON document for machines (docs/json.md).
std::string to_json(const Prediction& p);
/// Chrome Trace Event JSON (Perfetto opens it): a track per rank and stream,
/// memory counter tracks; ts and dur are the simulated integer nanoseconds
/// written exactly in microseconds (Note [Trace timestamps]). Needs a
/// prediction made with keep_graph.
std::string to_chrome_trace(const Prediction& p);

/// One row of `dtsim comm`.
struct CommRow {
  Bytes bytes = 0;
  std::string algorithm;
  std::string protocol;  ///< NCCL's (Note [NCCL protocols]); empty where none is modelled
  TimeNs time = 0;
  double algbw = 0;  ///< bytes / time, GB/s
  double busbw = 0;  ///< algbw x bus_bandwidth_factor, GB/s
  /// Note [A collective's stalls] (cost_profile.cpp): how many stalls one
  /// collective of this size meets on average and how long one lasts; 0
  /// where the profile saw none (or nothing was measured).
  double stalls = 0;
  TimeNs stall = 0;
};
/// Why `op` cannot run over `group` on `cluster` (as `dtsim comm` and the
/// Python comm() ask): "" where it can. The ranks must fill no more nodes
/// than the cluster has; send_recv needs a peer (over more than two ranks
/// it is a ring step, Note [A ring step] in cost/cost_comm.cpp).
std::string comm_group_error(CollectiveOp op, const CommGroup& group, const ClusterSpec& cluster);
/// Predicted time, algbw and busbw for sizes from min_bytes to max_bytes (x2).
std::vector<CommRow> comm_sweep(const CommModel& model, CollectiveOp op, const CommGroup& group,
                                Bytes min_bytes, Bytes max_bytes);
/// The table; `source`, where given, says what priced the rows (a profile's
/// fit or the datasheet links) on a line of its own.
std::string format_comm_table(const std::string& cluster, CollectiveOp op, const CommGroup& group,
                              const std::vector<CommRow>& rows, const std::string& source = {});
/// The same as JSON; `source`, where given, as "cost_source".
std::string comm_to_json(const std::string& cluster, CollectiveOp op, const CommGroup& group,
                         const std::vector<CommRow>& rows, const std::string& source = {});

/// `dtsim list KIND --json` (docs/json.md): the header, "kind" and "items",
/// each (name, description) of `rows` an object.
std::string list_to_json(const std::string& kind, const std::vector<std::pair<std::string, std::string>>& rows);

}  // namespace dtsim::sim
