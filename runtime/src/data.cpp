// HDF5 datasets for validation runs (Note [Dataset layout] in data.hpp),
// through the HDF5 1.10 C API. As in sim/src/profile/profile_io.cpp, HDF5's own error
// printing is off and every failure becomes one IoError or ConfigError line.
#include "dtsim/runtime/data.hpp"

#include <hdf5.h>
#include <unistd.h>

#include <algorithm>
#include <cmath>
#include <filesystem>
#include <random>
#include <system_error>

#include "dtsim/sim/error.hpp"

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
void silence_hdf5() { H5Eset_auto2(H5E_DEFAULT, nullptr, nullptr); }

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

/// The product of `dims`, as an element count.
std::size_t count_of(const std::vector<hsize_t>& dims) {
  std::size_t n = 1;
  for (auto d : dims) n *= static_cast<std::size_t>(d);
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

/// Writes the synthetic content of `spec` into the open `file`.
/// Draw order (tokens or embeddings, then labels) matches the trainer's
/// in-memory synthesis, so a file and a run without --data agree.
/// Writes a dataset's arrays as Note [Dataset layout] has them.
void write_content(hid_t file, const Dataset& d, const std::string& path) {
  const auto n = static_cast<hsize_t>(d.samples), s = static_cast<hsize_t>(d.seq_len);
  if (d.kind == Dataset::Kind::kTokens) {
    write_dataset(file, "/tokens", H5T_STD_I64LE, H5T_NATIVE_INT64, {n, s}, d.tokens.data(), path);
  } else {
    const auto w = static_cast<hsize_t>(d.width);
    write_dataset(file, "/embeddings", H5T_IEEE_F32LE, H5T_NATIVE_FLOAT, {n, s, w}, d.embeddings.data(), path);
  }
  if (!d.labels.empty()) write_dataset(file, "/labels", H5T_STD_I64LE, H5T_NATIVE_INT64, {n}, d.labels.data(), path);
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
  const bool tokens = has(file.get(), "/tokens"), emb = has(file.get(), "/embeddings");
  if (!tokens && !emb) {
    throw ConfigError(path + ": has neither /tokens nor /embeddings; expected " + tokens_layout + " or " + emb_layout);
  }
  if (tokens && emb) {
    throw ConfigError(path + ": has both /tokens and /embeddings; expected exactly one of " + tokens_layout + " and " + emb_layout);
  }

  Dataset d;
  d.path = path;
  if (tokens) {
    Id ds(open_dataset(file.get(), path, "/tokens", tokens_layout), H5Dclose);
    const auto dims = shape_of(ds.get(), path, "/tokens", 2, H5T_INTEGER, tokens_layout);
    d.kind = Dataset::Kind::kTokens;
    d.samples = static_cast<std::int64_t>(dims[0]);
    d.seq_len = static_cast<std::int64_t>(dims[1]);
    d.width = 1;
    d.tokens = read_all<std::int64_t>(ds.get(), H5T_NATIVE_INT64, count_of(dims), path, "/tokens");
    for (auto t : d.tokens) {
      if (t < 0) throw ConfigError(path + ": /tokens holds a negative id (" + std::to_string(t) + "); token ids must be >= 0");
      d.max_token = std::max(d.max_token, t);
    }
  } else {
    Id ds(open_dataset(file.get(), path, "/embeddings", emb_layout), H5Dclose);
    const auto dims = shape_of(ds.get(), path, "/embeddings", 3, H5T_FLOAT, emb_layout);
    d.kind = Dataset::Kind::kEmbeddings;
    d.samples = static_cast<std::int64_t>(dims[0]);
    d.seq_len = static_cast<std::int64_t>(dims[1]);
    d.width = static_cast<std::int64_t>(dims[2]);
    d.embeddings = read_all<float>(ds.get(), H5T_NATIVE_FLOAT, count_of(dims), path, "/embeddings");
    const auto bad = std::find_if(d.embeddings.begin(), d.embeddings.end(), [](float x) { return !std::isfinite(x); });
    if (bad != d.embeddings.end()) {
      throw ConfigError(path + ": /embeddings holds a non-finite value at element " +
                        std::to_string(bad - d.embeddings.begin()) + " (or one too large for float32); expected finite floats");
    }
  }

  if (has(file.get(), "/labels")) {
    const std::string labels_layout = "/labels [N] of integer class ids, N = " + std::to_string(d.samples);
    Id ds(open_dataset(file.get(), path, "/labels", labels_layout), H5Dclose);
    const auto dims = shape_of(ds.get(), path, "/labels", 1, H5T_INTEGER, labels_layout);
    if (static_cast<std::int64_t>(dims[0]) != d.samples) {
      throw ConfigError(path + ": /labels has " + std::to_string(dims[0]) + " entries for " + std::to_string(d.samples) +
                        " samples; expected " + labels_layout);
    }
    d.labels = read_all<std::int64_t>(ds.get(), H5T_NATIVE_INT64, count_of(dims), path, "/labels");
    for (auto l : d.labels) {
      if (l < 0) throw ConfigError(path + ": /labels holds a negative class (" + std::to_string(l) + "); classes must be >= 0");
      d.max_label = std::max(d.max_label, l);
    }
  }
  return d;
}

Dataset make_sample_dataset(const SampleSpec& spec) {
  const bool tokens = spec.kind == Dataset::Kind::kTokens;
  require(spec.samples > 0, "samples", spec.samples, "positive");
  require(spec.seq_len > 0, "seq_len", spec.seq_len, "positive");
  if (tokens) {
    require(spec.vocab >= 1, "vocab", spec.vocab, "at least 1");
  } else {
    require(spec.width > 0, "width", spec.width, "positive");
  }
  require(spec.classes >= 0, "classes", spec.classes, "0 (no labels) or more");
  const std::int64_t per_sample = tokens ? spec.seq_len : spec.seq_len * spec.width;  // each <= kMax checked below
  if (spec.seq_len > kMaxSampleElements || (!tokens && spec.width > kMaxSampleElements) ||
      per_sample > kMaxSampleElements / spec.samples) {
    throw ConfigError("sample dataset: samples x seq_len" + std::string(tokens ? "" : " x width") + " must be at most " +
                      std::to_string(kMaxSampleElements) + " elements");
  }
  // Tokens (or embeddings) first, then labels, from one generator.
  Dataset d;
  d.kind = spec.kind;
  d.samples = spec.samples;
  d.seq_len = spec.seq_len;
  d.width = tokens ? 1 : spec.width;
  std::mt19937_64 rng(spec.seed);
  if (tokens) {
    std::uniform_int_distribution<std::int64_t> tok(0, spec.vocab - 1);
    d.tokens.resize(static_cast<std::size_t>(spec.samples * spec.seq_len));
    for (auto& x : d.tokens) {
      x = tok(rng);
      d.max_token = std::max(d.max_token, x);
    }
  } else {
    std::normal_distribution<float> e(0.f, 1.f);
    d.embeddings.resize(static_cast<std::size_t>(spec.samples * spec.seq_len * spec.width));
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

  const fs::path target(path);
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
