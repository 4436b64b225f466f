// What write_file_atomic and save_profile do with each kind of output path
// (Note [What an output path is] in sim/src/core/file_io.cpp), and a full
// disk under libhdf5 (Note [No HDF5 exit handler] in profile_io.cpp).
#include <catch2/catch.hpp>

#include <csignal>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <functional>
#include <string>

#include <sys/resource.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include "dtsim/sim/error.hpp"
#include "dtsim/sim/file_io.hpp"
#include "dtsim/sim/profile.hpp"

using namespace dtsim;
using namespace dtsim::sim;
namespace fs = std::filesystem;

namespace {

std::string slurp(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  return std::string(std::istreambuf_iterator<char>(in), {});
}

struct TempDir {
  fs::path path;
  TempDir() {
    std::string t = (fs::temp_directory_path() / "dtsim_file_io_XXXXXX").string();
    path = ::mkdtemp(t.data());
  }
  ~TempDir() {
    std::error_code ec;
    fs::remove_all(path, ec);
  }
  std::string operator/(const std::string& name) const { return (path / name).string(); }
};

std::string error_of(const std::function<void()>& f) {
  try {
    f();
  } catch (const IoError& e) {
    return e.what();
  }
  return "";
}

}  // namespace

TEST_CASE("an output path: a file is replaced, keeping its permissions", "[file_io]") {
  TempDir d;
  const std::string f = d / "out.json";
  std::ofstream(f) << "old";
  ::chmod(f.c_str(), 0600);
  write_file_atomic(f, "new");
  CHECK(slurp(f) == "new");
  struct stat st {};
  REQUIRE(::stat(f.c_str(), &st) == 0);
  CHECK((st.st_mode & 07777) == 0600);
  // Nothing left beside it.
  CHECK(std::distance(fs::directory_iterator(d.path), fs::directory_iterator()) == 1);
}

TEST_CASE("an output path: a symbolic link is followed, its target replaced and the link kept", "[file_io]") {
  TempDir d;
  std::ofstream(d / "target") << "old";
  fs::create_symlink("target", d / "link");
  write_file_atomic(d / "link", "new");
  CHECK(fs::is_symlink(fs::symlink_status(d / "link")));
  CHECK(slurp(d / "target") == "new");
  // A link to a file not there yet makes that file.
  fs::create_symlink("later", d / "dangling");
  write_file_atomic(d / "dangling", "made");
  CHECK(fs::is_symlink(fs::symlink_status(d / "dangling")));
  CHECK(slurp(d / "later") == "made");
  // Links in a loop: refused in one line, as the kernel's ELOOP.
  fs::create_symlink("b", d / "a");
  fs::create_symlink("a", d / "b");
  CHECK(error_of([&] { write_file_atomic(d / "a", "x"); }) == d / "a" + ": cannot write: too many levels of symbolic links");
}

TEST_CASE("an output path: a FIFO is written as a stream, not replaced", "[file_io]") {
  TempDir d;
  const std::string fifo = d / "fifo";
  REQUIRE(::mkfifo(fifo.c_str(), 0600) == 0);
  const pid_t reader = ::fork();
  REQUIRE(reader >= 0);
  if (reader == 0) {
    // The reader: what it read, into a file of its own.
    const std::string got = slurp(fifo);
    std::ofstream(d / "got") << got;
    ::_exit(0);
  }
  write_file_atomic(fifo, "through the pipe");
  int st = 0;
  ::waitpid(reader, &st, 0);
  CHECK(slurp(d / "got") == "through the pipe");
  struct stat s {};
  REQUIRE(::stat(fifo.c_str(), &s) == 0);
  CHECK(S_ISFIFO(s.st_mode));
}

TEST_CASE("an output path: /dev/full says its disk is full and stays a device; an HDF5 profile refuses a device", "[file_io]") {
  struct stat s {};
  if (::stat("/dev/full", &s) != 0 || !S_ISCHR(s.st_mode)) return;  // no /dev/full here
  CHECK(error_of([] { write_file_atomic("/dev/full", "x"); }) == "/dev/full: cannot write: No space left on device");
  REQUIRE(::stat("/dev/full", &s) == 0);
  CHECK(S_ISCHR(s.st_mode));
  CHECK(error_of([] { (void)regular_output_target("/dev/null", "an HDF5 profile"); }) ==
        "/dev/null: cannot write an HDF5 profile there: it is a device, a pipe or a socket; give a file's path");
}

TEST_CASE("a profile written past a file size limit fails in one line, leaves the old file and no temporary, and exits cleanly", "[file_io]") {
  // The write fails inside libhdf5 (EFBIG under RLIMIT_FSIZE, as ENOSPC on
  // a full disk); the file it could not close once crashed libhdf5's exit
  // handler (SIGSEGV after the error line). In a child, so the limit and
  // the exit are its own.
  TempDir d;
  const std::string src = std::string(DTSIM_TEST_DATA) + "/profile-format1.h5";
  const std::string path = d / "p.h5";
  fs::copy_file(src, path);
  const Profile profile = load_profile(src);
  const pid_t child = ::fork();
  REQUIRE(child >= 0);
  if (child == 0) {
    ::signal(SIGXFSZ, SIG_IGN);
    struct rlimit lim {16 * 1024, 16 * 1024};
    ::setrlimit(RLIMIT_FSIZE, &lim);
    int code = 0;
    try {
      save_profile(profile, path);
      code = 3;  // written: the limit did not bite
    } catch (const IoError& e) {
      const std::string what = e.what();
      code = what.rfind(path + ": cannot write: writing ", 0) == 0 && what.find('\n') == std::string::npos ? 2 : 4;
    } catch (...) {
      code = 5;
    }
    std::exit(code);  // runs the exit handlers, as the CLI does
  }
  int st = 0;
  ::waitpid(child, &st, 0);
  REQUIRE(WIFEXITED(st));  // not killed by a signal
  CHECK(WEXITSTATUS(st) == 2);
  CHECK(slurp(path) == slurp(src));
  CHECK(std::distance(fs::directory_iterator(d.path), fs::directory_iterator()) == 1);
}
