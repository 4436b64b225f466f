// Compute beside collectives, measured (Note [Measuring interference] in
// calibrate/src/interference_bench.cpp), fitted (Note [Interference fit] in
// calibrate/src/fit.cpp) and applied in place of the priors (Note
// [Interference prior] in sim/src/config/device_db.cpp).
#include <catch2/catch.hpp>

#include <filesystem>
#include <fstream>
#include <string>

#include <unistd.h>

#include "dtsim/calibrate/calibrate.hpp"
#include "dtsim/calibrate/import.hpp"
#include "dtsim/sim/config_io.hpp"
#include "dtsim/sim/cost_profile.hpp"
#include "dtsim/sim/lowering.hpp"
#include "dtsim/sim/profile.hpp"
#include "test_util.hpp"

using namespace dtsim;
using namespace dtsim::sim;
using dtsim::test::error_of;

namespace {

InterferenceSample sample(const char* victim, int channels, double proxy_Bps, double alone_s, double beside_s) {
  return {victim, channels, 100, proxy_Bps, 1000, alone_s, beside_s, 30};
}

/// Hand-made records on a device of 100 SMs whose HBM moves 1000 B/s.
/// GEMMs: 20 channels (f 0.2, f / (1 - f) = 0.25) +50% and +25%, 50
/// channels (f 0.5: 1) +100%: ratios to the prior 2, 1, 1. Triads: the
/// stand-in at 200 B/s (h 0.2: h / (1 - h) = 0.25) +50%, at 500 B/s (h 0.5:
/// 1) +200%: each 2x the prior.
Profile hand_profile() {
  Profile p;
  p.interference = {sample("gemm", 20, 300, 1.0, 1.5), sample("gemm", 50, 600, 1.0, 2.0), sample("gemm", 20, 300, 2.0, 2.5),
                    sample("stream", 20, 200, 1.0, 1.5), sample("stream", 40, 500, 2.0, 6.0)};
  return p;
}

}  // namespace

TEST_CASE("interference records are parsed, bad ones named (Note [Measuring interference])", "[calibrate][bad-input]") {
  Profile p;
  calib::Progress prog;
  calib::parse_bench_line("interference\tgemm\t24\t132\t1.3e12\t4.37e12\t0.00123\t0.00164\t30", "interference", p, &prog);
  REQUIRE(p.interference.size() == 1);
  const InterferenceSample& x = p.interference[0];
  CHECK(x.victim == "gemm");
  CHECK(x.channels == 24);
  CHECK(x.sms == 132);
  CHECK(x.proxy_Bps == 1.3e12);
  CHECK(x.hbm_Bps == 4.37e12);
  CHECK(x.alone_s == 0.00123);
  CHECK(x.beside_s == 0.00164);
  CHECK(x.reps == 30);
  const auto bad = [&](const std::string& line) { return error_of([&] { calib::parse_bench_line(line, "interference", p, &prog); }); };
  CHECK(bad("interference\ttensor\t24\t132\t1e12\t4e12\t1e-3\t2e-3\t30").find("victim 'tensor' is not gemm or stream") != std::string::npos);
  CHECK(bad("interference\tgemm\t132\t132\t1e12\t4e12\t1e-3\t2e-3\t30").find("channels 132 of 132 SMs: not 1..SMs - 1") !=
        std::string::npos);
  CHECK(bad("interference\tgemm\t24\t132\t1e12\t4e12\t-1e-3\t2e-3\t30").find("not a positive number of seconds") != std::string::npos);
  CHECK(bad("interference\tstream\t24\t132\t-5e12\t4e12\t1e-3\t2e-3\t30").find("a proxy_Bps from 0") != std::string::npos);
  CHECK(bad("interference\tgemm\t24\t132\t1e12\t4e12\t1e-3\t2e-3").find("expected 9 tab-separated fields, got 8") != std::string::npos);
  CHECK(bad("interference\tgemm\t99999999999\t132\t1e12\t4e12\t1e-3\t2e-3\t30").find("not a count") != std::string::npos);
  CHECK(p.interference.size() == 1);  // none of those was kept
}

