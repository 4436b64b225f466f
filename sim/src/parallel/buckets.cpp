#include "dtsim/sim/buckets.hpp"

#include <algorithm>

namespace dtsim::sim {

Bytes first_bucket_bytes(const ResolvedPlan& plan) {
  return plan.zero_stage == 0 ? kFirstBucketBytes : plan.bucket_bytes;
}

std::vector<int> assign_buckets(const std::vector<Bytes>& bytes, Bytes first_cap, Bytes cap) {
  std::vector<int> out(bytes.size(), -1);
  int bucket = -1;
  Bytes filled = 0, limit = first_cap;
  for (std::size_t i = 0; i < bytes.size(); ++i) {
    if (bytes[i] == 0) continue;
    if (bucket < 0 || filled >= limit) {
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
  for (std::size_t l = 0; l < layers.size(); ++l) root[l] = !layers[l].is_block() && layers[l].params + layers[l].borrowed_params > 0;
  return root;
}

}  // namespace dtsim::sim
