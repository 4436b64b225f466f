// The Llama family of dense decoders (HuggingFace LlamaForCausalLM, and
// Mistral, Qwen2, Qwen3, Phi-3, Granite and OLMo 2, which differ from it
// only in biases, q/k norms, where its norms stand, sliding windows and
// scalars): token embedding, n pre-RMSNorm blocks of grouped-
// query attention with rotary positions and a SwiGLU MLP, a final RMSNorm
// and an LM head (tied to the embedding or not).
#include <algorithm>
#include <bit>
#include <cmath>
#include <map>
#include <memory>
#include <optional>
#include <utility>

#include "dtsim/models/models.hpp"
#include "layers.hpp"

namespace dtsim::models {
namespace {

using namespace detail;

// Note [Llama activations]
// What PyTorch's autograd keeps for one block as HuggingFace writes it
// (modeling_llama.py), t tokens on this rank, e-byte activations, g bytes
// for a saved GEMM input (e, or 1 under FP8: Note [FP8 activations]):
//   RMSNorm (x2)   x.to(float32) kept by pow and mul (4 th), rsqrt (4 t), the
//                  normalised x.to(dtype) kept by the weight's mul (e th);
//                  its output is the next GEMM's input (g th)
//   attention      Q, K, V after rotary (rotary keeps only cos and sin),
//                  the core (Note [Attention as it runs]; HF's eager softmax
//                  runs in fp32: fp32_softmax), the o_proj input (a
//                  contiguous copy of the heads' output; under fused
//                  attention its output O is kept too)
//   q/k norms      (Qwen3) RMSNorm over each head: (4 + e) per element
//   SwiGLU         gate output (kept by silu), silu's output and up's output
//                  (kept by their product), down_proj's input: 3e + g per
//                  element of the t x f intermediate
// Fused kernels keep less: Transformer Engine's and Apex's RMSNorm keep the
// input and rsqrt (e th + 4 t), Megatron-Core's fused SwiGLU keeps gate and
// up only (2e per element); dtsim prices the composite ops that HuggingFace,
// torchtitan without compile and dtsim validate's LibTorch twins run.
// Note [Fused kernels]
// Megatron-Core runs those two as single kernels (plan.kernels: fused):
// Transformer Engine's RMSNorm (fused into TELayerNormColumnParallelLinear
// under its default --transformer-impl transformer_engine; Apex's
// FusedRMSNorm under local) saves its input and rsigma, e th + 4 t, for a
// backward that recomputes the rest (transformer_engine/pytorch/module/
// layernorm_linear.py, ctx.save_for_backward of inputmat and rsigma), where
// the composite norm also keeps x.to(float32), 4 th more; and with
// --bias-swiglu-fusion (Megatron-LM's default) the SwiGLU is
// megatron/core/fusions/fused_bias_swiglu.py's SwiGLUFunction, which saves
// its input (gate and up, one tensor) and recomputes silu in backward:
// 2e + g per element of t x f, one e less than silu's output kept
// beside them. As kernels, the norm reads its input and writes its output
// once (the composite's fp32 copies are not made) and the SwiGLU writes one
// tensor, not two. MoE experts' and shared experts' SwiGLU fuse as the
// dense one (experts.py's activation under bias_activation_fusion), as do
// q/k norms and Gemma's four (TE's zero_centered_gamma) and GeGLU
// (fused_bias_geglu.py). GPT-2's and BERT's LayerNorm is one ATen kernel
// that saves its input, mean and rstd either way: the knob moves only this
// family. Calibration times PyTorch's composite blocks, so a fused block is
// a signature of its own (fk=1) and a profile prices it by formula.
// Note [Attention dropout]
// HuggingFace's eager attention drops the probabilities after its fp32
// softmax and cast (nn.functional.dropout(attn_weights, p=attention_dropout,
// training), modeling_llama.py eager_attention_forward): where the config's
// attention_dropout is above 0, autograd keeps the mask (mask_bytes an
// element), and the GEMM with V keeps the dropped probabilities in place of
// the cast ones it kept before, so in 16-bit training the mask is all it
// adds (in fp32, with no cast, the dropped copy too: e + mask); an
// elementwise kernel runs over the scores (attention_core in layers.cpp,
// as GPT-2's dropout). Every shipped Llama-family config has
// 0.0, which prices nothing. A fused kernel draws its mask from the RNG
// state again in backward and keeps nothing more (FlashAttention-2's
// Philox dropout), and its cost of drawing is not priced; nor is the
// p2p ring's, which no shipped config asks for. The block's signature
// carries it (adrop=, thousandths; GPT-2's drop= is a flag), so a profile never prices it with a
// block timed without; the LibTorch twin refuses it, and validate
// before it starts anything.
// Note [Op-level recompute]
// torchtitan's selective activation checkpointing with selective_ac_option
// "op" (torchtitan/distributed/activation_checkpoint.py,
// _apply_op_sac: create_selective_checkpoint_contexts with a policy that
// saves the outputs of mm, SDPA, reduce_scatter and max "except every second
// mm", counting the block's mms in forward order; every other op is
// recomputed). A torchtitan Llama block calls wq, wk, wv, wo, w1, w3, w2 in
// that order (model.py: Attention.forward, FeedForward.forward as
// w2(silu(w1(x)) * w3(x))), so it keeps wq's, wv's, SDPA's (O and the
// log-sum-exp), w1's and w2's outputs, and the checkpoint's input x:
//   kept = e (th + q + kv + q + t f + th) + 4 t a
// and its backward reruns the norms, wk, rotary, wo, the attention
// residual, w3 and the SwiGLU product before the block's own backward
// (early_stop: not the last residual, which nothing needs). Described for
// dense blocks at tp 1 and cp 1 with fused attention (the op policy's
// tensor-parallel all-gathers, which it does not save and so reruns, and
// ring attention's are not); elsewhere a block leaves op_recompute empty
// and resolve refuses the plan.
// Note [Megatron's recompute modules]
// Megatron-Core's selective recompute of the modules --recompute-modules
// names (Note [Recompute modules] in sim/include/dtsim/sim/model.hpp), as
// its Transformer Engine layer spec builds a block
// (megatron/core/models/gpt/gpt_layer_specs.py): a standard block's input
// norm is fused into the QKV projection (TELayerNormColumnParallelLinear)
// and a dense block's pre-MLP norm into fc1, so only an MLA block's input
// norm and a MoE block's pre-MLP norm are modules of their own. Each part
// frees what this family counts it keeping beyond its input (which the
// checkpoint keeps) and reruns its forward kernels before the backward:
//   core_attn       the attention core, where it is not fused (its
//                   saved scores and softmax; attention.py)
//   layernorm       each such norm (transformer_layer.py,
//                   CheckpointWithoutOutput): what the norm keeps beyond
//                   its input, and the GEMM input it feeds (its output),
//                   freed once consumed; the norm reruns
//   moe_act         the experts' activation (experts.py): everything its
//                   SwiGLU keeps but fc1's output, fc2's input with it;
//                   the activation reruns
//   mla_up_proj     MLA's up-projections with their fused latent norms
//                   and RoPE (multi_latent_attention.py,
//                   qkv_up_proj_and_rope_apply): the norms' keeps beyond
//                   the latents, the up-projections' inputs, and Q, K and V,
//                   freed once the core has run; q_b_proj, kv_b_proj,
//                   their norms and rotary rerun
//   mlp             a dense block's MLP (checkpoint of the whole module,
//                   its fused pre-MLP norm with it): the norm's keeps
//                   beyond its input, fc1's input and the SwiGLU's; the
//                   norm and the three kernels rerun
//   shared_experts  a MoE block's shared experts (shared_experts.py): their
//                   SwiGLU's keeps, their gate's product; their kernels
//   moe             the whole MoE layer (moe_layer.py, checkpoint): all it
//                   keeps beyond its input; its kernels and its forward
//                   all-to-alls rerun (Layer::recompute_ep); moe_act and
//                   shared_experts inside it are not counted again
// The tensor-parallel collectives of a rerun MLP (sequence parallelism's
// all-gather before fc1) are not priced, nor Transformer Engine's
// requantisation of an FP8 GEMM input kept in 16 bits under layernorm and
// moe_act (set_save_original_input). Gemma's and OLMo 2's norms are not
// Megatron's: their blocks describe no layernorm part, and their mlp part
// without the norm.
// Note [Multi-token prediction]
// DeepSeek-V3 trains D multi-token prediction depths beside the model
// (DeepSeek-AI 2024, "DeepSeek-V3 Technical Report", section 2.2), as
// Megatron-Core's --mtp-num-layers runs them
// (megatron/core/transformer/multi_token_prediction.py): depth k embeds the
// tokens shifted by k with the shared embedding table, normalises that
// (enorm) and the hidden state it takes (hnorm: the main model's last
// block's output, then the depth before's), concatenates the two and
// projects 2h -> h (eh_proj, column-parallel: its input all-gathered under
// sequence parallelism, its output gathered over tp), runs one transformer
// block (a MoE block where the model has experts), its final norm, and the
// shared output head with its own cross-entropy. As Megatron's pipeline
// layouts split them ("mL": the depths, then the loss), each depth up to
// its final norm is a layer of its own after the blocks (mtp.k, passing
// the model's hidden state and its own on), and the head layer runs the
// shared head and loss over each; a pipeline counted in blocks puts them
// on the last stage with the head, as Megatron does by default. The
// embedding table is the copy a stage other than the first keeps
// (Layer::borrowed_params), the block's recompute parts go with the depth.
// Full recompute does not rerun a depth here; under FP8 its GEMMs run in
// FP8 as a block's (Layer::fp8_as_block), the head's pass in bf16 as the
// head's. HuggingFace's model
// skips the checkpoint's MTP layers, so model.mtp_layers is 0 unless set
// (--megatron-args reads --mtp-num-layers). A hybrid's depth (Megatron-
// Core's unified pattern "main/*E/*E", hybrid_layer_allocation.py; the
// legacy mtp_hybrid_override_pattern) is one attention layer and one MoE
// (or MLP) layer, each with its norm: the block this depth runs, since
// hybrid attention has no rotary positions either. Under
// mtp_use_repeated_layer (model.mtp_repeated; Nemotron 3 Super's and
// Ultra's recipes) one depth's weights run every depth
// (MultiTokenPredictionBlock builds one layer), so depths after the first
// own no parameters; their gradients add into the first's. The embedding
// table a stage other than the first keeps is one copy for all depths.
// Note [Multi-head latent attention]
// DeepSeek-V2/V3 (modeling_deepseek_v3.py, DeepseekV3Attention) compress
// queries and keys/values through low-rank latents: q_a_proj (h -> q_lora),
// an RMSNorm, q_b_proj (-> heads x (nope + rope)); kv_a_proj_with_mqa (h ->
// kv_lora + rope, the rope part one key shared by every head), an RMSNorm
// on the latent, kv_b_proj (-> heads x (nope + v)); rotary on the rope
// parts; attention with query/key width nope + rope (192) and value width v
// (128) over all heads; o_proj. Under tensor parallelism (Megatron-Core's
// MLASelfAttention) the down-projections and their norms are replicated and
// the up-projections and o_proj split by heads. Kept for backward as the
// composite ops keep them: each latent's norm ((4 + e) per element) and its
// up-projection's input, Q and K at 192 and V at 128 per head, o_proj's
// input, and the core.
// Note [DeepSeek-V2]
// DeepSeek-V2 and V2-Lite (DeepSeek-AI 2024, "DeepSeek-V2", section 2 and
// appendix B: 236B and 15.7B parameters, 21B and 2.4B active;
// modeling_deepseek_v2.py) are DeepSeek-V3's layers with three
// differences, none of which changes the work priced: the router is a
// softmax, not a sigmoid (one pass over t x E either way); V2-Lite has no
// query latent (q_lora_rank null: a full q_proj, q_lora_rank 0 here); and
// V2 limits each token's experts to topk_group = 3 of n_group = 8 groups
// (topk_method group_limited_greedy, the paper's device-limited routing,
// M = 3), route_nodes here, where V2-Lite routes greedily over all 64.
// Neither checkpoint has a multi-token prediction layer. torchtitan's
// deepseek_v3 flavors 16B and 236B are these shapes.
// Note [DeepSeek Sparse Attention]
// DeepSeek-V3.2 (DeepSeek-AI 2025, "DeepSeek-V3.2", section 2; config
// model_type deepseek_v32) and GLM-5 (glm_moe_dsa) keep DeepSeek-V3's
// latent attention but let each query attend to index_topk (2048) keys
// chosen by a lightning indexer. dtsim prices it as Megatron-Core runs it
// (megatron/core/transformer/experimental_attention_variant/dsa.py,
// absorbed_mla.py, ops/):
//   indexer   from the layer's normed input x and the normed query latent,
//             both detached: q = wq_b(latent) (index_n_heads x
//             index_head_dim), k = LayerNorm(wk(x)) (one head, shared),
//             w = weights_proj(x) a head; rotary on their first
//             qk_rope_head_dim channels and a Hadamard rotation; the score
//             of key j for query i is sum over heads of w ReLU(q . k_j),
//             the causal half computed by the fused kernels (all s^2 by
//             the dense path's einsum, which writes an fp32 [s, b, heads,
//             s] product); torch.topk picks min(topk, s) keys. Its weights
//             are whole on every tp rank (parallel_mode "duplicated", their
//             gradients averaged over tp) and it runs on the whole sequence
//             (x and the latent all-gathered under sequence parallelism).
//             Parameters a layer: H d q_lora + d h + 2 d + H h (13,959,424
//             for DeepSeek-V3.2). A layer of indexer_layers' S (GLM-5's
//             "shared", Megatron's dsa_indexer_topk_freq) has none and
//             reuses the last indexer's keys.
//   attention absorbed (AbsorbedMLASelfAttention): q_nope times W_UK gives
//             a 512-wide latent query joined to its 64 rotary channels
//             (576), each head against the shared key [s, 576] whose first
//             512 channels are the value; the output times W_UV goes to
//             o_proj. The absorption's two batched GEMMs have kv_b_proj's
//             FLOPs. The sparse kernel (TileLang's SparseMLA, FlashMLA's)
//             computes every one of the topk slots of each query, heads
//             padded to a power of two and at least 16: 2 t H' k (576 +
//             512) forward, and backward runs the forward again and five
//             GEMMs, 2 t H' k (4 x 576 + 3 x 512). It keeps the padded
//             query's copy, the key, int32 indices and the output. Under
//             context parallelism the key and the indexer's k are
//             all-gathered (Megatron-Core asserts cp_comm_type allgather;
//             a plan's cp_comm is all_gather: cp_all_gather_only).
//             With dsa_kernels: dense (Megatron-Core's default backend
//             "none") every key is scored in fp32 and the unselected
//             masked: eager attention over all s^2 pairs, no causal skip,
//             keeping the fp32 q and key, the fp32 softmax and its cast,
//             the mask, the key as the value.
//   loss      KL from the main attention's probabilities summed over heads
//             (all-reduced over tp) to the indexer's softmax, trained into
//             the indexer alone (its inputs detached). index_loss sparse
//             (DeepSeek-V3.2's sparse training stage, Megatron's
//             --dsa-indexer-use-sparse-loss) takes both over the selected
//             keys: t H k (2 x 576 + 5) forward, the indexer's backward
//             three times its scores at those keys; dense over every key
//             (an fp32 bmm, recomputed by backward, the scores' einsum
//             twice and dq, dk); none (no --dsa-indexer-loss-coeff) runs
//             the indexer under no_grad: forward only. The indexer's
//             projections get weight gradients alone.
// What the kernels keep beyond that is listed in dsa_core. MFU's model
// FLOPs count the sparse kernels' work whichever kernels run. GLM-5's
// indexer turns the Hadamard rotation off (GLM5Bridge's
// dsa_indexer_rotate_activation false); both it and the ReLU are priced,
// a pass over q and k and three FLOPs a score. Not
// modelled: DeepSeek's FP8 indexer (DeepGEMM's fp8 logits; Megatron-Core's
// run in bf16), the dense warm-up stage (indexer alone trained, the model
// frozen), and the recompute module mla_up_proj on DSA layers (refused).
// Note [DeepSeek-V4]
// DeepSeek-V4 (DeepSeek-AI 2026; config model_type deepseek_v4; Flash:
// 284B parameters, 13B active, 43 layers of h 4096) attends in one head
// of head_dim 512 that is both key and value, each query to a window of
// its own tokens and to compressed entries of the sequence, a ratio a
// layer (compress_ratios). dtsim prices it as Megatron-Core trains it
// (experimental_attention_variant dsv4_hybrid, Megatron-Bridge 26.08's
// DeepSeekV4Bridge; megatron/core/transformer/experimental_attention_variant/
// deepseek_v4_hybrid_attention.py and csa.py on Megatron-LM's dev branch):
//   projections  q = wq_b(RMSNorm(wq_a(x))), H heads of d, each head
//             normed without a weight (_q_rms_norm, one kernel under
//             torch.compile, keeping q and its rsqrt); kv = RMSNorm(wkv(x)),
//             one head of d;
//             rotary (fused, in place) on the last qk_rope_head_dim
//             channels of both.
//   keys      query i sees the sliding_window w of its own tokens up to
//             itself and compressed entries: at ratio 4 the top index_topk
//             of its (i + 1) / 4 chosen by an indexer, at ratio 128 all of
//             its (i + 1) / 128, at 0 none. A compressor pools each ratio
//             tokens of x: wkv and wgate project x to coff d each (coff 2
//             at ratio 4, whose entries overlap by half, 1 at 128), a
//             softmax over the tokens in fp32 weighs them, then RMSNorm
//             and rotary. Its GEMMs, and the indexer's weights_proj, run
//             in bf16 under FP8 (get_fp8_disabled_context): priced as bf16
//             matmuls.
//   indexer   (ratio 4) DeepSeek Sparse Attention's (Note [DeepSeek Sparse
//             Attention]) over the compressed keys: q = wq_b(the normed
//             query latent), index_n_heads of index_head_dim, its own
//             compressor (coff 2, a Hadamard rotation) for k, weights from
//             x, scores over each query's causal (i + 1) / 4 entries, top-k;
//             trained by the KL loss (index_loss: sparse at the selected
//             entries, as Bridge's recipes set dsa_indexer_use_sparse_loss;
//             dense at every causal entry; none without a coefficient)
//             against the main attention, its backward run inside the
//             forward (FusedCSAIndexerSparseAttnFunc), its own compressor
//             getting weight gradients alone (its input detached).
//   core      FlashMLA's sparse kernel (dsa_kernel_backend cudnn, what
//             Megatron-LM's arguments resolve for dsv4_hybrid): q [t, H, d]
//             against the one kv joined to the compressed entries. The
//             lists of ratio 0 and 128 are not compacted: w and w + s / 128
//             slots padded to a multiple of 64 (SM100's), each computed;
//             ratio 4's are compacted to each query's valid entries
//             (topk_length): min(w, i + 1) + min(k, (i + 1) / 4) averaged
//             over the sequence. Forward 2 t H n 2d; backward 2 t H n 5d
//             (cuDNN's FlashAttention-style sparse backward: QK^T again,
//             dV, dP, dQ, dK, keys and values the same rows). A learned sink a
//             head joins the softmax's denominator (free). It keeps q, the
//             joined kv, int32 indices, O and the fp32 log-sum-exp.
//   output    the inverse rotary on O out of place (the kernel keeps O),
//             wo_a an einsum of o_groups groups, each H d / g to
//             o_lora_rank (torch's: bf16 under FP8, its input kept whole),
//             then wo_b (linear_proj) from g o_lora_rank to h.
// A layer's attention parameters: wq_a (h q_lora), q_layernorm (q_lora),
// wq_b (q_lora H d), wkv (h d), kv_layernorm (d), wo_a (g o_lora x H d /
// g), wo_b (g o_lora x h) and the sinks (H); the
// compressor's 2 coff d h, its ape (ratio x coff d) and norm (d); the
// indexer's wq_b (H_i d_i q_lora), weights_proj (H_i h) and compressor
// (2 x 2 d_i h, 4 x 2 d_i, d_i): 106,956,352 + 8,393,216 + 10,749,056 for
// Flash's ratio-4 layers. Every MLP is a mixture of experts; the first
// num_hash_layers route by a table of token ids, where Megatron-Core still
// runs the router's GEMM and its loss: priced as routed layers. The
// experts' clamped SwiGLU (swiglu_limit) is DeepSeek's clamp inside
// Megatron's fused SwiGLU: priced as SwiGLU, not gpt-oss's (Note
// [gpt-oss]). Recompute module mla_up_proj reruns wq_b, the head norm,
// wkv, kv's norm and rotary (qkv_up_proj_and_rope_apply under
// CheckpointWithoutOutput): q, kv and their norms' inputs are not kept.
// Megatron-Core runs this attention at tp 1, and under context
// parallelism only on packed (THD) contiguous partitions: dtsim models tp
// 1 and cp 1. Not modelled: the YaRN base of the compressed layers (a
// table), FP8 in the indexer.
// Note [Hyper-connections]
// DeepSeek-V4's residual is hc_mult (4) streams of h, mixed around each
// sublayer by manifold-constrained hyper-connections (Xie et al. 2025,
// "mHC"; Megatron-Core's hyper_connection.py, enable_hyper_connections,
// num_residual_streams): a GEMM of the streams' n h (fp32) to n^2 + 2n
// gates scaled by their RMS, H_pre and H_post through sigmoids, H_res
// made doubly stochastic by hc_sinkhorn_iters Sinkhorn iterations; the
// sublayer's input is sum_j H_pre_j x_j, and its output y goes back as
// x'_i = sum_j H_res_ji x_j + H_post_i y (h_post_bda). Priced as
// Megatron's fused kernels (use_fused_mhc, on for Blackwell in the
// bridge): the gates' projection a bf16 GEMM on the tensor cores, the
// Sinkhorn one kernel, the aggregate a pass, h_post_bda a pass reading n
// + 1 and writing n; backward sums the three gradients of the streams
// (the gates', the aggregate's and h_post_bda's: BroadcastTensorFused's
// fused_add_3), reading 3 n h and writing n h a sublayer.
// Kept for backward, a sublayer: the streams (n h), y, and the fp32
// gates. The embedding's output is expanded to n copies (input_expand);
// the head contracts them (learned_output_contract: hc_head_fn's GEMM,
// its sigmoid weights, the weighted sum) before the final norm; a
// multi-token prediction depth takes the streams, norms each (hnorm),
// adds h_proj of each to e_proj of its embedding, and contracts its own.
// Between pipeline stages the streams travel: n h a token. A sublayer's
// parameters: (n^2 + 2n) n h + (n^2 + 2n) + 3; the head's n n h + n + 1.
// Recompute module mhc (recompute_modules: on in Bridge's Flash bf16 and Pro
// recipes, off in Flash's MXFP8 one) checkpoints the aggregates, the norms
// after them and h_post_bda (MHCCheckpointManager, transformer_block.py):
// a layer frees its two aggregates, the norms' outputs where a bf16 GEMM
// keeps them, and the two stream tensors it keeps, and reruns those six
// kernels before its backward. Megatron keeps the last layer of each group
// (mhc_recompute_layer_num; None: the stage) its output, which dtsim frees
// too: one layer's n h a token of a stage, under 1% of its activations.
// Note [SmolLM3]
// Hugging Face's SmolLM3 (modeling_smollm3.py; SmolLM3-3B, 3.08B
// parameters) is the Llama block, grouped-query attention and a tied head,
// with no rotary embedding on every no_rope_layer_interval-th layer (4: its
// NoPE layers), which otherwise attend as every layer does. Here those are
// the "global" layers (global_every, nope_global) with no window or chunks
// on the others: the same kernels, less the NoPE layers' rotary.
// Note [Phi-3]
// Microsoft's Phi-3 and Phi-4 as HuggingFace writes them (modeling_phi3.py,
// model_type phi3; Abdin et al. 2024, "Phi-3 Technical Report", section 2)
// are this family's block: RMSNorm before attention and before the MLP,
// grouped-query attention with rotary positions, a SwiGLU MLP, no biases,
// an untied head. Its weights differ in layout only: q, k and v are one
// Linear (qkv_proj) and gate and up another (gate_up_proj), which is how
// this family prices them anyway ("attn.qkv", "mlp.gate_up": one GEMM
// each, as Megatron-Core fuses them), so the parameters, FLOPs and kept
// tensors are those of the Llama block of the same shape; the LibTorch
// twin keeps separate q/k/v and gate/up Linears of the same sizes. The
// 4k models' configs set sliding_window 2047, which Phi3Attention hands to
// its attention (every layer local); the 128k models' window (262,144)
// exceeds their sequence. partial_rotary_factor (Phi-4-mini) rotates part
// of each head, which HF's apply_rotary_pos_emb still concatenates whole:
// the same bytes, not modelled apart. The residual and embedding dropouts
// (resid_pdrop, embd_pdrop: 0 in every published config) are refused above 0.
// Note [OLMo 2]
// Ai2's OLMo 2 as HuggingFace writes it (modeling_olmo2.py, model_type
// olmo2; Team OLMo 2024, "2 OLMo 2 Furious", arXiv 2501.00656) is the Llama
// block with its norms moved (olmo2_norms): no norm before attention or
// the MLP; the attention's output normed (post_attention_layernorm) and
// the MLP's (post_feedforward_layernorm) before their residuals; and q and
// k normed after their projections over all heads at once (q_norm of
// num_heads x head_dim, k_norm of num_key_value_heads x head_dim), where
// Qwen3's norm each head apart. The work is the Llama block's with q/k
// norms: two RMSNorms over t h a block, moved; the q/k norms over the same
// q + kv elements. So is what autograd keeps: Llama keeps each norm's
// input and the GEMMs its outputs feed (x, norm(x), y, norm(y)), OLMo 2
// each norm's input and the GEMMs' unnormed inputs (o_proj's output, the
// MLP's, x, y): four tensors of t h either way. Only the q/k norms'
// weights differ ((n + k) d against 2d). Norms over all heads need every
// head's statistics, which a tensor-parallel rank holding some of them
// does not have alone: dtsim models OLMo 2 at tp 1 (the rules table asks
// tp_error; OLMo 2 itself was trained with FSDP). The LibTorch twin runs
// the same block.
// Note [Granite]
// IBM's Granite 3 language models as HuggingFace writes them
// (modeling_granite.py, model_type granite; Granite Team 2024, "Granite 3.0
// Language Models") are the Llama block with four scalars, each a
// LlamaConfig field where it is an op (0: not there):
//   embedding_multiplier  GraniteModel multiplies the embeddings by it
//               (12 in Granite 3): a pass over t h elements, as Gemma's
//               sqrt(hidden) is, and its gradient likewise;
//   residual_multiplier   GraniteDecoderLayer multiplies the attention's
//               and the MLP's outputs by it before each residual (0.22):
//               a pass over t h elements each, forward and backward;
//   logits_scaling        GraniteForCausalLM divides the logits by it
//               before the loss (16 for 8B): a pass over t v elements,
//               forward and backward;
//   attention_multiplier  the scores' scale in place of 1/sqrt(d): the
//               same work, not modelled.
// A tensor times a Python scalar saves nothing for backward (its gradient
// is the incoming one times the same scalar), so nothing more is kept and
// the scaled logits replace the unscaled ones before the fp32 upcast,
// whose copy sets the head's peak as before. HF runs each op whatever its
// value, 1.0 included, so a Granite config always has all three; the
// signatures carry their values in millionths, and the LibTorch twin
// runs them (its scores keep SDPA's 1/sqrt(d)).
// Note [gpt-oss]
// OpenAI's gpt-oss as HuggingFace writes it (modeling_gpt_oss.py, model_type
// gpt_oss; OpenAI 2025, "gpt-oss-120b & gpt-oss-20b Model Card") is this
// family's mixture of experts with four more things, each a LlamaConfig
// field, beside biases on q, k, v, o, the router and every expert's
// gate_up and down (qkv_bias, o_bias, router_bias, mlp_bias) and sliding
// windows of 128 on every other layer (layer 0 sliding; global_every 2):
//   sinks       a learned logit per head (GptOssAttention.sinks, split
//               with the heads) joins every row of scores
//               (attention_sinks). Eager attention, which HF trains it
//               with (_supports_sdpa is False; the FlashAttention-3 kernel
//               it may load has no backward for sinks), concatenates the
//               column (a copy of the scores one wider), subtracts each
//               row's max and runs its softmax in the scores' own dtype:
//               it keeps that softmax's output, sink column included, and
//               max's int64 indices, and no fp32 copy (attention_core in
//               layers.cpp). A fused kernel (Transformer Engine's, under
//               Megatron-Core's softmax_type "learnable") takes the column
//               in place: the same work as without.
//   clamped SwiGLU  (swiglu_limit 7) each expert computes gate = min(gate,
//               7), up = clamp(up, -7, 7), glu = gate sigmoid(1.702 gate),
//               out = (up + 1) glu. As composite ops that is seven passes,
//               9 reads and 7 writes an element, and autograd keeps gate
//               and up (the clamps' input), the clamped gate, the sigmoid,
//               up + 1 and glu beside down's input: 6e + g an element where
//               SiLU's SwiGLU keeps 3e + g. Megatron-Core fuses it
//               (weighted_bias_quick_geglu_impl under bias_activation_fusion,
//               with activation_func_clamp_value 7 and glu_linear_offset 1),
//               keeping its input as the fused SwiGLU does (Note [Fused
//               kernels]). alpha (swiglu_alpha) changes values, not work.
//   norms       GptOssRMSNorm multiplies the weight (kept in fp32:
//               _keep_in_fp32_modules) into the fp32 normalised input and
//               casts after (fp32_norm_weight), so the product keeps 4
//               bytes an element where Llama's keeps e: 8 an element and 4
//               a row, as Gemma's norms.
//   router      top-k of the logits, then a softmax over the k: the same
//               weights as the family's softmax over all experts
//               renormalised over the chosen k, priced and run that way.
// Parameters (tests/data/hf/PARAMS.md): gpt-oss-20b 20,914,757,184 and
// gpt-oss-120b 116,829,156,672, the model card's 20.91B and 116.83B.
// The release's MXFP4 expert weights are an inference format; training
// runs them in bf16 (the model card's own training precision), as dtsim
// prices them. YaRN's rotary scaling changes values, not work.
// Note [Ministral 3]
// Mistral's Ministral 3 (Ministral3ForCausalLM, the text_config of its
// Mistral3ForConditionalGeneration checkpoints; modeling_ministral3.py) is
// Mistral's block with one op more: Ministral3Attention multiplies every
// layer's queries, after rotary, by 1 + beta log(1 + floor(p /
// original_max_position_embeddings)) (_get_llama_4_attn_scale, beta the
// rope parameters' llama_4_scaling_beta, 0.1 and 16384 in
// Ministral3Config's default), cast to the queries' dtype first: one
// elementwise pass over q (q_scaling_beta, q_scaling_length), autograd
// keeping only the scales. Llama 4 scales only its NoPE layers' queries,
// in fp32 (Note [Llama 4]); the two are not combined. Its yarn rotary
// costs as rotary does.
// Note [MiniMax-M2]
// MiniMax's MiniMax-M2 as HuggingFace writes it (modeling_minimax_m2.py,
// model_type minimax_m2) is this family's mixture of experts with one
// thing new: MiniMaxM2Attention (FlexOlmoAttention's) norms q and k over
// their whole projections (q_norm of num_heads x head_dim, k_norm of
// num_key_value_heads x head_dim), as OLMo 2 does, but keeps the Llama
// block's norms before attention and the MLP (whole_qk_norm without
// olmo2_norms). The work and the kept tensors are the per-head norms'
// (the same q + kv elements, Note [OLMo 2]); the weights are (a + kv) d,
// and, as for OLMo 2, a tensor-parallel rank holding some heads cannot
// take their statistics alone, so dtsim models it at tp 1 (its experts
// spread over ep). The rest is Mixtral's: 256 routed experts of
// intermediate_size, 8 a token, no shared expert, no dense layer; the
// router a sigmoid whose correction bias (e_score_correction_bias) is a
// buffer, priced as the family's router. Its rotary turns 64 of each
// head's 128 (rotary_dim, the remote code's; partial rotary costs the
// same bytes, Note [Phi-3]); the released checkpoint's multi-token
// prediction modules are not built by HF's class, nor trained here.
// Parameters: 62 layers of 44,040,192 (attention) + 7,168 (q/k norms) +
// 6,144 (norms) + 786,432 (router) + 256 x 3 x 3072 x 1536 (experts) =
// 3,668,718,592, with the untied embedding and head (2 x 200,064 x 3072)
// and the final norm: 228,689,748,992 (the card's 229B).
// Note [GLM-4.5]
// Zhipu's GLM-4.5, GLM-4.6, GLM-4.7 and GLM-4.5-Air as HuggingFace writes
// them (modeling_glm4_moe.py, model_type glm4_moe; GLM-4.5 Team 2025,
// "GLM-4.5: Agentic, Reasoning, and Coding Foundation Models", arXiv
// 2508.06471) are this family's mixture of experts with nothing new to
// price: q, k and v with biases (attention_bias) and o_proj without
// (qkv_bias), per-head q/k norms under use_qk_norm (GLM-4.5's, not
// Air's), first_k_dense_replace dense layers (first_dense), routed experts
// of moe_intermediate_size, and one shared expert of the same width
// (n_shared_experts x moe_intermediate_size). The router is a sigmoid with
// a correction bias that is a buffer, not a parameter, as DeepSeek-V3's,
// priced as the family's router (one pass over t x E); partial rotary
// (partial_rotary_factor 0.5) turns half of each head but concatenates the
// halves back, the same bytes. The checkpoints also hold one multi-token
// prediction layer (num_nextn_predict_layers 1), which HF's model skips on
// load (_keys_to_ignore_on_load_unexpected): dtsim does not train it
// either. Parameters (tests/data/hf/PARAMS.md): GLM-4.5-Air
// 106,852,245,504 (the card's 106B), GLM-4.5 352,797,814,784 (the card's
// 355B counts the MTP layer).
// Note [Gemma]
// Google's Gemma 2 and Gemma 3 language models as HuggingFace writes them
// (modeling_gemma2.py, modeling_gemma3.py; Gemma Team 2024, "Gemma 2",
// section 2, and 2025, "Gemma 3 Technical Report", section 2) are this
// family's decoder with five differences, each a LlamaConfig field:
//   norms       four RMSNorms a block (gemma_norms): before attention
//               (input_layernorm), on the attention's output before its
//               residual (post_attention_layernorm), before the MLP
//               (pre_feedforward_layernorm) and on its output before its
//               residual (post_feedforward_layernorm). Gemma's RMSNorm
//               computes in fp32 and scales by 1 + weight (the weight
//               starts at 0) before casting back, so autograd keeps the
//               fp32 input, the rsqrt and the fp32 normalised output (8
//               bytes an element and 4 a row) where Llama's keeps (4 + e);
//               Gemma 3's q/k norms are Gemma's too.
//   GeGLU       gelu_pytorch_tanh on the gate (gelu): the same three GEMMs
//               and kept tensors as SwiGLU, a few more operations an element.
//   embeddings  times sqrt(hidden) (embed_scale; HF's normalizer, a
//               constant tensor: nothing more kept); the head is tied.
//   attention   local layers see sliding_window keys, every
//               global_every-th layer all of them (Gemma 2: every other,
//               layer 0 local; Gemma 3: five local to one global, or the
//               config's layer_types); the two kinds are separate layer
//               signatures, so a profile and a fused kernel price each.
//   soft caps   Gemma 2 caps the attention scores, cap tanh(scores / cap)
//               with cap 50 (attn_softcap), and the logits with 30
//               (final_softcap). Eager attention runs the three passes
//               and keeps tanh's output (e per score); FlashAttention-2
//               (>= 2.6, its softcap argument) does it inside the kernel:
//               nothing priced there. The logits' cap keeps e t v more
//               before the fp32 loss. Gemma 3 has neither.
// query_pre_attn_scalar (the scores' scale) changes values, not work, and
// is not modelled. The LibTorch twin runs all of this, the attention's
// soft cap in eager attention only (SDPA has none, nor the p2p ring's
// hand-written backward: each refused in one line), and gemma-tiny (a
// local layer, then a global one) trains under every plan as one process
// does, with a soft cap too (tests/runtime). Parameters are HuggingFace's
// (tests/data/hf/PARAMS.md).
// Note [Gemma 4]
// Google's Gemma 4 language models, E2B, E4B, 31B and 26B-A4B (Gemma4TextConfig,
// model_type gemma4_text; Gemma4ForConditionalGeneration's text_config),
// as HuggingFace's modeling_gemma4.py and Megatron-Bridge's gemma4_provider.py
// and modeling_gemma4.py build them, are Gemma 3's decoder (Note [Gemma]:
// four norms a block, GeGLU, embeddings times sqrt(hidden), a tied head,
// q/k norms; five local layers of a 1024-key window to one global) with:
//   global layers  their own head width (global_head_dim 512) and fewer
//               key/value heads (num_global_key_value_heads: 4 in the 31B,
//               2 in the 26B), a quarter of each head rotated; where
//               attention_k_eq_v, no v_proj: the values are the keys'
//               projection, normed apart (model.k_eq_v). A global layer is
//               made by a twin of the config with those heads (its own
//               layer signature). On every layer, fewer key/value heads
//               than tp ranks are replicated, each rank holding a whole
//               one, as Bridge's Gemma 4 attention does.
//   v_norm      an RMSNorm without a weight on every value head.
//   the 26B's MoE every layer is a GeGLU of intermediate_size (2112: the
//               shared expert's place) beside 128 experts of GeGLU 704,
//               top-8, each branch between its own pre- and post-norm, their
//               sum normed again (model.moe_branch_norms: three norms more
//               than Gemma 3's four); the router runs on a weightless norm
//               of the residual times a learned scale (h) and scales each
//               chosen expert by a learned per_expert_scale (E, counted as
//               router_bias's).
//   E2B, E4B    per-layer inputs (hidden_size_per_layer_input 256,
//               model.ple_dim): a table of vocab_size_per_layer_input rows
//               of L x 256 (times 16) plus the scaled embedding projected
//               to L x 256 (per_layer_model_projection) and normed over each
//               256, summed, kept the whole step; each layer, after its
//               MLP's residual, gates its slice by GELU(per_layer_input_gate
//               h -> 256), projects it back (per_layer_projection), norms
//               and adds it. The last num_kv_shared_layers (20, 18) compute
//               no keys or values (no k_proj, v_proj, k_norm: HuggingFace's
//               modules) and attend with those of the last earlier layer of
//               their kind, which keeps them; E2B's widen their GeGLU to
//               twice intermediate_size (use_double_wide_mlp). Both reach
//               across layers outside any pipeline send, and Bridge's
//               Gemma4DenseProvider runs pp 1 only: pp_error refuses it.
// Megatron-Bridge builds the projections HuggingFace leaves out (a global
// layer's V as a copy of K, a sharing layer's K and V zero-filled) and runs
// their GEMMs for nothing: h x kv x d weights more each, which dtsim, pricing
// HuggingFace's modules, does not count. Not priced: the partial rotary's
// saving, layer_scalar (a buffer times the block's output, one pass).
// Parameters (tests/models/test_gemma4.cpp): E2B 4,628,569,344 and E4B
// 7,463,013,376, 2.3B and 4.6B without the per-layer table (the cards'
// effective sizes; their 5.1B and 8B count the audio and vision towers);
// the 31B's 50 local layers of 478,959,104
// and 10 global of 534,009,856 (q and o 5376 x 16,384, k 5376 x 2048, no
// v), the tied 262,144 x 5376 vocabulary and the final norm:
// 30,697,345,280 (the card's 30.7B); the 26B's 30 layers of attention (q,
// k, v, o of its window or global shape), the GeGLU 3 x 2816 x 2112, 128
// experts of 3 x 2816 x 704, the router 2816 x 128 with its scales, and
// seven norms: 25,233,141,760 (the card's 25.2B), 3,822,530,560 active.
// Note [Llama 4]
// Meta's Llama 4 Scout (17B-16E) and Maverick (17B-128E) language models as
// HuggingFace writes them (modeling_llama4.py, model_type llama4_text: the
// text_config of every released Llama4ForConditionalGeneration config;
// Meta 2025, "The Llama 4 herd") are this family's mixture of experts with
// four things more, each a LlamaConfig field:
//   chunks      the rotary layers attend within chunks of
//               attention_chunk_size tokens (8192): query i sees the keys
//               j <= i of its own chunk (masking_utils.py,
//               create_chunked_causal_mask); every no_rope_layer_interval-th
//               layer (4: global_every) sees every key before it. A fused
//               kernel computes q c(c+1)/2 + r(r+1)/2 of the s x s scores
//               (s = q c + r), eager attention the whole square, masked, as
//               under a window; at 8k tokens a chunk is the whole sequence.
//   NoPE        those global layers turn nothing (nope_global) and scale
//               each query by log(floor((p + 1) / 8192) + 1) x 0.1 + 1
//               (attn_temperature_tuning: attn_temperature): q times an fp32
//               scale a position, then cast back, two passes as composite
//               ops, and nothing kept but the scales.
//   L2 norms    on the rotary layers' q and k after the rotation, Scout's
//               (use_qk_norm; not Maverick's): Llama4TextL2Norm,
//               x.float() rsqrt(mean(x^2) + eps) cast back, an RMSNorm
//               without a weight, which keeps the fp32 copy and a rsqrt a
//               head (l2_qk_norm).
//   experts     Scout 16 on every layer, Maverick 128 on every other
//               (interleave_moe_layer_step 2: layers 1, 3, ...; moe_step),
//               the others dense MLPs of intermediate_size_mlp (16384). A
//               token goes to one expert (top-1) and to the shared expert,
//               both intermediate_size (8192) wide. The router takes the
//               sigmoid of the chosen logit and weights the expert's
//               input, not its output (Llama4TextMoe; Megatron-Core's
//               moe_apply_probs_on_input): the family's weighted sum moved
//               before the experts, the same passes and bytes (the
//               weighted rows kept for the weights' gradient in place of
//               the experts' outputs), so the family's router prices it
//               and the LibTorch twin runs that.
// The rotation itself is complex-valued in HF (apply_rotary_emb) and priced
// as the family's. HuggingFace's Llama4TextExperts multiplies every token
// through every expert (a bmm over all E, the unchosen weighted by 0): E
// times the routed FLOPs, 16x for Scout and 128x for Maverick; dtsim
// prices the grouped GEMMs of Megatron-Core and torchtitan, and HF's with
// plan.moe_experts dense (Note [Dense experts]). Parameters (tests/data/hf/PARAMS.md): Scout
// 107,769,861,120 and Maverick 400,711,848,960 for the language models
// (the cards' 109B and 400B count the vision encoder too), 17.2B active
// each; the vision encoder and projector are not modelled.
// Note [Gated DeltaNet]
// Qwen3-Next and Qwen3.5 as HuggingFace writes them (modeling_qwen3_next.py,
// modeling_qwen3_5.py; model_type qwen3_next, qwen3_5_text,
// qwen3_5_moe_text) interleave softmax attention with Gated DeltaNet linear
// attention (Yang, Kautz and Hatamizadeh 2025, "Gated Delta Networks",
// arXiv 2412.06464): every full_attention_interval-th layer (4) attends,
// the others mix tokens through a recurrent state of kh key heads of dk by
// vh value heads of dv (full_attention_interval, linear_*). A GDN layer
// (Qwen3NextGatedDeltaNet, which Megatron-Core's GatedDeltaNet,
// megatron/core/ssm/gated_delta_net/gdn.py, splits by heads over tp) runs
//   in_proj     one GEMM h -> q, k (kh dk each), v and the output gate z
//               (vh dv each) and b, a (vh each): "attn.qkv", its column-
//               parallel half (Qwen3.5's four Linears are the same GEMM cut
//               four ways; Qwen3-Next's in_proj_qkvz and in_proj_ba)
//   conv1d      a causal depthwise convolution of conv_kernel taps over the
//               q, k, v channels and SiLU (causal_conv1d_fn: one kernel,
//               keeping its input)
//   gates       beta = sigmoid(b), g = -exp(A_log) softplus(a + dt_bias)
//               in fp32: a few passes over t vh, keeping the softplus'
//               input and output (the sigmoid's output is the rule's beta)
//   repeat      q and k repeated to the value heads where vh > kh
//               (repeat_interleave)
//   core        FLA's chunk_gated_delta_rule with the L2 norms of q and k
//               inside (chunks of 64): per token and value head, forward
//               2 C (3 dk + 2 dv) + 6 dk dv FLOPs (the chunk's k k^T, its
//               WY factors w and u, the inter-chunk states, q k^T within
//               the chunk and the output: chunk_scaled_dot_kkt_fwd,
//               recompute_w_u_fwd, chunk_gated_delta_rule_fwd_h,
//               chunk_fwd_o) and the states of every chunk written and
//               read (dk dv a chunk in 16 bits); backward, which computes
//               w, u and the states again (chunk_gated_delta_rule_bwd),
//               C (12 dk + 10 dv) + 18 dk dv and the states and their
//               gradients. It keeps (ChunkGatedDeltaRuleFunction's
//               save_for_backward) the normed q and k, v, the fp32 gate
//               cumsum and norms' rstd, beta and the triangular factor A (C
//               a token and head, in q's dtype). Priced as a fused
//               attention kernel (KernelKind::kAttention, fused).
//   norm        Qwen3NextRMSNormGated on each value head, times silu(z):
//               composite ops (the LibTorch twin's, HF's without FLA)
//               keeping the fp32 input, rsqrt, the normed output in q's
//               dtype, the fp32 gate and its silu; FLA's FusedRMSNormGated
//               under plan.kernels fused keeps its two inputs and rstd
//   out_proj    vh dv -> h, row-parallel: "attn.o_proj"
// so a GDN layer has h (2 kh dk + 2 vh dv + 2 vh) + (2 kh dk + vh dv) conv
// + 2 vh + dv + vh dv h weights. The attention layers have a gated output
// (attn_output_gate: q_proj writes each head's query and a gate, 2 a d
// wide, and the output times sigmoid(gate) before o_proj, keeping the
// output and the sigmoid) and per-head q/k norms; all norms are
// Qwen3NextRMSNorm, Gemma 3's fp32 norm times 1 + weight (zero_centered_norms,
// two a block). Partial rotary (a quarter of each head) costs as rotary
// does (Note [Phi-3]); the MoE layers are Qwen2-MoE's (a shared expert with
// its sigmoid gate). The recurrence runs along the whole sequence, so
// under context parallelism Megatron-Core's GatedDeltaNet moves heads, not
// tokens (a2a_cp_to_hp, a2a_hp_to_cp): each cp rank projects its own
// tokens, an all-to-all over cp hands it 1 / cp of the heads for the whole
// sequence, it convolves, gates and runs the rule on those, and a second
// all-to-all returns the gated norm's output to the tokens' ranks for
// out_proj; backward, the same two for the gradients. Both are exposed
// (nothing overlaps them), the same work and kept bytes a rank as at cp 1,
// and the heads must divide over tp x cp (cp_error). The LibTorch twin runs
// GDN layers at tp 1 and cp 1 (its chunked rule is HF's torch fallback,
// torch_chunk_gated_delta_rule, in fp32). The
// checkpoints' multi-token prediction layer is skipped by HF's class
// (_keys_to_ignore_on_load_unexpected) and not trained here.
// Parameters: Qwen3-Next-80B-A3B's 12 attention layers of 27,263,488
// (q_proj 2048 x 8192, k and v 2048 x 512 each, o_proj 4096 x 2048, q/k
// norms 512) and 36 GDN layers of 33,718,464 (in_proj 2048 x 12,352, conv
// 8192 x 4, 64 gates, norm 128, out_proj 4096 x 2048), each with 4,096 of
// norms and a MoE of 1,614,809,088 (router 2048 x 512, 512 experts of 3 x
// 2048 x 512, shared expert 3 x 2048 x 512 and its 2,048 gate), untied
// embedding and head (2 x 151,936 x 2048) and the final norm:
// 79,674,391,296 (the card's 80B, its MTP layer not counted).
// Note [Kimi Delta Attention]
// Moonshot's Kimi Linear (KimiLinearForCausalLM, model_type kimi_linear)
// and Kimi K3 interleave latent attention with Kimi Delta Attention (KDA:
// Kimi Team 2025, "Kimi Linear", arXiv 2510.26692), Gated DeltaNet's rule
// (Note [Gated DeltaNet]) with a decay a channel rather than a head. Which
// layers are KDA the config lists (linear_attn_config.kda_layers, 1-indexed:
// model.layer_mixers' L); the others are latent attention without rotary
// positions (Note [Kimi K3]). A KDA layer as Megatron-Bridge builds it
// (KimiK3Attention._init_kda, kimi_k3_layers.py; FLA's chunk_kda):
//   q_proj, k_proj, v_proj   h -> P each (P = num_heads x head_dim),
//               column-parallel: "attn.qkv"
//   b_proj      h -> a beta a head; sigmoid in fp32
//   f_a_proj    h -> head_dim, duplicated on every tp rank; f_b_proj
//               head_dim -> P: the decay's input a channel
//   conv1d      three causal depthwise convolutions of short_conv_kernel_size
//               taps and SiLU over q, k, v (fp32 weights)
//   core        chunk_kda with the L2 norms of q and k, the gate (lower_bound
//               sigmoid(exp(A_log) (f + dt_bias)), safe_gate) and its chunk
//               cumsum in the kernel (use_gate_in_kernel): priced as Gated
//               DeltaNet's chunked rule with d-wide keys and values, reading
//               the fp32 decay a channel forward and writing its gradient
//               backward; it keeps q, k, v, the raw decay and its fp32
//               cumsum, the rstds and beta in fp32, and the intra-chunk Aqk
//               and Akk (C a token and head each)
//   output gate g_proj h -> P (K3), or g_a_proj h -> head_dim and g_b_proj
//               head_dim -> P (Kimi Linear: model.kda_gate_rank)
//   o_norm      FLA's FusedRMSNormGated with a sigmoid gate over head_dim,
//               keeping its two inputs and rstd
//   o_proj      P -> h, row-parallel
// so a KDA layer has h (4P + head_dim + H) + head_dim P + 3 P kernel + H +
// P + head_dim + P h weights (K3's output gate; Kimi Linear's h r + r P
// for h P), with A_log a head and dt_bias a channel. KimiK3Attention
// refuses context parallelism on KDA layers: cp_error does too. Bridge's
// flop counter (flop_utils.py) counts the rule as 4 H d^2 a token, the
// model FLOPs; dtsim prices the kernels' work. Parameters (tests/models):
// Kimi-Linear-48B-A3B's 20 KDA layers of 39,514,272 and 7 latent ones of
// 29,114,880 (q_proj 2304 x 6144, kv_a 2304 x 576 and its norm, kv_b 512 x
// 8192, o_proj 4096 x 2304), a dense SwiGLU 9216 on layer 1 and 26 MoE of
// 256 experts of 1024 with a shared one (1,819,607,040 each), untied
// vocabularies of 163,840: 49,122,675,072, 3,484,453,248 active.
// Note [Kimi K3]
// Kimi K3's language model (KimiK3ForConditionalGeneration; its text_config
// read as Megatron-Bridge's KimiK3Bridge reads it, the vision tower left
// out) is Kimi Linear's layout at 93 layers (69 KDA; latent attention on
// every 4th and the last) with four changes Bridge's modules make:
//   - its latent attention multiplies the core's output by sigmoid(g_proj(x))
//     (h -> heads x v_head_dim) before o_proj: attn_output_gate with latent
//     attention, keeping the sigmoid and the output;
//   - the MLP's and experts' activation is SiTU (hidden_act situ:
//     SiTUAndMul, 4 tanh(g / 4) sigmoid(g) times 25 tanh(u / 25)), composite
//     ops in fp32 whatever the plan's kernels: ten passes over the width,
//     keeping six fp32 tensors (24 bytes an element) where a fused SwiGLU
//     keeps its 16-bit input (model.situ);
//   - the experts are Latent MoE's (Note [Latent MoE]: routed_expert_hidden_size
//     3584), the combined latent RMS-normed before fc2_latent_proj
//     (KimiK3MoELayer.routed_expert_norm, KimiRMSNorm's composite fp32 ops:
//     model.latent_norm);
//   - Block Attention Residuals replace the residual (Note [Attention residuals]).
// Its 896 routed experts of 3072 (top 16, two shared) hold 29.6B a layer:
// 2,779,484,393,568 parameters, 105,363,935,328 active (tests/models). The
// checkpoint's experts are MXFP4; Bridge dequantises them to bf16 to train,
// as dtsim prices them. No training recipe ships for K3 in Bridge (26.08);
// its layer spec refuses virtual pipeline stages (dtsim prices them as for
// any model) and KimiK3Attention cp on KDA layers (refused here too).
// Note [Attention residuals]
// Block Attention Residuals (Kimi Team, "Attention Residuals"; Kimi K3's
// attn_res_block_size, 12) replace each sublayer's residual input by a
// softmax-weighted mix of the block snapshots so far: every block_size-th
// layer (layer_idx % block_size == 0) writes its running sum into a bank,
// and the attention's and the MLP's inputs, and the last layer's output,
// are attn_res_aggregate over the bank and the running sum (R rows): an
// RMS norm of each row in fp32, a score a row (the norm's weight times a
// learned h x 1 projection), a softmax over the rows, the weighted sum, cast
// back, then the sublayer's own norm (KimiK3TransformerLayer,
// kimi_k3_ops.py). As Bridge runs it, eagerly, an aggregate is about ten
// passes over R tn h elements in fp32 (dtsim's "attn_res.*" kernels,
// backward twice the forward) and keeps the fp32 rows and the normed rows,
// 8 R bytes an element, and each row's rsqrt and weight: at layer 90 of K3,
// with 8 snapshots, its two aggregates keep 1 MB a token, a third of the
// layer's activations. A writing layer's new bank (cat) is its output with
// the sum, which the next layers' checkpoints keep under full recompute;
// between pipeline stages Bridge sends the sum and the bank as one tensor
// (pack_stage_boundary: (1 + snapshots) h a token, Layer::boundary_bytes),
// which the receiving stage keeps for its gradient and, under full
// recompute, as its first checkpoint with the bank it unpacks
// (Layer::entry_kept_bytes, entry_checkpoint_bytes). Its weights: two
// norms and two projections of h a layer, the last layer's output pair.
// Not modelled: full recompute in groups of more than one block
// (recompute_num_layers) keeps a bank only where a group starts right
// after the layer that wrote it, and so counts too few banks there; the
// aggregates' kernels are priced eager, as Bridge runs them (the paper's
// fused implementation is cheaper).
// Note [Mamba-2]
// NVIDIA's Nemotron-H family (Nemotron-H 8B and 56B, Nemotron Nano 2,
// Nemotron 3 Nano) is a hybrid of Mamba-2 state-space layers (Dao and Gu
// 2024, "Transformers are SSMs", arXiv 2405.21060), a few attention layers
// and MLPs, as Megatron-Core builds it (megatron/core/models/hybrid/:
// --hybrid-layer-pattern, hybrid_layer_allocation.py) and HuggingFace
// writes it (modeling_nemotron_h.py, model_type nemotron_h): each layer is
// ONE part with its own pre-norm and residual, named by a letter of the
// pattern (hybrid_pattern): M a Mamba-2 mixer, * attention (no rotary:
// position_embedding_type none, NemotronHAttention), - the MLP, E the MoE.
// dtsim's blocks split so (Llama::Part): a layer is the token mixer half of
// a block (input norm, mixer, residual) or its MLP half (its norm, the MLP
// or MoE, residual), one tensor-parallel pair of collectives each. The
// MLPs and experts are up, squared ReLU (relu then pow), down: two GEMMs,
// no gate (squared_relu; Megatron-LM's --squared-relu, HF's relu2); the
// experts' router is a sigmoid with a correction bias (a buffer). A Mamba
// layer of H heads of P (inner width di = H P), G groups of state N, conv
// kernel k, chunk Q (MambaMixer, megatron/core/ssm/mamba_mixer.py; its
// heads 2 h / P where --mamba-num-heads is not given) runs
//   in_proj     h -> z (di), x (di), B and C (G N each), dt (H): one GEMM,
//               "attn.qkv", column-parallel by heads and groups
//   split scan  mamba_split_conv1d_scan_combined (mamba_ssm's
//               ssd_combined.py), one autograd function: the causal
//               depthwise convolution of k taps and SiLU over x, B, C
//               ("mamba.conv1d"), then the chunked scan with dt =
//               softplus(dt + dt_bias), A = -exp(A_log), D's skip and the
//               gate y silu(z) ("mamba.core", a fused kernel priced at the
//               attention efficiency): per token and head, forward 4 N P
//               (each chunk's state, and the states read by C) + Q P (the
//               causal product within the chunk) + 10 P, per token and
//               group 2 Q N (C B^T); backward, which computes the
//               convolution, C B^T and the states again
//               (_mamba_chunk_scan_combined_bwd), 10 N P + 3 Q P + 20 P and
//               6 Q N, and the states in fp32 written and read. It keeps
//               (MambaSplitConv1dScanCombinedFn.save_for_backward) in_proj's
//               output and the ungated output out_x; the rest is recomputed
//   norm        the RMSNorm of each group of the gated output (Megatron-Core
//               calls the norm with z None after the gated scan): its input
//               and rstd a token and group (fused), or the composite ops'
//   out_proj    di -> h, row-parallel: "attn.o_proj"
// so a Mamba layer has h (2 di + 2 G N + H) + (di + 2 G N)(k + 1) + 3 H +
// di + di h weights (the convolution has a bias, the projections none).
// Megatron-LM's own FLOPs (num_floating_point_operations's
// mamba_layer_flops) counts 7 N di a token for the scan and 2h(2 d_in) for
// in_proj with d_in = 2h whatever the heads; dtsim counts the kernels as
// they run (its MFU counts GEMMs and the fused core). Context parallelism
// moves heads as for Gated DeltaNet (MambaContextParallel,
// megatron/core/ssm/mamba_context_parallel.py): five all-to-alls (z, x, B,
// C, dt; B and C repeated where a tp rank's groups are fewer than cp)
// before the scan and one after, exposed; each cp rank then scans whole
// heads over the whole sequence; heads must divide over tp x cp and groups
// over tp (cp_error, tp_error). Parameters: Nemotron-H 8B 8,100,852,736
// (24 Mamba layers of 109,640,064, 24 MLPs of 176,164,864, 4 attention
// layers of 41,947,136, untied 131,072 x 4096 twice); Nemotron 3 Nano
// 31,577,937,344 and 3,580,073,408 active (the card's 31.6B and 3.6B with
// embeddings): tests/models/test_llama.cpp derives both. A pattern's
// multi-token prediction depths ("/*E", Megatron-Core's unified pattern)
// are model.mtp_layers, each attention then the MoE (Note [Multi-token
// prediction]); the pattern's G, D and + layers are not modelled; "|"
// segments become the pipeline layout. IBM's Granite 4.0-H
// (modeling_granitemoehybrid.py, model_type granitemoehybrid) keeps whole
// blocks instead: each block's mixer is Mamba-2 or attention as its
// layer_types list (layer_mixers, M or *), then Granite's shared SwiGLU MLP
// beside its experts (Note [Granite]'s scalars; its Mamba-2 of one group,
// inner width mamba_expand x hidden); dtsim prices its Mamba mixer as
// Megatron-Core's. The LibTorch twin runs Mamba-2 layers at tp 1 and cp 1
// (Note [The twin's Mamba-2 scan] in models/torch).
class Llama final : public ZooModel {
  /// What a layer holds (Note [Mamba-2]): a whole block (token mixer, then
  /// the MLP), or one of the two with its own pre-norm and residual.
  enum class Part { kBlock, kMixer, kMlp };
  /// How a layer mixes tokens: softmax attention (MLA too), Gated DeltaNet
  /// (Note [Gated DeltaNet]) or a Mamba-2 state space (Note [Mamba-2]).
  enum class Mixer { kAttention, kGdn, kMamba };

