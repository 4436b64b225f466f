// Datasets for validation runs (Note [Dataset layout] in dtsim/runtime/data.hpp):
// write_sample_dataset -> load_dataset round trips, files written here through
// the HDF5 C API in the other on-disk types (int32 tokens, float64 embeddings),
// every layout error, the atomic write, and the dtsim_make_sample_data program.
#include <catch2/catch.hpp>

#include <hdf5.h>

#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <cmath>
#include <cstdint>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <numeric>
#include <sstream>
#include <string>
#include <vector>

#include "dtsim/runtime/data.hpp"
#include "dtsim/sim/error.hpp"
#include "test_util.hpp"

namespace fs = std::filesystem;
using dtsim::ConfigError;
using dtsim::IoError;
using dtsim::runtime::Dataset;
using dtsim::runtime::load_dataset;
using dtsim::runtime::SampleSpec;
using dtsim::runtime::write_sample_dataset;
using dtsim::test::error_of;
using Catch::Matchers::Contains;

namespace {

using TempDir = dtsim::test::TempDir;

using dtsim::test::slurp;

/// An HDF5 file written by the test itself, as another tool (h5py) would.
class H5Writer {
 public:
  explicit H5Writer(const std::string& path) : file_(H5Fcreate(path.c_str(), H5F_ACC_TRUNC, H5P_DEFAULT, H5P_DEFAULT)) {
    REQUIRE(file_ >= 0);
  }
  ~H5Writer() { H5Fclose(file_); }
  H5Writer(const H5Writer&) = delete;
  H5Writer& operator=(const H5Writer&) = delete;

  void int32(const char* name, const std::vector<hsize_t>& dims, const std::vector<std::int32_t>& v) {
    write(name, H5T_STD_I32LE, H5T_NATIVE_INT32, dims, v.data(), v.size());
  }
  void int64(const char* name, const std::vector<hsize_t>& dims, const std::vector<std::int64_t>& v) {
    write(name, H5T_STD_I64LE, H5T_NATIVE_INT64, dims, v.data(), v.size());
  }
  void float64(const char* name, const std::vector<hsize_t>& dims, const std::vector<double>& v) {
    write(name, H5T_IEEE_F64LE, H5T_NATIVE_DOUBLE, dims, v.data(), v.size());
  }
  void group(const char* name) {
    const hid_t g = H5Gcreate2(file_, name, H5P_DEFAULT, H5P_DEFAULT, H5P_DEFAULT);
    REQUIRE(g >= 0);
    H5Gclose(g);
  }

 private:
  void write(const char* name, hid_t file_type, hid_t mem_type, const std::vector<hsize_t>& dims, const void* data,
             std::size_t n) {
    const hsize_t count = std::accumulate(dims.begin(), dims.end(), hsize_t{1}, std::multiplies<>());
    REQUIRE(count == n);
    const hid_t space = H5Screate_simple(static_cast<int>(dims.size()), dims.data(), nullptr);
    const hid_t ds = H5Dcreate2(file_, name, file_type, space, H5P_DEFAULT, H5P_DEFAULT, H5P_DEFAULT);
    REQUIRE(ds >= 0);
    if (n > 0) REQUIRE(H5Dwrite(ds, mem_type, H5S_ALL, H5S_ALL, H5P_DEFAULT, data) >= 0);
    H5Dclose(ds);
    H5Sclose(space);
  }
  hid_t file_;
};

/// What the file holds at `name`: element class, element size in bytes, and layout.
struct OnDisk {
  H5T_class_t cls;
  std::size_t size;
  H5D_layout_t layout;
};
OnDisk on_disk(const std::string& path, const char* name) {
  const hid_t file = H5Fopen(path.c_str(), H5F_ACC_RDONLY, H5P_DEFAULT);
  REQUIRE(file >= 0);
  const hid_t ds = H5Dopen2(file, name, H5P_DEFAULT);
  REQUIRE(ds >= 0);
  const hid_t type = H5Dget_type(ds), plist = H5Dget_create_plist(ds);
  const OnDisk out{H5Tget_class(type), H5Tget_size(type), H5Pget_layout(plist)};
  H5Pclose(plist);
  H5Tclose(type);
  H5Dclose(ds);
  H5Fclose(file);
  return out;
}

SampleSpec tokens_spec(std::uint64_t seed) {
  SampleSpec s;
  s.kind = Dataset::Kind::kTokens;
  s.samples = 8;
  s.seq_len = 16;
  s.vocab = 50;
  s.classes = 3;
  s.seed = seed;
  return s;
}

/// The exit status of `sh -c command`, with stdout and stderr into files in `dir`.
struct Run {
  int status;
  std::string out, err;
};
Run run(const TempDir& dir, const std::string& args) {
  const std::string out = dir.file("stdout.txt"), err = dir.file("stderr.txt");
  const std::string cmd = std::string("'") + DTSIM_MAKE_SAMPLE_DATA + "' " + args + " >'" + out + "' 2>'" + err + "'";
  const int raw = std::system(cmd.c_str());
  REQUIRE(WIFEXITED(raw));
  Run r{WEXITSTATUS(raw), slurp(out), slurp(err)};
  fs::remove(out);
  fs::remove(err);
  return r;
}

}  // namespace

