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
//   - Before the forward GEMM of a Linear, TE casts its input to FP8, and
//     before dgrad the output's gradient (transformer_engine/pytorch/
//     module/linear.py, _Linear.forward: the input's quantizer; backward:
//     grad_output's), each in one kernel that writes every copy the
//     layer's GEMMs will read of it: wgrad reads the input's and the
//     gradient's second copies and casts nothing (Note [FP8 casts], below).
//     The FP8 weights (and their second copies) are cached across
//     micro-batches (`is_first_microbatch`; the `_fp8_workspaces` of
//     TransformerEngineBaseModule). fp8_cast_time() charges the forward and
//     dgrad GEMMs one memory-bound pass over their (m, k) operand, plus a
//     launch. The weights' own casts (once an iteration) are not charged;
//     TE's fusion of a cast into the norm before it (LayerNormLinear, under
//     delayed scaling) is not credited either.
//   - Under fp8_recipe tensorwise (TE's Float8CurrentScaling, Megatron's
//     --fp8-recipe tensorwise) the scale comes from the tensor being cast:
//     Float8CurrentScalingQuantizer::quantize_impl (transformer_engine/
//     pytorch/csrc/quantizer.cpp) runs nvte_compute_amax over the input, then
//     nvte_compute_scale_from_amax, then the cast (nvte_quantize_v2), so each
//     cast reads its input once more (2 bytes an element) and launches two
//     kernels more; under delayed scaling the amax is recorded by the cast
//     itself. The amax's all-reduce over the tensor-parallel group, where
//     sequence parallelism asks for one, is not priced (4 bytes, latency
//     only). TE computes the amax inside its norm where a LayerNormLinear
//     follows one (FUSED_NORM_AMAX_FP8, csrc/extensions/normalization.cpp);
//     dtsim's norms are kernels of their own, so that read is charged.
//   - Under fp8_recipe mxfp8 (TE's MXFP8BlockScaling, Megatron's
//     --fp8-recipe mxfp8) each 32 consecutive elements share a power-of-two
//     scale, an E8M0 byte (common/recipe/__init__.py), which the cast finds
//     itself: no amax pass. Its GEMMs (cuBLASLt's VEC32_UE8M0 block-scaled
//     kernels, common/gemm/cublaslt_gemm.cu) run slower than per-tensor
//     FP8's on the same tensor cores: TE's GEMM profiling tutorial
//     (docs/examples/gemm_profiling/gemm_profiling.rst, a B300, pre-quantised
//     inputs, the GEMMs of a 4096-wide layer at 15,872 tokens) times a
//     layer's twelve GEMMs at 7.161 ms in MXFP8 against 6.812 in FP8 with
//     current scaling: kMxfp8GemmSlowdown = 1.051. TE supports it on compute
//     capability 10.x only (quantization.py, _compute_mxfp8_support: not
//     Hopper, not 12.x): resolve() refuses it elsewhere. Not priced: the
//     swizzle of the scales into the GEMM's layout, a kernel of its own
//     before a GEMM whose operand was gathered (sequence parallelism) or is
//     an FP8 primary weight (fused into the cast otherwise since TE 2.12;
//     the scales are 1/32 of the tensor, so a launch each).
//   - Under sequence parallelism TE casts the local shard and gathers the
//     FP8 copy (per-tensor: the row-wise one, its transpose made again in
//     the backward from a second gather; mxfp8: the column-wise one as
//     well); dtsim charges the casts over the gathered (m, k) operand.
//
// Note [NVFP4 training]
// Precision fp4 is NVFP4 training as Transformer Engine runs it
// (recipe.NVFP4BlockScaling, Megatron-Core's --fp4-format e2m1 --fp4-recipe
// nvfp4): the transformer blocks' Linear GEMMs take 4-bit E2M1 operands, a
// 1-byte E4M3 scale for each 16 elements and an fp32 scale for the tensor
// (common/recipe/__init__.py); the rest is as under fp8 (bf16 attention,
// norms, embedding and head: kernel_precision()). Megatron-Core runs every
// block in NVFP4 unless --first-last-layers-bf16 (off by default, and in
// Megatron-Bridge's recipes).
//   - GEMMs: cuBLASLt's VEC16_UE4M3 block-scaled kernels reach far less of
//     the FP4 datasheet peak than FP8's of theirs: TE's GEMM profiling
//     tutorial (gemm_profiling.rst, a B300, pre-quantised inputs) times a
//     4096-wide layer's twelve GEMMs at 3.764 ms in NVFP4 against 6.812 ms
//     in per-tensor FP8, 1.81x where the peaks differ 3.1x. So an NVFP4
//     GEMM is priced as the FP8 one times kNvfp4GemmTimeRatio = 3.764 /
//     6.812 on any Blackwell (Megatron-Bridge's NVFP4 rows run 1.31-1.50x
//     its MXFP8 ones end to end on GB200 and GB300 alike, where the FP4
//     peaks are 2x and 3x the FP8 ones); DeviceSpec::peak_fp4, the
//     datasheet's, is what MFU is counted against.
//   - Casts (NVFP4Quantizer::quantize_impl, pytorch/csrc/quantizer.cpp):
//     the tensor's amax first (nvte_hadamard_transform_amax, which also
//     takes the amax of the Hadamard-transformed transpose wgrad will
//     read), then one fused pass writing the row-wise copy and the
//     transformed column-wise one (nvte_quantize_with_hadamard_transform):
//     two reads of the bf16 tensor, 2 x (0.5 + 1/16) bytes written:
//     kNvfp4CastBytes = 5.125 an element, two launches, for the forward's
//     input and dgrad's gradient (stochastic rounding on the gradient, in
//     the same pass); wgrad casts nothing, as under fp8 (Note [FP8 casts]).
//   - Memory (Note [FP8 memory] in lowering/emitter.hpp): each weight's two
//     cached copies, 2 x (0.5 + 1/16) bytes an element (16 x 16 blocks
//     serve both layouts); Megatron's --fp4-param-gather (plan
//     fp8_param_gather under fp4) gathers the row-wise copy and its scales,
//     0.5625 bytes. The saved input of a Linear is its FP4 column-wise copy,
//     half a byte and a scale byte for each 16 (WorkloadShape::
//     saved_gemm_input()).
//
// Note [FP8 casts]
// What one cast moves, an element of the tensor cast (fp8_cast_bytes()):
// it reads the bf16 tensor (2 bytes) and writes the copy the forward or
// dgrad GEMM reads (1 byte). Whether it writes a second copy for wgrad
// depends on the GEMM:
//   - per-tensor scaling on Hopper (compute capability 9.x) and earlier:
//     yes, the transpose (its FP8 GEMM takes only the TN layout; TE's
//     cast-transpose writes both, quantizer.cpp: `with_transpose =
//     columnwise_usage && !is_non_tn_fp8_gemm_supported`);
//   - per-tensor scaling on Blackwell (10.x and later): no, its GEMM reads
//     the one copy in either layout (non-TN FP8 GEMMs supported);
//   - mxfp8: yes, a column-wise copy scaled along the other dimension, and
//     a scale byte per 32 elements for each copy (one BIDIMENSIONAL pass,
//     common/cast/mxfp8/quantize_mxfp8.cuh): 2 + 1 + 1 + 2/32 bytes.
// Current scaling adds its amax read (2 bytes) and two launches.
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
  if (quantized_gemms(p) && layer.bf16_gemms) return Precision::kBf16;  // Note [BF16 layers] in core/model.cpp
  return quantized_gemms(p) && layer.kind != LayerKind::kTransformer && !layer.fp8_as_block ? Precision::kBf16 : p;
}

