// Reading a PyTorch profiler trace (torch.profiler's export_chrome_trace,
// written by Kineto) into a profile's kernel and collective samples: Note
// [Importing measurements] in import_profile.cpp, Note [Reading a profiler
// trace] below.
//
// Note [Reading a profiler trace]
// A trace is Chrome's JSON ({"traceEvents": [...]}, times in us). Complete
// events ("ph": "X") of category cpu_op are ATen ops on a CPU thread (with
// record_shapes=True their "Input Dims" and "Input type"), user_annotation
// marks ("ProfilerStep#N", "Optimizer.step#AdamW.step"), cuda_runtime the
// launches, and kernel the GPU's kernels, each with the "External id" of
// the innermost op that launched it and the "correlation" of its launch.
// Ops nest by time on their thread; a kernel belongs to the nearest op
// around it that dtsim has a kernel kind for:
//   aten::mm, aten::addmm                       gemm (m, n, k from the shapes)
//   aten::bmm, aten::baddbmm                    attention (batched: eager attention's scores
//                                               and context, as calibration times it)
//   aten::native_layer_norm, aten::_fused_rms_norm, aten::_softmax,
//   aten::_log_softmax and their backwards      norm (dtsim's softmax is a norm kernel)
//   element-wise ATen ops, aten::index_select   elementwise (an embedding's gather)
//   inside "Optimizer.step#Adam(W)/SGD.step"    adam / sgd: the whole step, m = parameters,
//                                               n = tensors (from the fused or foreach op's list)
//   ncclDevKernel_* / ncclKernel_*              collectives, sized by "Collective name",
//                                               "In/Out msg nelems", "dtype", "Group size"
//                                               (PyTorch 2.1+, on the kernel or its op)
// An op's kernels are summed (a split-K GEMM, a norm backward's two); runs
// of one kind, precision and shape become one sample (median, min, max,
// mean, runs). Bytes and FLOPs follow the simulator's kernels (models/src/
// layers.cpp): a GEMM 2mnk FLOPs over e(mk + kn + mn) bytes; a norm 5 FLOPs
// and 2e bytes an element, its backward twice both; an element-wise op
// every tensor it reads and writes once. Fused attention (flash, memory-
// efficient, cuDNN) has no fit in a profile (the roofline prices it, Note
// [Fused attention]), and a collective the profile already measured (a
// calibration, nccl-tests) keeps those measurements: inside a training step
// an NCCL kernel's time includes waiting for the slowest rank. Everything
// not used is counted by reason in one summary line.
#include <nlohmann/json.hpp>

#include <algorithm>
#include <cerrno>
#include <cmath>
#include <cstring>
#include <fstream>
#include <map>
#include <optional>
#include <set>
#include <sstream>

#include "dtsim/calibrate/calibrate.hpp"
#include "dtsim/calibrate/import.hpp"
#include "dtsim/sim/cost_profile.hpp"
#include "dtsim/sim/error.hpp"
#include "import_common.hpp"