TEST_CASE("the interference fits: the median GEMM ratio to the prior, the triads' least squares (Note [Interference fit])",
          "[calibrate]") {
  Profile p = hand_profile();
  calib::fit_profile(p);
  REQUIRE(p.fits.count("interference.compute") == 1);
  const LinearFit& k = p.fits.at("interference.compute");
  CHECK(k.features == std::vector<std::string>{"prior"});
  CHECK(k.coef.at(0) == Approx(1.0));  // median of 2, 1, 1
  CHECK(k.samples == 3);
  // Each record's time beside, predicted alone x (1 + k x): 1.25 against
  // 1.5 (-1/6), 2 against 2, 2.5 against 2.5.
  CHECK(k.max_rel_error == Approx(1.0 / 6));
  CHECK(k.rms_rel_error == Approx(std::sqrt((1.0 / 36) / 3)));
  const LinearFit& m = p.fits.at("interference.memory");
  CHECK(m.features == std::vector<std::string>{"hbm_share"});
  // sum x y / sum x^2 = (0.25 x 0.5 + 1 x 2) / (0.0625 + 1) = 2.
  CHECK(m.coef.at(0) == Approx(2.0));
  CHECK(m.max_rel_error == Approx(0).margin(1e-12));
  // No records, no fits: the priors stand.
  Profile none;
  calib::fit_profile(none);
  CHECK(none.fits.count("interference.compute") == 0);
  CHECK(none.fits.count("interference.memory") == 0);
}

TEST_CASE("interference records survive the HDF5 round trip; a profile without them reads as none", "[calibrate]") {
  Profile p = hand_profile();
  p.info["device"] = "test";
  calib::fit_profile(p);
  const std::string path = (std::filesystem::temp_directory_path() / ("dtsim_interference." + std::to_string(::getpid()) + ".h5")).string();
  save_profile(p, path);
  const Profile q = load_profile(path);
  REQUIRE(q.interference.size() == 5);
  CHECK(q.interference[4].victim == "stream");
  CHECK(q.interference[4].channels == 40);
  CHECK(q.interference[4].proxy_Bps == 500);
  CHECK(q.interference[4].beside_s == 6.0);
  CHECK(q.fits.at("interference.memory").coef.at(0) == Approx(2.0));
  Profile plain;
  plain.info["device"] = "test";
  save_profile(plain, path);
  CHECK(load_profile(path).interference.empty());
  // A record no bench could print (more channels than SMs) is refused on
  // reading, naming the group, the row and what is wrong.
  Profile bad = hand_profile();
  bad.interference[1].channels = 100;
  save_profile(bad, path);
  const std::string e = error_of([&] { load_profile(path); });
  CHECK(e.find("/interference: row 1: channels 100 of 100 SMs: not 1..SMs - 1") != std::string::npos);
  std::filesystem::remove(path);
}

