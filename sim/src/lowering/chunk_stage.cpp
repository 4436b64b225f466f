// The chunk-wise stage emitter: pipelined plans (pp > 1), one simulated
// rank per stage, one task per model chunk and pass (the walk: lower.cpp).
// It emits each chunk's kernels and the activations it keeps; the sends
// between stages, the data-parallel buckets, tensor parallelism and
// recompute are passes (Note [Strategy passes] in pass.hpp).
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
// layer_stage.cpp): cost grows with stages x micro-batches x chunks.
//
// Memory follows the schedule: a forward allocates what the chunk keeps for
// backward and its backward frees it, so GPipe holds all m micro-batches, 1F1B
// at most pp - s on stage s, and interleaving Korthikanti's larger factor, as
// the simulation of the order shows rather than a formula. With full
// recompute only each layer's input is kept and backward rematerialises one
// layer at a time; selective recompute keeps everything but the attention
// core (Note [Activation memory] in models/src/layers.cpp). A chunk that
// sends its output on keeps it as autograd's root until its backward (or,
// as Megatron-LM does, frees its data once sent: Note [Deallocated
// outputs] in passes/pipeline.cpp); the backward holds the gradient
// received for it; the last two send buffers stay (Note [Send buffers]).
//
// A chunk's last backward runs bucket by bucket, each bucket's gradients
// all-reduced over the data-parallel group while the rest of that backward
// runs (passes/data_parallel.cpp); a GPT's word embedding, tied to the head
// on the last stage, has its gradient all-reduced between the first and last
// stage (passes/pipeline.cpp).
#include <algorithm>
#include <string>

#include "dtsim/sim/error.hpp"
#include "dtsim/sim/partition.hpp"
#include "dtsim/sim/lowering.hpp"
#include "lowering/chunk_context.hpp"
#include "lowering/fine_grained_offload.hpp"
#include "lowering/lowering_common.hpp"

namespace dtsim::sim {
namespace {

class ChunkStage final : public detail::StageEmitter {
 public:
  explicit ChunkStage(const detail::LoweringInputs& in)
      // The layers as the partition priced them, or priced here.
      : own_(in.priced != nullptr ? PricedLayers{} : price_layers(in.model, in.plan, in.cluster, in.compute, in.comm)),
        ctx_(in, in.priced != nullptr ? *in.priced : own_), passes_(ctx_) {
    detail::ChunkContext& c = ctx_;
    c.tp_group = axis_group(c.plan.mesh, Axis::kTp, c.cluster.gpus_per_node);
    c.cp_group = axis_group(c.plan.mesh, Axis::kCp, c.cluster.gpus_per_node);
    c.dp_group = data_group(c.plan.mesh, c.cluster.gpus_per_node);
    c.ep_group = expert_dispatch_group(c.plan.mesh, c.plan.etp, c.plan.ep, c.plan.moe_dispatcher, c.cluster.gpus_per_node);
    c.edp_group = expert_group(c.plan.mesh, c.plan.etp, c.plan.ep, Axis::kDp, c.cluster.gpus_per_node);
    overlap_ = c.plan.overlap_moe_expert_parallel_comm && c.plan.ep > 1;
    place_chunks();
    make_ranks();
    const int pp = c.plan.pp, v = c.plan.virtual_stages;
    const std::size_t cells = static_cast<std::size_t>(pp * v) * static_cast<std::size_t>(c.plan.grad_accum);
    c.g.tasks.reserve(cells * 7 + 8 * static_cast<std::size_t>(pp));  // <= 7 tasks per chunk and micro-batch
    c.f_entry.assign(cells, -1);
    c.f_exit.assign(cells, -1);
    c.b_entry.assign(cells, -1);
    c.last_backward.assign(c.chunks.size(), -1);
    // Outermost first (Note [Strategy passes]): a chunk's bucket copies
    // follow its send; the sends follow the tensor-parallel collectives.
    // Note [FSDP under a pipeline]: FULL_SHARD stages gather and reduce in
    // place of the buckets.
    passes_.add(c.fsdp ? detail::fsdp_pipeline_pass(c) : detail::chunk_data_parallel_pass(c));
    passes_.add(detail::sequence_parallel_pass(c));  // after the reductions, before the step
    passes_.add(detail::pipeline_pass(c));
    passes_.add(detail::recompute_pass(c));
    {
      // Note [Fine-grained offload]: a chunk a model chunk.
      detail::OffloadUnits units{c.priced.layers, c.priced.forward, c.priced.backward, {}, false};
      for (const detail::Chunk& ch : c.chunks) units.units.emplace_back(ch.first, ch.count);
      passes_.add(detail::fine_grained_offload_pass(c, units));
    }
    passes_.add(detail::context_parallel_pass(c));
    passes_.add(detail::expert_parallel_pass(c));
    passes_.add(detail::sync_batch_norm_pass(c));
    passes_.add(detail::tensor_parallel_pass(c));
  }

