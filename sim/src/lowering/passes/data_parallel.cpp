// The data-parallel pass: gradient buckets reduced over the data-parallel
// axis of the mesh while backward runs; ZeRO-1/2 reductions and the
// gather of the updated parameters. One class for a one-stage plan, layer
// by layer; one for pipeline chunks. Both take their buckets from
// buckets.hpp, as the runtime's trainer does.
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
// counted as buffers (add_resident). Filling a bucket and copying it back
// after its all-reduce costs time on the compute stream (Note [Gradient
// buckets] in models/torch), priced where a profile timed it.
//
// Note [Experts alone in a bucket]
// With experts whole on every tensor-parallel rank (etp 1) the expert
// data-parallel group is made of tp ranks as well as dp ranks (Note
// [Expert mesh] in cost_comm.cpp), so where dp x cp is 1 the dense
// gradients are the rank's alone and the experts' are not:
// Megatron-Core's DistributedDataParallel still all-reduces its expert
// buffer over that group, and dtsim's runtime buckets and reduces the
// expert space alone (Note [Expert gradients] in runtime/src/trainer.cpp),
// so its buckets hold and reduce only the experts' gradients, and DDP's
// resident copy (add_resident) is theirs alone.
//
// Note [Two buckets in flight]
// DeepSpeed's ZeRO-2 copies each gradient into one of two contiguous
// buffers of reduce_bucket_size elements (with overlap_comm; one without)
// and, when a buffer is full, makes the compute stream wait for the
// reduction stream before it queues that buffer's reduce-scatter
// (stage_1_and_2.py: average_tensor's current_stream().wait_stream, the
// buffers swapped by reduce_independent_p_g_buckets_and_remove_grads). So
// the backward goes on only once the bucket before is reduced: at most two
// buckets of gradients are in flight however slow the network, and where
// the reductions are slower than the backward, the backward waits for them
// instead of piling gradients up. PyTorch's DDP and FSDP1 have no such
// wait; FSDP2 has one of its own (Note [FSDP2's reduce-scatter wait]).
//
// Note [FSDP2's reduce-scatter wait]
// PyTorch's FSDP2 (fully_shard; plan.fsdp_version 2) keeps the last
// reduce-scatter it issued, with its input and an event, in the state its
// units share (FSDPCommContext.reduce_scatter_state), and a unit's
// post_backward first makes the current stream, the backward's, wait for
// that event, then drops the state and issues its own (_fsdp_param_group.py,
// post_backward, "FSDP::post_backward_reduce"); the root's final callback
// waits for the last one. So where the reduce-scatters are slower than the
// backward, the backward of the unit after the next waits for them, and
// the gradients in flight are two units' however slow the network: the
// unit being computed, and the reduce-scatter's input, a copy of the unit
// before's gradients in the reduce dtype (foreach_reduce copies them in and
// drops them), which lives until the next unit's post_backward has waited.
// FSDP1 (FullyShardedDataParallel, plan.fsdp_version 1) frees each
// unsharded gradient once its reduce-scatter is issued, the caching
// allocator keeping the block until the collective ends (record_stream),
// and never waits: its gradients pile up behind a slow network. Here, as
// for DeepSpeed, a zero-time task after each unit's backward waits for the
// reduce-scatter issued after the unit before and frees its input; then
// the unit's copy-in and reduce-scatter follow it (the reduce-scatter
// stream waits for the backward's, _fsdp_collectives.py), taking the
// input (buffers) in place of the gradients; the last is waited for, and
// its input freed, when the backward ends. A
// unit is a bucket of the data-parallel pass under shard_grad_op (the
// layers of at least bucket_mb) and a layer or the root unit under
// full_shard and hybrid_shard (passes/sharded_parameters.cpp), where the
// gathers queued behind the reduce-scatters (Note [One process group])
// hold the backward back already and the wait adds the input's lifetime.
// Under a pipeline (torch.distributed.pipelining, which needs FSDP2) a
// stage's chunks reduce-scatter once a step after their last backwards
// (passes/fsdp_pipeline.cpp), which this wait does not change.
//
// Note [ZeRO-2's buffers]
// DeepSpeed's ZeRO-2 (stage_1_and_2.py) allocates, at the start of every
// backward, reduce_bucket_size elements of the working precision as its
// ipg buffer, two with overlap_comm (backward(): buf_0, buf_1), whatever
// the model's size, and releases them at the backward's end, once the last
// bucket is reduced (independent_gradient_partition_epilogue, which first
// synchronizes with the reductions: the next forward waits for them). Each
// gradient, as autograd makes it, is copied into the buffer by the
// parameter's hook and freed (grad_reduc.data = new_grad_tensor.data), so
// what the backward holds for its gradients is the buffers, not the
// buckets: 2 x reduce_bucket_size of buffers and the layer's gradients
// being made; a gradient larger than the buffer is reduced from where it
// is (extra_large_param_to_reduce). A bucket's gradients are reduced when the next would
// overflow the buffer (Note [Bucket rules] in sim/src/parallel/buckets.cpp).
// Without overlap_comm (DeepSpeed's default for stage 2) the reduction runs
// on the current stream (average_tensor: stream = current_stream()) in the
// hook that found the bucket full: the backward waits for each bucket's
// reduce-scatter, and one buffer is all it needs. With
// contiguous_gradients false, the gradients stay where autograd made them
// until their bucket is reduced, which is how dtsim_worker runs ZeRO-2
// (`dtsim validate` sets it and says so).
//
// Note [ZeroRedundancyOptimizer]
// With `runtime: python` (Note [Python host cost]), ZeRO-1 is what a
// PyTorch user writes: DistributedDataParallel and
// torch.distributed.optim.ZeroRedundancyOptimizer (torch 1.13,
// zero_redundancy_optimizer.py), as bench/python-reference.py runs it. It
// gives each parameter tensor whole to one rank, largest first, each to the
// rank holding the fewest elements so far (_partition_parameters); steps
// the owner's tensors one by one with the wrapped optimizer (torch.optim's
// per-tensor loop where foreach is off, as on a CPU); and then broadcasts
// every parameter from its owner, one collective a tensor, each rank's
// tensors in turn, waiting for them all (_sync_params,
// parameters_as_bucket_view False by default). dtsim_worker's ZeRO-1 steps
// one flat shard and all-gathers one flat buffer instead. So the step
// prices the busiest rank's tensors and elements, and the gather is one
// task of T broadcasts as one flow (sum_costs): T latencies, and over Gloo
// their stalls (Note [A collective's stalls]), which is most of what the
// Python loop's ZeRO-1 step costs beyond the C++ one's. Pipelines keep the
// flat gather.
//
// Note [ZeRO-1's reduction]
// What ZeRO-1 does with a full bucket depends on who runs it. Megatron-Core's
// distributed optimizer reduce-scatters it, each rank receiving the summed
// slice its optimizer shard covers, in place in the gradient buffer
// (megatron/core/distributed/param_and_grad_buffer.py,
// _ParamAndGradBucketGroup.start_grad_sync: reduce_scatter_tensor under
// use_distributed_optimizer, all_reduce otherwise); DeepSpeed's stage 1
// reduces each slice to its owner (stage_1_and_2.py, average_tensor: a
// reduce per partition where zero_optimization.reduce_scatter, its default,
// else all_reduce), the same bytes. Both move (n - 1) / n of the bucket a
// rank, then all-gather the updated parameters: 2 (n - 1) / n in all, as
// much as DDP's all-reduce. PyTorch's ZeroRedundancyOptimizer sits on DDP,
// which all-reduces every bucket before the optimizer steps its shard and
// broadcasts it, and dtsim's runtime all-reduces too (runtime/src/
// trainer.cpp, launch_bucket): half as much again. The plan's
// reduce_scatter (DeepSpeed's knob, default true) says which: true is
// Megatron's and DeepSpeed's reduce-scatter, false the all-reduce;
// `runtime: python` is always false, and `dtsim validate` sets it false
// for the runtime it runs. Either way the gradients stay where they are
// (no receive buffer: Megatron's slice is a view of the bucket, DeepSpeed's
// reduce works in place), and the shard is what the step reads.
//
// Note [Overlapped parameter gather]
// Megatron-LM's --overlap-param-gather (overlap_param_gather, which the
// Megatron-Bridge and NeMo recipes set) takes the distributed optimizer's
// all-gather out of the step. After it nothing is gathered; the next
// iteration's first forward gathers bucket group by bucket group, in the
// order the forward meets them: each module's forward pre-hook waits for
// its bucket group's all-gather (dispatching it if it was not, as for the
// first) and dispatches the next one's (distributed_data_parallel.py,
// _make_forward_pre_hook; param_and_grad_buffer.py, finish_param_sync with
// next_param_gather_bucket_group). The waits are the compute stream's, so
// the gathers queue back to back on the communication stream from the
// iteration's start, and a layer's forward waits only for its own bucket's:
// the first is exposed, the rest overlap the forward where they are no
// slower. dtsim simulates one iteration in the steady state, so it runs
// the gathers of the step before at its start: one task a bucket, chained,
// each bucket's first layer's first forward waiting for it. In a pipeline
// each model chunk is a DDP module with its own buckets and its forward a
// single task here: its buckets' gathers are chained on the stage's
// communication stream in the order its chunks first run forward (as
// Megatron's align_param_gather dispatches them together), the chunk's
// first forward waits for its first bucket's, and what follows that
// forward for its last bucket's. They write the parameter
// buffer in place: no memory beyond what the model states count (Gloo's
// copies on a CPU aside, as the step's gather has them).
//
// In a pipeline, a chunk's last backward runs bucket by bucket, each
// bucket's gradients reduced over the data-parallel group while the rest
// of that backward runs, as PyTorch DDP and Megatron-LM's overlap_grad_reduce
// do (all-reduced; under ZeRO-1 reduce-scattered as above); ZeRO-1 then
// steps its shard and all-gathers the parameters, as Megatron's distributed
// optimizer does.
#include <algorithm>
#include <string>

