#include <catch2/catch.hpp>

#include "dtsim/sim/error.hpp"
#include "dtsim/sim/executor.hpp"

using namespace dtsim;
using namespace dtsim::sim;

namespace {

constexpr TimeNs kUs = kNsPerUs;

TaskGraph one_rank(int streams = 2) {
  TaskGraph g;
  SimRank r;
  for (int s = 0; s < streams; ++s) r.streams.push_back("s" + std::to_string(s));
  r.link_capacity = {1e9, 1e9, 1e9};  // 1 GB/s everywhere: 1 byte per ns
  g.ranks.push_back(r);
  return g;
}

Task compute(const std::string& name, TimeNs d, int stream = 0, std::vector<TaskId> deps = {}) {
  Task t;
  t.name = name;
  t.kind = TaskKind::kCompute;
  t.phase = Phase::kForward;
  t.stream = stream;
  t.duration = d;
  t.deps = std::move(deps);
  return t;
}

Task comm(const std::string& name, TimeNs latency, double bytes, int stream = 1, std::vector<TaskId> deps = {}) {
  Task t;
  t.name = name;
  t.kind = TaskKind::kCollective;
  t.phase = Phase::kComm;
  t.stream = stream;
  t.cost.latency = latency;
  t.cost.wire_bytes = bytes;
  t.cost.rate = 1e9;
  t.cost.link = LinkClass::kIntraNode;
  t.deps = std::move(deps);
  return t;
}

}  // namespace

TEST_CASE("tasks on one stream run one after another", "[executor]") {
  TaskGraph g = one_rank();
  g.add(compute("a", 100 * kUs));
  g.add(compute("b", 50 * kUs));
  const ExecResult r = execute(g);
  CHECK(r.spans[0].start == 0);
  CHECK(r.spans[1].start == 100 * kUs);
  CHECK(r.makespan == 150 * kUs);
}

TEST_CASE("a collective that fully overlaps compute adds nothing", "[executor]") {
  // compute 100 us on stream 0; a 40 us collective (10 us latency + 30000 B
  // at 1 B/ns) on stream 1 with no dependency: hidden entirely.
  TaskGraph g = one_rank();
  g.add(compute("fwd", 100 * kUs));
  g.add(comm("allreduce", 10 * kUs, 30000));
  const ExecResult r = execute(g);
  CHECK(r.spans[1].end == 40 * kUs);
  CHECK(r.makespan == 100 * kUs);
  CHECK(r.critical_path[static_cast<int>(Phase::kComm)] == 0);
  CHECK(r.critical_path[static_cast<int>(Phase::kForward)] == 100 * kUs);
}

TEST_CASE("a collective that cannot overlap adds its full time", "[executor]") {
  // a (100 us) -> allreduce (10 us + 30 us) -> b (50 us): 190 us in a chain.
  TaskGraph g = one_rank();
  const TaskId a = g.add(compute("a", 100 * kUs));
  const TaskId c = g.add(comm("allreduce", 10 * kUs, 30000, 1, {a}));
  g.add(compute("b", 50 * kUs, 0, {c}));
  const ExecResult r = execute(g);
  CHECK(r.makespan == 190 * kUs);
  CHECK(r.critical_path[static_cast<int>(Phase::kComm)] == 40 * kUs);
  CHECK(r.critical_path[static_cast<int>(Phase::kForward)] == 150 * kUs);
  TimeNs sum = 0;
  for (TimeNs t : r.critical_path) sum += t;
  CHECK(sum == r.makespan);
}

