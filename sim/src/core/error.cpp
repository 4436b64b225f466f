#include "dtsim/sim/error.hpp"

#include <string>

namespace dtsim {

void assertion_failed(const char* expr, const char* file, int line, const std::string& msg) {
  throw InternalError(std::string("internal error at ") + file + ":" + std::to_string(line) +
                      ": " + expr + " failed: " + msg);
}

}  // namespace dtsim
