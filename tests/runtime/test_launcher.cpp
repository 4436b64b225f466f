// The launcher, driven by /bin/sh scripts in place of real workers: the
// environment each rank sees, how a failure, a signal, a hang or a timeout
// ends the run, that nothing is left running, and the heartbeat protocol.
#include <catch2/catch.hpp>

#include <atomic>
#include <cerrno>
#include <chrono>
#include <cstdlib>
#include <csignal>
#include <filesystem>
#include <fstream>
#include <sstream>
#include <string>
#include <thread>

#include <arpa/inet.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <unistd.h>

#include "dtsim/runtime/launcher.hpp"
#include "dtsim/sim/error.hpp"
#include "test_util.hpp"

namespace fs = std::filesystem;
using dtsim::runtime::LaunchProgress;
using dtsim::runtime::LaunchResult;
using dtsim::runtime::LaunchSpec;
using Kind = dtsim::runtime::RankOutcome::Kind;

namespace {

using TempDir = dtsim::test::TempDir;

using dtsim::test::slurp;

/// `procs` ranks of `sh -c script` in `dir`, with generous default timeouts.
LaunchSpec sh_spec(const TempDir& dir, int procs, const std::string& script) {
  LaunchSpec s;
  s.program = "/bin/sh";
  s.args = {"-c", script};
  s.procs = procs;
  s.run_dir = dir.str();
  s.hang_timeout_s = 10;
  s.start_timeout_s = 10;
  return s;
}

/// A shell line that writes the heartbeat "$1 TOTAL WHAT" atomically.
const std::string kBeat =
    "beat() { printf '%s\\n' \"$1\" > \"$DTSIM_RUN_DIR/.hb$RANK\" && "
    "mv \"$DTSIM_RUN_DIR/.hb$RANK\" \"$DTSIM_RUN_DIR/rank-$RANK.heartbeat\"; }; ";

/// The state letter in /proc/PID/stat ('S', 'Z', ...), or 0 when it is gone.
char proc_state(pid_t pid) {
  const std::string stat = slurp("/proc/" + std::to_string(pid) + "/stat");
  const auto paren = stat.rfind(')');  // the command name may hold spaces
  return paren != std::string::npos && paren + 2 < stat.size() ? stat[paren + 2] : 0;
}

/// Whether no child of this process is left (nothing to reap, no zombie).
bool no_children() { return ::waitpid(-1, nullptr, WNOHANG) < 0 && errno == ECHILD; }

}  // namespace

TEST_CASE("launch: three ranks that succeed see the torchrun environment", "[runtime][launcher]") {
  TempDir dir("ok");
  auto spec = sh_spec(dir, 3, kBeat +
                                  "beat \"1 1 done\"; "
                                  "echo \"$RANK $WORLD_SIZE $LOCAL_RANK $LOCAL_WORLD_SIZE $MASTER_ADDR port=$MASTER_PORT "
                                  "rv=$DTSIM_RENDEZVOUS $DTSIM_TEST_EXTRA\" > \"$DTSIM_RUN_DIR/env-$RANK.txt\"");
  spec.env["DTSIM_TEST_EXTRA"] = "extra";
  // The caller's own rendezvous variables are not the local run's.
  const char* saved_port = std::getenv("MASTER_PORT");
  const std::string saved = saved_port ? saved_port : "";
  ::setenv("MASTER_PORT", "1234", 1);
  const auto env_of = [&](int k) { return slurp(dir.path / ("env-" + std::to_string(k) + ".txt")); };
  const std::string store = fs::absolute(dir.path / "rendezvous").string();

  SECTION("the ranks meet through a file in the run directory (Note [Local rendezvous])") {
    {
      std::ofstream stale(store);  // a killed run's store would hand out its keys
      stale << "stale";
    }
    const LaunchResult res = dtsim::runtime::launch(spec);
    REQUIRE(res.ok);
    CHECK(res.summary.empty());
    REQUIRE(res.ranks.size() == 3);
    CHECK_FALSE(fs::exists(store));
    for (int k = 0; k < 3; ++k) {
      CHECK(res.ranks[k].rank == k);
      CHECK(res.ranks[k].kind == Kind::kOk);
      CHECK(res.ranks[k].cause.empty());
      const std::string r = std::to_string(k);
      CHECK(env_of(k) == r + " 3 " + r + " 3 127.0.0.1 port= rv=file:" + store + " extra\n");
      CHECK(slurp(dir.path / ("rank-" + r + ".heartbeat")) == "1 1 done\n");
    }
  }
  SECTION("spec.env sets MASTER_PORT: a TCPStore there") {
    spec.env["MASTER_PORT"] = "29517";
    ::setenv("DTSIM_RENDEZVOUS", "file:/elsewhere", 1);
    const LaunchResult res = dtsim::runtime::launch(spec);
    ::unsetenv("DTSIM_RENDEZVOUS");
    REQUIRE(res.ok);
    for (int k = 0; k < 3; ++k) {
      const std::string r = std::to_string(k);
      CHECK(env_of(k) == r + " 3 " + r + " 3 127.0.0.1 port=29517 rv= extra\n");
    }
  }
  if (saved_port) {
    ::setenv("MASTER_PORT", saved.c_str(), 1);
  } else {
    ::unsetenv("MASTER_PORT");
  }
  CHECK(no_children());
}

