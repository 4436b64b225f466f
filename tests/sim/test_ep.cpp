// Mixture of experts and expert parallelism: parameter counts against
// transformers', the MoE layer's FLOPs and all-to-all bytes by formula
// (balanced, imbalanced, capped and padded), all-to-all's wire bytes, the
// expert view of a hand-drawn mesh, resolve's checks, expert shards in the
// model states, the expert-parallel pass's tasks and the search walking ep.
#include <catch2/catch.hpp>

#include <algorithm>
#include <fstream>

#include "dtsim/models/models.hpp"
#include "dtsim/sim/config_io.hpp"
#include "dtsim/sim/error.hpp"
#include "dtsim/sim/executor.hpp"
#include "dtsim/sim/framework_config.hpp"
#include "dtsim/sim/lowering.hpp"
#include "dtsim/sim/predict.hpp"
#include "dtsim/sim/report.hpp"
#include "dtsim/sim/rules.hpp"
#include "dtsim/sim/search.hpp"
#include "fake_model.hpp"
#include "test_util.hpp"

using namespace dtsim;
using namespace dtsim::sim;
using dtsim::test::error_of;
using dtsim::test::FixedComm;

namespace {

std::string hf(const std::string& folder) { return std::string(DTSIM_TEST_DATA) + "/hf/" + folder + "/config.json"; }

/// transformers' count of a Mixtral / Qwen3-MoE shaped model
/// (tests/data/hf/PARAMS.md): per layer q and o h(n d) each, k and v h(k d)
/// each, q/k norms 2d (Qwen3), the router E h, E experts of 3 h I, two
/// RMSNorms 2h; embeddings and an untied head 2 V h, the final norm h.
/// `routed` experts counted (E for the total, top-k for the active).
std::int64_t moe_params(std::int64_t L, std::int64_t h, std::int64_t n, std::int64_t k, std::int64_t d, std::int64_t E,
                        std::int64_t I, std::int64_t V, bool qk_norm, std::int64_t routed) {
  return L * (2 * h * n * d + 2 * h * k * d + (qk_norm ? 2 * d : 0) + E * h + routed * 3 * h * I + 2 * h) + 2 * V * h + h;
}

WorkloadShape shape(std::int64_t b, std::int64_t s, int e) {
  WorkloadShape w;
  w.micro_batch = b;
  w.seq_len = s;
  w.act_bytes = e;
  return w;
}

/// The FLOPs of a layer's forward expert GEMMs ("moe.experts.*").
Flops expert_flops(const Layer& l) {
  Flops f = 0;
  for (const auto& k : l.forward) {
    if (k.kind == KernelKind::kGemm && k.name.rfind("moe.experts.", 0) == 0) f += k.flops * static_cast<double>(k.repeat);
  }
  return f;
}

}  // namespace

