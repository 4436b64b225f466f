#pragma once
// Pieces both stage emitters, the partition and the search share (private
// to sim/): a micro-batch's shape, what a layer keeps for backward, link
// capacities, and the summed cost of a layer's tensor-parallel collectives.

#include <algorithm>
#include <cmath>
#include <vector>

#include "dtsim/sim/cluster.hpp"
#include "dtsim/sim/cost.hpp"
#include "dtsim/sim/lowering.hpp"
#include "dtsim/sim/model.hpp"
#include "dtsim/sim/plan.hpp"
#include "dtsim/sim/task_graph.hpp"

namespace dtsim::sim::detail {

/// Bytes a weight element of a quantised GEMM's cached copies take (Note
/// [FP8 memory] in emitter.hpp, Note [NVFP4 training] in cost_compute.cpp).
inline double fp8_weight_copy_bytes(const ResolvedPlan& plan, int compute_capability) {
  return plan.precision == Precision::kFp4 ? kNvfp4WeightCopyBytes : fp8_copy_bytes(plan.fp8_recipe, compute_capability);
}
/// Bytes a quantised GEMM's weight element moves in the data-parallel
/// gathers: the working precision's, or under fp8_param_gather FP8's 1 byte,
/// NVFP4's row-wise copy with its scales (0.5625), and mxfp8's bf16 (Note
/// [FP8 memory] in emitter.hpp).
inline double gathered_weight_bytes(const ResolvedPlan& plan) {
  const double w = element_bytes(plan.precision);
  if (!plan.fp8_param_gather) return w;
  if (plan.precision == Precision::kFp4) return kNvfp4WeightCopyBytes / 2;
  return plan.fp8_recipe == Fp8Recipe::kMxfp8 ? w : 1.0;
}
/// What gathering `params` parameters moves, `quantized` of them GEMM
/// weights at gathered_weight_bytes() (the rest at the working precision).
inline Bytes gathered_bytes_of(const ResolvedPlan& plan, std::int64_t params, std::int64_t quantized) {
  const Bytes w = element_bytes(plan.precision);
  quantized = std::min(quantized, params);
  return (params - quantized) * w + static_cast<Bytes>(std::ceil(static_cast<double>(quantized) * gathered_weight_bytes(plan)));
}

/// The shape of one micro-batch of a resolved plan, as the model describes
/// one rank's share of it (tensor-parallel shard included).
inline WorkloadShape workload_shape(const ResolvedPlan& p, const DeviceSpec& device) {
  WorkloadShape shape;
  shape.micro_batch = p.micro_batch;
  shape.seq_len = p.seq_len;
  shape.document_len = p.document_len;
  shape.loss_chunks = p.loss_chunks;
  shape.loss_kernel = p.loss_kernel;
  shape.act_bytes = element_bytes(p.precision);
  shape.fp32_weights = shape.act_bytes == 4 || (p.master_weights && !p.fsdp && p.zero_stage == 0);
  shape.fp8 = quantized_gemms(p.precision);
  shape.fp4 = p.precision == Precision::kFp4;
  shape.bf16_start = p.bf16_layers_start;
  shape.bf16_end = p.bf16_layers_end;
  shape.mask_bytes = device.dropout_mask_bytes > 0 ? device.dropout_mask_bytes : shape.act_bytes;
  shape.fused_rnn = device.fused_rnn;
  shape.tp = p.tp;
  shape.sync_batchnorm = p.sync_batchnorm && p.dp > 1;
  shape.dp = shape.sync_batchnorm ? p.dp : 1;  // read by nothing else: one memo entry for every dp (Note [Layer memo])
  shape.sequence_parallel = p.sequence_parallel;
  shape.flash_attention = p.flash_attention;
  shape.cp = p.cp;
  shape.cp_all_gather = p.cp_comm == CpComm::kAllGather;
  shape.ep = p.ep;
  shape.etp = p.etp;
  shape.moe_imbalance = p.moe_imbalance;
  shape.moe_capacity_factor = p.moe_capacity_factor;
  shape.moe_pad = p.moe_pad;
  shape.moe_deepep = p.moe_dispatcher == MoeDispatcher::kDeepEp;
  shape.moe_allgather = p.moe_dispatcher == MoeDispatcher::kAllGather;
  shape.moe_dense = p.moe_experts == MoeExperts::kDense;
  shape.megatron_loss = p.loss_parallel != LossParallel::kDtensor;
  shape.fused_kernels = p.kernels == Kernels::kFused;
  shape.dp_step = p.dp * p.cp > 1;
  shape.recompute_modules = effective_recompute_modules(p.recompute == Recompute::kSelective, p.recompute_modules);
  shape.offload_modules = p.offload_modules;
  shape.tp_comm_overlap = p.tp_comm_overlap && p.tp > 1 && p.sequence_parallel;
  shape.tp_overlap_cfg = shape.tp_comm_overlap ? p.tp_comm_overlap_cfg : TpOverlapCfg::kRing;
  return shape;
}

/// Appends a memory operation unless it moves no bytes (the executor would
/// still apply it, and lowerings add one per task).
inline void add_bytes(MemOps& ops, MemCategory category, Bytes bytes) {
  if (bytes != 0) ops.push_back({category, bytes});
}

/// Partial recompute: the bytes of a layer's saved_bytes `recompute` drops
/// (selective: the attention core; op: what the op-level policy does not
/// keep, Note [Op-level recompute] in models/src/llama.cpp), 0 otherwise.
inline Bytes partially_recomputed_bytes(const Layer& L, Recompute recompute) {
  if (recompute == Recompute::kSelective) return L.attention_core_bytes;
  if (recompute == Recompute::kOp) return L.op_recompute_bytes;
  return 0;
}
/// ... and the forward kernels its backward reruns for them.
inline const std::vector<Kernel>& partially_recomputed_kernels(const Layer& L, Recompute recompute) {
  static const std::vector<Kernel> none;
  if (recompute == Recompute::kSelective) return L.attention_core;
  if (recompute == Recompute::kOp) return L.op_recompute;
  return none;
}

/// Bytes layer l keeps from its forward to its backward per micro-batch
/// under `recompute`: with full recompute a block keeps only its input (the
/// previous layer's output); partial recompute drops its part.
inline Bytes kept_bytes(const std::vector<Layer>& layers, std::size_t l, Recompute recompute) {
  const Layer& L = layers[l];
  if (recompute == Recompute::kFull && L.is_block()) return l == 0 ? 0 : layers[l - 1].output_bytes;
  return L.saved_bytes - partially_recomputed_bytes(L, recompute);
}
/// ... where full recompute reruns blocks in groups (recompute_groups: the
/// first block of l's group): only a group's first block keeps its input
/// (Note [Block recompute] in sim/src/parallel/partition.cpp).
inline Bytes kept_bytes(const std::vector<Layer>& layers, std::size_t l, Recompute recompute, int group_first) {
  if (recompute == Recompute::kFull && layers[l].is_block() && group_first >= 0 && static_cast<std::size_t>(group_first) != l) return 0;
  return kept_bytes(layers, l, recompute);
}

/// A backward kernel of the weight-gradient pass W (Note [Zero bubble] in
/// lower.cpp): a weight GEMM's dW, or an embedding's scatter of its rows'
/// gradients. The batched matmuls of attention have no weights, and an
/// LSTM's weight gradients come out of its one fused backward.
inline bool is_weight_grad(const Kernel& k) {
  if (k.kind == KernelKind::kEmbedding) return true;
  return k.kind == KernelKind::kGemm && k.name.size() > 6 && k.name.compare(k.name.size() - 6, 6, ".wgrad") == 0;
}

/// What a deferred W keeps from its B to its own pass: each weight GEMM's
/// input X and the gradient of its output dY, the two operands of dW =
/// X^T dY, (m, k) and (k, n) of the (m, k) x (k, n) product whose operands
/// and result are the kernel's bytes.
inline Bytes weight_grad_hold(const Layer& layer) {
  double held = 0;
  for (const Kernel& k : layer.backward) {
    if (!is_weight_grad(k) || k.kind != KernelKind::kGemm) continue;
    const double in = static_cast<double>(k.m) * k.k + static_cast<double>(k.k) * k.n;
    const double all = in + static_cast<double>(k.m) * k.n;
    if (all > 0) held += static_cast<double>(k.bytes) * in / all * static_cast<double>(k.repeat);
  }
  return static_cast<Bytes>(held);
}

/// Sets a simulated rank's link capacities; `inter_groups` groups of ranks
/// share a node's NICs.
inline void set_link_capacity(SimRank& r, const ClusterSpec& c, const CommModel& comm, int inter_groups) {
  const auto* analytic = dynamic_cast<const AnalyticCommModel*>(&comm);
  r.link_capacity[static_cast<int>(LinkClass::kIntraNode)] = c.intra_node.rate();
  r.link_capacity[static_cast<int>(LinkClass::kInterNode)] =
      analytic != nullptr ? analytic->link_capacity(LinkClass::kInterNode, inter_groups)
                          : c.inter_node.rate() * c.nics_per_node / inter_groups;
  r.link_capacity[static_cast<int>(LinkClass::kHostDevice)] = c.host_device_bandwidth;
}

/// Note [Interference] (engine/executor.cpp): how much a rank's compute
/// slows beside its collectives. The SMs a collective takes slow its
/// compute-bound kernels by the device's comm_slowdown (Note [Interference
/// prior] in config/device_db.cpp); the HBM bandwidth its traffic takes
/// slows its memory-bound kernels by h / (1 - h), h the traffic over the
/// bandwidth those kernels reach: the device's comm_hbm_traffic bytes of
/// HBM a byte on the link at the link class's rate (r.link_capacity, set
/// first), at most kMaxHbmShare (task_graph.hpp) of it (hbm_slowdown in
/// lower.cpp). A device whose comm_slowdown is 0 keeps both 0.
/// And a CPU rank's receiver notices wait for its core (Notes [Busy sender]
/// and [Quiet sender]; as long as the comm model's profile says, if it does),
/// and its compute pays for resuming after a wait where the comm model
/// measured it (Note [Resuming after a wait]).
inline void set_interference(SimRank& r, const ClusterSpec& c, const CommModel& comm) {
  r.comm_slowdown = c.device.comm_slowdown;
  r.send_waits_for_core = c.device.send_waits_for_core > 0 ? comm.send_waits_for_core().value_or(c.device.send_waits_for_core) : 0;
  r.resume = c.device.comm_overlaps_compute ? std::vector<std::pair<TimeNs, TimeNs>>{} : comm.resume_after_wait();
  r.hbm_slowdown = {};
  r.hbm_contention = c.device.comm_hbm_contention;
  for (LinkClass k : {LinkClass::kIntraNode, LinkClass::kInterNode}) {  // host copies: copy engines (Note [Interference])
    const auto i = static_cast<std::size_t>(k);
    r.hbm_slowdown[i] = hbm_slowdown(c.device, r.link_capacity[i]);
  }
}

/// Note [A collective's stalls] (cost/cost_profile.cpp): `count` of `one`'s
/// stalls added to `into`'s, their time kept: the longer stall, met as
/// often as the time they add comes to.
/// The same of the stalls measured in a step (Note [Collectives in a step]),
/// and `count` of `one`'s longer time there (Note [A collective in a step]).
inline void add_stalls(CollectiveCost& into, const CollectiveCost& one, double count) {
  const auto add = [count](TimeNs& stall, double& stalls, TimeNs one_stall, double one_stalls) {
    if (one_stall <= 0 || one_stalls <= 0 || count <= 0) return;
    const double time = static_cast<double>(stall) * stalls + static_cast<double>(one_stall) * one_stalls * count;
    stall = std::max(stall, one_stall);
    stalls = time / static_cast<double>(stall);
  };
  add(into.stall, into.stalls, one.stall, one.stalls);
  add(into.step_stall, into.step_stalls, one.step_stall, one.step_stalls);
  if (count > 0) into.step_extra += static_cast<TimeNs>(std::llround(static_cast<double>(one.step_extra) * count));
  into.step_lead = std::max(into.step_lead, one.step_lead);
}

/// Sum of `count` x cost of each collective, as one flow: latencies add,
/// wire bytes add, and the rate is chosen so the total time is exact when
/// nothing else shares the link.
/// With a `route` (a layer's ep_route under DeepEP), its all-to-alls are
/// priced as DeepEP's dispatch (CommModel::expert_dispatch).
inline CollectiveCost sum_costs(const std::vector<LayerComm>& comms, const CommGroup& group, const CommModel& model,
                                const ExpertRoute* route = nullptr) {
  CollectiveCost out;
  double flow_seconds = 0;
  for (const auto& c : comms) {
    const bool deepep = route != nullptr && route->top_k > 0 && c.op == CollectiveOp::kAllToAll;
    const CollectiveCost one = deepep ? model.expert_dispatch(c.bytes, *route, group) : model.collective(c.op, c.bytes, group);
    if (out.algorithm.empty()) {
      out.algorithm = one.algorithm;
      out.link = one.link;
    }
    out.latency += one.latency * c.count;
    out.wire_bytes += one.wire_bytes * c.count;
    if (one.rate > 0) flow_seconds += one.wire_bytes * c.count / one.rate;
    add_stalls(out, one, c.count);
  }
  out.rate = flow_seconds > 0 ? out.wire_bytes / flow_seconds : 1e30;
  return out;
}

// Note [Sequence-parallel re-gather]
// Under sequence parallelism a column-parallel linear keeps only its rank's
// tokens and all-gathers them again in backward for its weight's gradient
// (Megatron's LinearWithGradAccumulationAndAsyncCommunication; the twins'
// Note [Sequence-parallel linears] in models/torch). Megatron starts that
// all-gather asynchronously and computes the input's gradient meanwhile,
// so on a GPU it hides behind that GEMM and a layer's backward pays its
// tp_backward alone. Where a rank's collectives take its cores (Gloo on a
// CPU: DeviceSpec::comm_overlaps_compute false) nothing hides it: the
// backward pays the forward's gathers of column-parallel inputs again, a
// block's or a head's first all-gather (tp_pairs': a block's two, the
// head's one; a MoE block's token gather after them is no linear's input;
// docs/validation-cpu.md, "Sequence parallelism in the runtime").
inline std::vector<LayerComm> tp_backward_ops(const Layer& L, const ResolvedPlan& p, const DeviceSpec& d) {
  std::vector<LayerComm> out = L.tp_backward;
  if (!p.sequence_parallel || p.tp <= 1 || d.comm_overlaps_compute) return out;
  if (L.kind != LayerKind::kTransformer && L.kind != LayerKind::kLmHead) return out;
  for (const auto& c : L.tp_forward) {
    if (c.op != CollectiveOp::kAllGather) continue;
    out.push_back(c);
    break;
  }
  return out;
}

/// Adds `one` to `into` as one flow (as sum_costs does).
void add_flow(CollectiveCost& into, const CollectiveCost& one);

/// Adds a layer's collectives inside its passes (Layer::ep_forward or
/// ep_backward, the expert-parallel all-to-alls over `group` = the ep
/// group; Layer::dp_forward or dp_backward, SyncBatchNorm's over the dp
/// group) to a unit's flow `into` and their bytes to `bytes`; `route` as
/// for sum_costs.
inline void add_comms(const std::vector<LayerComm>& ops, const CommGroup& group, const CommModel& comm,
                      CollectiveCost& into, Bytes& bytes, const ExpertRoute* route = nullptr) {
  if (ops.empty()) return;
  add_flow(into, sum_costs(ops, group, comm, route));
  for (const auto& o : ops) bytes += o.bytes * o.count;
}

/// Expert parameters are reduced and sharded over their own group: the
/// parameters of `params`, `expert` of them routed experts', one rank
/// keeps of a ZeRO shard (Note [Expert mesh] in cost_comm.cpp).
/// Note [ZeroRedundancyOptimizer] (passes/data_parallel.cpp): a Python
/// loop's ZeRO-1, PyTorch's ZeroRedundancyOptimizer over DDP.
inline bool zero_redundancy_optimizer(const ResolvedPlan& p) {
  return p.runtime == Runtime::kPython && p.zero_stage == 1 && !p.fsdp && p.shard_group > 1 && p.pp == 1;
}

/// Each parameter tensor's elements, layer by layer: a layer's modules'
/// tensors where it describes them (a tied head's borrowed tensor is the
/// embedding's), else its param_tensors with the largest apart and the rest
/// equal (Layer::largest_param_tensor), or one tensor. A fine-tune's
/// adapters (a layer with frozen weights) take the second way.
inline std::vector<std::int64_t> param_tensor_sizes(const std::vector<Layer>& layers) {
  std::vector<std::int64_t> out;
  for (const Layer& L : layers) {
    if (L.params <= 0) continue;
    if (!L.modules.empty() && L.frozen_params == 0) {
      for (const ParamModule& m : L.modules) {
        if (m.tied.empty()) out.insert(out.end(), m.tensors.begin(), m.tensors.end());
      }
      continue;
    }
    const std::int64_t n = std::max(1, L.param_tensors);
    std::int64_t rest = L.params, parts = n;
    if (n > 1 && L.largest_param_tensor > 0 && L.largest_param_tensor < L.params) {
      out.push_back(L.largest_param_tensor);
      rest -= L.largest_param_tensor;
      --parts;
    }
    for (std::int64_t k = 0; k < parts; ++k) out.push_back(rest / parts + (k < rest % parts ? 1 : 0));
  }
  return out;
}

/// What one rank of ZeroRedundancyOptimizer's partition owns.
struct ZeroRedundancyShare {
  std::int64_t elements = 0;
  int tensors = 0;
};

/// ZeroRedundancyOptimizer's partition (_partition_parameters): tensors
/// largest first, each to the rank holding the fewest elements so far (the
/// lowest such rank); the share of the rank holding the most (ties: the
/// most tensors), whose step the others wait for.
inline ZeroRedundancyShare zero_redundancy_share(std::vector<std::int64_t> sizes, int ranks) {
  std::stable_sort(sizes.begin(), sizes.end(), std::greater<>());
  std::vector<ZeroRedundancyShare> share(static_cast<std::size_t>(std::max(1, ranks)));
  for (const std::int64_t t : sizes) {
    auto it = std::min_element(share.begin(), share.end(),
                               [](const ZeroRedundancyShare& a, const ZeroRedundancyShare& b) { return a.elements < b.elements; });
    it->elements += t;
    ++it->tensors;
  }
  return *std::max_element(share.begin(), share.end(), [](const ZeroRedundancyShare& a, const ZeroRedundancyShare& b) {
    return a.elements != b.elements ? a.elements < b.elements : a.tensors < b.tensors;
  });
}

/// A rank's part of `params` of which `expert` are routed experts': the
/// others split over n ranks, the experts' over ne, each rounded up.
inline std::int64_t split_over(std::int64_t params, std::int64_t expert, int n, int ne) {
  const std::int64_t a = std::max(1, n), b = std::max(1, ne);
  return (params - expert + a - 1) / a + (expert + b - 1) / b;
}

inline std::int64_t shard_of(const ResolvedPlan& p, std::int64_t params, std::int64_t expert) {
  return split_over(params, expert, p.shard_group, p.expert_shard_group);
}

/// The parameters whose optimizer state a rank holds and steps: its shard,
/// or under HSDP's outer optimizer sharding (Note [Hybrid sharding] in
/// parallel/plan.cpp) its 1 / replicas of it: the dense parameters over all
/// dp, the experts' over all edp.
inline std::int64_t optimizer_shard_of(const ResolvedPlan& p, std::int64_t params, std::int64_t expert) {
  return p.outer_optim ? split_over(params, expert, p.dp, p.edp) : shard_of(p, params, expert);
}

/// The larger of a rank's two shards, the dense parameters' and the
/// routed experts': what an optimizer stepping them as two groups, one
/// after the other, holds at once.
inline std::int64_t largest_group_of(const ResolvedPlan& p, std::int64_t params, std::int64_t expert) {
  const std::int64_t n = std::max(1, p.shard_group), ne = std::max(1, p.expert_shard_group);
  return std::max((params - expert + n - 1) / n, (expert + ne - 1) / ne);
}

// Note [fp32 gradient partition]
// DeepSpeed's ZeRO-1/2 step (stage_1_and_2.py, step) takes each parameter
// group in turn: it frees the gradients of the parameters outside the
// rank's partition, casts the partition's reduced 16-bit gradients to fp32
// (single_grad_partition = flat_grad_partition.to(fp32)), frees the 16-bit
// ones, steps the fp32 master with it and frees it: 4 bytes an element of
// the rank's shard while the step runs, the "4 grads32" of the 18 bytes in
// estimate_zero2_model_states_mem_needs. Only one group's at a time: the
// dense and the routed experts' partitions in turn (dtsim_worker's two
// spaces; a model with one optimizer group has one). None where the
// gradients are fp32 already (fp32 training, where the cast is a no-op;
// Megatron's buffer; nanotron's accumulator), where no fp32 master takes
// them (master_weights false: nanotron's ZeRO-1 without its accumulator
// steps the bf16 shard with its bf16 gradients, optim/zero.py), under
// ZeRO-Offload (the host holds it) or FSDP.
// DeepSpeed's stage 3 does the same sub-group by sub-group
// (stage3.py, _prepare_fp32_grad_for_sub_group, sub_group_size 1e9
// elements by default): one sub-group's fp32 gradient at a time.

/// Note [nanotron's fp32 accumulator] (emitter.hpp): one backward's
/// `elements` 16-bit gradients added into the fp32 buffer (2 bytes read, 4
/// read and 4 written each), with the first micro-batch's the buffer zeroed
/// too (4 written), as one elementwise kernel.
inline TimeNs fp32_accumulate_time(const ComputeModel& model, std::int64_t elements, bool zeroes) {
  Kernel k;
  k.name = "fp32_accumulate";
  k.kind = KernelKind::kElementwise;
  k.flops = static_cast<Flops>(elements);
  k.bytes = elements * (zeroes ? 14 : 10);
  return model.kernel_time(k, Precision::kFp32);
}

/// Adds Note [fp32 gradient partition] to the step of a rank holding
/// `params` parameters (`expert` of them routed experts', `shard` its
/// shard): the fp32 copy lives while the step runs, and under ZeRO-1 the
/// gradients outside the shard go as it starts (`frees` begins with the
/// free of the rank's whole gradients, which keeps only the shard's).
inline void add_step_fp32_grads(const ResolvedPlan& p, std::int64_t params, std::int64_t expert, std::int64_t shard,
                                Bytes gw, MemOps& on_start, MemOps& frees) {
  if (p.megatron_grad_buffer && !p.accumulate_allreduce_grads_in_fp32 && p.zero_stage == 1 && p.precision != Precision::kFp32 &&
      p.offload_optimizer != Offload::kCpu && !p.te_master_weights()) {
    // Note [Megatron's gradient buffer]: Megatron-Core's copy, every
    // parameter's shard at once (distrib_optimizer.py,
    // _copy_model_grads_to_main_grads), the buffer kept whole.
    const Bytes g32 = 4 * shard;
    on_start.push_back({MemCategory::kGradients, g32});
    frees.push_back({MemCategory::kGradients, -g32});
    return;
  }
  // Note [Precision-aware optimizer] (plan.cpp): FusedAdam reads the
  // 16-bit gradients as they are.
  // Without masters (Note [No master weights]) the optimizer steps the
  // 16-bit parameters with their 16-bit gradients: nothing to copy.
  if (p.zero_stage < 1 || (p.zero_stage > 2 && !p.zero3_modules()) || p.fsdp || p.precision == Precision::kFp32 || !p.master_weights ||
      p.accumulate_allreduce_grads_in_fp32 || p.fp32_grad_accumulator || p.offload_optimizer == Offload::kCpu || p.te_master_weights()) {
    return;
  }
  constexpr std::int64_t kSubGroup = 1000000000;  // DeepSpeed's sub_group_size default
  std::int64_t elements = largest_group_of(p, params, expert);
  if (p.zero_stage == 3) elements = std::min(elements, kSubGroup);
  const Bytes g32 = 4 * elements;
  if (p.zero_stage == 1) {
    const Bytes outside = (params - shard) * gw;
    on_start.push_back({MemCategory::kGradients, -outside});
    frees.front().bytes += outside;
  }
  on_start.push_back({MemCategory::kGradients, g32});
  frees.push_back({MemCategory::kGradients, -g32});
}

/// Adds Note [Precision-aware optimizer]'s fp32 copies of the states kept
/// in other types (sim/src/parallel/plan.cpp) to the step of a rank holding
/// `params` parameters, `expert` of them routed experts': a parameter
/// group's at a time, the largest being the dense or the experts' shard
/// (Megatron-Core steps them as two optimizers).
inline void add_step_state_copies(const ResolvedPlan& p, std::int64_t params, std::int64_t expert, MemOps& on_start, MemOps& frees) {
  const int per = optimizer_step_copy_bytes_per_param(p);
  if (per == 0 || p.offload_optimizer == Offload::kCpu) return;
  const Bytes copies = per * largest_group_of(p, params, expert);
  on_start.push_back({MemCategory::kOptimizer, copies});
  frees.push_back({MemCategory::kOptimizer, -copies});
}

/// An optimizer step of `params` parameters in `tensors` updates as the
/// compute model prices it; without master weights (Note [No master
/// weights] in sim/src/parallel/plan.cpp) the same step streams fewer bytes,
/// and every model prices a step as a stream of them (Note [Optimizer step]
/// in cost_compute.cpp), so it takes update_bytes_per_param's share of the
/// mixed step's time (Adam in bf16: 14 of 28 bytes).
inline TimeNs step_time(const ComputeModel& m, double params, int tensors, const ResolvedPlan& p, const DeviceSpec& device) {
  const TimeNs t = m.optimizer_time(params, tensors, p.optimizer, p.precision, device);
  // The step's bytes as the plan keeps its states (no masters, or Note
  // [Precision-aware optimizer]'s types) against those it was priced at.
  const double priced = update_bytes_per_param(p.optimizer, p.precision), streamed = update_bytes_per_param(p);
  return priced > 0 && streamed != priced ? static_cast<TimeNs>(std::llround(static_cast<double>(t) * streamed / priced)) : t;
}

/// Adds Note [Unfused step]'s temporaries (sim/cost.hpp) to a step whose
/// largest tensor, or flat shard, has `largest` elements: held while it
/// runs, on the device unless the optimizer is offloaded.
inline void add_step_temporaries(const ResolvedPlan& p, const DeviceSpec& device, std::int64_t largest,
                                 MemOps& on_start, MemOps& frees) {
  // Note [8-bit optimizer]: bitsandbytes' one kernel a tensor makes none.
  if (p.offload_optimizer == Offload::kCpu || p.optim_bits == 8) return;
  const Bytes t = unfused_step_bytes(largest, p.optimizer, p.precision, device.fused_optimizer, p.master_weights);
  add_bytes(on_start, MemCategory::kOptimizer, t);
  add_bytes(frees, MemCategory::kOptimizer, -t);
}

/// The part of a layer's context-parallel exchange (Layer::cp_forward or
/// cp_backward) that its attention does not hide, as a cost of the same
/// link and rate (Note [Context-parallel exchange] in
/// passes/context_parallel.cpp). `bytes` gets what the exchange moves.
CollectiveCost cp_exposed_cost(const Layer& layer, Pass pass, const ResolvedPlan& plan, const CommGroup& cp_group,
                               const CommModel& comm, const ComputeModel& compute, Bytes& bytes);
/// A layer's tensor-parallel collectives `ops` in `pass` over `group`:
/// under tp_comm_overlap the part its GEMMs do not hide (Note [TP comm
/// overlap] in passes/tensor_parallel.cpp), the serial ones whole; all of
/// them without it.
CollectiveCost tp_exposed_cost(const std::vector<LayerComm>& ops, const CommGroup& group, const CommModel& comm, const Layer& layer,
                               Pass pass, const ResolvedPlan& plan, const ComputeModel& compute);

}  // namespace dtsim::sim::detail
