// dtsim-gui: the what-if explorer.
//   dtsim-gui [--model M] [--cluster C] [--plan P] [--profile F.h5] [--measured F.json]
//             [--set SECTION.KEY=VALUE]... [--screenshot FILE.png [--tab explorer|compare|search]]
// Bad arguments print one line and exit with status 2, as the CLI does (dtsim/cli/parse.hpp); --help, --version.

#include <cstdlib>
#include <iostream>
#include <map>
#include <string>
#include <vector>

#include <CLI/CLI.hpp>
#include <QApplication>
#include <QTabWidget>

#include "dtsim/cli/parse.hpp"
#include "dtsim/cli/scenario_options.hpp"
#include "dtsim/gui/explorer.hpp"
#include "dtsim/gui/explorer_window.hpp"
#include "dtsim/platform/process.hpp"
#include "dtsim/sim/config_node.hpp"
#include "dtsim/sim/error.hpp"

namespace {

constexpr const char* kFooter = R"(
  M, C, P: as for `dtsim predict` (built-in names, YAML files, HF config.json); defaults gpt2, dgx-a100, ddp
  --screenshot renders the window with this scenario into FILE.png without showing it, then exits
  (with --tab search, after running the search; with --tab compare, with the scenario pinned)
)";

/// The command line: the scenario options every front end shares
/// (dtsim/cli/scenario_options.hpp) and the explorer's own.
struct Args {
  dtsim::cli::ScenarioOptions scenario;
  std::vector<dtsim::sim::Override> sets;
  std::string measured, screenshot, tab = "explorer";
  bool has_measured = false, has_screenshot = false;
};

}  // namespace

int main(int argc, char** argv) {
  Args args;
  dtsim::gui::Scenario scenario;
  CLI::App cli{"dtsim-gui: explore the time and memory of distributed training plans", "dtsim-gui"};
  dtsim::cli::house_style(cli);
  args.scenario.cluster = "dgx-a100";
  // --model gpt2 and --plan ddp by default, unless a framework's config
  // names them (resolve_scenario).
  dtsim::cli::add_scenario_options(cli, args.scenario, dtsim::cli::kScenario | dtsim::cli::kFramework);
  cli.add_option("--measured", args.measured, "A `dtsim validate --json` result shown beside the prediction")->type_name("FILE.json");
  cli.add_option("--screenshot", args.screenshot, "Render the window into FILE.png without showing it, then exit")->type_name("FILE.png");
  cli.add_option("--tab", args.tab, "The tab shown: explorer (default), compare or search")->type_name("explorer|compare|search");
  cli.footer(kFooter);
  if (const int status = dtsim::cli::parse_main(cli, argc, argv); status >= 0) return status;
  // Every knob change predicts again, and a long pipeline's graph and its
  // timeline are hundreds of MB: kept for the next one, not faulted in
  // again (Note [Freed memory stays] in platform/src/process.cpp).
  dtsim::platform::prepare_simulator_heap();  // and Note [Huge pages]
  args.has_measured = cli.count("--measured") > 0;
  args.has_screenshot = cli.count("--screenshot") > 0;
  try {
    const dtsim::cli::ResolvedScenario rs = dtsim::cli::resolve_scenario(args.scenario, "ddp");
    if (!rs.warning.empty()) std::cerr << "dtsim-gui: warning: " << rs.warning << "\n";
    args.sets = rs.overrides;
    scenario = dtsim::gui::load_scenario(rs.model.empty() ? "gpt2" : rs.model, args.scenario.cluster, rs.plan,
                                         args.scenario.profile, args.sets);
    if (args.has_measured) dtsim::gui::load_measured(args.measured);  // fail early, in one line
  } catch (const dtsim::Error& e) {
    std::cerr << "dtsim-gui: " << e.what() << "\n";
    return 2;
  }
  const std::map<std::string, int> tabs = {{"explorer", 0}, {"compare", 1}, {"search", 2}};
  if (!tabs.count(args.tab)) {
    std::cerr << "dtsim-gui: --tab " << args.tab << ": valid: explorer, compare, search\n";
    return 2;
  }
  const bool screenshot = args.has_screenshot;
  // A screenshot needs no display: render offscreen unless told otherwise.
  if (screenshot && std::getenv("QT_QPA_PLATFORM") == nullptr) setenv("QT_QPA_PLATFORM", "offscreen", 1);
  QApplication app(argc, argv);
  QApplication::setApplicationName("dtsim explorer");
  dtsim::gui::ExplorerWindow window;
  window.set_scenario(std::move(scenario));
  if (args.has_measured) window.open_measured(QString::fromStdString(args.measured));
  const std::string& tab = args.tab;
  if (auto* t = window.findChild<QTabWidget*>("tabs")) t->setCurrentIndex(tabs.at(tab));
  if (screenshot) {
    if (!window.wait_for_result(120000)) {
      std::cerr << "dtsim-gui: the prediction did not finish within 120 s\n";
      return 1;
    }
    if (tab == "compare") window.pin_current();
    if (tab == "search") {
      window.start_search();
      if (!window.wait_for_search(600000)) {
        std::cerr << "dtsim-gui: the search did not finish within 600 s\n";
        return 1;
      }
    }
    const QString file = QString::fromStdString(args.screenshot);
    if (!window.save_screenshot(file)) {
      std::cerr << "dtsim-gui: " << window.error_text().toStdString() << "\n";
      return 2;
    }
    if (!window.error_text().isEmpty()) std::cerr << "dtsim-gui: note: " << window.error_text().toStdString() << "\n";
    std::cout << "screenshot written to " << file.toStdString() << "\n";
    return 0;
  }
  window.show();
  return QApplication::exec();
}
