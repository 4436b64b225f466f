// The chunk-wise stage emitter: pipelined plans (pp > 1), one simulated
// rank per stage, one task per model chunk and pass (the walk: lower.cpp).
//
// Note [Pipeline lowering]
// The model's layers are cut into pp x v contiguous chunks (v virtual stages
// per rank, Megatron-LM's interleaving), balanced by priced cost unless the
// plan gives stage_layers. Virtual stage vs = k x pp + s is chunk k of stage
// s. Each stage runs its passes in the order pipeline_order() gives; a
// forward of micro-batch i waits for the activations of virtual stage vs - 1
// (a point-to-point send over the link joining the two stages, on a send
// stream so the sender goes on computing) and a backward for the gradient
// from vs + 1. A chunk's layers are one task per pass: nothing communicates
// between them except tensor-parallel collectives, which Megatron-LM runs
// serially after the kernels they follow, so they are one collective task
// right after the chunk's kernels. Data- and tensor-parallel replicas of a
// stage behave alike and are simulated once (Note [Symmetry] in
// lowering.cpp): cost grows with stages x micro-batches x chunks.
//
// Memory follows the schedule: a forward allocates what the chunk keeps for
// backward and its backward frees it, so GPipe holds all m micro-batches, 1F1B
// at most pp - s on stage s, and interleaving Korthikanti's larger factor, as
// the simulation of the order shows rather than a formula. With full
// recompute only each layer's input is kept and backward rematerialises one
// layer at a time; selective recompute keeps everything but the attention
// core (Note [Activation memory] in models/src/layers.cpp). A chunk that
// sends its output on keeps it as autograd's root until its backward, which
// also holds the gradient received for it; the last two send buffers stay
// (Note [Send buffers]).
//
// A chunk's last backward runs bucket by bucket (bucket_mb, reverse layer
// order), each bucket's gradients all-reduced over the data-parallel group
// while the rest of that backward runs, as PyTorch DDP and Megatron-LM's
// overlap_grad_reduce do (ZeRO-1 then steps its shard and all-gathers the
// parameters, as Megatron's distributed optimizer); a GPT's word embedding,
// tied to the head on the last stage, has its gradient all-reduced between
// the first and last stage (Megatron-LM's embedding group).
#include <algorithm>
#include <limits>
#include <string>

#include "dtsim/sim/buckets.hpp"
#include "dtsim/sim/error.hpp"
#include "dtsim/sim/lowering.hpp"
#include "lowering/emitter.hpp"
#include "lowering/lowering_common.hpp"

namespace dtsim::sim {


namespace {

// Indices of a pipeline rank's streams (make_ranks names them).
enum StreamIndex { kCompute = 0, kGradComm = 1, kSendFwd = 2, kSendBwd = 3 };

/// One model chunk (a virtual stage) as priced for one micro-batch.
struct Chunk {
  int first = 0, count = 0;  // layers
  int rank = 0;              // pipeline stage holding it
  TimeNs fwd = 0, bwd = 0, recompute = 0;
  std::vector<LayerComm> tp_fwd_ops, tp_bwd_ops;
  CollectiveCost tp_fwd, tp_bwd;
  CollectiveCost send_fwd, send_bwd;  // activation to the next chunk, gradient to the previous
  Bytes kept = 0;            // kept from forward to backward
  Bytes peak_extra = 0;      // rematerialised during backward
  Bytes workspace = 0;       // the largest backward workspace of its layers
  Bytes input = 0;           // activation received (and its gradient sent back)
  Bytes output = 0;          // activation sent on
  Bytes held = 0;            // that output, kept from forward to backward as autograd's root
  Bytes send_copy = 0;       // a strided output's contiguous copy, made to send it
  std::int64_t params = 0;   // held by the rank, a tied copy included
  std::int64_t late_grads = 0;  // of them, those whose gradients appear as the backward ends
  std::int64_t tied = 0;     // parameters of a weight tied across stages
  struct Bucket {
    TimeNs time = 0;         // backward time of the layers whose gradients fill it
    Bytes bytes = 0;
    double params = 0;       // its gradients' parameters and tensors (Note [Gradient buckets])
    int tensors = 0;
  };
  std::vector<Bucket> buckets;  // in backward (reverse layer) order
};

class ChunkStage final : public detail::StageEmitter {
 public:
  explicit ChunkStage(const detail::LoweringInputs& in)
      : model_(in.model), plan_(in.plan), cluster_(in.cluster), compute_(in.compute), comm_(in.comm), named_(in.named),
        b_(in.named),
        // The layers as the partition priced them, or priced here.
        priced_(in.priced != nullptr ? *in.priced
                                     : (own_ = price_layers(in.model, in.plan, in.cluster, in.compute, in.comm))) {
    make_groups();
    place_chunks();
    make_ranks();
    const int pp = plan_.pp, v = plan_.virtual_stages;
    const std::size_t cells = static_cast<std::size_t>(pp * v) * static_cast<std::size_t>(plan_.grad_accum);
    g_.tasks.reserve(cells * 7 + 8 * static_cast<std::size_t>(pp));  // <= 7 tasks per chunk and micro-batch
    f_entry_.assign(cells, -1);
    f_exit_.assign(cells, -1);
    b_entry_.assign(cells, -1);
    send_f_.assign(cells, -1);
    send_b_.assign(cells, -1);
  }

