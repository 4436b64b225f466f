// The ZeRO-3 modules pass: DeepSpeed's stage 3 on a one-stage plan, its
// parameters gathered module by module as its coordinator decides (Note
// [ZeRO-3 modules] in lowering/zero3_coordinator.hpp), its gradients
// reduce-scattered a bucket at a time (Note [ZeRO-3 gradient bucket]).
// Each layer's forward, recomputed forward and backward run as one task per
// module, each waiting for the gathers of its own parameters; the gathers a
// module's hook issues wait for the module before it, as the host reaches
// the hook, and their buffers are allocated then.
//
// Note [ZeRO-3 gradient bucket]
// DeepSpeed's stage 3 (deepspeed/runtime/zero/stage3.py) copies each
// parameter's gradient, once autograd has made it, into one flat bucket of
// reduce_bucket_size elements in the parameters' type, allocated at start;
// a gradient that would overflow it first reduce-scatters what the bucket
// holds (__reduce_and_partition_ipg_grads) into the rank's partition, kept
// for the whole run. The copy runs on the reduction's stream, after the
// reduce-scatter that empties the bucket, and frees the gradient; before
// it issues a reduce-scatter, the host waits for all but the last two it
// issued (max_param_reduce_events, 2), so the backward waits for the
// network and the gradients in flight stay bounded. What the bucket holds
// is reduce-scattered as the backward ends. Every micro-step reduces. A
// gradient larger than the whole bucket is not copied: it is
// reduce-scattered from where autograd made it, and freed after.
// dtsim counts a module's gradients as its backward starts, in one copy,
// and the tied LM head's gradient with the embedding's, where autograd
// accumulates it into .grad.
//
// Note [Frozen weights under ZeRO-3]
// DeepSpeed's stage 3 partitions every parameter zero.Init or the engine
// sees, frozen or not (partition_parameters.py converts each one; the
// LoRA recipes of transformers' Trainer, axolotl and LLaMA-Factory run
// ZeRO-3 over a frozen base this way), and its hooks gather a module's
// parameters whatever their requires_grad. Frozen ones get no gradient,
// so nothing of theirs enters the bucket: the reduce-scatters carry the
// adapters alone (stage3.py registers its gradient hooks on parameters
// that require grad). A module's pre-backward hook is registered on
// outputs that require grad (parameter_offload.py,
// _pre_backward_module_hook over the outputs), so a frozen embedding fed
// token ids is not gathered in the backward; every other frozen module
// is, for its input's gradient. So each rank holds its shard of the
// frozen weights (resident_frozen), the coordinator gathers them module
// by module as it does trained ones (models/src/peft.cpp keeps the base's
// modules, frozen, with each adapter's lora_A and lora_B after the module
// they adapt, as PEFT's LoraLayer runs them), and nothing refreshes them
// after the step. A QLoRA base is gathered at its stored bytes (the
// layer's share, LayerContext::gathered_param_bytes). Small frozen tensors
// are kept whole as trained ones are (ds_persist); their whole copies are
// counted as shards, which the norms' few kilobytes leave unseen. An
// LLM.int8 base is refused where the plan is resolved, as FSDP refuses it.
#include <algorithm>
#include <map>
#include <string>

#include "dtsim/sim/buckets.hpp"
#include "dtsim/sim/error.hpp"
#include "lowering/layer_context.hpp"
#include "lowering/lowering_common.hpp"
#include "lowering/zero3_coordinator.hpp"

