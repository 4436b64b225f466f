// The pipeline pass: what joins a pipeline's stages (Note [Pipeline
// lowering] in chunk_stage.cpp). A chunk's forward sends its output to the
// next virtual stage and its backward the gradient of its input to the
// previous one, each on a send stream of its own so the sender goes on
// computing; a forward waits for the activation sent to it, a backward for
// the gradient. A GPT's word embedding, tied to the head on the last stage,
// has its gradient all-reduced between the first and last stage before
// the step (Megatron-LM's embedding group).
//
// Note [Send buffers]
// A stage keeps the buffers of its last two sends (dtsim validate's runtime
// waits for the oldest before a third, and for the rest at the step's end):
// the contiguous copy of a strided output, the gradient of a chunk's input.
//
// Note [Deallocated outputs]
// A chunk's output is autograd's root for its backward, so a plain training
// loop keeps it from the forward to the backward: one more activation of
// the stage's boundary for every micro-batch in flight. Megatron-LM frees
// its data as soon as it is sent and keeps only its grad_fn
// (deallocate_output_tensor in megatron/core/pipeline_parallel/schedules.py,
// which megatron/training/argument_utils.py turns on for every run), then
// runs the backward from that grad_fn directly (custom_backward there),
// since autograd's own entry checks the root's shape. Megatron refuses to
// free a view ("counter-productive to free a view of another tensor"): a
// strided output (a batch-first LSTM's) is kept. Korthikanti et al. (2022)
// count exactly this: with full recompute a stage keeps 2sbh bytes a layer
// for each micro-batch in flight, and nothing at its boundary. With
// plan.deallocate_pipeline_outputs the output is a send buffer once its
// forward ends, and goes with the send (dtsim validate's runtime does as
// Megatron does). Without it, the output stays whole, as PyTorch's
// pipelining keeps it in its forward cache, and DeepSpeed's pipeline engine
// without tensor parallelism (with it, pipe_partitioned keeps a 1/t share:
// deepspeed/runtime/pipe/engine.py, _exec_forward_pass; not modelled).
#include <string>

#include "lowering/chunk_context.hpp"
#include "lowering/lowering_common.hpp"

namespace dtsim::sim::detail {
namespace {

class Pipeline final : public StrategyPass {
 public:
  explicit Pipeline(ChunkContext& ctx) : ctx_(ctx) {
    const std::size_t cells = ctx_.chunks.size() * static_cast<std::size_t>(ctx_.plan.grad_accum);
    send_f_.assign(cells, -1);
    send_b_.assign(cells, -1);
    notice_f_.assign(cells, -1);
    notice_b_.assign(cells, -1);
  }

  void forward_memory(const At& at, MemOps&, MemOps& on_end) override {
    if (last_chunk(at)) return;
    const Chunk& ch = ctx_.chunks[at.unit];
    // Note [Deallocated outputs]: an output not held as the backward's root
    // lives on as its send's buffer.
    hold_send(on_end, ch.send_copy + ch.output - ch.held);
  }

  TaskId after_forward(const At& at, TaskId last) override {
    if (last_chunk(at)) return last;
    const Chunk& ch = ctx_.chunks[at.unit];
    const std::size_t cell = ctx_.cell(static_cast<int>(at.unit), at.micro);
    notice_f_[cell] = notice(ctx_.name("notice act", at.unit, at.micro), at.rank, Stream::kSendFwd);
    const TaskId send =
        ctx_.b.collective(ctx_.name("send act", at.unit, at.micro), at.rank, ctx_.stream(Stream::kSendFwd), Axis::kPp,
                          CollectiveOp::kSendRecv, ch.output, ch.send_fwd, {last});
    send_f_[cell] = send;
    notice_latency(notice_f_[cell], send);
    issued(at.rank, send, last);
    return last;
  }

  void backward_memory(const At& at, MemOps&, MemOps& on_end) override {
    // The gradient of the input stays until its send leaves.
    if (at.unit > 0) hold_send(on_end, ctx_.chunks[at.unit].input);
  }

  TaskId after_backward(const At& at, TaskId last) override {
    if (at.unit == 0) return last;
    const Chunk& ch = ctx_.chunks[at.unit];
    const std::size_t cell = ctx_.cell(static_cast<int>(at.unit), at.micro);
    notice_b_[cell] = notice(ctx_.name("notice grad", at.unit, at.micro), at.rank, Stream::kSendBwd);
    const TaskId send =
        ctx_.b.collective(ctx_.name("send grad", at.unit, at.micro), at.rank, ctx_.stream(Stream::kSendBwd), Axis::kPp,
                          CollectiveOp::kSendRecv, ch.input, ch.send_bwd, {last});
    send_b_[cell] = send;
    notice_latency(notice_b_[cell], send);
    issued(at.rank, send, last);
    return last;
  }

