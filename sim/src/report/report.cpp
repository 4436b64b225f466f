#include "dtsim/sim/report.hpp"

#include <cmath>
#include <cstdio>
#include <sstream>

#include "dtsim/sim/json_writer.hpp"

namespace dtsim::sim {
namespace {

std::string fmt(const char* f, double v) {
  char buf[64];
  std::snprintf(buf, sizeof buf, f, v);
  return buf;
}

std::string gib(Bytes b) { return fmt("%.2f GiB", static_cast<double>(b) / kGiB); }

std::string human_time(TimeNs t) {
  const double s = ns_to_seconds(t);
  if (s >= 1) return fmt("%.3f s", s);
  if (s >= 1e-3) return fmt("%.2f ms", s * 1e3);
  return fmt("%.1f us", s * 1e6);
}

std::string pad(const std::string& s, std::size_t w) { return s.size() >= w ? s + " " : s + std::string(w - s.size(), ' '); }
std::string lpad(const std::string& s, std::size_t w) { return s.size() >= w ? s + " " : std::string(w - s.size(), ' ') + s; }

std::string plan_line(const ResolvedPlan& p) {
  std::ostringstream os;
  os << "dp=" << p.dp;
  if (p.tp > 1) os << " tp=" << p.tp << (p.sequence_parallel ? " (sequence parallel)" : "");
  if (p.cp > 1) os << " cp=" << p.cp << " (" << to_string(p.cp_comm) << ")";
  if (p.ep > 1) os << " ep=" << p.ep << (p.etp != p.tp ? " etp=" + std::to_string(p.etp) : "");
  if (p.moe_imbalance != 1.0) os << " moe_imbalance=" << fmt("%g", p.moe_imbalance);
  if (p.moe_dispatcher != MoeDispatcher::kAllToAll) os << " moe_dispatcher=" << to_string(p.moe_dispatcher);
  if (p.moe_capacity_factor > 0) os << " moe_capacity_factor=" << fmt("%g", p.moe_capacity_factor) << (p.moe_pad ? " (padded)" : "");
  if (p.pp > 1) {
    os << " pp=" << p.pp << " " << to_string(p.schedule);
    if (p.virtual_stages > 1) os << " virtual_stages=" << p.virtual_stages;
    os << " stage_layers=[";
    for (std::size_t i = 0; i < p.stage_layers.size(); ++i) os << (i ? "," : "") << p.stage_layers[i];
    os << "]";
  }
  os << " micro_batch=" << p.micro_batch << " grad_accum=" << p.grad_accum
     << " global_batch=" << p.global_batch << " seq_len=" << p.seq_len << " " << to_string(p.precision) << " "
     << (p.flash_attention ? "flash" : "eager") << "-attention " << to_string(p.optimizer) << " zero_stage=" << p.zero_stage;
  if (p.fsdp) os << " (fsdp " << to_string(p.spec.fsdp) << ")";
  if (p.offload_optimizer == Offload::kCpu) os << " offload_optimizer=cpu";
  if (p.offload_params == Offload::kCpu) os << " offload_params=cpu";
  if (p.recompute != Recompute::kNone) os << " recompute=" << to_string(p.recompute);
  if (!p.overlap) os << " overlap=false";
  return os.str();
}

void plan_json(JsonWriter& j, const ResolvedPlan& p) {
  j.key("plan").begin_object();
  j.field("name", p.spec.name);
  j.field("dp", p.dp).field("tp", p.tp).field("pp", p.pp).field("cp", p.cp).field("cp_comm", to_string(p.cp_comm));
  j.field("ep", p.ep).field("etp", p.etp).field("edp", p.edp);
  j.field("moe_imbalance", p.moe_imbalance).field("moe_capacity_factor", p.moe_capacity_factor).field("moe_pad", p.moe_pad)
      .field("moe_dispatcher", to_string(p.moe_dispatcher));
  j.field("attention", p.flash_attention ? "flash" : "eager");
  j.field("micro_batch", static_cast<std::int64_t>(p.micro_batch));
  j.field("grad_accum", static_cast<std::int64_t>(p.grad_accum));
  j.field("global_batch", static_cast<std::int64_t>(p.global_batch));
  j.field("seq_len", static_cast<std::int64_t>(p.seq_len));
  j.field("precision", to_string(p.precision));
  j.field("optimizer", to_string(p.optimizer));
  j.field("zero_stage", p.zero_stage);
  j.field("fsdp", to_string(p.spec.fsdp));
  j.field("shard_group", p.shard_group);
  j.field("offload_optimizer", to_string(p.offload_optimizer));
  j.field("offload_params", to_string(p.offload_params));
  j.field("recompute", to_string(p.recompute));
  j.field("bucket_mb", static_cast<double>(p.bucket_bytes) / 1e6);
  j.field("overlap", p.overlap);
  j.field("schedule", p.pp > 1 ? to_string(p.schedule) : "none");
  j.field("virtual_stages", p.virtual_stages);
  j.field("sequence_parallel", p.sequence_parallel);
  j.field("placement", p.spec.placement);
  j.key("stage_layers").begin_array();
  for (int n : p.stage_layers) j.value(n);
  j.end_array();
  j.end_object();
}

}  // namespace

std::string format_table(const Prediction& p) {
  std::ostringstream os;
  os << "dtsim: " << p.model_name << " (" << fmt("%.1fM", static_cast<double>(p.model_parameters) / 1e6)
     << " parameters, " << p.model_layers << " layers) on " << p.cluster_name << " (" << p.gpus << " x "
     << p.device_name << "), plan " << p.plan.spec.name << "\n";
  os << "  " << plan_line(p.plan) << "\n\n";
  os << "  " << pad("iteration time", 20) << human_time(p.iteration_time) << "\n";
  os << "  " << pad("throughput", 20) << fmt("%.2f samples/s", p.samples_per_s) << "   "
     << fmt("%.0f tokens/s", p.tokens_per_s) << "\n";
  os << "  " << pad("per GPU", 20) << fmt("%.2f TFLOP/s", p.tflops_per_gpu) << "   MFU "
     << fmt("%.1f%%", p.mfu * 100) << "   HFU " << fmt("%.1f%%", p.hfu * 100) << "\n\n";
  os << "  " << pad("time breakdown", 20) << lpad("time", 12) << lpad("share", 9) << "\n";
  const double total = std::max<double>(1, static_cast<double>(p.iteration_time));
  auto row = [&](const char* name, TimeNs t) {
    os << "    " << pad(name, 18) << lpad(human_time(t), 12) << lpad(fmt("%.1f%%", 100.0 * t / total), 9) << "\n";
  };
  row("compute", p.breakdown.compute);
  row("exposed comm", p.breakdown.exposed_comm);
  row("bubble", p.breakdown.bubble);
  row("optimizer", p.breakdown.optimizer);
  row("offload", p.breakdown.offload);
  row("other", p.breakdown.other);
  os << "\n  peak memory per GPU (capacity " << gib(p.capacity) << ")\n";
  os << "    " << pad("rank", 6) << pad("stage", 7) << pad("ranks", 7) << lpad("peak", 12) << lpad("params", 12)
     << lpad("grads", 12) << lpad("optimizer", 12) << lpad("activations", 13) << lpad("buffers", 12) << "  fits\n";
  for (const auto& r : p.ranks) {
    os << "    " << pad(std::to_string(r.rank), 6) << pad(std::to_string(r.stage), 7)
       << pad(std::to_string(r.replicas), 7) << lpad(gib(r.peak), 12) << lpad(gib(r.parameters), 12)
       << lpad(gib(r.gradients), 12) << lpad(gib(r.optimizer), 12) << lpad(gib(r.activations), 13)
       << lpad(gib(r.buffers), 12) << "  " << (r.peak <= p.capacity ? "yes" : "NO") << "\n";
  }
  if (p.cost_source != "analytic") {
    const auto& s = p.sources;
    os << "\n  costs from " << p.cost_source << ": layers " << s.layers_measured << " measured, " << s.layers_interpolated
       << " interpolated, " << s.layers_other_precision << " from another precision, " << s.layers_fitted << " fitted, " << s.layers_analytic << " datasheet; collectives "
       << s.comm_measured << " measured, " << s.comm_scaled << " scaled, " << s.comm_analytic << " datasheet; optimizer "
       << (s.optimizer_measured > 0 ? "timed" : "datasheet") << "\n";
  }
  for (const auto& w : p.warnings) os << "\n  warning: " << w << "\n";
  if (p.fits) {
    os << "\n  fits: yes\n";
  } else {
    os << "\n  fits: NO, short by " << gib(p.shortfall) << " on the fullest GPU\n";
  }
  return os.str();
}

std::string to_json(const Prediction& p) {
  JsonWriter j;
  j.begin_object();
  j.field("iteration_time_s", ns_to_seconds(p.iteration_time));
  j.field("samples_per_s", p.samples_per_s);
  j.field("tokens_per_s", p.tokens_per_s);
  j.field("tflops_per_gpu", p.tflops_per_gpu);
  j.field("mfu", p.mfu);
  j.field("hfu", p.hfu);
  j.key("time_breakdown_s").begin_object();
  j.field("compute", ns_to_seconds(p.breakdown.compute));
  j.field("exposed_comm", ns_to_seconds(p.breakdown.exposed_comm));
  j.field("bubble", ns_to_seconds(p.breakdown.bubble));
  j.field("optimizer", ns_to_seconds(p.breakdown.optimizer));
  j.field("offload", ns_to_seconds(p.breakdown.offload));
  j.field("other", ns_to_seconds(p.breakdown.other));
  j.end_object();
  j.key("model").begin_object();
  j.field("name", p.model_name).field("parameters", static_cast<std::int64_t>(p.model_parameters)).field("layers", p.model_layers);
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
    j.field("ts", static_cast<double>(s.start) / 1e3).field("dur", static_cast<double>(s.end - s.start) / 1e3);
    if (t.kind == TaskKind::kCollective) {
      j.key("args").begin_object();
      j.field("op", to_string(t.op)).field("bytes", static_cast<std::int64_t>(t.bytes)).field("algorithm", t.cost.algorithm);
      if (t.axis) j.field("axis", to_string(*t.axis));
      j.end_object();
    }
    j.end_object();
  }
  for (std::size_t r = 0; r < p.exec.memory.size(); ++r) {
    for (const auto& snap : p.exec.memory[r].timeline) {
      j.begin_object().field("ph", "C").field("name", "memory (GiB)").field("pid", static_cast<int>(r));
      j.field("ts", static_cast<double>(snap.time) / 1e3).key("args").begin_object();
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

std::vector<CommRow> comm_sweep(const CommModel& model, CollectiveOp op, const CommGroup& group, Bytes min_bytes,
                                Bytes max_bytes) {
  std::vector<CommRow> rows;
  for (Bytes b = std::max<Bytes>(1, min_bytes); b <= max_bytes; b *= 2) {
    const CollectiveCost c = model.collective(op, b, group);
    CommRow r;
    r.bytes = b;
    r.algorithm = c.algorithm;
    r.time = c.total();
    const double s = std::max(1e-12, ns_to_seconds(r.time));
    r.algbw = r.time > 0 ? static_cast<double>(b) / s / kGiga : 0;
    r.busbw = r.algbw * bus_bandwidth_factor(op, group.ranks);
    rows.push_back(r);
  }
  return rows;
}

std::string format_comm_table(const std::string& cluster, CollectiveOp op, const CommGroup& group,
                              const std::vector<CommRow>& rows, const std::string& source) {
  std::ostringstream os;
  os << "# dtsim comm: predicted " << to_string(op) << " on " << cluster << ", " << group.ranks << " ranks over "
     << group.nodes() << " node(s), " << group.ranks_per_node << " per node\n";
  if (!source.empty()) os << "# priced from " << source << "\n";
  os << "# algbw = size / time; busbw = algbw x " << (op == CollectiveOp::kAllReduce ? "2(n-1)/n" : (op == CollectiveOp::kBroadcast || op == CollectiveOp::kSendRecv) ? "1" : "(n-1)/n")
     << " (nccl-tests PERFORMANCE.md)\n";
  os << lpad("size (B)", 14) << lpad("count", 12) << lpad("type", 7) << lpad("algo", 10) << lpad("time (us)", 12)
     << lpad("algbw (GB/s)", 14) << lpad("busbw (GB/s)", 14) << "\n";
  for (const auto& r : rows) {
    os << lpad(std::to_string(r.bytes), 14) << lpad(std::to_string(r.bytes / 4), 12) << lpad("float", 7)
       << lpad(r.algorithm, 10) << lpad(fmt("%.2f", ns_to_seconds(r.time) * 1e6), 12) << lpad(fmt("%.2f", r.algbw), 14)
       << lpad(fmt("%.2f", r.busbw), 14) << "\n";
  }
  return os.str();
}

std::string comm_to_json(const std::string& cluster, CollectiveOp op, const CommGroup& group,
                         const std::vector<CommRow>& rows, const std::string& source) {
  JsonWriter j;
  j.begin_object();
  j.field("cluster", cluster).field("op", to_string(op)).field("ranks", group.ranks);
  j.field("nodes", group.nodes()).field("ranks_per_node", group.ranks_per_node);
  if (!source.empty()) j.field("cost_source", source);
  j.key("rows").begin_array();
  for (const auto& r : rows) {
    j.begin_object();
    j.field("bytes", static_cast<std::int64_t>(r.bytes)).field("algorithm", r.algorithm);
    j.field("time_us", ns_to_seconds(r.time) * 1e6).field("algbw_GBps", r.algbw).field("busbw_GBps", r.busbw);
    j.end_object();
  }
  j.end_array().end_object();
  return j.str() + "\n";
}

}  // namespace dtsim::sim
