// Note [Importing measurements]
// `dtsim calibrate` measures the machine it runs on. A user whose cluster
// cannot run dtsim (no LibTorch there, a job scheduler, minutes of
// allocation) usually has two measurements of it already: the nccl-tests
// logs its administrators ran (src/import_nccl_tests.cpp) and a PyTorch
// profiler trace of a real training step (src/import_trace.cpp). Both are
// turned into the samples a calibration records (CommSample, KernelSample)
// and fitted by the calibration's own fit (fit_profile), so a profile that
// imported them prices work exactly as one that measured it:
//  - a new profile, or --into's: every entry of an existing profile is
//    kept, except samples of the same collective, rank count and placement,
//    which the new run replaces (two runs of one topology are not one sweep);
//  - only the fits whose samples changed are refitted; the others stay as
//    they were (a shipped profile may hold fits of samples it no longer
//    carries);
//  - provenance: info "import.<kind>.files" (file names), ".date", and
//    what each file gave, beside the calibration's own keys;
//  - the profile is written atomically (save_profile), --out checked first.
#include <algorithm>
#include <cstdio>
#include <ctime>

#include "dtsim/calibrate/calibrate.hpp"
#include "dtsim/sim/config_io.hpp"
#include "dtsim/sim/cost_profile.hpp"
#include "dtsim/sim/error.hpp"
#include "import_common.hpp"

namespace dtsim::calib {

std::string ImportResult::summary() const {
  std::string out;
  for (const auto& l : lines) out += l + "\n";
  return out;
}

namespace detail {

std::string now_iso() {
  const std::time_t t = std::time(nullptr);
  char buf[64];
  std::strftime(buf, sizeof buf, "%Y-%m-%dT%H:%M:%SZ", std::gmtime(&t));
  return buf;
}

std::string base_name(const std::string& path) {
  const auto slash = path.find_last_of('/');
  return slash == std::string::npos ? path : path.substr(slash + 1);
}

void adopt_device(sim::Profile& p, const std::string& device, const std::string& source) {
  const auto kind = p.info.find("device_kind");
  if (kind != p.info.end() && kind->second == "cpu" && (!p.comm.empty() || !p.kernels.empty() || !p.layers.empty())) {
    throw ConfigError(source + ": measured on GPUs (" + (device.empty() ? std::string("NCCL") : device) + "), but the profile " +
                      (p.path.empty() ? std::string("given") : p.path) +
                      " was measured on a CPU; import into a GPU profile or a new one (leave out --into)");
  }
  const auto have = p.info.find("device");
  if (!device.empty() && have != p.info.end() && !have->second.empty()) {
    sim::DeviceSpec d;
    d.name = device;
    sim::Profile probe;
    probe.info = p.info;
    probe.path = p.path.empty() ? "given" : p.path;
    probe.info["device_kind"] = "cuda";
    if (const auto w = sim::profile_device_mismatch(probe, d); !w.empty()) throw ConfigError(source + ": " + w);
  }
  p.info["device_kind"] = "cuda";
  if (!device.empty() && (have == p.info.end() || have->second.empty())) p.info["device"] = device;
}

void refit(sim::Profile& p, const std::set<std::string>& names, bool drop_stale, ImportResult& result) {
  if (names.empty()) return;
  sim::Profile fitted;
  fitted.kernels = p.kernels;
  fitted.comm = p.comm;
  fitted.copies = p.copies;
  fitted.interference = p.interference;
  fit_profile(fitted);
  for (const auto& name : names) {
    const auto it = fitted.fits.find(name);
    if (it != fitted.fits.end()) {
      p.fits[name] = it->second;
      result.fits.push_back(name);
    } else if (drop_stale) {
      p.fits.erase(name);
    }
  }
}

void append_info(sim::Profile& p, const std::string& key, const std::string& value) {
  auto& v = p.info[key];
  v += (v.empty() ? "" : "; ") + value;
}

sim::ClusterSpec cluster_of(const std::string& name) { return sim::load_cluster(name); }

sim::Profile start_profile(const ImportOptions& o) {
  if (!o.into.empty()) {
    sim::Profile p = sim::load_profile(o.into);
    p.path = o.into;
    return p;
  }
  sim::Profile p;
  p.info["created"] = now_iso();
  if (!o.command_line.empty()) p.info["command"] = o.command_line;
  return p;
}

std::string finish(sim::Profile& p, const ImportOptions& o, ImportResult& result) {
  if (o.out.empty()) throw ConfigError("--out: a profile path is required (e.g. --out configs/profiles/my-cluster.h5)");
  check_output(o.out);
  if (!o.command_line.empty() && !o.into.empty()) append_info(p, "import.commands", o.command_line);
  sim::save_profile(p, o.out);
  p.path = o.out;
  result.lines.push_back("wrote " + o.out + (o.into.empty() ? "" : " (" + o.into + "'s entries kept)"));
  return result.summary();
}

std::string import_command(const ImportOptions& o, const std::string& example,
                           const std::function<ImportResult(sim::Profile&)>& import) {
  if (o.out.empty()) throw ConfigError("--out: a profile path is required (e.g. --out " + example + ")");
  check_output(o.out);  // Note [Check the output first]
  sim::Profile p = start_profile(o);
  ImportResult r = import(p);
  return finish(p, o, r);
}

std::string human_seconds(double s) {
  char buf[48];
  if (s >= 1) {
    std::snprintf(buf, sizeof buf, "%.3g s", s);
  } else if (s >= 1e-3) {
    std::snprintf(buf, sizeof buf, "%.3g ms", s * 1e3);
  } else {
    std::snprintf(buf, sizeof buf, "%.3g us", s * 1e6);
  }
  return buf;
}

}  // namespace detail
}  // namespace dtsim::calib