TEST_CASE("free_local_port: a bindable port below the kernel's ephemeral range (Note [A port outside the ephemeral range])",
          "[runtime][launcher]") {
  int first = 32768;  // Linux's default ip_local_port_range starts here
  if (std::ifstream in("/proc/sys/net/ipv4/ip_local_port_range"); in) in >> first;
  for (int i = 0; i < 20; ++i) {
    const int p = dtsim::runtime::free_local_port();
    if (first > 20001) {
      CHECK(p >= 20000);
      CHECK(p < first);
    }
    // Free: a listening socket can be opened on it.
    const int fd = ::socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
    REQUIRE(fd >= 0);
    sockaddr_in addr{};
    addr.sin_family = AF_INET;
    addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    addr.sin_port = htons(static_cast<std::uint16_t>(p));
    CHECK(::bind(fd, reinterpret_cast<sockaddr*>(&addr), sizeof addr) == 0);
    ::close(fd);
  }
}

TEST_CASE("launch: a rank that fails stops the others at once", "[runtime][launcher]") {
  TempDir dir("fail");
  // Rank 1 fails after a moment; rank 0 would sleep for 30 s.
  auto spec = sh_spec(dir, 2,
                      "if [ \"$RANK\" = 1 ]; then sleep 0.2; "
                      "echo 'out of memory: tried to allocate 1.0 GiB' > \"$DTSIM_RUN_DIR/rank-1.error\"; exit 3; fi; "
                      "while :; do sleep 30; done");
  const auto t0 = std::chrono::steady_clock::now();
  const LaunchResult res = dtsim::runtime::launch(spec);
  const double took = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();

  CHECK_FALSE(res.ok);
  CHECK(res.summary == "rank 1 failed: out of memory: tried to allocate 1.0 GiB (1 of 2 ranks stopped)");
  REQUIRE(res.ranks.size() == 2);
  CHECK(res.ranks[1].kind == Kind::kFailed);
  CHECK(res.ranks[1].exit_code == 3);
  CHECK(res.ranks[1].cause == "out of memory: tried to allocate 1.0 GiB");
  CHECK(res.ranks[0].kind == Kind::kStopped);
  CHECK(res.ranks[0].cause == "stopped after rank 1 failed");
  // sh dies of SIGTERM at once: 0.2 s, a poll or two, no 2 s SIGKILL grace.
  CHECK(took < 2.0);
  CHECK(no_children());
}

TEST_CASE("launch: a rank killed by a signal", "[runtime][launcher]") {
  TempDir dir("signal");
  SECTION("SIGSEGV") {
    const LaunchResult res = dtsim::runtime::launch(sh_spec(dir, 1, "ulimit -c 0; kill -SEGV $$"));
    CHECK_FALSE(res.ok);
    REQUIRE(res.ranks.size() == 1);
    CHECK(res.ranks[0].kind == Kind::kSignaled);
    CHECK(res.ranks[0].signal == SIGSEGV);
    CHECK(res.ranks[0].cause == "killed by SIGSEGV");
    CHECK(res.summary == "rank 0 killed by SIGSEGV");
  }
  SECTION("SIGKILL hints at the OOM killer") {
    const LaunchResult res = dtsim::runtime::launch(sh_spec(dir, 1, "kill -KILL $$"));
    REQUIRE(res.ranks.size() == 1);
    CHECK(res.ranks[0].kind == Kind::kSignaled);
    CHECK(res.ranks[0].cause == "killed by SIGKILL (the kernel's OOM killer, or another process)");
  }
  SECTION("the error file wins over the signal name") {
    const LaunchResult res = dtsim::runtime::launch(
        sh_spec(dir, 1, "echo 'CUDA error: illegal address' > \"$DTSIM_RUN_DIR/rank-0.error\"; ulimit -c 0; kill -ABRT $$"));
    REQUIRE(res.ranks.size() == 1);
    CHECK(res.ranks[0].kind == Kind::kSignaled);
    CHECK(res.ranks[0].signal == SIGABRT);
    CHECK(res.summary == "rank 0 failed: CUDA error: illegal address");
  }
  CHECK(no_children());
}