  void begin_stage(int s, const std::vector<PipeStep>& order) override {
    const auto v = static_cast<std::size_t>(ctx_.plan.virtual_stages);
    grads_.assign(v, false);
    final_b_.assign(v, 0);  // each chunk's last backward
    for (std::size_t j = 0; j < order.size(); ++j) {
      if (!order[j].forward && (!split_ || order[j].weight)) final_b_[order[j].chunk] = j;
    }
    ctx_.reductions.clear();
    last_ = -1;
    last_forward_ = false;
    passes_.begin_stage(s, order);
  }

  void step(int s, std::size_t j, const PipeStep& st) override {
    const int vs = st.chunk * ctx_.plan.pp + s;
    ctx_.b.set_micro(st.micro);
    // Under zb-h1 the gradients come from the weight passes (Note [Zero bubble]).
    const bool grads_here = !split_ || st.weight;
    const bool first = grads_here && !grads_[st.chunk], last = grads_here && final_b_[st.chunk] == j;
    const TaskId before = last_;
    if (st.forward) {
      last_ = forward(s, vs, st.micro);
    } else if (st.weight) {
      last_ = weight(s, vs, st.micro, first, last);
    } else {
      last_ = backward(s, vs, st.micro, first, last);
    }
    if (overlap_ && before >= 0 && st.forward == last_forward_) {
      // Note [Expert-parallel overlap]: a warm-up forward, or a cool-down
      // backward, runs alone, after the step before and its all-to-alls;
      // in 1F1B each forward goes beside a backward, and the two hide each
      // other's (combined_1f1b_schedule_for_interleaved_pipelining).
      const std::size_t cell = ctx_.cell(vs, st.micro);
      ctx_.g.tasks[st.forward ? ctx_.f_entry[cell] : ctx_.b_entry[cell]].deps.push_back(before);
    }
    last_forward_ = st.forward;
    if (!st.forward) {
      if (grads_here) grads_[st.chunk] = true;
      ctx_.last_backward[static_cast<std::size_t>(vs)] = last_;
    }
    ctx_.b.set_micro(-1);
  }

  void end_stage(int s) override { optimizer_step(s); }
  TaskGraph& graph() override { return ctx_.g; }

  TaskGraph finish() override {
    passes_.finish();
    for (const auto& ch : ctx_.chunks) ctx_.g.stage_layers.push_back(ch.count);
    return std::move(ctx_.g);
  }

