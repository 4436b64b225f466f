// The layer-wise stage emitter: a plan of one stage (data, tensor and
// sequence parallelism, ZeRO / FSDP, offload, recompute) lowered layer by
// layer into the task graph of one iteration (the walk: lower.cpp).
//
// Note [Symmetry]
// Every data-parallel replica runs the same program on its own shard of the
// batch, so one simulated rank stands for all `dp` of them; collectives are
// priced for the real group size. Cost grows with layers x micro-steps, never
// with the GPU count.
//
// Note [DDP buckets]
// PyTorch DDP (Li et al. 2020, "PyTorch Distributed", section 3.2) packs
// gradients into buckets in reverse parameter order, roughly the order
// backward produces them; the first bucket is capped at 1 MiB
// (dist._DEFAULT_FIRST_BUCKET_BYTES), the rest at bucket_cap_mb (25 MB). A
// bucket's all-reduce is launched as soon as its last gradient is ready and
// overlaps the rest of backward. Under no_sync (all but the last accumulation
// step) nothing is communicated. DDP keeps the bucket buffers for the life of
// the model (gradient_as_bucket_view=False): a second copy of the gradients,
// counted as buffers. Filling a bucket and copying it back after its
// all-reduce costs time on the compute stream (Note [Gradient buckets] in
// models/torch), priced where a profile timed it.
//
// Note [ZeRO]
// DeepSpeed ZeRO (Rajbhandari et al. 2020): stage 1 shards optimizer state,
// all-reduces gradient buckets at the accumulation boundary, steps its shard
// and all-gathers the updated parameters; stage 2 also shards gradients,
// reduce-scattering each bucket every micro-step; stage 3 also shards
// parameters, all-gathering each layer before its forward and again before its
// backward (prefetching the next layer while the current one computes) and
// reduce-scattering its gradients right after its backward. Parameters of
// layers under 1e5 elements stay whole on every rank
// (stage3_param_persistence_threshold): resident, never gathered per layer,
// and refreshed by one all-gather of their shards after the optimizer step.
// PyTorch FSDP (Zhao et al. 2023) is stage 3 with one unit per layer and no
// persistence threshold; SHARD_GRAD_OP is stage 2 and HYBRID_SHARD shards
// within a node and all-reduces the shards across nodes.
// Collective buffers, held while a collective runs: a reduce-scatter
// receives the rank's shard with NCCL, the whole bucket with Gloo (an
// all-to-all, then a local sum, as dtsim validate's runtime does in LibTorch
// 1.13); a Gloo all-gather takes a copy of the shard and gathers into a flat
// buffer of the whole before copying out, where NCCL gathers in place.
//
// Note [Offload]
// ZeRO-Offload (Ren et al. 2021): gradients go to the host after their
// reduction (device-to-host over PCIe, overlapped with backward), the Adam step
// runs on the host CPU, and the updated fp16 parameters come back host-to-device
// before the all-gather. ZeRO-Infinity's parameter offload keeps the
// parameter shards on the host and copies each layer's shard up before it is
// gathered.
#include "dtsim/sim/lowering.hpp"

#include <algorithm>
#include <string>

#include "dtsim/sim/buckets.hpp"
#include "dtsim/sim/error.hpp"
#include "lowering/emitter.hpp"
#include "lowering/lowering_common.hpp"

