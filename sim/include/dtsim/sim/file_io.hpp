#pragma once
// Writing files safely: to a temporary file beside the target, then rename,
// so a reader never sees half a file and an interrupted write loses nothing.

#include <string>

namespace dtsim::sim {

/// Writes `content` to `path` atomically; throws IoError naming the path.
void write_file_atomic(const std::string& path, const std::string& content);

}  // namespace dtsim::sim
