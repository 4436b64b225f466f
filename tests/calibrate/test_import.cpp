// Importing the user's own measurements (calibrate/include/dtsim/calibrate/import.hpp):
// nccl-tests logs and a PyTorch profiler trace, from the samples in
// tests/data/nccl-tests and tests/data/traces (their READMEs say how the
// figures were made). Expected values are derived from the sample rows in
// the comments, never from the program's output.
#include <catch2/catch.hpp>

#include <cmath>
#include <filesystem>
#include <fstream>
#include <memory>

#include <unistd.h>

#include "dtsim/calibrate/calibrate.hpp"
#include "dtsim/calibrate/import.hpp"
#include "dtsim/sim/config_io.hpp"
#include "dtsim/sim/cost_profile.hpp"
#include "dtsim/sim/profile.hpp"
#include "test_util.hpp"

using namespace dtsim;
using namespace dtsim::sim;
using dtsim::test::error_of;
using dtsim::test::slurp;

namespace {

const std::string kData = DTSIM_TEST_DATA;
const std::string kAllReduce = kData + "/nccl-tests/all_reduce_perf_dgx-a100_8gpu.txt";
const std::string kAllToAll = kData + "/nccl-tests/alltoall_perf_dgx-a100_8gpu.txt";
const std::string kTwoNodes = kData + "/nccl-tests/dgx-a100_2node_16rank.txt";
const std::string kThreads = kData + "/nccl-tests/threads2_gpus4.txt";
const std::string kReduceScatter = kData + "/nccl-tests/reduce_scatter_perf_dgx-a100_8gpu.txt";
const std::string kSendRecv = kData + "/nccl-tests/sendrecv_perf_dgx-a100_2gpu.txt";
const std::string kTrace = kData + "/traces/gpt_2layers_dgx-a100_bf16.json";

std::string temp_file(const std::string& name) {
  return (std::filesystem::temp_directory_path() / ("dtsim-import-" + std::to_string(::getpid()) + "-" + name)).string();
}

double coef(const LinearFit& f, const std::string& feature) {
  for (std::size_t i = 0; i < f.features.size(); ++i) {
    if (f.features[i] == feature) return f.coef[i];
  }
  return 0;
}

/// The time `profile` prices op over `ranks` (`per_node` on each node) on dgx-a100, in seconds.
double priced(const Profile& profile, CollectiveOp op, Bytes bytes, int ranks, int per_node) {
  ClusterSpec cluster = load_cluster("dgx-a100");
  cluster.nodes = (ranks + per_node - 1) / per_node;
  CostSources sources;
  const ProfileCommModel model(std::make_shared<const ProfileCosts>(profile), cluster, &sources);
  CommGroup g;
  g.ranks = ranks;
  g.ranks_per_node = per_node;
  const double s = static_cast<double>(model.collective(op, bytes, g).total()) * 1e-9;
  REQUIRE(sources.comm_measured == 1);  // from the imported fit, not the datasheet
  return s;
}

const KernelSample* find_kernel(const Profile& p, const std::string& kind, Precision prec, std::int64_t m, std::int64_t n, std::int64_t k,
                                std::int64_t batch = 1) {
  for (const auto& s : p.kernels) {
    if (s.kind == kind && s.precision == prec && s.m == m && s.n == n && s.k == k && s.batch == batch) return &s;
  }
  return nullptr;
}

}  // namespace

TEST_CASE("nccl-tests: an 8-GPU all_reduce_perf log is read with its ranks, node and columns", "[import]") {
  const calib::NcclTestsRun run = calib::read_nccl_tests(kAllReduce);
  CHECK(run.test == "all_reduce_perf");  // from the file name: the log does not say
  CHECK(run.op == CollectiveOp::kAllReduce);
  CHECK(run.ranks == 8);  // eight "#  Rank" lines
  CHECK(run.nodes == 1);
  CHECK(run.ranks_per_node == 8);  // all on dgx-a100-01
  CHECK(run.threads == 1);
  CHECK(run.gpus_per_thread == 8);
  CHECK(run.iters == 20);
  CHECK(run.device == "NVIDIA A100-SXM4-80GB");
  CHECK(run.data_type == "float");
  REQUIRE(run.rows.size() == 28);  // 8 B .. 1 GiB, factor 2
  CHECK(run.rows.front().bytes == 8);
  CHECK(run.rows.back().bytes == 1073741824);
  CHECK(run.rows.front().line == 16);  // after 15 header lines
  // Out-of-place by default: the first row's out-of-place time is 10.44 us, its in-place 10.38 us.
  CHECK(run.rows.front().time_us == Approx(10.44));
  CHECK(run.rows.back().busbw_gbs == Approx(231.48));
  CHECK(run.avg_busbw_gbs == Approx(84.4665));
  const calib::NcclTestsRun in_place = calib::read_nccl_tests(kAllReduce, /*in_place=*/true);
  CHECK(in_place.in_place);
  CHECK(in_place.rows.front().time_us == Approx(10.38));
  CHECK(in_place.rows.back().time_us == Approx(8092.8));
}

