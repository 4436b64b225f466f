// FP8 training (Note [FP8 training] and Note [FP8 casts] in
// sim/src/cost/cost_compute.cpp, Note
// [FP8 memory] in sim/src/lowering/emitter.hpp) and the devices that have
// it. Every expected value is worked out below from the datasheet figures
// device_db.cpp cites, or from the formulas of those notes.
#include <catch2/catch.hpp>

#include "test_util.hpp"

#include <algorithm>
#include <functional>
#include <memory>
#include <string>

#include "dtsim/models/models.hpp"
#include "dtsim/sim/config_io.hpp"
#include "dtsim/sim/cost.hpp"
#include "dtsim/sim/cost_profile.hpp"
#include "dtsim/sim/error.hpp"
#include "dtsim/sim/executor.hpp"
#include "dtsim/sim/lowering.hpp"
#include "dtsim/sim/partition.hpp"
#include "dtsim/sim/predict.hpp"
#include "dtsim/sim/rules.hpp"
#include "fake_model.hpp"

using namespace dtsim;
using namespace dtsim::sim;

namespace {

const DeviceSpec& device(const char* name) {
  const DeviceSpec* d = find_device(name);
  REQUIRE(d != nullptr);
  return *d;
}

/// A GEMM of (m, k) x (k, n), as models/ describes one in bf16.
Kernel gemm(std::int64_t m, std::int64_t n, std::int64_t k, KernelKind kind = KernelKind::kGemm) { return test::gemm_kernel(m, n, k, kind); }

/// `blocks` transformer blocks, each one Linear of k x n = `weights`
/// elements (its only parameters), after an embedding of `embedding`
/// parameters, which is no FP8 GEMM.
class LinearModel final : public Model {
 public:
  LinearModel(int blocks, std::int64_t k, std::int64_t n, std::int64_t embedding)
      : blocks_(blocks), k_(k), n_(n), embedding_(embedding) {}
  std::string name() const override { return "linear"; }
  std::int64_t parameters() const override { return blocks_ * k_ * n_ + embedding_; }
  int blocks() const override { return blocks_; }
  std::int64_t max_seq_len() const override { return 1024; }
  std::string tp_error(int tp) const override { return tp == 1 ? "" : "no tensor-parallel split"; }
  std::vector<Layer> layers(const WorkloadShape& s) const override {
    std::vector<Layer> out;
    Layer e;
    e.name = "embedding";
    e.kind = LayerKind::kEmbedding;
    e.params = embedding_;
    Kernel lookup;
    lookup.kind = KernelKind::kEmbedding;
    lookup.flops = 1e9;
    e.forward = {lookup};
    e.backward = {lookup};
    out.push_back(e);
    for (int i = 0; i < blocks_; ++i) {
      Layer l;
      l.name = "block" + std::to_string(i);
      l.kind = LayerKind::kTransformer;
      l.params = k_ * n_;
      const Kernel f = gemm(s.micro_batch * s.seq_len, n_, k_);
      l.forward = {f};
      l.backward = {f, f};
      out.push_back(l);
    }
    return out;
  }
  Flops model_flops(const WorkloadShape& s) const override {
    return 3.0 * 2.0 * static_cast<double>(blocks_ * k_ * n_ * s.micro_batch * s.seq_len);
  }

 private:
  int blocks_;
  std::int64_t k_, n_, embedding_;
};

/// 2 GPUs of `dev` with round links (test::round_cluster's).
ClusterSpec cluster_of(const DeviceSpec& dev) {
  ClusterSpec c = test::round_cluster();
  c.device = dev;
  return c;
}

struct Lowered {
  TaskGraph graph;
  ExecResult exec;
  /// Bytes of every all-gather.
  Bytes gathered() const {
    Bytes b = 0;
    for (const Task& t : graph.tasks) {
      if (t.kind == TaskKind::kCollective && t.op == CollectiveOp::kAllGather) b += t.bytes;
    }
    return b;
  }
  Bytes resident(MemCategory c) const {
    Bytes b = 0;
    for (const auto& [category, bytes] : graph.ranks.at(0).resident) {
      if (category == c) b += bytes;
    }
    return b;
  }
};

Lowered lower_plan(const Model& m, const std::string& plan_yaml, const ClusterSpec& c) {
  ResolvedPlan plan = resolve(parse_plan(plan_yaml, "test.yaml"), m, c);
  const test::FixedCompute compute(1000);
  const AnalyticCommModel comm(c);
  partition(plan, m, c, compute, comm);
  Lowered r;
  r.graph = lower(m, plan, c, CostModels{&compute, &comm});
  r.exec = execute(r.graph);
  return r;
}

std::string error_of(const std::function<void()>& f) {
  try {
    f();
  } catch (const ConfigError& e) {
    return e.what();
  }
  return "";
}

}  // namespace

