// dtsim: predict distributed-training time and memory before spending a GPU-hour.
#include <algorithm>
#include <cerrno>
#include <csignal>
#include <cstring>
#include <cstdio>
#include <exception>
#include <iostream>
#include <new>
#include <string>
#include <vector>

#include <CLI/CLI.hpp>

#include <signal.h>
#include <unistd.h>

#include "commands.hpp"
#include "dtsim/cli/parse.hpp"
#include "dtsim/sim/config_node.hpp"
#include "dtsim/sim/error.hpp"
#include "dtsim/sim/file_io.hpp"

namespace {

constexpr const char* kFooter = R"(
Run `dtsim COMMAND --help` (or `dtsim help COMMAND`) for a command's options.
  M: a built-in model (dtsim list models), a YAML file, or a HuggingFace config.json
  C, P: a shipped config name (dtsim list clusters|plans) or a YAML file
  --set SECTION.KEY=VALUE overrides one key: --set plan.micro_batch=32 --set cluster.nodes=4 --set model.layers=24

exit status: 0 ok, 2 bad input (one line on stderr says what and where), 70 a bug in dtsim)";

/// Prints one `dtsim` line per line of an error (a plan's problems are all
/// reported at once); a line that already names its command
/// ("dtsim predict: ...") keeps it.
void print_error(const std::string& what) {
  std::size_t from = 0;
  for (;;) {
    const std::size_t nl = what.find('\n', from);
    const std::string line = what.substr(from, nl == std::string::npos ? std::string::npos : nl - from);
    std::cerr << (line.rfind("dtsim ", 0) == 0 || line.rfind("dtsim: ", 0) == 0 ? "" : "dtsim: ") << line << "\n";
    if (nl == std::string::npos) return;
    from = nl + 1;
  }
}

// Note [Interrupted commands]
// calibrate and validate supervise programs and stop them on SIGINT or
// SIGTERM (Note [Stop signals], platform/src/child.cpp). The others
// (predict, search, comm, profile, list) run in this process alone, and a
// signal killed them without a word. Now SIGINT, SIGTERM and SIGHUP end
// them with one line and exit status 2, having removed the temporary file
// of a write in progress (Note [A write cut short], sim/src/core/file_io.cpp):
// files already renamed into place are whole, none is half-written. The
// handler does only what a handler may (signal-safety(7)): unlink, write,
// _exit, on messages made before it is installed. A signal the process was
// started with ignored (nohup, a background job) stays ignored.
constexpr int kStopSignals[] = {SIGINT, SIGTERM, SIGHUP};
char g_interrupted[3][256];
std::size_t g_interrupted_len[3];

extern "C" void on_interrupt(int sig) {
  dtsim::sim::remove_temp_in_progress();
  for (int k = 0; k < 3; ++k) {
    if (kStopSignals[k] != sig) continue;
    (void)!::write(2, g_interrupted[k], g_interrupted_len[k]);
  }
  ::_exit(2);
}

void handle_interrupts(const std::string& command) {
  const char* names[] = {"SIGINT", "SIGTERM", "SIGHUP"};
  for (int k = 0; k < 3; ++k) {
    const std::string msg = "dtsim " + command + ": interrupted by " + names[k] + "; no file is left half-written\n";
    g_interrupted_len[k] = std::min(msg.size(), sizeof g_interrupted[k]);
    std::memcpy(g_interrupted[k], msg.data(), g_interrupted_len[k]);
    struct sigaction old {};
    if (::sigaction(kStopSignals[k], nullptr, &old) == 0 && old.sa_handler == SIG_IGN) continue;
    struct sigaction sa {};
    sa.sa_handler = on_interrupt;
    sigemptyset(&sa.sa_mask);
    ::sigaction(kStopSignals[k], &sa, nullptr);
  }
}

}  // namespace