TEST_CASE("nccl-tests: alltoall_perf's older columns, a 2-node MPI run and a -t 2 run are read", "[import]") {
  SECTION("alltoall: no root column, an empty redop, N/A in-place errors") {
    const calib::NcclTestsRun run = calib::read_nccl_tests(kAllToAll);
    CHECK(run.op == CollectiveOp::kAllToAll);
    CHECK(run.ranks == 8);
    CHECK(run.rows.size() == 11);  // 1 KiB .. 1 GiB, factor 4
    CHECK(run.rows.back().time_us == Approx(5222.2));
    // in-place: its #wrong is N/A (nccl-tests does not check in-place all-to-all), still read.
    CHECK(calib::read_nccl_tests(kAllToAll, true).rows.size() == 11);
  }
  SECTION("16 ranks on two hosts, 8 each; the test named by the echoed mpirun command") {
    const calib::NcclTestsRun run = calib::read_nccl_tests(kTwoNodes);
    CHECK(run.test == "all_reduce_perf");
    CHECK(run.ranks == 16);
    CHECK(run.nodes == 2);
    CHECK(run.ranks_per_node == 8);
    CHECK(run.threads == 1);
    CHECK(run.gpus_per_thread == 1);  // one GPU per MPI process
    CHECK(run.rows.size() == 15);     // 8 B .. 2 GiB, factor 4
  }
  SECTION("two threads of four GPUs: 8 ranks in one process; named by '# Collective test starting'") {
    const calib::NcclTestsRun run = calib::read_nccl_tests(kThreads);
    CHECK(run.test == "all_gather_perf");
    CHECK(run.op == CollectiveOp::kAllGather);
    CHECK(run.threads == 2);
    CHECK(run.gpus_per_thread == 4);
    CHECK(run.ranks == 8);
    CHECK(run.ranks_per_node == 8);
    CHECK(run.rows.size() == 5);
  }
  SECTION("sendrecv_perf: no redop or root column") {
    const std::string log =
        "# nThread 1 nGpus 2 minBytes 1048576 maxBytes 268435456 step: 16(factor) warmup iters: 5 iters: 50 agg iters: 1 validation: 1 graph: 0\n"
        "#\n# Using devices\n"
        "#  Rank  0 Group  0 Pid   4001 on      box-1 device  0 [0x07] NVIDIA A100-SXM4-80GB\n"
        "#  Rank  1 Group  0 Pid   4001 on      box-1 device  1 [0x0f] NVIDIA A100-SXM4-80GB\n"
        "#\n"
        "#       size         count      type     time   algbw   busbw  error     time   algbw   busbw  error\n"
        "#        (B)    (elements)               (us)  (GB/s)  (GB/s)            (us)  (GB/s)  (GB/s)       \n"
        "     1048576        262144     float    13.83   75.84   75.84      0    13.80   76.00   76.00    N/A\n"
        "    16777216       4194304     float    101.2  165.77  165.77      0    101.0  166.10  166.10    N/A\n"
        "   268435456      67108864     float   1499.3  179.04  179.04      0   1496.3  179.40  179.40    N/A\n";
    const calib::NcclTestsRun run = calib::parse_nccl_tests(log, "sendrecv_perf.log");
    CHECK(run.op == CollectiveOp::kSendRecv);
    CHECK(run.ranks == 2);
    CHECK(run.iters == 50);
    REQUIRE(run.rows.size() == 3);
    // Note [sendrecv_perf's ring]: keyed as send_recv between 2 ranks on one node.
    const std::string path = temp_file("sendrecv_perf.log");
    { std::ofstream(path) << log; }
    Profile p;
    calib::import_nccl_tests({path}, p);
    std::filesystem::remove(path);
    REQUIRE(p.fits.count("comm.nccl.send_recv.2"));
    // Two rows: beta = (1499.3 - 13.83) us / (268435456 - 1048576) B = 5.5556e-12 s/B, 180 GB/s.
    CHECK(1 / coef(p.fits.at("comm.nccl.send_recv.2"), "bytes") / 1e9 == Approx(180).epsilon(0.02));
  }
}

TEST_CASE("nccl-tests: reduce_scatter_perf and sendrecv_perf logs are read and fitted", "[import]") {
  // Both logs were made as tests/data/nccl-tests/README.md says: t = alpha +
  // size / algbw_inf, wiggled by at most 1.2%; reduce_scatter alpha 11.2 us
  // and busbw 228 GB/s (busbw = algbw x 7/8 on 8 ranks), sendrecv 8.3 us and
  // 180 GB/s (busbw = algbw). The fits must find them again.
  const calib::NcclTestsRun rs = calib::read_nccl_tests(kReduceScatter);
  CHECK(rs.op == CollectiveOp::kReduceScatter);
  CHECK(rs.test == "reduce_scatter_perf");
  CHECK(rs.ranks == 8);
  REQUIRE(rs.rows.size() == 11);  // 1 KiB .. 1 GiB, factor 4
  CHECK(rs.rows.front().count == 32);  // per rank: 1024 B of float over 8 ranks
  const calib::NcclTestsRun sr = calib::read_nccl_tests(kSendRecv);
  CHECK(sr.op == CollectiveOp::kSendRecv);
  CHECK(sr.ranks == 2);
  CHECK(sr.rows.size() == 13);  // 8 B .. 128 MiB, factor 4
  Profile p;
  const calib::ImportResult r = calib::import_nccl_tests({kReduceScatter, kSendRecv}, p);
  CHECK(r.samples == 24);
  REQUIRE(p.fits.count("comm.nccl.reduce_scatter.8"));
  REQUIRE(p.fits.count("comm.nccl.send_recv.2"));
  const LinearFit& f = p.fits.at("comm.nccl.reduce_scatter.8");
  CHECK(7.0 / 8 / coef(f, "bytes") / 1e9 == Approx(228).epsilon(0.02));
  CHECK(coef(f, "1") * 1e6 == Approx(11.2).epsilon(0.05));
  const LinearFit& g = p.fits.at("comm.nccl.send_recv.2");
  CHECK(1 / coef(g, "bytes") / 1e9 == Approx(180).epsilon(0.02));
  CHECK(coef(g, "1") * 1e6 == Approx(8.3).epsilon(0.05));
}

