// One rank of a validation run: the plan executed for real with LibTorch.
//
// Note [Runtime structure]: the model is the simulator's layer list
// (sim::Model::layers), each layer built from its signature by models/torch
// with a seed of its own, so every rank builds bit-identical weights for the
// layers it holds and a distributed run starts where the single-process one
// does. Layers run one at a time, forward and backward, with a boundary
// between them (the input of each is a detached leaf): that is where
// pipeline stages send and receive, where ZeRO-3 gathers and frees a layer's
// parameters, and where a data-parallel gradient bucket whose layers are all
// done is launched, as PyTorch's reducer launches a bucket from its autograd
// hooks once every gradient in it is ready.
//
// Note [Timing]: forward, backward and optimizer are wall time minus the time
// blocked on communication inside them (WaitClock); the rest of a step is
// "wait" (exposed communication and pipeline bubbles), as the simulator's
// critical path splits it. On a GPU the host only queues kernels, so a
// phase is timed on the device's clock instead: CUDA events on the compute
// stream at its start and end, read once the step has synchronised (the
// host runs ahead as in training; nothing waits for the device inside the
// step but the loss, read once after it, as a training loop logs it).
#include <c10/core/StorageImpl.h>
#include <torch/csrc/autograd/engine.h>
#include <torch/csrc/autograd/variable.h>

#include <algorithm>
#include <array>
#include <time.h>
#include <csignal>
#include <cmath>
#include <functional>
#include <map>
#include <random>
#include <thread>

#include "dtsim/models/torch_layers.hpp"
#include "dtsim/runtime/data.hpp"
#include "dtsim/runtime/launcher.hpp"
#include "dtsim/sim/buckets.hpp"
#include "dtsim/sim/error.hpp"
#include "dtsim/sim/lowering.hpp"
#include "dtsim/sim/partition.hpp"
#include "worker.hpp"

namespace dtsim::runtime {
namespace {

using Clock = std::chrono::steady_clock;
namespace F = torch::nn::functional;
using models::AdamConfig;
using models::AdamState;
using models::adam_update;

double seconds_since(Clock::time_point t0) { return std::chrono::duration<double>(Clock::now() - t0).count(); }
// Note [A span's CPU time]
// A span of the measured timeline is wall time, and on a CPU rank it may
// be long for two reasons a reader must tell apart: the rank's thread was
// off its core (Gloo's threads and the kernel's TCP work share that core:
// Note [A rank's own cores] in platform/src/process.cpp), or it ran the
// whole time and ran slower. So while a timeline is recorded, each mark a
// span starts from also reads the thread's CPU clock
// (CLOCK_THREAD_CPUTIME_ID), and the span carries the thread's CPU time
// within it (args.cpu_us; TraceEvent::cpu_us). On the AMD VM (2026-12-04,
// docs/validation-cpu.md) mlp's layers under DDP took 1.4-1.8x their time
// in a single process pinned to the same core with the thread on the core
// throughout (CPU time = wall time), and a single process beside a TCP
// loopback stream of the gradients' size slowed alike: the collective's
// traffic empties the caches the next step's layers would find warm.
// Only the main thread marks (the waits and the layers run on it): the
// last kSpanMarks marks are kept, the newest first matched. A mark reads
// the CPU clock just before its wall clock and again just after, and a
// span takes the later reading at its start and the earlier at its end,
// so that its CPU time is of an interval within its wall time: read once,
// after, the end's reading also counted what ran on the thread as the
// read was made (an interrupt's TCP work: a traced span's CPU time came
// out 62 us over its 1.72 ms wall time, under a full ctest run).
namespace span_cpu {
constexpr int kSpanMarks = 64;
bool on = false;  ///< set while a timeline is recorded
struct Mark {
  double wall_us = -1, cpu_before_us = 0, cpu_after_us = 0;
};
thread_local std::array<Mark, kSpanMarks> marks;
thread_local int next = 0;

double thread_cpu_us() {
  timespec ts{};
  if (::clock_gettime(CLOCK_THREAD_CPUTIME_ID, &ts) != 0) return -1;
  return static_cast<double>(ts.tv_sec) * 1e6 + static_cast<double>(ts.tv_nsec) * 1e-3;
}

/// The mark taken at `wall_us`, or none.
const Mark* at(double wall_us) {
  for (int k = 1; k <= kSpanMarks; ++k) {
    const Mark& m = marks[static_cast<std::size_t>((next - k + kSpanMarks) % kSpanMarks)];
    if (m.wall_us == wall_us) return &m;
  }
  return nullptr;
}

/// The thread's CPU time in us between the marks taken at `start_us` and
/// `end_us`, within that wall time; -1 where either is gone or unread.
double between(double start_us, double end_us) {
  const Mark* a = at(start_us);
  const Mark* b = at(end_us);
  if (a == nullptr || b == nullptr || a->cpu_after_us < 0 || b->cpu_before_us < 0) return -1;
  return std::max(0.0, b->cpu_before_us - a->cpu_after_us);
}
}  // namespace span_cpu

double now_us() {
  if (!span_cpu::on) return std::chrono::duration<double, std::micro>(Clock::now().time_since_epoch()).count();
  const double before = span_cpu::thread_cpu_us();
  const double t = std::chrono::duration<double, std::micro>(Clock::now().time_since_epoch()).count();
  span_cpu::marks[static_cast<std::size_t>(span_cpu::next)] = {t, before, span_cpu::thread_cpu_us()};
  span_cpu::next = (span_cpu::next + 1) % span_cpu::kSpanMarks;
  return t;
}

// ---- tensor parallelism: Megatron's f and g ----------------------------------------

Group* g_tp = nullptr;       // this rank's tensor-parallel group
WaitClock* g_tp_clock = nullptr;
/// Draws a tensor-parallel wait in the measured trace (name, start in us);
/// set by the trainer, as its other waits are drawn.
std::function<void(const char*, double)> g_tp_trace;

void tp_wait(const c10::intrusive_ptr<c10d::Work>& work, const char* what) {
  const double t0 = now_us();
  g_tp_clock->wait(work);
  if (g_tp_trace) g_tp_trace(what, t0);
}

void tp_all_reduce(torch::Tensor& t) { tp_wait(all_reduce(*g_tp, t), "tp all_reduce"); }

// Note [f and g in place]
// Megatron-LM's f (_CopyToModelParallelRegion) returns its input and g
// (_ReduceFromModelParallelRegion) all-reduces its input in place and
// returns it (megatron/core/tensor_parallel/mappings.py): neither allocates.
// A copy in f is kept by the column-parallel GEMM after it: where f's
// input is kept anyway (BERT's post-LN block starts with its input), a
// second t h tensor a block (bert-tiny megatron-tp: 1 MiB a block above
// the prediction, which counts Megatron's). A copy in g doubles the
// row-parallel output for a moment. So f returns x (LibTorch makes the
// output a view of it) and g marks x dirty and reduces it in place.

/// f: identity forward, all-reduce of the gradient backward.
struct EnterTp : torch::autograd::Function<EnterTp> {
  static torch::Tensor forward(torch::autograd::AutogradContext*, const torch::Tensor& x) { return x; }
  static torch::autograd::variable_list backward(torch::autograd::AutogradContext*, torch::autograd::variable_list g) {
    torch::Tensor grad = g[0].contiguous();
    tp_all_reduce(grad);
    return {grad};
  }
};

/// g: all-reduce forward (in place where it can), identity backward.
struct ExitTp : torch::autograd::Function<ExitTp> {
  static torch::Tensor forward(torch::autograd::AutogradContext* ctx, const torch::Tensor& x) {
    torch::Tensor y = x;
    if (x.is_contiguous() && !x.is_leaf()) {
      ctx->mark_dirty({x});
    } else {
      y = x.clone(at::MemoryFormat::Contiguous);  // one copy, contiguous
    }
    tp_all_reduce(y);
    return y;
  }
  static torch::autograd::variable_list backward(torch::autograd::AutogradContext*, torch::autograd::variable_list g) { return {g[0]}; }
};

// ---- sequence parallelism: the sequence over the tp group (Note [Sequence parallelism] in models/torch) ----

/// All-gather of x over group `g` along `dim`, in rank order: one copy out
/// of Gloo's rank-major buffer (`what` names the wait in the trace).
torch::Tensor gather_along(Group& g, const torch::Tensor& x, std::int64_t dim, const char* what) {
  const torch::Tensor in = x.contiguous();
  torch::Tensor out = torch::empty({g.size * in.numel()}, in.options());
  const double t0 = now_us();
  all_gather(g, in.view({-1}), out, *g_tp_clock);
  if (g_tp_trace) g_tp_trace(what, t0);
  std::vector<std::int64_t> shape{g.size};
  for (auto k : in.sizes()) shape.push_back(k);
  return torch::cat(out.view(shape).unbind(0), dim);
}

/// All-gather of x's dimension 1 over the tp group, in rank order, contiguous.
torch::Tensor tp_gather_seq(const torch::Tensor& x) { return gather_along(*g_tp, x, 1, "tp all_gather"); }

/// Reduce-scatter of `parts` [n, b, s/n, ...] (models::sequence_parts) over
/// group `g`: every rank's summed, this rank's [b, s/n, ...].
torch::Tensor reduce_scatter_over(Group& g, const torch::Tensor& parts, const char* what) {
  torch::Tensor out = torch::empty({parts.numel() / parts.size(0)}, parts.options());
  const double t0 = now_us();
  reduce_scatter(g, parts.view({-1}), out, *g_tp_clock);
  if (g_tp_trace) g_tp_trace(what, t0);
  return out.view(parts.sizes().slice(1));
}

/// The same over the tp group.
torch::Tensor tp_reduce_scatter_seq(const torch::Tensor& parts) { return reduce_scatter_over(*g_tp, parts, "tp reduce_scatter"); }

// ---- context parallelism: K/V over the cp group ------------------------------------

Group* g_cp = nullptr;  // this rank's context-parallel group

/// One step of the p2p ring (Note [Ring attention] in models/torch): posts
/// the send of x to the next cp rank and the receive from the previous one
/// (backward: the other way round, on a channel of its own), and returns
/// the wait, which the trace draws as "cp send_recv".
std::function<torch::Tensor()> cp_shift(const torch::Tensor& x, bool forward) {
  const int n = g_cp->size, me = g_cp->rank, tag = forward ? 1 : 2;
  std::vector<torch::Tensor> send{x.contiguous()}, recv{torch::empty_like(send[0])};
  auto sent = g_cp->pg->send(send, forward ? (me + 1) % n : (me + n - 1) % n, tag);
  auto came = g_cp->pg->recv(recv, forward ? (me + n - 1) % n : (me + 1) % n, tag);
  return [send, recv, sent, came]() {
    const double t0 = now_us();
    g_tp_clock->wait(came);
    g_tp_clock->wait(sent);
    if (g_tp_trace) g_tp_trace("cp send_recv", t0);
    return recv[0];
  };
}

/// Note [Context parallelism] (models/torch): all-gather of a block's keys
/// and values along `dim` in cp-rank order; backward reduce-scatters their
/// gradient, so each rank gets the sum over every rank's attention of the
/// gradient of its own K/V (Megatron-Core's cp_comm_type all_gather).
struct GatherCp : torch::autograd::Function<GatherCp> {
  static torch::Tensor forward(torch::autograd::AutogradContext* ctx, const torch::Tensor& x, std::int64_t dim) {
    ctx->saved_data["dim"] = dim;
    return gather_along(*g_cp, x, dim, "cp all_gather");
  }
  static torch::autograd::variable_list backward(torch::autograd::AutogradContext* ctx, torch::autograd::variable_list g) {
    const std::int64_t dim = ctx->saved_data["dim"].toInt();
    const int n = g_cp->size;
    const torch::Tensor parts = torch::stack(g[0].chunk(n, dim)).contiguous();  // [n, ...x's shape]
    torch::Tensor out = torch::empty({parts.numel() / n}, parts.options());
    const double t0 = now_us();
    reduce_scatter(*g_cp, parts.view({-1}), out, *g_tp_clock);
    if (g_tp_trace) g_tp_trace("cp reduce_scatter", t0);
    return {out.view(parts.sizes().slice(1)), torch::Tensor()};
  }
};

// ---- expert parallelism: rows over the ep group ------------------------------------

Group* g_ep = nullptr;  // this rank's expert-parallel group

torch::Tensor ep_exchange(const torch::Tensor& x, const std::vector<std::int64_t>& send, const std::vector<std::int64_t>& recv) {
  const double t0 = now_us();
  torch::Tensor out = all_to_all(*g_ep, x, send, recv, *g_tp_clock);
  if (g_tp_trace) g_tp_trace("ep all_to_all", t0);
  return out;
}

/// Note [Expert parallelism] (models/torch): the dispatch's and the
/// combine's all-to-all of rows over the ep group, send[r] rows to rank r;
/// backward sends each row's gradient back where the row came from (the
/// reverse all-to-all), as Megatron-Core's _AllToAll does.
struct AllToAllEp : torch::autograd::Function<AllToAllEp> {
  static torch::Tensor forward(torch::autograd::AutogradContext* ctx, const torch::Tensor& x, std::vector<std::int64_t> send,
                               std::vector<std::int64_t> recv) {
    ctx->saved_data["send"] = send;
    ctx->saved_data["recv"] = recv;
    return ep_exchange(x, send, recv);
  }
  static torch::autograd::variable_list backward(torch::autograd::AutogradContext* ctx, torch::autograd::variable_list g) {
    const auto send = ctx->saved_data["send"].toIntVector(), recv = ctx->saved_data["recv"].toIntVector();
    return {ep_exchange(g[0], recv, send), torch::Tensor(), torch::Tensor()};
  }
};

// ---- data -------------------------------------------------------------------------------

/// Inputs of one micro-batch: token ids (or embeddings, or images) and labels.
struct Batch {
  torch::Tensor inputs;  ///< [b, s] int64 ids, or [b, s, d] float embeddings (images: [b, 1, C*H*W])
  torch::Tensor labels;  ///< [b, s] next tokens (LM) or target ids (encoder-decoder), or [b] classes
};

/// The samples of --data, or their synthetic stand-in (Note [Dataset layout]).
class DataSource {
 public:
  DataSource(const std::string& path, const sim::Model& model, const std::vector<sim::Layer>& layers, std::int64_t seq,
             std::uint64_t seed)
      : seq_(seq), needs_(data_needs(model.name(), layers.front().signature, layers.back().signature)) {
    // Images reach the first layer as one float vector of C x H x W a
    // sample, which it views as the image (models/torch).
    embeddings_ = needs_.kind != Dataset::Kind::kTokens;
    width_ = needs_.width;
    classes_ = needs_.classes;
    if (!path.empty()) {
      data_ = load_dataset(path);
      check_dataset_fits(data_, needs_, seq_);  // dtsim validate checked it before starting the ranks
    } else {
      SampleSpec spec;
      spec.kind = embeddings_ ? Dataset::Kind::kEmbeddings : Dataset::Kind::kTokens;
      spec.samples = 256;
      spec.seq_len = seq_;
      spec.vocab = needs_.kind == Dataset::Kind::kTokens ? needs_.vocab : 1024;
      spec.width = width_;
      spec.classes = classes_;
      spec.seed = seed;
      data_ = make_sample_dataset(spec);  // what scripts/make-sample-data writes for this spec
    }
  }

