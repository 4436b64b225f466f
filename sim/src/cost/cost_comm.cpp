// Note [Collective cost model]
// NCCL runs a collective as a sequence of steps between neighbouring ranks
// (ring) or along a tree; each step pays a per-hop latency (alpha) and moves a
// chunk at the link bandwidth (beta). Thakur, Rabenseifner & Gropp 2005
// ("Optimization of Collective Communication Operations in MPICH") give the
// ring costs for n ranks and S bytes:
//   all-reduce      2(n-1) alpha + 2(n-1)/n * S / B
//   reduce-scatter   (n-1) alpha +  (n-1)/n * S / B
//   all-gather       (n-1) alpha +  (n-1)/n * S / B
//   broadcast (pipelined ring) (n-1) alpha + S / B
// so the bytes each rank pushes through its bottleneck link are S times
// nccl-tests' bus-bandwidth factor (PERFORMANCE.md in nccl-tests), and busbw
// equals B when the model holds. Across nodes the ring's slowest edge leaves
// the node through the NICs: B = min(intra-node bandwidth, NICs x NIC
// bandwidth / groups sharing them), and every step waits for the network hop.
// NCCL's tree all-reduce (double binary tree over nodes, a chain inside each
// node) moves about 2S per rank at the same bottleneck but pays only
// 2(log2(N) network + (g-1) local) hops of latency, so it wins for small
// messages across many nodes; like NCCL's tuner we take the faster.
// Every collective also pays a fixed launch/synchronisation cost.
//
// Note [NCCL below the line rate]
// NCCL does not move data at a link's line rate: its protocols spend part
// of every transfer on flags and chunk hand-offs, and its kernels on the
// copies and reductions between the links. Its own performance model caps
// a ring's bus bandwidth on Ampere at 235 GB/s of NVLink3's 300
// (src/graph/tuning.cc, ncclTopoTuneModel: busBw = min(busBw, 235) for
// compute capability 8.0), and nccl-tests measure about 230 GB/s there
// (an all-reduce at 1 GiB on a DGX A100); on Hopper "with the protocol
// overhead (~20%) NCCL can get an effective NVLink bandwidth of 370GB/s" of
// NVLink4's 450 (S. Jeaugey, NVIDIA/nccl-tests issue #212). Over
// InfiniBand HDR four NICs' 100 GB/s gave 96 GB/s of all-reduce bus
// bandwidth at its peak (NVIDIA/nccl-tests issue #119). A link's
// `efficiency` (cluster YAML) is that share, and every collective and
// point-to-point transfer moves at bandwidth x efficiency (LinkSpec::rate);
// the shipped clusters cite theirs. A profile's measured collectives
// replace it where it has them (ProfileCommModel). That rate is the Simple
// protocol's, which large messages run; smaller ones run NCCL's others
// (Note [NCCL protocols]).
//
// Note [NCCL protocols]
// NCCL moves data in one of three protocols (src/device/prims_ll.h,
// prims_ll128.h, prims_simple.h): LL stores 8 bytes at a time, 4 of data
// and a 4-byte flag the receiver polls, so it needs no fence and has the
// least latency but moves at most half the bytes; LL128 stores 128-byte
// lines of which 120 are data (NVLink only: it relies on the lines
// arriving whole); Simple moves whole buffers behind a fence and a flag,
// at the full rate but with the most latency. NCCL's tuner
// (src/graph/tuning.cc, ncclTopoTuneModel and ncclTopoGetAlgoTime, v2.30.7)
// prices each algorithm in each protocol as latency + bytes / bandwidth and
// runs the cheapest, and so does dtsim, with the tuner's own constants:
// - latency: a base per algorithm and protocol (baseLatencies: ring LL 6.6,
//   LL128 14, Simple 8.4 us; tree 6.8, 14, 8.4) plus a hardware latency per
//   step (hwLatencies; ring on NVLink 0.6 / 1.9 / 3.4 us, on PCIe 1.0 / 2.5
//   / 5.7, over the network 2.7 / 4.0 / 14; tree 0.6 / 1.25 / 4.0, 1.0 /
//   1.9 / 4.0 and 5.0 / 8.5 / 14). A ring all-reduce over N nodes takes
//   2(N-1) of its 2(n-1) steps over the network (N-1 of n-1 for reduce-
//   scatter and all-gather), the others inside nodes; a tree all-reduce
//   pays 2((g-1) intra + floor(log2 N) network) steps. A link's
//   `latency_us` is its LL step (NVLink 0.6, the table's); what it has
//   above the table's LL figure is the wire's (NCCL's latencyInter) and is
//   added to every protocol's step, twice to Simple's over the network
//   (its flush). Across nodes a step costs at least NCCL's net overhead of
//   1 us (3 for Simple). A multi-node ring all-reduce in Simple pays its
//   latency 1.4 times (1.9 before Ampere): the tuner's "plateau effect".
// - bandwidth: Simple moves at the link's rate (Note [NCCL below the line
//   rate]); ring LL at half of it, at most llMaxBws (per architecture inside
//   a node: Volta 39, Ampere 87.7, Hopper 141, Blackwell 282 GB/s of bus
//   bandwidth; across 2 nodes 39, more 20.4, the tuner's rows for x86
//   hosts); ring LL128 at 0.92 of it; the tree at 0.92 of it in Simple, 1/3.8
//   of that in LL (at most llMaxBws) and 120/128 in LL128, each times the
//   tuner's treeCorrectionFactor for the size.
// LL128 runs where NCCL enables it by default: compute capability 7.0 and
// up with NVLink between the GPUs, and across nodes only where each GPU has
// a NIC of its own (NCCL wants the NIC under the GPU's PCIe switch).
// `nccl_proto` (cluster YAML) is NCCL_PROTO. The model applies to NVIDIA
// GPUs (a device's compute_capability) over NVLink or PCIe and InfiniBand
// or Ethernet; Gloo's collectives (CPUs), RCCL's (xgmi) and a profile's
// fitted line keep one alpha-beta line, a 6 us base and the link's latency
// every step (Note [Collective cost model]). Point-to-point and all-to-all
// keep that line too. Against five published nccl-tests sweeps on A100s
// and H100s (docs/comm.md, bench/published-comm) the median error from 1 to
// 64 MB falls from 30-54% to 10-36%, all of it short: NCCL's own model,
// which it uses only to choose, is short there too.
// Not modelled: the tuner's per-channel caps of the ring and the tree
// (NVLSTree's is, Note [NVLSTree]; those bind only below 12
// channels), its nChannels reduction for small messages (it changes the
// launch, not the time the tuner expects), PAT and CollNet.
//
// Note [NVLink SHARP]
// On Hopper and Blackwell the NVSwitch can reduce: NCCL's NVLS algorithm
// (NCCL >= 2.17, on by default where the system supports it,
// NCCL_NVLS_ENABLE) runs an all-reduce inside one node as a multimem
// load-reduce of each rank's 1/n from the switch, then a multimem store the
// switch copies to every rank. Each GPU sends its whole buffer once to be
// reduced and its 1/n to be copied out, and receives its reduced 1/n and
// then all n pieces: S (n+1)/n bytes each way, its own piece included.
// So the algorithm bandwidth is R n/(n+1), rising with n where a ring's
// falls (its 2(n-1)/n S): measured on 8 H100s, NVLS busbw 420, 440, 460
// and 480 GB/s at 5, 6, 7 and 8 GPUs (algbw 258-273), and the ring's 370 at
// 2 to 4, where NCCL does not gain by it (NVIDIA/nccl issue #1455); "on 8
// GPUs ... a peak busBw of ~480GB/s (algbw ~275GB/s)" (S. Jeaugey,
// NVIDIA/nccl-tests issue #212); 475 GB/s on 8 H200s (NVIDIA/nccl-tests
// issue #272); about 830 GB/s on 8 B200s (NVIDIA/nccl issue #1807). R is a
// link's `nvls_efficiency` x its line rate: 0.686 x 450 = 309 GB/s for
// NVLink4 fits every H100 point above within 3% (at 5 GPUs 409 against
// 420), and 0.600 x 900 = 540 GB/s gives the B200's 830. Its latency is
// NCCL's own for NVLS inside a node, 25 us (src/graph/tuning.cc,
// hwLatencies[NVLINK][NVLS][SIMPLE], with no base latency), so the ring
// keeps the small sizes (NVLS wins from about 8 MB on 8 H100s). Only the
// all-reduce: NVLS's reduce-scatter and all-gather move the ring's bytes
// and are not faster ("except for the Allreduce operation where we can get
// a 30% improvement using NVLink SHARP", S. Jeaugey, NVIDIA/nccl issue
// #1442). Across nodes NCCL (>= 2.18) runs NVLSTree (Note [NVLSTree]).
// Not modelled: the memory NVLS's buffers take (the reason NeMo's performance recipes
// set NCCL_NVLS_ENABLE=0: scripts/performance/executors.py, "Disable
// NVLink SHARP to save memory"). A cluster's `nccl_nvls_enable: false` is
// that setting.
//
// Note [NVLSTree]
// An all-reduce across nodes whose NVSwitches reduce runs, where it is
// faster, as NCCL's NVLSTree (NCCL >= 2.18, src/device/all_reduce.h,
// runTreeSplit over NVLS): NVLS reduces each node's g buffers in the switch,
// each of the node's NIC heads sends its 1/g of the node's sum up a tree of
// nodes and receives the total back down, and an NVLS multicast store hands
// it to the g ranks. Two flows at once, priced on the slower (as the
// all-to-all's): NVLink moves NVLS's S (g+1)/g a rank at its NVLS rate, and
// the node's NICs (its share, where identical groups share them) move the
// node's sum up and down the tree: on two nodes one exchange, S each way
// (NCCL's tuner doubles NVLSTree's inter-node bandwidth for nNodes <= 2,
// src/graph/tuning.cc), on more the double binary tree's 2S, as NCCL's
// tree (Note [Collective cost model]); each rank's NIC share carries 1/g
// of it. So on two nodes it moves about half
// the ring's bytes through the NICs, and on more it gains nothing there:
// "on single nodes or 2 nodes ... NCCL_NVLS_ENABLE=0/1 ... from 330GB to
// 430GB. [On] more than 2 ... same busbw 320GB" (8x H100, 8 NICs a node,
// NVIDIA/nccl issue #1221). Its latency is the tuner's: no base, NVLS's
// 25 us inside the node and 2 log2(N) network steps of 20.9 us
// (hwLatencies[NET][NVLS_TREE][SIMPLE]) plus the wire's latency twice
// (Simple's flush). Simple only, as NCCL runs it. The links alone would
// let two DGX H100 nodes reach NVLS's 275 GB/s of algbw (its NVLink side
// binds: the NICs carry 384), but the tuner caps NVLSTree at
// perChMaxNVLSTreeBws a channel, one channel for each NIC head: on Hopper
// 57.7 GB/s of bus bandwidth on two nodes, 45.5 on more (Blackwell 96 and
// 80), so 8 x 57.7 = 462 GB/s of busbw, algbw 246; nccl-tests measured
// 250 at 4-8 GiB (NVIDIA/nccl-tests issue #309, NCCL 2.26.2). And, as
// the tree's (Note [NCCL protocols]), medium sizes fall short of the
// line: the tuner's treeCorrectionFactor for Simple, which NCCL applies to
// NVLSTree on Blackwell x86 hosts and the same sweep shows on Hopper
// (measured 185, 466 and 1,283 us at 16, 64 and 256 MB; with the factor
// 173, 417 and 1,288; docs/comm.md).
#include <algorithm>
#include <cmath>
#include <cstdint>
#include <optional>
#include <set>
#include <utility>

