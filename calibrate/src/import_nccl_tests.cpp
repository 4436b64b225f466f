// Reading nccl-tests' output (github.com/NVIDIA/nccl-tests, src/common.cu)
// into a profile's collective fits: Note [Importing measurements] in
// import_profile.cpp, Note [Reading nccl-tests] below.
//
// Note [Reading nccl-tests]
// Every *_perf program prints the same text: a header ("# nThread T nGpus G
// minBytes ... iters: I ..."), one line per rank ("#  Rank  R Group  0 Pid
// P on HOST device D [0xBUS] NAME"; before the Group column existed, the
// same without it; with MPI every process's lines, gathered in rank order),
// the column header ("#  size  count  type  redop  root  time  algbw  busbw
// #wrong  time ..."), a row per size with the out-of-place columns then the
// in-place ones, and "# Avg bus bandwidth : B". The tests differ only in
// the columns between count and the first time: all_reduce has type, redop
// and root; alltoall_perf and sendrecv_perf of some versions print no
// root, no redop, or an empty redop. So a row is read from both ends:
// size and count first, the two groups of four (time us, algbw GB/s, busbw
// GB/s, #wrong) last, one to three words between. The log does not name its
// test (newer versions print "# Collective test starting: NAME"): it is
// taken from that line, a command echoed in the log, or the file's name.
// Ranks are the "# Rank" lines, ranks per node the most of them on one
// host; dtsim's clusters are homogeneous, so hosts with unequal counts are
// refused. Each row is checked against itself (algbw = size / time) and
// against the test (busbw = algbw x the op's factor, Note [Collective cost
// model]): a log of another test or a hand-edited one is refused at its line.
//
// Note [sendrecv_perf's ring]
// sendrecv_perf sends from every rank to the next around a ring, all at
// once: each rank's time is one send and one receive, dtsim's send_recv
// between 2 ranks (as a pipeline stage does it). On one node it is keyed as
// 2 ranks on one node; across nodes the pairs that cross set the pace, so
// as 2 ranks on 2 nodes (1 per node).
#include <algorithm>
#include <cctype>
#include <cerrno>
#include <cstring>
#include <cmath>
#include <fstream>
#include <map>
#include <optional>
#include <set>
#include <sstream>

#include "dtsim/calibrate/calibrate.hpp"
#include "dtsim/calibrate/import.hpp"
#include "dtsim/sim/cost_profile.hpp"
#include "dtsim/sim/error.hpp"
#include "import_common.hpp"

