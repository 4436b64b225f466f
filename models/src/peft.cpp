// LoRA fine-tuning of any model dtsim describes: the base frozen, low-rank
// adapters beside the linear layers it names (Note [LoRA]).
//
// Note [LoRA]
// Megatron-Bridge's LoRA (src/megatron/bridge/peft/lora.py, LoRA; its
// adapters in peft/utils.py, ParallelLinearAdapter) freezes every parameter
// of the base model and wraps each linear layer of target_modules (default
// linear_qkv, linear_proj, linear_fc1, linear_fc2; dim 32) in LoRALinear,
// whose output is the base's plus linear_out(linear_in(x)) * alpha / dim:
// linear_in (A) maps the layer's input to `dim` features, linear_out (B)
// maps them to its output. dtsim prices it on the base model's own layers,
// whatever the family (`model.peft: lora`, `lora_rank`, `lora_targets`):
// - Which layers: a GEMM kernel is a linear layer's (a weight's: the
//   attention core and the scans are not GEMM kernels), and its name says
//   which of Megatron-Core's modules it is (kTargets: attn.qkv is
//   linear_qkv, mlp.down and moe.experts.down are linear_fc2, MLA's
//   attn.q_a_proj linear_q_down_proj, ...; a Mamba-2 or Gated DeltaNet
//   mixer's projections are its in_proj and out_proj, Kimi's delta
//   attention's Bridge's own q_proj ... o_proj, which no name here
//   matches). As Bridge matches target_modules by name, a target the model
//   lacks adapts nothing (a note says so); none matching is refused. An MoE
//   layer's experts share one adapter for all the rank's local experts
//   (share_expert_adapters, the default), each token passing through it.
// - HuggingFace PEFT's names (LoraConfig.target_modules over transformers'
//   Llama-style layers; torchtune's lora_attn_modules and
//   apply_lora_to_mlp name the same projections: output_proj is o_proj,
//   w1, w3, w2 gate_proj, up_proj, down_proj): q_proj, k_proj, v_proj,
//   o_proj, gate_proj, up_proj, down_proj, each an nn.Linear of its own
//   with its own A and B (peft/tuners/lora/layer.py, Linear.forward:
//   result + lora_B(lora_A(dropout(x))) * scaling). Where dtsim fuses
//   projections into one GEMM (attn.qkv, mlp.gate_up) an adapter spans its
//   projection's outputs (the layer's module of that name says how many:
//   Layer::modules), and the adapters over one GEMM share its input. So
//   Llama 3 8B at rank 16 on all seven trains 41,943,040 parameters, the
//   figure PEFT's print_trainable_parameters reports, where Megatron's four
//   fused modules train 35,651,584. They adapt Llama-style attention (a
//   layer with an attn.o_proj; not GPT-2's or BERT's fused c_attn, not a
//   Mamba-2, Gated DeltaNet or Kimi delta mixer) and dense MLPs, unsplit
//   (tp 1: PEFT's adapters are plain linears). On a mixture of experts
//   they are refused: transformers releases differ on whether each
//   expert's projections are modules PEFT matches (and dtsim's MoE layers
//   do not list their attention's modules). Megatron's names and
//   HuggingFace's are not mixed.
// - Tensor parallelism, as ParallelLinearAdapter splits it (its attributes
//   from get_adapter_attributes_from_linear): beside a column-parallel
//   layer A is column-parallel (dim / tp of its outputs, gathered:
//   gather_output; so the rank must divide over tp) and B column-parallel
//   as the base; beside a row-parallel one A is row-parallel (its output
//   all-reduced) and B column-parallel, its output gathered back to the
//   whole width; beside a layer Megatron does not split (TELinear
//   duplicated: MLA's down-projections) A and B both column-parallel, both
//   outputs gathered. Each ColumnParallelLinear all-reduces its input's
//   gradient in the backward, but A under sequence parallelism
//   (disable_grad_reduce). Under sequence parallelism a norm-fused layer
//   (Transformer Engine's LayerNormColumnParallelLinear: linear_qkv, a
//   dense linear_fc1, in_proj) hands A its gathered input
//   (return_layernorm_output_gathered) unless its userbuffers gather it
//   (tp_comm_overlap), where, as beside the other column-parallel layers,
//   the adapter all-gathers the input itself and reduce-scatters its
//   gradient; either way A keeps the gathered copy for its weight gradient.
//   A row adapter's output is split back over the sequence, whose backward
//   all-gathers it. These are plain NCCL calls, priced whole beside
//   Transformer Engine's overlap (LayerComm::serial). Expert adapters split
//   over the expert tensor-parallel group as their experts do; their
//   collectives (at etp > 1) and the shared expert adapter's gradient
//   all-reduce over expert parallelism are not priced.
// - Work: each adapter adds its four GEMMs (A and B forward, their dgrads
//   and wgrads). A frozen base layer computes no weight gradient: its
//   wgrad kernels go, its dgrads stay (the gradient still flows to the
//   layers below). The embedding, frozen and first, has no backward at all,
//   and no frozen table (a multi-token prediction depth's) a scatter-add.
//   The first block's input needs no gradient either, which autograd skips
//   for its first dgrads: dtsim keeps them (one block's, of the model's).
// - Memory: Note [Frozen weights].
// - Kept for backward: Transformer Engine keeps a linear layer's input only
//   for its weight gradient (backward_needs_input in
//   transformer_engine/pytorch/module/linear.py), so beside a targeted
//   layer the base's saved input is replaced by what the adapter keeps: its
//   input in the activations' precision (gathered, under sequence
//   parallelism, for the column adapters) and A's output (tokens x dim) for
//   B's weight gradient. An untargeted frozen layer's saved input is kept
//   as the model counts it: where nothing else needs it (Bridge's 70B
//   benchmark targets linear_qkv alone) that overstates what a block keeps
//   by those inputs; under full recompute, only the block's input is kept
//   and it does not matter.
// - Model FLOPs (MFU's numerator): the base's, less its frozen layers'
//   weight gradients, plus the adapters' (Megatron-Bridge's flop_utils.py
//   counts the frozen linears at 2/3 of a trained model's for its LoRA
//   benchmark and leaves the adapters out: 0.05% of the 70B's).
// Dropout on the adapters' input (Bridge's default 0) and DoRA are not
// priced; Megatron's recompute modules rerun the base's kernels, not the
// adapters', which keep what they save.
//
// Note [QLoRA]
// QLoRA (Dettmers et al. 2023; `peft: qlora`) is LoRA over a base whose
// linear weights are stored in 4-bit NormalFloat with double-quantized
// scales: bitsandbytes' Linear4bit (quant_type nf4, compress_statistics:
// an int8 absmax a block of 64 weights, an fp32 scale a block of 256 of
// those) as transformers loads a model with load_in_4bit, or torchao's
// NF4Tensor (block_size 64, scaler_block_size 256) as torchtune's
// quantize_base builds it: sim::kNf4BytesPerElement, 0.516 bytes a weight.
// Which weights: every linear layer of the blocks, targeted or not
// (torchtune's FrozenNF4Linear beside its NF4 LoRALinear; transformers
// skips the output head), each GEMM kernel's k x n; the embedding, the
// norms and the LM head stay in the working precision
// (Layer::frozen_quantized; dtsim's blocks, LayerKind::kTransformer). Work: neither library has a 4-bit GEMM for
// training-sized batches: bitsandbytes' MatMul4Bit runs
// F.linear(A, dequantize_4bit(B)) and in its backward grad_output @
// dequantize_4bit(B) (autograd/_functions.py; its newer gemm_4bit falls
// back to dequantize-and-linear past a few rows), torchao's LinearNF4
// F.linear(input, weight.to(dtype)) and grad_output @ weight.to(dtype).
// So each linear GEMM is preceded by a dequantization kernel that reads the
// NF4 weight and writes it whole in the compute dtype, and so is its input
// gradient; a forward recomputed whole (full recompute: PyTorch's activation
// checkpointing, torchtune's and PEFT's) dequantizes again, where Megatron's
// recompute modules are priced without it. Neither saves the
// layer's input (no weight gradient), which dtsim already drops beside
// each adapter (Note [LoRA]). The dequantized weight, a transient of one
// layer's size, is not counted. Tensor and expert parallelism (the 4-bit
// weights are whole) and 8- or 4-bit compute (the GEMMs run in
// bnb_4bit_compute_dtype) are refused. Under FSDP2 the NF4 shards are gathered as they are stored
// (torchao's NF4Tensor.fsdp_pre_all_gather sends its packed data and
// scales), so a gather moves 0.516 bytes a frozen linear weight.
//
// Note [8-bit base]
// An 8-bit LoRA (`peft: lora_int8`; transformers' load_in_8bit, axolotl's
// adapter lora with load_in_8bit) holds the blocks' linear weights as
// bitsandbytes' Linear8bitLt with has_fp16_weights False (Int8Params: CB,
// int8 out x in, and SCB, an fp32 absmax an output row; Dettmers et al.
// 2022, LLM.int8()): 1 byte a weight and 4 an output row. Work: its
// MatMul8bitLt quantizes the input a row at a time, multiplies in int8 with
// the outlier columns (threshold 6) in 16 bits, and dequantizes the int32
// product; its backward multiplies the output's gradient by the weight
// dequantized (CB x SCB / 127) in 16 bits (autograd/_functions.py). dtsim
// prices both as QLoRA's, a dequantization kernel reading the int8 weight
// and its scales before a 16-bit GEMM: bitsandbytes' int8 path, with its
// quantization passes and outliers, is not faster than 16-bit at training
// sizes, so the price is near and not below it. What it saves for the
// backward beyond that is not priced. The same refusals as QLoRA's (tensor
// and expert parallelism, FP8), and FSDP of any strategy: FSDP flattens no
// integer tensor ("Cannot flatten integer dtype tensors"; bitsandbytes'
// 4-bit weights it takes, in bnb_4bit_quant_storage).
//
// Note [fp32 base]
// A model loaded in fp32 and trained under 16-bit autocast (`peft:
// lora_fp32`; TRL's ModelConfig dtype defaults to float32, read at
// f2cd5771, and transformers' Trainer autocasts under bf16) holds every
// frozen weight in 4 bytes: the blocks', the embedding's, the norms' and
// an untied head's. Autocast casts a weight to the compute dtype each time
// a GEMM takes it and caches the cast only for leaf tensors that require
// grad (torch/csrc/autograd/autocast_mode.cpp cached_cast), so each frozen
// weight is cast at every use: a kernel reading 4 bytes a weight and
// writing e before each of the base's GEMMs, again under a recomputed
// forward; and the GEMM saves that 16-bit copy for its input's gradient (e
// bytes a weight kept per micro-batch where nothing is recomputed), which
// the backward uses without casting again. The adapters are fp32 (PEFT's
// autocast_adapter_dtype), dtsim's master copies. What autocast leaves in
// fp32 (the embedding's output, so the residual stream and the norms) is
// priced in the working precision. DeepSpeed casts the whole module to its
// bf16 or fp16 at every stage, and FSDP gathers its shards in 16 bits (its
// param_dtype), which dtsim's sharded frozen weights are not: ZeRO stages
// above 0 and FSDP's sharding strategies are refused beside it (the
// trainers' own readers price such a run as `peft: lora`), and 16-bit
// compute is needed. TRL's chunked loss casts the head's weight itself,
// a chunk at a time (Note [Fused linear cross-entropy]).
//
// Note [Frozen weights]
// A frozen parameter (requires_grad False) gets no gradient, no optimizer
// state, no master copy and no reduction: Megatron-Core's DDP buckets and
// distributed optimizer take only the parameters that require grad
// (distributed_data_parallel.py, _ParamAndGradBuffer over
// param.requires_grad). So a layer's `params` are its trained ones (the
// adapters) and `frozen_params` the base's, which every rank running the
// layer holds whole in the working precision (bf16 under bf16_mixed) and
// no ZeRO stage shards: Megatron's distributed optimizer shards the
// adapters' states and leaves the frozen weights on every rank (so does
// DeepSpeed's ZeRO-1 and -2). FSDP2 shards and gathers them with the
// adapters (Note [Frozen weights under FSDP] in sim/src/lowering/passes/
// sharded_parameters.cpp), and so does DeepSpeed's ZeRO-3, module by
// module (Note [Frozen weights under ZeRO-3] in sim/src/lowering/passes/
// zero3_modules.cpp); FSDP1 is refused beside frozen weights, and the
// search tries FULL_SHARD as FSDP2 alone.
// An FP8 GEMM's frozen weight keeps its FP8 copies as a trained one does
// (Fp8Gemms::frozen_elements in sim/src/lowering/emitter.hpp).
#include <algorithm>
#include <cmath>
#include <map>
#include <memory>
#include <set>
#include <string>
#include <string_view>

