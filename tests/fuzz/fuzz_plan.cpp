// Fuzz target: a plan YAML file, as `--plan FILE` reads it, then resolved
// and partitioned for a small model on a DGX A100 as `dtsim predict` does.
#include <cstddef>
#include <cstdint>

#include "dtsim/models/models.hpp"
#include "dtsim/sim/config_io.hpp"
#include "dtsim/sim/predict.hpp"
#include "fuzz_util.hpp"

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  static const dtsim::sim::ModelPtr model = dtsim::models::load_model("gpt2-tiny");
  static const dtsim::sim::ClusterSpec cluster = dtsim::sim::load_cluster("dgx-a100");
  const std::string text = dtsim::fuzz::text_of(data, size);
  dtsim::fuzz::expect_typed_errors([&] {
    const dtsim::sim::PlanSpec plan = dtsim::sim::parse_plan(text, "fuzz-plan.yaml");
    (void)dtsim::sim::plan_for(*model, plan, cluster);
  });
  return 0;
}
