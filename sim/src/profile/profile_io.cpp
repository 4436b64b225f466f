// Profile <-> HDF5. The layout (configs/profiles/README.md) is columnar: one
// group per table, one 1-D dataset per column, so h5dump and h5py read it
// without knowing our structs:
//   /                 attributes: format="dtsim-profile", format_version, and
//                     every provenance entry (device, torch_version, ...)
//   /layers/{signature, precision, micro_batch, seq_len, forward_{median,min,max}_s,
//            backward_{median,min,max}_s, reps}
//   /kernels/{kind, precision, m, n, k, batch, flops, bytes, median_s, min_s, max_s, reps}
//   /comm/{backend, op, ranks, bytes, median_s, min_s, max_s, reps, mean_s (optional: 0 or absent = not measured),
//          ranks_per_node (optional: 0 or absent = all on one node)}
//   /comm_in_step/{backend, op, ranks, bytes, lead_s, median_s, mean_s, stall_frac, stall_s, reps,
//                  resume_s, wait_s (optional: absent = not measured)}
//                  (optional, absent where none was timed: Note [Collectives in a step]
//                  in calibrate/src/gloo_bench.cpp)
//   /copies/{direction, bytes, median_s, min_s, max_s, reps}
//   /interference/{victim, channels, sms, proxy_Bps, hbm_Bps, alone_s, beside_s, reps}
//                  (optional, absent where none was measured: Note [Measuring
//                  interference] in calibrate/src/interference_bench.cpp)
//   /memory/{key, bytes}
//   /fits/<name>      float64 coefficients; attributes features (";"-joined),
//                     rms_rel_error, max_rel_error, samples
// HDF5 1.10 API (Debian 12). Every read checks the dataset exists, has the expected class and length,
// and turns HDF5's failures into one CalibrationError line.
//
// Note [Profile integrity]
// libhdf5 walks a file's internal addresses and lengths as it finds them: a
// damaged file (a few bytes flipped by a bad copy, a truncated download) can
// make it read out of bounds or allocate gigabytes before it fails (issue
// 25 found segmentation faults in H5HG_read and H5A__close through the
// variable-length strings and the attribute iteration). So no byte of a
// profile reaches libhdf5 unchecked. Since format 2 a profile starts with a
// 512-byte HDF5 user block (H5Pset_userblock: space at the file's start
// that libhdf5 skips, finding its superblock at offset 512) holding
//   dtsim-profile\n
//   integrity crc64-xz <16 hex digits>\n
//   bytes <decimal>\n
// and zeros to the end of the block: the CRC-64/XZ and length of everything
// after the block. load_profile reads the header, bounds the file's size,
// checksums the rest and only then opens it with libhdf5; any flipped or
// missing byte is refused in one line (a flip inside the header breaks its
// strict syntax; after it, the checksum, which detects every error burst of
// up to 64 bits and any other with probability 1 - 2^-64). Format-1 files
// (no block, starting with HDF5's signature) are still read, unchecked, and
// `dtsim profile upgrade` rewrites one as format 2.
#include <hdf5.h>

#include <fcntl.h>
#include <sys/resource.h>
#include <sys/stat.h>
#include <sys/wait.h>

#include <algorithm>
#include <cerrno>
#include <cmath>
#include <csignal>
#include <cstdio>
#include <cstring>
#include <new>
#include <string_view>
#include <utility>
#include <filesystem>
#include <functional>
#include <sstream>
#include <string>
#include <vector>

#include <unistd.h>

#include "dtsim/sim/checksum.hpp"
#include "dtsim/sim/error.hpp"
#include "dtsim/sim/file_io.hpp"
#include "dtsim/sim/profile.hpp"

namespace dtsim::sim {
namespace {

constexpr const char* kFormat = "dtsim-profile";
/// The user block holding the checksummed header (Note [Profile integrity]).
constexpr std::size_t kHeaderBytes = 512;
constexpr std::string_view kHeaderMagic = "dtsim-profile\n";
constexpr std::string_view kHdf5Signature = "\x89HDF\r\n\x1a\n";
/// No profile comes near this (the full CPU one is under 1 MiB): a larger
/// file is refused before anything reads it.
constexpr std::uintmax_t kMaxProfileBytes = std::uintmax_t{256} << 20;

/// CRC-64/XZ and length of an open file's bytes from `offset` to its end.
std::pair<std::uint64_t, std::uint64_t> checksum_from(int fd, std::uint64_t offset, const std::string& path) {
  std::vector<unsigned char> buf(1 << 16);
  std::uint64_t state = kCrc64Start, bytes = 0;
  for (;;) {
    const ssize_t n = ::pread(fd, buf.data(), buf.size(), static_cast<off_t>(offset + bytes));
    if (n < 0) {
      if (errno == EINTR) continue;
      throw CalibrationError(path + ": cannot read: " + std::strerror(errno));
    }
    if (n == 0) break;
    state = crc64_update(state, buf.data(), static_cast<std::size_t>(n));
    bytes += static_cast<std::uint64_t>(n);
  }
  return {crc64_final(state), bytes};
}

/// The header of Note [Profile integrity] for a checksum and a length.
std::string make_header(std::uint64_t crc, std::uint64_t bytes) {
  char line[96];
  std::snprintf(line, sizeof line, "integrity crc64-xz %016llx\nbytes %llu\n", static_cast<unsigned long long>(crc),
                static_cast<unsigned long long>(bytes));
  std::string h = std::string(kHeaderMagic) + line;
  h.resize(kHeaderBytes, '\0');
  return h;
}

/// Writes the header into the user block of a closed HDF5 file and syncs it.
void seal(const std::string& tmp, const std::string& path) {
  const int fd = ::open(tmp.c_str(), O_RDWR | O_CLOEXEC);
  if (fd < 0) throw IoError(path + ": cannot write: " + std::strerror(errno));
  try {
    const auto [crc, bytes] = checksum_from(fd, kHeaderBytes, path);
    const std::string header = make_header(crc, bytes);
    if (::pwrite(fd, header.data(), header.size(), 0) != static_cast<ssize_t>(header.size()) || ::fsync(fd) != 0) {
      throw IoError(path + ": cannot write: " + std::strerror(errno));
    }
  } catch (...) {
    ::close(fd);
    throw;
  }
  if (::close(fd) != 0) throw IoError(path + ": cannot write: " + std::strerror(errno));
}

std::string to_hex(std::uint64_t v) {
  char out[17];
  std::snprintf(out, sizeof out, "%016llx", static_cast<unsigned long long>(v));
  return out;
}

/// Checks a profile's bytes before libhdf5 reads any (Note [Profile
/// integrity]); returns its integrity: "crc64-xz", or "none" for format 1.
std::string verify(const std::string& path) {
  auto fail = [&](const std::string& why) -> void { throw CalibrationError(path + ": " + why); };
  std::error_code ec;
  const std::uintmax_t size = std::filesystem::file_size(path, ec);
  if (ec) fail(std::string("cannot read: ") + ec.message());
  if (size > kMaxProfileBytes) {
    fail("is " + std::to_string(size >> 20) + " MiB, larger than any profile (limit " + std::to_string(kMaxProfileBytes >> 20) +
         " MiB); not a dtsim profile");
  }
  const int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
  if (fd < 0) fail(std::string("cannot read: ") + std::strerror(errno));
  struct Closer {
    int fd;
    ~Closer() { ::close(fd); }
  } closer{fd};
  std::string header(kHeaderBytes, '\0');
  ssize_t got = 0;
  while (got < static_cast<ssize_t>(header.size())) {
    const ssize_t n = ::pread(fd, header.data() + got, header.size() - static_cast<std::size_t>(got), got);
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) break;
    got += n;
  }
  header.resize(static_cast<std::size_t>(got));
  if (header.compare(0, kHdf5Signature.size(), kHdf5Signature) == 0) return "none";
  if (header.compare(0, kHeaderMagic.size(), kHeaderMagic) != 0) {
    fail("not an HDF5 file or a dtsim profile (it starts with neither); calibrate again with dtsim calibrate");
  }
  if (header.size() < kHeaderBytes) fail("truncated inside its 512-byte header; copy it again or calibrate again");
  // The header, strictly as make_header() writes it.
  unsigned long long crc = 0, bytes = 0;
  int end = 0;
  const std::string fields = header.substr(kHeaderMagic.size());
  const bool parsed =
      std::sscanf(fields.c_str(), "integrity crc64-xz %16llx\nbytes %20llu\n%n", &crc, &bytes, &end) == 2 && end > 0;
  if (!parsed || make_header(crc, bytes) != header) {
    fail("damaged header (the first 512 bytes are not a dtsim profile header); copy it again or calibrate again");
  }
  const auto [actual_crc, actual_bytes] = checksum_from(fd, kHeaderBytes, path);
  if (actual_bytes != bytes) {
    fail("truncated or damaged: " + std::to_string(actual_bytes) + " bytes after the header where it was written with " +
         std::to_string(bytes) + "; copy it again or calibrate again");
  }
  if (actual_crc != crc) {
    fail("damaged: its checksum does not match its content (crc64-xz " + to_hex(actual_crc) + ", written " + to_hex(crc) +
         "); copy it again or calibrate again");
  }
  return "crc64-xz";
}

/// Closes an HDF5 handle with the right function when it leaves scope.
class Handle {
 public:
  Handle(hid_t id, herr_t (*close)(hid_t)) : id_(id), close_(close) {}
  ~Handle() {
    if (id_ >= 0) close_(id_);
  }
  Handle(const Handle&) = delete;
  Handle& operator=(const Handle&) = delete;
  Handle(Handle&& o) noexcept : id_(o.id_), close_(o.close_) { o.id_ = -1; }
  Handle& operator=(Handle&&) = delete;
  hid_t get() const { return id_; }
  bool ok() const { return id_ >= 0; }