namespace dtsim::sim {
namespace {

// Indices of the rank's streams (build names them).
enum StreamIndex { kCompute = 0, kGradComm = 1, kParamComm = 2, kD2H = 3, kH2D = 4, kHost = 5 };


Bytes ceil_div(Bytes a, Bytes b) { return (a + b - 1) / b; }


class LayerStage final : public detail::StageEmitter {
 public:
  explicit LayerStage(const detail::LoweringInputs& in)
      : model_(in.model), plan_(in.plan), cluster_(in.cluster), compute_(in.compute), comm_(in.comm), named_(in.named),
        b_(in.named) {
    const ResolvedPlan& p = plan_;
    const ClusterSpec& c = cluster_;
    const WorkloadShape shape = detail::workload_shape(p, c.device);
    layers_ = model_.layers(shape);
    DTSIM_ASSERT(!layers_.empty(), "model has no layers");
    w_ = element_bytes(p.precision);
    zero_ = p.zero_stage;
    n_ = p.shard_group;
    tp_group_ = axis_group(p.mesh, Axis::kTp, c.gpus_per_node);
    // Every micro-step repeats the same layer work: price each layer once.
    fwd_time_.reserve(layers_.size());
    bwd_time_.reserve(layers_.size());
    for (const auto& L : layers_) {
      fwd_time_.push_back(compute_.layer_time(L, Pass::kForward, p.precision, shape));
      bwd_time_.push_back(compute_.layer_time(L, Pass::kBackward, p.precision, shape));
      core_time_.push_back(p.recompute == Recompute::kSelective ? compute_.attention_core_time(L, p.precision, shape) : 0);
      memory_.push_back(compute_.layer_memory(L, p.precision, shape));
      fwd_launch_.push_back(compute_.layer_launch_time(L, Pass::kForward, p.precision));
      bwd_launch_.push_back(compute_.layer_launch_time(L, Pass::kBackward, p.precision));
      tp_fwd_.push_back(detail::sum_costs(L.tp_forward, tp_group_, comm_));
      tp_bwd_.push_back(detail::sum_costs(L.tp_backward, tp_group_, comm_));
      params_ += L.params;
    }
    make_rank();
  }

  void begin_stage(int, const std::vector<PipeStep>&) override {}
  void step(int, std::size_t, const PipeStep& st) override {
    // One stage, one chunk: forward and backward of each micro-batch in turn.
    if (st.forward) {
      forward(st.micro);
    } else {
      backward(st.micro, st.micro + 1 == plan_.grad_accum);
    }
  }
  void end_stage(int) override { optimizer_step(); }
  TaskGraph finish() override { return std::move(g_); }

 private:
  void make_rank() {
    SimRank rank;
    rank.rank = 0;
    rank.stage = 0;
    rank.replicas = plan_.dp * plan_.tp;
    for (Stream s : {Stream::kCompute, Stream::kGradComm, Stream::kParamComm, Stream::kD2H, Stream::kH2D, Stream::kHost}) {
      rank.streams.push_back(to_string(s));
    }
    setup_groups(rank);
    // ZeRO-3's persistent layers are whole on every rank besides their shard.
    detail::add_resident(rank, plan_, cluster_, params_, persistent_params());
    g_.ranks.push_back(rank);

    g_.stage_layers = {static_cast<int>(layers_.size())};
    // Forward, backward and up to four communication tasks per layer and
    // micro-step: reserving avoids copying the task list as it grows.
    g_.tasks.reserve(layers_.size() * static_cast<std::size_t>(plan_.grad_accum) * 6 + 16);
    plan_buckets();
  }

  // ---- communicators -------------------------------------------------------
  void setup_groups(SimRank& rank) {
    const int per_node = cluster_.gpus_per_node;
    dp_group_ = axis_group(plan_.mesh, Axis::kDp, per_node);
    shard_group_ = axis_group(plan_.mesh, Axis::kDp, per_node, n_);
    int inter_groups = dp_group_.ranks_per_node < dp_group_.ranks ? dp_group_.groups_per_node : 1;
    if (plan_.hybrid_shard && plan_.dp > n_) {
      // The replicas of each shard, n_ data-parallel ranks apart (a node's
      // shard group apart); every local rank's group crosses the network at once.
      replica_group_ = axis_group(plan_.mesh, Axis::kDp, per_node, plan_.dp / n_, n_);
      inter_groups = replica_group_.groups_per_node;
    }
    detail::set_link_capacity(rank, cluster_, comm_, inter_groups);
  }

