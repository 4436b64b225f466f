#include <catch2/catch.hpp>

#include "test_util.hpp"

#include <algorithm>
#include <cmath>
#include <functional>
#include <map>

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
  return w;
}

// HuggingFace's GPT-2 count: wte V h + wpe P h + L (4h^2 + 2h(4h) + 9h + 4h) + ln_f 2h.
std::int64_t gpt2_params(std::int64_t l, std::int64_t h) {
  const std::int64_t v = 50257, p = 1024, f = 4 * h;
  return v * h + p * h + l * (4 * h * h + 2 * h * f + 9 * h + f) + 2 * h;
}

}  // namespace

TEST_CASE("GPT-2 parameter counts equal HuggingFace's", "[models]") {
  // The published counts (model.num_parameters() of GPT2LMHeadModel, tied head).
  CHECK(load_model("gpt2")->parameters() == 124'439'808);
  CHECK(load_model("gpt2-medium")->parameters() == 354'823'168);
  CHECK(load_model("gpt2-large")->parameters() == 774'030'080);
  CHECK(load_model("gpt2-xl")->parameters() == 1'557'611'200);
  // ... and the same by the formula.
  CHECK(gpt2_params(12, 768) == 124'439'808);
  CHECK(gpt2_params(48, 1600) == 1'557'611'200);
}

TEST_CASE("BERT parameter counts equal HuggingFace's BertModel (with pooler)", "[models]") {
  // bert-base: embeddings (30522 + 512 + 2) x 768 + 2 x 768 = 23,837,184;
  // 12 layers x 7,087,872; pooler 768^2 + 768 = 590,592: 109,482,240.
  CHECK(load_model("bert-base")->parameters() == 109'482'240);
  CHECK(load_model("bert-large")->parameters() == 335'141'888);
  // bert-tiny (google/bert_uncased_L-2_H-128_A-2): 4,386,176 parameters.
  CHECK(load_model("bert-tiny")->parameters() == (30522 + 512 + 2) * 128 + 256 + 2 * (4 * 128 * 128 + 2 * 128 * 512 + 9 * 128 + 512) + 128 * 128 + 128);
}

TEST_CASE("Bi-LSTM parameters as torch.nn.LSTM counts them", "[models]") {
  // Per layer and direction 4H(in + H) + 8H; layer 0 in = 768, layer 1 in = 2H;
  // head 2H x 33 + 33. H = 256.
  const std::int64_t h = 256;
  const std::int64_t l0 = 2 * (4 * h * 768 + 4 * h * h + 8 * h);
  const std::int64_t l1 = 2 * (4 * h * 2 * h + 4 * h * h + 8 * h);
  CHECK(load_model("bilstm")->parameters() == l0 + l1 + 2 * h * 33 + 33);
}

TEST_CASE("model FLOPs follow Korthikanti et al. 2022, Eq. 7", "[models]") {
  // 72 B s l h^2 (1 + s/(6h) + V/(12 h l)) for forward + backward, no recompute.
  for (const auto& [name, l, h] : {std::tuple{"gpt2", 12, 768}, std::tuple{"gpt2-xl", 48, 1600}}) {
    const double b = 8, s = 1024, v = 50257;
    const double expected = 72.0 * b * s * l * h * h * (1 + s / (6.0 * h) + v / (12.0 * h * l));
    CHECK(load_model(name)->model_flops(shape(8, 1024, 2)) == Approx(expected).epsilon(1e-12));
  }
}

TEST_CASE("a transformer layer's matmuls: 24 b s h^2 + 4 b s^2 h forward, twice that backward", "[models]") {
  const auto m = load_model("gpt2");
  const auto layers = m->layers(shape(2, 512, 2));
  REQUIRE(layers.size() == 14);  // embedding, 12 blocks, head
  const auto& blk = layers[1];
  CHECK(blk.kind == sim::LayerKind::kTransformer);
  CHECK(blk.params == 7'087'872);
  double mm_fwd = 0, mm_bwd = 0;
  for (const auto& k : blk.forward) {
    if (k.kind == sim::KernelKind::kGemm || k.kind == sim::KernelKind::kAttention) mm_fwd += k.flops;
  }
  for (const auto& k : blk.backward) {
    if (k.kind == sim::KernelKind::kGemm || k.kind == sim::KernelKind::kAttention) mm_bwd += k.flops;
  }
  const double b = 2, s = 512, h = 768;
  CHECK(mm_fwd == Approx(24 * b * s * h * h + 4 * b * s * s * h));
  CHECK(mm_bwd == Approx(2 * mm_fwd));
}

TEST_CASE("activation bytes per layer follow Korthikanti et al. 2022, Table 2", "[models]") {
  const std::int64_t b = 4, s = 1024, h = 768, a = 12;
  const auto fp16 = load_model("gpt2")->layers(shape(b, s, 2));
  // 16-bit activations, 1-byte masks: s b h (34 + 5 a s / h).
  CHECK(fp16[1].saved_bytes == s * b * h * 34 + 5 * a * s * s * b);
  // fp32: the 16 sbh-sized tensors and 2 as^2b tensors double, the masks do not:
  // sbh (16 x 4 + 2) + as^2b (2 x 4 + 1).
  const auto fp32 = load_model("gpt2")->layers(shape(b, s, 4));
  CHECK(fp32[1].saved_bytes == s * b * h * 66 + 9 * a * s * s * b);
  CHECK(fp32[1].output_bytes == 4 * s * b * h);
  // Without dropout: no masks and no attention-dropout output: sbh 32 + 2 as^2b.
  const auto nodrop = load_model("gpt2", {sim::parse_override("model.dropout=false")})->layers(shape(b, s, 2));
  CHECK(nodrop[1].saved_bytes == s * b * h * 32 + 2 * a * s * s * b);
  // LibTorch's CPU dropout keeps fp32 masks (mask_bytes 4, measured by dtsim
  // validate): the 2 sbh masks and the as^2b mask take 4 bytes, sbh (64 + 2 x 4)
  // + as^2b (2 x 4 + 4); the embedding's mask too (4 sbh instead of sbh).
  sim::WorkloadShape cpu = shape(b, s, 4);
  cpu.mask_bytes = 4;
  const auto fp32cpu = load_model("gpt2")->layers(cpu);
  CHECK(fp32cpu[1].saved_bytes == s * b * h * 72 + 12 * a * s * s * b);
  CHECK(fp32cpu[0].saved_bytes == 4 * s * b * h);
  CHECK(fp32[0].saved_bytes == s * b * h);
  // The LM head keeps ln_f's input and output and the fp32 log-softmax
  // (2 e sbh + 4 t V); its backward holds the fp32 gradients of the
  // log-softmax and the logits (8 t V) in any precision: the 16-bit cast of
  // the logits' gradient comes once they are freed (an H100 run of gpt2 in
  // fp16, 4 x 1024 tokens, rose 1,572 MiB in the head's backward; 8 t V is
  // 1,570 MiB).
  const std::int64_t V = 50257, t = b * s;
  CHECK(fp32.back().saved_bytes == 2 * 4 * s * b * h + 4 * t * V);
  CHECK(fp32.back().backward_workspace_bytes == 8 * t * V);
  CHECK(fp16.back().backward_workspace_bytes == 8 * t * V);
}

TEST_CASE("a vocab-parallel head's backward holds what its cross-entropy makes (Megatron's or DTensor's)", "[models][tp]") {
  // gpt2 at tp 2, 2 x 1024 tokens: V/2 rows a rank (ceil(50257 / 2)).
  // Megatron-LM's _VocabParallelCrossEntropy turns its saved fp32 softmax
  // into the gradient in place: the backward adds the gradient's cast to
  // the 16-bit logits (2 t v), or in fp32 the GEMM's input gradient beside
  // the softmax (4 t h). DTensor's loss_parallel makes a new gradient, as
  // F.cross_entropy does: 8 t v, as without tp.
  const std::int64_t b = 2, s = 1024, t = b * s, v = (50257 + 1) / 2, h = 1600;
  auto at = [&](int e, bool megatron) {
    sim::WorkloadShape w = shape(b, s, e);
    w.tp = 2;
    w.megatron_loss = megatron;
    return load_model("gpt2-xl")->layers(w).back();
  };
  CHECK(at(2, true).backward_workspace_bytes == 2 * t * v);
  CHECK(at(4, true).backward_workspace_bytes == 4 * t * h);
  CHECK(at(2, false).backward_workspace_bytes == 8 * t * v);
  CHECK(at(4, false).backward_workspace_bytes == 8 * t * v);
  // Both keep the fp32 softmax (or log-softmax) of the rank's logits.
  CHECK(at(2, true).saved_bytes == at(2, false).saved_bytes);
}

TEST_CASE("the tied LM head borrows the token embedding", "[models]") {
  const auto layers = load_model("gpt2")->layers(shape(1, 1024, 2));
  CHECK(layers.back().kind == sim::LayerKind::kLmHead);
  CHECK(layers.back().params == 2 * 768);
  CHECK(layers.back().borrowed_params == 50257 * 768);
  std::int64_t sum = 0;
  for (const auto& l : layers) sum += l.params;
  CHECK(sum == 124'439'808);
}

TEST_CASE("layer parameters add up to the model's for every built-in", "[models]") {
  for (const auto& name : builtin_names()) {
    INFO(name);
    const auto m = load_model(name);
    std::int64_t sum = 0;
    for (const auto& l : m->layers(shape(1, std::min<std::int64_t>(64, m->max_seq_len()), 2))) sum += l.params;
    CHECK(sum == m->parameters());
    CHECK_FALSE(describe_builtin(name).empty());
  }
}

TEST_CASE("a layer's modules own its parameters, at every tensor-parallel degree (Note [ZeRO-3 modules])", "[models][zero3]") {
  // DeepSpeed's ZeRO-3 gathers each module's own tensors: they must sum to
  // the layer's parameters, and a tied head's one tensor to what it borrows
  // (the token embedding's first tensor, by name, in an earlier layer).
  for (const auto& name : builtin_names()) {
    const auto m = load_model(name);
    for (const int tp : {1, 2, 4}) {
      if (!m->tp_error(tp).empty()) continue;
      INFO(name << " tp " << tp);
      sim::WorkloadShape s = shape(1, std::min<std::int64_t>(64, m->max_seq_len()), 2);
      s.tp = tp;
      std::vector<std::string> seen;
      for (const auto& l : m->layers(s)) {
        INFO(l.name);
        std::int64_t own = 0, tied = 0;
        for (const auto& mod : l.modules) {
          std::int64_t sum = 0;
          for (const std::int64_t t : mod.tensors) {
            CHECK(t > 0);
            sum += t;
          }
          if (mod.tied.empty()) {
            own += sum;
          } else {
            tied += sum;
            CHECK(mod.tensors.size() == 1);
            CHECK(std::find(seen.begin(), seen.end(), mod.tied) != seen.end());
          }
          seen.push_back(mod.name);
        }
        if (!l.modules.empty()) {
          CHECK(own == l.params);
          CHECK(tied == l.borrowed_params);
        }
      }
    }
  }
  // GPT-2's block by hand: ln_1, c_attn (3h x h and 3h), c_proj, ln_2,
  // c_fc (4h x h and 4h), c_proj; h = 768.
  const auto gpt2 = load_model("gpt2")->layers(shape(1, 1024, 2));
  const auto& block = gpt2[1].modules;
  REQUIRE(block.size() == 6);
  CHECK(block[1].tensors == std::vector<std::int64_t>{3 * 768 * 768, 3 * 768});
  CHECK(block[4].tensors == std::vector<std::int64_t>{4 * 768 * 768, 4 * 768});
  CHECK(gpt2.back().modules.back().tied == "wte.gather");
}

TEST_CASE("the LSTM recurrence is s sequential steps", "[models]") {
  const auto layers = load_model("bilstm")->layers(shape(8, 100, 2));
  REQUIRE(layers.size() == 3);
  int steps = 0;
  for (const auto& k : layers[0].forward) {
    if (k.kind == sim::KernelKind::kRecurrent) {
      CHECK(k.repeat == 100);
      CHECK(k.m == 8);
      CHECK(k.n == 4 * 256);
      ++steps;
    }
  }
  CHECK(steps == 2);  // one per direction
}

TEST_CASE("an LSTM's saved bytes: cuDNN's reserve space, or ATen's cell step by step (Note [LSTM memory])", "[models]") {
  // bilstm-tiny: input 64, hidden H = 64, 2 directions, 33 classes; b = 4,
  // s = 32, fp32: t = 128 tokens.
  const auto m = load_model("bilstm-tiny");
  sim::WorkloadShape w = shape(4, 32, 4);
  const auto fused = m->layers(w);
  REQUIRE(fused.size() == 3);
  // Reserve space: the input once, 6H per step and direction.
  CHECK(fused[0].saved_bytes == 4 * 128 * 64 + 2 * 4 * 128 * 6 * 64);  // 425,984
  CHECK(fused[0].backward_workspace_bytes == 0);
  CHECK(fused[0].stage_input_bytes == 0);
  w.fused_rnn = false;
  const auto cell = m->layers(w);
  // Layer 0: a time-major copy of the batch-first input per direction, and
  // 7H per step and direction: 2 x 4 x 128 x 64 + 2 x 4 x 128 x 448.
  CHECK(cell[0].saved_bytes == 65'536 + 458'752);
  CHECK(cell[0].stage_input_bytes == 0);
  // Layer 1 reads layer 0's time-major output (128 wide) through a view; from
  // another stage it arrives batch-major and is copied per direction.
  CHECK(cell[1].saved_bytes == 4 * 128 * 128 + 458'752);
  CHECK(cell[1].stage_input_bytes == 2 * 4 * 128 * 128);
  // W_hh's gradient sum: 3 x 4H x H x 4 bytes.
  CHECK(cell[1].backward_workspace_bytes == 3 * 4 * 64 * 64 * 4);
  CHECK(cell[1].output_bytes == 4 * 128 * 128);
  CHECK(cell[1].strided_output);
  // The head's last-step input is a view keeping the whole LSTM output, and
  // the log-softmax output: 4 x 128 x 128 + 4 x 4 x 33.
  CHECK(cell[2].saved_bytes == 65'536 + 528);
  CHECK(fused[2].saved_bytes == 65'536 + 528);
  // One sequence: the transposed input is contiguous, saved as a view.
  const auto one = m->layers([&] {
    sim::WorkloadShape o = shape(1, 32, 4);
    o.fused_rnn = false;
    return o;
  }());
  CHECK(one[0].saved_bytes == 4 * 32 * 64 + 2 * 4 * 32 * 448);
  CHECK(one[1].stage_input_bytes == 0);
}

TEST_CASE("HuggingFace config.json gives the built-in's counts", "[models]") {
  CHECK(load_model(std::string(DTSIM_TEST_DATA) + "/gpt2_config.json")->parameters() == 124'439'808);
  // bert_config.json is bert-base-uncased's, whose architectures name
  // BertForMaskedLM: BertModel's 109,482,240 without the pooler (768^2 +
  // 768 = 590,592), with the MLM transform (768^2 + 768 + 2 x 768 =
  // 592,128) and the decoder's own bias (30,522): 109,514,298.
  CHECK(load_model(std::string(DTSIM_TEST_DATA) + "/bert_config.json")->parameters() == 109'514'298);
}

TEST_CASE("our YAML and overrides", "[models]") {
  const auto m = load_model(std::string(DTSIM_CONFIG_DIR_FOR_TESTS) + "/models/my-gpt.yaml");
  CHECK(m->name() == "my-gpt");
  // 1.3B: 50257 x 2048 + 2048 x 2048 + 24 (4h^2 + 2h 8192 + 9h + 8192) + 2h
  const std::int64_t h = 2048, f = 8192;
  CHECK(m->parameters() == 50257 * h + 2048 * h + 24 * (4 * h * h + 2 * h * f + 9 * h + f) + 2 * h);
  CHECK(load_model("gpt2", {sim::parse_override("model.layers=24")})->parameters() == gpt2_params(24, 768));
}

TEST_CASE("bad model input names file, line and key", "[models][bad-input]") {
  CHECK_THROWS_AS(load_model("/no/such/model.yaml"), IoError);
  CHECK_THAT(error_of([] { load_model("gpt-2"); }), Catch::Contains("unknown model (did you mean 'gpt2'?)"));
  CHECK_THAT(error_of([] { load_model("gpt2", {sim::parse_override("model.heads=7")}); }),
             Catch::StartsWith("--set model.heads: 7 does not divide hidden 768"));
  CHECK_THAT(error_of([] { load_model("gpt2", {sim::parse_override("model.layer=7")}); }),
             Catch::Contains("model.layer: unknown key (did you mean 'layers'?)"));
  CHECK_THAT(error_of([] { load_model("gpt2", {sim::parse_override("model.hidden=big")}); }),
             Catch::Contains("model.hidden: 'big' is not an integer"));
  CHECK_THAT(error_of([] { load_model("bert-base", {sim::parse_override("model.family=rnn")}); }),
             Catch::Contains("model.family: 'rnn' is not one of gpt, gpt2, llama, bert, bilstm, vgg, cnn, mlp, conv-autoencoder, nbow, seq2seq"));
}

TEST_CASE("layer signatures name the architecture, not the batch", "[models]") {
  // gpt2 (124M): h=768, 12 heads, f=4h=3072, V=50257, 1024 positions, tied head.
  const auto gpt2 = load_model("gpt2");
  const auto a = gpt2->layers(shape(1, 64, 2));
  const auto b = gpt2->layers(shape(4, 256, 4));
  REQUIRE(a.size() == 14);  // embedding, 12 blocks, head
  CHECK(a[0].signature == "gpt2.embed:h=768,v=50257,p=1024,drop=1");
  CHECK(a[1].signature == "gpt2.block:h=768,a=12,f=3072,drop=1");
  CHECK(a[12].signature == a[1].signature);
  CHECK(a[13].signature == "gpt2.head:h=768,v=50257,tied=1");
  for (std::size_t i = 0; i < a.size(); ++i) CHECK(a[i].signature == b[i].signature);

  // bert-base: the pooler, no classifier; post-LN layers get their own family.
  const auto bert = load_model("bert-base")->layers(shape(1, 64, 2));
  CHECK(bert.front().signature == "bert.embed:h=768,v=30522,p=512,t=2,drop=1");
  CHECK(bert[1].signature == "bert.layer:h=768,a=12,f=3072,drop=1");
  CHECK(bert.back().signature == "bert.pooler:h=768");

  // bilstm: layer 0 reads the 768-wide embeddings, layer 1 the 2 x 256 outputs.
  const auto lstm = load_model("bilstm")->layers(shape(1, 64, 2));
  REQUIRE(lstm.size() == 3);
  CHECK(lstm[0].signature == "lstm.layer:in=768,hs=256,dirs=2");
  CHECK(lstm[1].signature == "lstm.layer:in=512,hs=256,dirs=2");
  CHECK(lstm[2].signature == "lstm.head:in=512,c=33");
}

TEST_CASE("every model counts its layers without building them, as layers() builds them", "[models]") {
  // The rules table and the partition ask layer_count() for every prediction.
  for (const auto& name : models::builtin_names()) {
    INFO(name);
    const auto m = models::load_model(name);
    CHECK(m->layer_count() == static_cast<int>(m->layers(sim::WorkloadShape{}).size()));
  }
  // BERT without its pooler, with a classifier: embedding, 2 blocks, classifier = 4.
  const auto bert = models::load_model("bert-tiny", {{"model", "pooler", "false"}, {"model", "num_labels", "3"}});
  CHECK(bert->layer_count() == 4);
  CHECK(bert->layers(sim::WorkloadShape{}).size() == 4);
}

namespace {
/// Two sequences of 128 tokens in 16 bits at tp 2 with sequence parallelism.
sim::WorkloadShape sp_shape() {
  sim::WorkloadShape shape;
  shape.micro_batch = 2;
  shape.seq_len = 128;
  shape.act_bytes = 2;
  shape.tp = 2;
  shape.sequence_parallel = true;
  return shape;
}
using Op = sim::CollectiveOp;
using Ops = std::vector<std::pair<Op, Bytes>>;
/// A layer's collectives as (op, bytes x count).
Ops ops(const std::vector<sim::LayerComm>& l) {
  Ops out;
  for (const auto& c : l) out.emplace_back(c.op, c.bytes * c.count);
  return out;
}
}  // namespace

TEST_CASE("experts split over tp exchange as Megatron-Core's allgather and alltoall dispatchers (Note [Mixture of experts])",
          "[models][tp][sp][moe]") {
  sim::WorkloadShape shape = sp_shape();
  shape.etp = 2;
  shape.moe_allgather = true;
  const std::int64_t t = 2 * 128;
  // Mixtral (h 4096, E 8, top-2, no shared expert): attention's gather and
  // reduce-scatter of 2 t h bytes, then the allgather dispatcher's over the
  // 2 tp ranks (MoEAllGatherTokenDispatcher.token_dispatch): the routing
  // map (a bool a token and expert, t 8), the fp32 probabilities (4 t 8),
  // the tokens (2 t h); the experts' parts reduce-scattered in the
  // probabilities' fp32 (token_combine: 4 t h). Backward: the tokens' and
  // probabilities' gradients reduce-scattered, the parts' gathered in fp32.
  const auto mixtral = models::load_model("mixtral-8x7b")->layers(shape);
  const std::int64_t th = 2 * t * 4096;
  CHECK(ops(mixtral[1].tp_forward) ==
        Ops{{Op::kAllGather, th}, {Op::kReduceScatter, th}, {Op::kAllGather, t * 8}, {Op::kAllGather, 4 * t * 8}, {Op::kAllGather, th}, {Op::kReduceScatter, 2 * th}});
  CHECK(ops(mixtral[1].tp_backward) ==
        Ops{{Op::kAllGather, th}, {Op::kReduceScatter, th}, {Op::kReduceScatter, th}, {Op::kReduceScatter, 4 * t * 8}, {Op::kAllGather, 2 * th}});
  CHECK(mixtral[1].signature.find(",ag=1") != std::string::npos);
  // The router runs on the rank's t / tp tokens: 2 x 128 x 8 x 4096 FLOPs;
  // each of the 8 experts' columns on its share of every token's 2 rows,
  // 2 t / 8 = 64 rows: gate and up 2 x 64 x (2 x 14336 / 2) x 4096.
  const auto kernel = [](const sim::Layer& l, const char* name) {
    const auto k = std::find_if(l.forward.begin(), l.forward.end(), [&](const sim::Kernel& x) { return x.name == name; });
    REQUIRE(k != l.forward.end());
    return k->flops;
  };
  CHECK(kernel(mixtral[1], "moe.router") == Approx(2.0 * 128 * 8 * 4096));
  CHECK(kernel(mixtral[1], "moe.experts.gate_up") == Approx(8 * 2.0 * 64 * 14336 * 4096));
  // DeepSeek-V3 (h 7168, E 256; layer 4 is its first MoE layer): its
  // shared expert gathers and reduce-scatters its own (the pair counted
  // twice with attention's), then the dispatcher's exchanges.
  const auto v3 = models::load_model("deepseek-v3")->layers(shape);
  REQUIRE(v3[4].signature.rfind("moe.block:", 0) == 0);
  const std::int64_t th3 = 2 * t * 7168;
  CHECK(ops(v3[4].tp_forward) == Ops{{Op::kAllGather, 2 * th3},
                                     {Op::kReduceScatter, 2 * th3},
                                     {Op::kAllGather, t * 256},
                                     {Op::kAllGather, 4 * t * 256},
                                     {Op::kAllGather, th3},
                                     {Op::kReduceScatter, 2 * th3}});
  // The alltoall dispatcher at ep 1 (MoEAlltoAllTokenDispatcher: the
  // all-to-all over one rank moves nothing): each rank permutes its own 128
  // tokens' 2 rows, then the 2 tp ranks' rows are gathered, their counts
  // first (8 bytes an expert a rank: 8 x 8 x 2), 2 x 128 x 2 = 512 rows of
  // 2 h bytes, and the parts reduce-scattered in fp32 (4 h a row).
  shape.moe_allgather = false;
  const auto a2a = models::load_model("mixtral-8x7b")->layers(shape);
  const std::int64_t rows = 512;
  CHECK(ops(a2a[1].tp_forward) == Ops{{Op::kAllGather, th},
                                      {Op::kReduceScatter, th},
                                      {Op::kAllGather, 8 * 8 * 2},
                                      {Op::kAllGather, 2 * rows * 4096},
                                      {Op::kReduceScatter, 4 * rows * 4096}});
  CHECK(ops(a2a[1].tp_backward) ==
        Ops{{Op::kAllGather, th}, {Op::kReduceScatter, th}, {Op::kReduceScatter, 2 * rows * 4096}, {Op::kAllGather, 4 * rows * 4096}});
  CHECK(a2a[1].signature.find(",ag=1") == std::string::npos);
  CHECK(kernel(a2a[1], "moe.experts.gate_up") == Approx(8 * 2.0 * 64 * 14336 * 4096));
  // Without sequence parallelism every rank routes every token: one
  // all-reduce of the experts' parts, either dispatcher.
  shape.sequence_parallel = false;
  for (const bool allgather : {false, true}) {
    shape.moe_allgather = allgather;
    CHECK(ops(models::load_model("mixtral-8x7b")->layers(shape)[1].tp_forward) == Ops{{Op::kAllReduce, th}, {Op::kAllReduce, th}});
  }
}

TEST_CASE("the allgather dispatcher at ep > 1 gathers every token over the etp x ep ranks (Note [Mixture of experts])", "[models][moe][ep]") {
  // Mixtral at tp 2 with sequence parallelism, experts whole (etp 1) over
  // ep 2: the tp_ep group is the 2 ep ranks, each holding 128 of the 256
  // tokens; gathered, 256 tokens, of whose 512 rows this rank's 4 experts
  // take half, 256, 64 an expert. No counts are exchanged (each rank counts
  // its experts' rows in the gathered map) and nothing over tp.
  sim::WorkloadShape shape = sp_shape();
  shape.etp = 1;
  shape.ep = 2;
  shape.moe_allgather = true;
  const auto l = models::load_model("mixtral-8x7b")->layers(shape)[1];
  const std::int64_t tx = 256, th = 2 * tx * 4096;
  CHECK(ops(l.ep_forward) == Ops{{Op::kAllGather, tx * 8}, {Op::kAllGather, 4 * tx * 8}, {Op::kAllGather, th}, {Op::kReduceScatter, 2 * th}});
  CHECK(ops(l.ep_backward) == Ops{{Op::kReduceScatter, th}, {Op::kReduceScatter, 4 * tx * 8}, {Op::kAllGather, 2 * th}});
  const auto gate_up = std::find_if(l.forward.begin(), l.forward.end(), [](const sim::Kernel& k) { return k.name == "moe.experts.gate_up"; });
  REQUIRE(gate_up != l.forward.end());
  CHECK(gate_up->flops == Approx(4 * 2.0 * 64 * (2 * 14336) * 4096));
  // Only attention's pair over tp: the experts are whole.
  CHECK(ops(l.tp_forward) == Ops{{Op::kAllGather, 2 * 256 * 4096}, {Op::kReduceScatter, 2 * 256 * 4096}});
  // The alltoall dispatcher instead: the counts (8 E) and each rank's 256
  // rows (2 h bytes each) there and back, no gather.
  shape.moe_allgather = false;
  const auto a = models::load_model("mixtral-8x7b")->layers(shape)[1];
  CHECK(ops(a.ep_forward) == Ops{{Op::kAllToAll, 8 * 8}, {Op::kAllToAll, 2 * 2 * 256 * 4096}});
}

TEST_CASE("under sequence parallelism the embeddings communicate as Megatron-Core's LanguageModelEmbedding (Note [Sequence parallel embeddings])",
          "[models][tp][sp]") {
  sim::WorkloadShape shape = sp_shape();
  const std::int64_t t = 2 * 128;
  // GPT-2 (h 768): position embeddings are added to the summed lookup, so it
  // is all-reduced as without sequence parallelism, then split; backward
  // all-gathers the split's gradient. The positions' add runs on every token.
  const auto gpt2 = models::load_model("gpt2")->layers(shape);
  CHECK(ops(gpt2.front().tp_forward) == Ops{{Op::kAllReduce, 2 * t * 768}});
  CHECK(ops(gpt2.front().tp_backward) == Ops{{Op::kAllGather, 2 * t * 768}});
  const auto add = std::find_if(gpt2.front().forward.begin(), gpt2.front().forward.end(), [](const sim::Kernel& k) { return k.name == "wpe.add"; });
  REQUIRE(add != gpt2.front().forward.end());
  CHECK(add->flops == Approx(1.0 * t * 768));
  CHECK(gpt2.front().signature.find(",tp=2,sp=1") != std::string::npos);
  CHECK(gpt2.back().signature.find(",tp=2,sp=1") != std::string::npos);
  // BERT's token types likewise.
  const auto bert = models::load_model("bert-base")->layers(shape);
  CHECK(ops(bert.front().tp_forward) == Ops{{Op::kAllReduce, 2 * t * 768}});
  CHECK(ops(bert.front().tp_backward) == Ops{{Op::kAllGather, 2 * t * 768}});
  // Llama (h 4096) adds nothing: the lookup is reduce-scattered, its gradient all-gathered.
  const auto llama = models::load_model("llama-3-8b")->layers(shape);
  CHECK(ops(llama.front().tp_forward) == Ops{{Op::kReduceScatter, 2 * t * 4096}});
  CHECK(ops(llama.front().tp_backward) == Ops{{Op::kAllGather, 2 * t * 4096}});
  CHECK(llama.front().signature.find(",tp=2,sp=1") != std::string::npos);

  // Layer::sp_params: what runs on a rank's tokens only (Note
  // [Sequence-parallel gradients]). GPT-2's block 6 h, its head's ln_f 2 h;
  // Llama's block its two RMSNorms, 2 h, its head's norm h; Qwen3's per-head
  // q/k norms run after the gather and are not counted (2 x 4096 for
  // qwen3-8b); Mixtral's router runs on the rank's tokens (4096 x 8 more).
  CHECK(gpt2[1].sp_params == 6 * 768);
  CHECK(gpt2.back().sp_params == 2 * 768);
  CHECK(llama[1].sp_params == 2 * 4096);
  CHECK(llama.back().sp_params == 4096);
  CHECK(models::load_model("qwen3-8b")->layers(shape)[1].sp_params == 2 * 4096);
  shape.ep = 1;
  CHECK(models::load_model("mixtral-8x7b")->layers(shape)[1].sp_params == 2 * 4096 + 4096 * 8);
  // Nothing without sequence parallelism.
  shape.sequence_parallel = false;
  for (const auto& l : models::load_model("llama-3-8b")->layers(shape)) CHECK(l.sp_params == 0);
  CHECK(models::load_model("gpt2")->layers(shape).front().tp_backward.empty());
}

TEST_CASE("under --tp-comm-overlap the GEMMs beside sequence parallelism's collectives run as tp chunks (Note [Userbuffers' chunks])",
          "[models][tp][sp][tp_overlap]") {
  sim::WorkloadShape shape = sp_shape();  // tp 2, sequence parallel, 2 x 128 tokens
  shape.tp_comm_overlap = true;
  const auto splits = [](const std::vector<sim::Kernel>& ks) {
    std::map<std::string, std::int64_t> out;
    for (const auto& k : ks) {
      if (k.kind == sim::KernelKind::kGemm) out[k.name] = k.splits;
    }
    return out;
  };
  using Splits = std::map<std::string, std::int64_t>;
  // TE's ring exchange (the recipes' FP8 configurations): the column-parallel
  // GEMMs after the all-gather and the row-parallel ones before the
  // reduce-scatter forward, the row-parallel ones' dgrad (the gradient
  // all-gathered); the column-parallel dgrads and every wgrad whole (bulk).
  const auto llama = models::load_model("llama-3-8b")->layers(shape);
  CHECK(splits(llama[1].forward) == Splits{{"attn.qkv", 2}, {"attn.o_proj", 2}, {"mlp.gate_up", 2}, {"mlp.down", 2}});
  CHECK(splits(llama[1].backward) == Splits{{"attn.qkv.dgrad", 1},
                                            {"attn.qkv.wgrad", 1},
                                            {"attn.o_proj.dgrad", 2},
                                            {"attn.o_proj.wgrad", 1},
                                            {"mlp.gate_up.dgrad", 1},
                                            {"mlp.gate_up.wgrad", 1},
                                            {"mlp.down.dgrad", 2},
                                            {"mlp.down.wgrad", 1}});
  const auto gpt2 = models::load_model("gpt2")->layers(shape);
  CHECK(splits(gpt2[1].forward) == Splits{{"attn.qkv", 2}, {"attn.proj", 2}, {"mlp.fc1", 2}, {"mlp.fc2", 2}});
  CHECK(splits(gpt2[1].backward)["attn.proj.dgrad"] == 2);
  CHECK(splits(gpt2[1].backward)["mlp.fc2.dgrad"] == 2);
  CHECK(splits(gpt2[1].backward)["mlp.fc1.dgrad"] == 1);
  // The embedding and the head are not split (their collectives are not a
  // GEMM's neighbour in userbuffers).
  for (const auto& k : llama.back().forward) CHECK(k.splits == 1);
  // Split or not, a chunked GEMM's total FLOPs are the whole GEMM's.
  shape.tp_comm_overlap = false;
  const auto plain = models::load_model("llama-3-8b")->layers(shape);
  for (std::size_t i = 0; i < plain[1].forward.size(); ++i) {
    CHECK(plain[1].forward[i].splits == 1);
    CHECK(plain[1].forward[i].flops == llama[1].forward[i].flops);
    CHECK(plain[1].forward[i].m == llama[1].forward[i].m);
  }
  for (const auto& k : plain[1].backward) CHECK(k.splits == 1);
}

TEST_CASE("Transformer Engine's defaults and torch's AsyncTP split and keep SMs as their sources say (Note [Userbuffers' chunks])",
          "[models][tp][sp][tp_overlap]") {
  sim::WorkloadShape shape = sp_shape();
  shape.tp = 4;
  shape.tp_comm_overlap = true;
  using Cut = std::map<std::string, std::pair<std::int64_t, int>>;  // splits, SMs kept
  const auto cuts = [](const std::vector<sim::Kernel>& ks) {
    Cut out;
    for (const auto& k : ks) {
      if (k.kind == sim::KernelKind::kGemm) out[k.name] = {k.splits, k.sm_margin};
    }
    return out;
  };
  // TE's initialize_ub defaults: ring exchange (tp chunks) for qkv_fprop,
  // fc1_fprop, proj_dgrad, fc2_dgrad; pipeline (4 chunks beside 16 SMs)
  // for proj_fprop and fc2_fprop; bulk beside 16 SMs for qkv's and fc1's
  // dgrad and wgrad; the row-parallel wgrads whole.
  shape.tp_overlap_cfg = sim::TpOverlapCfg::kTe;
  const auto te = models::load_model("llama-3-8b")->layers(shape);
  CHECK(cuts(te[1].forward) == Cut{{"attn.qkv", {4, 0}}, {"attn.o_proj", {4, 16}}, {"mlp.gate_up", {4, 0}}, {"mlp.down", {4, 16}}});
  CHECK(cuts(te[1].backward) == Cut{{"attn.qkv.dgrad", {1, 16}},
                                    {"attn.qkv.wgrad", {1, 16}},
                                    {"attn.o_proj.dgrad", {4, 0}},
                                    {"attn.o_proj.wgrad", {1, 0}},
                                    {"mlp.gate_up.dgrad", {1, 16}},
                                    {"mlp.gate_up.wgrad", {1, 16}},
                                    {"mlp.down.dgrad", {4, 0}},
                                    {"mlp.down.wgrad", {1, 0}}});
  // torch's AsyncTP: every all-gather into a matmul and every matmul into a
  // reduce-scatter fused in tp chunks; no SMs kept.
  shape.tp_overlap_cfg = sim::TpOverlapCfg::kAsyncTp;
  const auto async = models::load_model("llama-3-8b")->layers(shape);
  CHECK(cuts(async[1].forward) == Cut{{"attn.qkv", {4, 0}}, {"attn.o_proj", {4, 0}}, {"mlp.gate_up", {4, 0}}, {"mlp.down", {4, 0}}});
  CHECK(cuts(async[1].backward) == Cut{{"attn.qkv.dgrad", {4, 0}},
                                       {"attn.qkv.wgrad", {1, 0}},
                                       {"attn.o_proj.dgrad", {4, 0}},
                                       {"attn.o_proj.wgrad", {1, 0}},
                                       {"mlp.gate_up.dgrad", {4, 0}},
                                       {"mlp.gate_up.wgrad", {1, 0}},
                                       {"mlp.down.dgrad", {4, 0}},
                                       {"mlp.down.wgrad", {1, 0}}});
}
