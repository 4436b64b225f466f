// The LibTorch twins agree with the analytic layers they are built from.
// LibTorch first: Debian's LibTorch pulls in glog, whose CHECK would
// otherwise replace Catch's (and pass silently).
#include "dtsim/models/torch_layers.hpp"
#undef CHECK
#include <catch2/catch.hpp>

#include <set>

#include "dtsim/models/models.hpp"
#include "dtsim/sim/error.hpp"
#include "test_util.hpp"

using namespace dtsim;

namespace {

sim::WorkloadShape small_shape(const sim::Model& m) {
  sim::WorkloadShape s;
  s.micro_batch = 1;
  s.seq_len = std::min<std::int64_t>(8, m.max_seq_len());
  s.act_bytes = 4;
  return s;
}

}  // namespace

TEST_CASE("every built-in's LibTorch layers own exactly the analytic parameters", "[torch]") {
  // The analytic counts equal HuggingFace's (tests/models); here each distinct
  // layer's module must own Layer::params, so the modules add up to the
  // model's total as well.
  for (const auto& name : models::builtin_names()) {
    INFO(name);
    const auto model = models::load_model(name);
    // The Megatron GPTs (1.7B to 1T) reuse GPT-2's layer kinds at sizes that
    // would need tens of GB to instantiate here; gpt2 to gpt2-xl cover the kinds.
    if (model->parameters() > 2'000'000'000) continue;
    std::set<std::string> checked;
    std::int64_t total = 0;
    for (const auto& layer : model->layers(small_shape(*model))) {
      INFO(layer.signature);
      REQUIRE_FALSE(layer.signature.empty());
      total += layer.params;
      if (!checked.insert(layer.signature).second) continue;
      const auto twin = models::make_torch_layer(layer.signature);
      CHECK(twin->parameter_count() == layer.params);
      // The optimizer steps the twin's tensors one by one (dtsim_worker's DDP).
      CHECK(static_cast<int>(twin->module().parameters().size()) == layer.param_tensors);
    }
    CHECK(total == model->parameters());
  }
}

TEST_CASE("an untied LM head owns its weight, a tied one borrows it", "[torch]") {
  // gpt2.head: ln_f's 2h, plus V*h when untied (HF lm_head has no bias).
  constexpr std::int64_t h = 8, v = 16;
  CHECK(models::make_torch_layer("gpt2.head:h=8,v=16,tied=0")->parameter_count() == 2 * h + v * h);
  auto tied = models::make_torch_layer("gpt2.head:h=8,v=16,tied=1");
  CHECK(tied->parameter_count() == 2 * h);
  CHECK(tied->make_inputs(1, 4, torch::TensorOptions().dtype(torch::kFloat)).back().numel() == v * h);
}

TEST_CASE("the tiny models' layers run forward and backward", "[torch]") {
  // The analytic layers are described at b = 1, s = 8 in fp32, the modules
  // run at b = 2, s = 8: a module's output has twice the elements of the
  // analytic Layer::output_bytes / 4 (a head's output is its scalar loss,
  // 4 bytes at any batch).
  constexpr std::int64_t kBatch = 2, kSeq = 8;
  for (const char* name : {"gpt2-tiny", "bert-tiny", "bilstm-tiny"}) {
    const auto model = models::load_model(name);
    for (const auto& layer : model->layers(small_shape(*model))) {
      INFO(name << " " << layer.signature);
      auto t = models::make_torch_layer(layer.signature);
      const auto inputs = t->make_inputs(kBatch, kSeq, torch::TensorOptions().dtype(torch::kFloat));
      auto y = t->forward(inputs);
      if (y.dim() == 0) {
        // A head: a finite cross-entropy over random labels is about ln(classes) > 0.
        CHECK(layer.output_bytes == 4);
        CHECK(y.item<double>() > 0);
        y.backward();
      } else {
        CHECK(y.size(0) == kBatch);
        if (layer.kind == sim::LayerKind::kPooler) {
          CHECK(y.dim() == 2);  // [b, h] from the first token
        } else {
          CHECK(y.dim() == 3);  // [b, s, width]
          CHECK(y.size(1) == kSeq);
        }
        CHECK(y.numel() * 4 == kBatch * layer.output_bytes);
        y.backward(torch::ones_like(y));
      }
      for (const auto& p : t->module().parameters()) {
        REQUIRE(p.grad().defined());
        CHECK(torch::isfinite(p.grad()).all().item<bool>());
      }
      // Floating inputs (activations, a tied head's borrowed embedding) get
      // gradients too, as in training.
      for (const auto& x : inputs) {
        if (!x.is_floating_point()) continue;
        REQUIRE(x.grad().defined());
        CHECK(torch::isfinite(x.grad()).all().item<bool>());
      }
      if (layer.borrowed_params > 0) {
        REQUIRE(inputs.size() == 3);
        CHECK(inputs[2].numel() == layer.borrowed_params);
      }
    }
  }
}

TEST_CASE("a bad layer signature is refused with one line naming it", "[torch][bad-input]") {
  using dtsim::test::error_of;
  CHECK(error_of([] { models::make_torch_layer("gpt3.block:h=8"); }).find("unknown kind 'gpt3.block'") != std::string::npos);
  // f= and drop= are both missing; either may be named first.
  CHECK(error_of([] { models::make_torch_layer("gpt2.block:h=8,a=2"); }).find("layer signature 'gpt2.block:h=8,a=2': missing '") == 0);
  CHECK(error_of([] { models::make_torch_layer("gpt2.block"); }).find("expected 'kind:key=value") != std::string::npos);
  CHECK(error_of([] { models::make_torch_layer("gpt2.block:h=x"); }).find("'h=x' is not key=integer") != std::string::npos);
  CHECK(error_of([] { models::make_torch_layer("gpt2.block:h=10,a=3,f=40,drop=1"); }).find("h must be a multiple of a") != std::string::npos);
  CHECK(error_of([] { models::make_torch_layer("lstm.layer:in=8,hs=4,dirs=3"); }).find("dirs must be 1 or 2") != std::string::npos);
  CHECK(error_of([] { models::make_torch_layer("gpt2.head:h=8,v=16,tied=2"); }).find("tied must be 0 or 1") != std::string::npos);
}

TEST_CASE("tensor-parallel shares own the analytic per-rank parameters", "[torch][tp]") {
  // With tp = 2 the simulator's layers carry one rank's parameters
  // (Megatron-LM: heads and MLP columns split, embeddings V/2 rows each), and
  // make_torch_layer on a tp=2 signature builds rank 0's share.
  for (const char* name : {"gpt2-tiny", "bert-tiny"}) {
    const auto model = models::load_model(name);
    auto shape = small_shape(*model);
    shape.tp = 2;
    for (const auto& layer : model->layers(shape)) {
      INFO(name << " " << layer.signature);
      CHECK(models::make_torch_layer(layer.signature)->parameter_count() == layer.params);
    }
  }
  // An odd vocabulary: ceil(17 / 2) = 9 rows on rank 0, the other 8 on rank 1
  // (plus wpe's p h = 4 x 8 on both).
  models::TensorParallel tp;
  tp.size = 2;
  tp.enter = tp.exit = [](const torch::Tensor& x) { return x; };
  tp.max = [](torch::Tensor&) {};
  const std::string embed = "gpt2.embed:h=8,v=17,p=4,drop=0,tp=2";
  CHECK(models::make_torch_layer(embed, tp)->parameter_count() == 9 * 8 + 4 * 8);
  tp.rank = 1;
  CHECK(models::make_torch_layer(embed, tp)->parameter_count() == 8 * 8 + 4 * 8);
  CHECK(test::error_of([&] { models::make_torch_layer("gpt2.embed:h=8,v=17,p=4,drop=0,tp=4", tp); }).find("tp=4 but the tensor-parallel group has 2") !=
        std::string::npos);
}

TEST_CASE("the shared optimizer steps as Adam and SGD are defined", "[torch]") {
  // Adam's first step (Kingma & Ba 2015, Algorithm 1): m = (1 - b1) g,
  // v = (1 - b2) g^2, and with the bias corrections m^ = g, v^ = g^2, so each
  // weight moves by lr x g / (|g| + eps) = lr x sign(g) (eps is negligible).
  auto p = torch::tensor({1.0f, 2.0f, -3.0f});
  const auto g = torch::tensor({0.5f, -4.0f, 0.01f});
  models::AdamConfig c;
  c.lr = 0.1;
  models::AdamState s;
  models::adam_update(p, g, s, 1, c);
  CHECK(p[0].item<float>() == Approx(0.9f));
  CHECK(p[1].item<float>() == Approx(2.1f));
  CHECK(p[2].item<float>() == Approx(-3.1f).epsilon(1e-5));
  CHECK(s.m[1].item<float>() == Approx(-0.4f));           // (1 - 0.9) x -4
  CHECK(s.v[1].item<float>() == Approx(0.016f));          // (1 - 0.999) x 16
  // AdamW's decoupled decay first scales the weight by 1 - lr x wd.
  auto q = torch::tensor({2.0f});
  models::AdamState sq;
  c.weight_decay = 0.5;
  models::adam_update(q, torch::tensor({1.0f}), sq, 1, c);
  CHECK(q[0].item<float>() == Approx(2.0f * 0.95f - 0.1f));
  // Plain SGD: p - lr g, no state.
  auto r = torch::tensor({1.0f});
  models::AdamState sr;
  c.sgd = true;
  models::adam_update(r, torch::tensor({2.0f}), sr, 1, c);
  CHECK(r[0].item<float>() == Approx(0.8f));
  CHECK_FALSE(sr.m.defined());
}

TEST_CASE("gradient buckets copy in order and back divided (Note [Gradient buckets])", "[torch]") {
  // Parameters of 2, 1 and 3 elements; the middle one has no gradient.
  std::vector<torch::Tensor> params{torch::zeros({2}).requires_grad_(true), torch::zeros({1}).requires_grad_(true),
                                    torch::zeros({3}).requires_grad_(true)};
  params[0].mutable_grad() = torch::tensor({1.0f, 2.0f});
  params[2].mutable_grad() = torch::tensor({3.0f, 4.0f, 5.0f});
  auto flat = torch::full({6}, -1.0f);
  models::flatten_grads(params, flat, /*free_grads=*/false);
  // In order, a missing gradient as zeros: 1 2 | 0 | 3 4 5.
  const std::vector<float> want{1, 2, 0, 3, 4, 5};
  for (int i = 0; i < 6; ++i) CHECK(flat[i].item<float>() == want[static_cast<std::size_t>(i)]);
  // The all-reduce of 2 ranks doubles the sums (say, 2 4 0 6 8 10); back in,
  // divided by 2: each rank's gradient again. The missing one stays missing.
  models::unflatten_grads(params, flat * 2, 2.0);
  CHECK(params[0].grad()[1].item<float>() == 2.0f);
  CHECK(params[2].grad()[2].item<float>() == 5.0f);
  CHECK_FALSE(params[1].grad().defined());
  // ZeRO-2 drops each gradient once copied.
  models::flatten_grads(params, flat, /*free_grads=*/true);
  CHECK_FALSE(params[0].grad().defined());
  CHECK_FALSE(params[2].grad().defined());
  CHECK(flat[5].item<float>() == 5.0f);
}

TEST_CASE("16-bit parameters step through an fp32 master (Note [Mixed-precision step])", "[torch]") {
  // Adam's first step moves each weight by lr x sign(g) (see above), here on
  // the fp32 master; the bf16 parameter is the master rounded.
  auto p = torch::tensor({1.0f, 2.0f, -3.0f}).to(torch::kBFloat16);
  const auto g = torch::tensor({0.5f, -4.0f, 0.01f}).to(torch::kBFloat16);
  models::AdamConfig c;
  c.lr = 0.1;
  models::AdamState s;
  models::adam_update(p, g, s, 1, c);
  REQUIRE(s.master.defined());
  CHECK(s.master.scalar_type() == torch::kFloat);
  CHECK(s.m.scalar_type() == torch::kFloat);
  CHECK(s.master[0].item<float>() == Approx(0.9f));
  CHECK(s.master[1].item<float>() == Approx(2.1f));
  CHECK(s.master[2].item<float>() == Approx(-3.1f).epsilon(1e-5));
  CHECK(torch::equal(p, s.master.to(torch::kBFloat16)));
  // bf16 keeps 8 bits of mantissa: 0.9 is stored as 0.8984375, but the master
  // keeps stepping from 0.9, so a second step lands at 0.8 on the master.
  CHECK(p[0].item<float>() == 0.8984375f);
  // A loss scale of 1024 on the gradient gives the same step once divided out.
  auto q = torch::tensor({1.0f, 2.0f, -3.0f}).to(torch::kHalf);
  models::AdamState sq;
  c.grad_scale = 1024;
  models::adam_update(q, (torch::tensor({0.5f, -4.0f, 0.01f}) * 1024).to(torch::kHalf), sq, 1, c);
  CHECK(sq.master[1].item<float>() == Approx(2.1f));
  CHECK(sq.m[1].item<float>() == Approx(-0.4f));  // (1 - 0.9) x -4: the unscaled gradient
}

TEST_CASE("the optimizer steps a tensor longer than one chunk whole (Note [Mixed-precision step])", "[torch]") {
  // kAdamChunk + 3 elements: the last chunk holds 3. Every element moves by
  // lr x sign(g) on the first step.
  const std::int64_t n = models::kAdamChunk + 3;
  auto p = torch::zeros({n});
  const auto g = torch::ones({n});
  models::AdamConfig c;
  c.lr = 0.5;
  models::AdamState s;
  models::adam_update(p, g, s, 1, c);
  CHECK(p[0].item<float>() == Approx(-0.5f));
  CHECK(p[models::kAdamChunk - 1].item<float>() == Approx(-0.5f));
  CHECK(p[n - 1].item<float>() == Approx(-0.5f));
  CHECK(s.m[n - 1].item<float>() == Approx(0.1f));  // (1 - 0.9) x 1
}

TEST_CASE("selective recompute gives the gradients of the plain attention, dropout included (Note [Recompute])", "[torch]") {
  // A GPT-2 block with dropout on: the recomputed core must draw the same
  // masks, or its gradients differ from the plain block's.
  for (const std::string sig : {"gpt2.block:h=32,a=4,f=128,drop=1", "bert.layer:h=32,a=4,f=128,drop=1"}) {
    INFO(sig);
    std::vector<torch::Tensor> grads[2];
    for (int recompute = 0; recompute < 2; ++recompute) {
      torch::manual_seed(11);
      auto layer = models::make_torch_layer(sig);
      layer->module().train();
      layer->set_recompute_attention(recompute == 1);
      torch::manual_seed(12);
      auto in = layer->make_inputs(2, 16, torch::TensorOptions());
      torch::manual_seed(13);  // the dropout masks
      auto y = layer->forward(in);
      y.backward(torch::ones_like(y));
      grads[recompute].push_back(in[0].grad());
      for (const auto& prm : layer->module().parameters()) grads[recompute].push_back(prm.grad());
    }
    REQUIRE(grads[0].size() == grads[1].size());
    for (std::size_t i = 0; i < grads[0].size(); ++i) {
      INFO("gradient " << i);
      CHECK(torch::allclose(grads[0][i], grads[1][i], 1e-5, 1e-6));
    }
    // Dropout was on: without the restored random state the gradients would differ.
    CHECK(grads[0][0].abs().sum().item<double>() > 0);
  }
}

TEST_CASE("a device's random state is read and restored (Note [Recompute])", "[torch]") {
  const torch::Device cpu(torch::kCPU);
  torch::manual_seed(5);
  const auto state = models::rng_state(cpu);
  const auto a = torch::rand({4});
  models::set_rng_state(cpu, state);
  const auto b = torch::rand({4});
  CHECK(torch::equal(a, b));
  const auto c = torch::rand({4});
  CHECK_FALSE(torch::equal(b, c));
}