TEST_CASE("a sample tokens file reads back with its sizes, ranges and labels", "[runtime][data]") {
  TempDir dir("tokens");
  const std::string path = dir.file("tokens.h5");
  write_sample_dataset(path, tokens_spec(7));
  const Dataset d = load_dataset(path);

  CHECK(d.path == path);
  CHECK(d.kind == Dataset::Kind::kTokens);
  CHECK(d.samples == 8);
  CHECK(d.seq_len == 16);
  CHECK(d.width == 1);
  REQUIRE(d.tokens.size() == 8u * 16u);  // N*S
  CHECK(d.embeddings.empty());
  for (auto t : d.tokens) {
    REQUIRE(t >= 0);
    REQUIRE(t < 50);
  }
  CHECK(d.max_token == *std::max_element(d.tokens.begin(), d.tokens.end()));
  CHECK(d.max_token < 50);
  REQUIRE(d.labels.size() == 8u);  // N
  for (auto l : d.labels) {
    REQUIRE(l >= 0);
    REQUIRE(l < 3);
  }
  CHECK(d.max_label == *std::max_element(d.labels.begin(), d.labels.end()));

  // Plain contiguous int64 datasets, as the spec says.
  const OnDisk tokens = on_disk(path, "/tokens"), labels = on_disk(path, "/labels");
  CHECK(tokens.cls == H5T_INTEGER);
  CHECK(tokens.size == 8u);
  CHECK(tokens.layout == H5D_CONTIGUOUS);
  CHECK(labels.cls == H5T_INTEGER);
  CHECK(labels.size == 8u);
  CHECK(labels.layout == H5D_CONTIGUOUS);
}

TEST_CASE("sample data is a function of the seed", "[runtime][data]") {
  TempDir dir("seed");
  write_sample_dataset(dir.file("a.h5"), tokens_spec(7));
  write_sample_dataset(dir.file("b.h5"), tokens_spec(7));
  write_sample_dataset(dir.file("c.h5"), tokens_spec(8));
  const Dataset a = load_dataset(dir.file("a.h5")), b = load_dataset(dir.file("b.h5")), c = load_dataset(dir.file("c.h5"));
  CHECK(a.tokens == b.tokens);
  CHECK(a.labels == b.labels);
  // 128 draws from 50 ids: two seeds agreeing everywhere has probability 50^-128.
  CHECK(a.tokens != c.tokens);

  SampleSpec e;
  e.kind = Dataset::Kind::kEmbeddings;
  e.samples = 2;
  e.seq_len = 3;
  e.width = 4;
  e.seed = 7;
  write_sample_dataset(dir.file("e1.h5"), e);
  write_sample_dataset(dir.file("e2.h5"), e);
  e.seed = 8;
  write_sample_dataset(dir.file("e3.h5"), e);
  CHECK(load_dataset(dir.file("e1.h5")).embeddings == load_dataset(dir.file("e2.h5")).embeddings);
  CHECK(load_dataset(dir.file("e1.h5")).embeddings != load_dataset(dir.file("e3.h5")).embeddings);
}

