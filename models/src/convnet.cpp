// Seed 003's feed-forward models: VGG (torchvision's configurations, with and
// without batch norm), the small CIFAR-10 classifier of PyTorch's tutorial,
// a multilayer perceptron and a convolutional autoencoder. Each is a plain
// sequence of layers built from a few kinds (a convolution with its batch
// norm, activation and pooling; a transposed convolution; an adaptive
// average pool; a linear layer with its activation and dropout; a classifier
// head), described here once for the simulator and twinned in models/torch.
#include <algorithm>
#include <memory>

#include "dtsim/models/models.hpp"
#include "dtsim/sim/error.hpp"
#include "layers.hpp"

// Note [Convolutions]
// cuDNN and oneDNN run a convolution as an implicit GEMM (Chetlur et al.
// 2014, "cuDNN: Efficient Primitives for Deep Learning", section 3.1): output
// pixels by output channels by the input patch, m = b Ho Wo, n = C_out,
// k = C_in kh kw, 2 m n k FLOPs. Backward computes the input's gradient (a
// convolution of the output's gradient with the flipped filters) and the
// filters' gradient (input patches against the output's gradient), each with
// the forward's FLOPs; a model's first convolution takes no input gradient
// (its input does not require grad). A transposed convolution is the
// input's-gradient pass of a convolution run forward (col2im): m = b Hi Wi,
// n = C_out kh kw, k = C_in, its output Ho = (Hi - 1) s - 2p + k + output_padding
// (torch.nn.ConvTranspose2d). The bias is a separate broadcast add in
// PyTorch's cuDNN and CPU paths.
//
// What autograd keeps (tools/autograd/derivatives.yaml, PyTorch 1.13-2.x):
//   - convolution: its input (and the weight, a parameter);
//   - batch norm in training: its input, and the batch mean and inverse
//     standard deviation per channel in fp32;
//   - ReLU in place (torchvision's inplace=True) and sigmoid: their output;
//   - max_pool2d_with_indices: its input and the int64 indices, one an output
//     element;
//   - adaptive_avg_pool2d: its input;
//   - linear: its input; dropout: its mask (shape.mask_bytes an element);
//   - cross-entropy: the fp32 log-softmax; MSE: its input and target.
// Each layer counts what it keeps but not its output: the next layer counts
// that as its input, so a tensor two ops keep (ReLU's output, the next
// convolution's input) is counted once. At a pipeline boundary the sending
// stage's output is held by the pipeline (Note [Deallocated outputs]).
//
// Note [SyncBatchNorm]
// Under data parallelism each rank's batch norm normalises over its own
// micro-batch; torch.nn.SyncBatchNorm (convert_sync_batchnorm, plan
// sync_batchnorm) normalises over the whole data-parallel batch. Its autograd
// function (torch/nn/modules/_functions.py, PyTorch 1.13-2.x) computes each
// rank's per-channel mean and inverse standard deviation, and all-gathers
// them with the rank's element count, one fp32 tensor of 2C + 1 a rank (an
// all-gather of dp (2C + 1) 4 bytes, all_gather_into_tensor on NCCL); in
// backward it reduces sum_dy and sum_dy_xmu and all-reduces them, 2C fp32
// (skipped only where the input needs no gradient, which a batch norm after
// a convolution always does). Both run on the default stream between the
// layer's kernels, so the layer waits for them: they are Layer::dp_forward
// and dp_backward, latency-bound (a few KiB) and paid at every batch norm of
// every micro-batch. What it keeps is batch norm's (the mean and inverse
// standard deviation, plus dp counts). With dp = 1 it is plain batch norm.
//
// Note [Running statistics]
// nn.BatchNorm2d(C) in training also keeps buffers: running_mean and
// running_var, C each in the module's dtype (which dtsim's runtime casts
// with the parameters: fp32 on a CPU, the plan's 16-bit type on a GPU),
// and num_batches_tracked, one int64 (torch/nn/modules/batchnorm.py,
// _NormBase; LibTorch's BatchNormImplBase the same): 2C e + 8 bytes,
// resident for the whole run, never reduced nor stepped. Every forward
// updates them: the module adds 1 to num_batches_tracked (an op of its
// own, before the norm), and the norm's kernel blends the batch's mean and
// unbiased variance into the running ones, r = (1 - m) r + m x, in the
// same pass (cuDNN's cudnnBatchNormalizationForwardTraining takes the
// running tensors; ATen's CPU batch_norm updates them as it reduces):
// 2C e read and written, 3 FLOPs an element and C for the variance's
// n / (n - 1). Backward touches neither. Priced here, and their bytes
// resident on the layer's rank (sim::Layer::buffer_bytes: vgg11-bn's are
// 22,080 bytes in fp32).
namespace dtsim::models {
namespace {

using namespace detail;

/// One layer of a sequential image or feed-forward network.
struct Spec {
  enum class Op { kConv, kConvT, kAvgPool, kFc, kClassifier } op = Op::kConv;
  std::int64_t ci = 0, co = 0, k = 1, s = 1, p = 0, out_pad = 0, hw = 1;  ///< convolutions; hw: the square input's side
  bool bn = false;
  int act = 0;         ///< 0 none, 1 ReLU, 2 sigmoid
  std::int64_t pool = 0;  ///< max pool of this kernel and stride after the activation (0: none)
  bool in_grad = true; ///< the input needs a gradient (false for a model's first layer)
  bool dropout = false;
  bool mse = false;    ///< the last layer: MSE against the model's input (an autoencoder)
  std::int64_t in = 0, out = 0;  ///< linear layers: features in and out
  std::int64_t classes = 0;
};

std::int64_t conv_out(const Spec& l) { return (l.hw + 2 * l.p - l.k) / l.s + 1; }
std::int64_t convt_out(const Spec& l) { return (l.hw - 1) * l.s - 2 * l.p + l.k + l.out_pad; }

/// The side of a layer's output, after any pooling.
std::int64_t out_side(const Spec& l) {
  switch (l.op) {
    case Spec::Op::kConv: return l.pool > 0 ? conv_out(l) / l.pool : conv_out(l);
    case Spec::Op::kConvT: return convt_out(l);
    case Spec::Op::kAvgPool: return l.k;
    default: return 1;
  }
}

std::int64_t params_of(const Spec& l) {
  switch (l.op) {
    case Spec::Op::kConv: return l.co * l.ci * l.k * l.k + l.co + (l.bn ? 2 * l.co : 0);
    case Spec::Op::kConvT: return l.ci * l.co * l.k * l.k + l.co;
    case Spec::Op::kAvgPool: return 0;
    case Spec::Op::kFc: return l.in * l.out + l.out;
    case Spec::Op::kClassifier: return l.in * l.classes + l.classes;
  }
  return 0;
}

const char* act_name(int act) { return act == 1 ? "relu" : act == 2 ? "sigmoid" : "none"; }

/// The layer's signature (models/torch builds its twin from it).
std::string signature_of(const Spec& l) {
  auto i = [](std::int64_t v) { return std::to_string(v); };
  const std::string grad = l.in_grad ? "" : ",ig=0";
  switch (l.op) {
    case Spec::Op::kConv:
      return "conv.layer:ci=" + i(l.ci) + ",co=" + i(l.co) + ",k=" + i(l.k) + ",s=" + i(l.s) + ",p=" + i(l.p) + ",hw=" + i(l.hw) +
             ",bn=" + i(l.bn) + ",act=" + i(l.act) + ",pool=" + i(l.pool) + grad;
    case Spec::Op::kConvT:
      return "convt.layer:ci=" + i(l.ci) + ",co=" + i(l.co) + ",k=" + i(l.k) + ",s=" + i(l.s) + ",p=" + i(l.p) + ",op=" + i(l.out_pad) +
             ",hw=" + i(l.hw) + ",act=" + i(l.act) + ",mse=" + i(l.mse) + grad;
    case Spec::Op::kAvgPool: return "pool.avg:c=" + i(l.ci) + ",hw=" + i(l.hw) + ",o=" + i(l.k);
    case Spec::Op::kFc:
      return "fc.layer:in=" + i(l.in) + ",out=" + i(l.out) + ",act=" + i(l.act) + ",drop=" + i(l.dropout) + grad;
    case Spec::Op::kClassifier: return "fc.head:in=" + i(l.in) + ",c=" + i(l.classes) + grad;
  }
  return "";
}

/// Drops the input's gradient GEMM (the first ".dgrad") of a model's first layer.
void drop_input_grad(sim::Layer& l) {
  for (auto it = l.backward.rbegin(); it != l.backward.rend(); ++it) {
    if (it->name.size() > 6 && it->name.compare(it->name.size() - 6, 6, ".dgrad") == 0) {
      l.backward.erase(std::next(it).base());
      return;
    }
  }
}

/// Appends an activation's kernel (in place: reads and writes n elements).
void add_act(std::vector<sim::Kernel>& ks, const std::string& name, int act, std::int64_t n, int e) {
  if (act == 0) return;
  ks.push_back(memory_op(name + "." + act_name(act), sim::KernelKind::kElementwise, e * n, e * n, (act == 2 ? 4.0 : 1.0) * n));
}

/// Elements a sample of the layer's largest tensor holds, in floating point
/// (Note [Model size bound] in zoo.cpp: checked before any 64-bit product).
double largest(const Spec& l) {
  const auto sq = [](std::int64_t side) { return static_cast<double>(side) * static_cast<double>(side); };
  const double in = static_cast<double>(l.ci) * sq(l.hw);
  switch (l.op) {
    case Spec::Op::kConv: return std::max(in, static_cast<double>(l.co) * sq(conv_out(l)));
    case Spec::Op::kConvT: return std::max(in, static_cast<double>(l.co) * sq(convt_out(l)));
    case Spec::Op::kAvgPool: return std::max(in, static_cast<double>(l.ci) * sq(l.k));
    case Spec::Op::kFc: return static_cast<double>(std::max(l.in, l.out));
    case Spec::Op::kClassifier: return static_cast<double>(std::max(l.in, l.classes));
  }
  return 0;
}

/// Batch norm's running statistics' update in forward (Note [Running
/// statistics]): num_batches_tracked's increment before the norm, and the
/// running mean and variance read and written by the norm's kernel.
/// Called once backward is built: backward does not touch them.
void add_running_stats(sim::Layer& out, const std::string& name, std::int64_t channels, int e) {
  const auto bn = std::find_if(out.forward.begin(), out.forward.end(), [&](const sim::Kernel& k) { return k.name == name + ".bn"; });
  if (bn == out.forward.end()) return;
  bn->bytes += 2 * (2 * channels * e);
  bn->flops += 7.0 * static_cast<double>(channels);
  out.buffer_bytes += 2 * channels * e + 8;
  out.forward.insert(bn, memory_op(name + ".bn.num_batches_tracked", sim::KernelKind::kElementwise, 8, 8, 1));
}

sim::Layer build(const Spec& l, const std::string& name, const sim::WorkloadShape& shape) {
  const std::int64_t b = shape.micro_batch;
  const int e = shape.act_bytes;
  check_size(static_cast<double>(b) * largest(l) * 8, "largest tensor");  // 8: the pools' int64 indices
  sim::Layer out;
  out.name = name;
  out.signature = signature_of(l);
  out.params = params_of(l);
  out.largest_param_tensor = l.op == Spec::Op::kConv || l.op == Spec::Op::kConvT ? l.co * l.ci * l.k * l.k
                             : l.op == Spec::Op::kFc                              ? l.in * l.out
                                                                                  : 0;
  out.kind = l.op == Spec::Op::kClassifier || l.mse ? sim::LayerKind::kHead : sim::LayerKind::kOther;
  switch (l.op) {
    case Spec::Op::kConv: {
      const std::int64_t ho = conv_out(l), in = b * l.ci * l.hw * l.hw, z = b * l.co * ho * ho;
      out.param_tensors = l.bn ? 4 : 2;
      out.forward.push_back(gemm(name + ".conv", b * ho * ho, l.co, l.ci * l.k * l.k, e));
      out.forward.back().bytes = e * (in + l.co * l.ci * l.k * l.k + z);  // the input is read once, not per patch
      out.forward.push_back(memory_op(name + ".bias", sim::KernelKind::kElementwise, e * z, e * z, static_cast<double>(z)));
      if (l.bn) out.forward.push_back(memory_op(name + ".bn", sim::KernelKind::kNorm, 2 * e * z, e * z, 4.0 * z));
      if (l.bn && shape.sync_batchnorm && shape.dp > 1) {
        // Note [SyncBatchNorm]: the statistics gathered, the gradient sums all-reduced.
        out.dp_forward.push_back({sim::CollectiveOp::kAllGather, 4 * shape.dp * (2 * l.co + 1), 1, sim::Axis::kDp});
        out.dp_backward.push_back({sim::CollectiveOp::kAllReduce, 4 * 2 * l.co, 1, sim::Axis::kDp});
      }
      add_act(out.forward, name, l.act, z, e);
      std::int64_t y = z;
      if (l.pool > 0) {
        y = b * l.co * (ho / l.pool) * (ho / l.pool);
        out.forward.push_back(memory_op(name + ".maxpool", sim::KernelKind::kElementwise, e * z, e * y + 8 * y, static_cast<double>(z)));
      }
      out.saved_bytes = e * in + (l.bn ? e * z + 8 * l.co : 0) + (l.act != 0 || l.pool > 0 ? e * z : 0) + (l.pool > 0 ? 8 * y : 0);
      out.output_bytes = e * y;
      break;
    }
    case Spec::Op::kConvT: {
      const std::int64_t ho = convt_out(l), in = b * l.ci * l.hw * l.hw, z = b * l.co * ho * ho;
      out.param_tensors = 2;
      out.forward.push_back(gemm(name + ".convt", b * l.hw * l.hw, l.co * l.k * l.k, l.ci, e));
      out.forward.back().bytes = e * (in + l.ci * l.co * l.k * l.k + z);
      out.forward.push_back(memory_op(name + ".bias", sim::KernelKind::kElementwise, e * z, e * z, static_cast<double>(z)));
      add_act(out.forward, name, l.act, z, e);
      out.saved_bytes = e * in + (l.act != 0 ? e * z : 0);
      out.output_bytes = e * z;
      if (l.mse) {
        // MSE against the input image, in fp32: the difference squared and summed.
        out.forward.push_back(memory_op(name + ".mse", sim::KernelKind::kElementwise, 2 * e * z, 4, 3.0 * z));
        out.saved_bytes += e * z;  // the target (the model's input, held by the loss)
        out.output_bytes = 4;
      }
      break;
    }
    case Spec::Op::kAvgPool: {
      const std::int64_t in = b * l.ci * l.hw * l.hw, y = b * l.ci * l.k * l.k;
      out.forward.push_back(memory_op(name + ".avgpool", sim::KernelKind::kElementwise, e * in, e * y, static_cast<double>(std::max(in, y))));
      out.saved_bytes = e * in;
      out.output_bytes = e * y;
      break;
    }
    case Spec::Op::kFc: {
      out.param_tensors = 2;
      out.forward.push_back(gemm(name + ".linear", b, l.out, l.in, e));
      add_act(out.forward, name, l.act, b * l.out, e);
      if (l.dropout) out.forward.push_back(memory_op(name + ".dropout", sim::KernelKind::kElementwise, e * b * l.out, (e + shape.mask_bytes) * b * l.out));
      // Its input; with dropout the activation's output and the mask (the
      // dropout's output is the layer's, which the next layer keeps).
      out.saved_bytes = e * b * l.in + (l.dropout ? (l.act != 0 ? e * b * l.out : 0) + shape.mask_bytes * b * l.out : 0);
      out.output_bytes = e * b * l.out;
      break;
    }
    case Spec::Op::kClassifier: {
      sim::Layer head = classifier_head(name, shape, b, l.in, l.classes);
      head.signature = out.signature;
      if (!l.in_grad) drop_input_grad(head);
      return head;
    }
  }
  out.backward = backward_of(out.forward);
  if (!l.in_grad) drop_input_grad(out);
  if (l.op == Spec::Op::kConv && l.bn) add_running_stats(out, name, l.co, e);
  return out;
}

/// A sequential network of Specs.
class SequentialNet final : public ZooModel {
 public:
  SequentialNet(std::string name, std::vector<Spec> specs, std::vector<std::string> names)
      : name_(std::move(name)), specs_(std::move(specs)), names_(std::move(names)) {}
  std::string name() const override { return name_; }
  int blocks() const override { return static_cast<int>(specs_.size()); }
  int layer_count() const override { return static_cast<int>(specs_.size()); }
  std::int64_t max_seq_len() const override { return 1; }  // one image (or feature vector) a sample
  bool has_batch_norm() const override {
    return std::any_of(specs_.begin(), specs_.end(), [](const Spec& s) { return s.bn; });
  }
  bool runs_cublas() const override {  // linear layers; convolutions and pools are cuDNN's and ATen's
    return std::any_of(specs_.begin(), specs_.end(), [](const Spec& s) { return s.op == Spec::Op::kFc || s.op == Spec::Op::kClassifier; });
  }
  std::string tp_error(int tp) const override {
    return tp == 1 ? "" : name_ + " has no tensor-parallel split (dtsim splits transformer blocks); valid: tp: 1";
  }
  std::int64_t parameters() const override {
    std::int64_t p = 0;
    for (const auto& s : specs_) p += params_of(s);
    return p;
  }
  std::vector<sim::Layer> layers(const sim::WorkloadShape& shape) const override {
    require_no_tp(shape);
    if (shape.seq_len != 1) throw ConfigError("plan.seq_len: " + std::to_string(shape.seq_len) + " for " + name_ + ", which takes one image a sample; valid: 1");
    std::vector<sim::Layer> out;
    out.reserve(specs_.size());
    for (std::size_t i = 0; i < specs_.size(); ++i) out.push_back(build(specs_[i], names_[i], shape));
    return out;
  }