  // ---- helpers -------------------------------------------------------------
  Bytes grad_bytes(const Layer& l) const { return l.params * w_; }
  Bytes total_grad_bytes() const {
    Bytes b = 0;
    for (const auto& l : layers_) b += grad_bytes(l);
    return b;
  }
  bool recomputed(const Layer& l) const {
    return plan_.recompute == Recompute::kFull && l.is_block();
  }
  bool core_recomputed(const Layer& l) const {
    return plan_.recompute == Recompute::kSelective && l.attention_core_bytes > 0;
  }
  /// The tensor-parallel collectives after a layer's pass, serial on the compute stream.
  TaskId tp_comm(std::int64_t m, std::size_t l, Pass pass, TaskId after) {
    const auto& comms = pass == Pass::kForward ? layers_[l].tp_forward : layers_[l].tp_backward;
    if (plan_.tp <= 1 || comms.empty()) return after;
    Bytes bytes = 0;
    for (const auto& c : comms) bytes += c.bytes * c.count;
    return b_.collective(tag(m, std::string("tp ") + (pass == Pass::kForward ? "fwd " : "bwd ") + layers_[l].name), 0,
                         kCompute, comms.front().axis, comms.front().op, bytes,
                         pass == Pass::kForward ? tp_fwd_[l] : tp_bwd_[l], {after});
  }
  /// Parameters of ZeRO-3 layers under the persistence threshold (Note [ZeRO]).
  std::int64_t persistent_params() const {
    std::int64_t n = 0;
    for (const auto& l : layers_) {
      if (zero3_keeps_whole(plan_, l.params + l.borrowed_params)) n += l.params;
    }
    return n;
  }
  /// Whether a ZeRO-3 layer's parameters are gathered (Note [ZeRO]).
  bool gathered(const Layer& l) const {
    const std::int64_t all = l.params + l.borrowed_params;
    return zero_ == 3 && n_ > 1 && all > 0 && !zero3_keeps_whole(plan_, all);
  }
  Bytes full_param_bytes(const Layer& l) const { return (l.params + l.borrowed_params) * w_; }

  TaskId compute(const std::string& name, Phase phase, TimeNs duration, std::vector<TaskId> deps,
                 std::vector<MemOp> on_start = {}, std::vector<MemOp> on_end = {}, int stream = kCompute) {
    return b_.compute(name, 0, stream, phase, duration, std::move(deps), std::move(on_start), std::move(on_end),
                      stream == kHost);
  }

  /// A collective over the data-parallel axis (or a sub-group of it).
  TaskId collective(const std::string& name, CollectiveOp op, Bytes bytes, const CommGroup& group, int stream,
                    std::vector<TaskId> deps, std::vector<MemOp> on_start = {}, std::vector<MemOp> on_end = {}) {
    // Note [CPU collectives]: where ranks are CPU cores, a gradient collective
    // runs on the cores the ranks compute on and cannot overlap their compute.
    // Parameter gathers keep their stream: they are issued a layer ahead
    // (FSDP's prefetch, as dtsim_worker does too), so their buffers are alive
    // early; gather() puts their time on the compute stream beside them,
    // before the layer that needs them.
    // Without overlap (plan.overlap false) the reductions already wait for the
    // whole backward: they keep their stream (on the compute stream they would
    // queue ahead of the backward they depend on).
    const bool serial = !cluster_.device.comm_overlaps_compute && stream != kParamComm && plan_.overlap;
    return b_.collective(name, 0, serial ? kCompute : stream, Axis::kDp, op, bytes, comm_.collective(op, bytes, group),
                         std::move(deps), std::move(on_start), std::move(on_end));
  }

  TaskId copy(const std::string& name, Bytes bytes, int stream, std::vector<TaskId> deps) {
    return b_.host_copy(name, 0, stream, bytes, comm_.host_copy(bytes), std::move(deps));
  }

  std::string tag(std::int64_t m, const std::string& what) const {
    if (!named_) return {};
    return what + " [mb " + std::to_string(m) + "]";
  }