TEST_CASE("the critical path follows whichever dependency finished last", "[executor]") {
  // a: 0-100; allreduce starts at 20 (after x) and needs 100 us -> ends 120;
  // b waits for both: starts 120, ends 170. The path runs b <- allreduce <- x.
  TaskGraph g = one_rank();
  const TaskId x = g.add(compute("x", 20 * kUs, 2));
  g.tasks[x].phase = Phase::kBackward;
  const TaskId a = g.add(compute("a", 100 * kUs));
  const TaskId c = g.add(comm("allreduce", 0, 100000, 1, {x}));
  g.add(compute("b", 50 * kUs, 0, {a, c}));
  g.ranks[0].streams.push_back("s2");
  const ExecResult r = execute(g);
  CHECK(r.makespan == 170 * kUs);
  CHECK(r.critical_path[static_cast<int>(Phase::kComm)] == 100 * kUs);
  CHECK(r.critical_path[static_cast<int>(Phase::kBackward)] == 20 * kUs);
  CHECK(r.critical_path[static_cast<int>(Phase::kForward)] == 50 * kUs);
}

TEST_CASE("concurrent flows on one link share its bandwidth", "[executor]") {
  // Two 1 MB flows on a 1 GB/s link at once: each gets 0.5 GB/s, both end at
  // 2 ms. A 1 MB and a 3 MB flow: the small one ends at 2 ms; the big one has
  // 2 MB left and the whole link: 2 ms more, 4 ms.
  SECTION("equal flows") {
    TaskGraph g = one_rank(3);
    g.add(comm("c1", 0, 1e6, 1));
    g.add(comm("c2", 0, 1e6, 2));
    const ExecResult r = execute(g);
    CHECK(r.spans[0].end == 2 * kNsPerMs);
    CHECK(r.spans[1].end == 2 * kNsPerMs);
  }
  SECTION("unequal flows") {
    TaskGraph g = one_rank(3);
    g.add(comm("small", 0, 1e6, 1));
    g.add(comm("big", 0, 3e6, 2));
    const ExecResult r = execute(g);
    CHECK(r.spans[0].end == 2 * kNsPerMs);
    CHECK(r.spans[1].end == 4 * kNsPerMs);
  }
  SECTION("flows on different links do not interfere") {
    TaskGraph g = one_rank(3);
    g.add(comm("intra", 0, 1e6, 1));
    Task t = comm("host", 0, 1e6, 2);
    t.cost.link = LinkClass::kHostDevice;
    g.add(t);
    const ExecResult r = execute(g);
    CHECK(r.spans[0].end == 1 * kNsPerMs);
    CHECK(r.spans[1].end == 1 * kNsPerMs);
  }
}

TEST_CASE("a collective starts when every participant has reached it", "[executor]") {
  TaskGraph g;
  for (int i = 0; i < 2; ++i) {
    SimRank r;
    r.rank = i;
    r.streams = {"compute", "comm"};
    r.link_capacity = {1e9, 1e9, 1e9};
    g.ranks.push_back(r);
  }
  Task a = compute("a0", 10 * kUs);
  a.rank = 0;
  Task b = compute("a1", 30 * kUs);
  b.rank = 1;
  const TaskId ta = g.add(a), tb = g.add(b);
  for (int i = 0; i < 2; ++i) {
    Task c = comm("ar", 5 * kUs, 0, 1, {i == 0 ? ta : tb});
    c.rank = i;
    c.collective = 7;
    c.participants = 2;
    g.add(c);
  }
  const ExecResult r = execute(g);
  CHECK(r.spans[2].start == 30 * kUs);
  CHECK(r.spans[3].start == 30 * kUs);
  CHECK(r.spans[2].end == 35 * kUs);
  CHECK(r.makespan == 35 * kUs);
}

