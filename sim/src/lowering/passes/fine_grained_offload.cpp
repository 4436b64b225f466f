// The fine-grained offload pass: Megatron-Core's fine-grained activation
// offloading (fine_grained_activation_offloading, offload_modules), for a
// plan of one stage or a pipeline.
//
// Note [Fine-grained offload]
// Megatron-Core (megatron/core/pipeline_parallel/fine_grained_activation_
// offload.py) wraps the modules offload_modules names in offload groups
// (Note [Offload modules] in model.hpp). A group's tensors, those autograd
// saves inside it of at least min_offloaded_tensor_size elements, are
// copied to pinned host memory on a stream of their own (d2h) once the
// group's forward ends, after the compute stream's work so far; record_
// stream keeps their device memory until the copy is done, then it is free.
// Nothing on the compute stream waits for a copy down. In backward each
// group is copied up on a second stream (h2d) into memory allocated then,
// once its copy down is done, and the compute stream waits for it where the
// group's backward begins: the group after it in forward order started that
// copy as its own backward ended; the last group of a model chunk (a
// micro-batch of one virtual stage: ChunkOffloadHandler) is copied up as
// the previous chunk's backward ends (pre_reload_last_layer). So a copy up
// is hidden behind the backward between two groups, and a chunk's first
// behind whatever the compute stream runs before that chunk's backward (in
// 1F1B, a forward).
// Which groups go (PipelineOffloadManager.post_warmup_callback, after a
// first iteration that offloads everything, and should_bulk_offload):
// - in the first chunk whose backward runs, each module's last group stays
//   (the offload margin), as does, in any chunk whose backward comes next
//   after its forward (every micro-batch of a one-stage plan, the last
//   stage's in 1F1B), each module's last group;
// - pipeline rank s keeps s x delta_offload_bytes_across_pp_ranks bytes of
//   groups, the first in backward order, whole groups until that is spent;
// - of each chunk's groups that still go, the last (1 - activation_offload_
//   fraction) of them, rounded down, stay (groups with nothing to copy
//   count where a module's last group is picked, not in the fraction);
// - under selective recompute of core_attn the core runs checkpointed,
//   outside its group (attention.py), so core_attn offloads nothing.
// dtsim prices that per unit (a layer of a one-stage plan, a chunk of a
// pipeline) from each group's place in its layer's kernels (priced by the
// compute model; its backward runs them in reverse): the copies down run
// on "d2h" one after another from their groups' ends, each group's memory
// freed as its copy is done; what is still copying as the unit's forward
// ends is a task on "d2h" after it, which frees the rest. So the unit keeps
// for backward its activations less what went, and holds besides, during
// its forward, the most of what went that was on the device at once. Its
// first copy up is a task on "h2d" after its own copy down and after the
// backward of the previous unit with groups (kept ones too: Megatron-Core
// runs bulk_reload as every group's backward ends), less the part of that
// backward after its first group's, where that backward came after this
// unit's forward, else the rank's latest pass; only the part not hidden
// before the group's backward begins is priced. It brings that group
// back; the others come back one at a time as the backward frees what it
// is done with, counted as the largest of them beside the first from the
// backward's start, and what their copies leave exposed (each copy up less
// the backward between its group and the next group in the unit, kept or
// not) is one wait on the compute stream before the unit's backward,
// after the first copy up. Under fine_grained_offloading_max_inflight_offloads N
// the compute stream waits, as each group commits, for the copy of its
// module's group N before it in the chunk (its own at N = 0; ChunkOffload
// Handler._drain_offload_pending leaves N in flight): within a unit priced from
// the queue of copies, a wait on the compute stream after the forward;
// across a one-stage plan's layers, that wait also waits for the copies
// of the layer holding that group.
// The copies run at the host link's rate (ClusterSpec::host_device_
// bandwidth), both ways at once (PCIe and NVLink-C2C are full duplex),
// on the streams ZeRO-Offload's copies take too where a plan has both. Not
// modelled: the host memory the copies take, the HBM bandwidth they take
// from the kernels beside them, Transformer Engine's set_save_original_
// input for expert_fc1 under tensorwise fp8 (its bf16 input kept rather
// than the fp8 copy), CUDA graphs' delayed copies,
// and, under overlap_moe_expert_parallel_comm, a one-stage plan whose next
// forward runs beside a backward (each module's last group is kept as
// without it).
#include <algorithm>
#include <cmath>
#include <map>
#include <tuple>
#include <string>
#include <utility>
#include <vector>