#include "dtsim/models/models.hpp"
#include "layers.hpp"

namespace dtsim::models {
namespace {

using namespace detail;

/// How Megatron-Core splits a linear layer over tensor parallelism.
enum class Split { kColumn, kRow, kWhole };

/// A linear layer's kernel as Megatron-Core names its module (Note [LoRA]).
struct Target {
  const char* kernel;  ///< dtsim's forward GEMM ("attn.qkv")
  const char* module;  ///< Megatron-Core's module, as target_modules names it
  Split split;
  /// Transformer Engine's LayerNormColumnParallelLinear: under sequence
  /// parallelism it hands the adapter its gathered input.
  bool norm_fused = false;
};
constexpr Target kTargets[] = {
    {"attn.qkv", "linear_qkv", Split::kColumn, true},
    {"attn.q_proj", "linear_q_proj", Split::kColumn},
    {"attn.q_a_proj", "linear_q_down_proj", Split::kWhole},
    {"attn.q_b_proj", "linear_q_up_proj", Split::kColumn},
    {"attn.kv_a_proj", "linear_kv_down_proj", Split::kWhole},
    {"attn.kv_b_proj", "linear_kv_up_proj", Split::kColumn},
    {"attn.proj", "linear_proj", Split::kRow},
    {"attn.o_proj", "linear_proj", Split::kRow},
    {"mlp.fc1", "linear_fc1", Split::kColumn, true},
    {"mlp.gate_up", "linear_fc1", Split::kColumn, true},
    {"mlp.up", "linear_fc1", Split::kColumn, true},
    {"mlp.fc2", "linear_fc2", Split::kRow},
    {"mlp.down", "linear_fc2", Split::kRow},
    {"moe.shared.gate_up", "linear_fc1", Split::kColumn},
    {"moe.shared.up", "linear_fc1", Split::kColumn},
    {"moe.shared.down", "linear_fc2", Split::kRow},
    {"moe.experts.gate_up", "linear_fc1", Split::kColumn},
    {"moe.experts.up", "linear_fc1", Split::kColumn},
    {"moe.experts.down", "linear_fc2", Split::kRow},
};
/// A Mamba-2 or Gated DeltaNet mixer's projections (dtsim names them as
/// attention's): Megatron-Core's in_proj, norm-fused, and out_proj.
constexpr Target kMixerTargets[] = {
    {"attn.qkv", "in_proj", Split::kColumn, true},
    {"attn.o_proj", "out_proj", Split::kRow},
};

/// HuggingFace PEFT's modules (target_modules over transformers' Llama-style
/// layers; torchtune's lora_attn_modules and apply_lora_to_mlp name the same
/// projections): each one projection of a GEMM dtsim fuses, or a whole one.
struct HfTarget {
  const char* module;  ///< as target_modules names it
  const char* kernel;  ///< dtsim's forward GEMM it is part of
  /// The layer's module (Layer::modules) whose first tensor is its weight,
  /// so whose outputs it computes; "": the whole GEMM.
  const char* part;
  Split split;
};
constexpr HfTarget kHfTargets[] = {
    {"q_proj", "attn.qkv", "attn.qkv", Split::kColumn},
    {"k_proj", "attn.qkv", "attn.k_proj", Split::kColumn},
    {"v_proj", "attn.qkv", "attn.v_proj", Split::kColumn},
    {"o_proj", "attn.o_proj", "", Split::kRow},
    {"gate_proj", "mlp.gate_up", "mlp.gate_up", Split::kColumn},
    {"up_proj", "mlp.gate_up", "mlp.up_proj", Split::kColumn},
    {"up_proj", "mlp.up", "", Split::kColumn},  // a squared-ReLU MLP's
    {"down_proj", "mlp.down", "", Split::kRow},
};
bool is_hf_attention(const HfTarget& t) { return std::string_view(t.kernel).rfind("attn.", 0) == 0; }

/// What a layer mixes its tokens with, as its kernels say.
enum class Mixer { kAttention, kInOut, kUnnamed };
Mixer mixer_of(const sim::Layer& l) {
  for (const sim::Kernel& k : l.forward) {
    if (k.name.rfind("mamba.", 0) == 0 || k.name.rfind("gdn.", 0) == 0) return Mixer::kInOut;
    // Kimi's delta attention: Bridge's q_proj, k_proj, v_proj, ..., o_proj,
    // modules of its own that Megatron-Core's names do not match.
    if (k.name.rfind("kda.", 0) == 0) return Mixer::kUnnamed;
  }
  return Mixer::kAttention;
}

const Target* target_of(const std::string& kernel, Mixer mixer) {
  if (kernel.rfind("attn.", 0) == 0 && mixer != Mixer::kAttention) {
    if (mixer == Mixer::kUnnamed) return nullptr;
    for (const Target& t : kMixerTargets) {
      if (kernel == t.kernel) return &t;
    }
    return nullptr;
  }
  for (const Target& t : kTargets) {
    if (kernel == t.kernel) return &t;
  }
  return nullptr;
}

/// The HuggingFace modules over a layer's GEMM `kernel`: its attention's
/// where the layer attends with Llama's modules (an attn.o_proj GEMM; not
/// GPT-2's or BERT's fused c_attn, not a Mamba-2 or linear-attention
/// mixer), its dense MLP's.
/// One HuggingFace module over a GEMM, and the elements of its part's
/// weight (its first tensor: k x its outputs; 0 where it is the whole GEMM).
struct HfMatch {
  const HfTarget* target;
  std::int64_t weight;
};
std::vector<HfMatch> hf_targets_of(const sim::Layer& L, const std::string& kernel, Mixer mixer) {
  std::vector<HfMatch> out;
  const bool llama_attention =
      mixer == Mixer::kAttention && std::any_of(L.forward.begin(), L.forward.end(), [](const sim::Kernel& k) { return k.name == "attn.o_proj"; });
  for (const HfTarget& t : kHfTargets) {
    if (kernel != t.kernel || (is_hf_attention(t) && !llama_attention)) continue;
    if (*t.part == '\0') {
      out.push_back({&t, 0});
      continue;
    }
    // A part the layer lacks (Gemma 4's shared or value-less layers) adapts nothing there.
    const auto m = std::find_if(L.modules.begin(), L.modules.end(), [&](const sim::ParamModule& p) { return p.name == t.part; });
    if (m != L.modules.end()) out.push_back({&t, m->tensors.front()});
  }
  return out;
}

bool is_expert_kernel(const std::string& name) { return name.rfind("moe.experts.", 0) == 0; }

/// Whether a backward kernel is a weight gradient of one of `gemms` (the
/// forward GEMMs): "NAME.wgrad".
bool is_weight_grad(const sim::Kernel& k, const std::set<std::string>& gemms) {
  constexpr std::string_view kSuffix = ".wgrad";
  if (k.kind != sim::KernelKind::kGemm || !k.name.ends_with(kSuffix)) return false;
  return gemms.count(k.name.substr(0, k.name.size() - kSuffix.size())) > 0;
}

}  // namespace

std::vector<std::string> lora_modules(const sim::Model& model);

namespace {

class Lora final : public sim::Model {
 public:
  Lora(sim::ModelPtr base, LoraConfig c) : base_(std::move(base)), c_(std::move(c)) {
    for (const auto& t : c_.targets) targets_.insert(t);
    // The adapters of the whole model, unsplit.
    const sim::WorkloadShape one;
    for (const sim::Layer& L : layers(one)) adapters_ += L.params;
    // A target no layer has adapts nothing, as Bridge's name matching finds none.
    const std::vector<std::string> present = lora_modules(*base_);
    std::string absent;
    for (const auto& t : c_.targets) {
      if (std::find(present.begin(), present.end(), t) == present.end()) absent += (absent.empty() ? "" : ", ") + t;
    }
    if (!absent.empty()) {
      note_ = base_->name() + ": LoRA's " + absent + " matches no layer of the model, which adapts none there (as Megatron-Bridge's "
              "target_modules finds none)";
    }
  }