  /// Samples [first, first + b) (wrapping around the file).
  Batch batch(std::int64_t first, std::int64_t b) const {
    Batch out;
    const std::int64_t n = data_.samples, s = seq_, S = data_.seq_len;
    // The first s of each row of S ids.
    const auto rows = [&](const std::vector<std::int64_t>& ids) {
      auto x = torch::empty({b, s}, torch::kLong);
      auto* dst = x.data_ptr<std::int64_t>();
      for (std::int64_t i = 0; i < b; ++i) std::copy_n(ids.data() + ((first + i) % n) * S, s, dst + i * s);
      return x;
    };
    if (embeddings_) {
      auto x = torch::empty({b, s, width_}, torch::kFloat);
      float* dst = x.data_ptr<float>();
      for (std::int64_t i = 0; i < b; ++i) {
        const std::int64_t k = (first + i) % n;
        std::copy_n(data_.embeddings.data() + k * S * width_, s * width_, dst + i * s * width_);
      }
      out.inputs = x;
    } else {
      out.inputs = rows(data_.tokens);
    }
    if (classes_ > 0) {
      auto y = torch::empty({b}, torch::kLong);
      for (std::int64_t i = 0; i < b; ++i) y.data_ptr<std::int64_t>()[i] = data_.labels[(first + i) % n];
      out.labels = y;
    } else if (needs_.target_vocab > 0 && !data_.targets.empty()) {
      out.labels = rows(data_.targets);  // the encoder-decoder's targets (teacher forcing)
    } else if (!embeddings_) {
      // Language modelling: the next token (the last one predicts the first).
      // The synthetic encoder-decoder's targets too: its sources shifted by
      // one, wrapped into the target vocabulary by the decoder.
      out.labels = torch::roll(out.inputs, -1, 1).contiguous();
    }
    return out;
  }

 private:
  std::int64_t seq_;
  DataNeeds needs_;
  bool embeddings_ = false;
  std::int64_t width_ = 1, classes_ = 0;
  Dataset data_;
};

// ---- one layer on this rank ----------------------------------------------------------------

struct Unit {
  int index = 0;                     ///< in the model's layer list
  std::string name, kind;            ///< "h.0", "gpt2.block"
  std::unique_ptr<models::TorchLayer> layer;
  std::vector<torch::Tensor> params;  ///< all but the routed experts' under ep > 1 (Note [Expert gradients])
  std::int64_t numel = 0;
  std::int64_t offset = 0;           ///< in the rank's flat parameter space (ZeRO-1/2)
  std::vector<torch::Tensor> expert;  ///< the routed experts' parameters under ep > 1, else none
  std::int64_t expert_numel = 0, expert_offset = 0;  ///< ... and their place in the experts' flat space
  // ZeRO-3 (Note [ZeRO-3 storage]): padded full buffer, this rank's shard.
  torch::Tensor full;                ///< [padded]; its storage is empty while not gathered
  torch::Tensor shard, grad_shard;   ///< [padded / n]
  AdamState state;
  bool recompute = false;            ///< full recompute: a block whose forward keeps only its input
  /// A loss layer (sim::LayerKind kHead or kLmHead): it takes the labels,
  /// or the model's input where it reconstructs it (an autoencoder's).
  bool head = false;
  bool reconstructs = false;
  bool materialized = false;         ///< full holds the gathered parameters
  bool persistent = false;           ///< ZeRO-3 under the persistence threshold: always whole
  c10::intrusive_ptr<c10d::Work> pending_gather;
  torch::Tensor gather_in;
};

/// Pieces of local parameters covering a range of the flat parameter space.
struct Piece {
  int param = 0;
  std::int64_t begin = 0, length = 0;  ///< within the flattened parameter
};

/// A gradient collective in flight, finished at the end of backward.
struct PendingReduce {
  c10::intrusive_ptr<c10d::Work> work;
  torch::Tensor send, recv, target;  ///< target: where the result goes (shard accumulation or bucket)
  int bucket = -1;
  int space = 0;                     ///< kDense or kExpert
  Unit* unit = nullptr;
};

/// The routed experts are laid out apart from the dense parameters (Note
/// [Expert gradients]): spread over ep ranks, or whole on every tp rank
/// (etp 1 at tp > 1).
bool experts_apart(const sim::ResolvedPlan& p) { return p.ep > 1 || p.etp != p.tp; }

// Note [Expert gradients]
// Under expert parallelism (Note [Expert parallelism] in models/torch) a
// rank's routed experts are not the other data-parallel ranks': their
// gradients already hold the tokens of every rank of the ep group (the
// combine's backward brought them), and the same experts live on the
// ranks of the expert data-parallel group (Note [Expert mesh] in
// sim/src/cost/cost_comm.cpp). So the parameters form two spaces: the dense
// ones, reduced and ZeRO-sharded over the dp x cp group as without experts,
// and the routed experts', reduced and sharded over the edp group (none
// when edp = 1), as Megatron-Core's distributed optimizer keeps expert
// buffers apart. Both are divided by the dp x cp size: each rank's loss is
// the mean over its own tokens, so the sum over every rank's share divided
// by the number of ranks is the single process's gradient of the mean
// (Megatron-Core scales expert gradients by edp / dp before averaging over
// edp: the same). A bucket covers the same layers in both spaces, as the
// simulator prices a bucket's dense bytes over dp and its experts' over edp.
constexpr int kDense = 0, kExpert = 1;

/// A flat parameter space of ZeRO-1/2 (Note [Expert gradients]): its
/// parameters end to end, padded to a multiple of its group's size, each
/// rank of the group owning one shard.
struct Space {
  Group* group = nullptr;
  std::vector<torch::Tensor> params;  ///< in flat order
  std::int64_t total = 0, shard = 0;
  torch::Tensor flat, grad_shard, master;
  torch::Tensor host_grad, host_param;  ///< Note [Offloaded step]: pinned host buffers (GPU offload)
  AdamState state;
};

struct Bucket {
  std::vector<int> units;              ///< local unit indices, backward order
  std::array<std::int64_t, 2> begin{}, end{};  ///< flat range by space (ZeRO-1/2)
  std::array<torch::Tensor, 2> buffer;         ///< DDP's persistent bucket by space (PyTorch: 2x gradient memory)
  int ready = 0;
};

// Note [ZeRO-3 storage]: a ZeRO-3 unit's parameters are views of one padded
// buffer. Freeing it empties the shared storage (as PyTorch FSDP's
// _free_storage does), so the tensors autograd saved for backward, which
// alias the same storage, see the parameters again once they are gathered
// into it. The gather writes through a fresh alias of the memory, so the
// parameters' version counters do not move and autograd raises no
// in-place-modification error.
void free_storage(torch::Tensor& t) {
  auto* impl = t.storage().unsafeGetStorageImpl();
  impl->set_data_ptr_noswap(at::DataPtr(nullptr, t.device()));
  impl->set_nbytes(0);
}

torch::Tensor alloc_storage(torch::Tensor& t) {
  auto* impl = t.storage().unsafeGetStorageImpl();
  const std::size_t bytes = static_cast<std::size_t>(t.numel()) * t.element_size();
  impl->set_data_ptr_noswap(impl->allocator()->allocate(bytes));
  impl->set_nbytes(bytes);
  return torch::from_blob(impl->data_ptr().get(), {t.numel()}, t.options());
}

class Trainer {
 public:
  Trainer(const TrainerConfig& c, Comm& comm, std::vector<TraceEvent>* trace) : c_(c), comm_(comm), trace_(trace) {
    clock_.busy = c_.busy_wait;
    const auto& p = c.setup.plan;
    plan_ = &p;
    const int r = c.rank;
    tp_rank_ = p.mesh.coord(sim::Axis::kTp, r);
    cp_rank_ = p.mesh.coord(sim::Axis::kCp, r);
    stage_ = p.mesh.coord(sim::Axis::kPp, r);
    dp_rank_ = p.mesh.coord(sim::Axis::kDp, r);
    zero_ = p.zero_stage;
    make_groups();
    // Nothing to scatter over one rank: ZeRO-2 is ZeRO-1 there.
    if (zero_ == 2 && dp_.size == 1) zero_ = 1;
    build_layers();
    setup_data_parallel();
    adam_.lr = c.options.lr;
    adam_.weight_decay = p.optimizer == sim::Optimizer::kAdamW ? 0.01 : 0;
    adam_.sgd = sim::is_sgd(p.optimizer);
    // Note [SGD momentum] (sim/src/parallel/plan.cpp): the plan's momentum;
    // at 0 (Optimizer::kSgdPlain) no buffer.
    adam_.momentum = p.optimizer == sim::Optimizer::kSgd ? p.sgd_momentum : 0;
    // fp16 needs its loss scaled (Micikevicius et al. 2018); a static 1024,
    // as Megatron-LM's --loss-scale sets one (bf16 has fp32's range: none).
    if (c.device.is_cuda() && p.precision == sim::Precision::kFp16) loss_scale_ = 1024;
    adam_.grad_scale = loss_scale_;
    // A layer's own loss (DeepSeek Sparse Attention's indexer: Note [The
    // twin's sparse attention] in models/torch) is scaled as the model's is.
    for (auto& u : units_) u.layer->set_aux_loss_scale(loss_scale_ / static_cast<double>(p.grad_accum));
#if defined(DTSIM_WORKER_CUDA)
    if (c.device.is_cuda()) gpu_marks_ = std::make_unique<GpuMarks>();
#endif
  }