  /// ZeRO-3: (offloaded parameters up, then) all-gather of layer l; `after`
  /// bounds the prefetch.
  TaskId gather(std::int64_t m, std::size_t l, const char* pass, std::vector<TaskId> after) {
    const Layer& L = layers_[l];
    std::vector<TaskId> deps = std::move(after);
    if (plan_.offload_params == Offload::kCpu) {
      deps.push_back(copy(tag(m, std::string("h2d params ") + L.name), ceil_div(full_param_bytes(L), n_), kH2D, deps));
    }
    const Bytes full = full_param_bytes(L);
    const Bytes buffers = gather_bytes(full);
    std::vector<MemOp> on_start{{MemCategory::kParameters, full}}, on_end;
    detail::add_bytes(on_start, MemCategory::kBuffers, buffers);
    detail::add_bytes(on_end, MemCategory::kBuffers, -buffers);
    const TaskId g = collective(tag(m, std::string("all_gather ") + pass + " " + L.name), CollectiveOp::kAllGather, full,
                                shard_group_, kParamComm, deps, std::move(on_start), std::move(on_end));
    if (!cluster_.device.comm_overlaps_compute) {
      // Note [CPU collectives]: the gather is issued early (its buffer is
      // alive from then), but its transfers run on the cores the layers
      // compute on. Its time is taken from the compute stream, in order
      // before the layer that needs it.
      compute(tag(m, std::string("all_gather ") + pass + " " + L.name + " (cores)"), Phase::kComm, g_.tasks[g].cost.total(),
              std::move(deps));
    }
    return g;
  }

  // ---- forward -------------------------------------------------------------
  void forward(std::int64_t m) {
    fwd_.assign(layers_.size(), -1);
    for (std::size_t l = 0; l < layers_.size(); ++l) {
      const Layer& L = layers_[l];
      std::vector<TaskId> deps;
      TaskId g = -1;
      if (gathered(L)) {
        // Prefetch one layer ahead: gather l may start once l-2 has run.
        std::vector<TaskId> after;
        if (l >= 2) after.push_back(fwd_[l - 2]);
        g = gather(m, l, "fwd", after);
        deps.push_back(g);
      }
      // Note [Layer memory]: what the pass holds for a moment, where measured.
      const Bytes transient = memory_[l] ? memory_[l]->forward_transient : 0;
      std::vector<MemOp> on_start{{MemCategory::kActivations, L.saved_bytes + transient}};
      std::vector<MemOp> on_end;
      detail::add_bytes(on_end, MemCategory::kActivations, -transient);
      if (recomputed(L)) {
        // Keep only the layer's input (the checkpoint); intermediates go.
        on_end.push_back({MemCategory::kActivations, -(L.saved_bytes - checkpoint_bytes(l))});
      } else if (core_recomputed(L)) {
        on_end.push_back({MemCategory::kActivations, -L.attention_core_bytes});
      }
      if (g >= 0) on_end.push_back({MemCategory::kParameters, -full_param_bytes(L)});
      const TaskId f = compute(tag(m, "fwd " + L.name), Phase::kForward, fwd_time_[l], deps, on_start, on_end);
      g_.tasks[f].launch = fwd_launch_[l];  // Note [Host launch] in executor.cpp
      fwd_[l] = tp_comm(m, l, Pass::kForward, f);
    }
  }

  Bytes checkpoint_bytes(std::size_t l) const { return l == 0 ? 0 : layers_[l - 1].output_bytes; }

