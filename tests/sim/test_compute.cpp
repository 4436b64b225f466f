#include <catch2/catch.hpp>

#include <cmath>

#include "dtsim/sim/cost.hpp"

using namespace dtsim;
using namespace dtsim::sim;

namespace {
DeviceSpec round_device() {
  DeviceSpec d;
  d.name = "round";
  d.peak_fp32 = 10e12;
  d.peak_fp16 = 100e12;
  d.peak_bf16 = 100e12;
  d.memory_bandwidth = 1e12;
  d.compute_units = 100;
  d.gemm_efficiency = 0.8;
  d.memory_efficiency = 0.5;
  d.kernel_launch = 5 * kNsPerUs;
  return d;
}
}  // namespace

TEST_CASE("GEMM efficiency: wave quantisation and short K", "[compute]") {
  const RooflineComputeModel m(round_device());
  // 12800 x 12800 output = 100 x 100 tiles of 128 = 10000 tiles over 100
  // units: 100 full waves. k = 4800: 4800 / (4800 + 48) of the best 0.8.
  CHECK(m.gemm_efficiency(12800, 12800, 4800) == Approx(0.8 * 4800.0 / 4848.0));
  // 101 tiles: 2 waves, the second nearly empty: 101 / 200.
  CHECK(m.gemm_efficiency(128 * 101, 128, 4800) == Approx(0.8 * (101.0 / 200.0) * 4800.0 / 4848.0));
}

TEST_CASE("a large GEMM is compute bound", "[compute]") {
  const RooflineComputeModel m(round_device());
  Kernel k;
  k.kind = KernelKind::kGemm;
  k.m = 12800;
  k.n = 12800;
  k.k = 4800;
  k.flops = 2.0 * 12800 * 12800 * 4800;
  k.bytes = 2 * (12800LL * 4800 * 2 + 12800LL * 12800);
  const double eff = 0.8 * 4800.0 / 4848.0;
  const TimeNs expect = seconds_to_ns(k.flops / (100e12 * eff)) + 5 * kNsPerUs;
  CHECK(m.kernel_time(k, Precision::kFp16) == expect);
  // fp32 uses the fp32 peak: 10x slower compute.
  CHECK(m.kernel_time(k, Precision::kFp32) == seconds_to_ns(k.flops / (10e12 * eff)) + 5 * kNsPerUs);
}

TEST_CASE("an element-wise kernel is memory bound", "[compute]") {
  const RooflineComputeModel m(round_device());
  Kernel k;
  k.kind = KernelKind::kElementwise;
  k.flops = 1e6;
  k.bytes = 1'000'000'000;  // 1 GB at 1 TB/s x 0.5 efficiency = 2 ms
  CHECK(m.kernel_time(k, Precision::kFp16) == 2 * kNsPerMs + 5 * kNsPerUs);
}

TEST_CASE("repeated kernels are charged per launch", "[compute]") {
  const RooflineComputeModel m(round_device());
  Kernel k;
  k.kind = KernelKind::kElementwise;
  k.bytes = 1000;  // 2 ns of traffic + 5 us launch
  k.repeat = 10;
  CHECK(m.kernels_time({k}, Precision::kFp32) == 10 * (2 + 5 * kNsPerUs));
}
