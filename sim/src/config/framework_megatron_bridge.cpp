// Megatron-Bridge's ConfigContainer YAML into dtsim's plan and model keys
// (Note [Framework configs] in framework_config.cpp), through the rules of
// Megatron-LM's arguments (framework_megatron.cpp).
//
// Note [Megatron-Bridge configs]
// Megatron-Bridge (NVIDIA-NeMo/Megatron-Bridge, NeMo's training library
// since 25.09) describes a run as a ConfigContainer
// (src/megatron/bridge/training/config.py) and writes it as YAML: to
// logger.save_config_filepath at start-up and as run_config.yaml beside every
// checkpoint (ConfigContainer.to_yaml, megatron/training/config/container.py
// in Megatron-LM). Its sections name Megatron-Core's dataclass fields, which
// are Megatron-LM's flags with underscores (model.tensor_model_parallel_size
// is --tensor-model-parallel-size), so each field read is handed to the same
// rules as the flag, under its YAML name:
// - model: the GPTModelProvider (TransformerConfig and ModelParallelConfig
//   fields: parallel sizes, shape, MoE, MLA, recompute, precision). Where a
//   field and a flag differ: num_query_groups (grouped-query attention when
//   below the heads), gated_linear_unit with activation_func silu (--swiglu),
//   share_embeddings_and_output_weights and add_bias_linear (the flags'
//   negations), bias_activation_fusion, fp8 (--fp8-format), fp8_param
//   (--fp8-param-gather), num_moe_experts (--num-experts),
//   moe_flex_dispatcher_backend deepep or hybridep (--moe-enable-deepep),
//   vocab_size
//   (unpadded; padded to make_vocab_size_divisible_by x tp only under
//   should_pad_vocab, GPTModelProvider.provide). position_embedding_type
//   yarn and mrope are rotary positions, priced as rope.
//   pipeline_model_parallel_layout (a string, or a list of stages of layer
//   types) is Megatron's layout (Note [Pipeline layout]). HybridModelProvider's
//   hybrid_layer_pattern or hybrid_override_pattern and mamba_* are the
//   hybrid flags, activation_func squared_relu --squared-relu (Note [Mamba-2]
//   in models/src/llama.cpp); a hybrid's mtp_hybrid_override_pattern, one
//   multi-token prediction depth, becomes the pattern's "/" depths, one a
//   layer of mtp_num_layers (Nemotron 3 Super's and Ultra's providers).
//   moe_latent_size is --moe-latent-size (Note [Latent MoE]). experimental_attention_variant dsa with the
//   dsa_* fields is DeepSeek Sparse Attention's flags (GLM-5's and
//   DeepSeek-V3.2's MLAModelProvider; Note [DeepSeek Sparse Attention]),
//   dsv4_hybrid with csa_*, o_groups, o_lora_rank and the dsa_* fields
//   DeepSeek-V4's (DeepSeekV4Bridge; Note [DeepSeek-V4]: the deprecated
//   apply_dsa_kernel_fusion as TransformerConfig maps it), enable_hyper_connections with
//   num_residual_streams and mhc_sinkhorn_iterations its hyper-connections,
//   gated_delta_net with the linear_* fields Gated DeltaNet's (Qwen3-Next's).
// - train: micro_batch_size, global_batch_size. optimizer: optimizer,
//   sgd_momentum, use_distributed_optimizer, use_precision_aware_optimizer
//   with main_params_dtype, exp_avg_dtype, exp_avg_sq_dtype (torch dtypes,
//   dumped as {_target_: torch.bfloat16}) and store_param_remainders (Note
//   [Precision-aware optimizer]; main_grads_dtype is not read: Megatron-Core
//   keeps the gradients in ddp.grad_reduce_in_fp32's type). ddp: use_distributed_optimizer,
//   overlap_grad_reduce, overlap_param_gather, grad_reduce_in_fp32,
//   bucket_size, use_megatron_fsdp with data_parallel_sharding_strategy.
// - mixed_precision: a recipe's name (mixed_precision.py's registered
//   recipes, bf16_mixed, bf16_with_fp8_current_scaling_mixed, ...) or its
//   fields. MixedPrecisionConfig.setup writes every field it has over the
//   model's and the DDP config's (update_config_with_precision_overrides), so
//   where it is given it decides the precision, the FP8 or FP4 recipe, the
//   quantised parameter gather and grad_reduce_in_fp32.
// - comm_overlap: CommOverlapConfig.setup turns on, with data parallelism,
//   overlap_grad_reduce and overlap_param_gather (the latter here only with
//   the distributed optimizer, which it needs) and 128 Mi-element buckets,
//   and applies the user's tp_comm_overlap (dropped below tp 2 or without
//   sequence parallelism, as it warns), overlap_moe_expert_parallel_comm and
//   delay_wgrad_compute over the model's; its fields given win.
// - peft: Bridge's LoRA (or VLMLoRA) as model.peft lora, its dim as
//   model.lora_rank and its target_modules as model.lora_targets (Note
//   [LoRA] in models/src/peft.cpp); DoRA and canonical LoRA are listed as
//   not modelled.
// - dataset.seq_length must equal model.seq_length (Bridge asserts it).
// A dump holds every field of those dataclasses (about 370 in model alone).
// Those that change time or memory and that dtsim does not model (CUDA
// graphs, FP8 attention, sliding windows, a hybrid's MTP pattern) are listed in the one warning when they are on; the rest
// (initialisation, epsilons, fusions dtsim prices as on, logging, paths)
// are skipped, as the flags of framework_megatron.cpp's skipped_flag are.
#include <algorithm>
#include <map>
#include <optional>
#include <set>
#include <string>
#include <string_view>

#include "dtsim/sim/config_node.hpp"
#include "dtsim/sim/error.hpp"
#include "dtsim/sim/framework_config.hpp"
#include "framework_common.hpp"

