#pragma once
// dtsim's version, set once by CMake's project(VERSION) in the top-level
// CMakeLists.txt.

namespace dtsim::sim {

/// The version, e.g. "0.1.0": what --version prints and every --json output carries.
const char* version();

}  // namespace dtsim::sim
