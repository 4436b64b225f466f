// `dtsim validate` in a DTSIM_CORE_ONLY build: the runtime is not built.
#include "commands.hpp"
#include "dtsim/sim/error.hpp"

namespace dtsim::cli {

int cmd_validate(const Args&) {
  throw UnsupportedError("dtsim validate: not in this build (DTSIM_CORE_ONLY=ON); build without --core to get the runtime");
}

}  // namespace dtsim::cli