 private:
  std::string name_;
  std::vector<Spec> specs_;
  std::vector<std::string> names_;
};

/// Collects specs, checking each convolution fits its input.
class Builder {
 public:
  Builder(std::int64_t channels, std::int64_t side) : c_(channels), hw_(side) {}
  /// A convolution of `co` channels; throws ConfigError naming `key` if its kernel does not fit.
  void conv(const std::string& name, std::int64_t co, std::int64_t k, std::int64_t s, std::int64_t p, bool bn, int act,
            std::int64_t pool, const char* key) {
    Spec l;
    l.op = Spec::Op::kConv;
    l.ci = c_, l.co = co, l.k = k, l.s = s, l.p = p, l.hw = hw_, l.bn = bn, l.act = act, l.pool = pool;
    if (!problem_.first.empty()) return;
    if (hw_ + 2 * p < k) {
      const std::string side = std::to_string(hw_) + " x " + std::to_string(hw_);
      problem_ = {key, std::to_string(k) + " is larger than the " + side + " input of " + name + " (padding " + std::to_string(p) +
                           "); valid: 1 to " + std::to_string(hw_ + 2 * p) + ", or a larger image_size"};
      // The same, said of the image where that is what the user changed.
      image_problem_ = "leaves " + name + " a " + side + " input, smaller than its " + std::to_string(k) + " x " +
                       std::to_string(k) + " kernel (padding " + std::to_string(p) + "); valid: a larger image_size, or model." +
                       key + " of 1 to " + std::to_string(hw_ + 2 * p);
      return;
    }
    if (pool > 0 && conv_out(l) < pool) {
      problem_ = {"image_size", std::to_string(conv_out(l)) + " x " + std::to_string(conv_out(l)) + " is what reaches " + name +
                                    "'s " + std::to_string(pool) + " x " + std::to_string(pool) +
                                    " max pool; use larger images or fewer pooled convolutions"};
      return;
    }
    push(l, name);
  }
  void convt(const std::string& name, std::int64_t co, std::int64_t k, std::int64_t s, std::int64_t p, std::int64_t out_pad, int act) {
    Spec l;
    l.op = Spec::Op::kConvT;
    l.ci = c_, l.co = co, l.k = k, l.s = s, l.p = p, l.out_pad = out_pad, l.hw = hw_, l.act = act;
    push(l, name);
  }
  void avgpool(const std::string& name, std::int64_t o) {
    Spec l;
    l.op = Spec::Op::kAvgPool;
    l.ci = c_, l.hw = hw_, l.k = o;
    push(l, name);
  }
  void fc(const std::string& name, std::int64_t out, int act, bool dropout) {
    Spec l;
    l.op = Spec::Op::kFc;
    l.in = features(), l.out = out, l.act = act, l.dropout = dropout;
    push(l, name);
    c_ = out, hw_ = 1;
  }
  void classifier(const std::string& name, std::int64_t classes) {
    Spec l;
    l.op = Spec::Op::kClassifier;
    l.in = features(), l.classes = classes;
    push(l, name);
  }
  /// The last layer computes MSE against the input (an autoencoder).
  void mse_loss() { specs_.back().mse = true; }
  std::int64_t side() const { return hw_; }
  /// The first size that does not fit: the key to blame and why ("" if none).
  const std::pair<std::string, std::string>& problem() const { return problem_; }
  /// A kernel larger than its input, said of model.image_size ("" otherwise).
  const std::string& image_problem() const { return image_problem_; }
  sim::ModelPtr finish(const std::string& model) {
    if (!problem_.first.empty()) throw ConfigError("model." + problem_.first + ": " + problem_.second);
    specs_.front().in_grad = false;
    return std::make_shared<SequentialNet>(model, std::move(specs_), std::move(names_));
  }