TEST_CASE("classes = 0 writes no /labels", "[runtime][data]") {
  TempDir dir("nolabels");
  SampleSpec s = tokens_spec(1);
  s.classes = 0;
  s.vocab = 1;  // the smallest vocabulary: every id is 0
  write_sample_dataset(dir.file("t.h5"), s);
  const Dataset d = load_dataset(dir.file("t.h5"));
  CHECK(d.labels.empty());
  CHECK(d.max_label == -1);
  CHECK(d.tokens == std::vector<std::int64_t>(8 * 16, 0));
  CHECK(d.max_token == 0);
}

TEST_CASE("a sample embeddings file reads back with N*S*D standard-normal floats", "[runtime][data]") {
  TempDir dir("emb");
  SampleSpec s;
  s.kind = Dataset::Kind::kEmbeddings;
  s.samples = 16;
  s.seq_len = 8;
  s.width = 8;
  s.classes = 33;
  s.seed = 3;
  const std::string path = dir.file("emb.h5");
  write_sample_dataset(path, s);
  const Dataset d = load_dataset(path);

  CHECK(d.kind == Dataset::Kind::kEmbeddings);
  CHECK(d.samples == 16);
  CHECK(d.seq_len == 8);
  CHECK(d.width == 8);
  REQUIRE(d.embeddings.size() == 16u * 8u * 8u);  // N*S*D = 1024
  CHECK(d.tokens.empty());
  CHECK(d.max_token == -1);
  REQUIRE(d.labels.size() == 16u);
  CHECK(d.max_label < 33);
  // N(0, 1): over n = 1024 draws the mean has sd 1/sqrt(n) = 0.031 and the
  // variance sd sqrt(2/n) = 0.044; the bounds below are > 4.5 sd away.
  double sum = 0, sq = 0;
  for (float x : d.embeddings) {
    REQUIRE(std::isfinite(x));
    sum += x;
    sq += double(x) * x;
  }
  const double n = double(d.embeddings.size()), mean = sum / n, var = sq / n - mean * mean;
  CHECK(std::abs(mean) < 0.15);
  CHECK(var > 0.8);
  CHECK(var < 1.2);

  const OnDisk emb = on_disk(path, "/embeddings");
  CHECK(emb.cls == H5T_FLOAT);
  CHECK(emb.size == 4u);  // float32
  CHECK(emb.layout == H5D_CONTIGUOUS);
}

TEST_CASE("int32 tokens and labels and float64 embeddings are converted on reading", "[runtime][data]") {
  TempDir dir("convert");
  {
    H5Writer w(dir.file("t.h5"));
    w.int32("tokens", {2, 3}, {0, 1, 7, 42, 1023, 3});
    w.int32("labels", {2}, {1, 0});
  }
  const Dataset t = load_dataset(dir.file("t.h5"));
  CHECK(t.kind == Dataset::Kind::kTokens);
  CHECK(t.samples == 2);
  CHECK(t.seq_len == 3);
  CHECK(t.width == 1);
  CHECK(t.tokens == std::vector<std::int64_t>{0, 1, 7, 42, 1023, 3});
  CHECK(t.max_token == 1023);
  CHECK(t.labels == std::vector<std::int64_t>{1, 0});
  CHECK(t.max_label == 1);

  {
    H5Writer w(dir.file("e.h5"));
    // 0.5, -1.25 and 3 are exact in float32; 0.1 rounds to the nearest float.
    w.float64("embeddings", {1, 2, 2}, {0.5, -1.25, 3.0, 0.1});
    w.int64("labels", {1}, {4});
  }
  const Dataset e = load_dataset(dir.file("e.h5"));
  CHECK(e.kind == Dataset::Kind::kEmbeddings);
  CHECK(e.samples == 1);
  CHECK(e.seq_len == 2);
  CHECK(e.width == 2);
  CHECK(e.embeddings == std::vector<float>{0.5f, -1.25f, 3.0f, static_cast<float>(0.1)});
  CHECK(e.labels == std::vector<std::int64_t>{4});
  CHECK(e.max_label == 4);
}

