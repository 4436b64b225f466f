#include "dtsim/cli/parse.hpp"

#include <algorithm>
#include <cctype>
#include <iostream>

#include "dtsim/sim/config_node.hpp"
#include "dtsim/sim/error.hpp"
#include "dtsim/sim/version.hpp"

namespace dtsim::cli {
namespace {

const CLI::App& root_of(const CLI::App& app) {
  const CLI::App* a = &app;
  while (a->get_parent() != nullptr) a = a->get_parent();
  return *a;
}

/// Long option names a user may give to `app`, "--model" first as declared
/// (help and version left out: every program has them).
std::vector<std::string> long_names(const CLI::App& app) {
  std::vector<std::string> out;
  for (const CLI::Option* o : app.get_options()) {
    for (const auto& n : o->get_lnames()) {
      if (n != "help" && n != "version") out.push_back(n);
    }
  }
  return out;
}

std::string join(const std::vector<std::string>& v, const std::string& prefix) {
  std::string s;
  for (const auto& x : v) s += (s.empty() ? "" : ", ") + prefix + x;
  return s;
}

std::vector<std::string> subcommand_names(const CLI::App& app) {
  std::vector<std::string> out;
  for (const CLI::App* s : const_cast<CLI::App&>(app).get_subcommands([](CLI::App*) { return true; })) {
    out.push_back(s->get_name());
  }
  return out;
}

}  // namespace

void house_style(CLI::App& app) {
  app.set_version_flag("--version", root_of(app).get_name() + " " + sim::version(), "Print the version and exit");
  // Unknown arguments and repeated options are collected, not thrown as
  // CLI11's own messages: check_parsed() names them with what is valid.
  app.allow_extras();
  app.option_defaults()->multi_option_policy(CLI::MultiOptionPolicy::TakeAll)->disable_flag_override();
  app.get_formatter()->column_width(36);
}

std::vector<const CLI::App*> parsed_path(const CLI::App& root) {
  std::vector<const CLI::App*> path{&root};
  for (;;) {
    const auto subs = path.back()->get_subcommands();
    if (subs.empty()) return path;
    path.push_back(subs.back());
  }
}

std::string who(const CLI::App& root) {
  std::string s;
  for (const CLI::App* a : parsed_path(root)) s += (s.empty() ? "" : " ") + a->get_name();
  return s;
}

std::string describe(const CLI::App& root, const CLI::ParseError& e) {
  std::string what = e.what();
  while (!what.empty() && (what.back() == '\n' || what.back() == ' ')) what.pop_back();
  const std::string name = who(root);
  const std::string see = " (see " + name + " --help)";
  if (dynamic_cast<const CLI::ArgumentMismatch*>(&e) != nullptr) {
    // "--model: 1 required M missing": the option came last, without its value.
    if (const auto colon = what.find(": "); colon != std::string::npos && what.find(" required ") != std::string::npos &&
                                            what.size() > 8 && what.compare(what.size() - 8, 8, " missing") == 0) {
      return name + ": " + what.substr(0, colon) + ": missing value";
    }
    // "json was given a disallowed flag override": --json=1.
    const std::string flag = " was given a disallowed flag override";
    if (const auto at = what.find(flag); at != std::string::npos) {
      const std::string opt = what.substr(0, at);
      return name + ": " + (opt.rfind("-", 0) == 0 ? opt : "--" + opt) + ": takes no value";
    }
  }
  if (dynamic_cast<const CLI::RequiredError*>(&e) != nullptr) return name + ": " + what + see;
  return name + ": " + what;
}

void check_parsed(const CLI::App& root) {
  const auto path = parsed_path(root);
  const std::string name = who(root);
  for (const CLI::App* app : path) {
    for (const CLI::Option* o : app->get_options()) {
      if (o->count() <= 1 || o->get_expected_max() > 1) continue;  // --set and other lists repeat
      const auto& r = o->results();
      if (o->get_expected_max() == 0 || r.size() < 2) {
        throw ConfigError(name + ": " + o->get_name() + " given twice; give it once");
      }
      throw ConfigError(name + ": " + o->get_name() + " given twice ('" + r[0] + "' and '" + r[1] + "'); give it once");
    }
  }
  // The deepest command first: `dtsim predict --jsn` is predict's to name.
  for (auto it = path.rbegin(); it != path.rend(); ++it) {
    const CLI::App& app = **it;
    const auto rest = app.remaining();
    if (rest.empty() || app.get_prefix_command()) continue;  // a prefix command takes whatever follows
    const std::string& a = rest.front();
    if (a.size() > 1 && a[0] == '-') {
      const std::string key = a.substr(0, a.find('=')), bare = key.substr(key.find_first_not_of('-'));
      const auto names = long_names(app);
      const std::string hint = sim::did_you_mean(bare, names);
      throw ConfigError(name + ": unknown option " + key + (hint.empty() ? "" : " (did you mean --" + hint + "?)") +
                        (names.empty() ? "; it takes none but --help" : "; valid: " + join(names, "--")));
    }
    const auto subs = subcommand_names(app);
    if (!subs.empty() && &app == path.back()) {
      const std::string hint = sim::did_you_mean(a, subs);
      throw ConfigError(name + ": unknown command '" + a + "'" + (hint.empty() ? "" : " (did you mean '" + hint + "'?)") +
                        "; valid: " + join(subs, "") + " (see " + name + " --help)");
    }
    // `dtsim predict llama-3-8b dgx-h100`: options name their values.
    std::string named;
    const auto names = long_names(app);
    for (const char* o : {"model", "cluster", "plan"}) {
      if (std::find(names.begin(), names.end(), o) != names.end()) {
        named += std::string(named.empty() ? "" : ", ") + "--" + o + " " + static_cast<char>(std::toupper(static_cast<unsigned char>(o[0])));
      }
    }
    throw ConfigError(name + ": unexpected argument '" + a + "'" +
                      (named.empty() ? "" : "; options name their values (" + named + ", see " + name + " --help)"));
  }
}

void parse_or_throw(CLI::App& root, std::vector<std::string> args) {
  std::reverse(args.begin(), args.end());  // CLI11 takes them last first
  try {
    root.parse(args);
  } catch (const CLI::Success&) {
    throw;  // --help, --version: root.exit() prints them
  } catch (const CLI::ParseError& e) {
    throw ConfigError(describe(root, e));
  }
  check_parsed(root);
}

int parse_main(CLI::App& root, int argc, const char* const* argv) {
  try {
    parse_or_throw(root, std::vector<std::string>(argv + 1, argv + argc));
  } catch (const CLI::Success& e) {
    return root.exit(e);
  } catch (const Error& e) {
    std::cerr << e.what() << "\n";
    return 2;
  }
  return -1;
}

}  // namespace dtsim::cli