  std::string name() const override {
    return base_->name() + (c_.base == LoraConfig::Base::kNf4 ? "+qlora" : "+lora") + std::to_string(c_.rank) +
           (c_.base == LoraConfig::Base::kInt8 ? "-int8" : c_.base == LoraConfig::Base::kFp32 ? "-fp32" : "");
  }
  std::int64_t parameters() const override { return base_->parameters() + adapters_; }
  std::int64_t trainable_parameters() const override { return adapters_; }
  std::int64_t active_parameters() const override { return base_->active_parameters() + adapters_; }
  int blocks() const override { return base_->blocks(); }
  std::int64_t max_seq_len() const override { return base_->max_seq_len(); }
  std::int64_t min_seq_len() const override { return base_->min_seq_len(); }
  bool has_batch_norm() const override { return base_->has_batch_norm(); }
  bool runs_cublas() const override { return base_->runs_cublas(); }
  std::vector<std::string> notes() const override {
    std::vector<std::string> out = base_->notes();
    if (!note_.empty()) out.push_back(note_);
    return out;
  }
  int layer_count() const override { return base_->layer_count(); }
  std::string tp_error(int tp) const override {
    if (std::string why = base_->tp_error(tp); !why.empty()) return why;
    // Note [QLoRA]: bitsandbytes' Linear4bit and torchao's NF4Tensor are whole weights.
    if (tp > 1 && c_.base == LoraConfig::Base::kNf4) {
      return "QLoRA's 4-bit base (bitsandbytes' Linear4bit, torchao's NF4Tensor) is not split over tensor parallelism; valid: tp 1";
    }
    if (tp > 1 && c_.base == LoraConfig::Base::kInt8) {
      return "an 8-bit base (bitsandbytes' Linear8bitLt) is not split over tensor parallelism; valid: tp 1";
    }
    // HuggingFace PEFT's adapters are plain nn.Linear pairs, not split.
    if (tp > 1 && std::any_of(c_.targets.begin(), c_.targets.end(), lora_hf_module)) {
      return "HuggingFace PEFT's modules (q_proj, ..., down_proj) are adapted unsplit, without tensor parallelism; valid: tp 1, "
             "or Megatron-Core's module names (linear_qkv, linear_proj, linear_fc1, linear_fc2)";
    }
    // ParallelLinearAdapter's column-parallel A divides the rank over tp.
    if (tp > 1 && c_.rank % tp != 0) {
      return "LoRA's rank " + std::to_string(c_.rank) + " does not split over " + std::to_string(tp) +
             " ranks (Megatron-Bridge's column-parallel adapter divides it)";
    }
    return "";
  }
  std::string cp_error(int cp, int tp) const override { return base_->cp_error(cp, tp); }
  bool cp_all_gather_only() const override { return base_->cp_all_gather_only(); }
  int experts() const override { return base_->experts(); }
  int top_k() const override { return base_->top_k(); }
  bool grouped_kv_sdpa() const override { return base_->grouped_kv_sdpa(); }
  std::string pp_error(int pp) const override { return base_->pp_error(pp); }
  std::string ep_error(int ep) const override {
    if (std::string why = base_->ep_error(ep); !why.empty()) return why;
    // Note [QLoRA]: the 4-bit experts are whole weights too.
    if (ep > 1 && c_.base != LoraConfig::Base::k16) {
      return "a quantized base's experts (bitsandbytes', torchao's) are not spread over expert parallelism; valid: ep 1";
    }
    return "";
  }

