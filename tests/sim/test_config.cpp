#include <catch2/catch.hpp>

#include "test_util.hpp"

#include <string>

#include "dtsim/sim/lowering.hpp"
#include "dtsim/sim/config_io.hpp"
#include "dtsim/sim/cost.hpp"
#include "dtsim/sim/error.hpp"

using namespace dtsim;
using namespace dtsim::sim;
using dtsim::test::error_of;


TEST_CASE("a plan file is read with every key", "[config]") {
  const PlanSpec p = parse_plan(
      "name: mine\ndp: 4\nmicro_batch: 8\ngrad_accum: 2\nprecision: bf16\noptimizer: sgd\nzero_stage: 2\n"
      "offload_optimizer: cpu\nrecompute: full\nbucket_mb: 50\noverlap: false\n",
      "p.yaml");
  CHECK(p.name == "mine");
  CHECK(p.dp == 4);
  CHECK(p.micro_batch == 8);
  CHECK(p.grad_accum == 2);
  CHECK(p.precision == Precision::kBf16);
  CHECK(p.optimizer == Optimizer::kSgd);
  CHECK(p.zero_stage == 2);
  CHECK(p.offload_optimizer == Offload::kCpu);
  CHECK(p.recompute == Recompute::kFull);
  CHECK(p.bucket_mb == 50);
  CHECK_FALSE(p.overlap);
  CHECK(p.origins.of("plan.dp") == "p.yaml:2");
}

TEST_CASE("an unknown key names file, line and a suggestion", "[config][bad-input]") {
  const std::string e = error_of([] { parse_plan("dp: 2\nmicro_bach: 4\n", "configs/plans/x.yaml"); });
  CHECK_THAT(e, Catch::StartsWith("configs/plans/x.yaml:2: plan.micro_bach: unknown key (did you mean 'micro_batch'?)"));
}

TEST_CASE("zero_stage 4 lists what is valid", "[config][bad-input]") {
  const std::string e = error_of([] { parse_plan("name: x\nzero_stage: 4\n", "x.yaml"); });
  CHECK(e == "x.yaml:2: plan.zero_stage: 4 is not one of 0, 1, 2, 3");
}

TEST_CASE("wrong types are named", "[config][bad-input]") {
  CHECK(error_of([] { parse_plan("micro_batch: lots\n", "x.yaml"); }) ==
        "x.yaml:1: plan.micro_batch: 'lots' is not an integer");
  CHECK(error_of([] { parse_plan("overlap: maybe\n", "x.yaml"); }) ==
        "x.yaml:1: plan.overlap: 'maybe' is not a boolean; valid: true, false");
  CHECK_THAT(error_of([] { parse_plan("precision: fp6\n", "x.yaml"); }),
             Catch::Contains("plan.precision: 'fp6' is not one of fp32, fp16, bf16, fp8, fp4"));
  // The framework knobs' words (Note [Fused kernels], [FP8 training], [FSDP's reduce dtype]).
  CHECK_THAT(error_of([] { parse_plan("kernels: te\n", "x.yaml"); }), Catch::Contains("plan.kernels: 'te' is not one of composite, fused"));
  CHECK_THAT(error_of([] { parse_plan("fp8_recipe: blockwise\n", "x.yaml"); }),
             Catch::Contains("plan.fp8_recipe: 'blockwise' is not one of delayed, tensorwise, mxfp8"));
  CHECK_THAT(error_of([] { parse_plan("reduce_dtype: bf16\n", "x.yaml"); }),
             Catch::Contains("plan.reduce_dtype: 'bf16' is not one of param, fp32"));
  CHECK_THAT(error_of([] { parse_plan("dp: [1, 2]\n", "x.yaml"); }),
             Catch::Contains("plan.dp: expected an integer, got a list"));
}

TEST_CASE("a zero micro-batch is rejected", "[config][bad-input]") {
  CHECK(error_of([] { parse_plan("micro_batch: 0\n", "x.yaml"); }) ==
        "x.yaml:1: plan.micro_batch: 0 is out of range; valid: 1 to 16777216");
}

TEST_CASE("malformed YAML gives the line", "[config][bad-input]") {
  CHECK_THAT(error_of([] { parse_plan("dp: 2\nmicro_batch: [1, 2\n", "x.yaml"); }),
             Catch::StartsWith("x.yaml:") && Catch::Contains("malformed YAML"));
}

