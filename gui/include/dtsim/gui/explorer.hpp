#pragma once
// The explorer's logic without any Qt: a scenario (model, cluster, plan and
// profile as loaded, then edited knob by knob), its evaluation, the values each
// knob may take, the rows of the pipeline timeline, the Pareto front of pinned
// scenarios, and loading a measured (validation) result. The window
// (explorer_window.hpp) only draws what these return, so tests check them
// against the simulator directly.

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "dtsim/sim/cluster.hpp"
#include "dtsim/sim/config_node.hpp"
#include "dtsim/sim/cost_profile.hpp"
#include "dtsim/sim/model.hpp"
#include "dtsim/sim/plan.hpp"
#include "dtsim/sim/predict.hpp"
#include "dtsim/sim/search.hpp"

namespace dtsim::gui {

/// One what-if: everything predict() needs, already loaded. Knobs edit
/// `plan` and `cluster` in place; the sources say where they were loaded from.
struct Scenario {
  std::string model_source, cluster_source, plan_source, profile_source;  ///< names or paths
  sim::ModelPtr model;
  sim::ClusterSpec cluster;
  sim::PlanSpec plan;
  std::shared_ptr<const sim::ProfileCosts> profile;  ///< null: datasheet costs
};

/// Loads a scenario as `dtsim predict` would (built-in names or paths, with
/// `--set` overrides); an empty profile means none. Throws dtsim::Error.
Scenario load_scenario(const std::string& model, const std::string& cluster, const std::string& plan,
                       const std::string& profile, const std::vector<sim::Override>& overrides = {});

struct GanttRow;

/// What one evaluation produced: a prediction (with its task graph and spans)
/// and its timeline rows, or the one-line error that prevented it.
struct Outcome {
  std::uint64_t generation = 0;  ///< which request it answers
  std::shared_ptr<const sim::Prediction> prediction;
  std::shared_ptr<const std::vector<GanttRow>> timeline;  ///< gantt_rows(*prediction)
  std::string error;             ///< empty when prediction is set
  bool ok() const { return prediction != nullptr; }
};

/// Predicts `s`, catching every dtsim::Error into Outcome::error. Thread-safe:
/// the window runs it off the UI thread.
Outcome evaluate(const Scenario& s, std::uint64_t generation = 0);

/// The values a knob may take for a model on a cluster, so controls offer
/// nothing resolve() would refuse on its own: the rules table's lists
/// (sim/rules.hpp).
struct KnobChoices {
  std::vector<int> tp;          ///< divisors of GPUs per node the model's heads and MLP split into
  std::vector<int> pp;          ///< divisors of GPUs / tp, at most one stage per layer
  std::vector<int> dp;          ///< divisors of GPUs / (tp * pp * cp) (0 = all of them is offered separately)
  std::vector<int> cp;          ///< divisors of GPUs / tp cutting a sequence into 2 cp chunks ({1} if the model cannot)
  std::vector<int> ep;          ///< divisors of the routed experts whose ep x etp divides tp * cp * dp ({1}: dense)
  std::vector<int> etp;         ///< 1 and tp for a mixture of experts ({tp}: dense, or tp 1)
  bool experts = false;         ///< the model has routed experts (ep, etp, the dispatcher and the load imbalance apply)
  std::vector<sim::MoeDispatcher> dispatchers;  ///< alltoall, allgather and deepep with routed experts ({alltoall}: dense)
  std::vector<sim::CpComm> cp_comms;       ///< how K/V move with the current cp (only p2p at cp 1)
  std::vector<sim::LossParallel> loss_parallels;  ///< whose cross-entropy a tp head runs (only auto at tp 1)
  std::vector<sim::Attention> attentions;  ///< auto, and eager and flash where the model has attention
  std::vector<sim::Precision> precisions;  ///< those the device computes in
  std::vector<sim::Kernels> kernels;       ///< composite, and fused for the Llama family
  std::vector<sim::Fp8Recipe> fp8_recipes; ///< delayed, and tensorwise under fp8
  /// Recompute modes the model has (PlanRules::recomputes), op only where
  /// op_recompute_allowed at the current tp, cp and attention.
  std::vector<sim::Recompute> recomputes;
  int max_virtual_stages = 1;   ///< layers / pp (interleaved needs >= 2 chunks per stage)
  bool sequence_parallel = false;  ///< allowed with the current tp (tp_comm_overlap also needs it on)
  bool sync_batchnorm = false;     ///< the model has batch norm to sync over the data-parallel group
};
/// Choices for tp, pp, cp, dp, ep and etp given the current tp, pp, cp, dp
/// and etp, for sequences of seq_len tokens (0: the model's maximum, as
/// resolve takes it); dp 0 is all the GPUs tp x pp x cp leave, etp 0 is tp
/// (both as resolve derives them); attention and precision decide whether
/// attention runs fused, which torchtitan's op-level recompute needs.
KnobChoices knob_choices(const sim::Model& model, const sim::ClusterSpec& cluster, int tp, int pp, int cp = 1,
                         std::int64_t seq_len = 0, int dp = 0, int etp = 0,
                         sim::Attention attention = sim::Attention::kAuto, sim::Precision precision = sim::Precision::kBf16);

/// One bar of the timeline: [start, end) in ns, over the band [lo, hi) of
/// its lane's height (fractions from the bottom; the whole lane but where
/// level_of_detail stacks a pixel column's kinds).
struct GanttBar {
  TimeNs start = 0, end = 0;
  float lo = 0, hi = 1;
};
/// What a timeline bar counts as (the legend).
enum class GanttKind { kForward, kBackward, kRecompute, kOptimizer, kComm, kOffload, kBubble };
inline constexpr int kGanttKinds = 7;
/// "forward", "backward", "recompute", "optimizer", "communication", "offload", "bubble".
const char* to_string(GanttKind k);

/// One row of the timeline: a lane of one simulated rank (stage).
struct GanttRow {
  std::string label;  ///< "S0" (the compute lane of stage 0), "S0 comm", "S0 host"
  int stage = 0;
  bool compute = false;  ///< the compute lane
  /// Bars by kind, each sorted and merged where they touch or overlap.
  std::vector<GanttBar> bars[kGanttKinds];
};
/// The rows of one iteration: per simulated rank a compute lane (forward,
/// backward, recompute, optimizer, and the idle gaps as bubble), a comm lane
/// (collectives and sends) and a host lane (offload copies, host optimizer)
/// where they have work. Needs a prediction made with keep_graph.
std::vector<GanttRow> gantt_rows(const sim::Prediction& p);

/// The row as drawn at a resolution of `bins` pixels over [lo, hi): each bin
/// shows the kinds that ran in it stacked, each as tall as the share of the
/// bin it filled (in eighths of the lane), and runs of equal bins become one
/// bar, so a row never has more than `bins` bars a kind however many tasks
/// it ran (Note [Timeline level of detail] in explorer.cpp). Bars wider than
/// a bin keep their ends to within one bin; a row with few bars in range is
/// returned exactly, clipped to [lo, hi), each the lane's whole height.
GanttRow level_of_detail(const GanttRow& row, TimeNs lo, TimeNs hi, int bins);

/// A pinned scenario of the comparison view.
struct Pinned {
  std::string label;            ///< "gpt2-xl · dgx-a100 · zero2"
  std::string model, cluster, plan;
  TimeNs iteration_time = 0;
  Bytes peak = 0;
  double tokens_per_s = 0, mfu = 0;
  bool fits = true;
};
/// Indices of the pinned scenarios no other beats on both time and peak
/// memory (ties kept once), sorted by time.
std::vector<std::size_t> pareto_front(const std::vector<Pinned>& pins);
/// The pinned scenarios as CSV with a header (RFC 4180 quoting).
std::string pins_to_csv(const std::vector<Pinned>& pins);
/// A short label of a prediction's plan: "dp8 tp1 pp1 zero2 mb4x1 fp16"; cp > 1
/// adds " cp2" (" cp2-all_gather"), ep > 1 " ep8" (" ep8-etp1" where etp is
/// not tp), attention other than auto " flash" or " eager".
std::string plan_label(const sim::ResolvedPlan& p);

/// Indices into `entries` (ranked) of the first of each distinct plan
/// (sim::same_plan), at most `keep` of them, in rank order.
std::vector<std::size_t> distinct_plans(const std::vector<sim::SearchEntry>& entries, std::size_t keep);

/// A tick interval for an axis spanning `span` (> 0) units with at most
/// `max_ticks` intervals: the smallest 1, 2 or 5 x 10^k at least span / max_ticks.
double nice_tick_interval(double span, int max_ticks);
/// Decimals that show every multiple of a nice_tick_interval `step` exactly
/// (0 for 1, 2, 5, 10...; 1 for 0.5; 2 for 0.05).
int tick_decimals(double step);

/// A measured iteration, as `dtsim validate --json` writes it (gui/README.md
/// gives the format): wall time, phases and each rank's peak.
struct Measured {
  std::string source;              ///< the file
  double iteration_time_s = 0;     ///< median
  double forward_s = 0, backward_s = 0, comm_wait_s = 0, optimizer_s = 0;
  std::vector<std::pair<int, Bytes>> rank_peaks;  ///< (rank, peak bytes)
  bool partial = false;            ///< the run did not finish: not a measurement
};
/// Reads a measured result; throws ConfigError/IoError naming the file and key.
Measured load_measured(const std::string& path);

}  // namespace dtsim::gui