double fp8_copy_bytes(Fp8Recipe recipe, int compute_capability) {
  // The copy the forward or dgrad GEMM reads, and the second copy wgrad reads:
  // mxfp8's column-wise one with a scale byte per block for each copy,
  // Hopper's transpose (cast-transpose), none on Blackwell.
  if (recipe == Fp8Recipe::kMxfp8) return 1 + 1 + 2.0 / kMxfp8BlockElements;
  return compute_capability < 100 ? 1 + 1 : 1;
}

double fp8_cast_bytes(Fp8Recipe recipe, int compute_capability) {
  // Read the bf16 tensor, write its copies; current scaling's amax pass reads it first.
  return 2 + fp8_copy_bytes(recipe, compute_capability) + (recipe == Fp8Recipe::kTensorwise ? 2 : 0);
}

TimeNs fp8_cast_time(const Kernel& k, Precision p, const DeviceSpec& device) {
  if (!quantized_gemms(p) || k.kind != KernelKind::kGemm) return 0;
  // Note [FP8 casts]: wgrad reads copies the forward's and dgrad's casts wrote.
  if (k.name.ends_with(".wgrad")) return 0;
  const double elements = static_cast<double>(k.m) * static_cast<double>(k.k) * static_cast<double>(std::max<std::int64_t>(1, k.batch));
  const bool fp4 = p == Precision::kFp4;
  const double bytes_per_element = fp4 ? kNvfp4CastBytes : fp8_cast_bytes(device.fp8_recipe, device.compute_capability);
  // Note [NVFP4 training]: its amax (with the Hadamard transform's) and the cast.
  const TimeNs launches = (fp4 ? 2 : device.fp8_recipe == Fp8Recipe::kTensorwise ? 3 : 1) * device.kernel_launch;
  return seconds_to_ns(elements * bytes_per_element / (device.memory_bandwidth * device.memory_efficiency)) + launches;
}