namespace dtsim::sim {
namespace {

enum class Type { kInt, kIntOrOff, kBool, kNotBool, kString, kFloat, kWords, kFreq, kDtype };

/// A field read: its section, its name there, the flag it is, and what it holds.
struct Field {
  const char* section;
  const char* key;
  const char* flag;
  Type type;
};

// kIntOrOff: 0 or null is off (the flag absent). kNotBool: the flag is the
// field's negation (false gives it). kDtype: a torch dtype, given as the
// flag's word (fp32, fp16, bf16, fp8).
constexpr Field kFields[] = {
    {"model", "tensor_model_parallel_size", "tensor-model-parallel-size", Type::kInt},
    {"model", "pipeline_model_parallel_size", "pipeline-model-parallel-size", Type::kInt},
    {"model", "virtual_pipeline_model_parallel_size", "virtual-pipeline-model-parallel-size", Type::kInt},
    {"model", "context_parallel_size", "context-parallel-size", Type::kInt},
    {"model", "cp_comm_type", "cp-comm-type", Type::kString},
    {"model", "expert_model_parallel_size", "expert-model-parallel-size", Type::kInt},
    {"model", "expert_tensor_parallel_size", "expert-tensor-parallel-size", Type::kInt},
    {"model", "sequence_parallel", "sequence-parallel", Type::kBool},
    {"model", "tp_comm_overlap", "tp-comm-overlap", Type::kBool},
    {"model", "recompute_granularity", "recompute-granularity", Type::kString},
    {"model", "recompute_method", "recompute-method", Type::kString},
    {"model", "recompute_num_layers", "recompute-num-layers", Type::kInt},
    {"model", "recompute_modules", "recompute-modules", Type::kWords},
    {"model", "num_layers", "num-layers", Type::kInt},
    {"model", "hidden_size", "hidden-size", Type::kInt},
    {"model", "ffn_hidden_size", "ffn-hidden-size", Type::kInt},
    {"model", "num_attention_heads", "num-attention-heads", Type::kInt},
    {"model", "kv_channels", "kv-channels", Type::kInt},
    {"model", "num_query_groups", "num-query-groups", Type::kInt},
    {"model", "seq_length", "seq-length", Type::kInt},
    {"model", "gated_linear_unit", "swiglu", Type::kBool},
    {"model", "normalization", "normalization", Type::kString},
    {"model", "position_embedding_type", "position-embedding-type", Type::kString},
    {"model", "share_embeddings_and_output_weights", "untie-embeddings-and-output-weights", Type::kNotBool},
    {"model", "add_bias_linear", "disable-bias-linear", Type::kNotBool},
    {"model", "add_qkv_bias", "add-qkv-bias", Type::kBool},
    {"model", "vocab_size", "padded-vocab-size", Type::kInt},
    {"model", "make_vocab_size_divisible_by", "make-vocab-size-divisible-by", Type::kInt},
    {"model", "num_moe_experts", "num-experts", Type::kIntOrOff},
    {"model", "moe_router_topk", "moe-router-topk", Type::kInt},
    {"model", "moe_ffn_hidden_size", "moe-ffn-hidden-size", Type::kInt},
    {"model", "moe_shared_expert_intermediate_size", "moe-shared-expert-intermediate-size", Type::kIntOrOff},
    {"model", "moe_expert_capacity_factor", "moe-expert-capacity-factor", Type::kFloat},
    {"model", "moe_pad_expert_input_to_capacity", "moe-pad-expert-input-to-capacity", Type::kBool},
    {"model", "moe_token_dispatcher_type", "moe-token-dispatcher-type", Type::kString},
    {"model", "moe_enable_deepep", "moe-enable-deepep", Type::kBool},
    {"model", "moe_layer_freq", "moe-layer-freq", Type::kFreq},
    {"model", "moe_router_force_load_balancing", "moe-router-force-load-balancing", Type::kBool},
    {"model", "moe_router_num_groups", "moe-router-num-groups", Type::kIntOrOff},
    {"model", "moe_router_group_topk", "moe-router-group-topk", Type::kIntOrOff},
    {"model", "mtp_num_layers", "mtp-num-layers", Type::kIntOrOff},
    {"model", "mtp_use_repeated_layer", "mtp-use-repeated-layer", Type::kBool},
    {"model", "moe_latent_size", "moe-latent-size", Type::kIntOrOff},
    {"model", "overlap_moe_expert_parallel_comm", "overlap-moe-expert-parallel-comm", Type::kBool},
    {"model", "delay_wgrad_compute", "delay-wgrad-compute", Type::kBool},
    {"model", "bias_activation_fusion", "no-bias-swiglu-fusion", Type::kNotBool},
    {"model", "multi_latent_attention", "multi-latent-attention", Type::kBool},
    {"model", "q_lora_rank", "q-lora-rank", Type::kIntOrOff},
    {"model", "kv_lora_rank", "kv-lora-rank", Type::kInt},
    {"model", "qk_head_dim", "qk-head-dim", Type::kInt},
    {"model", "qk_pos_emb_head_dim", "qk-pos-emb-head-dim", Type::kInt},
    {"model", "v_head_dim", "v-head-dim", Type::kInt},
    {"model", "qk_layernorm", "qk-layernorm", Type::kBool},
    // DeepSeek Sparse Attention's (MLAModelProvider from GLM-5's and
    // DeepSeek-V3.2's configs; Note [DeepSeek Sparse Attention] in
    // models/src/llama.cpp).
    {"model", "experimental_attention_variant", "experimental-attention-variant", Type::kString},
    {"model", "dsa_indexer_n_heads", "dsa-indexer-n-heads", Type::kIntOrOff},
    {"model", "dsa_indexer_head_dim", "dsa-indexer-head-dim", Type::kIntOrOff},
    {"model", "dsa_indexer_topk", "dsa-indexer-topk", Type::kIntOrOff},
    {"model", "dsa_indexer_topk_freq", "dsa-indexer-topk-freq", Type::kIntOrOff},
    {"model", "dsa_indexer_skip_topk_offset", "dsa-indexer-skip-topk-offset", Type::kIntOrOff},
    {"model", "dsa_indexer_loss_coeff", "dsa-indexer-loss-coeff", Type::kFloat},
    {"model", "dsa_indexer_use_sparse_loss", "dsa-indexer-use-sparse-loss", Type::kBool},
    {"model", "dsa_kernel_backend", "dsa-kernel-backend", Type::kString},
    // DeepSeek-V4's (DeepSeekV4Bridge's provider; Note [DeepSeek-V4] and
    // Note [Hyper-connections] in models/src/llama.cpp).
    {"model", "csa_compress_ratios", "csa-compress-ratios", Type::kWords},
    {"model", "csa_window_size", "csa-window-size", Type::kIntOrOff},
    {"model", "o_groups", "o-groups", Type::kIntOrOff},
    {"model", "o_lora_rank", "o-lora-rank", Type::kIntOrOff},
    {"model", "apply_dsa_kernel_fusion", "apply-dsa-kernel-fusion", Type::kString},
    {"model", "csa_dense_mode", "csa-dense-mode", Type::kBool},
    {"model", "enable_hyper_connections", "enable-hyper-connections", Type::kBool},
    {"model", "num_residual_streams", "num-residual-streams", Type::kIntOrOff},
    {"model", "mhc_sinkhorn_iterations", "mhc-sinkhorn-iterations", Type::kIntOrOff},
    {"model", "moe_n_hash_layers", "moe-n-hash-layers", Type::kIntOrOff},
    // Gated DeltaNet's (Qwen3-Next's and Qwen3.5's providers; Note [Gated DeltaNet]).
    {"model", "linear_attention_freq", "linear-attention-freq", Type::kFreq},
    {"model", "linear_conv_kernel_dim", "linear-conv-kernel-dim", Type::kIntOrOff},
    {"model", "linear_key_head_dim", "linear-key-head-dim", Type::kIntOrOff},
    {"model", "linear_value_head_dim", "linear-value-head-dim", Type::kIntOrOff},
    {"model", "linear_num_key_heads", "linear-num-key-heads", Type::kIntOrOff},
    {"model", "linear_num_value_heads", "linear-num-value-heads", Type::kIntOrOff},
    {"model", "attention_output_gate", "attention-output-gate", Type::kBool},
    // HybridModelProvider's (Note [Mamba-2] in models/src/llama.cpp).
    {"model", "hybrid_layer_pattern", "hybrid-layer-pattern", Type::kString},
    {"model", "hybrid_override_pattern", "hybrid-override-pattern", Type::kString},
    {"model", "mamba_state_dim", "mamba-state-dim", Type::kInt},
    {"model", "mamba_head_dim", "mamba-head-dim", Type::kInt},
    {"model", "mamba_num_groups", "mamba-num-groups", Type::kInt},
    {"model", "mamba_num_heads", "mamba-num-heads", Type::kIntOrOff},
    {"model", "account_for_embedding_in_pipeline_split", "account-for-embedding-in-pipeline-split", Type::kBool},
    {"model", "account_for_loss_in_pipeline_split", "account-for-loss-in-pipeline-split", Type::kBool},
    {"model", "num_layers_in_first_pipeline_stage", "decoder-first-pipeline-num-layers", Type::kIntOrOff},
    {"model", "num_layers_in_last_pipeline_stage", "decoder-last-pipeline-num-layers", Type::kIntOrOff},
    {"model", "cpu_offloading", "cpu-offloading", Type::kBool},
    {"model", "cpu_offloading_num_layers", "cpu-offloading-num-layers", Type::kIntOrOff},
    {"model", "fine_grained_activation_offloading", "fine-grained-activation-offloading", Type::kBool},
    {"model", "offload_modules", "offload-modules", Type::kWords},
    {"model", "min_offloaded_tensor_size", "min-offloaded-tensor-size", Type::kInt},
    {"model", "activation_offload_fraction", "activation-offload-fraction", Type::kFloat},
    {"model", "delta_offload_bytes_across_pp_ranks", "delta-offload-bytes-across-pp-ranks", Type::kInt},
    {"model", "fine_grained_offloading_max_inflight_offloads", "fine-grained-offloading-max-inflight-offloads", Type::kInt},
    {"model", "bf16", "bf16", Type::kBool},
    {"model", "fp16", "fp16", Type::kBool},
    {"model", "fp8", "fp8-format", Type::kString},
    {"model", "fp8_recipe", "fp8-recipe", Type::kString},
    {"model", "fp8_param", "fp8-param-gather", Type::kBool},
    {"model", "fp4", "fp4-format", Type::kString},
    {"model", "fp4_recipe", "fp4-recipe", Type::kString},
    {"model", "fp4_param", "fp4-param-gather", Type::kBool},
    {"model", "first_last_layers_bf16", "first-last-layers-bf16", Type::kBool},
    {"model", "num_layers_at_start_in_bf16", "num-layers-at-start-in-bf16", Type::kInt},
    {"model", "num_layers_at_end_in_bf16", "num-layers-at-end-in-bf16", Type::kInt},
    {"train", "micro_batch_size", "micro-batch-size", Type::kInt},
    {"train", "global_batch_size", "global-batch-size", Type::kInt},
    {"optimizer", "optimizer", "optimizer", Type::kString},
    {"optimizer", "sgd_momentum", "sgd-momentum", Type::kFloat},
    {"optimizer", "use_distributed_optimizer", "use-distributed-optimizer", Type::kBool},
    {"optimizer", "use_precision_aware_optimizer", "use-precision-aware-optimizer", Type::kBool},
    {"optimizer", "main_params_dtype", "main-params-dtype", Type::kDtype},
    {"optimizer", "exp_avg_dtype", "exp-avg-dtype", Type::kDtype},
    {"optimizer", "exp_avg_sq_dtype", "exp-avg-sq-dtype", Type::kDtype},
    {"optimizer", "store_param_remainders", "no-store-param-remainders", Type::kNotBool},
    {"ddp", "use_distributed_optimizer", "use-distributed-optimizer", Type::kBool},
    {"ddp", "overlap_grad_reduce", "overlap-grad-reduce", Type::kBool},
    {"ddp", "overlap_param_gather", "overlap-param-gather", Type::kBool},
    {"ddp", "grad_reduce_in_fp32", "accumulate-allreduce-grads-in-fp32", Type::kBool},
    {"ddp", "bucket_size", "ddp-bucket-size", Type::kIntOrOff},
    {"ddp", "use_megatron_fsdp", "use-megatron-fsdp", Type::kBool},
    {"ddp", "data_parallel_sharding_strategy", "data-parallel-sharding-strategy", Type::kString},
    {"ddp", "outer_dp_sharding_strategy", "outer-dp-sharding-strategy", Type::kString},
    {"ddp", "num_distributed_optimizer_instances", "num-distributed-optimizer-instances", Type::kInt},
    {"tokenizer", "tokenizer_type", "tokenizer-type", Type::kString},
};

/// Fields that change time or memory and that dtsim does not model: listed
/// in the warning when on (not null, false, 0, "none" or empty).
constexpr std::pair<const char*, const char*> kUnmodelled[] = {
    {"model.cuda_graph_impl", "kernel launches priced as eager"},
    {"model.enable_cuda_graph", "kernel launches priced as eager"},
    {"model.external_cuda_graph", "kernel launches priced as eager"},
    {"model.moe_shared_expert_overlap", "the shared experts priced on the compute stream"},
    {"model.fp8_dot_product_attention", "attention priced in bf16"},
    {"model.fp8_multi_head_attention", "attention priced in bf16"},
    {"model.hierarchical_context_parallel_sizes", "context parallelism priced as one level"},
    {"model.window_size", "every layer priced as attending to every earlier key"},
    {"model.heterogeneous_layers_config_path", "every layer priced alike"},
    {"model.keep_mtp_spec_in_bf16", "the multi-token prediction layers priced in the blocks' precision"},
    {"model.delay_offload_until_cuda_graph", "offload copies issued as eager"},
    {"model.moe_paged_stash", "the experts' activations priced as kept at their rows"},
    {"optimizer.optimizer_cpu_offload", "optimizer priced on the GPU"},
    // Note [Packed sequences] (models/src/layers.cpp): the documents' lengths are the data's.
    {"dataset.enable_offline_packing", "attention priced over each whole sequence; plan.document_len prices it within its documents"},
    {"dataset.packed_sequence_specs", "attention priced over each whole sequence; plan.document_len prices it within its documents"},
};

/// The mixed-precision recipes of mixed_precision.py (@register): the
/// MixedPrecisionConfig fields each sets that dtsim reads.
struct Recipe {
  const char* name;
  bool fp16;
  const char* fp8;         ///< "" for none
  const char* fp8_recipe;  ///< as MixedPrecisionConfig's default when fp8 is none
  bool param_gather;       ///< fp8_param_gather, or fp4_param_gather under fp4
  bool first_last_bf16;
  bool fp4;
  /// num_layers_at_start_in_bf16 and num_layers_at_end_in_bf16 where
  /// first_last_bf16 (Note [BF16 layers]; MixedPrecisionConfig's 0 unset).
  int bf16_start = 0, bf16_end = 0;
};
constexpr Recipe kRecipes[] = {
    {"bf16_mixed", false, "", "tensorwise", false, false, false},
    {"fp16_mixed", true, "", "tensorwise", false, false, false},
    {"bf16_with_fp8_delayed_scaling_mixed", false, "hybrid", "delayed", true, false, false},
    {"fp16_with_fp8_delayed_scaling_mixed", true, "hybrid", "delayed", true, false, false},
    {"bf16_with_mxfp8_mixed", false, "e4m3", "mxfp8", true, false, false},
    {"fp16_with_mxfp8_mixed", true, "e4m3", "mxfp8", true, false, false},
    {"bf16_with_fp8_current_scaling_mixed", false, "hybrid", "tensorwise", true, true, false, 1, 1},
    {"nemotron_h_bf16_with_fp8_current_scaling_mixed", false, "hybrid", "tensorwise", true, true, false, 2, 2},
    {"nanov2_bf16_with_fp8_current_scaling_mixed", false, "hybrid", "blockwise", true, true, false, 2, 2},
    {"fp16_with_fp8_current_scaling_mixed", true, "hybrid", "tensorwise", true, true, false, 1, 1},
    {"bf16_with_fp8_subchannel_scaling_mixed", false, "hybrid", "blockwise", false, false, false},
    {"fp16_with_fp8_subchannel_scaling_mixed", true, "hybrid", "blockwise", false, false, false},
    {"bf16_with_nvfp4_mixed", false, "", "tensorwise", true, false, true},
    {"nemotron_3_super_bf16_with_nvfp4_mixed", false, "", "tensorwise", true, true, true, 0, 14},
};

/// The precision flags MixedPrecisionConfig decides where it is given.
constexpr const char* kPrecisionFlags[] = {"bf16", "fp16", "fp8-format", "fp8-recipe", "fp8-param-gather", "fp4-format",
                                           "fp4-recipe", "fp4-param-gather", "first-last-layers-bf16", "num-layers-at-start-in-bf16",
                                           "num-layers-at-end-in-bf16",
                                           "accumulate-allreduce-grads-in-fp32", "grad-reduce-in-bf16"};

class Reader {
 public:
  Reader(const YAML::Node& root, const std::string& file) : root_(root), file_(file) {
    a_.framework = "Megatron-Bridge";
    a_.file = file;
    a_.value_sep = "=";
    // A flag is named as the file writes it, or by the field this reader reads it from.
    std::map<std::string, std::string> names;
    for (const auto& f : kFields) names.emplace(f.flag, std::string(f.section) + "." + f.key);
    names["group-query-attention"] = "model.num_query_groups";
    names["grad-reduce-in-bf16"] = "ddp.grad_reduce_in_fp32";
    names["vocab-size"] = "model.vocab_size";
    spelled_ = names;
  }