 private:
  hid_t id_;
  herr_t (*close_)(hid_t);
};

/// HDF5 prints its error stack to stderr by default; we report our own line.
// Note [No HDF5 exit handler]
// libhdf5 registers an atexit handler that closes every file still open.
// A file whose flush failed (a full disk) cannot be closed, stays open, and
// that handler then crashed in H5F__close_cb as the process exited with
// its one-line error (SIGSEGV, libhdf5 1.10.8). Every file here is closed by
// its Handle, so the handler is not needed: H5dont_atexit, which must come
// before any other HDF5 call (it fails harmlessly once the library is up).
void silence_hdf5() {
  static const bool done = [] {
    H5dont_atexit();
    H5Eset_auto2(H5E_DEFAULT, nullptr, nullptr);
    return true;
  }();
  (void)done;
}

// ---- writing ----------------------------------------------------------------

class Writer {
 public:
  explicit Writer(const std::string& path) : path_(path) {}

  void check(herr_t status, const std::string& what) const {
    if (status < 0) throw IoError(path_ + ": cannot write " + what);
  }

  void column(hid_t group, const char* name, const std::vector<double>& v) const {
    write(group, name, H5T_NATIVE_DOUBLE, v.size(), v.data());
  }
  void column(hid_t group, const char* name, const std::vector<std::int64_t>& v) const {
    write(group, name, H5T_NATIVE_INT64, v.size(), v.data());
  }
  void column(hid_t group, const char* name, const std::vector<std::string>& v) const {
    std::vector<const char*> ptrs;
    ptrs.reserve(v.size());
    for (const auto& s : v) ptrs.push_back(s.c_str());
    Handle type(H5Tcopy(H5T_C_S1), H5Tclose);
    check(H5Tset_size(type.get(), H5T_VARIABLE), name);
    check(H5Tset_cset(type.get(), H5T_CSET_UTF8), name);
    write(group, name, type.get(), v.size(), ptrs.data());
  }

  void string_attribute(hid_t object, const std::string& name, const std::string& value) const {
    Handle type(H5Tcopy(H5T_C_S1), H5Tclose);
    check(H5Tset_size(type.get(), std::max<std::size_t>(1, value.size())), name);
    Handle space(H5Screate(H5S_SCALAR), H5Sclose);
    Handle attr(H5Acreate2(object, name.c_str(), type.get(), space.get(), H5P_DEFAULT, H5P_DEFAULT), H5Aclose);
    if (!attr.ok()) throw IoError(path_ + ": cannot write attribute " + name);
    const std::string padded = value.empty() ? std::string(1, '\0') : value;
    check(H5Awrite(attr.get(), type.get(), padded.data()), name);
  }
  void number_attribute(hid_t object, const std::string& name, double value) const {
    Handle space(H5Screate(H5S_SCALAR), H5Sclose);
    Handle attr(H5Acreate2(object, name.c_str(), H5T_NATIVE_DOUBLE, space.get(), H5P_DEFAULT, H5P_DEFAULT), H5Aclose);
    if (!attr.ok()) throw IoError(path_ + ": cannot write attribute " + name);
    check(H5Awrite(attr.get(), H5T_NATIVE_DOUBLE, &value), name);
  }