 private:
  void place_chunks() {
    detail::ChunkContext& c = ctx_;
    const std::vector<Layer>& layers = c.priced.layers;
    const int pp = c.plan.pp, C = pp * c.plan.virtual_stages;
    // The partition step split the layers (partition.hpp).
    const std::vector<int>& counts = c.plan.stage_layers;
    DTSIM_ASSERT(static_cast<int>(counts.size()) == C, "stage_layers does not match the chunks: partition() first");
    const WorkloadShape shape = detail::workload_shape(c.plan, c.cluster.device);
    const std::vector<Recompute> recomputes = layer_recomputes(c.plan, layers);  // Note [Block recompute]
    const std::vector<int> groups = recompute_groups(c.plan, layers);
    int embedding_chunk = -1;
    for (std::size_t l = 0; l < layers.size() && embedding_chunk < 0; ++l) {
      if (layers[l].kind == LayerKind::kEmbedding) embedding_chunk = 0;  // the first chunk always starts at layer 0
    }
    int first = 0;
    c.sp_params.assign(static_cast<std::size_t>(pp), 0);
    for (int vs = 0; vs < C; ++vs) {
      detail::Chunk ch;
      ch.first = first;
      ch.count = counts[vs];
      ch.rank = vs % pp;
      Bytes max_extra = 0;
      Bytes kept_before = 0;  // what the chunk's layers before l keep
      Bytes rebuilt = 0;      // what the rerun group of layer l rebuilds up to it
      struct Rise {
        Bytes any, first, kept;
        bool measured;
      };
      std::vector<Rise> rises;  // each layer's measured backward rise, in order
      double fwd_memory = 0, bwd_memory = 0, recompute_memory = 0;  // ns in memory-bound kernels
      for (int l = first; l < first + ch.count; ++l) {
        const Layer& L = layers[l];
        // Note [Layer memory]: what calibration measured of the layer's passes.
        const auto measured = c.compute_model.layer_memory(L, c.plan.precision, shape);
        ch.fwd += c.priced.forward[l];
        ch.bwd += c.priced.backward[l];
        ch.recompute += c.priced.recompute[l];
        fwd_memory += static_cast<double>(c.priced.forward[l]) * c.priced.forward_memory[l];
        bwd_memory += static_cast<double>(c.priced.backward[l]) * c.priced.backward_memory[l];
        recompute_memory += static_cast<double>(c.priced.recompute[l]) * c.priced.recompute_memory[l];
        if (!c.priced.weight.empty()) {
          ch.wgrad += c.priced.weight[l];
          ch.w_hold += detail::weight_grad_hold(L);
        }
        ch.tp_fwd_ops.insert(ch.tp_fwd_ops.end(), L.tp_forward.begin(), L.tp_forward.end());
        const auto bwd_ops = detail::tp_backward_ops(L, c.plan, c.cluster.device);
        ch.tp_bwd_ops.insert(ch.tp_bwd_ops.end(), bwd_ops.begin(), bwd_ops.end());
        ch.params += L.params;
        ch.expert_params += L.expert_params;
        c.sp_params[static_cast<std::size_t>(ch.rank)] += L.sp_params;
        ch.fp8 += detail::fp8_gemms(L, c.plan.precision);
        // The chunk's first layer runs its backward last: its gradients
        // come after the deeper layers' peak.
        if (L.grads_at_end() || l == first) ch.late_grads += L.params;
        // Backward rematerialises one layer at a time, or one rerun group
        // (Note [Block recompute]): the most any one adds back.
        const Bytes kept = detail::kept_bytes(layers, static_cast<std::size_t>(l), recomputes[l], groups[l]);
        ch.kept += kept;
        rebuilt = (groups[l] >= 0 && groups[l] != l ? rebuilt : 0) + L.saved_bytes - kept;
        max_extra = std::max(max_extra, rebuilt);
        // A layer's backward holds its workspace and the gradient of its
        // output, which the chunk's last layer receives (counted apart).
        const Bytes grad_in = l + 1 < first + ch.count ? L.output_bytes : 0;
        if (measured) {
          // The measured rise (the input's gradient and the workspaces, and
          // the weights' gradients where the pass allocates them) in place
          // of the formulas, as the layer-wise emitter takes it; the chunk's
          // backward is one task, so each layer's rise is counted less what
          // the layers after it kept, freed by the time its backward runs.
          rises.push_back({measured->backward_rise + grad_in,
                           std::max<Bytes>(0, measured->backward_rise - (L.grads_at_end() ? 0 : L.params * c.w)) + grad_in, kept, true});
          ch.forward_transient = std::max(ch.forward_transient, kept_before + kept + measured->forward_transient);
        } else {
          ch.workspace = std::max(ch.workspace, L.backward_workspace_bytes + grad_in);
          ch.workspace_first = std::max(ch.workspace_first, L.backward_workspace_bytes + grad_in);
          rises.push_back({0, 0, kept, false});
        }
        kept_before += kept;
        if (L.borrowed_params > 0 && embedding_chunk >= 0 && ch.rank != 0) {
          // Megatron-LM keeps a copy of the tied word embedding on the last stage.
          ch.params += L.borrowed_params;
          ch.tied = L.borrowed_params;
        }
      }
      ch.peak_extra = max_extra;
      auto share = [](double memory, TimeNs all) { return all > 0 ? static_cast<float>(std::min(1.0, memory / static_cast<double>(all))) : 0.0F; };
      ch.fwd_memory = share(fwd_memory, ch.fwd);
      ch.bwd_memory = share(bwd_memory, ch.bwd);
      ch.recompute_memory = share(recompute_memory, ch.recompute);
      Bytes freed = 0;  // kept by the layers after the one in hand, gone as its backward runs
      for (std::size_t r = rises.size(); r-- > 0;) {
        if (rises[r].measured) {
          ch.workspace = std::max(ch.workspace, rises[r].any - freed);
          ch.workspace_first = std::max(ch.workspace_first, rises[r].first - freed);
        }
        freed += rises[r].kept;
      }
      ch.forward_transient = std::max<Bytes>(0, ch.forward_transient - ch.kept);
      ch.input = first == 0 ? 0 : layers[first - 1].sent_bytes();
      ch.output = layers[first + ch.count - 1].sent_bytes();
      if (first > 0) {
        // The input comes from another stage (Layer::stage_input_bytes).
        const Layer& L = layers[first];
        const Bytes extra = L.stage_input_bytes;
        const Bytes checkpoint = detail::kept_bytes(layers, static_cast<std::size_t>(first), recomputes[first], groups[first]);
        const bool kept_whole = checkpoint == L.saved_bytes;
        (kept_whole ? ch.kept : ch.peak_extra) += extra;
        // What the stage keeps of the tensor it received (Layer::entry_kept_bytes).
        const bool full = recomputes[first] == Recompute::kFull && L.is_block();
        ch.kept += full ? (L.entry_checkpoint_bytes > 0 ? L.entry_checkpoint_bytes - checkpoint : 0) : L.entry_kept_bytes;
      }
      if (vs + 1 < C) {
        const bool view = layers[first + ch.count - 1].strided_output;
        ch.grad_out = ch.output;
        ch.held = c.plan.deallocate_pipeline_outputs && !view ? 0 : ch.output;
        ch.send_copy = view ? ch.output : 0;
      }
      c.chunks.push_back(std::move(ch));
      first += counts[vs];
    }
    if (c.chunks.back().tied > 0) c.chunks.front().tied = c.chunks.back().tied;
    // Every micro-batch sends the same tensors: price the sends once.
    for (int vs = 0; vs < C; ++vs) {
      detail::Chunk& ch = c.chunks[vs];
      if (vs + 1 < C) {
        ch.send_fwd = c.comm.collective(CollectiveOp::kSendRecv, ch.output, c.p2p_group(ch.rank, c.chunks[vs + 1].rank));
      }
      if (vs > 0) ch.send_bwd = c.comm.collective(CollectiveOp::kSendRecv, ch.input, c.p2p_group(ch.rank, c.chunks[vs - 1].rank));
    }
    // What the passes need of each chunk (pass.hpp).
    for (int vs = 0; vs < C; ++vs) {
      const detail::Chunk& ch = c.chunks[vs];
      detail::Unit u;
      u.name = "chunk " + std::to_string(vs);
      u.tp_forward = &ch.tp_fwd_ops;
      u.tp_backward = &ch.tp_bwd_ops;
      if (c.plan.tp > 1 && !c.plan.tp_comm_overlap) {
        u.tp_forward_cost = detail::sum_costs(ch.tp_fwd_ops, c.tp_group, c.comm);
        u.tp_backward_cost = detail::sum_costs(ch.tp_bwd_ops, c.tp_group, c.comm);
      }
      for (int l = ch.first; c.plan.tp > 1 && c.plan.tp_comm_overlap && l < ch.first + ch.count; ++l) {
        // Note [TP comm overlap]: layer by layer, what its GEMMs leave exposed.
        const Layer& L = c.priced.layers[static_cast<std::size_t>(l)];
        detail::add_flow(u.tp_forward_cost,
                         detail::tp_exposed_cost(L.tp_forward, c.tp_group, c.comm, L, Pass::kForward, c.plan, c.compute_model));
        detail::add_flow(u.tp_backward_cost, detail::tp_exposed_cost(detail::tp_backward_ops(L, c.plan, c.cluster.device), c.tp_group,
                                                                      c.comm, L, Pass::kBackward, c.plan, c.compute_model));
      }
      for (int l = ch.first; c.plan.cp > 1 && l < ch.first + ch.count; ++l) {
        const Layer& L = c.priced.layers[static_cast<std::size_t>(l)];
        Bytes fb = 0, bb = 0;
        detail::add_flow(u.cp_forward_cost, detail::cp_exposed_cost(L, Pass::kForward, c.plan, c.cp_group, c.comm, c.compute_model, fb));
        detail::add_flow(u.cp_backward_cost, detail::cp_exposed_cost(L, Pass::kBackward, c.plan, c.cp_group, c.comm, c.compute_model, bb));
        u.cp_forward_bytes += fb;
        u.cp_backward_bytes += bb;
      }
      for (int l = ch.first; c.plan.ep > 1 && l < ch.first + ch.count; ++l) {
        const Layer& L = c.priced.layers[static_cast<std::size_t>(l)];
        detail::add_comms(L.ep_forward, c.ep_group, c.comm, u.ep_forward_cost, u.ep_forward_bytes, &L.ep_route);
        detail::add_comms(L.ep_backward, c.ep_group, c.comm, u.ep_backward_cost, u.ep_backward_bytes, &L.ep_route);
      }
      for (int l = ch.first; l < ch.first + ch.count; ++l) {
        const Layer& L = c.priced.layers[static_cast<std::size_t>(l)];
        detail::add_comms(L.dp_forward, c.dp_group, c.comm, u.dp_forward_cost, u.dp_forward_bytes);
        detail::add_comms(L.dp_backward, c.dp_group, c.comm, u.dp_backward_cost, u.dp_backward_bytes);
      }
      // The chunk rebuilds one layer at a time; what it keeps is counted in
      // Chunk::kept already, so its forward drops nothing.
      if (ch.recompute > 0) {
        u.recompute = {true, "recompute", ch.recompute, 0, ch.peak_extra, 0};
        u.recompute.memory_share = ch.recompute_memory;
      }
      c.units.push_back(std::move(u));
    }
  }

