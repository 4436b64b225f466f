// The Llama family of dense decoders (HuggingFace LlamaForCausalLM, and
// Mistral, Qwen2 and Qwen3, which differ from it only in biases, q/k norms
// and sliding windows): token embedding, n pre-RMSNorm blocks of grouped-
// query attention with rotary positions and a SwiGLU MLP, a final RMSNorm
// and an LM head (tied to the embedding or not).
#include <memory>

#include "dtsim/models/models.hpp"
#include "layers.hpp"

namespace dtsim::models {
namespace {

using namespace detail;

// Note [Llama activations]
// What PyTorch's autograd keeps for one block as HuggingFace writes it
// (modeling_llama.py), t tokens on this rank, e-byte activations, g bytes
// for a saved GEMM input (e, or 1 under FP8: Note [FP8 activations]):
//   RMSNorm (x2)   x.to(float32) kept by pow and mul (4 th), rsqrt (4 t), the
//                  normalised x.to(dtype) kept by the weight's mul (e th);
//                  its output is the next GEMM's input (g th)
//   attention      Q, K, V after rotary (rotary keeps only cos and sin),
//                  the core (Note [Attention as it runs]; HF's eager softmax
//                  runs in fp32: fp32_softmax), the o_proj input (a
//                  contiguous copy of the heads' output; under fused
//                  attention its output O is kept too)
//   q/k norms      (Qwen3) RMSNorm over each head: (4 + e) per element
//   SwiGLU         gate output (kept by silu), silu's output and up's output
//                  (kept by their product), down_proj's input: 3e + g per
//                  element of the t x f intermediate
// Fused kernels keep less: Transformer Engine's and Apex's RMSNorm keep the
// input and rsqrt (e th + 4 t), Megatron-Core's fused SwiGLU keeps gate and
// up only (2e per element); dtsim prices the composite ops that HuggingFace,
// torchtitan without compile and dtsim validate's LibTorch twins run.
class Llama final : public ZooModel {
 public:
  explicit Llama(LlamaConfig c) : c_(std::move(c)) {
    if (c_.kv_heads == 0) c_.kv_heads = c_.heads;
    if (c_.head_dim == 0) c_.head_dim = c_.hidden / c_.heads;
  }
  std::string name() const override { return c_.name; }
  int blocks() const override { return c_.layers; }
  int layer_count() const override { return c_.layers + 2; }  // embedding, blocks, head
  std::int64_t max_seq_len() const override { return c_.seq_len; }
  std::string tp_error(int tp) const override {
    if (c_.kv_heads % tp != 0) {
      return std::to_string(c_.kv_heads) + " key/value heads (num_key_value_heads) are not divisible by tp=" + std::to_string(tp);
    }
    return transformer_tp_error(tp, c_.heads, c_.intermediate);
  }
  std::string cp_error(int) const override { return ""; }

  std::int64_t parameters() const override {
    // HuggingFace counts: embed_tokens V h, blocks, norm h, lm_head V h (untied).
    return c_.vocab * c_.hidden + c_.layers * block_params(1) + c_.hidden + (c_.tied_head ? 0 : c_.vocab * c_.hidden);
  }

