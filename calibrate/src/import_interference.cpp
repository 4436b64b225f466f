// Note [Importing interference]
// dtsim_interference_bench needs nothing but the CUDA toolkit (Note
// [Measuring interference]): it can run where dtsim cannot (a cluster node
// without LibTorch, a lease too short for a calibration; scripts/gpu-probes
// builds and runs it alone). `dtsim profile import-interference OUT.txt
// --into P.h5 --out F.h5` takes what it printed:
//  - every `interference` record replaces --into's (two sweeps are not one);
//    everything else of --into stays;
//  - the bench's device must be --into's (a GPU's SMs and HBM are what was
//    measured), else it is refused in one line naming both;
//  - the two interference fits are made again from the records (Note
//    [Interference fit]); no other fit is touched;
//  - a line that is not the bench's protocol is refused naming the file and
//    line; a file with no record says so;
//  - provenance: info "import.interference.files" and ".device".
#include <cerrno>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <sstream>

#include "dtsim/calibrate/calibrate.hpp"
#include "dtsim/calibrate/import.hpp"
#include "dtsim/sim/error.hpp"
#include "import_common.hpp"

namespace dtsim::calib {

ImportResult import_interference(const std::string& path, sim::Profile& profile, const ImportOptions& /*options*/) {
  // The bench prints a few kilobytes; a file of megabytes is something else.
  std::error_code ec;
  const auto size = std::filesystem::file_size(path, ec);
  if (!ec && size > (std::uintmax_t{16} << 20)) {
    throw ConfigError(path + ": " + std::to_string(size >> 20) + " MiB is not dtsim_interference_bench's output (a few KiB)");
  }
  std::ifstream in(path, std::ios::binary);
  if (!in) throw IoError(path + ": cannot read: " + std::strerror(errno));
  sim::Profile read;
  int n = 0;
  for (std::string line; std::getline(in, line);) {
    ++n;
    if (line.empty() || line == "\r") continue;
    try {
      parse_bench_line(line, "interference", read, nullptr);
    } catch (const CalibrationError& e) {
      throw ConfigError(path + ":" + std::to_string(n) + ": " + e.what() + " (dtsim_interference_bench's output is expected)");
    }
  }
  if (read.interference.empty()) {
    throw ConfigError(path + ": no interference records (the output of dtsim_interference_bench, or of scripts/gpu-probes' interference.txt)");
  }
  const auto device = read.info.find("interference.device");
  detail::adopt_device(profile, device == read.info.end() ? std::string() : device->second, path);
  ImportResult r;
  r.replaced = static_cast<int>(profile.interference.size());
  r.samples = static_cast<int>(read.interference.size());
  profile.interference = read.interference;
  detail::refit(profile, {"interference.compute", "interference.memory"}, true, r);
  detail::append_info(profile, "import.interference.files", detail::base_name(path));
  if (device != read.info.end()) detail::append_info(profile, "import.interference.device", device->second);
  r.lines.push_back(path + ": " + std::to_string(r.samples) + " settings of compute beside a stand-in for collectives" +
                    (r.replaced > 0 ? " (in place of " + std::to_string(r.replaced) + ")" : std::string()));
  return r;
}

std::string import_interference_command(const std::string& path, const ImportOptions& o) {
  return detail::import_command(o, "configs/profiles/my-gpu.h5", [&](sim::Profile& p) { return import_interference(path, p, o); });
}

}  // namespace dtsim::calib