TEST_CASE("the memory peak of a known allocation sequence", "[executor]") {
  // resident 100 B of parameters; t1 (0-10) holds 50 B of activations;
  // t2 (10-20) holds 70 B; t3 on another stream (0-15) holds 30 B of buffers.
  // Peak: 100 + 70 + 30 = 200 B at t = 10 (t1 has freed its 50 by then:
  // 100+50+30 = 180 before).
  TaskGraph g = one_rank();
  g.ranks[0].resident = {{MemCategory::kParameters, 100}};
  g.add(compute("t1", 10), MemOps{{MemCategory::kActivations, 50}}, MemOps{{MemCategory::kActivations, -50}});
  g.add(compute("t2", 10), MemOps{{MemCategory::kActivations, 70}}, MemOps{{MemCategory::kActivations, -70}});
  g.add(compute("t3", 15, 1), MemOps{{MemCategory::kBuffers, 30}}, MemOps{{MemCategory::kBuffers, -30}});
  const ExecResult r = execute(g, {true});
  const MemSnapshot& peak = r.memory[0].at_peak;
  CHECK(peak.total() == 200);
  CHECK(peak.time == 10);
  CHECK(peak.bytes[static_cast<int>(MemCategory::kParameters)] == 100);
  CHECK(peak.bytes[static_cast<int>(MemCategory::kActivations)] == 70);
  CHECK(peak.bytes[static_cast<int>(MemCategory::kBuffers)] == 30);
  CHECK(r.memory[0].timeline.back().total() == 100);
}

TEST_CASE("freeing more than was allocated is an internal error", "[executor]") {
  TaskGraph g = one_rank();
  g.add(compute("t", 1), {}, MemOps{{MemCategory::kActivations, -1}});
  CHECK_THROWS_AS(execute(g), InternalError);
}

TEST_CASE("a dependency cycle is reported, not hung on", "[executor]") {
  TaskGraph g = one_rank();
  g.add(compute("a", 1, 0, {1}));
  g.add(compute("b", 1, 1, {0}));
  CHECK_THROWS_AS(execute(g), InternalError);
}

TEST_CASE("runs are reproducible", "[executor]") {
  TaskGraph g = one_rank(3);
  for (int i = 0; i < 20; ++i) {
    g.add(compute("c" + std::to_string(i), 7 + i));
    g.add(comm("x" + std::to_string(i), 3, 1000 + 10 * i, 1 + i % 2, {static_cast<TaskId>(2 * i)}));
  }
  const ExecResult a = execute(g), b = execute(g);
  REQUIRE(a.spans.size() == b.spans.size());
  for (std::size_t i = 0; i < a.spans.size(); ++i) {
    CHECK(a.spans[i].start == b.spans[i].start);
    CHECK(a.spans[i].end == b.spans[i].end);
  }
}

TEST_CASE("a task ends no sooner than its host has issued it (Note [Host launch])", "[executor]") {
  // Three tasks of 10, 1 and 1 us on the GPU, issued in 2, 5 and 5 us: the
  // host has issued them at 2, 7 and 12 us. The first ends at 10 (its
  // kernels), the second at max(10 + 1, 7) = 11, the third at max(11 + 1, 12) = 12.
  TaskGraph g = one_rank();
  for (const auto& [d, l] : {std::pair{10, 2}, std::pair{1, 5}, std::pair{1, 5}}) {
    Task t = compute("t", d * kUs);
    t.launch = l * kUs;
    g.add(t);
  }
  const ExecResult r = execute(g);
  CHECK(r.spans[0].end == 10 * kUs);
  CHECK(r.spans[1].end == 11 * kUs);
  CHECK(r.spans[2].end == 12 * kUs);
  CHECK(r.makespan == 12 * kUs);
  // Host-bound throughout (1 us kernels issued in 5 us each): 5, 10, 15.
  TaskGraph h = one_rank();
  for (int i = 0; i < 3; ++i) {
    Task t = compute("t", 1 * kUs);
    t.launch = 5 * kUs;
    h.add(t);
  }
  CHECK(execute(h).makespan == 15 * kUs);
  // A task without a launch cost does not move the host: issued tasks before
  // and after it keep their issue times (5 and 10), and it runs as the GPU allows.
  TaskGraph k = one_rank();
  Task a = compute("a", 1 * kUs), free = compute("free", 20 * kUs), b = compute("b", 1 * kUs);
  a.launch = b.launch = 5 * kUs;
  k.add(a);
  k.add(free);
  k.add(b);
  const ExecResult kr = execute(k);
  CHECK(kr.spans[1].end == 25 * kUs);  // starts at 5, 20 us
  CHECK(kr.makespan == 26 * kUs);      // b: issued at 10, runs after "free"
}