 public:
  explicit Llama(LlamaConfig c) : c_(std::move(c)) {
    if (c_.kv_heads == 0) c_.kv_heads = c_.heads;
    if (c_.head_dim == 0) c_.head_dim = c_.hidden / c_.heads;
    if (c_.experts > 0 && c_.expert_intermediate == 0) c_.expert_intermediate = c_.intermediate;
    if (c_.mamba_heads == 0) c_.mamba_heads = 2 * c_.hidden / c_.mamba_head_dim;  // Megatron-Core: expand 2
    // Note [Gemma 4]: the global layers, and the layers reusing earlier
    // ones' keys and values, are made by twins of this config: a global
    // layer's own heads (its values its keys), a sharing layer's missing
    // projections and wider MLP.
    const bool global_twin = c_.global_head_dim > 0 || c_.global_kv_heads > 0 || c_.k_eq_v;
    for (const bool global : {false, true}) {
      for (const bool shared : {false, true}) {
        if ((!global && !shared) || (global && !global_twin && !shared) || (shared && c_.kv_shared_layers == 0)) continue;
        LlamaConfig g = c_;
        if (global) {
          g.head_dim = c_.global_head_dim > 0 ? c_.global_head_dim : c_.head_dim;
          g.kv_heads = c_.global_kv_heads > 0 ? c_.global_kv_heads : c_.kv_heads;
        } else {
          g.k_eq_v = false;
        }
        g.global_head_dim = 0;
        g.global_kv_heads = 0;
        if (shared) {
          g.reuses_kv = true;
          if (c_.double_wide_mlp) g.intermediate *= 2;
        }
        twins_[global ? 1 : 0][shared ? 1 : 0] = std::make_shared<Llama>(std::move(g), true);
      }
    }
    c_.k_eq_v = false;  // the local layers have their values
  }
  /// A global layers' twin (Note [Gemma 4]): k_eq_v applies to its layers.
  Llama(LlamaConfig c, bool /*global*/) : c_(std::move(c)) {}
  std::string name() const override { return c_.name; }
  std::vector<std::string> notes() const override { return c_.notes; }
  int blocks() const override { return c_.layers; }
  int layer_count() const override { return c_.layers + c_.mtp_layers + 2; }  // embedding, blocks, MTP depths, head
  std::int64_t max_seq_len() const override { return c_.seq_len; }
  int experts() const override { return c_.experts; }
  int top_k() const override { return c_.experts > 0 ? c_.top_k : 0; }
  bool grouped_kv_sdpa() const override {
    return !mla() && c_.kv_heads < c_.heads && c_.sliding_window == 0 && c_.attention_chunk == 0;
  }
  std::string tp_error(int tp) const override {
    if (v4() && tp > 1) {
      // Note [DeepSeek-V4]
      return "DeepSeek-V4's attention (Megatron-Core's dsv4_hybrid) runs at tp 1; dtsim models it at tp=1 (its experts spread over ep)";
    }
    if (whole_qk() && tp > 1) {
      // Note [OLMo 2], Note [MiniMax-M2]: their q/k norms' statistics span every head.
      return std::string(c_.olmo2_norms ? "OLMo 2's q and k norms each take their statistics over all heads at once (Olmo2Attention)"
                                        : "q and k norms over all heads (whole_qk_norm) each take their statistics over all heads at once "
                                          "(MiniMax-M2's FlexOlmoAttention)") +
             ", which a tensor-parallel rank holding some of the heads cannot compute alone; dtsim models it at tp=1";
    }
    if (has_linear() && c_.kda && c_.linear_value_heads % tp != 0) {
      // Note [Kimi Delta Attention]: KimiK3Attention splits its heads over tp.
      return std::to_string(c_.linear_value_heads) + " Kimi Delta Attention heads (linear_attn_config.num_heads) are not divisible by tp=" +
             std::to_string(tp);
    }
    if (has_linear() && (c_.linear_key_heads % tp != 0 || c_.linear_value_heads % tp != 0)) {
      // Note [Gated DeltaNet]: Megatron-Core's GatedDeltaNet splits its key and value heads over tp.
      return std::to_string(c_.linear_key_heads) + " key and " + std::to_string(c_.linear_value_heads) +
             " value heads of linear attention (linear_num_key_heads, linear_num_value_heads) are not both divisible by tp=" +
             std::to_string(tp);
    }
    if (has_mamba() && (c_.mamba_heads % tp != 0 || c_.mamba_groups % tp != 0)) {
      // Note [Mamba-2]: Megatron-Core's MambaMixer splits its heads and groups over tp.
      return std::to_string(c_.mamba_heads) + " Mamba heads and " + std::to_string(c_.mamba_groups) +
             " groups (mamba_num_heads, n_groups) are not both divisible by tp=" + std::to_string(tp);
    }
    // Attention's heads, where some layer attends (a hybrid pattern may have none: Note [Mamba-2]).
    const bool attends = attention_layers() > 0;
    if (const auto& g = twins_[1][0] ? twins_[1][0] : twins_[1][1]; g && attends && g->c_.kv_heads % tp != 0 && tp % g->c_.kv_heads != 0) {
      // Note [Gemma 4]: a global layer's heads split over tp, or replicated whole.
      return std::to_string(g->c_.kv_heads) + " key/value heads of the global layers (num_global_key_value_heads, or num_key_value_heads) "
             "neither divide nor are divisible by tp=" + std::to_string(tp);
    }
    // Note [Gemma 4]: Bridge's Gemma 4 attention replicates key/value heads
    // fewer than the tp ranks.
    const bool replicates = twins_[1][0] || twins_[1][1];
    if (attends && !mla() && c_.kv_heads % tp != 0 && !(replicates && tp % c_.kv_heads == 0)) {
      return std::to_string(c_.kv_heads) + " key/value heads (num_key_value_heads) are not divisible by tp=" + std::to_string(tp) +
             (replicates ? " (nor divide it, to be replicated)" : "");
    }
    if (dense_layers() > 0) return transformer_tp_error(tp, attends ? c_.heads : tp, c_.intermediate);
    if (c_.shared_intermediate % tp != 0) {
      return "the shared experts' width " + std::to_string(c_.shared_intermediate) + " is not divisible by tp=" + std::to_string(tp);
    }
    return transformer_tp_error(tp, attends ? c_.heads : tp, c_.expert_intermediate);
  }
  std::string cp_error(int cp, int tp = 1) const override {
    const std::int64_t ranks = static_cast<std::int64_t>(cp) * tp;
    if (cp > 1 && v4()) {
      // Note [DeepSeek-V4]
      return "DeepSeek-V4's attention takes context parallelism only on packed (THD) sequences split contiguously "
             "(Megatron-Core's cp_partition_mode contiguous), which dtsim does not model";
    }
    if (cp > 1 && has_linear() && c_.kda) {
      // Note [Kimi Delta Attention]
      return "Kimi Delta Attention takes no context parallelism in Megatron-Bridge (KimiK3Attention: \"KDA context parallelism is not "
             "supported yet\"); dtsim models it at cp=1";
    }
    if (cp > 1 && has_linear() && (c_.linear_key_heads % ranks != 0 || c_.linear_value_heads % ranks != 0)) {
      // Note [Gated DeltaNet]: its heads go to the cp ranks by all-to-all, each tp rank's share.
      return std::to_string(c_.linear_key_heads) + " key and " + std::to_string(c_.linear_value_heads) +
             " value heads of linear attention are not both divisible by tp x cp = " + std::to_string(ranks) +
             " (Megatron-Core's GatedDeltaNet gives each context-parallel rank whole heads of the sequence)";
    }
    if (cp > 1 && has_mamba()) {
      // Note [Mamba-2]: MambaContextParallel gives each cp rank whole heads
      // of its tp rank's, and whole groups or one repeated.
      const std::int64_t g = c_.mamba_groups / tp;
      if (c_.mamba_heads % ranks != 0) {
        return std::to_string(c_.mamba_heads) + " Mamba heads (mamba_num_heads) are not divisible by tp x cp = " + std::to_string(ranks) +
               " (Megatron-Core's MambaContextParallel gives each context-parallel rank whole heads of the sequence)";
      }
      if (g % cp != 0 && cp % g != 0) {
        return "the " + std::to_string(g) + " Mamba groups a tp rank holds neither divide over nor divide cp=" + std::to_string(cp) +
               " (Megatron-Core's MambaContextParallel gives each context-parallel rank whole groups, or one repeated)";
      }
    }
    return "";
  }
  bool cp_all_gather_only() const override { return dsa(); }  // Note [DeepSeek Sparse Attention]
  std::string pp_error(int pp) const override {
    if (pp > 1 && (c_.ple_dim > 0 || c_.kv_shared_layers > 0)) {
      // Note [Gemma 4]
      return std::string(c_.ple_dim > 0 ? "per-layer inputs (ple_dim)" : "layers sharing earlier layers' keys and values (kv_shared_layers)") +
             " reach across the blocks outside any pipeline send; Megatron-Bridge's Gemma4DenseProvider runs pp 1 only";
    }
    return "";
  }
  std::string ep_error(int ep) const override {
    if (ep == 1) return "";
    if (c_.experts == 0) return Model::ep_error(ep);
    if (c_.experts % ep != 0) return std::to_string(c_.experts) + " routed experts are not divisible by ep=" + std::to_string(ep);
    return "";
  }

