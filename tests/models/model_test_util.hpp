#pragma once
// Helpers the model tests share: a workload shape of one sequence, a
// kernel by name, a file written into a test's temporary directory.
#include <algorithm>
#include <fstream>
#include <string>
#include <vector>

#include "dtsim/sim/model.hpp"
#include "test_util.hpp"

namespace dtsim::test {

/// One sequence of `s` tokens in 2-byte activations.
inline sim::WorkloadShape tokens(std::int64_t s) {
  sim::WorkloadShape w;
  w.micro_batch = 1;
  w.seq_len = s;
  w.act_bytes = 2;
  return w;
}

/// The kernel named `name`, or null.
inline const sim::Kernel* find_kernel(const std::vector<sim::Kernel>& ks, const std::string& name) {
  const auto it = std::find_if(ks.begin(), ks.end(), [&](const sim::Kernel& k) { return k.name == name; });
  return it == ks.end() ? nullptr : &*it;
}

/// `text` written to `name` in `dir`; its path.
inline std::string write_file(const TempDir& dir, const std::string& name, const std::string& text) {
  const std::string path = dir.file(name);
  std::ofstream(path) << text;
  return path;
}

}  // namespace dtsim::test
