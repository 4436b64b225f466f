// The seeds' classifier (seed 000): a stacked bidirectional LSTM over
// precomputed 768-wide GPT-2/BERT embeddings, then a linear head over the
// final hidden states (33 classes).
#include <memory>

#include "dtsim/models/models.hpp"
#include "layers.hpp"

// Note [LSTM memory]
// Without cuDNN (LibTorch on CPU), at::lstm runs the cell as ATen ops step
// by step (aten/src/ATen/native/RNN.cpp, LSTMCell and FullLayer) and autograd
// saves what each op needs. Per direction:
//   - the input projection of all steps is one linear layer over the input
//     seen time-major: a batch-first input arriving contiguous in [b, s]
//     order (the model's input, or one received from another stage) is not
//     contiguous that way, so the matmul saves a contiguous copy, one per
//     direction; the previous layer's output on the same rank is already
//     time-major underneath, and a view of it is saved;
//   - every step saves its gates (4H, which the in-place sigmoids and tanh
//     and the products read), its cell state and tanh of it, and its hidden
//     state (H each) as the next step's input; the last step's cell and
//     hidden states are saved by nobody, but the zero initial ones are: 7H a
//     step in all.
// Backward sums W_hh's gradient over the steps out of place: the running sum,
// the newest step's term and the new sum are alive at once, 3 x 4H x H.
// dtsim validate's counting allocator shows exactly these blocks at a
// bilstm-tiny stage's peak (input 64, hidden 64, b 4, s 32: the saved part is
// 2 x 4 x 128 x (64 + 7 x 64) = 524,288 bytes, the 4,096-byte gates 64 times,
// the 1,024-byte states 188 times and 4 zero states, each to the byte).
namespace dtsim::models {
namespace {

using namespace detail;

class BiLstm final : public ZooModel {
 public:
  explicit BiLstm(BiLstmConfig c) : c_(std::move(c)) {}
  std::string name() const override { return c_.name; }
  int blocks() const override { return c_.layers; }
  int layer_count() const override { return c_.layers + 1; }  // LSTM layers, head
  std::int64_t max_seq_len() const override { return c_.seq_len; }
  std::string tp_error(int tp) const override {
    return tp == 1 ? "" : "an LSTM has no tensor-parallel split (its recurrence is sequential); valid: tp: 1";
  }
  std::int64_t dirs() const { return c_.bidirectional ? 2 : 1; }
  std::int64_t input_of(int layer) const { return layer == 0 ? c_.input_size : dirs() * c_.hidden; }

  std::int64_t parameters() const override {
    // torch.nn.LSTM: per layer and direction W_ih (4H x in), W_hh (4H x H), b_ih and b_hh (4H each).
    const std::int64_t hs = c_.hidden;
    std::int64_t p = 0;
    for (int i = 0; i < c_.layers; ++i) p += dirs() * (4 * hs * input_of(i) + 4 * hs * hs + 8 * hs);
    return p + dirs() * hs * c_.classes + c_.classes;
  }

  std::vector<sim::Layer> layers(const sim::WorkloadShape& shape) const override {
    require_no_tp(shape);
    const std::int64_t b = shape.micro_batch, s = shape.seq_len, hs = c_.hidden;
    const int e = shape.act_bytes;
    check_size(static_cast<double>(b) * s * 7 * hs * e * dirs(), "LSTM states");
    const std::int64_t t = b * s;
    std::vector<sim::Layer> out;
    for (int i = 0; i < c_.layers; ++i) {
      const std::int64_t in = input_of(i);
      sim::Layer l;
      l.name = "lstm." + std::to_string(i);
      l.kind = sim::LayerKind::kLstm;
      l.signature = "lstm.layer:in=" + std::to_string(in) + ",hs=" + std::to_string(hs) + ",dirs=" + std::to_string(dirs());
      l.params = dirs() * (4 * hs * in + 4 * hs * hs + 8 * hs);
      l.param_tensors = dirs() * 4;  // w_ih, w_hh, b_ih, b_hh per direction
      for (std::int64_t d = 0; d < dirs(); ++d) {
        const std::string dir = d == 0 ? "fwd" : "rev";
        for (auto& k : lstm_kernels(l.name + "." + dir, b, s, in, hs, e)) l.forward.push_back(std::move(k));
      }
      l.backward = backward_of(l.forward);
      l.output_bytes = e * t * dirs() * hs;
      l.strided_output = true;  // batch_first: the time-major output, transposed
      if (shape.fused_rnn) {
        // cuDNN's reserve space: per direction the gates (4H), cell states
        // (H) and hidden states (H) of every step, and the layer input once.
        l.saved_bytes = e * t * in + dirs() * e * t * 6 * hs;
      } else {
        // Note [LSTM memory]: ATen's composite cell, step by step.
        // With b = 1 the transposed input is contiguous already: a view.
        const std::int64_t copies = b == 1 ? 0 : dirs() * e * t * in;
        l.saved_bytes = (i == 0 && b > 1 ? copies : e * t * in) + dirs() * e * t * 7 * hs;
        l.stage_input_bytes = i == 0 ? 0 : copies;
        l.backward_workspace_bytes = 3 * e * 4 * hs * hs;
      }
      out.push_back(std::move(l));
    }
    sim::Layer head;
    head.name = "head";
    head.kind = sim::LayerKind::kHead;
    head.signature = "lstm.head:in=" + std::to_string(dirs() * hs) + ",c=" + std::to_string(c_.classes);
    head.params = dirs() * hs * c_.classes + c_.classes;
    head.param_tensors = 2;
    head.forward.push_back(gemm("head.linear", b, c_.classes, dirs() * hs, e));
    head.forward.push_back(memory_op("log_softmax", sim::KernelKind::kNorm, e * b * c_.classes, 4 * b * c_.classes));
    head.backward = backward_of(head.forward);
    // The last time step is a view of the LSTM's whole output, which the
    // linear layer's saved input keeps alive; and the log-softmax output.
    head.saved_bytes = e * t * dirs() * hs + 4 * b * c_.classes;
    head.output_bytes = 4;
    out.push_back(std::move(head));
    return out;
  }


 private:
  BiLstmConfig c_;
};

}  // namespace

sim::ModelPtr make_bilstm(const BiLstmConfig& c) { return std::make_shared<BiLstm>(c); }

}  // namespace dtsim::models