  void before_step(int s, TaskDeps& deps, MemOps& on_start) override {
    ChunkContext& c = ctx_;
    const int pp = c.plan.pp, chunks = static_cast<int>(c.chunks.size());
    for (int k = 0; k < c.plan.virtual_stages; ++k) {
      const int vs = k * pp + s;
      const Chunk& ch = c.chunks[static_cast<std::size_t>(vs)];
      if (ch.tied > 0 && (vs == 0 || vs + 1 == chunks)) {
        // The tied embedding's gradient, summed between the first and last
        // stage once the chunk's last backward is done (in fp32 from
        // nanotron's accumulator: wire_bytes).
        const Bytes bytes = c.wire_bytes(ch.tied * c.gw);
        const TaskId t = c.b.collective(c.named ? "all_reduce tied embedding" : std::string(), s, c.stream(Stream::kGradComm),
                                        Axis::kPp, CollectiveOp::kAllReduce, bytes,
                                        c.comm.collective(CollectiveOp::kAllReduce, bytes, c.p2p_group(0, pp - 1)),
                                        {c.last_backward[static_cast<std::size_t>(vs)]});
        c.g.tasks[t].collective = 1;
        c.g.tasks[t].participants = 2;
        deps.push_back(t);
      }
    }
    // The step's sends are done before it (Note [Send buffers]).
    Bytes sent = 0;
    for (Bytes b : held_sends_) sent += b;
    held_sends_.clear();
    add_bytes(on_start, MemCategory::kActivations, -sent);
  }

  void finish() override {
    // Cross-stage dependencies, now that every task exists.
    ChunkContext& c = ctx_;
    const int chunks = static_cast<int>(c.chunks.size());
    const bool gloo = c.cluster.device.gloo_collectives;
    const StreamNeighbours near = gloo ? stream_neighbours(c.g) : StreamNeighbours{};
    // Note [Gloo rendezvous]: the receiver's notice comes once the task
    // before its pass is done; one that posts at the step's start has been
    // handled before the sender computes (an ordinary task of no cost: in
    // a run of many steps it was posted as the receiver ended the step
    // before, which the simulated step, starting both stages at 0, omits).
    const auto posted = [&](TaskId notice, TaskId consumer) {
      if (notice < 0) return;
      const TaskId before = near.before[static_cast<std::size_t>(consumer)];
      if (before >= 0) {
        c.g.tasks[notice].deps.push_back(before);
      } else {
        c.g.tasks[notice].collective = -1;
        c.g.tasks[notice].cost.latency = 0;
      }
    };
    // Note [Send window]: a stage issues a send once the one two before it is done.
    for (const auto& sends : issued_) {
      for (std::size_t k = 2; k < sends.size(); ++k) {
        const TaskId older = sends[k - 2].first;
        c.g.tasks[sends[k].first].deps.push_back(older);
        const TaskId next = near.after[static_cast<std::size_t>(sends[k].second)];
        if (next >= 0) c.g.tasks[next].deps.push_back(older);
      }
    }
    for (int vs = 0; vs < chunks; ++vs) {
      for (std::int64_t i = 0; i < c.plan.grad_accum; ++i) {
        const std::size_t cell = c.cell(vs, i);
        if (vs > 0) {
          c.g.tasks[c.f_entry[cell]].deps.push_back(send_f_[c.cell(vs - 1, i)]);
          posted(notice_f_[c.cell(vs - 1, i)], c.f_entry[cell]);
        }
        c.g.tasks[c.b_entry[cell]].deps.push_back(vs + 1 < chunks ? send_b_[c.cell(vs + 1, i)] : c.f_exit[cell]);
        if (vs + 1 < chunks) posted(notice_b_[c.cell(vs + 1, i)], c.b_entry[cell]);
      }
    }
  }

