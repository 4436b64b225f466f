#pragma once
// Writing files safely: to a temporary file beside the target, then rename,
// so a reader never sees half a file and an interrupted write loses nothing.

#include <string>

namespace dtsim::sim {

/// Writes `content` to `path` atomically; throws IoError naming the path.
/// A symbolic link is followed and its target replaced (the link stays); a
/// device or pipe (/dev/stdout, a FIFO) is written to as a stream, never
/// replaced (Note [What an output path is] in file_io.cpp).
void write_file_atomic(const std::string& path, const std::string& content);

/// Where a file that must be a regular one (HDF5 seeks) written at `path`
/// goes: `path`, or the file its symbolic links end at. Throws IoError
/// where the links loop, or where they end at a device, a pipe or a socket
/// (`what`: "an HDF5 profile", for the message).
std::string regular_output_target(const std::string& path, const std::string& what);

/// Note [A write cut short]: while one lives, `tmp` is the temporary file
/// being written (one at a time); remove_temp_in_progress() unlinks it and
/// is async-signal-safe, for a handler that ends the process.
class TempInProgress {
 public:
  explicit TempInProgress(const std::string& tmp);
  ~TempInProgress();
  TempInProgress(const TempInProgress&) = delete;
  TempInProgress& operator=(const TempInProgress&) = delete;
};
void remove_temp_in_progress() noexcept;

/// Flushes a directory's entries to disk, so a file renamed into it stays
/// there after a power loss (fsync(2): "calling fsync() on the file does not
/// ensure that the entry in the directory containing the file has also
/// reached disk"). Best effort: a file system that cannot is not an error.
void fsync_directory(const std::string& dir);

}  // namespace dtsim::sim
