// Expert parallelism in the LibTorch MoE block (Note [Expert parallelism]):
// the dispatch's bookkeeping by hand, and ep ranks (a thread each, over an
// in-process all-to-all) computing what the whole block computes.
// LibTorch first: Debian's LibTorch pulls in glog, whose CHECK would
// otherwise replace Catch's (and pass silently).
#include "dtsim/models/torch_layers.hpp"
#undef CHECK
#include <catch2/catch.hpp>

#include <atomic>
#include <barrier>
#include <map>
#include <thread>

#include "dtsim/models/models.hpp"
#include "dtsim/sim/error.hpp"
#include "test_util.hpp"

using namespace dtsim;

namespace {

/// An all-to-all between threads (PyTorch c10d's FakeProcessGroup in
/// spirit): each rank posts its rows and split sizes, then takes from every
/// rank the rows that rank sent it. Records every call's send splits.
struct Exchange {
  explicit Exchange(int ranks) : n(ranks), sync(ranks), box(ranks), sent(ranks), calls(ranks) {}
  torch::Tensor run(int me, const torch::Tensor& x, const std::vector<std::int64_t>& send, const std::vector<std::int64_t>& recv) {
    box[me] = x.contiguous();
    sent[me] = send;
    calls[me].push_back(send);
    sync.arrive_and_wait();
    std::vector<torch::Tensor> parts;
    for (int s = 0; s < n; ++s) {
      std::int64_t at = 0;
      for (int q = 0; q < me; ++q) at += sent[s][q];
      if (sent[s][me] != recv[s]) mismatch = true;  // what s sends me is not what I expect from s
      parts.push_back(box[s].narrow(0, at, sent[s][me]));
    }
    torch::Tensor out = torch::cat(parts).clone();
    sync.arrive_and_wait();
    return out;
  }
  int n;
  std::barrier<> sync;
  std::vector<torch::Tensor> box;
  std::vector<std::vector<std::int64_t>> sent;
  std::vector<std::vector<std::vector<std::int64_t>>> calls;  ///< per rank, each call's send splits
  std::atomic<bool> mismatch{false};
};

thread_local Exchange* t_exchange = nullptr;
thread_local int t_rank = 0;

/// The differentiable all-to-all the runtime gives a block: backward sends
/// the gradients back the way the rows came.
struct FakeAllToAll : torch::autograd::Function<FakeAllToAll> {
  static torch::Tensor forward(torch::autograd::AutogradContext* ctx, const torch::Tensor& x, std::vector<std::int64_t> send,
                               std::vector<std::int64_t> recv) {
    ctx->saved_data["send"] = send;
    ctx->saved_data["recv"] = recv;
    return t_exchange->run(t_rank, x, send, recv);
  }
  static torch::autograd::variable_list backward(torch::autograd::AutogradContext* ctx, torch::autograd::variable_list g) {
    const auto send = ctx->saved_data["send"].toIntVector(), recv = ctx->saved_data["recv"].toIntVector();
    return {t_exchange->run(t_rank, g[0], recv, send), torch::Tensor(), torch::Tensor()};
  }
};

models::ExpertParallel fake_ep(int rank, int size) {
  models::ExpertParallel ep;
  ep.rank = rank;
  ep.size = size;
  ep.all_to_all = [](const torch::Tensor& x, const std::vector<std::int64_t>& send, const std::vector<std::int64_t>& recv) {
    return x.requires_grad() ? FakeAllToAll::apply(x, send, recv) : t_exchange->run(t_rank, x, send, recv);
  };
  return ep;
}

models::TensorParallel no_tp() {
  models::TensorParallel tp;
  tp.enter = tp.exit = [](const torch::Tensor& x) { return x; };
  tp.max = [](torch::Tensor&) {};
  return tp;
}

/// "block_sparse_moe.experts_J_w1" on ep rank r of `local` experts a rank
/// -> the whole block's "block_sparse_moe.experts_(r local + J)_w1"; other
/// names are the same.
std::string whole_name(const std::string& name, int r, int local) {
  const std::string tag = "experts_";
  const auto at = name.find(tag);
  if (at == std::string::npos) return name;
  const auto end = name.find('_', at + tag.size());
  const int j = std::stoi(name.substr(at + tag.size(), end - at - tag.size()));
  return name.substr(0, at + tag.size()) + std::to_string(r * local + j) + name.substr(end);
}


constexpr std::int64_t kSeqs = 2, kTokens = 8;

/// The whole block, seeded as the shares are, run on every rank's
/// sequences at once: each rank's inputs and output cotangents, the
/// concatenated input, output and parameters (with their gradients).
struct Whole {
  std::vector<torch::Tensor> xs, cots;
  torch::Tensor x_all, y_all;
  torch::OrderedDict<std::string, torch::Tensor> want;
  std::unique_ptr<models::TorchLayer> layer;
};
Whole run_whole(const std::string& sig, int n) {
  Whole w;
  torch::manual_seed(7);
  for (int r = 0; r < n; ++r) {
    w.xs.push_back(torch::randn({kSeqs, kTokens, 32}));
    w.cots.push_back(torch::randn({kSeqs, kTokens, 32}));
  }
  torch::manual_seed(1);
  w.layer = models::make_torch_layer(sig);
  w.x_all = torch::cat(w.xs, 0).requires_grad_(true);
  w.y_all = w.layer->forward({w.x_all});
  (w.y_all * torch::cat(w.cots, 0)).sum().backward();
  w.want = w.layer->module().named_parameters();
  return w;
}

/// Each rank's share on a thread of its own over `exchange`, its own
/// sequences through it: the outputs and input gradients.
std::pair<std::vector<torch::Tensor>, std::vector<torch::Tensor>> run_shares(std::vector<std::unique_ptr<models::TorchLayer>>& layers,
                                                                           const Whole& w, Exchange& exchange) {
  const std::size_t n = layers.size();
  std::vector<torch::Tensor> outs(n), grads(n);
  std::vector<std::thread> threads;
  for (std::size_t r = 0; r < n; ++r) {
    threads.emplace_back([&, r] {
      t_exchange = &exchange;
      t_rank = static_cast<int>(r);
      const auto x = w.xs[r].clone().requires_grad_(true);
      const auto y = layers[r]->forward({x});
      (y * w.cots[r]).sum().backward();
      outs[r] = y.detach();
      grads[r] = x.grad();
    });
  }
  for (auto& t : threads) t.join();
  return {outs, grads};
}

/// Rank r's outputs and input gradients are the whole block's at its
/// sequences, its experts' gradients the whole block's for those experts
/// (`local` a rank), and every other parameter's gradients, summed over the
/// ranks, the whole block's.
void check_shares(const std::vector<std::unique_ptr<models::TorchLayer>>& layers, Whole& w, const std::vector<torch::Tensor>& outs,
                  const std::vector<torch::Tensor>& grads, int local) {
  std::map<std::string, torch::Tensor> dense_sum;
  for (std::size_t r = 0; r < layers.size(); ++r) {
    INFO("rank " << r);
    const auto at = static_cast<std::int64_t>(r) * kSeqs;
    CHECK(torch::allclose(outs[r], w.y_all.detach().narrow(0, at, kSeqs), 1e-4, 1e-6));
    CHECK(torch::allclose(grads[r], w.x_all.grad().narrow(0, at, kSeqs), 1e-4, 1e-6));
    for (const auto& p : layers[r]->module().named_parameters()) {
      INFO(p.key());
      REQUIRE(p.value().grad().defined());
      if (p.key().find("experts_") != std::string::npos) {
        CHECK(torch::allclose(p.value().grad(), w.want[whole_name(p.key(), static_cast<int>(r), local)].grad(), 1e-4, 1e-6));
      } else {
        auto& sum = dense_sum[p.key()];
        sum = sum.defined() ? sum + p.value().grad() : p.value().grad().clone();
      }
    }
  }
  for (const auto& [name, sum] : dense_sum) {
    INFO(name);
    CHECK(torch::allclose(sum, w.want[name].grad(), 1e-4, 1e-5));
  }
}

}  // namespace

