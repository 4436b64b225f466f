// Plan search.
//
// Note [Search]
// The space is the product of the parallel degrees (tp a power of two that
// divides a node and the model's heads, pp any divisor up to the layer
// count, dp the rest), the micro-batch (powers of two dividing the batch per
// replica), and per degree the schedules (1F1B, GPipe, ZB-H1, interleaved
// with 2 to 8 chunks where the micro-batches allow), ZeRO stages and FSDP (0 and 1
// with pipelines), optimizer and parameter offload, recompute and sequence
// parallelism. The distributed optimizer (ZeRO-1) gathers its parameters
// in the next forward, Megatron's overlap_param_gather (Note [Overlapped
// parameter gather]), wherever the rules allow it, and in the step only
// where the base plan sets it so: the gather moved off the step's end is
// never slower and keeps the same peak. Every ZeRO-1 plan among the 200
// fastest of nine searches, predicted with the gather in the step
// instead (bench/dtsim_bench_knob_pairs; 621 plans: gpt-175b on 1,024
// A100s, llama-3.1-405b at 8k tokens on 16,384 H100s, llama-3-70b,
// gpt-7.5b, mixtral-8x7b, gpt2-xl, gpt2 on 8 V100s, gpt2-tiny and
// bert-tiny on this CPU) took 0 to 7.0% longer and peaked the same; trying
// both took the 131k-token 405B search from 38-48 s to 54-63 s. Sequence
// parallelism's collectives overlap the GEMMs beside them (Transformer
// Engine's userbuffers, tp_comm_overlap; Note [TP comm overlap]) where the
// base plan sets it so and the rules allow it (with sequence parallelism).
// It too is never slower (a layer exposes T_comm / tp + (tp - 1) / tp x
// max(0, T_comm - T_gemm) of its collectives' T_comm) and holds nothing
// more, but tried wherever allowed it made more plans competitive:
// deepseek-v3's search simulated 6,945 plans where it had 5,872, 56-59 s
// against 40.7 s, at the edge of the minute issue 26 allows
// (bench/README.md). A knob the base plan sets on that the rules allow in
// no plan searched is said (SearchResult::warnings), not refused.
//
// Before simulating, a plan whose model states alone (ZeRO
// paper accounting of the fewest parameters a GPU can hold, total / (tp x
// pp)) exceed the device is dropped: that bound never drops a plan that fits.
// With them it counts what a micro-batch keeps (peak_lower_bound), beside
// every state but, with one micro-batch, the gradients DDP and ZeRO-1 make
// in the backward: those appear only as the activations go (gpt-3.6b on
// 8 V100-16GB at dp 4, tp 2, micro-batch 16, ZeRO-1 offloaded, full
// recompute peaked 14.5 GiB of 16: the bound, counting its 3.3 GiB of
// gradients beside the activations, had dropped it).
// The rest are simulated in parallel, each prediction independent
// (sim::Model is immutable), and kept only if every GPU's simulated peak fits.
//
// Note [Search twins]
// Two enumerated plans can be one plan under two names: a pipeline's
// placements (tp,pp,dp against tp,dp,pp) that put the same ranks together
// inside one node, or FSDP's FULL_SHARD where it lowers as ZeRO-3 does.
// They simulate to the same time and peak. So do the same GPUs split
// another way between data and context parallelism with the micro-batch
// grown to match (llama-3.2-1b at 8k tokens on 8 H100s: dp 8 at
// micro-batch 2, dp 4 x cp 2 at 4, dp 2 x cp 4 at 8): each GPU computes
// the same mb s / cp tokens a micro-step, as many micro-steps (B / (dp mb)),
// and reduces its gradients over the same dp x cp ranks, and where the
// ring's exchange hides under attention nothing else tells them apart
// (there, of llama-3-8b's ten fastest plans on 32 H100s only four were
// different). The ranking lists such a plan once, under the name ranked
// first (the enumeration's order breaks ties: the smallest cp), with the
// others in its `also`; the top-k the time bound prunes against counts
// plans, not names, so k distinct plans are always found.
//
// Note [Search recompute]
// Recompute is tried as none, selective (where attention keeps scores to
// drop), full (every block) and torchtitan's op-level policy where it is
// described, and full also as Megatron's block method (Note [Block
// recompute]) at a quarter, a half and three quarters of a chunk's blocks:
// between none and every block in time and in memory. A block variant can
// only rank where the same plan without recompute does not fit (that one is
// faster), so it is enumerated only where that plan's memory bounds (the first one below and
// the stage bounds) exceed the device, and the same plan's with every block
// rerun do not (a block variant keeps more than that one, so its bounds
// are higher still); elsewhere it is not a candidate, in a pruned search
// and an unpruned one alike, and so not on the Pareto front either, where
// it would sit between the two. llama-3.2-1b at 65,536 tokens on 2 H100s (cp
// 1): rerunning 4 of its 16 blocks, 8.48 s, where every block took 10.15 s;
// deepseek-v3 on 2,048 H100s: block 1 ranks third. The stage bounds price
// every block rerun and take out, chunk by chunk, what the blocks past the
// first N neither rerun nor drop.
//
// The Pareto front lists the fitting plans no other beats on both time and
// memory, up to twice the fastest plan's time (slower trades are not plans
// anyone runs, and the bound below could not prune them).
//
// A plan is not simulated when a lower bound of its peak exceeds the
// device: the average stage's model states plus its share of what one
// micro-batch keeps, kept / pp, times m under GPipe. Under 1F1B (and ZB-H1,
// which keeps as much and more) stage s holds c_s = min(m, pp - s)
// micro-batches at the end of its warm-up: with a_s its share of the kept
// activations and b_s of the states S (pp x the average stage's), the peak
// is at least max_s (b_s S + a_s c_s kept), and weighting stage s by 1/c_s
// bounds that by (S / min(m, pp) + kept) / sum_s 1/c_s, whatever the split
// (the weights cancel c_s; sum_s b_s / c_s >= 1 / min(m, pp)). The larger of
// the two bounds is taken; interleaving keeps the first.
//
// A plan left is then bounded stage by stage (plan_bounds), from its layers
// priced once per shape (price_plan_layers, then layer_costs: what each
// keeps its stage's compute stream busy with, and keeps for its backward)
// and split into chunks as partition() splits them. Memory: a stage's
// passes run one after another, a forward keeping its layers' kept bytes
// until its backward, which under ZB-H1 leaves what the weight pass needs
// (weight_grad_hold) until that pass. So at the start of its first backward
// stage s holds every chunk forward its schedule ran before it
// (schedule_shape: pp - s micro-batches under 1F1B, all m under GPipe,
// Korthikanti's warm-up under interleaving), and under ZB-H1 it holds at
// each moment the forwards and the deferred weight passes the order leaves
// pending (the last stage: its forward beside pp - 1 weight passes),
// beside its resident states (parameters, optimizer states, gradients
// where resident: ZeRO-2 and up or Megatron's fp32 buffer; DDP's buckets;
// DeepSpeed ZeRO-2's buffers, allocated as the backward starts);
// and at its step all its states. The larger over the stages and over the
// two bounds is the plan's.
//
// The plans are simulated in the order of a lower bound of their time. Let
// x_s be what stage s's compute stream runs for one micro-batch: its
// chunks' forward and backward kernels, recompute, tensor-parallel
// collectives (under tp_comm_overlap the part the GEMMs leave exposed, as
// the lowering prices it: Note [TP comm overlap]) and expert all-to-alls.
// Stage s runs its m x_s on its compute stream, one pass after
// another (under the expert-parallel overlap the all-to-alls a_s of a
// micro-batch leave it for a stream of their own, which runs its m a_s
// one after another as well, between the same two ends: Note
// [Expert-parallel overlap] in lowering/layer_stage.cpp; the busier stream
// counts, m max(x_s, a_s)); its first pass (a forward of chunk c) waits
// for micro-batch 0's
// forwards through every virtual stage before c x pp + s, and after its
// last (a backward of chunk c') come that micro-batch's backwards through
// every virtual stage before c' x pp + s: the iteration takes at least
// their sum for every s. Under 1F1B and GPipe that is sum_{s' < s} x_s' +
// m x_s, for uniform stages (m + p - 1) X / p (Narayanan et al. 2021,
// section 2.2.1); interleaving waits for and ends on chunk 0, so its bubble
// is (p - 1) / v of a stage's (section 2.2.2); ZB-H1 ends on a weight pass
// (Note [Zero bubble] in lowering/lower.cpp) and counts only the forwards
// before. Whatever the split, the bound is at least m X / pp (X = sum x_s).
// Where the distributed optimizer gathers in the step (ZeRO-1 without
// overlap_param_gather), a stage's all-gather of its updated parameters
// follows its step, which follows its last pass: the stage ends no earlier
// than that gather after it (at least one collective of its dense
// parameters over the lowering's group, step_gather_bound), while the
// later chunks' backwards after it run on the other stages (so, where
// the base plan holds the gather in the step, its plans prune sooner).
// On a device whose compute slows beside its
// collectives (Note [Interference] in engine/executor.cpp: a kernel's
// compute-bound part 1 + c_sm times as long, its memory-bound part 1 + c_hbm
// times), a one-stage plan whose data-parallel collectives on one stream
// take C at least runs the time O they overlap its kernels for
// O c / (1 + c) longer, and the collectives alone for whatever of C
// overlaps nothing. The cheapest overlap is with the serial collectives on
// the compute stream (tensor parallelism's: nothing slows), then with the
// kernels of the smaller c, up to what they can cover (1 + c times their
// time), then with the other; the iteration takes W plus the least that
// costs (interference_time_bound). Splitting each kernel into its two
// parts only lowers what it is charged (its loss is convex in the overlap
// that way, linear as the executor runs it, with the same ends), and c_hbm
// is the least over the plan's collectives, so the sum stays a bound. The
// optimizer step waits for every reduction: it overlaps none. C is priced as
// one collective of all the bytes per reduction (a ring's time grows with
// the bytes and each collective pays its latency): ZeRO-3's two gathers of
// the layers it gathers (less the persistence threshold's allowance a
// layer) and its reduce-scatter, every micro-batch, on one stream (Note
// [One process group]); ZeRO-2's reduce-scatter every micro-batch; DDP's
// all-reduce and ZeRO-1's reduce-scatter once; dense parameters only. A
// plan is skipped when `top` fitting plans found so far are faster than
// its bound (it cannot rank) and it cannot join the front either (its
// bound is over twice the fastest found, or a plan found is faster than
// its bound and no larger than its memory bound: the front keeps a plan
// only where every faster plan is larger): the ranking and the front are
// those of simulating every plan, which tests/sim/test_search.cpp checks
// on a smaller case. Which plans
// get skipped depends on the order the threads finish in; what is
// reported does not.
#include "dtsim/sim/search.hpp"

#include <algorithm>
#include <functional>
#include <atomic>
#include <chrono>
#include <cmath>
#include <exception>
#include <iterator>
#include <limits>
#include <map>
#include <tuple>
#include <mutex>
#include <optional>
#include <sstream>
#include <thread>

#include <fmt/format.h>

#include "dtsim/sim/buckets.hpp"
#include "dtsim/sim/config_io.hpp"
#include "dtsim/sim/error.hpp"
#include "dtsim/sim/json_writer.hpp"
#include "dtsim/sim/lowering.hpp"
#include "dtsim/sim/predict.hpp"
#include "dtsim/sim/rules.hpp"
#include "lowering/lowering_common.hpp"
#include "lowering/zero3_coordinator.hpp"

namespace dtsim::sim {
namespace {

// Note [Bounds in parallel]
// Before simulating, the search prices and bounds every candidate (Note
// [Search], Note [Search recompute]): for DeepSeek-V3 on 256 GB200s two
// thirds of its time, in one thread while the other core idled. The work
// is one pure function a plan, memoised by what each part reads, so the
// threads share the memos: the first to ask for a key computes its value,
// outside the lock, and those asking for it meanwhile wait for it. Each
// value is a function of its key alone, so which thread computes it, and
// in what order the plans are visited, changes nothing reported (eight
// searches' outputs identical; ThreadSanitizer silent on four). On the
// 2-core development machine the block-recompute filter ran 15-35% faster
// on two threads than on one: building layer lists and pricing them is
// allocation-bound there, and its two cores share much.

/// A memo several threads fill: each key's value made once (Note [Bounds
/// in parallel]); references to values stay valid while it lives.
template <class K, class V>
class OnceMap {
 public:
  template <class Make>
  const V& get(const K& key, Make&& make) {
    std::shared_ptr<Slot> slot;
    {
      std::lock_guard<std::mutex> lock(mu_);
      std::shared_ptr<Slot>& at = slots_[key];
      if (!at) at = std::make_shared<Slot>();
      slot = at;
    }
    std::call_once(slot->once, [&] { slot->value = make(); });
    return slot->value;
  }