  FrameworkConfig read() {
    if (!root_.IsMap()) {
      throw ConfigError(file_ + ": not a Megatron-Bridge config: its top level must be a mapping of sections (model:, train:, ddp:, ...)");
    }
    for (const char* s : {"model", "train", "optimizer", "ddp", "tokenizer", "dataset"}) section(s);
    for (const auto& f : kFields) read_field(f);
    model_specials();
    precision();
    comm_overlap();
    unmodelled();
    auto names = spelled_;
    a_.spell = [names](const std::string& flag) {
      const auto it = names.find(flag);
      return it != names.end() ? it->second : "--" + flag;
    };
    FrameworkConfig fc = detail::interpret_megatron(a_);
    peft(fc);
    return fc;
  }

 private:
  /// The mapping of top-level section `name`, or a null node; anything else is refused.
  YAML::Node section(const std::string& name) const {
    const YAML::Node n = root_[name];
    if (n && !n.IsNull() && !n.IsMap()) {
      throw ConfigError(where(n) + ": " + name + ": expected a mapping of its fields, got " + kind(n));
    }
    return n && n.IsMap() ? n : YAML::Node();
  }
  YAML::Node get(const std::string& sec, const std::string& key) const {
    const YAML::Node s = section(sec);
    return s ? s[key] : YAML::Node();
  }
  static bool null(const YAML::Node& n) { return !n || n.IsNull(); }
  int line(const YAML::Node& n) const { return n && n.Mark().line >= 0 ? n.Mark().line + 1 : 0; }
  std::string where(const YAML::Node& n) const {
    const int l = line(n);
    return file_ + (l > 0 ? ":" + std::to_string(l) : "");
  }
  static std::string kind(const YAML::Node& n) {
    if (n.IsMap()) return "a mapping";
    if (n.IsSequence()) return "a list";
    return "'" + n.Scalar() + "'";
  }
  [[noreturn]] void fail(const YAML::Node& n, const std::string& name, const std::string& message) const {
    throw ConfigError(where(n) + ": " + name + ": " + message);
  }
  void give(const std::string& flag, const std::string& text, const YAML::Node& at, const std::string& name) {
    a_.given[flag] = {text, key_line(name, at)};
    spelled_[flag] = name;
  }
  /// The line of field `name` ("model.pipeline_model_parallel_layout"): its
  /// key's, where a list or mapping under it starts on the next line; else `at`'s.
  int key_line(const std::string& name, const YAML::Node& at) const {
    const auto dot = name.find('.');
    const YAML::Node map = dot == std::string::npos ? root_ : root_[name.substr(0, dot)];
    const std::string key = dot == std::string::npos ? name : name.substr(dot + 1);
    if (map && map.IsMap()) {
      for (auto it = map.begin(); it != map.end(); ++it) {
        if (it->first.IsScalar() && it->first.Scalar() == key && it->first.Mark().line >= 0) return it->first.Mark().line + 1;
      }
    }
    return line(at);
  }
  void drop(const std::string& flag) { a_.given.erase(flag); }
  void note(const std::string& name, const std::string& value, const std::string& why) {
    a_.unknown.push_back(name + (value.empty() ? "" : "=" + value) + " (" + why + ")");
  }

