// Note [Caching allocator] (sim/src/memory/caching_allocator.cpp): PyTorch's
// CUDA caching allocator's rules, worked by hand, and its reserved peaks
// over the allocator traces recorded on an H200 (docs/validation-gpu.md).
#include <catch2/catch.hpp>

#include <cstdio>
#include <map>
#include <memory>
#include <string>

#include <nlohmann/json.hpp>

#include "dtsim/sim/allocator.hpp"
#include "dtsim/sim/error.hpp"
#include "test_util.hpp"

using namespace dtsim;
using namespace dtsim::sim;

TEST_CASE("caching allocator: requests round to 512 bytes, segments to the pool's sizes", "[allocator]") {
  CHECK(CachingAllocator::round_size(1) == 512);
  CHECK(CachingAllocator::round_size(512) == 512);
  CHECK(CachingAllocator::round_size(513) == 1024);
  CHECK(CachingAllocator::segment_size(512) == 2 * kMiB);               // small pool
  CHECK(CachingAllocator::segment_size(kMiB) == 2 * kMiB);              // 1 MiB is still small
  CHECK(CachingAllocator::segment_size(kMiB + 512) == 20 * kMiB);       // 1-10 MiB: 20 MiB
  CHECK(CachingAllocator::segment_size(10 * kMiB - 512) == 20 * kMiB);
  CHECK(CachingAllocator::segment_size(10 * kMiB) == 10 * kMiB);        // from 10 MiB: rounded to 2 MiB
  CHECK(CachingAllocator::segment_size(10 * kMiB + 512) == 12 * kMiB);
}

TEST_CASE("caching allocator: small requests share 2 MiB segments, large ones 20 MiB, best fit first", "[allocator]") {
  CachingAllocator a;
  // Four 512 KiB tensors fill one 2 MiB segment; a fifth opens another.
  for (int i = 0; i < 4; ++i) a.allocate(512 * 1024);
  CHECK(a.reserved() == 2 * kMiB);
  CHECK(a.segments() == 1);
  a.allocate(512 * 1024);
  CHECK(a.reserved() == 4 * kMiB);
  // 3 MiB: a 20 MiB segment, split 3 + 17; 17 MiB then fits its rest exactly.
  CachingAllocator b;
  b.allocate(3 * kMiB);
  CHECK(b.reserved() == 20 * kMiB);
  b.allocate(17 * kMiB);
  CHECK(b.reserved() == 20 * kMiB);
  CHECK(b.allocated() == 20 * kMiB);
  // 17.5 MiB would not have fitted the 17: its own segment of 18 MiB.
  CachingAllocator c;
  c.allocate(3 * kMiB);
  c.allocate(17 * kMiB + kMiB / 2);
  CHECK(c.reserved() == 20 * kMiB + 18 * kMiB);
}

TEST_CASE("caching allocator: a large block is split only where over 1 MiB would be left", "[allocator]") {
  CachingAllocator a;
  const auto h = a.allocate(12 * kMiB);  // a segment of 12 MiB
  a.free(h);
  a.allocate(11 * kMiB + kMiB / 2);      // reuses it whole: 0.5 MiB left is not split off
  CHECK(a.allocated() == 12 * kMiB);
  CHECK(a.reserved() == 12 * kMiB);
  CachingAllocator b;
  const auto g = b.allocate(12 * kMiB);
  b.free(g);
  b.allocate(10 * kMiB);  // 2 MiB left: split
  CHECK(b.allocated() == 10 * kMiB);
  b.allocate(2 * kMiB);   // takes the 2 MiB rest
  CHECK(b.reserved() == 12 * kMiB);
}

TEST_CASE("caching allocator: freed blocks merge within a segment, never across segments", "[allocator]") {
  CachingAllocator a;
  const auto x = a.allocate(3 * kMiB);  // segment of 20: 3 + 17
  const auto y = a.allocate(3 * kMiB);  // 3 of the 17: 3 + 3 + 14
  a.free(x);
  a.free(y);                            // 3 + 3 + 14 merge into 20
  a.allocate(20 * kMiB);
  CHECK(a.reserved() == 20 * kMiB);
  CHECK(a.segments() == 1);
  // No free block is left behind by the merges: 3 MiB more opens a segment.
  a.allocate(3 * kMiB);
  CHECK(a.reserved() == 40 * kMiB);
  // Two 10 MiB segments freed cannot hold 20 MiB together: a third segment.
  CachingAllocator b;
  const auto p = b.allocate(10 * kMiB);
  const auto q = b.allocate(10 * kMiB);
  b.free(p);
  b.free(q);
  b.allocate(20 * kMiB);
  CHECK(b.reserved() == 40 * kMiB);
  CHECK(b.allocated() == 20 * kMiB);
  CHECK(b.peak_allocated() == 20 * kMiB);
  CHECK(b.peak_reserved() == 40 * kMiB);
}