TEST_CASE("launch: a rank whose heartbeat stops is hung", "[runtime][launcher]") {
  TempDir dir("hang");
  // Rank 0 beats every 0.1 s; rank 1 beats once, then goes quiet.
  auto spec = sh_spec(dir, 2, kBeat +
                                  "if [ \"$RANK\" = 1 ]; then beat '2 20 backward'; sleep 30; fi; "
                                  "i=0; while :; do i=$((i+1)); beat \"$i 1000 forward\"; sleep 0.1; done");
  spec.hang_timeout_s = 1;
  const LaunchResult res = dtsim::runtime::launch(spec);
  CHECK_FALSE(res.ok);
  REQUIRE(res.ranks.size() == 2);
  CHECK(res.ranks[1].kind == Kind::kHung);
  CHECK(res.ranks[1].cause == "no heartbeat for 1 s (last: 2 20 backward)");
  CHECK(res.ranks[0].kind == Kind::kStopped);
  CHECK(res.summary == "rank 1 hung: no heartbeat for 1 s (last: 2 20 backward) (1 of 2 ranks stopped)");
  // Found after 1 s of silence, well before anything else would end it.
  CHECK(res.ranks[1].seconds > 1.0);
  CHECK(res.seconds < 5.0);
  CHECK(no_children());
}

TEST_CASE("launch: a rank stopped with SIGSTOP is named hung, not the peer that fell silent first", "[runtime][launcher]") {
  TempDir dir("stopped");
  // Note [Which rank hung]: rank 0 beats once and then waits (as for a peer
  // in a collective); rank 1 beats 0.5 s later, at the same step, then stops
  // itself. Rank 0 is the first to pass the 1 s of silence, yet rank 1 is
  // the cause.
  auto spec = sh_spec(dir, 2, kBeat +
                                  "if [ \"$RANK\" = 1 ]; then sleep 0.5; beat '3 20 backward 1'; kill -STOP $$; fi; "
                                  "beat '3 20 optimizer'; while :; do sleep 0.1; done");
  spec.hang_timeout_s = 1;
  const auto t0 = std::chrono::steady_clock::now();
  const LaunchResult res = dtsim::runtime::launch(spec);
  const double took = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  CHECK_FALSE(res.ok);
  REQUIRE(res.ranks.size() == 2);
  CHECK(res.ranks[1].kind == Kind::kHung);
  CHECK_THAT(res.ranks[1].cause, Catch::StartsWith("stopped by a signal (process state T: SIGSTOP, SIGTSTP, SIGTTIN or SIGTTOU), "
                                                   "no heartbeat for ") &&
                                     Catch::EndsWith(" s (last: 3 20 backward 1)"));
  CHECK(res.ranks[0].kind == Kind::kStopped);
  CHECK(res.ranks[0].cause == "stopped after rank 1 failed");
  CHECK_THAT(res.summary, Catch::StartsWith("rank 1 hung: stopped by a signal") && Catch::EndsWith("(1 of 2 ranks stopped)"));
  // The verdict after rank 0's 1 s of silence; the stopped rank then ends at
  // once (SIGTERM and SIGCONT: Note [Stopping a process group]), not after
  // the 2 s SIGKILL grace.
  CHECK(took > 1.0);
  CHECK(took < 2.5);
  CHECK(no_children());
}

TEST_CASE("launch: nothing is left running, not even a grandchild that ignores SIGTERM", "[runtime][launcher]") {
  TempDir dir("leftover");
  // The rank never beats (start timeout 1 s) and ignores SIGTERM, as does the
  // background sleep it starts: only the SIGKILL to its group after the 2 s
  // grace ends them.
  auto spec = sh_spec(dir, 1,
                      "trap '' TERM; sleep 60 & echo $! > \"$DTSIM_RUN_DIR/grandchild.pid\"; "
                      "while :; do sleep 0.1; done");
  spec.start_timeout_s = 1;
  const LaunchResult res = dtsim::runtime::launch(spec);
  REQUIRE(res.ranks.size() == 1);
  CHECK(res.ranks[0].kind == Kind::kHung);
  CHECK(res.summary == "rank 0 hung: no heartbeat within 1 s of start");
  CHECK(res.seconds > 2.9);  // 1 s to the verdict + 2 s of SIGTERM grace
  CHECK(res.seconds < 8.0);
  CHECK(no_children());

  const pid_t grandchild = std::stoi(slurp(dir.path / "grandchild.pid"));
  REQUIRE(grandchild > 0);
  // The orphan was reparented to init, which reaps when it gets round to it
  // (here about once a second): until then it is a zombie, dead all the same.
  bool gone = false;
  for (int i = 0; i < 50 && !gone; ++i) {
    gone = (::kill(grandchild, 0) != 0 && errno == ESRCH) || proc_state(grandchild) == 'Z';
    if (!gone) std::this_thread::sleep_for(std::chrono::milliseconds(20));
  }
  CHECK(gone);
}