  std::int64_t parameters() const override { return count(c_.experts); }
  std::int64_t active_parameters() const override { return count(c_.top_k); }

  std::vector<sim::Layer> layers(const sim::WorkloadShape& shape) const override {
    const std::int64_t h = c_.hidden, tp = shape.tp;
    const int e = shape.act_bytes;
    const bool sp = shape.sequence_parallel && tp > 1;
    const std::int64_t v = (c_.vocab + tp - 1) / tp;  // vocab-parallel rows (Megatron-LM)
    const std::int64_t t = local_tokens(shape);
    check_size(static_cast<double>(t) * static_cast<double>(v) * 4, "logits");
    const std::int64_t tn = sp ? t / tp : t;
    const std::string tps = tp > 1 ? ",tp=" + std::to_string(tp) : "";
    std::vector<sim::Layer> out;
    out.reserve(static_cast<std::size_t>(c_.layers + c_.mtp_layers) + 2);

    sim::Layer emb;
    emb.name = "embed_tokens";
    emb.kind = sim::LayerKind::kEmbedding;
    emb.signature = "llama.embed:h=" + std::to_string(h) + ",v=" + std::to_string(c_.vocab) + (c_.embed_scale ? ",es=1" : "") +
                    micro(",em=", c_.embedding_multiplier) + tps + (sp ? ",sp=1" : "");
    emb.params = v * h;
    emb.param_tensors = 1;
    emb.modules = {{"embed.gather", {v * h}, ""}};
    emb.forward.push_back(memory_op("embed.gather", sim::KernelKind::kEmbedding, e * t * h + 8 * t, e * t * h));
    if (c_.embed_scale || c_.embedding_multiplier > 0) {
      // Gemma: times sqrt(hidden) (a constant tensor: nothing kept), and its
      // gradient likewise; Granite: times embedding_multiplier (Note [Granite]).
      const sim::Kernel scale = memory_op("embed.scale", sim::KernelKind::kElementwise, e * tn * h, e * tn * h, 1.0 * tn * h);  // after the reduce-scatter
      emb.forward.push_back(scale);
      emb.backward.push_back(scale);
    }
    emb.backward.push_back(memory_op("embed.scatter_add", sim::KernelKind::kEmbedding, 2 * e * t * h, e * t * h));
    emb.output_bytes = e * tn * h;
    if (streams() > 1) {
      // Note [Hyper-connections]: input_expand copies the embedding to each
      // stream; backward sums the streams' gradients.
      const std::int64_t ns = streams();
      emb.forward.push_back(memory_op("embed.hc_expand", sim::KernelKind::kElementwise, e * tn * h, e * tn * ns * h));
      emb.backward.insert(emb.backward.begin(),
                          memory_op("embed.hc_expand.bwd", sim::KernelKind::kElementwise, e * tn * ns * h, e * tn * h, 1.0 * tn * ns * h));
      emb.output_bytes *= ns;
      emb.signature += ",hc=" + std::to_string(ns);
    }
    if (c_.ple_dim > 0) {
      // Note [Gemma 4]: the per-layer inputs, L P a token: the table's rows
      // (times sqrt(P)), the scaled embedding projected (per_layer_model_projection,
      // times h^-1/2) and normed over each P, the two summed (times 2^-1/2).
      // Kept: the projection's input, the norm's, and the inputs themselves,
      // which every layer reads until its backward. Table and projection
      // are whole on every tp rank.
      const std::int64_t lp = c_.layers * c_.ple_dim, n = t * lp;
      const sim::Kernel proj = gemm("ple.model_proj", t, lp, h, e);
      const std::vector<sim::Kernel> ple_fwd{memory_op("ple.gather", sim::KernelKind::kEmbedding, e * n + 8 * t, e * n), proj,
                                             memory_op("ple.norm", sim::KernelKind::kNorm, (e + 8) * n, (e + 8) * n, 4.0 * static_cast<double>(n)),
                                             memory_op("ple.combine", sim::KernelKind::kElementwise, 2 * e * n, e * n, 2.0 * static_cast<double>(n))};
      emb.forward.insert(emb.forward.end(), ple_fwd.begin(), ple_fwd.end());
      std::vector<sim::Kernel> ple_bwd = backward_of({ple_fwd[3], ple_fwd[2], proj});
      ple_bwd.push_back(memory_op("ple.scatter_add", sim::KernelKind::kEmbedding, 2 * e * n, e * n));
      emb.backward.insert(emb.backward.begin(), ple_bwd.begin(), ple_bwd.end());
      emb.params += ple_rows() * lp + h * lp + c_.ple_dim;
      emb.param_tensors += 3;
      emb.modules.insert(emb.modules.end(), {{"ple.gather", {ple_rows() * lp}, ""}, {"ple.model_proj", {h * lp}, ""}, {"ple.norm", {c_.ple_dim}, ""}});
      emb.saved_bytes += shape.saved_gemm_input(t * h) + (4 + e) * n + 4 * t * c_.layers + e * n;
      emb.signature += ",ple=" + std::to_string(c_.ple_dim) + ",plv=" + std::to_string(ple_rows()) + ",L=" + std::to_string(c_.layers);
    }
    // Note [Sequence parallel embeddings] (layers.cpp): without position
    // embeddings the lookup is reduce-scattered, its gradient all-gathered.
    if (tp > 1) emb.tp_forward.push_back({sp ? sim::CollectiveOp::kReduceScatter : sim::CollectiveOp::kAllReduce, e * t * h, 1});
    if (sp) emb.tp_backward.push_back({sim::CollectiveOp::kAllGather, e * t * h, 1});
    out.push_back(std::move(emb));

    // Note [DeepSeek Sparse Attention]: the keys a query gets, the
    // indexer's heads and width, its loss (1 sparse, 2 dense, 0 none) and
    // the kernels (dk=1: masked dense attention).
    const std::string dsa_keys = !dsa() ? std::string()
                                        : ",dsa=" + std::to_string(c_.index_topk) + ",ih=" + std::to_string(c_.index_heads) +
                                              ",id=" + std::to_string(c_.index_head_dim) +
                                              ",il=" + (c_.index_loss == 'S' ? "1" : c_.index_loss == 'D' ? "2" : "0") +
                                              (c_.dsa_dense ? ",dk=1" : "");
    // Note [Multi-head latent attention]: mla=1 and the latents' ranks and
    // head widths (dn, dr: a query or key head's parts without and with
    // rotary; dv: a value head), where other blocks have kv and d.
    const std::string attention = mla() ? "mla=1,h=" + std::to_string(h) + ",a=" + std::to_string(c_.heads) +
                                              ",qr=" + std::to_string(c_.q_lora_rank) + ",kvr=" + std::to_string(c_.kv_lora_rank) +
                                              ",dn=" + std::to_string(c_.qk_nope_dim) + ",dr=" + std::to_string(c_.qk_rope_dim) +
                                              ",dv=" + std::to_string(c_.v_head_dim) + dsa_keys
                                        : "h=" + std::to_string(h) + ",a=" + std::to_string(c_.heads) +
                                              ",kv=" + std::to_string(c_.kv_heads) + ",d=" + std::to_string(c_.head_dim);
    // Note [DeepSeek-V4]: a layer's attention at its ratio (the indexer's
    // keys at 4); Note [Hyper-connections]: the streams.
    const std::string hc_keys = streams() > 1 ? ",hc=" + std::to_string(streams()) + ",hs=" + std::to_string(c_.hc_sinkhorn_iters) : "";
    auto v4_attention = [&](int ratio) {
      return "v4=1,h=" + std::to_string(h) + ",a=" + std::to_string(c_.heads) + ",qr=" + std::to_string(c_.q_lora_rank) +
             ",d=" + std::to_string(c_.head_dim) + ",dr=" + std::to_string(c_.qk_rope_dim) + ",cr=" + std::to_string(ratio) +
             ",og=" + std::to_string(c_.o_groups) + ",or=" + std::to_string(c_.o_lora_rank) + (ratio == 4 ? dsa_keys : std::string());
    };
    // The keys of a local layer, or of a global one (Note [Gemma]).
    auto common_of = [&](bool global) {
      const std::int64_t window = global ? 0 : c_.sliding_window, chunk = global ? 0 : c_.attention_chunk;
      return std::string(",qkvb=") + (c_.qkv_bias ? "1" : "0") + ",ob=" + (c_.o_bias ? "1" : "0") +
             ",mb=" + (c_.mlp_bias ? "1" : "0") + ",qkn=" + (c_.qk_norm ? "1" : "0") +
             (window > 0 ? ",sw=" + std::to_string(window) : "") +
             // Note [Llama 4]: chunks and L2 q/k norms on local layers, NoPE and its temperature on global ones
             (chunk > 0 ? ",chunk=" + std::to_string(chunk) : "") + (!global && c_.l2_qk_norm ? ",l2qk=1" : "") +
             ((global && c_.nope_global) || !c_.rotary ? ",nope=1" : "") + (global && c_.attn_temperature ? ",tt=1" : "") +
             // Note [Ministral 3]: every layer's queries scaled (beta in millionths)
             micro(",qs=", c_.q_scaling_beta) + (c_.q_scaling_beta > 0 ? ",qsl=" + std::to_string(c_.q_scaling_length) : "") +
             // Note [Gemma]: its norms, GeGLU and soft cap (signatures hold integers)
             (c_.gemma_norms ? ",gn=1" : "") + (c_.olmo2_norms ? ",on=1" : "") + (c_.whole_qk_norm && !c_.olmo2_norms ? ",qkw=1" : "") +
             // Note [Gated DeltaNet]: Qwen3-Next's norms and gated attention output
             (c_.zero_centered_norms ? ",zc=1" : "") + (c_.attn_output_gate ? ",og=1" : "") +
             (c_.gelu ? ",gelu=1" : "") + (c_.situ ? ",situ=1" : "") +  // Note [Kimi K3]
             (c_.v_norm ? ",vn=1" : "") + (c_.moe_branch_norms ? ",bn=1" : "") +  // Note [Gemma 4]
             (c_.ple_dim > 0 ? ",ple=" + std::to_string(c_.ple_dim) : "") +
             (c_.attn_softcap > 0 ? ",sc=" + std::to_string(std::max<long long>(1, std::llround(c_.attn_softcap))) : "") +
             // in thousandths (signatures hold integers)
             (c_.attention_dropout > 0 ? ",adrop=" + std::to_string(std::max<long long>(1, std::llround(c_.attention_dropout * 1000))) : "") +
             micro(",rm=", c_.residual_multiplier) +  // Note [Granite]
             // Note [gpt-oss]: sinks, the clamped SwiGLU (millionths), fp32 norm products
             (c_.attention_sinks ? ",sink=1" : "") + micro(",swl=", c_.swiglu_limit) + (c_.fp32_norm_weight ? ",fnw=1" : "") +
             (tp > 1 ? tps + (sp ? ",sp=1" : "") : "") + attention_signature(shape) +
             (shape.fused_kernels ? ",fk=1" : "") + hc_keys;  // Note [Fused kernels]
    };
    const std::string common = common_of(false);
    // Note [Gated DeltaNet]: a linear-attention layer's heads and widths.
    const std::string linear_attention = !has_linear() ? std::string()
                                         : c_.kda ? "kda=1,h=" + std::to_string(h) + ",kh=" + std::to_string(c_.linear_value_heads) +
                                                        ",dk=" + std::to_string(c_.linear_value_dim) + ",ck=" + std::to_string(c_.linear_conv_kernel) +
                                                        (c_.kda_gate_rank > 0 ? ",gr=" + std::to_string(c_.kda_gate_rank) : "")
                                                  : "gdn=1,h=" + std::to_string(h) + ",kh=" + std::to_string(c_.linear_key_heads) +
                                                             ",vh=" + std::to_string(c_.linear_value_heads) +
                                                             ",dk=" + std::to_string(c_.linear_key_dim) + ",dv=" + std::to_string(c_.linear_value_dim) +
                                                             ",ck=" + std::to_string(c_.linear_conv_kernel);
    // Note [Mamba-2]: a Mamba-2 layer's heads, widths and chunk.
    const std::string mamba_mixer = !has_mamba() ? std::string()
                                                 : "mamba=1,h=" + std::to_string(h) + ",mh=" + std::to_string(c_.mamba_heads) +
                                                       ",mp=" + std::to_string(c_.mamba_head_dim) + ",mn=" + std::to_string(c_.mamba_state) +
                                                       ",mg=" + std::to_string(c_.mamba_groups) + ",ck=" + std::to_string(c_.mamba_conv_kernel) +
                                                       ",mq=" + std::to_string(c_.mamba_chunk);
    // A MoE block's signature with the common keys of its window.
    auto moe_signature = [&](const std::string& common_keys, const std::string& mixer) {
      // The busiest rank's load in thousandths of the balanced one
      // (signatures hold integers).
      const long long load = std::llround(moe_load(shape) * 1000);
      return "moe.block:" + mixer + ",E=" + std::to_string(c_.experts) + ",k=" + std::to_string(c_.top_k) +
             ",fe=" + std::to_string(c_.expert_intermediate) + ",fs=" + std::to_string(c_.shared_intermediate) +
             ",sg=" + (c_.shared_expert_gate ? "1" : "0") + (c_.router_bias ? ",rb=1" : "") +
             (c_.moe_latent > 0 ? ",ml=" + std::to_string(c_.moe_latent) : "") + (c_.latent_norm ? ",lnorm=1" : "") + common_keys +
             (shape.ep > 1 ? ",ep=" + std::to_string(shape.ep) : "") + (shape.etp != tp ? ",etp=" + std::to_string(shape.etp) : "") +
             (load != 1000 ? ",load=" + std::to_string(load) : "") + (shape.moe_dense ? ",dense=1" : "") +
             // Megatron-Core's allgather dispatcher, where it gathers (Note [Mixture of experts])
             (shape.moe_allgather && !shape.moe_dense && shape.etp * shape.ep > 1 ? ",ag=1" : "");
    };
    // Each kind of layer is made once, by (mixer, part, MoE, global).
    std::map<std::int64_t, sim::Layer> made;
    for (int i = 0; i < c_.layers; ++i) {
      const Part piece = part_of(i);
      const Mixer mixer = piece == Part::kMlp ? Mixer::kAttention : mixer_of(i);
      const bool moe = is_moe(i);
      // Note [Gemma]: a layer that attends globally among sliding ones (a
      // MoE layer too: gpt-oss's, Note [gpt-oss]).
      const bool is_global = global_layer(i) && mixer == Mixer::kAttention;
      // Note [DeepSeek Sparse Attention]: a layer reusing an earlier one's top-k.
      const bool reuses = dsa() && !has_indexer(i);
      // Note [DeepSeek-V4]: its ratio.
      const int ratio = ratio_of(i);
      // Note [Attention residuals]: the bank it reads, whether it writes a
      // snapshot, whether it is the last.
      const int res = c_.attn_res_block > 0 ? 1 + 4 * res_rows_in(i) + (i % c_.attn_res_block == 0 ? 2 : 0) + (i + 1 == c_.layers ? 1 : 0) : 0;
      // Note [Gemma 4]: a layer reusing an earlier one's keys and values.
      const std::int64_t kind = static_cast<int>(mixer) * 16 + static_cast<int>(piece) * 4 + (moe ? 2 : 0) + (is_global ? 1 : 0) + (reuses ? 64 : 0) +
                                (ratio == 4 ? 128 : ratio > 0 ? 256 : 0) + 512LL * res + (shares_kv(i) ? (std::int64_t{1} << 40) : 0);
      auto it = made.find(kind);
      if (it == made.end()) {
        sim::Layer l = maker(i).block_layer(shape, moe, is_global, mixer, piece, !reuses, ratio);
        if (res > 0) attention_residuals(l, i, shape);
        // Note [Gemma 4]: a global layer's own heads, and its values its keys.
        const LlamaConfig& made_by = maker(i).c_;
        const std::string twin_keys = &maker(i) != this ? "h=" + std::to_string(h) + ",a=" + std::to_string(c_.heads) +
                                                                  ",kv=" + std::to_string(made_by.kv_heads) + ",d=" + std::to_string(made_by.head_dim) +
                                                                  (made_by.k_eq_v ? ",kev=1" : "") + (made_by.reuses_kv ? ",rkv=1" : "")
                                                            : std::string();
        const std::string keys = mixer == Mixer::kMamba ? mamba_mixer : mixer == Mixer::kGdn ? linear_attention : v4() ? v4_attention(ratio)
                                 : !twin_keys.empty() ? twin_keys : attention;
        // Note [Mamba-2]: a hybrid pattern's part, its activation.
        const std::string extra = std::string(c_.squared_relu ? ",relu2=1" : "") +
                                  (piece == Part::kMixer ? ",part=1" : piece == Part::kMlp ? ",part=2" : "") + (reuses ? ",ix=0" : "");
        const std::string res_keys = res > 0 ? ",ar=" + std::to_string(c_.attn_res_block) + ",arr=" + std::to_string(res_rows_in(i)) +
                                                   (i % c_.attn_res_block == 0 ? ",arw=1" : "") + (i + 1 == c_.layers ? ",arl=1" : "")
                                             : std::string();
        l.signature = moe ? moe_signature(common_of(is_global) + extra + res_keys, keys)
                          : "llama.block:" + keys + ",f=" + std::to_string(made_by.intermediate) + common_of(is_global) + extra + res_keys;
        it = made.emplace(kind, std::move(l)).first;
      }
      out.push_back(it->second);
      out.back().name = "layers." + std::to_string(i);
    }

    // Note [Multi-token prediction]: each depth, then the head over all;
    // a depth's signature carries its block's keys.
    if (c_.mtp_layers > 0) {
      for (int k = 0; k < c_.mtp_layers; ++k) {
        // Note [DeepSeek-V4]: a depth's block attends at its own ratio.
        const std::string keys = v4() ? v4_attention(ratio_of(c_.layers + k)) : attention;
        const std::string block_sig = c_.experts > 0 ? moe_signature(common, keys) : "llama.block:" + keys + ",f=" + std::to_string(c_.intermediate) + common;
        const std::string mtp_sig = "llama.mtp:" + block_sig.substr(block_sig.find(':') + 1);
        out.push_back(mtp_layer(shape, k));
        // Depths after the first differ from it by the embedding's copy,
        // and by their weights where they repeat it.
        out.back().signature = mtp_sig + (k == 0 ? "" : c_.mtp_repeated ? ",depth=r" : ",depth=n");
      }
    }

    sim::Layer head;
    head.name = "norm+lm_head";
    head.kind = sim::LayerKind::kLmHead;
    head.signature = "llama.head:h=" + std::to_string(h) + ",v=" + std::to_string(c_.vocab) +
                     ",tied=" + (c_.tied_head ? "1" : "0") + (c_.gemma_norms || c_.zero_centered_norms ? ",gn=1" : "") +
                     (c_.fp32_norm_weight ? ",fnw=1" : "") +
                     (c_.final_softcap > 0 ? ",fsc=" + std::to_string(std::max<long long>(1, std::llround(c_.final_softcap))) : "") +
                     micro(",ls=", c_.logits_scaling) + tps + (sp ? ",sp=1" : "") +
                     (shape.fused_kernels ? ",fk=1" : "");
    head.params = h + (c_.tied_head ? 0 : v * h);
    head.sp_params = sp ? h : 0;  // the final norm
    head.param_tensors = c_.tied_head ? 1 : 2;  // the norm's weight (and an untied lm_head weight)
    head.borrowed_params = c_.tied_head ? v * h : 0;
    head.modules = {{"norm", {h}, ""}, {"lm_head", {v * h}, c_.tied_head ? "embed.gather" : ""}};
    // Note [Hyper-connections]: the streams contracted first.
    if (streams() > 1) head.forward = contraction("hc_head", tn, e);
    // The final norm, composite or fused (Note [Fused kernels]).
    const Bytes norm_io = (shape.fused_kernels ? e : e + 8) * tn * h;
    head.forward.push_back(memory_op("norm", sim::KernelKind::kNorm, norm_io, norm_io, 4.0 * tn * h));
    const std::size_t before_loss = head.forward.size();
    add_lm_loss(head, shape, "lm_head", t, v, h);
    // The norm (Note [Llama activations]; Gemma's keeps its fp32 output:
    // Note [Gemma]), the head GEMM's input (in bf16 under FP8:
    // kernel_precision in sim) and the fp32 log-softmax.
    head.saved_bytes = (shape.fused_kernels ? e : fp32_norm_out() ? 8 : 4 + e) * tn * h + 4 * tn + e * tn * h + detail::lm_loss_saved(shape, t, v, h);
    if (streams() > 1) {
      head.saved_bytes += contraction_kept(tn, e);
      head.params += contraction_params();
      head.param_tensors += 3;  // hc_head_fn, its base and scale
      head.modules.insert(head.modules.begin(), {"hc_head", {streams() * streams() * h, streams(), 1}, ""});
      head.signature += hc_keys;
    }
    if (c_.final_softcap > 0 && !detail::fused_lm_loss(shape)) {
      // Gemma 2's final soft cap on the logits before the loss: a division,
      // a tanh (its output kept) and a multiplication.
      const auto at = head.forward.begin() + static_cast<std::ptrdiff_t>(before_loss) + 1;  // after the norm and the head GEMM
      head.forward.insert(at, memory_op("logits.softcap", sim::KernelKind::kElementwise, 3 * e * t * v, 3 * e * t * v, 3.0 * t * v));
      head.backward = backward_of(head.forward);
      head.saved_bytes += e * t * v;
    }
    if (c_.logits_scaling > 0 && !detail::fused_lm_loss(shape)) {
      // Granite divides the logits by logits_scaling before the loss (Note
      // [Granite]): a pass over them, nothing kept; its backward divides the
      // logits' gradient likewise.
      const auto at = head.forward.begin() + static_cast<std::ptrdiff_t>(before_loss) + 1;  // after the norm and the head GEMM
      head.forward.insert(at, scale_op("logits.scale", e, t * v));
      head.backward = backward_of(head.forward);
      scaled_backward(head.backward);
    }
    for (int k = 0; k < c_.mtp_layers; ++k) add_mtp_loss(head, shape);
    if (c_.mtp_layers > 0) head.signature += ",mtp=" + std::to_string(c_.mtp_layers);
    out.push_back(std::move(head));
    return out;
  }

