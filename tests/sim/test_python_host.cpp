// Note [Python host cost] (sim/src/cost/cost_python.cpp): a Python loop's
// host cost from a profile's timed sequences, and what a plan run by one pays.
#include <catch2/catch.hpp>

#include "dtsim/sim/config_io.hpp"
#include "dtsim/sim/cost.hpp"
#include "dtsim/sim/cost_profile.hpp"
#include "dtsim/sim/error.hpp"
#include "dtsim/models/models.hpp"
#include "dtsim/sim/predict.hpp"
#include "fake_model.hpp"

using namespace dtsim;
using namespace dtsim::sim;

namespace {

KernelSample timed(const std::string& kind, std::int64_t m, std::int64_t n, double seconds) {
  KernelSample k;
  k.kind = kind;
  k.m = m;
  k.n = n;
  k.time.median_s = k.time.min_s = k.time.max_s = seconds;
  k.time.reps = 10;
  return k;
}

/// Python: 64 ops in 1.6 ms (25 us an op), C++ 0.64 ms (10 us): 15 us an op
/// more. Steps of 1 and 16 tensors: Python 70 and 820 us, C++ 20 and 320 us;
/// differences 50 and 500 us: (500 - 50) / 15 = 30 us a tensor.
Profile python_profile() {
  Profile p;
  p.info["device_kind"] = "cpu";
  p.kernels = {timed("python_ops", 64, 1, 1.6e-3), timed("host_ops", 64, 1, 0.64e-3),
               timed("python_step", 64, 1, 70e-6),  timed("python_step", 1024, 16, 820e-6),
               timed("host_step", 64, 1, 20e-6),    timed("host_step", 1024, 16, 320e-6)};
  return p;
}

/// Every kernel 100 us, nothing else.
class HundredUs final : public ComputeModel {
 public:
  TimeNs kernel_time(const Kernel&, Precision) const override { return 100 * kNsPerUs; }
  TimeNs optimizer_time(double, int, Optimizer, Precision, const DeviceSpec&) const override { return 1000 * kNsPerUs; }
};

Layer three_kinds() {
  // A GEMM, an elementwise kernel launched 3 times and an LSTM of 32 time
  // steps: 1 + 3 + 1 = 5 eager ops from Python (nn.LSTM is one call).
  Layer l;
  l.name = "l";
  Kernel g;
  g.kind = KernelKind::kGemm;
  Kernel e;
  e.kind = KernelKind::kElementwise;
  e.repeat = 3;
  Kernel r;
  r.kind = KernelKind::kRecurrent;
  r.repeat = 32;
  l.forward = {g, e, r};
  l.backward = {g, g};
  return l;
}

}  // namespace

TEST_CASE("the Python host cost is the difference of the two loops' timed work", "[python-host]") {
  const auto c = python_host_cost(python_profile());
  REQUIRE(c.has_value());
  CHECK(c->per_op_s == Approx(15e-6));
  CHECK(c->per_tensor_s == Approx(30e-6));
  // Faster from Python than from C++ (noise): never a negative cost.
  Profile faster = python_profile();
  faster.kernels[0].time.median_s = 0.5e-3;
  CHECK(python_host_cost(faster)->per_op_s == 0);
  // Without both sequences: none.
  Profile half = python_profile();
  half.kernels.erase(half.kernels.begin());
  CHECK_FALSE(python_host_cost(half).has_value());
  CHECK(ProfileCosts(python_profile()).python_host()->per_op_s == Approx(15e-6));
}

TEST_CASE("a Python forward pays its ops on a CPU, and on a GPU the host's time to issue them", "[python-host]") {
  const Layer l = three_kinds();
  CHECK(python_forward_ops(l) == 5);
  const HundredUs base;
  const PythonHostCost cost{15e-6, 30e-6};
  const WorkloadShape shape;
  DeviceSpec d;
  // CPU: the forward's 1 + 3 + 32 launches of 100 us each, then 5 ops x
  // 15 us; autograd's backward (2 x 100 us) as it was; the step 1 ms and 4
  // tensors x 30 us.
  const PythonHostComputeModel cpu(base, cost, /*gpu=*/false);
  CHECK(cpu.layer_time(l, Pass::kForward, Precision::kFp32, shape) == (3600 + 75) * kNsPerUs);
  CHECK(cpu.layer_time(l, Pass::kBackward, Precision::kFp32, shape) == 200 * kNsPerUs);
  CHECK(cpu.optimizer_time(1000, 4, Optimizer::kAdamW, Precision::kFp32, d) == (1000 + 120) * kNsPerUs);
  CHECK(cpu.layer_launch_time(l, Pass::kForward, Precision::kFp32) == 0);
  // GPU: the kernels keep their time; the host's issue grows by the same.
  const PythonHostComputeModel gpu(base, cost, /*gpu=*/true);
  CHECK(gpu.layer_time(l, Pass::kForward, Precision::kFp32, shape) == 3600 * kNsPerUs);
  CHECK(gpu.layer_launch_time(l, Pass::kForward, Precision::kFp32) == 75 * kNsPerUs);
  CHECK(gpu.layer_launch_time(l, Pass::kBackward, Precision::kFp32) == 0);
  CHECK(gpu.optimizer_time(1000, 4, Optimizer::kAdamW, Precision::kFp32, d) == 1000 * kNsPerUs);
  CHECK(gpu.optimizer_launch_time(1000, 4, Optimizer::kAdamW, Precision::kFp32) == 120 * kNsPerUs);
}