TEST_CASE("launch: an exit status with no error file names the last stderr line", "[runtime][launcher]") {
  TempDir dir("exit");
  // A stale error file from an earlier run must not be taken for this one's.
  std::ofstream(dir.path / "rank-0.error") << "stale cause\n";
  const LaunchResult res = dtsim::runtime::launch(
      sh_spec(dir, 1, "echo 'to stdout'; echo 'first line' >&2; echo 'boom: bad shape' >&2; echo >&2; exit 5"));
  REQUIRE(res.ranks.size() == 1);
  CHECK(res.ranks[0].kind == Kind::kFailed);
  CHECK(res.ranks[0].exit_code == 5);
  CHECK(res.ranks[0].cause == "exit status 5: boom: bad shape");
  CHECK(res.ranks[0].stderr_tail == "to stdout\nfirst line\nboom: bad shape\n\n");
  CHECK(res.summary == "rank 0 failed: exit status 5: boom: bad shape");
}

TEST_CASE("launch: stderr_tail keeps the last 2 KB in whole lines", "[runtime][launcher]") {
  TempDir dir("tail");
  // 100 lines of 100 characters ("NNN" + 96 x + newline): only whole lines of the end survive.
  const LaunchResult res = dtsim::runtime::launch(sh_spec(
      dir, 1, "i=100; while [ $i -lt 200 ]; do printf '%s%096d\\n' $i 0 >&2; i=$((i+1)); done; exit 1"));
  REQUIRE(res.ranks.size() == 1);
  const std::string& tail = res.ranks[0].stderr_tail;
  CHECK(tail.size() <= 2048);
  CHECK(tail.size() % 100 == 0);     // whole lines only
  CHECK(tail.size() == 2000);        // 20 lines fit in 2048 bytes
  CHECK(tail.rfind("180", 0) == 0);  // lines 180..199
  CHECK(res.ranks[0].cause.rfind("exit status 1: 199", 0) == 0);
}

TEST_CASE("launch: the total timeout stops every rank", "[runtime][launcher]") {
  TempDir dir("total");
  auto spec = sh_spec(dir, 2, "sleep 30");
  spec.total_timeout_s = 0.5;
  const LaunchResult res = dtsim::runtime::launch(spec);
  CHECK_FALSE(res.ok);
  REQUIRE(res.ranks.size() == 2);
  for (const auto& r : res.ranks) {
    CHECK(r.kind == Kind::kStopped);
    CHECK(r.cause == "stopped: total timeout of 0.5 s");
  }
  CHECK(res.summary == "run stopped: total timeout of 0.5 s (2 of 2 ranks stopped)");
  CHECK(res.seconds < 3.0);
  CHECK(no_children());
}

TEST_CASE("launch: SIGINT to the launcher stops the ranks and restores the handler", "[runtime][launcher]") {
  TempDir dir("interrupt");
  struct sigaction before {};
  ::sigaction(SIGINT, nullptr, &before);
  auto spec = sh_spec(dir, 2, "sleep 30");
  // The callback runs on the supervising thread, so raise() is handled there.
  spec.on_progress = [](const LaunchProgress&) { std::raise(SIGINT); };
  const LaunchResult res = dtsim::runtime::launch(spec);
  CHECK_FALSE(res.ok);
  CHECK(res.summary == "interrupted by SIGINT: ranks stopped");
  CHECK(res.stop_signal == SIGINT);
  REQUIRE(res.ranks.size() == 2);
  CHECK(res.ranks[0].kind == Kind::kStopped);
  CHECK(res.ranks[1].kind == Kind::kStopped);
  CHECK(res.seconds < 3.0);
  CHECK(no_children());
  struct sigaction after {};
  ::sigaction(SIGINT, nullptr, &after);
  CHECK(after.sa_handler == before.sa_handler);
}

