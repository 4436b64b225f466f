// dtsim: predict distributed-training time and memory before spending a GPU-hour.
#include <cstdio>
#include <exception>
#include <iostream>
#include <string>
#include <vector>

#include "commands.hpp"
#include "dtsim/sim/error.hpp"
#include "dtsim/sim/version.hpp"

int main(int argc, char** argv) {
  using namespace dtsim;
  std::vector<std::string> args(argv + 1, argv + argc);
  if (args.empty() || args[0] == "--help" || args[0] == "-h" || args[0] == "help") {
    std::cout << cli::usage();
    return args.empty() ? 2 : 0;
  }
  if (args[0] == "--version") {
    std::cout << "dtsim " << sim::version() << "\n";
    return 0;
  }
  const std::string cmd = args[0];
  const cli::Args rest(args.begin() + 1, args.end());
  try {
    if (cmd == "predict") return cli::cmd_predict(rest);
    if (cmd == "comm") return cli::cmd_comm(rest);
    if (cmd == "search") return cli::cmd_search(rest);
    if (cmd == "list") return cli::cmd_list(rest);
    if (cmd == "calibrate") {
      std::string line = "dtsim";
      for (const auto& a : args) line += " " + a;
      return cli::cmd_calibrate(rest, line);
    }
    if (cmd == "profile") return cli::cmd_profile(rest);
    if (cmd == "validate") return cli::cmd_validate(rest);
    std::cerr << "dtsim: unknown command '" << cmd << "'; valid: predict, search, comm, list, calibrate, profile, validate (see dtsim --help)\n";
    return 2;
  } catch (const InternalError& e) {
    std::cerr << "dtsim: " << e.what() << " (this is a bug in dtsim; please report it)\n";
    return 70;
  } catch (const Error& e) {
    // One line per problem (a plan's are all reported at once).
    const std::string what = e.what();
    std::size_t from = 0;
    for (std::size_t nl; (nl = what.find('\n', from)) != std::string::npos; from = nl + 1) {
      std::cerr << "dtsim: " << what.substr(from, nl - from) << "\n";
    }
    std::cerr << "dtsim: " << what.substr(from) << "\n";
    return 2;
  } catch (const std::exception& e) {
    std::cerr << "dtsim: unexpected error: " << e.what() << "\n";
    return 70;
  }
}
