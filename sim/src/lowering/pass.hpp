#pragma once
// Strategy passes (private to sim/): the fixed hooks a stage emitter calls
// as it walks its schedule, and the context passes read and add tasks to.
//
// Note [Strategy passes]
// A stage emitter (layer_stage.cpp for one stage, chunk_stage.cpp for a
// pipeline) owns the walk and the unit's own kernels: for each step of
// pipeline_order() it emits the forward or backward of a unit (a layer of
// a one-stage plan, a chunk of a pipeline) with the activations it keeps.
// Everything a parallelism strategy adds (collectives, copies, buffers,
// the memory it frees or rematerialises) comes from a pass in passes/,
// called through these hooks:
//
//   before_forward   tasks the unit's forward waits on (ZeRO-3's gather)
//   forward_memory   what the forward holds or frees (recompute's drop)
//   after_forward    tasks after the forward kernels (tensor-parallel
//                    collectives, the pipeline's send)
//   before_backward  the same for backward (gather, recompute)
//   backward_memory
//   run_backward     a pass may emit the unit's backward kernels itself
//                    (the pipeline's bucketed last backward)
//   run_layer        the layer emitter's: a pass may emit a layer's forward
//                    or backward kernels itself, in pieces (DeepSpeed
//                    ZeRO-3's module by module)
//   after_backward   tensor-parallel collectives, sends, gradient reductions
//   run_weight, after_weight   the same for zb-h1's weight-gradient pass
//                    (Note [Zero bubble] in lower.cpp), which only the
//                    gradient reduction follows; under zb-h1 the backward
//                    hooks see the input-gradient pass B, whose
//                    At::first_backward and last_backward are never set
//   end_backward     a backward pass is done (no-overlap ordering, bucket copies)
//   gradients_reduced  a reduction finished (offload's copy to the host)
//   before_step, optimizer_step, after_step   the optimizer step
//   finish           every stage is emitted (cross-stage dependencies)
//
// "before" hooks run in the order the emitter lists its passes, "after"
// hooks in reverse: passes nest around the unit's kernels as torchtitan's
// parallelize applies them around a model (apply_tp, then apply_ac, then
// apply_fsdp), the first listed outermost. So ZeRO-3's gather comes before
// recompute's rematerialisation, and the tensor-parallel collectives before
// the gradient reduction that follows them. A new strategy is a pass: a
// file in passes/, a factory in passes/passes.hpp and a place in an
// emitter's list.
#include <array>
#include <cstdint>
#include <memory>
#include <string>
#include <string_view>
#include <vector>

#include "lowering/emitter.hpp"

namespace dtsim::sim::detail {

/// Where a hook is called: a unit's pass for one micro-batch on one stage.
struct At {
  int rank = 0;             ///< the simulated rank the tasks run on
  int stage = 0;            ///< its pipeline stage
  std::size_t unit = 0;     ///< the layer (one stage) or chunk (pipeline): index into StageContext::units
  std::int64_t micro = 0;   ///< the micro-batch
  bool first_backward = false;  ///< the unit's first backward of the iteration
  bool last_backward = false;   ///< its last: the gradients are final
};

/// One unit as the passes see it: what its tensor-parallel collectives and
/// its rematerialisation cost, priced once by the emitter.
struct Unit {
  std::string name;  ///< "h.3" (a layer) or "chunk 5"
  const std::vector<LayerComm>* tp_forward = nullptr;   ///< after the forward kernels, in order
  const std::vector<LayerComm>* tp_backward = nullptr;  ///< after the backward kernels
  CollectiveCost tp_forward_cost, tp_backward_cost;     ///< each list summed as one flow (sum_costs)
  /// The context-parallel exchange the attention does not hide (Note
  /// [Context-parallel exchange] in passes/context_parallel.cpp), and the
  /// bytes it moves in all; zero where cp = 1 or the ring is hidden.
  CollectiveCost cp_forward_cost, cp_backward_cost;
  Bytes cp_forward_bytes = 0, cp_backward_bytes = 0;
  /// Expert parallelism's all-to-all dispatch and combine (Layer::ep_forward,
  /// ep_backward) summed as one flow, and the bytes they move; zero where ep = 1.
  CollectiveCost ep_forward_cost, ep_backward_cost;
  Bytes ep_forward_bytes = 0, ep_backward_bytes = 0;
  /// The collectives the layer runs over the data-parallel group inside its
  /// passes (Layer::dp_forward, dp_backward: SyncBatchNorm's) as one flow,
  /// and their bytes; zero where there are none.
  CollectiveCost dp_forward_cost, dp_backward_cost;
  Bytes dp_forward_bytes = 0, dp_backward_bytes = 0;
  /// The rematerialisation before the backward (Note [Activation memory]).
  struct Recompute {
    bool runs = false;
    const char* label = "recompute";
    TimeNs time = 0;
    TimeNs launch = 0;      ///< Note [Host launch] in executor.cpp
    Bytes allocates = 0;    ///< activations it rebuilds
    Bytes frees = 0;        ///< of them, what it frees again as it ends
    /// Another pass runs it (DeepSpeed ZeRO-3 fetches the modules' parameters for it).
    bool taken = false;
    float memory_share = 0;  ///< Task::memory_share of what it reruns
  } recompute;
  Bytes forward_drop = 0;   ///< activations the forward frees as it ends, to be rebuilt
};

class StrategyPass;
/// Adds `one` to `into` as one flow (lowering_common.hpp).
void add_flow(CollectiveCost& into, const CollectiveCost& one);

/// What every pass may read and use: the inputs, the task builder, the
/// units and the gradients reduced so far on the stage being emitted.
struct StageContext {
  explicit StageContext(const LoweringInputs& in)
      : model(in.model), plan(in.plan), cluster(in.cluster), compute_model(in.compute), comm(in.comm), named(in.named),
        b(in.named), w(element_bytes(in.plan.precision)), gw(gradient_element_bytes(in.plan)),
        resident_grads(in.plan.grad_buffer()) {
    streams.fill(-1);
  }
  StageContext(const StageContext&) = delete;
  StageContext& operator=(const StageContext&) = delete;
  virtual ~StageContext() = default;

