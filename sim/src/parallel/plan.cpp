#include "dtsim/sim/plan.hpp"

#include <algorithm>
#include <string>
#include <vector>

#include <fmt/format.h>

#include "dtsim/sim/config_node.hpp"
#include "dtsim/sim/error.hpp"
#include "dtsim/sim/rules.hpp"

namespace dtsim::sim {
namespace {

/// "compute capability 9.0", or "no NVIDIA compute capability" (0).
std::string compute_capability_text(const DeviceSpec& d) {
  if (d.compute_capability <= 0) return "no NVIDIA compute capability";
  return "compute capability " + std::to_string(d.compute_capability / 10) + "." + std::to_string(d.compute_capability % 10);
}

/// Every problem of a plan, each with where its key came from (Note [One
/// pass of checks]).
class Problems {
 public:
  explicit Problems(const PlanSpec& s) : s_(s) {}
  void add(const std::string& key, const std::string& message) {
    lines_.push_back(error_at(s_.origins.of("plan." + key), "plan." + key) + ": " + message);
  }
  /// Throws them all as one ConfigError, one per line, if there are any.
  void raise() const {
    if (lines_.empty()) return;
    std::string all;
    for (const auto& l : lines_) all += (all.empty() ? "" : "\n") + l;
    throw ConfigError(all);
  }