// The fuzzer's input: JSON valid up to a NUL byte, an unclosed string after it.
TEST_CASE("a config with a NUL byte is refused with its line", "[config][bad-input]") {
  CHECK(error_of([] { parse_plan(std::string("dp: 2\n\0x", 8), "x.yaml"); }) ==
        "x.yaml:2: a NUL byte; a config is text (YAML or JSON)");
  CHECK(error_of([] { parse_plan(std::string("\"at\"\0\0: \"fa", 11), "x.json"); }) ==
        "x.json:1: a NUL byte; a config is text (YAML or JSON)");
}

TEST_CASE("overrides apply before validation and are named as their origin", "[config]") {
  const PlanSpec p = parse_plan("dp: 2\n", "x.yaml", {parse_override("plan.micro_batch=32")});
  CHECK(p.micro_batch == 32);
  CHECK(p.origins.of("plan.micro_batch") == "--set plan.micro_batch");
  CHECK(error_of([] { parse_plan("dp: 2\n", "x.yaml", {parse_override("plan.zero_stage=7")}); }) ==
        "--set plan.zero_stage: 7 is not one of 0, 1, 2, 3");
  CHECK_THAT(error_of([] { parse_plan("dp: 2\n", "x.yaml", {parse_override("plan.dpp=2")}); }),
             Catch::StartsWith("--set plan.dpp: unknown key (did you mean 'dp'?)"));
}

TEST_CASE("malformed --set is rejected with the valid form", "[config][bad-input]") {
  CHECK_THROWS_AS(parse_override("micro_batch=3"), ConfigError);
  CHECK_THAT(error_of([] { parse_override("plans.dp=3"); }), Catch::Contains("did you mean 'plan'"));
  CHECK_THAT(error_of([] { parse_override("plan.dp="); }), Catch::Contains("no value"));
}

TEST_CASE("a cluster file is read, with device overrides", "[config]") {
  const ClusterSpec c = parse_cluster(
      "name: t\nnodes: 2\ngpus_per_node: 4\ndevice: {base: A100-SXM4-80GB, memory_GiB: 40}\n"
      "intra_node: {type: nvlink, bandwidth_GBps: 300, latency_us: 0.5}\n"
      "inter_node: {type: infiniband, bandwidth_GBps: 25, latency_us: 5, nics_per_node: 4}\n"
      "host: {memory_GiB: 512, device_bandwidth_GBps: 24, memory_bandwidth_GBps: 200, tflops: 2}\n",
      "c.yaml", {parse_override("cluster.nodes=3"), parse_override("cluster.intra_node.bandwidth_GBps=150")});
  CHECK(c.nodes == 3);
  CHECK(c.gpus() == 12);
  CHECK(c.device.memory == 40 * kGiB);
  CHECK(c.device.name == "A100-SXM4-80GB");
  CHECK(c.intra_node.bandwidth == Approx(150e9));
  CHECK(c.intra_node.latency == 500);
  CHECK(c.inter_node.bandwidth == Approx(25e9));
  CHECK(c.nics_per_node == 4);
  CHECK(c.host_device_bandwidth == Approx(24e9));
}

TEST_CASE("the interference prior: NCCL's 24 channels' share of the SMs (Note [Interference prior])", "[config][interference]") {
  // f = 24 / SMs taken from a GEMM that scales with its SMs: 1 / (1 - f) as
  // long, i.e. f / (1 - f) = 24 / (SMs - 24) longer.
  CHECK(find_device("A100-SXM4-80GB")->comm_slowdown == Approx(24.0 / 84));   // 108 SMs: +28.6%
  CHECK(find_device("H100-SXM")->comm_slowdown == Approx(24.0 / 108));        // 132 SMs: +22.2%
  CHECK(find_device("B200")->comm_slowdown == Approx(24.0 / 124));            // 148 SMs
  for (const char* none : {"V100-SXM2-16GB", "MI300X", "P100", "cpu"}) CHECK(find_device(none)->comm_slowdown == 0);
  const ClusterSpec c = parse_cluster("device: {base: H100-SXM, comm_slowdown: 0.4}\n"
                                      "intra_node: {type: nvlink, bandwidth_GBps: 450}\n", "c.yaml");
  CHECK(c.device.comm_slowdown == 0.4);
  CHECK_THAT(error_of([] { parse_cluster("device: {base: H100-SXM, comm_slowdown: -1}\nintra_node: {type: nvlink, bandwidth_GBps: 450}\n", "c.yaml"); }),
             Catch::Contains("cluster.device.comm_slowdown: -1 is out of range"));
  // The HBM half: 3 bytes of HBM a link byte by default (NVIDIA/nccl #1428);
  // at 2 beside 450 GB/s over 3,350 x 0.8: h = 900 / 2680, s = h / (1 - h).
  CHECK(find_device("H100-SXM")->comm_hbm_traffic == 3.0);
  const ClusterSpec two = parse_cluster("device: {base: H100-SXM, comm_hbm_traffic: 2}\n"
                                        "intra_node: {type: nvlink, bandwidth_GBps: 450}\n", "c.yaml");
  CHECK(two.device.comm_hbm_traffic == 2.0);
  const double h = 2 * 450e9 / (3350e9 * 0.8);
  CHECK(hbm_slowdown(two.device, 450e9) == Approx(h / (1 - h)));
  CHECK(hbm_slowdown(c.device, 450e9) == Approx(3 * 450e9 / (3350e9 * 0.8) / (1 - 3 * 450e9 / (3350e9 * 0.8))));
  CHECK(hbm_slowdown(parse_cluster("device: {base: H100-SXM, comm_hbm_traffic: 0}\nintra_node: {type: nvlink, bandwidth_GBps: 450}\n",
                                   "c.yaml").device, 450e9) == 0);
  CHECK_THAT(error_of([] { parse_cluster("device: {base: H100-SXM, comm_hbm_traffic: 11}\nintra_node: {type: nvlink, bandwidth_GBps: 450}\n", "c.yaml"); }),
             Catch::Contains("cluster.device.comm_hbm_traffic: 11 is out of range"));
}

