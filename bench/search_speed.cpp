// Search speed: the benchmark, every valid plan for gpt-175b on 1024
// A100s (128 DGX nodes) at a global batch of 1536, on every core. Runs
// `--repeat` times (default 3) and reports the median wall time.
//   build/bench/dtsim_bench_search [--repeat N]
#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <vector>

#include <CLI/CLI.hpp>

#include "dtsim/cli/parse.hpp"
#include "dtsim/models/models.hpp"
#include "dtsim/platform/process.hpp"
#include "dtsim/sim/config_io.hpp"
#include "dtsim/sim/search.hpp"

using namespace dtsim;

int main(int argc, char** argv) {
  int repeat = 3;
  CLI::App app{"dtsim_bench_search: how fast a plan search is (median of N)", "dtsim_bench_search"};
  cli::house_style(app);
  app.add_option("--repeat", repeat, "Runs per case (default 3)")->type_name("N")->check(CLI::Range(1, 1000000));
  if (const int status = cli::parse_main(app, argc, argv); status >= 0) return status;
  platform::prepare_simulator_heap();  // as dtsim search does
  try {
    const auto model = models::load_model("gpt-175b");
    const auto cluster = sim::load_cluster("dgx-a100", {sim::parse_override("cluster.nodes=128")});
    sim::SearchOptions o;
    o.global_batch = 1536;
    o.base.precision = sim::Precision::kBf16;
    o.base.optimizer = sim::Optimizer::kAdam;
    std::vector<double> s;
    sim::SearchResult last;
    for (int r = 0; r < repeat; ++r) {
      last = sim::search(*model, cluster, o);
      s.push_back(last.seconds);
    }
    std::sort(s.begin(), s.end());
    std::printf("gpt-175b on 1024 x A100 (dgx-a100, 128 nodes), global batch 1536, %d thread(s)\n", last.threads);
    std::printf("  plans %zu: pruned by memory %zu, by time %zu, simulated %zu (%zu did not fit)\n", last.enumerated,
                last.pruned_memory, last.pruned_time, last.simulated, last.not_fitting);
    std::printf("  median of %d: %.2f s (%.0f plans/s, %.0f simulations/s)\n", repeat, s[s.size() / 2],
                static_cast<double>(last.enumerated) / s[s.size() / 2], static_cast<double>(last.simulated) / s[s.size() / 2]);
  } catch (const std::exception& e) {
    std::fprintf(stderr, "dtsim_bench_search: %s\n", e.what());
    return 2;
  }
  return 0;
}
