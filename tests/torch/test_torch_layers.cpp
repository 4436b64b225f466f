// The LibTorch twins agree with the analytic layers they are built from.
// LibTorch first: Debian's LibTorch pulls in glog, whose CHECK would
// otherwise replace Catch's (and pass silently).
#include "dtsim/models/torch_layers.hpp"
#include <torch/version.h>
#undef CHECK
#include <catch2/catch.hpp>

#include <algorithm>
#include <barrier>
#include <condition_variable>
#include <deque>
#include <map>
#include <mutex>
#include <set>
#include <thread>

#include "dtsim/models/models.hpp"
#include "dtsim/sim/config_io.hpp"
#include "dtsim/sim/error.hpp"
#include "dtsim/sim/predict.hpp"
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

/// A built-in with `sets` (model.KEY=VALUE): each of its layers' twins owns
/// the analytic parameters (two sequences of 16 tokens).
void check_twins_own_params(const std::string& name, const std::vector<std::string>& sets) {
  std::vector<sim::Override> overrides;
  for (const auto& o : sets) overrides.push_back(sim::parse_override(o));
  const auto model = models::load_model(name, overrides);
  sim::WorkloadShape w;
  w.micro_batch = 2;
  w.seq_len = 16;
  for (const auto& l : model->layers(w)) {
    INFO(name << ": " << l.signature);
    CHECK(models::make_torch_layer(l.signature)->parameter_count() == l.params);
  }
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
  for (const char* name : {"gpt2-tiny", "bert-tiny", "bilstm-tiny", "llama-tiny", "gemma-tiny", "moe-tiny", "deepseek-tiny", "deepseek-v3.2-tiny", "deepseek-v4-tiny"}) {
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
  for (const char* name : {"gpt2-tiny", "bert-tiny", "llama-tiny"}) {
    const auto model = models::load_model(name);
    auto shape = small_shape(*model);
    shape.tp = 2;
    for (const auto& layer : model->layers(shape)) {
      INFO(name << " " << layer.signature);
      auto share = models::make_torch_layer(layer.signature);
      CHECK(share->parameter_count() == layer.params);
      // Each share owns storage for its own elements only, as Megatron's
      // layers allocate them: a parameter that is a view of the unsplit
      // weight keeps the whole of it allocated (4 bytes an element, fp32).
      std::int64_t stored = 0;
      for (const auto& p : share->module().parameters()) stored += static_cast<std::int64_t>(p.storage().nbytes());
      CHECK(stored == 4 * layer.params);
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
  // Momentum SGD as torch.optim.SGD (momentum 0.9, dampening 0): the first
  // buffer is the gradient, then 0.9 buf + g; the step is -lr buf. From 1
  // with g = 2 then g = 1 at lr 0.1: 1 - 0.2 = 0.8, buf 0.9 x 2 + 1 = 2.8,
  // 0.8 - 0.28 = 0.52. The buffer is fp32 and spans the (chunked) tensor.
  auto w = torch::tensor({1.0f, -1.0f});
  models::AdamState sw;
  c.momentum = 0.9;
  models::adam_update(w, torch::tensor({2.0f, 0.0f}), sw, 1, c);
  CHECK(w[0].item<float>() == Approx(0.8f));
  REQUIRE(sw.m.defined());
  CHECK(sw.m[0].item<float>() == Approx(2.0f));
  models::adam_update(w, torch::tensor({1.0f, 0.0f}), sw, 2, c);
  CHECK(sw.m[0].item<float>() == Approx(2.8f));
  CHECK(w[0].item<float>() == Approx(0.52f));
  CHECK(w[1].item<float>() == -1.0f);
  CHECK_FALSE(sw.v.defined());
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
  for (const std::string sig : {"gpt2.block:h=32,a=4,f=128,drop=1", "bert.layer:h=32,a=4,f=128,drop=1",
                                "llama.block:h=32,a=4,kv=2,d=8,f=64,qkvb=1,ob=0,mb=0,qkn=1"}) {
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

// ---- the Llama family --------------------------------------------------------------

namespace {

/// llama-tiny's block: h 128, 4 heads of 32, 2 key-value heads, f 352, no
/// biases, no qk-norm (models/src/zoo.cpp).
const std::string kTinyBlock = "llama.block:h=128,a=4,kv=2,d=32,f=352,qkvb=0,ob=0,mb=0,qkn=0";

std::int64_t count(const std::string& sig) { return models::make_torch_layer(sig)->parameter_count(); }

models::TensorParallel local_tp(int rank, int size) {
  models::TensorParallel tp;
  tp.rank = rank;
  tp.size = size;
  tp.enter = tp.exit = [](const torch::Tensor& x) { return x; };
  tp.max = [](torch::Tensor&) {};
  return tp;
}

}  // namespace

TEST_CASE("the Llama twins own the hand-derived parameters", "[torch][llama]") {
  // HF LlamaDecoderLayer: q, k, v, o = H A D + 2 H KV D + A D H, the SwiGLU
  // MLP 3 H F, two RMSNorms 2 H; for llama-tiny (H 128, A 4, KV 2, D 32,
  // F 352): 16,384 + 16,384 + 16,384 + 135,168 + 256 = 184,576.
  CHECK(count(kTinyBlock) == 184'576);
  CHECK(count("llama.embed:h=128,v=1024") == 131'072);            // V H
  CHECK(count("llama.head:h=128,v=1024,tied=0") == 128 + 131'072);  // norm H + lm_head V H
  // llama-tiny: embed + 2 blocks + head = 631,424.
  CHECK(count("llama.embed:h=128,v=1024") + 2 * count(kTinyBlock) + count("llama.head:h=128,v=1024,tied=0") == 631'424);
  // The built-in's layers are these (its counts are the analytic ones: the first test case).
  const auto tiny = models::load_model("llama-tiny");
  CHECK(tiny->parameters() == 631'424);
  sim::WorkloadShape shape;
  shape.seq_len = 32;
  const auto layers = tiny->layers(shape);
  REQUIRE(layers.size() == 4);
  CHECK(layers[1].signature == kTinyBlock);
  // Tied: the norm only; lm_head is embed_tokens' weight, an input.
  auto tied = models::make_torch_layer("llama.head:h=128,v=1024,tied=1");
  CHECK(tied->parameter_count() == 128);
  CHECK(tied->make_inputs(1, 4, torch::TensorOptions()).back().numel() == 1024 * 128);
  // Qwen2: q, k, v biases (A D + 2 KV D = 128 + 128), none on o_proj.
  CHECK(count("llama.block:h=128,a=4,kv=2,d=32,f=352,qkvb=1,ob=0,mb=0,qkn=0") == 184'576 + 256);
  // Qwen3: q_norm and k_norm of D each.
  CHECK(count("llama.block:h=128,a=4,kv=2,d=32,f=352,qkvb=0,ob=0,mb=0,qkn=1") == 184'576 + 64);
  // o_proj's bias H, the MLP's 2 F + H.
  CHECK(count("llama.block:h=128,a=4,kv=2,d=32,f=352,qkvb=0,ob=1,mb=1,qkn=0") == 184'576 + 128 + 2 * 352 + 128);
  // Tensors the optimizer steps: 2 norms + 7 weights.
  CHECK(models::make_torch_layer(kTinyBlock)->module().parameters().size() == 9);
}

TEST_CASE("the Llama twins' tensor-parallel shares own the per-rank parameters", "[torch][llama][tp]") {
  // tp 2: 2 of 4 query heads and 1 of 2 key-value heads (q, k, v, o: 8,192
  // each), F / 2 = 176 MLP columns (3 x 128 x 176 = 67,584), norms whole
  // (256): 92,416 on each rank.
  for (int rank = 0; rank < 2; ++rank) {
    INFO("rank " << rank);
    const auto tp = local_tp(rank, 2);
    CHECK(models::make_torch_layer(kTinyBlock + ",tp=2", tp)->parameter_count() == 92'416);
    CHECK(models::make_torch_layer("llama.embed:h=128,v=1024,tp=2", tp)->parameter_count() == 512 * 128);
    CHECK(models::make_torch_layer("llama.head:h=128,v=1024,tied=0,tp=2", tp)->parameter_count() == 128 + 512 * 128);
    CHECK(models::make_torch_layer("llama.head:h=128,v=1024,tied=1,tp=2", tp)->parameter_count() == 128);
    // Biases: q, k, v's split with their columns (128 of 256), o_proj's
    // whole (128, added once after the sum), gate and up's split (2 x 176),
    // down_proj's whole (128); qk-norms replicated (2 x 32).
    CHECK(models::make_torch_layer("llama.block:h=128,a=4,kv=2,d=32,f=352,qkvb=1,ob=1,mb=1,qkn=1,tp=2", tp)->parameter_count() ==
          92'416 + 128 + 128 + 2 * 176 + 128 + 64);
  }
  // Each rank needs whole key-value heads: tp 4 does not divide kv 2.
  CHECK(test::error_of([] { models::make_torch_layer(kTinyBlock + ",tp=4", local_tp(0, 4)); }).find("multiples of tp 4") != std::string::npos);
}

TEST_CASE("the vocab-parallel head computes the unsplit head's loss and gradients (Note [Vocab-parallel cross-entropy])", "[torch][llama][tp]") {
  // Two tp ranks, a thread each, with an in-process all-reduce (sum for g,
  // maximum for the shift): each rank's loss must be the unsplit head's, its
  // lm_head rows' gradient the unsplit gradient's rows, and the input's and
  // the norm's gradients summed over the ranks the unsplit ones (f's
  // backward all-reduce, done here by the test). V = 10 at tp 2: 5 rows a
  // rank; labels on both sides.
  const std::string sig = "llama.head:h=16,v=10,tied=0";
  torch::manual_seed(1);
  auto whole = models::make_torch_layer(sig);
  auto in = whole->make_inputs(2, 6, torch::TensorOptions());
  in[1] = torch::tensor({0, 9, 4, 5, 1, 8, 7, 2, 3, 6, 5, 4}, torch::kLong).view({2, 6});
  const auto x = in[0].detach().clone();
  in[0] = x.clone().requires_grad_(true);
  const auto want = whole->forward(in);
  want.backward();
  struct Bus {
    std::mutex mu;
    std::condition_variable cv;
    std::map<int, std::vector<torch::Tensor>> posted;  // by call number
  } bus;
  auto reduce = [&bus](int& calls, const torch::Tensor& t, bool max) {
    const int k = calls++;
    std::unique_lock<std::mutex> lock(bus.mu);
    bus.posted[k].push_back(t.clone());
    bus.cv.notify_all();
    bus.cv.wait(lock, [&] { return bus.posted[k].size() == 2; });
    const auto& both = bus.posted[k];
    return max ? torch::maximum(both[0], both[1]) : both[0] + both[1];
  };
  std::vector<std::unique_ptr<models::TorchLayer>> shares;
  std::vector<int> calls(2, 0);
  for (int r = 0; r < 2; ++r) {
    auto tp = local_tp(r, 2);
    tp.exit = [&, r](const torch::Tensor& t) { return reduce(calls[r], t, false); };
    tp.max = [&, r](torch::Tensor& t) { t.copy_(reduce(calls[r], t, true)); };
    torch::manual_seed(1);
    shares.push_back(models::make_torch_layer(sig + ",tp=2", tp));
  }
  std::vector<torch::Tensor> losses(2), xs(2);
  std::vector<std::thread> threads;
  for (int r = 0; r < 2; ++r) {
    threads.emplace_back([&, r] {
      xs[r] = x.clone().requires_grad_(true);
      losses[r] = shares[r]->forward({xs[r], in[1]});
      losses[r].backward();
    });
  }
  for (auto& t : threads) t.join();
  const auto named = whole->module().named_parameters();
  for (int r = 0; r < 2; ++r) {
    INFO("rank " << r);
    CHECK(losses[r].item<double>() == Approx(want.item<double>()).epsilon(1e-6));
    const auto mine = shares[r]->module().named_parameters();
    for (const auto& p : mine) {
      INFO(p.key());
      if (p.value().size(0) == 5) CHECK(torch::allclose(p.value().grad(), named[p.key()].grad().narrow(0, 5 * r, 5), 1e-5, 1e-7));
    }
  }
  CHECK(torch::allclose(xs[0].grad() + xs[1].grad(), in[0].grad(), 1e-5, 1e-7));
  for (const auto& p : named) {
    if (p.value().dim() != 1) continue;  // the norm's weight: replicated, its gradient summed
    INFO(p.key());
    const auto sum = shares[0]->module().named_parameters()[p.key()].grad() + shares[1]->module().named_parameters()[p.key()].grad();
    CHECK(torch::allclose(sum, p.value().grad(), 1e-5, 1e-7));
  }
}

TEST_CASE("a Llama block with attention dropout is refused by its twin (Note [Attention dropout])", "[torch][llama]") {
  CHECK_THROWS_WITH(models::make_torch_layer("llama.block:h=32,a=4,kv=2,d=8,f=64,qkvb=0,ob=0,mb=0,qkn=0,adrop=100"),
                    Catch::Contains("attention dropout is not run by the LibTorch twin"));
}

TEST_CASE("a Llama block is causal, trains, and refuses what it cannot run", "[torch][llama]") {
  torch::manual_seed(3);
  auto layer = models::make_torch_layer("llama.block:h=32,a=4,kv=2,d=8,f=64,qkvb=0,ob=0,mb=0,qkn=1");
  auto in = layer->make_inputs(2, 8, torch::TensorOptions());
  const auto y = layer->forward(in);
  CHECK(y.sizes() == in[0].sizes());
  // Changing the last token changes no earlier output.
  auto later = in[0].detach().clone();
  later.select(1, 7).add_(1.0);
  const auto z = layer->forward({later});
  CHECK(torch::allclose(y.narrow(1, 0, 7), z.narrow(1, 0, 7)));
  CHECK_FALSE(torch::allclose(y.narrow(1, 7, 1), z.narrow(1, 7, 1)));
  y.backward(torch::ones_like(y));
  for (const auto& p : layer->module().parameters()) {
    REQUIRE(p.grad().defined());
    CHECK(torch::isfinite(p.grad()).all().item<bool>());
  }
  // Mistral's sliding window of 2 (sw=2): position i sees tokens i - 1 and
  // i, so changing token 0 changes outputs 0 and 1 only.
  auto window = models::make_torch_layer("llama.block:h=32,a=4,kv=2,d=8,f=64,qkvb=0,ob=0,mb=0,qkn=0,sw=2");
  const auto w0 = window->forward(in);
  auto first = in[0].detach().clone();
  first.select(1, 0).add_(1.0);
  const auto w1 = window->forward({first});
  CHECK_FALSE(torch::allclose(w0.narrow(1, 1, 1), w1.narrow(1, 1, 1)));
  CHECK(torch::allclose(w0.narrow(1, 2, 6), w1.narrow(1, 2, 6)));
  // A head's loss over a 64-token vocabulary starts near ln 64.
  auto head = models::make_torch_layer("llama.head:h=32,v=64,tied=0");
  CHECK(head->forward(head->make_inputs(2, 8, torch::TensorOptions())).item<double>() == Approx(std::log(64.0)).epsilon(0.1));
  CHECK(test::error_of([] { models::make_torch_layer("llama.block:h=32,a=3,kv=2,d=8,f=64,qkvb=0,ob=0,mb=0,qkn=0"); })
            .find("a must be a multiple of kv") != std::string::npos);
  CHECK(test::error_of([] { models::make_torch_layer("llama.block:h=32,a=4,kv=2,d=8,f=64,qkvb=2,ob=0,mb=0,qkn=0"); })
            .find("qkvb must be 0 or 1") != std::string::npos);
#if TORCH_VERSION_MAJOR < 2
  // LibTorch 1.13 has no scaled_dot_product_attention.
  CHECK(test::error_of([] { models::make_torch_layer("llama.block:h=32,a=4,kv=2,d=8,f=64,qkvb=0,ob=0,mb=0,qkn=0,flash=1"); })
            .find("layer signature 'llama.block:h=32,a=4,kv=2,d=8,f=64,qkvb=0,ob=0,mb=0,qkn=0,flash=1': flash=1 needs at::scaled_dot_product_attention") == 0);
#endif
  // Context parallelism is built for the GPT-2 and Llama families only.
  models::ContextParallel cp;
  cp.size = 2;
  cp.gather = [](const torch::Tensor& x, std::int64_t) { return x; };
  CHECK(test::error_of([&] { models::make_torch_layer("bert.layer:h=8,a=2,f=32,drop=0,cp=2", local_tp(0, 1), cp); })
            .find("context parallelism is built for the GPT-2 and Llama families only") != std::string::npos);
  CHECK(test::error_of([&] { models::make_torch_layer("llama.block:h=32,a=4,kv=2,d=8,f=64,qkvb=0,ob=0,mb=0,qkn=0,cp=4", local_tp(0, 1), cp); })
            .find("cp=4 but the context-parallel group has 2 ranks") != std::string::npos);
}

TEST_CASE("Gemma's twins: its norm, sandwich, GeGLU, scaled embedding and capped logits as HF writes them (Note [Gemma])", "[torch][llama][gemma]") {
  torch::manual_seed(5);
  torch::NoGradGuard no_grad;
  // One block of h 32, 4 heads of 8, 2 KV heads, f 64, Gemma's norms and GeGLU.
  auto layer = models::make_torch_layer("llama.block:h=32,a=4,kv=2,d=8,f=64,qkvb=0,ob=0,mb=0,qkn=1,gn=1,gelu=1");
  auto& m = layer->module();
  std::map<std::string, torch::Tensor> p;
  for (const auto& item : m.named_parameters()) p[item.key()] = item.value();
  // Four norms of h and the q/k norms, each starting at 0 (it scales by 1 + weight).
  for (const char* n : {"input_layernorm.weight", "post_attention_layernorm.weight", "pre_feedforward_layernorm.weight",
                        "post_feedforward_layernorm.weight", "q_norm.weight", "k_norm.weight"}) {
    INFO(n);
    REQUIRE(p.count(n) == 1);
    CHECK(torch::equal(p[n], torch::zeros_like(p[n])));
  }
  for (auto& [name, w] : p) {
    if (name.find("norm") != std::string::npos) w.uniform_(-0.5, 0.5);
  }
  // Gemma2DecoderLayer by hand from the same weights: x + post_attn(attention(input(x))), then
  // y + post_ffn(down(gelu_tanh(gate(z)) * up(z))) with z = pre_ffn(y); the attention taken from
  // the block itself (its output projection undone is not needed: compare the MLP half).
  auto norm = [](const torch::Tensor& x, const torch::Tensor& w) {
    return x * torch::rsqrt(x.pow(2).mean(-1, true) + 1e-5) * (1 + w);
  };
  const auto x = torch::randn({2, 8, 32});
  const auto out = layer->forward({x});
  // With the attention's output projection zeroed, attention adds post_attn(0) = 0.
  p["o_proj.weight"].zero_();
  const auto y = x;
  const auto z = norm(y, p["pre_feedforward_layernorm.weight"]);
  const auto mlp = torch::matmul(torch::gelu(torch::matmul(z, p["gate_proj.weight"].t()), "tanh") * torch::matmul(z, p["up_proj.weight"].t()),
                                 p["down_proj.weight"].t());
  const auto want = y + norm(mlp, p["post_feedforward_layernorm.weight"]);
  CHECK(torch::allclose(layer->forward({x}), want, 1e-5, 1e-5));
  CHECK_FALSE(torch::allclose(out, want, 1e-5, 1e-5));  // the attention did add something before
  // The embedding times sqrt(h) (es=1).
  auto emb = models::make_torch_layer("llama.embed:h=16,v=64,es=1");
  const auto ids = emb->make_inputs(2, 8, torch::TensorOptions());
  const auto table = emb->module().named_parameters()["embed_tokens.weight"];
  CHECK(torch::allclose(emb->forward(ids), table.index_select(0, ids[0].view({-1})).view({2, 8, 16}) * 4.0));
  // Gemma 2's final soft cap (fsc=30): the loss of 30 tanh(logits / 30), the
  // norm Gemma's, the head tied (its weight an input).
  auto head = models::make_torch_layer("llama.head:h=16,v=64,tied=1,gn=1,fsc=30");
  auto in = head->make_inputs(2, 8, torch::TensorOptions());
  in[1] = in[1].clamp(0, 63);
  const auto logits = torch::matmul(norm(in[0], torch::zeros({16})), in[2].t());
  const auto capped = torch::tanh(logits / 30) * 30;
  const auto ce = torch::nn::functional::cross_entropy(capped.view({-1, 64}), in[1].view({-1}));
  CHECK(head->forward(in).item<double>() == Approx(ce.item<double>()).epsilon(1e-5));
}

TEST_CASE("Granite's twins: the embeddings, each residual's input and the logits scaled as HF writes them (Note [Granite])", "[torch][llama][granite]") {
  torch::manual_seed(11);
  torch::NoGradGuard no_grad;
  // GraniteDecoderLayer: y = x + 0.22 attn(x), then y + 0.22 mlp(z) with z =
  // post_attention_layernorm(y). With o_proj zeroed the attention adds 0, so
  // the block is x + 0.22 down(silu(gate(z)) * up(z)), z = norm(x).
  auto layer = models::make_torch_layer("llama.block:h=32,a=4,kv=2,d=8,f=64,qkvb=0,ob=0,mb=0,qkn=0,rm=220000");
  std::map<std::string, torch::Tensor> p;
  for (const auto& item : layer->module().named_parameters()) p[item.key()] = item.value();
  const auto x = torch::randn({2, 8, 32});
  const auto out = layer->forward({x});
  p["o_proj.weight"].zero_();
  const auto z = x * torch::rsqrt(x.pow(2).mean(-1, true) + 1e-5) * p["post_attention_layernorm.weight"];
  const auto mlp = torch::matmul(torch::silu(torch::matmul(z, p["gate_proj.weight"].t())) * torch::matmul(z, p["up_proj.weight"].t()),
                                 p["down_proj.weight"].t());
  CHECK(torch::allclose(layer->forward({x}), x + 0.22 * mlp, 1e-5, 1e-5));
  CHECK_FALSE(torch::allclose(out, x + 0.22 * mlp, 1e-5, 1e-5));  // the attention did add something before
  // The attention's output scaled too: with the MLP's down_proj zeroed
  // instead, the block adds 0.22 of what the same weights add unscaled.
  auto plain = models::make_torch_layer("llama.block:h=32,a=4,kv=2,d=8,f=64,qkvb=0,ob=0,mb=0,qkn=0");
  auto scaled = models::make_torch_layer("llama.block:h=32,a=4,kv=2,d=8,f=64,qkvb=0,ob=0,mb=0,qkn=0,rm=220000");
  auto theirs = scaled->module().named_parameters();
  for (const auto& item : plain->module().named_parameters()) theirs[item.key()].copy_(item.value());
  for (auto* m : {&plain->module(), &scaled->module()}) m->named_parameters()["down_proj.weight"].zero_();
  const auto attn = plain->forward({x}) - x;
  CHECK(attn.abs().max().item<double>() > 1e-3);
  CHECK(torch::allclose(scaled->forward({x}) - x, 0.22 * attn, 1e-5, 1e-5));
  // The embeddings times embedding_multiplier (em=12000000: 12, in millionths).
  auto emb = models::make_torch_layer("llama.embed:h=16,v=64,em=12000000");
  const auto ids = emb->make_inputs(2, 8, torch::TensorOptions());
  const auto table = emb->module().named_parameters()["embed_tokens.weight"];
  CHECK(torch::allclose(emb->forward(ids), table.index_select(0, ids[0].view({-1})).view({2, 8, 16}) * 12.0));
  // The loss of logits / 16 (ls=16000000), the head tied (its weight an input).
  auto head = models::make_torch_layer("llama.head:h=16,v=64,tied=1,ls=16000000");
  auto in = head->make_inputs(2, 8, torch::TensorOptions());
  in[1] = in[1].clamp(0, 63);
  const auto normed = in[0] * torch::rsqrt(in[0].pow(2).mean(-1, true) + 1e-5);
  const auto logits = torch::matmul(normed, in[2].t()) / 16;
  const auto ce = torch::nn::functional::cross_entropy(logits.view({-1, 64}), in[1].view({-1}));
  CHECK(head->forward(in).item<double>() == Approx(ce.item<double>()).epsilon(1e-5));
}

TEST_CASE("OLMo 2's twin: outputs normed before their residuals, q/k norms over all heads, as HF writes it (Note [OLMo 2])", "[torch][llama][olmo2]") {
  torch::manual_seed(13);
  torch::NoGradGuard no_grad;
  // h 32, 4 heads of 8, 2 KV heads, f 64: q/o 32 x 32 each, k/v 32 x 16
  // each, MLP 3 x 32 x 64, post-attention and post-feedforward norms 2 x
  // 32, q_norm 32 and k_norm 16 (no input norm): 8,288.
  auto layer = models::make_torch_layer("llama.block:h=32,a=4,kv=2,d=8,f=64,qkvb=0,ob=0,mb=0,qkn=1,on=1");
  CHECK(layer->parameter_count() == 2 * 32 * 32 + 2 * 32 * 16 + 3 * 32 * 64 + 2 * 32 + 32 + 16);
  std::map<std::string, torch::Tensor> p;
  for (const auto& item : layer->module().named_parameters()) p[item.key()] = item.value();
  CHECK(p.count("input_layernorm.weight") == 0);
  CHECK(p["q_norm.weight"].numel() == 32);
  CHECK(p["k_norm.weight"].numel() == 16);
  for (auto& [name, w] : p) {
    if (name.find("norm") != std::string::npos) w.uniform_(0.5, 1.5);
  }
  // With o_proj zeroed, post_attention_layernorm(0) adds 0: the block is
  // x + post_ff(down(silu(gate(x)) * up(x))), the MLP reading x unnormed.
  const auto x = torch::randn({2, 8, 32});
  const auto out = layer->forward({x});
  p["o_proj.weight"].zero_();
  const auto mlp = torch::matmul(torch::silu(torch::matmul(x, p["gate_proj.weight"].t())) * torch::matmul(x, p["up_proj.weight"].t()),
                                 p["down_proj.weight"].t());
  const auto want = x + mlp * torch::rsqrt(mlp.pow(2).mean(-1, true) + 1e-5) * p["post_feedforward_layernorm.weight"];
  CHECK(torch::allclose(layer->forward({x}), want, 1e-5, 1e-5));
  CHECK_FALSE(torch::allclose(out, want, 1e-5, 1e-5));  // the attention did add something before
  // The analytic layers of a tiny OLMo 2 and a tiny Granite (llama-tiny's
  // shape) and their twins own the same parameters.
  check_twins_own_params("llama-tiny", {"model.qk_norm=true", "model.olmo2_norms=true"});
  check_twins_own_params("llama-tiny", {"model.embedding_multiplier=12", "model.residual_multiplier=0.22", "model.logits_scaling=16"});
  // Its q/k norms span all heads: scaling q_proj's rows of one head
  // changes every head's normalised q (a per-head norm would undo it, and
  // scaling every row is undone either way).
  {
    auto olmo = models::make_torch_layer("llama.block:h=32,a=4,kv=2,d=8,f=64,qkvb=0,ob=0,mb=0,qkn=1,on=1");
    auto q = olmo->module().named_parameters()["q_proj.weight"];
    const auto base = olmo->forward({x});
    q.mul_(5);
    const double all = (olmo->forward({x}) - base).abs().max().item<double>();
    q.div_(5);
    q.narrow(0, 0, 8).mul_(5);  // head 0's 8 rows
    const double one = (olmo->forward({x}) - base).abs().max().item<double>();
    // All rows x5: only RMSNorm's eps moves it (8e-4 here); one head's: 1.2.
    CHECK(all < 1e-2);
    CHECK(one > 100 * all);
  }
  // Split over tensor-parallel ranks it cannot run.
  using dtsim::test::error_of;
  CHECK(error_of([] { models::make_torch_layer("llama.block:h=32,a=4,kv=2,d=8,f=64,qkvb=0,ob=0,mb=0,qkn=1,on=1,tp=2"); })
            .find("OLMo 2's block runs dense, with its q/k norms, at tp 1") != std::string::npos);
}

TEST_CASE("MiniMax-M2's twin: q/k norms over all heads beside the Llama block's pre-norms (Note [MiniMax-M2])", "[torch][llama][moe]") {
  torch::manual_seed(17);
  torch::NoGradGuard no_grad;
  // h 32, 4 heads of 8, 2 KV heads, f 64: q/o 32 x 32 each, k/v 32 x 16
  // each, MLP 3 x 32 x 64, input and post-attention norms 2 x 32, q_norm
  // 4 x 8 = 32 and k_norm 2 x 8 = 16: 8,288, OLMo 2's count with its two
  // norms where OLMo 2 has its own two.
  auto layer = models::make_torch_layer("llama.block:h=32,a=4,kv=2,d=8,f=64,qkvb=0,ob=0,mb=0,qkn=1,qkw=1");
  CHECK(layer->parameter_count() == 2 * 32 * 32 + 2 * 32 * 16 + 3 * 32 * 64 + 2 * 32 + 32 + 16);
  auto p = layer->module().named_parameters();
  CHECK(p.contains("input_layernorm.weight"));
  CHECK(p["q_norm.weight"].numel() == 32);
  CHECK(p["k_norm.weight"].numel() == 16);
  CHECK_FALSE(p.contains("post_feedforward_layernorm.weight"));
  // One head's q rows scaled change the others' normalised q (a per-head
  // norm undoes it: the same block with qkw=0 barely moves).
  const auto x = torch::randn({2, 8, 32});
  auto moved = [&](const std::string& signature) {
    auto l = models::make_torch_layer(signature);
    for (auto& item : l->module().named_parameters()) {
      if (item.key().find("norm") != std::string::npos) item.value().uniform_(0.5, 1.5);
    }
    const auto base = l->forward({x});
    l->module().named_parameters()["q_proj.weight"].narrow(0, 0, 8).mul_(5);
    return (l->forward({x}) - base).abs().max().item<double>();
  };
  const double whole = moved("llama.block:h=32,a=4,kv=2,d=8,f=64,qkvb=0,ob=0,mb=0,qkn=1,qkw=1");
  const double per_head = moved("llama.block:h=32,a=4,kv=2,d=8,f=64,qkvb=0,ob=0,mb=0,qkn=1");
  CHECK(per_head < 1e-2);
  CHECK(whole > 100 * per_head);
  // moe-tiny with whole q/k norms: its analytic layers and their twins own
  // the same parameters.
  check_twins_own_params("moe-tiny", {"model.qk_norm=true", "model.whole_qk_norm=true"});
  using dtsim::test::error_of;
  CHECK(error_of([] { models::make_torch_layer("llama.block:h=32,a=4,kv=2,d=8,f=64,qkvb=0,ob=0,mb=0,qkn=1,qkw=1,tp=2"); })
            .find("q/k norms over all heads (qkw=1) need qkn=1 and run at tp 1") != std::string::npos);
}

TEST_CASE("Ministral 3's twin scales each query by 1 + beta log(1 + floor(p / length)) after rotary (Note [Ministral 3])", "[torch][llama]") {
  torch::manual_seed(19);
  torch::NoGradGuard no_grad;
  // With steps of 4 positions and beta 0.5, positions 0-3 are scaled by 1
  // (the unscaled block's output there), 4-7 by 1 + 0.5 ln 2 (different).
  const std::string plain = "llama.block:h=32,a=4,kv=2,d=8,f=64,qkvb=0,ob=0,mb=0,qkn=0";
  auto a = models::make_torch_layer(plain);
  auto b = models::make_torch_layer(plain + ",qs=500000,qsl=4");
  CHECK(b->parameter_count() == a->parameter_count());
  // Weights of unit scale, so that the scores (and a scale of them) matter.
  auto pa = a->module().named_parameters(), pb = b->module().named_parameters();
  for (const auto& item : pa) {
    item.value().uniform_(-1, 1);
    pb[item.key()].copy_(item.value());
  }
  const auto x = torch::randn({2, 8, 32});
  const auto ya = a->forward({x}), yb = b->forward({x});
  CHECK(torch::allclose(ya.narrow(1, 0, 4), yb.narrow(1, 0, 4), 1e-6, 1e-6));
  CHECK_FALSE(torch::allclose(ya.narrow(1, 4, 4), yb.narrow(1, 4, 4), 1e-2, 1e-2));
  // Position 4's output is the unscaled block's with its query times 1 +
  // 0.5 ln 2: scaling q_proj's weight by that reproduces it there.
  auto c = models::make_torch_layer(plain);
  auto pc = c->module().named_parameters();
  for (const auto& item : pa) pc[item.key()].copy_(item.value());
  pc["q_proj.weight"].mul_(1.0 + 0.5 * std::log(2.0));
  CHECK(torch::allclose(c->forward({x}).narrow(1, 4, 4), yb.narrow(1, 4, 4), 1e-4, 1e-4));
  using dtsim::test::error_of;
  CHECK(error_of([&] { models::make_torch_layer(plain + ",qs=500000"); }).find("qs (Ministral 3's query scaling) needs qsl") != std::string::npos);
}

TEST_CASE("gpt-oss's twin: the clamped SwiGLU, the experts' and the router's biases, as GptOssExperts computes them (Note [gpt-oss])",
          "[torch][llama][gpt-oss]") {
  torch::manual_seed(17);
  torch::NoGradGuard no_grad;
  // E 2, k 2: every token goes to both experts, weighted by the softmax of
  // its router logits (GptOssTopKRouter's softmax over the top k of them).
  // h 32, 4 heads of 8, 2 KV heads, fe 16: q and o 32 x 32 + 32 each, k and
  // v 32 x 16 + 16 each, 4 sinks, two norms of 32, the router 32 x 2 + 2,
  // and each expert gate and up 32 x 16 + 16, down 16 x 32 + 32: 6,502.
  auto layer = models::make_torch_layer(
      "moe.block:h=32,a=4,kv=2,d=8,E=2,k=2,fe=16,fs=0,sg=0,rb=1,qkvb=1,ob=1,mb=1,qkn=0,sink=1,swl=7000000,fnw=1");
  CHECK(layer->parameter_count() == 2 * (32 * 32 + 32) + 2 * (32 * 16 + 16) + 4 + 2 * 32 + (32 * 2 + 2) + 2 * (2 * (32 * 16 + 16) + 16 * 32 + 32));
  std::map<std::string, torch::Tensor> p;
  for (const auto& item : layer->module().named_parameters()) p[item.key()] = item.value();
  for (auto& [name, w] : p) {
    if (name.find("_b") != std::string::npos || name.find("norm") != std::string::npos || name.find("gate.bias") != std::string::npos) {
      w.uniform_(0.5, 1.5);
    }
  }
  for (const char* n : {"block_sparse_moe.experts_0_w1", "block_sparse_moe.experts_1_w1", "block_sparse_moe.experts_0_w3",
                        "block_sparse_moe.experts_1_w3"}) {
    p.at(n).mul_(300);  // gates and ups well past the clamp at 7
  }
  // With o_proj zeroed (weight and bias) the attention adds 0: the block is
  // x + sum over experts of w_e ((clamp(up, -7, 7) + 1) g sigmoid(1.702 g)) W2 + b2,
  // g = min(gate, 7), on z = post_attention_layernorm(x).
  p.at("o_proj.weight").zero_();
  p.at("o_proj.bias").zero_();
  const auto x = torch::randn({2, 8, 32});
  const auto z = x * torch::rsqrt(x.pow(2).mean(-1, true) + 1e-5) * p.at("post_attention_layernorm.weight");
  const auto w = torch::softmax(torch::matmul(z, p.at("block_sparse_moe.gate.weight").t()) + p.at("block_sparse_moe.gate.bias"), -1);
  auto want = x.clone();
  bool clamped_gate = false, clamped_up = false;
  for (int e = 0; e < 2; ++e) {
    const std::string n = "block_sparse_moe.experts_" + std::to_string(e) + "_";
    const auto gate = torch::matmul(z, p.at(n + "w1").t()) + p.at(n + "b1");
    const auto up = torch::matmul(z, p.at(n + "w3").t()) + p.at(n + "b3");
    clamped_gate = clamped_gate || gate.max().item<double>() > 7;
    clamped_up = clamped_up || up.min().item<double>() < -7;
    const auto g = gate.clamp_max(7);
    const auto glu = (up.clamp(-7, 7) + 1) * g * torch::sigmoid(1.702 * g);
    want = want + w.narrow(-1, e, 1) * (torch::matmul(glu, p.at(n + "w2").t()) + p.at(n + "b2"));
  }
  CHECK(clamped_gate);
  CHECK(clamped_up);
  CHECK(torch::allclose(layer->forward({x}), want, 1e-4, 1e-4));
  // gpt-oss-tiny's analytic layers and their twins own the same parameters.
  sim::WorkloadShape shape;
  shape.micro_batch = 2;
  shape.seq_len = 16;
  for (const auto& l : models::load_model("gpt-oss-tiny")->layers(shape)) {
    INFO(l.signature);
    CHECK(models::make_torch_layer(l.signature)->parameter_count() == l.params);
  }
}

TEST_CASE("gpt-oss's sinks in the twin's eager attention: a logit a head beside each row's scores (Note [gpt-oss])", "[torch][llama][gpt-oss]") {
  torch::manual_seed(19);
  const std::string sig = "llama.block:h=32,a=4,kv=2,d=8,f=64,qkvb=1,ob=1,mb=0,qkn=0,sink=1,fnw=1";
  auto layer = models::make_torch_layer(sig);
  std::map<std::string, torch::Tensor> p;
  for (const auto& item : layer->module().named_parameters()) p[item.key()] = item.value();
  REQUIRE(p.at("sinks").numel() == 4);
  {
    torch::NoGradGuard no_grad;
    p.at("sinks").copy_(torch::tensor({-1.0, 0.0, 0.5, 2.0}));
    p.at("down_proj.weight").zero_();  // the MLP adds 0
  }
  // One token: it attends to itself (rotary at position 0 turns nothing),
  // so head n's output is p_n v_(n/2), p_n = 1 / (1 + exp(sink_n - q_n . k_(n/2) / sqrt(8))).
  torch::NoGradGuard no_grad;
  const auto x = torch::randn({3, 1, 32});
  const auto z = x * torch::rsqrt(x.pow(2).mean(-1, true) + 1e-5) * p.at("input_layernorm.weight");
  const auto q = (torch::matmul(z, p.at("q_proj.weight").t()) + p.at("q_proj.bias")).view({3, 4, 8});
  const auto k = (torch::matmul(z, p.at("k_proj.weight").t()) + p.at("k_proj.bias")).view({3, 2, 8});
  const auto v = (torch::matmul(z, p.at("v_proj.weight").t()) + p.at("v_proj.bias")).view({3, 2, 8});
  std::vector<torch::Tensor> heads;
  for (int n = 0; n < 4; ++n) {
    const auto score = (q.select(1, n) * k.select(1, n / 2)).sum(-1, true) / std::sqrt(8.0);
    const auto pn = 1 / (1 + torch::exp(p.at("sinks")[n] - score));
    heads.push_back(pn * v.select(1, n / 2));
  }
  const auto ctx = torch::cat(heads, -1).view({3, 1, 32});
  const auto want = x + torch::matmul(ctx, p.at("o_proj.weight").t()) + p.at("o_proj.bias");
  CHECK(torch::allclose(layer->forward({x}), want, 1e-5, 1e-5));
}

TEST_CASE("gpt-oss's sinks take their gradient, recomputed or not, and run in eager attention only (Note [gpt-oss])", "[torch][llama][gpt-oss]") {
  const std::string sig = "llama.block:h=32,a=4,kv=2,d=8,f=64,qkvb=1,ob=1,mb=0,qkn=0,sw=4,sink=1,fnw=1";
  std::vector<torch::Tensor> grads;
  for (bool recompute : {false, true}) {
    torch::manual_seed(23);
    auto layer = models::make_torch_layer(sig);
    layer->set_recompute_attention(recompute);
    torch::manual_seed(24);
    const auto x = torch::randn({2, 8, 32});
    const auto y = layer->forward({x});
    y.pow(2).sum().backward();
    const auto g = layer->module().named_parameters()["sinks"].grad();
    REQUIRE(g.defined());
    grads.push_back(g.clone());
  }
  CHECK(grads[0].abs().max().item<double>() > 1e-6);
  CHECK(torch::allclose(grads[0], grads[1], 1e-5, 1e-6));
  CHECK(test::error_of([&] { models::make_torch_layer(sig + ",flash=1"); })
            .find("gpt-oss's attention sinks run in eager attention only in the LibTorch twin; set plan.attention=eager") != std::string::npos);
}

TEST_CASE("Gemma 2's attention soft cap in the twin's eager attention (Note [Gemma])", "[torch][llama][gemma]") {
  // The same weights (the same seed) with no cap, a cap far above every
  // score (cap tanh(x / cap) = x to within x^3 / (3 cap^2)) and a cap of 1,
  // which bounds every score to (-1, 1).
  const std::string sig = "llama.block:h=32,a=4,kv=2,d=8,f=64,qkvb=0,ob=0,mb=0,qkn=0,gn=1,gelu=1";
  auto make = [&](const std::string& extra) {
    torch::manual_seed(11);
    auto layer = models::make_torch_layer(sig + extra);
    // HF's N(0, 0.02) weights give scores far below 1; scaled, some reach several.
    torch::NoGradGuard no_grad;
    for (const char* n : {"q_proj.weight", "k_proj.weight"}) layer->module().named_parameters()[n].mul_(30);
    return layer;
  };
  auto none = make(""), loose = make(",sc=100000"), tight = make(",sc=1");
  torch::manual_seed(12);
  const auto x = torch::randn({2, 8, 32}) * 4;
  const auto y = none->forward({x}), y_loose = loose->forward({x}), y_tight = tight->forward({x});
  CHECK(torch::allclose(y, y_loose, 1e-5, 1e-5));
  CHECK_FALSE(torch::allclose(y, y_tight, 1e-3, 1e-3));
  y_tight.backward(torch::ones_like(y_tight));
  for (const auto& p : tight->module().parameters()) {
    REQUIRE(p.grad().defined());
    CHECK(torch::isfinite(p.grad()).all().item<bool>());
  }
  // SDPA has no cap, nor the p2p ring's hand-written backward: one line each.
  CHECK(test::error_of([&] { models::make_torch_layer(sig + ",sc=50,flash=1"); })
            .find("Gemma 2's attention soft cap runs in eager attention only in the LibTorch twin; set plan.attention=eager") !=
        std::string::npos);
  models::ContextParallel ring;
  ring.size = 2;
  ring.gather = [](const torch::Tensor& t, std::int64_t) { return t; };
  ring.shift = [](const torch::Tensor& t, bool) { return std::function<torch::Tensor()>([t] { return t; }); };
  CHECK(test::error_of([&] { models::make_torch_layer(sig + ",sc=50,cp=2", local_tp(0, 1), ring); })
            .find("Gemma 2's attention soft cap is not run on the p2p ring by the LibTorch twin; set plan.cp_comm=all_gather") !=
        std::string::npos);
}

TEST_CASE("Llama 4's twin: chunked attention, NoPE layers and L2 q/k norms as HF writes them (Note [Llama 4])", "[torch][llama][llama4]") {
  const std::string base = "llama.block:h=32,a=4,kv=2,d=8,f=64,qkvb=0,ob=0,mb=0,qkn=0";
  auto make = [&](const std::string& extra) {
    torch::manual_seed(21);
    return models::make_torch_layer(base + extra);
  };
  torch::manual_seed(22);
  const auto x = torch::randn({2, 8, 32});
  auto changed_at = [&](models::TorchLayer& layer, int token) {
    torch::NoGradGuard no_grad;
    auto other = x.clone();
    other.select(1, token).add_(1.0);
    const auto y = layer.forward({x}), z = layer.forward({other});
    std::vector<bool> changed;
    for (int i = 0; i < 8; ++i) changed.push_back(!torch::allclose(y.narrow(1, i, 1), z.narrow(1, i, 1)));
    return changed;
  };
  // Chunks of 4 (create_chunked_causal_mask): token 2 reaches outputs 2
  // and 3 of its chunk, none before it and none of the next chunk; token 5
  // outputs 5 to 7.
  auto chunked = make(",chunk=4");
  CHECK(changed_at(*chunked, 2) == std::vector<bool>{false, false, true, true, false, false, false, false});
  CHECK(changed_at(*chunked, 5) == std::vector<bool>{false, false, false, false, false, true, true, true});
  // Without positions (NoPE), the last output attends to the earlier tokens
  // as a set: swapping tokens 1 and 4 leaves it be, where rotary does not.
  auto last_after_swap = [&](models::TorchLayer& layer) {
    torch::NoGradGuard no_grad;
    auto swapped = x.clone();
    swapped.select(1, 1).copy_(x.select(1, 4));
    swapped.select(1, 4).copy_(x.select(1, 1));
    return torch::allclose(layer.forward({x}).narrow(1, 7, 1), layer.forward({swapped}).narrow(1, 7, 1), 1e-5, 1e-6);
  };
  auto nope = make(",nope=1"), rope = make("");
  CHECK(last_after_swap(*nope));
  CHECK_FALSE(last_after_swap(*rope));
  // The temperature log(floor((p + 1) / 8192) + 1) 0.1 + 1 is exactly 1
  // below position 8191: the same outputs at 8 tokens.
  // At p = 8191 floor(8192 / 8192) = 1: 1 + 0.1 ln 2; at 16383, 1 + 0.1 ln 3.
  const auto temps = models::attention_temperature(torch::tensor({0, 8190, 8191, 16383}, torch::kLong));
  CHECK(temps[0].item<double>() == Approx(1.0));
  CHECK(temps[1].item<double>() == Approx(1.0));
  CHECK(temps[2].item<double>() == Approx(1 + 0.1 * std::log(2.0)).epsilon(1e-6));
  CHECK(temps[3].item<double>() == Approx(1 + 0.1 * std::log(3.0)).epsilon(1e-6));
  auto tuned = make(",nope=1,tt=1");
  {
    torch::NoGradGuard no_grad;
    CHECK(torch::equal(tuned->forward({x}), nope->forward({x})));
  }
  // L2-normalised q and k (no weight): scaling q_proj and k_proj changes
  // nothing but through eps (1e-5 against mean squares near 1), where it
  // changes the plain block's scores.
  auto scaled = [&](const std::string& extra) {
    auto a = make(extra), b = make(extra);
    torch::NoGradGuard no_grad;
    for (const char* n : {"q_proj.weight", "k_proj.weight"}) b->module().named_parameters()[n].mul_(3);
    const auto in = x * 4;
    return torch::allclose(a->forward({in}), b->forward({in}), 1e-4, 1e-5);
  };
  CHECK(scaled(",l2qk=1"));
  CHECK_FALSE(scaled(""));
  CHECK(make(",l2qk=1")->parameter_count() == make("")->parameter_count());
  // Every piece together trains (gradients finite), and a window with chunks is refused.
  auto all = make(",chunk=4,l2qk=1");
  const auto y = all->forward({x});
  y.backward(torch::ones_like(y));
  for (const auto& p : all->module().parameters()) CHECK(torch::isfinite(p.grad()).all().item<bool>());
  CHECK(test::error_of([&] { models::make_torch_layer(base + ",sw=2,chunk=4"); }).find("sw and chunk contradict each other") != std::string::npos);
  // Note [Dense experts]: priced, not run; the twin routes.
  CHECK(test::error_of([] { models::make_torch_layer("moe.block:h=32,a=4,kv=2,d=8,E=4,k=1,fe=16,fs=16,sg=0,qkvb=0,ob=0,mb=0,qkn=0,dense=1"); })
            .find("HuggingFace's dense experts (every token through every expert) are not run by the LibTorch twin") != std::string::npos);
}

namespace {

/// deepseek-tiny's dense block (models/src/zoo.cpp): h 128, 4 heads, a
/// query latent of 64, a key-value latent of 32, heads of 32 + 16 rotary
/// (queries and keys) and 32 (values), SwiGLU 352.
const std::string kMlaBlock = "llama.block:mla=1,h=128,a=4,qr=64,kvr=32,dn=32,dr=16,dv=32,f=352,qkvb=0,ob=0,mb=0,qkn=0";

/// Rotary as HF's apply_rotary_pos_emb with the twins' theta (500,000) of
/// x [b, s, heads, d] at positions 0..s-1, written out apart from the twin.
torch::Tensor rope_ref(const torch::Tensor& x) {
  const auto s = x.size(1), d = x.size(3);
  const auto inv = 1.0 / torch::pow(500000.0, torch::arange(0, d, 2, torch::kFloat) / static_cast<double>(d));
  const auto ang = torch::outer(torch::arange(s, torch::kFloat), inv);  // [s, d/2]
  const auto cos = torch::cat({ang, ang}, -1).cos().view({1, s, 1, d}), sin = torch::cat({ang, ang}, -1).sin().view({1, s, 1, d});
  const auto half = torch::cat({-x.narrow(-1, d / 2, d / 2), x.narrow(-1, 0, d / 2)}, -1);
  return x * cos + half * sin;
}

/// An all-reduce between two threads (sum), each rank's calls matched by order.
struct Bus {
  std::mutex mu;
  std::condition_variable cv;
  std::map<int, std::vector<torch::Tensor>> posted;
  torch::Tensor sum(int& calls, const torch::Tensor& t) {
    const int k = calls++;
    std::unique_lock<std::mutex> lock(mu);
    posted[k].push_back(t.detach().clone());
    cv.notify_all();
    cv.wait(lock, [&] { return posted[k].size() == 2; });
    return posted[k][0] + posted[k][1];
  }
};

/// Megatron's f: the identity forward, its gradient summed over the ranks.
struct SumGradient : torch::autograd::Function<SumGradient> {
  static inline Bus* bus = nullptr;
  static inline int calls[2] = {0, 0};
  static torch::Tensor forward(torch::autograd::AutogradContext* ctx, const torch::Tensor& x, std::int64_t rank) {
    ctx->saved_data["rank"] = rank;
    return x.clone();
  }
  static torch::autograd::variable_list backward(torch::autograd::AutogradContext* ctx, torch::autograd::variable_list g) {
    return {bus->sum(calls[ctx->saved_data["rank"].toInt()], g[0]), torch::Tensor()};
  }
};

}  // namespace

TEST_CASE("DeepSeek's twin: latent attention as DeepseekV3Attention computes it (Note [Multi-head latent attention])", "[torch][llama][mla]") {
  // Parameters by hand: two norms 2 x 128; q_a_proj 128 x 64, its norm 64,
  // q_b_proj 64 x 4 x 48; kv_a_proj_with_mqa 128 x (32 + 16), its norm 32,
  // kv_b_proj 32 x 4 x (32 + 32); o_proj 4 x 32 x 128; the MLP 3 x 128 x 352.
  CHECK(count(kMlaBlock) == 256 + 8'192 + 64 + 12'288 + 6'144 + 32 + 8'192 + 16'384 + 135'168);
  // DeepSeek-V2-Lite's: no query latent, a full q_proj of 128 x 4 x 48.
  std::string no_latent = kMlaBlock;
  no_latent.replace(no_latent.find("qr=64"), 5, "qr=0");
  CHECK(count(no_latent) == 186'720 - 8'192 - 64 - 12'288 + 24'576);
  CHECK(models::make_torch_layer(no_latent)->module().named_parameters().contains("q_proj.weight"));

  // The block's output against the formula written out here from its own
  // weights: each head's score is its unrotated parts' product plus its
  // rotated query part's product with the one rotated key part every head
  // shares, over sqrt(dn + dr); causal; values of 32 a head.
  torch::manual_seed(5);
  auto layer = models::make_torch_layer(kMlaBlock);
  const std::int64_t b = 2, s = 6, a = 4;
  const auto x = torch::randn({b, s, 128});
  const auto y = layer->forward({x});
  auto p = layer->module().named_parameters();
  const auto rms = [](const torch::Tensor& t, const torch::Tensor& w) { return w * (t * torch::rsqrt(t.pow(2).mean(-1, true) + 1e-5)); };
  const auto lin = [&](const torch::Tensor& t, const char* name) { return torch::matmul(t, p[std::string(name) + ".weight"].t()); };
  torch::NoGradGuard no_grad;
  const auto xn = rms(x, p["input_layernorm.weight"]);
  const auto q = lin(rms(lin(xn, "q_a_proj"), p["q_a_layernorm.weight"]), "q_b_proj").view({b, s, a, 48});
  const auto ckv = lin(xn, "kv_a_proj_with_mqa");
  const auto kv = lin(rms(ckv.narrow(-1, 0, 32), p["kv_a_layernorm.weight"]), "kv_b_proj").view({b, s, a, 64});
  const auto q_pe = rope_ref(q.narrow(-1, 32, 16)), k_pe = rope_ref(ckv.narrow(-1, 32, 16).view({b, s, 1, 16}));
  auto scores = (torch::einsum("bihd,bjhd->bhij", {q.narrow(-1, 0, 32), kv.narrow(-1, 0, 32)}) +
                 torch::einsum("bihd,bjd->bhij", {q_pe, k_pe.squeeze(2)})) / std::sqrt(48.0);
  scores = scores.masked_fill(torch::ones({s, s}).triu(1).to(torch::kBool), -std::numeric_limits<double>::infinity());
  const auto ctx = torch::einsum("bhij,bjhd->bihd", {torch::softmax(scores, -1), kv.narrow(-1, 32, 32)}).reshape({b, s, a * 32});
  const auto h1 = x + lin(ctx, "o_proj");
  const auto z = rms(h1, p["post_attention_layernorm.weight"]);
  const auto want = h1 + lin(torch::silu(lin(z, "gate_proj")) * lin(z, "up_proj"), "down_proj");
  CHECK(torch::allclose(y, want, 1e-4, 1e-5));

  // Refused: what DeepSeek's layers never combine with latent attention, and context parallelism.
  CHECK(test::error_of([] { models::make_torch_layer("llama.block:mla=1,h=128,a=4,qr=64,kvr=32,dn=32,dr=16,dv=32,f=352,qkvb=0,ob=0,mb=0,qkn=1"); })
            .find("qkn=1 with latent attention (mla=1)") != std::string::npos);
  CHECK(test::error_of([] { models::make_torch_layer("llama.block:mla=1,h=128,a=4,qr=64,kvr=32,dn=32,dr=15,dv=32,f=352,qkvb=0,ob=0,mb=0,qkn=0"); })
            .find("dr must be even") != std::string::npos);
  models::ContextParallel cp;
  cp.size = 2;
  cp.gather = [](const torch::Tensor& t, std::int64_t) { return t; };
  CHECK(test::error_of([&] { models::make_torch_layer(kMlaBlock + ",cp=2", local_tp(0, 1), cp); })
            .find("latent attention (DeepSeek's) is not run under context parallelism") != std::string::npos);
}

TEST_CASE("DeepSeek's twin at tp 2: replicated latents, heads split, every gradient the unsplit block's (Note [Multi-head latent attention])",
          "[torch][llama][mla][tp]") {
  // Per rank: the down-projections and norms whole (256 + 8,192 + 64 +
  // 6,144 + 32 = 14,688), half of q_b_proj, kv_b_proj, o_proj and the MLP
  // ((12,288 + 8,192 + 16,384 + 135,168) / 2 = 86,016).
  CHECK(models::make_torch_layer(kMlaBlock + ",tp=2", local_tp(1, 2))->parameter_count() == 14'688 + 86'016);
  // Two ranks, a thread each: g sums the outputs, f sums the gradients
  // (SumGradient); each rank must compute the unsplit block's output and
  // input gradient, its replicated weights' gradients whole, its split
  // weights' gradients the unsplit ones' rows (column-parallel) or columns
  // (row-parallel).
  torch::manual_seed(7);
  auto whole = models::make_torch_layer(kMlaBlock);
  const auto x = torch::randn({2, 5, 128});
  const auto xw = x.clone().requires_grad_(true);
  const auto yw = whole->forward({xw});
  const auto dy = torch::randn(yw.sizes());
  yw.backward(dy);
  Bus bus, gradients;  // g's calls and f's, numbered apart
  SumGradient::bus = &gradients;
  SumGradient::calls[0] = SumGradient::calls[1] = 0;
  std::vector<int> exits(2, 0);
  std::vector<std::unique_ptr<models::TorchLayer>> shares;
  for (int r = 0; r < 2; ++r) {
    auto tp = local_tp(r, 2);
    // g: the sum forward, the identity backward.
    tp.exit = [&, r](const torch::Tensor& t) { return t + (bus.sum(exits[r], t) - t).detach(); };
    tp.enter = [r](const torch::Tensor& t) { return SumGradient::apply(t, r); };
    torch::manual_seed(7);
    shares.push_back(models::make_torch_layer(kMlaBlock + ",tp=2", tp));
  }
  std::vector<torch::Tensor> ys(2), xs(2);
  std::vector<std::thread> threads;
  for (int r = 0; r < 2; ++r) {
    threads.emplace_back([&, r] {
      xs[r] = x.clone().requires_grad_(true);
      ys[r] = shares[r]->forward({xs[r]});
      ys[r].backward(dy);
    });
  }
  for (auto& t : threads) t.join();
  auto named = whole->module().named_parameters();
  for (int r = 0; r < 2; ++r) {
    INFO("rank " << r);
    CHECK(torch::allclose(ys[r], yw, 1e-4, 1e-5));
    CHECK(torch::allclose(xs[r].grad(), xw.grad(), 1e-4, 1e-5));
    for (const auto& mine : shares[r]->module().named_parameters()) {
      INFO(mine.key());
      const torch::Tensor full = named[mine.key()].grad(), got = mine.value().grad();
      REQUIRE(got.defined());
      if (got.sizes() == full.sizes()) {
        CHECK(torch::allclose(got, full, 1e-4, 1e-5));  // replicated
      } else if (got.size(0) != full.size(0)) {
        CHECK(torch::allclose(got, full.narrow(0, r * got.size(0), got.size(0)), 1e-4, 1e-5));  // column-parallel rows
      } else {
        CHECK(torch::allclose(got, full.narrow(1, r * got.size(1), got.size(1)), 1e-4, 1e-5));  // row-parallel columns
      }
    }
  }
  SumGradient::bus = nullptr;
}

namespace {

/// Two threads' tensors exchanged, each rank's calls matched by order, in rank order.
struct SeqBus {
  std::mutex mu;
  std::condition_variable cv;
  std::map<int, std::map<int, torch::Tensor>> posted;
  int calls[2] = {0, 0};
  std::vector<torch::Tensor> exchange(int rank, const torch::Tensor& t) {
    const int k = calls[rank]++;
    std::unique_lock<std::mutex> lock(mu);
    posted[k][rank] = t.detach().clone();
    cv.notify_all();
    cv.wait(lock, [&] { return posted[k].size() == 2; });
    return {posted[k][0], posted[k][1]};
  }
  torch::Tensor gather(int rank, const torch::Tensor& t) { return torch::cat(exchange(rank, t), 1); }
  /// `parts` [2, b, s/2, ...] (models::sequence_parts).
  torch::Tensor reduce_scatter(int rank, const torch::Tensor& parts) {
    const auto both = exchange(rank, parts);
    return (both[0] + both[1])[rank].contiguous();
  }
};

/// Note [Sequence parallelism] in models/torch: a tp 2 share of model `name`'s
/// layer `index`, run by two threads on their halves of the sequence, gives
/// the unsplit layer's output and input gradient at its tokens; its split
/// weights' gradients are the unsplit ones' rows or columns, its replicated
/// weights' the unsplit ones whole, and its sequence-parallel parameters'
/// (TorchLayer::sequence_parallel_parameters) summed over the two ranks
/// (what the runtime's all-reduce does once a step), which are
/// Layer::sp_params elements.
void check_sequence_parallel_block(const std::string& name, std::size_t index, bool allgather = false) {
  INFO(name << " layer " << index);
  const auto model = models::load_model(name);
  sim::WorkloadShape shape;
  shape.micro_batch = 2;
  shape.seq_len = 8;
  shape.act_bytes = 4;
  // Without dropout (GPT-2's), whose masks no two processes share.
  const auto no_dropout = [](sim::Layer l) {
    if (const auto at = l.signature.find("drop=1"); at != std::string::npos) l.signature.replace(at, 6, "drop=0");
    return l;
  };
  const sim::Layer one = no_dropout(model->layers(shape).at(index));
  shape.tp = 2;
  shape.etp = 2;  // a MoE block's experts split over tp (Megatron-Core's default)
  shape.sequence_parallel = true;
  shape.moe_allgather = allgather;  // a MoE block's dispatcher: allgather (ag=1) or alltoall
  const sim::Layer split = no_dropout(model->layers(shape).at(index));
  REQUIRE(split.signature.find(",sp=1") != std::string::npos);
  REQUIRE((split.signature.find(",ag=1") != std::string::npos) == (allgather && split.signature.rfind("moe.block:", 0) == 0));
  torch::manual_seed(11);
  auto whole = models::make_torch_layer(one.signature);
  const std::int64_t h = whole->make_inputs(2, 8, torch::kFloat)[0].size(2);
  const auto x = torch::randn({2, 8, h});
  const auto xw = x.clone().requires_grad_(true);
  const auto yw = whole->forward({xw});
  const auto dy = torch::randn(yw.sizes());
  yw.backward(dy);
  SeqBus seq;
  Bus sums;
  std::vector<int> sum_calls(2, 0);
  SumGradient::bus = &sums;  // f's all-reduces (a q/k norm's weight) share the bus with g's, numbered apart
  SumGradient::calls[0] = SumGradient::calls[1] = 0;
  Bus f_bus;
  SumGradient::bus = &f_bus;
  std::vector<std::unique_ptr<models::TorchLayer>> shares;
  for (int r = 0; r < 2; ++r) {
    models::TensorParallel tp = local_tp(r, 2);
    tp.enter = [r](const torch::Tensor& t) { return SumGradient::apply(t, r); };                     // f
    tp.exit = [&, r](const torch::Tensor& t) { return t + (sums.sum(sum_calls[r], t) - t).detach(); };  // g
    tp.gather = [&seq, r](const torch::Tensor& t) { return seq.gather(r, t); };
    tp.reduce_scatter = [&seq, r](const torch::Tensor& t) { return seq.reduce_scatter(r, t); };
    models::use_sequence_parallelism(tp);
    torch::manual_seed(11);
    shares.push_back(models::make_torch_layer(split.signature, tp));
    REQUIRE(shares.back()->make_inputs(2, 8, torch::kFloat)[0].size(1) == 4);  // this rank's half of the tokens
  }
  std::vector<torch::Tensor> ys(2), xs(2);
  std::vector<std::thread> threads;
  for (int r = 0; r < 2; ++r) {
    threads.emplace_back([&, r] {
      xs[r] = x.narrow(1, 4 * r, 4).clone().requires_grad_(true);
      ys[r] = shares[r]->forward({xs[r]});
      ys[r].backward(dy.narrow(1, 4 * r, 4));
    });
  }
  for (auto& t : threads) t.join();
  SumGradient::bus = nullptr;
  auto named = whole->module().named_parameters();
  std::vector<std::map<std::string, torch::Tensor>> grads(2);
  std::set<std::string> sp_names;
  std::int64_t sp_elements = 0;
  for (int r = 0; r < 2; ++r) {
    INFO("rank " << r);
    CHECK(torch::allclose(ys[r], yw.narrow(1, 4 * r, 4), 1e-4, 1e-5));
    CHECK(torch::allclose(xs[r].grad(), xw.grad().narrow(1, 4 * r, 4), 1e-4, 1e-5));
    for (const auto& p : shares[r]->module().named_parameters()) grads[r][p.key()] = p.value().grad();
    const auto listed = shares[r]->sequence_parallel_parameters();
    for (const auto& p : shares[r]->module().named_parameters()) {
      if (std::any_of(listed.begin(), listed.end(), [&](const torch::Tensor& t) { return t.is_same(p.value()); })) {
        sp_names.insert(p.key());
        if (r == 0) sp_elements += p.value().numel();
      }
    }
  }
  CHECK(sp_elements == split.sp_params);
  CHECK_FALSE(sp_names.empty());
  for (const auto& [key, got] : grads[0]) {
    INFO(key);
    const torch::Tensor full = named[key].grad();
    REQUIRE(got.defined());
    if (sp_names.count(key)) {
      CHECK(torch::allclose(got + grads[1][key], full, 1e-4, 1e-5));  // each rank's tokens' part
      CHECK_FALSE(torch::allclose(got, full, 1e-4, 1e-5));
    } else if (got.sizes() == full.sizes()) {
      CHECK(torch::allclose(got, full, 1e-4, 1e-5));  // replicated, used on every token
    } else if (got.size(0) != full.size(0)) {
      // Rank 0's column-parallel rows: the first half of each of q, k and v in GPT-2's fused c_attn.
      const std::int64_t parts = key.rfind("c_attn", 0) == 0 ? 3 : 1, n = got.size(0) / parts;
      std::vector<torch::Tensor> rows;
      for (std::int64_t k = 0; k < parts; ++k) rows.push_back(full.narrow(0, k * 2 * n, n));
      CHECK(torch::allclose(got, torch::cat(rows), 1e-4, 1e-5));
    } else {
      CHECK(torch::allclose(got, full.narrow(1, 0, got.size(1)), 1e-4, 1e-5));  // rank 0's row-parallel columns
    }
  }
}

}  // namespace

TEST_CASE("sequence-parallel blocks compute the unsplit block at their tokens, their norms' gradients in parts (Note [Sequence parallelism])",
          "[torch][tp][sp]") {
  // GPT-2's block: two LayerNorms (weight, bias) and the two row-parallel
  // biases run on a rank's tokens, 6 h = 6 x 128 for gpt2-tiny.
  check_sequence_parallel_block("gpt2-tiny", 1);
  // Llama's: its two RMSNorms, 2 h; DeepSeek's latent attention: the two
  // norms, the down-projections and their norms.
  check_sequence_parallel_block("llama-tiny", 1);
  check_sequence_parallel_block("deepseek-tiny", 1);
  // Note [Experts under tensor parallelism]: Mixtral's MoE block (its
  // norms and router, 2 h + h E = 256 + 512) and DeepSeek's (latent
  // attention's as above, the router, a shared expert split as a dense MLP),
  // each under the alltoall dispatcher (each rank's rows gathered over tp)
  // and the allgather dispatcher (its tokens gathered).
  for (const bool allgather : {false, true}) {
    INFO("allgather " << allgather);
    check_sequence_parallel_block("moe-tiny", 1, allgather);
    check_sequence_parallel_block("deepseek-tiny", 2, allgather);
  }
  // The hand counts of the analytic side (Layer::sp_params).
  sim::WorkloadShape shape;
  shape.micro_batch = 2;
  shape.seq_len = 8;
  shape.tp = 2;
  shape.sequence_parallel = true;
  CHECK(models::load_model("gpt2-tiny")->layers(shape).at(1).sp_params == 6 * 128);
  // deepseek-tiny (h 128, qr 64, kvr 32, dr 16): 2 x 128 + 128 x 64 + 64 + 128 x (32 + 16) + 32.
  CHECK(models::load_model("deepseek-tiny")->layers(shape).at(1).sp_params == 256 + 8'192 + 64 + 6'144 + 32);
  shape.etp = 2;
  CHECK(models::load_model("moe-tiny")->layers(shape).at(1).sp_params == 256 + 128 * 4);
  CHECK(models::load_model("deepseek-tiny")->layers(shape).at(2).sp_params == 256 + 8'192 + 64 + 6'144 + 32 + 128 * 4);
  // A MoE block's twin under tp runs sequence parallelism only, with its
  // experts split (etp = tp).
  const std::string moe = models::load_model("moe-tiny")->layers(shape).at(1).signature;
  auto plain = local_tp(0, 2);
  CHECK(test::error_of([&] { models::make_torch_layer(moe, plain); }).find("sp=1 but the tensor-parallel group does not run") != std::string::npos);
  shape.sequence_parallel = false;
  CHECK(test::error_of([&] { models::make_torch_layer(models::load_model("moe-tiny")->layers(shape).at(1).signature, plain); })
            .find("is run with sequence parallelism only, as Megatron-Core trains it") != std::string::npos);
  shape.sequence_parallel = true;
  // Whole experts (etp 1) keep all of each of the 4 experts' 3 matrices; split, a rank keeps 128 x 88 of each.
  shape.etp = 1;
  const std::string whole_experts = models::load_model("moe-tiny")->layers(shape).at(1).signature;
  REQUIRE(whole_experts.find(",etp=1") != std::string::npos);
  auto seq_tp = local_tp(0, 2);
  seq_tp.gather = seq_tp.reduce_scatter = seq_tp.enter;
  models::use_sequence_parallelism(seq_tp);
  shape.etp = 2;
  CHECK(models::make_torch_layer(whole_experts, seq_tp)->parameter_count() -
            models::make_torch_layer(models::load_model("moe-tiny")->layers(shape).at(1).signature, seq_tp)->parameter_count() ==
        4 * 3 * 128 * 88);
  // A hand-written signature whose experts split over neither 1 nor tp, or
  // whose experts' width tp does not divide: one line naming it.
  std::string three = whole_experts;
  three.replace(three.find(",etp=1"), 6, ",etp=3");
  CHECK(test::error_of([&] { models::make_torch_layer(three, seq_tp); }).find("etp=3: experts split over 1 or tp 2 ranks") != std::string::npos);
  std::string odd = models::load_model("moe-tiny")->layers(shape).at(1).signature;
  odd.replace(odd.find(",fe=176"), 7, ",fe=175");
  CHECK(test::error_of([&] { models::make_torch_layer(odd, seq_tp); }).find("the experts' widths fe and fs must be multiples of tp 2") !=
        std::string::npos);
  // The twin refuses what the group and the signature disagree on, and BERT.
  const std::string block = models::load_model("gpt2-tiny")->layers(shape).at(1).signature;
  CHECK(test::error_of([&] { models::make_torch_layer(block, local_tp(0, 2)); }).find("sp=1 but the tensor-parallel group does not run") !=
        std::string::npos);
  shape.sequence_parallel = false;
  auto sp_tp = local_tp(0, 2);
  sp_tp.sequence_parallel = true;
  sp_tp.copy = sp_tp.sum = sp_tp.split = sp_tp.enter;
  CHECK(test::error_of([&] { models::make_torch_layer(models::load_model("gpt2-tiny")->layers(shape).at(1).signature, sp_tp); })
            .find("no sp=1 but the tensor-parallel group runs") != std::string::npos);
  CHECK(test::error_of([&] { models::make_torch_layer(models::load_model("bert-tiny")->layers(shape).at(1).signature, sp_tp); })
            .find("BERT under sequence parallelism is priced, not run") != std::string::npos);
}

TEST_CASE("context-parallel ranks compute the whole block's output at their tokens (Note [Context parallelism])", "[torch][llama][cp]") {
  // Load-balanced chunks of a 16-token sequence over cp 2: 4 chunks of 4,
  // rank 0 holds chunks 0 and 3, rank 1 chunks 1 and 2.
  CHECK(torch::equal(models::cp_positions(16, 0, 2), torch::tensor({0, 1, 2, 3, 12, 13, 14, 15}, torch::kLong)));
  CHECK(torch::equal(models::cp_positions(16, 1, 2), torch::tensor({4, 5, 6, 7, 8, 9, 10, 11}, torch::kLong)));
  CHECK(test::error_of([] { models::cp_positions(10, 0, 2); }).find("into 4 chunks, but it has 10 tokens") != std::string::npos);
  // Each rank of cp 2 and 4, a thread each, gathers the others' keys and
  // values (forward only) and must give the unsplit block's output at its
  // tokens' global positions: rotary positions and the causal mask are global.
  for (const std::string sig : {"llama.block:h=32,a=4,kv=2,d=8,f=64,qkvb=1,ob=0,mb=0,qkn=1", "gpt2.block:h=32,a=4,f=64,drop=0"}) {
  INFO(sig);
  torch::manual_seed(7);
  const auto x = torch::randn({2, 16, 32});
  torch::Tensor want;
  {
    torch::NoGradGuard no_grad;
    torch::manual_seed(1);
    want = models::make_torch_layer(sig)->forward({x});
  }
  for (const int n : {2, 4}) {
    INFO("cp " << n);
    std::vector<torch::Tensor> slots(n), outs(n);
    std::barrier sync(n);
    std::vector<std::thread> threads;
    // Build the ranks' layers on this thread (the seed is global), run them on theirs.
    std::vector<std::unique_ptr<models::TorchLayer>> layers;
    std::vector<models::ContextParallel> cps(n);
    for (int r = 0; r < n; ++r) {
      cps[r].rank = r;
      cps[r].size = n;
      cps[r].gather = [&, r](const torch::Tensor& t, std::int64_t dim) {
        slots[r] = t;
        sync.arrive_and_wait();
        auto all = torch::cat(slots, dim);
        sync.arrive_and_wait();
        return all;
      };
      torch::manual_seed(1);
      layers.push_back(models::make_torch_layer(sig + ",cp=" + std::to_string(n), local_tp(0, 1), cps[r]));
    }
    for (int r = 0; r < n; ++r) {
      threads.emplace_back([&, r] {
        torch::NoGradGuard no_grad;
        outs[r] = layers[r]->forward({x.index_select(1, models::cp_positions(16, r, n))});
      });
    }
    for (auto& t : threads) t.join();
    for (int r = 0; r < n; ++r) {
      INFO("rank " << r);
      CHECK(torch::allclose(outs[r], want.index_select(1, models::cp_positions(16, r, n)), 1e-5, 1e-6));
    }
  }
  }
  // One rank's share for calibration (cp=2 in the signature, a local ring):
  // input [b, s/2, h], output the same.
  auto share = models::make_torch_layer("llama.block:h=32,a=4,kv=2,d=8,f=64,qkvb=1,ob=0,mb=0,qkn=1,cp=2");
  const auto in = share->make_inputs(2, 16, torch::TensorOptions());
  CHECK(in[0].size(1) == 8);
  CHECK(share->forward(in).sizes() == in[0].sizes());
}

TEST_CASE("the p2p ring trains as the unsplit block does (Note [Ring attention])", "[torch][llama][cp]") {
  // Each cp rank, a thread each, runs its block with keys and values going
  // round the ring (forward to rank + 1, backward to rank - 1) through
  // in-process mailboxes. Forward must give the unsplit block's output at
  // its tokens; backward the unsplit input gradient at its tokens, and the
  // parameter gradients summed over the ranks must be the unsplit block's
  // (each rank differentiates the loss over its own tokens only). With
  // grouped-query heads and qk-norm; then Mistral's window of 5 tokens.
  for (const std::string sig : {"llama.block:h=32,a=4,kv=2,d=8,f=64,qkvb=1,ob=0,mb=0,qkn=1",
                                "llama.block:h=32,a=4,kv=1,d=8,f=64,qkvb=0,ob=0,mb=0,qkn=0,sw=5"}) {
    INFO(sig);
    constexpr std::int64_t kSeq = 16;
    torch::manual_seed(7);
    const auto x = torch::randn({2, kSeq, 32});
    const auto weight = torch::randn({2, kSeq, 32});  // loss = sum(out * weight)
    torch::manual_seed(1);
    auto whole = models::make_torch_layer(sig);
    const auto xw = x.clone().requires_grad_(true);
    const auto want = whole->forward({xw});
    (want * weight).sum().backward();
    for (const int n : {2, 4}) {
      INFO("cp " << n);
      struct Mailbox {
        std::mutex mu;
        std::condition_variable cv;
        std::deque<torch::Tensor> q;
      };
      std::vector<Mailbox> fwd(n), bwd(n);
      std::vector<std::unique_ptr<models::TorchLayer>> layers;
      for (int r = 0; r < n; ++r) {
        models::ContextParallel cp;
        cp.rank = r;
        cp.size = n;
        cp.gather = [](const torch::Tensor& t, std::int64_t) { return t; };  // not called by the ring
        cp.shift = [&, r, n](const torch::Tensor& t, bool forward) {
          Mailbox& to = forward ? fwd[(r + 1) % n] : bwd[(r + n - 1) % n];
          {
            std::lock_guard<std::mutex> lock(to.mu);
            to.q.push_back(t.clone());
          }
          to.cv.notify_all();
          Mailbox& mine = forward ? fwd[r] : bwd[r];
          return std::function<torch::Tensor()>([&mine] {
            std::unique_lock<std::mutex> lock(mine.mu);
            mine.cv.wait(lock, [&] { return !mine.q.empty(); });
            torch::Tensor got = mine.q.front();
            mine.q.pop_front();
            return got;
          });
        };
        torch::manual_seed(1);
        layers.push_back(models::make_torch_layer(sig + ",cp=" + std::to_string(n), local_tp(0, 1), cp));
      }
      std::vector<torch::Tensor> outs(n), grads(n);
      std::vector<std::thread> threads;
      for (int r = 0; r < n; ++r) {
        threads.emplace_back([&, r] {
          const auto pos = models::cp_positions(kSeq, r, n);
          const auto xr = x.index_select(1, pos).requires_grad_(true);
          outs[r] = layers[r]->forward({xr});
          (outs[r] * weight.index_select(1, pos)).sum().backward();
          grads[r] = xr.grad();
        });
      }
      for (auto& t : threads) t.join();
      for (int r = 0; r < n; ++r) {
        INFO("rank " << r);
        const auto pos = models::cp_positions(kSeq, r, n);
        CHECK(torch::allclose(outs[r].detach(), want.detach().index_select(1, pos), 1e-5, 1e-6));
        CHECK(torch::allclose(grads[r], xw.grad().index_select(1, pos), 1e-5, 1e-6));
      }
      const auto named = whole->module().named_parameters();
      for (const auto& p : named) {
        INFO(p.key());
        torch::Tensor sum = torch::zeros_like(p.value());
        for (int r = 0; r < n; ++r) sum += layers[r]->module().named_parameters()[p.key()].grad();
        CHECK(torch::allclose(sum, p.value().grad(), 1e-4, 1e-5));
      }
    }
  }
  // Calibration's share (cp=2, no cpag: a local ring) runs forward and
  // backward on [b, s/2, h]; with cpag=1, a group running the ring is refused.
  auto share = models::make_torch_layer("llama.block:h=32,a=4,kv=2,d=8,f=64,qkvb=1,ob=0,mb=0,qkn=1,cp=2");
  const auto in = share->make_inputs(2, 16, torch::TensorOptions());
  const auto y = share->forward(in);
  y.sum().backward();
  CHECK(in[0].grad().sizes() == in[0].sizes());
  models::ContextParallel ring;
  ring.size = 2;
  ring.gather = [](const torch::Tensor& t, std::int64_t) { return t; };
  ring.shift = [](const torch::Tensor& t, bool) { return std::function<torch::Tensor()>([t] { return t; }); };
  CHECK(test::error_of([&] { models::make_torch_layer("llama.block:h=32,a=4,kv=2,d=8,f=64,qkvb=0,ob=0,mb=0,qkn=0,cp=2,cpag=1", local_tp(0, 1), ring); })
            .find("cpag=1 (the all-gather) but the group runs the p2p ring") != std::string::npos);
}

TEST_CASE("seed 003's models run end to end through their twins, layer feeding layer", "[torch][seed003]") {
  // Each layer's output is the next one's input, as dtsim validate chains
  // them; the analytic Layer::output_bytes at b = 1 in fp32 is a quarter of
  // the elements a twin's output has per sample.
  constexpr std::int64_t kBatch = 3;
  for (const char* name : {"cnn", "mlp", "conv-autoencoder", "vgg11-tiny", "nbow-tiny", "seq2seq-tiny"}) {
    const auto model = models::load_model(name);
    const std::int64_t seq = model->max_seq_len();
    sim::WorkloadShape one;
    one.micro_batch = 1;
    one.seq_len = seq;
    one.act_bytes = 4;
    const auto layers = model->layers(one);
    std::vector<std::unique_ptr<models::TorchLayer>> twins;
    for (const auto& l : layers) twins.push_back(models::make_torch_layer(l.signature));
    torch::manual_seed(1);
    const auto first = twins[0]->make_inputs(kBatch, seq, torch::TensorOptions().dtype(torch::kFloat));
    torch::Tensor x = twins[0]->forward(first);
    for (std::size_t i = 1; i < twins.size(); ++i) {
      INFO(name << " layer " << i << " " << layers[i].signature);
      CHECK(x.numel() * 4 == kBatch * layers[i - 1].output_bytes);
      auto in = twins[i]->make_inputs(kBatch, seq, torch::TensorOptions().dtype(torch::kFloat));
      CHECK(x.numel() == in[0].numel());
      in[0] = x;
      if (layers[i].signature.rfind("convt.layer", 0) == 0 && in.size() == 2) in[1] = first[0];  // the autoencoder's target
      x = twins[i]->forward(in);
    }
    INFO(name);
    REQUIRE(x.dim() == 0);  // the loss
    CHECK(std::isfinite(x.item<double>()));
    CHECK(x.item<double>() > 0);
    x.backward();
    for (auto& t : twins) {
      for (const auto& p : t->module().parameters()) {
        REQUIRE(p.grad().defined());
        CHECK(torch::isfinite(p.grad()).all().item<bool>());
      }
    }
  }
}

TEST_CASE("a GRU encoder-decoder's twins own the analytic parameters and train end to end", "[torch][seed003]") {
  // seq2seq-tiny with model.cell=gru: embed 32, hidden 64, 2 layers, vocabularies 256.
  const auto model = models::load_model("seq2seq-tiny", {sim::parse_override("model.cell=gru")});
  const auto layers = model->layers(small_shape(*model));
  REQUIRE(layers.size() == 2);
  std::vector<std::unique_ptr<models::TorchLayer>> twins;
  for (const auto& l : layers) {
    INFO(l.signature);
    twins.push_back(models::make_torch_layer(l.signature));
    CHECK(twins.back()->parameter_count() == l.params);
    CHECK(static_cast<int>(twins.back()->module().parameters().size()) == l.param_tensors);
    // nn.GRU's tensors: W_ih 3H x in, W_hh 3H x H, b_ih and b_hh 3H, per layer.
    const auto p = twins.back()->module().named_parameters();
    CHECK(p["rnn.weight_ih_l0"].sizes() == torch::IntArrayRef({192, 32}));
    CHECK(p["rnn.weight_hh_l0"].sizes() == torch::IntArrayRef({192, 64}));
    CHECK(p["rnn.weight_ih_l1"].sizes() == torch::IntArrayRef({192, 64}));
    CHECK(p["rnn.bias_hh_l1"].sizes() == torch::IntArrayRef({192}));
  }
  // By hand: the encoder's embedding 256 x 32 = 8,192 and GRUs 192 x 96 + 384
  // = 18,816 and 192 x 128 + 384 = 24,960; the decoder the same with fc_out
  // 64 x 256 + 256 = 16,640.
  CHECK(layers[0].params == 8192 + 18816 + 24960);
  CHECK(layers[1].params == 8192 + 18816 + 24960 + 16640);
  // The encoder hands on each layer's last hidden state, [L, b, hs], which
  // the decoder starts from.
  constexpr std::int64_t kBatch = 3;
  torch::manual_seed(1);
  const auto src = twins[0]->make_inputs(kBatch, 16, torch::TensorOptions());
  const auto states = twins[0]->forward(src);
  CHECK(states.sizes() == torch::IntArrayRef({2, kBatch, 64}));
  CHECK(states.numel() * 4 == kBatch * layers[0].output_bytes);
  auto in = twins[1]->make_inputs(kBatch, 16, torch::TensorOptions());
  CHECK(in[0].sizes() == states.sizes());
  in[0] = states;
  const auto loss = twins[1]->forward(in);
  REQUIRE(loss.dim() == 0);
  CHECK(std::isfinite(loss.item<double>()));
  loss.backward();
  for (auto& t : twins) {
    for (const auto& q : t->module().parameters()) {
      REQUIRE(q.grad().defined());
      CHECK(torch::isfinite(q.grad()).all().item<bool>());
    }
  }
  CHECK_THROWS_WITH(models::make_torch_layer("s2s.encoder:v=8,e=4,hs=4,l=1,drop=0,gru=2"), Catch::Contains("gru must be 0 or 1"));
}

TEST_CASE("batch norm's running statistics are the twin's buffers, updated in forward (Note [Running statistics])", "[torch][seed003]") {
  // vgg11-bn's 8 batch norms over 64 + 128 + 2 x 256 + 4 x 512 = 2,752
  // channels: running_mean and running_var 2 x 2,752 x 4 B = 22,016 in
  // fp32, and one int64 num_batches_tracked each, 64 B: 22,080 B.
  const auto model = models::load_model("vgg11-bn");
  sim::WorkloadShape w = small_shape(*model);
  const auto layers = model->layers(w);
  std::int64_t floats = 0, counts = 0, bns = 0;
  for (const auto& l : layers) {
    if (l.signature.find(",bn=1") == std::string::npos) continue;
    INFO(l.signature);
    ++bns;
    const auto twin = models::make_torch_layer(l.signature);
    std::int64_t layer_floats = 0;
    for (const auto& b : twin->module().named_buffers()) {
      const std::int64_t bytes = b.value().numel() * static_cast<std::int64_t>(b.value().element_size());
      if (b.value().is_floating_point()) {
        layer_floats += bytes;
      } else {
        CHECK(b.key().find("num_batches_tracked") != std::string::npos);
        counts += bytes;
      }
    }
    floats += layer_floats;
    // The analytic layer keeps exactly the twin's buffers resident
    // (sim::Layer::buffer_bytes): 2C x 4 B and the int64.
    CHECK(l.buffer_bytes == layer_floats + 8);
    // The analytic norm reads and writes them in forward: its kernel moves
    // 2 x (2C x 4 B) beside the activations' 3 e z (the input read twice,
    // the output once), and num_batches_tracked's increment 8 B each way.
    const auto name = l.name + ".bn";
    const auto bn = std::find_if(l.forward.begin(), l.forward.end(), [&](const sim::Kernel& k) { return k.name == name; });
    const auto inc = std::find_if(l.forward.begin(), l.forward.end(), [&](const sim::Kernel& k) { return k.name == name + ".num_batches_tracked"; });
    REQUIRE(bn != l.forward.end());
    REQUIRE(inc != l.forward.end());
    CHECK(inc < bn);
    const auto conv = std::find_if(l.forward.begin(), l.forward.end(), [&](const sim::Kernel& k) { return k.name == l.name + ".conv"; });
    REQUIRE(conv != l.forward.end());
    const std::int64_t z = conv->m * conv->n;  // the convolution's output elements
    CHECK(bn->bytes == 3 * 4 * z + 2 * layer_floats);
    CHECK(inc->bytes == 2 * 8);
    // Backward touches neither.
    for (const auto& k : l.backward) {
      CHECK(k.name.find("num_batches_tracked") == std::string::npos);
      if (k.name == name + ".bwd") CHECK(k.bytes == 2 * 3 * 4 * z);
    }
  }
  CHECK(bns == 8);
  CHECK(floats == 2 * 2752 * 4);
  CHECK(counts == 8 * 8);
  CHECK(floats + counts == 22'080);
  // And a prediction holds them on the GPU all along: vgg11-bn's prediction
  // without batch norm's buffers is 22,080 B lighter at every moment, so
  // its peak's resident buffers differ by exactly that (fp32, one rank).
  {
    const auto cluster = sim::load_cluster("1xh100");
    sim::PlanSpec plan = sim::load_plan("single", {sim::parse_override("plan.precision=fp32")});
    const auto with = sim::predict(*model, plan, cluster);
    class NoBuffers final : public sim::Model {
     public:
      explicit NoBuffers(const sim::Model& m) : m_(m) {}
      std::string name() const override { return m_.name(); }
      std::int64_t parameters() const override { return m_.parameters(); }
      int blocks() const override { return m_.blocks(); }
      std::int64_t max_seq_len() const override { return m_.max_seq_len(); }
      std::string tp_error(int tp) const override { return m_.tp_error(tp); }
      Flops model_flops(const sim::WorkloadShape& s) const override { return m_.model_flops(s); }
      std::vector<sim::Layer> layers(const sim::WorkloadShape& s) const override {
        auto out = m_.layers(s);
        for (auto& l : out) l.buffer_bytes = 0;
        return out;
      }
     private:
      const sim::Model& m_;
    } without(*model);
    const auto bare = sim::predict(without, plan, cluster);
    REQUIRE(with.ranks.size() == 1);
    CHECK(with.ranks[0].peak - bare.ranks[0].peak == 22'080);
  }

  // One forward in training mode moves them: vgg11-tiny's first batch norm.
  const auto tiny = models::load_model("vgg11-tiny", {sim::parse_override("model.batch_norm=true")});
  auto twin = models::make_torch_layer(tiny->layers(small_shape(*tiny))[0].signature);
  twin->module().train();
  torch::manual_seed(1);
  twin->forward(twin->make_inputs(2, 1, torch::TensorOptions()));
  const auto buffers = twin->module().named_buffers();
  CHECK(buffers["bn.num_batches_tracked"].item<std::int64_t>() == 1);
  CHECK(buffers["bn.running_mean"].abs().sum().item<double>() > 0);
}

TEST_CASE("seed 003's layer signatures refuse what cannot run", "[torch][seed003][bad-input]") {
  CHECK_THROWS_WITH(models::make_torch_layer("conv.layer:ci=3,co=6,k=5,s=1,p=0,hw=4,bn=0,act=1,pool=2"),
                    Catch::Contains("k <= hw + 2p"));
  CHECK_THROWS_WITH(models::make_torch_layer("s2s.encoder:v=8,e=4,hs=4,l=0,drop=0"), Catch::Contains("l must be positive"));
}

TEST_CASE("Gated DeltaNet's twin: the chunked rule equals the recurrence, causal, and owns the analytic parameters (Note [Gated DeltaNet])",
          "[torch][llama][gdn]") {
  torch::manual_seed(3);
  // 2 key heads serving 4 value heads of 8, 4 taps, chunks of 64 over 70
  // tokens (two chunks, the second padded).
  const std::int64_t h = 32, kh = 2, vh = 4, dk = 8, dv = 8, ck = 4, b = 2, s = 70;
  auto layer = models::make_torch_layer("llama.block:gdn=1,h=32,kh=2,vh=4,dk=8,dv=8,ck=4,f=64,qkvb=0,ob=0,mb=0,qkn=1,zc=1,og=1");
  // in_proj (q, k, v, z; b, a), conv, dt_bias and A_log, the gated norm,
  // out_proj; two norms; the MLP.
  const std::int64_t kd = kh * dk, vd = vh * dv, channels = 2 * kd + vd;
  CHECK(layer->parameter_count() == h * (2 * kd + 2 * vd) + h * 2 * vh + channels * ck + 2 * vh + dv + vd * h + 2 * h + 3 * h * 64);
  std::map<std::string, torch::Tensor> p;
  for (const auto& item : layer->module().named_parameters()) p[item.key()] = item.value();
  for (const char* name : {"q_proj.weight", "k_proj.weight", "o_proj.weight", "q_norm.weight"}) CHECK(p.count(name) == 0);
  {
    torch::NoGradGuard no_grad;
    p["down_proj.weight"].zero_();  // the block is then x + GDN(norm(x))
    p["linear_attn.norm"].uniform_(0.5, 1.5);
    p["linear_attn.dt_bias"].uniform_(-1, 1);
  }
  const auto x = torch::randn({b, s, h}).requires_grad_(true);
  const auto y = layer->forward({x});
  // The reference: Qwen3NextRMSNorm (weight 0, so times 1) in fp32, the
  // projections and convolution, then HF's recurrent form
  // (torch_recurrent_gated_delta_rule), token by token, with autograd.
  const auto xn = x * torch::rsqrt(x.pow(2).mean(-1, true) + 1e-5);
  const auto qkvz = torch::matmul(xn, p["linear_attn.in_proj_qkvz.weight"].t());
  const auto ba = torch::matmul(xn, p["linear_attn.in_proj_ba.weight"].t());
  const auto conv = torch::conv1d(qkvz.narrow(-1, 0, channels).transpose(1, 2), p["linear_attn.conv1d"], {}, 1, ck - 1, 1, channels)
                        .narrow(-1, 0, s);
  const auto mixed = torch::silu(conv).transpose(1, 2);
  const auto l2 = [](const torch::Tensor& t) { return t / torch::sqrt((t * t).sum(-1, true) + 1e-6); };
  const auto q = l2(mixed.narrow(-1, 0, kd).reshape({b, s, kh, dk})).repeat_interleave(vh / kh, 2) / std::sqrt(8.0);
  const auto k = l2(mixed.narrow(-1, kd, kd).reshape({b, s, kh, dk})).repeat_interleave(vh / kh, 2);
  const auto v = mixed.narrow(-1, 2 * kd, vd).reshape({b, s, vh, dv});
  const auto z = qkvz.narrow(-1, channels, vd).reshape({b, s, vh, dv});
  const auto beta = torch::sigmoid(ba.narrow(-1, 0, vh));
  const auto g = -p["linear_attn.A_log"].exp() * torch::softplus(ba.narrow(-1, vh, vh) + p["linear_attn.dt_bias"]);
  auto state = torch::zeros({b, vh, dk, dv});
  std::vector<torch::Tensor> outs;
  for (std::int64_t i = 0; i < s; ++i) {
    state = state * g.select(1, i).exp().view({b, vh, 1, 1});
    const auto ki = k.select(1, i), vi = v.select(1, i), qi = q.select(1, i);
    const auto memory = (state * ki.unsqueeze(-1)).sum(-2);
    const auto delta = (vi - memory) * beta.select(1, i).unsqueeze(-1);
    state = state + ki.unsqueeze(-1) * delta.unsqueeze(-2);
    outs.push_back((state * qi.unsqueeze(-1)).sum(-2));
  }
  const auto o = torch::stack(outs, 1);  // [b, s, vh, dv]
  const auto normed = o * torch::rsqrt(o.pow(2).mean(-1, true) + 1e-6) * p["linear_attn.norm"] * torch::silu(z);
  const auto want = x + torch::matmul(normed.reshape({b, s, vd}), p["linear_attn.out_proj.weight"].t());
  CHECK(torch::allclose(y, want, 1e-4, 1e-4));
  // Backward (Note [The twin's gated delta rule]: what FLA keeps, the rest
  // recomputed, A's gradient by hand) gives autograd's gradients through
  // the recurrence: the input's and every GDN parameter's.
  const auto weight = torch::randn({b, s, h});
  const std::vector<torch::Tensor> wrt{x, p["linear_attn.in_proj_qkvz.weight"], p["linear_attn.in_proj_ba.weight"], p["linear_attn.conv1d"],
                                       p["linear_attn.dt_bias"], p["linear_attn.A_log"], p["linear_attn.norm"]};
  const auto got = torch::autograd::grad({(y * weight).sum()}, wrt);
  const auto expected = torch::autograd::grad({(want * weight).sum()}, wrt);
  for (std::size_t i = 0; i < wrt.size(); ++i) {
    INFO("gradient " << i);
    CHECK(torch::allclose(got[i], expected[i], 1e-3, 1e-4));
  }
  torch::NoGradGuard no_grad;
  // Causal: a change at token 50 leaves tokens 0-49 as they were, and moves 50-69.
  auto x2 = x.clone();
  x2.select(1, 50).add_(1.0);
  const auto y2 = layer->forward({x2});
  CHECK(torch::equal(y2.narrow(1, 0, 50), y.narrow(1, 0, 50)));
  CHECK((y2.narrow(1, 50, 20) - y.narrow(1, 50, 20)).abs().max().item<double>() > 1e-3);
  // tiny models with GDN layers (every other layer) own the analytic parameters, dense and MoE.
  const std::vector<std::string> gdn{"model.full_attention_interval=2", "model.linear_key_heads=2", "model.linear_value_heads=4",
                                     "model.linear_key_dim=8", "model.linear_value_dim=16", "model.zero_centered_norms=true",
                                     "model.attn_output_gate=true", "model.qk_norm=true"};
  check_twins_own_params("llama-tiny", gdn);
  check_twins_own_params("moe-tiny", gdn);
  // With biases on q, k and v: a gated q_proj's bias is 2 a d wide.
  std::vector<std::string> biased = gdn;
  biased.push_back("model.qkv_bias=true");
  check_twins_own_params("llama-tiny", biased);
  // OLMo 2's and Gemma's norms are no GDN block's (its input norm is the block's).
  CHECK_THROWS_WITH(models::make_torch_layer("llama.block:gdn=1,h=32,kh=2,vh=4,dk=8,dv=8,ck=4,f=64,qkvb=0,ob=0,mb=0,qkn=1,on=1"),
                    Catch::Contains("a Gated DeltaNet layer with gn, on or mla is not a block any model has"));
  // Split over tp it does not run here (the analytic model splits its heads).
  CHECK_THROWS_WITH(models::make_torch_layer("llama.block:gdn=1,h=32,kh=2,vh=4,dk=8,dv=8,ck=4,f=64,qkvb=0,ob=0,mb=0,qkn=1,zc=1,tp=2"),
                    Catch::Contains("Gated DeltaNet layers run at tp 1 and cp 1 in the LibTorch twin"));
}

TEST_CASE("a gated attention output multiplies each head by sigmoid of its gate before o_proj (Note [Gated DeltaNet])", "[torch][llama][gdn]") {
  torch::manual_seed(4);
  auto layer = models::make_torch_layer("llama.block:h=32,a=4,kv=2,d=8,f=64,qkvb=0,ob=0,mb=0,qkn=0,og=1");
  auto plain = models::make_torch_layer("llama.block:h=32,a=4,kv=2,d=8,f=64,qkvb=0,ob=0,mb=0,qkn=0");
  // q_proj writes, per head, its 8 query rows then its 8 gate rows.
  CHECK(layer->parameter_count() == plain->parameter_count() + 32 * 32);
  std::map<std::string, torch::Tensor> a, c;
  for (const auto& item : layer->module().named_parameters()) a[item.key()] = item.value();
  for (const auto& item : plain->module().named_parameters()) c[item.key()] = item.value();
  torch::NoGradGuard no_grad;
  for (auto& [name, w] : c) {
    if (name != "q_proj.weight") w.copy_(a[name]);
  }
  const auto qg = a["q_proj.weight"].view({4, 2, 8, 32});
  c["q_proj.weight"].copy_(qg.select(1, 0).reshape({32, 32}));
  // Zero gate rows make every gate sigmoid(0) = 1/2: o_proj's input
  // halved, which the plain block with o_proj halved computes too.
  const auto x = torch::randn({2, 8, 32});
  qg.select(1, 1).zero_();
  const auto half = layer->forward({x});
  c["o_proj.weight"].mul_(0.5);
  CHECK(torch::allclose(half, plain->forward({x}), 1e-5, 1e-5));
}

TEST_CASE("Mamba-2's twin: the chunked scan equals the recurrence, causal, and owns the analytic parameters (Note [Mamba-2])",
          "[torch][llama][mamba]") {
  torch::manual_seed(5);
  // 4 heads of 8 in 2 groups of state 4, 4 taps, chunks of 16 over 40
  // tokens (three chunks, the last padded); the mixer alone (part=1).
  const std::int64_t h = 32, H = 4, P = 8, N = 4, G = 2, ck = 4, b = 2, s = 40;
  auto layer = models::make_torch_layer("llama.block:mamba=1,h=32,mh=4,mp=8,mn=4,mg=2,ck=4,mq=16,f=64,qkvb=0,ob=0,mb=0,qkn=0,relu2=1,part=1");
  // in_proj (z, x, B, C, dt), the convolution with its bias, dt_bias, A_log
  // and D, the gated norm, out_proj; the layer's norm; no MLP.
  const std::int64_t di = H * P, channels = di + 2 * G * N;
  CHECK(layer->parameter_count() == h * (2 * di + 2 * G * N + H) + channels * (ck + 1) + 3 * H + di + di * h + h);
  std::map<std::string, torch::Tensor> p;
  for (const auto& item : layer->module().named_parameters()) p[item.key()] = item.value();
  for (const char* name : {"q_proj.weight", "up_proj.weight", "post_attention_layernorm.weight"}) CHECK(p.count(name) == 0);
  {
    torch::NoGradGuard no_grad;
    p["mixer.norm"].uniform_(0.5, 1.5);
    p["mixer.D"].uniform_(0.5, 1.5);
  }
  const auto x = torch::randn({b, s, h}).requires_grad_(true);
  const auto y = layer->forward({x});
  // The reference: the RMSNorm, in_proj, the causal convolution and SiLU
  // over x, B and C, dt = softplus(dt + dt_bias), then the recurrence token
  // by token (each head's P x N state decays by exp(dt A), takes dt x B^T,
  // and is read by C), D's skip, the gate silu(z), the grouped RMSNorm
  // (16 channels a group), out_proj and the residual.
  const auto xn = x * torch::rsqrt(x.pow(2).mean(-1, true) + 1e-5);
  const auto zxbcdt = torch::matmul(xn, p["mixer.in_proj.weight"].t());
  const auto conv = torch::conv1d(zxbcdt.narrow(-1, di, channels).transpose(1, 2), p["mixer.conv1d_weight"], p["mixer.conv1d_bias"], 1, ck - 1,
                                  1, channels)
                        .narrow(-1, 0, s);
  const auto mixed = torch::silu(conv).transpose(1, 2);
  const auto xs = mixed.narrow(-1, 0, di).reshape({b, s, H, P});
  const auto B = mixed.narrow(-1, di, G * N).reshape({b, s, G, N}).repeat_interleave(H / G, 2);
  const auto C = mixed.narrow(-1, di + G * N, G * N).reshape({b, s, G, N}).repeat_interleave(H / G, 2);
  const auto dt = torch::softplus(zxbcdt.narrow(-1, 2 * di + 2 * G * N, H) + p["mixer.dt_bias"]);
  const auto A = -p["mixer.A_log"].exp();
  auto state = torch::zeros({b, H, P, N});
  std::vector<torch::Tensor> outs;
  for (std::int64_t i = 0; i < s; ++i) {
    const auto dti = dt.select(1, i);  // [b, H]
    state = state * (dti * A).exp().view({b, H, 1, 1}) +
            (dti.unsqueeze(-1) * xs.select(1, i)).unsqueeze(-1) * B.select(1, i).unsqueeze(-2);
    outs.push_back((state * C.select(1, i).unsqueeze(-2)).sum(-1) + p["mixer.D"].view({1, H, 1}) * xs.select(1, i));
  }
  const auto gated = torch::stack(outs, 1).reshape({b, s, di}) * torch::silu(zxbcdt.narrow(-1, 0, di));
  const auto grouped = gated.view({b, s, G, di / G});
  const auto normed = (grouped * torch::rsqrt(grouped.pow(2).mean(-1, true) + 1e-5)).view({b, s, di}) * p["mixer.norm"];
  const auto want = x + torch::matmul(normed, p["mixer.out_proj.weight"].t());
  CHECK(torch::allclose(y, want, 1e-4, 1e-4));
  // Backward (Note [The twin's Mamba-2 scan]: in_proj's output and y kept,
  // the rest recomputed) gives autograd's gradients through the recurrence.
  const auto weight = torch::randn({b, s, h});
  const std::vector<torch::Tensor> wrt{x, p["mixer.in_proj.weight"], p["mixer.conv1d_weight"], p["mixer.conv1d_bias"], p["mixer.dt_bias"],
                                       p["mixer.A_log"], p["mixer.D"], p["mixer.norm"], p["mixer.out_proj.weight"]};
  const auto got = torch::autograd::grad({(y * weight).sum()}, wrt);
  const auto expected = torch::autograd::grad({(want * weight).sum()}, wrt);
  for (std::size_t i = 0; i < wrt.size(); ++i) {
    INFO("gradient " << i);
    CHECK(torch::allclose(got[i], expected[i], 1e-3, 1e-4));
  }
  torch::NoGradGuard no_grad;
  // Causal: a change at token 25 leaves tokens 0-24 as they were, and moves 25-39.
  auto x2 = x.clone();
  x2.select(1, 25).add_(1.0);
  const auto y2 = layer->forward({x2});
  CHECK(torch::equal(y2.narrow(1, 0, 25), y.narrow(1, 0, 25)));
  CHECK((y2.narrow(1, 25, 15) - y.narrow(1, 25, 15)).abs().max().item<double>() > 1e-3);
  // The MLP alone (part=2): its norm, then down(relu(up(x))^2), no gate.
  auto mlp = models::make_torch_layer("llama.block:h=32,a=4,kv=2,d=8,f=64,qkvb=0,ob=0,mb=0,qkn=0,nope=1,relu2=1,part=2");
  CHECK(mlp->parameter_count() == h + 2 * h * 64);
  std::map<std::string, torch::Tensor> q;
  for (const auto& item : mlp->module().named_parameters()) q[item.key()] = item.value();
  const auto z = torch::randn({b, 8, h});
  const auto zn = z * torch::rsqrt(z.pow(2).mean(-1, true) + 1e-5);
  const auto up = torch::relu(torch::matmul(zn, q["up_proj.weight"].t()));
  CHECK(torch::allclose(mlp->forward({z}), z + torch::matmul(up * up, q["down_proj.weight"].t()), 1e-5, 1e-5));
  // nemotron-h-tiny's twins own the analytic parameters: Mamba, the MLP,
  // attention without rotary, the MoE of squared-ReLU experts.
  check_twins_own_params("nemotron-h-tiny", {});
  // Split over tp it does not run here (the analytic model splits its heads).
  CHECK_THROWS_WITH(models::make_torch_layer("llama.block:mamba=1,h=32,mh=4,mp=8,mn=4,mg=2,ck=4,mq=16,f=64,qkvb=0,ob=0,mb=0,qkn=0,part=1,tp=2"),
                    Catch::Contains("Mamba-2 layers run at tp 1 and cp 1 in the LibTorch twin"));
  CHECK_THROWS_WITH(models::make_torch_layer("llama.block:mamba=1,h=32,mh=4,mp=8,mn=4,mg=3,ck=4,mq=16,f=64,qkvb=0,ob=0,mb=0,qkn=0,part=1"),
                    Catch::Contains("mh must be a multiple of mg"));
}

TEST_CASE("Granite 4.0-H's twin: a block whose mixer is Mamba-2, then the experts, owns the analytic parameters (Note [Mamba-2])",
          "[torch][llama][mamba]") {
  // moe-tiny's two blocks as Granite 4.0-H's: the first mixing through
  // Mamba-2 (4 heads of 64, one group of state 16), the second attending
  // without positions; Granite's scalars; SwiGLU experts and a shared MLP.
  const std::vector<std::string> granite{"model.layer_mixers=M*", "model.mamba_head_dim=64", "model.mamba_groups=1",
                                         "model.mamba_state=16", "model.mamba_chunk=32", "model.rotary=false",
                                         "model.shared_intermediate=96", "model.residual_multiplier=0.5",
                                         "model.embedding_multiplier=2", "model.logits_scaling=2"};
  check_twins_own_params("moe-tiny", granite);
  std::vector<sim::Override> overrides;
  for (const auto& o : granite) overrides.push_back(sim::parse_override(o));
  const auto model = models::load_model("moe-tiny", overrides);
  sim::WorkloadShape w;
  w.micro_batch = 2;
  w.seq_len = 40;
  const auto block = model->layers(w)[1];
  REQUIRE(block.signature.rfind("moe.block:mamba=1,", 0) == 0);
  // The block runs: its input norm, the mixer, the residual, then the norm and the MoE.
  auto twin = models::make_torch_layer(block.signature);
  torch::manual_seed(6);
  const auto x = torch::randn({2, 40, 128}).requires_grad_(true);
  const auto y = twin->forward({x});
  CHECK(y.sizes() == x.sizes());
  y.sum().backward();
  CHECK(x.grad().abs().sum().item<double>() > 0);
}

TEST_CASE("DeepSeek-V3.2's twin: the indexer's choice and the absorbed attention over it, by hand (Note [The twin's sparse attention])",
          "[torch][llama][dsa]") {
  // deepseek-tiny's dense block with an indexer of 2 heads of 16 picking 4 keys.
  const std::string sig = "llama.block:mla=1,h=128,a=4,qr=64,kvr=32,dn=32,dr=16,dv=32,dsa=4,ih=2,id=16,il=1,f=352,qkvb=0,ob=0,mb=0,qkn=0";
  // The indexer: wq_b 64 x 2 x 16, wk 128 x 16, k_norm 2 x 16, weights_proj 128 x 2.
  CHECK(count(sig) == count(kMlaBlock) + 2'048 + 2'048 + 32 + 256);
  torch::manual_seed(11);
  auto layer = models::make_torch_layer(sig);
  const std::int64_t b = 2, s = 7, a = 4;
  const auto x = torch::randn({b, s, 128}).requires_grad_(true);
  const auto y = layer->forward({x});
  auto p = layer->module().named_parameters();
  const auto rms = [](const torch::Tensor& t, const torch::Tensor& w) { return w * (t * torch::rsqrt(t.pow(2).mean(-1, true) + 1e-5)); };
  const auto lin = [&](const torch::Tensor& t, const std::string& name) { return torch::matmul(t, p[name + ".weight"].t()); };
  // The reference, from the weights: the indexer's scores (rotary on its
  // first 16 channels, which are all of them here, then the orthonormal
  // Hadamard matrix of 16), the 4 best earlier keys of each query, then
  // DeepseekV3Attention's scores masked to them (the unabsorbed form: the
  // absorption must change nothing).
  const auto xr = x.detach().clone().requires_grad_(true);
  const auto xn = rms(xr, p["input_layernorm.weight"]);
  const auto ql = rms(lin(xn, "q_a_proj"), p["q_a_layernorm.weight"]);
  torch::Tensor keep;
  {
    torch::NoGradGuard no_grad;
    auto hd = torch::ones({1, 1});
    while (hd.size(0) < 16) hd = torch::cat({torch::cat({hd, hd}, 1), torch::cat({hd, -hd}, 1)}, 0);
    hd = hd / 4.0;
    const auto iq = torch::matmul(rope_ref(lin(ql, "indexer.wq_b").view({b, s, 2, 16})), hd);
    const auto kn = torch::layer_norm(lin(xn, "indexer.wk"), {16}, p["indexer.k_norm.weight"], p["indexer.k_norm.bias"]);
    const auto ik = torch::matmul(rope_ref(kn.view({b, s, 1, 16})).squeeze(2), hd);
    const auto iw = lin(xn, "indexer.weights_proj") / std::sqrt(32.0);
    auto scores = (torch::relu(torch::einsum("bihd,bjd->bihj", {iq, ik})) * iw.unsqueeze(-1)).sum(2);  // [b, s, s]
    const auto future = torch::ones({s, s}).triu(1).to(torch::kBool);
    scores = scores.masked_fill(future, -std::numeric_limits<double>::infinity());
    const auto top = std::get<1>(scores.topk(4, -1));
    keep = torch::zeros({b, s, s}, torch::kBool).scatter(2, top, true).logical_and(future.logical_not());
  }
  // Each query attends to min(4, its position + 1) keys.
  CHECK(keep.sum().item<std::int64_t>() == b * (1 + 2 + 3 + 4 + 4 + 4 + 4));
  const auto q = lin(ql, "q_b_proj").view({b, s, a, 48});
  const auto ckv = lin(xn, "kv_a_proj_with_mqa");
  const auto kv = lin(rms(ckv.narrow(-1, 0, 32), p["kv_a_layernorm.weight"]), "kv_b_proj").view({b, s, a, 64});
  const auto q_pe = rope_ref(q.narrow(-1, 32, 16)), k_pe = rope_ref(ckv.narrow(-1, 32, 16).view({b, s, 1, 16}));
  auto att = (torch::einsum("bihd,bjhd->bhij", {q.narrow(-1, 0, 32), kv.narrow(-1, 0, 32)}) +
              torch::einsum("bihd,bjd->bhij", {q_pe, k_pe.squeeze(2)})) / std::sqrt(48.0);
  att = att.masked_fill(keep.logical_not().unsqueeze(1), -std::numeric_limits<double>::infinity());
  const auto ctx = torch::einsum("bhij,bjhd->bihd", {torch::softmax(att, -1), kv.narrow(-1, 32, 32)}).reshape({b, s, a * 32});
  const auto h1 = xr + lin(ctx, "o_proj");
  const auto z = rms(h1, p["post_attention_layernorm.weight"]);
  const auto want = h1 + lin(torch::silu(lin(z, "gate_proj")) * lin(z, "up_proj"), "down_proj");
  CHECK(torch::allclose(y, want, 1e-4, 1e-5));
  // Backward through SparseMla's recomputation equals autograd's through
  // the reference (the indexer's loss reaches the indexer alone).
  const auto g = torch::randn_like(y);
  y.backward(g);
  const auto ref = torch::autograd::grad({want}, {xr, p["kv_b_proj.weight"], p["q_a_proj.weight"]}, {g});
  CHECK(torch::allclose(x.grad(), ref[0], 1e-4, 1e-5));
  CHECK(torch::allclose(p["kv_b_proj.weight"].grad(), ref[1], 1e-4, 1e-5));
  CHECK(torch::allclose(p["q_a_proj.weight"].grad(), ref[2], 1e-4, 1e-5));
  // The loss trained the indexer: its weights have gradients.
  for (const char* w : {"indexer.wq_b.weight", "indexer.wk.weight", "indexer.weights_proj.weight", "indexer.k_norm.weight"}) {
    INFO(w);
    REQUIRE(p[w].grad().defined());
    CHECK(p[w].grad().abs().sum().item<double>() > 0);
  }
  // Without a loss (il=0) nothing reaches them; with every key chosen
  // (topk >= s) the layer is DeepSeek-V3's dense one with the same weights.
  std::string none = sig;
  none.replace(none.find("il=1"), 4, "il=0");
  auto quiet = models::make_torch_layer(none);
  auto dense = models::make_torch_layer(kMlaBlock);
  {
    torch::NoGradGuard no_grad;
    auto from = layer->module().named_parameters();
    for (auto& item : quiet->module().named_parameters()) item.value().copy_(from[item.key()]);
    for (auto& item : dense->module().named_parameters()) item.value().copy_(from[item.key()]);
  }
  const auto xq = torch::randn({b, s, 128});
  quiet->forward({xq}).sum().backward();
  CHECK_FALSE(quiet->module().named_parameters()["indexer.wq_b.weight"].grad().defined());
  std::string all = sig;
  all.replace(all.find("dsa=4"), 5, "dsa=7");
  auto wide = models::make_torch_layer(all);
  {
    torch::NoGradGuard no_grad;
    auto from = layer->module().named_parameters();
    for (auto& item : wide->module().named_parameters()) item.value().copy_(from[item.key()]);
    CHECK(torch::allclose(wide->forward({xq}), dense->forward({xq}), 1e-4, 1e-5));
  }
  // What it does not run, or cannot.
  std::string shared = sig + ",ix=0";
  CHECK_THROWS_WITH(models::make_torch_layer(shared), Catch::Contains("ix=0, a layer reusing another layer's top-k, is priced, not run"));
  std::string masked = sig + ",dk=1";
  CHECK_THROWS_WITH(models::make_torch_layer(masked), Catch::Contains("dk=1, Megatron-Core's dense DSA kernels, is priced, not run"));
  CHECK_THROWS_WITH(models::make_torch_layer(sig + ",tp=2,sp=1"), Catch::Contains("DeepSeek Sparse Attention runs at tp 1 and cp 1"));
  std::string odd = sig;
  odd.replace(odd.find("id=16"), 5, "id=24");
  CHECK_THROWS_WITH(models::make_torch_layer(odd), Catch::Contains("id must be a power of two"));
}

TEST_CASE("LatentMoE's twin: routed on h, its experts on the latent width, projected back beside the shared expert, by hand (Note [Latent MoE])",
          "[torch][llama][moe][latent]") {
  check_twins_own_params("nemotron-h-tiny", {"model.moe_latent=64"});
  const auto model = models::load_model("nemotron-h-tiny", {sim::parse_override("model.moe_latent=64")});
  sim::WorkloadShape w;
  w.micro_batch = 2;
  w.seq_len = 8;
  // nemotron-h-tiny's pattern M-*ME-: its fifth layer, after the embedding, is the MoE.
  const auto moe = model->layers(w)[5];
  REQUIRE(moe.signature.find(",ml=64") != std::string::npos);
  // Its norm 128, the router 128 x 4, fc1_latent_proj 128 x 64 and
  // fc2_latent_proj 64 x 128, four experts' up 64 x 176 and down 176 x 64,
  // the shared expert's up 128 x 176 and down 176 x 128: 152,192.
  CHECK(moe.params == 128 + 128 * 4 + 2 * 128 * 64 + 4 * 2 * 64 * 176 + 2 * 128 * 176);
  CHECK(moe.params == 152'192);
  auto twin = models::make_torch_layer(moe.signature);
  CHECK(static_cast<int>(twin->module().parameters().size()) == moe.param_tensors);
  std::map<std::string, torch::Tensor> p;
  std::string norm;
  for (const auto& item : twin->module().named_parameters()) {
    p[item.key()] = item.value();
    if (item.key().find("layernorm") != std::string::npos) norm = item.key();
  }
  REQUIRE(!norm.empty());
  torch::manual_seed(5);
  torch::NoGradGuard no_grad;
  const auto x = torch::randn({2, 8, 128});
  const auto lin = [&](const torch::Tensor& t, const std::string& name) { return torch::matmul(t, p.at(name).t()); };
  // The reference: the norm, the router's softmax on h and its top 2 of 4
  // renormalised, the tokens projected to 64, each chosen expert's squared
  // ReLU MLP on them weighted, the sum projected back to 128, plus the
  // shared expert on h and the residual.
  const auto z = x * torch::rsqrt(x.pow(2).mean(-1, true) + 1e-5) * p.at(norm);
  const auto probs = torch::softmax(lin(z, "block_sparse_moe.gate.weight").to(torch::kFloat), -1);
  auto [top, chosen] = probs.topk(2, -1);
  top = top / top.sum(-1, true);
  const auto low = lin(z, "block_sparse_moe.fc1_latent_proj.weight");
  REQUIRE(low.size(-1) == 64);
  auto routed = torch::zeros_like(low);
  for (int e = 0; e < 4; ++e) {
    const std::string n = "block_sparse_moe.experts_" + std::to_string(e) + "_";
    const auto y = lin(torch::relu(lin(low, n + "w1")).pow(2), n + "w2");
    const auto weight = (top * (chosen == e).to(top.scalar_type())).sum(-1, true);  // 0 where e was not chosen
    routed = routed + weight * y;
  }
  const auto shared = lin(torch::relu(lin(z, "block_sparse_moe.shared_expert_up_proj.weight")).pow(2), "block_sparse_moe.shared_expert_down_proj.weight");
  const auto want = x + lin(routed, "block_sparse_moe.fc2_latent_proj.weight") + shared;
  CHECK(torch::allclose(twin->forward({x}), want, 1e-4, 1e-4));
}

namespace {
/// Rotary of x [b, n, heads, d] at positions `pos` [n] (as rope_ref, any positions).
torch::Tensor rope_at(const torch::Tensor& x, const torch::Tensor& pos) {
  const auto n = x.size(1), d = x.size(3);
  const auto inv = 1.0 / torch::pow(500000.0, torch::arange(0, d, 2, torch::kFloat) / static_cast<double>(d));
  const auto ang = torch::outer(pos.to(torch::kFloat), inv);
  const auto cos = torch::cat({ang, ang}, -1).cos().view({1, n, 1, d}), sin = torch::cat({ang, ang}, -1).sin().view({1, n, 1, d});
  return x * cos + torch::cat({-x.narrow(-1, d / 2, d / 2), x.narrow(-1, 0, d / 2)}, -1) * sin;
}
/// Rotary on the last r channels of x [b, n, heads, d].
torch::Tensor rope_tail(const torch::Tensor& x, const torch::Tensor& pos, std::int64_t r) {
  const auto d = x.size(3);
  return torch::cat({x.narrow(-1, 0, d - r), rope_at(x.narrow(-1, d - r, r), pos)}, -1);
}
}  // namespace

TEST_CASE("DeepSeek-V4's twin: the window, the compressed entries, the sink and the grouped output against a reference from the weights "
          "(Note [The twin's DeepSeek-V4])",
          "[torch][llama][dsv4]") {
  // A dense block (the MLP SwiGLU 64) of deepseek-v4-tiny's attention at
  // ratio 128: h 128, 4 heads of 32 (8 rotary), q latent 32, window 4, 2
  // output groups of rank 16.
  const std::string sig = "llama.block:v4=1,h=128,a=4,qr=32,d=32,dr=8,cr=128,og=2,or=16,f=64,qkvb=0,ob=0,mb=0,qkn=0,sw=4";
  // wq_a 128 x 32, q_layernorm 32, wq_b 32 x 128, wkv 128 x 32, kv_layernorm
  // 32, wo_a 2 x 16 x 64, wo_b 32 x 128, sinks 4; the compressor's wkv and
  // wgate 128 x 32 each, ape 128 x 32, norm 32; the MLP 3 x 128 x 64, two norms.
  CHECK(count(sig) == 4'096 + 32 + 4'096 + 4'096 + 32 + 2'048 + 4'096 + 4 + 8'192 + 4'096 + 32 + 3 * 8'192 + 256);
  torch::manual_seed(5);
  auto layer = models::make_torch_layer(sig);
  auto p = layer->module().named_parameters();
  {
    torch::NoGradGuard no_grad;
    p["attn_sink"].normal_(0.0, 1.0);  // a sink that matters
  }
  // 260 tokens: entries of tokens 0-127 and 128-255 (the last 4 dropped),
  // seen from queries 127 and 255 on.
  const std::int64_t b = 1, s = 260, a = 4, d = 32, m = 2;
  const auto x = torch::randn({b, s, 128}).requires_grad_(true);
  const auto y = layer->forward({x});
  const auto rms = [](const torch::Tensor& t, const torch::Tensor& w, double eps) { return w * (t * torch::rsqrt(t.pow(2).mean(-1, true) + eps)); };
  const auto lin = [&](const torch::Tensor& t, const std::string& name) { return torch::matmul(t, p[name + ".weight"].t()); };
  const auto xr = x.detach().clone().requires_grad_(true);
  const auto pos = torch::arange(s);
  const auto xn = rms(xr, p["input_layernorm.weight"], 1e-5);
  auto q = lin(rms(lin(xn, "q_a_proj"), p["q_a_layernorm.weight"], 1e-5), "q_b_proj").view({b, s, a, d});
  q = rope_tail(q * torch::rsqrt(q.pow(2).mean(-1, true) + 1e-6), pos, 8);
  const auto kv = rope_tail(rms(lin(xn, "wkv"), p["kv_a_layernorm.weight"], 1e-5).view({b, s, 1, d}), pos, 8).view({b, s, d});
  // The compressor: each 128 tokens weighted by softmax(wgate + ape) over
  // them, channel by channel; normed; rotary at the entry's first token.
  const auto ck = lin(xn, "compressor.wkv").narrow(1, 0, m * 128).view({b, m, 128, d});
  const auto cw = torch::softmax((lin(xn, "compressor.wgate").narrow(1, 0, m * 128).view({b, m, 128, d}) + p["compressor.ape"]), 2);
  const auto entries = rope_tail(rms((ck * cw).sum(2), p["compressor.norm.weight"], 1e-5).view({b, m, 1, d}), torch::arange(m) * 128, 8).view({b, m, d});
  const auto key = torch::cat({kv, entries}, 1);  // [b, s + m, d], keys and values
  // Query i sees tokens i - 3 to i and entries j with (j + 1) x 128 <= i + 1.
  const auto i = pos.view({s, 1});
  const auto raw = torch::arange(s).view({1, s}), entry = torch::arange(m).view({1, m});
  const auto seen = torch::cat({(raw <= i) & (raw > i - 4), (entry + 1) * 128 <= i + 1}, 1);  // [s, s + m]
  auto att = torch::einsum("bihd,bjd->bhij", {q, key}) / std::sqrt(static_cast<double>(d));
  att = att.masked_fill(seen.logical_not(), -std::numeric_limits<double>::infinity());
  // The sink: a column of each head's logit in the softmax, then dropped.
  const auto with_sink = torch::cat({att, p["attn_sink"].view({1, a, 1, 1}).expand({b, a, s, 1})}, -1);
  const auto probs = torch::softmax(with_sink, -1).narrow(-1, 0, s + m);
  auto out = torch::einsum("bhij,bjd->bihd", {probs, key});
  out = rope_tail(out, -pos, 8);  // the inverse rotary
  const auto grouped = torch::einsum("bsgd,grd->bsgr", {out.reshape({b, s, 2, 64}), p["wo_a"].view({2, 16, 64})}).reshape({b, s, 32});
  const auto h1 = xr + lin(grouped, "o_proj");
  const auto z = rms(h1, p["post_attention_layernorm.weight"], 1e-5);
  const auto want = h1 + lin(torch::silu(lin(z, "gate_proj")) * lin(z, "up_proj"), "down_proj");
  CHECK(torch::allclose(y, want, 1e-4, 1e-5));
  // The sink takes some of each row's weight: the kept probabilities sum below 1.
  CHECK(probs.sum(-1).max().item<double>() < 1.0);
  const auto g = torch::randn_like(y);
  y.backward(g);
  const auto ref = torch::autograd::grad({want}, {xr, p["attn_sink"], p["compressor.wgate.weight"], p["wo_a"]}, {g});
  CHECK(torch::allclose(x.grad(), ref[0], 1e-4, 1e-5));
  CHECK(torch::allclose(p["attn_sink"].grad(), ref[1], 1e-4, 1e-5));
  CHECK(torch::allclose(p["compressor.wgate.weight"].grad(), ref[2], 1e-4, 1e-5));
  CHECK(torch::allclose(p["wo_a"].grad(), ref[3], 1e-4, 1e-5));

  // Refused: a ratio Megatron-Core has not, and what the twin runs at tp 1 alone.
  CHECK(test::error_of([&] { models::make_torch_layer(sig.substr(0, sig.find("cr=")) + "cr=8" + sig.substr(sig.find(",og="))); })
            .find("cr must be 0, 4 or 128") != std::string::npos);
  CHECK(test::error_of([&] { models::make_torch_layer(sig + ",tp=2"); }).find("DeepSeek-V4's attention runs at tp 1 and cp 1") != std::string::npos);
  CHECK(test::error_of([] { models::make_torch_layer("llama.block:h=64,a=4,kv=4,d=16,f=128,qkvb=0,ob=0,mb=0,qkn=0,hc=4"); })
            .find("hyper-connections (hc=) are run with DeepSeek-V4's blocks (v4=1) alone") != std::string::npos);
}

TEST_CASE("DeepSeek-V4's twin: hyper-connections as a plain residual where their gates are zero, and H_res conserving the streams "
          "(Note [Hyper-connections])",
          "[torch][llama][dsv4]") {
  const std::string plain = "llama.block:v4=1,h=128,a=4,qr=32,d=32,dr=8,cr=0,og=2,or=16,f=64,qkvb=0,ob=0,mb=0,qkn=0,sw=4";
  const std::string wide = plain + ",hc=4,hs=20";
  // Each sublayer's mapping_proj (24 x 512 and 24) and three scalars.
  CHECK(count(wide) - count(plain) == 2 * (24 * 512 + 24 + 3));
  torch::manual_seed(3);
  auto a = models::make_torch_layer(plain), b = models::make_torch_layer(wide);
  auto pa = a->module().named_parameters(), pb = b->module().named_parameters();
  {
    torch::NoGradGuard no_grad;
    for (const auto& kv : pa) pb[kv.key()].copy_(kv.value());
    for (auto& kv : pb) {
      if (kv.key().rfind("hc_", 0) == 0) kv.value().zero_();
    }
  }
  // Zero gates: H_pre 1/2 (+1e-6), H_post 1, H_res all 1/4. On four copies
  // of x each sublayer sees 2x, which its RMSNorm makes x's input, and
  // returns each stream as the mean of the four plus its output: the plain
  // block's residual, on every stream.
  const auto x = torch::randn({2, 8, 128});
  const auto streams = x.unsqueeze(2).expand({2, 8, 4, 128}).reshape({2, 8, 512});
  const auto ya = a->forward({x}), yb = b->forward({streams}).view({2, 8, 4, 128});
  for (int k = 0; k < 4; ++k) CHECK(torch::allclose(yb.select(2, k), ya, 1e-4, 1e-5));
  // With gates drawn and the sublayers' outputs zero (wo_b and the MLP's
  // down projection), x'_i = sum_j H_res_ji x_j. Sinkhorn's last step makes
  // each H_res column sum to 1: four copies of x stay x exactly; its rows
  // sum to 1 once it has converged (20 iterations of gentle gates): distinct
  // streams keep their sum, each stream moved.
  {
    torch::NoGradGuard no_grad;
    for (auto& kv : pb) {
      if (kv.key().rfind("hc_", 0) == 0) kv.value().normal_(0.0, 0.1);
    }
    pb["o_proj.weight"].zero_();
    pb["down_proj.weight"].zero_();
  }
  for (int k = 0; k < 4; ++k) CHECK(torch::allclose(b->forward({streams}).view({2, 8, 4, 128}).select(2, k), x, 1e-5, 1e-6));
  const auto mixed = torch::randn({2, 8, 512});
  const auto out = b->forward({mixed}).view({2, 8, 4, 128});
  CHECK(torch::allclose(out.sum(2), mixed.view({2, 8, 4, 128}).sum(2), 1e-4, 1e-4));
  CHECK_FALSE(torch::allclose(out.select(2, 0), mixed.view({2, 8, 4, 128}).select(2, 0), 1e-3, 1e-3));
}

TEST_CASE("Kimi K3's and Kimi Linear's parts are priced, not run: the twin says which, in one line (Note [Kimi K3])", "[torch][kda]") {
  // The analytic model's own signatures for them (tests/models/test_kimi.cpp).
  test::TempDir dir("kimi-twin");
  const std::string yaml = dir.file("kimi.yaml");
  std::ofstream(yaml) << "family: llama\nlayers: 2\nhidden: 64\nheads: 4\nkv_heads: 4\nintermediate: 128\nvocab: 256\nseq_len: 256\n"
                         "layer_mixers: L*\nkda: true\nlinear_key_heads: 2\nlinear_value_heads: 2\nlinear_key_dim: 16\nlinear_value_dim: 16\n"
                         "situ: true\nattn_res_block: 2\n";
  sim::WorkloadShape w;
  w.micro_batch = 1;
  w.seq_len = 16;
  w.act_bytes = 4;
  const auto layers = models::load_model(yaml)->layers(w);
  CHECK_THROWS_WITH(models::make_torch_layer(layers[1].signature), Catch::Contains("Kimi Delta Attention (kda=1) is priced, not run by the LibTorch twin"));
  CHECK_THROWS_WITH(models::make_torch_layer(layers[2].signature), Catch::Contains("the SiTU activation (situ=1) is priced, not run"));
  std::vector<sim::Override> silu{sim::parse_override("model.situ=false")};
  CHECK_THROWS_WITH(models::make_torch_layer(models::load_model(yaml, silu)->layers(w)[2].signature),
                    Catch::Contains("Block Attention Residuals (ar=) is priced, not run"));
  // Gemma 4's global layer and value norm (Note [Gemma 4]).
  const std::string gemma4 = dir.file("gemma4.yaml");
  std::ofstream(gemma4) << "family: llama\nlayers: 2\nhidden: 64\nheads: 4\nkv_heads: 2\nhead_dim: 16\nintermediate: 128\nvocab: 256\n"
                           "seq_len: 256\nqk_norm: true\nsliding_window: 8\nglobal_every: 2\nglobal_head_dim: 32\nglobal_kv_heads: 1\n"
                           "k_eq_v: true\ngemma_norms: true\ngelu: true\nembed_scale: true\ntied_head: true\n";
  CHECK_THROWS_WITH(models::make_torch_layer(models::load_model(gemma4)->layers(w)[2].signature), Catch::Contains("Gemma 4's values as keys (kev=1)"));
}

TEST_CASE("a LoRA fine-tune's layers are priced, not run: the twin says so in one line (Note [LoRA])", "[torch][lora]") {
  sim::WorkloadShape w;
  w.micro_batch = 1;
  w.seq_len = 16;
  w.act_bytes = 4;
  std::vector<sim::Override> lora{sim::parse_override("model.peft=lora"), sim::parse_override("model.lora_rank=4")};
  const auto layers = models::load_model("gpt2-tiny", lora)->layers(w);
  CHECK_THROWS_WITH(models::make_torch_layer(layers[1].signature), Catch::Contains("a LoRA fine-tune's layer has no LibTorch twin"));
  // QLoRA's 4-bit base likewise (Note [QLoRA]).
  std::vector<sim::Override> qlora{sim::parse_override("model.peft=qlora"), sim::parse_override("model.lora_rank=4")};
  const auto q = models::load_model("gpt2-tiny", qlora)->layers(w);
  CHECK_THROWS_WITH(models::make_torch_layer(q[1].signature), Catch::Contains("a LoRA fine-tune's layer has no LibTorch twin"));
  CHECK_NOTHROW(models::make_torch_layer(models::load_model("gpt2-tiny")->layers(w)[1].signature));
  // A chunked loss likewise (Note [Chunked loss]): its head's signature says so.
  w.loss_chunks = 4;
  const auto chunked = models::load_model("gpt2-tiny")->layers(w);
  CHECK_THROWS_WITH(models::make_torch_layer(chunked.back().signature), Catch::Contains("a chunked cross-entropy has no LibTorch twin"));
}
