// Fuzz target: `--set SECTION.KEY=VALUE` overrides, one a line (at most 16),
// applied as `dtsim predict --model gpt2-tiny --cluster dgx-a100 --plan ddp`
// applies them, then the plan resolved on them.
#include <cstddef>
#include <cstdint>
#include <sstream>
#include <string>
#include <vector>

#include "dtsim/models/models.hpp"
#include "dtsim/sim/config_io.hpp"
#include "dtsim/sim/predict.hpp"
#include "fuzz_util.hpp"

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  namespace sim = dtsim::sim;
  std::istringstream in(dtsim::fuzz::text_of(data, size));
  std::vector<std::string> lines;
  for (std::string line; lines.size() < 16 && std::getline(in, line);) lines.push_back(line);
  dtsim::fuzz::expect_typed_errors([&] {
    std::vector<sim::Override> ov;
    for (const auto& line : lines) ov.push_back(sim::parse_override(line));
    const sim::ModelPtr model = dtsim::models::load_model("gpt2-tiny", ov);
    const sim::ClusterSpec cluster = sim::load_cluster("dgx-a100", ov);
    const sim::PlanSpec plan = sim::load_plan("ddp", ov);
    (void)sim::plan_for(*model, plan, cluster);
  });
  return 0;
}
