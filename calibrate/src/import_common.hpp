#pragma once
// What the two importers share (src/import_profile.cpp): starting or
// loading the profile, checking it was measured on the same kind of device,
// refitting only what an import touched, provenance, and writing.

#include <functional>
#include <set>
#include <string>

#include "dtsim/calibrate/import.hpp"
#include "dtsim/sim/cluster.hpp"
#include "dtsim/sim/profile.hpp"

namespace dtsim::calib::detail {

/// The current UTC time, "2026-01-31T12:00:00Z".
std::string now_iso();

/// The file name without its folders.
std::string base_name(const std::string& path);

/// Records what was measured on: a new profile takes `device` and
/// device_kind cuda; one that has them must agree (a CPU profile, or
/// another GPU family, is refused with ConfigError naming `source`).
void adopt_device(sim::Profile& p, const std::string& device, const std::string& source);

/// Refits, as fit_profile does, exactly the fits named in `names` from all
/// of p's samples; every other fit is left as it was. A name the samples
/// no longer support (fewer than fit_profile needs) keeps its old fit
/// unless `drop_stale`. Adds the names made to `result.fits`.
void refit(sim::Profile& p, const std::set<std::string>& names, bool drop_stale, ImportResult& result);

/// Appends `value` to info[key] ("; " between imports).
void append_info(sim::Profile& p, const std::string& key, const std::string& value);

/// The cluster `name` (built-in or YAML), for the checks and pricing of an
/// import; throws ConfigError as load_cluster does.
sim::ClusterSpec cluster_of(const std::string& name);

/// --into's profile, or a new one with its creation recorded.
sim::Profile start_profile(const ImportOptions& o);

/// Checks --out, writes `p` there atomically, returns the summary with a last line naming it.
std::string finish(sim::Profile& p, const ImportOptions& o, ImportResult& result);

/// What every `dtsim profile import-*` does around its import: --out
/// required (`example` is a path to suggest) and checked first, --into's
/// profile or a new one, `import` on it, written atomically; the summary.
std::string import_command(const ImportOptions& o, const std::string& example,
                           const std::function<ImportResult(sim::Profile&)>& import);

/// A duration for a summary: "8.04 ms", "10.4 us".
std::string human_seconds(double s);

}  // namespace dtsim::calib::detail
