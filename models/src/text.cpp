// Seed 003's text models: a neural bag of words (an embedding bag averaged
// over each text, then a linear classifier) and an LSTM or GRU
// encoder-decoder trained with teacher forcing.
#include <algorithm>
#include <memory>

#include "dtsim/models/models.hpp"
#include "dtsim/sim/error.hpp"
#include "layers.hpp"

// Note [Bag of words]
// torch.nn.EmbeddingBag(mode="mean") over b bags of s tokens: forward gathers
// the b s rows and averages each bag's; autograd keeps the indices, the
// offsets, offset2bag and the bag sizes (int64; aten/src/ATen/native/
// EmbeddingBag.cpp). Its backward (dense by default, sparse=False) makes a
// zero gradient of the whole table, V x d, and adds each bag's gradient,
// divided by its size, into its tokens' rows: the table's V d elements are
// written besides the rows.
//
// Note [Encoder-decoder]
// The LSTM encoder-decoder of Sutskever et al. 2014 as PyTorch's tutorials
// write it (bentrevett/pytorch-seq2seq, "Sequence to Sequence Learning with
// Neural Networks"): the encoder embeds the source, applies dropout and runs
// an L-layer LSTM (nn.LSTM's dropout between layers), handing its last
// hidden and cell states of every layer to the decoder; the decoder embeds
// the target's first s - 1 tokens (teacher forcing: the true previous
// token), runs its L-layer LSTM from those states, and a linear layer onto
// the target vocabulary predicts the last s - 1 tokens, with cross-entropy.
// The tutorial decodes step by step in Python and feeds the true token with
// probability 0.5; dtsim runs the decoder over the whole target at once,
// the teacher forcing that every step takes (ratio 1): the same kernels
// except the per-step launches. Source and target have s = plan.seq_len
// tokens. An LSTM layer keeps what Note [LSTM memory] (bilstm.cpp) says,
// one direction; the layers' input is time-major, as nn.LSTM's default.
// With model.cell=gru both sides run an L-layer nn.GRU in the LSTM's place,
// the architecture otherwise the same (the tutorials' second notebook, after
// Cho et al. 2014, is a GRU model whose decoder also reads the context at
// every step; dtsim does not model that one): three gates where the LSTM
// has four and no cell state, so the encoder hands on each layer's last
// hidden state alone; what it keeps is Note [GRU memory]. The signatures
// say ",gru=1" only then, so an LSTM's are unchanged.
//
// Note [GRU memory]
// torch.nn.GRU, per layer and direction: W_ih (3H x in), W_hh (3H x H),
// b_ih and b_hh (3H each). A step (aten/src/ATen/native/RNN.cpp, GRUCell):
//   r = sigmoid(i_r + h_r), z = sigmoid(i_z + h_z),
//   n = tanh(i_n + r (W_hn h + b_hn)), h' = (h - n) z + n,
// where i = W_ih x + b_ih (one GEMM over every step) and h_ = W_hh h + b_hh.
// What backward needs of a step:
//   - fused (cuDNN's reserve space; the CUDA cell _thnn_fused_gru_cell keeps
//     a workspace of 5H a step, aten/src/ATen/native/cuda/RNN.cu,
//     GRU_WORKSPACE_MULTIPLIER): r, z, n and W_hn h + b_hn (4H), and the
//     hidden state (H, the output), besides the layer input once: 5H a step
//     where the LSTM keeps 6H;
//   - on a CPU, ATen's composite cell (at::gru has no oneDNN path, unlike
//     at::lstm): linear_hh saves its input h (H); the hidden projection's
//     3H buffer stays alive through the in-place sigmoids' outputs r and z,
//     views of it; the in-place (W_hn h + b_hn) * r and (h - n) * z each
//     save a clone of their left operand, which the op overwrites (H each:
//     autograd's generated in-place ops, mul_ as abs_, keep self.clone()
//     where the derivative reads self); the in-place tanh saves n (H): 7H a
//     step, as the LSTM's composite cell. The input projection of every
//     step is read by the adds only, and freed with the layer's forward.
//     Backward sums W_hh's gradient over the steps out of place: 3 x 3H x H
//     alive at once. dtsim validate's counting allocator agrees: seq2seq-tiny
//     with cell=gru over two model-parallel ranks (b 4, fp32, no dropout)
//     peaked at 1,023,232 and 1,284,876 bytes, 1,029,632 and 1,286,112
//     predicted; 6H a step would put the encoder's stage 3% under.
namespace dtsim::models {
namespace {

using namespace detail;

class Nbow final : public ZooModel {
 public:
  explicit Nbow(NbowConfig c) : c_(std::move(c)) {}
  std::string name() const override { return c_.name; }
  int blocks() const override { return 1; }
  int layer_count() const override { return 2; }  // the bag, the classifier
  std::int64_t max_seq_len() const override { return c_.seq_len; }
  std::string tp_error(int tp) const override {
    return tp == 1 ? "" : c_.name + " has no tensor-parallel split (dtsim splits transformer blocks); valid: tp: 1";
  }
  std::int64_t parameters() const override { return c_.vocab * c_.embed + c_.embed * c_.classes + c_.classes; }
  std::vector<sim::Layer> layers(const sim::WorkloadShape& shape) const override {
    require_no_tp(shape);
    const std::int64_t b = shape.micro_batch, t = b * shape.seq_len, d = c_.embed;
    const int e = shape.act_bytes;
    check_size(static_cast<double>(t) * static_cast<double>(d) * e, "embedding rows");
    sim::Layer bag;
    bag.name = "bag";
    bag.kind = sim::LayerKind::kEmbedding;
    bag.signature = "bag.embed:v=" + std::to_string(c_.vocab) + ",d=" + std::to_string(d);
    bag.params = c_.vocab * d;
    bag.param_tensors = 1;
    bag.largest_param_tensor = c_.vocab * d;
    // Note [Bag of words].
    bag.forward.push_back(memory_op("bag.gather_mean", sim::KernelKind::kEmbedding, e * t * d + 8 * t, e * b * d, static_cast<double>(t * d)));
    bag.backward.push_back(memory_op("bag.scatter_add", sim::KernelKind::kEmbedding, e * b * d + 16 * t,
                                     e * t * d + e * c_.vocab * d, static_cast<double>(t * d)));
    bag.saved_bytes = 8 * (2 * t + 2 * b);
    bag.output_bytes = e * b * d;
    return {bag, classifier_head("head", shape, b, d, c_.classes)};
  }

