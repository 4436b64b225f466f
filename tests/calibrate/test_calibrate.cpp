// Calibration without hardware: fitting recovers known models, profiles
// survive a round trip and reject broken files cleanly, and the simulator
// prices layers and collectives from a profile as Note [Profile lookups]
// (sim/src/cost/cost_profile.cpp) says.
#include <catch2/catch.hpp>

#include <algorithm>
#include <cmath>
#include <tuple>
#include <filesystem>
#include <fstream>
#include <optional>

#include <unistd.h>

#include <yaml-cpp/yaml.h>

#include "bench_common.hpp"
#include "dtsim/calibrate/calibrate.hpp"
#include "dtsim/sim/config_io.hpp"
#include "dtsim/sim/cost_profile.hpp"
#include "dtsim/sim/predict.hpp"
#include "dtsim/sim/profile.hpp"
#include "dtsim/sim/report.hpp"
#include "fake_model.hpp"
#include "test_util.hpp"

using namespace dtsim;
using namespace dtsim::sim;
using dtsim::test::error_of;

namespace {

std::string temp_path(const std::string& name) {
  return (std::filesystem::temp_directory_path() / (name + "." + std::to_string(::getpid()) + ".h5")).string();
}

Timing timing(double s) { return Timing{s, s * 0.9, s * 1.1, 5}; }

/// A small profile with one of everything.
Profile sample_profile() {
  Profile p;
  p.info["device"] = "test device";
  p.info["torch.threads"] = "1";
  p.layers.push_back({"fake.layer", Precision::kFp32, 1, 1024, timing(0.010), timing(0.020)});
  p.layers.push_back({"fake.layer", Precision::kFp32, 4, 1024, timing(0.040), timing(0.080)});
  p.kernels.push_back({"gemm", Precision::kFp32, 64, 64, 64, 1, 2.0 * 64 * 64 * 64, 4.0 * 3 * 64 * 64, timing(1e-5)});
  p.comm.push_back({"gloo", CollectiveOp::kAllReduce, 2, 1024, timing(2e-5)});
  p.comm.back().time.mean_s = 3e-5;
  p.copies.push_back({"h2d", 1 << 20, timing(1e-4)});
  p.memory["cuda_context_bytes"] = 500 * kMiB;
  LinearFit f;
  f.features = {"1", "bytes"};
  f.coef = {2e-5, 1e-9};
  f.rms_rel_error = 0.01;
  f.max_rel_error = 0.02;
  f.samples = 7;
  p.fits[comm_fit_name("gloo", CollectiveOp::kAllReduce, 2)] = f;
  return p;
}

/// One pass of the profiles' "fake.layer" at micro-batch b, s = 1024.
/// `dp_step`: on a rank whose gradients a data-parallel group reduces.
TimeNs fake_layer_time(const ComputeModel& model, Pass pass, std::int64_t b, Precision p = Precision::kFp32, bool dp_step = false) {
  Layer l;
  l.signature = "fake.layer";
  WorkloadShape shape;
  shape.seq_len = 1024;
  shape.micro_batch = b;
  shape.dp_step = dp_step;
  return model.layer_time(l, pass, p, shape);
}

/// Timed gradient-bucket copies of `params` parameters (Note [Gradient
/// buckets]): in and out, each at 1 and 16 tensors, in seconds.
void add_bucket_copies(Profile& p, std::int64_t params, double in1, double in16, double out1, double out16) {
  for (const auto& [kind, one, sixteen] : {std::tuple{"bucket_in", in1, in16}, std::tuple{"bucket_out", out1, out16}}) {
    p.kernels.push_back({kind, Precision::kFp32, params, 1, 1, 1, 0, 8.0 * static_cast<double>(params), timing(one)});
    p.kernels.push_back({kind, Precision::kFp32, params, 16, 1, 1, 0, 8.0 * static_cast<double>(params), timing(sixteen)});
  }
}

/// `plan` (fp32 Adam, micro-batch 1, plus its own keys) predicted from `prof`
/// with the task graph kept, for tests that look at its tasks.
Prediction predict_graph(const Profile& prof, const test::FakeModel& m, const std::string& plan, const ClusterSpec& c) {
  PredictOptions po;
  po.profile = std::make_shared<const ProfileCosts>(prof);
  po.keep_graph = true;
  return predict(m, parse_plan("micro_batch: 1\nprecision: fp32\noptimizer: adam\n" + plan, "test.yaml"), c, po);
}

}  // namespace

TEST_CASE("fitting recovers known alpha-beta parameters", "[calibrate]") {
  // t = 20 us + S / (2 GB/s), sampled at 8 B .. 8 MiB, exactly and with +-2% noise.
  const double alpha = 20e-6, beta = 1.0 / 2e9;
  std::vector<double> bytes, exact, noisy;
  for (double s = 8; s <= 8 * 1024 * 1024; s *= 4) {
    bytes.push_back(s);
    exact.push_back(alpha + beta * s);
    noisy.push_back((alpha + beta * s) * (bytes.size() % 2 ? 1.02 : 0.98));
  }
  const LinearFit f = calib::fit_alpha_beta(bytes, exact);
  REQUIRE(f.coef.size() == 2);
  CHECK(f.coef[0] == Approx(alpha).epsilon(1e-6));
  CHECK(f.coef[1] == Approx(beta).epsilon(1e-6));
  CHECK(f.max_rel_error < 1e-9);
  CHECK(f.samples == static_cast<int>(bytes.size()));

  const LinearFit g = calib::fit_alpha_beta(bytes, noisy);
  CHECK(g.coef[0] == Approx(alpha).epsilon(0.03));
  CHECK(g.coef[1] == Approx(beta).epsilon(0.03));
  // Alternating +-2% noise: every relative residual is about 2%.
  CHECK(g.rms_rel_error == Approx(0.02).margin(0.005));
}

TEST_CASE("fitting keeps coefficients physical", "[calibrate]") {
  // Times that fall with size would need a negative seconds-per-byte; the fit
  // drops that feature and keeps a constant (their relative-error mean).
  const LinearFit f = calib::fit_alpha_beta({100, 200, 300}, {3e-6, 2e-6, 1e-6});
  CHECK(f.coef[1] == 0.0);
  CHECK(f.coef[0] > 0.0);
}

TEST_CASE("GEMM fit: flops / R + 2 mn k0 / R recovers R and k0", "[calibrate]") {
  // Synthetic device: R = 10 TFLOP/s, k0 = 48 (Note [GEMM efficiency]), 5 us launch.
  const double r = 10e12, k0 = 48, c0 = 5e-6;
  Profile p;
  for (std::int64_t m : {64, 256, 1024}) {
    for (std::int64_t k : {32, 128, 2048}) {
      const double flops = 2.0 * m * m * k;
      const double t = c0 + flops / (r * k / (k + k0));
      p.kernels.push_back({"gemm", Precision::kFp32, m, m, k, 1, flops, 4.0 * (2 * m * k + m * m), timing(t)});
    }
  }
  calib::fit_profile(p);
  const LinearFit& f = p.fits.at(kernel_fit_name("gemm", Precision::kFp32));
  REQUIRE(f.features == std::vector<std::string>{"1", "flops", "mn", "bytes"});
  CHECK(1.0 / f.coef[1] == Approx(r).epsilon(1e-3));
  CHECK(f.coef[2] * r / 2 == Approx(k0).epsilon(1e-3));  // coefficient of mn is 2 k0 / R
  CHECK(f.coef[0] == Approx(c0).epsilon(1e-3));
}

TEST_CASE("a step's ratio by rounds survives the HDF5 round trip (Note [A step's ratio round by round])", "[calibrate]") {
  Profile p = sample_profile();
  p.layers.push_back({"fake.layer|in-step", Precision::kFp32, 4, 1024, timing(0.05), timing(0.12)});
  p.layers.back().round_ratio_forward = 1.25;
  p.layers.back().round_ratio_backward = 0.875;
  const std::string path = temp_path("dtsim_profile_ratio");
  save_profile(p, path);
  const Profile q = load_profile(path);
  std::filesystem::remove(path);
  REQUIRE(q.layers.size() == 3);
  CHECK(q.layers[2].round_ratio_forward == 1.25);
  CHECK(q.layers[2].round_ratio_backward == 0.875);
  CHECK(q.layers[0].round_ratio_forward == 0);
  // A damaged column (a negative ratio) is named on loading, not priced.
  p.layers.back().round_ratio_backward = -2;
  const std::string bad = temp_path("dtsim_profile_bad_ratio");
  save_profile(p, bad);
  CHECK_THROWS_WITH(load_profile(bad), Catch::Contains("/layers/round_ratio_backward: row 2 is not a ratio"));
  std::filesystem::remove(bad);
}

TEST_CASE("a profile survives the HDF5 round trip", "[calibrate]") {
  Profile p = sample_profile();
  const std::string path = temp_path("dtsim_profile_rt");
  save_profile(p, path);
  const Profile q = load_profile(path);
  std::filesystem::remove(path);
  CHECK(q.path == path);
  CHECK(q.info.at("device") == "test device");
  CHECK(q.info.at("torch.threads") == "1");
  REQUIRE(q.layers.size() == 2);
  CHECK(q.layers[1].signature == "fake.layer");
  CHECK(q.layers[1].micro_batch == 4);
  CHECK(q.layers[1].backward.median_s == 0.080);
  CHECK(q.layers[1].backward.max_s == 0.080 * 1.1);
  CHECK(q.layers[1].forward.reps == 5);
  REQUIRE(q.kernels.size() == 1);
  CHECK(q.kernels[0].flops == 2.0 * 64 * 64 * 64);
  REQUIRE(q.comm.size() == 1);
  CHECK(q.comm[0].op == CollectiveOp::kAllReduce);
  CHECK(q.comm[0].bytes == 1024);
  CHECK(q.comm[0].time.mean_s == 3e-5);
  CHECK(q.layers[1].backward.mean_s == 0);  // layers carry no mean: 0, "not measured"
  CHECK(q.layers[1].round_ratio_forward == 0);  // nor a ratio by rounds (Note [A step's ratio round by round])
  REQUIRE(q.copies.size() == 1);
  CHECK(q.copies[0].direction == "h2d");
  CHECK(q.memory.at("cuda_context_bytes") == 500 * kMiB);
  const LinearFit& f = q.fits.at("comm.gloo.all_reduce.2");
  CHECK(f.features == std::vector<std::string>{"1", "bytes"});
  CHECK(f.coef == std::vector<double>{2e-5, 1e-9});
  CHECK(f.samples == 7);
  CHECK(f.max_rel_error == 0.02);
}

TEST_CASE("a profile is written atomically and an existing one survives a failed write", "[calibrate]") {
  const std::string path = temp_path("dtsim_profile_atomic");
  save_profile(sample_profile(), path);
  // A directory that does not exist: nothing is written, the old file stays.
  CHECK_THROWS_AS(save_profile(sample_profile(), "/nonexistent-dir/x.h5"), IoError);
  CHECK(load_profile(path).layers.size() == 2);
  // No temporary file is left beside it.
  int leftovers = 0;
  for (const auto& e : std::filesystem::directory_iterator(std::filesystem::path(path).parent_path())) {
    if (e.path().filename().string().rfind(".dtsim_profile_atomic", 0) == 0) ++leftovers;
  }
  CHECK(leftovers == 0);
  std::filesystem::remove(path);
}

TEST_CASE("check_output refuses where no profile can be written, and leaves nothing where one can", "[calibrate][bad-input]") {
  // Note [Check the output first]. (The read-only directory needs a user
  // whom its mode bits stop, not root: tests/calibrate/bad_out.sh.)
  const dtsim::test::TempDir dir("check-output");
  CHECK_NOTHROW(calib::check_output(dir.file("p.h5")));
  CHECK(dir.entries().empty());  // the probe file is gone again
  std::filesystem::create_directories(dir.path / "sub");
  CHECK(error_of([&] { calib::check_output(dir.file("sub")); }) ==
        dir.file("sub") + ": cannot write: it is a directory; name a file in it, e.g. --out " + dir.file("sub") + "/profile.h5");
  CHECK(error_of([&] { calib::check_output(dir.file("missing/p.h5")); }) ==
        dir.file("missing/p.h5") + ": cannot write: directory '" + dir.file("missing") +
            "' does not exist; create it first or choose another --out");
  std::ofstream(dir.file("plain")) << "x";
  CHECK(error_of([&] { calib::check_output(dir.file("plain") + "/p.h5"); }) ==
        dir.file("plain") + "/p.h5: cannot write: '" + dir.file("plain") + "' is not a directory; choose another --out");
  CHECK_THROWS_AS(calib::check_output(dir.file("missing/p.h5")), IoError);
  CHECK(dir.entries() == std::vector<std::string>{"plain", "sub"});
}

TEST_CASE("truncated, corrupt and foreign profiles are rejected with one line", "[calibrate][bad-input]") {
  const std::string path = temp_path("dtsim_profile_bad");
  save_profile(sample_profile(), path);
  const auto size = std::filesystem::file_size(path);
  std::string bytes(size, '\0');
  {
    std::ifstream in(path, std::ios::binary);
    in.read(bytes.data(), static_cast<std::streamsize>(size));
  }
  auto write = [&](const std::string& content) {
    std::ofstream out(path, std::ios::binary | std::ios::trunc);
    out.write(content.data(), static_cast<std::streamsize>(content.size()));
  };
  // Truncated to half: HDF5 sees its end-of-file address past the end.
  write(bytes.substr(0, size / 2));
  std::string e = error_of([&] { load_profile(path); });
  CHECK(e.find(path) == 0);
  CHECK((e.find("truncated") != std::string::npos || e.find("corrupt") != std::string::npos));
  // Garbage in the middle: any failure is a CalibrationError, never a crash.
  std::string corrupt = bytes;
  for (std::size_t i = size / 4; i < size / 4 + 512 && i < size; ++i) corrupt[i] = static_cast<char>(0xA5);
  write(corrupt);
  try {
    (void)load_profile(path);
  } catch (const CalibrationError& err) {
    CHECK(std::string(err.what()).find(path) == 0);
  }
  // Not HDF5 at all.
  write("name: not a profile\n");
  CHECK(error_of([&] { load_profile(path); }).find("not an HDF5 file") != std::string::npos);
  std::filesystem::remove(path);
  CHECK(error_of([&] { load_profile(path); }).find("no such profile") != std::string::npos);
}

TEST_CASE("with a profile, a measured layer shape costs the measured median", "[calibrate]") {
  const auto costs = std::make_shared<const ProfileCosts>(sample_profile());
  CostSources src;
  const ProfileComputeModel model(costs, test::round_cluster().device, &src);
  CHECK(fake_layer_time(model, Pass::kForward, 1) == 10 * kNsPerMs);
  CHECK(fake_layer_time(model, Pass::kBackward, 1) == 20 * kNsPerMs);
  CHECK(src.layers_measured == 2);
  // b = 2 lies between the measured b = 1 (10 ms) and b = 4 (40 ms): 20 ms.
  CHECK(fake_layer_time(model, Pass::kForward, 2) == 20 * kNsPerMs);
  CHECK(src.layers_interpolated == 1);
  // fp16 was not measured: the fp32 figure (20 ms at b = 2) scaled by the
  // device's peak ratio, fp32 / fp16 = 1e12 / 1e12 on the round device.
  CHECK(fake_layer_time(model, Pass::kForward, 2, Precision::kFp16) == 20 * kNsPerMs);
  CHECK(src.layers_other_precision == 1);
  CHECK(src.layers_interpolated == 1);
  // A layer the profile never saw: its kernels (here none) are priced instead.
  Layer l;
  l.signature = "other.layer";
  WorkloadShape shape;
  shape.seq_len = 1024;
  shape.micro_batch = 2;
  CHECK(model.layer_time(l, Pass::kForward, Precision::kFp32, shape) == 0);
  CHECK(src.layers_analytic == 1);
}

TEST_CASE("predict with a profile: compute time is the measured layers'", "[calibrate]") {
  // 3 fake layers, one GPU, fp32, b = 1, s = 1024: forward 10 ms + backward
  // 20 ms per layer from the profile = 90 ms of compute on the critical path.
  const test::FakeModel m(3, 1000, 0);
  const ClusterSpec c = test::round_cluster(1, 1);
  const PlanSpec spec = parse_plan("dp: 1\nmicro_batch: 1\nprecision: fp32\n", "test.yaml");
  PredictOptions po;
  po.profile = std::make_shared<const ProfileCosts>(sample_profile());
  const Prediction p = predict(m, spec, c, po);
  CHECK(p.breakdown.compute == 90 * kNsPerMs);
  CHECK(p.sources.layers_measured == 6);
  CHECK(p.cost_source == "profile:");
  // The measured CUDA context replaces the datasheet's runtime reserve.
  CHECK(p.ranks.at(0).buffers >= 500 * kMiB);
}