#include "dtsim/sim/error.hpp"
#include "dtsim/sim/lowering.hpp"
#include "lowering/fine_grained_offload.hpp"

namespace dtsim::sim::detail {
namespace {

/// One offload group of a model chunk as the pass prices it.
struct Group {
  std::size_t unit = 0;     ///< the emitter's unit it is in
  std::uint16_t module = 0; ///< its OffloadModule
  Bytes bytes = 0;          ///< what it copies (its tensors of min_offloaded_tensor_size elements or more)
  TimeNs copy = 0;          ///< one copy of it, either way
  TimeNs fwd_end = 0;       ///< its forward's end, from its unit's forward start
  TimeNs bwd_start = 0, bwd_end = 0;  ///< its backward, from its unit's backward start
};

/// What one unit does for a micro-batch under one choice of groups.
struct UnitPlan {
  Bytes down = 0;        ///< bytes it copies down (and up)
  Bytes resident = 0;    ///< the most of them on the device at once during its forward
  Bytes after = 0;       ///< of them, still copying as its forward ends
  TimeNs tail = 0;       ///< copying after its forward ends
  Bytes first = 0;       ///< the group copied up first (its last offloaded)
  Bytes second = 0;      ///< the largest of the others: back beside it as the backward goes
  TimeNs first_up = 0;   ///< that copy's part not hidden by the unit's own backward
  TimeNs stall = 0;      ///< the other copies up's parts not hidden
  /// Under fine_grained_offloading_max_inflight_offloads, how long its
  /// forward waits for its own copies down (a wait on the compute stream
  /// after it).
  TimeNs wait = 0;
  std::uint16_t modules = 0;  ///< the modules of its groups that go
};

class FineGrainedOffload final : public StrategyPass {
 public:
  FineGrainedOffload(StageContext& ctx, const OffloadUnits& units) : ctx_(ctx), whole_stage_(units.whole_stage) {
    const ResolvedPlan& p = ctx.plan;
    fwd_.assign(units.units.size(), 0);
    bwd_.assign(units.units.size(), 0);
    // Each group's place, from its layer's kernels as the compute model
    // prices them.
    chunk_of_unit_.assign(units.units.size(), 0);
    chunks_.assign(units.whole_stage ? 1 : units.units.size(), {});
    std::map<std::string, std::vector<double>> starts;  // by layer signature
    for (std::size_t u = 0; u < units.units.size(); ++u) {
      const auto [first, count] = units.units[u];
      const std::size_t c = units.whole_stage ? 0 : u;
      chunk_of_unit_[u] = c;
      TimeNs fwd_before = 0, bwd_after = 0;  // the unit's forward before layer l, its backward after it
      for (std::size_t l = first; l < first + count; ++l) bwd_after += units.backward[l];
      bwd_[u] = bwd_after;
      for (std::size_t l = first; l < first + count; ++l) {
        const Layer& L = units.layers[l];
        bwd_after -= units.backward[l];
        if (!L.offload_groups.empty()) {
          // Kernel k's start in the layer's forward time; layers of one
          // signature run the same kernels (priced once: a 126-block model
          // has thousands).
          auto [it, fresh] = starts.try_emplace(L.signature);
          std::vector<double>& at = it->second;
          if (fresh || L.signature.empty()) {
            at.assign(L.forward.size() + 1, 0.0);
            for (std::size_t k = 0; k < L.forward.size(); ++k) {
              at[k + 1] = at[k] + static_cast<double>(ctx.compute_model.kernel_time(L.forward[k], p.precision)) *
                                      static_cast<double>(std::max<std::int64_t>(1, L.forward[k].repeat));
            }
          }
          const double all = at.back() > 0 ? at.back() : 1.0;
          for (const OffloadGroup& og : L.offload_groups) {
            // Selective recompute of core_attn runs the core checkpointed,
            // outside its group (attention.py's _checkpointed_attention_
            // forward, fused or not): nothing to offload there.
            if (og.module == kOffloadCoreAttn && p.recompute == Recompute::kSelective &&
                (p.recompute_modules & kRecomputeCoreAttn) != 0) {
              continue;
            }
            Group g;
            g.unit = u;
            g.module = og.module;
            for (const SavedTensor& t : og.tensors) {
              if (t.elements >= p.min_offloaded_tensor_size) g.bytes += t.bytes;
            }
            // A group with nothing to copy still counts where Megatron-Core
            // picks each module's last group; it copies nothing.
            g.copy = g.bytes > 0 ? ctx.comm.host_copy(g.bytes).total() : 0;
            const double s = at[std::min(og.first, L.forward.size())] / all, e = at[std::min(og.end, L.forward.size())] / all;
            const auto scale = [](TimeNs t, double f) { return static_cast<TimeNs>(std::llround(static_cast<double>(t) * f)); };
            g.fwd_end = fwd_before + scale(units.forward[l], e);
            // Backward runs the layer's kernels in reverse.
            g.bwd_start = bwd_after + scale(units.backward[l], 1.0 - e);
            g.bwd_end = bwd_after + scale(units.backward[l], 1.0 - s);
            chunks_[c].push_back(g);
          }
        }
        fwd_before += units.forward[l];
      }
      fwd_[u] = fwd_before;
    }
    const std::size_t cells = chunks_.size() * static_cast<std::size_t>(std::max<std::int64_t>(1, p.grad_accum));
    choice_.assign(cells, -1);
    down_task_.assign(units.units.size() * static_cast<std::size_t>(std::max<std::int64_t>(1, p.grad_accum)), -1);
    fwd_seq_.assign(down_task_.size(), 0);
    plan_cell_.assign(down_task_.size(), nullptr);
    slack_.assign(units.units.size(), -1);
    for (const auto& groups : chunks_) {
      for (const Group& g : groups) {
        if (slack_[g.unit] < 0) slack_[g.unit] = std::max<TimeNs>(0, bwd_[g.unit] - g.bwd_end);  // the unit's first group
      }
    }
  }