#include "dtsim/sim/buckets.hpp"
#include "lowering/chunk_context.hpp"
#include "lowering/layer_context.hpp"
#include "lowering/lowering_common.hpp"

namespace dtsim::sim::detail {
namespace {

/// DDP, ZeRO-1 and ZeRO-2 on a one-stage plan (ZeRO-3 reduces per layer:
/// passes/sharded_parameters.cpp).
class LayerBuckets final : public StrategyPass {
 public:
  explicit LayerBuckets(LayerContext& ctx) : ctx_(ctx) {
    plan_buckets();
    const ResolvedPlan& p = ctx_.plan;
    deepspeed_ = p.zero_stage == 2 && !p.fsdp && ctx_.n > 1;
    ipg_bytes_ = zero2_buffer_bytes(p);  // Note [ZeRO-2's buffers]
    gather_early_ = p.zero1_gathers_in_forward();
  }

  /// Note [Overlapped parameter gather]: the first micro-batch's forward of
  /// a bucket's first layer waits for the bucket's all-gather, which
  /// follows the one before it.
  void before_forward(const At& at, TaskDeps& deps) override {
    if (!gather_early_ || at.micro != 0) return;
    const int k = bucket_of_[at.unit];
    if (k < 0) return;
    Bucket& bk = buckets_[static_cast<std::size_t>(k)];
    if (bk.gather < 0) {
      LayerContext& c = ctx_;
      const Bytes all = gathered_bytes_of(c.plan, static_cast<std::int64_t>(bk.params), bk.fp8_weights);
      const Bytes buffers = c.gather_bytes(all);
      MemOps on_start, on_end;
      add_bytes(on_start, MemCategory::kBuffers, buffers);
      add_bytes(on_end, MemCategory::kBuffers, -buffers);
      TaskDeps after;
      if (last_gather_ >= 0) after.push_back(last_gather_);
      bk.gather = c.collective(c.named ? "all_gather params bucket " + std::to_string(k) : std::string(), CollectiveOp::kAllGather,
                               all, c.shard_group, Stream::kGradComm, std::move(after), std::move(on_start), std::move(on_end),
                               std::min(all, static_cast<Bytes>(bk.expert_params) * c.w));
      last_gather_ = bk.gather;
    }
    deps.push_back(bk.gather);
  }

