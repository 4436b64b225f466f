// dtsim_worker: one rank of `dtsim validate`. Started by the launcher (`dtsim
// validate --procs N`) with a run directory, or by mpirun / srun / torchrun
// through `dtsim validate`, in which case rank 0 prints the report.
//
// usage: dtsim_worker [validate options]   (the same arguments as dtsim validate; --help)
#include <unistd.h>

#include <csignal>
#include <cstdlib>
#include <fstream>
#include <iostream>
#include <sstream>
#include <thread>

#if defined(DTSIM_WORKER_CUDA)
#include <c10/cuda/CUDAFunctions.h>
#endif

#include <CLI/CLI.hpp>

#include "dtsim/cli/parse.hpp"
#include "dtsim/models/torch_layers.hpp"
#include "dtsim/runtime/launcher.hpp"
#include "dtsim/platform/process.hpp"
#include "dtsim/sim/error.hpp"
#include "dtsim/sim/file_io.hpp"
#include "dtsim/sim/json_writer.hpp"
#include "dtsim/sim/profile.hpp"
#include "worker.hpp"

using namespace dtsim;
using namespace dtsim::runtime;

namespace {

/// The first variable of `names` that is set, as an integer.
std::optional<int> env_int(std::initializer_list<const char*> names) {
  for (const char* n : names) {
    if (const char* v = std::getenv(n); v != nullptr && *v != 0) {
      try {
        return std::stoi(v);
      } catch (const std::exception&) {
        throw ConfigError(std::string("environment: ") + n + "=" + v + " is not an integer");
      }
    }
  }
  return std::nullopt;
}

std::string env_or(const char* name, const std::string& fallback) {
  const char* v = std::getenv(name);
  return v != nullptr && *v != 0 ? v : fallback;
}

/// The first line of an exception's message (LibTorch appends backtraces).
std::string first_line(const std::string& s) {
  const auto nl = s.find('\n');
  std::string line = s.substr(0, nl);
  while (!line.empty() && (line.back() == ' ' || line.back() == '\r')) line.pop_back();
  return line;
}

std::string trace_json(const std::vector<TraceEvent>& events, int rank, int stage) {
  sim::JsonWriter w(false);
  w.begin_array();
  w.begin_object().field("name", "process_name").field("ph", "M").field("pid", rank);
  w.key("args").begin_object().field("name", "rank " + std::to_string(rank) + " (stage " + std::to_string(stage) + ", measured)").end_object();
  w.end_object();
  for (int tid = 0; tid < 2; ++tid) {
    w.begin_object().field("name", "thread_name").field("ph", "M").field("pid", rank).field("tid", tid);
    w.key("args").begin_object().field("name", tid == 0 ? "compute" : "communication wait").end_object();
    w.end_object();
  }
  for (const auto& e : events) {
    w.begin_object().field("name", e.name).field("cat", e.cat).field("ph", "X").field("pid", rank).field("tid", e.tid);
    w.field("ts", e.start_us).field("dur", e.dur_us);
    // Note [A span's CPU time] (trainer.cpp): the thread's time on its core.
    if (e.cpu_us >= 0) w.key("args").begin_object().field("cpu_us", e.cpu_us).end_object();
    w.end_object();
  }
  w.end_array();
  return w.str();
}

// Note [Rendezvous]
// Where the ranks of a job meet, first match wins:
//  1. DTSIM_RENDEZVOUS=file:PATH: a c10d FileStore at PATH, on a filesystem
//     every rank sees (a fresh path per job);
//  2. MASTER_ADDR (and MASTER_PORT, default 29500), torchrun's variables:
//     rank 0 serves a TCPStore there;
//  3. under mpirun or srun with ranks on more than one node and neither set:
//     a FileStore named after the job in the working directory, which a
//     cluster's ranks share (mpirun gives no address that rank 0 can bind:
//     it may run on a login node);
//  4. otherwise (one node): 127.0.0.1:29500, or MASTER_PORT.
// Our own launcher sets DTSIM_RENDEZVOUS to a file in the run directory
// (Note [Local rendezvous] in src/launcher.cpp).
Comm::Rendezvous rendezvous_from_env() {
  Comm::Rendezvous where;
  const std::string file = env_or("DTSIM_RENDEZVOUS", "");
  if (!file.empty()) {
    if (file.rfind("file:", 0) != 0 || file.size() == 5) {
      throw ConfigError("environment: DTSIM_RENDEZVOUS='" + file + "'; valid: file:PATH on a filesystem every rank shares");
    }
    where.file = file.substr(5);
    return where;
  }
  where.port = env_int({"MASTER_PORT"}).value_or(29500);
  const std::string addr = env_or("MASTER_ADDR", "");
  if (!addr.empty()) {
    where.addr = addr;
    return where;
  }
  const auto world = env_int({"OMPI_COMM_WORLD_SIZE", "PMI_SIZE"});
  const auto local = env_int({"OMPI_COMM_WORLD_LOCAL_SIZE", "MPI_LOCALNRANKS"});
  const bool mpi_nodes = world && local && *local < *world;
  const bool slurm_nodes = env_int({"SLURM_NNODES"}).value_or(1) > 1 && !env_or("SLURM_PROCID", "").empty();
  if (mpi_nodes || slurm_nodes) {
    std::string job = env_or("OMPI_MCA_ess_base_jobid", "");
    if (job.empty() && !env_or("SLURM_JOB_ID", "").empty()) job = env_or("SLURM_JOB_ID", "") + "." + env_or("SLURM_STEP_ID", "0");
    if (job.empty()) job = env_or("PMI_JOBID", "job");
    where.file = ".dtsim-rendezvous-" + job;
  }
  return where;
}

int run(const ValidateOptions& o, int& rank_out, std::string& run_dir_out) {
  const int rank = env_int({"RANK", "OMPI_COMM_WORLD_RANK", "PMI_RANK", "SLURM_PROCID"}).value_or(0);
  const int world = env_int({"WORLD_SIZE", "OMPI_COMM_WORLD_SIZE", "PMI_SIZE", "SLURM_NTASKS"}).value_or(1);
  [[maybe_unused]] const int local_rank = env_int({"LOCAL_RANK", "OMPI_COMM_WORLD_LOCAL_RANK", "MPI_LOCALRANKID", "SLURM_LOCALID"}).value_or(rank);
  rank_out = rank;
  const std::string run_dir = env_or("DTSIM_RUN_DIR", "");
  run_dir_out = run_dir;
  if (rank < 0 || rank >= world) throw ConfigError("environment: rank " + std::to_string(rank) + " is outside WORLD_SIZE " + std::to_string(world));

  std::int64_t limit = o.mem_limit;
  if (!o.fault.empty() && o.fault.rfind("oom", 0) == 0 && limit == 0) limit = std::int64_t{1} << 30;
  torch::Device device = torch::kCPU;
  std::string cpus;  // Note [A rank's own cores]
  if (o.device == "cuda") {
#if defined(DTSIM_WORKER_CUDA)
    if (!torch::cuda::is_available()) throw UnsupportedError("--device cuda: no CUDA device is visible to rank " + std::to_string(rank));
    device = torch::Device(torch::kCUDA, static_cast<c10::DeviceIndex>(local_rank % torch::cuda::device_count()));
    c10::cuda::set_device(device.index());
#else
    throw UnsupportedError("--device cuda: this dtsim_worker was built against a CPU-only LibTorch");
#endif
  } else {
    const int local_world = env_int({"LOCAL_WORLD_SIZE", "OMPI_COMM_WORLD_LOCAL_SIZE", "MPI_LOCALNRANKS"}).value_or(world);
    // Note [A CPU rank's memory limit] (platform/src/process.cpp).
    const int local_ranks = std::max(1, local_world);
    std::string what;
    if (limit == 0) {
      if (const std::int64_t avail = platform::host_memory_available(); avail > 0) {
        limit = platform::cpu_rank_memory_share(avail, local_ranks);
        what = "3/4 of this host's available " + std::to_string((avail + (1 << 29)) >> 30) + " GiB, shared by " + std::to_string(local_ranks) +
               " local rank" + (local_ranks == 1 ? "" : "s") + "; --mem-limit BYTES sets another";
      }
    }
    install_counting_allocator(limit, what);
    platform::retain_freed_memory();
    // Note [A rank's own cores] (platform/src/process.cpp): local rank i of n on
    // the i-th share of this host's CPUs, before any thread starts.
    cpus = platform::bind_cpu_share(local_rank, local_world);
    // One core per rank, as the local-cpu cluster and calibration's
    // --threads 1 have it (DTSIM_THREADS overrides).
    models::set_cpu_threads(std::max(1, env_int({"DTSIM_THREADS"}).value_or(1)));
  }

  TrainerConfig cfg;
  cfg.options = o;
  cfg.setup = setup_run(o, world);
  cfg.rank = rank;
  cfg.world = world;
  cfg.device = device;
  cfg.run_dir = run_dir;
  // Note [Busy waits] (comm.cpp): a rank with cores of its own polls.
  cfg.busy_wait = platform::polls_collectives(cpus);
#if defined(DTSIM_WORKER_CUDA)
  if (device.is_cuda()) cuda_limit(limit);
#endif
  // Under our launcher, its heartbeat watch names a hung rank first; the
  // collectives' own timeout is the backstop (and the only watch under mpirun).
  const double comm_timeout = run_dir.empty() ? o.timeout_s : o.timeout_s + 30;
  Comm comm(rank, world, rendezvous_from_env(), device.is_cuda(), comm_timeout);
  comm.lower_event_loops(platform::lowers_event_loops(cpus));  // Note [Gloo's event loop]
  std::vector<TraceEvent> events;
  RankMeasurement m = train(cfg, comm, o.trace.empty() ? nullptr : &events);
  m.cpus = cpus;
  m.gloo_loops_lowered = comm.loops_lowered();
  const std::string json = rank_to_json(m);
  const std::string trace = o.trace.empty() ? "" : trace_json(events, rank, m.stage);

  if (!run_dir.empty()) {
    // Launched by dtsim validate: it reads these and reports.
    if (!trace.empty()) sim::write_file_atomic(run_dir + "/rank-" + std::to_string(rank) + ".trace.json", trace);
    sim::write_file_atomic(run_dir + "/rank-" + std::to_string(rank) + ".json", json);
    return 0;
  }
  // Joined an existing job: rank 0 collects through the store and reports.
  auto to_bytes = [](const std::string& s) { return std::vector<std::uint8_t>(s.begin(), s.end()); };
  comm.store().set("result/" + std::to_string(rank), to_bytes(json));
  if (!trace.empty()) comm.store().set("trace/" + std::to_string(rank), to_bytes(trace));
  if (rank != 0) {
    comm.barrier("reported");
    return 0;
  }
  std::vector<RankMeasurement> ranks;
  std::vector<std::string> traces;
  for (int r = 0; r < world; ++r) {
    const auto bytes = comm.store().get("result/" + std::to_string(r));
    ranks.push_back(rank_from_json(std::string(bytes.begin(), bytes.end()), "rank " + std::to_string(r)));
    if (!trace.empty()) {
      const auto t = comm.store().get("trace/" + std::to_string(r));
      traces.emplace_back(t.begin(), t.end());
    }
  }
  comm.barrier("reported");
  const Measured measured = combine(std::move(ranks));
  const sim::Prediction p = predict_run(cfg.setup);
  if (!o.trace.empty()) sim::write_file_atomic(o.trace, merge_traces(traces));
  std::cout << (o.json ? report_json(o, cfg.setup, p, measured) : format_report(o, cfg.setup, p, measured)) << std::flush;
  return 0;
}

}  // namespace

