// dtsim-gui: the what-if explorer.
//   dtsim-gui [--model M] [--cluster C] [--plan P] [--profile F.h5] [--measured F.json]
//             [--set SECTION.KEY=VALUE]... [--screenshot FILE.png [--tab explorer|compare|search]]
// Bad arguments print one line and exit with status 2, as the CLI does.

#include <cstdlib>
#include <iostream>
#include <map>
#include <string>
#include <vector>

#include <QApplication>
#include <QTabWidget>

#include "dtsim/gui/explorer.hpp"
#include "dtsim/gui/explorer_window.hpp"
#include "dtsim/sim/config_node.hpp"
#include "dtsim/sim/error.hpp"

namespace {

constexpr const char* kUsage = R"(dtsim-gui: explore the time and memory of distributed training plans

usage:
  dtsim-gui [--model M] [--cluster C] [--plan P] [--profile FILE.h5] [--measured FILE.json]
            [--set SECTION.KEY=VALUE]... [--screenshot FILE.png] [--tab explorer|compare|search]

  M, C, P: as for `dtsim predict` (built-in names, YAML files, HF config.json); defaults gpt2, dgx-a100, ddp
  --measured: a `dtsim validate --json` result shown beside the prediction
  --screenshot: render the window with this scenario into FILE.png without showing it, then exit
               (with --tab search, after running the search; with --tab compare, with the scenario pinned)
)";

struct Args {
  std::map<std::string, std::string> values;
  std::vector<dtsim::sim::Override> sets;
};

Args parse(int argc, char** argv) {
  static const std::vector<std::string> kKeys = {"model", "cluster", "plan", "profile", "measured", "screenshot", "tab", "set"};
  Args a;
  for (int i = 1; i < argc; ++i) {
    std::string arg = argv[i];
    if (arg == "--help" || arg == "-h") {
      std::cout << kUsage;
      std::exit(0);
    }
    if (arg.rfind("--", 0) != 0) throw dtsim::ConfigError("dtsim-gui: unexpected argument '" + arg + "'; see --help");
    std::string key = arg.substr(2), value;
    bool has_value = false;
    if (auto eq = key.find('='); eq != std::string::npos) {
      value = key.substr(eq + 1);
      key = key.substr(0, eq);
      has_value = true;
    }
    bool known = false;
    for (const auto& k : kKeys) known = known || k == key;
    if (!known) {
      const std::string hint = dtsim::sim::did_you_mean(key, kKeys);
      throw dtsim::ConfigError("dtsim-gui: unknown option --" + key + (hint.empty() ? "" : " (did you mean --" + hint + "?)") +
                               "; valid: --model, --cluster, --plan, --profile, --measured, --set, --screenshot, --tab");
    }
    if (!has_value) {
      if (i + 1 >= argc) throw dtsim::ConfigError("dtsim-gui: --" + key + ": missing value");
      value = argv[++i];
    }
    if (key == "set") {
      a.sets.push_back(dtsim::sim::parse_override(value));
    } else {
      a.values[key] = value;
    }
  }
  return a;
}

std::string get(const Args& a, const std::string& k, const std::string& fallback) {
  auto it = a.values.find(k);
  return it == a.values.end() ? fallback : it->second;
}

}  // namespace

int main(int argc, char** argv) {
  Args args;
  dtsim::gui::Scenario scenario;
  try {
    args = parse(argc, argv);
    scenario = dtsim::gui::load_scenario(get(args, "model", "gpt2"), get(args, "cluster", "dgx-a100"),
                                         get(args, "plan", "ddp"), get(args, "profile", ""), args.sets);
    if (args.values.count("measured")) dtsim::gui::load_measured(args.values["measured"]);  // fail early, in one line
  } catch (const dtsim::Error& e) {
    std::cerr << "dtsim-gui: " << e.what() << "\n";
    return 2;
  }
  const bool screenshot = args.values.count("screenshot") > 0;
  // A screenshot needs no display: render offscreen unless told otherwise.
  if (screenshot && std::getenv("QT_QPA_PLATFORM") == nullptr) setenv("QT_QPA_PLATFORM", "offscreen", 1);
  QApplication app(argc, argv);
  QApplication::setApplicationName("dtsim explorer");
  dtsim::gui::ExplorerWindow window;
  window.set_scenario(std::move(scenario));
  if (args.values.count("measured")) window.open_measured(QString::fromStdString(args.values["measured"]));
  const std::string tab = get(args, "tab", "explorer");
  const std::map<std::string, int> tabs = {{"explorer", 0}, {"compare", 1}, {"search", 2}};
  if (!tabs.count(tab)) {
    std::cerr << "dtsim-gui: --tab " << tab << ": valid: explorer, compare, search\n";
    return 2;
  }
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
    const QString file = QString::fromStdString(args.values["screenshot"]);
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
