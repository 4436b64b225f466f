#pragma once
// What the three framework importers share (framework_config.hpp): reading a
// bounded file, and the list of overrides each builds.

#include <cstdint>
#include <set>
#include <string>

#include "dtsim/sim/framework_config.hpp"

namespace dtsim::sim::detail {

/// A config file's text, refused before reading past kMaxConfigBytes;
/// throws IoError (missing, a directory, unreadable) or ConfigError.
std::string read_config_text(const std::string& path);

/// Collects a FrameworkConfig's overrides: each key once, with where it came
/// from. finish() resets every plan key the starting plan may set and the
/// framework did not (Note [Framework configs]).
class OverrideList {
 public:
  explicit OverrideList(FrameworkConfig& fc) : fc_(fc) {}
  /// plan.KEY=VALUE from `from` ("file:line (key)"); a later set of the same key replaces it.
  void plan(const std::string& key, const std::string& value, const std::string& from);
  /// model.KEY=VALUE.
  void model(const std::string& key, const std::string& value, const std::string& from);
  bool has_plan(const std::string& key) const { return set_.count("plan." + key) > 0; }
  /// Appends "null" for every plan key not set, naming the file.
  void finish();

 private:
  void add(const std::string& section, const std::string& key, const std::string& value, const std::string& from);
  FrameworkConfig& fc_;
  std::set<std::string> set_;
};

/// `v` as the shortest decimal that reads back the same ("1000", "0.5").
std::string format_number(double v);

}  // namespace dtsim::sim::detail
