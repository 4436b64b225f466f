#include "commands.hpp"

#include <algorithm>
#include <iostream>
#include <map>
#include <cstdio>
#include <optional>

#include "dtsim/calibrate/calibrate.hpp"
#include "dtsim/models/models.hpp"
#include "dtsim/platform/process.hpp"
#include "dtsim/sim/config_io.hpp"
#include "dtsim/sim/cost.hpp"
#include "dtsim/sim/cost_profile.hpp"
#include "dtsim/sim/error.hpp"
#include "dtsim/sim/file_io.hpp"
#include "dtsim/sim/json_writer.hpp"
#include "dtsim/sim/predict.hpp"
#include "dtsim/sim/profile.hpp"
#include "dtsim/sim/report.hpp"
#include "dtsim/sim/search.hpp"

#include <chrono>
#include <unistd.h>

namespace dtsim::cli {
namespace {

/// Parsed options: --key value, --key=value, repeated --set, flags.
struct Options {
  std::map<std::string, std::string> values;
  std::vector<std::string> sets;
  std::vector<std::string> flags;
  std::vector<std::string> positional;
  bool flag(const std::string& f) const { return std::find(flags.begin(), flags.end(), f) != flags.end(); }
  std::optional<std::string> get(const std::string& k) const {
    auto it = values.find(k);
    if (it == values.end()) return std::nullopt;
    return it->second;
  }
};

Options parse(const Args& args, const std::string& command, const std::vector<std::string>& with_value,
              const std::vector<std::string>& flags) {
  Options o;
  for (std::size_t i = 0; i < args.size(); ++i) {
    std::string a = args[i];
    if (a.rfind("--", 0) != 0) {
      o.positional.push_back(a);
      continue;
    }
    std::string value;
    bool has_value = false;
    if (auto eq = a.find('='); eq != std::string::npos) {
      value = a.substr(eq + 1);
      a = a.substr(0, eq);
      has_value = true;
    }
    const std::string key = a.substr(2);
    const bool takes = key == "set" || std::find(with_value.begin(), with_value.end(), key) != with_value.end();
    if (takes) {
      if (!has_value) {
        if (i + 1 >= args.size()) throw ConfigError(a + ": missing value");
        value = args[++i];
      }
      if (key == "set") {
        o.sets.push_back(value);
      } else if (!o.values.emplace(key, value).second) {
        // The first would be silently lost: which did the user mean?
        throw ConfigError("dtsim " + command + ": --" + key + " given twice ('" + o.values[key] + "' and '" + value +
                          "'); give it once");
      }
      continue;
    }
    if (std::find(flags.begin(), flags.end(), key) != flags.end()) {
      if (has_value) throw ConfigError(a + ": takes no value");
      if (std::find(o.flags.begin(), o.flags.end(), key) != o.flags.end()) {
        throw ConfigError("dtsim " + command + ": " + a + " given twice; give it once");
      }
      o.flags.push_back(key);
      continue;
    }
    std::vector<std::string> all = with_value;
    all.push_back("set");
    all.insert(all.end(), flags.begin(), flags.end());
    const std::string hint = sim::did_you_mean(key, all);
    std::string list;
    for (const auto& k : all) list += (list.empty() ? "--" : ", --") + k;
    throw ConfigError("dtsim " + command + ": unknown option " + a +
                      (hint.empty() ? "" : " (did you mean --" + hint + "?)") + "; valid: " + list);
  }
  return o;
}

std::vector<sim::Override> overrides(const Options& o) {
  std::vector<sim::Override> out;
  for (const auto& s : o.sets) out.push_back(sim::parse_override(s));
  return out;
}

std::string require(const Options& o, const std::string& key, const std::string& command, const std::string& hint) {
  auto v = o.get(key);
  if (!v || v->empty()) throw ConfigError("dtsim " + command + ": --" + key + " is required; " + hint);
  return *v;
}

}  // namespace

std::string usage() {
  return R"(dtsim: predict the time and memory of a distributed training plan

usage:
  dtsim predict --model M --cluster C [--plan P] [--set SECTION.KEY=VALUE]... [--json] [--trace FILE] [--unabridged]
  dtsim search --model M --cluster C [--gpus N] [--global-batch B] [--top K] [--threads T] [--set plan.KEY=V]... [--json|--csv]
  dtsim comm --cluster C [--op OP] [--ranks N] [--ranks-per-node K] [--min-bytes B] [--max-bytes B] [--profile FILE.h5] [--json]
  dtsim list models|clusters|plans|devices [--json]
  dtsim calibrate --device cpu|cuda --out FILE.h5 [--procs N] [--threads T] [--quick] [--models a,b]
  dtsim profile show FILE.h5 [--json] | dtsim profile upgrade FILE.h5
  dtsim validate --model M [--plan P] [--procs N] [--steps K] [--warmup W] [--profile FILE.h5] [--data FILE.h5]
                 [--device cpu|cuda] [--cluster C] [--set ...]... [--trace FILE] [--timeout S] [--json]

  validate trains the plan for real (LibTorch; Gloo on cpu, NCCL on cuda) on N local
  processes, or under mpirun / srun / torchrun on theirs, and prints predicted against
  measured iteration time, phases and per-rank peak memory
  predict --profile FILE.h5 prices layers and collectives from a calibration profile (comm --profile: collectives)
  predict --unabridged simulates every micro-batch of a long pipeline, not its steady state once (same results)

  M: a built-in model (dtsim list models), a YAML file, or a HuggingFace config.json
  C, P: a shipped config name (dtsim list clusters|plans) or a YAML file
  --set plan.micro_batch=32   --set cluster.nodes=4   --set model.layers=24
  OP: all_reduce (default), reduce_scatter, all_gather, broadcast, send_recv, all_to_all

exit status: 0 ok, 2 bad input (one line on stderr says what and where)
)";
}