TEST_CASE("the dispatch sorts (token, slot) pairs by expert and counts each rank's rows, by hand", "[torch][ep]") {
  // Three tokens, top-2 of 4 experts. Pairs t k + slot: 0 -> expert 0,
  // 1 -> 3, 2 -> 2, 3 -> 1, 4 -> 3, 5 -> 0. By expert, stable: expert 0 has
  // pairs 0 and 5, expert 1 pair 3, expert 2 pair 2, expert 3 pairs 1 and 4.
  const auto chosen = torch::tensor({0, 3, 2, 1, 3, 0}, torch::kLong).view({3, 2});
  const auto d = models::moe_dispatch(chosen, 4, 2);
  CHECK(torch::equal(d.order, torch::tensor({0, 5, 3, 2, 1, 4}, torch::kLong)));
  CHECK(torch::equal(d.counts, torch::tensor({2, 1, 1, 2}, torch::kLong)));
  // ep 2: rank 0 holds experts 0-1 (2 + 1 rows), rank 1 experts 2-3 (1 + 2).
  CHECK(d.send == std::vector<std::int64_t>{3, 3});
  // ep 4: one expert a rank.
  CHECK(models::moe_dispatch(chosen, 4, 4).send == std::vector<std::int64_t>{2, 1, 1, 2});
  // No token chose expert 1 or 2: their ranks get nothing.
  const auto skewed = models::moe_dispatch(torch::tensor({0, 3, 3, 0}, torch::kLong).view({2, 2}), 4, 4);
  CHECK(skewed.send == std::vector<std::int64_t>{2, 0, 0, 2});
  CHECK(test::error_of([&] { models::moe_dispatch(chosen, 4, 3); }).find("4 experts do not split over ep 3") != std::string::npos);
}