  RankMeasurement run() {
    RankMeasurement m;
    m.rank = c_.rank;
    m.stage = stage_;
    m.device = c_.device.str();
    const int total = c_.options.warmup + c_.options.steps;
    std::vector<double> fwd, bwd, opt, wait;
    // Note [Machine probe] (models/torch): how fast this CPU is now, every
    // rank at once as calibration's copies ran it.
    if (!c_.device.is_cuda()) {
      comm_.barrier("probe");
      m.probe_s = models::probe_seconds(0.3);
    }
    for (int step = 0; step < total; ++step) {
      const bool measured = step >= c_.options.warmup;
      if (step == c_.options.warmup) {
        comm_.barrier("measure");
        reset_cpu_peaks();
#if defined(DTSIM_WORKER_CUDA)
        if (c_.device.is_cuda()) reset_cuda_peak();
#endif
      }
      recording_ = measured && trace_ != nullptr;
      span_cpu::on = recording_;  // Note [A span's CPU time]
      tracing_memory_ = step == c_.options.warmup;
      mem_mark("step start");
      inject_fault(step);
      heartbeat(step, total, "forward");
      fwd_s_ = bwd_s_ = opt_s_ = 0;
      const auto t0 = Clock::now();
      train_step(step, total);
      sync_device();
      const double t = seconds_since(t0);
      read_device_phases();
      m.losses.push_back(report_loss(take_loss()));
      if (measured) {
        m.step_s.push_back(t);
        fwd.push_back(fwd_s_);
        bwd.push_back(bwd_s_);
        opt.push_back(opt_s_);
        wait.push_back(std::max(0.0, t - fwd_s_ - bwd_s_ - opt_s_));
      }
    }
    // Read before the probe below: its reference layer is not the plan's.
    // Note [Memory trace]: the peaks of the traced step's stretches count too.
    m.peak_bytes = std::max(mem_peak_, device_peak());
    m.memory_trace = std::move(mem_trace_);
#if defined(DTSIM_WORKER_CUDA)
    if (c_.device.is_cuda()) m.reserved_peak_bytes = std::max(reserved_peak_, cuda_reserved_peak());
#endif
    m.host_peak_bytes = cpu_peak_bytes(true);
    m.mem_limit_bytes = c_.device.is_cuda() ? c_.options.mem_limit : cpu_memory_limit();
    // The probe again: a slow spell that began during the steps shows here.
    if (!c_.device.is_cuda()) {
      comm_.barrier("probe end");
      m.probe_end_s = models::probe_seconds(0.3);
    }
    heartbeat(total, total, "done");
    m.forward_s = median(fwd);
    m.backward_s = median(bwd);
    m.optimizer_s = median(opt);
    m.wait_s = median(wait);
    if (stage_ != plan_->pp - 1 || tp_rank_ != 0 || dp_rank_ != 0 || cp_rank_ != 0) m.losses.clear();
    return m;
  }

 private:
  // ---- topology ----------------------------------------------------------------------
  void make_groups() {
    const sim::Mesh& mesh = plan_->mesh;
    const int me = c_.rank;
    const std::vector<int> tp = mesh.group(sim::Axis::kTp, me), pp = mesh.group(sim::Axis::kPp, me), cp = mesh.group(sim::Axis::kCp, me);
    // Gradients are reduced, and ZeRO / FSDP shard, over the data- and
    // context-parallel ranks together (Megatron-Core's dp x cp group): the cp
    // ranks hold the same parameters and see different tokens of the same
    // samples. dp-major, so without cp it is the dp group.
    std::vector<int> dp;
    for (const int d : mesh.group(sim::Axis::kDp, me)) {
      for (const int c : mesh.group(sim::Axis::kCp, d)) dp.push_back(c);
    }
    const std::string at_tp = std::to_string(tp_rank_), at_pp = std::to_string(stage_), at_dp = std::to_string(dp_rank_),
                      at_cp = std::to_string(cp_rank_);
    dp_ = comm_.group("dp-t" + at_tp + "-p" + at_pp, dp);
    tp_ = comm_.group("tp-p" + at_pp + "-d" + at_dp + "-c" + at_cp, tp);
    pp_ = comm_.group("pp-t" + at_tp + "-d" + at_dp + "-c" + at_cp, pp);
    cp_ = comm_.group("cp-t" + at_tp + "-p" + at_pp + "-d" + at_dp, cp);
    if (experts_apart(*plan_)) {
      // Note [Expert mesh] (sim/src/cost/cost_comm.cpp): the ep and edp
      // groups refold a stage's tp x cp x dp ranks, named by their members.
      const auto named = [](const char* what, const std::vector<int>& ranks) {
        std::string name = what;
        for (const int r : ranks) name += "-" + std::to_string(r);
        return name;
      };
      const std::vector<int> ep = mesh.expert_group(plan_->etp, plan_->ep, sim::Axis::kEp, me);
      const std::vector<int> edp = mesh.expert_group(plan_->etp, plan_->ep, sim::Axis::kDp, me);
      ep_ = comm_.group(named("ep", ep), ep);
      edp_ = comm_.group(named("edp", edp), edp);
      if (plan_->moe_dispatcher == sim::MoeDispatcher::kAllGather && plan_->ep > 1) {
        // Megatron-Core's tp_ep group, where its allgather dispatcher
        // gathers: the etp x ep ranks, in the order of a stage's index
        // (Note [Expert mesh]; as sim::expert_dispatch_group takes them).
        const std::vector<int> tp_ep = mesh.expert_group(plan_->etp * plan_->ep, 1, sim::Axis::kTp, me);
        tp_ep_ = comm_.group(named("tpep", tp_ep), tp_ep);
      }
    }
    g_tp = &tp_;
    g_cp = &cp_;
    g_ep = &ep_;
    g_tp_clock = &clock_;
    g_tp_trace = [this](const char* what, double t0) { event(what, "wait", t0, 1); };
  }

