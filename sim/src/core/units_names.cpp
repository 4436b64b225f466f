// Names of the enums shared by reports, traces and errors, and sizes for people.
#include <fmt/format.h>

#include "dtsim/sim/cost.hpp"
#include "dtsim/sim/plan.hpp"
#include "dtsim/sim/task_graph.hpp"

namespace dtsim::sim {

namespace {
constexpr const char* kStreamNames[] = {"compute", "grad comm", "param comm", "d2h", "h2d", "host", "send fwd", "send bwd", "offload", "ep comm"};
}  // namespace

const char* to_string(Stream s) { return kStreamNames[static_cast<int>(s)]; }

std::optional<Stream> stream_from_string(std::string_view name) {
  for (int i = 0; i <= static_cast<int>(Stream::kEpComm); ++i) {
    if (name == kStreamNames[i]) return static_cast<Stream>(i);
  }
  return std::nullopt;
}

const char* to_string(Phase p) {
  switch (p) {
    case Phase::kForward: return "forward";
    case Phase::kBackward: return "backward";
    case Phase::kRecompute: return "recompute";
    case Phase::kOptimizer: return "optimizer";
    case Phase::kComm: return "comm";
    case Phase::kOffload: return "offload";
    case Phase::kBubble: return "bubble";
    case Phase::kOther: return "other";
  }
  return "?";
}

const char* to_string(MemCategory c) {
  switch (c) {
    case MemCategory::kParameters: return "parameters";
    case MemCategory::kGradients: return "gradients";
    case MemCategory::kOptimizer: return "optimizer";
    case MemCategory::kActivations: return "activations";
    case MemCategory::kBuffers: return "buffers";
  }
  return "?";
}

const char* to_string(CollectiveOp op) {
  switch (op) {
    case CollectiveOp::kAllReduce: return "all_reduce";
    case CollectiveOp::kReduceScatter: return "reduce_scatter";
    case CollectiveOp::kAllGather: return "all_gather";
    case CollectiveOp::kBroadcast: return "broadcast";
    case CollectiveOp::kSendRecv: return "send_recv";
    case CollectiveOp::kAllToAll: return "all_to_all";
  }
  return "?";
}

bool parse_collective(const std::string& text, CollectiveOp* out) {
  for (CollectiveOp op : {CollectiveOp::kAllReduce, CollectiveOp::kReduceScatter,
                          CollectiveOp::kAllGather, CollectiveOp::kBroadcast,
                          CollectiveOp::kSendRecv, CollectiveOp::kAllToAll}) {
    if (text == to_string(op)) {
      *out = op;
      return true;
    }
  }
  return false;
}

const char* to_string(Optimizer o) {
  switch (o) {
    case Optimizer::kAdam: return "adam";
    case Optimizer::kAdamW: return "adamw";
    case Optimizer::kSgd:
    case Optimizer::kSgdPlain: return "sgd";
  }
  return "?";
}

const char* to_string(NcclProtocol p) {
  switch (p) {
    case NcclProtocol::kLL: return "LL";
    case NcclProtocol::kLL128: return "LL128";
    case NcclProtocol::kSimple: return "Simple";
  }
  return "?";
}

const char* to_string(Offload o) { return o == Offload::kCpu ? "cpu" : "none"; }

const char* to_string(Recompute r) {
  switch (r) {
    case Recompute::kNone: return "none";
    case Recompute::kSelective: return "selective";
    case Recompute::kFull: return "full";
    case Recompute::kOp: return "op";
  }
  return "?";
}

const char* to_string(FsdpMode f) {
  switch (f) {
    case FsdpMode::kNone: return "none";
    case FsdpMode::kFullShard: return "full_shard";
    case FsdpMode::kShardGradOp: return "shard_grad_op";
    case FsdpMode::kNoShard: return "no_shard";
    case FsdpMode::kHybridShard: return "hybrid_shard";
  }
  return "?";
}

}  // namespace dtsim::sim

namespace dtsim {

std::string human_bytes(double b) {
  // Three significant figures in the largest unit that keeps them under a
  // thousand ("1e+04 GiB" said 9,999 GiB before the larger units).
  constexpr double kTiB = 1024.0 * kGiB, kPiB = 1024.0 * kTiB;
  if (b >= 1000 * kTiB) return fmt::format("{:.3g} PiB", b / kPiB);
  if (b >= 1000.0 * kGiB) return fmt::format("{:.3g} TiB", b / kTiB);
  if (b >= kGiB) return fmt::format("{:.3g} GiB", b / kGiB);
  if (b >= kMiB) return fmt::format("{:.3g} MiB", b / kMiB);
  if (b >= kKiB) return fmt::format("{:.3g} KiB", b / kKiB);
  return fmt::format("{:.0f} B", b);
}

}  // namespace dtsim