TEST_CASE("nccl-tests: the all_reduce fit is the calibration's, and prices the measured times", "[import]") {
  Profile p;
  const calib::ImportResult r = calib::import_nccl_tests({kAllReduce}, p);
  CHECK(r.samples == 28);
  REQUIRE(p.fits.count("comm.nccl.all_reduce.8"));
  const LinearFit& f = p.fits.at("comm.nccl.all_reduce.8");
  CHECK(f.samples == 28);
  // By hand from two rows (out-of-place): 8 B in 10.44 us, 1 GiB in 8117.5 us:
  //   beta  = (8117.5 - 10.44) us / (1073741824 - 8) B = 7.5503e-12 s/B,
  //   busbw = 2(8-1)/8 / beta = 1.75 / 7.5503e-12 = 231.8 GB/s,
  //   alpha = 10.44 us - 8 B x beta = 10.44 us.
  // The fit (least squares on relative error over all 28 rows, each within
  // 1.2% of alpha + beta S, tests/data/nccl-tests/README.md) lands within 2%.
  const double beta = coef(f, "bytes"), alpha = coef(f, "1");
  CHECK(beta == Approx(8107.06e-6 / 1073741816.0).epsilon(0.02));
  CHECK(1.75 / beta / 1e9 == Approx(231.8).epsilon(0.02));
  CHECK(alpha == Approx(10.44e-6).epsilon(0.02));
  // Provenance.
  CHECK(p.info.at("device") == "NVIDIA A100-SXM4-80GB");
  CHECK(p.info.at("device_kind") == "cuda");
  CHECK(p.info.at("import.nccl-tests.files").find("all_reduce_perf_dgx-a100_8gpu.txt") != std::string::npos);
  CHECK(p.info.count("import.nccl-tests.date"));
  // Priced on dgx-a100 as `dtsim comm --profile` prices it: the measured rows within 3%.
  CHECK(priced(p, CollectiveOp::kAllReduce, 1073741824, 8, 8) == Approx(8117.5e-6).epsilon(0.03));
  CHECK(priced(p, CollectiveOp::kAllReduce, 8388608, 8, 8) == Approx(73.36e-6).epsilon(0.03));
  CHECK(priced(p, CollectiveOp::kAllReduce, 8, 8, 8) == Approx(10.44e-6).epsilon(0.03));
  // In-place columns on request: their 1 GiB row, 8092.8 us.
  Profile q;
  calib::ImportOptions o;
  o.in_place = true;
  calib::import_nccl_tests({kAllReduce}, q, o);
  CHECK(priced(q, CollectiveOp::kAllReduce, 1073741824, 8, 8) == Approx(8092.8e-6).epsilon(0.03));
}

TEST_CASE("nccl-tests: a 2-node run is fitted apart and prices a 16-rank group across two nodes", "[import]") {
  Profile p;
  calib::import_nccl_tests({kTwoNodes, kAllReduce}, p);
  REQUIRE(p.fits.count("comm.nccl.all_reduce.16.per_node.8"));
  REQUIRE(p.fits.count("comm.nccl.all_reduce.8"));
  // Two rows: 8 B in 27.10 us, 2 GiB in 21452 us: beta = 21424.9e-6 / 2147483640 = 9.9767e-12 s/B,
  // busbw = 2(16-1)/16 / beta = 1.875 / 9.9767e-12 = 187.9 GB/s.
  const LinearFit& f = p.fits.at("comm.nccl.all_reduce.16.per_node.8");
  CHECK(1.875 / coef(f, "bytes") / 1e9 == Approx(187.9).epsilon(0.02));
  CHECK(priced(p, CollectiveOp::kAllReduce, 2147483648, 16, 8) == Approx(21452e-6).epsilon(0.03));
  // The one-node fit still prices one node's 8 ranks.
  CHECK(priced(p, CollectiveOp::kAllReduce, 1073741824, 8, 8) == Approx(8117.5e-6).epsilon(0.03));
  // The samples keep their placement through a save and a load.
  const std::string path = temp_file("two-nodes.h5");
  save_profile(p, path);
  const Profile back = load_profile(path);
  std::filesystem::remove(path);
  int across = 0;
  for (const auto& c : back.comm) across += c.ranks_per_node == 8 && c.ranks == 16;
  CHECK(across == 15);
  CHECK(back.fits.count("comm.nccl.all_reduce.16.per_node.8"));
}