  // ---- the model ---------------------------------------------------------------------
  void build_layers() {
    const auto& p = *plan_;
    sim::WorkloadShape shape;
    shape.micro_batch = p.micro_batch;
    shape.seq_len = p.seq_len;
    shape.tp = p.tp;  // the layers the simulator prices: blocks, embeddings and the head split over tp
    shape.sequence_parallel = p.sequence_parallel;  // ... and the tokens between them (Note [Sequence parallelism] in models/torch)
    shape.cp = p.cp;  // ... and blocks attending over the context-parallel group
    shape.cp_all_gather = p.cp_comm == sim::CpComm::kAllGather;
    shape.flash_attention = p.flash_attention;
    shape.ep = p.ep;  // ... and MoE blocks holding their ep rank's experts
    shape.etp = p.etp;
    layers_ = c_.setup.model->layers(shape);
    if (p.cp > 1 && p.seq_len % (2 * p.cp) != 0) {
      throw ConfigError("plan.seq_len " + std::to_string(p.seq_len) + ": context parallelism over " + std::to_string(p.cp) +
                        " ranks needs a multiple of " + std::to_string(2 * p.cp) + " (2 cp chunks a sequence)");
    }
    // This stage's layers, as the simulator balanced them.
    int first = 0;
    for (int s = 0; s < stage_; ++s) first += p.stage_layers.at(s);
    const int count = p.pp > 1 ? p.stage_layers.at(stage_) : static_cast<int>(layers_.size());
    models::TensorParallel tp;
    tp.rank = tp_rank_;
    tp.size = p.tp;
    tp.enter = [](const torch::Tensor& x) { return EnterTp::apply(x); };
    tp.exit = [](const torch::Tensor& x) { return ExitTp::apply(x); };
    tp.max = [](torch::Tensor& x) { tp_wait(all_reduce(*g_tp, x, c10d::ReduceOp::MAX), "tp all_reduce max"); };
    if (p.sequence_parallel && p.tp > 1) {
      tp.gather = tp_gather_seq;
      tp.reduce_scatter = tp_reduce_scatter_seq;
      models::use_sequence_parallelism(tp);
    }
    models::ContextParallel cp;
    cp.rank = cp_rank_;
    cp.size = p.cp;
    cp.gather = [](const torch::Tensor& x, std::int64_t dim) { return GatherCp::apply(x, dim); };
    if (p.cp_comm == sim::CpComm::kP2p) cp.shift = cp_shift;  // the Llama blocks' ring; GPT-2's gather (validate.cpp)
    models::ExpertParallel ep;
    ep.rank = ep_.rank;
    ep.size = p.ep;
    ep.force_balance = p.moe_force_load_balance;
    ep.all_to_all = [](const torch::Tensor& x, const std::vector<std::int64_t>& send, const std::vector<std::int64_t>& recv) {
      // The counts need no gradient; the rows do.
      return x.requires_grad() ? AllToAllEp::apply(x, send, recv) : ep_exchange(x, send, recv);
    };
    if (tp_ep_.size > 1) {
      ep.tp_ep.rank = tp_ep_.rank;
      ep.tp_ep.size = tp_ep_.size;
      ep.tp_ep.gather = [this](const torch::Tensor& x) { return gather_along(tp_ep_, x, 1, "tp_ep all_gather"); };
      ep.tp_ep.reduce_scatter = [this](const torch::Tensor& parts) { return reduce_scatter_over(tp_ep_, parts, "tp_ep reduce_scatter"); };
    }
    // Note [SyncBatchNorm] (models/torch): batch norm's statistics over the
    // data-parallel group, drawn as the other in-layer waits are.
    models::SyncBatchNorm sync;
    sync.size = p.sync_batchnorm ? dp_.size : 1;  // the group all_gather gathers over
    sync.all_gather = [this](const torch::Tensor& x) {
      const torch::Tensor in = x.contiguous().view({-1});
      torch::Tensor out = torch::empty({dp_.size * in.numel()}, in.options());
      const double t0 = now_us();
      all_gather(dp_, in, out, clock_);
      event("sync bn all_gather", "wait", t0, 1);
      return out;
    };
    sync.all_reduce = [this](torch::Tensor& x) {
      const double t0 = now_us();
      clock_.wait(all_reduce(dp_, x));
      event("sync bn all_reduce", "wait", t0, 1);
    };
    const bool cast = c_.device.is_cuda() && p.precision != sim::Precision::kFp32;
    // fp8 and fp4 keep their weights in bf16 (validate refuses to run them: no FP8 or FP4 in LibTorch 1.13).
    const auto dtype = p.precision == sim::Precision::kBf16 || sim::quantized_gemms(p.precision) ? torch::kBFloat16 : torch::kHalf;
    // Note [Block recompute] (sim/src/parallel/partition.cpp): Megatron's block method reruns the first few blocks of a chunk.
    const std::vector<sim::Recompute> recomputes = sim::layer_recomputes(p, layers_);
    for (int i = first; i < first + count; ++i) {
      const sim::Layer& L = layers_[i];
      torch::manual_seed(c_.options.seed * 1000003ULL + static_cast<std::uint64_t>(i));
      Unit u;
      u.index = i;
      u.name = L.name;
      u.kind = L.signature.substr(0, L.signature.find(':'));
      u.head = L.kind == sim::LayerKind::kHead || L.kind == sim::LayerKind::kLmHead;
      u.reconstructs = L.signature.find(",mse=1") != std::string::npos;
      u.layer = models::make_torch_layer(L.signature, tp, cp, ep);
      u.layer->module().to(c_.device);
      if (cast) u.layer->module().to(dtype);
      u.layer->module().train();
      // Activation recompute (Korthikanti et al. 2022): selective recomputes
      // the attention core inside each block, full the whole block from its
      // input, as the simulator's lowering prices them.
      u.layer->set_recompute_attention(p.recompute == sim::Recompute::kSelective);
      u.layer->set_sync_batch_norm(sync);
      u.recompute = recomputes[static_cast<std::size_t>(i)] == sim::Recompute::kFull && L.is_block();
      // Note [Expert gradients]: under ep > 1 (or etp 1 at tp > 1) the routed experts form a space of their own.
      const std::vector<torch::Tensor> experts = experts_apart(p) ? u.layer->expert_parameters() : std::vector<torch::Tensor>{};
      const auto is_expert = [&](const torch::Tensor& t) {
        return std::any_of(experts.begin(), experts.end(), [&](const torch::Tensor& e) { return e.is_same(t); });
      };
      for (auto& t : u.layer->module().parameters()) (is_expert(t) ? u.expert : u.params).push_back(t);
      for (auto& t : u.layer->sequence_parallel_parameters()) sp_params_.push_back(t);  // Note [Sequence-parallel gradients]
      units_.push_back(std::move(u));
    }
    // A tied LM head borrows the token embedding (GPT-2). On another stage
    // than the embedding it keeps a copy, built from the embedding's seed,
    // whose gradient is summed with the embedding's (Megatron-LM's
    // embedding group) before the optimizer step.
    const sim::Layer& last = layers_.back();
    if (last.signature.find("tied=1") != std::string::npos && stage_ == p.pp - 1) {
      if (first == 0) {
        tied_ = embedding_weight(units_.front().layer->module());
      } else {
        torch::manual_seed(c_.options.seed * 1000003ULL);
        auto embed = models::make_torch_layer(layers_.front().signature, tp);
        tied_ = embedding_weight(embed->module()).detach().clone().to(c_.device).requires_grad_(true);
        if (cast) tied_ = tied_.detach().to(dtype).requires_grad_(true);
        units_.back().params.push_back(tied_);
        tied_copy_ = true;
      }
    }
    if (p.pp > 1 && last.signature.find("tied=1") != std::string::npos && (stage_ == 0 || stage_ == p.pp - 1)) {
      emb_ = comm_.group("emb-t" + std::to_string(tp_rank_) + "-d" + std::to_string(dp_rank_) + "-c" + std::to_string(cp_rank_),
                         {p.mesh.with_coord(c_.rank, sim::Axis::kPp, 0), p.mesh.with_coord(c_.rank, sim::Axis::kPp, p.pp - 1)});
      emb_weight_ = stage_ == 0 ? embedding_weight(units_.front().layer->module()) : tied_;
    }
    data_ = std::make_unique<DataSource>(c_.options.data, *c_.setup.model, layers_, p.seq_len, c_.options.seed);
  }

  /// The token embedding's weight a tied LM head borrows (GPT-2's wte, Llama's embed_tokens).
  static torch::Tensor embedding_weight(torch::nn::Module& embed) {
    const auto params = embed.named_parameters();
    for (const char* name : {"wte.weight", "embed_tokens.weight"}) {
      if (params.contains(name)) return params[name];
    }
    throw ConfigError("a tied LM head, but its model's first layer has no token embedding (wte or embed_tokens)");
  }

  // ---- data parallelism set-up --------------------------------------------------------
  void setup_data_parallel() {
    const auto& p = *plan_;
    n_ = dp_.size;
    spaces_[kDense].group = &dp_;
    spaces_[kExpert].group = &edp_;
    std::array<std::int64_t, 2> offset{};
    for (auto& u : units_) {
      u.numel = u.expert_numel = 0;
      for (auto& t : u.params) u.numel += t.numel();
      for (auto& t : u.expert) u.expert_numel += t.numel();
      u.offset = offset[kDense];
      u.expert_offset = offset[kExpert];
      offset[kDense] += u.numel;
      offset[kExpert] += u.expert_numel;
    }
    for (int k : {kDense, kExpert}) spaces_[k].total = offset[k];
    if (zero_ == 3 && spaces_[kExpert].total > 0) {
      // dtsim validate refuses it first (setup_run); the units hold the dense parameters only.
      throw UnsupportedError("ZeRO-3 / FSDP with expert parallelism is not run: the experts' parameters would need units over the edp group");
    }
    if (zero_ == 3) {
      // Per-unit flat parameters, padded to a multiple of n and sharded
      // evenly (PyTorch FSDP's FlatParameter).
      torch::NoGradGuard no_grad;
      for (auto& u : units_) {
        if (u.numel == 0) continue;
        const std::int64_t padded = (u.numel + n_ - 1) / n_ * n_;
        u.full = torch::zeros({padded}, u.params.front().options());
        std::int64_t at = 0;
        for (auto& t : u.params) {
          u.full.narrow(0, at, t.numel()).copy_(t.reshape({-1}));
          t.set_data(u.full.narrow(0, at, t.numel()).view(t.sizes()));
          at += t.numel();
        }
        const std::int64_t s = padded / n_;
        u.shard = u.full.narrow(0, dp_.rank * s, s).to(torch::kFloat).clone();
        u.grad_shard = torch::zeros({s}, u.shard.options());
        // DeepSpeed keeps small layers whole (sim::kZero3PersistenceThreshold);
        // FSDP gathers every unit.
        u.persistent = sim::zero3_keeps_whole(p, u.numel);
        if (u.persistent) {
          u.materialized = true;
        } else {
          free_storage(u.full);
        }
      }
    } else if (zero_ >= 1) {
      // One flat buffer for each space's parameters, padded to its group's
      // shards (Note [Expert gradients]).
      torch::NoGradGuard no_grad;
      for (int k : {kDense, kExpert}) {
        Space& sp = spaces_[k];
        if (sp.total == 0) continue;
        const int n = sp.group->size;
        sp.shard = (sp.total + n - 1) / n;
        sp.params.clear();
        for (auto& u : units_) {
          const auto& ps = part(u, k).params;
          sp.params.insert(sp.params.end(), ps.begin(), ps.end());
        }
        sp.flat = torch::zeros({sp.shard * n}, sp.params.front().options());
        std::int64_t at = 0;
        for (auto& t : sp.params) {
          sp.flat.narrow(0, at, t.numel()).copy_(t.reshape({-1}));
          t.set_data(sp.flat.narrow(0, at, t.numel()).view(t.sizes()));
          at += t.numel();
        }
        if (zero_ == 2 && p.offload_optimizer == sim::Offload::kCpu) {
          // Note [Offload] (sim/src/lowering/passes/offload.cpp): the reduced partition is the host's.
          HostScope host;
          sp.grad_shard = torch::zeros({sp.shard}, torch::TensorOptions().device(torch::kCPU).dtype(torch::kFloat));
        } else if (zero_ == 2) {
          sp.grad_shard = torch::zeros({sp.shard}, sp.flat.options().dtype(torch::kFloat));
        }
        if (p.offload_optimizer == sim::Offload::kCpu) {
          HostScope host;
          sp.master = sp.flat.narrow(0, sp.group->rank * sp.shard, sp.shard).to(torch::kCPU, torch::kFloat).clone();
        }
      }
    }
    // Buckets in reverse layer order: 1 MB first under DDP, then bucket_mb
    // (PyTorch DDP), closed by DDP's rule or, under ZeRO-2, DeepSpeed's
    // (Note [Bucket rules]), as the simulator plans them (sim/buckets.hpp).
    if (zero_ <= 2 && reduces()) {
      const std::int64_t elem = units_.front().params.empty() ? 4 : units_.front().params.front().element_size();
      const int units = static_cast<int>(units_.size());
      std::vector<Bytes> bytes;  // backward order
      for (int i = units - 1; i >= 0; --i) bytes.push_back((units_[i].numel + units_[i].expert_numel) * elem);
      const std::vector<int> assigned = sim::assign_buckets(bytes, sim::first_bucket_bytes(p), p.bucket_bytes, sim::bucket_rule(p));
      unit_bucket_.assign(units_.size(), -1);
      for (int k = 0; k < units; ++k) {
        const int i = units - 1 - k;
        if (assigned[k] < 0) continue;
        if (assigned[k] == static_cast<int>(buckets_.size())) {
          buckets_.push_back({});
          for (int sp : {kDense, kExpert}) buckets_.back().end[sp] = part(units_[i], sp).offset + part(units_[i], sp).numel;
        }
        buckets_.back().units.push_back(i);
        for (int sp : {kDense, kExpert}) buckets_.back().begin[sp] = part(units_[i], sp).offset;
        unit_bucket_[i] = assigned[k];
      }
      if (zero_ == 0) {
        for (auto& b : buckets_) {
          for (int sp : {kDense, kExpert}) {
            if (b.end[sp] > b.begin[sp] && !alone(sp)) b.buffer[sp] = torch::zeros({b.end[sp] - b.begin[sp]}, units_.front().params.front().options());
          }
        }
      }
    }
  }