double fp8_gemm_time_scale(const Kernel& k, Precision p, const DeviceSpec& device) {
  if (k.kind != KernelKind::kGemm) return 1.0;
  if (p == Precision::kFp4) return kNvfp4GemmTimeRatio;  // Note [NVFP4 training]
  return p == Precision::kFp8 && device.fp8_recipe == Fp8Recipe::kMxfp8 ? kMxfp8GemmSlowdown : 1.0;
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
  const double states = optimizer_buffers(o);  // momentum (+ variance)
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

// Note [Precision-aware step]
// Transformer Engine's FusedAdam under Megatron-Core's precision-aware
// optimizer (Note [Precision-aware optimizer] in sim/src/parallel/plan.cpp;
// transformer_engine/pytorch/optimizers/fused_adam.py, step) runs one fp32
// kernel over a group's parameters: it reads the gradient and both moments
// and writes the moments back (4 + 4 each), and updates the master: an
// fp32 one read and written (8) and the 16-bit parameter written (2), or,
// with store_param_remainders (multi_tensor_adam_param_remainder), the
// bf16 parameter and its 16-bit remainder each read and written (8).
// Where FusedAdam holds the masters it reads the gradient from its buffer
// as it is (4 bytes in fp32, 2 in bf16); otherwise Megatron-Core hands it
// an fp32 master as without the flag, priced as update_bytes_per_param's
// mixed step (a 16-bit gradient). A state kept in another type is first
// copied to fp32 (state.float(): its bytes read, 4 written) and written back
// after (_apply_scale): bf16 through a bf16 temporary and copy_ (4 + 2,
// then 2 + 2), 16 bytes more in all; fp16 also multiplied by its scale
// and rescaled from its absolute maximum (2 + 4, 4 + 4, then 4, 4 + 4 and
// 4 + 2), 32; fp8 dequantised, its maximum found and quantised (1 + 4, 4,
// 4 + 1), 14. So Adam with bf16 moments streams 28 + 32 = 60 bytes a
// parameter where the plain mixed step streams 28: the narrow moments save
// memory and cost step time. The eager copies' launches (three a tensor
// and state) are not priced.
double update_bytes_per_param(const ResolvedPlan& plan) {
  if (plan.optim_bits == 8) {
    // Note [8-bit optimizer] (plan.cpp): bitsandbytes' kernel reads the
    // gradient and the parameter, in one type, each state's byte and its
    // block's scale, and writes all but the gradient back: without masters
    // 16-bit, or fp32 (a model trained in fp32 or under autocast).
    const double states = optimizer_buffers(plan.optimizer);
    const bool sixteen = plan.precision != Precision::kFp32 && !plan.master_weights;
    const double e = sixteen ? element_bytes(plan.precision) : 4;
    return 3 * e + 2 * states * (1 + 4.0 / 256);
  }
  if (!plan.use_precision_aware_optimizer || is_sgd(plan.optimizer)) {
    return update_bytes_per_param(plan.optimizer, plan.precision, plan.master_weights);
  }
  const bool mixed = plan.precision != Precision::kFp32;
  const bool te = plan.te_master_weights();
  const double grad = te ? gradient_element_bytes(plan) : mixed ? 2 : 4;
  // The master read and written (in fp32 training the parameter itself),
  // and the 16-bit parameter written unless the remainders' 8 hold it.
  const double master = mixed && !plan.param_remainders() ? 8 + 2 : 8;
  const auto narrowed = [](StateDtype d) {
    switch (d) {
      case StateDtype::kFp32: return 0.0;
      case StateDtype::kBf16: return 16.0;
      case StateDtype::kFp16: return 32.0;
      case StateDtype::kFp8: return 14.0;
    }
    return 0.0;
  };
  double extra = narrowed(plan.exp_avg_dtype) + narrowed(plan.exp_avg_sq_dtype);
  if (mixed && te) extra += narrowed(plan.main_params_dtype);
  return grad + 16 + master + extra;
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
// devices carry the FlashAttention-2 figures (PyTorch's SDPA runs it; GB300
// 1.35x GB200's for its doubled exponential units, device_db.cpp), a
// cluster file may set attention_efficiency for another kernel.
RooflineComputeModel::RooflineComputeModel(const DeviceSpec& device) : device_(device) {}

double RooflineComputeModel::gemm_efficiency(std::int64_t m, std::int64_t n, std::int64_t k, int sm_margin) const {
  if (m <= 0 || n <= 0 || k <= 0) return device_.gemm_efficiency;
  const double tiles = static_cast<double>(ceil_div(m, kTile) * ceil_div(n, kTile));
  const double units = std::max(1, device_.compute_units - std::max(0, sm_margin));
  const double waves = std::ceil(tiles / units);
  const double wave_util = tiles / (waves * units);
  const double k_util = static_cast<double>(k) / (static_cast<double>(k) + kShortK);
  return device_.gemm_efficiency * wave_util * k_util;
}

double RooflineComputeModel::sm_share(const Kernel& k) const {
  const int units = std::max(1, device_.compute_units);
  return static_cast<double>(std::max(1, units - std::max(0, k.sm_margin))) / units;
}

Kernel gemm_chunk(const Kernel& k) {
  Kernel c = k;
  c.splits = 1;
  if (k.splits <= 1 || k.m <= 0) return c;
  // Note [Userbuffers' chunks] (models/src/layers.cpp): each chunk is m /
  // splits rows of the input against the whole weight, so it reads the
  // weight again and a share of the rest.
  c.m = ceil_div(k.m, k.splits);
  c.flops = k.flops / static_cast<double>(k.splits);
  const double n = static_cast<double>(k.n), kk = static_cast<double>(k.k), m = static_cast<double>(k.m),
               mc = static_cast<double>(c.m);
  const double whole = m * kk + kk * n + m * n;
  if (whole > 0) c.bytes = static_cast<Bytes>(std::llround(static_cast<double>(k.bytes) * (mc * kk + kk * n + mc * n) / whole));
  return c;
}

TimeNs RooflineComputeModel::kernel_time(const Kernel& k, Precision p) const {
  if (k.fp32) p = Precision::kFp32;  // a GEMM outside autocast
  if (k.splits > 1 && k.kind == KernelKind::kGemm) {
    // Note [Userbuffers' chunks]: the chunks one after another, the input's
    // FP8 cast once.
    const Kernel c = gemm_chunk(k);
    return (kernel_time(c, p) - fp8_cast_time(c, p, device_)) * k.splits + fp8_cast_time(k, p, device_);
  }
  const double mem_s = static_cast<double>(k.bytes) / (device_.memory_bandwidth * device_.memory_efficiency);
  double compute_s = 0;
  switch (k.kind) {
    case KernelKind::kGemm:
    case KernelKind::kAttention:
    case KernelKind::kRecurrent: {
      // Batched GEMMs: the batch multiplies the tiles available to fill waves.
      double eff = gemm_efficiency(k.m * std::max<std::int64_t>(1, k.batch), k.n, k.k, k.sm_margin);
      // Note [Userbuffers' chunks]: on the SMs a collective leaves it.
      if (k.sm_margin > 0) eff *= sm_share(k);
      // Note [Fused attention]
      if (k.fused && device_.attention_efficiency > 0) eff = device_.attention_efficiency;
      // Under fp8 only the Linear layers' GEMMs run in FP8 (Note [FP8 training]).
      // NVFP4's from FP8's (Note [NVFP4 training]).
      const Precision run = quantized_gemms(p) && k.kind != KernelKind::kGemm ? Precision::kBf16 : p == Precision::kFp4 ? Precision::kFp8 : p;
      compute_s = k.flops / (device_.peak_for(run) * eff) * fp8_gemm_time_scale(k, p, device_);
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
