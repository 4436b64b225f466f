// Fuzz target: a framework's config (a DeepSpeed JSON, a Megatron-LM command
// line, a Megatron-Bridge YAML, a torchtitan TOML, a torchtune, an axolotl,
// a LLaMA-Factory, a TRL, a nanotron or an accelerate YAML), read by each importer in turn as
// `--deepspeed`, `--megatron-args`, `--megatron-bridge`, `--torchtitan`,
// `--torchtune`, `--axolotl`, `--llamafactory`, `--trl`, `--nanotron` and `--accelerate` read a
// file; what one accepts is folded into a scenario
// (apply_framework_config), its plan and model loaded, and the plan resolved
// and partitioned on a DGX A100 as `dtsim predict` does.
#include <cstddef>
#include <cstdint>

#include "dtsim/models/models.hpp"
#include "dtsim/sim/config_io.hpp"
#include "dtsim/sim/framework_config.hpp"
#include "dtsim/sim/predict.hpp"
#include "fuzz_util.hpp"

namespace {

void scenario(const dtsim::sim::FrameworkConfig& fc) {
  static const dtsim::sim::ClusterSpec cluster = dtsim::sim::load_cluster("dgx-a100");
  const dtsim::sim::FrameworkScenario s = dtsim::sim::apply_framework_config(fc, "", {});
  const dtsim::sim::ModelPtr model = dtsim::models::load_model(s.model.empty() ? "gpt2-tiny" : s.model, s.overrides);
  const dtsim::sim::PlanSpec plan = dtsim::sim::load_plan(s.plan.empty() ? "ddp" : s.plan, s.overrides);
  (void)dtsim::sim::plan_for(*model, plan, cluster);
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  const std::string text = dtsim::fuzz::text_of(data, size);
  dtsim::fuzz::expect_typed_errors([&] { scenario(dtsim::sim::parse_deepspeed_config(text, "fuzz-ds.json")); });
  dtsim::fuzz::expect_typed_errors([&] { scenario(dtsim::sim::parse_megatron_args(text, "fuzz-args.sh")); });
  dtsim::fuzz::expect_typed_errors([&] { scenario(dtsim::sim::parse_megatron_bridge_config(text, "fuzz-run_config.yaml")); });
  dtsim::fuzz::expect_typed_errors([&] { scenario(dtsim::sim::parse_torchtitan_config(text, "fuzz-job.toml")); });
  dtsim::fuzz::expect_typed_errors([&] { scenario(dtsim::sim::parse_torchtune_config(text, "fuzz-lora.yaml")); });
  dtsim::fuzz::expect_typed_errors([&] { scenario(dtsim::sim::parse_axolotl_config(text, "fuzz-axolotl.yml")); });
  dtsim::fuzz::expect_typed_errors([&] { scenario(dtsim::sim::parse_llamafactory_config(text, "fuzz-llamafactory.yaml")); });
  dtsim::fuzz::expect_typed_errors([&] { scenario(dtsim::sim::parse_trl_config(text, "fuzz-trl.yaml")); });
  dtsim::fuzz::expect_typed_errors([&] { scenario(dtsim::sim::parse_nanotron_config(text, "fuzz-nanotron.yaml")); });
  dtsim::fuzz::expect_typed_errors([&] { scenario(dtsim::sim::parse_accelerate_config(text, "fuzz-accelerate.yaml")); });
  return 0;
}