  /// Unit u's parameters in space k (Note [Expert gradients]), with their
  /// element count and place in that space's flat order.
  struct Part {
    const std::vector<torch::Tensor>& params;
    std::int64_t numel, offset;
  };
  static Part part(const Unit& u, int k) {
    return k == kExpert ? Part{u.expert, u.expert_numel, u.expert_offset} : Part{u.params, u.numel, u.offset};
  }

  // ---- a training step ----------------------------------------------------------------
  struct Saved {
    std::vector<torch::Tensor> inputs;   ///< leaf inputs per unit (grad wanted), undefined for ids
    std::vector<torch::Tensor> outputs;  ///< per unit
    std::vector<torch::Tensor> rng;      ///< per unit: the random state its forward began with (full recompute)
    std::vector<std::vector<torch::Tensor>> recompute_inputs;  ///< per unit: its inputs, kept for the recompute
    torch::Tensor loss;                  ///< last stage
    /// The stage's output as it was sent: what the gradient received for
    /// it looks like once its data is freed (Note [Deallocated outputs]).
    std::vector<std::int64_t> out_sizes;
    torch::ScalarType out_type = torch::kFloat;
    bool out_freed = false;
    /// zb-h1 (Note [Zero bubble passes]): per unit, the root its input-gradient
    /// pass started from and the gradient it was given, for the weight pass.
    std::vector<torch::Tensor> w_roots, w_grads;
  };

  // Note [Zero bubble passes]
  // ZB-H1 runs the simulator's order (sim::pipeline_order, Note [Zero
  // bubble] in sim/src/lowering/lower.cpp): each backward is split into B,
  // the gradient of the stage's input, sent on at once, and W, the
  // gradients of its weights, deferred. LibTorch 1.13 has no store of each
  // GEMM's operands (the zero-bubble code's WeightGradStore), so B asks
  // autograd for each unit's input gradient only (autograd::grad with the
  // graph retained: the engine skips the weights' edges) and W runs the
  // unit's retained graph again down to its parameters (autograd::backward
  // with inputs = the parameters). The losses and gradients are those of
  // 1F1B; W re-runs the unit's input-side backward it needs to reach its
  // weights and the retained graph keeps every saved tensor, so a W costs
  // more time and memory here than in the simulator's model of it.
  void train_step(int step, int total) {
    const auto& p = *plan_;
    const int micro = static_cast<int>(p.grad_accum);
    step_ = step;
    // The schedule as the simulator orders it (sim::pipeline_order): one
    // stage runs each micro-batch's forward and backward in turn; a
    // pipeline GPipe, 1F1B, the naive split or ZB-H1 (validate refuses
    // interleaving).
    const sim::Schedule schedule = p.pp == 1 ? sim::Schedule::kNaive : p.schedule;
    const bool split = schedule == sim::Schedule::kZbH1;
    saved_.assign(micro, {});
    backwards_done_ = 0;
    for (const sim::PipeStep& st : sim::pipeline_order(schedule, p.pp, 1, stage_, micro)) {
      const std::string m = std::to_string(st.micro);
      if (st.forward) {
        heartbeat(step, total, "forward " + m);
        forward(st.micro);
      } else if (st.weight) {
        heartbeat(step, total, "backward weight " + m);
        backward_weight(st.micro, ++backwards_done_ == micro);
      } else if (split) {
        heartbeat(step, total, "backward input " + m);
        backward_input(st.micro);
      } else {
        heartbeat(step, total, "backward " + m);
        backward(st.micro, ++backwards_done_ == micro);
      }
    }
    heartbeat(step, total, "optimizer");
    finish_p2p();
    mem_mark("backward done");
    optimizer_step(step + 1);
    mem_mark("optimizer");
  }

  /// The gradient of the stage's output, from the next stage (none on the last).
  torch::Tensor recv_output_grad(const Saved& sv) {
    if (stage_ == plan_->pp - 1) return {};
    return recv_tensor(stage_ + 1, sv.out_sizes, sv.out_type, 2, "recv gradient");
  }

  /// Unit u's output with its graph: as the forward kept it, or rebuilt
  /// from its input under full recompute with the forward's random state.
  torch::Tensor unit_output(Saved& sv, std::size_t u) {
    Unit& unit = units_[u];
    if (!unit.recompute) return sv.outputs[u];
    const torch::Tensor now = models::rng_state(c_.device);
    models::set_rng_state(c_.device, sv.rng[u]);
    torch::Tensor out = unit.layer->forward(sv.recompute_inputs[u]);
    sv.recompute_inputs[u].clear();
    models::set_rng_state(c_.device, now);
    return out;
  }

  /// B of Note [Zero bubble passes]: micro-batch m's input gradients, unit
  /// by unit, the graph kept for W; the stage's input gradient sent back.
  void backward_input(int m) {
    const auto& p = *plan_;
    Saved& sv = saved_[m];
    torch::Tensor grad = recv_output_grad(sv);
    PhaseTimer ph(*this, bwd_s_);
    sv.w_roots.assign(units_.size(), torch::Tensor());
    sv.w_grads.assign(units_.size(), torch::Tensor());
    for (std::size_t u = units_.size(); u-- > 0;) {
      Unit& unit = units_[u];
      const double t0 = now_us();
      torch::Tensor root = unit_output(sv, u);
      torch::Tensor given = grad;
      if (u + 1 == units_.size() && stage_ == p.pp - 1) {
        root = loss_scale_ != 1 ? sv.loss * loss_scale_ : sv.loss;  // AdamConfig::grad_scale divides it back
        given = torch::Tensor();
      }
      grad = torch::Tensor();
      if (sv.inputs[u].defined()) {
        const auto g = torch::autograd::grad({root}, {sv.inputs[u]}, {given}, /*retain_graph=*/true,
                                             /*create_graph=*/false, /*allow_unused=*/true);
        grad = g[0];
      }
      sv.w_roots[u] = root;
      sv.w_grads[u] = given;
      sv.outputs[u] = torch::Tensor();
      sv.inputs[u] = torch::Tensor();
      if (recording_) event("bwd input " + unit.name + " m" + std::to_string(m), "backward", t0);
      mem_mark("bwd input " + unit.name + " m" + std::to_string(m));
    }
    if (stage_ > 0) send_tensor(grad, stage_ - 1, 2);
  }

  /// W of Note [Zero bubble passes]: micro-batch m's weight gradients from
  /// the graphs B kept, each unit's reduction launched as they are final.
  void backward_weight(int m, bool last_micro) {
    Saved& sv = saved_[m];
    PhaseTimer ph(*this, bwd_s_);
    for (std::size_t u = units_.size(); u-- > 0;) {
      Unit& unit = units_[u];
      const double t0 = now_us();
      std::vector<torch::Tensor> weights = unit.params;
      weights.insert(weights.end(), unit.expert.begin(), unit.expert.end());
      std::vector<torch::Tensor> trained;
      for (const auto& w : weights) {
        if (w.requires_grad()) trained.push_back(w);
      }
      if (!trained.empty() && sv.w_roots[u].defined() && sv.w_roots[u].requires_grad()) {
        std::vector<torch::Tensor> given;
        if (sv.w_grads[u].defined()) given.push_back(sv.w_grads[u]);
        torch::autograd::backward({sv.w_roots[u]}, given, /*retain_graph=*/false, /*create_graph=*/false, trained);
      }
      sv.w_roots[u] = torch::Tensor();
      sv.w_grads[u] = torch::Tensor();
      if (u + 1 == units_.size()) sv.loss = torch::Tensor();
      if (recording_) event("bwd weight " + unit.name + " m" + std::to_string(m), "backward", t0);
      mem_mark("bwd weight " + unit.name + " m" + std::to_string(m));
      grads_ready(u, last_micro);
    }
    finish_reductions();
  }

  // Note [Memory trace]
  // The caching allocator (and the counting one on CPUs) keeps its books on
  // the host as kernels are queued, so its counters at a layer boundary are
  // what that layer left allocated, without waiting for the device. In the
  // first measured step each boundary records them and restarts the peak,
  // so the trace says where the step's peak fell; the step's peak is the
  // largest of the stretches'.
  void mem_mark(const std::string& what) {
    if (!tracing_memory_) return;
    std::int64_t current = cpu_current_bytes(false), peak = cpu_peak_bytes(false);
#if defined(DTSIM_WORKER_CUDA)
    if (c_.device.is_cuda()) {
      current = cuda_current(), peak = cuda_peak();
      reserved_peak_ = std::max(reserved_peak_, cuda_reserved_peak());
    }
#endif
    mem_peak_ = std::max(mem_peak_, peak);
    mem_trace_.push_back({what, current, peak});
    reset_cpu_peaks();
#if defined(DTSIM_WORKER_CUDA)
    if (c_.device.is_cuda()) reset_cuda_peak();
#endif
  }

  /// This step's loss (the last stage's; 0 elsewhere), read after the step.
  double take_loss() {
    const double loss = loss_sum_.defined() ? loss_sum_.item<double>() : 0;
    loss_sum_ = torch::Tensor();
    return loss;
  }

  /// A phase's compute time: wall time minus the waits inside it, or on a
  /// GPU the device's time between two marks (Note [Timing]).
  struct PhaseTimer {
    Trainer& t;
    double& sink;
    Clock::time_point t0 = Clock::now();
    double w0;
    int mark0 = -1;
    explicit PhaseTimer(Trainer& tr, double& s) : t(tr), sink(s), w0(tr.clock_.seconds) {
#if defined(DTSIM_WORKER_CUDA)
      if (t.gpu_marks_) mark0 = t.gpu_marks_->mark();
#endif
    }
    ~PhaseTimer() {
#if defined(DTSIM_WORKER_CUDA)
      if (t.gpu_marks_) {
        t.gpu_phases_.push_back({mark0, t.gpu_marks_->mark(), &sink});
        return;
      }
#endif
      sink += seconds_since(t0) - (t.clock_.seconds - w0);
    }
  };

  /// Adds the step's GPU phase times to their sinks (after the step synchronised).
  void read_device_phases() {
#if defined(DTSIM_WORKER_CUDA)
    if (!gpu_marks_) return;
    for (const auto& ph : gpu_phases_) *ph.sink += gpu_marks_->seconds(ph.begin, ph.end);
    gpu_phases_.clear();
    gpu_marks_->clear();
#endif
  }

  void event(const std::string& name, const std::string& cat, double start_us, int tid = 0) {
    if (!recording_) return;
    const double end = now_us();
    trace_->push_back({name, cat, start_us, end - start_us, tid, span_cpu::between(start_us, end)});
  }

  /// Blocks on `work`, traced as a wait (`what` names it in the trace).
  void wait(const c10::intrusive_ptr<c10d::Work>& work, const std::string& what) {
    const double t0 = now_us();
    clock_.wait(work);
    event(what, "wait", t0, 1);
  }

  torch::Tensor recv_tensor(int from, std::vector<std::int64_t> shape, torch::Dtype dtype, int tag, const std::string& what) {
    torch::Tensor t = torch::empty(shape, torch::TensorOptions().dtype(dtype).device(c_.device));
    std::vector<torch::Tensor> v{t};
    wait(pp_.pg->recv(v, from, tag), what);
    return t;
  }