  void begin_stage(int stage, const std::vector<PipeStep>& order) override {
    // Which chunk's backward comes first, which chunks' backward comes next
    // after their forward, and which groups the stage keeps by
    // delta_offload_bytes_across_pp_ranks (Note [Fine-grained offload]).
    const int pp = ctx_.plan.pp;
    immediate_.assign(choice_.size(), false);
    kept_.clear();
    first_ = -1;
    last_backward_ = last_forward_ = last_group_backward_ = -1;
    backlog_ = 0;
    seq_ = backward_seq_ = group_backward_seq_ = 0;
    last_slack_ = 0;
    auto chunk_of = [&](const PipeStep& st) -> std::size_t {
      return chunks_.size() == 1 ? 0 : static_cast<std::size_t>(st.chunk * pp + stage);
    };
    std::vector<std::size_t> backwards;  // cells, in order
    for (const PipeStep& st : order) {
      if (st.forward || st.weight) continue;
      const std::size_t c = chunk_of(st);
      if (!chunks_[c].empty()) backwards.push_back(cell(c, st.micro));
    }
    std::size_t next = 0;  // the next backward after the step in hand
    for (std::size_t j = 0, b = 0; j < order.size(); ++j) {
      const PipeStep& st = order[j];
      if (!st.forward) {
        if (!st.weight && !chunks_[chunk_of(st)].empty()) ++b;
        continue;
      }
      next = b;
      const std::size_t c = chunk_of(st);
      if (next < backwards.size() && backwards[next] == cell(c, st.micro)) immediate_[cell(c, st.micro)] = true;
    }
    if (!backwards.empty()) first_ = static_cast<std::int64_t>(backwards.front());
    Bytes keep = static_cast<Bytes>(stage) * ctx_.plan.delta_offload_bytes_across_pp_ranks;
    for (std::size_t k = 0; k < backwards.size() && keep > 0; ++k) {
      const std::size_t at = backwards[k];
      std::vector<bool> on = margin(at / micros(), static_cast<std::int64_t>(at) == first_);
      std::vector<bool>& kept = kept_[at];
      kept.assign(on.size(), false);
      const auto& groups = chunks_[at / micros()];
      for (std::size_t g = 0; g < groups.size() && keep > 0; ++g) {
        if (!on[g]) continue;
        keep -= groups[g].bytes;
        kept[g] = true;
      }
    }
  }