TEST_CASE("compute runs slower while a collective of its rank runs (Note [Interference])", "[executor][interference]") {
  // Slowdown 0.25: compute progresses at 1/1.25 = 0.8 of its speed while a
  // collective runs. A 100 us kernel beside a collective over [0, 40 us)
  // (10 us latency + 30,000 B at 1 byte/ns) has done 40 x 0.8 = 32 us of its
  // work by then, and the other 68 us at full speed: it ends at 108 us.
  TaskGraph g = one_rank();
  g.ranks[0].comm_slowdown = 0.25;
  g.add(compute("gemm", 100 * kUs));
  g.add(comm("all_reduce", 10 * kUs, 30000));
  ExecResult r = execute(g);
  CHECK(r.spans[1].end == 40 * kUs);  // the collective keeps its speed
  CHECK(r.spans[0].end == 108 * kUs);
  CHECK(r.spans[0].slowed == 8 * kUs);  // 40 us of wall time for 32 of work
  CHECK(r.spans[1].slowed == 0);

  SECTION("a collective that starts mid-kernel and outlasts it") {
    // The collective waits for a 20 us kernel on a third stream, then runs
    // [20, 220 us): the 100 us kernel has 80 us left at 20 us, at 0.8 of
    // its speed: 100 us more, ending at 120 us.
    TaskGraph h = one_rank(3);
    h.ranks[0].comm_slowdown = 0.25;
    h.add(compute("gemm", 100 * kUs));
    const TaskId before = h.add(compute("other", 20 * kUs, 2));
    h.add(comm("all_gather", 0, 200000, 1, {before}));
    r = execute(h);
    CHECK(r.spans[2].start == 20 * kUs);
    CHECK(r.spans[0].end == 120 * kUs);
    CHECK(r.spans[0].slowed == 20 * kUs);  // 80 us of work in 100 us
    // The "other" kernel ran before any collective: full speed.
    CHECK(r.spans[1].end == 20 * kUs);
    CHECK(r.spans[1].slowed == 0);
  }
  SECTION("memory-bound kernels slow by the HBM the collectives' link classes take") {
    // hbm_slowdown 1 inside a node is h = 1 / (1 + 1) = 0.5 of the HBM; 1/3
    // across nodes is h = 0.25. A kernel with memory_share 0.5 beside the
    // intra-node collective [0, 60 us) (10 us + 50,000 B) runs at
    // 1 / (1 + 0.5 x 0.25 + 0.5 x 1) = 1 / 1.625 of its speed; with share
    // 1 at 1 / 2: 30 us of its work by 60 us, ending at 60 + 70 = 130 us.
    TaskGraph h = one_rank();
    h.ranks[0].comm_slowdown = 0.25;
    h.ranks[0].hbm_slowdown = {1.0, 1.0 / 3, 0};
    Task k = compute("adam", 100 * kUs);
    k.memory_share = 1;
    h.add(k);
    h.add(comm("all_reduce", 10 * kUs, 50000));
    r = execute(h);
    CHECK(r.spans[0].end == 130 * kUs);
    CHECK(r.spans[0].slowed == 30 * kUs);
    // Share 0.5 with hbm_slowdown 0.75 (h = 3/7): 1 + 0.125 + 0.375 = 1.5,
    // 40 us of work by 60 us, ending at 120 us.
    h.tasks[0].memory_share = 0.5F;
    h.ranks[0].hbm_slowdown = {0.75, 0, 0};
    CHECK(execute(h).spans[0].end == 120 * kUs);
    // Share 0: the SMs alone, as before (a GEMM): 1 / 1.25, 48 us of work
    // by 60 us, ending at 112 us.
    h.tasks[0].memory_share = 0;
    CHECK(execute(h).spans[0].end == 112 * kUs);
  }
  SECTION("collectives on two link classes add their HBM shares, up to kMaxHbmShare") {
    // Intra (h = 0.5) and inter (h = 0.25) together over [0, 40 us): h =
    // 0.75, slowdown 3, a memory-bound kernel at 1/4 of its speed: 10 us of
    // work by 40 us, ending at 130 us. Both at h = 0.5 add to 1, capped at
    // 0.8: slowdown 4, 8 us by 40 us, ending at 132 us.
    TaskGraph h = one_rank(3);
    h.ranks[0].comm_slowdown = 0.25;
    h.ranks[0].hbm_slowdown = {1.0, 1.0 / 3, 0};
    Task k = compute("adam", 100 * kUs);
    k.memory_share = 1;
    h.add(k);
    h.add(comm("all_reduce intra", 10 * kUs, 30000, 1));
    Task across = comm("all_reduce inter", 10 * kUs, 30000, 2);
    across.cost.link = LinkClass::kInterNode;
    h.add(across);
    r = execute(h);
    CHECK(r.spans[1].end == 40 * kUs);
    CHECK(r.spans[2].end == 40 * kUs);
    CHECK(r.spans[0].end == 130 * kUs);
    h.ranks[0].hbm_slowdown = {1.0, 1.0, 0};
    CHECK(execute(h).spans[0].end == 132 * kUs);
    // Contention m = 2 (Note [Interference fit]) multiplies the slowdown of
    // the added and capped share, not each class's: intra and inter at h =
    // 0.5 and 0.25 add to 0.75, 2 x 3 = slowdown 6, 1/7 of its speed: 40/7
    // us of work by 40 us, ending at 40 + 100 - 40/7 = 134.29 us. Each
    // class's slowdown doubled first (2 and 2/3: shares 2/3 and 0.4, capped
    // at 0.8: slowdown 4) would end at 132 us.
    h.ranks[0].hbm_slowdown = {1.0, 1.0 / 3, 0};
    h.ranks[0].hbm_contention = 2;
    CHECK(execute(h).spans[0].end == 134286);  // ns: 140 us - 40/7 us, rounded up
    h.ranks[0].hbm_contention = 1;
    // A rank whose compute does not slow (comm_slowdown 0) ignores both.
    h.ranks[0].comm_slowdown = 0;
    CHECK(execute(h).spans[0].end == 100 * kUs);
  }
  SECTION("host copies (offload) and a rank without slowdown leave compute alone") {
    TaskGraph h = one_rank();
    h.ranks[0].comm_slowdown = 0.25;
    h.add(compute("gemm", 100 * kUs));
    Task copy = comm("d2h", 10 * kUs, 30000);
    copy.phase = Phase::kOffload;
    h.add(copy);
    CHECK(execute(h).spans[0].end == 100 * kUs);
    h.ranks[0].comm_slowdown = 0;
    h.tasks[1].phase = Phase::kComm;
    CHECK(execute(h).spans[0].end == 100 * kUs);
  }
}