TEST_CASE("caching allocator: the smallest free block that fits, not the first", "[allocator]") {
  // A 20 MiB segment holds 4 and 16, a 12 MiB one 12; the 16 and the 12
  // are freed, the 16 at the lower address. 11 MiB takes the 12 (1 MiB
  // left: not split), so 16 still fits the 16: 32 MiB reserved. First fit
  // by address would have split the 16 for the 11 and opened a segment for
  // the 16 (48 MiB).
  CachingAllocator a;
  a.allocate(4 * kMiB);
  const auto sixteen = a.allocate(16 * kMiB);
  const auto twelve = a.allocate(12 * kMiB);
  CHECK(a.reserved() == 32 * kMiB);
  a.free(sixteen);
  a.free(twelve);
  a.allocate(11 * kMiB);
  CHECK(a.allocated() == 16 * kMiB);  // 4 + the whole 12
  a.allocate(16 * kMiB);
  CHECK(a.reserved() == 32 * kMiB);
  // A rest of exactly 1 MiB stays with the block; 512 bytes more is split off.
  CachingAllocator b;
  const auto h = b.allocate(12 * kMiB);
  b.free(h);
  const auto g = b.allocate(11 * kMiB);
  CHECK(b.allocated() == 12 * kMiB);
  b.free(g);
  b.allocate(11 * kMiB - 512);
  CHECK(b.allocated() == 11 * kMiB - 512);
}

TEST_CASE("caching allocator: a double free or a negative size is refused", "[allocator][bad-input]") {
  CachingAllocator a;
  const auto h = a.allocate(4096);
  a.free(h);
  CHECK_THROWS_AS(a.free(h), ConfigError);
  CHECK_THROWS_AS(a.free(12345), ConfigError);
  CHECK_THROWS_AS(a.allocate(-1), ConfigError);
  const auto z = a.allocate(0);  // no block
  CHECK(a.allocated() == 0);
  a.free(z);
  CHECK_THROWS_AS(a.free(z), ConfigError);
}

TEST_CASE("caching allocator: the H200 traces' reserved peaks, replayed (docs/validation-gpu.md)", "[allocator]") {
  // The trace's own segment allocations are the measured reserve: the
  // replay of its allocations and frees must take as much from the driver.
  const std::string path = std::string(DTSIM_SOURCE_DIR) + "/docs/validation-gpu/allocator-trace-h200.json.gz";
  std::unique_ptr<FILE, int (*)(FILE*)> pipe(::popen(("gzip -dc '" + path + "'").c_str(), "r"), ::pclose);
  REQUIRE(pipe);
  std::string text;
  char buf[1 << 16];
  for (std::size_t n; (n = std::fread(buf, 1, sizeof buf, pipe.get())) > 0;) text.append(buf, n);
  const nlohmann::json trace = nlohmann::json::parse(text);
  std::map<std::string, std::pair<Bytes, Bytes>> peaks;  // config -> (measured, replayed)
  for (const auto& run : trace.at("runs")) {
    if (!run.at("alloc_conf").get<std::string>().empty()) continue;  // expandable segments: not modelled
    CachingAllocator a;
    std::map<std::int64_t, CachingAllocator::Handle> live;
    Bytes measured = 0, measured_peak = 0;
    for (const auto& e : run.at("events")) {
      const std::string action = e.at(0).get<std::string>();
      const auto addr = e.at(1).get<std::int64_t>();
      const auto size = e.at(2).get<Bytes>();
      if (action == "alloc") {
        live[addr] = a.allocate(size);
      } else if (action == "free_completed") {
        a.free(live.at(addr));
        live.erase(addr);
      } else if (action == "segment_alloc") {
        measured += size;
        measured_peak = std::max(measured_peak, measured);
      } else if (action == "segment_free") {
        measured -= size;
      }
    }
    // The measured peak is also what torch.cuda.memory_stats reported.
    CHECK(measured_peak == run.at("steps").back().at("reserved_peak").get<Bytes>());
    peaks[run.at("config").get<std::string>()] = {measured_peak, a.peak_reserved()};
  }
  REQUIRE(peaks.size() == 4);
  CHECK(peaks.at("gpt2-b8").second == peaks.at("gpt2-b8").first);                  // 12,106 MiB
  CHECK(peaks.at("gpt2-b8-recompute").second == peaks.at("gpt2-b8-recompute").first);  // 9,946 MiB
  CHECK(peaks.at("gpt2-medium-b4-recompute").second == peaks.at("gpt2-medium-b4-recompute").first);
  // GPT-2 medium without recompute: three segments more than measured
  // (ties broken by the model's addresses, not the driver's).
  const auto [measured, replayed] = peaks.at("gpt2-medium-b4");
  CHECK(replayed >= measured);
  CHECK(static_cast<double>(replayed) <= 1.01 * static_cast<double>(measured));
}