TEST_CASE("nccl-tests: importing into a profile keeps its other entries", "[import]") {
  Profile base;
  base.info["device"] = "NVIDIA A100-SXM4-80GB";
  base.info["device_kind"] = "cuda";
  base.info["created"] = "2026-01-01T00:00:00Z";
  base.layers.push_back({"fake.layer", Precision::kBf16, 1, 1024, Timing{0.01, 0.009, 0.011, 5}, Timing{0.02, 0.018, 0.022, 5}});
  base.kernels.push_back({"gemm", Precision::kBf16, 64, 64, 64, 1, 2.0 * 64 * 64 * 64, 2.0 * 3 * 64 * 64, Timing{1e-5, 1e-5, 1e-5, 5}});
  base.comm.push_back({"nccl", CollectiveOp::kAllGather, 4, 1 << 20, Timing{3e-5, 3e-5, 3e-5, 5}});
  // An all_reduce over 8 ranks from an earlier calibration: replaced by the log's.
  base.comm.push_back({"nccl", CollectiveOp::kAllReduce, 8, 1 << 20, Timing{9e-5, 9e-5, 9e-5, 5}});
  base.copies.push_back({"h2d", 1 << 20, Timing{1e-4, 1e-4, 1e-4, 5}});
  base.memory["cuda_context_bytes"] = 500 * kMiB;
  LinearFit kept;
  kept.features = {"1", "bytes"};
  kept.coef = {2e-5, 1e-10};
  kept.samples = 7;
  base.fits["comm.nccl.all_gather.4"] = kept;
  const std::string into = temp_file("into.h5"), out = temp_file("out.h5");
  save_profile(base, into);
  calib::ImportOptions o;
  o.into = into;
  o.out = out;
  o.cluster = "dgx-a100";
  const std::string summary = calib::import_nccl_tests_command({kAllReduce}, o);
  CHECK(summary.find("wrote " + out) != std::string::npos);
  CHECK(summary.find("1 earlier nccl samples") != std::string::npos);
  // The log's largest size (1 GiB, 8,117.5 us out of place) beside the
  // cluster file's price of it (Note [Measured collectives]).
  CHECK(summary.find("1 GiB measured 8.12 ms, the cluster file dgx-a100 gives ") != std::string::npos);
  const Profile p = load_profile(out);
  std::filesystem::remove(into);
  std::filesystem::remove(out);
  CHECK(p.layers.size() == 1);
  CHECK(p.kernels.size() == 1);
  CHECK(p.copies.size() == 1);
  CHECK(p.memory.at("cuda_context_bytes") == 500 * kMiB);
  CHECK(p.info.at("created") == "2026-01-01T00:00:00Z");
  CHECK(p.comm.size() == 1 + 28);  // the all_gather kept, the old all_reduce replaced by 28 rows
  REQUIRE(p.fits.count("comm.nccl.all_gather.4"));
  CHECK(p.fits.at("comm.nccl.all_gather.4").coef == std::vector<double>{2e-5, 1e-10});
  CHECK(p.fits.count("comm.nccl.all_reduce.8"));
}

TEST_CASE("nccl-tests: bad logs are refused in one line naming the file and line", "[import]") {
  const std::string text = slurp(kAllReduce);
  auto one_line = [](const std::string& m) { return m.find('\n') == std::string::npos; };
  SECTION("a time that is not a number") {
    std::string bad = text;
    bad.replace(bad.find("10.44"), 5, "ab.cd");  // the first row, line 16
    const std::string e = error_of([&] { calib::parse_nccl_tests(bad, "bad.txt"); });
    CHECK(e.rfind("bad.txt:16: out-of-place time 'ab.cd' is not a time in us", 0) == 0);
    CHECK(one_line(e));
  }
  SECTION("a row cut short") {
    std::string bad = text;
    const auto row = bad.find("          16             4");  // line 17
    bad.erase(bad.find('\n', row) - 40, 40);
    const std::string e = error_of([&] { calib::parse_nccl_tests(bad, "cut.txt"); });
    CHECK(e.rfind("cut.txt:17: expected a result row", 0) == 0);
    CHECK(one_line(e));
  }
  SECTION("algbw that is not size / time") {
    std::string bad = text;
    bad.replace(bad.find("114.35"), 6, "141.35");  // 8 MiB in 73.36 us is 114.35 GB/s, line 36
    const std::string e = error_of([&] { calib::parse_nccl_tests(bad, "edited.txt"); });
    CHECK(e.rfind("edited.txt:36: out-of-place algbw 141.35 GB/s is not size / time (114.35 GB/s)", 0) == 0);
  }
  SECTION("an all_reduce log named as another test") {
    // Its busbw is algbw x 1.75, not all_to_all's 7/8: refused at the first row with algbw >= 1 GB/s
    // (16 KiB in 10.5 us, 1.56 GB/s: line 27), where two decimals tell the factors apart.
    const std::string e = error_of([&] { calib::parse_nccl_tests(text, "alltoall_perf.txt"); });
    CHECK(e.rfind("alltoall_perf.txt:27: busbw 2.72 GB/s is not algbw x 0.875 (1.36 GB/s)", 0) == 0);
    CHECK(e.find("as all_to_all over 8 ranks gives") != std::string::npos);
  }
  SECTION("a log whose test cannot be told, a test dtsim does not price, no column header, a missing file") {
    CHECK(error_of([&] { calib::parse_nccl_tests(text, "run1.txt"); }).rfind("run1.txt: cannot tell which nccl-tests program", 0) == 0);
    CHECK(error_of([&] { calib::parse_nccl_tests(text, "reduce_perf.txt"); }).find("a log of reduce_perf") != std::string::npos);
    CHECK(error_of([&] { calib::parse_nccl_tests("hello\n", "all_reduce_perf.txt"); }).find("no nccl-tests column header") != std::string::npos);
    CHECK(error_of([&] { calib::read_nccl_tests(kData + "/nccl-tests/missing.txt"); }).find("missing.txt: cannot read") != std::string::npos);
  }
  SECTION("a CPU profile is not merged with GPU collectives") {
    Profile cpu;
    cpu.info["device_kind"] = "cpu";
    cpu.comm.push_back({"gloo", CollectiveOp::kAllReduce, 2, 1024, Timing{1e-5, 1e-5, 1e-5, 5}});
    CHECK(error_of([&] { calib::import_nccl_tests({kAllReduce}, cpu); }).find("was measured on a CPU") != std::string::npos);
  }
}