  Flops model_flops(const sim::WorkloadShape& shape) const override {
    // Note [LoRA]: the base's, less the frozen weights' gradients, plus the adapters'.
    Flops f = base_->model_flops(shape);
    for (const sim::Layer& L : base_->layers(shape)) {
      const std::set<std::string> gemms = gemm_names(L);
      for (const sim::Kernel& k : L.backward) {
        if (is_weight_grad(k, gemms)) f -= k.flops * static_cast<double>(k.repeat);
      }
      for (const Adapter& a : adapters_of(L, shape)) {
        for (const auto* ks : {&a.forward, &a.backward}) {
          for (const sim::Kernel& k : *ks) f += k.flops * static_cast<double>(k.repeat);
        }
      }
    }
    return f;
  }

  std::vector<sim::Layer> layers(const sim::WorkloadShape& shape) const override {
    std::vector<sim::Layer> out = base_->layers(shape);
    for (sim::Layer& L : out) adapt(L, shape);
    return out;
  }

 private:
  /// One adapter beside a targeted GEMM: its kernels, what it adds to the
  /// layer's collectives and saved bytes, and its parameters on this rank.
  struct Adapter {
    std::string base;  ///< the GEMM it adapts
    std::vector<sim::Kernel> forward, backward;
    std::vector<sim::LayerComm> tp_forward, tp_backward;
    Bytes saved_delta = 0;
    std::int64_t params = 0, largest = 0;
    std::int64_t a_elements = 0, b_elements = 0;  ///< A's and B's on this rank (params = their sum)
    std::string a_name, b_name;                   ///< their GEMMs' names: the modules lora_A and lora_B
    std::string part;                             ///< the base module it adapts; "": the whole GEMM `base`
    bool expert = false;
  };