TEST_CASE("fp8: the devices' FP8 peaks as their datasheets give them", "[fp8][config]") {
  // H100 SXM5 datasheet: FP8 3,958 TFLOP/s with sparsity, half dense; BF16
  // 1,979 / 2. H200 and GH200's 96GB H100 have the same compute.
  for (const char* name : {"H100-SXM", "H100-96GB", "H200"}) {
    INFO(name);
    CHECK(device(name).peak_fp8 == Approx(3957.8e12 / 2));
    CHECK(device(name).peak_bf16 == Approx(1978.8e12 / 2));
  }
  // GH200 datasheet: 96GB HBM3 at 4 TB/s.
  CHECK(device("H100-96GB").memory == 96 * kGiB);
  CHECK(device("H100-96GB").memory_bandwidth == Approx(4.0e12));
  // HGX B200, 8 GPUs: FP8 72 and FP16/BF16 36 PFLOP/s with sparsity, TF32
  // 18, FP32 600 TFLOP/s, 64 TB/s of HBM3e: per GPU dense 72/8/2 = 4.5,
  // 36/8/2 = 2.25, 18/8/2 = 1.125 PFLOP/s, 0.6/8 = 0.075 and 8 TB/s.
  const DeviceSpec& b200 = device("B200");
  CHECK(b200.peak_fp8 == Approx(72e15 / 8 / 2));
  CHECK(b200.peak_bf16 == Approx(36e15 / 8 / 2));
  CHECK(b200.peak_fp16 == Approx(36e15 / 8 / 2));
  CHECK(b200.peak_tf32 == Approx(18e15 / 8 / 2));
  CHECK(b200.peak_fp32 == Approx(600e12 / 8));
  CHECK(b200.memory_bandwidth == Approx(64e12 / 8));
  CHECK(b200.compute_units == 148);
  // MI300X data sheet: FP8 5,229.8 and FP16/BF16 2,614.9 TFLOP/s with
  // sparsity (2,614.9 and 1,307.4 dense), FP32 163.4, 192 GB HBM3 at
  // 5.3 TB/s, 304 CUs.
  const DeviceSpec& mi = device("MI300X");
  CHECK(mi.peak_fp8 == Approx(5229.8e12 / 2));
  CHECK(mi.peak_bf16 == Approx(2614.9e12 / 2).epsilon(1e-4));
  CHECK(mi.peak_fp32 == Approx(163.4e12));
  CHECK(mi.memory == 192 * kGiB);
  CHECK(mi.memory_bandwidth == Approx(5.3e12));
  CHECK(mi.compute_units == 304);
  // Ampere and older have no FP8 tensor cores.
  for (const char* name : {"A100-SXM4-80GB", "A100-SXM4-40GB", "V100-SXM2-16GB", "RTX-2080-Ti", "P100", "K80", "cpu"}) {
    INFO(name);
    CHECK(device(name).peak_fp8 == 0);
  }
  CHECK(std::string(to_string(Precision::kFp8)) == "fp8");
  // Under fp8 the weights, gradients and activations stay bf16.
  CHECK(element_bytes(Precision::kFp8) == 2);
}

TEST_CASE("fp8: the shipped B200 and MI300X clusters", "[fp8][config]") {
  // DGX B200: NVLink5 1.8 TB/s per GPU both ways = 900 GB/s per direction;
  // 8 x 400 Gb/s = 50 GB/s NICs.
  const ClusterSpec b = load_cluster("dgx-b200");
  CHECK(b.device.name == "B200");
  CHECK(b.gpus() == 8);
  CHECK(b.intra_node.bandwidth == Approx(900e9));
  CHECK(b.inter_node.bandwidth == Approx(400e9 / 8));
  CHECK(b.nics_per_node == 8);
  // MI300X: 7 Infinity Fabric links of 128 GB/s both ways, 64 each way.
  const ClusterSpec m = load_cluster("mi300x");
  CHECK(m.device.name == "MI300X");
  CHECK(m.intra_node.bandwidth == Approx(7 * 64e9));
  CHECK(m.intra_node.type == "xgmi");
  CHECK(m.nics_per_node == 8);
  // A cluster may give a device FP8 peak of its own, as it does the others.
  const ClusterSpec own = parse_cluster(
      "name: x\ndevice: {base: A100-SXM4-80GB, peak_fp8_TFLOPs: 624}\nintra_node: {type: nvlink, bandwidth_GBps: 300}\n", "x.yaml");
  CHECK(own.device.peak_fp8 == Approx(624e12));
}

TEST_CASE("fp8: a large GEMM runs at the FP8 rate, after its input's cast", "[fp8][compute]") {
  const DeviceSpec& h100 = device("H100-SXM");
  const RooflineComputeModel m(h100);
  // 16384 x 16384 output in 128 x 128 tiles: 16384 tiles over 132 SMs, 125
  // waves, the last partly empty: 16384 / (125 x 132); k = 8192: 8192 / (8192 + 48).
  const Kernel k = gemm(16384, 16384, 8192);
  const double eff = 0.70 * (16384.0 / (125 * 132)) * (8192.0 / (8192 + 48));
  CHECK(m.gemm_efficiency(16384, 16384, 8192) == Approx(eff));
  // 4.4e12 FLOPs: 6.4 ms at 989.4 TFLOP/s x eff, against 1.07 GB moved in
  // 0.4 ms at 3.35 TB/s x 0.8: compute bound in either precision.
  const TimeNs launch = h100.kernel_launch;
  const TimeNs bf16 = m.kernel_time(k, Precision::kBf16);
  CHECK(bf16 == seconds_to_ns(k.flops / (989.4e12 * eff)) + launch);
  // TE's cast-transpose of the (m, k) input on a Hopper: 16384 x 8192
  // elements read at 2 bytes, written at 1 twice (the copy and its
  // transpose for wgrad), at 3.35 TB/s x 0.8: 200.3 us, and its own launch.
  const TimeNs cast = seconds_to_ns(16384.0 * 8192 * 4 / (3.35e12 * 0.8)) + launch;
  CHECK(fp8_cast_time(k, Precision::kFp8, h100) == cast);
  CHECK(ns_to_seconds(cast - launch) == Approx(200.3e-6).epsilon(1e-3));
  const TimeNs fp8 = m.kernel_time(k, Precision::kFp8);
  CHECK(fp8 == seconds_to_ns(k.flops / (1978.9e12 * eff)) + launch + cast);
  // Compute bound, the GEMM itself speeds up by the peaks' ratio: 1978.9 / 989.4.
  CHECK(static_cast<double>(bf16 - launch) / static_cast<double>(fp8 - launch - cast) == Approx(1978.9 / 989.4).epsilon(1e-6));
  // No cast outside fp8.
  CHECK(fp8_cast_time(k, Precision::kBf16, h100) == 0);
  // Current scaling (fp8_recipe tensorwise) reads the input once more for
  // its amax, 2 bytes an element, and launches the amax and the scale's
  // kernels before the cast: 6 bytes an element, 300.5 us, 3 launches.
  DeviceSpec current = h100;
  current.fp8_recipe = Fp8Recipe::kTensorwise;
  const TimeNs cs = fp8_cast_time(k, Precision::kFp8, current);
  CHECK(cs == seconds_to_ns(16384.0 * 8192 * 6 / (3.35e12 * 0.8)) + 3 * launch);
  CHECK(ns_to_seconds(cs - 3 * launch) == Approx(300.5e-6).epsilon(1e-3));
  CHECK(fp8_cast_time(k, Precision::kBf16, current) == 0);
}

