// JSON in and out (Note [Strict configs], Note [JSON out], Note [Trace
// timestamps]): strict reading with line and column, exact numbers, the
// schema header of every --json output, and a trace whose slices nest.
#include <catch2/catch.hpp>

#include <algorithm>
#include <cmath>
#include <fstream>
#include <limits>
#include <map>
#include <string>
#include <tuple>
#include <vector>

#include <nlohmann/json.hpp>

#include "dtsim/models/models.hpp"
#include "dtsim/sim/config_io.hpp"
#include "dtsim/sim/config_node.hpp"
#include "dtsim/sim/json_writer.hpp"
#include "dtsim/sim/units.hpp"
#include "dtsim/sim/report.hpp"
#include "dtsim/sim/search.hpp"
#include "dtsim/sim/version.hpp"
#include "test_util.hpp"

using namespace dtsim;
using namespace dtsim::sim;

namespace {

std::string write(const test::TempDir& dir, const std::string& name, const std::string& text) {
  const std::string path = dir.file(name);
  std::ofstream(path) << text;
  return path;
}

/// The header every --json output starts with.
void check_header(const std::string& text) {
  const nlohmann::json j = nlohmann::json::parse(text);  // strict: throws on anything but RFC 8259
  REQUIRE(j.is_object());
  CHECK(j.at("schema_version") == kJsonSchemaVersion);
  CHECK(j.at("schema_version").is_number_integer());
  CHECK(j.at("dtsim_version") == std::string(version()));
  // The header comes first.
  CHECK(text.find("\"schema_version\"") < text.find("\"dtsim_version\""));
  CHECK(text.find("\"dtsim_version\"") < text.find(',', text.find("\"dtsim_version\"")));
}

/// A decimal of at most `places` places ("1234.567") times 10^places, as an
/// integer; -1 where it is not such a number (an exponent, a place too many, a sign).
std::int64_t decimal_text_to_int(const std::string& s, int places) {
  const auto dot = s.find('.');
  const std::string whole = s.substr(0, dot);
  const std::string frac = dot == std::string::npos ? "" : s.substr(dot + 1);
  if (whole.empty() || frac.size() > static_cast<std::size_t>(places) || (dot != std::string::npos && frac.empty())) return -1;
  for (char c : whole + frac) {
    if (c < '0' || c > '9') return -1;
  }
  std::int64_t unit = 1;
  for (int i = 0; i < places; ++i) unit *= 10;
  std::int64_t v = std::stoll(whole) * unit;
  if (!frac.empty()) v += std::stoll(frac + std::string(static_cast<std::size_t>(places) - frac.size(), '0'));
  return v;
}

/// Microseconds "1234.567" as integer nanoseconds.
std::int64_t us_text_to_ns(const std::string& s) { return decimal_text_to_int(s, 3); }

/// The text of the number after "key": in a JSON document.
std::string number_text(const std::string& doc, const std::string& key) {
  const auto at = doc.find("\"" + key + "\": ");
  if (at == std::string::npos) return "";
  const auto from = at + key.size() + 4;
  return doc.substr(from, doc.find_first_of(",\n}", from) - from);
}

/// The complete ("X") events of a Chrome trace with ts and dur as written
/// (nlohmann's SAX interface hands over each number's own text).
struct Slice {
  std::int64_t pid = -1, tid = -1;
  std::string ts, dur;
};
class TraceSax : public nlohmann::json_sax<nlohmann::json> {
 public:
  std::vector<Slice> slices;