  static std::set<std::string> gemm_names(const sim::Layer& L) {
    std::set<std::string> out;
    for (const sim::Kernel& k : L.forward) {
      if (k.kind == sim::KernelKind::kGemm) out.insert(k.name);
    }
    return out;
  }

  std::vector<Adapter> adapters_of(const sim::Layer& L, const sim::WorkloadShape& shape) const {
    std::vector<Adapter> out;
    const std::int64_t r = c_.rank;
    const int e = shape.act_bytes;
    const Mixer mixer = mixer_of(L);
    for (const sim::Kernel& f : L.forward) {
      if (f.kind != sim::KernelKind::kGemm) continue;
      // What adapts this GEMM: Megatron-Core's module, whole, or
      // HuggingFace's, each its projection's outputs.
      struct Spec {
        std::string label;  ///< "" (Megatron's, the whole GEMM) or the HuggingFace module
        Split split;
        bool norm_fused;
        std::int64_t out_rank;  ///< this rank's output width
        std::string part = "";  ///< the layer's module it adapts (HfTarget::part); "": the whole GEMM
      };
      std::vector<Spec> specs;
      if (const Target* t = target_of(f.name, mixer); t != nullptr && targets_.count(t->module) > 0) {
        specs.push_back({"", t->split, t->norm_fused, f.n});
      }
      for (const HfMatch& h : hf_targets_of(L, f.name, mixer)) {
        if (targets_.count(h.target->module) == 0) continue;
        specs.push_back({h.target->module, h.target->split, false, h.weight > 0 ? h.weight / f.k : f.n, h.target->part});
      }
      bool first = true;  // the base's saved input is replaced once, by the first adapter's
      for (const Spec& spec : specs) {
        Adapter a;
        a.base = f.name;
        a.expert = is_expert_kernel(f.name);
        const std::int64_t n = a.expert ? std::max(1, shape.etp) : std::max(1, shape.tp);
        const bool sp = shape.sequence_parallel && !a.expert && n > 1;
        const bool row = spec.split == Split::kRow;
        // The layer's whole input and output widths, from this rank's GEMM
        // (m tokens: all of them after a column layer's gather).
        const std::int64_t m = f.m, batch = f.batch;
        const std::int64_t in = row ? f.k * n : f.k;
        const std::int64_t out_w = spec.split == Split::kColumn ? spec.out_rank * n : spec.out_rank;
        // This rank's A (in_a x r_a) and B (r x out_b): A row-parallel beside
        // a row-parallel layer, else column-parallel over the rank; B
        // column-parallel (ParallelLinearAdapter).
        const std::int64_t in_a = row ? in / n : in, r_a = row ? r : r / n, out_b = out_w / n;
        const std::string name = spec.label.empty() ? f.name : f.name + "." + spec.label;
        const sim::Kernel ka = gemm(name + ".lora_a", m, r_a, in_a, e, batch);
        const sim::Kernel kb = gemm(name + ".lora_b", m, out_b, r, e, batch);
        a.forward = {ka, kb};
        a.backward = backward_of(a.forward);
        a.params = in_a * r_a + r * out_b;
        a.largest = std::max(in_a * r_a, r * out_b);
        a.a_elements = in_a * r_a;
        a.b_elements = r * out_b;
        a.a_name = ka.name;
        a.b_name = kb.name;
        a.part = spec.part;
        // Kept: A's input and output in place of the base's saved input
        // (Transformer Engine keeps it only for the frozen weight's gradient,
        // and autograd's mm saves no input for a weight that needs no
        // gradient); beside a column-parallel layer under sequence
        // parallelism, A's input gathered where the base keeps its sequence
        // shard. Adapters over one GEMM's projections share its input.
        const std::int64_t base_rows = sp && spec.split == Split::kColumn ? m / n : m;
        a.saved_delta = static_cast<Bytes>(e) * batch * m * r;
        if (first) a.saved_delta += static_cast<Bytes>(e) * batch * m * in_a - shape.saved_gemm_input(batch * base_rows * f.k);
        first = false;
        if (n > 1 && !a.expert) {
          // Plain NCCL calls, serial beside whatever userbuffers overlap.
          const Bytes x = static_cast<Bytes>(e) * m * in, y = static_cast<Bytes>(e) * m * out_w, z = static_cast<Bytes>(e) * m * r;
          using sim::CollectiveOp;
          auto fwd = [&](CollectiveOp op, Bytes b) { a.tp_forward.push_back({op, b, 1, sim::Axis::kTp, true}); };
          auto bwd = [&](CollectiveOp op, Bytes b) { a.tp_backward.push_back({op, b, 1, sim::Axis::kTp, true}); };
          if (spec.split == Split::kColumn) {
            // Under sequence parallelism Transformer Engine's norm-fused
            // layer hands A its gathered input (return_layernorm_output_
            // gathered) unless its userbuffers gather it; else the adapter
            // gathers it itself (gather_from_sequence_parallel_region).
            const bool gathers = sp && (!spec.norm_fused || shape.tp_comm_overlap);
            if (gathers) fwd(CollectiveOp::kAllGather, x);
            fwd(CollectiveOp::kAllGather, z);  // A's gather_output
            bwd(CollectiveOp::kAllReduce, z);  // B's input gradient
            if (gathers) bwd(CollectiveOp::kReduceScatter, x);
            if (!sp) bwd(CollectiveOp::kAllReduce, x);  // A's input gradient
          } else if (row) {
            fwd(CollectiveOp::kAllReduce, z);  // A's row-parallel output
            fwd(CollectiveOp::kAllGather, y);  // B's gather_output
            bwd(CollectiveOp::kAllReduce, z);
            if (sp) bwd(CollectiveOp::kAllGather, y);  // the output split over the sequence, backward
          } else {
            // Beside a layer Megatron does not split (TELinear, duplicated):
            // both column-parallel, both outputs gathered.
            fwd(CollectiveOp::kAllGather, z);
            fwd(CollectiveOp::kAllGather, y);
            bwd(CollectiveOp::kAllReduce, z);
            if (!sp) bwd(CollectiveOp::kAllReduce, x);
          }
        }
        out.push_back(std::move(a));
      }
    }
    return out;
  }