  void begin_stage(int, const std::vector<PipeStep>& order) override {
    const auto v = static_cast<std::size_t>(plan_.virtual_stages);
    last_b_.assign(v, -1);
    grads_.assign(v, false);
    final_b_.assign(v, 0);  // each chunk's last backward
    for (std::size_t j = 0; j < order.size(); ++j) {
      if (!order[j].forward) final_b_[order[j].chunk] = j;
    }
    reductions_.clear();
    last_ = -1;
  }

  void step(int s, std::size_t j, const PipeStep& st) override {
    const int vs = st.chunk * plan_.pp + s;
    last_ = st.forward ? forward(s, vs, st.micro) : backward(s, vs, st.micro, !grads_[st.chunk], final_b_[st.chunk] == j);
    if (!st.forward) {
      grads_[st.chunk] = true;
      last_b_[st.chunk] = last_;
    }
  }

  void end_stage(int s) override { finish_rank(s, last_b_, last_); }

  TaskGraph finish() override {
    // Cross-stage dependencies, now that every task exists.
    const int C = plan_.pp * plan_.virtual_stages;
    const int m = static_cast<int>(plan_.grad_accum);
    for (int vs = 0; vs < C; ++vs) {
      for (int i = 0; i < m; ++i) {
        const std::size_t c = cell(vs, i);
        if (vs > 0) g_.tasks[f_entry_[c]].deps.push_back(send_f_[cell(vs - 1, i)]);
        g_.tasks[b_entry_[c]].deps.push_back(vs + 1 < C ? send_b_[cell(vs + 1, i)] : f_exit_[c]);
      }
    }
    for (const auto& ch : chunks_) g_.stage_layers.push_back(ch.count);
    return std::move(g_);
  }

 private:
  std::size_t cell(int vs, int i) const { return static_cast<std::size_t>(vs) * plan_.grad_accum + i; }
  std::string name(const char* what, int vs, int i) const {
    if (!named_) return {};
    return std::string(what) + " chunk " + std::to_string(vs) + " [mb " + std::to_string(i) + "]";
  }

  // ---- groups -----------------------------------------------------------------
  void make_groups() {
    w_ = element_bytes(plan_.precision);
    tp_group_ = axis_group(plan_.mesh, Axis::kTp, cluster_.gpus_per_node);
    dp_group_ = axis_group(plan_.mesh, Axis::kDp, cluster_.gpus_per_node);
  }