  /// The peft section: Bridge's LoRA (peft/lora.py) as model.peft,
  /// lora_rank (its dim) and lora_targets (its target_modules): Note [LoRA]
  /// in models/src/peft.cpp. Other schemes are listed as not modelled.
  void peft(FrameworkConfig& fc) const {
    const YAML::Node p = root_["peft"];
    if (null(p)) return;
    const std::string at = where(p) + " (peft)";
    std::string cls = p.IsScalar() ? p.Scalar() : p.IsMap() && p["_target_"] && p["_target_"].IsScalar() ? p["_target_"].Scalar() : "";
    const std::string short_cls = cls.substr(cls.rfind('.') == std::string::npos ? 0 : cls.rfind('.') + 1);
    if (short_cls != "LoRA" && short_cls != "VLMLoRA" && short_cls != "lora") {
      fc.unmodelled.push_back("peft=" + (cls.empty() ? std::string("{...}") : cls) + " (only LoRA is modelled: the whole model priced as trained)");
      return;
    }
    fc.overrides.push_back(Override{"model", "peft", "lora", at});
    if (!p.IsMap()) return;
    if (const YAML::Node d = p["dim"]; !null(d)) {
      if (!d.IsScalar()) fail(d, "peft.dim", "expected LoRA's rank, an integer, got " + kind(d));
      fc.overrides.push_back(Override{"model", "lora_rank", d.Scalar(), where(d) + " (peft.dim)"});
    }
    if (const YAML::Node t = p["target_modules"]; !null(t)) {
      if (!t.IsSequence()) fail(t, "peft.target_modules", "expected a list of module names, got " + kind(t));
      std::string list;
      std::set<std::string> seen;
      for (const YAML::Node& m : t) {
        if (!m.IsScalar()) fail(m, "peft.target_modules", "expected module names, got " + kind(m));
        std::string name = m.Scalar();
        if (name.find('*') != std::string::npos || name.find('.') != std::string::npos) {
          // A pattern ('*.layers.0.*.linear_qkv'): priced on every layer.
          fc.unmodelled.push_back("peft.target_modules=" + name + " (priced as its module on every layer)");
          name = name.substr(name.rfind('.') == std::string::npos ? 0 : name.rfind('.') + 1);
          name.erase(0, name.find_first_not_of('*'));
        }
        if (!name.empty() && seen.insert(name).second) list += (list.empty() ? "" : ", ") + name;
      }
      // An empty list (with exclude_modules: every linear layer but those)
      // leaves LoRA's default targets.
      if (!list.empty()) fc.overrides.push_back(Override{"model", "lora_targets", "[" + list + "]", where(t) + " (peft.target_modules)"});
    }
    if (const YAML::Node e = p["exclude_modules"]; !null(e) && e.IsSequence() && e.size() > 0) {
      fc.unmodelled.push_back("peft.exclude_modules=" + text(e) + " (priced as target_modules' layers)");
    }
    if (const YAML::Node d = p["dropout"]; !null(d) && d.IsScalar() && d.Scalar() != "0" && d.Scalar() != "0.0") {
      fc.unmodelled.push_back("peft.dropout=" + d.Scalar() + " (the adapters' input priced without dropout)");
    }
  }

