#pragma once
// Devices and clusters: what the hardware can do. Built-in devices come from
// vendor datasheets (device_db.cpp cites each figure); a cluster YAML names a
// device and may override any of its fields.

#include <cstdint>
#include <limits>
#include <string>
#include <vector>

#include "dtsim/sim/units.hpp"

namespace dtsim::sim {

/// Numeric precision of weights and activations. kFp8 is FP8 training as
/// Transformer Engine and torchao run it: the GEMMs of the transformer blocks
/// in FP8 with per-tensor scales, everything else (weights, gradients,
/// activations, attention, norms) in bf16 with fp32 master weights (Note
/// [FP8 training] in sim/src/cost/cost_compute.cpp). kFp4 is NVFP4 training
/// as Transformer Engine runs it (NVFP4BlockScaling, Megatron's --fp4-format
/// e2m1): the same GEMMs in 4-bit E2M1 with a scale for each 16 elements,
/// everything else as under fp8 (Note [NVFP4 training]).
enum class Precision { kFp32, kFp16, kBf16, kFp8, kFp4 };
/// The transformer blocks' Linear GEMMs run quantised (fp8 or fp4), the rest
/// in bf16 (Note [FP8 training], Note [NVFP4 training]).
inline bool quantized_gemms(Precision p) { return p == Precision::kFp8 || p == Precision::kFp4; }
/// How FP8 training scales a tensor before its cast (Megatron-LM's
/// --fp8-recipe): `delayed`, from the amax history of earlier steps
/// (Transformer Engine's DelayedScaling, Megatron's default), the amax of
/// this one recorded during the cast; `tensorwise`, from the tensor's own
/// amax, measured by a pass of its own before the cast (Float8CurrentScaling,
/// Megatron-Bridge's FP8-CS); `mxfp8`, a power-of-two scale for each 32
/// elements found by the cast itself (MXFP8BlockScaling, Blackwell's
/// block-scaled tensor cores only). Note [FP8 training] in cost_compute.cpp.
enum class Fp8Recipe { kDelayed, kTensorwise, kMxfp8 };
/// "fp32", "fp16", "bf16", "fp8", "fp4".
const char* to_string(Precision p);
/// Bytes per element of the working (compute) precision: 4 in fp32, else 2
/// (under fp8 the stored weights, gradients and activations stay bf16).
int element_bytes(Precision p);

/// One accelerator (or the host CPU used as a device).
/// DeviceSpec::send_waits_for_core: no bound, the notice waits for the
/// sender's pass to end (Note [Quiet sender] in sim/src/engine/executor.cpp).
inline constexpr TimeNs kUntilPassEnds = std::numeric_limits<TimeNs>::max();
/// The host scheduler's tick on Debian's kernels (CONFIG_HZ=250): how long
/// a woken Gloo loop at the rank's own priority waits for the core at most
/// (Note [Busy sender] in sim/src/engine/executor.cpp).
inline constexpr TimeNs kSchedulerTick = 4 * kNsPerMs;

/// The channels NCCL runs a ring collective on inside an NVSwitch node, a
/// thread block and an SM each (Note [Interference prior] in
/// sim/src/config/device_db.cpp).
inline constexpr int kNvswitchNcclChannels = 24;

struct DeviceSpec {
  std::string name;                 ///< "A100-SXM4-80GB"
  Bytes memory = 0;                 ///< usable device memory
  FlopsPerSec peak_fp32 = 0;        ///< dense FP32 (no tensor cores)
  FlopsPerSec peak_tf32 = 0;        ///< dense TF32 tensor cores (0: none; fp32 GEMMs use peak_fp32)
  FlopsPerSec peak_fp16 = 0;        ///< dense FP16 tensor cores (or FP16 ALUs)
  FlopsPerSec peak_bf16 = 0;        ///< dense BF16 (0: unsupported)
  FlopsPerSec peak_fp8 = 0;         ///< dense FP8 tensor cores (0: none; Hopper, Ada and later)
  FlopsPerSec peak_fp4 = 0;         ///< dense NVFP4 tensor cores, the datasheet's (0: none; Blackwell)
  BytesPerSec memory_bandwidth = 0; ///< DRAM/HBM bandwidth
  int compute_units = 1;            ///< SMs (or cores): sets GEMM wave quantisation
  double gemm_efficiency = 0.75;    ///< best fraction of peak a large GEMM reaches
  double memory_efficiency = 0.80;  ///< fraction of bandwidth memory-bound kernels reach
  /// Fraction of peak a fused attention kernel reaches, forward and
  /// backward (0: the GEMM efficiency); Note [Fused attention] in cost_compute.cpp.
  double attention_efficiency = 0;
  TimeNs kernel_launch = 4 * kNsPerUs;  ///< fixed cost per kernel launch
  Bytes runtime_reserved = 0;       ///< context + allocator overhead outside tensors
  /// Bytes of a saved dropout mask element (WorkloadShape::mask_bytes); 0:
  /// the activation's element size, as LibTorch's CPU dropout keeps it.
  int dropout_mask_bytes = 1;
  /// LSTMs run fused (cuDNN) rather than as ATen's composite cell, as
  /// LibTorch does on CPU (WorkloadShape::fused_rnn).
  bool fused_rnn = true;
  /// The optimizer step is fused, making no temporaries (apex and
  /// DeepSpeed's FusedAdam on GPUs); false where it runs tensor by tensor in
  /// unfused ops (torch.optim's default on CPUs, dtsim's runtime), holding
  /// Note [Unfused step]'s temporaries in sim/cost.hpp.
  bool fused_optimizer = true;
  /// Collectives run through Gloo (CPU ranks), not NCCL. Gloo has no
  /// reduce-scatter: ZeRO's is an all-to-all into a receive buffer as large
  /// as the bucket, then a local sum; and its all-gather into separate
  /// outputs gathers into one flat buffer first (Note [ZeRO]).
  bool gloo_collectives = false;
  /// CUDA compute capability x 10 (80: Ampere, 90: Hopper, 100: Blackwell);
  /// 0 where the device is no NVIDIA GPU. NCCL's protocol model takes its
  /// per-architecture figures from it (Note [NCCL protocols] in cost_comm.cpp).
  int compute_capability = 0;
  /// Collectives progress beside compute (GPU copy engines and NICs). False
  /// where the ranks are CPU cores: Gloo's threads need the same cores.
  bool comm_overlaps_compute = true;
  /// Where > 0, a receiver's notice to a pipeline's sender is handled only
  /// once the sender's compute stream is idle or ends a pass, or has been
  /// busy this long since it last came from idle (the host scheduler's
  /// slice, checked at ticks, where Gloo's loop runs at the rank's
  /// priority; kUntilPassEnds where it runs at the lowest): Gloo's thread
  /// that handles it needs the core the sender computes on (Notes [Busy
  /// sender] and [Quiet sender] in sim/src/engine/executor.cpp). 0: at
  /// once (NCCL, copy engines). A profile that records how its Gloo loops
  /// ran decides it for the ranks it prices (CommModel::send_waits_for_core).
  TimeNs send_waits_for_core = 0;
  /// How much longer compute-bound kernels take while a collective runs
  /// beside them (0.1: at 1/1.1 of their speed): NCCL's channels take SMs
  /// (Note [Interference prior] in sim/src/config/device_db.cpp; the HBM
  /// they take is comm_hbm_traffic's). 0 where collectives do not slow
  /// compute at all (neither half is counted).
  double comm_slowdown = 0;
  /// Bytes of HBM traffic a byte a collective moves over a link costs: what
  /// slows the memory-bound kernels beside it (Note [Interference prior];
  /// 3, "at least 2x ... it can be 3x", NVIDIA/nccl #1428). 0: not counted.
  double comm_hbm_traffic = 3.0;
  /// How much more the memory-bound kernels slow than the HBM share the
  /// collectives take says (h / (1 - h)): 1 by the prior; a profile's
  /// measurement (Note [Interference fit] in calibrate/src/fit.cpp) sets it.
  double comm_hbm_contention = 1.0;
  /// Under fp8, how the casts to FP8 find their scales: the plan's
  /// fp8_recipe, which the pricing of a plan sets on its copy of the device
  /// (Note [FP8 training] in sim/src/cost/cost_compute.cpp: what each cast
  /// reads and writes, and MXFP8's slower GEMMs).
  Fp8Recipe fp8_recipe = Fp8Recipe::kDelayed;
  std::string source;               ///< where the figures come from
  /// Peak dense FLOP/s for GEMMs in precision p (kFp8: the FP8 GEMMs; 0 where
  /// the device has no FP8, which resolve() refuses before anything asks).
  FlopsPerSec peak_for(Precision p) const;
};

/// Built-in device database.
const std::vector<DeviceSpec>& builtin_devices();
/// A built-in device by name (case-insensitive), or nullptr.
const DeviceSpec* find_device(const std::string& name);

/// A point-to-point link class.
struct LinkSpec {
  std::string type;               ///< "nvlink", "xgmi" (AMD Infinity Fabric), "pcie", "infiniband", "ethernet", "shm"
  BytesPerSec bandwidth = 0;      ///< per GPU, per direction: the line rate
  TimeNs latency = 0;             ///< per hop
  /// The share of the line rate NCCL's collectives reach as bus bandwidth
  /// at large sizes (Note [NCCL below the line rate] in cost_comm.cpp).
  double efficiency = 1.0;
  /// NVLink SHARP: the share of the line rate an all-reduce reduced in the
  /// NVSwitch moves at, per direction (0: the switch cannot reduce); Note
  /// [NVLink SHARP] in cost_comm.cpp. Intra-node NVLink only.
  double nvls_efficiency = 0;
  /// What collectives move through the link: bandwidth x efficiency.
  BytesPerSec rate() const { return bandwidth * efficiency; }
};

/// NCCL's protocols (src/device/prims_*.h): LL moves 4 bytes of data with a
/// 4-byte flag, LL128 120 of every 128 bytes, Simple whole buffers behind a
/// fence. ClusterSpec::nccl_proto has bit 1 << p for each one allowed.
enum class NcclProtocol { kLL = 0, kLL128 = 1, kSimple = 2 };
const char* to_string(NcclProtocol p);

/// A homogeneous cluster: `nodes` x `gpus_per_node` identical devices.
struct ClusterSpec {
  std::string name;
  int nodes = 1;
  int gpus_per_node = 1;
  DeviceSpec device;
  LinkSpec intra_node;            ///< between GPUs of one node
  LinkSpec inter_node;            ///< one NIC
  int nics_per_node = 1;
  Bytes host_memory = 0;          ///< per host
  BytesPerSec host_device_bandwidth = 0;  ///< PCIe (or NVLink-C2C) host<->GPU, per GPU per direction
  BytesPerSec host_memory_bandwidth = 0;  ///< per host, shared by its GPUs' host work
  FlopsPerSec host_flops = 0;             ///< per host (CPU optimizer)
  /// GPUs one host's figures serve; 0: the node's. A node is what shares
  /// one NVLink (scale-up) domain and its NICs, so a GB200 NVL72 rack is
  /// one node of 72 GPUs whose hosts are its compute trays of 4 (Note
  /// [NVLink domains] in config_io.cpp).
  int host_gpus = 0;
  /// NCCL_NVLS_ENABLE: NCCL reduces all-reduces in the NVSwitch where the
  /// intra-node link can (nvls_efficiency > 0). NCCL's default is on; NeMo's
  /// and Megatron-Bridge's performance recipes turn it off to save memory.
  bool nccl_nvls_enable = true;
  /// NCCL_PROTO: the protocols NCCL may choose from, a bit per NcclProtocol
  /// (Note [NCCL protocols] in cost_comm.cpp); all three by default, LL128
  /// then only where NCCL enables it.
  int nccl_proto = 7;
  /// Price collectives with NCCL's protocols where the device and links
  /// have them; false: one alpha-beta line per link, the per-hop latency
  /// as given (a profile's fitted line: ProfileCommModel).
  bool nccl_protocol_model = true;
  /// Total GPUs.
  int gpus() const { return nodes * gpus_per_node; }
  /// GPUs sharing one host's memory bandwidth and cores.
  int gpus_per_host() const { return host_gpus > 0 ? host_gpus : gpus_per_node; }
};

}  // namespace dtsim::sim
