#include "dtsim/sim/mesh.hpp"

#include <algorithm>

#include "dtsim/sim/error.hpp"

namespace dtsim::sim {

namespace {
constexpr std::array<const char*, kAxes> kAxisNames{"tp", "cp", "ep", "pp", "dp"};
}  // namespace

const char* to_string(Axis a) { return kAxisNames[static_cast<int>(a)]; }

std::optional<Axis> axis_from_string(std::string_view name) {
  for (int i = 0; i < kAxes; ++i) {
    if (name == kAxisNames[i]) return static_cast<Axis>(i);
  }
  return std::nullopt;
}

Mesh::Mesh() {
  size_.fill(1);
  stride_.fill(1);
  for (int i = 0; i < kAxes; ++i) order_.push_back(static_cast<Axis>(i));
}

Mesh::Mesh(const std::vector<Axis>& order, const std::array<int, kAxes>& sizes) : size_(sizes), order_(order) {
  for (int i = 0; i < kAxes; ++i) {
    const Axis a = static_cast<Axis>(i);
    DTSIM_ASSERT(size_[i] >= 1, std::string("mesh axis ") + to_string(a) + " has size " + std::to_string(size_[i]));
    if (std::find(order_.begin(), order_.end(), a) == order_.end()) order_.push_back(a);
  }
  DTSIM_ASSERT(order_.size() == static_cast<std::size_t>(kAxes), "mesh order names an axis twice");
  int stride = 1;
  for (Axis a : order_) {
    stride_[static_cast<int>(a)] = stride;
    stride *= size_[static_cast<int>(a)];
  }
  ranks_ = stride;
}

std::vector<int> Mesh::group(Axis a, int rank) const {
  std::vector<int> out;
  out.reserve(static_cast<std::size_t>(size(a)));
  for (int c = 0; c < size(a); ++c) out.push_back(with_coord(rank, a, c));
  return out;
}

std::string Mesh::placement() const {
  std::string out;
  for (Axis a : order_) {
    // The axes a plan names today (tp, pp, dp) always; the others once used.
    if (size(a) == 1 && (a == Axis::kCp || a == Axis::kEp)) continue;
    out += (out.empty() ? "" : ",") + std::string(to_string(a));
  }
  return out;
}

}  // namespace dtsim::sim
