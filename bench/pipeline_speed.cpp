// Pipeline prediction speed (issue 26's targets): one prediction in-process,
// median of `--repeat` runs (default 11), for
//   - GPT-1T on 3072 A100s, interleaved: tp 8, pp 64, 2 chunks a stage,
//     micro-batch 1, global batch 3072 (512 micro-batches a pipeline;
//     Narayanan et al. 2021, Table 1's last row);
//   - gpt-175b under megatron-3d on 64 A100s (512 micro-batches);
//   - the same with 8 to 512 micro-batches (global batch = micro-batches);
//   - the 512 again as the explorer predicts it, keeping every task for its
//     timeline (spliced from the steady state: Note [Steady state
//     timelines]), and simulated in full (--unabridged's way).
// Freed memory is kept for the next prediction, as the search and the
// explorer keep it (--glibc-malloc: not).
//   build/bench/dtsim_bench_pipeline [--repeat N] [--glibc-malloc]
#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>
#include <vector>

#include <CLI/CLI.hpp>

#include "dtsim/cli/parse.hpp"
#include "dtsim/models/models.hpp"
#include "dtsim/platform/process.hpp"
#include "dtsim/sim/config_io.hpp"
#include "dtsim/sim/predict.hpp"

using namespace dtsim;

namespace {

struct Timed {
  double median_ms = 0;
  sim::Prediction last;
};

Timed time_it(const sim::Model& model, const sim::PlanSpec& plan, const sim::ClusterSpec& cluster, int repeat,
              const sim::PredictOptions& options = {}) {
  std::vector<double> ms;
  Timed t;
  for (int r = 0; r < repeat; ++r) {
    const auto t0 = std::chrono::steady_clock::now();
    t.last = sim::predict(model, plan, cluster, options);
    const auto t1 = std::chrono::steady_clock::now();
    ms.push_back(std::chrono::duration<double, std::milli>(t1 - t0).count());
  }
  std::sort(ms.begin(), ms.end());
  t.median_ms = ms[ms.size() / 2];
  return t;
}

void row(const char* what, const Timed& t) {
  std::printf("%-44s %10.3f %12.6f %9zu %10llu %10lld\n", what, t.median_ms, ns_to_seconds(t.last.iteration_time),
              t.last.tasks, static_cast<unsigned long long>(t.last.events), static_cast<long long>(t.last.abridged_to));
}

}  // namespace

int main(int argc, char** argv) {
  int repeat = 11;
  CLI::App app{"dtsim_bench_pipeline: how fast long pipelines are predicted (median of N)", "dtsim_bench_pipeline"};
  cli::house_style(app);
  app.add_option("--repeat", repeat, "Runs per case (default 11)")->type_name("N")->check(CLI::Range(1, 1000000));
  bool glibc_defaults = false;
  app.add_flag("--glibc-malloc", glibc_defaults,
               "Leave glibc's allocator as it is, returning large freed blocks to the kernel (the search and the "
               "explorer keep them: Note [Freed memory stays] in platform/src/process.cpp)");
  bool small_pages = false;
  app.add_flag("--small-pages", small_pages,
               "Leave the heap's pages as the kernel's default gives them (the search and the explorer ask for huge pages: "
               "Note [Huge pages] in platform/src/process.cpp)");
  if (const int status = cli::parse_main(app, argc, argv); status >= 0) return status;
  // As dtsim search and the explorer set the heap, unless a flag says otherwise.
  if (!glibc_defaults && !small_pages) platform::prepare_simulator_heap();
  if (!glibc_defaults && small_pages) platform::retain_freed_memory();
  try {
    std::printf("median of %d predictions in-process%s\n", repeat,
                glibc_defaults ? " (glibc's allocator as it is)" : small_pages ? " (the kernel's default pages)" : "");
    std::printf("%-44s %10s %12s %9s %10s %10s\n", "case", "ms", "iteration s", "tasks", "events", "simulated");
    {
      const auto model = models::load_model("gpt-1t");
      const auto cluster = sim::load_cluster("dgx-a100", {sim::parse_override("cluster.nodes=384")});
      const auto plan = sim::load_plan("megatron-3d", {sim::parse_override("plan.pp=64"), sim::parse_override("plan.global_batch=3072")});
      row("gpt-1t, 3072 A100, tp 8 pp 64 v 2, m 512", time_it(*model, plan, cluster, repeat));
    }
    const auto model = models::load_model("gpt-175b");
    const auto cluster = sim::load_cluster("dgx-a100", {sim::parse_override("cluster.nodes=8")});
    for (int m : {512, 8, 16, 32, 64, 128, 256}) {
      const auto plan = sim::load_plan("megatron-3d", {sim::parse_override("plan.global_batch=" + std::to_string(m))});
      const std::string what = "gpt-175b megatron-3d, 64 A100, m " + std::to_string(m);
      row(what.c_str(), time_it(*model, plan, cluster, repeat));
    }
    // The explorer's options: every task kept, no names, no memory over time.
    sim::PredictOptions timeline;
    timeline.keep_graph = true;
    timeline.trace_detail = false;
    const auto plan = sim::load_plan("megatron-3d", {});
    row("gpt-175b megatron-3d, m 512, timeline", time_it(*model, plan, cluster, repeat, timeline));
    timeline.unabridged = true;
    row("the same, every micro-batch simulated", time_it(*model, plan, cluster, repeat, timeline));
  } catch (const std::exception& e) {
    std::fprintf(stderr, "dtsim_bench_pipeline: %s\n", e.what());
    return 2;
  }
  return 0;
}