  void backward_memory(const At& at, MemOps& on_start, MemOps& on_end) override {
    // Note [ZeRO-2's buffers]: allocated as the backward starts; each
    // layer's gradients copied into them as it ends.
    if (ipg_bytes_ == 0) return;
    const LayerContext& c = ctx_;
    if (at.unit + 1 == c.layers.size()) add_bytes(on_start, MemCategory::kBuffers, ipg_bytes_);
    const int bucket = bucket_of_[at.unit];
    if (bucket >= 0 && in_buffer(bucket)) add_bytes(on_end, MemCategory::kGradients, -c.grad_bytes(c.layers[at.unit]));
  }

  TaskId after_backward(const At& at, TaskId last) override {
    LayerContext& c = ctx_;
    const std::size_t i = at.unit;
    const Layer& L = c.layers[i];
    const std::int64_t m = at.micro;
    if (L.params == 0) return last;
    const int bucket = bucket_of_[i];
    if (buckets_[bucket].last_layer != i) return last;  // bucket not complete yet
    const Bucket& bk = buckets_[bucket];
    const Bytes b = bk.bytes;
    const std::string name = "bucket " + std::to_string(bucket);
    // Without overlap the dependency on the end of backward is added later.
    TaskDeps deps;
    if (c.plan.overlap) deps.push_back(last);
    if (c.zero == 2) {
      if (c.n == 1) {
        // Nothing to scatter: the gradients are this rank's already. Offloaded,
        // they still go down to the host's optimizer, once they are final.
        const TaskId keep = c.compute(c.tag(m, "keep grads ", name), Phase::kBackward, 0, {last}, {},
                                      {{MemCategory::kGradients, -b}});
        if (at.last_backward) c.reduced(at, keep, b);
        return last;
      }
      // Note [FSDP2's reduce-scatter wait]: FSDP2's post_backward first waits
      // for the reduce-scatter before (freeing its input), then copies this
      // unit's gradients into its own input, held until the next wait.
      // (Without overlap every reduction waits for the backward's end: nothing to wait for within it.)
      const bool fsdp2 = c.plan.fsdp && c.plan.fsdp_version == 2 && c.plan.overlap;
      TaskId waited = last;
      if (fsdp2) waited = fsdp2_post_backward(c, m, name, last, b, b, previous_, held_);
      // The bucket is filled once complete, overlap or not (Note [Gradient buckets]).
      deps.push_back(c.bucket_copy(c.tag(m, "copy grads in ", name), bk.params, bk.tensors, false, {waited}));
      const Bytes recv = c.receive_bytes(b);
      // Note [ZeRO-2's buffers]: DeepSpeed's gradients already sit in its
      // buffers; without overlap_comm it reduces on the compute stream.
      MemOps freed{{MemCategory::kBuffers, -recv}};
      if (!in_buffer(bucket) && !fsdp2) freed.push_back({MemCategory::kGradients, -b});
      const bool inline_reduce = deepspeed_ && !c.plan.overlap;
      const TaskId rs = c.collective(c.tag(m, "reduce_scatter ", name), CollectiveOp::kReduceScatter, b, c.shard_group,
                                     inline_reduce ? Stream::kCompute : Stream::kGradComm, deps,
                                     {{MemCategory::kBuffers, recv}}, std::move(freed), bk.expert_bytes);
      if (!c.plan.overlap && !inline_reduce) unordered_.push_back(rs);
      c.reduced(at, rs, LayerContext::ceil_div(b, c.n));
      if (deepspeed_) reductions_.push_back(rs);
      if (inline_reduce) return rs;  // the backward goes on once it is done
      if (fsdp2) {
        previous_ = rs;
        return waited;
      }
      // Note [Two buckets in flight]: the backward goes on once the bucket
      // before this one is reduced.
      if (c.plan.overlap && !c.plan.fsdp && previous_ >= 0) {
        waited = c.compute(c.tag(m, "wait ", name), Phase::kBackward, 0, {last, previous_});
      }
      previous_ = rs;
      return waited;
    }
    // Note [Experts alone in a bucket]: with no other data-parallel rank
    // (dp x cp 1) only the routed experts' gradients go, over an edp group
    // of tp ranks (etp 1).
    const bool experts_only = c.dp_group.ranks == 1;
    if (!at.last_backward || (experts_only && c.edp_group.ranks == 1)) return last;  // no_sync / local accumulation / nothing to sync
    const Bytes rb = experts_only ? bk.expert_bytes : b;
    const double params = experts_only ? static_cast<double>(bk.expert_params) : bk.params;
    if (rb == 0) return last;
    deps.push_back(c.bucket_copy(c.tag(m, "copy grads in ", name), params, bk.tensors, false, {last}));
    // Note [ZeRO-1's reduction]: scattered to the shards' owners, or all-reduced.
    const Bytes wire = c.wire_bytes(rb), wire_experts = c.wire_bytes(bk.expert_bytes);
    const TaskId ar = c.plan.zero1_reduce_scatters() ? c.collective(c.tag(m, "reduce_scatter ", name), CollectiveOp::kReduceScatter, wire, c.shard_group,
                                             Stream::kGradComm, deps, {}, {}, wire_experts)
                              : c.collective(c.tag(m, "all_reduce ", name), CollectiveOp::kAllReduce, wire, c.dp_group,
                                             Stream::kGradComm, deps, {}, {}, wire_experts);
    if (!c.plan.overlap) unordered_.push_back(ar);
    // The reduced bucket back into the gradients, divided by the group
    // size, after the backward (end_backward).
    copies_out_.push_back({c.tag(m, "copy grads out ", name), bucket, ar, c.zero == 1 ? LayerContext::ceil_div(rb, c.n) : rb, params});
    return last;
  }

