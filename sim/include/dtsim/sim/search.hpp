#pragma once
// Plan search: enumerate every valid plan for a model on a cluster (dp, tp,
// pp, schedule, virtual stages, micro-batch, ZeRO/FSDP, offload, recompute,
// sequence parallelism), drop what cannot fit and what cannot rank (a time
// lower bound against the best found so far), simulate the rest on every
// core, and rank them by iteration time with the Pareto front of time
// against peak memory (Note [Search] in search.cpp).

#include <cstdint>
#include <functional>
#include <optional>
#include <memory>
#include <string>
#include <vector>

#include "dtsim/sim/cluster.hpp"
#include "dtsim/sim/config_node.hpp"
#include "dtsim/sim/cost_profile.hpp"
#include "dtsim/sim/model.hpp"
#include "dtsim/sim/predict.hpp"
#include "dtsim/sim/plan.hpp"

namespace dtsim::sim {

/// What to search.
struct SearchOptions {
  int gpus = 0;                   ///< GPUs to use (0: the whole cluster)
  std::int64_t global_batch = 0;  ///< sequences per iteration (0: 4 per GPU)
  int top = 10;                   ///< plans to keep in the ranking
  int threads = 0;                ///< 0: every core
  /// Knobs held fixed (precision, optimizer, seq_len, bucket_mb ...) come
  /// from this plan; the searched ones are overwritten.
  PlanSpec base;
  /// Plan keys every candidate keeps at the base plan's value, as a --set
  /// one is (the shape knobs Note [Fixed knobs] holds: "pp", "dp",
  /// "fsdp"; others given, such as "fsdp_version", are the base plan's
  /// anyway): those a framework's config cannot set otherwise
  /// (FrameworkConfig::search_fixed).
  std::vector<std::string> hold;
  std::shared_ptr<const ProfileCosts> profile;  ///< measured costs, or null
  /// Skip plans whose time bound shows they can neither rank in the top
  /// nor join the Pareto front (Note [Search]); false simulates them all.
  bool prune_by_time = true;
  /// Skip plans whose memory lower bound is over the capacity (Note
  /// [Search]); false simulates them (tests compare the two).
  bool prune_by_memory = true;
  /// Called now and then from the calling thread with plans done and total.
  std::function<void(std::size_t done, std::size_t total)> progress;
  /// A plan to rank beside the search's own, as given (a framework's
  /// config: Note [Your plan] in search.cpp), and what to call it. Its
  /// global batch is the search's: with global_batch 0 the search takes
  /// this plan's; otherwise the plan is predicted at the search's.
  std::optional<PlanSpec> compare;
  std::string compare_name;
};

/// One simulated plan.
struct SearchEntry {
  ResolvedPlan plan;            ///< as resolved and lowered (stage_layers filled)
  TimeNs iteration_time = 0;
  double tokens_per_s = 0;
  double mfu = 0;
  Bytes peak = 0;               ///< the fullest GPU
  bool fits = false;
  /// The same plan ranked again under other names, each as what differs
  /// ("placement tp,dp,pp"): listed once (Note [Search twins] in
  /// search.cpp). Filled for the ranking only.
  std::vector<std::string> also;
};

/// One plan under two names (Note [Search twins] in search.cpp): equal time
/// and peak, and every knob equal but the placement and whether FSDP or
/// ZeRO names the sharding.
bool same_plan(const SearchEntry& a, const SearchEntry& b);

/// What the search found.
struct SearchResult {
  std::string model_name, cluster_name;
  int gpus = 0;
  std::int64_t global_batch = 0;
  std::int64_t seq_len = 0;  ///< tokens a sample, as searched (1: a model without a sequence)
  Bytes capacity = 0;
  std::size_t enumerated = 0;       ///< distinct valid plans
  std::size_t pruned_memory = 0;    ///< dropped before simulating: model states alone exceed memory
  /// dropped before simulating: its compute alone is slower than `top`
  /// plans found, and one of them is smaller than its memory bound too
  std::size_t pruned_time = 0;
  std::size_t simulated = 0;
  std::size_t not_fitting = 0;      ///< simulated, peak over capacity
  std::vector<SearchEntry> top;     ///< fastest fitting plans, fastest first
  /// fitting plans no other beats on both time and memory, by time, up to
  /// twice the fastest's time
  std::vector<SearchEntry> pareto;
  double seconds = 0;               ///< wall time of the search
  int threads = 1;
  /// The model attends (a kernel of KernelKind::kAttention): the table's
  /// attn column says "-" for one that does not (a CNN).
  bool model_attention = true;
  /// A knob the base plan turns on that the rules allow in no plan
  /// searched, with what it needs (e.g. plan.tp_comm_overlap where no plan
  /// has sequence parallelism).
  std::vector<std::string> warnings;
  /// SearchOptions::compare predicted: its entry (unset where it is no plan
  /// on this cluster: compared_error says why), its name, and its place
  /// among the fitting plans by time (1: the fastest; 0: it does not fit,
  /// or more than `top` plans are faster).
  std::optional<SearchEntry> compared;
  std::string compared_name, compared_error;
  int compared_rank = 0;
};

/// The fixed knobs of a search (SearchOptions::base) as `dtsim search`
/// sets them: Adam, bf16 where the device has it (else fp16 where faster
/// than fp32, else fp32) unless `overrides` (--set plan.KEY=V) give them.
/// Throws ConfigError for a bad override.
PlanSpec search_base_plan(const ClusterSpec& cluster, const std::vector<Override>& overrides = {});

/// The candidate plans the search would try, before memory pruning.
std::vector<PlanSpec> enumerate_plans(const Model& model, const ClusterSpec& cluster, const SearchOptions& options);

/// What a one-stage plan's iteration at least adds beside its data-parallel
/// collectives (Note [Search]): the C of them overlapping first the serial
/// collectives on the compute stream, then the memory-bound and the
/// compute-bound kernels of `work` (layer_costs of the plan), each losing
/// s / (1 + s) of the time it overlaps (Note [Interference]), the rest
/// alone; added to plan_bounds' m X. `dense_params`: the model's parameters
/// less its routed experts'; `layers`: Model::layer_count(); `persistent`:
/// the elements a rank keeps whole under DeepSpeed's module-wise ZeRO-3
/// (zero3_persistent_elements); `root`: the elements of FSDP's root unit,
/// gathered once a micro-step (fsdp_root_elements). 0 for pipelines, one
/// replica, or a device whose compute does not slow.
TimeNs interference_time_bound(const ResolvedPlan& plan, std::int64_t dense_params, int layers, const ClusterSpec& cluster,
                               const CommModel& comm, const LayerCosts& work, std::int64_t persistent = 0,
                               std::int64_t root = 0);

/// The parameter elements on each rank of `plan`, before sharding, that
/// FSDP gathers once a micro-step and keeps from the forward to the
/// backward: its root unit's, or torchtitan's last unit's (Note [FSDP's
/// root unit]); 0 where it has none.
std::int64_t fsdp_root_elements(const Model& model, const ResolvedPlan& plan);

/// The parameter elements DeepSpeed's ZeRO-3 keeps whole on each rank of
/// `plan` (tensors of at most stage3_param_persistence_threshold; Note
/// [ZeRO-3 modules]); 0 unless plan.zero3_modules().
std::int64_t zero3_persistent_elements(const Model& model, const ResolvedPlan& plan);

/// Note [Search]: the least time of the distributed optimizer's all-gather
/// after a stage's step (ZeRO-1 gathering there, not in the next forward),
/// from the stage's parameters per GPU less its routed experts'; empty
/// where the plan gathers nothing there. Keeps a reference to `comm`.
std::function<TimeNs(std::int64_t)> step_gather_bound(const ResolvedPlan& plan, const ClusterSpec& cluster, const CommModel& comm);

/// Note [Search]: a lower bound of the fullest rank's peak, from the model
/// states of the average stage (`stage_states`) and what one micro-batch
/// keeps over the whole model (`kept`), for `pp` stages running `m`
/// micro-batches under `schedule` (the runtime's reservation not included).
/// `made_in_backward`: the part of stage_states that gradients made by the
/// backward itself take (DDP's and ZeRO-1's, not kept from the start); with
/// one micro-batch none of them coexists with the activations it frees.
Bytes peak_lower_bound(Bytes stage_states, Bytes kept, int pp, std::int64_t m, Schedule schedule, Bytes made_in_backward = 0);

/// Note [Search]: how a schedule's stages take their micro-batches. Per
/// stage: the moments it may hold the most (the start of its first
/// backward; under ZB-H1, with one chunk, every moment no other holds both
/// more forwards and more weight passes), each as the forwards of each
/// chunk whose backward has not run and the backwards whose weight pass
/// has not; the chunk of its first pass (a forward) and of its last (a
/// backward; -1 where it is a weight pass).
struct ScheduleShape {
  struct Held {
    std::vector<int> forwards, weights;  ///< by chunk
    bool operator==(const Held&) const = default;
  };
  std::vector<std::vector<Held>> held;
  std::vector<int> first_chunk, last_chunk;
};
ScheduleShape schedule_shape(Schedule schedule, int pp, int virtual_stages, std::int64_t micro_batches);

/// Note [Search]: lower bounds of an iteration's time (without the slowdown
/// of interference_time_bound) and of the fullest rank's peak (with the
/// runtime's reservation), from its layers' costs split as
/// `plan.stage_layers` says, run in `shape`'s order. Reads the plan's pp,
/// virtual stages, micro-batches, data-parallel degree and what
/// model_states() reads. `after_step`, where given: the least time of what
/// a stage's step is followed by, from its parameters per GPU less its
/// routed experts' (the distributed optimizer's gather in the step: Note
/// [Search]); a stage's chain then ends no earlier than that after its last
/// pass.
struct PlanBounds {
  TimeNs time = 0;
  Bytes peak = 0;
};
PlanBounds plan_bounds(const LayerCosts& layers, const ScheduleShape& shape, const ResolvedPlan& plan,
                       const ClusterSpec& cluster, const std::function<TimeNs(std::int64_t)>& after_step = {});

/// Runs the search. Throws ConfigError if the options are impossible (a
/// global batch no data-parallel degree divides, more GPUs than the cluster).
SearchResult search(const Model& model, const ClusterSpec& cluster, const SearchOptions& options);

/// The ranking and the Pareto front as tables.
std::string format_search(const SearchResult& r);
std::string search_to_json(const SearchResult& r);
/// Every ranked plan, one CSV row each, with a header.
std::string search_to_csv(const SearchResult& r);

}  // namespace dtsim::sim