namespace dtsim::sim::detail {
namespace {

enum class Use { kForward, kRecompute, kBackward };

class Zero3Modules final : public StrategyPass {
 public:
  explicit Zero3Modules(LayerContext& ctx) : ctx_(ctx) {
    LayerContext& c = ctx_;
    const ResolvedPlan& p = c.plan;
    cap_ = zero3_bucket_elements(p);
    std::map<std::string, int> first_tensor;  // module name -> its first parameter's id (tied heads)
    for (std::size_t l = 0; l < c.layers.size(); ++l) {
      const Layer& L = c.layers[l];
      LayerInfo info;
      const std::vector<ParamModule> modules = modules_of(L);
      // Gathered bytes over the elements in the working type: FP8 weights
      // under fp8_param_gather, and a QLoRA base's NF4 bytes, gather fewer.
      const double elements = static_cast<double>(L.params + L.borrowed_params + c.gathered_frozen(L));
      info.gather_scale = static_cast<double>(c.gathered_param_bytes(L)) / std::max(1.0, elements * static_cast<double>(c.w));
      for (const ParamModule& mod : modules) {
        Module m;
        m.name = mod.name.empty() ? L.name : L.name + "." + mod.name;
        if (!mod.tied.empty()) {
          const auto it = first_tensor.find(mod.tied);
          DTSIM_ASSERT(it != first_tensor.end(), "ZeRO-3 modules: " + L.name + "." + mod.name + " ties to no module named " + mod.tied);
          m.params.push_back(it->second);
        } else {
          for (std::int64_t t : mod.tensors) {
            m.params.push_back(static_cast<int>(numel_.size()));
            if (!mod.frozen) m.grads += t;
            numel_.push_back(t);
            persist_.push_back(t <= p.stage3_param_persistence_threshold);
            frozen_.push_back(mod.frozen);
            expert_.push_back(modules.size() == 1 && L.params > 0 ? static_cast<double>(L.expert_params) / static_cast<double>(L.params) : 0.0);
          }
          if (!m.params.empty()) first_tensor.emplace(mod.name, m.params.front());
        }
        info.mods.push_back(std::move(m));
      }
      shares(L, modules, info);
      layers_.push_back(std::move(info));
    }
    // One micro-step's trace: the forward, then each layer's backward (its
    // checkpointed forward first, where full recompute runs it).
    std::vector<std::vector<int>> trace;
    auto record = [&](std::size_t l, Use u) {
      LayerInfo& info = layers_[l];
      info.first[static_cast<int>(u)] = trace.size();
      const std::size_t k = info.mods.size();
      // Note [Frozen weights under ZeRO-3]: a layer without a backward (a
      // fine-tune's frozen embedding) has no pre-backward hook to fetch with.
      const bool none = u == Use::kBackward && c.layers[l].backward.empty();
      for (std::size_t j = 0; j < k; ++j) trace.push_back(none ? std::vector<int>{} : info.mods[u == Use::kBackward ? k - 1 - j : j].params);
    };
    for (std::size_t l = 0; l < layers_.size(); ++l) record(l, Use::kForward);
    for (std::size_t l = layers_.size(); l-- > 0;) {
      if (c.units[l].recompute.runs && p.recompute == Recompute::kFull) {
        record(l, Use::kRecompute);
        c.units[l].recompute.taken = true;
      }
      record(l, Use::kBackward);
    }
    steps_ = coordinate_zero3(trace, numel_, persist_,
                              {p.stage3_prefetch_bucket_size, p.stage3_max_live_parameters, p.stage3_max_reuse_distance});
    for (std::size_t i = 0; i < numel_.size(); ++i) {
      if (persist_[i] && !frozen_[i]) persistent_ += numel_[i];
    }
  }

  void before_backward(const At& at, TaskDeps& deps) override {
    const Unit& u = ctx_.units[at.unit];
    if (!u.recompute.taken) return;
    // The checkpointed forward, module by module, as the recompute pass
    // would run it whole (Unit::Recompute).
    MemOps on_start{{MemCategory::kActivations, u.recompute.allocates}}, on_end;
    add_bytes(on_end, MemCategory::kActivations, -u.recompute.frees);
    const Span s = emit(at, Use::kRecompute, u.recompute.time, u.recompute.launch, u.recompute.memory_share, deps, on_start, on_end);
    deps.push_back(s.last);
  }

  Span run_layer(const At& at, const LayerWork& work, TaskDeps& deps, MemOps& on_start,
                 MemOps& on_end) override {
    if (work.pass == Pass::kBackward) {
      // The gradients come module by module (Note [ZeRO-3 gradient bucket]).
      auto grads = [](const MemOp& op) { return op.category == MemCategory::kGradients; };
      on_start.erase(std::remove_if(on_start.begin(), on_start.end(), grads), on_start.end());
      on_end.erase(std::remove_if(on_end.begin(), on_end.end(), grads), on_end.end());
    }
    return emit(at, work.pass == Pass::kForward ? Use::kForward : Use::kBackward, work.time, work.launch, work.memory_share, deps, on_start,
                on_end);
  }