  /// A scalar's text; a mapping dumped from a Python object (torch dtypes,
  /// enums, functions: megatron/training/config/yaml_utils.py) gives its
  /// _name_ or _target_.
  static std::string text(const YAML::Node& n) {
    if (n.IsScalar()) return n.Scalar();
    if (n.IsMap()) {
      if (n["_name_"] && n["_name_"].IsScalar()) return n["_name_"].Scalar();
      if (n["_target_"] && n["_target_"].IsScalar()) return n["_target_"].Scalar();
      return "{...}";
    }
    if (n.IsSequence()) {
      std::string out = "[";
      for (std::size_t i = 0; i < n.size(); ++i) out += (i ? ", " : "") + text(n[i]);
      return out + "]";
    }
    return "";
  }
  bool boolean(const YAML::Node& n, const std::string& name) const {
    const std::string v = n.IsScalar() ? n.Scalar() : "";
    if (v == "true" || v == "True") return true;
    if (v == "false" || v == "False") return false;
    fail(n, name, "expected true or false, got " + kind(n));
  }
  std::int64_t integer(const YAML::Node& n, const std::string& name, std::int64_t least) const {
    std::int64_t v = 0;
    bool ok = n.IsScalar();
    if (ok) {
      try {
        std::size_t pos = 0;
        v = std::stoll(n.Scalar(), &pos);
        ok = pos == n.Scalar().size();
      } catch (const std::exception&) {
        ok = false;
      }
    }
    if (!ok) fail(n, name, "expected an integer, got " + kind(n));
    if (v < least) fail(n, name, std::to_string(v) + " is below " + std::to_string(least) + "; valid: an integer >= " + std::to_string(least));
    return v;
  }

  void read_field(const Field& f) {
    const YAML::Node n = get(f.section, f.key);
    const std::string name = std::string(f.section) + "." + f.key;
    if (null(n)) return;
    switch (f.type) {
      case Type::kInt: give(f.flag, std::to_string(integer(n, name, 1)), n, name); break;
      case Type::kIntOrOff:
        if (const std::int64_t v = integer(n, name, 0); v > 0) give(f.flag, std::to_string(v), n, name);
        break;
      case Type::kBool:
        if (boolean(n, name)) give(f.flag, "true", n, name);
        break;
      case Type::kNotBool:
        if (!boolean(n, name)) give(f.flag, "true", n, name);
        break;
      case Type::kFloat: {
        bool ok = n.IsScalar();
        try {
          std::size_t pos = 0;
          (void)std::stod(n.Scalar(), &pos);
          ok = ok && pos == n.Scalar().size();
        } catch (const std::exception&) {
          ok = false;
        }
        if (!ok) fail(n, name, "expected a number, got " + kind(n));
        give(f.flag, n.Scalar(), n, name);
        break;
      }
      case Type::kString:
        if (!n.IsScalar()) {
          // cp_comm_type may list one type a layer.
          if (n.IsSequence() && std::string(f.key) == "cp_comm_type") {
            std::set<std::string> kinds;
            for (const auto& e : n) kinds.insert(text(e));
            if (kinds.size() == 1) {
              give(f.flag, *kinds.begin(), n, name);
            } else {
              note(name, text(n), "one type a layer; priced as p2p");
            }
            break;
          }
          fail(n, name, "expected a word, got " + kind(n));
        }
        give(f.flag, n.Scalar(), n, name);
        break;
      case Type::kWords: {
        std::string words;
        if (n.IsSequence()) {
          for (const auto& e : n) {
            if (!e.IsScalar()) fail(n, name, "expected a list of names, got " + kind(e) + " in it");
            words += (words.empty() ? "" : " ") + e.Scalar();
          }
        } else if (n.IsScalar()) {
          words = n.Scalar();
        } else {
          fail(n, name, "expected a list of names, got " + kind(n));
        }
        give(f.flag, words, n, name);
        break;
      }
      case Type::kDtype: {
        // torch.float32 and the like, or the flag's own word.
        std::string v = text(n);
        if (v.rfind("torch.", 0) == 0) v = v.substr(6);
        static const std::map<std::string, std::string> kWords = {
            {"float32", "fp32"}, {"float", "fp32"}, {"fp32", "fp32"}, {"float16", "fp16"}, {"half", "fp16"}, {"fp16", "fp16"},
            {"bfloat16", "bf16"}, {"bf16", "bf16"}, {"uint8", "fp8"}, {"fp8", "fp8"}};
        const auto it = kWords.find(v);
        if (it == kWords.end()) {
          fail(n, name, "expected a torch dtype (torch.float32, torch.float16, torch.bfloat16 or torch.uint8), got " + kind(n));
        }
        give(f.flag, it->second, n, name);
        break;
      }
      case Type::kFreq:
        if (n.IsSequence()) {
          std::string list = "[";
          for (std::size_t i = 0; i < n.size(); ++i) {
            if (!n[i].IsScalar()) fail(n, name, "expected 0 or 1 for each layer, got " + kind(n[i]));
            list += (i ? "," : "") + n[i].Scalar();
          }
          give(f.flag, list + "]", n, name);
        } else if (n.IsScalar()) {
          give(f.flag, n.Scalar(), n, name);
        } else {
          fail(n, name, "expected an integer or a list of 0s and 1s, got " + kind(n));
        }
        break;
    }
  }