  void forward_memory(const At& at, MemOps& on_start, MemOps& on_end) override {
    // Priced here, with the copies still running from the forwards before
    // it (`backlog_`), and kept for the unit's other hooks.
    const UnitPlan* u = plan_cell_[unit_cell(at)] = plan_of(at, backlog_);
    if (u == nullptr) return;
    fold(on_start, u->resident - u->down);
    add_bytes(on_end, MemCategory::kActivations, -(u->resident - u->after));
  }

  TaskId after_forward(const At& at, TaskId last) override {
    ++seq_;
    const UnitPlan* u = plan_cell_[unit_cell(at)];
    const TimeNs backlog = backlog_;
    // The d2h stream's work left as this forward ends, for the next.
    backlog_ = u != nullptr ? u->tail : std::max<TimeNs>(0, backlog_ - fwd_[at.unit]);
    if (u == nullptr) {
      last_forward_ = last;
      return last;
    }
    fwd_seq_[unit_cell(at)] = seq_;
    if (const int inflight = ctx_.plan.fine_grained_offloading_max_inflight_offloads; inflight >= 0) {
      // fine_grained_offloading_max_inflight_offloads: the compute stream
      // waits for the copies `inflight` groups back of each of its
      // modules (a model chunk's queue: across the layers of a one-stage
      // plan, within a pipeline's chunk, which the unit's wait prices).
      TaskDeps deps{last};
      if (whole_stage_) {
        if (at.micro != queue_micro_) queue_.clear(), queue_micro_ = at.micro;
        for (std::size_t m = 0; m < 16; ++m) {
          const auto bit = static_cast<std::uint16_t>(1U << m);
          if ((u->modules & bit) == 0) continue;
          std::vector<TaskId>& q = queue_[bit];
          // The group inflight back of this unit's first (itself at 0: priced in the unit's wait).
          if (inflight >= 1 && q.size() >= static_cast<std::size_t>(inflight)) deps.push_back(q[q.size() - static_cast<std::size_t>(inflight)]);
        }
      }
      if (u->wait > 0 || deps.size() > 1) {
        last = ctx_.b.compute(ctx_.tag(at.micro, "offload wait ", ctx_.units[at.unit].name), at.rank, ctx_.stream(Stream::kCompute),
                              Phase::kOffload, u->wait, std::move(deps), {}, {}, true);
        ctx_.g.tasks[last].kind = TaskKind::kCompute;
      }
    }
    if (u->tail > 0 || u->after > 0) {
      MemOps on_end;
      add_bytes(on_end, MemCategory::kActivations, -u->after);
      // The stream runs the copies before it first (the task before it on
      // "d2h", `backlog` from this forward's start): its own part is what
      // is left after those and after the forward.
      const TimeNs own = std::max<TimeNs>(0, u->tail - std::max<TimeNs>(0, backlog - fwd_[at.unit]));
      const TaskId t = ctx_.b.compute(ctx_.tag(at.micro, "d2h activations ", ctx_.units[at.unit].name), at.rank,
                                      ctx_.stream(Stream::kD2H), Phase::kOffload, own, {last}, {}, std::move(on_end), true);
      ctx_.g.tasks[t].kind = TaskKind::kCompute;
      ctx_.g.tasks[t].bytes = u->down;
      down_task_[unit_cell(at)] = t;
    } else {
      down_task_[unit_cell(at)] = last;
    }
    if (whole_stage_ && ctx_.plan.fine_grained_offloading_max_inflight_offloads >= 0) {
      for (std::size_t m = 0; m < 16; ++m) {
        if ((u->modules & (1U << m)) != 0) queue_[static_cast<std::uint16_t>(1U << m)].push_back(down_task_[unit_cell(at)]);
      }
    }
    last_forward_ = last;
    return last;  // the compute stream goes on unless it waits for copies
  }

