#pragma once
// The device mesh: the named axes a plan spreads a model over, each with its
// size and its rank stride, built once from the plan's placement. Process
// groups are asked of the mesh by axis (PyTorch's DeviceMesh, mesh["tp"];
// Megatron-Core's parallel_state), never computed from strides where they
// are used. Context and expert parallelism are axes already, of size 1 until
// a plan sets them.

#include <array>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

namespace dtsim::sim {

/// A parallel dimension. Every collective names the one it runs over.
enum class Axis { kTp, kCp, kEp, kPp, kDp };
constexpr int kAxes = 5;

/// "tp", "cp", "ep", "pp", "dp".
const char* to_string(Axis a);
/// The axis named `name`, or nothing.
std::optional<Axis> axis_from_string(std::string_view name);

/// Ranks laid out over named axes. A rank's coordinate on axis a is
/// (rank / stride(a)) % size(a); the axes of the placement order are
/// innermost first, each stride the product of the sizes inside it.
class Mesh {
 public:
  /// One rank, every axis of size 1.
  Mesh();
  /// `order` innermost first (each axis at most once); axes it leaves out
  /// are outermost, in Axis order. `sizes` indexed by Axis, each >= 1.
  Mesh(const std::vector<Axis>& order, const std::array<int, kAxes>& sizes);

  int size(Axis a) const { return size_[static_cast<int>(a)]; }
  int stride(Axis a) const { return stride_[static_cast<int>(a)]; }
  /// Ranks in the mesh: the product of the sizes.
  int ranks() const { return ranks_; }
  /// The axes, innermost first.
  const std::vector<Axis>& order() const { return order_; }
  /// rank's coordinate on axis a.
  int coord(Axis a, int rank) const { return (rank / stride(a)) % size(a); }
  /// The rank with `rank`'s coordinates except `c` on axis a.
  int with_coord(int rank, Axis a, int c) const { return rank + (c - coord(a, rank)) * stride(a); }
  /// The ranks of rank's group along axis a, by coordinate.
  std::vector<int> group(Axis a, int rank) const;
  /// The placement as written: the axes of size > 1 or named, innermost
  /// first, e.g. "tp,pp,dp".
  std::string placement() const;

  /// Note [Expert mesh] (cost_comm.cpp): each pipeline stage's tp x cp x dp
  /// ranks, taken in rank order, refolded as etp x ep x edp, innermost
  /// first. `rank`'s index among its stage's ranks in that order (its
  /// non-pipeline coordinates read innermost first).
  int stage_index(int rank) const;
  /// The rank of pipeline stage `stage` at index `index` of stage_index.
  int stage_rank(int stage, int index) const;
  /// The ranks of `rank`'s group along `axis` of the expert view (kTp: the
  /// expert tensor-parallel group, kEp: expert parallel, kDp: expert data
  /// parallel), by their coordinate on it; etp x ep must divide a stage.
  std::vector<int> expert_group(int etp, int ep, Axis axis, int rank) const;
  /// `rank`'s coordinate on `axis` of the expert view (its index in expert_group).
  int expert_coord(int etp, int ep, Axis axis, int rank) const;

 private:
  std::array<int, kAxes> size_{};
  std::array<int, kAxes> stride_{};
  std::vector<Axis> order_;
  int ranks_ = 1;
};

}  // namespace dtsim::sim