  void model_specials() {
    const YAML::Node model = section("model");
    if (!model) return;
    // num_query_groups: grouped-query attention where below the heads
    // (TransformerConfig sets None to num_attention_heads).
    if (a_.given.count("num-query-groups")) {
      const bool mla = a_.given.count("multi-latent-attention") > 0;
      const bool all = a_.given.count("num-attention-heads") && a_.given["num-query-groups"].text == a_.given["num-attention-heads"].text;
      if (mla || all) {
        drop("num-query-groups");
      } else {
        give("group-query-attention", "true", model["num_query_groups"], "model.num_query_groups");
      }
    }
    // The gated unit's activation: SiLU is SwiGLU.
    if (a_.given.count("swiglu")) {
      const YAML::Node f = model["activation_func"];
      const std::string act = null(f) ? "" : text(f);
      if (!act.empty() && act.find("silu") == std::string::npos) {
        note("model.activation_func", act, "a gated unit priced as SwiGLU");
      }
    }
    // Note [Mamba-2] (models/src/llama.cpp): Nemotron-H's providers set
    // activation_func squared_relu; a chunk other than Megatron-Core's 128
    // changes the scan's work a little, which dtsim prices at 128 here.
    const bool hybrid = a_.given.count("hybrid-layer-pattern") || a_.given.count("hybrid-override-pattern");
    if (hybrid && !a_.given.count("swiglu")) {
      const YAML::Node f = model["activation_func"];
      if (!null(f) && text(f).find("squared_relu") != std::string::npos) give("squared-relu", "true", f, "model.activation_func");
    }
    if (const YAML::Node q = model["mamba_chunk_size"]; hybrid && !null(q) && text(q) != "128") {
      note("model.mamba_chunk_size", text(q), "the scan priced in chunks of 128");
    }
    // A hybrid's multi-token prediction depths (Note [Multi-token
    // prediction]): the legacy mtp_hybrid_override_pattern, one depth's
    // layers, run mtp_num_layers times, as the unified pattern's "/" depths.
    if (const YAML::Node m = model["mtp_hybrid_override_pattern"]; !null(m)) {
      const std::string depth = text(m);
      const std::int64_t depths = a_.given.count("mtp-num-layers") ? std::stoll(a_.given["mtp-num-layers"].text) : 0;
      if (!hybrid) {
        note("model.mtp_hybrid_override_pattern", depth, "read only with hybrid_layer_pattern");
      } else if (depths > 0 && a_.given.count(a_.given.count("hybrid-layer-pattern") ? "hybrid-layer-pattern" : "hybrid-override-pattern")) {
        std::string& pattern = a_.given[a_.given.count("hybrid-layer-pattern") ? "hybrid-layer-pattern" : "hybrid-override-pattern"].text;
        if (pattern.find('/') == std::string::npos) {
          for (std::int64_t k = 0; k < depths && k < 64; ++k) pattern += "/" + depth;
        }
      }
    }
    for (const char* ratio : {"hybrid_attention_ratio", "hybrid_mlp_ratio"}) {
      const YAML::Node r = model[ratio];
      if (!hybrid && !null(r) && text(r) != "0" && text(r) != "0.0") {
        note(std::string("model.") + ratio, text(r), "a hybrid built from ratios is not modelled; give hybrid_layer_pattern");
      }
    }
    // Rotary variants cost as rotary positions.
    if (a_.given.count("position-embedding-type")) {
      std::string& p = a_.given["position-embedding-type"].text;
      if (p == "yarn" || p == "mrope") p = "rope";
    }
    // moe_flex_dispatcher_backend under the flex dispatcher: DeepEP's
    // kernels, or HybridEP's, which likewise send a token once to each other
    // NVLink domain holding one of its experts and forward it within the
    // domain (Megatron-Core's moe/fused_a2a.py): both priced as Note [DeepEP].
    if (const YAML::Node b = model["moe_flex_dispatcher_backend"]; !null(b)) {
      const std::string backend = text(b);
      const bool flex = a_.given.count("moe-token-dispatcher-type") && a_.given["moe-token-dispatcher-type"].text == "flex";
      if (flex && (backend == "deepep" || backend == "hybridep")) {
        give("moe-enable-deepep", "true", b, "model.moe_flex_dispatcher_backend");
      } else if (flex) {
        note("model.moe_flex_dispatcher_backend", backend, "priced as the all-to-all dispatcher");
      }
    }
    // FP8 and FP4 recipes are read only with their format (MixedPrecisionConfig
    // carries a recipe name even without FP8).
    if (!a_.given.count("fp8-format")) drop("fp8-recipe");
    if (!a_.given.count("fp4-format")) drop("fp4-recipe");
    // The vocabulary as GPTModelProvider.provide pads it.
    if (a_.given.count("padded-vocab-size")) {
      const YAML::Node pad = model["should_pad_vocab"];
      if (!null(pad) && boolean(pad, "model.should_pad_vocab")) {
        for (const char* flag : {"padded-vocab-size", "make-vocab-size-divisible-by", "tensor-model-parallel-size"}) {
          if (a_.given.count(flag) && std::stoll(a_.given[flag].text) > (std::int64_t{1} << 30)) {
            throw ConfigError(file_ + ":" + std::to_string(a_.given[flag].line) + ": " + spelled_[flag] + ": " + a_.given[flag].text +
                              " is absurd; valid: 1 to " + std::to_string(std::int64_t{1} << 30));
          }
        }
        const std::int64_t raw = std::stoll(a_.given["padded-vocab-size"].text);
        const std::int64_t multiple = (a_.given.count("make-vocab-size-divisible-by") ? std::stoll(a_.given["make-vocab-size-divisible-by"].text) : 128) *
                                      (a_.given.count("tensor-model-parallel-size") ? std::stoll(a_.given["tensor-model-parallel-size"].text) : 1);
        a_.given["padded-vocab-size"].text = std::to_string((raw + multiple - 1) / multiple * multiple);
      }
    } else if (const YAML::Node v = get("tokenizer", "vocab_size"); !null(v)) {
      // Left to the tokenizer: Bridge pads what it reports (should_pad_vocab).
      give("vocab-size", std::to_string(integer(v, "tokenizer.vocab_size", 1)), v, "tokenizer.vocab_size");
    }
    // ddp.grad_reduce_in_fp32 false: 16-bit gradients.
    if (const YAML::Node g = get("ddp", "grad_reduce_in_fp32"); !null(g) && !boolean(g, "ddp.grad_reduce_in_fp32")) {
      give("grad-reduce-in-bf16", "true", g, "ddp.grad_reduce_in_fp32");
    }
    // dataset.sequence_length must equal model.seq_length (ConfigContainer.validate).
    const char* dataset_key = !null(get("dataset", "seq_length")) ? "seq_length" : "sequence_length";
    if (const YAML::Node s = get("dataset", dataset_key); !null(s)) {
      const std::string name = std::string("dataset.") + dataset_key;
      const std::int64_t len = integer(s, name, 1);
      if (!a_.given.count("seq-length")) {
        give("seq-length", std::to_string(len), s, name);
      } else if (a_.given["seq-length"].text != std::to_string(len)) {
        fail(s, name, std::to_string(len) + " differs from model.seq_length " + a_.given["seq-length"].text +
                                               " (Megatron-Bridge asserts they match)");
      }
    }
    // pipeline_model_parallel_layout: Megatron's string, or a list of
    // stages (pp x vp of them, in chunk order), each a list of "embedding",
    // "decoder", "mtp", "loss" (PipelineParallelLayerLayout), written as the
    // string (Note [Pipeline layout] in sim/src/parallel/plan.cpp).
    if (const YAML::Node l = model["pipeline_model_parallel_layout"]; !null(l)) {
      const std::string name = "model.pipeline_model_parallel_layout";
      std::string layout;
      if (l.IsScalar()) {
        layout = l.Scalar();
      } else if (l.IsSequence()) {
        for (std::size_t i = 0; i < l.size(); ++i) {
          if (!l[i].IsSequence()) fail(l, name, "expected a list of stages, each a list of layer types; stage " + std::to_string(i + 1) + " is " + kind(l[i]));
          if (i > 0) layout += '|';
          for (const auto& e : l[i]) {
            const std::string part = e.IsScalar() ? e.Scalar() : "";
            const char symbol = part == "embedding" ? 'E' : part == "decoder" ? 't' : part == "mtp" ? 'm' : part == "loss" ? 'L' : '?';
            if (symbol == '?') {
              fail(l, name, "stage " + std::to_string(i + 1) + ": " + kind(e) + " is not a layer type; valid: embedding, decoder, mtp, loss");
            }
            layout += symbol;
          }
        }
      } else {
        fail(l, name, "expected Megatron's layout string or a list of stages, got " + kind(l));
      }
      give("pipeline-model-parallel-layout", layout, l, name);
    }
    // Optimizers beyond Adam and SGD (Muon, ...) are priced as Adam.
    if (a_.given.count("optimizer")) {
      const std::string o = a_.given["optimizer"].text;
      if (o != "adam" && o != "sgd") {
        note("optimizer.optimizer", o, "priced as Adam");
        drop("optimizer");
      }
    }
  }

