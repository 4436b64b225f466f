#include "dtsim/sim/plan.hpp"

#include <algorithm>
#include <string>
#include <vector>

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

const char* to_string(Schedule s) {
  switch (s) {
    case Schedule::kGpipe: return "gpipe";
    case Schedule::k1f1b: return "1f1b";
    case Schedule::kInterleaved: return "interleaved";
    case Schedule::kNaive: return "naive";
  }
  return "?";
}

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
  r.tp = s.tp;
  if (const std::string why = model.tp_error(s.tp); !why.empty()) bad(s, "tp", std::to_string(s.tp) + ": " + why);
  if (r.tp > cluster.gpus_per_node) {
    bad(s, "tp", std::to_string(r.tp) + " exceeds the " + std::to_string(cluster.gpus_per_node) +
                     " GPUs of a node (tensor parallelism needs the intra-node link); valid: " +
                     divisors_up_to(cluster.gpus_per_node));
  }
  r.pp = s.pp;
  r.schedule = s.schedule;
  if (s.model_parallel > 0) {
    if (s.pp != 1 && s.pp != s.model_parallel) {
      bad(s, "model_parallel", std::to_string(s.model_parallel) + " contradicts pp: " + std::to_string(s.pp) +
                                   "; model_parallel is the naive split of pp stages without micro-batching, set only one");
    }
    r.pp = s.model_parallel;
    r.schedule = Schedule::kNaive;
  }
  if (r.pp * r.tp > gpus || gpus % (r.pp * r.tp) != 0) {
    bad(s, r.pp > 1 ? (s.model_parallel > 0 ? "model_parallel" : "pp") : "tp",
        "tp x pp = " + std::to_string(r.tp * r.pp) + " does not divide the " + std::to_string(gpus) + " GPUs of " +
            cluster.name + "; valid products: " + divisors_up_to(gpus));
  }
  r.dp = s.dp == 0 ? gpus / (r.tp * r.pp) : s.dp;
  if (r.dp * r.tp * r.pp > gpus || gpus % (r.dp * r.tp * r.pp) != 0) {
    const std::string what = r.tp * r.pp == 1 ? std::to_string(r.dp)
                                              : std::to_string(r.dp) + " x tp x pp = " + std::to_string(r.dp * r.tp * r.pp);
    bad(s, "dp", what + " does not divide the " + std::to_string(gpus) + " GPUs of " + cluster.name + "; valid: " +
                     divisors_up_to(gpus / (r.tp * r.pp)));
  }
  r.sequence_parallel = s.sequence_parallel;
  if (r.sequence_parallel && r.tp == 1) bad(s, "sequence_parallel", "true needs tp > 1 (it splits what tensor parallelism replicates)");

  // Placement: ranks are numbered with the first dimension innermost.
  {
    std::vector<std::string> dims;
    std::string cur;
    for (char ch : s.placement + ",") {
      if (ch == ',') {
        dims.push_back(cur);
        cur.clear();
      } else if (ch != ' ') {
        cur += ch;
      }
    }
    auto sorted = dims;
    std::sort(sorted.begin(), sorted.end());
    if (sorted != std::vector<std::string>{"dp", "pp", "tp"}) {
      bad(s, "placement", "'" + s.placement + "' is not an order of tp, pp and dp; valid e.g. tp,pp,dp (the default) or tp,dp,pp");
    }
    std::vector<Axis> order;
    for (const auto& d : dims) order.push_back(*axis_from_string(d));
    std::array<int, kAxes> sizes{};
    sizes.fill(1);
    sizes[static_cast<int>(Axis::kTp)] = r.tp;
    sizes[static_cast<int>(Axis::kPp)] = r.pp;
    sizes[static_cast<int>(Axis::kDp)] = r.dp;
    r.mesh = Mesh(order, sizes);
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

  // Pipelines: chunks, schedules and the layers of each stage.
  r.virtual_stages = 1;
  if (r.pp > 1 && r.schedule == Schedule::kInterleaved) {
    r.virtual_stages = s.virtual_stages == 0 ? 2 : s.virtual_stages;
    if (r.virtual_stages < 2) bad(s, "virtual_stages", std::to_string(r.virtual_stages) + ": interleaving needs at least 2 model chunks per GPU");
    if (r.grad_accum % r.pp != 0) {
      bad(s, "micro_batches", std::to_string(r.grad_accum) + " micro-batches: the interleaved schedule needs a multiple of pp = " +
                                  std::to_string(r.pp) + " (as Megatron-LM)");
    }
  } else if (s.virtual_stages > 1) {
    bad(s, "virtual_stages", std::to_string(s.virtual_stages) + " needs schedule: interleaved and pp > 1");
  }
  if (r.pp > 1 || !s.stage_layers.empty()) {
    WorkloadShape one;
    const auto layers = model.layers(one);
    const int n = static_cast<int>(layers.size());
    const int chunks = r.pp * r.virtual_stages;
    if (chunks > n) {
      bad(s, r.virtual_stages > 1 ? "virtual_stages" : "pp",
          std::to_string(chunks) + " model chunks for the " + std::to_string(n) + " layers of " + model.name() +
              "; every chunk needs a layer, valid pp x virtual_stages: 1 to " + std::to_string(n));
    }
    if (!s.stage_layers.empty()) {
      if (static_cast<int>(s.stage_layers.size()) != chunks) {
        bad(s, "stage_layers", std::to_string(s.stage_layers.size()) + " entries; need one per model chunk: pp x virtual_stages = " +
                                   std::to_string(chunks));
      }
      int sum = 0;
      for (int c : s.stage_layers) {
        if (c < 1) bad(s, "stage_layers", "every stage needs at least one layer");
        sum += c;
      }
      int first_block = -1, last_block = -1;
      for (int i = 0; i < n; ++i) {
        if (layers[i].is_block()) {
          if (first_block < 0) first_block = i;
          last_block = i;
        }
      }
      const int blocks = first_block < 0 ? 0 : last_block - first_block + 1;
      r.stage_layers = s.stage_layers;
      if (sum == blocks && blocks != n) {
        // Counted in blocks: the embedding joins the first stage, the head the last.
        r.stage_layers.front() += first_block;
        r.stage_layers.back() += n - 1 - last_block;
      } else if (sum != n) {
        bad(s, "stage_layers", "the entries sum to " + std::to_string(sum) + "; valid: " + std::to_string(blocks) +
                                   " (the blocks of " + model.name() + ") or " + std::to_string(n) + " (all its layers)");
      }
    }
  }
  if (r.pp > 1 && r.grad_accum < 1) r.grad_accum = 1;

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
  if (r.pp > 1 && r.zero_stage > 1) {
    bad(s, r.spec.fsdp != FsdpMode::kNone ? "fsdp" : "zero_stage",
        "stage " + std::to_string(r.zero_stage) + " with pp = " + std::to_string(r.pp) +
            ": sharding gradients or parameters breaks the pipeline's gradient accumulation (DeepSpeed refuses it too); valid with pp > 1: zero_stage 0 or 1");
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
  if (r.pp > 1 && (r.offload_optimizer == Offload::kCpu)) {
    bad(s, "offload_optimizer", "cpu with pp > 1 is not modelled; valid with pipelines: none");
  }
  r.recompute = s.recompute;
  r.bucket_bytes = static_cast<Bytes>(s.bucket_mb * 1e6);
  if (r.bucket_bytes < 1) bad(s, "bucket_mb", "must be positive");
  r.overlap = s.overlap;
  return r;
}

}  // namespace dtsim::sim