  const Model& model;
  const ResolvedPlan& plan;
  const ClusterSpec& cluster;
  const ComputeModel& compute_model;
  const CommModel& comm;
  bool named = true;
  TaskBuilder b;
  TaskGraph& g = b.graph();
  Bytes w = 4;                   ///< bytes per parameter or activation element
  Bytes gw = 4;                  ///< bytes per gradient element (gradient_element_bytes)
  /// Megatron's gradient buffer: the gradients live for the whole run (Note
  /// [Megatron's gradient buffer] in emitter.hpp), never allocated or freed
  /// by a step, and reduced where they lie (no bucket copies).
  bool resident_grads = false;
  /// A gradient bucket's copy in or out (Note [Gradient buckets] in
  /// models/torch): none where Megatron reduces its buffer where it lies.
  TimeNs bucket_copy_time(double params, int tensors, bool out) const {
    return resident_grads ? 0 : compute_model.bucket_copy_time(params, tensors, out);
  }
  /// What a data-parallel reduction of `bytes` of gradients moves: under
  /// nanotron's accumulator its fp32 buffer, 4 bytes a gradient (Note
  /// [nanotron's fp32 accumulator] in emitter.hpp).
  Bytes wire_bytes(Bytes bytes) const { return plan.fp32_grad_accumulator ? bytes / gw * 4 : bytes; }
  CommGroup tp_group;
  /// By stage (the simulated rank): its layers' Layer::sp_params, a tied
  /// copy's none (Note [Sequence-parallel gradients] in passes/sequence_parallel.cpp).
  std::vector<std::int64_t> sp_params;
  CommGroup cp_group;  ///< the context-parallel axis's group (one rank where cp = 1)
  /// The expert-parallel group and the expert data-parallel group (Note
  /// [Expert mesh] in cost_comm.cpp); one rank each for a dense model.
  CommGroup ep_group, edp_group;
  /// The data-parallel group (Axis::kDp over the stage's replicas).
  CommGroup dp_group;
  std::vector<Unit> units;
  std::vector<TaskId> reductions;  ///< the stage's gradient reductions, which its step waits for

  /// Prices `op` on `bytes` of gradients or parameters over a data-parallel
  /// `group`, of which `expert` bytes are routed experts': those go over the
  /// expert data-parallel group instead, as Megatron-Core reduces and shards
  /// its expert buffers; the two priced as one flow.
  /// `expert_over`: another group for the experts' bytes (Note [Hybrid
  /// sharding]'s replicas of the expert shards).
  CollectiveCost grad_cost(CollectiveOp op, Bytes bytes, Bytes expert, const CommGroup& group, const CommGroup* expert_over = nullptr) const {
    if (expert <= 0) return comm.collective(op, bytes, group);
    const CommGroup& eg = expert_over != nullptr ? *expert_over : edp_group;
    CollectiveCost out;
    if (bytes > expert) out = comm.collective(op, bytes - expert, group);
    if (eg.ranks > 1) add_flow(out, comm.collective(op, expert, eg));
    return out;
  }
  /// The index of stream `s` on this emitter's ranks (each emitter has its own list).
  int stream(Stream s) const { return streams[static_cast<std::size_t>(s)]; }
  /// "what [mb m]", or nothing when tasks are not named.
  std::string tag(std::int64_t m, const std::string& what) const {
    if (!named) return {};
    return what + " [mb " + std::to_string(m) + "]";
  }
  /// The same of the pieces of `what`, joined only where tasks are named
  /// (a prediction names none, and makes hundreds of thousands).
  template <typename... Pieces>
  std::string tag(std::int64_t m, std::string_view first, const Pieces&... rest) const {
    if (!named) return {};
    std::string what(first);
    (what.append(std::string_view(rest)), ...);
    return tag(m, what);
  }
  /// A reduction of gradients finished: the step waits for it, and every
  /// pass hears of it (offload copies the shard down).
  void reduced(const At& at, TaskId reduce, Bytes shard_bytes);

