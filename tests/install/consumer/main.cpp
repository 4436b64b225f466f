// One prediction through the installed libraries: GPT-2 on a DGX A100 with
// DDP, printed as `dtsim predict --json` prints it (install.sh compares them).
#include <iostream>
#include <string>

#include "dtsim/models/models.hpp"
#include "dtsim/sim/config_io.hpp"
#include "dtsim/sim/error.hpp"
#include "dtsim/sim/predict.hpp"
#include "dtsim/sim/report.hpp"

int main() {
  using namespace dtsim;
  try {
    const std::string configs = CONSUMER_CONFIG_DIR;
    const sim::ModelPtr model = models::load_model("gpt2");
    const sim::ClusterSpec cluster = sim::load_cluster(configs + "/clusters/dgx-a100.yaml");
    const sim::PlanSpec plan = sim::load_plan(configs + "/plans/ddp.yaml");
    std::cout << sim::to_json(sim::predict(*model, plan, cluster));
    return 0;
  } catch (const Error& e) {
    std::cerr << "dtsim_consumer: " << e.what() << "\n";
    return 2;
  }
}