  void end_backward(const At& at, TaskId) override { flush(at); }

  void after_step(int, TaskId step) override { gather_persistent(ctx_, persistent_, step); }

 private:
  struct Module {
    std::string name;         ///< "h.3.mlp.fc1": its tasks' names, made once
    std::vector<int> params;  ///< parameter ids (a tied head's is its embedding's)
    std::int64_t grads = 0;   ///< elements of the gradients it makes (its own tensors)
    double share = 0;         ///< of the layer's work
  };
  struct LayerInfo {
    std::vector<Module> mods;
    std::size_t first[3] = {0, 0, 0};  ///< by Use: the trace step of its first module
    double gather_scale = 1;           ///< gathered over full bytes (FP8 weights under fp8_param_gather)
  };

  /// Each module's share of the layer's work: its forward kernels' time,
  /// from the kernel its name names to the next module's.
  void shares(const Layer& L, const std::vector<ParamModule>& modules, LayerInfo& info) const {
    const std::size_t k = info.mods.size();
    if (k == 1) {
      info.mods[0].share = 1;
      return;
    }
    std::vector<double> time(k, 0);
    std::size_t owner = 0;
    bool started = false;
    for (const Kernel& kernel : L.forward) {
      for (std::size_t j = started ? owner : 0; j < k; ++j) {
        if (modules[j].name == kernel.name) {
          owner = j;
          started = true;
          break;
        }
      }
      time[owner] += static_cast<double>(ctx_.compute_model.kernel_time(kernel, ctx_.plan.precision)) * static_cast<double>(kernel.repeat);
    }
    double total = 0;
    for (double t : time) total += t;
    for (std::size_t j = 0; j < k; ++j) info.mods[j].share = total > 0 ? time[j] / total : 1.0 / static_cast<double>(k);
  }

  /// A layer's pass as its modules' tasks; returns the first and last.
  Span emit(const At& at, Use use, TimeNs time, TimeNs launch, float memory_share, TaskDeps& deps, MemOps& on_start,
            MemOps& on_end) {
    LayerContext& c = ctx_;
    const LayerInfo& info = layers_[at.unit];
    const std::size_t k = info.mods.size();
    const Phase phase = use == Use::kForward ? Phase::kForward : use == Use::kRecompute ? Phase::kRecompute : Phase::kBackward;
    const char* label = use == Use::kForward ? "fwd " : use == Use::kRecompute ? "recompute " : "bwd ";
    // Every micro-step starts with only the persistent parameters gathered.
    if (at.unit == 0 && use == Use::kForward) gathered_by_.assign(numel_.size(), -1);
    Span span;
    TimeNs spent = 0, launched = 0;
    // The host reaches the first module's hook once the module before it
    // (the last of the layer before, or of its pass before) is under way;
    // its gathers wait for that module's kernels, as the next ones do.
    TaskDeps issue = deps;
    if (last_ >= 0) issue.push_back(last_);
    if (waits_ >= 0) issue.push_back(waits_);
    waits_ = -1;
    for (std::size_t n = 0; n < k; ++n) {
      const std::size_t j = use == Use::kBackward ? k - 1 - n : n;
      const Module& mod = info.mods[j];
      const Zero3Step& st = steps_[info.first[static_cast<int>(use)] + n];
      const std::string& name = mod.name;
      if (!st.fetch.empty()) gather(at.micro, st.fetch, name, issue, info.gather_scale);
      if (!st.prefetch.empty()) gather(at.micro, st.prefetch, "prefetch after " + name, issue, info.gather_scale);
      TaskDeps run = issue;
      for (int p : mod.params) {
        if (gathered_by_[static_cast<std::size_t>(p)] >= 0) run.push_back(gathered_by_[static_cast<std::size_t>(p)]);
      }
      MemOps start, end;
      if (n == 0) start = std::move(on_start);
      if (n + 1 == k) end = std::move(on_end);
      const Bytes grads = use == Use::kBackward ? mod.grads * c.gw : 0;
      add_bytes(start, MemCategory::kGradients, grads);
      Bytes freed = 0;
      for (int p : st.release) freed += param_bytes(p, info.gather_scale);
      add_bytes(end, MemCategory::kParameters, -freed);
      // Shares sum to the whole: the last module takes what rounding left.
      const TimeNs t = n + 1 == k ? time - spent : static_cast<TimeNs>(static_cast<double>(time) * mod.share);
      const TimeNs h = n + 1 == k ? launch - launched : static_cast<TimeNs>(static_cast<double>(launch) * mod.share);
      spent += t;
      launched += h;
      const TaskId task = c.compute(c.tag(at.micro, label, name), phase, t, run, std::move(start), std::move(end));
      c.g.tasks[task].launch = h;
      c.g.tasks[task].memory_share = memory_share;  // Note [Interference] in engine/executor.cpp
      if (span.first < 0) span.first = task;
      span.last = task;
      issue = {task};
      last_ = task;
      if (grads > 0) add_to_bucket(at, task, mod, name);
      if (waits_ >= 0) issue.push_back(waits_);
      waits_ = -1;
    }
    return span;
  }