TEST_CASE("MoE parameter counts equal transformers', from config.json and built in", "[moe]") {
  // Mixtral-8x7B's 46,702,792,704 is the (and the model card's).
  const std::int64_t m7 = moe_params(32, 4096, 32, 8, 128, 8, 14336, 32000, false, 8);
  const std::int64_t m22 = moe_params(56, 6144, 48, 8, 128, 8, 16384, 32000, false, 8);
  const std::int64_t q30 = moe_params(48, 2048, 32, 4, 128, 128, 768, 151936, true, 128);
  const std::int64_t q235 = moe_params(94, 4096, 64, 4, 128, 128, 1536, 151936, true, 128);
  CHECK(m7 == 46'702'792'704);
  CHECK(m22 == 140'620'634'112);
  CHECK(q30 == 30'532'122'624);
  CHECK(q235 == 235'093'634'560);
  CHECK(models::load_model(hf("mixtral-8x7b"))->parameters() == m7);
  CHECK(models::load_model("mixtral-8x7b")->parameters() == m7);
  CHECK(models::load_model(hf("mixtral-8x22b"))->parameters() == m22);
  CHECK(models::load_model("mixtral-8x22b")->parameters() == m22);
  CHECK(models::load_model(hf("qwen3-30b-a3b"))->parameters() == q30);
  CHECK(models::load_model("qwen3-30b-a3b")->parameters() == q30);
  CHECK(models::load_model(hf("qwen3-235b-a22b"))->parameters() == q235);
  CHECK(models::load_model("qwen3-235b-a22b")->parameters() == q235);
  // Active per token: top-k of the routed experts (Mixtral's "12.9B").
  CHECK(models::load_model("mixtral-8x7b")->active_parameters() == moe_params(32, 4096, 32, 8, 128, 8, 14336, 32000, false, 2));
  CHECK(models::load_model("mixtral-8x7b")->active_parameters() == 12'879'925'248);
  CHECK(models::load_model("qwen3-30b-a3b")->active_parameters() == moe_params(48, 2048, 32, 4, 128, 128, 768, 151936, true, 8));

  // Qwen1.5-MoE-A2.7B (qwen2_moe): 24 layers, h 2048, 16 heads of 128 with
  // q/k/v biases 3h, 60 experts of 1408, a shared expert of 5632 and its
  // gate h x 1, V 151936 untied.
  const std::int64_t h = 2048;
  const std::int64_t qwen2_block = 4 * h * h + 3 * h + 60 * h + 60 * 3 * h * 1408 + 3 * h * 5632 + h + 2 * h;
  CHECK(24 * qwen2_block + 2 * 151936 * h + h == 14'315'784'192);
  CHECK(models::load_model(hf("qwen1.5-moe-a2.7b"))->parameters() == 14'315'784'192);

  // DeepSeek-V3: multi-head latent attention A per layer (q_a_proj h x
  // 1536 and its norm, q_b_proj 1536 x 128 x 192, kv_a_proj h x (512 + 64)
  // and its norm, kv_b_proj 512 x 128 x 256, o_proj 128 x 128 x h), 3 dense
  // layers of 18432, 58 MoE layers of 256 routed experts and 1 shared of
  // 2048 with a router 256 x h (e_score_correction_bias is a buffer in
  // transformers, and its MTP layer is not built).
  const std::int64_t H = 7168;
  const std::int64_t A = H * 1536 + 1536 + 1536 * 128 * 192 + H * 576 + 512 + 512 * 128 * 256 + 128 * 128 * H;
  const std::int64_t v3 = 3 * (A + 3 * H * 18432 + 2 * H) + 58 * (A + 256 * 3 * H * 2048 + 3 * H * 2048 + 256 * H + 2 * H) +
                          2 * 129280 * H + H;
  CHECK(v3 == 671'026'404'352);
  CHECK(models::load_model(hf("deepseek-v3"))->parameters() == v3);
  CHECK(models::load_model("deepseek-v3")->parameters() == v3);
  // Active: 8 routed experts a token, embeddings included.
  CHECK(models::load_model("deepseek-v3")->active_parameters() == v3 - 58 * 248 * 3 * H * 2048);
  CHECK(models::load_model("deepseek-v3")->active_parameters() == 37'552'282'624);
}

TEST_CASE("MoE layer: FLOPs and all-to-all bytes by formula, balanced or not", "[moe]") {
  // moe-tiny: h 128, 4 experts of 176, top-2; one sequence of 128 tokens in fp16.
  const auto m = models::load_model("moe-tiny");
  CHECK(m->experts() == 4);
  CHECK(m->parameters() == 902'784);  // 1024 x 128 x 2 + 128 + 2 x (4 x 128 x 128 + 256 + 512 + 4 x 3 x 128 x 176)
  WorkloadShape w = shape(1, 128, 2);
  const Layer one = m->layers(w)[1];
  // Router 2 t E h; experts 6 t k h fe (gate and up, then down).
  Flops router = 0;
  for (const auto& k : one.forward) {
    if (k.name == "moe.router") router = k.flops;
  }
  CHECK(router == 2.0 * 128 * 4 * 128);
  CHECK(expert_flops(one) == 6.0 * 128 * 2 * 128 * 176);
  CHECK(one.expert_params == 4 * 3 * 128 * 176);
  CHECK(one.ep_forward.empty());

  // ep = 2: half the experts, the same k t rows on each rank (balanced),
  // dispatch and combine of e t k h bytes each way.
  w.ep = 2;
  const Layer two = m->layers(w)[1];
  CHECK(expert_flops(two) == 6.0 * 128 * 2 * 128 * 176);
  CHECK(two.expert_params == 2 * 3 * 128 * 176);
  CHECK(two.params == one.params - 2 * 3 * 128 * 176);
  // First the counts (Note [Mixture of experts]): E = 4 int64, 32 bytes,
  // once, forward only; then the rows.
  REQUIRE(two.ep_forward.size() == 2);
  CHECK(two.ep_forward[0].op == CollectiveOp::kAllToAll);
  CHECK(two.ep_forward[0].axis == Axis::kEp);
  CHECK(two.ep_forward[0].bytes == 4 * 8);
  CHECK(two.ep_forward[0].count == 1);
  CHECK(two.ep_forward[1].op == CollectiveOp::kAllToAll);
  CHECK(two.ep_forward[1].axis == Axis::kEp);
  CHECK(two.ep_forward[1].bytes == 2 * 128 * 2 * 128);
  CHECK(two.ep_forward[1].count == 2);
  REQUIRE(two.ep_backward.size() == 1);
  CHECK(two.ep_backward[0].bytes == 2 * 128 * 2 * 128);
  CHECK(two.ep_backward[0].count == 2);

  // The busiest expert at twice its share, the other three sharing the
  // rest: with ep = 4 its rank gets 2x the rows; with ep = 2 the hot
  // expert and one other, (2 + 2/3) / 2 = 4/3 x: ceil(256 x 4/3) = 342 rows.
  w.moe_imbalance = 2;
  w.ep = 4;
  const Layer hot = m->layers(w)[1];
  CHECK(expert_flops(hot) == 2 * 6.0 * 128 * 2 * 128 * 176);
  CHECK(hot.ep_forward[0].bytes == 4 * 8);  // the counts do not grow with the load
  CHECK(hot.ep_forward[1].bytes == 2 * 2 * 128 * 2 * 128);
  w.ep = 2;
  CHECK(expert_flops(m->layers(w)[1]) == 2.0 * 171 * 2 * (2 * 176 * 128 + 128 * 176));  // 171 rows an expert
  // Capacity 1.5 drops what is beyond: 1.5x on the hot rank (ep = 4).
  w.ep = 4;
  w.moe_capacity_factor = 1.5;
  CHECK(expert_flops(m->layers(w)[1]) == 1.5 * 6.0 * 128 * 2 * 128 * 176);
  // Padded to capacity 1.25: every expert computes 1.25x its share.
  w.moe_imbalance = 1;
  w.moe_capacity_factor = 1.25;
  w.moe_pad = true;
  w.ep = 2;
  CHECK(expert_flops(m->layers(w)[1]) == 6.0 * 320 * 128 * 176);
}

TEST_CASE("all-to-all: the slower of the intra- and inter-node shares (Note [All-to-all])", "[moe][comm]") {
  const ClusterSpec c = test::round_cluster(2, 4);  // NVLink 100 GB/s 1 us; one 10 GB/s NIC 5 us
  const AnalyticCommModel comm(c);
  // 4 ranks on one node: 3/4 of 8 MB over NVLink, base 6 us + a hop.
  CommGroup one{4, 4, 1};
  CollectiveCost a = comm.collective(CollectiveOp::kAllToAll, 8'000'000, one);
  CHECK(a.wire_bytes == Approx(6e6));
  CHECK(a.rate == Approx(100e9));
  CHECK(a.latency == 7 * kNsPerUs);
  CHECK(a.total() == 67 * kNsPerUs);
  CHECK(bus_bandwidth_factor(CollectiveOp::kAllToAll, 4) == Approx(0.75));
  // 8 ranks, 4 a node: half of each rank's 8 MB leaves the node through
  // the NIC its 4 ranks share (2.5 GB/s each): 1,600 us, against 30 us for
  // the 3/8 on NVLink.
  CommGroup two{8, 4, 1};
  a = comm.collective(CollectiveOp::kAllToAll, 8'000'000, two);
  CHECK(a.link == LinkClass::kInterNode);
  CHECK(a.wire_bytes == Approx(4e6));
  CHECK(a.rate == Approx(2.5e9));
  CHECK(a.total() == (11 + 1600) * kNsPerUs);
  CollectiveOp op{};
  CHECK(parse_collective("all_to_all", &op));
  CHECK(op == CollectiveOp::kAllToAll);
}

TEST_CASE("DeepEP: a token crosses to each node of its experts once (Note [DeepEP])", "[moe][comm]") {
  const ClusterSpec c = test::round_cluster(8, 4);  // NVLink 100 GB/s 1 us; one 10 GB/s NIC a node, 5 us
  const AnalyticCommModel comm(c);
  // 32 ranks on 8 nodes. NCCL's all-to-all sends 28/32 of a rank's 8 MB off
  // the node: 7 MB at 2.5 GB/s (the NIC's quarter) = 2,800 us.
  const CommGroup g{32, 4, 1};
  const CollectiveCost a2a = comm.collective(CollectiveOp::kAllToAll, 8'000'000, g);
  CHECK(a2a.wire_bytes == Approx(7e6));
  // DeepSeek-V3's routing: top-8 of 256 experts, at most 4 nodes a token.
  // Unlimited, another node (32 experts) is missed with probability
  // C(224, 8) / C(256, 8), about 0.34, so 7 x 0.66 = 4.6 nodes; the limit
  // caps it at 4 x 7/8 = 3.5 nodes: 1 MB of tokens (8 MB / 8 copies) x 3.5
  // = 3.5 MB, half the all-to-all's, at the same 2.5 GB/s: 1,400 us + 6 us
  // base + 5 us RDMA + 1 us NVLink.
  const CollectiveCost dsv3 = comm.expert_dispatch(8'000'000, ExpertRoute{8, 256, 4}, g);
  CHECK(dsv3.algorithm == "deepep");
  CHECK(dsv3.link == LinkClass::kInterNode);
  CHECK(dsv3.wire_bytes == Approx(3.5e6));
  CHECK(dsv3.rate == Approx(2.5e9));
  CHECK(dsv3.total() == (1400 + 12) * kNsPerUs);
  // Qwen3-235B's: top-8 of 128, no limit; a node holds 16, missed with
  // probability prod_{i<8} (112 - i) / (128 - i).
  double p0 = 1;
  for (int i = 0; i < 8; ++i) p0 *= (112.0 - i) / (128.0 - i);
  const CollectiveCost qwen = comm.expert_dispatch(8'000'000, ExpertRoute{8, 128, 0}, g);
  CHECK(qwen.wire_bytes == Approx(1e6 * 7 * (1 - p0)));
  // Within one node DeepEP is an NVLink all-to-all, priced as NCCL's.
  const CommGroup node{4, 4, 1};
  CHECK(comm.expert_dispatch(8'000'000, ExpertRoute{8, 256, 4}, node).total() ==
        comm.collective(CollectiveOp::kAllToAll, 8'000'000, node).total());
}

TEST_CASE("moe_dispatcher: deepep routes DeepSeek-V3's tokens to at most topk_group nodes", "[moe][comm]") {
  // config.json: n_group 8, topk_group 4, num_experts_per_tok 8 of 256.
  WorkloadShape shape;
  shape.micro_batch = 1;
  shape.seq_len = 64;
  shape.ep = 8;
  shape.moe_deepep = true;
  for (const auto& model : {models::load_model(hf("deepseek-v3")), models::load_model("deepseek-v3")}) {
    int routed = 0;
    for (const Layer& L : model->layers(shape)) {
      if (L.ep_forward.empty()) continue;
      ++routed;
      CHECK(L.ep_route.top_k == 8);
      CHECK(L.ep_route.experts == 256);
      CHECK(L.ep_route.node_limit == 4);
    }
    CHECK(routed == 61 - 3);  // all but the first_k_dense_replace = 3 dense layers
  }
  // NCCL's all-to-all (the default) sets no route; Mixtral has no node limit.
  shape.moe_deepep = false;
  for (const Layer& L : models::load_model("deepseek-v3")->layers(shape)) CHECK(L.ep_route.top_k == 0);
  shape.moe_deepep = true;
  for (const Layer& L : models::load_model("mixtral-8x7b")->layers(shape)) {
    if (!L.ep_forward.empty()) CHECK((L.ep_route.top_k == 2 && L.ep_route.experts == 8 && L.ep_route.node_limit == 0));
  }
  CHECK_THAT(error_of([] { parse_plan("moe_dispatcher: nvshmem\n", "p.yaml"); }),
             Catch::Contains("p.yaml:1") && Catch::Contains("moe_dispatcher") && Catch::Contains("alltoall, allgather, deepep"));
}

TEST_CASE("the expert view of a hand-drawn mesh (Note [Expert mesh])", "[moe]") {
  // tp 2 innermost, then pp 2, then dp 4: rank = tp + 2 pp + 4 dp, 8 a node.
  // A stage's ranks in order: j = tp + 2 dp -> rank (j % 2) + 4 (j / 2).
  std::array<int, kAxes> sizes{};
  sizes.fill(1);
  sizes[static_cast<int>(Axis::kTp)] = 2;
  sizes[static_cast<int>(Axis::kPp)] = 2;
  sizes[static_cast<int>(Axis::kDp)] = 4;
  const Mesh mesh({Axis::kTp, Axis::kPp, Axis::kDp}, sizes);
  // ep 4, etp 1: rank 0's group is j 0..3 = ranks 0, 1, 4, 5, all on node 0;
  // node 0 holds one such group per stage: 2.
  CommGroup ep = expert_group(mesh, 1, 4, Axis::kEp, 8);
  CHECK(ep.ranks == 4);
  CHECK(ep.ranks_per_node == 4);
  CHECK(ep.groups_per_node == 2);
  // Its expert data-parallel group: j 0 and 4 = ranks 0 and 8, one a node;
  // node 0's 8 ranks are in 8 different ones.
  CommGroup edp = expert_group(mesh, 1, 4, Axis::kDp, 8);
  CHECK(edp.ranks == 2);
  CHECK(edp.ranks_per_node == 1);
  CHECK(edp.groups_per_node == 8);
  // etp 2 = tp, ep 4: ep members j 0, 2, 4, 6 = ranks 0, 4, 8, 12, two a node.
  ep = expert_group(mesh, 2, 4, Axis::kEp, 8);
  CHECK(ep.ranks == 4);
  CHECK(ep.ranks_per_node == 2);
  CHECK(expert_group(mesh, 2, 4, Axis::kDp, 8).ranks == 1);
  // The allgather dispatcher gathers over etp x ep (Megatron-Core's tp_ep
  // group): at etp 2, ep 4 the stage's 8 ranks j 0..7 = ranks 0, 1, 4, 5, 8,
  // 9, 12, 13, four on node 0, whose 8 ranks hold one such group of each of
  // the 2 stages; the alltoall dispatcher's is the ep group above.
  const CommGroup tp_ep = expert_dispatch_group(mesh, 2, 4, MoeDispatcher::kAllGather, 8);
  CHECK(tp_ep.ranks == 8);
  CHECK(tp_ep.ranks_per_node == 4);
  CHECK(tp_ep.groups_per_node == 2);
  CHECK(expert_dispatch_group(mesh, 2, 4, MoeDispatcher::kAllToAll, 8).ranks == 4);
  CHECK(expert_dispatch_group(mesh, 1, 4, MoeDispatcher::kAllGather, 8).ranks == 4);  // etp 1: the ep group
}

TEST_CASE("ep: resolve carves experts out of tp x cp x dp and checks them", "[moe]") {
  const auto m = models::load_model("moe-tiny");  // 4 experts
  const ClusterSpec c = test::round_cluster(2, 4);  // 8 GPUs
  ResolvedPlan p = resolve(parse_plan("ep: 4\nzero_stage: 1\n", "p.yaml"), *m, c);
  CHECK(p.dp == 8);
  CHECK(p.etp == 1);  // tp
  CHECK(p.edp == 2);  // 8 / (4 x 1)
  CHECK(p.shard_group == 8);
  CHECK(p.expert_shard_group == 2);
  p = resolve(parse_plan("ep: 4\ntp: 2\nsequence_parallel: true\n", "p.yaml"), *m, c);
  CHECK(p.etp == 2);
  CHECK(p.edp == 1);  // 2 x 4 / (4 x 2)
  p = resolve(parse_plan("ep: 4\ntp: 2\netp: 1\nsequence_parallel: true\n", "p.yaml"), *m, c);
  CHECK(p.edp == 2);

  CHECK(error_of([&] { resolve(parse_plan("ep: 3\n", "p.yaml"), *m, c); }) ==
        "p.yaml:1: plan.ep: 3: 4 routed experts are not divisible by ep=3; valid: 1, 2, 4");
  CHECK_THAT(error_of([&] { resolve(parse_plan("ep: 2\ntp: 2\n", "p.yaml"), *m, c); }),
             Catch::Contains("plan.sequence_parallel: false with ep > 1 and tp > 1"));
  const ClusterSpec four = test::round_cluster(1, 4);
  CHECK_THAT(error_of([&] { resolve(parse_plan("ep: 4\ntp: 2\nsequence_parallel: true\n", "p.yaml"), *m, four); }),
             Catch::Contains("plan.ep: 4 x etp 2 does not divide the tp x cp x dp = 4 ranks"));
  CHECK_THAT(error_of([&] { resolve(parse_plan("etp: 3\ntp: 2\nsequence_parallel: true\n", "p.yaml"), *m, c); }),
             Catch::Contains("plan.etp: 3: expert tensor parallelism splits each expert over 1 or tp = 2 ranks; valid: 1, 2"));
  const auto dense = models::load_model("llama-tiny");
  CHECK_THAT(error_of([&] { resolve(parse_plan("ep: 2\n", "p.yaml"), *dense, c); }),
             Catch::Contains("plan.ep: 2: this model has no experts to spread"));
  CHECK_THAT(error_of([&] { models::load_model("moe-tiny", {parse_override("model.top_k=5")}); }),
             Catch::Contains("model.top_k: 5 exceeds the 4 routed experts; valid: 1 to 4"));
  CHECK_THAT(error_of([&] { resolve(parse_plan("moe_pad: true\n", "p.yaml"), *m, c); }),
             Catch::Contains("p.yaml:1: plan.moe_pad: true needs moe_capacity_factor > 0"));
  CHECK_THAT(error_of([&] { models::load_model("moe-tiny", {parse_override("model.experts=1")}); }),
             Catch::Contains("model.experts: 1: a mixture needs at least 2 routed experts"));
  CHECK_THAT(error_of([&] { models::load_model("moe-tiny", {parse_override("model.route_nodes=-1")}); }),
             Catch::Contains("model.route_nodes") && Catch::Contains("-1"));
}

TEST_CASE("bad MoE config.json: one line naming file, key and what is valid", "[moe]") {
  test::TempDir dir("moe-bad");
  auto write = [&](const std::string& name, const std::string& text) {
    std::ofstream(dir.file(name)) << text;
    return dir.file(name);
  };
  const std::string topk = write("k.json", "{\"model_type\": \"mixtral\",\n \"num_local_experts\": 8,\n \"num_experts_per_tok\": 9\n}\n");
  CHECK_THAT(error_of([&] { models::load_model(topk); }),
             Catch::Contains("k.json:3") && Catch::Contains("config.num_experts_per_tok: 9 exceeds the 8 routed experts"));
  const std::string one = write("e.json", "{\"model_type\": \"qwen3_moe\",\n \"num_experts\": 1\n}\n");
  CHECK_THAT(error_of([&] { models::load_model(one); }), Catch::Contains("e.json:2") && Catch::Contains("config.num_experts"));
  const std::string dense = write("d.json", "{\"model_type\": \"qwen2_moe\",\n \"mlp_only_layers\": [0, 3]\n}\n");
  CHECK_THAT(error_of([&] { models::load_model(dense); }),
             Catch::Contains("config.mlp_only_layers: dense layers listed by index are not modelled; valid: []"));
  const std::string freq = write("f.json", "{\"model_type\": \"deepseek_v3\",\n \"moe_layer_freq\": 2\n}\n");
  CHECK_THAT(error_of([&] { models::load_model(freq); }), Catch::Contains("f.json:2") && Catch::Contains("config.moe_layer_freq"));
  const std::string group = write("g.json", "{\"model_type\": \"deepseek_v3\",\n \"topk_group\": 0\n}\n");
  CHECK_THAT(error_of([&] { models::load_model(group); }), Catch::Contains("g.json:2") && Catch::Contains("config.topk_group"));
  const std::string arch = write("a.json", "{\"model_type\": \"mixtral\", \"architectures\": [\"MixtralForSequenceClassification\"]}\n");
  CHECK_THAT(error_of([&] { models::load_model(arch); }), Catch::Contains("valid: MixtralForCausalLM"));
}

TEST_CASE("ep: expert states shard over the expert data-parallel group", "[moe]") {
  ResolvedPlan p;
  p.precision = Precision::kBf16;
  p.optimizer = Optimizer::kAdamW;
  p.zero_stage = 1;
  p.shard_group = 8;
  p.expert_shard_group = 2;
  // 1,000 parameters of which 600 experts': 400 / 8 + 600 / 2 = 350 a
  // shard, 12 bytes each of optimizer state (ZeRO's K), 2 each of weights.
  const ModelStates s = model_states(p, 1000, 600);
  CHECK(s.optimizer == 350 * 12);
  CHECK(s.parameters == 1000 * 2);
  p.zero_stage = 3;
  CHECK(model_states(p, 1000, 600).parameters == 350 * 2);
}

TEST_CASE("hybrid_shard with experts: the dense and the expert shards within a node, their replicas across (Note [Hybrid sharding])",
          "[moe][fsdp]") {
  const auto m = models::load_model("moe-tiny");
  // 4 nodes of 8: dp 32; shards of the dense parameters over a node's 8
  // ranks; at ep 4 the 8 expert data-parallel ranks (32 / 4) hold 2 on a
  // node (8 / 4), so the experts' shards are halves, replicated 4 times.
  const ClusterSpec c = test::round_cluster(4, 8);
  ResolvedPlan p = resolve(parse_plan("ep: 4\nfsdp: hybrid_shard\nmicro_batch: 1\nseq_len: 128\nprecision: fp16\n", "p.yaml"), *m, c);
  CHECK(p.dp == 32);
  CHECK(p.edp == 8);
  CHECK(p.shard_group == 8);
  CHECK(p.expert_shard_group == 2);
  // At tp 2 a node holds 4 data-parallel ranks: the dense shards over 4;
  // the 8 expert data-parallel ranks (2 x 16 / 4) hold 2 on a node (8 / (4 x 1)).
  const ResolvedPlan t = resolve(parse_plan("ep: 4\ntp: 2\netp: 1\nsequence_parallel: true\nfsdp: hybrid_shard\n", "p.yaml"), *m, c);
  CHECK(t.dp == 16);
  CHECK(t.shard_group == 4);
  CHECK(t.edp == 8);
  CHECK(t.expert_shard_group == 2);
  // ep 8 fills a node: the experts stay whole in it (Megatron-FSDP's HSDP at ep 64 on a domain of 64).
  CHECK(resolve(parse_plan("ep: 4\nfsdp: hybrid_shard\n", "p.yaml"), *models::load_model("moe-tiny", {parse_override("model.experts=8")}),
                c).expert_shard_group == 2);
  CHECK(resolve(parse_plan("ep: 8\nfsdp: hybrid_shard\n", "p.yaml"), *models::load_model("moe-tiny", {parse_override("model.experts=8")}), c)
            .expert_shard_group == 1);
  // The step's all-reduce of a MoE layer's shard across the replicas: its
  // dense part's eighth and its experts' half, in fp16 bytes.
  const test::FixedCompute compute(1'000'000);
  const AnalyticCommModel comm(c);
  partition(p, *m, c, compute, comm);
  const TaskGraph g = lower(*m, p, c, CostModels{&compute, &comm});
  WorkloadShape w;
  w.micro_batch = 1;
  w.seq_len = 128;
  w.act_bytes = 2;
  w.ep = 4;
  const Layer block = m->layers(w)[1];
  REQUIRE(block.expert_params > 0);
  const Bytes want = (2 * (block.params - block.expert_params) + 7) / 8 + (2 * block.expert_params + 1) / 2;
  int shards = 0;
  for (const Task& t : g.tasks) {
    if (t.kind != TaskKind::kCollective || t.name.find("all_reduce shard layers.0") == std::string::npos) continue;
    ++shards;
    CHECK(t.op == CollectiveOp::kAllReduce);
    CHECK(t.bytes == want);
    CHECK(t.cost.link == LinkClass::kInterNode);  // both replica groups span the 4 nodes
  }
  CHECK(shards == 1);

  // Megatron-FSDP's outer_dp_sharding_strategy optim: the shard's gradients
  // reduce-scattered over the 4 replicas, the optimizer state of a quarter
  // of each shard (the dense over all 32, the experts' over all 8), the
  // updated shards gathered back after the step.
  ResolvedPlan o = resolve(parse_plan("ep: 4\nfsdp: hybrid_shard\nouter_dp_sharding_strategy: optim\nmicro_batch: 1\nseq_len: 128\n"
                                      "precision: fp16\n", "p.yaml"), *m, c);
  CHECK(o.outer_optim);
  // This rank's parameters: every layer's at ep 4 (its one expert a MoE layer).
  std::int64_t mine = 0, mine_expert = 0;
  for (const Layer& l : m->layers(w)) mine += l.params, mine_expert += l.expert_params;
  REQUIRE(mine_expert == 2 * block.expert_params);
  const std::int64_t k = optimizer_state_bytes_per_param(o.optimizer, o.precision, o.master_weights);
  CHECK(model_states(o, mine, mine_expert).optimizer == ((mine - mine_expert + 31) / 32 + (mine_expert + 7) / 8) * k);
  CHECK(model_states(p, mine, mine_expert).optimizer == ((mine - mine_expert + 7) / 8 + (mine_expert + 1) / 2) * k);
  partition(o, *m, c, compute, comm);
  const TaskGraph go = lower(*m, o, c, CostModels{&compute, &comm});
  int scattered = 0, gathered = 0;
  for (const Task& t : go.tasks) {
    if (t.kind != TaskKind::kCollective) continue;
    if (t.name.find("all_reduce shard") != std::string::npos) FAIL("an all-reduce of shards where they are reduce-scattered: " << t.name);
    if (t.name.find("reduce_scatter shard layers.0") != std::string::npos) {
      ++scattered;
      CHECK(t.op == CollectiveOp::kReduceScatter);
      CHECK(t.bytes == want);
    }
    if (t.name == "all_gather outer shards") {
      ++gathered;
      CHECK(t.op == CollectiveOp::kAllGather);
      // Every layer's shard in fp16: the dense parameters' eighth and the experts' half.
      CHECK(t.bytes == 2 * ((mine - mine_expert + 7) / 8 + (mine_expert + 1) / 2));
    }
  }
  CHECK(scattered == 1);
  CHECK(gathered == 1);
  CHECK(error_of([&] { resolve(parse_plan("ep: 4\nfsdp: full_shard\nouter_dp_sharding_strategy: optim\n", "p.yaml"), *m, c); }) ==
        "p.yaml:3: plan.outer_dp_sharding_strategy: optim shards the optimizer state across HSDP's replicas; valid only with fsdp: "
        "hybrid_shard (valid here: no_shard)");
}

TEST_CASE("ep: each MoE layer's dispatch and combine are one task a pass", "[moe]") {
  const auto m = models::load_model("moe-tiny");
  const ClusterSpec c = test::round_cluster(1, 4);
  ResolvedPlan p = resolve(parse_plan("ep: 4\nmicro_batch: 1\nseq_len: 128\nprecision: fp16\n", "p.yaml"), *m, c);
  const test::FixedCompute compute(1'000'000);
  const FixedComm comm(10'000);
  partition(p, *m, c, compute, comm);
  const TaskGraph g = lower(*m, p, c, CostModels{&compute, &comm});
  int tasks = 0;
  for (const Task& t : g.tasks) {
    if (t.axis != Axis::kEp) continue;
    ++tasks;
    CHECK(t.op == CollectiveOp::kAllToAll);
    if (t.name.find("ep fwd") != std::string::npos) {
      // The counts first (4 experts x 8 bytes), then dispatch and combine,
      // e t k h each: three all-to-alls summed as one flow.
      CHECK(t.bytes == 4 * 8 + 2 * (2 * 128 * 2 * 128));
      CHECK(t.cost.latency == 3 * 10'000);
    } else {
      CHECK(t.bytes == 2 * (2 * 128 * 2 * 128));  // the gradients of both, back
      CHECK(t.cost.latency == 2 * 10'000);
    }
  }
  CHECK(tasks == 2 * 2);  // two MoE layers, forward and backward
}

TEST_CASE("experts whole on each tp rank are reduced over their tp ranks where dp is 1 (Note [Experts alone in a bucket])", "[moe]") {
  // moe-tiny at tp 2, etp 1, dp 1: the edp group is the tp pair. Its two
  // MoE layers' experts, 2 x 4 x 3 x 128 x 176 = 540,672 parameters, 2
  // bytes each in fp16: 1,081,344 bytes all-reduced a step and held once
  // more as DDP's bucket copy; the dense gradients stay on their rank.
  const auto m = models::load_model("moe-tiny");
  const ClusterSpec c = test::round_cluster(1, 2);
  const test::FixedCompute compute(1'000'000);
  const FixedComm comm(10'000);
  const auto reduced = [&](const std::string& etp, Bytes* buffers) {
    ResolvedPlan p = resolve(parse_plan("tp: 2\netp: " + etp + "\nsequence_parallel: true\nmicro_batch: 1\nseq_len: 128\nprecision: fp16\n", "p.yaml"),
                             *m, c);
    partition(p, *m, c, compute, comm);
    const TaskGraph g = lower(*m, p, c, CostModels{&compute, &comm});
    Bytes bytes = 0;
    for (const Task& t : g.tasks) {
      if (t.name.rfind("all_reduce bucket", 0) == 0) bytes += t.bytes;
    }
    *buffers = 0;
    for (const MemOp& op : g.ranks.at(0).resident) {
      if (op.category == MemCategory::kBuffers) *buffers += op.bytes;
    }
    *buffers -= c.device.runtime_reserved;
    return bytes;
  };
  Bytes buffers = 0;
  CHECK(reduced("1", &buffers) == 1'081'344);
  CHECK(buffers == 1'081'344);
  // Split over tp (etp 2) the experts are each rank's own shares: nothing to reduce.
  CHECK(reduced("2", &buffers) == 0);
  CHECK(buffers == 0);
}

TEST_CASE("search walks ep where the model has experts", "[moe][search]") {
  const auto m = models::load_model("moe-tiny");
  const ClusterSpec c = test::round_cluster(1, 4);
  SearchOptions o;
  o.global_batch = 8;
  o.threads = 1;
  const auto plans = enumerate_plans(*m, c, o);
  std::vector<int> eps;
  for (const auto& s : plans) {
    if (std::find(eps.begin(), eps.end(), s.ep) == eps.end()) eps.push_back(s.ep);
    // Megatron-Core's rule holds for every candidate.
    CHECK((s.ep == 1 || s.tp == 1 || s.sequence_parallel));
  }
  std::sort(eps.begin(), eps.end());
  CHECK(eps == std::vector<int>{1, 2, 4});
  // A dense model is walked as before: ep 1 only.
  const auto dense = models::load_model("llama-tiny");
  for (const auto& s : enumerate_plans(*dense, c, o)) CHECK(s.ep == 1);

  // The base plan's overlap_moe_expert_parallel_comm goes to every
  // candidate the rules allow it in (ep > 1, pp 1, no full recompute, 16-bit)
  // and to no other; off in the base, off everywhere.
  for (const auto& s : plans) CHECK_FALSE(s.overlap_moe_expert_parallel_comm);
  o.base.overlap_moe_expert_parallel_comm = true;
  o.base.precision = Precision::kFp16;  // held: the round device runs nothing faster than fp32
  o.base.origins.where["plan.precision"] = "--set plan.precision";
  int on = 0, off = 0;
  for (const auto& s : enumerate_plans(*m, c, o)) {
    const bool allowed = s.ep > 1 && (s.pp == 1 || s.schedule == Schedule::kInterleaved) && s.recompute != Recompute::kFull &&
                         s.precision != Precision::kFp32 && s.zero_stage != 3 && s.fsdp == FsdpMode::kNone;
    CHECK(s.overlap_moe_expert_parallel_comm == allowed);
    (allowed ? on : off) += 1;
  }
  CHECK(on > 0);
  CHECK(off > 0);

  // The table marks such a plan's ep "+" and says what it means.
  SearchResult r;
  SearchEntry e;
  e.plan = resolve(parse_plan("ep: 4\nprecision: fp16\nmicro_batch: 1\noverlap_moe_expert_parallel_comm: true\n", "p.yaml"), *m, c);
  e.fits = true;
  r.top = {e};
  const std::string text = format_search(r);
  CHECK_THAT(text, Catch::Contains(" 4+ "));
  CHECK_THAT(text, Catch::Contains("(ep +: the experts' all-to-alls beside the other micro-batch's layers"));
  e.plan = resolve(parse_plan("ep: 4\nprecision: fp16\nmicro_batch: 1\n", "p.yaml"), *m, c);
  r.top = {e};
  CHECK_THAT(format_search(r), !Catch::Contains("ep +:"));
}

TEST_CASE("moe_experts dense: every token through every expert, as HuggingFace's Llama 4 computes them (Note [Dense experts])",
          "[moe]") {
  // moe-tiny: h 128, 4 experts of 176, top-2; t = 64 tokens in 16 bits.
  const auto m = models::load_model("moe-tiny");
  WorkloadShape w = shape(1, 64, 2);
  const Layer grouped = m->layers(w)[1];
  w.moe_dense = true;
  const Layer dense = m->layers(w)[1];
  // The experts' GEMMs over E t = 256 rows where routing gives k t = 128.
  CHECK(expert_flops(grouped) == 6.0 * 64 * 2 * 128 * 176);
  CHECK(expert_flops(dense) == 6.0 * 64 * 4 * 128 * 176);
  // The repeat writes E t h elements; the sum reads them back.
  const auto repeat = std::find_if(dense.forward.begin(), dense.forward.end(), [](const Kernel& k) { return k.name == "moe.repeat"; });
  REQUIRE(repeat != dense.forward.end());
  CHECK(repeat->bytes == 2 * 64 * 128 + 2 * 4 * 64 * 128);
  // Kept, the MoE part: grouped 4 t E + 4 t k + g k t h + (3e + g) k t fe + e k t h
  //   = 1,024 + 512 + 32,768 + 180,224 + 32,768 = 247,296;
  // dense 4 t E + e E t + e E t h + g E t h + (3e + g) E t fe
  //   = 1,024 + 512 + 65,536 + 65,536 + 360,448 = 493,056: 245,760 more.
  CHECK(dense.saved_bytes - grouped.saved_bytes == 245'760);
  CHECK(dense.signature.find(",dense=1") != std::string::npos);
  CHECK(grouped.signature.find("dense") == std::string::npos);

  // Predicted: the model's FLOPs are the routed ones (MFU x time the same),
  // the hardware's count the rest (HFU above MFU without recompute).
  const ClusterSpec c = test::round_cluster(1, 2);
  const Prediction g = predict(*m, parse_plan("seq_len: 64\nmicro_batch: 1\n", "p.yaml"), c);
  const Prediction d = predict(*m, parse_plan("seq_len: 64\nmicro_batch: 1\nmoe_experts: dense\n", "p.yaml"), c);
  CHECK(d.iteration_time > g.iteration_time);
  CHECK(d.mfu * static_cast<double>(d.iteration_time) == Approx(g.mfu * static_cast<double>(g.iteration_time)).epsilon(1e-9));
  CHECK(g.hfu == Approx(g.mfu).epsilon(1e-12));
  CHECK(d.hfu > d.mfu);
  CHECK(d.plan.moe_experts == MoeExperts::kDense);

  // The rules table offers no expert parallelism to dense experts (the search asks it).
  const PlanRules rules(*m, test::round_cluster(1, 4));
  CHECK(rules.ep_values(1, 1, 4, 1) == std::vector<int>{1, 2, 4});
  CHECK(rules.ep_values(1, 1, 4, 1, MoeExperts::kDense) == std::vector<int>{1});
  // Nor a choice of dispatcher (it dispatches nothing).
  CHECK(rules.dispatcher_values(1, 2, MoeExperts::kDense) == std::vector<MoeDispatcher>{MoeDispatcher::kAllToAll});
  // What dense rules out, one line each.
  const ClusterSpec four = test::round_cluster(1, 4);
  CHECK_THAT(error_of([&] { resolve(parse_plan("ep: 2\nmoe_experts: dense\n", "p.yaml"), *m, four); }),
             Catch::Contains("plan.moe_experts: dense runs every expert on every rank's tokens") && Catch::Contains("set ep: 1"));
  CHECK_THAT(error_of([&] { resolve(parse_plan("moe_capacity_factor: 1\nmoe_experts: dense\n", "p.yaml"), *m, four); }),
             Catch::Contains("no capacity to drop at"));
  CHECK_THAT(error_of([&] { resolve(parse_plan("moe_imbalance: 2\nmoe_experts: dense\n", "p.yaml"), *m, four); }),
             Catch::Contains("moe_imbalance must be 1"));
  CHECK_THAT(error_of([] { parse_plan("moe_experts: sparse\n", "p.yaml"); }), Catch::Contains("plan.moe_experts") && Catch::Contains("grouped"));
}

// Note [Expert-parallel overlap] (lowering/layer_stage.cpp): Megatron-Core's
// combined 1F1B. moe-tiny's two MoE blocks each send 3 all-to-all flows
// forward (token counts, dispatch, combine) and 2 backward, every flow 10 us
// under FixedComm: 30 us and 20 us a block. At 1 s a GFLOP every layer's
// pass takes milliseconds, so an all-to-all beside the other micro-batch's
// pass is hidden. Of m micro-batches, the lone first forward and last
// backward hide none; the m - 1 combined steps hide the forward's of
// micro-batches 1 .. m-1 and the backward's of 0 .. m-2: (m - 1) x 2 blocks
// x (30 + 20) us. Nothing else moves (no interference: the round device has
// comm_slowdown 0; the gradients are reduced in the last backward either way).
TEST_CASE("overlap_moe_expert_parallel_comm hides each all-to-all under the other micro-batch's pass", "[moe]") {
  const auto m = models::load_model("moe-tiny");
  const ClusterSpec c = test::round_cluster(1, 4);
  const FixedComm comm(10'000);
  const std::string base = "ep: 4\nmicro_batch: 1\nseq_len: 128\nprecision: fp16\ngrad_accum: 3\n";
  const test::PlanRun off = test::run_plan(*m, base, c, comm, 1'000'000'000);
  const test::PlanRun on = test::run_plan(*m, base + "overlap_moe_expert_parallel_comm: true\n", c, comm, 1'000'000'000);
  CHECK(on.plan.overlap_moe_expert_parallel_comm);
  CHECK(off.exec.makespan - on.exec.makespan == (3 - 1) * 2 * (30'000 + 20'000));
  // The all-to-alls run on their own stream, and the compute stream does
  // the same work in the other order: F0, then F1 beside B0, F2 beside B1, B2.
  const int ep_stream = static_cast<int>(std::find(on.graph.ranks[0].streams.begin(), on.graph.ranks[0].streams.end(), "ep comm") -
                                         on.graph.ranks[0].streams.begin());
  REQUIRE(ep_stream < static_cast<int>(on.graph.ranks[0].streams.size()));
  std::vector<std::string> compute_order;
  for (const Task& t : on.graph.tasks) {
    if (t.axis == Axis::kEp) CHECK(t.stream == ep_stream);
    if (t.kind == TaskKind::kCompute && t.stream == 0 && t.phase != Phase::kOptimizer) {
      compute_order.push_back(t.name.substr(0, 3) + t.name.substr(t.name.find("[mb")));
    }
  }
  const std::vector<std::string> expect = {
      "fwd[mb 0]", "fwd[mb 0]", "fwd[mb 0]", "fwd[mb 0]",                                      // F0 alone
      "fwd[mb 1]", "bwd[mb 0]", "fwd[mb 1]", "bwd[mb 0]", "fwd[mb 1]", "bwd[mb 0]", "fwd[mb 1]", "bwd[mb 0]",  // F1 | B0
      "fwd[mb 2]", "bwd[mb 1]", "fwd[mb 2]", "bwd[mb 1]", "fwd[mb 2]", "bwd[mb 1]", "fwd[mb 2]", "bwd[mb 1]",  // F2 | B1
      "bwd[mb 2]", "bwd[mb 2]", "bwd[mb 2]", "bwd[mb 2]"};                                     // B2 alone
  CHECK(compute_order == expect);
  // The forward of m + 1 keeps its layers as the backward of m frees its
  // own, layer for layer, so the peak (the LM head's backward, all of m's
  // activations and the head's workspace) gains only what m + 1's first
  // layer keeps beside it: its embedding, which keeps nothing it allocates.
  CHECK(on.peak_activations(0) == off.peak_activations(0));

  // Not a boolean: one line naming the key and what is valid.
  CHECK_THAT(error_of([] { parse_plan("overlap_moe_expert_parallel_comm: maybe\n", "p.yaml"); }),
             Catch::Contains("p.yaml:1") && Catch::Contains("plan.overlap_moe_expert_parallel_comm"));
  // What Megatron-Core's transformer_config.py asserts: one line each.
  const ClusterSpec eight = test::round_cluster(1, 8);
  CHECK_THAT(error_of([&] { resolve(parse_plan("ep: 1\noverlap_moe_expert_parallel_comm: true\n", "p.yaml"), *m, c); }),
             Catch::Contains("plan.overlap_moe_expert_parallel_comm") && Catch::Contains("ep > 1"));
  CHECK_THAT(error_of([&] { resolve(parse_plan("ep: 4\npp: 2\noverlap_moe_expert_parallel_comm: true\n", "p.yaml"), *m, eight); }),
             Catch::Contains("schedule: interleaved") && Catch::Contains("the schedule is 1f1b"));
  CHECK_THAT(error_of([&] { resolve(parse_plan("ep: 4\nrecompute: full\nprecision: bf16\noverlap_moe_expert_parallel_comm: true\n", "p.yaml"), *m, c); }),
             Catch::Contains("recompute: full"));
  CHECK_THAT(error_of([&] { resolve(parse_plan("ep: 4\nprecision: fp32\noverlap_moe_expert_parallel_comm: true\n", "p.yaml"), *m, c); }),
             Catch::Contains("16-bit"));
  CHECK_THAT(error_of([&] { resolve(parse_plan("ep: 4\nprecision: bf16\nmoe_dispatcher: allgather\noverlap_moe_expert_parallel_comm: true\n", "p.yaml"), *m, c); }),
             Catch::Contains("plan.overlap_moe_expert_parallel_comm") && Catch::Contains("alltoall or deepep dispatcher"));
  CHECK(PlanRules::ep_overlap_values(4, 1, Schedule::k1f1b, Recompute::kSelective, Precision::kFp8, false) == std::vector<bool>{false, true});
  CHECK(PlanRules::ep_overlap_values(4, 2, Schedule::k1f1b, Recompute::kNone, Precision::kBf16, false) == std::vector<bool>{false});
  CHECK(PlanRules::ep_overlap_values(4, 2, Schedule::kInterleaved, Recompute::kNone, Precision::kBf16, false) ==
        std::vector<bool>{false, true});
  CHECK(PlanRules::ep_overlap_values(4, 1, Schedule::k1f1b, Recompute::kNone, Precision::kBf16, true) == std::vector<bool>{false});
  // Megatron-Core asserts the alltoall or flex dispatcher (transformer_config.py).
  CHECK(PlanRules::ep_overlap_values(4, 1, Schedule::k1f1b, Recompute::kNone, Precision::kBf16, false, MoeDispatcher::kAllGather) ==
        std::vector<bool>{false});
  CHECK(PlanRules::ep_overlap_values(4, 1, Schedule::k1f1b, Recompute::kNone, Precision::kBf16, false, MoeDispatcher::kDeepEp) ==
        std::vector<bool>{false, true});
  CHECK_THAT(error_of([&] { resolve(parse_plan("ep: 4\nprecision: fp16\nzero_stage: 3\noverlap_moe_expert_parallel_comm: true\n", "p.yaml"), *m, c); }),
             Catch::Contains("sharded parameters"));
  CHECK_THAT(error_of([&] { resolve(parse_plan("ep: 4\nprecision: fp16\nfsdp: full_shard\noverlap_moe_expert_parallel_comm: true\n", "p.yaml"), *m, c); }),
             Catch::Contains("sharded parameters"));
  // Megatron-LM's flag (store_true, megatron/training/arguments.py).
  const FrameworkConfig fc = parse_megatron_args("--micro-batch-size 1 --num-experts 8 --overlap-moe-expert-parallel-comm", "cmd");
  bool found = false;
  for (const auto& o : fc.overrides) found |= o.section == "plan" && o.path == "overlap_moe_expert_parallel_comm" && o.value == "true";
  CHECK(found);
}

// Note [Expert-parallel overlap] in an interleaved pipeline
// (combined_1f1b_schedule_for_interleaved_pipelining): Megatron-Core runs
// one more warm-up forward on every stage (get_pp_rank_microbatches: "one
// extra micro-batch forward step before the 1f1b stages"), then each 1F1B
// step's forward beside its backward. Stage 0 of 2 with 2 chunks a stage
// warms up with (2 - 0 - 1) x 2 + (2 - 1) x 2 = 4 forwards, 5 with the
// overlap; the last stage with 2, then 3. Before the first backward comes
// one forward more, the first 1F1B step's.
TEST_CASE("overlap_moe_expert_parallel_comm in an interleaved pipeline: one more warm-up forward, each 1F1B step's pair overlapped",
          "[moe][pipeline]") {
  auto before_first_backward = [](int stage, bool overlap) {
    int n = 0;
    for (const PipeStep& st : pipeline_order(Schedule::kInterleaved, 2, 2, stage, 8, overlap)) {
      if (!st.forward) break;
      ++n;
    }
    return n;
  };
  CHECK(before_first_backward(0, false) == 4 + 1);
  CHECK(before_first_backward(0, true) == 5 + 1);
  CHECK(before_first_backward(1, false) == 2 + 1);
  CHECK(before_first_backward(1, true) == 3 + 1);
  // Every forward and backward once either way.
  CHECK(pipeline_order(Schedule::kInterleaved, 2, 2, 0, 8, true).size() == 2 * 2 * 8);

  // moe-tiny's 4 layers as 2 stages of 2 one-layer chunks, 4 GPUs a stage
  // with the experts over all 4, each all-to-all flow 2 ms (FixedComm): a
  // MoE chunk's 6 and 4 ms of all-to-alls are as long as its passes at 0.1
  // s a GFLOP, so hiding them under the other pass outweighs the extra
  // warm-up forward.
  const auto m = models::load_model("moe-tiny");
  const ClusterSpec c = test::round_cluster(1, 8);
  const FixedComm comm(2'000'000);
  const std::string base = "ep: 4\npp: 2\nschedule: interleaved\nvirtual_stages: 2\nmicro_batch: 1\nseq_len: 128\n"
                           "precision: fp16\ngrad_accum: 8\n";
  const test::PlanRun off = test::run_plan(*m, base, c, comm, 100'000'000);
  const test::PlanRun on = test::run_plan(*m, base + "overlap_moe_expert_parallel_comm: true\n", c, comm, 100'000'000);
  CHECK(on.exec.makespan < off.exec.makespan);
  int on_stream = 0;
  for (const Task& t : on.graph.tasks) {
    if (t.axis != Axis::kEp) continue;
    CHECK(on.graph.ranks[static_cast<std::size_t>(t.rank)].streams[static_cast<std::size_t>(t.stream)] == "ep comm");
    ++on_stream;
  }
  CHECK(on_stream == 8 * 2 * 2);  // 8 micro-batches, 2 MoE chunks, forward and backward
  // Refused where Megatron refuses it: a pipeline without virtual stages.
  CHECK_THAT(error_of([&] {
               resolve(parse_plan("ep: 4\npp: 2\nschedule: 1f1b\nprecision: fp16\noverlap_moe_expert_parallel_comm: true\n", "p.yaml"), *m, c);
             }),
             Catch::Contains("plan.overlap_moe_expert_parallel_comm") && Catch::Contains("schedule: interleaved"));

  // The steady state once (Note [Steady state]) predicts it as the full
  // simulation does: the new stream and the warm-up's and cool-down's
  // waits repeat with the schedule.
  const ClusterSpec h100 = load_cluster("dgx-h100", {});
  PlanSpec plan = parse_plan("ep: 4\npp: 2\nschedule: interleaved\nvirtual_stages: 2\nmicro_batch: 1\nseq_len: 128\n"
                             "precision: bf16\nmicro_batches: 256\noverlap_moe_expert_parallel_comm: true\n", "p.yaml");
  PredictOptions full;
  full.unabridged = true;
  const Prediction a = predict(*m, plan, h100);
  const Prediction b = predict(*m, plan, h100, full);
  CHECK(a.abridged_to > 0);
  CHECK(b.abridged_to == 0);
  CHECK(a.iteration_time == b.iteration_time);
  CHECK(a.breakdown.exposed_comm == b.breakdown.exposed_comm);
  CHECK(a.events == b.events);
  REQUIRE(a.ranks.size() == b.ranks.size());
  for (std::size_t r = 0; r < a.ranks.size(); ++r) CHECK(a.ranks[r].peak == b.ranks[r].peak);
  // The table's plan line and the JSON say so.
  CHECK_THAT(format_table(a), Catch::Contains(" a2a-overlap"));
  CHECK_THAT(to_json(a), Catch::Contains("\"overlap_moe_expert_parallel_comm\": true"));
}

TEST_CASE("recompute_modules moe reruns the MoE layer's all-to-alls with its kernels (Note [Recompute modules])", "[moe][recompute]") {
  const auto m = models::load_model("moe-tiny");
  const ClusterSpec c = test::round_cluster(1, 4);
  const test::FixedCompute compute(1'000'000);
  const FixedComm comm(10'000);
  auto plan = [&](const std::string& modules) {
    return resolve(parse_plan("ep: 4\nmicro_batch: 1\nseq_len: 128\nprecision: fp16\nattention: flash\nrecompute: selective\n"
                              "recompute_modules: " + modules + "\n", "p.yaml"),
                   *m, c);
  };
  auto kernels = [&](const Layer& l) {
    TimeNs t = 0;
    for (const Kernel& k : l.attention_core) t += compute.kernel_time(k, Precision::kFp16) * k.repeat;
    return t;
  };
  const ResolvedPlan whole_plan = plan("[moe]"), act_plan = plan("[moe_act]");
  const PricedLayers whole = price_layers(*m, whole_plan, c, compute, comm), act = price_layers(*m, act_plan, c, compute, comm);
  const Layer& block = whole.layers[1];
  REQUIRE(block.is_block());
  REQUIRE(block.recompute_ep);
  // The layer's kernels and its forward's three all-to-alls (the counts,
  // dispatch, combine), 10 us each; moe_act reruns its activation alone.
  CHECK(whole.recompute[1] == kernels(block) + 3 * 10'000);
  CHECK_FALSE(act.layers[1].recompute_ep);
  CHECK(act.recompute[1] == kernels(act.layers[1]));
  CHECK(kernels(act.layers[1]) < kernels(block));
  // The lowering's recompute task, one a block and micro-batch, lasts as long.
  ResolvedPlan p = whole_plan;
  partition(p, *m, c, compute, comm);
  const TaskGraph g = lower(*m, p, c, CostModels{&compute, &comm});
  int tasks = 0;
  for (const Task& t : g.tasks) {
    if (t.name.find("recompute") == std::string::npos || t.name.find("layers.0") == std::string::npos) continue;
    ++tasks;
    CHECK(t.duration == kernels(block) + 3 * 10'000);
  }
  CHECK(tasks == 1);
}
