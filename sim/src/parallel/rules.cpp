// The rules table (rules.hpp). Each rule is written once here; resolve()
// in plan.cpp reports a plan's breaches of them with the values these give.
#include "dtsim/sim/rules.hpp"

#include <algorithm>

namespace dtsim::sim {

std::vector<int> divisors(int n) {
  std::vector<int> out;
  for (int d = 1; d <= n; ++d) {
    if (n % d == 0) out.push_back(d);
  }
  return out;
}

std::string join_values(const std::vector<int>& values) {
  std::string out;
  for (int v : values) out += (out.empty() ? "" : ", ") + std::to_string(v);
  return out;
}

PlanRules::PlanRules(const Model& model, const ClusterSpec& cluster, int gpus)
    : model_(model), cluster_(cluster), gpus_(gpus == 0 ? cluster.gpus() : gpus) {
  layers_ = model.layer_count();
  max_seq_len_ = model.max_seq_len();
  min_seq_len_ = model.min_seq_len();
  batch_norm_ = model.has_batch_norm();
  frozen_ = model.trainable_parameters() < model.parameters();
  if (frozen_) {
    const LayerList layers = model.shared_layers(WorkloadShape{});
    quantized_ = std::any_of(layers.begin(), layers.end(), [](const Layer& l) { return l.frozen_quantized > 0; });
    int8_ = std::any_of(layers.begin(), layers.end(), [](const Layer& l) { return l.frozen_quantized_bits == 8; });
    fp32_ = std::any_of(layers.begin(), layers.end(), [](const Layer& l) { return l.frozen_quantized_bits == 32; });
  }
}

std::vector<int> PlanRules::tp_values() const {
  std::vector<int> out;
  for (int t : divisors(cluster_.gpus_per_node)) {
    if (gpus_ % t == 0 && model_.tp_error(t).empty()) out.push_back(t);
  }
  return out;
}

std::vector<int> PlanRules::pp_values(int tp) const {
  std::vector<int> out;
  if (tp < 1 || gpus_ % tp != 0) return out;
  for (int p : divisors(gpus_ / tp)) {
    if (p <= layers_ && (p == 1 || model_.pp_error(p).empty())) out.push_back(p);
  }
  return out;
}

std::vector<int> PlanRules::dp_values(int tp, int pp, int cp) const {
  if (tp < 1 || pp < 1 || cp < 1 || gpus_ % (tp * pp * cp) != 0) return {};
  return divisors(gpus_ / (tp * pp * cp));
}

std::vector<int> PlanRules::cp_values(int tp, std::int64_t seq_len) const {
  std::vector<int> out{1};
  if (tp < 1 || gpus_ % tp != 0) return out;
  for (int c : divisors(gpus_ / tp)) {
    if (c > 1 && seq_len % (2 * c) == 0 && model_.cp_error(c, tp).empty()) out.push_back(c);
  }
  return out;
}

std::vector<int> PlanRules::ep_values(int tp, int cp, int dp, int etp, MoeExperts how) const {
  const int experts = model_.experts();
  if (experts <= 0 || how == MoeExperts::kDense) return {1};
  std::vector<int> out;
  const int ranks = tp * cp * dp;
  for (int e : divisors(experts)) {
    if (etp >= 1 && ranks % (e * etp) == 0) out.push_back(e);
  }
  return out;
}

std::vector<int> PlanRules::etp_values(int tp) const {
  if (model_.experts() <= 0 || tp == 1) return {tp};
  return {1, tp};
}

std::vector<MoeDispatcher> PlanRules::dispatcher_values(int ep, int etp, MoeExperts experts) const {
  if (model_.experts() <= 0 || experts == MoeExperts::kDense || ep > 1 || etp <= 1) return {MoeDispatcher::kAllToAll};
  return {model_.top_k() >= 2 ? MoeDispatcher::kAllGather : MoeDispatcher::kAllToAll};
}

std::vector<MoeDispatcher> PlanRules::dispatchers(MoeExperts experts) const {
  if (model_.experts() <= 0 || experts == MoeExperts::kDense) return {MoeDispatcher::kAllToAll};
  return {MoeDispatcher::kAllToAll, MoeDispatcher::kAllGather, MoeDispatcher::kDeepEp};
}

std::vector<LossParallel> PlanRules::loss_parallels(int tp) const {
  if (tp <= 1) return {LossParallel::kAuto};
  return {LossParallel::kAuto, LossParallel::kMegatron, LossParallel::kDtensor};
}

std::vector<Kernels> PlanRules::kernels() const {
  // Note [Fused kernels]: offered where a layer's description moves with it.
  WorkloadShape fused;
  fused.fused_kernels = true;
  const LayerList a = model_.shared_layers(fused), b = model_.shared_layers(WorkloadShape{});
  for (std::size_t l = 0; l < a.size() && l < b.size(); ++l) {
    if (a[l].signature != b[l].signature) return {Kernels::kComposite, Kernels::kFused};
  }
  return {Kernels::kComposite};
}

std::vector<Fp8Recipe> PlanRules::fp8_recipes(Precision p) const {
  if (p != Precision::kFp8) return {Fp8Recipe::kDelayed};
  // Note [FP8 training]: MXFP8 where TE runs it, compute capability 10.x.
  const int cc = cluster_.device.compute_capability;
  if (cc >= 100 && cc < 120) return {Fp8Recipe::kDelayed, Fp8Recipe::kTensorwise, Fp8Recipe::kMxfp8};
  return {Fp8Recipe::kDelayed, Fp8Recipe::kTensorwise};
}

bool PlanRules::masters_optional(Precision p, bool fp32_gradients, Offload optimizer) {
  return (p == Precision::kFp16 || p == Precision::kBf16) && !fp32_gradients && optimizer != Offload::kCpu;
}

bool PlanRules::precision_aware_allowed(int zero_stage, bool fsdp, Optimizer o) {
  return zero_stage == 1 && !fsdp && !is_sgd(o);
}

bool PlanRules::eight_bit_states_allowed(Optimizer o, bool precision_aware, Offload optimizer) {
  return o != Optimizer::kSgdPlain && !precision_aware && optimizer != Offload::kCpu;
}

bool PlanRules::fp32_accumulator_allowed(Precision p, bool master_weights, int zero_stage, int shard_ranks, bool fsdp, Offload optimizer,
                                         bool grad_buffer, bool precision_aware, bool in_backward) {
  return (p == Precision::kFp16 || p == Precision::kBf16) && master_weights && (zero_stage == 0 || (zero_stage == 1 && shard_ranks <= 1)) && !fsdp &&
         optimizer != Offload::kCpu && !grad_buffer && !precision_aware && !in_backward;
}

bool PlanRules::optimizer_in_backward_allowed(int gpus, std::int64_t micro_batches, int zero_stage, Offload optimizer,
                                              bool grad_buffer) {
  return gpus == 1 && micro_batches == 1 && zero_stage == 0 && optimizer != Offload::kCpu && !grad_buffer;
}

bool PlanRules::saved_tensor_offload_allowed(int pp, bool megatron_offload, bool deepspeed_checkpoints, int recompute_group) const {
  return pp == 1 && !megatron_offload && !deepspeed_checkpoints && recompute_group <= 1 && !cluster_.device.gloo_collectives &&
         transformer_layers() > 0;
}

std::vector<CpComm> PlanRules::cp_comms(int cp) const {
  if (cp <= 1) return {CpComm::kP2p};
  if (model_.cp_all_gather_only()) return {CpComm::kAllGather};
  return {CpComm::kP2p, CpComm::kAllGather};
}

// Note [SDPA in fp32]
// `attention: flash` is PyTorch's scaled_dot_product_attention as HF calls
// it: with no padding mask, is_causal, and on PyTorch >= 2.5 the key/value
// heads unexpanded with enable_gqa (transformers' integrations/
// sdpa_attention.py, use_gqa_in_sdpa). PyTorch then picks a kernel
// (aten/src/ATen/native/transformers/cuda/sdp_utils.cpp): FlashAttention
// takes only fp16 and bf16, the memory-efficient kernel no enable_gqa, so
// an fp32 step of a grouped-query model runs the math path, which keeps
// the softmax's fp32 probabilities as eager attention does. Llama 3.2 1B on
// the H100 at 4,096 tokens held 33.8 GiB more in fp32 than the fused
// kernel would: 16 layers x 32 heads x 4,096^2 x 4 B is 32 GiB
// (docs/validation-gpu.md). So that case is priced as eager attention.
bool PlanRules::flash_attention(Attention a, Precision p) const {
  switch (a) {
    case Attention::kEager: return false;
    case Attention::kFlash: return !(p == Precision::kFp32 && model_.grouped_kv_sdpa());
    case Attention::kAuto: break;
  }
  return !cluster_.device.gloo_collectives && p != Precision::kFp32;
}

std::vector<Attention> PlanRules::attentions() const {
  if (!model_.cp_error(2).empty() && recomputes().size() < 3) return {Attention::kAuto};  // no attention to choose
  return {Attention::kAuto, Attention::kEager, Attention::kFlash};
}

std::vector<Schedule> PlanRules::schedules(int pp) const {
  if (pp <= 1) return {Schedule::k1f1b};
  return {Schedule::k1f1b, Schedule::kGpipe, Schedule::kInterleaved, Schedule::kZbH1, Schedule::kNaive};
}

std::vector<int> PlanRules::virtual_stage_values(int pp, std::int64_t micro_batches) const {
  std::vector<int> out;
  if (pp <= 1 || micro_batches % pp != 0) return out;
  for (int v = 2; pp * v <= layers_; ++v) out.push_back(v);
  return out;
}

std::vector<int> PlanRules::zero_stages(int pp) const {
  if (pp > 1) return {0, 1};
  // Note [fp32 base] (models/src/peft.cpp): DeepSpeed, whose stages these
  // are beside a trainer's LoRA, casts an fp32 base to 16 bits.
  if (fp32_) return {0};
  // Note [Frozen weights under ZeRO-3]: DeepSpeed partitions no 8-bit base.
  if (int8_) return {0, 1, 2};
  return {0, 1, 2, 3};
}

std::vector<FsdpMode> PlanRules::fsdp_modes(int pp) const {
  // Note [Frozen weights under FSDP] (lowering/passes/sharded_parameters.cpp):
  // FSDP2 shards a fine-tune's frozen weights on one stage, at full_shard
  // and hybrid_shard.
  // Note [8-bit base] (models/src/peft.cpp): FSDP does not wrap int8 weights.
  if (int8_) return {};
  if (fp32_) return {FsdpMode::kNoShard};
  if (frozen_) return pp > 1 ? std::vector<FsdpMode>{FsdpMode::kNoShard}
                             : std::vector<FsdpMode>{FsdpMode::kFullShard, FsdpMode::kNoShard, FsdpMode::kHybridShard};
  if (pp > 1) return {FsdpMode::kFullShard, FsdpMode::kNoShard};
  return {FsdpMode::kFullShard, FsdpMode::kShardGradOp, FsdpMode::kNoShard, FsdpMode::kHybridShard};
}

std::vector<int> PlanRules::fsdp_versions(FsdpMode f, bool overlap, bool limit_all_gathers) {
  const bool sharded = f == FsdpMode::kFullShard || f == FsdpMode::kShardGradOp || f == FsdpMode::kHybridShard;
  if (!sharded || !overlap || !limit_all_gathers) return {1};
  return {1, 2};
}

std::vector<bool> PlanRules::overlap_param_gather_values(int zero_stage, bool fsdp, bool overlap, Runtime runtime) {
  if (zero_stage != 1 || fsdp || !overlap || runtime == Runtime::kPython) return {false};
  return {false, true};
}

std::vector<Offload> PlanRules::optimizer_offloads(int zero_stage, int pp) const {
  if (zero_stage == 0 || pp > 1) return {Offload::kNone};
  return {Offload::kNone, Offload::kCpu};
}

std::vector<Offload> PlanRules::param_offloads(int zero_stage) const {
  if (zero_stage != 3) return {Offload::kNone};
  return {Offload::kNone, Offload::kCpu};
}

int PlanRules::transformer_layers() const {
  const LayerList layers = model_.shared_layers(WorkloadShape{});
  return static_cast<int>(std::count_if(layers.begin(), layers.end(), [](const Layer& l) { return l.kind == LayerKind::kTransformer; }));
}

int PlanRules::cpu_offloading_max(int pp, Recompute recompute) const {
  // On a CPU the activations are in host memory already.
  if (pp > 1 || recompute != Recompute::kNone || cluster_.device.gloo_collectives) return 0;
  return std::max(0, transformer_layers() - 1);
}

bool PlanRules::deepspeed_checkpoints_allowed(int pp, Recompute recompute, int recompute_blocks, int recompute_group) const {
  return pp == 1 && recompute == Recompute::kFull && recompute_blocks == 0 && recompute_group <= 1 &&
         !cluster_.device.gloo_collectives;
}

std::vector<Recompute> PlanRules::recomputes() const {
  if (!attention_) {
    // Built once, when first asked: resolve never asks.
    const LayerList one = model_.shared_layers(WorkloadShape{});
    attention_ = std::any_of(one.begin(), one.end(), [](const Layer& l) { return l.attention_core_bytes > 0; });
    blocks_ = std::any_of(one.begin(), one.end(), [](const Layer& l) { return l.is_block(); });
  }
  if (*attention_) {
    if (op_recompute_allowed(1, 1, true)) return {Recompute::kNone, Recompute::kSelective, Recompute::kFull, Recompute::kOp};
    return {Recompute::kNone, Recompute::kSelective, Recompute::kFull};
  }
  // Full recompute checkpoints blocks: a model without them (seed 003's
  // image networks) has nothing to recompute, and the search would list
  // each of its plans twice.
  if (!blocks_) return {Recompute::kNone};
  return {Recompute::kNone, Recompute::kFull};
}

bool PlanRules::op_recompute_allowed(int tp, int cp, bool flash) const {
  const auto key = std::make_tuple(tp, cp, flash);
  if (const auto it = op_recompute_.find(key); it != op_recompute_.end()) return it->second;
  // Note [Op-level recompute] (models/src/llama.cpp): described where every
  // block says what the op policy keeps.
  WorkloadShape shape;
  shape.tp = tp;
  shape.cp = cp;
  shape.flash_attention = flash;
  const LayerList layers = model_.shared_layers(shape);
  const bool described =
      std::all_of(layers.begin(), layers.end(), [](const Layer& l) { return !l.is_block() || l.op_recompute_bytes > 0; }) &&
      std::any_of(layers.begin(), layers.end(), [](const Layer& l) { return l.is_block(); });
  op_recompute_[key] = described;
  return described;
}

namespace {
/// The union over a model's layers of a mask each describes (the Megatron
/// modules it has), at the default shape.
template <typename Mask>
Mask described_by(const Model& model, Mask Layer::*field) {
  Mask m = 0;
  for (const Layer& l : model.shared_layers(WorkloadShape{})) m = static_cast<Mask>(m | l.*field);
  return m;
}
}  // namespace

std::uint8_t PlanRules::recompute_modules_described() const {
  if (!modules_described_) modules_described_ = described_by(model_, &Layer::recompute_described);
  return *modules_described_;
}

std::uint16_t PlanRules::offload_modules_described() const {
  if (!offload_described_) offload_described_ = described_by(model_, &Layer::offload_described);
  return *offload_described_;
}

std::string PlanRules::model_name() const { return model_.name(); }

std::vector<bool> PlanRules::sequence_parallel_values(int tp, int cp, std::int64_t seq_len) const {
  const std::int64_t s = seq_len > 0 ? seq_len : max_seq_len();
  if (tp > 1 && cp >= 1 && (s / cp) % tp == 0) return {false, true};
  return {false};
}

std::vector<bool> PlanRules::tp_comm_overlap_values(int tp, bool sequence_parallel) {
  if (tp > 1 && sequence_parallel) return {false, true};
  return {false};
}

std::vector<bool> PlanRules::ep_overlap_values(int ep, int pp, Schedule schedule, Recompute recompute, Precision precision,
                                               bool sharded, MoeDispatcher dispatcher) {
  if (ep > 1 && (pp == 1 || schedule == Schedule::kInterleaved) && recompute != Recompute::kFull &&
      precision != Precision::kFp32 && !sharded && dispatcher != MoeDispatcher::kAllGather) {
    return {false, true};
  }
  return {false};
}

std::vector<Precision> PlanRules::precisions() const {
  // fp16 runs everywhere (on FP16 units where the device has them, else at
  // its fp32 rate); bf16 only where the device supports it; fp8 only on FP8
  // tensor cores (Hopper, Ada and later), and it keeps bf16 besides.
  std::vector<Precision> out{Precision::kFp32, Precision::kFp16};
  if (cluster_.device.peak_bf16 > 0) out.push_back(Precision::kBf16);
  // A quantized base dequantizes to 16 bits for its GEMMs (Note [QLoRA] in models/src/peft.cpp).
  if (fp32_) out.erase(out.begin());  // Note [fp32 base]: autocast to 16 bits
  if (quantized_) return out;
  if (cluster_.device.peak_fp8 > 0 && cluster_.device.peak_bf16 > 0) out.push_back(Precision::kFp8);
  // NVFP4 where TE trains it (Note [NVFP4 training]): FP4 tensor cores of
  // compute capability 10.x ("Training: SM 10.0, SM 10.3", nvfp4.rst).
  const int cc = cluster_.device.compute_capability;
  if (cluster_.device.peak_fp4 > 0 && cluster_.device.peak_fp8 > 0 && cc >= 100 && cc < 110) out.push_back(Precision::kFp4);
  return out;
}

std::vector<std::string> PlanRules::placements() const {
  return {"tp,pp,dp", "tp,dp,pp", "pp,tp,dp", "pp,dp,tp", "dp,tp,pp", "dp,pp,tp"};
}

}  // namespace dtsim::sim