  void make_ranks() {
    detail::ChunkContext& c = ctx_;
    const int inter_groups = std::max(c.dp_group.ranks_per_node < c.dp_group.ranks ? c.dp_group.groups_per_node : 1,
                                      std::min(c.cluster.gpus_per_node, c.plan.mesh.stride(Axis::kPp)));
    // Note [Expert-parallel overlap] (layer_stage.cpp): the all-to-alls' own stream.
    std::vector<Stream> streams = {Stream::kCompute, Stream::kGradComm, Stream::kSendFwd, Stream::kSendBwd};
    if (overlap_) streams.push_back(Stream::kEpComm);
    // Note [Fine-grained offload]: the copies down and up.
    if (c.plan.offload_modules != 0) streams.insert(streams.end(), {Stream::kD2H, Stream::kH2D});
    for (int s = 0; s < c.plan.pp; ++s) {
      SimRank r;
      r.rank = c.plan.mesh.with_coord(0, Axis::kPp, s);
      r.stage = s;
      r.replicas = c.plan.dp * c.plan.tp * c.plan.cp;
      for (Stream st : streams) {
        c.streams[static_cast<std::size_t>(st)] = static_cast<int>(r.streams.size());
        r.streams.push_back(to_string(st));
      }
      detail::set_link_capacity(r, c.cluster, c.comm, inter_groups);
      detail::set_interference(r, c.cluster, c.comm);
      std::int64_t params = 0, experts = 0;
      Bytes module_buffers = 0, frozen = 0;  // Layer::buffer_bytes, frozen_params
      detail::Fp8Gemms fp8;
      for (const auto& ch : c.chunks) {
        if (ch.rank != s) continue;
        params += ch.params;
        experts += ch.expert_params;
        fp8 += ch.fp8;
        for (int l = ch.first; l < ch.first + ch.count; ++l) {
          const Layer& L = c.priced.layers[static_cast<std::size_t>(l)];
          module_buffers += L.buffer_bytes;
          // Layer::frozen_params: the tied embedding's copy where the head
          // is on another stage than the embedding, as ch.tied for trained ones.
          frozen += frozen_weight_bytes(L.frozen_params - (ch.rank != 0 ? 0 : L.frozen_tied), L.frozen_quantized, L.frozen_quantized_bytes, c.w);
        }
      }
      c.rank_params.push_back(params);
      c.rank_expert_params.push_back(experts);
      c.rank_fp8.push_back(fp8);
      detail::add_resident(r, c.plan, c.cluster, params, 0, fp8, experts);
      if (frozen > 0) r.resident.push_back({MemCategory::kParameters, frozen});
      if (module_buffers > 0) r.resident.push_back({MemCategory::kBuffers, module_buffers});
      c.g.ranks.push_back(std::move(r));
    }
  }

