#pragma once
// Starting and supervising the local worker processes of `dtsim validate
// --procs N`: one process per rank, each in its own process group, with the
// torchrun-style environment (RANK, WORLD_SIZE, LOCAL_RANK, LOCAL_WORLD_SIZE,
// MASTER_ADDR), DTSIM_RUN_DIR, and DTSIM_RENDEZVOUS=file:RUN_DIR/rendezvous,
// where the ranks meet (Note [Local rendezvous] in src/launcher.cpp; a
// MASTER_PORT in LaunchSpec::env asks for a TCPStore instead). A rank that exits non-zero, dies
// of a signal, or stops beating its heartbeat ends the whole run: the others
// are terminated (SIGTERM, then SIGKILL), so no process is left behind, and
// the result names the first rank that failed and why.
//
// Note [Run directory protocol]: what a worker writes under DTSIM_RUN_DIR.
//   rank-K.heartbeat  one line "STEP TOTAL WHAT" (e.g. "3 20 backward"),
//                     rewritten atomically whenever the worker makes progress;
//                     the launcher treats a change of content as a beat.
//   rank-K.error      one line: the cause, written by the worker before it
//                     exits non-zero ("out of memory: ...", "peer closed ...").
//   rank-K.json       the rank's measurements, written atomically at the end.
//   rank-K.stderr     the worker's stderr (and stdout), captured by the launcher.
// No Torch here: the CLI links it.

#include <functional>
#include <map>
#include <string>
#include <vector>

namespace dtsim::runtime {

/// Progress of a run, as the slowest rank reports it.
struct LaunchProgress {
  int step = 0;           ///< the lowest STEP over ranks that have beaten
  int total = 0;          ///< TOTAL from the heartbeats (0 until known)
  std::string what;       ///< WHAT of the slowest rank
  double elapsed_s = 0;   ///< since the launch
  double eta_s = -1;      ///< estimated seconds left (-1: unknown yet)
};

/// What to run.
struct LaunchSpec {
  std::string program;                     ///< worker executable (absolute or relative path)
  std::vector<std::string> args;           ///< its arguments (argv[1..])
  int procs = 1;                           ///< ranks to start
  std::string run_dir;                     ///< created if missing; per-rank files go here
  double hang_timeout_s = 300;             ///< a rank silent (no heartbeat change) this long is hung
  double start_timeout_s = 120;            ///< a rank with no heartbeat at all this long after launch is hung
  double total_timeout_s = 0;              ///< the whole run (0: no limit)
  std::map<std::string, std::string> env;  ///< extra environment for every rank
  /// Called about twice a second from the supervising thread (may be empty).
  std::function<void(const LaunchProgress&)> on_progress;
};

/// How one rank ended.
struct RankOutcome {
  enum class Kind {
    kOk,        ///< exit status 0
    kFailed,    ///< exit status != 0
    kSignaled,  ///< died of a signal it was not sent by us
    kHung,      ///< heartbeat stopped; we killed it
    kStopped,   ///< we stopped it because another rank failed (or on the total timeout)
  };
  int rank = 0;
  Kind kind = Kind::kOk;
  int exit_code = 0;            ///< when kFailed
  int signal = 0;               ///< when kSignaled
  std::string cause;            ///< one line: rank-K.error, else "killed by SIGSEGV", "exit status 3", "no heartbeat for 30 s (last: 3 20 backward)"
  std::string stderr_tail;      ///< the last lines of rank-K.stderr (at most ~2 KB)
  double seconds = 0;           ///< from launch to its end
};

/// How the run ended.
struct LaunchResult {
  bool ok = false;                  ///< every rank exited 0
  std::vector<RankOutcome> ranks;   ///< by rank
  /// One line for the user when !ok, naming the first rank that failed and its
  /// cause, e.g. "rank 1 failed: out of memory: ... (2 of 2 ranks stopped)".
  std::string summary;
  double seconds = 0;
  /// SIGINT or SIGTERM when the launcher itself was told to stop (the ranks
  /// were then stopped and the summary says "interrupted by SIGINT: ranks
  /// stopped"); 0 otherwise.
  int stop_signal = 0;
};

/// A TCP port on 127.0.0.1 that was free a moment ago (for MASTER_PORT),
/// below the kernel's ephemeral range where it can (Note [A port outside
/// the ephemeral range] in src/launcher.cpp).
int free_local_port();

/// Starts `procs` ranks and supervises them until all have ended. Throws
/// IoError when the run directory cannot be made or the program not started.
/// SIGINT / SIGTERM received by the calling process while it waits stop the
/// workers too (the result then says so, in stop_signal). Ranks die with
/// the calling thread (Note [Children die with their parent] in
/// platform/src/child.cpp). A rank stopped by a signal or a debugger is
/// named as the hung one (Note [Which rank hung] in src/launcher.cpp).
LaunchResult launch(const LaunchSpec& spec);

/// Writes the heartbeat file for `rank` under `run_dir` (atomically).
/// For workers; a no-op when run_dir is empty.
void write_heartbeat(const std::string& run_dir, int rank, int step, int total, const std::string& what);
/// Writes rank-K.error (one line). For workers; a no-op when run_dir is empty.
void write_rank_error(const std::string& run_dir, int rank, const std::string& cause);

}  // namespace dtsim::runtime
