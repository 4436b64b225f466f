// Note [Importing layers]
// A GPU's calibration times every layer of every model of GPU size (Note
// [GPU sweep] in src/torch_bench.cpp): minutes of a machine that may be lent
// for a quarter of an hour. A calibration that measured only the layers
// that are new (`dtsim calibrate --models ...`: the layers of those models,
// and every kernel, optimizer step, copy and memory record as a full sweep
// does) takes the rest from an earlier calibration of the same device with
// `dtsim profile import-layers OLDER.h5 --into NEWER.h5 --out F.h5`:
//  - every layer record (signature and precision) of OLDER that NEWER did
//    not measure is added, all its shapes with their times and memory
//    (Note [Layer memory]); a signature NEWER measured in a precision keeps
//    only NEWER's shapes in that precision (two sweeps are not one);
//  - NEWER's kernels, fits, collectives, copies and memory stay as they are:
//    they are the newer machine's state, and a layer's time does not depend
//    on them;
//  - OLDER must have been measured on the same device (same name and kind),
//    else it is refused in one line naming both;
//  - provenance: info "import.layers.files" (the file), ".created" (when
//    OLDER was calibrated), ".signatures" (how many were added).
#include <set>
#include <utility>

#include "dtsim/calibrate/calibrate.hpp"
#include "dtsim/calibrate/import.hpp"
#include "dtsim/sim/config_io.hpp"
#include "dtsim/sim/error.hpp"
#include "import_common.hpp"

namespace dtsim::calib {

ImportResult import_layers(const std::string& older_path, sim::Profile& profile, const ImportOptions& /*options*/) {
  const sim::Profile older = sim::load_profile(older_path);
  const auto info = [](const sim::Profile& p, const char* key) {
    const auto it = p.info.find(key);
    return it == p.info.end() ? std::string() : it->second;
  };
  const std::string into = profile.path.empty() ? std::string("the profile") : profile.path;
  if (info(older, "device_kind") != info(profile, "device_kind") || info(older, "device") != info(profile, "device")) {
    throw ConfigError(older_path + ": measured on '" + info(older, "device") + "' (" + info(older, "device_kind") + "), " + into +
                      " on '" + info(profile, "device") + "' (" + info(profile, "device_kind") +
                      "); layers are imported only between calibrations of the same device");
  }
  std::set<std::pair<std::string, sim::Precision>> have;
  for (const auto& l : profile.layers) have.insert({l.signature, l.precision});
  ImportResult r;
  std::set<std::pair<std::string, sim::Precision>> added;
  for (const auto& l : older.layers) {
    if (have.count({l.signature, l.precision})) continue;
    profile.layers.push_back(l);
    added.insert({l.signature, l.precision});
    ++r.samples;
  }
  if (r.samples == 0) return r;
  detail::append_info(profile, "import.layers.files", detail::base_name(older_path));
  detail::append_info(profile, "import.layers.created", info(older, "created"));
  detail::append_info(profile, "import.layers.signatures", std::to_string(added.size()));
  r.lines.push_back(older_path + ": " + std::to_string(added.size()) + " layer signatures and precisions (" + std::to_string(r.samples) +
                    " shapes) that " + into + " did not measure, calibrated " + info(older, "created"));
  return r;
}

std::string import_layers_command(const std::string& older, const ImportOptions& o) {
  if (o.out.empty()) throw ConfigError("--out: a profile path is required (e.g. --out configs/profiles/h100-sxm.h5)");
  if (o.into.empty()) {
    throw ConfigError("dtsim profile import-layers: --into NEWER.h5 is required (the calibration the layers of " + older + " are added to)");
  }
  check_output(o.out);  // Note [Check the output first]
  sim::Profile p = detail::start_profile(o);
  ImportResult r = import_layers(older, p, o);
  if (r.samples == 0) throw ConfigError(older + ": every layer it measured is in " + o.into + " already; nothing was written");
  return detail::finish(p, o, r);
}

}  // namespace dtsim::calib
