#pragma once
// Helpers shared by the test binaries.

#include <functional>
#include <string>

#include "dtsim/sim/error.hpp"

namespace dtsim::test {

/// The message of the dtsim::Error `f` throws, or "(no error)".
inline std::string error_of(const std::function<void()>& f) {
  try {
    f();
  } catch (const Error& e) {
    return e.what();
  }
  return "(no error)";
}

}  // namespace dtsim::test