  /// Where adapter `a`'s modules go in L.modules, as PEFT's LoraLayer runs
  /// them: after the base module it adapts (HfTarget::part) and the
  /// adapters already there; for a whole GEMM, after the module that runs
  /// the kernels before A's (as the ZeRO-3 pass reads a module's share:
  /// its kernels from the one its name names to the next module's) and the
  /// base modules of the same GEMM that run no kernel of their own (a fused
  /// q, k, v GEMM's k_proj and v_proj).
  static std::size_t module_slot(const sim::Layer& L, const Adapter& a) {
    const auto named = [&](const std::string& n) {
      return std::any_of(L.forward.begin(), L.forward.end(), [&](const sim::Kernel& k) { return k.name == n; });
    };
    std::size_t at = 0;
    bool found = false;
    if (!a.part.empty()) {
      for (std::size_t j = 0; j < L.modules.size(); ++j) {
        if (L.modules[j].name == a.part) at = j + 1, found = true;
      }
    }
    if (!found) {
      for (const sim::Kernel& k : L.forward) {
        if (k.name == a.a_name) break;
        for (std::size_t j = found ? at - 1 : 0; j < L.modules.size(); ++j) {
          if (L.modules[j].name == k.name) {
            at = j + 1;
            found = true;
            break;
          }
        }
      }
      while (found && a.part.empty() && at < L.modules.size() && L.modules[at].frozen && !named(L.modules[at].name)) ++at;
    }
    while (at < L.modules.size() && !L.modules[at].frozen) ++at;  // after the adapters already there
    return at;
  }