TEST_CASE("load_dataset names the file, the dataset and what is valid", "[runtime][data]") {
  TempDir dir("errors");

  SECTION("a missing file is an IoError naming it") {
    const std::string path = dir.file("missing.h5");
    REQUIRE_THROWS_AS(load_dataset(path), IoError);
    CHECK_THAT(error_of([&] { load_dataset(path); }), Contains(path));
  }
  SECTION("a file that is not HDF5 is an IoError naming it") {
    const std::string path = dir.file("text.h5");
    std::ofstream(path) << "not hdf5\n";
    REQUIRE_THROWS_AS(load_dataset(path), IoError);
    CHECK_THAT(error_of([&] { load_dataset(path); }), Contains(path) && Contains("not an HDF5 file"));
  }
  SECTION("neither /tokens nor /embeddings") {
    const std::string path = dir.file("neither.h5");
    H5Writer(path).int64("labels", {2}, {0, 1});
    REQUIRE_THROWS_AS(load_dataset(path), ConfigError);
    CHECK_THAT(error_of([&] { load_dataset(path); }),
               Contains(path) && Contains("neither /tokens nor /embeddings") && Contains("/tokens [N, S]") &&
                   Contains("/embeddings [N, S, D]"));
  }
  SECTION("both /tokens and /embeddings") {
    const std::string path = dir.file("both.h5");
    {
      H5Writer w(path);
      w.int64("tokens", {1, 1}, {0});
      w.float64("embeddings", {1, 1, 1}, {0.0});
    }
    REQUIRE_THROWS_AS(load_dataset(path), ConfigError);
    CHECK_THAT(error_of([&] { load_dataset(path); }), Contains(path) && Contains("both /tokens and /embeddings"));
  }
  SECTION("/tokens of rank 1") {
    const std::string path = dir.file("rank1.h5");
    H5Writer(path).int64("tokens", {4}, {1, 2, 3, 4});
    REQUIRE_THROWS_AS(load_dataset(path), ConfigError);
    CHECK(error_of([&] { load_dataset(path); }) ==
          path + ": /tokens has 1 dimension; expected /tokens [N, S] of integer token ids");
  }
  SECTION("/embeddings of rank 2") {
    const std::string path = dir.file("rank2.h5");
    H5Writer(path).float64("embeddings", {2, 2}, {1, 2, 3, 4});
    REQUIRE_THROWS_AS(load_dataset(path), ConfigError);
    CHECK(error_of([&] { load_dataset(path); }) ==
          path + ": /embeddings has 2 dimensions; expected /embeddings [N, S, D] of floats");
  }
  SECTION("floating-point /tokens") {
    const std::string path = dir.file("float-tokens.h5");
    H5Writer(path).float64("tokens", {1, 2}, {1, 2});
    REQUIRE_THROWS_AS(load_dataset(path), ConfigError);
    CHECK_THAT(error_of([&] { load_dataset(path); }), Contains(path) && Contains("/tokens must hold integers"));
  }
  SECTION("integer /embeddings") {
    const std::string path = dir.file("int-emb.h5");
    H5Writer(path).int32("embeddings", {1, 1, 2}, {1, 2});
    REQUIRE_THROWS_AS(load_dataset(path), ConfigError);
    CHECK_THAT(error_of([&] { load_dataset(path); }), Contains(path) && Contains("/embeddings must hold floating-point"));
  }
  SECTION("an empty /tokens") {
    const std::string path = dir.file("empty.h5");
    H5Writer(path).int64("tokens", {0, 3}, {});
    REQUIRE_THROWS_AS(load_dataset(path), ConfigError);
    CHECK_THAT(error_of([&] { load_dataset(path); }), Contains(path) && Contains("/tokens is empty"));
  }
  SECTION("/tokens that is a group") {
    const std::string path = dir.file("group.h5");
    H5Writer(path).group("tokens");
    REQUIRE_THROWS_AS(load_dataset(path), ConfigError);
    CHECK_THAT(error_of([&] { load_dataset(path); }), Contains(path) && Contains("/tokens is not a dataset"));
  }
  SECTION("/labels with one entry too many") {
    const std::string path = dir.file("labels.h5");
    {
      H5Writer w(path);
      w.int32("tokens", {2, 3}, {0, 1, 2, 3, 4, 5});
      w.int32("labels", {3}, {0, 1, 0});
    }
    REQUIRE_THROWS_AS(load_dataset(path), ConfigError);
    CHECK(error_of([&] { load_dataset(path); }) ==
          path + ": /labels has 3 entries for 2 samples; expected /labels [N] of integer class ids, N = 2");
  }
  SECTION("a negative token id") {
    const std::string path = dir.file("negative.h5");
    H5Writer(path).int32("tokens", {1, 3}, {5, -1, 2});
    REQUIRE_THROWS_AS(load_dataset(path), ConfigError);
    CHECK_THAT(error_of([&] { load_dataset(path); }), Contains(path) && Contains("/tokens holds a negative id (-1)"));
  }
  SECTION("a negative label") {
    const std::string path = dir.file("negative-label.h5");
    {
      H5Writer w(path);
      w.int32("tokens", {2, 1}, {0, 1});
      w.int32("labels", {2}, {0, -3});
    }
    REQUIRE_THROWS_AS(load_dataset(path), ConfigError);
    CHECK_THAT(error_of([&] { load_dataset(path); }), Contains(path) && Contains("/labels holds a negative class (-3)"));
  }
  SECTION("a NaN embedding") {
    const std::string path = dir.file("nan.h5");
    H5Writer(path).float64("embeddings", {1, 1, 2}, {0.0, std::nan("")});
    REQUIRE_THROWS_AS(load_dataset(path), ConfigError);
    CHECK_THAT(error_of([&] { load_dataset(path); }), Contains(path) && Contains("non-finite value at element 1"));
  }
}