  void send_tensor(const torch::Tensor& t, int to, int tag) {
    // At most two micro-batches' sends in flight: older ones are received by
    // now or soon, and their buffers go (a stage would otherwise hold every
    // micro-batch's activation twice until the step's end).
    while (sends_.size() >= 2) {
      wait(sends_.front().first, "send");
      sends_.erase(sends_.begin());
    }
    std::vector<torch::Tensor> v{t.contiguous()};
    sends_.push_back({pp_.pg->send(v, to, tag), v[0]});
  }

  /// Sends are asynchronous; their buffers live until the step's end.
  void finish_p2p() {
    for (auto& [w, t] : sends_) wait(w, "send");
    sends_.clear();
  }

  void forward(int m) {
    const auto& p = *plan_;
    Saved& sv = saved_[m];
    torch::Tensor x;
    Batch batch;
    const std::int64_t first = (static_cast<std::int64_t>(step_) * p.grad_accum + m) * p.dp * p.micro_batch +
                               static_cast<std::int64_t>(dp_rank_) * p.micro_batch;
    const bool last_stage = stage_ == p.pp - 1;
    if (stage_ == 0 || last_stage) batch = data_->batch(first, p.micro_batch);
    if (p.cp > 1 && batch.inputs.defined()) {
      // Note [Context parallelism] (models/torch): this rank's 2 of the 2 cp chunks of each sequence.
      const torch::Tensor mine = models::cp_positions(p.seq_len, cp_rank_, p.cp);
      batch.inputs = batch.inputs.index_select(1, mine);
      if (batch.labels.defined() && batch.labels.dim() == 2) batch.labels = batch.labels.index_select(1, mine);
    }
    // On a GPU the micro-batch goes up first, from pinned memory without
    // waiting, as DataLoader(pin_memory=True) and .to(non_blocking=True) do:
    // a pageable copy would wait for every queued kernel, and a copy of the
    // labels just before the head would drain the queue in mid-forward.
    const torch::Tensor inputs = to_device(batch.inputs), labels = to_device(batch.labels);
    if (stage_ > 0) {
      // Gloo needs sizes up front: the first activation comes with its shape,
      // and every micro-batch has that shape after it (fixed b and s), as
      // torch.distributed.pipelining infers shapes once.
      if (act_shape_.empty()) {
        auto hdr = recv_tensor(stage_ - 1, {5}, torch::kLong, 0, "recv activation");
        for (int k = 1; k <= hdr[0].item<std::int64_t>(); ++k) act_shape_.push_back(hdr[k].item<std::int64_t>());
      }
      x = recv_tensor(stage_ - 1, act_shape_, act_dtype(), 1, "recv activation");
    }
    {
      PhaseTimer ph(*this, fwd_s_);
      for (std::size_t u = 0; u < units_.size(); ++u) {
        Unit& unit = units_[u];
        const double t0 = now_us();
        gather(u, true);
        std::vector<torch::Tensor> in;
        torch::Tensor leaf;
        if (u == 0 && stage_ == 0) {
          in.push_back(inputs);
          if (unit.kind == "bert.embed") in.push_back(torch::zeros_like(in[0]));
          if (in[0].is_floating_point() && act_dtype() != torch::kFloat) in[0] = in[0].to(act_dtype());
        } else {
          leaf = x.detach().requires_grad_(true);
          in.push_back(leaf);
        }
        const bool head = unit.head;
        if (head) {
          in.push_back(unit.reconstructs ? inputs : labels);
          if (tied_.defined()) in.push_back(tied_);
        }
        torch::Tensor out;
        if (unit.recompute) {
          // Full recompute: no graph now; backward runs the block again from
          // its inputs with the random state it had (Note [Recompute]).
          sv.rng.resize(units_.size());
          sv.rng[u] = models::rng_state(c_.device);
          sv.recompute_inputs.resize(units_.size());
          sv.recompute_inputs[u] = in;
          torch::NoGradGuard no_grad;
          out = unit.layer->forward(in);
        } else {
          out = unit.layer->forward(in);
        }
        if (u + 1 == units_.size() && last_stage && !head) {
          // A model without a loss head (BERT's pooler): a synthetic objective.
          out = out.to(torch::kFloat).pow(2).mean();
        }
        sv.inputs.push_back(leaf);
        sv.outputs.push_back(out);
        x = out;
        release(u);
        if (recording_) event("fwd " + unit.name + " m" + std::to_string(m), "forward", t0);
        mem_mark("fwd " + unit.name + " m" + std::to_string(m));
      }
    }
    if (last_stage) {
      sv.loss = x / static_cast<double>(p.grad_accum);
      loss_sum_ = loss_sum_.defined() ? loss_sum_ + sv.loss.detach() : sv.loss.detach();
    } else {
      if (!shape_sent_) {
        // Up to 4 dimensions: [b, s, h] activations, [b, c, h, w] feature maps.
        auto hdr = torch::zeros({5}, torch::TensorOptions().dtype(torch::kLong).device(c_.device));
        hdr[0] = x.dim();
        for (int k = 0; k < x.dim() && k < 4; ++k) hdr[k + 1] = x.size(k);
        send_tensor(hdr, stage_ + 1, 0);
        shape_sent_ = true;
      }
      send_tensor(x.detach(), stage_ + 1, 1);
      sv.out_sizes = x.sizes().vec();
      sv.out_type = x.scalar_type();
      if (p.deallocate_pipeline_outputs) free_output(sv);
    }
  }

  // Note [Deallocated outputs] (sim/src/lowering/passes/pipeline.cpp): as
  // Megatron's deallocate_output_tensor, the stage's output keeps its graph
  // and gives up its data once sent (the send's buffer holds it until the
  // send is done); backward_from() runs its backward. A view is kept, as
  // Megatron refuses to free one; a recomputed unit's output has no graph
  // and goes whole (its backward runs from the recompute).
  void free_output(Saved& sv) {
    torch::Tensor& out = sv.outputs.back();
    if (units_.back().recompute) {
      out = torch::Tensor();
    } else if (!out.is_view()) {
      out.set_data(torch::empty({1}, out.options()));
      sv.out_freed = true;
    }
  }

  /// The backward of a root whose data is freed, from its grad_fn, as
  /// Megatron's custom_backward does: autograd's own entry would check the
  /// root's shape against the gradient's.
  static void backward_from(const torch::Tensor& root, const torch::Tensor& grad) {
    torch::autograd::Engine::get_default_engine().execute({torch::autograd::impl::gradient_edge(root)}, {grad},
                                                          /*keep_graph=*/false, /*create_graph=*/false,
                                                          /*accumulate_grad=*/true);
  }

  void backward(int m, bool last_micro) {
    const auto& p = *plan_;
    Saved& sv = saved_[m];
    torch::Tensor grad = recv_output_grad(sv);
    {
      PhaseTimer ph(*this, bwd_s_);
      for (std::size_t u = units_.size(); u-- > 0;) {
        Unit& unit = units_[u];
        const double t0 = now_us();
        gather(u, false);
        torch::Tensor out = unit_output(sv, u);
        if (u + 1 == units_.size() && stage_ == p.pp - 1) {
          // fp16: the loss scaled up so small gradients survive; the
          // optimizer divides them back (AdamConfig::grad_scale).
          torch::autograd::backward({loss_scale_ != 1 ? sv.loss * loss_scale_ : sv.loss});
        } else if (u + 1 == units_.size() && sv.out_freed) {
          backward_from(out, grad);
          sv.out_freed = false;
        } else {
          torch::autograd::backward({out}, {grad});
        }
        grad = sv.inputs[u].defined() ? sv.inputs[u].grad() : torch::Tensor();
        sv.outputs[u] = torch::Tensor();
        sv.inputs[u] = torch::Tensor();
        if (u + 1 == units_.size()) sv.loss = torch::Tensor();
        release(u);
        if (recording_) event("bwd " + unit.name + " m" + std::to_string(m), "backward", t0);
        mem_mark("bwd " + unit.name + " m" + std::to_string(m));
        grads_ready(u, last_micro);
      }
      if (stage_ > 0) send_tensor(grad, stage_ - 1, 2);
      finish_reductions();
    }
  }

  torch::Tensor to_device(const torch::Tensor& t) const {
    if (!t.defined() || !c_.device.is_cuda()) return t;
    return t.pin_memory().to(c_.device, /*non_blocking=*/true);
  }

  torch::Dtype act_dtype() const {
    if (!c_.device.is_cuda() || plan_->precision == sim::Precision::kFp32) return torch::kFloat;
    const bool bf16 = plan_->precision == sim::Precision::kBf16 || sim::quantized_gemms(plan_->precision);
    return bf16 ? torch::kBFloat16 : torch::kHalf;
  }

  // ---- ZeRO-3 gathering ---------------------------------------------------------------
  /// Starts gathering unit u's parameters unless they are there already.
  void launch_gather(Unit& u) {
    if (u.materialized || u.numel == 0) return;
    u.materialized = true;
    auto alias = alloc_storage(u.full);
    u.gather_in = u.shard.to(u.full.scalar_type());
    if (n_ == 1) {
      alias.copy_(u.gather_in);
      return;
    }
    const std::int64_t s = u.shard.numel();
    std::vector<std::vector<torch::Tensor>> outs(1);
    for (int r = 0; r < n_; ++r) outs[0].push_back(alias.narrow(0, r * s, s));
    std::vector<torch::Tensor> ins{u.gather_in};
    u.pending_gather = dp_.pg->allgather(outs, ins);
  }

  void finish_gather(Unit& u) {
    if (!u.pending_gather) return;
    wait(u.pending_gather, "all_gather " + u.name);
    u.pending_gather.reset();
    u.gather_in = torch::Tensor();
  }

  bool borrows_front(std::size_t i) const { return tied_.defined() && !tied_copy_ && i + 1 == units_.size() && i > 0; }

  /// Unit i's parameters, gathered (waiting if needed), and the next unit's
  /// gather started (FSDP's forward and backward prefetch).
  void gather(std::size_t i, bool forward) {
    if (zero_ != 3) return;
    launch_gather(units_[i]);
    if (borrows_front(i)) launch_gather(units_.front());
    if (forward && i + 1 < units_.size()) launch_gather(units_[i + 1]);
    if (!forward && i > 0) launch_gather(units_[i - 1]);
    finish_gather(units_[i]);
    if (borrows_front(i)) finish_gather(units_.front());
  }

  void drop_gather(Unit& u) {
    if (!u.materialized || u.persistent) return;
    if (u.pending_gather) {
      clock_.wait(u.pending_gather);
      u.pending_gather.reset();
      u.gather_in = torch::Tensor();
    }
    free_storage(u.full);
    u.materialized = false;
  }

  /// Frees unit i's gathered parameters (and a borrowed embedding's).
  void release(std::size_t i) {
    if (zero_ != 3) return;
    drop_gather(units_[i]);
    if (borrows_front(i)) drop_gather(units_.front());
  }

  // ---- gradient reduction -------------------------------------------------------------
  /// Called as unit i's backward completes (Note [Runtime structure]).
  void grads_ready(std::size_t i, bool last_micro) {
    Unit& u = units_[i];
    if (u.numel + u.expert_numel == 0) return;
    if (zero_ == 3) {
      // Reduce-scatter this unit's gradient every micro-step (ZeRO-3, FSDP).
      // The embedding's unit reduces the tied weight; the head owns nothing else but ln_f.
      torch::Tensor flat = torch::zeros({u.full.numel()}, u.full.options());  // the padding stays 0
      models::flatten_grads(u.params, flat, /*free_grads=*/true);              // Note [Gradient buckets]
      launch_reduce_scatter(flat, u.grad_shard, &u);
      return;
    }
    if (!reduces()) return;
    if (zero_ <= 1 && !last_micro) return;  // no_sync: accumulate locally
    Bucket& b = buckets_[unit_bucket_[i]];
    if (++b.ready < static_cast<int>(b.units.size())) return;
    b.ready = 0;
    launch_bucket(static_cast<int>(&b - buckets_.data()));
  }

