// Note [JSON out]
// Every JSON dtsim writes (--json, traces, the runtime's measurements,
// profile show) goes through JsonWriter. The writer lays out the structure
// (braces, commas, the two-space indentation nlohmann's dump(2) uses) as the
// callers stream it, and nlohmann-json renders every key, string and number:
// its escaping (control characters, invalid UTF-8 replaced by U+FFFD rather
// than thrown at the end of a long run) and its doubles, the shortest text
// that reads back to the same double (a round trip, never %.10g's ten
// digits). Streaming rather than building an ordered_json tree keeps a trace
// of a million events from being held twice, and lets a value be an exact
// Decimal: a tree stores doubles, and 1234.567 as a double is not 1234.567,
// while simulated time is integer nanoseconds and a trace's microseconds
// must be exactly those (Decimal{ns, 3}), or slices on a track that touch
// seem to overlap (Note [Trace timestamps] in sim/src/report/report.cpp).
// Other simulated times go out the same way: iteration_time_s is
// Decimal{ns, 9}, 0.025088395 where ns * 1e-9 as a double would print
// 0.025088395000000003.
#include "dtsim/sim/json_writer.hpp"

#include <nlohmann/json.hpp>

#include "dtsim/sim/error.hpp"
#include "dtsim/sim/version.hpp"

namespace dtsim::sim {
namespace {

template <class T>
std::string dump(const T& v) {
  return nlohmann::ordered_json(v).dump(-1, ' ', false, nlohmann::ordered_json::error_handler_t::replace);
}

}  // namespace

std::string json_quote(const std::string& s) { return dump(s); }

void JsonWriter::newline() {
  if (!pretty_) return;
  out_ += '\n';
  out_.append(first_.size() * 2, ' ');
}

void JsonWriter::before_value() {
  if (after_key_) {
    after_key_ = false;
    return;
  }
  if (!first_.empty()) {
    if (!first_.back()) out_ += ',';
    first_.back() = false;
    newline();
  }
}

JsonWriter& JsonWriter::begin_object() {
  before_value();
  out_ += '{';
  first_.push_back(true);
  return *this;
}

JsonWriter& JsonWriter::end_object() {
  const bool empty = first_.back();
  first_.pop_back();
  if (!empty) newline();
  out_ += '}';
  return *this;
}

JsonWriter& JsonWriter::begin_array() {
  before_value();
  out_ += '[';
  first_.push_back(true);
  return *this;
}

JsonWriter& JsonWriter::end_array() {
  const bool empty = first_.back();
  first_.pop_back();
  if (!empty) newline();
  out_ += ']';
  return *this;
}

JsonWriter& JsonWriter::key(const std::string& k) {
  before_value();
  out_ += json_quote(k);
  out_ += pretty_ ? ": " : ":";
  after_key_ = true;
  return *this;
}

JsonWriter& JsonWriter::value(const std::string& v) {
  before_value();
  out_ += json_quote(v);
  return *this;
}

JsonWriter& JsonWriter::value(const char* v) { return value(std::string(v)); }

JsonWriter& JsonWriter::value(double v) {
  before_value();
  out_ += dump(v);  // nlohmann writes null for NaN and infinities
  return *this;
}

JsonWriter& JsonWriter::value(std::int64_t v) {
  before_value();
  out_ += dump(v);
  return *this;
}

JsonWriter& JsonWriter::value(std::uint64_t v) {
  before_value();
  out_ += dump(v);
  return *this;
}

JsonWriter& JsonWriter::value(bool v) {
  before_value();
  out_ += dump(v);
  return *this;
}

JsonWriter& JsonWriter::value(Decimal v) {
  DTSIM_ASSERT(v.places >= 0 && v.places <= 18, "a Decimal has 0 to 18 places");
  before_value();
  // Integer part and `places` fraction digits of |scaled|, trailing zeros
  // dropped: digits only, so the text is the exact value.
  const bool negative = v.scaled < 0;
  const std::uint64_t mag = negative ? 0 - static_cast<std::uint64_t>(v.scaled) : static_cast<std::uint64_t>(v.scaled);
  std::uint64_t unit = 1;
  for (int i = 0; i < v.places; ++i) unit *= 10;
  std::string text = std::to_string(mag / unit);
  std::uint64_t frac = mag % unit;
  if (frac != 0) {
    std::string digits = std::to_string(frac);
    digits.insert(0, static_cast<std::size_t>(v.places) - digits.size(), '0');
    while (digits.back() == '0') digits.pop_back();
    text += '.' + digits;
  }
  if (negative) out_ += '-';
  out_ += text;
  return *this;
}

JsonWriter& JsonWriter::null() {
  before_value();
  out_ += "null";
  return *this;
}

JsonWriter& JsonWriter::header() {
  field("schema_version", kJsonSchemaVersion);
  return field("dtsim_version", version());
}

}  // namespace dtsim::sim