int cmd_predict(const Args& args) {
  const Options o = parse(args, "predict", {"model", "cluster", "plan", "trace", "profile"}, {"json", "unabridged"});
  if (!o.positional.empty()) throw ConfigError("dtsim predict: unexpected argument '" + o.positional.front() + "'");
  const auto ov = overrides(o);
  const std::string model_name = require(o, "model", "predict", "e.g. --model gpt2 (see dtsim list models)");
  const std::string cluster_name = require(o, "cluster", "predict", "e.g. --cluster dgx-a100 (see dtsim list clusters)");
  const std::string plan_name = o.get("plan").value_or("ddp");
  const sim::ModelPtr model = models::load_model(model_name, ov);
  const sim::ClusterSpec cluster = sim::load_cluster(cluster_name, ov);
  const sim::PlanSpec plan = sim::load_plan(plan_name, ov);
  const auto trace = o.get("trace");
  if (trace && trace->empty()) throw ConfigError("--trace: missing file name");
  sim::PredictOptions po;
  po.keep_graph = trace.has_value();
  po.unabridged = o.flag("unabridged");
  if (const auto prof = o.get("profile")) {
    if (prof->empty()) throw ConfigError("--profile: missing file name");
    po.profile = std::make_shared<const sim::ProfileCosts>(sim::load_profile(*prof));
  }
  const sim::Prediction p = sim::predict(*model, plan, cluster, po);
  if (trace) sim::write_file_atomic(*trace, sim::to_chrome_trace(p));
  if (o.flag("json")) {
    std::cout << sim::to_json(p);
  } else {
    std::cout << sim::format_table(p);
    if (trace) std::cout << "\n  timeline written to " << *trace << " (open it in https://ui.perfetto.dev)\n";
  }
  return 0;
}

namespace {

std::int64_t int_option(const Options& o, const std::string& key, std::int64_t fallback, std::int64_t lo, std::int64_t hi) {
  const auto v = o.get(key);
  if (!v) return fallback;
  try {
    std::size_t used = 0;
    const long long x = std::stoll(*v, &used);
    if (used == v->size() && x >= lo && x <= hi) return x;
  } catch (const std::exception&) {
  }
  throw ConfigError("--" + key + " " + *v + ": expected an integer from " + std::to_string(lo) + " to " + std::to_string(hi));
}

}  // namespace