  void place_chunks() {
    const int pp = plan_.pp, C = pp * plan_.virtual_stages;
    // The partition step split the layers (partition.hpp).
    const std::vector<int>& counts = plan_.stage_layers;
    DTSIM_ASSERT(static_cast<int>(counts.size()) == C, "stage_layers does not match the chunks: partition() first");
    int embedding_chunk = -1;
    for (std::size_t l = 0; l < layers_.size() && embedding_chunk < 0; ++l) {
      if (layers_[l].kind == LayerKind::kEmbedding) embedding_chunk = 0;  // the first chunk always starts at layer 0
    }
    int first = 0;
    for (int vs = 0; vs < C; ++vs) {
      Chunk ch;
      ch.first = first;
      ch.count = counts[vs];
      ch.rank = vs % pp;
      Bytes max_extra = 0;
      for (int l = first; l < first + ch.count; ++l) {
        const Layer& L = layers_[l];
        ch.fwd += fwd_[l];
        ch.bwd += bwd_[l];
        ch.recompute += rec_[l];
        ch.tp_fwd_ops.insert(ch.tp_fwd_ops.end(), L.tp_forward.begin(), L.tp_forward.end());
        ch.tp_bwd_ops.insert(ch.tp_bwd_ops.end(), L.tp_backward.begin(), L.tp_backward.end());
        ch.params += L.params;
        // The chunk's first layer runs its backward last: its gradients
        // come after the deeper layers' peak.
        if (L.grads_at_end() || l == first) ch.late_grads += L.params;
        // Backward rematerialises one layer at a time: the most any one adds back.
        const Bytes kept = detail::kept_bytes(layers_, static_cast<std::size_t>(l), plan_.recompute);
        ch.kept += kept;
        max_extra = std::max(max_extra, L.saved_bytes - kept);
        // A layer's backward holds its workspace and the gradient of its
        // output, which the chunk's last layer receives (counted apart).
        const Bytes grad_in = l + 1 < first + ch.count ? L.output_bytes : 0;
        ch.workspace = std::max(ch.workspace, L.backward_workspace_bytes + grad_in);
        if (L.borrowed_params > 0 && embedding_chunk >= 0 && ch.rank != 0) {
          // Megatron-LM keeps a copy of the tied word embedding on the last stage.
          ch.params += L.borrowed_params;
          ch.tied = L.borrowed_params;
        }
      }
      ch.peak_extra = max_extra;
      // Gradient buckets in backward (reverse layer) order, as DDP's reducer
      // fills them (buckets.hpp). A layer without parameters computes in
      // the segment of the next bucket; any after the last, in the last.
      std::vector<Bytes> bytes;
      for (int l = first + ch.count; l-- > first;) {
        const Layer& L = layers_[l];
        bytes.push_back((L.params + (L.borrowed_params > 0 && ch.rank != 0 ? L.borrowed_params : 0)) * w_);
      }
      std::vector<int> assigned = assign_buckets(bytes, first_bucket_bytes(plan_), plan_.bucket_bytes);
      int next = -1;
      for (std::size_t k = assigned.size(); k-- > 0;) {
        if (assigned[k] >= 0) next = assigned[k];
        else assigned[k] = next;
      }
      const int count = std::max(1, *std::max_element(assigned.begin(), assigned.end()) + 1);
      ch.buckets.resize(static_cast<std::size_t>(count));
      for (std::size_t k = 0; k < bytes.size(); ++k) {
        const Layer& L = layers_[first + ch.count - 1 - static_cast<int>(k)];
        Chunk::Bucket& b = ch.buckets[static_cast<std::size_t>(assigned[k] >= 0 ? assigned[k] : count - 1)];
        b.time += bwd_[first + ch.count - 1 - static_cast<int>(k)];
        if (bytes[k] == 0) continue;
        b.bytes += bytes[k];
        b.params += static_cast<double>(bytes[k] / w_);
        b.tensors += std::max(1, L.param_tensors);
      }
      ch.input = first == 0 ? 0 : layers_[first - 1].output_bytes;
      ch.output = layers_[first + ch.count - 1].output_bytes;
      if (first > 0) {
        // The input comes from another stage (Layer::stage_input_bytes).
        const Bytes extra = layers_[first].stage_input_bytes;
        const bool kept_whole = detail::kept_bytes(layers_, static_cast<std::size_t>(first), plan_.recompute) ==
                                layers_[first].saved_bytes;
        (kept_whole ? ch.kept : ch.peak_extra) += extra;
      }
      if (vs + 1 < C) {
        ch.held = ch.output;
        ch.send_copy = layers_[first + ch.count - 1].strided_output ? ch.output : 0;
      }
      if (plan_.tp > 1) {
        ch.tp_fwd = detail::sum_costs(ch.tp_fwd_ops, tp_group_, comm_);
        ch.tp_bwd = detail::sum_costs(ch.tp_bwd_ops, tp_group_, comm_);
      }
      chunks_.push_back(std::move(ch));
      first += counts[vs];
    }
    if (chunks_.back().tied > 0) chunks_.front().tied = chunks_.back().tied;
    // Every micro-batch sends the same tensors: price the sends once.
    for (int vs = 0; vs < C; ++vs) {
      Chunk& ch = chunks_[vs];
      if (vs + 1 < C) {
        ch.send_fwd = comm_.collective(CollectiveOp::kSendRecv, ch.output, p2p_group(ch.rank, chunks_[vs + 1].rank));
      }
      if (vs > 0) ch.send_bwd = comm_.collective(CollectiveOp::kSendRecv, ch.input, p2p_group(ch.rank, chunks_[vs - 1].rank));
    }
  }