  // ---- backward ------------------------------------------------------------
  void plan_buckets() {
    // Buckets in reverse layer order (Note [DDP buckets]); ZeRO-3 reduces per layer.
    bucket_of_.assign(layers_.size(), -1);
    bucket_bytes_.clear();
    bucket_params_.clear();
    bucket_tensors_.clear();
    bucket_last_layer_.clear();
    std::vector<Bytes> bytes;  // in backward order
    for (std::size_t i = layers_.size(); i-- > 0;) bytes.push_back(grad_bytes(layers_[i]));
    const std::vector<int> assigned = assign_buckets(bytes, first_bucket_bytes(plan_), plan_.bucket_bytes);
    for (std::size_t k = 0; k < bytes.size(); ++k) {
      const std::size_t i = layers_.size() - 1 - k;
      const Layer& L = layers_[i];
      const int b = assigned[k];
      if (b < 0) continue;
      if (b == static_cast<int>(bucket_bytes_.size())) {
        bucket_bytes_.push_back(0);
        bucket_params_.push_back(0);
        bucket_tensors_.push_back(0);
        bucket_last_layer_.push_back(i);
      }
      bucket_of_[i] = b;
      bucket_bytes_.back() += grad_bytes(L);
      bucket_params_.back() += static_cast<double>(L.params);
      bucket_tensors_.back() += std::max(1, L.param_tensors);
      bucket_last_layer_.back() = i;  // lowest layer index: produced last in backward
    }
  }

  void backward(std::int64_t m, bool last_micro) {
    std::vector<TaskId> bwd(layers_.size(), -1);
    const bool first_micro = m == 0;
    for (std::size_t i = layers_.size(); i-- > 0;) {
      const Layer& L = layers_[i];
      std::vector<TaskId> deps;
      TaskId g = -1;
      if (gathered(L)) {
        std::vector<TaskId> after;
        if (i + 2 < layers_.size()) {
          after.push_back(bwd[i + 2]);
        } else if (i >= 1) {
          after.push_back(fwd_[i - 1]);
        }
        g = gather(m, i, "bwd", after);
        deps.push_back(g);
      }
      if (recomputed(L)) {
        // The forward again, its tensor-parallel collectives included.
        const Bytes transient = memory_[i] ? memory_[i]->forward_transient : 0;
        std::vector<MemOp> on_end;
        detail::add_bytes(on_end, MemCategory::kActivations, -transient);
        deps.push_back(compute(tag(m, "recompute " + L.name), Phase::kRecompute,
                               fwd_time_[i] + tp_fwd_[i].total(), deps,
                               {{MemCategory::kActivations, L.saved_bytes - checkpoint_bytes(i) + transient}}, std::move(on_end)));
        g_.tasks[deps.back()].launch = fwd_launch_[i];
      } else if (core_recomputed(L)) {
        deps.push_back(compute(tag(m, "recompute attention " + L.name), Phase::kRecompute, core_time_[i], deps,
                               {{MemCategory::kActivations, L.attention_core_bytes}}));
      }
      // Gradients: persistent full grads (stages 0/1, allocated on first use
      // and freed by the optimizer) or transient ones reduced away (2/3).
      // A recurrent layer's appear only as its backward ends (Layer::grads_at_end).
      const bool new_grads = zero_ >= 2 || first_micro;
      // The gradient of the input and the backward's workspaces; where
      // calibration measured the backward's rise (Note [Layer memory]), that
      // rise less the gradients it includes.
      Bytes held = L.output_bytes + L.backward_workspace_bytes;
      if (memory_[i]) held = std::max<Bytes>(0, memory_[i]->backward_rise - (new_grads ? grad_bytes(L) : 0));
      std::vector<MemOp> on_start{{MemCategory::kActivations, held}};
      std::vector<MemOp> on_end{{MemCategory::kActivations, -held}, {MemCategory::kActivations, -L.saved_bytes}};
      auto& grads_op = L.grads_at_end() ? on_end : on_start;
      if (new_grads) grads_op.push_back({MemCategory::kGradients, grad_bytes(L)});
      if (g >= 0) on_end.push_back({MemCategory::kParameters, -full_param_bytes(L)});
      const TaskId b = compute(tag(m, "bwd " + L.name), Phase::kBackward, bwd_time_[i], deps, on_start, on_end);
      g_.tasks[b].launch = bwd_launch_[i];
      bwd[i] = tp_comm(m, i, Pass::kBackward, b);
      reduce_after(m, i, bwd, last_micro);
    }
    last_bwd_ = bwd.front();
    // Without overlap, reductions wait for the end of this backward pass.
    for (TaskId t : unordered_) g_.tasks[t].deps.push_back(last_bwd_);
    unordered_.clear();
    // The reduced buckets go back into the gradients once the backward is
    // done, as DDP's reducer finalizes them (Note [Gradient buckets]); on
    // the compute stream earlier, they would hold the rest of the backward
    // behind their all-reduces.
    for (const PendingCopy& c : copies_out_) {
      const TaskId out = bucket_copy(c.name, c.params, c.tensors, true, {c.reduce, last_bwd_});
      after_reduce(m, out, c.shard_bytes);
    }
    copies_out_.clear();
  }

