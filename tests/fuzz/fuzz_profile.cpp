// Fuzz target: a calibration profile (`--profile FILE`, `dtsim profile
// show`): the bytes written to a scratch file under $TMPDIR, loaded, and
// turned into the costs predict prices from. A profile's CRC-64 header
// (Note [Profile integrity], sim/src/profile/profile_io.cpp) stops damage,
// which is what this target fuzzes: any bytes a file may hold after a bad
// copy or a cut download. It does not stop a hostile file, which can carry a
// checksum that matches its body: with DTSIM_FUZZ_RESEAL=1 an input with a
// header is also loaded resealed (checksum and length recomputed), so that
// libhdf5 itself reads fuzzed bytes. That mode finds crashes inside libhdf5
// (docs/reliability.md, "Known limits") and is not run by CI.
#include <cstddef>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <string>
#include <string_view>
#include <utility>

#include "dtsim/sim/checksum.hpp"
#include "dtsim/sim/cost_profile.hpp"
#include "dtsim/sim/profile.hpp"
#include "fuzz_util.hpp"

namespace {

/// The header's size and first line, as profile_io.cpp writes them.
constexpr std::size_t kHeaderBytes = 512;
constexpr std::string_view kMagic = "dtsim-profile\n";

/// Loads the profile at `path` as `dtsim predict --profile` does.
void load(const std::string& path) {
  dtsim::fuzz::expect_typed_errors([&] {
    dtsim::sim::Profile p = dtsim::sim::load_profile(path);
    // The warnings predict adds from the profile's info strings.
    (void)dtsim::sim::profile_sweep_warning(p);
    (void)dtsim::sim::profile_speed_warning(p);
    const dtsim::sim::ProfileCosts costs(std::move(p));
    (void)costs.gpu();
  });
}

/// `bytes` with a header whose checksum and length match its body.
std::string resealed(std::string bytes) {
  const std::uint64_t crc = dtsim::sim::crc64(bytes.data() + kHeaderBytes, bytes.size() - kHeaderBytes);
  char lines[96];
  std::snprintf(lines, sizeof lines, "integrity crc64-xz %016llx\nbytes %llu\n", static_cast<unsigned long long>(crc),
                static_cast<unsigned long long>(bytes.size() - kHeaderBytes));
  std::string header = std::string(kMagic) + lines;
  header.resize(kHeaderBytes, '\0');
  bytes.replace(0, kHeaderBytes, header);
  return bytes;
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  const auto& dir = dtsim::fuzz::scratch();
  load(dir.write("profile.h5", data, size));
  const std::string text = dtsim::fuzz::text_of(data, size);
  static const bool reseal = std::getenv("DTSIM_FUZZ_RESEAL") != nullptr;
  if (reseal && text.size() >= kHeaderBytes && text.compare(0, kMagic.size(), kMagic) == 0) {
    const std::string sealed = resealed(text);
    load(dir.write("sealed.h5", reinterpret_cast<const std::uint8_t*>(sealed.data()), sealed.size()));
  }
  return 0;
}