  void end_backward(const At& at, TaskId last) override {
    fsdp2_end_backward(ctx_, at, last, previous_, held_);
    previous_ = -1;
    if (deepspeed_) {
      // Note [ZeRO-2's buffers]: the epilogue waits for the reductions and
      // releases the buffers.
      TaskDeps deps{last};
      for (TaskId r : reductions_) deps.push_back(r);
      MemOps frees;
      add_bytes(frees, MemCategory::kBuffers, -ipg_bytes_);
      ctx_.compute(ctx_.tag(at.micro, "ipg epilogue"), Phase::kBackward, 0, std::move(deps), {}, std::move(frees));
      reductions_.clear();
    }
    // Without overlap, reductions wait for the end of this backward pass.
    for (TaskId t : unordered_) ctx_.g.tasks[t].deps.push_back(last);
    unordered_.clear();
    // The reduced buckets go back into the gradients once the backward is
    // done, as DDP's reducer finalizes them (Note [Gradient buckets]); on
    // the compute stream earlier, they would hold the rest of the backward
    // behind their all-reduces.
    for (const PendingCopy& p : copies_out_) {
      const Bucket& bk = buckets_[p.bucket];
      const TaskId out = ctx_.bucket_copy(p.name, p.params, bk.tensors, true, {p.reduce, last});
      ctx_.reduced(at, out, p.shard_bytes);
    }
    copies_out_.clear();
  }

