// Whether a knob the search turns on is ever slower or larger: every plan
// among a search's fastest with the knob on, predicted again with it off
// (Note [Search]: why the search tries Megatron's overlapped parameter
// gather wherever the rules allow it, and how tp_comm_overlap compares).
//   build/bench/dtsim_bench_knob_pairs --model gpt-175b --cluster dgx-a100
//       --set cluster.nodes=128 --global-batch 1536 [--knob tp_comm_overlap] [--top 200]
#include <algorithm>
#include <cstdio>
#include <stdexcept>
#include <string>
#include <vector>

#include <CLI/CLI.hpp>

#include "dtsim/cli/parse.hpp"
#include "dtsim/models/models.hpp"
#include "dtsim/platform/process.hpp"
#include "dtsim/sim/config_io.hpp"
#include "dtsim/sim/predict.hpp"
#include "dtsim/sim/search.hpp"

using namespace dtsim;

int main(int argc, char** argv) {
  std::string model_name, cluster_name, knob = "overlap_param_gather";
  std::vector<std::string> sets;
  std::int64_t batch = 0;
  int top = 200;
  CLI::App app{"dtsim_bench_knob_pairs: a search's fastest plans with a knob on, against the same plans with it off",
               "dtsim_bench_knob_pairs"};
  cli::house_style(app);
  app.add_option("--model", model_name, "Model")->required();
  app.add_option("--cluster", cluster_name, "Cluster")->required();
  app.add_option("--set", sets, "SECTION.KEY=VALUE, as dtsim search takes it");
  app.add_option("--global-batch", batch, "Sequences a step (0: 4 a GPU)");
  app.add_option("--top", top, "Plans compared (default 200)")->check(CLI::Range(1, 1000000));
  app.add_option("--knob", knob, "overlap_param_gather or tp_comm_overlap")
      ->check(CLI::IsMember({"overlap_param_gather", "tp_comm_overlap"}));
  if (const int status = cli::parse_main(app, argc, argv); status >= 0) return status;
  platform::prepare_simulator_heap();  // as dtsim search does
  try {
    const auto model = models::load_model(model_name);
    std::vector<sim::Override> cluster_sets, plan_sets{sim::parse_override("plan." + knob + "=true")};
    for (const std::string& s : sets) {
      const sim::Override o = sim::parse_override(s);
      if (o.section != "cluster" && o.section != "plan") throw std::runtime_error("--set " + s + ": only cluster.* and plan.* here");
      (o.section == "cluster" ? cluster_sets : plan_sets).push_back(o);
    }
    const sim::ClusterSpec cluster = sim::load_cluster(cluster_name, cluster_sets);
    sim::SearchOptions o;
    o.global_batch = batch;
    o.top = top;
    o.base = sim::search_base_plan(cluster, plan_sets);
    const sim::SearchResult r = sim::search(*model, cluster, o);
    const bool gather = knob == "overlap_param_gather";
    int n = 0, slower = 0, faster = 0, larger = 0;
    double least = 0, most = 0;  // how much longer with it off, fractions
    for (const sim::SearchEntry& e : r.top) {
      if (!(gather ? e.plan.zero1_gathers_in_forward() : e.plan.tp_comm_overlap)) continue;
      sim::PlanSpec off = e.plan.spec;
      (gather ? off.overlap_param_gather : off.tp_comm_overlap) = false;
      const sim::Prediction p = sim::predict(*model, off, cluster);
      Bytes peak = 0;
      for (const auto& rm : p.ranks) peak = std::max(peak, rm.peak);
      const double d = static_cast<double>(p.iteration_time) / static_cast<double>(e.iteration_time) - 1;
      least = n == 0 ? d : std::min(least, d);
      most = n == 0 ? d : std::max(most, d);
      ++n;
      slower += d > 0 ? 1 : 0;
      faster += d < 0 ? 1 : 0;
      larger += peak != e.peak ? 1 : 0;
    }
    std::printf("%s on %d GPUs of %s: %d of the %zu fastest plans have %s; with it off %d are slower, %d faster "
                "(%+.2f%% to %+.2f%%), %d peak otherwise\n",
                r.model_name.c_str(), r.gpus, r.cluster_name.c_str(), n, r.top.size(), knob.c_str(), slower, faster,
                least * 100, most * 100, larger);
  } catch (const std::exception& e) {
    std::fprintf(stderr, "dtsim_bench_knob_pairs: %s\n", e.what());
    return 2;
  }
  return 0;
}
