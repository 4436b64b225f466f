#pragma once
// Reading YAML and JSON (strict, Note [Strict configs]) into plain structs
// with errors that name the file, the line and the key, and "did you mean"
// for unknown keys. Loaders in sim/ and models/ share this.

#include <cstdint>
#include <initializer_list>
#include <map>
#include <set>
#include <string>
#include <utility>
#include <vector>

#include <yaml-cpp/yaml.h>

namespace dtsim::sim {

/// One `--set section.key.path=value` from the command line.
struct Override {
  Override() = default;
  /// {"plan", "micro_batch", "32"}, and optionally where it came from.
  Override(std::string in_section, std::string in_path, std::string in_value, std::string in_from = {})
      : section(std::move(in_section)), path(std::move(in_path)), value(std::move(in_value)), from(std::move(in_from)) {}
  std::string section;  ///< "plan", "cluster" or "model"
  std::string path;     ///< "micro_batch", "intra_node.bandwidth_GBps"
  std::string value;    ///< YAML text: "32", "true", "[30,18]"; "null" unsets the key
  /// Where the value came from when not the command line: "ds.json:7
  /// (train_batch_size)" for a framework's config (framework_config.hpp).
  std::string from;
  /// "--set plan.micro_batch", or `from`
  std::string origin() const { return from.empty() ? "--set " + section + "." + path : from; }
};

/// Parses "plan.micro_batch=32"; throws ConfigError naming what is valid.
Override parse_override(const std::string& text);

/// The closest candidate to `word` by edit distance, or "" if none is close.
std::string did_you_mean(const std::string& word, const std::vector<std::string>& candidates);

/// The prefix of an error about `key` ("plan.tp") found at `where` (a
/// file:line, or "--set plan.tp", which already names it): "where: key",
/// or `where` alone where it is the override of that key.
std::string error_at(const std::string& where, const std::string& key);

/// The largest config file read, and the deepest nesting accepted (Note
/// [Strict configs] in sim/src/config/config_node.cpp).
inline constexpr std::size_t kMaxConfigBytes = std::size_t{10} << 20;
inline constexpr int kMaxConfigDepth = 64;
/// The most values a config's tree may hold once its aliases are expanded
/// (a 10 MiB file written out holds under a million).
inline constexpr std::size_t kMaxConfigValues = 2'000'000;

/// Loads a YAML or JSON (by its .json name) file; throws IoError (missing,
/// unreadable) or ConfigError (too large, malformed, a duplicate or
/// non-scalar key, too deep: with file, line and column).
YAML::Node load_yaml_file(const std::string& path);
/// The same for text already read; `file` names it in errors.
/// `duplicates`: a key given twice is let through (its reader takes the
/// last, as PyYAML does: a Python framework's own files have them).
YAML::Node parse_config_text(const std::string& text, const std::string& file, bool json, bool duplicates = false);

/// "file:line:column" of the 1-based byte offset `byte` into `text` (as
/// nlohmann-json's parse_error::byte counts), both 1-based.
std::string text_position(const std::string& text, std::size_t byte, const std::string& file);
/// nlohmann-json's message without its "[json.exception...] parse error at
/// line L, column C: " prefix (text_position says where).
std::string json_error_text(const std::string& what);

/// Applies overrides for `section` to `root` (a mapping); returns the keys
/// (dotted paths) they set. Throws ConfigError for a malformed value.
std::set<std::string> apply_overrides(YAML::Node& root, const std::string& section,
                                      const std::vector<Override>& overrides);

/// A mapping being read. Every accessor records the key as used; finish()
/// rejects keys nobody asked for, with a suggestion.
class ConfigMap {
 public:
  /// `file` names the source ("" for built-in), `prefix` the key path ("plan").
  ConfigMap(YAML::Node node, std::string file, std::string prefix,
            std::set<std::string> overridden = {},
            std::map<std::string, std::string> override_from = {});
  /// The top-level map of section `section` ("plan", "cluster", "model") with
  /// that section's overrides applied first; `root` may be null (all defaults).
  static ConfigMap open(YAML::Node root, const std::string& file, const std::string& section,
                        const std::vector<Override>& overrides);

  bool has(const std::string& key) const;
  /// Whether an override (a --set or a framework's config) gave `key`.
  bool overridden(const std::string& key) const;
  std::string get_string(const std::string& key, const std::string& fallback) const;
  std::string require_string(const std::string& key) const;
  std::int64_t get_int(const std::string& key, std::int64_t fallback, std::int64_t min_value,
                       std::int64_t max_value) const;
  double get_double(const std::string& key, double fallback, double min_value,
                    double max_value) const;
  bool get_bool(const std::string& key, bool fallback) const;
  /// Reads one of a fixed set of words; the error lists them.
  template <class E>
  E get_enum(const std::string& key, E fallback,
             std::initializer_list<std::pair<const char*, E>> choices) const {
    used_.insert(key);
    if (!has(key)) return fallback;
    const std::string v = get_string(key, "");
    std::vector<std::string> names;
    for (const auto& [n, e] : choices) {
      if (v == n) return e;
      names.emplace_back(n);
    }
    fail_choice(key, v, names);
  }
  /// A nested mapping (empty if absent).
  ConfigMap sub(const std::string& key) const;
  /// A list of integers.
  std::vector<std::int64_t> get_int_list(const std::string& key) const;
  /// A list of words: a YAML list of strings, or one string of words
  /// separated by commas or spaces (as a --set writes them); empty if absent.
  std::vector<std::string> get_word_list(const std::string& key) const;

  /// Throws ConfigError for the first key that was never read.
  void finish(const std::vector<std::string>& also_allowed = {}) const;

  /// "file:line" of key (or of the map), or "--set prefix.key" if overridden.
  std::string where(const std::string& key) const;
  /// "prefix.key"
  std::string full_key(const std::string& key) const;
  /// Throws ConfigError "where: full_key: message".
  [[noreturn]] void fail(const std::string& key, const std::string& message) const;
  const std::string& file() const { return file_; }
  /// Every key of this map, in file order.
  std::vector<std::string> keys() const;

 private:
  [[noreturn]] void fail_choice(const std::string& key, const std::string& value,
                                const std::vector<std::string>& names) const;
  YAML::Node scalar(const std::string& key, const char* expected) const;

  YAML::Node node_;
  std::string file_;
  std::string prefix_;
  std::set<std::string> overridden_;
  std::map<std::string, std::string> override_from_;  ///< section-relative key -> Override::from
  mutable std::set<std::string> used_;
};

}  // namespace dtsim::sim