  void before_backward(const At& at, TaskDeps& deps) override {
    const UnitPlan* u = plan_cell_[unit_cell(at)];
    if (u == nullptr) return;
    // As the previous unit with groups ends its first group's backward
    // (that unit's slack before its end), where that came after this
    // unit's forward (Megatron-Core pre-loads a chunk's last group only if
    // its forward is done); else after the rank's latest backward since or
    // its latest forward.
    TaskDeps up_deps{down_task_[unit_cell(at)]};
    TimeNs hidden = 0;
    const std::int64_t forward = fwd_seq_[unit_cell(at)];
    if (last_group_backward_ >= 0 && group_backward_seq_ > forward) {
      up_deps.push_back(last_group_backward_);
      hidden = last_slack_;
    } else if (last_backward_ >= 0 && backward_seq_ > forward) {
      up_deps.push_back(last_backward_);
    } else if (last_forward_ >= 0) {
      up_deps.push_back(last_forward_);
    }
    const TaskId up = ctx_.b.compute(ctx_.tag(at.micro, "h2d activations ", ctx_.units[at.unit].name), at.rank,
                                     ctx_.stream(Stream::kH2D), Phase::kOffload, std::max<TimeNs>(0, u->first_up - hidden), std::move(up_deps),
                                     {{MemCategory::kActivations, u->first}}, {}, true);
    ctx_.g.tasks[up].kind = TaskKind::kCompute;
    ctx_.g.tasks[up].bytes = u->down;
    // The compute stream waits for it, and for what the other copies up
    // leave exposed; the others come back one by one as the backward frees
    // what it is done with: the largest of them beside the first at most.
    TaskDeps wait_deps = deps;
    wait_deps.push_back(up);
    MemOps second;
    add_bytes(second, MemCategory::kActivations, u->second);
    const TaskId wait = ctx_.b.compute(ctx_.tag(at.micro, "reload wait ", ctx_.units[at.unit].name), at.rank,
                                       ctx_.stream(Stream::kCompute), Phase::kOffload, u->stall, std::move(wait_deps),
                                       std::move(second), {}, true);
    ctx_.g.tasks[wait].kind = TaskKind::kCompute;
    deps.push_back(wait);
  }

  void backward_memory(const At& at, MemOps&, MemOps& on_end) override {
    // The backward frees all the unit kept, of which those come back and go
    // again as it runs.
    if (const UnitPlan* u = plan_cell_[unit_cell(at)]) fold(on_end, u->down - u->first - u->second);
  }

  TaskId after_backward(const At& at, TaskId last) override {
    last_backward_ = last;
    backward_seq_ = ++seq_;
    backlog_ = 0;  // a backward between forwards: their copies down are done (taken so)
    if (slack_[at.unit] >= 0) {  // a unit with groups, kept or not: their backward asks for the next copy up
      last_group_backward_ = last;
      group_backward_seq_ = seq_;
      last_slack_ = slack_[at.unit];
    }
    return last;
  }

 private:
  /// Adds `delta` bytes of activations to the emitter's own allocation
  /// (delta < 0) or free (delta > 0) among `ops`: the executor counts the
  /// peak after each operation, so an operation of its own would count a
  /// moment that does not happen.
  static void fold(MemOps& ops, Bytes delta) {
    if (delta == 0) return;
    for (MemOp& op : ops) {
      if (op.category == MemCategory::kActivations && (delta < 0 ? op.bytes >= -delta : op.bytes <= -delta)) {
        op.bytes += delta;
        return;
      }
    }
    DTSIM_ASSERT(false, "a unit's pass keeps less than it offloads");
  }

  std::size_t micros() const { return static_cast<std::size_t>(std::max<std::int64_t>(1, ctx_.plan.grad_accum)); }
  std::size_t cell(std::size_t chunk, std::int64_t micro) const { return chunk * micros() + static_cast<std::size_t>(micro); }
  std::size_t unit_cell(const At& at) const { return at.unit * micros() + static_cast<std::size_t>(at.micro); }