TEST_CASE("moe-tiny's expert-parallel shares own the analytic per-rank parameters", "[torch][ep]") {
  const auto model = models::load_model("moe-tiny");  // 4 experts of SwiGLU 176 over h 128
  for (const int ep : {2, 4}) {
    sim::WorkloadShape shape;
    shape.micro_batch = 1;
    shape.seq_len = 8;
    shape.act_bytes = 4;
    shape.ep = ep;
    int blocks = 0;
    for (const auto& layer : model->layers(shape)) {
      if (layer.signature.rfind("moe.block:", 0) != 0) continue;
      INFO(layer.signature);
      ++blocks;
      CHECK(layer.signature.find(",ep=" + std::to_string(ep)) != std::string::npos);
      // Rank 0's share without the collective, and the last rank's with one.
      CHECK(models::make_torch_layer(layer.signature)->parameter_count() == layer.params);
      auto last = models::make_torch_layer(layer.signature, no_tp(), {}, fake_ep(ep - 1, ep));
      CHECK(last->parameter_count() == layer.params);
      // 4 / ep experts of 3 matrices of 128 x 176 each.
      std::int64_t expert = 0;
      for (const auto& t : last->expert_parameters()) expert += t.numel();
      CHECK(expert == 4 / ep * 3 * 128 * 176);
    }
    CHECK(blocks == 2);
  }
  const std::string sig = "moe.block:h=32,a=4,kv=2,d=8,E=8,k=2,fe=16,fs=0,sg=0,qkvb=0,ob=0,mb=0,qkn=0,ep=2";
  CHECK(test::error_of([&] { models::make_torch_layer(sig, no_tp(), {}, fake_ep(0, 4)); })
            .find("ep=2 but the expert-parallel group has 4 ranks") != std::string::npos);
  models::ExpertParallel mute;
  mute.size = 2;
  CHECK(test::error_of([&] { models::make_torch_layer(sig, no_tp(), {}, mute); }).find("needs a rank in [0, size) and an all_to_all") !=
        std::string::npos);
}

