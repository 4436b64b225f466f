// DeepSpeed ZeRO-3's coordinator over one micro-step (Note [ZeRO-3 modules]).
#include "lowering/zero3_coordinator.hpp"

#include <algorithm>
#include <deque>
#include <limits>

#include "dtsim/sim/error.hpp"

namespace dtsim::sim::detail {

std::vector<ParamModule> modules_of(const Layer& layer) {
  std::vector<ParamModule> out = layer.modules;
  if (out.empty()) {
    ParamModule one;
    const std::int64_t all = layer.params + layer.borrowed_params;
    if (all > 0) one.tensors.push_back(all);
    out.push_back(one);
  }
  // Frozen weights the modules do not describe: one frozen module first,
  // a tied weight no module names as a tensor of its own (as the layer's
  // one module held it before it was frozen).
  std::int64_t frozen = 0;
  bool tied = false;
  for (const ParamModule& m : out) {
    tied = tied || !m.tied.empty();
    if (m.frozen && m.tied.empty()) {
      for (std::int64_t t : m.tensors) frozen += t;
    }
  }
  ParamModule base;
  base.frozen = true;
  if (const std::int64_t rest = layer.frozen_params - layer.frozen_tied - frozen; rest > 0) base.tensors.push_back(rest);
  if (!tied && layer.frozen_tied > 0) base.tensors.push_back(layer.frozen_tied);
  if (!base.tensors.empty()) out.insert(out.begin(), base);
  return out;
}

std::int64_t persistent_elements(const std::vector<Layer>& layers, std::int64_t threshold) {
  std::int64_t n = 0;
  for (const Layer& l : layers) {
    for (const ParamModule& m : modules_of(l)) {
      if (!m.tied.empty() || m.frozen) continue;
      for (std::int64_t t : m.tensors) {
        if (t <= threshold) n += t;
      }
    }
  }
  return n;
}

std::vector<Zero3Step> coordinate_zero3(const std::vector<std::vector<int>>& trace, const std::vector<std::int64_t>& numel,
                                        const std::vector<bool>& persist, const Zero3Knobs& knobs) {
  DTSIM_ASSERT(numel.size() == persist.size(), "coordinate_zero3: numel and persist differ in size");
  const std::size_t n = numel.size();
  // The recorded trace as the prefetcher walks it: every step's parameters
  // in id order (record_parameters sorts them by ds_id), persistent ones too.
  struct Use {
    int param;
    std::int64_t step;
  };
  std::deque<Use> queue;
  std::vector<std::vector<int>> sorted(trace.size());
  for (std::size_t t = 0; t < trace.size(); ++t) {
    sorted[t] = trace[t];
    std::sort(sorted[t].begin(), sorted[t].end());
    sorted[t].erase(std::unique(sorted[t].begin(), sorted[t].end()), sorted[t].end());
    for (int p : sorted[t]) {
      DTSIM_ASSERT(p >= 0 && static_cast<std::size_t>(p) < n, "coordinate_zero3: a parameter id out of range");
      queue.push_back({p, static_cast<std::int64_t>(t)});
    }
  }
  std::vector<char> gathered(n, 0);
  for (std::size_t p = 0; p < n; ++p) gathered[p] = persist[p] ? 1 : 0;
  // reset_step: __most_recent_step_id_param_fetched_for starts far below 0.
  std::vector<std::int64_t> noted(n, std::numeric_limits<std::int64_t>::min() / 2);
  std::int64_t available = 0;  // __n_available_params: elements gathered, persistent ones not counted
  std::vector<Zero3Step> out(trace.size());
  for (std::size_t t = 0; t < trace.size(); ++t) {
    Zero3Step& s = out[t];
    const std::int64_t step = static_cast<std::int64_t>(t);
    // Fetch what is not gathered (__all_gather_params), then pop the
    // module's own uses from the queue where the prefetcher has not.
    std::size_t own = 0;
    for (int p : sorted[t]) {
      if (!gathered[static_cast<std::size_t>(p)]) {
        gathered[static_cast<std::size_t>(p)] = 1;
        available += numel[static_cast<std::size_t>(p)];
        s.fetch.push_back(p);
      }
      if (noted[static_cast<std::size_t>(p)] < step) ++own;
    }
    for (std::size_t k = 0; k < own && !queue.empty(); ++k) {
      noted[static_cast<std::size_t>(queue.front().param)] = queue.front().step;
      queue.pop_front();
    }
    // Prefetch: check, then add, so at least one parameter goes.
    if (knobs.prefetch_bucket > 0) {
      const std::int64_t room = std::min(knobs.max_live - available, knobs.prefetch_bucket);
      std::int64_t prefetching = 0;
      while (!queue.empty() && prefetching < room) {
        const Use u = queue.front();
        queue.pop_front();
        const auto p = static_cast<std::size_t>(u.param);
        noted[p] = std::max(noted[p], u.step);
        if (!gathered[p]) {
          gathered[p] = 1;
          s.prefetch.push_back(u.param);
          prefetching += numel[p];
        }
      }
      for (int p : s.prefetch) available += numel[static_cast<std::size_t>(p)];
    }
    s.live = available;
    // Release (__params_to_release): not a parameter whose later use the
    // prefetcher popped, nor one used again within max_reuse elements.
    std::vector<int> release;
    for (int p : sorted[t]) {
      if (!persist[static_cast<std::size_t>(p)] && noted[static_cast<std::size_t>(p)] <= step + 1) release.push_back(p);
    }
    std::int64_t traversed = 0;
    for (std::size_t u = t + 1; u < trace.size() && traversed < knobs.max_reuse && !release.empty(); ++u) {
      for (int p : sorted[u]) {
        release.erase(std::remove(release.begin(), release.end(), p), release.end());
        traversed += numel[static_cast<std::size_t>(p)];
      }
    }
    if (t + 1 == trace.size()) {
      // The micro-step ends with nothing but the persistent parameters gathered.
      release.clear();
      for (std::size_t p = 0; p < n; ++p) {
        if (gathered[p] && !persist[p]) release.push_back(static_cast<int>(p));
      }
    }
    for (int p : release) {
      if (!gathered[static_cast<std::size_t>(p)]) continue;
      gathered[static_cast<std::size_t>(p)] = 0;
      available -= numel[static_cast<std::size_t>(p)];
      s.release.push_back(p);
    }
  }
  return out;
}

}  // namespace dtsim::sim::detail