#include "dtsim/sim/cost.hpp"
#include "dtsim/sim/error.hpp"
#include "cost/ring.hpp"

namespace dtsim::sim {
namespace {

using detail::kCollectiveBaseLatency;
using detail::ring_steps;

/// NVLS's latency inside a node: NCCL's tuner gives it 25 us and no base
/// latency (src/graph/tuning.cc, hwLatencies[NVLINK][NVLS][SIMPLE]).
constexpr TimeNs kNvlsLatency = 25 * kNsPerUs;
/// NVLSTree's network step (Note [NVLSTree]): hwLatencies[NET][NVLS_TREE][SIMPLE].
constexpr double kNvlsTreeNetStepUs = 20.9;

// ---- Note [NCCL protocols]: NCCL's tuner constants (src/graph/tuning.cc, v2.30.7) ----

constexpr int kRingAlgo = 0, kTreeAlgo = 1;
constexpr int kNvlinkHw = 0, kPciHw = 1, kNetHw = 2;
/// baseLatencies[algorithm][protocol] in us (LL, LL128, Simple).
constexpr double kBaseLatencyUs[2][3] = {{6.6, 14.0, 8.4}, {6.8, 14.0, 8.4}};
/// hwLatencies[link][algorithm][protocol] in us, a step each.
constexpr double kHwLatencyUs[3][2][3] = {
    {{0.6, 1.9, 3.4}, {0.6, 1.25, 4.0}},   // NVLink: ring, tree
    {{1.0, 2.5, 5.7}, {1.0, 1.9, 4.0}},    // PCIe
    {{2.7, 4.0, 14.0}, {5.0, 8.5, 14.0}},  // network
};
/// llMaxBws[architecture or host row][1, 2, more nodes], GB/s of bus bandwidth.
constexpr double kLlMaxBusBw[4][3] = {
    {39.0, 39.0, 20.4}, {87.7, 22.5, 19.0}, {141.0, 45.0, 35.0}, {2 * 141.0, 2 * 45.0, 2 * 35.0}};
/// treeCorrectionFactor[protocol][log2(bytes / 64)], 64 B to 256 MB.
constexpr double kTreeCorrection[3][24] = {
    {1.0, 1.0, 1.0, 1.0, .9, .8, .7, .7, .7, .7, .6, .5, .4, .4, .5, .6, .7, .8, .9, 1.0, 1.0, 1.0, 1.0, 1.0},
    {1.0, 1.0, 1.0, 1.0, 1.0, .9, .8, .8, .8, .7, .6, .6, .6, .6, .6, .6, .8, .9, .9, .9, .9, 1.0, 1.0, 1.0},
    {.9, .9, .9, .9, .9, .9, .9, .8, .7, .6, .6, .5, .5, .5, .5, .6, .7, .8, .7, .7, .8, .9, .9, .9}};
/// perChMaxNVLSTreeBws[Hopper, Blackwell][2 nodes, more], GB/s of bus bandwidth a channel.
constexpr double kNvlsTreeMaxBusBwPerChannel[2][2] = {{57.7, 45.5}, {96.0, 80.0}};
/// NCCL's log2i: floor(log2(v)), 0 for v < 2.
int log2i(std::int64_t v) {
  int l = 0;
  while ((std::int64_t{2} << l) <= v) ++l;
  return l;
}

/// treeCorrectionFactor for `bytes` in protocol p where NCCL applies it
/// (index log2(bytes / 64) below `limit`: 23 for the tree, 24 for
/// NVLSTree, tuning.cc), else 1.
double tree_correction(int p, Bytes bytes, int limit) {
  if (bytes < 64) return 1.0;
  const int log_size = log2i(static_cast<std::int64_t>(bytes >> 6));
  return log_size < limit ? kTreeCorrection[p][log_size] : 1.0;
}

/// NCCL's net overhead a step across nodes (getNetOverhead on x86), in us.
constexpr double kNetOverheadUs = 1.0;

int hardware_of(const std::string& link_type) {
  if (link_type == "nvlink") return kNvlinkHw;
  if (link_type == "pcie") return kPciHw;
  return kNetHw;
}

int protocol_index(const std::string& name) {
  if (name == "LL") return static_cast<int>(NcclProtocol::kLL);
  if (name == "LL128") return static_cast<int>(NcclProtocol::kLL128);
  if (name == "Simple") return static_cast<int>(NcclProtocol::kSimple);
  throw UnsupportedError("unknown protocol '" + name + "'; valid: LL, LL128, Simple");
}

TimeNs us(double v) { return static_cast<TimeNs>(std::llround(v * kNsPerUs)); }

/// cudaMemcpyAsync launch and completion cost for host<->device copies.
constexpr TimeNs kCopyBaseLatency = 10 * kNsPerUs;

/// A flow with `inter` bytes on the NICs at `inter_rate` and `intra` bytes
/// on NVLink at `intra_rate` at once: priced on the slower of the two.
void slower_path(CollectiveCost& c, double inter, double inter_rate, double intra, double intra_rate) {
  if (inter / inter_rate > intra / intra_rate) {
    c.link = LinkClass::kInterNode;
    c.rate = inter_rate;
    c.wire_bytes = inter;
  } else {
    c.link = LinkClass::kIntraNode;
    c.rate = intra_rate;
    c.wire_bytes = intra;
  }
}

}  // namespace

double bus_bandwidth_factor(CollectiveOp op, int n) {
  switch (op) {
    case CollectiveOp::kAllReduce: return 2.0 * (n - 1) / n;
    case CollectiveOp::kReduceScatter:
    case CollectiveOp::kAllGather:
    case CollectiveOp::kAllToAll: return static_cast<double>(n - 1) / n;
    case CollectiveOp::kBroadcast:
    case CollectiveOp::kSendRecv: return 1.0;
  }
  return 1.0;
}

TimeNs CollectiveCost::total() const { return collective_time(latency, wire_bytes, rate); }

AnalyticCommModel::AnalyticCommModel(const ClusterSpec& cluster) : cluster_(cluster) {
  // Note [NCCL protocols]: what every collective asks, worked out once.
  const auto& c = cluster_;
  const bool intra_ok = c.intra_node.type == "nvlink" || c.intra_node.type == "pcie";
  const bool inter_ok = c.nodes == 1 || c.inter_node.type == "infiniband" || c.inter_node.type == "ethernet";
  protocols_ = c.nccl_protocol_model && c.device.compute_capability > 0 && !c.device.gloo_collectives && intra_ok && inter_ok;
  intra_hw_ = hardware_of(c.intra_node.type);
  intra_wire_us_ = std::max(0.0, ns_to_seconds(c.intra_node.latency) * 1e6 - kHwLatencyUs[intra_hw_][kRingAlgo][0]);
  inter_wire_us_ = std::max(0.0, ns_to_seconds(c.inter_node.latency) * 1e6 - kHwLatencyUs[kNetHw][kRingAlgo][0]);
  // LL128: sm70 and up over NVLink, and across nodes a NIC per GPU.
  ll128_ = c.device.compute_capability >= 70 && c.intra_node.type == "nvlink";
  ll128_across_ = ll128_ && c.nics_per_node >= c.gpus_per_node;
}

bool AnalyticCommModel::protocol_model() const { return protocols_; }

bool AnalyticCommModel::nvls_available() const {
  // NVLS and NVLSTree run Simple only: NCCL_PROTO without it disables them.
  const bool simple = (cluster_.nccl_proto & (1 << static_cast<int>(NcclProtocol::kSimple))) != 0;
  return cluster_.nccl_nvls_enable && cluster_.intra_node.nvls_efficiency > 0 && simple;
}

BytesPerSec AnalyticCommModel::link_capacity(LinkClass link, int groups_per_node) const {
  switch (link) {
    case LinkClass::kIntraNode: return cluster_.intra_node.rate();
    case LinkClass::kInterNode:
      return cluster_.inter_node.rate() * cluster_.nics_per_node / std::max(1, groups_per_node);
    case LinkClass::kHostDevice: return cluster_.host_device_bandwidth;
  }
  return 0;
}

CollectiveCost AnalyticCommModel::with_algorithm(const std::string& algorithm, CollectiveOp op,
                                                 Bytes bytes, const CommGroup& g) const {
  if (!protocol_model() || algorithm == "nvls" || algorithm == "nvlstree" || op == CollectiveOp::kSendRecv || op == CollectiveOp::kAllToAll ||
      g.ranks <= 1) {
    return priced(algorithm, op, bytes, g);
  }
  // Note [NCCL protocols]: the cheapest of those NCCL enables, each from
  // the same links and bytes.
  CollectiveCost c = priced(algorithm, op, bytes, g);
  if (c.algorithm != "tree" && c.algorithm != "ring") return c;
  int best = -1;
  TimeNs best_latency = 0, best_total = 0;
  double best_rate = 0;
  for (int p = 0; p < 3; ++p) {
    if (!protocol_enabled(p, g)) continue;
    TimeNs latency = 0;
    double rate = c.rate;
    in_protocol(c, p, op, bytes, g, latency, rate);
    const TimeNs total = collective_time(latency, c.wire_bytes, rate);
    if (best < 0 || total < best_total) {
      best = p;
      best_latency = latency;
      best_rate = rate;
      best_total = total;
    }
  }
  DTSIM_ASSERT(best >= 0, "nccl_proto leaves no protocol");
  c.latency = best_latency;
  c.rate = best_rate;
  c.protocol = to_string(static_cast<NcclProtocol>(best));
  return c;
}

CollectiveCost AnalyticCommModel::with_protocol(const std::string& algorithm, const std::string& protocol,
                                                CollectiveOp op, Bytes bytes, const CommGroup& g) const {
  if (!protocol_model()) throw UnsupportedError("protocols: this cluster's collectives take one line (Note [NCCL protocols])");
  const int p = protocol_index(protocol);
  CollectiveCost c = priced(algorithm, op, bytes, g);
  if (c.algorithm != "tree" && c.algorithm != "ring") return c;
  in_protocol(c, p, op, bytes, g, c.latency, c.rate);
  c.protocol = to_string(static_cast<NcclProtocol>(p));
  return c;
}

bool AnalyticCommModel::protocol_enabled(int p, const CommGroup& g) const {
  if ((cluster_.nccl_proto & (1 << p)) == 0) return false;
  if (p != static_cast<int>(NcclProtocol::kLL128)) return true;
  return g.nodes() == 1 ? ll128_ : ll128_across_;
}

CollectiveCost AnalyticCommModel::priced(const std::string& algorithm, CollectiveOp op, Bytes bytes,
                                         const CommGroup& g) const {
  CollectiveCost c;
  const int n = g.ranks;
  DTSIM_ASSERT(n >= 1 && g.ranks_per_node >= 1, "empty communicator");
  if (n == 1 && op != CollectiveOp::kSendRecv) {
    c.algorithm = "local";
    return c;  // a collective over one rank is a no-op
  }
  const int nodes = g.nodes();
  const bool multi_node = nodes > 1;
  const BytesPerSec net = link_capacity(LinkClass::kInterNode, g.groups_per_node);
  const BytesPerSec intra = cluster_.intra_node.rate();
  if (multi_node) {
    const bool intra_used = g.ranks_per_node > 1;
    c.rate = intra_used ? std::min(intra, net) : net;
    c.link = (!intra_used || net <= intra) ? LinkClass::kInterNode : LinkClass::kIntraNode;
  } else {
    c.rate = intra;
    c.link = LinkClass::kIntraNode;
  }
  const double s = static_cast<double>(bytes);
  if (op == CollectiveOp::kSendRecv) {
    c.algorithm = "p2p";
    // Note [A ring step]
    // Between two ranks, one transfer to the peer, one hop; across nodes a
    // single NIC carries it. Over more than two ranks send_recv is one
    // step of a ring, every rank sending its block to the next at once:
    // context parallelism's K/V ring (Note [Context-parallel exchange] in
    // lowering/passes/context_parallel.cpp prices its steps so). It is
    // priced as one pair's transfer: on an NVSwitch node each GPU's send
    // has its own links at the intra-node rate, and a ring laid over nodes
    // crosses each node boundary once, one NIC a crossing. Where a node's
    // GPUs share their links (a V100 cube-mesh, PCIe) the ring's sends
    // would share them too, and the step is priced short.
    // `dtsim comm --op send_recv --ranks N` prints it.
    if (multi_node) c.rate = cluster_.inter_node.rate();
    c.latency = kCollectiveBaseLatency + (multi_node ? cluster_.inter_node.latency : cluster_.intra_node.latency);
    c.wire_bytes = s;
    return c;
  }
  if (op == CollectiveOp::kAllToAll) {
    // Note [All-to-all]
    // NCCL runs all-to-all as grouped point-to-point sends, every peer at
    // once (nccl-tests' alltoall_perf): a rank keeps 1/n of its S bytes and
    // sends S/n to each other rank, so S (n-1)/n leave it (busbw = algbw x
    // (n-1)/n). Of them S (n-g)/n go to the other nodes (g ranks a node),
    // through the node's NICs shared by its g ranks and by the identical
    // groups beside them; S (g-1)/n stay on the intra-node link. Both move
    // at once: the slower is the bottleneck, and the flow is priced on it.
    // One round of hops: base latency and one hop of the farthest link.
    c.algorithm = "p2p";
    const int g_local = std::min(g.ranks_per_node, n);
    const double intra_bytes = s * (g_local - 1) / n, inter_bytes = s * (n - g_local) / n;
    const double inter_rate = net / std::max(1, g_local);
    slower_path(c, multi_node ? inter_bytes : 0, inter_rate, intra_bytes, intra);
    c.latency = kCollectiveBaseLatency + (multi_node ? cluster_.inter_node.latency : cluster_.intra_node.latency);
    return c;
  }
  if (algorithm == "tree") {
    if (op != CollectiveOp::kAllReduce || !multi_node) {
      throw UnsupportedError(std::string("tree algorithm: NCCL uses it only for all_reduce across nodes"));
    }
    c.algorithm = "tree";
    c.wire_bytes = 2.0 * s;
    const int log_nodes = static_cast<int>(std::ceil(std::log2(static_cast<double>(nodes))));
    c.latency = kCollectiveBaseLatency +
                2 * (log_nodes * cluster_.inter_node.latency + (g.ranks_per_node - 1) * cluster_.intra_node.latency);
    return c;
  }
  if (algorithm == "nvls") {
    // Note [NVLink SHARP].
    if (op != CollectiveOp::kAllReduce || multi_node || !nvls_available()) {
      throw UnsupportedError(
          "nvls algorithm: NCCL uses NVLink SHARP only for all_reduce inside one node whose NVLink can reduce "
          "(intra_node.nvls_efficiency > 0, nccl_nvls_enable)");
    }
    c.algorithm = "nvls";
    if (protocol_model()) c.protocol = "Simple";
    c.latency = kNvlsLatency;
    c.rate = cluster_.intra_node.bandwidth * cluster_.intra_node.nvls_efficiency;
    c.link = LinkClass::kIntraNode;
    c.wire_bytes = s * (n + 1) / n;
    return c;
  }
  if (algorithm == "nvlstree") {
    // Note [NVLSTree].
    if (op != CollectiveOp::kAllReduce || !multi_node || g.ranks_per_node < 2 || !nvls_available()) {
      throw UnsupportedError(
          "nvlstree algorithm: NCCL uses NVLSTree only for all_reduce across nodes, with at least two ranks on "
          "each node whose NVLink can reduce (intra_node.nvls_efficiency > 0, nccl_nvls_enable)");
    }
    c.algorithm = "nvlstree";
    if (protocol_model()) c.protocol = "Simple";
    const int local = g.ranks_per_node;
    const double nvlink_bytes = s * (local + 1) / local;
    const double nvlink_rate = cluster_.intra_node.bandwidth * cluster_.intra_node.nvls_efficiency;
    // A rank's share of the node's: its NIC head carries 1/local of the
    // node's bytes at 1/local of the group's NICs (flows across nodes are
    // a rank's, as the all-to-all's: the executor's link is the rank's).
    const double nic_bytes = (nodes == 2 ? s : 2.0 * s) / local, nic_rate = net / local;
    slower_path(c, nic_bytes, nic_rate, nvlink_bytes, nvlink_rate);
    // The tuner's cap: a channel a NIC head, each at most
    // perChMaxNVLSTreeBws of bus bandwidth (Hopper and later).
    const int cc = cluster_.device.compute_capability;
    if (cc >= 90) {
      const int heads = std::max(1, std::min(local, cluster_.nics_per_node / std::max(1, g.groups_per_node)));
      const double per_channel = kNvlsTreeMaxBusBwPerChannel[cc >= 100 ? 1 : 0][nodes == 2 ? 0 : 1] * kGiga;
      const double capped_s = bus_bandwidth_factor(op, n) * s / (heads * per_channel);
      if (capped_s > c.wire_bytes / c.rate) {
        // The NICs' bytes, slower than they could go (the executor shares
        // their capacity between flows by these bytes).
        c.link = LinkClass::kInterNode;
        c.wire_bytes = nic_bytes;
        c.rate = nic_bytes / capped_s;
      }
    }
    // Medium sizes fall short of the line, as the tree's do.
    c.rate *= tree_correction(static_cast<int>(NcclProtocol::kSimple), bytes, 24);
    const double net_step_us = kNvlsTreeNetStepUs + 2 * inter_wire_us_;
    c.latency = kNvlsLatency + us(2 * log2i(nodes) * net_step_us);
    return c;
  }
  if (algorithm != "ring") {
    throw UnsupportedError("unknown algorithm '" + algorithm + "'; valid: ring, tree, nvls, nvlstree");
  }
  c.algorithm = "ring";
  c.wire_bytes = bus_bandwidth_factor(op, n) * s;
  const TimeNs hop = multi_node ? cluster_.inter_node.latency : cluster_.intra_node.latency;
  c.latency = kCollectiveBaseLatency + ring_steps(op, n) * hop;
  return c;
}

// Note [NCCL protocols]: a step's latency inside a node and across nodes.
void AnalyticCommModel::in_protocol(const CollectiveCost& line, int p, CollectiveOp op, Bytes bytes, const CommGroup& g,
                                    TimeNs& latency, double& rate) const {
  if (line.algorithm == "tree") {
    nccl_tree(latency, rate, p, bytes, g);
  } else {
    nccl_ring(latency, rate, p, op, bytes, g);
  }
}

std::pair<double, double> AnalyticCommModel::step_latency_us(int algo, int p, const CommGroup& g) const {
  double intra = kHwLatencyUs[intra_hw_][algo][p] + intra_wire_us_;
  double inter = 0;
  if (g.nodes() > 1) {
    const double wire = inter_wire_us_;
    const bool simple = p == static_cast<int>(NcclProtocol::kSimple);
    // One rank a node: the ring's network steps are the tree's (tuning.cc).
    const int net_algo = algo == kRingAlgo && g.ranks_per_node == 1 ? kTreeAlgo : algo;
    inter = kHwLatencyUs[kNetHw][net_algo][p] + wire * (simple ? 2 : 1);
    if (algo == kRingAlgo) intra = std::max(intra, kNetOverheadUs * (simple ? 3 : 1));
  }
  return {intra, inter};
}

void AnalyticCommModel::nccl_ring(TimeNs& latency, double& rate, int p, CollectiveOp op, Bytes bytes,
                                  const CommGroup& g) const {
  const int n = g.ranks, nodes = g.nodes();
  const auto [intra, inter] = step_latency_us(kRingAlgo, p, g);
  const int steps = ring_steps(op, n);
  const int net_steps = nodes == 1 ? 0 : (op == CollectiveOp::kAllReduce ? 2 * (nodes - 1) : nodes - 1);
  double lat = kBaseLatencyUs[kRingAlgo][p] + (steps - net_steps) * intra + net_steps * inter;
  // The tuner's "plateau effect of ring": Simple all-reduces across nodes
  // once each channel's share is 64 bytes a rank (so at any channel count
  // from this size).
  const bool simple = p == static_cast<int>(NcclProtocol::kSimple);
  if (simple && nodes > 1 && op == CollectiveOp::kAllReduce && static_cast<double>(bytes) >= 64.0 * 64 * n) {
    lat *= cluster_.device.compute_capability < 80 ? 1.9 : 1.4;
  }
  latency = us(lat);
  if (p == static_cast<int>(NcclProtocol::kLL)) {
    rate = std::min(rate * 0.5, ll_max_bus_bandwidth(nodes));
  } else if (p == static_cast<int>(NcclProtocol::kLL128)) {
    rate *= 0.92;
  }
}

void AnalyticCommModel::nccl_tree(TimeNs& latency, double& rate_io, int p, Bytes bytes, const CommGroup& g) const {
  const int nodes = g.nodes();
  const auto [intra, inter] = step_latency_us(kTreeAlgo, p, g);
  latency = us(kBaseLatencyUs[kTreeAlgo][p] + 2 * ((g.ranks_per_node - 1) * intra + log2i(nodes) * inter));
  double rate = rate_io * 0.92;
  if (p == static_cast<int>(NcclProtocol::kLL)) rate = std::min(rate / 3.8, ll_max_bus_bandwidth(nodes));
  if (p == static_cast<int>(NcclProtocol::kLL128)) rate *= nodes == 1 ? 7.0 / 9.0 : 120.0 / 128.0;
  rate *= tree_correction(p, bytes, 23);
  rate_io = rate;
}

BytesPerSec AnalyticCommModel::ll_max_bus_bandwidth(int nodes) const {
  const int cc = cluster_.device.compute_capability;
  const int arch = cc >= 100 ? 3 : cc >= 90 ? 2 : cc >= 80 ? 1 : 0;
  // Across nodes the tuner's row is the host CPU's (x86 Intel: the first).
  const int row = nodes == 1 ? arch : 0;
  const int col = nodes <= 2 ? nodes - 1 : 2;
  return kLlMaxBusBw[row][col] * kGiga;
}

CollectiveCost AnalyticCommModel::collective(CollectiveOp op, Bytes bytes, const CommGroup& g) const {
  CollectiveCost best = with_algorithm("ring", op, bytes, g);
  if (op == CollectiveOp::kAllReduce && g.nodes() > 1) {
    CollectiveCost tree = with_algorithm("tree", op, bytes, g);
    if (tree.total() < best.total()) best = tree;
    if (g.ranks_per_node > 1 && nvls_available()) {
      CollectiveCost nvls_tree = with_algorithm("nvlstree", op, bytes, g);
      if (nvls_tree.total() < best.total()) best = nvls_tree;
    }
  }
  if (op == CollectiveOp::kAllReduce && g.nodes() == 1 && g.ranks > 1 && nvls_available()) {
    CollectiveCost nvls = with_algorithm("nvls", op, bytes, g);
    if (nvls.total() < best.total()) best = nvls;
  }
  return best;
}

// Note [DeepEP]
// DeepEP (deepseek-ai/DeepEP; DeepSeek-V3 report, arXiv 2412.19437,
// section 3.2.2) sends each token once over RDMA to every other node that
// holds one of its top-k experts, to the GPU of the same local index there,
// which forwards it over NVLink to the experts' GPUs; the combine runs the
// same paths back. NCCL's all-to-all (Note [All-to-all]) sends each of the
// k copies apart, so a token whose experts share a node crosses the NICs
// once per expert. With the experts spread evenly over the N nodes of the
// expert-parallel group and a token's k experts drawn uniformly from the
// E, another node holds none of them with probability
// P0 = C(E - E/N, k) / C(E, k), so a token reaches (N - 1)(1 - P0) other
// nodes on average; node-limited routing (DeepSeek-V3's topk_group: at most
// M nodes a token) caps that at M (N - 1)/N. Of a rank's S bytes (k copies
// of each of its tokens), S/k x that many cross its share of the node's
// NICs; every copy but those for the forwarding GPU itself crosses NVLink
// once, S (g - 1)/g. The slower of the two paths prices the flow, as for
// the all-to-all. Within one node DeepEP's kernels are NVLink all-to-alls:
// priced as NCCL's.
CollectiveCost AnalyticCommModel::expert_dispatch(Bytes bytes, const ExpertRoute& route, const CommGroup& g) const {
  const int nodes = g.nodes();
  if (nodes <= 1 || route.top_k <= 0 || route.experts <= 0) return collective(CollectiveOp::kAllToAll, bytes, g);
  const double E = route.experts, k = std::min(route.top_k, route.experts), N = nodes;
  double p0 = 1;  // no expert of the token on a given other node
  for (int i = 0; i < static_cast<int>(k); ++i) p0 *= std::max(0.0, (E - E / N - i) / (E - i));
  double remote = (N - 1) * (1 - p0);
  if (route.node_limit > 0) remote = std::min(remote, route.node_limit * (N - 1) / N);
  const int g_local = std::max(1, std::min(g.ranks_per_node, g.ranks));
  const double s = static_cast<double>(bytes);
  const double inter_bytes = s / k * remote, intra_bytes = s * (g_local - 1) / g_local;
  const double inter_rate = link_capacity(LinkClass::kInterNode, g.groups_per_node) / g_local;
  const double intra = cluster_.intra_node.rate();
  CollectiveCost c;
  c.algorithm = "deepep";
  slower_path(c, inter_bytes, inter_rate, intra_bytes, intra);
  // RDMA, then the NVLink hop.
  c.latency = kCollectiveBaseLatency + cluster_.inter_node.latency + cluster_.intra_node.latency;
  return c;
}

CollectiveCost AnalyticCommModel::host_copy(Bytes bytes) const {
  CollectiveCost c;
  c.algorithm = "memcpy";
  c.latency = kCopyBaseLatency;
  c.wire_bytes = static_cast<double>(bytes);
  c.rate = cluster_.host_device_bandwidth;
  c.link = LinkClass::kHostDevice;
  return c;
}

CommGroup axis_group(const Mesh& mesh, Axis axis, int per_node, int members, int step) {
  CommGroup g;
  g.ranks = members == 0 ? mesh.size(axis) : members;
  if (g.ranks <= 1) return g;
  const int stride = mesh.stride(axis) * step;
  g.ranks_per_node = stride >= per_node ? 1 : std::min(g.ranks, per_node / stride);
  // Groups interleaved on a node cross its NICs at once.
  g.groups_per_node = std::max(1, std::min(stride, per_node));
  return g;
}

CommGroup data_group(const Mesh& mesh, int per_node) {
  if (mesh.size(Axis::kCp) <= 1) return axis_group(mesh, Axis::kDp, per_node);
  const CommGroup dp = axis_group(mesh, Axis::kDp, per_node);
  const CommGroup cp = axis_group(mesh, Axis::kCp, per_node);
  CommGroup g;
  g.ranks = dp.ranks * cp.ranks;
  // Members on one node: those of each axis that fit in it, multiplied
  // (nodes of consecutive ranks hold whole inner axes).
  g.ranks_per_node = std::max(1, std::min(g.ranks, dp.ranks_per_node * cp.ranks_per_node));
  g.groups_per_node = std::max(1, per_node / g.ranks_per_node);
  return g;
}

// Note [Expert mesh]
// Megatron-Core builds the expert-parallel groups from the same ranks as the
// dense ones (parallel_state.initialize_model_parallel, its expert
// RankGenerator of order tp-ep-dp-pp): within one pipeline stage, the tp x
// cp x dp ranks are taken in rank order and refolded as etp (innermost),
// then ep, then the expert data-parallel remainder edp = tp cp dp / (ep
// etp). Expert parameters' gradients are reduced, and the distributed
// optimizer shards them, over edp; tokens are exchanged over ep. Here a
// stage's j-th rank is the rank whose non-pipeline coordinates, read
// innermost first, spell j (Mesh::stage_index; Mesh::expert_group lists a
// group's ranks, from which dtsim validate's runtime builds its ep and edp
// process groups); a group's members on rank 0's node and the groups that
// share that node come from enumerating it.
CommGroup expert_group(const Mesh& mesh, int etp, int ep, Axis axis, int per_node, int sub_members, int step) {
  const int stage_ranks = mesh.ranks() / mesh.size(Axis::kPp);
  DTSIM_ASSERT(etp >= 1 && ep >= 1 && stage_ranks % (etp * ep) == 0, "expert mesh does not fold the stage's ranks");
  const int edp = stage_ranks / (etp * ep);
  const int axis_members = axis == Axis::kTp ? etp : axis == Axis::kEp ? ep : edp;
  DTSIM_ASSERT(step >= 1 && sub_members >= 0 && (sub_members == 0 || sub_members * step <= axis_members), "expert sub-group outside its axis");
  const int members = sub_members == 0 ? axis_members : sub_members;
  const int jstride = (axis == Axis::kTp ? 1 : axis == Axis::kEp ? etp : etp * ep) * step;
  CommGroup g;
  g.ranks = members;
  if (members <= 1) return g;
  auto rank_of = [&](int j) { return mesh.stage_rank(0, j); };
  auto index_of = [&](int rank) { return mesh.stage_index(rank); };
  int on_node = 0;
  for (int k = 0; k < members; ++k) on_node += rank_of(k * jstride) / per_node == 0 ? 1 : 0;
  g.ranks_per_node = std::max(1, on_node);
  std::set<std::pair<int, int>> groups;  // (stage, index with the axis's coordinate zeroed)
  for (int r = 0; r < std::min(per_node, mesh.ranks()); ++r) {
    const int j = index_of(r);
    groups.insert({mesh.coord(Axis::kPp, r), j - ((j / jstride) % members) * jstride});
  }
  g.groups_per_node = std::max(1, static_cast<int>(groups.size()));
  return g;
}

CommGroup expert_dispatch_group(const Mesh& mesh, int etp, int ep, MoeDispatcher dispatcher, int per_node) {
  // The etp x ep ranks are the expert tensor-parallel group of a mesh whose
  // experts split etp x ep ways over one expert-parallel rank.
  if (dispatcher == MoeDispatcher::kAllGather) return expert_group(mesh, etp * ep, 1, Axis::kTp, per_node);
  return expert_group(mesh, etp, ep, Axis::kEp, per_node);
}

}  // namespace dtsim::sim