  /// Copies a bucket's gradients of space k (flat range [begin, end)) into
  /// `out` (Note [Gradient buckets] in models/torch).
  void bucket_grads(const Bucket& b, int k, torch::Tensor& out, bool free_grads) {
    for (int ui : b.units) {
      const Part pt = part(units_[ui], k);
      models::flatten_grads(pt.params, out.narrow(0, pt.offset - b.begin[k], pt.numel), free_grads);
    }
  }

  /// A bucket's dense gradients go over the dp x cp group, its experts'
  /// over the edp group (Note [Expert gradients]).
  void launch_bucket(int bi) {
    Bucket& b = buckets_[bi];
    const bool overlap = plan_->overlap;
    if (zero_ == 2 && overlap && !plan_->fsdp) {
      // DeepSpeed's ZeRO-2 first waits for the bucket before (Note [Two
      // buckets in flight] in sim/src/lowering/passes/data_parallel.cpp).
      for (auto& r : pending_) settle(r);
      pending_.clear();
    }
    for (int k : {kDense, kExpert}) {
      if (b.end[k] == b.begin[k] || alone(k)) continue;
      Group& g = *spaces_[k].group;
      PendingReduce r;
      r.bucket = bi;
      r.space = k;
      if (zero_ == 0) {
        bucket_grads(b, k, b.buffer[k], false);
        if (overlap && g.size > 1) r.work = all_reduce(g, b.buffer[k]);
        pending_.push_back(r);
        continue;
      }
      torch::Tensor flat = torch::empty({b.end[k] - b.begin[k]}, spaces_[k].flat.options());
      if (zero_ == 1) {
        bucket_grads(b, k, flat, false);
        r.send = flat;
        if (overlap && g.size > 1) r.work = all_reduce(g, flat);
        pending_.push_back(r);
        continue;
      }
      // ZeRO-2: reduce-scatter the bucket into the owners' shards; the full
      // gradients go as soon as they are copied out.
      bucket_grads(b, k, flat, true);
      launch_range_reduce_scatter(k, flat, b.begin[k], b.end[k]);
    }
    if (zero_ == 2 && !overlap && !plan_->fsdp) {
      // DeepSpeed's ZeRO-2 without overlap_comm reduces in the hook that
      // filled the bucket, the backward waiting for it (Note [ZeRO-2's
      // buffers] in sim/src/lowering/passes/data_parallel.cpp).
      for (auto& r : pending_) settle(r);
      pending_.clear();
    }
  }

  /// ZeRO-3: `flat` (n equal chunks) summed into `shard` (one chunk).
  void launch_reduce_scatter(const torch::Tensor& flat, torch::Tensor& shard, Unit* u) {
    PendingReduce r;
    r.unit = u;
    r.target = shard;
    if (n_ == 1) {
      shard.add_(flat.to(torch::kFloat));
      return;
    }
    r.send = flat;
    r.recv = torch::empty({flat.numel()}, flat.options());
    std::vector<std::int64_t> splits(n_, flat.numel() / n_);
    r.work = dp_.pg->alltoall_base(r.recv, r.send, splits, splits);
    pending_.push_back(r);
  }

  /// ZeRO-2: a flat range [begin, end) of space k summed into the owning
  /// ranks' shards of [r*shard, (r+1)*shard): an all-to-all with uneven
  /// splits (Gloo in LibTorch 1.13 has no reduce-scatter), then a local sum.
  void launch_range_reduce_scatter(int k, const torch::Tensor& flat, std::int64_t begin, std::int64_t end) {
    Space& sp = spaces_[k];
    Group& g = *sp.group;
    const int n = g.size;
    const std::int64_t shard = sp.shard;
    std::vector<std::int64_t> in_splits(n), out_splits(n);
    const std::int64_t lo = g.rank * shard, hi = lo + shard;
    const std::int64_t mine = std::max<std::int64_t>(0, std::min(end, hi) - std::max(begin, lo));
    for (int r = 0; r < n; ++r) {
      const std::int64_t a = std::max(begin, r * shard), z = std::min(end, (r + 1) * shard);
      in_splits[r] = std::max<std::int64_t>(0, z - a);
      out_splits[r] = mine;
    }
    PendingReduce pr;
    pr.space = k;
    pr.send = flat;
    if (mine > 0) pr.target = sp.grad_shard.narrow(0, std::max(begin, lo) - lo, mine);
    if (n == 1) {
      pr.recv = flat;  // the whole space is this rank's (edp 1)
    } else {
      pr.recv = torch::empty({mine * n}, flat.options());
      pr.work = g.pg->alltoall_base(pr.recv, pr.send, out_splits, in_splits);
    }
    pending_.push_back(pr);
  }

  /// Waits for this backward's gradient collectives and applies them.
  void finish_reductions() {
    for (auto& r : pending_) {
      Group& g = *spaces_[r.space].group;
      if (!r.work && g.size > 1 && r.unit == nullptr) {
        // overlap: false; launched now, after the whole backward.
        if (zero_ == 0) r.work = all_reduce(g, buckets_[r.bucket].buffer[r.space]);
        if (zero_ == 1) r.work = all_reduce(g, r.send);
      }
    }
    for (auto& r : pending_) settle(r);
    pending_.clear();
  }

  /// Waits for one gradient collective and applies it.
  void settle(PendingReduce& r) {
    if (r.work) wait(r.work, "gradient reduction");
    torch::NoGradGuard no_grad;
    if (zero_ == 0 || zero_ == 1) {
      Bucket& b = buckets_[r.bucket];
      const torch::Tensor& src = zero_ == 0 ? b.buffer[r.space] : r.send;
      for (int ui : b.units) {
        const Part pt = part(units_[ui], r.space);
        // Note [Expert gradients]: the dp x cp size divides both spaces.
        models::unflatten_grads(pt.params, src.narrow(0, pt.offset - b.begin[r.space], pt.numel), n_);
      }
    } else if (r.target.defined()) {
      // Chunk by chunk into the shard: no temporary the size of the shard.
      const std::int64_t chunk = r.target.numel();
      const int n = r.unit != nullptr ? n_ : spaces_[r.space].group->size;
      const auto parts = r.recv.view({n, chunk});
      // Offloaded, the partition is on the host: each part goes down first.
      for (int k = 0; k < n; ++k) r.target.add_(r.target.device() == parts.device() ? parts[k] : parts[k].to(r.target.device()));
    }
  }

  // ---- the optimizer step -------------------------------------------------------------
  void optimizer_step(std::int64_t t) {
    torch::NoGradGuard no_grad;
    // Megatron's embedding group: the tied copies' gradients are summed.
    if (emb_.size > 1) {
      torch::Tensor g = emb_weight_.grad().defined() ? emb_weight_.grad() : torch::zeros_like(emb_weight_);
      wait(all_reduce(emb_, g), "embedding all_reduce");
      emb_weight_.mutable_grad() = g;
    }
    sum_sequence_parallel_grads();
    const double t0 = now_us();
    PhaseTimer ph(*this, opt_s_);
    if (zero_ == 0) {
      int k = 0;
      for (auto& u : units_) {
        for (const auto* ps : {&u.params, &u.expert}) {
          for (const auto& param : *ps) {
            if (state_.size() <= static_cast<std::size_t>(k)) state_.resize(k + 1);
            if (param.grad().defined()) adam_update(param.view({-1}), param.grad().view({-1}), state_[k], t, adam_);
            torch::Tensor(param).mutable_grad().reset();  // set_to_none, as zero_grad does by default
            ++k;
          }
        }
      }
    } else if (zero_ == 3) {
      for (auto& u : units_) {
        if (u.numel == 0) continue;
        u.grad_shard.div_(n_);
        adam_update(u.shard, u.grad_shard, u.state, t, adam_);
        u.grad_shard.zero_();
      }
      event("optimizer", "optimizer", t0);
      gather_persistent();
      return;
    } else {
      // ZeRO-1/2: this rank's shard of each space's flat parameters.
      for (int k : {kDense, kExpert}) {
        if (spaces_[k].total > 0) step_shard(spaces_[k], t);
      }
      event("optimizer", "optimizer", t0);
      for (int k : {kDense, kExpert}) {
        Space& sp = spaces_[k];
        if (sp.total == 0 || sp.group->size == 1) continue;
        const double g0 = now_us();
        all_gather(*sp.group, sp.flat.narrow(0, sp.group->rank * sp.shard, sp.shard).clone(), sp.flat, clock_);
        event("all_gather params", "wait", g0, 1);
      }
      return;
    }
    event("optimizer", "optimizer", t0);
  }

  // Note [Sequence-parallel gradients]
  // Under sequence parallelism the norms (and the biases added after a
  // reduce-scatter, a latent attention's down-projections) see only this
  // rank's tokens, so each tp rank holds part of their gradient
  // (TorchLayer::sequence_parallel_parameters). Megatron-Core sums them
  // over the tensor-parallel group once a step, after the data-parallel
  // reduction, in one coalesced all-reduce (finalize_model_grads'
  // _allreduce_non_tensor_model_parallel_grads): so here, before the
  // optimizer. Where ZeRO keeps the reduced gradients in shards, the parts
  // of those parameters inside this rank's shard are summed; the tp ranks
  // of one dp rank lay their parameters out alike, so they hold the same
  // parts. The simulator prices the all-reduce (Note [Sequence-parallel
  // gradients] in sim/src/lowering/passes/).
  void sum_sequence_parallel_grads() {
    if (sp_params_.empty() || tp_.size == 1) return;
    const auto is_sp = [&](const torch::Tensor& t) {
      return std::any_of(sp_params_.begin(), sp_params_.end(), [&](const torch::Tensor& q) { return q.is_same(t); });
    };
    std::vector<torch::Tensor> parts;
    // The parts of the sequence-parallel parameters among `params`, laid
    // out in order from 0, inside [lo, lo + grad.numel()), as views of grad.
    const auto shard_parts = [&](const std::vector<torch::Tensor>& params, const torch::Tensor& grad, std::int64_t lo) {
      std::int64_t at = 0;
      const std::int64_t hi = lo + grad.numel();
      for (const auto& param : params) {
        const std::int64_t a = std::max(at, lo), z = std::min(at + param.numel(), hi);
        if (z > a && is_sp(param)) parts.push_back(grad.narrow(0, a - lo, z - a));
        at += param.numel();
      }
    };
    if (zero_ <= 1) {
      for (auto& t : sp_params_) {
        if (t.grad().defined()) parts.push_back(t.mutable_grad().view({-1}));
      }
    } else if (zero_ == 2) {
      for (int k : {kDense, kExpert}) {
        Space& sp = spaces_[k];
        if (sp.total > 0) shard_parts(sp.params, sp.grad_shard, sp.group->rank * sp.shard);
      }
    } else {
      for (auto& u : units_) {
        if (u.numel > 0) shard_parts(u.params, u.grad_shard, dp_.rank * u.grad_shard.numel());
      }
    }
    if (parts.empty()) return;
    // On the group's device (an offloaded ZeRO-2 shard lives on the host).
    torch::Tensor flat = torch::cat(parts).to(c_.device);
    wait(all_reduce(tp_, flat), "sequence-parallel grads all_reduce");
    std::int64_t at = 0;
    for (auto& v : parts) {
      v.copy_(flat.narrow(0, at, v.numel()));
      at += v.numel();
    }
  }

