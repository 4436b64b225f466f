// Built-in models and the loaders: built-in names, our YAML (`family:` plus
// that family's keys) and HuggingFace config.json (GPT-2 and BERT families).
// Every route ends in the same YAML mapping, so `--set model.KEY=VALUE`
// overrides and validation behave the same whatever the source.
#include <algorithm>
#include <cctype>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <optional>
#include <sstream>

#include "dtsim/models/models.hpp"
#include "dtsim/sim/error.hpp"

namespace dtsim::models {
namespace {

struct Builtin {
  const char* name;
  const char* description;
  const char* yaml;
};

// Sizes from the HuggingFace model cards' config.json (gpt2, gpt2-medium,
// gpt2-large, gpt2-xl, bert-base-uncased, bert-large-uncased,
// google/bert_uncased_L-2_H-128_A-2 for bert-tiny; meta-llama/Meta-Llama-3-8B,
// Meta-Llama-3-70B, Llama-3.1-405B, Llama-3.2-1B, mistralai/Mistral-7B-v0.1, Qwen/Qwen3-8B,
// whose config.json files tests/data/hf/ keeps).
//
// The Megatron GPTs are Narayanan et al. 2021 ("Efficient Large-Scale
// Language Model Training on GPU Clusters Using Megatron-LM"), Table 1:
// heads, hidden and layers per size, vocabulary 51,200, sequence 2,048,
// f = 4h, embeddings tied to the head. gpt-22b and gpt-175b are the 22B and
// 175B rows of Korthikanti et al. 2022, Table 3 (same vocabulary and
// sequence); gpt-530b and gpt-1t are in both papers.
const Builtin kBuiltins[] = {
    {"gpt2", "GPT-2 124M: 12 layers, hidden 768, 12 heads, vocab 50257, seq 1024",
     "family: gpt2\nlayers: 12\nhidden: 768\nheads: 12\n"},
    {"gpt2-medium", "GPT-2 355M: 24 layers, hidden 1024, 16 heads",
     "family: gpt2\nlayers: 24\nhidden: 1024\nheads: 16\n"},
    {"gpt2-large", "GPT-2 774M: 36 layers, hidden 1280, 20 heads",
     "family: gpt2\nlayers: 36\nhidden: 1280\nheads: 20\n"},
    {"gpt2-xl", "GPT-2 1.56B: 48 layers, hidden 1600, 25 heads",
     "family: gpt2\nlayers: 48\nhidden: 1600\nheads: 25\n"},
    {"bert-base", "BERT-base (uncased) 110M with pooler: 12 layers, hidden 768, seq 512",
     "family: bert\nlayers: 12\nhidden: 768\nheads: 12\nintermediate: 3072\n"},
    {"bert-large", "BERT-large (uncased) 335M with pooler: 24 layers, hidden 1024, seq 512",
     "family: bert\nlayers: 24\nhidden: 1024\nheads: 16\nintermediate: 4096\n"},
    {"bilstm", "Seed 000's classifier: 2-layer Bi-LSTM (hidden 256) over 768-wide embeddings, 33 classes",
     "family: bilstm\ninput_size: 768\nhidden: 256\nlayers: 2\nclasses: 33\nseq_len: 512\n"},
    {"gpt-1.7b", "Megatron GPT 1.7B (Narayanan et al. 2021, Table 1): 24 layers, hidden 2304, 24 heads, seq 2048",
     "family: gpt\nlayers: 24\nhidden: 2304\nheads: 24\nvocab: 51200\nseq_len: 2048\n"},
    {"gpt-3.6b", "Megatron GPT 3.6B: 30 layers, hidden 3072, 32 heads, seq 2048",
     "family: gpt\nlayers: 30\nhidden: 3072\nheads: 32\nvocab: 51200\nseq_len: 2048\n"},
    {"gpt-7.5b", "Megatron GPT 7.5B: 36 layers, hidden 4096, 32 heads, seq 2048",
     "family: gpt\nlayers: 36\nhidden: 4096\nheads: 32\nvocab: 51200\nseq_len: 2048\n"},
    {"gpt-18b", "Megatron GPT 18B: 40 layers, hidden 6144, 48 heads, seq 2048",
     "family: gpt\nlayers: 40\nhidden: 6144\nheads: 48\nvocab: 51200\nseq_len: 2048\n"},
    {"gpt-22b", "GPT 22B (Korthikanti et al. 2022, Table 3): 48 layers, hidden 6144, 64 heads, seq 2048",
     "family: gpt\nlayers: 48\nhidden: 6144\nheads: 64\nvocab: 51200\nseq_len: 2048\n"},
    {"gpt-39b", "Megatron GPT 39B: 48 layers, hidden 8192, 64 heads, seq 2048",
     "family: gpt\nlayers: 48\nhidden: 8192\nheads: 64\nvocab: 51200\nseq_len: 2048\n"},
    {"gpt-76b", "Megatron GPT 76B: 60 layers, hidden 10240, 80 heads, seq 2048",
     "family: gpt\nlayers: 60\nhidden: 10240\nheads: 80\nvocab: 51200\nseq_len: 2048\n"},
    {"gpt-145b", "Megatron GPT 145B: 80 layers, hidden 12288, 96 heads, seq 2048",
     "family: gpt\nlayers: 80\nhidden: 12288\nheads: 96\nvocab: 51200\nseq_len: 2048\n"},
    {"gpt-175b", "GPT 175B (Korthikanti et al. 2022, Table 3; GPT-3's shape): 96 layers, hidden 12288, 96 heads, seq 2048",
     "family: gpt\nlayers: 96\nhidden: 12288\nheads: 96\nvocab: 51200\nseq_len: 2048\n"},
    {"gpt-310b", "Megatron GPT 310B: 96 layers, hidden 16384, 128 heads, seq 2048",
     "family: gpt\nlayers: 96\nhidden: 16384\nheads: 128\nvocab: 51200\nseq_len: 2048\n"},
    {"gpt-530b", "Megatron GPT 530B: 105 layers, hidden 20480, 128 heads, seq 2048",
     "family: gpt\nlayers: 105\nhidden: 20480\nheads: 128\nvocab: 51200\nseq_len: 2048\n"},
    {"gpt-1t", "Megatron GPT 1T: 128 layers, hidden 25600, 160 heads, seq 2048",
     "family: gpt\nlayers: 128\nhidden: 25600\nheads: 160\nvocab: 51200\nseq_len: 2048\n"},
    // Note [More built-ins]: each of the entries below has its hub
    // checkpoint's parameter total (tests/data/hf/PARAMS.md); their shapes
    // are their config.json's (and, for Qwen3, torchtitan's qwen3_configs).
    {"llama-2-7b", "Meta Llama 2 7B (meta-llama/Llama-2-7b-hf config.json): 32 layers, hidden 4096, 32 heads, SwiGLU 11008, vocab 32000, seq 4096",
     "family: llama\nlayers: 32\nhidden: 4096\nheads: 32\nkv_heads: 32\nintermediate: 11008\nvocab: 32000\nseq_len: 4096\n"},
    {"llama-2-13b", "Meta Llama 2 13B: 40 layers, hidden 5120, 40 heads, SwiGLU 13824, vocab 32000, seq 4096",
     "family: llama\nlayers: 40\nhidden: 5120\nheads: 40\nkv_heads: 40\nintermediate: 13824\nvocab: 32000\nseq_len: 4096\n"},
    {"llama-2-70b", "Meta Llama 2 70B: 80 layers, hidden 8192, 64 heads, 8 KV heads, SwiGLU 28672, vocab 32000, seq 4096",
     "family: llama\nlayers: 80\nhidden: 8192\nheads: 64\nkv_heads: 8\nintermediate: 28672\nvocab: 32000\nseq_len: 4096\n"},
    {"llama-3-8b", "Meta Llama 3 8B (meta-llama/Meta-Llama-3-8B config.json): 32 layers, hidden 4096, 32 heads, 8 KV heads, SwiGLU 14336, vocab 128256, seq 8192",
     "family: llama\nlayers: 32\nhidden: 4096\nheads: 32\nkv_heads: 8\nintermediate: 14336\nvocab: 128256\nseq_len: 8192\n"},
    {"llama-3.2-1b", "Meta Llama 3.2 1B (meta-llama/Llama-3.2-1B config.json): 16 layers, hidden 2048, 32 heads of 64, 8 KV heads, SwiGLU 8192, vocab 128256, tied head, seq 131072",
     "family: llama\nlayers: 16\nhidden: 2048\nheads: 32\nkv_heads: 8\nhead_dim: 64\nintermediate: 8192\nvocab: 128256\nseq_len: 131072\ntied_head: true\n"},
    {"llama-3-70b", "Meta Llama 3 70B: 80 layers, hidden 8192, 64 heads, 8 KV heads, SwiGLU 28672, vocab 128256, seq 8192",
     "family: llama\nlayers: 80\nhidden: 8192\nheads: 64\nkv_heads: 8\nintermediate: 28672\nvocab: 128256\nseq_len: 8192\n"},
    {"llama-3.1-405b", "Meta Llama 3.1 405B: 126 layers, hidden 16384, 128 heads, 8 KV heads, SwiGLU 53248, vocab 128256, seq 131072",
     "family: llama\nlayers: 126\nhidden: 16384\nheads: 128\nkv_heads: 8\nintermediate: 53248\nvocab: 128256\nseq_len: 131072\n"},
    {"llama-3.1-8b", "Meta Llama 3.1 8B (meta-llama/Llama-3.1-8B config.json): Llama 3 8B's shape, seq 131072",
     "family: llama\nlayers: 32\nhidden: 4096\nheads: 32\nkv_heads: 8\nintermediate: 14336\nvocab: 128256\nseq_len: 131072\n"},
    {"llama-3.1-70b", "Meta Llama 3.1 70B: Llama 3 70B's shape (80 layers, hidden 8192, 64 heads, 8 KV heads, SwiGLU 28672), seq 131072",
     "family: llama\nlayers: 80\nhidden: 8192\nheads: 64\nkv_heads: 8\nintermediate: 28672\nvocab: 128256\nseq_len: 131072\n"},
    {"llama-3.3-70b", "Meta Llama 3.3 70B: Llama 3.1 70B's shape, seq 131072",
     "family: llama\nlayers: 80\nhidden: 8192\nheads: 64\nkv_heads: 8\nintermediate: 28672\nvocab: 128256\nseq_len: 131072\n"},
    {"llama-3.2-3b", "Meta Llama 3.2 3B: 28 layers, hidden 3072, 24 heads of 128, 8 KV heads, SwiGLU 8192, vocab 128256, tied head, seq 131072",
     "family: llama\nlayers: 28\nhidden: 3072\nheads: 24\nkv_heads: 8\nhead_dim: 128\nintermediate: 8192\nvocab: 128256\nseq_len: 131072\ntied_head: true\n"},
    {"mistral-nemo-12b", "Mistral NeMo 12B (mistralai/Mistral-Nemo-Base-2407): 40 layers, hidden 5120, 32 heads of 128, 8 KV heads, SwiGLU 14336, vocab 131072, seq 1024000",
     "family: llama\nlayers: 40\nhidden: 5120\nheads: 32\nkv_heads: 8\nhead_dim: 128\nintermediate: 14336\nvocab: 131072\nseq_len: 1024000\n"},
    {"mistral-7b", "Mistral 7B v0.1: 32 layers, hidden 4096, 32 heads, 8 KV heads, SwiGLU 14336, vocab 32000, sliding window 4096, seq 32768",
     "family: llama\nlayers: 32\nhidden: 4096\nheads: 32\nkv_heads: 8\nintermediate: 14336\nvocab: 32000\nseq_len: 32768\nsliding_window: 4096\n"},
    {"qwen3-8b", "Qwen3 8B: 36 layers, hidden 4096, 32 heads of 128, 8 KV heads, q/k norms, SwiGLU 12288, vocab 151936, seq 40960",
     "family: llama\nlayers: 36\nhidden: 4096\nheads: 32\nkv_heads: 8\nhead_dim: 128\nintermediate: 12288\nvocab: 151936\nseq_len: 40960\nqk_norm: true\n"},
    {"qwen3-0.6b", "Qwen3 0.6B: 28 layers, hidden 1024, 16 heads of 128, 8 KV heads, q/k norms, SwiGLU 3072, vocab 151936, tied head, seq 40960",
     "family: llama\nlayers: 28\nhidden: 1024\nheads: 16\nkv_heads: 8\nhead_dim: 128\nintermediate: 3072\nvocab: 151936\nseq_len: 40960\nqk_norm: true\ntied_head: true\n"},
    {"qwen3-1.7b", "Qwen3 1.7B: 28 layers, hidden 2048, 16 heads of 128, 8 KV heads, q/k norms, SwiGLU 6144, vocab 151936, tied head, seq 40960",
     "family: llama\nlayers: 28\nhidden: 2048\nheads: 16\nkv_heads: 8\nhead_dim: 128\nintermediate: 6144\nvocab: 151936\nseq_len: 40960\nqk_norm: true\ntied_head: true\n"},
    {"qwen3-4b", "Qwen3 4B: 36 layers, hidden 2560, 32 heads of 128, 8 KV heads, q/k norms, SwiGLU 9728, vocab 151936, tied head, seq 40960",
     "family: llama\nlayers: 36\nhidden: 2560\nheads: 32\nkv_heads: 8\nhead_dim: 128\nintermediate: 9728\nvocab: 151936\nseq_len: 40960\nqk_norm: true\ntied_head: true\n"},
    {"qwen3-14b", "Qwen3 14B: 40 layers, hidden 5120, 40 heads of 128, 8 KV heads, q/k norms, SwiGLU 17408, vocab 151936, seq 40960",
     "family: llama\nlayers: 40\nhidden: 5120\nheads: 40\nkv_heads: 8\nhead_dim: 128\nintermediate: 17408\nvocab: 151936\nseq_len: 40960\nqk_norm: true\n"},
    {"qwen3-32b", "Qwen3 32B: 64 layers, hidden 5120, 64 heads of 128, 8 KV heads, q/k norms, SwiGLU 25600, vocab 151936, seq 40960",
     "family: llama\nlayers: 64\nhidden: 5120\nheads: 64\nkv_heads: 8\nhead_dim: 128\nintermediate: 25600\nvocab: 151936\nseq_len: 40960\nqk_norm: true\n"},
    // Qwen2.5 (Qwen2ForCausalLM: q/k/v with biases, o_proj without).
    {"qwen2.5-7b", "Qwen2.5 7B: 28 layers, hidden 3584, 28 heads, 4 KV heads, q/k/v biases, SwiGLU 18944, vocab 152064, seq 131072",
     "family: llama\nlayers: 28\nhidden: 3584\nheads: 28\nkv_heads: 4\nintermediate: 18944\nvocab: 152064\nseq_len: 131072\nqkv_bias: true\n"},
    {"qwen2.5-14b", "Qwen2.5 14B: 48 layers, hidden 5120, 40 heads, 8 KV heads, q/k/v biases, SwiGLU 13824, vocab 152064, seq 131072",
     "family: llama\nlayers: 48\nhidden: 5120\nheads: 40\nkv_heads: 8\nintermediate: 13824\nvocab: 152064\nseq_len: 131072\nqkv_bias: true\n"},
    {"qwen2.5-32b", "Qwen2.5 32B: 64 layers, hidden 5120, 40 heads, 8 KV heads, q/k/v biases, SwiGLU 27648, vocab 152064, seq 131072",
     "family: llama\nlayers: 64\nhidden: 5120\nheads: 40\nkv_heads: 8\nintermediate: 27648\nvocab: 152064\nseq_len: 131072\nqkv_bias: true\n"},
    {"qwen2.5-72b", "Qwen2.5 72B: 80 layers, hidden 8192, 64 heads, 8 KV heads, q/k/v biases, SwiGLU 29568, vocab 152064, seq 131072",
     "family: llama\nlayers: 80\nhidden: 8192\nheads: 64\nkv_heads: 8\nintermediate: 29568\nvocab: 152064\nseq_len: 131072\nqkv_bias: true\n"},
    // Note [SmolLM3] (llama.cpp): HuggingFaceTB/SmolLM3-3B's config.json.
    {"smollm3-3b", "Hugging Face SmolLM3 3B: 36 layers, hidden 2048, 16 heads, 4 KV heads, SwiGLU 11008, vocab 128256, tied head, no rotary on every 4th layer (NoPE), seq 65536",
     "family: llama\nlayers: 36\nhidden: 2048\nheads: 16\nkv_heads: 4\nintermediate: 11008\nvocab: 128256\nseq_len: 65536\ntied_head: true\n"
     "global_every: 4\nnope_global: true\n"},
    // Note [Phi-3] (llama.cpp): microsoft/Phi-3-mini-4k-instruct's and
    // Phi-3-medium-4k-instruct's config.json.
    {"phi-3-mini", "Microsoft Phi-3-mini (4k): 32 layers, hidden 3072, 32 heads, SwiGLU 8192, vocab 32064, sliding window 2047, seq 4096",
     "family: llama\nlayers: 32\nhidden: 3072\nheads: 32\nkv_heads: 32\nintermediate: 8192\nvocab: 32064\nseq_len: 4096\nsliding_window: 2047\n"},
    {"phi-3-medium", "Microsoft Phi-3-medium (4k): 40 layers, hidden 5120, 40 heads, 10 KV heads, SwiGLU 17920, vocab 32064, sliding window 2047, seq 4096",
     "family: llama\nlayers: 40\nhidden: 5120\nheads: 40\nkv_heads: 10\nintermediate: 17920\nvocab: 32064\nseq_len: 4096\nsliding_window: 2047\n"},
    // Note [Granite] (llama.cpp): ibm-granite/granite-3.3-8b-instruct's config.json.
    {"granite-3.3-8b", "IBM Granite 3.3 8B: 40 layers, hidden 4096, 32 heads, 8 KV heads, SwiGLU 12800, vocab 49159, tied head, embeddings x12, residuals x0.22, logits / 16, seq 131072",
     "family: llama\nlayers: 40\nhidden: 4096\nheads: 32\nkv_heads: 8\nintermediate: 12800\nvocab: 49159\nseq_len: 131072\ntied_head: true\n"
     "embedding_multiplier: 12\nresidual_multiplier: 0.22\nlogits_scaling: 16\n"},
    // Note [OLMo 2] (llama.cpp): allenai/OLMo-2-1124-7B's and -13B's shapes.
    {"olmo-2-7b", "Ai2 OLMo 2 7B (1124): 32 layers, hidden 4096, 32 heads, SwiGLU 11008, vocab 100352, q/k norms over all heads, norms after attention and MLP, seq 4096",
     "family: llama\nlayers: 32\nhidden: 4096\nheads: 32\nkv_heads: 32\nintermediate: 11008\nvocab: 100352\nseq_len: 4096\nqk_norm: true\nolmo2_norms: true\n"},
    {"olmo-2-13b", "Ai2 OLMo 2 13B (1124): 40 layers, hidden 5120, 40 heads, SwiGLU 13824, vocab 100352, q/k norms over all heads, norms after attention and MLP, seq 4096",
     "family: llama\nlayers: 40\nhidden: 5120\nheads: 40\nkv_heads: 40\nintermediate: 13824\nvocab: 100352\nseq_len: 4096\nqk_norm: true\nolmo2_norms: true\n"},
    // Note [Gemma] (llama.cpp): Gemma 2 (google/gemma-2-*b config.json) and
    // Gemma 3's language models (text_config of google/gemma-3-*b-pt;
    // gemma-3-1b-pt is text only).
    {"gemma-2-2b", "Google Gemma 2 2B: 26 layers, hidden 2304, 8 heads of 256, 4 KV heads, GeGLU 9216, vocab 256000, local 4096 and global attention alternating, soft caps 50 and 30, seq 8192",
     "family: llama\nlayers: 26\nhidden: 2304\nheads: 8\nkv_heads: 4\nhead_dim: 256\nintermediate: 9216\nvocab: 256000\nseq_len: 8192\n"
     "sliding_window: 4096\nglobal_every: 2\nattn_softcap: 50\nfinal_softcap: 30\ngemma_norms: true\ngelu: true\nembed_scale: true\ntied_head: true\n"},
    {"gemma-2-9b", "Google Gemma 2 9B: 42 layers, hidden 3584, 16 heads of 256, 8 KV heads, GeGLU 14336, vocab 256000, local 4096 and global attention alternating, soft caps 50 and 30, seq 8192",
     "family: llama\nlayers: 42\nhidden: 3584\nheads: 16\nkv_heads: 8\nhead_dim: 256\nintermediate: 14336\nvocab: 256000\nseq_len: 8192\n"
     "sliding_window: 4096\nglobal_every: 2\nattn_softcap: 50\nfinal_softcap: 30\ngemma_norms: true\ngelu: true\nembed_scale: true\ntied_head: true\n"},
    {"gemma-2-27b", "Google Gemma 2 27B: 46 layers, hidden 4608, 32 heads of 128, 16 KV heads, GeGLU 36864, vocab 256000, local 4096 and global attention alternating, soft caps 50 and 30, seq 8192",
     "family: llama\nlayers: 46\nhidden: 4608\nheads: 32\nkv_heads: 16\nhead_dim: 128\nintermediate: 36864\nvocab: 256000\nseq_len: 8192\n"
     "sliding_window: 4096\nglobal_every: 2\nattn_softcap: 50\nfinal_softcap: 30\ngemma_norms: true\ngelu: true\nembed_scale: true\ntied_head: true\n"},
    {"gemma-3-1b", "Google Gemma 3 1B: 26 layers, hidden 1152, 4 heads of 256, 1 KV head, q/k norms, GeGLU 6912, vocab 262144, 5 local (512) layers to 1 global, seq 32768",
     "family: llama\nlayers: 26\nhidden: 1152\nheads: 4\nkv_heads: 1\nhead_dim: 256\nintermediate: 6912\nvocab: 262144\nseq_len: 32768\n"
     "qk_norm: true\nsliding_window: 512\nglobal_every: 6\ngemma_norms: true\ngelu: true\nembed_scale: true\ntied_head: true\n"},
    {"gemma-3-4b", "Google Gemma 3 4B's language model: 34 layers, hidden 2560, 8 heads of 256, 4 KV heads, q/k norms, GeGLU 10240, vocab 262208, 5 local (1024) layers to 1 global, seq 131072",
     "family: llama\nlayers: 34\nhidden: 2560\nheads: 8\nkv_heads: 4\nhead_dim: 256\nintermediate: 10240\nvocab: 262208\nseq_len: 131072\n"
     "qk_norm: true\nsliding_window: 1024\nglobal_every: 6\ngemma_norms: true\ngelu: true\nembed_scale: true\ntied_head: true\n"},
    {"gemma-3-12b", "Google Gemma 3 12B's language model: 48 layers, hidden 3840, 16 heads of 256, 8 KV heads, q/k norms, GeGLU 15360, vocab 262208, 5 local (1024) layers to 1 global, seq 131072",
     "family: llama\nlayers: 48\nhidden: 3840\nheads: 16\nkv_heads: 8\nhead_dim: 256\nintermediate: 15360\nvocab: 262208\nseq_len: 131072\n"
     "qk_norm: true\nsliding_window: 1024\nglobal_every: 6\ngemma_norms: true\ngelu: true\nembed_scale: true\ntied_head: true\n"},
    {"gemma-3-27b", "Google Gemma 3 27B's language model: 62 layers, hidden 5376, 32 heads of 128, 16 KV heads, q/k norms, GeGLU 21504, vocab 262208, 5 local (1024) layers to 1 global, seq 131072",
     "family: llama\nlayers: 62\nhidden: 5376\nheads: 32\nkv_heads: 16\nhead_dim: 128\nintermediate: 21504\nvocab: 262208\nseq_len: 131072\n"
     "qk_norm: true\nsliding_window: 1024\nglobal_every: 6\ngemma_norms: true\ngelu: true\nembed_scale: true\ntied_head: true\n"},
    // Note [Gemma 4] (llama.cpp): google/gemma-4-31B's and -26B-A4B's text
    // configs as public copies of them give them (their totals, 30.7B and
    // 25.2B, are the model cards').
    {"gemma-4-31b", "Google Gemma 4 31B's language model: 60 layers, hidden 5376, 32 heads of 256 (16 KV heads) on 50 local (1024) layers, of 512 (4 KV heads, values their keys) on 10 global, q/k/v norms, GeGLU 21504, vocab 262144, seq 262144",
     "family: llama\nlayers: 60\nhidden: 5376\nheads: 32\nkv_heads: 16\nhead_dim: 256\nintermediate: 21504\nvocab: 262144\nseq_len: 262144\n"
     "qk_norm: true\nv_norm: true\nsliding_window: 1024\nglobal_every: 6\nglobal_head_dim: 512\nglobal_kv_heads: 4\nk_eq_v: true\nfinal_softcap: 30\n"
     "gemma_norms: true\ngelu: true\nembed_scale: true\ntied_head: true\n"},
    // Note [Gemma 4]: google/gemma-4-E2B's and -E4B's text configs, as
    // Megatron-Bridge's Gemma4DenseProvider (E4B's defaults) and public
    // copies give them.
    {"gemma-4-e2b", "Google Gemma 4 E2B's language model: 35 layers, hidden 1536, 8 heads of 256 (1 KV head) on 28 local (512) layers, of 512 on 7 global; per-layer inputs of 256; the last 20 layers reuse earlier keys and values, their GeGLU 12288 (6144 before); vocab 262144, seq 131072",
     "family: llama\nlayers: 35\nhidden: 1536\nheads: 8\nkv_heads: 1\nhead_dim: 256\nintermediate: 6144\nvocab: 262144\nseq_len: 131072\n"
     "qk_norm: true\nv_norm: true\nsliding_window: 512\nglobal_every: 5\nglobal_head_dim: 512\nfinal_softcap: 30\n"
     "ple_dim: 256\nkv_shared_layers: 20\ndouble_wide_mlp: true\ngemma_norms: true\ngelu: true\nembed_scale: true\ntied_head: true\n"},
    {"gemma-4-e4b", "Google Gemma 4 E4B's language model: 42 layers, hidden 2560, 8 heads of 256 (2 KV heads) on 35 local (512) layers, of 512 on 7 global; per-layer inputs of 256; the last 18 layers reuse earlier keys and values; GeGLU 10240, vocab 262144, seq 131072",
     "family: llama\nlayers: 42\nhidden: 2560\nheads: 8\nkv_heads: 2\nhead_dim: 256\nintermediate: 10240\nvocab: 262144\nseq_len: 131072\n"
     "qk_norm: true\nv_norm: true\nsliding_window: 512\nglobal_every: 6\nglobal_head_dim: 512\nfinal_softcap: 30\n"
     "ple_dim: 256\nkv_shared_layers: 18\ngemma_norms: true\ngelu: true\nembed_scale: true\ntied_head: true\n"},
    {"gemma-4-26b-a4b", "Google Gemma 4 26B-A4B's language model: 30 layers, hidden 2816, 16 heads of 256 (8 KV heads) on 25 local (1024) layers, of 512 (2 KV heads, values their keys) on 5 global; each layer a GeGLU 2112 beside 128 experts of GeGLU 704, top-8; vocab 262144, seq 262144",
     "family: llama\nlayers: 30\nhidden: 2816\nheads: 16\nkv_heads: 8\nhead_dim: 256\nintermediate: 2112\nvocab: 262144\nseq_len: 262144\n"
     "experts: 128\ntop_k: 8\nexpert_intermediate: 704\nshared_intermediate: 2112\nrouter_bias: true\nmoe_branch_norms: true\n"
     "qk_norm: true\nv_norm: true\nsliding_window: 1024\nglobal_every: 6\nglobal_head_dim: 512\nglobal_kv_heads: 2\nk_eq_v: true\nfinal_softcap: 30\n"
     "gemma_norms: true\ngelu: true\nembed_scale: true\ntied_head: true\n"},
    {"mixtral-8x7b", "Mixtral 8x7B (mistralai/Mixtral-8x7B-v0.1): 32 layers, hidden 4096, 32 heads, 8 KV heads, 8 experts of SwiGLU 14336, top-2, vocab 32000, seq 32768",
     "family: llama\nlayers: 32\nhidden: 4096\nheads: 32\nkv_heads: 8\nintermediate: 14336\nvocab: 32000\nseq_len: 32768\nexperts: 8\ntop_k: 2\n"},
    {"mixtral-8x22b", "Mixtral 8x22B (mistralai/Mixtral-8x22B-v0.1): 56 layers, hidden 6144, 48 heads, 8 KV heads, 8 experts of SwiGLU 16384, top-2, vocab 32000, seq 65536",
     "family: llama\nlayers: 56\nhidden: 6144\nheads: 48\nkv_heads: 8\nintermediate: 16384\nvocab: 32000\nseq_len: 65536\nexperts: 8\ntop_k: 2\n"},
    {"qwen3-30b-a3b", "Qwen3 30B-A3B: 48 layers, hidden 2048, 32 heads of 128, 4 KV heads, q/k norms, 128 experts of SwiGLU 768, top-8, vocab 151936, seq 40960",
     "family: llama\nlayers: 48\nhidden: 2048\nheads: 32\nkv_heads: 4\nhead_dim: 128\nintermediate: 6144\nvocab: 151936\nseq_len: 40960\nqk_norm: true\n"
     "experts: 128\ntop_k: 8\nexpert_intermediate: 768\n"},
    {"qwen3-235b-a22b", "Qwen3 235B-A22B: 94 layers, hidden 4096, 64 heads of 128, 4 KV heads, q/k norms, 128 experts of SwiGLU 1536, top-8, vocab 151936, seq 40960",
     "family: llama\nlayers: 94\nhidden: 4096\nheads: 64\nkv_heads: 4\nhead_dim: 128\nintermediate: 12288\nvocab: 151936\nseq_len: 40960\nqk_norm: true\n"
     "experts: 128\ntop_k: 8\nexpert_intermediate: 1536\n"},
    {"deepseek-v3", "DeepSeek-V3 671B: 61 layers (3 dense), hidden 7168, 128 heads of latent attention, 256 routed experts of SwiGLU 2048 + 1 shared, top-8, vocab 129280, seq 163840",
     "family: llama\nlayers: 61\nhidden: 7168\nheads: 128\nkv_heads: 128\nintermediate: 18432\nvocab: 129280\nseq_len: 163840\n"
     "experts: 256\ntop_k: 8\nexpert_intermediate: 2048\nshared_intermediate: 2048\nfirst_dense: 3\nroute_nodes: 4\n"
     "q_lora_rank: 1536\nkv_lora_rank: 512\nqk_nope_dim: 128\nqk_rope_dim: 64\nv_head_dim: 128\n"},
    // Note [DeepSeek Sparse Attention] (llama.cpp): deepseek-ai/DeepSeek-V3.2's
    // config.json (DeepSeek-V3's shape and the indexer's keys), and
    // GlmMoeDsaConfig's defaults, zai-org/GLM-5's shape.
    {"deepseek-v3.2", "DeepSeek-V3.2 671B: DeepSeek-V3's layers with DeepSeek Sparse Attention (a 64-head indexer of 128 picks 2048 keys a query), seq 163840",
     "family: llama\nlayers: 61\nhidden: 7168\nheads: 128\nkv_heads: 128\nintermediate: 18432\nvocab: 129280\nseq_len: 163840\n"
     "experts: 256\ntop_k: 8\nexpert_intermediate: 2048\nshared_intermediate: 2048\nfirst_dense: 3\nroute_nodes: 4\n"
     "q_lora_rank: 1536\nkv_lora_rank: 512\nqk_nope_dim: 128\nqk_rope_dim: 64\nv_head_dim: 128\n"
     "index_topk: 2048\nindex_heads: 64\nindex_head_dim: 128\n"},
    {"glm-5", "Zhipu GLM-5 744B: 78 layers (3 dense), hidden 6144, 64 heads of latent attention (query 192 + 64, value 256) with DeepSeek Sparse Attention (a 32-head indexer picks 2048 keys), 256 routed experts of SwiGLU 2048 + 1 shared, top-8, vocab 154880, seq 202752",
     "family: llama\nlayers: 78\nhidden: 6144\nheads: 64\nkv_heads: 64\nintermediate: 12288\nvocab: 154880\nseq_len: 202752\n"
     "experts: 256\ntop_k: 8\nexpert_intermediate: 2048\nshared_intermediate: 2048\nfirst_dense: 3\n"
     "q_lora_rank: 2048\nkv_lora_rank: 512\nqk_nope_dim: 192\nqk_rope_dim: 64\nv_head_dim: 256\n"
     "index_topk: 2048\nindex_heads: 32\nindex_head_dim: 128\n"},
    // Note [DeepSeek-V2] (llama.cpp): deepseek-ai/DeepSeek-V2-Lite's and
    // DeepSeek-V2's config.json (torchtitan's deepseek_v3 flavors 16B and 236B).
    {"deepseek-v2-lite", "DeepSeek-V2-Lite 15.7B: 27 layers (1 dense), hidden 2048, 16 heads of latent attention (no q compression), 64 routed experts of SwiGLU 1408 + 2 shared, top-6, vocab 102400, seq 163840",
     "family: llama\nlayers: 27\nhidden: 2048\nheads: 16\nkv_heads: 16\nintermediate: 10944\nvocab: 102400\nseq_len: 163840\n"
     "experts: 64\ntop_k: 6\nexpert_intermediate: 1408\nshared_intermediate: 2816\nfirst_dense: 1\n"
     "q_lora_rank: 0\nkv_lora_rank: 512\nqk_nope_dim: 128\nqk_rope_dim: 64\nv_head_dim: 128\n"},
    {"deepseek-v2", "DeepSeek-V2 236B: 60 layers (1 dense), hidden 5120, 128 heads of latent attention, 160 routed experts of SwiGLU 1536 + 2 shared, top-6 from 3 of 8 groups, vocab 102400, seq 163840",
     "family: llama\nlayers: 60\nhidden: 5120\nheads: 128\nkv_heads: 128\nintermediate: 12288\nvocab: 102400\nseq_len: 163840\n"
     "experts: 160\ntop_k: 6\nexpert_intermediate: 1536\nshared_intermediate: 3072\nfirst_dense: 1\nroute_nodes: 3\n"
     "q_lora_rank: 1536\nkv_lora_rank: 512\nqk_nope_dim: 128\nqk_rope_dim: 64\nv_head_dim: 128\n"},
    // Note [gpt-oss] (llama.cpp): openai/gpt-oss-20b's and gpt-oss-120b's config.json.
    {"gpt-oss-20b", "OpenAI gpt-oss-20b: 24 layers, hidden 2880, 64 heads of 64, 8 KV heads, attention sinks, 32 experts of clamped SwiGLU 2880, top-4, biases, window 128 and global attention alternating, vocab 201088, seq 131072",
     "family: llama\nlayers: 24\nhidden: 2880\nheads: 64\nkv_heads: 8\nhead_dim: 64\nintermediate: 2880\nvocab: 201088\nseq_len: 131072\n"
     "experts: 32\ntop_k: 4\nqkv_bias: true\no_bias: true\nmlp_bias: true\nrouter_bias: true\nsliding_window: 128\nglobal_every: 2\n"
     "attention_sinks: true\nswiglu_limit: 7\nfp32_norm_weight: true\n"},
    {"gpt-oss-120b", "OpenAI gpt-oss-120b: 36 layers, hidden 2880, 64 heads of 64, 8 KV heads, attention sinks, 128 experts of clamped SwiGLU 2880, top-4, biases, window 128 and global attention alternating, vocab 201088, seq 131072",
     "family: llama\nlayers: 36\nhidden: 2880\nheads: 64\nkv_heads: 8\nhead_dim: 64\nintermediate: 2880\nvocab: 201088\nseq_len: 131072\n"
     "experts: 128\ntop_k: 4\nqkv_bias: true\no_bias: true\nmlp_bias: true\nrouter_bias: true\nsliding_window: 128\nglobal_every: 2\n"
     "attention_sinks: true\nswiglu_limit: 7\nfp32_norm_weight: true\n"},
    // Note [MiniMax-M2] (llama.cpp): MiniMaxAI/MiniMax-M2's config.json as
    // MiniMaxM2Config reads it.
    {"minimax-m2", "MiniMax-M2: 62 layers, hidden 3072, 48 heads of 128, 8 KV heads, q/k norms over all heads, 256 experts of SwiGLU 1536, top-8, vocab 200064, seq 196608",
     "family: llama\nlayers: 62\nhidden: 3072\nheads: 48\nkv_heads: 8\nhead_dim: 128\nintermediate: 1536\nvocab: 200064\nseq_len: 196608\n"
     "qk_norm: true\nwhole_qk_norm: true\nexperts: 256\ntop_k: 8\nexpert_intermediate: 1536\n"},
    // Note [GLM-4.5] (llama.cpp): zai-org/GLM-4.5-Air's and GLM-4.5's
    // config.json (GLM-4.6 and GLM-4.7 have GLM-4.5's shape).
    {"glm-4.5-air", "Zhipu GLM-4.5-Air: 46 layers (1 dense), hidden 4096, 96 heads of 128, 8 KV heads, q/k/v biases, 128 experts of SwiGLU 1408 + 1 shared, top-8, vocab 151552, seq 131072",
     "family: llama\nlayers: 46\nhidden: 4096\nheads: 96\nkv_heads: 8\nhead_dim: 128\nintermediate: 10944\nvocab: 151552\nseq_len: 131072\n"
     "qkv_bias: true\nexperts: 128\ntop_k: 8\nexpert_intermediate: 1408\nshared_intermediate: 1408\nfirst_dense: 1\n"},
    {"glm-4.5", "Zhipu GLM-4.5 (and 4.6, 4.7): 92 layers (3 dense), hidden 5120, 96 heads of 128, 8 KV heads, q/k/v biases, q/k norms, 160 experts of SwiGLU 1536 + 1 shared, top-8, vocab 151552, seq 131072",
     "family: llama\nlayers: 92\nhidden: 5120\nheads: 96\nkv_heads: 8\nhead_dim: 128\nintermediate: 12288\nvocab: 151552\nseq_len: 131072\n"
     "qkv_bias: true\nqk_norm: true\nexperts: 160\ntop_k: 8\nexpert_intermediate: 1536\nshared_intermediate: 1536\nfirst_dense: 3\n"},
    // Note [Gated DeltaNet] (llama.cpp): Qwen/Qwen3-Next-80B-A3B-Instruct's
    // config.json, and Qwen/Qwen3.5-35B-A3B's language model (its
    // text_config; THUDM/slime's scripts/models/qwen3.5-35B-A3B.sh gives the
    // same shape as Megatron arguments).
    {"qwen3-next-80b-a3b", "Qwen3-Next-80B-A3B: 48 layers (36 Gated DeltaNet, every 4th attention), hidden 2048, 16 heads of 256, 2 KV heads, gated output, 512 experts of SwiGLU 512 + 1 gated shared, top-10, vocab 151936, seq 262144",
     "family: llama\nlayers: 48\nhidden: 2048\nheads: 16\nkv_heads: 2\nhead_dim: 256\nintermediate: 5120\nvocab: 151936\nseq_len: 262144\n"
     "qk_norm: true\nzero_centered_norms: true\nattn_output_gate: true\nfull_attention_interval: 4\n"
     "linear_key_heads: 16\nlinear_value_heads: 32\nlinear_key_dim: 128\nlinear_value_dim: 128\nlinear_conv_kernel: 4\n"
     "experts: 512\ntop_k: 10\nexpert_intermediate: 512\nshared_intermediate: 512\nshared_expert_gate: true\n"},
    {"qwen3.5-35b-a3b", "Qwen3.5-35B-A3B's language model: 40 layers (30 Gated DeltaNet, every 4th attention), hidden 2048, 16 heads of 256, 2 KV heads, gated output, 256 experts of SwiGLU 512 + 1 gated shared, top-8, vocab 248320, seq 262144",
     "family: llama\nlayers: 40\nhidden: 2048\nheads: 16\nkv_heads: 2\nhead_dim: 256\nintermediate: 512\nvocab: 248320\nseq_len: 262144\n"
     "qk_norm: true\nzero_centered_norms: true\nattn_output_gate: true\nfull_attention_interval: 4\n"
     "linear_key_heads: 16\nlinear_value_heads: 32\nlinear_key_dim: 128\nlinear_value_dim: 128\nlinear_conv_kernel: 4\n"
     "experts: 256\ntop_k: 8\nexpert_intermediate: 512\nshared_intermediate: 512\nshared_expert_gate: true\n"},
    // Note [Mamba-2] (llama.cpp): the shapes of NVIDIA's Megatron-Bridge
    // providers (nemotron_h_provider.py) and Megatron-LM's launch scripts
    // (examples/post_training/modelopt/conf/nvidia/Nemotron-H-8B-Base-8K.sh,
    // Nemotron-3-Nano's --hybrid-layer-pattern), the hub's vocabulary.
    {"nemotron-h-8b", "NVIDIA Nemotron-H 8B: 52 layers (24 Mamba-2 of 128 heads of 64, state 128, 8 groups; 4 attention, 32 heads of 128, 8 KV heads, no rotary; 24 squared-ReLU MLPs 21504), hidden 4096, vocab 131072, seq 8192",
     "family: llama\nhybrid_pattern: M-M-M-M*-M-M-M-M-M*-M-M-M-M-M*-M-M-M-M-M*-M-M-M-M-M-\nhidden: 4096\nheads: 32\nkv_heads: 8\nhead_dim: 128\n"
     "intermediate: 21504\nvocab: 131072\nseq_len: 8192\nsquared_relu: true\nrotary: false\n"
     "mamba_heads: 128\nmamba_head_dim: 64\nmamba_state: 128\nmamba_groups: 8\n"},
    {"nemotron-h-56b", "NVIDIA Nemotron-H 56B: 118 layers (54 Mamba-2 of 256 heads of 64, state 256, 8 groups; 10 attention, 64 heads of 128, 8 KV heads, no rotary; 54 squared-ReLU MLPs 32768), hidden 8192, vocab 131072, seq 8192",
     "family: llama\nhybrid_pattern: M-M-M-M*-M-M-M-M-M*-M-M-M-M-M*-M-M-M-M-M*-M-M-M-M-M*-M-M-M-M-M*-M-M-M-M-M*-M-M-M-M-M*-M-M-M-M-M*-M-M-M-M-M*-M-M-M-M-M-\n"
     "hidden: 8192\nheads: 64\nkv_heads: 8\nhead_dim: 128\nintermediate: 32768\nvocab: 131072\nseq_len: 8192\nsquared_relu: true\nrotary: false\n"
     "mamba_heads: 256\nmamba_head_dim: 64\nmamba_state: 256\nmamba_groups: 8\n"},
    {"nemotron-nano-9b-v2", "NVIDIA Nemotron Nano 9B v2: 56 layers (27 Mamba-2 of 128 heads of 80, state 128, 8 groups; 4 attention, 40 heads of 128, 8 KV heads, no rotary; 25 squared-ReLU MLPs 15680), hidden 4480, vocab 131072, seq 131072",
     "family: llama\nhybrid_pattern: M-M-M-MM-M-M-M*-M-M-M*-M-M-M-M*-M-M-M-M*-M-MM-M-M-M-M-M-\nhidden: 4480\nheads: 40\nkv_heads: 8\nhead_dim: 128\n"
     "intermediate: 15680\nvocab: 131072\nseq_len: 131072\nsquared_relu: true\nrotary: false\n"
     "mamba_heads: 128\nmamba_head_dim: 80\nmamba_state: 128\nmamba_groups: 8\n"},
    {"nemotron-3-nano-30b-a3b", "NVIDIA Nemotron 3 Nano 30B-A3B: 52 layers (23 Mamba-2 of 64 heads of 64, state 128, 8 groups; 6 attention, 32 heads of 128, 2 KV heads, no rotary; 23 MoE of 128 squared-ReLU experts 1856 + 1 shared 3712, top-6), hidden 2688, vocab 131072, seq 262144",
     "family: llama\nhybrid_pattern: MEMEM*EMEMEM*EMEMEM*EMEMEM*EMEMEM*EMEMEMEM*EMEMEMEME\nhidden: 2688\nheads: 32\nkv_heads: 2\nhead_dim: 128\n"
     "intermediate: 1856\nvocab: 131072\nseq_len: 262144\nsquared_relu: true\nrotary: false\n"
     "mamba_heads: 64\nmamba_head_dim: 64\nmamba_state: 128\nmamba_groups: 8\n"
     "experts: 128\ntop_k: 6\nexpert_intermediate: 1856\nshared_intermediate: 3712\n"},
    // Note [Latent MoE] (llama.cpp): Megatron-LM's launch scripts for the
    // two (examples/post_training/modelopt/conf/nvidia/NVIDIA-Nemotron-3-
    // Super-120B-A12B-BF16.sh and -Ultra-550B-A55B-BF16.sh), Megatron-Core's
    // Mamba defaults (8 groups, state 128) where they name none, the hub's
    // vocabulary; their multi-token prediction layer, which HuggingFace's
    // model skips, as model.mtp_layers.
    {"nemotron-3-super-120b-a12b", "NVIDIA Nemotron 3 Super 120B-A12B: 88 layers (40 Mamba-2 of 128 heads of 64, state 128, 8 groups; 8 attention, 32 heads of 128, 2 KV heads, no rotary; 40 LatentMoE of 512 squared-ReLU experts 2688 on a latent 1024 + 1 shared 5376, top-22), hidden 4096, vocab 131072, seq 262144",
     "family: llama\nhybrid_pattern: MEMEMEM*EMEMEMEM*EMEMEMEM*EMEMEMEMEM*EMEMEMEMEM*EMEMEMEMEM*EMEMEMEMEM*EMEMEMEM*EMEMEMEME\n"
     "hidden: 4096\nheads: 32\nkv_heads: 2\nhead_dim: 128\nintermediate: 2688\nvocab: 131072\nseq_len: 262144\nsquared_relu: true\nrotary: false\n"
     "mamba_heads: 128\nmamba_head_dim: 64\nmamba_state: 128\nmamba_groups: 8\n"
     "experts: 512\ntop_k: 22\nexpert_intermediate: 2688\nshared_intermediate: 5376\nmoe_latent: 1024\n"},
    {"nemotron-3-ultra-550b-a55b", "NVIDIA Nemotron 3 Ultra 550B-A55B: 108 layers (48 Mamba-2 of 256 heads of 64, state 128, 8 groups; 12 attention, 64 heads of 128, 2 KV heads, no rotary; 48 LatentMoE of 512 squared-ReLU experts 5120 on a latent 2048 + 1 shared 10240, top-22), hidden 8192, vocab 131072, seq 262144",
     "family: llama\nhybrid_pattern: MEMEMEM*EMEMEM*EMEMEMEM*EMEMEMEM*EMEMEM*EMEMEMEM*EMEMEMEM*EMEMEM*EMEMEMEM*EMEMEMEM*EMEMEM*EMEMEMEM*EMEMEMEME\n"
     "hidden: 8192\nheads: 64\nkv_heads: 2\nhead_dim: 128\nintermediate: 5120\nvocab: 131072\nseq_len: 262144\nsquared_relu: true\nrotary: false\n"
     "mamba_heads: 256\nmamba_head_dim: 64\nmamba_state: 128\nmamba_groups: 8\n"
     "experts: 512\ntop_k: 22\nexpert_intermediate: 5120\nshared_intermediate: 10240\nmoe_latent: 2048\n"},
    // moonshotai/Kimi-K2-Base's config.json (model_type kimi_k2, DeepSeek-V3's
    // architecture: DeepseekV3ForCausalLM): 64 heads, 384 experts, 1 dense layer.
    {"kimi-k2", "Moonshot Kimi K2 1T: 61 layers (1 dense), hidden 7168, 64 heads of latent attention, 384 routed experts of SwiGLU 2048 + 1 shared, top-8, vocab 163840, seq 131072",
     "family: llama\nlayers: 61\nhidden: 7168\nheads: 64\nkv_heads: 64\nintermediate: 18432\nvocab: 163840\nseq_len: 131072\n"
     "experts: 384\ntop_k: 8\nexpert_intermediate: 2048\nshared_intermediate: 2048\nfirst_dense: 1\n"
     "q_lora_rank: 1536\nkv_lora_rank: 512\nqk_nope_dim: 128\nqk_rope_dim: 64\nv_head_dim: 128\n"},
    // Note [Kimi K3] (llama.cpp): moonshotai/Kimi-K3's text_config as
    // Megatron-Bridge's tests give it (tests/unit_tests/models/kimi/
    // test_kimi_k3_bridge.py) and its 93 layers as create_hf_toy_model.py
    // describes them: latent attention on every 4th and the last (24), Kimi
    // Delta Attention on the other 69.
    {"kimi-k3", "Moonshot Kimi K3 2.8T-A105B: 93 layers (69 Kimi Delta Attention of 96 heads of 128, 24 NoPE latent attention of 96 heads with an output gate; 1 dense SiTU MLP 33792, 92 latent MoE of 896 SiTU experts 3072 on a latent 3584 + 2 shared, top-16), Block Attention Residuals every 12 layers, hidden 7168, vocab 163840, seq 1048576",
     "family: llama\nlayers: 93\nhidden: 7168\nheads: 96\nkv_heads: 96\nintermediate: 33792\nvocab: 163840\nseq_len: 1048576\n"
     "experts: 896\ntop_k: 16\nexpert_intermediate: 3072\nshared_intermediate: 6144\nfirst_dense: 1\nmoe_latent: 3584\nlatent_norm: true\n"
     "q_lora_rank: 1536\nkv_lora_rank: 512\nqk_nope_dim: 128\nqk_rope_dim: 64\nv_head_dim: 128\nrotary: false\nattn_output_gate: true\n"
     "layer_mixers: LLL*LLL*LLL*LLL*LLL*LLL*LLL*LLL*LLL*LLL*LLL*LLL*LLL*LLL*LLL*LLL*LLL*LLL*LLL*LLL*LLL*LLL*LLL**\n"
     "kda: true\nlinear_key_heads: 96\nlinear_value_heads: 96\nlinear_key_dim: 128\nlinear_value_dim: 128\nlinear_conv_kernel: 4\n"
     "situ: true\nattn_res_block: 12\n"},
    // Note [DeepSeek-V4] (llama.cpp): deepseek-ai/DeepSeek-V4-Flash's
    // config.json (model_type deepseek_v4, revision 60d8d70, the one
    // Megatron-Bridge's verification card names); its multi-token
    // prediction layer, which HuggingFace's model skips, as model.mtp_layers.
    {"deepseek-v4-flash", "DeepSeek-V4-Flash 284B-A13B: 43 layers (2 window-only, 21 compressed sparse of ratio 4 picking 512 entries, 20 heavily compressed of ratio 128), hidden 4096, 64 heads of 512 on one shared key-value head, window 128, 256 routed experts of SwiGLU 2048 + 1 shared, top-6, 4 hyper-connection streams, vocab 129280, seq 1048576",
     "family: llama\nlayers: 43\nhidden: 4096\nheads: 64\nkv_heads: 1\nhead_dim: 512\nintermediate: 2048\nvocab: 129280\nseq_len: 1048576\n"
     "experts: 256\ntop_k: 6\nexpert_intermediate: 2048\nshared_intermediate: 2048\n"
     "q_lora_rank: 1024\nqk_rope_dim: 64\no_groups: 8\no_lora_rank: 1024\nsliding_window: 128\n"
     "compress_ratios: [0, 0, 4, 128, 4, 128, 4, 128, 4, 128, 4, 128, 4, 128, 4, 128, 4, 128, 4, 128, 4, 128, 4, 128, 4, 128, 4, 128, 4, 128, 4, 128, 4, 128, 4, 128, 4, 128, 4, 128, 4, 128, 4]\nindex_topk: 512\nindex_heads: 64\nindex_head_dim: 128\nhc_mult: 4\n"},
    // deepseek-ai/DeepSeek-V4-Pro's config.json as public copies of it give
    // it (61 layers, no window-only one: 31 of ratio 128, 30 of ratio 4
    // picking 1,024; 16 output groups; 384 experts of 3,072), the MTP
    // depth's ratio (0) last.
    {"deepseek-v4-pro", "DeepSeek-V4-Pro 1.6T-A49B: 61 layers (31 heavily compressed of ratio 128, 30 compressed sparse of ratio 4 picking 1024 entries), hidden 7168, 128 heads of 512 on one shared key-value head, window 128, 384 routed experts of SwiGLU 3072 + 1 shared, top-6, 4 hyper-connection streams, vocab 129280, seq 1048576",
     "family: llama\nlayers: 61\nhidden: 7168\nheads: 128\nkv_heads: 1\nhead_dim: 512\nintermediate: 3072\nvocab: 129280\nseq_len: 1048576\n"
     "experts: 384\ntop_k: 6\nexpert_intermediate: 3072\nshared_intermediate: 3072\n"
     "q_lora_rank: 1536\nqk_rope_dim: 64\no_groups: 16\no_lora_rank: 1024\nsliding_window: 128\n"
     "compress_ratios: [128, 128, 4, 128, 4, 128, 4, 128, 4, 128, 4, 128, 4, 128, 4, 128, 4, 128, 4, 128, 4, 128, 4, 128, 4, 128, 4, 128, 4, 128, 4, 128, 4, 128, 4, 128, 4, 128, 4, 128, 4, 128, 4, 128, 4, 128, 4, 128, 4, 128, 4, 128, 4, 128, 4, 128, 4, 128, 4, 128, 4, 0]\nindex_topk: 1024\nindex_heads: 64\nindex_head_dim: 128\nhc_mult: 4\n"},
    // Note [Llama 4] (llama.cpp): the text_config of meta-llama/Llama-4-Scout-17B-16E's
    // and Llama-4-Maverick-17B-128E's config.json (their language models).
    {"llama-4-scout", "Meta Llama 4 Scout 17B-16E (language model): 48 layers, hidden 5120, 40 heads of 128, 8 KV heads, 16 experts of SwiGLU 8192 + 1 shared, top-1, chunked attention (8192) with a NoPE global layer every 4th, L2 q/k norms, vocab 202048, seq 262144",
     "family: llama\nlayers: 48\nhidden: 5120\nheads: 40\nkv_heads: 8\nhead_dim: 128\nintermediate: 16384\nvocab: 202048\nseq_len: 262144\n"
     "experts: 16\ntop_k: 1\nexpert_intermediate: 8192\nshared_intermediate: 8192\n"
     "attention_chunk: 8192\nglobal_every: 4\nnope_global: true\nattn_temperature: true\nl2_qk_norm: true\n"},
    {"llama-4-maverick", "Meta Llama 4 Maverick 17B-128E (language model): 48 layers (24 dense of SwiGLU 16384), hidden 5120, 40 heads of 128, 8 KV heads, 128 experts of SwiGLU 8192 + 1 shared on every other layer, top-1, chunked attention (8192) with a NoPE global layer every 4th, vocab 202048, seq 1048576",
     "family: llama\nlayers: 48\nhidden: 5120\nheads: 40\nkv_heads: 8\nhead_dim: 128\nintermediate: 16384\nvocab: 202048\nseq_len: 1048576\n"
     "experts: 128\ntop_k: 1\nexpert_intermediate: 8192\nshared_intermediate: 8192\nmoe_step: 2\n"
     "attention_chunk: 8192\nglobal_every: 4\nnope_global: true\nattn_temperature: true\n"},
    {"gpt2-tiny", "Tiny GPT-2 for CPU validation: 2 layers, hidden 128, 4 heads, vocab 1024, seq 128",
     "family: gpt2\nlayers: 2\nhidden: 128\nheads: 4\nvocab: 1024\nseq_len: 128\n"},
    {"bert-tiny", "BERT-tiny (google/bert_uncased_L-2_H-128_A-2): 2 layers, hidden 128, 2 heads",
     "family: bert\nlayers: 2\nhidden: 128\nheads: 2\nintermediate: 512\n"},
    {"llama-tiny", "Tiny Llama for CPU validation: 2 layers, hidden 128, 4 heads, 2 KV heads, SwiGLU 352, vocab 1024, seq 128",
     "family: llama\nlayers: 2\nhidden: 128\nheads: 4\nkv_heads: 2\nintermediate: 352\nvocab: 1024\nseq_len: 128\n"},
    {"gemma-tiny", "Tiny Gemma 3 for CPU validation: 2 layers (a local one of window 64, then a global one), hidden 128, 4 heads of 32, 2 KV heads, q/k norms, GeGLU 352, vocab 1024, tied, seq 128",
     "family: llama\nlayers: 2\nhidden: 128\nheads: 4\nkv_heads: 2\nhead_dim: 32\nintermediate: 352\nvocab: 1024\nseq_len: 128\n"
     "qk_norm: true\nsliding_window: 64\nglobal_every: 2\ngemma_norms: true\ngelu: true\nembed_scale: true\ntied_head: true\n"},
    {"moe-tiny", "Tiny mixture of experts for CPU validation: 2 layers, hidden 128, 4 heads, 2 KV heads, 4 experts of SwiGLU 176, top-2, vocab 1024, seq 128",
     "family: llama\nlayers: 2\nhidden: 128\nheads: 4\nkv_heads: 2\nintermediate: 352\nvocab: 1024\nseq_len: 128\nexperts: 4\ntop_k: 2\nexpert_intermediate: 176\n"},
    // Note [Multi-head latent attention] (llama.cpp): DeepSeek-V3's layers at
    // moe-tiny's size, for dtsim validate and calibration on CPUs.
    {"deepseek-tiny", "Tiny DeepSeek for CPU validation: 2 layers (1 dense), hidden 128, 4 heads of latent attention (query latent 64, key-value latent 32, heads 32 + 16 rotary, values 32), 4 experts of SwiGLU 176 + 1 shared, top-2, vocab 1024, seq 128",
     "family: llama\nlayers: 2\nhidden: 128\nheads: 4\nkv_heads: 4\nintermediate: 352\nvocab: 1024\nseq_len: 128\n"
     "experts: 4\ntop_k: 2\nexpert_intermediate: 176\nshared_intermediate: 176\nfirst_dense: 1\n"
     "q_lora_rank: 64\nkv_lora_rank: 32\nqk_nope_dim: 32\nqk_rope_dim: 16\nv_head_dim: 32\n"},
    // Note [DeepSeek-V4] (llama.cpp): DeepSeek-V4-Flash's layers small, one
    // of each ratio, for dtsim validate and calibration on CPUs.
    {"deepseek-v4-tiny", "Tiny DeepSeek-V4 for CPU validation: 3 layers (window-only, compressed sparse of ratio 4 picking 2 entries, heavily compressed of ratio 128), hidden 128, 4 heads of 32 on one shared key-value head, window 4, 4 experts of SwiGLU 64 + 1 shared, top-2, 4 hyper-connection streams, vocab 1024, seq 128",
     "family: llama\nlayers: 3\nhidden: 128\nheads: 4\nkv_heads: 1\nhead_dim: 32\nintermediate: 64\nvocab: 1024\nseq_len: 128\n"
     "experts: 4\ntop_k: 2\nexpert_intermediate: 64\nshared_intermediate: 64\n"
     "q_lora_rank: 32\nqk_rope_dim: 8\no_groups: 2\no_lora_rank: 16\nsliding_window: 4\n"
     "compress_ratios: [0, 4, 128]\nindex_topk: 2\nindex_heads: 2\nindex_head_dim: 16\nhc_mult: 4\n"},
    // Note [DeepSeek Sparse Attention] (llama.cpp): deepseek-tiny's layers
    // with an indexer of 2 heads of 16 choosing 32 of the 128 keys.
    {"deepseek-v3.2-tiny", "Tiny DeepSeek-V3.2 for CPU validation: deepseek-tiny's layers with DeepSeek Sparse Attention (an indexer of 2 heads of 16 picks 32 keys a query), seq 128",
     "family: llama\nlayers: 2\nhidden: 128\nheads: 4\nkv_heads: 4\nintermediate: 352\nvocab: 1024\nseq_len: 128\n"
     "experts: 4\ntop_k: 2\nexpert_intermediate: 176\nshared_intermediate: 176\nfirst_dense: 1\n"
     "q_lora_rank: 64\nkv_lora_rank: 32\nqk_nope_dim: 32\nqk_rope_dim: 16\nv_head_dim: 32\n"
     "index_topk: 32\nindex_heads: 2\nindex_head_dim: 16\n"},
    {"gpt-oss-tiny", "Tiny gpt-oss for CPU validation: 2 layers (a sliding one of window 64, then a global one), hidden 128, 4 heads of 32, 2 KV heads, attention sinks, 4 experts of clamped SwiGLU 176, top-2, biases, vocab 1024, seq 128",
     "family: llama\nlayers: 2\nhidden: 128\nheads: 4\nkv_heads: 2\nhead_dim: 32\nintermediate: 176\nvocab: 1024\nseq_len: 128\n"
     "experts: 4\ntop_k: 2\nqkv_bias: true\no_bias: true\nmlp_bias: true\nrouter_bias: true\nsliding_window: 64\nglobal_every: 2\n"
     "attention_sinks: true\nswiglu_limit: 7\nfp32_norm_weight: true\n"},
    {"llama4-tiny", "Tiny Llama 4 for CPU validation: 4 layers (three of chunked attention of 64 with L2 q/k norms, then a NoPE global one), hidden 128, 4 heads of 32, 2 KV heads, 4 experts of SwiGLU 176 + 1 shared on every other layer (dense SwiGLU 352 between), top-1, vocab 1024, seq 128",
     "family: llama\nlayers: 4\nhidden: 128\nheads: 4\nkv_heads: 2\nhead_dim: 32\nintermediate: 352\nvocab: 1024\nseq_len: 128\n"
     "experts: 4\ntop_k: 1\nexpert_intermediate: 176\nshared_intermediate: 176\nmoe_step: 2\n"
     "attention_chunk: 64\nglobal_every: 4\nnope_global: true\nattn_temperature: true\nl2_qk_norm: true\n"},
    // Note [Gated DeltaNet] (llama.cpp): Qwen3-Next's blocks at llama-tiny's scale.
    {"qwen3-next-tiny", "Tiny Qwen3-Next for CPU validation: 4 layers (three Gated DeltaNet of 2 key and 4 value heads of 32, then gated attention), hidden 128, 4 heads of 32, 2 KV heads, q/k norms, 4 experts of SwiGLU 176 + 1 gated shared, top-2, vocab 1024, seq 128",
     "family: llama\nlayers: 4\nhidden: 128\nheads: 4\nkv_heads: 2\nhead_dim: 32\nintermediate: 176\nvocab: 1024\nseq_len: 128\n"
     "qk_norm: true\nzero_centered_norms: true\nattn_output_gate: true\nfull_attention_interval: 4\n"
     "linear_key_heads: 2\nlinear_value_heads: 4\nlinear_key_dim: 32\nlinear_value_dim: 32\nlinear_conv_kernel: 4\n"
     "experts: 4\ntop_k: 2\nexpert_intermediate: 176\nshared_intermediate: 176\nshared_expert_gate: true\n"},
    // Note [Mamba-2] (llama.cpp): Nemotron-H's four layer kinds at llama-tiny's scale.
    {"nemotron-h-tiny", "Tiny Nemotron-H for CPU validation: 6 layers (two Mamba-2 of 8 heads of 32, state 16, 2 groups, chunks of 32; attention of 4 heads of 32, 2 KV heads, no rotary; a squared-ReLU MLP 352; a MoE of 4 experts 176 + 1 shared, top-2), hidden 128, vocab 1024, seq 128",
     "family: llama\nhybrid_pattern: M-*ME-\nhidden: 128\nheads: 4\nkv_heads: 2\nhead_dim: 32\nintermediate: 352\nvocab: 1024\nseq_len: 128\n"
     "squared_relu: true\nrotary: false\nmamba_heads: 8\nmamba_head_dim: 32\nmamba_state: 16\nmamba_groups: 2\nmamba_chunk: 32\n"
     "experts: 4\ntop_k: 2\nexpert_intermediate: 176\nshared_intermediate: 176\n"},
    // Seed 003's six models (the report states no shapes: the textbook ones,
    // examples/README.md says which). vgg11 is torchvision's vgg11 (132,863,336
    // parameters at 1000 classes); cnn is PyTorch's CIFAR-10 tutorial network;
    // mlp PyTorch's quickstart network on 28 x 28 images; conv-autoencoder
    // the MNIST convolutional autoencoder of the common tutorials; nbow and
    // seq2seq bentrevett's pytorch-sentiment-analysis NBoW on IMDb (vocabulary
    // 21,635 at min_freq 5, 300-wide embeddings) and pytorch-seq2seq's first
    // model on Multi30k (7,853 German and 5,893 English tokens, 13,898,501
    // parameters).
    {"vgg11", "VGG11 (torchvision configuration A): 8 convolutions, 3 linear layers, 224 x 224 RGB, 1000 classes",
     "family: vgg\nconfig: A\nimage_size: 224\nclasses: 1000\n"},
    {"vgg11-bn", "VGG11 with batch norm (torchvision vgg11_bn), 224 x 224 RGB, 1000 classes",
     "family: vgg\nconfig: A\nbatch_norm: true\nimage_size: 224\nclasses: 1000\n"},
    {"cnn", "PyTorch's CIFAR-10 tutorial CNN: two 5 x 5 convolutions with max pooling, linear 400-120-84-10, 32 x 32 RGB",
     "family: cnn\n"},
    {"mlp", "Multilayer perceptron (PyTorch's quickstart network): 28 x 28 images, 784-512-512-10",
     "family: mlp\nimage_size: 28\nchannels: 1\nhidden: [512, 512]\n"},
    {"conv-autoencoder", "Convolutional autoencoder on 28 x 28 images: stride-2 convolutions 1-16-32, a 7 x 7 one to 64, transposed back, MSE",
     "family: conv-autoencoder\nimage_size: 28\nchannels: 1\nconv_channels: [16, 32]\nlatent: 64\n"},
    {"nbow", "Neural bag of words: EmbeddingBag (mean) of 21,635 x 300, linear to 2 classes, 256 tokens a text",
     "family: nbow\n"},
    {"seq2seq", "LSTM encoder-decoder (Sutskever et al. 2014; model.cell=gru: GRUs): embeddings 256, 2 layers of 512, vocabularies 7,853 and 5,893, 32 tokens",
     "family: seq2seq\n"},
    {"vgg11-tiny", "Tiny VGG11 for CPU validation: width 8, classifier 128, 32 x 32 RGB, 10 classes",
     "family: vgg\nconfig: A\nwidth: 8\nfc: 128\nimage_size: 32\nclasses: 10\n"},
    {"nbow-tiny", "Tiny NBoW for CPU validation: vocabulary 1024, embeddings 64, 2 classes, 64 tokens",
     "family: nbow\nvocab: 1024\nembed: 64\nseq_len: 64\n"},
    {"seq2seq-tiny", "Tiny LSTM encoder-decoder for CPU validation: vocabularies 256, embeddings 32, 2 layers of 64, 16 tokens",
     "family: seq2seq\nsrc_vocab: 256\ntgt_vocab: 256\nembed: 32\nhidden: 64\nseq_len: 16\n"},
    {"bilstm-tiny", "Tiny Bi-LSTM for CPU validation: input 64, hidden 64, 2 layers, 33 classes, seq 32",
     "family: bilstm\ninput_size: 64\nhidden: 64\nlayers: 2\nclasses: 33\nseq_len: 32\n"},
};

const Builtin* find_builtin(const std::string& name) {
  for (const auto& b : kBuiltins) {
    if (name == b.name) return &b;
  }
  return nullptr;
}

std::string divisors_of(std::int64_t n) {
  std::string out;
  int count = 0;
  for (std::int64_t d = 1; d <= n && count < 12; ++d) {
    if (n % d == 0) {
      out += (out.empty() ? "" : ", ") + std::to_string(d);
      ++count;
    }
  }
  return out;
}

// Limits that keep every byte count in 64 bits (checked again per layer).
constexpr std::int64_t kBig = std::int64_t{1} << 24;

/// Note [Model size bound]: no model dtsim describes has more parameters than
/// this (1e15: a thousand times today's largest); bytes of parameters,
/// gradients and optimizer state then stay far inside 64 bits. Each layer's
/// sizes are bounded where it is built (check_size in layers.cpp).
constexpr double kMaxParameters = 1e15;

/// Refuses a model whose parameters, estimated in floating point before any
/// 64-bit count is made, pass kMaxParameters; blames `key`.
void check_parameters(const sim::ConfigMap& c, const char* key, double parameters) {
  if (parameters > kMaxParameters) {
    char text[64];
    std::snprintf(text, sizeof text, "%.3g", parameters);
    c.fail(key, std::string("with the other sizes gives ") + text +
                    " parameters, more than dtsim models (limit 1e15); use fewer layers or a smaller width");
  }
}

void check_heads(const sim::ConfigMap& c, std::int64_t hidden, std::int64_t heads) {
  if (hidden % heads != 0) {
    c.fail("heads", std::to_string(heads) + " does not divide hidden " + std::to_string(hidden) +
                        "; valid: a divisor such as " + divisors_of(hidden));
  }
}

sim::ModelPtr parse_gpt(const sim::ConfigMap& c, const std::string& name) {
  GptConfig g;
  g.name = name;
  g.layers = static_cast<int>(c.get_int("layers", 12, 1, 10000));
  g.hidden = c.get_int("hidden", 768, 1, kBig);
  g.heads = c.get_int("heads", 12, 1, kBig);
  g.ffn_hidden = c.get_int("ffn_hidden", 4 * g.hidden, 1, kBig);
  g.vocab = c.get_int("vocab", 50257, 1, kBig);
  g.seq_len = c.get_int("seq_len", 1024, 1, kBig);
  g.tied_head = c.get_bool("tied_head", true);
  g.dropout = c.get_bool("dropout", true);
  check_heads(c, g.hidden, g.heads);
  const double h = static_cast<double>(g.hidden);
  check_parameters(c, "layers", g.layers * (4 * h * h + 2 * h * static_cast<double>(g.ffn_hidden)) +
                                    (static_cast<double>(g.vocab) + static_cast<double>(g.seq_len)) * h);
  c.finish({"name", "family", "description"});
  return make_gpt(g);
}

sim::ModelPtr parse_bert(const sim::ConfigMap& c, const std::string& name) {
  BertConfig b;
  b.name = name;
  b.layers = static_cast<int>(c.get_int("layers", 12, 1, 10000));
  b.hidden = c.get_int("hidden", 768, 1, kBig);
  b.heads = c.get_int("heads", 12, 1, kBig);
  b.intermediate = c.get_int("intermediate", 4 * b.hidden, 1, kBig);
  b.vocab = c.get_int("vocab", 30522, 1, kBig);
  b.max_positions = c.get_int("max_positions", 512, 1, kBig);
  b.type_vocab = c.get_int("type_vocab", 2, 0, kBig);
  b.pooler = c.get_bool("pooler", true);
  b.num_labels = c.get_int("num_labels", 0, 0, kBig);
  b.dropout = c.get_bool("dropout", true);
  b.mlm_head = c.get_bool("mlm_head", false);
  if (b.mlm_head && c.has("pooler") && b.pooler) c.fail("pooler", "true contradicts mlm_head: true (BertForMaskedLM has no pooler); set only one");
  if (b.mlm_head) b.pooler = false;
  check_heads(c, b.hidden, b.heads);
  const double h = static_cast<double>(b.hidden);
  check_parameters(c, "layers", b.layers * (4 * h * h + 2 * h * static_cast<double>(b.intermediate)) +
                                    (static_cast<double>(b.vocab) + static_cast<double>(b.max_positions) +
                                     static_cast<double>(b.type_vocab) + h + static_cast<double>(b.num_labels)) * h);
  c.finish({"name", "family", "description"});
  return make_bert(b);
}

void check_kv_heads(const sim::ConfigMap& c, const char* key, std::int64_t heads, std::int64_t kv_heads) {
  if (heads % kv_heads != 0) {
    c.fail(key, std::to_string(kv_heads) + " does not divide the " + std::to_string(heads) +
                    " attention heads (each key/value head serves a whole group of query heads); valid: " + divisors_of(heads));
  }
}

sim::ModelPtr parse_llama(const sim::ConfigMap& c, const std::string& name, std::vector<std::string> notes) {
  LlamaConfig l;
  l.name = name;
  l.notes = std::move(notes);
  l.layers = static_cast<int>(c.get_int("layers", 32, 1, 10000));
  l.hidden = c.get_int("hidden", 4096, 1, kBig);
  l.heads = c.get_int("heads", 32, 1, kBig);
  l.kv_heads = c.get_int("kv_heads", l.heads, 1, kBig);
  l.head_dim = c.get_int("head_dim", 0, 1, kBig);
  l.intermediate = c.get_int("intermediate", 11008, 1, kBig);
  l.vocab = c.get_int("vocab", 32000, 1, kBig);
  l.seq_len = c.get_int("seq_len", 4096, 1, kBig);
  l.tied_head = c.get_bool("tied_head", false);
  l.qkv_bias = c.get_bool("qkv_bias", false);
  l.o_bias = c.get_bool("o_bias", false);
  l.mlp_bias = c.get_bool("mlp_bias", false);
  l.qk_norm = c.get_bool("qk_norm", false);
  l.sliding_window = c.get_int("sliding_window", 0, 0, kBig);
  l.attention_dropout = c.get_double("attention_dropout", 0, 0, 0.99);
  // Gemma (Note [Gemma] in llama.cpp).
  l.global_every = static_cast<int>(c.get_int("global_every", 0, 0, 10000));
  l.gemma_norms = c.get_bool("gemma_norms", false);
  l.olmo2_norms = c.get_bool("olmo2_norms", false);
  if (l.olmo2_norms && !l.qk_norm) c.fail("olmo2_norms", "true needs qk_norm: true (OLMo 2 norms q and k over all heads)");
  l.whole_qk_norm = c.get_bool("whole_qk_norm", false);
  if (l.whole_qk_norm && !l.qk_norm) c.fail("whole_qk_norm", "true needs qk_norm: true (the norms it spans over all heads)");
  if (l.olmo2_norms && l.gemma_norms) c.fail("olmo2_norms", "true contradicts gemma_norms: true (OLMo 2's two norms against Gemma's four); set only one");
  l.gelu = c.get_bool("gelu", false);
  l.embed_scale = c.get_bool("embed_scale", false);
  l.attn_softcap = c.get_double("attn_softcap", 0, 0, 1e6);
  l.final_softcap = c.get_double("final_softcap", 0, 0, 1e6);
  // Granite (Note [Granite] in llama.cpp): each present key is an op.
  l.embedding_multiplier = c.get_double("embedding_multiplier", 0, 0, 1e6);
  l.residual_multiplier = c.get_double("residual_multiplier", 0, 0, 1e6);
  l.logits_scaling = c.get_double("logits_scaling", 0, 0, 1e6);
  if (l.embedding_multiplier > 0 && l.embed_scale) {
    c.fail("embedding_multiplier", "contradicts embed_scale: true (Gemma's sqrt(hidden)); set only one");
  }
  for (const auto& [key, value] : {std::pair{"embedding_multiplier", l.embedding_multiplier},
                                    std::pair{"residual_multiplier", l.residual_multiplier}, std::pair{"logits_scaling", l.logits_scaling}}) {
    // The layer signatures carry them in millionths (Note [Granite]).
    if (value > 0 && value < 1e-6) c.fail(key, "below 1e-6; valid: 0 (no such op) or 1e-6 to 1e6");
  }
  if (l.residual_multiplier > 0 && (l.gemma_norms || l.olmo2_norms)) {
    c.fail("residual_multiplier", std::string("is Granite's block and ") + (l.gemma_norms ? "gemma_norms Gemma's" : "olmo2_norms OLMo 2's") +
                                      "; set only one");
  }
  // gpt-oss (Note [gpt-oss] in llama.cpp).
  l.attention_sinks = c.get_bool("attention_sinks", false);
  l.swiglu_limit = c.get_double("swiglu_limit", 0, 0, 1e6);
  l.fp32_norm_weight = c.get_bool("fp32_norm_weight", false);
  // The signatures carry the limit in millionths, as Granite's scalars.
  if (l.swiglu_limit > 0 && l.swiglu_limit < 1e-6) c.fail("swiglu_limit", "below 1e-6; valid: 0 (SiLU's SwiGLU) or 1e-6 to 1e6");
  if (l.swiglu_limit > 0 && l.gelu) c.fail("swiglu_limit", "is gpt-oss's clamped SwiGLU and gelu: true Gemma's GeGLU; set only one");
  if (l.fp32_norm_weight && (l.gemma_norms || l.olmo2_norms)) {
    c.fail("fp32_norm_weight", std::string("is gpt-oss's RMSNorm and ") + (l.gemma_norms ? "gemma_norms Gemma's" : "olmo2_norms OLMo 2's") +
                                   " norms; set only one");
  }
  // Llama 4 (Note [Llama 4] in llama.cpp).
  l.attention_chunk = c.get_int("attention_chunk", 0, 0, kBig);
  l.nope_global = c.get_bool("nope_global", false);
  l.attn_temperature = c.get_bool("attn_temperature", false);
  // Ministral 3 (Note [Ministral 3] in llama.cpp); the signatures carry beta in millionths.
  l.q_scaling_beta = c.get_double("q_scaling_beta", 0, 0, 1e6);
  l.q_scaling_length = c.get_int("q_scaling_length", l.q_scaling_beta > 0 ? 16384 : 0, 0, kBig);
  if (l.q_scaling_beta > 0 && l.q_scaling_beta < 1e-6) c.fail("q_scaling_beta", "below 1e-6; valid: 0 (none) or 1e-6 to 1e6");
  if (l.q_scaling_beta > 0 && l.q_scaling_length == 0) c.fail("q_scaling_length", "0; valid: the positions a step of the scale spans, 1 or more");
  if (l.q_scaling_beta > 0 && l.attn_temperature) {
    c.fail("q_scaling_beta", "is Ministral 3's scaling of every query; it contradicts attn_temperature (Llama 4's, on its NoPE layers); set only one");
  }
  l.l2_qk_norm = c.get_bool("l2_qk_norm", false);
  // Qwen3-Next and Qwen3.5 (Note [Gated DeltaNet] in llama.cpp).
  l.full_attention_interval = static_cast<int>(c.get_int("full_attention_interval", 0, 0, 10000));
  l.linear_key_heads = c.get_int("linear_key_heads", 16, 1, 1 << 20);
  l.linear_value_heads = c.get_int("linear_value_heads", 32, 1, 1 << 20);
  l.linear_key_dim = c.get_int("linear_key_dim", 128, 1, 1 << 20);
  l.linear_value_dim = c.get_int("linear_value_dim", 128, 1, 1 << 20);
  l.linear_conv_kernel = c.get_int("linear_conv_kernel", 4, 1, 1024);
  l.attn_output_gate = c.get_bool("attn_output_gate", false);
  l.zero_centered_norms = c.get_bool("zero_centered_norms", false);
  // Kimi Linear and Kimi K3 (Note [Kimi Delta Attention], Note [Attention residuals] in llama.cpp).
  l.kda = c.get_bool("kda", false);
  l.kda_gate_rank = c.get_int("kda_gate_rank", 0, 0, kBig);
  l.situ = c.get_bool("situ", false);
  l.latent_norm = c.get_bool("latent_norm", false);
  l.attn_res_block = static_cast<int>(c.get_int("attn_res_block", 0, 0, 10000));
  if (c.has("kda_gate_rank") && !l.kda) c.fail("kda_gate_rank", "is read only with kda: true (Kimi Delta Attention's output gate)");
  if (l.kda && (l.linear_key_heads != l.linear_value_heads || l.linear_key_dim != l.linear_value_dim)) {
    c.fail("kda", "true is Kimi Delta Attention, whose q, k and v have the same heads and width; valid: linear_key_heads = linear_value_heads "
                  "and linear_key_dim = linear_value_dim (Kimi's num_heads and head_dim)");
  }
  if (l.situ && (l.gelu || l.swiglu_limit > 0)) {
    c.fail("situ", std::string("true is Kimi K3's activation; it contradicts ") + (l.gelu ? "gelu: true (GeGLU)" : "swiglu_limit (gpt-oss's SwiGLU)") +
                       "; set only one");
  }
  if (l.latent_norm && c.get_int("moe_latent", 0, 0, kBig) == 0) c.fail("latent_norm", "is read only with moe_latent (the latent it norms)");
  if (l.linear_value_heads % l.linear_key_heads != 0) {
    c.fail("linear_value_heads", std::to_string(l.linear_value_heads) + " is not a multiple of linear_key_heads " +
                                     std::to_string(l.linear_key_heads) + " (each key head serves an equal share of value heads)");
  }
  if (l.full_attention_interval > 0) {
    for (const auto& [key, on] : {std::pair{"sliding_window", l.sliding_window > 0}, std::pair{"attention_chunk", l.attention_chunk > 0},
                                   std::pair{"global_every", l.global_every > 0}, std::pair{"gemma_norms", l.gemma_norms},
                                   std::pair{"olmo2_norms", l.olmo2_norms}}) {
      if (on) c.fail(key, "contradicts full_attention_interval (Gated DeltaNet layers among full attention ones); set only one");
    }
  }
  if (l.zero_centered_norms && (l.gemma_norms || l.olmo2_norms || l.fp32_norm_weight)) {
    c.fail("zero_centered_norms", "true is Qwen3-Next's two norms a block; it contradicts gemma_norms, olmo2_norms and fp32_norm_weight (set only one)");
  }
  if (l.attention_chunk > 0 && l.sliding_window > 0) {
    c.fail("attention_chunk", "contradicts sliding_window: a local layer attends within a window or within chunks; set only one");
  }
  if (l.global_every > 0 && l.sliding_window == 0 && l.attention_chunk == 0 && !l.nope_global) {
    c.fail("global_every", std::to_string(l.global_every) + " needs a sliding_window or an attention_chunk for the other layers (or nope_global: true)");
  }
  if (l.nope_global && l.global_every == 0) c.fail("nope_global", "true needs global_every (which layers are global)");
  if (l.attn_temperature && !l.nope_global) c.fail("attn_temperature", "true is Llama 4's tuning of its NoPE layers; it needs nope_global: true");
  if (l.l2_qk_norm && l.qk_norm) c.fail("l2_qk_norm", "contradicts qk_norm: true (an L2 norm without weights against an RMSNorm with); set only one");
  // Mamba-2 hybrids (Note [Mamba-2] in llama.cpp).
  l.hybrid_pattern = c.get_string("hybrid_pattern", "");
  l.mamba_head_dim = c.get_int("mamba_head_dim", 64, 1, 1 << 20);
  l.mamba_heads = c.get_int("mamba_heads", 0, 0, 1 << 20);
  l.mamba_state = c.get_int("mamba_state", 128, 1, 1 << 20);
  l.mamba_groups = c.get_int("mamba_groups", 8, 1, 1 << 20);
  l.mamba_conv_kernel = c.get_int("mamba_conv_kernel", 4, 1, 1024);
  l.mamba_chunk = c.get_int("mamba_chunk", 128, 1, 4096);  // mamba_ssm's chunks are 64 to 256 tokens
  l.squared_relu = c.get_bool("squared_relu", false);
  l.rotary = c.get_bool("rotary", true);
  if (l.squared_relu && l.situ) c.fail("squared_relu", "true is an ungated MLP; it contradicts situ: true (Kimi K3's gated SiTU); set only one");
  if (l.squared_relu && (l.gelu || l.swiglu_limit > 0)) {
    c.fail("squared_relu", std::string("true is an ungated MLP; it contradicts ") + (l.gelu ? "gelu: true (GeGLU)" : "swiglu_limit (gpt-oss's SwiGLU)") +
                               "; set only one");
  }
  if (!l.rotary && (l.nope_global || l.attn_temperature)) c.fail("rotary", "false already leaves every layer without rotary; drop nope_global and attn_temperature");
  if (!l.rotary && c.get_int("kv_lora_rank", 0, 0, kBig) > 0 && !l.kda) {
    // Kimi's latent attention (mla_use_nope) keeps the shared part without rotating it.
    c.fail("rotary", "false with latent attention (kv_lora_rank), whose decoupled rotary part every head shares; set rotary: true");
  }
  // Granite 4.0-H's blocks, each mixing through Mamba-2 (M) or attention
  // (*); Kimi's, through linear attention (L) or attention.
  l.layer_mixers = c.get_string("layer_mixers", "");
  for (std::size_t i = 0; i < l.layer_mixers.size(); ++i) {
    if (l.layer_mixers[i] != 'M' && l.layer_mixers[i] != '*' && l.layer_mixers[i] != 'L') {
      c.fail("layer_mixers", std::string("letter ") + std::to_string(i + 1) + " is '" + l.layer_mixers[i] +
                                 "'; valid: M (a Mamba-2 block), L (a linear-attention block) or * (an attention block), a letter a layer");
    }
  }
  const bool linear_mixers = l.layer_mixers.find('L') != std::string::npos;
  if (l.kda && !linear_mixers) c.fail("kda", "true needs layer_mixers with L layers (Kimi's kda_layers) for its linear attention");
  if (!l.layer_mixers.empty() && !l.hybrid_pattern.empty()) {
    c.fail("layer_mixers", "contradicts hybrid_pattern (blocks against single parts); set only one");
  }
  if (!l.layer_mixers.empty() && static_cast<std::int64_t>(l.layer_mixers.size()) != l.layers) {
    c.fail("layer_mixers", std::to_string(l.layer_mixers.size()) + " letters for the " + std::to_string(l.layers) + " layers; valid: one a layer");
  }
  if (!l.layer_mixers.empty()) {
    // Latent attention among linear layers is Kimi's; among Mamba-2 ones, nobody's.
    const bool mla_ok = linear_mixers && l.layer_mixers.find('M') == std::string::npos;
    for (const auto& [key, on] : {std::pair{"full_attention_interval", l.full_attention_interval > 0}, std::pair{"gemma_norms", l.gemma_norms},
                                   std::pair{"olmo2_norms", l.olmo2_norms},
                                   std::pair{"kv_lora_rank", !mla_ok && c.get_int("kv_lora_rank", 0, 0, kBig) > 0},
                                   std::pair{"attention_sinks", l.attention_sinks}}) {
      if (on) c.fail(key, "is not modelled with layer_mixers (Granite 4.0-H's Mamba-2 and attention blocks, Kimi's linear and attention ones); drop one");
    }
  }
  const bool mamba_layers = l.hybrid_pattern.find('M') != std::string::npos || l.layer_mixers.find('M') != std::string::npos;
  if (mamba_layers && l.mamba_heads == 0 && (2 * l.hidden) % l.mamba_head_dim != 0) {
    c.fail("mamba_head_dim", std::to_string(l.mamba_head_dim) + " does not divide 2 x hidden = " + std::to_string(2 * l.hidden) +
                                 " (mamba_heads 0 takes Megatron-Core's 2 hidden / mamba_head_dim heads); set mamba_heads");
  }
  const std::int64_t mamba_heads = l.mamba_heads > 0 ? l.mamba_heads : 2 * l.hidden / l.mamba_head_dim;
  if (mamba_layers && mamba_heads % l.mamba_groups != 0) {
    c.fail("mamba_groups", std::to_string(l.mamba_groups) + " does not divide the " + std::to_string(mamba_heads) +
                               " Mamba heads (each group's B and C serve a whole number of heads); valid: " + divisors_of(mamba_heads));
  }
  if (!l.hybrid_pattern.empty()) {
    for (std::size_t i = 0; i < l.hybrid_pattern.size(); ++i) {
      const char ch = l.hybrid_pattern[i];
      if (ch != 'M' && ch != '*' && ch != '-' && ch != 'E') {
        c.fail("hybrid_pattern", std::string("letter ") + std::to_string(i + 1) + " is '" + ch +
                                     "'; valid: M (Mamba-2), * (attention), - (MLP), E (mixture of experts), a letter a layer");
      }
    }
    const auto n = static_cast<std::int64_t>(l.hybrid_pattern.size());
    if (c.has("layers") && l.layers != n) {
      c.fail("layers", std::to_string(l.layers) + " contradicts hybrid_pattern's " + std::to_string(n) + " layers (a letter a layer); drop layers");
    }
    if (n > 10000) c.fail("hybrid_pattern", std::to_string(n) + " layers; valid: 1 to 10000");
    l.layers = static_cast<int>(n);
    for (const auto& [key, on] : {std::pair{"full_attention_interval", l.full_attention_interval > 0}, std::pair{"gemma_norms", l.gemma_norms},
                                   std::pair{"olmo2_norms", l.olmo2_norms}, std::pair{"kv_lora_rank", c.get_int("kv_lora_rank", 0, 0, kBig) > 0},
                                   std::pair{"first_dense", c.get_int("first_dense", 0, 0, 10000) > 0},
                                   std::pair{"moe_step", c.get_int("moe_step", 1, 1, 10000) > 1}, std::pair{"attention_sinks", l.attention_sinks}}) {
      if (on) c.fail(key, "is not modelled with a hybrid_pattern (Megatron-Core's hybrid layers: M, *, - and E alone); drop one");
    }
  }
  if (!mamba_layers) {
    for (const char* key : {"mamba_heads", "mamba_head_dim", "mamba_state", "mamba_groups", "mamba_conv_kernel", "mamba_chunk"}) {
      if (c.has(key)) c.fail(key, "is read only with a hybrid_pattern or layer_mixers holding Mamba-2 layers (M)");
    }
  }
  // Mixture of experts (Note [Mixture of experts] in llama.cpp).
  l.experts = static_cast<int>(c.get_int("experts", 0, 0, 1 << 20));
  l.top_k = static_cast<int>(c.get_int("top_k", l.experts > 0 ? 2 : 1, 1, 1 << 20));
  l.expert_intermediate = c.get_int("expert_intermediate", l.intermediate, 1, kBig);
  l.shared_intermediate = c.get_int("shared_intermediate", 0, 0, kBig);
  l.shared_expert_gate = c.get_bool("shared_expert_gate", false);
  l.router_bias = c.get_bool("router_bias", false);
  l.first_dense = static_cast<int>(c.get_int("first_dense", 0, 0, 10000));
  l.moe_step = static_cast<int>(c.get_int("moe_step", 1, 1, 10000));
  l.route_nodes = static_cast<int>(c.get_int("route_nodes", 0, 0, 1 << 20));
  l.mtp_layers = static_cast<int>(c.get_int("mtp_layers", 0, 0, 64));  // Note [Multi-token prediction] in llama.cpp
  l.mtp_repeated = c.get_bool("mtp_repeated", false);
  if (c.has("mtp_repeated") && l.mtp_layers == 0) c.fail("mtp_repeated", "is read only with mtp_layers (1 or more depths to repeat one layer over)");
  l.moe_latent = c.get_int("moe_latent", 0, 0, kBig);  // Note [Latent MoE] in llama.cpp
  if (l.moe_latent > 0 && l.experts == 0) c.fail("moe_latent", "is the routed experts' width; it needs experts (2 or more)");
  if (l.experts == 1) c.fail("experts", "1: a mixture needs at least 2 routed experts (0: a dense model)");
  if (!l.hybrid_pattern.empty() && (l.hybrid_pattern.find('E') != std::string::npos) != (l.experts > 0)) {
    c.fail(l.experts > 0 ? "experts" : "hybrid_pattern",
           l.experts > 0 ? "given, but hybrid_pattern has no E layer to hold them; set experts: 0 or add E layers"
                         : "has E layers but experts is 0; set experts (2 or more routed experts)");
  }
  if (l.experts > 0 && l.top_k > l.experts) {
    c.fail("top_k", std::to_string(l.top_k) + " exceeds the " + std::to_string(l.experts) +
                        " routed experts; valid: 1 to " + std::to_string(l.experts));
  }
  // Multi-head latent attention (DeepSeek).
  l.q_lora_rank = c.get_int("q_lora_rank", 0, 0, kBig);
  l.kv_lora_rank = c.get_int("kv_lora_rank", 0, 0, kBig);
  if (l.q_scaling_beta > 0 && l.kv_lora_rank > 0) {
    c.fail("q_scaling_beta", "is Ministral 3's grouped-query attention; latent attention (kv_lora_rank) has none modelled");
  }
  if (l.attention_sinks && l.kv_lora_rank > 0) c.fail("attention_sinks", "true is gpt-oss's grouped-query attention; latent attention (kv_lora_rank) has none modelled");
  for (const auto& [key, on] : {std::pair{"attention_chunk", l.attention_chunk > 0}, std::pair{"nope_global", l.nope_global},
                                 std::pair{"l2_qk_norm", l.l2_qk_norm}}) {
    if (on && l.kv_lora_rank > 0) c.fail(key, "is Llama 4's grouped-query attention; latent attention (kv_lora_rank) has none modelled");
  }
  if (l.full_attention_interval > 0 && l.kv_lora_rank > 0) {
    c.fail("full_attention_interval", "is Qwen3-Next's grouped-query attention; latent attention (kv_lora_rank) has none modelled");
  }

  if (l.whole_qk_norm && l.kv_lora_rank > 0) {
    c.fail("whole_qk_norm", "true is grouped-query attention's q/k norms; latent attention (kv_lora_rank) has none modelled");
  }
  if (l.olmo2_norms && (l.experts > 0 || l.kv_lora_rank > 0)) {
    c.fail("olmo2_norms", std::string("true is OLMo 2's dense block; it contradicts ") + (l.experts > 0 ? "experts" : "kv_lora_rank") +
                              " (set only one)");
  }
  l.qk_nope_dim = c.get_int("qk_nope_dim", l.kv_lora_rank > 0 ? 128 : 0, 0, kBig);
  l.qk_rope_dim = c.get_int("qk_rope_dim", l.kv_lora_rank > 0 ? 64 : 0, 0, kBig);
  l.v_head_dim = c.get_int("v_head_dim", l.kv_lora_rank > 0 ? 128 : 0, 0, kBig);
  if (l.kv_lora_rank > 0 && (l.qk_nope_dim + l.qk_rope_dim == 0 || l.v_head_dim == 0)) {
    c.fail("kv_lora_rank", "latent attention needs qk_nope_dim + qk_rope_dim > 0 and v_head_dim > 0");
  }
  // DeepSeek Sparse Attention (Note [DeepSeek Sparse Attention] in llama.cpp).
  l.index_topk = c.get_int("index_topk", 0, 0, 1 << 24);
  l.index_heads = c.get_int("index_heads", 64, 1, 4096);
  l.index_head_dim = c.get_int("index_head_dim", 128, 1, 4096);
  l.indexer_layers = c.get_string("indexer_layers", "");
  l.index_loss = c.get_enum<char>("index_loss", 'S', {{"sparse", 'S'}, {"dense", 'D'}, {"none", 'N'}});
  l.dsa_dense = c.get_enum<bool>("dsa_kernels", false, {{"sparse", false}, {"dense", true}});
  // DeepSeek-V4 (Note [DeepSeek-V4] in llama.cpp) and its hyper-connections (Note [Hyper-connections]).
  const std::vector<std::int64_t> ratios = c.get_int_list("compress_ratios");
  const bool v4 = c.has("compress_ratios");
  l.o_groups = c.get_int("o_groups", v4 ? 8 : 0, 0, 1 << 20);
  l.o_lora_rank = c.get_int("o_lora_rank", v4 ? 1024 : 0, 0, kBig);
  l.hc_mult = static_cast<int>(c.get_int("hc_mult", 0, 0, 64));
  l.hc_sinkhorn_iters = static_cast<int>(c.get_int("hc_sinkhorn_iters", 20, 1, 10000));
  if (c.has("hc_sinkhorn_iters") && l.hc_mult < 2) c.fail("hc_sinkhorn_iters", "is read only with hc_mult (2 or more residual streams)");
  if (l.attn_output_gate && l.kv_lora_rank > 0 && (l.index_topk > 0 || v4)) {
    c.fail("attn_output_gate", "with latent attention is Kimi K3's gate on dense latent attention; it is not modelled with DeepSeek's sparse attention");
  }
  if (l.attn_res_block > 0 && (l.gemma_norms || l.olmo2_norms)) {
    c.fail("attn_res_block", std::string("Block Attention Residuals mix before the sublayers' pre-norms; they are not modelled with ") +
                                 (l.gemma_norms ? "gemma_norms" : "olmo2_norms") + "' norms after them");
  }
  if (l.attn_res_block > 0 && (l.hc_mult > 1 || !l.hybrid_pattern.empty() || l.mtp_layers > 0)) {
    c.fail("attn_res_block", std::string("Block Attention Residuals replace the residual; they contradict ") +
                                 (l.hc_mult > 1 ? "hc_mult (hyper-connections)"
                                                : !l.hybrid_pattern.empty() ? "hybrid_pattern (single-part layers)" : "mtp_layers (not modelled with them)") +
                                 "; set only one");
  }
  if (!v4) {
    for (const char* key : {"o_groups", "o_lora_rank"}) {
      if (c.has(key)) c.fail(key, "is read only with compress_ratios (DeepSeek-V4's attention)");
    }
  } else {
    if (ratios.empty()) c.fail("compress_ratios", "is empty; valid: one ratio a layer (0, 4 or 128), then one a multi-token prediction depth");
    for (std::size_t i = 0; i < ratios.size(); ++i) {
      const std::int64_t r = ratios[i];
      l.compress_ratios.push_back(static_cast<int>(r == 4 || r == 128 ? r : 0));
      if (r != 0 && r != 4 && r != 128) {
        c.fail("compress_ratios", "entry " + std::to_string(i + 1) + " is " + std::to_string(r) +
                                      "; valid: 0 (the window alone), 4 (compressed sparse) or 128 (heavily compressed), as Megatron-Core's dsv4_hybrid takes");
      }
    }
    if (static_cast<std::int64_t>(l.compress_ratios.size()) < l.layers) {
      c.fail("compress_ratios", std::to_string(l.compress_ratios.size()) + " ratios for the " + std::to_string(l.layers) +
                                    " layers; valid: one a layer (then one a multi-token prediction depth, 0 where missing)");
    }
    for (const auto& [key, on] : {std::pair{"kv_lora_rank", l.kv_lora_rank > 0}, std::pair{"hybrid_pattern", !l.hybrid_pattern.empty()},
                                   std::pair{"layer_mixers", !l.layer_mixers.empty()}, std::pair{"full_attention_interval", l.full_attention_interval > 0},
                                   std::pair{"global_every", l.global_every > 0}, std::pair{"attention_chunk", l.attention_chunk > 0},
                                   std::pair{"gemma_norms", l.gemma_norms}, std::pair{"olmo2_norms", l.olmo2_norms},
                                   std::pair{"attention_sinks", l.attention_sinks}, std::pair{"indexer_layers", c.has("indexer_layers")}}) {
      if (on) c.fail(key, "is not modelled with compress_ratios (DeepSeek-V4's attention, whose own keys describe it); drop one");
    }
    if (l.q_lora_rank == 0) c.fail("q_lora_rank", "0; DeepSeek-V4's query comes through a latent (wq_a, wq_b): valid 1 or more (1024 in Flash)");
    if (l.head_dim == 0) c.fail("head_dim", "missing: DeepSeek-V4's one key-value head and its query heads are head_dim wide (512)");
    if (l.qk_rope_dim == 0 || l.qk_rope_dim >= l.head_dim) {
      c.fail("qk_rope_dim", std::to_string(l.qk_rope_dim) + "; valid: 1 to head_dim - 1 (the rotary channels of each head: 64)");
    }
    if (l.o_groups == 0 || l.heads % l.o_groups != 0) {
      c.fail("o_groups", std::to_string(l.o_groups) + " does not divide the " + std::to_string(l.heads) + " heads; valid: " + divisors_of(l.heads));
    }
    if (l.o_lora_rank == 0) c.fail("o_lora_rank", "0; valid: each output group's rank, 1 or more (1024)");
    if (l.sliding_window == 0) c.fail("sliding_window", "0; DeepSeek-V4's every query sees a window of its own tokens: valid 1 or more (128)");
    const bool csa = std::find(l.compress_ratios.begin(), l.compress_ratios.end(), 4) != l.compress_ratios.end();
    if (csa && l.index_topk == 0) c.fail("index_topk", "0, but compress_ratios has ratio-4 layers, whose indexer picks index_topk entries (512)");
  }
  if (l.index_topk == 0) {
    for (const char* key : {"index_heads", "index_head_dim", "indexer_layers", "index_loss", "dsa_kernels"}) {
      if (c.has(key)) c.fail(key, "is read only with index_topk (DeepSeek Sparse Attention's keys a query, 1 or more)");
    }
  } else if (v4) {
    if (l.dsa_dense) c.fail("dsa_kernels", "dense is DeepSeek-V3.2's masked attention; DeepSeek-V4's is priced as its sparse kernels run");
  } else {
    if (l.kv_lora_rank == 0) {
      c.fail("index_topk", "needs latent attention (kv_lora_rank): DeepSeek Sparse Attention selects keys of MLA's shared latent");
    }
    if (l.qk_rope_dim > l.index_head_dim) {
      c.fail("index_head_dim", std::to_string(l.index_head_dim) + " is narrower than qk_rope_dim " + std::to_string(l.qk_rope_dim) +
                                   " (the indexer's rotary part); valid: qk_rope_dim or more");
    }
    for (std::size_t i = 0; i < l.indexer_layers.size(); ++i) {
      const char ch = l.indexer_layers[i];
      if (ch != 'F' && ch != 'S') {
        c.fail("indexer_layers", std::string("letter ") + std::to_string(i + 1) + " is '" + ch +
                                     "'; valid: F (the layer runs its indexer) or S (it reuses the last F layer's top-k), a letter a layer");
      }
    }
    if (!l.indexer_layers.empty() && static_cast<std::int64_t>(l.indexer_layers.size()) != l.layers) {
      c.fail("indexer_layers", std::to_string(l.indexer_layers.size()) + " letters for the " + std::to_string(l.layers) +
                                   " layers; valid: one a layer");
    }
    if (!l.indexer_layers.empty() && l.indexer_layers.front() != 'F') {
      c.fail("indexer_layers", "starts with S, but the first layer has no earlier top-k to reuse; valid: F first");
    }
  }
  // Gemma 4 (Note [Gemma 4] in llama.cpp): the global layers' attention shape.
  l.global_head_dim = c.get_int("global_head_dim", 0, 0, 1 << 20);
  l.global_kv_heads = c.get_int("global_kv_heads", 0, 0, 1 << 20);
  l.k_eq_v = c.get_bool("k_eq_v", false);
  l.v_norm = c.get_bool("v_norm", false);
  l.moe_branch_norms = c.get_bool("moe_branch_norms", false);
  for (const auto& [key, on] : {std::pair{"global_head_dim", l.global_head_dim > 0}, std::pair{"global_kv_heads", l.global_kv_heads > 0},
                                 std::pair{"k_eq_v", l.k_eq_v}}) {
    if (on && l.global_every == 0) c.fail(key, "is the global layers' and needs global_every (which layers attend globally)");
    if (on && l.kv_lora_rank > 0) c.fail(key, "is Gemma 4's grouped-query attention; latent attention (kv_lora_rank) has none modelled");
  }
  if (l.v_norm && l.kv_lora_rank > 0) c.fail("v_norm", "is Gemma 4's grouped-query attention; latent attention (kv_lora_rank) has none modelled");
  if (l.global_kv_heads > 0 && l.heads % l.global_kv_heads != 0) {
    c.fail("global_kv_heads", std::to_string(l.global_kv_heads) + " does not divide the " + std::to_string(l.heads) + " heads; valid: " + divisors_of(l.heads));
  }
  l.ple_dim = c.get_int("ple_dim", 0, 0, 1 << 20);
  l.ple_vocab = c.get_int("ple_vocab", 0, 0, kBig);
  l.kv_shared_layers = static_cast<int>(c.get_int("kv_shared_layers", 0, 0, 10000));
  l.double_wide_mlp = c.get_bool("double_wide_mlp", false);
  if (c.has("ple_vocab") && l.ple_dim == 0) c.fail("ple_vocab", "is read only with ple_dim (the per-layer inputs' width)");
  if (l.kv_shared_layers >= l.layers) {
    c.fail("kv_shared_layers", std::to_string(l.kv_shared_layers) + " leaves no earlier layer to share keys and values from; valid: 0 to " +
                                   std::to_string(l.layers - 1));
  }
  if (l.double_wide_mlp && l.kv_shared_layers == 0) c.fail("double_wide_mlp", "widens the kv_shared_layers' MLPs; it needs kv_shared_layers");
  for (const auto& [key, on] : {std::pair{"ple_dim", l.ple_dim > 0}, std::pair{"kv_shared_layers", l.kv_shared_layers > 0}}) {
    if (!on) continue;
    if (l.kv_lora_rank > 0 || l.experts > 0 || !l.layer_mixers.empty() || !l.hybrid_pattern.empty() || l.mtp_layers > 0) {
      c.fail(key, "is Gemma 4's dense grouped-query decoder; it is not modelled with latent attention, experts, mixed layers or MTP");
    }
  }
  if (l.kv_shared_layers > 0 && l.global_every > 0) {
    // Each sharing layer needs an earlier layer of its kind to take them from.
    const int first = l.layers - l.kv_shared_layers;
    bool local = false, global = false, need_local = false, need_global = false;
    for (int i = 0; i < l.layers; ++i) {
      const bool g = (i + 1) % l.global_every == 0;
      ((i < first) ? (g ? global : local) : (g ? need_global : need_local)) = true;
    }
    if ((need_global && !global) || (need_local && !local)) {
      c.fail("kv_shared_layers", std::to_string(l.kv_shared_layers) + " leaves a " + (need_global && !global ? "global" : "local") +
                                     " layer with no earlier one of its kind to share keys and values from");
    }
  }
  if (l.qkv_bias && (l.global_head_dim > 0 || l.global_kv_heads > 0 || l.k_eq_v || l.kv_shared_layers > 0)) {
    c.fail("qkv_bias", "true is not modelled with Gemma 4's attention (global_head_dim, global_kv_heads, k_eq_v, kv_shared_layers), which has no biases");
  }
  if (l.moe_branch_norms && (l.experts == 0 || l.shared_intermediate == 0)) {
    c.fail("moe_branch_norms", "is Gemma 4's mixture beside a dense MLP; it needs experts and shared_intermediate (the dense MLP's width)");
  }
  if (l.head_dim == 0 && l.kv_lora_rank == 0) check_heads(c, l.hidden, l.heads);
  if (l.kv_lora_rank == 0) check_kv_heads(c, "kv_heads", l.heads, l.kv_heads);
  const double h = static_cast<double>(l.hidden);
  const double d = static_cast<double>(l.head_dim == 0 ? l.hidden / l.heads : l.head_dim);
  // Note [Latent MoE]: the experts' width, the hidden one or narrower.
  const double mlp = l.experts > 0 ? static_cast<double>(l.experts) * static_cast<double>(l.expert_intermediate) *
                                             (l.moe_latent > 0 ? static_cast<double>(l.moe_latent) / static_cast<double>(l.hidden) : 1.0) +
                                         static_cast<double>(l.shared_intermediate) + static_cast<double>(l.intermediate)
                                   : static_cast<double>(l.intermediate);
  // Note [Mamba-2]: a Mamba layer's projections and convolution, bounded as a whole.
  const double di = static_cast<double>(mamba_heads) * static_cast<double>(l.mamba_head_dim);
  const double bc = 2.0 * static_cast<double>(l.mamba_groups) * static_cast<double>(l.mamba_state);
  const double mamba = mamba_layers ? h * (2 * di + bc + static_cast<double>(mamba_heads)) + di * h +
                                          (di + bc) * static_cast<double>(l.mamba_conv_kernel + 1)
                                    : 0.0;
  check_parameters(c, "layers", (l.layers + l.mtp_layers) * (h * d * static_cast<double>(2 * l.heads + 2 * l.kv_heads) + 3 * h * mlp + mamba) +
                                    2 * static_cast<double>(l.vocab) * h);
  c.finish({"name", "family", "description"});
  return make_llama(l);
}

sim::ModelPtr parse_bilstm(const sim::ConfigMap& c, const std::string& name) {
  BiLstmConfig l;
  l.name = name;
  l.input_size = c.get_int("input_size", 768, 1, kBig);
  l.hidden = c.get_int("hidden", 256, 1, kBig);
  l.layers = static_cast<int>(c.get_int("layers", 2, 1, 10000));
  l.bidirectional = c.get_bool("bidirectional", true);
  l.classes = c.get_int("classes", 33, 1, kBig);
  l.seq_len = c.get_int("seq_len", 512, 1, kBig);
  // Four gates per direction, each over [input, hidden] -> hidden.
  const double h = static_cast<double>(l.hidden), in = static_cast<double>(std::max(l.input_size, 2 * l.hidden));
  check_parameters(c, "layers", l.layers * 2.0 * 4 * (in + h + 2) * h + 2 * h * static_cast<double>(l.classes));
  c.finish({"name", "family", "description"});
  return make_bilstm(l);
}

/// `key`'s list of positive integers (each a channel count or a width).
std::vector<std::int64_t> positive_list(const sim::ConfigMap& c, const char* key, std::vector<std::int64_t> fallback, bool allow_empty) {
  const auto v = c.get_int_list(key);
  if (!c.has(key)) return fallback;
  if (v.empty() && !allow_empty) c.fail(key, "is empty; valid: a list of one or more positive integers like [16, 32]");
  for (std::size_t i = 0; i < v.size(); ++i) {
    if (v[i] < 1 || v[i] > kBig) {
      c.fail(key, "entry " + std::to_string(i + 1) + " is " + std::to_string(v[i]) + "; valid: 1 to " + std::to_string(kBig));
    }
  }
  return v;
}

sim::ModelPtr parse_convnet(const sim::ConfigMap& c, const std::string& name, const std::string& family) {
  ConvNetConfig n;
  n.name = name;
  n.arch = family == "vgg" ? ConvNetConfig::Arch::kVgg
           : family == "mlp" ? ConvNetConfig::Arch::kMlp
           : family == "conv-autoencoder" ? ConvNetConfig::Arch::kConvAutoencoder
                                          : ConvNetConfig::Arch::kCnn;
  const bool vgg = n.arch == ConvNetConfig::Arch::kVgg, ae = n.arch == ConvNetConfig::Arch::kConvAutoencoder;
  n.image_size = c.get_int("image_size", vgg ? 224 : ae ? 28 : 32, 1, 65536);
  n.channels = c.get_int("channels", ae ? 1 : 3, 1, kBig);
  if (!ae) n.classes = c.get_int("classes", vgg ? 1000 : 10, 1, kBig);
  if (n.arch != ConvNetConfig::Arch::kMlp && !ae) n.batch_norm = c.get_bool("batch_norm", false);
  if (!ae) n.dropout = c.get_bool("dropout", vgg);
  double params = 0;
  const double img = static_cast<double>(n.channels) * static_cast<double>(n.image_size) * static_cast<double>(n.image_size);
  if (vgg) {
    n.vgg_config = c.get_enum<char>("config", 'A', {{"A", 'A'}, {"B", 'B'}, {"D", 'D'}, {"E", 'E'}});
    n.width = c.get_int("width", 64, 1, kBig);
    n.fc = c.get_int("fc", 4096, 1, kBig);
    n.pool_size = c.get_int("pool_size", 7, 1, 1024);
    const double w = static_cast<double>(n.width) * 8, f = static_cast<double>(n.fc), p = static_cast<double>(n.pool_size);
    params = 20 * 9 * w * w + w * p * p * f + f * f + f * static_cast<double>(n.classes);
  } else if (n.arch == ConvNetConfig::Arch::kCnn) {
    n.conv_channels = positive_list(c, "conv_channels", n.conv_channels, false);
    n.kernel = c.get_int("kernel", 5, 1, 1024);
    n.padding = c.get_int("padding", 0, 0, 1024);
    n.hidden = positive_list(c, "hidden", n.hidden, true);
    double prev = static_cast<double>(n.channels);
    for (auto ch : n.conv_channels) params += prev * static_cast<double>(ch) * static_cast<double>(n.kernel * n.kernel), prev = static_cast<double>(ch);
    for (auto h : n.hidden) params += img * static_cast<double>(h);  // a bound: each layer no wider than the image
  } else if (n.arch == ConvNetConfig::Arch::kMlp) {
    n.hidden = positive_list(c, "hidden", {512, 512}, true);
    double prev = img;
    for (auto h : n.hidden) params += prev * static_cast<double>(h), prev = static_cast<double>(h);
  } else {
    n.conv_channels = positive_list(c, "conv_channels", {16, 32}, false);
    n.latent = c.get_int("latent", 64, 1, kBig);
    double prev = static_cast<double>(n.channels);
    for (auto ch : n.conv_channels) params += 2 * 9 * prev * static_cast<double>(ch), prev = static_cast<double>(ch);
    params += 2 * prev * static_cast<double>(n.latent) * img;
  }
  check_parameters(c, vgg ? "width" : "hidden", params);
  c.finish({"name", "family", "description"});
  // A kernel too large for its input is said of the image where the user
  // changed the image and not the kernel.
  const bool image_changed = c.overridden("image_size") && !c.overridden("kernel") && !c.overridden("padding");
  if (const auto [key, why] = convnet_problem(n, image_changed); !key.empty()) c.fail(key, why);
  return make_convnet(n);
}

sim::ModelPtr parse_nbow(const sim::ConfigMap& c, const std::string& name) {
  NbowConfig n;
  n.name = name;
  n.vocab = c.get_int("vocab", n.vocab, 1, kBig);
  n.embed = c.get_int("embed", n.embed, 1, kBig);
  n.classes = c.get_int("classes", n.classes, 1, kBig);
  n.seq_len = c.get_int("seq_len", n.seq_len, 1, kBig);
  check_parameters(c, "embed", static_cast<double>(n.vocab + n.classes) * static_cast<double>(n.embed));
  c.finish({"name", "family", "description"});
  return make_nbow(n);
}

sim::ModelPtr parse_seq2seq(const sim::ConfigMap& c, const std::string& name) {
  Seq2SeqConfig n;
  n.name = name;
  n.src_vocab = c.get_int("src_vocab", n.src_vocab, 1, kBig);
  n.tgt_vocab = c.get_int("tgt_vocab", n.tgt_vocab, 1, kBig);
  n.embed = c.get_int("embed", n.embed, 1, kBig);
  n.hidden = c.get_int("hidden", n.hidden, 1, kBig);
  n.layers = static_cast<int>(c.get_int("layers", n.layers, 1, 10000));
  n.cell = c.get_enum<Seq2SeqConfig::Cell>("cell", n.cell, {{"lstm", Seq2SeqConfig::Cell::kLstm}, {"gru", Seq2SeqConfig::Cell::kGru}});
  n.dropout = c.get_bool("dropout", true);
  n.seq_len = c.get_int("seq_len", n.seq_len, 2, kBig);
  const double h = static_cast<double>(n.hidden), e = static_cast<double>(n.embed);
  const double gates = n.cell == Seq2SeqConfig::Cell::kGru ? 3 : 4;
  check_parameters(c, "hidden", 2 * n.layers * gates * h * (h + std::max(h, e)) +
                                    e * static_cast<double>(n.src_vocab + n.tgt_vocab) + h * static_cast<double>(n.tgt_vocab));
  c.finish({"name", "family", "description"});
  return make_seq2seq(n);
}

/// `notes`: what the file holds beyond the model read from it (a HuggingFace
/// config's vision tower), for sim::Model::notes.
sim::ModelPtr parse_ours(YAML::Node root, const std::string& file, const std::string& default_name,
                         const std::vector<sim::Override>& overrides, std::vector<std::string> notes = {}) {
  const sim::ConfigMap c = sim::ConfigMap::open(root, file, "model", overrides);
  const std::string name = c.get_string("name", default_name);
  c.get_string("description", "");
  const std::string family = c.get_enum<std::string>(
      "family", "",
      {{"gpt", "gpt"}, {"gpt2", "gpt2"}, {"llama", "llama"}, {"bert", "bert"}, {"bilstm", "bilstm"}, {"vgg", "vgg"}, {"cnn", "cnn"},
       {"mlp", "mlp"}, {"conv-autoencoder", "conv-autoencoder"}, {"nbow", "nbow"}, {"seq2seq", "seq2seq"}});
  if (family.empty()) c.fail("family", "missing; valid: gpt, gpt2, llama, bert, bilstm, vgg, cnn, mlp, conv-autoencoder, nbow, seq2seq");
  // Note [LoRA] (peft.cpp): any family fine-tuned with adapters.
  // Note [QLoRA]: qlora is LoRA over a base whose linear weights are NF4;
  // Note [8-bit base]: lora_int8 over LLM.int8 ones.
  // Note [fp32 base]: lora_fp32 over a base loaded in fp32 under autocast.
  const std::string peft = c.get_enum<std::string>(
      "peft", "none", {{"none", "none"}, {"lora", "lora"}, {"qlora", "qlora"}, {"lora_int8", "lora_int8"}, {"lora_fp32", "lora_fp32"}});
  const bool lora = peft != "none";
  LoraConfig lc;
  lc.base = peft == "qlora"       ? LoraConfig::Base::kNf4
            : peft == "lora_int8" ? LoraConfig::Base::kInt8
            : peft == "lora_fp32" ? LoraConfig::Base::kFp32
                                  : LoraConfig::Base::k16;
  if (c.has("lora_rank") || c.has("lora_targets")) {
    if (!lora) c.fail(c.has("lora_rank") ? "lora_rank" : "lora_targets", "is LoRA's; set peft: lora with it (valid peft: none, lora, qlora, lora_int8, lora_fp32)");
    lc.rank = c.get_int("lora_rank", lc.rank, 1, 1 << 16);
    if (c.has("lora_targets")) lc.targets = c.get_word_list("lora_targets");
  }
  sim::ModelPtr base;
  if (family == "vgg" || family == "cnn" || family == "mlp" || family == "conv-autoencoder") {
    base = parse_convnet(c, name, family);
  } else if (family == "nbow") {
    base = parse_nbow(c, name);
  } else if (family == "seq2seq") {
    base = parse_seq2seq(c, name);
  } else if (family == "bert") {
    base = parse_bert(c, name);
  } else if (family == "llama") {
    base = parse_llama(c, name, std::move(notes));
  } else if (family == "bilstm") {
    base = parse_bilstm(c, name);
  } else {
    base = parse_gpt(c, name);
  }
  if (!lora) return base;
  const std::vector<std::string> valid = lora_modules(*base);
  std::string list;
  for (const auto& v : valid) list += (list.empty() ? "" : ", ") + v;
  if (valid.empty()) c.fail("peft", peft + ": this model has no linear layer LoRA adapts (Megatron-Core's linear_qkv, linear_proj, linear_fc1, ...)");
  if (lc.targets.empty()) c.fail("lora_targets", "is empty; valid: " + list);
  // Note [LoRA]: one naming at a time, HuggingFace PEFT's on dense models alone.
  const auto hf = std::count_if(lc.targets.begin(), lc.targets.end(), lora_hf_module);
  if (hf > 0 && hf < static_cast<std::ptrdiff_t>(lc.targets.size())) {
    c.fail("lora_targets", "mixes Megatron-Core's module names with HuggingFace PEFT's, two namings of the same layers' projections; "
                           "give one kind");
  }
  if (base->experts() > 0 && hf > 0) {
    c.fail("lora_targets", "HuggingFace PEFT's names on a mixture of experts are not modelled (transformers releases differ on "
                           "whether each expert's projections are modules PEFT matches); valid: Megatron-Core's " + list);
  }
  // As Megatron-Bridge matches target_modules by name, a target the model
  // lacks adapts nothing (a note says so); one that matches nothing at all
  // is refused, most likely a misspelling.
  if (std::none_of(lc.targets.begin(), lc.targets.end(),
                   [&](const std::string& t) { return std::find(valid.begin(), valid.end(), t) != valid.end(); })) {
    std::string given;
    for (const auto& t : lc.targets) given += (given.empty() ? "" : ", ") + t;
    c.fail("lora_targets", given + " match no linear layer of this model LoRA adapts; valid: " + list);
  }
  return make_lora(base, lc);
}

/// The model_type values of HuggingFace configs dtsim reads.
constexpr const char* kHfTypes = "gpt2, bert, llama, mistral, mistral3, qwen2, qwen2_5_vl, qwen3, qwen3_vl, qwen3_vl_moe, smollm3, phi3, granite, olmo2, olmo3, gemma2, gemma3, gemma3_text, mixtral, qwen2_moe, qwen3_moe, deepseek_v2, deepseek_v3, deepseek_v32, kimi_k2, glm_moe_dsa, gpt_oss, glm4_moe, llama4, llama4_text, minimax_m2, ministral3, llava, llava_next, llava_onevision, qwen2_vl, internvl, qwen3_next, qwen3_5, qwen3_5_text, qwen3_5_moe, qwen3_5_moe_text, nemotron_h, granitemoehybrid, deepseek_v4, kimi_linear, kimi_k3, gemma4, gemma4_text";

/// Reads a HuggingFace config.json into our mapping (HF's many other keys are
/// ignored), checking the keys we use where they stand in the file. The
/// defaults are those of each model_type's configuration class in
/// transformers (configuration_llama.py, configuration_mistral.py,
/// configuration_qwen2.py, configuration_qwen3.py, configuration_gpt2.py,
/// configuration_bert.py); `architectures` picks the head.
/// `prefix` names the mapping's keys in errors ("config", or
/// "config.text_config" for Llama 4's language model); `as_type`, where
/// given, is its model_type (a text_config may leave it out). What the
/// config holds beyond the language model read goes to `notes`.
YAML::Node from_huggingface(const YAML::Node& hf, const std::string& file, std::vector<std::string>& notes,
                            const std::string& prefix = "config", const std::string& as_type = "") {
  const sim::ConfigMap c(hf, file, prefix);
  YAML::Node ours(YAML::NodeType::Map);
  const std::string type = as_type.empty() ? c.get_string("model_type", "") : as_type;
  auto copy_int = [&](const char* from, const char* to, std::int64_t fallback) {
    ours[to] = c.get_int(from, fallback, 1, kBig);
  };
  // The first of `architectures` (HF builds that class), or "" if absent.
  std::string arch;
  if (c.has("architectures")) {
    const YAML::Node a = hf["architectures"];
    if (a.IsSequence() && a.size() > 0 && a[0].IsScalar()) arch = a[0].Scalar();
  }
  auto require_arch = [&](const std::vector<std::string>& valid) {
    if (arch.empty() || !as_type.empty()) return;  // a wrapper's language model (Note [Image-and-text configs])
    for (const auto& v : valid) {
      if (arch == v) return;
    }
    std::string list;
    for (const auto& v : valid) list += (list.empty() ? "" : ", ") + v;
    c.fail("architectures", "'" + arch + "' is not a head dtsim models for model_type " + type + "; valid: " + list);
  };
  // Note [Image-and-text configs]
  // A multimodal checkpoint's config.json (Gemma3ForConditionalGeneration,
  // Llama4ForConditionalGeneration, LLaVA's three, InternVL's, Mistral3ForConditionalGeneration,
  // Qwen2 and 2.5-VL's, Qwen3VLForConditionalGeneration,
  // Qwen3VLMoeForConditionalGeneration) holds its language model's keys in
  // text_config, a config of a text model_type (one of `kinds`, each with
  // the text-only family dtsim reads it as: the same blocks and tensors;
  // the first where text_config names none).
  // What is predicted is that language model trained on text: the vision
  // encoder and its projector (`left_out`) are not modelled, and a note
  // (sim::Model::notes) says so with every prediction. Where text_config
  // is absent or null the config class builds its default (`absent`; none
  // for Llama 4), and Qwen2-VL's and Qwen2.5-VL's released files keep the
  // text keys at the top level (Qwen2_5_VLConfig reads them there, "for BC"). Keys a
  // text_config leaves out take the text-only class's defaults; the head
  // is tied as the text_config says, else as the wrapper does (Qwen3VLConfig
  // carries tie_word_embeddings at both levels). A language model read this
  // way has no head of its own to check (`architectures` names the wrapper's).
  using Kinds = std::vector<std::pair<std::string, std::string>>;  // a text_config's model_type, and what dtsim reads it as
  auto language_model = [&](const std::string& cls, const Kinds& kinds, const std::string& left_out, const YAML::Node* absent) {
    const YAML::Node given = hf["text_config"];
    const bool missing = !given || given.IsNull();
    if (missing && absent == nullptr) c.fail("text_config", "missing; " + cls + "'s config holds the language model's keys there");
    const YAML::Node text = missing ? *absent : given;
    const bool flat = missing && absent == &hf;
    if (!text.IsMap()) c.fail("text_config", "not a mapping; " + cls + "'s config holds the language model's keys there");
    const std::string at = flat ? prefix : prefix + ".text_config";
    std::string read_as = kinds.front().second;
    if (!flat) {
      const sim::ConfigMap t(text, file, at);
      const std::string got = t.get_string("model_type", kinds.front().first);
      const auto kind = std::find_if(kinds.begin(), kinds.end(), [&](const auto& k) { return k.first == got; });
      if (kind == kinds.end()) {
        std::string valid;
        for (const auto& k : kinds) valid += (valid.empty() ? "" : ", ") + k.first;
        t.fail("model_type", "'" + got + "'; valid: " + valid + " (" + cls + "'s language model)");
      }
      read_as = kind->second;
    }
    notes.push_back(file + ": " + cls + "'s language model (" + (flat ? "its text keys" : at) + ") is what is predicted; " + left_out +
                    " are not modelled, as in text-only training");
    YAML::Node read = from_huggingface(text, file, notes, at, read_as);
    if (!missing && !given["tie_word_embeddings"] && c.has("tie_word_embeddings")) {
      read["tied_head"] = c.get_bool("tie_word_embeddings", false);
    }
    return read;
  };
  // A Llama-family decoder's depth, width and heads (Phi3Config's,
  // GraniteConfig's and Olmo2Config's keys and defaults): num_key_value_heads null or absent
  // is one per attention head. Returns the attention heads.
  // `kv_heads` > 0: the class's num_key_value_heads where the key is absent
  // (GptOssConfig's and Glm4MoeConfig's 8); null is one per head either way.
  auto decoder_shape = [&](std::int64_t layers, std::int64_t hidden, std::int64_t attention_heads, std::int64_t kv_heads = 0) {
    ours["family"] = "llama";
    copy_int("num_hidden_layers", "layers", layers);
    copy_int("hidden_size", "hidden", hidden);
    copy_int("num_attention_heads", "heads", attention_heads);
    const std::int64_t heads = ours["heads"].as<std::int64_t>();
    if (c.has("num_key_value_heads") && !hf["num_key_value_heads"].IsNull()) {
      copy_int("num_key_value_heads", "kv_heads", heads);
      check_kv_heads(c, "num_key_value_heads", heads, ours["kv_heads"].as<std::int64_t>());
    } else if (kv_heads > 0 && !hf["num_key_value_heads"]) {
      ours["kv_heads"] = kv_heads;
      check_kv_heads(c, "num_attention_heads", heads, kv_heads);
    } else {
      ours["kv_heads"] = heads;
    }
    return heads;
  };
  // GraniteConfig's and Olmo2Config's keys and defaults beyond the shape
  // (the Llama sizes, 2048 positions, an untied head, attention_bias on q,
  // k, v and o_proj alike; `vocab` theirs); their attention takes head_dim
  // = hidden_size / num_heads, which must divide.
  // A config class's defaults for whole_heads_decoder (LlamaConfig's shape unless said).
  struct DecoderDefaults {
    std::int64_t vocab;
    std::int64_t layers = 32, hidden = 4096, heads = 32, kv_heads = 0, seq_len = 2048;
    bool tied = false;
  };
  auto whole_heads_decoder = [&](const DecoderDefaults& d) {
    const std::int64_t heads = decoder_shape(d.layers, d.hidden, d.heads, d.kv_heads), hidden = ours["hidden"].as<std::int64_t>();
    if (hidden % heads != 0) c.fail("num_attention_heads", std::to_string(heads) + " does not divide hidden_size " + std::to_string(hidden));
    copy_int("intermediate_size", "intermediate", 11008);
    copy_int("vocab_size", "vocab", d.vocab);
    copy_int("max_position_embeddings", "seq_len", d.seq_len);
    ours["tied_head"] = c.get_bool("tie_word_embeddings", d.tied);
    const bool bias = c.get_bool("attention_bias", false);
    ours["qkv_bias"] = bias;
    ours["o_bias"] = bias;
  };
  // A mixture's experts (under `experts_key`) and num_experts_per_tok, no
  // more of these than of those (`what` names the experts in the error).
  // `top_k_key`: the config's name for experts a token (Kimi's
  // num_experts_per_token, Gemma 4's top_k_experts).
  auto routing = [&](const char* experts_key, std::int64_t experts, std::int64_t top_k, const char* what,
                     const char* top_k_key = "num_experts_per_tok") {
    // The bounds the model's own keys take (experts, top_k: 2^20), so that a
    // config's value is refused at its line, once, with the range that holds.
    ours["experts"] = c.get_int(experts_key, experts, 2, 1 << 20);
    ours["top_k"] = c.get_int(top_k_key, top_k, 1, 1 << 20);
    if (ours["top_k"].as<std::int64_t>() > ours["experts"].as<std::int64_t>()) {
      c.fail(top_k_key, std::to_string(ours["top_k"].as<std::int64_t>()) + " exceeds the " +
                            std::to_string(ours["experts"].as<std::int64_t>()) + " " + what);
    }
  };
  // Group-limited routing (DeepSeek-V3's, GLM-4.5's): the router views the
  // routed experts' scores as n_group groups of equal size
  // (DeepseekV3TopkRouter, scores.view(-1, n_group, n_routed_experts //
  // n_group)) and keeps topk_group of them; one group is none.
  // `groups_key`: the config's name for the groups (Kimi's num_expert_group).
  auto group_routing = [&](std::int64_t groups_default, std::int64_t topk_default, const std::string& groups_key = "n_group") {
    const std::int64_t groups = c.get_int(groups_key, groups_default, 1, 1 << 20);
    if (groups <= 1) return;
    const std::int64_t experts = ours["experts"].as<std::int64_t>();
    if (experts % groups != 0) {
      c.fail(groups_key, std::to_string(groups) + " does not divide the " + std::to_string(experts) + " routed experts (the router splits them into " +
                             groups_key + " groups of equal size)");
    }
    ours["route_nodes"] = c.get_int("topk_group", std::min(topk_default, groups), 1, groups);
  };
  // Which layers attend to every key among sliding-window ones: every
  // `fallback`-th, or as the config's layer_types list them (transformers
  // >= 4.53), which must be sliding_attention layers with a full_attention
  // one every n-th. Returns n (0: none global).
  auto global_every = [&](std::int64_t fallback) {
    std::int64_t every = fallback;
    if (!hf["layer_types"] || !hf["layer_types"].IsSequence()) return every;
    const YAML::Node types = hf["layer_types"];
    if (const std::int64_t layers = ours["layers"].as<std::int64_t>(); static_cast<std::int64_t>(types.size()) != layers) {
      c.fail("layer_types", "lists " + std::to_string(types.size()) + " layers; valid: one for each of the " + std::to_string(layers) + " (num_hidden_layers)");
    }
    std::int64_t first_full = -1;
    for (std::size_t i = 0; i < types.size(); ++i) {
      if (types[i].IsScalar() && types[i].Scalar() == "full_attention") {
        first_full = static_cast<std::int64_t>(i);
        break;
      }
    }
    every = first_full + 1;
    for (std::size_t i = 0; i < types.size(); ++i) {
      const std::string t = types[i].IsScalar() ? types[i].Scalar() : "";
      const bool full = every > 0 && (static_cast<std::int64_t>(i) + 1) % every == 0;
      if (t != (full ? "full_attention" : "sliding_attention")) {
        c.fail("layer_types", "layer " + std::to_string(i) + " is '" + t + "'; dtsim models sliding_attention layers with a full_attention one every n-th (" +
                                  (every > 0 ? "here every " + std::to_string(every) + "th" : "none here") + ")");
      }
    }
    return every;
  };
  // Gemma's decoder (Note [Gemma]): GeGLU (gelu_pytorch_tanh), four norms
  // a block, embeddings times sqrt(hidden), q/k norms where `qk_norm`;
  // local layers of `window` keys by default and every n-th global, n
  // from layer_types or `every_default()`. Returns n (1: all global).
  auto gemma_decoder = [&](bool qk_norm, std::int64_t window, const auto& every_default) {
    const std::string act = c.get_string("hidden_activation", c.get_string("hidden_act", "gelu_pytorch_tanh"));
    if (act != "gelu_pytorch_tanh" && act != "gelu_tanh") {
      c.fail(c.has("hidden_activation") ? "hidden_activation" : "hidden_act", "'" + act + "' is not modelled; valid: gelu_pytorch_tanh");
    }
    ours["gelu"] = true;
    ours["gemma_norms"] = true;
    ours["embed_scale"] = true;
    if (qk_norm) ours["qk_norm"] = true;
    ours["sliding_window"] = c.get_int("sliding_window", window, 1, kBig);
    const std::int64_t every = global_every(every_default());
    if (every > 1) ours["global_every"] = every;
    if (every == 1) ours.remove("sliding_window");  // every layer global
    return every;
  };
  // Sliding-window layers with a full one every n-th (`every_default`, or
  // as layer_types list them): gpt-oss's and OLMo 3's. HF's sliding mask
  // needs a window (create_sliding_window_causal_mask refuses none).
  auto windowed = [&](const std::string& model_class, std::int64_t window_default, const std::string& released,
                      std::int64_t every_default) {
    if (hf["sliding_window"] && hf["sliding_window"].IsNull()) {
      c.fail("sliding_window", "null, which " + model_class + "'s sliding_attention layers cannot run; valid: a positive integer (" +
                                   released + ")");
    }
    ours["sliding_window"] = c.get_int("sliding_window", window_default, 1, kBig);
    const std::int64_t every = global_every(every_default);
    if (every > 1) ours["global_every"] = every;
    if (every == 1) ours.remove("sliding_window");  // every layer global
  };
  // NoPE layers (Llama 4's, SmolLM3's): no_rope_layers (1: rotary) is by
  // default 0 on every no_rope_layer_interval-th layer, and a listed one
  // must be that pattern (SmolLM3Config takes one "at least" as long as the
  // layers, `longer`). Returns the interval.
  auto nope_interval = [&](std::int64_t layers, bool longer) {
    const std::int64_t interval = c.get_int("no_rope_layer_interval", 4, 1, 10000);
    if (!c.has("no_rope_layers") || hf["no_rope_layers"].IsNull()) return interval;
    if (!hf["no_rope_layers"].IsSequence()) c.fail("no_rope_layers", "expected a list of 0 and 1, one a layer");
    if (hf["no_rope_layers"].size() == 0) return interval;
    std::vector<std::int64_t> listed = c.get_int_list("no_rope_layers");
    if (longer && static_cast<std::int64_t>(listed.size()) > layers) listed.resize(static_cast<std::size_t>(layers));
    std::vector<std::int64_t> pattern;
    for (std::int64_t i = 0; i < layers; ++i) pattern.push_back((i + 1) % interval != 0 ? 1 : 0);
    if (listed != pattern) {
      c.fail("no_rope_layers", "differs from 0 on every " + std::to_string(interval) + "-th layer and 1 elsewhere (no_rope_layer_interval " +
                                   std::to_string(interval) + "), which is what dtsim models");
    }
    return interval;
  };
  if (type == "gpt2") {
    require_arch({"GPT2LMHeadModel", "GPT2Model"});
    ours["family"] = "gpt2";
    copy_int("n_layer", "layers", 12);
    copy_int("n_embd", "hidden", 768);
    copy_int("n_head", "heads", 12);
    copy_int("vocab_size", "vocab", 50257);
    copy_int("n_positions", "seq_len", 1024);
    if (c.has("n_inner")) copy_int("n_inner", "ffn_hidden", 0);  // null means 4 x n_embd
    ours["tied_head"] = c.get_bool("tie_word_embeddings", true);
  } else if (type == "bert") {
    require_arch({"BertModel", "BertForMaskedLM", "BertForPreTraining", "BertForSequenceClassification"});
    ours["family"] = "bert";
    copy_int("num_hidden_layers", "layers", 12);
    copy_int("hidden_size", "hidden", 768);
    copy_int("num_attention_heads", "heads", 12);
    copy_int("intermediate_size", "intermediate", 3072);
    copy_int("vocab_size", "vocab", 30522);
    copy_int("max_position_embeddings", "max_positions", 512);
    ours["type_vocab"] = c.get_int("type_vocab_size", 2, 0, kBig);
    if (arch == "BertForMaskedLM") ours["mlm_head"] = true;
    if (arch == "BertForSequenceClassification") {
      // id2label's size, else HF's default of 2 labels.
      std::int64_t labels = 2;
      if (hf["id2label"] && hf["id2label"].IsMap()) labels = static_cast<std::int64_t>(hf["id2label"].size());
      ours["num_labels"] = c.get_int("num_labels", labels, 1, kBig);
    }
  } else if (type == "llama" || type == "mistral" || type == "qwen2" || type == "qwen3") {
    const std::string cls = type == "llama" ? "Llama" : type == "mistral" ? "Mistral" : type == "qwen2" ? "Qwen2" : "Qwen3";
    require_arch({cls + "ForCausalLM"});
    ours["family"] = "llama";
    // The defaults of LlamaConfig, MistralConfig, Qwen2Config, Qwen3Config.
    const bool llama = type == "llama", mistral = type == "mistral", qwen3 = type == "qwen3";
    copy_int("num_hidden_layers", "layers", 32);
    copy_int("hidden_size", "hidden", 4096);
    copy_int("num_attention_heads", "heads", 32);
    const std::int64_t heads = ours["heads"].as<std::int64_t>();
    if (c.has("num_key_value_heads")) {
      copy_int("num_key_value_heads", "kv_heads", heads);
      check_kv_heads(c, "num_key_value_heads", heads, ours["kv_heads"].as<std::int64_t>());
    } else {
      ours["kv_heads"] = mistral ? 8 : llama ? heads : 32;
    }
    if (c.has("head_dim")) {
      copy_int("head_dim", "head_dim", 0);
    } else if (qwen3) {
      ours["head_dim"] = 128;  // Qwen3Config's default
    } else if (ours["hidden"].as<std::int64_t>() % heads != 0) {
      c.fail("num_attention_heads", std::to_string(heads) + " does not divide hidden_size " +
                                        std::to_string(ours["hidden"].as<std::int64_t>()) + " and no head_dim is given");
    }
    copy_int("intermediate_size", "intermediate", llama ? 11008 : mistral ? 14336 : 22016);
    copy_int("vocab_size", "vocab", llama ? 32000 : mistral ? 32000 : 151936);
    copy_int("max_position_embeddings", "seq_len", llama ? 2048 : mistral ? 131072 : 32768);
    ours["tied_head"] = c.get_bool("tie_word_embeddings", false);
    if (type == "qwen2") {
      ours["qkv_bias"] = true;  // Qwen2Attention: q/k/v with bias, o_proj without
    } else if (llama || qwen3) {
      const bool bias = c.get_bool("attention_bias", false);
      ours["qkv_bias"] = bias;
      ours["o_bias"] = bias;
    }
    if (llama) ours["mlp_bias"] = c.get_bool("mlp_bias", false);
    if (qwen3) ours["qk_norm"] = true;
    // Mistral's window applies always; Qwen's only with use_sliding_window.
    const bool window = mistral || ((type == "qwen2" || qwen3) && c.get_bool("use_sliding_window", false));
    // MistralConfig's default window is 4096; null means none.
    if (window && c.has("sliding_window")) {
      ours["sliding_window"] = c.get_int("sliding_window", 0, 1, kBig);
    } else if (mistral && !hf["sliding_window"]) {
      ours["sliding_window"] = 4096;
    }
  } else if (type == "phi3") {
    // Note [Phi-3] (llama.cpp): Phi-3 and Phi-4 (Phi3ForCausalLM) are the
    // Llama block with q/k/v and gate/up in one projection each, which is
    // how the family prices them already; the defaults of Phi3Config
    // (transformers' configuration_phi3.py), which are Phi-3-mini's.
    require_arch({"Phi3ForCausalLM"});
    const std::int64_t heads = decoder_shape(32, 3072, 32);
    // Phi3Attention: head_dim where the config has it, else hidden / heads.
    if (c.has("head_dim")) {
      copy_int("head_dim", "head_dim", 0);
    } else if (ours["hidden"].as<std::int64_t>() % heads != 0) {
      c.fail("num_attention_heads", std::to_string(heads) + " does not divide hidden_size " +
                                        std::to_string(ours["hidden"].as<std::int64_t>()) + " and no head_dim is given");
    }
    copy_int("intermediate_size", "intermediate", 8192);
    copy_int("vocab_size", "vocab", 32064);
    copy_int("max_position_embeddings", "seq_len", 4096);
    ours["tied_head"] = c.get_bool("tie_word_embeddings", false);
    // No biases (Phi3Attention's and Phi3MLP's Linears are bias=False); the
    // window, where the config sets one, bounds every layer's attention
    // (Phi3Attention passes config.sliding_window to its attention).
    if (c.has("sliding_window") && !hf["sliding_window"].IsNull()) {
      ours["sliding_window"] = c.get_int("sliding_window", 0, 1, kBig);
    }
    // Phi3DecoderLayer's residual dropouts and the embedding's dropout are
    // not in the family (the published configs set them to 0).
    for (const char* key : {"resid_pdrop", "embd_pdrop"}) {
      if (c.get_double(key, 0, 0, 0.99) > 0) c.fail(key, "dropout there is not modelled; valid: 0.0 (every published Phi-3 and Phi-4 config)");
    }
  } else if (type == "granite") {
    // Note [Granite] (llama.cpp): IBM's Granite 3 (GraniteForCausalLM) is
    // the Llama block with four scalars; the defaults of GraniteConfig
    // (transformers' configuration_granite.py).
    require_arch({"GraniteForCausalLM"});
    whole_heads_decoder({32000});
    ours["mlp_bias"] = c.get_bool("mlp_bias", false);
    // GraniteModel and GraniteDecoderLayer multiply by these whatever their
    // value (1.0 included), and GraniteForCausalLM divides its logits:
    // each is an op. attention_multiplier replaces the scores' scale and
    // changes no work.
    ours["embedding_multiplier"] = c.get_double("embedding_multiplier", 1.0, 1e-6, 1e6);
    ours["residual_multiplier"] = c.get_double("residual_multiplier", 1.0, 1e-6, 1e6);
    ours["logits_scaling"] = c.get_double("logits_scaling", 1.0, 1e-6, 1e6);
  } else if (type == "smollm3") {
    // Note [SmolLM3] (llama.cpp): Hugging Face's SmolLM3 (SmolLM3ForCausalLM);
    // the defaults of SmolLM3Config (configuration_smollm3.py), which are
    // SmolLM3-3B's.
    require_arch({"SmolLM3ForCausalLM"});
    whole_heads_decoder({.vocab = 128256, .layers = 36, .hidden = 2048, .heads = 16, .kv_heads = 4, .seq_len = 32768, .tied = true});
    const std::int64_t layers = ours["layers"].as<std::int64_t>();
    ours["mlp_bias"] = c.get_bool("mlp_bias", false);
    const std::int64_t interval = nope_interval(layers, true);  // its NoPE layers
    // Every layer attends to every key before it unless use_sliding_window
    // puts the NoPE layers in a window, which dtsim does not model.
    if (c.get_bool("use_sliding_window", false) && c.has("sliding_window") && !hf["sliding_window"].IsNull()) {
      c.fail("use_sliding_window", "true with a sliding_window: SmolLM3's windowed NoPE layers are not modelled; valid: false (its releases)");
    }
    if (c.has("layer_types") && hf["layer_types"].IsSequence()) {
      for (std::size_t i = 0; i < hf["layer_types"].size(); ++i) {
        if (!hf["layer_types"][i].IsScalar() || hf["layer_types"][i].Scalar() != "full_attention") {
          c.fail("layer_types", "layer " + std::to_string(i) + " is not 'full_attention', the only kind dtsim models for SmolLM3");
        }
      }
    }
    if (interval <= layers) {
      ours["global_every"] = interval;
      ours["nope_global"] = true;
    }
  } else if (type == "olmo2" || type == "olmo3") {
    // Note [OLMo 2] (llama.cpp): Ai2's OLMo 2 (Olmo2ForCausalLM); the
    // defaults of Olmo2Config (transformers' configuration_olmo2.py).
    // OLMo 3 (Olmo3ForCausalLM, configuration_olmo3.py) is OLMo 2's block
    // with sliding-window attention (sliding_window, 4096 by default) on
    // every layer but each 4th (layer_types' default, as (i + 1) % 4); its
    // full layers' YaRN rotary changes values, not work.
    const bool olmo3 = type == "olmo3";
    require_arch({olmo3 ? "Olmo3ForCausalLM" : "Olmo2ForCausalLM"});
    whole_heads_decoder({50304});
    ours["qk_norm"] = true;
    ours["olmo2_norms"] = true;
    if (olmo3) windowed("Olmo3Model", 4096, "4096 in its releases", 4);
  } else if (type == "gemma2" || type == "gemma3_text") {
    // Note [Gemma] (llama.cpp): the defaults of Gemma2Config and
    // Gemma3TextConfig (transformers), which are Gemma 2 2B's and Gemma 3
    // 4B's shapes.
    const bool g3 = type == "gemma3_text";
    require_arch({g3 ? "Gemma3ForCausalLM" : "Gemma2ForCausalLM"});
    ours["family"] = "llama";
    copy_int("num_hidden_layers", "layers", g3 ? 34 : 26);
    copy_int("hidden_size", "hidden", g3 ? 2560 : 2304);
    copy_int("num_attention_heads", "heads", 8);
    const std::int64_t heads = ours["heads"].as<std::int64_t>();
    copy_int("num_key_value_heads", "kv_heads", 4);
    check_kv_heads(c, "num_key_value_heads", heads, ours["kv_heads"].as<std::int64_t>());
    copy_int("head_dim", "head_dim", 256);
    copy_int("intermediate_size", "intermediate", g3 ? 10240 : 9216);
    copy_int("vocab_size", "vocab", g3 ? 262208 : 256000);
    copy_int("max_position_embeddings", "seq_len", g3 ? 131072 : 8192);
    ours["tied_head"] = c.get_bool("tie_word_embeddings", true);
    // Which layers attend globally: layer_types where the config lists them
    // (transformers >= 4.53), else every sliding_window_pattern-th (Gemma 3)
    // or every other (Gemma 2: is_sliding = not layer_idx % 2).
    gemma_decoder(g3, 4096, [&] { return g3 ? c.get_int("sliding_window_pattern", 6, 1, 10000) : std::int64_t{2}; });
    // A soft cap: the config's, none where it is null, Gemma2Config's
    // default (50 and 30) where Gemma 2's config leaves it out.
    auto cap = [&](const char* from, const char* to, double gemma2_default) {
      if (!hf[from]) {  // absent (null is none: ConfigMap::has is false for both)
        if (!g3) ours[to] = gemma2_default;
      } else if (!hf[from].IsNull()) {
        ours[to] = c.get_double(from, 0, 0, 1e6);
      }
    };
    cap("attn_logit_softcapping", "attn_softcap", 50.0);
    cap("final_logit_softcapping", "final_softcap", 30.0);
    ours["attention_dropout"] = c.get_double("attention_dropout", 0, 0, 0.99);
  } else if (type == "llama4") {
    // Note [Llama 4] (llama.cpp): every Llama 4 checkpoint is the image-and-
    // text Llama4ForConditionalGeneration; its text_config (model_type
    // llama4_text) is the language model dtsim models, the vision encoder
    // and projector (0.87 B parameters in Scout) left out.
    require_arch({"Llama4ForConditionalGeneration"});
    return language_model("Llama4ForConditionalGeneration", {{"llama4_text", "llama4_text"}}, "its vision encoder and projector", nullptr);
  } else if (type == "llama4_text") {
    // Note [Llama 4] (llama.cpp): the defaults of Llama4TextConfig
    // (transformers' configuration_llama4.py), which are Scout's.
    require_arch({"Llama4ForCausalLM"});
    decoder_shape(48, 5120, 40, 8);
    copy_int("head_dim", "head_dim", 128);
    copy_int("intermediate_size_mlp", "intermediate", 16384);  // the dense layers' Llama4TextMLP
    copy_int("vocab_size", "vocab", 202048);
    copy_int("max_position_embeddings", "seq_len", 131072);
    ours["tied_head"] = c.get_bool("tie_word_embeddings", false);
    const std::string act = c.get_string("hidden_act", "silu");
    if (act != "silu") c.fail("hidden_act", "'" + act + "' is not modelled; valid: silu");
    // Llama4TextAttention: q, k, v and o_proj all take attention_bias.
    const bool bias = c.get_bool("attention_bias", false);
    ours["qkv_bias"] = bias;
    ours["o_bias"] = bias;
    routing("num_local_experts", 16, 1, "local experts");
    // Llama4TextExperts are intermediate_size wide, and so is the shared
    // expert (Llama4TextMLP(config)).
    copy_int("intermediate_size", "expert_intermediate", 8192);
    ours["shared_intermediate"] = ours["expert_intermediate"];
    const std::int64_t layers = ours["layers"].as<std::int64_t>();
    // Experts on moe_layers, by default every interleave_moe_layer_step-th
    // layer from step - 1 (Scout 1: all; Maverick 2: the odd ones).
    const std::int64_t step = c.get_int("interleave_moe_layer_step", 1, 1, 10000);
    if (c.has("moe_layers") && !hf["moe_layers"].IsNull()) {
      const std::vector<std::int64_t> listed = c.get_int_list("moe_layers");
      std::vector<std::int64_t> strided;
      for (std::int64_t i = step - 1; i < layers; i += step) strided.push_back(i);
      if (listed != strided) {
        c.fail("moe_layers", "lists layers other than every " + std::to_string(step) + "-th from layer " + std::to_string(step - 1) +
                                 " (interleave_moe_layer_step " + std::to_string(step) + "), which is what dtsim models");
      }
    }
    ours["moe_step"] = step;
    // no_rope_layers (1: rotary), by default 0 on every
    // no_rope_layer_interval-th layer; layer_types make those full_attention
    // and the others chunked_attention of attention_chunk_size (null: none).
    const std::int64_t interval = nope_interval(layers, false);
    if (c.has("layer_types")) {
      const YAML::Node types = hf["layer_types"];
      if (!types.IsSequence() || static_cast<std::int64_t>(types.size()) != layers) {
        c.fail("layer_types", "expected a list of one attention type a layer, " + std::to_string(layers) + " (num_hidden_layers)");
      }
      for (std::size_t i = 0; i < types.size(); ++i) {
        const bool nope = (static_cast<std::int64_t>(i) + 1) % interval == 0;
        if (!types[i].IsScalar() || types[i].Scalar() != (nope ? "full_attention" : "chunked_attention")) {
          c.fail("layer_types", "layer " + std::to_string(i) + " is not '" + (nope ? "full_attention" : "chunked_attention") +
                                    "', which its no_rope_layers entry makes it");
        }
      }
    }
    ours["global_every"] = interval;
    ours["nope_global"] = true;
    if (!(hf["attention_chunk_size"] && hf["attention_chunk_size"].IsNull())) {
      ours["attention_chunk"] = c.get_int("attention_chunk_size", 8192, 1, kBig);
    }
    // attn_temperature_tuning: true or, in the released config.json, 4
    // (any value but false and 0 is on).
    bool tuning = !(hf["attn_temperature_tuning"] && hf["attn_temperature_tuning"].IsNull());
    if (c.has("attn_temperature_tuning")) {
      const YAML::Node t = hf["attn_temperature_tuning"];
      bool b = false;
      double x = 0;
      if (t.Tag() == "!") {
        c.fail("attn_temperature_tuning", "is a string; valid: true, false or a number (the released configs' 4)");
      } else if (YAML::convert<bool>::decode(t, b)) {
        tuning = b;
      } else if (YAML::convert<double>::decode(t, x)) {
        tuning = x != 0;
      } else {
        c.fail("attn_temperature_tuning", "is neither a boolean nor a number");
      }
    }
    ours["attn_temperature"] = tuning;
    (void)c.get_double("floor_scale", 8192, 1, 1e12);  // values, not work
    (void)c.get_double("attn_scale", 0.1, 0, 1e6);
    // Llama4TextL2Norm on the rotary layers' q and k (Scout's; not Maverick's).
    // null is off, as in HF (an absent key is Llama4TextConfig's true).
    ours["l2_qk_norm"] = !(hf["use_qk_norm"] && hf["use_qk_norm"].IsNull()) && c.get_bool("use_qk_norm", true);
  } else if (type == "gemma4") {
    // Note [Gemma 4] (llama.cpp): Gemma4ForConditionalGeneration keeps its
    // language model in text_config (model_type gemma4_text), beside its
    // vision tower (and the small models' audio tower).
    require_arch({"Gemma4ForConditionalGeneration", "Gemma4ForCausalLM"});
    if (hf["text_config"] && !hf["text_config"].IsNull()) {
      return language_model("Gemma4ForConditionalGeneration", {{"gemma4_text", "gemma4_text"}}, "its vision and audio towers", nullptr);
    }
    return from_huggingface(hf, file, notes, prefix, "gemma4_text");
  } else if (type == "gemma4_text") {
    // Note [Gemma 4] (llama.cpp): Gemma4TextConfig's keys as
    // Megatron-Bridge's Gemma4Bridge reads them; keys left out take Gemma
    // 4 31B's values.
    require_arch({"Gemma4ForCausalLM"});
    decoder_shape(60, 5376, 32, 16);
    copy_int("head_dim", "head_dim", 256);
    copy_int("intermediate_size", "intermediate", 21504);
    copy_int("vocab_size", "vocab", 262144);
    copy_int("max_position_embeddings", "seq_len", 262144);
    ours["tied_head"] = c.get_bool("tie_word_embeddings", true);
    const std::int64_t every = gemma_decoder(true, 1024, [] { return std::int64_t{6}; });
    ours["v_norm"] = true;
    if (every > 1) {
      ours["global_head_dim"] = c.get_int("global_head_dim", 512, 1, 1 << 20);
      if (c.has("num_global_key_value_heads")) ours["global_kv_heads"] = c.get_int("num_global_key_value_heads", 1, 1, 1 << 20);
      ours["k_eq_v"] = c.get_bool("attention_k_eq_v", false);
    }
    if (!hf["final_logit_softcapping"] || !hf["final_logit_softcapping"].IsNull()) {
      ours["final_softcap"] = c.get_double("final_logit_softcapping", 30.0, 0, 1e6);
    }
    // The small models' per-layer inputs, layers sharing keys and values,
    // and E2B's wider MLPs on those.
    if (const std::int64_t ple = c.get_int("hidden_size_per_layer_input", 0, 0, 1 << 20); ple > 0) {
      ours["ple_dim"] = ple;
      ours["ple_vocab"] = c.get_int("vocab_size_per_layer_input", ours["vocab"].as<std::int64_t>(), 1, kBig);
    }
    if (const std::int64_t shared = c.get_int("num_kv_shared_layers", 0, 0, 10000); shared > 0) ours["kv_shared_layers"] = shared;
    if (c.get_bool("use_double_wide_mlp", false)) ours["double_wide_mlp"] = true;
    if (c.get_bool("enable_moe_block", false)) {
      // The 26B-A4B: every layer a GeGLU of intermediate_size beside the
      // experts, each branch with its norms; the router's per-expert scale
      // counted as router_bias's E.
      routing("num_experts", 128, 8, "experts (num_experts)", "top_k_experts");
      copy_int("moe_intermediate_size", "expert_intermediate", 704);
      ours["shared_intermediate"] = ours["intermediate"];
      ours["router_bias"] = true;
      ours["moe_branch_norms"] = true;
    }
  } else if (type == "gemma3") {
    // Gemma3ForConditionalGeneration (google/gemma-3-{4,12,27}b-*): the
    // language model is its text_config (Gemma3Config's default: a
    // Gemma3TextConfig's), beside a SigLIP vision tower and projector.
    require_arch({"Gemma3ForConditionalGeneration"});
    const YAML::Node defaults(YAML::NodeType::Map);  // Gemma3TextConfig's
    return language_model("Gemma3ForConditionalGeneration", {{"gemma3_text", "gemma3_text"}}, "its SigLIP vision tower and projector", &defaults);
  } else if (type == "qwen2_5_vl" || type == "qwen2_vl") {
    // Note [Image-and-text configs]: Qwen2-VL's and Qwen2.5-VL's language
    // model is Qwen2's decoder (Qwen2_5_VLAttention: q/k/v with bias, o_proj
    // without; its multimodal rotary costs as rotary does on text).
    const bool v25 = type == "qwen2_5_vl";
    const std::string cls = v25 ? "Qwen2_5_VLForConditionalGeneration" : "Qwen2VLForConditionalGeneration";
    require_arch({cls});
    return language_model(cls, {{v25 ? "qwen2_5_vl_text" : "qwen2_vl_text", "qwen2"}}, "its vision encoder and merger", &hf);
  } else if (type == "internvl") {
    // InternVL 3 and 3.5 as transformers writes them (InternVLConfig): an
    // InternViT tower and projector before any decoder as text_config,
    // Qwen2's where it names none (InternVL3), Qwen3's, Qwen3-MoE's or
    // gpt-oss's in InternVL3.5's releases.
    require_arch({"InternVLForConditionalGeneration"});
    const YAML::Node defaults(YAML::NodeType::Map);  // the first kind's
    return language_model("InternVLForConditionalGeneration",
                          {{"qwen2", "qwen2"}, {"qwen3", "qwen3"}, {"qwen3_moe", "qwen3_moe"}, {"llama", "llama"}, {"gpt_oss", "gpt_oss"}},
                          "its vision tower and projector", &defaults);
  } else if (type == "qwen3_vl" || type == "qwen3_vl_moe") {
    // Note [Image-and-text configs]: Qwen3-VL's language model is Qwen3's
    // decoder (q/k norms), its MoE variant Qwen3-MoE's; the vision
    // features it adds to its first layers' hidden states (deepstack) are
    // the vision tower's, absent from text.
    const bool moe = type == "qwen3_vl_moe";
    const std::string cls = moe ? "Qwen3VLMoeForConditionalGeneration" : "Qwen3VLForConditionalGeneration";
    require_arch({cls});
    const YAML::Node defaults(YAML::NodeType::Map);
    return language_model(cls, {{moe ? "qwen3_vl_moe_text" : "qwen3_vl_text", moe ? "qwen3_moe" : "qwen3"}}, "its vision encoder and merger",
                          &defaults);
  } else if (type == "mistral3") {
    // Mistral3ForConditionalGeneration (Mistral Small 3.1 and 3.2, Magistral
    // and Devstral Small, Ministral 3): the language model is its
    // text_config, a MistralConfig or a Ministral3Config, beside a Pixtral
    // vision encoder and projector; without one, Mistral3Config builds
    // Mistral Small 3.1's (transformers' configuration_mistral3.py).
    require_arch({"Mistral3ForConditionalGeneration"});
    YAML::Node small_3_1(YAML::NodeType::Map);
    for (const auto& [key, value] : {std::pair{"head_dim", 128}, {"hidden_size", 5120}, {"intermediate_size", 32768},
                                     {"max_position_embeddings", 131072}, {"num_attention_heads", 32}, {"num_hidden_layers", 40},
                                     {"num_key_value_heads", 8}, {"vocab_size", 131072}}) {
      small_3_1[key] = value;
    }
    small_3_1["sliding_window"] = YAML::Node(YAML::NodeType::Null);
    // Ministral 3's checkpoints hold a Ministral3Config there (Note [Ministral 3]).
    return language_model("Mistral3ForConditionalGeneration", {{"mistral", "mistral"}, {"ministral3", "ministral3"}},
                          "its Pixtral vision encoder and projector", &small_3_1);
  } else if (type == "llava" || type == "llava_next" || type == "llava_onevision") {
    // LLaVA 1.5, LLaVA-NeXT and LLaVA-OneVision (LlavaConfig,
    // LlavaNextConfig, LlavaOnevisionConfig): a CLIP or SigLIP vision tower
    // and a projector before any decoder as text_config (a LlamaConfig by
    // default; Qwen2's in OneVision's releases).
    const std::string cls = type == "llava" ? "LlavaForConditionalGeneration"
                            : type == "llava_next" ? "LlavaNextForConditionalGeneration"
                                                   : "LlavaOnevisionForConditionalGeneration";
    require_arch({cls});
    const YAML::Node defaults(YAML::NodeType::Map);  // the first kind's: the class's default text_config
    Kinds kinds{{"llama", "llama"}, {"mistral", "mistral"}, {"qwen2", "qwen2"}};
    if (type == "llava_onevision") std::swap(kinds[0], kinds[2]);
    return language_model(cls, kinds, "its vision tower and projector", &defaults);
  } else if (type == "gemma") {
    c.fail("model_type", "'gemma' (Gemma 1) is not supported; valid: " + std::string(kHfTypes));
  } else if (type == "gpt_oss") {
    // Note [gpt-oss] (llama.cpp): OpenAI's gpt-oss (GptOssForCausalLM); the
    // defaults of GptOssConfig (transformers' configuration_gpt_oss.py),
    // which are gpt-oss-120b's.
    require_arch({"GptOssForCausalLM"});
    const std::int64_t heads = decoder_shape(36, 2880, 64, 8);
    if (hf["head_dim"] && hf["head_dim"].IsNull()) {
      // GptOssConfig: null is hidden_size // num_attention_heads.
      const std::int64_t hidden = ours["hidden"].as<std::int64_t>();
      if (hidden % heads != 0) c.fail("head_dim", "null, and num_attention_heads " + std::to_string(heads) + " does not divide hidden_size " + std::to_string(hidden));
      ours["head_dim"] = hidden / heads;
    } else {
      copy_int("head_dim", "head_dim", 64);
    }
    copy_int("intermediate_size", "intermediate", 2880);
    ours["expert_intermediate"] = ours["intermediate"];  // GptOssExperts: expert_dim = intermediate_size
    copy_int("vocab_size", "vocab", 201088);
    copy_int("max_position_embeddings", "seq_len", 131072);
    ours["tied_head"] = c.get_bool("tie_word_embeddings", false);
    // num_experts is GptOssConfig's alias (attribute_map) of num_local_experts.
    routing(c.has("num_local_experts") || !c.has("num_experts") ? "num_local_experts" : "num_experts", 128, 4, "local experts");
    // GptOssAttention's four projections take attention_bias (true); the
    // experts' gate_up and down projections and the router always have biases.
    const bool bias = c.get_bool("attention_bias", true);
    ours["qkv_bias"] = bias;
    ours["o_bias"] = bias;
    ours["mlp_bias"] = true;
    ours["router_bias"] = true;
    ours["attention_sinks"] = true;
    ours["fp32_norm_weight"] = true;
    // GptOssExperts clamps at swiglu_limit (7.0); swiglu_alpha (1.702) changes values, not work.
    ours["swiglu_limit"] = c.get_double("swiglu_limit", 7.0, 1e-6, 1e6);
    (void)c.get_double("swiglu_alpha", 1.702, 0, 1e6);
    // Sliding layers see sliding_window keys, every other layer all of them
    // (layer 0 sliding), or as layer_types lists them.
    windowed("GptOssModel", 128, "128 in both releases", 2);
  } else if (type == "ministral3") {
    // Note [Ministral 3] (llama.cpp): the defaults of Ministral3Config
    // (transformers' configuration_ministral3.py), which are Ministral 3 8B's.
    require_arch({"Ministral3ForCausalLM"});
    decoder_shape(34, 4096, 32, 8);
    copy_int("head_dim", "head_dim", 128);
    copy_int("intermediate_size", "intermediate", 14336);
    copy_int("vocab_size", "vocab", 131072);
    copy_int("max_position_embeddings", "seq_len", 262144);
    ours["tied_head"] = c.get_bool("tie_word_embeddings", false);
    if (c.has("sliding_window")) ours["sliding_window"] = c.get_int("sliding_window", 0, 1, kBig);  // null: none
    // The queries' scale: the rope parameters' (rope_scaling before
    // transformers 5), else Ministral3Config's default yarn block's.
    double beta = 0.1;
    std::int64_t length = 16384;
    const char* rope = hf["rope_parameters"] ? "rope_parameters" : "rope_scaling";
    if (hf[rope] && !hf[rope].IsNull()) {
      if (!hf[rope].IsMap()) c.fail(rope, "not a mapping; Ministral3Attention reads llama_4_scaling_beta from it");
      const sim::ConfigMap r(hf[rope], file, prefix + "." + rope);
      if (!r.has("llama_4_scaling_beta")) r.fail("llama_4_scaling_beta", "missing; Ministral3Attention scales every query by it");
      if (!r.has("original_max_position_embeddings")) {
        r.fail("original_max_position_embeddings", "missing; Ministral3Attention's query scale steps every that many positions");
      }
      beta = r.get_double("llama_4_scaling_beta", 0.1, 0, 1e6);
      length = r.get_int("original_max_position_embeddings", 16384, 1, kBig);
    }
    if (beta > 0) {
      ours["q_scaling_beta"] = beta;
      ours["q_scaling_length"] = length;
    }
  } else if (type == "minimax_m2") {
    // Note [MiniMax-M2] (llama.cpp): the defaults of MiniMaxM2Config
    // (transformers' configuration_minimax_m2.py), which are MiniMax-M2's.
    require_arch({"MiniMaxM2ForCausalLM"});
    decoder_shape(62, 3072, 48, 8);
    copy_int("head_dim", "head_dim", 128);
    // MixtralExperts of intermediate_size each; no dense layer, no shared expert.
    copy_int("intermediate_size", "expert_intermediate", 1536);
    ours["intermediate"] = ours["expert_intermediate"];
    if (const std::int64_t shared = c.get_int("shared_intermediate_size", 0, 0, kBig); shared > 0) {
      c.fail("shared_intermediate_size", std::to_string(shared) + ", a shared expert's width; MiniMaxM2ForCausalLM builds none; valid: 0");
    }
    routing(c.has("num_local_experts") || !c.has("num_experts") ? "num_local_experts" : "num_experts", 256, 8, "local experts");
    copy_int("vocab_size", "vocab", 200064);
    copy_int("max_position_embeddings", "seq_len", 196608);
    ours["tied_head"] = c.get_bool("tie_word_embeddings", false);
    // MiniMaxM2Attention (FlexOlmoAttention's) always norms q and k over the
    // whole projections; the released file's use_qk_norm and qk_norm_type
    // are its remote code's, read by nothing in transformers.
    ours["qk_norm"] = true;
    ours["whole_qk_norm"] = true;
  } else if (type == "glm4_moe") {
    // Note [GLM-4.5] (llama.cpp): Zhipu's GLM-4.5, 4.6 and 4.7 and GLM-4.5-Air
    // (Glm4MoeForCausalLM); the defaults of Glm4MoeConfig (transformers'
    // configuration_glm4_moe.py), which are GLM-4.5-Air's.
    require_arch({"Glm4MoeForCausalLM"});
    decoder_shape(46, 4096, 96, 8);
    copy_int("head_dim", "head_dim", 128);
    copy_int("intermediate_size", "intermediate", 10944);
    copy_int("vocab_size", "vocab", 151552);
    copy_int("max_position_embeddings", "seq_len", 131072);
    ours["tied_head"] = c.get_bool("tie_word_embeddings", false);
    // Glm4MoeAttention: q, k and v take attention_bias, o_proj none; q/k
    // norms per head under use_qk_norm.
    ours["qkv_bias"] = c.get_bool("attention_bias", false);
    ours["qk_norm"] = c.get_bool("use_qk_norm", false);
    routing("n_routed_experts", 128, 8, "routed experts");
    copy_int("moe_intermediate_size", "expert_intermediate", 1408);
    // Glm4MoeMoE's shared experts: one MLP of moe_intermediate_size x n_shared_experts.
    ours["shared_intermediate"] = c.get_int("n_shared_experts", 1, 0, kBig) * ours["expert_intermediate"].as<std::int64_t>();
    // Glm4MoeDecoderLayer: experts where layer_idx >= first_k_dense_replace.
    ours["first_dense"] = c.get_int("first_k_dense_replace", 1, 0, 10000);
    // Group-limited routing as DeepSeek-V3's (1 group: none).
    group_routing(1, 1);
  } else if (type == "qwen3_next" || type == "qwen3_5_text" || type == "qwen3_5_moe_text") {
    // Note [Gated DeltaNet] (llama.cpp): Qwen3NextConfig's, Qwen3_5TextConfig's
    // and Qwen3_5MoeTextConfig's keys and defaults; Qwen3.5's is dense,
    // the other two mixtures with a gated shared expert (Qwen2-MoE's).
    const bool next = type == "qwen3_next", dense = type == "qwen3_5_text";
    require_arch({next ? "Qwen3NextForCausalLM" : dense ? "Qwen3_5ForCausalLM" : "Qwen3_5MoeForCausalLM"});
    ours["family"] = "llama";
    copy_int("num_hidden_layers", "layers", next ? 48 : dense ? 32 : 40);
    copy_int("hidden_size", "hidden", dense ? 4096 : 2048);
    copy_int("num_attention_heads", "heads", 16);
    copy_int("num_key_value_heads", "kv_heads", dense ? 4 : 2);
    check_kv_heads(c, "num_key_value_heads", ours["heads"].as<std::int64_t>(), ours["kv_heads"].as<std::int64_t>());
    copy_int("head_dim", "head_dim", 256);
    copy_int("vocab_size", "vocab", next ? 151936 : 248320);
    copy_int("max_position_embeddings", "seq_len", 32768);
    ours["tied_head"] = c.get_bool("tie_word_embeddings", false);
    const bool bias = c.get_bool("attention_bias", false);
    ours["qkv_bias"] = bias;
    ours["o_bias"] = bias;
    ours["qk_norm"] = true;
    ours["zero_centered_norms"] = true;
    ours["attn_output_gate"] = true;
    copy_int("linear_num_key_heads", "linear_key_heads", 16);
    copy_int("linear_num_value_heads", "linear_value_heads", 32);
    copy_int("linear_key_head_dim", "linear_key_dim", 128);
    copy_int("linear_value_head_dim", "linear_value_dim", 128);
    copy_int("linear_conv_kernel_dim", "linear_conv_kernel", 4);
    // Which layers attend: layer_types where the config lists them, else
    // every full_attention_interval-th (4), the others linear_attention.
    const std::int64_t layers = ours["layers"].as<std::int64_t>();
    std::int64_t interval = c.get_int("full_attention_interval", 4, 1, 10000);
    if (c.has("layer_types") && !hf["layer_types"].IsNull()) {
      const YAML::Node types = hf["layer_types"];
      if (!types.IsSequence() || static_cast<std::int64_t>(types.size()) != layers) {
        c.fail("layer_types", "expected a list of one token mixer a layer, " + std::to_string(layers) + " (num_hidden_layers)");
      }
      interval = 0;
      for (std::size_t i = 0; i < types.size() && interval == 0; ++i) {
        if (types[i].IsScalar() && types[i].Scalar() == "full_attention") interval = static_cast<std::int64_t>(i) + 1;
      }
      for (std::size_t i = 0; i < types.size(); ++i) {
        const bool full = interval > 0 && (static_cast<std::int64_t>(i) + 1) % interval == 0;
        if (!types[i].IsScalar() || types[i].Scalar() != (full ? "full_attention" : "linear_attention")) {
          c.fail("layer_types", "layer " + std::to_string(i) + " is not '" + (full ? "full_attention" : "linear_attention") +
                                    "'; dtsim models linear_attention layers with a full_attention one every n-th" +
                                    (interval > 0 ? " (here n = " + std::to_string(interval) + ")" : ""));
        }
      }
      if (interval == 0) c.fail("layer_types", "lists no full_attention layer; dtsim models linear_attention layers with a full_attention one every n-th");
    }
    ours["full_attention_interval"] = interval;
    if (dense) {
      copy_int("intermediate_size", "intermediate", 12288);
    } else {
      routing("num_experts", next ? 512 : 256, next ? 10 : 8, "routed experts");
      copy_int("moe_intermediate_size", "expert_intermediate", 512);
      // Qwen3.5-MoE has no dense layer (nor an intermediate_size); Qwen3-Next's
      // dense layers (decoder_sparse_step) are intermediate_size wide.
      copy_int(next ? "intermediate_size" : "moe_intermediate_size", "intermediate", next ? 5632 : 512);
      ours["shared_intermediate"] = c.get_int("shared_expert_intermediate_size", 512, 0, kBig);
      ours["shared_expert_gate"] = true;
      if (next) {
        ours["moe_step"] = c.get_int("decoder_sparse_step", 1, 1, 10000);
        if (hf["mlp_only_layers"] && hf["mlp_only_layers"].IsSequence() && hf["mlp_only_layers"].size() > 0) {
          c.fail("mlp_only_layers", "dense layers listed by index are not modelled; valid: [] (decoder_sparse_step sets a stride)");
        }
      }
    }
  } else if (type == "kimi_k3") {
    // Note [Kimi K3] (llama.cpp): KimiK3ForConditionalGeneration keeps its
    // language model in text_config (Megatron-Bridge's KimiK3Bridge reads it there).
    require_arch({"KimiK3ForConditionalGeneration"});
    return language_model("KimiK3ForConditionalGeneration", {{"kimi_k3_text", "kimi_k3_text"}, {"kimi_k3", "kimi_k3_text"}},
                          "its vision tower and projector", nullptr);
  } else if (type == "kimi_linear" || type == "kimi_k3_text") {
    // Note [Kimi Delta Attention] (llama.cpp): Kimi Linear's config
    // (KimiLinearForCausalLM, configuration_kimi.py) and Kimi K3's
    // text_config, read as Megatron-Bridge's KimiK3Bridge reads them; keys
    // left out take the released checkpoint's values (Kimi-Linear-48B-A3B,
    // Kimi-K3).
    const bool k3 = type == "kimi_k3_text";
    require_arch({"KimiLinearForCausalLM"});
    ours["family"] = "llama";
    copy_int("num_hidden_layers", "layers", k3 ? 93 : 27);
    copy_int("hidden_size", "hidden", k3 ? 7168 : 2304);
    copy_int("num_attention_heads", "heads", k3 ? 96 : 32);
    ours["kv_heads"] = ours["heads"];  // latent attention: a key and value a head
    copy_int("intermediate_size", "intermediate", k3 ? 33792 : 9216);
    copy_int("vocab_size", "vocab", 163840);
    copy_int("max_position_embeddings", "seq_len", 1048576);
    ours["tied_head"] = c.get_bool("tie_word_embeddings", false);
    // Latent attention (DeepSeek-V3's keys) without rotary positions (K3:
    // position_embedding_type none; Kimi Linear: mla_use_nope).
    if (hf["q_lora_rank"] && hf["q_lora_rank"].IsNull()) {
      ours["q_lora_rank"] = 0;
    } else {
      ours["q_lora_rank"] = c.get_int("q_lora_rank", k3 ? 1536 : 0, 0, kBig);
    }
    copy_int("kv_lora_rank", "kv_lora_rank", 512);
    copy_int("qk_nope_head_dim", "qk_nope_dim", 128);
    copy_int("qk_rope_head_dim", "qk_rope_dim", 64);
    copy_int("v_head_dim", "v_head_dim", 128);
    ours["rotary"] = k3 ? false : !c.get_bool("mla_use_nope", true);
    if (k3) ours["attn_output_gate"] = true;  // KimiK3Attention's g_proj
    // The mixture of experts: first_k_dense_replace dense layers, then
    // experts on every layer (moe_layer_freq 1), num_shared_experts of
    // moe_intermediate_size beside them.
    routing("num_experts", k3 ? 896 : 256, k3 ? 16 : 8, "routed experts (num_experts)", "num_experts_per_token");
    copy_int("moe_intermediate_size", "expert_intermediate", k3 ? 3072 : 1024);
    ours["shared_intermediate"] = c.get_int("num_shared_experts", k3 ? 2 : 1, 0, 1 << 20) * ours["expert_intermediate"].as<std::int64_t>();
    ours["first_dense"] = c.get_int("first_k_dense_replace", 1, 0, 10000);
    if (c.get_int("moe_layer_freq", 1, 1, 10000) != 1) c.fail("moe_layer_freq", "only 1 is modelled (every layer after the dense ones)");
    if (c.get_bool("use_grouped_topk", k3)) group_routing(1, 1, "num_expert_group");
    if (const std::string act = c.get_string("hidden_act", k3 ? "situ" : "silu"); act == "situ") {
      ours["situ"] = true;
    } else if (act != "silu") {
      c.fail("hidden_act", "'" + act + "'; valid: silu (Kimi Linear's), situ (Kimi K3's)");
    }
    if (c.get_int("num_nextn_predict_layers", 0, 0, 64) > 0) {
      notes.push_back(file + ": num_nextn_predict_layers: the multi-token prediction layer is not trained by the model's own class; not modelled");
    }
    if (k3) {
      // Note [Latent MoE]: routed_expert_hidden_size, its norm; Note [Attention residuals].
      copy_int("routed_expert_hidden_size", "moe_latent", 3584);
      ours["latent_norm"] = c.get_bool("latent_moe_use_norm", true);
      ours["attn_res_block"] = c.get_int("attn_res_block_size", 12, 1, 10000);
    }
    // linear_attn_config: which layers (1-indexed) are Kimi Delta Attention.
    if (!hf["linear_attn_config"] || !hf["linear_attn_config"].IsMap()) {
      c.fail("linear_attn_config", "missing or not a mapping; it lists the Kimi Delta Attention layers (kda_layers) and their heads");
    }
    const sim::ConfigMap la = c.sub("linear_attn_config");
    const std::int64_t layers = ours["layers"].as<std::int64_t>();
    const std::vector<std::int64_t> kda = la.get_int_list("kda_layers");
    std::string mixers(static_cast<std::size_t>(layers), '*');
    for (const std::int64_t n : kda) {
      if (n < 1 || n > layers) la.fail("kda_layers", "holds " + std::to_string(n) + "; valid: layer numbers 1 to " + std::to_string(layers) + " (num_hidden_layers)");
      if (mixers[static_cast<std::size_t>(n - 1)] == 'L') la.fail("kda_layers", "lists layer " + std::to_string(n) + " twice");
      mixers[static_cast<std::size_t>(n - 1)] = 'L';
    }
    if (kda.empty()) la.fail("kda_layers", "missing or empty; valid: the layer numbers (1-indexed) of the Kimi Delta Attention layers");
    if (la.has("full_attn_layers")) {
      for (const std::int64_t n : la.get_int_list("full_attn_layers")) {
        if (n < 1 || n > layers || mixers[static_cast<std::size_t>(n - 1)] == 'L') {
          la.fail("full_attn_layers", "holds " + std::to_string(n) + ", which kda_layers lists or num_hidden_layers has not; valid: the other layers, 1-indexed");
        }
      }
      if (static_cast<std::int64_t>(la.get_int_list("full_attn_layers").size() + kda.size()) != layers) {
        la.fail("full_attn_layers", "with kda_layers leaves layers out; valid: the two lists together name each of the " + std::to_string(layers) + " layers once");
      }
    }
    ours["layer_mixers"] = mixers;
    ours["kda"] = true;
    const std::int64_t heads = la.get_int("num_heads", k3 ? 96 : 32, 1, 1 << 20), dim = la.get_int("head_dim", 128, 1, 1 << 20);
    ours["linear_key_heads"] = heads;
    ours["linear_value_heads"] = heads;
    ours["linear_key_dim"] = dim;
    ours["linear_value_dim"] = dim;
    ours["linear_conv_kernel"] = la.get_int("short_conv_kernel_size", 4, 1, 1024);
    (void)la.get_double("gate_lower_bound", -5, -1e9, 1e9);
    if (!k3) ours["kda_gate_rank"] = dim;  // Kimi Linear's g_a_proj, g_b_proj
  } else if (type == "nemotron_h") {
    // Note [Mamba-2] (llama.cpp): NemotronHConfig's keys and defaults
    // (configuration_nemotron_h.py), its layers as modeling_nemotron_h.py
    // builds them: each layer one mixer (Mamba-2, attention without
    // rotary, the squared-ReLU MLP or the MoE) with its pre-norm.
    require_arch({"NemotronHForCausalLM"});
    ours["family"] = "llama";
    // The pattern: hybrid_override_pattern, or layers_block_type (the
    // newer config's list, legacy names too); else the class's (Nemotron-H 8B's).
    std::string pattern = "M-M-M-M*-M-M-M-M-M*-M-M-M-M-M*-M-M-M-M-M*-M-M-M-M-M-";
    if (c.has("hybrid_override_pattern") && !hf["hybrid_override_pattern"].IsNull()) {
      pattern = c.get_string("hybrid_override_pattern", pattern);
    } else if (c.has("layers_block_type") && !hf["layers_block_type"].IsNull()) {
      const YAML::Node types = hf["layers_block_type"];
      if (!types.IsSequence() || types.size() == 0) c.fail("layers_block_type", "expected a list of one block type a layer");
      pattern.clear();
      for (std::size_t i = 0; i < types.size(); ++i) {
        const std::string t = types[i].IsScalar() ? types[i].Scalar() : "";
        const char letter = t == "mamba" || t == "linear_attention" ? 'M' : t == "attention" || t == "full_attention" ? '*'
                            : t == "mlp" ? '-' : t == "moe" ? 'E' : '\0';
        if (letter == '\0') {
          c.fail("layers_block_type", "layer " + std::to_string(i) + " is '" + t + "'; valid: mamba (linear_attention), attention (full_attention), mlp, moe");
        }
        pattern += letter;
      }
    }
    for (std::size_t i = 0; i < pattern.size(); ++i) {
      if (std::string_view("M*-E").find(pattern[i]) == std::string_view::npos) {
        c.fail(c.has("hybrid_override_pattern") ? "hybrid_override_pattern" : "layers_block_type",
               std::string("letter ") + std::to_string(i + 1) + " is '" + pattern[i] + "'; valid: M (Mamba-2), * (attention), - (MLP), E (MoE)");
      }
    }
    if (pattern.empty()) c.fail("hybrid_override_pattern", "is empty; valid: a letter a layer (M, *, -, E)");
    // num_hidden_layers, where given, must count the pattern's layers (the class asserts it).
    if (c.has("num_hidden_layers") && !hf["num_hidden_layers"].IsNull() &&
        c.get_int("num_hidden_layers", 1, 1, 10000) != static_cast<std::int64_t>(pattern.size())) {
      c.fail("num_hidden_layers", "contradicts the pattern's " + std::to_string(pattern.size()) + " layers");
    }
    ours["hybrid_pattern"] = pattern;
    copy_int("hidden_size", "hidden", 4096);
    copy_int("num_attention_heads", "heads", 32);
    copy_int("num_key_value_heads", "kv_heads", 8);
    check_kv_heads(c, "num_key_value_heads", ours["heads"].as<std::int64_t>(), ours["kv_heads"].as<std::int64_t>());
    copy_int("head_dim", "head_dim", 128);
    copy_int("intermediate_size", "intermediate", 21504);
    copy_int("vocab_size", "vocab", 131072);
    copy_int("max_position_embeddings", "seq_len", 4096);
    ours["tied_head"] = c.get_bool("tie_word_embeddings", false);
    const bool bias = c.get_bool("attention_bias", false);
    ours["qkv_bias"] = bias;
    ours["o_bias"] = bias;
    ours["mlp_bias"] = c.get_bool("mlp_bias", false);
    ours["rotary"] = false;  // NemotronHAttention applies no rotary
    ours["squared_relu"] = true;
    if (const std::string act = c.get_string("mlp_hidden_act", "relu2"); act != "relu2") {
      c.fail("mlp_hidden_act", "'" + act + "'; dtsim models relu2 (squared ReLU), the one Nemotron-H trains with");
    }
    if (const std::string act = c.get_string("mamba_hidden_act", "silu"); act != "silu") {
      c.fail("mamba_hidden_act", "'" + act + "'; dtsim models silu, the convolution's activation in mamba_split_conv1d_scan_combined");
    }
    // Legacy names first where the config uses them (NemotronHConfig's attribute_map).
    auto alias = [&](const char* name, const char* legacy) { return c.has(name) || !c.has(legacy) ? name : legacy; };
    if (pattern.find('M') != std::string::npos) {  // our mamba_* keys are read only with Mamba layers
      copy_int("mamba_num_heads", "mamba_heads", 128);
      copy_int("mamba_head_dim", "mamba_head_dim", 64);
      copy_int("ssm_state_size", "mamba_state", 128);
      copy_int(alias("n_groups", "mamba_n_groups"), "mamba_groups", 8);
      copy_int(alias("conv_kernel", "mamba_d_conv"), "mamba_conv_kernel", 4);
      copy_int(alias("chunk_size", "mamba_chunk_size"), "mamba_chunk", 128);
    }
    // Biases the model does not carry: in_proj's and out_proj's (use_bias,
    // mamba_proj_bias); the convolution's is counted (use_conv_bias).
    for (const char* key : {"use_bias", "mamba_proj_bias"}) {
      if (c.get_bool(key, false)) c.fail(key, "true: Mamba-2 projections with biases are not modelled; valid: false (every Nemotron-H checkpoint's)");
    }
    if (!c.get_bool(alias("use_conv_bias", "mamba_conv_bias"), true)) {
      c.fail(alias("use_conv_bias", "mamba_conv_bias"), "false: a convolution without its bias is not modelled; valid: true (every Nemotron-H checkpoint's)");
    }
    if (pattern.find('E') != std::string::npos) {
      // NemotronHMoE: a sigmoid router (its correction bias a buffer),
      // routed experts and one shared expert, each up, squared ReLU, down.
      routing("n_routed_experts", 8, 2, "routed experts");
      copy_int("moe_intermediate_size", "expert_intermediate", 7688);
      const std::int64_t shared = c.get_int("n_shared_experts", 1, 0, 1 << 20);
      ours["shared_intermediate"] = shared > 0 ? c.get_int("moe_shared_expert_intermediate_size", 7688, 1, kBig) : 0;
      group_routing(1, 1);
      // Note [Latent MoE] (llama.cpp): Nemotron 3 Super's and Ultra's
      // routed experts on a narrower width (null: the hidden size).
      if (c.has("moe_latent_size") && !hf["moe_latent_size"].IsNull()) ours["moe_latent"] = c.get_int("moe_latent_size", 1, 1, kBig);
    }
  } else if (type == "granitemoehybrid") {
    // Note [Mamba-2] (llama.cpp): IBM's Granite 4.0-H
    // (GraniteMoeHybridForCausalLM; configuration_granitemoehybrid.py's
    // keys and defaults): Granite's blocks and scalars (Note [Granite]),
    // each block's mixer Mamba-2 or attention as layer_types lists them
    // (all Mamba where it is absent: the class's layers_block_type), then a
    // shared SwiGLU MLP of shared_intermediate_size beside a mixture of
    // num_local_experts SwiGLU experts of intermediate_size (the shared MLP
    // alone where there are none).
    require_arch({"GraniteMoeHybridForCausalLM"});
    whole_heads_decoder({32000});  // GraniteMoeHybridConfig's shape defaults are LlamaConfig's
    const std::int64_t hidden = ours["hidden"].as<std::int64_t>();
    if (const std::string act = c.get_string("hidden_act", "silu"); act != "silu") {
      c.fail("hidden_act", "'" + act + "'; dtsim models silu (SwiGLU), Granite 4.0's");
    }
    ours["embedding_multiplier"] = c.get_double("embedding_multiplier", 1.0, 1e-6, 1e6);
    ours["residual_multiplier"] = c.get_double("residual_multiplier", 1.0, 1e-6, 1e6);
    ours["logits_scaling"] = c.get_double("logits_scaling", 1.0, 1e-6, 1e6);
    // Rotary positions only where position_embedding_type is rope.
    const YAML::Node pe = hf["position_embedding_type"];
    ours["rotary"] = pe && !pe.IsNull() && pe.IsScalar() && pe.Scalar() == "rope";
    const std::int64_t layers = ours["layers"].as<std::int64_t>();
    std::string mixers(static_cast<std::size_t>(layers), 'M');
    const std::string types_key = c.has("layer_types") || !c.has("layers_block_type") ? "layer_types" : "layers_block_type";
    if (c.has(types_key) && !hf[types_key].IsNull()) {
      const YAML::Node types = hf[types_key];
      if (!types.IsSequence() || static_cast<std::int64_t>(types.size()) != layers) {
        c.fail(types_key, "expected a list of one block type a layer, " + std::to_string(layers) + " (num_hidden_layers)");
      }
      for (std::size_t i = 0; i < types.size(); ++i) {
        const std::string t = types[i].IsScalar() ? types[i].Scalar() : "";
        if (t != "mamba" && t != "attention") c.fail(types_key, "layer " + std::to_string(i) + " is '" + t + "'; valid: mamba, attention");
        mixers[i] = t == "mamba" ? 'M' : '*';
      }
    }
    ours["layer_mixers"] = mixers;
    if (mixers.find('M') != std::string::npos) {
      // mamba_d_head "auto": mamba_expand x hidden / mamba_n_heads, which must divide it.
      const std::int64_t expand = c.get_int("mamba_expand", 2, 1, 1 << 10), n_heads = c.get_int("mamba_n_heads", 128, 1, 1 << 20);
      const std::int64_t inner = expand * hidden;
      if (inner % n_heads != 0) c.fail("mamba_n_heads", std::to_string(n_heads) + " does not divide mamba_expand x hidden_size = " + std::to_string(inner));
      const YAML::Node dh = hf["mamba_d_head"];
      const std::int64_t d_head = !dh || dh.IsNull() || (dh.IsScalar() && dh.Scalar() == "auto") ? inner / n_heads : c.get_int("mamba_d_head", 1, 1, 1 << 20);
      if (d_head * n_heads != inner) {
        c.fail("mamba_d_head", std::to_string(d_head) + " x mamba_n_heads " + std::to_string(n_heads) + " is not mamba_expand x hidden_size = " +
                                   std::to_string(inner) + " (the class refuses it)");
      }
      ours["mamba_heads"] = n_heads;
      ours["mamba_head_dim"] = d_head;
      copy_int("mamba_n_groups", "mamba_groups", 1);
      copy_int("mamba_d_state", "mamba_state", 256);
      copy_int("mamba_d_conv", "mamba_conv_kernel", 4);
      copy_int("mamba_chunk_size", "mamba_chunk", 256);
      if (c.get_bool("mamba_proj_bias", false)) c.fail("mamba_proj_bias", "true: Mamba-2 projections with biases are not modelled; valid: false");
      if (!c.get_bool("mamba_conv_bias", true)) c.fail("mamba_conv_bias", "false: a convolution without its bias is not modelled; valid: true");
    }
    // The shared MLP beside the experts; alone where there are none.
    const std::int64_t shared = c.get_int("shared_intermediate_size", 1024, 1, kBig);
    const std::int64_t experts = c.get_int("num_local_experts", 8, 0, 1 << 20);
    if (experts == 0) {
      ours["intermediate"] = shared;
    } else {
      routing("num_local_experts", 8, 2, "local experts");
      copy_int("intermediate_size", "expert_intermediate", 11008);
      ours["intermediate"] = ours["expert_intermediate"];
      ours["shared_intermediate"] = shared;
    }
  } else if (type == "qwen3_5" || type == "qwen3_5_moe") {
    // Note [Image-and-text configs]: Qwen3.5's checkpoints are
    // Qwen3_5ForConditionalGeneration and Qwen3_5MoeForConditionalGeneration,
    // their language model a Qwen3_5TextConfig or Qwen3_5MoeTextConfig
    // (Note [Gated DeltaNet] in llama.cpp); without one, its defaults.
    const bool moe = type == "qwen3_5_moe";
    const std::string cls = moe ? "Qwen3_5MoeForConditionalGeneration" : "Qwen3_5ForConditionalGeneration";
    require_arch({cls});
    const YAML::Node defaults(YAML::NodeType::Map);
    const std::string text = moe ? "qwen3_5_moe_text" : "qwen3_5_text";
    return language_model(cls, {{text, text}}, "its vision encoder and merger", &defaults);
  } else if (type == "mixtral" || type == "qwen2_moe" || type == "qwen3_moe" || type == "deepseek_v3" || type == "kimi_k2" ||
             type == "deepseek_v2" || type == "deepseek_v32" || type == "glm_moe_dsa") {
    // Mixtures of experts: the defaults of MixtralConfig, Qwen2MoeConfig,
    // Qwen3MoeConfig and DeepseekV3Config (transformers), their layers as
    // modeling_mixtral.py, modeling_qwen2_moe.py, modeling_qwen3_moe.py and
    // modeling_deepseek_v3.py build them (Note [Mixture of experts]).
    // Kimi K2's config (model_type kimi_k2) is DeepSeek-V3's architecture and keys.
    // Note [DeepSeek-V2]: deepseek_v2 is the same layers with
    // DeepseekV2Config's defaults and its router's topk_method.
    // Note [DeepSeek Sparse Attention] (llama.cpp): DeepSeek-V3.2's
    // (DeepseekV32Config: DeepseekV3Config's keys and the indexer's) and
    // GLM-5's (GlmMoeDsaConfig, its own defaults: GLM-5's shape).
    const bool mixtral = type == "mixtral", qwen2 = type == "qwen2_moe", qwen3 = type == "qwen3_moe", v2 = type == "deepseek_v2",
               glm5 = type == "glm_moe_dsa", dsa = glm5 || type == "deepseek_v32",
               deepseek = type == "deepseek_v3" || type == "kimi_k2" || v2 || dsa;
    require_arch({mixtral ? "MixtralForCausalLM" : qwen2 ? "Qwen2MoeForCausalLM" : qwen3 ? "Qwen3MoeForCausalLM" :
                  v2 ? "DeepseekV2ForCausalLM" : glm5 ? "GlmMoeDsaForCausalLM" : dsa ? "DeepseekV32ForCausalLM" : "DeepseekV3ForCausalLM"});
    ours["family"] = "llama";
    copy_int("num_hidden_layers", "layers", mixtral ? 32 : v2 ? 32 : glm5 ? 78 : deepseek ? 61 : 24);
    copy_int("hidden_size", "hidden", mixtral ? 4096 : v2 ? 4096 : glm5 ? 6144 : deepseek ? 7168 : 2048);
    copy_int("num_attention_heads", "heads", mixtral ? 32 : qwen2 ? 16 : qwen3 ? 32 : v2 ? 32 : glm5 ? 64 : 128);
    const std::int64_t heads = ours["heads"].as<std::int64_t>();
    copy_int("num_key_value_heads", "kv_heads", mixtral ? 8 : qwen2 ? 16 : qwen3 ? 4 : v2 || glm5 ? heads : 128);
    if (!deepseek) check_kv_heads(c, "num_key_value_heads", heads, ours["kv_heads"].as<std::int64_t>());
    if (c.has("head_dim") && !deepseek) {
      copy_int("head_dim", "head_dim", 0);
    } else if (qwen3) {
      ours["head_dim"] = 128;  // Qwen3MoeConfig's default
    } else if (!deepseek && ours["hidden"].as<std::int64_t>() % heads != 0) {
      c.fail("num_attention_heads", std::to_string(heads) + " does not divide hidden_size " +
                                        std::to_string(ours["hidden"].as<std::int64_t>()) + " and no head_dim is given");
    }
    copy_int("intermediate_size", "intermediate", mixtral ? 14336 : qwen2 ? 5632 : qwen3 ? 6144 : v2 ? 11008 : glm5 ? 12288 : 18432);
    copy_int("vocab_size", "vocab", mixtral ? 32000 : v2 ? 32000 : glm5 ? 154880 : deepseek ? 129280 : 151936);
    copy_int("max_position_embeddings", "seq_len", mixtral ? 131072 : v2 ? 2048 : glm5 ? 202752 : deepseek ? 4096 : 32768);
    ours["tied_head"] = c.get_bool("tie_word_embeddings", false);
    // DeepseekV2Config's num_experts_per_tok defaults to None, which its
    // router cannot run: a V2 config names it.
    if (v2 && !c.has("num_experts_per_tok")) {
      c.fail("num_experts_per_tok", "missing (DeepseekV2Config's default, None, routes no token); valid: 1 to n_routed_experts "
                                    "(6 in DeepSeek-V2 and V2-Lite)");
    }
    routing(mixtral ? "num_local_experts" : deepseek ? "n_routed_experts" : "num_experts",
            mixtral ? 8 : qwen2 ? 60 : qwen3 ? 128 : v2 ? 64 : 256, mixtral ? 2 : qwen2 ? 4 : 8, "routed experts");
    if (mixtral) {
      ours["expert_intermediate"] = ours["intermediate"];  // Mixtral's experts are intermediate_size wide
    } else {
      copy_int("moe_intermediate_size", "expert_intermediate", qwen2 ? 1408 : qwen3 ? 768 : v2 ? 1407 : 2048);
    }
    if (qwen2) {
      // Qwen2MoeSparseMoeBlock: one shared expert with its sigmoid gate.
      ours["shared_intermediate"] = c.get_int("shared_expert_intermediate_size", 5632, 0, kBig);
      ours["shared_expert_gate"] = true;
      ours["qkv_bias"] = true;
    }
    if (qwen2 || qwen3) {
      ours["moe_step"] = c.get_int("decoder_sparse_step", 1, 1, 10000);
      if (hf["mlp_only_layers"] && hf["mlp_only_layers"].IsSequence() && hf["mlp_only_layers"].size() > 0) {
        c.fail("mlp_only_layers", "dense layers listed by index are not modelled; valid: [] (decoder_sparse_step sets a stride)");
      }
    }
    if (qwen3) {
      ours["qk_norm"] = true;
      const bool bias = c.get_bool("attention_bias", false);
      ours["qkv_bias"] = bias;
      ours["o_bias"] = bias;
    }
    if (deepseek) {
      const std::int64_t shared = c.get_int("n_shared_experts", v2 ? 2 : 1, 0, kBig);
      ours["shared_intermediate"] = shared * ours["expert_intermediate"].as<std::int64_t>();
      ours["first_dense"] = c.get_int("first_k_dense_replace", v2 ? 0 : 3, 0, 10000);
      if (glm5) {
        group_routing(1, 1);  // GlmMoeDsaConfig's n_group and topk_group: one group
      } else if (!v2) {
        // Node-limited routing: a token's experts come from topk_group of the
        // n_group groups (transformers' DeepseekV3Config defaults 8 and 4).
        group_routing(8, 4);
      } else if (const std::string method = c.get_string("topk_method", "greedy"); method == "group_limited_greedy") {
        // DeepseekV2Moe: the best expert of each of n_group groups ranks
        // the groups, topk_group of them are kept (DeepSeek-V2's
        // device-limited routing, M = 3 of 8); DeepseekV2Config has no
        // default for either.
        if (!c.has("n_group") || !c.has("topk_group")) {
          c.fail(c.has("n_group") ? "topk_group" : "n_group",
                 "missing: topk_method group_limited_greedy routes within n_group groups, keeping topk_group of them");
        }
        group_routing(1, 1);
      } else if (method != "greedy") {
        c.fail("topk_method", "'" + method + "'; valid: greedy, group_limited_greedy (DeepseekV2Moe's)");
      }
      // DeepseekV3DecoderLayer puts experts where layer_idx >= first_k_dense_replace.
      if (c.get_int("moe_layer_freq", 1, 1, 10000) != 1) c.fail("moe_layer_freq", "only 1 is modelled (every layer after the dense ones)");
      if (hf["q_lora_rank"] && hf["q_lora_rank"].IsNull()) {
        ours["q_lora_rank"] = 0;
      } else {
        ours["q_lora_rank"] = c.get_int("q_lora_rank", glm5 ? 2048 : 1536, 0, kBig);
      }
      copy_int("kv_lora_rank", "kv_lora_rank", 512);
      copy_int("qk_nope_head_dim", "qk_nope_dim", glm5 ? 192 : 128);
      copy_int("qk_rope_head_dim", "qk_rope_dim", 64);
      copy_int("v_head_dim", "v_head_dim", glm5 ? 256 : 128);
    }
    if (glm5 && hf["mlp_layer_types"] && hf["mlp_layer_types"].IsSequence()) {
      // GlmMoeDsaConfig's mlp_layer_types: dense layers first, then MoE ones.
      const YAML::Node types = hf["mlp_layer_types"];
      std::int64_t dense = 0;
      for (std::size_t i = 0; i < types.size(); ++i) {
        const std::string kind = types[i].IsScalar() ? types[i].Scalar() : "";
        if (kind != "dense" && kind != "sparse") c.fail("mlp_layer_types", "entry " + std::to_string(i + 1) + " is '" + kind + "'; valid: dense, sparse");
        if (kind == "dense" && dense != static_cast<std::int64_t>(i)) {
          c.fail("mlp_layer_types", "dense layer " + std::to_string(i + 1) + " after a sparse one; dtsim models the dense layers first (first_k_dense_replace)");
        }
        if (kind == "dense") ++dense;
      }
      if (static_cast<std::int64_t>(types.size()) != ours["layers"].as<std::int64_t>()) {
        c.fail("mlp_layer_types", "lists " + std::to_string(types.size()) + " layers; valid: one for each of the " +
                                      std::to_string(ours["layers"].as<std::int64_t>()) + " (num_hidden_layers)");
      }
      ours["first_dense"] = dense;
    }
    if (dsa) {
      // The indexer: its heads, width and keys; which layers run one
      // (GLM-5's indexer_types, index_topk_pattern, or index_topk_freq
      // from index_skip_topk_offset as GlmMoeDsaConfig derives them).
      ours["index_topk"] = c.get_int("index_topk", 2048, 1, 1 << 24);
      ours["index_heads"] = c.get_int("index_n_heads", glm5 ? 32 : 64, 1, 4096);
      ours["index_head_dim"] = c.get_int("index_head_dim", 128, 1, 4096);
      const std::int64_t layers = ours["layers"].as<std::int64_t>();
      std::string pattern;
      if (hf["indexer_types"] && hf["indexer_types"].IsSequence()) {
        const YAML::Node types = hf["indexer_types"];
        for (std::size_t i = 0; i < types.size(); ++i) {
          const std::string kind = types[i].IsScalar() ? types[i].Scalar() : "";
          if (kind != "full" && kind != "shared") c.fail("indexer_types", "entry " + std::to_string(i + 1) + " is '" + kind + "'; valid: full, shared");
          pattern += kind == "full" ? 'F' : 'S';
        }
        if (static_cast<std::int64_t>(pattern.size()) != layers) {
          c.fail("indexer_types", "lists " + std::to_string(pattern.size()) + " layers; valid: one for each of the " + std::to_string(layers) +
                                      " (num_hidden_layers)");
        }
      } else if (c.has("index_topk_pattern")) {
        pattern = c.get_string("index_topk_pattern", "");
        if (static_cast<std::int64_t>(pattern.size()) != layers || pattern.find_first_not_of("FS") != std::string::npos) {
          c.fail("index_topk_pattern", "'" + pattern + "'; valid: F (full) or S (shared), one letter for each of the " + std::to_string(layers) + " layers");
        }
      } else if (glm5) {
        const std::int64_t freq = c.get_int("index_topk_freq", 1, 1, 10000), offset = c.get_int("index_skip_topk_offset", 2, 0, 10000);
        for (std::int64_t i = 0; i < layers; ++i) pattern += std::max<std::int64_t>(i - offset + 1, 0) % freq == 0 ? 'F' : 'S';
      }
      if (pattern.find('S') != std::string::npos) {
        if (pattern.front() != 'F') {
          c.fail(hf["indexer_types"] ? "indexer_types" : c.has("index_topk_pattern") ? "index_topk_pattern" : "index_skip_topk_offset",
                 "starts shared; the first layer has no earlier top-k to reuse");
        }
        ours["indexer_layers"] = pattern;
      }
    }
  } else if (type == "deepseek_v4") {
    // Note [DeepSeek-V4] (llama.cpp): DeepseekV4Config's keys (transformers
    // 5.12, and DeepSeek's own config.json; Megatron-Bridge's
    // DeepSeekV4Bridge reads the same), Flash's values by default. The
    // ratios are compress_ratios, or layer_types with compress_rates as
    // transformers' native config writes them; the multi-token prediction
    // layer (num_nextn_predict_layers), which HuggingFace's model skips, is
    // model.mtp_layers, its ratio the list's next.
    require_arch({"DeepseekV4ForCausalLM"});
    ours["family"] = "llama";
    copy_int("num_hidden_layers", "layers", 43);
    copy_int("hidden_size", "hidden", 4096);
    copy_int("num_attention_heads", "heads", 64);
    if (c.get_int("num_key_value_heads", 1, 1, kBig) != 1) {
      c.fail("num_key_value_heads", std::to_string(c.get_int("num_key_value_heads", 1, 1, kBig)) +
                                        "; DeepSeek-V4 attends in one key-value head shared by all: valid 1");
    }
    ours["kv_heads"] = 1;
    copy_int("head_dim", "head_dim", 512);
    copy_int("qk_rope_head_dim", "qk_rope_dim", 64);
    copy_int("q_lora_rank", "q_lora_rank", 1024);
    copy_int("o_groups", "o_groups", 8);
    copy_int("o_lora_rank", "o_lora_rank", 1024);
    copy_int("sliding_window", "sliding_window", 128);
    copy_int("vocab_size", "vocab", 129280);
    copy_int("max_position_embeddings", "seq_len", 1048576);
    ours["tied_head"] = c.get_bool("tie_word_embeddings", false);
    routing("n_routed_experts", 256, 6, "routed experts");
    copy_int("moe_intermediate_size", "expert_intermediate", 2048);
    ours["intermediate"] = ours["expert_intermediate"];
    ours["shared_intermediate"] = c.get_int("n_shared_experts", 1, 0, kBig) * ours["expert_intermediate"].as<std::int64_t>();
    // Hash-routed layers still run the router's GEMM in Megatron-Core:
    // priced as routed ones; the SwiGLU clamp as SwiGLU (Note [DeepSeek-V4]).
    c.get_int("num_hash_layers", 0, 0, 10000);
    c.get_double("swiglu_limit", 0, 0, 1e9);
    ours["index_topk"] = c.get_int("index_topk", 512, 1, 1 << 24);
    ours["index_heads"] = c.get_int("index_n_heads", 64, 1, 4096);
    ours["index_head_dim"] = c.get_int("index_head_dim", 128, 1, 4096);
    ours["hc_mult"] = c.get_int("hc_mult", 4, 0, 64);
    if (ours["hc_mult"].as<std::int64_t>() > 1) ours["hc_sinkhorn_iters"] = c.get_int("hc_sinkhorn_iters", 20, 1, 10000);
    YAML::Node ratios(YAML::NodeType::Sequence);
    if (c.has("compress_ratios")) {
      for (const std::int64_t r : c.get_int_list("compress_ratios")) ratios.push_back(r);
    } else if (hf["layer_types"] && hf["layer_types"].IsSequence()) {
      const YAML::Node types = hf["layer_types"], rates = hf["compress_rates"];
      for (std::size_t i = 0; i < types.size(); ++i) {
        const std::string kind = types[i].IsScalar() ? types[i].Scalar() : "";
        if (kind == "sliding_attention") {
          ratios.push_back(0);
        } else if (kind == "compressed_sparse_attention" || kind == "heavily_compressed_attention") {
          const std::int64_t fallback = kind == "compressed_sparse_attention" ? 4 : 128;
          ratios.push_back(rates && rates.IsMap() && rates[kind] ? rates[kind].as<std::int64_t>(fallback) : fallback);
        } else {
          c.fail("layer_types", "entry " + std::to_string(i + 1) + " is '" + kind +
                                    "'; valid: sliding_attention, compressed_sparse_attention, heavily_compressed_attention");
        }
      }
    } else {
      c.fail("compress_ratios", "missing (and no layer_types): DeepSeek-V4 needs each layer's compression ratio");
    }
    ours["compress_ratios"] = ratios;
  } else {
    c.fail("model_type", type.empty() ? std::string("missing; dtsim reads HuggingFace configs of model_type ") + kHfTypes
                                      : "'" + type + "' is not supported; valid: " + kHfTypes);
  }
  // The Llama family's dense and MoE configs alike (Note [Attention dropout]
  // in models/src/llama.cpp).
  if (ours["family"].as<std::string>() == "llama") {
    if (const double p = c.get_double("attention_dropout", 0, 0, 0.99); p > 0) ours["attention_dropout"] = p;
  }
  return ours;
}

bool ends_with(const std::string& s, const std::string& suffix) {
  return s.size() >= suffix.size() && s.compare(s.size() - suffix.size(), suffix.size(), suffix) == 0;
}

/// A HuggingFace config's model, named as the user knows it: from
/// _name_or_path, else `fallback` (the folder holding a config.json, HF's
/// snapshot layout, or the file).
sim::ModelPtr from_huggingface_named(const YAML::Node& root, const std::string& file, const std::string& fallback,
                                     const std::vector<sim::Override>& overrides) {
  std::string name = fallback;
  if (root.IsMap() && root["_name_or_path"] && root["_name_or_path"].IsScalar() && !root["_name_or_path"].Scalar().empty()) {
    name = std::filesystem::path(root["_name_or_path"].Scalar()).filename().string();
    if (name.empty()) name = fallback;
  }
  std::vector<std::string> notes;
  YAML::Node ours = from_huggingface(root, file, notes);
  return parse_ours(ours, file, name, overrides, std::move(notes));
}

// Note [HuggingFace cache]
// Users name models as the hub does ("meta-llama/Llama-3.1-8B") and keep
// them in the hub's cache, or in a folder of their own (save_pretrained's,
// config.json inside). dtsim reads no network, so `--model ORG/NAME` is
// the cached snapshot's config.json, where huggingface_hub would find it
// offline (huggingface_hub/constants.py and file_download.py): the cache
// is HF_HUB_CACHE, else HUGGINGFACE_HUB_CACHE, else HF_HOME/hub, else
// XDG_CACHE_HOME/huggingface/hub, else ~/.cache/huggingface/hub; the repo
// is its models--ORG--NAME folder, the snapshot the commit refs/main
// names (or the one snapshot there is). A folder given as --model is read
// as the config.json in it.

/// `path` with a leading "~" as HOME, as os.path.expanduser does.
std::string expand_home(const std::string& path) {
  if (path == "~" || path.rfind("~/", 0) == 0) {
    const char* home = std::getenv("HOME");
    return std::string(home != nullptr ? home : "") + path.substr(1);
  }
  return path;
}

std::string env_or_empty(const char* key) {
  const char* v = std::getenv(key);
  return v != nullptr ? std::string(v) : std::string();
}

}  // namespace

std::string huggingface_hub_cache() {
  for (const char* key : {"HF_HUB_CACHE", "HUGGINGFACE_HUB_CACHE"}) {
    if (const std::string v = env_or_empty(key); !v.empty()) return expand_home(v);
  }
  std::string hf_home = env_or_empty("HF_HOME");
  if (hf_home.empty()) {
    const std::string xdg = env_or_empty("XDG_CACHE_HOME");
    hf_home = (xdg.empty() ? expand_home("~/.cache") : xdg) + "/huggingface";
  }
  return expand_home(hf_home) + "/hub";
}

namespace {

/// "ORG/NAME" as the hub spells a repository: two parts of letters,
/// digits, '-', '_' and '.', neither starting with '.'.
bool repo_id(const std::string& s) {
  const auto slash = s.find('/');
  if (slash == std::string::npos || s.find('/', slash + 1) != std::string::npos) return false;
  const std::string parts[] = {s.substr(0, slash), s.substr(slash + 1)};
  for (const std::string& part : parts) {
    if (part.empty() || part.front() == '.' || part.size() > 96) return false;
    for (const unsigned char c : part) {
      if (std::isalnum(c) == 0 && c != '-' && c != '_' && c != '.') return false;
    }
  }
  return true;
}

/// The cached snapshot's config.json of repository `repo` (Note
/// [HuggingFace cache]); throws ConfigError saying where it looked.
std::string cached_config(const std::string& repo) {
  namespace fs = std::filesystem;
  const std::string cache = huggingface_hub_cache();
  const std::string org = repo.substr(0, repo.find('/')), name = repo.substr(repo.find('/') + 1);
  const fs::path folder = fs::path(cache) / ("models--" + org + "--" + name);
  std::error_code ec;
  std::string hint = sim::did_you_mean([&] {
    std::string lower = name;
    std::transform(lower.begin(), lower.end(), lower.begin(), [](unsigned char c) { return static_cast<char>(std::tolower(c)); });
    return lower;
  }(), builtin_names());
  hint = hint.empty() ? "" : ", or the built-in '" + hint + "'";
  if (!fs::is_directory(folder, ec)) {
    throw ConfigError("--model " + repo + ": no such file or folder here, nor in the HuggingFace cache (" + cache + " has no " +
                      folder.filename().string() + ") and dtsim reads no network; `huggingface-cli download " + repo +
                      " config.json` puts its config.json there, or give a config.json's path" + hint);
  }
  std::string commit;
  {
    std::ifstream ref(folder / "refs" / "main");
    std::getline(ref, commit);
    while (!commit.empty() && std::isspace(static_cast<unsigned char>(commit.back())) != 0) commit.pop_back();
  }
  if (fs::exists(folder / "refs" / "main", ec)) {
    // huggingface_hub writes the commit's hash there; its snapshot is the
    // one it reads offline, and no other.
    const bool hash = !commit.empty() && commit.size() <= 64 &&
                      std::all_of(commit.begin(), commit.end(), [](unsigned char c) { return std::isxdigit(c) != 0; });
    const fs::path config = folder / "snapshots" / commit / "config.json";
    if (hash && fs::is_regular_file(config, ec)) return config.string();
    throw ConfigError("--model " + repo + ": " + (folder / "refs" / "main").string() +
                      (hash ? " names snapshot " + commit + ", which holds no config.json" : " holds no commit hash") +
                      "; `huggingface-cli download " + repo + " config.json` fetches it, or give a config.json's path" + hint);
  }
  std::vector<fs::path> found;
  for (fs::directory_iterator it(folder / "snapshots", ec), end; !ec && it != end; it.increment(ec)) {
    const fs::path config = it->path() / "config.json";
    if (fs::is_regular_file(config, ec)) found.push_back(config);
  }
  if (found.size() == 1) return found.front().string();
  throw ConfigError("--model " + repo + ": " + folder.string() +
                    (found.empty() ? " holds no snapshot with a config.json"
                                   : " holds " + std::to_string(found.size()) + " snapshots with a config.json and no refs/main to choose one") +
                    "; `huggingface-cli download " + repo + " config.json` fetches the main one, or give a config.json's path" + hint);
}

}  // namespace

std::vector<std::string> builtin_names() {
  std::vector<std::string> names;
  for (const auto& b : kBuiltins) names.emplace_back(b.name);
  return names;
}

std::string describe_builtin(const std::string& name) {
  const Builtin* b = find_builtin(name);
  return b != nullptr ? b->description : "";
}

sim::ModelPtr load_model(const std::string& name_or_path, const std::vector<sim::Override>& overrides) {
  namespace fs = std::filesystem;
  if (const Builtin* b = find_builtin(name_or_path)) {
    return parse_ours(YAML::Load(b->yaml), "<built-in " + std::string(b->name) + ">", b->name, overrides);
  }
  const bool is_json = ends_with(name_or_path, ".json");
  const bool is_yaml = ends_with(name_or_path, ".yaml") || ends_with(name_or_path, ".yml");
  if (!is_json && !is_yaml) {
    // Note [HuggingFace cache]: a model's folder, or a repository in the hub's cache.
    std::error_code ec;
    if (fs::is_directory(name_or_path, ec)) {
      const fs::path config = fs::path(name_or_path) / "config.json";
      if (!fs::is_regular_file(config, ec)) {
        throw ConfigError("--model " + name_or_path + ": a folder without a config.json; valid: a model's folder as "
                          "HuggingFace saves it, a config.json, a .yaml file or a built-in name");
      }
      const fs::path whole = fs::absolute(fs::path(name_or_path), ec).lexically_normal();
      std::string folder = whole.filename().string();
      if (folder.empty()) folder = whole.parent_path().filename().string();
      if (folder.empty()) folder = "model";
      return from_huggingface_named(sim::load_yaml_file(config.string()), config.string(), folder, overrides);
    }
    if (repo_id(name_or_path) && !fs::exists(name_or_path, ec)) {
      const std::string config = cached_config(name_or_path);
      return from_huggingface_named(sim::load_yaml_file(config), config, name_or_path.substr(name_or_path.find('/') + 1),
                                    overrides);
    }
    if (name_or_path.find('/') != std::string::npos) {
      throw ConfigError("--model " + name_or_path + ": expected a built-in name, a .yaml file, a HuggingFace config.json or "
                        "model folder, or a hub repository (ORG/NAME) in the HuggingFace cache");
    }
    const auto names = builtin_names();
    const std::string hint = sim::did_you_mean(name_or_path, names);
    std::string list;
    for (const auto& n : names) list += (list.empty() ? "" : ", ") + n;
    throw ConfigError("--model " + name_or_path + ": unknown model" + (hint.empty() ? "" : " (did you mean '" + hint + "'?)") +
                      "; built-in: " + list + "; or a .yaml file or HuggingFace config.json");
  }
  const YAML::Node root = sim::load_yaml_file(name_or_path);
  const std::string stem = fs::path(name_or_path).stem().string();
  if (is_json) {
    std::string name = stem;
    if (stem == "config") {
      const std::string folder = fs::absolute(fs::path(name_or_path)).parent_path().filename().string();
      if (!folder.empty()) name = folder;
    }
    return from_huggingface_named(root, name_or_path, name, overrides);
  }
  return parse_ours(root, name_or_path, stem, overrides);
}

sim::ModelPtr parse_model(const std::string& text, const std::string& file, bool json,
                          const std::vector<sim::Override>& overrides) {
  const YAML::Node root = sim::parse_config_text(text, file, json);
  if (root.IsMap() && root["model_type"]) {
    const std::string type = root["model_type"].IsScalar() ? root["model_type"].Scalar() : "model";
    return from_huggingface_named(root, file, type, overrides);
  }
  return parse_ours(root, file, "model", overrides);
}

}  // namespace dtsim::models