int main(int argc, char** argv) {
  // A peer that dies closes its sockets: let Gloo see EPIPE and say so,
  // instead of this rank dying of SIGPIPE without a word.
  std::signal(SIGPIPE, SIG_IGN);
  std::vector<std::string> args(argv + 1, argv + argc);
  if (!args.empty() && args[0] == "validate") args.erase(args.begin());
  // The same options as `dtsim validate` (runtime::add_validate_options).
  CLI::App app{"dtsim_worker: one rank of `dtsim validate`, started by it (or by mpirun / srun / torchrun through it)",
               "dtsim_worker"};
  cli::house_style(app);
  const auto finish = add_validate_options(app);
  app.footer("\nusage: dtsim_worker [validate] [the options of dtsim validate]");
  int rank = 0;
  std::string run_dir;
  auto fail = [&](const std::string& cause, int status) {
    write_rank_error(run_dir, rank, cause);
    std::cerr << "dtsim_worker: rank " << rank << ": " << cause << "\n";
    return status;
  };
  try {
    try {
      cli::parse_or_throw(app, args);
    } catch (const CLI::Success& e) {
      return app.exit(e);  // --help, --version
    } catch (const ConfigError& e) {
      // fail() names the program and rank already.
      const std::string what = e.what(), self = "dtsim_worker: ";
      return fail(what.rfind(self, 0) == 0 ? what.substr(self.size()) : what, 2);
    }
    return run(finish(), rank, run_dir);
  } catch (const Error& e) {
    return fail(e.what(), 2);
  } catch (const c10::Error& e) {
    const std::string oom = cpu_oom_message();
    return fail(oom.empty() ? first_line(e.what_without_backtrace()) : oom, 3);
  } catch (const std::exception& e) {
    const std::string oom = cpu_oom_message();
    return fail(oom.empty() ? first_line(e.what()) : oom, 3);
  }
}