 private:
  void write(hid_t group, const char* name, hid_t type, std::size_t n, const void* data) const {
    const hsize_t dims[1] = {static_cast<hsize_t>(n)};
    Handle space(H5Screate_simple(1, dims, nullptr), H5Sclose);
    Handle ds(H5Dcreate2(group, name, type, space.get(), H5P_DEFAULT, H5P_DEFAULT, H5P_DEFAULT), H5Dclose);
    if (!ds.ok()) throw IoError(path_ + ": cannot write dataset " + name);
    if (n > 0) check(H5Dwrite(ds.get(), type, H5S_ALL, H5S_ALL, H5P_DEFAULT, data), name);
  }
  std::string path_;
};

template <class Row, class F>
auto column_of(const std::vector<Row>& rows, F f) {
  std::vector<decltype(f(rows.front()))> out;
  out.reserve(rows.size());
  for (const auto& r : rows) out.push_back(f(r));
  return out;
}

void write_timing(const Writer& w, hid_t g, const char* prefix, const std::vector<Timing>& t) {
  const std::string p = prefix;
  w.column(g, (p + "median_s").c_str(), column_of(t, [](const Timing& x) { return x.median_s; }));
  w.column(g, (p + "min_s").c_str(), column_of(t, [](const Timing& x) { return x.min_s; }));
  w.column(g, (p + "max_s").c_str(), column_of(t, [](const Timing& x) { return x.max_s; }));
  w.column(g, (p + "mean_s").c_str(), column_of(t, [](const Timing& x) { return x.mean_s; }));
}

std::vector<std::int64_t> reps_of(const std::vector<Timing>& t) {
  return column_of(t, [](const Timing& x) { return static_cast<std::int64_t>(x.reps); });
}

void write_all(const Profile& p, hid_t file, const Writer& w) {
  w.string_attribute(file, "format", kFormat);
  w.number_attribute(file, "format_version", Profile::kFormatVersion);
  for (const auto& [k, v] : p.info) {
    if (k == "format" || k == "format_version") continue;
    w.string_attribute(file, k, v);
  }
  auto group = [&](const char* name) {
    hid_t g = H5Gcreate2(file, name, H5P_DEFAULT, H5P_DEFAULT, H5P_DEFAULT);
    if (g < 0) throw IoError(std::string("cannot create group ") + name);
    return g;
  };
  {
    Handle g(group("layers"), H5Gclose);
    const auto& r = p.layers;
    w.column(g.get(), "signature", column_of(r, [](const LayerSample& x) { return x.signature; }));
    w.column(g.get(), "precision", column_of(r, [](const LayerSample& x) { return std::string(to_string(x.precision)); }));
    w.column(g.get(), "micro_batch", column_of(r, [](const LayerSample& x) { return x.micro_batch; }));
    w.column(g.get(), "seq_len", column_of(r, [](const LayerSample& x) { return x.seq_len; }));
    write_timing(w, g.get(), "forward_", column_of(r, [](const LayerSample& x) { return x.forward; }));
    write_timing(w, g.get(), "backward_", column_of(r, [](const LayerSample& x) { return x.backward; }));
    w.column(g.get(), "reps", reps_of(column_of(r, [](const LayerSample& x) { return x.forward; })));
    w.column(g.get(), "forward_transient_bytes", column_of(r, [](const LayerSample& x) { return static_cast<std::int64_t>(x.forward_transient); }));
    w.column(g.get(), "backward_rise_bytes", column_of(r, [](const LayerSample& x) { return static_cast<std::int64_t>(x.backward_rise); }));
    w.column(g.get(), "round_ratio_forward", column_of(r, [](const LayerSample& x) { return x.round_ratio_forward; }));
    w.column(g.get(), "round_ratio_backward", column_of(r, [](const LayerSample& x) { return x.round_ratio_backward; }));
  }
  {
    Handle g(group("kernels"), H5Gclose);
    const auto& r = p.kernels;
    w.column(g.get(), "kind", column_of(r, [](const KernelSample& x) { return x.kind; }));
    w.column(g.get(), "precision", column_of(r, [](const KernelSample& x) { return std::string(to_string(x.precision)); }));
    w.column(g.get(), "m", column_of(r, [](const KernelSample& x) { return x.m; }));
    w.column(g.get(), "n", column_of(r, [](const KernelSample& x) { return x.n; }));
    w.column(g.get(), "k", column_of(r, [](const KernelSample& x) { return x.k; }));
    w.column(g.get(), "batch", column_of(r, [](const KernelSample& x) { return x.batch; }));
    w.column(g.get(), "flops", column_of(r, [](const KernelSample& x) { return x.flops; }));
    w.column(g.get(), "bytes", column_of(r, [](const KernelSample& x) { return x.bytes; }));
    const auto t = column_of(r, [](const KernelSample& x) { return x.time; });
    write_timing(w, g.get(), "", t);
    w.column(g.get(), "reps", reps_of(t));
  }
  {
    Handle g(group("comm"), H5Gclose);
    const auto& r = p.comm;
    w.column(g.get(), "backend", column_of(r, [](const CommSample& x) { return x.backend; }));
    w.column(g.get(), "op", column_of(r, [](const CommSample& x) { return std::string(to_string(x.op)); }));
    w.column(g.get(), "ranks", column_of(r, [](const CommSample& x) { return static_cast<std::int64_t>(x.ranks); }));
    w.column(g.get(), "bytes", column_of(r, [](const CommSample& x) { return static_cast<std::int64_t>(x.bytes); }));
    const auto t = column_of(r, [](const CommSample& x) { return x.time; });
    write_timing(w, g.get(), "", t);
    w.column(g.get(), "reps", reps_of(t));
    w.column(g.get(), "ranks_per_node", column_of(r, [](const CommSample& x) { return static_cast<std::int64_t>(x.ranks_per_node); }));
  }
  if (!p.comm_in_step.empty()) {
    Handle g(group("comm_in_step"), H5Gclose);
    const auto& r = p.comm_in_step;
    w.column(g.get(), "backend", column_of(r, [](const StepCommSample& x) { return x.backend; }));
    w.column(g.get(), "op", column_of(r, [](const StepCommSample& x) { return std::string(to_string(x.op)); }));
    w.column(g.get(), "ranks", column_of(r, [](const StepCommSample& x) { return static_cast<std::int64_t>(x.ranks); }));
    w.column(g.get(), "bytes", column_of(r, [](const StepCommSample& x) { return static_cast<std::int64_t>(x.bytes); }));
    w.column(g.get(), "lead_s", column_of(r, [](const StepCommSample& x) { return x.lead_s; }));
    w.column(g.get(), "median_s", column_of(r, [](const StepCommSample& x) { return x.median_s; }));
    w.column(g.get(), "mean_s", column_of(r, [](const StepCommSample& x) { return x.mean_s; }));
    w.column(g.get(), "stall_frac", column_of(r, [](const StepCommSample& x) { return x.stall_frac; }));
    w.column(g.get(), "stall_s", column_of(r, [](const StepCommSample& x) { return x.stall_s; }));
    w.column(g.get(), "reps", column_of(r, [](const StepCommSample& x) { return static_cast<std::int64_t>(x.reps); }));
    // Note [Resuming after a wait]: where the bench timed it.
    if (std::any_of(r.begin(), r.end(), [](const StepCommSample& x) { return x.wait_s > 0; })) {
      w.column(g.get(), "resume_s", column_of(r, [](const StepCommSample& x) { return x.resume_s; }));
      w.column(g.get(), "wait_s", column_of(r, [](const StepCommSample& x) { return x.wait_s; }));
    }
  }
  {
    Handle g(group("copies"), H5Gclose);
    const auto& r = p.copies;
    w.column(g.get(), "direction", column_of(r, [](const CopySample& x) { return x.direction; }));
    w.column(g.get(), "bytes", column_of(r, [](const CopySample& x) { return static_cast<std::int64_t>(x.bytes); }));
    const auto t = column_of(r, [](const CopySample& x) { return x.time; });
    write_timing(w, g.get(), "", t);
    w.column(g.get(), "reps", reps_of(t));
  }
  if (!p.interference.empty()) {
    Handle g(group("interference"), H5Gclose);
    const auto& r = p.interference;
    w.column(g.get(), "victim", column_of(r, [](const InterferenceSample& x) { return x.victim; }));
    w.column(g.get(), "channels", column_of(r, [](const InterferenceSample& x) { return static_cast<std::int64_t>(x.channels); }));
    w.column(g.get(), "sms", column_of(r, [](const InterferenceSample& x) { return static_cast<std::int64_t>(x.sms); }));
    w.column(g.get(), "proxy_Bps", column_of(r, [](const InterferenceSample& x) { return x.proxy_Bps; }));
    w.column(g.get(), "hbm_Bps", column_of(r, [](const InterferenceSample& x) { return x.hbm_Bps; }));
    w.column(g.get(), "alone_s", column_of(r, [](const InterferenceSample& x) { return x.alone_s; }));
    w.column(g.get(), "beside_s", column_of(r, [](const InterferenceSample& x) { return x.beside_s; }));
    w.column(g.get(), "reps", column_of(r, [](const InterferenceSample& x) { return static_cast<std::int64_t>(x.reps); }));
  }
  {
    Handle g(group("memory"), H5Gclose);
    std::vector<std::string> keys;
    std::vector<std::int64_t> bytes;
    for (const auto& [k, v] : p.memory) {
      keys.push_back(k);
      bytes.push_back(static_cast<std::int64_t>(v));
    }
    w.column(g.get(), "key", keys);
    w.column(g.get(), "bytes", bytes);
  }
  {
    Handle g(group("fits"), H5Gclose);
    for (const auto& [name, f] : p.fits) {
      w.column(g.get(), name.c_str(), f.coef);
      Handle ds(H5Dopen2(g.get(), name.c_str(), H5P_DEFAULT), H5Dclose);
      std::string joined;
      for (std::size_t i = 0; i < f.features.size(); ++i) joined += (i ? ";" : "") + f.features[i];
      w.string_attribute(ds.get(), "features", joined);
      w.number_attribute(ds.get(), "rms_rel_error", f.rms_rel_error);
      w.number_attribute(ds.get(), "max_rel_error", f.max_rel_error);
      w.number_attribute(ds.get(), "samples", f.samples);
    }
  }
}

// ---- reading ----------------------------------------------------------------

class Reader {
 public:
  explicit Reader(std::string path) : path_(std::move(path)) {}