  TaskId forward(int s, int vs, int i) {
    detail::ChunkContext& c = ctx_;
    const detail::Chunk& ch = c.chunks[vs];
    const std::size_t cell = c.cell(vs, i);
    const detail::At at{s, s, static_cast<std::size_t>(vs), i};
    TaskDeps deps;  // what the passes make its forward wait for (an FSDP gather)
    passes_.before_forward(at, deps);
    MemOps on_start{{MemCategory::kActivations, ch.kept + ch.held + ch.forward_transient}}, on_end;
    detail::add_bytes(on_end, MemCategory::kActivations, -ch.forward_transient);
    passes_.forward_memory(at, on_start, on_end);
    c.f_entry[cell] = c.add(c.name("fwd", vs, i), s, Phase::kForward, ch.fwd, std::move(on_start), std::move(on_end));
    Task& entry = c.g.tasks[c.f_entry[cell]];
    entry.memory_share = ch.fwd_memory;  // Note [Interference] in engine/executor.cpp
    entry.deps.insert(entry.deps.end(), deps.begin(), deps.end());  // the passes' (an FSDP gather); the pipeline's receive later
    c.f_exit[cell] = passes_.after_forward(at, c.f_entry[cell]);
    return c.f_exit[cell];
  }

  TaskId backward(int s, int vs, int i, bool first_of_chunk, bool last_of_chunk) {
    detail::ChunkContext& c = ctx_;
    const detail::Chunk& ch = c.chunks[vs];
    const std::size_t cell = c.cell(vs, i);
    const detail::At at{s, s, static_cast<std::size_t>(vs), i, first_of_chunk, last_of_chunk};
    TaskDeps entry;  // what runs before the kernels (recompute), in order on the stream
    passes_.before_backward(at, entry);
    // The gradient received for the chunk's output, and the larger of its
    // backward workspace and the gradient of its input, which appears as the
    // workspace goes.
    const Bytes transient = ch.grad_out + std::max(ch.input, first_of_chunk ? ch.workspace_first : ch.workspace);
    MemOps on_start{{MemCategory::kActivations, transient}};
    // Under zb-h1, what the weight pass needs stays until it runs.
    MemOps on_end{{MemCategory::kActivations, (split_ ? ch.w_hold : 0) -
                                                              (ch.kept + ch.held + (ch.recompute > 0 ? ch.peak_extra : 0) + transient)}};
    if (first_of_chunk || (accumulator_ && !split_)) gradients_appear(ch, on_start, on_end);
    passes_.backward_memory(at, on_start, on_end);
    detail::StrategyPass::Span span = passes_.run_backward(at, on_start, on_end);
    if (span.last < 0) {
      span.first = span.last = c.add(c.name(split_ ? "bwd input" : "bwd", vs, i), s, Phase::kBackward,
                                     split_ ? ch.bwd - ch.wgrad : ch.bwd, std::move(on_start), std::move(on_end));
      c.g.tasks[span.first].memory_share = ch.bwd_memory;
    }
    c.b_entry[cell] = entry.empty() ? span.first : entry.front();
    if (accumulator_ && !split_) span.last = accumulate_fp32(s, vs, i, span.last);
    return passes_.after_backward(at, span.last);
  }