 private:
  std::int64_t features() const { return c_ * hw_ * hw_; }
  void push(Spec l, const std::string& name) {
    if (l.op != Spec::Op::kFc && l.op != Spec::Op::kClassifier) {
      c_ = l.op == Spec::Op::kAvgPool ? l.ci : l.co;
      hw_ = out_side(l);
    }
    specs_.push_back(l);
    names_.push_back(name);
  }
  std::int64_t c_, hw_;
  std::pair<std::string, std::string> problem_;
  std::string image_problem_;
  std::vector<Spec> specs_;
  std::vector<std::string> names_;
};

}  // namespace

// torchvision.models.vgg's `cfgs`: "A" is VGG11, "B" VGG13, "D" VGG16, "E"
// VGG19; 0 marks a 2 x 2 max pool (stride 2), other entries 3 x 3
// convolutions (padding 1) of that many channels at width 64.
std::vector<int> vgg_config(char config) {
  switch (config) {
    case 'A': return {64, 0, 128, 0, 256, 256, 0, 512, 512, 0, 512, 512, 0};
    case 'B': return {64, 64, 0, 128, 128, 0, 256, 256, 0, 512, 512, 0, 512, 512, 0};
    case 'D': return {64, 64, 0, 128, 128, 0, 256, 256, 256, 0, 512, 512, 512, 0, 512, 512, 512, 0};
    case 'E': return {64, 64, 0, 128, 128, 0, 256, 256, 256, 256, 0, 512, 512, 512, 512, 0, 512, 512, 512, 512, 0};
    default: return {};
  }
}

namespace {

void add_layers(Builder& net, const ConvNetConfig& c) {
  switch (c.arch) {
    case ConvNetConfig::Arch::kVgg: {
      // torchvision's VGG: features (each convolution with ReLU in place, batch
      // norm before it for vgg*_bn, a max pool after the marked ones), an
      // adaptive average pool to 7 x 7, then Linear(512 x 7 x 7, 4096), ReLU,
      // Dropout, Linear(4096, 4096), ReLU, Dropout, Linear(4096, classes).
      const auto cfg = vgg_config(c.vgg_config);
      int n = 0;
      for (std::size_t i = 0; i < cfg.size(); ++i) {
        if (cfg[i] == 0) continue;
        const bool pooled = i + 1 < cfg.size() && cfg[i + 1] == 0;
        net.conv("conv." + std::to_string(n++), cfg[i] * c.width / 64, 3, 1, 1, c.batch_norm, 1, pooled ? 2 : 0, "image_size");
      }
      net.avgpool("avgpool", c.pool_size);
      net.fc("fc.0", c.fc, 1, c.dropout);
      net.fc("fc.1", c.fc, 1, c.dropout);
      net.classifier("head", c.classes);
      break;
    }
    case ConvNetConfig::Arch::kCnn: {
      // PyTorch's CIFAR-10 tutorial ("Training a Classifier"): conv(3, 6, 5),
      // ReLU, max pool 2; conv(6, 16, 5), ReLU, max pool 2; Linear(16 x 5 x 5,
      // 120), ReLU; Linear(120, 84), ReLU; Linear(84, 10).
      for (std::size_t i = 0; i < c.conv_channels.size(); ++i) {
        net.conv("conv." + std::to_string(i), c.conv_channels[i], c.kernel, 1, c.padding, c.batch_norm, 1, 2, "kernel");
      }
      for (std::size_t i = 0; i < c.hidden.size(); ++i) net.fc("fc." + std::to_string(i), c.hidden[i], 1, c.dropout);
      net.classifier("head", c.classes);
      break;
    }
    case ConvNetConfig::Arch::kMlp: {
      // Flatten, then Linear + ReLU per hidden width, then the classifier
      // (PyTorch's quickstart network: 784 -> 512 -> 512 -> 10).
      for (std::size_t i = 0; i < c.hidden.size(); ++i) net.fc("fc." + std::to_string(i), c.hidden[i], 1, c.dropout);
      net.classifier("head", c.classes);
      break;
    }
    case ConvNetConfig::Arch::kConvAutoencoder: {
      // Convolutions of stride 2 (kernel 3, padding 1) down, one convolution
      // of the remaining side to a 1 x 1 latent, then transposed convolutions
      // back up, each output_padding chosen to restore the encoder's sides;
      // ReLU between, sigmoid last, MSE against the input (the MNIST
      // convolutional autoencoder of the common PyTorch tutorials:
      // 1 -> 16 -> 32 -> 64 at 28 x 28).
      std::vector<std::int64_t> sides{c.image_size}, chans{c.channels};
      for (std::size_t i = 0; i < c.conv_channels.size(); ++i) {
        net.conv("enc." + std::to_string(i), c.conv_channels[i], 3, 2, 1, false, 1, 0, "image_size");
        sides.push_back(net.side());
        chans.push_back(c.conv_channels[i]);
      }
      const std::int64_t side = net.side();
      net.conv("latent", c.latent, side, 1, 0, false, 0, 0, "image_size");
      net.convt("dec.latent", chans.back(), side, 1, 0, 0, 1);
      for (std::size_t i = c.conv_channels.size(); i > 0; --i) {
        const std::int64_t want = sides[i - 1], got = 2 * sides[i] - 1;  // (Hi - 1) 2 - 2 + 3
        net.convt("dec." + std::to_string(i - 1), chans[i - 1], 3, 2, 1, want - got, i == 1 ? 2 : 1);
      }
      net.mse_loss();
      break;
    }
  }
}

}  // namespace

std::pair<std::string, std::string> convnet_problem(const ConvNetConfig& c, bool image_changed) {
  Builder net(c.channels, c.image_size);
  add_layers(net, c);
  if (image_changed && !net.image_problem().empty()) return {"image_size", std::to_string(c.image_size) + " " + net.image_problem()};
  return net.problem();
}

sim::ModelPtr make_convnet(const ConvNetConfig& c) {
  Builder net(c.channels, c.image_size);
  add_layers(net, c);
  return net.finish(c.name);
}

}  // namespace dtsim::models
