#include "dtsim/sim/allocator.hpp"

#include <algorithm>
#include <limits>
#include <map>
#include <string>

#include "dtsim/sim/error.hpp"

namespace dtsim::sim {

// Note [Caching allocator]
// PyTorch's CUDA caching allocator (c10/cuda/CUDACachingAllocator.cpp, its
// default settings) as it places a sequence of allocations and frees on one
// stream:
//  - a request is rounded up to a multiple of 512 bytes (kMinBlockSize);
//    up to 1 MiB (kSmallSize) it is served from the small pool, else from
//    the large one;
//  - from its pool, the smallest free block at least that large, the
//    lowest address among equals (BlockComparatorSize);
//  - none: a new segment from the driver (cudaMalloc), of 2 MiB for the
//    small pool (kSmallBuffer), 20 MiB for requests under 10 MiB
//    (kLargeBuffer, kMinLargeAlloc), else the request rounded up to 2 MiB
//    (kRoundLarge); segments are never given back (no empty_cache, no
//    out-of-memory retry here);
//  - a block larger than the request is split, the rest a free block
//    after it, where the rest is at least 512 bytes in the small pool and
//    over 1 MiB in the large one (should_split; max_split_size unset);
//  - a freed block merges with its free neighbours in its segment.
// So `reserved` is what the allocator holds from the driver, and what
// nvidia-smi shows beside the CUDA context; it exceeds `allocated` by the
// segments' free blocks that no later request could use. Replayed over the
// allocator's own traces of GPT-2 training steps on an H200 (issue 28,
// docs/validation-gpu.md), it gives the reserved peaks measured: exactly
// for three of the four traces, 72 MiB (0.6%) over for the fourth.
// Not modelled: expandable_segments (pages mapped into one growing
// segment), max_split_size_mb, roundup_power2_divisions, several streams
// (a block freed on one stream is not reused on another until its events
// complete), and CUDA graphs' private pools.

namespace {
constexpr Bytes kMinBlockSize = 512;
constexpr Bytes kSmallSize = Bytes{1} << 20;
constexpr Bytes kSmallBuffer = Bytes{2} << 20;
constexpr Bytes kLargeBuffer = Bytes{20} << 20;
constexpr Bytes kMinLargeAlloc = Bytes{10} << 20;
constexpr Bytes kRoundLarge = Bytes{2} << 20;
/// Model addresses: each segment starts this far beyond the last one's end.
constexpr CachingAllocator::Handle kSegmentGap = CachingAllocator::Handle{1} << 40;
}  // namespace

Bytes CachingAllocator::round_size(Bytes size) {
  if (size < kMinBlockSize) return kMinBlockSize;
  return (size + kMinBlockSize - 1) / kMinBlockSize * kMinBlockSize;
}

Bytes CachingAllocator::segment_size(Bytes size) {
  if (size <= kSmallSize) return kSmallBuffer;
  if (size < kMinLargeAlloc) return kLargeBuffer;
  return (size + kRoundLarge - 1) / kRoundLarge * kRoundLarge;
}

void CachingAllocator::insert_free(Handle b) {
  const Block& k = blocks_.at(b);
  (k.small ? free_small_ : free_large_).insert({k.size, b});
}

void CachingAllocator::erase_free(Handle b) {
  const Block& k = blocks_.at(b);
  (k.small ? free_small_ : free_large_).erase({k.size, b});
}

CachingAllocator::Handle CachingAllocator::allocate(Bytes request) {
  if (request < 0) throw ConfigError("caching allocator: a request of " + std::to_string(request) + " bytes");
  if (request == 0) {
    empty_.insert(next_empty_);
    return next_empty_--;
  }
  const Bytes size = round_size(request);
  const bool small = size <= kSmallSize;
  auto& pool = small ? free_small_ : free_large_;
  Handle at = 0;
  Bytes found = 0;
  if (auto it = pool.lower_bound({size, std::numeric_limits<Handle>::min()}); it != pool.end()) {
    found = it->first;
    at = it->second;
    pool.erase(it);
  } else {
    found = segment_size(size);
    at = next_segment_;
    next_segment_ += found + kSegmentGap;
    blocks_[at] = Block{found, small, true, -1, -1};
    reserved_ += found;
    ++segments_;
    peak_reserved_ = std::max(peak_reserved_, reserved_);
  }
  Block& b = blocks_.at(at);  // std::map: inserting the tail below keeps it valid
  const Bytes rest = found - size;
  if (small ? rest >= kMinBlockSize : rest > kSmallSize) {
    const Handle tail = at + size;
    blocks_[tail] = Block{rest, small, true, at, b.next};
    if (b.next >= 0) blocks_.at(b.next).prev = tail;
    b.next = tail;
    b.size = size;
    insert_free(tail);
  }
  b.free = false;
  allocated_ += b.size;
  peak_allocated_ = std::max(peak_allocated_, allocated_);
  return at;
}

void CachingAllocator::free(Handle h) {
  if (h < 0) {
    if (empty_.erase(h) == 0) throw ConfigError("caching allocator: free of a handle not allocated");
    return;
  }
  auto it = blocks_.find(h);
  if (it == blocks_.end() || it->second.free) throw ConfigError("caching allocator: free of a handle not allocated");
  Block* b = &it->second;
  b->free = true;
  allocated_ -= b->size;
  // Merge with a free successor, then a free predecessor absorbs it.
  if (b->next >= 0 && blocks_.at(b->next).free) {
    const Handle n = b->next;
    erase_free(n);
    const Block next = blocks_.at(n);
    b->size += next.size;
    b->next = next.next;
    if (next.next >= 0) blocks_.at(next.next).prev = h;
    blocks_.erase(n);
  }
  if (b->prev >= 0 && blocks_.at(b->prev).free) {
    const Handle p = b->prev;
    erase_free(p);
    Block& prev = blocks_.at(p);
    prev.size += b->size;
    prev.next = b->next;
    if (b->next >= 0) blocks_.at(b->next).prev = p;
    blocks_.erase(h);
    h = p;
  }
  insert_free(h);
}

}  // namespace dtsim::sim