TEST_CASE("write_sample_dataset checks its spec and names the field", "[runtime][data]") {
  TempDir dir("spec");
  const std::string path = dir.file("x.h5");
  auto error_with = [&](auto change) {
    SampleSpec s = tokens_spec(1);
    change(s);
    return error_of([&] { write_sample_dataset(path, s); });
  };
  CHECK(error_with([](SampleSpec& s) { s.samples = 0; }) == "sample dataset: samples: 0 must be positive");
  CHECK(error_with([](SampleSpec& s) { s.seq_len = -1; }) == "sample dataset: seq_len: -1 must be positive");
  CHECK(error_with([](SampleSpec& s) { s.vocab = 0; }) == "sample dataset: vocab: 0 must be at least 1");
  CHECK(error_with([](SampleSpec& s) { s.classes = -2; }) == "sample dataset: classes: -2 must be 0 (no labels) or more");
  CHECK(error_with([](SampleSpec& s) {
          s.kind = Dataset::Kind::kEmbeddings;
          s.width = 0;
        }) == "sample dataset: width: 0 must be positive");
  CHECK_THAT(error_with([](SampleSpec& s) { s.samples = std::int64_t{1} << 40; }), Contains("must be at most"));
  SampleSpec bad = tokens_spec(1);
  bad.samples = 0;
  CHECK_THROWS_AS(write_sample_dataset(path, bad), ConfigError);
  CHECK(dir.entries().empty());  // nothing written

  const std::string nowhere = dir.file("no-such-dir/x.h5");
  REQUIRE_THROWS_AS(write_sample_dataset(nowhere, tokens_spec(1)), IoError);
  CHECK_THAT(error_of([&] { write_sample_dataset(nowhere, tokens_spec(1)); }), Contains(nowhere));
}