  std::vector<sim::Layer> layers(const sim::WorkloadShape& shape) const override {
    const std::int64_t h = c_.hidden, tp = shape.tp;
    const int e = shape.act_bytes;
    const bool sp = shape.sequence_parallel && tp > 1;
    const std::int64_t v = (c_.vocab + tp - 1) / tp;  // vocab-parallel rows (Megatron-LM)
    const std::int64_t t = local_tokens(shape);
    check_size(static_cast<double>(t) * static_cast<double>(v) * 4, "logits");
    const std::int64_t tn = sp ? t / tp : t;
    const std::string tps = tp > 1 ? ",tp=" + std::to_string(tp) : "";
    std::vector<sim::Layer> out;
    out.reserve(static_cast<std::size_t>(c_.layers) + 2);

    sim::Layer emb;
    emb.name = "embed_tokens";
    emb.kind = sim::LayerKind::kEmbedding;
    emb.signature = "llama.embed:h=" + std::to_string(h) + ",v=" + std::to_string(c_.vocab) + tps;
    emb.params = v * h;
    emb.param_tensors = 1;
    emb.forward.push_back(memory_op("embed.gather", sim::KernelKind::kEmbedding, e * t * h + 8 * t, e * t * h));
    emb.backward.push_back(memory_op("embed.scatter_add", sim::KernelKind::kEmbedding, 2 * e * t * h, e * t * h));
    emb.output_bytes = e * tn * h;
    if (tp > 1) emb.tp_forward.push_back({sp ? sim::CollectiveOp::kReduceScatter : sim::CollectiveOp::kAllReduce, e * t * h, 1});
    out.push_back(std::move(emb));

    const std::string block = "llama.block:h=" + std::to_string(h) + ",a=" + std::to_string(c_.heads) +
                              ",kv=" + std::to_string(c_.kv_heads) + ",d=" + std::to_string(c_.head_dim) +
                              ",f=" + std::to_string(c_.intermediate) + ",qkvb=" + (c_.qkv_bias ? "1" : "0") +
                              ",ob=" + (c_.o_bias ? "1" : "0") + ",mb=" + (c_.mlp_bias ? "1" : "0") +
                              ",qkn=" + (c_.qk_norm ? "1" : "0") +
                              (c_.sliding_window > 0 ? ",sw=" + std::to_string(c_.sliding_window) : "") +
                              (tp > 1 ? tps + (sp ? ",sp=1" : "") : "") +
                              attention_signature(shape);
    const sim::Layer one = block_layer(shape);
    for (int i = 0; i < c_.layers; ++i) {
      out.push_back(one);
      out.back().name = "layers." + std::to_string(i);
      out.back().signature = block;
    }

    sim::Layer head;
    head.name = "norm+lm_head";
    head.kind = sim::LayerKind::kLmHead;
    head.signature = "llama.head:h=" + std::to_string(h) + ",v=" + std::to_string(c_.vocab) +
                     ",tied=" + (c_.tied_head ? "1" : "0") + tps;
    head.params = h + (c_.tied_head ? 0 : v * h);
    head.param_tensors = c_.tied_head ? 1 : 2;  // the norm's weight (and an untied lm_head weight)
    head.borrowed_params = c_.tied_head ? v * h : 0;
    head.forward.push_back(memory_op("norm", sim::KernelKind::kNorm, (e + 8) * tn * h, (e + 8) * tn * h, 4.0 * tn * h));
    add_lm_loss(head, shape, "lm_head", t, v, h);
    // The norm (Note [Llama activations]), the head GEMM's input (in bf16
    // under FP8: kernel_precision in sim) and the fp32 log-softmax.
    head.saved_bytes = (4 + e) * tn * h + 4 * tn + e * tn * h + 4 * t * v;
    out.push_back(std::move(head));
    return out;
  }

 private:
  /// One block's parameters on one of tp ranks: the column- and row-parallel
  /// weights and column biases split, the norms and o_proj's and
  /// down_proj's biases replicated (Megatron-LM's split).
  std::int64_t block_params(std::int64_t tp) const {
    const std::int64_t h = c_.hidden, a = c_.heads, kv = c_.kv_heads, d = c_.head_dim, f = c_.intermediate;
    std::int64_t split = h * (a + 2 * kv) * d + a * d * h + 3 * h * f;
    std::int64_t replicated = 2 * h;
    if (c_.qkv_bias) split += (a + 2 * kv) * d;
    if (c_.o_bias) replicated += h;
    if (c_.mlp_bias) split += 2 * f, replicated += h;
    if (c_.qk_norm) replicated += 2 * d;
    return split / tp + replicated;
  }

