#pragma once
// Checksums for the files dtsim keeps (calibration profiles): CRC-64/XZ,
// the check xz and the CRC catalogue name CRC-64/XZ (ECMA-182 polynomial
// 0x42F0E1EBA9EA3693, reflected, initial value and final XOR all ones).

#include <cstddef>
#include <cstdint>

namespace dtsim::sim {

/// CRC-64/XZ, computed in pieces: start with kCrc64Start, feed each piece to
/// crc64_update, and finish with crc64_final. crc64("123456789") is
/// 0x995DC9BBDF1939FA (the catalogue's check value).
inline constexpr std::uint64_t kCrc64Start = ~std::uint64_t{0};
std::uint64_t crc64_update(std::uint64_t state, const void* data, std::size_t size);
inline std::uint64_t crc64_final(std::uint64_t state) { return ~state; }
/// CRC-64/XZ of one buffer.
inline std::uint64_t crc64(const void* data, std::size_t size) { return crc64_final(crc64_update(kCrc64Start, data, size)); }

}  // namespace dtsim::sim