TEST_CASE("trace: a profiler trace's kernels become kernel samples by kind and shape", "[import]") {
  Profile p;
  const calib::ImportResult r = calib::import_kineto_trace(kTrace, p);
  CHECK(p.info.at("device") == "NVIDIA A100-SXM4-80GB");
  // The qkv GEMM, 8192 x 3072 x 1024 in bf16: 2mnk = 51539607552 FLOPs over
  // 2 x (8192x1024 + 1024x3072 + 8192x3072) = 73400320 bytes; its four runs
  // (2 layers x 2 steps) took d, d, 1.01 d, 0.99 d with d = 2mnk / 240 TFLOP/s = 214.75 us.
  const KernelSample* qkv = find_kernel(p, "gemm", Precision::kBf16, 8192, 3072, 1024);
  REQUIRE(qkv != nullptr);
  CHECK(qkv->flops == Approx(51539607552.0));
  CHECK(qkv->bytes == Approx(73400320.0));
  CHECK(qkv->time.reps == 4);
  CHECK(qkv->time.median_s == Approx(214.75e-6).epsilon(1e-4));
  // Its input gradient, dY (8192 x 3072) x W (3072 x 1024): m 8192, n 1024, k 3072 at 235 TFLOP/s = 219.32 us.
  const KernelSample* dgrad = find_kernel(p, "gemm", Precision::kBf16, 8192, 1024, 3072);
  REQUIRE(dgrad != nullptr);
  CHECK(dgrad->time.median_s == Approx(51539607552.0 / 235e12).epsilon(1e-4));
  // The eager attention's scores: bmm [128,1024,64] x [128,64,1024], 115 us in both steps.
  const KernelSample* scores = find_kernel(p, "attention", Precision::kBf16, 1024, 1024, 64, 128);
  REQUIRE(scores != nullptr);
  CHECK(scores->time.median_s == Approx(115e-6));
  // Layer norm in fp32 (autocast keeps it): 8192 rows of 1024, 50 us; its backward's two kernels 71 + 24 us.
  const KernelSample* ln = find_kernel(p, "norm", Precision::kFp32, 8192, 1024, 1);
  REQUIRE(ln != nullptr);
  CHECK(ln->bytes == Approx(2.0 * 4 * 8388608));  // read and write 4-byte elements
  CHECK(ln->time.median_s == Approx(50e-6));
  bool backward = false;
  for (const auto& k : p.kernels) backward = backward || (k.kind == "norm" && k.precision == Precision::kFp32 && k.bytes == 4.0 * 4 * 8388608 && std::abs(k.time.median_s - 95e-6) < 1e-9);
  CHECK(backward);
  // The softmax is a norm kernel in dtsim: 8 x 16 x 1024 rows of 1024, 358 us.
  CHECK(find_kernel(p, "norm", Precision::kBf16, 131072, 1024, 1) != nullptr);
  // GELU over 8 x 1024 x 4096 bf16 elements: read 2 B and write 2 B each = 134217728 bytes, 90.5 us.
  const KernelSample* gelu = find_kernel(p, "elementwise", Precision::kBf16, 33554432, 1, 1);
  REQUIRE(gelu != nullptr);
  CHECK(gelu->bytes == Approx(134217728.0));
  CHECK(gelu->time.median_s == Approx(90.5e-6));
  // The embedding's gather: 8192 rows of 1024 fp32 read and written, plus 8192 8-byte indices = 67174400 bytes.
  const KernelSample* gather = find_kernel(p, "elementwise", Precision::kFp32, 8388608, 1, 1);
  REQUIRE(gather != nullptr);
  CHECK(gather->bytes == Approx(67174400.0));
  // AdamW over 24 tensors: per layer 2x1024 + 3072x1024 + 3072 + 1024x1024 + 1024 + 2x1024
  // + 4096x1024 + 4096 + 1024x4096 + 1024 = 12596224 parameters, two layers 25192448; 213 + 11 us.
  const KernelSample* adam = find_kernel(p, "adam", Precision::kFp32, 25192448, 24, 1);
  REQUIRE(adam != nullptr);
  CHECK(adam->time.median_s == Approx(224e-6));
  // GEMMs fitted: 9 shapes (the 4 forward, the qkv input gradient and the 4 weight gradients; the
  // other input gradients have forward GEMMs' shapes: proj's is 8192x1024x1024, fc1's fc2's
  // 8192x1024x4096, fc2's fc1's), >= the 5 a 4-term fit needs; the qkv GEMM priced back within 5%.
  REQUIRE(p.fits.count("kernel.gemm.bf16"));
  const ProfileCosts costs(p);
  const FitTerms* gemm = costs.kernel_fit(KernelKind::kGemm, Precision::kBf16);
  REQUIRE(gemm != nullptr);
  CHECK(gemm->seconds(qkv->bytes, qkv->flops, 8192.0 * 3072) == Approx(214.75e-6).epsilon(0.05));
  // What was not used, by reason: both flash attentions of layer 0 in both steps (4 kernels);
  // the loss's sum (2) and the 8 bias-gradient sums a step (16); 2 memory copies.
  CHECK(r.unused.at("fused attention (a profile has no fit for it: the roofline prices it, Note [Fused attention])") == 4);
  CHECK(r.unused.at("ops dtsim has no kernel kind for (aten::sum)") == 18);
  CHECK(r.unused.at("memory copies and sets (not fitted from traces)") == 2);
  CHECK(r.lines.back().rfind("not used: ", 0) == 0);
}

