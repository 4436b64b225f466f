// The DeepSpeed checkpoints pass: where DeepSpeed's activation
// checkpointing keeps each block's checkpoint, for a plan of one stage.
//
// Note [DeepSpeed checkpoints]
// DeepSpeed's activation checkpointing (deepspeed.checkpointing, which
// Megatron-DeepSpeed calls around every transformer layer: recompute full)
// keeps only each block's input and reruns the block before its backward.
// Two knobs of its activation_checkpointing config move that input
// (deepspeed/runtime/activation_checkpointing/checkpointing.py,
// CheckpointFunction):
// - partition_activations: each tensor-parallel rank keeps 1/tp of it
//   (partition_activations(): a narrow of the flattened tensor by the
//   model-parallel rank) and frees the rest as the forward ends; before
//   the block's rerun, gather_partitioned_activations() all-gathers it over
//   the tensor-parallel group again. With sequence parallelism the input is
//   split already, and resolve() refuses the pair.
// - cpu_checkpointing: the (partitioned) input is copied to host memory
//   with a blocking .to('cpu') as the block is entered, before its
//   forward, and its device copy freed as the forward ends; at the start of
//   the block's backward a blocking copy brings it back, before the gather
//   and the rerun. Blocking: both copies run on the compute stream, at the
//   host link's rate (PCIe, or NVLink-C2C on a Grace tray; pageable memory,
//   so no faster), and nothing overlaps them.
// A block's checkpoint is what full recompute keeps of it (Layer::saved_bytes
// less Unit::forward_drop). DeepSpeed keeps its own copy of each
// checkpoint on the host: not counted (host memory is not modelled).
#include <string>

#include "lowering/layer_context.hpp"
#include "lowering/lowering_common.hpp"

namespace dtsim::sim::detail {
namespace {

class DeepSpeedCheckpoints final : public StrategyPass {
 public:
  explicit DeepSpeedCheckpoints(LayerContext& ctx) : ctx_(ctx) {}

  // cpu_checkpointing: the input goes to the host as the block is entered.
  void before_forward(const At& at, TaskDeps& deps) override {
    if (!ctx_.plan.cpu_checkpointing || !checkpointed(at.unit)) return;
    const TaskId down = ctx_.copy(ctx_.tag(at.micro, "d2h checkpoint ", ctx_.layers[at.unit].name), kept(at.unit),
                                  Stream::kCompute, std::move(deps));
    deps = {down};
  }
  // What leaves the device as the forward ends: all of the checkpoint on
  // the host, or the other ranks' parts where it is partitioned.
  void forward_memory(const At& at, MemOps&, MemOps& on_end) override {
    if (checkpointed(at.unit)) add_bytes(on_end, MemCategory::kActivations, -(checkpoint(at.unit) - on_device(at.unit)));
  }
  // Back before the rerun: the copy up, then the gather (recompute's
  // pass, listed after this one, takes these as its dependencies).
  void before_backward(const At& at, TaskDeps& deps) override {
    if (!checkpointed(at.unit)) return;
    const std::string& name = ctx_.layers[at.unit].name;
    if (ctx_.plan.cpu_checkpointing) {
      deps = {ctx_.copy(ctx_.tag(at.micro, "h2d checkpoint ", name), kept(at.unit), Stream::kCompute, deps,
                        {{MemCategory::kActivations, kept(at.unit)}})};
    }
    if (ctx_.plan.partition_activations) {
      const Bytes full = checkpoint(at.unit);
      const MemOps gathered{{MemCategory::kActivations, full - kept(at.unit)}};
      const TaskId gather = ctx_.b.collective(ctx_.tag(at.micro, "gather checkpoint ", name), 0, ctx_.stream(Stream::kCompute),
                                              Axis::kTp, CollectiveOp::kAllGather, full,
                                              ctx_.comm.collective(CollectiveOp::kAllGather, full, ctx_.tp_group), deps, gathered);
      deps = {gather};
    }
  }

 private:
  /// A block rerun from its own input (full recompute, Note [Activation memory]).
  bool checkpointed(std::size_t l) const { return ctx_.recompute[l] == Recompute::kFull && ctx_.layers[l].is_block(); }
  /// Its input as full recompute keeps it.
  Bytes checkpoint(std::size_t l) const { return ctx_.layers[l].saved_bytes - ctx_.units[l].forward_drop; }
  /// The part this rank keeps: 1/tp of it where partitioned.
  Bytes kept(std::size_t l) const {
    return ctx_.plan.partition_activations ? LayerContext::ceil_div(checkpoint(l), ctx_.plan.tp) : checkpoint(l);
  }
  /// What stays on the device between the forward and the backward.
  Bytes on_device(std::size_t l) const { return ctx_.plan.cpu_checkpointing ? 0 : kept(l); }

  LayerContext& ctx_;
};

}  // namespace

std::unique_ptr<StrategyPass> deepspeed_checkpoints_pass(LayerContext& ctx) {
  if (!ctx.plan.partition_activations && !ctx.plan.cpu_checkpointing) return nullptr;
  return std::make_unique<DeepSpeedCheckpoints>(ctx);
}

}  // namespace dtsim::sim::detail