int main(int argc, char** argv) {
  using namespace dtsim;
  const std::vector<std::string> args(argv + 1, argv + argc);
  CLI::App app{"dtsim: predict the time and memory of a distributed training plan", "dtsim"};
  cli::house_style(app);
  // One command: a later word that names another (`dtsim help profile`) is its argument.
  app.require_subcommand(0, 1);
  // The arguments after the subcommand's name: validate hands them to its workers.
  const auto sub = std::find_if(args.begin(), args.end(), [](const std::string& a) { return a.empty() || a[0] != '-'; });
  const cli::Args rest(sub == args.end() ? sub : sub + 1, args.end());
  std::string line = "dtsim";
  for (const auto& a : args) line += " " + a;
  std::vector<cli::Command> commands{cli::add_predict(app),  cli::add_search(app),        cli::add_comm(app),
                                     cli::add_list(app),     cli::add_calibrate(app, line), cli::add_profile(app),
                                     cli::add_validate(app, rest)};
  // `dtsim help [COMMAND [SUBCOMMAND]]`: that command's --help.
  CLI::App* help = app.add_subcommand("help", "Print a command's help: dtsim help predict");
  cli::house_style(*help);
  std::vector<std::string> topic;
  help->add_option("COMMAND", topic, "The command (and subcommand) to describe")->type_name("COMMAND");
  app.footer(kFooter);  // after the subcommands: they would inherit it
  if (args.empty()) {
    std::cout << app.help();
    std::cerr << "dtsim: a command is required; valid: predict, search, comm, list, calibrate, profile, validate, help\n";
    return 2;
  }
  try {
    try {
      cli::parse_or_throw(app, args);
    } catch (const CLI::Success& e) {
      return app.exit(e);
    }
    if (help->parsed()) {
      const CLI::App* about = &app;
      std::string parents;  // "dtsim profile" before "show", for its usage line
      for (const auto& t : topic) {
        const CLI::App* next = nullptr;
        for (const CLI::App* s : about->get_subcommands([](const CLI::App*) { return true; })) {
          if (s->get_name() == t) next = s;
        }
        if (next == nullptr) {
          std::vector<std::string> names;
          for (const CLI::App* s : about->get_subcommands([](const CLI::App*) { return true; })) names.push_back(s->get_name());
          std::string valid;
          for (const auto& n : names) valid += (valid.empty() ? "" : ", ") + n;
          const std::string hint = sim::did_you_mean(t, names);
          throw ConfigError("dtsim help: no command '" + t + "'" + (hint.empty() ? "" : " (did you mean '" + hint + "'?)") +
                            "; valid: " + valid);
        }
        parents += (parents.empty() ? "" : " ") + about->get_name();
        about = next;
      }
      std::cout << about->help(parents);
      return 0;
    }
    for (const auto& c : commands) {
      if (!c.app->parsed()) continue;
      const std::string name = c.app->get_name();
      if (name != "calibrate" && name != "validate") handle_interrupts(name);  // Note [Interrupted commands]
      const int rc = c.run();
      // What was printed must have reached stdout (a full disk, /dev/full,
      // a closed descriptor): a table half written is not a success.
      errno = 0;
      std::cout.flush();
      if (!std::cout || std::fflush(stdout) != 0) {
        const int err = errno;
        throw IoError(std::string("standard output: the output could not be written") +
                      (err != 0 ? std::string(" (") + std::strerror(err) + ")" : std::string()));
      }
      return rc;
    }
    throw ConfigError("dtsim: a command is required; valid: predict, search, comm, list, calibrate, profile, validate, help (see dtsim --help)");
  } catch (const InternalError& e) {
    std::cerr << "dtsim: " << e.what() << " (this is a bug in dtsim; please report it)\n";
    return 70;
  } catch (const Error& e) {
    print_error(e.what());
    return 2;
  } catch (const std::bad_alloc&) {
    // Note [Graph size] (sim/src/lowering/lower.cpp): lowering refuses what
    // no machine holds; what this one cannot is said in one line too.
    std::cerr << "dtsim: out of memory: this plan's simulation needs more memory than this machine gives; use fewer "
                 "micro-batches (plan.global_batch, plan.micro_batches, plan.grad_accum) or a smaller model\n";
    return 2;
  } catch (const std::exception& e) {
    std::cerr << "dtsim: unexpected error: " << e.what() << "\n";
    return 70;
  }
}
