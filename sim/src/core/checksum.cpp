#include "dtsim/sim/checksum.hpp"

#include <array>

namespace dtsim::sim {
namespace {

/// The byte-at-a-time table of the reflected polynomial 0xC96C5795D7870F42.
constexpr std::array<std::uint64_t, 256> make_table() {
  std::array<std::uint64_t, 256> t{};
  for (std::uint64_t i = 0; i < 256; ++i) {
    std::uint64_t c = i;
    for (int k = 0; k < 8; ++k) c = (c & 1) != 0 ? (c >> 1) ^ 0xC96C5795D7870F42ULL : c >> 1;
    t[i] = c;
  }
  return t;
}
constexpr std::array<std::uint64_t, 256> kTable = make_table();

}  // namespace

std::uint64_t crc64_update(std::uint64_t state, const void* data, std::size_t size) {
  const auto* p = static_cast<const unsigned char*>(data);
  for (std::size_t i = 0; i < size; ++i) state = kTable[(state ^ p[i]) & 0xFF] ^ (state >> 8);
  return state;
}

}  // namespace dtsim::sim
