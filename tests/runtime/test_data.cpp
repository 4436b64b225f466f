// Datasets for validation runs (Note [Dataset layout] in dtsim/runtime/data.hpp):
// write_sample_dataset -> load_dataset round trips, files written here through
// the HDF5 C API in the other on-disk types (int32 tokens, float64 embeddings),
// every layout error, the atomic write, which file fits which model, the
// dtsim_make_sample_data program and the files scripts/make-sample-data writes.
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
#include "dtsim/runtime/validate.hpp"
#include "dtsim/sim/error.hpp"
#include "test_util.hpp"

namespace fs = std::filesystem;
using dtsim::ConfigError;
using dtsim::IoError;
using dtsim::runtime::check_dataset_fits;
using dtsim::runtime::data_needs;
using dtsim::runtime::DataNeeds;
using dtsim::runtime::Dataset;
using dtsim::runtime::load_dataset;
using dtsim::runtime::SampleSpec;
using dtsim::runtime::write_sample_dataset;
using dtsim::test::error_of;
using Catch::Matchers::Contains;
using Catch::Matchers::StartsWith;

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
  /// An int64 dataset of `dims` in chunks never written: a file of a few
  /// KB that declares any shape (a damaged or hostile file's).
  void declared_int64(const char* name, const std::vector<hsize_t>& dims) {
    const hid_t space = H5Screate_simple(static_cast<int>(dims.size()), dims.data(), nullptr);
    const hid_t plist = H5Pcreate(H5P_DATASET_CREATE);
    std::vector<hsize_t> chunk(dims.size(), 1);
    REQUIRE(H5Pset_chunk(plist, static_cast<int>(chunk.size()), chunk.data()) >= 0);
    const hid_t ds = H5Dcreate2(file_, name, H5T_STD_I64LE, space, H5P_DEFAULT, plist, H5P_DEFAULT);
    REQUIRE(ds >= 0);
    H5Dclose(ds);
    H5Pclose(plist);
    H5Sclose(space);
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

/// The dims of dataset `name` in the file.
std::vector<hsize_t> dims_of(const std::string& path, const char* name) {
  const hid_t file = H5Fopen(path.c_str(), H5F_ACC_RDONLY, H5P_DEFAULT);
  REQUIRE(file >= 0);
  const hid_t ds = H5Dopen2(file, name, H5P_DEFAULT);
  REQUIRE(ds >= 0);
  const hid_t space = H5Dget_space(ds);
  std::vector<hsize_t> dims(static_cast<std::size_t>(H5Sget_simple_extent_ndims(space)));
  H5Sget_simple_extent_dims(space, dims.data(), nullptr);
  H5Sclose(space);
  H5Dclose(ds);
  H5Fclose(file);
  return dims;
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

TEST_CASE("a sample images file is /images [N, C, H, W] of float32, the numbers of embeddings [N, 1, C*H*W]", "[runtime][data]") {
  TempDir dir("images");
  SampleSpec s;
  s.kind = Dataset::Kind::kImages;
  s.samples = 4;
  s.channels = 3;
  s.height = 5;
  s.width = 7;
  s.classes = 10;
  s.seed = 9;
  const std::string path = dir.file("images.h5");
  write_sample_dataset(path, s);
  const Dataset d = load_dataset(path);

  CHECK(d.kind == Dataset::Kind::kImages);
  CHECK(d.samples == 4);
  CHECK(d.channels == 3);
  CHECK(d.height == 5);
  CHECK(d.image_width == 7);
  CHECK(d.seq_len == 1);     // images have no sequence
  CHECK(d.width == 105);     // C H W = 3 x 5 x 7
  CHECK(d.embeddings.size() == 4u * 105u);
  CHECK(d.tokens.empty());
  REQUIRE(d.labels.size() == 4u);
  CHECK(d.max_label < 10);
  CHECK(dims_of(path, "/images") == std::vector<hsize_t>{4, 3, 5, 7});
  const OnDisk images = on_disk(path, "/images");
  CHECK(images.cls == H5T_FLOAT);
  CHECK(images.size == 4u);  // float32
  CHECK(images.layout == H5D_CONTIGUOUS);

  // The worker's synthetic images without --data: embeddings [N, 1, C*H*W]
  // of the same seed, drawn in the same order.
  SampleSpec e = s;
  e.kind = Dataset::Kind::kEmbeddings;
  e.seq_len = 1;
  e.width = 105;
  const Dataset m = dtsim::runtime::make_sample_dataset(e);
  CHECK(m.embeddings == d.embeddings);
  CHECK(m.labels == d.labels);
}

TEST_CASE("a target vocabulary adds /targets shaped as /tokens, drawn after them", "[runtime][data]") {
  TempDir dir("targets");
  SampleSpec s = tokens_spec(4);  // 8 x 16 ids below 50, 3 classes
  s.target_vocab = 7;
  const std::string path = dir.file("pairs.h5");
  write_sample_dataset(path, s);
  const Dataset d = load_dataset(path);
  REQUIRE(d.targets.size() == 8u * 16u);
  for (auto t : d.targets) {
    REQUIRE(t >= 0);
    REQUIRE(t < 7);
  }
  CHECK(d.max_target == *std::max_element(d.targets.begin(), d.targets.end()));
  CHECK(dims_of(path, "/targets") == std::vector<hsize_t>{8, 16});
  CHECK(on_disk(path, "/targets").size == 8u);  // int64
  // The sources are the draws of the same seed without targets.
  const Dataset plain = dtsim::runtime::make_sample_dataset(tokens_spec(4));
  CHECK(plain.tokens == d.tokens);
  CHECK(plain.targets.empty());
  CHECK(plain.max_target == -1);
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
  SECTION("none of /tokens, /embeddings and /images") {
    const std::string path = dir.file("neither.h5");
    H5Writer(path).int64("labels", {2}, {0, 1});
    REQUIRE_THROWS_AS(load_dataset(path), ConfigError);
    CHECK(error_of([&] { load_dataset(path); }) ==
          path + ": has none of /tokens, /embeddings and /images; expected /tokens [N, S] of integer token ids, "
                 "/embeddings [N, S, D] of floats or /images [N, C, H, W] of floats");
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
  SECTION("/tokens, /embeddings and /images") {
    const std::string path = dir.file("all.h5");
    {
      H5Writer w(path);
      w.int64("tokens", {1, 1}, {0});
      w.float64("embeddings", {1, 1, 1}, {0.0});
      w.float64("images", {1, 1, 1, 1}, {0.0});
    }
    CHECK_THAT(error_of([&] { load_dataset(path); }), StartsWith(path + ": has all of /tokens, /embeddings and /images; expected exactly one"));
  }
  SECTION("a shape no memory holds is refused before anything is allocated") {
    // 2^31 x 2^31 int64 ids: 2^62 elements, 32 EiB; and 2^40 x 2^40, whose
    // count overflows 64 bits. The file is a few KB (no chunk written).
    for (const hsize_t side : {hsize_t{1} << 31, hsize_t{1} << 40}) {
      const std::string path = dir.file("huge.h5");
      H5Writer(path).declared_int64("tokens", {side, side});
      REQUIRE_THROWS_AS(load_dataset(path), ConfigError);
      CHECK_THAT(error_of([&] { load_dataset(path); }),
                 StartsWith(path + ": /tokens declares " + std::to_string(side) + " x " + std::to_string(side) +
                            " elements, more than this machine's ") &&
                     Contains("of memory holds; expected a dataset that fits in memory"));
    }
  }
  SECTION("/images of rank 3") {
    const std::string path = dir.file("images-rank3.h5");
    H5Writer(path).float64("images", {1, 2, 2}, {1, 2, 3, 4});
    REQUIRE_THROWS_AS(load_dataset(path), ConfigError);
    CHECK(error_of([&] { load_dataset(path); }) == path + ": /images has 3 dimensions; expected /images [N, C, H, W] of floats");
  }
  SECTION("integer /images") {
    const std::string path = dir.file("int-images.h5");
    H5Writer(path).int32("images", {1, 1, 1, 2}, {1, 2});
    CHECK(error_of([&] { load_dataset(path); }) ==
          path + ": /images must hold floating-point numbers; expected /images [N, C, H, W] of floats");
  }
  SECTION("an infinite pixel") {
    const std::string path = dir.file("inf.h5");
    H5Writer(path).float64("images", {1, 1, 1, 3}, {0.0, 1.0, HUGE_VAL});
    CHECK_THAT(error_of([&] { load_dataset(path); }), StartsWith(path + ": /images holds a non-finite value at element 2"));
  }
  SECTION("/targets beside /images") {
    const std::string path = dir.file("targets-images.h5");
    {
      H5Writer w(path);
      w.float64("images", {1, 1, 1, 1}, {0.0});
      w.int64("targets", {1, 1}, {0});
    }
    CHECK(error_of([&] { load_dataset(path); }) ==
          path + ": has /targets beside /images; /targets [N, S] (an encoder-decoder's target ids) goes with /tokens [N, S] (its sources)");
  }
  SECTION("/targets shaped otherwise than /tokens") {
    const std::string path = dir.file("targets-shape.h5");
    {
      H5Writer w(path);
      w.int64("tokens", {2, 3}, {0, 1, 2, 3, 4, 5});
      w.int64("targets", {2, 2}, {0, 1, 2, 3});
    }
    CHECK(error_of([&] { load_dataset(path); }) ==
          path + ": /targets is [2, 2] but /tokens is [2, 3]; expected /targets [N, S] of integer target ids, shaped as /tokens "
                 "(pad the shorter sentences)");
  }
  SECTION("a negative target id") {
    const std::string path = dir.file("targets-negative.h5");
    {
      H5Writer w(path);
      w.int64("tokens", {1, 2}, {0, 1});
      w.int32("targets", {1, 2}, {4, -2});
    }
    CHECK(error_of([&] { load_dataset(path); }) == path + ": /targets holds a negative id (-2); target ids must be >= 0");
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
  CHECK(error_with([](SampleSpec& s) { s.target_vocab = -1; }) == "sample dataset: target_vocab: -1 must be 0 (no targets) or more");
  const auto images = [](std::int64_t c, std::int64_t h, std::int64_t w) {
    return [=](SampleSpec& s) {
      s.kind = Dataset::Kind::kImages;
      s.channels = c;
      s.height = h;
      s.width = w;
    };
  };
  CHECK(error_with(images(0, 32, 32)) == "sample dataset: channels: 0 must be positive");
  CHECK(error_with(images(3, -1, 32)) == "sample dataset: height: -1 must be positive");
  CHECK(error_with(images(3, 32, 0)) == "sample dataset: width: 0 must be positive");
  // C H W = 8 x 2^20 x 2^40 = 2^63 a sample, past int64: no 64-bit product is formed before the bound.
  CHECK(error_with(images(8, std::int64_t{1} << 20, std::int64_t{1} << 40)) ==
        "sample dataset: samples x channels x height x width must be at most 268435456 elements");
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

  r = run(dir, "--out '" + tokens + "' --kind pixels");
  CHECK(r.status == 2);
  CHECK(r.err == "dtsim_make_sample_data: --kind: 'pixels' is not one of tokens, embeddings, images\n");

  r = run(dir, "--out '" + tokens + "' --bogus 1");
  CHECK(r.status == 2);
  CHECK(r.err ==
        "dtsim_make_sample_data: unknown option --bogus; valid: --out, --kind, --samples, --seq, --vocab, --target-vocab, "
        "--width, --channels, --height, --classes, --seed\n");

  // An option of another kind is refused, not ignored.
  const std::pair<const char*, const char*> foreign[] = {
      {"--kind images --seq 4", "--seq applies to --kind tokens and embeddings only"},
      {"--kind images --vocab 4", "--vocab applies to --kind tokens only"},
      {"--kind embeddings --target-vocab 4", "--target-vocab applies to --kind tokens only"},
      {"--width 4", "--width applies to --kind embeddings (D) and images (W) only"},
      {"--kind embeddings --channels 1", "--channels applies to --kind images only"},
      {"--height 28", "--height applies to --kind images only"},
      {"--kind images --channels 0", "--channels: '0' is not valid; expected a positive integer"},
      {"--target-vocab -1", "--target-vocab: '-1' is not valid; expected an integer >= 0 (0: no /targets)"},
  };
  for (const auto& [args, message] : foreign) {
    INFO(args);
    r = run(dir, "--out '" + tokens + "' " + args);
    CHECK(r.status == 2);
    CHECK(r.out.empty());
    CHECK(r.err == std::string("dtsim_make_sample_data: ") + message + "\n");
  }

  r = run(dir, "--samples 3");
  CHECK(r.status == 2);
  CHECK(r.err == "dtsim_make_sample_data: --out FILE.h5 is required (see --help)\n");

  r = run(dir, "--out '" + dir.file("no-such-dir/x.h5") + "'");
  CHECK(r.status == 2);
  CHECK_THAT(r.err, Contains("dtsim_make_sample_data: " + dir.file("no-such-dir/x.h5") + ": cannot write"));
  CHECK(std::count(r.err.begin(), r.err.end(), '\n') == 1);

  const std::string images = dir.file("i.h5"), pairs = dir.file("p.h5");
  r = run(dir, "--kind images --out '" + images + "' --samples 2 --channels 1 --height 28 --width 28 --classes 10");
  CHECK(r.status == 0);
  CHECK(r.out == "wrote " + images + ": 2 images of 1 x 28 x 28, 10 classes\n");
  CHECK(dims_of(images, "/images") == std::vector<hsize_t>{2, 1, 28, 28});
  CHECK(dims_of(images, "/labels") == std::vector<hsize_t>{2});
  r = run(dir, "--kind images --out '" + images + "' --samples 2");  // CIFAR-10's shape by default, no labels
  CHECK(r.out == "wrote " + images + ": 2 images of 3 x 32 x 32\n");
  CHECK(dims_of(images, "/images") == std::vector<hsize_t>{2, 3, 32, 32});
  CHECK(load_dataset(images).labels.empty());

  r = run(dir, "--out '" + pairs + "' --samples 3 --seq 5 --vocab 9 --target-vocab 4");
  CHECK(r.status == 0);
  CHECK(r.out == "wrote " + pairs + ": 3 samples of 5 tokens (vocab 9) with targets (vocab 4)\n");
  CHECK(dims_of(pairs, "/tokens") == std::vector<hsize_t>{3, 5});
  CHECK(dims_of(pairs, "/targets") == std::vector<hsize_t>{3, 5});
  CHECK(load_dataset(pairs).max_target < 4);

  CHECK(dir.entries() == std::vector<std::string>{"e.h5", "i.h5", "p.h5", "t.h5"});
}

namespace {

/// What `dtsim validate --model MODEL --plan ddp --procs 2 --data FILE`
/// says of the file before it starts a rank (check_run_data): "" when the
/// model reads it.
std::string fit(const std::string& model, const std::string& file, const std::vector<std::string>& sets = {}) {
  std::vector<std::string> args{"--model", model, "--plan", "ddp", "--data", file};
  for (const auto& s : sets) args.insert(args.end(), {"--set", s});
  const auto o = dtsim::runtime::parse_validate_args(args);
  const auto setup = dtsim::runtime::setup_run(o, 2);
  const std::string e = error_of([&] { dtsim::runtime::check_run_data(o, setup); });
  return e == "(no error)" ? "" : e;
}

/// Writes `spec` to `dir`/`name` and returns the path.
std::string sample(const TempDir& dir, const std::string& name, const SampleSpec& spec) {
  write_sample_dataset(dir.file(name), spec);
  return dir.file(name);
}

SampleSpec images_spec(std::int64_t c, std::int64_t hw, std::int64_t classes) {
  SampleSpec s;
  s.kind = Dataset::Kind::kImages;
  s.samples = 8;
  s.channels = c;
  s.height = hw;
  s.width = hw;
  s.classes = classes;
  return s;
}

SampleSpec text_spec(std::int64_t seq, std::int64_t vocab, std::int64_t target_vocab, std::int64_t classes) {
  SampleSpec s;
  s.samples = 8;
  s.seq_len = seq;
  s.vocab = vocab;
  s.target_vocab = target_vocab;
  s.classes = classes;
  return s;
}

}  // namespace

TEST_CASE("a file the model cannot read is refused in one line naming the file, the dataset and what is valid", "[runtime][data]") {
  TempDir dir("fit");
  // Seed 003's tiny models as models/ builds them: cnn and vgg11-tiny read
  // 3 x 32 x 32 images of 10 classes, mlp 784 values (1 x 28 x 28), the
  // autoencoder 1 x 28 x 28 without labels, nbow-tiny ids below 1024 with
  // 2 classes, seq2seq-tiny sources and targets below 256 (16 tokens).
  const std::string rgb = sample(dir, "rgb.h5", images_spec(3, 32, 10)), gray = sample(dir, "gray.h5", images_spec(1, 28, 10));
  const std::string gray_unlabelled = sample(dir, "gray-unlabelled.h5", images_spec(1, 28, 0));
  const std::string pairs = sample(dir, "pairs.h5", text_spec(16, 256, 256, 2));
  CHECK(fit("cnn", rgb).empty());
  CHECK(fit("vgg11-tiny", rgb).empty());
  CHECK(fit("mlp", gray).empty());
  CHECK(fit("conv-autoencoder", gray).empty());  // the labels are not read
  CHECK(fit("conv-autoencoder", gray_unlabelled).empty());
  CHECK(fit("seq2seq-tiny", pairs).empty());
  CHECK(fit("nbow-tiny", pairs, {"plan.seq_len=16"}).empty());  // the targets are not read
  CHECK(fit("gpt2-tiny", pairs, {"plan.seq_len=16"}).empty());

  // The wrong kind of data.
  CHECK(fit("gpt2-tiny", rgb) == rgb + ": has /images but gpt2-tiny reads /tokens [N, S] of ids in [0, 1024)");
  CHECK(fit("cnn", pairs) == pairs + ": has /tokens but cnn reads /images [N, 3, 32, 32]");
  const std::string emb = sample(dir, "emb.h5", [] {
    SampleSpec s;
    s.kind = Dataset::Kind::kEmbeddings;
    s.samples = 2;
    s.seq_len = 1;
    s.width = 3072;  // a flattened 3 x 32 x 32 image is still not an image
    return s;
  }());
  CHECK(fit("cnn", emb) == emb + ": has /embeddings but cnn reads /images [N, 3, 32, 32]");
  CHECK(fit("seq2seq-tiny", gray) ==
        gray + ": has /images but seq2seq-tiny reads /tokens [N, S] of ids in [0, 256) with /targets [N, S] of ids in [0, 256)");
  // Images of another shape: the convolution takes exactly its own, the MLP any of its size.
  CHECK(fit("cnn", gray) == gray + ": /images are [N, 1, 28, 28] but cnn reads /images [N, 3, 32, 32]");
  CHECK(fit("conv-autoencoder", rgb) == rgb + ": /images are [N, 3, 32, 32] but conv-autoencoder reads /images [N, 1, 28, 28]");
  CHECK(fit("mlp", rgb) == rgb + ": /images are [N, 3, 32, 32] (3072 values a sample) but mlp reads /images [N, C, H, W] with C x H x W = 784");
  CHECK(fit("mlp", sample(dir, "flat.h5", [] {
          SampleSpec s = images_spec(4, 14, 10);  // 4 x 14 x 14 = 784: the MLP flattens it alike
          s.width = 14;
          return s;
        }())).empty());
  // Labels missing or past the classes.
  CHECK(fit("cnn", sample(dir, "rgb-unlabelled.h5", images_spec(3, 32, 0))) ==
        dir.file("rgb-unlabelled.h5") + ": has no /labels but cnn reads /labels [N] of classes in [0, 10)");
  const std::string many = sample(dir, "rgb-100.h5", images_spec(3, 32, 100));
  const std::int64_t top = load_dataset(many).max_label;
  REQUIRE(top >= 10);
  CHECK(fit("vgg11-tiny", many) ==
        many + ": /labels holds class " + std::to_string(top) + " but vgg11-tiny reads /labels [N] of classes in [0, 10)");
  // The encoder-decoder: targets needed, both vocabularies bounded, sequences long enough.
  const std::string sources = sample(dir, "sources.h5", text_spec(16, 256, 0, 0));
  CHECK(fit("seq2seq-tiny", sources) == sources +
                                            ": has no /targets but seq2seq-tiny reads /tokens [N, S] of ids in [0, 256) with /targets "
                                            "[N, S] of ids in [0, 256) (sources and targets)");
  const std::string wide = sample(dir, "wide.h5", text_spec(16, 1024, 256, 0));
  CHECK(fit("seq2seq-tiny", wide) == wide + ": /tokens holds id " + std::to_string(load_dataset(wide).max_token) +
                                         " but seq2seq-tiny reads /tokens [N, S] of ids in [0, 256) with /targets [N, S] of ids in [0, 256)");
  const std::string wide_targets = sample(dir, "wide-targets.h5", text_spec(16, 256, 1024, 0));
  CHECK(fit("seq2seq-tiny", wide_targets) == wide_targets + ": /targets holds id " + std::to_string(load_dataset(wide_targets).max_target) +
                                                 " but seq2seq-tiny reads /tokens [N, S] of ids in [0, 256) with /targets [N, S] of ids in [0, 256)");
  const std::string short_pairs = sample(dir, "short.h5", text_spec(8, 256, 256, 0));
  CHECK(fit("seq2seq-tiny", short_pairs) == short_pairs + ": /tokens has sequences of 8 but the plan needs 16 (--set plan.seq_len=8)");
  CHECK(fit("seq2seq-tiny", short_pairs, {"plan.seq_len=8"}).empty());
}

TEST_CASE("data_needs reads what a model takes from its first and last layers' signatures", "[runtime][data]") {
  // Signatures in models/'s form (the keys models/torch builds from).
  const DataNeeds conv = data_needs("m", "conv.layer:ci=3,co=6,k=5,s=1,p=0,hw=32,bn=0,act=1,pool=2,ig=0", "fc.head:in=84,c=10");
  CHECK(conv.kind == Dataset::Kind::kImages);
  CHECK(conv.channels == 3);
  CHECK(conv.height == 32);
  CHECK(conv.width == 3072);  // 3 x 32 x 32
  CHECK(conv.classes == 10);
  const DataNeeds ae = data_needs("m", "conv.layer:ci=1,co=16,k=3,s=2,p=1,hw=28,bn=0,act=1,pool=0,ig=0",
                                  "convt.layer:ci=16,co=1,k=3,s=2,p=1,op=1,hw=14,act=2,mse=1");
  CHECK(ae.classes == 0);  // ",co=" is not ",c="
  const DataNeeds fc = data_needs("m", "fc.layer:in=784,out=512,act=1,drop=0,ig=0", "fc.head:in=512,c=10");
  CHECK(fc.kind == Dataset::Kind::kImages);
  CHECK(fc.channels == 0);  // any C x H x W of 784
  CHECK(fc.width == 784);
  const DataNeeds s2s = data_needs("m", "s2s.encoder:v=300,e=32,hs=64,l=2,drop=0", "s2s.decoder:v=200,e=32,hs=64,l=2,drop=0");
  CHECK(s2s.kind == Dataset::Kind::kTokens);
  CHECK(s2s.vocab == 300);
  CHECK(s2s.target_vocab == 200);
  CHECK(s2s.classes == 0);
  const DataNeeds lstm = data_needs("m", "lstm.layer:in=64,hs=64,dirs=2", "lstm.head:in=128,c=33");
  CHECK(lstm.kind == Dataset::Kind::kEmbeddings);
  CHECK(lstm.width == 64);
  CHECK(lstm.classes == 33);
  CHECK(lstm.target_vocab == 0);
}

TEST_CASE("scripts/make-sample-data writes the samples the tiny models read", "[runtime][data]") {
  // The script's own default lines, run with the built program into a
  // temporary directory (the script itself first builds and installs).
  TempDir dir("script");
  std::istringstream script(slurp(std::string(DTSIM_SOURCE_DIR) + "/scripts/make-sample-data"));
  int lines = 0;
  for (std::string line; std::getline(script, line);) {
    if (line.rfind("\"$bin\" --out data/", 0) != 0) continue;
    const std::string args = line.substr(std::string("\"$bin\" ").size());
    const std::string cmd = std::string("cd '") + dir.str() + "' && mkdir -p data && '" + DTSIM_MAKE_SAMPLE_DATA + "' " + args + " > /dev/null";
    INFO(cmd);
    REQUIRE(std::system(cmd.c_str()) == 0);
    ++lines;
  }
  CHECK(lines == 5);
  const auto file = [&](const std::string& name) { return dir.file("data/" + name); };
  CHECK(dims_of(file("sample-tokens.h5"), "/tokens") == std::vector<hsize_t>{256, 512});  // bert-tiny's sequences
  CHECK(dims_of(file("sample-seq2seq.h5"), "/tokens") == std::vector<hsize_t>{256, 64});
  CHECK(dims_of(file("sample-seq2seq.h5"), "/targets") == std::vector<hsize_t>{256, 64});
  CHECK(dims_of(file("sample-embeddings.h5"), "/embeddings") == std::vector<hsize_t>{256, 32, 64});
  CHECK(dims_of(file("sample-images-3x32x32.h5"), "/images") == std::vector<hsize_t>{256, 3, 32, 32});
  CHECK(dims_of(file("sample-images-1x28x28.h5"), "/images") == std::vector<hsize_t>{256, 1, 28, 28});
  for (const char* name : {"sample-tokens.h5", "sample-seq2seq.h5", "sample-embeddings.h5", "sample-images-3x32x32.h5",
                           "sample-images-1x28x28.h5"}) {
    CHECK(dims_of(file(name), "/labels") == std::vector<hsize_t>{256});
  }
  // Each model the script's header names reads its file at its built-in shapes.
  const std::pair<const char*, const char*> reads[] = {
      {"gpt2-tiny", "sample-tokens.h5"},       {"llama-tiny", "sample-tokens.h5"},         {"moe-tiny", "sample-tokens.h5"},
      {"bert-tiny", "sample-tokens.h5"},
      {"nbow-tiny", "sample-tokens.h5"},       {"nbow-tiny", "sample-seq2seq.h5"},         {"seq2seq-tiny", "sample-seq2seq.h5"},
      {"bilstm-tiny", "sample-embeddings.h5"}, {"cnn", "sample-images-3x32x32.h5"},        {"vgg11-tiny", "sample-images-3x32x32.h5"},
      {"mlp", "sample-images-1x28x28.h5"},     {"conv-autoencoder", "sample-images-1x28x28.h5"},
  };
  for (const auto& [model, name] : reads) {
    INFO(model << " reading " << name);
    CHECK(fit(model, file(name)) == "");
  }
}