  /// ZeRO-1/2: steps this rank's shard of space `sp` at step t.
  void step_shard(Space& sp, std::int64_t t) {
    const auto& p = *plan_;
    const std::int64_t lo = sp.group->rank * sp.shard, shard = sp.shard;
    torch::Tensor grad;
    if (zero_ == 1) {
      grad = torch::zeros({shard}, sp.flat.options());
      std::int64_t at = 0;
      for (auto& param : sp.params) {
        const std::int64_t a = std::max(at, lo), z = std::min(at + param.numel(), lo + shard);
        if (z > a && param.grad().defined()) grad.narrow(0, a - lo, z - a).copy_(param.grad().reshape({-1}).narrow(0, a - at, z - a));
        param.mutable_grad().reset();
        at += param.numel();
      }
    } else {
      grad = sp.grad_shard.div_(n_);  // Note [Expert gradients]: the dp x cp size for both spaces
    }
    if (p.offload_optimizer == sim::Offload::kCpu && c_.device.is_cuda()) {
      // Note [Offloaded step]
      // ZeRO-Offload (Ren et al. 2021) on a GPU: the 16-bit gradient shard
      // goes into a pinned host buffer, Adam steps the fp32 master and
      // moments in host memory on the host's cores (reading the 16-bit
      // gradient as DeepSpeed's CPU-Adam does), writes the 16-bit
      // parameters into a second pinned buffer, and they go back up.
      // Pinned buffers move at the copy engines' speed, as calibration
      // times copies; calibration times this host step as "host_adam".
      // DeepSpeed copies each reduced partition down during the backward;
      // here the whole shard goes after it.
      if (!sp.host_grad.defined()) {
        const auto pinned = torch::TensorOptions().device(torch::kCPU).dtype(sp.flat.scalar_type()).pinned_memory(true);
        sp.host_grad = torch::empty({shard}, pinned);
        sp.host_param = torch::empty({shard}, pinned);
      }
      sp.host_grad.copy_(grad);
      adam_update(sp.master, sp.host_grad, sp.state, t, adam_);
      sp.host_param.copy_(sp.master);
      sp.flat.narrow(0, lo, shard).copy_(sp.host_param);
    } else if (p.offload_optimizer == sim::Offload::kCpu) {
      // ZeRO-Offload on CPU ranks: the "host" is the same memory, counted apart.
      HostScope host;
      const torch::Tensor host_grad = grad.to(torch::kCPU, torch::kFloat).clone();
      adam_update(sp.master, host_grad, sp.state, t, adam_);
      sp.flat.narrow(0, lo, shard).copy_(sp.master);
    } else {
      // 16-bit parameters step through an fp32 master copy (Note [Mixed-precision step]),
      // with the shard's gradients cast to fp32 first, as DeepSpeed does (Note
      // [fp32 gradient partition] in sim/src/lowering/lowering_common.hpp);
      // the copy goes when the step is done.
      if (grad.scalar_type() != torch::kFloat) grad = grad.to(torch::kFloat);
      adam_update(sp.flat.narrow(0, lo, shard), grad, sp.state, t, adam_);
    }
    if (zero_ == 2) sp.grad_shard.zero_();
  }

  /// ZeRO-3's persistent units take their updated shards back whole: one
  /// all-gather of all their shards, rank-major, as DeepSpeed coalesces them.
  void gather_persistent() {
    std::vector<Unit*> units;
    std::int64_t total = 0;
    for (auto& u : units_) {
      if (!u.persistent || u.numel == 0) continue;
      units.push_back(&u);
      total += u.shard.numel();
    }
    if (units.empty()) return;
    torch::Tensor in = torch::empty({total}, units.front()->full.options());
    std::int64_t at = 0;
    for (Unit* u : units) {
      in.narrow(0, at, u->shard.numel()).copy_(u->shard);
      at += u->shard.numel();
    }
    torch::Tensor out = torch::empty({total * n_}, in.options());
    const double g0 = now_us();
    all_gather(dp_, in, out, clock_);
    event("all_gather persistent params", "wait", g0, 1);
    for (int r = 0; r < n_; ++r) {
      at = 0;
      for (Unit* u : units) {
        const std::int64_t s = u->shard.numel();
        u->full.narrow(0, r * s, s).copy_(out.narrow(0, r * total + at, s));
        at += s;
      }
    }
  }

  // ---- bookkeeping --------------------------------------------------------------------
  double report_loss(double loss) {
    // The mean over data-parallel ranks (outside the timed step). dp_ holds
    // the context-parallel ranks too: each took the mean over s/cp tokens of
    // each sample, so the mean of theirs is the mean over all tokens.
    if (stage_ != plan_->pp - 1 || dp_.size == 1) return loss;
    torch::Tensor t = torch::full({1}, loss, torch::TensorOptions().dtype(torch::kDouble).device(c_.device));
    if (c_.device.is_cuda()) t = t.to(torch::kFloat);
    all_reduce(dp_, t)->wait();
    return t.item<double>() / dp_.size;
  }

  void heartbeat(int step, int total, const std::string& what) {
    write_heartbeat(c_.run_dir, c_.rank, step, total, what);
  }

  // Note [Injected faults]: --fault KIND@RANK[:STEP] (tests; default step 0)
  // makes rank RANK, at the start of step STEP, before its first beat of
  // the step:
  //   crash  die of SIGSEGV;             hang   sleep forever, beating no more;
  //   error  throw (rank-K.error);       oom    allocate 1 TiB;
  //   stop   sleep 1 s, beat, then stop itself with SIGSTOP, as a user's
  //          `kill -STOP` would. The pause makes it beat *after* the other
  //          ranks' last beat before they block waiting for it, so they fall
  //          silent first: the case Note [Which rank hung] (launcher.cpp)
  //          must still attribute to this rank.
  void inject_fault(int step) {
    const std::string& f = c_.options.fault;
    if (f.empty()) return;
    const auto at = f.find('@'), colon = f.find(':', at);
    const std::string kind = f.substr(0, at);
    const int rank = std::stoi(f.substr(at + 1, colon == std::string::npos ? std::string::npos : colon - at - 1));
    const int when = colon == std::string::npos ? 0 : std::stoi(f.substr(colon + 1));
    if (rank != c_.rank || step != when) return;
    if (kind == "crash") std::raise(SIGSEGV);
    if (kind == "hang") {
      for (;;) std::this_thread::sleep_for(std::chrono::seconds(1));
    }
    if (kind == "stop") {
      std::this_thread::sleep_for(std::chrono::seconds(1));
      heartbeat(step, c_.options.warmup + c_.options.steps, "forward");
      std::raise(SIGSTOP);
    }
    if (kind == "error") throw std::runtime_error("injected error at step " + std::to_string(step));
    if (kind == "oom") {
      // Far more than any tiny model uses: refused by the allocator's limit
      // (on CPU the counting allocator's; on CUDA the device's).
      auto big = torch::empty({std::int64_t{1} << 40}, torch::TensorOptions().dtype(torch::kByte).device(c_.device));
    }
  }

  void sync_device() {
#if defined(DTSIM_WORKER_CUDA)
    if (c_.device.is_cuda()) cuda_synchronize();
#endif
  }

  std::int64_t device_peak() const {
#if defined(DTSIM_WORKER_CUDA)
    if (c_.device.is_cuda()) return cuda_peak();
#endif
    return cpu_peak_bytes(false);
  }

  const TrainerConfig& c_;
  Comm& comm_;
  std::vector<TraceEvent>* trace_;
  const sim::ResolvedPlan* plan_ = nullptr;
  int tp_rank_ = 0, stage_ = 0, dp_rank_ = 0, cp_rank_ = 0, zero_ = 0, n_ = 1;
  Group dp_, tp_, pp_, cp_, emb_;  ///< dp_: the data- and context-parallel ranks (make_groups)
  Group ep_, edp_;                 ///< expert parallel and expert data parallel (size 1 unless experts_apart)
  Group tp_ep_;                    ///< the allgather dispatcher's etp x ep ranks (size 1 unless it gathers at ep > 1)
  /// Some space's gradients are summed over other ranks: the dense ones
  /// over dp x cp, or the experts' over an edp group that tp ranks make up
  /// (etp 1 at tp > 1: Note [Expert gradients]) where dp is 1.
  bool reduces() const { return n_ > 1 || edp_.size > 1; }
  /// Space k's gradients are this rank's alone, as they are (divided by a
  /// dp x cp size of 1): no bucket, no copy.
  bool alone(int k) const { return n_ == 1 && spaces_[k].group->size == 1; }
  std::vector<sim::Layer> layers_;
  std::vector<Unit> units_;
  std::vector<torch::Tensor> sp_params_;  ///< Note [Sequence-parallel gradients]
  torch::Tensor tied_;          ///< the LM head's borrowed embedding (undefined: untied)
  bool tied_copy_ = false;      ///< tied_ is this stage's copy (pipeline)
  torch::Tensor emb_weight_;    ///< the tied weight this rank sums over emb_ (pipeline)
  std::unique_ptr<DataSource> data_;
  std::array<Space, 2> spaces_;  ///< ZeRO-1/2's flat spaces: kDense, kExpert (Note [Expert gradients])
  std::vector<std::int64_t> act_shape_;  ///< the activation's shape from the previous stage (sent once)
  bool shape_sent_ = false;
  std::vector<AdamState> state_;
  AdamConfig adam_;
  std::vector<Bucket> buckets_;
  std::vector<int> unit_bucket_;
  std::vector<PendingReduce> pending_;
  std::vector<std::pair<c10::intrusive_ptr<c10d::Work>, torch::Tensor>> sends_;
  std::vector<Saved> saved_;
  int backwards_done_ = 0, step_ = 0;
  WaitClock clock_;
  double fwd_s_ = 0, bwd_s_ = 0, opt_s_ = 0;
  torch::Tensor loss_sum_;   ///< this step's loss, on the device until the step ends
  double loss_scale_ = 1;    ///< static fp16 loss scale (1 otherwise)
#if defined(DTSIM_WORKER_CUDA)
  std::unique_ptr<GpuMarks> gpu_marks_;  ///< Note [Timing]: on a GPU, phases on its clock
  struct GpuPhase {
    int begin, end;
    double* sink;
  };
  std::vector<GpuPhase> gpu_phases_;
#endif
  bool recording_ = false;
  bool tracing_memory_ = false;            ///< Note [Memory trace]: this step is traced
  std::vector<MemoryMark> mem_trace_;
  std::int64_t mem_peak_ = 0;              ///< the largest peak of the traced stretches
  std::int64_t reserved_peak_ = 0;         ///< the same of the CUDA allocator's reserve
};

}  // namespace

RankMeasurement train(const TrainerConfig& config, Comm& comm, std::vector<TraceEvent>* trace) {
  Trainer t(config, comm, trace);
  return t.run();
}

}  // namespace dtsim::runtime
