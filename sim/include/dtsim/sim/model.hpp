#pragma once
// The analytic description of a model as the simulator sees it: a sequence of
// layers, each with its parameters, its kernels (GEMM shapes, attention,
// element-wise and normalisation ops with the bytes they move), and the bytes
// it keeps for backward. Concrete architectures (GPT-2, BERT, Bi-LSTM, generic
// GPT) live in models/ and implement sim::Model; the simulator depends only on
// this interface.

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "dtsim/sim/mesh.hpp"
#include "dtsim/sim/units.hpp"

namespace dtsim::sim {

/// What a kernel does; picks the efficiency model that costs it.
enum class KernelKind {
  kGemm,         ///< dense matrix multiply, compute-bound when large
  kAttention,    ///< batched QK^T / AV matmuls of attention (also GEMM-like)
  kElementwise,  ///< memory-bound: GeLU, dropout, residual add, bias, optimizer
  kNorm,         ///< LayerNorm and softmax: memory-bound reductions
  kEmbedding,    ///< gather / scatter-add of embedding rows
  kRecurrent,    ///< one sequential LSTM time step (small GEMM + gates)
};

/// Collective operations, named as NCCL names them (all-to-all as
/// nccl-tests' alltoall_perf runs it: every rank sends a 1/n share of its
/// buffer to each rank).
enum class CollectiveOp { kAllReduce, kReduceScatter, kAllGather, kBroadcast, kSendRecv, kAllToAll };

/// How the LM head's projection and cross-entropy run (Note [Fused linear
/// cross-entropy] in models/src/layers.cpp): PyTorch's GEMM then
/// F.cross_entropy over the whole logits; Liger's
/// LigerFusedLinearCrossEntropyLoss (the gradients made chunk by chunk in
/// the forward); Apple's Cut Cross-Entropy (no logits kept, recomputed in
/// blocks by the backward).
enum class LossKernel { kCrossEntropy, kLigerFused, kCutCrossEntropy, kChunkedNll, kChunkedNllFp32 };

/// What a layer is, for the strategies that treat kinds apart (full
/// recompute checkpoints blocks, a pipeline places the embedding first).
enum class LayerKind { kOther, kEmbedding, kTransformer, kLstm, kPooler, kHead, kLmHead };
/// Bytes an element of a 4-bit NormalFloat weight takes, with its
/// double-quantized block scales (Dettmers et al. 2023, QLoRA, Section 3;
/// bitsandbytes' quantize_4bit with compress_statistics, torchao's
/// NF4Tensor): 4 bits, an 8-bit absmax a block of 64, an fp32 scale a
/// block of 256 of those.
inline constexpr double kNf4BytesPerElement = 0.5 + 1.0 / 64 + 4.0 / (64 * 256);
/// Bytes of `frozen` frozen weight elements: `quantized` of them stored in
/// 4 or 8 bits, taking `quantized_bytes` with their scales, the rest `w`
/// bytes each (Layer::frozen_quantized, Layer::frozen_quantized_bytes).
Bytes frozen_weight_bytes(std::int64_t frozen, std::int64_t quantized, Bytes quantized_bytes, Bytes w);

/// "other", "embedding", "transformer", "lstm", "pooler", "head", "lm_head".
const char* to_string(LayerKind kind);

/// The name of a kernel kind ("gemm", "attention", ...).
const char* to_string(KernelKind kind);

/// How sequence parallelism's collectives overlap the GEMMs beside them
/// where PlanSpec::tp_comm_overlap is on (PlanSpec::tp_comm_overlap_cfg;
/// Note [Userbuffers' chunks] in models/src/layers.cpp): `ring`, every such
/// GEMM as tp chunks on all SMs (Transformer Engine's ring exchange, as
/// Megatron-Bridge's FP8 configurations run it); `te`, Transformer Engine's
/// own defaults (Megatron-LM's --tp-comm-overlap without
/// --tp-comm-overlap-cfg): the output projections in 4 pipelined chunks and
/// the bulk overlaps beside 16 SMs kept for the collectives; `async_tp`,
/// torch's AsyncTP (torchtitan): the dgrads of the column-parallel GEMMs in
/// chunks too.
enum class TpOverlapCfg { kRing, kTe, kAsyncTp };
/// "ring", "te", "async_tp".
const char* to_string(TpOverlapCfg c);

/// One kernel (or `repeat` identical back-to-back launches of it).
struct Kernel {
  std::string name;              ///< e.g. "attn.qkv", "mlp.fc1"
  KernelKind kind = KernelKind::kElementwise;
  std::int64_t m = 0, n = 0, k = 0;  ///< GEMM shape: (m,k) x (k,n), `batch` of them
  std::int64_t batch = 1;
  Flops flops = 0;               ///< floating-point ops of one launch
  Bytes bytes = 0;               ///< bytes read + written by one launch
  std::int64_t repeat = 1;       ///< sequential launches (LSTM time steps)
  /// A GEMM that Transformer Engine's userbuffers run as `splits` GEMMs of
  /// m / splits rows, one after another, each chunk's rows moving over the
  /// tensor-parallel group while the one before multiplies (Note
  /// [Userbuffers' chunks] in models/src/layers.cpp): priced as that many
  /// chunks, its FP8 cast once. 1: one GEMM.
  std::int64_t splits = 1;
  /// SMs kept from a GEMM for the collectives beside it (Transformer
  /// Engine's set_sm_margin): it runs on the rest. 0: all of them.
  int sm_margin = 0;
  /// Part of the attention a context-parallel ring overlaps its K/V
  /// exchange with (Layer::cp_forward, cp_backward).
  bool cp_overlap = false;
  /// A fused attention kernel (FlashAttention, SDPA's flash path): priced
  /// at the device's attention efficiency, not as a batched GEMM.
  bool fused = false;
  /// Runs in fp32 whatever the plan's precision (TRL's chunked loss without
  /// autocast: Note [Fused linear cross-entropy] in models/src/layers.cpp).
  bool fp32 = false;
};

// Note [Recompute modules]
// Megatron-Core's selective recompute reruns the modules its
// --recompute-modules lists (TransformerConfig.recompute_modules, default
// ["core_attn"]; megatron/core/transformer/transformer_config.py). Each
// wraps a part of a block in CheckpointWithoutOutput or checkpoint: the
// part's input stays (the checkpoint keeps it), what the part's autograd
// would save is not kept, and its output's storage is freed once the next
// module has consumed it (discard_output_and_register_recompute), to be
// refilled by running the part again just before the backward needs it.
// dtsim prices each as a part of Layer::attention_core and
// attention_core_bytes (the bytes it frees, the forward kernels it reruns),
// as the models describe them (Note [Megatron's recompute modules] in
// models/src/llama.cpp). "moe" reruns the whole MoE layer, its
// expert-parallel all-to-alls with it (Layer::recompute_ep), serial on the
// compute stream as the forward's are; Megatron-Core refuses it beside
// --overlap-moe-expert-parallel-comm, and so does dtsim.

/// Megatron-Core's recompute_modules, as bits of a mask.
enum RecomputeModule : std::uint8_t {
  kRecomputeCoreAttn = 1,        ///< "core_attn": the attention core (Korthikanti et al. 2022)
  kRecomputeLayernorm = 2,       ///< "layernorm": the norms Megatron's TE spec keeps as modules
  kRecomputeMoeAct = 4,          ///< "moe_act": the experts' activation
  kRecomputeMlaUpProj = 8,       ///< "mla_up_proj": MLA's up-projections and RoPE
  kRecomputeMlp = 16,            ///< "mlp": a dense block's whole MLP
  kRecomputeSharedExperts = 32,  ///< "shared_experts": the shared experts' MLP
  kRecomputeMoe = 64,            ///< "moe": the whole MoE layer, its all-to-alls with it
  /// "mhc": the hyper-connections' aggregates, the norms after them and
  /// h_post_bda's streams (Note [Hyper-connections] in models/src/llama.cpp)
  kRecomputeMhc = 128,
};
/// Megatron-Core's default: the attention core alone.
inline constexpr std::uint8_t kRecomputeModulesDefault = kRecomputeCoreAttn;
/// Every module's name, in the bits' order ("core_attn", "layernorm", ...).
const std::vector<std::string>& recompute_module_names();
/// "core_attn, moe_act" for a mask; "" for none.
std::string recompute_modules_string(std::uint8_t modules);
/// The bit of a module Megatron-Core names ("moe_act"); 0 for any other word.
std::uint8_t recompute_module_of(const std::string& name);

// Note [Offload modules]
// Megatron-Core's fine-grained activation offloading (TransformerConfig.
// fine_grained_activation_offloading, offload_modules; megatron/core/
// pipeline_parallel/fine_grained_activation_offload.py) wraps parts of a
// block in offload groups: what autograd saves inside a group (parameters
// apart, and tensors of fewer than min_offloaded_tensor_size elements) is
// copied to pinned host memory as the group ends and back before its
// backward. A model describes, for each group its layers have, the
// tensors saved inside it and the forward kernels it spans
// (Layer::offload_groups); the lowering decides which groups go (Note
// [Fine-grained offload] in sim/src/lowering/passes/fine_grained_offload.cpp).

/// Megatron-Core's offload_modules, as bits of a mask.
enum OffloadModule : std::uint16_t {
  kOffloadAttnNorm = 1,         ///< "attn_norm": the attention's input norm, where it is a module of its own
  kOffloadQkvLinear = 2,        ///< "qkv_linear": the QKV projection (its fused norm with it)
  kOffloadCoreAttn = 4,         ///< "core_attn": the attention core
  kOffloadAttnProj = 8,         ///< "attn_proj": the output projection
  kOffloadMlpNorm = 16,         ///< "mlp_norm": the MLP's input norm, where it is a module of its own
  kOffloadExpertFc1 = 32,       ///< "expert_fc1": the routed experts' first GEMM
  kOffloadMoeAct = 64,          ///< "moe_act": the routed experts' activation
  kOffloadFusedGroupMlp = 128,  ///< "fused_group_mlp": the routed experts' fused MLP
  kOffloadGdpQkv = 256,         ///< "gdp_qkv": a GatedDeltaProduct mixer's convolution and QKV
};
/// Every module's name, in the bits' order ("attn_norm", "qkv_linear", ...).
const std::vector<std::string>& offload_module_names();
/// "core_attn, attn_proj" for a mask; "" for none.
std::string offload_modules_string(std::uint16_t modules);
/// The bit of a module Megatron-Core names; 0 for any other word.
std::uint16_t offload_module_of(const std::string& name);

/// A tensor autograd saves: its elements and bytes.
struct SavedTensor {
  std::int64_t elements = 0;
  Bytes bytes = 0;
};
/// One of a layer's fine-grained offload groups (Note [Offload modules]).
struct OffloadGroup {
  std::uint16_t module = 0;          ///< an OffloadModule bit
  std::size_t first = 0, end = 0;    ///< the forward kernels it spans: Layer::forward[first, end)
  std::vector<SavedTensor> tensors;  ///< what is saved inside it, per micro-batch
};

/// The shape of the work a layer is asked to describe.
struct WorkloadShape {
  std::int64_t micro_batch = 1;  ///< sequences per micro-batch (b)
  std::int64_t seq_len = 1;      ///< tokens per sequence (s)
  /// Tokens per document where each sequence packs documents (THD, varlen
  /// attention: Note [Packed sequences] in models/src/layers.cpp); 0: one
  /// document a sequence.
  std::int64_t document_len = 0;
  /// The LM head's cross-entropy over this many chunks of the sequence
  /// (PlanSpec::loss_chunks; Note [Chunked loss] in models/src/layers.cpp).
  std::int64_t loss_chunks = 1;
  /// The LM head's projection and loss fused (PlanSpec::loss_kernel; Note
  /// [Fused linear cross-entropy] in models/src/layers.cpp).
  LossKernel loss_kernel = LossKernel::kCrossEntropy;
  int act_bytes = 4;             ///< bytes per activation element: 2 (fp16/bf16) or 4 (fp32)
  /// The trained weights the forward multiplies are held in fp32: autocast
  /// over fp32 parameters (the plan's master copies, unsharded), or fp32
  /// itself; false: 16-bit ones (no master copies, DeepSpeed's 16-bit
  /// module, FSDP's gathered param_dtype). Read by TRL's chunked loss alone
  /// (Note [Fused linear cross-entropy] in models/src/layers.cpp).
  bool fp32_weights = true;
  /// Bytes per element of a saved dropout mask: 1 where dropout keeps a bool
  /// mask (fused CUDA kernels), the activation size where it multiplies by a
  /// mask tensor of the input's dtype (LibTorch's CPU dropout).
  int mask_bytes = 1;
  /// The LSTM runs as one fused kernel keeping a reserve space (cuDNN), or
  /// false: as ATen's composite cell, whose autograd saves every time step's
  /// tensors (LibTorch on CPU; Note [LSTM memory] in models/src/bilstm.cpp).
  bool fused_rnn = true;
  int tp = 1;                    ///< tensor-parallel degree (Megatron-LM column/row split)
  /// Batch norm syncs its statistics over the `dp` ranks of the
  /// data-parallel group (PlanSpec::sync_batchnorm; false where dp = 1).
  bool sync_batchnorm = false;
  int dp = 1;  ///< that group's size; 1 without sync_batchnorm, which alone reads it
  bool sequence_parallel = false;  ///< Korthikanti et al. 2022: norms and dropout sharded over the sequence
  /// Attention runs fused, as FlashAttention and SDPA do (Dao et al. 2022):
  /// the s x s scores are never stored; forward keeps the output and the
  /// log-sum-exp, backward recomputes the scores block by block, and a causal
  /// mask skips the blocks above the diagonal. False: eager attention, which
  /// keeps the scores and the softmax (Note [Activation memory]).
  bool flash_attention = false;
  /// Describe the attention as the model FLOPs of MFU count it (Note [Model
  /// FLOPs of local attention] in models/src/layers.cpp): eager, each query
  /// against every key its layer lets it see, the causal half counted
  /// whole, but no key beyond a sliding window or outside an attention
  /// chunk. Only predict's MFU asks for it.
  bool model_flops = false;
  /// Context-parallel degree: each sequence of `seq_len` tokens is split over
  /// cp ranks, which exchange keys and values for attention (Note [Context
  /// parallelism] in models/src/layers.cpp). `seq_len` stays the whole sequence.
  int cp = 1;
  /// K/V reach every context-parallel rank by a ring of point-to-point
  /// sends overlapped with attention (Megatron-Core's `p2p`, the default), or
  /// by one all-gather before it (`all_gather`, the Llama 3 paper's scheme).
  bool cp_all_gather = false;
  /// Linear layers run in FP8 or NVFP4 (Transformer Engine, torchao float8):
  /// their saved inputs are the quantised copies (saved_gemm_input());
  /// everything else stays in act_bytes.
  bool fp8 = false;
  /// ... and in NVFP4 (precision fp4; fp8 is set too): 9/16 of a byte.
  bool fp4 = false;
  /// Of the blocks, the first and the last this many run in bf16 all the
  /// same (Note [BF16 layers] in sim/src/core/model.cpp).
  int bf16_start = 0, bf16_end = 0;
  /// Bytes `elements` of a Linear's saved input take: act_bytes; 1 under
  /// fp8 (the FP8 copy wgrad reads); under fp4 NVFP4's column-wise copy,
  /// half a byte and a scale byte for each 16 (Note [NVFP4 training]).
  Bytes saved_gemm_input(Bytes elements) const {
    if (fp4) return (elements * 9 + 15) / 16;
    return elements * (fp8 ? 1 : act_bytes);
  }
  /// Expert-parallel degree: a mixture-of-experts layer's routed experts are
  /// spread over ep ranks, which exchange tokens by all-to-all (Note
  /// [Mixture of experts] in models/src/moe.cpp).
  int ep = 1;
  /// Expert tensor-parallel degree: each expert's matrices split over etp
  /// ranks (Megatron-Core's --expert-tensor-parallel-size; 1 or tp).
  int etp = 1;
  /// The busiest expert's tokens over the mean (1: balanced, as published
  /// benchmarks force it); the simulated rank is the one holding it.
  double moe_imbalance = 1.0;
  /// Megatron-Core's --moe-expert-capacity-factor: an expert takes at most
  /// this times its balanced share and drops the rest (0: dropless, the
  /// default); with moe_pad every expert computes exactly that many.
  double moe_capacity_factor = 0;
  bool moe_pad = false;
  /// Tokens go to their experts by DeepEP's kernels (Megatron-Core's flex
  /// dispatcher with --moe-enable-deepep): once to each node holding one of
  /// their experts, then over NVLink (Note [DeepEP] in cost_comm.cpp); false:
  /// NCCL's all-to-all (the alltoall dispatcher, Megatron-Core's default).
  bool moe_deepep = false;
  /// Megatron-Core's allgather dispatcher: each rank's tokens gathered over
  /// the etp x ep group, its experts run on the rows routed to them, the
  /// parts reduce-scattered back (Note [Mixture of experts] in
  /// models/src/llama.cpp); false: the alltoall dispatcher.
  bool moe_allgather = false;
  /// Every token through every expert, the unchosen weighted by 0
  /// (HuggingFace's Llama4TextExperts; plan.moe_experts dense).
  bool moe_dense = false;
  /// A tensor-parallel LM head's cross-entropy is Megatron-LM's (its
  /// softmax becomes the gradient in place); false: DTensor's loss_parallel,
  /// whose backward makes a new gradient (PlanSpec::loss_parallel).
  bool megatron_loss = true;
  /// A Llama-family block's RMSNorms and SwiGLU run as fused kernels that
  /// keep only their inputs (PlanSpec::kernels; Note [Fused kernels] in
  /// models/src/llama.cpp); false: PyTorch's composite ops.
  bool fused_kernels = false;
  /// The rank's gradients are reduced over a data-parallel group every step
  /// (dp x cp > 1): where ranks are CPU cores, a profile prices its layers
  /// as timed in steps that all-reduce (Note [Layers in a data-parallel
  /// step] in sim/src/cost/cost_profile.cpp). The models read nothing of it.
  bool dp_step = false;
  /// The modules selective recompute reruns (Note [Recompute modules]): a
  /// mask of RecomputeModule, which Layer::attention_core describes.
  std::uint8_t recompute_modules = kRecomputeModulesDefault;
  /// The modules fine-grained activation offloading names (Note [Offload
  /// modules]): a mask of OffloadModule, which Layer::offload_groups
  /// describes; 0: none.
  std::uint16_t offload_modules = 0;
  /// Sequence parallelism's all-gathers and reduce-scatters run through
  /// Transformer Engine's userbuffers beside the GEMMs (PlanSpec::
  /// tp_comm_overlap, at tp > 1 with sequence parallelism), which split
  /// those GEMMs into chunks (Note [Userbuffers' chunks] in
  /// models/src/layers.cpp).
  bool tp_comm_overlap = false;
  /// Which GEMMs that overlap splits, and what it keeps from them
  /// (PlanSpec::tp_comm_overlap_cfg).
  TpOverlapCfg tp_overlap_cfg = TpOverlapCfg::kRing;