TEST_CASE("an NVL72 rack is one node of 72 GPUs whose hosts are its trays (Note [NVLink domains])", "[config][nvl72]") {
  const ClusterSpec gb200 = load_cluster("gb200-nvl72");
  CHECK(gb200.gpus_per_node == 72);
  CHECK(gb200.nics_per_node == 72);  // a ConnectX-7 a GPU (DGX GB200 user guide)
  CHECK(gb200.host_gpus == 4);
  CHECK(gb200.gpus_per_host() == 4);
  CHECK(gb200.device.name == "GB200");
  CHECK(gb200.device.memory == static_cast<Bytes>(189471.0 * 1024 * 1024));  // nvidia-smi's 189,471 MiB
  // GB200 NVL72 specifications, a rack with sparsity: 360 PFLOP/s BF16 and
  // 720 FP8 over 72 GPUs, halved for dense.
  CHECK(gb200.device.peak_bf16 == Approx(360e15 / 72 / 2));
  CHECK(gb200.device.peak_fp8 == Approx(720e15 / 72 / 2));
  // The H100's prior 0.70 scaled by the share of the peak cuBLASLt's FP8
  // GEMM reaches at 16384^3 on each (Azure: 2,906.9 of 5,000 TFLOP/s on
  // GB200, 3,308.5 on GB300, 1,377.3 of 1,978.9 on H100).
  CHECK(gb200.device.gemm_efficiency == Approx(0.70 * (2906.9 / 5000) / (1377.3 / 1978.9)).epsilon(0.002));
  const ClusterSpec gb300 = load_cluster("gb300-nvl72");
  CHECK(gb300.device.memory == static_cast<Bytes>(284208.0 * 1024 * 1024));
  CHECK(gb300.device.peak_bf16 == gb200.device.peak_bf16);
  CHECK(gb300.device.gemm_efficiency == Approx(0.70 * (3308.5 / 5000) / (1377.3 / 1978.9)).epsilon(0.002));
  // Fused attention: the Hopper prior on GB200 (FlashAttention-2's 35% of an
  // H100), GB300's 35% faster for its doubled exponential units (NVIDIA's
  // Blackwell Ultra softmax blog).
  CHECK(gb200.device.attention_efficiency == Approx(0.35));
  CHECK(gb300.device.attention_efficiency == Approx(0.35 * 1.35));
  CHECK(gb300.inter_node.bandwidth == Approx(100e9));  // ConnectX-8, 800 Gb/s
  // A job of 16-tray NVLink segments: nodes of 64 GPUs, still trays of 4.
  const ClusterSpec seg = load_cluster("gb200-nvl72", {parse_override("cluster.gpus_per_node=64"), parse_override("cluster.nodes=4")});
  CHECK(seg.gpus() == 256);
  CHECK(seg.gpus_per_host() == 4);
  // A host of more GPUs than divide the node, in one line.
  CHECK_THAT(error_of([] { load_cluster("gb200-nvl72", {parse_override("cluster.gpus_per_node=70")}); }),
             Catch::Contains("cluster.host.gpus: 4 GPUs a host do not divide the node's 70 (gpus_per_node); valid: a divisor of it"));
  CHECK_THAT(error_of([] { parse_cluster("device: H100-SXM\ngpus_per_node: 8\nintra_node: {type: nvlink, bandwidth_GBps: 450}\nhost: {gpus: 0}\n", "c.yaml"); }),
             Catch::Contains("c.yaml:4: cluster.host.gpus: 0 is out of range"));
  // Without host.gpus a host is the node, as before.
  CHECK(load_cluster("dgx-h100").gpus_per_host() == 8);
}

