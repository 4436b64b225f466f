#pragma once
// Loading clusters and plans: built-in names resolve to configs/<kind>/<name>.yaml
// in the config directories; paths load as given. `--set` overrides apply
// before validation so they are checked like the file itself.

#include <string>
#include <vector>

#include "dtsim/sim/cluster.hpp"
#include "dtsim/sim/config_node.hpp"
#include "dtsim/sim/plan.hpp"

namespace dtsim::sim {

/// Where shipped configs live: $DTSIM_CONFIG_DIR if set, else the first of
/// config_dir_candidates() holding a clusters/ folder. Throws IoError naming
/// every place it looked if none does (Note [Finding the configs]).
std::string config_dir();
/// Where config_dir() looks without $DTSIM_CONFIG_DIR, in order: beside the
/// shared object holding dtsim (configs/, ../share/dtsim/configs), beside the
/// program (../share/dtsim/configs), the source tree's configs and the
/// install prefix's fixed at configure time.
std::vector<std::string> config_dir_candidates();

/// Resolves a name ("ddp") or a path ("my/plan.yaml") of `kind` ("plans",
/// "clusters", "models") to a file; throws ConfigError listing the names
/// available if neither exists.
std::string find_config(const std::string& kind, const std::string& name_or_path);

/// Names of the shipped configs of `kind`, sorted.
std::vector<std::string> list_configs(const std::string& kind);

/// Loads a cluster (name or path) with overrides for section "cluster".
ClusterSpec load_cluster(const std::string& name_or_path, const std::vector<Override>& overrides = {});
/// Parses a cluster from YAML text (for tests); `file` is used in errors.
ClusterSpec parse_cluster(const std::string& yaml_text, const std::string& file,
                          const std::vector<Override>& overrides = {});

/// Loads a plan (name or path) with overrides for section "plan".
PlanSpec load_plan(const std::string& name_or_path, const std::vector<Override>& overrides = {});
/// Parses a plan from YAML text (for tests).
PlanSpec parse_plan(const std::string& yaml_text, const std::string& file,
                    const std::vector<Override>& overrides = {});

}  // namespace dtsim::sim