  bool null() override { return true; }
  bool boolean(bool) override { return true; }
  bool number_integer(number_integer_t v) override { return number(std::to_string(v), v); }
  bool number_unsigned(number_unsigned_t v) override { return number(std::to_string(v), static_cast<std::int64_t>(v)); }
  bool number_float(number_float_t, const string_t& s) override { return number(s, -1); }
  bool string(string_t& s) override {
    if (depth_ == 3 && key_ == "ph") is_x_ = s == "X";
    return true;
  }
  bool binary(binary_t&) override { return true; }
  bool start_object(std::size_t) override {
    ++depth_;
    if (depth_ == 3) cur_ = Slice{}, is_x_ = false;
    return true;
  }
  bool end_object() override {
    if (depth_ == 3 && is_x_) slices.push_back(cur_);
    --depth_;
    return true;
  }
  bool start_array(std::size_t) override { ++depth_; return true; }
  bool end_array() override { --depth_; return true; }
  bool key(string_t& k) override {
    key_ = k;
    return true;
  }
  bool parse_error(std::size_t, const std::string&, const nlohmann::detail::exception& e) override {
    FAIL(e.what());
    return false;
  }

 private:
  bool number(const std::string& text, std::int64_t v) {
    if (depth_ != 3) return true;  // an event's own fields, not its args
    if (key_ == "ts") cur_.ts = text;
    if (key_ == "dur") cur_.dur = text;
    if (key_ == "pid") cur_.pid = v;
    if (key_ == "tid") cur_.tid = v;
    return true;
  }
  int depth_ = 0;  // 1: the document, 2: traceEvents, 3: an event
  std::string key_;
  Slice cur_;
  bool is_x_ = false;
};

}  // namespace

TEST_CASE("json: a trailing comma in a JSON config is refused with its line and column", "[json]") {
  // {"n_layer": 12,} : the '}' where a key must follow the comma is byte 16 of line 1.
  CHECK_THAT(test::error_of([] { parse_config_text("{\"n_layer\": 12,}", "c.json", true); }),
             Catch::StartsWith("c.json:1:16: malformed JSON: syntax error"));
  // The same over three lines: the '}' opens line 3.
  test::TempDir dir("json");
  const std::string hf = write(dir, "config.json", "{\"model_type\": \"gpt2\",\n \"n_layer\": 12,\n}\n");
  CHECK_THAT(test::error_of([&] { models::load_model(hf); }), Catch::StartsWith(hf + ":3:1: malformed JSON: syntax error"));
  const std::string plan = write(dir, "plan.json", "{\"dp\": 2,\n \"micro_batch\": [1, 2,]\n}\n");
  // Line 2, ' "micro_batch": [1, 2,]': 1 space, 13 for the quoted key, ': [1, 2,' to column 22, the ']' at 23.
  CHECK_THAT(test::error_of([&] { load_plan(plan); }), Catch::StartsWith(plan + ":2:23: malformed JSON"));
}

TEST_CASE("json: a JSON config with a comment is refused; YAML keeps its comments", "[json]") {
  // {"dp": 2 /* two */} : the '/' is byte 10.
  CHECK_THAT(test::error_of([] { parse_config_text("{\"dp\": 2 /* two */}", "p.json", true); }),
             Catch::StartsWith("p.json:1:10: malformed JSON"));
  CHECK_THAT(test::error_of([] { parse_config_text("{\"dp\": 2} // two\n", "p.json", true); }),
             Catch::StartsWith("p.json:1:11: malformed JSON"));
  CHECK(parse_config_text("dp: 2  # two\n", "p.yaml", false)["dp"].as<int>() == 2);
}