// Note [FP8 casts]: one cast writes every copy a Linear's GEMMs read of a
// tensor, so the forward's and dgrad's are charged and wgrad's none.
TEST_CASE("fp8: what a cast moves, by recipe and GPU, and wgrad's none", "[fp8][compute]") {
  // Read 2, write 1; Hopper's transpose 1 more; mxfp8's column-wise copy 1
  // and a scale byte per 32 elements for each of the two copies; current
  // scaling's amax read 2.
  CHECK(fp8_cast_bytes(Fp8Recipe::kDelayed, 90) == 4);
  CHECK(fp8_cast_bytes(Fp8Recipe::kTensorwise, 90) == 6);
  CHECK(fp8_cast_bytes(Fp8Recipe::kDelayed, 100) == 3);
  CHECK(fp8_cast_bytes(Fp8Recipe::kTensorwise, 103) == 5);
  CHECK(fp8_cast_bytes(Fp8Recipe::kMxfp8, 100) == 2 + 1 + 1 + 2.0 / 32);
  // The MI300X has no NVIDIA compute capability: priced as a Hopper.
  CHECK(fp8_cast_bytes(Fp8Recipe::kDelayed, 0) == 4);
  DeviceSpec b200 = device("B200");
  REQUIRE(b200.compute_capability == 100);
  // models/'s backward of a Linear: dgrad's (m, k) is the output's gradient,
  // wgrad's the transposed input, which the forward's cast already wrote.
  Kernel dgrad = gemm(8192, 4096, 14336);
  dgrad.name = "mlp.fc2.dgrad";
  Kernel wgrad = gemm(4096, 14336, 8192);
  wgrad.name = "mlp.fc2.wgrad";
  const TimeNs launch = b200.kernel_launch;
  // B200, 8 TB/s x 0.8; delayed scaling: 8192 x 14336 x 3 bytes, 55.1 us.
  const TimeNs delayed = fp8_cast_time(dgrad, Precision::kFp8, b200);
  CHECK(delayed == seconds_to_ns(8192.0 * 14336 * 3 / (8e12 * 0.8)) + launch);
  CHECK(ns_to_seconds(delayed - launch) == Approx(55.05e-6).epsilon(1e-3));
  CHECK(fp8_cast_time(wgrad, Precision::kFp8, b200) == 0);
  b200.fp8_recipe = Fp8Recipe::kMxfp8;
  CHECK(fp8_cast_time(dgrad, Precision::kFp8, b200) == seconds_to_ns(8192.0 * 14336 * 4.0625 / (8e12 * 0.8)) + launch);
  CHECK(fp8_cast_time(wgrad, Precision::kFp8, b200) == 0);
}

TEST_CASE("fp8: mxfp8's GEMMs run 7.161 / 6.812 as long as per-tensor FP8's", "[fp8][compute]") {
  DeviceSpec b200 = device("B200");
  const RooflineComputeModel per_tensor(b200);
  b200.fp8_recipe = Fp8Recipe::kMxfp8;
  const RooflineComputeModel mx(b200);
  // 16384 x 16384 output: 16384 tiles on 148 SMs, 111 waves; k 8192. 4.4e12
  // FLOPs at 4,500 TFLOP/s x 0.70 x the shape's efficiency, then x 1.0512
  // (TE's GEMM profiling tutorial, B300, pre-quantised: 7.161 ms MXFP8
  // against 6.812 ms per-tensor FP8 with current scaling).
  const Kernel k = gemm(16384, 16384, 8192);
  const double eff = 0.70 * (16384.0 / (111 * 148)) * (8192.0 / (8192 + 48));
  CHECK(mx.gemm_efficiency(16384, 16384, 8192) == Approx(eff));
  const TimeNs launch = b200.kernel_launch;
  const TimeNs cast = seconds_to_ns(16384.0 * 8192 * (4 + 1.0 / 16) / (8e12 * 0.8)) + launch;
  CHECK(mx.kernel_time(k, Precision::kFp8) == seconds_to_ns(k.flops / (4500e12 * eff) * (7.161 / 6.812)) + launch + cast);
  const TimeNs pt_cast = seconds_to_ns(16384.0 * 8192 * 3 / (8e12 * 0.8)) + launch;
  CHECK(per_tensor.kernel_time(k, Precision::kFp8) == seconds_to_ns(k.flops / (4500e12 * eff)) + launch + pt_cast);
  // bf16 and the bf16 kernels of an fp8 plan do not change.
  CHECK(mx.kernel_time(k, Precision::kBf16) == per_tensor.kernel_time(k, Precision::kBf16));
  const Kernel scores = gemm(2048, 2048, 128, KernelKind::kAttention);
  CHECK(mx.kernel_time(scores, Precision::kFp8) == per_tensor.kernel_time(scores, Precision::kFp8));
}

