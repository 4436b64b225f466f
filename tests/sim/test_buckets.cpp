#include <catch2/catch.hpp>

#include "dtsim/sim/buckets.hpp"

using namespace dtsim;
using namespace dtsim::sim;

TEST_CASE("gradient buckets as DDP's reducer fills them: 1 MiB first, then the cap", "[buckets]") {
  // Backward order, in MB (1e6 bytes); caps 1 MiB then 25 MB. The first
  // bucket closes once it holds >= 1 MiB: 0.6 + 0.6 = 1.2 MB. The second
  // then takes 10 + 10 + 10 = 30 MB (>= 25 closes it); a layer without
  // parameters (0) joins none; the last 5 + 1 open a third.
  const Bytes MB = 1000 * 1000;
  const std::vector<Bytes> bytes{6 * MB / 10, 6 * MB / 10, 10 * MB, 10 * MB, 0, 10 * MB, 5 * MB, 1 * MB};
  CHECK(assign_buckets(bytes, kFirstBucketBytes, 25 * MB) == std::vector<int>{0, 0, 1, 1, -1, 1, 2, 2});
  // Under ZeRO every bucket is reduce_bucket_size: 0.6 + 0.6 + 10 + 10 + 10 >= 25.
  CHECK(assign_buckets(bytes, 25 * MB, 25 * MB) == std::vector<int>{0, 0, 0, 0, -1, 0, 1, 1});
  CHECK(assign_buckets({}, kFirstBucketBytes, 25 * MB).empty());
}

TEST_CASE("DeepSpeed's ZeRO-2 reduces a bucket before a gradient would overflow it (Note [Bucket rules])", "[buckets]") {
  // The same gradients as above, in MB, every cap 25 MB. Before overflow:
  // 0.6 + 0.6 + 10 + 10 = 21.2 and 10 more would be 31.2 > 25, so the
  // second 10 MB after the empty layer opens bucket 1: 10 + 5 + 1 = 16.
  const Bytes MB = 1000 * 1000;
  const std::vector<Bytes> bytes{6 * MB / 10, 6 * MB / 10, 10 * MB, 10 * MB, 0, 10 * MB, 5 * MB, 1 * MB};
  CHECK(assign_buckets(bytes, 25 * MB, 25 * MB, BucketRule::kBeforeOverflow) == std::vector<int>{0, 0, 0, 0, -1, 1, 1, 1});
  // A gradient larger than the cap is a bucket alone (DeepSpeed's
  // extra_large_param_to_reduce), and the next opens another: 30 | 1 + 24 | 1.
  CHECK(assign_buckets({30 * MB, 1 * MB, 24 * MB, 1 * MB}, 25 * MB, 25 * MB, BucketRule::kBeforeOverflow) ==
        std::vector<int>{0, 1, 1, 2});
  // Exactly full is not over: 25 | 25.
  CHECK(assign_buckets({20 * MB, 5 * MB, 25 * MB}, 25 * MB, 25 * MB, BucketRule::kBeforeOverflow) == std::vector<int>{0, 0, 1});
  // Which plans close buckets so: DeepSpeed's ZeRO-2, not FSDP's
  // SHARD_GRAD_OP, ZeRO-1 or DDP.
  ResolvedPlan p;
  p.zero_stage = 2;
  CHECK(bucket_rule(p) == BucketRule::kBeforeOverflow);
  p.fsdp = true;
  CHECK(bucket_rule(p) == BucketRule::kAtLeastCap);
  p.fsdp = false;
  for (int stage : {0, 1, 3}) {
    p.zero_stage = stage;
    CHECK(bucket_rule(p) == BucketRule::kAtLeastCap);
  }
}

TEST_CASE("the first bucket's cap follows the framework", "[buckets]") {
  ResolvedPlan p;
  p.bucket_bytes = 25000000;
  p.zero_stage = 0;
  CHECK(first_bucket_bytes(p) == 1048576);  // dist._DEFAULT_FIRST_BUCKET_BYTES
  p.zero_stage = 1;
  CHECK(first_bucket_bytes(p) == 25000000);
}

TEST_CASE("ZeRO-3 keeps layers under 1e5 parameters whole; FSDP gathers every unit", "[buckets]") {
  ResolvedPlan p;
  p.zero_stage = 3;
  p.shard_group = 4;
  CHECK(zero3_keeps_whole(p, 99999));
  CHECK_FALSE(zero3_keeps_whole(p, 100000));
  p.fsdp = true;
  CHECK_FALSE(zero3_keeps_whole(p, 10));
  p.fsdp = false;
  p.shard_group = 1;  // nothing is sharded over one rank
  CHECK_FALSE(zero3_keeps_whole(p, 10));
  p.shard_group = 4;
  p.zero_stage = 2;
  CHECK_FALSE(zero3_keeps_whole(p, 10));
}
