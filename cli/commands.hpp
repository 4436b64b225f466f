#pragma once
// The CLI's subcommands. Each declares itself and its options on the root
// parser (CLI11) and returns what runs it once the arguments are parsed;
// that returns the process exit status. Errors are thrown as dtsim::Error
// and turned into one line by main().

#include <functional>
#include <string>
#include <vector>

namespace CLI {
class App;
}

namespace dtsim::cli {

using Args = std::vector<std::string>;

/// A subcommand: its parser and what runs it.
struct Command {
  CLI::App* app = nullptr;
  std::function<int()> run;
};

/// `predict`: time and memory of one plan.
Command add_predict(CLI::App& root);
/// `comm`: an nccl-tests-like sweep of one collective.
Command add_comm(CLI::App& root);
/// `search`: rank every valid plan for a model on a cluster.
Command add_search(CLI::App& root);
/// `list models|clusters|plans|devices`.
Command add_list(CLI::App& root);
/// `calibrate`: runs the measurement programs and writes a profile;
/// `command_line` is recorded in it.
Command add_calibrate(CLI::App& root, const std::string& command_line);
/// `profile show|upgrade FILE`.
Command add_profile(CLI::App& root);
/// `validate`: run a plan for real and report predicted against measured
/// (cli/validate.cpp; validate_unavailable.cpp in a DTSIM_CORE_ONLY build).
/// `args` are validate's own arguments, as given: the workers get them.
Command add_validate(CLI::App& root, const Args& args);

}  // namespace dtsim::cli
