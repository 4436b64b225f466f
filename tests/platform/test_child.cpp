// Child processes (platform/child.hpp): a group of their own, death with the
// parent even when it is killed by SIGKILL (Note [Children die with their
// parent]), a stopped child stopped at once (Note [Stopping a process
// group]), and stop signals recorded, not fatal (Note [Stop signals]).
#include <catch2/catch.hpp>

#include <cerrno>
#include <chrono>
#include <csignal>
#include <string>
#include <thread>

#include <sys/wait.h>
#include <unistd.h>

#include "dtsim/platform/child.hpp"

namespace {

using Clock = std::chrono::steady_clock;
using dtsim::platform::process_state;

double seconds_since(Clock::time_point t0) { return std::chrono::duration<double>(Clock::now() - t0).count(); }

/// `sh -c script`, started by spawn_child.
pid_t start_sh(const std::string& script) {
  dtsim::platform::ChildSpec spec;
  spec.argv = {"/bin/sh", "-c", script};
  return dtsim::platform::spawn_child(spec);
}

/// Gone, or a zombie waiting for init (dead all the same), within `s` seconds.
bool dies_within(pid_t pid, double s) {
  const auto t0 = Clock::now();
  while (seconds_since(t0) < s) {
    const char st = process_state(pid);
    if (st == 0 || st == 'Z') return true;
    std::this_thread::sleep_for(std::chrono::milliseconds(10));
  }
  return false;
}

}  // namespace

TEST_CASE("spawn_child: the child leads a process group of its own", "[platform][child]") {
  const pid_t pid = start_sh("sleep 30");
  REQUIRE(pid > 0);
  CHECK(::getpgid(pid) == pid);
  CHECK(::getpgid(pid) != ::getpgrp());  // a Ctrl-C to our group does not reach it
  int status = 0;
  dtsim::platform::stop_groups({pid}, 2.0, [&](pid_t p, int s) {
    CHECK(p == pid);
    status = s;
  });
  CHECK(WIFSIGNALED(status));
  CHECK(WTERMSIG(status) == SIGTERM);
}

TEST_CASE("spawn_child: a program that cannot be executed exits 127", "[platform][child]") {
  dtsim::platform::ChildSpec spec;
  spec.argv = {"/nonexistent/dtsim-no-such-program"};
  const pid_t pid = dtsim::platform::spawn_child(spec);
  REQUIRE(pid > 0);
  int status = 0;
  REQUIRE(::waitpid(pid, &status, 0) == pid);
  CHECK(WIFEXITED(status));
  CHECK(WEXITSTATUS(status) == 127);
}

TEST_CASE("spawn_child: children die when their parent is killed with SIGKILL", "[platform][child]") {
  // A middle process spawns a `sleep 60` and tells us its pid; we SIGKILL the
  // middle one, which can do nothing about it: the kernel's parent-death
  // signal must end the sleep (Note [Children die with their parent]).
  int fds[2];
  REQUIRE(::pipe(fds) == 0);
  const pid_t middle = ::fork();
  REQUIRE(middle >= 0);
  if (middle == 0) {
    ::close(fds[0]);
    const pid_t child = start_sh("exec sleep 60");
    [[maybe_unused]] const ssize_t n = ::write(fds[1], &child, sizeof child);
    for (;;) ::pause();
  }
  ::close(fds[1]);
  pid_t child = -1;
  REQUIRE(::read(fds[0], &child, sizeof child) == static_cast<ssize_t>(sizeof child));
  ::close(fds[0]);
  REQUIRE(child > 0);
  CHECK(process_state(child) != 0);
  ::kill(middle, SIGKILL);
  REQUIRE(::waitpid(middle, nullptr, 0) == middle);
  CHECK(dies_within(child, 2.0));
}

TEST_CASE("stop_groups: a stopped child is stopped at once, not after the grace", "[platform][child]") {
  const pid_t pid = start_sh("exec sleep 30");
  REQUIRE(pid > 0);
  ::kill(pid, SIGSTOP);
  for (int i = 0; i < 200 && process_state(pid) != 'T'; ++i) std::this_thread::sleep_for(std::chrono::milliseconds(5));
  REQUIRE(process_state(pid) == 'T');
  // Without SIGCONT, SIGTERM stays pending in a stopped process (POSIX XSH
  // 2.4.3) and only the SIGKILL after the 5 s grace would end it.
  const auto t0 = Clock::now();
  int status = 0;
  dtsim::platform::stop_groups({pid}, 5.0, [&](pid_t, int s) { status = s; });
  CHECK(seconds_since(t0) < 1.0);
  CHECK(WIFSIGNALED(status));
  CHECK(WTERMSIG(status) == SIGTERM);
}

TEST_CASE("stop_groups: a group that ignores SIGTERM is killed after the grace", "[platform][child]") {
  // The shell and its background sleep ignore SIGTERM.
  const pid_t pid = start_sh("trap '' TERM; sleep 30 & while :; do sleep 0.05; done");
  REQUIRE(pid > 0);
  std::this_thread::sleep_for(std::chrono::milliseconds(200));
  const auto t0 = Clock::now();
  int status = 0;
  dtsim::platform::stop_groups({pid}, 0.3, [&](pid_t, int s) { status = s; });
  const double took = seconds_since(t0);
  CHECK(took >= 0.3);
  CHECK(took < 2.0);
  CHECK(WIFSIGNALED(status));
  CHECK(WTERMSIG(status) == SIGKILL);
}

TEST_CASE("StopSignals records SIGINT and SIGTERM and restores the handlers", "[platform][child]") {
  struct sigaction before {};
  ::sigaction(SIGTERM, nullptr, &before);
  {
    dtsim::platform::StopSignals guard;
    CHECK(dtsim::platform::StopSignals::received() == 0);
    std::raise(SIGTERM);  // would end the test binary without the guard
    CHECK(dtsim::platform::StopSignals::received() == SIGTERM);
    std::raise(SIGINT);
    CHECK(dtsim::platform::StopSignals::received() == SIGTERM);  // the first one stays
  }
  struct sigaction after {};
  ::sigaction(SIGTERM, nullptr, &after);
  CHECK(after.sa_handler == before.sa_handler);
  {
    dtsim::platform::StopSignals again;
    CHECK(dtsim::platform::StopSignals::received() == 0);  // cleared
  }
}

TEST_CASE("signal_name and process_state", "[platform][child]") {
  CHECK(dtsim::platform::signal_name(SIGTERM) == "SIGTERM");
  CHECK(dtsim::platform::signal_name(SIGSTOP) == "SIGSTOP");
  CHECK(process_state(::getpid()) == 'R');
  CHECK(process_state(0x3fffffff) == 0);
}
