// Config files and --set values into YAML trees; the ConfigMap that reads
// them key by key with file:line errors.
//
// Note [Strict configs]
// YAML accepts more than a config should: a key given twice (yaml-cpp keeps
// both and a lookup finds the first, so the second is silently ignored), a
// complex key (`? [a, b]`, which the key-by-key reader cannot name), nesting
// thousands deep, and, read as JSON, comments, single quotes and trailing
// commas. A file is therefore bounded (kMaxConfigBytes, checked before it is
// read: a 50 MB file of 3 million keys took 101 s and 2.7 GB to refuse), a
// .json file is first parsed by nlohmann-json as strict RFC 8259, and every
// tree is walked (without recursion) before use: keys plain scalars, each
// once per mapping, at most kMaxConfigDepth levels. Every refusal is one
// ConfigError with file:line:column. One reader lets a key given twice
// through (parse_config_text's `duplicates`): nanotron's, whose own example
// files repeat one and which PyYAML reads taking the last; that reader
// takes the last too, and says so (Note [nanotron configs]).
// nlohmann-json decides what JSON is and says where it is wrong; the tree
// the loaders read (a YAML::Node, which carries each key's line for later
// errors such as an unknown key or a value out of range) is then yaml-cpp's
// reading of the same, accepted text, of which valid JSON is a subset but
// for one thing: a string's \u escapes, which json_for_yaml() decodes first
// (so a surrogate pair is one character, as JSON means it). Numbers keep
// their text and are converted once, by the accessor that knows the type.
#include "dtsim/sim/config_node.hpp"

#include <algorithm>
#include <cmath>
#include <filesystem>
#include <fstream>
#include <limits>
#include <map>
#include <sstream>

#include <nlohmann/json.hpp>
#include <yaml-cpp/depthguard.h>

#include "dtsim/sim/error.hpp"