TEST_CASE("json: a JSON config's later errors still name the key's line", "[json]") {
  test::TempDir dir("json");
  const std::string plan = write(dir, "plan.json", "{\n  \"dp\": 2,\n  \"zero_stag\": 1\n}\n");
  CHECK_THAT(test::error_of([&] { load_plan(plan); }),
             Catch::StartsWith(plan + ":3: plan.zero_stag: unknown key (did you mean 'zero_stage'?)"));
  const std::string hf = write(dir, "config.json", "{\n  \"model_type\": \"gpt2\",\n  \"n_layer\": 0\n}\n");
  CHECK_THAT(test::error_of([&] { models::load_model(hf); }), Catch::StartsWith(hf + ":3: config.n_layer: 0 is out of range"));
  // Valid JSON yaml-cpp alone would misread: a surrogate pair (one emoji,
  // U+1F600, F0 9F 98 80 in UTF-8) and an escaped '/'; the keys after it keep their lines.
  const std::string head = "{\"model_type\": \"gpt2\", \"_name_or_path\": \"org\\/gpt-\\ud83d\\ude00\",\n \"n_embd\": 64, \"n_head\": 4,\n";
  const std::string named = write(dir, "named.json", head + " \"n_layer\": 2}\n");
  CHECK(models::load_model(named)->name() == "gpt-\xf0\x9f\x98\x80");
  const std::string bad = write(dir, "bad.json", head + " \"n_layer\": 0}\n");
  CHECK_THAT(test::error_of([&] { models::load_model(bad); }), Catch::StartsWith(bad + ":3: config.n_layer: 0 is out of range"));
  // YAML's longest key is 1024 characters: a longer one is refused by name, where it stands.
  CHECK_THAT(test::error_of([] { parse_config_text("{\"dp\": 1,\n \"" + std::string(1025, 'k') + "\": 1}", "p.json", true); }),
             Catch::StartsWith("p.json:2:2: a key of 1025 bytes; keys are at most 1024"));
}

TEST_CASE("json: the writer's numbers are exact and its strings escaped", "[json]") {
  JsonWriter j(false);
  j.begin_array();
  j.value(Decimal{1234567, 3});  // 1234567 ns = 1234.567 us
  j.value(Decimal{1234000, 3});  // trailing zeros dropped: 1234
  j.value(Decimal{5, 3});        // 0.005
  j.value(Decimal{-5, 3});       // -0.005
  j.value(Decimal{0, 3});        // 0
  j.value(Decimal{std::numeric_limits<std::int64_t>::max(), 3});  // 2^63 - 1 = 9223372036854775807
  j.value(0.1);                  // the shortest text of the double nearest 0.1
  j.value(1e300);
  j.value(std::nan(""));         // JSON has no NaN
  j.value(std::int64_t{-9007199254740993});  // -(2^53 + 1): not a double, written whole
  j.value(std::uint64_t{18446744073709551615u});
  j.value(std::string("a\"b\\c\n\x01"));
  j.end_array();
  CHECK(j.str() ==
        "[1234.567,1234,0.005,-0.005,0,9223372036854775.807,0.1,1e+300,null,-9007199254740993,18446744073709551615,"
        "\"a\\\"b\\\\c\\n\\u0001\"]");
  // A double goes out as the shortest text that reads back to the same double.
  for (double x : {1.0 / 3, 2.0 / 3 * 1e-7, 123456789.123456789, 6.02214076e23}) {
    JsonWriter w(false);
    w.value(x);
    CHECK(std::stod(w.str()) == x);
  }
  // Pretty: two-space indentation, "key": value, empty containers closed at once.
  JsonWriter p;
  p.begin_object().field("a", 1).key("b").begin_array().end_array().key("c").begin_object().field("d", true).end_object().end_object();
  CHECK(p.str() == "{\n  \"a\": 1,\n  \"b\": [],\n  \"c\": {\n    \"d\": true\n  }\n}");
  // Invalid UTF-8 is replaced (U+FFFD), not thrown at the end of a run.
  JsonWriter u(false);
  u.value(std::string("x\xff"));
  CHECK(u.str() == "\"x\xef\xbf\xbd\"");
}

TEST_CASE("units: human_bytes keeps three figures in the largest unit under a thousand", "[units]") {
  constexpr double GiB = 1024.0 * 1024 * 1024;
  CHECK(human_bytes(512) == "512 B");
  CHECK(human_bytes(1.5 * 1024 * 1024) == "1.5 MiB");
  CHECK(human_bytes(999 * GiB) == "999 GiB");
  // 1000 GiB is 1000 / 1024 = 0.977 TiB; DeepSeek-V3 in one fp32 process,
  // 9,999.09 GiB, is 9.76 TiB (it printed "1e+04 GiB").
  CHECK(human_bytes(1000 * GiB) == "0.977 TiB");
  CHECK(human_bytes(9999.09 * GiB) == "9.76 TiB");
  CHECK(human_bytes(5.0 * 1024 * 1024 * GiB) == "5 PiB");
}

