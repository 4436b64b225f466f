// Seed 003's six models (models/src/convnet.cpp, models/src/text.cpp): their
// parameter counts against the published ones and the formulas, and the
// FLOPs and saved bytes of a convolution and a transposed convolution
// worked by hand (Note [Convolutions]).
#include <catch2/catch.hpp>

#include "test_util.hpp"

#include "dtsim/models/models.hpp"
#include "dtsim/sim/error.hpp"

using namespace dtsim;
using namespace dtsim::models;
using dtsim::test::error_of;

namespace {

sim::WorkloadShape shape(std::int64_t b, std::int64_t s, int e) {
  sim::WorkloadShape w;
  w.micro_batch = b;
  w.seq_len = s;
  w.act_bytes = e;
  w.mask_bytes = 1;
  return w;
}

const sim::Kernel* find(const std::vector<sim::Kernel>& ks, const std::string& name) {
  for (const auto& k : ks) {
    if (k.name == name) return &k;
  }
  return nullptr;
}

}  // namespace

TEST_CASE("seed 003's models have the published parameter counts", "[models][seed003]") {
  // torchvision's own counts (sum of p.numel() for vgg11() and vgg11_bn(), 1000 classes).
  CHECK(load_model("vgg11")->parameters() == 132'863'336);
  CHECK(load_model("vgg11-bn")->parameters() == 132'868'840);
  // The same by formula: 3 x 3 convolutions 3-64-128-256-256-512-512-512-512
  // (9 ci co + co each), then 25088 x 4096, 4096 x 4096, 4096 x 1000 with biases.
  const std::int64_t ch[] = {3, 64, 128, 256, 256, 512, 512, 512, 512};
  std::int64_t convs = 0, bn = 0;
  for (int i = 0; i + 1 < 9; ++i) convs += 9 * ch[i] * ch[i + 1] + ch[i + 1], bn += 2 * ch[i + 1];
  const std::int64_t classifier = 25088 * 4096 + 4096 + 4096 * 4096 + 4096 + 4096 * 1000 + 1000;
  CHECK(load_model("vgg11")->parameters() == convs + classifier);
  CHECK(load_model("vgg11-bn")->parameters() == convs + bn + classifier);  // gamma and beta per channel
  // PyTorch's CIFAR-10 tutorial: conv(3,6,5) 456, conv(6,16,5) 2,416, 400x120 48,120, 120x84 10,164, 84x10 850.
  CHECK(load_model("cnn")->parameters() == 456 + 2416 + 48120 + 10164 + 850);
  CHECK(load_model("cnn")->parameters() == 62'006);
  // PyTorch's quickstart network: 784 x 512 + 512, 512 x 512 + 512, 512 x 10 + 10.
  CHECK(load_model("mlp")->parameters() == 669'706);
  // Conv(1,16,3) 160, Conv(16,32,3) 4,640, Conv(32,64,7) 100,416; ConvT(64,32,7) 100,384, ConvT(32,16,3) 4,624, ConvT(16,1,3) 145.
  CHECK(load_model("conv-autoencoder")->parameters() == 160 + 4640 + 100416 + 100384 + 4624 + 145);
  // EmbeddingBag 21,635 x 300 + Linear(300, 2).
  CHECK(load_model("nbow")->parameters() == 21635 * 300 + 300 * 2 + 2);
  // bentrevett/pytorch-seq2seq's first notebook prints "The model has 13,898,501 trainable parameters".
  CHECK(load_model("seq2seq")->parameters() == 13'898'501);
  // Every model's layers own exactly its parameters.
  for (const char* name : {"vgg11", "vgg11-bn", "cnn", "mlp", "conv-autoencoder", "nbow", "seq2seq", "vgg11-tiny", "nbow-tiny", "seq2seq-tiny"}) {
    const auto m = load_model(name);
    std::int64_t sum = 0;
    const auto layers = m->layers(shape(2, m->max_seq_len(), 4));
    for (const auto& l : layers) sum += l.params;
    CHECK(sum == m->parameters());
    CHECK(static_cast<int>(layers.size()) == m->layer_count());
  }
}

TEST_CASE("the shipped VGG model files are the built-ins they say they are", "[models][seed003]") {
  // Each file says which built-in and --set it equals (its comment);
  // compared layer by layer: the same signatures and parameters.
  struct Shipped {
    const char* file;
    const char* builtin;
    std::vector<const char*> sets;
  };
  const std::vector<Shipped> shipped = {
      {"vgg11-cifar10.yaml", "vgg11", {"model.image_size=32", "model.classes=10"}},
      {"vgg11-bn-cifar10.yaml", "vgg11-bn", {"model.image_size=32", "model.classes=10"}},
      {"vgg11-bn-tiny.yaml", "vgg11-tiny", {"model.batch_norm=true"}},
  };
  for (const Shipped& s : shipped) {
    INFO(s.file);
    std::vector<sim::Override> o;
    for (const char* kv : s.sets) o.push_back(sim::parse_override(kv));
    const auto file = load_model(std::string(DTSIM_CONFIG_DIR_FOR_TESTS) + "/models/" + s.file);
    const auto builtin = load_model(s.builtin, o);
    CHECK(file->parameters() == builtin->parameters());
    const auto a = file->layers(shape(2, 1, 4));
    const auto b = builtin->layers(shape(2, 1, 4));
    REQUIRE(a.size() == b.size());
    for (std::size_t i = 0; i < a.size(); ++i) {
      CHECK(a[i].signature == b[i].signature);
      CHECK(a[i].params == b[i].params);
    }
  }
  // torchvision's vgg11_bn on CIFAR-10: 128,812,810 weights and biases of
  // vgg11 at 10 classes (128,807,306) plus 2 x 2,752 of batch norm's scales
  // and shifts, over 2,752 channels (64 + 128 + 256 x 2 + 512 x 4).
  CHECK(load_model(std::string(DTSIM_CONFIG_DIR_FOR_TESTS) + "/models/vgg11-bn-cifar10.yaml")->parameters() == 128'807'306 + 2 * 2'752);
}

TEST_CASE("a convolution's FLOPs and saved bytes, by hand", "[models][seed003]") {
  // cnn's first layer on b = 4 CIFAR images in fp32: conv(3 -> 6, 5 x 5) on
  // 32 x 32 gives 28 x 28, ReLU, 2 x 2 max pool to 14 x 14.
  const auto layers = load_model("cnn")->layers(shape(4, 1, 4));
  const sim::Layer& l = layers[0];
  CHECK(l.signature == "conv.layer:ci=3,co=6,k=5,s=1,p=0,hw=32,bn=0,act=1,pool=2,ig=0");
  const sim::Kernel* conv = find(l.forward, "conv.0.conv");
  REQUIRE(conv != nullptr);
  // Implicit GEMM: m = b Ho Wo = 4 x 784, n = 6, k = 3 x 25 = 75.
  CHECK(conv->m == 3136);
  CHECK(conv->n == 6);
  CHECK(conv->k == 75);
  CHECK(conv->flops == Approx(2.0 * 3136 * 6 * 75));  // 2,822,400
  // Saved: the input 4 x 3 x 32 x 32 x 4 B = 49,152; ReLU's output 4 x 6 x
  // 28 x 28 x 4 B = 75,264; the pool's int64 indices 4 x 6 x 14 x 14 x 8 B = 37,632.
  CHECK(l.saved_bytes == 49152 + 75264 + 37632);
  CHECK(l.output_bytes == 4 * 6 * 14 * 14 * 4);
  // The model's input needs no gradient: the filters' gradient only.
  CHECK(find(l.backward, "conv.0.conv.dgrad") == nullptr);
  REQUIRE(find(l.backward, "conv.0.conv.wgrad") != nullptr);
  CHECK(find(l.backward, "conv.0.conv.wgrad")->flops == Approx(conv->flops));
  // The second convolution's input does: both, each with the forward's FLOPs.
  const sim::Layer& l1 = layers[1];
  const sim::Kernel* c1 = find(l1.forward, "conv.1.conv");
  REQUIRE(c1 != nullptr);
  CHECK(c1->flops == Approx(2.0 * (4 * 10 * 10) * 16 * (6 * 25)));
  REQUIRE(find(l1.backward, "conv.1.conv.dgrad") != nullptr);
  CHECK(find(l1.backward, "conv.1.conv.dgrad")->flops == Approx(c1->flops));

  // vgg11-bn's first layer at b = 2, 224 x 224, fp16: batch norm keeps its
  // input (the convolution's output) and 2 fp32 statistics per channel.
  const auto vgg = load_model("vgg11-bn")->layers(shape(2, 1, 2));
  REQUIRE(!vgg.empty());
  const sim::Layer& v = vgg[0];
  const std::int64_t in = 2 * 3 * 224 * 224, z = 2 * 64 * 224 * 224, y = 2 * 64 * 112 * 112;
  CHECK(v.saved_bytes == 2 * in + 2 * z + 8 * 64 + 2 * z + 8 * y);
  CHECK(v.params == 64 * 3 * 9 + 64 + 2 * 64);
  // Its forward also updates the running statistics (Note [Running
  // statistics]): the norm reads its input twice and writes its output
  // (3 x 2 z B, 4 z FLOPs) and reads and writes the running mean and
  // variance, 2 x 64 each in fp16 (4 x 64 x 2 B, 3 FLOPs an element and 64
  // for the variance's correction); num_batches_tracked's increment before
  // it moves one int64 each way.
  const sim::Kernel* bn = find(v.forward, "conv.0.bn");
  REQUIRE(bn != nullptr);
  CHECK(bn->bytes == 3 * 2 * z + 4 * 64 * 2);
  CHECK(bn->flops == Approx(4.0 * z + 7 * 64));
  const sim::Kernel* inc = find(v.forward, "conv.0.bn.num_batches_tracked");
  REQUIRE(inc != nullptr);
  CHECK(inc->bytes == 16);
  CHECK(inc < bn);
  // Backward: the norm's gradient over the activations alone, and no increment.
  REQUIRE(find(v.backward, "conv.0.bn.bwd") != nullptr);
  CHECK(find(v.backward, "conv.0.bn.bwd")->bytes == 2 * 3 * 2 * z);
  CHECK(find(v.backward, "conv.0.bn.num_batches_tracked.bwd") == nullptr);
  // Without batch norm, neither.
  CHECK(find(load_model("vgg11")->layers(shape(2, 1, 2))[0].forward, "conv.0.bn.num_batches_tracked") == nullptr);
}

TEST_CASE("a transposed convolution's FLOPs and saved bytes, by hand", "[models][seed003]") {
  // conv-autoencoder at b = 2, fp32: the decoder's ConvTranspose2d(32, 16, 3,
  // stride 2, padding 1, output_padding 1) takes 7 x 7 to (7 - 1) 2 - 2 + 3 + 1 = 14.
  const auto layers = load_model("conv-autoencoder")->layers(shape(2, 1, 4));
  REQUIRE(layers.size() == 6);
  const sim::Layer& l = layers[4];
  CHECK(l.signature == "convt.layer:ci=32,co=16,k=3,s=2,p=1,op=1,hw=7,act=1,mse=0");
  const sim::Kernel* k = find(l.forward, "dec.1.convt");
  REQUIRE(k != nullptr);
  // col2im's GEMM: m = b Hi Wi = 98, n = C_out k k = 144, k = C_in = 32.
  CHECK(k->flops == Approx(2.0 * 98 * 144 * 32));  // 903,168
  // Saved: the input 2 x 32 x 7 x 7 x 4 B = 12,544 and ReLU's output 2 x 16 x 14 x 14 x 4 B = 25,088.
  CHECK(l.saved_bytes == 12544 + 25088);
  CHECK(l.output_bytes == 25088);
  // The last layer: ConvTranspose2d(16, 1) to 28 x 28, sigmoid, MSE against the input.
  const sim::Layer& last = layers[5];
  CHECK(last.kind == sim::LayerKind::kHead);
  CHECK(last.output_bytes == 4);
  CHECK(last.saved_bytes == 2 * 16 * 14 * 14 * 4 + 2 * 28 * 28 * 4 + 2 * 28 * 28 * 4);  // input, sigmoid's output, the target
  // The encoder's sides: 28 -> 14 -> 7 -> 1 (the latent), the decoder's 1 -> 7 -> 14 -> 28.
  CHECK(layers[2].output_bytes == 2 * 64 * 4);
  CHECK(layers[3].output_bytes == 2 * 32 * 7 * 7 * 4);
}

TEST_CASE("the encoder-decoder and the bag of words keep what autograd keeps", "[models][seed003]") {
  // seq2seq-tiny: embed 32, hidden 64, 2 layers, dropout, vocabularies 256;
  // b = 2, s = 16, fp32, cuDNN's reserve (fused_rnn).
  const auto layers = load_model("seq2seq-tiny")->layers(shape(2, 16, 4));
  REQUIRE(layers.size() == 2);
  const std::int64_t t = 32, e = 4;
  // Encoder: ids 8t, the embedding's dropout mask t E (1 B), per layer its
  // input and 6 H a step, the mask between the layers t H.
  CHECK(layers[0].saved_bytes == 8 * t + t * 32 + (e * t * 32 + 6 * e * t * 64) + t * 64 + (e * t * 64 + 6 * e * t * 64));
  CHECK(layers[0].output_bytes == e * 2 * 2 * 2 * 64);  // h and c of 2 layers, b = 2
  // Decoder: the same over s - 1 = 15 steps, then fc_out's input and the fp32 log-softmax.
  const std::int64_t u = 30;
  CHECK(layers[1].saved_bytes == 8 * u + u * 32 + (e * u * 32 + 6 * e * u * 64) + u * 64 + (e * u * 64 + 6 * e * u * 64) + e * u * 64 +
                                     4 * u * 256);
  CHECK(layers[1].backward_workspace_bytes == 8 * u * 256);
  // nbow: b = 3 bags of 5 tokens keep the indices, offset2bag (8 B a token), offsets and bag sizes (8 B a bag).
  const auto bag = load_model("nbow-tiny")->layers(shape(3, 5, 4));
  CHECK(bag[0].saved_bytes == 8 * 15 * 2 + 8 * 3 * 2);
  CHECK(bag[0].output_bytes == 3 * 64 * 4);
  CHECK(bag[1].signature == "fc.head:in=64,c=2");
}

TEST_CASE("a GRU encoder-decoder counts nn.GRU's parameters, FLOPs and saved bytes, by hand", "[models][seed003]") {
  const auto gru = [](const char* name, std::vector<std::string> kv) {
    std::vector<sim::Override> o{sim::parse_override("model.cell=gru")};
    for (const auto& s : kv) o.push_back(sim::parse_override("model." + s));
    return load_model(name, o);
  };
  // nn.GRU per layer: W_ih 3H x in, W_hh 3H x H, b_ih and b_hh 3H each.
  // seq2seq-tiny (embed 32, hidden 64, 2 layers, vocabularies 256): a side's
  // layer 0 has 192 x 96 + 384 = 18,816, layer 1 192 x 128 + 384 = 24,960;
  // two sides 87,552; the embeddings 2 x 256 x 32 = 16,384; fc_out 64 x 256 + 256 = 16,640.
  CHECK(gru("seq2seq-tiny", {})->parameters() == 2 * (18816 + 24960) + 16384 + 16640);
  CHECK(gru("seq2seq-tiny", {})->parameters() == 120'576);
  // seq2seq: a side's GRUs are 1536 x 768 + 3,072 and 1536 x 1024 + 3,072 =
  // 2,758,656, three quarters of the LSTMs' 3,678,208; the LSTM model's
  // 13,898,501 less 2 x 919,552.
  CHECK(gru("seq2seq", {})->parameters() == 13'898'501 - 2 * 919'552);
  for (const char* name : {"seq2seq", "seq2seq-tiny"}) {
    const auto m = gru(name, {});
    std::int64_t sum = 0;
    for (const auto& l : m->layers(shape(2, m->max_seq_len(), 4))) sum += l.params;
    CHECK(sum == m->parameters());
  }
  // The LSTM's signatures are as they were; the GRU's say so.
  CHECK(load_model("seq2seq-tiny")->layers(shape(2, 16, 4))[0].signature == "s2s.encoder:v=256,e=32,hs=64,l=2,drop=1");
  CHECK(gru("seq2seq-tiny", {})->layers(shape(2, 16, 4))[1].signature == "s2s.decoder:v=256,e=32,hs=64,l=2,drop=1,gru=1");

  // One GRU layer: embed 4, hidden 5, no dropout, vocabularies 8; b = 2
  // sentences of s = 3 tokens, fp32: t = 6 tokens.
  const auto small = gru("seq2seq", {"embed=4", "hidden=5", "layers=1", "dropout=false", "src_vocab=8", "tgt_vocab=8", "seq_len=3"});
  sim::WorkloadShape w = shape(2, 3, 4);
  const auto layers = small->layers(w);
  const sim::Layer& enc = layers[0];
  CHECK(enc.signature == "s2s.encoder:v=8,e=4,hs=5,l=1,drop=0,gru=1");
  CHECK(enc.params == 8 * 4 + (15 * 4 + 15 * 5 + 2 * 15));  // 197
  // The input projection of every step, (6, 4) x (4, 15): 2 x 6 x 15 x 4 = 720
  // FLOPs, 4 (24 + 60 + 90) = 696 bytes.
  const sim::Kernel* proj = find(enc.forward, "encoder.gru.0.input_proj");
  REQUIRE(proj != nullptr);
  CHECK(proj->flops == Approx(720));
  CHECK(proj->bytes == 696);
  // A step, 3 of them: (2, 5) x (5, 15) is 2 x 2 x 15 x 5 = 300 FLOPs, the
  // gates 10 H b = 100; 4 (10 + 75 + 30) = 460 bytes for the GEMM and
  // 12 H b e = 480 for the gates.
  const sim::Kernel* step = find(enc.forward, "encoder.gru.0.step");
  REQUIRE(step != nullptr);
  CHECK(step->flops == Approx(400));
  CHECK(step->bytes == 940);
  CHECK(step->repeat == 3);
  CHECK(step->kind == sim::KernelKind::kRecurrent);
  // Saved with cuDNN's reserve: the ids 8 t = 48, the layer input e t in = 96
  // and 5 H a step, 5 x 4 x 6 x 5 = 600.
  CHECK(enc.saved_bytes == 48 + 96 + 600);
  CHECK(enc.backward_workspace_bytes == 0);
  // The hidden state of its one layer goes to the decoder: e L b H = 40.
  CHECK(enc.output_bytes == 4 * 1 * 2 * 5);
  // ATen's composite cell on a CPU (Note [GRU memory]): 7 H a step,
  // 7 x 4 x 6 x 5 = 840; backward's W_hh sums, 3 x 4 x 15 x 5 = 900.
  w.fused_rnn = false;
  const auto cpu = small->layers(w);
  CHECK(cpu[0].saved_bytes == 48 + 96 + 840);
  CHECK(cpu[0].backward_workspace_bytes == 900);
  // The decoder over s - 1 = 2 steps (t = 4): ids 32, its input 64, 7 H a
  // step 560, then fc_out's input 80 and the fp32 log-softmax 4 x 4 x 8 = 128.
  CHECK(cpu[1].saved_bytes == 32 + 64 + 560 + 80 + 128);
  CHECK(small->tp_error(2).rfind("a GRU has no tensor-parallel split", 0) == 0);
}

TEST_CASE("seed 003's models refuse shapes that cannot be, in one line", "[models][seed003][bad-input]") {
  auto set = [](const char* name, std::vector<std::string> kv) {
    std::vector<sim::Override> o;
    for (const auto& s : kv) o.push_back(sim::parse_override("model." + s));
    return error_of([&] { load_model(name, o); });
  };
  // A 5 x 5 kernel on 4 x 4 images: said of the key the user changed, the
  // image's size, or of the kernel where both were set.
  CHECK_THAT(set("cnn", {"image_size=4"}),
             Catch::Contains("model.image_size: 4 leaves conv.0 a 4 x 4 input, smaller than its 5 x 5 kernel (padding 0); "
                             "valid: a larger image_size, or model.kernel of 1 to 4"));
  CHECK_THAT(set("cnn", {"image_size=4", "kernel=5"}),
             Catch::Contains("model.kernel: 5 is larger than the 4 x 4 input of conv.0 (padding 0); valid: 1 to 4"));
  CHECK_THAT(set("cnn", {"padding=-1"}), Catch::Contains("model.padding: -1"));
  CHECK_THAT(set("cnn", {"conv_channels=[0, 16]"}), Catch::Contains("model.conv_channels: entry 1 is 0; valid: 1 to"));
  CHECK_THAT(set("mlp", {"channels=0"}), Catch::Contains("model.channels: 0"));
  CHECK_THAT(set("vgg11", {"image_size=16"}), Catch::Contains("model.image_size: 1 x 1 is what reaches conv.7's 2 x 2 max pool"));
  CHECK_THAT(set("vgg11", {"config=C"}), Catch::Contains("model.config: 'C' is not one of A, B, D, E"));
  CHECK_THAT(error_of([] { load_model("cnn")->layers(shape(1, 2, 4)); }), Catch::Contains("plan.seq_len: 2 for cnn"));
  CHECK_THAT(error_of([] { load_model("seq2seq", {sim::parse_override("model.seq_len=1")}); }), Catch::Contains("model.seq_len: 1"));
  CHECK(load_model("seq2seq")->min_seq_len() == 2);  // resolve refuses plan.seq_len 1 (tests/cli)
  CHECK_THAT(error_of([] { load_model("seq2seq", {sim::parse_override("model.cell=rnn")}); }),
             Catch::Contains("model.cell: 'rnn' is not one of lstm, gru"));
  // Accepted: VGG16's configuration D has 13 convolutions.
  CHECK(load_model("vgg11", {sim::parse_override("model.config=D")})->layer_count() == 13 + 4);
}
