#pragma once
// The model zoo, analytic half: GPT-2, BERT, the seeds' Bi-LSTM classifier and
// a generic GPT, each implementing sim::Model. Load by built-in name, from our
// YAML, or from a HuggingFace config.json of the GPT-2 or BERT family.

#include <cstdint>
#include <string>
#include <utility>
#include <vector>

#include "dtsim/sim/config_node.hpp"
#include "dtsim/sim/model.hpp"

namespace dtsim::models {

/// A GPT-2-style decoder (pre-LayerNorm, learned positions, GeLU MLP).
struct GptConfig {
  std::string name = "gpt";
  int layers = 12;                 ///< n_layer
  std::int64_t hidden = 768;       ///< n_embd (h)
  std::int64_t heads = 12;         ///< n_head (a)
  std::int64_t ffn_hidden = 0;     ///< n_inner (0: 4h, as GPT-2)
  std::int64_t vocab = 50257;      ///< vocab_size (V)
  std::int64_t seq_len = 1024;     ///< n_positions: the longest sequence
  bool tied_head = true;           ///< LM head shares the token embedding (GPT-2)
  bool dropout = true;             ///< dropout after attention, residuals, embeddings
};

/// A decoder of the Llama family (HuggingFace LlamaForCausalLM; Mistral,
/// Qwen2 and Qwen3 are the same with the flags below): RMSNorm, rotary
/// positions, grouped-query attention, SwiGLU MLP, no biases by default.
struct LlamaConfig {
  std::string name = "llama";
  /// What the config it was read from holds beyond the language model
  /// (sim::Model::notes): a multimodal config's vision tower.
  std::vector<std::string> notes;
  int layers = 32;                 ///< num_hidden_layers
  std::int64_t hidden = 4096;      ///< hidden_size (h)
  std::int64_t heads = 32;         ///< num_attention_heads (a)
  std::int64_t kv_heads = 0;       ///< num_key_value_heads (0: heads)
  std::int64_t head_dim = 0;       ///< head_dim (0: hidden / heads)
  std::int64_t intermediate = 11008;  ///< intermediate_size (f)
  std::int64_t vocab = 32000;      ///< vocab_size (V)
  std::int64_t seq_len = 4096;     ///< max_position_embeddings
  bool tied_head = false;          ///< tie_word_embeddings
  bool qkv_bias = false;           ///< q/k/v projections have biases (attention_bias; Qwen2)
  bool o_bias = false;             ///< o_proj has a bias (attention_bias)
  bool mlp_bias = false;           ///< mlp_bias
  bool qk_norm = false;            ///< RMSNorm on each head's q and k (Qwen3)
  std::int64_t sliding_window = 0; ///< keys a query sees (Mistral; 0: all)
  double attention_dropout = 0;    ///< attention_dropout on the probabilities (Note [Attention dropout])

