// Starting and supervising local ranks: fork/exec, a 50 ms poll loop over
// waitpid and the heartbeat files, and a clean stop of every process group.
#include "dtsim/runtime/launcher.hpp"

#include <algorithm>
#include <cerrno>
#include <chrono>
#include <csignal>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <map>
#include <mutex>
#include <optional>
#include <random>
#include <sstream>

#include <arpa/inet.h>
#include <fcntl.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "dtsim/platform/child.hpp"
#include "dtsim/sim/error.hpp"

extern char** environ;

namespace dtsim::runtime {
namespace {

namespace fs = std::filesystem;
using Clock = std::chrono::steady_clock;
using Kind = RankOutcome::Kind;

constexpr double kPollS = 0.05;      // supervision period
constexpr double kProgressS = 0.5;   // on_progress period
constexpr double kGraceS = 2.0;      // SIGTERM -> SIGKILL
constexpr double kPeerGraceS = 1.5;  // how long a "lost my peer" failure waits for its culprit
constexpr std::size_t kTailBytes = 2048;

double since(Clock::time_point t0) { return std::chrono::duration<double>(Clock::now() - t0).count(); }

void sleep_s(double s) {
  timespec ts{0, static_cast<long>(s * 1e9)};
  ::nanosleep(&ts, nullptr);  // an interrupting signal just ends the nap early
}

/// "1", "0.5", "300": seconds as the user wrote them.
std::string fmt_s(double s) {
  char buf[32];
  std::snprintf(buf, sizeof buf, "%g", s);
  return buf;
}

std::string rank_file(const std::string& dir, int rank, const char* ext) {
  return (fs::path(dir) / ("rank-" + std::to_string(rank) + "." + ext)).string();
}

std::string trim(const std::string& s) {
  const auto b = s.find_first_not_of(" \t\r\n");
  if (b == std::string::npos) return "";
  return s.substr(b, s.find_last_not_of(" \t\r\n") - b + 1);
}

/// The whole file, or nullopt when it cannot be read (missing).
std::optional<std::string> read_text(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  if (!in) return std::nullopt;
  std::ostringstream ss;
  ss << in.rdbuf();
  return ss.str();
}

/// The last at most `max` bytes of a file, cut to whole lines.
std::string read_tail(const std::string& path, std::size_t max) {
  std::ifstream in(path, std::ios::binary | std::ios::ate);
  if (!in) return "";
  const auto size = static_cast<std::size_t>(in.tellg());
  const std::size_t from = size > max ? size - max : 0;
  std::string s(size - from, '\0');
  in.seekg(static_cast<std::streamoff>(from));
  in.read(s.data(), static_cast<std::streamsize>(s.size()));
  s.resize(static_cast<std::size_t>(in.gcount()));
  if (from > 0) {
    const auto nl = s.find('\n');
    s = nl == std::string::npos ? "" : s.substr(nl + 1);
  }
  return s;
}

std::string last_nonempty_line(const std::string& text) {
  std::istringstream in(text);
  std::string line, last;
  while (std::getline(in, line)) {
    if (!trim(line).empty()) last = trim(line);
  }
  return last;
}

std::string first_line(const std::string& text) { return trim(text.substr(0, text.find('\n'))); }

using platform::signal_name;

/// Writes a small file by temp + rename, without fsync; throws IoError.
// Note [Heartbeats without fsync]: a reader must never see half a heartbeat,
// which the rename guarantees; durability does not matter (a crash loses the
// run anyway), and an fsync per beat would put disk latency into the step
// times the worker measures. So no sim::write_file_atomic here.
void write_small_atomic(const std::string& path, const std::string& content) {
  const fs::path target(path);
  std::string tmp = (target.parent_path() / ("." + target.filename().string() + ".tmpXXXXXX")).string();
  const int fd = ::mkstemp(tmp.data());
  if (fd < 0) throw IoError(path + ": cannot write: " + std::strerror(errno));
  const bool ok = ::write(fd, content.data(), content.size()) == static_cast<ssize_t>(content.size());
  ::fchmod(fd, 0644);
  if (::close(fd) != 0 || !ok || std::rename(tmp.c_str(), path.c_str()) != 0) {
    ::unlink(tmp.c_str());
    throw IoError(path + ": cannot write");
  }
}

/// A parsed heartbeat line "STEP TOTAL WHAT".
struct Beat {
  int step = 0, total = 0;
  std::string what;
};
std::optional<Beat> parse_beat(const std::string& line) {
  std::istringstream in(line);
  Beat b;
  if (!(in >> b.step >> b.total)) return std::nullopt;
  std::getline(in, b.what);
  b.what = trim(b.what);
  return b;
}

/// One rank while it runs.
struct Rank {
  pid_t pid = -1;
  bool running = false;
  std::optional<std::string> beat;  // last heartbeat content
  Clock::time_point last_change;    // when it last changed
  RankOutcome out;
};

/// Starts one rank with its output in `out_path`; throws IoError when that
/// file cannot be made or the rank not started.
// Note [Children die with their parent] (platform/src/child.cpp): each rank
// leads its own group, so one killpg reaches whatever it started (a shell's
// children, data loaders) and a Ctrl-C on the terminal reaches only the
// launcher, which then stops the ranks in order; the kernel kills them if the
// launcher is killed without that chance (SIGKILL). The parent-death signal
// fires when the forking *thread* ends, which is fine because launch()
// supervises on the thread that forked until every rank is reaped.
pid_t spawn(const LaunchSpec& spec, const std::vector<std::string>& env, const std::string& out_path) {
  const int out = ::open(out_path.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_APPEND | O_CLOEXEC, 0644);
  if (out < 0) throw IoError(out_path + ": cannot create: " + std::strerror(errno));
  platform::ChildSpec child;
  child.argv.push_back(spec.program);
  child.argv.insert(child.argv.end(), spec.args.begin(), spec.args.end());
  child.env = env;
  child.stdout_fd = child.stderr_fd = out;
  const pid_t pid = platform::spawn_child(child);
  const int fork_errno = errno;
  ::close(out);
  if (pid < 0) throw IoError(spec.program + ": cannot start: " + std::strerror(fork_errno));
  return pid;
}

/// Records how a reaped rank ended (kOk / kFailed / kSignaled, cause from its files).
void record_exit(Rank& r, int status, const std::string& run_dir, double t) {
  r.running = false;
  r.out.seconds = t;
  ::killpg(r.pid, SIGKILL);  // what it left behind in its group goes with it
  const auto err = read_text(rank_file(run_dir, r.out.rank, "error"));
  const std::string err_line = err ? first_line(*err) : "";
  if (WIFSIGNALED(status)) {
    r.out.kind = Kind::kSignaled;
    r.out.signal = WTERMSIG(status);
    r.out.cause = !err_line.empty()         ? err_line
                  : r.out.signal == SIGKILL ? "killed by SIGKILL (the kernel's OOM killer, or another process)"
                                            : "killed by " + signal_name(r.out.signal);
  } else if (WEXITSTATUS(status) != 0) {
    r.out.kind = Kind::kFailed;
    r.out.exit_code = WEXITSTATUS(status);
    const std::string last = last_nonempty_line(read_tail(rank_file(run_dir, r.out.rank, "stderr"), kTailBytes));
    r.out.cause = !err_line.empty() ? err_line
                                    : "exit status " + std::to_string(r.out.exit_code) + (last.empty() ? "" : ": " + last);
  }
}

/// When a reaped rank most likely ended: the newest of its error and stderr files.
// Note [Which rank failed first]: a 50 ms poll can reap several failed ranks
// at once, typically the culprit and a peer that saw the connection drop.
// waitpid says nothing about order, so we order them by the last time they
// wrote: the peer writes its connection error after the culprit is gone.
// A rank whose cause only says it lost a peer ("Connection closed by peer")
// is never named first while another rank failed for a reason of its own;
// the supervisor waits up to kPeerGraceS for that culprit to be reaped.
fs::file_time_type last_write(const std::string& run_dir, int rank) {
  std::error_code ec;
  auto t = fs::file_time_type::min();
  for (const char* ext : {"error", "stderr"}) {
    const auto w = fs::last_write_time(rank_file(run_dir, rank, ext), ec);
    if (!ec) t = std::max(t, w);
  }
  return t;
}

/// A cause that only says the rank lost a peer (Gloo, NCCL, TCPStore).
bool peer_lost(const std::string& cause) {
  for (const char* p : {"SIGPIPE", "Connection closed by peer", "Connection reset by peer", "Broken pipe", "Socket closed",
                        "Connection refused", "remote process exited"}) {
    if (cause.find(p) != std::string::npos) return true;
  }
  return false;
}

/// Every running rank's group stopped (Note [Stopping a process group] in
/// platform/src/child.cpp: SIGTERM, SIGKILL after kGraceS), all reaped.
void stop_all(std::vector<Rank>& ranks, Clock::time_point t0) {
  std::vector<pid_t> running;
  for (const auto& r : ranks) {
    if (r.running) running.push_back(r.pid);
  }
  platform::stop_groups(running, kGraceS, [&](pid_t pid, int) {
    for (auto& r : ranks) {
      if (r.running && r.pid == pid) {
        r.running = false;
        r.out.seconds = since(t0);
      }
    }
  });
}

}  // namespace

int free_local_port() {
  // Note [A port outside the ephemeral range]
  // A port found free is not held, so the one returned should be one the
  // kernel will not hand out meanwhile: bind(0) and connect() take theirs
  // from ip_local_port_range (32768-60999 by default), so the port is
  // drawn below it, from 20000 up, and tried; only when that range is
  // empty or full does the kernel pick (bind to port 0).
  const auto try_bind = [](int port) -> int {
    const int fd = ::socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
    if (fd < 0) throw IoError(std::string("cannot open a socket for MASTER_PORT: ") + std::strerror(errno));
    sockaddr_in addr{};
    addr.sin_family = AF_INET;
    addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    addr.sin_port = htons(static_cast<std::uint16_t>(port));
    socklen_t len = sizeof addr;
    const bool ok = ::bind(fd, reinterpret_cast<sockaddr*>(&addr), sizeof addr) == 0 &&
                    ::getsockname(fd, reinterpret_cast<sockaddr*>(&addr), &len) == 0;
    const int err = errno;
    ::close(fd);
    if (!ok && port == 0) throw IoError(std::string("cannot find a free port on 127.0.0.1: ") + std::strerror(err));
    return ok ? ntohs(addr.sin_port) : -1;
  };
  constexpr int kFirst = 20000;
  int ephemeral = 32768;
  if (std::ifstream in("/proc/sys/net/ipv4/ip_local_port_range"); in) in >> ephemeral;
  if (ephemeral > kFirst + 1) {
    std::mt19937 draw(std::random_device{}());
    std::uniform_int_distribution<int> port(kFirst, ephemeral - 1);
    for (int tries = 0; tries < 64; ++tries) {
      if (const int p = try_bind(port(draw)); p > 0) return p;
    }
  }
  return try_bind(0);
}

LaunchResult launch(const LaunchSpec& spec) {
  if (spec.procs < 1) throw ConfigError("launch: procs must be at least 1, not " + std::to_string(spec.procs));
  if (spec.run_dir.empty()) throw IoError("launch: no run directory given");
  std::error_code ec;
  fs::create_directories(spec.run_dir, ec);
  if (ec || !fs::is_directory(spec.run_dir)) {
    throw IoError(spec.run_dir + ": cannot create the run directory" + (ec ? ": " + ec.message() : ""));
  }
  if (!fs::is_regular_file(spec.program, ec)) throw IoError(spec.program + ": cannot run the worker: no such file");
  if (::access(spec.program.c_str(), X_OK) != 0) {
    throw IoError(spec.program + ": cannot run the worker: not executable");
  }
  for (int k = 0; k < spec.procs; ++k) {
    for (const char* ext : {"heartbeat", "error", "json", "stderr"}) fs::remove(rank_file(spec.run_dir, k, ext), ec);
  }
  // A store a killed run left behind would hand this run its keys.
  const std::string store = fs::absolute(fs::path(spec.run_dir) / "rendezvous").string();
  fs::remove(store, ec);

  // The environment: the caller's, then ours, then spec.env (which wins).
  std::map<std::string, std::string> base;
  for (char** e = environ; e && *e; ++e) {
    const std::string kv = *e;
    const auto eq = kv.find('=');
    if (eq != std::string::npos) base[kv.substr(0, eq)] = kv.substr(eq + 1);
  }
  base["WORLD_SIZE"] = base["LOCAL_WORLD_SIZE"] = std::to_string(spec.procs);
  // Note [Local rendezvous]
  // The ranks of a local run meet in a c10d FileStore in the run directory
  // (Note [Rendezvous] in src/worker_main.cpp), not a TCPStore on a port
  // picked here. A port found free is not held: until rank 0 binds it,
  // which takes a worker the second it needs to load LibTorch, any socket
  // the kernel binds to an ephemeral port may take it (Gloo's pairs bind
  // one each), and rank 0 then failed with "The server socket has failed
  // to listen on any local network address" (a CI run, with Gloo tests
  // running beside it). A file in our own directory cannot be taken.
  // MASTER_PORT in spec.env still asks for a TCPStore on that port.
  base["MASTER_ADDR"] = "127.0.0.1";
  base.erase("MASTER_PORT");
  base.erase("DTSIM_RENDEZVOUS");
  if (!spec.env.count("MASTER_PORT")) base["DTSIM_RENDEZVOUS"] = "file:" + store;
  base["DTSIM_RUN_DIR"] = spec.run_dir;

  platform::StopSignals stop_signals;  // Note [Stop signals] (platform/src/child.cpp)
  const auto t0 = Clock::now();
  std::vector<Rank> ranks(static_cast<std::size_t>(spec.procs));
  for (int k = 0; k < spec.procs; ++k) {
    auto env = base;
    env["RANK"] = env["LOCAL_RANK"] = std::to_string(k);
    for (const auto& [key, v] : spec.env) env[key] = v;
    std::vector<std::string> flat;
    for (const auto& [key, v] : env) flat.push_back(key + "=" + v);
    Rank& r = ranks[static_cast<std::size_t>(k)];
    r.out.rank = k;
    r.last_change = t0;
    try {
      r.pid = spawn(spec, flat, rank_file(spec.run_dir, k, "stderr"));
    } catch (...) {
      stop_all(ranks, t0);
      throw;
    }
    r.running = true;
  }

  LaunchResult res;
  int first = -1;               // the rank that failed first
  std::vector<int> failed;      // ranks reaped with a failure, in the order seen
  std::optional<Clock::time_point> peer_deadline;  // waiting for a culprit behind a peer loss
  std::string stop_cause;       // cause for the ranks we stop
  bool interrupted = false;     // by SIGINT / SIGTERM
  auto next_progress = t0 + std::chrono::duration<double>(kProgressS);
  std::optional<std::pair<double, int>> first_progress;  // (time, step) when min step first > 0
  for (;;) {
    // Reap; order this round's failures by Note [Which rank failed first].
    std::vector<int> failed_now;
    bool any_running = false;
    for (auto& r : ranks) {
      if (!r.running) continue;
      int status = 0;
      if (::waitpid(r.pid, &status, WNOHANG) == r.pid) {
        record_exit(r, status, spec.run_dir, since(t0));
        if (r.out.kind != Kind::kOk) failed_now.push_back(r.out.rank);
      } else {
        any_running = true;
      }
    }
    failed.insert(failed.end(), failed_now.begin(), failed_now.end());
    if (first < 0 && !failed.empty()) {
      // A rank that only lost its peer is a victim (Note [Which rank failed first]):
      // give the culprit a moment to be reaped too.
      const auto culprit = std::find_if(failed.begin(), failed.end(), [&](int k) { return !peer_lost(ranks[k].out.cause); });
      if (culprit != failed.end()) {
        first = *culprit;
      } else if (!peer_deadline) {
        peer_deadline = Clock::now() + std::chrono::milliseconds(static_cast<int>(kPeerGraceS * 1000));
      } else if (Clock::now() >= *peer_deadline || !any_running) {
        first = *std::min_element(failed.begin(), failed.end(), [&](int a, int b) {
          return last_write(spec.run_dir, a) < last_write(spec.run_dir, b);
        });
      }
    }
    if (first >= 0 || (!any_running && failed.empty())) break;

    // Heartbeats and hangs. When several ranks are silent, the one furthest
    // behind (lowest step) is hung; the others wait for it in a collective.
    // Note [Which rank hung]
    // Silence alone does not say who hung. A rank that waits in a collective
    // for a stuck peer stops beating too, and it may fall silent *first*:
    // its last beat came before the peer's last one (the peer was slower,
    // then stopped), so it is the first to pass hang_timeout_s. Naming it
    // ("rank 0 hung" when rank 1 was stopped with SIGSTOP) sends the user to
    // the wrong rank. So when any rank is silent for that long, the launcher
    // first looks for a rank that is stopped, in process state T (SIGSTOP,
    // SIGTSTP, SIGTTIN, SIGTTOU) or t (a debugger's tracing stop) of
    // /proc/PID/stat (proc(5)): a stopped process makes no progress of its
    // own, so it is the cause whatever its heartbeat says. Otherwise the
    // silent rank furthest behind is named. A rank that spins or sleeps
    // forever while a peer that fell silent earlier waits for it is still
    // misnamed when it beat last, at the same step: a heartbeat cannot tell
    // waiting from working.
    const double now = since(t0);
    int hung = -1;
    auto behind = [&](const Rank& r) {
      const auto b = r.beat ? parse_beat(*r.beat) : std::nullopt;
      return b ? b->step : -1;
    };
    for (auto& r : ranks) {
      if (!r.running) continue;
      auto beat = read_text(rank_file(spec.run_dir, r.out.rank, "heartbeat"));
      if (beat && beat != r.beat) {
        r.beat = std::move(beat);
        r.last_change = Clock::now();
      }
      const bool silent = r.beat ? since(r.last_change) > spec.hang_timeout_s : now > spec.start_timeout_s;
      if (silent && first < 0 && (hung < 0 || behind(r) < behind(ranks[static_cast<std::size_t>(hung)]))) hung = r.out.rank;
    }
    if (hung >= 0) {
      // Note [Which rank hung]: a stopped rank is the cause, whoever fell silent first.
      int stopped = -1;
      char state = 0;
      for (const auto& r : ranks) {
        if (!r.running) continue;
        state = platform::process_state(r.pid);
        if (state == 'T' || state == 't') {
          stopped = r.out.rank;
          break;
        }
      }
      Rank& r = ranks[static_cast<std::size_t>(stopped >= 0 ? stopped : hung)];
      first = r.out.rank;
      r.out.kind = Kind::kHung;
      if (stopped >= 0) {
        char silent[32];
        std::snprintf(silent, sizeof silent, "%.1f", since(r.last_change));
        r.out.cause = std::string(state == 't' ? "stopped by a debugger (process state t)"
                                               : "stopped by a signal (process state T: SIGSTOP, SIGTSTP, SIGTTIN or SIGTTOU)") +
                      ", " + (r.beat ? "no heartbeat for " + std::string(silent) + " s (last: " + first_line(*r.beat) + ")"
                                     : "no heartbeat since start");
      } else {
        r.out.cause = r.beat ? "no heartbeat for " + fmt_s(spec.hang_timeout_s) + " s (last: " + first_line(*r.beat) + ")"
                             : "no heartbeat within " + fmt_s(spec.start_timeout_s) + " s of start";
      }
    }
    if (first >= 0) break;
    if (spec.total_timeout_s > 0 && now > spec.total_timeout_s) {
      stop_cause = "stopped: total timeout of " + fmt_s(spec.total_timeout_s) + " s";
      res.summary = "run stopped: total timeout of " + fmt_s(spec.total_timeout_s) + " s";
      break;
    }
    if (const int sig = platform::StopSignals::received(); sig != 0) {
      interrupted = true;
      res.stop_signal = sig;
      stop_cause = "stopped: interrupted by " + signal_name(sig);
      res.summary = "interrupted by " + signal_name(sig) + ": ranks stopped";
      break;
    }

    if (spec.on_progress && Clock::now() >= next_progress) {
      next_progress = Clock::now() + std::chrono::duration<double>(kProgressS);
      LaunchProgress p;
      p.elapsed_s = now;
      std::optional<Beat> slowest;
      for (const auto& r : ranks) {
        const auto b = r.beat ? parse_beat(*r.beat) : std::nullopt;
        if (b && (!slowest || b->step < slowest->step)) slowest = b;
      }
      if (slowest) {
        p.step = slowest->step;
        p.total = slowest->total;
        p.what = slowest->what;
        if (!first_progress && p.step > 0) first_progress = std::make_pair(now, p.step);
        if (first_progress && p.step > first_progress->second && p.total > 0) {
          const double rate = (p.step - first_progress->second) / (now - first_progress->first);
          p.eta_s = std::max(0, p.total - p.step) / rate;
        }
      }
      spec.on_progress(p);
    }
    sleep_s(kPollS);
  }

  // Stop the rest; ranks that fail after the first failure are its victims.
  if (first >= 0 && stop_cause.empty()) stop_cause = "stopped after rank " + std::to_string(first) + " failed";
  std::vector<bool> was_running;
  for (const auto& r : ranks) was_running.push_back(r.running);
  stop_all(ranks, t0);
  for (auto& r : ranks) {
    if (was_running[static_cast<std::size_t>(r.out.rank)] && r.out.kind != Kind::kHung) {
      r.out.kind = Kind::kStopped;
      r.out.cause = stop_cause;
    }
    r.out.stderr_tail = read_tail(rank_file(spec.run_dir, r.out.rank, "stderr"), kTailBytes);
    res.ranks.push_back(r.out);
  }
  res.seconds = since(t0);
  res.ok = std::all_of(res.ranks.begin(), res.ranks.end(), [](const RankOutcome& o) { return o.kind == Kind::kOk; });
  if (first >= 0) {
    const RankOutcome& f = res.ranks[static_cast<std::size_t>(first)];
    const std::string r = "rank " + std::to_string(first);
    res.summary = f.kind == Kind::kHung                                         ? r + " hung: " + f.cause
                  : f.kind == Kind::kSignaled && f.cause.rfind("killed by", 0) == 0 ? r + " " + f.cause
                                                                                : r + " failed: " + f.cause;
  }
  const auto stopped = std::count_if(res.ranks.begin(), res.ranks.end(),
                                     [](const RankOutcome& o) { return o.kind == Kind::kStopped; });
  if (stopped > 0 && !interrupted) {
    res.summary += " (" + std::to_string(stopped) + " of " + std::to_string(spec.procs) + " ranks stopped)";
  }
  return res;
}

void write_heartbeat(const std::string& run_dir, int rank, int step, int total, const std::string& what) {
  if (run_dir.empty()) return;
  std::string w = what;
  std::replace(w.begin(), w.end(), '\n', ' ');
  // Note [Cheap heartbeats]: workers beat several times a step, so a beat is
  // one pwrite of a fixed 96-byte record (space-padded) over the start of a
  // file kept open, not a temporary file and a rename (which cost a
  // pipeline step milliseconds on this VM). A record never crosses a page,
  // so the launcher reads either the old line or the new one.
  static std::mutex mutex;
  static std::map<std::string, int> fds;
  const std::string path = rank_file(run_dir, rank, "heartbeat");
  std::string line = std::to_string(step) + " " + std::to_string(total) + " " + w;
  line.resize(95, ' ');
  line += "\n";
  std::lock_guard<std::mutex> lock(mutex);
  auto it = fds.find(path);
  if (it == fds.end()) {
    const int fd = ::open(path.c_str(), O_WRONLY | O_CREAT | O_CLOEXEC, 0644);
    if (fd < 0) return;  // a lost beat must not kill a worker
    it = fds.emplace(path, fd).first;
  }
  if (::pwrite(it->second, line.data(), line.size(), 0) < 0) {
    // As above: the launcher will call the rank hung if beats never land.
  }
}

void write_rank_error(const std::string& run_dir, int rank, const std::string& cause) {
  if (run_dir.empty()) return;
  try {
    write_small_atomic(rank_file(run_dir, rank, "error"), first_line(cause) + "\n");
  } catch (...) {
    // Called while a worker is already failing: the exit status still tells.
  }
}

}  // namespace dtsim::runtime
