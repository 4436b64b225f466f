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

TEST_CASE("a pass's memory-bound share weighs its kernels by their time (Note [Interference])", "[compute][interference]") {
  // Round device, fp32: an elementwise kernel of 1e9 bytes streams at
  // 1e12 x 0.5 B/s: 2 ms (+5 us launch), its flops negligible; a norm of
  // 5e8 bytes 1 ms + 5 us. A GEMM of 8e12 flops at 10e12 x 0.8 (12800 x
  // 12800 x 4800 has 100 full waves; 4800 / 4848 of 0.8): 1 s x 4848 /
  // 4800 + 5 us. Share: (2 x 2.005 + 1.005) ms over everything.
  const RooflineComputeModel m(round_device());
  Layer l;
  l.kind = LayerKind::kOther;
  Kernel gemm;
  gemm.kind = KernelKind::kGemm;
  gemm.m = 12800;
  gemm.n = 12800;
  gemm.k = 4800;
  gemm.flops = 8e12;
  Kernel add;
  add.kind = KernelKind::kElementwise;
  add.bytes = 1'000'000'000;
  add.repeat = 2;
  Kernel norm;
  norm.kind = KernelKind::kNorm;
  norm.bytes = 500'000'000;
  l.forward = {gemm, add, norm};
  const double gemm_s = 8e12 / (10e12 * 0.8 * 4800.0 / 4848.0) + 5e-6;
  const double memory_s = 2 * (2e-3 + 5e-6) + (1e-3 + 5e-6);
  CHECK(m.memory_share(l, Pass::kForward, Precision::kFp32) == Approx(memory_s / (memory_s + gemm_s)).epsilon(1e-6));
  // A pass without kernels has none; one of memory-bound kernels only is all.
  CHECK(m.memory_share(l, Pass::kBackward, Precision::kFp32) == 0);
  l.backward = {add, norm};
  CHECK(m.memory_share(l, Pass::kBackward, Precision::kFp32) == Approx(1.0));
}