  std::array<int, 10> streams{};  ///< by Stream; -1 where the rank has none
  const std::vector<std::unique_ptr<StrategyPass>>* passes = nullptr;
};

/// A strategy: the tasks and memory it adds at the fixed hooks of Note
/// [Strategy passes]. Every hook does nothing unless a pass overrides it.
class StrategyPass {
 public:
  virtual ~StrategyPass() = default;
  /// Stage `stage` is about to be emitted, its steps in `order`.
  virtual void begin_stage(int /*stage*/, const std::vector<PipeStep>& /*order*/) {}
  virtual void before_forward(const At&, TaskDeps& /*deps*/) {}
  virtual void forward_memory(const At&, MemOps& /*on_start*/, MemOps& /*on_end*/) {}
  /// Returns the unit's forward exit: `last`, or a task this pass adds after it.
  virtual TaskId after_forward(const At&, TaskId last) { return last; }
  virtual void before_backward(const At&, TaskDeps& /*deps*/) {}
  virtual void backward_memory(const At&, MemOps& /*on_start*/, MemOps& /*on_end*/) {}
  /// The first and last task of a backward this pass emits itself, or
  /// {-1, -1} to leave it to the emitter. It takes `on_start` and `on_end`.
  struct Span {
    TaskId first = -1, last = -1;
  };
  virtual Span run_backward(const At&, MemOps& /*on_start*/, MemOps& /*on_end*/) { return {}; }
  virtual TaskId after_backward(const At&, TaskId last) { return last; }
  /// A layer's kernels of one pass as the layer emitter would run them: one
  /// task of `time` on the compute stream, its host launch `launch`.
  struct LayerWork {
    Pass pass = Pass::kForward;
    TimeNs time = 0, launch = 0;
    float memory_share = 0;  ///< Task::memory_share of its kernels
  };
  /// The layer emitter's forward or backward of a layer, emitted by the
  /// pass, or {-1, -1}. It takes `deps`, `on_start` and `on_end`.
  virtual Span run_layer(const At&, const LayerWork&, TaskDeps& /*deps*/, MemOps& /*on_start*/,
                         MemOps& /*on_end*/) {
    return {};
  }
  /// zb-h1's weight-gradient pass: as run_backward and after_backward.
  virtual Span run_weight(const At&, MemOps& /*on_start*/, MemOps& /*on_end*/) { return {}; }
  virtual TaskId after_weight(const At&, TaskId last) { return last; }
  /// A stage's backward pass over all its units ended with `last`.
  virtual void end_backward(const At&, TaskId /*last*/) {}
  virtual void gradients_reduced(const At&, TaskId /*reduce*/, Bytes /*shard_bytes*/) {}
  /// Before stage `stage`'s optimizer step: what it waits for, what it frees as it starts.
  virtual void before_step(int /*stage*/, TaskDeps& /*deps*/, MemOps& /*on_start*/) {}
  /// The step, where this pass runs it (offload: on the host), else -1.
  virtual TaskId optimizer_step(int /*stage*/, const TaskDeps& /*deps*/, MemOps& /*frees*/) {
    return -1;
  }
  virtual void after_step(int /*stage*/, TaskId /*step*/) {}
  /// Every stage is emitted.
  virtual void finish() {}
};

/// An emitter's passes, each hook called in Note [Strategy passes]' order.
class PassList {
 public:
  /// The context's reductions are heard by these passes.
  explicit PassList(StageContext& ctx) { ctx.passes = &list_; }
  PassList(const PassList&) = delete;
  PassList& operator=(const PassList&) = delete;
  void add(std::unique_ptr<StrategyPass> p) {
    if (p) list_.push_back(std::move(p));
  }
  void begin_stage(int stage, const std::vector<PipeStep>& order) {
    for (auto& p : list_) p->begin_stage(stage, order);
  }
  void before_forward(const At& at, TaskDeps& deps) {
    for (auto& p : list_) p->before_forward(at, deps);
  }
  void forward_memory(const At& at, MemOps& on_start, MemOps& on_end) {
    for (auto& p : list_) p->forward_memory(at, on_start, on_end);
  }
  TaskId after_forward(const At& at, TaskId last) {
    for (auto it = list_.rbegin(); it != list_.rend(); ++it) last = (*it)->after_forward(at, last);
    return last;
  }
  void before_backward(const At& at, TaskDeps& deps) {
    for (auto& p : list_) p->before_backward(at, deps);
  }
  void backward_memory(const At& at, MemOps& on_start, MemOps& on_end) {
    for (auto& p : list_) p->backward_memory(at, on_start, on_end);
  }
  StrategyPass::Span run_backward(const At& at, MemOps& on_start, MemOps& on_end) {
    for (auto& p : list_) {
      const StrategyPass::Span s = p->run_backward(at, on_start, on_end);
      if (s.last >= 0) return s;
    }
    return {};
  }
  StrategyPass::Span run_layer(const At& at, const StrategyPass::LayerWork& work, TaskDeps& deps,
                               MemOps& on_start, MemOps& on_end) {
    for (auto& p : list_) {
      const StrategyPass::Span s = p->run_layer(at, work, deps, on_start, on_end);
      if (s.last >= 0) return s;
    }
    return {};
  }
  TaskId after_backward(const At& at, TaskId last) {
    for (auto it = list_.rbegin(); it != list_.rend(); ++it) last = (*it)->after_backward(at, last);
    return last;
  }
  StrategyPass::Span run_weight(const At& at, MemOps& on_start, MemOps& on_end) {
    for (auto& p : list_) {
      const StrategyPass::Span s = p->run_weight(at, on_start, on_end);
      if (s.last >= 0) return s;
    }
    return {};
  }
  TaskId after_weight(const At& at, TaskId last) {
    for (auto it = list_.rbegin(); it != list_.rend(); ++it) last = (*it)->after_weight(at, last);
    return last;
  }
  void end_backward(const At& at, TaskId last) {
    for (auto it = list_.rbegin(); it != list_.rend(); ++it) (*it)->end_backward(at, last);
  }
  void before_step(int stage, TaskDeps& deps, MemOps& on_start) {
    for (auto& p : list_) p->before_step(stage, deps, on_start);
  }
  TaskId optimizer_step(int stage, const TaskDeps& deps, MemOps& frees) {
    for (auto& p : list_) {
      const TaskId t = p->optimizer_step(stage, deps, frees);
      if (t >= 0) return t;
    }
    return -1;
  }
  void after_step(int stage, TaskId step) {
    for (auto it = list_.rbegin(); it != list_.rend(); ++it) (*it)->after_step(stage, step);
  }
  void finish() {
    for (auto it = list_.rbegin(); it != list_.rend(); ++it) (*it)->finish();
  }