  /// Gradient communication once layer i's backward is done.
  void reduce_after(std::int64_t m, std::size_t i, const std::vector<TaskId>& bwd, bool last_micro) {
    const Layer& L = layers_[i];
    if (L.params == 0) return;
    if (zero_ == 3) {
      // One reduce-scatter per layer, every micro-step (Note [ZeRO]).
      const Bytes b = grad_bytes(L);
      if (n_ == 1) {
        compute(tag(m, "keep grads " + L.name), Phase::kBackward, 0, {bwd[i]}, {}, {{MemCategory::kGradients, -b}});
        return;
      }
      const TaskId in = bucket_copy(tag(m, "copy grads in " + L.name), static_cast<double>(L.params), std::max(1, L.param_tensors),
                                    false, {bwd[i]});
      const Bytes recv = receive_bytes(b);
      TaskId rs = collective(tag(m, "reduce_scatter " + L.name), CollectiveOp::kReduceScatter, b, shard_group_,
                             kGradComm, {in}, {{MemCategory::kBuffers, recv}},
                             {{MemCategory::kGradients, -b}, {MemCategory::kBuffers, -recv}});
      if (replica_group_.ranks > 1) {
        rs = collective(tag(m, "all_reduce shard " + L.name), CollectiveOp::kAllReduce, ceil_div(b, n_),
                        replica_group_, kGradComm, {rs});
      }
      after_reduce(m, rs, ceil_div(b, n_));
      return;
    }
    const int bucket = bucket_of_[i];
    if (bucket_last_layer_[bucket] != i) return;  // bucket not complete yet
    const Bytes b = bucket_bytes_[bucket];
    const std::string name = "bucket " + std::to_string(bucket);
    // Without overlap the dependency on the end of backward is added later.
    std::vector<TaskId> deps;
    if (plan_.overlap) deps.push_back(bwd[i]);
    const double params = bucket_params_[bucket];
    const int tensors = bucket_tensors_[bucket];
    if (zero_ == 2) {
      if (n_ == 1) {
        // Nothing to scatter: the gradients are this rank's already. Offloaded,
        // they still go down to the host's optimizer, once they are final.
        const TaskId keep = compute(tag(m, "keep grads " + name), Phase::kBackward, 0, {bwd[i]}, {}, {{MemCategory::kGradients, -b}});
        if (last_micro) after_reduce(m, keep, b);
        return;
      }
      // The bucket is filled once complete, overlap or not (Note [Gradient buckets]).
      deps.push_back(bucket_copy(tag(m, "copy grads in " + name), params, tensors, false, {bwd[i]}));
      const Bytes recv = receive_bytes(b);
      TaskId rs = collective(tag(m, "reduce_scatter " + name), CollectiveOp::kReduceScatter, b, shard_group_,
                             kGradComm, deps, {{MemCategory::kBuffers, recv}},
                             {{MemCategory::kGradients, -b}, {MemCategory::kBuffers, -recv}});
      if (!plan_.overlap) unordered_.push_back(rs);
      after_reduce(m, rs, ceil_div(b, n_));
      return;
    }
    if (!last_micro || dp_group_.ranks == 1) return;  // no_sync / local accumulation / nothing to sync
    deps.push_back(bucket_copy(tag(m, "copy grads in " + name), params, tensors, false, {bwd[i]}));
    TaskId ar = collective(tag(m, "all_reduce " + name), CollectiveOp::kAllReduce, b, dp_group_, kGradComm, deps);
    if (!plan_.overlap) unordered_.push_back(ar);
    // The reduced bucket back into the gradients, divided by the group
    // size, after the backward (above).
    copies_out_.push_back({tag(m, "copy grads out " + name), params, tensors, ar, zero_ == 1 ? ceil_div(b, n_) : b});
  }