  void adapt(sim::Layer& L, const sim::WorkloadShape& shape) const {
    const std::vector<Adapter> adapters = adapters_of(L, shape);
    const std::set<std::string> gemms = gemm_names(L);
    // Note [Frozen weights]: the base's parameters, a tied head's copy too.
    L.frozen_params = L.params + L.borrowed_params;
    L.frozen_tied = L.borrowed_params;
    L.params = L.expert_params = L.sp_params = L.borrowed_params = 0;
    L.param_tensors = 0;
    L.largest_param_tensor = 0;
    // The base's modules stay, frozen; each adapter's lora_A and lora_B
    // follow the module of the GEMM they adapt, as PEFT's LoraLayer runs
    // base_layer, then lora_A, then lora_B (Note [Frozen weights under
    // ZeRO-3] in sim/src/lowering/passes/zero3_modules.cpp).
    for (sim::ParamModule& m : L.modules) m.frozen = true;
    L.signature += (c_.base == LoraConfig::Base::kNf4    ? ",qlora="
                    : c_.base == LoraConfig::Base::kInt8 ? ",lora8="
                    : c_.base == LoraConfig::Base::kFp32 ? ",lora32="
                                                         : ",lora=") +
                   std::to_string(c_.rank);
    const bool fp32_base = c_.base == LoraConfig::Base::kFp32;
    // TRL's chunked loss makes its head's weight ready itself, a chunk at a
    // time (Note [Fused linear cross-entropy]).
    const bool chunked_fp32 = shape.loss_kernel == sim::LossKernel::kChunkedNllFp32;
    const bool chunked = L.kind == sim::LayerKind::kLmHead && detail::fused_lm_loss(shape) &&
                         (shape.loss_kernel == sim::LossKernel::kChunkedNll || chunked_fp32);
    std::string loss_gemm;  // the chunked loss's projection, named by its weight's cast
    if (chunked) {
      for (const sim::Kernel& k : L.forward) {
        if (k.name.ends_with(".wcast")) loss_gemm = k.name.substr(0, k.name.size() - 6);
      }
    }
    if (fp32_base) {
      // Note [fp32 base]: every frozen weight in 4 bytes, the embedding's too.
      L.frozen_quantized = L.frozen_params - L.frozen_tied;
      L.frozen_quantized_bits = 32;
      L.frozen_quantized_bytes = 4 * L.frozen_quantized;
    }
    for (const auto& t : c_.targets) L.signature += ":" + t;
    if (L.kind == sim::LayerKind::kEmbedding) {
      // Frozen and first: nothing to differentiate, nothing to reduce.
      L.backward.clear();
      L.tp_backward.clear();
      L.cp_backward.clear();
      return;
    }
    // Note [QLoRA], Note [8-bit base]: a block's linear weights in NF4 or
    // LLM.int8, each dequantized before its GEMM and again before its
    // input's gradient.
    const bool quantized = c_.base != LoraConfig::Base::k16 && !fp32_base && L.is_block();
    std::map<std::string, sim::Kernel> dequant;  // by forward GEMM
    std::map<std::string, sim::Kernel> cast;     // by forward GEMM (Note [fp32 base])
    if (fp32_base) {
      for (const sim::Kernel& k : L.forward) {
        // A weight's GEMM, not a fused loss's gradient GEMMs, nor a chunked
        // loss's, which casts for itself.
        if (k.kind != sim::KernelKind::kGemm || k.name.ends_with(".dgrad") || k.name.ends_with(".wgrad") || (chunked && k.name == loss_gemm)) continue;
        const std::int64_t w = k.k * k.n * std::max<std::int64_t>(1, k.batch);
        const Bytes e = shape.act_bytes;
        cast.emplace(k.name, memory_op(k.name + ".cast", sim::KernelKind::kElementwise, 4 * w, e * w, static_cast<double>(w)));
        L.saved_bytes += e * w;  // the 16-bit copy the GEMM keeps for its input's gradient
      }
    }
    if (quantized) {
      std::int64_t elements = 0;
      Bytes stored = 0;
      for (const sim::Kernel& k : L.forward) {
        if (k.kind != sim::KernelKind::kGemm) continue;
        const std::int64_t batch = std::max<std::int64_t>(1, k.batch);
        const std::int64_t w = k.k * k.n * batch;
        // NF4 with its block scales; int8 with an fp32 scale an output row (SCB).
        const Bytes bytes = c_.base == LoraConfig::Base::kNf4 ? static_cast<Bytes>(std::ceil(static_cast<double>(w) * sim::kNf4BytesPerElement))
                                                              : w + 4 * k.n * batch;
        elements += w;
        stored += c_.base == LoraConfig::Base::kNf4 ? 0 : bytes;
        const Bytes e = shape.act_bytes;
        dequant.emplace(k.name, memory_op(k.name + ".dequant", sim::KernelKind::kElementwise, bytes, e * w, 2.0 * static_cast<double>(w)));
      }
      L.frozen_quantized = std::min(elements, L.frozen_params - L.frozen_tied);
      L.frozen_quantized_bits = c_.base == LoraConfig::Base::kNf4 ? 4 : 8;
      // NF4 counted over the layer's weights at once; int8's row scales in
      // proportion where fewer weights are frozen than the GEMMs hold.
      L.frozen_quantized_bytes =
          c_.base == LoraConfig::Base::kNf4 ? static_cast<Bytes>(std::ceil(static_cast<double>(L.frozen_quantized) * sim::kNf4BytesPerElement))
          : L.frozen_quantized == elements  ? stored
          : elements > 0                    ? static_cast<Bytes>(static_cast<__int128>(stored) * L.frozen_quantized / elements)
                                            : 0;
    }
    std::vector<sim::Kernel> backward;
    for (const sim::Kernel& k : L.backward) {
      // A frozen weight's gradient, or a frozen table's rows (a multi-token
      // prediction depth's embedding: its scatter-add); Liger's scaling of
      // its head's weight gradient (Note [Fused linear cross-entropy]).
      if (is_weight_grad(k, gemms) && chunked &&
          L.backward_workspace_bytes == chunked_nll_workspace(k.k, k.m, k.n, shape.act_bytes, chunked_fp32, shape.fp32_weights, true)) {
        // TRL's chunked loss over a frozen head: no gradient arrives a chunk
        // at a time, and the base holds its weight (Note [Fused linear cross-entropy]).
        L.backward_workspace_bytes = chunked_nll_workspace(k.k, k.m, k.n, shape.act_bytes, chunked_fp32, fp32_base, false);
      }
      if (is_weight_grad(k, gemms) || k.kind == sim::KernelKind::kEmbedding) continue;
      if (k.name.ends_with(".wgrad.scale") && gemms.count(k.name.substr(0, k.name.size() - 12)) > 0) continue;
      if (k.name.ends_with(".dgrad")) {
        if (const auto d = dequant.find(k.name.substr(0, k.name.size() - 6)); d != dequant.end()) backward.push_back(d->second);
      }
      backward.push_back(k);
      // The adapter's backward after its layer's dgrad.
      for (const Adapter& a : adapters) {
        if (k.name == a.base + ".dgrad") backward.insert(backward.end(), a.backward.begin(), a.backward.end());
      }
    }
    std::vector<sim::Kernel> forward;
    std::vector<std::size_t> moved(L.forward.size() + 1);  // each base kernel's new index
    for (std::size_t i = 0; i < L.forward.size(); ++i) {
      const sim::Kernel& k = L.forward[i];
      moved[i] = forward.size();
      // Liger's fused loss makes the weight's gradient in the forward and
      // keeps it (Note [Fused linear cross-entropy]); a frozen head has none.
      if (is_weight_grad(k, gemms)) {
        // It keeps no gradient (e v h) and makes no product of one with its
        // fp32 copy: its workspace is the frozen head's where Liger's set it
        // (not where a larger one, a decoder's recurrence, did). The wgrad
        // GEMM is (v x t) x (t x h): m = v, n = h, k = t.
        const int e = shape.act_bytes;
        L.saved_bytes -= static_cast<Bytes>(e) * k.m * k.n;
        if (L.backward_workspace_bytes == liger_workspace(k.k, k.m, k.n, e, true)) {
          L.backward_workspace_bytes = liger_workspace(k.k, k.m, k.n, e, false);
        }
        continue;
      }
      if (const auto d = dequant.find(k.name); d != dequant.end()) forward.push_back(d->second);
      if (const auto c = cast.find(k.name); c != cast.end()) forward.push_back(c->second);
      forward.push_back(k);
      for (const Adapter& a : adapters) {
        if (k.name == a.base) forward.insert(forward.end(), a.forward.begin(), a.forward.end());
      }
    }
    moved[L.forward.size()] = forward.size();
    // An offload group spans the adapters of the layers inside it (Note
    // [Offload modules]: its kernels by index).
    for (sim::OffloadGroup& g : L.offload_groups) {
      g.first = moved[std::min(g.first, L.forward.size())];
      g.end = moved[std::min(g.end, L.forward.size())];
    }
    L.forward = std::move(forward);
    L.backward = std::move(backward);
    if (chunked) {
      // A frozen weight's cast is cached for no pass: a chunk at a time in
      // both, from the base's own storage (Note [Fused linear cross-entropy]).
      const Bytes prep = chunked_nll_prep_bytes(shape.act_bytes, chunked_fp32, fp32_base);
      std::int64_t chunks = 1;
      for (const sim::Kernel& k : L.backward) chunks = k.name.ends_with(".wcast.recompute") ? k.repeat : chunks;
      for (auto* ks : {&L.forward, &L.backward}) {
        for (sim::Kernel& k : *ks) {
          if (!k.name.ends_with(".wcast") && !k.name.ends_with(".wcast.recompute")) continue;
          k.bytes = prep * static_cast<Bytes>(k.flops);  // its flops are v h, one a weight
          k.repeat = chunks;
        }
      }
    }
    for (const Adapter& a : adapters) {
      const std::size_t at = module_slot(L, a);
      L.modules.insert(L.modules.begin() + static_cast<std::ptrdiff_t>(at),
                       {sim::ParamModule{a.a_name, {a.a_elements}, "", false}, sim::ParamModule{a.b_name, {a.b_elements}, "", false}});
      L.params += a.params;
      if (a.expert) L.expert_params += a.params;
      L.param_tensors += 2;
      L.largest_param_tensor = std::max(L.largest_param_tensor, a.largest);
      L.saved_bytes += a.saved_delta;
      L.tp_forward.insert(L.tp_forward.end(), a.tp_forward.begin(), a.tp_forward.end());
      L.tp_backward.insert(L.tp_backward.end(), a.tp_backward.begin(), a.tp_backward.end());
    }
    L.saved_bytes = std::max<Bytes>(0, L.saved_bytes);
  }

