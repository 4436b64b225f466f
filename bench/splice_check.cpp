// Evidence for Note [Steady state timelines] beyond the shipped plans: the
// plans a search enumerates, every `--stride`-th of them that is a
// pipeline, predicted with their timeline spliced from the steady state and
// simulated in full, compared task for task (where each runs: its stream and
// place on it; name, kind, phase, micro-batch, duration, bytes, memory
// operations, dependencies, collective partners, start, end, slowdown) and
// memory change for memory change. Exit status 1 where any differs.
//   build/bench/dtsim_splice_check --model M --cluster C [--nodes N]
//       [--global-batch B] [--stride K] [--profile P.h5] [--base-plan PLAN]
#include <cstdio>
#include <memory>
#include <string>
#include <vector>

#include <CLI/CLI.hpp>

#include "dtsim/cli/parse.hpp"
#include "dtsim/models/models.hpp"
#include "dtsim/sim/config_io.hpp"
#include "dtsim/sim/error.hpp"
#include "dtsim/sim/predict.hpp"
#include "dtsim/sim/profile.hpp"
#include "dtsim/sim/search.hpp"

using namespace dtsim;
using namespace dtsim::sim;

int main(int argc, char** argv) {
  std::string model_name, cluster_name, profile, base_plan;
  int nodes = 1, stride = 1;
  std::int64_t global_batch = 0;
  CLI::App app{"dtsim_splice_check: spliced timelines against the full simulation over a search's pipelines",
               "dtsim_splice_check"};
  cli::house_style(app);
  app.add_option("--model", model_name, "Model (required)")->required();
  app.add_option("--cluster", cluster_name, "Cluster (required)")->required();
  app.add_option("--nodes", nodes, "Nodes of the cluster (default 1)")->check(CLI::Range(1, 1000000));
  app.add_option("--global-batch", global_batch, "Sequences a step (default: the search's)")->check(CLI::Range(1, 1000000));
  app.add_option("--stride", stride, "Take every K-th enumerated plan (default 1)")->check(CLI::Range(1, 1000000));
  app.add_option("--profile", profile, "Price from a calibration profile");
  app.add_option("--base-plan", base_plan, "Knobs the search holds fixed, from this plan");
  if (const int status = cli::parse_main(app, argc, argv); status >= 0) return status;
  try {
    const auto model = models::load_model(model_name);
    const ClusterSpec cluster = load_cluster(cluster_name, {parse_override("cluster.nodes=" + std::to_string(nodes))});
    SearchOptions so;
    so.global_batch = global_batch;
    PredictOptions traced, full, plain;
    if (!profile.empty()) {
      so.profile = traced.profile = full.profile = plain.profile = std::make_shared<const ProfileCosts>(load_profile(profile));
    }
    if (!base_plan.empty()) so.base = load_plan(base_plan, {});
    traced.keep_graph = full.keep_graph = true;
    full.unabridged = true;
    const std::vector<PlanSpec> plans = enumerate_plans(*model, cluster, so);
    int pipelines = 0, spliced = 0, fell_back = 0, differ = 0;
    for (std::size_t i = 0; i < plans.size(); i += static_cast<std::size_t>(stride)) {
      Prediction a;
      try {
        a = predict(*model, plans[i], cluster, traced);
      } catch (const Error&) {
        continue;  // a plan the rules allow that its sizes refuse
      }
      if (a.plan.pp <= 1) continue;
      ++pipelines;
      if (a.abridged_to == 0) {
        // Not spliced: fine unless the prediction without a timeline was abridged.
        if (predict(*model, plans[i], cluster, plain).abridged_to > 0) ++fell_back;
        continue;
      }
      ++spliced;
      const Prediction b = predict(*model, plans[i], cluster, full);
      if (a.exec.makespan != b.exec.makespan || runs_differ(a.graph, a.exec, b.graph, b.exec).any()) {
        ++differ;
        std::printf("differs: plan %zu of the search's: dp %d tp %d pp %d v %d cp %d ep %d, %lld micro-batches\n", i,
                    a.plan.dp, a.plan.tp, a.plan.pp, a.plan.virtual_stages, a.plan.cp, a.plan.ep,
                    static_cast<long long>(a.plan.grad_accum));
      }
    }
    std::printf("%s on %d x %s: %zu plans enumerated, one in %d taken: %d pipelines, %d spliced (%d fell back to "
                "the full simulation), %d differ\n",
                model_name.c_str(), nodes, cluster_name.c_str(), plans.size(), stride, pipelines, spliced, fell_back, differ);
    return differ == 0 ? 0 : 1;
  } catch (const Error& e) {
    std::fprintf(stderr, "dtsim_splice_check: %s\n", e.what());
    return 2;
  }
}
