// BERT (Devlin et al. 2019; HuggingFace BertModel): word + position + token
// type embeddings with LayerNorm, n post-LN encoder layers, and the pooler
// (dense + tanh over the first token), optionally a classifier on top.
#include <memory>

#include "dtsim/models/models.hpp"
#include "layers.hpp"

namespace dtsim::models {
namespace {

using namespace detail;

class Bert final : public ZooModel {
 public:
  explicit Bert(BertConfig c) : c_(std::move(c)) {}
  std::string name() const override { return c_.name; }
  int blocks() const override { return c_.layers; }
  // Embedding, blocks, the pooler and the classifier where configured.
  int layer_count() const override {
    return 1 + c_.layers + (c_.pooler ? 1 : 0) + (c_.num_labels > 0 ? 1 : 0) + (c_.mlm_head ? 1 : 0);
  }
  std::int64_t max_seq_len() const override { return c_.max_positions; }
  std::string tp_error(int tp) const override { return transformer_tp_error(tp, c_.heads, c_.intermediate); }

  std::int64_t parameters() const override {
    const std::int64_t h = c_.hidden, f = c_.intermediate;
    const std::int64_t embeddings = (c_.vocab + c_.max_positions + c_.type_vocab) * h + 2 * h;
    const std::int64_t block = 4 * h * h + 2 * h * f + 9 * h + f;
    const std::int64_t pooler = c_.pooler ? h * h + h : 0;
    const std::int64_t head = c_.num_labels > 0 ? h * c_.num_labels + c_.num_labels : 0;
    // BertOnlyMLMHead: transform dense (h^2 + h) and LayerNorm (2h); the
    // decoder's weight is the word embedding's, its bias its own (V).
    const std::int64_t mlm = c_.mlm_head ? h * h + 3 * h + c_.vocab : 0;
    return embeddings + c_.layers * block + pooler + head + mlm;
  }

