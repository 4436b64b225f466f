#include "layers.hpp"

#include <algorithm>
#include <string>

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
  for (const auto& l : layers(shape)) f += matmul_flops(l.forward);
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

std::vector<sim::LayerComm> tp_pairs(const sim::WorkloadShape& shape, Bytes bytes, int pairs) {
  if (shape.tp <= 1) return {};
  if (shape.sequence_parallel) {
    return {{sim::CollectiveOp::kAllGather, bytes, pairs}, {sim::CollectiveOp::kReduceScatter, bytes, pairs}};
  }
  return {{sim::CollectiveOp::kAllReduce, bytes, pairs}};
}

}  // namespace dtsim::models::detail

namespace dtsim::models::detail {

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
// attention core, 5as^2b/t: sbh (10 + 24/t) or 34 sbh/t.
sim::Layer transformer_layer(const std::string& name, const sim::WorkloadShape& shape, std::int64_t h,
                             std::int64_t a, std::int64_t f, bool dropout) {
  using sim::KernelKind;
  const std::int64_t b = shape.micro_batch, s = shape.seq_len;
  const int e = shape.act_bytes;
  const std::int64_t tp = shape.tp;
  const bool sp = shape.sequence_parallel && tp > 1;
  check_size(static_cast<double>(b) * a * s * s * e, "attention scores");
  check_size(static_cast<double>(b) * s * std::max(h, f) * e, "activations");
  const std::int64_t t = b * s;  // tokens
  const std::int64_t d = h / a;  // head width
  const std::int64_t ap = a / tp, fp = f / tp, hp = h / tp;  // this rank's heads, MLP and attention widths
  const Bytes th = t * h, tf = t * fp, scores = b * ap * s * s;
  // LayerNorm, dropout and residual ops run on the whole sequence, or on this
  // rank's 1/t of it under sequence parallelism.
  const Bytes tn = sp ? th / tp : th;
  sim::Layer l;
  l.name = name;
  l.kind = sim::LayerKind::kTransformer;
  l.params = (4 * h * h + 2 * h * f + 3 * h + f) / tp + 6 * h;
  // Two LayerNorms, the fused QKV, the attention output and the two MLP
  // linears, each a weight and a bias.
  l.param_tensors = 12;
  auto& k = l.forward;
  k.push_back(memory_op("ln_1", KernelKind::kNorm, e * tn, e * tn, 5.0 * tn));
  k.push_back(gemm("attn.qkv", t, 3 * hp, h, e));
  const std::size_t core_begin = k.size();
  k.push_back(gemm("attn.scores", s, s, d, e, b * ap, KernelKind::kAttention));
  k.push_back(memory_op("attn.softmax", KernelKind::kNorm, e * scores, e * scores, 5.0 * scores));
  if (dropout) k.push_back(memory_op("attn.dropout", KernelKind::kElementwise, e * scores, (e + 1) * scores, scores));
  k.push_back(gemm("attn.av", s, d, s, e, b * ap, KernelKind::kAttention));
  const std::size_t core_end = k.size();
  k.push_back(gemm("attn.proj", t, h, hp, e));
  k.push_back(memory_op("attn.residual", KernelKind::kElementwise, 2 * e * tn, (e + (dropout ? 1 : 0)) * tn, 2.0 * tn));
  k.push_back(memory_op("ln_2", KernelKind::kNorm, e * tn, e * tn, 5.0 * tn));
  k.push_back(gemm("mlp.fc1", t, fp, h, e));
  k.push_back(memory_op("mlp.gelu", KernelKind::kElementwise, e * tf, e * tf, 8.0 * tf));
  k.push_back(gemm("mlp.fc2", t, h, fp, e));
  k.push_back(memory_op("mlp.residual", KernelKind::kElementwise, 2 * e * tn, (e + (dropout ? 1 : 0)) * tn, 2.0 * tn));
  l.backward = backward_of(l.forward);
  l.attention_core.assign(k.begin() + static_cast<std::ptrdiff_t>(core_begin), k.begin() + static_cast<std::ptrdiff_t>(core_end));
  // Note [Activation memory]
  const Bytes mask = dropout ? shape.mask_bytes : 0;
  const Bytes replicated = tn * (4 * e + 2 * mask);               // 10 sbh
  const Bytes split = (th / tp) * 4 * e + 2 * e * tf;             // 24 sbh / t
  const Bytes core = scores * (e + (dropout ? e + mask : 0));     // 5 a s^2 b / t
  l.saved_bytes = replicated + split + core;
  l.attention_core_bytes = core;
  l.output_bytes = e * tn;
  // Attention and MLP: one column/row pair each, forward and backward.
  l.tp_forward = tp_pairs(shape, e * th, 2);
  l.tp_backward = tp_pairs(shape, e * th, 2);
  return l;
}

}  // namespace dtsim::models::detail
