#include "dtsim/cli/scenario_options.hpp"

#include <CLI/CLI.hpp>

#include <filesystem>

#include "dtsim/sim/error.hpp"
#include "dtsim/sim/framework_config.hpp"

namespace dtsim::cli {

std::vector<sim::Override> ScenarioOptions::overrides() const {
  std::vector<sim::Override> out;
  out.reserve(sets.size());
  for (const auto& s : sets) out.push_back(sim::parse_override(s));
  return out;
}

void add_scenario_options(CLI::App& app, ScenarioOptions& s, unsigned which) {
  if (which & kModel) {
    app.add_option("--model", s.model, "A built-in model (dtsim list models), a YAML file or a HuggingFace config.json")
        ->type_name("M");
  }
  if (which & kCluster) {
    app.add_option("--cluster", s.cluster, "A shipped cluster (dtsim list clusters) or a YAML file")->type_name("C");
  }
  if (which & kPlan) {
    app.add_option("--plan", s.plan, "A shipped plan (dtsim list plans) or a YAML file")->type_name("P");
  }
  if (which & kProfile) {
    app.add_option("--profile", s.profile, "Price from this calibration profile (dtsim calibrate)")->type_name("FILE.h5");
  }
  if (which & kSet) {
    app.add_option("--set", s.sets, "Override one key, e.g. plan.micro_batch=32, cluster.nodes=4, model.layers=24 (repeatable)")
        ->type_name("SECTION.KEY=VALUE")
        ->allow_extra_args(false);  // one value per --set: repeat the option for more
  }
  if (which & kFramework) {
    app.add_option("--deepspeed", s.deepspeed,
                   "A DeepSpeed config (ds_config.json) as the plan: ZeRO stage, offload, batch, precision, checkpointing")
        ->type_name("FILE");
    app.add_option("--megatron-args", s.megatron_args,
                   "Megatron-LM's command-line flags (or a file of them) as the plan and, with no --model, the model")
        ->type_name("\"FLAGS\"");
    app.add_option("--torchtitan", s.torchtitan, "A torchtitan job TOML as the plan and, with no --model, the model")
        ->type_name("FILE");
  }
}

// Note [Framework options]
// A framework's config describes a whole plan (sim/framework_config.hpp:
// every plan key it leaves unset is reset to dtsim's default), so it does not
// combine with --plan, and at most one is given. The user's --set applies
// after it and wins. A Megatron command line describes the model too: its
// model.* keys apply only when no --model names one. What the config sets
// that dtsim does not model is one warning line, never dropped silently.
ResolvedScenario resolve_scenario(const ScenarioOptions& s, const std::string& default_plan) {
  ResolvedScenario r;
  r.model = s.model;
  r.plan = s.plan.empty() ? default_plan : s.plan;
  const std::vector<sim::Override> user = s.overrides();
  const int given = !s.deepspeed.empty() + !s.megatron_args.empty() + !s.torchtitan.empty();
  if (given == 0) {
    r.overrides = user;
    return r;
  }
  const char* which = !s.deepspeed.empty() ? "--deepspeed" : !s.megatron_args.empty() ? "--megatron-args" : "--torchtitan";
  if (given > 1) throw ConfigError("--deepspeed, --megatron-args and --torchtitan each describe the whole plan; give one");
  if (!s.plan.empty()) {
    throw ConfigError(std::string("--plan ") + s.plan + " and " + which +
                      " both describe the plan; give one (change single keys with --set plan.KEY=VALUE)");
  }
  sim::FrameworkConfig fc;
  if (!s.deepspeed.empty()) {
    fc = sim::read_deepspeed_config(s.deepspeed);
  } else if (!s.torchtitan.empty()) {
    fc = sim::read_torchtitan_config(s.torchtitan);
  } else {
    // A file of flags (a launch script's), or the flags themselves.
    std::error_code ec;
    const bool is_file = s.megatron_args.rfind("--", 0) != 0 && std::filesystem::is_regular_file(s.megatron_args, ec);
    fc = is_file ? sim::read_megatron_args(s.megatron_args) : sim::parse_megatron_args(s.megatron_args, "--megatron-args");
  }
  if (fc.plan) r.plan = *fc.plan;
  if (r.model.empty() && fc.model) r.model = *fc.model;
  sim::FrameworkConfig kept = fc;
  if (!s.model.empty()) {
    // The user's model wins over the shape the flags describe.
    kept.overrides.clear();
    for (const auto& o : fc.overrides) {
      if (o.section != "model") kept.overrides.push_back(o);
    }
  }
  r.overrides = sim::with_user_overrides(kept, user);
  r.global_batch = fc.global_batch;
  r.warning = sim::unmodelled_warning(fc);
  return r;
}

}  // namespace dtsim::cli