TEST_CASE("a one-rank step run from Python takes its forwards' ops and its tensors longer", "[python-host]") {
  // 4 fake layers of one forward kernel (1 GFLOP at 1 ms), each 1000
  // parameters in 2 tensors, 2 micro-batches, one rank: the Python loop adds
  // 2 x 4 x 15 us = 120 us of forwards and 8 updates x 30 us = 240 us of step.
  const test::FakeModel m(4, 1000, 0, 2);
  const ClusterSpec c = test::round_cluster(1, 1);
  const test::FreeComm comm;
  const test::FixedCompute base(1'000'000);
  const PythonHostComputeModel python(base, {15e-6, 30e-6}, /*gpu=*/false);
  const auto run = [&](const ComputeModel& compute) {
    ResolvedPlan p = resolve(parse_plan("dp: 1\nmicro_batch: 1\ngrad_accum: 2\n", "p.yaml"), m, c);
    partition(p, m, c, compute, comm);
    return execute(lower(m, p, c, CostModels{&compute, &comm})).makespan;
  };
  CHECK(run(python) - run(base) == (120 + 240) * kNsPerUs);
}

TEST_CASE("runtime: python without a timed Python loop warns and prices the C++ loop", "[python-host][bad-input]") {
  CHECK(parse_plan("runtime: python\n", "p.yaml").runtime == Runtime::kPython);
  CHECK(parse_plan("dp: 1\n", "p.yaml").runtime == Runtime::kLibtorch);
  CHECK_THROWS_WITH(parse_plan("runtime: cpython\n", "p.yaml"),
                    Catch::Contains("p.yaml") && Catch::Contains("runtime") && Catch::Contains("libtorch, python"));
  const auto model = models::load_model("gpt2-tiny");
  const ClusterSpec cpu = load_cluster("local-cpu");
  PlanSpec spec = parse_plan("dp: 1\n", "p.yaml");
  const Prediction cpp = predict(*model, spec, cpu, {});
  spec.runtime = Runtime::kPython;
  const Prediction py = predict(*model, spec, cpu, {});
  CHECK(py.iteration_time == cpp.iteration_time);
  bool warned = false;
  for (const auto& w : py.warnings) warned = warned || w.find("plan.runtime python") != std::string::npos;
  CHECK(warned);
  CHECK(py.plan.runtime == Runtime::kPython);
}

TEST_CASE("with a timed Python loop, runtime python prices it; a GPU pipeline says what it leaves out", "[python-host]") {
  const auto model = models::load_model("gpt2-tiny");
  // A CPU profile with the Python loop timed: slower than the C++ loop.
  PredictOptions cpu_options;
  cpu_options.profile = std::make_shared<ProfileCosts>(python_profile());
  const ClusterSpec cpu = load_cluster("local-cpu");
  PlanSpec spec = parse_plan("dp: 1\n", "p.yaml");
  const Prediction cpp = predict(*model, spec, cpu, cpu_options);
  spec.runtime = Runtime::kPython;
  const Prediction py = predict(*model, spec, cpu, cpu_options);
  CHECK(py.iteration_time > cpp.iteration_time);
  for (const auto& w : py.warnings) CHECK(w.find("plan.runtime python") == std::string::npos);
  // The same timings as a GPU's: a pipeline's host issue is not modelled.
  Profile gpu_profile = python_profile();
  gpu_profile.info["device_kind"] = "cuda";
  PredictOptions gpu_options;
  gpu_options.profile = std::make_shared<ProfileCosts>(gpu_profile);
  PlanSpec pipe = parse_plan("dp: 1\npp: 2\nruntime: python\n", "p.yaml");
  const Prediction piped = predict(*model, pipe, load_cluster("dgx-a100"), gpu_options);
  bool warned = false;
  for (const auto& w : piped.warnings) warned = warned || w.find("a GPU pipeline's host issue is not modelled") != std::string::npos;
  CHECK(warned);
}