 private:
  /// ",key=N", N the value in millionths (signatures hold integers; the
  /// loader takes none below one), or nothing where the value is 0 (the op
  /// is not there).
  static std::string micro(const char* key, double value) {
    return value > 0 ? key + std::to_string(std::max<long long>(1, std::llround(value * 1e6))) : std::string();
  }
  /// A tensor of `n` elements times a Python scalar (Note [Granite]): one
  /// pass, e bytes read and written an element, nothing kept.
  static sim::Kernel scale_op(const char* name, Bytes e, Bytes n) {
    return memory_op(name, sim::KernelKind::kElementwise, e * n, e * n, 1.0 * static_cast<double>(n));
  }
  /// A scalar multiply's gradient is the incoming one times the same
  /// scalar: the pass its forward made, not backward_of's two for an
  /// elementwise op that reads its saved input too.
  static void scaled_backward(std::vector<sim::Kernel>& backward) {
    for (sim::Kernel& k : backward) {
      const std::string& n = k.name;
      if (n == "attn.residual_scale.bwd" || n == "mlp.residual_scale.bwd" || n == "logits.scale.bwd") {
        k.bytes /= 2;
        k.flops /= 2;
      }
    }
  }
  bool mla() const { return c_.kv_lora_rank > 0; }
  /// The snapshots in the bank layer i reads (Note [Attention residuals]):
  /// one a block begun before it (Megatron-Bridge's bank_num_rows).
  int res_rows_in(int i) const { return i <= 0 ? 0 : (i + c_.attn_res_block - 1) / c_.attn_res_block; }
  /// Block Attention Residuals on layer i's copy of its kind (Note
  /// [Attention residuals]): the aggregates, their weights and what they
  /// keep, and what the layer hands on.
  void attention_residuals(sim::Layer& l, int i, const sim::WorkloadShape& shape) const {
    using sim::KernelKind;
    const std::int64_t h = c_.hidden, tp = shape.tp;
    const int e = shape.act_bytes;
    const bool sp = shape.sequence_parallel && tp > 1;
    const std::int64_t t = local_tokens(shape), tn = sp ? t / tp : t;  // the residual's tokens on this rank
    const bool write = i % c_.attn_res_block == 0, last = i + 1 == c_.layers;
    const std::int64_t in = res_rows_in(i), after = in + (write ? 1 : 0);
    // One aggregate over R rows (the bank and the running sum) of tn x h:
    // the cat, the fp32 copy, its square and mean, the normed rows and
    // their scores, the softmax's weights times the rows, the sum, the
    // cast back: composite ops (attn_res_aggregate).
    auto aggregate = [&](const std::string& name, std::int64_t rows) {
      const Bytes n = rows * tn * h, out = tn * h;
      return memory_op(name, KernelKind::kElementwise, (2 * e + 28) * n + 4 * out, (e + 20) * n + (4 + e) * out, 8.0 * static_cast<double>(n));
    };
    // It keeps the fp32 rows and the normed rows, and each row's rsqrt and weight.
    auto kept = [&](std::int64_t rows) { return 8 * rows * tn * h + 8 * rows * tn; };
    auto bwd = [](const sim::Kernel& k) { return backward_of({k}).front(); };
    auto at = [](std::vector<sim::Kernel>& ks, const std::string& name) {
      return std::find_if(ks.begin(), ks.end(), [&](const sim::Kernel& k) { return k.name == name; });
    };
    // A forward kernel inserted at p moves the offload groups' kernels after it.
    auto insert_forward = [&](std::vector<sim::Kernel>::iterator where, const sim::Kernel& k) {
      const std::size_t p = static_cast<std::size_t>(where - l.forward.begin());
      l.forward.insert(where, k);
      for (sim::OffloadGroup& g : l.offload_groups) {
        if (g.first >= p) ++g.first;
        if (g.end > p) ++g.end;
      }
    };
    // Before the attention's norm (the first layer's input is the sum alone).
    if (in > 0) {
      const sim::Kernel f = aggregate("attn_res.attn", in + 1);
      insert_forward(l.forward.begin(), f);
      l.backward.push_back(bwd(f));
      l.saved_bytes += kept(in + 1);
    }
    // Before the MLP's norm, over the bank with this layer's snapshot.
    {
      const sim::Kernel f = aggregate("attn_res.mlp", after + 1);
      insert_forward(at(l.forward, "post_attention_layernorm"), f);
      const auto it = at(l.backward, "post_attention_layernorm.bwd");
      l.backward.insert(it == l.backward.end() ? l.backward.begin() : it + 1, bwd(f));
      l.saved_bytes += kept(after + 1);
    }
    // The last layer's output aggregate, without a norm of its own.
    if (last) {
      const sim::Kernel f = aggregate("attn_res.out", after + 1);
      l.forward.push_back(f);
      l.backward.insert(l.backward.begin(), bwd(f));
      l.saved_bytes += kept(after + 1);
    }
    // Each sublayer's score norm and projection (h each), the last's output
    // pair too: replicated, their gradients summed over tp.
    const std::int64_t weights = (last ? 6 : 4) * h;
    l.params += weights;
    l.param_tensors += last ? 6 : 4;
    if (sp) l.sp_params += weights;
    // The output: the running sum, and a writing layer's new bank (which
    // the next layers' checkpoints keep under full recompute); a stage
    // ending here sends the sum and the bank (pack_stage_boundary).
    // The last layer hands on its output aggregate alone.
    l.output_bytes = e * tn * h * (1 + (write && !last ? after : 0));
    l.boundary_bytes = last ? 0 : e * tn * h * (1 + after);
    if (i > 0) {
      // A stage starting here keeps what it received for its gradient; under
      // full recompute its checkpoint is that tensor, and the later layers'
      // keep the bank unpack_stage_boundary copied out of it (a writing
      // layer replaces it at once).
      l.entry_kept_bytes = e * tn * h * (1 + in);
      l.entry_checkpoint_bytes = e * tn * h * (1 + in + (write ? 0 : in));
    }
  }
  /// DeepSeek Sparse Attention (Note [DeepSeek Sparse Attention]).
  bool dsa() const { return c_.index_topk > 0; }
  /// DeepSeek-V4's attention (Note [DeepSeek-V4]).
  bool v4() const { return !c_.compress_ratios.empty(); }
  /// Layer i's compression ratio (MTP depth k's at layers + k; 0 past the list).
  int ratio_of(int i) const {
    return static_cast<std::size_t>(i) < c_.compress_ratios.size() ? c_.compress_ratios[static_cast<std::size_t>(i)] : 0;
  }
  /// The residual's streams (Note [Hyper-connections]); 1: a plain residual.
  std::int64_t streams() const { return c_.hc_mult > 1 ? c_.hc_mult : 1; }
  /// What the head's (and a depth's) contraction of the streams holds:
  /// hc_head_fn, its base and scale (Note [Hyper-connections]).
  std::int64_t contraction_params() const {
    const std::int64_t n = streams();
    return n > 1 ? n * n * c_.hidden + n + 1 : 0;
  }
  /// Layer i runs its own indexer (or, under DSA, reuses an earlier layer's top-k).
  bool has_indexer(int i) const {
    return dsa() && (c_.indexer_layers.empty() || c_.indexer_layers[static_cast<std::size_t>(i)] == 'F');
  }
  /// Layer i's letter in the hybrid pattern (Note [Mamba-2]), or 0 without one.
  char pattern_at(int i) const { return c_.hybrid_pattern.empty() ? '\0' : c_.hybrid_pattern[static_cast<std::size_t>(i)]; }
  /// What layer i holds: a whole block, or under a hybrid pattern its token
  /// mixer (M, *) or its MLP (-, E) alone (Note [Mamba-2]).
  Part part_of(int i) const {
    const char p = pattern_at(i);
    return p == '\0' ? Part::kBlock : p == 'M' || p == '*' ? Part::kMixer : Part::kMlp;
  }
  /// How layer i mixes its tokens (the MLP parts of a hybrid pattern: none, kAttention).
  Mixer mixer_of(int i) const {
    const char mixer = c_.layer_mixers.empty() ? '\0' : c_.layer_mixers[static_cast<std::size_t>(i)];  // Granite 4.0-H's, Kimi's
    return pattern_at(i) == 'M' || mixer == 'M' ? Mixer::kMamba : is_linear(i) || mixer == 'L' ? Mixer::kGdn : Mixer::kAttention;
  }
  bool has_mamba() const {
    return c_.hybrid_pattern.find('M') != std::string::npos || c_.layer_mixers.find('M') != std::string::npos;
  }
  /// Layer i has a mixture of experts for its MLP (HF Qwen2MoeDecoderLayer:
  /// (i + 1) % decoder_sparse_step == 0; DeepSeek: i >= first_k_dense_replace;
  /// a hybrid pattern's E).
  bool is_moe(int i) const {
    if (!c_.hybrid_pattern.empty()) return pattern_at(i) == 'E';
    return c_.experts > 0 && i >= c_.first_dense && (i + 1) % c_.moe_step == 0;
  }
  /// The MLP's first GEMM writes gate and up (2), or up alone (1: squared ReLU).
  std::int64_t up_width() const { return c_.squared_relu ? 1 : 2; }
  /// Layer i is Gated DeltaNet linear attention (Note [Gated DeltaNet]):
  /// all but every full_attention_interval-th (HF's layer_types default,
  /// "linear_attention" where (i + 1) % interval).
  bool is_linear(int i) const { return c_.full_attention_interval > 0 && (i + 1) % c_.full_attention_interval != 0; }
  /// Some layer is: layer 0 is, unless every layer attends (an interval of 1).
  bool has_linear() const { return c_.full_attention_interval > 1 || c_.layer_mixers.find('L') != std::string::npos; }
  /// Layers whose token mixer is softmax attention.
  int attention_layers() const {
    int n = 0;
    for (int i = 0; i < c_.layers; ++i) n += part_of(i) != Part::kMlp && mixer_of(i) == Mixer::kAttention ? 1 : 0;
    return n;
  }
  /// Layers with a dense MLP.
  int dense_layers() const {
    int n = 0;
    for (int i = 0; i < c_.layers; ++i) n += is_moe(i) || part_of(i) == Part::kMixer ? 0 : 1;
    return n;
  }

  /// HuggingFace's count with `routed` experts per MoE layer: all of them
  /// (parameters) or top_k (active parameters per token).
  std::int64_t count(std::int64_t routed) const {
    const std::int64_t h = c_.hidden;
    std::int64_t blocks = 0;
    for (int i = 0; i < c_.layers; ++i) {
      const BlockParams p = maker(i).block_params(1, is_moe(i), mixer_of(i), part_of(i), has_indexer(i), ratio_of(i));
      blocks += p.split + p.replicated + (is_moe(i) ? routed * expert_params_each(1) : 0);
    }
    // Note [Multi-token prediction]: each depth's block, eh_proj and three
    // norms (the embedding and the head are shared), and its contraction
    // of the streams (Note [Hyper-connections]).
    const bool mtp_moe = c_.experts > 0;
    // One set of weights where the depths repeat one layer.
    const int depths = c_.mtp_repeated ? std::min(c_.mtp_layers, 1) : c_.mtp_layers;
    for (int k = 0; k < depths; ++k) {
      const BlockParams mp = block_params(1, mtp_moe, Mixer::kAttention, Part::kBlock, true, ratio_of(c_.layers + k));
      blocks += mp.split + mp.replicated + (mtp_moe ? routed * expert_params_each(1) : 0) + 2 * h * h + 3 * h + contraction_params();
    }
    // Note [Attention residuals]: each layer's two score norms and
    // projections, the last layer's output pair.
    if (c_.attn_res_block > 0) blocks += 4 * h * c_.layers + 2 * h;
    // Note [Gemma 4]: the per-layer inputs' table, projection and norm.
    if (c_.ple_dim > 0) blocks += (ple_rows() + h) * c_.layers * c_.ple_dim + c_.ple_dim;
    // embed_tokens V h, the blocks, the head's contraction of the streams,
    // the final norm h, lm_head V h (untied).
    return c_.vocab * h + blocks + contraction_params() + h + (c_.tied_head ? 0 : c_.vocab * h);
  }

  /// One multi-token prediction depth up to its final norm (Note
  /// [Multi-token prediction]); the shared head's pass over it is the
  /// head layer's (add_mtp_loss).
  sim::Layer mtp_layer(const sim::WorkloadShape& shape, int depth) const {
    using sim::KernelKind;
    const std::int64_t h = c_.hidden, tp = shape.tp;
    const int e = shape.act_bytes;
    const bool sp = shape.sequence_parallel && tp > 1;
    const std::int64_t t = local_tokens(shape), tn = sp ? t / tp : t;
    const std::int64_t v = (c_.vocab + tp - 1) / tp;
    const bool fused = shape.fused_kernels;
    const Bytes norm_io = (fused ? e : e + 8) * tn * h;
    auto norm = [&](const char* name) { return memory_op(name, KernelKind::kNorm, norm_io, norm_io, 4.0 * tn * h); };
    // What an RMSNorm keeps (Note [Llama activations]; fused: its input and rsigma).
    const Bytes norm_kept = (fused ? e : 4 + e) * tn * h + 4 * tn;
    // Note [DeepSeek-V4]: the depth's block attends at its own ratio.
    const sim::Layer block = block_layer(shape, c_.experts > 0, false, Mixer::kAttention, Part::kBlock, true, ratio_of(c_.layers + depth));
    const std::int64_t ns = streams();
    sim::Layer l;
    l.name = "mtp." + std::to_string(depth);
    l.kind = sim::LayerKind::kOther;
    l.fp8_as_block = true;  // Transformer Engine's Linears, eh_proj's and the block's
    // Note [Hyper-connections]: with streams, hnorm over each of them,
    // e_proj of the embedding added to h_proj of each; the depth's own
    // contraction before its final norm.
    const std::vector<sim::Kernel> pre =
        ns > 1 ? std::vector<sim::Kernel>{norm("mtp.enorm"),
                                          memory_op("mtp.hnorm", KernelKind::kNorm, ns * norm_io, ns * norm_io, 4.0 * static_cast<double>(ns * tn * h)),
                                          gemm("mtp.e_proj", t, h, h, e), gemm("mtp.h_proj", ns * t, h, h, e),
                                          memory_op("mtp.combine", KernelKind::kElementwise, e * tn * (ns + 1) * h, e * tn * ns * h, 1.0 * tn * ns * h)}
               : std::vector<sim::Kernel>{norm("mtp.enorm"), norm("mtp.hnorm"),
                                          memory_op("mtp.concat", KernelKind::kElementwise, 2 * e * tn * h, 2 * e * tn * h),
                                          gemm("mtp.eh_proj", t, h / tp, 2 * h, e)};
    std::vector<sim::Kernel> tail = ns > 1 ? contraction("mtp.hc_head", tn, e) : std::vector<sim::Kernel>{};
    tail.push_back(norm("mtp.final_layernorm"));
    l.forward.push_back(memory_op("mtp.embed", KernelKind::kEmbedding, e * t * h + 8 * t, e * t * h));
    l.forward.insert(l.forward.end(), pre.begin(), pre.end());
    l.forward.insert(l.forward.end(), block.forward.begin(), block.forward.end());
    l.forward.insert(l.forward.end(), tail.begin(), tail.end());
    l.backward = backward_of(tail);
    l.backward.insert(l.backward.end(), block.backward.begin(), block.backward.end());
    const auto pre_backward = backward_of(pre);
    l.backward.insert(l.backward.end(), pre_backward.begin(), pre_backward.end());
    l.backward.push_back(memory_op("mtp.embed.scatter_add", KernelKind::kEmbedding, 2 * e * t * h, e * t * h));
    // Kept: the two norms', eh_proj's input (e_proj's and h_proj's), the
    // block's, the contraction's and the final norm's.
    l.saved_bytes = (1 + ns) * norm_kept + shape.saved_gemm_input((1 + ns) * tn * h) + block.saved_bytes + norm_kept +
                    (ns > 1 ? contraction_kept(tn, e) : 0);
    // On to the head: the model's hidden state (its streams) and this depth's.
    l.output_bytes = e * tn * h * (ns + 1);
    l.params = 3 * h + 2 * h * h / tp + block.params + contraction_params();
    l.sp_params = sp ? 3 * h + block.sp_params : 0;  // its three norms and its block's
    l.expert_params = block.expert_params;
    l.param_tensors = (ns > 1 ? 8 : 4) + block.param_tensors;  // with streams: e_proj, h_proj and the contraction's three
    l.largest_param_tensor = std::max(2 * h * h / tp, block.largest_param_tensor);
    // The embedding table: one copy where this is not the first stage,
    // however many depths use it.
    l.borrowed_params = depth == 0 ? v * h : 0;
    if (c_.mtp_repeated && depth > 0) {
      // mtp_use_repeated_layer: depth 0's weights run again; their
      // gradients accumulate there.
      l.params = l.sp_params = l.expert_params = 0;
      l.param_tensors = 0;
      l.largest_param_tensor = 0;
    }
    l.tp_forward = block.tp_forward;
    l.tp_backward = block.tp_backward;
    if (tp > 1) {
      // The vocab-parallel embedding's sum, eh_proj's input gathered (under
      // sequence parallelism) and its output gathered; backward, its
      // input's gradient summed.
      l.tp_forward.push_back({sp ? sim::CollectiveOp::kReduceScatter : sim::CollectiveOp::kAllReduce, e * t * h, 1});
      if (sp) l.tp_forward.push_back({sim::CollectiveOp::kAllGather, 2 * e * t * h, 1});
      l.tp_forward.push_back({sim::CollectiveOp::kAllGather, e * t * h, 1});
      l.tp_backward.push_back({sp ? sim::CollectiveOp::kReduceScatter : sim::CollectiveOp::kAllReduce, 2 * e * t * h, 1});
    }
    l.ep_forward = block.ep_forward;
    l.ep_backward = block.ep_backward;
    l.ep_route = block.ep_route;
    l.cp_forward = block.cp_forward;
    l.cp_backward = block.cp_backward;
    l.attention_core_bytes = block.attention_core_bytes;
    l.attention_core = block.attention_core;
    l.recompute_described = block.recompute_described;
    l.recompute_ep = block.recompute_ep;
    // Note [Offload modules]: the block's groups, past the kernels before it.
    l.offload_described = block.offload_described;
    l.offload_groups = block.offload_groups;
    for (sim::OffloadGroup& g : l.offload_groups) {
      g.first += 1 + pre.size();
      g.end += 1 + pre.size();
    }
    return l;
  }

  /// The shared head's pass over each depth's hidden state, with its own
  /// cross-entropy (Note [Multi-token prediction]).
  void add_mtp_loss(sim::Layer& head, const sim::WorkloadShape& shape) const {
    const std::int64_t h = c_.hidden, tp = shape.tp;
    const int e = shape.act_bytes;
    const bool sp = shape.sequence_parallel && tp > 1;
    const std::int64_t t = local_tokens(shape), tn = sp ? t / tp : t;
    const std::int64_t v = (c_.vocab + tp - 1) / tp;
    sim::Layer lm;
    detail::add_lm_loss(lm, shape, "mtp.lm_head", t, v, h);
    head.forward.insert(head.forward.end(), lm.forward.begin(), lm.forward.end());
    head.backward.insert(head.backward.begin(), lm.backward.begin(), lm.backward.end());
    head.saved_bytes += e * tn * h + detail::lm_loss_saved(shape, t, v, h);  // the GEMM's input and what the loss keeps
    head.backward_workspace_bytes = std::max(head.backward_workspace_bytes, lm.backward_workspace_bytes);
    head.tp_forward.insert(head.tp_forward.end(), lm.tp_forward.begin(), lm.tp_forward.end());
    head.tp_backward.insert(head.tp_backward.end(), lm.tp_backward.begin(), lm.tp_backward.end());
  }

  /// One routed expert's SwiGLU (gate, up, down), or squared ReLU MLP (up,
  /// down), on one of etp ranks.
  std::int64_t expert_params_each(std::int64_t etp) const {
    const std::int64_t up = up_width();  // SwiGLU's gate and up, or squared ReLU's up
    return (up + 1) * expert_width() * c_.expert_intermediate / etp + (c_.mlp_bias ? (up * c_.expert_intermediate) / etp + expert_width() : 0);
  }

  /// The routed experts' input and output width: the latent one, or the
  /// hidden size (Note [Latent MoE]).
  std::int64_t expert_width() const { return c_.moe_latent > 0 ? c_.moe_latent : c_.hidden; }