 private:
  std::vector<std::unique_ptr<StrategyPass>> list_;
};

inline void StageContext::reduced(const At& at, TaskId reduce, Bytes shard_bytes) {
  reductions.push_back(reduce);
  if (passes == nullptr) return;
  for (auto& p : *passes) p->gradients_reduced(at, reduce, shard_bytes);
}

/// Expert parallelism's all-to-all dispatch and combine after a unit's
/// kernels (passes/expert_parallel.cpp).
std::unique_ptr<StrategyPass> expert_parallel_pass(StageContext& ctx);
/// SyncBatchNorm's collectives (passes/sync_batch_norm.cpp); none unless a
/// unit has Layer::dp_forward or dp_backward.
std::unique_ptr<StrategyPass> sync_batch_norm_pass(StageContext& ctx);
std::unique_ptr<StrategyPass> sequence_parallel_pass(StageContext& ctx);
/// The tensor-parallel collectives after a unit's forward and backward
/// kernels (passes/tensor_parallel.cpp).
std::unique_ptr<StrategyPass> tensor_parallel_pass(StageContext& ctx);
/// Full or selective recompute's rematerialisation before each backward
/// (passes/recompute.cpp).
std::unique_ptr<StrategyPass> recompute_pass(StageContext& ctx);
/// Context parallelism's K/V exchange, what attention leaves of it exposed,
/// after a unit's kernels (passes/context_parallel.cpp).
std::unique_ptr<StrategyPass> context_parallel_pass(StageContext& ctx);

}  // namespace dtsim::sim::detail
