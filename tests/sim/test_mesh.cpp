#include <catch2/catch.hpp>

#include "dtsim/sim/cost.hpp"
#include "dtsim/sim/mesh.hpp"

using namespace dtsim::sim;

namespace {
Mesh cube(std::vector<Axis> order) {
  std::array<int, kAxes> sizes{};
  sizes.fill(1);
  sizes[static_cast<int>(Axis::kTp)] = 2;
  sizes[static_cast<int>(Axis::kPp)] = 2;
  sizes[static_cast<int>(Axis::kDp)] = 2;
  return Mesh(order, sizes);
}
}  // namespace

TEST_CASE("a 2x2x2 mesh in Megatron's order tp, pp, dp: groups by hand", "[mesh]") {
  // Innermost first: rank = t + 2p + 4d. Rank 5 = (t 1, p 0, d 1).
  const Mesh m = cube({Axis::kTp, Axis::kPp, Axis::kDp});
  CHECK(m.ranks() == 8);
  CHECK(m.stride(Axis::kTp) == 1);
  CHECK(m.stride(Axis::kPp) == 2);
  CHECK(m.stride(Axis::kDp) == 4);
  CHECK(m.coord(Axis::kTp, 5) == 1);
  CHECK(m.coord(Axis::kPp, 5) == 0);
  CHECK(m.coord(Axis::kDp, 5) == 1);
  CHECK(m.group(Axis::kTp, 5) == std::vector<int>{4, 5});
  CHECK(m.group(Axis::kPp, 5) == std::vector<int>{5, 7});
  CHECK(m.group(Axis::kDp, 5) == std::vector<int>{1, 5});
  // Axes of size 1 are groups of one.
  CHECK(m.group(Axis::kCp, 5) == std::vector<int>{5});
  CHECK(m.placement() == "tp,pp,dp");
}

TEST_CASE("a 2x2x2 mesh with dp inside pp (tp, dp, pp): groups by hand", "[mesh]") {
  // rank = t + 2d + 4p. Rank 6 = (t 0, d 1, p 1).
  const Mesh m = cube({Axis::kTp, Axis::kDp, Axis::kPp});
  CHECK(m.coord(Axis::kTp, 6) == 0);
  CHECK(m.coord(Axis::kDp, 6) == 1);
  CHECK(m.coord(Axis::kPp, 6) == 1);
  CHECK(m.group(Axis::kTp, 6) == std::vector<int>{6, 7});
  CHECK(m.group(Axis::kDp, 6) == std::vector<int>{4, 6});
  CHECK(m.group(Axis::kPp, 6) == std::vector<int>{2, 6});
  CHECK(m.with_coord(6, Axis::kPp, 0) == 2);
  CHECK(m.placement() == "tp,dp,pp");
}

TEST_CASE("context and expert axes fit the mesh without changing its shape", "[mesh]") {
  std::array<int, kAxes> sizes{};
  sizes.fill(1);
  sizes[static_cast<int>(Axis::kTp)] = 2;
  sizes[static_cast<int>(Axis::kCp)] = 2;
  sizes[static_cast<int>(Axis::kDp)] = 2;
  const Mesh m({Axis::kTp, Axis::kCp, Axis::kDp}, sizes);
  // rank = t + 2c + 4d: the cp group of rank 1 is {1, 3}.
  CHECK(m.group(Axis::kCp, 1) == std::vector<int>{1, 3});
  CHECK(m.placement() == "tp,cp,dp,pp");
}

TEST_CASE("an axis's communicator on the nodes", "[mesh]") {
  // 8 GPUs per node, tp 2 innermost, dp 8 outside it: dp's 8 members are 2
  // ranks apart, so 4 share a node and 2 such groups (one per tp rank)
  // cross each node's NICs at once.
  std::array<int, kAxes> sizes{};
  sizes.fill(1);
  sizes[static_cast<int>(Axis::kTp)] = 2;
  sizes[static_cast<int>(Axis::kDp)] = 8;
  const Mesh m({Axis::kTp, Axis::kPp, Axis::kDp}, sizes);
  const CommGroup dp = axis_group(m, Axis::kDp, 8);
  CHECK(dp.ranks == 8);
  CHECK(dp.ranks_per_node == 4);
  CHECK(dp.groups_per_node == 2);
  CHECK(dp.nodes() == 2);
  const CommGroup tp = axis_group(m, Axis::kTp, 8);
  CHECK(tp.ranks == 2);
  CHECK(tp.ranks_per_node == 2);
  CHECK(tp.groups_per_node == 1);
  // HYBRID_SHARD's replica group: 2 members, 4 dp ranks (8 ranks) apart: one per node.
  const CommGroup replicas = axis_group(m, Axis::kDp, 8, 2, 4);
  CHECK(replicas.ranks == 2);
  CHECK(replicas.ranks_per_node == 1);
  CHECK(replicas.groups_per_node == 8);
}

