// Fitting cost models to measurements, and reading the measurement programs'
// output. See Note [Profile lookups] in sim/src/cost/cost_profile.cpp for how the
// simulator uses the fits.
#include <Eigen/Dense>

#include <algorithm>
#include <cmath>
#include <cstdlib>
#include <map>
#include <set>
#include <sstream>
#include <tuple>

#include "dtsim/calibrate/calibrate.hpp"
#include "dtsim/sim/cost_profile.hpp"
#include "dtsim/sim/error.hpp"

namespace dtsim::calib {
namespace {

void fill_errors(sim::LinearFit& f, const std::vector<std::vector<double>>& rows, const std::vector<double>& y) {
  double sum2 = 0, worst = 0;
  for (std::size_t i = 0; i < rows.size(); ++i) {
    double t = 0;
    for (std::size_t j = 0; j < f.coef.size(); ++j) t += f.coef[j] * rows[i][j];
    const double rel = (t - y[i]) / y[i];
    sum2 += rel * rel;
    worst = std::max(worst, std::abs(rel));
  }
  f.rms_rel_error = rows.empty() ? 0 : std::sqrt(sum2 / static_cast<double>(rows.size()));
  f.max_rel_error = worst;
  f.samples = static_cast<int>(rows.size());
}

}  // namespace

sim::LinearFit fit_linear(const std::vector<std::string>& features, const std::vector<std::vector<double>>& rows,
                          const std::vector<double>& seconds) {
  sim::LinearFit f;
  f.features = features;
  f.coef.assign(features.size(), 0.0);
  std::vector<std::size_t> samples;
  for (std::size_t i = 0; i < rows.size(); ++i) {
    if (seconds[i] > 0 && std::isfinite(seconds[i])) samples.push_back(i);
  }
  std::vector<bool> active(features.size(), true);
  // Active-set non-negative least squares: drop the most negative
  // coefficient's feature and refit until all are >= 0 (at most one pass per
  // feature; Lawson & Hanson's NNLS without re-adding, enough for 2-4 features).
  for (std::size_t pass = 0; pass <= features.size(); ++pass) {
    std::vector<std::size_t> cols;
    for (std::size_t j = 0; j < features.size(); ++j) {
      if (active[j]) cols.push_back(j);
    }
    if (cols.empty() || samples.size() < cols.size()) break;
    // Scale columns to unit norm so bytes (1e9) and the intercept (1) condition well.
    Eigen::MatrixXd a(samples.size(), cols.size());
    Eigen::VectorXd b(samples.size());
    for (std::size_t r = 0; r < samples.size(); ++r) {
      const std::size_t i = samples[r];
      for (std::size_t c = 0; c < cols.size(); ++c) a(r, c) = rows[i][cols[c]] / seconds[i];
      b(r) = 1.0;
    }
    Eigen::VectorXd scale = a.colwise().norm().transpose();
    for (Eigen::Index c = 0; c < scale.size(); ++c) {
      if (scale(c) == 0) scale(c) = 1;
      a.col(c) /= scale(c);
    }
    const Eigen::VectorXd x = a.colPivHouseholderQr().solve(b).cwiseQuotient(scale);
    std::size_t worst = cols.size();
    for (std::size_t c = 0; c < cols.size(); ++c) {
      if (x(static_cast<Eigen::Index>(c)) < 0 && (worst == cols.size() || x(static_cast<Eigen::Index>(c)) < x(static_cast<Eigen::Index>(worst)))) worst = c;
    }
    if (worst == cols.size()) {
      std::fill(f.coef.begin(), f.coef.end(), 0.0);
      for (std::size_t c = 0; c < cols.size(); ++c) f.coef[cols[c]] = x(static_cast<Eigen::Index>(c));
      break;
    }
    active[cols[worst]] = false;
  }
  std::vector<std::vector<double>> used;
  std::vector<double> y;
  for (std::size_t i : samples) {
    used.push_back(rows[i]);
    y.push_back(seconds[i]);
  }
  fill_errors(f, used, y);
  return f;
}

sim::LinearFit fit_alpha_beta(const std::vector<double>& bytes, const std::vector<double>& seconds) {
  std::vector<std::vector<double>> rows;
  rows.reserve(bytes.size());
  for (double b : bytes) rows.push_back({1.0, b});
  return fit_linear({"1", "bytes"}, rows, seconds);
}

// Note [Interference fit]
// What dtsim_interference_bench measured (Note [Measuring interference])
// becomes two numbers the simulator's Note [Interference] applies in place
// of its priors (sim::ProfileCosts::calibrate_interference):
//  - "interference.compute", feature "prior": k, the compute-bound
//    kernels' slowdown over the prior's f / (1 - f), f the share of the
//    SMs the channels take (Note [Interference prior]): the median over
//    the "gemm" records of (beside / alone - 1) / (f / (1 - f)). A median
//    of ratios, not a least-squares line: a GEMM loses SMs in steps (its
//    tiles run in waves, a wave per the SMs free), so on the H200 of
//    docs/validation-gpu.md a 4096^3 product lost 42% beside 8 channels
//    where an 8192^3 one lost 23%, both about a third from 12 to 28, and
//    the 8192^3 one 93% beside 48; the median of the sweep is the
//    slowdown over the channel counts NCCL runs, not any one product's
//    wave, nor the line the 48-channel points would pull.
//  - "interference.memory", feature "hbm_share": m, the memory-bound
//    kernels' slowdown over the prior's h / (1 - h), h = proxy_Bps /
//    hbm_Bps the share of the HBM's rate the stand-in took while the
//    kernel ran: least squares through the origin over the "stream"
//    records (there the ratio was steady, 1.05 to 1.08).
// Each fit's errors are those of the time beside the stand-in each record
// predicts (alone x (1 + the slowdown)) against the time measured.
namespace {

void fit_interference(sim::Profile& p) {
  std::vector<double> ratios;
  std::vector<std::pair<double, double>> gemm, stream;  // (prior's ratio, slowdown measured)
  for (const auto& x : p.interference) {
    const double slowdown = x.beside_s / x.alone_s - 1;
    if (x.victim == "gemm") {
      const double f = static_cast<double>(x.channels) / x.sms;
      gemm.push_back({f / (1 - f), slowdown});
      ratios.push_back(slowdown / (f / (1 - f)));
    } else if (const double h = x.proxy_Bps / x.hbm_Bps; h < 0.9) {
      // (A stand-in that moved about as much as the triad alone reached is
      // past what h / (1 - h) can say; left out.)
      stream.push_back({h / (1 - h), slowdown});
    }
  }
  const auto errors = [](sim::LinearFit& fit, const std::vector<std::pair<double, double>>& xy) {
    double sum2 = 0, worst = 0;
    for (const auto& [x, y] : xy) {
      const double e = (1 + fit.coef[0] * x) / (1 + y) - 1;
      sum2 += e * e;
      worst = std::max(worst, std::abs(e));
    }
    fit.rms_rel_error = std::sqrt(sum2 / static_cast<double>(xy.size()));
    fit.max_rel_error = worst;
    fit.samples = static_cast<int>(xy.size());
  };
  if (!ratios.empty()) {
    std::sort(ratios.begin(), ratios.end());
    const std::size_t n = ratios.size();
    sim::LinearFit fit;
    fit.features = {"prior"};
    fit.coef = {n % 2 ? ratios[n / 2] : 0.5 * (ratios[n / 2 - 1] + ratios[n / 2])};
    errors(fit, gemm);
    p.fits["interference.compute"] = fit;
  }
  double sxy = 0, sxx = 0;
  for (const auto& [x, y] : stream) {
    sxy += x * y;
    sxx += x * x;
  }
  if (sxx > 0) {
    sim::LinearFit fit;
    fit.features = {"hbm_share"};
    fit.coef = {std::max(0.0, sxy / sxx)};
    errors(fit, stream);
    p.fits["interference.memory"] = fit;
  }
}

}  // namespace

void fit_profile(sim::Profile& p) {
  p.fits.clear();
  // Kernels: per class and precision.
  std::map<std::pair<std::string, sim::Precision>, std::vector<const sim::KernelSample*>> kernels;
  for (const auto& k : p.kernels) kernels[{k.kind, k.precision}].push_back(&k);
  for (const auto& [key, ks] : kernels) {
    // grouped_gemm: batched GEMMs of equal groups, a mixture of experts'
    // (Note [Grouped GEMMs] in sim/src/cost/cost_profile.cpp).
    const bool matmul = key.first == "gemm" || key.first == "attention" || key.first == "grouped_gemm";
    // The optimizer step and the gradient buckets' copies: a cost per tensor
    // (its launches) and per parameter.
    const bool optimizer = key.first == "adam" || key.first == "sgd" || key.first == "bucket_in" || key.first == "bucket_out";
    const std::vector<std::string> features =
        matmul      ? std::vector<std::string>{"1", "flops", "mn", "bytes"}
        : optimizer ? std::vector<std::string>{"tensors", "params"}
                    : (key.first == "norm" ? std::vector<std::string>{"1", "bytes", "flops"} : std::vector<std::string>{"1", "bytes"});
    std::vector<std::vector<double>> rows;
    std::vector<double> y;
    for (const auto* k : ks) {
      const double mn = static_cast<double>(k->m) * static_cast<double>(k->n) * static_cast<double>(std::max<std::int64_t>(1, k->batch));
      if (optimizer) {
        rows.push_back({static_cast<double>(k->n), static_cast<double>(k->m)});
      } else if (matmul) {
        rows.push_back({1.0, k->flops, mn, k->bytes});
      } else if (key.first == "norm") {
        rows.push_back({1.0, k->bytes, k->flops});
      } else {
        rows.push_back({1.0, k->bytes});
      }
      y.push_back(k->time.median_s);
    }
    if (rows.size() < features.size() + 1) continue;  // too few to fit honestly
    p.fits[sim::kernel_fit_name(key.first, key.second)] = fit_linear(features, rows, y);
  }
  // Collectives: per backend, op and rank count.
  // Note [A collective costs its mean]
  // Layers are fitted to medians: their times are tight. Collectives over
  // a loopback TCP are not: through c10d's Gloo on the CI machine a 16 MiB
  // all-gather took a median of 10 ms with one iteration in ten over 89 ms,
  // and a 1 MiB one 1 ms with a tenth over 4.8 ms. A training step pays every
  // collective it issues, slow ones included, so a collective is fitted to
  // its mean where the program measured one, and to its median otherwise.
  // (The simulator prices the measured sizes themselves at their medians and
  // counts the slow runs apart, as a median step meets them: Note [A
  // collective's stalls] in sim/src/cost/cost_profile.cpp. This fit is what
  // `profile show` prints and what prices a profile without its samples.)
  // Ranks spanning nodes (imported nccl-tests runs) apart, by ranks per node
  // (Note [Collectives across nodes] in sim/src/cost/cost_profile.cpp).
  std::map<std::tuple<std::string, sim::CollectiveOp, int, int>, std::pair<std::vector<double>, std::vector<double>>> comm;
  for (const auto& c : p.comm) {
    const int per_node = c.ranks_per_node > 0 && c.ranks_per_node < c.ranks ? c.ranks_per_node : 0;
    auto& [xs, ys] = comm[{c.backend, c.op, c.ranks, per_node}];
    xs.push_back(static_cast<double>(c.bytes));
    ys.push_back(c.time.mean_s > 0 ? c.time.mean_s : c.time.median_s);
  }
  for (const auto& [key, v] : comm) {
    if (v.first.size() < 3) continue;
    p.fits[sim::comm_fit_name(std::get<0>(key), std::get<1>(key), std::get<2>(key), std::get<3>(key))] = fit_alpha_beta(v.first, v.second);
  }
  fit_interference(p);
  // Copies: per direction.
  std::map<std::string, std::pair<std::vector<double>, std::vector<double>>> copies;
  for (const auto& c : p.copies) {
    copies[c.direction].first.push_back(static_cast<double>(c.bytes));
    copies[c.direction].second.push_back(c.time.median_s);
  }
  for (const auto& [dir, v] : copies) {
    if (v.first.size() < 3) continue;
    p.fits[sim::copy_fit_name(dir)] = fit_alpha_beta(v.first, v.second);
  }
}

// ---- the measurement programs' lines --------------------------------------------

namespace {

std::vector<std::string> split_tabs(const std::string& line) {
  std::vector<std::string> out;
  std::string cur;
  for (char c : line) {
    if (c == '\t') {
      out.push_back(cur);
      cur.clear();
    } else if (c != '\r' && c != '\n') {
      cur += c;
    }
  }
  out.push_back(cur);
  return out;
}

class Fields {
 public:
  Fields(std::vector<std::string> f, std::string source, std::string line)
      : f_(std::move(f)), source_(std::move(source)), line_(std::move(line)) {}
  [[noreturn]] void fail(const std::string& why) const {
    throw CalibrationError(source_ + ": " + why + " in line '" + line_ + "'");
  }
  void expect(std::size_t n) const {
    if (f_.size() != n) fail("expected " + std::to_string(n) + " tab-separated fields, got " + std::to_string(f_.size()));
  }
  std::size_t size() const { return f_.size(); }
  const std::string& str(std::size_t i) const { return f_.at(i); }
  double num(std::size_t i) const {
    try {
      std::size_t used = 0;
      const double v = std::stod(f_.at(i), &used);
      if (used != f_[i].size() || !std::isfinite(v)) fail("field " + std::to_string(i + 1) + " '" + f_[i] + "' is not a number");
      return v;
    } catch (const std::logic_error&) {
      fail("field " + std::to_string(i + 1) + " '" + f_.at(i) + "' is not a number");
    }
  }
  std::int64_t integer(std::size_t i) const {
    const double v = num(i);
    if (v != std::floor(v) || v < 0) fail("field " + std::to_string(i + 1) + " '" + f_[i] + "' is not a count");
    return static_cast<std::int64_t>(v);
  }
  sim::Timing timing(std::size_t i, std::size_t reps) const {
    sim::Timing t{num(i), num(i + 1), num(i + 2), static_cast<int>(integer(reps))};
    if (t.median_s < 0 || t.min_s < 0 || t.max_s < 0) fail("negative time");
    return t;
  }
  sim::Precision precision(std::size_t i) const {
    const auto& s = str(i);
    if (s == "fp32") return sim::Precision::kFp32;
    if (s == "fp16") return sim::Precision::kFp16;
    if (s == "bf16") return sim::Precision::kBf16;
    if (s == "fp8") return sim::Precision::kFp8;
    fail("precision '" + s + "' is not one of fp32, fp16, bf16, fp8");
  }