TEST_CASE("collectives from a profile: measured fit, then scaled links", "[calibrate]") {
  const auto costs = std::make_shared<const ProfileCosts>(sample_profile());
  CostSources src;
  const ClusterSpec c = test::round_cluster(1, 4);
  const ProfileCommModel comm(costs, c, &src);
  CommGroup two;
  two.ranks = 2;
  two.ranks_per_node = 2;
  // Measured fit for all_reduce over 2 ranks: 20 us + 1 ns/B x 1 MB = 1.02 ms.
  CHECK(comm.collective(CollectiveOp::kAllReduce, 1'000'000, two).total() == Approx(1'020'000).margin(2));
  CHECK(src.comm_measured == 1);
  // reduce_scatter over 2 was not measured: the link is recovered from the
  // all-reduce fit (n = 2: alpha = 6 us base + 2 hops => hop 7 us; beta =
  // 2(n-1)/n / B => B = 1 GB/s), then the ring formula runs:
  // 6 us + 1 hop + (1/2) x 1 MB / 1 GB/s = 13 us + 500 us.
  CHECK(comm.collective(CollectiveOp::kReduceScatter, 1'000'000, two).total() == Approx(513'000).margin(2));
  CHECK(src.comm_scaled == 1);
  // Across nodes the datasheet network prices it.
  CommGroup across;
  across.ranks = 4;
  across.ranks_per_node = 2;
  (void)ProfileCommModel(costs, test::round_cluster(2, 2), &src).collective(CollectiveOp::kAllReduce, 1000, across);
  CHECK(src.comm_analytic == 1);
}

TEST_CASE("measured collectives are priced between their measured sizes (Note [Measured collectives])", "[calibrate]") {
  // all_reduce over 2 ranks measured at 1 KiB (20 us), 1 MiB (a median of
  // 25 us, a mean of 30 us: the median prices it, the rest are its stalls,
  // Note [A collective's stalls]), 16 MiB twice (200 and 220 us: averaged,
  // 210) and 64 MiB (700 us); its fit (50 us + 10 ns/B) must not price any
  // of them.
  Profile p;
  auto add = [&](Bytes b, double us, double mean_us = 0) {
    p.comm.push_back({"gloo", CollectiveOp::kAllReduce, 2, b, timing(us * 1e-6)});
    p.comm.back().time.mean_s = mean_us * 1e-6;
  };
  add(kKiB, 20);
  add(kMiB, 25, 30);
  add(16 * kMiB, 200);
  add(16 * kMiB, 220);
  add(64 * kMiB, 700);
  LinearFit f;
  f.features = {"1", "bytes"};
  f.coef = {50e-6, 1e-8};
  f.samples = 5;
  p.fits[comm_fit_name("gloo", CollectiveOp::kAllReduce, 2)] = f;
  const auto costs = std::make_shared<const ProfileCosts>(p);
  REQUIRE(costs->comm_measured(CollectiveOp::kAllReduce, 2) != nullptr);
  CHECK(costs->comm_measured(CollectiveOp::kAllReduce, 2)->sizes() == 4);
  CostSources src;
  const ClusterSpec c = test::round_cluster(1, 4);
  const ProfileCommModel comm(costs, c, &src);
  CommGroup two;
  two.ranks = 2;
  two.ranks_per_node = 2;
  auto us = [&](Bytes b) { return static_cast<double>(comm.collective(CollectiveOp::kAllReduce, b, two).total()) * 1e-3; };
  // At a measured size, its time.
  CHECK(us(kKiB) == Approx(20).margin(0.002));
  CHECK(us(kMiB) == Approx(25).margin(0.002));
  CHECK(us(16 * kMiB) == Approx(210).margin(0.002));
  CHECK(us(64 * kMiB) == Approx(700).margin(0.002));
  CHECK(src.comm_measured == 4);
  // Between 1 and 16 MiB the straight line: at 8.5 MiB, 25 + 185 x 7.5/15
  // = 117.5 us, of which the line's intercept (25 - 185/15 = 12.667 us) is
  // the latency and the rest (104.833 us) bytes on the link at its rate.
  const CollectiveCost mid = comm.collective(CollectiveOp::kAllReduce, 17 * kMiB / 2, two);
  CHECK(static_cast<double>(mid.total()) * 1e-3 == Approx(117.5).margin(0.002));
  CHECK(static_cast<double>(mid.latency) * 1e-3 == Approx(25 - 185.0 / 15).margin(0.001));
  CHECK(mid.wire_bytes / mid.rate * 1e6 == Approx(117.5 - 25 + 185.0 / 15).margin(0.001));
  // Its stalls: 1 MiB's slowest run (timing() makes it 1.1 x 25 us) is the
  // only tail, so a stall is 2.5 us, and 1 MiB meets (30 - 25) / 2.5 = 2 of
  // them; sizes without a mean none, so 8.5 MiB, halfway to 16 MiB, 1.
  CHECK(comm.collective(CollectiveOp::kAllReduce, kMiB, two).stall == 2500);
  CHECK(comm.collective(CollectiveOp::kAllReduce, kMiB, two).stalls == Approx(2.0));
  CHECK(mid.stall == 2500);
  CHECK(mid.stalls == Approx(1.0));
  CHECK(comm.collective(CollectiveOp::kAllReduce, kKiB, two).stalls == 0);
  // `dtsim comm` shows them: 1 MiB typical 25 us, 2 stalls of 2.5 us, a
  // mean of 25 + 2 x 2.5 = 30 us; 2 MiB (1/15 of the way to 16 MiB) 25 +
  // 185/15 = 37.333 us, 2 x 14/15 stalls, a mean of 37.333 + 4.667 = 42 us.
  const auto rows = comm_sweep(comm, CollectiveOp::kAllReduce, two, kMiB, 2 * kMiB);
  REQUIRE(rows.size() == 2);
  CHECK(rows[0].stalls == Approx(2.0));
  CHECK(rows[1].stalls == Approx(2.0 * 14 / 15));
  const std::string table = format_comm_table("round", CollectiveOp::kAllReduce, two, rows, "");
  CHECK(table.find("stalls for 0.00 ms") != std::string::npos);  // 2.5 us
  CHECK(table.find("  mean (us)") != std::string::npos);
  CHECK(table.find("   25.00 ") != std::string::npos);
  CHECK(table.find("       30.00\n") != std::string::npos);
  CHECK(table.find("       42.00\n") != std::string::npos);
  const std::string json = comm_to_json("round", CollectiveOp::kAllReduce, two, rows, "");
  const std::size_t at = json.find("\"stalls\": ");
  REQUIRE(at != std::string::npos);
  CHECK(std::stod(json.substr(at + 10)) == Approx(2.0));
  CHECK(json.find("\"stall_us\": 2.5") != std::string::npos);
  CHECK(mid.rate == c.intra_node.rate());
  CHECK(mid.algorithm == "measured");
  // Above 64 MiB the last two sizes' rate: 490 us a 48 MiB, so 128 MiB is
  // 700 + 490 x 64/48 = 1353.33 us.
  CHECK(us(128 * kMiB) == Approx(700 + 490.0 * 64 / 48).margin(0.002));
  // Below 1 KiB the first line: 10 us over (1 MiB - 1 KiB), so 512 B is
  // 20 - 10 x 512 / 1047552 us.
  CHECK(us(512) == Approx(20 - 10.0 * 512 / 1047552).margin(0.002));
  // Where the times dip (noise), no climb is extrapolated: 2 KiB measured
  // faster than 1 KiB leaves 512 B at 1 KiB's time, and a last size faster
  // than the one before leaves larger sizes at its time.
  Profile dip;
  for (auto [b, t] : {std::pair<Bytes, double>{kKiB, 20e-6}, {2 * kKiB, 15e-6}, {kMiB, 40e-6}, {2 * kMiB, 35e-6}}) {
    dip.comm.push_back({"gloo", CollectiveOp::kAllReduce, 2, b, timing(t)});
  }
  dip.fits[comm_fit_name("gloo", CollectiveOp::kAllReduce, 2)] = f;
  const ProfileCommModel dipped(std::make_shared<const ProfileCosts>(dip), c, nullptr);
  CHECK(dipped.collective(CollectiveOp::kAllReduce, 512, two).total() == 20'000);
  CHECK(dipped.collective(CollectiveOp::kAllReduce, 1536, two).total() == 17'500);  // halfway: 17.5 us
  CHECK(dipped.collective(CollectiveOp::kAllReduce, 8 * kMiB, two).total() == 35'000);
  // profile show says the fits only summarise them; a profile without
  // collectives says nothing of it.
  CHECK_THAT(calib::format_profile(p), Catch::Contains("collectives: priced from their measured sizes"));
  CHECK_THAT(calib::format_profile(p), Catch::Contains("each at its median with its slow runs counted apart as stalls"));
  CHECK_THAT(calib::format_profile(Profile{}), !Catch::Contains("collectives: priced"));
  // A profile with the fit but one size measured prices by the fit:
  // sample_profile's 20 us + 1 ns/B (the test above).
  CHECK(std::make_shared<const ProfileCosts>(sample_profile())->comm_measured(CollectiveOp::kAllReduce, 2) == nullptr);
}

TEST_CASE("measured collectives across nodes are priced between their sizes too", "[calibrate]") {
  // An imported 2 x 8 all-reduce at 1 MiB (100 us) and 4 MiB (160 us): 2
  // MiB is 100 + 60/3 = 120 us, on the inter-node link.
  Profile p;
  for (auto [b, t] : {std::pair<Bytes, double>{kMiB, 100e-6}, {4 * kMiB, 160e-6}}) {
    p.comm.push_back({"nccl", CollectiveOp::kAllReduce, 16, b, timing(t), 8});
  }
  LinearFit f;
  f.features = {"1", "bytes"};
  f.coef = {1e-3, 0};
  p.fits[comm_fit_name("nccl", CollectiveOp::kAllReduce, 16, 8)] = f;
  CostSources src;
  const ClusterSpec c = test::round_cluster(2, 8);
  const ProfileCommModel comm(std::make_shared<const ProfileCosts>(p), c, &src);
  CommGroup g;
  g.ranks = 16;
  g.ranks_per_node = 8;
  const CollectiveCost x = comm.collective(CollectiveOp::kAllReduce, 2 * kMiB, g);
  CHECK(static_cast<double>(x.total()) * 1e-3 == Approx(120).margin(0.002));
  CHECK(x.link == LinkClass::kInterNode);
  CHECK(src.comm_measured == 1);
}

TEST_CASE("the measurement programs' lines are parsed, bad ones named", "[calibrate][bad-input]") {
  Profile p;
  calib::Progress prog;
  CHECK(calib::parse_bench_line("progress\t3\t10\tgpt2.block b=1", "torch", p, &prog));
  CHECK(prog.done == 3);
  CHECK(prog.total == 10);
  CHECK_FALSE(calib::parse_bench_line("info\tdevice\tCPU X", "torch", p, &prog));
  CHECK(p.info.at("torch.device") == "CPU X");
  calib::parse_bench_line("layer\tgpt2.block:h=768\tfp32\t2\t64\t0.01\t0.009\t0.02\t0.03\t0.028\t0.04\t5", "torch", p, &prog);
  REQUIRE(p.layers.size() == 1);
  CHECK(p.layers[0].backward.median_s == 0.03);
  calib::parse_bench_line("comm\tgloo\tall_gather\t2\t4096\t1e-4\t9e-5\t2e-4\t20", "gloo", p, &prog);
  CHECK(p.comm.at(0).op == CollectiveOp::kAllGather);
  CHECK(p.comm.at(0).time.mean_s == 0);  // 9 fields: no mean
  calib::parse_bench_line("comm\tgloo\tall_gather\t2\t4096\t1e-4\t9e-5\t2e-3\t20\t3e-4", "gloo", p, &prog);
  CHECK(p.comm.at(1).time.mean_s == 3e-4);
  CHECK(error_of([&] { calib::parse_bench_line("comm\tgloo\tall_gather\t2\t4096\t1e-4\t9e-5\t2e-4\t20\t-1", "gloo", p, &prog); })
            .find("field 10 '-1' is not a time") != std::string::npos);
  CHECK(error_of([&] { calib::parse_bench_line("comm\tgloo\tall_gather\t2\tlots\t1e-4\t9e-5\t2e-4\t20", "gloo", p, &prog); }) ==
        "gloo: field 5 'lots' is not a number in line 'comm\tgloo\tall_gather\t2\tlots\t1e-4\t9e-5\t2e-4\t20'");
  CHECK(error_of([&] { calib::parse_bench_line("comm\tgloo\tscatter\t2\t8\t1\t1\t1\t1", "gloo", p, &prog); })
            .find("'scatter' is not a collective") != std::string::npos);
  CHECK(error_of([&] { calib::parse_bench_line("bogus\t1", "torch", p, &prog); }).find("unknown record 'bogus'") != std::string::npos);
}

TEST_CASE("the Python probe's records and the C++ loop's price a Python loop (Note [Python host probe])", "[calibrate]") {
  Profile p;
  // dtsim_torch_bench's C++ side: 64 ops in 0.4 ms (6.25 us each); steps of
  // 1 and 16 tensors in 18 and 288 us.
  for (const char* line : {"kernel\thost_ops\tfp32\t64\t1\t1\t1\t0\t0\t4e-4\t3.9e-4\t9e-4\t100",
                           "kernel\thost_step\tfp32\t64\t1\t1\t1\t0\t0\t18e-6\t17e-6\t1e-4\t2000",
                           "kernel\thost_step\tfp32\t1024\t16\t1\t1\t0\t0\t288e-6\t280e-6\t9e-4\t100"}) {
    calib::parse_bench_line(line, "torch", p, nullptr);
  }
  // The probe: Python 3.11.2 and torch 1.13.1; 64 ops in 1.6 ms (25 us
  // each); steps in 78 and 798 us.
  for (const char* line : {"info\tpython\t3.11.2", "info\ttorch\t1.13.1",
                           "kernel\tpython_ops\tfp32\t64\t1\t1\t1\t0\t0\t1.6e-3\t1.5e-3\t3e-3\t44",
                           "kernel\tpython_step\tfp32\t64\t1\t1\t1\t0\t0\t78e-6\t70e-6\t2e-4\t800",
                           "kernel\tpython_step\tfp32\t1024\t16\t1\t1\t0\t0\t798e-6\t700e-6\t2e-3\t100"}) {
    calib::parse_bench_line(line, "python", p, nullptr);
  }
  CHECK(p.info.at("python.python") == "3.11.2");
  CHECK(p.info.at("python.torch") == "1.13.1");
  const auto cost = python_host_cost(p);
  REQUIRE(cost.has_value());
  // 25 - 6.25 = 18.75 us an op; the steps' differences 60 and 510 us: 30 us a tensor.
  CHECK(cost->per_op_s == Approx(18.75e-6));
  CHECK(cost->per_tensor_s == Approx(30e-6));
  p.info["python"] = "/usr/bin/python3";
  CHECK_THAT(calib::format_profile(p),
             Catch::Contains("python loop: /usr/bin/python3 (Python 3.11.2, torch 1.13.1): 18.8 us an op, 30.0 us a tensor's step"));
  // Note [Probe and loop interleaved]: the rounds, where calibration recorded them.
  CHECK_THAT(calib::format_profile(p), !Catch::Contains("    timed: "));
  p.info["python.rounds"] = "3 Python, 3 C++, interleaved (Note [Probe and loop interleaved])";
  CHECK_THAT(calib::format_profile(p), Catch::Contains("pay them\n    timed: 3 Python, 3 C++, interleaved"));
  CHECK_THAT(calib::profile_to_json(p), Catch::Contains("\"python_host\": {"));
  // A probe that could not import torch: its reason, and no cost.
  Profile none;
  calib::parse_bench_line("skip\tpython\ttorch cannot be imported by /usr/bin/python3: No module named 'torch'", "python", none, nullptr);
  CHECK(none.info.at("python.skipped") == "python\ttorch cannot be imported by /usr/bin/python3: No module named 'torch'");
  CHECK_FALSE(python_host_cost(none).has_value());
  none.info["python"] = "not measured: torch cannot be imported";
  CHECK_THAT(calib::format_profile(none), Catch::Contains("python loop: not measured: torch cannot be imported"));
  CHECK_THAT(calib::profile_to_json(none), Catch::Contains("\"python_host\": null"));
}

TEST_CASE("the probe's and the C++ loop's rounds are pooled point by point (Note [Probe and loop interleaved])", "[calibrate]") {
  // Three rounds of the C++ side: host_ops at 0.20, 0.40 (a slow spell) and
  // 0.22 ms; host_step of 1 tensor in the first and third only.
  const auto run = [](double ops_ms, std::optional<double> step_us) {
    Profile r;
    r.kernels.push_back({"host_ops", Precision::kFp32, 64, 1, 1, 1, 0, 0, Timing{ops_ms * 1e-3, ops_ms * 0.9e-3, ops_ms * 2e-3, 100, 0}});
    if (step_us) r.kernels.push_back({"host_step", Precision::kFp32, 64, 1, 1, 1, 0, 0, Timing{*step_us * 1e-6, *step_us * 0.5e-6, *step_us * 3e-6, 10, 0}});
    return r;
  };
  const auto pooled = calib::pool_rounds({run(0.20, 18.0), run(0.40, std::nullopt), run(0.22, 22.0)});
  REQUIRE(pooled.size() == 2);
  // host_ops: the median of 0.20, 0.40, 0.22 is 0.22 ms (the spell's round
  // dropped); its min 0.9 x 0.20, its max 2 x 0.40; 300 repetitions.
  CHECK(pooled[0].kind == "host_ops");
  CHECK(pooled[0].time.median_s == Approx(0.22e-3));
  CHECK(pooled[0].time.min_s == Approx(0.18e-3));
  CHECK(pooled[0].time.max_s == Approx(0.80e-3));
  CHECK(pooled[0].time.reps == 300);
  // host_step: two rounds timed it, 18 and 22 us: their mean, 20 us.
  CHECK(pooled[1].kind == "host_step");
  CHECK(pooled[1].time.median_s == Approx(20e-6));
  CHECK(pooled[1].time.min_s == Approx(9e-6));
  CHECK(pooled[1].time.max_s == Approx(66e-6));
  CHECK(pooled[1].time.reps == 20);
  CHECK(calib::pool_rounds({}).empty());
}

TEST_CASE("a profile from another kind of device is flagged", "[calibrate]") {
  Profile p;
  p.path = "h100.h5";
  p.info["device"] = "NVIDIA H100 80GB HBM3";
  p.info["device_kind"] = "cuda";
  DeviceSpec d;
  d.name = "H100-SXM";
  CHECK(profile_device_mismatch(p, d).empty());
  d.name = "A100-SXM4-80GB";
  CHECK(profile_device_mismatch(p, d) ==
        "profile h100.h5 was measured on NVIDIA H100 80GB HBM3 but the cluster's device is A100-SXM4-80GB: its layer times do not apply");
  d.name = "cpu";
  CHECK(profile_device_mismatch(p, d).find("was measured on a GPU") != std::string::npos);
  // A device name with no known family is not second-guessed.
  d.name = "my-accelerator";
  CHECK(profile_device_mismatch(p, d).empty());
  // And predict reports it.
  p.layers.push_back({"fake.layer", Precision::kFp32, 1, 1024, timing(0.010), timing(0.020)});
  ClusterSpec c = test::round_cluster(1, 1);
  c.device.name = "A100-SXM4-80GB";
  PredictOptions po;
  po.profile = std::make_shared<const ProfileCosts>(p);
  const Prediction pr = predict(test::FakeModel(1, 1000, 0), parse_plan("dp: 1\nmicro_batch: 1\nprecision: fp32\n", "t.yaml"), c, po);
  REQUIRE(pr.warnings.size() == 1);
  CHECK(pr.warnings[0].find("A100-SXM4-80GB") != std::string::npos);
}

namespace {

/// The warnings of a one-layer prediction priced from `p` (a layer added).
std::vector<std::string> prediction_warnings(Profile p) {
  p.layers.push_back({"fake.layer", Precision::kFp32, 1, 1024, timing(0.010), timing(0.020)});
  PredictOptions po;
  po.profile = std::make_shared<const ProfileCosts>(p);
  return predict(test::FakeModel(1, 1000, 0), parse_plan("dp: 1\nmicro_batch: 1\nprecision: fp32\n", "t.yaml"),
                 test::round_cluster(1, 1), po)
      .warnings;
}

}  // namespace

TEST_CASE("a quick profile says how far it is to be trusted, in predict and profile show (Note [Quick profiles])", "[calibrate]") {
  Profile p;
  p.path = "quick.h5";
  p.info["sweep"] = "full";
  CHECK(profile_sweep_warning(p).empty());
  CHECK(calib::format_profile(p).find("trust:") == std::string::npos);
  CHECK(profile_sweep_warning(Profile{}).empty());  // an imported profile names no sweep
  p.info["sweep"] = "quick";
  const std::string w = profile_sweep_warning(p);
  CHECK_THAT(w, Catch::StartsWith("profile quick.h5 is a quick sweep (dtsim calibrate --quick)") &&
                    Catch::Contains("13-81% short") && Catch::Contains("calibrate without --quick"));
  CHECK(calib::format_profile(p).find("  trust: " + w + "\n") != std::string::npos);
  CHECK(calib::profile_to_json(p).find("\"trust_warning\": \"profile quick.h5 is a quick sweep") != std::string::npos);
  const std::vector<std::string> warnings = prediction_warnings(p);
  REQUIRE(warnings.size() == 1);
  CHECK(warnings[0] == w);
}

TEST_CASE("profile show says where the measured ranks ran and how they waited (Note [Gloo's event loop])", "[calibrate]") {
  Profile p;
  p.path = "bound.h5";
  const std::string none = calib::format_profile(p);
  CHECK(none.find("gloo.gloo_loop") == std::string::npos);  // an older profile: nothing to say
  p.info["torch.cpus"] = "cpu 0";
  p.info["gloo.cpus"] = "cpu 0";
  p.info["gloo.collective_wait"] = "polling (Note [Busy waits])";
  p.info["gloo.gloo_loop"] = "lowest priority (Note [Gloo's event loop])";
  const std::string shown = calib::format_profile(p);
  CHECK_THAT(shown, Catch::Contains("  torch.cpus: cpu 0\n") && Catch::Contains("  gloo.cpus: cpu 0\n") &&
                        Catch::Contains("  gloo.collective_wait: polling (Note [Busy waits])\n") &&
                        Catch::Contains("  gloo.gloo_loop: lowest priority (Note [Gloo's event loop])\n"));
}

TEST_CASE("a profile timed while the machine's speed moved says so, in predict and profile show (Note [A steady calibration])",
          "[calibrate]") {
  Profile p;
  p.path = "moved.h5";
  CHECK(profile_speed_warning(p).empty());  // no probe (a GPU, an imported profile)
  // Three passes at 5.0, 5.2 and 5.5 ms and 5.1 at the end: 5.5 / 5.0 =
  // 1.10x, within the suite's 1.15x.
  p.info["torch.probe_passes_s"] = "0.005,0.0052,0.0055";
  p.info["torch.probe_end_s"] = "0.0051";
  CHECK(profile_speed_warning(p).empty());
  CHECK(calib::format_profile(p).find("trust:") == std::string::npos);
  // The sweep's passes at 7.99 ms, its end at 5.0: 7.99 / 5.0 = 1.60x.
  p.info["torch.probe_passes_s"] = "0.00799";
  p.info["torch.probe_end_s"] = "0.005";
  const std::string w = profile_speed_warning(p);
  CHECK_THAT(w, Catch::StartsWith("profile moved.h5 was measured while the machine's speed moved") &&
                    Catch::Contains("took 5.00 to 7.99 ms across the calibration (1.60x") &&
                    Catch::Contains("calibrate again in a steadier minute"));
  // A pass alone can show it: 5.0 and 6.0 ms (1.20x), the end 5.5.
  p.info["torch.probe_passes_s"] = "0.005,0.006";
  p.info["torch.probe_end_s"] = "0.0055";
  CHECK_THAT(profile_speed_warning(p), Catch::Contains("took 5.00 to 6.00 ms") && Catch::Contains("(1.20x"));
  // A profile made before each pass was kept: the passes' median (7.99 ms)
  // against the end (5.0).
  p.info.erase("torch.probe_passes_s");
  p.info["torch.probe_s"] = "0.00799";
  p.info["torch.probe_end_s"] = "0.005";
  CHECK_THAT(profile_speed_warning(p), Catch::Contains("took 5.00 to 7.99 ms"));
  // A damaged entry is left out; one timing alone tells nothing.
  p.info["torch.probe_passes_s"] = "fast,0.005";
  p.info.erase("torch.probe_end_s");
  CHECK(profile_speed_warning(p).empty());
  p.info["torch.probe_passes_s"] = "0.00799";
  p.info["torch.probe_end_s"] = "0.005";
  CHECK(calib::format_profile(p).find("  trust: " + w + "\n") != std::string::npos);
  CHECK(calib::profile_to_json(p).find("\"speed_warning\": \"profile moved.h5 was measured") != std::string::npos);
  const std::vector<std::string> warnings = prediction_warnings(p);
  REQUIRE(warnings.size() == 1);
  CHECK(warnings[0] == w);
}

TEST_CASE("profile show says how well each layer kind's measurements price the batch sizes between them (Note [Layer interpolation error])", "[calibrate]") {
  Profile p;
  p.path = "layers.h5";
  // conv.layer at b 1, 2 and 3: forward 1.0, 2.2 and 3.0 ms, backward 2, 4
  // and 6 ms. Leaving b 2 out, its neighbours price it at 2.0 ms forward
  // (2.0 / 2.2 - 1 = -9.09%) and 4 ms backward (exact): 2 points, rms
  // sqrt(0.0909^2 / 2) = 6.43%, max 9.09%.
  for (const auto& [b, f, g] : {std::tuple{1, 0.0010, 0.002}, {2, 0.0022, 0.004}, {3, 0.0030, 0.006}}) {
    p.layers.push_back({"conv.layer:ci=3,co=8", Precision::kFp32, b, 1, timing(f), timing(g)});
  }
  // Two batch sizes have no point between them; a layer timed inside a
  // step only scales the others: neither counts.
  p.layers.push_back({"fc.layer:in=8", Precision::kFp32, 1, 1, timing(0.001), timing(0.002)});
  p.layers.push_back({"fc.layer:in=8", Precision::kFp32, 4, 1, timing(0.004), timing(0.008)});
  for (int b : {1, 2, 3}) p.layers.push_back({"conv.layer:ci=3,co=8|in-step", Precision::kFp32, b, 1, timing(0.5), timing(0.5)});
  const std::string text = calib::format_profile(p);
  CHECK_THAT(text, Catch::Contains("    conv.layer                           2 points   rms   6.4%  max   9.1%\n"));
  CHECK_THAT(text, !Catch::Contains("    fc.layer "));
  const YAML::Node j = YAML::Load(calib::profile_to_json(p));
  REQUIRE(j["layer_interpolation"]["conv.layer"]);
  CHECK(j["layer_interpolation"]["conv.layer"]["points"].as<int>() == 2);
  CHECK(j["layer_interpolation"]["conv.layer"]["rms_rel_error"].as<double>() == Approx(std::sqrt(std::pow(2.0 / 2.2 - 1, 2) / 2)));
  CHECK(j["layer_interpolation"]["conv.layer"]["max_rel_error"].as<double>() == Approx(1 - 2.0 / 2.2));
  CHECK_FALSE(j["layer_interpolation"]["fc.layer"]);
  // A profile with no such series says nothing of it.
  CHECK_THAT(calib::format_profile(Profile{}), !Catch::Contains("between measured batch sizes"));
}

TEST_CASE("each point keeps the slower rank's time (Note [The slowest rank sets the pace])", "[calibrate]") {
  Profile mine;
  mine.layers.push_back({"fake.layer", Precision::kFp32, 1, 64, timing(0.010), timing(0.020)});
  mine.layers.push_back({"fake.layer", Precision::kFp32, 2, 64, timing(0.030), timing(0.060)});
  mine.kernels.push_back({"gemm", Precision::kFp32, 64, 64, 64, 1, 0, 0, timing(1e-4)});
  Profile other;
  // b=1: forward slower there (12 ms), backward faster (18 ms): each pass
  // keeps its slower median. b=2: faster in both passes, kept as measured.
  other.layers.push_back({"fake.layer", Precision::kFp32, 1, 64, timing(0.012), timing(0.018)});
  other.layers.push_back({"fake.layer", Precision::kFp32, 2, 64, timing(0.029), timing(0.050)});
  // A point only the other copy measured adds nothing; the GEMM is slower there.
  other.layers.push_back({"fake.layer", Precision::kFp32, 4, 64, timing(0.1), timing(0.2)});
  other.kernels.push_back({"gemm", Precision::kFp32, 64, 64, 64, 1, 0, 0, timing(1.5e-4)});
  CHECK(calib::keep_slowest(mine, other) == 2);  // the b=1 layer and the GEMM
  REQUIRE(mine.layers.size() == 2);
  CHECK(mine.layers[0].forward.median_s == 0.012);
  CHECK(mine.layers[0].forward.max_s == Approx(0.012 * 1.1));  // the slower copy's spread comes along
  CHECK(mine.layers[0].backward.median_s == 0.020);
  CHECK(mine.layers[1].forward.median_s == 0.030);
  CHECK(mine.layers[1].backward.median_s == 0.060);
  CHECK(mine.kernels[0].time.median_s == 1.5e-4);
  // Note [The slowest copy's probe]: the profile's probe is the slower
  // copy's (9.8 ms over 9.13), as a validation round's is its slowest rank's.
  mine.info["torch.probe_s"] = "0.00913";
  other.info["torch.probe_s"] = "0.0098";
  calib::keep_slowest(mine, other);
  CHECK(mine.info["torch.probe_s"] == "0.0098");
  other.info["torch.probe_s"] = "0.0085";  // a faster copy leaves it
  calib::keep_slowest(mine, other);
  CHECK(mine.info["torch.probe_s"] == "0.0098");
  Profile unprobed;  // a copy without one (a GPU, a quick sweep's) neither
  calib::keep_slowest(mine, unprobed);
  CHECK(mine.info["torch.probe_s"] == "0.0098");
  Profile none;  // and a measured copy without one takes the other's
  calib::keep_slowest(none, other);
  CHECK(none.info["torch.probe_s"] == "0.0085");
  // Every copy's is kept, the measured copy's first, and profile show says so.
  CHECK(mine.info["torch.probe_copies_s"] == "0.00913,0.0098,0.0085");
  CHECK_THAT(calib::format_profile(mine),
             Catch::Contains("machine probe (one Bi-LSTM layer, b 4, s 32): 9.8 ms during the layer sweep (the slowest "
                             "copy's; the copies' 9.13 ms, 9.8 ms, 8.5 ms)"));
}

TEST_CASE("a step's loop goes with its in-step record, from the copy whose step was slower (Note [A step's pair from one copy])",
          "[calibrate]") {
  Profile mine, other;
  // Layer a: the other copy's step is slower (14 ms forward against 12),
  // its loop faster (9 against 10): both from the other copy, the ratio
  // 14 / 9. Record by record it would have been 14 / 10.
  mine.layers.push_back({"a|loop", Precision::kFp32, 4, 64, timing(0.010), timing(0.020)});
  mine.layers.push_back({"a|in-step", Precision::kFp32, 4, 64, timing(0.012), timing(0.024)});
  other.layers.push_back({"a|loop", Precision::kFp32, 4, 64, timing(0.009), timing(0.021)});
  other.layers.push_back({"a|in-step", Precision::kFp32, 4, 64, timing(0.014), timing(0.023)});
  // Layer b: the other copy's loop slower (11 against 10), its step not
  // (11 against 12): both stay this copy's, the ratio 12 / 10, not 12 / 11.
  mine.layers.push_back({"b|loop", Precision::kFp32, 4, 64, timing(0.010), timing(0.020)});
  mine.layers.push_back({"b|in-step", Precision::kFp32, 4, 64, timing(0.012), timing(0.024)});
  other.layers.push_back({"b|loop", Precision::kFp32, 4, 64, timing(0.011), timing(0.022)});
  other.layers.push_back({"b|in-step", Precision::kFp32, 4, 64, timing(0.011), timing(0.023)});
  // Layer c: a loop whose step this copy did not record keeps the slower time.
  mine.layers.push_back({"c|loop", Precision::kFp32, 4, 64, timing(0.010), timing(0.020)});
  other.layers.push_back({"c|loop", Precision::kFp32, 4, 64, timing(0.011), timing(0.019)});
  CHECK(calib::keep_slowest(mine, other) == 2);  // a's step (its loop with it) and c's loop
  CHECK(mine.layers[0].forward.median_s == 0.009);   // a's loop: the other copy's forward
  CHECK(mine.layers[0].backward.median_s == 0.020);  // and this copy's backward (this step's was slower)
  CHECK(mine.layers[1].forward.median_s == 0.014);
  CHECK(mine.layers[1].backward.median_s == 0.024);
  CHECK(mine.layers[2].forward.median_s == 0.010);
  CHECK(mine.layers[2].backward.median_s == 0.020);
  CHECK(mine.layers[3].forward.median_s == 0.012);
  CHECK(mine.layers[4].forward.median_s == 0.011);
  CHECK(mine.layers[4].backward.median_s == 0.020);
}

TEST_CASE("a step's ratio round by round: each round's medians, the median over rounds, the copies' mean (Note [A step's ratio round by round])",
          "[calibrate]") {
  using dtsim::calib::bench::round_ratio;
  // Round medians: step 12 / 14 / 30 / 11, loop 10 / 10 / 10 / 11 (the third
  // round's step met a spell): ratios 1.2, 1.4, 3.0, 1.0, median 1.3. Pooled,
  // the step's median would be (12 + 14) / 2 = 13 over the loop's 10: 1.3 too,
  // but with the spell on the loop's third round instead (30 there, step 12)
  // the rounds' ratios 1.2, 1.4, 0.4, 1.0 give 1.1 where pooled medians give 12.5 / 10.5.
  CHECK(round_ratio({{11, 12, 13}, {14}, {30}, {11}}, {{10}, {9, 10, 11}, {10}, {11}}) == Approx(1.3));
  CHECK(round_ratio({{11, 12, 13}, {14}, {12}, {11}}, {{10}, {9, 10, 11}, {30}, {11}}) == Approx(1.1));
  // One round, or rounds that do not pair: no ratio.
  CHECK(round_ratio({{12}}, {{10}}) == 0);
  CHECK(round_ratio({{12}, {13}}, {{10}}) == 0);
  CHECK(round_ratio({{12}, {}}, {{10}, {10}}) == 0);  // one round with both: none
  // The record carries it after the memory fields (-1: not measured).
  Profile parsed;
  calib::parse_bench_line("layer\ta|in-step\tfp32\t4\t64\t0.012\t0.011\t0.02\t0.024\t0.02\t0.03\t20\t0.013\t0.025\t-1\t-1\t1.3\t0.9",
                          "torch", parsed, nullptr);
  REQUIRE(parsed.layers.size() == 1);
  CHECK(parsed.layers[0].forward_transient == -1);
  CHECK(parsed.layers[0].round_ratio_forward == 1.3);
  CHECK(parsed.layers[0].round_ratio_backward == 0.9);
  CHECK_THROWS_AS(calib::parse_bench_line("layer\ta|in-step\tfp32\t4\t64\t0.012\t0.011\t0.02\t0.024\t0.02\t0.03\t20\t0.013\t0.025\t-1\t-1\t-1.3\t0.9",
                                          "torch", parsed, nullptr),
                  CalibrationError);
  // Two copies: each ratio is of its own rounds, so the profile takes their
  // mean (1.3 and 1.5: 1.4), whichever copy's step was slower; a copy
  // without one leaves the other's.
  Profile mine, other;
  mine.layers.push_back({"a|loop", Precision::kFp32, 4, 64, timing(0.010), timing(0.020)});
  mine.layers.push_back({"a|in-step", Precision::kFp32, 4, 64, timing(0.012), timing(0.024)});
  mine.layers.back().round_ratio_forward = 1.3;
  mine.layers.back().round_ratio_backward = 0.9;
  other.layers.push_back({"a|loop", Precision::kFp32, 4, 64, timing(0.009), timing(0.021)});
  other.layers.push_back({"a|in-step", Precision::kFp32, 4, 64, timing(0.014), timing(0.023)});
  other.layers.back().round_ratio_forward = 1.5;
  calib::keep_slowest(mine, other);
  CHECK(mine.layers[1].round_ratio_forward == Approx(1.4));
  CHECK(mine.layers[1].round_ratio_backward == 0.9);
  // The simulator takes it as the typical ratio: the step's 14 ms over the
  // loop's 9 would be 1.56, the rounds say 1.4.
  Profile prof = sample_profile();
  prof.layers.push_back({"fake.layer|loop", Precision::kFp32, 4, 1024, timing(0.009), timing(0.021)});
  prof.layers.push_back({"fake.layer|in-step", Precision::kFp32, 4, 1024, timing(0.014), timing(0.024)});
  prof.layers.back().round_ratio_forward = 1.4;
  const ProfileCosts costs(prof);
  CHECK(costs.in_step_factor("fake.layer", Precision::kFp32, Pass::kForward, 4, 1024) == Approx(1.4));
  CHECK(costs.in_step_factor("fake.layer", Precision::kFp32, Pass::kBackward, 4, 1024) == Approx(0.024 / 0.021));  // none: pooled
  // Kept within [0.5, 3] as the pooled ratio is.
  prof.layers.back().round_ratio_forward = 4.0;
  CHECK(ProfileCosts(prof).in_step_factor("fake.layer", Precision::kFp32, Pass::kForward, 4, 1024) == 3.0);
}

TEST_CASE("a data-parallel rank's layers take the ratio of the steps that all-reduced (Note [Layers in a data-parallel step])",
          "[calibrate]") {
  // Two copies' ratios by rounds are averaged as the plain step's are:
  // 1.6 and 1.8 give 1.7.
  Profile mine, other;
  mine.layers.push_back({"a|in-dp-step", Precision::kFp32, 4, 64, timing(0.015), timing(0.024)});
  mine.layers.back().round_ratio_forward = 1.6;
  other.layers.push_back({"a|in-dp-step", Precision::kFp32, 4, 64, timing(0.016), timing(0.023)});
  other.layers.back().round_ratio_forward = 1.8;
  calib::keep_slowest(mine, other);
  CHECK(mine.layers[0].round_ratio_forward == Approx(1.7));
  CHECK(mine.layers[0].forward.median_s == 0.016);  // the slower copy's times, as any record's
  // A layer looped at 9 ms forward and 21 ms backward: 1.4 in the plain
  // step (by rounds), 1.7 in the data-parallel one (by rounds) forward and,
  // backward, 27.3 ms pooled over 21: 1.3.
  Profile prof = sample_profile();
  prof.layers.push_back({"fake.layer|loop", Precision::kFp32, 4, 1024, timing(0.009), timing(0.021)});
  prof.layers.push_back({"fake.layer|in-step", Precision::kFp32, 4, 1024, timing(0.0126), timing(0.021)});
  prof.layers.back().round_ratio_forward = 1.4;
  const ProfileCosts plain(prof);
  prof.layers.push_back({"fake.layer|in-dp-step", Precision::kFp32, 4, 1024, timing(0.0153), timing(0.0273)});
  prof.layers.back().round_ratio_forward = 1.7;
  const auto costs = std::make_shared<const ProfileCosts>(prof);
  CHECK(costs->in_step_factor("fake.layer", Precision::kFp32, Pass::kForward, 4, 1024) == Approx(1.4));
  CHECK(costs->in_step_factor("fake.layer", Precision::kFp32, Pass::kForward, 4, 1024, true) == Approx(1.7));
  CHECK(costs->in_step_factor("fake.layer", Precision::kFp32, Pass::kBackward, 4, 1024, true) == Approx(0.0273 / 0.021));
  CHECK(costs->in_step_factor("fake.layer", Precision::kFp32, Pass::kBackward, 4, 1024) == Approx(1.0));
  // A profile without them prices a data-parallel rank by the plain step.
  CHECK(plain.in_step_factor("fake.layer", Precision::kFp32, Pass::kForward, 4, 1024, true) == Approx(1.4));
  // Through the compute model: the layer's 40 ms forward at b 4 (the
  // sweep's sample) is 56 ms in a plain step and 68 ms in a data-parallel one.
  const ProfileComputeModel model(costs, test::round_cluster().device, nullptr);
  CHECK(fake_layer_time(model, Pass::kForward, 4) == 56 * kNsPerMs);
  CHECK(fake_layer_time(model, Pass::kForward, 4, Precision::kFp32, true) == 68 * kNsPerMs);
}

TEST_CASE("a collective is fitted to its mean where one was measured (Note [A collective costs its mean])", "[calibrate]") {
  // Medians on t = 100 us + S / (1 GB/s), means twice that: the fit must
  // recover the means' line (200 us, 0.5 GB/s).
  Profile p;
  for (double bytes : {1e3, 1e5, 1e6, 1e7}) {
    CommSample c{"gloo", CollectiveOp::kAllReduce, 2, static_cast<Bytes>(bytes), timing(1e-4 + bytes * 1e-9)};
    c.time.mean_s = 2 * c.time.median_s;
    p.comm.push_back(c);
  }
  calib::fit_profile(p);
  const LinearFit& f = p.fits.at("comm.gloo.all_reduce.2");
  CHECK(f.coef[0] == Approx(2e-4).epsilon(1e-6));
  CHECK(f.coef[1] == Approx(2e-9).epsilon(1e-6));
  // Without means the medians are fitted.
  for (auto& c : p.comm) c.time.mean_s = 0;
  calib::fit_profile(p);
  CHECK(p.fits.at("comm.gloo.all_reduce.2").coef[0] == Approx(1e-4).epsilon(1e-6));
}

TEST_CASE("an optimizer step is priced from the timed steps (Note [Optimizer step])", "[calibrate]") {
  Profile prof;
  // Adam over 1 tensor: 1 ms at 1M parameters, 4 ms at 2M (past the cache);
  // over 16 tensors: 2 ms at 1M, 6 ms at 2M.
  const auto adam = [&](std::int64_t params, std::int64_t tensors, double s) {
    prof.kernels.push_back({"adam", Precision::kFp32, params, tensors, 1, 1, 0, 28.0 * params, timing(s)});
  };
  adam(1'000'000, 1, 1e-3);
  adam(2'000'000, 1, 4e-3);
  adam(1'000'000, 16, 2e-3);
  adam(2'000'000, 16, 6e-3);
  const auto costs = std::make_shared<const ProfileCosts>(prof);
  CostSources src;
  const DeviceSpec dev = test::round_cluster().device;
  const ProfileComputeModel model(costs, dev, &src);
  const auto ms = [&](double params, int tensors) {
    return static_cast<double>(model.optimizer_time(params, tensors, Optimizer::kAdam, Precision::kFp32, dev)) / kNsPerMs;
  };
  CHECK(ms(1e6, 1) == Approx(1.0));                 // a timed point
  CHECK(ms(1.5e6, 1) == Approx(2.5));               // halfway between 1 and 4 ms
  CHECK(ms(1e6, 16) == Approx(2.0));
  // 1.5M in 6 tensors: 2.5 ms at 1 tensor, 4 ms at 16; 5/15 of the way: 3 ms.
  CHECK(ms(1.5e6, 6) == Approx(3.0));
  // Past the largest size, the nearest sample's time per parameter: 4M at 1 tensor = 2 x 4 ms.
  CHECK(ms(4e6, 1) == Approx(8.0));
  // Below the smallest: 0.5M at 1 tensor = half of 1 ms.
  CHECK(ms(5e5, 1) == Approx(0.5));
  // ... but never below the per-tensor cost the counts show at the smallest
  // size, (2 - 1) / 15 ms a tensor: 1,000 parameters in 2 tensors, 2/15 ms
  // (the proportional share would be 1.07 us); in 16, 16/15 ms.
  CHECK(ms(1e3, 2) == Approx(2.0 / 15));
  CHECK(ms(1e3, 16) == Approx(16.0 / 15));
  // Past 16 tensors the per-tensor slope continues: at 1M, (2 - 1) / 15 ms per tensor; 31 tensors: 3 ms.
  CHECK(ms(1e6, 31) == Approx(3.0));
  CHECK(src.optimizer_measured == 9);
  // These timed Adam at weight decay 0 (28 B a parameter): AdamW's decay
  // reads and writes the weight once more, 88 bytes a parameter to 80
  // (Note [Adam's decay]): 1.1 ms.
  CHECK(static_cast<double>(model.optimizer_time(1e6, 1, Optimizer::kAdamW, Precision::kFp32, dev)) == Approx(1.1 * kNsPerMs));
  CHECK(src.optimizer_measured == 10);
  // Timed as calibration now times them, AdamW at 0.01 (36 B a parameter):
  // AdamW as timed, Adam at 80/88 of it.
  Profile decayed = prof;
  for (auto& k : decayed.kernels) k.bytes = 36.0 * static_cast<double>(k.m);
  const ProfileComputeModel decayed_model(std::make_shared<const ProfileCosts>(decayed), dev, nullptr);
  CHECK(static_cast<double>(decayed_model.optimizer_time(1e6, 1, Optimizer::kAdamW, Precision::kFp32, dev)) == Approx(1.0 * kNsPerMs));
  CHECK(static_cast<double>(decayed_model.optimizer_time(1.5e6, 1, Optimizer::kAdam, Precision::kFp32, dev)) ==
        Approx(2.5 * 80 / 88 * kNsPerMs));
  // SGD was not timed: the datasheet formula, momentum SGD's 20 bytes per
  // fp32 parameter (grad, weight, momentum in; weight, momentum out) at the
  // round device's 1 TB/s, no launch cost: 1M x 20 B / 1e12 B/s = 20 us.
  CHECK(model.optimizer_time(1e6, 1, Optimizer::kSgd, Precision::kFp32, dev) == 20'000);
  CHECK(src.optimizer_measured == 10);
}

TEST_CASE("predict prices a ZeRO-1 step as one tensor of the shard from the timed steps", "[calibrate]") {
  // 3 fake layers of 1000 parameters on 2 ranks, ZeRO-1: each rank updates
  // 1500 parameters as one flat tensor. One timed sample, 1000 parameters in
  // 1 tensor at 3 ms: 1500 parameters at its rate = 4.5 ms.
  Profile prof = sample_profile();
  prof.kernels.push_back({"adam", Precision::kFp32, 1000, 1, 1, 1, 0, 28000, timing(3e-3)});
  const test::FakeModel m(3, 1000, 0);
  const ClusterSpec c = test::round_cluster(1, 2);
  const PlanSpec spec = parse_plan("dp: 2\nzero_stage: 1\nmicro_batch: 1\nprecision: fp32\noptimizer: adam\n", "test.yaml");
  PredictOptions po;
  po.profile = std::make_shared<const ProfileCosts>(prof);
  const Prediction p = predict(m, spec, c, po);
  CHECK(static_cast<double>(p.breakdown.optimizer) == Approx(4.5 * kNsPerMs).margin(1));
  CHECK(p.sources.optimizer_measured >= 1);
}

TEST_CASE("DDP steps every parameter tensor, ZeRO-3 one flat shard per layer", "[calibrate]") {
  // 3 fake layers of 1000 parameters in 4 tensors each, 2 ranks. Timed:
  // 1000 parameters at 3 ms in 1 tensor, 6 ms in 16.
  Profile prof = sample_profile();
  prof.kernels.push_back({"adam", Precision::kFp32, 1000, 1, 1, 1, 0, 28000, timing(3e-3)});
  prof.kernels.push_back({"adam", Precision::kFp32, 1000, 16, 1, 1, 0, 28000, timing(6e-3)});
  const test::FakeModel m(3, 1000, 0, 4);
  const ClusterSpec c = test::round_cluster(1, 2);
  PredictOptions po;
  po.profile = std::make_shared<const ProfileCosts>(prof);
  const auto optimizer_ms = [&](const std::string& plan) {
    const PlanSpec spec = parse_plan("dp: 2\nmicro_batch: 1\nprecision: fp32\noptimizer: adam\n" + plan, "test.yaml");
    return static_cast<double>(predict(m, spec, c, po).breakdown.optimizer) / kNsPerMs;
  };
  // DDP: 3000 parameters in 12 tensors. At 3000 parameters, 9 ms in 1 tensor
  // and 18 ms in 16 (3x the samples' rates); 12 tensors: 9 + 9 x 11/15 = 15.6 ms.
  CHECK(optimizer_ms("") == Approx(15.6).epsilon(1e-6));
  // ZeRO-3: a 1500-parameter shard in 3 tensors: 4.5 + 4.5 x 2/15 = 5.1 ms.
  CHECK(optimizer_ms("zero_stage: 3\n") == Approx(5.1).epsilon(1e-6));
}

TEST_CASE("DDP and ZeRO pay the timed copies of their gradient buckets (Note [Gradient buckets])", "[calibrate]") {
  // 3 fake layers of 1000 parameters in 4 tensors, 2 ranks: 12 KB of fp32
  // gradients, one bucket (under DDP's 1 MiB first bucket) of 3000
  // parameters in 12 tensors. Timed copies at 1000 parameters: in 1 ms
  // (1 tensor) and 2.5 ms (16); out 2 ms and 5 ms.
  Profile prof = sample_profile();
  add_bucket_copies(prof, 1000, 1e-3, 2.5e-3, 2e-3, 5e-3);
  const test::FakeModel m(3, 1000, 0, 4);
  const ClusterSpec c = test::round_cluster(1, 2);
  const auto iteration_ms = [&](const std::string& plan, bool copies) {
    PredictOptions po;
    po.profile = std::make_shared<const ProfileCosts>(copies ? prof : sample_profile());
    const PlanSpec spec = parse_plan("dp: 2\nmicro_batch: 1\nprecision: fp32\noptimizer: adam\n" + plan, "test.yaml");
    const Prediction p = predict(m, spec, c, po);
    if (copies) CHECK(p.sources.bucket_copies_measured >= 1);
    return static_cast<double>(p.iteration_time) / kNsPerMs;
  };
  // At 3000 parameters (3x the samples): in 3 ms at 1 tensor, 7.5 ms at 16;
  // 12 tensors: 3 + 4.5 x 11/15 = 6.3 ms. Out: 6 and 15 ms; 6 + 9 x 11/15 =
  // 12.6 ms. DDP copies the bucket in after the last backward and out after
  // the all-reduce, both before the optimizer: 18.9 ms more.
  CHECK(iteration_ms("", true) - iteration_ms("", false) == Approx(18.9).epsilon(1e-6));
  // ZeRO-1 the same; ZeRO-2 copies in only (the reduce-scatter lands in the shard).
  CHECK(iteration_ms("zero_stage: 1\n", true) - iteration_ms("zero_stage: 1\n", false) == Approx(18.9).epsilon(1e-6));
  CHECK(iteration_ms("zero_stage: 2\n", true) - iteration_ms("zero_stage: 2\n", false) == Approx(6.3).epsilon(1e-6));
}

TEST_CASE("reduced buckets are copied back after the backward, not in its way (Note [Gradient buckets])", "[calibrate]") {
  // 4 fake layers of 300000 parameters (1.2 MB of fp32 gradients) in 4
  // tensors; every layer closes a bucket of its own (DDP's first bucket
  // closes past 1 MiB, the rest at bucket_mb = 1 KB), so 4 all-reduces
  // overlap the backward on a GPU cluster.
  Profile prof = sample_profile();
  add_bucket_copies(prof, 300000, 1e-3, 2.5e-3, 1e-3, 2.5e-3);
  const Prediction p = predict_graph(prof, test::FakeModel(4, 300000, 0, 4), "dp: 2\nbucket_mb: 0.001\n", test::round_cluster(1, 2));
  int in = 0, out = 0;
  std::size_t last_bwd = 0, first_out = p.graph.tasks.size();
  for (std::size_t t = 0; t < p.graph.tasks.size(); ++t) {
    const Task& task = p.graph.tasks[t];
    if (task.name.rfind("bwd ", 0) == 0) last_bwd = t;
    if (task.name.rfind("copy grads in", 0) == 0) {
      ++in;
      // 300000 parameters in 4 tensors: 1 + 1.5 x 3/15 = 1.3 ms.
      CHECK(static_cast<double>(task.duration) == Approx(1.3 * kNsPerMs));
    }
    if (task.name.rfind("copy grads out", 0) == 0) {
      ++out;
      first_out = std::min(first_out, t);
    }
  }
  CHECK(in == 4);
  CHECK(out == 4);
  // On the in-order compute stream every copy back comes after the last
  // layer's backward: none holds a backward behind its all-reduce.
  CHECK(first_out > last_bwd);
}

TEST_CASE("a pipeline with data parallelism pays its chunks' bucket copies (Note [Gradient buckets])", "[calibrate]") {
  // 4 fake layers of 1000 parameters in 4 tensors, pp 2 x dp 2: each stage
  // holds 2 layers in one bucket of 2000 parameters in 8 tensors. Timed at
  // 1000 parameters: in 1 ms (1 tensor), 2.5 ms (16); out 2 and 5 ms. At 2000:
  // in 2 and 5 ms, 8 tensors 2 + 3 x 7/15 = 3.4 ms; out 4 + 6 x 7/15 = 6.8 ms.
  Profile prof = sample_profile();
  add_bucket_copies(prof, 1000, 1e-3, 2.5e-3, 2e-3, 5e-3);
  const Prediction p =
      predict_graph(prof, test::FakeModel(4, 1000, 0, 4), "dp: 2\npp: 2\nschedule: 1f1b\ngrad_accum: 4\n", test::round_cluster(1, 4));
  int in = 0, out = 0;
  for (const Task& task : p.graph.tasks) {
    if (task.name.rfind("copy grads in", 0) == 0) {
      ++in;
      CHECK(static_cast<double>(task.duration) == Approx(3.4 * kNsPerMs));
    }
    if (task.name.rfind("copy grads out", 0) == 0) {
      ++out;
      CHECK(static_cast<double>(task.duration) == Approx(6.8 * kNsPerMs));
      REQUIRE(task.deps.size() == 1);
      CHECK(p.graph.tasks[task.deps[0]].op == CollectiveOp::kAllReduce);  // after its bucket's all-reduce
    }
  }
  // One bucket per stage, reduced after its last micro-batch's backward.
  CHECK(in == 2);
  CHECK(out == 2);
}

TEST_CASE("the optimizer step is fitted per tensor and per parameter", "[calibrate]") {
  // Steps of exactly 10 us per tensor + 1 ns per parameter.
  Profile prof;
  for (std::int64_t params : {1 << 16, 1 << 20, 1 << 22}) {
    for (std::int64_t tensors : {1, 16}) {
      const double s = 10e-6 * static_cast<double>(tensors) + 1e-9 * static_cast<double>(params);
      prof.kernels.push_back({"adam", Precision::kFp32, params, tensors, 1, 1, 0, 28.0 * params, timing(s)});
    }
  }
  calib::fit_profile(prof);
  const LinearFit& f = prof.fits.at(kernel_fit_name("adam", Precision::kFp32));
  REQUIRE(f.features == std::vector<std::string>{"tensors", "params"});
  CHECK(f.coef[0] == Approx(10e-6));
  CHECK(f.coef[1] == Approx(1e-9));
}

TEST_CASE("the copies' time ratio is the median over shared layer passes", "[calibrate]") {
  // Three shared points; the other copy took 1.5x, 2x and 1.2x forward, and
  // 1.5x, 1.1x and 3x backward: sorted 1.1 1.2 1.5 1.5 2 3, median 1.5.
  Profile mine, other;
  const double f[] = {0.010, 0.020, 0.050}, fo[] = {0.015, 0.040, 0.060};
  const double b[] = {0.020, 0.040, 0.100}, bo[] = {0.030, 0.044, 0.300};
  for (int i = 0; i < 3; ++i) {
    mine.layers.push_back({"fake.layer", Precision::kFp32, i + 1, 64, timing(f[i]), timing(b[i])});
    other.layers.push_back({"fake.layer", Precision::kFp32, i + 1, 64, timing(fo[i]), timing(bo[i])});
  }
  other.layers.push_back({"other.layer", Precision::kFp32, 1, 64, timing(9), timing(9)});  // not shared
  CHECK(calib::median_time_ratio(mine, other) == Approx(1.5));
  CHECK(calib::median_time_ratio(mine, Profile{}) == 0);
}

TEST_CASE("profile show prints the machine probe (Note [Machine probe])", "[calibrate]") {
  Profile prof;
  prof.info["torch.probe_s"] = "0.00554";
  CHECK(calib::format_profile(prof).find("machine probe (one Bi-LSTM layer, b 4, s 32): 5.54 ms during the layer sweep\n") !=
        std::string::npos);
  prof.info["torch.probe_end_s"] = "0.00958";
  CHECK(calib::format_profile(prof).find("5.54 ms during the layer sweep, 9.58 ms at the end\n") != std::string::npos);
  CHECK(calib::format_profile(Profile{}).find("machine probe") == std::string::npos);
}

TEST_CASE("the optimizer's rotating sets fill twice the cache, within 64-256 MiB", "[calibrate]") {
  constexpr std::int64_t MiB = std::int64_t{1} << 20;
  CHECK(calib::eviction_bytes(40 * MiB) == 80 * MiB);    // a 40 MiB L3: twice
  CHECK(calib::eviction_bytes(1 * MiB) == 64 * MiB);     // under-reported: the floor
  CHECK(calib::eviction_bytes(508 * MiB) == 256 * MiB);  // a socket's L3 reported to one VM: the ceiling
  CHECK(calib::eviction_bytes(0) == 256 * MiB);          // unknown
  CHECK(calib::eviction_bytes(-1) == 256 * MiB);         // sysconf's "no value"
}

TEST_CASE("loop times are scaled to in-step times (Note [Layers in a step])", "[calibrate]") {
  // fake.layer in the loop: 10/20 ms at b 1, 40/80 ms at b 4 (s 1024). In a
  // whole step at b 4 it took 50 ms forward (1.25x) and 120 ms backward
  // (1.5x); at b 1 nothing was timed in a step.
  Profile prof = sample_profile();
  prof.layers.push_back({"fake.layer|in-step", Precision::kFp32, 4, 1024, timing(0.050), timing(0.120)});
  const auto costs = std::make_shared<const ProfileCosts>(prof);
  CHECK(costs->in_step_factor("fake.layer", Precision::kFp32, Pass::kForward, 4, 1024) == Approx(1.25));
  CHECK(costs->in_step_factor("fake.layer", Precision::kFp32, Pass::kBackward, 4, 1024) == Approx(1.5));
  CHECK(costs->in_step_factor("other.layer", Precision::kFp32, Pass::kForward, 4, 1024) == 1.0);
  CostSources src;
  const ProfileComputeModel model(costs, test::round_cluster().device, &src);
  CHECK(fake_layer_time(model, Pass::kForward, 4) == 50 * kNsPerMs);
  CHECK(fake_layer_time(model, Pass::kBackward, 4) == 120 * kNsPerMs);
  // b 2 interpolates the loop times (20 ms) and takes the only ratio, the
  // nearest in tokens: 1.25 x 20 = 25 ms.
  CHECK(fake_layer_time(model, Pass::kForward, 2) == 25 * kNsPerMs);
  // Loop times taken just before the step are the reference where present:
  // 50 ms in the step over 25 ms in the adjacent loop is 2.
  Profile adjacent = prof;
  adjacent.layers.push_back({"fake.layer|loop", Precision::kFp32, 4, 1024, timing(0.025), timing(0.060)});
  const ProfileCosts a(adjacent);
  CHECK(a.in_step_factor("fake.layer", Precision::kFp32, Pass::kForward, 4, 1024) == Approx(2.0));
  CHECK(a.in_step_factor("fake.layer", Precision::kFp32, Pass::kBackward, 4, 1024) == Approx(2.0));
  // A ratio from a disturbed run is kept within [0.5, 3]: 400 ms over 40 is 3.
  Profile wild = sample_profile();
  wild.layers.push_back({"fake.layer|in-step", Precision::kFp32, 4, 1024, timing(0.400), timing(0.010)});
  const ProfileCosts w(wild);
  CHECK(w.in_step_factor("fake.layer", Precision::kFp32, Pass::kForward, 4, 1024) == 3.0);
  CHECK(w.in_step_factor("fake.layer", Precision::kFp32, Pass::kBackward, 4, 1024) == 0.5);
  // The fastest runs are compared, not the medians: a loop whose runs were
  // slowed half the time (median 80 ms, fastest 38 ms) against a step's
  // 44 ms (fastest 41.8 ms) is 41.8 / 38 = 1.1, not 44 / 80 = 0.55.
  Profile slowed = sample_profile();
  slowed.layers.push_back({"fake.layer|loop", Precision::kFp32, 4, 1024, Timing{0.080, 0.038, 0.140, 6}, timing(0.080)});
  slowed.layers.push_back({"fake.layer|in-step", Precision::kFp32, 4, 1024, Timing{0.044, 0.0418, 0.050, 12}, timing(0.080)});
  const ProfileCosts sl(slowed);
  CHECK(sl.in_step_factor("fake.layer", Precision::kFp32, Pass::kForward, 4, 1024) == Approx(1.1));
  CHECK(sl.in_step_factor("fake.layer", Precision::kFp32, Pass::kBackward, 4, 1024) == Approx(1.0));
}

TEST_CASE("whole steps are timed at the largest micro-batch, and at the smallest where far apart (Note [Small steps])",
          "[calibrate]") {
  using dtsim::calib::bench::step_batches;
  // The image models' CPU sweep, 4 to 64 images: both ends (validated at 4).
  CHECK(step_batches({4, 16, 64}) == std::vector<std::int64_t>{4, 64});
  // Their quick sweep, 4 and 16 (16 is not over 4 x 4), and the language
  // models' 1 to 4: the largest only.
  CHECK(step_batches({4, 16}) == std::vector<std::int64_t>{16});
  CHECK(step_batches({1, 2, 4}) == std::vector<std::int64_t>{4});
  CHECK(step_batches({8}) == std::vector<std::int64_t>{8});
}

TEST_CASE("a point takes its fastest pass at the machine's usual speed (Note [A pass at the machine's usual speed])",
          "[calibrate]") {
  using dtsim::calib::bench::pass_at_usual_speed;
  // Three passes of 3, 2 and 4 ms; the usual probe 10 ms. The second pass
  // ran while the probe read 7 ms (10 / 7 = 1.43x fast, past 1.15x): of the
  // other two, both at the usual speed, the faster is the first.
  CHECK(pass_at_usual_speed({3, 2, 4}, {10, 7, 10}, 10) == 0);
  // A probe 1.15x either way still counts (11.5 ms, 10 / 1.15 = 8.70 ms);
  // 8.6 ms (1.163x fast) does not.
  CHECK(pass_at_usual_speed({3, 2}, {10, 11.5}, 10) == 1);
  CHECK(pass_at_usual_speed({3, 2}, {10, 8.70}, 10) == 1);
  CHECK(pass_at_usual_speed({3, 2}, {10, 8.6}, 10) == 0);
  // None at the usual speed (probes 2x slow, 2x fast, 1.3x slow): the
  // nearest, 1.3x, whatever its time.
  CHECK(pass_at_usual_speed({3, 2, 4}, {20, 5, 13}, 10) == 2);
  // Not probed (a sweep before this rule, or a probe missing): the fastest.
  CHECK(pass_at_usual_speed({3, 2, 4}, {}, 10) == 1);
  CHECK(pass_at_usual_speed({3, 2, 4}, {10, 7, 10}, 0) == 1);
  CHECK(pass_at_usual_speed({5}, {30}, 10) == 0);
  // profile show says how many points were timed at the usual speed.
  Profile p;
  CHECK_THAT(calib::format_profile(p), !Catch::Contains("probed points"));
  p.info["torch.probe_points"] = "61 of 90 layer points from a pass whose probe was within 1.15x of the usual 9.13 ms";
  CHECK_THAT(calib::format_profile(p), Catch::Contains("  probed points: 61 of 90 layer points from a pass whose probe"));
}

TEST_CASE("a step's loops and chain are timed in rounds, each its share of the budget (Note [Loop and step interleaved])",
          "[calibrate]") {
  using dtsim::calib::bench::interleaved;
  // Two layers looped for half a 1 s budget, the chain for 1 s, in 4
  // rounds: each round both loops (0.5 / 4 = 0.125 s each) and then the
  // chain (0.25 s), so a spell of the machine falls on both series alike.
  std::vector<std::string> calls;
  const auto loop = [&](std::size_t i, double share) {
    calls.push_back("loop " + std::to_string(i) + " " + std::to_string(share));
    return true;
  };
  const auto step = [&](double share) {
    calls.push_back("step " + std::to_string(share));
    return true;
  };
  CHECK(interleaved(4, 2, 0.5, 1.0, loop, step));
  const std::vector<std::string> round = {"loop 0 0.125000", "loop 1 0.125000", "step 0.250000"};
  std::vector<std::string> want;
  for (int r = 0; r < 4; ++r) want.insert(want.end(), round.begin(), round.end());
  CHECK(calls == want);
  // One round (a GPU, the quick sweep): the loops for the whole half, then the chain.
  calls.clear();
  CHECK(interleaved(1, 2, 0.5, 1.0, loop, step));
  CHECK(calls == std::vector<std::string>{"loop 0 0.500000", "loop 1 0.500000", "step 1.000000"});
  // A loop over its time cap in the second round stops there.
  calls.clear();
  int runs = 0;
  const auto fails_fourth = [&](std::size_t i, double share) { return ++runs != 4 && loop(i, share); };
  CHECK_FALSE(interleaved(4, 2, 0.5, 1.0, fails_fourth, step));
  CHECK(calls == std::vector<std::string>{"loop 0 0.125000", "loop 1 0.125000", "step 0.250000", "loop 0 0.125000"});
}

TEST_CASE("a quiet loop is compared by its typical runs (Note [Small layers in a step])", "[calibrate]") {
  // A small layer's loop ran quiet: median 40 ms, fastest 39 (within 15%).
  // In the step its typical run took 80 ms, but its luckiest 44 ms (the
  // layers before it left its weights in cache once): the typical ratio
  // 80 / 40 = 2 is the step's, where the fastest runs' 44 / 39 = 1.13
  // would price it at 45 ms.
  Profile prof = sample_profile();
  prof.layers.push_back({"fake.layer|loop", Precision::kFp32, 4, 1024, Timing{0.040, 0.039, 0.045, 20}, timing(0.080)});
  prof.layers.push_back({"fake.layer|in-step", Precision::kFp32, 4, 1024, Timing{0.080, 0.044, 0.090, 20}, timing(0.080)});
  const ProfileCosts quiet(prof);
  CHECK(quiet.in_step_factor("fake.layer", Precision::kFp32, Pass::kForward, 4, 1024) == Approx(2.0));
  // The same step against a loop whose median is 16% over its fastest run
  // (46.4 ms against 40): a disturbed loop, so the fastest runs: 44 / 40 = 1.1.
  prof.layers[prof.layers.size() - 2].forward = Timing{0.0464, 0.040, 0.050, 20};
  const ProfileCosts disturbed(prof);
  CHECK(disturbed.in_step_factor("fake.layer", Precision::kFp32, Pass::kForward, 4, 1024) == Approx(1.1));
}

TEST_CASE("a layer costs its mean in a step (Note [A layer costs its mean in a step])", "[calibrate]") {
  // The loop: 40/80 ms at b 4 (fastest 36/72). In the step the layer's
  // fastest runs were 1.25x and 1.0x the loop's (45 / 36 and 72 / 72), and
  // its runs averaged 1.08x their median forward (54 / 50) and 1.02x
  // backward (81.6 / 80): the factors are 1.25 x 1.08 = 1.35 and 1.02.
  Profile prof = sample_profile();
  Timing f{0.050, 0.045, 0.090, 20, 0.054}, b{0.080, 0.072, 0.100, 20, 0.0816};
  prof.layers.push_back({"fake.layer|in-step", Precision::kFp32, 4, 1024, f, b});
  const ProfileCosts c(prof);
  CHECK(c.in_step_factor("fake.layer", Precision::kFp32, Pass::kForward, 4, 1024) == Approx(1.35));
  CHECK(c.in_step_factor("fake.layer", Precision::kFp32, Pass::kBackward, 4, 1024) == Approx(1.02));
  // A mean under the median (impossible for a step's disturbances) counts as
  // the median; one far above it is kept to 1.5x: 1.25 x 1.5 = 1.875.
  prof.layers.back().forward.mean_s = 0.040;
  prof.layers.back().backward.mean_s = 0.400;
  const ProfileCosts d(prof);
  CHECK(d.in_step_factor("fake.layer", Precision::kFp32, Pass::kForward, 4, 1024) == Approx(1.25));
  CHECK(d.in_step_factor("fake.layer", Precision::kFp32, Pass::kBackward, 4, 1024) == Approx(1.5));
}

TEST_CASE("layer records carry their means, and older records without them still parse", "[calibrate]") {
  Profile p;
  calib::Progress prog;
  calib::parse_bench_line("layer\tfake.layer|in-step\tfp32\t4\t1024\t0.05\t0.045\t0.09\t0.08\t0.072\t0.1\t20\t0.054\t0.0816",
                          "torch", p, &prog);
  calib::parse_bench_line("layer\tfake.layer\tfp32\t1\t1024\t0.01\t0.009\t0.011\t0.02\t0.018\t0.022\t5", "torch", p, &prog);
  REQUIRE(p.layers.size() == 2);
  CHECK(p.layers[0].forward.mean_s == Approx(0.054));
  CHECK(p.layers[0].backward.mean_s == Approx(0.0816));
  CHECK(p.layers[1].forward.mean_s == 0);
  // 13 fields: neither the old record nor the new one.
  CHECK(error_of([&] {
          calib::parse_bench_line("layer\tfake.layer\tfp32\t1\t1024\t0.01\t0.009\t0.011\t0.02\t0.018\t0.022\t5\t0.01", "torch", p,
                                  &prog);
        }).find("expected 12 tab-separated fields") != std::string::npos);
}

// ---- GPU profiles: Note [Host launch], [GPU optimizer step], [Layer memory] ----

namespace {

/// A profile as a GPU calibration writes it: device_kind cuda, an
/// element-wise fit of 1 ps a byte (1 TB/s, counting bytes read and
/// written), and "fake.layer" at micro-batches 1 and 4.
Profile gpu_profile() {
  Profile p = sample_profile();
  p.info["device_kind"] = "cuda";
  LinearFit stream;
  stream.features = {"1", "bytes"};
  stream.coef = {5e-6, 1e-12};
  p.fits[kernel_fit_name("elementwise", Precision::kFp32)] = stream;
  return p;
}

}  // namespace

TEST_CASE("layer records carry the layer's memory on GPUs (Note [Layer memory])", "[calibrate]") {
  Profile p;
  calib::Progress prog;
  calib::parse_bench_line("layer\tfake.layer\tfp16\t4\t1024\t0.01\t0.009\t0.011\t0.02\t0.018\t0.022\t5\t0.01\t0.02\t50331648\t93323264",
                          "torch", p, &prog);
  REQUIRE(p.layers.size() == 1);
  CHECK(p.layers[0].forward_transient == 50'331'648);
  CHECK(p.layers[0].backward_rise == 93'323'264);
  // 14 fields (a CPU's record): not measured.
  calib::parse_bench_line("layer\tfake.layer\tfp32\t4\t1024\t0.01\t0.009\t0.011\t0.02\t0.018\t0.022\t5\t0.01\t0.02", "torch", p, &prog);
  CHECK(p.layers[1].forward_transient == -1);
  CHECK(error_of([&] {
          calib::parse_bench_line("layer\tfake.layer\tfp16\t4\t1024\t0.01\t0.009\t0.011\t0.02\t0.018\t0.022\t5\t0.01\t0.02\t-5\t1", "torch",
                                  p, &prog);
        }).find("field 15 '-5' is not a count") != std::string::npos);
  // They survive the file, and a profile written before them reads as not measured.
  p.layers[1].backward_rise = 7;
  const std::string path = temp_path("layer-memory");
  save_profile(p, path);
  const Profile q = load_profile(path);
  std::filesystem::remove(path);
  CHECK(q.layers[0].forward_transient == 50'331'648);
  CHECK(q.layers[0].backward_rise == 93'323'264);
  CHECK(q.layers[1].backward_rise == 7);
  const Profile old = load_profile(std::string(DTSIM_CONFIG_DIR_FOR_TESTS) + "/profiles/local-cpu-tiny.h5");
  REQUIRE_FALSE(old.layers.empty());
  CHECK(old.layers.front().forward_transient == -1);
  CHECK(old.layers.front().backward_rise == -1);
}

TEST_CASE("a layer's measured memory is affine in the micro-batch at its sequence length (Note [Layer memory])", "[calibrate]") {
  Profile p = gpu_profile();
  // fake.layer at s = 1024: b = 1 holds 10 MiB above what it leaves, b = 4
  // 40 MiB; its backward rises 30 MiB at b = 1 and 72 MiB at b = 4 (14 MiB
  // a sample and 16 MiB of weight gradients).
  p.layers[0].forward_transient = 10 * kMiB;
  p.layers[0].backward_rise = 30 * kMiB;
  p.layers[1].forward_transient = 40 * kMiB;
  p.layers[1].backward_rise = 72 * kMiB;
  const auto costs = std::make_shared<const ProfileCosts>(p);
  const ProfileComputeModel model(costs, test::round_cluster().device, nullptr);
  Layer l;
  l.signature = "fake.layer";
  WorkloadShape shape;
  shape.seq_len = 1024;
  shape.micro_batch = 8;
  const auto at8 = model.layer_memory(l, Precision::kFp32, shape);
  REQUIRE(at8);
  CHECK(at8->forward_transient == 80 * kMiB);   // 10 MiB a sample
  CHECK(at8->backward_rise == 128 * kMiB);      // 16 + 8 x 14
  shape.micro_batch = 2;
  CHECK(model.layer_memory(l, Precision::kFp32, shape)->backward_rise == 44 * kMiB);
  // At 512 tokens a sequence: between the measured token counts (1024 and
  // 4096), 2 x 512 = 1024 tokens is b = 1's.
  shape.seq_len = 512;
  CHECK(model.layer_memory(l, Precision::kFp32, shape)->forward_transient == 10 * kMiB);
  // Another precision, or a layer without memory records: the formulas stand.
  shape.seq_len = 1024;
  CHECK_FALSE(model.layer_memory(l, Precision::kFp16, shape));
  l.signature = "other.layer";
  CHECK_FALSE(model.layer_memory(l, Precision::kFp32, shape));
  // Measured in fp16 only, a bf16 layer holds the same bytes: 12 MiB and
  // 20 MiB at b = 1, so 48 MiB and 80 MiB at b = 4 (12 a sample; 20 a sample
  // with no weight gradients: the line through b = 1 and b = 2 below).
  Profile h = gpu_profile();
  h.layers.push_back({"half.layer", Precision::kFp16, 1, 1024, h.layers[0].forward, h.layers[0].backward, 12 * kMiB, 20 * kMiB});
  h.layers.push_back({"half.layer", Precision::kFp16, 2, 1024, h.layers[0].forward, h.layers[0].backward, 24 * kMiB, 40 * kMiB});
  const ProfileComputeModel half(std::make_shared<const ProfileCosts>(h), test::round_cluster().device, nullptr);
  l.signature = "half.layer";
  shape.micro_batch = 4;
  const auto bf16 = half.layer_memory(l, Precision::kBf16, shape);
  REQUIRE(bf16);
  CHECK(bf16->forward_transient == 48 * kMiB);
  CHECK(bf16->backward_rise == 80 * kMiB);
  CHECK_FALSE(half.layer_memory(l, Precision::kFp32, shape));  // fp32 is twice the bytes: not taken from 16-bit points
}

TEST_CASE("a GPU profile prices the optimizer per update on the host and per byte on the GPU (Note [GPU optimizer step])",
          "[calibrate]") {
  Profile p = gpu_profile();
  // Timed steps that cost 50 us an update and 10 ps a parameter exactly:
  // 1M in 1 tensor is 1 update, 1M in 16 is 16, 64M in 1 is 16 (4M-element chunks).
  const auto adam = [&](std::int64_t m, std::int64_t n) {
    const double updates = static_cast<double>(n * ((m / n + kUpdateChunk - 1) / kUpdateChunk));
    p.kernels.push_back({"adam", Precision::kFp32, m, n, 1, 1, 0, 28.0 * static_cast<double>(m), timing(50e-6 * updates + 10e-12 * static_cast<double>(m))});
  };
  adam(1 << 20, 1);
  adam(1 << 20, 16);
  adam(1 << 26, 1);
  adam(1 << 26, 16);
  const auto costs = std::make_shared<const ProfileCosts>(p);
  const auto fit = costs->update_cost(Optimizer::kAdam, Precision::kFp32);
  REQUIRE(fit);
  CHECK(fit->per_update == Approx(50e-6));
  CHECK(fit->per_param == Approx(10e-12));
  // 16-bit plans take fp32's fit where no 16-bit step was timed.
  CHECK(costs->update_cost(Optimizer::kAdam, Precision::kBf16)->per_update == Approx(50e-6));
  // These timed Adam at weight decay 0 (28 B a parameter): AdamW moves 88
  // bytes to 80, 100 to 92 in bf16 (its casts); the host's launches an
  // update stay as timed (Note [Adam's decay]).
  CHECK(costs->update_cost(Optimizer::kAdamW, Precision::kFp32)->per_update == Approx(50e-6));
  CHECK(costs->update_cost(Optimizer::kAdamW, Precision::kFp32)->per_param == Approx(10e-12 * 88 / 80));
  CHECK(costs->update_cost(Optimizer::kAdamW, Precision::kBf16)->per_param == Approx(10e-12 * 100 / 92));
  const DeviceSpec dev = test::round_cluster().device;
  const ProfileComputeModel model(costs, dev, nullptr);
  // gpt2's step: 124.4M parameters in 157 updates. The host issues it in
  // 157 x 50 us = 7.85 ms, Adam's or AdamW's; the GPU moves AdamW's
  // 88 bytes a parameter at 1 TB/s (10.947 ms) and runs 157 x 9 kernels at
  // 1.5 us (2.1195 ms).
  const double params = 124'439'808;
  CHECK(static_cast<double>(model.optimizer_launch_time(params, 157, Optimizer::kAdam, Precision::kFp32)) ==
        Approx(7.85e6).epsilon(1e-6));
  CHECK(static_cast<double>(model.optimizer_launch_time(params, 157, Optimizer::kAdamW, Precision::kFp32)) ==
        Approx(7.85e6).epsilon(1e-6));
  CHECK(static_cast<double>(model.optimizer_time(params, 157, Optimizer::kAdamW, Precision::kFp32, dev)) ==
        Approx(params * 88 * 1e-3 + 157 * 9 * 1500).epsilon(1e-6));
  // fp16: the gradient's cast in, the master's cast out and the loss scale: 108 bytes, 12 kernels.
  CHECK(static_cast<double>(model.optimizer_time(params, 157, Optimizer::kAdamW, Precision::kFp16, dev)) ==
        Approx(params * 108 * 1e-3 + 157 * 12 * 1500).epsilon(1e-6));
  // Momentum SGD, as the runtime steps it (models::adam_update): the buffer
  // scaled (8 B), the gradient added (12 B), the step (12 B): 32 bytes and
  // 3 kernels a parameter and update.
  for (const std::int64_t n : {1, 16}) {
    p.kernels.push_back({"sgd", Precision::kFp32, 1 << 20, n, 1, 1, 0, 32.0 * (1 << 20), timing(20e-6 * static_cast<double>(n))});
  }
  const ProfileComputeModel with_sgd(std::make_shared<const ProfileCosts>(p), dev, nullptr);
  CHECK(static_cast<double>(with_sgd.optimizer_time(params, 157, Optimizer::kSgd, Precision::kFp32, dev)) ==
        Approx(params * 32 * 1e-3 + 157 * 3 * 1500).epsilon(1e-6));
  // At momentum 0 (Note [SGD momentum]) the step's last kernel alone: 12 B
  // and 1 kernel on the GPU; the host issues a third of the timed step's
  // launches (20 us an update timed, so 6.67 us).
  CHECK(static_cast<double>(with_sgd.optimizer_time(params, 157, Optimizer::kSgdPlain, Precision::kFp32, dev)) ==
        Approx(params * 12 * 1e-3 + 157 * 1 * 1500).epsilon(1e-6));
  CHECK(static_cast<double>(with_sgd.optimizer_launch_time(params, 157, Optimizer::kSgdPlain, Precision::kFp32)) ==
        Approx(157 * 20e3 / 3).epsilon(1e-6));
  // A profile that timed plain SGD (12 B a parameter: every one made before
  // the runtime kept momentum) prices momentum SGD's launches at three
  // kernels to its one, and plain SGD as timed.
  Profile plain = p;
  for (auto& k : plain.kernels) {
    if (k.kind == "sgd") k.bytes = 12.0 * static_cast<double>(k.m);
  }
  const ProfileComputeModel old_sgd(std::make_shared<const ProfileCosts>(plain), dev, nullptr);
  CHECK(static_cast<double>(old_sgd.optimizer_launch_time(params, 157, Optimizer::kSgd, Precision::kFp32)) ==
        Approx(157 * 20e3 * 3).epsilon(1e-6));
  CHECK(static_cast<double>(old_sgd.optimizer_launch_time(params, 157, Optimizer::kSgdPlain, Precision::kFp32)) ==
        Approx(157 * 20e3).epsilon(1e-6));
  // A CPU profile keeps the timed-sample lookup and no launch cost (Note [Optimizer step]).
  Profile cpu = p;
  cpu.info["device_kind"] = "cpu";
  const ProfileComputeModel cpu_model(std::make_shared<const ProfileCosts>(cpu), dev, nullptr);
  CHECK(cpu_model.optimizer_launch_time(params, 157, Optimizer::kAdamW, Precision::kFp32) == 0);
}

namespace {

/// A FakeModel that multiplies through no cuBLAS (a network of convolutions).
class NoCublas final : public sim::Model {
 public:
  explicit NoCublas(test::FakeModel m) : m_(std::move(m)) {}
  std::string name() const override { return "no-cublas"; }
  std::int64_t parameters() const override { return m_.parameters(); }
  int blocks() const override { return m_.blocks(); }
  std::int64_t max_seq_len() const override { return m_.max_seq_len(); }
  std::string tp_error(int tp) const override { return m_.tp_error(tp); }
  std::vector<Layer> layers(const WorkloadShape& s) const override { return m_.layers(s); }
  Flops model_flops(const WorkloadShape& s) const override { return m_.model_flops(s); }
  bool runs_cublas() const override { return false; }

 private:
  test::FakeModel m_;
};

}  // namespace

TEST_CASE("cuBLAS's workspaces are held only by models that run cuBLAS (Note [Library workspaces])", "[calibrate]") {
  // A GPU profile: CUDA context 500 MiB (sample_profile), 64 MiB of
  // workspaces at rest after training steps. The same two layers, with and
  // without cuBLAS: the peaks differ by exactly the 64 MiB, a resident
  // buffer, and neither counts the context as the allocator's.
  Profile p = gpu_profile();
  p.memory["workspace_at_rest_bytes"] = 64 * kMiB;
  const test::FakeModel linear(2, 1000, 1 << 20);
  const NoCublas convs(linear);
  PredictOptions po;
  po.profile = std::make_shared<const ProfileCosts>(p);
  const ClusterSpec c = test::round_cluster();
  const PlanSpec plan = parse_plan("micro_batch: 1\nprecision: fp32\noptimizer: adam\n", "test.yaml");
  const Prediction with = predict(linear, plan, c, po);
  const Prediction without = predict(convs, plan, c, po);
  REQUIRE(with.ranks.size() == 1);
  REQUIRE(without.ranks.size() == 1);
  CHECK(with.ranks[0].peak - without.ranks[0].peak == 64 * kMiB);
  CHECK(with.outside_allocator == 500 * kMiB);
  CHECK(without.outside_allocator == 500 * kMiB);
}

TEST_CASE("a layer's launch is its fastest measured pass, on GPU profiles only (Note [Host launch])", "[calibrate]") {
  const Profile p = gpu_profile();  // fake.layer: forward 10 ms at b = 1, 40 ms at b = 4
  const ProfileComputeModel gpu(std::make_shared<const ProfileCosts>(p), test::round_cluster().device, nullptr);
  Layer l;
  l.signature = "fake.layer";
  CHECK(gpu.layer_launch_time(l, Pass::kForward, Precision::kFp32) == 10 * kNsPerMs);
  CHECK(gpu.layer_launch_time(l, Pass::kBackward, Precision::kFp32) == 20 * kNsPerMs);
  Profile cpu = p;
  cpu.info["device_kind"] = "cpu";
  const ProfileComputeModel cpu_model(std::make_shared<const ProfileCosts>(cpu), test::round_cluster().device, nullptr);
  CHECK(cpu_model.layer_launch_time(l, Pass::kForward, Precision::kFp32) == 0);
}

TEST_CASE("optimizer updates count chunks of 4M elements (Note [Optimizer updates])", "[calibrate]") {
  CHECK(kUpdateChunk == 4'194'304);
  // gpt2's token embedding, 50257 x 768 = 38,597,376 elements: ten chunks.
  CHECK(flat_updates(38'597'376) == 10);
  CHECK(flat_updates(4'194'304) == 1);
  CHECK(flat_updates(4'194'305) == 2);
  CHECK(flat_updates(0) == 0);
  // A layer: a chunk a tensor, unless its parameters need more (wte + wpe: 10).
  CHECK(layer_updates(38'597'376 + 786'432, 2) == 10);
  CHECK(layer_updates(7'087'872, 12) == 12);  // a gpt2 block
  CHECK(layer_updates(0, 0) == 0);
}

TEST_CASE("profile show gives no bandwidth for a fit its bytes do not explain", "[calibrate]") {
  Profile p;
  p.path = "gpu.h5";
  // GEMMs whose byte term is under 1% of every sample (compute-bound).
  p.kernels.push_back({"gemm", Precision::kBf16, 8192, 8192, 8192, 1, 1.1e12, 4e8, timing(1.6e-3)});
  p.kernels.push_back({"gemm", Precision::kBf16, 4096, 4096, 4096, 1, 1.37e11, 1e8, timing(2e-4)});
  LinearFit f;
  f.features = {"1", "flops", "mn", "bytes"};
  f.coef = {1e-5, 1.4e-15, 0, 2.3e-14};  // 1 / 2.3e-14 s/B would read 4.3e4 GB/s
  f.samples = 2;
  p.fits[kernel_fit_name("gemm", Precision::kBf16)] = f;
  const std::string text = calib::format_profile(p);
  CHECK(text.find("bandwidth - (compute-bound)") != std::string::npos);
  CHECK(text.find("4.35e+04 GB/s") == std::string::npos);
  CHECK(text.find("peak 714 TFLOP/s") != std::string::npos);
}

TEST_CASE("a profile whose layer memory is not a byte count is refused with one line", "[calibrate][bad-input]") {
  Profile p = sample_profile();
  p.layers[0].forward_transient = -5;  // -1 means "not measured"; nothing lower is a count
  const std::string path = temp_path("bad-layer-memory");
  save_profile(p, path);
  const std::string e = error_of([&] { load_profile(path); });
  std::filesystem::remove(path);
  CHECK(e.find("/layers/forward_transient_bytes: row 0 is not a byte count") != std::string::npos);
  CHECK(e.find('\n') == std::string::npos);
}

// ---- all-to-all and grouped GEMMs ------------------------------------------------

TEST_CASE("the benchmarks measure all_to_all at nccl-tests' sizes", "[calibrate]") {
  using namespace dtsim::calib::bench;
  // nccl-tests' alltoall (src/alltoall.cu, AlltoAllGetCollByteCount): count /
  // nranks elements to each rank, so the size is rounded down to a multiple
  // of ranks x 4 B; at least one element each here.
  CHECK(measured_bytes(Op::kAllToAll, 1024, 3) == 1020);  // floor(1024 / 12) = 85 elements x 4 B x 3
  CHECK(measured_bytes(Op::kAllToAll, 4096, 4) == 4096);  // already a multiple of 16 B
  CHECK(measured_bytes(Op::kAllToAll, 8, 4) == 16);       // 8 B / 16 B = 0 -> one element to each of 4 ranks
  CHECK(chunk_elems(1024, 3) == 85);
  CHECK(measured_bytes(Op::kAllGather, 1024, 3) == 1020);  // the rule all_gather and reduce_scatter already had
  CHECK(measured_bytes(Op::kAllReduce, 1000, 3) == 1000);  // the whole buffer: no rounding
  // busbw = algbw x (n-1)/n (nccl-tests' AlltoAllGetBw).
  CHECK(busbw_factor(Op::kAllToAll, 4) == 0.75);
  CHECK(busbw_factor(Op::kAllToAll, 2) == 0.5);
  // In the default ops, by name in --ops, and named in the error.
  CHECK(std::find(std::begin(kAllOps), std::end(kAllOps), Op::kAllToAll) != std::end(kAllOps));
  CHECK(parse_ops("all_to_all") == std::vector<Op>{Op::kAllToAll});
  CHECK(parse_ops("all").size() == 6);
  CHECK_THROWS_WITH(parse_ops("alltoall"),
                    "--ops: 'alltoall' is not one of all_reduce, reduce_scatter, all_gather, broadcast, send_recv, all_to_all, all");
  CHECK(std::string(op_name(Op::kAllToAll)) == "all_to_all");
}

TEST_CASE("comm records of all_to_all are parsed and fitted per rank count", "[calibrate]") {
  Profile p;
  calib::parse_bench_line("comm\tgloo\tall_to_all\t2\t4096\t1e-4\t9e-5\t2e-4\t20\t1.2e-4", "gloo", p, nullptr);
  REQUIRE(p.comm.size() == 1);
  CHECK(p.comm[0].op == CollectiveOp::kAllToAll);
  CHECK(p.comm[0].ranks == 2);
  CHECK(p.comm[0].bytes == 4096);
  CHECK(p.comm[0].time.mean_s == 1.2e-4);
  // Means on t = 150 us + S x 2 ns/B over 2 ranks and t = 300 us + S x 3 ns/B
  // over 4 (medians 10% lower): each rank count gets its own fit, of the means.
  p.comm.clear();
  for (double bytes : {1e3, 1e4, 1e5, 1e6, 1e7}) {
    for (const auto& [ranks, alpha, beta] : {std::tuple{2, 150e-6, 2e-9}, std::tuple{4, 300e-6, 3e-9}}) {
      CommSample c{"gloo", CollectiveOp::kAllToAll, ranks, static_cast<Bytes>(bytes), timing(0.9 * (alpha + beta * bytes))};
      c.time.mean_s = alpha + beta * bytes;
      p.comm.push_back(c);
    }
  }
  calib::fit_profile(p);
  const LinearFit& two = p.fits.at("comm.gloo.all_to_all.2");
  CHECK(two.coef[0] == Approx(150e-6).epsilon(1e-6));
  CHECK(two.coef[1] == Approx(2e-9).epsilon(1e-6));
  CHECK(two.samples == 5);
  const LinearFit& four = p.fits.at("comm.gloo.all_to_all.4");
  CHECK(four.coef[0] == Approx(300e-6).epsilon(1e-6));
  CHECK(four.coef[1] == Approx(3e-9).epsilon(1e-6));
  // And the profile keeps them through the HDF5 round trip.
  const std::string path = temp_path("a2a");
  save_profile(p, path);
  const Profile back = load_profile(path);
  std::filesystem::remove(path);
  CHECK(std::count_if(back.comm.begin(), back.comm.end(), [](const CommSample& c) { return c.op == CollectiveOp::kAllToAll; }) == 10);
  CHECK(back.fits.at("comm.gloo.all_to_all.4").coef[1] == Approx(3e-9).epsilon(1e-12));
  CHECK_THAT(calib::format_profile(back), Catch::Contains("comm.gloo.all_to_all.2") && !Catch::Contains("not measured: all_to_all"));
}

TEST_CASE("all_to_all is priced from its fit where measured, else over the all-reduce's link", "[calibrate]") {
  CommGroup two;
  two.ranks = 2;
  two.ranks_per_node = 2;
  const ClusterSpec c = test::round_cluster(1, 4);
  // sample_profile's all-reduce fit over 2 ranks gives the link (as in
  // "collectives from a profile"): hop 7 us, B = 1 GB/s. Note [All-to-all]
  // over one node of 2 ranks: S (g-1)/n = 0.5 MB at 1 GB/s = 500 us, plus
  // the 6 us base and one 7 us hop: 513 us.
  {
    CostSources src;
    const ProfileCommModel comm(std::make_shared<const ProfileCosts>(sample_profile()), c, &src);
    CHECK(comm.collective(CollectiveOp::kAllToAll, 1'000'000, two).total() == Approx(513'000).margin(2));
    CHECK(src.comm_scaled == 1);
    CHECK(src.comm_measured == 0);
  }
  // With an all_to_all fit over 2 ranks (150 us + 2 ns/B): 150 + 2000 us.
  Profile p = sample_profile();
  LinearFit f;
  f.features = {"1", "bytes"};
  f.coef = {150e-6, 2e-9};
  p.fits[comm_fit_name("gloo", CollectiveOp::kAllToAll, 2)] = f;
  p.comm.push_back({"gloo", CollectiveOp::kAllToAll, 2, 1024, timing(1.5e-4)});
  CostSources src;
  const ProfileCommModel comm(std::make_shared<const ProfileCosts>(p), c, &src);
  const CollectiveCost a2a = comm.collective(CollectiveOp::kAllToAll, 1'000'000, two);
  CHECK(a2a.total() == Approx(2'150'000).margin(2));
  CHECK(a2a.algorithm == "measured");
  CHECK(src.comm_measured == 1);
  // Over 4 ranks it was not measured: the link again (n = 4, g = 4: 0.75 MB
  // at 1 GB/s + 13 us).
  CommGroup four;
  four.ranks = 4;
  four.ranks_per_node = 4;
  CHECK(comm.collective(CollectiveOp::kAllToAll, 1'000'000, four).total() == Approx(763'000).margin(2));
  CHECK(src.comm_scaled == 1);
}

TEST_CASE("the shipped profiles, made before all_to_all was measured, still load and price it", "[calibrate]") {
  for (const char* name : {"local-cpu.h5", "local-cpu-tiny.h5", "h100-sxm.h5"}) {
    INFO(name);
    const Profile p = load_profile(std::string(DTSIM_CONFIG_DIR_FOR_TESTS) + "/profiles/" + name);
    CHECK(std::none_of(p.comm.begin(), p.comm.end(), [](const CommSample& c) { return c.op == CollectiveOp::kAllToAll; }));
    const auto costs = std::make_shared<const ProfileCosts>(p);
    const auto ar = costs->comm_ranks(CollectiveOp::kAllReduce);
    CostSources src;
    const ClusterSpec c = test::round_cluster(1, 2);
    const ProfileCommModel comm(costs, c, &src);
    CommGroup two;
    two.ranks = 2;
    two.ranks_per_node = 2;
    const TimeNs t = comm.collective(CollectiveOp::kAllToAll, 1 << 20, two).total();
    CHECK(src.comm_measured == 0);
    if (ar.empty() || ar.back() < 2 || costs->comm_fit(CollectiveOp::kAllReduce, ar.back())->per_byte <= 0) {
      // No all-reduce to take the link from: the datasheet's (round_cluster: 100 GB/s, 1 us).
      CHECK(src.comm_analytic == 1);
      continue;
    }
    // The link from the all-reduce fit with the most ranks n (Note [Profile
    // lookups]): B = 2(n-1)/n / beta, hop = (alpha - 6 us) / 2(n-1); then
    // Note [All-to-all] over 2 ranks: S/2 at B, plus 6 us and one hop.
    const int n = ar.back();
    const FitTerms* fit = costs->comm_fit(CollectiveOp::kAllReduce, n);
    const double bandwidth = 2.0 * (n - 1) / n / fit->per_byte;
    const double hop_ns = std::max(0.0, (fit->constant * 1e9 - 6000) / (2.0 * (n - 1)));
    CHECK(src.comm_scaled == 1);
    CHECK(static_cast<double>(t) == Approx(6000 + std::floor(hop_ns) + 0.5 * (1 << 20) / bandwidth * 1e9).margin(3));
    if (!p.comm.empty()) CHECK_THAT(calib::format_profile(p), Catch::Contains("not measured: all_to_all"));
  }
}

TEST_CASE("grouped GEMMs are fitted apart and price a MoE's expert GEMMs (Note [Grouped GEMMs])", "[calibrate]") {
  // Synthetic device: single GEMMs at t = 5 us + flops / 10 TFLOP/s, grouped
  // ones at t = 20 us + flops / 5 TFLOP/s (no short-K or byte terms).
  Profile p;
  for (std::int64_t m : {64, 256, 1024}) {
    for (std::int64_t k : {64, 512}) {
      const double flops = 2.0 * m * m * k;
      p.kernels.push_back({"gemm", Precision::kFp32, m, m, k, 1, flops, 4.0 * (2 * m * k + m * m), timing(5e-6 + flops / 10e12)});
    }
  }
  for (std::int64_t batch : {4, 8}) {
    for (std::int64_t m : {32, 128, 512}) {
      const std::int64_t n = 1024, k = 256;
      const double flops = 2.0 * m * n * k * batch;
      p.kernels.push_back({"grouped_gemm", Precision::kFp32, m, n, k, batch, flops, 4.0 * batch * (m * k + k * n + m * n),
                           timing(20e-6 + flops / 5e12)});
    }
  }
  calib::fit_profile(p);
  const LinearFit& g = p.fits.at(kernel_fit_name("grouped_gemm", Precision::kFp32));
  CHECK(g.features == std::vector<std::string>{"1", "flops", "mn", "bytes"});
  CHECK(g.coef[0] == Approx(20e-6).epsilon(1e-3));
  CHECK(1.0 / g.coef[1] == Approx(5e12).epsilon(1e-3));

  // moe.experts.gate_up of 8 experts, 128 rows each, 1024 x 256:
  // 2 x 128 x 1024 x 256 x 8 = 536,870,912 FLOPs.
  Kernel experts;
  experts.kind = KernelKind::kGemm;
  experts.m = 128;
  experts.n = 1024;
  experts.k = 256;
  experts.batch = 8;
  experts.flops = 536'870'912.0;
  experts.bytes = 4 * 8 * (128 * 256 + 256 * 1024 + 128 * 1024);
  Kernel single = experts;
  single.batch = 1;
  single.flops = experts.flops / 8;
  single.bytes = experts.bytes / 8;
  const DeviceSpec dev = test::round_cluster().device;
  const ProfileComputeModel grouped(std::make_shared<const ProfileCosts>(p), dev, nullptr);
  // 20 us + 536,870,912 / 5e12 s = 127.37 us; the single GEMM by the GEMM fit:
  // 5 us + 67,108,864 / 1e13 s = 11.71 us.
  CHECK(grouped.kernel_time(experts, Precision::kFp32) == Approx(127'374).margin(5));
  CHECK(grouped.kernel_time(single, Precision::kFp32) == Approx(11'711).margin(5));
  // A profile without grouped GEMMs (made before they were timed) prices
  // the experts with the GEMM fit: 5 us + 536,870,912 / 1e13 s = 58.69 us.
  p.kernels.erase(std::remove_if(p.kernels.begin(), p.kernels.end(), [](const KernelSample& k) { return k.kind == "grouped_gemm"; }),
                  p.kernels.end());
  calib::fit_profile(p);
  CHECK(p.fits.count(kernel_fit_name("grouped_gemm", Precision::kFp32)) == 0);
  const ProfileComputeModel plain(std::make_shared<const ProfileCosts>(p), dev, nullptr);
  CHECK(plain.kernel_time(experts, Precision::kFp32) == Approx(58'687).margin(5));
}

TEST_CASE("collectives timed as a step meets them: parsed, kept, and priced for data-parallel gradients (Note [Collectives in a step])",
          "[calibrate]") {
  // The record: all_reduce over 2 ranks, 1 MiB, after 10 ms of computing:
  // a median of 0.7 ms, a mean of 1.9 ms, 30% of the runs stalled by 4 ms.
  Profile p;
  calib::parse_bench_line("comm_step\tgloo\tall_reduce\t2\t1048576\t0.01\t0.0007\t0.0019\t0.3\t0.004\t60", "gloo", p, nullptr);
  REQUIRE(p.comm_in_step.size() == 1);
  const StepCommSample& s = p.comm_in_step[0];
  CHECK(s.op == CollectiveOp::kAllReduce);
  CHECK(s.ranks == 2);
  CHECK(s.bytes == kMiB);
  CHECK(s.lead_s == 0.01);
  CHECK(s.stall_frac == 0.3);
  CHECK(s.stall_s == 0.004);
  CHECK(s.reps == 60);
  // A share outside 0..1, a field missing: one line naming what.
  CHECK(error_of([&] { calib::parse_bench_line("comm_step\tgloo\tall_reduce\t2\t1048576\t0.01\t0.0007\t0.0019\t1.5\t0.004\t60", "gloo", p, nullptr); })
            .find("field 9 '1.5' is not a share between 0 and 1") != std::string::npos);
  CHECK(error_of([&] { calib::parse_bench_line("comm_step\tgloo\tall_reduce\t2\t1048576\t0.01\t0.0007", "gloo", p, nullptr); })
            .find("comm_step") != std::string::npos);
  CHECK(p.comm_in_step.size() == 1);

  // Priced: back to back at 256 KiB (100 us, a mean of 150 us, the slowest
  // 1.1 x 100 us: a stall of 10 us met 5 times) and 4 MiB (1 ms); in a
  // step at 256 KiB 20% of the runs stalled by 4 ms, at 4 MiB 40% by 5 ms.
  auto add = [&](Bytes b, double us, double mean_us) {
    p.comm.push_back({"gloo", CollectiveOp::kAllReduce, 2, b, timing(us * 1e-6)});
    p.comm.back().time.mean_s = mean_us * 1e-6;
  };
  add(256 * kKiB, 100, 150);
  add(4 * kMiB, 1000, 1000);
  p.comm_in_step.clear();
  p.comm_in_step.push_back({"gloo", CollectiveOp::kAllReduce, 2, 256 * kKiB, 0.01, 2e-4, 1e-3, 0.2, 0.004, 60});
  p.comm_in_step.push_back({"gloo", CollectiveOp::kAllReduce, 2, 4 * kMiB, 0.01, 1.2e-3, 3.2e-3, 0.4, 0.005, 60});
  LinearFit f;
  f.features = {"1", "bytes"};
  f.coef = {50e-6, 1e-8};
  f.samples = 2;
  p.fits[comm_fit_name("gloo", CollectiveOp::kAllReduce, 2)] = f;
  // The round trip keeps them; a profile without them reads as none.
  const std::string path = temp_path("dtsim_profile_step");
  save_profile(p, path);
  const Profile q = load_profile(path);
  std::filesystem::remove(path);
  REQUIRE(q.comm_in_step.size() == 2);
  CHECK(q.comm_in_step[1].bytes == 4 * kMiB);
  CHECK(q.comm_in_step[1].mean_s == 3.2e-3);
  CHECK(q.comm_in_step[1].stall_frac == 0.4);
  CHECK(q.comm_in_step[1].stall_s == 0.005);
  CHECK(q.comm_in_step[0].reps == 60);
  CHECK(q.comm_in_step[0].lead_s == 0.01);
  const std::string plain = temp_path("dtsim_profile_nostep");
  save_profile(sample_profile(), plain);
  CHECK(load_profile(plain).comm_in_step.empty());
  std::filesystem::remove(plain);

  const auto costs = std::make_shared<const ProfileCosts>(q);
  const ProfileCommModel comm(costs, test::round_cluster(1, 4), nullptr);
  CommGroup two;
  two.ranks = 2;
  two.ranks_per_node = 2;
  // A step's stall is the median of 4 and 5 ms, 4.5 ms; a collective meets
  // the stalled share at its size, a straight line in bytes between them:
  // 0.2 at 256 KiB, 0.4 at 4 MiB, 0.3 halfway (2176 KiB), the nearest
  // outside. The back-to-back figures stay: a stall is the median of the
  // sizes' slowest runs over their medians (timing() makes the slowest 1.1
  // x the median: 10 and 100 us), 55 us, and 256 KiB meets (150 - 100) /
  // 55 of them.
  const CollectiveCost small = comm.collective(CollectiveOp::kAllReduce, 256 * kKiB, two);
  CHECK(small.step_stall == 4'500'000);
  CHECK(small.step_stalls == Approx(0.2));
  CHECK(small.stall == 55'000);
  CHECK(small.stalls == Approx(50.0 / 55));
  CHECK(comm.collective(CollectiveOp::kAllReduce, 2176 * kKiB, two).step_stalls == Approx(0.3));
  CHECK(comm.collective(CollectiveOp::kAllReduce, 8 * kMiB, two).step_stalls == Approx(0.4));
  CHECK(comm.collective(CollectiveOp::kAllReduce, kKiB, two).step_stalls == Approx(0.2));
  // Note [A collective in a step]: the median in a step over the
  // back-to-back one, 200 - 100 = 100 us at 256 KiB and 1200 - 1000 = 200 us
  // at 4 MiB, a straight line between (150 us halfway), the nearest outside.
  CHECK(small.step_extra == 100'000);
  CHECK(comm.collective(CollectiveOp::kAllReduce, 2176 * kKiB, two).step_extra == 150'000);
  CHECK(comm.collective(CollectiveOp::kAllReduce, 8 * kMiB, two).step_extra == 200'000);
  CHECK(comm.collective(CollectiveOp::kAllReduce, kKiB, two).step_extra == 100'000);
  // The typical time itself stays the back-to-back one.
  CHECK(small.total() == 100'000);
  // Another op has none measured in a step.
  CHECK(comm.collective(CollectiveOp::kAllGather, 256 * kKiB, two).step_stalls == 0);
  CHECK(comm.collective(CollectiveOp::kAllGather, 256 * kKiB, two).step_extra == 0);
  // profile show lists them.
  CHECK_THAT(calib::format_profile(q), Catch::Contains("gloo all_reduce x2 in a step (10 ms of computing before), 4 MiB") &&
                                           Catch::Contains("40% stalled by 5 ms"));
  // Beside the back-to-back median at the same size (1 ms at 4 MiB).
  CHECK_THAT(calib::format_profile(q), Catch::Contains("4 MiB: median 1.2 ms (back to back 1 ms)"));
  // Back to back at one size only (an edited or imported profile): nothing
  // to price between, so no excess, and profile show names no back-to-back time.
  Profile one = q;
  one.comm.erase(one.comm.begin() + 1);
  const auto one_costs = std::make_shared<const ProfileCosts>(one);
  const ProfileCommModel one_comm(one_costs, test::round_cluster(1, 4), nullptr);
  CHECK(one_comm.collective(CollectiveOp::kAllReduce, 256 * kKiB, two).step_extra == 0);
  CHECK_THAT(calib::format_profile(one), Catch::Contains("256 KiB: median 200 us, mean") && !Catch::Contains("back to back"));
  CHECK_THAT(calib::profile_to_json(q), Catch::Contains("\"comm_in_step\": [") && Catch::Contains("\"stall_frac\": 0.4"));
}

TEST_CASE("a profile says how long a notice waits for a busy sender, as its Gloo loops ran (Notes [Quiet sender], "
          "[Gloo's event loop])",
          "[calibrate]") {
  Profile p = sample_profile();
  p.info["gloo.api"] = "c10d ProcessGroupGloo";
  // Loops at the lowest priority: until the sender's pass ends.
  p.info["gloo.gloo_loop"] = "lowest priority (Note [Gloo's event loop])";
  const auto waits = [](const Profile& q) {
    return ProfileCommModel(std::make_shared<const ProfileCosts>(q), test::round_cluster(1, 2), nullptr).send_waits_for_core();
  };
  CHECK(waits(p) == kUntilPassEnds);
  // As Gloo starts them, or a profile from before the record: the tick.
  p.info["gloo.gloo_loop"] = "as Gloo starts it";
  CHECK(waits(p) == kSchedulerTick);
  p.info.erase("gloo.gloo_loop");
  CHECK(waits(p) == kSchedulerTick);
  // No Gloo timed (a GPU's profile): the device's own.
  p.info.erase("gloo.api");
  CHECK(!waits(p).has_value());
  CHECK(!AnalyticCommModel(test::round_cluster(1, 2)).send_waits_for_core().has_value());
  // Lowering hands the profile's to a CPU's pipeline stages, and a GPU's none.
  p.info["gloo.api"] = "c10d ProcessGroupGloo";
  ClusterSpec cpus = test::round_cluster(1, 2);
  cpus.device.gloo_collectives = true;
  cpus.device.comm_overlaps_compute = false;
  cpus.device.send_waits_for_core = kUntilPassEnds;
  const std::string plan = "dp: 1\npp: 2\nschedule: 1f1b\ngrad_accum: 2\n";
  for (const SimRank& r : predict_graph(p, test::FakeModel(4, 1000, 0, 4), plan, cpus).graph.ranks) {
    CHECK(r.send_waits_for_core == kSchedulerTick);
  }
  for (const SimRank& r : predict_graph(p, test::FakeModel(4, 1000, 0, 4), plan, test::round_cluster(1, 2)).graph.ranks) {
    CHECK(r.send_waits_for_core == 0);
  }
}

TEST_CASE("the computing after an in-step collective's wait: parsed, kept, shown and handed to the ranks (Note [Resuming "
          "after a wait])",
          "[calibrate]") {
  // Twelve fields: the computing after the 0.7 ms wait took 120 us more
  // than the lead's median pass; eleven (a bench before it): not measured.
  Profile p;
  calib::parse_bench_line("comm_step\tgloo\tall_reduce\t2\t262144\t0.01\t0.0007\t0.0019\t0.3\t0.004\t60\t0.00012", "gloo", p,
                          nullptr);
  calib::parse_bench_line("comm_step\tgloo\tall_reduce\t2\t4194304\t0.01\t0.004\t0.005\t0.1\t0.004\t60\t0.0004", "gloo", p,
                          nullptr);
  calib::parse_bench_line("comm_step\tgloo\tall_reduce\t2\t1048576\t0.01\t0.0007\t0.0019\t0.3\t0.004\t60", "gloo", p, nullptr);
  REQUIRE(p.comm_in_step.size() == 3);
  CHECK(p.comm_in_step[0].resume_s == 0.00012);
  CHECK(p.comm_in_step[0].wait_s == 0.0007);  // the all-reduce's median
  CHECK(p.comm_in_step[2].resume_s == 0);
  CHECK(p.comm_in_step[2].wait_s == 0);
  // Longer than the lead and the collective together: not a resume.
  CHECK(error_of([&] {
          calib::parse_bench_line("comm_step\tgloo\tall_reduce\t2\t262144\t0.01\t0.0007\t0.0019\t0.3\t0.004\t60\t0.5", "gloo", p, nullptr);
        }).find("field 12 '0.5' is not a time within the lead and the collective") != std::string::npos);
  CHECK(p.comm_in_step.size() == 3);

  // Kept by a round trip; shown; in the JSON.
  const std::string path = temp_path("dtsim_profile_resume");
  save_profile(p, path);
  const Profile q = load_profile(path);
  std::filesystem::remove(path);
  REQUIRE(q.comm_in_step.size() == 3);
  CHECK(q.comm_in_step[1].resume_s == 0.0004);
  CHECK(q.comm_in_step[1].wait_s == 0.004);
  CHECK(q.comm_in_step[2].wait_s == 0);
  CHECK_THAT(calib::format_profile(q), Catch::Contains("computing after it +120 us"));
  // A damaged column (a negative wait, a resume that is not a number): one
  // line naming the row and the columns.
  for (const auto& [wait, resume] : {std::pair{-0.001, 0.0001}, std::pair{0.001, std::nan("")}}) {
    Profile bad = q;
    bad.comm_in_step[0].wait_s = wait;
    bad.comm_in_step[0].resume_s = resume;
    const std::string bad_path = temp_path("dtsim_profile_bad_resume");
    save_profile(bad, bad_path);
    const std::string e = error_of([&] { load_profile(bad_path); });
    std::filesystem::remove(bad_path);
    CHECK_THAT(e, Catch::Contains("/comm_in_step: row 0: resume_s or wait_s is not a number of seconds (wait_s from 0)"));
    CHECK(e.find('\n') == std::string::npos);
  }
  CHECK_THAT(calib::profile_to_json(q), Catch::Contains("\"resume_s\": 0.0004") && Catch::Contains("\"wait_s\": 0.004"));

  // The ranks' points, by wait: (0.7 ms, 120 us), (4 ms, 400 us); the row
  // not measured gives none. A negative resume counts as none.
  const ProfileCommModel comm(std::make_shared<const ProfileCosts>(q), test::round_cluster(1, 4), nullptr);
  const auto points = comm.resume_after_wait();
  REQUIRE(points.size() == 2);
  CHECK(points[0] == std::pair<TimeNs, TimeNs>{700'000, 120'000});
  CHECK(points[1] == std::pair<TimeNs, TimeNs>{4'000'000, 400'000});
  Profile negative = q;
  negative.comm_in_step[0].resume_s = -0.0002;
  const ProfileCommModel neg(std::make_shared<const ProfileCosts>(negative), test::round_cluster(1, 4), nullptr);
  CHECK(neg.resume_after_wait()[0].second == 0);
  // A profile without them: none, and the analytic model has none.
  const ProfileCommModel plain(std::make_shared<const ProfileCosts>(sample_profile()), test::round_cluster(1, 4), nullptr);
  CHECK(plain.resume_after_wait().empty());
  CHECK(AnalyticCommModel(test::round_cluster(1, 4)).resume_after_wait().empty());
  // Of a profile merged from two sweeps, the fewest ranks' all-reduces,
  // equal waits averaged: (0.7 ms, 120 us) and (0.7 ms, 80 us) -> 100 us.
  Profile merged = q;
  merged.comm_in_step.push_back(merged.comm_in_step[0]);
  merged.comm_in_step.back().resume_s = 0.00008;
  merged.comm_in_step.push_back(merged.comm_in_step[1]);
  merged.comm_in_step.back().ranks = 4;
  merged.comm_in_step.back().wait_s = 0.002;
  merged.comm_in_step.push_back(merged.comm_in_step[1]);
  merged.comm_in_step.back().op = CollectiveOp::kAllGather;
  merged.comm_in_step.back().wait_s = 0.003;
  const ProfileCommModel two_sweeps(std::make_shared<const ProfileCosts>(merged), test::round_cluster(1, 4), nullptr);
  CHECK(two_sweeps.resume_after_wait() ==
        std::vector<std::pair<TimeNs, TimeNs>>{{700'000, 100'000}, {4'000'000, 400'000}});
  // Lowering hands them to every rank whose collectives need its cores (a
  // CPU's), a DDP rank's and a pipeline stage's; a GPU's ranks get none.
  Profile priced = sample_profile();
  priced.comm_in_step = q.comm_in_step;
  ClusterSpec cpus = test::round_cluster(1, 2);
  cpus.device.comm_overlaps_compute = false;
  for (const std::string plan : {"dp: 2\n", "dp: 1\npp: 2\nschedule: 1f1b\ngrad_accum: 2\n"}) {
    INFO(plan);
    const Prediction pr = predict_graph(priced, test::FakeModel(4, 1000, 0, 4), plan, cpus);
    REQUIRE(!pr.graph.ranks.empty());
    for (const SimRank& r : pr.graph.ranks) CHECK(r.resume == points);
    for (const SimRank& r : predict_graph(priced, test::FakeModel(4, 1000, 0, 4), plan, test::round_cluster(1, 2)).graph.ranks) {
      CHECK(r.resume.empty());
    }
  }
  // A pipeline whose stages wait on their receives: the extra lengthens
  // it, and its steady state, simulated once, still gives the whole run's
  // time and peaks (Note [Steady state]).
  PredictOptions po;
  po.profile = std::make_shared<const ProfileCosts>(priced);
  const PlanSpec pipe = parse_plan("micro_batch: 1\nprecision: fp32\noptimizer: adam\ndp: 1\npp: 2\nschedule: 1f1b\ngrad_accum: 64\n",
                                   "test.yaml");
  const Prediction abridged = predict(test::FakeModel(4, 1000, 0, 4), pipe, cpus, po);
  CHECK(abridged.abridged_to > 0);
  po.unabridged = true;
  const Prediction whole = predict(test::FakeModel(4, 1000, 0, 4), pipe, cpus, po);
  CHECK(whole.abridged_to == 0);
  CHECK(abridged.iteration_time == whole.iteration_time);
  REQUIRE(abridged.ranks.size() == whole.ranks.size());
  for (std::size_t r = 0; r < whole.ranks.size(); ++r) CHECK(abridged.ranks[r].peak == whole.ranks[r].peak);
  PredictOptions none;
  none.profile = std::make_shared<const ProfileCosts>(sample_profile());
  none.unabridged = true;
  CHECK(predict(test::FakeModel(4, 1000, 0, 4), pipe, cpus, none).iteration_time < whole.iteration_time);
}
