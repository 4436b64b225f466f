// GPT-2 and generic GPT-style decoders (Radford et al. 2019; HuggingFace
// GPT2LMHeadModel): token + position embeddings, n pre-LN transformer blocks,
// a final LayerNorm and an LM head tied to the token embedding.
#include <memory>

#include "dtsim/models/models.hpp"
#include "layers.hpp"

namespace dtsim::models {
namespace {

using namespace detail;

class Gpt final : public ZooModel {
 public:
  explicit Gpt(GptConfig c) : c_(std::move(c)) {
    if (c_.ffn_hidden == 0) c_.ffn_hidden = 4 * c_.hidden;
  }
  std::string name() const override { return c_.name; }
  int blocks() const override { return c_.layers; }
  int layer_count() const override { return c_.layers + 2; }  // embedding, blocks, head
  std::int64_t max_seq_len() const override { return c_.seq_len; }
  std::string tp_error(int tp) const override { return transformer_tp_error(tp, c_.heads, c_.ffn_hidden); }
  std::string cp_error(int, int = 1) const override { return ""; }

  std::int64_t parameters() const override {
    // HuggingFace counts: wte V h + wpe P h + blocks + ln_f 2h (+ an untied head V h).
    const std::int64_t h = c_.hidden, f = c_.ffn_hidden;
    const std::int64_t block = 4 * h * h + 2 * h * f + 9 * h + f;
    return c_.vocab * h + c_.seq_len * h + c_.layers * block + 2 * h + (c_.tied_head ? 0 : c_.vocab * h);
  }

  std::vector<sim::Layer> layers(const sim::WorkloadShape& shape) const override {
    const std::int64_t b = shape.micro_batch, s = shape.seq_len, h = c_.hidden;
    const int e = shape.act_bytes;
    const std::int64_t tp = shape.tp;
    const bool sp = shape.sequence_parallel && tp > 1;
    // Megatron-LM's vocab-parallel embedding and head: each rank owns V/t
    // rows (the vocabulary padded up to a multiple of t).
    const std::int64_t v = (c_.vocab + tp - 1) / tp;
    check_size(static_cast<double>(b) * s * v * 4, "logits");
    const std::int64_t t = local_tokens(shape);
    const std::int64_t tn = sp ? t / tp : t;  // tokens of the norms and dropouts on this rank
    std::vector<sim::Layer> out;
    out.reserve(static_cast<std::size_t>(c_.layers) + 2);

    sim::Layer emb;
    emb.name = "wte+wpe";
    emb.kind = sim::LayerKind::kEmbedding;
    // The signature names the whole vocabulary; tp= says it is split.
    emb.signature = "gpt2.embed:h=" + std::to_string(h) + ",v=" + std::to_string(c_.vocab) + ",p=" + std::to_string(c_.seq_len) +
                    ",drop=" + (c_.dropout ? "1" : "0");
    if (tp > 1) emb.signature += ",tp=" + std::to_string(tp) + (sp ? ",sp=1" : "");
    emb.params = v * h + c_.seq_len * h;
    emb.param_tensors = 2;  // wte, wpe
    emb.modules = {{"wte.gather", {v * h}, ""}, {"wpe.add", {c_.seq_len * h}, ""}};
    emb.forward.push_back(memory_op("wte.gather", sim::KernelKind::kEmbedding, e * t * h + 8 * t, e * t * h));
    // Note [Sequence parallel embeddings]: the positions are added to every token, then split.
    emb.forward.push_back(memory_op("wpe.add", sim::KernelKind::kElementwise, 2 * e * t * h, e * t * h, 1.0 * t * h));
    if (c_.dropout) emb.forward.push_back(memory_op("drop", sim::KernelKind::kElementwise, e * tn * h, (e + 1) * tn * h, 1.0 * tn * h));
    // Backward: scatter-add into the embedding gradients.
    emb.backward.push_back(memory_op("wte.scatter_add", sim::KernelKind::kEmbedding, 2 * e * t * h, e * t * h));
    emb.backward.push_back(memory_op("wpe.reduce", sim::KernelKind::kElementwise, e * t * h, e * s * h, 1.0 * t * h));
    emb.saved_bytes = c_.dropout ? shape.mask_bytes * tn * h : 0;  // the dropout mask
    emb.output_bytes = e * tn * h;
    if (tp > 1) {
      // The partial lookups are summed; under sequence parallelism each
      // rank then keeps its tokens, and their gradient is all-gathered
      // (Note [Sequence parallel embeddings] in layers.cpp).
      emb.tp_forward.push_back({sim::CollectiveOp::kAllReduce, e * t * h, 1});
      if (sp) emb.tp_backward.push_back({sim::CollectiveOp::kAllGather, e * t * h, 1});
    }
    out.push_back(std::move(emb));

    const std::string block = "gpt2.block:h=" + std::to_string(h) + ",a=" + std::to_string(c_.heads) +
                              ",f=" + std::to_string(c_.ffn_hidden) + ",drop=" + (c_.dropout ? "1" : "0") +
                              (tp > 1 ? ",tp=" + std::to_string(tp) + (sp ? ",sp=1" : "") : "") + attention_signature(shape);
    // Every block does the same work: built once, copied and renamed.
    sim::Layer one = transformer_layer("h.0", shape, h, c_.heads, c_.ffn_hidden, c_.dropout, true);
    one.signature = block;
    for (int i = 0; i < c_.layers; ++i) {
      out.push_back(one);
      out.back().name = "h." + std::to_string(i);
    }

    sim::Layer head;
    head.name = "ln_f+lm_head";
    head.kind = sim::LayerKind::kLmHead;
    head.signature = "gpt2.head:h=" + std::to_string(h) + ",v=" + std::to_string(c_.vocab) + ",tied=" + (c_.tied_head ? "1" : "0") +
                     (tp > 1 ? ",tp=" + std::to_string(tp) + (sp ? ",sp=1" : "") : "");
    head.params = 2 * h + (c_.tied_head ? 0 : v * h);
    head.sp_params = sp ? 2 * h : 0;  // ln_f
    head.param_tensors = c_.tied_head ? 2 : 3;  // ln_f weight and bias (and an untied output weight)
    head.borrowed_params = c_.tied_head ? v * h : 0;
    head.modules = {{"ln_f", {h, h}, ""}, {"lm_head", {v * h}, c_.tied_head ? "wte.gather" : ""}};
    head.forward.push_back(memory_op("ln_f", sim::KernelKind::kNorm, e * tn * h, e * tn * h, 5.0 * tn * h));
    add_lm_loss(head, shape, "lm_head", t, v, h);
    // ln_f input and output (the head GEMM's input) and the fp32
    // log-softmax saved by cross-entropy.
    head.saved_bytes = 2 * e * tn * h + lm_loss_saved(shape, t, v, h);
    out.push_back(std::move(head));
    return out;
  }


 private:
  GptConfig c_;
};

}  // namespace

sim::ModelPtr make_gpt(const GptConfig& c) { return std::make_shared<Gpt>(c); }

}  // namespace dtsim::models