  void after_step(int, TaskId step) override {
    LayerContext& c = ctx_;
    if (c.zero == 0 || c.n == 1) return;
    if (zero_redundancy_optimizer(c.plan)) {
      // Note [ZeroRedundancyOptimizer]: a broadcast a parameter tensor, from
      // its owner, in place; on a CPU on the ranks' cores (Note [CPU collectives]).
      std::vector<LayerComm> casts;
      Bytes all = 0;
      for (const std::int64_t t : param_tensor_sizes(c.layers)) {
        casts.push_back({CollectiveOp::kBroadcast, t * c.w, 1, Axis::kDp});
        all += t * c.w;
      }
      const bool serial = !c.cluster.device.comm_overlaps_compute && c.plan.overlap;
      c.b.collective(c.named ? "broadcast params (" + std::to_string(casts.size()) + " tensors)" : std::string(), 0,
                     c.stream(serial ? Stream::kCompute : Stream::kGradComm), Axis::kDp, CollectiveOp::kBroadcast, all,
                     sum_costs(casts, c.shard_group, c.comm), {step});
      return;
    }
    if (gather_early_) return;  // Note [Overlapped parameter gather]: in the next forward
    // ZeRO-1/2: all-gather the updated parameter shards (working precision;
    // the FP8 GEMM weights at 1 byte under fp8_param_gather, Megatron-LM's
    // --fp8-param-gather of its distributed optimizer).
    std::int64_t fp8_weights = 0;
    if (c.plan.fp8_param_gather) {
      for (const Layer& L : c.layers) fp8_weights += fp8_gemms(L, c.plan.precision).weight_elements;
    }
    const Bytes all = gathered_bytes_of(c.plan, c.params, fp8_weights);
    const Bytes buffers = c.gather_bytes(all);
    MemOps on_start, on_end;
    add_bytes(on_start, MemCategory::kBuffers, buffers);
    add_bytes(on_end, MemCategory::kBuffers, -buffers);
    // Note [FSDP2's copy-out] (passes/sharded_parameters.cpp): FSDP2
    // gathers into a flat buffer and copies it out on the compute stream;
    // SHARD_GRAD_OP's parameters, whole here from step to step, are
    // gathered once, so copied out once. FSDP gathers unit by unit, so its
    // flat buffer is a unit's at a time, not the model's: its time is
    // counted here, its memory (a unit beside whole parameters) is not.
    const TaskId g = c.collective("all_gather params", CollectiveOp::kAllGather, all, c.shard_group, Stream::kGradComm, {step},
                                  std::move(on_start), std::move(on_end), std::min(all, c.expert_params * c.w));
    if (c.plan.fsdp_version == 2) {
      const TaskId copy = c.compute("copy out params", Phase::kOptimizer, fsdp2_copy_out_time(c, all), {g});
      c.g.tasks[copy].memory_share = 1;  // a copy (Note [Interference] in engine/executor.cpp)
    }
  }

 private:
  struct Bucket {
    Bytes bytes = 0;
    Bytes expert_bytes = 0;  ///< of them, routed experts' gradients
    double params = 0;  ///< its gradients' parameters and tensors (Note [Gradient buckets])
    int tensors = 0;
    std::size_t last_layer = 0;  ///< the lowest layer index: produced last in backward
    std::int64_t expert_params = 0;  ///< of its parameters, routed experts'
    std::int64_t fp8_weights = 0;    ///< of them, FP8 GEMM weights gathered at 1 byte (fp8_param_gather)
    TaskId gather = -1;              ///< its all-gather in the first forward (Note [Overlapped parameter gather])
  };
  struct PendingCopy {
    std::string name;
    int bucket = 0;
    TaskId reduce = -1;
    Bytes shard_bytes = 0;
    double params = 0;  ///< the parameters copied (Note [Experts alone in a bucket])
  };

  /// Buckets in reverse layer order (Note [DDP buckets]).
  void plan_buckets() {
    const std::vector<Layer>& layers = ctx_.layers;
    bucket_of_.assign(layers.size(), -1);
    std::vector<Bytes> bytes;  // in backward order
    for (std::size_t i = layers.size(); i-- > 0;) bytes.push_back(ctx_.grad_bytes(layers[i]));
    const std::vector<int> assigned = assign_buckets(bytes, first_bucket_bytes(ctx_.plan), ctx_.plan.bucket_bytes, bucket_rule(ctx_.plan));
    for (std::size_t k = 0; k < bytes.size(); ++k) {
      const std::size_t i = layers.size() - 1 - k;
      const Layer& L = layers[i];
      const int b = assigned[k];
      if (b < 0) continue;
      if (b == static_cast<int>(buckets_.size())) buckets_.push_back({0, 0, 0, 0, i, 0, 0, -1});
      bucket_of_[i] = b;
      Bucket& bk = buckets_.back();
      bk.bytes += ctx_.grad_bytes(L);
      bk.expert_bytes += ctx_.expert_grad_bytes(L);
      bk.params += static_cast<double>(L.params);
      bk.tensors += std::max(1, L.param_tensors);
      bk.last_layer = i;
      bk.expert_params += L.expert_params;
      if (ctx_.plan.fp8_param_gather) bk.fp8_weights += fp8_gemms(L, ctx_.plan.precision).weight_elements;
    }
  }