 private:
  NbowConfig c_;
};

/// Gates of the encoder-decoder's cell: an LSTM's 4, a GRU's 3.
std::int64_t gates_of(const Seq2SeqConfig& c) { return c.cell == Seq2SeqConfig::Cell::kGru ? 3 : 4; }

/// One side of the encoder-decoder: embedding, dropout, an L-layer LSTM or
/// GRU over `steps` steps (Note [Encoder-decoder]); kernels and saved bytes.
void add_embedded_rnn(sim::Layer& l, const sim::WorkloadShape& shape, const Seq2SeqConfig& c, std::int64_t steps) {
  const std::int64_t b = shape.micro_batch, t = b * steps, hs = c.hidden;
  const int e = shape.act_bytes;
  const bool gru = c.cell == Seq2SeqConfig::Cell::kGru;
  l.forward.push_back(memory_op(l.name + ".embed", sim::KernelKind::kEmbedding, e * t * c.embed + 8 * t, e * t * c.embed));
  l.saved_bytes += 8 * t;
  if (c.dropout) {
    l.forward.push_back(memory_op(l.name + ".dropout", sim::KernelKind::kElementwise, e * t * c.embed, (e + shape.mask_bytes) * t * c.embed));
    l.saved_bytes += shape.mask_bytes * t * c.embed;
  }
  for (int i = 0; i < c.layers; ++i) {
    const std::int64_t in = i == 0 ? c.embed : hs;
    auto kernels = gru ? gru_kernels(l.name + ".gru." + std::to_string(i), b, steps, in, hs, e)
                       : lstm_kernels(l.name + ".lstm." + std::to_string(i), b, steps, in, hs, e);
    for (auto& k : kernels) l.forward.push_back(std::move(k));
    // cuDNN's reserve space (the layer input once; gates, cell and hidden
    // states of every step), or ATen's composite cell (Note [LSTM memory],
    // Note [GRU memory]).
    l.saved_bytes += e * t * in + (shape.fused_rnn ? (gru ? 5 : 6) : 7) * e * t * hs;
    if (c.dropout && i + 1 < c.layers) {
      const std::string drop = l.name + (gru ? ".gru_dropout." : ".lstm_dropout.") + std::to_string(i);
      l.forward.push_back(memory_op(drop, sim::KernelKind::kElementwise, e * t * hs, (e + shape.mask_bytes) * t * hs));
      l.saved_bytes += shape.mask_bytes * t * hs;
    }
  }
  if (!shape.fused_rnn) l.backward_workspace_bytes = 3 * e * gates_of(c) * hs * hs;
}

class Seq2Seq final : public ZooModel {
 public:
  explicit Seq2Seq(Seq2SeqConfig c) : c_(std::move(c)) {}
  std::string name() const override { return c_.name; }
  int blocks() const override { return 2; }
  int layer_count() const override { return 2; }  // the encoder, the decoder with its loss
  std::int64_t max_seq_len() const override { return c_.seq_len; }
  std::int64_t min_seq_len() const override { return 2; }
  std::string tp_error(int tp) const override {
    if (tp == 1) return "";
    return std::string(gru() ? "a GRU" : "an LSTM") + " has no tensor-parallel split (its recurrence is sequential); valid: tp: 1";
  }
  bool gru() const { return c_.cell == Seq2SeqConfig::Cell::kGru; }
  /// One side's recurrent layers: per layer W_ih (G H x in), W_hh (G H x H)
  /// and two biases of G H, G = 4 gates (LSTM) or 3 (GRU).
  std::int64_t rnn_params() const {
    const std::int64_t g = gates_of(c_);
    std::int64_t p = 0;
    for (int i = 0; i < c_.layers; ++i) p += g * c_.hidden * ((i == 0 ? c_.embed : c_.hidden) + c_.hidden) + 2 * g * c_.hidden;
    return p;
  }
  std::int64_t parameters() const override {
    return c_.src_vocab * c_.embed + c_.tgt_vocab * c_.embed + 2 * rnn_params() + c_.hidden * c_.tgt_vocab + c_.tgt_vocab;
  }
  std::vector<sim::Layer> layers(const sim::WorkloadShape& shape) const override {
    require_no_tp(shape);
    // Below min_seq_len (resolve refuses it) the decoder has no step: an
    // empty layer, for callers that ask only how many layers there are.
    const std::int64_t b = shape.micro_batch, s = std::max<std::int64_t>(shape.seq_len, 1), hs = c_.hidden;
    const int e = shape.act_bytes;
    check_size(static_cast<double>(b) * static_cast<double>(s) * static_cast<double>(std::max({c_.tgt_vocab, 7 * hs, c_.embed})) * 8,
               "decoder's logits");
    const std::string dims = "e=" + std::to_string(c_.embed) + ",hs=" + std::to_string(hs) + ",l=" + std::to_string(c_.layers) +
                             ",drop=" + std::to_string(c_.dropout ? 1 : 0) + (gru() ? ",gru=1" : "");
    sim::Layer enc;
    enc.name = "encoder";
    enc.kind = sim::LayerKind::kLstm;  // a recurrent block, LSTM or GRU
    enc.signature = "s2s.encoder:v=" + std::to_string(c_.src_vocab) + "," + dims;
    enc.params = c_.src_vocab * c_.embed + rnn_params();
    enc.param_tensors = 1 + 4 * c_.layers;
    // The embedding, or a recurrent layer's W_ih (G hs x its input) or W_hh (G hs x hs).
    const std::int64_t gates = gates_of(c_) * hs * std::max(c_.embed, hs);
    enc.largest_param_tensor = std::max(c_.src_vocab * c_.embed, gates);
    add_embedded_rnn(enc, shape, c_, s);
    enc.backward = backward_of(enc.forward);
    // Each layer's last hidden and (an LSTM's) cell states.
    enc.output_bytes = e * (gru() ? 1 : 2) * c_.layers * b * hs;

    sim::Layer dec;
    dec.name = "decoder";
    dec.kind = sim::LayerKind::kHead;
    dec.signature = "s2s.decoder:v=" + std::to_string(c_.tgt_vocab) + "," + dims;
    dec.params = c_.tgt_vocab * c_.embed + rnn_params() + hs * c_.tgt_vocab + c_.tgt_vocab;
    dec.param_tensors = 3 + 4 * c_.layers;
    dec.largest_param_tensor = std::max({c_.tgt_vocab * c_.embed, gates, hs * c_.tgt_vocab});
    const std::int64_t t = b * (s - 1);
    add_embedded_rnn(dec, shape, c_, s - 1);
    const Bytes rnn_workspace = dec.backward_workspace_bytes;
    add_lm_loss(dec, shape, "fc_out", t, c_.tgt_vocab, hs);  // backward of every kernel so far
    dec.backward_workspace_bytes = std::max(dec.backward_workspace_bytes, rnn_workspace);
    dec.saved_bytes += e * t * hs + lm_loss_saved(shape, t, c_.tgt_vocab, hs);  // fc_out's input, what the loss keeps
    return {enc, dec};
  }

 private:
  Seq2SeqConfig c_;
};

}  // namespace

sim::ModelPtr make_nbow(const NbowConfig& c) { return std::make_shared<Nbow>(c); }
sim::ModelPtr make_seq2seq(const Seq2SeqConfig& c) { return std::make_shared<Seq2Seq>(c); }

}  // namespace dtsim::models