  /// Bytes of parameter p gathered whole.
  Bytes param_bytes(int p, double scale) const {
    return static_cast<Bytes>(static_cast<double>(numel_[static_cast<std::size_t>(p)] * ctx_.w) * scale);
  }

  /// One coalesced all-gather of `params` (their offloaded shards up first).
  void gather(std::int64_t m, const std::vector<int>& params, const std::string& what, const TaskDeps& issue,
              double scale) {
    LayerContext& c = ctx_;
    Bytes full = 0;
    double expert = 0;
    for (int p : params) {
      full += param_bytes(p, scale);
      expert += static_cast<double>(param_bytes(p, scale)) * expert_[static_cast<std::size_t>(p)];
    }
    TaskDeps deps = issue;
    if (c.plan.offload_params == Offload::kCpu) {
      deps.push_back(c.copy(c.tag(m, "h2d params ", what), LayerContext::ceil_div(full, c.n), Stream::kH2D, deps));
    }
    // The gathered parameters' buffer is allocated as the hook issues the
    // gather (the caching allocator hands it out on the host), not when the
    // network gets to it.
    deps = {c.compute(c.tag(m, "allocate ", what), Phase::kComm, 0, std::move(deps), {{MemCategory::kParameters, full}}, {},
                      Stream::kHost)};
    const Bytes buffers = c.gather_bytes(full);
    MemOps on_start, on_end;
    add_bytes(on_start, MemCategory::kBuffers, buffers);
    add_bytes(on_end, MemCategory::kBuffers, -buffers);
    const std::string name = "all_gather " + what;
    const TaskId g = c.collective(c.tag(m, name), CollectiveOp::kAllGather, full, c.shard_group, Stream::kParamComm, deps,
                                  std::move(on_start), std::move(on_end), static_cast<Bytes>(expert));
    if (!c.cluster.device.comm_overlaps_compute) {
      // Note [CPU collectives], as the sharded-parameters pass does.
      c.compute(c.tag(m, name + " (cores)"), Phase::kComm, c.g.tasks[g].cost.total(), std::move(deps));
    }
    for (int p : params) gathered_by_[static_cast<std::size_t>(p)] = g;
  }

