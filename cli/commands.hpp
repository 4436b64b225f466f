#pragma once
// The CLI's subcommands. Each takes its arguments (after the subcommand name)
// and returns the process exit status; errors are thrown as dtsim::Error and
// turned into one line by main().

#include <string>
#include <vector>

namespace dtsim::cli {

using Args = std::vector<std::string>;

int cmd_predict(const Args& args);
int cmd_comm(const Args& args);
/// `search`: rank every valid plan for a model on a cluster.
int cmd_search(const Args& args);
int cmd_list(const Args& args);
/// Runs the measurement programs and writes a profile; `command_line` is recorded in it.
int cmd_calibrate(const Args& args, const std::string& command_line);
/// `profile show FILE`.
int cmd_profile(const Args& args);
/// `validate`: run a plan for real and report predicted against measured
/// (cli/validate.cpp; not in a DTSIM_CORE_ONLY build).
int cmd_validate(const Args& args);
/// The usage text.
std::string usage();

}  // namespace dtsim::cli