TEST_CASE("trace: NCCL kernels with message sizes feed the collective fits", "[import]") {
  Profile p;
  calib::import_kineto_trace(kTrace, p);
  // DDP's buckets: 6553600, 3276800 and 1048576 fp32 elements (25, 12.5, 4 MiB) over 8 ranks,
  // each in both steps (step 3's 2% slower): the samples' means are 244.42, 134.835 and 53.732 us.
  int sizes = 0;
  for (const auto& c : p.comm) {
    if (c.op != CollectiveOp::kAllReduce || c.ranks != 8) continue;
    ++sizes;
    if (c.bytes == 26214400) CHECK(c.time.mean_s == Approx(244.42e-6));
    if (c.bytes == 4194304) CHECK(c.time.mean_s == Approx(53.732e-6));
  }
  CHECK(sizes == 3);
  REQUIRE(p.fits.count("comm.nccl.all_reduce.8"));
  // Two sizes by hand: beta = (244.42 - 53.732) us / (26214400 - 4194304) B = 8.660e-12 s/B;
  // the middle size lies 3% above that line, so the fit of all three lands within 5% of it.
  CHECK(coef(p.fits.at("comm.nccl.all_reduce.8"), "bytes") == Approx(190.688e-6 / 22020096.0).epsilon(0.05));
  // A profile that has nccl-tests' all_reduce over 8 ranks keeps those, and says so.
  Profile q;
  calib::import_nccl_tests({kAllReduce}, q);
  const calib::ImportResult r = calib::import_kineto_trace(kTrace, q);
  CHECK(r.unused.at("collectives the profile measured already (its samples kept)") == 6);
  CHECK(q.comm.size() == 28);
}

TEST_CASE("trace: a damaged trace is refused naming the file and where", "[import]") {
  const std::string path = temp_file("bad-trace.json");
  SECTION("cut short: line and column") {
    { std::ofstream(path) << "{\n  \"traceEvents\": [\n    {\"ph\": \"X\", \"name\": \"aten::mm\", \"ts\": 1.5,\n"; }
    const std::string e = error_of([&] { calib::import_kineto_trace(path, *std::make_unique<Profile>()); });
    CHECK(e.rfind(path + ":4:1: not a JSON trace: ", 0) == 0);
    CHECK(e.find('\n') == std::string::npos);
  }
  SECTION("an event without its duration") {
    { std::ofstream(path) << R"({"traceEvents": [{"ph": "X", "cat": "cpu_op", "name": "aten::mm", "ts": 1.5, "dur": "2"}]})"; }
    const std::string e = error_of([&] { calib::import_kineto_trace(path, *std::make_unique<Profile>()); });
    CHECK(e == path + ": traceEvents[0] (\"aten::mm\"): \"dur\" is missing or not a number (us); the trace is damaged");
  }
  SECTION("recorded without shapes: counted, never silently dropped, and nothing to write") {
    { std::ofstream(path) << R"({"traceEvents": [
      {"ph": "X", "cat": "cpu_op", "name": "aten::mm", "pid": 1, "tid": 1, "ts": 10, "dur": 20, "args": {"External id": 7}},
      {"ph": "X", "cat": "kernel", "name": "ampere_sgemm_128x64_tn", "pid": 0, "tid": 7, "ts": 40, "dur": 12.5, "args": {"External id": 7, "correlation": 3}}
    ]})"; }
    Profile p;
    const calib::ImportResult r = calib::import_kineto_trace(path, p);
    CHECK(r.samples == 0);
    CHECK(r.unused.at("ops without shapes (profile with record_shapes=True)") == 1);
    CHECK(r.lines.back() == "not used: 1 ops without shapes (profile with record_shapes=True)");
    calib::ImportOptions o;
    o.out = temp_file("never.h5");
    CHECK(error_of([&] { calib::import_trace_command(path, o); }).find("nothing in it dtsim could use") != std::string::npos);
    CHECK_FALSE(std::filesystem::exists(o.out));
  }
  SECTION("not a trace") {
    { std::ofstream(path) << R"({"events": []})"; }
    CHECK(error_of([&] { calib::import_kineto_trace(path, *std::make_unique<Profile>()); }).find("no \"traceEvents\" array") != std::string::npos);
  }
  std::filesystem::remove(path);
}

