// Model::shared_layers (Note [Layer memo] in sim/include/dtsim/sim/model.hpp):
// a shape's layers are built once and shared while the model keeps them, a
// different shape gets its own,
// the shape asked for least recently of 16 is dropped first, and a copy of a
// model keeps nothing of the original's.
#include <atomic>
#include <thread>
#include <vector>

#include <catch2/catch.hpp>

#include "dtsim/sim/model.hpp"

using namespace dtsim;
using namespace dtsim::sim;

namespace {

/// One layer per micro-batch sequence, counting how often it is built.
class CountingModel final : public Model {
 public:
  explicit CountingModel(std::atomic<int>* built) : built_(built) {}
  std::string name() const override { return "counting"; }
  std::int64_t parameters() const override { return 1; }
  int blocks() const override { return 1; }
  std::int64_t max_seq_len() const override { return 8; }
  std::string tp_error(int) const override { return ""; }
  std::vector<Layer> layers(const WorkloadShape& s) const override {
    ++*built_;
    std::vector<Layer> out(static_cast<std::size_t>(s.micro_batch));
    for (std::size_t i = 0; i < out.size(); ++i) out[i].params = static_cast<std::int64_t>(i) + 1;
    return out;
  }
  Flops model_flops(const WorkloadShape&) const override { return 0; }

 private:
  std::atomic<int>* built_;
};

WorkloadShape batch(std::int64_t b) {
  WorkloadShape s;
  s.micro_batch = b;
  return s;
}

}  // namespace

TEST_CASE("a model builds a shape's layers once and shares them") {
  std::atomic<int> built{0};
  const CountingModel m(&built);
  const LayerList a = m.shared_layers(batch(3));
  const LayerList b = m.shared_layers(batch(3));
  CHECK(built == 1);
  CHECK(&a.get() == &b.get());  // the same list, not a copy
  REQUIRE(a.size() == 3);
  CHECK(a[2].params == 3);
  // Any field of the shape makes it another shape.
  WorkloadShape other = batch(3);
  other.flash_attention = true;
  CHECK(m.shared_layers(other).size() == 3);
  CHECK(built == 2);
}

TEST_CASE("a model keeps the 128 shapes asked for last, dropping the least recently asked") {
  std::atomic<int> built{0};
  const CountingModel m(&built);
  for (int b = 1; b <= 128; ++b) m.shared_layers(batch(b));
  CHECK(built == 128);
  m.shared_layers(batch(1));  // kept, and now the most recently asked
  CHECK(built == 128);
  m.shared_layers(batch(129));  // a 129th shape drops batch 2, asked for longest ago
  CHECK(built == 129);
  m.shared_layers(batch(1));
  CHECK(built == 129);
  m.shared_layers(batch(2));  // built again
  CHECK(built == 130);
}

TEST_CASE("a list handed out outlives the model's memo") {
  std::atomic<int> built{0};
  LayerList kept;
  {
    const CountingModel m(&built);
    kept = m.shared_layers(batch(4));
  }
  REQUIRE(kept.size() == 4);
  CHECK(kept.back().params == 4);
  CHECK(LayerList().empty());
}

TEST_CASE("a copy of a model starts with no layers kept") {
  std::atomic<int> built{0};
  const CountingModel m(&built);
  m.shared_layers(batch(2));
  const CountingModel copy = m;  // NOLINT(performance-unnecessary-copy-initialization): the copy is the point
  copy.shared_layers(batch(2));
  CHECK(built == 2);
}

TEST_CASE("threads asking for the same shapes get equal lists") {
  std::atomic<int> built{0};
  const CountingModel m(&built);
  std::vector<std::thread> threads;
  std::atomic<int> wrong{0};
  for (int t = 0; t < 4; ++t) {
    threads.emplace_back([&] {
      for (int i = 0; i < 200; ++i) {
        const std::int64_t b = 1 + i % 20;  // 20 shapes: some are dropped and built again
        const LayerList l = m.shared_layers(batch(b));
        if (static_cast<std::int64_t>(l.size()) != b || l.back().params != b) ++wrong;
      }
    });
  }
  for (auto& t : threads) t.join();
  CHECK(wrong == 0);
}
