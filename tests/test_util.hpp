#pragma once
// Helpers shared by the test binaries.

#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <filesystem>
#include <fstream>
#include <functional>
#include <sstream>
#include <string>
#include <vector>

#include "dtsim/sim/error.hpp"
#include "dtsim/sim/model.hpp"
#include "dtsim/sim/task_graph.hpp"

namespace dtsim::test {

/// A GEMM of (m, k) x (k, n) in 2-byte elements, as models/ describes one.
inline sim::Kernel gemm_kernel(std::int64_t m, std::int64_t n, std::int64_t k, sim::KernelKind kind = sim::KernelKind::kGemm) {
  sim::Kernel g;
  g.kind = kind;
  g.m = m;
  g.n = n;
  g.k = k;
  g.flops = 2.0 * static_cast<double>(m) * static_cast<double>(n) * static_cast<double>(k);
  g.bytes = 2 * (m * k + k * n + m * n);
  return g;
}

/// The task of `name` in a kept graph, or -1.
inline sim::TaskId task_named(const sim::TaskGraph& g, const std::string& name) {
  for (std::size_t i = 0; i < g.tasks.size(); ++i) {
    if (g.tasks[i].name == name) return static_cast<sim::TaskId>(i);
  }
  return -1;
}

/// Whether task `t` of `g` waits for `dep` directly.
inline bool waits_for(const sim::TaskGraph& g, sim::TaskId t, sim::TaskId dep) {
  const auto& deps = g.tasks[static_cast<std::size_t>(t)].deps;
  return std::find(deps.begin(), deps.end(), dep) != deps.end();
}

/// The message of the dtsim::Error `f` throws, or "(no error)".
inline std::string error_of(const std::function<void()>& f) {
  try {
    f();
  } catch (const Error& e) {
    return e.what();
  }
  return "(no error)";
}

/// The whole content of a file ("" if it cannot be read).
inline std::string slurp(const std::filesystem::path& p) {
  std::ifstream in(p);
  std::ostringstream ss;
  ss << in.rdbuf();
  return ss.str();
}

/// A fresh directory under the system temp dir, removed at the end.
struct TempDir {
  std::filesystem::path path;
  explicit TempDir(const std::string& name) {
    static std::atomic<int> counter{0};
    path = std::filesystem::temp_directory_path() /
           ("dtsim-test-" + name + "-" + std::to_string(::getpid()) + "-" + std::to_string(counter++));
    std::filesystem::remove_all(path);
    std::filesystem::create_directories(path);
  }
  ~TempDir() {
    std::error_code ec;
    std::filesystem::remove_all(path, ec);
  }
  TempDir(const TempDir&) = delete;
  TempDir& operator=(const TempDir&) = delete;
  std::string str() const { return path.string(); }
  std::string file(const std::string& name) const { return (path / name).string(); }
  /// The names of the entries in the directory, sorted.
  std::vector<std::string> entries() const {
    std::vector<std::string> out;
    for (const auto& e : std::filesystem::directory_iterator(path)) out.push_back(e.path().filename().string());
    std::sort(out.begin(), out.end());
    return out;
  }
};

}  // namespace dtsim::test
