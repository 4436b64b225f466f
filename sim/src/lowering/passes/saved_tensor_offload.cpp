// The saved-tensor offload pass: torchtune's activation offloading
// (enable_activation_offloading) for a plan of one stage.
//
// Note [Saved-tensor offload]
// torchtune's recipes run the model's forward under OffloadActivations
// (torchtune/training/_activation_offloading.py), a saved_tensors_hooks
// context: every tensor of at least 1 KiB autograd saves for backward,
// parameters and buffers apart, is copied to pinned host memory on a second
// stream as it is saved, and its device copy freed once five more have been
// saved (max_fwd_stash_size); the output projection runs outside it
// (get_act_offloading_ctx_manager's NoOpManager), and the loss after it. In
// the backward each tensor is copied back on that stream when autograd
// unpacks it, and the compute stream waits for the copy. Under activation
// checkpointing a block saves only its input (non-reentrant checkpoint: the
// input is saved outside the checkpoint's own hooks), so that is what moves,
// 2 s b h bytes a block. dtsim moves what each transformer block keeps after
// its forward (its saved bytes, or under full recompute its checkpoint): the
// copy down on the "offload" stream after the block's forward, its
// tensor-parallel collectives included, and the block's bytes freed, once
// copied, as the forward that saves the stash's fifth tensor after the
// block's last starts: the next layer's (a block saves five and more), or
// under full recompute the third layer's after it (a non-reentrant checkpoint
// saves two, the block's input and an empty dummy; the positions and the mask
// are keyword arguments, not saved), or the last layer's, whose final norm
// runs eager and saves six; that forward waits for the copy. A block still
// stashed when the backward starts (none before a norm) is priced as kept.
// The copy up is issued as autograd reaches the block: the host enqueues it
// ahead of the GPU, so dtsim starts it when the backward of the layer two
// above the block ends (as the layer above starts), into memory allocated
// then, and the block's backward (and its rerun) waits for it; a block with
// no layer two above it starts its copy when the layer above ends, ahead of
// the block below it on the stream. torchtune measured the pair free of time
// on an A100 (Llama 3.2 3B at 8,192 tokens with every block checkpointed:
// 7,309 and 7,301 tokens/s without and with it, its README's Optimization
// flags table). Blocks are transformer layers; the embedding's and the final
// norm's saved tensors, which torchtune moves too, are not moved here. The
// copies run at the host link's rate (ClusterSpec::host_device_bandwidth);
// the host memory they take is not modelled.
#include <string>

#include "lowering/layer_context.hpp"
#include "lowering/lowering_common.hpp"

namespace dtsim::sim::detail {
namespace {

class SavedTensorOffload final : public StrategyPass {
 public:
  explicit SavedTensorOffload(LayerContext& ctx) : ctx_(ctx) {
    const std::size_t n = ctx.layers.size();
    moved_.assign(n, false);
    freed_by_.assign(n, {});
    for (std::size_t l = 0; l < n; ++l) {
      if (ctx.layers[l].kind != LayerKind::kTransformer || kept(l) <= 0) continue;
      // The stash: five tensors, a checkpointed block's input and the
      // checkpoint's empty dummy (two), or a block's own last five; the
      // last layer, the final norm before the head, saves five and more.
      std::size_t at = l + (ctx.recompute[l] == Recompute::kFull ? 3 : 1);
      if (at >= n && l + 1 < n && !ctx.layers[n - 1].is_block()) at = n - 1;
      if (at >= n) continue;  // still stashed as the backward starts: kept
      moved_[l] = true;
      freed_by_[at].push_back(l);
    }
    down_.assign(n, -1);
    up_.assign(n, -1);
  }

  // The forward that saves the stash's fifth tensor after a block's last
  // frees that block's bytes as it starts, once they are copied.
  void before_forward(const At& at, TaskDeps& deps) override {
    for (std::size_t l : freed_by_[at.unit]) deps.push_back(down_[l]);
  }
  void forward_memory(const At& at, MemOps& on_start, MemOps&) override {
    if (freed_by_[at.unit].empty()) return;
    MemOps first;
    for (std::size_t l : freed_by_[at.unit]) first.push_back({MemCategory::kActivations, -kept(l)});
    for (const MemOp& op : on_start) first.push_back(op);
    on_start = std::move(first);
  }
  TaskId after_forward(const At& at, TaskId last) override {
    if (moved_[at.unit]) {
      down_[at.unit] = ctx_.copy(ctx_.tag(at.micro, "d2h saved ", ctx_.layers[at.unit].name), kept(at.unit), Stream::kOffload, {last});
    }
    return last;
  }

  // Before its rerun and its backward: the copy up, issued a layer ahead.
  void before_backward(const At& at, TaskDeps& deps) override {
    if (!moved_[at.unit]) return;
    if (up_[at.unit] < 0) up_[at.unit] = copy_up(at, at.unit, last_backward_);
    deps.push_back(up_[at.unit]);
    up_[at.unit] = -1;
  }
  TaskId after_backward(const At& at, TaskId last) override {
    last_backward_ = last;
    // The block below first where nothing brought it back yet (it is needed
    // first), then the one below that.
    if (at.unit >= 1 && moved_[at.unit - 1] && up_[at.unit - 1] < 0) up_[at.unit - 1] = copy_up(at, at.unit - 1, last);
    if (at.unit >= 2 && moved_[at.unit - 2]) up_[at.unit - 2] = copy_up(at, at.unit - 2, last);
    return last;
  }

 private:
  /// What block l keeps from its forward to its backward a micro-batch.
  Bytes kept(std::size_t l) const { return ctx_.layers[l].saved_bytes - ctx_.units[l].forward_drop; }
  TaskId copy_up(const At& at, std::size_t l, TaskId after) {
    TaskDeps deps;
    if (after >= 0) deps.push_back(after);
    return ctx_.copy(ctx_.tag(at.micro, "h2d saved ", ctx_.layers[l].name), kept(l), Stream::kOffload, std::move(deps),
                     {{MemCategory::kActivations, kept(l)}});
  }

  LayerContext& ctx_;
  std::vector<bool> moved_;       ///< each layer: a block whose saved tensors move
  std::vector<std::vector<std::size_t>> freed_by_;   ///< each layer: the blocks its forward frees
  std::vector<TaskId> down_, up_;  ///< each block's copies for the micro-batch being emitted
  TaskId last_backward_ = -1;      ///< the last layer's backward emitted
};

}  // namespace

std::unique_ptr<StrategyPass> saved_tensor_offload_pass(LayerContext& ctx) {
  if (!ctx.plan.enable_activation_offloading) return nullptr;
  return std::make_unique<SavedTensorOffload>(ctx);
}

}  // namespace dtsim::sim::detail