  struct BlockParams {
    std::int64_t split = 0;       ///< this tensor-parallel rank's share of the split weights
    std::int64_t replicated = 0;  ///< weights every tensor-parallel rank holds whole
    /// Of them, those used on a rank's tokens only under sequence
    /// parallelism (Layer::sp_params): all but per-head q/k norms, which
    /// run after the gather.
    std::int64_t sequence_parallel = 0;
    int tensors = 0;
  };
  /// One block's parameters on one of tp ranks, routed experts apart: the
  /// column- and row-parallel weights and column biases split, the norms,
  /// o_proj's and down_proj's biases, MLA's down-projections and the router
  /// replicated (Megatron-LM's and Megatron-Core's split).
  BlockParams block_params(std::int64_t tp, bool moe, Mixer mixer = Mixer::kAttention, Part part = Part::kBlock,
                           bool indexer = true, int ratio = 0) const {
    const std::int64_t h = c_.hidden, a = c_.heads, kv = c_.kv_heads, d = c_.head_dim, f = c_.intermediate;
    const bool linear = mixer == Mixer::kGdn;
    BlockParams p;
    // Input and post-attention RMSNorms; Gemma's pre- and post-feedforward
    // ones too; a hybrid pattern's part has its pre-norm alone.
    const int norms = part != Part::kBlock ? 1 : c_.gemma_norms ? 4 : 2;
    std::int64_t split = 0, replicated = norms * h, kv_per_rank = 0;
    int tensors = norms;
    if (part == Part::kMlp) {
      // No token mixer.
    } else if (mixer == Mixer::kMamba) {
      // Note [Mamba-2]: in_proj (z, x, B, C, dt), the depthwise convolution
      // over x, B and C with its bias, dt_bias, A_log and D a head, the
      // gated norm over the inner width, out_proj: all split by heads
      // (and B, C by groups) over tp.
      const std::int64_t di = c_.mamba_heads * c_.mamba_head_dim, bc = 2 * c_.mamba_groups * c_.mamba_state;
      split += h * (2 * di + bc + c_.mamba_heads) + (di + bc) * (c_.mamba_conv_kernel + 1) + 3 * c_.mamba_heads + di + di * h;
      tensors += 8;  // in_proj, conv1d weight and bias, dt_bias, A_log, D, norm, out_proj
    } else if (linear && c_.kda) {
      // Note [Kimi Delta Attention]: q, k, v (P = heads x head_dim each),
      // the output gate (g_proj, or g_a and g_b), b_proj (a beta a head),
      // f_b_proj, the q/k/v convolutions, A_log (a head) and dt_bias (a
      // channel), o_proj split by heads; f_a_proj (h x head_dim, a
      // duplicated TELinear), g_a_proj and o_norm's weight whole.
      const std::int64_t H = c_.linear_value_heads, dk = c_.linear_value_dim, P = H * dk, r = c_.kda_gate_rank;
      split += h * (3 * P + H) + dk * P + (r > 0 ? r * P : h * P) + 3 * P * c_.linear_conv_kernel + H + P + P * h;
      replicated += h * dk + (r > 0 ? h * r : 0) + dk;
      tensors += r > 0 ? 15 : 14;  // q, k, v, b, f_a, f_b, the gate (one or two), three convolutions, A_log, dt_bias, o_norm, o_proj
    } else if (linear) {
      // Note [Gated DeltaNet]: in_proj (q, k, v, z, b, a), the q/k/v
      // convolution, dt_bias and A_log split by heads; the gated norm's
      // weight (one value head's width) replicated; out_proj.
      const std::int64_t kd = c_.linear_key_heads * c_.linear_key_dim, vd = c_.linear_value_heads * c_.linear_value_dim;
      const std::int64_t vh = c_.linear_value_heads;
      split += h * (2 * kd + 2 * vd + 2 * vh) + (2 * kd + vd) * c_.linear_conv_kernel + 2 * vh + vd * h;
      replicated += c_.linear_value_dim;
      tensors += 7;  // in_proj_qkvz, in_proj_ba, conv1d, dt_bias, A_log, norm, out_proj
    } else if (v4()) {
      // Note [DeepSeek-V4]: wq_a, q_layernorm, wq_b, wkv, kv_layernorm,
      // wo_a, wo_b and the sinks; the compressor's wkv, wgate, ape and
      // norm; a ratio-4 layer's indexer (wq_b, weights_proj and its own
      // compressor). Megatron-Core runs them at tp 1.
      const std::int64_t qr = c_.q_lora_rank;
      split += h * qr + qr * a * d + h * d + c_.o_lora_rank * a * d + c_.o_groups * c_.o_lora_rank * h + a;
      replicated += qr + d;
      tensors += 8;
      if (ratio > 0) {
        const std::int64_t coff = ratio == 4 ? 2 : 1;
        split += 2 * coff * d * h + ratio * coff * d + d;
        tensors += 4;
      }
      if (ratio == 4 && indexer) {
        const std::int64_t hi = c_.index_heads, di = c_.index_head_dim;
        split += hi * di * qr + hi * h + 2 * 2 * di * h + 4 * 2 * di + di;
        tensors += 6;
      }
    } else if (mla()) {
      // DeepseekV3Attention: q_a_proj, q_a_layernorm, q_b_proj (or q_proj),
      // kv_a_proj_with_mqa, kv_a_layernorm, kv_b_proj, o_proj; no biases.
      const std::int64_t qk = c_.qk_nope_dim + c_.qk_rope_dim, qr = c_.q_lora_rank, kvr = c_.kv_lora_rank;
      if (qr > 0) {
        replicated += h * qr + qr;
        split += qr * a * qk;
        tensors += 3;
      } else {
        split += h * a * qk;
        tensors += 1;
      }
      replicated += h * (kvr + c_.qk_rope_dim) + kvr;
      split += kvr * a * (c_.qk_nope_dim + c_.v_head_dim) + a * c_.v_head_dim * h;
      tensors += 4;
      if (c_.attn_output_gate) split += h * a * c_.v_head_dim, tensors += 1;  // Note [Kimi K3]: g_proj
      if (dsa() && indexer) {
        // Note [DeepSeek Sparse Attention]: the indexer's wq_b, wk, k_norm
        // (a LayerNorm: weight and bias) and weights_proj, whole on every
        // tp rank.
        const std::int64_t hi = c_.index_heads, di = c_.index_head_dim;
        replicated += hi * di * (qr > 0 ? qr : h) + di * h + 2 * di + hi * h;
        tensors += 5;
      }
    } else {
      // Note [Gemma 4]: K and V (K alone where the values are the keys),
      // whole heads on each rank, replicated where they are fewer than tp.
      split += h * a * d + a * d * h;
      // A layer reusing an earlier one's keys and values has neither.
      kv_per_rank = c_.reuses_kv ? 0 : (c_.k_eq_v ? 1 : 2) * h * std::max<std::int64_t>(1, kv / tp) * d;
      if (c_.attn_output_gate) split += h * a * d;  // Note [Gated DeltaNet]: q_proj's gate half
      tensors += c_.reuses_kv ? 2 : c_.k_eq_v ? 3 : 4;
      if (c_.qkv_bias) split += (a * (c_.attn_output_gate ? 2 : 1) + 2 * kv) * d, tensors += 3;  // a gated q_proj's bias is 2 a d
      if (c_.o_bias) replicated += h, tensors += 1;
      // Qwen3's and Gemma 3's q/k norms are per head (d each); OLMo 2's and
      // MiniMax-M2's span the whole projections (a d and kv d: Note [OLMo 2]).
      if (c_.qk_norm && c_.reuses_kv) {
        replicated += d, tensors += 1;  // Note [Gemma 4]: q_norm alone
      } else if (c_.qk_norm) {
        replicated += whole_qk() ? (a + kv) * d : 2 * d, tensors += 2;
      }
      if (c_.attention_sinks) split += a, tensors += 1;  // a logit per head, split with the heads (Note [gpt-oss])
    }
    const std::int64_t up = up_width();  // the MLP's first GEMM: gate and up, or up alone
    if (part == Part::kMixer) {
      // No MLP.
    } else if (!moe) {
      split += (up + 1) * h * f;
      tensors += static_cast<int>(up) + 1;
      if (c_.mlp_bias) split += up * f, replicated += h, tensors += static_cast<int>(up) + 1;
    } else {
      replicated += h * c_.experts + (c_.router_bias ? c_.experts : 0);  // the router (gate)
      tensors += c_.router_bias ? 2 : 1;
      // Note [Latent MoE]: fc1_latent_proj and fc2_latent_proj, duplicated.
      if (c_.moe_latent > 0) replicated += 2 * h * c_.moe_latent, tensors += 2;
      if (c_.latent_norm) replicated += c_.moe_latent, tensors += 1;  // Note [Kimi K3]: routed_expert_norm
      // Note [Gemma 4]: the branches' three norms, the router's scale.
      if (c_.moe_branch_norms) replicated += 4 * h, tensors += 4;
      if (c_.shared_intermediate > 0) {
        split += (up + 1) * h * c_.shared_intermediate;
        tensors += static_cast<int>(up) + 1;
      }
      if (c_.shared_expert_gate) replicated += h, tensors += 1;
    }
    if (c_.ple_dim > 0 && part == Part::kBlock) {
      // Note [Gemma 4]: the per-layer input's gate (h -> ple_dim), its
      // projection back and the norm after it, whole on every rank.
      replicated += 2 * h * c_.ple_dim + h;
      tensors += 3;
    }
    if (streams() > 1) {
      // Note [Hyper-connections]: each sublayer's mapping_proj (weight and
      // bias) and its three scalars.
      const std::int64_t n = streams(), g = n * n + 2 * n;
      const int sublayers = part == Part::kBlock ? 2 : 1;
      replicated += sublayers * (g * n * h + g + 3);
      tensors += sublayers * 5;
    }
    p.split = split / tp + kv_per_rank;
    p.replicated = replicated;
    // Per-head norms run after the gather: the q/k norms (attention's, where
    // the layer attends) and GDN's gated norm.
    const bool attends = part != Part::kMlp && mixer == Mixer::kAttention;
    // Kimi Delta Attention's replicated weights are all summed over tp
    // (f_a_proj's partial gradients, o_norm marked so: Note [Kimi Delta Attention]).
    p.sequence_parallel = replicated - (linear && !c_.kda ? c_.linear_value_dim
                                        : attends && c_.qk_norm && !whole_qk() ? (c_.reuses_kv ? d : 2 * d)  // Note [Gemma 4]: q_norm alone
                                                                               : 0);
    p.tensors = tensors;
    return p;
  }

  /// The tokens of the rank holding the busiest expert over a balanced
  /// rank's (Note [Mixture of experts]).
  double moe_load(const sim::WorkloadShape& shape) const {
    const double E = c_.experts, el = static_cast<double>(c_.experts / shape.ep);
    const double C = shape.moe_capacity_factor;
    double hot = std::min(shape.moe_imbalance, E);
    double rest = E > 1 ? (E - hot) / (E - 1) : 1.0;  // the other experts share what is left
    if (C > 0) {
      hot = shape.moe_pad ? C : std::min(hot, C);
      rest = shape.moe_pad ? C : std::min(rest, C);
    }
    return (hot + (el - 1) * rest) / el;
  }

  /// Layer i attends to every key before it, among local layers (a
  /// sliding window or chunks: Note [Gemma], Note [Llama 4]).
  bool global_layer(int i) const { return c_.global_every > 0 && (i + 1) % c_.global_every == 0; }

  /// The gated MLP's activation over n elements of its intermediate: the
  /// composite ops write the activation's output and the product, a fused
  /// kernel the product alone (Note [Fused kernels]); GeGLU's tanh GELU
  /// costs a few more operations an element than SiLU. Squared ReLU (Note
  /// [Mamba-2]): relu, then pow(x, 2), or fused one pass.
  sim::Kernel act(const char* name, Bytes n, const sim::WorkloadShape& shape) const {
    const int e = shape.act_bytes;
    if (c_.squared_relu) {
      const Bytes passes = shape.fused_kernels ? 1 : 2;
      return memory_op(name, sim::KernelKind::kElementwise, passes * e * n, passes * e * n, 2.0 * static_cast<double>(n));
    }
    if (c_.situ) {
      // Kimi K3's SiTU as SiTUAndMul runs it (Note [Kimi K3]), composite
      // ops in fp32 whatever plan.kernels: the cast of gate and up, ten
      // passes over n fp32 elements, the cast back.
      return memory_op(name, sim::KernelKind::kElementwise, 2 * e * n + 48 * n, 44 * n + e * n, 30.0 * static_cast<double>(n));
    }
    if (c_.swiglu_limit > 0 && !shape.fused_kernels) {
      // gpt-oss's clamped SwiGLU as its composite ops run (Note [gpt-oss]):
      // two clamps, gate x alpha, its sigmoid, their product, up + 1, the
      // product of the two: 9 reads and 7 writes an element.
      return memory_op(name, sim::KernelKind::kElementwise, 9 * e * n, 7 * e * n, 12.0 * static_cast<double>(n));
    }
    return memory_op(name, sim::KernelKind::kElementwise, 2 * e * n, (shape.fused_kernels ? 1 : 2) * e * n,
                     (c_.gelu ? 10.0 : c_.swiglu_limit > 0 ? 12.0 : 6.0) * static_cast<double>(n));
  }
  /// What it keeps for backward, with the down projection's input (g an
  /// element): the gate's and up's outputs and the activation's (3e + g), or
  /// fused the first two (2e + g); gpt-oss's composite clamped SwiGLU keeps
  /// gate and up (the clamps' inputs), the clamped gate, the sigmoid, up + 1
  /// and their gated product (6e + g: Note [gpt-oss]).
  /// Squared ReLU keeps relu's output (which pow saves as its input) or,
  /// fused, its input, and down's input (e + g).
  Bytes act_kept(Bytes n, const sim::WorkloadShape& shape) const {
    const int e = shape.act_bytes;
    if (c_.squared_relu) return e * n + shape.saved_gemm_input(n);
    // SiTU (Note [Kimi K3]): six fp32 tensors, the two tanh outputs, the
    // gate's scaled tanh, its sigmoid and the two factors of the product.
    if (c_.situ) return 24 * n + shape.saved_gemm_input(n);
    if (shape.fused_kernels) return 2 * e * n + shape.saved_gemm_input(n);
    return (c_.swiglu_limit > 0 ? 6 : 3) * e * n + shape.saved_gemm_input(n);
  }
  /// q and k normed over their whole projections (Note [OLMo 2], Note [MiniMax-M2]).
  bool whole_qk() const { return c_.olmo2_norms || c_.whole_qk_norm; }
  /// The norms keep their fp32 output for the weight's product (Gemma's,
  /// and gpt-oss's: Note [gpt-oss]).
  bool fp32_norm_out() const { return c_.gemma_norms || c_.fp32_norm_weight || c_.zero_centered_norms; }

