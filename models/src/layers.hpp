#pragma once
// Kernel builders shared by the model families (private to models/).

#include <cstdint>
#include <string>
#include <vector>

#include "dtsim/sim/model.hpp"

namespace dtsim::models::detail {

/// A GEMM (m,k) x (k,n), `batch` times, operands and result of `e` bytes:
/// 2mnk FLOPs, e(mk + kn + mn) bytes per matrix.
sim::Kernel gemm(const std::string& name, std::int64_t m, std::int64_t n, std::int64_t k, int e,
                 std::int64_t batch = 1, sim::KernelKind kind = sim::KernelKind::kGemm);
/// A fused attention-like kernel (FlashAttention, a sparse or scan kernel)
/// of `batch` (m, k) x (k, n) products doing `flops` and moving `bytes`,
/// priced at the device's attention efficiency (Kernel::fused).
sim::Kernel fused_kernel(const std::string& name, std::int64_t m, std::int64_t n, std::int64_t k, std::int64_t batch, Flops flops,
                         Bytes bytes);
/// A memory-bound op that reads `read` and writes `written` bytes and does
/// `flops` arithmetic.
sim::Kernel memory_op(const std::string& name, sim::KernelKind kind, Bytes read, Bytes written, Flops flops = 0);
/// Backward kernels of a forward list, in reverse order: each GEMM Y = X W
/// becomes dX = dY W^T and dW = X^T dY (same FLOPs each; `input_grad` false
/// drops dX for the first GEMM of a model); attention matmuls likewise;
/// memory-bound ops move twice their bytes (read the saved input and the
/// incoming gradient, write the outgoing one).
std::vector<sim::Kernel> backward_of(const std::vector<sim::Kernel>& forward);
/// Sum of forward GEMM/attention/recurrent FLOPs (the "model FLOPs" part).
Flops matmul_flops(const std::vector<sim::Kernel>& ks);

/// What every zoo model shares: MFU's numerator computed from its own
/// layers, forward + backward matmuls = 3 x forward (Korthikanti et al. 2022,
/// Eq. 7 is this sum for a GPT with f = 4h, no recompute).
class ZooModel : public sim::Model {
 public:
  Flops model_flops(const sim::WorkloadShape& shape) const final;
};

/// One direction of one LSTM layer over b sequences of s steps, input
/// width `in`, hidden hs: as cuDNN and PyTorch run it, the input projection
/// of every step is one GEMM, then the recurrence is s dependent steps of a
/// (b, hs) x (hs, 4 hs) GEMM plus the gates. Names "NAME.input_proj",
/// "NAME.step".
std::vector<sim::Kernel> lstm_kernels(const std::string& name, std::int64_t b, std::int64_t s, std::int64_t in, std::int64_t hs, int e);
/// The same for one direction of one GRU layer (torch.nn.GRU): three gates,
/// so the input projection and each step's GEMM are 3 hs wide (Note [GRU
/// memory] in text.cpp). Names "NAME.input_proj", "NAME.step".
std::vector<sim::Kernel> gru_kernels(const std::string& name, std::int64_t b, std::int64_t s, std::int64_t in, std::int64_t hs, int e);

/// Throws ConfigError if one tensor of `bytes` (computed in floating point)
/// would be too large to count: the micro-batch or sequence is absurd.
void check_size(double bytes, const char* what);

/// Throws UnsupportedError for tp > 1 (for models without a tensor-parallel
/// split; resolve() has already refused the plan with tp_error()).
void require_no_tp(const sim::WorkloadShape& shape);
/// tp_error() of the transformer families: tp must divide the heads and the
/// MLP width (Megatron-LM splits heads and MLP columns across ranks).
std::string transformer_tp_error(int tp, std::int64_t heads, std::int64_t ffn);
/// Note [Userbuffers' chunks] (layers.cpp): under shape.tp_comm_overlap,
/// the GEMMs beside sequence parallelism's all-gathers and reduce-scatters
/// (the column-parallel "attn.qkv", "mlp.fc1" or "mlp.gate_up" and the
/// row-parallel "attn.proj", "attn.o_proj", "mlp.fc2" or "mlp.down", and
/// their dgrads and wgrads) split and keep SMs as shape.tp_overlap_cfg
/// says, in the layer's passes and in the kernels its recompute reruns.
/// Nothing otherwise.
void split_for_tp_overlap(sim::Layer& l, const sim::WorkloadShape& shape);
/// The collectives one tensor-parallel pass needs around a column- then a
/// row-parallel linear pair on activations of `bytes` (Megatron-LM's f and g
/// operators, Shoeybi et al. 2019 Fig. 3): an all-reduce, or with sequence
/// parallelism an all-gather and a reduce-scatter (Korthikanti et al. 2022
/// section 4.2.2), `pairs` times. Empty when tp = 1.
std::vector<sim::LayerComm> tp_pairs(const sim::WorkloadShape& shape, Bytes bytes, int pairs);

}  // namespace dtsim::models::detail

