// Note [GEMM efficiency]
// A GEMM reaches a fraction of peak that depends on its shape. cuBLAS tiles
// the (m, n) output into thread-block tiles (128 x 128 here) and runs them in
// waves over the SMs; the last wave is partly empty ("wave quantisation",
// NVIDIA Deep Learning Performance Guide, "Matrix Multiplication Background").
// A short reduction dimension k leaves too little work per tile to hide loads,
// so efficiency also falls as k / (k + k0). The best large-GEMM efficiency is
// a per-device figure (DeviceSpec::gemm_efficiency) until calibration
// replaces it with measurements.
//
// Note [FP8 training]
// Precision fp8 is FP8 training as NVIDIA's Transformer Engine runs it
// (and torchao's float8 training, which follows it): the Linear layers of
// the transformer blocks (TE's Linear, LayerNormLinear, LayerNormMLP) run
// their GEMMs on the FP8 tensor cores with per-tensor scales; everything
// else stays bf16: weights (with fp32 masters in the optimizer), gradients,
// activations between layers, LayerNorm, softmax, dropout, and attention
// itself (TE's DotProductAttention runs FP8 only under fp8_dpa, off by
// default). The embedding and the output layer are not TE modules in
// Megatron-LM, and torchtitan's float8 converter skips `output`, so layers
// other than transformer blocks run as bf16 (kernel_precision()).
//   - A kGemm kernel of a transformer block under fp8 runs at peak_fp8 x
//     its GEMM efficiency; kAttention (the batched QK^T and AV) at the bf16
//     rate; memory-bound kernels as in bf16.
//   - Before each FP8 GEMM, TE casts its first operand to FP8 with the
//     current scale and records its amax in the same pass
//     (transformer_engine/pytorch/module/linear.py, _Linear.forward:
//     the input's quantizer; backward: grad_output's, in E5M2), and keeps
//     the FP8 weights (and their transposes for dgrad) cached across
//     micro-batches (`is_first_microbatch`; the `_fp8_workspaces` of
//     TransformerEngineBaseModule). fp8_cast_time() charges each FP8 GEMM
//     one memory-bound pass over its (m, k) operand: read at 2 bytes an
//     element, written at 1, plus a launch. Forward that is the input,
//     dgrad the output's gradient, wgrad the transposed input TE's
//     cast-transpose writes beside it: per Linear about the 4 bytes an
//     element TE's fused cast-transpose moves over input and gradient.
//     The weights' own casts (once an iteration) are not charged; TE's
//     fusion of a cast into the LayerNorm before it (LayerNormLinear) is
//     not credited either.
//   - Under fp8_recipe tensorwise (TE's Float8CurrentScaling, Megatron's
//     --fp8-recipe tensorwise) the scale comes from the tensor being cast:
//     Float8CurrentScalingQuantizer::quantize_impl (transformer_engine/
//     pytorch/csrc/quantizer.cpp) runs nvte_compute_amax over the input, then
//     nvte_compute_scale_from_amax, then the cast (nvte_quantize_v2), so each
//     cast reads its input once more (2 bytes an element) and launches two
//     kernels more (DeviceSpec::fp8_amax_pass); under delayed scaling the
//     amax is recorded by the cast itself. The amax's all-reduce over the
//     tensor-parallel group, where sequence parallelism asks for one, is
//     not priced (4 bytes, latency only).
#include <algorithm>
#include <cmath>

#include "dtsim/sim/cost.hpp"

