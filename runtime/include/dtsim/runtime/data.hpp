#pragma once
// Training data for validation runs: a small HDF5 file of token ids (GPT-2,
// BERT) or precomputed embeddings (the Bi-LSTM of seed 000, which stored its
// GPT-2/BERT embeddings this way), with optional class labels. No Torch here.
//
// Layout (Note [Dataset layout]):
//   /tokens      integer [N, S]     token ids (int32 or int64 on disk)
//   /embeddings  float   [N, S, D]  precomputed embeddings (float32 or float64 on disk)
//   /labels      integer [N]        class per sample (optional; needed by classifiers)
// Exactly one of /tokens and /embeddings. Image models (seed 003's VGG, CNN,
// MLP and autoencoder) read /embeddings [N, 1, C x H x W]: one flattened
// image a sample, viewed as [C, H, W] by the first layer; an autoencoder
// needs no /labels (its target is the image). The encoder-decoder reads
// /tokens as its sources and trains to emit each sentence shifted by one
// token (the language-model labels), ids wrapped into its target vocabulary.

#include <cstdint>
#include <string>
#include <vector>

namespace dtsim::runtime {

/// A dataset held in memory.
struct Dataset {
  enum class Kind { kTokens, kEmbeddings };
  std::string path;
  Kind kind = Kind::kTokens;
  std::int64_t samples = 0;               ///< N
  std::int64_t seq_len = 0;               ///< S
  std::int64_t width = 0;                 ///< D for embeddings, 1 for tokens
  std::vector<std::int64_t> tokens;       ///< N*S, row-major (kTokens)
  std::vector<float> embeddings;          ///< N*S*D, row-major (kEmbeddings)
  std::vector<std::int64_t> labels;       ///< N, or empty
  std::int64_t max_token = -1;            ///< largest token id (kTokens)
  std::int64_t max_label = -1;            ///< largest label (when labels exist)
};

/// Reads a dataset. Throws IoError (cannot open/read, naming the path) or
/// ConfigError (wrong layout: names the file, the dataset and what is valid).
Dataset load_dataset(const std::string& path);

/// What write_sample_dataset writes.
struct SampleSpec {
  Dataset::Kind kind = Dataset::Kind::kTokens;
  std::int64_t samples = 256;
  std::int64_t seq_len = 128;
  std::int64_t vocab = 1024;     ///< token ids in [0, vocab) (kTokens)
  std::int64_t width = 64;       ///< D (kEmbeddings)
  std::int64_t classes = 0;      ///< labels in [0, classes); 0: no labels
  std::uint64_t seed = 1;
};

/// A deterministic synthetic dataset in memory: exactly what
/// write_sample_dataset writes for the same spec (the worker's data without
/// --data). Throws ConfigError naming a bad field of the spec.
Dataset make_sample_dataset(const SampleSpec& spec);

/// Writes a deterministic synthetic dataset to `path` atomically (a
/// temporary file, then rename). Throws IoError naming the path.
void write_sample_dataset(const std::string& path, const SampleSpec& spec);

}  // namespace dtsim::runtime