  CommGroup p2p_group(int from_stage, int to_stage) const {
    const int per_node = cluster_.gpus_per_node;
    const int stride = plan_.mesh.stride(Axis::kPp);
    const bool same = (from_stage * stride) / per_node == (to_stage * stride) / per_node;
    CommGroup g;
    g.ranks = 2;
    g.ranks_per_node = same ? 2 : 1;
    g.groups_per_node = same ? 1 : std::max(1, std::min(per_node, stride));
    return g;
  }

  // ---- ranks -----------------------------------------------------------------
  void make_ranks() {
    const int inter_groups = std::max(dp_group_.ranks_per_node < dp_group_.ranks ? dp_group_.groups_per_node : 1,
                                      std::min(cluster_.gpus_per_node, plan_.mesh.stride(Axis::kPp)));
    for (int s = 0; s < plan_.pp; ++s) {
      SimRank r;
      r.rank = plan_.mesh.with_coord(0, Axis::kPp, s);
      r.stage = s;
      r.replicas = plan_.dp * plan_.tp;
      for (Stream st : {Stream::kCompute, Stream::kGradComm, Stream::kSendFwd, Stream::kSendBwd}) r.streams.push_back(to_string(st));
      detail::set_link_capacity(r, cluster_, comm_, inter_groups);
      std::int64_t params = 0;
      for (const auto& ch : chunks_) {
        if (ch.rank == s) params += ch.params;
      }
      rank_params_.push_back(params);
      detail::add_resident(r, plan_, cluster_, params, 0);
      g_.ranks.push_back(std::move(r));
    }
  }

  // ---- tasks -----------------------------------------------------------------
  TaskId add(std::string n, int rank, int stream, Phase phase, TimeNs duration, std::vector<MemOp> on_start = {},
             std::vector<MemOp> on_end = {}) {
    return b_.compute(std::move(n), rank, stream, phase, duration, {}, std::move(on_start), std::move(on_end));
  }

  TaskId comm(std::string n, int rank, int stream, Axis axis, CollectiveOp op, Bytes bytes, const CollectiveCost& cost,
              std::vector<TaskId> deps) {
    return b_.collective(std::move(n), rank, stream, axis, op, bytes, cost, std::move(deps));
  }

  /// Note [Gradient buckets] (models/torch): bucket k's copy in or out on
  /// stage s's compute stream, after what runs there before it; -1 where
  /// the cost model prices it at 0 (the datasheet).
  TaskId bucket_copy(const char* what, int s, int vs, int i, std::size_t k, const Chunk::Bucket& b, bool out) {
    const TimeNs t = compute_.bucket_copy_time(b.params, b.tensors, out);
    if (t == 0) return -1;
    return add(named_ ? name(what, vs, i) + " bucket " + std::to_string(k) : std::string(), s, kCompute, Phase::kBackward, t);
  }

  TaskId tp_after(const char* what, int s, int vs, int i, const Chunk& ch, bool forward, TaskId after) {
    const auto& ops = forward ? ch.tp_fwd_ops : ch.tp_bwd_ops;
    if (plan_.tp <= 1 || ops.empty()) return after;
    Bytes bytes = 0;
    for (const auto& o : ops) bytes += o.bytes * o.count;
    return comm(name(what, vs, i), s, kCompute, ops.front().axis, ops.front().op, bytes, forward ? ch.tp_fwd : ch.tp_bwd, {after});
  }

  /// Note [Send buffers]: a stage keeps the buffers of its last two sends
  /// (dtsim validate's runtime waits for the oldest before a third, and for
  /// the rest at the step's end). `bytes` joins them in `ops`, a task's
  /// on_end; the oldest leaves first.
  void hold_send(std::vector<MemOp>& ops, Bytes bytes) {
    if (held_sends_.size() == 2) {
      detail::add_bytes(ops, MemCategory::kActivations, -held_sends_.front());
      held_sends_.erase(held_sends_.begin());
    }
    detail::add_bytes(ops, MemCategory::kActivations, bytes);
    held_sends_.push_back(bytes);
  }

