// HDF5 datasets for validation runs (Note [Dataset layout] in data.hpp),
// through the HDF5 1.10 C API. As in sim/src/profile/profile_io.cpp, HDF5's own error
// printing is off and every failure becomes one IoError or ConfigError line.
#include "dtsim/runtime/data.hpp"

#include <hdf5.h>
#include <unistd.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <filesystem>
#include <random>
#include <system_error>

#include "dtsim/sim/error.hpp"
#include "dtsim/sim/file_io.hpp"

namespace dtsim::runtime {
namespace {

namespace fs = std::filesystem;

/// write_sample_dataset holds the whole dataset in memory: at most this many
/// elements (N*S tokens or N*S*D floats; 2 GiB of int64).
constexpr std::int64_t kMaxSampleElements = std::int64_t{1} << 28;

/// Closes an HDF5 id with its own close function when it leaves scope.
class Id {
 public:
  Id(hid_t id, herr_t (*close)(hid_t)) : id_(id), close_(close) {}
  ~Id() {
    if (id_ >= 0) close_(id_);
  }
  Id(const Id&) = delete;
  Id& operator=(const Id&) = delete;
  hid_t get() const { return id_; }
  bool ok() const { return id_ >= 0; }
  /// Closes now and reports whether the close succeeded (a file's close flushes it).
  bool close() {
    const herr_t status = id_ >= 0 ? close_(id_) : -1;
    id_ = -1;
    return status >= 0;
  }

