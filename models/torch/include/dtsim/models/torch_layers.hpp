#pragma once
// LibTorch twins of the analytic layers. Each is built from a layer's
// signature (sim::Layer::signature, e.g. "gpt2.block:h=768,a=12,f=3072,drop=1"),
// so the module that calibration times is, by construction, the layer the
// simulator prices; tests check their parameter counts agree.

#include <torch/torch.h>

#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <vector>

namespace dtsim::models {

struct SyncBatchNorm;

/// A LibTorch module standing for one analytic layer.
class TorchLayer {
 public:
  virtual ~TorchLayer() = default;
  /// The module; its parameters are exactly the layer's own (a tied LM head
  /// uses the token embedding without owning it).
  virtual torch::nn::Module& module() = 0;
  /// Inputs for one micro-batch of b sequences of s tokens. Floating inputs
  /// take `options` (device, dtype) and require grad, so backward computes
  /// the input gradient as in training; token ids are int64 on the same
  /// device. A weight the layer borrows (a tied LM head's token embedding)
  /// is an input too: it gets a gradient but is not the layer's parameter.
  virtual std::vector<torch::Tensor> make_inputs(std::int64_t b, std::int64_t s, const torch::TensorOptions& options) = 0;
  /// Forward; returns a scalar loss for heads, else the output (backward it
  /// with a gradient of its shape).
  virtual torch::Tensor forward(const std::vector<torch::Tensor>& inputs) = 0;
  /// Own trainable parameters.
  std::int64_t parameter_count();
  /// Selective activation recompute (Korthikanti et al. 2022, section 5):
  /// the attention core (scores, softmax, dropout, context) keeps nothing
  /// for backward and runs again there from the saved q, k and v, with the
  /// forward's random state (Note [Recompute]). Layers without an attention
  /// core ignore it.
  virtual void set_recompute_attention(bool /*on*/) {}
  /// The factor a layer's own loss (DeepSeek Sparse Attention's indexer
  /// loss) is scaled by in backward, the model loss's: the fp16 loss scale
  /// over the micro-batches a step accumulates (Megatron-Core's aux-loss
  /// scalers; Note [The twin's sparse attention]). Others ignore it.
  virtual void set_aux_loss_scale(double /*scale*/) {}
  /// The routed experts' parameters of a MoE block, a subset of
  /// module().parameters() (empty for other layers): under expert
  /// parallelism their gradients are reduced over the expert data-parallel
  /// group instead of the data-parallel one (Note [Expert parallelism]).
  virtual std::vector<torch::Tensor> expert_parameters() { return {}; }
  /// Makes the layer's batch norms SyncBatchNorms over `sync`'s group
  /// (Note [SyncBatchNorm] below); layers without batch norm ignore it.
  virtual void set_sync_batch_norm(const SyncBatchNorm& /*sync*/) {}
  /// Under sequence parallelism (Note [Sequence parallelism]), the
  /// parameters used on this rank's tokens only (the norms, the biases
  /// added after a reduce-scatter, a latent attention's down-projections):
  /// each rank's gradient is a part, summed over the tensor-parallel group
  /// once a step. Empty otherwise.
  virtual std::vector<torch::Tensor> sequence_parallel_parameters() { return {}; }
};

/// Note [SyncBatchNorm]
/// torch.nn.SyncBatchNorm's autograd function (torch/nn/modules/_functions.py),
/// which LibTorch's C++ frontend lacks, with the runtime's collectives:
/// forward computes this rank's per-channel mean and inverse standard
/// deviation, `all_gather`s them with its element count (2C + 1 fp32 a rank,
/// returned [size (2C + 1)] in rank order) and normalises with the statistics
/// of the whole data-parallel batch (batch_norm_gather_stats_with_counts,
/// which also updates the running statistics with the unbiased variance);
/// backward reduces sum(dy) and sum(dy (x - mean)) per channel, `all_reduce`s
/// them (2C fp32, summed in place) and takes the input's gradient with the
/// global sums (batch_norm_backward_elemt), the weight's and bias's with the
/// local ones, which data parallelism then averages. The simulator prices
/// the two collectives (Layer::dp_forward, dp_backward).
struct SyncBatchNorm {
  int size = 1;
  std::function<torch::Tensor(const torch::Tensor&)> all_gather;
  std::function<void(torch::Tensor&)> all_reduce;
};

/// Note [Recompute]
/// A recomputed forward must draw the dropout masks the first one drew, or
/// backward differentiates another function: Megatron-LM's
/// CheckpointFunction and torch.utils.checkpoint save the random generators'
/// states before the forward and restore them for the recompute. These two
/// read and set the default generator of a device (CUDA's Philox seed and
/// offset, or the CPU's Mersenne twister), under its lock.
torch::Tensor rng_state(const torch::Device& device);
void set_rng_state(const torch::Device& device, const torch::Tensor& state);

/// Builds the module for a signature; throws ConfigError naming the signature
/// and the known kinds if it is unknown or malformed.
std::unique_ptr<TorchLayer> make_torch_layer(const std::string& signature);

/// Megatron-LM tensor parallelism (Shoeybi et al. 2019, section 3): the
/// runtime supplies the two conjugate operators, `enter` (f: identity
/// forward, all-reduce of the gradient backward) before a column-parallel
/// linear layer and `exit` (g: all-reduce forward, identity backward) after a
/// row-parallel one, and `max`, an in-place all-reduce of the maximum outside
/// autograd (the vocab-parallel cross-entropy's shift).
///
/// Note [Sequence parallelism]
/// Megatron's sequence parallelism (Korthikanti et al. 2022, section 4.2.2;
/// megatron/core/tensor_parallel/mappings.py): between the tensor-parallel
/// regions each rank holds 1/size of the sequence, [b, s/size, h] (dimension
/// 1; Megatron's [s, b, h] splits its dimension 0, the same tokens), and
/// runs the norms, dropouts and residuals on those tokens only. Then `enter`
/// is gather_from_sequence_parallel_region (all-gather of dimension 1
/// forward, reduce-scatter of the gradient backward) and `exit`
/// reduce_scatter_to_sequence_parallel_region (the other way round), and
/// three more are given: `copy` and `sum`, f and g proper (what enter and
/// exit are without it: the vocab-parallel cross-entropy's sums, a q/k
/// norm's weight shared by the heads), and `split`,
/// scatter_to_sequence_parallel_region (this rank's tokens forward, an
/// all-gather of the gradient backward), which GPT-2's embedding takes after
/// its positions are added, and `gather` and `reduce_scatter`, the
/// collectives alone, with which a column-parallel linear keeps only this
/// rank's tokens for its backward (LanguageModelEmbedding reduce-scatters its
/// lookup only where there are no position embeddings, Llama's). The
/// parameters used on a rank's tokens get part of their gradient on each
/// rank (TorchLayer::sequence_parallel_parameters), which the runtime sums
/// over the group once a step, as finalize_model_grads does
/// (_allreduce_non_tensor_model_parallel_grads).
struct TensorParallel {
  int rank = 0;
  int size = 1;
  bool sequence_parallel = false;
  std::function<torch::Tensor(const torch::Tensor&)> enter, exit;
  std::function<void(torch::Tensor&)> max;
  /// Under sequence parallelism only (null otherwise: enter and exit are they).
  std::function<torch::Tensor(const torch::Tensor&)> copy, sum, split;
  /// Under sequence parallelism: the collectives themselves, outside
  /// autograd, for the column-parallel linears that keep only this rank's
  /// tokens (Note [Sequence-parallel linears] in src/torch_layers.cpp).
  /// `gather`: every rank's [b, s/size, ...] into a contiguous [b, s, ...];
  /// `reduce_scatter`: every rank's parts [size, b, s/size, ...]
  /// (sequence_parts) summed, this rank's [b, s/size, ...].
  std::function<torch::Tensor(const torch::Tensor&)> gather, reduce_scatter;
};

/// Turns `tp` (its enter and exit f and g, its gather and reduce_scatter
/// given) into sequence parallelism's (Note [Sequence parallelism]): copy
/// and sum take f and g, enter, exit and split become Megatron's three
/// sequence mappings built on the two collectives.
void use_sequence_parallelism(TensorParallel& tp);

/// x [b, s, ...] as its `n` parts along dimension 1, rank-major and
/// contiguous, [n, b, s/n, ...]: what a reduce-scatter sends (Megatron's
/// [s, b, h] has them in place; the twins' [b, s, h] copies once).
torch::Tensor sequence_parts(const torch::Tensor& x, int n);

/// As make_torch_layer, then split for tensor parallelism when tp.size > 1,
/// cut from the full layer the same seed would build, so the tp ranks
/// together compute exactly what the unsplit layer does:
///  - transformer blocks (gpt2.block, bert.layer, llama.block) keep this
///    rank's heads and MLP columns (a Llama block its A/tp query heads and
///    KV/tp key-value heads: tp must divide KV);
///  - token embeddings (gpt2.embed, bert.embed, llama.embed) keep this rank's V/tp rows,
///    look up only the ids inside them and sum the partial rows with g
///    (Megatron's VocabParallelEmbedding);
///  - the GPT-2 and Llama heads multiply by their V/tp rows and takes the vocab-parallel
///    cross-entropy (Megatron's parallel softmax: the max, the sum of
///    exponentials and the target logit are summed over the ranks);
///  - other layers (poolers, classifiers, LSTMs) are replicated.
/// A signature's `tp=`, where it has one, must equal tp.size. make_torch_layer(signature) on a
/// signature with tp=k builds rank 0's share with local operators: one
/// rank's computation without its collectives, which calibration times and
/// the simulator prices apart (sim::Layer::tp_forward).
std::unique_ptr<TorchLayer> make_torch_layer(const std::string& signature, const TensorParallel& tp);

/// Note [Context parallelism]
/// Megatron-Core's context parallelism (--context-parallel-size; Liu et al.
/// 2023's ring attention, balanced for the causal mask): each sequence of s
/// tokens is cut into 2 cp chunks and rank r of the cp group holds chunks r
/// and 2cp-1-r, so every rank has as much of the causal triangle as the
/// others. A block's input is its rank's [b, s/cp, h]; rotary positions and
/// the causal mask use the tokens' global positions, and attention needs the
/// keys and values of the whole sequence. The runtime supplies either
/// `gather`, an all-gather over the cp group along dimension `dim` in
/// cp-rank order whose backward reduce-scatters the gradient (cp_comm
/// all_gather), or `shift`, one step of the p2p ring (cp_comm p2p, Note [Ring
/// attention] in src/torch_layers.cpp): it starts sending `x` to cp rank
/// rank + 1 and receiving rank - 1's tensor of x's shape (`forward`; the
/// other way round in backward, both mod size), and the function it
/// returns waits and gives what came.
/// A Llama block with `shift` runs the ring; GPT-2's blocks gather.
struct ContextParallel {
  int rank = 0;
  int size = 1;
  std::function<torch::Tensor(const torch::Tensor&, std::int64_t dim)> gather;
  std::function<std::function<torch::Tensor()>(const torch::Tensor& x, bool forward)> shift;
};

/// Llama 4's attention temperature of each position p, by which its NoPE
/// layers scale their queries (Llama4TextAttention's
/// attn_temperature_tuning, after Nakanishi 2025, arXiv 2501.19399; Note
/// [Llama 4] in models/src/llama.cpp): log(floor((p + 1) / floor_scale) +
/// 1) attn_scale + 1 in fp32, with Llama4TextConfig's floor_scale 8192 and
/// attn_scale 0.1 (they change values, not work).
torch::Tensor attention_temperature(const torch::Tensor& positions);

/// The global positions of context-parallel rank `rank`'s tokens of a
/// sequence of `seq` (Note [Context parallelism]): chunks rank and
/// 2 size - 1 - rank of 2 size equal chunks, in that order; int64 [seq / size].
torch::Tensor cp_positions(std::int64_t seq, int rank, int size);

/// As make_torch_layer(signature, tp), for context parallelism too: a
/// signature's `cp=`, where it has one, must equal cp.size, and its block
/// attends with the whole sequence's keys and values through cp.gather or cp.shift.
/// make_torch_layer(signature) on a signature with cp=k builds rank 0's
/// block with a local exchange: the ring's steps against its own keys and
/// values at the other ranks' positions, or with cpag=1 a local gather (its
/// own keys and values k times over): one rank's computation without the
/// collective.
std::unique_ptr<TorchLayer> make_torch_layer(const std::string& signature, const TensorParallel& tp, const ContextParallel& cp);

/// Note [Experts under tensor parallelism]
/// Megatron-Core's MoE layer under tensor parallelism, with each expert
/// split over the tp ranks (--expert-tensor-parallel-size, whose default is
/// tp) and no expert parallelism: sequence parallelism is on (training
/// without it is refused: MoELayer.forward in megatron/core/transformer/moe/
/// moe_layer.py), so each rank routes its own 1/tp of the tokens with the
/// replicated router, then its allgather token dispatcher
/// (MoEAllGatherTokenDispatcher in token_dispatcher.py) gathers the tokens
/// and their probabilities over tp (gather_from_sequence_parallel_region,
/// whose backward reduce-scatters), every rank runs every expert on every
/// token with its columns of gate and up and its rows of down, weights and
/// sums them as without tp, and reduce-scatters the parts back to its
/// tokens (reduce_scatter_to_sequence_parallel_region; in fp32 in
/// Megatron-Core, in the run's dtype here). Shared experts are
/// a dense MLP with its own gather and reduce-scatter (SharedExpertMLP).
/// The twin gathers the router's probabilities over all E experts and takes
/// the top-k of the gathered rows (Megatron-Core takes them first and
/// gathers the E-wide sparse probabilities and the routing map: the same
/// bytes, the same choices), so every token is routed as in one process.
/// The router's and a shared-expert gate's gradients come from a rank's
/// own tokens: sequence-parallel parameters (Megatron-Core's TopKRouter
/// marks its weight so), summed over tp once a step. With expert
/// parallelism too (ep > 1, its alltoall dispatcher,
/// MoEAlltoAllTokenDispatcher), each rank routes and permutes its own
/// tokens, the rows go to the experts' ep ranks by all-to-all (Note [Expert
/// parallelism]), and the rows each tp rank of the experts' group received
/// are gathered over tp (dispatch_postprocess: counts first, then rows,
/// each rank's padded to the most any received, as the twin's equal-part
/// gather needs), run through every local expert's part, reduce-scattered
/// back (combine_preprocess) and returned by all-to-all. With the experts
/// whole on each rank (--expert-tensor-parallel-size 1, as Megatron-Core's
/// MoE recipes set it) nothing is gathered: each rank's experts see its own
/// tokens, or the rows its ep group sends, and the expert data-parallel
/// group (tp x dp / ep ranks, Note [Expert mesh]: the runtime's expert
/// space, Note [Expert gradients] in runtime/src/trainer.cpp) sums their
/// gradients. Which dispatcher runs is the plan's (plan.moe_dispatcher, a
/// signature's ag=1 for allgather): the alltoall dispatcher at ep 1 with
/// experts split routes each rank's own tokens and gathers the rows over tp
/// as above (its all-to-all over one rank moves nothing); the allgather
/// dispatcher at ep > 1 gathers every token, its probabilities too, over
/// the etp x ep ranks (Megatron-Core's tp_ep group: ExpertParallel::tp_ep),
/// each rank's experts take the rows routed to them, and the parts of every
/// gathered token are reduce-scattered back (token_combine). Megatron-Core
/// gathers the sparse probabilities and a routing map; the twin gathers
/// the router's probabilities and takes the top-k after, the same choices
/// with one collective fewer. Priced, not run: experts' biases (gpt-oss).
/// Note [Expert parallelism]
/// Megatron-Core's expert parallelism (--expert-model-parallel-size) with its
/// alltoall token dispatcher (megatron/core/transformer/moe/token_dispatcher.py):
/// a moe.block's E routed experts are spread over the ep ranks in contiguous
/// blocks, expert e on ep rank e / (E / ep). Each rank routes its own tokens
/// with the replicated router, sorts its (token, slot) pairs by expert
/// (moe_dispatch), sends each rank the counts for its experts and then the
/// rows (the dispatch), runs its local experts on the rows it received (put
/// in expert order, Note [Dispatch as Megatron-Core's] in
/// src/torch_layers.cpp), and sends the outputs back the way they
/// came (the combine), where each token's k outputs are weighted by its
/// router probabilities and summed as without expert parallelism. The
/// runtime supplies `all_to_all` over the ep group: x's rows in ep-rank
/// order, send[r] of them to rank r, returning the recv[r] rows each rank r
/// sent here, in rank order; its backward is the reverse all-to-all of the
/// gradient. The experts' gradients then hold every ep rank's tokens; the
/// runtime sums them over the expert data-parallel group (Note [Expert
/// mesh] in sim/src/cost/cost_comm.cpp).
struct ExpertParallel {
  int rank = 0;
  int size = 1;
  /// Route round-robin instead of by the router's top-k, at any ep (1
  /// included): plan.moe_force_load_balance (Note [Forced balance] in
  /// src/torch_layers.cpp).
  bool force_balance = false;
  std::function<torch::Tensor(const torch::Tensor&, const std::vector<std::int64_t>& send, const std::vector<std::int64_t>& recv)> all_to_all;
  /// The etp x ep ranks over which Megatron-Core's allgather dispatcher
  /// (a signature's ag=1) gathers tokens and reduce-scatters the experts'
  /// parts: its rank, size, `gather` and `reduce_scatter` along the
  /// sequence as TensorParallel's under sequence parallelism (Note
  /// [Experts under tensor parallelism]); unused by the alltoall dispatcher.
  TensorParallel tp_ep;
};

/// The dispatch's bookkeeping (Note [Expert parallelism]) for `chosen`
/// [T, k] (each token's experts, int64) over `experts` experts on `ep`
/// ranks in contiguous blocks.
struct MoeDispatch {
  torch::Tensor order;              ///< [T k]: the flat (token, slot) pairs t k + slot, sorted by expert (stable)
  torch::Tensor counts;             ///< [E]: pairs per expert, int64
  std::vector<std::int64_t> send;   ///< [ep]: pairs sent to each rank (its experts' counts summed)
};
MoeDispatch moe_dispatch(const torch::Tensor& chosen, std::int64_t experts, int ep);

/// As make_torch_layer(signature, tp, cp), for expert parallelism too: a
/// moe.block's `ep=` (1 when absent) must equal ep.size; it holds experts
/// [ep.rank E/ep, (ep.rank + 1) E/ep) of the whole block the same seed
/// builds and dispatches through ep.all_to_all. Other layers ignore ep.
/// make_torch_layer(signature) on a signature with ep=k builds rank 0's
/// share without the collective: a loopback exchange takes every rank to
/// send what this one sends itself, so its experts get the rows of
/// balanced routing (its own rows for them, once from each of k ranks); one rank's
/// computation, which calibration times and the simulator prices apart
/// from the all-to-all (sim::Layer::ep_forward), as with cp=k.
std::unique_ptr<TorchLayer> make_torch_layer(const std::string& signature, const TensorParallel& tp, const ContextParallel& cp,
                                             const ExpertParallel& ep);

/// Makes a moe.block route round-robin (ExpertParallel::force_balance) and
/// returns true; other layers are left as they are (false). Calibration
/// times its blocks so: the balanced load a signature without load= means.
bool force_moe_balance(TorchLayer& layer);

/// The layer kinds make_torch_layer knows ("gpt2.block", ...).
std::vector<std::string> torch_layer_kinds();

/// Sets the CPU threads of LibTorch's intra-op pool and of OpenBLAS, which
/// at::set_num_threads does not reach in Debian's LibTorch (OpenBLAS's
/// pthread build otherwise starts one thread per core in every process, and
/// two ranks on two cores then fight over them).
void set_cpu_threads(int threads);

/// Adam / AdamW (Loshchilov & Hutter 2019, Algorithm 2) or plain SGD on flat
/// tensors, so a shard updates exactly as the same elements of the whole
/// would. The runtime steps with it and calibration times it, so the
/// optimizer the simulator prices from a profile is the one that runs.
struct AdamConfig {
  double lr = 1e-3, beta1 = 0.9, beta2 = 0.999, eps = 1e-8, weight_decay = 0;
  bool sgd = false;
  /// SGD's momentum (torch.optim.SGD's `momentum`, dampening 0, not
  /// Nesterov): a buffer per parameter, in AdamState::m, where it is > 0.
  double momentum = 0;
  /// The loss scale the gradients carry (static fp16 loss scaling): the
  /// update divides them by it.
  double grad_scale = 1;
};

/// Adam's two moments of one tensor, and the fp32 master copy of a 16-bit
/// one; empty until its first update.
struct AdamState {
  torch::Tensor m, v;
  torch::Tensor master;  ///< fp32 copy of an fp16/bf16 parameter; undefined for fp32
};

/// Note [Mixed-precision step]
/// Megatron-LM (Float16OptimizerWithFloat16Params) and DeepSpeed's fp16
/// optimizers keep 16-bit parameters for the forward and backward and an
/// fp32 master copy with fp32 moments for the update: 2 + 4 + 4 + 4 bytes a
/// parameter besides the 2-byte gradient (K = 12, ZeRO paper section 3.1).
/// adam_update does the same when p is fp16 or bf16: the first update
/// makes s.master from p, each update reads the gradient as fp32, steps
/// the master and rounds it back into p.
/// Fused optimizers (apex FusedAdam, DeepSpeed's, PyTorch's fused=True)
/// update in place without temporaries; this one is unfused LibTorch ops, so
/// it goes through a tensor kAdamChunk elements at a time, which bounds its
/// temporaries (the fp32 gradient and Adam's denominator) at 32 MiB.
inline constexpr std::int64_t kAdamChunk = std::int64_t{1} << 22;

/// One update of p by its gradient g at step `step` (1-based, for the bias
/// correction), in place, without autograd. p and g are flat (1-D views).
void adam_update(torch::Tensor p, const torch::Tensor& g, AdamState& s, std::int64_t step, const AdamConfig& c);

/// Note [Gradient buckets]
/// Before a gradient collective, DDP's reducer copies every gradient into
/// its bucket (PyTorch's Reducer copies each one into its bucket view as
/// autograd produces it; DeepSpeed's ZeRO-1/2 fill a flat bucket the same
/// way), and after the all-reduce DDP copies the bucket back into the
/// gradients, divided by the world size. One copy per tensor: on a GPU a
/// small kernel each, on a CPU a few LibTorch ops each. The runtime copies
/// with these two functions and calibration times them (kernels "bucket_in"
/// and "bucket_out": m parameters in n tensors), so the copies the
/// simulator prices from a profile are the ones that run.
///
/// Copies the gradients of `params` one after another into `flat` (zeros
/// for a parameter without one); with `free_grads`, drops each gradient
/// once copied.
void flatten_grads(const std::vector<torch::Tensor>& params, torch::Tensor flat, bool free_grads);

/// Copies `flat`, laid out as flatten_grads wrote it, back into the defined
/// gradients of `params`, divided by `divisor`.
void unflatten_grads(const std::vector<torch::Tensor>& params, const torch::Tensor& flat, double divisor);

/// Note [Machine probe]
/// This CI machine's speed moves by 50-60% for minutes at a time (a
/// validation suite had every Bi-LSTM row at 24-28 ms in two rounds and at
/// 16-17 ms in the third), more than any model effect being validated, and
/// with no sign in the kernel's counters (no steal time). A cache-resident
/// matmul and a streaming probe missed it; the workload that moves most is
/// a small LSTM, whose thousands of small ops live in the caches. So a
/// fixed workload is timed where a profile is measured and again where a
/// plan is validated (before the warm-up and after the measured steps, as a
/// spell can begin or end during a run), and the report shows their ratio:
/// how fast the machine is now against when it was calibrated. The probe is the
/// forward and backward of one Bi-LSTM layer (kProbeSignature, micro-batch
/// 4, 32 tokens, fp32, on the CPU) in a loop for `budget_s` seconds after
/// two warm-ups; it returns the median run's seconds.
inline constexpr const char* kProbeSignature = "lstm.layer:in=64,hs=64,dirs=2";
double probe_seconds(double budget_s);

}  // namespace dtsim::models
