// The partition step (partition.hpp).
#include "dtsim/sim/partition.hpp"

#include <algorithm>
#include <string>

#include "dtsim/sim/error.hpp"
#include "lowering/lowering_common.hpp"

namespace dtsim::sim {

std::vector<int> balance_layers(const std::vector<double>& costs, int chunks) {
  const int n = static_cast<int>(costs.size());
  DTSIM_ASSERT(chunks >= 1 && chunks <= n, "cannot split " + std::to_string(n) + " layers into " + std::to_string(chunks));
  // Greedy packing under a cap, leaving a layer for every group still to
  // come; the least feasible cap is found by bisection.
  auto pack = [&](double cap, std::vector<int>* counts) {
    int i = 0;
    for (int g = 0; g < chunks; ++g) {
      const int later = chunks - g - 1;
      double sum = costs[i];
      int count = 1;
      ++i;
      while (i < n - later && sum + costs[i] <= cap) {
        sum += costs[i++];
        ++count;
      }
      if (counts != nullptr) counts->push_back(count);
    }
    return i == n;
  };
  double lo = *std::max_element(costs.begin(), costs.end()), hi = 0;
  for (double c : costs) hi += c;
  if (!pack(lo, nullptr)) {
    for (int it = 0; it < 64 && hi - lo > 1e-9 * hi; ++it) {
      const double mid = 0.5 * (lo + hi);
      (pack(mid, nullptr) ? hi : lo) = mid;
    }
    lo = hi;
  }
  std::vector<int> counts;
  pack(lo, &counts);
  return counts;
}

PricedLayers price_layers(const Model& model, const ResolvedPlan& plan, const ClusterSpec& cluster,
                          const ComputeModel& compute, const CommModel& comm) {
  const WorkloadShape shape = detail::workload_shape(plan, cluster.device);
  PricedLayers out;
  out.layers = model.shared_layers(shape);
  const CommGroup tp_group = axis_group(plan.mesh, Axis::kTp, cluster.gpus_per_node);
  const CommGroup dp_group = data_group(plan.mesh, cluster.gpus_per_node);
  const CommGroup ep_group = plan.ep > 1 ? expert_dispatch_group(plan.mesh, plan.etp, plan.ep, plan.moe_dispatcher, cluster.gpus_per_node) : CommGroup{};
  const std::size_t n = out.layers.size();
  out.forward.reserve(n);
  out.backward.reserve(n);
  out.recompute.reserve(n);
  out.tp_forward.reserve(n);
  out.tp_backward.reserve(n);
  out.tp_forward_exposed.reserve(n);
  out.tp_backward_exposed.reserve(n);
  const bool split_weights = plan.pp > 1 && plan.schedule == Schedule::kZbH1;
  if (split_weights) out.weight.reserve(n);
  const std::vector<Recompute> recomputes = layer_recomputes(plan, out.layers);
  for (std::size_t l = 0; l < out.layers.size(); ++l) {
    const Layer& L = out.layers[l];
    const Recompute rc = recomputes[l];
    const TimeNs fwd = compute.layer_time(L, Pass::kForward, plan.precision, shape);
    // The serial collectives: tensor parallelism's, expert parallelism's
    // all-to-alls and SyncBatchNorm's (Layer::dp_forward).
    const TimeNs a2af = L.ep_forward.empty() ? 0 : detail::sum_costs(L.ep_forward, ep_group, comm, &L.ep_route).total();
    const TimeNs a2ab = L.ep_backward.empty() ? 0 : detail::sum_costs(L.ep_backward, ep_group, comm, &L.ep_route).total();
    const TimeNs epf = a2af + (L.dp_forward.empty() ? 0 : detail::sum_costs(L.dp_forward, dp_group, comm).total());
    const TimeNs epb = a2ab + (L.dp_backward.empty() ? 0 : detail::sum_costs(L.dp_backward, dp_group, comm).total());
    // Under Note [Expert-parallel overlap] the all-to-alls run on a stream
    // of their own: the compute stream is not kept busy by them.
    const TimeNs off_stream_f = plan.overlap_moe_expert_parallel_comm ? a2af : 0;
    const TimeNs off_stream_b = plan.overlap_moe_expert_parallel_comm ? a2ab : 0;
    const CollectiveCost tp_fwd = plan.tp > 1 ? detail::sum_costs(L.tp_forward, tp_group, comm) : CollectiveCost{};
    const CollectiveCost tp_bwd = plan.tp > 1 ? detail::sum_costs(L.tp_backward, tp_group, comm) : CollectiveCost{};
    const TimeNs tpf = tp_fwd.total() + epf;
    TimeNs rec = 0;
    if (rc == Recompute::kFull && L.is_block()) rec = fwd + tpf;
    if (detail::partially_recomputed_bytes(L, rc) > 0) {
      rec = compute.recompute_time(L, detail::partially_recomputed_kernels(L, rc), plan.precision, shape);
      // Megatron's "moe" reruns the layer's all-to-alls (Note [Recompute modules]).
      if (L.recompute_ep && rc == Recompute::kSelective) rec += a2af;
    }
    out.forward.push_back(fwd);
    out.backward.push_back(compute.layer_time(L, Pass::kBackward, plan.precision, shape));
    const double fwd_memory = compute.memory_share(L, Pass::kForward, plan.precision);
    out.forward_memory.push_back(static_cast<float>(fwd_memory));
    out.backward_memory.push_back(static_cast<float>(compute.memory_share(L, Pass::kBackward, plan.precision)));
    double rec_memory = 0;
    if (rc == Recompute::kFull && L.is_block() && rec > 0) {
      rec_memory = fwd_memory * static_cast<double>(fwd) / static_cast<double>(rec);
    } else if (rec > 0) {
      rec_memory = compute.memory_share(detail::partially_recomputed_kernels(L, rc), kernel_precision(L, plan.precision));
      if (L.recompute_ep && rc == Recompute::kSelective) rec_memory *= static_cast<double>(rec - a2af) / static_cast<double>(rec);
    }
    out.recompute_memory.push_back(static_cast<float>(rec_memory));
    if (split_weights) {
      // W's share of the backward, priced kernel by kernel with the plan's
      // model and applied to the layer's backward, measured or not.
      TimeNs all = 0, w = 0;
      for (const Kernel& k : L.backward) {
        const TimeNs t = compute.kernel_time(k, plan.precision) * k.repeat;
        all += t;
        if (detail::is_weight_grad(k)) w += t;
      }
      const double share = all > 0 ? static_cast<double>(w) / static_cast<double>(all) : 0.0;
      out.weight.push_back(static_cast<TimeNs>(static_cast<double>(out.backward.back()) * std::min(1.0, share)));
    }
    out.recompute.push_back(rec);
    out.tp_forward.push_back(tpf);
    out.tp_backward.push_back(tp_bwd.total() + epb);
    out.tp_forward_exposed.push_back(
        (plan.tp > 1 ? detail::tp_exposed_cost(L.tp_forward, tp_group, comm, L, Pass::kForward, plan, compute).total() : 0) + epf -
        off_stream_f);
    out.tp_backward_exposed.push_back(
        (plan.tp > 1 ? detail::tp_exposed_cost(L.tp_backward, tp_group, comm, L, Pass::kBackward, plan, compute).total() : 0) + epb -
        off_stream_b);
    if (plan.overlap_moe_expert_parallel_comm) out.ep_off_stream.push_back(off_stream_f + off_stream_b);
  }
  return out;
}

// Note [Block recompute]
// Megatron-Core's full recompute reruns blocks in one of two ways
// (TransformerBlock._checkpointed_forward, megatron/core/transformer/
// transformer_block.py): `uniform` checkpoints the input of every group of
// recompute_num_layers blocks and reruns the group; `block` checkpoints
// the first recompute_num_layers blocks of the block list, each alone, and
// runs the rest as usual, keeping all their activations ("a method fully
// use the device memory removing redundant re-computation"). The block
// list is one model chunk: each pipeline stage builds its own, and each of
// its virtual stages another (num_layers_per_pipeline_rank is the length of
// that list). So under block N a chunk of k blocks reruns min(N, k) of
// them, its first, and keeps the others' activations whole. The embedding
// and head are never rerun. Megatron-Core moves the window one block on
// where fp8's first input needs no gradient (recompute_skip_num_layers); a
// pipeline's received input always does, and that shift is not modelled.
// Under uniform with recompute_num_layers N > 1 each chunk's blocks go in
// groups of N from its first (the last group may be shorter): a group keeps
// its first block's input only, and before the backward of its last block
// (the first to run backward) its N forwards run again at once, holding all
// of their activations until each block's backward frees its own. The
// time is full recompute's; the memory fewer checkpoints and a larger
// rebuild.
// Before the partition has split the layers (stage_layers empty, pp > 1)
// every block is priced as rerun, a cost equal over the blocks, so the
// balance splits the blocks as evenly as Megatron does; price_layers is
// asked again once the split is known (predict.cpp).
std::vector<Recompute> layer_recomputes(const ResolvedPlan& plan, const std::vector<Layer>& layers) {
  std::vector<Recompute> out(layers.size(), plan.recompute);
  if (plan.recompute != Recompute::kFull || plan.recompute_blocks <= 0) return out;
  if (plan.stage_layers.empty() && plan.pp > 1) return out;  // priced as every block, above
  std::vector<int> chunks = plan.stage_layers;
  if (chunks.empty()) chunks = {static_cast<int>(layers.size())};
  std::size_t l = 0;
  for (const int count : chunks) {
    int blocks = 0;
    for (int i = 0; i < count && l < layers.size(); ++i, ++l) {
      if (!layers[l].is_block()) continue;
      if (blocks++ >= plan.recompute_blocks) out[l] = Recompute::kNone;
    }
  }
  return out;
}

std::vector<int> recompute_groups(const ResolvedPlan& plan, const std::vector<Layer>& layers) {
  const std::vector<Recompute> modes = layer_recomputes(plan, layers);
  std::vector<int> out(layers.size(), -1);
  std::vector<int> chunks = plan.stage_layers;
  if (chunks.empty()) chunks = {static_cast<int>(layers.size())};
  std::size_t l = 0;
  for (const int count : chunks) {
    int in_group = 0, first = -1;
    for (int i = 0; i < count && l < layers.size(); ++i, ++l) {
      if (modes[l] != Recompute::kFull || !layers[l].is_block()) continue;
      if (in_group == 0) first = static_cast<int>(l);
      out[l] = first;
      if (++in_group == std::max(1, plan.recompute_group)) in_group = 0;
    }
  }
  return out;
}

std::vector<double> PricedLayers::costs() const {
  std::vector<double> out;
  out.reserve(layers.size());
  for (std::size_t l = 0; l < layers.size(); ++l) {
    out.push_back(static_cast<double>(forward[l] + backward[l] + recompute[l] + tp_forward[l] + tp_backward[l]));
  }
  return out;
}

void partition(ResolvedPlan& plan, const Model& model, const ClusterSpec& cluster, const ComputeModel& compute,
               const CommModel& comm) {
  if (plan.stage_layers.empty() && plan.pp > 1) {
    partition(plan, model, price_layers(model, plan, cluster, compute, comm));
    return;
  }
  const PricedLayers none;
  partition(plan, model, none);
}

void partition(ResolvedPlan& plan, const Model& model, const PricedLayers& priced) {
  const int chunks = plan.pp * plan.virtual_stages;
  if (!plan.stage_layers.empty()) {
    DTSIM_ASSERT(static_cast<int>(plan.stage_layers.size()) == chunks, "stage_layers does not match the chunks");
    return;
  }
  if (plan.pp == 1) {
    plan.stage_layers = {model.layer_count()};
    return;
  }
  DTSIM_ASSERT(!priced.layers.empty(), "partition: the layers were not priced");
  plan.stage_layers = balance_layers(priced.costs(), chunks);
}

}  // namespace dtsim::sim