  [[noreturn]] void fail(const std::string& what) const { throw CalibrationError(path_ + ": " + what); }

  /// Length of a 1-D dataset of the given class, or fails naming it.
  hsize_t length(hid_t ds, const std::string& where, H5T_class_t cls) const {
    Handle type(H5Dget_type(ds), H5Tclose);
    if (!type.ok() || H5Tget_class(type.get()) != cls) fail(where + ": wrong data type");
    Handle space(H5Dget_space(ds), H5Sclose);
    if (!space.ok() || H5Sget_simple_extent_ndims(space.get()) != 1) fail(where + ": not a 1-D dataset");
    hsize_t n = 0;
    H5Sget_simple_extent_dims(space.get(), &n, nullptr);
    return n;
  }

  Handle open(hid_t group, const std::string& gname, const char* name) const {
    if (H5Lexists(group, name, H5P_DEFAULT) <= 0) fail("/" + gname + "/" + name + ": missing (the file is truncated or not a dtsim profile)");
    Handle ds(H5Dopen2(group, name, H5P_DEFAULT), H5Dclose);
    if (!ds.ok()) fail("/" + gname + "/" + name + ": cannot be read (corrupt file)");
    return ds;
  }

  template <class T>
  std::vector<T> numbers(hid_t group, const std::string& gname, const char* name, hid_t mem_type, H5T_class_t cls) const {
    Handle ds = open(group, gname, name);
    const std::string where = "/" + gname + "/" + name;
    std::vector<T> v(length(ds.get(), where, cls));
    if (!v.empty() && H5Dread(ds.get(), mem_type, H5S_ALL, H5S_ALL, H5P_DEFAULT, v.data()) < 0) {
      fail(where + ": cannot be read (corrupt file)");
    }
    return v;
  }
  std::vector<double> doubles(hid_t g, const std::string& gname, const char* name) const {
    return numbers<double>(g, gname, name, H5T_NATIVE_DOUBLE, H5T_FLOAT);
  }
  std::vector<std::int64_t> ints(hid_t g, const std::string& gname, const char* name) const {
    return numbers<std::int64_t>(g, gname, name, H5T_NATIVE_INT64, H5T_INTEGER);
  }
  std::vector<std::string> strings(hid_t group, const std::string& gname, const char* name) const {
    Handle ds = open(group, gname, name);
    const std::string where = "/" + gname + "/" + name;
    const hsize_t n = length(ds.get(), where, H5T_STRING);
    Handle type(H5Tcopy(H5T_C_S1), H5Tclose);
    H5Tset_size(type.get(), H5T_VARIABLE);
    H5Tset_cset(type.get(), H5T_CSET_UTF8);
    std::vector<char*> raw(n, nullptr);
    if (n > 0 && H5Dread(ds.get(), type.get(), H5S_ALL, H5S_ALL, H5P_DEFAULT, raw.data()) < 0) {
      fail(where + ": cannot be read (corrupt file)");
    }
    std::vector<std::string> out;
    out.reserve(n);
    for (char* s : raw) out.emplace_back(s ? s : "");
    if (n > 0) {
      Handle space(H5Dget_space(ds.get()), H5Sclose);
      H5Dvlen_reclaim(type.get(), space.get(), H5P_DEFAULT, raw.data());
    }
    return out;
  }

  std::string string_attribute(hid_t object, const char* name) const {
    Handle attr(H5Aopen(object, name, H5P_DEFAULT), H5Aclose);
    if (!attr.ok()) fail(std::string("attribute ") + name + ": cannot be read");
    Handle type(H5Aget_type(attr.get()), H5Tclose);
    if (H5Tget_class(type.get()) != H5T_STRING) fail(std::string("attribute ") + name + ": not a string");
    if (H5Tis_variable_str(type.get()) > 0) fail(std::string("attribute ") + name + ": variable-length strings are not used by dtsim");
    const std::size_t size = H5Tget_size(type.get());
    std::string value(size, '\0');
    Handle mem(H5Tcopy(H5T_C_S1), H5Tclose);
    H5Tset_size(mem.get(), size);
    if (H5Aread(attr.get(), mem.get(), value.data()) < 0) fail(std::string("attribute ") + name + ": cannot be read");
    value.resize(std::strlen(value.c_str()));
    return value;
  }
  double number_attribute(hid_t object, const char* name) const {
    Handle attr(H5Aopen(object, name, H5P_DEFAULT), H5Aclose);
    if (!attr.ok()) fail(std::string("attribute ") + name + ": missing");
    double v = 0;
    if (H5Aread(attr.get(), H5T_NATIVE_DOUBLE, &v) < 0) fail(std::string("attribute ") + name + ": not a number");
    return v;
  }

