// The calibration driver: runs each measurement program as a child process,
// reads its tab-separated records line by line, shows progress with an ETA,
// then fits and writes the profile atomically.
#include <algorithm>
#include <cerrno>
#include <cmath>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <ctime>
#include <filesystem>
#include <fstream>
#include <map>
#include <optional>
#include <set>
#include <sstream>
#include <tuple>

#include <fcntl.h>
#include <poll.h>
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <fmt/format.h>

#include "dtsim/calibrate/calibrate.hpp"
#include "dtsim/platform/child.hpp"
#include "dtsim/sim/cost_profile.hpp"
#include "dtsim/sim/error.hpp"
#include "dtsim/sim/json_writer.hpp"

#ifndef DTSIM_CALIBRATE_BIN_DIR
#define DTSIM_CALIBRATE_BIN_DIR ""
#endif

namespace dtsim::calib {
namespace {

using Clock = std::chrono::steady_clock;

std::string clock_text(double s) {
  if (!(s >= 0) || s > 360000) return "--:--";
  const int t = static_cast<int>(s + 0.5);
  char buf[32];
  std::snprintf(buf, sizeof buf, "%d:%02d", t / 60, t % 60);
  return buf;
}

/// A progress line on a terminal (rewritten in place), or a plain line every
/// ~10% when stderr is a file or pipe (CI logs stay short).
class ProgressView {
 public:
  ProgressView() : tty_(::isatty(2) != 0) {}
  void phase(int index, int count, const std::string& name) {
    index_ = index;
    count_ = count;
    name_ = name;
    start_ = Clock::now();
    last_decile_ = -1;
  }
  void update(const Progress& p) {
    const double elapsed = std::chrono::duration<double>(Clock::now() - start_).count();
    const double eta = p.done > 0 ? elapsed / p.done * (p.total - p.done) : -1;
    const int pct = p.total > 0 ? 100 * p.done / p.total : 0;
    char head[160];
    std::snprintf(head, sizeof head, "calibrate [%d/%d %s] %3d%% %d/%d  elapsed %s  ETA %s  ", index_, count_, name_.c_str(), pct,
                  p.done, p.total, clock_text(elapsed).c_str(), clock_text(eta).c_str());
    std::string label = p.label.size() > 40 ? p.label.substr(0, 37) + "..." : p.label;
    if (tty_) {
      std::fprintf(stderr, "\r\033[K%s%s", head, label.c_str());
      std::fflush(stderr);
    } else if (pct / 10 != last_decile_) {
      last_decile_ = pct / 10;
      std::fprintf(stderr, "%s%s\n", head, label.c_str());
    }
  }
  /// Clears the progress line on a terminal (before an error line).
  void clear() {
    if (tty_) {
      std::fprintf(stderr, "\r\033[K");
      std::fflush(stderr);
    }
  }
  void done(const std::string& summary) {
    const double elapsed = std::chrono::duration<double>(Clock::now() - start_).count();
    if (tty_) std::fprintf(stderr, "\r\033[K");
    std::fprintf(stderr, "calibrate [%d/%d %s] done in %s: %s\n", index_, count_, name_.c_str(), clock_text(elapsed).c_str(),
                 summary.c_str());
  }

 private:
  bool tty_;
  int index_ = 0, count_ = 0, last_decile_ = -1;
  std::string name_;
  Clock::time_point start_;
};

// Note [Stopping calibration]
// Calibration runs for minutes and starts programs that run as long: the
// measured dtsim_torch_bench, procs - 1 copies of it in lockstep (Note
// [Ranks share a CPU]) with a temporary folder for their barriers, then the
// collective benchmark and its ranks. Stopping `dtsim calibrate` must stop
// them all and leave nothing behind, so the driver supervises them as
// validate's launcher supervises its ranks, with the same mechanism
// (platform/child.hpp): each program leads a process group of its own and
// dies with the driver (Note [Children die with their parent]); SIGINT and
// SIGTERM are recorded (Note [Stop signals]) and checked at least every
// kPollMs while a program runs; then every group still running is stopped
// (Note [Stopping a process group]), the temporary folder removed, and
// calibrate() throws InterruptedError: "dtsim: calibrate: interrupted by
// SIGTERM: ...; nothing was written to OUT", exit status 2 like every other
// error (calibrate/README.md). So does any other error (a malformed record,
// a program that fails): the Supervisor's destructor stops the rest.
// A driver killed by SIGKILL cannot clean up: its programs die with it, but
// the temporary folder (a few empty barrier files) stays in $TMPDIR.
constexpr int kPollMs = 100;
constexpr double kGraceS = 2.0;  // SIGTERM -> SIGKILL, as validate's launcher

/// The programs calibration started, and its temporary folder: Note [Stopping calibration].
class Supervisor {
 public:
  /// `out`: the profile path, for the message; `view`: cleared before it.
  Supervisor(const std::string& out, ProgressView& view) : out_(out), view_(view) {}
  ~Supervisor() { stop(); }
  Supervisor(const Supervisor&) = delete;
  Supervisor& operator=(const Supervisor&) = delete;

  /// Starts a program (platform::spawn_child); throws CalibrationError.
  pid_t start(platform::ChildSpec spec) {
    const pid_t pid = platform::spawn_child(spec);
    if (pid < 0) throw CalibrationError("calibrate: cannot start " + spec.argv.front() + ": " + std::strerror(errno));
    pids_.push_back(pid);
    return pid;
  }

  /// A folder under $TMPDIR that stop() removes.
  const std::string& temp_dir() {
    if (temp_dir_.empty()) {
      std::string tmpl = (std::filesystem::temp_directory_path() / "dtsim-calibrate-XXXXXX").string();
      if (::mkdtemp(tmpl.data()) == nullptr) {
        throw CalibrationError("calibrate: cannot create a temporary directory " + tmpl + ": " + std::strerror(errno));
      }
      temp_dir_ = tmpl;
    }
    return temp_dir_;
  }

  /// Whether `pid` has ended, reaping it; its wait status in `status`.
  bool ended(pid_t pid, int* status) {
    const pid_t r = ::waitpid(pid, status, WNOHANG);
    if (r != pid && !(r < 0 && errno == ECHILD)) return false;
    pids_.erase(std::remove(pids_.begin(), pids_.end(), pid), pids_.end());
    return true;
  }

  /// Stops `pid`'s group at once (SIGKILL after no grace) and reaps it.
  void stop_now(pid_t pid) {
    platform::stop_groups({pid}, 0);
    pids_.erase(std::remove(pids_.begin(), pids_.end(), pid), pids_.end());
  }

  /// Throws InterruptedError, after stop(), once SIGINT or SIGTERM came.
  void check_interrupted() {
    const int sig = platform::StopSignals::received();
    if (sig == 0) return;
    stop();
    view_.clear();
    throw InterruptedError(sig, "calibrate: interrupted by " + platform::signal_name(sig) +
                                    ": the measurement programs were stopped and their temporary files removed; nothing "
                                    "was written to " + out_ + " (run dtsim calibrate again to measure)");
  }

  /// Every program still running stopped, its group too; the temporary folder removed.
  void stop() {
    platform::stop_groups(pids_, kGraceS);
    pids_.clear();
    if (!temp_dir_.empty()) {
      std::error_code ec;
      std::filesystem::remove_all(temp_dir_, ec);
      temp_dir_.clear();
    }
  }

