// dtsim_seeds: the seeds' experiments, our prediction beside each report's
// figure. See examples/README.md for where and why they differ.
#include <cstdio>
#include <iostream>

#include <CLI/CLI.hpp>

#include "dtsim/cli/parse.hpp"
#include "dtsim/sim/error.hpp"
#include "seeds.hpp"

namespace {

void print(const dtsim::examples::Seed& s) {
  std::printf("%s\n  assumed: %s\n\n", s.title.c_str(), s.assumption.c_str());
  const bool epochs = !s.rows.empty() && s.rows.front().iterations > 0;
  std::printf("  %-42s %-46s %12s %12s %10s %6s%s\n", "experiment", "report", "report s/it", "dtsim s/it", "peak GiB", "fits",
              epochs ? "  dtsim s/epoch" : "");
  for (const auto& r : s.rows) {
    const auto& p = r.predicted;
    dtsim::Bytes peak = 0;
    for (const auto& rk : p.ranks) peak = std::max(peak, rk.peak);
    char rep[32] = "-";
    if (r.report_value > 0 && r.report.find("speedup") == std::string::npos) std::snprintf(rep, sizeof rep, "%.3f", r.report_value);
    std::printf("  %-42s %-46s %12s %12.4f %10.2f %6s", r.experiment.c_str(), r.report.c_str(), rep,
                dtsim::ns_to_seconds(p.iteration_time), static_cast<double>(peak) / dtsim::kGiB, p.fits ? "yes" : "NO");
    if (epochs) std::printf("  %13.1f", dtsim::ns_to_seconds(p.iteration_time) * r.iterations);
    std::printf("\n");
  }
  std::printf("\n");
}

}  // namespace

int main(int argc, char** argv) {
  using namespace dtsim::examples;
  CLI::App app{"dtsim_seeds: the seeds' experiments, dtsim's prediction beside each report's figure (examples/README.md)",
               "dtsim_seeds"};
  dtsim::cli::house_style(app);
  if (const int status = dtsim::cli::parse_main(app, argc, argv); status >= 0) return status;
  try {
    print(seed_000());
    print(seed_001());
    const Seed s2 = seed_002();
    print(s2);
    for (std::size_t i = 0; i + 1 < s2.rows.size(); i += 2) {
      const double t1 = dtsim::ns_to_seconds(s2.rows[i].predicted.iteration_time);
      const double t2 = dtsim::ns_to_seconds(s2.rows[i + 1].predicted.iteration_time);
      std::printf("  %-30s epoch speedup on 2 GPUs: report %.2f, dtsim %.2f (= 2 x %.4f / %.4f)\n",
                  s2.rows[i].experiment.c_str(), s2.rows[i + 1].report_value, 2 * t1 / t2, t1, t2);
    }
    std::printf("\n");
    print(seed_003());
    print(seed_004());
  } catch (const dtsim::Error& e) {
    std::cerr << "dtsim_seeds: " << e.what() << "\n";
    return 2;
  }
  return 0;
}