TEST_CASE("fp8: mxfp8 on Blackwell only, its copies and its bf16 gathers (Note [FP8 memory])", "[fp8][memory][bad-input]") {
  const LinearModel m(4, 1000, 1000, 1'000'000);
  const ClusterSpec h100 = cluster_of(device("H100-SXM"));
  const ClusterSpec b200 = cluster_of(device("B200"));
  const ClusterSpec gb300 = cluster_of(device("GB300"));
  // TE's _compute_mxfp8_support: compute capability 10.x only.
  CHECK(PlanRules(m, h100).fp8_recipes(Precision::kFp8) == std::vector<Fp8Recipe>{Fp8Recipe::kDelayed, Fp8Recipe::kTensorwise});
  const std::vector<Fp8Recipe> all{Fp8Recipe::kDelayed, Fp8Recipe::kTensorwise, Fp8Recipe::kMxfp8};
  CHECK(PlanRules(m, b200).fp8_recipes(Precision::kFp8) == all);
  CHECK(PlanRules(m, gb300).fp8_recipes(Precision::kFp8) == all);
  CHECK(PlanRules(m, b200).fp8_recipes(Precision::kBf16) == std::vector<Fp8Recipe>{Fp8Recipe::kDelayed});
  CHECK(error_of([&] { resolve(parse_plan("dp: 2\nprecision: fp8\nfp8_recipe: mxfp8\n", "p.yaml"), m, h100); }) ==
        "p.yaml:3: plan.fp8_recipe: mxfp8 needs Blackwell's block-scaled tensor cores (compute capability 10.x); H100-SXM has "
        "compute capability 9.0; valid: delayed, tensorwise");
  CHECK(error_of([&] { resolve(parse_plan("precision: bf16\nfp8_recipe: mxfp8\n", "p.yaml"), m, b200); }) ==
        "p.yaml:2: plan.fp8_recipe: mxfp8 scales FP8 casts and needs precision fp8; precision is bf16 (valid here: delayed, the default)");
  CHECK(parse_plan("fp8_recipe: mxfp8\n", "p.yaml").fp8_recipe == Fp8Recipe::kMxfp8);
  CHECK(std::string(to_string(Fp8Recipe::kMxfp8)) == "mxfp8");
  // The FP8 weight copies of the 4 x 10^6 GEMM weights (dp 2, ZeRO-1): on a
  // B200 per-tensor scaling keeps one (1 B: its GEMM reads either layout),
  // mxfp8 two with a scale byte per 32 elements each (2 + 2/32 B); plus the
  // bf16 parameters (2 Psi, Psi = 5 x 10^6) and 4 GEMMs' scaling state.
  const std::string zero1 = "dp: 2\nprecision: fp8\noptimizer: adam\nzero_stage: 1\nseq_len: 8\n";
  const Bytes psi2 = 2 * 5'000'000, state = 4 * 20'520;
  CHECK(lower_plan(m, zero1, b200).resident(MemCategory::kParameters) == psi2 + 4'000'000 + state);
  CHECK(lower_plan(m, zero1 + "fp8_recipe: tensorwise\n", b200).resident(MemCategory::kParameters) == psi2 + 4'000'000 + state);
  CHECK(lower_plan(m, zero1 + "fp8_recipe: mxfp8\n", b200).resident(MemCategory::kParameters) == psi2 + 8'250'000 + state);
  // ZeRO-1's gather of the updated parameters under fp8_param_gather: the
  // 4 x 10^6 GEMM weights at 1 byte under per-tensor scaling, 2 + 4 = 6 MB;
  // mxfp8's in bf16 (Megatron-Core gathers them into the gradient buffer
  // and quantises after): 2 Psi = 10 MB.
  CHECK(lower_plan(m, zero1 + "fp8_param_gather: true\n", b200).gathered() == 6'000'000);
  CHECK(lower_plan(m, zero1 + "fp8_param_gather: true\nfp8_recipe: mxfp8\n", b200).gathered() == 10'000'000);
}

TEST_CASE("fp8: fp8_recipe tensorwise prices current scaling's amax pass in a prediction", "[fp8][compute]") {
  const LinearModel m(4, 1000, 1000, 1'000'000);
  const ClusterSpec c = cluster_of(device("H100-SXM"));
  CHECK(parse_plan("", "p.yaml").fp8_recipe == Fp8Recipe::kDelayed);  // Megatron-LM's default
  const std::string base = "dp: 2\nprecision: fp8\nzero_stage: 1\nseq_len: 8\n";
  const ResolvedPlan delayed = resolve(parse_plan(base, "p.yaml"), m, c);
  const ResolvedPlan tensorwise = resolve(parse_plan(base + "fp8_recipe: tensorwise\n", "p.yaml"), m, c);
  CHECK(tensorwise.fp8_recipe == Fp8Recipe::kTensorwise);
  // Each block's FP8 GEMMs cost their casts' extra read in both passes;
  // the bf16 embedding nothing: the block priced dearer, the embedding alike.
  const PricedLayers a = price_plan_layers(m, delayed, c, {});
  const PricedLayers b = price_plan_layers(m, tensorwise, c, {});
  CHECK(b.forward[1] > a.forward[1]);
  CHECK(b.backward[1] > a.backward[1]);
  CHECK(b.forward[0] == a.forward[0]);
  CHECK(error_of([&] { resolve(parse_plan("precision: bf16\nfp8_recipe: tensorwise\n", "p.yaml"), m, c); }) ==
        "p.yaml:2: plan.fp8_recipe: tensorwise scales FP8 casts and needs precision fp8; precision is bf16 (valid here: delayed, the default)");
}