  /// Note [ZeRO-2's buffers]: whether bucket k's gradients are copied into
  /// DeepSpeed's buffer; one larger than the buffer (one layer, under Note
  /// [Bucket rules]) stays where autograd made it, as DeepSpeed reduces its
  /// extra_large_param_to_reduce.
  bool in_buffer(int k) const { return ipg_bytes_ > 0 && buckets_[static_cast<std::size_t>(k)].bytes <= ctx_.plan.bucket_bytes; }

  LayerContext& ctx_;
  std::vector<int> bucket_of_;  ///< by layer; -1 for a layer without parameters
  std::vector<Bucket> buckets_;
  std::vector<PendingCopy> copies_out_;  ///< this backward's buckets, to copy back at its end
  std::vector<TaskId> unordered_;        ///< reductions that wait for the backward's end (no overlap)
  TaskId previous_ = -1;                 ///< ZeRO-2: this backward's last bucket reduction so far
  MemOps held_;                          ///< FSDP2: the last reduce-scatter's input, freed by the next wait
  bool deepspeed_ = false;               ///< DeepSpeed's ZeRO-2 over more than one rank (Note [ZeRO-2's buffers])
  Bytes ipg_bytes_ = 0;                  ///< its buffers, where contiguous_gradients
  std::vector<TaskId> reductions_;       ///< this backward's reduce-scatters (DeepSpeed's ZeRO-2)
  bool gather_early_ = false;            ///< Note [Overlapped parameter gather]
  TaskId last_gather_ = -1;              ///< the last bucket gather made
};

/// A pipeline chunk's buckets, reduced during its last backward.
class ChunkBuckets final : public StrategyPass {
 public:
  explicit ChunkBuckets(ChunkContext& ctx) : ctx_(ctx) {
    for (const Chunk& ch : ctx_.chunks) buckets_.push_back(plan_buckets(ch));
    scatter_ = ctx_.plan.zero1_reduce_scatters();
    gather_early_ = ctx_.plan.zero1_gathers_in_forward();
    gathered_.assign(ctx_.chunks.size(), false);
    last_gather_.assign(static_cast<std::size_t>(ctx_.plan.pp), -1);
  }

  /// Note [Overlapped parameter gather]: a chunk's first forward waits for
  /// the all-gather of its first bucket (in forward order), which follows
  /// the stage's gather before it; its other buckets' follow, and what runs
  /// after that forward waits for them.
  void before_forward(const At& at, TaskDeps& deps) override {
    if (!gather_early_ || gathered_[at.unit]) return;
    gathered_[at.unit] = true;
    ChunkContext& c = ctx_;
    const std::vector<Bucket>& buckets = buckets_[at.unit];
    TaskId& before = last_gather_[static_cast<std::size_t>(at.rank)];
    TaskId first = -1;
    for (std::size_t k = buckets.size(); k-- > 0;) {  // buckets are in backward order
      const Bucket& bk = buckets[k];
      if (bk.bytes == 0) continue;
      const Bytes all = gathered_bytes_of(c.plan, static_cast<std::int64_t>(bk.params), bk.fp8_weights);
      const Bytes expert = std::min(all, bk.expert_params * c.w);
      TaskDeps after;
      if (before >= 0) after.push_back(before);
      const TaskId gather = c.b.collective(
          c.named ? "all_gather params chunk " + std::to_string(at.unit) + " bucket " + std::to_string(k) : std::string(), at.rank,
          c.stream(Stream::kGradComm), Axis::kDp, CollectiveOp::kAllGather, all,
          c.grad_cost(CollectiveOp::kAllGather, all, expert, c.dp_group), std::move(after));
      if (first < 0) {
        deps.push_back(gather);
        first = gather;
      }
      before = gather;
    }
    rest_ = before != first ? before : -1;
  }

  TaskId after_forward(const At& at, TaskId last) override {
    if (rest_ < 0) return last;
    // The chunk's other buckets: gathered while its forward runs, and
    // waited for before anything after it (Note [Overlapped parameter gather]).
    ChunkContext& c = ctx_;
    const TaskId wait = c.b.compute(c.named ? c.name("wait params", at.unit, at.micro) : std::string(), at.rank,
                                    c.stream(Stream::kCompute), Phase::kForward, 0, {last, rest_});
    rest_ = -1;
    return wait;
  }