namespace dtsim::sim {
namespace {
constexpr std::int64_t kTile = 128;
constexpr double kShortK = 48.0;

std::int64_t ceil_div(std::int64_t a, std::int64_t b) { return (a + b - 1) / b; }
}  // namespace

Precision kernel_precision(const Layer& layer, Precision p) {
  return p == Precision::kFp8 && layer.kind != LayerKind::kTransformer ? Precision::kBf16 : p;
}

TimeNs fp8_cast_time(const Kernel& k, Precision p, const DeviceSpec& device) {
  if (p != Precision::kFp8 || k.kind != KernelKind::kGemm) return 0;
  const double elements = static_cast<double>(k.m) * static_cast<double>(k.k) * static_cast<double>(std::max<std::int64_t>(1, k.batch));
  // bf16 in, fp8 out; current scaling reads the input for its amax first.
  const double bytes_per_element = device.fp8_amax_pass ? 2 + 2 + 1 : 2 + 1;
  const TimeNs launches = (device.fp8_amax_pass ? 3 : 1) * device.kernel_launch;
  return seconds_to_ns(elements * bytes_per_element / (device.memory_bandwidth * device.memory_efficiency)) + launches;
}

TimeNs ComputeModel::kernels_time(const std::vector<Kernel>& ks, Precision p) const {
  TimeNs t = 0;
  for (const auto& k : ks) t += kernel_time(k, p) * k.repeat;
  return t;
}

double ComputeModel::memory_share(const Layer& layer, Pass pass, Precision p) const {
  return memory_share(pass == Pass::kForward ? layer.forward : layer.backward, kernel_precision(layer, p));
}

double ComputeModel::memory_share(const std::vector<Kernel>& ks, Precision p) const {
  double all = 0, memory = 0;
  for (const Kernel& k : ks) {
    const double t = static_cast<double>(kernel_time(k, p)) * static_cast<double>(k.repeat);
    all += t;
    if (k.kind == KernelKind::kElementwise || k.kind == KernelKind::kNorm || k.kind == KernelKind::kEmbedding) memory += t;
  }
  return all > 0 ? std::min(1.0, memory / all) : 0.0;
}

TimeNs ComputeModel::layer_time(const Layer& layer, Pass pass, Precision p, const WorkloadShape&) const {
  return kernels_time(pass == Pass::kForward ? layer.forward : layer.backward, kernel_precision(layer, p));
}

int flat_updates(std::int64_t params) { return params <= 0 ? 0 : static_cast<int>((params + kUpdateChunk - 1) / kUpdateChunk); }

Bytes unfused_step_bytes(std::int64_t largest, Optimizer o, Precision p, bool fused, bool master_weights) {
  if (fused || is_sgd(o) || largest <= 0) return 0;
  const Bytes per = p == Precision::kFp32 ? 4 : master_weights ? 8 : element_bytes(p);
  return std::min(largest, kUpdateChunk) * per;
}

int layer_updates(std::int64_t params, int tensors) {
  return params <= 0 ? 0 : std::max({1, tensors, flat_updates(params)});
}

double update_bytes_per_param(Optimizer o, Precision p, bool master_weights) {
  const bool mixed = p != Precision::kFp32;
  const double states = o == Optimizer::kSgd ? 1 : o == Optimizer::kSgdPlain ? 0 : 2;  // momentum (+ variance)
  if (mixed && !master_weights) {
    // Note [No master weights] (plan.cpp): read the gradient, the parameter
    // and the states, write the last two, all in the parameters' bytes.
    const double e = element_bytes(p);
    return e + e + e * states + e + e * states;
  }
  const double grad = mixed ? 2 : 4;
  // read: grad + master + states; write: master + states (+ fp16 copy)
  return grad + 4 + 4 * states + 4 + 4 * states + (mixed ? 2 : 0);
}

// Note [Optimizer step]
// Without a profile, a step streams update_bytes_per_param bytes per
// parameter at the device's achievable bandwidth and launches its kernels
// once per tensor. Both ends of that are guesses on a CPU: the runtime's Adam
// (models::adam_update) is eight unfused passes, and which of its tensors
// stay in cache depends on their size. On the CI machine the formula priced
// bert-tiny's step (4.4M parameters) at 15.4 ms where it took 8.0. So
// calibration times that very function over parameter and tensor counts
// (kernels "adam" and "sgd": m parameters in n tensors), and
// ProfileComputeModel prices a step from those samples.
TimeNs ComputeModel::optimizer_time(double params, int tensors, Optimizer o, Precision p, const DeviceSpec& d) const {
  const double bytes = params * update_bytes_per_param(o, p);
  return seconds_to_ns(bytes / (d.memory_bandwidth * d.memory_efficiency)) + static_cast<TimeNs>(tensors) * d.kernel_launch;
}

TimeNs ComputeModel::bucket_copy_time(double /*params*/, int /*tensors*/, bool /*out*/) const { return 0; }

std::optional<LayerMemory> ComputeModel::layer_memory(const Layer& /*layer*/, Precision /*p*/, const WorkloadShape& /*shape*/) const {
  return std::nullopt;
}

TimeNs ComputeModel::recompute_time(const Layer& /*layer*/, const std::vector<Kernel>& kernels, Precision p,
                                    const WorkloadShape& /*shape*/) const {
  return kernels_time(kernels, p);
}

TimeNs ComputeModel::layer_launch_time(const Layer& /*layer*/, Pass /*pass*/, Precision /*p*/) const { return 0; }

TimeNs ComputeModel::optimizer_launch_time(double /*params*/, int /*updates*/, Optimizer /*o*/, Precision /*p*/) const { return 0; }

TimeNs ComputeModel::host_optimizer_time(double params, Optimizer o, Precision /*p*/, const ClusterSpec& cluster) const {
  // Host Adam streams fp32 states through host memory, which the host's
  // GPUs share; DeepSpeed's CPU-Adam is vectorised, so bandwidth bounds it.
  const double host_bytes = params * update_bytes_per_param(o, Precision::kFp32);
  const double per_rank_bw = cluster.host_memory_bandwidth / cluster.gpus_per_host();
  const double per_rank_flops = cluster.host_flops / cluster.gpus_per_host();
  return seconds_to_ns(std::max(host_bytes / per_rank_bw, params * 12.0 / per_rank_flops));
}

// Note [Fused attention]
// A fused attention kernel does its matmuls on tensor cores but between
// them the softmax's exponentials and rescaling on the slower ALUs, tile by
// tile, and its backward recomputes; it reaches far less of the peak than a
// large GEMM. FlashAttention-2 reaches 50-73% of an A100's peak (Dao 2023,
// abstract) and "only 35% utilization on H100 GPUs" (Shah et al. 2024,
// FlashAttention-3, abstract), where FlashAttention-3 reaches 75%: the
// devices carry the FlashAttention-2 figures (PyTorch's SDPA runs it), a
// cluster file may set attention_efficiency for another kernel.
RooflineComputeModel::RooflineComputeModel(const DeviceSpec& device) : device_(device) {}

double RooflineComputeModel::gemm_efficiency(std::int64_t m, std::int64_t n, std::int64_t k) const {
  if (m <= 0 || n <= 0 || k <= 0) return device_.gemm_efficiency;
  const double tiles = static_cast<double>(ceil_div(m, kTile) * ceil_div(n, kTile));
  const double units = std::max(1, device_.compute_units);
  const double waves = std::ceil(tiles / units);
  const double wave_util = tiles / (waves * units);
  const double k_util = static_cast<double>(k) / (static_cast<double>(k) + kShortK);
  return device_.gemm_efficiency * wave_util * k_util;
}

TimeNs RooflineComputeModel::kernel_time(const Kernel& k, Precision p) const {
  const double mem_s = static_cast<double>(k.bytes) / (device_.memory_bandwidth * device_.memory_efficiency);
  double compute_s = 0;
  switch (k.kind) {
    case KernelKind::kGemm:
    case KernelKind::kAttention:
    case KernelKind::kRecurrent: {
      // Batched GEMMs: the batch multiplies the tiles available to fill waves.
      double eff = gemm_efficiency(k.m * std::max<std::int64_t>(1, k.batch), k.n, k.k);
      // Note [Fused attention]
      if (k.fused && device_.attention_efficiency > 0) eff = device_.attention_efficiency;
      // Under fp8 only the Linear layers' GEMMs run in FP8 (Note [FP8 training]).
      const Precision run = p == Precision::kFp8 && k.kind != KernelKind::kGemm ? Precision::kBf16 : p;
      compute_s = k.flops / (device_.peak_for(run) * eff);
      break;
    }
    case KernelKind::kElementwise:
    case KernelKind::kNorm:
    case KernelKind::kEmbedding:
      compute_s = k.flops / device_.peak_fp32;
      break;
  }
  return seconds_to_ns(std::max(compute_s, mem_s)) + device_.kernel_launch + fp8_cast_time(k, p, device_);
}

}  // namespace dtsim::sim