namespace dtsim::calib {
namespace {

struct TestName {
  const char* name;
  sim::CollectiveOp op;
};
constexpr TestName kTests[] = {
    {"all_reduce_perf", sim::CollectiveOp::kAllReduce},         {"all_gather_perf", sim::CollectiveOp::kAllGather},
    {"reduce_scatter_perf", sim::CollectiveOp::kReduceScatter}, {"alltoall_perf", sim::CollectiveOp::kAllToAll},
    {"sendrecv_perf", sim::CollectiveOp::kSendRecv},            {"broadcast_perf", sim::CollectiveOp::kBroadcast},
};
/// Tests whose collective dtsim does not price (checked after kTests: "reduce_perf" is in "all_reduce_perf").
constexpr const char* kOtherTests[] = {"alltoallv_perf", "hypercube_perf", "reduce_perf", "gather_perf", "scatter_perf"};
/// Looser names a file may carry ("allreduce-8gpu.log").
constexpr TestName kLoose[] = {
    {"all_reduce", sim::CollectiveOp::kAllReduce},       {"allreduce", sim::CollectiveOp::kAllReduce},
    {"all_gather", sim::CollectiveOp::kAllGather},       {"allgather", sim::CollectiveOp::kAllGather},
    {"reduce_scatter", sim::CollectiveOp::kReduceScatter}, {"reducescatter", sim::CollectiveOp::kReduceScatter},
    {"all_to_all", sim::CollectiveOp::kAllToAll},        {"sendrecv", sim::CollectiveOp::kSendRecv},
    {"send_recv", sim::CollectiveOp::kSendRecv},         {"broadcast", sim::CollectiveOp::kBroadcast},
};
constexpr const char* kTypes[] = {"int8", "uint8", "int32", "uint32", "int64", "uint64", "half", "float", "double",
                                  "bfloat16", "char", "int", "f8e4m3", "f8e5m2", "fp8_e4m3", "fp8_e5m2"};

std::string lower(std::string s) {
  for (char& c : s) c = static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
  return s;
}

std::vector<std::string> words(const std::string& s) {
  std::istringstream in(s);
  std::vector<std::string> out;
  for (std::string w; in >> w;) out.push_back(w);
  return out;
}

/// The test a line names: its index in kTests, -1 if none; `other` set to an unsupported test's name.
int test_in(const std::string& text, std::string* other) {
  const std::string t = lower(text);
  for (std::size_t i = 0; i < std::size(kTests); ++i) {
    if (t.find(kTests[i].name) != std::string::npos) return static_cast<int>(i);
  }
  for (const char* o : kOtherTests) {
    if (t.find(o) != std::string::npos) {
      *other = o;
      return -1;
    }
  }
  return -1;
}

bool parse_int(const std::string& s, std::int64_t* out) {
  if (s.empty()) return false;
  std::size_t used = 0;
  try {
    *out = std::stoll(s, &used);
  } catch (const std::exception&) {
    return false;
  }
  return used == s.size();
}

bool parse_number(const std::string& s, double* out) {
  if (s.empty()) return false;
  std::size_t used = 0;
  try {
    *out = std::stod(s, &used);
  } catch (const std::exception&) {
    return false;
  }
  return used == s.size() && std::isfinite(*out);
}

std::string fmt(const char* f, double v) {
  char buf[64];
  std::snprintf(buf, sizeof buf, f, v);
  return buf;
}

using dtsim::human_bytes;

}  // namespace

NcclTestsRun parse_nccl_tests(const std::string& text, const std::string& name, bool in_place) {
  NcclTestsRun run;
  run.file = name;
  run.in_place = in_place;
  auto fail = [&](int line, const std::string& why) -> void {
    throw ConfigError(name + ":" + std::to_string(line) + ": " + why);
  };
  std::istringstream in(text);
  std::string raw;
  int ln = 0, header_line = 0;
  bool columns = false;
  int test = -1;
  std::string other_test;
  std::map<int, std::string> host_of;  // rank -> host
  std::map<int, std::string> device_of;
  while (std::getline(in, raw)) {
    ++ln;
    if (!raw.empty() && raw.back() == '\r') raw.pop_back();
    const std::size_t first = raw.find_first_not_of(" \t");
    if (first == std::string::npos) continue;
    const std::string t = raw.substr(first);
    if (t[0] == '#') {
      const auto w = words(t.substr(1));
      if (w.empty()) continue;
      if (w[0] == "nThread") {
        // # nThread 1 nGpus 8 minBytes 8 maxBytes 1073741824 step: 2(factor) warmup iters: 5 iters: 20 ...
        std::int64_t v = 0;
        if (w.size() < 4 || w[2] != "nGpus" || !parse_int(w[1], &v) || v < 1) fail(ln, "expected '# nThread T nGpus G ...' (nccl-tests' header)");
        run.threads = static_cast<int>(v);
        if (!parse_int(w[3], &v) || v < 1) fail(ln, "expected '# nThread T nGpus G ...': nGpus '" + w[3] + "' is not a count");
        run.gpus_per_thread = static_cast<int>(v);
        for (std::size_t i = 0; i + 1 < w.size(); ++i) {
          if (w[i] == "iters:" && (i == 0 || (w[i - 1] != "warmup" && w[i - 1] != "agg")) && parse_int(w[i + 1], &v) && v > 0) run.iters = static_cast<int>(v);
        }
      } else if (w[0] == "Rank") {
        // #  Rank  0 Group  0 Pid  12345 on HOST device  0 [0x07] NVIDIA A100-SXM4-80GB
        const char* shape = "expected '#  Rank R Group G Pid P on HOST device D [0xBUS] NAME'";
        std::int64_t rank = -1, dev = -1;
        if (w.size() < 2 || !parse_int(w[1], &rank) || rank < 0) fail(ln, shape);
        const auto on = std::find(w.begin(), w.end(), "on");
        const auto device = std::find(w.begin(), w.end(), "device");
        if (on == w.end() || on + 1 >= device || device == w.end() || device + 1 == w.end() || !parse_int(*(device + 1), &dev)) fail(ln, shape);
        if (host_of.count(static_cast<int>(rank))) fail(ln, "rank " + std::to_string(rank) + " is listed twice");
        host_of[static_cast<int>(rank)] = *(on + 1);
        std::string model;
        for (auto it = device + 2; it != w.end(); ++it) {
          if (it == device + 2 && it->rfind("[0x", 0) == 0) continue;  // the PCI bus id
          model += (model.empty() ? "" : " ") + *it;
        }
        device_of[static_cast<int>(rank)] = model;
      } else if (std::find(w.begin(), w.end(), "size") != w.end() && std::find(w.begin(), w.end(), "count") != w.end()) {
        if (std::find(w.begin(), w.end(), "cputime") != w.end()) {
          fail(ln, "the log reports CPU time (nccl-tests -C 1), not the collectives' time; run it again without -C");
        }
        if (std::count(w.begin(), w.end(), "time") != 2 || std::count(w.begin(), w.end(), "busbw") != 2) {
          fail(ln, "expected nccl-tests' column header 'size count type [redop] [root] time algbw busbw #wrong time algbw busbw #wrong'");
        }
        columns = true;
        header_line = ln;
      } else if (t.find("Avg bus bandwidth") != std::string::npos) {
        const auto colon = t.find(':');
        const auto v = colon == std::string::npos ? std::vector<std::string>{} : words(t.substr(colon + 1));
        if (v.empty() || !parse_number(v[0], &run.avg_busbw_gbs)) fail(ln, "expected '# Avg bus bandwidth    : B' with B in GB/s");
      } else if (test < 0) {
        test = test_in(t, &other_test);  // "# Collective test starting: all_reduce_perf"
      }
      continue;
    }
    if (!std::isdigit(static_cast<unsigned char>(t[0]))) {
      // Anything else (a command echoed, NCCL_DEBUG lines, a launcher's) says at most which test ran.
      if (test < 0) test = test_in(t, &other_test);
      continue;
    }
    // A result row (Note [Reading nccl-tests]).
    const auto w = words(t);
    const char* shape = "expected a result row 'size count type [redop] [root] time algbw busbw #wrong time algbw busbw #wrong'";
    if (!columns) fail(ln, std::string(shape) + " only after nccl-tests' column header; none came before it");
    if (w.size() < 11 || w.size() > 13) fail(ln, std::string(shape) + ", got " + std::to_string(w.size()) + " fields");
    NcclTestsRun::Row row;
    row.line = ln;
    std::int64_t size = 0;
    if (!parse_int(w[0], &size) || size < 0) fail(ln, "size '" + w[0] + "' is not a byte count");
    if (!parse_int(w[1], &row.count) || row.count < 0) fail(ln, "count '" + w[1] + "' is not an element count");
    row.bytes = static_cast<Bytes>(size);
    if (std::find(std::begin(kTypes), std::end(kTypes), w[2]) == std::end(kTypes)) {
      fail(ln, "type '" + w[2] + "' is not one of nccl-tests' types (float, half, bfloat16, double, int8, ...)");
    }
    if (run.data_type.empty()) run.data_type = w[2];
    const std::size_t at = w.size() - 8 + (in_place ? 4 : 0);
    const char* place = in_place ? "in-place" : "out-of-place";
    double wrong = 0;
    if (!parse_number(w[at], &row.time_us) || row.time_us <= 0) fail(ln, std::string(place) + " time '" + w[at] + "' is not a time in us");
    if (!parse_number(w[at + 1], &row.algbw_gbs) || row.algbw_gbs < 0) fail(ln, std::string(place) + " algbw '" + w[at + 1] + "' is not GB/s");
    if (!parse_number(w[at + 2], &row.busbw_gbs) || row.busbw_gbs < 0) fail(ln, std::string(place) + " busbw '" + w[at + 2] + "' is not GB/s");
    if (w[at + 3] != "N/A" && (!parse_number(w[at + 3], &wrong) || wrong < 0)) {
      fail(ln, std::string(place) + " #wrong '" + w[at + 3] + "' is not a count or N/A");
    }
    // algbw = size / time, printed to 0.01 GB/s from the unrounded time.
    const double expected = static_cast<double>(row.bytes) / row.time_us / 1e3;
    if (std::abs(row.algbw_gbs - expected) > 0.006 + 0.01 * expected) {
      fail(ln, std::string(place) + " algbw " + w[at + 1] + " GB/s is not size / time (" + fmt("%.2f", expected) +
                   " GB/s): columns out of order or edited");
    }
    if (wrong > 0) {
      ++run.wrong_rows;
      continue;
    }
    run.rows.push_back(row);
  }
  if (!columns) throw ConfigError(name + ": no nccl-tests column header ('#  size  count  type ... time  algbw  busbw'): not an nccl-tests log");
  if (run.rows.empty()) throw ConfigError(name + ":" + std::to_string(header_line) + ": no result rows after the column header");
  // The test.
  if (test < 0 && other_test.empty()) test = test_in(detail::base_name(name), &other_test);
  if (!other_test.empty() && test < 0) {
    throw ConfigError(name + ": a log of " + other_test + ", whose collective dtsim does not price; valid: all_reduce_perf, all_gather_perf, "
                      "reduce_scatter_perf, alltoall_perf, sendrecv_perf, broadcast_perf");
  }
  if (test >= 0) {
    run.test = kTests[test].name;
    run.op = kTests[test].op;
  } else {
    const std::string base = lower(detail::base_name(name));
    for (const auto& l : kLoose) {
      if (base.find(l.name) != std::string::npos && base.find("alltoallv") == std::string::npos) {
        run.test = std::string(l.name) + " (from the file name)";
        run.op = l.op;
        test = 0;
        break;
      }
    }
    if (test < 0 && base.find("alltoall") != std::string::npos && base.find("alltoallv") == std::string::npos) {
      run.test = "alltoall (from the file name)";
      run.op = sim::CollectiveOp::kAllToAll;
      test = 0;
    }
    if (test < 0) {
      throw ConfigError(name + ": cannot tell which nccl-tests program printed it (the log does not say): name the file after it, "
                        "e.g. all_reduce_perf.txt, or keep the command line in the log");
    }
  }
  // Ranks and their hosts.
  if (host_of.empty()) {
    throw ConfigError(name + ": no '#  Rank R ... on HOST device D' lines: the ranks and their nodes are unknown (keep nccl-tests' whole output)");
  }
  run.ranks = static_cast<int>(host_of.size());
  if (host_of.rbegin()->first != run.ranks - 1) {
    throw ConfigError(name + ": the '# Rank' lines list " + std::to_string(run.ranks) + " ranks but number them up to " +
                      std::to_string(host_of.rbegin()->first) + ": some are missing");
  }
  std::map<std::string, int> per_host;
  for (const auto& [r, h] : host_of) ++per_host[h];
  run.nodes = static_cast<int>(per_host.size());
  for (const auto& [h, n] : per_host) run.ranks_per_node = std::max(run.ranks_per_node, n);
  for (const auto& [h, n] : per_host) {
    if (n != run.ranks_per_node) {
      throw ConfigError(name + ": host " + h + " ran " + std::to_string(n) + " ranks and another " + std::to_string(run.ranks_per_node) +
                        ": dtsim's clusters have equal nodes; import a run with as many ranks on every node");
    }
  }
  const int per_process = run.threads * run.gpus_per_thread;
  if (run.ranks % per_process != 0) {
    throw ConfigError(name + ": " + std::to_string(run.ranks) + " '# Rank' lines, not a multiple of nThread x nGpus = " +
                      std::to_string(per_process) + ": the log is cut or mixes runs");
  }
  run.device = device_of.begin()->second;
  // busbw = algbw x the op's factor (nccl-tests' PERFORMANCE.md), where the
  // figures are large enough for their two decimals to tell.
  const double factor = sim::bus_bandwidth_factor(run.op, run.ranks);
  for (const auto& row : run.rows) {
    if (row.algbw_gbs < 1) continue;
    if (std::abs(row.busbw_gbs - row.algbw_gbs * factor) > 0.011 + 0.002 * row.busbw_gbs) {
      fail(row.line, "busbw " + fmt("%.2f", row.busbw_gbs) + " GB/s is not algbw x " + fmt("%.4g", factor) + " (" +
                         fmt("%.2f", row.algbw_gbs * factor) + " GB/s), as " + sim::to_string(run.op) + " over " +
                         std::to_string(run.ranks) + " ranks gives: the log is of another test than " + run.test + ", or of another rank count");
    }
  }
  return run;
}

NcclTestsRun read_nccl_tests(const std::string& path, bool in_place) {
  std::ifstream in(path, std::ios::binary);
  if (!in) throw IoError(path + ": cannot read: " + std::strerror(errno));
  std::ostringstream text;
  text << in.rdbuf();
  return parse_nccl_tests(text.str(), path, in_place);
}

ImportResult import_nccl_tests(const std::vector<std::string>& logs, sim::Profile& p, const ImportOptions& o) {
  if (logs.empty()) throw ConfigError("import-nccl-tests: no log given (e.g. dtsim profile import-nccl-tests all_reduce_perf.txt --out my.h5)");
  std::optional<sim::ClusterSpec> cluster;
  if (!o.cluster.empty()) cluster = detail::cluster_of(o.cluster);
  std::vector<NcclTestsRun> runs;
  for (const auto& log : logs) runs.push_back(read_nccl_tests(log, o.in_place));
  ImportResult r;
  // The key each run's samples take: op, ranks and ranks per node (0: one node).
  struct Key {
    sim::CollectiveOp op;
    int ranks, per_node;
    auto operator<=>(const Key&) const = default;
  };
  auto key_of = [](const NcclTestsRun& run) {
    if (run.op == sim::CollectiveOp::kSendRecv) return Key{run.op, 2, run.nodes > 1 ? 1 : 0};  // Note [sendrecv_perf's ring]
    return Key{run.op, run.ranks, run.nodes > 1 ? run.ranks_per_node : 0};
  };
  std::set<Key> keys;
  for (const auto& run : runs) {
    detail::adopt_device(p, run.device, run.file);
    if (cluster && run.ranks_per_node > cluster->gpus_per_node) {
      throw ConfigError(run.file + ": " + std::to_string(run.ranks_per_node) + " ranks ran on one host, but cluster " + cluster->name +
                        " has " + std::to_string(cluster->gpus_per_node) + " GPUs per node; name the cluster it ran on (--cluster)");
    }
    keys.insert(key_of(run));
  }
  // Samples of the same op, ranks and placement are replaced (Note [Importing measurements]).
  const auto before = p.comm.size();
  p.comm.erase(std::remove_if(p.comm.begin(), p.comm.end(),
                              [&](const sim::CommSample& c) {
                                const int per_node = c.ranks_per_node > 0 && c.ranks_per_node < c.ranks ? c.ranks_per_node : 0;
                                return c.backend == "nccl" && keys.count(Key{c.op, c.ranks, per_node});
                              }),
               p.comm.end());
  r.replaced = static_cast<int>(before - p.comm.size());
  std::set<std::string> names;
  std::string files;
  for (const auto& run : runs) {
    const Key k = key_of(run);
    for (const auto& row : run.rows) {
      const double s = row.time_us * 1e-6;
      sim::CommSample c;
      c.backend = "nccl";
      c.op = run.op;
      c.ranks = k.ranks;
      c.bytes = row.bytes;
      c.time = sim::Timing{s, s, s, run.iters, s};  // nccl-tests prints the mean over its iterations
      c.ranks_per_node = k.per_node;
      p.comm.push_back(c);
      ++r.samples;
    }
    names.insert(sim::comm_fit_name("nccl", k.op, k.ranks, k.per_node));
    const auto& big = *std::max_element(run.rows.begin(), run.rows.end(), [](const auto& a, const auto& b) { return a.bytes < b.bytes; });
    std::string line = detail::base_name(run.file) + ": " + run.test + ", " + sim::to_string(run.op) + " over " + std::to_string(run.ranks) +
                       " ranks on " + std::to_string(run.nodes) + (run.nodes == 1 ? " node" : " nodes") + " (" +
                       std::to_string(run.ranks_per_node) + " per node; nThread " + std::to_string(run.threads) + " nGpus " +
                       std::to_string(run.gpus_per_thread) + "), " + run.device + ", " + std::to_string(run.rows.size()) + " sizes " +
                       human_bytes(static_cast<double>(run.rows.front().bytes)) + ".." + human_bytes(static_cast<double>(big.bytes)) + ", " +
                       (run.in_place ? "in-place" : "out-of-place") + "; busbw " + fmt("%.4g", big.busbw_gbs) + " GB/s at " +
                       human_bytes(static_cast<double>(big.bytes));
    if (run.wrong_rows > 0) line += "; " + std::to_string(run.wrong_rows) + " rows left out: nccl-tests found wrong values in them";
    r.lines.push_back(line);
    files += (files.empty() ? "" : ", ") + detail::base_name(run.file) + " (" + sim::to_string(run.op) + ", " + std::to_string(run.ranks) +
             " ranks, " + std::to_string(run.ranks_per_node) + " per node, " + (run.in_place ? "in-place" : "out-of-place") + ")";
  }
  detail::refit(p, names, /*drop_stale=*/true, r);
  detail::append_info(p, "import.nccl-tests.files", files);
  p.info["import.nccl-tests.date"] = detail::now_iso();
  p.info["import.nccl-tests.source"] = "nccl-tests (github.com/NVIDIA/nccl-tests) logs, imported by dtsim " + std::string("profile import-nccl-tests");
  if (r.replaced > 0) r.lines.push_back(std::to_string(r.replaced) + " earlier nccl samples of the same op, ranks and placement replaced");
  // What each fit says, and what the cluster file would have priced.
  for (const auto& name : names) {
    const auto it = p.fits.find(name);
    if (it == p.fits.end()) {
      r.lines.push_back(name + ": fewer than the 3 sizes a fit needs; samples kept, not fitted");
      continue;
    }
    const sim::LinearFit& f = it->second;
    double alpha = 0, beta = 0;
    for (std::size_t i = 0; i < f.features.size(); ++i) (f.features[i] == "1" ? alpha : beta) = f.coef[i];
    std::string line = name + ": latency " + detail::human_seconds(alpha);
    for (const auto& k : keys) {
      if (sim::comm_fit_name("nccl", k.op, k.ranks, k.per_node) != name) continue;
      if (beta > 0) line += ", bus bandwidth " + fmt("%.4g", sim::bus_bandwidth_factor(k.op, k.ranks) / beta / 1e9) + " GB/s";
      line += ", rms error " + fmt("%.1f", 100 * f.rms_rel_error) + "% over " + std::to_string(f.samples) + " sizes";
      if (cluster) {
        // The largest size measured, as the cluster file prices it: how far
        // it is from this cluster (the profile prices the measured time,
        // Note [Measured collectives]).
        const NcclTestsRun* run = nullptr;
        for (const auto& x : runs) {
          if (key_of(x) == k) run = &x;
        }
        const auto& big = *std::max_element(run->rows.begin(), run->rows.end(), [](const auto& a, const auto& b) { return a.bytes < b.bytes; });
        const sim::AnalyticCommModel model(*cluster);
        sim::CommGroup g;
        g.ranks = k.ranks;
        g.ranks_per_node = k.per_node > 0 ? k.per_node : k.ranks;
        const double priced = static_cast<double>(model.collective(k.op, big.bytes, g).total()) * 1e-9;
        const double measured = big.time_us * 1e-6;
        line += "; " + human_bytes(static_cast<double>(big.bytes)) + " measured " + detail::human_seconds(measured) +
                ", the cluster file " + cluster->name + " gives " + detail::human_seconds(priced) + " (" +
                fmt("%+.1f", 100 * (priced - measured) / measured) + "%)";
      }
    }
    r.lines.push_back(line);
  }
  return r;
}

std::string import_nccl_tests_command(const std::vector<std::string>& logs, const ImportOptions& o) {
  return detail::import_command(o, "configs/profiles/my-cluster.h5", [&](sim::Profile& p) { return import_nccl_tests(logs, p, o); });
}

}  // namespace dtsim::calib