  /// A reduce-scatter's receive buffer for `b` bytes of gradients (Note [ZeRO]).
  Bytes receive_bytes(Bytes b) const { return cluster_.device.gloo_collectives ? b : ceil_div(b, n_); }
  /// An all-gather's buffers for `full` bytes gathered (Note [ZeRO]).
  Bytes gather_bytes(Bytes full) const { return cluster_.device.gloo_collectives ? ceil_div(full, n_) + full : 0; }

  /// Note [Gradient buckets] (models/torch): a bucket's gradients copied in
  /// before its collective or back out after it, on the compute stream (the
  /// reducer's copies run where backward does); nothing where the cost model
  /// prices them at 0 (the datasheet).
  TaskId bucket_copy(const std::string& name, double params, int tensors, bool out, std::vector<TaskId> deps) {
    const TimeNs t = compute_.bucket_copy_time(params, tensors, out);
    if (t == 0) return deps.front();
    return compute(name, Phase::kBackward, t, std::move(deps));
  }

  void after_reduce(std::int64_t m, TaskId reduce, Bytes shard_bytes) {
    reductions_.push_back(reduce);
    if (plan_.offload_optimizer == Offload::kCpu) {
      d2h_.push_back(copy(tag(m, "d2h grads"), shard_bytes, kD2H, {reduce}));
    }
  }

  // ---- optimizer -----------------------------------------------------------
  void optimizer_step() {
    const std::int64_t shard_params = zero_ >= 1 ? ceil_div(params_, n_) : params_;
    std::vector<TaskId> deps = reductions_;
    deps.push_back(last_bwd_);
    const bool free_full_grads = zero_ <= 1;
    std::vector<MemOp> frees;
    if (free_full_grads) frees.push_back({MemCategory::kGradients, -total_grad_bytes()});
    TaskId step = -1;
    if (plan_.offload_optimizer == Offload::kCpu) {
      std::vector<TaskId> host_deps = d2h_;
      host_deps.push_back(last_bwd_);
      const TimeNs t = compute_.host_optimizer_time(static_cast<double>(shard_params), plan_.optimizer, plan_.precision, cluster_);
      TaskId cpu = compute("host adam step", Phase::kOptimizer, t, host_deps, {}, frees, kHost);
      step = copy("h2d params", shard_params * w_, kH2D, {cpu});
    } else {
      // Tensor by tensor (DDP), a flat shard per layer (ZeRO-3, FSDP's flat
      // parameters), or one flat shard (ZeRO-1/2, DeepSpeed's partition), as
      // dtsim_worker steps them, a chunk at a time (Note [Optimizer updates]).
      int updates = 0;
      for (const auto& l : layers_) {
        updates += zero_ == 3 ? flat_updates(ceil_div(l.params, n_)) : layer_updates(l.params, l.param_tensors);
      }
      if (zero_ == 1 || zero_ == 2) updates = flat_updates(shard_params);
      updates = std::max(1, updates);
      const double params = static_cast<double>(shard_params);
      const TimeNs t = compute_.optimizer_time(params, updates, plan_.optimizer, plan_.precision, cluster_.device);
      step = compute("optimizer step", Phase::kOptimizer, t, deps, {}, frees);
      g_.tasks[step].launch = compute_.optimizer_launch_time(params, updates, plan_.optimizer, plan_.precision);
    }
    if ((zero_ == 1 || zero_ == 2) && n_ > 1) {
      // All-gather the updated parameter shards (working precision).
      const Bytes all = params_ * w_, buffers = gather_bytes(all);
      std::vector<MemOp> on_start, on_end;
      detail::add_bytes(on_start, MemCategory::kBuffers, buffers);
      detail::add_bytes(on_end, MemCategory::kBuffers, -buffers);
      collective("all_gather params", CollectiveOp::kAllGather, all, shard_group_, kGradComm, {step}, std::move(on_start),
                 std::move(on_end));
    }
    if (persistent_params() > 0) {
      // Coalesced into one flat buffer, then copied out to the layers.
      const Bytes all = persistent_params() * w_, buffers = all + gather_bytes(all);
      collective("all_gather persistent params", CollectiveOp::kAllGather, all, shard_group_, kGradComm, {step},
                 {{MemCategory::kBuffers, buffers}}, {{MemCategory::kBuffers, -buffers}});
    }
  }