  TaskId forward(int s, int vs, int i) {
    const Chunk& ch = chunks_[vs];
    const std::size_t c = cell(vs, i);
    std::vector<MemOp> on_end;
    if (vs + 1 < static_cast<int>(chunks_.size())) hold_send(on_end, ch.send_copy);
    f_entry_[c] = add(name("fwd", vs, i), s, kCompute, Phase::kForward, ch.fwd,
                      {{MemCategory::kActivations, ch.kept + ch.held}}, std::move(on_end));
    f_exit_[c] = tp_after("tp fwd", s, vs, i, ch, true, f_entry_[c]);
    if (vs + 1 < static_cast<int>(chunks_.size())) {
      send_f_[c] = comm(name("send act", vs, i), s, kSendFwd, Axis::kPp, CollectiveOp::kSendRecv, ch.output, ch.send_fwd, {f_exit_[c]});
    }
    return f_exit_[c];
  }

  TaskId backward(int s, int vs, int i, bool first_of_chunk, bool last_of_chunk) {
    const Chunk& ch = chunks_[vs];
    const std::size_t c = cell(vs, i);
    TaskId entry = -1;
    if (ch.recompute > 0) {
      entry = add(name("recompute", vs, i), s, kCompute, Phase::kRecompute, ch.recompute,
                  {{MemCategory::kActivations, ch.peak_extra}});
    }
    // The gradient received for the chunk's output, and the larger of its
    // backward workspace and the gradient of its input, which appears as the
    // workspace goes.
    const Bytes transient = ch.held + std::max(ch.input, ch.workspace);
    std::vector<MemOp> on_start{{MemCategory::kActivations, transient}};
    std::vector<MemOp> on_end{{MemCategory::kActivations,
                               -(ch.kept + ch.held + (ch.recompute > 0 ? ch.peak_extra : 0) + transient)}};
    // Stages 0 and 1 keep full gradients from the first backward to the
    // step. The deeper layers' are there as the backward starts; the first
    // layer's, and a recurrent layer's, appear as it ends.
    if (first_of_chunk) {
      detail::add_bytes(on_start, MemCategory::kGradients, (ch.params - ch.late_grads) * w_);
      detail::add_bytes(on_end, MemCategory::kGradients, ch.late_grads * w_);
    }
    // The gradient of the input stays until its send leaves (Note [Send buffers]).
    if (vs > 0) hold_send(on_end, ch.input);
    TaskId b = -1;
    std::vector<TaskId> pending_out;  // this chunk's bucket all-reduces, to copy back at its end
    if (last_of_chunk && plan_.dp > 1) {
      // The chunk's last backward runs bucket by bucket, each bucket's
      // all-reduce overlapping the rest (Note [DDP buckets] in lowering.cpp).
      std::vector<TaskId> reduces;
      for (std::size_t k = 0; k < ch.buckets.size(); ++k) {
        const bool first = k == 0, final = k + 1 == ch.buckets.size();
        const TaskId seg = add(named_ ? name("bwd", vs, i) + " bucket " + std::to_string(k) : std::string(), s, kCompute,
                               Phase::kBackward, ch.buckets[k].time, first ? std::move(on_start) : std::vector<MemOp>{},
                               final ? std::move(on_end) : std::vector<MemOp>{});
        if (first) b_entry_[c] = entry >= 0 ? entry : seg;
        const Bytes bytes = ch.buckets[k].bytes;
        // The bucket is filled right after its layers' backward (Note [Gradient buckets]).
        const TaskId in = bucket_copy("copy grads in", s, vs, i, k, ch.buckets[k], false);
        reduces.push_back(comm(named_ ? "all_reduce grads chunk " + std::to_string(vs) + " bucket " + std::to_string(k)
                                      : std::string(),
                               s, kGradComm, Axis::kDp, CollectiveOp::kAllReduce, bytes,
                               comm_.collective(CollectiveOp::kAllReduce, bytes, dp_group_), {in < 0 ? seg : in}));
        b = seg;
      }
      pending_out = std::move(reduces);
    } else {
      b = add(name("bwd", vs, i), s, kCompute, Phase::kBackward, ch.bwd, std::move(on_start), std::move(on_end));
      b_entry_[c] = entry >= 0 ? entry : b;
    }
    const TaskId exit = tp_after("tp bwd", s, vs, i, ch, false, b);
    if (vs > 0) {
      send_b_[c] = comm(name("send grad", vs, i), s, kSendBwd, Axis::kPp, CollectiveOp::kSendRecv, ch.input, ch.send_bwd, {exit});
    }
    // The reduced buckets go back into the gradients once the chunk's
    // backward is done and its gradient sent, as DDP's reducer finalizes
    // them (Note [Gradient buckets]).
    for (std::size_t k = 0; k < pending_out.size(); ++k) {
      const TaskId out = bucket_copy("copy grads out", s, vs, i, k, ch.buckets[k], true);
      if (out >= 0) g_.tasks[out].deps.push_back(pending_out[k]);
      reductions_.push_back(out >= 0 ? out : pending_out[k]);
    }
    return exit;
  }