namespace {

/// Note [Busy sender]: rank 0 computes a then b on "compute"; the receiver's
/// notice, ready as a ends, precedes on the send stream the send of a's
/// output (latency 0, 1e6 B at 1 GB/s: 1 ms) to rank 1, whose c waits for it.
TaskGraph busy_sender(TimeNs b, TimeNs waits_for_core) {
  TaskGraph g;
  for (int r = 0; r < 2; ++r) {
    SimRank rank;
    rank.streams = {"compute", "send fwd"};
    rank.link_capacity = {1e9, 1e9, 1e9};
    rank.send_waits_for_core = waits_for_core;
    g.ranks.push_back(rank);
  }
  const TaskId a = g.add(compute("a", 2 * kNsPerMs));
  g.add(compute("b", b));
  Task notice = comm("notice", 0, 0, 1, {a});
  notice.op = CollectiveOp::kSendRecv;
  notice.axis = Axis::kPp;
  notice.collective = kRecvNotice;
  g.add(notice);
  Task send = comm("send", 0, 1e6, 1, {a});
  send.op = CollectiveOp::kSendRecv;
  send.axis = Axis::kPp;
  const TaskId s = g.add(send);
  Task c = compute("c", kNsPerMs, 0, {s});
  c.rank = 1;
  g.add(c);
  return g;
}

}  // namespace