int cmd_search(const Args& args) {
  const Options o = parse(args, "search", {"model", "cluster", "gpus", "global-batch", "top", "threads", "profile"},
                          {"json", "csv"});
  if (!o.positional.empty()) throw ConfigError("dtsim search: unexpected argument '" + o.positional.front() + "'");
  if (o.flag("json") && o.flag("csv")) throw ConfigError("dtsim search: --json and --csv exclude each other; pick one");
  const auto ov = overrides(o);
  const std::string model_name = require(o, "model", "search", "e.g. --model gpt2-xl (see dtsim list models)");
  const std::string cluster_name = require(o, "cluster", "search", "e.g. --cluster dgx-a100 (see dtsim list clusters)");
  const sim::ModelPtr model = models::load_model(model_name, ov);
  const sim::ClusterSpec cluster = sim::load_cluster(cluster_name, ov);
  sim::SearchOptions so;
  // Fixed knobs: --set plan.precision=bf16 and the like; by default bf16 where the
  // device has it, else fp16 where it is faster than fp32 (not on CPUs), else fp32.
  so.base.precision = cluster.device.peak_bf16 > 0                              ? sim::Precision::kBf16
                      : cluster.device.peak_fp16 > cluster.device.peak_fp32 ? sim::Precision::kFp16
                                                                            : sim::Precision::kFp32;
  so.base.optimizer = sim::Optimizer::kAdam;
  {
    // The precision stays unset unless --set gives it: the search walks the
    // 16- and 8-bit ones the device runs faster than fp32 (search.cpp),
    // falling back to this default.
    const sim::Precision fallback = so.base.precision;
    const sim::PlanSpec b = sim::parse_plan("optimizer: adam\n", "<search defaults>", ov);
    so.base = b;
    if (b.origins.where.count("plan.precision") == 0) so.base.precision = fallback;
  }
  so.gpus = static_cast<int>(int_option(o, "gpus", 0, 1, 1 << 24));
  so.global_batch = int_option(o, "global-batch", 0, 1, std::int64_t{1} << 40);
  so.top = static_cast<int>(int_option(o, "top", 10, 1, 1 << 20));
  so.threads = static_cast<int>(int_option(o, "threads", 0, 1, 1024));
  if (const auto prof = o.get("profile")) {
    if (prof->empty()) throw ConfigError("--profile: missing file name");
    so.profile = std::make_shared<const sim::ProfileCosts>(sim::load_profile(*prof));
  }
  if (isatty(2) != 0) {
    const auto start = std::chrono::steady_clock::now();
    so.progress = [start](std::size_t done, std::size_t total) {
      const double el = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
      const double eta = done > 0 ? el * static_cast<double>(total - done) / static_cast<double>(done) : 0;
      std::fprintf(stderr, "\r  search: %zu / %zu plans (%.0f%%), %.1f s elapsed, ETA %.1f s   ", done, total,
                   total ? 100.0 * done / total : 100.0, el, eta);
      if (done == total) std::fprintf(stderr, "\n");
    };
  }
  platform::retain_freed_memory();  // Note [Freed memory stays]
  const sim::SearchResult r = sim::search(*model, cluster, so);
  if (o.flag("json")) {
    std::cout << sim::search_to_json(r);
  } else if (o.flag("csv")) {
    std::cout << sim::search_to_csv(r);
  } else {
    std::cout << sim::format_search(r);
  }
  return 0;
}

namespace {

/// What priced `dtsim comm --profile`'s rows, in words (Note [Profile
/// lookups] in sim/src/cost/cost_profile.cpp): the measured fit of the same
/// operation and rank count, the datasheet formula over the link the
/// profile's largest all-reduce fit gives, or the datasheet links.
std::string comm_source(const sim::Profile& p, sim::CollectiveOp op, const sim::CommGroup& g, const sim::CostSources& used) {
  const std::string what = std::string(to_string(op)) + " over " + std::to_string(g.ranks) + " ranks";
  if (used.comm_measured > 0) {
    for (const char* backend : {"nccl", "gloo"}) {
      const auto it = p.fits.find(sim::comm_fit_name(backend, op, g.ranks));
      if (it == p.fits.end()) continue;
      const sim::FitTerms t = [&] {
        sim::FitTerms f;
        for (std::size_t i = 0; i < it->second.features.size() && i < it->second.coef.size(); ++i) {
          if (it->second.features[i] == "1") f.constant = it->second.coef[i];
          if (it->second.features[i] == "bytes") f.per_byte = it->second.coef[i];
        }
        return f;
      }();
      char fit[160];
      std::snprintf(fit, sizeof fit, "t = %.3g us + S x %.3g ns/B", t.constant * 1e6, t.per_byte * 1e9);
      return what + " measured: fit " + it->first + " of " + std::to_string(it->second.samples) + " sizes, " + fit;
    }
  }
  if (used.comm_scaled > 0) {
    return what + " not measured: the datasheet formula over the intra-node link its all_reduce fit gives";
  }
  return what + " not measured and no all_reduce fit to scale: the cluster's datasheet links";
}

}  // namespace

