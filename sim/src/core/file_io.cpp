#include "dtsim/sim/file_io.hpp"

#include <cerrno>
#include <csignal>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <string>

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include "dtsim/sim/error.hpp"

namespace dtsim::sim {

void fsync_directory(const std::string& dir) {
  const int fd = ::open(dir.c_str(), O_RDONLY | O_DIRECTORY | O_CLOEXEC);
  if (fd < 0) return;
  (void)::fsync(fd);
  ::close(fd);
}

// Note [A write cut short]
// A command stopped by a signal while it writes a file would leave the
// temporary one beside the target (the target itself is whole: renamed or
// not). The write records the temporary's name in a static buffer and a
// sig_atomic_t flag (what a handler may read: signal-safety(7)); the CLI's
// handler unlinks it (unlink is async-signal-safe) before it exits.
namespace {
char g_temp[4096];
volatile std::sig_atomic_t g_temp_set = 0;
}  // namespace

TempInProgress::TempInProgress(const std::string& tmp) {
  g_temp_set = 0;
  if (tmp.size() >= sizeof g_temp) return;
  std::memcpy(g_temp, tmp.c_str(), tmp.size() + 1);
  g_temp_set = 1;
}

TempInProgress::~TempInProgress() { g_temp_set = 0; }

void remove_temp_in_progress() noexcept {
  if (g_temp_set != 0) ::unlink(g_temp);
}

// Note [What an output path is]
// A temporary file renamed over the target replaces whatever the target
// was. For a regular file that is the point (Note [Atomic write]), but a
// trace written to /dev/full or /dev/null as root replaced the device with
// a regular file, a FIFO the user reads from became a file nobody reads,
// and a symbolic link to the user's file became a file of its own, the
// link gone. So an output path is first followed to the end of its links
// (at most 40, as the kernel's own limit, ELOOP), and then:
// - a regular file or nothing: written atomically beside that end, with
//   the old file's permissions where there was one;
// - a device, a FIFO or a socket: a stream, written in place, in order (the
//   reader, or the device, decides what happens: /dev/full says ENOSPC);
// - a directory: refused by the rename, with its reason.
// Formats that must seek (HDF5) refuse a stream: regular_output_target.

namespace {

/// Where a file written at `path` goes: `path`, or the end of its links.
std::string output_target(const std::string& path) {
  namespace fs = std::filesystem;
  fs::path p(path);
  std::error_code ec;
  for (int hops = 0; fs::is_symlink(fs::symlink_status(p, ec)); ++hops) {
    if (hops == 40) throw IoError(path + ": cannot write: too many levels of symbolic links");
    const fs::path link = fs::read_symlink(p, ec);
    if (ec) throw IoError(path + ": cannot write: " + ec.message());
    p = link.is_absolute() ? link : p.parent_path() / link;
  }
  return p.string();
}

/// Whether `path` is a device, a FIFO or a socket (after its links).
bool is_stream(const std::string& path) {
  struct stat st {};
  if (::stat(path.c_str(), &st) != 0) return false;
  return S_ISCHR(st.st_mode) || S_ISBLK(st.st_mode) || S_ISFIFO(st.st_mode) || S_ISSOCK(st.st_mode);
}

/// Writes all of `content` to `fd`; the reason where it cannot, else "".
std::string write_all(int fd, const std::string& content) {
  std::size_t done = 0;
  while (done < content.size()) {
    const ssize_t n = ::write(fd, content.data() + done, content.size() - done);
    if (n < 0) {
      if (errno == EINTR) continue;
      return std::strerror(errno);
    }
    done += static_cast<std::size_t>(n);
  }
  return "";
}

}  // namespace

std::string regular_output_target(const std::string& path, const std::string& what) {
  std::string resolved = output_target(path);
  if (is_stream(resolved)) {
    throw IoError(path + ": cannot write " + what + " there: it is a device, a pipe or a socket; give a file's path");
  }
  return resolved;
}

void write_file_atomic(const std::string& path, const std::string& content) {
  namespace fs = std::filesystem;
  // Note [What an output path is]
  const std::string resolved = output_target(path);
  if (is_stream(resolved)) {
    const int fd = ::open(resolved.c_str(), O_WRONLY | O_CLOEXEC);
    if (fd < 0) throw IoError(path + ": cannot write: " + std::strerror(errno));
    const std::string why = write_all(fd, content);
    if (::close(fd) != 0 && why.empty()) throw IoError(path + ": cannot write: " + std::strerror(errno));
    if (!why.empty()) throw IoError(path + ": cannot write: " + why);
    return;
  }
  const fs::path target(resolved);
  const fs::path dir = target.has_parent_path() ? target.parent_path() : fs::path(".");
  std::error_code ec;
  if (!fs::is_directory(dir, ec)) {
    throw IoError(path + ": cannot write: directory '" + dir.string() + "' does not exist");
  }
  mode_t mode = 0644;
  struct stat old {};
  if (::stat(resolved.c_str(), &old) == 0 && S_ISREG(old.st_mode)) mode = old.st_mode & 07777;
  std::string tmpl = (dir / ("." + target.filename().string() + ".tmpXXXXXX")).string();
  const int fd = ::mkstemp(tmpl.data());
  if (fd < 0) throw IoError(path + ": cannot write: " + std::strerror(errno));
  const TempInProgress in_progress(tmpl);  // Note [A write cut short]
  const std::string why = write_all(fd, content);
  if (!why.empty()) {
    ::close(fd);
    ::unlink(tmpl.c_str());
    throw IoError(path + ": cannot write: " + why);
  }
  if (::fsync(fd) != 0 || ::close(fd) != 0) {
    const std::string why2 = std::strerror(errno);
    ::unlink(tmpl.c_str());
    throw IoError(path + ": cannot write: " + why2);
  }
  ::chmod(tmpl.c_str(), mode);
  if (std::rename(tmpl.c_str(), resolved.c_str()) != 0) {
    const std::string why2 = std::strerror(errno);
    ::unlink(tmpl.c_str());
    throw IoError(path + ": cannot write: " + why2);
  }
  fsync_directory(dir.string());
}

}  // namespace dtsim::sim