  /// Note [ZeRO-3 gradient bucket]: a module's gradients into the bucket,
  /// what it held reduce-scattered first where they would overflow it.
  void add_to_bucket(const At& at, TaskId made, const Module& mod, const std::string& name) {
    LayerContext& c = ctx_;
    if (in_bucket_ > 0 && in_bucket_ + mod.grads > cap_) flush(at);
    for (int p : mod.params) bucket_expert_ += static_cast<double>(numel_[static_cast<std::size_t>(p)]) * expert_[static_cast<std::size_t>(p)];
    if (mod.grads > cap_) {
      // Larger than the bucket: reduce-scattered from where autograd made
      // it, and freed once that is done (__add_grad_to_ipg_bucket).
      copies_.push_back(made);
      unbucketed_ += mod.grads * c.gw;
      in_bucket_ += mod.grads;
      return;
    }
    TaskDeps deps{made};
    if (!flushes_.empty()) deps.push_back(flushes_.back());  // the bucket is free again
    const TimeNs t = c.bucket_copy_time(static_cast<double>(mod.grads), static_cast<int>(mod.params.size()), false);
    const TaskId copy = c.compute(c.tag(at.micro, "copy grads in ", name), Phase::kBackward, t, std::move(deps), {},
                                  {{MemCategory::kGradients, -mod.grads * c.gw}}, Stream::kGradComm);
    c.g.tasks[copy].memory_share = 1;  // a copy (Note [Interference] in engine/executor.cpp)
    copies_.push_back(copy);
    in_bucket_ += mod.grads;
  }

  /// Reduce-scatters what the bucket holds; the host waits for the
  /// reduce-scatter three back before it issues this one.
  void flush(const At& at) {
    LayerContext& c = ctx_;
    if (in_bucket_ == 0) return;
    const Bytes b = in_bucket_ * c.gw;
    if (flushes_.size() >= 3) waits_ = flushes_[flushes_.size() - 3];
    TaskDeps deps = copies_;
    if (waits_ >= 0) deps.push_back(waits_);
    const Bytes recv = c.receive_bytes(b);
    // Note [One process group] in passes/sharded_parameters.cpp: behind the
    // gathers on the group's one stream; over Gloo, on the ranks' cores.
    const Stream s = c.cluster.device.comm_overlaps_compute ? Stream::kParamComm : Stream::kGradComm;
    TaskId rs = c.collective(c.tag(at.micro, "reduce_scatter bucket " + std::to_string(flushes_.size())),
                             CollectiveOp::kReduceScatter, b, c.shard_group, s, std::move(deps),
                             {{MemCategory::kBuffers, recv}}, {{MemCategory::kBuffers, -recv}, {MemCategory::kGradients, -unbucketed_}},
                             static_cast<Bytes>(bucket_expert_ * static_cast<double>(c.gw)));
    flushes_.push_back(rs);
    c.reduced(at, rs, LayerContext::ceil_div(b, c.n));
    copies_.clear();
    unbucketed_ = 0;
    in_bucket_ = 0;
    bucket_expert_ = 0;
  }

  LayerContext& ctx_;
  std::vector<LayerInfo> layers_;
  std::vector<std::int64_t> numel_;  ///< by parameter id
  std::vector<bool> persist_;        ///< kept whole (ds_persist)
  std::vector<bool> frozen_;         ///< a fine-tune's frozen weight: gathered, never reduced or refreshed
  std::vector<double> expert_;       ///< of a parameter's elements, routed experts' share
  std::vector<Zero3Step> steps_;     ///< the coordinator's decisions over one micro-step
  std::int64_t persistent_ = 0;      ///< elements kept whole
  std::vector<TaskId> gathered_by_;  ///< this micro-step: the gather that brought each parameter (-1: none)
  std::int64_t cap_ = 0;             ///< the bucket's elements
  std::int64_t in_bucket_ = 0;       ///< elements it holds
  double bucket_expert_ = 0;         ///< of them, routed experts'
  std::vector<TaskId> copies_;       ///< the copies into it since it was last emptied
  Bytes unbucketed_ = 0;             ///< gradients too large for it, reduced where they lie
  std::vector<TaskId> flushes_;      ///< this iteration's reduce-scatters, in order
  TaskId waits_ = -1;                ///< a reduce-scatter the host waits for before its next kernel
  TaskId last_ = -1;                 ///< the last module's kernels emitted
};

}  // namespace

std::int64_t zero3_bucket_elements(const ResolvedPlan& plan) {
  const Bytes gw = gradient_element_bytes(plan);
  return std::max<std::int64_t>(1, plan.bucket_bytes / std::max<Bytes>(1, gw));
}

std::unique_ptr<StrategyPass> zero3_modules_pass(LayerContext& ctx) { return std::make_unique<Zero3Modules>(ctx); }

}  // namespace dtsim::sim::detail