TEST_CASE("expert-parallel ranks compute the whole MoE block, forward and backward (Note [Expert parallelism])", "[torch][llama][ep]") {
  // 8 experts, top-2, a shared expert with its gate. Each rank of ep 2 and 4
  // (a thread each) runs its own 2 sequences of 8 tokens through its share;
  // the whole block runs every rank's sequences at once. Tokens of
  // different sequences never meet, so rank r's outputs and input gradients
  // must be the whole block's at its sequences; its experts' gradients the
  // whole block's for those experts (every rank's tokens reach them through
  // the combine's backward), and the other parameters' gradients, summed
  // over the ranks, the whole block's.
  const std::string sig = "moe.block:h=32,a=4,kv=2,d=8,E=8,k=2,fe=16,fs=16,sg=1,qkvb=0,ob=0,mb=0,qkn=0";
  constexpr std::int64_t kTopK = 2, kExperts = 8;
  for (const int n : {2, 4}) {
    INFO("ep " << n);
    const int local = static_cast<int>(kExperts) / n;
    Whole w = run_whole(sig, n);
    Exchange exchange(n);
    std::vector<std::unique_ptr<models::TorchLayer>> layers;
    for (int r = 0; r < n; ++r) {
      torch::manual_seed(1);  // the seed is global: build here, run on the threads
      layers.push_back(models::make_torch_layer(sig + ",ep=" + std::to_string(n), no_tp(), {}, fake_ep(r, n)));
      // Rank r holds experts [r E/n, (r+1) E/n) of the whole block and every other tensor.
      for (const auto& p : layers[r]->module().named_parameters()) {
        INFO(p.key());
        REQUIRE(w.want.contains(whole_name(p.key(), r, local)));
        CHECK(torch::equal(p.value(), w.want[whole_name(p.key(), r, local)]));
      }
    }
    const auto [outs, grads] = run_shares(layers, w, exchange);
    CHECK_FALSE(exchange.mismatch.load());
    for (int r = 0; r < n; ++r) {
      INFO("rank " << r);
      // The counts go first, E / n to each rank; then each rank's T k = 2 x
      // 8 x 2 = 32 (token, slot) rows, split by destination; then the
      // combine sends back what each rank received; backward reverses the
      // two row exchanges. Five exchanges in all.
      const auto& calls = exchange.calls[r];
      REQUIRE(calls.size() == 5);
      CHECK(calls[0] == std::vector<std::int64_t>(n, local));
      std::int64_t sent = 0;
      for (const auto k : calls[1]) sent += k;
      CHECK(sent == kSeqs * kTokens * kTopK);
      std::int64_t received = 0;
      for (int s = 0; s < n; ++s) received += exchange.calls[s][1][r];
      std::int64_t returned = 0;
      for (const auto k : calls[2]) returned += k;
      CHECK(returned == received);  // the combine returns every row it got
      CHECK(static_cast<int>(layers[r]->expert_parameters().size()) == 3 * local);
    }
    check_shares(layers, w, outs, grads, local);
  }
}

namespace {
/// An all-gather and a reduce-scatter along the sequence between threads:
/// the allgather dispatcher's etp x ep group (ExpertParallel::tp_ep).
struct SequenceGroup {
  explicit SequenceGroup(int ranks) : n(ranks), sync(ranks), box(ranks), gathers(ranks, 0), scatters(ranks, 0) {}
  torch::Tensor gather(int me, const torch::Tensor& x) {
    box[me] = x.contiguous();
    sync.arrive_and_wait();
    torch::Tensor out = torch::cat(box, 1).clone();
    sync.arrive_and_wait();
    ++gathers[me];
    return out;
  }
  /// parts [n, b, s/n, ...]: every rank's part `me`, summed in rank order.
  torch::Tensor reduce_scatter(int me, const torch::Tensor& parts) {
    box[me] = parts.contiguous();
    sync.arrive_and_wait();
    torch::Tensor out = box[0][me].clone();
    for (int r = 1; r < n; ++r) out += box[r][me];
    sync.arrive_and_wait();
    ++scatters[me];
    return out;
  }
  int n;
  std::barrier<> sync;
  std::vector<torch::Tensor> box;
  std::vector<int> gathers, scatters;
};
}  // namespace