  /// mixed_precision: a recipe's name or its fields, written over the model's.
  void precision() {
    const YAML::Node mp = root_["mixed_precision"];
    if (null(mp)) return;
    const std::string name = "mixed_precision";
    for (const char* f : kPrecisionFlags) drop(f);
    if (mp.IsScalar()) {
      std::string want = mp.Scalar();
      std::replace(want.begin(), want.end(), '-', '_');
      const Recipe* r = nullptr;
      std::string valid;
      for (const auto& c : kRecipes) {
        if (want == c.name) r = &c;
        valid += std::string(valid.empty() ? "" : ", ") + c.name;
      }
      if (!r) fail(mp, name, "'" + mp.Scalar() + "' is not one of Megatron-Bridge's recipes: " + valid);
      // Each flag named by the recipe's field that sets it.
      auto set = [&](const char* flag, const std::string& value, const char* field) { give(flag, value, mp, name + "." + field); };
      set(r->fp16 ? "fp16" : "bf16", "true", r->fp16 ? "fp16" : "bf16");
      // bf16_mixed's grad_reduce_in_fp32 is true, fp16_mixed's false.
      set(r->fp16 ? "grad-reduce-in-bf16" : "accumulate-allreduce-grads-in-fp32", "true", "grad_reduce_in_fp32");
      if (*r->fp8) {
        set("fp8-format", r->fp8, "fp8");
        set("fp8-recipe", r->fp8_recipe, "fp8_recipe");
        if (r->param_gather) set("fp8-param-gather", "true", "fp8_param_gather");
      }
      if (r->fp4) {
        set("fp4-format", "e2m1", "fp4");
        set("fp4-recipe", "nvfp4", "fp4_recipe");
        if (r->param_gather) set("fp4-param-gather", "true", "fp4_param_gather");
      }
      if (r->first_last_bf16) {
        set("first-last-layers-bf16", "true", "first_last_layers_bf16");
        set("num-layers-at-start-in-bf16", std::to_string(r->bf16_start), "num_layers_at_start_in_bf16");
        set("num-layers-at-end-in-bf16", std::to_string(r->bf16_end), "num_layers_at_end_in_bf16");
      }
      return;
    }
    if (!mp.IsMap()) fail(mp, name, "expected a recipe's name or a mapping of MixedPrecisionConfig's fields, got " + kind(mp));
    auto on = [&](const char* key) {
      const YAML::Node n = mp[key];
      return !null(n) && boolean(n, name + "." + key);
    };
    auto word = [&](const char* key) -> std::optional<std::pair<std::string, YAML::Node>> {
      const YAML::Node n = mp[key];
      if (null(n)) return std::nullopt;
      if (!n.IsScalar()) fail(n, name + "." + key, "expected a word, got " + kind(n));
      return std::pair{n.Scalar(), n};
    };
    for (const char* key : {"bf16", "fp16"}) {
      if (on(key)) give(key, "true", mp[key], name + "." + key);
    }
    // MixedPrecisionConfig.grad_reduce_in_fp32 defaults to true.
    const YAML::Node g = mp["grad_reduce_in_fp32"];
    const bool fp32_grads = null(g) || boolean(g, name + ".grad_reduce_in_fp32");
    give(fp32_grads ? "accumulate-allreduce-grads-in-fp32" : "grad-reduce-in-bf16", "true", null(g) ? mp : g, name + ".grad_reduce_in_fp32");
    if (const auto fp8 = word("fp8")) {
      give("fp8-format", fp8->first, fp8->second, name + ".fp8");
      // fp8_recipe defaults to tensorwise (MixedPrecisionConfig).
      const auto recipe = word("fp8_recipe");
      give("fp8-recipe", recipe ? recipe->first : "tensorwise", recipe ? recipe->second : fp8->second, name + ".fp8_recipe");
      if (on("fp8_param_gather") || on("fp8_param")) give("fp8-param-gather", "true", mp, name + ".fp8_param_gather");
    }
    if (const auto fp4 = word("fp4")) {
      give("fp4-format", fp4->first, fp4->second, name + ".fp4");
      if (const auto recipe = word("fp4_recipe")) give("fp4-recipe", recipe->first, recipe->second, name + ".fp4_recipe");
      if (on("fp4_param_gather") || on("fp4_param")) give("fp4-param-gather", "true", mp, name + ".fp4_param_gather");
    }
    if (on("first_last_layers_bf16")) {
      // Note [BF16 layers]: MixedPrecisionConfig's counts default to 0.
      give("first-last-layers-bf16", "true", mp["first_last_layers_bf16"], name + ".first_last_layers_bf16");
      for (const char* key : {"num_layers_at_start_in_bf16", "num_layers_at_end_in_bf16"}) {
        std::string flag = key;
        std::replace(flag.begin(), flag.end(), '_', '-');
        const YAML::Node n = mp[key];
        give(flag, null(n) ? "0" : text(n), null(n) ? mp["first_last_layers_bf16"] : n, name + "." + key);
      }
    }
  }