  void same_length(std::size_t n, std::size_t m, const std::string& where) const {
    if (n != m) fail(where + ": has " + std::to_string(m) + " rows where its table has " + std::to_string(n));
  }

  Precision precision(const std::string& s, const std::string& where) const {
    if (s == "fp32") return Precision::kFp32;
    if (s == "fp16") return Precision::kFp16;
    if (s == "bf16") return Precision::kBf16;
    if (s == "fp8") return Precision::kFp8;
    fail(where + ": precision '" + s + "' is not one of fp32, fp16, bf16, fp8");
  }

  const std::string& path() const { return path_; }

 private:
  std::string path_;
};

std::vector<Timing> read_timing(const Reader& r, hid_t g, const std::string& gname, const std::string& prefix,
                                const std::vector<std::int64_t>& reps) {
  const auto med = r.doubles(g, gname, (prefix + "median_s").c_str());
  const auto lo = r.doubles(g, gname, (prefix + "min_s").c_str());
  const auto hi = r.doubles(g, gname, (prefix + "max_s").c_str());
  r.same_length(reps.size(), med.size(), "/" + gname + "/" + prefix + "median_s");
  r.same_length(reps.size(), lo.size(), "/" + gname + "/" + prefix + "min_s");
  r.same_length(reps.size(), hi.size(), "/" + gname + "/" + prefix + "max_s");
  std::vector<Timing> t(reps.size());
  for (std::size_t i = 0; i < t.size(); ++i) {
    if (!(med[i] >= 0) || !(lo[i] >= 0) || !(hi[i] >= 0)) r.fail("/" + gname + "/" + prefix + "median_s: row " + std::to_string(i) + " is not a time");
    t[i] = Timing{med[i], lo[i], hi[i], static_cast<int>(reps[i])};
  }
  // The mean came later: a profile without it reads as 0, "not measured".
  const std::string mean = prefix + "mean_s";
  if (H5Lexists(g, mean.c_str(), H5P_DEFAULT) > 0) {
    const auto mu = r.doubles(g, gname, mean.c_str());
    r.same_length(reps.size(), mu.size(), "/" + gname + "/" + mean);
    for (std::size_t i = 0; i < t.size(); ++i) {
      if (!(mu[i] >= 0)) r.fail("/" + gname + "/" + mean + ": row " + std::to_string(i) + " is not a time");
      t[i].mean_s = mu[i];
    }
  }
  return t;
}

herr_t collect_attr(hid_t, const char* name, const H5A_info_t*, void* out) {
  static_cast<std::vector<std::string>*>(out)->push_back(name);
  return 0;
}
herr_t collect_link(hid_t, const char* name, const H5L_info_t*, void* out) {
  static_cast<std::vector<std::string>*>(out)->push_back(name);
  return 0;
}

Handle open_group(const Reader& r, hid_t file, const char* name) {
  if (H5Lexists(file, name, H5P_DEFAULT) <= 0) r.fail(std::string("/") + name + ": missing (the file is truncated or not a dtsim profile)");
  Handle g(H5Gopen2(file, name, H5P_DEFAULT), H5Gclose);
  if (!g.ok()) r.fail(std::string("/") + name + ": cannot be read (corrupt file)");
  return g;
}

/// The profile in an open file whose bytes verify() checked; `version` is
/// the format its start showed (1: no header, 2: the header).
Profile read_all(const Reader& r, hid_t file, int version_seen) {
  Profile p;
  p.path = r.path();
  if (H5Aexists(file, "format") <= 0 || r.string_attribute(file, "format") != kFormat) {
    r.fail("not a dtsim profile (no format=\"dtsim-profile\" attribute); make one with dtsim calibrate");
  }
  const double version = r.number_attribute(file, "format_version");
  if (version != 1 && version != Profile::kFormatVersion) {
    r.fail("profile format version " + std::to_string(static_cast<int>(version)) + " is not a version this dtsim reads (1, " +
           std::to_string(Profile::kFormatVersion) + "); calibrate again with this dtsim");
  }
  if (version != version_seen) {
    // A format-2 profile without its header (or the reverse): damaged.
    r.fail("damaged: a format " + std::to_string(static_cast<int>(version)) + " profile " +
           (version_seen == 1 ? "without its checksummed header" : "with a header it should not have") +
           "; copy it again or calibrate again");
  }
  std::vector<std::string> attrs;
  H5Aiterate2(file, H5_INDEX_NAME, H5_ITER_INC, nullptr, collect_attr, &attrs);
  for (const auto& a : attrs) {
    if (a == "format" || a == "format_version") continue;
    p.info[a] = r.string_attribute(file, a.c_str());
  }
  {
    Handle g = open_group(r, file, "layers");
    const auto sig = r.strings(g.get(), "layers", "signature");
    const auto prec = r.strings(g.get(), "layers", "precision");
    const auto b = r.ints(g.get(), "layers", "micro_batch");
    const auto s = r.ints(g.get(), "layers", "seq_len");
    const auto reps = r.ints(g.get(), "layers", "reps");
    r.same_length(sig.size(), prec.size(), "/layers/precision");
    r.same_length(sig.size(), b.size(), "/layers/micro_batch");
    r.same_length(sig.size(), s.size(), "/layers/seq_len");
    r.same_length(sig.size(), reps.size(), "/layers/reps");
    const auto fwd = read_timing(r, g.get(), "layers", "forward_", reps);
    const auto bwd = read_timing(r, g.get(), "layers", "backward_", reps);
    // Note [Layer memory] came later: a profile without it reads as -1, "not measured".
    std::vector<std::int64_t> transient(sig.size(), -1), rise(sig.size(), -1);
    for (auto [name, column] : {std::pair{"forward_transient_bytes", &transient}, std::pair{"backward_rise_bytes", &rise}}) {
      if (H5Lexists(g.get(), name, H5P_DEFAULT) <= 0) continue;
      *column = r.ints(g.get(), "layers", name);
      r.same_length(sig.size(), column->size(), std::string("/layers/") + name);
      for (std::size_t i = 0; i < column->size(); ++i) {
        if ((*column)[i] < -1 || (*column)[i] > (std::int64_t{1} << 50)) {
          r.fail(std::string("/layers/") + name + ": row " + std::to_string(i) + " is not a byte count");
        }
      }
    }
    // Note [A step's ratio round by round] came later: a profile without it reads as 0, "not timed so".
    std::vector<double> ratio_f(sig.size(), 0), ratio_b(sig.size(), 0);
    for (auto [name, column] : {std::pair{"round_ratio_forward", &ratio_f}, std::pair{"round_ratio_backward", &ratio_b}}) {
      if (H5Lexists(g.get(), name, H5P_DEFAULT) <= 0) continue;
      *column = r.doubles(g.get(), "layers", name);
      r.same_length(sig.size(), column->size(), std::string("/layers/") + name);
      for (std::size_t i = 0; i < column->size(); ++i) {
        if (!((*column)[i] >= 0 && (*column)[i] < 1e6)) {
          r.fail(std::string("/layers/") + name + ": row " + std::to_string(i) + " is not a ratio (0, or a positive number)");
        }
      }
    }
    for (std::size_t i = 0; i < sig.size(); ++i) {
      if (b[i] <= 0 || s[i] <= 0) r.fail("/layers: row " + std::to_string(i) + " has a non-positive shape");
      p.layers.push_back({sig[i], r.precision(prec[i], "/layers/precision"), b[i], s[i], fwd[i], bwd[i], transient[i], rise[i], ratio_f[i], ratio_b[i]});
    }
  }
  {
    Handle g = open_group(r, file, "kernels");
    const auto kind = r.strings(g.get(), "kernels", "kind");
    const auto prec = r.strings(g.get(), "kernels", "precision");
    const auto m = r.ints(g.get(), "kernels", "m");
    const auto n = r.ints(g.get(), "kernels", "n");
    const auto k = r.ints(g.get(), "kernels", "k");
    const auto batch = r.ints(g.get(), "kernels", "batch");
    const auto flops = r.doubles(g.get(), "kernels", "flops");
    const auto bytes = r.doubles(g.get(), "kernels", "bytes");
    const auto reps = r.ints(g.get(), "kernels", "reps");
    for (const auto* col : {&m, &n, &k, &batch, &reps}) r.same_length(kind.size(), col->size(), "/kernels");
    r.same_length(kind.size(), prec.size(), "/kernels/precision");
    r.same_length(kind.size(), flops.size(), "/kernels/flops");
    r.same_length(kind.size(), bytes.size(), "/kernels/bytes");
    const auto t = read_timing(r, g.get(), "kernels", "", reps);
    for (std::size_t i = 0; i < kind.size(); ++i) {
      p.kernels.push_back({kind[i], r.precision(prec[i], "/kernels/precision"), m[i], n[i], k[i], batch[i], flops[i], bytes[i], t[i]});
    }
  }
  {
    Handle g = open_group(r, file, "comm");
    const auto backend = r.strings(g.get(), "comm", "backend");
    const auto op = r.strings(g.get(), "comm", "op");
    const auto ranks = r.ints(g.get(), "comm", "ranks");
    const auto bytes = r.ints(g.get(), "comm", "bytes");
    const auto reps = r.ints(g.get(), "comm", "reps");
    r.same_length(backend.size(), op.size(), "/comm/op");
    r.same_length(backend.size(), ranks.size(), "/comm/ranks");
    r.same_length(backend.size(), bytes.size(), "/comm/bytes");
    r.same_length(backend.size(), reps.size(), "/comm/reps");
    const auto t = read_timing(r, g.get(), "comm", "", reps);
    // Ranks per node came later (imported multi-node runs): absent, all 0 (one node).
    std::vector<std::int64_t> per_node(backend.size(), 0);
    if (H5Lexists(g.get(), "ranks_per_node", H5P_DEFAULT) > 0) {
      per_node = r.ints(g.get(), "comm", "ranks_per_node");
      r.same_length(backend.size(), per_node.size(), "/comm/ranks_per_node");
    }
    for (std::size_t i = 0; i < backend.size(); ++i) {
      CommSample c;
      if (per_node[i] < 0 || per_node[i] > ranks[i]) r.fail("/comm/ranks_per_node: row " + std::to_string(i) + " is not in 0..ranks");
      c.ranks_per_node = static_cast<int>(per_node[i]);
      c.backend = backend[i];
      if (!parse_collective(op[i], &c.op)) r.fail("/comm/op: '" + op[i] + "' is not a collective");
      c.ranks = static_cast<int>(ranks[i]);
      c.bytes = static_cast<Bytes>(bytes[i]);
      c.time = t[i];
      p.comm.push_back(c);
    }
  }
  if (H5Lexists(file, "comm_in_step", H5P_DEFAULT) > 0) {
    // Note [Collectives in a step]: later than the rest, absent before.
    Handle g = open_group(r, file, "comm_in_step");
    const char* gn = "comm_in_step";
    const auto backend = r.strings(g.get(), gn, "backend");
    const auto op = r.strings(g.get(), gn, "op");
    const auto ranks = r.ints(g.get(), gn, "ranks");
    const auto bytes = r.ints(g.get(), gn, "bytes");
    const auto lead = r.doubles(g.get(), gn, "lead_s");
    const auto med = r.doubles(g.get(), gn, "median_s");
    const auto mean = r.doubles(g.get(), gn, "mean_s");
    const auto frac = r.doubles(g.get(), gn, "stall_frac");
    const auto stall = r.doubles(g.get(), gn, "stall_s");
    const auto reps = r.ints(g.get(), gn, "reps");
    for (const auto& [n, name] : {std::pair{op.size(), "op"}, {ranks.size(), "ranks"}, {bytes.size(), "bytes"},
                                  {lead.size(), "lead_s"}, {med.size(), "median_s"}, {mean.size(), "mean_s"},
                                  {frac.size(), "stall_frac"}, {stall.size(), "stall_s"}, {reps.size(), "reps"}}) {
      r.same_length(backend.size(), n, std::string("/comm_in_step/") + name);
    }
    // Note [Resuming after a wait]: later still, absent before.
    std::vector<double> resume, wait;
    if (H5Lexists(g.get(), "resume_s", H5P_DEFAULT) > 0 || H5Lexists(g.get(), "wait_s", H5P_DEFAULT) > 0) {
      resume = r.doubles(g.get(), gn, "resume_s");
      wait = r.doubles(g.get(), gn, "wait_s");
      r.same_length(backend.size(), resume.size(), "/comm_in_step/resume_s");
      r.same_length(backend.size(), wait.size(), "/comm_in_step/wait_s");
    }
    for (std::size_t i = 0; i < backend.size(); ++i) {
      const std::string row = "/comm_in_step: row " + std::to_string(i);
      StepCommSample c;
      c.backend = backend[i];
      if (!parse_collective(op[i], &c.op)) r.fail("/comm_in_step/op: '" + op[i] + "' is not a collective");
      if (ranks[i] < 2 || ranks[i] > (1 << 24) || bytes[i] < 0 || reps[i] < 1 || reps[i] > (1 << 30)) {
        r.fail(row + ": ranks, bytes or reps out of range");
      }
      c.ranks = static_cast<int>(ranks[i]);
      c.bytes = static_cast<Bytes>(bytes[i]);
      c.lead_s = lead[i];
      c.median_s = med[i];
      c.mean_s = mean[i];
      c.stall_frac = frac[i];
      c.stall_s = stall[i];
      c.reps = static_cast<int>(reps[i]);
      const auto time = [](double t) { return std::isfinite(t) && t >= 0 && t < 1e6; };
      if (!time(c.lead_s) || !time(c.median_s) || !time(c.mean_s) || !time(c.stall_s) || !(c.stall_frac >= 0 && c.stall_frac <= 1)) {
        r.fail(row + ": a time that is not a number of seconds, or a stall share outside 0..1");
      }
      if (!wait.empty()) {
        c.resume_s = resume[i];
        c.wait_s = wait[i];
        if (!time(c.wait_s) || !std::isfinite(c.resume_s) || std::abs(c.resume_s) >= 1e6) {
          r.fail(row + ": resume_s or wait_s is not a number of seconds (wait_s from 0)");
        }
      }
      p.comm_in_step.push_back(c);
    }
  }
  if (H5Lexists(file, "interference", H5P_DEFAULT) > 0) {
    // Note [Measuring interference]: later than the rest, absent before and off GPUs.
    Handle g = open_group(r, file, "interference");
    const char* gn = "interference";
    const auto victim = r.strings(g.get(), gn, "victim");
    const auto channels = r.ints(g.get(), gn, "channels");
    const auto sms = r.ints(g.get(), gn, "sms");
    const auto proxy = r.doubles(g.get(), gn, "proxy_Bps");
    const auto hbm = r.doubles(g.get(), gn, "hbm_Bps");
    const auto alone = r.doubles(g.get(), gn, "alone_s");
    const auto beside = r.doubles(g.get(), gn, "beside_s");
    const auto reps = r.ints(g.get(), gn, "reps");
    for (const auto& [n, name] : {std::pair{channels.size(), "channels"}, {sms.size(), "sms"}, {proxy.size(), "proxy_Bps"},
                                  {hbm.size(), "hbm_Bps"}, {alone.size(), "alone_s"}, {beside.size(), "beside_s"},
                                  {reps.size(), "reps"}}) {
      r.same_length(victim.size(), n, std::string("/interference/") + name);
    }
    for (std::size_t i = 0; i < victim.size(); ++i) {
      const auto count = [](std::int64_t v) { return static_cast<int>(std::clamp<std::int64_t>(v, -1, std::int64_t{1} << 30)); };
      InterferenceSample x{victim[i], count(channels[i]), count(sms[i]), proxy[i], hbm[i], alone[i], beside[i], count(reps[i])};
      if (const std::string bad = check_interference(x); !bad.empty()) {
        r.fail("/interference: row " + std::to_string(i) + ": " + bad);
      }
      p.interference.push_back(x);
    }
  }
  {
    Handle g = open_group(r, file, "copies");
    const auto dir = r.strings(g.get(), "copies", "direction");
    const auto bytes = r.ints(g.get(), "copies", "bytes");
    const auto reps = r.ints(g.get(), "copies", "reps");
    r.same_length(dir.size(), bytes.size(), "/copies/bytes");
    r.same_length(dir.size(), reps.size(), "/copies/reps");
    const auto t = read_timing(r, g.get(), "copies", "", reps);
    for (std::size_t i = 0; i < dir.size(); ++i) p.copies.push_back({dir[i], static_cast<Bytes>(bytes[i]), t[i]});
  }
  {
    Handle g = open_group(r, file, "memory");
    const auto key = r.strings(g.get(), "memory", "key");
    const auto bytes = r.ints(g.get(), "memory", "bytes");
    r.same_length(key.size(), bytes.size(), "/memory/bytes");
    for (std::size_t i = 0; i < key.size(); ++i) p.memory[key[i]] = static_cast<Bytes>(bytes[i]);
  }
  {
    Handle g = open_group(r, file, "fits");
    std::vector<std::string> names;
    H5Literate(g.get(), H5_INDEX_NAME, H5_ITER_INC, nullptr, collect_link, &names);
    for (const auto& name : names) {
      LinearFit f;
      f.coef = r.doubles(g.get(), "fits", name.c_str());
      Handle ds(H5Dopen2(g.get(), name.c_str(), H5P_DEFAULT), H5Dclose);
      std::stringstream ss(r.string_attribute(ds.get(), "features"));
      for (std::string item; std::getline(ss, item, ';');) f.features.push_back(item);
      if (f.features.size() != f.coef.size()) r.fail("/fits/" + name + ": " + std::to_string(f.coef.size()) + " coefficients for " + std::to_string(f.features.size()) + " features");
      f.rms_rel_error = r.number_attribute(ds.get(), "rms_rel_error");
      f.max_rel_error = r.number_attribute(ds.get(), "max_rel_error");
      f.samples = static_cast<int>(r.number_attribute(ds.get(), "samples"));
      p.fits[name] = f;
    }
  }
  return p;
}

}  // namespace

