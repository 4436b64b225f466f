// SyncBatchNorm (plan sync_batchnorm; Note [SyncBatchNorm] in
// models/src/convnet.cpp): each batch norm layer all-gathers 2C + 1 fp32 a
// rank forward and all-reduces 2C fp32 backward over the data-parallel
// group, serial with its kernels; resolve refuses it for a model without
// batch norm, and it changes nothing where dp = 1.
#include <catch2/catch.hpp>

#include "dtsim/models/models.hpp"
#include "dtsim/sim/error.hpp"
#include "fake_model.hpp"
#include "test_util.hpp"

using namespace dtsim;
using namespace dtsim::sim;
using dtsim::test::error_of;
using dtsim::test::FixedComm;

namespace {

// torchvision's VGG configuration "A": eight convolutions of these widths,
// each followed by its batch norm in vgg11_bn.
constexpr std::int64_t kVggChannels[] = {64, 128, 256, 256, 512, 512, 512, 512};

struct Counted {
  int forward = 0, backward = 0;
  Bytes forward_bytes = 0, backward_bytes = 0;
};

Counted sync_tasks(const TaskGraph& g) {
  Counted c;
  for (const Task& t : g.tasks) {
    if (t.name.find("sync bn") == std::string::npos) continue;
    CHECK(t.axis == Axis::kDp);
    if (t.name.find("sync bn fwd") != std::string::npos) {
      CHECK(t.op == CollectiveOp::kAllGather);
      ++c.forward;
      c.forward_bytes += t.bytes;
    } else {
      CHECK(t.op == CollectiveOp::kAllReduce);
      ++c.backward;
      c.backward_bytes += t.bytes;
    }
  }
  return c;
}

}  // namespace

TEST_CASE("SyncBatchNorm: a batch norm layer's collectives, by formula", "[syncbn]") {
  const auto m = models::load_model("vgg11-bn");
  WorkloadShape s;
  s.micro_batch = 2;
  s.seq_len = 1;
  s.act_bytes = 4;
  s.sync_batchnorm = true;
  s.dp = 4;
  const auto layers = m->layers(s);
  // conv.0: 64 channels; the gather's output is dp (2C + 1) fp32 = 4 x 129 x 4 B,
  // the backward's all-reduce 2C fp32 = 512 B.
  REQUIRE(layers[0].dp_forward.size() == 1);
  CHECK(layers[0].dp_forward[0].op == CollectiveOp::kAllGather);
  CHECK(layers[0].dp_forward[0].bytes == 4 * 129 * 4);
  CHECK(layers[0].dp_forward[0].axis == Axis::kDp);
  REQUIRE(layers[0].dp_backward.size() == 1);
  CHECK(layers[0].dp_backward[0].op == CollectiveOp::kAllReduce);
  CHECK(layers[0].dp_backward[0].bytes == 512);
  // The classifier has no batch norm; nor does anything without the knob.
  CHECK(layers.back().dp_forward.empty());
  s.sync_batchnorm = false;
  CHECK(m->layers(s)[0].dp_forward.empty());
  CHECK(models::load_model("vgg11")->has_batch_norm() == false);
  CHECK(m->has_batch_norm());
}

TEST_CASE("SyncBatchNorm: one gather and one all-reduce per batch norm and micro-batch, on the iteration's path", "[syncbn]") {
  const auto m = models::load_model("vgg11-bn");
  const ClusterSpec c = test::round_cluster(1, 2);
  const FixedComm comm(10'000);  // 10 us a collective
  const std::string base = "dp: 2\nmicro_batch: 2\ngrad_accum: 2\nseq_len: 1\nprecision: fp32\n";
  const auto plain = test::run_plan(*m, base, c, comm, 1000);
  const auto synced = test::run_plan(*m, base + "sync_batchnorm: true\n", c, comm, 1000);
  CHECK(sync_tasks(plain.graph).forward == 0);
  const Counted n = sync_tasks(synced.graph);
  // 8 batch norms x 2 micro-batches, each pass.
  CHECK(n.forward == 16);
  CHECK(n.backward == 16);
  std::int64_t channels = 0;
  for (std::int64_t ch : kVggChannels) channels += ch;  // 2,752
  CHECK(n.forward_bytes == 2 * (2 * 4 * (2 * channels + 8)));  // 2 micro-batches x dp 2 x (2C + 1) x 4 B, summed over layers
  CHECK(n.backward_bytes == 2 * (4 * 2 * channels));
  // They run on the compute stream between the layers' kernels: each of the
  // 32 adds its 10 us to the critical path, the gradient all-reduce after
  // the last backward moving with them.
  CHECK(synced.exec.makespan - plain.exec.makespan == 32 * 10'000);
  CHECK(synced.plan.sync_batchnorm);
}

TEST_CASE("SyncBatchNorm: nothing to sync on one rank; refused without batch norm", "[syncbn]") {
  const auto m = models::load_model("vgg11-bn");
  const FixedComm comm(10'000);
  const auto one = test::run_plan(*m, "dp: 1\nmicro_batch: 2\nseq_len: 1\nsync_batchnorm: true\n", test::round_cluster(1, 1), comm, 1000);
  CHECK(sync_tasks(one.graph).forward == 0);
  const auto plain = models::load_model("vgg11");
  const std::string why = error_of([&] {
    resolve(parse_plan("sync_batchnorm: true\nmicro_batch: 2\n", "p.yaml"), *plain, test::round_cluster(1, 2));
  });
  CHECK_THAT(why, Catch::Contains("sync_batchnorm") && Catch::Contains("vgg11 has no batch norm layer") &&
                      Catch::Contains("valid: false"));
}
