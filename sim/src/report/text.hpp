#pragma once
// Figures as the reports print them (report.cpp's tables, predict.cpp's advice).

#include <string>

#include <fmt/format.h>

#include "dtsim/sim/units.hpp"

namespace dtsim::sim::detail {

/// Bytes in GiB, two decimals: "80.00 GiB".
inline std::string gib(Bytes b) { return fmt::format("{:.2f} GiB", static_cast<double>(b) / static_cast<double>(kGiB)); }

}  // namespace dtsim::sim::detail
