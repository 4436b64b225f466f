#include "dtsim/sim/mesh.hpp"

#include <algorithm>
#include <utility>

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

int Mesh::stage_index(int rank) const {
  int j = 0, scale = 1;
  for (Axis a : order_) {
    if (a == Axis::kPp) continue;
    j += coord(a, rank) * scale;
    scale *= size(a);
  }
  return j;
}

int Mesh::stage_rank(int stage, int index) const {
  int r = stage * stride(Axis::kPp);
  for (Axis a : order_) {
    if (a == Axis::kPp) continue;
    r += (index % size(a)) * stride(a);
    index /= size(a);
  }
  return r;
}

namespace {
/// Members and index stride of an expert-view axis (Note [Expert mesh]).
std::pair<int, int> expert_axis(const Mesh& mesh, int etp, int ep, Axis axis) {
  const int stage_ranks = mesh.ranks() / mesh.size(Axis::kPp);
  DTSIM_ASSERT(etp >= 1 && ep >= 1 && stage_ranks % (etp * ep) == 0, "expert mesh does not fold the stage's ranks");
  const int edp = stage_ranks / (etp * ep);
  const int members = axis == Axis::kTp ? etp : axis == Axis::kEp ? ep : edp;
  const int jstride = axis == Axis::kTp ? 1 : axis == Axis::kEp ? etp : etp * ep;
  return {members, jstride};
}
}  // namespace

std::vector<int> Mesh::expert_group(int etp, int ep, Axis axis, int rank) const {
  const auto [members, jstride] = expert_axis(*this, etp, ep, axis);
  const int j = stage_index(rank);
  const int first = j - ((j / jstride) % members) * jstride;
  std::vector<int> out;
  for (int k = 0; k < members; ++k) out.push_back(stage_rank(coord(Axis::kPp, rank), first + k * jstride));
  return out;
}

int Mesh::expert_coord(int etp, int ep, Axis axis, int rank) const {
  const auto [members, jstride] = expert_axis(*this, etp, ep, axis);
  return (stage_index(rank) / jstride) % members;
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
