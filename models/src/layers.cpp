#include "layers.hpp"

#include <algorithm>
#include <functional>
#include <set>
#include <string>
#include <string_view>

#include "dtsim/sim/error.hpp"

namespace dtsim::models::detail {

sim::Kernel gemm(const std::string& name, std::int64_t m, std::int64_t n, std::int64_t k, int e, std::int64_t batch,
                 sim::KernelKind kind) {
  sim::Kernel g;
  g.name = name;
  g.kind = kind;
  g.m = m;
  g.n = n;
  g.k = k;
  g.batch = batch;
  g.flops = 2.0 * static_cast<double>(m) * static_cast<double>(n) * static_cast<double>(k) * static_cast<double>(batch);
  g.bytes = static_cast<Bytes>(e) * (m * k + k * n + m * n) * batch;
  return g;
}

sim::Kernel fused_kernel(const std::string& name, std::int64_t m, std::int64_t n, std::int64_t k, std::int64_t batch, Flops flops,
                         Bytes bytes) {
  // A GEMM's shape, priced by the work and traffic the caller counts.
  sim::Kernel f = gemm(name, m, n, k, 0, batch, sim::KernelKind::kAttention);
  f.fused = true;
  f.flops = flops;
  f.bytes = bytes;
  return f;
}

sim::Kernel memory_op(const std::string& name, sim::KernelKind kind, Bytes read, Bytes written, Flops flops) {
  sim::Kernel k;
  k.name = name;
  k.kind = kind;
  k.bytes = read + written;
  k.flops = flops;
  return k;
}

std::vector<sim::Kernel> backward_of(const std::vector<sim::Kernel>& forward) {
  std::vector<sim::Kernel> out;
  for (auto it = forward.rbegin(); it != forward.rend(); ++it) {
    const sim::Kernel& f = *it;
    switch (f.kind) {
      case sim::KernelKind::kGemm:
      case sim::KernelKind::kAttention:
      case sim::KernelKind::kRecurrent: {
        // dX = dY (m,n) x W^T (n,k): (m,k) output; dW = X^T (k,m) x dY (m,n).
        sim::Kernel dx = f, dw = f;
        dx.name = f.name + ".dgrad";
        dx.n = f.k;
        dx.k = f.n;
        dw.name = f.name + ".wgrad";
        dw.m = f.k;
        dw.k = f.m;
        out.push_back(dx);
        out.push_back(dw);
        break;
      }
      default: {
        sim::Kernel b = f;
        b.name = f.name + ".bwd";
        b.bytes = 2 * f.bytes;
        b.flops = 2 * f.flops;
        out.push_back(b);
      }
    }
  }
  return out;
}

std::vector<sim::Kernel> lstm_kernels(const std::string& name, std::int64_t b, std::int64_t s, std::int64_t in, std::int64_t hs, int e) {
  sim::Kernel step = gemm(name + ".step", b, 4 * hs, hs, e, 1, sim::KernelKind::kRecurrent);
  step.bytes += e * b * hs * 12;  // gates, cell and hidden state read and written
  step.flops += 10.0 * b * hs;
  step.repeat = s;
  return {gemm(name + ".input_proj", b * s, 4 * hs, in, e), step};
}

std::vector<sim::Kernel> gru_kernels(const std::string& name, std::int64_t b, std::int64_t s, std::int64_t in, std::int64_t hs, int e) {
  sim::Kernel step = gemm(name + ".step", b, 3 * hs, hs, e, 1, sim::KernelKind::kRecurrent);
  // The gates (PyTorch's nn.GRU): r and z add the input's and the hidden
  // part and take a sigmoid (4H), n multiplies the hidden part by r, adds
  // the input's and takes a tanh (3H), h' = (h - n) z + n (3H): 10H FLOPs.
  // Bytes: both projections read (6H) and the previous state (H), the new
  // state written (H), the gates and W_hn h + b_hn kept for backward (4H).
  step.bytes += e * b * hs * 12;
  step.flops += 10.0 * b * hs;
  step.repeat = s;
  return {gemm(name + ".input_proj", b * s, 3 * hs, in, e), step};
}

Flops matmul_flops(const std::vector<sim::Kernel>& ks) {
  Flops f = 0;
  for (const auto& k : ks) {
    if (k.kind == sim::KernelKind::kGemm || k.kind == sim::KernelKind::kAttention ||
        k.kind == sim::KernelKind::kRecurrent) {
      f += k.flops * static_cast<double>(k.repeat);
    }
  }
  return f;
}

Flops ZooModel::model_flops(const sim::WorkloadShape& shape) const {
  Flops f = 0;
  for (const auto& l : shared_layers(shape)) f += matmul_flops(l.forward);
  return 3 * f;
}

void check_size(double bytes, const char* what) {
  // Note [Model size bound] (zoo.cpp): 100 TB per layer and micro-batch
  // keeps the sums over 10,000 layers inside 64 bits.
  if (bytes > 1e14) {
    throw ConfigError(std::string("plan.micro_batch x plan.seq_len: the ") + what +
                      " of one layer would exceed 100 TB; use a smaller micro_batch or seq_len");
  }
}

void require_no_tp(const sim::WorkloadShape& shape) {
  if (shape.tp != 1) throw UnsupportedError("this model has no tensor-parallel split (tp must be 1)");
}

std::string transformer_tp_error(int tp, std::int64_t heads, std::int64_t ffn) {
  if (heads % tp != 0) return std::to_string(heads) + " attention heads are not divisible by tp=" + std::to_string(tp);
  if (ffn % tp != 0) return "the MLP width " + std::to_string(ffn) + " is not divisible by tp=" + std::to_string(tp);
  return "";
}

// Note [Sequence parallel embeddings]
// Under sequence parallelism a rank keeps 1/tp of the tokens from the
// embedding on. Megatron-Core's LanguageModelEmbedding reduce-scatters the
// vocab-parallel lookup straight onto the ranks' tokens only where nothing
// is added to it (reduce_scatter_embeddings = not add_position_embedding
// and no token types and sequence_parallel: Llama, whose gradient is then
// all-gathered back). Where position embeddings (GPT-2) or token types
// (BERT) are added, the lookup is all-reduced as without it, the positions
// added to every token, and scatter_to_sequence_parallel_region keeps the
// rank's part (no communication forward, an all-gather of the gradient
// backward); the dropout runs on the part
// (megatron/core/models/common/embeddings/language_model_embedding.py;
// legacy megatron/model/language_model.py the same). The LibTorch twins do
// the same (Note [Sequence parallelism] in models/torch).

std::vector<sim::LayerComm> tp_pairs(const sim::WorkloadShape& shape, Bytes bytes, int pairs) {
  if (shape.tp <= 1) return {};
  if (shape.sequence_parallel) {
    return {{sim::CollectiveOp::kAllGather, bytes, pairs}, {sim::CollectiveOp::kReduceScatter, bytes, pairs}};
  }
  return {{sim::CollectiveOp::kAllReduce, bytes, pairs}};
}

}  // namespace dtsim::models::detail