TEST_CASE("fp8: attention, memory-bound kernels and layers without FP8 GEMMs run as bf16", "[fp8][compute]") {
  const DeviceSpec& h100 = device("H100-SXM");
  const RooflineComputeModel m(h100);
  // Transformer Engine's attention stays bf16 (fp8_dpa off): same time, no cast.
  Kernel scores = gemm(2048, 2048, 128, KernelKind::kAttention);
  scores.batch = 256;
  CHECK(m.kernel_time(scores, Precision::kFp8) == m.kernel_time(scores, Precision::kBf16));
  CHECK(fp8_cast_time(scores, Precision::kFp8, h100) == 0);
  Kernel gelu;
  gelu.kind = KernelKind::kElementwise;
  gelu.bytes = 1 << 28;
  gelu.flops = 1e8;
  CHECK(m.kernel_time(gelu, Precision::kFp8) == m.kernel_time(gelu, Precision::kBf16));
  // Only transformer blocks have FP8 GEMMs: an LM head is priced as bf16.
  Layer head;
  head.kind = LayerKind::kLmHead;
  head.forward = {gemm(8192, 50304, 4096)};
  Layer block = head;
  block.kind = LayerKind::kTransformer;
  CHECK(kernel_precision(head, Precision::kFp8) == Precision::kBf16);
  CHECK(kernel_precision(block, Precision::kFp8) == Precision::kFp8);
  CHECK(kernel_precision(block, Precision::kBf16) == Precision::kBf16);
  const WorkloadShape shape;
  CHECK(m.layer_time(head, Pass::kForward, Precision::kFp8, shape) == m.layer_time(head, Pass::kForward, Precision::kBf16, shape));
  CHECK(m.layer_time(block, Pass::kForward, Precision::kFp8, shape) < m.layer_time(block, Pass::kForward, Precision::kBf16, shape));
}

TEST_CASE("fp8: a profile's bf16 layer times are not scaled to FP8 (Note [Profile lookups])", "[fp8][profile]") {
  const DeviceSpec& h100 = device("H100-SXM");
  Profile p;
  p.info["device_kind"] = "cuda";
  for (const char* sig : {"block", "head"}) {
    LayerSample s;
    s.signature = sig;
    s.precision = Precision::kBf16;
    s.micro_batch = 1;
    s.seq_len = 1024;
    s.forward.median_s = 1e-3;
    s.backward.median_s = 2e-3;
    p.layers.push_back(s);
  }
  CostSources sources;
  const ProfileComputeModel m(std::make_shared<const ProfileCosts>(p), h100, &sources);
  WorkloadShape shape;
  shape.seq_len = 1024;
  Layer head;
  head.kind = LayerKind::kLmHead;
  head.signature = "head";
  head.forward = {gemm(1024, 50304, 768)};
  Layer block = head;
  block.kind = LayerKind::kTransformer;
  block.signature = "block";
  // The head runs as bf16: its bf16 measurement stands.
  CHECK(m.layer_time(head, Pass::kForward, Precision::kFp8, shape) == 1 * kNsPerMs);
  // The block's FP8 GEMMs were never measured: its kernels are priced
  // (roofline, cast included), not 1 ms x 989.4 / 1978.9.
  const RooflineComputeModel roofline(h100);
  CHECK(m.layer_time(block, Pass::kForward, Precision::kFp8, shape) == roofline.kernel_time(block.forward[0], Precision::kFp8));
}