TEST_CASE("a CPU rank's pipeline send waits for its core: its receiver's notice is handled once the compute is idle, "
          "or once the compute has had the core 4 ms",
          "[executor]") {
  // The notice comes at 2 ms, as a ends and b begins; the send is issued
  // then too. Rank 0's compute has been busy since 0 (a, then b).
  SECTION("b runs 10 ms: the notice is handled at 0 + 4 ms, the send ends at 5 ms") {
    const ExecResult r = execute(busy_sender(10 * kNsPerMs, 4 * kNsPerMs));
    CHECK(r.spans[2].start == 2 * kNsPerMs);
    CHECK(r.spans[2].end == 4 * kNsPerMs);
    CHECK(r.spans[2].slowed == 2 * kNsPerMs);  // what the trace shows as waited_for_core
    CHECK(r.spans[3].end == 5 * kNsPerMs);
    CHECK(r.spans[3].slowed == 0);  // the send itself is not held
    CHECK(r.spans[4].start == 5 * kNsPerMs);
    CHECK(r.makespan == 12 * kNsPerMs);  // b: 2 + 10 ms
  }
  SECTION("the compute busy 2 ms already, 1 ms left of its 4: held to 3 ms, the send ends at 4 ms") {
    const ExecResult r = execute(busy_sender(10 * kNsPerMs, 3 * kNsPerMs));
    CHECK(r.spans[2].slowed == 1 * kNsPerMs);
    CHECK(r.spans[3].end == 4 * kNsPerMs);
  }
  SECTION("busy 2 ms already, at most 2: handled at once, the send runs 2 to 3 ms") {
    const ExecResult r = execute(busy_sender(10 * kNsPerMs, 2 * kNsPerMs));
    CHECK(r.spans[2].slowed == 0);
    CHECK(r.spans[3].end == 3 * kNsPerMs);
  }
  SECTION("b runs 1.5 ms: the core is free at 3.5 ms, the send ends at 4.5 ms") {
    const ExecResult r = execute(busy_sender(1500 * kUs, 4 * kNsPerMs));
    CHECK(r.spans[2].slowed == 1500 * kUs);
    CHECK(r.spans[3].end == 4500 * kUs);
    CHECK(r.spans[4].end == 5500 * kUs);
  }
  SECTION("a GPU's (0) is handled at once: the send runs 2 to 3 ms") {
    const ExecResult r = execute(busy_sender(10 * kNsPerMs, 0));
    CHECK(r.spans[2].slowed == 0);
    CHECK(r.spans[3].end == 3 * kNsPerMs);
    CHECK(r.spans[4].start == 3 * kNsPerMs);
  }
  SECTION("a send, or any other task of no cost, does not wait: only a notice does") {
    TaskGraph g = busy_sender(10 * kNsPerMs, 4 * kNsPerMs);
    g.tasks[2].collective = -1;
    CHECK(execute(g).spans[3].end == 3 * kNsPerMs);
  }
}

