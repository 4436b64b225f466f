#include "dtsim/cli/scenario_options.hpp"

#include <CLI/CLI.hpp>


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
    app.add_option("--megatron-bridge", s.megatron_bridge,
                   "A Megatron-Bridge config (run_config.yaml) as the plan and, with no --model, the model")
        ->type_name("FILE");
    app.add_option("--torchtitan", s.torchtitan, "A torchtitan job TOML as the plan and, with no --model, the model")
        ->type_name("FILE");
    app.add_option("--torchtune", s.torchtune, "A torchtune recipe config (YAML) as the plan and, with no --model, the model")
        ->type_name("FILE");
    app.add_option("--axolotl", s.axolotl, "An axolotl config (YAML) as the plan and, with no --model, the model")
        ->type_name("FILE");
    app.add_option("--llamafactory", s.llamafactory,
                   "A LLaMA-Factory training config (YAML) as the plan and, with no --model, the model")
        ->type_name("FILE");
    app.add_option("--trl", s.trl, "A TRL training config (trl sft --config) as the plan and, with no --model, the model")
        ->type_name("FILE");
    app.add_option("--nanotron", s.nanotron,
                   "A nanotron training config (run_train.py --config-file) as the plan and, with no --model, the model")
        ->type_name("FILE");
    app.add_option("--accelerate", s.accelerate,
                   "An accelerate config (accelerate launch --config_file) as the distribution: alone, or under --llamafactory, --axolotl or --trl")
        ->type_name("FILE");
  }
}

// Note [Framework options] (sim/src/config/framework_config.cpp) says how a
// framework's config folds in; here only that it does not combine with
// --plan, and that at most one is given (--accelerate beside a trainer's).
ResolvedScenario resolve_scenario(const ScenarioOptions& s, const std::string& default_plan) {
  ResolvedScenario r;
  r.model = s.model;
  r.plan = s.plan.empty() ? default_plan : s.plan;
  const std::vector<sim::Override> user = s.overrides();
  const std::pair<const char*, const std::string*> options[] = {
      {"deepspeed", &s.deepspeed}, {"megatron", &s.megatron_args}, {"megatron-bridge", &s.megatron_bridge}, {"torchtitan", &s.torchtitan},
      {"torchtune", &s.torchtune}, {"axolotl", &s.axolotl}, {"llamafactory", &s.llamafactory}, {"trl", &s.trl},
      {"nanotron", &s.nanotron}};
  const char* kind = nullptr;
  int given = 0;
  for (const auto& [k, v] : options) {
    if (!v->empty()) {
      kind = kind ? kind : k;
      ++given;
    }
  }
  if (given == 0 && s.accelerate.empty()) {
    r.overrides = user;
    return r;
  }
  if (given > 1) {
    throw ConfigError("--deepspeed, --megatron-args, --megatron-bridge, --torchtitan, --torchtune, --axolotl, --llamafactory, --trl and --nanotron "
                      "each describe the whole plan; give one");
  }
  // Note [accelerate under a trainer]: with a transformers-based trainer's config, or alone.
  if (!s.accelerate.empty() && kind != nullptr && std::string(kind) != "llamafactory" && std::string(kind) != "axolotl" &&
      std::string(kind) != "trl") {
    throw ConfigError(std::string("--accelerate launches transformers' Trainer; it combines with --llamafactory, --axolotl or --trl, not --") +
                      (std::string(kind) == "megatron" ? "megatron-args" : kind));
  }
  if (kind == nullptr) kind = "accelerate";
  const std::string which = std::string(kind) == "megatron" ? "--megatron-args" : "--" + std::string(kind);
  if (!s.plan.empty()) {
    throw ConfigError("--plan " + s.plan + " and " + which + " both describe the plan; give one (change single keys with --set plan.KEY=VALUE)");
  }
  std::string source = s.accelerate;
  for (const auto& [k, v] : options) {
    if (std::string(k) == kind) source = *v;
  }
  const sim::FrameworkConfig fc = sim::read_framework_config(kind, source, s.accelerate);
  sim::FrameworkScenario f = sim::apply_framework_config(fc, s.model, user);
  r.model = f.model;
  if (!f.plan.empty()) r.plan = f.plan;
  r.overrides = std::move(f.overrides);
  r.global_batch = f.global_batch;
  r.warning = std::move(f.warning);
  r.framework = fc.file + " (" + fc.framework + ")";
  r.framework_overrides = r.overrides.size() - user.size();
  r.search_fixed = std::move(f.search_fixed);
  return r;
}

}  // namespace dtsim::cli