  bool operator==(const WorkloadShape&) const = default;
};

/// How an expert dispatch's tokens spread, for DeepEP's pricing: each token
/// goes to `top_k` of `experts` routed experts, on at most `node_limit`
/// nodes (DeepSeek-V3's node-limited routing; 0: no limit).
struct ExpertRoute {
  int top_k = 0;
  int experts = 0;
  int node_limit = 0;
};

/// Collectives a layer needs over its tensor-parallel group, per micro-batch
/// and pass: `count` back-to-back `op`s on buffers of `bytes` (nccl-tests'
/// "size": the whole tensor, not one rank's part).
struct LayerComm {
  CollectiveOp op = CollectiveOp::kAllReduce;
  Bytes bytes = 0;
  int count = 1;
  Axis axis = Axis::kTp;  ///< the mesh axis whose group runs it
  /// A plain NCCL call that Transformer Engine's userbuffers never hide,
  /// even under tp_comm_overlap (a LoRA adapter's: Note [LoRA] in
  /// models/src/peft.cpp); false: one the overlap runs beside the GEMMs.
  bool serial = false;
};

/// A module whose own parameters DeepSpeed's ZeRO-3 gathers at its
/// pre-forward and pre-backward hooks (Note [ZeRO-3 modules] in
/// sim/src/lowering/zero3_coordinator.hpp): an nn.Linear, a norm, an
/// embedding table.
struct ParamModule {
  /// As PyTorch names it within the layer ("attn.qkv"); its share of the
  /// layer's work runs from the forward kernel of this name to the next
  /// module's (a module no kernel names does no work of its own).
  std::string name;
  /// Elements of each parameter tensor it owns, on this rank (weight, then
  /// bias), in the order DeepSpeed numbers them.
  std::vector<std::int64_t> tensors;
  /// The module of an earlier layer whose first tensor this one uses as its
  /// only parameter (a tied LM head: "wte"); `tensors` then holds its size.
  std::string tied;
  /// Its tensors are frozen (a fine-tune's base: Layer::frozen_params), not
  /// the layer's `params`; only DeepSpeed's ZeRO-3 gathers them by module
  /// (Note [Frozen weights under ZeRO-3] in sim/src/lowering/passes/zero3_modules.cpp).
  bool frozen = false;
};

/// One layer for a given WorkloadShape.
struct Layer {
  std::string name;               ///< e.g. "h.11", "wte+wpe", "lm_head"
  LayerKind kind = LayerKind::kOther;
  /// The layer's architecture without batch or sequence, e.g.
  /// "gpt2.block:h=768,a=12,f=3072,drop=1": layers with the same signature
  /// do the same work, so calibration measures them once and a profile's
  /// measurements are looked up by it; models/torch builds its LibTorch twin
  /// from it.
  std::string signature;
  std::int64_t params = 0;        ///< parameters owned (a tied weight is owned once)
  std::int64_t borrowed_params = 0;  ///< parameters used but owned by another layer (tied LM head)
  /// Of `params`, those of routed experts (this rank's experts, after the
  /// expert-parallel and expert-tensor-parallel split): their gradients are
  /// reduced, and ZeRO shards them, over the expert data-parallel group.
  std::int64_t expert_params = 0;
  /// Of `params`, under sequence parallelism those used on a rank's tokens
  /// only (the norms, the biases added after a reduce-scatter, a latent
  /// attention's down-projections, a router): each tensor-parallel rank
  /// holds part of their gradient, which Megatron-Core sums over the group
  /// once a step (Note [Sequence-parallel gradients] in
  /// sim/src/lowering/passes/sequence_parallel.cpp). 0 without it.
  std::int64_t sp_params = 0;
  /// Weights the layer uses that are frozen, not in `params` (a LoRA
  /// fine-tune's base model: Note [Frozen weights] in models/src/peft.cpp):
  /// held whole in the working precision by every rank that runs the layer,
  /// never reduced, stepped or sharded by the optimizer. `frozen_tied`: of
  /// them, a tied LM head's copy of the embedding, held only where the head
  /// runs on another pipeline stage than the embedding (as borrowed_params).
  std::int64_t frozen_params = 0;
  std::int64_t frozen_tied = 0;
  /// Of `frozen_params`, those stored quantized: a QLoRA fine-tune's linear
  /// weights in 4-bit NormalFloat (Note [QLoRA] in models/src/peft.cpp,
  /// kNf4BytesPerElement each) or an 8-bit LoRA's in LLM.int8 (Note [8-bit
  /// base]); the rest in the working precision.
  std::int64_t frozen_quantized = 0;
  /// The bytes `frozen_quantized` take, their scales included.
  Bytes frozen_quantized_bytes = 0;
  /// Their bits: 4 (NF4) or 8 (LLM.int8); 0 where none are.
  int frozen_quantized_bits = 0;
  /// Parameter tensors owned (weights and biases apart): an optimizer that
  /// steps tensor by tensor pays a launch for each (0: unknown, counted as 1).
  int param_tensors = 0;
  /// Elements of its largest parameter tensor (Note [Unfused step] in
  /// cost.hpp); 0: not said, and its step's temporary is not priced (a
  /// layer's whole `params` would overstate it: gpt2-tiny's first pipeline
  /// stage was then priced at its step, where it peaks in backward).
  std::int64_t largest_param_tensor = 0;
  /// The modules owning its parameters, in the order its forward runs them
  /// (Note [ZeRO-3 modules]); their tensors sum to params + borrowed_params.
  /// Empty: the layer is one module of one tensor.
  std::vector<ParamModule> modules;
  std::vector<Kernel> forward;    ///< kernels of the forward pass
  std::vector<Kernel> backward;   ///< kernels of the backward pass
  Bytes saved_bytes = 0;          ///< activations kept for backward per micro-batch
  Bytes output_bytes = 0;         ///< the layer's output tensor per micro-batch
  /// Buffers the layer's modules keep for the whole run besides their
  /// parameters, neither reduced nor stepped (batch norm's running
  /// statistics, Note [Running statistics] in models/src/convnet.cpp):
  /// resident on every rank that runs the layer, counted as buffers.
  Bytes buffer_bytes = 0;
  /// Transient bytes the layer's backward holds beyond the gradient of its
  /// input (the LM head's fp32 gradients of the log-softmax and the logits).
  Bytes backward_workspace_bytes = 0;
  /// Bytes saved in addition when the layer's input comes from another
  /// pipeline stage rather than the layer before it on the same rank (a
  /// batch-first LSTM copies a contiguous [b, s] input to time-major).
  Bytes stage_input_bytes = 0;
  /// The output is a transposed view (a batch-first LSTM's): sending it to
  /// the next stage first copies it to a contiguous buffer.
  bool strided_output = false;
  /// What a pipeline stage ending after this layer sends the next per
  /// micro-batch, and the gradient it gets back (0: output_bytes): Kimi
  /// K3's Block Attention Residuals send the running sum and the bank of
  /// earlier blocks' snapshots (Note [Attention residuals] in
  /// models/src/llama.cpp).
  Bytes boundary_bytes = 0;
  /// When this layer starts a pipeline stage, what the stage keeps per
  /// micro-batch of the tensor it received beyond its layers' own saved
  /// bytes (entry_kept_bytes), or, under full recompute, in place of the
  /// first checkpoint (entry_checkpoint_bytes); 0: nothing beyond (the
  /// received tensor is the first layer's input, which it keeps).
  Bytes entry_kept_bytes = 0;
  Bytes entry_checkpoint_bytes = 0;
  /// The bytes sent to the next pipeline stage (boundary_bytes or output_bytes).
  Bytes sent_bytes() const { return boundary_bytes > 0 ? boundary_bytes : output_bytes; }
  /// Tensor-parallel collectives (empty when tp = 1), serial with the
  /// layer's kernels as Megatron-LM runs them.
  std::vector<LayerComm> tp_forward, tp_backward;
  /// Context-parallel exchange of keys and values (empty when cp = 1), over
  /// Axis::kCp: with the p2p ring, cp - 1 send/recv steps each overlapped
  /// with the attention of the block in hand (the kernels marked cp_overlap);
  /// with all_gather, one all-gather before attention (and a reduce-scatter
  /// of the K/V gradients after its backward).
  std::vector<LayerComm> cp_forward, cp_backward;
  /// Expert parallelism's token dispatch and combine (all-to-all over
  /// Axis::kEp, empty when ep = 1), serial with the layer's kernels as
  /// Megatron-Core's alltoall dispatcher runs them.
  std::vector<LayerComm> ep_forward, ep_backward;
  /// Collectives over the data-parallel group inside the layer's forward
  /// and backward (Axis::kDp; SyncBatchNorm's statistics, Note
  /// [SyncBatchNorm] in models/src/convnet.cpp), serial with its kernels
  /// on the compute stream; empty unless WorkloadShape::sync_batchnorm.
  std::vector<LayerComm> dp_forward, dp_backward;
  /// Where DeepEP runs them (WorkloadShape::moe_deepep; top_k > 0), how
  /// the tokens spread: their all-to-alls are priced by
  /// CommModel::expert_dispatch.
  ExpertRoute ep_route;
  /// Selective recompute (Korthikanti et al. 2022, section 5): the attention
  /// core (QK^T, softmax, its dropout, attention over V) is not kept but
  /// recomputed in backward. These are the bytes of `saved_bytes` it frees
  /// and the forward kernels it re-runs; zero / empty for other layers.
  /// With WorkloadShape::recompute_modules other than the default, the
  /// modules it names together (Note [Recompute modules]).
  Bytes attention_core_bytes = 0;
  std::vector<Kernel> attention_core;
  /// The recompute modules this layer has (a mask of RecomputeModule),
  /// whichever WorkloadShape::recompute_modules asked for.
  std::uint8_t recompute_described = 0;
  /// Selective recompute reruns the layer's expert-parallel all-to-alls
  /// too (Megatron-Core's "moe" module: the whole MoE layer; Note
  /// [Recompute modules]).
  bool recompute_ep = false;
  /// Op-level recompute (torchtitan's selective_ac_option "op", Note
  /// [Op-level recompute] in models/src/llama.cpp): the bytes of
  /// `saved_bytes` its policy does not keep, and the forward kernels its
  /// backward reruns; zero / empty where a layer does not describe it.
  Bytes op_recompute_bytes = 0;
  std::vector<Kernel> op_recompute;
  /// Its GEMMs run quantised under fp8 or fp4 as a transformer block's do,
  /// though it is not one (a multi-token prediction depth, Note
  /// [Multi-token prediction] in models/src/llama.cpp); the other layers
  /// that are not blocks run theirs in bf16 (kernel_precision in cost.hpp).
  bool fp8_as_block = false;
  /// A block kept in bf16 under fp8 or fp4 (Note [BF16 layers] in
  /// sim/src/core/model.cpp): its GEMMs run in bf16.
  bool bf16_gemms = false;
  /// The groups of WorkloadShape::offload_modules this layer has, in the
  /// order its forward runs them (Note [Offload modules]).
  std::vector<OffloadGroup> offload_groups;
  /// The offload modules this layer has (a mask of OffloadModule),
  /// whichever WorkloadShape::offload_modules asked for.
  std::uint16_t offload_described = 0;
  /// A repeated block (transformer or LSTM layer): what full recompute
  /// checkpoints and `stage_layers` counts in blocks.
  bool is_block() const { return kind == LayerKind::kTransformer || kind == LayerKind::kLstm; }
  /// A recurrent layer uses its weights at every time step: autograd sums
  /// the steps' gradients and accumulates them into .grad only once the
  /// layer's whole backward is done; other layers' appear as it runs.
  bool grads_at_end() const { return kind == LayerKind::kLstm; }
  Flops forward_flops() const;    ///< sum over forward kernels (with repeats)
  Flops backward_flops() const;   ///< sum over backward kernels (with repeats)
};

// Note [Layer memo]
// A prediction asks its model for the same layers several times (to price
// and split them, for the MFU's FLOPs, whether it attends) and a search asks
// for the same few shapes plan after plan. Building a 96-block model's list
// copies each block's kernels, modules and names: under callgrind a third
// of a small prediction's instructions (gpt-175b, 8 micro-batches) and a
// tenth of a search's. Models are immutable, so each keeps the lists it
// built for the 128 shapes it was last asked for (kLayerMemo in
// sim/src/core/model.cpp) and hands them out shared (Model::shared_layers);
// a copy of a model starts with none.

/// A model's layers for one shape, shared with the model's memo (Note
/// [Layer memo]): read as a const std::vector<Layer>.
class LayerList {
 public:
  LayerList() = default;
  explicit LayerList(std::shared_ptr<const std::vector<Layer>> layers) : p_(std::move(layers)) {}
  const std::vector<Layer>& get() const { return p_ ? *p_ : none(); }
  operator const std::vector<Layer>&() const { return get(); }  // NOLINT: reads as the vector it is
  std::size_t size() const { return get().size(); }
  bool empty() const { return get().empty(); }
  const Layer& operator[](std::size_t i) const { return get()[i]; }
  const Layer& front() const { return get().front(); }
  const Layer& back() const { return get().back(); }
  auto begin() const { return get().begin(); }
  auto end() const { return get().end(); }