  sim::Layer block_layer(const sim::WorkloadShape& shape) const {
    using sim::KernelKind;
    const std::int64_t h = c_.hidden, tp = shape.tp, d = c_.head_dim;
    const int e = shape.act_bytes, g = shape.fp8 ? 1 : e;
    const bool sp = shape.sequence_parallel && tp > 1;
    const std::int64_t t = local_tokens(shape);
    check_size(static_cast<double>(t) * static_cast<double>(std::max(h, c_.intermediate)) * e, "activations");
    const std::int64_t al = c_.heads / tp, kvl = c_.kv_heads / tp, fl = c_.intermediate / tp;
    const Bytes th = t * h, tn = sp ? th / tp : th, tf = t * fl;
    const Bytes q = t * al * d, kv = t * kvl * d;  // elements of this rank's Q, and of K (or V)
    const AttentionCore core = attention_core(shape, al, kvl, d, true, false, c_.sliding_window, true);

    sim::Layer l;
    l.kind = sim::LayerKind::kTransformer;
    l.params = block_params(tp);
    l.param_tensors = 9 + (c_.qkv_bias ? 3 : 0) + (c_.o_bias ? 1 : 0) + (c_.mlp_bias ? 3 : 0) + (c_.qk_norm ? 2 : 0);
    // A composite RMSNorm reads and writes fp32 copies beside the input.
    auto norm = [&](const char* name, Bytes n) { return memory_op(name, KernelKind::kNorm, (e + 8) * n, (e + 8) * n, 4.0 * n); };
    std::vector<sim::Kernel> pre, post;
    pre.push_back(norm("input_layernorm", tn));
    pre.push_back(gemm("attn.qkv", t, (al + 2 * kvl) * d, h, e));
    if (c_.qk_norm) pre.push_back(norm("attn.qk_norm", q + kv));
    pre.push_back(memory_op("attn.rotary", KernelKind::kElementwise, 2 * e * (q + kv), e * (q + kv), 3.0 * static_cast<double>(q + kv)));
    post.push_back(gemm("attn.o_proj", t, h, al * d, e));
    post.push_back(memory_op("attn.residual", KernelKind::kElementwise, 2 * e * tn, e * tn, 1.0 * tn));
    post.push_back(norm("post_attention_layernorm", tn));
    post.push_back(gemm("mlp.gate_up", t, 2 * fl, h, e));
    post.push_back(memory_op("mlp.swiglu", KernelKind::kElementwise, 2 * e * tf, 2 * e * tf, 6.0 * tf));
    post.push_back(gemm("mlp.down", t, h, fl, e));
    post.push_back(memory_op("mlp.residual", KernelKind::kElementwise, 2 * e * tn, e * tn, 1.0 * tn));
    join_kernels(l, pre, core, post);

    // Note [Llama activations]
    const Bytes norms = 2 * ((4 + e) * tn + 4 * (tn / h) + g * tn);
    // Eager attention keeps the expanded (or gathered) K and V in the core
    // instead of the local ones.
    const bool local_kv = shape.flash_attention || (al == kvl && shape.cp == 1);
    Bytes attention = e * q + (local_kv ? 2 * e * kv : 0) + g * q + core.saved;
    if (shape.flash_attention) attention += e * q;  // O, kept by the fused kernel beside o_proj's input
    if (c_.qk_norm) attention += (4 + e) * (q + kv);
    l.saved_bytes = norms + attention + (3 * e + g) * tf;
    l.attention_core_bytes = core.recomputable ? core.saved : 0;
    l.output_bytes = e * tn;
    l.tp_forward = tp_pairs(shape, e * th, 2);
    l.tp_backward = tp_pairs(shape, e * th, 2);
    return l;
  }

  LlamaConfig c_;
};

}  // namespace

sim::ModelPtr make_llama(const LlamaConfig& c) { return std::make_shared<Llama>(c); }

}  // namespace dtsim::models