std::string check_interference(const InterferenceSample& x) {
  if (x.victim != "gemm" && x.victim != "stream") return "victim '" + x.victim + "' is not gemm or stream";
  if (x.sms < 2 || x.sms > 1'000'000 || x.channels < 1 || x.channels >= x.sms) {
    return "channels " + std::to_string(x.channels) + " of " + std::to_string(x.sms) + " SMs: not 1..SMs - 1";
  }
  const auto positive = [](double v, double most) { return std::isfinite(v) && v > 0 && v < most; };
  if (!positive(x.alone_s, 1e4) || !positive(x.beside_s, 1e4)) return "a time that is not a positive number of seconds";
  if (!positive(x.hbm_Bps, 1e16) || !(std::isfinite(x.proxy_Bps) && x.proxy_Bps >= 0 && x.proxy_Bps < 1e16)) {
    return "rates not a positive hbm_Bps and a proxy_Bps from 0 (bytes a second)";
  }
  if (x.reps < 1 || x.reps > (1 << 30)) return "reps not in 1..2^30";
  return "";
}

void save_profile(const Profile& p, const std::string& path) {
  namespace fs = std::filesystem;
  silence_hdf5();
  // Note [What an output path is] (file_io.cpp): HDF5 seeks, so no stream;
  // a symbolic link's target is replaced, the link kept.
  const std::string resolved = regular_output_target(path, "an HDF5 profile");
  const fs::path target(resolved);
  const fs::path dir = target.has_parent_path() ? target.parent_path() : fs::path(".");
  std::error_code ec;
  if (!fs::is_directory(dir, ec)) throw IoError(path + ": cannot write: directory '" + dir.string() + "' does not exist");
  const std::string tmp = (dir / ("." + target.filename().string() + ".tmp" + std::to_string(::getpid()))).string();
  const TempInProgress in_progress(tmp);  // Note [A write cut short] in file_io.cpp
  try {
    {
      Writer w(path);
      // Room for the checksummed header (Note [Profile integrity]).
      Handle fcpl(H5Pcreate(H5P_FILE_CREATE), H5Pclose);
      if (!fcpl.ok() || H5Pset_userblock(fcpl.get(), kHeaderBytes) < 0) throw IoError(path + ": cannot create " + tmp);
      Handle file(H5Fcreate(tmp.c_str(), H5F_ACC_TRUNC, fcpl.get(), H5P_DEFAULT), H5Fclose);
      if (!file.ok()) throw IoError(path + ": cannot write: cannot create " + tmp + " (is the folder writable, the disk not full?)");
      write_all(p, file.get(), w);
      if (H5Fflush(file.get(), H5F_SCOPE_GLOBAL) < 0) throw IoError(path + ": cannot write: writing " + tmp + " failed (is the disk full, or a file size limit set?); " + path + " is as it was");
    }
    // Closed: checksum what libhdf5 wrote, and sync it before the rename.
    seal(tmp, path);
  } catch (...) {
    std::remove(tmp.c_str());
    throw;
  }
  if (std::rename(tmp.c_str(), resolved.c_str()) != 0) {
    std::remove(tmp.c_str());
    throw IoError(path + ": cannot write: " + std::strerror(errno));
  }
  fsync_directory(dir.string());
}