 private:
  static const std::vector<Layer>& none();
  std::shared_ptr<const std::vector<Layer>> p_;
};

/// A model the simulator can lower. Implementations are immutable and
/// thread-safe, so one instance can serve many simulations at once.
class Model {
 public:
  Model();
  Model(const Model&);
  Model& operator=(const Model&);
  virtual ~Model();
  /// layers(shape), built once for each of the last few shapes asked and
  /// then shared (Note [Layer memo]); thread-safe.
  LayerList shared_layers(const WorkloadShape& shape) const;
  /// layers(shape) with the blocks Note [BF16 layers] keeps in bf16 (those
  /// of the same shape without fp8), as shared_layers hands them out.
  std::vector<Layer> with_bf16_layers(const WorkloadShape& shape) const;
  /// Name shown in reports ("gpt2-xl").
  virtual std::string name() const = 0;
  /// Total parameters, counted as HuggingFace does (tied weights once).
  virtual std::int64_t parameters() const = 0;
  /// Of them, those the optimizer trains (a LoRA fine-tune's adapters:
  /// Note [Frozen weights] in models/src/peft.cpp); parameters() for models
  /// trained whole.
  virtual std::int64_t trainable_parameters() const { return parameters(); }
  /// Number of repeated blocks (transformer layers, LSTM layers).
  virtual int blocks() const = 0;
  /// The longest sequence the model accepts (its default `seq_len`).
  virtual std::int64_t max_seq_len() const = 0;
  /// The shortest it accepts (an encoder-decoder's target needs 2 tokens:
  /// one to read, one to predict). layers() still answers below it, for
  /// callers that ask only for the layer list's shape.
  virtual std::int64_t min_seq_len() const { return 1; }
  /// Whether a layer normalises over the batch (PlanSpec::sync_batchnorm
  /// needs one).
  virtual bool has_batch_norm() const { return false; }
  /// Whether a layer multiplies through cuBLAS (PyTorch's linear, matmul,
  /// bmm), so that a CUDA process holds cuBLAS's workspaces in the caching
  /// allocator (Note [Library workspaces] in sim/src/report/predict.cpp).
  /// Convolutions run through cuDNN, which takes its workspace per call.
  virtual bool runs_cublas() const { return true; }
  /// What the model as read leaves out of the model as released (a
  /// multimodal config's vision tower), one sentence each; predict and the
  /// search add them to their warnings.
  virtual std::vector<std::string> notes() const { return {}; }
  /// Layers, first to last, for one micro-batch of the given shape.
  virtual std::vector<Layer> layers(const WorkloadShape& shape) const = 0;
  /// How many layers layers() returns, whatever the shape; models answer
  /// without building them (the rules table and the partition ask it for
  /// every prediction).
  virtual int layer_count() const { return static_cast<int>(layers(WorkloadShape{}).size()); }
  /// Why tensor parallelism of degree `tp` is impossible for this model
  /// ("12 heads are not divisible by 5"), or "" if it is possible.
  virtual std::string tp_error(int tp) const = 0;
  /// Why context parallelism of degree `cp` is impossible for this model
  /// beside tensor parallelism of degree `tp` (a layer that splits its heads
  /// over both needs tp x cp of them: Note [Gated DeltaNet] in
  /// models/src/llama.cpp), or "" if it is possible (decoders split their
  /// sequences; others not). Overrides keep the default tp of 1.
  virtual std::string cp_error(int cp, int /*tp*/ = 1) const {
    return cp == 1 ? "" : "this model has no context-parallel split (only decoders of the GPT and Llama families)";
  }
  /// Its attention splits a sequence over cp ranks by all-gathering the
  /// keys alone, never by the p2p ring (Megatron-Core's DSAttention asserts
  /// cp_comm_type allgather: Note [DeepSeek Sparse Attention] in
  /// models/src/llama.cpp); a plan's cp_comm is then all_gather.
  virtual bool cp_all_gather_only() const { return false; }
  /// Parameters one token passes through (a mixture of experts' top-k routed
  /// and shared experts, every dense weight); parameters() for dense models.
  virtual std::int64_t active_parameters() const { return parameters(); }
  /// Routed experts per mixture-of-experts layer (0: a dense model).
  virtual int experts() const { return 0; }
  /// Routed experts a token goes to (0: a dense model).
  virtual int top_k() const { return 0; }
  /// Whether HF hands PyTorch's SDPA this model's key/value heads grouped,
  /// unexpanded (enable_gqa: fewer key/value heads than query heads, no
  /// sliding window, no latent attention): Note [SDPA in fp32] in rules.cpp.
  virtual bool grouped_kv_sdpa() const { return false; }
  /// Why the blocks cannot be split into `pp` pipeline stages, or "" if
  /// they can (Gemma 4's small models pass tensors between layers outside
  /// the pipeline: Note [Gemma 4] in models/src/llama.cpp).
  virtual std::string pp_error(int /*pp*/) const { return ""; }
  /// Why expert parallelism of degree `ep` is impossible, or "".
  virtual std::string ep_error(int ep) const {
    return ep == 1 ? "" : "this model has no experts to spread (expert parallelism needs a mixture-of-experts model)";
  }
  /// Model FLOPs of forward + backward for one micro-batch, without recompute
  /// (Korthikanti et al. 2022, Eq. 7, for transformers); the numerator of MFU.
  virtual Flops model_flops(const WorkloadShape& shape) const = 0;

 private:
  struct LayerMemo;
  std::unique_ptr<LayerMemo> memo_;
};

using ModelPtr = std::shared_ptr<const Model>;

/// Whether `model` attends: a forward kernel of KernelKind::kAttention in
/// its layers (a CNN, an MLP or an LSTM has none), those of the default
/// shape, as Model::shared_layers keeps them.
bool attends(const Model& model);

}  // namespace dtsim::sim