TEST_CASE("a profile's interference fits replace the device's priors (Note [Interference fit])", "[calibrate]") {
  Profile p;
  p.info["device"] = "test";
  LinearFit k;
  k.features = {"prior"};
  k.coef = {1.5};
  LinearFit m;
  m.features = {"hbm_share"};
  m.coef = {2.0};
  p.fits["interference.compute"] = k;
  p.fits["interference.memory"] = m;
  const ProfileCosts costs(p);
  // An H100: 132 SMs, NCCL's 24 channels take f = 24/132, the prior
  // f / (1 - f) = 24/108; measured 1.5x that: 36/108 = +33.3%.
  DeviceSpec h100 = *find_device("H100-SXM");
  REQUIRE(h100.comm_slowdown == Approx(24.0 / 108));
  costs.calibrate_interference(h100);
  CHECK(h100.comm_slowdown == Approx(36.0 / 108));
  CHECK(h100.comm_hbm_contention == 2.0);
  costs.calibrate_interference(h100);  // again: the same
  CHECK(h100.comm_slowdown == Approx(36.0 / 108));
  // A device whose collectives slow nothing stays so.
  DeviceSpec v100 = *find_device("V100-SXM2-16GB");
  REQUIRE(v100.comm_slowdown == 0);
  costs.calibrate_interference(v100);
  CHECK(v100.comm_slowdown == 0);
  // The memory-bound half: HBM 2 TB/s at 80%, a 100 GB/s link at 3 bytes of
  // HBM a link byte takes h = 300/1600 = 0.1875 of it: the prior's
  // h / (1 - h) = 0.2308, measured twice that.
  DeviceSpec d;
  d.memory_bandwidth = 2e12;
  d.memory_efficiency = 0.8;
  d.comm_slowdown = 0.2;
  d.comm_hbm_traffic = 3;
  CHECK(hbm_slowdown(d, 100e9) == Approx(0.1875 / 0.8125));
  d.comm_hbm_contention = 2;  // applied by the executor, after the link classes' shares add (test_executor.cpp)
  CHECK(hbm_slowdown(d, 100e9) == Approx(0.1875 / 0.8125));
  // And a cluster's device may set it itself.
  const ClusterSpec c = parse_cluster("device: {base: H100-SXM, comm_hbm_contention: 1.5}\n"
                                      "intra_node: {type: nvlink, bandwidth_GBps: 450}\n", "c.yaml");
  CHECK(c.device.comm_hbm_contention == 1.5);
  CHECK(error_of([] {
          parse_cluster("device: {base: H100-SXM, comm_hbm_contention: -1}\nintra_node: {type: nvlink, bandwidth_GBps: 450}\n", "c.yaml");
        }).find("cluster.device.comm_hbm_contention: -1 is out of range") != std::string::npos);
}

TEST_CASE("profile show says what the measured interference means on its device", "[calibrate]") {
  Profile p;
  p.path = "h.h5";
  p.interference = {{"gemm", 24, 132, 1.3e12, 4.37e12, 1.0, 1.5, 30}};
  calib::fit_profile(p);
  // One record: k = 0.5 / (24/108) = 2.25, so +50.0% at NCCL's 24 channels of 132.
  const std::string text = calib::format_profile(p);
  CHECK(text.find("compute beside collectives: 1 settings; a GEMM beside NCCL's 24 channels of 132 SMs +50.0% (the prior +22.2%)") !=
        std::string::npos);
  CHECK(calib::profile_to_json(p).find("\"interference_samples\": 1") != std::string::npos);
}

TEST_CASE("the H200's measurement of 2026-12-04 fits as its records say (docs/validation-gpu/interference-h200.txt)",
          "[calibrate]") {
  std::ifstream in(std::string(DTSIM_SOURCE_DIR) + "/docs/validation-gpu/interference-h200.txt");
  REQUIRE(in);
  Profile p;
  calib::Progress prog;
  for (std::string line; std::getline(in, line);) calib::parse_bench_line(line, "interference", p, &prog);
  REQUIRE(p.interference.size() == 36);  // 12 settings x (two GEMMs, a triad)
  calib::fit_profile(p);
  // 24 GEMM records: the median of their ratios to the prior is the mean
  // of the 12th and 13th, which are (sorted by hand) the 8192^3 product
  // beside 28 channels (1.232656 -> 1.753824 ms) and the 4096^3 one beside
  // 24 (0.180383995 -> 0.243392006 ms).
  const double a = (1.753824 / 1.232656 - 1) / ((28.0 / 132) / (104.0 / 132));
  const double b = (0.243392006 / 0.180383995 - 1) / ((24.0 / 132) / (108.0 / 132));
  CHECK(p.fits.at("interference.compute").coef.at(0) == Approx((a + b) / 2).epsilon(1e-6));
  CHECK(p.fits.at("interference.compute").samples == 24);
  // The triads' least-squares slope is a mean of their ratios y / x
  // weighted by x^2, so it lies between the smallest and largest of them:
  // 1.051 and 1.077 in that file.
  const double m = p.fits.at("interference.memory").coef.at(0);
  CHECK(m > 1.05);
  CHECK(m < 1.08);
}

