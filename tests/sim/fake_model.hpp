#pragma once
// A model with round numbers for lowering tests: `n` identical layers, each
// with `params` parameters, one forward kernel and one backward kernel whose
// times a FixedCompute model sets, and `saved` bytes kept for backward.

#include <string>
#include <vector>

#include "dtsim/sim/cluster.hpp"
#include "dtsim/sim/config_io.hpp"
#include "dtsim/sim/cost.hpp"
#include "dtsim/sim/executor.hpp"
#include "dtsim/sim/lowering.hpp"
#include "dtsim/sim/model.hpp"

namespace dtsim::test {

class FakeModel final : public sim::Model {
 public:
  FakeModel(int n, std::int64_t params, Bytes saved, int tensors = 0) : n_(n), params_(params), saved_(saved), tensors_(tensors) {}
  std::string name() const override { return "fake"; }
  std::int64_t parameters() const override { return n_ * params_ + embed_ + head_; }
  int blocks() const override { return n_; }
  std::int64_t max_seq_len() const override { return 1024; }
  std::string tp_error(int tp) const override { return tp == 1 ? "" : "the fake model has no tensor-parallel split"; }
  std::vector<sim::Layer> layers(const sim::WorkloadShape& s) const override {
    std::vector<sim::Layer> out;
    for (int i = 0; i < n_; ++i) {
      sim::Layer l;
      l.name = "L" + std::to_string(i);
      l.kind = sim::LayerKind::kTransformer;
      l.signature = "fake.layer";
      l.params = params_;
      l.param_tensors = tensors_;
      sim::Kernel f;
      f.name = "fwd";
      f.kind = sim::KernelKind::kGemm;
      f.flops = 1e9 * static_cast<double>(s.micro_batch);
      sim::Kernel b = f;
      b.name = "bwd";
      b.flops = 2 * f.flops;
      l.forward = {f};
      l.backward = {b};
      if (wgrad_bytes_ > 0) {
        // A weight GEMM's backward as its two halves (models/src/layers.cpp
        // backward_of): square 10 x 10 x 10 operands, so a deferred dW keeps
        // 2/3 of its kernel's bytes (its two operands, not its result).
        sim::Kernel dx = f, dw = f;
        dx.name = "fwd.dgrad";
        dw.name = "fwd.wgrad";
        dw.m = dw.n = dw.k = 10;
        dw.bytes = wgrad_bytes_ * s.micro_batch;
        l.backward = {dx, dw};
      }
      if (!modules_.empty()) {
        // One forward kernel of 1/k GFLOP per module, named as it is.
        l.modules = modules_;
        l.forward.clear();
        for (const auto& mod : modules_) {
          sim::Kernel k = f;
          k.name = mod.name;
          k.flops = f.flops / static_cast<double>(modules_.size());
          l.forward.push_back(k);
        }
      }
      l.saved_bytes = saved_ * s.micro_batch;
      l.output_bytes = 0;
      out.push_back(l);
    }
    // with_ends: an embedding before the blocks, a head after them, each a
    // copy of a block's kernels with its own parameters.
    if (embed_ > 0) {
      sim::Layer e = out.front();
      e.name = "embed";
      e.kind = sim::LayerKind::kEmbedding;
      e.params = embed_;
      out.insert(out.begin(), e);
    }
    if (head_ > 0) {
      sim::Layer h = out.back();
      h.name = "head";
      h.kind = sim::LayerKind::kLmHead;
      h.params = head_;
      out.push_back(h);
    }
    return out;
  }
  Flops model_flops(const sim::WorkloadShape& s) const override { return 3e9 * n_ * static_cast<double>(s.micro_batch); }
  /// The backward as an input-gradient and a weight-gradient GEMM of 1 GFLOP
  /// each (zb-h1 splits them), the latter moving `bytes` per sequence.
  FakeModel split_backward(Bytes bytes) const {
    FakeModel m = *this;
    m.wgrad_bytes_ = bytes;
    return m;
  }

  /// The blocks between an embedding of `embed` parameters and a head of
  /// `head` (layers that are not blocks: LayerKind kEmbedding, kLmHead).
  FakeModel with_ends(std::int64_t embed, std::int64_t head) const {
    FakeModel m = *this;
    m.embed_ = embed;
    m.head_ = head;
    return m;
  }