TEST_CASE("a quiet sender's core: a notice waits for the sender's pass to end, or a send it issues, after the "
          "notice's own latency (Note [Quiet sender])",
          "[executor]") {
  // busy_sender: a (0-2 ms) then b on rank 0's compute stream; the notice
  // comes as a ends; the send (1 ms on the wire) then c (1 ms) on rank 1.
  SECTION("no bound, b runs 10 ms in a's pass: held until the stream is idle at 12, the send ends at 13") {
    const ExecResult r = execute(busy_sender(10 * kNsPerMs, kUntilPassEnds));
    CHECK(r.spans[2].slowed == 10 * kNsPerMs);
    CHECK(r.spans[3].end == 13 * kNsPerMs);
    CHECK(r.spans[4].end == 14 * kNsPerMs);
  }
  // d (5 ms) follows b (3 ms, 2-5) on the compute stream, so the stream is
  // busy 0-10.
  const auto with_d = [](std::int32_t d_micro, Phase d_phase) {
    TaskGraph g = busy_sender(3 * kNsPerMs, kUntilPassEnds);
    g.tasks[0].micro = g.tasks[1].micro = 0;
    Task d = compute("d", 5 * kNsPerMs);
    d.micro = d_micro;
    d.phase = d_phase;
    g.add(d);
    return g;
  };
  SECTION("d is the next micro-batch's: b ends a pass at 5, the notice is handled then, the send ends at 6") {
    const ExecResult r = execute(with_d(1, Phase::kForward));
    CHECK(r.spans[2].slowed == 3 * kNsPerMs);
    CHECK(r.spans[3].end == 6 * kNsPerMs);
    CHECK(r.spans[4].end == 7 * kNsPerMs);
    CHECK(r.spans[5].end == 10 * kNsPerMs);  // d is not held up
  }
  SECTION("d is the same micro-batch's backward: a pass ends at 5 too") {
    CHECK(execute(with_d(0, Phase::kBackward)).spans[3].end == 6 * kNsPerMs);
  }
  SECTION("d goes on with b's pass: held until the stream is idle at 10, the send ends at 11") {
    const ExecResult r = execute(with_d(0, Phase::kForward));
    CHECK(r.spans[2].slowed == 8 * kNsPerMs);
    CHECK(r.spans[3].end == 11 * kNsPerMs);
  }
  SECTION("d goes on with b's pass, but a send waits on b: handled as b ends at 5") {
    TaskGraph g = with_d(0, Phase::kForward);
    Task send2 = comm("send 2", 0, 1e6, 1, {1});
    send2.op = CollectiveOp::kSendRecv;
    send2.axis = Axis::kPp;
    g.add(send2);
    const ExecResult r = execute(g);
    CHECK(r.spans[2].slowed == 3 * kNsPerMs);
    CHECK(r.spans[3].end == 6 * kNsPerMs);
  }
  SECTION("a notice of 0.5 ms latency arrives at 2.5: b (1 ms) busy, held to 3; the send then at once, to 4") {
    TaskGraph g = busy_sender(kNsPerMs, kUntilPassEnds);
    g.tasks[2].cost.latency = kNsPerMs / 2;
    const ExecResult r = execute(g);
    CHECK(r.spans[2].start == 2 * kNsPerMs);
    CHECK(r.spans[2].slowed == kNsPerMs / 2);  // the wait for the core, not the way there
    CHECK(r.spans[3].end == 4 * kNsPerMs);
  }
  SECTION("the same notice finds b (0.3 ms) done: handled as it arrives, the send runs 2.5 to 3.5") {
    TaskGraph g = busy_sender(300 * kUs, kUntilPassEnds);
    g.tasks[2].cost.latency = kNsPerMs / 2;
    const ExecResult r = execute(g);
    CHECK(r.spans[2].slowed == 0);
    CHECK(r.spans[3].end == 3500 * kUs);
  }
}

