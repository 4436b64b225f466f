#pragma once
// The options that say what to simulate, defined once for every front end
// that takes them: `dtsim predict`, `search`, `comm`, `validate` (and
// dtsim_worker, which gets validate's arguments) and dtsim-gui.
//
// Note [Scenario options]
// A new way to name the scenario (issue 24's `--deepspeed FILE`,
// `--megatron-args "STRING"`, `--torchtitan FILE`, read by sim's framework
// importers) is: a member of ScenarioOptions, a bit of Scenario, and one
// add_option() line in add_scenario_options() (cli/src/scenario_options.cpp,
// where a comment marks the place). Each front end then gets it where it
// asks for kScenario; what it means (a plan, a model) is the loaders' part.

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "dtsim/sim/config_node.hpp"

namespace CLI {
class App;
}

namespace dtsim::cli {

/// What the scenario options read; "" where not given.
struct ScenarioOptions {
  std::string model;              ///< --model M: built-in name, YAML file or HuggingFace config.json
  std::string cluster;            ///< --cluster C: shipped name or YAML file
  std::string plan;               ///< --plan P: shipped name or YAML file
  std::string profile;            ///< --profile FILE.h5: a calibration profile to price from
  std::vector<std::string> sets;  ///< --set SECTION.KEY=VALUE, in order, repeatable
  std::string deepspeed;          ///< --deepspeed FILE: a DeepSpeed config JSON as the plan
  std::string megatron_args;      ///< --megatron-args "STRING" (or a file of them): Megatron-LM's flags as plan and model
  std::string torchtitan;         ///< --torchtitan FILE: a torchtitan job TOML as plan (and model)
  std::string torchtune;          ///< --torchtune FILE: a torchtune recipe config as plan (and model)
  std::string axolotl;            ///< --axolotl FILE: an axolotl config as plan (and model)
  std::string llamafactory;       ///< --llamafactory FILE: a LLaMA-Factory training config as plan (and model)
  std::string trl;                ///< --trl FILE: a TRL training config as plan (and model)
  std::string nanotron;           ///< --nanotron FILE: a nanotron training config as plan (and model)
  std::string accelerate;         ///< --accelerate FILE: an accelerate config, alone or under --llamafactory, --axolotl or --trl
  std::string megatron_bridge;    ///< --megatron-bridge FILE: a Megatron-Bridge config YAML as plan (and model)

  /// The --set values parsed (ConfigError "expected SECTION.KEY=VALUE" for a bad one).
  std::vector<sim::Override> overrides() const;
};

/// The scenario to load once a framework's config is folded in (Note
/// [Framework options] in sim/src/config/framework_config.cpp).
struct ResolvedScenario {
  std::string model;                         ///< "" where neither --model nor the config names one
  std::string plan;                          ///< the shipped plan or file to start from
  std::vector<sim::Override> overrides;      ///< the config's keys, then the user's --set (which win)
  std::optional<std::int64_t> global_batch;  ///< the config's global batch, for the search
  std::string warning;                       ///< one line naming what the config sets that dtsim does not model; "" if none
  /// The framework's config, "FILE (Megatron-Bridge)"; "" where none is given.
  std::string framework;
  /// How many of `overrides` come from the config (the user's follow them).
  std::size_t framework_overrides = 0;
  /// Plan keys the framework cannot set otherwise, kept by a search (FrameworkConfig::search_fixed).
  std::vector<std::string> search_fixed;
};

/// Folds --deepspeed, --megatron-args, --megatron-bridge, --torchtitan, --torchtune, --axolotl, --llamafactory, --trl or --nanotron (at most one) into the
/// scenario; `default_plan` is the plan when none is named.
ResolvedScenario resolve_scenario(const ScenarioOptions& s, const std::string& default_plan);

/// Which scenario options a command takes (bits; or them).
enum Scenario : unsigned {
  kModel = 1u << 0,
  kCluster = 1u << 1,
  kPlan = 1u << 2,
  kProfile = 1u << 3,
  kSet = 1u << 4,
  /// Everything that names a model, cluster and plan: predict, validate, the GUI.
  kScenario = kModel | kCluster | kPlan | kProfile | kSet,
  /// --deepspeed, --megatron-args, --megatron-bridge, --torchtitan: predict,
  /// search (which ranks the config's plan beside its own), the GUI (not
  /// validate, whose workers get its arguments as they are).
  kFramework = 1u << 5,
};

/// Declares the options `which` selects on `app`, bound to `s` (which must
/// outlive the parse).
void add_scenario_options(CLI::App& app, ScenarioOptions& s, unsigned which = kScenario);

}  // namespace dtsim::cli