  /// Every layer made of these modules (Layer::modules; their tensors sum
  /// to `params`), its forward one kernel per module.
  FakeModel with_modules(std::vector<sim::ParamModule> modules) const {
    FakeModel m = *this;
    m.modules_ = std::move(modules);
    return m;
  }

 private:
  std::vector<sim::ParamModule> modules_;
  int n_;
  std::int64_t params_;
  Bytes saved_;
  int tensors_ = 0;
  Bytes wgrad_bytes_ = 0;
  std::int64_t embed_ = 0, head_ = 0;
};

/// Communication that costs nothing: the papers' formulas assume it.
class FreeComm final : public sim::CommModel {
 public:
  sim::CollectiveCost collective(sim::CollectiveOp, Bytes, const sim::CommGroup&) const override {
    sim::CollectiveCost c;
    c.algorithm = "free";
    return c;
  }
  sim::CollectiveCost host_copy(Bytes) const override { return collective(sim::CollectiveOp::kSendRecv, 0, {}); }
};

/// Every collective costs `ns` of latency, whatever it moves.
class FixedComm final : public sim::CommModel {
 public:
  explicit FixedComm(TimeNs ns) : ns_(ns) {}
  sim::CollectiveCost collective(sim::CollectiveOp, Bytes, const sim::CommGroup&) const override {
    sim::CollectiveCost c;
    c.algorithm = "fixed";
    c.latency = ns_;
    return c;
  }
  sim::CollectiveCost host_copy(Bytes) const override { return {}; }

 private:
  TimeNs ns_;
};

/// 1 GFLOP takes exactly `ns_per_gflop`, no launch cost.
class FixedCompute final : public sim::ComputeModel {
 public:
  explicit FixedCompute(TimeNs ns_per_gflop) : ns_(ns_per_gflop) {}
  TimeNs kernel_time(const sim::Kernel& k, sim::Precision) const override {
    return static_cast<TimeNs>(k.flops / 1e9 * static_cast<double>(ns_));
  }

 private:
  TimeNs ns_;
};

// 2 GPUs per node, 100 GB/s and 1 us per hop inside, round device figures:
// optimizer steps move 28 B/param at exactly 1 TB/s, no launch cost.
inline sim::ClusterSpec round_cluster(int nodes = 1, int per_node = 2) {
  sim::ClusterSpec c;
  c.name = "round";
  c.nodes = nodes;
  c.gpus_per_node = per_node;
  c.device.name = "dev";
  c.device.memory = 80 * kGiB;
  c.device.peak_fp32 = 1e12;
  c.device.peak_fp16 = 1e12;
  c.device.memory_bandwidth = 1e12;
  c.device.memory_efficiency = 1.0;
  c.device.kernel_launch = 0;
  c.device.runtime_reserved = 0;
  c.intra_node = {"nvlink", 100e9, 1 * kNsPerUs};
  c.inter_node = {"infiniband", 10e9, 5 * kNsPerUs};
  c.nics_per_node = 1;
  c.host_device_bandwidth = 10e9;
  c.host_memory_bandwidth = 100e9;
  c.host_flops = 1e12;
  return c;
}

/// A plan resolved, partitioned, lowered and executed with FixedCompute.
struct PlanRun {
  sim::ResolvedPlan plan;
  sim::TaskGraph graph;
  sim::ExecResult exec;
  Bytes peak_activations(int rank) const {
    return exec.memory[rank].at_peak.bytes[static_cast<int>(sim::MemCategory::kActivations)];
  }
};

/// `yaml` lowered and run; `timeline`: each rank's memory over time kept.
inline PlanRun run_plan_with(const sim::Model& m, const std::string& yaml, const sim::ClusterSpec& c, const sim::CommModel& comm,
                             TimeNs ns_per_gflop, bool timeline) {
  PlanRun r;
  r.plan = sim::resolve(sim::parse_plan(yaml, "test.yaml"), m, c);
  const FixedCompute compute(ns_per_gflop);
  sim::partition(r.plan, m, c, compute, comm);
  r.graph = sim::lower(m, r.plan, c, sim::CostModels{&compute, &comm});
  sim::ExecOptions o;
  o.record_memory_timeline = timeline;
  r.exec = sim::execute(r.graph, o);
  return r;
}

inline PlanRun run_plan(const sim::Model& m, const std::string& yaml, const sim::ClusterSpec& c, const sim::CommModel& comm,
                        TimeNs ns_per_gflop) {
  return run_plan_with(m, yaml, c, comm, ns_per_gflop, false);
}

}  // namespace dtsim::test