TEST_CASE("a CPU rank's compute that waited on a collective pays for resuming, by how long its core computed nothing "
          "(Note [Resuming after a wait])",
          "[executor]") {
  // a (100 us) -> all-reduce (10 us + 30000 B at 1 B/ns = 40 us) -> b (50 us):
  // b waits 40 us after a. The rank's points: 20 us extra after an 80 us
  // wait, 30 us after 400 us; straight from (0, 0) below the first.
  const auto chain = [](TimeNs latency) {
    TaskGraph g = one_rank();
    g.ranks[0].resume = {{80 * kUs, 20 * kUs}, {400 * kUs, 30 * kUs}};
    const TaskId a = g.add(compute("a", 100 * kUs));
    const TaskId c = g.add(comm("allreduce", latency, 30000, 1, {a}));
    g.add(compute("b", 50 * kUs, 0, {c}));
    return g;
  };
  SECTION("a 40 us wait, half the first point's: 10 us more") {
    const ExecResult r = execute(chain(10 * kUs));
    CHECK(r.spans[2].start == 140 * kUs);
    CHECK(r.spans[2].end == 200 * kUs);  // 140 + 50 + 10
  }
  SECTION("a 240 us wait, half way between the points: 25 us more") {
    const ExecResult r = execute(chain(210 * kUs));
    CHECK(r.spans[2].end == 340 * kUs + 50 * kUs + 25 * kUs);
  }
  SECTION("a 1 ms wait, past the last point: its 30 us") {
    const ExecResult r = execute(chain(970 * kUs));
    CHECK(r.spans[2].end == 1100 * kUs + 50 * kUs + 30 * kUs);
  }
  SECTION("a rank without points pays nothing") {
    TaskGraph g = chain(10 * kUs);
    g.ranks[0].resume.clear();
    CHECK(execute(g).spans[2].end == 190 * kUs);
  }
  SECTION("a task its stream's predecessor made ready pays nothing, nor a first task, nor the host's work") {
    TaskGraph g = chain(10 * kUs);
    g.add(compute("c", 10 * kUs, 0));  // after b on its stream: no wait
    CHECK(execute(g).spans[3].end == 210 * kUs);
    TaskGraph h = chain(10 * kUs);
    h.tasks[2].kind = TaskKind::kHostCompute;
    CHECK(execute(h).spans[2].end == 190 * kUs);
    // A collective first, then compute: no compute before it, nothing to resume.
    TaskGraph f = one_rank();
    f.ranks[0].resume = {{80 * kUs, 20 * kUs}};
    const TaskId c = f.add(comm("allreduce", 10 * kUs, 30000, 1));
    f.add(compute("b", 50 * kUs, 0, {c}));
    CHECK(execute(f).spans[1].end == 90 * kUs);
  }
  SECTION("a marker of no duration between the collective and the layer is looked through, and pays nothing") {
    TaskGraph g = one_rank();
    g.ranks[0].resume = {{80 * kUs, 20 * kUs}, {400 * kUs, 30 * kUs}};
    const TaskId a = g.add(compute("a", 100 * kUs));
    const TaskId c = g.add(comm("allreduce", 10 * kUs, 30000, 1, {a}));
    const TaskId marker = g.add(compute("wait bucket", 0, 0, {c}));
    g.add(compute("b", 50 * kUs, 0, {marker}));
    const ExecResult r = execute(g);
    CHECK(r.spans[2].end == 140 * kUs);
    CHECK(r.spans[3].end == 200 * kUs);  // 140 + 50 + 10
  }
  SECTION("a CPU collective's time on the cores (Phase::kComm) is the wait: the layer after it pays, it does not") {
    // a, then 40 us of the gather's work on the cores, then b: b waited
    // 40 us since a's end.
    TaskGraph g = one_rank();
    g.ranks[0].resume = {{80 * kUs, 20 * kUs}, {400 * kUs, 30 * kUs}};
    g.add(compute("a", 100 * kUs));
    Task cores = compute("all_gather (cores)", 40 * kUs);
    cores.phase = Phase::kComm;
    g.add(cores);
    g.add(compute("b", 50 * kUs));
    const ExecResult r = execute(g);
    CHECK(r.spans[1].end == 140 * kUs);
    CHECK(r.spans[2].end == 200 * kUs);
  }
  SECTION("a negative extra (a comm model's mistake) costs nothing, never time backwards") {
    TaskGraph g = chain(10 * kUs);
    g.ranks[0].resume = {{80 * kUs, -200 * kUs}};
    CHECK(execute(g).spans[2].end == 190 * kUs);
  }
  SECTION("a compute task that slows beside a collective carries the extra as work") {
    // comm_slowdown 1 halves compute while a collective runs; none runs
    // during b, so b takes 50 + 10 us.
    TaskGraph g = chain(10 * kUs);
    g.ranks[0].comm_slowdown = 1.0;
    CHECK(execute(g).spans[2].end == 200 * kUs);
  }
}
