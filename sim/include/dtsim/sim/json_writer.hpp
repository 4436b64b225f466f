#pragma once
// A small streaming JSON writer (we emit JSON; yaml-cpp reads it back).

#include <cstdint>
#include <string>
#include <vector>

namespace dtsim::sim {

/// Builds a JSON document; keys and values are escaped, numbers are written
/// with enough digits to round-trip.
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
  JsonWriter& value(double v);
  JsonWriter& value(std::int64_t v);
  JsonWriter& value(int v) { return value(static_cast<std::int64_t>(v)); }
  JsonWriter& value(std::uint64_t v) { return value(static_cast<std::int64_t>(v)); }
  JsonWriter& value(bool v);
  JsonWriter& null();
  /// Shorthand for key(k).value(v).
  template <class T>
  JsonWriter& field(const std::string& k, const T& v) {
    key(k);
    return value(v);
  }
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

/// Escapes a string for JSON (without the quotes).
std::string json_escape(const std::string& s);

}  // namespace dtsim::sim
