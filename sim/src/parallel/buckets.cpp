#include "dtsim/sim/buckets.hpp"

#include <algorithm>

namespace dtsim::sim {

Bytes first_bucket_bytes(const ResolvedPlan& plan) {
  return plan.zero_stage == 0 ? kFirstBucketBytes : plan.bucket_bytes;
}

// Note [Bucket rules]
// PyTorch DDP's reducer (reducer.cpp, compute_bucket_assignment_by_size)
// adds a gradient to the open bucket and closes the bucket once it holds at
// least its cap, so a bucket ends up to one gradient over it. DeepSpeed's
// ZeRO-1/2 checks before it adds: `if self.elements_in_ipg_bucket +
// param.numel() > self.reduce_bucket_size: self.reduce_ipg_grads()`
// (stage_1_and_2.py, reduce_independent_p_g_buckets_and_remove_grads), so a
// bucket stays within reduce_bucket_size, which is what lets it copy each
// gradient into a buffer of that many elements (Note [ZeRO-2's buffers] in
// lowering/passes/data_parallel.cpp); a gradient larger than the buffer is
// reduced alone (its extra_large_param_to_reduce). DeepSpeed decides per
// parameter tensor, dtsim per layer (the unit of its backward tasks, and of
// the runtime's buckets): a layer that would overflow the bucket opens the
// next one, where DeepSpeed would put its first tensors in the bucket
// before. dtsim's ZeRO-2 is DeepSpeed's (FSDP's SHARD_GRAD_OP keeps DDP's
// rule, as its reducer is PyTorch's); its ZeRO-1 reduces as DDP does and
// steps a shard, as PyTorch's ZeroRedundancyOptimizer and Megatron-LM's
// distributed optimizer do.
BucketRule bucket_rule(const ResolvedPlan& plan) {
  return plan.zero_stage == 2 && !plan.fsdp ? BucketRule::kBeforeOverflow : BucketRule::kAtLeastCap;
}

Bytes zero2_buffer_bytes(const ResolvedPlan& plan) {
  const bool deepspeed = plan.zero_stage == 2 && !plan.fsdp && plan.shard_group > 1;
  return deepspeed && plan.contiguous_gradients ? (plan.overlap ? 2 : 1) * plan.bucket_bytes : 0;
}

std::vector<int> assign_buckets(const std::vector<Bytes>& bytes, Bytes first_cap, Bytes cap, BucketRule rule) {
  std::vector<int> out(bytes.size(), -1);
  int bucket = -1;
  Bytes filled = 0, limit = first_cap;
  for (std::size_t i = 0; i < bytes.size(); ++i) {
    if (bytes[i] == 0) continue;
    const bool full = rule == BucketRule::kAtLeastCap ? filled >= limit : filled > 0 && filled + bytes[i] > limit;
    if (bucket < 0 || full) {
      if (bucket >= 0) limit = cap;
      ++bucket;
      filled = 0;
    }
    out[i] = bucket;
    filled += bytes[i];
  }
  return out;
}

bool zero3_keeps_whole(const ResolvedPlan& plan, std::int64_t params) {
  return plan.zero_stage == 3 && plan.shard_group > 1 && !plan.fsdp && params < kZero3PersistenceThreshold;
}

std::vector<bool> fsdp_root_layers(const ResolvedPlan& plan, const std::vector<Layer>& layers) {
  const bool blocks = std::any_of(layers.begin(), layers.end(), [](const Layer& l) { return l.is_block(); });
  if (!plan.fsdp || plan.zero_stage != 3 || plan.shard_group <= 1 || plan.fsdp_wrap != FsdpWrap::kBlocks || !blocks) return {};
  std::vector<bool> root(layers.size(), false);
  // A fine-tune's frozen weights are in their units too (Note [Frozen weights
  // under FSDP] in sim/src/lowering/passes/sharded_parameters.cpp).
  for (std::size_t l = 0; l < layers.size(); ++l) {
    root[l] = !layers[l].is_block() && layers[l].params + layers[l].borrowed_params + layers[l].frozen_params > 0;
  }
  return root;
}

}  // namespace dtsim::sim
