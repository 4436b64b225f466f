#pragma once
// Gradient buckets and ZeRO-3's persistent parameters: how PyTorch DDP and
// DeepSpeed group gradients for their collectives, written once for the
// simulator's lowering and the runtime's trainer alike (Note [DDP buckets]
// in lowering/passes/data_parallel.cpp).

#include <cstdint>
#include <vector>

#include "dtsim/sim/model.hpp"
#include "dtsim/sim/plan.hpp"
#include "dtsim/sim/units.hpp"

namespace dtsim::sim {

/// PyTorch DDP's first bucket (dist._DEFAULT_FIRST_BUCKET_BYTES, 1 MiB): the
/// first gradients of backward are reduced early.
constexpr Bytes kFirstBucketBytes = 1024 * 1024;

/// The first bucket's cap: 1 MiB under DDP (ZeRO stage 0), the plan's
/// bucket size under ZeRO, whose buckets are all reduce_bucket_size.
Bytes first_bucket_bytes(const ResolvedPlan& plan);

/// How a bucket closes (Note [Bucket rules] in buckets.cpp).
enum class BucketRule {
  kAtLeastCap,      ///< PyTorch DDP's reducer: once it holds at least its cap
  kBeforeOverflow,  ///< DeepSpeed's ZeRO-2: before a gradient that would take it past its cap
};

/// The rule `plan`'s gradient buckets close by: DeepSpeed's under ZeRO-2
/// (not FSDP), DDP's otherwise (ZeRO-1 steps after DDP-style all-reduces, as
/// ZeroRedundancyOptimizer and Megatron's distributed optimizer do).
BucketRule bucket_rule(const ResolvedPlan& plan);

/// DeepSpeed ZeRO-2's gradient buffers (Note [ZeRO-2's buffers] in
/// sim/src/lowering/passes/data_parallel.cpp): reduce_bucket_size of them,
/// twice with overlap_comm, for the backward of DeepSpeed's ZeRO-2 over
/// more than one rank with contiguous_gradients; else 0.
Bytes zero2_buffer_bytes(const ResolvedPlan& plan);

/// Assigns gradients to buckets in the order backward produces them
/// (reverse layer order): under kAtLeastCap a bucket closes once it holds
/// at least its cap (`first_cap` for the first bucket, `cap` after) and the
/// next gradient opens a new one; under kBeforeOverflow a gradient that
/// would take the open bucket past its cap opens a new one (a gradient
/// larger than the cap is a bucket alone). `bytes[i]`: item i's gradient
/// bytes, in backward order. Returns each item's bucket, -1 for an item of
/// no bytes (a layer without parameters).
std::vector<int> assign_buckets(const std::vector<Bytes>& bytes, Bytes first_cap, Bytes cap,
                                BucketRule rule = BucketRule::kAtLeastCap);

/// ZeRO-3 (not FSDP) keeps the parameters of layers with fewer elements than
/// this whole on every rank (DeepSpeed's stage3_param_persistence_threshold,
/// default 1e5): they are never gathered per layer, and one all-gather after
/// the optimizer step brings their updated shards back (Note [ZeRO]).
constexpr std::int64_t kZero3PersistenceThreshold = 100000;

/// ZeRO-3 (not FSDP) keeps a layer of fewer than kZero3PersistenceThreshold
/// parameters whole on every rank (DeepSpeed's
/// stage3_param_persistence_threshold): never gathered per layer.
bool zero3_keeps_whole(const ResolvedPlan& plan, std::int64_t params);

/// FSDP's root unit (Note [FSDP's root unit] in
/// sim/src/lowering/passes/sharded_parameters.cpp): by layer, whether it
/// is gathered with the root, once a micro-batch, and kept whole until the
/// backward's end. Empty unless `plan` is FSDP at stage 3 over more than
/// one rank with fsdp_wrap: blocks and `layers` has blocks.
std::vector<bool> fsdp_root_layers(const ResolvedPlan& plan, const std::vector<Layer>& layers);

}  // namespace dtsim::sim
