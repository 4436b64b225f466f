// Memory a CPU rank holds for a moment: the unfused optimizer step's
// temporaries (Note [Unfused step] in sim/cost.hpp) and, in a pipeline's
// chunk, a layer's measured forward transient and backward rise (Note
// [Layer memory] in cost_profile.cpp), each by hand.
#include <catch2/catch.hpp>

#include "dtsim/models/models.hpp"
#include "dtsim/sim/partition.hpp"
#include "fake_model.hpp"
#include "test_util.hpp"

using namespace dtsim;
using namespace dtsim::sim;
using dtsim::test::FixedComm;

namespace {

// PyTorch's quickstart MLP: 784 x 512 + 512, 512 x 512 + 512, 512 x 10 + 10.
constexpr std::int64_t kMlpParams = 784 * 512 + 512 + 512 * 512 + 512 + 512 * 10 + 10;  // 669,706
constexpr std::int64_t kMlpLargest = 784 * 512;                                         // the first weight

Bytes at_peak(const test::PlanRun& r, MemCategory k, int rank = 0) {
  return r.exec.memory[rank].at_peak.bytes[static_cast<int>(k)];
}

/// FixedCompute's times, and a measured memory for one layer by name.
class MeasuredCompute final : public ComputeModel {
 public:
  MeasuredCompute(std::string layer, LayerMemory m) : layer_(std::move(layer)), m_(m) {}
  TimeNs kernel_time(const Kernel& k, Precision) const override { return static_cast<TimeNs>(k.flops / 1e9 * 1000.0); }
  std::optional<LayerMemory> layer_memory(const Layer& l, Precision, const WorkloadShape&) const override {
    if (l.name == layer_) return m_;
    return std::nullopt;
  }