  /// Chunk c's groups that go before the fraction and the stage's kept
  /// bytes: all, but for `first` (the first chunk to run its backward) each
  /// module's last.
  std::vector<bool> margin(std::size_t c, bool first) const {
    const auto& groups = chunks_[c];
    std::vector<bool> on(groups.size(), true);
    if (first) drop_last_of_each(c, on);
    return on;
  }
  /// Turns off the last group of each module in chunk c.
  void drop_last_of_each(std::size_t c, std::vector<bool>& on) const {
    const auto& groups = chunks_[c];
    std::uint16_t seen = 0;
    for (std::size_t g = groups.size(); g-- > 0;) {
      if ((seen & groups[g].module) != 0) continue;
      seen = static_cast<std::uint16_t>(seen | groups[g].module);
      on[g] = false;
    }
  }

  /// The groups of chunk c that go for micro-batch m, as an index into choices_.
  int choose(std::size_t c, std::int64_t m) {
    const std::size_t at = cell(c, m);
    if (choice_[at] >= 0) return choice_[at];
    std::vector<bool> on = margin(c, static_cast<std::int64_t>(at) == first_);
    if (const auto k = kept_.find(at); k != kept_.end()) {
      for (std::size_t g = 0; g < on.size(); ++g) on[g] = on[g] && !k->second[g];
    }
    // activation_offload_fraction: of those that go with bytes to copy, the last stay.
    const auto& groups = chunks_[c];
    std::size_t eligible = 0;
    for (std::size_t g = 0; g < on.size(); ++g) eligible += on[g] && groups[g].bytes > 0 ? 1 : 0;
    auto drop = static_cast<std::size_t>(static_cast<double>(eligible) * (1.0 - ctx_.plan.activation_offload_fraction));
    for (std::size_t g = on.size(); g-- > 0 && drop > 0;) {
      if (on[g] && groups[g].bytes > 0) on[g] = false, --drop;
    }
    if (immediate_[at]) drop_last_of_each(c, on);
    const auto it = std::find(choices_.begin(), choices_.end(), on);
    const int id = it != choices_.end() ? static_cast<int>(it - choices_.begin()) : static_cast<int>(choices_.size());
    if (it == choices_.end()) choices_.push_back(std::move(on));
    choice_[at] = id;
    return id;
  }

  /// What unit `at.unit` does for micro-batch `at.micro` where the d2h
  /// stream has `backlog` of copies left as its forward starts, or null
  /// where it copies nothing.
  const UnitPlan* plan_of(const At& at, TimeNs backlog) {
    const std::size_t c = chunk_of_unit_[at.unit];
    if (chunks_[c].empty()) return nullptr;
    const int id = choose(c, at.micro);
    const auto key = std::make_tuple(at.unit, id, backlog);
    auto it = plans_.find(key);
    if (it == plans_.end()) it = plans_.emplace(key, price(at.unit, c, choices_[static_cast<std::size_t>(id)], backlog)).first;
    return it->second.down > 0 ? &it->second : nullptr;
  }