  // Gemma (Note [Gemma] in models/src/llama.cpp).
  /// Every global_every-th layer attends to all keys and the others within
  /// sliding_window or attention_chunk (Gemma 2: 2, Gemma 3: 6, Llama 4:
  /// 4); 0: the window or chunks, if any, on every layer.
  int global_every = 0;
  bool gemma_norms = false;        ///< Gemma's RMSNorm (fp32, times 1 + weight), four a block (sandwich norms in Gemma 2 and 3)
  bool gelu = false;               ///< the MLP's gate through tanh-approximated GELU (GeGLU) instead of SiLU (hidden_activation)
  bool embed_scale = false;        ///< the embeddings times sqrt(hidden) (Gemma)
  double attn_softcap = 0;         ///< attn_logit_softcapping: scores = cap tanh(scores / cap) (Gemma 2; 0: none)
  double final_softcap = 0;        ///< final_logit_softcapping on the logits (Gemma 2; 0: none)
  /// OLMo 2's norms (Note [OLMo 2] in llama.cpp): the attention's and the
  /// MLP's outputs normed before their residuals, no norm before either,
  /// and the q/k norms (qk_norm) over all heads at once.
  bool olmo2_norms = false;
  /// q and k normed over their whole projections (a d and kv d weights)
  /// rather than each head apart: MiniMax-M2's (Note [MiniMax-M2] in
  /// llama.cpp); OLMo 2's norms are so without this.
  bool whole_qk_norm = false;
  // Granite's scalars (Note [Granite] in llama.cpp); 0: the op is not there.
  double embedding_multiplier = 0;  ///< the embeddings times this
  double residual_multiplier = 0;   ///< each attention and MLP output times this before its residual
  double logits_scaling = 0;        ///< the logits divided by this before the loss
  // gpt-oss (Note [gpt-oss] in llama.cpp).
  bool attention_sinks = false;    ///< a learned logit per head joins every row of scores before the softmax (GptOssAttention.sinks)
  double swiglu_limit = 0;         ///< the gated MLPs' clamped SwiGLU: gate <= limit, |up| <= limit, (up + 1) gate sigmoid(1.702 gate) (0: SiLU's)
  bool fp32_norm_weight = false;   ///< the norms' weight multiplies their fp32 output before the cast back (GptOssRMSNorm)
  // Gemma 4 (Note [Gemma 4] in models/src/llama.cpp): its global layers'
  // own attention shape.
  std::int64_t global_head_dim = 0;  ///< the global layers' head width (global_head_dim; 0: head_dim)
  std::int64_t global_kv_heads = 0;  ///< their key/value heads (num_global_key_value_heads; 0: kv_heads)
  /// The global layers' values are their keys' projection, no v_proj
  /// (attention_k_eq_v).
  bool k_eq_v = false;
  bool v_norm = false;             ///< a weightless RMSNorm on every value head (Gemma 4's)
  /// Gemma 4's MoE block: the dense MLP (shared_intermediate) and the
  /// experts each between their own pre- and post-norms, summed and normed
  /// again; the router on a weightless norm times a learned scale.
  bool moe_branch_norms = false;
  /// Gemma 4 E2B's and E4B's per-layer embeddings (hidden_size_per_layer_input;
  /// 0: none): a ple_dim-wide input for every layer from a table of
  /// ple_vocab rows (vocab_size_per_layer_input; 0: vocab) and a projection
  /// of the embedding, gated into each layer's output.
  std::int64_t ple_dim = 0;
  std::int64_t ple_vocab = 0;
  /// The last kv_shared_layers layers compute no keys or values: each
  /// attends with those of the last earlier layer of its kind, local or
  /// global (num_kv_shared_layers).
  int kv_shared_layers = 0;
  /// Those layers' MLPs are twice intermediate wide (use_double_wide_mlp: E2B).
  bool double_wide_mlp = false;
  /// Set by the model on the twin that makes those layers, not a key.
  bool reuses_kv = false;
  // Llama 4 (Note [Llama 4] in models/src/llama.cpp).
  /// Local layers attend within chunks of this many tokens, each query to
  /// the keys of its own chunk up to itself (attention_chunk_size; 0: none).
  std::int64_t attention_chunk = 0;
  bool nope_global = false;        ///< the global layers have no rotary positions (no_rope_layers)
  bool attn_temperature = false;   ///< those layers scale each query by a temperature of its position (attn_temperature_tuning)
  /// Ministral 3's query scaling (Note [Ministral 3] in llama.cpp): every
  /// layer's queries times 1 + beta log(1 + floor(p / length)), in their
  /// own dtype (rope_parameters' llama_4_scaling_beta and
  /// original_max_position_embeddings; 0: none).
  double q_scaling_beta = 0;
  std::int64_t q_scaling_length = 0;
  bool l2_qk_norm = false;         ///< q and k L2-normalised, no weight, on the local layers (use_qk_norm)
  // Qwen3-Next and Qwen3.5 (Note [Gated DeltaNet] in models/src/llama.cpp).
  /// Every full_attention_interval-th layer attends (softmax attention) and
  /// the others are Gated DeltaNet linear attention (0: no such layers).
  int full_attention_interval = 0;
  std::int64_t linear_key_heads = 16;    ///< linear_num_key_heads
  std::int64_t linear_value_heads = 32;  ///< linear_num_value_heads
  std::int64_t linear_key_dim = 128;     ///< linear_key_head_dim
  std::int64_t linear_value_dim = 128;   ///< linear_value_head_dim
  std::int64_t linear_conv_kernel = 4;   ///< linear_conv_kernel_dim
  /// The attention layers' q_proj also writes a gate a head: the output
  /// times sigmoid(gate) before o_proj (Qwen3NextAttention); with latent
  /// attention, a g_proj of its own (Kimi K3's: Note [Kimi K3]).
  bool attn_output_gate = false;
  // Kimi Linear and Kimi K3 (Note [Kimi Delta Attention] in models/src/llama.cpp).
  /// The linear layers are Kimi Delta Attention: q, k and v each
  /// linear_value_heads x linear_value_dim wide, a decay a channel from a
  /// low-rank f_a, f_b (linear_value_dim wide) rather than a head's scalar.
  bool kda = false;
  /// Rank of KDA's output gate (Kimi Linear's g_a_proj, g_b_proj: its
  /// head_dim); 0: one full-width g_proj (Kimi K3's).
  std::int64_t kda_gate_rank = 0;
  /// The MLPs' and experts' activation is SiTU (Kimi K3's hidden_act
  /// "situ": 4 tanh(g / 4) sigmoid(g) times 25 tanh(u / 25), in fp32 as
  /// composite ops) rather than SiLU's.
  bool situ = false;
  /// Latent MoE's combined output is RMS-normed on the latent before
  /// fc2_latent_proj (Kimi K3's latent_moe_use_norm: routed_expert_norm).
  bool latent_norm = false;
  /// Block Attention Residuals (Kimi K3's attn_res_block_size; 0: a plain
  /// residual): Note [Attention residuals] in models/src/llama.cpp.
  int attn_res_block = 0;
  /// RMSNorms computed in fp32 and scaled by 1 + weight, two a block
  /// (Qwen3NextRMSNorm, Gemma 3's norm without Gemma's four).
  bool zero_centered_norms = false;
  // Mamba-2 hybrids (Note [Mamba-2] in models/src/llama.cpp).
  /// Megatron-Core's hybrid layer pattern (NemotronHConfig's
  /// hybrid_override_pattern), a letter a layer, each layer one part with
  /// its own pre-norm and residual: M a Mamba-2 mixer, * attention, - the
  /// MLP, E the mixture of experts. Empty: every layer a block (attention,
  /// then the MLP).
  std::string hybrid_pattern;
  /// Which blocks mix their tokens through Mamba-2 (M), linear attention
  /// (L: Gated DeltaNet's, or Kimi Delta Attention's with kda) or attention
  /// (*), a letter a layer (Granite 4.0-H's layer_types, Kimi's
  /// kda_layers), each a whole block with its MLP after; empty: none.
  std::string layer_mixers;
  std::int64_t mamba_heads = 0;        ///< mamba_num_heads (0: 2 hidden / mamba_head_dim)
  std::int64_t mamba_head_dim = 64;    ///< mamba_head_dim (P)
  std::int64_t mamba_state = 128;      ///< ssm_state_size (N)
  std::int64_t mamba_groups = 8;       ///< n_groups (G): B and C are shared by the heads of a group
  std::int64_t mamba_conv_kernel = 4;  ///< conv_kernel
  std::int64_t mamba_chunk = 128;      ///< chunk_size of the chunked scan (Q)
  /// The MLPs and experts are up, squared ReLU, down, without a gate
  /// (mlp_hidden_act relu2; Megatron-LM's --squared-relu).
  bool squared_relu = false;
  /// Rotary positions on the attention layers; false: none at all
  /// (Nemotron-H's attention, Megatron-LM's --position-embedding-type none).
  bool rotary = true;

