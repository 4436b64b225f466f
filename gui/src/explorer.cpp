#include "dtsim/gui/explorer.hpp"

#include <algorithm>
#include <array>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <exception>
#include <tuple>

#include <yaml-cpp/yaml.h>

#include "dtsim/models/models.hpp"
#include "dtsim/sim/config_io.hpp"
#include "dtsim/sim/error.hpp"
#include "dtsim/sim/rules.hpp"
#include "dtsim/sim/profile.hpp"

namespace dtsim::gui {

Scenario load_scenario(const std::string& model, const std::string& cluster, const std::string& plan,
                       const std::string& profile, const std::vector<sim::Override>& overrides) {
  Scenario s;
  s.model_source = model;
  s.cluster_source = cluster;
  s.plan_source = plan;
  s.profile_source = profile;
  s.model = models::load_model(model, overrides);
  s.cluster = sim::load_cluster(cluster, overrides);
  s.plan = sim::load_plan(plan, overrides);
  if (!profile.empty()) s.profile = std::make_shared<const sim::ProfileCosts>(sim::load_profile(profile));
  return s;
}

Outcome evaluate(const Scenario& s, std::uint64_t generation) {
  Outcome o;
  o.generation = generation;
  if (!s.model) {
    o.error = "no model loaded";
    return o;
  }
  sim::PredictOptions po;
  po.keep_graph = true;   // the timeline draws the spans
  po.trace_detail = false;  // but not their names or memory counters
  po.profile = s.profile;
  try {
    auto p = std::make_shared<const sim::Prediction>(sim::predict(*s.model, s.plan, s.cluster, po));
    o.timeline = std::make_shared<const std::vector<GanttRow>>(gantt_rows(*p));
    o.prediction = std::move(p);
  } catch (const Error& e) {
    o.error = e.what();
  } catch (const std::bad_alloc&) {
    o.error = "out of memory simulating this plan";
  } catch (const std::exception& e) {
    o.error = std::string("internal error: ") + e.what();
  }
  return o;
}

KnobChoices knob_choices(const sim::Model& model, const sim::ClusterSpec& cluster, int tp, int pp, int cp,
                         std::int64_t seq_len, int dp, int etp, sim::Attention attention, sim::Precision precision) {
  // Every list is the rules table's (sim/rules.hpp), as resolve checks it.
  const sim::PlanRules rules(model, cluster);
  KnobChoices c;
  c.tp = rules.tp_values();
  c.pp = rules.pp_values(tp);
  if (c.pp.empty()) c.pp = {1};
  c.cp = rules.cp_values(tp, seq_len > 0 ? seq_len : rules.max_seq_len());
  c.dp = rules.dp_values(tp, pp > 0 ? pp : 1, cp > 0 ? cp : 1);
  if (c.dp.empty()) c.dp = {1};
  // ep with the data-parallel degree resolve would take: dp 0 is what tp x
  // pp x cp leave of the GPUs; etp 0 is tp (Megatron-Core's default).
  const int fixed = std::max(1, tp) * std::max(1, pp) * std::max(1, cp);
  const int replicas = dp > 0 ? dp : std::max(1, rules.gpus() / fixed);
  c.etp = rules.etp_values(tp);
  c.ep = rules.ep_values(tp, cp > 0 ? cp : 1, replicas, etp > 0 ? etp : tp);
  if (c.ep.empty()) c.ep = {1};
  c.experts = model.experts() > 0;
  c.dispatchers = rules.dispatchers();
  c.cp_comms = rules.cp_comms(cp);
  c.loss_parallels = rules.loss_parallels(tp);
  c.attentions = rules.attentions();
  c.precisions = rules.precisions();
  c.kernels = rules.kernels();
  c.fp8_recipes = rules.fp8_recipes(precision);
  c.max_virtual_stages = std::max(1, rules.layers() / std::max(1, pp));
  c.sequence_parallel = rules.sequence_parallel_values(tp, std::max(1, cp), seq_len).size() > 1;
  c.sync_batchnorm = rules.sync_batchnorm_allowed();
  for (sim::Recompute r : rules.recomputes()) {
    if (r != sim::Recompute::kOp ||
        rules.op_recompute_allowed(std::max(1, tp), std::max(1, cp), rules.flash_attention(attention, precision))) {
      c.recomputes.push_back(r);
    }
  }
  return c;
}

const char* to_string(GanttKind k) {
  switch (k) {
    case GanttKind::kForward: return "forward";
    case GanttKind::kBackward: return "backward";
    case GanttKind::kRecompute: return "recompute";
    case GanttKind::kOptimizer: return "optimizer";
    case GanttKind::kComm: return "communication";
    case GanttKind::kOffload: return "offload";
    case GanttKind::kBubble: return "bubble / idle";
  }
  return "?";
}

namespace {

enum Lane { kComputeLane, kCommLane, kHostLane, kLanes };

Lane lane_of(const std::string& name) {
  const auto stream = sim::stream_from_string(name);
  if (stream == sim::Stream::kCompute) return kComputeLane;
  if (stream == sim::Stream::kHost || stream == sim::Stream::kD2H || stream == sim::Stream::kH2D) return kHostLane;
  return kCommLane;
}

GanttKind kind_of(sim::Phase p, Lane lane) {
  switch (p) {
    case sim::Phase::kForward: return GanttKind::kForward;
    case sim::Phase::kBackward: return GanttKind::kBackward;
    case sim::Phase::kRecompute: return GanttKind::kRecompute;
    case sim::Phase::kOptimizer: return GanttKind::kOptimizer;
    case sim::Phase::kComm: return GanttKind::kComm;
    case sim::Phase::kOffload: return GanttKind::kOffload;
    case sim::Phase::kBubble: return GanttKind::kBubble;
    case sim::Phase::kOther: break;
  }
  return lane == kComputeLane ? GanttKind::kOptimizer : lane == kHostLane ? GanttKind::kOffload : GanttKind::kComm;
}

/// Sorts and merges intervals that overlap or touch. The bars come a stream
/// after another, each stream's in order (a stream runs its tasks one after
/// another), so they are a few sorted runs: merged in place where they are
/// (gpt-175b's 56k tasks: a third of gantt_rows' instructions went to
/// sorting them), sorted only where there are many.
void merge(std::vector<GanttBar>& bars) {
  constexpr std::size_t kMaxRuns = 16;
  auto by_start = [](const GanttBar& a, const GanttBar& b) { return a.start < b.start; };
  std::vector<std::size_t> run_starts;
  for (std::size_t i = 1; i < bars.size() && run_starts.size() <= kMaxRuns; ++i) {
    if (bars[i].start < bars[i - 1].start) run_starts.push_back(i);
  }
  if (run_starts.size() > kMaxRuns) {
    std::sort(bars.begin(), bars.end(), by_start);
  } else {
    run_starts.push_back(bars.size());
    for (std::size_t k = 0; k + 1 < run_starts.size(); ++k) {
      std::inplace_merge(bars.begin(), bars.begin() + static_cast<std::ptrdiff_t>(run_starts[k]),
                         bars.begin() + static_cast<std::ptrdiff_t>(run_starts[k + 1]), by_start);
    }
  }
  std::size_t kept = 0;
  for (const GanttBar& b : bars) {
    if (b.end <= b.start) continue;
    if (kept > 0 && b.start <= bars[kept - 1].end) {
      bars[kept - 1].end = std::max(bars[kept - 1].end, b.end);
    } else {
      bars[kept++] = b;
    }
  }
  bars.resize(kept);
}

}  // namespace

std::vector<GanttRow> gantt_rows(const sim::Prediction& p) {
  const sim::TaskGraph& g = p.graph;
  const sim::ExecResult& x = p.exec;
  if (x.spans.size() != g.tasks.size()) {
    throw UnsupportedError("the timeline needs a prediction made with keep_graph");
  }
  // rows[rank][lane]
  std::vector<std::array<GanttRow, kLanes>> rows(g.ranks.size());
  static const char* kLaneNames[kLanes] = {"", " comm", " host"};
  for (std::size_t r = 0; r < g.ranks.size(); ++r) {
    for (int l = 0; l < kLanes; ++l) {
      rows[r][l].stage = g.ranks[r].stage;
      rows[r][l].compute = l == kComputeLane;
      rows[r][l].label = "S" + std::to_string(g.ranks[r].stage) + kLaneNames[l];
    }
  }
  // Each (rank, stream)'s lane, once (a pipeline's timeline is tens of
  // thousands of tasks on a few streams).
  std::vector<std::vector<Lane>> lanes(g.ranks.size());
  for (std::size_t r = 0; r < g.ranks.size(); ++r) {
    for (const std::string& s : g.ranks[r].streams) lanes[r].push_back(lane_of(s));
  }
  // The tasks stream by stream, each stream's in its order (merge()).
  std::vector<std::size_t> first(g.ranks.size() + 1, 0);  // a rank's streams' first slot
  for (std::size_t r = 0; r < g.ranks.size(); ++r) first[r + 1] = first[r] + std::max<std::size_t>(1, g.ranks[r].streams.size());
  auto slot = [&](const sim::Task& t) {
    const std::size_t streams = first[t.rank + 1] - first[t.rank];
    return first[t.rank] + std::min(static_cast<std::size_t>(std::max(0, t.stream)), streams - 1);
  };
  std::vector<std::uint32_t> at(first.back() + 1, 0);
  for (const sim::Task& t : g.tasks) ++at[slot(t) + 1];
  for (std::size_t k = 1; k < at.size(); ++k) at[k] += at[k - 1];
  std::vector<std::uint32_t> order(g.tasks.size());
  for (std::size_t i = 0; i < g.tasks.size(); ++i) order[at[slot(g.tasks[i])]++] = static_cast<std::uint32_t>(i);
  for (const std::uint32_t i : order) {
    const sim::Task& t = g.tasks[i];
    const auto& by_stream = lanes[t.rank];
    const Lane lane = t.stream < static_cast<int>(by_stream.size()) ? by_stream[t.stream] : kComputeLane;
    const GanttKind k = kind_of(t.phase, lane);
    rows[t.rank][lane].bars[static_cast<int>(k)].push_back({x.spans[i].start, x.spans[i].end});
  }
  std::vector<GanttRow> out;
  for (auto& lanes : rows) {
    for (int l = 0; l < kLanes; ++l) {
      GanttRow& row = lanes[l];
      bool any = false;
      for (auto& bars : row.bars) {
        merge(bars);
        any = any || !bars.empty();
      }
      if (l == kComputeLane) {
        // The compute lane's gaps up to the makespan: waiting on a
        // collective, or the pipeline bubble.
        std::vector<GanttBar> busy;
        for (const auto& bars : row.bars) busy.insert(busy.end(), bars.begin(), bars.end());
        merge(busy);
        std::vector<GanttBar>& idle = row.bars[static_cast<int>(GanttKind::kBubble)];
        TimeNs at = 0;
        for (const GanttBar& b : busy) {
          if (b.start > at) idle.push_back({at, b.start});
          at = std::max(at, b.end);
        }
        if (x.makespan > at) idle.push_back({at, x.makespan});
        merge(idle);
        out.push_back(std::move(row));
      } else if (any) {
        out.push_back(std::move(row));
      }
    }
  }
  return out;
}

// Note [Timeline level of detail]
// A 3D-parallel iteration runs tens of thousands of tasks; drawn one polygon
// each, the timeline took ~1 s to paint (bench/gui_speed.cpp) and froze the
// window. So the lane is cut into `bins` columns over the visible range
// (one a pixel), and each column stacks the kinds that ran in it, bottom up
// in the legend's order, each as tall as the share of the column it filled,
// rounded to eighths of the lane's height (cumulatively, so the stack never
// overfills); equal neighbours merge. A column where a 1F1B steady state
// runs forwards a third of the time and backwards the rest shows both, a
// third and two thirds high, where showing each column's commonest kind
// alone painted a whole pipeline backward; a comm lane busy a fifth of the
// time shows a quarter-high band, and a kind under a sixteenth of a column
// shows nothing. Zooming redraws from the exact rows at the new range, so
// detail reappears as it fits.
GanttRow level_of_detail(const GanttRow& row, TimeNs lo, TimeNs hi, int bins) {
  GanttRow out;
  out.label = row.label;
  out.stage = row.stage;
  out.compute = row.compute;
  if (hi <= lo || bins < 1) return out;
  std::size_t in_range = 0;
  for (const auto& bars : row.bars) {
    for (const GanttBar& b : bars) in_range += b.end > lo && b.start < hi;
  }
  if (in_range * 2 <= static_cast<std::size_t>(bins)) {
    // Few enough to draw exactly.
    for (int k = 0; k < kGanttKinds; ++k) {
      for (const GanttBar& b : row.bars[k]) {
        if (b.end > lo && b.start < hi) out.bars[k].push_back({std::max(b.start, lo), std::min(b.end, hi)});
      }
    }
    return out;
  }
  const double width = static_cast<double>(hi - lo) / bins;
  std::vector<std::array<double, kGanttKinds>> cover(static_cast<std::size_t>(bins));
  for (auto& c : cover) c.fill(0);
  for (int k = 0; k < kGanttKinds; ++k) {
    for (const GanttBar& b : row.bars[k]) {
      const double s = static_cast<double>(std::max(b.start, lo) - lo);
      const double e = static_cast<double>(std::min(b.end, hi) - lo);
      if (e <= s) continue;
      const int first = std::min(bins - 1, static_cast<int>(s / width));
      const int last = std::min(bins - 1, static_cast<int>(e / width));
      for (int i = first; i <= last; ++i) {
        const double bin_lo = i * width, bin_hi = (i + 1) * width;
        cover[i][k] += std::max(0.0, std::min(e, bin_hi) - std::max(s, bin_lo));
      }
    }
  }
  constexpr int kSteps = 8;  // a lane's height in eighths
  // Per kind, the run being built: its band in eighths (lo == hi: none).
  struct Run {
    int lo = 0, hi = 0, start = 0;
  };
  std::array<Run, kGanttKinds> run{};
  auto at = [&](int bin) { return bin >= bins ? hi : lo + static_cast<TimeNs>(bin * width); };
  auto close = [&](int k, int end_bin) {
    const Run& r = run[k];
    if (r.hi > r.lo) {
      out.bars[k].push_back({at(r.start), at(end_bin), static_cast<float>(r.lo) / kSteps, static_cast<float>(r.hi) / kSteps});
    }
  };
  for (int i = 0; i < bins; ++i) {
    double filled = 0;
    int below = 0;
    for (int k = 0; k < kGanttKinds; ++k) {
      filled += std::min(1.0, cover[i][k] / width);
      const int top = std::min(kSteps, static_cast<int>(std::lround(filled * kSteps)));
      if (below != run[k].lo || top != run[k].hi) {
        close(k, i);
        run[k] = {below, top, i};
      }
      below = top;
    }
  }
  for (int k = 0; k < kGanttKinds; ++k) close(k, bins);
  return out;
}

std::vector<std::size_t> pareto_front(const std::vector<Pinned>& pins) {
  std::vector<std::size_t> order(pins.size());
  for (std::size_t i = 0; i < order.size(); ++i) order[i] = i;
  std::sort(order.begin(), order.end(), [&](std::size_t a, std::size_t b) {
    return std::tie(pins[a].iteration_time, pins[a].peak, a) < std::tie(pins[b].iteration_time, pins[b].peak, b);
  });
  std::vector<std::size_t> front;
  for (std::size_t i : order) {
    // Sorted by time, a pin is on the front if it needs less memory than
    // every faster one (an equal pair is kept once, the first pinned).
    if (front.empty() || pins[i].peak < pins[front.back()].peak) front.push_back(i);
  }
  return front;
}

namespace {

std::string csv_field(const std::string& s) {
  if (s.find_first_of(",\"\n\r") == std::string::npos) return s;
  std::string out = "\"";
  for (char c : s) {
    if (c == '"') out += '"';
    out += c;
  }
  return out + "\"";
}

std::string num(double v, int digits) {
  char buf[64];
  std::snprintf(buf, sizeof buf, "%.*f", digits, v);
  return buf;
}

}  // namespace

std::string pins_to_csv(const std::vector<Pinned>& pins) {
  std::string out = "label,model,cluster,plan,iteration_time_ms,tokens_per_s,mfu,peak_GiB,fits,pareto\n";
  const std::vector<std::size_t> front = pareto_front(pins);
  for (std::size_t i = 0; i < pins.size(); ++i) {
    const Pinned& p = pins[i];
    const bool on_front = std::find(front.begin(), front.end(), i) != front.end();
    out += csv_field(p.label) + "," + csv_field(p.model) + "," + csv_field(p.cluster) + "," + csv_field(p.plan) + "," +
           num(static_cast<double>(p.iteration_time) / 1e6, 6) + "," + num(p.tokens_per_s, 1) + "," + num(p.mfu, 4) +
           "," + num(static_cast<double>(p.peak) / kGiB, 4) + "," + (p.fits ? "true" : "false") + "," +
           (on_front ? "true" : "false") + "\n";
  }
  return out;
}

std::string plan_label(const sim::ResolvedPlan& p) {
  std::string s = "dp" + std::to_string(p.dp) + " tp" + std::to_string(p.tp) + " pp" + std::to_string(p.pp);
  if (p.pp > 1) {
    s += std::string(" ") + sim::to_string(p.schedule);
    if (p.virtual_stages > 1) s += " v" + std::to_string(p.virtual_stages);
  }
  if (p.fsdp) {
    s += std::string(" fsdp-") + sim::to_string(p.spec.fsdp);
  } else if (p.zero_stage > 0) {
    s += " zero" + std::to_string(p.zero_stage);
    if (p.zero1_gathers_in_forward()) s += "-fwd-gather";  // Note [Overlapped parameter gather]
  }
  if (p.offload_params == sim::Offload::kCpu) {
    s += " offload-opt+param";
  } else if (p.offload_optimizer == sim::Offload::kCpu) {
    s += " offload-opt";
  }
  if (p.recompute_blocks > 0) {
    s += " rc-block" + std::to_string(p.recompute_blocks);  // Note [Block recompute]
  } else if (p.recompute != sim::Recompute::kNone) {
    s += std::string(" rc-") + sim::to_string(p.recompute);
  }
  if (p.cp > 1) {
    s += " cp" + std::to_string(p.cp);
    if (p.cp_comm != sim::CpComm::kP2p) s += std::string("-") + sim::to_string(p.cp_comm);
  }
  if (p.ep > 1) {
    s += " ep" + std::to_string(p.ep);
    if (p.etp != p.tp) s += "-etp" + std::to_string(p.etp);
    if (p.overlap_moe_expert_parallel_comm) s += "+overlap";  // Note [Expert-parallel overlap]
  }
  if (p.sequence_parallel) s += p.tp_comm_overlap ? " sp+overlap" : " sp";
  if (p.tp > 1 && p.spec.loss_parallel != sim::LossParallel::kAuto) s += std::string(" loss-") + sim::to_string(p.spec.loss_parallel);
  if (p.spec.attention != sim::Attention::kAuto) s += std::string(" ") + sim::to_string(p.spec.attention);
  s += " mb" + std::to_string(p.micro_batch) + "x" + std::to_string(p.grad_accum) + " " + sim::to_string(p.precision);
  if (p.fp8_recipe != sim::Fp8Recipe::kDelayed) s += std::string("-") + sim::to_string(p.fp8_recipe);  // Note [FP8 training]
  if (p.kernels == sim::Kernels::kFused) s += " fused";                 // Note [Fused kernels]
  if (p.spec.placement != "tp,pp,dp") s += " [" + p.spec.placement + "]";  // else two plans would read the same
  return s;
}

std::vector<std::size_t> distinct_plans(const std::vector<sim::SearchEntry>& entries, std::size_t keep) {
  std::vector<std::size_t> out;
  for (std::size_t i = 0; i < entries.size() && out.size() < keep; ++i) {
    bool seen = false;
    for (std::size_t j : out) seen = seen || sim::same_plan(entries[j], entries[i]);
    if (!seen) out.push_back(i);
  }
  return out;
}

double nice_tick_interval(double span, int max_ticks) {
  if (!(span > 0) || max_ticks < 1) return 1.0;
  const double raw = span / max_ticks;
  double p = std::pow(10.0, std::floor(std::log10(raw)));
  for (;;) {  // 1, 2, 5 x 10^k; the loop absorbs log10's rounding
    for (double m : {1.0, 2.0, 5.0}) {
      if (m * p >= raw * (1 - 1e-12)) return m * p;
    }
    p *= 10;
  }
}

int tick_decimals(double step) {
  if (!(step > 0)) return 0;
  return std::max(0, static_cast<int>(-std::floor(std::log10(step) + 1e-9)));
}

namespace {

double number(const YAML::Node& n, const std::string& file, const std::string& key) {
  try {
    return n.as<double>();
  } catch (const YAML::Exception&) {
    throw ConfigError(file + ":" + std::to_string(n.Mark().line + 1) + ": " + key + ": expected a number");
  }
}

}  // namespace

Measured load_measured(const std::string& path) {
  const YAML::Node root = sim::load_yaml_file(path);
  Measured m;
  m.source = path;
  const YAML::Node meas = root.IsMap() ? root["measured"] : YAML::Node();
  if (!meas || !meas.IsMap()) {
    throw ConfigError(path + ": measured: missing; expected the JSON that `dtsim validate --json` writes, "
                             "with measured.iteration_time_s, measured.phases_s and measured.ranks");
  }
  const YAML::Node it = meas["iteration_time_s"];
  if (!it) throw ConfigError(path + ": measured.iteration_time_s: missing (seconds, or {median: seconds})");
  m.iteration_time_s = it.IsMap() ? number(it["median"], path, "measured.iteration_time_s.median")
                                  : number(it, path, "measured.iteration_time_s");
  if (!(m.iteration_time_s > 0)) {
    throw ConfigError(path + ": measured.iteration_time_s: " + num(m.iteration_time_s, 6) + " s; valid: more than 0");
  }
  if (const YAML::Node ph = meas["phases_s"]; ph && ph.IsMap()) {
    const std::pair<const char*, double*> keys[] = {
        {"forward", &m.forward_s}, {"backward", &m.backward_s}, {"comm_wait", &m.comm_wait_s}, {"optimizer", &m.optimizer_s}};
    for (const auto& [k, dst] : keys) {
      if (ph[k]) *dst = number(ph[k], path, std::string("measured.phases_s.") + k);
    }
  }
  if (const YAML::Node ranks = meas["ranks"]; ranks) {
    if (!ranks.IsSequence()) throw ConfigError(path + ": measured.ranks: expected a list of {rank, peak_bytes}");
    for (std::size_t i = 0; i < ranks.size(); ++i) {
      const std::string k = "measured.ranks[" + std::to_string(i) + "]";
      if (!ranks[i]["rank"] || !ranks[i]["peak_bytes"]) throw ConfigError(path + ": " + k + ": needs rank and peak_bytes");
      m.rank_peaks.emplace_back(static_cast<int>(number(ranks[i]["rank"], path, k + ".rank")),
                                static_cast<Bytes>(number(ranks[i]["peak_bytes"], path, k + ".peak_bytes")));
    }
  }
  if (const YAML::Node partial = meas["partial"]; partial) m.partial = partial.as<bool>(false);
  return m;
}

}  // namespace dtsim::gui