TEST_CASE("trace: the CLI function writes a profile with the trace's fits and provenance", "[import]") {
  calib::ImportOptions o;
  o.out = temp_file("from-trace.h5");
  const std::string summary = calib::import_trace_command(kTrace, o);
  CHECK(summary.find("kernel.gemm.bf16: 9 shapes (48 runs)") != std::string::npos);
  CHECK(summary.find("not used: ") != std::string::npos);
  const Profile p = load_profile(o.out);
  std::filesystem::remove(o.out);
  CHECK(p.fits.count("kernel.gemm.bf16"));
  CHECK(p.info.at("import.trace.files") == "gpt_2layers_dgx-a100_bf16.json");
}

TEST_CASE("import-python-host: the four probes come from one calibration, nothing else changes", "[import]") {
  // Note [Importing the Python host cost]. PROFILE has a C++ probe of its
  // own (2 us an op) and no Python one; OTHER timed both: 64 ops in 448 us
  // from Python (7 us an op) and 192 us from C++ (3 us), AdamW steps of 1
  // and 16 tensors in 30 and 330 us from Python, 10 and 160 us from C++.
  // Note [Python host cost]: an op 7 - 3 = 4 us (not 7 - 2, PROFILE's own
  // C++ probe); a tensor ((330 - 160) - (30 - 10)) / (16 - 1) = 10 us.
  const auto timing = [](double s) { return Timing{s, s, s, 9}; };
  Profile into;
  into.info["device"] = "AMD EPYC";
  into.info["device_kind"] = "cpu";
  into.info["created"] = "2026-11-23T13:46:41Z";
  into.info["python"] = "not measured: torch cannot be imported by /opt/pyenv/python3";
  into.layers.push_back({"block", Precision::kFp32, 1, 64, timing(0.01), timing(0.02), 100, 200});
  into.kernels.push_back({"gemm", Precision::kFp32, 64, 64, 64, 1, 2.0 * 64 * 64 * 64, 3.0 * 4 * 64 * 64, timing(1e-4)});
  into.kernels.push_back({"host_ops", Precision::kFp32, 64, 1, 1, 1, 0, 0, timing(64 * 2e-6)});
  Profile other = into;
  other.info["created"] = "2026-12-04T23:31:51Z";
  other.info["python"] = "/usr/bin/python3";
  other.info["python.python"] = "3.11.2";
  other.info["python.torch"] = "1.13.0a0";
  other.layers.clear();
  other.kernels = {{"gemm", Precision::kFp32, 64, 64, 64, 1, 2.0 * 64 * 64 * 64, 3.0 * 4 * 64 * 64, timing(5e-4)},
                   {"host_ops", Precision::kFp32, 64, 1, 1, 1, 0, 0, timing(192e-6)},
                   {"python_ops", Precision::kFp32, 64, 1, 1, 1, 0, 0, timing(448e-6)},
                   {"host_step", Precision::kFp32, 64, 1, 1, 1, 0, 0, timing(10e-6)},
                   {"host_step", Precision::kFp32, 16 * 64, 16, 1, 1, 0, 0, timing(160e-6)},
                   {"python_step", Precision::kFp32, 64, 1, 1, 1, 0, 0, timing(30e-6)},
                   {"python_step", Precision::kFp32, 16 * 64, 16, 1, 1, 0, 0, timing(330e-6)}};
  REQUIRE_FALSE(python_host_cost(into));
  const std::string i = temp_file("into.h5"), o = temp_file("other.h5"), out = temp_file("with-python.h5");
  save_profile(into, i);
  save_profile(other, o);
  calib::ImportOptions opt;
  opt.into = i;
  opt.out = out;
  const std::string summary = calib::import_python_host_command(o, opt);
  CHECK(summary.find("6 probes; Python 3.11.2, torch 1.13.0a0, calibrated 2026-12-04T23:31:51Z") != std::string::npos);
  const Profile p = load_profile(out);
  const auto cost = python_host_cost(p);
  REQUIRE(cost);
  CHECK(cost->per_op_s == Approx(4e-6));
  CHECK(cost->per_tensor_s == Approx(10e-6));
  int host_ops = 0, gemms = 0;
  for (const auto& k : p.kernels) {
    host_ops += k.kind == "host_ops" ? 1 : 0;
    if (k.kind == "gemm") {
      ++gemms;
      CHECK(k.time.median_s == 1e-4);  // PROFILE's, not OTHER's
    }
  }
  CHECK(host_ops == 1);
  CHECK(gemms == 1);
  CHECK(p.layers.size() == 1);
  CHECK(p.info.at("python") == "/usr/bin/python3");
  CHECK(p.info.at("import.python.created") == "2026-12-04T23:31:51Z");
  CHECK(p.info.at("created") == "2026-11-23T13:46:41Z");
  // A profile without a Python host cost has none to give.
  opt.out = temp_file("never.h5");
  const std::string none = error_of([&] { calib::import_python_host_command(i, opt); });
  CHECK(none.find("no Python host cost to import (not measured: torch cannot be imported") != std::string::npos);
  CHECK_FALSE(std::filesystem::exists(opt.out));
  // Another device: refused naming both.
  other.info["device"] = "Intel Xeon";
  save_profile(other, o);
  const std::string device = error_of([&] { calib::import_python_host_command(o, opt); });
  CHECK(device.find("'Intel Xeon'") != std::string::npos);
  CHECK(device.find("'AMD EPYC'") != std::string::npos);
  CHECK_FALSE(std::filesystem::exists(opt.out));
  for (const auto& f : {i, o, out}) std::filesystem::remove(f);
}

