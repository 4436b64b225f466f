// The parts of the model interface (model.hpp) that are plain data helpers:
// they live in the core so every front end and the simulator link them.
#include "dtsim/sim/model.hpp"

namespace dtsim::sim {

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

bool attends(const Model& model) {
  for (const Layer& L : model.layers(WorkloadShape{})) {
    for (const Kernel& k : L.forward) {
      if (k.kind == KernelKind::kAttention) return true;
    }
  }
  return false;
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
