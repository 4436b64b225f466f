// How long the explorer takes from a scenario to drawn charts, split into the
// prediction (worker thread) and the drawing (UI thread, where time is a
// frozen window) and one paint of the window, in a window made for it and
// again in that window (a knob change: "(again)"). Offscreen; medians of 5.
//   build/bench/dtsim_bench_gui

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <optional>
#include <string>
#include <vector>

#include <CLI/CLI.hpp>
#include <QApplication>
#include <QEventLoop>
#include <QTimer>

#include "dtsim/cli/parse.hpp"
#include "dtsim/gui/explorer.hpp"
#include "dtsim/gui/explorer_window.hpp"
#include "dtsim/sim/config_node.hpp"

namespace {

double median(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  return v[v.size() / 2];
}

double seconds_since(std::chrono::steady_clock::time_point t0) {
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
}

}  // namespace

int main(int argc, char** argv) {
  CLI::App cli{"dtsim_bench_gui: how long the explorer takes from a scenario to drawn charts (offscreen, medians of 5)",
               "dtsim_bench_gui"};
  dtsim::cli::house_style(cli);
  if (const int status = dtsim::cli::parse_main(cli, argc, argv); status >= 0) return status;
  setenv("QT_QPA_PLATFORM", "offscreen", 0);
  QApplication app(argc, argv);
  struct Case {
    const char *model, *cluster, *plan;
    std::vector<std::string> sets;
  };
  const std::vector<Case> cases = {
      {"gpt2-xl", "dgx-a100", "zero2", {}},
      {"gpt2", "dgx-a100", "1f1b", {"plan.pp=8", "plan.micro_batches=64", "plan.micro_batch=1"}},
      {"gpt-175b", "dgx-a100", "megatron-3d", {"cluster.nodes=8"}},
  };
  std::printf("%-44s %10s %10s %10s %10s %8s\n", "scenario", "predict ms", "draw ms", "paint ms", "total ms", "tasks");
  for (const Case& c : cases) {
    std::vector<dtsim::sim::Override> ov;
    for (const auto& s : c.sets) ov.push_back(dtsim::sim::parse_override(s));
    const dtsim::gui::Scenario s = dtsim::gui::load_scenario(c.model, c.cluster, c.plan, "", ov);
    std::string name = std::string(c.model) + " " + c.cluster + " " + c.plan;
    for (const auto& x : c.sets) name += " " + x;
    // A scenario drawn in a window made for it (its first layout included),
    // and then again in that window, as a knob change redraws it: the window
    // is laid out already, its charts are made anew.
    for (const bool again : {false, true}) {
      std::vector<double> predict, draw, paint, total;
      std::size_t tasks = 0;
      dtsim::gui::ExplorerWindow shown;
      if (again) {
        shown.set_scenario(s);
        if (!shown.wait_for_result(600000)) return 1;
        shown.grab();
      }
      for (int rep = 0; rep < 5; ++rep) {
        auto t0 = std::chrono::steady_clock::now();
        const dtsim::gui::Outcome o = dtsim::gui::evaluate(s);
        predict.push_back(seconds_since(t0));
        tasks = o.ok() ? o.prediction->tasks : 0;
        std::optional<dtsim::gui::ExplorerWindow> fresh;
        dtsim::gui::ExplorerWindow& w = again ? shown : fresh.emplace();
        // Until the window says it has drawn the answer (not polled: a poll
        // would add its own sleeps).
        QEventLoop loop;
        bool drawn = false;
        QObject::connect(&w, &dtsim::gui::ExplorerWindow::evaluated, &loop, [&] {
          drawn = true;
          loop.quit();
        });
        QTimer::singleShot(600000, &loop, &QEventLoop::quit);
        t0 = std::chrono::steady_clock::now();
        w.set_scenario(s);
        loop.exec();
        if (!drawn) return 1;
        // The debounce (120 ms) is waiting, not work: leave it out.
        const double answered = seconds_since(t0) - 0.120;
        draw.push_back(answered - predict.back());
        t0 = std::chrono::steady_clock::now();
        w.grab();  // one full paint of the window, as the screen would get
        paint.push_back(seconds_since(t0));
        total.push_back(answered + paint.back());
      }
      const std::string row = name + (again ? " (again)" : "");
      std::printf("%-44s %10.1f %10.1f %10.1f %10.1f %8zu\n", row.c_str(), median(predict) * 1e3, median(draw) * 1e3,
                  median(paint) * 1e3, median(total) * 1e3, tasks);
    }
  }
  return 0;
}