namespace {

std::string write_temp(const std::string& name, const std::string& text) {
  const std::string path = (std::filesystem::temp_directory_path() / (name + "." + std::to_string(::getpid()))).string();
  std::ofstream(path) << text;
  return path;
}

}  // namespace

TEST_CASE("import-interference puts the bench's records in a profile of the same GPU, and fits them (Note [Importing interference])",
          "[calibrate][import]") {
  // Two GEMM records on 100 SMs: 20 channels +50% (ratio 2 to the prior's
  // 0.25) and 50 channels +100% (ratio 1): k = the median, 1.5.
  const std::string bench = write_temp("dtsim_bench.txt",
                                       "info\tdevice\tNVIDIA H200\n"
                                       "progress\t1\t2\tgemm alone\n"
                                       "interference\tgemm\t20\t100\t300\t1000\t1.0\t1.5\t30\n"
                                       "\n"
                                       "interference\tgemm\t50\t100\t600\t1000\t1.0\t2.0\t30\n");
  // Into a profile of the same GPU holding a kernel fit and older records.
  Profile into;
  into.info["device"] = "NVIDIA H200";
  into.info["device_kind"] = "cuda";
  into.interference = {{"gemm", 24, 132, 1e12, 4e12, 1.0, 1.1, 30}, {"stream", 24, 132, 1e12, 4e12, 1.0, 1.3, 30}};
  LinearFit gemm;
  gemm.features = {"1", "flops"};
  gemm.coef = {1e-5, 1e-15};
  gemm.samples = 9;
  into.fits["kernel.gemm.bf16"] = gemm;
  into.fits["interference.memory"] = LinearFit{{"hbm_share"}, {3.0}, 0, 0, 1};
  calib::ImportResult r = calib::import_interference(bench, into);
  CHECK(r.samples == 2);
  CHECK(r.replaced == 2);
  REQUIRE(into.interference.size() == 2);
  CHECK(into.interference[1].channels == 50);
  CHECK(into.fits.at("interference.compute").coef.at(0) == Approx(1.5));
  CHECK(into.fits.count("interference.memory") == 0);  // no triad among the new records: the old fit goes with its records
  CHECK(into.fits.at("kernel.gemm.bf16").samples == 9);  // untouched
  CHECK(into.info.at("import.interference.files").find("dtsim_bench.txt") == 0);
  CHECK(into.info.at("import.interference.device") == "NVIDIA H200");
  // Another GPU's profile is refused, naming both.
  Profile h100;
  h100.path = "h100.h5";
  h100.info["device"] = "NVIDIA H100 80GB HBM3";
  h100.info["device_kind"] = "cuda";
  const std::string other = error_of([&] { calib::import_interference(bench, h100); });
  CHECK(other.find("NVIDIA H100 80GB HBM3") != std::string::npos);
  CHECK(other.find("NVIDIA H200") != std::string::npos);
  CHECK(h100.interference.empty());
  // A line that is not the protocol names the file and line; a file of none says so.
  const std::string bad = write_temp("dtsim_bad.txt", "info\tdevice\tNVIDIA H200\nnot a record\n");
  Profile fresh;
  CHECK(error_of([&] { calib::import_interference(bad, fresh); }).find(bad + ":2: ") == 0);
  const std::string empty = write_temp("dtsim_empty.txt", "info\tdevice\tNVIDIA H200\n");
  CHECK(error_of([&] { calib::import_interference(empty, fresh); }).find("no interference records") != std::string::npos);
  CHECK_THROWS_AS(calib::import_interference(bench + ".missing", fresh), IoError);
  for (const auto& p : {bench, bad, empty}) std::filesystem::remove(p);
}
