// A damaged profile is refused in one line before libhdf5 reads it (Note
// [Profile integrity] in sim/src/profile/profile_io.cpp).
#include <catch2/catch.hpp>

#include <csignal>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <random>
#include <string>

#include <unistd.h>

#include "dtsim/sim/checksum.hpp"
#include "dtsim/sim/error.hpp"
#include "dtsim/sim/profile.hpp"

using namespace dtsim;
using namespace dtsim::sim;

namespace {

std::string read_bytes(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  return std::string(std::istreambuf_iterator<char>(in), {});
}

void write_bytes(const std::string& path, const std::string& bytes) {
  std::ofstream out(path, std::ios::binary | std::ios::trunc);
  out.write(bytes.data(), static_cast<std::streamsize>(bytes.size()));
}

/// The error load_profile gives, or "" where it reads the file.
std::string load_error(const std::string& path) {
  try {
    (void)load_profile(path);
  } catch (const CalibrationError& e) {
    return e.what();
  }
  return "";
}

std::string temp_file(const std::string& name) {
  return (std::filesystem::temp_directory_path() / (name + "." + std::to_string(::getpid()) + ".h5")).string();
}

}  // namespace

TEST_CASE("CRC-64/XZ matches the catalogue's check value", "[profile][integrity]") {
  // The CRC catalogue (reveng) lists CRC-64/XZ with check = 0x995dc9bbdf1939fa
  // for the nine bytes "123456789"; the empty input leaves init ^ xorout = 0.
  CHECK(crc64("123456789", 9) == 0x995DC9BBDF1939FAULL);
  CHECK(crc64("", 0) == 0);
  // In pieces, the same.
  const std::uint64_t s = crc64_update(crc64_update(kCrc64Start, "1234", 4), "56789", 5);
  CHECK(crc64_final(s) == 0x995DC9BBDF1939FAULL);
}

TEST_CASE("every byte flip and truncation of a shipped profile is refused in one line", "[profile][integrity]") {
  const std::string dir = std::string(DTSIM_CONFIG_DIR_FOR_TESTS) + "/profiles/";
  for (const char* name : {"local-cpu.h5", "local-cpu-tiny.h5", "h100-sxm.h5"}) {
    const std::string shipped = dir + name;
    INFO(shipped);
    const Profile good = load_profile(shipped);
    CHECK(good.integrity == "crc64-xz");
    const std::string bytes = read_bytes(shipped);
    REQUIRE(bytes.size() > 512);
    const std::string path = temp_file(std::string("dtsim_flip_") + name);
    std::mt19937_64 rng(20261124);  // seeded: the same offsets every run
    int refused = 0;
    const int flips = 300;
    for (int i = 0; i < flips; ++i) {
      std::string damaged = bytes;
      // A third of the flips inside the 512-byte header, the rest anywhere.
      const std::size_t at = i % 3 == 0 ? rng() % 512 : rng() % bytes.size();
      damaged[at] = static_cast<char>(damaged[at] ^ static_cast<char>(1 + rng() % 255));
      write_bytes(path, damaged);
      const std::string e = load_error(path);
      INFO("byte " << at);
      CHECK(e.rfind(path + ": ", 0) == 0);
      CHECK(e.find('\n') == std::string::npos);
      if (!e.empty()) ++refused;
    }
    CHECK(refused == flips);
    for (int i = 0; i < 40; ++i) {
      const std::size_t keep = rng() % bytes.size();
      write_bytes(path, bytes.substr(0, keep));
      INFO("truncated to " << keep);
      const std::string e = load_error(path);
      CHECK(e.rfind(path + ": ", 0) == 0);
      CHECK((e.find("truncated") != std::string::npos || e.find("damaged") != std::string::npos));
    }
    std::remove(path.c_str());
  }
}

