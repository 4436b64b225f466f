// Process groups through c10d: a TCPStore or FileStore rendezvous, Gloo groups on CPU,
// NCCL groups on CUDA (where LibTorch was built with it).
#include <torch/csrc/distributed/c10d/FileStore.hpp>
#include <torch/csrc/distributed/c10d/PrefixStore.hpp>
#include <torch/csrc/distributed/c10d/TCPStore.hpp>
// PyTorch's wheels carry Gloo inside libtorch_cpu but ship no Gloo headers,
// which ProcessGroupGloo.hpp includes: a worker built against them runs
// NCCL groups only (CPU validation uses Debian's LibTorch, which has both).
#if __has_include(<gloo/algorithm.h>) || __has_include(<gloo/rendezvous/store.h>)
#define DTSIM_WORKER_GLOO 1
#include <torch/csrc/distributed/c10d/ProcessGroupGloo.hpp>
#endif
#if defined(DTSIM_WORKER_NCCL)
#include <torch/csrc/distributed/c10d/ProcessGroupNCCL.hpp>
#endif

#include <cstdlib>
#include <string>
#include <thread>

#include "dtsim/platform/process.hpp"
#include "dtsim/sim/error.hpp"
#include "worker.hpp"

namespace dtsim::runtime {

// Note [Busy waits]
// A rank blocked in work->wait() sleeps, and with nothing else to run its
// vCPU goes idle; on this VM a vCPU woken from idle can take a host timer
// tick to run again. Tensor parallelism waits 13 times a step: on a quiet
// gpt2-tiny megatron-tp run the all-reduces took, from the later rank's
// entry, a median 0.45 ms but a mean 1.53 ms, a tenth over 4.8 ms, at the
// same places every step. With each rank polling instead, the step's waits
// went from 24.3 ms to 7.9 ms on a quiet machine (the step from 51.5 to
// 35.9 ms), and from 24.9 and 28.0 ms to 12.1 and 13.0 ms in two pairs of
// runs in a slow spell (probe 1.6-1.75x); bilstm-tiny DDP's from 4.8 ms to
// 1.4 ms. NCCL spins on the GPU and MPI libraries poll by default for the
// same reason.
// So a rank with a core of its own (Note [A rank's own cores]) polls its
// collectives, yielding the core to its Gloo threads between polls, and
// only sleeps on point-to-point messages: c10d's Gloo send and recv works
// only learn they are complete inside wait(), and a pipeline's waits are
// priced from send/recv timed to a sleeping receiver (Note [Waiting
// receiver] in calibrate/src/gloo_bench.cpp). DTSIM_WAIT=block sleeps on
// everything.
void WaitClock::wait(const c10::intrusive_ptr<c10d::Work>& work) {
  const auto t0 = std::chrono::steady_clock::now();
#if defined(DTSIM_WORKER_GLOO)
  if (busy && dynamic_cast<c10d::ProcessGroupGloo::AsyncWork*>(work.get()) != nullptr) {
    while (!work->isCompleted()) std::this_thread::yield();
  }
#endif
  work->wait();
  seconds += std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
}

Comm::Comm(int rank, int world, const Rendezvous& where, bool cuda, double timeout_s)
    : rank_(rank), world_(world), cuda_(cuda), timeout_(static_cast<std::int64_t>(timeout_s * 1000)) {
  if (!where.file.empty()) {
    auto store = c10::make_intrusive<c10d::FileStore>(where.file, world);
    store->setTimeout(timeout_);
    store_ = store;
    return;
  }
  c10d::TCPStoreOptions opts;
  opts.port = static_cast<std::uint16_t>(where.port);
  opts.isServer = rank == 0;
  opts.numWorkers = static_cast<std::size_t>(world);
  opts.waitWorkers = true;
  opts.timeout = timeout_;
  store_ = c10::make_intrusive<c10d::TCPStore>(where.addr, opts);
}

Group Comm::group(const std::string& name, const std::vector<int>& members) {
  Group g;
  g.members = members;
  g.size = static_cast<int>(members.size());
  for (int i = 0; i < g.size; ++i) {
    if (members[i] == rank_) g.rank = i;
  }
  if (g.size == 1) return g;
  auto prefixed = c10::make_intrusive<c10d::PrefixStore>("group/" + name, store_);
#if defined(DTSIM_WORKER_NCCL)
  if (cuda_) {
    auto o = c10d::ProcessGroupNCCL::Options::create();
    o->timeout = timeout_;
    g.pg = c10::make_intrusive<c10d::ProcessGroupNCCL>(prefixed, g.rank, g.size, o);
    return g;
  }
#else
  if (cuda_) throw UnsupportedError("dtsim_worker: this LibTorch has no NCCL process group; build against a CUDA LibTorch");
#endif
#if !defined(DTSIM_WORKER_GLOO)
  throw UnsupportedError("dtsim_worker: built without Gloo's headers (PyTorch's LibTorch ships none), so it runs NCCL groups "
                         "only; validate on CPUs with a build against Debian's LibTorch");
#else
  auto o = c10d::ProcessGroupGloo::Options::create(timeout_);
  // Note [Gloo's event loop]: the device starts its loop thread.
  loops_lowered_ += platform::lower_threads_started_by(lower_loops_, [&] {
    // Loopback for local runs; GLOO_SOCKET_IFNAME picks the interface on a cluster.
    const char* ifname = std::getenv("GLOO_SOCKET_IFNAME");
    const char* master = std::getenv("MASTER_ADDR");
    if (ifname != nullptr && *ifname != 0) {
      o->devices.push_back(c10d::ProcessGroupGloo::createDeviceForInterface(ifname));
    } else if (master == nullptr || std::string(master) == "127.0.0.1" || std::string(master) == "localhost") {
      o->devices.push_back(c10d::ProcessGroupGloo::createDeviceForHostname("127.0.0.1"));
    } else {
      o->devices.push_back(c10d::ProcessGroupGloo::createDefaultDevice());
    }
  });
  o->threads = 2;
  g.pg = c10::make_intrusive<c10d::ProcessGroupGloo>(prefixed, g.rank, g.size, o);
  return g;
#endif
}

void Comm::barrier(const std::string& name) {
  const std::string key = "barrier/" + name;
  store_->add(key, 1);
  const auto deadline = std::chrono::steady_clock::now() + timeout_;
  while (store_->add(key, 0) < world_) {
    if (std::chrono::steady_clock::now() > deadline) throw IoError("barrier '" + name + "': timed out waiting for the other ranks");
    std::this_thread::sleep_for(std::chrono::milliseconds(2));
  }
}

c10::intrusive_ptr<c10d::Work> all_reduce(Group& g, torch::Tensor& t, c10d::ReduceOp op) {
  std::vector<torch::Tensor> v{t};
  c10d::AllreduceOptions options;
  options.reduceOp = op;
  return g.pg->allreduce(v, options);
}

void reduce_scatter(Group& g, const torch::Tensor& in, torch::Tensor& out, WaitClock& clock) {
  if (g.size == 1) {
    out.copy_(in.view_as(out));
    return;
  }
  const std::int64_t chunk = out.numel();
  torch::Tensor send = in.contiguous();
  torch::Tensor recv = torch::empty({g.size * chunk}, in.options());
  std::vector<std::int64_t> splits(g.size, chunk);
  clock.wait(g.pg->alltoall_base(recv, send, splits, splits));
  torch::sum_out(out, recv.view({g.size, chunk}), 0);
}

void all_gather(Group& g, const torch::Tensor& in, torch::Tensor& out, WaitClock& clock) {
  if (g.size == 1) {
    out.copy_(in);
    return;
  }
  const std::int64_t chunk = in.numel();
  std::vector<std::vector<torch::Tensor>> outs(1);
  for (int r = 0; r < g.size; ++r) outs[0].push_back(out.narrow(0, r * chunk, chunk));
  std::vector<torch::Tensor> ins{in.contiguous()};
  clock.wait(g.pg->allgather(outs, ins));
}

torch::Tensor all_to_all(Group& g, const torch::Tensor& in, const std::vector<std::int64_t>& send, const std::vector<std::int64_t>& recv,
                         WaitClock& clock) {
  if (g.size == 1) return in.clone();
  std::vector<std::int64_t> shape = in.sizes().vec(), out_splits = recv, in_splits = send;
  shape[0] = 0;
  for (const auto n : recv) shape[0] += n;
  torch::Tensor out = torch::empty(shape, in.options());
  torch::Tensor src = in.contiguous();
  clock.wait(g.pg->alltoall_base(out, src, out_splits, in_splits));
  return out;
}

}  // namespace dtsim::runtime
