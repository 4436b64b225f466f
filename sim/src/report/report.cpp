#include "dtsim/sim/report.hpp"

#include <algorithm>
#include <cmath>
#include <iterator>
#include <sstream>

#include <fmt/format.h>

#include "dtsim/sim/json_writer.hpp"
#include "report/text.hpp"

namespace dtsim::sim {
namespace {

using detail::gib;

std::string human_time(TimeNs t) {
  const double s = ns_to_seconds(t);
  if (s >= 1) return fmt::format("{:.3f} s", s);
  if (s >= 1e-3) return fmt::format("{:.2f} ms", s * 1e3);
  return fmt::format("{:.1f} us", s * 1e6);
}

std::string plan_line(const ResolvedPlan& p, bool attention, bool sequence) {
  std::ostringstream os;
  os << "dp=" << p.dp;
  if (p.tp > 1) os << " tp=" << p.tp << (p.sequence_parallel ? " (sequence parallel)" : "");
  if (p.cp > 1) os << " cp=" << p.cp << " (" << to_string(p.cp_comm) << ")";
  if (p.ep > 1) os << " ep=" << p.ep << (p.etp != p.tp ? " etp=" + std::to_string(p.etp) : "");
  if (p.moe_imbalance != 1.0) os << " moe_imbalance=" << fmt::format("{:g}", p.moe_imbalance);
  if (p.moe_force_load_balance) os << " moe_force_load_balance";
  if (p.moe_dispatcher != MoeDispatcher::kAllToAll) os << " moe_dispatcher=" << to_string(p.moe_dispatcher);
  if (p.overlap_moe_expert_parallel_comm) os << " a2a-overlap";
  if (p.moe_experts != MoeExperts::kGrouped) os << " moe_experts=" << to_string(p.moe_experts);
  if (p.tp > 1 && p.loss_parallel != LossParallel::kMegatron) os << " loss_parallel=" << to_string(p.loss_parallel);
  if (p.runtime != Runtime::kLibtorch) os << " runtime=" << to_string(p.runtime);
  if (p.moe_capacity_factor > 0) os << " moe_capacity_factor=" << fmt::format("{:g}", p.moe_capacity_factor) << (p.moe_pad ? " (padded)" : "");
  if (p.pp > 1) {
    os << " pp=" << p.pp << " " << to_string(p.schedule);
    if (p.virtual_stages > 1) os << " virtual_stages=" << p.virtual_stages;
    os << " stage_layers=[";
    for (std::size_t i = 0; i < p.stage_layers.size(); ++i) os << (i ? "," : "") << p.stage_layers[i];
    os << "]";
  }
  os << " micro_batch=" << p.micro_batch << " grad_accum=" << p.grad_accum << " global_batch=" << p.global_batch;
  if (sequence) os << " seq_len=" << p.seq_len;
  if (sequence && p.document_len > 0) os << " document_len=" << p.document_len;
  if (p.loss_chunks > 1) os << " loss_chunks=" << p.loss_chunks;
  if (p.loss_kernel != LossKernel::kCrossEntropy) os << " loss_kernel=" << to_string(p.loss_kernel);
  os << " " << to_string(p.precision) << " ";
  if (attention) os << (p.flash_attention ? "flash" : "eager") << "-attention ";
  if (p.kernels == Kernels::kFused) os << "fused-kernels ";
  if (p.fp8_recipe != Fp8Recipe::kDelayed) os << "fp8-" << to_string(p.fp8_recipe) << " ";
  os << to_string(p.optimizer)
     << (is_sgd(p.optimizer) ? fmt::format(" momentum={:g}", p.sgd_momentum) : "") << " zero_stage=" << p.zero_stage;
  if (p.fsdp) {
    os << " (fsdp " << to_string(p.spec.fsdp) << (p.fsdp_version == 2 ? ", FSDP2" : "") << (p.limit_all_gathers ? "" : ", limit_all_gathers false")
       << (p.zero_stage == 3 && p.fsdp_wrap == FsdpWrap::kLayers       ? ", a unit per layer"
           : p.zero_stage == 3 && p.fsdp_wrap == FsdpWrap::kTorchtitan ? ", a unit per layer, [norm, output] kept to its backward"
                                                                        : "")
       << (p.fsdp_reduce_fp32 ? ", reduce_dtype fp32" : "") << ")";
  }
  if (p.zero_stage == 3 && p.z3_leaf_layers) os << " z3_leaf_layers";
  if (p.zero3_modules()) {
    // Note [ZeRO-3 modules]: the coordinator's knobs where not DeepSpeed's defaults.
    const PlanSpec d;
    if (p.spec.stage3_prefetch_bucket_size != d.stage3_prefetch_bucket_size) os << fmt::format(" stage3_prefetch_bucket_size={}", p.stage3_prefetch_bucket_size);
    if (p.spec.stage3_max_live_parameters != d.stage3_max_live_parameters) os << fmt::format(" stage3_max_live_parameters={}", p.stage3_max_live_parameters);
    if (p.spec.stage3_max_reuse_distance != d.stage3_max_reuse_distance) os << fmt::format(" stage3_max_reuse_distance={}", p.stage3_max_reuse_distance);
    if (p.spec.stage3_param_persistence_threshold != d.stage3_param_persistence_threshold) {
      os << fmt::format(" stage3_param_persistence_threshold={}", p.stage3_param_persistence_threshold);
    }
  }
  if (p.offload_optimizer == Offload::kCpu) os << " offload_optimizer=cpu";
  if (p.offload_params == Offload::kCpu) os << " offload_params=cpu";
  if (p.recompute != Recompute::kNone) os << " recompute=" << to_string(p.recompute);
  if (p.recompute == Recompute::kSelective && p.recompute_modules != kRecomputeModulesDefault) {
    os << " (" << (p.recompute_modules == 0 ? "no modules" : recompute_modules_string(p.recompute_modules)) << ")";
  }
  if (p.recompute_blocks > 0) os << " (block, the first " << p.recompute_blocks << " blocks of each chunk)";
  if (p.recompute_group > 1) os << " (uniform, groups of " << p.recompute_group << " blocks)";
  if (p.cpu_offloading_num_layers > 0) os << " cpu_offloading_num_layers=" << p.cpu_offloading_num_layers;
  if (p.enable_activation_offloading) os << " activation-offloading";
  if (p.offload_modules != 0) {
    // Note [Fine-grained offload]: the modules, and the knobs off their defaults.
    std::string mods = offload_modules_string(p.offload_modules);
    mods.erase(std::remove(mods.begin(), mods.end(), ' '), mods.end());
    os << " offload_modules=" << mods;
    if (p.min_offloaded_tensor_size != 1024 * 1024) os << " min_offloaded_tensor_size=" << p.min_offloaded_tensor_size;
    if (p.activation_offload_fraction != 1.0) os << " activation_offload_fraction=" << p.activation_offload_fraction;
    if (p.delta_offload_bytes_across_pp_ranks > 0) os << " delta_offload_bytes_across_pp_ranks=" << p.delta_offload_bytes_across_pp_ranks;
    if (p.fine_grained_offloading_max_inflight_offloads >= 0) {
      os << " fine_grained_offloading_max_inflight_offloads=" << p.fine_grained_offloading_max_inflight_offloads;
    }
  }
  if (p.bf16_layers_start + p.bf16_layers_end > 0) os << " bf16_layers=" << p.bf16_layers_start << "+" << p.bf16_layers_end;
  if (p.outer_optim) os << " outer_dp_sharding_strategy=optim";
  if (p.partition_activations) os << " partition_activations";
  if (p.cpu_checkpointing) os << " cpu_checkpointing";
  if (!p.overlap) os << " overlap=false";
  if (p.zero_stage == 2 && !p.contiguous_gradients) os << " contiguous_gradients=false";
  if (p.zero_stage == 1 && !p.reduce_scatter && p.shard_group > 1) os << " reduce_scatter=false";
  if (p.overlap_param_gather) os << " overlap-param-gather";
  if (p.accumulate_allreduce_grads_in_fp32) os << " fp32-grads";
  else if (p.megatron_grad_buffer) os << " grad-buffer";
  if (p.fp32_grad_accumulator) os << " fp32-accumulator";
  if (!p.master_weights) os << " no-master-weights";
  if (p.optim_bits == 8) os << " 8-bit-optimizer";
  if (p.optimizer_in_backward) os << " optimizer-in-backward";
  if (p.use_precision_aware_optimizer) {
    // Note [Precision-aware optimizer]: the types not left at fp32.
    os << " precision-aware";
    if (p.exp_avg_dtype != StateDtype::kFp32) os << " exp_avg=" << to_string(p.exp_avg_dtype);
    if (p.exp_avg_sq_dtype != StateDtype::kFp32) os << " exp_avg_sq=" << to_string(p.exp_avg_sq_dtype);
    if (p.main_params_dtype != StateDtype::kFp32) os << " main_params=" << to_string(p.main_params_dtype);
    if (!p.store_param_remainders) os << " store_param_remainders=false";
  }
  if (p.deallocate_pipeline_outputs) os << " outputs-freed";
  if (p.sync_batchnorm) os << " sync_batchnorm";
  return os.str();
}

void plan_json(JsonWriter& j, const ResolvedPlan& p) {
  j.key("plan").begin_object();
  j.field("name", p.spec.name);
  j.field("dp", p.dp).field("tp", p.tp).field("pp", p.pp).field("cp", p.cp).field("cp_comm", to_string(p.cp_comm));
  j.field("ep", p.ep).field("etp", p.etp).field("edp", p.edp);
  j.field("moe_imbalance", p.moe_imbalance).field("moe_capacity_factor", p.moe_capacity_factor).field("moe_pad", p.moe_pad)
      .field("moe_force_load_balance", p.moe_force_load_balance).field("moe_dispatcher", to_string(p.moe_dispatcher))
      .field("overlap_moe_expert_parallel_comm", p.overlap_moe_expert_parallel_comm)
      .field("moe_experts", to_string(p.moe_experts));
  j.field("loss_parallel", to_string(p.loss_parallel));
  j.field("attention", p.flash_attention ? "flash" : "eager");
  j.field("runtime", to_string(p.runtime));
  j.field("kernels", to_string(p.kernels));
  j.field("fp8_recipe", to_string(p.fp8_recipe));
  j.field("sync_batchnorm", p.sync_batchnorm);
  j.field("micro_batch", static_cast<std::int64_t>(p.micro_batch));
  j.field("grad_accum", static_cast<std::int64_t>(p.grad_accum));
  j.field("global_batch", static_cast<std::int64_t>(p.global_batch));
  j.field("seq_len", static_cast<std::int64_t>(p.seq_len));
  j.field("document_len", static_cast<std::int64_t>(p.document_len));
  j.field("loss_chunks", static_cast<std::int64_t>(p.loss_chunks));
  j.field("loss_kernel", to_string(p.loss_kernel));
  j.field("precision", to_string(p.precision));
  j.field("optimizer", to_string(p.optimizer));
  j.field("sgd_momentum", p.sgd_momentum);
  j.field("zero_stage", p.zero_stage);
  j.field("fsdp", to_string(p.spec.fsdp));
  j.field("limit_all_gathers", p.limit_all_gathers);
  j.field("fsdp_wrap", to_string(p.fsdp_wrap));
  j.field("fsdp_version", p.fsdp_version);
  j.field("reduce_dtype", p.fsdp_reduce_fp32 ? "fp32" : "param");
  j.field("z3_leaf_layers", p.z3_leaf_layers);
  j.field("stage3_prefetch_bucket_size", p.stage3_prefetch_bucket_size);
  j.field("stage3_max_live_parameters", p.stage3_max_live_parameters);
  j.field("stage3_max_reuse_distance", p.stage3_max_reuse_distance);
  j.field("stage3_param_persistence_threshold", p.stage3_param_persistence_threshold);
  j.field("shard_group", p.shard_group);
  j.field("offload_optimizer", to_string(p.offload_optimizer));
  j.field("offload_params", to_string(p.offload_params));
  j.field("recompute", to_string(p.recompute));
  // Note [Recompute modules]: under selective recompute, the modules it reruns.
  j.key("recompute_modules").begin_array();
  for (std::size_t i = 0; p.recompute == Recompute::kSelective && i < recompute_module_names().size(); ++i) {
    if ((p.recompute_modules & (1U << i)) != 0) j.value(recompute_module_names()[i]);
  }
  j.end_array();
  j.field("recompute_blocks", p.recompute_blocks).field("recompute_group", p.recompute_group);
  j.field("cpu_offloading_num_layers", p.cpu_offloading_num_layers);
  j.field("enable_activation_offloading", p.enable_activation_offloading);
  // Note [Fine-grained offload]: the modules offloaded ([] where it is off) and its knobs.
  j.key("offload_modules").begin_array();
  for (std::size_t i = 0; i < offload_module_names().size(); ++i) {
    if ((p.offload_modules & (1U << i)) != 0) j.value(offload_module_names()[i]);
  }
  j.end_array();
  j.field("min_offloaded_tensor_size", p.min_offloaded_tensor_size);
  j.field("activation_offload_fraction", p.activation_offload_fraction);
  j.field("delta_offload_bytes_across_pp_ranks", p.delta_offload_bytes_across_pp_ranks);
  j.field("fine_grained_offloading_max_inflight_offloads", p.fine_grained_offloading_max_inflight_offloads);
  j.field("bf16_layers_start", p.bf16_layers_start).field("bf16_layers_end", p.bf16_layers_end);
  j.field("outer_dp_sharding_strategy", p.outer_optim ? "optim" : "no_shard");
  j.field("partition_activations", p.partition_activations).field("cpu_checkpointing", p.cpu_checkpointing);
  j.field("bucket_mb", static_cast<double>(p.bucket_bytes) / 1e6);
  j.field("overlap", p.overlap).field("contiguous_gradients", p.contiguous_gradients).field("reduce_scatter", p.reduce_scatter)
      .field("overlap_param_gather", p.overlap_param_gather);
  j.field("accumulate_allreduce_grads_in_fp32", p.accumulate_allreduce_grads_in_fp32);
  j.field("megatron_grad_buffer", p.grad_buffer());
  j.field("fp32_grad_accumulator", p.fp32_grad_accumulator);
  j.field("master_weights", p.master_weights);
  j.field("optim_bits", p.optim_bits);
  j.field("optimizer_in_backward", p.optimizer_in_backward);
  j.field("use_precision_aware_optimizer", p.use_precision_aware_optimizer);
  j.field("main_params_dtype", to_string(p.main_params_dtype)).field("exp_avg_dtype", to_string(p.exp_avg_dtype))
      .field("exp_avg_sq_dtype", to_string(p.exp_avg_sq_dtype));
  j.field("store_param_remainders", p.store_param_remainders);
  j.field("deallocate_pipeline_outputs", p.deallocate_pipeline_outputs);
  j.field("schedule", p.pp > 1 ? to_string(p.schedule) : "none");
  j.field("virtual_stages", p.virtual_stages);
  j.field("sequence_parallel", p.sequence_parallel);
  j.field("placement", p.spec.placement);
  j.key("stage_layers").begin_array();
  for (int n : p.stage_layers) j.value(n);
  j.end_array();
  j.field("pipeline_layout", p.spec.pipeline_layout).field("pipeline_split", to_string(p.spec.pipeline_split));
  j.end_object();
}

}  // namespace

// The tables' columns: a left-aligned column of width w is "{:<w-1} " and a
// right-aligned one " {:>w-1}", so a text as wide as its column still has a
// space between it and the next.
std::string format_table(const Prediction& p) {
  std::string out;
  auto o = std::back_inserter(out);
  const std::string trained = p.trainable_parameters > 0 && p.trainable_parameters < p.model_parameters
                                  ? fmt::format(", {:.2f}M trained", static_cast<double>(p.trainable_parameters) / 1e6)
                                  : "";
  fmt::format_to(o, "dtsim: {} ({:.1f}M parameters{}, {} layer{}) on {} ({} x {}), plan {}\n", p.model_name,
                 static_cast<double>(p.model_parameters) / 1e6, trained, p.model_layers, p.model_layers == 1 ? "" : "s",
                 p.cluster_name, p.gpus, p.device_name, p.plan.spec.name);
  fmt::format_to(o, "  {}\n\n", plan_line(p.plan, p.model_attention, p.model_sequence));
  fmt::format_to(o, "  {:<19} {}\n", "iteration time", human_time(p.iteration_time));
  fmt::format_to(o, "  {:<19} {:.2f} samples/s   {:.0f} tokens/s\n", "throughput", p.samples_per_s, p.tokens_per_s);
  fmt::format_to(o, "  {:<19} {:.2f} TFLOP/s   MFU {:.1f}%   HFU {:.1f}%\n\n", "per GPU", p.tflops_per_gpu, p.mfu * 100,
                 p.hfu * 100);
  fmt::format_to(o, "  {:<19}  {:>11} {:>8}\n", "time breakdown", "time", "share");
  const double total = std::max<double>(1, static_cast<double>(p.iteration_time));
  auto row = [&](const char* name, TimeNs t) {
    fmt::format_to(o, "    {:<17}  {:>11} {:>8}\n", name, human_time(t), fmt::format("{:.1f}%", 100.0 * t / total));
  };
  row("compute", p.breakdown.compute);
  row("exposed comm", p.breakdown.exposed_comm);
  row("bubble", p.breakdown.bubble);
  row("optimizer", p.breakdown.optimizer);
  row("offload", p.breakdown.offload);
  row("other", p.breakdown.other);
  fmt::format_to(o, "\n  peak memory per GPU (capacity {})\n", gib(p.capacity));
  constexpr const char* kMemoryRow = "    {:<5} {:<6} {:<6}  {:>11} {:>11} {:>11} {:>11} {:>12} {:>11}  {}\n";
  fmt::format_to(o, kMemoryRow, "rank", "stage", "ranks", "peak", "params", "grads", "optimizer", "activations", "buffers",
                 "fits");
  for (const auto& r : p.ranks) {
    fmt::format_to(o, kMemoryRow, r.rank, r.stage, r.replicas, gib(r.peak), gib(r.parameters), gib(r.gradients),
                   gib(r.optimizer), gib(r.activations), gib(r.buffers), r.peak <= p.capacity ? "yes" : "NO");
  }
  if (p.cost_source != "analytic") {
    const auto& s = p.sources;
    fmt::format_to(o,
                   "\n  costs from {}: layers {} measured, {} interpolated, {} from another precision, {} fitted, {} "
                   "datasheet; collectives {} measured, {} scaled, {} datasheet; optimizer {}\n",
                   p.cost_source, s.layers_measured, s.layers_interpolated, s.layers_other_precision, s.layers_fitted,
                   s.layers_analytic, s.comm_measured, s.comm_scaled, s.comm_analytic,
                   s.optimizer_measured > 0 ? "timed" : "datasheet");
  }
  for (const auto& w : p.warnings) fmt::format_to(o, "\n  warning: {}\n", w);
  if (p.fits) {
    out += "\n  fits: yes\n";
  } else {
    fmt::format_to(o, "\n  fits: NO, short by {} on the fullest GPU\n", gib(p.shortfall));
  }
  return out;
}

std::string to_json(const Prediction& p) {
  JsonWriter j;
  j.begin_object();
  j.header();
  j.field("iteration_time_s", Decimal{p.iteration_time, 9});  // simulated ns, exactly (Note [JSON out])
  j.field("samples_per_s", p.samples_per_s);
  j.field("tokens_per_s", p.tokens_per_s);
  j.field("tflops_per_gpu", p.tflops_per_gpu);
  j.field("mfu", p.mfu);
  j.field("hfu", p.hfu);
  j.key("time_breakdown_s").begin_object();
  j.field("compute", Decimal{p.breakdown.compute, 9});
  j.field("exposed_comm", Decimal{p.breakdown.exposed_comm, 9});
  j.field("bubble", Decimal{p.breakdown.bubble, 9});
  j.field("optimizer", Decimal{p.breakdown.optimizer, 9});
  j.field("offload", Decimal{p.breakdown.offload, 9});
  j.field("other", Decimal{p.breakdown.other, 9});
  j.end_object();
  j.key("model").begin_object();
  j.field("name", p.model_name).field("parameters", static_cast<std::int64_t>(p.model_parameters));
  j.field("trainable_parameters", static_cast<std::int64_t>(p.trainable_parameters)).field("layers", p.model_layers);
  j.end_object();
  j.key("cluster").begin_object();
  j.field("name", p.cluster_name).field("gpus", p.gpus).field("device", p.device_name);
  j.end_object();
  plan_json(j, p.plan);
  j.key("memory").begin_object();
  j.field("capacity_bytes", static_cast<std::int64_t>(p.capacity));
  j.field("fits", p.fits);
  j.field("shortfall_bytes", static_cast<std::int64_t>(p.shortfall));
  j.key("ranks").begin_array();
  for (const auto& r : p.ranks) {
    j.begin_object();
    j.field("rank", r.rank).field("stage", r.stage).field("replicas", r.replicas);
    j.field("peak_bytes", static_cast<std::int64_t>(r.peak));
    j.field("parameters_bytes", static_cast<std::int64_t>(r.parameters));
    j.field("gradients_bytes", static_cast<std::int64_t>(r.gradients));
    j.field("optimizer_bytes", static_cast<std::int64_t>(r.optimizer));
    j.field("activations_bytes", static_cast<std::int64_t>(r.activations));
    j.field("buffers_bytes", static_cast<std::int64_t>(r.buffers));
    j.end_object();
  }
  j.end_array();
  j.end_object();
  j.key("simulation").begin_object();
  j.field("tasks", static_cast<std::int64_t>(p.tasks)).field("events", static_cast<std::int64_t>(p.events));
  j.field("micro_batches_simulated", static_cast<std::int64_t>(p.abridged_to > 0 ? p.abridged_to : p.plan.grad_accum));
  j.field("cost_source", p.cost_source);
  j.key("warnings").begin_array();
  for (const auto& w : p.warnings) j.value(w);
  j.end_array();
  const auto& s = p.sources;
  j.key("cost_sources").begin_object();
  j.field("layers_measured", s.layers_measured).field("layers_interpolated", s.layers_interpolated);
  j.field("layers_other_precision", s.layers_other_precision);
  j.field("layers_fitted", s.layers_fitted).field("layers_analytic", s.layers_analytic);
  j.field("comm_measured", s.comm_measured).field("comm_scaled", s.comm_scaled).field("comm_analytic", s.comm_analytic);
  j.field("copies_measured", s.copies_measured).field("copies_analytic", s.copies_analytic);
  j.field("optimizer_measured", s.optimizer_measured);
  j.end_object();
  j.end_object();
  j.end_object();
  return j.str() + "\n";
}

// Note [Trace timestamps]
// Simulated time is integer nanoseconds and the Trace Event Format counts
// microseconds, so ts and dur are written as Decimal{ns, 3}: 1234567 ns is
// 1234.567, exactly. Rounded (%.10g kept ten significant digits) a slice's
// end and the next one's start could cross: a gpt-175b megatron-3d trace on
// 64 GPUs had 11,643 slices overlapping by up to 0.1 us, and Perfetto draws
// a slice that is neither inside nor apart from its neighbour wrongly. With
// exact times the slices of a track (pid, tid: a rank's stream, whose tasks
// run in order) are apart or nested, as the simulation ran them
// (tests/sim/test_json.cpp checks every track of that trace).
std::string to_chrome_trace(const Prediction& p) {
  // Chrome Trace Event Format (the "JSON Object Format" with traceEvents):
  // complete events ("X") with ts/dur in microseconds, counters ("C"), and
  // metadata ("M") naming processes (ranks) and threads (streams).
  JsonWriter j(false);
  j.begin_object();
  j.field("displayTimeUnit", "ms");
  j.key("traceEvents").begin_array();
  const auto& g = p.graph;
  for (std::size_t r = 0; r < g.ranks.size(); ++r) {
    const auto& rank = g.ranks[r];
    j.begin_object().field("ph", "M").field("name", "process_name").field("pid", static_cast<int>(r)).key("args").begin_object();
    j.field("name", "rank " + std::to_string(rank.rank) + " (stage " + std::to_string(rank.stage) + ", stands for " +
                        std::to_string(rank.replicas) + " ranks)");
    j.end_object().end_object();
    for (std::size_t s = 0; s < rank.streams.size(); ++s) {
      j.begin_object().field("ph", "M").field("name", "thread_name").field("pid", static_cast<int>(r)).field("tid", static_cast<int>(s));
      j.key("args").begin_object().field("name", rank.streams[s]).end_object().end_object();
      j.begin_object().field("ph", "M").field("name", "thread_sort_index").field("pid", static_cast<int>(r)).field("tid", static_cast<int>(s));
      j.key("args").begin_object().field("sort_index", static_cast<int>(s)).end_object().end_object();
    }
  }
  for (std::size_t i = 0; i < g.tasks.size() && i < p.exec.spans.size(); ++i) {
    const Task& t = g.tasks[i];
    const Span& s = p.exec.spans[i];
    j.begin_object();
    j.field("ph", "X").field("name", t.name).field("cat", to_string(t.phase));
    j.field("pid", t.rank).field("tid", t.stream);
    j.field("ts", Decimal{s.start, 3}).field("dur", Decimal{s.end - s.start, 3});
    if (t.kind == TaskKind::kCollective) {
      j.key("args").begin_object();
      j.field("op", to_string(t.op)).field("bytes", static_cast<std::int64_t>(t.bytes)).field("algorithm", std::string(g.algorithm(t)));
      if (!g.protocol(t).empty()) j.field("protocol", std::string(g.protocol(t)));
      if (t.axis) j.field("axis", to_string(*t.axis));
      // Note [Busy sender]: how long it waited for its sender's core.
      if (s.slowed > 0) j.field("waited_for_core", Decimal{s.slowed, 3});
      j.end_object();
    } else if (s.slowed > 0) {
      // Note [Interference]: what the rank's collectives cost this kernel.
      j.key("args").begin_object().field("slowed_by_collectives", Decimal{s.slowed, 3}).end_object();
    }
    j.end_object();
  }
  for (std::size_t r = 0; r < p.exec.memory.size(); ++r) {
    for (const auto& snap : p.exec.memory[r].timeline) {
      j.begin_object().field("ph", "C").field("name", "memory (GiB)").field("pid", static_cast<int>(r));
      j.field("ts", Decimal{snap.time, 3}).key("args").begin_object();
      for (int c = 0; c < kMemCategories; ++c) {
        j.field(to_string(static_cast<MemCategory>(c)), static_cast<double>(snap.bytes[c]) / kGiB);
      }
      j.end_object().end_object();
    }
  }
  j.end_array();
  j.end_object();
  return j.str() + "\n";
}

std::string comm_group_error(CollectiveOp op, const CommGroup& group, const ClusterSpec& cluster) {
  if (group.nodes() > cluster.nodes) {
    return fmt::format("{} ranks, {} a node, span {} nodes; {} has {}", group.ranks, group.ranks_per_node, group.nodes(),
                       cluster.name, cluster.nodes);
  }
  if (op == CollectiveOp::kSendRecv && group.ranks < 2) return "send_recv needs a peer; valid: 2 or more";
  return "";
}

std::vector<CommRow> comm_sweep(const CommModel& model, CollectiveOp op, const CommGroup& group, Bytes min_bytes,
                                Bytes max_bytes) {
  std::vector<CommRow> rows;
  for (Bytes b = std::max<Bytes>(1, min_bytes); b <= max_bytes; b *= 2) {
    const CollectiveCost c = model.collective(op, b, group);
    CommRow r;
    r.bytes = b;
    r.algorithm = c.algorithm;
    r.protocol = std::string(c.protocol);
    r.time = c.total();
    const double s = std::max(1e-12, ns_to_seconds(r.time));
    r.algbw = r.time > 0 ? static_cast<double>(b) / s / kGiga : 0;
    r.busbw = r.algbw * bus_bandwidth_factor(op, group.ranks);
    r.stalls = c.stalls;
    r.stall = c.stall;
    rows.push_back(r);
  }
  return rows;
}

std::string format_comm_table(const std::string& cluster, CollectiveOp op, const CommGroup& group,
                              const std::vector<CommRow>& rows, const std::string& source) {
  std::string out;
  auto o = std::back_inserter(out);
  fmt::format_to(o, "# dtsim comm: predicted {} on {}, {} ranks over {} node(s), {} per node\n", to_string(op), cluster,
                 group.ranks, group.nodes(), group.ranks_per_node);
  if (!source.empty()) fmt::format_to(o, "# priced from {}\n", source);
  fmt::format_to(o, "# algbw = size / time; busbw = algbw x {} (nccl-tests PERFORMANCE.md)\n",
                 op == CollectiveOp::kAllReduce                                          ? "2(n-1)/n"
                 : (op == CollectiveOp::kBroadcast || op == CollectiveOp::kSendRecv) ? "1"
                                                                                         : "(n-1)/n");
  // Note [A collective's stalls]: where the profile saw some, the mean a
  // collective comes to over many, beside its typical time.
  const bool stalls = std::any_of(rows.begin(), rows.end(), [](const CommRow& r) { return r.stalls > 0; });
  if (stalls) {
    TimeNs stall = 0;
    for (const auto& r : rows) stall = std::max(stall, r.stall);
    fmt::format_to(o,
                   "# time: typical (the median measured); now and then one stalls for {:.2f} ms (Note [A collective's "
                   "stalls]): 'stalls' is how many one meets on average, 'mean' what it comes to over many; a "
                   "step pays round(its collectives' stalls)\n",
                   ns_to_seconds(stall) * 1e3);
  }
  constexpr const char* kRow = " {:>13} {:>11} {:>6} {:>9} {:>6} {:>11} {:>13} {:>13}";
  fmt::format_to(o, kRow, "size (B)", "count", "type", "algo", "proto", "time (us)", "algbw (GB/s)", "busbw (GB/s)");
  if (stalls) fmt::format_to(o, " {:>7} {:>11}", "stalls", "mean (us)");
  out += '\n';
  for (const auto& r : rows) {
    fmt::format_to(o, kRow, r.bytes, r.bytes / 4, "float", r.algorithm, r.protocol.empty() ? "-" : r.protocol,
                   fmt::format("{:.2f}", ns_to_seconds(r.time) * 1e6),
                   fmt::format("{:.2f}", r.algbw), fmt::format("{:.2f}", r.busbw));
    if (stalls) {
      fmt::format_to(o, " {:>7} {:>11}", fmt::format("{:.3f}", r.stalls),
                     fmt::format("{:.2f}", (ns_to_seconds(r.time) + r.stalls * ns_to_seconds(r.stall)) * 1e6));
    }
    out += '\n';
  }
  return out;
}

std::string comm_to_json(const std::string& cluster, CollectiveOp op, const CommGroup& group,
                         const std::vector<CommRow>& rows, const std::string& source) {
  JsonWriter j;
  j.begin_object();
  j.header();
  j.field("cluster", cluster).field("op", to_string(op)).field("ranks", group.ranks);
  j.field("nodes", group.nodes()).field("ranks_per_node", group.ranks_per_node);
  if (!source.empty()) j.field("cost_source", source);
  j.key("rows").begin_array();
  for (const auto& r : rows) {
    j.begin_object();
    j.field("bytes", static_cast<std::int64_t>(r.bytes)).field("algorithm", r.algorithm);
    if (!r.protocol.empty()) j.field("protocol", r.protocol);
    j.field("time_us", Decimal{r.time, 3}).field("algbw_GBps", r.algbw).field("busbw_GBps", r.busbw);
    if (r.stalls > 0) j.field("stalls", r.stalls).field("stall_us", Decimal{r.stall, 3});
    j.end_object();
  }
  j.end_array().end_object();
  return j.str() + "\n";
}

std::string list_to_json(const std::string& kind, const std::vector<std::pair<std::string, std::string>>& rows) {
  JsonWriter j;
  j.begin_object();
  j.header();
  j.field("kind", kind);
  j.key("items").begin_array();
  for (const auto& [name, description] : rows) j.begin_object().field("name", name).field("description", description).end_object();
  j.end_array().end_object();
  return j.str() + "\n";
}

}  // namespace dtsim::sim
