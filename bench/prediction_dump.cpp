// Every prediction the shipped configs allow, one line each, for comparing
// two builds (bench/compare-builds): each built-in model x shipped plan x
// shipped cluster that resolves, priced by the datasheet models; the same
// on each shipped profile's own cluster, priced by the profile; and a sample
// of searched plans (every 7th candidate of three searches). Uses only the
// front door (load_*, predict, enumerate_plans), so it builds against a
// tree before a refactor and after it.
//
//   dtsim_prediction_dump > cases.tsv
// Each line: case key, a tab, then either "error<TAB>message" or the
// iteration time (ns), the breakdown (ns), the stage split, and per
// simulated rank its rank, stage, replicas, peak and the five categories.
#include <CLI/CLI.hpp>

#include <cstdio>
#include <memory>
#include <string>
#include <vector>

#include "dtsim/models/models.hpp"
#include "dtsim/sim/config_io.hpp"
#include "dtsim/sim/error.hpp"
#include "dtsim/sim/predict.hpp"
#include "dtsim/sim/profile.hpp"
#include "dtsim/sim/search.hpp"

namespace {

using namespace dtsim;

std::string line_of(const sim::Prediction& p) {
  std::string s = "ok\t" + std::to_string(p.iteration_time);
  const auto& b = p.breakdown;
  for (TimeNs t : {b.compute, b.exposed_comm, b.bubble, b.optimizer, b.offload, b.other}) s += "\t" + std::to_string(t);
  s += "\tstages";
  for (int n : p.plan.stage_layers) s += " " + std::to_string(n);
  for (const auto& r : p.ranks) {
    s += "\trank " + std::to_string(r.rank) + "/" + std::to_string(r.stage) + "/" + std::to_string(r.replicas);
    for (Bytes v : {r.peak, r.parameters, r.gradients, r.optimizer, r.activations, r.buffers}) s += " " + std::to_string(v);
  }
  return s;
}

void run(const std::string& key, const sim::Model& model, const sim::PlanSpec& plan, const sim::ClusterSpec& cluster,
         const sim::PredictOptions& po) {
  std::string out;
  try {
    out = line_of(sim::predict(model, plan, cluster, po));
  } catch (const std::exception& e) {
    out = std::string("error\t") + e.what();
    for (char& c : out) {
      if (c == '\n') c = ' ';
    }
  }
  std::printf("%s\t%s\n", key.c_str(), out.c_str());
}

}  // namespace

int main(int argc, char** argv) {
  // CLI11 itself, not dtsim/cli/parse.hpp: this program builds against trees
  // from before that existed (above).
  CLI::App app{"dtsim_prediction_dump: every prediction the shipped configs allow, one line each (> cases.tsv)",
               "dtsim_prediction_dump"};
  CLI11_PARSE(app, argc, argv);
  try {
    const auto model_names = models::builtin_names();
    const auto plans = sim::list_configs("plans");
    std::vector<std::string> clusters = sim::list_configs("clusters");
    // Multi-node versions of the DGX clusters, where the 3-D plans resolve.
    clusters.push_back("dgx-a100@8");
    clusters.push_back("dgx-h100@16");
    std::vector<sim::ModelPtr> loaded;
    for (const auto& m : model_names) loaded.push_back(models::load_model(m));
    const sim::PredictOptions analytic;
    for (const auto& c : clusters) {
      const auto at = c.find('@');
      std::vector<sim::Override> nodes;
      if (at != std::string::npos) nodes.push_back({"cluster", "nodes", c.substr(at + 1)});
      const sim::ClusterSpec cluster = sim::load_cluster(c.substr(0, at), nodes);
      for (const auto& pl : plans) {
        const sim::PlanSpec plan = sim::load_plan(pl);
        for (std::size_t i = 0; i < loaded.size(); ++i) run(model_names[i] + "|" + pl + "|" + c, *loaded[i], plan, cluster, analytic);
      }
    }
    // Each shipped profile on the cluster it was measured for.
    const std::vector<std::pair<std::string, std::string>> profiles = {
        {"local-cpu.h5", "local-cpu"}, {"local-cpu-tiny.h5", "local-cpu"}, {"h100-sxm.h5", "1xh100"}};
    for (const auto& [file, c] : profiles) {
      sim::PredictOptions po;
      po.profile = std::make_shared<const sim::ProfileCosts>(sim::load_profile(sim::config_dir() + "/profiles/" + file));
      const sim::ClusterSpec cluster = sim::load_cluster(c);
      for (const auto& pl : plans) {
        const sim::PlanSpec plan = sim::load_plan(pl);
        for (std::size_t i = 0; i < loaded.size(); ++i) {
          run(model_names[i] + "|" + pl + "|" + c + "|" + file, *loaded[i], plan, cluster, po);
        }
      }
    }
    // A sample of searched plans.
    const std::vector<std::pair<std::string, std::string>> searches = {
        {"gpt2-xl", "dgx-a100"}, {"bert-large", "8xv100-16g"}, {"gpt2-medium", "2xa100-80g"}};
    for (const auto& [m, c] : searches) {
      const sim::ModelPtr model = models::load_model(m);
      const sim::ClusterSpec cluster = sim::load_cluster(c);
      sim::SearchOptions so;
      const auto candidates = sim::enumerate_plans(*model, cluster, so);
      for (std::size_t k = 0; k < candidates.size(); k += 7) {
        run(m + "|search " + std::to_string(k) + "|" + c, *model, candidates[k], cluster, analytic);
      }
    }
  } catch (const std::exception& e) {
    std::fprintf(stderr, "dtsim_prediction_dump: %s\n", e.what());
    return 2;
  }
  return 0;
}
