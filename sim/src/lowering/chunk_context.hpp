#pragma once
// What the chunk-wise stage emitter (chunk_stage.cpp) shares with its passes
// (private to sim/): the model chunks priced once, the stages' groups and
// the entry and exit tasks of every chunk's passes.
#include <memory>
#include <vector>

#include "dtsim/sim/partition.hpp"
#include "lowering/pass.hpp"

namespace dtsim::sim::detail {

/// One model chunk (a virtual stage) as priced for one micro-batch.
struct Chunk {
  int first = 0, count = 0;  ///< its layers
  int rank = 0;              ///< the pipeline stage holding it
  TimeNs fwd = 0, bwd = 0, recompute = 0;
  TimeNs wgrad = 0;          ///< of bwd, the weight-gradient pass under zb-h1
  /// Task::memory_share of fwd, bwd (and wgrad) and recompute: their
  /// layers' (PricedLayers), weighted by time.
  float fwd_memory = 0, bwd_memory = 0, recompute_memory = 0;
  Bytes w_hold = 0;          ///< what that pass keeps from the backward until it runs
  std::vector<LayerComm> tp_fwd_ops, tp_bwd_ops;
  CollectiveCost send_fwd, send_bwd;  ///< activation to the next chunk, gradient to the previous
  Bytes kept = 0;            ///< kept from forward to backward
  Bytes peak_extra = 0;      ///< rematerialised during backward
  Bytes workspace = 0;       ///< the largest backward workspace of its layers
  /// The same where the layers' gradients are allocated by this backward
  /// (the chunk's first), which a measured rise includes (Note [Layer
  /// memory] in cost_profile.cpp); equal to `workspace` where none was measured.
  Bytes workspace_first = 0;
  /// How far the forward rises above `kept` for a moment: the largest of
  /// a layer's measured transient over what the layers before it keep.
  Bytes forward_transient = 0;
  Bytes input = 0;           ///< activation received (and its gradient sent back)
  Bytes output = 0;          ///< activation sent on
  /// That output, kept from forward to backward as autograd's root; 0
  /// where Megatron frees its data once sent (Note [Deallocated outputs]
  /// in passes/pipeline.cpp).
  Bytes held = 0;
  Bytes grad_out = 0;        ///< the gradient received for the output (0 on the last chunk)
  Bytes send_copy = 0;       ///< a strided output's contiguous copy, made to send it
  std::int64_t params = 0;   ///< held by the rank, a tied copy included
  std::int64_t expert_params = 0;  ///< of them, routed experts' (Layer::expert_params)
  std::int64_t late_grads = 0;  ///< of them, those whose gradients appear as the backward ends
  std::int64_t tied = 0;     ///< parameters of a weight tied across stages
  Fp8Gemms fp8;              ///< its layers' FP8 GEMMs under fp8 (Note [FP8 memory])
};

/// A pipeline's state: one simulated rank per stage (Note [Pipeline lowering]).
struct ChunkContext : StageContext {
  ChunkContext(const LoweringInputs& in, const PricedLayers& priced) : StageContext(in), priced(priced) {}

  const PricedLayers& priced;  ///< the layers with their per-micro-batch times
  /// FSDP's FULL_SHARD stages under torch.distributed.pipelining (Note
  /// [FSDP under a pipeline] in passes/fsdp_pipeline.cpp).
  bool fsdp = plan.fsdp && plan.zero_stage == 3;
  /// Bytes of a gradient element as it accumulates over the micro-batches
  /// until the step: gw, or under FSDP its reduce dtype's.
  Bytes accumulated_w = fsdp ? fsdp_reduce_element_bytes(plan) : gw;
  std::vector<Chunk> chunks;   ///< by virtual stage: chunk k of stage s is k x pp + s
  std::vector<std::int64_t> rank_params;  ///< parameters each stage holds
  std::vector<std::int64_t> rank_expert_params;  ///< of them, routed experts'
  std::vector<Fp8Gemms> rank_fp8;         ///< the FP8 GEMMs each stage holds (Note [FP8 memory])
  std::vector<TaskId> f_entry, f_exit, b_entry;  ///< by cell(): each chunk's forward and backward ends
  std::vector<TaskId> last_backward;             ///< by chunk: the exit of its latest backward

  /// Index of virtual stage vs's micro-batch i.
  std::size_t cell(int vs, std::int64_t i) const { return static_cast<std::size_t>(vs) * plan.grad_accum + i; }
  /// "what chunk vs [mb i]", or nothing when tasks are not named.
  std::string name(const char* what, std::size_t vs, std::int64_t i) const {
    if (!named) return {};
    return std::string(what) + " chunk " + std::to_string(vs) + " [mb " + std::to_string(i) + "]";
  }
  /// A kernel on stage `rank`'s compute stream, its dependencies added later.
  TaskId add(std::string n, int rank, Phase phase, TimeNs duration, MemOps on_start = {},
             MemOps on_end = {}) {
    return b.compute(std::move(n), rank, stream(Stream::kCompute), phase, duration, {}, std::move(on_start),
                     std::move(on_end));
  }
  /// The two ranks of stages `from` and `to` as a group: one node or two.
  CommGroup p2p_group(int from_stage, int to_stage) const {
    const int per_node = cluster.gpus_per_node;
    const int stride = plan.mesh.stride(Axis::kPp);
    const bool same = (from_stage * stride) / per_node == (to_stage * stride) / per_node;
    CommGroup g;
    g.ranks = 2;
    g.ranks_per_node = same ? 2 : 1;
    g.groups_per_node = same ? 1 : std::max(1, std::min(per_node, stride));
    return g;
  }
};

/// The chunks' gradient buckets all-reduced over the data-parallel group
/// during each chunk's last backward, and ZeRO-1's parameter gather
/// (passes/data_parallel.cpp).
std::unique_ptr<StrategyPass> chunk_data_parallel_pass(ChunkContext& ctx);
/// FSDP's FULL_SHARD stages instead: each chunk's parameters gathered once
/// a step, its gradients reduce-scattered after its last backward
/// (passes/fsdp_pipeline.cpp).
std::unique_ptr<StrategyPass> fsdp_pipeline_pass(ChunkContext& ctx);
/// The schedule's point-to-point sends, their buffers, the tied embedding's
/// all-reduce and the dependencies between stages (passes/pipeline.cpp).
std::unique_ptr<StrategyPass> pipeline_pass(ChunkContext& ctx);

}  // namespace dtsim::sim::detail
