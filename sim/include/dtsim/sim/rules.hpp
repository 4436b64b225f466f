#pragma once
// The rules table: the one place that says which plans are valid for a model
// on a cluster and what the choices of each knob are. resolve() checks a plan
// against it (collecting every problem), the search enumerates from it, and
// the GUI's knob lists ask it; nothing else decides what is valid.

#include <cstdint>
#include <map>
#include <optional>
#include <string>
#include <tuple>
#include <vector>

#include "dtsim/sim/cluster.hpp"
#include "dtsim/sim/model.hpp"
#include "dtsim/sim/plan.hpp"

namespace dtsim::sim {

/// One thing wrong with a plan: the key ("tp", "stage_layers"), and what is
/// wrong with what would be valid.
struct PlanProblem {
  std::string key;
  std::string message;
};

/// The valid values of each knob for one model on one cluster. It keeps
/// references to both: they must outlive it.
class PlanRules {
 public:
  /// `gpus`: the GPUs a plan may use (0: the whole cluster).
  PlanRules(const Model& model, const ClusterSpec& cluster, int gpus = 0);

  int gpus() const { return gpus_; }
  /// Layers of the model as lowering cuts them into pipeline chunks
  /// (embedding and head included).
  int layers() const { return layers_; }

  /// Tensor-parallel degrees: divisors of a node's GPUs (Megatron-LM keeps
  /// tensor parallelism on the intra-node link) that the model splits over
  /// (heads and MLP width, Model::tp_error).
  std::vector<int> tp_values() const;
  /// Pipeline degrees with tensor-parallel degree tp: divisors of gpus / tp
  /// with at least one layer per stage.
  std::vector<int> pp_values(int tp) const;
  /// Data-parallel degrees with tp, pp and cp: divisors of gpus / (tp x pp x cp).
  std::vector<int> dp_values(int tp, int pp, int cp = 1) const;
  /// Context-parallel degrees with tensor-parallel degree tp for sequences
  /// of seq_len tokens: divisors of gpus / tp that cut a sequence into 2 cp
  /// equal chunks (Megatron-Core's load balancing), where the model splits
  /// its sequences (Model::cp_error); {1} otherwise.
  std::vector<int> cp_values(int tp, std::int64_t seq_len) const;
  /// Expert-parallel degrees with tp, cp, dp and expert tensor-parallel
  /// degree etp: divisors of the model's routed experts whose ep x etp
  /// divides the tp x cp x dp ranks of a stage (Note [Expert mesh]); {1}
  /// for a dense model, and for dense experts (every rank runs every
  /// expert: Note [Dense experts]).
  std::vector<int> ep_values(int tp, int cp, int dp, int etp, MoeExperts experts = MoeExperts::kGrouped) const;
  /// Expert tensor-parallel degrees with tensor-parallel degree tp: 1 and
  /// tp (Megatron-Core's default is tp); {tp} for a dense model.
  std::vector<int> etp_values(int tp) const;
  /// The token dispatcher the search gives a plan at ep and etp (Note
  /// [Mixture of experts] in models/src/llama.cpp): where only the expert
  /// tensor-parallel ranks exchange (ep 1, etp > 1) the one moving fewer
  /// bytes: the alltoall dispatcher gathers each token's k rows (k e h
  /// bytes) and reduce-scatters their fp32 parts (4 k h), the allgather
  /// dispatcher the token once with its probabilities and routing map (e h
  /// + 5 E) and one fp32 part (4 h), fewer for k >= 2 wherever 5 E < (k -
  /// 1)(e + 4) h (every shipped model), more at top-1; beside expert
  /// parallelism alltoall (allgather would gather every token of the etp x
  /// ep ranks; Megatron-Core's MoE recipes dispatch by all-to-all);
  /// alltoall for a dense model and for dense experts (nothing dispatched:
  /// Note [Dense experts]). One value, so the search walks no more plans.
  std::vector<MoeDispatcher> dispatcher_values(int ep, int etp, MoeExperts experts = MoeExperts::kGrouped) const;
  /// Every token dispatcher a plan may name: alltoall, allgather and
  /// deepep for a mixture of grouped experts; {alltoall} for a dense model
  /// and for dense experts (resolve refuses the others there).
  std::vector<MoeDispatcher> dispatchers(MoeExperts experts = MoeExperts::kGrouped) const;
  /// Ways K/V reach the context-parallel ranks (none to choose when cp = 1).
  std::vector<CpComm> cp_comms(int cp) const;
  /// Whose vocab-parallel cross-entropy a tensor-parallel LM head runs
  /// (PlanSpec::loss_parallel): only auto to choose when tp = 1.
  std::vector<LossParallel> loss_parallels(int tp) const;
  /// Attention implementations: eager, and fused where the model has attention.
  std::vector<Attention> attentions() const;
  /// How the norms and SwiGLU run (PlanSpec::kernels): composite, and fused
  /// where the model's blocks change with it (the Llama family; Note [Fused
  /// kernels] in models/src/llama.cpp).
  std::vector<Kernels> kernels() const;
  /// FP8 scaling recipes in precision p: delayed, and tensorwise under fp8.
  std::vector<Fp8Recipe> fp8_recipes(Precision p) const;
  /// Whether a plan may go without fp32 master weights (PlanSpec::master_weights
  /// false; Note [No master weights] in plan.cpp): in fp16 or bf16, without
  /// Megatron's fp32 gradient buffer and with the optimizer on the device.
  static bool masters_optional(Precision p, bool fp32_gradients, Offload optimizer);
  /// Whether a plan may use Megatron-Core's precision-aware optimizer
  /// (PlanSpec::use_precision_aware_optimizer; Note [Precision-aware
  /// optimizer] in plan.cpp): Adam under the distributed optimizer
  /// (zero_stage 1, not FSDP), as Megatron-Core asserts.
  static bool precision_aware_allowed(int zero_stage, bool fsdp, Optimizer o);
  /// Whether a plan may keep bitsandbytes' 8-bit states (PlanSpec::optim_bits
  /// 8; Note [8-bit optimizer] in plan.cpp): an optimizer with a state (not
  /// SGD without momentum), on the device, not Megatron-Core's
  /// precision-aware one.
  static bool eight_bit_states_allowed(Optimizer o, bool precision_aware, Offload optimizer);
  /// Whether a plan may keep nanotron's fp32 gradient accumulator
  /// (PlanSpec::fp32_grad_accumulator; Note [nanotron's fp32 accumulator]
  /// in sim/src/lowering/emitter.hpp): fp16 or bf16 with master weights,
  /// no ZeRO, or ZeRO-1 over one rank (`shard_ranks`: nanotron's fp32 DDP
  /// hook raises for ZeRO's reduce-scatter), no FSDP, the optimizer on the
  /// device, neither of Megatron-Core's buffers (`grad_buffer`) nor its
  /// precision-aware optimizer, nor a step in the backward.
  static bool fp32_accumulator_allowed(Precision p, bool master_weights, int zero_stage, int shard_ranks, bool fsdp, Offload optimizer,
                                       bool grad_buffer, bool precision_aware, bool in_backward);
  /// Whether a plan may step in the backward (PlanSpec::optimizer_in_backward;
  /// Note [Optimizer in backward] in lowering/layer_stage.cpp): on one GPU,
  /// one micro-batch a step, no ZeRO, the optimizer on the device and no
  /// Megatron gradient buffer, as torchtune's single-device recipe runs it.
  static bool optimizer_in_backward_allowed(int gpus, std::int64_t micro_batches, int zero_stage, Offload optimizer,
                                            bool grad_buffer);
  /// Whether a plan may move its blocks' saved tensors to the host
  /// (PlanSpec::enable_activation_offloading, torchtune's; Note [Saved-tensor
  /// offload] in lowering/passes/saved_tensor_offload.cpp): one stage, no
  /// other offloading of the activations (Megatron-Core's, DeepSpeed's
  /// checkpoints), each block checkpointed alone (`recompute_group` 1), on
  /// a GPU, a model with transformer layers.
  bool saved_tensor_offload_allowed(int pp, bool megatron_offload, bool deepspeed_checkpoints, int recompute_group) const;
  /// Whether attention `a` runs fused in precision p: `auto` is what the
  /// device would run (PyTorch's SDPA and Megatron-Core pick a fused kernel
  /// on a GPU in 16- and 8-bit training; eager on CPUs and in fp32).
  bool flash_attention(Attention a, Precision p) const;
  /// Schedules for pp stages (one stage: none to choose; 1F1B names it).
  std::vector<Schedule> schedules(int pp) const;
  /// Model chunks per GPU of the interleaved schedule with pp stages and
  /// `micro_batches` (Megatron-LM: a multiple of pp): 2 up to layers / pp;
  /// none where the micro-batches do not allow it.
  std::vector<int> virtual_stage_values(int pp, std::int64_t micro_batches) const;
  /// ZeRO stages with pp stages (DeepSpeed refuses 2 and 3 with pipelines;
  /// an LLM.int8 base has no stage 3: Note [Frozen weights under ZeRO-3] in
  /// sim/src/lowering/passes/zero3_modules.cpp).
  std::vector<int> zero_stages(int pp) const;
  /// The model keeps frozen weights beside those it trains (a LoRA fine-tune).
  bool frozen_weights() const { return frozen_; }
  /// Of them, some are stored in 4 or 8 bits (QLoRA's NF4 base, an 8-bit
  /// LoRA's LLM.int8 one).
  bool quantized_base() const { return quantized_; }
  /// Of them, some in 8 bits (an 8-bit LoRA's LLM.int8 base), which FSDP
  /// does not wrap at all.
  bool int8_base() const { return int8_; }
  /// Of them, all in fp32 under 16-bit autocast (`peft: lora_fp32`), which
  /// no sharding strategy takes (Note [fp32 base] in models/src/peft.cpp).
  bool fp32_base() const { return fp32_; }
  /// FSDP's sharding strategies with pp stages: every one on one stage;
  /// under a pipeline FULL_SHARD, as torch.distributed.pipelining runs
  /// fully_shard stages, and NO_SHARD (Note [FSDP under a pipeline] in
  /// lowering/passes/fsdp_pipeline.cpp).
  std::vector<FsdpMode> fsdp_modes(int pp) const;
  /// Which PyTorch FSDP may run sharding `f` (PlanSpec::fsdp_version; Note
  /// [FSDP2's reduce-scatter wait] in lowering/passes/data_parallel.cpp): 1
  /// wherever FSDP is; 2 only where FSDP2 has the strategy (it shards
  /// gradients: full, shard-grad-op or hybrid shard), with the overlapped
  /// reductions and the all-gather limit it always has.
  static std::vector<int> fsdp_versions(FsdpMode f, bool overlap, bool limit_all_gathers);
  /// Megatron-LM's overlapped parameter gather (overlap_param_gather) with
  /// ZeRO stage z, FSDP or not, overlapped reduction or not, under `runtime`:
  /// true only for the distributed optimizer (zero_stage 1, no FSDP) with
  /// overlap and not under the Python loop (arguments.py's assertions;
  /// ZeroRedundancyOptimizer broadcasts after its step).
  static std::vector<bool> overlap_param_gather_values(int zero_stage, bool fsdp, bool overlap, Runtime runtime);
  /// The most blocks Megatron-Core's CPU offloading may take
  /// (cpu_offloading_num_layers; Note [Activation offload]): fewer than the
  /// model's transformer layers, and none with a pipeline or with
  /// recompute, as its TransformerConfig checks, nor on a CPU.
  int cpu_offloading_max(int pp, Recompute recompute) const;
  /// The model's transformer layers (LayerKind::kTransformer).
  int transformer_layers() const;
  /// Where DeepSpeed's partition_activations and cpu_checkpointing apply
  /// (Note [DeepSpeed checkpoints]): every block rerun from its own
  /// checkpoint (recompute full, neither Megatron's block method nor its
  /// groups), one stage, on a GPU; partitioning only without sequence
  /// parallelism, whose checkpoints are split already.
  bool deepspeed_checkpoints_allowed(int pp, Recompute recompute, int recompute_blocks, int recompute_group) const;
  /// Optimizer offload with ZeRO stage z and pp stages (ZeRO-Offload needs
  /// a stage; not modelled with pipelines).
  std::vector<Offload> optimizer_offloads(int zero_stage, int pp) const;
  /// Parameter offload with ZeRO stage z (ZeRO-Infinity: stage 3 only).
  std::vector<Offload> param_offloads(int zero_stage) const;
  /// Recompute modes (selective only where the model has an attention core;
  /// op where its blocks say what torchtitan's op policy keeps, for some
  /// plan: op_recompute_allowed tells for which).
  std::vector<Recompute> recomputes() const;
  /// Whether recompute `op` (Note [Op-level recompute] in models/src/llama.cpp)
  /// is described for every block of the model at tensor- and context-parallel
  /// degrees tp and cp, with fused attention or not.
  bool op_recompute_allowed(int tp, int cp, bool flash) const;
  /// The recompute modules the model's layers have (a mask of
  /// RecomputeModule; Note [Recompute modules] in model.hpp).
  std::uint8_t recompute_modules_described() const;
  /// The offload modules the model's layers have (a mask of OffloadModule;
  /// Note [Offload modules] in model.hpp).
  std::uint16_t offload_modules_described() const;
  /// The model's name, for messages.
  std::string model_name() const;
  /// Sequence parallelism (Korthikanti et al. 2022) needs tp > 1, and each
  /// rank's tokens of a sequence of seq_len (0: the model's longest), its
  /// seq_len / cp under context parallelism, split evenly over the tp ranks
  /// (Megatron's scatter_to_sequence_parallel_region asserts it).
  std::vector<bool> sequence_parallel_values(int tp, int cp = 1, std::int64_t seq_len = 0) const;
  /// Transformer Engine's overlap of sequence parallelism's collectives
  /// with the GEMMs beside them (tp_comm_overlap, Megatron-LM's
  /// --tp-comm-overlap; Note [TP comm overlap]) needs sequence parallelism
  /// (and so tp > 1).
  static std::vector<bool> tp_comm_overlap_values(int tp, bool sequence_parallel);
  /// Megatron-Core's --overlap-moe-expert-parallel-comm (Note
  /// [Expert-parallel overlap] in lowering/layer_stage.cpp) needs experts
  /// split (ep > 1), with a pipeline its interleaved schedule, no full
  /// recompute, a 16-bit model and the alltoall or flex dispatcher (its
  /// transformer_config.py asserts each; flex is dtsim's deepep); not
  /// beside dtsim's sharded parameters (`sharded`: ZeRO-3 or FSDP,
  /// DeepSpeed's and PyTorch's, which do not run Megatron's schedule).
  static std::vector<bool> ep_overlap_values(int ep, int pp, Schedule schedule, Recompute recompute, Precision precision,
                                             bool sharded, MoeDispatcher dispatcher = MoeDispatcher::kAllToAll);
  /// Precisions the device runs (bf16 needs bfloat16 support); beside a
  /// quantized base (QLoRA's, an 8-bit LoRA's) no fp8 or fp4.
  std::vector<Precision> precisions() const;
  /// Orders of the mesh axes a placement may give, innermost first.
  std::vector<std::string> placements() const;
  /// The longest sequence the model takes.
  std::int64_t max_seq_len() const { return max_seq_len_; }
  /// The shortest.
  std::int64_t min_seq_len() const { return min_seq_len_; }
  /// Whether sync_batchnorm may be true: the model normalises over the batch.
  bool sync_batchnorm_allowed() const { return batch_norm_; }

 private:
  const Model& model_;
  const ClusterSpec& cluster_;
  int gpus_ = 1;
  int layers_ = 1;
  std::int64_t max_seq_len_ = 1;
  std::int64_t min_seq_len_ = 1;
  bool batch_norm_ = false;
  bool frozen_ = false;
  bool quantized_ = false;
  bool int8_ = false;
  bool fp32_ = false;
  mutable std::optional<bool> attention_;  ///< the model has an attention core (built lazily)
  mutable bool blocks_ = true;             ///< ... and blocks full recompute checkpoints (built with it)
  /// op_recompute_allowed's answers, by (tp, cp, flash), built when first asked.
  mutable std::map<std::tuple<int, int, bool>, bool> op_recompute_;
  /// recompute_modules_described's answer, built when first asked.
  mutable std::optional<std::uint8_t> modules_described_;
  mutable std::optional<std::uint16_t> offload_described_;
};

/// The divisors of n, ascending (1 .. n).
std::vector<int> divisors(int n);
/// "1, 2, 4" for the values.
std::string join_values(const std::vector<int>& values);

}  // namespace dtsim::sim