TEST_CASE("launch: bad programs and run directories are IoErrors", "[runtime][launcher]") {
  TempDir dir("bad");
  LaunchSpec spec;
  spec.run_dir = dir.str();
  spec.program = (dir.path / "no-such-worker").string();
  CHECK_THROWS_AS(dtsim::runtime::launch(spec), dtsim::IoError);
  CHECK_THAT(dtsim::test::error_of([&] { dtsim::runtime::launch(spec); }),
             Catch::Contains(spec.program) && Catch::Contains("no such file"));

  std::ofstream(dir.path / "not-executable") << "#!/bin/sh\n";
  spec.program = (dir.path / "not-executable").string();
  CHECK_THAT(dtsim::test::error_of([&] { dtsim::runtime::launch(spec); }),
             Catch::Contains(spec.program) && Catch::Contains("not executable"));

  spec.program = "/bin/sh";
  spec.run_dir = (dir.path / "not-executable" / "run").string();  // under a file
  CHECK_THROWS_AS(dtsim::runtime::launch(spec), dtsim::IoError);
  CHECK_THAT(dtsim::test::error_of([&] { dtsim::runtime::launch(spec); }), Catch::Contains(spec.run_dir));
  CHECK(no_children());
}

TEST_CASE("heartbeat and error files round trip; on_progress follows the slowest rank", "[runtime][launcher]") {
  TempDir dir("beat");
  SECTION("write_heartbeat / write_rank_error") {
    // Note [Cheap heartbeats]: one 96-byte record, space-padded, rewritten in place.
    auto record = [](const std::string& line) { return line + std::string(95 - line.size(), ' ') + "\n"; };
    dtsim::runtime::write_heartbeat(dir.str(), 2, 3, 20, "backward");
    CHECK(slurp(dir.path / "rank-2.heartbeat") == record("3 20 backward"));
    dtsim::runtime::write_heartbeat(dir.str(), 2, 4, 20, "forward");
    CHECK(slurp(dir.path / "rank-2.heartbeat") == record("4 20 forward"));
    dtsim::runtime::write_rank_error(dir.str(), 1, "peer closed the connection\nsecond line");
    CHECK(slurp(dir.path / "rank-1.error") == "peer closed the connection\n");
    // No temporary files are left beside them.
    int files = 0;
    for ([[maybe_unused]] const auto& e : fs::directory_iterator(dir.path)) ++files;
    CHECK(files == 2);
    // Never throw: an empty or missing run directory is quietly ignored.
    CHECK_NOTHROW(dtsim::runtime::write_heartbeat("", 0, 1, 2, "x"));
    CHECK_NOTHROW(dtsim::runtime::write_rank_error("", 0, "x"));
    CHECK_NOTHROW(dtsim::runtime::write_heartbeat((dir.path / "missing").string(), 0, 1, 2, "x"));
    CHECK_NOTHROW(dtsim::runtime::write_rank_error((dir.path / "missing").string(), 0, "x"));
  }
  SECTION("on_progress") {
    // Rank 0 steps every 0.1 s, rank 1 (the slowest) every 0.25 s, 8 steps each.
    auto spec = sh_spec(dir, 2, kBeat +
                                    "d=0.1; [ \"$RANK\" = 1 ] && d=0.25; "
                                    "i=0; while [ $i -lt 8 ]; do i=$((i+1)); beat \"$i 8 rank$RANK\"; sleep $d; done");
    std::vector<LaunchProgress> seen;
    spec.on_progress = [&](const LaunchProgress& p) { seen.push_back(p); };
    const LaunchResult res = dtsim::runtime::launch(spec);
    REQUIRE(res.ok);
    // ~2 s of run, a report every 0.5 s.
    REQUIRE(seen.size() >= 2);
    bool eta_known = false;
    for (std::size_t i = 0; i < seen.size(); ++i) {
      const auto& p = seen[i];
      CHECK(p.total == 8);
      CHECK(p.step >= 1);
      CHECK(p.step <= 8);
      if (p.step < 8) CHECK(p.what == "rank1");  // rank 0 is ahead until both are done
      if (i > 0) {
        CHECK(p.step >= seen[i - 1].step);
        CHECK(p.elapsed_s > seen[i - 1].elapsed_s);
      }
      if (p.eta_s >= 0) {
        eta_known = true;
        // 0.25 s a step for the slowest rank: eta ~ (8 - step) * 0.25 s.
        CHECK(p.eta_s == Approx((8 - p.step) * 0.25).margin(1.0));
      }
    }
    CHECK(eta_known);
  }
}
