// dtsim_make_sample_data: writes a small synthetic dataset (Note [Dataset
// layout] in dtsim/runtime/data.hpp) for `dtsim validate --data`.
//   dtsim_make_sample_data --out FILE.h5 [--kind tokens|embeddings|images] [--samples N]
//       [--seq S] [--vocab V] [--target-vocab T] [--width D|W] [--channels C] [--height H]
//       [--classes K] [--seed SEED]
// Defaults are SampleSpec's (images: 3 x 32 x 32). Bad arguments and dtsim
// errors: one line on stderr, exit status 2. scripts/make-sample-data wraps it.
#include <algorithm>
#include <charconv>
#include <cstdint>
#include <exception>
#include <iostream>
#include <map>
#include <optional>
#include <string>
#include <tuple>
#include <vector>

#include <CLI/CLI.hpp>

#include "dtsim/cli/parse.hpp"
#include "dtsim/runtime/data.hpp"
#include "dtsim/sim/error.hpp"

namespace {

using dtsim::ConfigError;
using dtsim::runtime::Dataset;
using dtsim::runtime::SampleSpec;

constexpr const char* kProgram = "dtsim_make_sample_data";
constexpr const char* kUsage =
    "usage: dtsim_make_sample_data --out FILE.h5 [--kind tokens|embeddings|images] [--samples N] [--seq S]\n"
    "                              [--vocab V] [--target-vocab T] [--width D|W] [--channels C] [--height H]\n"
    "                              [--classes K] [--seed SEED]\n"
    "Writes a synthetic dataset (Note [Dataset layout] in runtime/include/dtsim/runtime/data.hpp):\n"
    "  tokens:     /tokens [N, S] int64 in [0, V), and /targets [N, S] in [0, T) when T > 0 (an encoder-decoder's)\n"
    "  embeddings: /embeddings [N, S, D] float32 ~ N(0, 1)\n"
    "  images:     /images [N, C, H, W] float32 ~ N(0, 1)\n"
    "and /labels [N] int64 in [0, K) when K > 0. Defaults: tokens, N=256, S=128, V=1024, T=0, D=64,\n"
    "C x H x W = 3 x 32 x 32, K=0, SEED=1.\n";

/// `text` as an integer >= `min`; ConfigError naming `option` otherwise.
template <class T>
T parse_int(const std::string& option, const std::string& text, T min, const char* valid) {
  T v{};
  const char* end = text.data() + text.size();
  const auto [ptr, ec] = std::from_chars(text.data(), end, v);
  if (text.empty() || ec != std::errc() || ptr != end || v < min) {
    throw ConfigError(option + ": '" + text + "' is not valid; expected " + valid);
  }
  return v;
}

struct Options {
  std::string out;
  SampleSpec spec;
  int exit_status = -1;  ///< >= 0: exit with it (after --help, or a malformed command line, printed)
};

Options parse(int argc, char** argv) {
  Options o;
  CLI::App app{"dtsim_make_sample_data: writes a small synthetic dataset for `dtsim validate --data`", kProgram};
  dtsim::cli::house_style(app);
  app.footer(kUsage);
  // Each option's text, checked below (the usage above says what each means).
  std::map<std::string, std::string> given;
  for (const char* name : {"--out", "--kind", "--samples", "--seq", "--vocab", "--target-vocab", "--width", "--channels", "--height",
                           "--classes", "--seed"}) {
    app.add_option(name, given[name]);
  }
  if (const int status = dtsim::cli::parse_main(app, argc, argv); status >= 0) {
    o.exit_status = status;
    return o;
  }
  for (const auto& [opt, v] : given) {
    if (app.count(opt) == 0) continue;
    if (opt == "--out") {
      if (v.empty()) throw ConfigError("--out: expected a file name, e.g. data/sample.h5");
      o.out = v;
    } else if (opt == "--kind") {
      if (v == "tokens") {
        o.spec.kind = Dataset::Kind::kTokens;
      } else if (v == "embeddings") {
        o.spec.kind = Dataset::Kind::kEmbeddings;
      } else if (v == "images") {
        o.spec.kind = Dataset::Kind::kImages;
      } else {
        throw ConfigError("--kind: '" + v + "' is not one of tokens, embeddings, images");
      }
    } else if (opt == "--samples") {
      o.spec.samples = parse_int<std::int64_t>(opt, v, 1, "a positive integer");
    } else if (opt == "--seq") {
      o.spec.seq_len = parse_int<std::int64_t>(opt, v, 1, "a positive integer");
    } else if (opt == "--vocab") {
      o.spec.vocab = parse_int<std::int64_t>(opt, v, 1, "a positive integer");
    } else if (opt == "--target-vocab") {
      o.spec.target_vocab = parse_int<std::int64_t>(opt, v, 0, "an integer >= 0 (0: no /targets)");
    } else if (opt == "--width") {
      o.spec.width = parse_int<std::int64_t>(opt, v, 1, "a positive integer");
    } else if (opt == "--channels") {
      o.spec.channels = parse_int<std::int64_t>(opt, v, 1, "a positive integer");
    } else if (opt == "--height") {
      o.spec.height = parse_int<std::int64_t>(opt, v, 1, "a positive integer");
    } else if (opt == "--classes") {
      o.spec.classes = parse_int<std::int64_t>(opt, v, 0, "an integer >= 0 (0: no labels)");
    } else {  // --seed
      o.spec.seed = parse_int<std::uint64_t>(opt, v, 0, "an integer >= 0");
    }
  }
  if (o.out.empty()) throw ConfigError("--out FILE.h5 is required (see --help)");
  // An option of another kind is refused, not ignored.
  using K = Dataset::Kind;
  const std::vector<std::tuple<const char*, std::vector<K>, const char*>> kinds_of{
      {"--seq", {K::kTokens, K::kEmbeddings}, "tokens and embeddings"},
      {"--vocab", {K::kTokens}, "tokens"},
      {"--target-vocab", {K::kTokens}, "tokens"},
      {"--width", {K::kEmbeddings, K::kImages}, "embeddings (D) and images (W)"},
      {"--channels", {K::kImages}, "images"},
      {"--height", {K::kImages}, "images"},
  };
  for (const auto& [opt, kinds, text] : kinds_of) {
    if (app.count(opt) > 0 && std::find(kinds.begin(), kinds.end(), o.spec.kind) == kinds.end()) {
      throw ConfigError(std::string(opt) + " applies to --kind " + text + " only");
    }
  }
  if (o.spec.kind == Dataset::Kind::kImages && app.count("--width") == 0) o.spec.width = 32;  // 3 x 32 x 32: CIFAR-10's
  return o;
}

/// "wrote FILE: N samples of S tokens (vocab V), C classes" and the like.
std::string summary(const Options& o) {
  const SampleSpec& s = o.spec;
  std::string line = "wrote " + o.out + ": " + std::to_string(s.samples);
  if (s.kind == Dataset::Kind::kTokens) {
    line += " samples of " + std::to_string(s.seq_len) + " tokens (vocab " + std::to_string(s.vocab) + ")";
    if (s.target_vocab > 0) line += " with targets (vocab " + std::to_string(s.target_vocab) + ")";
  } else if (s.kind == Dataset::Kind::kImages) {
    line += " images of " + std::to_string(s.channels) + " x " + std::to_string(s.height) + " x " + std::to_string(s.width);
  } else {
    line += " samples of " + std::to_string(s.seq_len) + " x " + std::to_string(s.width) + " embeddings";
  }
  if (s.classes > 0) line += ", " + std::to_string(s.classes) + " classes";
  return line;
}

}  // namespace

int main(int argc, char** argv) {
  try {
    const Options o = parse(argc, argv);
    if (o.exit_status >= 0) return o.exit_status;
    dtsim::runtime::write_sample_dataset(o.out, o.spec);
    std::cout << summary(o) << "\n";
    return 0;
  } catch (const dtsim::InternalError& e) {
    std::cerr << kProgram << ": " << e.what() << " (this is a bug in dtsim; please report it)\n";
    return 70;
  } catch (const dtsim::Error& e) {
    std::cerr << kProgram << ": " << e.what() << "\n";
    return 2;
  } catch (const std::exception& e) {
    std::cerr << kProgram << ": unexpected error: " << e.what() << "\n";
    return 70;
  }
}
