// One contract, both cost models: every lowering case is run priced by the
// datasheet models and by a calibration profile, and each must honour the
// same rules (ns-3 runs one suite against each scheduler).
#include <catch2/catch.hpp>

#include <memory>
#include <string>

#include "dtsim/models/models.hpp"
#include "dtsim/sim/config_io.hpp"
#include "dtsim/sim/cost.hpp"
#include "dtsim/sim/cost_profile.hpp"
#include "dtsim/sim/predict.hpp"
#include "dtsim/sim/profile.hpp"

using namespace dtsim;
using namespace dtsim::sim;

namespace {

struct Pricing {
  std::string name;
  std::shared_ptr<const ProfileCosts> profile;  // null: the datasheet models
};

std::vector<Pricing> pricings() {
  return {{"datasheet", nullptr},
          {"profile", std::make_shared<const ProfileCosts>(load_profile(config_dir() + "/profiles/local-cpu-tiny.h5"))}};
}

}  // namespace

TEST_CASE("contract: every lowering case, priced either way, adds up", "[contract][lowering]") {
  const auto gpt = models::load_model("gpt2-tiny");  // embedding, 2 blocks, head
  const ClusterSpec cpu = load_cluster("local-cpu");  // 2 ranks
  const std::vector<std::string> plans{"single", "ddp", "zero1", "zero2", "zero2-offload", "zero3", "fsdp",
                                       "gpipe", "1f1b", "model-parallel", "megatron-tp"};
  for (const Pricing& pricing : pricings()) {
    PredictOptions po;
    po.profile = pricing.profile;
    for (const std::string& name : plans) {
      INFO(pricing.name << " / " << name);
      const PlanSpec spec = load_plan(name, {{"plan", "precision", "fp32"}, {"plan", "micro_batches", "4"}});
      const Prediction p = predict(*gpt, spec, cpu, po);
      // It simulates something, on one simulated rank per pipeline stage.
      CHECK(p.iteration_time > 0);
      CHECK(p.ranks.size() == static_cast<std::size_t>(p.plan.pp));
      // The partition covers every layer once.
      int layers = 0;
      for (int n : p.plan.stage_layers) layers += n;
      CHECK(layers == 4);
      // The breakdown accounts for the whole iteration, nothing twice.
      const TimeBreakdown& b = p.breakdown;
      CHECK(b.compute + b.exposed_comm + b.bubble + b.optimizer + b.offload + b.other == p.iteration_time);
      // Every rank holds at least its share of the model states
      // (model_states(), the ZeRO paper's accounting) at its peak.
      for (const RankMemory& r : p.ranks) {
        CHECK(r.peak == r.parameters + r.gradients + r.optimizer + r.activations + r.buffers);
        CHECK(r.peak > 0);
      }
    }
  }
}

TEST_CASE("contract: one GPU's compute is its layers' priced times, either way", "[contract][lowering]") {
  // Plan single with 3 micro-steps, no recompute: the critical path's
  // compute is 3 x the sum over layers of forward + backward, as the same
  // compute model prices each layer.
  const auto gpt = models::load_model("gpt2-tiny");
  const ClusterSpec cpu = load_cluster("local-cpu");
  const PlanSpec spec = load_plan("single", {{"plan", "precision", "fp32"}, {"plan", "grad_accum", "3"}});
  for (const Pricing& pricing : pricings()) {
    INFO(pricing.name);
    PredictOptions po;
    po.profile = pricing.profile;
    const Prediction p = predict(*gpt, spec, cpu, po);
    std::unique_ptr<ComputeModel> compute;
    if (pricing.profile) {
      compute = std::make_unique<ProfileComputeModel>(pricing.profile, cpu.device, nullptr);
    } else {
      compute = std::make_unique<RooflineComputeModel>(cpu.device);
    }
    WorkloadShape shape;
    shape.micro_batch = p.plan.micro_batch;
    shape.seq_len = p.plan.seq_len;
    shape.act_bytes = 4;
    shape.mask_bytes = cpu.device.dropout_mask_bytes > 0 ? cpu.device.dropout_mask_bytes : 4;
    shape.fused_rnn = cpu.device.fused_rnn;
    TimeNs per_micro = 0;
    for (const Layer& l : gpt->layers(shape)) {
      per_micro += compute->layer_time(l, Pass::kForward, Precision::kFp32, shape) +
                   compute->layer_time(l, Pass::kBackward, Precision::kFp32, shape);
    }
    CHECK(p.breakdown.compute == 3 * per_micro);
  }
}
