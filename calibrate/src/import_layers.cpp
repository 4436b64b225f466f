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
#include <iterator>
#include <set>
#include <utility>

#include "dtsim/calibrate/calibrate.hpp"
#include "dtsim/calibrate/import.hpp"
#include "dtsim/sim/config_io.hpp"
#include "dtsim/sim/cost_profile.hpp"
#include "dtsim/sim/error.hpp"
#include "import_common.hpp"

namespace dtsim::calib {

namespace {

std::string info_of(const sim::Profile& p, const char* key) {
  const auto it = p.info.find(key);
  return it == p.info.end() ? std::string() : it->second;
}

/// Refuses `other` where it was not measured on `profile`'s device; `what`
/// says what is imported only between calibrations of one device.
void check_same_device(const sim::Profile& other, const std::string& other_path, const sim::Profile& profile, const char* what) {
  const std::string into = profile.path.empty() ? std::string("the profile") : profile.path;
  if (info_of(other, "device_kind") != info_of(profile, "device_kind") || info_of(other, "device") != info_of(profile, "device")) {
    throw ConfigError(other_path + ": measured on '" + info_of(other, "device") + "' (" + info_of(other, "device_kind") + "), " + into +
                      " on '" + info_of(profile, "device") + "' (" + info_of(profile, "device_kind") + "); " + what +
                      " imported only between calibrations of the same device");
  }
}

}  // namespace

ImportResult import_layers(const std::string& older_path, sim::Profile& profile, const ImportOptions& /*options*/) {
  const sim::Profile older = sim::load_profile(older_path);
  const std::string into = profile.path.empty() ? std::string("the profile") : profile.path;
  check_same_device(older, older_path, profile, "layers are");
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
  detail::append_info(profile, "import.layers.created", info_of(older, "created"));
  detail::append_info(profile, "import.layers.signatures", std::to_string(added.size()));
  r.lines.push_back(older_path + ": " + std::to_string(added.size()) + " layer signatures and precisions (" + std::to_string(r.samples) +
                    " shapes) that " + into + " did not measure, calibrated " + info_of(older, "created"));
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


// Note [Importing the Python host cost]
// A Python loop's host cost is the difference of two probes one
// calibration timed: kernels python_ops and python_step from Python,
// host_ops and host_step from C++ (Note [Python host cost] in
// sim/src/cost/cost_python.cpp). A profile made where python3 could not
// import torch, or before the probe existed, has none, and `runtime:
// python` with it warns and prices the C++ loop. `dtsim profile
// import-python-host OTHER.h5 --into P.h5 --out F.h5` gives P the
// probes of another calibration of the same machine (a `--quick` one
// takes about two minutes here):
//  - all four kinds come from OTHER, and P's own host_ops and host_step
//    are dropped: a difference taken across two calibrations would
//    measure the machine's drift between them;
//  - OTHER's info python.* (the interpreter's and torch's versions) and
//    "python" (the interpreter) come along, and "import.python.created"
//    says when OTHER was calibrated;
//  - nothing else changes: P's layers, kernels, collectives, copies and
//    memory price everything a C++ loop runs, as before;
//  - OTHER must price a Python loop and be of P's device, each refused in
//    one line where not; a P that has a Python host cost gets OTHER's in
//    its place (the summary says both).
ImportResult import_python_host(const std::string& other_path, sim::Profile& profile, const ImportOptions& /*options*/) {
  const sim::Profile other = sim::load_profile(other_path);
  const auto cost = sim::python_host_cost(other);
  if (!cost) {
    const std::string why = info_of(other, "python");
    throw ConfigError(other_path + ": no Python host cost to import (" + (why.empty() ? std::string("it has no probes") : why) +
                      "); calibrate where python3 imports torch, e.g. dtsim calibrate --device cpu --quick --python /usr/bin/python3 "
                      "--out host.h5");
  }
  check_same_device(other, other_path, profile, "a Python host cost is");
  const auto before = sim::python_host_cost(profile);
  const auto probe = [](const sim::KernelSample& k) {
    return k.kind == "python_ops" || k.kind == "python_step" || k.kind == "host_ops" || k.kind == "host_step";
  };
  ImportResult r;
  r.replaced = static_cast<int>(std::erase_if(profile.kernels, probe));
  for (const auto& k : other.kernels) {
    if (!probe(k)) continue;
    profile.kernels.push_back(k);
    ++r.samples;
  }
  for (auto it = profile.info.begin(); it != profile.info.end();) {
    it = it->first.rfind("python.", 0) == 0 ? profile.info.erase(it) : std::next(it);
  }
  for (const auto& [key, value] : other.info) {
    if (key.rfind("python.", 0) == 0) profile.info[key] = value;
  }
  profile.info["python"] = info_of(other, "python");
  profile.info["import.python.files"] = detail::base_name(other_path);
  profile.info["import.python.created"] = info_of(other, "created");
  std::string line = other_path + ": the Python loop's host cost (" + std::to_string(r.samples) + " probes; Python " +
                     info_of(other, "python.python") + ", torch " + info_of(other, "python.torch") + ", calibrated " +
                     info_of(other, "created") + "): " + detail::human_seconds(cost->per_op_s) + " an op, " +
                     detail::human_seconds(cost->per_tensor_s) + " a tensor's step";
  if (before) {
    line += " (it had " + detail::human_seconds(before->per_op_s) + " and " + detail::human_seconds(before->per_tensor_s) + ")";
  }
  r.lines.push_back(line);
  return r;
}

std::string import_python_host_command(const std::string& other, const ImportOptions& o) {
  if (o.out.empty()) throw ConfigError("--out: a profile path is required (e.g. --out configs/profiles/local-cpu.h5)");
  if (o.into.empty()) {
    throw ConfigError("dtsim profile import-python-host: --into PROFILE.h5 is required (the profile the Python host cost of " + other +
                      " is added to)");
  }
  check_output(o.out);  // Note [Check the output first]
  sim::Profile p = detail::start_profile(o);
  ImportResult r = import_python_host(other, p, o);
  return detail::finish(p, o, r);
}

}  // namespace dtsim::calib