 private:
  std::vector<std::string> f_;
  std::string source_, line_;
};

}  // namespace

int keep_slowest(sim::Profile& p, const sim::Profile& other) {
  using LayerKey = std::tuple<std::string, sim::Precision, std::int64_t, std::int64_t>;
  using KernelKey = std::tuple<std::string, sim::Precision, std::int64_t, std::int64_t, std::int64_t, std::int64_t>;
  std::map<LayerKey, const sim::LayerSample*> layers;
  for (const auto& s : other.layers) layers[{s.signature, s.precision, s.micro_batch, s.seq_len}] = &s;
  std::map<KernelKey, const sim::KernelSample*> kernels;
  for (const auto& s : other.kernels) kernels[{s.kind, s.precision, s.m, s.n, s.k, s.batch}] = &s;
  int taken = 0;
  auto slower = [&](sim::Timing& mine, const sim::Timing& theirs) {
    if (theirs.median_s <= mine.median_s) return false;
    mine = theirs;
    return true;
  };
  // Note [A step's pair from one copy]
  // A layer in a step is priced by its time in the chained step over its
  // time alone in the loop beside it (Note [Layers in a step] in
  // sim/src/cost/cost_profile.cpp), and every copy times both. Taken
  // record by record, the slower of each, the ratio could set one copy's
  // step against the other copy's loop: each the slower of two noisy
  // readings, the ratio of two maxima (in one seed 003 calibration on the
  // AMD VM 140 of 202 layer records took the other copy's time). So a
  // "|loop" record goes with its "|in-step" record, pass by pass: the
  // copy whose in-step pass was slower gives both.
  static const std::string kLoop = "|loop", kInStep = "|in-step";
  const auto base_of = [](const std::string& s, const std::string& tail) { return s.substr(0, s.size() - tail.size()); };
  std::map<LayerKey, sim::LayerSample*> my_loops;
  std::set<LayerKey> my_steps;
  for (auto& s : p.layers) {
    if (s.signature.ends_with(kLoop)) my_loops[{base_of(s.signature, kLoop), s.precision, s.micro_batch, s.seq_len}] = &s;
    if (s.signature.ends_with(kInStep)) my_steps.insert({base_of(s.signature, kInStep), s.precision, s.micro_batch, s.seq_len});
  }
  for (auto& s : p.layers) {
    // A loop with its step's record goes with it (below).
    if (s.signature.ends_with(kLoop) && my_steps.count({base_of(s.signature, kLoop), s.precision, s.micro_batch, s.seq_len})) continue;
    const auto it = layers.find({s.signature, s.precision, s.micro_batch, s.seq_len});
    if (it == layers.end()) continue;
    sim::LayerSample* mine_loop = nullptr;
    const sim::LayerSample* their_loop = nullptr;
    if (s.signature.ends_with(kInStep)) {
      const std::string base = base_of(s.signature, kInStep);
      const auto m = my_loops.find({base, s.precision, s.micro_batch, s.seq_len});
      const auto t = layers.find({base + kLoop, s.precision, s.micro_batch, s.seq_len});
      if (m != my_loops.end() && t != layers.end()) {
        mine_loop = m->second;
        their_loop = t->second;
      }
    }
    // Note [A step's ratio round by round] (torch_bench.cpp): each copy's
    // ratio is of its own rounds, so the copies' are averaged, not taken
    // with the slower step (copies merged one at a time: with two, the
    // mean of the two).
    if (s.signature.ends_with(kInStep) || s.signature.ends_with("|in-dp-step")) {  // Note [Layers in a data-parallel step]
      const auto mean = [](double a, double b) { return a > 0 && b > 0 ? 0.5 * (a + b) : std::max(a, b); };
      s.round_ratio_forward = mean(s.round_ratio_forward, it->second->round_ratio_forward);
      s.round_ratio_backward = mean(s.round_ratio_backward, it->second->round_ratio_backward);
    }
    const bool f = slower(s.forward, it->second->forward);
    const bool b = slower(s.backward, it->second->backward);
    if (f && mine_loop != nullptr) mine_loop->forward = their_loop->forward;
    if (b && mine_loop != nullptr) mine_loop->backward = their_loop->backward;
    taken += (f || b) ? 1 : 0;
  }
  for (auto& s : p.kernels) {
    // Note [Python host probe] (driver.cpp): the host's time is compared
    // with the Python probe's, each the measured copy's beside the others.
    if (s.kind == "host_ops" || s.kind == "host_step") continue;
    const auto it = kernels.find({s.kind, s.precision, s.m, s.n, s.k, s.batch});
    if (it != kernels.end() && slower(s.time, it->second->time)) ++taken;
  }
  // Note [The slowest copy's probe]
  // A validation round's probe is its slowest rank's (runtime/src/
  // validate.cpp), and the suite calls a round quiet by that probe over
  // the profile's (Note [Machine probe]). The profile's had been the
  // measured copy's alone, so the two compared the slower of two cores
  // with one of them: in one seed 003 suite on the AMD VM the rounds'
  // probes sat at a median 1.08x the profile's, its layers (each point
  // the slower copy's) priced at the slower core's pace. So the profile
  // keeps the slowest copy's probe, as its points keep the slowest time,
  // and every copy's in torch.probe_copies_s (the measured copy's first),
  // which profile show prints beside it.
  if (const auto theirs = other.info.find("torch.probe_s"); theirs != other.info.end()) {
    const double t = std::atof(theirs->second.c_str());
    const auto mine = p.info.find("torch.probe_s");
    if (t > 0 && std::isfinite(t)) {
      std::string& copies = p.info["torch.probe_copies_s"];
      if (copies.empty() && mine != p.info.end()) copies = mine->second;
      copies += (copies.empty() ? "" : ",") + theirs->second;
      if (mine == p.info.end() || t > std::atof(mine->second.c_str())) p.info["torch.probe_s"] = theirs->second;
    }
  }
  return taken;
}

std::vector<sim::KernelSample> pool_rounds(const std::vector<sim::Profile>& rounds) {
  using Key = std::tuple<std::string, sim::Precision, std::int64_t, std::int64_t, std::int64_t, std::int64_t>;
  std::vector<Key> order;
  std::map<Key, std::vector<const sim::KernelSample*>> of;
  for (const sim::Profile& r : rounds) {
    for (const sim::KernelSample& k : r.kernels) {
      const Key key{k.kind, k.precision, k.m, k.n, k.k, k.batch};
      auto& list = of[key];
      if (list.empty()) order.push_back(key);
      list.push_back(&k);
    }
  }
  std::vector<sim::KernelSample> out;
  for (const Key& key : order) {
    const auto& list = of[key];
    sim::KernelSample pooled = *list.front();
    std::vector<double> medians;
    for (const sim::KernelSample* k : list) {
      medians.push_back(k->time.median_s);
      if (k != list.front()) {
        pooled.time.min_s = std::min(pooled.time.min_s, k->time.min_s);
        pooled.time.max_s = std::max(pooled.time.max_s, k->time.max_s);
        pooled.time.reps += k->time.reps;
      }
    }
    std::sort(medians.begin(), medians.end());
    const std::size_t n = medians.size();
    pooled.time.median_s = n % 2 == 1 ? medians[n / 2] : (medians[n / 2 - 1] + medians[n / 2]) / 2;
    pooled.time.mean_s = 0;  // the rounds' runs' means are not one series'
    out.push_back(pooled);
  }
  return out;
}

std::int64_t eviction_bytes(std::int64_t cache_bytes) {
  constexpr std::int64_t kMiB = std::int64_t{1} << 20;
  if (cache_bytes <= 0) return 256 * kMiB;
  return std::clamp(2 * cache_bytes, 64 * kMiB, 256 * kMiB);
}

double median_time_ratio(const sim::Profile& p, const sim::Profile& other) {
  std::map<std::tuple<std::string, sim::Precision, std::int64_t, std::int64_t>, const sim::LayerSample*> theirs;
  for (const auto& s : other.layers) theirs[{s.signature, s.precision, s.micro_batch, s.seq_len}] = &s;
  std::vector<double> ratios;
  for (const auto& s : p.layers) {
    const auto it = theirs.find({s.signature, s.precision, s.micro_batch, s.seq_len});
    if (it == theirs.end()) continue;
    for (const auto& [mine, other_t] : {std::pair{s.forward, it->second->forward}, std::pair{s.backward, it->second->backward}}) {
      if (mine.median_s > 0 && other_t.median_s > 0) ratios.push_back(other_t.median_s / mine.median_s);
    }
  }
  if (ratios.empty()) return 0;
  std::sort(ratios.begin(), ratios.end());
  const std::size_t n = ratios.size();
  return n % 2 ? ratios[n / 2] : 0.5 * (ratios[n / 2 - 1] + ratios[n / 2]);
}

bool parse_bench_line(const std::string& line, const std::string& source, sim::Profile& p, Progress* progress) {
  if (line.empty() || line == "\n") return false;
  const Fields f(split_tabs(line), source, line);
  const std::string& tag = f.str(0);
  if (tag == "progress") {
    f.expect(4);
    if (progress) *progress = Progress{static_cast<int>(f.integer(1)), static_cast<int>(f.integer(2)), f.str(3)};
    return true;
  }
  if (tag == "info") {
    f.expect(3);
    p.info[source + "." + f.str(1)] = f.str(2);
  } else if (tag == "layer") {
    // The forward and backward means came later (Note [A layer costs its mean
    // in a step]), and on GPUs the layer's memory (Note [Layer memory]) after them.
    // Then a step's ratio round by round (Note [A step's ratio round by
    // round] in torch_bench.cpp) after the memory, -1 where not measured.
    if (f.size() != 14 && f.size() != 16 && f.size() != 18) f.expect(12);
    sim::LayerSample s;
    s.signature = f.str(1);
    s.precision = f.precision(2);
    s.micro_batch = f.integer(3);
    s.seq_len = f.integer(4);
    s.forward = f.timing(5, 11);
    s.backward = f.timing(8, 11);
    if (f.size() >= 14) {
      s.forward.mean_s = f.num(12);
      s.backward.mean_s = f.num(13);
      if (s.forward.mean_s < 0 || s.backward.mean_s < 0) f.fail("negative time");
    }
    if (f.size() >= 16) {
      // -1: not measured (a CPU's record that goes on to its ratios).
      const auto bytes = [&](std::size_t i) { return f.str(i) == "-1" ? std::int64_t{-1} : f.integer(i); };
      s.forward_transient = bytes(14);
      s.backward_rise = bytes(15);
    }
    if (f.size() == 18) {
      s.round_ratio_forward = f.num(16);
      s.round_ratio_backward = f.num(17);
      if (!(s.round_ratio_forward >= 0 && s.round_ratio_backward >= 0)) f.fail("a ratio that is not 0 or a positive number");
    }
    p.layers.push_back(s);
  } else if (tag == "kernel") {
    f.expect(13);
    sim::KernelSample k;
    k.kind = f.str(1);
    k.precision = f.precision(2);
    k.m = f.integer(3);
    k.n = f.integer(4);
    k.k = f.integer(5);
    k.batch = f.integer(6);
    k.flops = f.num(7);
    k.bytes = f.num(8);
    k.time = f.timing(9, 12);
    p.kernels.push_back(k);
  } else if (tag == "comm") {
    if (f.size() != 10) f.expect(9);  // the mean is optional (older programs print 9 fields)
    sim::CommSample c;
    c.backend = f.str(1);
    if (!sim::parse_collective(f.str(2), &c.op)) f.fail("'" + f.str(2) + "' is not a collective");
    c.ranks = static_cast<int>(f.integer(3));
    c.bytes = static_cast<Bytes>(f.integer(4));
    c.time = f.timing(5, 8);
    if (f.size() == 10) {
      c.time.mean_s = f.num(9);
      if (!(c.time.mean_s >= 0)) f.fail("field 10 '" + f.str(9) + "' is not a time");
    }
    p.comm.push_back(c);
  } else if (tag == "comm_step") {
    // Note [Collectives in a step] (gloo_bench.cpp); the resume after its
    // wait where the bench timed it (Note [Timing the resume]).
    if (f.size() != 12) f.expect(11);
    sim::StepCommSample c;
    c.backend = f.str(1);
    if (!sim::parse_collective(f.str(2), &c.op)) f.fail("'" + f.str(2) + "' is not a collective");
    c.ranks = static_cast<int>(f.integer(3));
    c.bytes = static_cast<Bytes>(f.integer(4));
    c.lead_s = f.num(5);
    c.median_s = f.num(6);
    c.mean_s = f.num(7);
    c.stall_frac = f.num(8);
    c.stall_s = f.num(9);
    c.reps = static_cast<int>(f.integer(10));
    if (!(c.lead_s >= 0 && c.median_s > 0 && c.mean_s > 0 && c.stall_s >= 0)) f.fail("a time that is not a positive number");
    if (!(c.stall_frac >= 0 && c.stall_frac <= 1)) f.fail("field 9 '" + f.str(8) + "' is not a share between 0 and 1");
    if (c.ranks < 2 || c.reps < 1) f.fail("ranks under 2 or no iterations");
    if (f.size() == 12) {
      c.resume_s = f.num(11);
      if (!std::isfinite(c.resume_s) || std::abs(c.resume_s) > c.lead_s + c.median_s) {
        f.fail("field 12 '" + f.str(11) + "' is not a time within the lead and the collective");
      }
      c.wait_s = c.median_s;
    }
    p.comm_in_step.push_back(c);
  } else if (tag == "copy") {
    f.expect(7);
    p.copies.push_back({f.str(1), static_cast<Bytes>(f.integer(2)), f.timing(3, 6)});
  } else if (tag == "interference") {
    // Note [Measuring interference] (interference_bench.cpp).
    f.expect(9);
    sim::InterferenceSample x;
    x.victim = f.str(1);
    const auto count = [&](std::size_t i) {
      const std::int64_t v = f.integer(i);
      if (v < 0 || v > (std::int64_t{1} << 30)) f.fail("field " + std::to_string(i + 1) + " '" + f.str(i) + "' is not a count in 0..2^30");
      return static_cast<int>(v);
    };
    x.channels = count(2);
    x.sms = count(3);
    x.proxy_Bps = f.num(4);
    x.hbm_Bps = f.num(5);
    x.alone_s = f.num(6);
    x.beside_s = f.num(7);
    x.reps = count(8);
    if (const std::string bad = sim::check_interference(x); !bad.empty()) f.fail(bad);
    p.interference.push_back(x);
  } else if (tag == "memory") {
    f.expect(3);
    p.memory[f.str(1)] = static_cast<Bytes>(f.integer(2));
  } else if (tag == "skip") {
    auto& skipped = p.info[source + ".skipped"];
    skipped += (skipped.empty() ? "" : "; ") + line.substr(5);
  } else {
    f.fail("unknown record '" + tag + "' (valid: info, progress, layer, kernel, comm, comm_step, copy, interference, memory, skip)");
  }
  return false;
}

}  // namespace dtsim::calib