namespace dtsim::models::detail {

// Note [Attention as it runs]
// Eager attention (HuggingFace's eager path, Megatron-LM's unfused core)
// materialises the scores Q K^T of every head, b a s^2 elements, keeps the
// softmax output for backward (and dropout's mask and output), and computes
// every score, masked or not. With grouped-query attention it first expands
// K and V to the query heads (HF's repeat_kv) and keeps the expanded copies.
// Fused attention (FlashAttention, Dao et al. 2022; SDPA's flash and
// memory-efficient kernels; Transformer Engine's fused attention) never
// stores the scores: forward keeps Q, K, V, the output and the log-sum-exp
// of each query row (fp32), and backward recomputes the scores tile by tile:
// five matmuls against forward's two, so 2.5x its FLOPs (Dao 2023,
// FlashAttention-2, section 3.1). Under a causal mask it skips the tiles
// above the diagonal: half the matmul FLOPs. K and V are read per KV head,
// never expanded. Selective recompute then has nothing left to drop.
//
// Note [Context parallelism]
// With cp ranks a sequence of s tokens is cut into 2 cp chunks and rank r
// holds chunks r and 2cp-1-r, so each rank has s/cp queries and, under a
// causal mask, the same share of the unmasked scores (Megatron-Core's load
// balancing, megatron/core/utils.py get_batch_on_this_cp_rank). Every rank
// needs the keys and values of the whole sequence:
//   p2p (Megatron-Core's default, Transformer Engine's
//   AttnFuncWithCPAndKVP2P): a ring of cp - 1 steps; in each, the K/V block
//   in hand (2 b (s/cp) kv d elements) goes to the next rank while attention
//   runs against it. Backward runs the ring again, passing K/V and the
//   accumulated dK/dV: twice the bytes.
//   all_gather (the Llama 3 paper, section 3.3.2; TE's
//   AttnFuncWithCPAndKVAllGather): one all-gather of K and V before
//   attention; backward gathers them again and reduce-scatters dK/dV.
// Both keep only the local K/V (and fused attention's log-sum-exp per
// step). Eager attention after the all-gather computes this rank's s/cp
// query rows against all s keys and keeps those scores, b a (s/cp) s; the
// ring computes block by block and keeps none (Note [Ring attention]).
//
// Note [Packed sequences]
// Fine-tuning packs short documents into each sequence (Megatron-Bridge's
// offline packing of SQuAD, TRL's packing, torchtune's PackedDataset) and
// hands the attention their boundaries (cu_seqlens: Transformer Engine's
// THD format, FlashAttention's varlen kernels), so a query attends to the
// keys of its own document alone. plan.document_len says how long they are:
// a fused kernel then computes each document's causal triangle, as Llama
// 4's attention chunks (row i of a document sees i keys: s = q d + r,
// q d(d+1)/2 + r(r+1)/2 of the s x s scores), or without a causal mask
// each document's square; a sliding window no shorter than a document
// changes nothing more. MFU's model FLOPs count each document whole, q d^2
// + r^2 (Megatron-Bridge's flop_utils.py counts a packed batch's sum of
// squared lengths). Eager attention masks the rest of the s x s scores but
// computes them all, so only its model FLOPs change. The projections, the
// MLP and every activation are the sequence's: packing changes only which
// keys a query sees. Real documents vary in length, and a sequence's
// causal scores are the sum of their squares over 2, where documents of
// one length d give s d / 2: give the sum of the squared lengths over the
// sum of the lengths (the mean length, times 1 + the squared coefficient
// of variation).
AttentionCore attention_core(const sim::WorkloadShape& shape, std::int64_t heads, std::int64_t kv_heads, std::int64_t d,
                             bool causal, bool dropout, std::int64_t window, bool fp32_softmax, std::int64_t dv, bool softcap,
                             bool sinks, std::int64_t chunk) {
  using sim::KernelKind;
  if (dv == 0) dv = d;
  const std::int64_t b = shape.micro_batch, s = shape.seq_len, cp = shape.cp;
  if (const std::int64_t doc = shape.document_len; doc > 0 && doc < s && (window == 0 || window >= doc)) {
    chunk = chunk > 0 ? std::min(chunk, doc) : doc;
    window = 0;
  }
  const std::int64_t sq = s / cp;  // this rank's queries per sequence
  const int e = shape.act_bytes;
  AttentionCore c;
  if (shape.flash_attention) {
    // The fraction of the s x s scores a fused kernel computes: the causal
    // half, or with a window w < s, sum over rows of min(i, w) = w s - w(w-1)/2,
    // or with chunks of c < s tokens, s = q c + r, q c(c+1)/2 + r(r+1)/2
    // (row i of a chunk sees i of its keys).
    double skip = causal ? 0.5 : 1.0;
    if (window > 0 && window < s) {
      const double w = static_cast<double>(window), n = static_cast<double>(s);
      skip = (w * n - w * (w - 1) / 2) / (n * n);
    } else if (chunk > 0 && chunk < s) {
      const double c = static_cast<double>(chunk), n = static_cast<double>(s), q = static_cast<double>(s / chunk),
                   r = static_cast<double>(s % chunk);
      skip = causal ? (q * c * (c + 1) / 2 + r * (r + 1) / 2) / (n * n) : (q * c * c + r * r) / (n * n);
    }
    const Bytes q = e * b * sq * heads * d, o = e * b * sq * heads * dv, kv = e * b * s * kv_heads * (d + dv),
                lse = 4 * b * heads * sq;
    // Read Q, K, V; write O and the log-sum-exp.
    const sim::Kernel f = fused_kernel("attn.flash", sq, s, d, b * heads,
                                       2.0 * static_cast<double>(b * heads) * static_cast<double>(sq) * static_cast<double>(s) *
                                           static_cast<double>(d + dv) * skip,
                                       q + o + kv + lse);
    sim::Kernel g = f;
    g.name = "attn.flash.bwd";
    g.flops = 2.5 * f.flops;
    g.bytes = 2 * q + 2 * o + 2 * kv + lse;  // read Q, K, V, O, dO, lse; write dQ, dK, dV
    c.forward.push_back(f);
    c.backward.push_back(g);
    c.saved = lse;
  } else if (cp > 1 && !shape.cp_all_gather) {
    // Note [Ring attention] (models/torch/src/torch_layers.cpp): the p2p ring
    // computes block by block with an online softmax, as TE's
    // AttnFuncWithCPAndKVP2P does whatever the kernel: of the 4 cp pairs of
    // chunks of s / 2cp tokens a rank's queries meet, 2 cp + 2 (its own
    // block whole, masked, and half of each other rank's; all 4 cp without
    // a causal mask); it keeps the log-sum-exp, not the scores, and backward
    // recomputes the probabilities (five GEMMs to forward's two, as
    // FlashAttention's).
    const std::int64_t piece = s / (2 * cp), pairs = causal ? 2 * cp + 2 : 4 * cp;
    check_size(static_cast<double>(b) * heads * pairs * piece * piece * 4, "attention scores");
    const Bytes scores = b * heads * pairs * piece * piece;
    auto& k = c.forward;
    k.push_back(gemm("attn.ring.scores", piece, piece, d, e, b * heads * pairs, KernelKind::kAttention));
    k.push_back(memory_op("attn.ring.softmax", KernelKind::kNorm, 4 * scores, 4 * scores, 5.0 * scores));
    k.push_back(gemm("attn.ring.av", piece, dv, piece, e, b * heads * pairs, KernelKind::kAttention));
    c.backward = backward_of(c.forward);
    c.backward.insert(c.backward.begin(), k.begin(), k.begin() + 2);  // the scores and probabilities again
    c.saved = 4 * b * heads * sq;                                      // the log-sum-exp
  } else {
    check_size(static_cast<double>(b) * heads * sq * s * e, "attention scores");
    const Bytes scores = b * heads * sq * s;
    auto& k = c.forward;
    k.push_back(gemm("attn.scores", sq, s, d, e, b * heads, KernelKind::kAttention));
    const std::size_t scores_gemm = k.size() - 1;
    // Gemma 2's soft cap: a division, a tanh and a multiplication, each a pass over the scores.
    if (softcap) k.push_back(memory_op("attn.softcap", KernelKind::kElementwise, 3 * e * scores, 3 * e * scores, 3.0 * scores));
    // gpt-oss's sinks (eager_attention_forward in modeling_gpt_oss.py): the
    // sink column concatenated (a copy of the scores one wider), each row's
    // max taken and subtracted (a read, and a read and a write), then the
    // softmax over the wider rows; backward passes the same ways.
    const Bytes rows = b * heads * sq, wide = scores + (sinks ? rows : 0);
    if (sinks) k.push_back(memory_op("attn.sinks", KernelKind::kElementwise, e * (scores + 2 * wide), 2 * e * wide, 2.0 * wide));
    k.push_back(memory_op("attn.softmax", KernelKind::kNorm, e * wide, e * wide, 5.0 * wide));
    if (dropout) k.push_back(memory_op("attn.dropout", KernelKind::kElementwise, e * scores, (e + 1) * scores, scores));
    k.push_back(gemm("attn.av", sq, dv, s, e, b * heads, KernelKind::kAttention));
    // Note [Model FLOPs of local attention]
    // MFU's model FLOPs count attention whole, as eager attention computes
    // it: every query against every key, the causal half a fused kernel
    // skips too (Korthikanti et al. 2022, Eq. 7; Megatron-LM, torchtitan,
    // llm-foundry). A key beyond a sliding window (Mistral, Gemma, gpt-oss)
    // or outside its attention chunk (Llama 4) is not the model's: eager
    // attention masks it, a fused kernel never computes it. Counted whole,
    // llama-4-scout at its 262,144 tokens (chunks of 8,192 in three layers
    // of four) showed an MFU of 246%. So for the model FLOPs a local layer
    // counts each query against the keys of its window, w of them (s x w
    // where w < s), or of its chunk (s = q c + r: q c^2 + r^2), the causal
    // half within them counted whole as elsewhere.
    if (shape.model_flops) {
      double seen = 1;
      if (window > 0 && window < s) {
        seen = static_cast<double>(window) / static_cast<double>(s);
      } else if (chunk > 0 && chunk < s) {
        const double n = static_cast<double>(s), cc = static_cast<double>(chunk), q = static_cast<double>(s / chunk),
                     r = static_cast<double>(s % chunk);
        seen = (q * cc * cc + r * r) / (n * n);
      }
      k[scores_gemm].flops *= seen;
      k.back().flops *= seen;
    }
    c.backward = backward_of(c.forward);
    // Kept: the softmax's output (for its backward; an fp32 softmax's own
    // 4 bytes beside the e-byte cast the next op reads), and what the
    // attention-times-V GEMM reads. Dropout adds its mask and, where the
    // softmax's output is its input (no separate cast), the dropped copy;
    // after a cast the dropped copy replaces the cast one in the GEMM's
    // saved inputs, and the cast itself is kept by nothing.
    const Bytes mask = dropout ? shape.mask_bytes : 0;
    const bool cast = fp32_softmax && !sinks && e != 4;
    c.saved = scores * (e + (dropout ? mask + (cast ? 0 : e) : 0) + (cast ? 4 : 0));
    // With sinks the softmax keeps its whole output, the sink column too
    // (the GEMM with V reads a view of it), and max its int64 indices.
    if (sinks) c.saved += e * rows + 8 * rows;
    if (softcap) c.saved += e * scores;  // tanh's output, kept for its backward
    // K and V expanded to every query head, or gathered from the other
    // context-parallel ranks, are kept beside the local ones.
    if (heads != kv_heads || cp > 1) c.saved += e * b * s * heads * (d + dv);
    c.recomputable = true;
  }
  if (cp > 1) {
    const Bytes block = e * b * sq * kv_heads * (d + dv);  // this rank's K and V
    if (shape.cp_all_gather) {
      c.cp_forward.push_back({sim::CollectiveOp::kAllGather, cp * block, 1, sim::Axis::kCp});
      c.cp_backward.push_back({sim::CollectiveOp::kAllGather, cp * block, 1, sim::Axis::kCp});
      c.cp_backward.push_back({sim::CollectiveOp::kReduceScatter, cp * block, 1, sim::Axis::kCp});
    } else {
      c.cp_forward.push_back({sim::CollectiveOp::kSendRecv, block, static_cast<int>(cp - 1), sim::Axis::kCp});
      c.cp_backward.push_back({sim::CollectiveOp::kSendRecv, 2 * block, static_cast<int>(cp - 1), sim::Axis::kCp});
      for (auto& k : c.forward) k.cp_overlap = true;
      for (auto& k : c.backward) k.cp_overlap = true;
    }
  }
  return c;
}

// Note [Chunked loss]
// torchtune's CEWithChunkedOutputLoss (torchtune/modules/loss/
// ce_chunked_output_loss.py, num_output_chunks 8; its recipes call the
// model's set_num_output_chunks) splits the last hidden state along the
// sequence, projects each chunk to its logits (TransformerDecoder.
// chunked_output, all N in the model's forward) and takes each chunk's
// cross-entropy over its .float() copy: F.cross_entropy keeps each chunk's
// fp32 log-softmax for its backward, so what the loss keeps is the whole
// one's, 4 bytes a logit, but its backward turns one chunk at a time into
// the fp32 gradients of the log-softmax and of the logits: 8 t v / N at
// once where the whole loss holds 8 t v (plan.loss_chunks N). The 16-bit
// gradients of the logits gather until the projections' backward (e t v,
// below the fp32 gradients they replace), and the forward's transient (all
// N chunks' 16-bit logits beside one chunk's fp32 copy, about 1.5 t v above
// what is kept, in bf16 at N 8) is not priced, as no forward transient is
// but a measured one. The head's signature says lchunks=N, so a profile
// that measured the whole loss does not price it. Under torch.compile (its
// recipes' compile_loss) the compiled cross-entropy may keep less than the
// log-softmax; that is not modelled. torchtune's LinearCrossEntropyLoss
// projects each chunk inside the loss and keeps less (its log-softmax for
// the tokens that count alone): priced as this, above it. Megatron's
// vocab-parallel loss (tp > 1) is not chunked (refused where the plan is
// resolved); a BERT masked-LM, seq2seq or multi-token-prediction loss takes
// the chunks as the LM head's does. dtsim validate does not run it.
// Note [Fused linear cross-entropy]
// Fine-tuning frameworks replace the LM head's GEMM and F.cross_entropy by
// one kernel that never holds the logits whole (plan.loss_kernel; axolotl's
// liger_fused_linear_cross_entropy and cut_cross_entropy, transformers'
// use_liger_kernel, TRL's loss_type):
// - liger_fused_linear: Liger's LigerFusedLinearCrossEntropyFunction
//   (liger_kernel/ops/fused_linear_cross_entropy.py) makes the gradients in
//   the forward. For each chunk of tokens it projects the chunk's logits,
//   runs the cross-entropy kernel, which writes the logits' gradient over
//   them in place, and multiplies it out into the input's gradient and the
//   weight's (addmm): the forward runs the projection, a pass over the
//   logits and both gradient GEMMs; it keeps grad_input (e t h, where the
//   unfused head keeps the projection's input: the same bytes) and no
//   logits, and the weight's gradient (e v h, zeros_like(weight), until the
//   backward returns it; none for a frozen head); the backward only scales
//   both by the loss's. A chunk is next_power_of_2(ceil(t / ceil(v / h)))
//   tokens (liger_chunk_tokens): at once the forward holds its logits, e v
//   a token (their gradient written over them), and then its input's
//   gradient, e h a token, freed once copied, and for a trained head the
//   product of its gradient and input, e v h, with that product's fp32
//   copy, 4 v h, added to grad_weight (grad_weight += torch.mm(...).float():
//   Liger since 0.6.2, August 2025; the fp32 addmm path is
//   accum_dtype=fp32's alone): liger_workspace. Dtsim prices no forward
//   transient, so this one, the head's last, is priced as its backward's
//   workspace, which follows it at once (the last stage's forward of a
//   micro-batch runs straight into its backward).
// - cut_cross_entropy: Apple's Cut Cross-Entropy (Wijmans et al. 2025,
//   cut_cross_entropy/cce.py) computes the logits block by block on chip
//   and keeps their log-sum-exp alone (4 t); its backward recomputes them
//   block by block for both gradients: one projection more than unfused,
//   priced whole (its gradient filtering skips blocks whose softmax is
//   below bf16's resolution, so this is an upper bound).
// - chunked_nll: TRL's SFTTrainer default loss_type (trl/trainer/
//   sft_trainer.py _chunked_cross_entropy_loss, read at f2cd5771) copies the
//   head's input in label order (hidden[order], e t h, with the reordered
//   labels, 17 t: what the loss keeps) and takes the tokens 256 at a time
//   (_CHUNKED_LM_HEAD_CHUNK_SIZE), each chunk under non-reentrant
//   activation checkpointing: its logits (h.float() @ w.float().t(), in the
//   working type under autocast), their fp32 log-softmax, the loss, the
//   argmax and the entropy (-(exp(log_p) x log_p).sum) are made and dropped
//   in the forward, and made again in the backward before the chunk's
//   gradients: one projection more than unfused, as Cut Cross-Entropy's,
//   but through memory. Each pass over a chunk's logits of g bytes reads
//   them twice (log-softmax, argmax) and the fp32 log-softmax and its
//   exponential four times, and writes three fp32 tensors: (2g + 16) t v
//   read, 12 t v written. The weight is made ready a chunk at a time
//   (`.wcast`, per v h): under autocast a weight held in fp32 is cast to
//   16 bits (4 + e; autocast caches the cast of a trained leaf for the
//   forward, so there once; the backward's reruns each cast again), a
//   16-bit one made fp32 by w.float() and cast back (2e + 8). The
//   backward of one chunk holds what its recomputed forward saved (the
//   weight's cast, e v h; the log-softmax and its exponential, 8 c v)
//   beside the fp32 gradients of both and the logits' own: (16 + g) c v
//   + e v h at once, c = min(256, t), and a trained head's gradient
//   arriving a chunk at a time ((e + 4) v h in 16 bits, as Liger's).
// - chunked_nll_fp32: the same without autocast (DeepSpeed's engine, which
//   accelerate runs without it, or a 16-bit model with neither bf16 nor
//   fp16): w.float() (e + 4 per v h a chunk, both passes) and fp32 GEMMs
//   and logits (g = 4), the fp32 copy of the weight held in the backward.
//   (A weight held in fp32 needs no w.float() and makes no copy.) Under
//   ZeRO-3 each chunk gathers the head's weight again, in both passes
//   (maybe_gather_lm_head_ctx): not priced, and said by the TRL reader.
//   The weight is 16-bit under DeepSpeed's module and FSDP's gathered
//   param_dtype, whatever the master copies (WorkloadShape::fp32_weights).
//   For both, the tokens whose label is -100 (a prompt under
//   completion_only_loss) are dropped before the projection; dtsim prices
//   every token.
// The first three keep nothing of t v, and the backward holds no fp32 logits (the 8 t v
// of F.cross_entropy's backward). Under tensor parallelism (a vocab-
// parallel loss) none runs: refused where the plan is resolved. The MFU
// counts the model's FLOPs as the unfused head's. The head's signature says
// lk=, so a profile that measured the unfused loss does not price it; dtsim
// validate does not run them. A head that Gemma 2 soft-caps or Granite
// scales takes that inside the fused kernel (Liger's softcap).
std::int64_t liger_chunk_tokens(std::int64_t t, std::int64_t v, std::int64_t h) {
  const std::int64_t inc = (v + h - 1) / h;  // inc_factor = cdiv(V, H)
  const std::int64_t want = (t + inc - 1) / inc;
  std::int64_t chunk = 1;
  while (chunk < want) chunk <<= 1;  // next_power_of_2(cdiv(BT, inc_factor))
  return std::min(chunk, t);
}

Bytes liger_workspace(std::int64_t t, std::int64_t v, std::int64_t h, int e, bool weight_trained) {
  const std::int64_t chunk = liger_chunk_tokens(t, v, h);
  // The chunk's logits, beside the input gradient's product (freed once
  // copied into grad_input) and then the weight gradient's product with
  // its fp32 copy (.float() copies nothing in fp32).
  const Bytes wgrad = weight_trained ? static_cast<Bytes>(e + (e < 4 ? 4 : 0)) * v * h : 0;
  return e * chunk * v + std::max<Bytes>(e * chunk * h, wgrad);
}

std::int64_t chunked_nll_tokens(std::int64_t t) { return std::min<std::int64_t>(256, t); }

int chunked_nll_prep_bytes(int e, bool fp32, bool weight_fp32) {
  if (fp32) return e < 4 && !weight_fp32 ? e + 4 : 0;  // w.float()
  if (e >= 4) return 0;                // fp32 throughout: nothing to cast
  return weight_fp32 ? 4 + e : 2 * e + 8;
}

Bytes chunked_nll_workspace(std::int64_t t, std::int64_t v, std::int64_t h, int e, bool fp32, bool weight_fp32, bool weight_trained) {
  const int g = fp32 ? 4 : e;
  // The weight's copy the chunk's GEMM keeps: its 16-bit cast, or w.float()
  // of a 16-bit weight.
  const Bytes copy = fp32 ? (e < 4 && !weight_fp32 ? 4 : 0) : (e < 4 ? e : 0);
  const Bytes wgrad = weight_trained ? static_cast<Bytes>(e + (e < 4 ? 4 : 0)) : 0;
  return static_cast<Bytes>(16 + g) * chunked_nll_tokens(t) * v + (copy + wgrad) * v * h;
}

bool fused_lm_loss(const sim::WorkloadShape& shape) {
  return shape.loss_kernel != sim::LossKernel::kCrossEntropy && !shape.model_flops && shape.tp <= 1;
}

Bytes lm_loss_saved(const sim::WorkloadShape& shape, std::int64_t t, std::int64_t v, std::int64_t h) {
  if (!fused_lm_loss(shape)) return 4 * t * v;
  // Liger's weight gradient, made in the forward (a frozen head's is not:
  // Note [Frozen weights]); Cut Cross-Entropy's log-sum-exp; TRL's
  // reordered copy of the input and labels.
  if (shape.loss_kernel == sim::LossKernel::kChunkedNll || shape.loss_kernel == sim::LossKernel::kChunkedNllFp32) {
    return static_cast<Bytes>(shape.act_bytes) * t * h + 17 * t;
  }
  return shape.loss_kernel == sim::LossKernel::kCutCrossEntropy ? 4 * t : shape.act_bytes * v * h;
}

void add_lm_loss(sim::Layer& head, const sim::WorkloadShape& shape, const std::string& name, std::int64_t t, std::int64_t v,
                 std::int64_t h) {
  const int e = shape.act_bytes;
  const bool sp = shape.sequence_parallel && shape.tp > 1;
  if (fused_lm_loss(shape)) {
    // Note [Fused linear cross-entropy].
    const std::vector<sim::Kernel> before = backward_of(head.forward);
    const bool liger = shape.loss_kernel == sim::LossKernel::kLigerFused;
    if (shape.loss_kernel == sim::LossKernel::kChunkedNll || shape.loss_kernel == sim::LossKernel::kChunkedNllFp32) {
      // The sorted copy of the input; then a chunk at a time the weight made
      // ready, the logits, their loss, argmax and entropy; all of it again
      // in the backward, then the chunk's gradients and the copy's scatter
      // back.
      const bool fp32 = shape.loss_kernel == sim::LossKernel::kChunkedNllFp32;
      const int g = fp32 ? 4 : e;
      const std::int64_t chunks = (t + chunked_nll_tokens(t) - 1) / chunked_nll_tokens(t);
      head.forward.push_back(memory_op(name + ".sort", sim::KernelKind::kElementwise, e * t * h, e * t * h));
      const int prep = chunked_nll_prep_bytes(e, fp32, shape.fp32_weights);
      sim::Kernel wcast = memory_op(name + ".wcast", sim::KernelKind::kElementwise, static_cast<Bytes>(prep) * v * h, 0, 1.0 * v * h);
      wcast.repeat = chunks;
      sim::Kernel wcast_fwd = wcast;
      // A trained fp32 leaf's cast is cached for the forward (Note [Fused linear cross-entropy]).
      if (!fp32 && shape.fp32_weights) wcast_fwd.repeat = 1;
      if (prep > 0) head.forward.push_back(wcast_fwd);
      sim::Kernel proj = gemm(name, t, v, h, g);
      proj.fp32 = fp32 && e < 4;
      head.forward.push_back(proj);
      const sim::Kernel ce = memory_op(name + ".ce", sim::KernelKind::kElementwise, (2 * g + 16) * t * v, 12 * t * v, 10.0 * t * v);
      head.forward.push_back(ce);
      sim::Kernel again = proj;
      again.name = name + ".recompute";
      sim::Kernel ce_again = ce;
      ce_again.name = name + ".ce.recompute";
      sim::Kernel dgrad = gemm(name + ".dgrad", t, h, v, g), wgrad = gemm(name + ".wgrad", v, h, t, g);
      dgrad.fp32 = wgrad.fp32 = proj.fp32;
      head.backward.clear();
      if (prep > 0) {
        wcast.name = name + ".wcast.recompute";
        head.backward.push_back(wcast);
      }
      head.backward.insert(head.backward.end(),
                           {again, ce_again, memory_op(name + ".ce.bwd", sim::KernelKind::kElementwise, 8 * t * v, (4 + g) * t * v, 3.0 * t * v),
                            dgrad, wgrad, memory_op(name + ".sort.bwd", sim::KernelKind::kElementwise, e * t * h, 2 * e * t * h)});
      head.backward_workspace_bytes = chunked_nll_workspace(t, v, h, e, fp32, shape.fp32_weights, true);
      head.backward.insert(head.backward.end(), before.begin(), before.end());
      head.signature += fp32 ? ",lk=chunked32" : ",lk=chunked";
      head.output_bytes = 4;
      return;
    }
    head.forward.push_back(gemm(name, t, v, h, e));
    if (liger) {
      head.forward.push_back(memory_op(name + ".ce", sim::KernelKind::kElementwise, e * t * v, e * t * v, 5.0 * t * v));
      head.forward.push_back(gemm(name + ".dgrad", t, h, v, e));
      head.forward.push_back(gemm(name + ".wgrad", v, h, t, e));
      // Both gradients scaled by the loss's (1 / accumulation steps under
      // transformers' Trainer: not 1).
      head.backward = {memory_op(name + ".scale", sim::KernelKind::kElementwise, e * t * h, e * t * h, 1.0 * t * h),
                       memory_op(name + ".wgrad.scale", sim::KernelKind::kElementwise, e * v * h, e * v * h, 1.0 * v * h)};
      // The forward's chunk at once, priced where the head's backward
      // follows it: its logits (their gradient in place), its input's
      // gradient, and the weight gradient's product and fp32 copy.
      head.backward_workspace_bytes = liger_workspace(t, v, h, e, true);
    } else {
      // The logits stay on chip: the GEMMs write no t v.
      head.forward.back().bytes -= e * t * v;
      head.forward.push_back(memory_op(name + ".lse", sim::KernelKind::kNorm, 0, 4 * t, 5.0 * t * v));
      sim::Kernel again = head.forward[head.forward.size() - 2];
      again.name = name + ".recompute";
      head.backward = {again, memory_op(name + ".ce.bwd", sim::KernelKind::kElementwise, 4 * t, 0, 5.0 * t * v),
                       gemm(name + ".dgrad", t, h, v, e), gemm(name + ".wgrad", v, h, t, e)};
      head.backward_workspace_bytes = 0;
    }
    head.backward.insert(head.backward.end(), before.begin(), before.end());
    head.signature += liger ? ",lk=liger" : ",lk=cce";
    head.output_bytes = 4;
    return;
  }
  head.forward.push_back(gemm(name, t, v, h, e));
  // Cross-entropy upcasts the logits and keeps the fp32 log-softmax.
  head.forward.push_back(memory_op("log_softmax", sim::KernelKind::kNorm, e * t * v, 4 * t * v, 5.0 * t * v));
  head.forward.push_back(memory_op("nll", sim::KernelKind::kElementwise, 4 * t, 4 * t));
  head.backward = backward_of(head.forward);
  // The logits themselves are not saved (a loop that keeps HF's
  // outputs.logits alive holds e t v more). Backward holds the fp32
  // gradients of the log-softmax and of the logits: 8 t v (measured by
  // dtsim validate: on a CPU in fp32, and on an H100 in fp16, 1,572 MiB for
  // gpt2 at 4 x 1024 tokens, where 8 t v is 1,570 MiB: the 16-bit cast of
  // the logits' gradient comes once the fp32 ones are gone).
  head.backward_workspace_bytes = 8 * t * v;
  if (const std::int64_t chunks = std::max<std::int64_t>(1, shape.loss_chunks); chunks > 1 && shape.tp <= 1) {
    // Note [Chunked loss]: one chunk's gradients at a time.
    head.backward_workspace_bytes = (8 * t * v + chunks - 1) / chunks;
    head.signature += ",lchunks=" + std::to_string(chunks);
  }
  head.output_bytes = 4;  // the scalar loss
  if (shape.tp > 1 && shape.megatron_loss) {
    // Megatron's vocab-parallel cross-entropy (cross_entropy.py, and the
    // twin's Note [Vocab-parallel cross-entropy]) keeps the fp32 softmax in
    // the logits' buffer and turns it into their gradient in place. Its
    // backward then holds, above what the head saved: in 16-bit, the
    // gradient's cast to the logits' type (e t v), and once the fp32 one is
    // gone the GEMM's input gradient beside it (e t h); in fp32 the input
    // gradient beside the softmax. At tp 2, 4 x 128 tokens, fp32, the
    // twins of gpt2-tiny and llama-tiny rose 0.51 MB in the head's
    // backward: the weight's gradient (counted apart) and e t h, 0.26 MB
    // each; 8 t v would be 2.1 MB.
    head.backward_workspace_bytes = e < 4 ? e * t * v + std::max<Bytes>(0, e * t * h - 4 * t * v) : e * t * h;
  }
  if (shape.tp > 1) {
    // The head's input is gathered over the sequence (sp) and its gradient
    // summed over the ranks; vocab-parallel cross-entropy all-reduces the
    // max, the sum of exponentials and the target logit (4 bytes a token).
    if (sp) head.tp_forward.push_back({sim::CollectiveOp::kAllGather, e * t * h, 1});
    head.tp_forward.push_back({sim::CollectiveOp::kAllReduce, 4 * t, 3});
    head.tp_backward.push_back({sp ? sim::CollectiveOp::kReduceScatter : sim::CollectiveOp::kAllReduce, e * t * h, 1});
  }
}

sim::Layer classifier_head(const std::string& name, const sim::WorkloadShape& shape, std::int64_t rows, std::int64_t in,
                           std::int64_t classes) {
  const int e = shape.act_bytes;
  check_size(static_cast<double>(rows) * static_cast<double>(std::max(in, classes)) * 4, "classifier's input");
  sim::Layer l;
  l.name = name;
  l.kind = sim::LayerKind::kHead;
  l.signature = "fc.head:in=" + std::to_string(in) + ",c=" + std::to_string(classes);
  l.params = in * classes + classes;
  l.param_tensors = 2;
  l.largest_param_tensor = in * classes;
  l.forward.push_back(gemm(name + ".linear", rows, classes, in, e));
  l.forward.push_back(memory_op("log_softmax", sim::KernelKind::kNorm, e * rows * classes, 4 * rows * classes, 5.0 * rows * classes));
  l.forward.push_back(memory_op("nll", sim::KernelKind::kElementwise, 4 * rows, 4));
  l.backward = backward_of(l.forward);
  l.saved_bytes = e * rows * in + 4 * rows * classes;
  l.output_bytes = 4;
  return l;
}

std::string attention_signature(const sim::WorkloadShape& shape) {
  // cpag=1: the all-gather's attention, against the p2p ring's (Note [Ring attention]).
  return (shape.cp > 1 ? ",cp=" + std::to_string(shape.cp) + (shape.cp_all_gather ? ",cpag=1" : "") : std::string()) +
         (shape.flash_attention ? ",flash=1" : "");
}

std::int64_t local_tokens(const sim::WorkloadShape& shape) { return shape.micro_batch * (shape.seq_len / shape.cp); }

// Note [Activation memory]
// Korthikanti et al. 2022, "Reducing Activation Recomputation in Large
// Transformer Models", section 4.1 and Table 2: with 16-bit activations and
// 1-byte dropout masks one layer keeps
//   attention  11 sbh + 5 a s^2 b  (QKV input 2sbh; Q and K 4sbh; softmax
//              output 2as^2b; its dropout mask as^2b; dropout output 2as^2b;
//              V 2sbh; projection input 2sbh; dropout mask sbh)
//   MLP        19 sbh              (fc1 input 2sbh; GeLU input 8sbh; fc2 input
//              8sbh; dropout mask sbh)
//   LayerNorms  4 sbh
// i.e. sbh (34 + 5 a s / h). Here each 2 becomes e (the activation element
// size: 4 in fp32), the MLP's 4h becomes f, masks take shape.mask_bytes (1,
// or e where dropout multiplies by a mask of the input's dtype), and without
// dropout the masks and the attention dropout output go.
// Under tensor parallelism t (section 4.2.1) everything between the column-
// and the row-parallel linear is split: Q, K, V, the projection input, GeLU
// and fc2 inputs (24 sbh) and the attention core (5as^2b), leaving 10 sbh
// replicated (QKV and fc1 inputs, the two LayerNorm inputs, two dropout
// masks): sbh (10 + 24/t + 5as/(ht)). Sequence parallelism (4.2.2) splits the
// 10 sbh too: sbh/t (34 + 5as/h). Selective recompute (section 5) drops the
// attention core, 5as^2b/t: sbh (10 + 24/t) or 34 sbh/t. Fused attention
// keeps no core but its log-sum-exp (Note [Attention as it runs]); context
// parallelism divides s by cp in every term.
//
// Note [FP8 activations]
// Under FP8 training the GEMMs run in FP8 and Transformer Engine's Linear
// and LayerNormLinear save the FP8 copy of their input for the weight
// gradient (transformer_engine/pytorch/module/linear.py: the quantized
// `inputmat` is what ctx.save_for_backward keeps), 1 byte an element, where
// bf16 training keeps e. Everything else (norm inputs, Q, K, V for
// attention, activation inputs) stays in e bytes.
sim::Layer transformer_layer(const std::string& name, const sim::WorkloadShape& shape, std::int64_t h,
                             std::int64_t a, std::int64_t f, bool dropout, bool causal) {
  using sim::KernelKind;
  const int e = shape.act_bytes;
  const std::int64_t tp = shape.tp;
  const bool sp = shape.sequence_parallel && tp > 1;
  check_size(static_cast<double>(local_tokens(shape)) * std::max(h, f) * e, "activations");
  const std::int64_t t = local_tokens(shape);  // tokens on this rank
  const std::int64_t d = h / a;  // head width
  const std::int64_t ap = a / tp, fp = f / tp, hp = h / tp;  // this rank's heads, MLP and attention widths
  const Bytes th = t * h, tf = t * fp;
  // LayerNorm, dropout and residual ops run on the whole sequence, or on this
  // rank's 1/t of it under sequence parallelism.
  const Bytes tn = sp ? th / tp : th;
  const AttentionCore core = attention_core(shape, ap, ap, d, causal, dropout);
  sim::Layer l;
  l.name = name;
  l.kind = sim::LayerKind::kTransformer;
  l.params = (4 * h * h + 2 * h * f + 3 * h + f) / tp + 6 * h;
  l.sp_params = sp ? 6 * h : 0;  // the two LayerNorms' weights and biases, the two row-parallel biases
  // Two LayerNorms, the fused QKV, the attention output and the two MLP
  // linears, each a weight and a bias.
  l.param_tensors = 12;
  // As DeepSpeed's ZeRO-3 gathers them (Note [ZeRO-3 modules] in
  // sim/src/lowering/zero3_coordinator.hpp): the column-parallel weights
  // and biases split, the row-parallel biases and the norms whole.
  l.modules = {{"ln_1", {h, h}, ""},
               {"attn.qkv", {3 * h * h / tp, 3 * h / tp}, ""},
               {"attn.proj", {h * h / tp, h}, ""},
               {"ln_2", {h, h}, ""},
               {"mlp.fc1", {h * f / tp, f / tp}, ""},
               {"mlp.fc2", {f * h / tp, h}, ""}};
  std::vector<sim::Kernel> pre, post;
  pre.push_back(memory_op("ln_1", KernelKind::kNorm, e * tn, e * tn, 5.0 * tn));
  pre.push_back(gemm("attn.qkv", t, 3 * hp, h, e));
  post.push_back(gemm("attn.proj", t, h, hp, e));
  post.push_back(memory_op("attn.residual", KernelKind::kElementwise, 2 * e * tn, (e + (dropout ? 1 : 0)) * tn, 2.0 * tn));
  post.push_back(memory_op("ln_2", KernelKind::kNorm, e * tn, e * tn, 5.0 * tn));
  post.push_back(gemm("mlp.fc1", t, fp, h, e));
  post.push_back(memory_op("mlp.gelu", KernelKind::kElementwise, e * tf, e * tf, 8.0 * tf));
  post.push_back(gemm("mlp.fc2", t, h, fp, e));
  post.push_back(memory_op("mlp.residual", KernelKind::kElementwise, 2 * e * tn, (e + (dropout ? 1 : 0)) * tn, 2.0 * tn));
  join_kernels(l, pre, core, post);
  split_for_tp_overlap(l, shape);
  // Note [Activation memory]
  const Bytes mask = dropout ? shape.mask_bytes : 0;
  // A saved GEMM input takes shape.saved_gemm_input() (Note [FP8 activations]).
  const Bytes replicated = tn * (2 * e + 2 * mask) + 2 * shape.saved_gemm_input(tn);                        // 10 sbh
  const Bytes split = (th / tp) * 3 * e + shape.saved_gemm_input(th / tp) + e * tf + shape.saved_gemm_input(tf);  // 24 sbh / t
  l.saved_bytes = replicated + split + core.saved;
  l.attention_core_bytes = core.recomputable ? core.saved : 0;
  // Of Megatron's recompute modules (Note [Recompute modules] in
  // model.hpp) this block describes the attention core alone.
  l.recompute_described = core.recomputable ? sim::kRecomputeCoreAttn : 0;
  if ((shape.recompute_modules & sim::kRecomputeCoreAttn) == 0) {
    l.attention_core_bytes = 0;
    l.attention_core.clear();
  }
  // Note [Offload modules]: Megatron-Core's GPT block under Transformer
  // Engine (its norms fused into the next linears, so no norm module):
  // linear_qkv keeps the norm's input and its output; the core, Q, K and V
  // and its own keeps; linear_proj its input.
  const std::size_t core_first = pre.size(), core_end = pre.size() + core.forward.size();
  add_offload_group(l, shape, sim::kOffloadQkvLinear, 0, core_first, {{tn, e * tn}, {tn, shape.saved_gemm_input(tn)}});
  {
    const std::int64_t qe = th / tp;
    const std::int64_t per = shape.flash_attention ? 4 : e;  // a fused core keeps its fp32 log-sum-exp
    add_offload_group(l, shape, sim::kOffloadCoreAttn, core_first, core_end,
                      {{qe, e * qe}, {qe, e * qe}, {qe, e * qe}, {core.saved / per, core.saved}});
  }
  add_offload_group(l, shape, sim::kOffloadAttnProj, core_end, core_end + 1, {{th / tp, shape.saved_gemm_input(th / tp)}});
  l.output_bytes = e * tn;
  // Attention and MLP: one column/row pair each, forward and backward.
  l.tp_forward = tp_pairs(shape, e * th, 2);
  l.tp_backward = tp_pairs(shape, e * th, 2);
  return l;
}

// Note [Userbuffers' chunks]
// Megatron-Core's --tp-comm-overlap hands sequence parallelism's
// collectives to Transformer Engine's userbuffers, which overlap each with
// the GEMM beside it by splitting the GEMM
// (transformer_engine/common/comm_gemm_overlap/comm_gemm_overlap.cpp):
//   - ring exchange (CommOverlapP2PBase::split_overlap_ag and
//     split_overlap_rs): tp GEMMs, each of one rank's m / tp rows against
//     the whole weight, issued one after another while the next chunk moves
//     to the neighbouring rank;
//   - pipeline (CommOverlapBase::split_overlap_rs): num_splits (4) GEMMs,
//     each chunk's output reduce-scattered as the next multiplies;
//   - bulk: the GEMM whole, an unrelated collective beside it;
// and where a layer's configuration says set_sm_margin, its GEMMs run on
// the SMs its collective's num_sm leave (CommOverlapCore::_math_sms).
// Which layer takes which, PlanSpec::tp_comm_overlap_cfg:
//   - `te`: Transformer Engine's `initialize_ub` defaults
//     (transformer_engine/pytorch/module/base.py), what Megatron-LM's
//     --tp-comm-overlap runs without --tp-comm-overlap-cfg: ring exchange
//     for qkv_fprop, fc1_fprop, proj_dgrad and fc2_dgrad; pipeline for
//     proj_fprop and fc2_fprop, beside 16 SMs; bulk for qkv and fc1's dgrad
//     and wgrad, beside 16 SMs (non-ring methods default to num_sm 16 and
//     set_sm_margin); proj and fc2's wgrad whole;
//   - `ring` (the default): Megatron-Bridge's FP8 configurations on H100
//     and B200 (src/megatron/bridge/training/comm_overlap.py, e.g.
//     userbuffers_fp8_h100_h16384_tp8_cp2_mbs1_seqlen8192, which Llama 3.1
//     405B's recipe runs): ring exchange for proj_fprop and fc2_fprop too,
//     with one SM for it, and the bulk overlaps without a margin;
//   - `async_tp`: torch's AsyncTP (torchtitan's enable_async_tensor_parallel,
//     torch/_inductor/fx_passes/micro_pipeline_tp.py), which fuses every
//     all-gather feeding a matmul and every matmul feeding a reduce-scatter
//     into tp chunks: the four forward GEMMs, the row-parallel dgrads (the
//     gradient all-gathered) and the column-parallel dgrads (reduce-
//     scattered); the wgrads whole.
// dtsim prices a chunked GEMM as its chunks of m / splits rows, each at the
// efficiency of its own shape (Kernel::splits), the FP8 cast of the input
// once, and a GEMM beside a margin on the SMs left (Kernel::sm_margin). A
// chunk of few rows fills the SMs in fewer, emptier waves: Llama 3.1 405B
// at tp 8 and cp 2 multiplies chunks of 4096 / 8 = 512 tokens, Llama 3 70B
// at tp 4 chunks of 2048. Megatron-Bridge's BF16 configurations (pipeline
// beside 8-32 SMs, bulk without a margin) are none of the three. A layer a
// profile measured is priced as measured, whole (calibration runs no
// userbuffers).
void split_for_tp_overlap(sim::Layer& l, const sim::WorkloadShape& shape) {
  if (!shape.tp_comm_overlap || shape.tp <= 1) return;
  static const std::set<std::string, std::less<>> column = {"attn.qkv", "mlp.fc1", "mlp.gate_up", "mlp.up"};
  static const std::set<std::string, std::less<>> row = {"attn.proj", "attn.o_proj", "mlp.fc2", "mlp.down"};
  const sim::TpOverlapCfg cfg = shape.tp_overlap_cfg;
  constexpr int kTeSms = 16;       // TE's num_sm for its pipeline and bulk overlaps
  constexpr int kTeSplits = 4;     // and its pipeline's num_splits
  const auto apply = [&](std::vector<sim::Kernel>& ks, bool forward) {
    for (sim::Kernel& k : ks) {
      if (k.kind != sim::KernelKind::kGemm) continue;
      // A backward GEMM is its forward's name with ".dgrad" or ".wgrad".
      std::string_view name = k.name;
      const bool dgrad = !forward && name.ends_with(".dgrad");
      if (!forward) {
        if (!dgrad && !name.ends_with(".wgrad")) continue;
        name.remove_suffix(6);
      }
      const bool is_column = column.contains(name), is_row = row.contains(name);
      if (!is_column && !is_row) continue;
      if (forward) {
        if (is_row && cfg == sim::TpOverlapCfg::kTe) {
          k.splits = kTeSplits;
          k.sm_margin = kTeSms;
        } else {
          k.splits = shape.tp;
        }
      } else if (dgrad && is_row) {
        k.splits = shape.tp;
      } else if (dgrad && cfg == sim::TpOverlapCfg::kAsyncTp) {
        k.splits = shape.tp;
      } else if (is_column && cfg == sim::TpOverlapCfg::kTe) {
        k.sm_margin = kTeSms;  // bulk beside 16 SMs: the dgrad and the wgrad
      }
    }
  };
  apply(l.forward, true);
  apply(l.backward, false);
  apply(l.attention_core, true);
  apply(l.op_recompute, true);
}

void add_offload_group(sim::Layer& l, const sim::WorkloadShape& shape, std::uint16_t module, std::size_t first, std::size_t end,
                       std::vector<sim::SavedTensor> tensors) {
  l.offload_described = static_cast<std::uint16_t>(l.offload_described | module);
  if ((shape.offload_modules & module) == 0) return;
  std::erase_if(tensors, [](const sim::SavedTensor& t) { return t.bytes <= 0 || t.elements <= 0; });
  l.offload_groups.push_back({module, first, end, std::move(tensors)});
  // Groups in the order the forward runs them (their last kernels').
  std::stable_sort(l.offload_groups.begin(), l.offload_groups.end(),
                   [](const sim::OffloadGroup& a, const sim::OffloadGroup& b) { return a.end < b.end; });
}

std::size_t kernel_index(const sim::Layer& l, const std::string& name) {
  const auto it = std::find_if(l.forward.begin(), l.forward.end(), [&](const sim::Kernel& k) { return k.name == name; });
  return static_cast<std::size_t>(it - l.forward.begin());
}

void join_kernels(sim::Layer& l, const std::vector<sim::Kernel>& pre, const AttentionCore& core,
                  const std::vector<sim::Kernel>& post) {
  l.forward.reserve(pre.size() + core.forward.size() + post.size());
  l.forward = pre;
  l.forward.insert(l.forward.end(), core.forward.begin(), core.forward.end());
  l.forward.insert(l.forward.end(), post.begin(), post.end());
  l.backward = backward_of(post);
  l.backward.insert(l.backward.end(), core.backward.begin(), core.backward.end());
  const auto before = backward_of(pre);
  l.backward.insert(l.backward.end(), before.begin(), before.end());
  if (core.recomputable) l.attention_core = core.forward;
  l.cp_forward = core.cp_forward;
  l.cp_backward = core.cp_backward;
}

}  // namespace dtsim::models::detail