  // Mixture of experts (Mixtral, Qwen2-MoE, Qwen3-MoE, DeepSeek-V3); 0
  // experts: a dense model. Note [Mixture of experts] in models/src/llama.cpp.
  int experts = 0;                 ///< routed experts per MoE layer (num_local_experts, num_experts, n_routed_experts)
  int top_k = 2;                   ///< experts each token is routed to (num_experts_per_tok)
  std::int64_t expert_intermediate = 0;  ///< a routed expert's SwiGLU width (moe_intermediate_size; Mixtral: intermediate_size)
  std::int64_t shared_intermediate = 0;  ///< the shared experts' width together (0: none)
  bool shared_expert_gate = false; ///< Qwen2-MoE's sigmoid gate (h x 1) on the shared expert
  bool router_bias = false;        ///< a learned bias per expert on the router (counted as a parameter)
  int first_dense = 0;             ///< leading layers with a dense MLP (DeepSeek's first_k_dense_replace)
  int moe_step = 1;                ///< every moe_step-th layer is MoE (Qwen's decoder_sparse_step)
  /// Nodes a token's experts may span (DeepSeek-V3's node-limited routing:
  /// topk_group of n_group expert groups, a group a node; 0: no limit),
  /// which DeepEP's pricing uses (Note [DeepEP] in sim/src/cost/cost_comm.cpp).
  int route_nodes = 0;
  /// The routed experts' width (Megatron-Core's moe_latent_size, Nemotron
  /// 3 Super's and Ultra's LatentMoE; 0: hidden): each token is projected
  /// down to it before dispatch and back after combine (Note [Latent MoE]
  /// in models/src/llama.cpp).
  std::int64_t moe_latent = 0;
  /// Multi-token prediction depths trained beside the model (Megatron-Core's
  /// --mtp-num-layers; DeepSeek-V3's num_nextn_predict_layers, which
  /// HuggingFace's model skips, so 0 by default): Note [Multi-token
  /// prediction] in models/src/llama.cpp.
  int mtp_layers = 0;
  /// The depths share one layer's weights, run mtp_layers times
  /// (Megatron-Core's mtp_use_repeated_layer: Nemotron 3 Super's).
  bool mtp_repeated = false;