  /// A block, global (every key) or local (the window or chunks).
  sim::Layer block_layer(const sim::WorkloadShape& shape, bool moe, bool global, Mixer mixer = Mixer::kAttention,
                         Part piece = Part::kBlock, bool indexer = true, int ratio = 0) const {
    using sim::KernelKind;
    const bool gdn = mixer == Mixer::kGdn, mamba = mixer == Mixer::kMamba;
    // Note [Mamba-2]: a hybrid pattern's layer is a block's token mixer or its MLP alone.
    const bool has_mixer = piece != Part::kMlp, has_mlp = piece != Part::kMixer;
    const std::int64_t h = c_.hidden, tp = shape.tp, d = c_.head_dim;
    const int e = shape.act_bytes;
    const bool sp = shape.sequence_parallel && tp > 1;
    const std::int64_t t = local_tokens(shape);
    check_size(static_cast<double>(t) * static_cast<double>(std::max({h, c_.intermediate, c_.expert_intermediate * c_.top_k})) * e,
               "activations");
    const std::int64_t al = c_.heads / tp;
    const Bytes th = t * h, tn = sp ? th / tp : th;

    sim::Layer l;
    l.kind = sim::LayerKind::kTransformer;
    const BlockParams bp = block_params(tp, moe, mixer, piece, indexer, ratio);
    l.params = bp.split + bp.replicated;
    l.sp_params = sp ? bp.sequence_parallel : 0;
    l.param_tensors = bp.tensors;
    if (!mla() && !moe) {
      // HuggingFace's modules as DeepSpeed's ZeRO-3 gathers them (Note
      // [ZeRO-3 modules] in sim/src/lowering/zero3_coordinator.hpp); the
      // fused GEMMs' time goes with their first module. Latent attention
      // and experts are gathered whole (Layer::modules empty).
      const std::int64_t a = c_.heads, kv = c_.kv_heads, f = c_.intermediate;
      auto linear = [&](const char* name, std::int64_t in, std::int64_t out, bool bias, bool split_bias) {
        sim::ParamModule m{name, {in * out / tp}, ""};
        if (bias) m.tensors.push_back(split_bias ? out / tp : out);
        return m;
      };
      if (!c_.olmo2_norms) l.modules.push_back({"input_layernorm", {h}, ""});
      if (!has_mixer) {
        // The MLP's pre-norm is the layer's input norm.
      } else if (mamba) {
        // Note [Mamba-2]: NemotronHMamba2Mixer's, each named by the kernel that first uses it.
        const std::int64_t nh = c_.mamba_heads, di = nh * c_.mamba_head_dim, bc = 2 * c_.mamba_groups * c_.mamba_state;
        l.modules.push_back({"attn.qkv", {h * (2 * di + bc + nh) / tp}, ""});  // in_proj
        l.modules.push_back({"mamba.conv1d", {(di + bc) * c_.mamba_conv_kernel / tp, (di + bc) / tp}, ""});
        l.modules.push_back({"mamba.core", {nh / tp, nh / tp, nh / tp}, ""});  // dt_bias, A_log, D
        l.modules.push_back({"mamba.norm", {di / tp}, ""});
        l.modules.push_back(linear("attn.o_proj", di, h, false, false));
      } else if (gdn && c_.kda) {
        // Note [Kimi Delta Attention]: KimiK3Attention's, each named by the kernel that first uses it.
        const std::int64_t H = c_.linear_value_heads, dk = c_.linear_value_dim, P = H * dk, r = c_.kda_gate_rank;
        l.modules.push_back({"attn.qkv", {h * P / tp, h * P / tp, h * P / tp}, ""});  // q_proj, k_proj, v_proj
        l.modules.push_back({"attn.b_proj", {h * H / tp}, ""});
        l.modules.push_back({"attn.f_a_proj", {h * dk}, ""});
        l.modules.push_back({"attn.f_b_proj", {dk * P / tp}, ""});
        l.modules.push_back({"kda.conv1d", {P * c_.linear_conv_kernel / tp, P * c_.linear_conv_kernel / tp, P * c_.linear_conv_kernel / tp}, ""});
        l.modules.push_back({"kda.gates", {H / tp, P / tp}, ""});  // A_log, dt_bias
        if (r > 0) {
          l.modules.push_back({"attn.g_a_proj", {h * r}, ""});
          l.modules.push_back({"attn.g_b_proj", {r * P / tp}, ""});
        } else {
          l.modules.push_back({"attn.g_proj", {h * P / tp}, ""});
        }
        l.modules.push_back({"kda.norm", {dk}, ""});
        l.modules.push_back(linear("attn.o_proj", P, h, false, false));
      } else if (gdn) {
        // Note [Gated DeltaNet]: Qwen3NextGatedDeltaNet's, each named by the kernel that first uses it.
        const std::int64_t kd = c_.linear_key_heads * c_.linear_key_dim, vd = c_.linear_value_heads * c_.linear_value_dim;
        const std::int64_t vh = c_.linear_value_heads;
        l.modules.push_back({"attn.qkv", {h * (2 * kd + 2 * vd) / tp, h * 2 * vh / tp}, ""});  // in_proj_qkvz, in_proj_ba
        l.modules.push_back({"gdn.conv1d", {(2 * kd + vd) * c_.linear_conv_kernel / tp}, ""});
        l.modules.push_back({"gdn.gates", {vh / tp, vh / tp}, ""});  // dt_bias, A_log
        l.modules.push_back({"gdn.norm", {c_.linear_value_dim}, ""});
        l.modules.push_back(linear("attn.o_proj", vd, h, false, false));
      } else {
        // Note [Gemma 4]: fewer key/value heads than ranks replicated, no
        // v_proj where the values are the keys.
        const std::int64_t kv_out = std::max<std::int64_t>(kv, tp) * d;
        l.modules.push_back(linear("attn.qkv", h, a * d * (c_.attn_output_gate ? 2 : 1), c_.qkv_bias, true));
        if (!c_.reuses_kv) l.modules.push_back(linear("attn.k_proj", h, kv_out, c_.qkv_bias, true));
        if (!c_.k_eq_v && !c_.reuses_kv) l.modules.push_back(linear("attn.v_proj", h, kv_out, c_.qkv_bias, true));
        if (c_.qk_norm) {
          const std::int64_t qn = whole_qk() ? a * d : d, kn = whole_qk() ? kv * d : d;
          l.modules.push_back({"attn.q_norm", {qn}, ""});
          if (!c_.reuses_kv) l.modules.push_back({"attn.k_norm", {kn}, ""});
        }
        if (c_.attention_sinks) l.modules.push_back({"attn.sinks", {a / tp}, ""});
        l.modules.push_back(linear("attn.o_proj", a * d, h, c_.o_bias, false));
      }
      if (piece == Part::kBlock) l.modules.push_back({"post_attention_layernorm", {h}, ""});
      if (c_.gemma_norms) {
        l.modules.push_back({"pre_feedforward_layernorm", {h}, ""});
        l.modules.push_back({"post_feedforward_layernorm", {h}, ""});
      }
      if (has_mlp && c_.squared_relu) {
        // Note [Mamba-2]: NemotronHMLP's up_proj and down_proj.
        l.modules.push_back(linear("mlp.up", h, f, c_.mlp_bias, true));
        l.modules.push_back(linear("mlp.down", f, h, c_.mlp_bias, false));
      } else if (has_mlp) {
        l.modules.push_back(linear("mlp.gate_up", h, f, c_.mlp_bias, true));
        l.modules.push_back(linear("mlp.up_proj", h, f, c_.mlp_bias, true));
        l.modules.push_back(linear("mlp.down", f, h, c_.mlp_bias, false));
      }
      if (c_.olmo2_norms) l.modules.push_back({"post_feedforward_layernorm", {h}, ""});
      if (c_.ple_dim > 0 && piece == Part::kBlock) {
        // Note [Gemma 4]: the per-layer input's gate, projection and norm.
        l.modules.insert(l.modules.end(), {{"ple.gate", {h * c_.ple_dim}, ""}, {"ple.proj", {c_.ple_dim * h}, ""}, {"ple.norm", {h}, ""}});
      }
    }
    // A composite RMSNorm reads and writes fp32 copies beside the input; a
    // fused one reads the input once and writes its output (Note [Fused
    // kernels]).
    const bool fused = shape.fused_kernels;
    auto norm = [&](const char* name, Bytes n) {
      return fused ? memory_op(name, KernelKind::kNorm, e * n, e * n, 4.0 * n)
                   : memory_op(name, KernelKind::kNorm, (e + 8) * n, (e + 8) * n, 4.0 * n);
    };
    // What a composite RMSNorm keeps per element (Note [Llama activations]),
    // or a fused one: its input and rsigma.
    auto norm_kept = [&](Bytes n, Bytes rows) { return (fused ? e : 4 + e) * n + 4 * rows; };
    // Gemma's keeps its fp32 output for the product with 1 + weight (Note [Gemma]).
    const Bytes block_norm_kept = fp32_norm_out() && !fused ? 8 * tn + 4 * (tn / h) : norm_kept(tn, tn / h);
    std::vector<sim::Kernel> pre, post;
    // The parts Megatron's recompute modules rerun (Note [Megatron's
    // recompute modules]): MLA's up-projections, the norms that are
    // modules of their own, a dense MLP with its fused norm.
    std::vector<sim::Kernel> up_kernels, norm_kernels, mlp_kernels;
    Bytes up_bytes = 0, mlp_bytes = 0;
    const bool megatron_norms = !c_.gemma_norms && !c_.olmo2_norms;
    // What a norm frees under layernorm: its keeps beyond its input, and the GEMM input it feeds.
    const Bytes norm_part = block_norm_kept - e * tn + shape.saved_gemm_input(tn);
    // Note [Hyper-connections]: the streams' gates and the sublayer's input.
    const bool hc = streams() > 1;
    Bytes hc_bytes = 0;
    std::vector<sim::Kernel> mhc_kernels;  // what recompute module mhc reruns
    if (hc && has_mixer) {
      const auto in = hc_in("attn", tn / h, e);
      pre.insert(pre.end(), in.begin(), in.end());
      hc_bytes += hc_kept(tn / h, e);
      mhc_kernels.push_back(in.back());
    }
    if (!c_.olmo2_norms && has_mixer) pre.push_back(norm("input_layernorm", tn));  // Note [OLMo 2]: none before attention
    if (hc && has_mixer) mhc_kernels.push_back(pre.back());
    if (megatron_norms && (mla() || v4()) && has_mixer) norm_kernels.push_back(pre.back());
    AttentionCore core;
    Bytes attention = 0;  // saved by the attention beyond the norms and its core
    std::vector<sim::LayerComm> dsa_tp_forward, dsa_tp_backward;  // Note [DeepSeek Sparse Attention]
    // Fused attention, or the p2p ring's block-by-block attention (Note [Ring
    // attention] in models/torch/src/torch_layers.cpp): no scores kept.
    const bool blockwise = shape.flash_attention || (shape.cp > 1 && !shape.cp_all_gather);
    std::int64_t o_in = 0;  // o_proj's input width on this rank
    // Note [Offload modules]: what the attention's qkv_linear and core_attn
    // groups save, where Megatron-Core wraps them (its self-attention and
    // multi-latent attention; not Mamba's or Gated DeltaNet's mixers, nor
    // DeepSeek Sparse Attention's absorbed core).
    std::vector<sim::SavedTensor> qkv_saved, core_saved;
    bool attention_groups = false;
    if (!has_mixer) {
      // Note [Mamba-2]: an MLP layer of a hybrid pattern.
    } else if (mamba) {
      // Note [Mamba-2]: this rank's nh / tp heads (and groups) project its
      // t tokens; under context parallelism each cp rank then scans 1 / cp
      // of those heads over the whole sequence (tm tokens).
      const std::int64_t cpn = shape.cp, P = c_.mamba_head_dim, N = c_.mamba_state, Q = c_.mamba_chunk;
      const std::int64_t nht = c_.mamba_heads / tp, gt = c_.mamba_groups / tp;  // this tp rank's heads and groups
      const std::int64_t hl = nht / cpn;                                          // the heads it scans
      // Groups it scans: fewer groups than cp ranks are repeated so that
      // each cp rank holds one (MambaContextParallel's group_repeat_count).
      const std::int64_t gl = gt >= cpn ? gt / cpn : 1, repeat = gt >= cpn ? 1 : cpn / gt;
      const std::int64_t tm = t * cpn;
      const std::int64_t dil = hl * P;                        // inner width it scans
      const std::int64_t projected = 2 * nht * P + 2 * gt * N + nht;  // in_proj's columns on this tp rank: z, x, B, C, dt
      const Bytes xbc = tm * (dil + 2 * gl * N);              // the convolution's elements
      const Bytes zxbcdt = tm * (2 * dil + 2 * gl * N + hl);  // in_proj's output as the scan sees it
      const Bytes rows = tm * hl, y = tm * dil;               // a head's rows; the scan's output elements
      check_size(static_cast<double>(tm) * static_cast<double>(2 * dil + 2 * gl * N + hl) * e, "Mamba-2 projections");
      check_size(static_cast<double>((tm + Q - 1) / Q) * static_cast<double>(hl) * static_cast<double>(P) * static_cast<double>(N) * 4,
                 "Mamba-2 chunk states");
      const Bytes states = (tm + Q - 1) / Q * hl * P * N;     // a P x N state a chunk and head
      const Bytes cb = tm * gl * Q;                           // C B^T a chunk and group, Q x Q
      pre.push_back(gemm("attn.qkv", t, projected, h, e));
      if (cpn > 1) {
        // MambaContextParallel: five all-to-alls (z, x, B, C, dt) before the
        // scan, B and C repeated where groups are fewer than cp ranks, one
        // after (its output); backward, their gradients.
        const std::vector<sim::LayerComm> exchange{
            {sim::CollectiveOp::kAllToAll, e * t * (2 * nht * P + 2 * gt * N * repeat + nht), 1, sim::Axis::kCp},
            {sim::CollectiveOp::kAllToAll, e * t * nht * P, 1, sim::Axis::kCp}};
        core.cp_forward = exchange;
        core.cp_backward = exchange;
      }
      // mamba_split_conv1d_scan_combined: the causal convolution and SiLU
      // over x, B and C, then the chunked scan with D's skip and the gate
      // y silu(z), in one autograd function.
      pre.push_back(memory_op("mamba.conv1d", KernelKind::kElementwise, e * xbc, e * xbc,
                              (2.0 * static_cast<double>(c_.mamba_conv_kernel) + 4.0) * static_cast<double>(xbc)));
      const double r = static_cast<double>(rows), fp = static_cast<double>(P), fn = static_cast<double>(N), fq = static_cast<double>(Q);
      const double groups = static_cast<double>(tm * gl);
      sim::Kernel fwd;
      fwd.name = "mamba.core";
      fwd.kind = KernelKind::kAttention;
      fwd.fused = true;
      // Each chunk's state (2PN a token and head), C B^T (2QN a token and
      // group), the states' contribution C h (2PN) and the causal
      // intra-chunk product (QP), then D x and the gate (10 an element).
      fwd.flops = r * (4 * fn * fp + fq * fp + 10 * fp) + groups * 2 * fq * fn;
      // x, B, C, dt and z read; the output before and after the gate
      // written; the fp32 cumsum, the states in fp32 and in x's dtype,
      // C B^T in fp32, each written and read.
      fwd.bytes = e * (xbc + rows + y) + 2 * e * y + 8 * rows + (8 + 2 * e) * states + 8 * cb;
      sim::Kernel bwd = fwd;
      bwd.name = "mamba.core.bwd";
      // _mamba_chunk_scan_combined_bwd: the convolution, cumsum, C B^T,
      // states and their passing again, then the gradients of the states,
      // x (two products), B, C and C B^T (and the two products from it).
      bwd.flops = r * (10 * fn * fp + 3 * fq * fp + 20 * fp) + groups * 6 * fq * fn +
                  (2.0 * static_cast<double>(c_.mamba_conv_kernel) + 4.0) * static_cast<double>(xbc);
      bwd.bytes = 2 * e * (xbc + rows + y) + 2 * e * y + 16 * rows + (16 + 4 * e) * states + 16 * cb;
      core.forward = {fwd};
      core.backward = {bwd};
      // MambaSplitConv1dScanCombinedFn keeps in_proj's output and the
      // scan's ungated output (out_x), and computes the rest again.
      core.saved = e * (zxbcdt + y);
      // The grouped RMSNorm on the gated output (Megatron-Core's norm with
      // z=None after the gated scan), after the all-to-all back: its input
      // and rstd a group, or the composite ops' (Note [Llama activations]).
      const Bytes normed = t * nht * P;
      post.push_back(norm("mamba.norm", normed));
      attention += core.saved + norm_kept(normed, t * gt) + shape.saved_gemm_input(normed);
      // What the backward allocates while it runs: in_proj's gradient, x,
      // B and C again, the states and their gradients, C B^T and its
      // gradient in fp32.
      l.backward_workspace_bytes = e * (zxbcdt + xbc) + 8 * states + 8 * cb;
      o_in = nht * P;
    } else if (gdn && c_.kda) {
      // Note [Kimi Delta Attention]: this rank's H / tp heads of d project
      // its t tokens (P = H d / tp channels each of q, k, v and the gate).
      const std::int64_t Hl = c_.linear_value_heads / tp, dk = c_.linear_value_dim, P = Hl * dk, C = 64, r = c_.kda_gate_rank;
      const Bytes ch = t * P, rows = t * Hl;  // a projection's elements; a head's rows
      pre.push_back(gemm("attn.qkv", t, 3 * P, h, e));  // q_proj, k_proj, v_proj
      pre.push_back(gemm("attn.b_proj", t, Hl, h, e));
      pre.push_back(gemm("attn.f_a_proj", t, dk, h, e));  // duplicated: every tp rank all of it
      pre.push_back(gemm("attn.f_b_proj", t, P, dk, e));
      pre.push_back(memory_op("kda.conv1d", KernelKind::kElementwise, 3 * e * ch, 3 * e * ch,
                              (2.0 * static_cast<double>(c_.linear_conv_kernel) + 4.0) * static_cast<double>(3 * ch)));
      // beta = sigmoid(b.float()); the decay a channel, lower_bound
      // sigmoid(exp(A_log) (f + dt_bias)), and its chunk cumsum in fp32
      // (chunk_kda's use_gate_in_kernel, safe_gate).
      pre.push_back(memory_op("kda.gates", KernelKind::kElementwise, e * ch + (e + 4) * rows, 4 * ch + 8 * rows,
                              8.0 * static_cast<double>(ch) + 4.0 * static_cast<double>(rows)));
      // The chunked rule as Gated DeltaNet's (Note [Gated DeltaNet]) with
      // d-wide keys and values, reading and writing the per-channel decay.
      const double fr = static_cast<double>(rows), fd = static_cast<double>(dk), fc = static_cast<double>(C);
      const Bytes states = rows * dk * dk / C * e;
      sim::Kernel fwd;
      fwd.name = "kda.core";
      fwd.kind = KernelKind::kAttention;
      fwd.fused = true;
      fwd.flops = fr * (2 * fc * 5 * fd + 6 * fd * fd) + 4.0 * static_cast<double>(ch);
      fwd.bytes = 3 * e * ch + 4 * ch + 8 * rows + e * ch + 2 * e * rows * C + 2 * states;
      sim::Kernel bwd = fwd;
      bwd.name = "kda.core.bwd";
      bwd.flops = fr * (fc * 22 * fd + 18 * fd * fd) + 8.0 * static_cast<double>(ch);
      bwd.bytes = 2 * 3 * e * ch + 8 * ch + 16 * rows + e * ch + 2 * e * rows * C + 4 * states;
      core.forward = {fwd};
      core.backward = {bwd};
      // Kept by the rule: the normed q and k, v, the raw gate and its fp32
      // cumsum, the rstds and beta in fp32, the intra-chunk Aqk and Akk.
      core.saved = 3 * e * ch + (e + 4) * ch + 12 * rows + 2 * e * rows * C;
      // The convolutions' inputs; f_b_proj's input (f_a_proj's output).
      attention += 3 * e * ch + shape.saved_gemm_input(t * dk);
      // The output gate, then FLA's FusedRMSNormGated (sigmoid) keeping its
      // two inputs and rstd, then o_proj ("attn.o_proj" below).
      if (r > 0) {
        pre.push_back(gemm("attn.g_a_proj", t, r, h, e));
        pre.push_back(gemm("attn.g_b_proj", t, P, r, e));
        attention += shape.saved_gemm_input(t * r);
      } else {
        pre.push_back(gemm("attn.g_proj", t, P, h, e));
      }
      post.push_back(memory_op("kda.norm", KernelKind::kNorm, 2 * e * ch, e * ch, 8.0 * static_cast<double>(ch)));
      attention += 2 * e * ch + 4 * rows + shape.saved_gemm_input(ch) + core.saved;
      l.backward_workspace_bytes = e * (rows * 2 * dk + 2 * rows * dk * dk / C + 5 * ch);
      o_in = P;
    } else if (gdn) {
      // Note [Gated DeltaNet]: this rank's kh / tp key and vh / tp value
      // heads project its t tokens; under context parallelism each cp rank
      // then mixes 1 / cp of those heads over the whole sequence (tm
      // tokens), its all-to-alls moving the projections there and the
      // gated norm's output back.
      const std::int64_t cpn = shape.cp, khl = c_.linear_key_heads / (tp * cpn), vhl = c_.linear_value_heads / (tp * cpn);
      const std::int64_t dk = c_.linear_key_dim, dv = c_.linear_value_dim, C = 64;  // FLA's chunk
      const std::int64_t tm = t * cpn;  // tokens the mixer sees
      const Bytes kd = tm * khl * dk, vd = tm * vhl * dv, conv = 2 * kd + vd;  // elements of q (or k), of v (or z), of q, k, v
      const Bytes qh = tm * vhl * dk, rows = tm * vhl;  // q (or k) repeated to the value heads; a value head's rows
      const std::int64_t projected = cpn * (2 * khl * dk + 2 * vhl * dv + 2 * vhl);  // in_proj's columns on this tp rank
      pre.push_back(gemm("attn.qkv", t, projected, h, e));
      if (cpn > 1) {
        // Megatron-Core's a2a_cp_to_hp before the convolution and
        // a2a_hp_to_cp after the gated norm; backward, their gradients.
        const std::vector<sim::LayerComm> exchange{{sim::CollectiveOp::kAllToAll, e * t * projected, 1, sim::Axis::kCp},
                                                   {sim::CollectiveOp::kAllToAll, e * t * cpn * vhl * dv, 1, sim::Axis::kCp}};
        core.cp_forward = exchange;
        core.cp_backward = exchange;
      }
      pre.push_back(memory_op("gdn.conv1d", KernelKind::kElementwise, e * conv, e * conv,
                              (2.0 * static_cast<double>(c_.linear_conv_kernel) + 4.0) * static_cast<double>(conv)));
      pre.push_back(memory_op("gdn.gates", KernelKind::kElementwise, (2 * e + 16) * rows, (e + 16) * rows, 10.0 * static_cast<double>(rows)));
      if (vhl > khl) pre.push_back(memory_op("gdn.repeat", KernelKind::kElementwise, 2 * e * kd, 2 * e * qh));
      // The chunked rule, forward and backward, with each chunk's dk x dv
      // state written and read (and in backward computed again, with its
      // gradient).
      const double r = static_cast<double>(rows), fk = static_cast<double>(dk), fv = static_cast<double>(dv), fc = static_cast<double>(C);
      const Bytes states = rows * dk * dv / C * e;
      sim::Kernel fwd;
      fwd.name = "gdn.core";
      fwd.kind = KernelKind::kAttention;
      fwd.fused = true;
      fwd.flops = r * (2 * fc * (3 * fk + 2 * fv) + 6 * fk * fv);
      fwd.bytes = e * (2 * qh + vd) + (4 + e) * rows + e * vd + e * rows * C + 8 * rows + 2 * states;
      sim::Kernel bwd = fwd;
      bwd.name = "gdn.core.bwd";
      bwd.flops = r * (fc * (12 * fk + 10 * fv) + 18 * fk * fv);
      bwd.bytes = 2 * e * (2 * qh + vd) + (8 + 2 * e) * rows + e * vd + e * rows * C + 8 * rows + 4 * states;
      core.forward = {fwd};
      core.backward = {bwd};
      // Kept by the rule: the normed q and k, v, the fp32 cumsum and rstds, beta, A.
      core.saved = e * (2 * qh + vd) + 12 * rows + e * rows + e * rows * C;
      // The convolution's input; the softplus' input and output (the
      // sigmoid's output is the rule's beta, counted there).
      attention += e * conv + 8 * rows;
      // The gated norm, then out_proj ("attn.o_proj" below) on its output.
      if (fused) {
        post.push_back(memory_op("gdn.norm", KernelKind::kNorm, 2 * e * vd, e * vd, 8.0 * static_cast<double>(vd)));
        attention += 2 * e * vd + 4 * rows;
      } else {
        post.push_back(memory_op("gdn.norm", KernelKind::kNorm, (2 * e + 16) * vd, (e + 16) * vd, 10.0 * static_cast<double>(vd)));
        attention += (12 + 2 * e) * vd + 4 * rows;
      }
      attention += shape.saved_gemm_input(vd) + core.saved;
      // What the rule's backward allocates while it runs (chunk_gated_delta_rule_bwd):
      // w and u again, the states and their gradients, v_new and dv, dq, dk and dw.
      l.backward_workspace_bytes = e * (rows * (dk + dv) + 2 * rows * dk * dv / C + 2 * vd + 3 * qh);
      o_in = cpn * vhl * dv;  // this tp rank's value heads, its own tokens again
    } else if (mla()) {
      // Note [Multi-head latent attention]
      const std::int64_t qk = c_.qk_nope_dim + c_.qk_rope_dim, qr = c_.q_lora_rank, kvr = c_.kv_lora_rank;
      // mla_up_proj (Note [Megatron's recompute modules]): the latents stay.
      if (qr > 0) {
        pre.push_back(gemm("attn.q_a_proj", t, qr, h, e));
        pre.push_back(norm("attn.q_a_layernorm", t * qr));
        up_kernels.push_back(pre.back());
        pre.push_back(gemm("attn.q_b_proj", t, al * qk, qr, e));
        up_kernels.push_back(pre.back());
        attention += norm_kept(t * qr, t) + shape.saved_gemm_input(t * qr);
        up_bytes += norm_kept(t * qr, t) + shape.saved_gemm_input(t * qr) - e * t * qr;
      } else {
        pre.push_back(gemm("attn.q_proj", t, al * qk, h, e));
        up_kernels.push_back(pre.back());
      }
      pre.push_back(gemm("attn.kv_a_proj", t, kvr + c_.qk_rope_dim, h, e));
      pre.push_back(norm("attn.kv_a_layernorm", t * kvr));
      up_kernels.push_back(pre.back());
    }
    if (has_mixer && v4()) {
      // Note [DeepSeek-V4]: the projections (mla_up_proj reruns wq_b to
      // the rotary), then the compressor, the indexer and the core.
      const std::int64_t qr = c_.q_lora_rank, a = c_.heads;
      const Bytes q = t * a * d;  // elements of q, and of the core's output
      pre.push_back(gemm("attn.q_a_proj", t, qr, h, e));
      pre.push_back(norm("attn.q_a_layernorm", t * qr));
      const std::size_t up_first = pre.size();
      pre.push_back(gemm("attn.q_b_proj", t, a * d, qr, e));
      // _q_rms_norm, one kernel under torch.compile: q read, q written.
      pre.push_back(memory_op("attn.q_norm", KernelKind::kNorm, e * q, e * q, 4.0 * static_cast<double>(q)));
      pre.push_back(gemm("attn.kv_proj", t, d, h, e));
      pre.push_back(norm("attn.kv_layernorm", t * d));
      const Bytes rope = t * (a + 1) * c_.qk_rope_dim;
      pre.push_back(memory_op("attn.rotary", KernelKind::kElementwise, 2 * e * rope, e * rope, 3.0 * static_cast<double>(rope)));
      up_kernels.assign(pre.begin() + static_cast<std::ptrdiff_t>(up_first), pre.end());
      DsaCore dc = v4_core(shape, ratio, indexer);
      core = std::move(dc.core);
      l.backward_workspace_bytes = dc.workspace;
      // The inverse rotary on O, out of place; wo_a's einsum, each group.
      post.push_back(memory_op("attn.rotary_out", KernelKind::kElementwise, e * q, e * q, 3.0 * static_cast<double>(t * a * c_.qk_rope_dim)));
      post.push_back(gemm("attn.o_group_proj", t, c_.o_lora_rank, a * d / c_.o_groups, e, c_.o_groups, KernelKind::kAttention));
      o_in = c_.o_groups * c_.o_lora_rank;
      // Kept: q_layernorm's and wq_b's input; the head norm's input and
      // rsqrt; kv's norm; the core's (q, the joined kv, indices, O, the
      // log-sum-exp) and the compressor's and indexer's; wo_a's input, in
      // bf16; wo_b's, in bf16 too (under FP8 and FP4 Megatron-Core has
      // linear_proj save its original input: set_save_original_input, all
      // but the delayed recipe). Where the GEMMs keep FP8 copies, wkv keeps
      // its own of x, and the bf16 compressor keeps x itself.
      const Bytes x_copies = shape.saved_gemm_input(tn) != e * tn ? shape.saved_gemm_input(tn) + (ratio > 0 ? e * tn : 0) : 0;
      const Bytes head_norm = e * q + e * t * a;
      attention += norm_kept(t * qr, t) + shape.saved_gemm_input(t * qr) + head_norm + norm_kept(t * d, t) + dc.saved + e * q + e * t * o_in +
                   x_copies;
      // Under mla_up_proj the checkpoint keeps the query latent (in bf16)
      // and x, not wq_b's input copy nor wkv's; q and, where no compressed
      // entries are joined to it, kv (the core's) are discarded.
      const Bytes x_held = ratio > 0 ? 0 : e * tn;
      up_bytes = head_norm + norm_kept(t * d, t) + e * q + (ratio == 0 ? e * t * d : 0) + shape.saved_gemm_input(t * qr) - e * t * qr +
                 (x_copies > 0 ? shape.saved_gemm_input(tn) - x_held : 0);
    } else if (has_mixer && !gdn && mla() && dsa()) {
      // Note [DeepSeek Sparse Attention]: absorbed into the latent, each
      // query meets the keys its indexer selected.
      const std::int64_t kvr = c_.kv_lora_rank, v = c_.v_head_dim, dn = c_.qk_nope_dim;
      const Bytes rope = t * al * c_.qk_rope_dim + t * c_.qk_rope_dim;
      pre.push_back(memory_op("attn.rotary", KernelKind::kElementwise, 2 * e * rope, e * rope, 3.0 * static_cast<double>(rope)));
      pre.push_back(gemm("attn.q_absorb", t, kvr, dn, e, al));  // q_nope times W_UK, each head
      DsaCore d = dsa_core(shape, indexer);
      core = std::move(d.core);
      post.push_back(gemm("attn.v_up", t, v, kvr, e, al));  // the latent output times W_UV, each head
      // The kv latent's norm, q_absorb's input (q_nope, a view that keeps
      // q_b_proj's whole output, the rotary part too), the core's and the
      // indexer's keeps, o_proj's input.
      attention += norm_kept(t * kvr, t) + e * t * al * (dn + c_.qk_rope_dim) + d.saved + shape.saved_gemm_input(t * al * v);
      l.backward_workspace_bytes = d.workspace;
      dsa_tp_forward = std::move(d.tp_forward);
      dsa_tp_backward = std::move(d.tp_backward);
      o_in = al * v;
    } else if (has_mixer && !gdn && mla()) {
      const std::int64_t qk = c_.qk_nope_dim + c_.qk_rope_dim, kvr = c_.kv_lora_rank, v = c_.v_head_dim;
      pre.push_back(gemm("attn.kv_b_proj", t, al * (c_.qk_nope_dim + v), kvr, e));
      up_kernels.push_back(pre.back());
      attention += norm_kept(t * kvr, t) + shape.saved_gemm_input(t * kvr);
      up_bytes += norm_kept(t * kvr, t) + shape.saved_gemm_input(t * kvr) - e * t * kvr + e * t * al * (2 * qk + v);
      const Bytes rope = t * al * c_.qk_rope_dim + t * c_.qk_rope_dim;
      if (c_.rotary) {
        pre.push_back(memory_op("attn.rotary", KernelKind::kElementwise, 2 * e * rope, e * rope, 3.0 * static_cast<double>(rope)));
        up_kernels.push_back(pre.back());
      }
      core = attention_core(shape, al, al, qk, true, c_.attention_dropout > 0, 0, true, v);
      // Q, K (nope and rope joined) and V for the core; o_proj's input.
      attention += e * t * al * (2 * qk + v) + shape.saved_gemm_input(t * al * v) + core.saved;
      if (blockwise) attention += e * t * al * v;  // O, kept by the fused kernel
      if (c_.attn_output_gate) {
        // Note [Kimi K3]: O times sigmoid(g_proj(x)), keeping the sigmoid
        // and the output its product takes.
        const Bytes q = t * al * v;
        pre.push_back(gemm("attn.g_proj", t, al * v, h, e));
        post.push_back(memory_op("attn.gate", KernelKind::kElementwise, 3 * e * q, 2 * e * q, 5.0 * static_cast<double>(q)));
        attention += 2 * e * q;
      }
      o_in = al * v;
      // get_query_key_value_tensors: the down-projections' input, each
      // latent's norm and up-projection input, or under mla_up_proj only the
      // latents its checkpoint keeps (and Q, K, V, rebuilt, are not kept).
      attention_groups = true;
      const bool up_rerun = (shape.recompute_modules & sim::kRecomputeMlaUpProj) != 0;
      qkv_saved = {{tn, shape.saved_gemm_input(tn)}};
      for (const std::int64_t r : {c_.q_lora_rank, kvr}) {
        if (r == 0) continue;
        if (up_rerun) {
          qkv_saved.push_back({t * r, e * t * r});
        } else {
          qkv_saved.insert(qkv_saved.end(), {{t * r, norm_kept(t * r, t) - 4 * t}, {t, 4 * t}, {t * r, shape.saved_gemm_input(t * r)}});
        }
      }
      if (!up_rerun) core_saved = {{t * al * qk, e * t * al * qk}, {t * al * qk, e * t * al * qk}, {t * al * v, e * t * al * v}};
      if (blockwise) core_saved.push_back({t * al * v, e * t * al * v});
      core_saved.push_back({core.saved / (blockwise ? 4 : e), core.saved});  // a fused core's fp32 log-sum-exp
    } else if (has_mixer && !mamba && !gdn) {
      // Note [Gemma 4]: fewer key/value heads than tp ranks are replicated.
      const std::int64_t kvl = std::max<std::int64_t>(1, c_.kv_heads / tp);
      const Bytes q = t * al * d, kv = t * kvl * d;  // elements of this rank's Q, and of K (or V)
      const std::int64_t window = global ? 0 : c_.sliding_window, chunk = global ? 0 : c_.attention_chunk;
      core = attention_core(shape, al, kvl, d, true, c_.attention_dropout > 0, window, true, 0, c_.attn_softcap > 0, c_.attention_sinks,
                            chunk);
      // Note [Gated DeltaNet]: a gated output's q_proj writes each head's gate too.
      // Note [Gemma 4]: a layer whose values are its keys projects no V, one
      // reusing an earlier layer's keys and values neither (kv_new: the
      // elements of K it makes, norms and rotates).
      const Bytes kv_new = c_.reuses_kv ? 0 : kv;
      pre.push_back(gemm("attn.qkv", t, (al * (c_.attn_output_gate ? 2 : 1) + (c_.reuses_kv ? 0 : c_.k_eq_v ? 1 : 2) * kvl) * d, h, e));
      if (c_.qk_norm) pre.push_back(norm("attn.qk_norm", q + kv_new));
      if (c_.v_norm && !c_.reuses_kv) {
        // Note [Gemma 4]: V normed without a weight, each head a row.
        pre.push_back(norm("attn.v_norm", kv));
        attention += norm_kept(kv, t * kvl);
      }
      // Note [Llama 4]: its NoPE layers turn nothing.
      if (!(global && c_.nope_global) && c_.rotary) {
        pre.push_back(memory_op("attn.rotary", KernelKind::kElementwise, 2 * e * (q + kv_new), e * (q + kv_new), 3.0 * static_cast<double>(q + kv_new)));
      }
      if (!global && c_.l2_qk_norm) {
        // Note [Llama 4]: Llama4TextL2Norm on q and k after rotary, an
        // RMSNorm without a weight: it keeps the fp32 copy and rsqrt (a
        // fused one its input and rsigma), each head a row.
        pre.push_back(norm("attn.qk_l2norm", q + kv));
        attention += fused ? norm_kept(q + kv, t * (al + kvl)) : 4 * (q + kv) + 4 * t * (al + kvl);
      }
      if (c_.q_scaling_beta > 0) {
        // Note [Ministral 3]: q times a scale a position, cast to q's
        // dtype first: one pass, nothing kept but the scales.
        pre.push_back(memory_op("attn.q_scale", KernelKind::kElementwise, e * q, e * q, 1.0 * static_cast<double>(q)));
      }
      if (global && c_.attn_temperature) {
        // Note [Llama 4]: q times an fp32 scale per position, then cast
        // back: two passes as composite ops, nothing kept but the scales.
        pre.push_back(fused ? memory_op("attn.temperature", KernelKind::kElementwise, e * q, e * q, 1.0 * static_cast<double>(q))
                            : memory_op("attn.temperature", KernelKind::kElementwise, (e + 4) * q, (4 + e) * q, 2.0 * static_cast<double>(q)));
      }
      // Eager attention keeps the expanded (or gathered) K and V in the core
      // instead of the local ones; the ring keeps the last block it held.
      // Note [Gemma 4]: a layer reusing another's K and V keeps them there.
      const bool local_kv = (blockwise || (al == kvl && shape.cp == 1)) && !c_.reuses_kv;
      attention += e * q + (local_kv ? 2 * e * kv : 0) + shape.saved_gemm_input(q) + core.saved;
      if (blockwise) attention += e * q;  // O, kept by the fused kernel (or the ring) beside o_proj's input
      if (c_.qk_norm) attention += (fused ? e : fp32_norm_out() ? 8 : 4 + e) * (q + kv_new);  // Gemma 3's keep their fp32 output too
      // linear_qkv (Transformer Engine's, the input norm fused into it):
      // the norm's input, rsigma and output, and the q and k norms
      // get_query_key_value_tensors runs; the core's Q, K, V, O and keeps.
      attention_groups = true;
      qkv_saved = {{tn, block_norm_kept - 4 * (tn / h)}, {tn / h, 4 * (tn / h)}, {tn, shape.saved_gemm_input(tn)}};
      if (c_.qk_norm) qkv_saved.push_back({q + kv_new, (fused ? e : fp32_norm_out() ? 8 : 4 + e) * (q + kv_new)});
      core_saved = {{q, e * q}};
      if (local_kv) core_saved.insert(core_saved.end(), {{kv, e * kv}, {kv, e * kv}});
      if (blockwise) core_saved.push_back({q, e * q});
      core_saved.push_back({core.saved / (blockwise ? 4 : e), core.saved});  // a fused core's fp32 log-sum-exp
      if (c_.attn_output_gate) {
        // Note [Gated DeltaNet]: output times sigmoid(gate), a sigmoid and
        // a product, keeping the output (o_proj's input before) and the
        // sigmoid's; o_proj's input is now the product.
        post.push_back(memory_op("attn.gate", KernelKind::kElementwise, 3 * e * q, 2 * e * q, 5.0 * static_cast<double>(q)));
        attention += 2 * e * q;
      }
      o_in = al * d;
    }
    // Gemma normalises the attention's output before the residual, and the
    // MLP's input after it (Note [Gemma]).
    const bool post_norms = c_.gemma_norms || c_.olmo2_norms;
    if (has_mixer) {
      post.push_back(gemm("attn.o_proj", t, h, o_in, e));
      if (post_norms) post.push_back(norm("post_attention_layernorm", tn));
      if (c_.residual_multiplier > 0) post.push_back(scale_op("attn.residual_scale", e, tn));  // Note [Granite]
      post.push_back(hc ? hc_out("attn", tn / h, e) : memory_op("attn.residual", KernelKind::kElementwise, 2 * e * tn, e * tn, 1.0 * tn));
      if (hc) mhc_kernels.push_back(post.back());
    }
    Bytes mlp = 0;
    std::vector<sim::LayerComm> tp_extra, tp_extra_backward;
    MoeParts moe_parts;
    std::vector<sim::Kernel> moe_kernels;  // the whole MoE layer's, for "moe"
    if (has_mlp) {
      if (hc) {
        const auto in = hc_in("mlp", tn / h, e);  // Note [Hyper-connections]
        post.insert(post.end(), in.begin(), in.end());
        hc_bytes += hc_kept(tn / h, e);
        mhc_kernels.push_back(in.back());
      }
      // A hybrid pattern's MLP layer: its own input norm (Note [Mamba-2]).
      if (!c_.olmo2_norms) {
        post.push_back(norm(piece == Part::kMlp ? "input_layernorm" : c_.gemma_norms ? "pre_feedforward_layernorm" : "post_attention_layernorm", tn));
      }
      if (megatron_norms && moe) norm_kernels.push_back(post.back());
      if (hc) mhc_kernels.push_back(post.back());
      if (megatron_norms && !moe) {
        mlp_kernels.push_back(post.back());  // fused into fc1: the mlp module reruns it
        mlp_bytes += norm_part;
      }
      if (moe) {
        const std::size_t first = post.size();
        mlp = moe_mlp(shape, l, post, tp_extra, tp_extra_backward, moe_parts);
        if (c_.moe_branch_norms) {
          // Note [Gemma 4]: the experts' own pre-norm, each branch's
          // post-norm, the router's weightless norm and its scale; the
          // experts' normed input is kept apart from the dense MLP's.
          for (const char* n : {"pre_feedforward_layernorm_2", "post_feedforward_layernorm_1", "post_feedforward_layernorm_2", "moe.router_norm"}) {
            post.push_back(norm(n, tn));
          }
          post.push_back(scale_op("moe.router_scale", e, tn));
          mlp += 4 * block_norm_kept + shape.saved_gemm_input(tn);
        }
        moe_kernels.assign(post.begin() + static_cast<std::ptrdiff_t>(first), post.end());
      } else {
        const std::int64_t fl = c_.intermediate / tp;
        const Bytes tf = t * fl;
        post.push_back(gemm(c_.squared_relu ? "mlp.up" : "mlp.gate_up", t, up_width() * fl, h, e));
        // GeGLU's tanh GELU costs a few more operations an element than SiLU;
        // both keep the same tensors (the gate's output, the activation's and
        // up's outputs, down's input).
        post.push_back(act(c_.squared_relu ? "mlp.relu2" : c_.gelu ? "mlp.geglu" : "mlp.swiglu", tf, shape));
        post.push_back(gemm("mlp.down", t, h, fl, e));
        mlp = act_kept(tf, shape);
        mlp_kernels.insert(mlp_kernels.end(), post.end() - 3, post.end());
        mlp_bytes += mlp;
      }
      if (post_norms) post.push_back(norm("post_feedforward_layernorm", tn));
      if (c_.residual_multiplier > 0) post.push_back(scale_op("mlp.residual_scale", e, tn));  // Note [Granite]
      post.push_back(hc ? hc_out("mlp", tn / h, e) : memory_op("mlp.residual", KernelKind::kElementwise, 2 * e * tn, e * tn, 1.0 * tn));
      if (hc) mhc_kernels.push_back(post.back());
    }
    Bytes ple_bytes = 0;
    if (c_.ple_dim > 0 && piece == Part::kBlock) {
      // Note [Gemma 4]: the layer's per-layer input, gated by its output
      // (per_layer_input_gate, GELU, times the input), projected back
      // (per_layer_projection), normed and added; it keeps the gate's
      // input, GELU's input and output, the projection's input and the
      // norm's.
      const std::int64_t rows = tn / h, P = c_.ple_dim;
      post.push_back(gemm("ple.gate", rows, P, h, e));
      post.push_back(memory_op("ple.gelu", KernelKind::kElementwise, e * rows * P, e * rows * P, 10.0 * static_cast<double>(rows * P)));
      post.push_back(memory_op("ple.mul", KernelKind::kElementwise, 2 * e * rows * P, e * rows * P, 1.0 * static_cast<double>(rows * P)));
      post.push_back(gemm("ple.proj", rows, h, P, e));
      post.push_back(norm("ple.norm", tn));
      post.push_back(memory_op("ple.residual", KernelKind::kElementwise, 2 * e * tn, e * tn, 1.0 * tn));
      ple_bytes = shape.saved_gemm_input(tn) + 2 * e * rows * P + shape.saved_gemm_input(rows * P) + block_norm_kept;
    }
    join_kernels(l, pre, core, post);
    scaled_backward(l.backward);
    if (hc) {
      // Note [Hyper-connections]: each sublayer's streams feed three
      // consumers (the gates, the aggregate, h_post_bda); backward sums
      // their three gradients in one pass (BroadcastTensorFused's
      // fused_add_3), after the gates' backward.
      for (const char* sub : {"attn", "mlp"}) {
        const std::string gates = std::string(sub) + ".hc_gates.dgrad";
        const auto it = std::find_if(l.backward.begin(), l.backward.end(), [&](const sim::Kernel& k) { return k.name == gates; });
        if (it == l.backward.end()) continue;
        l.backward.insert(it + 1, memory_op(std::string(sub) + ".hc_grad_sum", KernelKind::kElementwise, 3 * e * tn * streams(), e * tn * streams(),
                                            2.0 * static_cast<double>(tn * streams())));
      }
    }
    // torchtitan's op-level recompute is described for its Llama block, not Gemma's.
    const bool op_described = !moe && !mla() && tp == 1 && shape.cp == 1 && shape.flash_attention && !c_.gemma_norms && !c_.olmo2_norms &&
                              !c_.attention_sinks && c_.swiglu_limit == 0 && !c_.fp32_norm_weight && c_.attention_chunk == 0 &&
                              !c_.nope_global && !c_.l2_qk_norm && c_.q_scaling_beta == 0 && !gdn && !c_.attn_output_gate &&
                              !c_.zero_centered_norms && piece == Part::kBlock && !mamba && !c_.squared_relu && c_.rotary && !v4() && !hc;

    // Note [Llama activations]: each norm, and the two GEMM inputs they feed
    // (Gemma's post-norms feed residuals, which keep nothing).
    // A hybrid pattern's part has one norm and one GEMM input of them (Note [Mamba-2]).
    const Bytes norms = piece != Part::kBlock ? block_norm_kept + shape.saved_gemm_input(tn)
                                             : (c_.gemma_norms ? 4 : 2) * block_norm_kept + 2 * shape.saved_gemm_input(tn);
    l.saved_bytes = norms + attention + mlp + hc_bytes + ple_bytes;
    l.output_bytes = e * tn * streams();  // Note [Hyper-connections]: the streams
    // Note [Megatron's recompute modules]: the parts the shape's modules
    // name, together selective recompute's.
    l.attention_core_bytes = 0;
    l.attention_core.clear();
    l.recompute_described = 0;
    const auto part = [&](std::uint8_t module, Bytes bytes, const std::vector<sim::Kernel>& kernels) {
      l.recompute_described = static_cast<std::uint8_t>(l.recompute_described | module);
      if ((shape.recompute_modules & module) == 0) return;
      l.attention_core_bytes += bytes;
      l.attention_core.insert(l.attention_core.end(), kernels.begin(), kernels.end());
    };
    if (core.recomputable) part(sim::kRecomputeCoreAttn, core.saved, core.forward);
    if (!norm_kernels.empty()) part(sim::kRecomputeLayernorm, static_cast<Bytes>(norm_kernels.size()) * norm_part, norm_kernels);
    if ((mla() && !dsa()) || v4()) part(sim::kRecomputeMlaUpProj, up_bytes, up_kernels);
    if (hc && megatron_norms && piece == Part::kBlock) {
      // Note [Hyper-connections]: mhc frees each sublayer's aggregate (its
      // norm's input), the norm's output where a bf16 GEMM keeps it as its
      // input, and the streams h_post_bda wrote (each sublayer's stream input).
      // (DeepSeek-V4's bf16 compressor and mla_up_proj's checkpoint keep
      // the attention norm's bf16 output under FP8 too: mhc frees it.)
      const bool bf16 = shape.saved_gemm_input(tn) == e * tn;
      const bool attn_x_kept = bf16 || (v4() && (ratio > 0 || (shape.recompute_modules & sim::kRecomputeMlaUpProj) != 0));
      part(sim::kRecomputeMhc, 2 * (e * tn + e * tn * streams()) + (attn_x_kept ? e * tn : 0) + (bf16 ? e * tn : 0), mhc_kernels);
    }
    if (!moe && has_mlp) part(sim::kRecomputeMlp, mlp_bytes, mlp_kernels);
    if (moe && has_mlp) {
      // "moe" reruns the whole layer, its all-to-alls too; the parts inside
      // it are then rerun with it, not twice.
      part(sim::kRecomputeMoe, mlp, moe_kernels);
      l.recompute_ep = (shape.recompute_modules & sim::kRecomputeMoe) != 0;
    }
    const bool whole_moe = (shape.recompute_modules & sim::kRecomputeMoe) != 0;
    const auto inner = [&](std::uint8_t module, Bytes bytes, const std::vector<sim::Kernel>& kernels) {
      if (kernels.empty()) return;
      if (!whole_moe) return part(module, bytes, kernels);
      l.recompute_described = static_cast<std::uint8_t>(l.recompute_described | module);
    };
    inner(sim::kRecomputeMoeAct, moe_parts.act, moe_parts.act_kernels);
    inner(sim::kRecomputeSharedExperts, moe_parts.shared, moe_parts.shared_kernels);
    offload_groups(l, shape, pre.size(), core, piece, (mla() || v4()) && megatron_norms && has_mixer, block_norm_kept, tn, attention_groups,
                   std::move(qkv_saved), std::move(core_saved), o_in * t, moe && has_mlp && megatron_norms, moe_parts);
    if (op_described) {
      // Note [Op-level recompute]: at tp 1, q and kv elements as above.
      const std::int64_t kvl = c_.kv_heads, fl = c_.intermediate;
      const Bytes q = t * al * d, kv = t * kvl * d, tf = t * fl;
      const Bytes kept = e * (th + q + kv + q + tf + th) + 4 * t * al;
      l.op_recompute_bytes = std::max<Bytes>(0, l.saved_bytes - kept);
      l.op_recompute = {norm("input_layernorm", tn), gemm("attn.k_proj", t, kvl * d, h, e)};
      if (c_.qk_norm) l.op_recompute.push_back(norm("attn.qk_norm", q + kv));
      l.op_recompute.push_back(
          memory_op("attn.rotary", KernelKind::kElementwise, 2 * e * (q + kv), e * (q + kv), 3.0 * static_cast<double>(q + kv)));
      l.op_recompute.push_back(gemm("attn.o_proj", t, h, al * d, e));
      if (c_.residual_multiplier > 0) l.op_recompute.push_back(scale_op("attn.residual_scale", e, tn));
      l.op_recompute.push_back(memory_op("attn.residual", KernelKind::kElementwise, 2 * e * tn, e * tn, 1.0 * tn));
      l.op_recompute.push_back(norm("post_attention_layernorm", tn));
      l.op_recompute.push_back(gemm("mlp.up_proj", t, fl, h, e));
      l.op_recompute.push_back(act("mlp.swiglu", tf, shape));
    }
    split_for_tp_overlap(l, shape);  // Note [Userbuffers' chunks] in layers.cpp
    // Attention's column/row pair, and a dense or shared MLP's; the routed
    // experts' exchanges over tp follow (moe_mlp's tp_extra).
    // A hybrid pattern's part has one pair or none (Note [Mamba-2]).
    const bool mlp_pair = has_mlp && (!moe || c_.shared_intermediate > 0);
    const int pairs = (has_mixer ? 1 : 0) + (mlp_pair ? 1 : 0);
    if (pairs > 0) {
      l.tp_forward = tp_pairs(shape, e * th, pairs);
      l.tp_backward = tp_pairs(shape, e * th, pairs);
    }
    l.tp_forward.insert(l.tp_forward.end(), tp_extra.begin(), tp_extra.end());
    l.tp_backward.insert(l.tp_backward.end(), tp_extra_backward.begin(), tp_extra_backward.end());
    l.tp_forward.insert(l.tp_forward.end(), dsa_tp_forward.begin(), dsa_tp_forward.end());
    l.tp_backward.insert(l.tp_backward.end(), dsa_tp_backward.begin(), dsa_tp_backward.end());
    return l;
  }