 private:
  std::string out_;
  ProgressView& view_;
  platform::StopSignals signals_;  // Note [Stop signals]
  std::vector<pid_t> pids_;        // started, not yet reaped
  std::string temp_dir_;
};

// Note [A calibration cut short]
// A lent GPU, a queue's allocation or a spot instance gives a calibration
// minutes it may outrun: the newer families' layers took 27 minutes on an
// H100 whose lease was 15 (docs/validation-gpu.md), and a calibration
// stopped by a signal writes nothing (Note [Stopping calibration]).
// `--time-limit S` stops the measuring program once S seconds have passed
// since calibration began and keeps every record it had printed: the
// remaining phases are skipped, and the profile says it was cut
// (info "cut": what was and was not measured). On a GPU, and in a CPU's
// --quick sweep, the sweep is one pass and each layer's record is printed
// as it is measured, so the layers done are kept; a full CPU sweep's layer
// record waits for its third pass (Note [Sweep passes]), so a cut during
// it keeps none of them. A program that had already ended when the time
// came (a crash) is reported as the failure it is, not as a cut. The
// layers of a cut profile join a complete one of the same device with
// `dtsim profile import-layers CUT.h5 --into FULL.h5`, whose kernels,
// collectives and memory records price everything else.

/// Runs `argv` with its stdout read here, line by line, as records of `source`
/// (its stderr stays the user's); returns its exit status (128 + N for signal N).
/// Past `deadline` (if any) the program is stopped, `*cut` set and 0
/// returned (Note [A calibration cut short]).
int run_program(Supervisor& sup, const std::vector<std::string>& argv, const std::string& source, sim::Profile& p,
                ProgressView& view, std::optional<Clock::time_point> deadline = std::nullopt, bool* cut = nullptr) {
  int fds[2];
  if (::pipe2(fds, O_CLOEXEC) != 0) throw CalibrationError(std::string("calibrate: cannot make a pipe: ") + std::strerror(errno));
  platform::ChildSpec spec;
  spec.argv = argv;
  spec.stdout_fd = fds[1];
  pid_t pid = -1;
  try {
    pid = sup.start(spec);
  } catch (...) {
    ::close(fds[0]);
    ::close(fds[1]);
    throw;
  }
  ::close(fds[1]);
  struct Closer {
    int fd;
    ~Closer() { ::close(fd); }
  } closer{fds[0]};
  std::string pending;
  char buf[4096];
  int status = 0;
  bool reaped = false;  // it had ended by itself when the deadline came
  for (;;) {
    sup.check_interrupted();
    if (deadline && cut != nullptr && !*cut && !reaped && Clock::now() >= *deadline) {
      // A program that already ended (a crash, a failure) keeps its status:
      // that is not a cut.
      reaped = sup.ended(pid, &status);
      if (!reaped) {
        sup.stop_now(pid);  // its stdout closes: what it printed is read to the end below
        *cut = true;
      }
    }
    pollfd pfd{fds[0], POLLIN, 0};
    const int ready = ::poll(&pfd, 1, kPollMs);  // EINTR on a stop signal: checked above at once
    if (ready <= 0) continue;
    const ssize_t n = ::read(fds[0], buf, sizeof buf);
    if (n < 0 && (errno == EINTR || errno == EAGAIN)) continue;
    if (n <= 0) break;  // end of output: the program ended or closed its stdout
    pending.append(buf, static_cast<std::size_t>(n));
    for (std::size_t nl; (nl = pending.find('\n')) != std::string::npos; pending.erase(0, nl + 1)) {
      Progress prog;
      if (parse_bench_line(pending.substr(0, nl), source, p, &prog)) view.update(prog);
    }
  }
  if (cut != nullptr && *cut) return 0;  // stopped by us and reaped
  while (!reaped && !sup.ended(pid, &status)) {
    sup.check_interrupted();
    ::usleep(20000);
  }
  return WIFEXITED(status) ? WEXITSTATUS(status) : 128 + (WIFSIGNALED(status) ? WTERMSIG(status) : 0);
}

std::string find_program(const CalibrateOptions& o, const std::string& name) {
  namespace fs = std::filesystem;
  std::vector<std::string> dirs;
  if (!o.bin_dir.empty()) dirs.push_back(o.bin_dir);
  if (const char* env = std::getenv("DTSIM_CALIB_BIN_DIR")) dirs.emplace_back(env);
  std::error_code ec;
  // An installed dtsim's probes: <prefix>/libexec/dtsim (cmake/install.cmake).
  if (const fs::path exe = fs::read_symlink("/proc/self/exe", ec); !ec) {
    dirs.push_back((exe.parent_path() / ".." / "libexec" / "dtsim").lexically_normal().string());
  }
  dirs.emplace_back(DTSIM_CALIBRATE_BIN_DIR);
  for (const auto& d : dirs) {
    if (d.empty()) continue;
    const fs::path candidate = fs::path(d) / name;
    if (fs::is_regular_file(candidate, ec) && ::access(candidate.c_str(), X_OK) == 0) return candidate.string();
  }
  return "";
}

/// `name` as execve takes it: itself where it has a slash, else the first
/// executable of that name on PATH; "" where there is none.
std::string on_path(const std::string& name) {
  if (name.find('/') != std::string::npos) return ::access(name.c_str(), X_OK) == 0 ? name : "";
  const char* path = std::getenv("PATH");
  std::string dirs = path != nullptr ? path : "/usr/local/bin:/usr/bin:/bin";
  for (std::size_t start = 0; start <= dirs.size();) {
    std::size_t end = dirs.find(':', start);
    if (end == std::string::npos) end = dirs.size();
    const std::string dir = dirs.substr(start, end - start);
    const std::string candidate = (dir.empty() ? std::string(".") : dir) + "/" + name;
    if (!name.empty() && ::access(candidate.c_str(), X_OK) == 0) return candidate;
    start = end + 1;
  }
  return "";
}

/// Starts `argv` as a copy beside the measured program: its stdout into
/// `out` (created), its stderr dropped. Throws CalibrationError naming
/// `out` where it cannot be created.
pid_t start_copy(Supervisor& sup, const std::vector<std::string>& argv, const std::string& out_path) {
  const int out = ::open(out_path.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0600);
  const int null = ::open("/dev/null", O_WRONLY | O_CLOEXEC);
  if (out < 0 || null < 0) {
    const std::string why = std::strerror(errno);
    if (out >= 0) ::close(out);
    if (null >= 0) ::close(null);
    throw CalibrationError("calibrate: cannot create " + out_path + ": " + why);
  }
  platform::ChildSpec copy;
  copy.argv = argv;
  copy.stdout_fd = out;
  copy.stderr_fd = null;
  pid_t pid = -1;
  try {
    pid = sup.start(copy);
  } catch (...) {
    ::close(out);
    ::close(null);
    throw;
  }
  ::close(out);
  ::close(null);
  return pid;
}

std::string now_iso() {
  const std::time_t t = std::time(nullptr);
  char buf[64];
  std::strftime(buf, sizeof buf, "%Y-%m-%dT%H:%M:%SZ", std::gmtime(&t));
  return buf;
}

std::string join(const std::vector<std::string>& v, const char* sep) {
  std::string out;
  for (const auto& s : v) out += (out.empty() ? "" : sep) + s;
  return out;
}

}  // namespace

// Note [Check the output first]: a profile is written at the end, minutes
// after the measuring started; finding then that it cannot be written threw
// the measurements away. So the place is checked before anything runs: the
// directory exists, is a directory and takes a new file (one is created and
// removed, which also catches a read-only file system and a user who is not
// allowed in, which permission bits alone would not tell for root), and the
// path itself is not a directory (the final rename would fail).
void check_output(const std::string& out) {
  namespace fs = std::filesystem;
  const fs::path target(out);
  const fs::path dir = target.has_parent_path() ? target.parent_path() : fs::path(".");
  std::error_code ec;
  const auto dir_status = fs::status(dir, ec);
  if (!fs::exists(dir_status)) {
    throw IoError(out + ": cannot write: directory '" + dir.string() + "' does not exist; create it first or choose another --out");
  }
  if (!fs::is_directory(dir_status)) {
    throw IoError(out + ": cannot write: '" + dir.string() + "' is not a directory; choose another --out");
  }
  if (fs::is_directory(fs::status(target, ec))) {
    throw IoError(out + ": cannot write: it is a directory; name a file in it, e.g. --out " + (target / "profile.h5").string());
  }
  std::string probe = (dir / ".dtsim-calibrate-probe-XXXXXX").string();
  const int fd = ::mkstemp(probe.data());
  if (fd < 0) {
    throw IoError(out + ": cannot write: directory '" + dir.string() + "' does not take new files (" + std::strerror(errno) +
                  "); choose a writable directory for --out");
  }
  ::close(fd);
  ::unlink(probe.c_str());
}

sim::Profile calibrate(const CalibrateOptions& o) {
  if (o.device != "cpu" && o.device != "cuda") throw ConfigError("--device: '" + o.device + "' is not one of cpu, cuda");
  if (o.procs < 1 || o.procs > 64) throw ConfigError("--procs: " + std::to_string(o.procs) + " is not in 1..64");
  if (o.threads < 0 || o.threads > 1024) throw ConfigError("--threads: " + std::to_string(o.threads) + " is not in 0..1024");
  if (o.out.empty()) throw ConfigError("--out: a profile path is required (e.g. --out configs/profiles/local-cpu.h5)");
  if (!(o.time_limit_s >= 0) || o.time_limit_s > 30 * 86400.0) {
    throw ConfigError("--time-limit: " + std::to_string(o.time_limit_s) + " s is not in 0..2592000 (30 days; 0: no limit)");
  }
  check_output(o.out);  // Note [Check the output first]
  const std::string torch_bench = find_program(o, "dtsim_torch_bench");
  if (torch_bench.empty()) {
    throw CalibrationError("calibrate: dtsim_torch_bench was not built (LibTorch was not found at configure time); run scripts/setup, then scripts/build");
  }
  const bool cuda = o.device == "cuda";
  // On CPUs the collectives as the validation runtime issues them (Note
  // [c10d collectives] in src/gloo_bench.cpp), plain libgloo where LibTorch
  // was not found.
  std::string comm_bench = find_program(o, cuda ? "dtsim_nccl_bench" : "dtsim_c10d_bench");
  if (!cuda && comm_bench.empty()) comm_bench = find_program(o, "dtsim_gloo_bench");

  sim::Profile p;
  p.info["device_kind"] = o.device;
  p.info["created"] = now_iso();
  p.info["command"] = o.command_line;
  p.info["sweep"] = o.quick ? "quick" : "full";
  p.info["procs"] = std::to_string(o.procs);
  {
    char host[256] = {0};
    ::gethostname(host, sizeof host - 1);
    p.info["host"] = host;
  }

  ProgressView view;
  const int phases = cuda ? 4 : 3;
  // Note [A calibration cut short]
  std::optional<Clock::time_point> deadline;
  if (o.time_limit_s > 0) deadline = Clock::now() + std::chrono::duration_cast<Clock::duration>(std::chrono::duration<double>(o.time_limit_s));
  bool cut = false;
  // The profile's "cut" line: where the limit came, what was measured by then.
  const auto cut_info = [&](const std::string& where, const std::string& measured, const std::string& rest) {
    p.info["cut"] = "--time-limit " + fmt::format("{:g}", o.time_limit_s) + " s reached " + where + ": " + measured + " measured, " + rest;
  };
  const std::string comm_name = cuda ? "collectives and copies" : "collectives";
  // 1. Layers and kernels (LibTorch).
  std::vector<std::string> argv{torch_bench, "--device", o.device};
  if (o.quick) argv.push_back("--quick");
  if (!cuda && o.threads > 0) {
    argv.push_back("--threads");
    argv.push_back(std::to_string(o.threads));
  }
  if (!o.models.empty()) {
    argv.push_back("--models");
    argv.push_back(join(o.models, ","));
  }
  // Tensor-parallel shares for every power-of-two group the ranks can form:
  // a tp=2 block is not half a tp=1 block on small GEMMs.
  std::vector<std::string> tps;
  for (int tp = 2; tp <= o.procs; tp *= 2) tps.push_back(std::to_string(tp));
  if (!tps.empty()) {
    argv.push_back("--tp");
    argv.push_back(join(tps, ","));
    // And the context-parallel shares of the Llama and GPT blocks (models
    // without a cp split are skipped by dtsim_torch_bench).
    argv.push_back("--cp");
    argv.push_back(join(tps, ","));
  }
  view.phase(1, phases, "layers and kernels");
  // Note [Ranks share a CPU]: on a CPU, `procs` ranks share the host's cores,
  // caches and memory bandwidth, and each runs slower than it would alone
  // (on this 2-core VM by an amount that moves between runs: the same
  // gpt2-tiny block timed 8.7 ms in one calibration, 6.3 ms in another).
  // So the layers are timed
  // while procs - 1 copies of the benchmark run the same sweep beside the
  // measured one, point for point (Note [Copies in lockstep] in
  // torch_bench.cpp), as the other ranks of a data-parallel job would. The
  // copies' own timings are kept too, and each point takes the slowest
  // copy's (Note [The slowest rank sets the pace] in calibrate.hpp): on this
  // VM the two ranks often run 30% apart, and a step waits for the slower.
  // Note [Stopping calibration]: every program below is the supervisor's.
  Supervisor sup(o.out, view);
  std::vector<pid_t> load;
  std::vector<std::string> load_out;
  std::string load_dir;
  if (!cuda && o.procs > 1) {
    load_dir = sup.temp_dir();
    for (int i = 1; i < o.procs; ++i) {
      load_out.push_back(load_dir + "/rank-" + std::to_string(i) + ".out");
      // Note [Copies in lockstep] (torch_bench.cpp): every point starts together.
      std::vector<std::string> copy = argv;
      copy.push_back("--lockstep");
      copy.push_back(load_dir + "," + std::to_string(i) + "," + std::to_string(o.procs));
      load.push_back(start_copy(sup, copy, load_out.back()));
    }
    argv.push_back("--lockstep");
    argv.push_back(load_dir + ",0," + std::to_string(o.procs));
    p.info["layers_measured_with"] = std::to_string(o.procs) + " concurrent ranks, in lockstep";
  }
  const auto measured_from = Clock::now();
  int rc = run_program(sup, argv, "torch", p, view, deadline, &cut);
  // The copies ran the same sweep and end about when the measured one does:
  // they get a tenth of its time more to finish, then stop.
  const double elapsed = std::chrono::duration<double>(Clock::now() - measured_from).count();
  const auto grace_until = Clock::now() + std::chrono::duration<double>(rc == 0 && !cut ? std::max(5.0, 0.1 * elapsed) : 0.0);
  for (const pid_t pid : load) {
    int status = 0;
    while (!sup.ended(pid, &status)) {
      sup.check_interrupted();
      if (Clock::now() > grace_until) {
        sup.stop_now(pid);
        break;
      }
      ::usleep(20000);
    }
  }
  int slower = 0;
  std::string ratios;
  bool unequal = false;
  for (const auto& path : load_out) {
    sim::Profile copy;
    std::ifstream in(path);
    for (std::string line; std::getline(in, line);) {
      if (in.eof()) break;  // no newline: a copy stopped mid-line
      try {
        parse_bench_line(line, "torch", copy, nullptr);
      } catch (const Error&) {
        // A malformed line of a copy only loses that point's second opinion.
      }
    }
    // Note [The slowest rank sets the pace]: a copy far slower or faster
    // than the measured one everywhere is not the spread of a step but a
    // core that was busy with something else for minutes.
    const double ratio = median_time_ratio(p, copy);
    if (ratio > 0) {
      char text[32];
      std::snprintf(text, sizeof text, "%.2f", ratio);
      ratios += (ratios.empty() ? "" : ", ") + std::string(text);
      unequal = unequal || ratio > 1.15 || ratio < 1 / 1.15;
    }
    slower += keep_slowest(p, copy);
  }
  if (!ratios.empty()) p.info["layers_copy_time_ratio"] = ratios;
  if (unequal) {
    std::fprintf(stderr,
                 "calibrate: warning: the concurrent copies timed the same layers %s times the measured copy's (median): the "
                 "cores were not equally free; the profile keeps the slower times, which a quieter machine would not see\n",
                 ratios.c_str());
  }
  if (!load_dir.empty()) {
    sup.stop();  // removes the copies' folder
    p.info["layers_slower_rank"] = std::to_string(slower) + " points took another rank's slower time";
  }
  if (rc != 0 && !cut) throw CalibrationError("calibrate: " + torch_bench + " failed (exit status " + std::to_string(rc) + "); its message is above");
  const std::string measured = std::to_string(p.layers.size()) + " layer shapes, " + std::to_string(p.kernels.size()) + " kernel sizes";
  view.done(cut ? "cut by --time-limit: " + measured + " measured" : measured);
  if (cut) cut_info("during the layers and kernels", measured, "the rest of that phase and the " + comm_name + " not");

  // 2. Collectives (and copies on GPUs).
  view.phase(2, phases, cuda ? "NCCL collectives and copies" : "Gloo collectives");
  if (!cut && deadline && Clock::now() >= *deadline) {  // between the phases: the next is not started
    cut = true;
    cut_info("after the layers and kernels", measured, "the " + comm_name + " not");
  }
  if (cut) {
    view.done("skipped: --time-limit reached");
    p.info["comm"] = "not measured";
  } else if (comm_bench.empty()) {
    view.done(std::string("skipped: ") + (cuda ? "dtsim_nccl_bench" : "dtsim_gloo_bench") +
              " was not built (" + (cuda ? "CUDA toolkit or NCCL" : "libgloo-dev") + " missing at configure time)");
    p.info["comm"] = "not measured";
  } else if (!cuda && o.procs < 2) {
    view.done("skipped: --procs 1 has no collectives to measure");
    p.info["comm"] = "not measured";
  } else {
    std::vector<std::string> cargv{comm_bench};
    if (cuda) {
      if (o.procs > 1) {
        cargv.push_back("--gpus");
        cargv.push_back(std::to_string(o.procs));
      }
    } else {
      cargv.push_back("--procs");
      cargv.push_back(std::to_string(o.procs));
    }
    if (o.quick) cargv.push_back("--quick");
    rc = run_program(sup, cargv, cuda ? "nccl" : "gloo", p, view, deadline, &cut);
    if (cut) {
      const std::string got = std::to_string(p.comm.size()) + " collective sizes, " + std::to_string(p.copies.size()) + " copies";
      view.done("cut by --time-limit: " + got + " measured");
      cut_info("during the " + comm_name, got, "the rest not");
    } else if (cuda && rc == 3) {
      view.done("skipped: no CUDA device");
    } else if (rc != 0) {
      throw CalibrationError("calibrate: " + comm_bench + " failed (exit status " + std::to_string(rc) + "); its message is above");
    } else {
      view.done(std::to_string(p.comm.size()) + " collective sizes, " + std::to_string(p.copies.size()) + " copies");
    }
  }
  // 3. Note [Python host probe]
  // What a Python training loop's host adds to dtsim's C++ loop (Note
  // [Python host cost] in sim/src/cost/cost_python.cpp): the probe, a
  // Python script beside the measurement programs, times from Python the
  // tiny forward and optimizer steps `dtsim_torch_bench --host-probe` times
  // from C++ (kernels host_ops, host_step), in rounds with it (Note [Probe
  // and loop interleaved]), with its intra-op threads, and on a CPU each
  // beside procs - 1 copies of itself (its own time, not the slower
  // copy's). It needs only a Python that imports torch (Debian's
  // python3-torch); where there is none, or the probe fails, the phase is
  // skipped saying why (the profile keeps everything else), and a plan
  // with `runtime: python` is priced as the C++ loop with a warning.
  // 3 (GPUs). Compute beside collectives (Note [Measuring interference] in
  // interference_bench.cpp; Note [Interference fit] in fit.cpp). Optional:
  // a failure here costs the profile these fits, not the calibration.
  if (cuda) {
    view.phase(3, phases, "compute beside collectives");
    const std::string interference_bench = find_program(o, "dtsim_interference_bench");
    if (!cut && deadline && Clock::now() >= *deadline) cut = true;
    if (cut) {
      view.done("skipped: --time-limit reached");
      p.info["interference"] = "not measured: --time-limit reached";
    } else if (interference_bench.empty()) {
      view.done("skipped: dtsim_interference_bench was not built (CUDA toolkit, cuBLAS or NVRTC missing at configure time)");
      p.info["interference"] = "not measured: no dtsim_interference_bench";
    } else {
      std::vector<std::string> iargv{interference_bench};
      if (o.quick) iargv.push_back("--quick");
      const std::size_t before = p.interference.size();
      std::string refused;
      try {
        rc = run_program(sup, iargv, "interference", p, view, deadline, &cut);
      } catch (const CalibrationError& e) {  // a record the parser refused: the sweep is not kept
        p.interference.resize(before);
        refused = e.what();
        rc = -1;
      }
      const std::string got = std::to_string(p.interference.size() - before) + " settings";
      if (!refused.empty()) {
        view.done("failed: " + refused + "; the priors stand");
        p.info["interference"] = "failed: " + refused;
      } else if (cut) {
        view.done("cut by --time-limit: " + got + " measured");
      } else if (rc == 3) {
        view.done("skipped: no CUDA device");
        p.info["interference"] = "not measured: no CUDA device";
      } else if (rc != 0) {
        view.done("failed (exit status " + std::to_string(rc) + "; its message is above): " + got + " kept; the priors stand");
        p.info["interference"] = "failed: exit status " + std::to_string(rc);
      } else {
        view.done(got);
      }
    }
  }
  view.phase(cuda ? 4 : 3, phases, "Python host cost");
  std::string python = o.python == "none" ? "" : on_path(o.python);
  const std::string probe = find_program(o, "dtsim_python_probe.py");
  if (!cut && deadline && Clock::now() >= *deadline) cut = true;
  if (cut) {
    view.done("skipped: --time-limit reached");
    p.info["python"] = "not measured: --time-limit reached";
  } else if (o.python == "none") {
    view.done("skipped: --python none");
    p.info["python"] = "not measured: --python none";
  } else if (python.empty()) {
    view.done("skipped: no '" + o.python + "' to run (--python names another)");
    p.info["python"] = "not measured: no " + o.python;
  } else if (probe.empty()) {
    view.done("skipped: dtsim_python_probe.py is not beside the measurement programs");
    p.info["python"] = "not measured: no dtsim_python_probe.py";
  } else {
    // Note [Probe and loop interleaved]
    // The Python loop's host cost is the difference between two loops'
    // times (Note [Python host cost] in sim/src/cost/cost_python.cpp),
    // some 1.6x apart on the CI machine (the probe's forward 338 us against
    // the C++ loop's 216). The C++ side had been timed in the layer sweep
    // and the Python side minutes later; on a machine whose speed moves
    // between levels for minutes at a time (Note [A pass at the machine's
    // usual speed] in torch_bench.cpp) one CI calibration timed the Python
    // loop no slower than the C++ one, and its profile priced `runtime:
    // python` at nothing. So the two are timed here, in kProbeRounds
    // rounds in the order P C, C P, P C (a drift over the phase slows each
    // side alike), each run beside procs - 1 copies of itself (on a CPU),
    // and each point's time is the median of its rounds' medians
    // (pool_rounds): one round that meets a slow spell on one side does
    // not decide the difference.
    constexpr int kProbeRounds = 3;
    std::string failed;     // why the probe's records are not to be used
    std::string failed_by;  // the program whose run that was
    sim::Profile probed;    // the last run's records
    const auto run_side = [&](const std::vector<std::string>& pargv, const std::string& source, const std::string& what) {
      failed_by = pargv.size() > 1 ? pargv[0] + " " + pargv[1] : pargv.front();
      std::vector<pid_t> copies;
      if (!cuda) {
        for (int i = 1; i < o.procs; ++i) copies.push_back(start_copy(sup, pargv, "/dev/null"));
      }
      failed.clear();
      probed = sim::Profile();
      try {
        rc = run_program(sup, pargv, source, probed, view, deadline, &cut);
        if (rc != 0) failed = what + " failed (exit status " + std::to_string(rc) + "; its message is above)";
      } catch (const InterruptedError&) {
        for (const pid_t pid : copies) sup.stop_now(pid);
        throw;
      } catch (const Error& e) {
        failed = what + "'s output: " + e.what();
      }
      for (const pid_t pid : copies) sup.stop_now(pid);
    };
    const auto python_argv = [&](const std::string& interpreter) {
      std::vector<std::string> pargv{interpreter, probe, "--device", o.device};
      if (!cuda) {
        pargv.push_back("--threads");
        pargv.push_back(std::to_string(o.threads));
      }
      if (o.quick) {
        pargv.push_back("--budget");
        pargv.push_back("0.05");  // dtsim_torch_bench's quick kernel budget
      }
      return pargv;
    };
    std::vector<std::string> host_argv{torch_bench, "--device", o.device, "--host-probe"};
    if (!cuda && o.threads > 0) {
      host_argv.push_back("--threads");
      host_argv.push_back(std::to_string(o.threads));
    }
    if (o.quick) host_argv.push_back("--quick");
    run_side(python_argv(python), "python", "the probe");
    // Note [Debian's Python] The default `python3` is the first on PATH,
    // which may be a pyenv, conda or venv Python without torch while
    // Debian's python3-torch sits beside /usr/bin/python3 (it did on the
    // machine the shipped CPU profiles were made on). Where --python was
    // not given and the first cannot import torch, /usr/bin/python3 is
    // tried before the phase is skipped.
    const auto torch_missing = [&] {
      const auto it = probed.info.find("python.skipped");
      return it != probed.info.end() && it->second.find("torch cannot be imported") != std::string::npos;
    };
    if (o.python_fallback && failed.empty() && !cut && torch_missing()) {
      const std::string debian = "/usr/bin/python3";
      std::error_code ec1, ec2;
      const auto a = std::filesystem::canonical(python, ec1), b = std::filesystem::canonical(debian, ec2);
      if (!ec2 && (ec1 || a != b) && ::access(debian.c_str(), X_OK) == 0) {
        const sim::Profile first = probed;
        run_side(python_argv(debian), "python", "the probe");
        if (failed.empty() && !cut && !torch_missing()) {
          python = debian;
        } else {  // the first one's reason stands
          failed.clear();
          probed = first;
        }
      }
    }
    // The rounds, where the first probe timed its loop.
    const bool timed = failed.empty() && !cut && probed.info.count("python.skipped") == 0;
    std::vector<sim::Profile> python_runs, host_runs;
    std::string short_by;  // why the rounds stopped short, where they did after a run of each side
    if (timed) {
      const sim::Profile first = probed;
      python_runs.push_back(first);
      // P (above) C, C P, P C.
      static_assert(kProbeRounds == 3, "the order below is three rounds'");
      for (const bool host : {true, true, false, false, true}) {
        if (host) {
          run_side(host_argv, "torch", "dtsim_torch_bench --host-probe");
        } else {
          run_side(python_argv(python), "python", "the probe");
        }
        if (!failed.empty() || cut) break;
        (host ? host_runs : python_runs).push_back(probed);
      }
      probed = first;  // its info: the interpreter's and torch's versions
      // A later run that fails or meets --time-limit leaves the rounds
      // done, once each side has timed its loop: they are a difference
      // taken in the same minutes, as the three would have been.
      if ((!failed.empty() || cut) && !host_runs.empty()) {
        short_by = cut ? "--time-limit reached" : failed_by + ": " + failed;
        if (const auto at = short_by.find("; its message is above"); at != std::string::npos) short_by.erase(at, 22);
        failed.clear();
      }
    }
    // Its records join the profile only whole: a run of each side.
    if (failed.empty() && (!cut || !short_by.empty())) {
      for (const auto& [key, value] : probed.info) {
        if (key.rfind("python.", 0) == 0) p.info[key] = value;
      }
      if (timed) {
        std::erase_if(p.kernels, [](const sim::KernelSample& k) {
          return k.kind == "python_ops" || k.kind == "python_step" || k.kind == "host_ops" || k.kind == "host_step";
        });
        for (const auto* runs : {&python_runs, &host_runs}) {
          for (const sim::KernelSample& k : pool_rounds(*runs)) p.kernels.push_back(k);
        }
        p.info["python.rounds"] = std::to_string(python_runs.size()) + " Python, " + std::to_string(host_runs.size()) +
                                  " C++, interleaved (Note [Probe and loop interleaved])" +
                                  (short_by.empty() ? "" : "; stopped short: " + short_by);
      }
    }
    const auto skipped = p.info.find("python.skipped");
    if (cut && short_by.empty()) {
      view.done("cut by --time-limit");
      p.info["python"] = "not measured: --time-limit reached";
    } else if (!failed.empty()) {
      std::fprintf(stderr, "calibrate: warning: %s: %s; the profile has no Python host cost (--python none skips it)\n",
                   failed_by.c_str(), failed.c_str());
      view.done("skipped: " + failed);
      p.info["python"] = "not measured: " + failed;
    } else if (const auto cost = sim::python_host_cost(p)) {
      if (!short_by.empty()) {
        std::fprintf(stderr, "calibrate: warning: the Python host cost's rounds stopped short (%s): it is priced from the %zu Python and %zu C++ runs done\n",
                     short_by.c_str(), python_runs.size(), host_runs.size());
      }
      if (!(cost->per_op_s > 0)) {
        std::fprintf(stderr,
                     "calibrate: warning: the Python loop's ops timed no slower than the C++ loop's over %d interleaved rounds: "
                     "this machine's noise exceeds their difference, and plans with runtime: python pay no host cost an op; "
                     "calibrate again on a quieter machine\n",
                     kProbeRounds);
      }
      view.done(fmt::format("Python {}, torch {}: {:.1f} us an op, {:.1f} us a tensor's step beyond the C++ loop's",
                            p.info["python.python"], p.info["python.torch"], cost->per_op_s * 1e6, cost->per_tensor_s * 1e6));
      p.info["python"] = python;
    } else {
      std::string why = skipped != p.info.end() ? skipped->second : "nothing timed";
      if (why.rfind("python\t", 0) == 0) why.erase(0, 7);  // the skip record's own name
      view.done("skipped: " + why);
      p.info["python"] = "not measured: " + why;
    }
  }
  if (const auto it = p.info.find("torch.device"); it != p.info.end()) p.info["device"] = it->second;
  sup.check_interrupted();  // a stop signal between two programs
  fit_profile(p);
  sup.check_interrupted();
  sim::save_profile(p, o.out);
  p.path = o.out;
  // Note [A steady calibration] (sim/src/cost/cost_profile.cpp).
  if (const std::string w = sim::profile_speed_warning(p); !w.empty()) std::fprintf(stderr, "calibrate: warning: %s\n", w.c_str());
  return p;
}

// ---- profile show --------------------------------------------------------------

namespace {

std::string human_s(double s) {
  if (s >= 1) return fmt::format("{:.3g} s", s);
  if (s >= 1e-3) return fmt::format("{:.3g} ms", s * 1e3);
  if (s >= 1e-6) return fmt::format("{:.3g} us", s * 1e6);
  return fmt::format("{:.3g} ns", s * 1e9);
}

using dtsim::human_bytes;

/// Of a kernel fit "kernel.<kind>.<precision>", the largest share of a
/// measured sample's time each feature's term accounts for (empty for other
/// fits): a term under a tenth of every sample's time is not what the
/// samples measured.
std::map<std::string, double> kernel_term_shares(const sim::Profile& p, const std::string& name, const sim::LinearFit& f) {
  std::map<std::string, double> share;
  if (name.rfind("kernel.", 0) != 0) return share;
  for (const auto& k : p.kernels) {
    if (name != sim::kernel_fit_name(k.kind, k.precision) || k.time.median_s <= 0) continue;
    for (std::size_t i = 0; i < f.features.size(); ++i) {
      double x = 0;
      if (f.features[i] == "bytes") x = static_cast<double>(k.bytes);
      if (f.features[i] == "flops") x = k.flops;
      if (x <= 0) continue;
      share[f.features[i]] = std::max(share[f.features[i]], f.coef[i] * x / k.time.median_s);
    }
  }
  return share;
}

/// A fit's coefficients as physical figures: the intercept as a latency,
/// "bytes" as a bandwidth, "flops" as a throughput. A bandwidth or peak whose
/// term is under a tenth of every sample's time (`shares`) is not shown: a
/// GEMM fit's byte term near 0 gave "bandwidth 4.3e+04 GB/s" on an H100,
/// which says only that those GEMMs were bound by arithmetic.
std::string describe_fit(const sim::LinearFit& f, const std::map<std::string, double>& shares = {}) {
  auto minor = [&](const std::string& feature) {
    const auto it = shares.find(feature);
    return it != shares.end() && it->second < 0.1;
  };
  std::string out;
  for (std::size_t i = 0; i < f.features.size(); ++i) {
    const double c = f.coef[i];
    std::string part;
    if (f.features[i] == "1") {
      part = "latency " + human_s(c);
    } else if (f.features[i] == "bytes") {
      part = c <= 0 ? "bandwidth -" : minor("bytes") ? "bandwidth - (compute-bound)" : "bandwidth " + fmt::format("{:.3g} GB/s", 1e-9 / c);
    } else if (f.features[i] == "flops") {
      part = c <= 0 ? "peak -" : minor("flops") ? "peak - (memory-bound)" : "peak " + fmt::format("{:.3g} TFLOP/s", 1e-12 / c);
    } else if (f.features[i] == "tensors") {
      part = "per tensor " + human_s(c);
    } else if (f.features[i] == "params") {
      part = "per million parameters " + human_s(c * 1e6);
    } else if (f.features[i] == "prior") {  // Note [Interference fit]
      part = fmt::format("{:.2f}x the prior's slowdown by the SMs taken", c);
    } else if (f.features[i] == "hbm_share") {
      part = fmt::format("{:.2f}x the slowdown by the HBM share taken", c);
    } else {
      part = f.features[i] + " " + fmt::format("{:.3g} s", c);
    }
    out += (out.empty() ? "" : ", ") + part;
  }
  return out;
}

// Note [Layer interpolation error]
// A profile prices a layer at a micro-batch it did not measure by a
// straight line in b between the nearest measured ones at the same
// sequence length (Note [Profile lookups], step 2). How far to trust that
// line shows by leaving each measured b out in turn: every point with a
// measured neighbour on each side (same signature, precision and s) is
// priced from those two, forward and backward, and set against its own
// median. `profile show` lists the relative errors by layer kind (the
// signature before its ':'), so a kind calibration added (seed 003's
// convolutions, transposed convolutions, bags of words, encoder-decoders)
// shows how well its measurements price the shapes between them. The
// layers timed inside a step ("|in-step", "|loop") only scale the others.
struct InterpolationError {
  int points = 0;
  double rms = 0, max = 0;
};

std::map<std::string, InterpolationError> layer_interpolation_errors(const sim::Profile& p) {
  std::map<std::tuple<std::string, sim::Precision, std::int64_t>, std::map<std::int64_t, const sim::LayerSample*>> series;
  for (const auto& l : p.layers) {
    if (l.signature.find('|') != std::string::npos) continue;
    series[{l.signature, l.precision, l.seq_len}][l.micro_batch] = &l;
  }
  std::map<std::string, std::vector<double>> errors;
  for (const auto& [key, by_b] : series) {
    const std::string& sig = std::get<0>(key);
    const std::string kind = sig.substr(0, sig.find(':'));
    if (by_b.size() < 3) continue;
    for (auto it = std::next(by_b.begin()); std::next(it) != by_b.end(); ++it) {
      const auto lo = std::prev(it), hi = std::next(it);
      const double x = static_cast<double>(it->first), x0 = static_cast<double>(lo->first), x1 = static_cast<double>(hi->first);
      for (const auto part : {&sim::LayerSample::forward, &sim::LayerSample::backward}) {
        const double y = (it->second->*part).median_s, y0 = (lo->second->*part).median_s, y1 = (hi->second->*part).median_s;
        if (!(y > 0) || !(y0 > 0) || !(y1 > 0)) continue;
        const double guess = y0 + (y1 - y0) * (x - x0) / (x1 - x0);
        errors[kind].push_back((guess - y) / y);
      }
    }
  }
  std::map<std::string, InterpolationError> out;
  for (const auto& [kind, e] : errors) {
    InterpolationError r;
    r.points = static_cast<int>(e.size());
    double sum = 0;
    for (const double v : e) {
      sum += v * v;
      r.max = std::max(r.max, std::fabs(v));
    }
    r.rms = std::sqrt(sum / static_cast<double>(e.size()));
    out[kind] = r;
  }
  return out;
}

}  // namespace

std::string format_profile(const sim::Profile& p) {
  std::ostringstream os;
  os << "dtsim profile " << p.path << "\n";
  // Where the ranks ran and how they waited (Notes [A rank's own cores],
  // [Busy waits], [Gloo's event loop]): what validation must match.
  for (const char* key : {"device", "device_kind", "host", "created", "sweep", "cut", "procs", "torch.torch_version", "torch.threads",
                          "torch.cpus", "nccl.nccl_version", "gloo.api", "gloo.transport", "gloo.send_recv_impl", "gloo.cpus",
                          "gloo.collective_wait", "gloo.gloo_loop", "layers_measured_with", "layers_slower_rank",
                          "layers_copy_time_ratio", "command"}) {
    if (const auto it = p.info.find(key); it != p.info.end()) os << "  " << key << ": " << it->second << "\n";
  }
  // Note [Quick profiles] (sim/src/cost/cost_profile.cpp).
  if (const std::string w = sim::profile_sweep_warning(p); !w.empty()) os << "  trust: " << w << "\n";
  if (const std::string w = sim::profile_speed_warning(p); !w.empty()) os << "  trust: " << w << "\n";  // Note [A steady calibration]
  // What was imported from the user's cluster (calibrate/import.hpp).
  for (const auto& [key, value] : p.info) {
    if (key.rfind("import.", 0) == 0) os << "  " << key << ": " << value << "\n";
  }
  // Note [Machine probe] (models/torch/.../torch_layers.hpp).
  const auto sweep = p.info.find("torch.probe_s"), end = p.info.find("torch.probe_end_s");
  if (sweep != p.info.end()) {
    os << "  machine probe (one Bi-LSTM layer, b 4, s 32): " << human_s(std::atof(sweep->second.c_str())) << " during the layer sweep";
    // Note [The slowest copy's probe] (fit.cpp): each copy's, where several ran.
    if (const auto copies = p.info.find("torch.probe_copies_s"); copies != p.info.end()) {
      std::string each;
      std::stringstream list(copies->second);
      for (std::string one; std::getline(list, one, ',');) each += (each.empty() ? "" : ", ") + human_s(std::atof(one.c_str()));
      os << " (the slowest copy's; the copies' " << each << ")";
    }
    if (end != p.info.end()) os << ", " << human_s(std::atof(end->second.c_str())) << " at the end";
    os << "\n";
  }
  // Note [A pass at the machine's usual speed] (torch_bench.cpp).
  if (const auto it = p.info.find("torch.probe_points"); it != p.info.end()) os << "  probed points: " << it->second << "\n";
  // Note [Python host cost] (sim/src/cost/cost_python.cpp).
  if (const auto cost = sim::python_host_cost(p)) {
    const auto version = [&](const char* key) {
      const auto it = p.info.find(key);
      return it != p.info.end() ? it->second : std::string("?");
    };
    os << fmt::format("  python loop: {} (Python {}, torch {}): {:.1f} us an op, {:.1f} us a tensor's step beyond the C++ "
                      "loop's; plans with runtime: python pay them\n",
                      version("python"), version("python.python"), version("python.torch"), cost->per_op_s * 1e6,
                      cost->per_tensor_s * 1e6);
    // Note [Probe and loop interleaved]: how the two sides were timed.
    if (const auto it = p.info.find("python.rounds"); it != p.info.end()) os << "    timed: " << it->second << "\n";
  } else if (const auto it = p.info.find("python"); it != p.info.end()) {
    os << "  python loop: " << it->second << "\n";
  }
  // Layers: shapes measured per signature and precision.
  std::map<std::string, std::vector<const sim::LayerSample*>> layers;
  for (const auto& l : p.layers) layers[l.signature + " " + to_string(l.precision)].push_back(&l);
  os << "\n  layers (" << p.layers.size() << " shapes)\n";
  for (const auto& [key, v] : layers) {
    std::set<std::int64_t> bs, ss;
    double lo = 1e30, hi = 0;
    for (const auto* l : v) {
      bs.insert(l->micro_batch);
      ss.insert(l->seq_len);
      lo = std::min(lo, l->forward.median_s);
      hi = std::max(hi, l->forward.median_s);
    }
    os << "    " << key << ": b " << *bs.begin() << ".." << *bs.rbegin() << ", s " << *ss.begin() << ".." << *ss.rbegin()
       << ", forward " << human_s(lo) << ".." << human_s(hi) << "\n";
  }
  // Note [Layer interpolation error].
  if (const auto errors = layer_interpolation_errors(p); !errors.empty()) {
    os << "\n  layers between measured batch sizes (each priced from its neighbours, leaving it out)\n";
    for (const auto& [kind, e] : errors) {
      os << "    " << fmt::format("{:<34} {:>3} points   rms {:>5.1f}%  max {:>5.1f}%", kind, e.points, 100 * e.rms, 100 * e.max) << "\n";
    }
  }
  os << "\n  fits (" << p.fits.size() << ")" << "\n";
  for (const auto& [name, f] : p.fits) {
    os << "    "
       << fmt::format("{:<34} {:>3} samples  rms {:>5.1f}%  max {:>5.1f}%  ", name, f.samples, 100 * f.rms_rel_error,
                      100 * f.max_rel_error)
       << describe_fit(f, kernel_term_shares(p, name, f)) << "\n";
  }
  // Achieved figures at the largest measured size (what users quote).
  double best_gemm = 0;
  std::string best_gemm_prec;
  for (const auto& k : p.kernels) {
    if (k.kind == "gemm" && k.time.median_s > 0 && k.flops / k.time.median_s > best_gemm) {
      best_gemm = k.flops / k.time.median_s;
      best_gemm_prec = to_string(k.precision);
    }
  }
  if (best_gemm > 0) os << "\n  best GEMM: " << fmt::format("{:.3g} TFLOP/s", best_gemm / 1e12) << " (" << best_gemm_prec << ")\n";
  std::map<std::string, double> best_copy;
  for (const auto& c : p.copies) {
    if (c.time.median_s > 0) best_copy[c.direction] = std::max(best_copy[c.direction], static_cast<double>(c.bytes) / c.time.median_s);
  }
  for (const auto& [dir, bw] : best_copy) os << "  best copy " << dir << ": " << fmt::format("{:.3g} GB/s", bw / 1e9) << "\n";
  // nccl-tests' columns: algbw = size / time, busbw = algbw x the op's factor.
  std::map<std::string, double> best_alg;
  std::map<std::string, int> ranks_of;
  std::map<std::string, sim::CollectiveOp> op_of;
  for (const auto& c : p.comm) {
    // One rank (profiles before collectives needed two GPUs) moves nothing.
    if (c.time.median_s > 0 && c.ranks >= 2) {
      // Across nodes (an imported nccl-tests run): "x16 (8 a node)".
      const std::string key = c.backend + " " + to_string(c.op) + " x" + std::to_string(c.ranks) +
                              (c.ranks_per_node > 0 && c.ranks_per_node < c.ranks
                                   ? " (" + std::to_string(c.ranks_per_node) + " a node)"
                                   : "");
      best_alg[key] = std::max(best_alg[key], static_cast<double>(c.bytes) / c.time.median_s);
      ranks_of[key] = c.ranks;
      op_of[key] = c.op;
    }
  }
  for (const auto& [key, alg] : best_alg) {
    os << "  best " << key << ": algbw " << fmt::format("{:.3g} GB/s", alg / 1e9) << ", busbw "
       << fmt::format("{:.3g} GB/s", alg * sim::bus_bandwidth_factor(op_of[key], ranks_of[key]) / 1e9) << "\n";
  }
  // Collectives the profile has no samples of (all_to_all in profiles made
  // before it was measured) are priced over the link its all-reduce fit
  // gives (Note [Profile lookups] in sim/src/cost/cost_profile.cpp).
  if (!p.comm.empty()) {
    // The comm fits summarise; predictions take the measured sizes.
    os << "  collectives: priced from their measured sizes, between them by straight lines (Note [Measured "
          "collectives]), each at its median with its slow runs counted apart as stalls a step meets at their "
          "rate (Note [A collective's stalls]); the comm fits above (to the means) only summarise them\n";
    std::string missing;
    for (sim::CollectiveOp op : {sim::CollectiveOp::kAllReduce, sim::CollectiveOp::kReduceScatter, sim::CollectiveOp::kAllGather,
                                 sim::CollectiveOp::kBroadcast, sim::CollectiveOp::kSendRecv, sim::CollectiveOp::kAllToAll}) {
      const bool measured = std::any_of(p.comm.begin(), p.comm.end(), [&](const sim::CommSample& c) { return c.op == op; });
      if (!measured) missing += (missing.empty() ? "" : ", ") + std::string(to_string(op));
    }
    const bool link = std::any_of(p.comm.begin(), p.comm.end(), [&](const sim::CommSample& c) {
      return c.op == sim::CollectiveOp::kAllReduce && c.ranks >= 2 && p.fits.count(sim::comm_fit_name(c.backend, c.op, c.ranks));
    });
    if (!missing.empty()) {
      os << "  not measured: " << missing << (link ? " (priced over the link the all_reduce fit gives)" : " (priced by the cluster's links)") << "\n";
    }
  }
  // Note [Collectives in a step] (gloo_bench.cpp): what a data-parallel
  // gradient collective's stalls are counted from, and its median beside
  // the back-to-back price at that size (Note [A collective in a step]).
  for (const auto& c : p.comm_in_step) {
    const auto b2b = sim::MeasuredCollective::of(p, c.backend, c.op, c.ranks, 0);
    std::string beside;
    if (b2b.sizes() >= 2) {  // at() prices from two sizes
      const auto s = b2b.at(static_cast<double>(c.bytes));
      beside = " (back to back " + human_s(s.latency + s.wire) + ")";
    }
    os << "  " << c.backend << " " << to_string(c.op) << " x" << c.ranks << " in a step ("
       << fmt::format("{:.0f} ms of computing before", c.lead_s * 1e3) << "), " << human_bytes(static_cast<double>(c.bytes))
       << ": median " << human_s(c.median_s) << beside << ", mean " << human_s(c.mean_s)
       << fmt::format(", {:.0f}% stalled", 100 * c.stall_frac) << (c.stall_frac > 0 ? " by " + human_s(c.stall_s) : std::string())
       << " (" << c.reps << " runs)"
       << (c.wait_s > 0 ? fmt::format("; computing after it {:+.0f} us (Note [Resuming after a wait])", c.resume_s * 1e6) : std::string())
       << "\n";
  }
  // Note [Measuring interference]: what the compute-bound fit means on this device.
  if (!p.interference.empty()) {
    const auto k = p.fits.find("interference.compute");
    const int sms = p.interference.front().sms;
    os << "  compute beside collectives: " << p.interference.size() << " settings";
    if (k != p.fits.end() && sms > sim::kNvswitchNcclChannels) {
      const double f = static_cast<double>(sim::kNvswitchNcclChannels) / sms;
      os << fmt::format("; a GEMM beside NCCL's {} channels of {} SMs {:+.1f}% (the prior {:+.1f}%)", sim::kNvswitchNcclChannels, sms,
                        100 * k->second.coef[0] * f / (1 - f), 100 * f / (1 - f));
    }
    if (const auto m = p.fits.find("interference.memory"); m != p.fits.end()) {
      os << fmt::format("; memory-bound kernels {:.2f}x the HBM share's slowdown", m->second.coef[0]);
    }
    os << " (Note [Interference fit])\n";
  } else if (const auto it = p.info.find("interference"); it != p.info.end()) {
    os << "  compute beside collectives: " << it->second << "\n";
  }
  for (const auto& [key, b] : p.memory) os << "  memory " << key << ": " << human_bytes(static_cast<double>(b)) << "\n";
  return os.str();
}

std::string profile_to_json(const sim::Profile& p) {
  sim::JsonWriter j;
  j.begin_object();
  j.header();
  j.field("path", p.path);
  // Note [Quick profiles]: "" for a full sweep.
  j.field("trust_warning", sim::profile_sweep_warning(p));
  j.field("speed_warning", sim::profile_speed_warning(p));  // Note [A steady calibration]
  j.key("info").begin_object();
  for (const auto& [k, v] : p.info) j.field(k, v);
  j.end_object();
  j.field("layer_samples", static_cast<std::int64_t>(p.layers.size()));
  j.field("kernel_samples", static_cast<std::int64_t>(p.kernels.size()));
  j.field("comm_samples", static_cast<std::int64_t>(p.comm.size()));
  j.field("copy_samples", static_cast<std::int64_t>(p.copies.size()));
  j.field("interference_samples", static_cast<std::int64_t>(p.interference.size()));  // Note [Measuring interference]
  // Note [Collectives in a step] (gloo_bench.cpp).
  j.key("comm_in_step").begin_array();
  for (const auto& c : p.comm_in_step) {
    j.begin_object();
    j.field("backend", c.backend).field("op", std::string(to_string(c.op))).field("ranks", c.ranks);
    j.field("bytes", static_cast<std::int64_t>(c.bytes)).field("lead_s", c.lead_s).field("median_s", c.median_s);
    j.field("mean_s", c.mean_s).field("stall_frac", c.stall_frac).field("stall_s", c.stall_s).field("reps", c.reps);
    if (c.wait_s > 0) j.field("resume_s", c.resume_s).field("wait_s", c.wait_s);  // Note [Resuming after a wait]
    j.end_object();
  }
  j.end_array();
  j.key("memory").begin_object();
  for (const auto& [k, v] : p.memory) j.field(k, static_cast<std::int64_t>(v));
  j.end_object();
  // Note [Python host cost]: null where not timed.
  if (const auto cost = sim::python_host_cost(p)) {
    j.key("python_host").begin_object();
    j.field("per_op_s", cost->per_op_s).field("per_tensor_s", cost->per_tensor_s);
    j.end_object();
  } else {
    j.key("python_host").null();
  }
  // Note [Layer interpolation error].
  j.key("layer_interpolation").begin_object();
  for (const auto& [kind, e] : layer_interpolation_errors(p)) {
    j.key(kind).begin_object();
    j.field("points", e.points).field("rms_rel_error", e.rms).field("max_rel_error", e.max);
    j.end_object();
  }
  j.end_object();
  j.key("fits").begin_object();
  for (const auto& [name, f] : p.fits) {
    j.key(name).begin_object();
    j.key("coefficients").begin_object();
    for (std::size_t i = 0; i < f.features.size(); ++i) j.field(f.features[i], f.coef[i]);
    j.end_object();
    j.field("samples", f.samples).field("rms_rel_error", f.rms_rel_error).field("max_rel_error", f.max_rel_error);
    j.end_object();
  }
  j.end_object();
  j.end_object();
  return j.str() + "\n";
}

}  // namespace dtsim::calib