TEST_CASE("the allgather dispatcher's ranks compute the whole MoE block: every token gathered, each rank's experts' parts reduce-scattered "
          "(Note [Experts under tensor parallelism])",
          "[torch][llama][ep]") {
  // As above, each rank of ep 2 and 4 runs its own 2 sequences of 8 tokens;
  // under Megatron-Core's allgather dispatcher (ag=1) a rank gathers every
  // rank's tokens and probabilities over the etp x ep group (here the ep
  // ranks: etp 1), runs its experts on the rows routed to them, and
  // reduce-scatters its parts of every token back. No all-to-all runs;
  // forward gathers twice and reduce-scatters once, backward the reverse.
  const std::string sig = "moe.block:h=32,a=4,kv=2,d=8,E=8,k=2,fe=16,fs=16,sg=1,qkvb=0,ob=0,mb=0,qkn=0";
  constexpr std::int64_t kExperts = 8;
  for (const int n : {2, 4}) {
    INFO("ep " << n);
    Whole w = run_whole(sig, n);
    Exchange exchange(n);
    SequenceGroup group(n);
    std::vector<std::unique_ptr<models::TorchLayer>> layers;
    for (int r = 0; r < n; ++r) {
      models::ExpertParallel ep = fake_ep(r, n);
      ep.tp_ep.rank = r;
      ep.tp_ep.size = n;
      ep.tp_ep.gather = [&group, r](const torch::Tensor& x) { return group.gather(r, x); };
      ep.tp_ep.reduce_scatter = [&group, r](const torch::Tensor& x) { return group.reduce_scatter(r, x); };
      torch::manual_seed(1);
      layers.push_back(models::make_torch_layer(sig + ",ep=" + std::to_string(n) + ",ag=1", no_tp(), {}, ep));
    }
    const auto [outs, grads] = run_shares(layers, w, exchange);
    for (int r = 0; r < n; ++r) {
      INFO("rank " << r);
      CHECK(exchange.calls[r].empty());
      CHECK(group.gathers[r] == 3);
      CHECK(group.scatters[r] == 3);
    }
    check_shares(layers, w, outs, grads, static_cast<int>(kExperts) / n);
  }
  // A group of another size than etp x ep is refused in one line.
  models::ExpertParallel ep = fake_ep(0, 2);
  ep.tp_ep.size = 4;
  ep.tp_ep.gather = ep.tp_ep.reduce_scatter = [](const torch::Tensor& x) { return x; };
  CHECK(test::error_of([&] { models::make_torch_layer(sig + ",ep=2,ag=1", no_tp(), {}, ep); })
            .find("the allgather dispatcher gathers over 2 ranks (etp x ep), but the expert group given has 4") != std::string::npos);
}

TEST_CASE("an ep share built alone takes its own rows from every rank (calibration's loopback)", "[torch][llama][ep]") {
  // Two experts, top-2: every token goes to both, so rank 0 of ep 2 (expert
  // 0) sends each token once to itself and once to rank 1. Built alone, its
  // exchange takes rank 1 to send what rank 0 sends itself: expert 0 runs on
  // the T rows twice over (the rows of ep 2 under balanced routing), and the
  // combine returns rank 0's outputs in place of rank 1's. The routed sum
  // is then w0 f0(x) + w1 f0(x) = f0(x), the renormalised weights adding to
  // 1: the whole block with expert 1 tied to expert 0. Backward, expert 0
  // takes what both tied experts take, the rest what the whole block's do.
  const std::string sig = "moe.block:h=32,a=4,kv=2,d=8,E=2,k=2,fe=16,fs=0,sg=0,qkvb=0,ob=0,mb=0,qkn=0";
  torch::manual_seed(3);
  const auto x = torch::randn({2, 8, 32});
  const auto cot = torch::randn({2, 8, 32});
  torch::manual_seed(1);
  auto whole = models::make_torch_layer(sig);
  torch::manual_seed(1);
  auto alone = models::make_torch_layer(sig + ",ep=2");
  auto want = whole->module().named_parameters();
  {
    torch::NoGradGuard no_grad;
    for (const char* w : {"w1", "w2", "w3"}) {
      want[std::string("block_sparse_moe.experts_1_") + w].copy_(want[std::string("block_sparse_moe.experts_0_") + w]);
    }
  }
  const auto xw = x.clone().requires_grad_(true), xa = x.clone().requires_grad_(true);
  const auto yw = whole->forward({xw});
  const auto ya = alone->forward({xa});
  (yw * cot).sum().backward();
  (ya * cot).sum().backward();
  CHECK(torch::allclose(ya, yw, 1e-5, 1e-6));
  CHECK(torch::allclose(xa.grad(), xw.grad(), 1e-4, 1e-6));
  for (const auto& p : alone->module().named_parameters()) {
    INFO(p.key());
    REQUIRE(want.contains(p.key()));
    CHECK(torch::equal(p.value(), want[p.key()]));  // the same draw: rank 0 holds expert 0
    const auto at = p.key().find("experts_0_");
    const auto g = at == std::string::npos ? want[p.key()].grad()
                                           : want[p.key()].grad() + want[std::string(p.key()).replace(at, 10, "experts_1_")].grad();
    CHECK(torch::allclose(p.value().grad(), g, 1e-4, 1e-6));
  }
}

