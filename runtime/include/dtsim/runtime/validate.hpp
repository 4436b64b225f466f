#pragma once
// `dtsim validate`: what a run is asked to do (shared by the CLI, which
// launches and reports, and the worker, which trains), what one rank measured,
// and the report that sets the measurements against the simulator's
// prediction of the same model, plan and cluster. No Torch here.

#include <cstdint>
#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "dtsim/sim/cluster.hpp"
#include "dtsim/sim/config_node.hpp"
#include "dtsim/sim/model.hpp"
#include "dtsim/sim/plan.hpp"
#include "dtsim/sim/predict.hpp"

namespace CLI {
class App;
}

namespace dtsim::runtime {

/// The options of `dtsim validate` (the worker gets the same argument list).
struct ValidateOptions {
  std::string model;                 ///< --model (required)
  std::string plan = "ddp";          ///< --plan
  std::string cluster;               ///< --cluster ("" : local-cpu on cpu; required on cuda)
  std::string profile;               ///< --profile FILE.h5 for the prediction
  std::string device = "cpu";        ///< --device cpu|cuda
  std::string data;                  ///< --data FILE.h5 ("" : synthetic)
  std::string trace;                 ///< --trace FILE: measured Chrome trace
  std::string run_dir;               ///< --run-dir (default: a temporary directory)
  /// --measured DIR: report a recorded run (the rank-K.json files a kept
  /// --run-dir holds) against this build's prediction, running nothing.
  std::string measured;
  std::vector<sim::Override> sets;   ///< --set SECTION.KEY=VALUE
  int procs = 0;                     ///< --procs (0: the plan's rank count)
  int steps = 10;                    ///< --steps measured
  /// --warmup steps not measured. Eight: Gloo's TCP connections take about
  /// ten large transfers to reach their steady speed (bert-tiny ZeRO-2's
  /// 17.6 MB all-gather: 49-111 ms in steps 3-8, 7-15 ms from then on), and
  /// a training run lives in the steady state.
  int warmup = 8;
  std::uint64_t seed = 1234;         ///< --seed for weights and synthetic data
  double timeout_s = 300;            ///< --timeout: a silent rank is hung after this
  double lr = 1e-3;                  ///< --lr of the optimizer
  std::int64_t mem_limit = 0;        ///< --mem-limit BYTES per rank (0: the device's capacity on cuda; on cpu 3/4 of the host's available memory over its local ranks)
  std::string fault;                 ///< --fault crash|hang|stop|oom|error@RANK[:STEP] (testing; Note [Injected faults] in trainer.cpp)
  bool json = false;                 ///< --json
  bool quiet = false;                ///< --quiet: no progress line
};

/// Declares validate's options on `app` (the scenario options of
/// dtsim/cli/scenario_options.hpp and the run's own); `dtsim validate` and
/// dtsim_worker share them. Call the returned function after parsing: it
/// checks the values and returns them (ConfigError naming the option and
/// what is valid). `app` must outlive it.
std::function<ValidateOptions()> add_validate_options(CLI::App& app);

/// Parses the arguments after `validate`; throws ConfigError naming the
/// option and what is valid.
ValidateOptions parse_validate_args(const std::vector<std::string>& args);

/// The run as both sides see it: model, cluster and the resolved plan.
struct RunSetup {
  sim::ModelPtr model;
  sim::ClusterSpec cluster;
  sim::PlanSpec spec;
  sim::ResolvedPlan plan;            ///< with stage_layers as the simulator balances them
  std::shared_ptr<const sim::ProfileCosts> profile;  ///< --profile, loaded (null: analytic)
  std::vector<std::string> notes;    ///< adaptations made (e.g. precision on a CPU)
};

/// Loads model, cluster and plan for a run of `world` ranks and resolves the
/// plan: on cpu the cluster is local-cpu with `world` ranks in one node and a
/// precision the CPU lacks falls back to fp32 (with a note). Throws
/// ConfigError when the plan does not use exactly `world` ranks, or when the
/// runtime cannot run it (interleaved schedule; ZeRO-2/3 with a pipeline).
RunSetup setup_run(const ValidateOptions& o, int world);

/// The simulator's prediction of the run (keeps the graph for per-phase figures).
sim::Prediction predict_run(const RunSetup& s);

/// Checks --data (when given) against the run's model before any rank
/// starts: reads the file and throws IoError or ConfigError, one line naming
/// the file, the dataset and what the model reads (Note [Dataset layout]).
void check_run_data(const ValidateOptions& o, const RunSetup& s);

/// Note [Memory trace]: the device memory a rank holds at one layer
/// boundary of its first measured step, and the most it held since the
/// boundary before; set beside the simulator's memory timeline, it shows
/// where a peak comes from.
struct MemoryMark {
  std::string what;           ///< "fwd h.3 m0", "bwd h.3 m0", "optimizer", ...
  std::int64_t current = 0;   ///< bytes allocated after it
  std::int64_t peak = 0;      ///< the most allocated since the previous mark
};

/// One rank's measurements over the measured steps.
struct RankMeasurement {
  int rank = 0;
  int stage = 0;                     ///< pipeline stage of the rank
  std::string device;                ///< "cpu", "cuda:0"
  std::vector<double> step_s;        ///< wall time of each measured step
  double forward_s = 0;              ///< median per step: forward compute (waits excluded)
  double backward_s = 0;             ///< median per step: backward compute (waits excluded)
  double optimizer_s = 0;            ///< median per step: optimizer (waits excluded)
  double wait_s = 0;                 ///< median per step: the rest (communication and pipeline waits)
  std::int64_t peak_bytes = 0;       ///< device peak during the measured steps (on CUDA: the caching allocator's allocated bytes)
  std::int64_t reserved_peak_bytes = 0;  ///< CUDA: the peak of what the caching allocator held from the driver; 0 on CPU
  std::int64_t host_peak_bytes = 0;  ///< offloaded host memory peak (0 without offload)
  /// The limit its device allocations ran under: --mem-limit, or on a CPU
  /// without it 3/4 of the host's available memory shared by its local
  /// ranks (Note [A CPU rank's memory limit] in platform/src/process.cpp); 0:
  /// none, or a GPU's own capacity.
  std::int64_t mem_limit_bytes = 0;
  std::vector<double> losses;        ///< each step's loss (warm-up included), on ranks that compute it
  double probe_s = 0;                ///< Note [Machine probe]: the reference workload before the run (CPU); 0: not run
  double probe_end_s = 0;            ///< the same after the measured steps; 0: not run
  std::string cpus;                  ///< Note [A rank's own cores]: "cpu 1", ...; empty: not bound
  int gloo_loops_lowered = 0;        ///< Note [Gloo's event loop]: Gloo event loops run at the lowest priority
  std::vector<MemoryMark> memory_trace;  ///< Note [Memory trace]: the first measured step
};

/// Serialises / parses a rank's measurements (rank-K.json). Throws
/// ConfigError naming `source` on a malformed document.
std::string rank_to_json(const RankMeasurement& m);
RankMeasurement rank_from_json(const std::string& text, const std::string& source);

/// The measured run: every rank, combined.
struct Measured {
  std::vector<RankMeasurement> ranks;  ///< by rank (missing ranks of a partial run absent)
  bool partial = false;                ///< the run did not finish: not a measurement
  std::string partial_reason;          ///< why (the launcher's summary)
  double iteration_median_s = 0, iteration_min_s = 0, iteration_max_s = 0;  ///< per step: the slowest rank
  std::vector<double> losses;          ///< the loss per step (the last stage's first rank)
  /// Note [Unequal ranks]: how much longer the slowest rank computed
  /// (forward + backward, waits excluded) than the fastest rank of the same
  /// stage, which does the same work: 0.5 is 50% longer. The simulator
  /// assumes equal ranks. slow_rank / fast_rank are -1 where no stage has
  /// two ranks (a pure pipeline, one process).
  double compute_skew = 0;
  int slow_rank = -1, fast_rank = -1;
  /// Note [Machine probe] (models/torch): the slowest rank's probe
  /// seconds before the warm-up and after the measured steps; 0 where not
  /// measured (CUDA, older workers).
  double probe_s = 0, probe_end_s = 0;
};

/// The probe seconds a profile recorded (Note [Machine probe]): the median
/// of those before each pass of its layer sweep; 0 where it has none.
double profile_probe_seconds(const sim::Profile& p);

/// The run's probe over its profile's: 1.5 is a machine running the
/// reference workload 1.5x slower than when the profile was measured. Of
/// the probes before and after the measured steps, the one farther from the
/// profile's (a slow spell that began or ended during the run shows in one
/// of them). 0 where the run or the profile has none.
double probe_ratio(const RunSetup& s, const Measured& m);

/// The median of per-step figures (0 for none).
double median(std::vector<double> v);

/// Combines rank measurements: a step takes as long as its slowest rank.
Measured combine(std::vector<RankMeasurement> ranks);

/// Predicted against measured for one figure.
struct ReportRow {
  std::string what;       ///< "iteration", "stage 0 forward", "rank 1 peak memory"
  std::string unit;       ///< "s" or "B"
  double predicted = 0;
  double measured = 0;
  double error() const;   ///< (predicted - measured) / measured; 0 when measured is 0
};

/// Every row of the report: iteration time, each stage's phases, each rank's peak.
std::vector<ReportRow> report_rows(const sim::Prediction& p, const Measured& m);

/// The readable report (a table with relative errors).
std::string format_report(const ValidateOptions& o, const RunSetup& s, const sim::Prediction& p, const Measured& m);
/// The --json document (its "measured" part is what dtsim-gui overlays, gui/README.md).
std::string report_json(const ValidateOptions& o, const RunSetup& s, const sim::Prediction& p, const Measured& m);

/// Merges per-rank Chrome trace event arrays (rank-K.trace.json, each a JSON
/// array of events) into one trace document.
std::string merge_traces(const std::vector<std::string>& rank_event_arrays);

}  // namespace dtsim::runtime