TEST_CASE("write_sample_dataset replaces a file atomically and leaves no temporary behind", "[runtime][data]") {
  TempDir dir("atomic");
  const std::string path = dir.file("data.h5");
  SampleSpec s = tokens_spec(1);
  s.samples = 4;
  write_sample_dataset(path, s);
  CHECK(load_dataset(path).samples == 4);

  s.samples = 6;
  s.kind = Dataset::Kind::kEmbeddings;
  s.width = 2;
  write_sample_dataset(path, s);
  const Dataset d = load_dataset(path);
  CHECK(d.kind == Dataset::Kind::kEmbeddings);
  CHECK(d.samples == 6);
  CHECK(d.embeddings.size() == 6u * 16u * 2u);
  CHECK(dir.entries() == std::vector<std::string>{"data.h5"});
}

TEST_CASE("dtsim_make_sample_data writes what it says and rejects bad options", "[runtime][data]") {
  TempDir dir("program");
  const std::string tokens = dir.file("t.h5"), emb = dir.file("e.h5");

  Run r = run(dir, "--out '" + tokens + "' --samples 3 --seq 4 --vocab 10 --classes 2 --seed 5");
  CHECK(r.status == 0);
  CHECK(r.out == "wrote " + tokens + ": 3 samples of 4 tokens (vocab 10), 2 classes\n");
  CHECK(r.err.empty());
  const Dataset t = load_dataset(tokens);
  CHECK(t.samples == 3);
  CHECK(t.seq_len == 4);
  CHECK(t.max_token < 10);
  CHECK(t.labels.size() == 3u);

  r = run(dir, "--kind=embeddings --out '" + emb + "' --samples 2 --seq 3 --width 4");
  CHECK(r.status == 0);
  CHECK(r.out == "wrote " + emb + ": 2 samples of 3 x 4 embeddings\n");
  const Dataset e = load_dataset(emb);
  CHECK(e.embeddings.size() == 2u * 3u * 4u);
  CHECK(e.labels.empty());

  r = run(dir, "--out '" + tokens + "' --samples 0");
  CHECK(r.status == 2);
  CHECK(r.out.empty());
  CHECK(r.err == "dtsim_make_sample_data: --samples: '0' is not valid; expected a positive integer\n");

  r = run(dir, "--out '" + tokens + "' --kind images");
  CHECK(r.status == 2);
  CHECK(r.err == "dtsim_make_sample_data: --kind: 'images' is not one of tokens, embeddings\n");

  r = run(dir, "--out '" + tokens + "' --bogus 1");
  CHECK(r.status == 2);
  CHECK(r.err ==
        "dtsim_make_sample_data: unknown option --bogus; valid: --out, --kind, --samples, --seq, --vocab, --width, "
        "--classes, --seed\n");

  r = run(dir, "--samples 3");
  CHECK(r.status == 2);
  CHECK(r.err == "dtsim_make_sample_data: --out FILE.h5 is required (see --help)\n");

  r = run(dir, "--out '" + dir.file("no-such-dir/x.h5") + "'");
  CHECK(r.status == 2);
  CHECK_THAT(r.err, Contains("dtsim_make_sample_data: " + dir.file("no-such-dir/x.h5") + ": cannot write"));
  CHECK(std::count(r.err.begin(), r.err.end(), '\n') == 1);

  CHECK(dir.entries() == std::vector<std::string>{"e.h5", "t.h5"});
}