 private:
  const PlanSpec& s_;
  std::vector<std::string> lines_;
};

template <typename T>
bool contains(const std::vector<T>& v, T x) {
  return std::find(v.begin(), v.end(), x) != v.end();
}

/// Note [Fine-grained offload] (lowering/passes/fine_grained_offload.cpp):
/// Megatron-Core's checks of fine_grained_activation_offloading
/// (TransformerConfig.__post_init__), in its words, and where dtsim does not
/// model it. Sets r's offload fields where the plan may offload.
void resolve_fine_grained_offload(const PlanSpec& s, ResolvedPlan& r, const PlanRules& rules, const ClusterSpec& cluster, Problems& bad) {
  const std::uint16_t m = s.offload_modules;
  if (!s.fine_grained_activation_offloading) {
    if (m != 0) {
      bad.add("offload_modules", offload_modules_string(m) + " is read only with fine_grained_activation_offloading: true (as "
                                 "Megatron-Core reads it); set that, or remove offload_modules");
    }
    return;
  }
  const std::uint16_t described = rules.offload_modules_described();
  const std::string valid = "; valid for " + rules.model_name() + ": " + (described == 0 ? "none" : offload_modules_string(described));
  const std::uint16_t moe_parts = kOffloadExpertFc1 | kOffloadMoeAct | kOffloadFusedGroupMlp;
  if (m == 0) {
    bad.add("fine_grained_activation_offloading", "true needs offload_modules (Megatron-Core asserts a non-empty list)" + valid);
  } else if (s.cpu_offloading_num_layers > 0) {
    bad.add("fine_grained_activation_offloading", "true with cpu_offloading_num_layers " + std::to_string(s.cpu_offloading_num_layers) +
                                                      ": Megatron-Core asserts \"fine_grained_activation_offloading cannot be enabled "
                                                      "with cpu_offloading\"; drop one");
  } else if ((m & kOffloadAttnProj) != 0 && (m & kOffloadCoreAttn) == 0) {
    bad.add("offload_modules", "attn_proj without core_attn: Megatron-Core raises (\"the input of attn_proj is the output of core_attn, "
                               "which is needed in core_attn.backward()\"); add core_attn");
  } else if ((m & kOffloadFusedGroupMlp) != 0 && (m & (kOffloadExpertFc1 | kOffloadMoeAct)) != 0) {
    bad.add("offload_modules", "fused_group_mlp with " + offload_modules_string(m & (kOffloadExpertFc1 | kOffloadMoeAct)) +
                                   ": Megatron-Core raises (the fused grouped MLP is offloaded whole); drop one");
  } else if ((m & moe_parts) != 0 && r.recompute == Recompute::kSelective && (r.recompute_modules & kRecomputeMoe) != 0) {
    bad.add("offload_modules", offload_modules_string(m & moe_parts) + " with recompute_modules moe: Megatron-Core asserts (the whole "
                                   "MoE layer is rerun, nothing inside it is kept to offload); drop one");
  } else if ((m & (kOffloadAttnNorm | kOffloadMlpNorm)) != 0 && r.recompute == Recompute::kSelective &&
             (r.recompute_modules & kRecomputeMhc) != 0) {
    bad.add("offload_modules", offload_modules_string(m & (kOffloadAttnNorm | kOffloadMlpNorm)) +
                                   " with recompute_modules mhc: Megatron-Core raises (mHC's checkpoints wrap the norms inside "
                                   "those offload groups); drop one");
  } else if (r.recompute == Recompute::kFull || r.recompute == Recompute::kOp) {
    bad.add("fine_grained_activation_offloading", std::string("true with recompute ") + to_string(r.recompute) +
                                                      (r.recompute == Recompute::kFull
                                                           ? ": a rerun block keeps only its input, which dtsim does not model offloading"
                                                           : ": torchtitan's op-level policy, not Megatron-Core's") +
                                                      "; valid with it: recompute none or selective");
  } else if (r.schedule == Schedule::kZbH1) {
    bad.add("fine_grained_activation_offloading", "true with schedule zb-h1: Megatron-Core has no zero-bubble schedule, and what its "
                                                      "weight passes read back is not modelled; valid with it: 1f1b, interleaved, gpipe");
  } else if (r.zero3_modules()) {
    bad.add("fine_grained_activation_offloading", "true with DeepSpeed's ZeRO-3, which gathers module by module: Megatron-Core offloads "
                                                      "under its own data parallelism or Megatron-FSDP; use fsdp: full_shard, or false here");
  } else if (cluster.device.gloo_collectives) {
    bad.add("fine_grained_activation_offloading", "true on " + cluster.device.name + ": a CPU's activations are in host memory already; "
                                                      "valid: false");
  } else {
    // A module the model has not is skipped, as Megatron-Core's layers skip
    // it (advice() says so).
    r.offload_modules = static_cast<std::uint16_t>(m & described);
    r.min_offloaded_tensor_size = s.min_offloaded_tensor_size;
    r.activation_offload_fraction = s.activation_offload_fraction;
    r.delta_offload_bytes_across_pp_ranks = s.delta_offload_bytes_across_pp_ranks;
    r.fine_grained_offloading_max_inflight_offloads = s.fine_grained_offloading_max_inflight_offloads;
  }
}

}  // namespace

const char* to_string(PipelineSplit s) { return s == PipelineSplit::kMegatron ? "megatron" : "cost"; }

const char* to_string(Schedule s) {
  switch (s) {
    case Schedule::kGpipe: return "gpipe";
    case Schedule::k1f1b: return "1f1b";
    case Schedule::kInterleaved: return "interleaved";
    case Schedule::kNaive: return "naive";
    case Schedule::kZbH1: return "zb-h1";
  }
  return "?";
}

const char* to_string(Attention a) {
  switch (a) {
    case Attention::kAuto: return "auto";
    case Attention::kEager: return "eager";
    case Attention::kFlash: return "flash";
  }
  return "?";
}

const char* to_string(MoeDispatcher d) {
  switch (d) {
    case MoeDispatcher::kAllGather:
      return "allgather";
    case MoeDispatcher::kDeepEp:
      return "deepep";
    default:
      return "alltoall";
  }
}
const char* to_string(MoeExperts e) { return e == MoeExperts::kDense ? "dense" : "grouped"; }
const char* to_string(LossParallel l) {
  return l == LossParallel::kAuto ? "auto" : l == LossParallel::kDtensor ? "dtensor" : "megatron";
}

// PyTorch's FSDP beside tensor parallelism is torchtitan's (and PyTorch's
// own 2-D recipe's) way, whose loss_parallel is DTensor's; Megatron-LM,
// NeMo and Megatron-DeepSpeed run Megatron's cross-entropy.
LossParallel resolved_loss_parallel(LossParallel asked, bool fsdp) {
  if (asked != LossParallel::kAuto) return asked;
  return fsdp ? LossParallel::kDtensor : LossParallel::kMegatron;
}

const char* to_string(Runtime r) { return r == Runtime::kPython ? "python" : "libtorch"; }
const char* to_string(Kernels k) { return k == Kernels::kFused ? "fused" : "composite"; }
const char* to_string(LossKernel k) {
  switch (k) {
    case LossKernel::kCrossEntropy: return "cross_entropy";
    case LossKernel::kLigerFused: return "liger_fused_linear";
    case LossKernel::kCutCrossEntropy: return "cut_cross_entropy";
    case LossKernel::kChunkedNll: return "chunked_nll";
    case LossKernel::kChunkedNllFp32: return "chunked_nll_fp32";
  }
  return "?";
}
const char* to_string(Fp8Recipe r) {
  switch (r) {
    case Fp8Recipe::kDelayed: return "delayed";
    case Fp8Recipe::kTensorwise: return "tensorwise";
    case Fp8Recipe::kMxfp8: return "mxfp8";
  }
  return "?";
}

const char* to_string(StateDtype d) {
  switch (d) {
    case StateDtype::kFp32: return "fp32";
    case StateDtype::kFp16: return "fp16";
    case StateDtype::kBf16: return "bf16";
    case StateDtype::kFp8: return "fp8";
  }
  return "?";
}

int state_bytes(StateDtype d) {
  switch (d) {
    case StateDtype::kFp32: return 4;
    case StateDtype::kFp16:
    case StateDtype::kBf16: return 2;
    case StateDtype::kFp8: return 1;
  }
  return 4;
}

const char* to_string(FsdpWrap w) {
  switch (w) {
    case FsdpWrap::kBlocks: return "blocks";
    case FsdpWrap::kLayers: return "layers";
    case FsdpWrap::kTorchtitan: return "torchtitan";
  }
  return "?";
}

const char* to_string(CpComm c) {
  switch (c) {
    case CpComm::kP2p: return "p2p";
    case CpComm::kAllGather: return "all_gather";
  }
  return "?";
}

int gradient_element_bytes(const ResolvedPlan& plan) {
  return plan.accumulate_allreduce_grads_in_fp32 ? 4 : element_bytes(plan.precision);
}

int fsdp_reduce_element_bytes(const ResolvedPlan& plan) {
  const int gw = gradient_element_bytes(plan);
  return plan.fsdp_reduce_fp32 ? std::max(4, gw) : gw;
}

// Note [No master weights]
// Mixed precision keeps an fp32 master copy of the parameters in the
// optimizer (Micikevicius et al. 2018; PyTorch's autocast over fp32
// parameters; Megatron's and DeepSpeed's optimizers). A model loaded in
// bf16 and trained without autocast has none: torch.optim creates its
// states like the parameters (exp_avg and exp_avg_sq in bf16, torch/optim/
// adam.py _init_group: torch.zeros_like(p)) and updates the bf16
// parameters in place. That is how HF's Trainer and TRL train a model
// loaded with torch_dtype=bfloat16, and NeMo Automodel's benchmarks
// (gpt_oss/model.py casts the model to bf16; torch.optim.Adam). Per
// parameter Adam then keeps 2 + 2 bytes of state, not 12, and its step
// reads the gradient, the parameter and both states and writes the last
// three: 2 + 2 + 4 + 2 + 4 = 14 bytes, not 28 (update_bytes_per_param in
// cost_compute.cpp). plan.master_weights false says so; it applies under
// fp16 and bf16 only (fp32 has no separate master; fp8 recipes keep bf16
// weights with fp32 masters), and not with Megatron's fp32 gradient
// buffer or a CPU optimizer (ZeRO-Offload keeps fp32 on the host).
int optimizer_state_bytes_per_param(Optimizer o, Precision p, bool master_weights) {
  // ZeRO paper (Rajbhandari et al. 2020), section 3.1: mixed-precision Adam
  // keeps an fp32 copy of the parameters, momentum and variance: K = 12.
  // In pure fp32 the parameters are the master copy: momentum + variance = 8.
  // Note [SGD momentum]: momentum SGD keeps one fp32 buffer, SGD at
  // momentum 0 none (+ the fp32 master under mixed precision, either way).
  const bool mixed = p != Precision::kFp32;
  const int buffers = optimizer_buffers(o);
  // Note [No master weights]: the states in the parameters' bytes, no master.
  if (mixed && !master_weights) return buffers * element_bytes(p);
  return 4 * buffers + (mixed ? 4 : 0);
}

// Note [Precision-aware optimizer]
// Megatron-Core's --use-precision-aware-optimizer (OptimizerConfig's
// use_precision_aware_optimizer; every Megatron-Bridge bf16 Adam
// performance run turns it on, scripts/performance/run_script.py) hands
// the states to Transformer Engine's FusedAdam (transformer_engine/pytorch/
// optimizers/fused_adam.py), each in its own type: exp_avg_dtype and
// exp_avg_sq_dtype (fp32, fp16, bf16, or fp8 with a scale a tensor) and
// main_params_dtype (fp32 or fp16). Who holds the master weights depends
// on the recipe (optimizer_config.py, use_precision_aware_optimizer_no_fp8
// _or_ds_fp8): FusedAdam does, unless the run is FP8 with a recipe other
// than delayed scaling and fp32 masters (then Megatron-Core keeps an fp32
// copy as without the flag, distrib_optimizer.py). FusedAdam keeps an fp32
// master of a bf16 parameter as its low 16 bits where store_param_remainders
// (true by default, TE >= 2.1): the bf16 parameter is the high half. So
// per parameter of a rank's shard the states take master + exp_avg +
// exp_avg_sq bytes: 4 + 4 + 4 = 12 without the flag, 2 + 4 + 4 = 10 with it
// and its defaults in bf16, 4 + 2 + 2 = 8 for DeepSeek-V4's MXFP8 recipes
// (bf16 moments). A step does not run on the narrow states: for each it
// makes an fp32 copy of every parameter's in the group (get_unscaled_state,
// state.float()), runs the fp32 kernel on the copies and writes them back
// (_apply_scale), freeing the copies as the group ends: 4 bytes an element
// of the largest group for each state not in fp32, while the step runs
// (optimizer_step_copy_bytes_per_param). Where FusedAdam holds the masters
// it reads the gradient from its buffer as it is (.decoupled_grad): no fp32
// copy of a bf16 gradient shard. The step's traffic is in
// update_bytes_per_param (cost_compute.cpp). dtsim prices an NVFP4 run's
// masters as FusedAdam's (Megatron-LM's fp8_recipe default is delayed).
// Note [8-bit optimizer]
// bitsandbytes' optimizers with optim_bits=8 (bnb.optim.AdamW8bit, Adam8bit,
// PagedAdamW8bit, SGD8bit; bitsandbytes/optim/optimizer.py, Optimizer2State
// and Optimizer1State.init_state) keep each state of a tensor as uint8
// codes of the dynamic quantization map, block-wise (Dettmers et al. 2022,
// "8-bit Optimizers via Block-wise Quantization"): a byte an element and an
// fp32 absmax for each block of 256 (blocksize = 256; absmax1, absmax2).
// torchao's AdamW8bit (OptimState8bit, block_size 256) keeps the same. So
// Adam keeps 2 bytes a parameter and 8 for each 256, beside the fp32 master
// where there is one (a model trained in fp32 or under autocast; torchtune
// and HF's bf16 models have none: Note [No master weights]), where
// torch.optim keeps 8 (or 4 in bf16). A tensor below min_8bit_size (4,096
// elements) keeps fp32 states instead: a norm's weight; dtsim prices every
// tensor in 8 bits (a Llama 3.2 3B block's two norms, 6,144 elements, keep
// 49 KB of fp32 states, 37 KB more). The update is one kernel a tensor
// (optimizer_update_8bit_blockwise) that dequantizes, updates and
// requantizes in registers: it reads the gradient, the parameter, both
// states and their scales and writes back all but the gradient, making no
// temporaries (update_bytes_per_param in cost_compute.cpp;
// unfused_step_bytes 0). The paged versions (PagedAdamW8bit) put each state
// of 10^5 elements or more in CUDA managed memory (get_state_buffer,
// F.get_paged): outside PyTorch's caching allocator, so
// torch.cuda.max_memory_allocated and the "active" peak torchtune logs do
// not count them, and the driver moves them to the host when the device
// runs short rather than failing. dtsim counts them on the device, where
// they stay while they fit (nvidia-smi shows them), and says so.
int optimizer_state_bytes_per_param(const ResolvedPlan& plan) {
  if (plan.optim_bits == 8) {
    const bool master = plan.precision != Precision::kFp32 && plan.master_weights;
    return optimizer_buffers(plan.optimizer) + (master ? 4 : 0);
  }
  if (!plan.use_precision_aware_optimizer || is_sgd(plan.optimizer)) {
    return optimizer_state_bytes_per_param(plan.optimizer, plan.precision, plan.master_weights);
  }
  const int moments = state_bytes(plan.exp_avg_dtype) + state_bytes(plan.exp_avg_sq_dtype);
  if (plan.precision == Precision::kFp32) return moments;  // the parameters are their own master
  if (!plan.te_master_weights()) return moments + 4;       // Megatron-Core's fp32 copy
  if (plan.main_params_dtype != StateDtype::kFp32) return moments + state_bytes(plan.main_params_dtype);
  return moments + (plan.param_remainders() ? 2 : 4);
}

Bytes optimizer_state_bytes(const ResolvedPlan& plan, std::int64_t params) {
  Bytes b = static_cast<Bytes>(params) * optimizer_state_bytes_per_param(plan);
  if (plan.optim_bits == 8 && params > 0) {
    // Note [8-bit optimizer]: an fp32 absmax for each block of 256 of each state.
    b += static_cast<Bytes>(optimizer_buffers(plan.optimizer)) * 4 * ((params + 255) / 256);
  }
  return b;
}

int optimizer_step_copy_bytes_per_param(const ResolvedPlan& plan) {
  if (!plan.use_precision_aware_optimizer || is_sgd(plan.optimizer)) return 0;
  int copies = (plan.exp_avg_dtype != StateDtype::kFp32) + (plan.exp_avg_sq_dtype != StateDtype::kFp32);
  if (plan.precision != Precision::kFp32 && plan.te_master_weights() && plan.main_params_dtype != StateDtype::kFp32) ++copies;
  return 4 * copies;
}

int zero_stage_of(FsdpMode f) {
  switch (f) {
    case FsdpMode::kFullShard:
    case FsdpMode::kHybridShard: return 3;
    case FsdpMode::kShardGradOp: return 2;
    case FsdpMode::kNoShard:
    case FsdpMode::kNone: return 0;
  }
  return 0;
}

// Note [One pass of checks]
// resolve() reports every problem of a plan at once, each as the line it
// would have been alone, so a user fixes a file in one round. A check whose
// inputs already failed is skipped (a wrong tp makes dp's divisibility
// meaningless), so one mistake is never reported twice. Every valid value
// comes from the rules table (rules.hpp).
// Note [Pipeline layout]
// Megatron-Core places layers on pipeline chunks by a layout where one is
// given (--pipeline-model-parallel-layout; Megatron-Bridge's
// pipeline_model_parallel_layout, which DeepSeek-V3's recipes set:
// "Et|(tt|)*30mL" puts the embedding and one block on the first of 32
// chunks, two blocks on each of the next 30, and the MTP depth and the loss
// on the last). PipelineParallelLayerLayout.parse_str_to_list drops commas,
// unrolls "(X)*n" (X without a closing parenthesis), then "c*n", and splits
// the stages at '|'; chunk k is stage k mod pp, as dtsim's stage_layers
// counts them. dtsim's layers are the same in the same order (the
// embedding, the blocks, the MTP depths, the output layer with the loss),
// so a chunk's count of symbols is its count of layers, and resolve checks
// the blocks and depths against the model as validate_layer_layout does.
namespace {

/// One regex pass of parse_str_to_list, by hand (std::regex recurses per
/// character): at each place, `match(i, &group, &count, &end)` says whether
/// the pattern matches there; the group is written `count` times.
template <typename Match>
std::string unroll(const std::string& s, Match match, const std::string& text) {
  constexpr std::size_t kMost = std::size_t{1} << 20;
  std::string out;
  for (std::size_t i = 0; i < s.size();) {
    std::string group;
    std::size_t count = 0, end = 0;
    if (match(i, &group, &count, &end)) {
      if (count > kMost || out.size() + group.size() * count > kMost) {
        throw ConfigError("'" + text + "' unrolls to more layers than a model may have");
      }
      for (std::size_t k = 0; k < count; ++k) out += group;
      i = end;
    } else {
      out += s[i++];
    }
    if (out.size() > kMost) throw ConfigError("'" + text + "' unrolls to more layers than a model may have");
  }
  return out;
}

/// The decimal digits at `i` of `s` (at most 7), their value and end.
bool digits_at(const std::string& s, std::size_t i, std::size_t* value, std::size_t* end) {
  std::size_t j = i;
  while (j < s.size() && std::isdigit(static_cast<unsigned char>(s[j]))) ++j;
  if (j == i) return false;
  *value = j - i > 7 ? std::size_t{10000000} : static_cast<std::size_t>(std::stoul(s.substr(i, j - i)));
  *end = j;
  return true;
}

}  // namespace

std::vector<std::string> parse_pipeline_layout(const std::string& text) {
  const std::string valid = "valid: stages of E (the embedding), t (a block), m (an MTP depth) and L (the loss) split by |, "
                            "with (X)*n and c*n to repeat, e.g. \"Et|(tt|)*30mL\"";
  std::string s;
  for (char ch : text) {
    if (ch != ',') s += ch;  // purely cosmetic (parse_str_to_list)
  }
  // \(([^)]+)\)\*(\d+)
  s = unroll(
      s,
      [&](std::size_t i, std::string* group, std::size_t* count, std::size_t* end) {
        if (s[i] != '(') return false;
        std::size_t k = i + 1;
        while (k < s.size() && s[k] != ')') ++k;
        if (k == i + 1 || k + 1 >= s.size() || s[k + 1] != '*' || !digits_at(s, k + 2, count, end)) return false;
        *group = s.substr(i + 1, k - i - 1);
        return true;
      },
      text);
  // (.)\*(\d+)
  s = unroll(
      s,
      [&](std::size_t i, std::string* group, std::size_t* count, std::size_t* end) {
        if (s[i] == '\n' || i + 1 >= s.size() || s[i + 1] != '*' || !digits_at(s, i + 2, count, end)) return false;
        *group = std::string(1, s[i]);
        return true;
      },
      text);
  std::vector<std::string> chunks(1);
  for (char ch : s) {
    if (ch == '|') {
      chunks.emplace_back();
    } else if (ch == 'E' || ch == 't' || ch == 'm' || ch == 'L') {
      chunks.back() += ch;
    } else if (ch != ' ') {
      throw ConfigError("'" + text + "': '" + std::string(1, ch) + "' is not a layer; " + valid);
    }
  }
  std::string flat;
  for (std::size_t k = 0; k < chunks.size(); ++k) {
    if (chunks[k].empty()) {
      throw ConfigError("'" + text + "': chunk " + std::to_string(k + 1) + " of " + std::to_string(chunks.size()) +
                        " has no layer; dtsim needs one in each");
    }
    flat += chunks[k];
  }
  if (flat.front() != 'E' || std::count(flat.begin(), flat.end(), 'E') != 1) {
    throw ConfigError("'" + text + "': the embedding (E) must come first and once (Megatron asserts it)");
  }
  if (flat.back() != 'L' || std::count(flat.begin(), flat.end(), 'L') != 1) {
    throw ConfigError("'" + text + "': the loss (L) must come last and once (Megatron asserts it)");
  }
  if (const auto m = flat.find('m'); m != std::string::npos && flat.find('t', m) != std::string::npos) {
    throw ConfigError("'" + text + "': a block (t) after an MTP depth (m); blocks come first (Megatron asserts it)");
  }
  return chunks;
}

// Note [Megatron's split]
// Without a layout Megatron-Core splits the blocks evenly
// (transformer_block.get_num_layers_to_build): num_layers / pp blocks a
// pipeline rank, asserted whole, then / vp a model chunk, asserted whole;
// account_for_embedding_in_pipeline_split and
// account_for_loss_in_pipeline_split count the embedding and the loss as
// a block each (num_layers + 1 or 2), the first chunk (pp rank 0, vp 0) and
// the last (the last rank's last vp chunk) building one block less;
// num_layers_in_first_pipeline_stage and ..._last_... give the first and
// last ranks their blocks (divided over their vp chunks) and split the rest
// evenly over the ranks between, asserted whole, and Megatron refuses them
// beside the account_for knobs. Chunk c is vp chunk c / pp of rank c % pp.
// The embedding joins the first chunk and the MTP depths and the output
// layer the last, as Megatron places them. dtsim's own split balances the
// chunks by priced cost instead, which Megatron does not do: a Megatron run
// (--megatron-args, --megatron-bridge) is split as Megatron splits it.
namespace {

/// Each chunk's blocks under Megatron's rules, or the rule that fails.
std::vector<int> megatron_blocks(const PlanSpec& s, int blocks, int pp, int vp, std::string* key, std::string* error) {
  const bool uneven = s.num_layers_in_first_pipeline_stage > 0 || s.num_layers_in_last_pipeline_stage > 0;
  const int acc_emb = s.account_for_embedding_in_pipeline_split ? 1 : 0, acc_loss = s.account_for_loss_in_pipeline_split ? 1 : 0;
  std::vector<int> per_rank(static_cast<std::size_t>(pp), 0);
  if (uneven) {
    *key = s.num_layers_in_first_pipeline_stage > 0 ? "num_layers_in_first_pipeline_stage" : "num_layers_in_last_pipeline_stage";
    if (acc_emb + acc_loss > 0) {
      *error = "given with account_for_embedding_in_pipeline_split or account_for_loss_in_pipeline_split; Megatron refuses both";
      return {};
    }
    int rest = blocks, ranks = pp;
    if (s.num_layers_in_first_pipeline_stage > 0) rest -= s.num_layers_in_first_pipeline_stage, --ranks;
    if (s.num_layers_in_last_pipeline_stage > 0) rest -= s.num_layers_in_last_pipeline_stage, --ranks;
    if (rest < 0 || (ranks == 0 && rest != 0) || (ranks > 0 && rest % ranks != 0)) {
      *error = fmt::format("leaves {} of the {} blocks for the {} ranks between; Megatron asserts they divide evenly", rest, blocks, ranks);
      return {};
    }
    for (int p = 0; p < pp; ++p) {
      per_rank[static_cast<std::size_t>(p)] = p == 0 && s.num_layers_in_first_pipeline_stage > 0 ? s.num_layers_in_first_pipeline_stage
                                              : p == pp - 1 && s.num_layers_in_last_pipeline_stage > 0 ? s.num_layers_in_last_pipeline_stage
                                              : ranks > 0 ? rest / ranks : 0;
    }
  } else {
    *key = acc_emb + acc_loss > 0 ? (acc_emb ? "account_for_embedding_in_pipeline_split" : "account_for_loss_in_pipeline_split")
                                  : "pipeline_split";
    const int total = blocks + acc_emb + acc_loss;
    if (total % pp != 0) {
      *error = fmt::format("megatron: {} blocks{} do not split evenly over pp {} (Megatron asserts it; count the embedding or the "
                           "loss as a block with account_for_embedding_in_pipeline_split, account_for_loss_in_pipeline_split, or "
                           "give pipeline_layout)", blocks, acc_emb + acc_loss > 0 ? fmt::format(" and {} counted", acc_emb + acc_loss) : "", pp);
      return {};
    }
    std::fill(per_rank.begin(), per_rank.end(), total / pp);
  }
  std::vector<int> out;
  for (int c = 0; c < pp * vp; ++c) {
    const int rank_blocks = per_rank[static_cast<std::size_t>(c % pp)];
    if (rank_blocks % vp != 0) {
      *error = fmt::format("pipeline rank {}'s {} blocks do not split over its {} virtual stages (Megatron asserts it)", c % pp, rank_blocks, vp);
      return {};
    }
    out.push_back(rank_blocks / vp);
  }
  out.front() -= acc_emb;
  out.back() -= acc_loss;
  return out;
}

}  // namespace

ResolvedPlan resolve(const PlanSpec& s, const Model& model, const ClusterSpec& cluster) {
  ResolvedPlan r;
  r.spec = s;
  Problems bad(s);
  const PlanRules rules(model, cluster);
  const int gpus = cluster.gpus();

  // Parallel degrees: tp, then pp (or the naive split), then dp.
  r.tp = s.tp;
  bool degrees_ok = true;
  const auto tp_ok = rules.tp_values();
  if (const std::string why = model.tp_error(s.tp); !why.empty()) {
    bad.add("tp", std::to_string(s.tp) + ": " + why);
    degrees_ok = false;
  } else if (r.tp > cluster.gpus_per_node || !contains(tp_ok, r.tp)) {
    bad.add("tp", std::to_string(r.tp) + (r.tp > cluster.gpus_per_node ? " exceeds" : " does not divide") + " the " +
                      std::to_string(cluster.gpus_per_node) +
                      " GPUs of a node (tensor parallelism needs the intra-node link); valid: " + join_values(tp_ok));
    degrees_ok = false;
  }
  r.pp = s.pp;
  r.schedule = s.schedule;
  if (s.model_parallel > 0) {
    if (s.pp != 1 && s.pp != s.model_parallel) {
      bad.add("model_parallel", std::to_string(s.model_parallel) + " contradicts pp: " + std::to_string(s.pp) +
                                    "; model_parallel is the naive split of pp stages without micro-batching, set only one");
      degrees_ok = false;
    }
    r.pp = s.model_parallel;
    r.schedule = Schedule::kNaive;
  }
  if (r.pp > 1) {
    if (const std::string why = model.pp_error(r.pp); !why.empty()) {
      bad.add(s.model_parallel > 0 ? "model_parallel" : "pp", std::to_string(r.pp) + ": " + why + "; valid: 1");
      degrees_ok = false;
    }
  }
  // Context parallelism (Note [Context parallelism] in models/src/layers.cpp).
  r.cp = s.cp;
  r.cp_comm = s.cp_comm;
  if (r.cp > 1 && model.cp_all_gather_only()) r.cp_comm = CpComm::kAllGather;
  if (r.cp > 1) {
    if (const std::string why = model.cp_error(r.cp, r.tp); !why.empty()) {
      bad.add("cp", std::to_string(r.cp) + ": " + why + "; valid: 1");
      degrees_ok = false;
    }
  }
  const int tpc = r.tp * r.cp;  // ranks a replica spreads each layer over
  const std::string product = r.cp > 1 ? "tp x cp x pp = " : "tp x pp = ";
  if (degrees_ok && (r.pp * tpc > gpus || gpus % (r.pp * tpc) != 0)) {
    bad.add(r.pp > 1 ? (s.model_parallel > 0 ? "model_parallel" : "pp") : r.cp > 1 ? "cp" : "tp",
            product + std::to_string(tpc * r.pp) + " does not divide the " + std::to_string(gpus) + " GPUs of " +
                cluster.name + "; valid products: " + join_values(divisors(gpus)));
    degrees_ok = false;
  }
  r.dp = s.dp == 0 && degrees_ok ? gpus / (tpc * r.pp) : std::max(1, s.dp);
  if (degrees_ok && !contains(rules.dp_values(r.tp, r.pp, r.cp), r.dp)) {
    const std::string what = tpc * r.pp == 1 ? std::to_string(r.dp)
                                             : std::to_string(r.dp) + " x " + product + std::to_string(r.dp * tpc * r.pp);
    bad.add("dp", what + " does not divide the " + std::to_string(gpus) + " GPUs of " + cluster.name + "; valid: " +
                      join_values(rules.dp_values(r.tp, r.pp, r.cp)));
    degrees_ok = false;
  }
  // Expert parallelism (Note [Expert mesh] in cost_comm.cpp): ep x etp
  // ranks of a stage's tp x cp x dp hold one copy of the experts.
  r.ep = s.ep;
  r.etp = s.etp == 0 ? r.tp : s.etp;
  r.moe_imbalance = s.moe_imbalance;
  r.moe_capacity_factor = s.moe_capacity_factor;
  r.moe_pad = s.moe_pad;
  r.moe_force_load_balance = s.moe_force_load_balance;
  r.moe_dispatcher = s.moe_dispatcher;
  r.moe_experts = s.moe_experts;
  r.runtime = s.runtime;
  r.kernels = s.kernels;
  bool experts_ok = degrees_ok;
  if (const std::string why = model.ep_error(r.ep); !why.empty()) {
    const auto ok = degrees_ok ? rules.ep_values(r.tp, r.cp, r.dp, r.etp, s.moe_experts) : std::vector<int>{1};
    bad.add("ep", std::to_string(r.ep) + ": " + why + "; valid: " + join_values(ok.empty() ? std::vector<int>{1} : ok));
    experts_ok = false;
  } else if (r.etp != 1 && r.etp != r.tp) {
    bad.add("etp", std::to_string(r.etp) + ": expert tensor parallelism splits each expert over 1 or tp = " +
                       std::to_string(r.tp) + " ranks; valid: " + join_values(rules.etp_values(r.tp)));
    experts_ok = false;
  } else if (degrees_ok && (r.tp * r.cp * r.dp) % (r.ep * r.etp) != 0) {
    bad.add("ep", std::to_string(r.ep) + " x etp " + std::to_string(r.etp) + " does not divide the tp x cp x dp = " +
                      std::to_string(r.tp * r.cp * r.dp) + " ranks of a stage (expert parallelism is carved out of them); valid: " +
                      join_values(rules.ep_values(r.tp, r.cp, r.dp, r.etp, s.moe_experts)));
    experts_ok = false;
  }
  r.edp = experts_ok ? r.tp * r.cp * r.dp / (r.ep * r.etp) : 1;
  if (r.ep > 1 && r.tp > 1 && !s.sequence_parallel) {
    // megatron/training/arguments.py asserts it: tokens are dispatched from
    // each rank's sequence shard.
    bad.add("sequence_parallel", "false with ep > 1 and tp > 1: Megatron-Core needs sequence parallelism when both "
                                 "experts and tensors are split; set sequence_parallel: true");
  }
  if (r.moe_force_load_balance && r.moe_imbalance != 1.0) {
    bad.add("moe_force_load_balance", "true routes every expert the same share of tokens, so moe_imbalance must be 1 (it is " +
                                          fmt::format("{:g}", r.moe_imbalance) + "); drop one of the two");
  }
  if (r.moe_pad && r.moe_capacity_factor <= 0) {
    bad.add("moe_pad", "true needs moe_capacity_factor > 0 (padding fills each expert to its capacity)");
  }
  if (r.moe_experts == MoeExperts::kDense) {
    // Note [Dense experts]: every token through every expert, so nothing is
    // dispatched, dropped or unbalanced.
    if (r.ep > 1) bad.add("moe_experts", "dense runs every expert on every rank's tokens (HuggingFace's bmm); it has no expert parallelism: set ep: 1 or moe_experts: grouped");
    if (r.moe_capacity_factor > 0) bad.add("moe_experts", "dense computes every expert on every token: there is no capacity to drop at; set moe_capacity_factor: 0");
    if (r.moe_imbalance != 1.0) bad.add("moe_experts", "dense gives every expert every token: moe_imbalance must be 1");
    if (r.moe_dispatcher != MoeDispatcher::kAllToAll) bad.add("moe_experts", "dense dispatches nothing: moe_dispatcher " + std::string(to_string(r.moe_dispatcher)) + " does not apply; valid: alltoall (the default)");
  }
  r.sequence_parallel = s.sequence_parallel;
  if (r.sequence_parallel && r.tp == 1) bad.add("sequence_parallel", "true needs tp > 1 (it splits what tensor parallelism replicates)");
  r.sync_batchnorm = s.sync_batchnorm;
  if (r.sync_batchnorm && !rules.sync_batchnorm_allowed()) {
    bad.add("sync_batchnorm", "true, but " + model.name() + " has no batch norm layer to sync; valid: false "
                              "(or a model with batch norm, e.g. vgg11-bn or --set model.batch_norm=true)");
  }
  r.tp_comm_overlap = s.tp_comm_overlap;
  r.tp_comm_overlap_cfg = s.tp_comm_overlap_cfg;
  if (!contains(PlanRules::tp_comm_overlap_values(r.tp, r.sequence_parallel), r.tp_comm_overlap)) {
    bad.add("tp_comm_overlap", "true needs sequence_parallel: true and tp > 1 (Transformer Engine overlaps sequence "
                               "parallelism's all-gathers and reduce-scatters with the GEMMs beside them)");
  }

  // Placement: the mesh's axes, innermost first.
  {
    std::vector<std::string> dims;
    std::string cur;
    for (char ch : s.placement + ",") {
      if (ch == ',') {
        dims.push_back(cur);
        cur.clear();
      } else if (ch != ' ') {
        cur += ch;
      }
    }
    // Context parallelism sits next to tensor parallelism unless placed
    // (Megatron-Core's default order tp-cp-ep-dp-pp keeps both in a node).
    if (r.cp > 1 && std::find(dims.begin(), dims.end(), "cp") == dims.end()) {
      const auto tp_at = std::find(dims.begin(), dims.end(), "tp");
      dims.insert(tp_at == dims.end() ? dims.begin() : tp_at + 1, "cp");
    }
    auto sorted = dims;
    std::sort(sorted.begin(), sorted.end());
    const bool with_cp = sorted == std::vector<std::string>{"cp", "dp", "pp", "tp"};
    if (sorted != std::vector<std::string>{"dp", "pp", "tp"} && !with_cp) {
      bad.add("placement", "'" + s.placement + "' is not an order of tp, pp and dp (and cp); valid e.g. tp,pp,dp (the default), tp,dp,pp or tp,cp,dp,pp");
    } else if (degrees_ok) {
      std::vector<Axis> order;
      for (const auto& d : dims) order.push_back(*axis_from_string(d));
      std::array<int, kAxes> sizes{};
      sizes.fill(1);
      sizes[static_cast<int>(Axis::kTp)] = r.tp;
      sizes[static_cast<int>(Axis::kPp)] = r.pp;
      sizes[static_cast<int>(Axis::kDp)] = r.dp;
      sizes[static_cast<int>(Axis::kCp)] = r.cp;
      r.mesh = Mesh(order, sizes);
    }
  }

  // Batch: global = micro x accum x dp (DeepSpeed's rule); any two set the third.
  const std::int64_t dp = r.dp;
  std::int64_t mb = s.micro_batch, ga = s.grad_accum, gb = s.global_batch;
  bool batch_ok = degrees_ok;
  if (!degrees_ok) {
    if (mb == 0) mb = 1;
    if (ga == 0) ga = 1;
  } else if (gb != 0) {
    if (mb != 0 && ga != 0) {
      if (mb * ga * dp != gb) {
        bad.add("global_batch", std::to_string(gb) + " != micro_batch x grad_accum x dp = " + std::to_string(mb) + " x " +
                                    std::to_string(ga) + " x " + std::to_string(dp) + "; give any two of the three");
        batch_ok = false;
      }
    } else if (mb != 0) {
      if (gb % (mb * dp) != 0) {
        bad.add("global_batch", std::to_string(gb) + " is not a multiple of micro_batch x dp = " + std::to_string(mb * dp));
        batch_ok = false;
      } else {
        ga = gb / (mb * dp);
      }
    } else if (ga != 0) {
      if (gb % (ga * dp) != 0) {
        bad.add("global_batch", std::to_string(gb) + " is not a multiple of grad_accum x dp = " + std::to_string(ga * dp));
        batch_ok = false;
      } else {
        mb = gb / (ga * dp);
      }
    } else {
      if (gb % dp != 0) {
        bad.add("global_batch", std::to_string(gb) + " is not a multiple of dp = " + std::to_string(dp));
        batch_ok = false;
      } else {
        mb = gb / dp;
        ga = 1;
      }
    }
  } else {
    if (mb == 0) mb = 1;
    if (ga == 0) ga = 1;
    gb = mb * ga * dp;
  }
  r.micro_batch = std::max<std::int64_t>(1, mb);
  r.grad_accum = std::max<std::int64_t>(1, ga);
  r.global_batch = gb;

  // Pipelines: chunks, schedules and the layers of each stage.
  r.virtual_stages = 1;
  bool chunks_ok = degrees_ok;
  if (r.pp > 1 && r.schedule == Schedule::kInterleaved) {
    r.virtual_stages = s.virtual_stages == 0 ? 2 : s.virtual_stages;
    if (r.virtual_stages < 2) {
      bad.add("virtual_stages", std::to_string(r.virtual_stages) + ": interleaving needs at least 2 model chunks per GPU");
      chunks_ok = false;
    }
    if (batch_ok && r.grad_accum % r.pp != 0) {
      bad.add("micro_batches", std::to_string(r.grad_accum) + " micro-batches: the interleaved schedule needs a multiple of pp = " +
                                   std::to_string(r.pp) + " (as Megatron-LM)");
    }
  } else if (s.virtual_stages > 1) {
    bad.add("virtual_stages", std::to_string(s.virtual_stages) + " needs schedule: interleaved and pp > 1");
    chunks_ok = false;
  }
  if (chunks_ok && (r.pp > 1 || !s.stage_layers.empty())) {
    const int n = rules.layers();
    const int chunks = r.pp * r.virtual_stages;
    // The model's first and last block (-1 without any), read only where a
    // split given or Megatron's needs them.
    auto block_span = [&] {
      const LayerList layers = model.shared_layers(WorkloadShape{});
      std::pair<int, int> span{-1, -1};
      for (int i = 0; i < n; ++i) {
        if (layers[i].is_block()) {
          if (span.first < 0) span.first = i;
          span.second = i;
        }
      }
      return span;
    };
    if (chunks > n) {
      bad.add(r.virtual_stages > 1 ? "virtual_stages" : "pp",
              std::to_string(chunks) + " model chunks for the " + std::to_string(n) + " layers of " + model.name() +
                  "; every chunk needs a layer, valid pp x virtual_stages: 1 to " + std::to_string(n));
    } else if (!s.stage_layers.empty()) {
      int sum = 0;
      bool each_ok = true;
      for (int c : s.stage_layers) {
        each_ok = each_ok && c >= 1;
        sum += c;
      }
      const auto [first_block, last_block] = block_span();
      const int blocks = first_block < 0 ? 0 : last_block - first_block + 1;
      bool layout_ok = true;
      if (!s.pipeline_layout.empty()) {
        // Note [Pipeline layout]: its blocks and MTP depths are the model's
        // (validate_layer_layout), and the model is laid out as Megatron's.
        int t = 0, m = 0;
        for (const auto& chunk : parse_pipeline_layout(s.pipeline_layout)) {
          t += static_cast<int>(std::count(chunk.begin(), chunk.end(), 't'));
          m += static_cast<int>(std::count(chunk.begin(), chunk.end(), 'm'));
        }
        const int depths = n - last_block - 2;  // after the blocks: the depths, then the output layer
        auto count = [](int k, const char* what) { return fmt::format("{} {}{}", k, what, k == 1 ? "" : "s"); };
        if (first_block != 1) {
          layout_ok = false;
          bad.add("pipeline_layout", fmt::format("{} is not laid out as Megatron's GPT (an embedding, blocks, MTP depths, then the "
                                                 "output layer); give stage_layers instead", model.name()));
        } else if (t != blocks || m != depths) {
          layout_ok = false;
          bad.add("pipeline_layout", fmt::format("'{}' lays out {} and {}; {} has {} and {} (model.mtp_layers)", s.pipeline_layout,
                                                 count(t, "block"), count(m, "MTP depth"), model.name(), count(blocks, "block"),
                                                 count(depths, "MTP depth")));
        }
      }
      if (!layout_ok) {
        // Said above, in the layout's terms.
      } else if (static_cast<int>(s.stage_layers.size()) != chunks) {
        bad.add("stage_layers", std::to_string(s.stage_layers.size()) + " entries; need one per model chunk: pp x virtual_stages = " +
                                    std::to_string(chunks));
      } else if (!each_ok) {
        bad.add("stage_layers", "every stage needs at least one layer");
      } else if (sum == blocks && blocks != n) {
        // Counted in blocks: the embedding joins the first stage, the head the last.
        r.stage_layers = s.stage_layers;
        r.stage_layers.front() += first_block;
        r.stage_layers.back() += n - 1 - last_block;
      } else if (sum == n) {
        r.stage_layers = s.stage_layers;
      } else {
        bad.add("stage_layers", "the entries sum to " + std::to_string(sum) + "; valid: " + std::to_string(blocks) +
                                    " (the blocks of " + model.name() + ") or " + std::to_string(n) + " (all its layers)");
      }
    } else if (s.pipeline_split == PipelineSplit::kMegatron && r.pp > 1) {
      // Note [Megatron's split].
      const auto [first_block, last_block] = block_span();
      std::string key, error;
      if (first_block != 1) {
        bad.add("pipeline_split", fmt::format("megatron: {} is not laid out as Megatron's GPT (an embedding, blocks, MTP depths, then "
                                              "the output layer); valid: cost", model.name()));
      } else if (std::vector<int> chunks_blocks = megatron_blocks(s, last_block - first_block + 1, r.pp, r.virtual_stages, &key, &error);
                 !error.empty()) {
        bad.add(key, error);
      } else {
        chunks_blocks.front() += first_block;
        chunks_blocks.back() += n - 1 - last_block;
        const auto empty = std::find(chunks_blocks.begin(), chunks_blocks.end(), 0);
        if (empty != chunks_blocks.end()) {
          bad.add(key, fmt::format("megatron: model chunk {} of {} would hold no layer; dtsim needs one in each",
                                   empty - chunks_blocks.begin() + 1, chunks_blocks.size()));
        } else {
          r.stage_layers = std::move(chunks_blocks);
        }
      }
    }
  }

  r.seq_len = s.seq_len == 0 ? rules.max_seq_len() : s.seq_len;
  // Note [Packed sequences] (models/src/layers.cpp): a document as long as
  // the sequence is the sequence.
  r.document_len = s.document_len > 0 && s.document_len < r.seq_len ? s.document_len : 0;
  if (s.document_len > r.seq_len) {
    bad.add("document_len", std::to_string(s.document_len) + " exceeds seq_len " + std::to_string(r.seq_len) +
                                ": a packed sequence holds whole documents; valid: 0 (one a sequence) to " + std::to_string(r.seq_len));
  }
  // Note [Chunked loss] (models/src/layers.cpp): chunks of the sequence.
  r.loss_chunks = s.loss_chunks;
  if (s.loss_chunks > r.seq_len) {
    bad.add("loss_chunks", std::to_string(s.loss_chunks) + " exceeds seq_len " + std::to_string(r.seq_len) +
                               ": the logits are chunked along the sequence; valid: 1 to " + std::to_string(r.seq_len));
  } else if (s.loss_chunks > 1 && r.tp > 1) {
    bad.add("loss_chunks", std::to_string(s.loss_chunks) + " with tp = " + std::to_string(r.tp) +
                               ": a vocab-parallel cross-entropy is not chunked here; valid with tp > 1: 1");
  }
  // Note [Fused linear cross-entropy] (models/src/layers.cpp).
  r.loss_kernel = s.loss_kernel;
  if (s.loss_kernel != LossKernel::kCrossEntropy && r.tp > 1) {
    bad.add("loss_kernel", std::string(to_string(s.loss_kernel)) + " with tp = " + std::to_string(r.tp) +
                               ": the fused kernels take the whole vocabulary (a vocab-parallel loss is Megatron's or "
                               "DTensor's); valid with tp > 1: cross_entropy");
  } else if (s.loss_kernel != LossKernel::kCrossEntropy && s.loss_chunks > 1) {
    bad.add("loss_kernel", std::string(to_string(s.loss_kernel)) + " with loss_chunks " + std::to_string(s.loss_chunks) +
                               ": the fused kernel chunks the logits itself; give one (loss_chunks: 1, or loss_kernel: cross_entropy)");
  }
  const std::int64_t lo = rules.min_seq_len(), hi = rules.max_seq_len();
  if (r.seq_len > hi || r.seq_len < lo) {
    const std::string bound = r.seq_len < lo ? " is below " + model.name() + "'s minimum of " + std::to_string(lo)
                                             : " exceeds " + model.name() + "'s maximum of " + std::to_string(hi);
    bad.add("seq_len", std::to_string(r.seq_len) + bound + "; valid: " + std::to_string(lo) + " to " + std::to_string(hi));
  } else if (r.cp > 1 && r.seq_len % (2 * r.cp) != 0) {
    // Megatron-Core cuts each sequence into 2 cp chunks (load balancing).
    bad.add("cp", std::to_string(r.cp) + " does not split seq_len " + std::to_string(r.seq_len) +
                      ": context parallelism cuts a sequence into 2 x cp = " + std::to_string(2 * r.cp) +
                      " equal chunks; valid cp: " + join_values(rules.cp_values(r.tp, r.seq_len)));
  } else if (r.sequence_parallel && r.tp > 1 && degrees_ok && rules.sequence_parallel_values(r.tp, r.cp, r.seq_len).size() < 2) {
    bad.add("sequence_parallel", "true splits each rank's " + std::to_string(r.seq_len / r.cp) + " tokens of a sequence over tp " +
                                     std::to_string(r.tp) + ", which does not divide them; set seq_len to a multiple of " +
                                     std::to_string(r.tp * r.cp) + " or sequence_parallel: false");
  }

  r.precision = s.precision;
  if (const auto ok = rules.precisions(); std::find(ok.begin(), ok.end(), r.precision) == ok.end()) {
    std::string valid;
    for (Precision p : ok) valid += (valid.empty() ? "" : ", ") + std::string(to_string(p));
    if ((quantized_gemms(r.precision) || rules.fp32_base()) && rules.quantized_base()) {
      // Note [QLoRA], Note [8-bit base] (models/src/peft.cpp).
      bad.add("precision", std::string(to_string(r.precision)) +
                               (rules.fp32_base() ? ": an fp32 base (peft: lora_fp32) is cast to its 16-bit compute dtype, in which its "
                                                    "GEMMs run; valid: "
                                                  : ": a quantized base (QLoRA's NF4, LLM.int8) is dequantized to its compute dtype, in "
                                                    "which its GEMMs run; valid: ") +
                               valid);
    } else if (r.precision == Precision::kFp8) {
      bad.add("precision", "fp8 needs FP8 tensor cores (Hopper or later); " + cluster.device.name + " has none; valid: " + valid);
    } else if (r.precision == Precision::kFp4) {
      // Note [NVFP4 training]: TE trains NVFP4 on compute capability 10.x.
      bad.add("precision", "fp4 (NVFP4) needs Blackwell's FP4 tensor cores (compute capability 10.x); " + cluster.device.name +
                               " has " + compute_capability_text(cluster.device) + "; valid: " + valid);
    } else {
      bad.add("precision", "bf16 needs bfloat16 support, which " + cluster.device.name + " lacks; valid: " + valid);
    }
  }
  r.fp8_param_gather = s.fp8_param_gather;
  r.fp8_recipe = s.fp8_recipe;
  if (r.fp8_recipe != Fp8Recipe::kDelayed && s.precision != Precision::kFp8) {
    bad.add("fp8_recipe", std::string(to_string(r.fp8_recipe)) + " scales FP8 casts and needs precision fp8; precision is " +
                              to_string(s.precision) + " (valid here: delayed, the default)");
  } else if (const auto ok = rules.fp8_recipes(s.precision); std::find(ok.begin(), ok.end(), r.fp8_recipe) == ok.end()) {
    // Note [FP8 training]: TE runs MXFP8 on compute capability 10.x only.
    std::string valid;
    for (Fp8Recipe v : ok) valid += (valid.empty() ? "" : ", ") + std::string(to_string(v));
    bad.add("fp8_recipe", std::string(to_string(r.fp8_recipe)) + " needs Blackwell's block-scaled tensor cores (compute capability 10.x); " +
                              cluster.device.name + " has " + compute_capability_text(cluster.device) + "; valid: " + valid);
  }
  if (r.fp8_param_gather && !quantized_gemms(s.precision)) {
    bad.add("fp8_param_gather", std::string("true needs precision fp8 or fp4 (it gathers the weights' FP8 or NVFP4 copies); precision is ") +
                                    to_string(s.precision));
  }
  // Note [SGD momentum]
  // torch.optim.SGD keeps a momentum buffer per parameter only where
  // momentum != 0 (torch/optim/sgd.py: momentum_buffer_list stays None
  // otherwise); its default is 0. Megatron-LM builds it with
  // --sgd-momentum, 0.9 by default (megatron/training/arguments.py,
  // megatron/core/optimizer/__init__.py); DeepSpeed runs an "SGD" it does
  // not implement as torch.optim.SGD with the config's params
  // (deepspeed/runtime/engine.py, _configure_basic_optimizer), so at 0
  // unless params.momentum says. A plan's own default is 0.9, the
  // recipes' (and what dtsim always counted).
  if (!(s.sgd_momentum >= 0) || s.sgd_momentum > 1) {
    bad.add("sgd_momentum", std::to_string(s.sgd_momentum) + " is not in 0..1 (0: plain SGD, no buffer; 0.9: the usual)");
  }
  r.sgd_momentum = s.sgd_momentum;
  r.optimizer = effective_optimizer(s.optimizer, s.sgd_momentum);

  // Attention: auto is what the device and precision would run (Note
  // [Attention as it runs] in models/src/layers.cpp).
  r.flash_attention = rules.flash_attention(s.attention, s.precision);

  // FSDP strategies map onto ZeRO stages (zero_stage_of).
  r.zero_stage = s.zero_stage;
  if (s.fsdp != FsdpMode::kNone) {
    const int stage = zero_stage_of(s.fsdp);
    if (s.zero_stage != 0 && s.zero_stage != stage) {
      bad.add("zero_stage", std::to_string(s.zero_stage) + " contradicts fsdp: " + to_string(s.fsdp) + " (stage " +
                                std::to_string(stage) + "); set only one of them");
    }
    r.zero_stage = stage;
    r.fsdp = true;
    r.hybrid_shard = s.fsdp == FsdpMode::kHybridShard;
  }
  r.loss_parallel = resolved_loss_parallel(s.loss_parallel, r.fsdp);
  if (!s.limit_all_gathers && !(r.fsdp && r.zero_stage == 3)) {
    bad.add("limit_all_gathers", std::string("false is FSDP's, for its all-gathers of parameters; valid only with fsdp: "
                                             "full_shard or hybrid_shard (the plan has ") +
                                     (r.fsdp ? "fsdp: " + std::string(to_string(s.fsdp)) : "zero_stage " + std::to_string(r.zero_stage)) + ")");
  }
  r.limit_all_gathers = s.limit_all_gathers;
  if (s.fsdp_wrap != FsdpWrap::kBlocks && !(r.fsdp && r.zero_stage == 3)) {
    bad.add("fsdp_wrap", std::string(to_string(s.fsdp_wrap)) + " is FSDP's, for the units it gathers parameters by; valid only with fsdp: "
                         "full_shard or hybrid_shard (the plan has " +
                             (r.fsdp ? "fsdp: " + std::string(to_string(s.fsdp)) : "zero_stage " + std::to_string(r.zero_stage)) + ")");
  }
  r.fsdp_wrap = s.fsdp_wrap;
  // Note [FSDP2's reduce-scatter wait] (lowering/passes/data_parallel.cpp):
  // the rules table says where 2 is valid, the messages why not.
  if (!contains(PlanRules::fsdp_versions(s.fsdp, s.overlap, s.limit_all_gathers), s.fsdp_version)) {
    if (!(r.fsdp && r.zero_stage >= 2)) {
      bad.add("fsdp_version", std::string("2 is PyTorch FSDP2 (fully_shard), which shards gradients; valid only with fsdp: "
                                          "full_shard, shard_grad_op or hybrid_shard (the plan has ") +
                                  (r.fsdp ? "fsdp: " + std::string(to_string(s.fsdp)) + ", which FSDP2 does not have; replicate() is DDP's"
                                          : "zero_stage " + std::to_string(r.zero_stage)) +
                                  ")");
    } else if (!s.overlap) {
      bad.add("fsdp_version", "2 with overlap: false: FSDP2 always reduce-scatters beside the backward; valid with overlap false: 1");
    } else {
      bad.add("fsdp_version", "2 with limit_all_gathers: false: FSDP2 (fully_shard) has no such knob, it prefetches one unit ahead; "
                              "valid with limit_all_gathers false: 1");
    }
  }
  r.fsdp_version = s.fsdp_version;
  if (s.fsdp_reduce_fp32 && !(r.fsdp && r.zero_stage == 3)) {
    bad.add("reduce_dtype", std::string("fp32 is FSDP's MixedPrecision reduce_dtype, modelled for fsdp: full_shard or hybrid_shard (the plan has ") +
                                (r.fsdp ? "fsdp: " + std::string(to_string(s.fsdp)) : "zero_stage " + std::to_string(r.zero_stage)) +
                                "); valid here: param" +
                                (r.fsdp ? "" : " (Megatron's fp32 gradients: accumulate_allreduce_grads_in_fp32)"));
  }
  r.fsdp_reduce_fp32 = s.fsdp_reduce_fp32;
  // Note [ZeRO-3 modules]: DeepSpeed's coordinator knobs, in whole elements.
  r.stage3_prefetch_bucket_size = static_cast<std::int64_t>(s.stage3_prefetch_bucket_size);
  r.stage3_max_live_parameters = static_cast<std::int64_t>(s.stage3_max_live_parameters);
  r.stage3_max_reuse_distance = static_cast<std::int64_t>(s.stage3_max_reuse_distance);
  r.stage3_param_persistence_threshold = static_cast<std::int64_t>(s.stage3_param_persistence_threshold);
  r.z3_leaf_layers = s.z3_leaf_layers;
  if (s.z3_leaf_layers && (r.zero_stage != 3 || r.fsdp)) {
    bad.add("z3_leaf_layers", std::string("true is DeepSpeed ZeRO-3's (set_z3_leaf_modules), for how it gathers parameters; "
                                          "valid only with zero_stage 3 (the plan has ") +
                                  (r.fsdp ? "fsdp: " + std::string(to_string(s.fsdp)) : "zero_stage " + std::to_string(r.zero_stage)) + ")");
  }
  const bool sharded_fsdp = s.fsdp != FsdpMode::kNone && s.fsdp != FsdpMode::kNoShard;
  if (rules.fp32_base() && (r.zero_stage >= 1 || sharded_fsdp)) {
    // Note [fp32 base] (models/src/peft.cpp).
    bad.add(sharded_fsdp ? "fsdp" : "zero_stage",
            std::string(sharded_fsdp ? to_string(s.fsdp) : std::to_string(r.zero_stage)) +
                " with peft: lora_fp32: " +
                (sharded_fsdp ? "a sharded fp32 base is gathered in 16 bits (FSDP's param_dtype), not modelled; valid: peft: lora "
                                "(the base in 16 bits), or fsdp: no_shard"
                              : "DeepSpeed casts the module to its 16-bit type at every stage; valid: peft: lora (the base in 16 "
                                "bits), or zero_stage 0"));
  } else if (rules.frozen_weights() && r.zero_stage == 3 && !r.fsdp && (rules.int8_base() || r.ep > 1)) {
    // Note [Frozen weights under ZeRO-3] (lowering/passes/zero3_modules.cpp):
    // DeepSpeed partitions a 4-bit base, not an 8-bit one (LLaMA-Factory's
    // quantization.py: "Only 4-bit quantized model can use fsdp+qlora").
    bad.add("zero_stage", rules.int8_base() ? std::string("3 with peft: lora_int8: DeepSpeed's ZeRO-3 does not partition bitsandbytes' 8-bit "
                                                          "weights; valid: zero_stage 0, 1 or 2, or peft: qlora")
                                            : "3 with peft and ep = " + std::to_string(r.ep) +
                                                  ": ZeRO-3's partitioning of a fine-tune's frozen weights is modelled without expert "
                                                  "parallelism; valid here: zero_stage 0, 1 or 2");
  } else if (rules.int8_base() && s.fsdp != FsdpMode::kNone) {
    // Note [8-bit base] (models/src/peft.cpp).
    bad.add("fsdp", std::string(to_string(s.fsdp)) + " with peft: lora_int8: FSDP does not wrap bitsandbytes' 8-bit weights "
                                                     "(\"Cannot flatten integer dtype tensors\"), sharded or not; valid: none (DDP, or "
                                                     "ZeRO 1 and 2), or peft: qlora, whose 4-bit weights it shards");
  } else if (rules.frozen_weights() && sharded_fsdp && (s.fsdp == FsdpMode::kShardGradOp || r.pp > 1 || r.ep > 1)) {
    // Note [Frozen weights under FSDP] (lowering/passes/sharded_parameters.cpp).
    bad.add("fsdp", std::string(to_string(s.fsdp)) + " with peft" +
                        (s.fsdp == FsdpMode::kShardGradOp ? std::string()
                         : r.pp > 1                       ? " and pp = " + std::to_string(r.pp)
                                                          : " and ep = " + std::to_string(r.ep)) +
                        ": sharding a fine-tune's frozen weights is modelled for FSDP2's full_shard and hybrid_shard on one "
                        "pipeline stage without expert parallelism; valid here: no_shard" +
                        (s.fsdp == FsdpMode::kShardGradOp ? ", full_shard or hybrid_shard" : ""));
  } else if (rules.frozen_weights() && sharded_fsdp && r.fsdp_version != 2) {
    bad.add("fsdp_version", std::to_string(r.fsdp_version) + " with peft and fsdp: " + to_string(s.fsdp) +
                                ": FSDP1's flat parameters either refuse frozen and trained weights together "
                                "(use_orig_params false) or compute and reduce the frozen ones' gradients as if trained "
                                "(use_orig_params true), neither modelled; valid: 2 (fully_shard, as torchtune runs LoRA, with "
                                "overlap and limit_all_gathers true, as FSDP2 always runs)");
  } else if (s.fsdp != FsdpMode::kNone) {
    // Note [FSDP under a pipeline] (lowering/passes/fsdp_pipeline.cpp).
    const std::vector<FsdpMode> modes = rules.fsdp_modes(r.pp);
    if (std::find(modes.begin(), modes.end(), s.fsdp) == modes.end()) {
      bad.add("fsdp", std::string(to_string(s.fsdp)) + " with pp = " + std::to_string(r.pp) +
                          " is not modelled: under torch.distributed.pipelining a stage's parameters stay gathered from its "
                          "first forward to its last backward whatever the strategy; valid with pp > 1: full_shard, no_shard");
    }
  } else if (!contains(rules.zero_stages(r.pp), r.zero_stage)) {
    bad.add(r.spec.fsdp != FsdpMode::kNone ? "fsdp" : "zero_stage",
            "stage " + std::to_string(r.zero_stage) + " with pp = " + std::to_string(r.pp) +
                ": sharding gradients or parameters breaks the pipeline's gradient accumulation (DeepSpeed refuses it too); "
                "valid with pp > 1: zero_stage 0 or 1, or fsdp: full_shard (torch.distributed.pipelining's FSDP2)");
  }
  // Note [Hybrid sharding]
  // PyTorch FSDP's HYBRID_SHARD (and HSDP, a 2-D device mesh of replicas by
  // shards) shards a unit's parameters, gradients and optimizer state over
  // the data-parallel ranks of one node and replicates the shards across
  // nodes: gathers and reduce-scatters stay on NVLink, and each shard's
  // gradient is all-reduced over its replicas once reduce-scattered. Under
  // tensor parallelism a node holds gpus_per_node / tp of the data-parallel
  // ranks (tp innermost), so the shard group is the largest divisor of dp
  // up to that. Megatron-FSDP's HSDP (num_distributed_optimizer_instances
  // > 1, one instance an NVLink domain: Megatron-Bridge's Nemotron 3 Ultra
  // recipe) does the same over the expert data-parallel ranks for the
  // routed experts: the largest divisor of edp up to gpus_per_node / (ep
  // etp), their expert-parallel group filling the rest of the node, often
  // 1 (ep 64 on a domain of 64): the experts then stay whole in the domain
  // and their gradients are all-reduced over the domains. Megatron-FSDP's
  // outer_dp_sharding_strategy optim (the Ultra recipe's) shards the
  // optimizer state across the instances too: each shard's gradients are
  // reduce-scattered over the replicas instead of all-reduced, each rank
  // steps its 1 / replicas of the shard's state (the state sharded over
  // all dp, and all edp for the experts), and the updated parameters are
  // all-gathered back over the replicas after the step.
  r.shard_group = r.zero_stage == 0 ? 1 : r.dp * r.cp;  // Megatron-Core and torchtitan shard over dp x cp
  r.expert_shard_group = r.zero_stage == 0 ? 1 : r.edp;
  if (r.hybrid_shard && r.cp > 1) {
    bad.add("fsdp", "hybrid_shard with cp > 1 is not modelled; valid with context parallelism: full_shard, shard_grad_op, no_shard");
  } else if (r.hybrid_shard) {
    // Note [Hybrid sharding]: the shards within a node, the replicas across.
    const auto within = [](int ranks, int fit) {
      int n = std::max(1, std::min(ranks, fit));
      while (ranks % n != 0) --n;
      return n;
    };
    r.shard_group = within(r.dp, cluster.gpus_per_node / r.tp);
    if (r.ep > 1) r.expert_shard_group = within(r.edp, cluster.gpus_per_node / (r.ep * r.etp));
  }
  if (s.outer_optim && !r.hybrid_shard) {
    bad.add("outer_dp_sharding_strategy", "optim shards the optimizer state across HSDP's replicas; valid only with fsdp: hybrid_shard (valid here: no_shard)");
  }
  r.outer_optim = s.outer_optim && r.hybrid_shard;

  r.offload_optimizer = s.offload_optimizer;
  r.offload_params = s.offload_params;
  if (!contains(rules.param_offloads(r.zero_stage), r.offload_params)) {
    bad.add("offload_params", "cpu needs zero_stage 3 (parameters are offloaded only when "
                              "partitioned, as in ZeRO-Infinity); with zero_stage " +
                                  std::to_string(r.zero_stage) + " valid: none");
  }
  if (!contains(rules.optimizer_offloads(r.zero_stage, r.pp), r.offload_optimizer)) {
    if (r.zero_stage == 0) {
      bad.add("offload_optimizer", "cpu needs zero_stage 1, 2 or 3 (ZeRO-Offload); with zero_stage 0 valid: none");
    } else {
      bad.add("offload_optimizer", "cpu with pp > 1 is not modelled; valid with pipelines: none");
    }
  }
  r.recompute = s.recompute;
  if (r.recompute == Recompute::kOp) {
    if (!rules.op_recompute_allowed(r.tp, r.cp, r.flash_attention)) {
      bad.add("recompute", "op (torchtitan's op-level policy) is described for dense Llama-family blocks at tp 1 and cp 1 with "
                           "fused attention; this model and plan (tp " + std::to_string(r.tp) + ", cp " + std::to_string(r.cp) +
                           (r.flash_attention ? "" : ", eager attention") + ") need one of none, selective, full");
    }
  }
  // Note [Recompute modules] (model.hpp): Megatron-Core's recompute_modules
  // as its transformer_config.py checks them, and "moe", not modelled.
  r.recompute_modules = s.recompute_modules;
  if (s.recompute_modules_set && r.recompute != Recompute::kSelective) {
    bad.add("recompute_modules", std::string("applies to recompute: selective (Megatron-Core's --recompute-granularity selective), not ") +
                                     to_string(r.recompute) + "; remove it or set recompute: selective");
  } else if (r.recompute == Recompute::kSelective) {
    const std::uint8_t described = rules.recompute_modules_described();
    const std::string valid = "; valid for " + rules.model_name() + ": " + recompute_modules_string(described);
    if ((r.recompute_modules & kRecomputeMoe) != 0 && (described & kRecomputeMoe) == 0) {
      bad.add("recompute_modules", "moe needs a mixture-of-experts model (the whole MoE layer rerun)" + valid);
    } else if ((r.recompute_modules & kRecomputeMoe) != 0 && s.overlap_moe_expert_parallel_comm) {
      bad.add("recompute_modules", "moe with overlap_moe_expert_parallel_comm: Megatron-Core asserts \"disable moe in "
                                   "recompute_modules when enabling overlap_moe_expert_parallel_comm\"; drop one");
    } else if ((r.recompute_modules & kRecomputeMoeAct) != 0 && (described & kRecomputeMoeAct) == 0) {
      bad.add("recompute_modules", "moe_act needs a mixture-of-experts model (Megatron-Core raises without grouped experts)" + valid);
    } else if ((r.recompute_modules & kRecomputeMlaUpProj) != 0 && (described & kRecomputeMlaUpProj) == 0) {
      bad.add("recompute_modules", "mla_up_proj needs multi-latent attention whose up-projections the model describes (Megatron-Core raises "
                                   "without MLA; DeepSeek Sparse Attention's absorbed layers are not described)" + valid);
    } else if ((r.recompute_modules & kRecomputeMhc) != 0 && (described & kRecomputeMhc) == 0) {
      bad.add("recompute_modules", "mhc needs hyper-connections (Megatron-Core raises \"'mhc' in recompute_modules requires "
                                   "enable_hyper_connections=True\")" + valid);
    } else if ((r.recompute_modules & kRecomputeMhc) != 0 && (r.recompute_modules & kRecomputeMlp) != 0) {
      bad.add("recompute_modules", "mhc with mlp: Megatron-Core raises (\"They use different checkpoint mechanisms that may "
                                   "conflict\"); drop one");
    } else if ((r.recompute_modules & (kRecomputeMoeAct | kRecomputeLayernorm)) != 0 && r.precision == Precision::kFp8 &&
               r.fp8_recipe == Fp8Recipe::kDelayed) {
      bad.add("recompute_modules", "moe_act and layernorm under fp8 need a recipe other than delayed (Megatron-Core: \"Delayed "
                                   "scaling does not support moe_act and layernorm recompute for fp8\"); set plan.fp8_recipe or "
                                   "drop them");
    }
  }
  // Note [Expert-parallel overlap] (lowering/layer_stage.cpp): what
  // Megatron-Core's transformer_config.py asserts, and not beside dtsim's
  // sharded parameters (DeepSpeed's ZeRO-3, PyTorch's FSDP).
  r.overlap_moe_expert_parallel_comm = s.overlap_moe_expert_parallel_comm;
  if (r.overlap_moe_expert_parallel_comm &&
      !PlanRules::ep_overlap_values(r.ep, r.pp, r.schedule, r.recompute, r.precision, r.zero_stage == 3, r.moe_dispatcher).back()) {
    std::string why;
    if (r.ep <= 1) {
      why = "needs experts split over ranks (ep > 1; ep is " + std::to_string(r.ep) + ")";
    } else if (r.moe_dispatcher == MoeDispatcher::kAllGather) {
      why = "needs the alltoall or deepep dispatcher (Megatron-Core asserts alltoall or flex; moe_dispatcher is allgather)";
    } else if (r.pp > 1) {
      why = "with a pipeline needs schedule: interleaved (Megatron-Core asserts virtual stages; the schedule is " +
            std::string(to_string(r.schedule)) + ")";
    } else if (r.zero_stage == 3) {
      why = "is not modelled beside sharded parameters (zero_stage 3, fsdp: DeepSpeed's and PyTorch's, which do not "
            "run Megatron's combined 1F1B); use zero_stage 0, 1 or 2";
    } else if (r.recompute == Recompute::kFull) {
      why = "cannot run with recompute: full (Megatron-Core asserts it); use none or selective";
    } else {
      why = "needs a 16-bit model (fp16, bf16, fp8 or fp4), not fp32";
    }
    bad.add("overlap_moe_expert_parallel_comm", "true " + why + "; or set it false");
  }
  // Note [Block recompute] (partition.cpp): Megatron-Core's recompute_method
  // and recompute_num_layers, which its TransformerConfig allows under full
  // recompute only and requires together there.
  if (s.recompute_method == RecomputeMethod::kBlock || s.recompute_num_layers > 0) {
    if (r.recompute != Recompute::kFull) {
      bad.add(s.recompute_method == RecomputeMethod::kBlock ? "recompute_method" : "recompute_num_layers",
              std::string("applies to recompute: full (Megatron-Core's recompute_granularity full), not ") + to_string(r.recompute) +
                  "; remove it or set recompute: full");
    } else if (s.recompute_method == RecomputeMethod::kBlock && s.recompute_num_layers == 0) {
      bad.add("recompute_method", "block needs recompute_num_layers, the blocks rerun in each model chunk (at least 1), as "
                                  "Megatron-Core's TransformerConfig requires");
    } else if (s.recompute_method == RecomputeMethod::kUniform && s.recompute_num_layers > 1 && r.zero_stage == 3) {
      // A group's rerun needs every member's parameters at once, which the
      // sharded-parameter passes gather layer by layer; Megatron-Core's own
      // optimizer shards no parameters.
      bad.add("recompute_num_layers", std::to_string(s.recompute_num_layers) +
                                          " with recompute_method uniform (groups of blocks under one checkpoint) is not "
                                          "modelled with ZeRO-3 or FSDP's sharded parameters; valid there: 1, or "
                                          "recompute_method: block");
    } else if (s.recompute_method == RecomputeMethod::kBlock) {
      r.recompute_blocks = s.recompute_num_layers;
    } else if (s.recompute_num_layers > 1) {
      r.recompute_group = s.recompute_num_layers;
    }
  }
  // Note [Activation offload] (lowering/passes/activation_offload.cpp):
  // Megatron-Core's TransformerConfig checks, in its words.
  r.cpu_offloading_num_layers = s.cpu_offloading_num_layers;
  if (s.cpu_offloading_num_layers > 0 && r.zero3_modules()) {
    bad.add("cpu_offloading_num_layers", std::to_string(s.cpu_offloading_num_layers) +
                                             " with DeepSpeed's ZeRO-3, which gathers module by module: Megatron-Core offloads "
                                             "under its own data parallelism or Megatron-FSDP; use fsdp: full_shard, or 0 here");
  } else if (const int n = s.cpu_offloading_num_layers; n > rules.cpu_offloading_max(r.pp, r.recompute)) {
    const std::string count = std::to_string(n);
    if (r.pp > 1) {
      bad.add("cpu_offloading_num_layers",
              count + " with pp " + std::to_string(r.pp) + ": Megatron-Core has no CPU offloading under pipeline parallelism; valid there: 0");
    } else if (r.recompute != Recompute::kNone) {
      bad.add("cpu_offloading_num_layers", count + " with recompute " + to_string(r.recompute) +
                                               ": Megatron-Core's CPU offloading does not work with activation recomputation; "
                                               "set recompute: none, or 0 here");
    } else if (cluster.device.gloo_collectives) {
      bad.add("cpu_offloading_num_layers", count + " on " + cluster.device.name +
                                               ": a CPU's activations are in host memory already; valid: 0");
    } else if (const int blocks = rules.transformer_layers(); blocks == 0) {
      bad.add("cpu_offloading_num_layers", count + ": " + model.name() +
                                               " has no transformer layers, the only ones Megatron-Core offloads; valid: 0");
    } else {
      bad.add("cpu_offloading_num_layers", count + " of the " + std::to_string(blocks) + " transformer layers of " +
                                               model.name() + "; valid: 0 to " + std::to_string(blocks - 1) +
                                               " (Megatron-Core offloads only layers less than num_layers)");
    }
  }
  // Note [Saved-tensor offload] (lowering/passes/saved_tensor_offload.cpp):
  // torchtune's, on a one-stage plan's transformer blocks.
  r.enable_activation_offloading = s.enable_activation_offloading;
  const bool megatron_offload = s.cpu_offloading_num_layers > 0 || s.fine_grained_activation_offloading;
  if (r.enable_activation_offloading &&
      !rules.saved_tensor_offload_allowed(r.pp, megatron_offload, s.cpu_checkpointing || s.partition_activations, r.recompute_group)) {
    // The rules table's conditions, each said in its own words.
    if (r.pp > 1) {
      bad.add("enable_activation_offloading", "true with pp " + std::to_string(r.pp) +
                                                  ": torchtune runs no pipeline, and dtsim offloads a one-stage plan's blocks; valid there: false");
    } else if (megatron_offload) {
      bad.add("enable_activation_offloading", std::string("true with Megatron-Core's ") +
                                                  (s.cpu_offloading_num_layers > 0 ? "cpu_offloading_num_layers" : "fine_grained_activation_offloading") +
                                                  ": one offloading of the activations at a time; drop one");
    } else if (s.cpu_checkpointing || s.partition_activations) {
      bad.add("enable_activation_offloading", std::string("true with DeepSpeed's ") +
                                                  (s.cpu_checkpointing ? "cpu_checkpointing" : "partition_activations") +
                                                  ", which moves the same checkpoints; drop one");
    } else if (r.recompute_group > 1) {
      bad.add("enable_activation_offloading", "true with Megatron's uniform recompute groups of " + std::to_string(r.recompute_group) +
                                                  " blocks (recompute_num_layers): torchtune checkpoints each block alone; valid with "
                                                  "recompute_num_layers 1");
    } else if (cluster.device.gloo_collectives) {
      bad.add("enable_activation_offloading", "true on " + cluster.device.name + ": a CPU's activations are in host memory already; valid: false");
    } else {
      bad.add("enable_activation_offloading", "true: " + model.name() + " has no transformer layers, whose saved tensors are "
                                                  "what dtsim offloads; valid: false");
    }
  }
  // Note [Fine-grained offload] (lowering/passes/fine_grained_offload.cpp):
  // TransformerConfig.__post_init__'s checks, in its words, and what dtsim
  // does not model.
  resolve_fine_grained_offload(s, r, rules, cluster, bad);
  // Note [BF16 layers] (core/model.cpp): TransformerConfig's checks, in its
  // words; in bf16 or fp16 every layer is so already (as in Megatron-Core,
  // the flag then changes nothing).
  if (s.first_last_layers_bf16 && quantized_gemms(r.precision)) {
    const int per_stage = rules.transformer_layers() / std::max(1, r.pp);
    if (r.precision == Precision::kFp8 && r.fp8_recipe == Fp8Recipe::kDelayed) {
      bad.add("first_last_layers_bf16", "true with fp8_recipe delayed: Megatron-Core refuses it (\"Delayed scaling does not support first / "
                                        "last layer in BF16\"); valid with it: fp8_recipe tensorwise or mxfp8");
    } else if (s.num_layers_at_start_in_bf16 > per_stage) {
      bad.add("num_layers_at_start_in_bf16", std::to_string(s.num_layers_at_start_in_bf16) + " must be between 0 and the layers of a pipeline stage, " +
                                                 std::to_string(per_stage) + " (Megatron-Core refuses more)");
    } else if (s.num_layers_at_end_in_bf16 > per_stage) {
      bad.add("num_layers_at_end_in_bf16", std::to_string(s.num_layers_at_end_in_bf16) + " must be between 0 and the layers of a pipeline stage, " +
                                               std::to_string(per_stage) + " (Megatron-Core refuses more)");
    } else {
      r.bf16_layers_start = s.num_layers_at_start_in_bf16;
      r.bf16_layers_end = s.num_layers_at_end_in_bf16;
    }
  }
  // Note [DeepSpeed checkpoints] (lowering/passes/deepspeed_checkpointing.cpp).
  for (const auto& [key, on] : {std::pair<const char*, bool>{"partition_activations", s.partition_activations},
                                std::pair<const char*, bool>{"cpu_checkpointing", s.cpu_checkpointing}}) {
    if (!on || rules.deepspeed_checkpoints_allowed(r.pp, r.recompute, r.recompute_blocks, r.recompute_group)) continue;
    if (r.recompute != Recompute::kFull || r.recompute_blocks > 0 || r.recompute_group > 1) {
      bad.add(key, std::string("true is DeepSpeed's activation checkpointing, which reruns every block from its own input: it "
                               "needs recompute: full (recompute_method uniform, recompute_num_layers 1); valid here: false"));
    } else if (r.pp > 1) {
      bad.add(key, "true with pp " + std::to_string(r.pp) + ": not modelled under a pipeline; valid there: false");
    } else {
      bad.add(key, "true on " + cluster.device.name + ": a CPU's checkpoints are in host memory already; valid: false");
    }
  }
  if (s.partition_activations && r.sequence_parallel) {
    bad.add("partition_activations", "true with sequence_parallel: the checkpoints are split over the tensor-parallel ranks "
                                     "already; valid there: false");
  }
  r.partition_activations = s.partition_activations && r.tp > 1;
  r.cpu_checkpointing = s.cpu_checkpointing;
  r.bucket_bytes = static_cast<Bytes>(s.bucket_mb * 1e6);
  if (r.bucket_bytes < 1) bad.add("bucket_mb", "must be positive");
  r.overlap = s.overlap;
  r.contiguous_gradients = s.contiguous_gradients;
  // Note [ZeRO-1's reduction] (passes/data_parallel.cpp): a Python loop's
  // ZeRO-1 is ZeroRedundancyOptimizer over DDP, whose buckets all-reduce.
  r.reduce_scatter = s.reduce_scatter && r.runtime != Runtime::kPython;
  // Note [Overlapped parameter gather] (passes/data_parallel.cpp):
  // Megatron-LM's arguments.py asserts the distributed optimizer and
  // --overlap-grad-reduce beside it.
  r.overlap_param_gather = s.overlap_param_gather;
  if (!contains(rules.overlap_param_gather_values(r.zero_stage, r.fsdp, r.overlap, r.runtime), s.overlap_param_gather)) {
    // Why, in the words of the rule that refuses it.
    if (r.zero_stage != 1 || r.fsdp) {
      bad.add("overlap_param_gather", std::string("true needs the distributed optimizer (zero_stage: 1), as Megatron-LM's "
                                                  "--overlap-param-gather does; with ") +
                                          (r.fsdp ? "fsdp" : "zero_stage " + std::to_string(r.zero_stage)) + " valid: false");
    } else if (!r.overlap) {
      bad.add("overlap_param_gather", "true needs overlap: true (Megatron-LM's --overlap-param-gather needs "
                                      "--overlap-grad-reduce); valid here: false");
    } else if (r.runtime == Runtime::kPython) {
      bad.add("overlap_param_gather", "true with runtime: python, whose ZeRO-1 (ZeroRedundancyOptimizer) broadcasts "
                                      "the parameters after the step; valid there: false");
    }
  }
  if (s.reduce_scatter && r.runtime == Runtime::kPython && r.zero_stage == 1 && s.origins.where.count("plan.reduce_scatter") > 0) {
    bad.add("reduce_scatter", "true with runtime: python, whose ZeRO-1 is PyTorch's ZeroRedundancyOptimizer over DDP, which "
                              "all-reduces every bucket; valid there: false");
  }
  r.accumulate_allreduce_grads_in_fp32 = s.accumulate_allreduce_grads_in_fp32;
  // Note [DeepSpeed's knob names] (config_io.cpp): elements of the gradients' type.
  if (s.reduce_bucket_size > 0) r.bucket_bytes = static_cast<Bytes>(s.reduce_bucket_size * gradient_element_bytes(r));
  // Megatron-LM sets it for every run; it "does nothing when pipeline
  // parallel is not used" (model_parallel_config.py).
  r.deallocate_pipeline_outputs = s.deallocate_pipeline_outputs;
  if (r.accumulate_allreduce_grads_in_fp32 && r.zero_stage >= 2) {
    bad.add("accumulate_allreduce_grads_in_fp32",
            "true is Megatron-Core's whole gradient buffer, which its distributed optimizer (zero_stage 1) keeps too; with "
            "zero_stage " + std::to_string(r.zero_stage) + (r.fsdp ? " (fsdp)" : "") + " valid: false");
  }
  // Note [No master weights].
  r.master_weights = s.master_weights;
  if (!r.master_weights && !PlanRules::masters_optional(r.precision, r.accumulate_allreduce_grads_in_fp32, r.offload_optimizer)) {
    if (r.precision != Precision::kFp16 && r.precision != Precision::kBf16) {
      bad.add("master_weights", std::string("false with precision ") + to_string(r.precision) +
                                    (r.precision == Precision::kFp32 ? ", whose parameters are their own master" : ", whose recipes keep fp32 masters") +
                                    "; valid: true, or precision fp16 or bf16");
    } else if (r.accumulate_allreduce_grads_in_fp32) {
      bad.add("master_weights", "false contradicts accumulate_allreduce_grads_in_fp32: true (Megatron-Core's optimizer keeps fp32 masters); set only one");
    } else if (r.offload_optimizer == Offload::kCpu) {
      bad.add("master_weights", "false with offload_optimizer cpu is not modelled (ZeRO-Offload keeps fp32 states on the host); valid: true");
    }
  }
  if (r.accumulate_allreduce_grads_in_fp32 && r.offload_optimizer == Offload::kCpu) {
    bad.add("accumulate_allreduce_grads_in_fp32", "true with offload_optimizer cpu is not modelled (Megatron-Core keeps its "
                                                  "gradient buffer on the GPU); valid: false");
  }
  // Note [Megatron's gradient buffer]: in 16 bits as in fp32.
  r.megatron_grad_buffer = s.megatron_grad_buffer;
  if (r.megatron_grad_buffer && (r.zero_stage >= 2 || r.fsdp)) {
    bad.add("megatron_grad_buffer", "true is Megatron-Core's DistributedDataParallel buffer, under its distributed optimizer "
                                    "(zero_stage 1) or without one; with " +
                                        (r.fsdp ? std::string("fsdp") : "zero_stage " + std::to_string(r.zero_stage)) + " valid: false");
  } else if (r.megatron_grad_buffer && r.offload_optimizer == Offload::kCpu) {
    bad.add("megatron_grad_buffer", "true with offload_optimizer cpu is not modelled (Megatron-Core keeps its gradient buffer on "
                                    "the GPU); valid: false");
  }
  // Note [Precision-aware optimizer]: as Megatron-Core's OptimizerConfig
  // and get_megatron_optimizer assert.
  r.use_precision_aware_optimizer = s.use_precision_aware_optimizer;
  r.main_params_dtype = s.main_params_dtype;
  r.exp_avg_dtype = s.exp_avg_dtype;
  r.exp_avg_sq_dtype = s.exp_avg_sq_dtype;
  r.store_param_remainders = s.store_param_remainders;
  if (r.use_precision_aware_optimizer) {
    if (!PlanRules::precision_aware_allowed(r.zero_stage, r.fsdp, r.optimizer)) {
      bad.add("use_precision_aware_optimizer",
              is_sgd(r.optimizer) ? std::string("true needs optimizer adam or adamw (Transformer Engine's FusedAdam); with sgd valid: false")
                                  : "true needs zero_stage 1, Megatron-Core's distributed optimizer (\"only supported with distributed "
                                    "optimizer\"); with " + (r.fsdp ? std::string("fsdp") : "zero_stage " + std::to_string(r.zero_stage)) +
                                        " valid: false");
    } else if (!r.master_weights && PlanRules::masters_optional(r.precision, r.accumulate_allreduce_grads_in_fp32, r.offload_optimizer)) {
      // (Where masters are not optional, the check above said so.)
      bad.add("master_weights", "false contradicts use_precision_aware_optimizer: true (its FusedAdam keeps masters); set only one");
    } else if (r.runtime == Runtime::kPython) {
      bad.add("use_precision_aware_optimizer", "true with runtime: python, whose optimizer is torch.optim's; valid there: false");
    }
  } else {
    for (const auto& [key, d] : {std::pair{"main_params_dtype", r.main_params_dtype}, std::pair{"exp_avg_dtype", r.exp_avg_dtype},
                                 std::pair{"exp_avg_sq_dtype", r.exp_avg_sq_dtype}}) {
      if (d != StateDtype::kFp32) {
        bad.add(key, std::string(to_string(d)) + " needs use_precision_aware_optimizer: true (Megatron-Core asserts \"" + key +
                         " can only be fp32 when not using precision-aware optimizer\"); valid without it: fp32");
      }
    }
  }
  // Note [8-bit optimizer].
  r.optim_bits = s.optim_bits;
  if (r.optim_bits != 32 && r.optim_bits != 8) {
    bad.add("optim_bits", std::to_string(s.optim_bits) + " is not a width bitsandbytes keeps states in; valid: 32 or 8");
  } else if (r.optim_bits == 8 && !PlanRules::eight_bit_states_allowed(r.optimizer, r.use_precision_aware_optimizer, r.offload_optimizer)) {
    if (r.optimizer == Optimizer::kSgdPlain) {
      bad.add("optim_bits", "8 with sgd at sgd_momentum 0, which keeps no state to quantize; valid: 32, or sgd_momentum above 0");
    } else if (r.use_precision_aware_optimizer) {
      bad.add("optim_bits", "8 contradicts use_precision_aware_optimizer: true (Transformer Engine's FusedAdam keeps its "
                            "states in exp_avg_dtype and exp_avg_sq_dtype); set only one");
    } else if (r.offload_optimizer == Offload::kCpu) {
      bad.add("optim_bits", "8 with offload_optimizer cpu is not modelled (DeepSpeed's CPU Adam keeps fp32 states on the host); "
                            "valid: 32");
    }
  }
  // Note [Optimizer in backward] (lowering/layer_stage.cpp): torchtune's
  // single-device recipe, which refuses gradient accumulation with it.
  r.optimizer_in_backward = s.optimizer_in_backward;
  if (r.optimizer_in_backward &&
      !PlanRules::optimizer_in_backward_allowed(r.gpus_used(), r.grad_accum, r.zero_stage, r.offload_optimizer, r.grad_buffer())) {
    const int gpus = r.gpus_used();
    if (gpus > 1) {
      bad.add("optimizer_in_backward", "true on " + std::to_string(gpus) + " GPUs: dtsim steps in the backward as torchtune's "
                                       "single-device recipe does, on one GPU; valid here: false");
    } else if (r.grad_accum > 1) {
      bad.add("optimizer_in_backward", "true with " + std::to_string(r.grad_accum) + " micro-batches a step: each gradient is "
                                       "stepped as it is made (torchtune: \"Gradient accumulation is not supported with "
                                       "optimizer_in_bwd\"); valid: false, or global_batch = micro_batch");
    } else if (r.offload_optimizer == Offload::kCpu) {
      bad.add("optimizer_in_backward", "true with offload_optimizer cpu is not modelled (the host's step follows the backward); valid: false");
    } else if (r.grad_buffer()) {
      bad.add("optimizer_in_backward", std::string("true with Megatron-Core's gradient buffer (") +
                                       (r.accumulate_allreduce_grads_in_fp32 ? "accumulate_allreduce_grads_in_fp32" : "megatron_grad_buffer") +
                                       "), which keeps every gradient for the step; drop one");
    } else if (r.zero_stage > 0) {
      bad.add("optimizer_in_backward", "true with zero_stage " + std::to_string(r.zero_stage) + ": on one GPU there is nothing to "
                                       "shard; valid: zero_stage 0");
    }
  }
  // Note [nanotron's fp32 accumulator] (lowering/emitter.hpp): nanotron's
  // FP32GradientAccumulator over PyTorch DDP and torch.optim.
  r.fp32_grad_accumulator = s.fp32_grad_accumulator;
  if (r.fp32_grad_accumulator &&
      !PlanRules::fp32_accumulator_allowed(r.precision, r.master_weights, r.zero_stage, r.shard_group, r.fsdp, r.offload_optimizer, r.grad_buffer(),
                                           r.use_precision_aware_optimizer, r.optimizer_in_backward)) {
    std::string why;
    if (r.precision != Precision::kFp16 && r.precision != Precision::kBf16) {
      why = std::string("with precision ") + to_string(r.precision) + ": it accumulates 16-bit gradients (nanotron asserts no parameter is float); valid: fp16 or bf16";
    } else if (!r.master_weights) {
      why = "contradicts master_weights: false (the accumulator keeps the fp32 masters the optimizer steps); set only one";
    } else if (r.zero_stage > 1 || r.fsdp) {
      why = "with " + (r.fsdp ? std::string("fsdp") : "zero_stage " + std::to_string(r.zero_stage)) +
            ": it keeps every gradient whole, beside nanotron's ZeRO-1 at most; valid: zero_stage 0, or 1 over one rank";
    } else if (r.zero_stage == 1) {
      why = "with zero_stage 1 over " + std::to_string(r.shard_group) + " ranks: nanotron's fp32 DDP hook raises NotImplementedError "
            "for ZeRO's reduce-scatter (optim/gradient_accumulator.py, get_fp32_accum_hook); valid: zero_stage 0";
    } else if (r.offload_optimizer == Offload::kCpu) {
      why = "with offload_optimizer cpu is not modelled (its buffer and masters live on the GPU); valid: false";
    } else if (r.grad_buffer()) {
      why = std::string("contradicts ") + (r.accumulate_allreduce_grads_in_fp32 ? "accumulate_allreduce_grads_in_fp32" : "megatron_grad_buffer") +
            ": true (Megatron-Core's gradient buffer); set only one";
    } else if (r.use_precision_aware_optimizer) {
      why = "contradicts use_precision_aware_optimizer: true (Transformer Engine's FusedAdam, not torch.optim over the accumulator's masters); set only one";
    } else {
      why = "contradicts optimizer_in_backward: true (each gradient stepped as it is made has nothing to accumulate); set only one";
    }
    bad.add("fp32_grad_accumulator", "true " + why);
  }
  bad.raise();
  return r;
}

}  // namespace dtsim::sim