  std::vector<sim::Layer> layers(const sim::WorkloadShape& shape) const override {
    const std::int64_t b = shape.micro_batch, s = shape.seq_len, h = c_.hidden;
    const int e = shape.act_bytes;
    const std::int64_t t = b * s;
    const std::int64_t tp = shape.tp;
    const bool sp = shape.sequence_parallel && tp > 1;
    const std::int64_t tn = sp ? t / tp : t;  // tokens of the norms and dropouts on this rank
    const std::int64_t vp = (c_.vocab + tp - 1) / tp;  // vocab-parallel word embedding rows
    std::vector<sim::Layer> out;

    sim::Layer emb;
    emb.name = "embeddings";
    emb.kind = sim::LayerKind::kEmbedding;
    emb.signature = "bert.embed:h=" + std::to_string(h) + ",v=" + std::to_string(c_.vocab) + ",p=" +
                    std::to_string(c_.max_positions) + ",t=" + std::to_string(c_.type_vocab) + ",drop=" + (c_.dropout ? "1" : "0");
    if (tp > 1) emb.signature += ",tp=" + std::to_string(tp);
    emb.params = (vp + c_.max_positions + c_.type_vocab) * h + 2 * h;
    emb.param_tensors = 5;  // word, position and type embeddings; LayerNorm weight and bias
    emb.sp_params = sp ? 2 * h : 0;  // the LayerNorm, on the rank's tokens
    emb.forward.push_back(memory_op("word.gather", sim::KernelKind::kEmbedding, e * t * h + 8 * t, e * t * h));
    // Note [Sequence parallel embeddings] (layers.cpp): added to every token, then split.
    emb.forward.push_back(memory_op("pos+type.add", sim::KernelKind::kElementwise, 3 * e * t * h, e * t * h, 2.0 * t * h));
    emb.forward.push_back(memory_op("ln", sim::KernelKind::kNorm, e * tn * h, e * tn * h, 5.0 * tn * h));
    if (c_.dropout) emb.forward.push_back(memory_op("drop", sim::KernelKind::kElementwise, e * tn * h, (e + 1) * tn * h, 1.0 * tn * h));
    emb.backward = backward_of(emb.forward);
    emb.saved_bytes = e * tn * h + (c_.dropout ? shape.mask_bytes * tn * h : 0);  // LayerNorm input, dropout mask
    emb.output_bytes = e * tn * h;
    if (tp > 1) emb.tp_forward.push_back({sim::CollectiveOp::kAllReduce, e * t * h, 1});
    if (sp) emb.tp_backward.push_back({sim::CollectiveOp::kAllGather, e * t * h, 1});
    out.push_back(std::move(emb));

    const std::string layer = "bert.layer:h=" + std::to_string(h) + ",a=" + std::to_string(c_.heads) +
                              ",f=" + std::to_string(c_.intermediate) + ",drop=" + (c_.dropout ? "1" : "0") +
                              (tp > 1 ? ",tp=" + std::to_string(tp) + (sp ? ",sp=1" : "") : "") + attention_signature(shape);
    // Every layer does the same work: built once, copied and renamed.
    sim::Layer one = transformer_layer("layer.0", shape, h, c_.heads, c_.intermediate, c_.dropout, false);
    one.param_tensors = 16;  // HuggingFace's BERT keeps query, key and value apart: 4 more than GPT-2's fused QKV
    {
      // Query, key and value as three modules (the QKV GEMM's time goes
      // with the first).
      const std::int64_t qkv = one.modules[1].tensors[0] / 3, bias = one.modules[1].tensors[1] / 3;
      one.modules[1].tensors = {qkv, bias};
      one.modules.insert(one.modules.begin() + 2, {{"attn.key", {qkv, bias}, ""}, {"attn.value", {qkv, bias}, ""}});
    }
    one.signature = layer;
    for (int i = 0; i < c_.layers; ++i) {
      out.push_back(one);
      out.back().name = "layer." + std::to_string(i);
    }
    if (c_.pooler) {
      sim::Layer p;
      p.name = "pooler";
      p.kind = sim::LayerKind::kPooler;
      p.signature = "bert.pooler:h=" + std::to_string(h);
      // Replicated on every tensor-parallel rank; with sp the first tokens are gathered.
      if (sp) p.tp_forward.push_back({sim::CollectiveOp::kAllGather, e * b * h, 1});
      p.params = h * h + h;
      p.param_tensors = 2;
      p.forward.push_back(gemm("pooler.dense", b, h, h, e));
      p.forward.push_back(memory_op("pooler.tanh", sim::KernelKind::kElementwise, e * b * h, e * b * h, 4.0 * b * h));
      p.backward = backward_of(p.forward);
      p.saved_bytes = 2 * e * b * h;
      p.output_bytes = e * b * h;
      out.push_back(std::move(p));
    }
    if (c_.mlm_head) {
      // HuggingFace's BertOnlyMLMHead over every token: dense, GeLU,
      // LayerNorm, then the decoder tied to the word embeddings (vocab-
      // parallel under tp as the embedding is) and the loss, priced as the
      // GPT-2 head's (gpt.cpp).
      sim::Layer m;
      m.name = "cls.predictions";
      m.kind = sim::LayerKind::kLmHead;
      m.signature = "bert.mlm:h=" + std::to_string(h) + ",v=" + std::to_string(c_.vocab) + (tp > 1 ? ",tp=" + std::to_string(tp) : "");
      m.params = h * h + 3 * h + vp;
      m.param_tensors = 5;  // dense weight and bias, LayerNorm weight and bias, decoder bias
      m.borrowed_params = vp * h;
      m.forward.push_back(gemm("transform.dense", t, h, h, e));
      m.forward.push_back(memory_op("transform.gelu", sim::KernelKind::kElementwise, e * t * h, e * t * h, 8.0 * t * h));
      m.forward.push_back(memory_op("transform.ln", sim::KernelKind::kNorm, e * t * h, e * t * h, 5.0 * t * h));
      add_lm_loss(m, shape, "decoder", t, vp, h);
      // The inputs of the dense, GeLU, LayerNorm and decoder, and the fp32
      // log-softmax.
      m.saved_bytes = 4 * e * t * h + lm_loss_saved(shape, t, vp, h);
      out.push_back(std::move(m));
    }
    if (c_.num_labels > 0) {
      sim::Layer c;
      c.name = "classifier";
      c.kind = sim::LayerKind::kHead;
      c.signature = "bert.classifier:h=" + std::to_string(h) + ",c=" + std::to_string(c_.num_labels);
      c.params = h * c_.num_labels + c_.num_labels;
      c.param_tensors = 2;
      c.forward.push_back(gemm("classifier", b, c_.num_labels, h, e));
      c.backward = backward_of(c.forward);
      c.saved_bytes = e * b * h + 4 * b * c_.num_labels;
      c.output_bytes = 4;
      out.push_back(std::move(c));
    }
    return out;
  }


 private:
  BertConfig c_;
};

}  // namespace

sim::ModelPtr make_bert(const BertConfig& c) { return std::make_shared<Bert>(c); }

}  // namespace dtsim::models
