// dtsim._core: the C++ half of the Python module dtsim (python/dtsim/ is the
// other). Each entry point loads its inputs as the CLI does and returns the
// very JSON text `dtsim predict|search|comm|profile show --json` prints, from
// the same to_json functions, so the two front ends cannot diverge; the
// Python half parses it. Inputs are a name or path, or inline JSON text
// (a Python dict the package serialised), flagged by *_inline.

#include <pybind11/pybind11.h>
#include <pybind11/stl.h>

#include <algorithm>
#include <cstdint>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "dtsim/calibrate/calibrate.hpp"
#include "dtsim/models/models.hpp"
#include "dtsim/sim/config_io.hpp"
#include "dtsim/sim/cost.hpp"
#include "dtsim/sim/cost_profile.hpp"
#include "dtsim/sim/error.hpp"
#include "dtsim/sim/framework_config.hpp"
#include "dtsim/sim/predict.hpp"
#include "dtsim/sim/profile.hpp"
#include "dtsim/sim/report.hpp"
#include "dtsim/sim/search.hpp"
#include "dtsim/sim/version.hpp"

namespace py = pybind11;

namespace dtsim::python {
namespace {

/// A model, cluster or plan as the caller gave it: a name or path, or
/// inline JSON text.
struct Source {
  std::string text;
  bool is_inline = false;
};

std::vector<sim::Override> overrides(const std::vector<std::string>& sets) {
  std::vector<sim::Override> out;
  out.reserve(sets.size());
  for (const auto& s : sets) out.push_back(sim::parse_override(s));
  return out;
}

sim::ModelPtr load_model(const Source& s, const std::vector<sim::Override>& ov) {
  return s.is_inline ? models::parse_model(s.text, "<model dict>", true, ov) : models::load_model(s.text, ov);
}

sim::ClusterSpec load_cluster(const Source& s, const std::vector<sim::Override>& ov) {
  return s.is_inline ? sim::parse_cluster(s.text, "<cluster dict>", ov) : sim::load_cluster(s.text, ov);
}

sim::PlanSpec load_plan(const Source& s, const std::vector<sim::Override>& ov) {
  return s.is_inline ? sim::parse_plan(s.text, "<plan dict>", ov) : sim::load_plan(s.text, ov);
}

std::shared_ptr<const sim::ProfileCosts> load_costs(const std::string& profile) {
  if (profile.empty()) return nullptr;
  return std::make_shared<const sim::ProfileCosts>(sim::load_profile(profile));
}

/// `dtsim predict --json`, and the warning line of what a framework's
/// config sets that dtsim does not model ("" if none). framework_kind:
/// "" or deepspeed, megatron, megatron-bridge, torchtitan, torchtune, axolotl, llamafactory (with
/// framework_source its file, or Megatron's flags), folded in as the CLI's
/// --deepspeed, --megatron-args, --megatron-bridge, --torchtitan, --torchtune, --axolotl and --llamafactory are,
/// with `accelerate` (an accelerate config's path, or "") as --accelerate is
/// (Note [Framework options]); an
/// empty model or plan text: none given.
std::pair<std::string, std::string> predict_json(const Source& model, const Source& cluster, const Source& plan,
                                                 const std::vector<std::string>& sets, const std::string& profile,
                                                 bool unabridged, const std::string& framework_kind,
                                                 const std::string& framework_source, const std::string& accelerate) {
  std::vector<sim::Override> ov = overrides(sets);
  Source model_source = model, plan_source = plan;
  std::string warning;
  if (!framework_kind.empty() || !accelerate.empty()) {
    const char* option = framework_kind == "megatron"          ? "megatron_args"
                         : framework_kind == "megatron-bridge" ? "megatron_bridge"
                         : framework_kind == "deepspeed"       ? "deepspeed"
                         : framework_kind == "torchtune"       ? "torchtune"
                         : framework_kind == "axolotl"         ? "axolotl"
                         : framework_kind == "llamafactory"    ? "llamafactory"
                         : framework_kind == "trl"             ? "trl"
                         : framework_kind == "nanotron"        ? "nanotron"
                         : framework_kind.empty()              ? "accelerate"
                                                               : "torchtitan";
    if (!plan.text.empty()) {
      throw ConfigError(std::string("plan and ") + option + " both describe the plan; give one (change single keys with set)");
    }
    const sim::FrameworkConfig fc = sim::read_framework_config(framework_kind, framework_source, accelerate);
    sim::FrameworkScenario f = sim::apply_framework_config(fc, model.is_inline ? std::string("<model dict>") : model.text, ov);
    if (model.text.empty()) model_source = Source{f.model, false};
    plan_source = Source{f.plan.empty() ? std::string("ddp") : f.plan, false};
    ov = std::move(f.overrides);
    warning = std::move(f.warning);
  } else if (plan.text.empty()) {
    plan_source = Source{"ddp", false};
  }
  if (model_source.text.empty()) throw ConfigError("model: none given; give a built-in name, a file path or a dict");
  const sim::ModelPtr m = load_model(model_source, ov);
  const sim::ClusterSpec c = load_cluster(cluster, ov);
  const sim::PlanSpec p = load_plan(plan_source, ov);
  sim::PredictOptions po;
  po.unabridged = unabridged;
  po.profile = load_costs(profile);
  py::gil_scoped_release unlocked;
  return {sim::to_json(sim::predict(*m, p, c, po)), warning};
}

/// `dtsim search --json`, and the framework config's warning line; 0 for
/// gpus, global_batch and threads: the CLI's defaults. framework_kind as
/// predict_json's: its model, numerics and batch, its plan ranked beside
/// the search's (Note [Search from a framework config]).
std::pair<std::string, std::string> search_json(const Source& model, const Source& cluster, const std::vector<std::string>& sets,
                                                std::int64_t gpus, std::int64_t global_batch, std::int64_t top,
                                                std::int64_t threads, const std::string& profile,
                                                const std::string& framework_kind, const std::string& framework_source,
                                                const std::string& accelerate) {
  std::vector<sim::Override> ov = overrides(sets);
  const std::size_t user_count = ov.size();
  Source model_source = model;
  std::string warning, compare_plan, compare_name;
  std::vector<std::string> search_fixed;
  if (!framework_kind.empty() || !accelerate.empty()) {
    const sim::FrameworkConfig fc = sim::read_framework_config(framework_kind, framework_source, accelerate);
    sim::FrameworkScenario f = sim::apply_framework_config(fc, model.is_inline ? std::string("<model dict>") : model.text, ov);
    if (model.text.empty()) model_source = Source{f.model, false};
    compare_plan = f.plan.empty() ? std::string("ddp") : f.plan;
    compare_name = fc.file + " (" + fc.framework + ")";
    ov = std::move(f.overrides);
    warning = std::move(f.warning);
    search_fixed = std::move(f.search_fixed);
  }
  if (model_source.text.empty()) throw ConfigError("model: none given; give a built-in name, a file path or a dict");
  const sim::ModelPtr m = load_model(model_source, ov);
  const sim::ClusterSpec c = load_cluster(cluster, ov);
  auto check = [](const char* key, std::int64_t v, std::int64_t lo, std::int64_t hi) {
    if (v < lo || v > hi) {
      throw ConfigError(std::string(key) + "=" + std::to_string(v) + ": expected an integer from " + std::to_string(lo) +
                        " to " + std::to_string(hi));
    }
  };
  sim::SearchOptions so;
  const bool framework = !framework_kind.empty() || !accelerate.empty();
  so.base = sim::search_base_plan(c, framework ? sim::search_fixed_overrides(ov, user_count, search_fixed) : ov);
  if (framework) {
    so.hold = search_fixed;
    so.compare = sim::load_plan(compare_plan, ov);
    so.compare_name = compare_name;
  }
  if (gpus != 0) check("gpus", gpus, 1, 1 << 24);
  if (global_batch != 0) check("global_batch", global_batch, 1, std::int64_t{1} << 40);
  check("top", top, 1, 1 << 20);
  if (threads != 0) check("threads", threads, 1, 1024);
  so.gpus = static_cast<int>(gpus);
  so.global_batch = global_batch;
  so.top = static_cast<int>(top);
  so.threads = static_cast<int>(threads);
  so.profile = load_costs(profile);
  py::gil_scoped_release unlocked;
  return {sim::search_to_json(sim::search(*m, c, so)), warning};
}

/// `dtsim comm --json` (datasheet links, or `profile`'s fits where it has
/// any); -1 for ranks and ranks_per_node: the CLI's defaults (the whole
/// cluster, a node's worth).
std::string comm_json(const Source& cluster, const std::string& op_name, std::int64_t ranks, std::int64_t ranks_per_node,
                      std::int64_t min_bytes, std::int64_t max_bytes, const std::vector<std::string>& sets,
                      const std::string& profile) {
  const sim::ClusterSpec c = load_cluster(cluster, overrides(sets));
  sim::CollectiveOp op = sim::CollectiveOp::kAllReduce;
  if (!sim::parse_collective(op_name, &op)) {
    const std::vector<std::string> ops{"all_reduce", "reduce_scatter", "all_gather", "broadcast", "send_recv", "all_to_all"};
    const std::string hint = sim::did_you_mean(op_name, ops);
    throw ConfigError("op=" + op_name + ": unknown collective" + (hint.empty() ? "" : " (did you mean '" + hint + "'?)") +
                      "; valid: all_reduce, reduce_scatter, all_gather, broadcast, send_recv, all_to_all");
  }
  auto check = [](const char* key, std::int64_t v, std::int64_t lo, std::int64_t hi) {
    if (v < lo || v > hi) {
      throw ConfigError(std::string(key) + "=" + std::to_string(v) + ": expected an integer from " + std::to_string(lo) +
                        " to " + std::to_string(hi));
    }
    return v;
  };
  sim::CommGroup g;
  g.ranks = static_cast<int>(ranks < 0 ? c.gpus() : check("ranks", ranks, 1, c.gpus()));
  g.ranks_per_node = static_cast<int>(ranks_per_node < 0 ? std::min(g.ranks, c.gpus_per_node)
                                                         : check("ranks_per_node", ranks_per_node, 1, c.gpus_per_node));
  if (g.ranks_per_node > g.ranks) g.ranks_per_node = g.ranks;
  if (const std::string e = sim::comm_group_error(op, g, c); !e.empty()) {
    throw ConfigError("ranks=" + std::to_string(g.ranks) + ": " + e);
  }
  const Bytes lo = check("min_bytes", min_bytes, 1, std::int64_t{1} << 40);
  const Bytes hi = check("max_bytes", max_bytes, lo, std::int64_t{1} << 40);
  if (profile.empty()) {
    const sim::AnalyticCommModel model(c);
    return sim::comm_to_json(c.name, op, g, sim::comm_sweep(model, op, g, lo, hi));
  }
  // As `dtsim comm --profile` prices (Note [Profile lookups]).
  const auto costs = load_costs(profile);
  sim::CostSources sources;
  const sim::ProfileCommModel model(costs, c, &sources);
  const auto rows = sim::comm_sweep(model, op, g, lo, hi);
  return sim::comm_to_json(c.name, op, g, rows, "profile " + profile + ": " + sim::comm_cost_source(costs->profile(), op, g, sources));
}

/// Built-in models (name, description), then the YAML models shipped in configs/.
std::vector<std::pair<std::string, std::string>> list_models() {
  std::vector<std::pair<std::string, std::string>> rows;
  for (const auto& n : models::builtin_names()) rows.emplace_back(n, models::describe_builtin(n));
  for (const auto& n : sim::list_configs("models")) rows.emplace_back(sim::config_dir() + "/models/" + n + ".yaml", "YAML model");
  return rows;
}

}  // namespace
}  // namespace dtsim::python