TEST_CASE("json: predict, search, comm and list JSON carry schema_version and dtsim_version", "[json]") {
  const auto model = models::load_model("gpt2");
  const ClusterSpec cluster = load_cluster("2xa100-80g");
  const Prediction p = predict(*model, load_plan("ddp"), cluster);
  check_header(to_json(p));
  // Simulated times are integer ns, written as exact decimals of seconds.
  CHECK(decimal_text_to_int(number_text(to_json(p), "iteration_time_s"), 9) == p.iteration_time);
  CHECK(decimal_text_to_int(number_text(to_json(p), "compute"), 9) == p.breakdown.compute);
  SearchOptions o;
  o.global_batch = 16;
  o.top = 3;
  o.threads = 1;
  check_header(search_to_json(search(*model, cluster, o)));
  const AnalyticCommModel comm(cluster);
  CommGroup group;
  group.ranks = 2;
  group.ranks_per_node = 2;
  check_header(comm_to_json(cluster.name, CollectiveOp::kAllReduce, group, comm_sweep(comm, CollectiveOp::kAllReduce, group, 1024, 4096)));
  const std::string list = list_to_json("plans", {{"ddp", "data parallel"}, {"zero3", "sharded"}});
  check_header(list);
  const nlohmann::json l = nlohmann::json::parse(list);
  CHECK(l.at("kind") == "plans");
  CHECK(l.at("items").size() == 2);
  CHECK(l.at("items")[1].at("name") == "zero3");
}

TEST_CASE("json: gpt-175b megatron-3d trace: ts and dur are exact ns and every track's slices nest", "[json][slow]") {
  // The shipped 64-GPU example (README): dgx-a100 at 8 nodes, megatron-3d.
  const auto model = models::load_model("gpt-175b");
  const ClusterSpec cluster = load_cluster("dgx-a100", {parse_override("cluster.nodes=8")});
  PredictOptions po;
  po.keep_graph = true;
  const Prediction p = predict(*model, load_plan("megatron-3d"), cluster, po);
  REQUIRE(cluster.gpus() == 64);
  const std::string trace = to_chrome_trace(p);
  TraceSax sax;
  REQUIRE(nlohmann::json::sax_parse(trace, &sax));
  // One complete event per task, in task order, with the span's own integer
  // nanoseconds: 1234567 ns is written 1234.567, never rounded.
  REQUIRE(sax.slices.size() == p.graph.tasks.size());
  REQUIRE(p.exec.spans.size() == p.graph.tasks.size());
  int inexact = 0;
  for (std::size_t i = 0; i < sax.slices.size(); ++i) {
    const Span& s = p.exec.spans[i];
    if (us_text_to_ns(sax.slices[i].ts) != s.start || us_text_to_ns(sax.slices[i].dur) != s.end - s.start) ++inexact;
  }
  CHECK(inexact == 0);
  // On every track (pid, tid) each pair of slices is apart or one inside the
  // other: sorted by start (longest first), each slice ends within the
  // innermost slice still open at its start.
  std::map<std::pair<std::int64_t, std::int64_t>, std::vector<std::pair<std::int64_t, std::int64_t>>> tracks;
  for (const auto& s : sax.slices) {
    const std::int64_t ts = us_text_to_ns(s.ts);
    tracks[{s.pid, s.tid}].push_back({ts, ts + us_text_to_ns(s.dur)});
  }
  CHECK(tracks.size() > 1);
  int crossing = 0;
  for (auto& [track, v] : tracks) {
    std::sort(v.begin(), v.end(), [](const auto& a, const auto& b) { return a.first != b.first ? a.first < b.first : a.second > b.second; });
    std::vector<std::int64_t> open;  // ends of the slices enclosing the current one
    for (const auto& [start, end] : v) {
      while (!open.empty() && open.back() <= start) open.pop_back();
      if (!open.empty() && end > open.back()) ++crossing;
      open.push_back(end);
    }
  }
  CHECK(crossing == 0);
}
