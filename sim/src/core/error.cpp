#include "dtsim/sim/error.hpp"

#include <sstream>
#include <string>

#include "dtsim/sim/units.hpp"

namespace dtsim {

void assertion_failed(const char* expr, const char* file, int line, const std::string& msg) {
  throw InternalError(std::string("internal error at ") + file + ":" + std::to_string(line) +
                      ": " + expr + " failed: " + msg);
}

void duration_too_long(double seconds) {
  std::ostringstream os;
  os << "a simulated duration of " << seconds << " s is beyond what dtsim simulates (" << ns_to_seconds(kMaxSimTime) / 3.15576e7
     << " years in 64-bit nanoseconds): check the device's peak FLOP/s and bandwidths and the model's and plan's sizes";
  throw UnsupportedError(os.str());
}

}  // namespace dtsim
