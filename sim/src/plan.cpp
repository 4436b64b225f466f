#include "dtsim/sim/plan.hpp"

#include <string>

#include "dtsim/sim/error.hpp"

namespace dtsim::sim {
namespace {

[[noreturn]] void bad(const PlanSpec& s, const std::string& key, const std::string& message) {
  throw ConfigError(s.origins.of("plan." + key) + ": plan." + key + ": " + message);
}

std::string divisors_up_to(int n) {
  std::string out;
  for (int d = 1; d <= n; ++d) {
    if (n % d == 0) out += (out.empty() ? "" : ", ") + std::to_string(d);
  }
  return out;
}

}  // namespace

int optimizer_state_bytes_per_param(Optimizer o, Precision p) {
  // ZeRO paper (Rajbhandari et al. 2020), section 3.1: mixed-precision Adam
  // keeps an fp32 copy of the parameters, momentum and variance: K = 12.
  // In pure fp32 the parameters are the master copy: momentum + variance = 8.
  // SGD here is momentum SGD: one fp32 buffer (+ fp32 master under mixed precision).
  const bool mixed = p != Precision::kFp32;
  const int moments = o == Optimizer::kSgd ? 4 : 8;
  return moments + (mixed ? 4 : 0);
}

ResolvedPlan resolve(const PlanSpec& s, const Model& model, const ClusterSpec& cluster) {
  ResolvedPlan r;
  r.spec = s;
  const int gpus = cluster.gpus();
  if (s.tp != 1) bad(s, "tp", std::to_string(s.tp) + ": tensor parallelism is not supported yet; valid now: 1");
  if (s.pp != 1) bad(s, "pp", std::to_string(s.pp) + ": pipeline parallelism is not supported yet; valid now: 1");
  r.tp = s.tp;
  r.pp = s.pp;
  r.dp = s.dp == 0 ? gpus / (r.tp * r.pp) : s.dp;
  if (r.dp * r.tp * r.pp > gpus || gpus % (r.dp * r.tp * r.pp) != 0) {
    bad(s, "dp", std::to_string(r.dp) + " does not divide the " + std::to_string(gpus) + " GPUs of " +
                     cluster.name + "; valid: " + divisors_up_to(gpus));
  }

  // Batch: global = micro x accum x dp (DeepSpeed's rule); any two set the third.
  const std::int64_t dp = r.dp;
  std::int64_t mb = s.micro_batch, ga = s.grad_accum, gb = s.global_batch;
  if (gb != 0) {
    if (mb != 0 && ga != 0) {
      if (mb * ga * dp != gb) {
        bad(s, "global_batch", std::to_string(gb) + " != micro_batch x grad_accum x dp = " +
                                   std::to_string(mb) + " x " + std::to_string(ga) + " x " +
                                   std::to_string(dp) + "; give any two of the three");
      }
    } else if (mb != 0) {
      if (gb % (mb * dp) != 0) {
        bad(s, "global_batch", std::to_string(gb) + " is not a multiple of micro_batch x dp = " +
                                   std::to_string(mb * dp));
      }
      ga = gb / (mb * dp);
    } else if (ga != 0) {
      if (gb % (ga * dp) != 0) {
        bad(s, "global_batch", std::to_string(gb) + " is not a multiple of grad_accum x dp = " +
                                   std::to_string(ga * dp));
      }
      mb = gb / (ga * dp);
    } else {
      if (gb % dp != 0) {
        bad(s, "global_batch", std::to_string(gb) + " is not a multiple of dp = " + std::to_string(dp));
      }
      mb = gb / dp;
      ga = 1;
    }
  } else {
    if (mb == 0) mb = 1;
    if (ga == 0) ga = 1;
    gb = mb * ga * dp;
  }
  r.micro_batch = mb;
  r.grad_accum = ga;
  r.global_batch = gb;

  r.seq_len = s.seq_len == 0 ? model.max_seq_len() : s.seq_len;
  if (r.seq_len > model.max_seq_len()) {
    bad(s, "seq_len", std::to_string(r.seq_len) + " exceeds " + model.name() + "'s maximum of " +
                          std::to_string(model.max_seq_len()) + "; valid: 1 to " +
                          std::to_string(model.max_seq_len()));
  }

  r.precision = s.precision;
  if (r.precision == Precision::kBf16 && cluster.device.peak_bf16 <= 0) {
    bad(s, "precision", "bf16 needs bfloat16 support, which " + cluster.device.name +
                            " lacks; valid: fp32, fp16");
  }
  r.optimizer = s.optimizer;

  // FSDP strategies map onto ZeRO stages (PyTorch FSDP docs, ShardingStrategy).
  r.zero_stage = s.zero_stage;
  if (s.fsdp != FsdpMode::kNone) {
    int stage = 0;
    switch (s.fsdp) {
      case FsdpMode::kFullShard: stage = 3; break;
      case FsdpMode::kShardGradOp: stage = 2; break;
      case FsdpMode::kNoShard: stage = 0; break;
      case FsdpMode::kHybridShard: stage = 3; break;
      case FsdpMode::kNone: break;
    }
    if (s.zero_stage != 0 && s.zero_stage != stage) {
      bad(s, "zero_stage", std::to_string(s.zero_stage) + " contradicts fsdp: " + to_string(s.fsdp) +
                               " (stage " + std::to_string(stage) + "); set only one of them");
    }
    r.zero_stage = stage;
    r.fsdp = true;
    r.hybrid_shard = s.fsdp == FsdpMode::kHybridShard;
  }
  r.shard_group = r.zero_stage == 0 ? 1 : r.dp;
  if (r.hybrid_shard) {
    r.shard_group = std::min(r.dp, cluster.gpus_per_node);
    while (r.dp % r.shard_group != 0) --r.shard_group;
  }

  r.offload_optimizer = s.offload_optimizer;
  r.offload_params = s.offload_params;
  if (r.offload_params == Offload::kCpu && r.zero_stage != 3) {
    bad(s, "offload_params", "cpu needs zero_stage 3 (parameters are offloaded only when "
                             "partitioned, as in ZeRO-Infinity); with zero_stage " +
                                 std::to_string(r.zero_stage) + " valid: none");
  }
  if (r.offload_optimizer == Offload::kCpu && r.zero_stage == 0) {
    bad(s, "offload_optimizer", "cpu needs zero_stage 1, 2 or 3 (ZeRO-Offload); with zero_stage 0 valid: none");
  }
  r.recompute = s.recompute;
  r.bucket_bytes = static_cast<Bytes>(s.bucket_mb * 1e6);
  if (r.bucket_bytes < 1) bad(s, "bucket_mb", "must be positive");
  r.overlap = s.overlap;
  return r;
}

}  // namespace dtsim::sim