TEST_CASE("forced balance routes round-robin: each rank sends every rank t k / ep rows (Note [Forced balance])", "[torch][llama][ep]") {
  // 4 experts, top-2, ep 2: each rank's 2 x 8 = 16 tokens make 32 (token,
  // slot) pairs; token i's slot j goes to expert (2i + j) mod 4, so experts
  // 0-3 get 8 pairs each and each rank (2 experts) 16 from every rank,
  // whatever the router's probabilities. The ranks together compute what
  // the whole block routed the same way computes.
  const std::string sig = "moe.block:h=32,a=4,kv=2,d=8,E=4,k=2,fe=16,fs=0,sg=0,qkvb=0,ob=0,mb=0,qkn=0";
  constexpr int kRanks = 2;
  torch::manual_seed(11);
  std::vector<torch::Tensor> xs;
  for (int r = 0; r < kRanks; ++r) xs.push_back(torch::randn({2, 8, 32}));
  models::ExpertParallel one;
  one.force_balance = true;
  torch::manual_seed(1);
  auto whole = models::make_torch_layer(sig, no_tp(), {}, one);
  torch::manual_seed(1);
  auto routed = models::make_torch_layer(sig);  // the router's own top-2
  const auto x_all = torch::cat(xs, 0);
  const auto y_all = whole->forward({x_all});
  // The router's choice is not round-robin here: the two differ.
  CHECK_FALSE(torch::allclose(routed->forward({x_all}), y_all, 1e-4, 1e-6));
  // Calibration's switch (models::force_moe_balance) makes it the same
  // block; a dense block has no router to force.
  REQUIRE(models::force_moe_balance(*routed));
  CHECK(torch::allclose(routed->forward({x_all}), y_all, 1e-5, 1e-6));
  CHECK_FALSE(models::force_moe_balance(*models::make_torch_layer("llama.block:h=32,a=4,kv=2,d=8,f=16,qkvb=0,ob=0,mb=0,qkn=0")));

  Exchange exchange(kRanks);
  std::vector<std::unique_ptr<models::TorchLayer>> layers;
  for (int r = 0; r < kRanks; ++r) {
    torch::manual_seed(1);
    auto ep = fake_ep(r, kRanks);
    ep.force_balance = true;
    layers.push_back(models::make_torch_layer(sig + ",ep=2", no_tp(), {}, ep));
  }
  std::vector<torch::Tensor> outs(kRanks);
  std::vector<std::thread> threads;
  for (int r = 0; r < kRanks; ++r) {
    threads.emplace_back([&, r] {
      t_exchange = &exchange;
      t_rank = r;
      torch::NoGradGuard no_grad;
      outs[r] = layers[r]->forward({xs[r]});
    });
  }
  for (auto& t : threads) t.join();
  CHECK_FALSE(exchange.mismatch.load());
  for (int r = 0; r < kRanks; ++r) {
    INFO("rank " << r);
    REQUIRE(exchange.calls[r].size() == 3);  // counts, dispatch, combine
    CHECK(exchange.calls[r][1] == std::vector<std::int64_t>{16, 16});
    CHECK(exchange.calls[r][2] == std::vector<std::int64_t>{16, 16});
    CHECK(torch::allclose(outs[r], y_all.narrow(0, 2 * r, 2), 1e-4, 1e-6));
  }
}
