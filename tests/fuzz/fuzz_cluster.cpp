// Fuzz target: a cluster YAML file, as `--cluster FILE` reads it, then a
// small plan resolved on it as `dtsim predict` does next.
#include <cstddef>
#include <cstdint>

#include "dtsim/models/models.hpp"
#include "dtsim/sim/config_io.hpp"
#include "dtsim/sim/predict.hpp"
#include "fuzz_util.hpp"

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  static const dtsim::sim::ModelPtr model = dtsim::models::load_model("gpt2-tiny");
  static const dtsim::sim::PlanSpec plan = dtsim::sim::load_plan("ddp");
  const std::string text = dtsim::fuzz::text_of(data, size);
  dtsim::fuzz::expect_typed_errors([&] {
    const dtsim::sim::ClusterSpec cluster = dtsim::sim::parse_cluster(text, "fuzz-cluster.yaml");
    (void)dtsim::sim::plan_for(*model, plan, cluster);
  });
  return 0;
}