  Span run_backward(const At& at, MemOps& on_start, MemOps& on_end) override {
    return bucketed(at, on_start, on_end, false);
  }
  /// Under zb-h1 the gradients are final with the chunk's last weight pass
  /// (Note [Zero bubble] in lower.cpp), which runs bucket by bucket instead.
  Span run_weight(const At& at, MemOps& on_start, MemOps& on_end) override {
    return bucketed(at, on_start, on_end, true);
  }
  TaskId after_weight(const At& at, TaskId last) override { return after_backward(at, last); }

 private:
  /// The chunk's last backward (or weight pass) as one task per bucket.
  Span bucketed(const At& at, MemOps& on_start, MemOps& on_end, bool weight) {
    ChunkContext& c = ctx_;
    if (!at.last_backward || c.plan.grad_group() <= 1) return {};
    // The chunk's last backward runs bucket by bucket, each bucket's
    // all-reduce overlapping the rest (Note [DDP buckets]).
    const auto vs = at.unit;
    const std::vector<Bucket>& buckets = buckets_[vs];
    const int s = at.rank;
    Span span;
    pending_out_.clear();
    for (std::size_t k = 0; k < buckets.size(); ++k) {
      const bool first = k == 0, final = k + 1 == buckets.size();
      const TaskId seg = c.add(c.named ? c.name(weight ? "bwd weight" : "bwd", vs, at.micro) + " bucket " + std::to_string(k) : std::string(), s,
                               Phase::kBackward, weight ? buckets[k].wtime : buckets[k].time, first ? std::move(on_start) : MemOps{},
                               final ? std::move(on_end) : MemOps{});
      if (first) span.first = seg;
      c.g.tasks[seg].memory_share = c.chunks[vs].bwd_memory;  // Note [Interference] in engine/executor.cpp
      const Bytes bytes = c.wire_bytes(buckets[k].bytes);
      // The bucket is filled right after its layers' backward (Note [Gradient buckets]).
      const TaskId in = bucket_copy("copy grads in", s, vs, at.micro, k, buckets[k], false);
      // Note [ZeRO-1's reduction]: the distributed optimizer's reduce-scatter.
      const CollectiveOp op = scatter_ ? CollectiveOp::kReduceScatter : CollectiveOp::kAllReduce;
      pending_out_.push_back(c.b.collective(
          c.named ? std::string(scatter_ ? "reduce_scatter" : "all_reduce") + " grads chunk " + std::to_string(vs) + " bucket " + std::to_string(k)
                  : std::string(),
          s, c.stream(Stream::kGradComm), Axis::kDp, op, bytes, c.grad_cost(op, bytes, c.wire_bytes(buckets[k].expert_bytes), c.dp_group),
          {in < 0 ? seg : in}));
      span.last = seg;
    }
    return span;
  }


 public:
  TaskId after_backward(const At& at, TaskId last) override {
    // The reduced buckets go back into the gradients once the chunk's
    // backward is done and its gradient sent, as DDP's reducer finalizes
    // them (Note [Gradient buckets]).
    if (!at.last_backward) return last;
    for (std::size_t k = 0; k < pending_out_.size(); ++k) {
      const TaskId out = bucket_copy("copy grads out", at.rank, at.unit, at.micro, k, buckets_[at.unit][k], true);
      if (out >= 0) ctx_.g.tasks[out].deps.push_back(pending_out_[k]);
      ctx_.reduced(at, out >= 0 ? out : pending_out_[k], 0);
    }
    pending_out_.clear();
    return last;
  }

  void after_step(int s, TaskId step) override {
    ChunkContext& c = ctx_;
    if (c.plan.zero_stage != 1 || c.plan.shard_group <= 1 || gather_early_) return;
    const Bytes all = gathered_bytes_of(c.plan, c.rank_params[static_cast<std::size_t>(s)], c.rank_fp8[static_cast<std::size_t>(s)].weight_elements);
    const Bytes expert = std::min(all, c.rank_expert_params[static_cast<std::size_t>(s)] * c.w);
    c.b.collective("all_gather params", s, c.stream(Stream::kGradComm), Axis::kDp, CollectiveOp::kAllGather, all,
                   c.grad_cost(CollectiveOp::kAllGather, all, expert, c.dp_group), {step});
  }

 private:
  struct Bucket {
    TimeNs time = 0;    ///< backward time of the layers whose gradients fill it
    TimeNs wtime = 0;   ///< of it, their weight passes' under zb-h1
    Bytes bytes = 0;
    Bytes expert_bytes = 0;  ///< of them, routed experts' gradients
    double params = 0;  ///< its gradients' parameters and tensors (Note [Gradient buckets])
    int tensors = 0;
    std::int64_t expert_params = 0;  ///< of them, routed experts'
    std::int64_t fp8_weights = 0;    ///< of them, FP8 GEMM weights gathered at 1 byte (fp8_param_gather)
  };

