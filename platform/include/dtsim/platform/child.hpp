#pragma once
// Child processes that cannot outlive the program that started them, and the
// stop signals (SIGINT, SIGTERM) that end a supervised run. One mechanism for
// `dtsim validate`'s launcher (runtime/) and `dtsim calibrate`'s driver
// (calibrate/): Note [Children die with their parent] and Note [Stopping a
// process group] in src/child.cpp. POSIX and Linux only.

#include <signal.h>
#include <sys/types.h>

#include <functional>
#include <optional>
#include <string>
#include <vector>

namespace dtsim::platform {

/// What to start: a program (no PATH search) and where its standard streams go.
struct ChildSpec {
  std::vector<std::string> argv;                ///< argv[0] is the program's path
  std::optional<std::vector<std::string>> env;  ///< the whole environment ("KEY=VALUE"); nullopt: the caller's
  int stdin_fd = -1;                            ///< becomes descriptor 0; -1: /dev/null
  int stdout_fd = -1;                           ///< becomes descriptor 1; -1: the caller's
  int stderr_fd = -1;                           ///< becomes descriptor 2; -1: the caller's
};

/// Forks and execs `spec` as the leader of a process group of its own, with
/// the parent-death signal SIGKILL (Note [Children die with their parent]),
/// default actions for the signals the caller handles and for SIGINT and
/// SIGTERM, an empty signal mask and no descriptors but 0, 1 and 2 (a stop
/// signal sent the moment it starts is not lost). Returns its pid,
/// or -1 with errno set when fork fails. A program that cannot be executed
/// writes "dtsim: cannot execute PROGRAM" to its stderr and exits 127.
/// Call it from the thread that will supervise the child until it is reaped.
pid_t spawn_child(const ChildSpec& spec);

/// Note [Stopping a process group]: SIGTERM and SIGCONT to the group of every
/// pid in `leaders` (each started by spawn_child), SIGKILL to the groups
/// still there after `grace_s` seconds, and every leader reaped before it
/// returns. `on_reaped(pid, wait_status)` is called as each leader is reaped
/// (wait_status as waitpid gives it; may be empty). Pids <= 0 are skipped.
void stop_groups(const std::vector<pid_t>& leaders, double grace_s,
                 const std::function<void(pid_t, int)>& on_reaped = {});

/// While one lives, SIGINT and SIGTERM no longer end the process: they are
/// recorded, and the supervising loop asks received() and stops its children
/// itself (Note [Stop signals]). The handlers it replaces are restored when
/// it ends. One at a time per process (the handler writes one static flag).
class StopSignals {
 public:
  /// Installs the handlers and clears the flag.
  StopSignals();
  /// Restores the handlers it replaced; a signal received stays in received()
  /// until the next StopSignals.
  ~StopSignals();
  StopSignals(const StopSignals&) = delete;
  StopSignals& operator=(const StopSignals&) = delete;
  /// The first stop signal received since construction (SIGINT or SIGTERM), 0 if none.
  static int received();

 private:
  struct sigaction old_int_ {}, old_term_ {};  ///< the handlers to restore
};

/// "SIGSEGV", "SIGTERM", ... ("signal 42" for one without a name).
std::string signal_name(int sig);

/// The state letter of /proc/PID/stat ('R', 'S', 'T' stopped, 't' traced,
/// 'Z' zombie, ...; proc(5)), or 0 when there is no such process.
char process_state(pid_t pid);

}  // namespace dtsim::platform
