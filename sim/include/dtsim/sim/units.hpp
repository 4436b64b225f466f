#pragma once
// Units used throughout the simulator. Simulated time is an integer count of
// nanoseconds so runs are reproducible bit for bit; sizes are integer bytes.

#include <cmath>
#include <cstdint>
#include <string>

namespace dtsim {

/// Simulated time or a duration, in nanoseconds.
using TimeNs = std::int64_t;
/// A size in bytes.
using Bytes = std::int64_t;
/// A count of floating-point operations (a multiply-add counts as 2).
using Flops = double;
/// A rate of floating-point operations per second.
using FlopsPerSec = double;
/// A bandwidth in bytes per second.
using BytesPerSec = double;

inline constexpr TimeNs kNsPerUs = 1'000;
inline constexpr TimeNs kNsPerMs = 1'000'000;
inline constexpr TimeNs kNsPerSec = 1'000'000'000;
inline constexpr Bytes kKiB = 1024;
inline constexpr Bytes kMiB = 1024 * kKiB;
inline constexpr Bytes kGiB = 1024 * kMiB;
/// Vendors quote bandwidth and FLOP rates in decimal units.
inline constexpr double kGiga = 1e9;
inline constexpr double kTera = 1e12;

/// The longest simulated time: 2^62 ns, about 146 years, half of what
/// TimeNs holds so that sums of two stay exact (Note [Sizes in 64 bits] in
/// sim/src/engine/executor.cpp).
inline constexpr TimeNs kMaxSimTime = TimeNs{1} << 62;

/// Throws UnsupportedError: a duration of `seconds` is beyond kMaxSimTime.
[[noreturn]] void duration_too_long(double seconds);

/// Seconds (real) to simulated nanoseconds, rounded to the nearest ns; a
/// duration past kMaxSimTime (or not a number) is refused, never wrapped.
inline TimeNs seconds_to_ns(double seconds) {
  const double ns = seconds * 1e9;
  if (!(ns < static_cast<double>(kMaxSimTime))) duration_too_long(seconds);
  return static_cast<TimeNs>(std::llround(ns));
}
/// A size for people: "8 B", "4 KiB", "64 MiB", "1.5 GiB" (3 significant digits).
std::string human_bytes(double bytes);
/// Simulated nanoseconds to seconds.
inline double ns_to_seconds(TimeNs t) { return static_cast<double>(t) * 1e-9; }
/// Time to move `bytes` at `rate`, in ns (at least 0).
inline TimeNs transfer_ns(double bytes, BytesPerSec rate) {
  return bytes <= 0 ? 0 : seconds_to_ns(bytes / rate);
}

}  // namespace dtsim