 private:
  std::string layer_;
  LayerMemory m_;
};

ExecResult run_with(const Model& m, const std::string& yaml, const ClusterSpec& c, const ComputeModel& compute) {
  const FixedComm comm(10'000);
  ResolvedPlan p = resolve(parse_plan(yaml, "p.yaml"), m, c);
  partition(p, m, c, compute, comm);
  return execute(lower(m, p, c, CostModels{&compute, &comm}));
}

}  // namespace

TEST_CASE("Note [Unfused step]: an unfused Adam step holds the denominator of the largest tensor it steps", "[memory]") {
  const auto m = models::load_model("mlp");
  ClusterSpec c = test::round_cluster(1, 2);
  const FixedComm comm(10'000);
  const std::string one = "dp: 1\nmicro_batch: 1\noptimizer: adam\nprecision: ";
  c.device.fused_optimizer = false;
  // fp32, one rank: the step is the peak (one sample's activations are a few
  // KB): weights, gradients, m and v, and 4 B an element of 784 x 512.
  const auto fp32 = test::run_plan(*m, one + "fp32\n", c, comm, 1000);
  CHECK(at_peak(fp32, MemCategory::kParameters) == 4 * kMlpParams);
  CHECK(at_peak(fp32, MemCategory::kGradients) == 4 * kMlpParams);
  CHECK(at_peak(fp32, MemCategory::kOptimizer) == 8 * kMlpParams + 4 * kMlpLargest);
  // Mixed precision: the gradient's fp32 copy beside the denominator.
  const auto fp16 = test::run_plan(*m, one + "fp16\n", c, comm, 1000);
  c.device.fused_optimizer = true;
  const auto fused16 = test::run_plan(*m, one + "fp16\n", c, comm, 1000);
  CHECK(at_peak(fp16, MemCategory::kOptimizer) - at_peak(fused16, MemCategory::kOptimizer) == 8 * kMlpLargest);
  // Fused, and SGD, make none.
  const auto fused = test::run_plan(*m, one + "fp32\n", c, comm, 1000);
  CHECK(at_peak(fused, MemCategory::kOptimizer) == 8 * kMlpParams);
  c.device.fused_optimizer = false;
  const auto sgd = test::run_plan(*m, "dp: 1\nmicro_batch: 1\noptimizer: sgd\nprecision: fp32\n", c, comm, 1000);
  c.device.fused_optimizer = true;
  const auto sgd_fused = test::run_plan(*m, "dp: 1\nmicro_batch: 1\noptimizer: sgd\nprecision: fp32\n", c, comm, 1000);
  CHECK(sgd.exec.memory[0].at_peak.total() == sgd_fused.exec.memory[0].at_peak.total());
  // Note [SGD momentum]: the MLP's momentum buffer is 4 B a parameter; at
  // momentum 0 SGD keeps no state at all.
  CHECK(at_peak(sgd, MemCategory::kOptimizer) == 4 * kMlpParams);
  const auto plain = test::run_plan(*m, "dp: 1\nmicro_batch: 1\noptimizer: sgd\nsgd_momentum: 0\nprecision: fp32\n", c, comm, 1000);
  CHECK(at_peak(plain, MemCategory::kOptimizer) == 0);
  // ZeRO-1 over 2 ranks steps one flat shard of ceil(P / 2) = 334,853.
  c.device.fused_optimizer = false;
  const auto zero1 = test::run_plan(*m, "dp: 2\nmicro_batch: 1\noptimizer: adam\nprecision: fp32\nzero_stage: 1\n", c, comm, 1000);
  c.device.fused_optimizer = true;
  const auto zero1_fused = test::run_plan(*m, "dp: 2\nmicro_batch: 1\noptimizer: adam\nprecision: fp32\nzero_stage: 1\n", c, comm, 1000);
  CHECK(at_peak(zero1, MemCategory::kOptimizer) - at_peak(zero1_fused, MemCategory::kOptimizer) == 4 * 334'853);
  // The built-in CPU device steps unfused; GPUs fused.
  REQUIRE(find_device("cpu") != nullptr);
  REQUIRE(find_device("H100-SXM") != nullptr);
  CHECK_FALSE(find_device("cpu")->fused_optimizer);
  CHECK(find_device("H100-SXM")->fused_optimizer);
}

TEST_CASE("Note [Layer memory]: a pipeline chunk holds its layers' measured transient and rise where they run", "[memory]") {
  // cnn split over two stages; stage 0 holds conv.0 and conv.1 at b = 4, fp32.
  const auto m = models::load_model("cnn");
  const ClusterSpec c = test::round_cluster(1, 2);
  const std::string plan = "model_parallel: 2\nstage_layers: [2, 3]\nmicro_batch: 4\nprecision: fp32\noptimizer: adam\n";
  WorkloadShape s;
  s.micro_batch = 4;
  s.seq_len = 1;
  s.act_bytes = 4;
  const auto layers = m->layers(s);
  const Layer &conv0 = layers[0], &conv1 = layers[1];
  // A forward transient of 64 MiB in conv.0, far above anything else: the
  // stage peaks inside conv.0's forward, holding what conv.0 keeps and the
  // transient, not what conv.1 keeps (not yet made); the chunk's forward is
  // one task, which counts the stage's output (held as autograd's root
  // until the backward) from its start.
  constexpr Bytes kBig = Bytes{64} << 20;
  const ExecResult fwd = run_with(*m, plan, c, MeasuredCompute("conv.0", {kBig, 0}));
  CHECK(fwd.memory[0].at_peak.bytes[static_cast<int>(MemCategory::kActivations)] == conv0.saved_bytes + kBig + conv1.output_bytes);
  // A backward rise of 64 MiB in conv.0 (its weights' gradients, 4 B each,
  // included): conv.0's backward runs after conv.1's, which freed what
  // conv.1 kept; the gradient of conv.0's output (conv.1's input) and the
  // gradient received for the stage's output (conv.1's) are live, and the
  // output itself, held as autograd's root until the backward.
  const ExecResult bwd = run_with(*m, plan, c, MeasuredCompute("conv.0", {0, kBig}));
  CHECK(bwd.memory[0].at_peak.bytes[static_cast<int>(MemCategory::kActivations)] ==
        conv0.saved_bytes + conv1.output_bytes + conv1.output_bytes + (kBig - 4 * conv0.params) + conv0.output_bytes);
}