 private:
  struct Slot {
    std::once_flag once;
    V value{};
  };
  std::mutex mu_;
  std::map<K, std::shared_ptr<Slot>> slots_;
};

/// Runs body(i) for i in [0, n) on `threads` threads (the calling one
/// among them), in runs of consecutive i: neighbouring plans mostly ask
/// the memos for the same keys, and a thread handed the next plan would
/// wait for the value its neighbour is making (Note [Bounds in parallel]).
template <class Body>
void parallel_for(std::size_t n, unsigned threads, Body&& body) {
  const std::size_t run = std::max<std::size_t>(1, n / (16 * std::max(1u, threads)));
  std::atomic<std::size_t> next{0};
  std::mutex error_mutex;
  std::exception_ptr error;
  auto work = [&] {
    try {
      for (std::size_t first; (first = next.fetch_add(run)) < n;) {
        for (std::size_t i = first; i < std::min(n, first + run); ++i) body(i);
      }
    } catch (...) {
      std::lock_guard<std::mutex> lock(error_mutex);
      if (!error) error = std::current_exception();
      next.store(n);
    }
  };
  std::vector<std::thread> pool;
  for (unsigned t = 1; t < std::min<std::size_t>(threads, n); ++t) pool.emplace_back(work);
  work();
  for (auto& t : pool) t.join();
  if (error) std::rethrow_exception(error);
}

std::string schedule_text(const ResolvedPlan& p) {
  if (p.pp == 1) return "-";
  std::string s = to_string(p.schedule);
  if (p.virtual_stages > 1) s += " v" + std::to_string(p.virtual_stages);
  return s;
}

std::string sharding_text(const ResolvedPlan& p) {
  if (p.fsdp) return std::string("fsdp ") + to_string(p.spec.fsdp);
  if (p.zero1_gathers_in_forward()) return "zero1 fwd gather";  // Note [Overlapped parameter gather]
  return p.zero_stage == 0 ? "ddp" : "zero" + std::to_string(p.zero_stage);
}

std::string offload_text(const ResolvedPlan& p) {
  if (p.offload_params == Offload::kCpu) return "opt+params";
  return p.offload_optimizer == Offload::kCpu ? "opt" : "-";
}

/// A left-aligned table column `w` wide: the text, padded, and at least one
/// space before the next column.
std::string pad(const std::string& s, std::size_t w) { return fmt::format("{:<{}} ", s, w - 1); }

/// What names `twin` apart from `shown`, its twin (Note [Search twins]).
std::string twin_name(const ResolvedPlan& twin, const ResolvedPlan& shown) {
  std::string s;
  if (twin.cp != shown.cp) s = fmt::format("dp {} x cp {} at mb {}", twin.dp, twin.cp, twin.micro_batch);
  if (sharding_text(twin) != sharding_text(shown)) s += (s.empty() ? "" : ", ") + sharding_text(twin);
  if (twin.spec.placement != shown.spec.placement) s += (s.empty() ? "" : ", ") + std::string("placement ") + twin.spec.placement;
  return s.empty() ? "another name" : s;
}

}  // namespace

bool same_plan(const SearchEntry& a, const SearchEntry& b) {
  // ResolvedPlan::zero_stage is already the effective stage (FSDP mapped onto
  // it); the FSDP flag and the placement only name how the same work is laid
  // out, and equal time and peak say the layout changed nothing. dp and cp
  // may trade GPUs where each GPU keeps its tokens a micro-step: with dp cp
  // equal, mb s / cp equal is mb dp equal (s is in the key).
  auto key = [](const ResolvedPlan& p) {
    return std::make_tuple(p.dp * p.cp, p.tp, p.pp, p.ep, p.etp, p.cp_comm, p.flash_attention,
                           p.micro_batch * p.dp, p.grad_accum, p.global_batch, p.seq_len,
                           p.precision, p.zero_stage, p.hybrid_shard,
                           p.offload_optimizer, p.offload_params, p.recompute, p.recompute_blocks, p.pp > 1 ? p.schedule : Schedule::k1f1b,
                           p.virtual_stages, p.sequence_parallel, p.tp_comm_overlap, p.optimizer,
                           p.zero1_gathers_in_forward());
  };
  return a.iteration_time == b.iteration_time && a.peak == b.peak && key(a.plan) == key(b.plan);
}

namespace {

/// The block counts the search tries for Megatron's block recompute
/// (Note [Block recompute]): a quarter, a half and three quarters of the
/// blocks a model chunk holds (rounded, distinct, at least 1 and fewer than
/// all, which full recompute is).
std::vector<int> block_recompute_counts(int blocks, int chunks) {
  std::vector<int> out;
  const int k = (blocks + chunks - 1) / std::max(1, chunks);
  for (int quarter : {1, 2, 3}) {
    const int n = std::max(1, (k * quarter + 2) / 4);
    if (n < k && (out.empty() || out.back() != n)) out.push_back(n);
  }
  return out;
}

}  // namespace

std::vector<PlanSpec> enumerate_plans(const Model& model, const ClusterSpec& cluster, const SearchOptions& o) {
  const int gpus = o.gpus == 0 ? cluster.gpus() : o.gpus;
  if (gpus < 1 || gpus > cluster.gpus() || cluster.gpus() % gpus != 0) {
    throw ConfigError("--gpus " + std::to_string(gpus) + ": must divide the " + std::to_string(cluster.gpus()) +
                      " GPUs of " + cluster.name);
  }
  const std::int64_t batch = o.global_batch == 0 ? 4LL * gpus : o.global_batch;
  // The valid values come from the rules table; what the search leaves
  // out of them is its own choice, said where it is made.
  const PlanRules rules(model, cluster, gpus);
  // Knobs the base plan sets are held; the others are walked: context
  // parallelism (cp_values), attention (eager and fused, where the model
  // has attention) and the 16-, 8- and 4-bit precisions the device runs.
  auto set = [&](const char* key) { return o.base.origins.where.count(std::string("plan.") + key) > 0; };
  const std::int64_t seq = o.base.seq_len == 0 ? model.max_seq_len() : o.base.seq_len;
  // Where the device runs fused attention, eager is slower and larger at
  // once: the search tries it only where auto would pick it (CPUs, fp32).
  std::vector<Attention> attentions{o.base.attention};
  if (!set("attention") && rules.attentions().size() > 1) attentions = {Attention::kEager, Attention::kFlash};
  std::vector<Precision> precisions{o.base.precision};
  if (set("precision")) {
    // Note [Fixed knobs]: a precision the device cannot run is refused with
    // those it can, as predict refuses it, not searched into an empty ranking.
    const std::vector<Precision> valid = rules.precisions();
    if (std::find(valid.begin(), valid.end(), o.base.precision) == valid.end()) {
      std::string names;
      for (Precision p : valid) names += (names.empty() ? "" : ", ") + std::string(to_string(p));
      const std::string& where = o.base.origins.where.at("plan.precision");  // "--set plan.precision" or "p.yaml:3"
      throw ConfigError(where + (where.rfind("--set ", 0) == 0 ? ": " : ": plan.precision: ") + std::string(to_string(o.base.precision)) +
                        " is not a precision " + cluster.device.name + " runs; valid: " + names);
    }
  }
  if (!set("precision")) {
    precisions.clear();
    for (Precision p : rules.precisions()) {
      // fp16 only where bf16 is missing (bf16 needs no loss scaling); fp32
      // never; none that runs no faster than fp32 (CPUs).
      if (p == Precision::kFp32 || (p == Precision::kFp16 && cluster.device.peak_bf16 > 0)) continue;
      if (cluster.device.peak_for(p) <= cluster.device.peak_fp32) continue;
      precisions.push_back(p);
    }
    if (precisions.empty()) precisions.push_back(o.base.precision);
  }
  // Note [Fixed knobs]: a shape knob given by --set (plan.tp=2) holds every
  // candidate to it; a degree the rules never allow is refused with those
  // they do, not searched into an empty ranking. A knob a base plan's file
  // gives (the explorer's scenario, a plan file) is where the search
  // starts, not a bound: only --set holds, and SearchOptions::hold (what a
  // framework's config cannot set otherwise: axolotl's pp 1). A held
  // schedule holds the pipelines; a plan of one stage runs none.
  const auto held = [&](const char* key) {
    if (std::find(o.hold.begin(), o.hold.end(), key) != o.hold.end()) return true;
    const auto it = o.base.origins.where.find(std::string("plan.") + key);
    return it != o.base.origins.where.end() && it->second.rfind("--set ", 0) == 0;
  };
  const std::vector<int> tps = rules.tp_values();
  if (held("tp") && std::find(tps.begin(), tps.end(), o.base.tp) == tps.end()) {
    throw ConfigError(o.base.origins.of("plan.tp") + ": " + std::to_string(o.base.tp) + " is not a tensor-parallel degree " +
                      model.name() + " on " + std::to_string(gpus) + " GPUs allows; valid: " + join_values(tps));
  }
  // The held knobs' checks, made once: a candidate keeps each held value.
  std::vector<std::function<bool(const PlanSpec&)>> checks;
  const auto hold = [&](const char* key, auto field) {
    if (held(key)) checks.push_back([field, want = field(o.base)](const PlanSpec& p) { return field(p) == want; });
  };
  hold("dp", [](const PlanSpec& p) { return p.dp; });
  hold("micro_batch", [](const PlanSpec& p) { return p.micro_batch; });
  hold("grad_accum", [](const PlanSpec& p) { return p.grad_accum; });
  hold("zero_stage", [](const PlanSpec& p) { return p.zero_stage; });
  hold("fsdp", [](const PlanSpec& p) { return p.fsdp; });
  // A held schedule binds the pipelines: a plan of one stage runs none.
  if (held("schedule")) checks.push_back([want = o.base.schedule](const PlanSpec& p) { return p.pp <= 1 || p.schedule == want; });
  hold("virtual_stages", [](const PlanSpec& p) { return p.virtual_stages; });
  hold("recompute", [](const PlanSpec& p) { return p.recompute; });
  hold("sequence_parallel", [](const PlanSpec& p) { return p.sequence_parallel; });
  hold("offload_optimizer", [](const PlanSpec& p) { return p.offload_optimizer; });
  hold("offload_params", [](const PlanSpec& p) { return p.offload_params; });
  hold("placement", [](const PlanSpec& p) { return p.placement; });
  hold("recompute_method", [](const PlanSpec& p) { return p.recompute_method; });
  hold("recompute_num_layers", [](const PlanSpec& p) { return p.recompute_num_layers; });
  const bool hold_tp = held("tp"), hold_pp = held("pp");
  const auto fixed = [&](const PlanSpec& p) { return std::all_of(checks.begin(), checks.end(), [&](const auto& c) { return c(p); }); };
  std::vector<PlanSpec> out;
  for (int tp : tps) {
    if (hold_tp && tp != o.base.tp) continue;
    // Context parallelism down to 1,024 tokens of a sequence per rank: below
    // that the K/V exchange outgrows the attention it hides behind.
    std::vector<int> cps = set("cp") ? std::vector<int>{o.base.cp} : rules.cp_values(tp, seq);
    if (!set("cp")) cps.erase(std::remove_if(cps.begin(), cps.end(), [&](int c) { return c > 1 && seq / c < 1024; }), cps.end());
    for (int pp : rules.pp_values(tp)) {
     if (hold_pp && pp != o.base.pp) continue;
     for (int cp : cps) {
      if (gpus % (tp * pp * cp) != 0) continue;
      // Every GPU is used: dp is the rest.
      const int dp = gpus / (tp * pp * cp);
      if (batch % dp != 0) continue;
      const std::int64_t per_replica = batch / dp;
      // The micro-batch sizes that divide a replica's batch, in ascending
      // order: found up to its square root, not counted to it (a batch of
      // 2^40 samples would take 10^11 steps).
      std::vector<std::int64_t> mbs, large;
      for (std::int64_t d = 1; d <= per_replica / d; ++d) {
        if (per_replica % d != 0) continue;
        mbs.push_back(d);
        if (d != per_replica / d) large.push_back(per_replica / d);
      }
      mbs.insert(mbs.end(), large.rbegin(), large.rend());
      for (const std::int64_t mb : mbs) {
        const std::int64_t m = per_replica / mb;
        struct Sched {
          Schedule s;
          int v;
        };
        std::vector<Sched> scheds;
        for (Schedule sc : rules.schedules(pp)) {
          // Micro-batched schedules only (the naive split idles all but one stage).
          if (sc == Schedule::kNaive) continue;
          if (sc != Schedule::kInterleaved) {
            scheds.push_back({sc, 0});
            continue;
          }
          // A few chunk counts, not every one the rules allow.
          for (int v : rules.virtual_stage_values(pp, m)) {
            if (v == 2 || v == 3 || v == 4 || v == 6 || v == 8) scheds.push_back({Schedule::kInterleaved, v});
          }
        }
        struct Shard {
          int zero;
          FsdpMode fsdp;
        };
        // Sharding over one replica saves nothing: only DDP there. FSDP is
        // tried as FULL_SHARD (the others are ZeRO stages already tried),
        // under a pipeline too (Note [FSDP under a pipeline]).
        std::vector<Shard> shards;
        for (int z : rules.zero_stages(pp)) {
          if (dp > 1 || z == 0) shards.push_back({z, FsdpMode::kNone});
        }
        const std::vector<FsdpMode> fsdp_modes = rules.fsdp_modes(pp);
        if (dp > 1 && std::find(fsdp_modes.begin(), fsdp_modes.end(), FsdpMode::kFullShard) != fsdp_modes.end()) {
          shards.push_back({0, FsdpMode::kFullShard});
        }
        const std::vector<Recompute> recomputes = rules.recomputes();
        for (const Sched& sc : scheds) {
          for (const Shard& sh : shards) {
            const int stage = sh.fsdp == FsdpMode::kFullShard ? 3 : sh.zero;
            // Parameters are offloaded only together with the optimizer.
            std::vector<std::pair<Offload, Offload>> offloads;
            for (Offload opt : rules.optimizer_offloads(stage, pp)) {
              for (Offload par : rules.param_offloads(stage)) {
                if (par == Offload::kCpu && opt != Offload::kCpu) continue;
                offloads.push_back({opt, par});
              }
            }
            // Megatron's overlapped parameter gather wherever the rules allow
            // it (the distributed optimizer), unless set: it is never slower
            // and no larger (Note [Search]).
            const std::vector<bool> allowed = rules.overlap_param_gather_values(sh.zero, sh.fsdp != FsdpMode::kNone,
                                                                                o.base.overlap, o.base.runtime);
            const bool gather = allowed.back() && (!set("overlap_param_gather") || o.base.overlap_param_gather);
            for (const auto& [opt, par] : offloads) {
              for (Recompute rc : recomputes) {
                // Placement: tp innermost, then pp or (a second variant when both
                // exist) dp, so a stage's data-parallel peers share a node.
                for (const bool dp_inner : {false, true}) {
                  if (dp_inner && (pp == 1 || dp == 1)) continue;
                  for (bool sp : rules.sequence_parallel_values(tp, cp, seq)) {
                   for (Attention at : attentions) {
                    // Selective recompute of fused attention drops nothing,
                    // unless the plan names modules beyond the core.
                    if (at == Attention::kFlash && rc == Recompute::kSelective &&
                        (o.base.recompute_modules & ~kRecomputeCoreAttn) == 0) {
                      continue;
                    }
                   for (Precision pr : precisions) {
                    if (!set("attention") && at == Attention::kEager && rules.flash_attention(Attention::kAuto, pr)) continue;
                    // torchtitan's op-level policy where it is described.
                    if (rc == Recompute::kOp && !rules.op_recompute_allowed(tp, cp, rules.flash_attention(at, pr))) continue;
                   // Expert parallelism (a dense model has only ep 1, etp tp);
                   // Megatron-Core needs sequence parallelism for ep > 1 with tp > 1.
                   for (int etp : set("etp") ? std::vector<int>{o.base.etp == 0 ? tp : o.base.etp} : rules.etp_values(tp)) {
                   for (int ep : set("ep") ? std::vector<int>{o.base.ep} : rules.ep_values(tp, cp, dp, etp, o.base.moe_experts)) {
                    if (ep > 1 && tp > 1 && !sp) continue;
                    // Note [Frozen weights under ZeRO-3]: DeepSpeed's stage 3
                    // over a frozen base without experts split (resolve refuses the rest).
                    if (ep > 1 && rules.frozen_weights() && sh.zero == 3 && sh.fsdp == FsdpMode::kNone) continue;
                    PlanSpec p = o.base;
                    p.ep = ep;
                    p.etp = etp == tp ? 0 : etp;
                    p.cp = cp;
                    p.attention = at;
                    p.precision = pr;
                    p.placement = dp_inner ? "tp,dp,pp" : "tp,pp,dp";
                    p.name = "search";
                    p.dp = dp;
                    p.tp = tp;
                    p.pp = pp;
                    p.model_parallel = 0;
                    p.schedule = sc.s;
                    p.virtual_stages = sc.v;
                    p.stage_layers.clear();
                    p.sequence_parallel = sp;
                    // Note [Search]: TP's collectives overlapped as the base plan says, where the rules allow it.
                    p.tp_comm_overlap = PlanRules::tp_comm_overlap_values(tp, sp).back() && o.base.tp_comm_overlap;
                    p.micro_batch = mb;
                    p.grad_accum = m;
                    p.global_batch = 0;
                    p.zero_stage = sh.zero;
                    p.fsdp = sh.fsdp;
                    // FSDP's own knobs, a base plan's (the explorer's scenario),
                    // back to their defaults where the candidate has no use for
                    // them: resolve would refuse every such candidate.
                    if (sh.fsdp != FsdpMode::kFullShard && sh.fsdp != FsdpMode::kHybridShard) {
                      p.fsdp_wrap = FsdpWrap::kBlocks;
                      p.fsdp_reduce_fp32 = false;
                      p.limit_all_gathers = true;
                    }
                    // Megatron-Core's precision-aware optimizer, the base
                    // plan's, where the candidate has the distributed
                    // optimizer; fp32 states elsewhere, as resolve asks.
                    // Megatron-Core's 16-bit gradient buffer likewise, to ZeRO-1.
                    p.megatron_grad_buffer = p.megatron_grad_buffer && sh.zero <= 1 && sh.fsdp == FsdpMode::kNone && opt == Offload::kNone;
                    // nanotron's fp32 accumulator likewise (Note [nanotron's fp32 accumulator]).
                    p.fp32_grad_accumulator = p.fp32_grad_accumulator && (sh.zero == 0 || (sh.zero == 1 && dp * cp == 1)) &&
                                              sh.fsdp == FsdpMode::kNone && opt == Offload::kNone;
                    if (!PlanRules::precision_aware_allowed(sh.zero, sh.fsdp != FsdpMode::kNone, effective_optimizer(p.optimizer, p.sgd_momentum))) {
                      p.use_precision_aware_optimizer = false;
                      p.main_params_dtype = p.exp_avg_dtype = p.exp_avg_sq_dtype = StateDtype::kFp32;
                    }
                    const std::vector<int> versions = PlanRules::fsdp_versions(sh.fsdp, p.overlap, p.limit_all_gathers);
                    if (std::find(versions.begin(), versions.end(), p.fsdp_version) == versions.end()) p.fsdp_version = 1;
                    if (rules.frozen_weights() && sh.fsdp == FsdpMode::kFullShard) {
                      // Note [Frozen weights under FSDP]: FSDP2 alone shards a
                      // fine-tune's frozen weights, on one stage without experts
                      // split (resolve refuses the rest).
                      if (versions.back() != 2 || ep > 1) continue;
                      p.fsdp_version = 2;
                    }
                    p.offload_optimizer = opt;
                    p.offload_params = par;
                    p.overlap_param_gather = gather;
                    p.recompute = rc;
                    // The base plan's modules go with selective recompute only.
                    p.recompute_modules_set = p.recompute_modules_set && rc == Recompute::kSelective;
                    // Note [Expert-parallel overlap]: as the base plan says, where the rules allow it.
                    p.overlap_moe_expert_parallel_comm =
                        PlanRules::ep_overlap_values(ep, pp, sc.s, rc, pr, std::max(sh.zero, zero_stage_of(sh.fsdp)) == 3).back() &&
                        o.base.overlap_moe_expert_parallel_comm;
                    p.recompute_method = RecomputeMethod::kUniform;
                    p.recompute_num_layers = 0;
                    // Not searched (Note [Activation offload]): its memory
                    // is not in the bound that prunes.
                    p.cpu_offloading_num_layers = 0;
                    p.fine_grained_activation_offloading = false;  // nor fine-grained (Note [Fine-grained offload])
                    p.offload_modules = 0;
                    p.enable_activation_offloading = false;  // nor torchtune's (Note [Saved-tensor offload])
                    p.partition_activations = false;  // nor DeepSpeed's (Note [DeepSpeed checkpoints])
                    p.cpu_checkpointing = false;
                    // The token dispatcher for this ep and etp, or the base plan's.
                    const std::vector<MoeDispatcher> dispatchers =
                        set("moe_dispatcher") ? std::vector<MoeDispatcher>{o.base.moe_dispatcher} : rules.dispatcher_values(ep, etp, o.base.moe_experts);
                    for (const MoeDispatcher d : dispatchers) {
                      PlanSpec pd = p;
                      pd.moe_dispatcher = d;
                      // Megatron-Core overlaps expert-parallel exchanges under alltoall and flex only.
                      pd.overlap_moe_expert_parallel_comm = p.overlap_moe_expert_parallel_comm && d != MoeDispatcher::kAllGather;
                      if (rc == Recompute::kFull) {
                        // Note [Block recompute]: Megatron's block method at a
                        // quarter, half and three quarters of a chunk's blocks,
                        // between no recompute and every block.
                        for (int n : block_recompute_counts(model.blocks(), pp * std::max(1, sc.v))) {
                          PlanSpec q = pd;
                          q.recompute_method = RecomputeMethod::kBlock;
                          q.recompute_num_layers = n;
                          if (fixed(q)) out.push_back(std::move(q));
                        }
                      }
                      if (fixed(pd)) out.push_back(std::move(pd));
                    }
                   }
                   }
                   }
                   }
                  }
                }
              }
            }
          }
        }
      }
     }
    }
  }
  return out;
}

TimeNs interference_time_bound(const ResolvedPlan& p, std::int64_t dense_params, int layers, const ClusterSpec& cluster,
                               const CommModel& comm, const LayerCosts& work, std::int64_t persistent, std::int64_t root) {
  // Note [Search]: what overlapping C of collectives adds to W at least, for a one-stage plan.
  const double slow = cluster.device.comm_slowdown;
  if (slow <= 0 || !cluster.device.comm_overlaps_compute || p.pp > 1 || p.dp * p.cp <= 1) return 0;
  const int per_node = cluster.gpus_per_node;
  const std::int64_t dense = dense_params / p.tp;
  const Bytes gw = gradient_element_bytes(p);
  const CommGroup dp_group = data_group(p.mesh, per_node);
  // The groups the lowering reduces and shards over (layer_stage.cpp, setup_groups).
  const CommGroup shard = p.cp > 1 ? dp_group : axis_group(p.mesh, Axis::kDp, per_node, std::max(1, p.shard_group));
  const double m = static_cast<double>(p.grad_accum);
  // The HBM's slowdown beside each collective at the least bandwidth its
  // link class can give a rank (the network shared by every GPU of the
  // node); the smallest over the plan's collectives.
  double hbm = std::numeric_limits<double>::infinity();
  auto least_hbm = [&](LinkClass link) {
    const BytesPerSec rate = link == LinkClass::kIntraNode
                                 ? cluster.intra_node.rate()
                                 : cluster.inter_node.rate() * cluster.nics_per_node / std::max(1, per_node);
    hbm = std::min(hbm, cluster.device.comm_hbm_contention * hbm_slowdown(cluster.device, rate));
  };
  auto cost = [&](CollectiveOp op, Bytes bytes, const CommGroup& g) {
    if (bytes <= 0) return 0.0;
    const CollectiveCost k = comm.collective(op, bytes, g);
    least_hbm(k.link);
    return static_cast<double>(k.total());
  };
  // Expert buckets reduce over the expert data-parallel group, which may
  // cross nodes where the dense one does not: its network's HBM share too.
  if (p.ep > 1) least_hbm(LinkClass::kInterNode);
  double c = 0;
  if (p.zero3_modules()) {
    // Note [ZeRO-3 modules]: every parameter not kept whole is gathered at
    // least once a micro-step (all are released as its backward ends);
    // the backward may reuse what the forward gathered.
    const std::int64_t gathered = std::max<std::int64_t>(0, dense - persistent);
    c = m * (cost(CollectiveOp::kAllGather, static_cast<Bytes>(static_cast<double>(gathered) * detail::gathered_weight_bytes(p)), shard) +
             cost(CollectiveOp::kReduceScatter, dense * gw, shard));
  } else if (p.zero_stage == 3) {
    // The forward gathers every unit; the backward all but FSDP's root (or
    // torchtitan's last unit), which stays whole from one to the other
    // (Note [FSDP's root unit]).
    const std::int64_t gathered = std::max<std::int64_t>(0, dense - layers * kZero3PersistenceThreshold);
    const double ew = detail::gathered_weight_bytes(p);
    c = m * (cost(CollectiveOp::kAllGather, static_cast<Bytes>(static_cast<double>(gathered) * ew), shard) +
             cost(CollectiveOp::kAllGather, static_cast<Bytes>(static_cast<double>(std::max<std::int64_t>(0, gathered - root)) * ew), shard) +
             cost(CollectiveOp::kReduceScatter, dense * gw, shard));
  } else if (p.zero_stage == 2) {
    c = m * cost(CollectiveOp::kReduceScatter, dense * gw, shard);
  } else if (p.zero1_reduce_scatters()) {
    c = cost(CollectiveOp::kReduceScatter, dense * gw, shard);  // Note [ZeRO-1's reduction]
  } else {
    c = cost(CollectiveOp::kAllReduce, dense * gw, dp_group);
  }
  if (c <= 0) return 0;
  // What the collectives can overlap, cheapest first: the serial collectives
  // on the compute stream (tensor parallelism's; nothing slows), then the
  // memory-bound and the compute-bound kernels' time, each run 1 + s times
  // as long beside a collective and so losing s / (1 + s) of the time it
  // overlaps; what none of it covers runs alone.
  double left = c - std::min(c, m * work.serial_comm_ns);
  std::pair<double, double> pools[] = {{hbm / (1 + hbm), m * work.memory_ns * (1 + hbm)},
                                       {slow / (1 + slow), m * (work.kernels_ns - work.memory_ns) * (1 + slow)}};
  if (pools[1].first < pools[0].first) std::swap(pools[0], pools[1]);
  double lost = 0;
  for (const auto& [rate, room] : pools) {
    const double take = std::min(left, std::max(0.0, room));
    lost += take * rate;
    left -= take;
  }
  lost += left;
  return static_cast<TimeNs>(lost * (1 - 1e-9));
}

std::function<TimeNs(std::int64_t)> step_gather_bound(const ResolvedPlan& p, const ClusterSpec& cluster, const CommModel& comm) {
  // Note [Search]: the gather the lowering runs after the step
  // (passes/data_parallel.cpp), over its group (layer_stage.cpp and
  // chunk_stage.cpp, setup_groups), of the dense parameters alone, every
  // one at gathered_weight_bytes() at most (a bound: the GEMM weights' bytes).
  if (p.zero_stage != 1 || p.fsdp || p.shard_group <= 1 || p.zero1_gathers_in_forward()) return {};
  const int per_node = cluster.gpus_per_node;
  const CommGroup dp_group = data_group(p.mesh, per_node);
  const CommGroup group = p.pp > 1 || p.cp > 1 ? dp_group : axis_group(p.mesh, Axis::kDp, per_node, p.shard_group);
  if (group.ranks <= 1) return {};
  const double ew = detail::gathered_weight_bytes(p);
  return [&comm, group, ew](std::int64_t params) -> TimeNs {
    return params <= 0 ? 0 : comm.collective(CollectiveOp::kAllGather, static_cast<Bytes>(static_cast<double>(params) * ew), group).total();
  };
}

namespace {
/// The model's layers as `plan` splits its parameters (their shapes do not matter here).
LayerList parameter_layers(const Model& model, const ResolvedPlan& plan) {
  WorkloadShape shape;
  shape.tp = plan.tp;
  shape.ep = plan.ep;
  shape.etp = plan.etp;
  return model.shared_layers(shape);
}
}  // namespace

std::int64_t fsdp_root_elements(const Model& model, const ResolvedPlan& plan) {
  if (!plan.fsdp || plan.zero_stage != 3 || plan.fsdp_wrap == FsdpWrap::kLayers) return 0;
  const LayerList layers = parameter_layers(model, plan);
  if (plan.fsdp_wrap == FsdpWrap::kTorchtitan) return layers.empty() ? 0 : layers.back().params;
  const std::vector<bool> root = fsdp_root_layers(plan, layers);
  std::int64_t n = 0;
  for (std::size_t l = 0; l < root.size(); ++l) n += root[l] ? layers[l].params : 0;
  return n;
}

std::int64_t zero3_persistent_elements(const Model& model, const ResolvedPlan& plan) {
  if (!plan.zero3_modules()) return 0;
  return detail::persistent_elements(parameter_layers(model, plan), plan.stage3_param_persistence_threshold);
}

Bytes peak_lower_bound(Bytes stage_states, Bytes kept, int pp, std::int64_t m, Schedule schedule, Bytes made_in_backward) {
  // Note [Search].
  const std::int64_t stages = std::max(1, pp), micro = std::max<std::int64_t>(1, m);
  if (micro == 1 && made_in_backward > 0) {
    // One micro-batch: a stage's gradients appear only in its one backward,
    // as what its forward kept goes; the states whole are held at the step.
    return std::max(peak_lower_bound(stage_states - made_in_backward, kept, pp, m, schedule), stage_states);
  }
  const Bytes in_flight = stages > 1 && schedule == Schedule::kGpipe ? micro : 1;
  const Bytes average = stage_states + kept * in_flight / stages;
  if (stages == 1 || (schedule != Schedule::k1f1b && schedule != Schedule::kZbH1)) return average;
  double weights = 0;
  for (std::int64_t s = 0; s < stages; ++s) weights += 1.0 / static_cast<double>(std::min(micro, stages - s));
  const double states = static_cast<double>(stage_states) * static_cast<double>(stages);
  const double weighted = (states / static_cast<double>(std::min(micro, stages)) + static_cast<double>(kept)) / weights;
  return std::max(average, static_cast<Bytes>(std::floor(weighted)));
}

ScheduleShape schedule_shape(Schedule schedule, int pp, int virtual_stages, std::int64_t micro_batches) {
  // One stage runs its micro-batches in turn whatever the plan names (lower()).
  const Schedule order_of = pp > 1 ? schedule : Schedule::k1f1b;
  const int v = pp > 1 ? std::max(1, virtual_stages) : 1;
  ScheduleShape out;
  for (int s = 0; s < pp; ++s) {
    const std::vector<PipeStep> order = pipeline_order(order_of, pp, v, s, static_cast<int>(micro_batches));
    std::vector<ScheduleShape::Held> held;
    ScheduleShape::Held now{std::vector<int>(static_cast<std::size_t>(v), 0), std::vector<int>(static_cast<std::size_t>(v), 0)};
    bool backward_seen = false;
    for (const PipeStep& step : order) {
      const auto k = static_cast<std::size_t>(step.chunk);
      if (!step.forward && !backward_seen) {
        backward_seen = true;
        held.push_back(now);  // the start of the first backward
        if (v > 1) break;
      }
      if (step.forward) {
        ++now.forwards[k];
      } else if (step.weight) {
        --now.weights[k];
      } else {
        --now.forwards[k];
        // A deferred weight pass keeps what it needs from here (ZB-H1).
        if (order_of == Schedule::kZbH1) ++now.weights[k];
      }
      if (v == 1 && backward_seen) {
        // One chunk: keep the moments no other dominates.
        const int f = now.forwards[0], w = now.weights[0];
        bool dominated = false;
        for (const auto& h : held) dominated = dominated || (h.forwards[0] >= f && h.weights[0] >= w);
        if (dominated) continue;
        std::erase_if(held, [&](const ScheduleShape::Held& h) { return h.forwards[0] <= f && h.weights[0] <= w; });
        held.push_back(now);
      }
    }
    if (!backward_seen) held.push_back(now);
    out.held.push_back(std::move(held));
    out.first_chunk.push_back(order.empty() ? 0 : order.front().chunk);
    out.last_chunk.push_back(order.empty() || order.back().forward || order.back().weight ? -1 : order.back().chunk);
  }
  return out;
}

PlanBounds plan_bounds(const LayerCosts& layers, const ScheduleShape& shape, const ResolvedPlan& plan,
                       const ClusterSpec& cluster, const std::function<TimeNs(std::int64_t)>& after_step) {
  // Note [Search]: each stage's chain and each stage's memory at its first backward.
  const int pp = std::max(1, plan.pp), v = pp > 1 ? std::max(1, plan.virtual_stages) : 1;
  const std::size_t chunks = static_cast<std::size_t>(pp * v);
  DTSIM_ASSERT(plan.stage_layers.size() == chunks && shape.held.size() == static_cast<std::size_t>(pp),
               "plan_bounds: the split or the schedule's shape does not match the plan");
  std::vector<double> fwd(chunks, 0), bwd(chunks, 0), off(chunks, 0);
  std::vector<Bytes> kept(chunks, 0), hold(chunks, 0);
  std::vector<std::int64_t> params(chunks, 0), experts(chunks, 0);
  std::vector<Bytes> frozen(chunks, 0);
  std::size_t l = 0;
  for (std::size_t vs = 0; vs < chunks; ++vs) {
    int blocks = 0;  // of this chunk so far
    for (int k = 0; k < plan.stage_layers[vs] && l < layers.forward.size(); ++k, ++l) {
      fwd[vs] += static_cast<double>(layers.forward[l]);
      if (plan.recompute_blocks > 0 && layers.block[l]) {
        // Note [Block recompute]: the first recompute_blocks blocks of the
        // chunk rerun and keep their input, the others neither, whichever
        // way `layers` were priced (before the split: every block rerun).
        const bool rerun = blocks++ < plan.recompute_blocks;
        bwd[vs] += static_cast<double>(layers.backward[l] - layers.rerun[l] + (rerun ? layers.rerun_full[l] : 0));
        kept[vs] += rerun ? layers.checkpoint[l] : layers.whole[l];
      } else {
        bwd[vs] += static_cast<double>(layers.backward[l]);
        kept[vs] += layers.kept[l];
      }
      if (!layers.ep_off_stream.empty()) off[vs] += static_cast<double>(layers.ep_off_stream[l]);
      hold[vs] += layers.weight_hold[l];
      params[vs] += layers.params[l];
      experts[vs] += layers.expert_params[l];
      if (!layers.frozen_bytes.empty()) frozen[vs] += layers.frozen_bytes[l];
    }
  }
  const double m = static_cast<double>(std::max<std::int64_t>(1, plan.grad_accum));
  const Bytes w = element_bytes(plan.precision);
  const bool resident_grads = plan.zero_stage >= 2 || plan.grad_buffer();
  const bool ddp_buckets = plan.zero_stage == 0 && plan.grad_group() > 1 && !plan.grad_buffer();
  // Note [ZeRO-2's buffers]: DeepSpeed's, allocated as the backward starts,
  // beside everything the forwards held.
  const Bytes ipg = zero2_buffer_bytes(plan);
  double time = 0;
  Bytes peak = 0;
  for (int s = 0; s < pp; ++s) {
    // Time: the forwards of micro-batch 0 before the stage's first pass,
    // every pass of the stage on its compute stream, the backwards of its
    // last micro-batch after its last pass.
    double work = 0, a2a = 0;
    std::int64_t p = 0, e = 0;
    Bytes f = 0;
    for (int k = 0; k < v; ++k) {
      const std::size_t vs = static_cast<std::size_t>(k * pp + s);
      work += fwd[vs] + bwd[vs];
      a2a += off[vs];
      p += params[vs];
      e += experts[vs];
      f += frozen[vs];
    }
    Bytes act = 0;
    for (const ScheduleShape::Held& h : shape.held[static_cast<std::size_t>(s)]) {
      Bytes at = 0;
      for (int k = 0; k < v; ++k) {
        const std::size_t vs = static_cast<std::size_t>(k * pp + s);
        at += static_cast<Bytes>(h.forwards[static_cast<std::size_t>(k)]) * kept[vs] +
              static_cast<Bytes>(h.weights[static_cast<std::size_t>(k)]) * hold[vs];
      }
      act = std::max(act, at);
    }
    double before = 0, after = 0;
    const int first = shape.first_chunk[static_cast<std::size_t>(s)] * pp + s;
    for (int vs = 0; vs < first; ++vs) before += fwd[static_cast<std::size_t>(vs)];
    if (const int last = shape.last_chunk[static_cast<std::size_t>(s)]; last >= 0) {
      for (int vs = 0; vs < last * pp + s; ++vs) after += bwd[static_cast<std::size_t>(vs)];
    }
    // The step's gather runs on this stage while the later chunks'
    // backwards run on the others.
    const double tail = after_step ? static_cast<double>(after_step(p - e)) : 0.0;
    // Under the expert-parallel overlap the all-to-alls leave the compute
    // stream for one of their own, which runs them one after another: the
    // stage is as busy as the busier of the two.
    time = std::max(time, before + m * std::max(work, a2a) + std::max(after, tail));
    // Memory: the model states (gradients made in the backward come with
    // its first pass, after what the forwards hold is counted here), or all
    // of them at the step.
    const ModelStates ms = model_states(plan, p, e);
    const Bytes buckets = ddp_buckets ? p * w : 0;
    // Note [FSDP under a pipeline]: the stage's parameters stay gathered
    // from its first forward to the end of its last backward, and every
    // gradient has accumulated, in the reduce dtype, by its last backward.
    const bool fsdp = pp > 1 && plan.fsdp && plan.zero_stage == 3;
    const Bytes gathered = fsdp ? p * w : 0;
    const Bytes accumulated = fsdp ? p * fsdp_reduce_element_bytes(plan) : 0;
    // Note [Frozen weights]: held whole in the working precision, or
    // sharded by FSDP2 (Note [Frozen weights under FSDP]).
    const Bytes frozen_bytes = resident_frozen(plan, f);
    const Bytes resident = ms.parameters + ms.optimizer + (resident_grads ? ms.gradients : 0) + buckets + gathered + frozen_bytes;
    peak = std::max({peak, ms.total() + buckets + frozen_bytes, resident + act + ipg, resident + accumulated});
  }
  return {static_cast<TimeNs>(time * (1 - 1e-9)), peak + cluster.device.runtime_reserved};
}

namespace {

SearchResult search_plans(const Model& model, const ClusterSpec& given_cluster, const SearchOptions& o);

/// A plan's prediction as the ranking holds it: its time, rate, MFU and fullest GPU.
SearchEntry entry_of(const Prediction& p) {
  SearchEntry e;
  e.plan = p.plan;
  e.iteration_time = p.iteration_time;
  e.tokens_per_s = p.tokens_per_s;
  e.mfu = p.mfu;
  for (const auto& rm : p.ranks) e.peak = std::max(e.peak, rm.peak);
  e.fits = p.fits;
  return e;
}

/// A fitting entry's place among the ranked plans, each listed once
/// (Note [Your plan]): 1 + the listed plans faster than it, or 0 where every
/// one of the `top_k` listed is faster.
int rank_among(const SearchEntry& e, const std::vector<SearchEntry>& top, std::size_t top_k) {
  if (!e.fits) return 0;
  std::size_t faster = 0;
  while (faster < top.size() && top[faster].iteration_time < e.iteration_time) ++faster;
  return faster == top.size() && top.size() >= top_k ? 0 : static_cast<int>(faster) + 1;
}

}  // namespace

// Note [Your plan]
// A search given a plan of the user's (SearchOptions::compare: `dtsim
// search --megatron-bridge FILE` and the other framework options) answers
// "how good is the plan I have?": that plan is predicted as written, on the
// same cluster and at the same global batch as every candidate (the
// search's batch is the plan's unless --global-batch asks another, which
// the plan is then predicted at), and placed among the fitting plans by
// time. The pruning keeps its guarantee: a plan dropped by its time bound
// is slower than the top K, so a rank within K counts every faster plan.
// The search's fixed knobs are the front end's to choose (the CLI holds the
// config's numerics: precision, optimizer, sequence; Note [Search from a
// framework config] in cli/commands.cpp). A plan that holds its
// data-parallel degree on fewer GPUs than the cluster has (a torchtune
// single-device recipe's one) is searched on as many, unless --gpus says
// otherwise; a plan on another number of GPUs than the search's is not
// ranked, and the line says why.
SearchResult search(const Model& model, const ClusterSpec& cluster, const SearchOptions& o) {
  if (!o.compare) return search_plans(model, cluster, o);
  SearchOptions so = o;
  so.compare.reset();
  PlanSpec mine = *o.compare;
  if (o.global_batch != 0) {
    // The search's batch: micro-steps derived again from it.
    mine.global_batch = o.global_batch;
    mine.grad_accum = 0;
    mine.origins.where["plan.global_batch"] = "--global-batch";
  }
  std::string error;
  std::optional<ResolvedPlan> resolved;
  try {
    resolved = resolve(mine, model, cluster);
  } catch (const ConfigError& e) {
    error = e.what();
  } catch (const UnsupportedError& e) {
    error = e.what();
  }
  int gpus = o.gpus == 0 ? cluster.gpus() : o.gpus;
  if (resolved && o.gpus == 0 && resolved->gpus_used() < gpus &&
      std::find(o.hold.begin(), o.hold.end(), "dp") != o.hold.end()) {
    // A config that holds its data-parallel degree (torchtune's
    // single-device recipe: one GPU) is searched on the GPUs it runs on.
    gpus = so.gpus = resolved->gpus_used();
  }
  if (resolved && resolved->gpus_used() != gpus) {
    error = fmt::format("the plan uses {} of the cluster's {} GPUs and the search {}: search as many (--gpus {}), or set the "
                        "cluster's size",
                        resolved->gpus_used(), cluster.gpus(), gpus, resolved->gpus_used());
  } else if (resolved && o.global_batch == 0) {
    so.global_batch = resolved->global_batch;
  }
  SearchResult r = search_plans(model, cluster, so);
  r.compared_name = o.compare_name;
  if (error.empty()) {
    try {
      PredictOptions po;
      po.profile = o.profile;
      po.advise = false;
      r.compared = entry_of(predict(model, mine, cluster, po));
    } catch (const ConfigError& e) {
      error = e.what();
    } catch (const UnsupportedError& e) {
      error = e.what();
    }
  }
  r.compared_error = error;
  if (r.compared) r.compared_rank = rank_among(*r.compared, r.top, static_cast<std::size_t>(std::max(0, o.top)));
  return r;
}

namespace {

SearchResult search_plans(const Model& model, const ClusterSpec& given_cluster, const SearchOptions& o) {
  const auto t0 = std::chrono::steady_clock::now();
  // The bounds slow compute beside collectives as the predictions do: by a
  // profile's measurement where it has one (Note [Interference fit]; each
  // prediction applies it again, to the same result).
  ClusterSpec cluster = given_cluster;
  if (o.profile) o.profile->calibrate_interference(cluster.device);
  SearchResult r;
  r.model_name = model.name();
  r.cluster_name = cluster.name;
  r.gpus = o.gpus == 0 ? cluster.gpus() : o.gpus;
  r.global_batch = o.global_batch == 0 ? 4LL * r.gpus : o.global_batch;
  r.seq_len = o.base.seq_len == 0 ? model.max_seq_len() : o.base.seq_len;
  for (std::string& n : model.notes()) r.warnings.push_back(std::move(n));
  if (std::string w = long_default_sequence(model, o.base.seq_len); !w.empty()) r.warnings.push_back(std::move(w));
  r.capacity = cluster.device.memory;
  r.model_attention = attends(model);
  // A search's cost grows with the micro-batches of its candidates (their
  // schedules are walked and simulated micro-batch by micro-batch where no
  // steady state shortens them): gpt2 on 8 A100s took 24 s at 4,096
  // samples a GPU and 83 s at 16,384; 2^37 walked micro-batch sizes for
  // days. So more than 16,384 samples a GPU a step, which no plan trains,
  // is refused at once, of the batch (dtsim predict prices any one plan).
  constexpr std::int64_t kMaxPerGpu = std::int64_t{1} << 14;
  if (r.global_batch / r.gpus > kMaxPerGpu) {
    throw ConfigError("--global-batch " + std::to_string(r.global_batch) + ": " + std::to_string(r.global_batch / r.gpus) +
                      " samples a GPU a step, more than dtsim searches (" + std::to_string(kMaxPerGpu) + "); valid: up to " +
                      std::to_string(kMaxPerGpu * r.gpus) + " on " + std::to_string(r.gpus) + " GPUs (dtsim predict prices any plan)");
  }
  std::vector<PlanSpec> candidates = enumerate_plans(model, cluster, o);
  r.enumerated = candidates.size();
  // A knob set on that the rules gave no plan (enumerate_plans holds it
  // only where they allow it): said, not refused.
  auto unused = [&](const char* key, bool on, auto has, const char* needs) {
    if (!on || o.base.origins.where.count(std::string("plan.") + key) == 0) return;
    if (std::none_of(candidates.begin(), candidates.end(), has)) {
      r.warnings.push_back(fmt::format("plan.{}: true applies to no plan searched: it needs {}", key, needs));
    }
  };
  unused("overlap_param_gather", o.base.overlap_param_gather, [](const PlanSpec& p) { return p.overlap_param_gather; },
         "the distributed optimizer (zero_stage 1, tried where dp > 1) with overlap: true, outside runtime: python");
  unused("tp_comm_overlap", o.base.tp_comm_overlap, [](const PlanSpec& p) { return p.tp_comm_overlap; },
         "sequence parallelism, so tp > 1");
  unused("overlap_moe_expert_parallel_comm", o.base.overlap_moe_expert_parallel_comm,
         [](const PlanSpec& p) { return p.overlap_moe_expert_parallel_comm; },
         "experts split over ranks (ep > 1), with a pipeline the interleaved schedule, recompute other than full, a "
         "16-bit model, zero_stage 0-2");

  // Off in every candidate (enumerate_plans): said once each.
  const std::pair<const char*, std::string> not_searched[] = {
      {"cpu_offloading_num_layers", o.base.cpu_offloading_num_layers > 0 ? std::to_string(o.base.cpu_offloading_num_layers) : ""},
      {"fine_grained_activation_offloading", o.base.fine_grained_activation_offloading ? "true" : ""},
      {"enable_activation_offloading", o.base.enable_activation_offloading ? "true" : ""},
      {"partition_activations", o.base.partition_activations ? "true" : ""},
      {"cpu_checkpointing", o.base.cpu_checkpointing ? "true" : ""}};
  for (const auto& [key, value] : not_searched) {
    if (!value.empty()) {
      r.warnings.push_back(fmt::format("plan.{}: {} is not searched; every plan is searched without it (dtsim predict prices "
                                       "a plan with it)", key, value));
    }
  }
  if (candidates.empty()) {
    // The keys the base plan holds fixed narrow the split: name them too.
    std::string held;
    for (const char* key : {"plan.dp", "plan.tp", "plan.pp", "plan.cp", "plan.ep", "plan.etp", "plan.micro_batch", "plan.grad_accum",
                            "plan.schedule", "plan.virtual_stages", "plan.seq_len"}) {
      if (o.base.origins.where.count(key)) held += (held.empty() ? "" : ", ") + std::string(key);
    }
    throw ConfigError("--global-batch " + std::to_string(r.global_batch) + ": no plan of " + std::to_string(r.gpus) +
                      " GPUs splits it" + (held.empty() ? std::string() : " with what is held (" + held + ")") +
                      "; give a multiple of the GPU count" + (held.empty() ? std::string() : " or hold fewer keys"));
  }

  // Memory pruning by a lower bound of the peak (Note [Search]).
  // The trained parameters; a LoRA fine-tune's frozen weights are held in
  // the working precision besides (Note [Frozen weights] in models/src/peft.cpp).
  const std::int64_t params = model.trainable_parameters();
  const std::int64_t frozen = model.parameters() - params;
  // Routed experts' parameters, split over ep x etp ranks rather than tp;
  // the frozen weights stored in 4 or 8 bits (Layer::frozen_quantized).
  std::int64_t expert_params = 0, frozen_quantized = 0;
  Bytes frozen_quantized_bytes = 0;
  if (model.experts() > 0 || frozen > 0) {
    for (const Layer& L : model.shared_layers(WorkloadShape{})) {
      expert_params += L.expert_params;
      frozen_quantized += L.frozen_quantized;
      frozen_quantized_bytes += L.frozen_quantized_bytes;
    }
  }
  const PlanRules lb_rules(model, cluster, r.gpus);
  // The threads that bound the plans (Note [Bounds in parallel]) and simulate them.
  const unsigned bound_threads = o.threads > 0 ? static_cast<unsigned>(o.threads) : std::max(1u, std::thread::hardware_concurrency());
  OnceMap<std::tuple<std::int64_t, int, bool, Recompute, int, Attention, Precision>, Bytes> kept_cache;
  constexpr Bytes kNoFit = std::numeric_limits<Bytes>::max();  ///< a bound no GPU meets
  auto kept_per_micro = [&](const PlanSpec& s) {
    const auto key = std::make_tuple(s.micro_batch, s.tp, s.sequence_parallel, s.recompute, s.cp, s.attention, s.precision);
    return kept_cache.get(key, [&] {
      WorkloadShape shape;
      shape.micro_batch = s.micro_batch;
      shape.seq_len = s.seq_len == 0 ? model.max_seq_len() : s.seq_len;
      shape.act_bytes = element_bytes(s.precision);
      shape.fp8 = quantized_gemms(s.precision);
      shape.fp4 = s.precision == Precision::kFp4;
      shape.mask_bytes = cluster.device.dropout_mask_bytes > 0 ? cluster.device.dropout_mask_bytes : shape.act_bytes;
      shape.fused_rnn = cluster.device.fused_rnn;
      shape.tp = s.tp;
      shape.sequence_parallel = s.sequence_parallel;
      shape.cp = s.cp;
      shape.cp_all_gather = s.cp_comm == CpComm::kAllGather;
      shape.flash_attention = lb_rules.flash_attention(s.attention, s.precision);
      shape.fused_kernels = s.kernels == Kernels::kFused;  // the base plan's, for every candidate
      // The base plan's modules too (Note [Recompute modules]): what selective recompute drops.
      shape.recompute_modules = effective_recompute_modules(s.recompute == Recompute::kSelective, s.recompute_modules);
      Bytes kept = 0;
      try {
        const LayerList layers = model.shared_layers(shape);
        for (std::size_t l = 0; l < layers.size(); ++l) kept += detail::kept_bytes(layers, l, s.recompute);
      } catch (const ConfigError&) {
        // A micro-batch the model cannot describe (a layer's activations
        // past 100 TB, Note [Model size bound]): no GPU holds it, so the
        // plan is pruned by memory, not the search stopped.
        return kNoFit;
      }
      return kept;
    });
  };
  // The stage bounds (Note [Search]): each layer priced once per shape of
  // the plan resolved, split as partition() splits it, run in its
  // schedule's order.
  PredictOptions bound_options;
  bound_options.profile = o.profile;
  struct Priced {
    LayerCosts costs;
    OnceMap<std::pair<int, int>, std::vector<int>> splits;  ///< by (pp, v)
  };
  // By what the pricing reads of a plan (below): the priced layers, shared.
  OnceMap<std::tuple<std::int64_t, std::int64_t, int, bool, int, Attention, Precision, Recompute, int, int, int, int, int, int, int>,
          std::unique_ptr<Priced>>
      priced;
  // By the plan's degrees and placement where it has experts: which of
  // `priced` is its (null: not a plan).
  OnceMap<std::tuple<std::int64_t, std::int64_t, int, bool, int, Attention, Precision, Recompute, int, int, int, int, int, std::string>,
          Priced*>
      priced_cache;
  OnceMap<std::tuple<Schedule, int, int, std::int64_t>, ScheduleShape> shape_cache;
  // Note [Search]: the interference term of a one-stage plan's time bound.
  std::unique_ptr<CommModel> bound_comm;
  if (o.profile) {
    bound_comm = std::make_unique<ProfileCommModel>(o.profile, cluster, nullptr);
  } else {
    bound_comm = std::make_unique<AnalyticCommModel>(cluster);
  }
  const int model_layers = model.layer_count();
  OnceMap<std::tuple<int, std::int64_t>, std::int64_t> persistent_cache;  // by tp and threshold
  OnceMap<int, std::int64_t> root_cache;                                    // by tp
  auto interference_floor = [&](const PlanSpec& s, const LayerCosts& work) -> TimeNs {
    // Its work was priced with every block rerun: none under the block method (Note [Block recompute]).
    if (cluster.device.comm_slowdown <= 0 || !cluster.device.comm_overlaps_compute || s.pp > 1 || s.model_parallel > 1 ||
        s.recompute_method == RecomputeMethod::kBlock) {
      return 0;
    }
    try {
      const ResolvedPlan rp = resolve(s, model, cluster);
      std::int64_t persistent = 0;
      if (rp.zero3_modules()) {
        persistent = persistent_cache.get(std::make_tuple(rp.tp, rp.stage3_param_persistence_threshold),
                                          [&] { return zero3_persistent_elements(model, rp); });
      }
      std::int64_t root = 0;
      if (rp.fsdp && rp.zero_stage == 3) {
        root = root_cache.get(rp.tp, [&] { return fsdp_root_elements(model, rp); });
      }
      return interference_time_bound(rp, params - expert_params, model_layers, cluster, *bound_comm, work, persistent, root);
    } catch (const ConfigError&) {
      return 0;
    }
  };
  // The plan's bounds, or none where it cannot be priced (simulating it
  // says why) or split.
  // Note [Search]: the distributed optimizer's gather in the step, its group
  // found by resolving the plan once per layout.
  OnceMap<std::tuple<int, int, int, int, int, int, std::string, Precision, bool>, std::function<TimeNs(std::int64_t)>> gathers;
  const std::function<TimeNs(std::int64_t)> no_gather;
  // A reference into the cache: no copy a candidate.
  auto step_gather = [&](const PlanSpec& s) -> const std::function<TimeNs(std::int64_t)>& {
    if (s.zero_stage != 1 || s.fsdp != FsdpMode::kNone || s.dp * s.cp <= 1 || s.overlap_param_gather) return no_gather;
    const auto key = std::make_tuple(s.dp, s.tp, s.cp, s.pp, s.ep, s.etp, s.placement, s.precision, s.fp8_param_gather);
    return gathers.get(key, [&] {
      std::function<TimeNs(std::int64_t)> f;
      try {
        f = step_gather_bound(resolve(s, model, cluster), cluster, *bound_comm);
      } catch (const ConfigError&) {
      }
      return f;
    });
  };
  auto stage_bounds = [&](const PlanSpec& s, ResolvedPlan lb, const LayerCosts** work,
                          const std::function<TimeNs(std::int64_t)>& after_step = {}) -> std::optional<PlanBounds> {
    // What the pricing reads of the plan: its shape, and the groups its
    // serial collectives run over. Tensor parallelism's is innermost
    // whatever the rest; SyncBatchNorm's is the data-parallel group, and an
    // expert all-to-all's lies where the mesh puts it (expert_group: by the
    // degrees and the placement), so a plan with experts is resolved once
    // per layout and priced once per shape of that group (DeepSeek-V3 on
    // 2,048 H100s: 35,532 layouts priced 7,389 times, not 35,532).
    const bool experts = s.ep > 1;
    const auto key = std::make_tuple(s.micro_batch, s.seq_len, s.tp, s.sequence_parallel, s.cp, s.attention, s.precision,
                                     s.recompute,
                                     (s.tp_comm_overlap ? 1 : 0) + (s.overlap_moe_expert_parallel_comm ? 2 : 0) + 4 * static_cast<int>(s.moe_dispatcher),
                                     s.ep, s.etp,
                                     s.sync_batchnorm || experts ? s.dp : 0, experts ? s.pp : 0,
                                     experts ? s.placement : std::string());
    Priced* const found = priced_cache.get(key, [&]() -> Priced* {
      try {
        ResolvedPlan r = resolve(s, model, cluster);
        r.recompute_blocks = 0;  // every block rerun, the same for every N: plan_bounds applies the block method
        const CommGroup g = experts ? expert_dispatch_group(r.mesh, r.etp, r.ep, r.moe_dispatcher, cluster.gpus_per_node) : CommGroup{};
        const auto shape = std::make_tuple(s.micro_batch, s.seq_len, s.tp, s.sequence_parallel, s.cp, s.attention, s.precision,
                                           s.recompute, std::get<8>(key), s.ep, s.etp, s.sync_batchnorm ? s.dp : 0, g.ranks,
                                           g.ranks_per_node, g.groups_per_node);
        return priced
            .get(shape,
                 [&] {
                   auto q = std::make_unique<Priced>();
                   q->costs = layer_costs(price_plan_layers(model, r, cluster, bound_options), r);
                   return q;
                 })
            .get();
      } catch (const ConfigError&) {
        return nullptr;  // not a plan (simulating it says so); another of its shape may be
      }
    });
    if (found == nullptr) return std::nullopt;
    Priced& p = *found;
    *work = &p.costs;
    const int pp = std::max(1, s.pp);
    const int v = pp > 1 && s.schedule == Schedule::kInterleaved ? (s.virtual_stages == 0 ? 2 : s.virtual_stages) : 1;
    if (static_cast<std::size_t>(pp * v) > p.costs.costs.size()) return std::nullopt;
    const std::vector<int>& split = p.splits.get({pp, v}, [&] { return balance_layers(p.costs.costs, pp * v); });
    const Schedule schedule = pp > 1 ? s.schedule : Schedule::k1f1b;
    const ScheduleShape& order =
        shape_cache.get(std::make_tuple(schedule, pp, v, s.grad_accum), [&] { return schedule_shape(schedule, pp, v, s.grad_accum); });
    lb.dp = s.dp;
    lb.pp = pp;
    lb.virtual_stages = v;
    lb.schedule = schedule;
    lb.grad_accum = s.grad_accum;
    lb.stage_layers = split;
    return plan_bounds(p.costs, order, lb, cluster, after_step);
  };
  auto lower_bound_plan = [&](const PlanSpec& s) {
    ResolvedPlan lb;
    lb.precision = s.precision;
    lb.optimizer = effective_optimizer(s.optimizer, s.sgd_momentum);
    lb.zero_stage = s.fsdp == FsdpMode::kFullShard ? 3 : s.zero_stage;
    lb.shard_group = lb.zero_stage == 0 ? 1 : s.dp * s.cp;
    const std::int64_t etp = s.etp == 0 ? s.tp : s.etp;
    lb.expert_shard_group = lb.zero_stage == 0 ? 1 : s.tp * s.cp * s.dp / (s.ep * etp);
    lb.offload_optimizer = s.offload_optimizer;
    lb.offload_params = s.offload_params;
    lb.accumulate_allreduce_grads_in_fp32 = s.accumulate_allreduce_grads_in_fp32 && lb.zero_stage <= 1;
    lb.megatron_grad_buffer = s.megatron_grad_buffer && lb.zero_stage <= 1 && s.fsdp == FsdpMode::kNone && s.offload_optimizer == Offload::kNone;
    lb.fp32_grad_accumulator = s.fp32_grad_accumulator && (lb.zero_stage == 0 || (lb.zero_stage == 1 && lb.shard_group <= 1)) &&
                               s.fsdp == FsdpMode::kNone && s.offload_optimizer == Offload::kNone;
    lb.master_weights = s.master_weights;
    lb.optim_bits = s.optim_bits;  // Note [8-bit optimizer]
    lb.optimizer_in_backward = s.optimizer_in_backward;  // Note [Optimizer in backward]
    // Note [Precision-aware optimizer]: its states, where resolve allows it.
    lb.use_precision_aware_optimizer = s.use_precision_aware_optimizer && PlanRules::precision_aware_allowed(lb.zero_stage, s.fsdp != FsdpMode::kNone, lb.optimizer);
    lb.main_params_dtype = s.main_params_dtype;
    lb.exp_avg_dtype = s.exp_avg_dtype;
    lb.exp_avg_sq_dtype = s.exp_avg_sq_dtype;
    lb.store_param_remainders = s.store_param_remainders;
    lb.recompute_blocks = s.recompute_method == RecomputeMethod::kBlock ? s.recompute_num_layers : 0;
    // Note [FSDP under a pipeline]: what the stage bounds add for it (plan_bounds).
    lb.fsdp = s.pp > 1 && s.fsdp == FsdpMode::kFullShard;
    lb.fsdp_reduce_fp32 = lb.fsdp && s.fsdp_reduce_fp32;
    return lb;
  };
  // The first bound of a plan's peak: its average stage's states and what
  // its micro-batches in flight keep.
  auto states_bound = [&](const PlanSpec& s) {
    const ResolvedPlan lb = lower_bound_plan(s);
    const std::int64_t etp = s.etp == 0 ? s.tp : s.etp;
    const std::int64_t rank_experts = expert_params / (static_cast<std::int64_t>(s.ep) * etp * s.pp);
    const ModelStates ms =
        model_states(lb, (params - expert_params) / (static_cast<std::int64_t>(s.tp) * s.pp) + rank_experts, rank_experts);
    const Bytes kept = kept_per_micro(s);
    if (kept == kNoFit) return kNoFit;
    // Frozen weights: a rank's share is at least theirs over the widest
    // split, and over the shard group too where FSDP2 shards them (Note
    // [Frozen weights under FSDP]), none where it offloads them.
    const Bytes frozen_bytes = resident_frozen(lb, frozen_weight_bytes(frozen, frozen_quantized, frozen_quantized_bytes, element_bytes(s.precision)) /
                                                       (static_cast<std::int64_t>(s.pp) * std::max<std::int64_t>(s.tp, s.ep * etp)));
    // The gradients DDP and ZeRO-1 make in the backward (not Megatron's
    // buffer, not ZeRO-2's and -3's partitions, allocated from the start).
    const bool made = lb.zero_stage <= 1 && !lb.grad_buffer();
    return peak_lower_bound(ms.total() + frozen_bytes, kept, s.pp, s.grad_accum, s.schedule, made ? ms.gradients : 0) +
           cluster.device.runtime_reserved;
  };
  // Note [Search recompute]: Megatron's block method only where the same
  // plan without recompute cannot fit by its bounds and with every block
  // rerun may.
  {
    const auto with = [](PlanSpec s, Recompute rc) {
      s.recompute = rc;
      s.recompute_modules_set = s.recompute_modules_set && rc == Recompute::kSelective;
      s.recompute_method = RecomputeMethod::kUniform;
      s.recompute_num_layers = 0;
      return s;
    };
    const auto may_fit = [&](const PlanSpec& s) {
      if (states_bound(s) > cluster.device.memory) return false;
      const LayerCosts* work = nullptr;
      const auto b = stage_bounds(s, lower_bound_plan(s), &work);
      return !b || b->peak <= cluster.device.memory;
    };
    const std::size_t before = candidates.size();
    // Note [Bounds in parallel]: each block-method plan's key, then each
    // key's answer once, for the first plan with it.
    std::vector<std::string> keys(candidates.size());
    parallel_for(candidates.size(), bound_threads, [&](std::size_t i) {
      if (candidates[i].recompute_method != RecomputeMethod::kBlock) return;
      const PlanSpec none = with(candidates[i], Recompute::kNone);
      keys[i] = fmt::format("{} {} {} {} {} {} {} {} {} {} {} {} {} {} {} {} {} {} {} {} {}", none.dp, none.tp, none.pp, none.cp,
                            none.ep, none.etp, static_cast<int>(none.schedule), none.virtual_stages, none.micro_batch,
                            none.grad_accum, none.zero_stage, static_cast<int>(none.fsdp), static_cast<int>(none.offload_optimizer),
                            static_cast<int>(none.offload_params), none.sequence_parallel, static_cast<int>(none.attention),
                            static_cast<int>(none.precision), none.placement, none.seq_len, none.tp_comm_overlap,
                            none.accumulate_allreduce_grads_in_fp32);
    });
    std::map<std::string, std::size_t> key_at;  // into firsts
    std::vector<std::size_t> firsts, key_of(candidates.size(), 0);
    for (std::size_t i = 0; i < keys.size(); ++i) {
      if (keys[i].empty()) continue;
      const auto [at, added] = key_at.try_emplace(std::move(keys[i]), firsts.size());
      if (added) firsts.push_back(i);
      key_of[i] = at->second + 1;  // 0: not the block method
    }
    keys.clear();
    std::vector<char> worth_trying(firsts.size(), 0);
    parallel_for(firsts.size(), bound_threads, [&](std::size_t k) {
      const PlanSpec& s = candidates[firsts[k]];
      worth_trying[k] = !may_fit(with(s, Recompute::kNone)) && may_fit(with(s, Recompute::kFull)) ? 1 : 0;
    });
    std::size_t kept = 0;
    for (std::size_t i = 0; i < candidates.size(); ++i) {
      if (key_of[i] > 0 && worth_trying[key_of[i] - 1] == 0) continue;
      if (kept != i) candidates[kept] = std::move(candidates[i]);
      ++kept;
    }
    candidates.erase(candidates.begin() + static_cast<std::ptrdiff_t>(kept), candidates.end());
    r.enumerated -= before - candidates.size();
  }
  std::vector<std::size_t> todo;
  std::vector<Bytes> memory_bound(candidates.size(), 0);
  parallel_for(candidates.size(), bound_threads, [&](std::size_t i) { memory_bound[i] = states_bound(candidates[i]); });
  for (std::size_t i = 0; i < candidates.size(); ++i) {
    if (o.prune_by_memory && memory_bound[i] > cluster.device.memory) {
      ++r.pruned_memory;
    } else {
      todo.push_back(i);
    }
  }
  // The stage bounds of what is left: its time, and its memory again, closer.
  std::vector<TimeNs> bound(candidates.size(), 0);
  if (o.prune_by_time || o.prune_by_memory) {
    parallel_for(todo.size(), bound_threads, [&](std::size_t k) {
      const std::size_t i = todo[k];
      const LayerCosts* work = nullptr;
      const std::optional<PlanBounds> b =
          stage_bounds(candidates[i], lower_bound_plan(candidates[i]), &work, o.prune_by_time ? step_gather(candidates[i]) : no_gather);
      if (b) {
        memory_bound[i] = std::max(memory_bound[i], b->peak);
        if (o.prune_by_time) bound[i] = b->time + interference_floor(candidates[i], *work);
      }
    });
    std::vector<std::size_t> left;
    left.reserve(todo.size());
    for (std::size_t i : todo) {
      if (o.prune_by_memory && memory_bound[i] > cluster.device.memory) {
        ++r.pruned_memory;
      } else {
        left.push_back(i);
      }
    }
    todo = std::move(left);
  }
  if (o.prune_by_time) {
    std::stable_sort(todo.begin(), todo.end(), [&](std::size_t a, std::size_t b) { return bound[a] < bound[b]; });
  }
  // What the threads have found: the `top` fastest fitting plans (a
  // max-heap of their entries, twins counted once: Note [Search twins]) and
  // the Pareto front of time against peak (by time, peaks falling).
  std::vector<SearchEntry> entries(todo.size());
  std::mutex found_mutex;
  std::vector<std::size_t> fastest;  // into entries
  std::vector<std::pair<TimeNs, Bytes>> front;
  const auto top_k = static_cast<std::size_t>(std::max(0, o.top));
  auto slower = [&](std::size_t a, std::size_t b) { return entries[a].iteration_time < entries[b].iteration_time; };
  auto found = [&](std::size_t k) {
    const TimeNs t = entries[k].iteration_time;
    const Bytes peak = entries[k].peak;
    std::lock_guard<std::mutex> lock(found_mutex);
    const bool twin = std::any_of(fastest.begin(), fastest.end(), [&](std::size_t j) { return same_plan(entries[j], entries[k]); });
    if (top_k > 0 && !twin) {
      if (fastest.size() < top_k) {
        fastest.push_back(k);
        std::push_heap(fastest.begin(), fastest.end(), slower);
      } else if (t < entries[fastest.front()].iteration_time) {
        std::pop_heap(fastest.begin(), fastest.end(), slower);
        fastest.back() = k;
        std::push_heap(fastest.begin(), fastest.end(), slower);
      }
    }
    // Into the front unless a plan there is as fast and as small.
    auto at = std::lower_bound(front.begin(), front.end(), std::make_pair(t, Bytes{0}));
    if (at != front.begin() && std::prev(at)->second <= peak) return;
    if (at != front.end() && at->first == t && at->second <= peak) return;
    // Drop what it beats: slower (or as fast) and no smaller.
    auto end = at;
    while (end != front.end() && end->second >= peak) ++end;
    at = front.erase(at, end);
    front.insert(at, {t, peak});
  };
  auto cannot_matter = [&](std::size_t i) {
    std::lock_guard<std::mutex> lock(found_mutex);
    if (fastest.size() < top_k || (top_k > 0 && entries[fastest.front()].iteration_time >= bound[i])) return false;
    if (!front.empty() && bound[i] > 2 * front.front().first) return true;
    // The smallest plan of the front faster than the bound: as small or
    // smaller, the front has no room for this one (it keeps a plan only
    // where every faster plan is larger).
    const auto at = std::lower_bound(front.begin(), front.end(), std::make_pair(bound[i], Bytes{0}));
    return at != front.begin() && std::prev(at)->second <= memory_bound[i];
  };
  std::vector<char> skipped(candidates.size(), 0);

  std::vector<char> ok(todo.size(), 0);
  std::atomic<std::size_t> next{0}, done{0};
  std::mutex error_mutex;
  std::string first_error;
  const unsigned threads = std::min<unsigned>(bound_threads, std::max<std::size_t>(1, todo.size()));
  r.threads = static_cast<int>(threads);
  auto worker = [&] {
    PredictOptions po;
    po.profile = o.profile;
    po.advise = false;  // ranked, not read one by one
    for (std::size_t k; (k = next.fetch_add(1)) < todo.size(); done.fetch_add(1)) {
      if (o.prune_by_time && cannot_matter(todo[k])) {
        try {
          (void)resolve(candidates[todo[k]], model, cluster);
          skipped[k] = 1;
        } catch (const ConfigError&) {
          // Not a plan (as below).
        }
        continue;
      }
      try {
        SearchEntry& e = entries[k];
        e = entry_of(predict(model, candidates[todo[k]], cluster, po));
        ok[k] = 1;
        if (e.fits) found(k);
      } catch (const ConfigError&) {
        // A combination resolve() refuses (e.g. stage count vs layers): not a plan.
      } catch (const std::exception& ex) {
        std::lock_guard<std::mutex> lock(error_mutex);
        if (first_error.empty()) first_error = ex.what();
      }
    }
  };
  std::vector<std::thread> pool;
  for (unsigned t = 1; t < threads; ++t) pool.emplace_back(worker);
  if (o.progress) {
    // The calling thread reports progress while the others work, then joins in.
    std::thread last(worker);
    while (done.load() < todo.size()) {
      o.progress(done.load() + r.pruned_memory, candidates.size());
      std::this_thread::sleep_for(std::chrono::milliseconds(200));
    }
    last.join();
    o.progress(candidates.size(), candidates.size());
  } else {
    worker();
  }
  for (auto& t : pool) t.join();
  if (!first_error.empty()) throw InternalError("search: " + first_error);

  std::vector<SearchEntry> fitting;
  std::vector<std::size_t> index;  // each fitting plan's place in the enumeration: ties keep that order
  for (std::size_t k = 0; k < todo.size(); ++k) {
    if (skipped[k]) {
      ++r.pruned_time;
      continue;
    }
    if (!ok[k]) {
      --r.enumerated;  // refused by resolve: not a valid plan after all
      continue;
    }
    ++r.simulated;
    if (entries[k].fits) {
      fitting.push_back(std::move(entries[k]));
      index.push_back(todo[k]);
    } else {
      ++r.not_fitting;
    }
  }
  std::vector<std::size_t> by_time(fitting.size());
  for (std::size_t k = 0; k < by_time.size(); ++k) by_time[k] = k;
  std::sort(by_time.begin(), by_time.end(), [&](std::size_t a, std::size_t b) {
    return fitting[a].iteration_time != fitting[b].iteration_time ? fitting[a].iteration_time < fitting[b].iteration_time
                                                                  : index[a] < index[b];
  });
  {
    std::vector<SearchEntry> sorted;
    sorted.reserve(fitting.size());
    for (std::size_t k : by_time) sorted.push_back(std::move(fitting[k]));
    fitting = std::move(sorted);
  }
  Bytes best_peak = std::numeric_limits<Bytes>::max();
  for (const auto& e : fitting) {
    if (e.iteration_time > 2 * fitting.front().iteration_time) break;  // Note [Search]: up to twice the fastest
    if (e.peak < best_peak) {
      r.pareto.push_back(e);
      best_peak = e.peak;
    }
  }
  // Each plan once, its other names beside it (Note [Search twins]).
  for (auto& e : fitting) {
    const auto first = std::find_if(r.top.begin(), r.top.end(), [&](const SearchEntry& s) { return same_plan(s, e); });
    if (first != r.top.end()) {
      first->also.push_back(twin_name(e.plan, first->plan));
    } else if (r.top.size() < top_k) {
      r.top.push_back(std::move(e));
    } else if (r.top.empty() || e.iteration_time > r.top.back().iteration_time) {
      break;  // slower than the last listed (or none asked for): no twin of a listed plan
    }
  }
  r.seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  return r;
}

}  // namespace

namespace {

/// The recompute column: Megatron's block method as the blocks a chunk reruns.
std::string recompute_text(const ResolvedPlan& p) {
  return p.recompute_blocks > 0 ? fmt::format("block {}", p.recompute_blocks) : std::string(to_string(p.recompute));
}

void table(std::string& out, const std::vector<SearchEntry>& es, bool attention, const std::string& label = "") {
  // An ep column where a plan spreads experts (mixtures of experts only).
  const bool ep = std::any_of(es.begin(), es.end(), [](const SearchEntry& e) { return e.plan.ep > 1; });
  // "+": its all-to-alls beside the other micro-batch (Note [Expert-parallel overlap]).
  const std::size_t ep_width =
      std::any_of(es.begin(), es.end(), [](const SearchEntry& e) { return e.plan.overlap_moe_expert_parallel_comm; }) ? 6 : 4;
  out += "    " + pad("#", 4) + pad("time", 11) + pad("tokens/s", 11) + pad("MFU", 7) + pad("peak GiB", 10) + pad("dp", 5) +
         pad("tp", 4) + pad("cp", 4) + (ep ? pad("ep", ep_width) : "") + pad("pp", 4) + pad("schedule", 16) + pad("mb", 5) +
         pad("m", 6) + pad("sharding", 18) + pad("offload", 11) + pad("recompute", 11) + pad("sp", 8) + pad("attn", 6) +
         pad("prec", 5) + "placement\n";
  int i = 1;
  for (const auto& e : es) {
    const ResolvedPlan& p = e.plan;
    const double t = ns_to_seconds(e.iteration_time);
    out += "    " + pad(label.empty() ? std::to_string(i++) : label, 4) + pad(t >= 1 ? fmt::format("{:.3f} s", t) : fmt::format("{:.1f} ms", t * 1e3), 11) +
           pad(fmt::format("{:.0f}", e.tokens_per_s), 11) + pad(fmt::format("{:.1f}%", e.mfu * 100), 7) +
           pad(fmt::format("{:.2f}", static_cast<double>(e.peak) / kGiB), 10) + pad(std::to_string(p.dp), 5) +
           pad(std::to_string(p.tp), 4) + pad(std::to_string(p.cp), 4) +
           (ep ? pad(std::to_string(p.ep) + (p.etp != p.tp ? "/" + std::to_string(p.etp) : "") +
                         (p.overlap_moe_expert_parallel_comm ? "+" : ""),
                     ep_width)
               : "") +
           pad(std::to_string(p.pp), 4) + pad(schedule_text(p), 16) + pad(std::to_string(p.micro_batch), 5) +
           pad(std::to_string(p.grad_accum), 6) + pad(sharding_text(p), 18) + pad(offload_text(p), 11) +
           pad(recompute_text(p), 11) + pad(!p.sequence_parallel ? "-" : p.tp_comm_overlap ? "overlap" : "yes", 8) +
           pad(!attention ? "-" : p.flash_attention ? "flash" : "eager", 6) + pad(to_string(p.precision), 5) +
           (p.pp > 1 && p.dp > 1 ? p.spec.placement : "-");
    for (std::size_t k = 0; k < e.also.size(); ++k) out += (k == 0 ? " (also " : "; ") + e.also[k] + (k + 1 == e.also.size() ? ")" : "");
    out += "\n";
  }
}

void entry_json(JsonWriter& j, const SearchEntry& e) {
  const ResolvedPlan& p = e.plan;
  j.begin_object();
  j.field("iteration_time_s", Decimal{e.iteration_time, 9}).field("tokens_per_s", e.tokens_per_s).field("mfu", e.mfu);
  j.field("peak_bytes", static_cast<std::int64_t>(e.peak)).field("fits", e.fits);
  j.key("plan").begin_object();
  j.field("dp", p.dp).field("tp", p.tp).field("pp", p.pp).field("cp", p.cp).field("ep", p.ep).field("etp", p.etp);
  j.field("attention", p.flash_attention ? "flash" : "eager").field("precision", to_string(p.precision));
  j.field("schedule", p.pp > 1 ? to_string(p.schedule) : "none").field("virtual_stages", p.virtual_stages);
  j.field("micro_batch", static_cast<std::int64_t>(p.micro_batch)).field("micro_batches", static_cast<std::int64_t>(p.grad_accum));
  j.field("zero_stage", p.zero_stage).field("fsdp", to_string(p.spec.fsdp));
  j.field("overlap_param_gather", p.zero1_gathers_in_forward());
  j.field("offload_optimizer", to_string(p.offload_optimizer)).field("offload_params", to_string(p.offload_params));
  j.field("recompute", to_string(p.recompute)).field("recompute_blocks", p.recompute_blocks);
  j.field("sequence_parallel", p.sequence_parallel).field("tp_comm_overlap", p.tp_comm_overlap);
  j.field("overlap_moe_expert_parallel_comm", p.overlap_moe_expert_parallel_comm);
  j.field("master_weights", p.master_weights);
  j.field("optim_bits", p.optim_bits).field("optimizer_in_backward", p.optimizer_in_backward);
  j.field("fp32_grad_accumulator", p.fp32_grad_accumulator);
  j.field("placement", p.spec.placement);
  j.key("stage_layers").begin_array();
  for (int n : p.stage_layers) j.value(n);
  j.end_array();
  j.end_object();
  j.key("also").begin_array();
  for (const auto& n : e.also) j.value(n);
  j.end_array();
  j.end_object();
}

/// The plan the search was given, beside the ranking (Note [Your plan]).
void compared_block(std::string& out, const SearchResult& r) {
  if (!r.compared && r.compared_error.empty()) return;
  auto o = std::back_inserter(out);
  fmt::format_to(o, "\n  your plan: {}\n", r.compared_name.empty() ? "as given" : r.compared_name);
  if (!r.compared) {
    fmt::format_to(o, "    not a plan here: {}\n", r.compared_error);
    return;
  }
  const SearchEntry& e = *r.compared;
  table(out, {e}, r.model_attention, "you");
  const auto gib = [](Bytes b) { return static_cast<double>(b) / kGiB; };
  if (!e.fits) {
    fmt::format_to(o, "    it does not fit: {:.2f} GiB at its peak, over the {:.2f} GiB a GPU has\n", gib(e.peak), gib(r.capacity));
  } else if (r.compared_rank > 0) {
    fmt::format_to(o, "    rank {} of the plans above{}\n", r.compared_rank,
                   r.compared_rank == 1 ? ": none found is faster" : "");
  } else {
    fmt::format_to(o, "    slower than the {} listed\n", r.top.size());
  }
  if (!r.top.empty() && r.top.front().iteration_time < e.iteration_time) {
    fmt::format_to(o, "    the fastest plan that fits takes {:.3f} s: {:.2f}x as fast, at {:.2f} GiB against {:.2f}\n",
                   ns_to_seconds(r.top.front().iteration_time),
                   static_cast<double>(e.iteration_time) / static_cast<double>(r.top.front().iteration_time), gib(r.top.front().peak),
                   gib(e.peak));
  }
}

}  // namespace

std::string format_search(const SearchResult& r) {
  std::string out;
  auto o = std::back_inserter(out);
  fmt::format_to(o, "dtsim search: {} on {} GPUs of {}, global batch {}{} (capacity {:.2f} GiB per GPU)\n", r.model_name, r.gpus,
                 r.cluster_name, r.global_batch, r.seq_len > 1 ? fmt::format(" of {} tokens", r.seq_len) : std::string(),
                 static_cast<double>(r.capacity) / kGiB);
  fmt::format_to(o,
                 "  tried {} distinct plans: {} pruned by memory and {} by time before simulating, {} simulated, {} of "
                 "those did not fit; {:.2f} s on {} thread(s)\n",
                 r.enumerated, r.pruned_memory, r.pruned_time, r.simulated, r.not_fitting, r.seconds, r.threads);
  for (const std::string& w : r.warnings) fmt::format_to(o, "  warning: {}\n", w);
  out += "\n";
  if (r.top.empty()) {
    out += "  no plan fits: try more GPUs, a smaller global batch, or a larger device\n";
    compared_block(out, r);
    return out;
  }
  fmt::format_to(o, "  fastest {} plans that fit\n", r.top.size());
  table(out, r.top, r.model_attention);
  if (std::any_of(r.top.begin(), r.top.end(), [](const SearchEntry& e) { return e.plan.overlap_moe_expert_parallel_comm; })) {
    out += "    (ep +: the experts' all-to-alls beside the other micro-batch's layers, overlap_moe_expert_parallel_comm)\n";
  }
  if (std::any_of(r.top.begin(), r.top.end(), [](const SearchEntry& e) { return !e.also.empty(); })) {
    out += "    (also: the same plan under another name, or its GPUs and tokens split another way between dp and cp,\n"
           "     with the same time and peak: listed once)\n";
  }
  compared_block(out, r);
  out += "\n  Pareto front: time against peak memory (no other plan is both faster and smaller)\n";
  table(out, r.pareto, r.model_attention);
  return out;
}

std::string search_to_json(const SearchResult& r) {
  JsonWriter j;
  j.begin_object();
  j.header();
  j.field("model", r.model_name).field("cluster", r.cluster_name).field("gpus", r.gpus);
  j.field("global_batch", static_cast<std::int64_t>(r.global_batch));
  j.field("seq_len", static_cast<std::int64_t>(r.seq_len));
  j.field("capacity_bytes", static_cast<std::int64_t>(r.capacity));
  j.field("enumerated", static_cast<std::int64_t>(r.enumerated));
  j.field("pruned_memory", static_cast<std::int64_t>(r.pruned_memory));
  j.field("pruned_time", static_cast<std::int64_t>(r.pruned_time));
  j.field("simulated", static_cast<std::int64_t>(r.simulated));
  j.field("not_fitting", static_cast<std::int64_t>(r.not_fitting));
  j.field("seconds", r.seconds).field("threads", r.threads);
  j.key("warnings").begin_array();
  for (const auto& w : r.warnings) j.value(w);
  j.end_array();
  j.key("top").begin_array();
  for (const auto& e : r.top) entry_json(j, e);
  j.end_array();
  j.key("pareto").begin_array();
  for (const auto& e : r.pareto) entry_json(j, e);
  j.end_array();
  // Note [Your plan]: null when the search was given none.
  j.key("compared");
  if (!r.compared && r.compared_error.empty()) {
    j.null();
  } else {
    j.begin_object();
    j.field("name", r.compared_name);
    j.key("entry");
    if (r.compared) {
      entry_json(j, *r.compared);
    } else {
      j.null();
    }
    j.field("rank", r.compared_rank).field("error", r.compared_error);
    j.end_object();
  }
  j.end_object();
  return j.str() + "\n";
}

std::string search_to_csv(const SearchResult& r) {
  std::ostringstream os;
  os << "rank,iteration_time_s,tokens_per_s,mfu,peak_bytes,dp,tp,pp,schedule,virtual_stages,micro_batch,micro_batches,"
        "sharding,offload,recompute,sequence_parallel,placement,pareto,cp,attention,precision,also,recompute_blocks,tp_comm_overlap\n";
  int i = 1;
  for (const auto& e : r.top) {
    const ResolvedPlan& p = e.plan;
    const bool on_front = std::any_of(r.pareto.begin(), r.pareto.end(), [&](const SearchEntry& f) {
      return f.iteration_time == e.iteration_time && f.peak == e.peak;
    });
    os << i++ << "," << fmt::format("{:.9g}", ns_to_seconds(e.iteration_time)) << "," << fmt::format("{:.6g}", e.tokens_per_s) << ","
       << fmt::format("{:.4f}", e.mfu) << "," << e.peak << "," << p.dp << "," << p.tp << "," << p.pp << ","
       << (p.pp > 1 ? to_string(p.schedule) : "none") << "," << p.virtual_stages << "," << p.micro_batch << ","
       << p.grad_accum << "," << sharding_text(p) << "," << offload_text(p) << "," << to_string(p.recompute) << ","
       << (p.sequence_parallel ? "true" : "false") << "," << (p.pp > 1 && p.dp > 1 ? std::string(p.spec.placement).replace(2, 1, "-").replace(5, 1, "-") : std::string("-")) << ","
       << (on_front ? "true" : "false") << "," << p.cp << "," << (p.flash_attention ? "flash" : "eager") << ","
       << to_string(p.precision) << ",";
    // The other names of the plan (Note [Search twins]), ';' apart, commas as '-' as in placement.
    for (std::size_t k = 0; k < e.also.size(); ++k) {
      std::string n = e.also[k];
      std::replace(n.begin(), n.end(), ',', '-');
      os << (k ? ";" : "") << n;
    }
    os << "," << p.recompute_blocks << "," << (p.tp_comm_overlap ? "true" : "false") << "\n";
  }
  return os.str();
}

PlanSpec search_base_plan(const ClusterSpec& cluster, const std::vector<Override>& overrides) {
  // By default bf16 where the device has it, else fp16 where it is faster
  // than fp32 (not on CPUs), else fp32; Adam.
  const Precision fallback = cluster.device.peak_bf16 > 0                        ? Precision::kBf16
                             : cluster.device.peak_fp16 > cluster.device.peak_fp32 ? Precision::kFp16
                                                                                   : Precision::kFp32;
  PlanSpec base = parse_plan("optimizer: adam\n", "<search defaults>", overrides);
  // The precision stays the search's to walk unless an override gives it
  // (search.cpp walks the 16- and 8-bit ones), falling back to the default.
  if (base.origins.where.count("plan.precision") == 0) base.precision = fallback;
  return base;
}

}  // namespace dtsim::sim
