#include "dtsim/sim/buckets.hpp"

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

}  // namespace dtsim::sim
