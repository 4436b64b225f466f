// Child processes in groups of their own that die with their parent, stopped
// group by group; stop signals recorded for a supervising loop.
#include "dtsim/platform/child.hpp"

#include <cerrno>
#include <chrono>
#include <csignal>
#include <cstring>
#include <fstream>
#include <iterator>
#include <thread>

#include <fcntl.h>
#include <pthread.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>
#ifdef __linux__
#include <sys/prctl.h>
#endif

extern char** environ;

namespace dtsim::platform {
namespace {

using Clock = std::chrono::steady_clock;

// Note [Stop signals]
// A supervisor (validate's launcher, calibrate's driver) must not die of
// SIGINT or SIGTERM while its children run: it would leave them running,
// re-parented to init. So while a StopSignals lives, the handler only records
// the first signal in a volatile sig_atomic_t (the one kind of object a
// handler may write: C11 7.14.1.1, signal-safety(7)) and the supervising loop
// polls received(). The handlers are installed without SA_RESTART, so a
// blocking read, poll or nanosleep returns EINTR at once (signal(7),
// "Interruption of system calls and library functions by signal handlers")
// and the loop sees the flag at its next turn rather than after its wait.
// The flag is process-wide: a signal handler can reach no other state.
// A signal the process was started with ignored (SIG_IGN: a background job
// of a non-interactive shell ignores SIGINT; nohup) stays ignored, as the
// glibc manual asks of programs that handle it ("Basic Signal Handling").
volatile std::sig_atomic_t g_stop_signal = 0;
extern "C" void on_stop_signal(int sig) {
  if (g_stop_signal == 0) g_stop_signal = sig;
}

void sleep_s(double s) {
  timespec ts{static_cast<time_t>(s), static_cast<long>((s - static_cast<double>(static_cast<time_t>(s))) * 1e9)};
  ::nanosleep(&ts, nullptr);  // a signal just ends the nap early
}

}  // namespace

// Note [Children die with their parent]
// Every program a supervisor starts leads a process group of its own
// (setpgid in the child and again in the parent, so that a killpg right
// after fork finds the group whichever runs first; setpgid(2)). So one
// killpg reaches whatever the child started in turn (a shell's children, a
// benchmark's ranks), and a Ctrl-C on the terminal, which the kernel sends to
// the terminal's foreground process group, reaches only the supervisor, which
// then stops its children in order (Note [Stopping a process group]).
// A supervisor killed by SIGKILL gets no such chance (signal(7): SIGKILL
// cannot be caught), so each child asks the kernel for SIGKILL when its
// parent dies: prctl(PR_SET_PDEATHSIG, SIGKILL) (prctl(2)). The setting
// survives execve (not for set-user-ID programs, which dtsim's are not) and
// fires when the *thread* that forked ends, so the supervisor forks from the
// thread that waits for the child. It cannot fire for a parent that died
// before the prctl ran: the child then finds itself re-parented (getppid()
// no longer the pid the parent had before fork) and exits 126 at once. A
// stopped child (SIGSTOP) dies too: SIGKILL is delivered to stopped
// processes. What a killed child leaves on disk stays there.
pid_t spawn_child(const ChildSpec& spec) {
  if (spec.argv.empty()) {
    errno = EINVAL;
    return -1;
  }
  // Everything the child needs is built before fork: after it, until execve,
  // only async-signal-safe calls (signal-safety(7)).
  std::vector<char*> argv, envp;
  for (const auto& a : spec.argv) argv.push_back(const_cast<char*>(a.c_str()));
  argv.push_back(nullptr);
  if (spec.env) {
    for (const auto& e : *spec.env) envp.push_back(const_cast<char*>(e.c_str()));
    envp.push_back(nullptr);
  }
  char* const* env = spec.env ? envp.data() : environ;
  const std::string exec_failed = "dtsim: cannot execute " + spec.argv.front() + "\n";
  const int null_in = spec.stdin_fd < 0 ? ::open("/dev/null", O_RDONLY | O_CLOEXEC) : -1;
  const int in = spec.stdin_fd >= 0 ? spec.stdin_fd : null_in;
  // Every signal blocked across fork: until the child has put back the
  // default actions, a SIGTERM for it would run the parent's handler in the
  // child (Note [Stop signals]'s records it there, and execve then forgets
  // it: the child would run on). Pending, it acts once the child unblocks.
  // glibc's posix_spawn does the same.
  sigset_t all, old_mask;
  sigfillset(&all);
  ::pthread_sigmask(SIG_SETMASK, &all, &old_mask);
  const pid_t parent = ::getpid();
  const pid_t pid = ::fork();
  if (pid == 0) {
    ::setpgid(0, 0);
#ifdef __linux__
    ::prctl(PR_SET_PDEATHSIG, SIGKILL);
#endif
    if (::getppid() != parent) ::_exit(126);  // the parent died before prctl
    for (int sig = 1; sig < NSIG; ++sig) {
      struct sigaction sa {};
      if (::sigaction(sig, nullptr, &sa) != 0) continue;
      // A handler: the default. SIG_IGN is inherited as the parent had it,
      // except for the stop signals, which the supervisor sends on purpose.
      if (sa.sa_handler == SIG_DFL || (sa.sa_handler == SIG_IGN && sig != SIGINT && sig != SIGTERM)) continue;
      sa.sa_handler = SIG_DFL;
      sa.sa_flags = 0;
      ::sigaction(sig, &sa, nullptr);
    }
    sigset_t none;
    sigemptyset(&none);
    ::sigprocmask(SIG_SETMASK, &none, nullptr);
    if (in >= 0) ::dup2(in, 0);
    if (spec.stdout_fd >= 0) ::dup2(spec.stdout_fd, 1);
    if (spec.stderr_fd >= 0) ::dup2(spec.stderr_fd, 2);
    ::close_range(3, ~0U, 0);  // the caller's descriptors are not the child's business
    ::execve(argv[0], argv.data(), env);
    [[maybe_unused]] const ssize_t n = ::write(2, exec_failed.data(), exec_failed.size());
    ::_exit(127);
  }
  const int fork_errno = errno;
  ::pthread_sigmask(SIG_SETMASK, &old_mask, nullptr);
  if (null_in >= 0) ::close(null_in);
  if (pid < 0) {
    errno = fork_errno;
    return -1;
  }
  ::setpgid(pid, pid);
  return pid;
}

// Note [Stopping a process group]
// SIGTERM first, to the whole group, so that a child that cleans up after
// itself can (dtsim_c10d_bench removes its rendezvous folder and stops its
// ranks). SIGCONT right after it: a stopped process (SIGSTOP, Ctrl-Z, a
// debugger) does not act on SIGTERM until it is continued ("any additional
// signals that are sent to the process shall not be delivered until the
// process is continued, except SIGKILL": POSIX.1-2017 XSH 2.4.3), so without
// it a stopped rank would cost the whole grace; shells' `kill` does the same
// for stopped jobs. SIGKILL to the groups still there after the grace, and
// to each group once its leader is reaped: a grandchild that ignores SIGTERM
// outlives a leader that does not.
void stop_groups(const std::vector<pid_t>& leaders, double grace_s, const std::function<void(pid_t, int)>& on_reaped) {
  std::vector<pid_t> left;
  for (const pid_t pid : leaders) {
    if (pid <= 0) continue;
    ::killpg(pid, SIGTERM);
    ::killpg(pid, SIGCONT);
    left.push_back(pid);
  }
  auto reaped = [&](pid_t pid, int status) {
    ::killpg(pid, SIGKILL);
    if (on_reaped) on_reaped(pid, status);
  };
  const auto deadline = Clock::now() + std::chrono::duration<double>(grace_s);
  while (!left.empty()) {
    for (auto it = left.begin(); it != left.end();) {
      int status = 0;
      const pid_t r = ::waitpid(*it, &status, WNOHANG);
      if (r == *it || (r < 0 && errno == ECHILD)) {
        reaped(*it, r == *it ? status : 0);
        it = left.erase(it);
      } else {
        ++it;
      }
    }
    if (left.empty() || Clock::now() >= deadline) break;
    sleep_s(0.02);
  }
  for (const pid_t pid : left) {
    ::killpg(pid, SIGKILL);
    int status = 0;
    pid_t r;
    while ((r = ::waitpid(pid, &status, 0)) < 0 && errno == EINTR) {
    }
    reaped(pid, r == pid ? status : 0);
  }
}

StopSignals::StopSignals() {
  g_stop_signal = 0;
  struct sigaction sa {};
  sa.sa_handler = on_stop_signal;
  sigemptyset(&sa.sa_mask);
  sa.sa_flags = 0;  // no SA_RESTART: Note [Stop signals]
  ::sigaction(SIGINT, nullptr, &old_int_);
  ::sigaction(SIGTERM, nullptr, &old_term_);
  if (old_int_.sa_handler != SIG_IGN) ::sigaction(SIGINT, &sa, nullptr);
  if (old_term_.sa_handler != SIG_IGN) ::sigaction(SIGTERM, &sa, nullptr);
}

StopSignals::~StopSignals() {
  ::sigaction(SIGINT, &old_int_, nullptr);
  ::sigaction(SIGTERM, &old_term_, nullptr);
}

int StopSignals::received() { return g_stop_signal; }

std::string signal_name(int sig) {
  const char* abbrev = ::sigabbrev_np(sig);  // glibc >= 2.32
  return abbrev ? std::string("SIG") + abbrev : "signal " + std::to_string(sig);
}

char process_state(pid_t pid) {
  std::ifstream in("/proc/" + std::to_string(pid) + "/stat");
  const std::string stat((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  const auto paren = stat.rfind(')');  // the command name may hold spaces and parentheses
  return paren != std::string::npos && paren + 2 < stat.size() ? stat[paren + 2] : 0;
}

}  // namespace dtsim::platform
