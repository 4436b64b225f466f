#pragma once
// The what-if explorer's main window: scenario pickers and plan/cluster knobs
// on the left; on the right the headline figures, the time breakdown, the
// per-stage memory, the pipeline timeline, the comparison of pinned scenarios
// and the plan search. Every change is evaluated off the UI thread after a
// short debounce; only the newest answer is drawn.

#include <memory>
#include <string>
#include <vector>

#include <QMainWindow>
#include <QString>

#include "dtsim/gui/explorer.hpp"

QT_BEGIN_NAMESPACE
class QChart;
QT_END_NAMESPACE

namespace dtsim::gui {

class ExplorerWindow : public QMainWindow {
  Q_OBJECT

 public:
  explicit ExplorerWindow(QWidget* parent = nullptr);
  ~ExplorerWindow() override;

  /// Replaces the whole scenario (controls follow it) and evaluates it.
  void set_scenario(Scenario s);
  /// The scenario as the controls have it now.
  const Scenario& scenario() const;

  /// Runs the event loop until the newest request has been answered (or
  /// `timeout_ms` passed); true if it was. For tests and --screenshot.
  bool wait_for_result(int timeout_ms);
  /// The answer drawn last.
  const Outcome& outcome() const;
  /// The message shown in the window's error line ("" when none).
  QString error_text() const;

  /// Loaders behind File > Open; a bad file shows its error in the window and
  /// leaves the scenario as it was. Return whether the file was taken.
  bool open_model(const QString& name_or_path);
  bool open_cluster(const QString& name_or_path);
  bool open_plan(const QString& name_or_path);
  bool open_profile(const QString& path);   ///< "" drops the profile
  bool open_measured(const QString& path);  ///< a validation result to overlay

  /// Charts, for export and tests: "breakdown", "memory", "timeline", "comparison".
  QChart* chart(const QString& name) const;
  /// The timeline's lanes as drawn now, top to bottom: each lane's bars over
  /// the time axis' range at about one a pixel column (level_of_detail).
  const std::vector<GanttRow>& timeline_lanes() const;

  /// Pins the current prediction in the comparison view.
  void pin_current();
  const std::vector<Pinned>& pins() const;
  /// Writes the pinned scenarios as CSV, atomically; false (and the error shown) on failure.
  bool export_pins_csv(const QString& path);
  /// Writes each chart as <dir>/<name>.png; false (and the error shown) on failure.
  bool export_charts_png(const QString& dir);

  /// Starts the search tab's planner on the current model and cluster.
  void start_search();
  /// Runs the event loop until the search ends; true if it did in time.
  bool wait_for_search(int timeout_ms);
  /// Loads the search table's row `row` (0 = fastest; each distinct plan
  /// once, gui::distinct_plans) into the explorer.
  bool load_search_entry(int row);

  /// Renders the window into a PNG written atomically: on a display (X11,
  /// Xvfb) as shown on screen, offscreen as laid out unseen.
  bool save_screenshot(const QString& path);
  /// Runs the event loop until the shown window is exposed on screen and its
  /// layout has settled (or `timeout_ms` passed); true if it was exposed.
  bool wait_for_exposed(int timeout_ms);

 signals:
  /// A new outcome has been drawn.
  void evaluated();
  /// The search finished (or failed; see error_text()).
  void search_finished();

 private:
  struct Impl;
  std::unique_ptr<Impl> d_;
};

}  // namespace dtsim::gui