  // Multi-head latent attention (DeepSeek-V2/V3; kv_lora_rank 0: none).
  std::int64_t q_lora_rank = 0;    ///< q_lora_rank (0: a full q_proj)
  std::int64_t kv_lora_rank = 0;   ///< kv_lora_rank
  std::int64_t qk_nope_dim = 0;    ///< qk_nope_head_dim
  std::int64_t qk_rope_dim = 0;    ///< qk_rope_head_dim
  std::int64_t v_head_dim = 0;     ///< v_head_dim
  // DeepSeek Sparse Attention (DeepSeek-V3.2, GLM-5; Note [DeepSeek Sparse
  // Attention] in models/src/llama.cpp): a lightning indexer picks each
  // query's index_topk keys of its latent attention (0: dense attention).
  std::int64_t index_topk = 0;      ///< index_topk
  std::int64_t index_heads = 64;    ///< index_n_heads
  std::int64_t index_head_dim = 128;  ///< index_head_dim
  /// Which layers run their own indexer (F) and which reuse the top-k of the
  /// last layer that did (S), a letter a layer; empty: every layer runs one
  /// (GLM-5's indexer_types, Megatron-Core's dsa_indexer_topk_freq).
  std::string indexer_layers;
  /// How the indexer trains: 'S' against the main attention over the
  /// selected keys (DeepSeek-V3.2's sparse stage), 'D' over every key
  /// (Megatron-Core's dense KL loss), 'N' not at all (no loss coefficient).
  char index_loss = 'S';
  /// The kernels: sparse (FlashMLA's, TileLang's: the selected keys alone)
  /// or Megatron-Core's dsa_kernel_backend none (masked dense attention).
  bool dsa_dense = false;