  /// Gradient buckets in backward (reverse layer) order, as DDP's reducer
  /// fills them (buckets.hpp). A layer without parameters computes in the
  /// segment of the next bucket; any after the last, in the last.
  std::vector<Bucket> plan_buckets(const Chunk& ch) const {
    const std::vector<Layer>& layers = ctx_.priced.layers;
    const Bytes w = ctx_.gw;  // the gradients' element
    std::vector<Bytes> bytes;
    for (int l = ch.first + ch.count; l-- > ch.first;) {
      const Layer& L = layers[l];
      bytes.push_back((L.params + (L.borrowed_params > 0 && ch.rank != 0 ? L.borrowed_params : 0)) * w);
    }
    std::vector<int> assigned = assign_buckets(bytes, first_bucket_bytes(ctx_.plan), ctx_.plan.bucket_bytes, bucket_rule(ctx_.plan));
    int next = -1;
    for (std::size_t k = assigned.size(); k-- > 0;) {
      if (assigned[k] >= 0) next = assigned[k];
      else assigned[k] = next;
    }
    const int count = std::max(1, *std::max_element(assigned.begin(), assigned.end()) + 1);
    std::vector<Bucket> out(static_cast<std::size_t>(count));
    for (std::size_t k = 0; k < bytes.size(); ++k) {
      const int l = ch.first + ch.count - 1 - static_cast<int>(k);
      Bucket& b = out[static_cast<std::size_t>(assigned[k] >= 0 ? assigned[k] : count - 1)];
      b.time += ctx_.priced.backward[l];
      if (!ctx_.priced.weight.empty()) b.wtime += ctx_.priced.weight[l];
      if (bytes[k] == 0) continue;
      b.bytes += bytes[k];
      b.expert_bytes += layers[l].expert_params * w;
      b.params += static_cast<double>(bytes[k] / w);
      b.tensors += std::max(1, layers[l].param_tensors);
      b.expert_params += layers[l].expert_params;
      if (ctx_.plan.fp8_param_gather) b.fp8_weights += fp8_gemms(layers[l], ctx_.plan.precision).weight_elements;
    }
    return out;
  }

  /// Note [Gradient buckets] (models/torch): bucket k's copy in or out on
  /// stage s's compute stream, after what runs there before it; -1 where
  /// the cost model prices it at 0 (the datasheet).
  TaskId bucket_copy(const char* what, int s, std::size_t vs, std::int64_t i, std::size_t k, const Bucket& b, bool out) {
    const TimeNs t = ctx_.bucket_copy_time(b.params, b.tensors, out);
    if (t == 0) return -1;
    const TaskId id = ctx_.add(ctx_.named ? ctx_.name(what, vs, i) + " bucket " + std::to_string(k) : std::string(), s,
                               Phase::kBackward, t);
    ctx_.g.tasks[id].memory_share = 1;  // a copy (Note [Interference] in engine/executor.cpp)
    return id;
  }

  ChunkContext& ctx_;
  std::vector<std::vector<Bucket>> buckets_;  ///< by chunk
  std::vector<TaskId> pending_out_;           ///< this backward's reductions, to copy back at its end
  bool scatter_ = false;                      ///< ZeRO-1's buckets reduce-scattered (Note [ZeRO-1's reduction])
  bool gather_early_ = false;                 ///< Note [Overlapped parameter gather]
  std::vector<bool> gathered_;                ///< by chunk: its buckets' all-gathers made
  std::vector<TaskId> last_gather_;           ///< by stage: the last bucket gather made
  TaskId rest_ = -1;                          ///< the chunk's last gather, which its forward's exit waits for (-1: none)
};

}  // namespace

std::unique_ptr<StrategyPass> data_parallel_pass(LayerContext& ctx) { return std::make_unique<LayerBuckets>(ctx); }

std::unique_ptr<StrategyPass> chunk_data_parallel_pass(ChunkContext& ctx) {
  return std::make_unique<ChunkBuckets>(ctx);
}

TaskId fsdp2_post_backward(LayerContext& ctx, std::int64_t micro, const std::string& unit, TaskId last, Bytes grads, Bytes input,
                           TaskId previous, MemOps& held) {
  TaskDeps deps{last};
  if (previous >= 0) deps.push_back(previous);
  MemOps ops = std::move(held);
  ops.push_back({MemCategory::kBuffers, input});
  ops.push_back({MemCategory::kGradients, -grads});
  held = {{MemCategory::kBuffers, -input}};
  return ctx.compute(ctx.tag(micro, "post_backward ", unit), Phase::kBackward, 0, std::move(deps), {}, std::move(ops));
}

void fsdp2_end_backward(LayerContext& ctx, const At& at, TaskId last, TaskId previous, MemOps& held) {
  if (held.empty()) return;
  ctx.compute(ctx.tag(at.micro, "wait last reduce_scatter"), Phase::kBackward, 0, {last, previous}, {}, std::move(held));
  held.clear();
}

}  // namespace dtsim::sim::detail
