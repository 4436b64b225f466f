#include "commands.hpp"

#include <CLI/CLI.hpp>
#include <fmt/format.h>

#include <algorithm>
#include <functional>
#include <iostream>
#include <map>
#include <cstdio>
#include <optional>

#include "dtsim/calibrate/calibrate.hpp"
#include "dtsim/calibrate/import.hpp"
#include "dtsim/cli/parse.hpp"
#include "dtsim/cli/scenario_options.hpp"
#include "dtsim/models/models.hpp"
#include "dtsim/platform/process.hpp"
#include "dtsim/sim/config_io.hpp"
#include "dtsim/sim/cost.hpp"
#include "dtsim/sim/cost_profile.hpp"
#include "dtsim/sim/error.hpp"
#include "dtsim/sim/file_io.hpp"
#include "dtsim/sim/framework_config.hpp"
#include "dtsim/sim/json_writer.hpp"
#include "dtsim/sim/predict.hpp"
#include "dtsim/sim/profile.hpp"
#include "dtsim/sim/report.hpp"
#include "dtsim/sim/search.hpp"

#include <chrono>
#include <unistd.h>

namespace dtsim::cli {
namespace {

/// A subcommand's options once parsed: the scenario, the values given (by
/// long name, without "--"), the flags given and the positional arguments.
struct Options {
  ScenarioOptions scenario;
  std::map<std::string, std::string> values;
  std::map<std::string, bool> flags;
  std::vector<std::string> positional;
  const CLI::App* app = nullptr;
  bool flag(const std::string& f) const {
    auto it = flags.find(f);
    return it != flags.end() && it->second;
  }
  /// The value of --key if it was given ("" included).
  std::optional<std::string> get(const std::string& k) const {
    // A subcommand without --k (import-layers has no --cluster) was not given it.
    if (app->get_option_no_throw("--" + k) == nullptr || app->count("--" + k) == 0) return std::nullopt;
    auto it = values.find(k);
    if (it != values.end()) return it->second;
    // A scenario option.
    if (k == "model") return scenario.model;
    if (k == "cluster") return scenario.cluster;
    if (k == "plan") return scenario.plan;
    if (k == "profile") return scenario.profile;
    return std::nullopt;
  }
};

/// Declares a subcommand with the house settings (dtsim/cli/parse.hpp).
CLI::App* subcommand(CLI::App& root, const std::string& name, const std::string& description) {
  CLI::App* app = root.add_subcommand(name, description);
  house_style(*app);
  return app;
}

/// Declares --NAME VALUE bound into `o`.
CLI::Option* value(CLI::App* app, Options& o, const std::string& name, const std::string& type, const std::string& help) {
  return app->add_option("--" + name, o.values[name], help)->type_name(type);
}

/// Declares the flag --NAME bound into `o`.
CLI::Option* flag(CLI::App* app, Options& o, const std::string& name, const std::string& help) {
  return app->add_flag("--" + name, o.flags[name], help);
}

std::shared_ptr<Options> options_of(CLI::App* app) {
  auto o = std::make_shared<Options>();
  o->app = app;
  return o;
}

std::vector<sim::Override> overrides(const Options& o) { return o.scenario.overrides(); }

std::string require(const Options& o, const std::string& key, const std::string& command, const std::string& hint) {
  auto v = o.get(key);
  if (!v || v->empty()) throw ConfigError("dtsim " + command + ": --" + key + " is required; " + hint);
  return *v;
}

}  // namespace

int run_predict(const Options& o);
int run_search(const Options& o);
int run_comm(const Options& o);
int run_list(const Options& o);
int run_calibrate(const Options& o, const std::string& command_line);

Command add_predict(CLI::App& root) {
  CLI::App* app = subcommand(root, "predict", "Predict one plan's iteration time, throughput, MFU and per-GPU peak memory");
  auto o = options_of(app);
  add_scenario_options(*app, o->scenario, kScenario | kFramework);
  flag(app, *o, "json", "Print the prediction as JSON");
  value(app, *o, "trace", "FILE", "Write the simulated timeline as Chrome Trace Event JSON (open it in ui.perfetto.dev)");
  flag(app, *o, "unabridged", "Simulate every micro-batch of a long pipeline, not its steady state once (same results)");
  app->footer(
      "\n--plan defaults to ddp. Examples:\n"
      "  dtsim predict --model gpt2-xl --cluster dgx-a100 --plan zero2\n"
      "  dtsim predict --model gpt2 --cluster dgx-a100 --set plan.micro_batch=32 --set cluster.nodes=4 --json\n"
      "  dtsim predict --model gpt2 --cluster 1x2080ti --profile configs/profiles/my.h5\n"
      "  dtsim predict --model llama-3-8b --cluster dgx-h100 --deepspeed configs/frameworks/deepspeed/zero3.json\n"
      "  dtsim predict --cluster dgx-a100 --set cluster.nodes=64 --megatron-args configs/frameworks/megatron/gpt3-175b.sh");
  return {app, [o] { return run_predict(*o); }};
}

int run_predict(const Options& o) {
  const std::string cluster_name = require(o, "cluster", "predict", "e.g. --cluster dgx-a100 (see dtsim list clusters)");
  const ResolvedScenario rs = resolve_scenario(o.scenario, "ddp");
  if (rs.model.empty()) {
    // A framework config that names a model dtsim lacks says which (its warning).
    throw ConfigError("dtsim predict: --model is required; e.g. --model gpt2 (see dtsim list models)" +
                      (rs.warning.empty() ? std::string() : "; " + rs.warning));
  }
  const auto& ov = rs.overrides;
  const std::string& model_name = rs.model;
  const std::string& plan_name = rs.plan;
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
  platform::prepare_simulator_heap();  // Note [Freed memory stays], Note [Huge pages]
  const sim::Prediction p = sim::predict(*model, plan, cluster, po);
  // Bad input is one line: the warning only once the plan has resolved.
  if (!rs.warning.empty()) std::cerr << "dtsim predict: warning: " << rs.warning << "\n";
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

Command add_search(CLI::App& root) {
  CLI::App* app = subcommand(root, "search", "Rank every valid plan of a model on a cluster by iteration time, with the Pareto front");
  auto o = options_of(app);
  add_scenario_options(*app, o->scenario, kModel | kCluster | kProfile | kSet | kFramework);
  value(app, *o, "gpus", "N", "Use N of the cluster's GPUs (default: all)");
  value(app, *o, "global-batch", "B", "Samples per iteration (default: 4 a GPU; at most 16,384 a GPU)");
  value(app, *o, "top", "K", "Show the K fastest plans (default 10)");
  value(app, *o, "threads", "T", "Simulate on T threads (default: every core)");
  flag(app, *o, "json", "Print the ranking as JSON");
  flag(app, *o, "csv", "Print the ranking as CSV");
  app->footer(
      "\n--set plan.KEY=VALUE fixes a knob (e.g. plan.precision=bf16, plan.tp=2); the search walks the others.\n"
      "A framework's config (--megatron-bridge, --megatron-args, --deepspeed, --torchtitan, --torchtune, --axolotl,\n"
      "--llamafactory, --trl, --nanotron, --accelerate) gives the model, the batch, the sequence and the numerics (and what its\n"
      "framework cannot change: pp 1 for axolotl, LLaMA-Factory, TRL and torchtune), and its plan is ranked beside the search's.\n"
      "Examples:\n  dtsim search --model gpt2-xl --cluster dgx-a100 --global-batch 512 --top 5\n"
      "  dtsim search --cluster dgx-h100 --megatron-bridge configs/frameworks/megatron-bridge/llama3_8b_run_config.yaml");
  return {app, [o] { return run_search(*o); }};
}

int run_search(const Options& o) {
  if (o.flag("json") && o.flag("csv")) throw ConfigError("dtsim search: --json and --csv exclude each other; pick one");
  const ResolvedScenario rs = resolve_scenario(o.scenario, "ddp");
  const bool framework = !rs.framework.empty();
  if (rs.model.empty()) {
    throw ConfigError("dtsim search: --model is required; e.g. --model gpt2-xl (see dtsim list models)" +
                      (rs.warning.empty() ? std::string() : "; " + rs.warning));
  }
  const std::string cluster_name = require(o, "cluster", "search", "e.g. --cluster dgx-a100 (see dtsim list clusters)");
  const auto& ov = rs.overrides;
  const sim::ModelPtr model = models::load_model(rs.model, ov);
  const sim::ClusterSpec cluster = sim::load_cluster(cluster_name, ov);
  sim::SearchOptions so;
  // Fixed knobs: --set plan.precision=bf16 and the like, over the search's
  // defaults (the Python package asks the same function); from a
  // framework's config, its numerics (Note [Search from a framework
  // config] in sim/src/config/framework_config.cpp).
  so.base = sim::search_base_plan(cluster, framework ? sim::search_fixed_overrides(ov, ov.size() - rs.framework_overrides, rs.search_fixed) : ov);
  if (framework) {
    so.hold = rs.search_fixed;
    so.compare = sim::load_plan(rs.plan, ov);
    so.compare_name = rs.framework;
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
  platform::prepare_simulator_heap();  // Note [Freed memory stays], Note [Huge pages]
  const sim::SearchResult r = sim::search(*model, cluster, so);
  if (!rs.warning.empty()) std::cerr << "dtsim search: warning: " << rs.warning << "\n";
  if (o.flag("json")) {
    std::cout << sim::search_to_json(r);
  } else if (o.flag("csv")) {
    std::cout << sim::search_to_csv(r);
  } else {
    std::cout << sim::format_search(r);
  }
  return 0;
}

Command add_comm(CLI::App& root) {
  CLI::App* app = subcommand(root, "comm", "Predict a collective's time, algbw and busbw over a sweep of sizes (as nccl-tests prints)");
  auto o = options_of(app);
  add_scenario_options(*app, o->scenario, kCluster | kProfile | kSet);
  value(app, *o, "op", "OP", "all_reduce (default), reduce_scatter, all_gather, broadcast, send_recv (over N > 2 ranks: a ring step, as context "
        "parallelism's), all_to_all");
  value(app, *o, "ranks", "N", "Ranks taking part (default: every GPU of the cluster)");
  value(app, *o, "ranks-per-node", "K", "Of them on each node (default: as many as fit)");
  value(app, *o, "min-bytes", "B", "Smallest size (default 8)");
  value(app, *o, "max-bytes", "B", "Largest size (default 1 GiB)");
  flag(app, *o, "json", "Print the table as JSON");
  app->footer("\n--profile FILE.h5 prices from a calibration's fits and says which.\n"
              "Example:\n  dtsim comm --cluster dgx-a100 --op all_gather --ranks 16\n"
              "  dtsim comm --cluster dgx-h100 --op send_recv --ranks 8   (a cp=8 ring step)");
  return {app, [o] { return run_comm(*o); }};
}

int run_comm(const Options& o) {
  const auto ov = overrides(o);
  // A collective is priced on a cluster alone: a model's or a plan's key
  // would be ignored without a word.
  for (const auto& x : ov) {
    if (x.section != "cluster") {
      throw ConfigError("--set " + x.section + "." + x.path + "=" + x.value +
                        ": comm prices collectives on a cluster; only cluster keys apply (e.g. --set cluster.nodes=4)");
    }
  }
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
  if (const std::string e = sim::comm_group_error(op, g, cluster); !e.empty()) {
    throw ConfigError("--ranks " + std::to_string(g.ranks) + ": " + e);
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
  const std::string source = "profile " + *prof + ": " + sim::comm_cost_source(costs->profile(), op, g, sources);
  std::cout << (o.flag("json") ? sim::comm_to_json(cluster.name, op, g, rows, source)
                               : sim::format_comm_table(cluster.name, op, g, rows, source));
  return 0;
}

Command add_list(CLI::App& root) {
  CLI::App* app = subcommand(root, "list", "List the built-in and shipped models, clusters, plans or devices");
  auto o = options_of(app);
  app->add_option("KIND", o->values["kind"], "models, clusters, plans or devices")->type_name("KIND");
  flag(app, *o, "json", "Print the list as JSON");
  return {app, [o] {
            if (o->app->count("KIND") > 0) o->positional.push_back(o->values["kind"]);
            return run_list(*o);
          }};
}

int run_list(const Options& o) {
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
      std::string desc = fmt::format("{:.1f} GiB, {:.1f} TFLOP/s fp16, {:.1f} TFLOP/s fp32, {:.0f} GB/s", static_cast<double>(d.memory) / kGiB,
                                     d.peak_fp16 / kTera, d.peak_fp32 / kTera, d.memory_bandwidth / kGiga);
      if (d.peak_fp8 > 0) desc += fmt::format(", {:.1f} TFLOP/s fp8", d.peak_fp8 / kTera);
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
    std::cout << sim::list_to_json(kind, rows);
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

Command add_calibrate(CLI::App& root, const std::string& command_line) {
  CLI::App* app = subcommand(root, "calibrate", "Measure this machine's layers, kernels and collectives and write an HDF5 profile");
  auto o = options_of(app);
  value(app, *o, "device", "cpu|cuda", "Measure on the CPU (default) or the GPUs");
  value(app, *o, "out", "FILE.h5", "Write the profile here (required)");
  value(app, *o, "procs", "N", "Processes for the collectives (default 2 on cpu, 1 on cuda)");
  value(app, *o, "threads", "T", "Threads per process (default 1)");
  value(app, *o, "models", "a,b", "Also measure these models' layers (e.g. moe-tiny)");
  value(app, *o, "bin-dir", "DIR", "Where the measurement programs are (default: beside dtsim)");
  flag(app, *o, "quick", "Fewer sizes and repetitions: about a minute");
  value(app, *o, "time-limit", "S", "Stop measuring after S seconds and write what was measured (a GPU keeps each layer done)");
  value(app, *o, "python", "PATH", "The Python whose training loop's host cost to time (default python3, else /usr/bin/python3 where the first lacks torch; none skips)");
  app->footer("\nExample:\n  dtsim calibrate --device cpu --out configs/profiles/local-cpu.h5 --quick");
  return {app, [o, command_line] { return run_calibrate(*o, command_line); }};
}

int run_calibrate(const Options& o, const std::string& command_line) {
  calib::CalibrateOptions c;
  c.device = o.get("device").value_or("cpu");
  c.out = require(o, "out", "calibrate", "e.g. --out configs/profiles/local-cpu.h5");
  c.procs = parse_count(o, "procs", c.device == "cpu" ? 2 : 1);
  c.threads = parse_count(o, "threads", 1);
  c.quick = o.flag("quick");
  c.bin_dir = o.get("bin-dir").value_or("");
  c.python = o.get("python").value_or("python3");
  c.python_fallback = !o.get("python");  // Note [Debian's Python]
  if (c.python.empty()) throw ConfigError("--python: empty; name a Python (e.g. --python /usr/bin/python3) or none");
  if (const auto t = o.get("time-limit")) {
    std::size_t used = 0;
    double s = -1;
    try {
      s = std::stod(*t, &used);
    } catch (const std::exception&) {
      used = 0;
    }
    if (used != t->size() || !(s > 0) || s > 30 * 86400.0) {
      throw ConfigError("--time-limit: '" + *t + "' is not a number of seconds in (0, 2592000]; e.g. --time-limit 600");
    }
    c.time_limit_s = s;
  }
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

namespace {

/// The FILE a `profile` subcommand was given.
std::string profile_file(const Options& o) {
  const auto it = o.values.find("file");
  if (o.app->count("FILE") == 0 || it == o.values.end() || it->second.empty()) {
    throw ConfigError("dtsim profile " + o.app->get_name() + ": FILE.h5 is required; usage: dtsim profile " + o.app->get_name() +
                      " FILE.h5 (see dtsim profile --help)");
  }
  return it->second;
}

int run_profile_show(const Options& o) {
  const sim::Profile p = sim::load_profile(profile_file(o));
  std::cout << (o.flag("json") ? calib::profile_to_json(p) : calib::format_profile(p));
  return 0;
}

int run_profile_upgrade(const Options& o) {
  // Rewritten in this dtsim's format, with its checksum (Note [Profile
  // integrity] in sim/src/profile/profile_io.cpp); atomically, so the old
  // file stays whole if anything fails.
  const std::string file = profile_file(o);
  const sim::Profile p = sim::load_profile(file);
  sim::save_profile(p, file);
  std::cout << file << ": format " << sim::Profile::kFormatVersion << ", checksum crc64-xz"
            << (p.integrity == "none" ? " (was format 1, unchecked)" : " (was already)") << "\n";
  return 0;
}

/// The options of an import (Note [Profile subcommands]): --out, --into,
/// --cluster, --in-place, and the command line as provenance.
calib::ImportOptions import_options(const Options& o, const std::string& sub, const std::vector<std::string>& inputs) {
  calib::ImportOptions io;
  io.out = o.get("out").value_or("");
  if (io.out.empty()) {
    throw ConfigError("dtsim profile " + sub + ": --out FILE.h5 is required (the profile to write; --into EXISTING.h5 merges into one)");
  }
  io.into = o.get("into").value_or("");
  io.cluster = o.get("cluster").value_or("");
  io.in_place = o.flag("in-place");
  io.command_line = "dtsim profile " + sub;
  for (const auto& i : inputs) io.command_line += " " + i;
  for (const char* k : {"out", "into", "cluster"}) {
    if (const auto v = o.get(k)) io.command_line += std::string(" --") + k + " " + *v;
  }
  if (io.in_place) io.command_line += " --in-place";
  return io;
}

int run_import_nccl_tests(const Options& o) {
  if (o.positional.empty()) {
    throw ConfigError("dtsim profile import-nccl-tests: LOG is required; usage: dtsim profile import-nccl-tests LOG... --out FILE.h5");
  }
  std::cout << calib::import_nccl_tests_command(o.positional, import_options(o, "import-nccl-tests", o.positional));
  return 0;
}

int run_import_layers(const Options& o) {
  if (o.positional.size() != 1) {
    throw ConfigError("dtsim profile import-layers: one OLDER.h5 is required; usage: dtsim profile import-layers OLDER.h5 --into NEWER.h5 --out FILE.h5");
  }
  std::cout << calib::import_layers_command(o.positional.front(), import_options(o, "import-layers", o.positional));
  return 0;
}

int run_import_python_host(const Options& o) {
  if (o.positional.size() != 1) {
    throw ConfigError("dtsim profile import-python-host: one OTHER.h5 is required; usage: dtsim profile import-python-host OTHER.h5 "
                      "--into PROFILE.h5 --out FILE.h5");
  }
  std::cout << calib::import_python_host_command(o.positional.front(), import_options(o, "import-python-host", o.positional));
  return 0;
}

int run_import_interference(const Options& o) {
  if (o.positional.size() != 1) {
    throw ConfigError("dtsim profile import-interference: one BENCH.txt is required; usage: dtsim profile import-interference "
                      "BENCH.txt --out FILE.h5 [--into EXISTING.h5]");
  }
  std::cout << calib::import_interference_command(o.positional.front(), import_options(o, "import-interference", o.positional));
  return 0;
}

int run_import_trace(const Options& o) {
  if (o.positional.size() != 1) {
    throw ConfigError("dtsim profile import-trace: one TRACE.json is required; usage: dtsim profile import-trace TRACE.json --out FILE.h5");
  }
  std::cout << calib::import_trace_command(o.positional.front(), import_options(o, "import-trace", o.positional));
  return 0;
}

}  // namespace

Command add_profile(CLI::App& root) {
  CLI::App* app = subcommand(root, "profile", "Show, upgrade or import (nccl-tests logs, profiler traces, an earlier calibration's layers) a calibration profile");
  app->require_subcommand(0, 1);
  // Note [Profile subcommands]: one entry each; a new one (import-nccl-tests
  // LOG..., import-trace TRACE.json) is another entry and its run function.
  struct Sub {
    CLI::App* app;
    std::shared_ptr<Options> options;
    std::function<int(const Options&)> run;
  };
  auto subs = std::make_shared<std::vector<Sub>>();
  {
    CLI::App* show = subcommand(*app, "show", "Provenance, measured ranges, every fit with its error, best GEMM / copy / bus bandwidth");
    auto o = options_of(show);
    show->add_option("FILE", o->values["file"], "The profile")->type_name("FILE.h5");
    flag(show, *o, "json", "Print it as JSON");
    subs->push_back({show, o, run_profile_show});
  }
  {
    CLI::App* up = subcommand(*app, "upgrade", "Rewrite a format-1 profile in this dtsim's format, with its checksum");
    auto o = options_of(up);
    up->add_option("FILE", o->values["file"], "The profile, rewritten in place")->type_name("FILE.h5");
    subs->push_back({up, o, run_profile_upgrade});
  }
  // The user's cluster's own measurements (calibrate/import.hpp).
  auto import_sub = [&](const std::string& name, const std::string& description, const std::string& input,
                        const std::string& input_help, bool many, std::function<int(const Options&)> run, bool cluster = true) {
    CLI::App* sub = subcommand(*app, name, description);
    auto o = options_of(sub);
    auto* in = sub->add_option(input, o->positional, input_help)->type_name(input);
    if (!many) in->expected(1);
    value(sub, *o, "out", "FILE.h5", "The profile to write (atomically)");
    value(sub, *o, "into", "EXISTING.h5", "Merge into this profile, keeping its other entries");
    if (cluster) value(sub, *o, "cluster", "C", "Check the runs against this cluster and price what was imported on it");
    if (name == "import-nccl-tests") flag(sub, *o, "in-place", "Read nccl-tests' in-place columns (default: out-of-place)");
    subs->push_back({sub, o, std::move(run)});
  };
  import_sub("import-nccl-tests", "Fit a profile's collectives from nccl-tests logs (all_reduce_perf, alltoall_perf, ...)", "LOG",
             "nccl-tests' text output, one run a file", true, run_import_nccl_tests);
  import_sub("import-trace", "Price the kernels of a PyTorch profiler (Kineto) trace of a training step into a profile",
             "TRACE.json", "torch.profiler's export_chrome_trace output", false, run_import_trace);
  import_sub("import-layers", "Add the layers an earlier calibration of the same device measured and --into's lacks",
             "OLDER.h5", "the earlier calibration's profile", false, run_import_layers, false);
  import_sub("import-python-host", "Take the Python loop's host cost another calibration of the same machine timed into a profile",
             "OTHER.h5", "the calibration whose Python host probes to take", false, run_import_python_host, false);
  import_sub("import-interference", "Take compute-beside-collectives measurements dtsim_interference_bench printed into a profile",
             "BENCH.txt", "dtsim_interference_bench's output (scripts/gpu-probes' interference.txt)", false, run_import_interference,
             false);
  return {app, [app, subs] {
            for (const Sub& s : *subs) {
              if (s.app->parsed()) return s.run(*s.options);
            }
            std::string valid;
            for (const Sub& s : *subs) valid += (valid.empty() ? "" : ", ") + s.app->get_name();
            throw ConfigError("dtsim profile: a command is required; valid: " + valid + " (usage: dtsim profile show FILE.h5 [--json] | upgrade FILE.h5 | import-nccl-tests LOG... --out F.h5 | import-trace TRACE.json --out F.h5 | import-layers OLDER.h5 --into NEWER.h5 --out F.h5 | import-python-host OTHER.h5 --into P.h5 --out F.h5 | import-interference BENCH.txt --out F.h5)");
          }};
}

}  // namespace dtsim::cli