TEST_CASE("a GPU's share of its host: the CPU optimizer on an NVL72 tray, not the rack", "[config][nvl72]") {
  // Host Adam over fp32 states reads the gradient, the weight and two
  // states and writes three: 4 + 4 + 8 + 4 + 8 = 28 bytes a parameter.
  // A tray's 763 GB/s (STREAM Triad, Azure ND GB200 v6) over its 4 GPUs:
  // 1e9 parameters in 28e9 / 190.75e9 s; its 7.1 TFLOP/s over 4 take
  // 12e9 / 1.775e12 s, less.
  ClusterSpec c = load_cluster("gb200-nvl72");
  const RooflineComputeModel m(c.device);
  const double per_tray = static_cast<double>(m.host_optimizer_time(1e9, Optimizer::kAdam, Precision::kFp32, c)) / 1e9;
  CHECK(per_tray == Approx(28e9 / (763e9 / 4)).epsilon(1e-6));
  // The same figures read as the whole node's would share them among 72.
  c.host_gpus = 0;
  const double per_rack = static_cast<double>(m.host_optimizer_time(1e9, Optimizer::kAdam, Precision::kFp32, c)) / 1e9;
  CHECK(per_rack == Approx(18 * per_tray).epsilon(1e-6));
}

TEST_CASE("cluster errors name the key", "[config][bad-input]") {
  const std::string base = "intra_node: {type: nvlink, bandwidth_GBps: 300}\n";
  CHECK_THAT(error_of([&] { parse_cluster("device: A100-SXM4-80G\n" + base, "c.yaml"); }),
             Catch::StartsWith("c.yaml:1: cluster.device: unknown device 'A100-SXM4-80G' (did you mean 'A100-SXM4-80GB'?)"));
  CHECK_THAT(error_of([&] { parse_cluster("device: K80\nintra_node: {type: nvlinc, bandwidth_GBps: 3}\n", "c.yaml"); }),
             Catch::Contains("cluster.intra_node.type: 'nvlinc' is not one of nvlink, xgmi, pcie, shm"));
  CHECK_THAT(error_of([&] { parse_cluster("device: K80\n" + base + "gpus_per_node: 0\n", "c.yaml"); }),
             Catch::StartsWith("c.yaml:3: cluster.gpus_per_node: 0 is out of range"));
  CHECK_THAT(error_of([&] { parse_cluster("device: K80\n", "c.yaml"); }),
             Catch::Contains("cluster.intra_node: missing"));
}

TEST_CASE("missing files and unknown names", "[config][bad-input]") {
  CHECK_THROWS_AS(load_plan("no/such/plan.yaml"), IoError);
  CHECK_THAT(error_of([] { load_plan("zero22"); }), Catch::Contains("unknown plan (did you mean 'zero2'?)"));
}

TEST_CASE("every shipped plan and cluster loads", "[config]") {
  const auto plans = list_configs("plans");
  const auto clusters = list_configs("clusters");
  CHECK(plans.size() >= 7);
  CHECK(clusters.size() >= 8);
  for (const auto& p : plans) CHECK_NOTHROW(load_plan(p));
  for (const auto& c : clusters) CHECK_NOTHROW(load_cluster(c));
}

TEST_CASE("a CPU's receiver notices wait for the sender's pass to end, or at most a set time (Notes [Busy sender], "
          "[Quiet sender])", "[config]") {
  // dtsim's runtime lowers a bound rank's Gloo loops: no bound.
  CHECK(find_device("cpu")->send_waits_for_core == kUntilPassEnds);
  // CONFIG_HZ=250, Debian's kernels': a tick is 1 / 250 s = 4 ms.
  CHECK(kSchedulerTick == 4 * kNsPerMs);
  for (const char* gpu : {"A100-SXM4-80GB", "H100-SXM", "MI300X"}) CHECK(find_device(gpu)->send_waits_for_core == 0);
  const ClusterSpec c = parse_cluster("device: {base: cpu, send_waits_for_core_ms: 10}\n"
                                      "intra_node: {type: shm, bandwidth_GBps: 2}\n", "c.yaml");
  CHECK(c.device.send_waits_for_core == 10 * kNsPerMs);  // CONFIG_HZ=100
  CHECK_THAT(error_of([] { parse_cluster("device: {base: cpu, send_waits_for_core_ms: -1}\nintra_node: {type: shm, bandwidth_GBps: 2}\n", "c.yaml"); }),
             Catch::Contains("cluster.device.send_waits_for_core_ms: -1 is out of range"));
}