PYBIND11_MODULE(_core, m) {
  using namespace dtsim;
  using dtsim::python::Source;
  m.doc() = "dtsim's C++ core (use the package dtsim, not this module)";

  // Bad input is a ValueError carrying the CLI's one-line message; an
  // internal error (a bug) stays a RuntimeError.
  auto& config_error = py::register_exception<ConfigError>(m, "ConfigError", PyExc_ValueError);
  py::register_exception<IoError>(m, "IoError", config_error.ptr());
  py::register_exception<UnsupportedError>(m, "UnsupportedError", config_error.ptr());
  py::register_exception<CalibrationError>(m, "CalibrationError", config_error.ptr());

  py::class_<Source>(m, "Source")
      .def(py::init([](std::string text, bool is_inline) { return Source{std::move(text), is_inline}; }),
           py::arg("text"), py::arg("is_inline") = false);

  m.def("predict_json", &python::predict_json, py::arg("model"), py::arg("cluster"), py::arg("plan"), py::arg("sets"),
        py::arg("profile"), py::arg("unabridged"), py::arg("framework_kind"), py::arg("framework_source"), py::arg("accelerate") = "",
        "dtsim predict --json, and the framework config's warning line");
  m.def("search_json", &python::search_json, py::arg("model"), py::arg("cluster"), py::arg("sets"), py::arg("gpus"),
        py::arg("global_batch"), py::arg("top"), py::arg("threads"), py::arg("profile"), py::arg("framework_kind"),
        py::arg("framework_source"), py::arg("accelerate") = "", "dtsim search --json, and the framework config's warning line");
  m.def("comm_json", &python::comm_json, py::arg("cluster"), py::arg("op"), py::arg("ranks"), py::arg("ranks_per_node"),
        py::arg("min_bytes"), py::arg("max_bytes"), py::arg("sets"), py::arg("profile"), "dtsim comm --json");
  m.def(
      "profile_json", [](const std::string& path) { return calib::profile_to_json(sim::load_profile(path)); },
      py::arg("path"), "dtsim profile show --json");
  m.def("list_models", &python::list_models, "built-in and shipped models: (name, description)");
  m.def(
      "list_configs", [](const std::string& kind) { return sim::list_configs(kind); }, py::arg("kind"),
      "shipped configs of a kind (clusters, plans, models)");
  m.def(
      "config_dir", [] { return sim::config_dir(); }, "where the shipped configs are");
  m.def(
      "version", [] { return std::string(sim::version()); }, "dtsim's version");
}