int cmd_comm(const Args& args) {
  const Options o =
      parse(args, "comm", {"cluster", "op", "ranks", "ranks-per-node", "min-bytes", "max-bytes", "profile"}, {"json"});
  if (!o.positional.empty()) throw ConfigError("dtsim comm: unexpected argument '" + o.positional.front() + "'");
  const auto ov = overrides(o);
  const std::string cluster_name = require(o, "cluster", "comm", "e.g. --cluster dgx-a100");
  const sim::ClusterSpec cluster = sim::load_cluster(cluster_name, ov);
  sim::CollectiveOp op = sim::CollectiveOp::kAllReduce;
  const std::string op_name = o.get("op").value_or("all_reduce");
  if (!sim::parse_collective(op_name, &op)) {
    const std::vector<std::string> ops{"all_reduce", "reduce_scatter", "all_gather", "broadcast", "send_recv", "all_to_all"};
    const std::string hint = sim::did_you_mean(op_name, ops);
    throw ConfigError("--op " + op_name + ": unknown collective" + (hint.empty() ? "" : " (did you mean '" + hint + "'?)") +
                      "; valid: all_reduce, reduce_scatter, all_gather, broadcast, send_recv, all_to_all");
  }
  auto number = [&](const std::string& key, std::int64_t fallback, std::int64_t lo, std::int64_t hi) {
    auto v = o.get(key);
    if (!v) return fallback;
    std::size_t pos = 0;
    std::int64_t n = 0;
    try {
      n = std::stoll(*v, &pos);
    } catch (const std::exception&) {
      pos = 0;
    }
    if (pos != v->size() || n < lo || n > hi) {
      throw ConfigError("--" + key + " " + *v + ": expected an integer from " + std::to_string(lo) + " to " + std::to_string(hi));
    }
    return n;
  };
  sim::CommGroup g;
  g.ranks = static_cast<int>(number("ranks", cluster.gpus(), 1, cluster.gpus()));
  g.ranks_per_node = static_cast<int>(number("ranks-per-node", std::min(g.ranks, cluster.gpus_per_node), 1, cluster.gpus_per_node));
  if (g.ranks_per_node > g.ranks) g.ranks_per_node = g.ranks;
  if (op == sim::CollectiveOp::kSendRecv && g.ranks != 2) {
    throw ConfigError("--ranks " + std::to_string(g.ranks) + ": send_recv runs between 2 ranks; valid: 2");
  }
  const Bytes lo = number("min-bytes", 8, 1, std::int64_t{1} << 40);
  const Bytes hi = number("max-bytes", std::int64_t{1} << 30, lo, std::int64_t{1} << 40);
  const auto prof = o.get("profile");
  if (!prof) {
    const sim::AnalyticCommModel model(cluster);
    const auto rows = sim::comm_sweep(model, op, g, lo, hi);
    std::cout << (o.flag("json") ? sim::comm_to_json(cluster.name, op, g, rows)
                                 : sim::format_comm_table(cluster.name, op, g, rows));
    return 0;
  }
  // --profile: as predict prices a collective (Note [Profile lookups]).
  if (prof->empty()) throw ConfigError("--profile: missing file name");
  const auto costs = std::make_shared<const sim::ProfileCosts>(sim::load_profile(*prof));
  if (const auto w = sim::profile_device_mismatch(costs->profile(), cluster.device); !w.empty()) {
    std::cerr << "dtsim comm: warning: " << w << "\n";
  }
  sim::CostSources sources;
  const sim::ProfileCommModel model(costs, cluster, &sources);
  const auto rows = sim::comm_sweep(model, op, g, lo, hi);
  const std::string source = "profile " + *prof + ": " + comm_source(costs->profile(), op, g, sources);
  std::cout << (o.flag("json") ? sim::comm_to_json(cluster.name, op, g, rows, source)
                               : sim::format_comm_table(cluster.name, op, g, rows, source));
  return 0;
}

