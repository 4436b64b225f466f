#pragma once
// The seeds' experiments (../shared/seeds/) as dtsim predictions beside the
// figures their reports give. Shared by the `dtsim_seeds` program and the
// tests that check the predictions against hand-derived physics.
//
// What the reports state is quoted in each row's `report` text with its
// place in the report; where a report leaves a setting out (batch size,
// sequence length, hidden sizes) the choice made here is in `assumption`.

#include <cmath>
#include <cstdint>
#include <cstdio>
#include <string>
#include <vector>

#include "dtsim/models/models.hpp"
#include "dtsim/sim/config_io.hpp"
#include "dtsim/sim/predict.hpp"

namespace dtsim::examples {

/// One experiment: our prediction beside the report's figure.
struct Row {
  std::string experiment;
  std::string report;        ///< the report's figure, verbatim, with where it is
  double report_value = 0;   ///< that figure per iteration (s) or in GB; 0: none given
  sim::Prediction predicted;
  /// Iterations in an epoch where the report gives epoch times (0: it does not).
  double iterations = 0;
};

struct Seed {
  std::string title;
  std::string assumption;
  std::vector<Row> rows;
};

inline sim::Prediction run(const sim::Model& model, const std::string& cluster, const std::string& plan_yaml) {
  return sim::predict(model, sim::parse_plan(plan_yaml, "<example>"), sim::load_cluster(cluster));
}

// Seed 000: a Bi-LSTM classifier over GPT-2 embeddings on 2 x A100-80GB.
// 253,255 training samples; batch 64 (stated for the DeepSpeed run, line
// 315) gives 3,958 iterations per epoch, so s/iteration = minutes x 60 / 3958.
inline Seed seed_000() {
  Seed s;
  s.title = "seed 000: Bi-LSTM over GPT-2 embeddings, 2 x A100-SXM4-80GB";
  s.assumption =
      "global batch 64 for every run (stated only for ZeRO-2); 2-layer Bi-LSTM, hidden 256 per direction, "
      "768-wide inputs, 8 embeddings per sample (the report's 5.6 GB of training embeddings / 253,255 samples = "
      "22 KB = 7.2 x 768 fp32), fp32; torchgpipe's balance over its 4 modules mapped onto our 3 layers";
  models::BiLstmConfig c;
  c.seq_len = 8;
  const auto m = models::make_bilstm(c);
  const double iters = 3958;
  const std::string base = "precision: fp32\noptimizer: adam\nglobal_batch: 64\n";
  s.rows.push_back({"single GPU", "~80 min/epoch (line 598)", 80 * 60 / iters, run(*m, "2xa100-80g", base + "dp: 1\n")});
  s.rows.push_back({"DDP, 2 GPUs", "23 min/epoch (line 600)", 23 * 60 / iters, run(*m, "2xa100-80g", base + "micro_batch: 32\n")});
  s.rows.push_back({"ZeRO-2 + CPU optimizer offload", "~33 min/epoch (line 601)", 33 * 60 / iters,
                    run(*m, "2xa100-80g", base + "micro_batch: 32\nzero_stage: 2\noffload_optimizer: cpu\n")});
  struct G {
    const char* name;
    const char* balance;
    int chunks;
    double minutes;
    const char* where;
  };
  for (const G& g : {G{"GPipe balance [2,2], chunks 8", "[1, 1]", 8, 40, "Table 8"},
                     G{"GPipe balance [2,2], chunks 16", "[1, 1]", 16, 35, "Table 8"},
                     G{"GPipe balance [2,2], chunks 32", "[1, 1]", 32, 25, "Table 8"},
                     G{"GPipe balance [3,1], chunks 16", "[2, 1]", 16, 30, "Table 8"},
                     G{"GPipe balance [1,3], chunks 16", "[1, 2]", 16, 30, "Table 8"}}) {
    const std::string plan = base + "pp: 2\nschedule: gpipe\nmicro_batches: " + std::to_string(g.chunks) +
                             "\nstage_layers: " + g.balance + "\n";
    s.rows.push_back({g.name, std::to_string(static_cast<int>(g.minutes)) + " min/epoch (" + g.where + ")",
                      g.minutes * 60 / iters, run(*m, "2xa100-80g", plan)});
  }
  return s;
}

// Seed 001: GPT-2 single GPU vs DDP vs FSDP. The report gives no figures,
// only "FSDP excels in memory efficiency ... DDP provides a stable middle
// ground" (abstract); hardware unstated, so 2 x A100-80GB here.
inline Seed seed_001() {
  Seed s;
  s.title = "seed 001: GPT-2 (124M), single GPU vs DDP vs FSDP";
  s.assumption = "hardware and batch unstated: 2 x A100-80GB, 8 sequences of 1024 tokens per GPU, fp16 mixed precision";
  const auto m = models::load_model("gpt2");
  const std::string base = "precision: fp16\noptimizer: adamw\nmicro_batch: 8\n";
  s.rows.push_back({"single GPU", "no figure (qualitative only)", 0, run(*m, "2xa100-80g", base + "dp: 1\n")});
  s.rows.push_back({"DDP, 2 GPUs", "no figure: 'a stable middle ground'", 0, run(*m, "2xa100-80g", base)});
  s.rows.push_back({"FSDP full_shard, 2 GPUs", "no figure: 'excels in memory efficiency'", 0,
                    run(*m, "2xa100-80g", base + "fsdp: full_shard\n")});
  return s;
}

// Seed 002: GPT-2 27.32M and BERT 46.7M on one and two RTX 2080 Ti. Epoch
// times 55.7 s -> 31.2 s and 318 s -> 246 s (section 3.2); batch and
// sequence unstated, so the comparison is the 2-GPU speedup of an epoch:
// twice the work per iteration, so speedup = 2 t(1 GPU) / t(2 GPUs).
inline Seed seed_002() {
  Seed s;
  s.title = "seed 002: GPT-2 27.32M and BERT 46.7M on 1 and 2 x RTX 2080 Ti";
  s.assumption =
      "shapes unstated: GPT-2 with 9 layers, hidden 320, 5 heads, 512 positions (27.34M parameters); BERT with 4 layers, "
      "hidden 704, 11 heads (46.2M, the nearest BERT shape); 8 sequences of 256 tokens (GPT-2) and 128 (BERT) per GPU, fp32 DDP";
  models::GptConfig g;
  g.name = "gpt2-27m";
  g.layers = 9;
  g.hidden = 320;
  g.heads = 5;
  g.seq_len = 512;
  g.ffn_hidden = 4 * g.hidden;
  models::BertConfig b;
  b.name = "bert-47m";
  b.layers = 4;
  b.hidden = 704;
  b.heads = 11;
  b.intermediate = 4 * 704;
  const auto gpt = models::make_gpt(g);
  const auto bert = models::make_bert(b);
  const std::string plan = "precision: fp32\noptimizer: adamw\nmicro_batch: 8\n";
  s.rows.push_back({"GPT-2 27M, 1 GPU", "55.7 s/epoch", 0, run(*gpt, "1x2080ti", plan + "seq_len: 256\n")});
  s.rows.push_back({"GPT-2 27M, 2 GPUs (DDP)", "31.2 s/epoch: speedup 1.79", 1.785, run(*gpt, "2x2080ti", plan + "seq_len: 256\n")});
  s.rows.push_back({"BERT 47M, 1 GPU", "318 s/epoch", 0, run(*bert, "1x2080ti", plan + "seq_len: 128\n")});
  s.rows.push_back({"BERT 47M, 2 GPUs (DDP)", "246 s/epoch: speedup 1.29", 1.293, run(*bert, "2x2080ti", plan + "seq_len: 128\n")});
  return s;
}

// Seed 003: six small models on one Tesla K80 (Colab) and two Tesla P100s
// (Kaggle), data parallel on the two and, for the MLP, MP+DDP (section 3.2).
// The report gives epoch times but no dataset, batch size or shapes: the
// textbook setups (models/src/zoo.cpp) and their datasets, one row each.
struct Seed003Setup {
  const char* model;
  const char* data;
  double samples;     ///< training samples in an epoch
  int batch;          ///< per GPU (DistributedSampler: each of two GPUs takes half the epoch)
  const char* optimizer;
  const char* extra;  ///< plan keys beyond these
  std::vector<sim::Override> model_set;  ///< --set model.* the dataset needs
  double k80_s, p100_s;  ///< the report's epoch times (s), one K80 and two P100s with DDP
  const char* where;
};

inline std::vector<Seed003Setup> seed_003_setups() {
  return {{"vgg11", "CIFAR-10 at 32 x 32, 50,000 images, torchvision vgg11(num_classes=10)", 50000, 64, "sgd", "", {{"model", "image_size", "32"}, {"model", "classes", "10"}},
           220, 115, "section 3.2.1"},
          {"nbow", "IMDb, 18,750 reviews (75% of the 25,000 training ones), 256 tokens each", 18750, 512, "adam", "seq_len: 256\n", {}, 1.8,
           1.0, "section 3.2.2"},
          {"seq2seq", "Multi30k German-English, 29,000 pairs, 32 tokens each", 29000, 128, "adam", "seq_len: 32\n", {}, 50, 27,
           "section 3.2.3"},
          {"conv-autoencoder", "MNIST, 60,000 images", 60000, 64, "adam", "", {}, 12, 6, "section 3.2.4"},
          {"cnn", "CIFAR-10, 50,000 images, the tutorial's batch of 4", 50000, 4, "sgd", "", {}, 22, 11, "section 3.2.5"},
          // PyTorch's quickstart steps SGD without momentum (torch.optim.SGD's
          // default, Note [SGD momentum]); the CIFAR tutorial's CNN at 0.9.
          {"mlp", "MNIST, 60,000 images", 60000, 64, "sgd", "sgd_momentum: 0\n", {}, 24, 11, "section 3.2.6"}};
}

inline Seed seed_003() {
  Seed s;
  s.title = "seed 003: VGG11, NBoW, Seq2Seq, ConvAutoencoder, CNN, MLP on 1 x K80 and 2 x P100";
  s.assumption = "datasets, batches and shapes unstated: ";
  for (const auto& x : seed_003_setups()) {
    s.assumption += std::string(x.model) + ": " + x.data + ", batch " + std::to_string(x.batch) + " per GPU, " + x.optimizer +
                    (std::string(x.extra).find("sgd_momentum: 0\n") != std::string::npos ? " without momentum" : "") + "; ";
  }
  s.assumption += "fp32 (the K80 has no fast fp16), DDP's 25 MB buckets";
  for (const auto& x : seed_003_setups()) {
    const auto m = models::load_model(x.model, x.model_set);
    const std::string plan = std::string("precision: fp32\noptimizer: ") + x.optimizer + "\nmicro_batch: " + std::to_string(x.batch) + "\n" + x.extra;
    const double one = std::ceil(x.samples / x.batch), two = std::ceil(x.samples / (2.0 * x.batch));
    auto fmt = [](double v) {
      char b[32];
      std::snprintf(b, sizeof b, "%g", v);
      return std::string(b);
    };
    s.rows.push_back({std::string(x.model) + ", 1 x K80", "~" + fmt(x.k80_s) + " s/epoch (" + x.where + ")", x.k80_s / one,
                      run(*m, "1xk80", plan + "dp: 1\n"), one});
    s.rows.push_back({std::string(x.model) + ", 2 x P100, DDP", "~" + fmt(x.p100_s) + " s/epoch (" + x.where + ")", x.p100_s / two,
                      run(*m, "2xp100", plan + "dp: 2\n"), two});
    if (std::string(x.model) == "mlp") {
      // MP+DDP on two GPUs: each replica split over both (dp 1), no figure given.
      s.rows.push_back({"mlp, 2 x P100, MP+DDP", "between DDP's 11 and 24 s/epoch (section 3.2.6)", 0,
                        run(*m, "2xp100", plan + "model_parallel: 2\ndp: 1\n"), one});
    }
  }
  return s;
}

// Seed 004: a ~3B GPT-2 on 8 x V100-16GB with ZeRO and CPU offload. The
// report states no shape and no fit list; which plans fit is derived from the
// ZeRO paper's accounting (16 B/param for mixed-precision Adam).
inline Seed seed_004() {
  Seed s;
  s.title = "seed 004: a ~3B GPT-2 on 8 x V100-16GB";
  s.assumption =
      "shape unstated: 36 layers, hidden 2560, 32 heads, 1024 tokens (2.96B parameters); 1 sequence per GPU, fp16, "
      "Adam, full activation recompute (DeepSpeed's activation checkpointing)";
  models::GptConfig g;
  g.name = "gpt2-3b";
  g.layers = 36;
  g.hidden = 2560;
  g.heads = 32;
  g.ffn_hidden = 4 * g.hidden;
  const auto m = models::make_gpt(g);
  const std::string base = "precision: fp16\noptimizer: adam\nmicro_batch: 1\nrecompute: full\n";
  for (const auto& [name, plan] : std::vector<std::pair<std::string, std::string>>{
           {"DDP", ""},
           {"ZeRO-1", "zero_stage: 1\n"},
           {"ZeRO-2", "zero_stage: 2\n"},
           {"ZeRO-3", "zero_stage: 3\n"},
           {"ZeRO-1 + optimizer offload", "zero_stage: 1\noffload_optimizer: cpu\n"},
           {"ZeRO-2 + optimizer offload", "zero_stage: 2\noffload_optimizer: cpu\n"},
           {"ZeRO-3 + optimizer and parameter offload", "zero_stage: 3\noffload_optimizer: cpu\noffload_params: cpu\n"}}) {
    s.rows.push_back({name, "not reported (ZeRO and CPU offload were used, line 25)", 0, run(*m, "8xv100-16g", base + plan)});
  }
  return s;
}

}  // namespace dtsim::examples