  /// What a DSA layer's core adds (Note [DeepSeek Sparse Attention]).
  struct DsaCore {
    AttentionCore core;
    Bytes saved = 0;      ///< kept for backward: the core's and the indexer's
    Bytes workspace = 0;  ///< backward's transient bytes
    std::vector<sim::LayerComm> tp_forward, tp_backward;
  };
  /// Note [DeepSeek Sparse Attention]: the indexer (where the layer runs
  /// one), its loss, and the absorbed latent attention over the selected
  /// keys, for this rank's al heads and t tokens.
  DsaCore dsa_core(const sim::WorkloadShape& shape, bool indexer) const {
    using sim::KernelKind;
    const std::int64_t b = shape.micro_batch, s = shape.seq_len, cp = shape.cp, sq = s / cp, t = b * sq, tp = shape.tp;
    const std::int64_t h = c_.hidden, al = c_.heads / tp, kvr = c_.kv_lora_rank;
    const std::int64_t dqk = kvr + c_.qk_rope_dim, dv = kvr;  // the absorbed query and key (576), value (512)
    const std::int64_t kp = std::min(c_.index_topk, s);     // keys a query gets, the padding too
    const std::int64_t hi = c_.index_heads, di = c_.index_head_dim, rq = c_.q_lora_rank > 0 ? c_.q_lora_rank : h;
    const int e = shape.act_bytes;
    const bool sp = shape.sequence_parallel && tp > 1;
    // The sparse kernels where MFU's model FLOPs are counted: the keys the model attends.
    const bool dense = c_.dsa_dense && !shape.model_flops;
    const char loss = c_.index_loss;
    check_size(static_cast<double>(b) * static_cast<double>(sq) * static_cast<double>(s) * 4, "DSA index scores");
    check_size(static_cast<double>(t) * static_cast<double>(kp) * static_cast<double>(dqk) * e, "DSA selected keys");
    if (c_.dsa_dense || loss == 'D') {
      // The dense path's fp32 [s, b, heads, s] einsum, the dense loss's fp32 probabilities.
      check_size(static_cast<double>(b) * static_cast<double>(sq) * static_cast<double>(s) * 4 * static_cast<double>(std::max(hi, al)),
                 "DSA dense index scores");
    }
    const auto n = [](std::int64_t x) { return static_cast<double>(x); };
    DsaCore out;
    AttentionCore& c = out.core;
    // The fraction of the sq x s index scores computed: the causal half
    // (and its diagonal) by the fused kernels, all of them by the einsum.
    const double seen = dense ? 1.0 : (n(s) + 1) / (2 * n(s));
    const double pairs = n(b) * n(sq) * n(s) * seen;
    std::vector<sim::Kernel> index_backward;
    if (indexer) {
      // The projections from the detached inputs (gathered to the whole
      // sequence under sequence parallelism), k's LayerNorm, rotary and
      // the Hadamard rotation on q and k.
      const std::vector<sim::Kernel> proj = {gemm("dsa.index_q", t, hi * di, rq, e), gemm("dsa.index_k", t, di, h, e),
                                             gemm("dsa.index_weights", t, hi, h, e)};
      c.forward.insert(c.forward.end(), proj.begin(), proj.end());
      const sim::Kernel k_norm = memory_op("dsa.index_k_norm", KernelKind::kNorm, e * t * di, e * t * di, 5.0 * n(t * di));
      const Bytes qk = t * (hi + 1) * di;
      const sim::Kernel rotate = memory_op("dsa.index_rotate", KernelKind::kElementwise, 2 * e * qk, 2 * e * qk,
                                           (std::log2(n(di)) + 3) * n(qk));
      c.forward.push_back(k_norm);
      c.forward.push_back(rotate);
      // sum over heads of weight x ReLU(q . k), each query against the keys.
      // The einsum alone on the dense path; the fp32 logits written (and
      // there the einsum's fp32 [s, b, heads, s] product).
      sim::Kernel scores = fused_kernel("dsa.index_scores", sq, s, di, b * hi, pairs * n(hi) * (2 * n(di) + (dense ? 0 : 3)),
                                        e * (t * hi * di + b * s * di + t * hi) + static_cast<Bytes>(4 * pairs) + (dense ? 4 * b * hi * sq * s : 0));
      scores.fused = !dense;
      c.forward.push_back(scores);
      if (dense) {
        c.forward.push_back(memory_op("dsa.index_relu_sum", KernelKind::kElementwise, 4 * b * hi * sq * s, 4 * b * sq * s, 3.0 * n(hi) * pairs));
      }
      c.forward.push_back(memory_op("dsa.topk", KernelKind::kElementwise, static_cast<Bytes>(4 * pairs), 8 * t * kp, pairs));
      if (sp) out.tp_forward.push_back({sim::CollectiveOp::kAllGather, e * t * (h + rq), 1});
      if (cp > 1) c.cp_forward.push_back({sim::CollectiveOp::kAllGather, e * b * s * di, 1, sim::Axis::kCp});
      if (loss != 'N') {
        // The loss's gradient reaches the indexer alone: its weights'
        // gradients (no input gradient: the inputs are detached), the
        // scores' backward over the selected keys or over all of them.
        sim::Kernel back = scores;
        back.name = "dsa.index_scores.bwd";
        if (loss == 'S') {
          const double sel = n(t) * n(kp);  // recomputed at the selected keys, then dq, dk and the weights
          back.flops = 3 * sel * n(hi) * (2 * n(di) + 3);
          back.bytes = e * (2 * t * hi * di + t * kp * di + 2 * t * hi + 2 * b * s * di) + 8 * t * kp;
        } else {
          back.flops = 4 * pairs * n(hi) * 2 * n(di);  // the score einsum twice, then dq and dk
          back.bytes = 2 * scores.bytes;
        }
        index_backward.push_back(back);
        index_backward.push_back(backward_of({rotate}).front());
        index_backward.push_back(backward_of({k_norm}).front());
        for (auto it = proj.rbegin(); it != proj.rend(); ++it) index_backward.push_back(backward_of({*it}).back());  // wgrad
        if (cp > 1) c.cp_backward.push_back({sim::CollectiveOp::kReduceScatter, e * b * s * di, 1, sim::Axis::kCp});
        // Kept: q, the weights and k (the whole sequence's under cp), k's
        // norm input and statistics, the int64 indices; under sequence
        // parallelism the gathered inputs of the projections.
        out.saved += e * (t * hi * di + t * hi + b * s * di + t * di) + 8 * t + 8 * t * kp + (sp ? e * t * (h + rq) : 0);
      }
    }
    // The loss's target: the main attention's probabilities summed over
    // heads, over the selected keys or over every key.
    std::vector<sim::Kernel> target_backward;
    if (indexer && loss == 'S') {
      c.forward.push_back(fused_kernel("dsa.loss_target", sq, kp, dqk, b * al, n(t) * n(al) * n(kp) * (2 * n(dqk) + 5),
                                       e * (t * al * dqk + t * kp * dqk) + 12 * t * kp));
      if (tp > 1) out.tp_forward.push_back({sim::CollectiveOp::kAllReduce, 4 * t * kp, 1});
    } else if (indexer && loss == 'D') {
      const Bytes sc = b * al * sq * s;
      const std::vector<sim::Kernel> target = {
          gemm("dsa.loss_target", sq, s, dqk, 4, b * al, KernelKind::kAttention),
          memory_op("dsa.loss_softmax", KernelKind::kNorm, 4 * sc, 4 * sc + 4 * b * sq * s, 6.0 * n(sc)),
          memory_op("dsa.index_kl", KernelKind::kElementwise, 8 * b * sq * s, 4 * b * sq * s, 5.0 * n(b * sq * s))};
      c.forward.insert(c.forward.end(), target.begin(), target.end());
      target_backward = target;  // recomputed by the loss's backward
      if (tp > 1) {
        out.tp_forward.push_back({sim::CollectiveOp::kAllReduce, 4 * b * sq * s, 1});
        out.tp_backward.push_back({sim::CollectiveOp::kAllReduce, 4 * b * sq * s, 1});
      }
      out.workspace = 4 * b * sq * s * (2 * al + hi);
    }
    // The attention itself over this rank's al heads: q [t, al, 576]
    // against the selected rows of the shared key [s, 576], whose first
    // 512 channels are the value.
    if (cp > 1) {
      // Megatron-Core gathers the key for the context-parallel ranks' queries.
      c.cp_forward.push_back({sim::CollectiveOp::kAllGather, e * b * s * dqk, 1, sim::Axis::kCp});
      c.cp_backward.push_back({sim::CollectiveOp::kReduceScatter, e * b * s * dqk, 1, sim::Axis::kCp});
    }
    if (dense) {
      // Megatron-Core's dsa_kernel_backend none (_unfused_absorbed_dsa_fn):
      // every key scored in fp32 (q and the one shared key cast, the key
      // broadcast over the heads), the unselected masked, an fp32 softmax
      // cast back, then the product with the value (the key's first 512
      // channels). It keeps the fp32 q and key, the fp32 softmax and its
      // cast, the mask, and the bf16 key as the value.
      const Bytes sc = b * al * sq * s;  // scores on this rank
      check_size(static_cast<double>(sc) * (8 + e), "DSA dense attention scores");
      const std::vector<sim::Kernel> eager = {
          gemm("attn.scores", sq, s, dqk, 4, b * al, KernelKind::kAttention),
          memory_op("attn.mask", KernelKind::kElementwise, 4 * sc + b * sq * s, 4 * sc, n(sc)),
          memory_op("attn.softmax", KernelKind::kNorm, 4 * sc, (4 + e) * sc, 5.0 * n(sc)),
          gemm("attn.av", sq, dv, s, e, b * al, KernelKind::kAttention)};
      c.forward.insert(c.forward.end(), eager.begin(), eager.end());
      const auto back = backward_of(eager);
      c.backward.insert(c.backward.end(), back.begin(), back.end());
      out.saved += 4 * t * al * dqk + 4 * b * s * dqk + (4 + e) * sc + b * sq * s + e * b * s * dqk;
    } else {
      // FlashMLA's or TileLang's sparse kernel, the heads padded to a power
      // of two and at least 16; every one of the kp slots is computed.
      const std::int64_t hp = static_cast<std::int64_t>(std::bit_ceil(static_cast<std::uint64_t>(std::max<std::int64_t>(al, 16))));
      // Q, O and the log-sum-exp; the indices; each query's selected keys.
      const sim::Kernel f = fused_kernel("attn.sparse_mla", sq, kp, dqk, b * hp, 2 * n(t) * n(hp) * n(kp) * n(dqk + dv),
                                         e * t * hp * (dqk + dv) + 4 * t * hp + 4 * t * kp + e * t * kp * dqk);
      sim::Kernel g = f;
      g.name = "attn.sparse_mla.bwd";
      g.flops = 2 * n(t) * n(hp) * n(kp) * n(4 * dqk + 3 * dv);  // the forward again, then five GEMMs
      g.bytes = 2 * f.bytes + 4 * b * s * dqk;                    // and the key's fp32 gradient
      c.forward.push_back(f);
      c.backward.push_back(g);
      // Kept: the padded query's copy, the key, the int32 indices and the
      // output (the value up-projection's input).
      out.saved += e * t * hp * dqk + e * b * s * dqk + 4 * t * kp + e * t * al * dv;
    }
    c.backward.insert(c.backward.end(), target_backward.begin(), target_backward.end());
    c.backward.insert(c.backward.end(), index_backward.begin(), index_backward.end());
    return out;
  }

  /// Note [Hyper-connections]: before a sublayer (`part`: attn or mlp)
  /// of t tokens, the gates from the streams (fused with their RMS), the
  /// Sinkhorn iterations on H_res, and the sublayer's input from the
  /// streams.
  std::vector<sim::Kernel> hc_in(const std::string& part, std::int64_t t, int e) const {
    const std::int64_t n = streams(), h = c_.hidden, g = n * n + 2 * n;
    const double x = static_cast<double>(t * n * h);
    // The gates' projection on the tensor cores (the fused kernel's mma),
    // bf16 whatever the plan's precision.
    return {gemm(part + ".hc_gates", t, g, n * h, e, 1, sim::KernelKind::kAttention),
            memory_op(part + ".hc_sinkhorn", sim::KernelKind::kElementwise, 4 * t * g, 4 * t * g,
                      6.0 * c_.hc_sinkhorn_iters * static_cast<double>(t * n * n)),
            memory_op(part + ".hc_aggregate", sim::KernelKind::kElementwise, e * t * n * h + 4 * t * n, e * t * h, 2.0 * x)};
  }
  /// h_post_bda: each stream the streams mixed by H_res plus H_post times
  /// the sublayer's output; named as the residual add it replaces.
  sim::Kernel hc_out(const std::string& part, std::int64_t t, int e) const {
    const std::int64_t n = streams(), h = c_.hidden;
    return memory_op(part + ".residual", sim::KernelKind::kElementwise, e * t * (n + 1) * h + 4 * t * (n * n + n), e * t * n * h,
                     (2.0 * static_cast<double>(n) + 2.0) * static_cast<double>(t * n * h));
  }
  /// learned_output_contract over t tokens: the n gates from the streams
  /// (an fp32 GEMM scaled by their RMS, fused), sigmoid, the weighted sum.
  std::vector<sim::Kernel> contraction(const std::string& name, std::int64_t t, int e) const {
    const std::int64_t n = streams(), h = c_.hidden;
    const double x = static_cast<double>(t * n * h);
    return {gemm(name + ".gates", t, n, n * h, e, 1, sim::KernelKind::kAttention),
            memory_op(name + ".sum", sim::KernelKind::kElementwise, e * t * n * h + 4 * t * n, e * t * h, 2.0 * x)};
  }
  /// What it keeps: the streams, the fp32 gates and weights, the RMS.
  Bytes contraction_kept(std::int64_t t, int e) const { return e * t * streams() * c_.hidden + 4 * t * (2 * streams() + 1); }
  /// What a sublayer's hyper-connections keep: the streams, the sublayer's
  /// output, the fp32 projection and gates, the RMS.
  Bytes hc_kept(std::int64_t t, int e) const {
    const std::int64_t n = streams(), h = c_.hidden;
    return e * t * n * h + e * t * h + 4 * t * (2 * (n * n + 2 * n) + 1);
  }

  /// Query-key slots over one sequence of s tokens: sum over queries i of
  /// min(w, i + 1) (the window) and, at ratio r with k selected, of
  /// min(k, (i + 1) / r) (Note [DeepSeek-V4]).
  static double window_slots(std::int64_t s, std::int64_t w) {
    const double fs = static_cast<double>(s), fw = static_cast<double>(std::min(w, s));
    return fw * (fw + 1) / 2 + (fs - fw) * fw;
  }
  static double compressed_slots(std::int64_t s, std::int64_t r, std::int64_t k) {
    // sum_{j=1}^{M} floor(j / r) = r q (q - 1) / 2 + q (M - q r + 1), q = floor(M / r).
    const auto floors = [r](std::int64_t m) {
      const double q = static_cast<double>(m / r);
      return static_cast<double>(r) * q * (q - 1) / 2 + q * static_cast<double>(m - (m / r) * r + 1);
    };
    const std::int64_t full = k * r;  // from j = k r on, each query has its k
    return s < full ? floors(s) : floors(full - 1) + static_cast<double>(k) * static_cast<double>(s - full + 1);
  }

