// Simulator speed: plans per second and events per second for gpt2-xl under
// DDP, ZeRO-3, 1F1B and interleaved pipelines (8 stages, 8 micro-batches) on
// 8, 64 and 1024 A100s. Each configuration runs
// `--repeat` times (default 21); the median is reported.
//   build/bench/dtsim_bench_sim [--repeat N] [--json]
#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>
#include <vector>

#include "dtsim/models/models.hpp"
#include <CLI/CLI.hpp>

#include "dtsim/cli/parse.hpp"
#include "dtsim/sim/config_io.hpp"
#include "dtsim/sim/predict.hpp"

using namespace dtsim;

int main(int argc, char** argv) {
  int repeat = 21;
  bool json = false;
  CLI::App app{"dtsim_bench_sim: how fast one prediction is (median of N)", "dtsim_bench_sim"};
  cli::house_style(app);
  app.add_option("--repeat", repeat, "Predictions per case (default 21)")->type_name("N")->check(CLI::Range(1, 1000000));
  app.add_flag("--json", json, "Print the medians as JSON");
  if (const int status = cli::parse_main(app, argc, argv); status >= 0) return status;
  try {
    const auto model = models::load_model("gpt2-xl");
    struct Row {
      std::string plan;
      int gpus;
      double median_ms;
      double plans_per_s;
      double events_per_s;
      std::uint64_t events;
      std::size_t tasks;
    };
    std::vector<Row> rows;
    for (const char* plan_name : {"ddp", "zero3", "1f1b", "interleaved"}) {
      for (int gpus : {8, 64, 1024}) {
        const auto cluster = sim::load_cluster("dgx-a100", {sim::parse_override("cluster.nodes=" + std::to_string(gpus / 8))});
        const bool pipeline = std::string(plan_name) == "1f1b" || std::string(plan_name) == "interleaved";
        const auto plan = pipeline ? sim::load_plan(plan_name, {sim::parse_override("plan.micro_batch=4"), sim::parse_override("plan.pp=8"),
                                                                sim::parse_override("plan.micro_batches=8")})
                                   : sim::load_plan(plan_name, {sim::parse_override("plan.micro_batch=4"), sim::parse_override("plan.grad_accum=4")});
        std::vector<double> ms;
        sim::Prediction last;
        for (int r = 0; r < repeat; ++r) {
          const auto t0 = std::chrono::steady_clock::now();
          last = sim::predict(*model, plan, cluster);
          const auto t1 = std::chrono::steady_clock::now();
          ms.push_back(std::chrono::duration<double, std::milli>(t1 - t0).count());
        }
        std::sort(ms.begin(), ms.end());
        const double med = ms[ms.size() / 2];
        rows.push_back({plan_name, gpus, med, 1000.0 / med, static_cast<double>(last.events) / (med / 1000.0), last.events, last.tasks});
      }
    }
    if (json) {
      std::printf("[\n");
      for (std::size_t i = 0; i < rows.size(); ++i) {
        const Row& r = rows[i];
        std::printf("  {\"plan\": \"%s\", \"gpus\": %d, \"median_ms\": %.4f, \"plans_per_s\": %.1f, \"events_per_s\": %.0f, \"events\": %llu, \"tasks\": %zu}%s\n",
                    r.plan.c_str(), r.gpus, r.median_ms, r.plans_per_s, r.events_per_s,
                    static_cast<unsigned long long>(r.events), r.tasks, i + 1 < rows.size() ? "," : "");
      }
      std::printf("]\n");
    } else {
      std::printf("gpt2-xl, micro_batch 4, grad_accum 4 (pipelines: 8 stages, 8 micro-batches), dgx-a100 nodes; median of %d runs\n", repeat);
      std::printf("%-12s %6s %12s %12s %14s %9s %7s\n", "plan", "gpus", "median (ms)", "plans/s", "events/s", "events", "tasks");
      for (const Row& r : rows) {
        std::printf("%-12s %6d %12.3f %12.1f %14.0f %9llu %7zu\n", r.plan.c_str(), r.gpus, r.median_ms, r.plans_per_s,
                    r.events_per_s, static_cast<unsigned long long>(r.events), r.tasks);
      }
    }
  } catch (const std::exception& e) {
    std::fprintf(stderr, "dtsim_bench_sim: %s\n", e.what());
    return 2;
  }
  return 0;
}
