#pragma once
// JSON out: a streaming writer whose keys, strings and numbers nlohmann-json
// renders (Note [JSON out] in sim/src/core/json_writer.cpp).

#include <cstdint>
#include <string>
#include <vector>

namespace dtsim::sim {

/// An exact decimal: `scaled` / 10^`places`, written without rounding
/// (Decimal{1234567, 3} is 1234.567). Trace timestamps are integer
/// nanoseconds written as microseconds this way.
struct Decimal {
  std::int64_t scaled = 0;
  int places = 0;
};

/// The version of each --json output's schema (docs/json.md): bumped when an
/// existing field changes its meaning or goes.
inline constexpr int kJsonSchemaVersion = 1;

/// Builds a JSON document; keys and strings are escaped (invalid UTF-8
/// replaced by U+FFFD), doubles written in the shortest form that reads back
/// to the same double, integers and Decimals exactly.
class JsonWriter {
 public:
  explicit JsonWriter(bool pretty = true) : pretty_(pretty) {}
  JsonWriter& begin_object();
  JsonWriter& end_object();
  JsonWriter& begin_array();
  JsonWriter& end_array();
  JsonWriter& key(const std::string& k);
  JsonWriter& value(const std::string& v);
  JsonWriter& value(const char* v);
  /// Not finite (NaN, infinity): null, as JSON has no such number.
  JsonWriter& value(double v);
  JsonWriter& value(std::int64_t v);
  JsonWriter& value(int v) { return value(static_cast<std::int64_t>(v)); }
  JsonWriter& value(std::uint64_t v);
  JsonWriter& value(bool v);
  JsonWriter& value(Decimal v);
  JsonWriter& null();
  /// Shorthand for key(k).value(v).
  template <class T>
  JsonWriter& field(const std::string& k, const T& v) {
    key(k);
    return value(v);
  }
  /// "schema_version" (kJsonSchemaVersion) and "dtsim_version"
  /// (sim::version()): the first fields of every --json output's object.
  JsonWriter& header();
  /// The document so far.
  const std::string& str() const { return out_; }

 private:
  void before_value();
  void newline();
  std::string out_;
  std::vector<bool> first_;   // per open container: no element written yet
  bool pretty_;
  bool after_key_ = false;
};

/// A string as a JSON string literal, quotes included (nlohmann-json's escaping).
std::string json_quote(const std::string& s);

}  // namespace dtsim::sim
