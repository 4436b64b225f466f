// The activation offload pass: Megatron-Core's CPU offloading
// (cpu_offloading_num_layers) for a plan of one stage.
//
// Note [Activation offload]
// Megatron-Core wraps each transformer block in Transformer Engine's CPU
// offload context (TransformerBlock, get_cpu_offload_context): the first N
// = cpu_offloading_num_layers of its L blocks copy what they save for
// backward to pinned host memory, and the others keep theirs. Transformer
// Engine >= 2.10 (transformer_engine/pytorch/cpu_offload.py; the NeMo and
// Megatron-Bridge containers of 2026) runs it on one side stream:
// - block i's copy down starts after its forward (each tensor's once it is
//   made; here the block's whole forward, its tensor-parallel collectives
//   included);
// - the forward of block L - N + i waits for that copy, and only then is
//   block i's memory freed;
// - block i's copy up starts once the backward of block L - N + i has
//   finished, into memory allocated then, and block i's backward waits for
//   it; the backward frees it as it would have.
// So the blocks keep L - N blocks' activations at a time, not L, and a
// copy down is hidden behind the forward of the L - N - 1 blocks between
// block i and block L - N + i (none at N = L - 1, which Transformer Engine
// warns of); a copy up behind the backward of as many. Weights, their
// FP8 copies and biases stay (TE marks them), as do the embedding, the
// final norm and the output layer, which are not blocks. Megatron-Core refuses it with pipeline parallelism and
// with recompute (TransformerConfig.__post_init__: "Currently there is no
// support for Pipeline parallelism with CPU offloading", "CPU offloading
// does not work when activation recomputation is enabled") and for N >=
// L ("CPU offloading can be done only for layers less than num_layers");
// resolve() does too (parallel/plan.cpp). The copies run on copy engines
// at the host link's rate (ClusterSpec::host_device_bandwidth: PCIe, or
// NVLink-C2C on a Grace tray) on a stream of their own, "offload", apart
// from ZeRO-Offload's and ZeRO-Infinity's copies, which share the link.
// Blocks are transformer layers (LayerKind::kTransformer, dense or MoE):
// Megatron-Core offloads nothing else, LSTMs and convolutions included.
// Not modelled: the host memory the copies take (N blocks' activations a
// micro-batch), the HBM bandwidth they take from the kernels beside them,
// and Transformer Engine >= 2.12 keeping tensors under 256K elements on
// the GPU (what a tiny model saves may not move at all).
#include <string>

#include "dtsim/sim/error.hpp"
#include "lowering/layer_context.hpp"
#include "lowering/lowering_common.hpp"

namespace dtsim::sim::detail {
namespace {

class ActivationOffload final : public StrategyPass {
 public:
  explicit ActivationOffload(LayerContext& ctx) : ctx_(ctx) {
    for (std::size_t l = 0; l < ctx.layers.size(); ++l) {
      if (ctx.layers[l].kind == LayerKind::kTransformer) block_.push_back(l);
    }
    index_.assign(ctx.layers.size(), -1);
    for (std::size_t j = 0; j < block_.size(); ++j) index_[block_[j]] = static_cast<int>(j);
    n_ = ctx.plan.cpu_offloading_num_layers;
    // resolve() keeps N below the blocks; a model whose blocks changed
    // shape with the workload would be caught here rather than misread.
    if (n_ >= static_cast<int>(block_.size())) {
      throw UnsupportedError("cpu_offloading_num_layers: " + std::to_string(n_) + " of " + std::to_string(block_.size()) +
                             " blocks; valid: 0 to " + std::to_string(static_cast<int>(block_.size()) - 1));
    }
    down_.assign(static_cast<std::size_t>(n_), -1);
    up_.assign(static_cast<std::size_t>(n_), -1);
  }

  // The forward of block L - N + i waits for block i's copy down and frees
  // block i's activations as it starts.
  void before_forward(const At& at, TaskDeps& deps) override {
    if (const int i = partner(at.unit); i >= 0) deps.push_back(down_[static_cast<std::size_t>(i)]);
  }
  void forward_memory(const At& at, MemOps& on_start, MemOps&) override {
    // Freed before the forward allocates its own (TE frees block i as it
    // enters block L - N + i), first among the operations as it starts.
    if (const int i = partner(at.unit); i >= 0) {
      MemOps first;
      first.push_back({MemCategory::kActivations, -saved(i)});
      for (const MemOp& op : on_start) first.push_back(op);
      on_start = std::move(first);
    }
  }
  TaskId after_forward(const At& at, TaskId last) override {
    if (const int i = offloaded(at.unit); i >= 0) {
      down_[static_cast<std::size_t>(i)] =
          ctx_.copy(ctx_.tag(at.micro, "d2h activations ", ctx_.layers[at.unit].name), saved(i), Stream::kOffload, {last});
    }
    return last;
  }

  // Block i's backward waits for its copy up, which the backward of block
  // L - N + i started as it ended.
  void before_backward(const At& at, TaskDeps& deps) override {
    if (const int i = offloaded(at.unit); i >= 0) deps.push_back(up_[static_cast<std::size_t>(i)]);
  }
  TaskId after_backward(const At& at, TaskId last) override {
    if (const int i = partner(at.unit); i >= 0) {
      up_[static_cast<std::size_t>(i)] =
          ctx_.copy(ctx_.tag(at.micro, "h2d activations ", ctx_.layers[block_[static_cast<std::size_t>(i)]].name), saved(i),
                    Stream::kOffload, {last}, {{MemCategory::kActivations, saved(i)}});
    }
    return last;
  }

 private:
  /// The offloaded block index of layer `l` (0 to N - 1), or -1.
  int offloaded(std::size_t l) const {
    const int j = index_[l];
    return j >= 0 && j < n_ ? j : -1;
  }
  /// The offloaded block whose copy layer `l` waits for (block L - N + i
  /// waits for block i), or -1.
  int partner(std::size_t l) const {
    const int j = index_[l];
    const int i = j - (static_cast<int>(block_.size()) - n_);
    return j >= 0 && i >= 0 ? i : -1;
  }
  /// What offloaded block i keeps for backward a micro-batch.
  Bytes saved(int i) const { return ctx_.layers[block_[static_cast<std::size_t>(i)]].saved_bytes; }

  LayerContext& ctx_;
  std::vector<std::size_t> block_;  ///< the transformer layers, in order
  std::vector<int> index_;          ///< each layer's block index, or -1
  int n_ = 0;
  std::vector<TaskId> down_, up_;   ///< block i's copies of the micro-batch being emitted
};

}  // namespace

std::unique_ptr<StrategyPass> activation_offload_pass(LayerContext& ctx) {
  if (ctx.plan.cpu_offloading_num_layers <= 0) return nullptr;
  return std::make_unique<ActivationOffload>(ctx);
}

}  // namespace dtsim::sim::detail