TEST_CASE("import-layers: an earlier calibration's layers the newer lacks are added, nothing else", "[import]") {
  // Note [Importing layers]: NEWER measured block in fp16 at b 1; OLDER block
  // in fp16 at b 1 and 2, block in fp32 at b 1, embed in fp16 at b 1 and 4.
  // Added: (block, fp32) with its 1 shape and (embed, fp16) with its 2;
  // (block, fp16) stays NEWER's 1 shape: 1 + 1 + 2 = 4 layer records.
  const Timing t{0.01, 0.009, 0.011, 5};
  Profile newer;
  newer.info["device"] = "NVIDIA H100 80GB HBM3";
  newer.info["device_kind"] = "cuda";
  newer.info["created"] = "2026-11-27T05:00:00Z";
  newer.layers.push_back({"block", Precision::kFp16, 1, 1024, t, t, 100, 200});
  newer.kernels.push_back({"gemm", Precision::kFp16, 64, 64, 64, 1, 2.0 * 64 * 64 * 64, 2.0 * 3 * 64 * 64, t});
  newer.memory["cuda_context_bytes"] = 600 * kMiB;
  Profile older = newer;
  older.info["created"] = "2026-11-24T09:31:07Z";
  older.layers.clear();
  older.kernels.clear();
  older.memory["cuda_context_bytes"] = 595 * kMiB;
  const Timing slow{0.05, 0.05, 0.05, 5};
  older.layers.push_back({"block", Precision::kFp16, 1, 1024, slow, slow, 1, 2});
  older.layers.push_back({"block", Precision::kFp16, 2, 1024, slow, slow, 1, 2});
  older.layers.push_back({"block", Precision::kFp32, 1, 1024, slow, slow, 7, 8});
  older.layers.push_back({"embed", Precision::kFp16, 1, 1024, slow, slow, -1, -1});
  older.layers.push_back({"embed", Precision::kFp16, 4, 1024, slow, slow, -1, -1});
  const std::string n = temp_file("newer.h5"), o = temp_file("older.h5"), out = temp_file("merged.h5");
  save_profile(newer, n);
  save_profile(older, o);
  calib::ImportOptions opt;
  opt.into = n;
  opt.out = out;
  const std::string summary = calib::import_layers_command(o, opt);
  CHECK(summary.find("2 layer signatures and precisions (3 shapes)") != std::string::npos);
  const Profile p = load_profile(out);
  CHECK(p.layers.size() == 4);
  int fp16_blocks = 0;
  for (const auto& l : p.layers) {
    if (l.signature == "block" && l.precision == Precision::kFp16) {
      ++fp16_blocks;
      CHECK(l.forward.median_s == 0.01);  // NEWER's, not OLDER's 0.05
    }
    if (l.signature == "block" && l.precision == Precision::kFp32) CHECK(l.backward_rise == 8);  // its memory comes along
  }
  CHECK(fp16_blocks == 1);
  CHECK(p.kernels.size() == 1);                                // NEWER's kernels
  CHECK(p.memory.at("cuda_context_bytes") == 600 * kMiB);      // and memory
  CHECK(p.info.at("created") == "2026-11-27T05:00:00Z");
  CHECK(p.info.at("import.layers.created") == "2026-11-24T09:31:07Z");
  // Importing again adds nothing: refused, nothing written.
  const std::string again = temp_file("again.h5");
  opt.into = out;
  opt.out = again;
  CHECK(error_of([&] { calib::import_layers_command(o, opt); }).find("nothing was written") != std::string::npos);
  CHECK_FALSE(std::filesystem::exists(again));
  // Another device: refused naming both.
  older.info["device"] = "NVIDIA A100-SXM4-80GB";
  save_profile(older, o);
  opt.into = n;
  const std::string e = error_of([&] { calib::import_layers_command(o, opt); });
  CHECK(e.find("A100") != std::string::npos);
  CHECK(e.find("H100") != std::string::npos);
  // --into is required.
  opt.into.clear();
  CHECK(error_of([&] { calib::import_layers_command(o, opt); }).find("--into NEWER.h5 is required") != std::string::npos);
  for (const auto& f : {n, o, out}) std::filesystem::remove(f);
}