TEST_CASE("fp8: model states per parameter and Transformer Engine's FP8 copies (Note [FP8 memory])", "[fp8][memory]") {
  // As bf16 mixed precision: 2 B weights, 2 B gradients, 12 B of Adam
  // state (fp32 master, m, v; ZeRO paper section 3.1): 16 B a parameter.
  CHECK(optimizer_state_bytes_per_param(Optimizer::kAdam, Precision::kFp8) == 12);
  ResolvedPlan plan;
  plan.precision = Precision::kFp8;
  plan.optimizer = Optimizer::kAdam;
  CHECK(model_states(plan, 1'000'000).total() == 16'000'000);
  // 4 blocks of one 1000 x 1000 Linear (10^6 weights each) and an
  // embedding of 10^6: Psi = 5 x 10^6 on one GPU (dp 2, ZeRO-1).
  const LinearModel m(4, 1000, 1000, 1'000'000);
  const ClusterSpec c = cluster_of(device("H100-SXM"));
  const Lowered r = lower_plan(m, "dp: 2\nprecision: fp8\noptimizer: adam\nzero_stage: 1\nseq_len: 8\n", c);
  const std::int64_t psi = 5'000'000;
  // Parameters: 2 Psi in bf16, plus for the 4 x 10^6 FP8 GEMM weights an FP8
  // copy and its transpose (2 B each), plus per GEMM TE's scaling state:
  // (1024 amax + scale + scale_inv) x 5 tensors x 4 B = 20,520 B.
  const Bytes fp8_extra = 2 * 4'000'000 + 4 * 20'520;
  CHECK(r.resident(MemCategory::kParameters) == 2 * psi + fp8_extra);
  CHECK(r.resident(MemCategory::kOptimizer) == 12 * psi / 2);
  const MemSnapshot& peak = r.exec.memory[0].at_peak;
  // bf16 gradients; the peak is the step's, the rank's half of them and its
  // fp32 copy (Note [fp32 gradient partition]): 2 Psi / 2 + 4 Psi / 2.
  CHECK(peak.bytes[static_cast<int>(MemCategory::kGradients)] == 2 * psi / 2 + 4 * psi / 2);
  // The same plan in bf16 has none of it.
  const Lowered b = lower_plan(m, "dp: 2\nprecision: bf16\noptimizer: adam\nzero_stage: 1\nseq_len: 8\n", c);
  CHECK(b.resident(MemCategory::kParameters) == 2 * psi);
  // Megatron-LM's --fp8-param-gather keeps the GEMM weights in FP8 only:
  // the embedding's 10^6 in bf16, each block's 10^6 weights as FP8 data and
  // transpose (2 B), no bf16 copy; the scaling state as before.
  const Lowered primary = lower_plan(m, "dp: 2\nprecision: fp8\noptimizer: adam\nzero_stage: 1\nseq_len: 8\nfp8_param_gather: true\n", c);
  CHECK(primary.resident(MemCategory::kParameters) == 2 * 1'000'000 + 2 * 4'000'000 + 4 * 20'520);
  CHECK(primary.resident(MemCategory::kOptimizer) == 12 * psi / 2);
  // Under ZeRO-3 the copies go with the gathered weight: the bf16 shard stays.
  const Lowered z3 = lower_plan(m, "dp: 2\nprecision: fp8\noptimizer: adam\nzero_stage: 3\nz3_leaf_layers: true\nseq_len: 8\n", c);
  const Lowered z3g = lower_plan(m, "dp: 2\nprecision: fp8\noptimizer: adam\nzero_stage: 3\nz3_leaf_layers: true\nseq_len: 8\nfp8_param_gather: true\n", c);
  CHECK(z3g.resident(MemCategory::kParameters) == z3.resident(MemCategory::kParameters));
}

TEST_CASE("fp8: fp8_param_gather gathers the GEMM weights at 1 byte an element", "[fp8][zero]") {
  const LinearModel m(4, 1000, 1000, 1'000'000);
  const ClusterSpec c = cluster_of(device("H100-SXM"));
  // ZeRO-3, dp 2: each of the 5 layers (10^6 parameters, over the 10^5
  // persistence threshold) gathered before forward and backward: 10 x 2 MB
  // in bf16. With FP8 gathers the 4 blocks' 8 gathers move 1 MB each; the
  // embedding's 2 stay at 2 MB. Each layer a leaf module, gathered whole
  // for each pass (DeepSpeed's coordinator would keep this small model
  // gathered from its first prefetch: Note [ZeRO-3 modules]).
  const std::string zero3 = "dp: 2\nprecision: fp8\nzero_stage: 3\nz3_leaf_layers: true\nseq_len: 8\n";
  const Lowered bf16_gather = lower_plan(m, zero3, c);
  const Lowered fp8_gather = lower_plan(m, zero3 + "fp8_param_gather: true\n", c);
  CHECK(bf16_gather.gathered() == 10 * 2'000'000);
  CHECK(fp8_gather.gathered() == 8 * 1'000'000 + 2 * 2'000'000);
  // ZeRO-1's gather of the updated parameters (Megatron-LM's
  // --fp8-param-gather): 2 Psi = 10 MB, and 4 MB less with FP8 weights.
  const std::string zero1 = "dp: 2\nprecision: fp8\nzero_stage: 1\nseq_len: 8\n";
  CHECK(lower_plan(m, zero1, c).gathered() == 10'000'000);
  CHECK(lower_plan(m, zero1 + "fp8_param_gather: true\n", c).gathered() == 6'000'000);
}

TEST_CASE("fp8: refused where the device has no FP8, and fp8_param_gather without fp8", "[fp8][bad-input]") {
  const LinearModel m(4, 1000, 1000, 1'000'000);
  const ClusterSpec a100 = cluster_of(device("A100-SXM4-80GB"));
  const std::string e = error_of([&] { resolve(parse_plan("precision: fp8\n", "p.yaml"), m, a100); });
  CHECK(e == "p.yaml:1: plan.precision: fp8 needs FP8 tensor cores (Hopper or later); A100-SXM4-80GB has none; valid: fp32, fp16, bf16");
  const ClusterSpec h100 = cluster_of(device("H100-SXM"));
  CHECK(error_of([&] { resolve(parse_plan("precision: bf16\nfp8_param_gather: true\n", "p.yaml"), m, h100); }) ==
        "p.yaml:2: plan.fp8_param_gather: true needs precision fp8 or fp4 (it gathers the weights' FP8 or NVFP4 copies); precision is bf16");
  CHECK(error_of([&] { resolve(parse_plan("precision: fp8\nfp8_param_gather: true\n", "p.yaml"), m, h100); }).empty());
  // The rules table offers fp8 only where the device has it.
  const auto has_fp8 = [&](const ClusterSpec& c) {
    const auto ps = PlanRules(m, c).precisions();
    return std::find(ps.begin(), ps.end(), Precision::kFp8) != ps.end();
  };
  CHECK(has_fp8(h100));
  CHECK_FALSE(has_fp8(a100));
  CHECK(parse_plan("", "p.yaml").fp8_param_gather == false);
}

// Note [NVFP4 training]: precision fp4, TE's NVFP4BlockScaling.
TEST_CASE("fp4: on Blackwell only, its datasheet peaks and its word", "[fp4][config][bad-input]") {
  const LinearModel m(4, 1000, 1000, 1'000'000);
  // Dense FP4: HGX B200 144 PFLOP/s with sparsity for 8 GPUs; GB200 NVL72
  // 1,440 with sparsity for 72; Blackwell Ultra 15 PFLOP/s dense a GPU.
  CHECK(device("B200").peak_fp4 == Approx(144e15 / 8 / 2));
  CHECK(device("GB200").peak_fp4 == Approx(1440e15 / 72 / 2));
  CHECK(device("GB300").peak_fp4 == Approx(15e15));
  CHECK(device("H100-SXM").peak_fp4 == 0);
  CHECK(device("GB300").peak_for(Precision::kFp4) == Approx(15e15));
  CHECK(std::string(to_string(Precision::kFp4)) == "fp4");
  CHECK(element_bytes(Precision::kFp4) == 2);
  CHECK(parse_plan("precision: fp4\n", "p.yaml").precision == Precision::kFp4);
  const auto has = [&](const char* dev, Precision p) {
    const auto ps = PlanRules(m, cluster_of(device(dev))).precisions();
    return std::find(ps.begin(), ps.end(), p) != ps.end();
  };
  // TE trains NVFP4 on compute capability 10.0 and 10.3 (nvfp4.rst).
  CHECK(has("B200", Precision::kFp4));
  CHECK(has("GB300", Precision::kFp4));
  CHECK_FALSE(has("H100-SXM", Precision::kFp4));
  CHECK(error_of([&] { resolve(parse_plan("dp: 2\nprecision: fp4\n", "p.yaml"), m, cluster_of(device("H100-SXM"))); }) ==
        "p.yaml:2: plan.precision: fp4 (NVFP4) needs Blackwell's FP4 tensor cores (compute capability 10.x); H100-SXM has "
        "compute capability 9.0; valid: fp32, fp16, bf16, fp8");
  // A cluster file may give a device an FP4 peak of its own.
  const ClusterSpec own = parse_cluster(
      "name: x\ndevice: {base: B200, peak_fp4_TFLOPs: 10000}\nintra_node: {type: nvlink, bandwidth_GBps: 900}\n", "x.yaml");
  CHECK(own.device.peak_fp4 == Approx(10000e12));
  CHECK(error_of([] {
          parse_cluster("name: x\ndevice: {base: B200, peak_fp4_TFLOPs: -3}\nintra_node: {type: nvlink, bandwidth_GBps: 900}\n", "x.yaml");
        }) == "x.yaml:2: cluster.device.peak_fp4_TFLOPs: -3 is out of range; valid: 0 to 1e+06");
  // fp8_recipe is FP8's: refused beside fp4.
  CHECK(error_of([&] { resolve(parse_plan("dp: 2\nprecision: fp4\nfp8_recipe: mxfp8\n", "p.yaml"), m, cluster_of(device("B200"))); }) ==
        "p.yaml:3: plan.fp8_recipe: mxfp8 scales FP8 casts and needs precision fp8; precision is fp4 (valid here: delayed, the default)");
}

TEST_CASE("fp4: NVFP4's GEMMs are FP8's times 3.764 / 6.812, after an amax pass and one cast", "[fp4][compute]") {
  const DeviceSpec& gb300 = device("GB300");
  const RooflineComputeModel r(gb300);
  // 16384 x 16384 output: 16384 tiles on 148 SMs, 111 waves; k 8192. The
  // FP8 GEMM at 5,000 TFLOP/s x 0.666 x the shape's efficiency; NVFP4's
  // takes 3.764 / 6.812 of it (TE's GEMM profiling tutorial, B300,
  // pre-quantised), not the 1/3 the datasheet peaks would say.
  const Kernel k = gemm(16384, 16384, 8192);
  const double eff = 0.666 * (16384.0 / (111 * 148)) * (8192.0 / (8192 + 48));
  const TimeNs launch = gb300.kernel_launch;
  // The cast: an amax pass reading the bf16 input (2 B), then a pass
  // reading it again and writing the row-wise and the Hadamard-transformed
  // column-wise copies, 0.5 B and a scale byte per 16 elements each: 5.125 B
  // an element at 8 TB/s x 0.8, and two launches.
  const TimeNs cast = seconds_to_ns(16384.0 * 8192 * 5.125 / (8e12 * 0.8)) + 2 * launch;
  CHECK(fp8_cast_time(k, Precision::kFp4, gb300) == cast);
  CHECK(r.kernel_time(k, Precision::kFp4) == seconds_to_ns(k.flops / (5000e12 * eff) * (3.764 / 6.812)) + launch + cast);
  Kernel wgrad = k;
  wgrad.name = "mlp.fc1.wgrad";
  CHECK(fp8_cast_time(wgrad, Precision::kFp4, gb300) == 0);
  // Attention stays bf16, as under fp8.
  const Kernel scores = gemm(2048, 2048, 128, KernelKind::kAttention);
  CHECK(r.kernel_time(scores, Precision::kFp4) == r.kernel_time(scores, Precision::kBf16));
  Layer head;
  head.kind = LayerKind::kLmHead;
  CHECK(kernel_precision(head, Precision::kFp4) == Precision::kBf16);
}

TEST_CASE("fp4: NVFP4's weight copies and its gathers (Note [NVFP4 training])", "[fp4][memory]") {
  const LinearModel m(4, 1000, 1000, 1'000'000);
  const ClusterSpec b200 = cluster_of(device("B200"));
  const std::string zero1 = "dp: 2\nprecision: fp4\noptimizer: adam\nzero_stage: 1\nseq_len: 8\n";
  // The 4 x 10^6 GEMM weights' two cached copies, 2 x (0.5 + 1/16) B, and
  // no amax history: 4.5 MB beside the bf16 parameters (2 Psi, Psi = 5 x 10^6).
  CHECK(lower_plan(m, zero1, b200).resident(MemCategory::kParameters) == 2 * 5'000'000 + 4'500'000);
  // --fp4-param-gather (plan fp8_param_gather): NVFP4 primary weights, no
  // bf16 copy of them, and the gather of the updated parameters moves the
  // row-wise copy with its scales, 0.5625 B, beside the embedding's 2 MB.
  const Lowered g = lower_plan(m, zero1 + "fp8_param_gather: true\n", b200);
  CHECK(g.resident(MemCategory::kParameters) == 2 * 1'000'000 + 4'500'000);
  CHECK(g.gathered() == 2'000'000 + 2'250'000);
  CHECK(lower_plan(m, zero1, b200).gathered() == 10'000'000);
}

TEST_CASE("fp8: first_last_layers_bf16 keeps the first and last blocks out of FP8 (Note [BF16 layers])", "[fp8][compute]") {
  // llama-tiny at 4 blocks, FP8 with current scaling: TransformerConfig's
  // 1 block first, and 2 last here.
  const auto m = models::load_model("llama-tiny", {parse_override("model.layers=4")});
  const ClusterSpec c = cluster_of(device("H100-SXM"));
  const std::string fp8 = "precision: fp8\nfp8_recipe: tensorwise\nseq_len: 128\n";
  const ResolvedPlan p = resolve(parse_plan(fp8 + "first_last_layers_bf16: true\nnum_layers_at_end_in_bf16: 2\n", "p.yaml"), *m, c);
  CHECK(p.bf16_layers_start == 1);
  CHECK(p.bf16_layers_end == 2);
  WorkloadShape w;
  w.micro_batch = 1;
  w.seq_len = 128;
  w.act_bytes = 2;
  w.fp8 = true;
  WorkloadShape kept = w;
  kept.bf16_start = 1;
  kept.bf16_end = 2;
  WorkloadShape plain = w;
  plain.fp8 = false;
  const LayerList a = m->shared_layers(kept), f = m->shared_layers(w), b = m->shared_layers(plain);
  REQUIRE(a.size() == 6);  // the embedding, 4 blocks, the head
  for (int i = 1; i <= 4; ++i) {
    INFO("block " << i - 1);
    const bool bf16 = i == 1 || i >= 3;
    CHECK(a[i].bf16_gemms == bf16);
    CHECK(a[i].signature == f[i].signature + (bf16 ? ",bf16=1" : ""));
    // Their GEMM inputs kept in bf16, 2 bytes, where FP8 keeps 1.
    CHECK(a[i].saved_bytes == (bf16 ? b[i].saved_bytes : f[i].saved_bytes));
    CHECK(kernel_precision(a[i], Precision::kFp8) == (bf16 ? Precision::kBf16 : Precision::kFp8));
  }
  CHECK(b[1].saved_bytes > f[1].saved_bytes);
  // Priced: the kept blocks as the bf16 plan's, the others as FP8's.
  const PricedLayers with = price_plan_layers(*m, p, c, {});
  const PricedLayers all_fp8 = price_plan_layers(*m, resolve(parse_plan(fp8, "p.yaml"), *m, c), c, {});
  const PricedLayers all_bf16 = price_plan_layers(*m, resolve(parse_plan("precision: bf16\nseq_len: 128\n", "p.yaml"), *m, c), c, {});
  CHECK(with.forward[1] == all_bf16.forward[1]);
  CHECK(with.backward[4] == all_bf16.backward[4]);
  CHECK(with.forward[2] == all_fp8.forward[2]);
  // (At llama-tiny's size FP8's casts cost more than its GEMMs save: the two differ.)
  CHECK(all_fp8.forward[2] != all_bf16.forward[2]);
  // In bf16 every layer is so already: the flag changes nothing.
  const ResolvedPlan bf16 = resolve(parse_plan("precision: bf16\nfirst_last_layers_bf16: true\n", "p.yaml"), *m, c);
  CHECK(bf16.bf16_layers_start + bf16.bf16_layers_end == 0);
  // TransformerConfig's refusals, in its words.
  CHECK(error_of([&] { resolve(parse_plan("precision: fp8\nfirst_last_layers_bf16: true\n", "p.yaml"), *m, c); }) ==
        "p.yaml:2: plan.first_last_layers_bf16: true with fp8_recipe delayed: Megatron-Core refuses it (\"Delayed scaling does not support "
        "first / last layer in BF16\"); valid with it: fp8_recipe tensorwise or mxfp8");
  CHECK(error_of([&] { resolve(parse_plan(fp8 + "first_last_layers_bf16: true\nnum_layers_at_end_in_bf16: 5\n", "p.yaml"), *m, c); }) ==
        "p.yaml:5: plan.num_layers_at_end_in_bf16: 5 must be between 0 and the layers of a pipeline stage, 4 (Megatron-Core refuses more)");
}