namespace {

/// Opens and reads `path` with libhdf5 (verified, or format 1 in a child).
Profile read_profile_file(const std::string& path, const std::string& integrity) {
  if (H5Fis_hdf5(path.c_str()) <= 0) {
    throw CalibrationError(path + ": not an HDF5 file, or truncated or corrupt; calibrate again with dtsim calibrate");
  }
  Handle file(H5Fopen(path.c_str(), H5F_ACC_RDONLY, H5P_DEFAULT), H5Fclose);
  if (!file.ok()) throw CalibrationError(path + ": cannot open: truncated or corrupt HDF5; calibrate again with dtsim calibrate");
  Profile p = read_all(Reader(path), file.get(), integrity == "none" ? 1 : 2);
  p.integrity = integrity;
  return p;
}

// Note [Format 1 in a child]
// A format-1 profile has no checksum (Note [Profile integrity]), so its
// bytes reach libhdf5 unchecked, and one flipped byte made libhdf5 1.10
// crash (SIGSEGV), allocate 12 GB and spin, or ask for a vector larger
// than any (400 random flips of tests/data/profile-format1.h5: 2 crashes,
// 2 hangs, 1 such throw). So a format-1 file is read in a child process
// with its memory and CPU time bounded, which writes what it read as a
// checksummed format-2 file (what `dtsim profile upgrade` writes); the
// parent reads that, checked. A child that dies, runs out of time or of
// memory is one line naming the file, exit status 2. Flips that leave a
// well-formed file are read as they are: format 1 cannot tell them. The
// child dies of a crash as the kernel delivers it: the handlers a host
// program installed (a test framework's, Python's faulthandler) are reset,
// or they would report the child's crash as their own on the shared output.
constexpr rlim_t kChildCpuSeconds = 30;
constexpr rlim_t kChildMemoryBytes = rlim_t{4} << 30;

Profile read_format1_in_child(const std::string& path) {
  namespace fs = std::filesystem;
  std::string tmp = (fs::temp_directory_path() / "dtsim-format1-XXXXXX").string();
  const int tfd = ::mkstemp(tmp.data());
  if (tfd < 0) throw IoError(std::string("cannot make a temporary file in ") + fs::temp_directory_path().string() + ": " + std::strerror(errno));
  ::close(tfd);
  int pipe_fd[2];
  if (::pipe2(pipe_fd, O_CLOEXEC) != 0) {
    ::unlink(tmp.c_str());
    throw IoError(std::string("cannot read ") + path + ": pipe: " + std::strerror(errno));
  }
  std::fflush(nullptr);
  const pid_t child = ::fork();
  if (child < 0) {
    ::close(pipe_fd[0]);
    ::close(pipe_fd[1]);
    ::unlink(tmp.c_str());
    throw IoError(std::string("cannot read ") + path + ": fork: " + std::strerror(errno));
  }
  if (child == 0) {
    ::close(pipe_fd[0]);
    for (const int sig : {SIGSEGV, SIGBUS, SIGFPE, SIGILL, SIGABRT, SIGXCPU}) ::signal(sig, SIG_DFL);
    const struct rlimit cpu {kChildCpuSeconds, kChildCpuSeconds};
    ::setrlimit(RLIMIT_CPU, &cpu);
// A sanitizer's shadow memory is terabytes of address space (GCC says so
// by __SANITIZE_ADDRESS__, clang by __has_feature).
#if defined(__has_feature)
#if __has_feature(address_sanitizer) || __has_feature(thread_sanitizer) || __has_feature(memory_sanitizer)
#define DTSIM_SANITIZED_SHADOW 1
#endif
#endif
#if !defined(__SANITIZE_ADDRESS__) && !defined(__SANITIZE_THREAD__) && !defined(DTSIM_SANITIZED_SHADOW)
    const struct rlimit mem {kChildMemoryBytes, kChildMemoryBytes};
    ::setrlimit(RLIMIT_AS, &mem);
#endif
    int code = 0;
    std::string why;
    try {
      save_profile(read_profile_file(path, "none"), tmp);
    } catch (const Error& e) {
      why = e.what();
      code = 3;
    } catch (const std::bad_alloc&) {
      code = 4;
    } catch (const std::exception& e) {
      code = 5;
    }
    if (!why.empty()) (void)!::write(pipe_fd[1], why.data(), why.size());
    ::_exit(code);
  }
  ::close(pipe_fd[1]);
  std::string why;
  char buf[512];
  for (ssize_t n; (n = ::read(pipe_fd[0], buf, sizeof buf)) != 0;) {
    if (n < 0) {
      if (errno == EINTR) continue;
      break;
    }
    why.append(buf, static_cast<std::size_t>(n));
  }
  ::close(pipe_fd[0]);
  int st = 0;
  while (::waitpid(child, &st, 0) < 0 && errno == EINTR) {
  }
  struct Remove {
    std::string path;
    ~Remove() { ::unlink(path.c_str()); }
  } remove{tmp};
  const std::string damaged = path + ": a damaged format-1 profile (format 1 has no checksum): ";
  const std::string fix = "; restore it or calibrate again with dtsim calibrate";
  if (WIFSIGNALED(st)) {
    const int sig = WTERMSIG(st);
    if (sig == SIGXCPU || sig == SIGKILL) throw CalibrationError(damaged + "libhdf5 ran for over " + std::to_string(kChildCpuSeconds) + " s reading it" + fix);
    throw CalibrationError(damaged + "libhdf5 crashed reading it (" + strsignal(sig) + ")" + fix);
  }
  const int code = WIFEXITED(st) ? WEXITSTATUS(st) : 5;
  if (code == 3) throw CalibrationError(why.empty() ? damaged + "unreadable" + fix : why);
  if (code == 4) throw CalibrationError(damaged + "libhdf5 asked for over " + std::to_string(kChildMemoryBytes >> 30) + " GiB reading it" + fix);
  if (code != 0) throw CalibrationError(damaged + "libhdf5 failed reading it" + fix);
  Profile p = load_profile(tmp);
  p.integrity = "none";
  p.path = path;
  return p;
}

}  // namespace

Profile load_profile(const std::string& path) {
  silence_hdf5();
  std::error_code ec;
  if (!std::filesystem::is_regular_file(path, ec)) {
    if (std::filesystem::exists(path, ec)) throw CalibrationError(path + ": not a file (a folder, a device or a pipe); give a profile's path");
    throw CalibrationError(path + ": no such profile (make one with dtsim calibrate)");
  }
  const std::string integrity = verify(path);
  // Note [Format 1 in a child]
  if (integrity == "none") return read_format1_in_child(path);
  return read_profile_file(path, integrity);
}

}  // namespace dtsim::sim