#include "dtsim/models/models.hpp"
#include "dtsim/sim/config_io.hpp"
#include "dtsim/sim/plan.hpp"

TEST_CASE("resolve builds the mesh from the plan's placement", "[mesh][plan]") {
  // gpt2 on one 8-GPU node, tp 2 x pp 2 x dp 2 placed tp, dp, pp: rank =
  // t + 2d + 4p, so the pipeline's stages are 4 ranks apart and rank 0's
  // data-parallel peer is rank 2.
  const auto gpt2 = dtsim::models::load_model("gpt2");
  const ClusterSpec dgx = load_cluster("dgx-a100");
  const ResolvedPlan r = resolve(parse_plan("tp: 2\npp: 2\nplacement: tp,dp,pp\n", "p.yaml"), *gpt2, dgx);
  CHECK(r.dp == 2);
  CHECK(r.mesh.ranks() == 8);
  CHECK(r.mesh.stride(Axis::kPp) == 4);
  CHECK(r.mesh.group(Axis::kDp, 0) == std::vector<int>{0, 2});
  CHECK(r.mesh.group(Axis::kPp, 1) == std::vector<int>{1, 5});
  CHECK(r.mesh.placement() == "tp,dp,pp");
}

TEST_CASE("the expert view of a mesh lists its ep and edp groups by hand (Note [Expert mesh])", "[mesh][ep]") {
  // tp 2, pp 2, dp 4 in order tp, pp, dp: rank = t + 2p + 4d. A stage's
  // ranks read innermost first (t, then d) are j = t + 2d, refolded as
  // etp 1 x ep 4 x edp 2: ep groups are j in {0..3} and {4..7}, edp groups
  // j and j + 4.
  std::array<int, kAxes> sizes{};
  sizes.fill(1);
  sizes[static_cast<int>(Axis::kTp)] = 2;
  sizes[static_cast<int>(Axis::kPp)] = 2;
  sizes[static_cast<int>(Axis::kDp)] = 4;
  const Mesh m({Axis::kTp, Axis::kPp, Axis::kDp}, sizes);
  // Rank 11 = (t 1, p 1, d 2): j = 1 + 2 x 2 = 5, ep coordinate 1, edp 1.
  CHECK(m.stage_index(11) == 5);
  CHECK(m.stage_rank(1, 5) == 11);
  // Stage 1's j = 4..7 are (t, d) = (0, 2), (1, 2), (0, 3), (1, 3): ranks 10, 11, 14, 15.
  CHECK(m.expert_group(1, 4, Axis::kEp, 11) == std::vector<int>{10, 11, 14, 15});
  CHECK(m.expert_coord(1, 4, Axis::kEp, 11) == 1);
  // j = 1 and 5 on stage 1: (t 1, d 0) = rank 3 and rank 11.
  CHECK(m.expert_group(1, 4, Axis::kDp, 11) == std::vector<int>{3, 11});
  CHECK(m.expert_coord(1, 4, Axis::kDp, 11) == 1);
  // etp 2 x ep 2 x edp 2: the etp group is the tp pair (j 4, 5), ep pairs
  // j with j + 2 (j 5, 7: ranks 11, 15), edp j with j + 4 (j 1, 5: 3, 11).
  CHECK(m.expert_group(2, 2, Axis::kTp, 11) == std::vector<int>{10, 11});
  CHECK(m.expert_group(2, 2, Axis::kEp, 11) == std::vector<int>{11, 15});
  CHECK(m.expert_group(2, 2, Axis::kDp, 11) == std::vector<int>{3, 11});
  // Plain data parallelism (dp 4, ep 2): ep groups {0, 1}, {2, 3}; edp {0, 2}, {1, 3}.
  sizes.fill(1);
  sizes[static_cast<int>(Axis::kDp)] = 4;
  const Mesh d({Axis::kTp, Axis::kPp, Axis::kDp}, sizes);
  CHECK(d.expert_group(1, 2, Axis::kEp, 3) == std::vector<int>{2, 3});
  CHECK(d.expert_group(1, 2, Axis::kDp, 3) == std::vector<int>{1, 3});
  CHECK(d.expert_coord(1, 2, Axis::kEp, 2) == 0);
}
