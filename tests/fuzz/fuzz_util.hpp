#pragma once
// Shared by the libFuzzer targets (tests/fuzz/README.md): what counts as the
// expected outcome of bad input, and a scratch file for loaders that take a path.

#include <unistd.h>

#include <cstddef>
#include <cstdint>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <string>

#include "dtsim/sim/error.hpp"

namespace dtsim::fuzz {

/// Runs `f`, treating the library's typed bad-input errors as the expected
/// outcome. Anything else (InternalError, a standard or yaml-cpp exception)
/// escapes, reaches std::terminate and libFuzzer reports it as a crash.
template <class F>
void expect_typed_errors(F&& f) {
  try {
    f();
  } catch (const ConfigError&) {
  } catch (const IoError&) {
  } catch (const CalibrationError&) {
  } catch (const UnsupportedError&) {
  }
}

/// The input as text.
inline std::string text_of(const std::uint8_t* data, std::size_t size) {
  return std::string(reinterpret_cast<const char*>(data), size);
}

/// A directory of this process under $TMPDIR (else /tmp), removed at exit.
class ScratchDir {
 public:
  ScratchDir() {
    const char* tmp = std::getenv("TMPDIR");
    path_ = std::filesystem::path(tmp != nullptr && *tmp != '\0' ? tmp : "/tmp") /
            ("dtsim-fuzz-" + std::to_string(::getpid()));
    std::filesystem::create_directories(path_);
  }
  ~ScratchDir() {
    std::error_code ec;
    std::filesystem::remove_all(path_, ec);
  }
  ScratchDir(const ScratchDir&) = delete;
  ScratchDir& operator=(const ScratchDir&) = delete;
  /// Writes `size` bytes to NAME in the directory, replacing it; returns its path.
  std::string write(const std::string& name, const std::uint8_t* data, std::size_t size) const {
    const std::string p = (path_ / name).string();
    std::ofstream out(p, std::ios::binary | std::ios::trunc);
    out.write(reinterpret_cast<const char*>(data), static_cast<std::streamsize>(size));
    out.close();
    if (!out) std::abort();  // the harness's own failure, not the library's
    return p;
  }

 private:
  std::filesystem::path path_;
};

/// The process's scratch directory.
inline const ScratchDir& scratch() {
  static const ScratchDir dir;
  return dir;
}

}  // namespace dtsim::fuzz