  // Note [Gloo rendezvous]
  // Gloo's send over TCP moves no data until the receiver has posted its
  // receive (Pair::send queues it until the receiver's NOTIFY_RECV_READY:
  // gloo/transport/tcp/pair.cc), and dtsim validate's runtime, as
  // Megatron-LM's schedules do (send_forward_recv_backward and the like in
  // megatron/core/pipeline_parallel/schedules.py), posts a receive where its
  // schedule next needs the data: once the pass before it on its compute
  // stream is done. So where collectives are Gloo's, each send has the
  // receiver's notice before it on its stream, a message of no bytes that
  // waits for the task before the receiver's pass, crosses the link at the
  // send's latency, and then waits for the sender's core (Notes [Busy
  // sender] and [Quiet sender] in engine/executor.cpp). NCCL's sends
  // go into the receiver's staging buffers without waiting: not there.
  //
  // Note [Send window]
  // dtsim validate's runtime keeps at most two sends of a stage in flight:
  // before a third it waits for the oldest (send_tensor in
  // runtime/src/trainer.cpp; Note [Send buffers] is the memory). Where
  // collectives are Gloo's, the stage then blocks, which both delays its
  // next pass and frees its core for the send (Note [Busy sender]): each
  // send waits for the one issued two before it on its stage, and so does
  // the task after the pass that issued it. On GPUs the wait is one
  // stream's on another, and Megatron-LM has no such window: not there.

  /// Note [Gloo rendezvous]: a receiver's notice on a Gloo stage's send
  /// stream `st`, before its send (none under NCCL).
  TaskId notice(std::string name, int rank, Stream st) {
    if (!ctx_.cluster.device.gloo_collectives) return -1;
    const TaskId t = ctx_.b.collective(std::move(name), rank, ctx_.stream(st), Axis::kPp, CollectiveOp::kSendRecv, 0,
                                       CollectiveCost{}, {});
    ctx_.g.tasks[t].collective = kRecvNotice;
    return t;
  }

  /// Note [Quiet sender] (engine/executor.cpp): a notice crosses the link
  /// its send takes, a small message at that send's latency.
  void notice_latency(TaskId notice, TaskId send) {
    if (notice >= 0) ctx_.g.tasks[notice].cost.latency = ctx_.g.tasks[send].cost.latency;
  }

  /// Note [Send window]: records a Gloo stage's send, and the task it follows.
  void issued(int rank, TaskId send, TaskId producer) {
    if (!ctx_.cluster.device.gloo_collectives) return;
    if (issued_.size() <= static_cast<std::size_t>(rank)) issued_.resize(static_cast<std::size_t>(rank) + 1);
    issued_[static_cast<std::size_t>(rank)].push_back({send, producer});
  }

  /// Each task's neighbours on its rank's stream (-1: none).
  struct StreamNeighbours {
    std::vector<TaskId> before, after;
  };
  static StreamNeighbours stream_neighbours(const TaskGraph& g) {
    StreamNeighbours n{std::vector<TaskId>(g.tasks.size(), -1), std::vector<TaskId>(g.tasks.size(), -1)};
    std::vector<std::vector<TaskId>> last(g.ranks.size());  // by rank and stream
    for (std::size_t i = 0; i < g.tasks.size(); ++i) {
      const Task& t = g.tasks[i];
      auto& l = last[static_cast<std::size_t>(t.rank)];
      if (l.size() <= static_cast<std::size_t>(t.stream)) l.resize(static_cast<std::size_t>(t.stream) + 1, -1);
      TaskId& prev = l[static_cast<std::size_t>(t.stream)];
      n.before[i] = prev;
      if (prev >= 0) n.after[static_cast<std::size_t>(prev)] = static_cast<TaskId>(i);
      prev = static_cast<TaskId>(i);
    }
    return n;
  }

 private:
  bool last_chunk(const At& at) const { return at.unit + 1 == ctx_.chunks.size(); }

  /// Note [Send buffers]: `bytes` joins the stage's last two sends in `ops`,
  /// a task's on_end; the oldest leaves first.
  void hold_send(MemOps& ops, Bytes bytes) {
    if (held_sends_.size() == 2) {
      add_bytes(ops, MemCategory::kActivations, -held_sends_.front());
      held_sends_.erase(held_sends_.begin());
    }
    add_bytes(ops, MemCategory::kActivations, bytes);
    held_sends_.push_back(bytes);
  }

  ChunkContext& ctx_;
  std::vector<TaskId> send_f_, send_b_;  ///< by cell(): each chunk's sends
  std::vector<TaskId> notice_f_, notice_b_;  ///< by cell(): their receivers' notices (Gloo)
  std::vector<Bytes> held_sends_;        ///< the stage's send buffers, oldest first
  /// Note [Send window]: by stage, its sends as issued, with the task each follows.
  std::vector<std::vector<std::pair<TaskId, TaskId>>> issued_;
};

}  // namespace

std::unique_ptr<StrategyPass> pipeline_pass(ChunkContext& ctx) { return std::make_unique<Pipeline>(ctx); }

}  // namespace dtsim::sim::detail
