#include <catch2/catch.hpp>

#include "test_util.hpp"

#include <cmath>
#include <memory>
#include <string>

#include "dtsim/sim/cost.hpp"
#include "dtsim/sim/cost_profile.hpp"
#include "dtsim/sim/profile.hpp"

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

/// A named GEMM (m,k) x (k,n) in 2-byte elements.
Kernel gemm_of(const std::string& name, std::int64_t m, std::int64_t n, std::int64_t k) {
  Kernel g = test::gemm_kernel(m, n, k);
  g.name = name;
  return g;
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

TEST_CASE("a GEMM Transformer Engine's userbuffers split runs as its chunks, its FP8 cast once (Note [Userbuffers' chunks])",
          "[compute][tp_overlap]") {
  const RooflineComputeModel m(round_device());
  // 4096 x 12800 output, k 4800, in 8 chunks of 512 rows: each 4 x 100
  // tiles, 4 full waves of the 100 units (the whole GEMM: 32 full waves);
  // each chunk's time is its FLOPs at the same efficiency, 0.8 x 4800 /
  // 4848, plus its launch. A chunk reads the whole weight again (2 x 4800 x
  // 12800 bytes) and its share of the rest: 140.9 MB, 282 us at 0.5 TB/s,
  // below its 794 us of compute.
  Kernel k = gemm_of("attn.qkv", 4096, 12800, 4800);
  const double eff = 0.8 * 4800.0 / 4848.0;
  CHECK(m.kernel_time(k, Precision::kFp16) == seconds_to_ns(k.flops / (100e12 * eff)) + 5 * kNsPerUs);
  k.splits = 8;
  const TimeNs chunk = seconds_to_ns(k.flops / 8 / (100e12 * eff)) + 5 * kNsPerUs;
  CHECK(m.kernel_time(k, Precision::kFp16) == 8 * chunk);
  const Kernel c = gemm_chunk(k);
  CHECK(c.m == 512);
  CHECK(c.splits == 1);
  CHECK(c.flops == Approx(2.0 * 512 * 12800 * 4800));
  CHECK(c.bytes == 2 * (512LL * 4800 + 4800LL * 12800 + 512LL * 12800));
  // 100 rows in 8 chunks: 13 rows a chunk (the last one shorter in the
  // run; priced as the others).
  Kernel odd = k;
  odd.m = 100;
  CHECK(gemm_chunk(odd).m == 13);

  // Narrow: 4096 x 1280 whole is 32 x 10 = 320 tiles, 4 waves of which
  // the last is a fifth full (320 / 400 = 0.8); a chunk of 512 rows is 40
  // tiles, 0.4 of one wave. Each chunk runs at half the whole GEMM's
  // efficiency: 8 chunks take twice its compute, and 8 launches.
  Kernel narrow = gemm_of("attn.qkv", 4096, 1280, 4800);
  CHECK(m.gemm_efficiency(4096, 1280, 4800) == Approx(0.8 * 0.8 * 4800.0 / 4848.0));
  CHECK(m.gemm_efficiency(512, 1280, 4800) == Approx(0.8 * 0.4 * 4800.0 / 4848.0));
  narrow.splits = 8;
  const TimeNs narrow_chunk = seconds_to_ns(narrow.flops / 8 / (100e12 * 0.8 * 0.4 * 4800.0 / 4848.0)) + 5 * kNsPerUs;
  CHECK(m.kernel_time(narrow, Precision::kFp16) == 8 * narrow_chunk);

  // Under FP8 the input is cast once, before the exchange, not once a
  // chunk (Note [FP8 casts]).
  DeviceSpec fp8 = round_device();
  fp8.peak_fp8 = 200e12;
  fp8.compute_capability = 90;
  const RooflineComputeModel f(fp8);
  Kernel one = k;
  one.splits = 1;
  const TimeNs cast = fp8_cast_time(one, Precision::kFp8, fp8);
  REQUIRE(cast > 0);
  CHECK(fp8_cast_time(k, Precision::kFp8, fp8) == cast);
  const TimeNs fp8_chunk = seconds_to_ns(k.flops / 8 / (200e12 * eff)) + 5 * kNsPerUs;
  CHECK(f.kernel_time(k, Precision::kFp8) == 8 * fp8_chunk + cast);
}

TEST_CASE("a profile's GEMM fit prices userbuffers' chunks one by one (Note [Userbuffers' chunks])", "[compute][profile][tp_overlap]") {
  // kernel.gemm.bf16 as calibration stores it: 20 us + 1e-15 s a FLOP +
  // 1e-12 s an output element.
  Profile p;
  p.info["device_kind"] = "cuda";
  LinearFit fit;
  fit.features = {"1", "flops", "mn"};
  fit.coef = {20e-6, 1e-15, 1e-12};
  p.fits["kernel.gemm.bf16"] = fit;
  const ProfileComputeModel m(std::make_shared<const ProfileCosts>(p), round_device(), nullptr);
  Kernel k = gemm_of("mlp.fc1", 4096, 12800, 4800);
  // Whole: 20 us + 503.3 us + 52.4 us.
  CHECK(m.kernel_time(k, Precision::kBf16) == seconds_to_ns(20e-6 + 1e-15 * k.flops + 1e-12 * 4096.0 * 12800));
  // 4 chunks of 1,024 rows: each 20 us + a quarter of the rest; the fit's
  // constant paid four times.
  k.splits = 4;
  CHECK(m.kernel_time(k, Precision::kBf16) == 4 * seconds_to_ns(20e-6 + 1e-15 * k.flops / 4 + 1e-12 * 1024.0 * 12800));
}

TEST_CASE("a GEMM beside a collective's SMs runs its waves on the rest (Note [Userbuffers' chunks])", "[compute][tp_overlap]") {
  const RooflineComputeModel m(round_device());  // 100 units
  // 12800 x 12800: 10,000 tiles. On 84 units (16 kept): 120 waves, the
  // last 4/84 full: 10000 / (120 x 84); and at 84/100 of the peak.
  Kernel k = gemm_of("attn.o_proj", 12800, 12800, 4800);
  k.sm_margin = 16;
  const double util = 10000.0 / (120.0 * 84.0);
  CHECK(m.gemm_efficiency(12800, 12800, 4800, 16) == Approx(0.8 * util * 4800.0 / 4848.0));
  CHECK(m.sm_share(k) == Approx(0.84));
  const TimeNs expect = seconds_to_ns(k.flops / (100e12 * 0.84 * 0.8 * util * 4800.0 / 4848.0)) + 5 * kNsPerUs;
  CHECK(m.kernel_time(k, Precision::kFp16) == expect);
  // A profile's fit: its time on all the SMs over the share left, 0.84.
  Profile p;
  p.info["device_kind"] = "cuda";
  LinearFit fit;
  fit.features = {"1", "flops"};
  fit.coef = {20e-6, 1e-15};
  p.fits["kernel.gemm.fp16"] = fit;
  const ProfileComputeModel f(std::make_shared<const ProfileCosts>(p), round_device(), nullptr);
  const TimeNs all = seconds_to_ns(20e-6 + 1e-15 * k.flops);
  CHECK(f.kernel_time(k, Precision::kFp16) == static_cast<TimeNs>(std::llround(static_cast<double>(all) / 0.84)));
}
