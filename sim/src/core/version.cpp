#include "dtsim/sim/version.hpp"

namespace dtsim::sim {

const char* version() { return DTSIM_VERSION; }

}  // namespace dtsim::sim
