#pragma once
// A model of PyTorch's CUDA caching allocator: what a sequence of tensor
// allocations and frees holds from the driver (reserved) beside what the
// tensors take (allocated). Note [Caching allocator] in
// sim/src/memory/caching_allocator.cpp gives the rules and where they come
// from; docs/validation-gpu.md how the model was checked against traces of
// real training steps.

#include <cstdint>
#include <map>
#include <set>
#include <utility>
#include <vector>

#include "dtsim/sim/units.hpp"

namespace dtsim::sim {

class CachingAllocator {
 public:
  /// A live allocation; what free() takes back.
  using Handle = std::int64_t;

  /// Allocates `size` bytes (0 allowed, as torch.empty(0) on a GPU takes
  /// none: the handle is then a no-op to free). Throws ConfigError on a
  /// negative size.
  Handle allocate(Bytes size);
  /// Frees a live allocation; throws ConfigError on a handle that is not.
  void free(Handle h);

  Bytes allocated() const { return allocated_; }        ///< blocks handed out, rounded as the allocator rounds them
  Bytes reserved() const { return reserved_; }          ///< segments taken from the driver
  Bytes peak_allocated() const { return peak_allocated_; }
  Bytes peak_reserved() const { return peak_reserved_; }
  int segments() const { return segments_; }           ///< segments taken so far (none is given back)

  /// The size a request of `size` bytes is rounded to (512-byte multiples).
  static Bytes round_size(Bytes size);
  /// The segment the driver is asked for when no cached block fits a
  /// rounded request of `size`: 2 MiB for the small pool, 20 MiB up to 10
  /// MiB, else `size` rounded up to 2 MiB.
  static Bytes segment_size(Bytes size);

 private:
  struct Block {
    Bytes size = 0;
    bool small = false;
    bool free = true;
    Handle prev = -1, next = -1;  ///< neighbours in the same segment, by address
  };
  void insert_free(Handle b);
  void erase_free(Handle b);

  /// Blocks by their (model) address: a segment's blocks are contiguous.
  std::map<Handle, Block> blocks_;
  /// Free blocks of each pool by (size, address): best fit, lowest address.
  std::set<std::pair<Bytes, Handle>> free_small_, free_large_;
  Handle next_segment_ = 0;
  Bytes allocated_ = 0, reserved_ = 0, peak_allocated_ = 0, peak_reserved_ = 0;
  int segments_ = 0;
  /// Handles of zero-byte allocations (no block).
  std::set<Handle> empty_;
  Handle next_empty_ = -2;
};

}  // namespace dtsim::sim
