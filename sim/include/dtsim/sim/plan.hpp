#pragma once
// A training plan: how a model is spread over a cluster. PlanSpec holds what the
// user wrote (0 / unset where they wrote nothing); resolve() checks it against a
// model and cluster and fills in every derived figure, or throws ConfigError
// naming the file, line and key.

#include <cstdint>
#include <map>
#include <string>
#include <vector>

#include "dtsim/sim/cluster.hpp"
#include "dtsim/sim/mesh.hpp"
#include "dtsim/sim/model.hpp"

namespace dtsim::sim {

/// kSgd is momentum SGD (one fp32 buffer a parameter); kSgdPlain is SGD
/// with momentum 0, which keeps no state (torch.optim.SGD's default). A plan
/// says `optimizer: sgd` and `sgd_momentum`; resolve() picks between them
/// (effective_optimizer). Both are named "sgd".
enum class Optimizer { kAdam, kAdamW, kSgd, kSgdPlain };
/// Either kind of SGD.
inline bool is_sgd(Optimizer o) { return o == Optimizer::kSgd || o == Optimizer::kSgdPlain; }
/// The update rule a plan's optimizer and SGD momentum make: SGD at
/// momentum 0 is kSgdPlain.
inline Optimizer effective_optimizer(Optimizer o, double sgd_momentum) {
  return is_sgd(o) ? (sgd_momentum > 0 ? Optimizer::kSgd : Optimizer::kSgdPlain) : o;
}
/// The states an update rule keeps a parameter: Adam's momentum and
/// variance, momentum SGD's buffer, none at momentum 0.
inline int optimizer_buffers(Optimizer o) { return o == Optimizer::kSgd ? 1 : o == Optimizer::kSgdPlain ? 0 : 2; }
enum class Offload { kNone, kCpu };
/// The modules a plan's layers are described with (WorkloadShape::
/// recompute_modules): its own under selective recompute, which alone reads
/// them; the default otherwise, so other plans share its layers (Note
/// [Layer memo] in model.hpp).
inline std::uint8_t effective_recompute_modules(bool selective, std::uint8_t modules) {
  return selective ? modules : kRecomputeModulesDefault;
}
/// Activation recompute: none; selective (Megatron's: the attention core);
/// full (each block's input kept, its forward rerun); op (torchtitan's
/// selective_ac_option "op": every other GEMM's output and attention's
/// kept, the rest rerun; Note [Op-level recompute] in models/src/llama.cpp).
enum class Recompute { kNone, kSelective, kFull, kOp };
/// Which blocks full recompute reruns, as Megatron-Core's recompute_method:
/// every block (uniform, at recompute_num_layers 1) or the first few of
/// each model chunk (block).
enum class RecomputeMethod { kUniform, kBlock };
/// Pipeline schedules: GPipe (all forwards, then all backwards; torchgpipe),
/// 1F1B (PipeDream-flush, as Megatron-LM and DeepSpeed), Megatron's
/// interleaved 1F1B over virtual stages, and the naive layer split without
/// micro-batching that `model_parallel` asks for (each micro-step runs to the
/// end before the next starts), and ZB-H1 (Qi et al. 2023, "Zero Bubble
/// Pipeline Parallelism", section 3.1): 1F1B with each backward split into
/// its input-gradient pass B and weight-gradient pass W, stage s deferring
/// s of its W passes into the bubble at the end (Note [Zero bubble] in
/// lowering/lower.cpp).
enum class Schedule { kGpipe, k1f1b, kInterleaved, kNaive, kZbH1 };
/// How a pipeline's layers are split over its model chunks where
/// stage_layers does not say: balanced by priced cost (dtsim's), or as
/// Megatron-Core splits them, evenly in blocks (Note [Megatron's split]).
enum class PipelineSplit { kCost, kMegatron };
/// PyTorch FSDP sharding strategies; each maps onto a ZeRO stage
/// (FULL_SHARD = 3, SHARD_GRAD_OP = 2, NO_SHARD = 0 i.e. DDP, HYBRID_SHARD = 3
/// within a node and replication across nodes).
enum class FsdpMode { kNone, kFullShard, kShardGradOp, kNoShard, kHybridShard };
/// FSDP's wrapping (Note [FSDP's root unit] in
/// sim/src/lowering/passes/sharded_parameters.cpp): `blocks`, every
/// transformer (or LSTM) block a unit and the rest of the model in the
/// root's, as transformer_auto_wrap_policy and fully_shard on each block
/// then the model wrap it; `layers`, every layer of the model its own unit,
/// resharded after its forward (dtsim's runtime); `torchtitan`, the same
/// units with the last ([norm, output]) kept whole from its forward to its
/// backward (torchtitan's apply_fsdp under reshard_after_forward_policy
/// "default").
enum class FsdpWrap { kBlocks, kLayers, kTorchtitan };
/// How attention runs: `auto` picks what the device and precision would run
/// (flash on a GPU in fp16/bf16/fp8, eager otherwise); `eager` keeps the
/// scores and softmax; `flash` is FlashAttention / SDPA (WorkloadShape).
enum class Attention { kAuto, kEager, kFlash };
/// How context parallelism moves K/V (Megatron-Core's --cp-comm-type): a
/// ring of point-to-point sends overlapped with attention, or one
/// all-gather (the Llama 3 paper, section 3.3.2).
enum class CpComm { kP2p, kAllGather };
/// How a mixture of experts sends tokens to their experts' ranks:
/// Megatron-Core's alltoall dispatcher (NCCL's all-to-all: --moe-token-
/// dispatcher-type alltoall, dtsim's default), its allgather dispatcher
/// (every token gathered over the expert tensor- and expert-parallel
/// ranks: Megatron-Core's default; WorkloadShape::moe_allgather) or DeepEP
/// (its flex dispatcher with --moe-enable-deepep; WorkloadShape::moe_deepep).
enum class MoeDispatcher { kAllToAll, kAllGather, kDeepEp };
/// How a mixture's experts compute (Note [Dense experts] in models/src/llama.cpp):
/// each on the tokens routed to it (a grouped GEMM: Megatron-Core,
/// torchtitan), or every token through every expert, the unchosen weighted
/// by 0 (HuggingFace's Llama4TextExperts: a bmm over all of them).
enum class MoeExperts { kGrouped, kDense };
/// How a tensor-parallel LM head's vocab-parallel cross-entropy keeps its
/// memory (its collectives are the same: the maximum, the sum of
/// exponentials and the target logit): `megatron`, Megatron-LM's
/// _VocabParallelCrossEntropy, the fp32 softmax kept in the logits' buffer
/// and turned into their gradient in place; `dtensor`, PyTorch's
/// loss_parallel (torchtitan's default with TP), a log-softmax kept and a
/// new gradient made from it, as F.cross_entropy does; `auto`, dtensor
/// under FSDP and megatron otherwise (WorkloadShape::megatron_loss).
enum class LossParallel { kAuto, kMegatron, kDtensor };
/// The training loop that runs the plan (Note [Python host cost] in
/// sim/src/cost/cost_python.cpp): `libtorch`, dtsim's own C++ loop
/// (dtsim_worker, what calibration times and `dtsim validate` runs); or
/// `python`, the same model written with torch.nn and stepped by
/// torch.optim, whose every eager op and optimizer tensor also costs the
/// interpreter's time, as a profile measures it.
enum class Runtime { kLibtorch, kPython };
/// How a Llama-family block's RMSNorms and SwiGLU run (Note [Fused
/// kernels] in models/src/llama.cpp): `composite`, PyTorch's separate ops
/// as HuggingFace, eager torchtitan and dtsim's LibTorch twins write them,
/// autograd keeping each op's inputs; `fused`, one kernel each that keeps
/// only its inputs, as Megatron-Core runs them (Transformer Engine's or
/// Apex's RMSNorm under --transformer-impl transformer_engine or local,
/// and --bias-swiglu-fusion, both Megatron-LM's defaults).
enum class Kernels { kComposite, kFused };
/// The type a precision-aware optimizer keeps one of its states in
/// (Megatron-Core's OptimizerConfig main_params_dtype, exp_avg_dtype and
/// exp_avg_sq_dtype; Note [Precision-aware optimizer] in
/// sim/src/parallel/plan.cpp): fp8 is Transformer Engine's E4M3 with a
/// scale a tensor (Megatron-LM's "fp8", torch.uint8).
enum class StateDtype { kFp32, kFp16, kBf16, kFp8 };
// Fp8Recipe (how FP8 training scales a tensor before its cast) is in cluster.hpp:
// the pricing of a plan sets it on its copy of the device.

const char* to_string(Optimizer o);
const char* to_string(Offload o);
const char* to_string(Recompute r);
const char* to_string(FsdpMode f);
/// The ZeRO stage an FSDP sharding strategy is (PyTorch FSDP docs,
/// ShardingStrategy): FULL_SHARD and HYBRID_SHARD 3, SHARD_GRAD_OP 2,
/// NO_SHARD 0; kNone 0.
int zero_stage_of(FsdpMode f);
const char* to_string(FsdpWrap w);
const char* to_string(Schedule s);
const char* to_string(PipelineSplit s);
const char* to_string(Attention a);
const char* to_string(CpComm c);
const char* to_string(MoeDispatcher d);
/// "grouped", "dense".
const char* to_string(MoeExperts e);
const char* to_string(LossParallel l);
/// What `asked` resolves to (never kAuto): auto is DTensor's under PyTorch's
/// FSDP (`fsdp` set), Megatron's otherwise.
LossParallel resolved_loss_parallel(LossParallel asked, bool fsdp);
const char* to_string(Runtime r);
const char* to_string(Kernels k);
/// "cross_entropy", "liger_fused_linear", "cut_cross_entropy", "chunked_nll", "chunked_nll_fp32".
const char* to_string(LossKernel k);
const char* to_string(Fp8Recipe r);
/// "fp32", "fp16", "bf16", "fp8".
const char* to_string(StateDtype d);
/// Bytes an element of a state in `d` takes: 4, 2, 2, 1.
int state_bytes(StateDtype d);

/// Where each key of a plan came from ("configs/plans/ddp.yaml:4" or
/// "--set plan.dp"), so late checks can still point at the source.
struct Origins {
  std::string file;                          ///< the file as a whole
  std::map<std::string, std::string> where;  ///< key -> "file:line" or "--set ..."
  /// "file:line" for key, or the file alone.
  std::string of(const std::string& key) const;
};

/// A plan as written. Zero means "unset, derive it".
struct PlanSpec {
  std::string name = "custom";
  int dp = 0;                     ///< data-parallel degree (0: all GPUs / (tp*pp))
  int tp = 1;                     ///< tensor-parallel degree (Megatron-LM)
  int pp = 1;                     ///< pipeline stages
  int cp = 1;                     ///< context-parallel degree (Megatron-Core --context-parallel-size)
  CpComm cp_comm = CpComm::kP2p;  ///< Megatron-Core --cp-comm-type: p2p or all_gather
  Attention attention = Attention::kAuto;
  /// Expert-parallel degree (Megatron-Core --expert-model-parallel-size):
  /// ranks a mixture-of-experts layer's routed experts are spread over,
  /// carved out of the tp x cp x dp ranks of a stage (Note [Expert mesh]).
  int ep = 1;
  /// Expert tensor-parallel degree (--expert-tensor-parallel-size); 0: tp,
  /// Megatron-Core's default. Valid: 1 or tp.
  int etp = 0;
  /// The busiest expert's tokens over the mean (WorkloadShape::moe_imbalance).
  double moe_imbalance = 1.0;
  /// Route every token round-robin over the experts, whatever the router
  /// says (torchtitan's debug.moe_force_load_balance, Megatron-Core's
  /// --moe-router-force-load-balancing): the balanced load the simulator
  /// prices by default, run for real by `dtsim validate` (Note [Forced
  /// balance] in models/torch/src/torch_layers.cpp). Needs moe_imbalance 1.
  bool moe_force_load_balance = false;
  /// --moe-expert-capacity-factor (0: dropless, Megatron-Core's default)
  /// and --moe-pad-expert-input-to-capacity.
  double moe_capacity_factor = 0;
  bool moe_pad = false;
  MoeDispatcher moe_dispatcher = MoeDispatcher::kAllToAll;
  /// Megatron-Core's --overlap-moe-expert-parallel-comm: one micro-batch's
  /// forward runs layer by layer beside the previous one's backward, each
  /// one's all-to-alls on a stream of their own under the other's compute
  /// (Note [Expert-parallel overlap] in sim/src/lowering/layer_stage.cpp).
  /// Needs ep > 1, and with a pipeline the interleaved schedule.
  bool overlap_moe_expert_parallel_comm = false;
  MoeExperts moe_experts = MoeExperts::kGrouped;
  LossParallel loss_parallel = LossParallel::kAuto;
  Runtime runtime = Runtime::kLibtorch;  ///< the training loop (Note [Python host cost])
  Kernels kernels = Kernels::kComposite;  ///< the norms' and SwiGLU's kernels (Note [Fused kernels])
  int model_parallel = 0;         ///< naive layer split over this many GPUs (sets pp, schedule naive)
  Schedule schedule = Schedule::k1f1b;
  int virtual_stages = 0;         ///< model chunks per GPU (interleaved; 0: 2)
  std::vector<int> stage_layers;  ///< layers per stage (empty: balanced by cost)
  /// Megatron-Core's --pipeline-model-parallel-layout ("Et|(tt|)*30mL"), as
  /// given; stage_layers holds its chunks' layer counts (Note [Pipeline
  /// layout]); "" where none was given.
  std::string pipeline_layout;
  PipelineSplit pipeline_split = PipelineSplit::kCost;
  /// Megatron-Core's split knobs (Note [Megatron's split]): the embedding
  /// and the loss counted as a block each, or the first and last pipeline
  /// stages' blocks (0: split evenly with the rest).
  bool account_for_embedding_in_pipeline_split = false;
  bool account_for_loss_in_pipeline_split = false;
  int num_layers_in_first_pipeline_stage = 0;
  int num_layers_in_last_pipeline_stage = 0;
  bool sequence_parallel = false; ///< Korthikanti et al. 2022 (needs tp > 1)
  /// Batch norm over the whole data-parallel batch, as
  /// torch.nn.SyncBatchNorm.convert_sync_batchnorm makes it: each batch
  /// norm layer gathers the ranks' statistics in forward and all-reduces
  /// its gradient sums in backward (Note [SyncBatchNorm] in
  /// models/src/convnet.cpp). Needs a model with batch norm.
  bool sync_batchnorm = false;
  /// Megatron-Core's --tp-comm-overlap (Transformer Engine's userbuffers):
  /// sequence parallelism's all-gathers and reduce-scatters pipelined with
  /// the GEMMs beside them (needs sequence_parallel).
  bool tp_comm_overlap = false;
  /// How it splits those GEMMs (TpOverlapCfg; read only where
  /// tp_comm_overlap is on): Megatron-Bridge's FP8 configurations' ring
  /// exchange, Transformer Engine's defaults, or torch's AsyncTP.
  TpOverlapCfg tp_comm_overlap_cfg = TpOverlapCfg::kRing;
  std::string placement = "tp,pp,dp";  ///< rank order, innermost first
  std::int64_t micro_batch = 0;   ///< sequences per GPU per micro-step
  std::int64_t grad_accum = 0;    ///< micro-steps per iteration (= micro_batches of a pipeline)
  std::int64_t global_batch = 0;  ///< sequences per iteration over all replicas
  std::int64_t seq_len = 0;       ///< 0: the model's maximum
  /// Each sequence packs documents of this many tokens, attention staying
  /// within each (Note [Packed sequences] in models/src/layers.cpp); 0: one
  /// document a sequence.
  std::int64_t document_len = 0;
  /// The LM head's cross-entropy over this many chunks of the sequence, one
  /// at a time (torchtune's CEWithChunkedOutputLoss num_output_chunks; Note
  /// [Chunked loss] in models/src/layers.cpp); 1: the whole logits at once.
  std::int64_t loss_chunks = 1;
  /// The LM head's projection and loss as one kernel (LossKernel).
  LossKernel loss_kernel = LossKernel::kCrossEntropy;
  Precision precision = Precision::kFp32;
  /// Under fp8, ZeRO-3 / FSDP gather the GEMM weights in FP8, 1 byte an
  /// element (torchao's enable_fsdp_float8_all_gather, Megatron-LM's
  /// --fp8-param-gather; both off by default).
  bool fp8_param_gather = false;
  Fp8Recipe fp8_recipe = Fp8Recipe::kDelayed;  ///< under fp8 (Megatron-LM's --fp8-recipe)
  Optimizer optimizer = Optimizer::kAdamW;
  /// SGD's momentum (torch.optim.SGD's `momentum`, Megatron-LM's
  /// --sgd-momentum): above 0 SGD keeps a buffer a parameter, at 0 none.
  /// 0.9, Megatron's default and the CIFAR and ImageNet recipes'; a
  /// torch.optim.SGD built without it, and DeepSpeed's "SGD" without the
  /// param, run at 0 (Note [SGD momentum] in sim/src/parallel/plan.cpp).
  double sgd_momentum = 0.9;
  int zero_stage = 0;
  FsdpMode fsdp = FsdpMode::kNone;
  /// FSDP's limit_all_gathers (True by default): a unit's all-gather waits
  /// until the unit two before it has freed its parameters (Note [ZeRO] in
  /// sim/src/lowering/passes/sharded_parameters.cpp). Only with fsdp
  /// full_shard or hybrid_shard.
  bool limit_all_gathers = true;
  /// FSDP's units: Note [FSDP's root unit]. Only with fsdp full_shard or hybrid_shard.
  FsdpWrap fsdp_wrap = FsdpWrap::kBlocks;
  /// Which PyTorch FSDP (Accelerate's `fsdp_version`): 1, the
  /// FullyShardedDataParallel wrapper; 2, fully_shard, whose backward makes
  /// the compute stream wait for the unit before's reduce-scatter before it
  /// issues the next (Note [FSDP2's reduce-scatter wait] in
  /// sim/src/lowering/passes/data_parallel.cpp). Only with fsdp full_shard,
  /// shard_grad_op or hybrid_shard (FSDP2 has no NO_SHARD).
  int fsdp_version = 1;
  /// Megatron-FSDP's outer_dp_sharding_strategy under hybrid_shard (HSDP):
  /// false ("no_shard") replicates each shard's optimizer state across the
  /// nodes; true ("optim") shards it across them too (Note [Hybrid
  /// sharding] in sim/src/parallel/plan.cpp).
  bool outer_optim = false;
  /// FSDP's MixedPrecision reduce_dtype (FSDP2's MixedPrecisionPolicy,
  /// torchtitan's mixed_precision_reduce): false reduce-scatters gradients
  /// in the working precision (PyTorch's default, reduce_dtype None); true
  /// casts each unit's gradients to fp32 first and reduce-scatters 4 bytes
  /// an element (torchtitan's float32 default, Composer's DEFAULT mixed
  /// precision; Note [FSDP's reduce dtype] in
  /// sim/src/lowering/passes/sharded_parameters.cpp). Only with fsdp
  /// full_shard or hybrid_shard.
  bool fsdp_reduce_fp32 = false;
  /// DeepSpeed ZeRO-3's parameter coordinator, in elements, as DeepSpeed
  /// names and defaults them (Note [ZeRO-3 modules] in
  /// sim/src/lowering/zero3_coordinator.hpp): a module's parameters
  /// prefetched ahead of its use up to the bucket, no prefetch once the
  /// gathered parameters reach max_live, a module's kept after its pass
  /// where the trace uses it again within max_reuse elements, and tensors
  /// of at most the threshold kept whole on every rank.
  double stage3_prefetch_bucket_size = 5e7;
  double stage3_max_live_parameters = 1e9;
  double stage3_max_reuse_distance = 1e9;
  double stage3_param_persistence_threshold = 1e5;
  /// Every layer a ZeRO-3 leaf module, as deepspeed.utils.set_z3_leaf_modules
  /// makes a block class: its parameters gathered whole, one layer ahead,
  /// as dtsim's runtime runs ZeRO-3 (false: module by module, DeepSpeed's
  /// default). ZeRO-3 only.
  bool z3_leaf_layers = false;
  Offload offload_optimizer = Offload::kNone;
  Offload offload_params = Offload::kNone;
  Recompute recompute = Recompute::kNone;
  /// Megatron-Core's recompute_modules under selective recompute: a mask of
  /// RecomputeModule (Note [Recompute modules] in model.hpp); its default,
  /// the attention core.
  std::uint8_t recompute_modules = kRecomputeModulesDefault;
  /// recompute_modules was written (a plan that does not recompute
  /// selectively is refused one).
  bool recompute_modules_set = false;
  /// Megatron-Core's recompute_method under full recompute: uniform (every
  /// block rerun from its own input) or block (only the first
  /// recompute_num_layers blocks of each model chunk; Note [Block
  /// recompute] in sim/src/parallel/partition.cpp).
  RecomputeMethod recompute_method = RecomputeMethod::kUniform;
  /// Megatron-Core's recompute_num_layers (0: not given). Block: blocks
  /// rerun in each model chunk, at least 1. Uniform: the blocks of a group
  /// that share one checkpoint and rerun together (1: each block alone).
  int recompute_num_layers = 0;
  /// Megatron-Core's cpu_offloading_num_layers (Transformer Engine's CPU
  /// offload; 0: off): the activations the first this many transformer
  /// blocks keep for backward are copied to the host after their forward
  /// and back before their backward (Note [Activation offload] in
  /// sim/src/lowering/passes/activation_offload.cpp). One stage, no
  /// recompute, fewer than the model's blocks, as Megatron-Core requires.
  int cpu_offloading_num_layers = 0;
  /// torchtune's enable_activation_offloading (its OffloadActivations, a
  /// saved-tensors hook): what each transformer block keeps for backward
  /// (under full recompute, its checkpoint) goes to pinned host memory on a
  /// side stream after its forward and comes back before its backward
  /// (Note [Saved-tensor offload] in
  /// sim/src/lowering/passes/saved_tensor_offload.cpp). One stage, not with
  /// Megatron-Core's or DeepSpeed's offloading, nor Megatron's recompute
  /// groups.
  bool enable_activation_offloading = false;
  /// Megatron-Core's fine-grained activation offloading
  /// (fine_grained_activation_offloading with offload_modules, a mask of
  /// OffloadModule; Note [Fine-grained offload] in
  /// sim/src/lowering/passes/fine_grained_offload.cpp): what the named
  /// modules save for backward goes to pinned host memory after their
  /// forward and comes back before their backward, tensors of fewer than
  /// min_offloaded_tensor_size elements apart; activation_offload_fraction
  /// of each chunk's groups (the first in forward order), and stage s keeps
  /// s x delta_offload_bytes_across_pp_ranks bytes of them on the device.
  bool fine_grained_activation_offloading = false;
  std::uint16_t offload_modules = 0;
  std::int64_t min_offloaded_tensor_size = 1024 * 1024;  ///< TransformerConfig's default
  double activation_offload_fraction = 1.0;              ///< TransformerConfig's default
  std::int64_t delta_offload_bytes_across_pp_ranks = 0;  ///< TransformerConfig's default
  /// TransformerConfig.fine_grained_offloading_max_inflight_offloads: as a
  /// group commits, the compute stream waits for its module's copies down
  /// but the last this many of its chunk; -1 (None, the default): never.
  int fine_grained_offloading_max_inflight_offloads = -1;
  /// Megatron-Core's first_last_layers_bf16 under fp8 or fp4: the first
  /// num_layers_at_start_in_bf16 and the last num_layers_at_end_in_bf16
  /// transformer layers run their GEMMs in bf16, outside the FP8 autocast
  /// (Note [BF16 layers] in sim/src/core/model.cpp).
  bool first_last_layers_bf16 = false;
  int num_layers_at_start_in_bf16 = 1;  ///< TransformerConfig's default
  int num_layers_at_end_in_bf16 = 1;    ///< TransformerConfig's default
  /// DeepSpeed's activation_checkpointing.partition_activations and
  /// cpu_checkpointing under full recompute: each block's checkpoint (its
  /// input) kept split over the tensor-parallel ranks, all-gathered before
  /// its recompute; and kept in host memory, copied there and back on the
  /// compute stream (Note [DeepSpeed checkpoints] in
  /// sim/src/lowering/passes/deepspeed_checkpointing.cpp). One stage only.
  bool partition_activations = false;
  bool cpu_checkpointing = false;
  /// Megatron-LM's deallocate_pipeline_outputs (on in every Megatron-LM
  /// run): a stage frees its output's data once sent, keeping only its
  /// autograd graph; false keeps it until the backward, as PyTorch's
  /// pipelining and DeepSpeed's pipeline engine do (Note [Deallocated
  /// outputs] in sim/src/lowering/passes/pipeline.cpp). Pipelines only.
  bool deallocate_pipeline_outputs = false;
  double bucket_mb = 25;          ///< DDP bucket (PyTorch default 25 MB)
  /// The bucket in DeepSpeed's name and unit, zero_optimization.
  /// reduce_bucket_size: elements of the gradients' type (2 bytes in
  /// fp16/bf16, 4 in fp32); 0: bucket_mb says (Note [DeepSpeed's knob
  /// names] in sim/src/config/config_io.cpp).
  double reduce_bucket_size = 0;
  bool overlap = true;            ///< overlap gradient communication with backward (DeepSpeed's overlap_comm)
  /// DeepSpeed ZeRO-2's contiguous_gradients (default true): each gradient
  /// is copied into a preallocated buffer of reduce_bucket_size elements,
  /// two with overlap (Note [ZeRO-2's buffers] in
  /// sim/src/lowering/passes/data_parallel.cpp); false: each bucket's
  /// gradients stay where autograd made them until reduced. ZeRO-2 only.
  bool contiguous_gradients = true;
  /// How ZeRO-1 reduces a gradient bucket (DeepSpeed's
  /// zero_optimization.reduce_scatter, default true): true reduce-scatters
  /// it to the ranks owning its optimizer shards, as Megatron-Core's
  /// distributed optimizer and DeepSpeed do; false all-reduces it, as
  /// PyTorch's DDP under ZeroRedundancyOptimizer (`runtime: python`) and
  /// dtsim's own runtime do (Note [ZeRO-1's reduction] in
  /// sim/src/lowering/passes/data_parallel.cpp). ZeRO-1 only.
  bool reduce_scatter = true;
  /// Megatron-LM's --overlap-param-gather (DistributedDataParallelConfig's
  /// overlap_param_gather; off by default, on in the Megatron-Bridge and
  /// NeMo recipes): the distributed optimizer's updated parameters are
  /// gathered bucket by bucket as the next iteration's first forward needs
  /// them, each bucket's all-gather one ahead of its layers, instead of all
  /// after the step (Note [Overlapped parameter gather] in
  /// sim/src/lowering/passes/data_parallel.cpp). Needs zero_stage 1 and
  /// overlap, as Megatron-LM's arguments.py asserts.
  bool overlap_param_gather = false;
  /// Megatron-Core's gradient buffer (--accumulate-allreduce-grads-in-fp32,
  /// which Megatron-LM turns on for bf16): every gradient kept in fp32 for
  /// the whole run, accumulated and reduced there, no bucket copies (Note
  /// [Megatron's gradient buffer] in sim/src/lowering/emitter.hpp). Needs
  /// zero_stage 0 or 1 (the distributed optimizer).
  bool accumulate_allreduce_grads_in_fp32 = false;
  /// Megatron-Core's gradient buffer in the gradients' own type (16 bits:
  /// --grad-reduce-in-bf16, Megatron-Bridge's grad_reduce_in_fp32 false,
  /// or fp16 training): allocated with the model and kept for the whole
  /// run, reduced where it lies, as with accumulate_allreduce_grads_in_fp32,
  /// which implies it (Note [Megatron's gradient buffer] in
  /// sim/src/lowering/emitter.hpp). false: PyTorch's and DeepSpeed's
  /// gradients, made by the first backward and freed by the step. Needs
  /// zero_stage 0 or 1 and the optimizer on the device.
  bool megatron_grad_buffer = false;
  /// nanotron's FP32GradientAccumulator (its optimizer.accumulate_grad_in_fp32,
  /// on in every shipped nanotron config): an fp32 buffer of every
  /// gradient, whole under ZeRO-1, kept for the whole run beside PyTorch
  /// DDP's own 16-bit gradients and buckets; each backward's 16-bit
  /// gradients are added into it and freed as that backward ends, DDP's
  /// hook all-reduces the buffer in fp32, and the optimizer steps fp32
  /// masters from it (Note [nanotron's fp32 accumulator] in
  /// sim/src/lowering/emitter.hpp). Needs fp16 or bf16 with master
  /// weights, zero_stage 0 or 1 without FSDP, the optimizer on the device,
  /// and neither of Megatron-Core's buffers.
  bool fp32_grad_accumulator = false;
  /// false: no fp32 master copy under fp16/bf16: the optimizer updates the
  /// 16-bit parameters in place and keeps its states in 16 bits (a model
  /// loaded in bf16 and trained without autocast: HF Trainer or TRL with
  /// torch_dtype=bfloat16, NeMo Automodel; Note [No master weights] in
  /// sim/src/parallel/plan.cpp).
  bool master_weights = true;
  /// Megatron-Core's use_precision_aware_optimizer (--use-precision-aware-
  /// optimizer; every Megatron-Bridge bf16 Adam performance run turns it
  /// on): Transformer Engine's FusedAdam keeps the states, each in its own
  /// type below, and, outside FP8 recipes other than delayed scaling, the
  /// master weights, as 16-bit remainders of the bf16 parameters where
  /// store_param_remainders (Note [Precision-aware optimizer] in
  /// sim/src/parallel/plan.cpp). Needs zero_stage 1 (the distributed
  /// optimizer) and Adam, as Megatron-Core asserts; the types other than
  /// fp32 need it.
  bool use_precision_aware_optimizer = false;
  StateDtype main_params_dtype = StateDtype::kFp32;  ///< fp32 or fp16
  StateDtype exp_avg_dtype = StateDtype::kFp32;      ///< Adam's first moment
  StateDtype exp_avg_sq_dtype = StateDtype::kFp32;   ///< Adam's second moment
  /// OptimizerConfig's store_param_remainders (true by default): an fp32
  /// master of a bf16 parameter kept as its low 16 bits.
  bool store_param_remainders = true;
  /// The bits of each optimizer state (bitsandbytes' optim_bits): 32, the
  /// states in the optimizer's own types (fp32, or the parameters' under
  /// master_weights false); 8, bitsandbytes' block-wise 8-bit states
  /// (AdamW8bit, PagedAdamW8bit; torchao's AdamW8bit), a byte each and an
  /// fp32 scale for each 256 (Note [8-bit optimizer] in
  /// sim/src/parallel/plan.cpp). 8 needs a state to keep, the optimizer on
  /// the device and not use_precision_aware_optimizer.
  int optim_bits = 32;
  /// torchtune's optimizer_in_bwd: each parameter stepped by its own
  /// optimizer as soon as its gradient is made (a post-accumulate-grad
  /// hook), the gradient freed at once (Note [Optimizer in backward] in
  /// sim/src/lowering/layer_stage.cpp). One GPU, one micro-batch a step
  /// and no ZeRO, as torchtune's single-device recipe runs it.
  bool optimizer_in_backward = false;
  Origins origins;
};

/// A plan checked against a model and a cluster, every figure filled in.
struct ResolvedPlan {
  PlanSpec spec;                  ///< as written (for reporting)
  int dp = 1, tp = 1, pp = 1, cp = 1;
  /// Expert parallelism (Note [Expert mesh]): ep x etp x edp = tp x cp x dp.
  int ep = 1, etp = 1, edp = 1;
  double moe_imbalance = 1.0, moe_capacity_factor = 0;
  bool moe_pad = false, moe_force_load_balance = false;
  MoeDispatcher moe_dispatcher = MoeDispatcher::kAllToAll;
  bool overlap_moe_expert_parallel_comm = false;  ///< PlanSpec's
  MoeExperts moe_experts = MoeExperts::kGrouped;
  LossParallel loss_parallel = LossParallel::kMegatron;  ///< resolved: never kAuto
  Runtime runtime = Runtime::kLibtorch;
  Kernels kernels = Kernels::kComposite;  ///< PlanSpec's
  /// Ranks a ZeRO shard of the experts' states spreads over (edp, or 1
  /// without ZeRO; Megatron-Core's distributed optimizer shards expert
  /// parameters over the expert data-parallel group).
  int expert_shard_group = 1;
  CpComm cp_comm = CpComm::kP2p;
  bool flash_attention = false;   ///< Attention::kAuto resolved for the device and precision
  std::int64_t micro_batch = 1, grad_accum = 1, global_batch = 1, seq_len = 1;
  std::int64_t document_len = 0;  ///< PlanSpec's; 0 where it is not below seq_len
  std::int64_t loss_chunks = 1;   ///< PlanSpec's
  LossKernel loss_kernel = LossKernel::kCrossEntropy;  ///< PlanSpec's
  Precision precision = Precision::kFp32;
  bool fp8_param_gather = false;  ///< PlanSpec::fp8_param_gather (needs fp8)
  Fp8Recipe fp8_recipe = Fp8Recipe::kDelayed;  ///< PlanSpec's (tensorwise needs fp8)
  Optimizer optimizer = Optimizer::kAdamW;  ///< effective_optimizer: SGD at momentum 0 is kSgdPlain
  double sgd_momentum = 0.9;      ///< PlanSpec::sgd_momentum
  int zero_stage = 0;             ///< effective stage, after mapping `fsdp`
  bool fsdp = false;              ///< lowered as PyTorch FSDP (per-layer units)
  bool hybrid_shard = false;      ///< FSDP HYBRID_SHARD: shard within a node only
  /// PlanSpec's; always true for ZeRO-3 (with z3_leaf_layers, one layer
  /// ahead; module by module, its coordinator's prefetch).
  bool limit_all_gathers = true;
  FsdpWrap fsdp_wrap = FsdpWrap::kBlocks;  ///< PlanSpec's (meaningful with fsdp at stage 3)
  int fsdp_version = 1;           ///< PlanSpec's (2 only with fsdp at stage 2 or 3)
  bool outer_optim = false;       ///< PlanSpec's (only with hybrid_shard)
  bool fsdp_reduce_fp32 = false;  ///< PlanSpec's (fsdp at stage 3 only)
  /// PlanSpec's, as whole elements.
  std::int64_t stage3_prefetch_bucket_size = 50000000, stage3_max_live_parameters = 1000000000,
               stage3_max_reuse_distance = 1000000000, stage3_param_persistence_threshold = 100000;
  bool z3_leaf_layers = false;    ///< PlanSpec's
  int shard_group = 1;            ///< ranks that a ZeRO/FSDP shard spreads over
  Offload offload_optimizer = Offload::kNone;
  Offload offload_params = Offload::kNone;
  Recompute recompute = Recompute::kNone;
  /// Under selective recompute, the modules it reruns (PlanSpec's).
  std::uint8_t recompute_modules = kRecomputeModulesDefault;
  /// Under full recompute, Megatron's block method: the first this many
  /// blocks of each model chunk are rerun, the others keep their
  /// activations; 0: every block (Note [Block recompute]).
  int recompute_blocks = 0;
  /// Under full recompute with Megatron's uniform method, the blocks of a
  /// chunk rerun in groups of this many from one checkpoint (1: each block
  /// from its own input; Note [Block recompute]).
  int recompute_group = 1;
  int cpu_offloading_num_layers = 0;  ///< PlanSpec's (Note [Activation offload])
  bool enable_activation_offloading = false;  ///< PlanSpec's (one stage)
  /// PlanSpec's offload_modules where fine_grained_activation_offloading is
  /// on, else 0, and its three knobs (Note [Fine-grained offload]).
  std::uint16_t offload_modules = 0;
  std::int64_t min_offloaded_tensor_size = 1024 * 1024;
  double activation_offload_fraction = 1.0;
  std::int64_t delta_offload_bytes_across_pp_ranks = 0;
  int fine_grained_offloading_max_inflight_offloads = -1;
  /// The transformer layers first and last kept in bf16 (Note [BF16
  /// layers]); 0 each unless first_last_layers_bf16 under fp8 or fp4.
  int bf16_layers_start = 0, bf16_layers_end = 0;
  bool partition_activations = false; ///< PlanSpec's, where tp > 1 (Note [DeepSpeed checkpoints])
  bool cpu_checkpointing = false;     ///< PlanSpec's (Note [DeepSpeed checkpoints])
  Bytes bucket_bytes = 25 * 1000 * 1000;
  bool overlap = true;
  bool contiguous_gradients = true;                 ///< PlanSpec's
  /// ZeRO-1's buckets reduce-scattered (PlanSpec's, false under `runtime:
  /// python`); false: all-reduced. Meaningful at zero_stage 1 only.
  bool reduce_scatter = true;
  bool overlap_param_gather = false;                ///< PlanSpec's (zero_stage 1 only)
  bool accumulate_allreduce_grads_in_fp32 = false;  ///< PlanSpec's
  bool megatron_grad_buffer = false;                ///< PlanSpec's (grad_buffer() adds the above)
  bool fp32_grad_accumulator = false;               ///< PlanSpec's (Note [nanotron's fp32 accumulator])
  bool master_weights = true;                       ///< PlanSpec's (false only under fp16/bf16)
  bool use_precision_aware_optimizer = false;       ///< PlanSpec's (zero_stage 1 and Adam only)
  /// PlanSpec's; each fp32 without use_precision_aware_optimizer.
  StateDtype main_params_dtype = StateDtype::kFp32, exp_avg_dtype = StateDtype::kFp32,
             exp_avg_sq_dtype = StateDtype::kFp32;
  bool store_param_remainders = true;               ///< PlanSpec's
  int optim_bits = 32;                              ///< PlanSpec's (8: bitsandbytes' 8-bit states)
  bool optimizer_in_backward = false;               ///< PlanSpec's (one GPU, one micro-batch)
  bool deallocate_pipeline_outputs = false;          ///< PlanSpec's
  Schedule schedule = Schedule::k1f1b;  ///< meaningful when pp > 1
  int virtual_stages = 1;         ///< model chunks per pipeline rank
  bool sequence_parallel = false;
  bool sync_batchnorm = false;    ///< PlanSpec::sync_batchnorm
  bool tp_comm_overlap = false;
  TpOverlapCfg tp_comm_overlap_cfg = TpOverlapCfg::kRing;  ///< PlanSpec's
  /// Layers per stage as given, or as lowering balanced them (one entry per
  /// model chunk: pp x virtual_stages). Counts every layer of Model::layers.
  std::vector<int> stage_layers;
  /// The ranks over the plan's axes, laid out as `spec.placement` orders
  /// them; dp, tp and pp above are its sizes. Groups come from here.
  Mesh mesh;
  int gpus_used() const { return dp * tp * pp * cp; }
  /// The ranks a replica's gradients are reduced over: dp x cp, as
  /// Megatron-Core's data-parallel group with context parallelism (each cp
  /// rank's gradient is its tokens' share), so cp alone reduces too.
  int grad_group() const { return dp * cp; }
  /// ZeRO-3 as DeepSpeed runs it: gathered module by module by its
  /// coordinator (Note [ZeRO-3 modules]); FSDP and z3_leaf_layers gather
  /// whole layers.
  bool zero3_modules() const { return zero_stage == 3 && !fsdp && !z3_leaf_layers && shard_group > 1; }
  /// ZeRO-1's buckets reduce-scattered over more than one rank (Note
  /// [ZeRO-1's reduction] in sim/src/lowering/passes/data_parallel.cpp);
  /// all-reduced otherwise.
  bool zero1_reduce_scatters() const { return zero_stage == 1 && reduce_scatter && shard_group > 1; }
  /// ZeRO-1's parameters gathered in the next forward over more than one
  /// rank (Note [Overlapped parameter gather]); after the step otherwise.
  bool zero1_gathers_in_forward() const { return zero_stage == 1 && overlap_param_gather && shard_group > 1; }
  /// Megatron-Core's gradient buffer, in fp32 or in the gradients' type
  /// (Note [Megatron's gradient buffer]): every gradient resident for the
  /// whole run, reduced where it lies.
  bool grad_buffer() const { return accumulate_allreduce_grads_in_fp32 || megatron_grad_buffer; }
  /// Note [Precision-aware optimizer]: Transformer Engine's FusedAdam, not
  /// Megatron-Core, holds the master weights and reads the gradients from
  /// their buffer as they are (OptimizerConfig's
  /// use_precision_aware_optimizer_no_fp8_or_ds_fp8).
  bool te_master_weights() const {
    return use_precision_aware_optimizer &&
           (main_params_dtype != StateDtype::kFp32 || offload_optimizer == Offload::kCpu ||
            !((precision == Precision::kFp8 || precision == Precision::kFp4) && fp8_recipe != Fp8Recipe::kDelayed));
  }
  /// FusedAdam keeps the fp32 masters as the 16-bit remainders of bf16
  /// parameters (store_param_remainders): where it holds fp32 masters and
  /// the parameters are bf16 (fp16 ones, and FP8 primary weights, keep a
  /// whole fp32 master).
  bool param_remainders() const {
    const bool bf16_params = precision == Precision::kBf16 ||
                             ((precision == Precision::kFp8 || precision == Precision::kFp4) && !fp8_param_gather);
    return te_master_weights() && main_params_dtype == StateDtype::kFp32 && store_param_remainders && bf16_params;
  }
};

/// Checks `spec` against model and cluster; throws ConfigError on the first
/// problem with the key's origin and what would be valid.
ResolvedPlan resolve(const PlanSpec& spec, const Model& model, const ClusterSpec& cluster);

/// Megatron-Core's pipeline layout (PipelineParallelLayerLayout
/// .parse_str_to_list) unrolled: each model chunk's layers in order, in
/// chunk order, as 'E' (embedding), 't' (a decoder block), 'm' (an MTP
/// depth) and 'L' (the loss and output layer). Checked as Megatron checks
/// it (validate_layer_layout): E first and once, L last and once, no block
/// after an MTP depth; dtsim also needs a layer in every chunk. Throws
/// ConfigError (message without a location) naming what is valid.
std::vector<std::string> parse_pipeline_layout(const std::string& text);

/// Bytes per parameter of optimizer state kept by the optimizer, including the
/// fp32 master copy under mixed precision (ZeRO paper section 3.1: K = 12 for
/// mixed-precision Adam); without master weights, the states in the
/// parameters' 16 bits (Adam: 4).
int optimizer_state_bytes_per_param(Optimizer o, Precision p, bool master_weights = true);
/// Bytes per parameter of optimizer state a plan keeps: as above, or
/// under use_precision_aware_optimizer its master and moments each in its
/// own type (Note [Precision-aware optimizer]).
int optimizer_state_bytes_per_param(const ResolvedPlan& plan);
/// Bytes of optimizer state a plan keeps for `params` parameters: their
/// bytes per parameter above, and under optim_bits 8 bitsandbytes' fp32
/// scale for each 256 elements of each state (Note [8-bit optimizer]).
Bytes optimizer_state_bytes(const ResolvedPlan& plan, std::int64_t params);
/// Bytes per parameter of its shard that a precision-aware step holds
/// while it runs: an fp32 copy of each state kept in another type
/// (Note [Precision-aware optimizer]); 0 otherwise.
int optimizer_step_copy_bytes_per_param(const ResolvedPlan& plan);

/// Bytes of a gradient element: 4 under accumulate_allreduce_grads_in_fp32,
/// else the parameters' (element_bytes of the precision).
int gradient_element_bytes(const ResolvedPlan& plan);
/// Bytes of a gradient element as FSDP reduces it: 4 under reduce_dtype
/// fp32 (Note [FSDP's reduce dtype]), else gradient_element_bytes.
int fsdp_reduce_element_bytes(const ResolvedPlan& plan);

}  // namespace dtsim::sim
