#include "dtsim/sim/config_io.hpp"

#include <algorithm>
#include <cctype>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <optional>
#include <sstream>

#include "dtsim/sim/error.hpp"
#include "dtsim/sim/framework_config.hpp"

#include <dlfcn.h>

#ifndef DTSIM_CONFIG_DIR
#define DTSIM_CONFIG_DIR "configs"
#endif
#ifndef DTSIM_INSTALLED_CONFIG_DIR
#define DTSIM_INSTALLED_CONFIG_DIR ""
#endif

namespace dtsim::sim {
namespace fs = std::filesystem;

// Note [Finding the configs]
// A program finds the shipped configs where it stands, not where it was
// built: an installed dtsim is <prefix>/bin/dtsim and its configs are
// <prefix>/share/dtsim/configs, wherever the prefix was moved to. The binary
// is the shared object holding this code where that is one (the Python
// module, dladdr), with its own configs/ beside it (a pip-installed package)
// or the prefix's share/, and else the program (/proc/self/exe). The build
// tree has neither and falls back to the source tree's configs fixed at
// configure time, then to the install prefix fixed there (a program linking
// the installed static libraries). Nothing is cached: no static state.
std::vector<std::string> config_dir_candidates() {
  std::vector<std::string> out;
  std::error_code ec;
  const fs::path exe = fs::read_symlink("/proc/self/exe", ec);
  Dl_info info{};
  if (dladdr(reinterpret_cast<void*>(&config_dir_candidates), &info) != 0 && info.dli_fname != nullptr) {
    const fs::path object(info.dli_fname);
    if (object.is_absolute() && (exe.empty() || !fs::equivalent(object, exe, ec))) {
      out.push_back((object.parent_path() / "configs").string());
      out.push_back((object.parent_path() / ".." / "share" / "dtsim" / "configs").lexically_normal().string());
    }
  }
  if (!exe.empty()) out.push_back((exe.parent_path() / ".." / "share" / "dtsim" / "configs").lexically_normal().string());
  out.emplace_back(DTSIM_CONFIG_DIR);
  if (*DTSIM_INSTALLED_CONFIG_DIR != '\0') out.emplace_back(DTSIM_INSTALLED_CONFIG_DIR);
  return out;
}

std::string config_dir() {
  std::error_code ec;
  if (const char* env = std::getenv("DTSIM_CONFIG_DIR"); env != nullptr && *env != '\0') {
    if (!fs::is_directory(env, ec)) throw IoError(std::string("DTSIM_CONFIG_DIR=") + env + ": no such directory");
    return env;
  }
  const auto candidates = config_dir_candidates();
  for (const auto& c : candidates) {
    if (fs::is_directory(fs::path(c) / "clusters", ec)) return c;
  }
  std::string list;
  for (const auto& c : candidates) list += (list.empty() ? "" : ", ") + c;
  throw IoError("dtsim's shipped configs not found: looked in " + list +
                "; set DTSIM_CONFIG_DIR to a configs folder, or give file paths");
}

std::vector<std::string> list_configs(const std::string& kind) {
  std::vector<std::string> names;
  std::error_code ec;
  for (const auto& entry : fs::directory_iterator(fs::path(config_dir()) / kind, ec)) {
    const auto ext = entry.path().extension().string();
    if (entry.is_regular_file() && (ext == ".yaml" || ext == ".yml")) {
      names.push_back(entry.path().stem().string());
    }
  }
  std::sort(names.begin(), names.end());
  return names;
}

std::string find_config(const std::string& kind, const std::string& name_or_path) {
  std::error_code ec;
  const bool looks_like_path = name_or_path.find('/') != std::string::npos ||
                               name_or_path.find('.') != std::string::npos;
  if (looks_like_path) {
    if (!fs::exists(name_or_path, ec)) throw IoError(name_or_path + ": no such file");
    return name_or_path;
  }
  for (const char* ext : {".yaml", ".yml"}) {
    const fs::path p = fs::path(config_dir()) / kind / (name_or_path + ext);
    if (fs::exists(p, ec)) return p.string();
  }
  const auto names = list_configs(kind);
  const std::string hint = did_you_mean(name_or_path, names);
  std::string list;
  for (const auto& n : names) list += (list.empty() ? "" : ", ") + n;
  std::string singular = kind.substr(0, kind.size() - 1);
  throw ConfigError("--" + singular + " " + name_or_path + ": unknown " + singular +
                    (hint.empty() ? "" : " (did you mean '" + hint + "'?)") + "; built-in: " + list +
                    "; or give a path to a YAML file");
}

namespace {

constexpr double kMaxGB = 1e6;

DeviceSpec read_device(const ConfigMap& c) {
  // `device: NAME` or `device: {base: NAME, field: value, ...}`.
  DeviceSpec d;
  if (!c.has("device")) c.fail("device", "missing; name a built-in device (see `dtsim list devices`)");
  ConfigMap root = c;  // for error locations
  std::string base;
  std::optional<ConfigMap> m;
  try {
    base = c.get_string("device", "");
  } catch (const ConfigError&) {
    m.emplace(c.sub("device"));
    base = m->require_string("base");
  }
  const DeviceSpec* found = find_device(base);
  if (found == nullptr) {
    std::vector<std::string> names;
    for (const auto& dev : builtin_devices()) names.push_back(dev.name);
    const std::string hint = did_you_mean(base, names);
    std::string list;
    for (const auto& n : names) list += (list.empty() ? "" : ", ") + n;
    if (m) m->fail("base", "unknown device '" + base + "'" + (hint.empty() ? "" : " (did you mean '" + hint + "'?)") + "; built-in: " + list);
    c.fail("device", "unknown device '" + base + "'" + (hint.empty() ? "" : " (did you mean '" + hint + "'?)") + "; built-in: " + list);
  }
  d = *found;
  if (m) {
    d.memory = static_cast<Bytes>(m->get_double("memory_GiB", static_cast<double>(d.memory) / kGiB, 0.001, kMaxGB) * kGiB);
    d.peak_fp32 = m->get_double("peak_fp32_TFLOPs", d.peak_fp32 / kTera, 1e-6, 1e6) * kTera;
    d.peak_tf32 = m->get_double("peak_tf32_TFLOPs", d.peak_tf32 / kTera, 0, 1e6) * kTera;
    d.peak_fp16 = m->get_double("peak_fp16_TFLOPs", d.peak_fp16 / kTera, 1e-6, 1e6) * kTera;
    d.peak_bf16 = m->get_double("peak_bf16_TFLOPs", d.peak_bf16 / kTera, 0, 1e6) * kTera;
    d.peak_fp8 = m->get_double("peak_fp8_TFLOPs", d.peak_fp8 / kTera, 0, 1e6) * kTera;
    d.peak_fp4 = m->get_double("peak_fp4_TFLOPs", d.peak_fp4 / kTera, 0, 1e6) * kTera;
    d.memory_bandwidth = m->get_double("memory_bandwidth_GBps", d.memory_bandwidth / kGiga, 1e-3, kMaxGB) * kGiga;
    d.compute_units = static_cast<int>(m->get_int("compute_units", d.compute_units, 1, 1 << 20));
    d.gemm_efficiency = m->get_double("gemm_efficiency", d.gemm_efficiency, 0.01, 1.0);
    d.attention_efficiency = m->get_double("attention_efficiency", d.attention_efficiency, 0.01, 1.0);
    d.memory_efficiency = m->get_double("memory_efficiency", d.memory_efficiency, 0.01, 1.0);
    d.kernel_launch = seconds_to_ns(m->get_double("kernel_launch_us", ns_to_seconds(d.kernel_launch) * 1e6, 0, 1e6) * 1e-6);
    d.runtime_reserved = static_cast<Bytes>(m->get_double("runtime_reserved_GiB", static_cast<double>(d.runtime_reserved) / kGiB, 0, kMaxGB) * kGiB);
    d.comm_slowdown = m->get_double("comm_slowdown", d.comm_slowdown, 0, 10);
    d.comm_hbm_traffic = m->get_double("comm_hbm_traffic", d.comm_hbm_traffic, 0, 10);
    d.comm_hbm_contention = m->get_double("comm_hbm_contention", d.comm_hbm_contention, 0, 10);
    if (m->has("send_waits_for_core_ms")) {
      d.send_waits_for_core = seconds_to_ns(m->get_double("send_waits_for_core_ms", 0, 0, 1e6) * 1e-3);
    }
    d.compute_capability = static_cast<int>(m->get_int("compute_capability", d.compute_capability, 0, 1000));
    m->finish();
  }
  return d;
}

LinkSpec read_link(const ConfigMap& m, std::initializer_list<std::pair<const char*, int>> types,
                   const char* default_type) {
  LinkSpec l;
  std::vector<std::pair<const char*, int>> t(types);
  // get_enum needs the list at compile time; check by hand to keep one message format.
  l.type = m.get_string("type", default_type);
  bool ok = false;
  std::string names;
  for (const auto& [n, _] : t) {
    ok = ok || l.type == n;
    names += std::string(names.empty() ? "" : ", ") + n;
  }
  if (!ok) m.fail("type", "'" + l.type + "' is not one of " + names);
  if (!m.has("bandwidth_GBps")) m.fail("bandwidth_GBps", "missing; give the per-GPU, per-direction bandwidth in GB/s");
  l.bandwidth = m.get_double("bandwidth_GBps", 0, 1e-6, kMaxGB) * kGiga;
  l.latency = seconds_to_ns(m.get_double("latency_us", 1.0, 0, 1e6) * 1e-6);
  // Note [NCCL below the line rate] (cost/cost_comm.cpp).
  l.efficiency = m.get_double("efficiency", 1.0, 0.01, 1.0);
  return l;
}

/// NCCL_PROTO as a cluster's `nccl_proto`: a comma-separated list of LL,
/// LL128 and Simple (any case), or "^" and the ones excluded, as NCCL reads it.
int parse_nccl_proto(const ConfigMap& c) {
  std::string text = c.get_string("nccl_proto", "");
  const bool exclude = !text.empty() && text[0] == '^';
  if (exclude) text.erase(0, 1);
  int mask = 0;
  std::stringstream ss(text);
  std::string item;
  while (std::getline(ss, item, ',')) {
    std::string low;
    for (char ch : item) {
      if (!std::isspace(static_cast<unsigned char>(ch))) low += static_cast<char>(std::tolower(static_cast<unsigned char>(ch)));
    }
    int bit = -1;
    if (low == "ll") bit = 1 << static_cast<int>(NcclProtocol::kLL);
    if (low == "ll128") bit = 1 << static_cast<int>(NcclProtocol::kLL128);
    if (low == "simple") bit = 1 << static_cast<int>(NcclProtocol::kSimple);
    if (bit < 0) c.fail("nccl_proto", "'" + item + "' is not a protocol; valid: LL, LL128, Simple, comma-separated, or ^ and those to leave out");
    mask |= bit;
  }
  if (exclude) mask = 7 & ~mask;
  if (mask == 0) c.fail("nccl_proto", "'" + c.get_string("nccl_proto", "") + "' leaves no protocol; valid: LL, LL128, Simple, comma-separated, or ^ and those to leave out");
  return mask;
}

// Note [NVLink domains]
// dtsim's node is what shares one scale-up fabric and its NICs: the GPUs a
// collective reaches over NVLink (intra_node) rather than over the network
// (inter_node, nics_per_node of them). On a DGX that is the chassis. On a
// GB200 or GB300 NVL72 it is the rack: 18 compute trays of 4 GPUs and 2
// Grace CPUs each, all 72 GPUs on one NVLink domain through 9 switch
// trays, every GPU with its own NIC (NVIDIA GB200 NVL72 and DGX GB200 user
// guide). So gb200-nvl72.yaml has gpus_per_node 72, and the host figures,
// which are per compute tray, say so with host.gpus 4: a GPU's share of
// its host's memory bandwidth and cores (CPU offload's optimizer) is the
// tray's over 4, not the rack's over 72. A job scheduled by NVLink
// partitions smaller than the rack (Slurm's --segment: 16 trays, 64 GPUs,
// as NVIDIA's GB200 benchmarks allocate) is `--set
// cluster.gpus_per_node=64`.
ClusterSpec read_cluster(const YAML::Node& root_in, const std::string& file,
                         const std::vector<Override>& overrides) {
  const ConfigMap c = ConfigMap::open(root_in, file, "cluster", overrides);
  ClusterSpec s;
  s.name = c.get_string("name", fs::path(file).stem().string());
  c.get_string("description", "");
  s.nodes = static_cast<int>(c.get_int("nodes", 1, 1, 1 << 20));
  s.gpus_per_node = static_cast<int>(c.get_int("gpus_per_node", 1, 1, 1024));
  s.device = read_device(c);
  {
    const ConfigMap m = c.sub("intra_node");
    if (!c.has("intra_node")) c.fail("intra_node", "missing; e.g. {type: nvlink, bandwidth_GBps: 300, latency_us: 0.7}");
    s.intra_node = read_link(m, {{"nvlink", 0}, {"xgmi", 0}, {"pcie", 0}, {"shm", 0}}, "pcie");
    // Note [NVLink SHARP] (cost/cost_comm.cpp).
    s.intra_node.nvls_efficiency = m.get_double("nvls_efficiency", 0, 0, 1.0);
    if (s.intra_node.nvls_efficiency > 0 && s.intra_node.type != "nvlink") {
      m.fail("nvls_efficiency", "NVLink SHARP reduces in an NVSwitch; a link of type " + s.intra_node.type +
                                    " has none (leave the key out, or 0)");
    }
    m.finish();
  }
  {
    const ConfigMap m = c.sub("inter_node");
    if (c.has("inter_node")) {
      s.inter_node = read_link(m, {{"infiniband", 0}, {"ethernet", 0}, {"none", 0}}, "infiniband");
      s.nics_per_node = static_cast<int>(m.get_int("nics_per_node", 1, 1, 1024));
      m.finish();
    } else {
      s.inter_node = LinkSpec{"none", 1 * kGiga, 50 * kNsPerUs};
    }
    if (s.nodes > 1 && s.inter_node.type == "none") {
      c.fail("nodes", std::to_string(s.nodes) + " nodes need an inter_node network; this cluster has type none");
    }
  }
  {
    const ConfigMap m = c.sub("host");
    s.host_memory = static_cast<Bytes>(m.get_double("memory_GiB", 256, 0.001, kMaxGB) * kGiB);
    s.host_device_bandwidth = m.get_double("device_bandwidth_GBps", 12, 1e-3, kMaxGB) * kGiga;
    s.host_memory_bandwidth = m.get_double("memory_bandwidth_GBps", 100, 1e-3, kMaxGB) * kGiga;
    s.host_flops = m.get_double("tflops", 1.0, 1e-6, 1e6) * kTera;
    // Note [NVLink domains]
    s.host_gpus = static_cast<int>(m.get_int("gpus", 0, 1, 1024));
    if (s.host_gpus > 0 && s.gpus_per_node % s.host_gpus != 0) {
      m.fail("gpus", std::to_string(s.host_gpus) + " GPUs a host do not divide the node's " + std::to_string(s.gpus_per_node) +
                         " (gpus_per_node); valid: a divisor of it, e.g. 4 for a GB200 compute tray");
    }
    m.finish();
  }
  s.nccl_nvls_enable = c.get_bool("nccl_nvls_enable", true);
  if (c.has("nccl_proto")) s.nccl_proto = parse_nccl_proto(c);
  c.finish();
  return s;
}

PlanSpec read_plan(const YAML::Node& root_in, const std::string& file,
                   const std::vector<Override>& overrides) {
  const ConfigMap c = ConfigMap::open(root_in, file, "plan", overrides);
  PlanSpec p;
  p.name = c.get_string("name", file.empty() ? std::string("custom") : fs::path(file).stem().string());
  c.get_string("description", "");
  constexpr std::int64_t kBig = std::int64_t{1} << 40;
  p.dp = static_cast<int>(c.get_int("dp", 0, 1, 1 << 24));
  p.tp = static_cast<int>(c.get_int("tp", 1, 1, 1 << 16));
  p.pp = static_cast<int>(c.get_int("pp", 1, 1, 1 << 16));
  p.cp = static_cast<int>(c.get_int("cp", 1, 1, 1 << 16));
  p.cp_comm = c.get_enum("cp_comm", CpComm::kP2p, {{"p2p", CpComm::kP2p}, {"all_gather", CpComm::kAllGather}});
  p.ep = static_cast<int>(c.get_int("ep", 1, 1, 1 << 16));
  p.etp = static_cast<int>(c.get_int("etp", 0, 1, 1 << 16));
  p.moe_imbalance = c.get_double("moe_imbalance", 1.0, 1.0, 1e6);
  p.moe_force_load_balance = c.get_bool("moe_force_load_balance", false);
  p.accumulate_allreduce_grads_in_fp32 = c.get_bool("accumulate_allreduce_grads_in_fp32", false);
  p.master_weights = c.get_bool("master_weights", true);  // Note [No master weights]
  p.megatron_grad_buffer = c.get_bool("megatron_grad_buffer", false);  // Note [Megatron's gradient buffer]
  p.fp32_grad_accumulator = c.get_bool("fp32_grad_accumulator", false);  // Note [nanotron's fp32 accumulator]
  // Note [8-bit optimizer] (plan.cpp): bitsandbytes' optim_bits, 32 or 8 (resolve says which).
  p.optim_bits = static_cast<int>(c.get_int("optim_bits", 32, 1, 64));
  p.optimizer_in_backward = c.get_bool("optimizer_in_backward", false);  // Note [Optimizer in backward]
  // Note [Precision-aware optimizer] (plan.cpp): Megatron-Core's knobs, its words.
  p.use_precision_aware_optimizer = c.get_bool("use_precision_aware_optimizer", false);
  p.main_params_dtype = c.get_enum("main_params_dtype", StateDtype::kFp32, {{"fp32", StateDtype::kFp32}, {"fp16", StateDtype::kFp16}});
  for (auto [key, field] : {std::pair{"exp_avg_dtype", &p.exp_avg_dtype}, std::pair{"exp_avg_sq_dtype", &p.exp_avg_sq_dtype}}) {
    *field = c.get_enum(key, StateDtype::kFp32,
                        {{"fp32", StateDtype::kFp32}, {"fp16", StateDtype::kFp16}, {"bf16", StateDtype::kBf16}, {"fp8", StateDtype::kFp8}});
  }
  p.store_param_remainders = c.get_bool("store_param_remainders", true);
  p.deallocate_pipeline_outputs = c.get_bool("deallocate_pipeline_outputs", false);
  p.cpu_offloading_num_layers = static_cast<int>(c.get_int("cpu_offloading_num_layers", 0, 0, 1 << 20));
  p.enable_activation_offloading = c.get_bool("enable_activation_offloading", false);  // Note [Saved-tensor offload]
  p.fine_grained_activation_offloading = c.get_bool("fine_grained_activation_offloading", false);
  if (c.has("offload_modules")) {
    // Megatron-Core's --offload-modules (Note [Offload modules] in
    // model.hpp): its names, a list or one string.
    for (const std::string& w : c.get_word_list("offload_modules")) {
      const std::uint16_t bit = offload_module_of(w);
      if (bit == 0) {
        const std::string hint = did_you_mean(w, offload_module_names());
        c.fail("offload_modules", "'" + w + "' is not one of Megatron-Core's offload modules" +
                                      (hint.empty() ? "" : " (did you mean '" + hint + "'?)") + "; valid: " + offload_modules_string(0x1FF));
      }
      p.offload_modules = static_cast<std::uint16_t>(p.offload_modules | bit);
    }
  }
  p.min_offloaded_tensor_size = c.get_int("min_offloaded_tensor_size", 1024 * 1024, 0, std::int64_t{1} << 50);
  p.activation_offload_fraction = c.get_double("activation_offload_fraction", 1.0, 0.0, 1.0);
  p.delta_offload_bytes_across_pp_ranks = c.get_int("delta_offload_bytes_across_pp_ranks", 0, 0, std::int64_t{1} << 60);
  // null (None): no cap, as TransformerConfig's default.
  p.fine_grained_offloading_max_inflight_offloads = static_cast<int>(c.get_int("fine_grained_offloading_max_inflight_offloads", -1, 0, 1 << 20));
  p.first_last_layers_bf16 = c.get_bool("first_last_layers_bf16", false);
  p.num_layers_at_start_in_bf16 = static_cast<int>(c.get_int("num_layers_at_start_in_bf16", 1, 0, 1 << 20));
  p.num_layers_at_end_in_bf16 = static_cast<int>(c.get_int("num_layers_at_end_in_bf16", 1, 0, 1 << 20));
  p.partition_activations = c.get_bool("partition_activations", false);
  p.cpu_checkpointing = c.get_bool("cpu_checkpointing", false);
  p.moe_capacity_factor = c.get_double("moe_capacity_factor", 0, 0, 1e6);
  p.moe_pad = c.get_bool("moe_pad", false);
  p.moe_dispatcher = c.get_enum("moe_dispatcher", MoeDispatcher::kAllToAll,
                                {{"alltoall", MoeDispatcher::kAllToAll}, {"allgather", MoeDispatcher::kAllGather}, {"deepep", MoeDispatcher::kDeepEp}});
  p.overlap_moe_expert_parallel_comm = c.get_bool("overlap_moe_expert_parallel_comm", false);
  p.moe_experts = c.get_enum("moe_experts", MoeExperts::kGrouped, {{"grouped", MoeExperts::kGrouped}, {"dense", MoeExperts::kDense}});
  p.loss_parallel = c.get_enum("loss_parallel", LossParallel::kAuto,
                               {{"auto", LossParallel::kAuto}, {"megatron", LossParallel::kMegatron}, {"dtensor", LossParallel::kDtensor}});
  p.runtime = c.get_enum("runtime", Runtime::kLibtorch, {{"libtorch", Runtime::kLibtorch}, {"python", Runtime::kPython}});
  p.kernels = c.get_enum("kernels", Kernels::kComposite, {{"composite", Kernels::kComposite}, {"fused", Kernels::kFused}});
  p.attention = c.get_enum("attention", Attention::kAuto,
                           {{"auto", Attention::kAuto}, {"eager", Attention::kEager}, {"flash", Attention::kFlash}});
  p.model_parallel = static_cast<int>(c.get_int("model_parallel", 0, 1, 1 << 16));
  p.schedule = c.get_enum("schedule", Schedule::k1f1b,
                          {{"gpipe", Schedule::kGpipe}, {"1f1b", Schedule::k1f1b}, {"interleaved", Schedule::kInterleaved},
                           {"zb-h1", Schedule::kZbH1}});
  p.virtual_stages = static_cast<int>(c.get_int("virtual_stages", 0, 1, 1 << 16));
  for (std::int64_t v : c.get_int_list("stage_layers")) {
    if (v < 1 || v > (1 << 20)) c.fail("stage_layers", std::to_string(v) + " layers in a stage; valid: 1 or more each");
    p.stage_layers.push_back(static_cast<int>(v));
  }
  // Megatron-Core's even split and its knobs (Note [Megatron's split] in
  // plan.cpp); a knob alone asks for the split.
  p.pipeline_split = c.get_enum("pipeline_split", PipelineSplit::kCost, {{"cost", PipelineSplit::kCost}, {"megatron", PipelineSplit::kMegatron}});
  p.account_for_embedding_in_pipeline_split = c.get_bool("account_for_embedding_in_pipeline_split", false);
  p.account_for_loss_in_pipeline_split = c.get_bool("account_for_loss_in_pipeline_split", false);
  p.num_layers_in_first_pipeline_stage = static_cast<int>(c.get_int("num_layers_in_first_pipeline_stage", 0, 1, 1 << 20));
  p.num_layers_in_last_pipeline_stage = static_cast<int>(c.get_int("num_layers_in_last_pipeline_stage", 0, 1, 1 << 20));
  for (const char* key : {"account_for_embedding_in_pipeline_split", "account_for_loss_in_pipeline_split",
                          "num_layers_in_first_pipeline_stage", "num_layers_in_last_pipeline_stage"}) {
    if (!c.has(key)) continue;
    if (!c.has("pipeline_split")) {
      p.pipeline_split = PipelineSplit::kMegatron;
    } else if (p.pipeline_split == PipelineSplit::kCost) {
      c.fail(key, "is Megatron's split; it needs pipeline_split: megatron, not cost");
    }
  }
  // Megatron-Core's layout (Note [Pipeline layout] in plan.cpp): each chunk's layers.
  p.pipeline_layout = c.get_string("pipeline_layout", "");
  if (!p.pipeline_layout.empty()) {
    if (c.has("stage_layers")) c.fail("pipeline_layout", "given with stage_layers; both split the layers: give one");
    std::vector<std::string> chunks;
    try {
      chunks = parse_pipeline_layout(p.pipeline_layout);
    } catch (const ConfigError& e) {
      c.fail("pipeline_layout", e.what());
    }
    for (const auto& chunk : chunks) p.stage_layers.push_back(static_cast<int>(chunk.size()));
  }
  p.sequence_parallel = c.get_bool("sequence_parallel", false);
  p.sync_batchnorm = c.get_bool("sync_batchnorm", false);
  p.tp_comm_overlap = c.get_bool("tp_comm_overlap", false);
  p.tp_comm_overlap_cfg = c.get_enum("tp_comm_overlap_cfg", TpOverlapCfg::kRing,
                                     {{"ring", TpOverlapCfg::kRing}, {"te", TpOverlapCfg::kTe}, {"async_tp", TpOverlapCfg::kAsyncTp}});
  p.placement = c.get_string("placement", "tp,pp,dp");
  p.micro_batch = c.get_int("micro_batch", 0, 1, std::int64_t{1} << 24);
  p.grad_accum = c.get_int("grad_accum", 0, 1, kBig);
  if (c.has("micro_batches")) {
    // GPipe's "chunks": the micro-batches of one iteration, i.e. grad_accum.
    // A --set of one wins over the other written in the file.
    const std::int64_t m = c.get_int("micro_batches", 0, 1, kBig);
    const bool m_set = c.overridden("micro_batches");
    const bool ga_set = c.has("grad_accum") && c.overridden("grad_accum");
    if (p.grad_accum != 0 && p.grad_accum != m && m_set == ga_set) {
      c.fail("micro_batches", std::to_string(m) + " contradicts grad_accum: " + std::to_string(p.grad_accum) +
                                  " (they are the same thing); set only one");
    }
    if (!ga_set || m_set) p.grad_accum = m;
  }
  p.global_batch = c.get_int("global_batch", 0, 1, kBig);
  {
    // Note [A batch key given way to]
    // global_batch = micro_batch x grad_accum x dp, and a shipped plan
    // writes two of the three (fsdp.yaml: micro_batch 4, grad_accum 1). A
    // user who then sets the global batch (--set plan.global_batch=128, or
    // a framework's config that gives it) means it, as Megatron-LM derives
    // its micro-batches from --global-batch-size and --micro-batch-size
    // (megatron/core/num_microbatches_calculator.py): where all three are
    // given and an override set some of them, one the file alone gave is
    // dropped and derived again, grad_accum first, then micro_batch, then
    // global_batch (so setting micro_batch or grad_accum keeps the file's
    // global batch). Only where the overrides set all three can they
    // disagree (resolve() says so, one line).
    const bool ga_set = (c.has("grad_accum") && c.overridden("grad_accum")) ||
                        (c.has("micro_batches") && c.overridden("micro_batches"));
    const bool mb_set = c.has("micro_batch") && c.overridden("micro_batch");
    const bool gb_set = c.has("global_batch") && c.overridden("global_batch");
    if (p.micro_batch != 0 && p.grad_accum != 0 && p.global_batch != 0 && (ga_set || mb_set || gb_set)) {
      if (!ga_set) {
        p.grad_accum = 0;
      } else if (!mb_set) {
        p.micro_batch = 0;
      } else if (!gb_set) {
        p.global_batch = 0;
      }
    }
  }
  p.seq_len = c.get_int("seq_len", 0, 1, kBig);
  p.document_len = c.get_int("document_len", 0, 0, kBig);
  p.loss_chunks = c.get_int("loss_chunks", 1, 1, 1 << 16);
  p.loss_kernel = c.get_enum("loss_kernel", LossKernel::kCrossEntropy,
                             {{"cross_entropy", LossKernel::kCrossEntropy}, {"liger_fused_linear", LossKernel::kLigerFused},
                              {"cut_cross_entropy", LossKernel::kCutCrossEntropy},
                              {"chunked_nll", LossKernel::kChunkedNll}, {"chunked_nll_fp32", LossKernel::kChunkedNllFp32}});
  p.precision = c.get_enum("precision", Precision::kFp32,
                           {{"fp32", Precision::kFp32}, {"fp16", Precision::kFp16}, {"bf16", Precision::kBf16},
                            {"fp8", Precision::kFp8}, {"fp4", Precision::kFp4}});
  p.fp8_param_gather = c.get_bool("fp8_param_gather", false);
  p.fp8_recipe = c.get_enum("fp8_recipe", Fp8Recipe::kDelayed, {{"delayed", Fp8Recipe::kDelayed}, {"tensorwise", Fp8Recipe::kTensorwise}, {"mxfp8", Fp8Recipe::kMxfp8}});
  p.optimizer = c.get_enum("optimizer", Optimizer::kAdamW,
                           {{"adam", Optimizer::kAdam}, {"adamw", Optimizer::kAdamW}, {"sgd", Optimizer::kSgd}});
  p.sgd_momentum = c.get_double("sgd_momentum", 0.9, 0, 1);  // Note [SGD momentum]
  if (c.has("zero_stage")) {
    const std::string z = c.get_string("zero_stage", "0");
    if (z != "0" && z != "1" && z != "2" && z != "3") c.fail("zero_stage", z + " is not one of 0, 1, 2, 3");
    p.zero_stage = z[0] - '0';
  }
  if (c.has("fsdp")) {
    // dtsim's names or PyTorch's ShardingStrategy's (framework_config.cpp).
    try {
      p.fsdp = parse_fsdp_mode(c.get_string("fsdp", "none"));
    } catch (const ConfigError& e) {
      c.fail("fsdp", e.what());
    }
  }
  p.limit_all_gathers = c.get_bool("limit_all_gathers", true);
  p.fsdp_reduce_fp32 = c.get_enum("reduce_dtype", false, {{"param", false}, {"fp32", true}});
  p.fsdp_version = c.get_enum("fsdp_version", 1, {{"1", 1}, {"2", 2}});
  p.outer_optim = c.get_enum("outer_dp_sharding_strategy", false, {{"no_shard", false}, {"optim", true}});
  p.fsdp_wrap = c.get_enum("fsdp_wrap", FsdpWrap::kBlocks, {{"blocks", FsdpWrap::kBlocks}, {"layers", FsdpWrap::kLayers}, {"torchtitan", FsdpWrap::kTorchtitan}});
  p.stage3_prefetch_bucket_size = c.get_double("stage3_prefetch_bucket_size", 5e7, 0, 1e15);
  p.stage3_max_live_parameters = c.get_double("stage3_max_live_parameters", 1e9, 0, 1e15);
  p.stage3_max_reuse_distance = c.get_double("stage3_max_reuse_distance", 1e9, 0, 1e15);
  p.stage3_param_persistence_threshold = c.get_double("stage3_param_persistence_threshold", 1e5, 0, 1e15);
  p.z3_leaf_layers = c.get_bool("z3_leaf_layers", false);
  p.offload_optimizer = c.get_enum("offload_optimizer", Offload::kNone, {{"none", Offload::kNone}, {"cpu", Offload::kCpu}});
  p.offload_params = c.get_enum("offload_params", Offload::kNone, {{"none", Offload::kNone}, {"cpu", Offload::kCpu}});
  p.recompute = c.get_enum("recompute", Recompute::kNone, {{"none", Recompute::kNone}, {"selective", Recompute::kSelective}, {"full", Recompute::kFull}, {"op", Recompute::kOp}});
  if (c.has("recompute_modules")) {
    // Megatron-Core's --recompute-modules (Note [Recompute modules] in
    // model.hpp): its names, a list or one string; [] reruns nothing.
    p.recompute_modules = 0;
    p.recompute_modules_set = true;
    for (const std::string& w : c.get_word_list("recompute_modules")) {
      const std::uint8_t bit = recompute_module_of(w);
      if (bit == 0) {
        const std::string hint = did_you_mean(w, recompute_module_names());
        c.fail("recompute_modules", "'" + w + "' is not one of Megatron-Core's modules" + (hint.empty() ? "" : " (did you mean '" + hint + "'?)") +
                                        "; valid: " + recompute_modules_string(0xFF));
      }
      p.recompute_modules = static_cast<std::uint8_t>(p.recompute_modules | bit);
    }
  }
  p.recompute_method = c.get_enum("recompute_method", RecomputeMethod::kUniform, {{"uniform", RecomputeMethod::kUniform}, {"block", RecomputeMethod::kBlock}});
  p.recompute_num_layers = static_cast<int>(c.get_int("recompute_num_layers", 0, 1, 1 << 20));
  p.bucket_mb = c.get_double("bucket_mb", 25, 0.001, 1e6);
  // Note [DeepSpeed's knob names]
  // A DeepSpeed user knows the bucket as zero_optimization.reduce_bucket_size,
  // in elements (default 5e8), and the overlap as overlap_comm (zero/config.py);
  // a PyTorch user as DDP's bucket_cap_mb and dtsim's overlap. A plan takes
  // either name. Where both are given, the later level wins: a framework's
  // config (--deepspeed, --megatron-args) over the plan file, a --set over
  // both; the same level giving both is refused.
  const auto level = [&c](const char* key) {
    if (!c.overridden(key)) return 0;
    return c.where(key).rfind("--set ", 0) == 0 ? 2 : 1;
  };
  const auto one_of = [&](const char* deepspeed, const char* ours) {
    if (!c.has(deepspeed)) return false;
    if (!c.has(ours)) return true;
    const int a = level(deepspeed), b = level(ours);
    if (a == b) c.fail(deepspeed, std::string("set with ") + ours + ", the same knob under dtsim's name; set one of them");
    return a > b;
  };
  if (one_of("reduce_bucket_size", "bucket_mb")) p.reduce_bucket_size = c.get_double("reduce_bucket_size", 5e8, 1, 1e15);
  p.overlap = c.get_bool("overlap", true);
  if (one_of("overlap_comm", "overlap")) p.overlap = c.get_bool("overlap_comm", true);
  p.contiguous_gradients = c.get_bool("contiguous_gradients", true);
  p.reduce_scatter = c.get_bool("reduce_scatter", true);
  p.overlap_param_gather = c.get_bool("overlap_param_gather", false);
  c.finish();
  p.origins.file = file.empty() ? "<built-in>" : file;
  for (const auto& k : c.keys()) p.origins.where["plan." + k] = c.where(k);
  // A layout's chunks are named by it where resolve speaks of stage_layers.
  if (!p.pipeline_layout.empty()) p.origins.where["plan.stage_layers"] = c.where("pipeline_layout");
  return p;
}

YAML::Node parse_text(const std::string& text, const std::string& file) { return parse_config_text(text, file, false); }

// Note [Framework configs as plans]
// A DeepSpeed JSON given where a plan goes fails on its first key that a
// plan reads differently (`plan.optimizer: expected a string, got a
// mapping`), which sends a user looking in the wrong place; a TOML fails as
// malformed YAML. Such files are recognised (framework_of) and refused with
// the option that reads them.
[[noreturn]] void refuse_framework_config(const std::string& kind, const std::string& file) {
  const char* option = kind == "deepspeed"         ? "--deepspeed"
                       : kind == "torchtitan"      ? "--torchtitan"
                       : kind == "torchtune"       ? "--torchtune"
                       : kind == "axolotl"         ? "--axolotl"
                       : kind == "llamafactory"    ? "--llamafactory"
                       : kind == "trl"             ? "--trl"
                       : kind == "nanotron"        ? "--nanotron"
                       : kind == "accelerate"      ? "--accelerate"
                       : kind == "megatron-bridge" ? "--megatron-bridge"
                                                   : "--megatron-args";
  const char* name = kind == "deepspeed"         ? "DeepSpeed config"
                     : kind == "torchtitan"      ? "torchtitan TOML"
                     : kind == "torchtune"       ? "torchtune recipe config"
                     : kind == "axolotl"         ? "axolotl config"
                     : kind == "llamafactory"    ? "LLaMA-Factory config"
                     : kind == "trl"             ? "TRL config"
                     : kind == "nanotron"        ? "nanotron config"
                     : kind == "accelerate"      ? "accelerate config"
                     : kind == "megatron-bridge" ? "Megatron-Bridge config"
                                                 : "Megatron-LM command line";
  const bool vowel = std::string("aeiou").find(name[0]) != std::string::npos;
  throw ConfigError(file + " looks like " + (vowel ? "an " : "a ") + name + "; pass it as " + option + " " + file);
}

/// DeepSpeed's top-level keys (deepspeed/runtime/constants.py) and
/// Megatron-Bridge's sections (a model: mapping beside train:, ddp: or
/// optimizer:), which no plan has.
void refuse_framework_keys(const YAML::Node& root, const std::string& file) {
  if (!root.IsMap()) return;
  for (const char* key : {"zero_optimization", "train_batch_size", "train_micro_batch_size_per_gpu"}) {
    if (root[key]) refuse_framework_config("deepspeed", file);
  }
  if (root["model"] && root["model"].IsMap() && root["model"]["_component_"]) refuse_framework_config("torchtune", file);
  if (root["base_model"]) refuse_framework_config("axolotl", file);
  // LLaMA-Factory's have its template, stage or finetuning_type; TRL's not.
  if (root["model_name_or_path"]) refuse_framework_config(root["template"] || root["stage"] || root["finetuning_type"] ? "llamafactory" : "trl", file);
  if (root["distributed_type"]) refuse_framework_config("accelerate", file);
  if (root["parallelism"] && root["parallelism"].IsMap() && (root["tokens"] || root["model"])) refuse_framework_config("nanotron", file);
  if (root["model"] && root["model"].IsMap() && (root["train"] || root["ddp"] || root["optimizer"])) {
    refuse_framework_config("megatron-bridge", file);
  }
}

/// A plan's YAML tree, or the refusal of Note [Framework configs as plans].
YAML::Node plan_tree(const std::string& text, const std::string& file, bool json) {
  if (const std::string kind = framework_of("", file); !kind.empty()) refuse_framework_config(kind, file);
  YAML::Node root;
  try {
    root = parse_config_text(text, file, json);
  } catch (const ConfigError&) {
    if (const std::string kind = framework_of(text, file); !kind.empty()) refuse_framework_config(kind, file);
    throw;
  }
  // TOML's "[section]" alone reads as a YAML list.
  if (root && !root.IsMap() && !root.IsNull()) {
    if (const std::string kind = framework_of(text, file); !kind.empty()) refuse_framework_config(kind, file);
  }
  refuse_framework_keys(root, file);
  return root;
}

}  // namespace

std::string Origins::of(const std::string& key) const {
  auto it = where.find(key);
  return it != where.end() ? it->second : file;
}

ClusterSpec load_cluster(const std::string& name_or_path, const std::vector<Override>& overrides) {
  const std::string path = find_config("clusters", name_or_path);
  return read_cluster(load_yaml_file(path), path, overrides);
}

ClusterSpec parse_cluster(const std::string& yaml_text, const std::string& file,
                          const std::vector<Override>& overrides) {
  return read_cluster(parse_text(yaml_text, file), file, overrides);
}

PlanSpec load_plan(const std::string& name_or_path, const std::vector<Override>& overrides) {
  const std::string path = find_config("plans", name_or_path);
  if (const std::string kind = framework_of("", path); !kind.empty()) refuse_framework_config(kind, path);
  // The file's start, to recognise a framework's config that is not YAML.
  auto sniff = [&] {
    std::ifstream in(path, std::ios::binary);
    std::string text(std::size_t{64} << 10, '\0');
    in.read(text.data(), static_cast<std::streamsize>(text.size()));
    text.resize(static_cast<std::size_t>(in.gcount()));
    if (const std::string kind = framework_of(text, path); !kind.empty()) refuse_framework_config(kind, path);
  };
  YAML::Node root;
  try {
    root = load_yaml_file(path);
  } catch (const ConfigError&) {
    sniff();
    throw;
  }
  if (root && !root.IsMap() && !root.IsNull()) sniff();
  refuse_framework_keys(root, path);
  return read_plan(root, path, overrides);
}

PlanSpec parse_plan(const std::string& yaml_text, const std::string& file,
                    const std::vector<Override>& overrides) {
  return read_plan(plan_tree(yaml_text, file, false), file, overrides);
}

}  // namespace dtsim::sim
