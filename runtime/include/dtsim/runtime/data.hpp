#pragma once
// Training data for validation runs: a small HDF5 file of token ids (GPT-2,
// BERT, seed 003's bag of words and encoder-decoder), precomputed embeddings
// (the Bi-LSTM of seed 000, which stored its GPT-2/BERT embeddings this way)
// or images (seed 003's VGG, CNN, MLP and autoencoder), with optional class
// labels. No Torch here.
//
// Note [Dataset layout]
//   /tokens      integer [N, S]        token ids (int32 or int64 on disk)
//   /targets     integer [N, S]        target ids of an encoder-decoder (optional; with /tokens only)
//   /embeddings  float   [N, S, D]     precomputed embeddings (float32 or float64 on disk)
//   /images      float   [N, C, H, W]  images, channels first as torchvision's tensors (float32 or float64)
//   /labels      integer [N]           class per sample (optional; needed by classifiers)
// Exactly one of /tokens, /embeddings and /images. What each model reads
// (data_needs, from its first and last layers):
//   - language models (GPT-2, BERT, Llama) and the bag of words: /tokens,
//     ids below the vocabulary; a language model predicts each next token,
//     a classifier (BERT, NBoW) reads /labels below its class count;
//   - the Bi-LSTM: /embeddings of its input width, with /labels;
//   - image models: /images; a convolution first (VGG, CNN, autoencoder)
//     takes exactly its [C, H, W], the MLP any C x H x W of its input
//     features (it flattens the image); classifiers read /labels, the
//     autoencoder none (its target is the image);
//   - the encoder-decoder (Note [Encoder-decoder] in models/src/text.cpp):
//     /tokens as its sources (ids below the source vocabulary) and /targets
//     as its targets (ids below the target vocabulary), one target sentence
//     a source sentence padded to the same S; teacher forcing reads the
//     target's first S - 1 tokens and predicts its last S - 1.
// A model reads the first plan.seq_len positions of each sequence (S may be
// longer); images have no sequence (plan.seq_len is 1). Extra datasets a
// model does not read (/labels for a language model, /targets for a
// classifier) are ignored. Without --data the worker synthesises the same
// draws in memory (make_sample_dataset), images as /embeddings [N, 1, C x H x W]
// of the same numbers in the same order.

#include <cstdint>
#include <string>
#include <vector>

namespace dtsim::runtime {

/// A dataset held in memory.
struct Dataset {
  enum class Kind { kTokens, kEmbeddings, kImages };
  std::string path;
  Kind kind = Kind::kTokens;
  std::int64_t samples = 0;               ///< N
  std::int64_t seq_len = 0;               ///< S; 1 for images
  std::int64_t width = 0;                 ///< D for embeddings, C*H*W for images, 1 for tokens
  std::int64_t channels = 0, height = 0, image_width = 0;  ///< C, H, W (kImages), else 0
  std::vector<std::int64_t> tokens;       ///< N*S, row-major (kTokens)
  std::vector<std::int64_t> targets;      ///< N*S, row-major (kTokens with /targets), or empty
  std::vector<float> embeddings;          ///< N*S*D, row-major (kEmbeddings); N*C*H*W pixels (kImages)
  std::vector<std::int64_t> labels;       ///< N, or empty
  std::int64_t max_token = -1;            ///< largest token id (kTokens)
  std::int64_t max_target = -1;           ///< largest target id (when targets exist)
  std::int64_t max_label = -1;            ///< largest label (when labels exist)
};

/// Reads a dataset. Throws IoError (cannot open/read, naming the path) or
/// ConfigError (wrong layout: names the file, the dataset and what is valid).
Dataset load_dataset(const std::string& path);

/// What a model reads (Note [Dataset layout]).
struct DataNeeds {
  std::string model;                      ///< its name, for messages
  Dataset::Kind kind = Dataset::Kind::kTokens;
  std::int64_t vocab = 0;                 ///< kTokens: ids in [0, vocab)
  std::int64_t target_vocab = 0;          ///< > 0: /targets ids in [0, target_vocab) (an encoder-decoder)
  std::int64_t width = 0;                 ///< kEmbeddings: D; kImages: C*H*W
  std::int64_t channels = 0, height = 0;  ///< kImages: C and H = W of a convolution's input; 0: any C x H x W = width
  std::int64_t classes = 0;               ///< > 0: /labels in [0, classes)
};

/// What model `model` reads, from its first and last layers' signatures
/// ("kind:key=value,...", as models/ writes them).
DataNeeds data_needs(const std::string& model, const std::string& first_signature, const std::string& last_signature);

/// Throws ConfigError, one line naming the file, the dataset and what the
/// model would take, unless `d` feeds a model with `needs` at `seq_len`
/// positions a sample.
void check_dataset_fits(const Dataset& d, const DataNeeds& needs, std::int64_t seq_len);

/// What write_sample_dataset writes.
struct SampleSpec {
  Dataset::Kind kind = Dataset::Kind::kTokens;
  std::int64_t samples = 256;
  std::int64_t seq_len = 128;    ///< S (kTokens, kEmbeddings)
  std::int64_t vocab = 1024;     ///< token ids in [0, vocab) (kTokens)
  std::int64_t target_vocab = 0; ///< kTokens: /targets ids in [0, target_vocab); 0: no /targets
  std::int64_t width = 64;       ///< D (kEmbeddings); W (kImages)
  std::int64_t channels = 3;     ///< C (kImages)
  std::int64_t height = 32;      ///< H (kImages)
  std::int64_t classes = 0;      ///< labels in [0, classes); 0: no labels
  std::uint64_t seed = 1;
};

/// A deterministic synthetic dataset in memory: exactly what
/// write_sample_dataset writes for the same spec (the worker's data without
/// --data). Draws, from one generator: the tokens, embeddings or pixels
/// (N(0, 1)), then the targets, then the labels; so images of C x H x W are
/// the numbers of embeddings [N, 1, C*H*W] of the same seed. Throws
/// ConfigError naming a bad field of the spec.
Dataset make_sample_dataset(const SampleSpec& spec);

/// Writes a deterministic synthetic dataset to `path` atomically (a
/// temporary file, then rename). Throws IoError naming the path.
void write_sample_dataset(const std::string& path, const SampleSpec& spec);

}  // namespace dtsim::runtime