namespace dtsim::models::detail {

/// One rank's attention core: what runs between Q, K, V and the attention
/// output, as eager or fused attention runs it, with the context-parallel
/// exchange of K/V (Note [Attention as it runs], Note [Context parallelism]).
struct AttentionCore {
  std::vector<sim::Kernel> forward;   ///< the core's forward kernels
  std::vector<sim::Kernel> backward;  ///< its backward kernels, in order
  /// Bytes it keeps for backward beyond this rank's Q, K, V and output
  /// (which the layer counts): eager attention's scores, softmax and
  /// dropout, and the expanded K/V of grouped-query or context-parallel
  /// attention; fused attention's log-sum-exp.
  Bytes saved = 0;
  /// Selective recompute can drop it (eager attention; a fused kernel keeps
  /// nothing worth recomputing).
  bool recomputable = false;
  std::vector<sim::LayerComm> cp_forward, cp_backward;
};

/// The attention core of `heads` query heads and `kv_heads` key/value heads
/// (this rank's, after any tensor-parallel split) of width d, for the
/// shape's micro-batch; causal for decoders.
/// `window` > 0: each query sees at most that many keys (sliding-window
/// attention, which a fused kernel exploits). `fp32_softmax`: eager
/// softmax upcasts and keeps its fp32 output beside the cast one
/// (HuggingFace's eager_attention_forward).
/// `dv` > 0: values of that width where queries and keys have d
/// (DeepSeek's multi-head latent attention: 192 against 128).
/// `softcap`: Gemma 2's scores = cap tanh(scores / cap) before the softmax
/// (Note [Gemma] in llama.cpp); eager attention runs and keeps it, a fused
/// kernel (FlashAttention-2's softcap) does it in place.
/// `sinks`: gpt-oss's learned logit per head joins each row of scores
/// (Note [gpt-oss] in llama.cpp): eager attention concatenates it, takes the
/// row's max and subtracts it, and runs its softmax in the scores' own dtype
/// (so `fp32_softmax` does not apply); a fused kernel takes it in place.
/// `chunk` > 0: each query sees the keys of its own chunk of that many
/// tokens up to itself (Llama 4's chunked attention, Note [Llama 4] in
/// llama.cpp), which a fused kernel exploits as it does a window.
AttentionCore attention_core(const sim::WorkloadShape& shape, std::int64_t heads, std::int64_t kv_heads, std::int64_t d,
                             bool causal, bool dropout, std::int64_t window = 0, bool fp32_softmax = false,
                             std::int64_t dv = 0, bool softcap = false, bool sinks = false, std::int64_t chunk = 0);
/// Note [Offload modules] (model.hpp): marks `module` as one `l` has and,
/// where `shape` asks for it, adds its group: the forward kernels [first,
/// end) and what autograd saves inside it (empty tensors dropped).
void add_offload_group(sim::Layer& l, const sim::WorkloadShape& shape, std::uint16_t module, std::size_t first, std::size_t end,
                       std::vector<sim::SavedTensor> tensors);
/// The index of the first forward kernel of `l` named `name` (its forward's size if none).
std::size_t kernel_index(const sim::Layer& l, const std::string& name);
/// A layer's kernels: `pre`, the attention core, then `post`; backward in
/// reverse (the core's own backward in its place); the core's recompute
/// kernels and context-parallel exchange.
void join_kernels(sim::Layer& l, const std::vector<sim::Kernel>& pre, const AttentionCore& core,
                  const std::vector<sim::Kernel>& post);
/// The end of a language-model head: the `name` GEMM of t tokens onto this
/// rank's v vocabulary rows, the fp32 log-softmax and the loss (forward,
/// after the kernels already in `head`; backward of them all), backward's
/// fp32 workspace, the scalar output, and under tensor parallelism
/// vocab-parallel cross-entropy's collectives. Saved bytes are the caller's,
/// the loss's own from lm_loss_saved. Under a fused loss kernel (Note [Fused
/// linear cross-entropy]) the projection and the loss are its kernels.
void add_lm_loss(sim::Layer& head, const sim::WorkloadShape& shape, const std::string& name, std::int64_t t, std::int64_t v,
                 std::int64_t h);
/// Tokens in one of Liger's fused-loss chunks of t tokens over a v x h head:
/// next_power_of_2(ceil(t / ceil(v / h))), at most t.
std::int64_t liger_chunk_tokens(std::int64_t t, std::int64_t v, std::int64_t h);
/// The largest transient of Liger's fused loss over t tokens of a v x h head
/// in e-byte activations, with its weight gradient where it is trained
/// (Note [Fused linear cross-entropy]).
Bytes liger_workspace(std::int64_t t, std::int64_t v, std::int64_t h, int e, bool weight_trained);
/// Tokens in one of TRL's chunked_nll chunks of t tokens: 256, at most t.
std::int64_t chunked_nll_tokens(std::int64_t t);
/// Bytes a weight element of TRL's chunked_nll head takes to make ready for
/// a chunk (read and written): `fp32` without autocast (chunked_nll_fp32),
/// `weight_fp32` where the weight is held in fp32 (Note [Fused linear
/// cross-entropy]).
int chunked_nll_prep_bytes(int e, bool fp32, bool weight_fp32);
/// The largest transient of TRL's chunked_nll (`fp32`: chunked_nll_fp32)
/// over t tokens of a v x h head in e-byte activations, its weight held in
/// fp32 or not, with its weight gradient where it is trained (Note [Fused
/// linear cross-entropy]).
Bytes chunked_nll_workspace(std::int64_t t, std::int64_t v, std::int64_t h, int e, bool fp32, bool weight_fp32, bool weight_trained);
/// Whether the LM head's projection and loss run as one fused kernel
/// (shape.loss_kernel, not when counting model FLOPs, not under tensor parallelism).
bool fused_lm_loss(const sim::WorkloadShape& shape);
/// What the loss itself keeps for the backward beside the projection's
/// input: the fp32 log-softmax (4 t v), or a fused kernel's (Note [Fused
/// linear cross-entropy]).
Bytes lm_loss_saved(const sim::WorkloadShape& shape, std::int64_t t, std::int64_t v, std::int64_t h);
/// A linear classifier over `rows` inputs of `in` features onto `classes`,
/// with cross-entropy (fp32 log-softmax, as F.cross_entropy upcasts): keeps
/// its input and the log-softmax; signature "fc.head:in=IN,c=CLASSES".
sim::Layer classifier_head(const std::string& name, const sim::WorkloadShape& shape, std::int64_t rows, std::int64_t in,
                           std::int64_t classes);
/// What a block's signature adds for how its attention runs: ",cp=N"
/// under context parallelism, ",flash=1" when fused.
std::string attention_signature(const sim::WorkloadShape& shape);
/// Tokens of each micro-batch on this rank: b s / cp.
std::int64_t local_tokens(const sim::WorkloadShape& shape);

/// One transformer layer (GPT-2 pre-LN or BERT post-LN: same kernels and
/// memory) for b sequences of s tokens, hidden h, a heads, MLP width f,
/// activations of e bytes; params = 4h^2 + 2hf + 9h + f (QKV, output
/// projection, two MLP linears with biases, two LayerNorms). Under tensor
/// parallelism (shape.tp = t) it is one rank's shard: (4h^2 + 2hf + 3h + f)/t
/// + 6h parameters (the row-parallel biases and LayerNorms are replicated).
sim::Layer transformer_layer(const std::string& name, const sim::WorkloadShape& shape, std::int64_t h,
                             std::int64_t a, std::int64_t f, bool dropout, bool causal);

}  // namespace dtsim::models::detail