  /// comm_overlap: CommOverlapConfig.setup's defaults under data
  /// parallelism, then the fields given.
  void comm_overlap() {
    const YAML::Node co = root_["comm_overlap"];
    if (null(co)) return;
    const std::string name = "comm_overlap";
    if (!co.IsMap()) fail(co, name, "expected a mapping of CommOverlapConfig's fields, got " + kind(co));
    auto field = [&](const char* key, bool fallback) {
      const YAML::Node n = co[key];
      return null(n) ? fallback : boolean(n, name + "." + key);
    };
    auto at = [&](const char* key) { return null(co[key]) ? co : co[key]; };
    // _get_optimizer_overlap_cfgs: with dp > 1 (which the cluster decides;
    // without it dtsim has no data-parallel traffic to overlap).
    const bool distributed = a_.given.count("use-distributed-optimizer") > 0;
    auto set = [&](const char* flag, bool on, const char* key) {
      if (on) {
        give(flag, "true", at(key), name + "." + key);
      } else {
        drop(flag);
      }
    };
    set("overlap-grad-reduce", field("overlap_grad_reduce", true), "overlap_grad_reduce");
    set("overlap-param-gather", field("overlap_param_gather", distributed) && distributed, "overlap_param_gather");
    if (const YAML::Node b = co["bucket_size"]; !null(b)) {
      if (const std::int64_t v = integer(b, name + ".bucket_size", 0); v > 0) give("ddp-bucket-size", std::to_string(v), b, name + ".bucket_size");
    } else {
      give("ddp-bucket-size", std::to_string(128 * 1024 * 1024), co, name + " (CommOverlapConfig's 128 Mi-element buckets)");
    }
    // _get_model_comm_overlap_cfgs: off unless asked; tensor-parallel
    // overlap only at tp >= 2 with sequence parallelism.
    const std::int64_t tp = a_.given.count("tensor-model-parallel-size") ? std::stoll(a_.given["tensor-model-parallel-size"].text) : 1;
    set("tp-comm-overlap", field("tp_comm_overlap", false) && tp >= 2 && a_.given.count("sequence-parallel"), "tp_comm_overlap");
    // Note [Userbuffers' chunks] (models/src/layers.cpp): a recipe's named
    // configuration (its FP8 ones the ring exchange), or without one
    // Transformer Engine's defaults, as Megatron-LM's flags say them.
    if (a_.given.count("tp-comm-overlap") && !null(co["tp_comm_overlap_cfg"])) {
      give("tp-comm-overlap-cfg", "given", co["tp_comm_overlap_cfg"], name + ".tp_comm_overlap_cfg");
    }
    for (const auto& [flag, key] : {std::pair{"overlap-moe-expert-parallel-comm", "overlap_moe_expert_parallel_comm"},
                                    std::pair{"delay-wgrad-compute", "delay_wgrad_compute"}}) {
      if (!null(co[key])) set(flag, field(key, false), key);
    }
  }

  void unmodelled() {
    for (const auto& [path, why] : kUnmodelled) {
      const std::string p = path;
      const auto dot = p.find('.');
      const YAML::Node n = dot == std::string::npos ? root_[p] : get(p.substr(0, dot), p.substr(dot + 1));
      if (null(n)) continue;
      const std::string v = text(n);
      if (v == "false" || v == "False" || v == "0" || v == "none" || v == "[]" || v == "{}" || v.empty()) continue;
      note(p, n.IsMap() && v == "{...}" ? "" : v, why);
    }
    // The model's class: a GPT is what dtsim prices.
    if (const YAML::Node t = get("model", "_target_"); !null(t) && t.IsScalar()) {
      const std::string cls = t.Scalar();
      // A hybrid with its pattern is modelled (Note [Mamba-2]).
      const bool hybrid = a_.given.count("hybrid-layer-pattern") || a_.given.count("hybrid-override-pattern");
      for (const char* other : {"Mamba", "Hybrid", "NemotronH", "T5", "MIMO", "Mimo"}) {
        if (hybrid && std::string_view(other) != "T5" && std::string_view(other) != "MIMO" && std::string_view(other) != "Mimo") continue;
        if (cls.find(other) != std::string::npos) {
          note("model._target_", cls, "priced as a GPT");
          break;
        }
      }
      // Named after the provider's class (DeepSeekV3ModelProvider: DeepSeekV3).
      const auto last = cls.rfind('.');
      std::string name = last == std::string::npos ? cls : cls.substr(last + 1);
      for (const char* suffix : {"ModelProvider", "Provider"}) {
        const std::string sfx = suffix;
        if (name.size() > sfx.size() && name.compare(name.size() - sfx.size(), sfx.size(), sfx) == 0) {
          name.erase(name.size() - sfx.size());
          break;
        }
      }
      a_.model_name = name;
    }
  }

  YAML::Node root_;
  std::string file_;
  detail::MegatronArgs a_;
  std::map<std::string, std::string> spelled_;
};

}  // namespace

FrameworkConfig parse_megatron_bridge_config(const std::string& yaml_text, const std::string& file) {
  if (yaml_text.size() > kMaxConfigBytes) throw ConfigError(file + ": larger than a config may be");
  const YAML::Node root = parse_config_text(yaml_text, file, false);
  return Reader(root, file).read();
}

FrameworkConfig read_megatron_bridge_config(const std::string& path) {
  return parse_megatron_bridge_config(detail::read_config_text(path), path);
}

}  // namespace dtsim::sim