TEST_CASE("a profile without its header, a foreign file and a huge one are refused", "[profile][integrity]") {
  const std::string shipped = std::string(DTSIM_CONFIG_DIR_FOR_TESTS) + "/profiles/local-cpu-tiny.h5";
  const std::string path = temp_file("dtsim_integrity");
  // The header cut off: libhdf5 may or may not find the rest; either way one line.
  write_bytes(path, read_bytes(shipped).substr(512));
  CHECK(load_error(path).rfind(path + ": ", 0) == 0);
  write_bytes(path, "name: not a profile\n");
  CHECK(load_error(path).find("not an HDF5 file or a dtsim profile") != std::string::npos);
  // 300 MiB (sparse): refused by its size, before a byte is read.
  write_bytes(path, "");
  std::filesystem::resize_file(path, std::uintmax_t{300} << 20);
  CHECK(load_error(path).find("larger than any profile (limit 256 MiB)") != std::string::npos);
  std::remove(path.c_str());
}

TEST_CASE("a format-1 profile (before checksums) is still read, as unchecked", "[profile][integrity]") {
  // tests/data/profile-format1.h5: written by save_profile of commit 6a3d1ac
  // (format 1, no header): one layer gpt2.block:h=64,a=2,f=256,drop=1 at
  // micro-batch 1, sequence 64, forward median 1 ms over 5 reps, backward
  // median 2 ms; memory cuda_context_bytes = 1 MiB.
  const Profile p = load_profile(std::string(DTSIM_TEST_DATA) + "/profile-format1.h5");
  CHECK(p.integrity == "none");
  REQUIRE(p.layers.size() == 1);
  CHECK(p.layers[0].signature == "gpt2.block:h=64,a=2,f=256,drop=1");
  CHECK(p.layers[0].forward.median_s == 1e-3);
  CHECK(p.layers[0].backward.median_s == 2e-3);
  CHECK(p.layers[0].forward.reps == 5);
  CHECK(p.memory.at("cuda_context_bytes") == 1 << 20);
  // Saved again, it is format 2 with its checksum, the same content.
  const std::string path = temp_file("dtsim_upgrade");
  save_profile(p, path);
  CHECK(read_bytes(path).rfind("dtsim-profile\nintegrity crc64-xz ", 0) == 0);
  const Profile q = load_profile(path);
  CHECK(q.integrity == "crc64-xz");
  CHECK(q.layers[0].backward.median_s == 2e-3);
  std::remove(path.c_str());
}

TEST_CASE("a damaged format-1 profile is refused in one line, never a crash or a hang (Note [Format 1 in a child])", "[profile][integrity]") {
  // Single bytes of tests/data/profile-format1.h5 that made libhdf5 1.10.8
  // crash (SIGSEGV at 8879 and 2751), allocate gigabytes (21699, 8389) or
  // throw a length error (21159) when it read the file in this process.
  // Read in a bounded child now, each is one line naming the file.
  const std::string good = read_bytes(std::string(DTSIM_TEST_DATA) + "/profile-format1.h5");
  REQUIRE(good.size() > 21699);
  const std::string path = temp_file("dtsim_format1_damaged");
  for (const auto& [at, byte] : std::vector<std::pair<std::size_t, char>>{
           {8879, '\x9d'}, {2751, '\x99'}, {21699, '\xa5'}, {8389, '\x04'}, {21159, '\x41'}}) {
    std::string bad = good;
    bad[at] = byte;
    write_bytes(path, bad);
    const std::string why = load_error(path);
    INFO("byte " << at << ": " << why);
    CHECK(why.rfind(path + ": a damaged format-1 profile (format 1 has no checksum): ", 0) == 0);
    CHECK(why.find('\n') == std::string::npos);
  }
  // The child dies of its crash even where the host program handles
  // SIGSEGV (a test framework, Python's faulthandler): its handlers are
  // reset in the child, which would otherwise run this one and exit 77.
  std::string bad = good;
  bad[8879] = '\x9d';
  write_bytes(path, bad);
  struct sigaction mine {}, before {};
  mine.sa_handler = [](int) { ::_exit(77); };
  sigemptyset(&mine.sa_mask);
  REQUIRE(::sigaction(SIGSEGV, &mine, &before) == 0);
  const std::string why = load_error(path);
  ::sigaction(SIGSEGV, &before, nullptr);
  CHECK(why.find("libhdf5 crashed reading it (Segmentation fault)") != std::string::npos);
  std::remove(path.c_str());
}
