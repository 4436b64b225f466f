#pragma once
// Internal to dtsim_worker (LibTorch): the counting allocator, the process
// groups, and the trainer that runs a plan on one rank.

#include <torch/torch.h>
#include <torch/version.h>
#include <torch/csrc/distributed/c10d/ProcessGroup.hpp>
#include <torch/csrc/distributed/c10d/Store.hpp>
#if TORCH_VERSION_MAJOR >= 2
#include <torch/csrc/distributed/c10d/Backend.hpp>
#endif

#include <chrono>
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "dtsim/runtime/validate.hpp"

namespace dtsim::runtime {

// ---- memory (memory.cpp) --------------------------------------------------------

/// Installs the counting CPU allocator (c10::SetCPUAllocator): every CPU
/// tensor byte is counted as device memory, or as host memory inside a
/// HostScope (offloaded optimizer state). `limit` > 0 makes an allocation
/// beyond it fail as out of memory; `what` says where the limit came from
/// in that message (empty: --mem-limit).
void install_counting_allocator(std::int64_t limit, const std::string& what = "");

/// The counting allocator's limit (0: none).
std::int64_t cpu_memory_limit();
/// Bytes allocated now / at the peak since the last reset, device or host.
std::int64_t cpu_current_bytes(bool host = false);
std::int64_t cpu_peak_bytes(bool host = false);
void reset_cpu_peaks();
/// Set when the counting allocator refused an allocation (its message).
std::string cpu_oom_message();

#if defined(DTSIM_WORKER_CUDA)
/// The CUDA caching allocator's peak of allocated bytes on the current
/// device, and of the bytes it reserved from the driver (allocated, cached
/// free blocks and rounding).
std::int64_t cuda_peak();
std::int64_t cuda_reserved_peak();
std::int64_t cuda_current();
void reset_cuda_peak();
void cuda_synchronize();
/// Marks on the current CUDA stream (events), for times on the device's clock.
class GpuMarks {
 public:
  GpuMarks() = default;
  ~GpuMarks();
  GpuMarks(const GpuMarks&) = delete;
  GpuMarks& operator=(const GpuMarks&) = delete;
  /// Records a mark on the current stream now; returns its index.
  int mark();
  /// Seconds from mark a to mark b, once the device has passed b.
  double seconds(int a, int b);
  /// Forgets the marks (their events are kept for reuse).
  void clear() { used_ = 0; }

 private:
  std::vector<void*> events_;  // cudaEvent_t
  int used_ = 0;
};
/// Caps the caching allocator at `bytes` of the current device (0: no cap).
void cuda_limit(std::int64_t bytes);
#endif

/// While alive, CPU allocations on this thread count as host memory.
class HostScope {
 public:
  HostScope();
  ~HostScope();
  HostScope(const HostScope&) = delete;
  HostScope& operator=(const HostScope&) = delete;