namespace dtsim::calib {
namespace {

using json = nlohmann::json;

/// A CPU op or annotation on one thread.
struct CpuEvent {
  std::string name;
  double ts = 0, end = 0;  // us
  std::string thread;
  const json* args = nullptr;
  int parent = -1;
  bool annotation = false;
};

/// A kernel on the GPU.
struct GpuEvent {
  std::string name;
  double dur = 0;  // us
  std::int64_t external = -1, correlation = -1;
  const json* args = nullptr;
};

/// One tensor argument: its shape and element type.
struct Tensor {
  std::vector<std::int64_t> dims;
  std::string type;
  double numel() const {
    double n = 1;
    for (auto d : dims) n *= static_cast<double>(d);
    return n;
  }
};

/// ATen's dtype names in "Input type": precision and bytes per element.
bool precision_of(const std::string& type, sim::Precision* p, int* bytes) {
  if (type == "float") return *p = sim::Precision::kFp32, *bytes = 4, true;
  if (type == "c10::Half") return *p = sim::Precision::kFp16, *bytes = 2, true;
  if (type == "c10::BFloat16") return *p = sim::Precision::kBf16, *bytes = 2, true;
  if (type.rfind("c10::Float8", 0) == 0) return *p = sim::Precision::kFp8, *bytes = 1, true;
  return false;
}

/// Element size of any tensor type (integers too), 0 if unknown.
int element_size(const std::string& type) {
  sim::Precision p;
  int b = 0;
  if (precision_of(type, &p, &b)) return b;
  if (type == "double" || type == "long int" || type == "long" || type == "int64_t") return 8;
  if (type == "int" || type == "unsigned int") return 4;
  if (type == "short" || type == "c10::Half") return 2;
  if (type == "bool" || type == "unsigned char" || type == "signed char" || type == "char") return 1;
  return 0;
}

/// Kineto's dtype names in a collective's "dtype": bytes per element, 0 if unknown.
int comm_element_size(const std::string& dtype) {
  static const std::map<std::string, int> sizes{{"Float", 4},  {"BFloat16", 2}, {"Half", 2}, {"Double", 8},
                                                {"Long", 8},   {"Int", 4},      {"Short", 2}, {"Byte", 1},
                                                {"Char", 1},   {"Bool", 1},     {"Float8_e4m3fn", 1}, {"Float8_e5m2", 1}};
  const auto it = sizes.find(dtype);
  return it == sizes.end() ? 0 : it->second;
}

/// An op's tensor arguments (record_shapes): a list of shapes per
/// argument, one entry for a tensor, several for a tensor list, none for a
/// scalar or an argument without shape.
std::vector<std::vector<Tensor>> tensor_args(const json* args) {
  std::vector<std::vector<Tensor>> out;
  if (args == nullptr) return out;
  const auto dims = args->find("Input Dims");
  const auto types = args->find("Input type");
  if (dims == args->end() || !dims->is_array()) return out;
  for (std::size_t i = 0; i < dims->size(); ++i) {
    const json& d = (*dims)[i];
    std::string type;
    if (types != args->end() && types->is_array() && i < types->size() && (*types)[i].is_string()) type = (*types)[i].get<std::string>();
    std::vector<Tensor> arg;
    auto shape = [](const json& a, Tensor* t) {
      if (!a.is_array()) return false;
      for (const auto& x : a) {
        if (!x.is_number_integer()) return false;
        t->dims.push_back(x.get<std::int64_t>());
      }
      return true;
    };
    if (d.is_array() && !d.empty() && d[0].is_array()) {
      // A tensor list: its type is "TensorList" (or the element type).
      for (const auto& one : d) {
        Tensor t;
        if (shape(one, &t) && !t.dims.empty()) arg.push_back(t);
      }
      if (!arg.empty() && element_size(type) == 0) type.clear();
    } else {
      Tensor t;
      if (shape(d, &t) && !t.dims.empty() && element_size(type) > 0) arg.push_back(t);
    }
    for (auto& t : arg) t.type = type;
    out.push_back(arg);
  }
  return out;
}

/// The op's n-th single-tensor argument, or nullptr.
const Tensor* single(const std::vector<std::vector<Tensor>>& args, std::size_t n) {
  std::size_t seen = 0;
  for (const auto& a : args) {
    if (a.size() != 1) continue;
    if (seen++ == n) return &a[0];
  }
  return nullptr;
}

/// What one classified op's kernels measured.
struct Measured {
  sim::KernelSample sample;  // kind, precision, shape, flops, bytes (time filled from the kernels)
  double seconds = 0;
};

enum class Verdict { kKernel, kSkip, kNotMine };

const std::set<std::string>& elementwise_ops() {
  static const std::set<std::string> ops{
      "aten::add",       "aten::add_",      "aten::sub",         "aten::sub_",          "aten::mul",       "aten::mul_",
      "aten::div",       "aten::div_",      "aten::gelu",        "aten::gelu_backward", "aten::silu",      "aten::silu_backward",
      "aten::relu",      "aten::relu_",     "aten::threshold_backward", "aten::tanh",   "aten::tanh_backward", "aten::sigmoid",
      "aten::sigmoid_backward", "aten::native_dropout", "aten::native_dropout_backward", "aten::copy_", "aten::fill_",
      "aten::zero_",     "aten::neg",       "aten::pow",         "aten::rsqrt",         "aten::sqrt",      "aten::exp",
      "aten::clone",     "aten::masked_fill", "aten::masked_fill_", "aten::where",      "aten::addcmul_",  "aten::addcdiv_",
      "aten::lerp_",     "aten::index_select"};
  return ops;
}

const std::set<std::string>& norm_ops() {
  static const std::set<std::string> ops{"aten::native_layer_norm", "aten::native_layer_norm_backward", "aten::_fused_rms_norm",
                                         "aten::_fused_rms_norm_backward", "aten::_softmax", "aten::_softmax_backward_data",
                                         "aten::_log_softmax", "aten::_log_softmax_backward_data"};
  return ops;
}

bool fused_attention(const std::string& name) {
  for (const char* f : {"flash_attention", "efficient_attention", "cudnn_attention", "_flash_attn", "flash_attn"}) {
    if (name.find(f) != std::string::npos) return true;
  }
  return false;
}

/// Classifies op `name` with `args`: a kernel sample, a reason to skip, or not an op of ours (look further out).
Verdict classify(const std::string& name, const json* args, Measured* m, std::string* reason) {
  const bool gemm = name == "aten::mm" || name == "aten::addmm";
  const bool batched = name == "aten::bmm" || name == "aten::baddbmm";
  if (fused_attention(name)) {
    *reason = "fused attention (a profile has no fit for it: the roofline prices it, Note [Fused attention])";
    return Verdict::kSkip;
  }
  if (!gemm && !batched && !norm_ops().count(name) && !elementwise_ops().count(name) && name != "aten::embedding") return Verdict::kNotMine;
  const auto t = tensor_args(args);
  if (t.empty()) {
    *reason = "ops without shapes (profile with record_shapes=True)";
    return Verdict::kSkip;
  }
  auto& s = m->sample;
  s.batch = 1;
  s.k = 1;
  int e = 0;
  if (gemm || batched) {
    const std::size_t first = name == "aten::mm" || name == "aten::bmm" ? 0 : 1;  // addmm / baddbmm: (input, a, b, ...)
    const Tensor* a = single(t, first);
    const Tensor* b = single(t, first + 1);
    const std::size_t rank = batched ? 3 : 2;
    if (a == nullptr || b == nullptr || a->dims.size() != rank || b->dims.size() != rank || a->dims[rank - 1] != b->dims[rank - 2] ||
        (batched && a->dims[0] != b->dims[0])) {
      *reason = "GEMMs whose shapes do not multiply";
      return Verdict::kSkip;
    }
    if (!precision_of(a->type, &s.precision, &e)) {
      *reason = "GEMMs in a precision dtsim does not price (" + a->type + ")";
      return Verdict::kSkip;
    }
    s.kind = batched ? "attention" : "gemm";
    s.batch = batched ? a->dims[0] : 1;
    s.m = a->dims[rank - 2];
    s.k = a->dims[rank - 1];
    s.n = b->dims[rank - 1];
    const double B = static_cast<double>(s.batch), M = static_cast<double>(s.m), N = static_cast<double>(s.n), K = static_cast<double>(s.k);
    s.flops = 2 * B * M * N * K;
    s.bytes = e * B * (M * K + K * N + M * N);
    return Verdict::kKernel;
  }
  const Tensor* x = single(t, 0);
  if (x == nullptr) {
    *reason = "ops without shapes (profile with record_shapes=True)";
    return Verdict::kSkip;
  }
  if (norm_ops().count(name)) {
    if (!precision_of(x->type, &s.precision, &e)) {
      *reason = "norms in a precision dtsim does not price (" + x->type + ")";
      return Verdict::kSkip;
    }
    const bool backward = name.find("backward") != std::string::npos;
    s.kind = "norm";
    s.n = x->dims.back();
    s.m = static_cast<std::int64_t>(x->numel()) / std::max<std::int64_t>(1, s.n);
    const double elems = x->numel();
    s.bytes = (backward ? 2 : 1) * 2.0 * e * elems;
    s.flops = (backward ? 2 : 1) * 5.0 * elems;
    return Verdict::kKernel;
  }
  if (name == "aten::index_select" || name == "aten::embedding") {
    // An embedding's gather: (weight [V, H], [dim,] index [N]) -> [N, H].
    const Tensor* index = single(t, 1);
    if (index == nullptr || x->dims.size() != 2 || !precision_of(x->type, &s.precision, &e)) {
      *reason = "gathers without a weight and index shape";
      return Verdict::kSkip;
    }
    const double out = index->numel() * static_cast<double>(x->dims[1]);
    s.kind = "elementwise";
    s.m = static_cast<std::int64_t>(out);
    s.n = 1;
    s.bytes = 2.0 * e * out + element_size(index->type) * index->numel();
    s.flops = 0;
    return Verdict::kKernel;
  }
  // Element-wise: every tensor read once, the output (the largest input's shape) written once;
  // an in-place copy or fill writes its first argument instead of reading it.
  const bool copy = name == "aten::copy_", fill = name == "aten::fill_" || name == "aten::zero_";
  double bytes = 0, out = 0;
  int out_size = 0;
  bool floating = false;
  for (const auto& arg : t) {
    for (const auto& one : arg) {
      const int size = element_size(one.type);
      bytes += size * one.numel();
      if (one.numel() > out) out = one.numel(), out_size = size;
      sim::Precision p;
      int b = 0;
      if (!floating && precision_of(one.type, &p, &b)) floating = true, s.precision = p;
    }
  }
  if (!floating) {
    *reason = "element-wise ops on integers";
    return Verdict::kSkip;
  }
  s.kind = "elementwise";
  s.m = static_cast<std::int64_t>(out);
  s.n = 1;
  s.bytes = copy ? bytes : fill ? out_size * out : bytes + out_size * out;
  s.flops = copy || fill ? 0 : out;
  return Verdict::kKernel;
}

/// A collective's name in Kineto's "Collective name" as dtsim's op.
bool collective_of(std::string name, sim::CollectiveOp* op) {
  for (char& c : name) c = static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
  auto has = [&](const char* s) { return name.find(s) != std::string::npos; };
  if (has("allreduce") || has("all_reduce")) return *op = sim::CollectiveOp::kAllReduce, true;
  if (has("reduce_scatter") || has("reducescatter")) return *op = sim::CollectiveOp::kReduceScatter, true;
  if (has("allgather") || has("all_gather")) return *op = sim::CollectiveOp::kAllGather, true;
  if (has("alltoall") || has("all_to_all")) return *op = sim::CollectiveOp::kAllToAll, true;
  if (has("broadcast")) return *op = sim::CollectiveOp::kBroadcast, true;
  if (has("send") || has("recv")) return *op = sim::CollectiveOp::kSendRecv, true;
  return false;
}

std::int64_t int_arg(const json* args, const char* key, std::int64_t fallback = -1) {
  if (args == nullptr) return fallback;
  const auto it = args->find(key);
  if (it == args->end()) return fallback;
  if (it->is_number_integer()) return it->get<std::int64_t>();
  if (it->is_number()) return static_cast<std::int64_t>(it->get<double>());
  return fallback;
}

std::string string_arg(const json* args, const char* key) {
  if (args == nullptr) return "";
  const auto it = args->find(key);
  return it != args->end() && it->is_string() ? it->get<std::string>() : "";
}

std::string thread_key(const json& e) {
  return (e.contains("pid") ? e["pid"].dump() : "") + ":" + (e.contains("tid") ? e["tid"].dump() : "");
}

std::string fmt(const char* f, double v) {
  char buf[64];
  std::snprintf(buf, sizeof buf, f, v);
  return buf;
}

/// Timing of repeated runs (seconds).
sim::Timing timing_of(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  const std::size_t n = v.size();
  sim::Timing t;
  t.median_s = n % 2 ? v[n / 2] : 0.5 * (v[n / 2 - 1] + v[n / 2]);
  t.min_s = v.front();
  t.max_s = v.back();
  t.reps = static_cast<int>(n);
  double sum = 0;
  for (double x : v) sum += x;
  t.mean_s = sum / static_cast<double>(n);
  return t;
}

/// Parses the trace: throws ConfigError naming the file with the line and column of a syntax error.
json parse_trace(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  if (!in) throw IoError(path + ": cannot read: " + std::strerror(errno));
  std::ostringstream ss;
  ss << in.rdbuf();
  const std::string text = ss.str();
  if (text.size() >= 2 && static_cast<unsigned char>(text[0]) == 0x1f && static_cast<unsigned char>(text[1]) == 0x8b) {
    throw ConfigError(path + ": gzip-compressed; decompress it first (gunzip -k " + path + ")");
  }
  try {
    return json::parse(text);
  } catch (const json::parse_error& e) {
    // Line and column of the byte where parsing stopped (1-based).
    const std::size_t at = std::min<std::size_t>(e.byte == 0 ? 0 : e.byte - 1, text.size());
    int line = 1, column = 1;
    for (std::size_t i = 0; i < at; ++i) {
      if (text[i] == '\n') {
        ++line;
        column = 1;
      } else {
        ++column;
      }
    }
    std::string why = e.what();
    if (const auto c = why.find("column"); c != std::string::npos) {
      if (const auto colon = why.find(": ", c); colon != std::string::npos) why = why.substr(colon + 2);
    }
    throw ConfigError(path + ":" + std::to_string(line) + ":" + std::to_string(column) + ": not a JSON trace: " + why);
  }
}

}  // namespace

ImportResult import_kineto_trace(const std::string& path, sim::Profile& p, const ImportOptions& o) {
  std::optional<sim::ClusterSpec> cluster;
  if (!o.cluster.empty()) cluster = detail::cluster_of(o.cluster);
  const json doc = parse_trace(path);
  const json* events = nullptr;
  if (doc.is_object() && doc.contains("traceEvents")) events = &doc["traceEvents"];
  if (doc.is_array()) events = &doc;
  if (events == nullptr || !events->is_array()) {
    throw ConfigError(path + ": no \"traceEvents\" array: not a Chrome trace of torch.profiler (prof.export_chrome_trace(path))");
  }
  std::vector<CpuEvent> cpu;
  std::vector<GpuEvent> gpu;
  struct Launch {
    std::int64_t external = -1;
    std::string thread;
    double ts = 0;
  };
  std::map<std::int64_t, Launch> launches;  // by correlation
  std::set<std::string> steps;
  int copies = 0;
  for (std::size_t i = 0; i < events->size(); ++i) {
    const json& e = (*events)[i];
    const auto where = [&](const std::string& what) {
      const std::string name = e.is_object() && e.contains("name") && e["name"].is_string() ? " (\"" + e["name"].get<std::string>() + "\")" : "";
      return ConfigError(path + ": traceEvents[" + std::to_string(i) + "]" + name + ": " + what + "; the trace is damaged");
    };
    if (!e.is_object()) throw where("not an object");
    if (!e.contains("ph") || !e["ph"].is_string()) throw where("no \"ph\" (event type)");
    if (e["ph"] != "X") continue;
    if (!e.contains("name") || !e["name"].is_string()) throw where("a complete event (\"ph\": \"X\") without a \"name\" string");
    for (const char* k : {"ts", "dur"}) {
      if (!e.contains(k) || !e[k].is_number()) throw where(std::string("\"") + k + "\" is missing or not a number (us)");
    }
    const double ts = e["ts"].get<double>(), dur = e["dur"].get<double>();
    if (!(dur >= 0)) throw where("\"dur\" is negative");
    std::string cat = e.contains("cat") && e["cat"].is_string() ? e["cat"].get<std::string>() : "";
    for (char& c : cat) c = static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
    const json* args = e.contains("args") && e["args"].is_object() ? &e["args"] : nullptr;
    const std::string name = e["name"].get<std::string>();
    if (cat == "cpu_op" || cat == "operator" || cat == "user_annotation") {
      cpu.push_back({name, ts, ts + dur, thread_key(e), args, -1, cat == "user_annotation"});
      if (name.rfind("ProfilerStep#", 0) == 0) steps.insert(name);
    } else if (cat == "kernel") {
      gpu.push_back({name, dur, int_arg(args, "External id"), int_arg(args, "correlation"), args});
    } else if (cat == "cuda_runtime" || cat == "runtime" || cat == "cuda_driver") {
      const std::int64_t corr = int_arg(args, "correlation");
      if (corr >= 0) launches[corr] = {int_arg(args, "External id"), thread_key(e), ts};
    } else if (cat == "gpu_memcpy" || cat == "gpu_memset" || cat == "memcpy" || cat == "memset") {
      ++copies;
    }
  }
  // Nest the CPU events of each thread by time (Note [Reading a profiler trace]).
  std::map<std::string, std::vector<int>> by_thread;
  for (int i = 0; i < static_cast<int>(cpu.size()); ++i) by_thread[cpu[i].thread].push_back(i);
  for (auto& [thread, ids] : by_thread) {
    std::sort(ids.begin(), ids.end(), [&](int a, int b) {
      return cpu[a].ts != cpu[b].ts ? cpu[a].ts < cpu[b].ts : cpu[a].end > cpu[b].end;
    });
    std::vector<int> stack;
    for (int id : ids) {
      while (!stack.empty() && cpu[stack.back()].end < cpu[id].end - 1e-3) stack.pop_back();
      cpu[id].parent = stack.empty() ? -1 : stack.back();
      stack.push_back(id);
    }
  }
  std::map<std::int64_t, int> by_external;
  for (int i = 0; i < static_cast<int>(cpu.size()); ++i) {
    const std::int64_t ext = int_arg(cpu[i].args, "External id");
    if (ext >= 0 && !cpu[i].annotation) by_external.emplace(ext, i);
  }
  // The innermost CPU event on `thread` around time ts.
  auto around = [&](const std::string& thread, double ts) {
    const auto it = by_thread.find(thread);
    if (it == by_thread.end()) return -1;
    int best = -1;
    for (int id : it->second) {
      if (cpu[id].ts > ts) break;
      if (cpu[id].end >= ts) best = id;  // later starts are nested deeper
    }
    return best;
  };

  ImportResult r;
  std::map<std::string, int> unused;
  std::set<std::string> unknown_ops;
  std::map<int, Measured> ops;  // classified op -> its kernels' time
  struct Step {
    std::string kind;
    bool decay = false;  ///< torch.optim.AdamW
    double seconds = 0;
  };
  std::map<int, Step> optimizer;  // by annotation
  struct Comm {
    sim::CollectiveOp op;
    int ranks = 0, per_node = 0;
    Bytes bytes = 0;
    double seconds = 0;
  };
  std::map<int, Comm> comm_ops;  // by op (or -1 - kernel index without one)
  double kernel_seconds = 0;
  for (std::size_t gi = 0; gi < gpu.size(); ++gi) {
    const GpuEvent& k = gpu[gi];
    kernel_seconds += k.dur * 1e-6;
    int op = -1;
    if (const auto it = by_external.find(k.external); k.external > 0 && it != by_external.end()) op = it->second;
    if (op < 0 && k.correlation >= 0) {
      if (const auto l = launches.find(k.correlation); l != launches.end()) {
        if (const auto it = by_external.find(l->second.external); l->second.external > 0 && it != by_external.end()) {
          op = it->second;
        } else {
          op = around(l->second.thread, l->second.ts);
        }
      }
    }
    const bool nccl = k.name.rfind("nccl", 0) == 0;
    if (nccl) {
      // Sizes on the kernel (recent PyTorch) or on the op that launched it.
      const json* meta = k.args != nullptr && k.args->contains("Collective name") ? k.args : nullptr;
      for (int a = op; meta == nullptr && a >= 0; a = cpu[a].parent) {
        if (cpu[a].args != nullptr && cpu[a].args->contains("Collective name")) meta = cpu[a].args;
      }
      if (meta == nullptr) {
        ++unused["NCCL kernels without message sizes (PyTorch 2.1+ records them)"];
        continue;
      }
      Comm c;
      const std::string coll = string_arg(meta, "Collective name");
      if (!collective_of(coll, &c.op)) {
        ++unused["collectives dtsim does not price (" + coll + ")"];
        continue;
      }
      const int size = comm_element_size(string_arg(meta, "dtype"));
      const std::int64_t in = int_arg(meta, "In msg nelems"), out = int_arg(meta, "Out msg nelems");
      c.ranks = static_cast<int>(int_arg(meta, "Group size"));
      if (size == 0 || in < 0 || c.ranks < 1) {
        ++unused["collectives without dtype, message size or group size"];
        continue;
      }
      // nccl-tests' size (Note [Reading nccl-tests]): all_gather's output, every other op's input.
      c.bytes = static_cast<Bytes>(size) * (c.op == sim::CollectiveOp::kAllGather && out > 0 ? out : in);
      if (c.op == sim::CollectiveOp::kSendRecv) c.ranks = 2;
      if (c.ranks < 2 || c.bytes <= 0) {
        ++unused["collectives of one rank or no bytes"];
        continue;
      }
      const int per_node = cluster ? cluster->gpus_per_node : 8;
      if (c.ranks > per_node) {
        if (!cluster) {
          ++unused["collectives over more than 8 ranks: ranks per node unknown (give --cluster)"];
          continue;
        }
        c.per_node = per_node;
      }
      const int key = op >= 0 ? op : -1 - static_cast<int>(gi);
      auto& slot = comm_ops.try_emplace(key, c).first->second;
      slot.seconds += k.dur * 1e-6;
      continue;
    }
    if (op < 0) {
      ++unused["kernels without a launching CPU op (no External id or correlation)"];
      continue;
    }
    // The optimizer's step: every kernel inside its annotation.
    int step = -1;
    for (int a = op; a >= 0; a = cpu[a].parent) {
      if (cpu[a].name.rfind("Optimizer.step#", 0) == 0) step = a;
    }
    if (step >= 0) {
      const std::string& n = cpu[step].name;
      const std::string kind = n.find("#AdamW.") != std::string::npos || n.find("#Adam.") != std::string::npos ? "adam"
                               : n.find("#SGD.") != std::string::npos                                        ? "sgd"
                                                                                                                : "";
      if (kind.empty()) {
        ++unused["optimizer steps of other optimizers than Adam, AdamW, SGD"];
        continue;
      }
      auto& s = optimizer[step];
      s.kind = kind;
      s.decay = n.find("#AdamW.") != std::string::npos;
      s.seconds += k.dur * 1e-6;
      continue;
    }
    Verdict v = Verdict::kNotMine;
    std::string reason;
    int owner = -1;
    Measured m;
    for (int a = op; a >= 0 && v == Verdict::kNotMine; a = cpu[a].parent) {
      v = classify(cpu[a].name, cpu[a].args, &m, &reason);
      owner = a;
    }
    if (v == Verdict::kSkip) {
      ++unused[reason];
      continue;
    }
    if (v == Verdict::kNotMine) {
      unknown_ops.insert(cpu[op].name);
      ++unused[""];  // named below
      continue;
    }
    auto& slot = ops.try_emplace(owner, m).first->second;
    slot.seconds += k.dur * 1e-6;
  }
  // Optimizer steps: parameters and tensors from the first op under the
  // annotation with a tensor list (fused or foreach Adam's params).
  std::vector<std::pair<sim::KernelSample, double>> measured;
  for (const auto& [step, s] : optimizer) {
    double params = 0;
    std::int64_t tensors = 0;
    sim::Precision prec = sim::Precision::kFp32;
    for (int i = 0; i < static_cast<int>(cpu.size()) && tensors == 0; ++i) {
      if (cpu[i].thread != cpu[step].thread || cpu[i].ts < cpu[step].ts || cpu[i].end > cpu[step].end || cpu[i].args == nullptr) continue;
      const auto dims = cpu[i].args->find("Input Dims");
      if (dims == cpu[i].args->end() || !dims->is_array()) continue;
      for (std::size_t a = 0; a < dims->size(); ++a) {
        const json& list = (*dims)[a];
        if (!list.is_array() || list.empty() || !list[0].is_array()) continue;  // the first tensor list: the parameters
        const auto args = tensor_args(cpu[i].args);
        if (a >= args.size() || args[a].empty()) break;
        tensors = static_cast<std::int64_t>(args[a].size());
        for (const auto& t : args[a]) params += t.numel();
        int e = 0;
        if (!precision_of(args[a][0].type, &prec, &e)) prec = sim::Precision::kFp32;  // "TensorList": torch.optim's fp32 parameters
        break;
      }
    }
    if (tensors == 0) {
      ++unused["optimizer steps without their parameters' shapes"];
      continue;
    }
    sim::KernelSample k;
    k.kind = s.kind;
    k.precision = prec;
    k.m = static_cast<std::int64_t>(params);
    k.n = tensors;
    k.k = 1;  // as calibration records a step (torch_bench.cpp)
    k.batch = 1;
    // What it stepped, by its bytes a parameter (Note [Adam's decay] in
    // sim/src/cost/cost_profile.cpp): AdamW's decay reads and writes the
    // weight, 36 B against Adam's 28; SGD's stays 0 (plain, Note [SGD momentum]).
    if (s.kind == "adam") k.bytes = params * (s.decay ? 36 : 28);
    measured.push_back({k, s.seconds});
  }
  for (const auto& [op, m] : ops) measured.push_back({m.sample, m.seconds});
  // Runs of one kind, precision, shape and work: one sample (a norm's
  // forward and backward have one shape, not the same bytes).
  using Key = std::tuple<std::string, sim::Precision, std::int64_t, std::int64_t, std::int64_t, std::int64_t, double, double>;
  std::map<Key, std::pair<sim::KernelSample, std::vector<double>>> samples;
  for (const auto& [k, s] : measured) {
    if (s <= 0) {
      ++unused["ops whose kernels took no time (dur 0)"];
      continue;
    }
    auto& slot = samples[{k.kind, k.precision, k.m, k.n, k.k, k.batch, k.flops, k.bytes}];
    if (slot.second.empty()) slot.first = k;
    slot.second.push_back(s);
  }
  // The device it ran on, checked against the profile's before anything is added.
  std::string device;
  if (doc.is_object() && doc.contains("deviceProperties") && doc["deviceProperties"].is_array() && !doc["deviceProperties"].empty() &&
      doc["deviceProperties"][0].is_object() && doc["deviceProperties"][0].contains("name") && doc["deviceProperties"][0]["name"].is_string()) {
    device = doc["deviceProperties"][0]["name"].get<std::string>();
  }
  if (!samples.empty() || !comm_ops.empty()) detail::adopt_device(p, device, path);
  std::set<std::string> names;
  std::map<std::string, std::pair<int, int>> per_fit;  // fit -> shapes, runs
  std::map<std::string, std::pair<double, std::string>> best;  // fit -> achieved rate, its shape
  for (auto& [key, v] : samples) {
    v.first.time = timing_of(v.second);
    p.kernels.push_back(v.first);
    ++r.samples;
    const std::string name = sim::kernel_fit_name(v.first.kind, v.first.precision);
    names.insert(name);
    per_fit[name].first += 1;
    per_fit[name].second += static_cast<int>(v.second.size());
    const auto& k = v.first;
    const double rate = k.flops > 0 && (k.kind == "gemm" || k.kind == "attention") ? k.flops / k.time.median_s : k.bytes / k.time.median_s;
    if (rate > best[name].first) {
      const bool matmul = k.kind == "gemm" || k.kind == "attention";
      best[name] = {rate, k.kind == "elementwise" ? std::to_string(k.m) + " elements"
                                                  : std::to_string(k.m) + "x" + std::to_string(k.n) + (matmul ? "x" + std::to_string(k.k) : "") +
                                                        (k.batch > 1 ? " batch " + std::to_string(k.batch) : "")};
    }
  }
  // Collectives: runs of one op, size and group, unless the profile measured that op and group already.
  std::map<std::tuple<sim::CollectiveOp, int, int, Bytes>, std::vector<double>> comm_runs;
  for (const auto& [key, c] : comm_ops) comm_runs[{c.op, c.ranks, c.per_node, c.bytes}].push_back(c.seconds);
  std::set<std::string> comm_names;
  std::map<std::string, int> comm_sizes;
  for (const auto& [key, runs] : comm_runs) {
    const auto [op, ranks, per_node, bytes] = key;
    const bool measured_before = std::any_of(p.comm.begin(), p.comm.end(), [&, op = op, ranks = ranks, per_node = per_node](const sim::CommSample& c) {
      const int pn = c.ranks_per_node > 0 && c.ranks_per_node < c.ranks ? c.ranks_per_node : 0;
      return c.op == op && c.ranks == ranks && pn == per_node && !comm_names.count(sim::comm_fit_name(c.backend, c.op, c.ranks, pn));
    });
    if (measured_before) {
      unused["collectives the profile measured already (its samples kept)"] += static_cast<int>(runs.size());
      continue;
    }
    sim::CommSample c;
    c.backend = "nccl";
    c.op = op;
    c.ranks = ranks;
    c.bytes = bytes;
    c.time = timing_of(runs);
    c.ranks_per_node = per_node;
    p.comm.push_back(c);
    ++r.samples;
    const std::string name = sim::comm_fit_name("nccl", op, ranks, per_node);
    comm_names.insert(name);
    ++comm_sizes[name];
  }
  // Refit what changed.
  names.insert(comm_names.begin(), comm_names.end());
  detail::refit(p, names, /*drop_stale=*/false, r);
  // The summary.
  r.lines.push_back(detail::base_name(path) + ": " + std::to_string(steps.size()) + " profiler steps, " + std::to_string(gpu.size()) +
                    " GPU kernels (" + detail::human_seconds(kernel_seconds) + ") on " + (device.empty() ? std::string("an unnamed device") : device) +
                    ", " + std::to_string(r.samples) + " samples added");
  for (const auto& [name, n] : per_fit) {
    std::string line = name + ": " + std::to_string(n.first) + " shapes (" + std::to_string(n.second) + " runs)";
    const auto& b = best[name];
    if (b.first > 0) {
      line += name.find("gemm") != std::string::npos || name.find("attention") != std::string::npos
                  ? ", best " + fmt("%.3g", b.first / 1e12) + " TFLOP/s (" + b.second + ")"
                  : ", best " + fmt("%.3g", b.first / 1e9) + " GB/s (" + b.second + ")";
    }
    line += p.fits.count(name) && std::find(r.fits.begin(), r.fits.end(), name) != r.fits.end()
                ? ", fitted (rms " + fmt("%.1f", 100 * p.fits[name].rms_rel_error) + "%)"
                : ", too few shapes to fit: samples kept";
    r.lines.push_back(line);
  }
  for (const auto& [name, n] : comm_sizes) {
    r.lines.push_back(name + ": " + std::to_string(n) + " sizes" +
                      (std::find(r.fits.begin(), r.fits.end(), name) != r.fits.end() ? ", fitted (times include waiting for the slowest rank)"
                                                                                        : ", fewer than the 3 a fit needs: samples kept"));
  }
  if (unused.count("")) {
    std::string ops_named;
    int shown = 0;
    for (const auto& n : unknown_ops) {
      if (shown++ == 4) {
        ops_named += ", ...";
        break;
      }
      ops_named += (ops_named.empty() ? "" : ", ") + n;
    }
    unused["ops dtsim has no kernel kind for (" + ops_named + ")"] = unused[""];
    unused.erase("");
  }
  if (copies > 0) unused["memory copies and sets (not fitted from traces)"] = copies;
  r.unused = unused;
  std::string line = "not used:";
  int total = 0;
  for (const auto& [why, n] : unused) {
    line += (total == 0 ? " " : "; ") + std::to_string(n) + " " + why;
    total += n;
  }
  r.lines.push_back(total == 0 ? "not used: nothing" : line);
  if (r.samples > 0) {
    detail::append_info(p, "import.trace.files", detail::base_name(path));
    p.info["import.trace.date"] = detail::now_iso();
    p.info["import.trace.source"] = "PyTorch profiler (Kineto) Chrome trace, imported by dtsim profile import-trace";
  }
  return r;
}

std::string import_trace_command(const std::string& trace, const ImportOptions& o) {
  return detail::import_command(o, "configs/profiles/my-cluster.h5", [&](sim::Profile& p) {
    ImportResult r = import_kineto_trace(trace, p, o);
    if (r.samples == 0) throw ConfigError(trace + ": nothing in it dtsim could use (" + r.lines.back() + "); nothing was written");
    return r;
  });
}

}  // namespace dtsim::calib