  /// Note [nanotron's fp32 accumulator] (emitter.hpp): the chunk's 16-bit
  /// gradients of micro-batch i added into the fp32 buffer, and freed.
  TaskId accumulate_fp32(int s, int vs, int i, TaskId after) {
    detail::ChunkContext& c = ctx_;
    const detail::Chunk& ch = c.chunks[vs];
    const TimeNs t = detail::fp32_accumulate_time(c.compute_model, ch.params, i == 0);
    const TaskId acc = c.add(c.name("fp32 accumulate", vs, i), s, Phase::kBackward, t, {},
                             {{MemCategory::kGradients, -ch.params * ctx_.accumulated_w}});
    c.g.tasks[acc].deps.push_back(after);
    c.g.tasks[acc].memory_share = 1;  // streams the gradients (Note [Interference] in engine/executor.cpp)
    return acc;
  }

  /// Stages 0 and 1 keep full gradients from the first backward (under
  /// zb-h1 the first weight pass) to the step. The deeper layers' are there
  /// as that pass starts; the first layer's, and a recurrent layer's,
  /// appear as it ends.
  void gradients_appear(const detail::Chunk& ch, MemOps& on_start, MemOps& on_end) const {
    if (ctx_.resident_grads) return;  // Note [Megatron's gradient buffer]
    // In FSDP's reduce dtype under FSDP (Note [FSDP under a pipeline]).
    const Bytes gw = ctx_.accumulated_w;
    detail::add_bytes(on_start, MemCategory::kGradients, (ch.params - ch.late_grads) * gw);
    detail::add_bytes(on_end, MemCategory::kGradients, ch.late_grads * gw);
  }