  sim::ModelPtr base_;
  LoraConfig c_;
  std::set<std::string> targets_;
  std::int64_t adapters_ = 0;
  std::string note_;
};

}  // namespace

std::vector<std::string> lora_modules(const sim::Model& model) {
  std::set<std::string> seen;
  std::vector<std::string> out;
  std::vector<std::string> hf;  // HuggingFace's after Megatron-Core's
  for (const sim::Layer& L : model.shared_layers(sim::WorkloadShape{})) {
    const Mixer mixer = mixer_of(L);
    for (const sim::Kernel& k : L.forward) {
      if (k.kind != sim::KernelKind::kGemm) continue;
      const Target* t = target_of(k.name, mixer);
      if (t != nullptr && seen.insert(t->module).second) out.emplace_back(t->module);
      for (const HfMatch& h : hf_targets_of(L, k.name, mixer)) {
        if (seen.insert(h.target->module).second) hf.emplace_back(h.target->module);
      }
    }
  }
  // HuggingFace's names on a mixture of experts are not modelled (Note [LoRA]).
  if (model.experts() == 0) out.insert(out.end(), hf.begin(), hf.end());
  return out;
}

bool lora_hf_module(const std::string& module) {
  return std::any_of(std::begin(kHfTargets), std::end(kHfTargets), [&](const HfTarget& t) { return module == t.module; });
}

sim::ModelPtr make_lora(sim::ModelPtr base, const LoraConfig& c) { return std::make_shared<Lora>(std::move(base), c); }

}  // namespace dtsim::models