  void finish_rank(int s, const std::vector<TaskId>& last_b, TaskId last) {
    std::vector<TaskId> deps{last};
    deps.insert(deps.end(), reductions_.begin(), reductions_.end());
    const int pp = plan_.pp;
    for (int k = 0; k < plan_.virtual_stages; ++k) {
      const int vs = k * pp + s;
      const Chunk& ch = chunks_[vs];
      if (ch.tied > 0 && (vs == 0 || vs + 1 == static_cast<int>(chunks_.size()))) {
        // The tied embedding's gradient, summed between the first and last stage.
        const Bytes bytes = ch.tied * w_;
        TaskId t = comm(named_ ? "all_reduce tied embedding" : std::string(), s, kGradComm, Axis::kPp, CollectiveOp::kAllReduce,
                        bytes, comm_.collective(CollectiveOp::kAllReduce, bytes, p2p_group(0, pp - 1)), {last_b[k]});
        g_.tasks[t].collective = 1;
        g_.tasks[t].participants = 2;
        deps.push_back(t);
      }
    }
    const std::int64_t params = rank_params_[s];
    const std::int64_t shard = plan_.zero_stage >= 1 ? (params + plan_.shard_group - 1) / plan_.shard_group : params;
    // The step goes tensor by tensor, or over one flat shard under ZeRO-1
    // (Note [Optimizer updates] in cost.hpp).
    int tensors = 0;
    for (const auto& ch : chunks_) {
      if (ch.rank != s) continue;
      for (int l = ch.first; l < ch.first + ch.count; ++l) tensors += layer_updates(layers_[l].params, layers_[l].param_tensors);
    }
    if (plan_.zero_stage >= 1) tensors = std::max(1, flat_updates(shard));
    // The step's sends are done before it (Note [Send buffers]).
    Bytes sent = 0;
    for (Bytes b : held_sends_) sent += b;
    held_sends_.clear();
    std::vector<MemOp> on_start;
    detail::add_bytes(on_start, MemCategory::kActivations, -sent);
    const TaskId step = add("optimizer step", s, kCompute, Phase::kOptimizer,
                            compute_.optimizer_time(static_cast<double>(shard), tensors, plan_.optimizer, plan_.precision,
                                                    cluster_.device),
                            std::move(on_start), {{MemCategory::kGradients, -params * w_}});
    g_.tasks[step].deps = std::move(deps);
    if (plan_.zero_stage == 1 && plan_.shard_group > 1) {
      const Bytes all = params * w_;
      comm("all_gather params", s, kGradComm, Axis::kDp, CollectiveOp::kAllGather, all,
           comm_.collective(CollectiveOp::kAllGather, all, dp_group_), {step});
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
  PricedLayers own_;             // where lower() was given no priced layers
  const PricedLayers& priced_;
  const std::vector<Layer>& layers_ = priced_.layers;
  const std::vector<TimeNs>& fwd_ = priced_.forward;
  const std::vector<TimeNs>& bwd_ = priced_.backward;
  const std::vector<TimeNs>& rec_ = priced_.recompute;
  std::vector<Chunk> chunks_;
  std::vector<std::int64_t> rank_params_;
  int w_ = 4;
  CommGroup tp_group_, dp_group_;
  std::vector<TaskId> f_entry_, f_exit_, b_entry_, send_f_, send_b_;
  std::vector<TaskId> reductions_;  // this rank's gradient all-reduces
  std::vector<Bytes> held_sends_;   // this rank's send buffers, oldest first (Note [Send buffers])
  // The stage being emitted (begin_stage .. end_stage).
  std::vector<TaskId> last_b_;      // each chunk's last backward
  std::vector<bool> grads_;         // whether a chunk has run a backward yet
  std::vector<std::size_t> final_b_;  // the step of each chunk's last backward
  TaskId last_ = -1;                // the stage's last step
};

}  // namespace

std::unique_ptr<detail::StageEmitter> detail::chunk_emitter(const LoweringInputs& in) {
  return std::make_unique<ChunkStage>(in);
}

}  // namespace dtsim::sim