 private:
  bool previous_;
};

// ---- communication (comm.cpp) ---------------------------------------------------

/// What runs one group's collectives: since LibTorch 2.0 ProcessGroupGloo
/// and ProcessGroupNCCL are c10d::Backends (a ProcessGroup dispatches to
/// them by device); in 1.13 they are ProcessGroups. Both offer the same
/// collective calls.
#if TORCH_VERSION_MAJOR >= 2
using Backend = c10d::Backend;
#else
using Backend = c10d::ProcessGroup;
#endif

/// A c10d process group over some ranks, with this rank's place in it.
struct Group {
  c10::intrusive_ptr<Backend> pg;             ///< null when size == 1
  int rank = 0;                               ///< this rank's index in the group
  int size = 1;
  std::vector<int> members;                   ///< global ranks, by group rank
};

/// Accumulates the time a rank spends blocked on communication.
struct WaitClock {
  double seconds = 0;
  bool busy = false;  ///< Note [Busy waits] (comm.cpp): poll collectives instead of sleeping
  /// Waits for `work`, adding the time blocked.
  void wait(const c10::intrusive_ptr<c10d::Work>& work);
};

/// The job's rendezvous and groups. Gloo on CPU, NCCL on CUDA.
class Comm {
 public:
  /// Where the ranks meet (Note [Rendezvous] in worker_main.cpp): rank 0
  /// serves a TCPStore at addr:port, or, with `file` set, every rank opens a
  /// c10d FileStore there.
  struct Rendezvous {
    std::string file;
    std::string addr = "127.0.0.1";
    int port = 29500;
  };
  /// Connects rank `rank` of `world` at `where`.
  Comm(int rank, int world, const Rendezvous& where, bool cuda, double timeout_s);
  int rank() const { return rank_; }
  int world() const { return world_; }
  c10d::Store& store() { return *store_; }
  /// A group of the given global ranks (this rank among them); every rank of
  /// the job must call this with the same `name` for the groups it is in.
  Group group(const std::string& name, const std::vector<int>& members);
  /// Blocks until every rank arrives (through the store).
  void barrier(const std::string& name);
  /// Note [Gloo's event loop] (platform/src/process.cpp): the Gloo groups
  /// made from now on run their event loops at the lowest priority.
  void lower_event_loops(bool on) { lower_loops_ = on; }
  /// How many event loops this Comm's groups lowered so far.
  int loops_lowered() const { return loops_lowered_; }

 private:
  int rank_, world_;
  bool cuda_;
  bool lower_loops_ = false;
  int loops_lowered_ = 0;
  std::chrono::milliseconds timeout_;
  c10::intrusive_ptr<c10d::Store> store_;
};

/// All-reduce of `t` in place (async): the sum, or `op`.
c10::intrusive_ptr<c10d::Work> all_reduce(Group& g, torch::Tensor& t, c10d::ReduceOp op = c10d::ReduceOp::SUM);
/// Reduce-scatter of `in` (numel = size * chunk) into `out` (chunk): out =
/// sum over ranks of their in[rank*chunk, (rank+1)*chunk). Gloo in LibTorch
/// 1.13 has no reduce_scatter, so this is an all-to-all (the same bytes on
/// the wire as a ring reduce-scatter, (n-1)/n of the buffer) and a local sum.
void reduce_scatter(Group& g, const torch::Tensor& in, torch::Tensor& out, WaitClock& clock);
/// All-gather of equal chunks: `out` (numel = size * in.numel()) gets every
/// rank's `in` in rank order.
void all_gather(Group& g, const torch::Tensor& in, torch::Tensor& out, WaitClock& clock);

/// All-to-all of rows: `in`'s rows in group-rank order, send[r] of them to
/// rank r; returns the recv[r] rows each rank r sent here, in rank order
/// (c10d alltoall_base with split sizes; every rank's send[me] must equal
/// my recv[that rank]).
torch::Tensor all_to_all(Group& g, const torch::Tensor& in, const std::vector<std::int64_t>& send, const std::vector<std::int64_t>& recv,
                         WaitClock& clock);

// ---- the trainer (trainer.cpp) --------------------------------------------------

/// One Chrome trace event of the measured timeline.
struct TraceEvent {
  std::string name, cat;
  double start_us = 0, dur_us = 0;
  int tid = 0;  ///< 0 compute, 1 communication wait
  /// The rank's main thread's CPU time within the span, in us (Note [A
  /// span's CPU time] in trainer.cpp); -1 where its start was not marked.
  double cpu_us = -1;
};

/// What the trainer needs to know about the job.
struct TrainerConfig {
  ValidateOptions options;
  RunSetup setup;
  int rank = 0, world = 1;
  torch::Device device = torch::kCPU;
  std::string run_dir;  ///< heartbeats ("" in join mode without one)
  bool busy_wait = false;  ///< Note [Busy waits] (comm.cpp)
};

/// Runs warm-up and measured steps of the plan on this rank and returns its
/// measurements; `trace` receives the measured steps' events when non-null.
RankMeasurement train(const TrainerConfig& config, Comm& comm, std::vector<TraceEvent>* trace);

}  // namespace dtsim::runtime