  /// zb-h1's weight-gradient pass W of chunk vs for micro-batch i (Note
  /// [Zero bubble] in lower.cpp): the gradients appear with the chunk's first,
  /// and the last makes them final, to be reduced.
  TaskId weight(int s, int vs, int i, bool first_of_chunk, bool last_of_chunk) {
    detail::ChunkContext& c = ctx_;
    const detail::Chunk& ch = c.chunks[vs];
    const detail::At at{s, s, static_cast<std::size_t>(vs), i, first_of_chunk, last_of_chunk};
    MemOps on_start, on_end{{MemCategory::kActivations, -ch.w_hold}};
    if (first_of_chunk || accumulator_) gradients_appear(ch, on_start, on_end);
    detail::StrategyPass::Span span = passes_.run_weight(at, on_start, on_end);
    if (span.last < 0) {
      span.last = c.add(c.name("bwd weight", vs, i), s, Phase::kBackward, ch.wgrad, std::move(on_start), std::move(on_end));
      c.g.tasks[span.last].memory_share = ch.bwd_memory;
    }
    if (accumulator_) span.last = accumulate_fp32(s, vs, i, span.last);
    return passes_.after_weight(at, span.last);
  }

  void optimizer_step(int s) {
    detail::ChunkContext& c = ctx_;
    TaskDeps deps{last_};
    deps.insert(deps.end(), c.reductions.begin(), c.reductions.end());
    MemOps on_start;
    passes_.before_step(s, deps, on_start);
    const std::int64_t params = c.rank_params[s];
    const std::int64_t shard = c.plan.zero_stage >= 1 ? detail::shard_of(c.plan, params, c.rank_expert_params[s]) : params;
    // The step goes tensor by tensor, or over one flat shard under ZeRO-1
    // (Note [Optimizer updates] in cost.hpp); Note [Unfused step]'s
    // temporaries follow its largest tensor.
    int tensors = 0;
    std::int64_t largest = 0;
    for (const auto& ch : c.chunks) {
      if (ch.rank != s) continue;
      for (int l = ch.first; l < ch.first + ch.count; ++l) {
        largest = std::max(largest, c.priced.layers[l].largest_param_tensor);
        tensors += layer_updates(c.priced.layers[l].params, c.priced.layers[l].param_tensors);
      }
    }
    if (c.plan.zero_stage == 1) tensors = std::max(1, flat_updates(shard));
    if (c.fsdp) {
      // FSDP steps each layer's flat shard (as the one-stage lowering does).
      const std::int64_t n = std::max(1, c.plan.shard_group);
      tensors = 0;
      largest = 0;
      for (const auto& ch : c.chunks) {
        if (ch.rank != s) continue;
        for (int l = ch.first; l < ch.first + ch.count; ++l) {
          const std::int64_t each = (c.priced.layers[l].params + n - 1) / n;
          tensors += flat_updates(each);
          largest = std::max(largest, each);
        }
      }
      tensors = std::max(1, tensors);
    }
    MemOps frees;
    // Under FSDP the reductions free the unsharded gradients (Note [FSDP
    // under a pipeline]).
    // (nanotron's accumulator freed each backward's: accumulate_fp32.)
    if (!c.resident_grads && !c.fsdp && !accumulator_) frees.push_back({MemCategory::kGradients, -params * c.gw});
    detail::add_step_fp32_grads(c.plan, params, c.rank_expert_params[s], shard, c.gw, on_start, frees);
    detail::add_step_state_copies(c.plan, params, c.rank_expert_params[s], on_start, frees);
    detail::add_step_temporaries(c.plan, c.cluster.device, c.plan.zero_stage == 1 ? shard : largest, on_start, frees);
    const TaskId step = c.add("optimizer step", s, Phase::kOptimizer,
                              detail::step_time(c.compute_model, static_cast<double>(shard), tensors, c.plan, c.cluster.device),
                              std::move(on_start), std::move(frees));
    c.g.tasks[step].deps = std::move(deps);
    c.g.tasks[step].memory_share = 1;  // streams its states (Note [Optimizer step] in cost_compute.cpp)
    passes_.after_step(s, step);
  }

  PricedLayers own_;  ///< where lower() was given no priced layers
  detail::ChunkContext ctx_;
  detail::PassList passes_;
  // The stage being emitted (begin_stage .. end_stage).
  std::vector<bool> grads_;           ///< whether a chunk has run a backward yet
  std::vector<std::size_t> final_b_;  ///< the step of each chunk's last backward
  TaskId last_ = -1;                  ///< the stage's last step
  bool last_forward_ = false;         ///< ... was a forward
  /// Note [Expert-parallel overlap]: the plan asks for it.
  bool overlap_ = false;
  /// zb-h1: backward runs as the input-gradient pass B and the weight pass W.
  bool split_ = ctx_.plan.schedule == Schedule::kZbH1;
  /// Note [nanotron's fp32 accumulator]: each backward's gradients added into fp32 and freed.
  bool accumulator_ = ctx_.plan.fp32_grad_accumulator;
};

}  // namespace

std::unique_ptr<detail::StageEmitter> detail::chunk_emitter(const LoweringInputs& in) {
  return std::make_unique<ChunkStage>(in);
}

}  // namespace dtsim::sim
