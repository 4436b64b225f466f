// `dtsim validate`: run the plan for real on local ranks (or join an existing
// mpirun / SLURM / torchrun job) and report predicted against measured.
#include <unistd.h>

#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <iostream>
#include <sstream>

#include "commands.hpp"

#include <CLI/CLI.hpp>

#include "dtsim/cli/parse.hpp"
#include "dtsim/platform/process.hpp"
#include "dtsim/runtime/launcher.hpp"
#include "dtsim/runtime/validate.hpp"
#include "dtsim/sim/config_io.hpp"
#include "dtsim/sim/error.hpp"
#include "dtsim/sim/file_io.hpp"
#include "dtsim/sim/profile.hpp"
#include "dtsim/sim/units.hpp"

namespace dtsim::cli {
namespace {

namespace fs = std::filesystem;

/// The worker program: $DTSIM_WORKER, else an installed dtsim's
/// <prefix>/libexec/dtsim/dtsim_worker (cmake/install.cmake), else the one
/// built beside us.
std::string worker_path() {
  if (const char* w = std::getenv("DTSIM_WORKER"); w != nullptr && *w != 0) return w;
  std::error_code ec;
  const fs::path exe = fs::read_symlink("/proc/self/exe", ec);
  if (!ec) {
    const fs::path installed = exe.parent_path() / ".." / "libexec" / "dtsim" / "dtsim_worker";
    if (fs::is_regular_file(installed, ec)) return installed.lexically_normal().string();
  }
#ifdef DTSIM_WORKER_PATH
  return DTSIM_WORKER_PATH;
#else
  throw UnsupportedError(
      "dtsim validate: dtsim_worker was not built (it needs LibTorch: scripts/setup installs libtorch-dev, then scripts/build)");
#endif
}

/// True inside a job started by mpirun, srun or torchrun (and not by our own launcher).
bool in_existing_job() {
  if (std::getenv("DTSIM_RUN_DIR") != nullptr) return false;
  for (const char* n : {"OMPI_COMM_WORLD_SIZE", "PMI_SIZE", "WORLD_SIZE"}) {
    if (const char* v = std::getenv(n); v != nullptr && std::atoi(v) > 1) return true;
  }
  const char* tasks = std::getenv("SLURM_NTASKS");
  return tasks != nullptr && std::atoi(tasks) > 1 && std::getenv("SLURM_STEP_ID") != nullptr;
}

/// Ranks the plan asks for when --procs is not given: tp x pp x dp as written,
/// with an unset dp taken as 2 for a plan that is only data parallel (on one
/// CPU, or the cluster's GPUs on cuda).
int default_procs(const runtime::ValidateOptions& o) {
  const sim::PlanSpec spec = sim::load_plan(o.plan, o.sets);
  const int split = spec.tp * std::max({spec.pp, spec.model_parallel, 1});
  if (spec.dp > 0) return split * spec.dp;
  if (o.device == "cuda" && !o.cluster.empty()) return sim::load_cluster(o.cluster, o.sets).gpus();
  return split == 1 ? 2 : split;
}

std::string read_text(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  if (!in) throw IoError(path + ": cannot read");
  std::stringstream ss;
  ss << in.rdbuf();
  return ss.str();
}

std::string eta_text(double s) {
  if (s < 0) return "?";
  if (s < 90) return std::to_string(static_cast<int>(s + 0.5)) + " s";
  return std::to_string(static_cast<int>(s / 60 + 0.5)) + " min";
}

/// Note [Recorded runs]
/// A validation run's measurements outlive the machine they were taken on
/// (a GPU lent for an hour): `--run-dir DIR` keeps each rank's rank-K.json,
/// and `--measured DIR` reports them again against the prediction of the
/// build at hand, for the same model, plan, cluster and profile. The GPU
/// validation table (docs/validation-gpu.md) is regenerated that way as the
/// simulator changes, and its measurements never are.
int report_recorded(const runtime::ValidateOptions& o) {
  if (!fs::exists(o.measured + "/rank-0.json")) {
    throw IoError("--measured " + o.measured + ": no rank-0.json there (a --run-dir kept from dtsim validate)");
  }
  int procs = o.procs;
  if (procs <= 0) {
    procs = 0;
    while (fs::exists(o.measured + "/rank-" + std::to_string(procs) + ".json")) ++procs;
  }
  runtime::RunSetup setup = runtime::setup_run(o, procs);
  setup.notes.push_back("measured earlier, recorded in " + o.measured + "; predicted by this build (Note [Recorded runs])");
  const sim::Prediction prediction = runtime::predict_run(setup);
  std::vector<runtime::RankMeasurement> ranks;
  for (int r = 0; r < procs; ++r) {
    const std::string path = o.measured + "/rank-" + std::to_string(r) + ".json";
    if (!fs::exists(path)) throw IoError("--measured " + o.measured + ": rank-" + std::to_string(r) + ".json is missing");
    ranks.push_back(runtime::rank_from_json(read_text(path), path));
  }
  const runtime::Measured measured = runtime::combine(std::move(ranks));
  std::cout << (o.json ? runtime::report_json(o, setup, prediction, measured) : runtime::format_report(o, setup, prediction, measured));
  return 0;
}

}  // namespace

namespace {
int run_validate(const runtime::ValidateOptions& o, const Args& args);
}  // namespace

Command add_validate(CLI::App& root, const Args& args) {
  CLI::App* app = root.add_subcommand(
      "validate", "Train the plan for real (LibTorch; Gloo on cpu, NCCL on cuda) and print predicted against measured");
  house_style(*app);
  const auto finish = runtime::add_validate_options(*app);
  app->footer(
      "\nRuns N local processes, or joins the job when started under mpirun / srun / torchrun, and prints predicted\n"
      "against measured iteration time, phases and per-rank peak memory. Example:\n"
      "  dtsim validate --model gpt2-tiny --plan zero2 --procs 2 --steps 5");
  return {app, [finish, args] { return run_validate(finish(), args); }};
}

namespace {

int run_validate(const runtime::ValidateOptions& o, const Args& args) {
  if (!o.measured.empty()) return report_recorded(o);
  const std::string worker = worker_path();
  if (in_existing_job()) {
    // mpirun / srun / torchrun started us once per rank: become the worker.
    std::vector<std::string> argv_s{worker};
    argv_s.insert(argv_s.end(), args.begin(), args.end());
    std::vector<char*> argv;
    for (auto& s : argv_s) argv.push_back(s.data());
    argv.push_back(nullptr);
    ::execv(worker.c_str(), argv.data());
    throw IoError("dtsim validate: cannot start " + worker + ": " + std::strerror(errno));
  }

  // Check everything before spending a second of training: the plan must
  // resolve for this many ranks, the profile must load, the prediction run.
  const int procs = o.procs > 0 ? o.procs : default_procs(o);
  const runtime::RunSetup setup = runtime::setup_run(o, procs);
  const sim::Prediction prediction = runtime::predict_run(setup);
  if (!o.data.empty() && !fs::exists(o.data)) {
    throw IoError("--data " + o.data + ": no such file (scripts/make-sample-data writes a sample)");
  }
  runtime::check_run_data(o, setup);  // a file the model cannot read: one line, before any rank starts
  if (o.device != "cuda" && o.mem_limit == 0) {
    // Note [A CPU rank's memory limit] (platform/src/process.cpp): a plan
    // predicted at over twice a rank's share of this host would only run out.
    const long long available = platform::host_memory_available();
    const long long share = platform::cpu_rank_memory_share(available, procs);
    const sim::RankMemory* worst = nullptr;
    for (const auto& r : prediction.ranks) {
      if (worst == nullptr || r.peak > worst->peak) worst = &r;
    }
    if (share > 0 && worst != nullptr && static_cast<double>(worst->peak) > 2.0 * static_cast<double>(share)) {
      throw ConfigError("dtsim validate: rank " + std::to_string(worst->rank) + "'s predicted peak, " +
                        human_bytes(static_cast<double>(worst->peak)) + ", is over twice what this host gives a CPU rank (" +
                        human_bytes(static_cast<double>(share)) + ": 3/4 of its available " +
                        human_bytes(static_cast<double>(available)) + " over " + std::to_string(procs) + " local rank" +
                        (procs == 1 ? "" : "s") + "), so the run could only run out of memory; use a smaller plan.seq_len or "
                        "plan.micro_batch, more ranks, or --mem-limit BYTES to run against a limit of your own");
    }
  }

  const bool keep_dir = !o.run_dir.empty();
  std::string run_dir = o.run_dir;
  if (run_dir.empty()) {
    std::string tmpl = (fs::temp_directory_path() / "dtsim-validate-XXXXXX").string();
    if (::mkdtemp(tmpl.data()) == nullptr) throw IoError(tmpl + ": cannot create a run directory");
    run_dir = tmpl;
  }

  runtime::LaunchSpec spec;
  spec.program = worker;
  spec.args = args;
  spec.procs = procs;
  spec.run_dir = run_dir;
  spec.hang_timeout_s = o.timeout_s;
  spec.start_timeout_s = std::max(120.0, o.timeout_s);
  const bool tty = ::isatty(2) != 0 && !o.quiet;
  if (tty) {
    spec.on_progress = [](const runtime::LaunchProgress& p) {
      std::cerr << "\r  validate: step " << p.step << "/" << (p.total > 0 ? std::to_string(p.total) : std::string("?")) << " ("
                << p.what << "), " << static_cast<int>(p.elapsed_s) << " s, ETA " << eta_text(p.eta_s) << "        " << std::flush;
    };
  }
  const runtime::LaunchResult result = runtime::launch(spec);
  if (tty) std::cerr << "\r" << std::string(72, ' ') << "\r" << std::flush;

  std::vector<runtime::RankMeasurement> ranks;
  std::vector<std::string> traces;
  for (int r = 0; r < procs; ++r) {
    const std::string base = run_dir + "/rank-" + std::to_string(r);
    if (fs::exists(base + ".json")) ranks.push_back(runtime::rank_from_json(read_text(base + ".json"), base + ".json"));
    if (fs::exists(base + ".trace.json")) traces.push_back(read_text(base + ".trace.json"));
  }
  runtime::Measured measured = runtime::combine(std::move(ranks));
  if (!result.ok || static_cast<int>(measured.ranks.size()) != procs) {
    measured.partial = true;
    measured.partial_reason = result.ok ? "not every rank wrote its measurements" : result.summary;
  }
  if (!o.trace.empty() && !measured.partial) sim::write_file_atomic(o.trace, runtime::merge_traces(traces));
  std::cout << (o.json ? runtime::report_json(o, setup, prediction, measured)
                       : runtime::format_report(o, setup, prediction, measured));
  if (!o.json && !o.trace.empty() && !measured.partial) {
    std::cout << "  measured timeline written to " << o.trace << " (open it in https://ui.perfetto.dev beside dtsim predict --trace)\n";
  }
  if (measured.partial) {
    // One line on stderr, with where the ranks' logs are.
    std::cerr << "dtsim validate: " << measured.partial_reason << " (logs: " << run_dir << "/rank-*.stderr)\n";
    for (const auto& r : result.ranks) {
      if (r.kind != runtime::RankOutcome::Kind::kOk && r.kind != runtime::RankOutcome::Kind::kStopped && !r.stderr_tail.empty()) {
        std::cerr << "  rank " << r.rank << " stderr (last lines):\n" << r.stderr_tail << "\n";
      }
    }
    // Stopped by a signal: exit status 2, as calibrate (Note [Stopping
    // calibration]); a run that failed on its own: 1.
    return result.stop_signal != 0 ? 2 : 1;
  }
  if (!keep_dir) {
    std::error_code ec;
    fs::remove_all(run_dir, ec);
  }
  return 0;
}

}  // namespace

}  // namespace dtsim::cli