int cmd_list(const Args& args) {
  const Options o = parse(args, "list", {}, {"json"});
  const std::vector<std::string> kinds{"models", "clusters", "plans", "devices"};
  if (o.positional.size() != 1 || std::find(kinds.begin(), kinds.end(), o.positional[0]) == kinds.end()) {
    const std::string got = o.positional.empty() ? std::string("nothing") : "'" + o.positional[0] + "'";
    const std::string hint = o.positional.empty() ? "" : sim::did_you_mean(o.positional[0], kinds);
    throw ConfigError("dtsim list: expected one of models, clusters, plans, devices, got " + got +
                      (hint.empty() ? "" : " (did you mean '" + hint + "'?)"));
  }
  const std::string kind = o.positional[0];
  std::vector<std::pair<std::string, std::string>> rows;
  if (kind == "models") {
    for (const auto& n : models::builtin_names()) rows.emplace_back(n, models::describe_builtin(n));
    for (const auto& n : sim::list_configs("models")) rows.emplace_back(sim::config_dir() + "/models/" + n + ".yaml", "YAML model");
  } else if (kind == "devices") {
    for (const auto& d : sim::builtin_devices()) {
      char buf[160];
      std::snprintf(buf, sizeof buf, "%.1f GiB, %.1f TFLOP/s fp16, %.1f TFLOP/s fp32, %.0f GB/s", static_cast<double>(d.memory) / kGiB,
                    d.peak_fp16 / kTera, d.peak_fp32 / kTera, d.memory_bandwidth / kGiga);
      std::string desc = buf;
      if (d.peak_fp8 > 0) {
        std::snprintf(buf, sizeof buf, ", %.1f TFLOP/s fp8", d.peak_fp8 / kTera);
        desc += buf;
      }
      rows.emplace_back(d.name, desc);
    }
  } else {
    for (const auto& n : sim::list_configs(kind)) {
      std::string desc;
      try {
        const auto node = sim::load_yaml_file(sim::find_config(kind, n));
        if (node["description"]) desc = node["description"].as<std::string>();
      } catch (const std::exception&) {
        desc = "(unreadable)";
      }
      rows.emplace_back(n, desc);
    }
  }
  if (o.flag("json")) {
    sim::JsonWriter j;
    j.begin_array();
    for (const auto& [n, d] : rows) j.begin_object().field("name", n).field("description", d).end_object();
    j.end_array();
    std::cout << j.str() << "\n";
  } else {
    std::size_t w = 0;
    for (const auto& r : rows) w = std::max(w, r.first.size());
    for (const auto& [n, d] : rows) std::cout << n << std::string(w + 2 - n.size(), ' ') << d << "\n";
  }
  return 0;
}

namespace {

int parse_count(const Options& o, const std::string& key, int fallback) {
  const auto v = o.get(key);
  if (!v) return fallback;
  try {
    std::size_t used = 0;
    const int n = std::stoi(*v, &used);
    if (used == v->size()) return n;
  } catch (const std::exception&) {
  }
  throw ConfigError("--" + key + ": '" + *v + "' is not a whole number");
}

}  // namespace

int cmd_calibrate(const Args& args, const std::string& command_line) {
  const Options o = parse(args, "calibrate", {"device", "out", "procs", "threads", "models", "bin-dir"}, {"quick"});
  if (!o.positional.empty()) throw ConfigError("dtsim calibrate: unexpected argument '" + o.positional.front() + "'");
  calib::CalibrateOptions c;
  c.device = o.get("device").value_or("cpu");
  c.out = require(o, "out", "calibrate", "e.g. --out configs/profiles/local-cpu.h5");
  c.procs = parse_count(o, "procs", c.device == "cpu" ? 2 : 1);
  c.threads = parse_count(o, "threads", 1);
  c.quick = o.flag("quick");
  c.bin_dir = o.get("bin-dir").value_or("");
  c.command_line = command_line;
  if (const auto m = o.get("models")) {
    std::string cur;
    for (char ch : *m + ",") {
      if (ch == ',') {
        if (!cur.empty()) c.models.push_back(cur);
        cur.clear();
      } else {
        cur += ch;
      }
    }
    for (const auto& name : c.models) models::load_model(name);  // a bad name fails now, not after minutes
  }
  const sim::Profile p = calib::calibrate(c);
  std::cout << calib::format_profile(p);
  return 0;
}

int cmd_profile(const Args& args) {
  const Options o = parse(args, "profile", {}, {"json"});
  const std::string usage = "dtsim profile: usage: dtsim profile show FILE.h5 [--json] | dtsim profile upgrade FILE.h5";
  if (o.positional.size() != 2 || (o.positional[0] != "show" && o.positional[0] != "upgrade")) throw ConfigError(usage);
  const sim::Profile p = sim::load_profile(o.positional[1]);
  if (o.positional[0] == "upgrade") {
    // Rewritten in this dtsim's format, with its checksum (Note [Profile
    // integrity] in sim/src/profile/profile_io.cpp); atomically, so the old
    // file stays whole if anything fails.
    if (o.flag("json")) throw ConfigError(usage);
    sim::save_profile(p, o.positional[1]);
    std::cout << o.positional[1] << ": format " << sim::Profile::kFormatVersion << ", checksum crc64-xz"
              << (p.integrity == "none" ? " (was format 1, unchecked)" : " (was already)") << "\n";
    return 0;
  }
  std::cout << (o.flag("json") ? calib::profile_to_json(p) : calib::format_profile(p));
  return 0;
}

}  // namespace dtsim::cli