 private:
  hid_t id_;
  herr_t (*close_)(hid_t);
};

/// HDF5 prints its error stack to stderr by default; we report our own line.
/// Called on every entry: the setting is per thread in thread-safe builds.
// Note [No HDF5 exit handler] in sim/src/profile/profile_io.cpp.
void silence_hdf5() {
  H5dont_atexit();
  H5Eset_auto2(H5E_DEFAULT, nullptr, nullptr);
}

/// Whether the file has a link called `name` (e.g. "/tokens").
bool has(hid_t file, const char* name) { return H5Lexists(file, name, H5P_DEFAULT) > 0; }

/// Opens dataset `name`; ConfigError when the link is something else (a group).
hid_t open_dataset(hid_t file, const std::string& path, const std::string& name, const std::string& expected) {
  const hid_t obj = H5Oopen(file, name.c_str(), H5P_DEFAULT);
  if (obj < 0) throw IoError(path + ": cannot open " + name);
  if (H5Iget_type(obj) != H5I_DATASET) {
    H5Oclose(obj);
    throw ConfigError(path + ": " + name + " is not a dataset; expected " + expected);
  }
  return obj;  // a dataset id: H5Dclose closes it
}

/// The dims of dataset `name`, checking its rank, element class and that no
/// dim is 0. `expected` is the valid layout, for the message.
std::vector<hsize_t> shape_of(hid_t ds, const std::string& path, const std::string& name, int rank, H5T_class_t cls,
                              const std::string& expected) {
  Id type(H5Dget_type(ds), H5Tclose);
  Id space(H5Dget_space(ds), H5Sclose);
  if (!type.ok() || !space.ok()) throw IoError(path + ": cannot read " + name);
  const int n = H5Sget_simple_extent_ndims(space.get());
  if (n != rank) {
    throw ConfigError(path + ": " + name + " has " + std::to_string(n) + " dimension" + (n == 1 ? "" : "s") + "; expected " +
                      expected);
  }
  if (H5Tget_class(type.get()) != cls) {
    throw ConfigError(path + ": " + name + " must hold " + (cls == H5T_INTEGER ? "integers" : "floating-point numbers") +
                      "; expected " + expected);
  }
  std::vector<hsize_t> dims(static_cast<std::size_t>(rank));
  if (H5Sget_simple_extent_dims(space.get(), dims.data(), nullptr) < 0) throw IoError(path + ": cannot read " + name);
  for (auto d : dims) {
    if (d == 0) throw ConfigError(path + ": " + name + " is empty; expected " + expected + " with every size positive");
  }
  return dims;
}

/// The product of `dims`, as an element count of `element` bytes each.
/// A damaged or hostile file may declare any shape: one whose elements
/// would not fit in this machine's memory (or overflow the count) is
/// refused in one line before anything is allocated.
std::size_t count_of(const std::vector<hsize_t>& dims, std::size_t element, const std::string& path, const std::string& name) {
  std::size_t n = 1;
  bool overflow = false;
  std::string shape;
  for (auto d : dims) {
    overflow = overflow || __builtin_mul_overflow(n, static_cast<std::size_t>(d), &n);
    shape += (shape.empty() ? "" : " x ") + std::to_string(d);
  }
  const long pages = ::sysconf(_SC_PHYS_PAGES), page = ::sysconf(_SC_PAGE_SIZE);
  const double memory = pages > 0 && page > 0 ? static_cast<double>(pages) * static_cast<double>(page) : 0;
  const double bytes = overflow ? 1e300 : static_cast<double>(n) * static_cast<double>(element);
  if (overflow || (memory > 0 && bytes > memory)) {
    char gb[64];
    std::snprintf(gb, sizeof gb, "%.3g GB", memory / 1e9);
    throw ConfigError(path + ": " + name + " declares " + shape + " elements, more than this machine's " + gb +
                      " of memory holds; expected a dataset that fits in memory (a damaged file?)");
  }
  return n;
}

/// Reads all of `ds`, converted by HDF5 to `mem_type` (e.g. int32 -> int64,
/// float64 -> float32).
template <class T>
std::vector<T> read_all(hid_t ds, hid_t mem_type, std::size_t count, const std::string& path, const std::string& name) {
  std::vector<T> v(count);
  if (H5Dread(ds, mem_type, H5S_ALL, H5S_ALL, H5P_DEFAULT, v.data()) < 0) throw IoError(path + ": cannot read " + name);
  return v;
}

/// Writes `data` as a contiguous dataset `name` of `dims`.
void write_dataset(hid_t file, const char* name, hid_t file_type, hid_t mem_type, const std::vector<hsize_t>& dims, const void* data,
                   const std::string& path) {
  Id space(H5Screate_simple(static_cast<int>(dims.size()), dims.data(), nullptr), H5Sclose);
  if (!space.ok()) throw IoError(path + ": cannot write " + name);
  Id ds(H5Dcreate2(file, name, file_type, space.get(), H5P_DEFAULT, H5P_DEFAULT, H5P_DEFAULT), H5Dclose);
  if (!ds.ok() || H5Dwrite(ds.get(), mem_type, H5S_ALL, H5S_ALL, H5P_DEFAULT, data) < 0) {
    throw IoError(path + ": cannot write " + name);
  }
}

/// ConfigError "sample dataset: FIELD: VALUE must be WHAT" unless `ok`.
void require(bool ok, const char* field, std::int64_t value, const char* what) {
  if (!ok) throw ConfigError(std::string("sample dataset: ") + field + ": " + std::to_string(value) + " must be " + what);
}

/// Writes a dataset's arrays as Note [Dataset layout] has them.
void write_content(hid_t file, const Dataset& d, const std::string& path) {
  const auto n = static_cast<hsize_t>(d.samples), s = static_cast<hsize_t>(d.seq_len);
  if (d.kind == Dataset::Kind::kTokens) {
    write_dataset(file, "/tokens", H5T_STD_I64LE, H5T_NATIVE_INT64, {n, s}, d.tokens.data(), path);
    if (!d.targets.empty()) write_dataset(file, "/targets", H5T_STD_I64LE, H5T_NATIVE_INT64, {n, s}, d.targets.data(), path);
  } else if (d.kind == Dataset::Kind::kImages) {
    const std::vector<hsize_t> dims{n, static_cast<hsize_t>(d.channels), static_cast<hsize_t>(d.height), static_cast<hsize_t>(d.image_width)};
    write_dataset(file, "/images", H5T_IEEE_F32LE, H5T_NATIVE_FLOAT, dims, d.embeddings.data(), path);
  } else {
    const auto w = static_cast<hsize_t>(d.width);
    write_dataset(file, "/embeddings", H5T_IEEE_F32LE, H5T_NATIVE_FLOAT, {n, s, w}, d.embeddings.data(), path);
  }
  if (!d.labels.empty()) write_dataset(file, "/labels", H5T_STD_I64LE, H5T_NATIVE_INT64, {n}, d.labels.data(), path);
}

/// Reads integer dataset `name` of `dims` (its shape already checked) into
/// `out`, refusing a negative value ("a negative WHAT"); returns the largest.
std::int64_t read_ids(hid_t ds, const std::vector<hsize_t>& dims, const std::string& path, const std::string& name, const char* what,
                      const char* valid, std::vector<std::int64_t>& out) {
  out = read_all<std::int64_t>(ds, H5T_NATIVE_INT64, count_of(dims, sizeof(std::int64_t), path, name), path, name);
  std::int64_t max = -1;
  for (auto x : out) {
    if (x < 0) throw ConfigError(path + ": " + name + " holds a negative " + what + " (" + std::to_string(x) + "); " + valid);
    max = std::max(max, x);
  }
  return max;
}

/// Reads float dataset `name` of `dims` into `out`, refusing a non-finite value.
void read_floats(hid_t ds, const std::vector<hsize_t>& dims, const std::string& path, const std::string& name, std::vector<float>& out) {
  out = read_all<float>(ds, H5T_NATIVE_FLOAT, count_of(dims, sizeof(float), path, name), path, name);
  const auto bad = std::find_if(out.begin(), out.end(), [](float x) { return !std::isfinite(x); });
  if (bad != out.end()) {
    throw ConfigError(path + ": " + name + " holds a non-finite value at element " + std::to_string(bad - out.begin()) +
                      " (or one too large for float32); expected finite floats");
  }
}

/// KEY's value in a layer signature "kind:k=v,k=v", or `fallback`.
std::int64_t sig_value(const std::string& sig, const std::string& key, std::int64_t fallback) {
  for (const char* sep : {":", ","}) {
    const auto pos = sig.find(sep + key + "=");
    if (pos != std::string::npos) return std::stoll(sig.substr(pos + key.size() + 2));
  }
  return fallback;
}

bool starts_with(const std::string& s, const char* prefix) { return s.rfind(prefix, 0) == 0; }

std::string range(std::int64_t n) { return "[0, " + std::to_string(n) + ")"; }

/// "/tokens [N, S] of ids in [0, 1024)" and the like: what `n` reads.
std::string layout_read(const DataNeeds& n) {
  switch (n.kind) {
    case Dataset::Kind::kTokens:
      return "/tokens [N, S] of ids in " + range(n.vocab) +
             (n.target_vocab > 0 ? " with /targets [N, S] of ids in " + range(n.target_vocab) : std::string());
    case Dataset::Kind::kEmbeddings: return "/embeddings [N, S, " + std::to_string(n.width) + "]";
    case Dataset::Kind::kImages:
      if (n.channels > 0) {
        const std::string h = std::to_string(n.height);
        return "/images [N, " + std::to_string(n.channels) + ", " + h + ", " + h + "]";
      }
      return "/images [N, C, H, W] with C x H x W = " + std::to_string(n.width);
  }
  return "";
}

const char* dataset_name(Dataset::Kind k) {
  return k == Dataset::Kind::kTokens ? "/tokens" : k == Dataset::Kind::kEmbeddings ? "/embeddings" : "/images";
}

}  // namespace

Dataset load_dataset(const std::string& path) {
  silence_hdf5();
  std::error_code ec;
  if (!fs::exists(path, ec)) throw IoError(path + ": no such file");
  if (fs::is_directory(path, ec)) throw IoError(path + ": is a directory, not an HDF5 file");
  if (H5Fis_hdf5(path.c_str()) <= 0) throw IoError(path + ": not an HDF5 file (or unreadable)");
  Id file(H5Fopen(path.c_str(), H5F_ACC_RDONLY, H5P_DEFAULT), H5Fclose);
  if (!file.ok()) throw IoError(path + ": cannot open");

  const std::string tokens_layout = "/tokens [N, S] of integer token ids";
  const std::string emb_layout = "/embeddings [N, S, D] of floats";
  const std::string images_layout = "/images [N, C, H, W] of floats";
  std::vector<std::string> found;
  for (const char* name : {"/tokens", "/embeddings", "/images"}) {
    if (has(file.get(), name)) found.push_back(name);
  }
  if (found.empty()) {
    throw ConfigError(path + ": has none of /tokens, /embeddings and /images; expected " + tokens_layout + ", " + emb_layout + " or " +
                      images_layout);
  }
  if (found.size() > 1) {
    const std::string which = found.size() == 2 ? "both " + found[0] + " and " + found[1] : "all of /tokens, /embeddings and /images";
    throw ConfigError(path + ": has " + which + "; expected exactly one of " + tokens_layout + ", " + emb_layout + " and " + images_layout);
  }

  Dataset d;
  d.path = path;
  if (found[0] == "/tokens") {
    Id ds(open_dataset(file.get(), path, "/tokens", tokens_layout), H5Dclose);
    const auto dims = shape_of(ds.get(), path, "/tokens", 2, H5T_INTEGER, tokens_layout);
    d.kind = Dataset::Kind::kTokens;
    d.samples = static_cast<std::int64_t>(dims[0]);
    d.seq_len = static_cast<std::int64_t>(dims[1]);
    d.width = 1;
    d.max_token = read_ids(ds.get(), dims, path, "/tokens", "id", "token ids must be >= 0", d.tokens);
  } else if (found[0] == "/embeddings") {
    Id ds(open_dataset(file.get(), path, "/embeddings", emb_layout), H5Dclose);
    const auto dims = shape_of(ds.get(), path, "/embeddings", 3, H5T_FLOAT, emb_layout);
    d.kind = Dataset::Kind::kEmbeddings;
    d.samples = static_cast<std::int64_t>(dims[0]);
    d.seq_len = static_cast<std::int64_t>(dims[1]);
    d.width = static_cast<std::int64_t>(dims[2]);
    read_floats(ds.get(), dims, path, "/embeddings", d.embeddings);
  } else {
    Id ds(open_dataset(file.get(), path, "/images", images_layout), H5Dclose);
    const auto dims = shape_of(ds.get(), path, "/images", 4, H5T_FLOAT, images_layout);
    d.kind = Dataset::Kind::kImages;
    d.samples = static_cast<std::int64_t>(dims[0]);
    d.seq_len = 1;
    d.channels = static_cast<std::int64_t>(dims[1]);
    d.height = static_cast<std::int64_t>(dims[2]);
    d.image_width = static_cast<std::int64_t>(dims[3]);
    d.width = d.channels * d.height * d.image_width;
    read_floats(ds.get(), dims, path, "/images", d.embeddings);
  }

  if (has(file.get(), "/targets")) {
    const std::string targets_layout = "/targets [N, S] of integer target ids, shaped as /tokens";
    if (d.kind != Dataset::Kind::kTokens) {
      throw ConfigError(path + ": has /targets beside " + found[0] + "; /targets [N, S] (an encoder-decoder's target ids) goes with /tokens [N, S] (its sources)");
    }
    Id ds(open_dataset(file.get(), path, "/targets", targets_layout), H5Dclose);
    const auto dims = shape_of(ds.get(), path, "/targets", 2, H5T_INTEGER, targets_layout);
    if (static_cast<std::int64_t>(dims[0]) != d.samples || static_cast<std::int64_t>(dims[1]) != d.seq_len) {
      throw ConfigError(path + ": /targets is [" + std::to_string(dims[0]) + ", " + std::to_string(dims[1]) + "] but /tokens is [" +
                        std::to_string(d.samples) + ", " + std::to_string(d.seq_len) + "]; expected " + targets_layout +
                        " (pad the shorter sentences)");
    }
    d.max_target = read_ids(ds.get(), dims, path, "/targets", "id", "target ids must be >= 0", d.targets);
  }

  if (has(file.get(), "/labels")) {
    const std::string labels_layout = "/labels [N] of integer class ids, N = " + std::to_string(d.samples);
    Id ds(open_dataset(file.get(), path, "/labels", labels_layout), H5Dclose);
    const auto dims = shape_of(ds.get(), path, "/labels", 1, H5T_INTEGER, labels_layout);
    if (static_cast<std::int64_t>(dims[0]) != d.samples) {
      throw ConfigError(path + ": /labels has " + std::to_string(dims[0]) + " entries for " + std::to_string(d.samples) +
                        " samples; expected " + labels_layout);
    }
    d.max_label = read_ids(ds.get(), dims, path, "/labels", "class", "classes must be >= 0", d.labels);
  }
  return d;
}

DataNeeds data_needs(const std::string& model, const std::string& first, const std::string& last) {
  DataNeeds n;
  n.model = model;
  if (starts_with(first, "conv.layer:")) {
    // The convolution views each sample as its square image (models/torch).
    n.kind = Dataset::Kind::kImages;
    n.channels = sig_value(first, "ci", 1);
    n.height = sig_value(first, "hw", 1);
    n.width = n.channels * n.height * n.height;
  } else if (starts_with(first, "fc.layer:")) {
    n.kind = Dataset::Kind::kImages;  // the MLP flattens its image
    n.width = sig_value(first, "in", 1);
  } else if (starts_with(first, "lstm.")) {
    n.kind = Dataset::Kind::kEmbeddings;
    n.width = sig_value(first, "in", 1);
  } else {
    n.kind = Dataset::Kind::kTokens;
    n.vocab = sig_value(first, "v", 1024);
  }
  if (starts_with(last, "s2s.decoder:")) n.target_vocab = sig_value(last, "v", 1);
  n.classes = sig_value(last, "c", 0);
  return n;
}

void check_dataset_fits(const Dataset& d, const DataNeeds& n, std::int64_t seq_len) {
  const std::string& f = d.path;
  const std::string& m = n.model;
  if (d.kind != n.kind) throw ConfigError(f + ": has " + dataset_name(d.kind) + " but " + m + " reads " + layout_read(n));
  if (d.kind != Dataset::Kind::kImages && d.seq_len < seq_len) {
    const std::string s = std::to_string(d.seq_len);
    throw ConfigError(f + ": " + dataset_name(d.kind) + " has sequences of " + s + " but the plan needs " + std::to_string(seq_len) +
                      " (--set plan.seq_len=" + s + ")");
  }
  if (d.kind == Dataset::Kind::kEmbeddings && d.width != n.width) {
    throw ConfigError(f + ": /embeddings are " + std::to_string(d.width) + " wide but " + m + " reads " + layout_read(n));
  }
  if (d.kind == Dataset::Kind::kImages) {
    const std::string shape = "[N, " + std::to_string(d.channels) + ", " + std::to_string(d.height) + ", " + std::to_string(d.image_width) + "]";
    if (n.channels > 0 && (d.channels != n.channels || d.height != n.height || d.image_width != n.height)) {
      throw ConfigError(f + ": /images are " + shape + " but " + m + " reads " + layout_read(n));
    }
    if (d.width != n.width) {
      throw ConfigError(f + ": /images are " + shape + " (" + std::to_string(d.width) + " values a sample) but " + m + " reads " + layout_read(n));
    }
  }
  if (d.kind == Dataset::Kind::kTokens) {
    if (d.max_token >= n.vocab) {
      throw ConfigError(f + ": /tokens holds id " + std::to_string(d.max_token) + " but " + m + " reads " + layout_read(n));
    }
    if (n.target_vocab > 0 && d.targets.empty()) {
      throw ConfigError(f + ": has no /targets but " + m + " reads " + layout_read(n) + " (sources and targets)");
    }
    if (n.target_vocab > 0 && d.max_target >= n.target_vocab) {
      throw ConfigError(f + ": /targets holds id " + std::to_string(d.max_target) + " but " + m + " reads " + layout_read(n));
    }
  }
  if (n.classes > 0 && d.labels.empty()) {
    throw ConfigError(f + ": has no /labels but " + m + " reads /labels [N] of classes in " + range(n.classes));
  }
  if (n.classes > 0 && d.max_label >= n.classes) {
    throw ConfigError(f + ": /labels holds class " + std::to_string(d.max_label) + " but " + m + " reads /labels [N] of classes in " +
                      range(n.classes));
  }
}

Dataset make_sample_dataset(const SampleSpec& spec) {
  const bool tokens = spec.kind == Dataset::Kind::kTokens, images = spec.kind == Dataset::Kind::kImages;
  require(spec.samples > 0, "samples", spec.samples, "positive");
  if (!images) require(spec.seq_len > 0, "seq_len", spec.seq_len, "positive");
  if (tokens) {
    require(spec.vocab >= 1, "vocab", spec.vocab, "at least 1");
    require(spec.target_vocab >= 0, "target_vocab", spec.target_vocab, "0 (no targets) or more");
  } else if (images) {
    require(spec.channels > 0, "channels", spec.channels, "positive");
    require(spec.height > 0, "height", spec.height, "positive");
    require(spec.width > 0, "width", spec.width, "positive");
  } else {
    require(spec.width > 0, "width", spec.width, "positive");
  }
  require(spec.classes >= 0, "classes", spec.classes, "0 (no labels) or more");
  // Elements a sample, in floating point: no 64-bit product can overflow
  // before the bound is checked (exact below 2^53, far above the bound).
  const double per_sample = tokens ? static_cast<double>(spec.seq_len)
                            : images ? static_cast<double>(spec.channels) * static_cast<double>(spec.height) * static_cast<double>(spec.width)
                                     : static_cast<double>(spec.seq_len) * static_cast<double>(spec.width);
  if (per_sample * static_cast<double>(spec.samples) > static_cast<double>(kMaxSampleElements)) {
    const char* dims = tokens ? "samples x seq_len" : images ? "samples x channels x height x width" : "samples x seq_len x width";
    throw ConfigError(std::string("sample dataset: ") + dims + " must be at most " + std::to_string(kMaxSampleElements) + " elements");
  }
  // Tokens (or embeddings, or pixels) first, then targets, then labels, from one generator.
  Dataset d;
  d.kind = spec.kind;
  d.samples = spec.samples;
  d.seq_len = images ? 1 : spec.seq_len;
  d.width = tokens ? 1 : images ? spec.channels * spec.height * spec.width : spec.width;
  if (images) {
    d.channels = spec.channels;
    d.height = spec.height;
    d.image_width = spec.width;
  }
  std::mt19937_64 rng(spec.seed);
  if (tokens) {
    std::uniform_int_distribution<std::int64_t> tok(0, spec.vocab - 1);
    d.tokens.resize(static_cast<std::size_t>(spec.samples * spec.seq_len));
    for (auto& x : d.tokens) {
      x = tok(rng);
      d.max_token = std::max(d.max_token, x);
    }
    if (spec.target_vocab > 0) {
      std::uniform_int_distribution<std::int64_t> tgt(0, spec.target_vocab - 1);
      d.targets.resize(d.tokens.size());
      for (auto& x : d.targets) {
        x = tgt(rng);
        d.max_target = std::max(d.max_target, x);
      }
    }
  } else {
    std::normal_distribution<float> e(0.f, 1.f);
    d.embeddings.resize(static_cast<std::size_t>(spec.samples * d.seq_len * d.width));
    for (auto& v : d.embeddings) v = e(rng);
  }
  if (spec.classes > 0) {
    std::uniform_int_distribution<std::int64_t> lab(0, spec.classes - 1);
    d.labels.resize(static_cast<std::size_t>(spec.samples));
    for (auto& x : d.labels) {
      x = lab(rng);
      d.max_label = std::max(d.max_label, x);
    }
  }
  return d;
}

void write_sample_dataset(const std::string& path, const SampleSpec& spec) {
  const Dataset d = make_sample_dataset(spec);
  silence_hdf5();

  // Note [What an output path is] (sim/src/core/file_io.cpp): HDF5 seeks,
  // so no stream; a symbolic link's target is replaced, the link kept.
  const fs::path target(sim::regular_output_target(path, "an HDF5 dataset"));
  const fs::path dir = target.has_parent_path() ? target.parent_path() : fs::path(".");
  std::error_code ec;
  if (!fs::is_directory(dir, ec)) throw IoError(path + ": cannot write (no directory " + dir.string() + ")");

  // Note [Atomic write]: HDF5 writes into a hidden temporary file beside
  // `path` (same file system), renamed over `path` only once it is closed, so
  // a reader never sees a half-written file and a failure leaves `path` as it was.
  const fs::path tmp = dir / ("." + target.filename().string() + ".tmp-" + std::to_string(::getpid()));
  try {
    Id file(H5Fcreate(tmp.c_str(), H5F_ACC_TRUNC, H5P_DEFAULT, H5P_DEFAULT), H5Fclose);
    if (!file.ok()) throw IoError(path + ": cannot create (is " + dir.string() + " writable?)");
    write_content(file.get(), d, path);
    if (!file.close()) throw IoError(path + ": cannot write (closing the file failed; is the disk full?)");
    fs::rename(tmp, target, ec);
    if (ec) throw IoError(path + ": cannot write (" + ec.message() + ")");
  } catch (...) {
    fs::remove(tmp, ec);
    throw;
  }
}

}  // namespace dtsim::runtime
