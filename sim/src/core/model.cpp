// The parts of the model interface (model.hpp) that are plain data helpers:
// they live in the core so every front end and the simulator link them.
#include "dtsim/sim/model.hpp"

#include <algorithm>
#include <mutex>
#include <utility>

#include "dtsim/sim/error.hpp"

namespace dtsim::sim {

namespace {
/// Shapes a model keeps the layers of (Note [Layer memo]): a search's plans
/// at one micro-batch size and sequence length take a handful (tp, cp, ep,
/// flash, precision), each list some kilobytes a layer. DeepSeek-V3's
/// search on 2,048 H100s asks for 15,026 shapes in all, in runs that come
/// back: 16 kept took it 58.0 s with FSDP under pipelines in its space,
/// 48 kept 40.8 s, 128 kept 37.5 s (its peak RSS 2.1-2.2 GB either way,
/// most of it the candidates), every shape kept 44.8 s and 9 GB.
constexpr std::size_t kLayerMemo = 128;
}  // namespace

/// The lists a model has built, the most recently used last.
struct Model::LayerMemo {
  std::mutex mu;
  std::vector<std::pair<WorkloadShape, std::shared_ptr<const std::vector<Layer>>>> kept;
};

Model::Model() : memo_(std::make_unique<LayerMemo>()) {}
Model::Model(const Model&) : memo_(std::make_unique<LayerMemo>()) {}
Model& Model::operator=(const Model& o) {
  if (this != &o) memo_ = std::make_unique<LayerMemo>();
  return *this;
}
Model::~Model() = default;

// Note [BF16 layers]
// Megatron-Core's first_last_layers_bf16 (fp8_utils.py,
// is_first_last_bf16_layer; fp4_utils.py alike) runs the first
// num_layers_at_start_in_bf16 and the last num_layers_at_end_in_bf16
// transformer layers, by their global index among num_layers (a hybrid
// pattern's letters, each a layer; multi-token prediction depths not
// among them), outside the FP8 or NVFP4 autocast: their GEMMs in bf16,
// their saved GEMM inputs in bf16, no casts. NVIDIA's FP8 and NVFP4
// recipes keep a few layers so for stability (Nemotron 3 Super's NVFP4
// run: the last 14 of 88). Those blocks are the model's layers at the
// same shape without fp8 and fp4, flagged (Layer::bf16_gemms, which
// kernel_precision reads) and named apart in their signature. Their
// weights are still counted as the others' (fp8_param_gather's FP8 copies
// for all), which Megatron keeps in bf16 for them: a small overcount.
std::vector<Layer> Model::with_bf16_layers(const WorkloadShape& shape) const {
  std::vector<Layer> out = layers(shape);
  if (shape.bf16_start + shape.bf16_end <= 0 || !shape.fp8) return out;
  WorkloadShape plain = shape;
  plain.fp8 = plain.fp4 = false;
  plain.bf16_start = plain.bf16_end = 0;
  const std::vector<Layer> bf16 = layers(plain);
  DTSIM_ASSERT(bf16.size() == out.size(), "a model's layers change in number with their precision");
  const auto blocks = static_cast<int>(std::count_if(out.begin(), out.end(), [](const Layer& l) { return l.kind == LayerKind::kTransformer; }));
  int index = 0;
  for (std::size_t i = 0; i < out.size(); ++i) {
    if (out[i].kind != LayerKind::kTransformer) continue;
    if (index < shape.bf16_start || index >= blocks - shape.bf16_end) {
      out[i] = bf16[i];
      out[i].bf16_gemms = true;
      out[i].signature += ",bf16=1";
    }
    ++index;
  }
  return out;
}

LayerList Model::shared_layers(const WorkloadShape& shape) const {
  {
    std::lock_guard<std::mutex> lock(memo_->mu);
    auto& kept = memo_->kept;
    for (auto it = kept.begin(); it != kept.end(); ++it) {
      if (it->first != shape) continue;
      // The newest used goes last: the least recently used is dropped first.
      std::rotate(it, it + 1, kept.end());
      return LayerList(kept.back().second);
    }
  }
  // Built outside the lock (two threads may build the same list; either is kept).
  std::vector<Layer> list = with_bf16_layers(shape);
  if (shape.document_len > 0) {
    // Note [Packed sequences] (models/src/layers.cpp): an attending layer
    // over packed documents is not the layer a profile measured over whole
    // sequences, so its signature says so and a profile prices it anew.
    for (Layer& l : list) {
      if (std::any_of(l.forward.begin(), l.forward.end(), [](const Kernel& k) { return k.kind == KernelKind::kAttention; })) {
        l.signature += ",doc=" + std::to_string(shape.document_len);
      }
    }
  }
  auto built = std::make_shared<const std::vector<Layer>>(std::move(list));
  std::lock_guard<std::mutex> lock(memo_->mu);
  auto& kept = memo_->kept;
  if (kept.size() >= kLayerMemo) kept.erase(kept.begin());
  kept.emplace_back(shape, built);
  return LayerList(std::move(built));
}

const std::vector<Layer>& LayerList::none() {
  static const std::vector<Layer> none;
  return none;
}

const char* to_string(KernelKind kind) {
  switch (kind) {
    case KernelKind::kGemm: return "gemm";
    case KernelKind::kAttention: return "attention";
    case KernelKind::kElementwise: return "elementwise";
    case KernelKind::kNorm: return "norm";
    case KernelKind::kEmbedding: return "embedding";
    case KernelKind::kRecurrent: return "recurrent";
  }
  return "?";
}

const char* to_string(TpOverlapCfg c) {
  switch (c) {
    case TpOverlapCfg::kRing: return "ring";
    case TpOverlapCfg::kTe: return "te";
    case TpOverlapCfg::kAsyncTp: return "async_tp";
  }
  return "?";
}

bool attends(const Model& model) {
  for (const Layer& L : model.shared_layers(WorkloadShape{})) {
    for (const Kernel& k : L.forward) {
      if (k.kind == KernelKind::kAttention) return true;
    }
  }
  return false;
}

Bytes frozen_weight_bytes(std::int64_t frozen, std::int64_t quantized, Bytes quantized_bytes, Bytes w) {
  return (frozen - quantized) * w + quantized_bytes;
}

const char* to_string(LayerKind kind) {
  switch (kind) {
    case LayerKind::kOther: return "other";
    case LayerKind::kEmbedding: return "embedding";
    case LayerKind::kTransformer: return "transformer";
    case LayerKind::kLstm: return "lstm";
    case LayerKind::kPooler: return "pooler";
    case LayerKind::kHead: return "head";
    case LayerKind::kLmHead: return "lm_head";
  }
  return "?";
}

const std::vector<std::string>& recompute_module_names() {
  // Megatron-Core's names (TransformerConfig.recompute_modules), in the
  // order of RecomputeModule's bits.
  static const std::vector<std::string> names = {"core_attn", "layernorm", "moe_act", "mla_up_proj", "mlp", "shared_experts", "moe", "mhc"};
  return names;
}

namespace {
// A mask of module bits as their names, and back (Megatron-Core's
// recompute_modules and offload_modules).
std::string mask_names(const std::vector<std::string>& names, unsigned mask) {
  std::string out;
  for (std::size_t i = 0; i < names.size(); ++i) {
    if ((mask & (1U << i)) == 0) continue;
    if (!out.empty()) out += ", ";
    out += names[i];
  }
  return out;
}
unsigned bit_of(const std::vector<std::string>& names, const std::string& name) {
  const auto it = std::find(names.begin(), names.end(), name);
  return it == names.end() ? 0 : 1U << (it - names.begin());
}
}  // namespace

std::string recompute_modules_string(std::uint8_t modules) { return mask_names(recompute_module_names(), modules); }

std::uint8_t recompute_module_of(const std::string& name) {
  return static_cast<std::uint8_t>(bit_of(recompute_module_names(), name));
}

const std::vector<std::string>& offload_module_names() {
  // Megatron-Core's names (TransformerConfig.offload_modules), in the order
  // of OffloadModule's bits.
  static const std::vector<std::string> names = {"attn_norm", "qkv_linear", "core_attn",        "attn_proj", "mlp_norm",
                                                 "expert_fc1", "moe_act",   "fused_group_mlp", "gdp_qkv"};
  return names;
}

std::string offload_modules_string(std::uint16_t modules) { return mask_names(offload_module_names(), modules); }

std::uint16_t offload_module_of(const std::string& name) {
  return static_cast<std::uint16_t>(bit_of(offload_module_names(), name));
}

Flops Layer::forward_flops() const {
  Flops f = 0;
  for (const auto& k : forward) f += k.flops * static_cast<double>(k.repeat);
  return f;
}

Flops Layer::backward_flops() const {
  Flops f = 0;
  for (const auto& k : backward) f += k.flops * static_cast<double>(k.repeat);
  return f;
}

}  // namespace dtsim::sim
