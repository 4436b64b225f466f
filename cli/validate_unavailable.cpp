// `dtsim validate` in a DTSIM_CORE_ONLY build: the runtime is not built.
#include "commands.hpp"

#include <CLI/CLI.hpp>

#include "dtsim/cli/parse.hpp"
#include "dtsim/sim/error.hpp"

namespace dtsim::cli {

Command add_validate(CLI::App& root, const Args&) {
  CLI::App* app = root.add_subcommand("validate", "Train the plan for real (not in this build: DTSIM_CORE_ONLY=ON)");
  house_style(*app);
  app->prefix_command();  // whatever it is given, the answer is the same
  return {app, [] () -> int {
            throw UnsupportedError("dtsim validate: not in this build (DTSIM_CORE_ONLY=ON); build without --core to get the runtime");
          }};
}

}  // namespace dtsim::cli