  const Model& model_;
  const ResolvedPlan& plan_;
  const ClusterSpec& cluster_;
  const ComputeModel& compute_;
  const CommModel& comm_;
  bool named_ = true;
  detail::TaskBuilder b_;
  TaskGraph& g_ = b_.graph();
  std::vector<Layer> layers_;
  std::vector<TimeNs> fwd_time_, bwd_time_, core_time_;  // per layer, one micro-batch
  std::vector<CollectiveCost> tp_fwd_, tp_bwd_;          // per layer, one micro-batch
  std::vector<std::optional<LayerMemory>> memory_;       // per layer: Note [Layer memory], where measured
  std::vector<TimeNs> fwd_launch_, bwd_launch_;          // per layer: Note [Host launch] (executor.cpp)
  std::int64_t params_ = 0;                              // this rank's (tensor-parallel shard)
  CommGroup tp_group_;
  int w_ = 4;
  int zero_ = 0;
  int n_ = 1;
  CommGroup dp_group_, shard_group_, replica_group_;
  std::vector<TaskId> fwd_;
  struct PendingCopy {
    std::string name;
    double params = 0;
    int tensors = 0;
    TaskId reduce = -1;
    Bytes shard_bytes = 0;
  };
  std::vector<PendingCopy> copies_out_;  ///< this backward's buckets, to copy back at its end
  std::vector<int> bucket_of_;
  std::vector<double> bucket_params_;  ///< per bucket: parameters
  std::vector<int> bucket_tensors_;    ///< per bucket: parameter tensors
  std::vector<Bytes> bucket_bytes_;
  std::vector<std::size_t> bucket_last_layer_;
  std::vector<TaskId> reductions_, d2h_;
  std::vector<TaskId> unordered_;
  TaskId last_bwd_ = -1;
};

}  // namespace

ModelStates model_states(const ResolvedPlan& plan, std::int64_t parameters) {
  const Bytes w = element_bytes(plan.precision);
  const Bytes k = optimizer_state_bytes_per_param(plan.optimizer, plan.precision);
  const Bytes n = std::max(1, plan.shard_group);
  const Bytes psi = parameters;
  const Bytes shard = (psi + n - 1) / n;
  ModelStates s;
  s.parameters = plan.zero_stage >= 3 ? shard * w : psi * w;
  if (plan.offload_params == Offload::kCpu) s.parameters = 0;
  s.gradients = plan.zero_stage >= 2 ? shard * w : psi * w;
  s.optimizer = plan.zero_stage >= 1 ? shard * k : psi * k;
  // Note [Offload]: the optimizer's states live on the host, and under
  // ZeRO-2 so does the reduced gradient partition (DeepSpeed copies each
  // reduced bucket down as the backward makes it); the device holds only
  // the gradients in flight (dtsim validate on an H100: gpt2-medium
  // zero2-offload at micro-batch 2 peaked 652 MiB under a prediction that
  // kept the 677 MiB partition resident).
  if (plan.offload_optimizer == Offload::kCpu) {
    s.optimizer = 0;
    if (plan.zero_stage >= 2) s.gradients = 0;
  }
  return s;
}

std::unique_ptr<detail::StageEmitter> detail::layer_emitter(const LoweringInputs& in) {
  return std::make_unique<LayerStage>(in);
}

}  // namespace dtsim::sim