  /// Note [Fine-grained offload]'s queue of copies for unit u's groups `on`
  /// of chunk c, the d2h stream busy for `backlog` as the forward starts.
  UnitPlan price(std::size_t u, std::size_t c, const std::vector<bool>& on, TimeNs backlog) const {
    std::vector<const Group*> go;
    for (std::size_t g = 0; g < on.size(); ++g) {
      if (on[g] && chunks_[c][g].unit == u && chunks_[c][g].bytes > 0) go.push_back(&chunks_[c][g]);
    }
    UnitPlan out;
    if (go.empty()) return out;
    const int inflight = ctx_.plan.fine_grained_offloading_max_inflight_offloads;
    std::vector<TimeNs> done(go.size()), ends(go.size());
    TimeNs free = backlog;  // when the d2h stream is free
    for (std::size_t i = 0; i < go.size(); ++i) {
      ends[i] = go[i]->fwd_end + out.wait;
      free = std::max(free, ends[i]) + go[i]->copy;
      done[i] = free;
      out.down += go[i]->bytes;
      out.modules = static_cast<std::uint16_t>(out.modules | go[i]->module);
      if (inflight >= 0) {
        // fine_grained_offloading_max_inflight_offloads: as group i
        // commits, the compute stream waits for the copy of its module's
        // group `inflight` before it in the unit (its own at 0).
        int seen = 0;
        for (std::size_t j = i + 1; j-- > 0;) {
          if (go[j]->module != go[i]->module || seen++ < inflight) continue;
          out.wait += std::max<TimeNs>(0, done[j] - ends[i]);
          break;
        }
      }
    }
    for (std::size_t i = 0; i < go.size(); ++i) {
      Bytes on_device = 0;  // made by the time group i ends, not yet copied
      for (std::size_t j = 0; j <= i; ++j) {
        if (done[j] > ends[i]) on_device += go[j]->bytes;
      }
      out.resident = std::max(out.resident, on_device);
    }
    const TimeNs end = fwd_[u] + out.wait;
    for (std::size_t i = 0; i < go.size(); ++i) {
      if (done[i] > end) out.after += go[i]->bytes;
    }
    out.resident = std::max(out.resident, out.after);
    out.tail = std::max<TimeNs>(0, free - end);
    out.first = go.back()->bytes;
    for (std::size_t i = 0; i + 1 < go.size(); ++i) out.second = std::max(out.second, go[i]->bytes);
    // Each copy up starts as the backward of the group after it (any of
    // the chunk's groups, kept ones too: bulk_reload runs at each group's
    // backward end) is done, and is hidden by the backward between; a
    // unit's last group's comes from the unit before (the trigger).
    const auto& groups = chunks_[c];
    for (const Group* g : go) {
      const auto at = static_cast<std::size_t>(g - groups.data());
      if (at + 1 < groups.size() && groups[at + 1].unit == u) {
        out.stall += std::max<TimeNs>(0, g->copy - (g->bwd_start - groups[at + 1].bwd_end));
      } else {
        out.first_up = std::max<TimeNs>(0, g->copy - g->bwd_start);
      }
    }
    return out;
  }

  StageContext& ctx_;
  std::vector<TimeNs> fwd_, bwd_;            ///< each unit's forward and backward
  std::vector<std::size_t> chunk_of_unit_;   ///< the model chunk each unit is in
  std::vector<std::vector<Group>> chunks_;   ///< each model chunk's groups, in forward order
  std::vector<int> choice_;                  ///< by cell: an index into choices_, or -1
  std::vector<std::vector<bool>> choices_;   ///< the distinct choices of groups made
  std::map<std::tuple<std::size_t, int, TimeNs>, UnitPlan> plans_;  ///< by (unit, choice, backlog)
  std::vector<const UnitPlan*> plan_cell_;   ///< by unit and micro-batch: its plan as its forward priced it
  TimeNs backlog_ = 0;                       ///< copies down left as the next forward starts
  std::vector<bool> immediate_;              ///< by cell: its backward comes next after its forward
  std::map<std::size_t, std::vector<bool>> kept_;  ///< by cell: the groups the stage keeps by delta
  std::vector<TaskId> down_task_;            ///< by unit and micro-batch: what its copies up wait for
  std::int64_t first_ = -1;                  ///< the cell whose backward runs first on the stage
  TaskId last_backward_ = -1;                ///< the stage's latest backward
  TaskId last_forward_ = -1;                 ///< ... and forward
  TaskId last_group_backward_ = -1;          ///< ... and backward of a unit with groups
  /// The order of the stage's passes: each forward's and backward's place.
  std::int64_t seq_ = 0, backward_seq_ = 0, group_backward_seq_ = 0;
  /// By unit: its backward after its first group's (any, kept too) ends,
  /// beside which the next unit's first copy up runs; -1 without groups.
  std::vector<TimeNs> slack_;
  std::vector<std::int64_t> fwd_seq_;        ///< by unit and micro-batch: its forward's place
  TimeNs last_slack_ = 0;                    ///< that unit's slack_
  bool whole_stage_ = false;                 ///< OffloadUnits::whole_stage
  /// A one-stage plan's copies down of the micro-batch in hand, by module,
  /// for fine_grained_offloading_max_inflight_offloads.
  std::map<std::uint16_t, std::vector<TaskId>> queue_;
  std::int64_t queue_micro_ = -1;
};

}  // namespace

std::unique_ptr<StrategyPass> fine_grained_offload_pass(StageContext& ctx, const OffloadUnits& units) {
  if (ctx.plan.offload_modules == 0) return nullptr;
  return std::make_unique<FineGrainedOffload>(ctx, units);
}

}  // namespace dtsim::sim::detail
