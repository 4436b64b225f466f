// The offload pass: ZeRO-Offload's optimizer on the host for a one-stage
// plan. Each reduced gradient shard goes down to the host as it is ready,
// the step runs on the host's cores, and the updated parameters come back
// up before any gather. (Parameter offload, ZeRO-Infinity's, is the copy up
// before each ZeRO-3 gather: passes/sharded_parameters.cpp.)
//
// Note [Offload]
// ZeRO-Offload (Ren et al. 2021): gradients go to the host after their
// reduction (device-to-host over PCIe, overlapped with backward), the Adam step
// runs on the host CPU, and the updated fp16 parameters come back host-to-device
// before the all-gather. ZeRO-Infinity's parameter offload keeps the
// parameter shards on the host and copies each layer's shard up before it is
// gathered.
#include "lowering/layer_context.hpp"

namespace dtsim::sim::detail {
namespace {

class OptimizerOffload final : public StrategyPass {
 public:
  explicit OptimizerOffload(LayerContext& ctx) : ctx_(ctx) {}

  void gradients_reduced(const At& at, TaskId reduce, Bytes shard_bytes) override {
    d2h_.push_back(ctx_.copy(ctx_.tag(at.micro, "d2h grads"), shard_bytes, Stream::kD2H, {reduce}));
  }

  TaskId optimizer_step(int, const TaskDeps&, MemOps& frees) override {
    LayerContext& c = ctx_;
    // The host steps once every shard is down; it waits for no reduction
    // beyond those copies.
    const std::int64_t shard = c.zero >= 1 ? LayerContext::ceil_div(c.params, c.n) : c.params;
    TaskDeps deps = d2h_;
    deps.push_back(c.last_bwd);
    const TimeNs t = c.compute_model.host_optimizer_time(static_cast<double>(shard), c.plan.optimizer, c.plan.precision,
                                                         c.cluster);
    const TaskId cpu = c.compute("host adam step", Phase::kOptimizer, t, deps, {}, frees, Stream::kHost);
    return c.copy("h2d params", shard * c.w, Stream::kH2D, {cpu});
  }

 private:
  LayerContext& ctx_;
  std::vector<TaskId> d2h_;  ///< the gradient shards' copies down
};

}  // namespace

std::unique_ptr<StrategyPass> offload_pass(LayerContext& ctx) {
  if (ctx.plan.offload_optimizer != Offload::kCpu) return nullptr;
  return std::make_unique<OptimizerOffload>(ctx);
}

}  // namespace dtsim::sim::detail