  /// Note [DeepSeek-V4]: a layer's compressor (ratio > 0), indexer (ratio
  /// 4) and sparse core over each query's window and compressed entries,
  /// for b sequences of s tokens at tp 1 and cp 1.
  DsaCore v4_core(const sim::WorkloadShape& shape, int ratio, bool indexer) const {
    using sim::KernelKind;
    const std::int64_t b = shape.micro_batch, s = shape.seq_len, t = b * s;
    const std::int64_t h = c_.hidden, a = c_.heads, d = c_.head_dim, qr = c_.q_lora_rank;
    const std::int64_t w = std::min(c_.sliding_window, s), k = c_.index_topk, hi = c_.index_heads, di = c_.index_head_dim;
    const std::int64_t m = ratio > 0 ? s / ratio : 0;  // compressed entries (the tail of s mod ratio dropped)
    const int e = shape.act_bytes;
    const auto n = [](std::int64_t x) { return static_cast<double>(x); };
    // The index lists' width: the window, then the selected or all entries.
    const std::int64_t width = w + (ratio == 4 ? std::min(k, m) : m);
    check_size(n(t) * n(width) * 4, "DeepSeek-V4 attention indices");
    check_size(n(b) * n(s) * n(m) * 4, "DeepSeek-V4 index scores");
    DsaCore out;
    AttentionCore& c = out.core;
    std::vector<sim::Kernel> back;  // the indexer's and compressor's backward, after the core's
    // A compressor of coff x `wide` channels a token: its two bf16 GEMMs,
    // the pooling as the eager SBHD path runs it (score + ape into fp32;
    // at coff 2 the overlap transform of kv and of the score, each a fill
    // and a copy; the fp32 softmax, its cast, kv times the weights, the
    // sum), the entries' norm and rotary. It keeps kv, the fp32 softmax and
    // its cast, and the norm's input. `detached`: the indexer's, whose
    // input is detached: no gradient for x.
    const auto compressor = [&](const std::string& name, std::int64_t coff, std::int64_t wide, bool detached) {
      const std::int64_t cw = coff * wide, entries = b * m;
      const Bytes read = coff == 2 ? 5 * e + 12 : 4 * e + 8, written = coff == 2 ? 4 * e + 16 : 2 * e + 8;
      const std::vector<sim::Kernel> ks = {
          gemm(name, t, 2 * cw, h, e, 1, KernelKind::kAttention),
          memory_op(name + "_pool", KernelKind::kElementwise, read * t * cw, written * t * cw + e * entries * wide, 8.0 * n(t * cw)),
          memory_op(name + "_norm", KernelKind::kNorm, e * entries * wide, e * entries * wide, 7.0 * n(entries * wide))};
      c.forward.insert(c.forward.end(), ks.begin(), ks.end());
      for (const sim::Kernel& k : backward_of(ks)) {
        if (!detached || k.name != name + ".dgrad") back.push_back(k);
      }
      out.saved += (2 * e + 4) * t * cw + e * entries * wide + 4 * entries;
    };
    if (ratio > 0) compressor("attn.compress", ratio == 4 ? 2 : 1, d, false);
    const double slots = ratio == 4 ? n(b) * (window_slots(s, w) + compressed_slots(s, ratio, k))
                                    : n(t) * n((width + 63) / 64 * 64);  // padded for SM100, every slot computed
    if (ratio == 4 && indexer) {
      // The indexer: from the detached query latent and x, its scores over
      // each query's causal entries written in fp32 (b, s, s / 4), top-k;
      // then, as index_loss says (Megatron-Core's dsa_indexer_loss_coeff
      // and dsa_indexer_use_sparse_loss): sparse, the loss's target at the
      // selected entries; dense, at every causal entry; either way its
      // backward inside the forward (FusedCSAIndexerSparseAttnFunc),
      // keeping the gradients of q, the weights and k; none, the indexer
      // alone, untrained.
      const char loss = c_.index_loss;
      const std::vector<sim::Kernel> proj = {gemm("dsa.index_q", t, hi * di, qr, e),
                                             gemm("dsa.index_weights", t, hi, h, e, 1, KernelKind::kAttention)};
      c.forward.insert(c.forward.end(), proj.begin(), proj.end());
      compressor("dsa.index_compress", 2, di, true);
      const Bytes qk = t * hi * di + b * m * di;
      const sim::Kernel rotate = memory_op("dsa.index_rotate", KernelKind::kElementwise, 2 * e * qk, 2 * e * qk, (std::log2(n(di)) + 3) * n(qk));
      c.forward.push_back(rotate);
      const double pairs = n(b) * compressed_slots(s, ratio, m);
      c.forward.push_back(fused_kernel("dsa.index_scores", s, m, di, b * hi, pairs * n(hi) * (2 * n(di) + 3),
                                       e * (t * hi * di + b * m * di + t * hi) + 4 * b * s * m));
      c.forward.push_back(memory_op("dsa.topk", KernelKind::kElementwise, 4 * b * s * m, 4 * t * width, n(b * s * m)));
      if (loss == 'N') {
        back.clear();  // an untrained indexer's compressor has no backward
      } else {
        // The target's entries a query: the selected, or every causal one.
        const std::int64_t kt = loss == 'S' ? k : m;
        const double sel = n(b) * compressed_slots(s, ratio, kt);
        c.forward.push_back(
            fused_kernel("dsa.loss_target", s, kt, d, b * a, sel * n(a) * (2 * n(d) + 5), e * (t * a * d + t * kt * d) + 12 * t * kt));
        sim::Kernel grads = c.forward.back();
        grads.name = "dsa.index_scores.bwd";
        grads.flops = 3 * sel * n(hi) * (2 * n(di) + 3);
        grads.bytes = e * (2 * t * hi * di + t * kt * di + 2 * t * hi + 2 * b * m * di) + 8 * t * kt;
        c.forward.push_back(grads);
        back.push_back(backward_of({rotate}).front());
        for (auto it = proj.rbegin(); it != proj.rend(); ++it) back.push_back(backward_of({*it}).back());  // wgrad alone
        out.saved += e * (t * hi * di + t * hi + b * m * di) +
                     (shape.saved_gemm_input(t * qr) != e * t * qr ? shape.saved_gemm_input(t * qr) : 0);  // wq_b's FP8 copy
      }
    }
    // The core: q [t, H, d] against the kv joined to the entries, the
    // heads padded to a power of two and at least 16.
    const std::int64_t hp = static_cast<std::int64_t>(std::bit_ceil(static_cast<std::uint64_t>(std::max<std::int64_t>(a, 16))));
    const Bytes kv = b * (s + m) * d;
    sim::Kernel f = fused_kernel("attn.sparse_mla", s, width, d, b * hp, 2 * slots * n(hp) * n(2 * d),
                                 e * t * hp * 2 * d + 4 * t * hp + 4 * t * width + static_cast<Bytes>(e * slots * n(d)));
    sim::Kernel g = f;
    g.name = "attn.sparse_mla.bwd";
    g.flops = 2 * slots * n(hp) * n(5 * d);  // QK^T again, dV, dP, dQ, dK: keys and values the same rows
    g.bytes = 2 * f.bytes + 4 * kv;
    c.forward.push_back(f);
    c.backward.push_back(g);
    c.backward.insert(c.backward.end(), back.begin(), back.end());
    // Kept: q, the joined kv, the int32 indices and lengths, O and the log-sum-exp.
    out.saved += e * t * a * d + e * kv + 4 * t * width + 4 * t + e * t * a * d + 4 * t * a;
    return out;
  }

  // Note [Mixture of experts]
  // A MoE layer as Megatron-Core's alltoall token dispatcher runs it
  // (megatron/core/transformer/moe/token_dispatcher.py), t tokens a
  // sequence-parallel rank holds (t / tp under sequence parallelism):
  //   router      a GEMM onto the E experts, an fp32 softmax and top-k
  //   permute     each token copied once per chosen expert: k t rows
  //   counts      with ep > 1, the token counts per expert exchanged
  //               before the dispatch, so every rank knows what it will
  //               receive, and read on the host (preprocess: Megatron-Core
  //               all-gathers each rank's E int64 counts over the tp x ep
  //               group, gather_from_sequence_parallel_region, then syncs;
  //               the LibTorch twin sends each rank its experts' counts by
  //               all-to-all): a latency-bound collective of a few hundred
  //               bytes, priced as the twin's all-to-all of 8 E bytes (on
  //               the CPU profile's Gloo fits the all-gather's latency,
  //               442 us, is 2.6x the all-to-all's, 172 us, where the
  //               runtime's count exchange measured 155 us)
  //   dispatch    all-to-all over the ep ranks (each keeps 1/ep of its rows)
  //   gather      with expert tensor parallelism (etp = tp > 1) the
  //               received rows all-gathered over the etp ranks (their
  //               counts first, 8 E bytes a rank), and reduce-scattered
  //               after the experts in the probabilities' fp32
  //               (combine_preprocess: hidden_states.to(self.probs.dtype)),
  //               at ep 1 too, where the all-to-all moves nothing (without
  //               sequence parallelism, all-reduced); the shared experts
  //               gather and reduce-scatter their own (Note [Experts under
  //               tensor parallelism] in models/torch)
  //   experts     a grouped GEMM per matrix over this rank's E / ep experts,
  //               each of width fe / etp: gate and up, SwiGLU, down
  //   combine     all-to-all back, then unpermute: the k outputs of each
  //               token weighted by their router probabilities and summed
  //   shared      shared experts, a dense SwiGLU split over tp (and Qwen2-
  //               MoE's sigmoid gate), on the tokens as the dense MLP sees them
  // The allgather dispatcher (plan.moe_dispatcher allgather, Megatron-Core's
  // default; MoEAllGatherTokenDispatcher) exchanges no rows and no counts:
  // over the etp x ep ranks (its tp_ep group: the tensor-parallel group at
  // ep 1, the lowering's expert dispatch group otherwise, Note [Expert
  // mesh]) it gathers each rank's routing map (a bool a token and expert),
  // fp32 probabilities (4 E a token) and tokens (e h a token), each rank
  // picks its experts' rows from every gathered token, runs them, scatters
  // them weighted into a buffer of every gathered token and reduce-scatters
  // it in fp32 (token_combine); backward reduce-scatters the tokens' and
  // probabilities' gradients and gathers the parts' in fp32.
  // Balanced routing gives each rank k t rows (k t etp with experts split
  // over etp > 1 and sequence parallelism, either dispatcher); the simulated rank is the one holding the busiest
  // expert, which receives factor x as many (moe_load: the hot expert at
  // moe_imbalance x its share, the others sharing the rest, each capped at
  // moe_capacity_factor x its share when tokens are dropped, or padded to
  // exactly that). Dispatch and combine move k t h elements each way, the
  // busiest rank's share scaled by the same factor; backward runs them again
  // for the gradients. Without tensor parallelism of the experts but with
  // tp > 1 (etp = 1), each rank dispatches its own sequence shard and holds
  // whole experts. Saved for backward, as PyTorch's autograd keeps the
  // composite ops of Megatron-Core without permute fusion (its unpermute
  // sums by scatter_add, which keeps only the index; HF's
  // MixtralSparseMoeBlock sums by index_add_, which keeps one more e k t h,
  // not counted here: Note [Dispatch as Megatron-Core's] in
  // models/torch/src/torch_layers.cpp): the router's fp32 probabilities (4 t E) and weights
  // (4 t k), each expert's input (g per element of k t h), SwiGLU's gate,
  // up and product (3e + g per element of its k t fe / etp), the experts'
  // outputs kept for the weighted sum (e k t h), and the shared experts'
  // as the dense MLP's.
  // Note [Dense experts]
  // HuggingFace's Llama 4 (modeling_llama4.py, Llama4TextMoe and
  // Llama4TextExperts) does not route tokens to experts: it repeats the t
  // tokens once per expert, multiplies each copy by that expert's score (0
  // for the unchosen: a sigmoid of -inf), runs every expert on every copy as
  // one bmm over the E experts (gate_up, SiLU times up, down) and sums the E
  // outputs per token. Its work is E t rows of experts where routing's is
  // k t: 16x for Scout, 128x for Maverick at top-1. plan.moe_experts dense
  // prices that: the router and its top-k as routed, a repeat writing E t h,
  // the scaling, the grouped GEMMs over t rows an expert, the SwiGLU over E t
  // fe, and a sum reading E t h; kept for backward, the sigmoid's fp32
  // output, the scores and the repeated tokens the product keeps, its output
  // (the bmm's input) and the SwiGLU's tensors, each over E t. Every rank
  // holds every expert (no expert parallelism), nothing is dropped or
  // unbalanced. A hub kernel (use_kernel_forward_from_hub("Llama4TextMoe"))
  // can replace it; Megatron-Core and torchtitan route (grouped, the
  // default). Priced, not run: the LibTorch twin routes.
  // Note [Latent MoE]
  // NVIDIA's LatentMoE (Nemotron 3 Super and Ultra; Megatron-Core's
  // --moe-latent-size, megatron/core/transformer/moe/moe_layer.py; HF's
  // NemotronHConfig.moe_latent_size) routes each token on its hidden state
  // (the router reads h), then projects it down to the latent width L
  // (fc1_latent_proj, h x L) before the dispatcher, runs the routed experts
  // on L (their fc1 L -> fe, fc2 fe -> L: experts.py and mlp.py take
  // moe_latent_size as their input size), combines at L and projects back
  // (fc2_latent_proj, L x h) before the shared experts' output, which run
  // on h, is added. The all-to-alls, permutes and the experts' kept inputs
  // and outputs are L wide where they were h: the point of it, h / L = 4
  // fewer bytes a token through the dispatcher on both models. The two
  // projections are TELinear with parallel_mode "duplicated": whole on
  // every tp rank, on its own tokens (its sequence shard), their gradients
  // reduced over tp under sequence parallelism (the sequence_parallel
  // attribute, extensions/transformer_engine.py), as the norms'. So a MoE
  // layer has 2 h L more weights, the experts (gates and) up and down on L,
  // as Megatron-LM's theoretical_memory_usage.py counts them; fc2's input
  // (the combined L-wide rows) is kept for its backward, fc1's input is the
  // router's (the norm's output, kept once).
  /// A MoE block's recompute parts (Note [Megatron's recompute modules]):
  /// the experts' activation and the shared experts.
  struct MoeParts {
    Bytes act = 0;
    std::vector<sim::Kernel> act_kernels;
    Bytes shared = 0;
    std::vector<sim::Kernel> shared_kernels;
    /// The rows the routed experts see, their input width and each
    /// expert's intermediate width on this rank (0 for HF's dense experts):
    /// Note [Offload modules]'s expert groups.
    std::int64_t rows = 0, width = 0, fe = 0;
  };

  /// Note [Offload modules]: the groups of Megatron-Core's fine-grained
  /// activation offloading a block has, over its forward kernels (`pre`
  /// of them before the core): the attention's input norm where it is a
  /// module of its own (`attn_norm`, multi-latent attention's), qkv_linear
  /// and core_attn as the attention described them (`qkv_saved`,
  /// `core_saved`), linear_proj's input (`o_elements`), the MoE
  /// layer's norm (`mlp_norm`) and the routed experts' fc1 input, their
  /// activation's keeps (under moe_act recompute the fc1 output its
  /// checkpoint keeps) and the fused grouped MLP's whole (TE's op fuser:
  /// fc1's input, its output, fc2's input unless moe_act is rerun, the
  /// probabilities). The moe_act group commits after fc2 (experts.py), so
  /// it spans fc2's kernel too.
  void offload_groups(sim::Layer& l, const sim::WorkloadShape& shape, std::size_t pre, const AttentionCore& core, Part piece,
                      bool attn_norm, Bytes block_norm_kept, std::int64_t tn, bool attention_groups,
                      std::vector<sim::SavedTensor> qkv_saved, std::vector<sim::SavedTensor> core_saved, std::int64_t o_elements,
                      bool mlp_norm, const MoeParts& moe) const {
    const int e = shape.act_bytes;
    const std::int64_t rows = tn / c_.hidden;
    const bool layernorm_rerun = (shape.recompute_modules & sim::kRecomputeLayernorm) != 0;
    // A norm module's input and rsigma, or under layernorm recompute its input alone.
    const std::vector<sim::SavedTensor> norm_saved =
        layernorm_rerun ? std::vector<sim::SavedTensor>{{tn, e * tn}}
                        : std::vector<sim::SavedTensor>{{tn, block_norm_kept - 4 * rows}, {rows, 4 * rows}};
    const std::size_t core_first = pre, core_end = pre + core.forward.size();
    // A norm's group commits after its sublayer's residual add
    // (transformer_layer.py: group_offload after self_attn_bda, mlp_bda).
    if (attn_norm) add_offload_group(l, shape, sim::kOffloadAttnNorm, 0, kernel_index(l, "attn.residual") + 1, norm_saved);
    if (attention_groups && piece != Part::kMlp) {
      add_offload_group(l, shape, sim::kOffloadQkvLinear, attn_norm ? 1 : 0, core_first, std::move(qkv_saved));
      // (Under selective recompute of core_attn Megatron-Core runs the core
      // outside its group; the lowering drops the group then: Note
      // [Fine-grained offload].)
      add_offload_group(l, shape, sim::kOffloadCoreAttn, core_first, core_end, std::move(core_saved));
      const std::size_t proj = kernel_index(l, "attn.o_proj");
      add_offload_group(l, shape, sim::kOffloadAttnProj, proj, proj + 1, {{o_elements, shape.saved_gemm_input(o_elements)}});
    }
    if (mlp_norm) {
      const std::size_t router = kernel_index(l, "moe.router");
      add_offload_group(l, shape, sim::kOffloadMlpNorm, router - 1, kernel_index(l, "mlp.residual") + 1, norm_saved);
    }
    if (moe.rows == 0) return;
    const std::int64_t n = moe.rows * moe.fe, fc1_out = up_width() * n;
    const std::size_t up = kernel_index(l, c_.squared_relu ? "moe.experts.up" : "moe.experts.gate_up");
    const std::size_t down = kernel_index(l, "moe.experts.down");
    const bool act_rerun = (shape.recompute_modules & sim::kRecomputeMoeAct) != 0;
    const sim::SavedTensor fc1_in{moe.rows * moe.width, shape.saved_gemm_input(moe.rows * moe.width)}, probs{moe.rows, 4 * moe.rows};
    // What the activation keeps (its input among it), and fc2's input.
    const sim::SavedTensor act = act_rerun ? sim::SavedTensor{fc1_out, e * fc1_out} : sim::SavedTensor{fc1_out, act_kept(n, shape) - shape.saved_gemm_input(n)};
    add_offload_group(l, shape, sim::kOffloadExpertFc1, up, up + 1, {fc1_in});
    add_offload_group(l, shape, sim::kOffloadMoeAct, up + 1, down + 1, {act, probs});
    std::vector<sim::SavedTensor> fused = {fc1_in, act, probs};
    if (!act_rerun) fused.push_back({n, shape.saved_gemm_input(n)});
    add_offload_group(l, shape, sim::kOffloadFusedGroupMlp, up, down + 1, std::move(fused));
  }
  Bytes moe_mlp(const sim::WorkloadShape& shape, sim::Layer& l, std::vector<sim::Kernel>& post,
                std::vector<sim::LayerComm>& tp_extra, std::vector<sim::LayerComm>& tp_extra_backward, MoeParts& parts) const {
    using sim::KernelKind;
    const std::int64_t h = c_.hidden, tp = shape.tp, etp = shape.etp, E = c_.experts, k = c_.top_k;
    const int e = shape.act_bytes;
    const bool sp = shape.sequence_parallel && tp > 1;
    const std::int64_t t = local_tokens(shape);
    // Tokens this rank routes: its sequence shard (tl). Under the
    // allgather dispatcher every rank's tokens are gathered over the etp x
    // ep ranks (tx of them) and this rank's experts take their rows; under
    // the alltoall dispatcher its own tokens' rows go to their experts'
    // ranks and, with the experts split over etp > 1, the rows the etp
    // ranks received are gathered (Note [Mixture of experts]).
    const std::int64_t g = etp * shape.ep;  // Megatron-Core's tp_ep group
    const std::int64_t tl = sp ? t / tp : t;
    const bool dense = shape.moe_dense;  // Note [Dense experts]: every token, every expert (ep 1), gathered as allgather's
    const bool allgather = (shape.moe_allgather || dense) && g > 1 && (sp || tp == 1);
    const std::int64_t tx = allgather ? tl * g : tl;
    const std::int64_t tr = tl;
    const std::int64_t el = E / shape.ep;     // experts on this rank
    const double load = moe_load(shape);
    const bool gather = etp > 1 && sp && !allgather;  // rows gathered over the etp ranks (alltoall)
    // Rows this rank's experts see: its ep group's tl k / ep each of g / ep
    // ranks under allgather, of ep ranks and then etp of those gathered under
    // alltoall: tl k etp either way, balanced.
    const auto rows = dense ? tx * E
                            : static_cast<std::int64_t>(std::ceil(static_cast<double>(tr * k * (gather || allgather ? etp : 1)) * load));
    const std::int64_t fe = c_.expert_intermediate / etp, per_expert = dense ? tx : (rows + el - 1) / el;
    // Note [Latent MoE]: the width the routed experts, the dispatcher and
    // the combine see.
    const std::int64_t w = expert_width();
    check_size(static_cast<double>(rows) * static_cast<double>(std::max(w, fe)) * e, "expert activations");
    post.push_back(gemm("moe.router", tl, E, h, e));
    post.push_back(memory_op("moe.topk", KernelKind::kNorm, e * tl * E, 4 * tl * E + 12 * tr * k, 5.0 * static_cast<double>(tl * E)));
    // Note [Latent MoE]: fc1_latent_proj, duplicated over tp, on this
    // rank's tokens.
    if (c_.moe_latent > 0) post.push_back(gemm("moe.latent.fc1", tl, w, h, e));
    if (dense) {
      // The tokens repeated for every expert, then times each one's score.
      post.push_back(memory_op("moe.repeat", KernelKind::kElementwise, e * tx * w, e * rows * w));
      post.push_back(memory_op("moe.scale", KernelKind::kElementwise, e * rows * w + e * rows, e * rows * w, 1.0 * static_cast<double>(rows * w)));
    } else if (allgather) {
      // This rank's experts' rows picked from the gathered tokens.
      post.push_back(memory_op("moe.permute", KernelKind::kElementwise, e * rows * w, e * rows * w));
    } else {
      post.push_back(memory_op("moe.permute", KernelKind::kElementwise, e * tr * w, e * tr * k * w));
    }
    const bool relu2 = c_.squared_relu;  // Note [Mamba-2]: up, squared ReLU, down
    post.push_back(gemm(relu2 ? "moe.experts.up" : "moe.experts.gate_up", per_expert, up_width() * fe, w, e, el));
    post.push_back(act(relu2 ? "moe.experts.relu2" : "moe.experts.swiglu", rows * fe, shape));
    if (!dense) {
      // moe_act: all the activation keeps but fc1's output (gate and up, or up).
      parts.act = act_kept(rows * fe, shape) - up_width() * e * rows * fe;
      parts.act_kernels = {post.back()};
      parts.rows = rows;
      parts.width = w;
      parts.fe = fe;
    }
    post.push_back(gemm("moe.experts.down", per_expert, w, fe, e, el));
    if (dense) {
      post.push_back(memory_op("moe.sum", KernelKind::kElementwise, e * rows * w, e * tx * w, 1.0 * static_cast<double>(rows * w)));
    } else if (allgather) {
      // Weighted and scattered into every gathered token's row (zero where
      // none of this rank's experts took it).
      post.push_back(memory_op("moe.unpermute", KernelKind::kElementwise, e * rows * w + 4 * rows, e * tx * w,
                               2.0 * static_cast<double>(rows * w)));
    } else {
      post.push_back(memory_op("moe.unpermute", KernelKind::kElementwise, e * tr * k * w + 4 * tr * k, e * tr * w,
                               2.0 * static_cast<double>(tr * k * w)));
    }
    // Note [Latent MoE]: fc2_latent_proj back to the hidden width, keeping
    // its input.
    if (c_.latent_norm) {
      // Note [Kimi K3]: routed_expert_norm, KimiRMSNorm's composite fp32
      // ops, keeping the fp32 input, its output before the weight and rsqrt.
      post.push_back(memory_op("moe.latent.norm", KernelKind::kNorm, (e + 8) * tl * w, (e + 8) * tl * w, 4.0 * static_cast<double>(tl * w)));
    }
    if (c_.moe_latent > 0) post.push_back(gemm("moe.latent.fc2", tl, h, w, e));
    const Bytes latent_kept = (c_.moe_latent > 0 ? shape.saved_gemm_input(tl * w) : 0) + (c_.latent_norm ? (4 + e) * tl * w + 4 * tl : 0);
    // Dense: the sigmoid's fp32 output, the scores and the repeated tokens
    // the product keeps, its output (the bmm's input) and the SwiGLU's.
    Bytes saved = latent_kept +
                  (dense       ? 4 * tl * E + e * rows + e * rows * w + shape.saved_gemm_input(rows * w) + act_kept(rows * fe, shape)
                   : allgather ? 4 * tl * E + 4 * rows + shape.saved_gemm_input(rows * w) + act_kept(rows * fe, shape) + e * rows * w
                               : 4 * tl * E + 4 * tr * k + shape.saved_gemm_input(rows * w) + act_kept(rows * fe, shape) + e * rows * w);
    if (c_.shared_intermediate > 0) {
      const std::int64_t fs = c_.shared_intermediate / tp;
      const std::size_t first = post.size();
      post.push_back(gemm(relu2 ? "moe.shared.up" : "moe.shared.gate_up", t, up_width() * fs, h, e));
      post.push_back(act(relu2 ? "moe.shared.relu2" : "moe.shared.swiglu", t * fs, shape));
      post.push_back(gemm("moe.shared.down", t, h, fs, e));
      parts.shared = act_kept(t * fs, shape);
      if (c_.shared_expert_gate) {
        post.push_back(gemm("moe.shared.gate", t, 1, h, e));
        parts.shared += e * t * h + 4 * t;  // the shared output and the sigmoid, kept by their product
      }
      saved += parts.shared;
      parts.shared_kernels.assign(post.begin() + static_cast<std::ptrdiff_t>(first), post.end());
    }
    l.expert_params = el * expert_params_each(etp);
    l.params += l.expert_params;
    // Each expert's weights: gate, up and down (squared ReLU's up and down),
    // with gpt-oss's biases twice as many.
    const std::int64_t per_expert_tensors = (up_width() + 1) * (c_.mlp_bias ? 2 : 1);
    l.param_tensors += static_cast<int>(std::min<std::int64_t>(el * per_expert_tensors, 1 << 20));
    // Megatron-Core reduce-scatters the experts' parts in the router
    // probabilities' dtype, fp32 (token_combine's and combine_preprocess's
    // hidden_states.to(probs.dtype)), and gathers their gradients so.
    const Bytes part = 4 * w;
    if (allgather && !dense) {
      // The allgather dispatcher over the etp x ep ranks: the routing map
      // (bool) and the fp32 probabilities over all E, then the tokens, each
      // rank's parts of every token reduce-scattered back; in backward the
      // tokens' and the probabilities' gradients reduce-scattered and the
      // parts' gathered. No counts are exchanged: each rank counts its
      // experts' rows from the gathered map.
      std::vector<sim::LayerComm> fwd = {{sim::CollectiveOp::kAllGather, tx * E, 1},
                                         {sim::CollectiveOp::kAllGather, 4 * tx * E, 1},
                                         {sim::CollectiveOp::kAllGather, e * tx * w, 1},
                                         {sim::CollectiveOp::kReduceScatter, part * tx, 1}};
      std::vector<sim::LayerComm> bwd = {{sim::CollectiveOp::kReduceScatter, e * tx * w, 1},
                                         {sim::CollectiveOp::kReduceScatter, 4 * tx * E, 1},
                                         {sim::CollectiveOp::kAllGather, part * tx, 1}};
      if (shape.ep > 1) {
        // Over the expert group the lowering prices (Note [Expert mesh]: the
        // tp_ep group where the dispatcher gathers).
        for (auto& c : fwd) c.axis = sim::Axis::kEp;
        for (auto& c : bwd) c.axis = sim::Axis::kEp;
        l.ep_forward = std::move(fwd);
        l.ep_backward = std::move(bwd);
      } else {
        tp_extra = std::move(fwd);
        tp_extra_backward = std::move(bwd);
      }
      return saved;
    }
    if (shape.ep > 1) {
      const Bytes a2a = static_cast<Bytes>(std::ceil(static_cast<double>(e * tr * k * w) * load));
      l.ep_forward.push_back({sim::CollectiveOp::kAllToAll, 8 * E, 1, sim::Axis::kEp});  // the counts
      l.ep_forward.push_back({sim::CollectiveOp::kAllToAll, a2a, 2, sim::Axis::kEp});
      l.ep_backward.push_back({sim::CollectiveOp::kAllToAll, a2a, 2, sim::Axis::kEp});
      if (shape.moe_deepep) l.ep_route = {static_cast<int>(k), static_cast<int>(E), c_.route_nodes};
    }
    if (gather) {
      // The alltoall dispatcher's rows received by the expert tensor-
      // parallel ranks gathered over them (their counts first), and the
      // parts reduce-scattered back in fp32 (the tensor-parallel group:
      // etp = tp); backward the reverse.
      tp_extra = {{sim::CollectiveOp::kAllGather, 8 * E * etp, 1},
                  {sim::CollectiveOp::kAllGather, e * rows * w, 1},
                  {sim::CollectiveOp::kReduceScatter, part * rows, 1}};
      tp_extra_backward = {{sim::CollectiveOp::kReduceScatter, e * rows * w, 1}, {sim::CollectiveOp::kAllGather, part * rows, 1}};
    } else if (allgather) {
      // Dense experts (HF's bmm) split over tp: the tokens and their fp32
      // probabilities gathered, the parts reduce-scattered.
      tp_extra = {{sim::CollectiveOp::kAllGather, e * tx * h, 1},
                  {sim::CollectiveOp::kAllGather, 4 * tx * E, 1},
                  {sim::CollectiveOp::kReduceScatter, e * tx * h, 1}};
      tp_extra_backward = tp_extra;
    } else if (etp > 1 && tp > 1 && !sp && shape.ep == 1) {
      // Without sequence parallelism every rank holds every token and
      // routes it: each rank's experts' parts summed (Megatron-Core refuses
      // to train so; predict warns).
      tp_extra = {{sim::CollectiveOp::kAllReduce, e * t * h, 1}};
      tp_extra_backward = tp_extra;
    }
    return saved;
  }

  LlamaConfig c_;
  /// Gemma 4's twins (Note [Gemma 4]), by [global][reuses keys and
  /// values]; null: this config makes those layers.
  std::shared_ptr<const Llama> twins_[2][2];
  /// The per-layer inputs' table rows (Note [Gemma 4]).
  std::int64_t ple_rows() const { return c_.ple_vocab > 0 ? c_.ple_vocab : c_.vocab; }
  /// Layer i attends with an earlier layer's keys and values (Note [Gemma 4]).
  bool shares_kv(int i) const { return c_.kv_shared_layers > 0 && i >= c_.layers - c_.kv_shared_layers; }
  /// Who makes layer i's block: its twin, or this config.
  const Llama& maker(int i) const {
    const auto& twin = twins_[global_layer(i) ? 1 : 0][shares_kv(i) ? 1 : 0];
    return twin ? *twin : *this;
  }
};

}  // namespace

sim::ModelPtr make_llama(const LlamaConfig& c) { return std::make_shared<Llama>(c); }

}  // namespace dtsim::models