  // DeepSeek-V4 (Note [DeepSeek-V4] in models/src/llama.cpp): each layer
  // attends, in one head of head_dim shared by keys and values, to a
  // sliding_window of its own tokens and to compressed entries of its
  // sequence; the indexer (index_*) picks those of the ratio-4 layers.
  /// compress_ratios: each layer's, then each MTP depth's: 0 (the window
  /// alone), 4 (compressed sparse attention) or 128 (heavily compressed
  /// attention); empty: not DeepSeek-V4's attention.
  std::vector<int> compress_ratios;
  std::int64_t o_groups = 0;       ///< o_groups: the output's grouped low-rank projection (wo_a) has this many groups
  std::int64_t o_lora_rank = 0;    ///< o_lora_rank: each group's rank
  /// hc_mult: residual streams of the manifold-constrained hyper-connections
  /// (Note [Hyper-connections] in models/src/llama.cpp); 0: a plain residual.
  int hc_mult = 0;
  int hc_sinkhorn_iters = 20;      ///< hc_sinkhorn_iters: the Sinkhorn iterations making each H_res doubly stochastic
};

/// A BERT encoder (post-LayerNorm), with the pooler as HuggingFace's BertModel.
struct BertConfig {
  std::string name = "bert";
  int layers = 12;                       ///< num_hidden_layers
  std::int64_t hidden = 768;             ///< hidden_size
  std::int64_t heads = 12;               ///< num_attention_heads
  std::int64_t intermediate = 3072;      ///< intermediate_size
  std::int64_t vocab = 30522;            ///< vocab_size
  std::int64_t max_positions = 512;      ///< max_position_embeddings
  std::int64_t type_vocab = 2;           ///< type_vocab_size
  bool pooler = true;                    ///< BertModel's pooler (dense + tanh)
  std::int64_t num_labels = 0;           ///< classifier head on the pooler (0: none)
  bool dropout = true;
  /// BertForMaskedLM's head: a dense + GeLU + LayerNorm transform and a
  /// decoder to the vocabulary tied to the word embeddings, with its own
  /// bias (HuggingFace's BertOnlyMLMHead); that class has no pooler.
  bool mlm_head = false;
};

/// The seeds' classifier: a bidirectional LSTM over precomputed embeddings,
/// then a linear head (seed 000: 768-wide GPT-2/BERT embeddings, 33 classes).
struct BiLstmConfig {
  std::string name = "bilstm";
  std::int64_t input_size = 768;   ///< embedding width
  std::int64_t hidden = 256;       ///< LSTM hidden size per direction
  int layers = 2;                  ///< stacked LSTM layers
  bool bidirectional = true;
  std::int64_t classes = 33;       ///< output classes
  std::int64_t seq_len = 512;      ///< embeddings per sequence
};

/// Seed 003's image and feed-forward networks (models/src/convnet.cpp, Note
/// [Convolutions]): torchvision's VGG, PyTorch's CIFAR-10 tutorial CNN, a
/// multilayer perceptron and a convolutional autoencoder. Inputs are square
/// images of `channels` x `image_size` x `image_size`; a sample is one image
/// (plan.seq_len 1).
struct ConvNetConfig {
  enum class Arch { kVgg, kCnn, kMlp, kConvAutoencoder };
  std::string name = "cnn";
  Arch arch = Arch::kCnn;
  std::int64_t image_size = 32;
  std::int64_t channels = 3;
  std::int64_t classes = 10;
  bool batch_norm = false;         ///< batch norm after each convolution (torchvision's vgg*_bn)
  bool dropout = false;            ///< dropout (p 0.5) after each hidden linear layer (VGG's classifier)
  // VGG
  char vgg_config = 'A';           ///< torchvision cfgs: A (VGG11), B (13), D (16), E (19)
  std::int64_t width = 64;         ///< the first convolutions' channels (the others scale with it)
  std::int64_t fc = 4096;          ///< the classifier's hidden width
  std::int64_t pool_size = 7;      ///< the adaptive average pool's side
  // CNN: 5 x 5 convolutions, each with ReLU and a 2 x 2 max pool; then hidden linear layers
  std::vector<std::int64_t> conv_channels{6, 16};  ///< also the autoencoder's stride-2 convolutions
  std::int64_t kernel = 5;
  std::int64_t padding = 0;
  std::vector<std::int64_t> hidden{120, 84};       ///< hidden linear widths (CNN, MLP)
  // Autoencoder
  std::int64_t latent = 64;        ///< channels of the 1 x 1 code
};

/// Neural bag of words (models/src/text.cpp): EmbeddingBag (mean) + linear.
struct NbowConfig {
  std::string name = "nbow";
  std::int64_t vocab = 21635;
  std::int64_t embed = 300;
  std::int64_t classes = 2;
  std::int64_t seq_len = 256;      ///< tokens per text
};

/// LSTM or GRU encoder-decoder with teacher forcing (Note [Encoder-decoder]).
struct Seq2SeqConfig {
  enum class Cell { kLstm, kGru };
  std::string name = "seq2seq";
  Cell cell = Cell::kLstm;         ///< torch.nn.LSTM or torch.nn.GRU (Note [GRU memory])
  std::int64_t src_vocab = 7853;
  std::int64_t tgt_vocab = 5893;
  std::int64_t embed = 256;
  std::int64_t hidden = 512;
  int layers = 2;
  bool dropout = true;             ///< p 0.5 on the embeddings and between recurrent layers
  std::int64_t seq_len = 32;       ///< tokens of a source and of a target sentence
};

/// Throws ConfigError ("model.KEY: why") if a convolution's kernel or a
/// pool does not fit what reaches it.
sim::ModelPtr make_convnet(const ConvNetConfig& c);
/// That problem as {key, why}, or empty strings: the loaders report it
/// where the key stands in the file. `image_changed`: the user changed the
/// image and not the kernels, so a kernel too large for its input is said
/// of image_size.
std::pair<std::string, std::string> convnet_problem(const ConvNetConfig& c, bool image_changed = false);
sim::ModelPtr make_nbow(const NbowConfig& c);
sim::ModelPtr make_seq2seq(const Seq2SeqConfig& c);
/// torchvision's VGG configuration ('A', 'B', 'D', 'E'): channels per
/// 3 x 3 convolution, 0 for a max pool; empty for an unknown letter.
std::vector<int> vgg_config(char config);

sim::ModelPtr make_gpt(const GptConfig& c);
sim::ModelPtr make_bert(const BertConfig& c);
sim::ModelPtr make_llama(const LlamaConfig& c);
sim::ModelPtr make_bilstm(const BiLstmConfig& c);

/// LoRA fine-tuning as Megatron-Bridge runs it (Note [LoRA] in
/// src/peft.cpp): the base model frozen, adapters of rank `rank` beside the
/// linear layers `targets` names (Megatron-Core's module names).
struct LoraConfig {
  std::int64_t rank = 32;  ///< LoRA.dim
  /// LoRA.target_modules (its default: every linear layer of a block)
  std::vector<std::string> targets = {"linear_qkv", "linear_proj", "linear_fc1", "linear_fc2"};
  /// The blocks' linear weights as stored: 16-bit; QLoRA's 4-bit
  /// NormalFloat (Note [QLoRA] in src/peft.cpp; `peft: qlora`); or
  /// bitsandbytes' LLM.int8 (Note [8-bit base]; `peft: lora_int8`); or
  /// every frozen weight in fp32 under 16-bit autocast (Note [fp32 base];
  /// `peft: lora_fp32`).
  enum class Base { k16, kNf4, kInt8, kFp32 };
  Base base = Base::k16;
};
/// `base` fine-tuned with LoRA: its layers' trained parameters are the
/// adapters', the base's frozen (sim::Layer::frozen_params).
sim::ModelPtr make_lora(sim::ModelPtr base, const LoraConfig& c);
/// The module names LoraConfig::targets may name for `model`: Megatron-Core's
/// in the order its first layers run them ("linear_qkv", "linear_proj", ...),
/// then HuggingFace PEFT's where the model has Llama's projections
/// ("q_proj", "k_proj", ..., "down_proj").
std::vector<std::string> lora_modules(const sim::Model& model);
/// Whether `module` is HuggingFace PEFT's name of one projection ("q_proj",
/// ..., "down_proj") rather than Megatron-Core's of a fused module.
bool lora_hf_module(const std::string& module);

/// Built-in names: gpt2, gpt2-medium, gpt2-large, gpt2-xl, bert-base,
/// bert-large, bilstm, and the tiny ones for CPU validation.
std::vector<std::string> builtin_names();
/// The HuggingFace hub's cache folder, as huggingface_hub finds it
/// offline: HF_HUB_CACHE, HUGGINGFACE_HUB_CACHE, HF_HOME/hub,
/// XDG_CACHE_HOME/huggingface/hub or ~/.cache/huggingface/hub.
std::string huggingface_hub_cache();
/// One-line description of a built-in model ("GPT-2 124M: 12 layers, h=768").
std::string describe_builtin(const std::string& name);

/// Loads a model: a built-in name, a YAML file (`family: gpt|gpt2|bert|bilstm`
/// plus that family's keys), a HuggingFace config.json (of the model_types
/// models/README.md lists), a model's folder holding one, or a hub
/// repository ("ORG/NAME") in the HuggingFace cache (Note [HuggingFace
/// cache] in src/zoo.cpp). `--set model.KEY=VALUE` overrides apply to any
/// of them. Throws ConfigError / IoError with file, line and key.
sim::ModelPtr load_model(const std::string& name_or_path,
                         const std::vector<sim::Override>& overrides = {});

/// Parses a model from text already read (the Python module's dicts): a
/// mapping with `model_type` is a HuggingFace config (named from
/// _name_or_path, else its model_type), else our YAML (`family:`, named
/// from `name`, else "model"). `json` parses it as strict JSON; `file`
/// names it in errors. Throws ConfigError as load_model.
sim::ModelPtr parse_model(const std::string& text, const std::string& file, bool json,
                          const std::vector<sim::Override>& overrides = {});

}  // namespace dtsim::models