namespace dtsim::sim {
namespace {

std::size_t edit_distance(const std::string& a, const std::string& b) {
  std::vector<std::size_t> prev(b.size() + 1), cur(b.size() + 1);
  for (std::size_t j = 0; j <= b.size(); ++j) prev[j] = j;
  for (std::size_t i = 1; i <= a.size(); ++i) {
    cur[0] = i;
    for (std::size_t j = 1; j <= b.size(); ++j) {
      const std::size_t sub = prev[j - 1] + (a[i - 1] == b[j - 1] ? 0 : 1);
      cur[j] = std::min({prev[j] + 1, cur[j - 1] + 1, sub});
    }
    std::swap(prev, cur);
  }
  return prev[b.size()];
}

std::string join(const std::vector<std::string>& items, const std::string& sep) {
  std::string out;
  for (std::size_t i = 0; i < items.size(); ++i) out += (i ? sep : "") + items[i];
  return out;
}

std::vector<std::string> split(const std::string& s, char sep) {
  std::vector<std::string> parts;
  std::string cur;
  for (char c : s) {
    if (c == sep) {
      parts.push_back(cur);
      cur.clear();
    } else {
      cur += c;
    }
  }
  parts.push_back(cur);
  return parts;
}

std::string describe_node(const YAML::Node& n) {
  if (n.IsMap()) return "a mapping";
  if (n.IsSequence()) return "a list";
  if (n.IsNull()) return "nothing";
  return "'" + n.Scalar() + "'";
}

}  // namespace

Override parse_override(const std::string& text) {
  const auto eq = text.find('=');
  const auto dot = text.find('.');
  if (eq == std::string::npos || dot == std::string::npos || dot > eq || dot == 0 ||
      dot + 1 == eq) {
    throw ConfigError("--set " + text +
                      ": expected SECTION.KEY=VALUE with SECTION one of plan, cluster, model "
                      "(e.g. --set plan.micro_batch=32)");
  }
  Override o{text.substr(0, dot), text.substr(dot + 1, eq - dot - 1), text.substr(eq + 1)};
  if (o.section != "plan" && o.section != "cluster" && o.section != "model") {
    std::string hint = did_you_mean(o.section, {"plan", "cluster", "model"});
    throw ConfigError("--set " + text + ": unknown section '" + o.section +
                      "'; valid: plan, cluster, model" +
                      (hint.empty() ? "" : " (did you mean '" + hint + "'?)"));
  }
  if (o.value.empty()) throw ConfigError(o.origin() + ": no value after '='");
  return o;
}

std::string error_at(const std::string& where, const std::string& key) {
  return where == "--set " + key ? where : where + ": " + key;
}

std::string did_you_mean(const std::string& word, const std::vector<std::string>& candidates) {
  std::string best;
  std::size_t best_d = std::numeric_limits<std::size_t>::max();
  for (const auto& c : candidates) {
    const std::size_t d = edit_distance(word, c);
    if (d < best_d) {
      best_d = d;
      best = c;
    }
  }
  // Close enough: at most a third of the word wrong (and at least one edit allowed).
  const std::size_t limit = std::max<std::size_t>(2, word.size() / 3);
  return best_d <= limit ? best : std::string();
}

namespace {

/// "file:line:column" of a yaml-cpp mark (both 1-based), or "file" where unknown.
std::string at_mark(const std::string& file, const YAML::Mark& m) {
  if (m.line < 0) return file;
  return file + ":" + std::to_string(m.line + 1) + ":" + std::to_string(m.column + 1);
}

bool is_json(const std::string& path) { return path.size() > 5 && path.compare(path.size() - 5, 5, ".json") == 0; }

/// Note [Strict configs]: what YAML allows but a config must not have.
/// `file` names the tree in errors; `marks`: whether its line and column mean
/// anything there (not for a --set value).
void check_tree(const YAML::Node& root, const std::string& file, bool marks = true, bool duplicates = false) {
  auto at = [&](const YAML::Mark& m) { return marks ? at_mark(file, m) : file; };
  // Iterative, with a depth bound: a hostile file nests as deep as it likes.
  // And a bound on the values walked: an alias (*name) is the node it names,
  // walked again where it stands, so ten levels of nine aliases each (a
  // "billion laughs" file of 400 bytes) are 3.9e9 values, which took
  // minutes at full CPU to walk before this bound.
  std::vector<std::pair<YAML::Node, int>> todo{{root, 0}};
  std::size_t walked = 0;
  while (!todo.empty()) {
    auto [node, depth] = todo.back();
    todo.pop_back();
    if (++walked > kMaxConfigValues) {
      throw ConfigError(file + ": more than " + std::to_string(kMaxConfigValues) +
                        " values once its aliases (*name) are expanded; no dtsim config is");
    }
    if (depth > kMaxConfigDepth) {
      throw ConfigError(at(node.Mark()) + ": nested more than " + std::to_string(kMaxConfigDepth) +
                        " levels deep; no dtsim config is");
    }
    if (node.IsSequence()) {
      for (const auto& item : node) todo.push_back({item, depth + 1});
    } else if (node.IsMap()) {
      std::map<std::string, int> seen;  // key -> its line
      for (const auto& kv : node) {
        if (!kv.first.IsScalar()) {
          throw ConfigError(at(kv.first.Mark()) + ": a key must be a plain name, got " +
                            describe_node(kv.first) + "; write key: value");
        }
        const std::string& key = kv.first.Scalar();
        const auto [it, fresh] = seen.emplace(key, kv.first.Mark().line + 1);
        if (!fresh && !duplicates) {
          throw ConfigError(at(kv.first.Mark()) + ": key '" + key + "' given twice" +
                            (marks ? " (first at line " + std::to_string(it->second) + ")" : std::string()) +
                            "; give each key once");
        }
        todo.push_back({kv.second, depth + 1});
      }
    }
  }
}

/// JSON as RFC 8259 has it (nlohmann-json's parser: no comments, no trailing
/// commas, no YAML), with the line and column of the first error.
void check_json(const std::string& text, const std::string& file) {
  try {
    const nlohmann::json parsed = nlohmann::json::parse(text);
    (void)parsed;
  } catch (const nlohmann::json::out_of_range& e) {
    // A number past a double (1e400): nlohmann says where only in its text.
    std::string why = e.what();
    if (const auto p = why.find("] "); p != std::string::npos) why = why.substr(p + 2);
    throw ConfigError(file + ": malformed JSON: " + why + "; numbers must fit a double");
  } catch (const nlohmann::json::parse_error& e) {
    throw ConfigError(text_position(text, e.byte, file) + ": malformed JSON: " + json_error_text(e.what()));
  }
}

/// Note [Strict configs]: the text yaml-cpp reads once nlohmann-json has
/// accepted it. A string holding a \u escape is rewritten as nlohmann decodes
/// it, in UTF-8 (yaml-cpp's \u takes no surrogate pair, so "\ud83d\ude00",
/// valid JSON, would be refused); every other byte stays, so each key keeps
/// its line. YAML limits a key to 1024 characters: a longer one (no config
/// has one; counted here in bytes) is refused by name. `text` must be valid JSON.
std::string json_for_yaml(const std::string& text, const std::string& file) {
  std::string out;
  out.reserve(text.size());
  std::size_t i = 0;
  while (i < text.size()) {
    if (text[i] != '"') {
      out += text[i++];
      continue;
    }
    std::size_t j = i + 1;  // valid JSON: the string closes before the end
    bool unicode = false;
    while (j < text.size() && text[j] != '"') {
      if (text[j] == '\\') {
        unicode = unicode || (j + 1 < text.size() && text[j + 1] == 'u');
        j += 2;
      } else {
        ++j;
      }
    }
    if (j >= text.size()) throw ConfigError(file + ": malformed JSON: a string is not closed");
    const std::string token = text.substr(i, j + 1 - i);
    if (token.size() > 1024 + 2) {
      std::size_t next = j + 1;
      while (next < text.size() && (text[next] == ' ' || text[next] == '\t' || text[next] == '\n' || text[next] == '\r')) ++next;
      if (next < text.size() && text[next] == ':') {
        throw ConfigError(text_position(text, i + 1, file) + ": a key of " + std::to_string(token.size() - 2) +
                          " bytes; keys are at most 1024");
      }
    }
    out += unicode ? nlohmann::json(nlohmann::json::parse(token).get<std::string>())
                         .dump(-1, ' ', false, nlohmann::json::error_handler_t::replace)
                   : token;
    i = j + 1;
  }
  return out;
}

}  // namespace

std::string text_position(const std::string& text, std::size_t byte, const std::string& file) {
  // byte is 1-based; count lines up to it.
  const std::size_t at = std::min<std::size_t>(byte == 0 ? 0 : byte - 1, text.size());
  const std::size_t line = 1 + static_cast<std::size_t>(std::count(text.begin(), text.begin() + static_cast<std::ptrdiff_t>(at), '\n'));
  const std::size_t bol = text.rfind('\n', at == 0 ? 0 : at - 1);
  const std::size_t column = at - (bol == std::string::npos || at == 0 ? 0 : bol + 1) + 1;
  return file + ":" + std::to_string(line) + ":" + std::to_string(column);
}

std::string json_error_text(const std::string& what) {
  std::string why = what;
  if (const auto p = why.find("syntax error "); p != std::string::npos) return why.substr(p);
  if (const auto p = why.find("] "); p != std::string::npos) why = why.substr(p + 2);
  return why;
}

YAML::Node parse_config_text(const std::string& text, const std::string& file, bool json, bool duplicates) {
  if (text.size() > kMaxConfigBytes) {
    throw ConfigError(file + ": " + std::to_string(text.size()) + " bytes, larger than a config may be (limit " +
                      std::to_string(kMaxConfigBytes >> 20) + " MiB)");
  }
  // A NUL byte ends the text for some parsers and not others (the fuzzer
  // found json_for_yaml reading past what nlohmann had checked): refused.
  if (const auto nul = text.find('\0'); nul != std::string::npos) {
    const auto line = 1 + std::count(text.begin(), text.begin() + static_cast<std::ptrdiff_t>(nul), '\n');
    throw ConfigError(file + ":" + std::to_string(line) + ": a NUL byte; a config is text (YAML or JSON)");
  }
  if (json) check_json(text, file);
  YAML::Node root;
  try {
    root = YAML::Load(json ? json_for_yaml(text, file) : text);
  } catch (const YAML::DeepRecursion& e) {
    throw ConfigError(at_mark(file, e.mark) + ": nested too deep (yaml-cpp stops at " + std::to_string(e.depth()) +
                      " levels); no dtsim config nests more than " + std::to_string(kMaxConfigDepth));
  } catch (const YAML::Exception& e) {
    throw ConfigError(at_mark(file, e.mark) + ": malformed " + (json ? "JSON" : "YAML") + ": " + e.msg);
  }
  check_tree(root, file, true, duplicates);
  return root;
}

YAML::Node load_yaml_file(const std::string& path) {
  std::error_code ec;
  if (!std::filesystem::exists(path, ec)) throw IoError(path + ": no such file");
  if (std::filesystem::is_directory(path, ec)) throw IoError(path + ": is a directory, not a file");
  // Note [Strict configs]: refused by its size before anything reads it.
  const std::uintmax_t size = std::filesystem::file_size(path, ec);
  if (!ec && size > kMaxConfigBytes) {
    throw ConfigError(path + ": " + std::to_string(size) + " bytes, larger than a config may be (limit " +
                      std::to_string(kMaxConfigBytes >> 20) + " MiB)");
  }
  std::ifstream in(path, std::ios::binary);
  std::string text((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  if (!in.good() && !in.eof()) throw IoError(path + ": cannot be read");
  return parse_config_text(text, path, is_json(path));
}

std::set<std::string> apply_overrides(YAML::Node& root, const std::string& section,
                                      const std::vector<Override>& overrides) {
  std::set<std::string> keys;
  for (const auto& o : overrides) {
    if (o.section != section) continue;
    YAML::Node value;
    try {
      value = YAML::Load(o.value);
    } catch (const YAML::Exception& e) {
      throw ConfigError(o.origin() + ": malformed value '" + o.value + "': " + e.msg);
    }
    check_tree(value, o.origin(), false);
    const auto parts = split(o.path, '.');
    // yaml-cpp nodes are handles: walk with fresh handles so assignment does
    // not rebind parents.
    std::vector<YAML::Node> chain{root};
    for (std::size_t i = 0; i + 1 < parts.size(); ++i) {
      YAML::Node child = chain.back()[parts[i]];
      if (child && !child.IsMap()) {
        throw ConfigError(o.origin() + ": '" + parts[i] + "' is " + describe_node(child) +
                          ", not a mapping with keys");
      }
      chain.push_back(child);
    }
    chain.back()[parts.back()] = value;
    keys.insert(o.path);
  }
  return keys;
}

ConfigMap::ConfigMap(YAML::Node node, std::string file, std::string prefix,
                     std::set<std::string> overridden, std::map<std::string, std::string> override_from)
    : node_(std::move(node)), file_(std::move(file)), prefix_(std::move(prefix)),
      overridden_(std::move(overridden)), override_from_(std::move(override_from)) {
  if (node_ && !node_.IsNull() && !node_.IsMap()) {
    std::string where = file_.empty() ? std::string("<built-in>") : file_;
    if (node_.Mark().line >= 0) where += ":" + std::to_string(node_.Mark().line + 1);
    throw ConfigError(where + ": " + (prefix_.empty() ? std::string("document") : prefix_) +
                      ": expected a mapping of keys, got " + describe_node(node_));
  }
}

ConfigMap ConfigMap::open(YAML::Node root, const std::string& file, const std::string& section,
                          const std::vector<Override>& overrides) {
  // `root` is a handle: overrides edit the freshly loaded tree in place
  // (YAML::Clone would lose the line marks errors point at).
  if (!root || root.IsNull()) root = YAML::Node(YAML::NodeType::Map);
  if (!root.IsMap()) {
    // Checked before overrides walk into it (a scalar has no keys to set).
    std::string where = file.empty() ? std::string("<built-in>") : file;
    if (root.Mark().line >= 0) where += ":" + std::to_string(root.Mark().line + 1);
    throw ConfigError(where + ": " + section + ": expected a mapping of keys, got " + describe_node(root));
  }
  auto overridden = apply_overrides(root, section, overrides);
  // A framework's config names its own file and key (Override::from); the
  // last override of a key is the one that stands.
  std::map<std::string, std::string> from;
  for (const auto& o : overrides) {
    if (o.section == section) from[o.path] = o.from;
  }
  return ConfigMap(root, file, section, std::move(overridden), std::move(from));
}

bool ConfigMap::has(const std::string& key) const {
  used_.insert(key);  // asking about a key makes it a known one for finish()
  return node_ && node_.IsMap() && node_[key] && !node_[key].IsNull();
}

std::string ConfigMap::full_key(const std::string& key) const {
  return prefix_.empty() ? key : prefix_ + "." + key;
}

bool ConfigMap::overridden(const std::string& key) const {
  // Overrides are recorded relative to the section root: "intra_node.bandwidth_GBps".
  const std::string fk = full_key(key);
  const auto dot = fk.find('.');
  const std::string rel = dot == std::string::npos ? fk : fk.substr(dot + 1);
  return overridden_.count(rel) > 0 || overridden_.count(key) > 0;
}

std::string ConfigMap::where(const std::string& key) const {
  const std::string fk = full_key(key);
  const auto dot = fk.find('.');
  const std::string rel = dot == std::string::npos ? fk : fk.substr(dot + 1);
  if (overridden(key)) {
    const auto it = override_from_.find(overridden_.count(rel) ? rel : key);
    return it != override_from_.end() && !it->second.empty() ? it->second : "--set " + fk;
  }
  // A key an override made on its way to a deeper one (--set
  // cluster.intra_node.0.bandwidth_GBps=3 makes intra_node.0): the override
  // made it, not the file.
  if (const auto it = overridden_.lower_bound(rel + "."); it != overridden_.end() && it->rfind(rel + ".", 0) == 0) {
    const auto from = override_from_.find(*it);
    return from != override_from_.end() && !from->second.empty() ? from->second : "--set " + fk;
  }
  std::string w = file_.empty() ? std::string("<built-in>") : file_;
  if (node_ && node_.IsMap() && node_[key] && node_[key].Mark().line >= 0) {
    w += ":" + std::to_string(node_[key].Mark().line + 1);
  } else if (node_ && node_.Mark().line >= 0 && !file_.empty()) {
    w += ":" + std::to_string(node_.Mark().line + 1);
  }
  return w;
}

void ConfigMap::fail(const std::string& key, const std::string& message) const {
  throw ConfigError(error_at(where(key), full_key(key)) + ": " + message);
}

YAML::Node ConfigMap::scalar(const std::string& key, const char* expected) const {
  used_.insert(key);
  YAML::Node n = node_[key];
  if (!n.IsScalar()) fail(key, std::string("expected ") + expected + ", got " + describe_node(n));
  return n;
}

std::string ConfigMap::get_string(const std::string& key, const std::string& fallback) const {
  if (!has(key)) {
    used_.insert(key);
    return fallback;
  }
  return scalar(key, "a string").Scalar();
}

std::string ConfigMap::require_string(const std::string& key) const {
  if (!has(key)) fail(key, "missing; this key is required");
  return get_string(key, "");
}

std::int64_t ConfigMap::get_int(const std::string& key, std::int64_t fallback,
                                std::int64_t min_value, std::int64_t max_value) const {
  if (!has(key)) {
    used_.insert(key);
    return fallback;
  }
  const std::string text = scalar(key, "an integer").Scalar();
  std::int64_t v = 0;
  std::size_t pos = 0;
  bool ok = !text.empty();
  try {
    // Accept 1e3-style and 1_000 is not YAML; plain integers only, or exact floats.
    v = std::stoll(text, &pos, 10);
    if (pos != text.size()) {
      const double d = std::stod(text, &pos);
      ok = pos == text.size() && std::isfinite(d) && d == std::floor(d);
      // Range first: converting a double past int64 is undefined behaviour.
      if (ok && !(d >= static_cast<double>(min_value) && d <= static_cast<double>(max_value))) {
        fail(key, text + " is out of range; valid: " + std::to_string(min_value) + " to " + std::to_string(max_value));
      }
      if (ok) v = static_cast<std::int64_t>(d);
    }
  } catch (const std::out_of_range&) {
    // Digits past int64 (stoll): out of range, whatever the bounds.
    fail(key, text + " is out of range; valid: " + std::to_string(min_value) + " to " + std::to_string(max_value));
  } catch (const std::invalid_argument&) {
    ok = false;
  }
  if (!ok) fail(key, "'" + text + "' is not an integer");
  if (v < min_value || v > max_value) {
    fail(key, std::to_string(v) + " is out of range; valid: " + std::to_string(min_value) +
                  " to " + std::to_string(max_value));
  }
  return v;
}

double ConfigMap::get_double(const std::string& key, double fallback, double min_value,
                             double max_value) const {
  if (!has(key)) {
    used_.insert(key);
    return fallback;
  }
  const std::string text = scalar(key, "a number").Scalar();
  double v = 0;
  std::size_t pos = 0;
  bool ok = true;
  try {
    v = std::stod(text, &pos);
    ok = pos == text.size();
  } catch (const std::exception&) {
    ok = false;
  }
  if (!ok) fail(key, "'" + text + "' is not a number");
  if (!(v >= min_value && v <= max_value)) {
    std::ostringstream os;
    os << text << " is out of range; valid: " << min_value << " to " << max_value;
    fail(key, os.str());
  }
  return v;
}

bool ConfigMap::get_bool(const std::string& key, bool fallback) const {
  if (!has(key)) {
    used_.insert(key);
    return fallback;
  }
  const std::string t = scalar(key, "true or false").Scalar();
  if (t == "true" || t == "True" || t == "yes" || t == "on") return true;
  if (t == "false" || t == "False" || t == "no" || t == "off") return false;
  fail(key, "'" + t + "' is not a boolean; valid: true, false");
}

ConfigMap ConfigMap::sub(const std::string& key) const {
  used_.insert(key);
  YAML::Node n = has(key) ? node_[key] : YAML::Node(YAML::NodeType::Map);
  if (!n.IsMap()) fail(key, "expected a mapping of keys, got " + describe_node(n));
  return ConfigMap(n, file_, full_key(key), overridden_, override_from_);
}

std::vector<std::int64_t> ConfigMap::get_int_list(const std::string& key) const {
  used_.insert(key);
  std::vector<std::int64_t> out;
  if (!has(key)) return out;
  YAML::Node n = node_[key];
  if (!n.IsSequence()) fail(key, "expected a list of integers like [2, 2], got " + describe_node(n));
  for (const auto& item : n) {
    try {
      out.push_back(item.as<std::int64_t>());
    } catch (const YAML::Exception&) {
      fail(key, "expected a list of integers, found " + describe_node(item));
    }
  }
  return out;
}

std::vector<std::string> ConfigMap::get_word_list(const std::string& key) const {
  used_.insert(key);
  std::vector<std::string> out;
  if (!has(key)) return out;
  const YAML::Node n = node_[key];
  auto split = [&out](const std::string& text) {
    std::string word;
    for (const char ch : text) {
      if (ch == ',' || ch == ' ' || ch == '\t') {
        if (!word.empty()) out.push_back(word);
        word.clear();
      } else {
        word += ch;
      }
    }
    if (!word.empty()) out.push_back(word);
  };
  if (n.IsScalar()) {
    split(n.Scalar());
    return out;
  }
  if (!n.IsSequence()) fail(key, "expected a list of names like [layernorm, moe_act], got " + describe_node(n));
  for (const auto& item : n) {
    if (!item.IsScalar()) fail(key, "expected a list of names, found " + describe_node(item));
    split(item.Scalar());
  }
  return out;
}

std::vector<std::string> ConfigMap::keys() const {
  std::vector<std::string> out;
  if (!node_ || !node_.IsMap()) return out;
  for (const auto& kv : node_) out.push_back(kv.first.as<std::string>());
  return out;
}

void ConfigMap::finish(const std::vector<std::string>& also_allowed) const {
  if (!node_ || !node_.IsMap()) return;
  std::vector<std::string> valid(used_.begin(), used_.end());
  valid.insert(valid.end(), also_allowed.begin(), also_allowed.end());
  std::sort(valid.begin(), valid.end());
  valid.erase(std::unique(valid.begin(), valid.end()), valid.end());
  for (const auto& kv : node_) {
    const std::string k = kv.first.as<std::string>();
    if (std::binary_search(valid.begin(), valid.end(), k)) continue;
    const std::string hint = did_you_mean(k, valid);
    throw ConfigError(error_at(where(k), full_key(k)) + ": unknown key" +
                      (hint.empty() ? "" : " (did you mean '" + hint + "'?)") +
                      "; valid keys: " + join(valid, ", "));
  }
}

void ConfigMap::fail_choice(const std::string& key, const std::string& value,
                            const std::vector<std::string>& names) const {
  const std::string hint = did_you_mean(value, names);
  fail(key, "'" + value + "' is not one of " + join(names, ", ") +
                (hint.empty() ? "" : " (did you mean '" + hint + "'?)"));
}

}  // namespace dtsim::sim
