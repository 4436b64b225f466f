#pragma once
// How every dtsim program reads its command line (CLI11): the same settings
// (-h/--help, --version, each option once, flags that take no value) and
// the same one-line errors naming the program, the subcommand, the option
// and what would be valid.

#include <string>
#include <vector>

#include <CLI/CLI.hpp>

namespace dtsim::cli {

/// The house settings for a program's or subcommand's parser: --version
/// (printing "PROGRAM <sim::version()>"), options given twice and unknown
/// arguments kept for check_parsed() to refuse in one line, flags refusing
/// `--flag=VALUE`. Call it on the root and on every subcommand right after
/// creating it, before adding options.
void house_style(CLI::App& app);

/// `app` and its subcommands given on the command line, root first: the
/// path whose names make "dtsim profile show".
std::vector<const CLI::App*> parsed_path(const CLI::App& root);

/// The name of the deepest parsed subcommand with its parents: "dtsim predict".
std::string who(const CLI::App& root);

/// The one line for a CLI11 parse problem (not help or version), without
/// a trailing newline: "dtsim predict: --model: missing value".
std::string describe(const CLI::App& root, const CLI::ParseError& e);

/// After a successful parse: refuses an option given twice, an unknown
/// option (with a did-you-mean hint and the valid ones) or an unexpected
/// argument, throwing ConfigError with one line.
void check_parsed(const CLI::App& root);

/// Parses `args` (without the program name) and checks them: a problem is
/// a ConfigError with one line; --help and --version propagate as CLI11's
/// CallForHelp / CallForVersion (give them to `root.exit()`, which prints
/// and returns 0).
void parse_or_throw(CLI::App& root, std::vector<std::string> args);

/// For a program's main(): parses argv into `root`; returns -1 to go on,
/// else the exit status after printing: 0 for --help / --version, 2 for a
/// problem (one line on stderr).
int parse_main(CLI::App& root, int argc, const char* const* argv);

}  // namespace dtsim::cli
