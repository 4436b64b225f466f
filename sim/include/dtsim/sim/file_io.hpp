#pragma once
// Writing files safely: to a temporary file beside the target, then rename,
// so a reader never sees half a file and an interrupted write loses nothing.

#include <string>

namespace dtsim::sim {

/// Writes `content` to `path` atomically; throws IoError naming the path.
void write_file_atomic(const std::string& path, const std::string& content);

/// Flushes a directory's entries to disk, so a file renamed into it stays
/// there after a power loss (fsync(2): "calling fsync() on the file does not
/// ensure that the entry in the directory containing the file has also
/// reached disk"). Best effort: a file system that cannot is not an error.
void fsync_directory(const std::string& dir);

}  // namespace dtsim::sim
