// The built-in device database. Peak rates are dense (no structured
// sparsity), at boost clock, from the vendor's datasheet or whitepaper named
// beside each entry. gemm_efficiency is the fraction of that peak a large
// cuBLAS GEMM sustains in training (a prior until calibration measures it);
// runtime_reserved is the CUDA context plus cuBLAS/cuDNN workspaces that
// nvidia-smi shows but the caching allocator does not.
#include <algorithm>
#include <cctype>

#include "dtsim/sim/cluster.hpp"

namespace dtsim::sim {

const char* to_string(Precision p) {
  switch (p) {
    case Precision::kFp32: return "fp32";
    case Precision::kFp16: return "fp16";
    case Precision::kBf16: return "bf16";
    case Precision::kFp8: return "fp8";
    case Precision::kFp4: return "fp4";
  }
  return "?";
}

int element_bytes(Precision p) { return p == Precision::kFp32 ? 4 : 2; }

FlopsPerSec DeviceSpec::peak_for(Precision p) const {
  switch (p) {
    // PyTorch disables TF32 for matmuls by default (torch.backends.cuda.
    // matmul.allow_tf32 = False since 1.12), so fp32 GEMMs run on the FP32 units.
    case Precision::kFp32: return peak_fp32;
    case Precision::kFp16: return peak_fp16 > 0 ? peak_fp16 : peak_fp32;
    case Precision::kBf16: return peak_bf16 > 0 ? peak_bf16 : peak_fp32;
    // Only FP8 GEMMs ask for this (Note [FP8 training] in cost_compute.cpp);
    // resolve() refuses fp8 where the device has none, so the fallback to
    // the bf16 rate only keeps a direct caller from dividing by zero.
    case Precision::kFp8: return peak_fp8 > 0 ? peak_fp8 : peak_for(Precision::kBf16);
    // The datasheet's, for MFU: NVFP4 GEMMs are priced from FP8's (Note
    // [NVFP4 training]), since they reach far less of this peak.
    case Precision::kFp4: return peak_fp4 > 0 ? peak_fp4 : peak_for(Precision::kFp8);
  }
  return peak_fp32;
}

namespace {

DeviceSpec gpu(const char* name, double mem_gib, double fp32_tf, double tf32_tf, double fp16_tf, double bf16_tf,
               double bw_gbs, int sms, double gemm_eff, double reserved_gib, const char* source, double fp8_tf = 0,
               double fp4_tf = 0) {
  DeviceSpec d;
  d.name = name;
  d.memory = static_cast<Bytes>(mem_gib * kGiB);
  d.peak_fp32 = fp32_tf * kTera;
  d.peak_tf32 = tf32_tf * kTera;
  d.peak_fp16 = fp16_tf * kTera;
  d.peak_bf16 = bf16_tf * kTera;
  d.peak_fp8 = fp8_tf * kTera;
  d.peak_fp4 = fp4_tf * kTera;
  d.memory_bandwidth = bw_gbs * kGiga;
  d.compute_units = sms;
  d.gemm_efficiency = gemm_eff;
  d.memory_efficiency = 0.80;      // STREAM-like kernels reach ~80-90% of HBM/GDDR peak
  d.kernel_launch = 5 * kNsPerUs;  // PyTorch eager op dispatch + launch
  d.runtime_reserved = static_cast<Bytes>(reserved_gib * kGiB);
  d.source = source;
  return d;
}

std::vector<DeviceSpec> make_devices() {
  std::vector<DeviceSpec> v;
  // NVIDIA A100 Tensor Core GPU datasheet (2021): FP32 19.5, TF32 156,
  // FP16/BF16 312 TFLOP/s dense; 80GB HBM2e 2,039 GB/s; 108 SMs (A100 whitepaper).
  v.push_back(gpu("A100-SXM4-80GB", 80, 19.5, 156, 312, 312, 2039, 108, 0.75, 0.5,
                  "NVIDIA A100 datasheet (2021), A100 whitepaper"));
  // Same datasheet: 40GB HBM2 1,555 GB/s.
  v.push_back(gpu("A100-SXM4-40GB", 40, 19.5, 156, 312, 312, 1555, 108, 0.75, 0.5,
                  "NVIDIA A100 datasheet (2021)"));
  // NVIDIA H100 Tensor Core GPU datasheet, SXM5: FP32 67, TF32 494.7,
  // FP16/BF16 989.4, FP8 1,978.9 TFLOP/s dense (3,958 with sparsity); 80GB
  // HBM3 3.35 TB/s; 132 SMs (H100 whitepaper).
  v.push_back(gpu("H100-SXM", 80, 67, 494.7, 989.4, 989.4, 3350, 132, 0.70, 0.5,
                  "NVIDIA H100 datasheet (SXM5), Hopper whitepaper", 1978.9));
  // The H100 with 96GB: the GPU of NVIDIA's GH200 Grace Hopper Superchip
  // (GH200 datasheet: 96GB HBM3 at 4 TB/s; FP32 67, TF32 494, FP16/BF16 990,
  // FP8 1,979 TFLOP/s dense, half the datasheet's sparse 989 / 1,979 / 3,958);
  // the full GH100's six HBM3 stacks of 16 GiB, where the SXM5 enables five;
  // 132 SMs as the H100 SXM5.
  v.push_back(gpu("H100-96GB", 96, 67, 494.7, 989.4, 989.4, 4000, 132, 0.70, 0.5,
                  "NVIDIA GH200 Grace Hopper Superchip datasheet (H100 96GB HBM3)", 1978.9));
  // The H100 of Meta's Grand Teton hosts, as torchtitan's benchmarks ran
  // it (pytorch/torchtitan benchmarks/llama3_h100_202412_torchtitan.md,
  // "Hardware"): "96GB HBM2e with 2.4 TB/sec peak memory bandwidth", "the
  // default 500W power limit", and a peak that "is between SXM and NVL, and
  // we don't know its exact value" (its footnote 2). dtsim takes the
  // midpoint of the two datasheets' dense figures: SXM5 989.4 BF16, 1,978.9
  // FP8, 494.7 TF32, 67 FP32; H100 NVL 835.5, 1,670.5, 417.5, 60 (the NVL
  // datasheet's sparse 1,671, 3,341, 835 halved): 912.5, 1,824.7, 456.1,
  // 63.5 TFLOP/s. 132 SMs, as both.
  v.push_back(gpu("H100-96GB-HBM2e", 96, 63.5, 456.1, 912.5, 912.5, 2400, 132, 0.70, 0.5,
                  "torchtitan's llama3_h100_202412 benchmark (Grand Teton, 500 W); H100 SXM5 and NVL datasheets", 1824.7));
  // NVIDIA H200 datasheet: same compute as H100 SXM (FP8 3,958 TFLOP/s with
  // sparsity, 1,978.9 dense); 141GB HBM3e at 4.8 TB/s (nvidia-smi reports
  // 143,771 MiB, about 140 GiB).
  v.push_back(gpu("H200", 140, 67, 494.7, 989.4, 989.4, 4800, 132, 0.70, 0.5, "NVIDIA H200 datasheet", 1978.9));
  // NVIDIA HGX B200 specifications (8 GPUs: FP8 72, FP16/BF16 36, TF32 18
  // PFLOP/s with sparsity, FP32 600 TFLOP/s; 1.44 TB HBM3e, 64 TB/s): per GPU
  // dense FP8 4,500, FP16/BF16 2,250, TF32 1,125, FP32 75 TFLOP/s; 180GB at
  // 8 TB/s, of which nvidia-smi shows about 179 GiB. 148 SMs over its two
  // dies, as CUDA's device query reports them (160 on the dies, 148 enabled).
  // Dense FP4: 144 PFLOP/s with sparsity for the 8 GPUs, 9,000 a GPU.
  v.push_back(gpu("B200", 179, 75, 1125, 2250, 2250, 8000, 148, 0.70, 0.5, "NVIDIA HGX B200 specifications", 4500, 9000));
  // The Blackwell GPU of the GB200 superchip (GB200 NVL72 specifications,
  // per rack of 72, with sparsity: FP8 720, FP16/BF16 360, TF32 180 PFLOP/s;
  // FP32 5,760 TFLOP/s; 13.4 TB HBM3e at 576 TB/s): per GPU dense FP8
  // 5,000, BF16 2,500, TF32 1,250, FP32 80 TFLOP/s at 8 TB/s, above HGX
  // B200's 4,500 / 2,250 for its 1,200 W. Memory as nvidia-smi shows it,
  // 189,471 MiB (ai-dynamo/aiconfigurator systems/gb200.yaml). 152 SMs as
  // CUDA reports them on GB200 (public kernel-tuning notes; NVIDIA
  // publishes no enabled count). Its GEMMs reach less of that peak than
  // Hopper's do of theirs: cuBLASLt FP8 at 16384^3 runs 2,906.9 TFLOP/s on
  // an ND GB200 v6 (0.581 of 5,000) against 1,377.3 on an ND H100 v5 (0.696
  // of 1,978.9), the same benchmark (Azure/AI-benchmarking-guide,
  // Azure_Results): the H100's prior 0.70 scaled by 0.581 / 0.696 is 0.585.
  // Dense FP4: the rack's 1,440 PFLOP/s with sparsity, 10,000 a GPU.
  v.push_back(gpu("GB200", 189471.0 / 1024, 80, 1250, 2500, 2500, 8000, 152, 0.585, 0.5,
                  "NVIDIA GB200 NVL72 specifications (per GPU: rack / 72, sparse / 2)", 5000, 10000));
  // Blackwell Ultra in the GB300 NVL72 (NVIDIA, "Inside NVIDIA Blackwell
  // Ultra", 2025: 288 GB HBM3e at 8 TB/s, 15 PFLOP/s dense NVFP4; GB300
  // NVL72 specifications: FP8 720, FP16/BF16 360, TF32 180 PFLOP/s with
  // sparsity, FP32 6 PFLOP/s a rack): per GPU dense FP8 5,000, BF16 2,500,
  // TF32 1,250, FP32 83.3 TFLOP/s, as GB200 but for FP4, which dtsim does
  // not price. 284,208 MiB as nvidia-smi shows it (aiconfigurator
  // systems/gb300.yaml); 148 of the die's 160 SMs enabled, as CUDA reports
  // them (public kernel-tuning notes). At 1,400 W its GEMMs reach more of
  // the same peak than GB200's: cuBLASLt FP8 at 16384^3, 3,308.5 TFLOP/s on
  // an ND GB300 v6 (0.662 of 5,000; Azure/AI-benchmarking-guide), so 0.70 x
  // 0.662 / 0.696 = 0.666.
  // Dense NVFP4: 15,000 a GPU (the blog above; the rack's 1,080 PFLOP/s dense).
  v.push_back(gpu("GB300", 284208.0 / 1024, 83.3, 1250, 2500, 2500, 8000, 148, 0.666, 0.5,
                  "NVIDIA GB300 NVL72 specifications, Blackwell Ultra technical blog (per GPU)", 5000, 15000));
  // AMD Instinct MI300X data sheet: FP16/BF16 1,307.4, FP8 2,614.9, TF32
  // 653.7 TFLOP/s dense (twice that with sparsity); FP32 163.4 matrix and
  // vector (FP64 vector 81.7); 192GB HBM3 (eight 24 GiB stacks) at 5.3 TB/s;
  // 304 CUs. gemm_efficiency is a prior below the NVIDIA parts': published
  // MI300X GEMM benchmarks reach a smaller share of its peak than H100's do
  // of their own. Calibration replaces it.
  v.push_back(gpu("MI300X", 192, 163.4, 653.7, 1307.4, 1307.4, 5300, 304, 0.60, 0.5,
                  "AMD Instinct MI300X data sheet, ROCm MI300 microarchitecture", 2614.9));
  // NVIDIA Tesla V100 datasheet (SXM2): FP32 15.7, tensor FP16 125 TFLOP/s;
  // HBM2 900 GB/s; 80 SMs; no BF16.
  v.push_back(gpu("V100-SXM2-16GB", 16, 15.7, 0, 125, 0, 900, 80, 0.75, 0.4, "NVIDIA Tesla V100 datasheet (SXM2)"));
  v.push_back(gpu("V100-SXM2-32GB", 32, 15.7, 0, 125, 0, 900, 80, 0.75, 0.4, "NVIDIA Tesla V100 datasheet (SXM2)"));
  // NVIDIA Turing whitepaper, GeForce RTX 2080 Ti (reference): FP32 13.4
  // TFLOP/s; FP16 tensor 53.8 with FP16 accumulate but 26.9 with the FP32
  // accumulate PyTorch uses (GeForce runs it at half rate); GDDR6 616 GB/s;
  // 68 SMs. Memory as seed 002 reports it: 11,019 MiB.
  v.push_back(gpu("RTX-2080-Ti", 11019.0 / 1024, 13.4, 0, 26.9, 0, 616, 68, 0.80, 0.3,
                  "NVIDIA Turing whitepaper (RTX 2080 Ti), seed 002 for memory"));
  // NVIDIA Tesla P100 PCIe 16GB datasheet: FP32 9.3, FP16 18.7 TFLOP/s (no
  // tensor cores); HBM2 732 GB/s; 56 SMs. Kaggle's P100 (seed 003).
  v.push_back(gpu("P100", 16, 9.3, 0, 18.7, 0, 732, 56, 0.80, 0.3, "NVIDIA Tesla P100 PCIe datasheet"));
  // NVIDIA Tesla K80 datasheet: per board 8.73 TFLOP/s FP32 (boost) and 480
  // GB/s over two GK210 dies; Colab exposes one die: 4.37 TFLOP/s, 240 GB/s,
  // 12 GB (11,441 MiB usable), 13 SMX. FP16 runs at the FP32 rate.
  v.push_back(gpu("K80", 11441.0 / 1024, 4.37, 0, 4.37, 0, 240, 13, 0.70, 0.3, "NVIDIA Tesla K80 datasheet (one GK210)"));
  // One core of a generic x86-64 host as a device (local-cpu: one process per
  // core): AVX2 FMA, 2 x 8 fp32 lanes x 2 flops x ~3 GHz = 96 GFLOP/s peak;
  // a share of DDR bandwidth; 12 GiB (half of this 24 GiB machine). fp16/bf16
  // run no faster than fp32 on CPU. Calibration replaces these figures.
  DeviceSpec cpu = gpu("cpu", 12, 0.096, 0, 0.096, 0.096, 10, 1, 0.60, 0, "generic x86-64 core (AVX2), see comment");
  cpu.kernel_launch = 10 * kNsPerUs;  // eager op dispatch on CPU
  // LibTorch's CPU dropout is input * (bernoulli mask / (1 - p)): the mask it
  // saves for backward has the input's dtype, not CUDA's 1-byte bool (measured
  // by dtsim validate: 4 bytes per element in fp32).
  cpu.dropout_mask_bytes = 0;
  // No cuDNN: an LSTM is ATen's cell step by step (Note [LSTM memory]).
  cpu.fused_rnn = false;
  // torch.optim's Adam on CPU tensors, and the runtime's, step tensor by
  // tensor with temporaries (Note [Unfused step] in sim/cost.hpp).
  cpu.fused_optimizer = false;
  cpu.gloo_collectives = true;
  // Gloo reduces and copies on the CPU cores the ranks compute on (Note [CPU
  // collectives] in sim/src/lowering/layer_context.hpp).
  cpu.comm_overlaps_compute = false;
  // Notes [Busy sender] and [Quiet sender] (engine/executor.cpp): dtsim's
  // runtime runs a bound rank's Gloo loops at the lowest priority, so a
  // receiver's notice waits for the sender's pass to end (a cluster file's
  // send_waits_for_core_ms: 4, the tick, where they run at the rank's).
  cpu.send_waits_for_core = kUntilPassEnds;
  v.push_back(cpu);
  // CUDA compute capabilities (NVIDIA's "CUDA GPUs" table): NCCL's
  // protocol model takes its per-architecture figures from them (Note [NCCL
  // protocols] in cost_comm.cpp). MI300X (RCCL) and the CPU have none.
  const std::pair<const char*, int> capabilities[] = {
      {"A100-SXM4-80GB", 80}, {"A100-SXM4-40GB", 80}, {"H100-SXM", 90}, {"H100-96GB", 90}, {"H100-96GB-HBM2e", 90}, {"H200", 90},
      {"B200", 100},          {"GB200", 100},         {"GB300", 103},         {"V100-SXM2-16GB", 70}, {"V100-SXM2-32GB", 70}, {"RTX-2080-Ti", 75},
      {"P100", 60},           {"K80", 37}};
  for (auto& d : v) {
    for (const auto& [name, cc] : capabilities) {
      if (d.name == name) d.compute_capability = cc;
    }
  }
  // Note [Interference prior]
  // NCCL runs a ring collective as one thread block per channel, each on an
  // SM of its own that it shares with no compute kernel (S. Jeaugey,
  // NVIDIA/nccl #689), and NVSwitch systems run 24 channels: "Channel 23/24"
  // in nccl-tests' log on an HGX A100 (NVIDIA/nccl-tests #100), 24 thread
  // blocks on an H100 (NVIDIA developer forum thread 337991, vLLM #10453).
  // A GEMM that overlaps it gets the other SMs: with f = 24 / SMs of them
  // gone it takes 1 / (1 - f) as long, +29% on an A100 (108 SMs), +22% on an
  // H100 (132), +19% on a B200 (148). Measured: compute slowed by 18.9% on
  // average and up to 40% overlapped with FSDP's and pipelines' collectives
  // (Lee et al. 2025, arXiv 2507.03114, over A100, H100 and two AMD parts);
  // matmuls 30-40% slower under FSDP's all-gathers and reduce-scatters on
  // H100s (pytorch/pytorch #179937). That is the compute-bound kernels'
  // part; memory-bound kernels lose HBM bandwidth instead: a byte on NVLink
  // is stored to HBM and read back, and read from or written to the user's
  // buffer, "at least 2x ... it can be 3x" (S. Jeaugey in NVIDIA/nccl
  // #1428, where on A100s beside an all-gather elementwise kernels took
  // 2.5x, attention 1.8x and GEMMs 1.8x as long). DeviceSpec::comm_hbm_traffic
  // is 3 (a device mapping may set its own), at the link's rate
  // (hbm_slowdown in lowering/lower.cpp): an
  // NVLink collective takes 43% of an A100's achievable HBM bandwidth (its
  // memory-bound kernels 1.76x as long), one across nodes on 8 HDR NICs
  // 35%, and a node's single 25 GB/s NIC 4%. Both priors stay below
  // nccl#1428's figures, at the low end of the published range. MI300X and the older
  // parts have no cited figure (over PCIe NCCL takes 2 SMs) and keep 0; a
  // cluster's device mapping sets comm_slowdown. dtsim calibrate measures
  // both halves on a GPU (Note [Measuring interference] in
  // calibrate/src/interference_bench.cpp) and a profile that has them
  // replaces these priors (Note [Interference fit] in calibrate/src/fit.cpp):
  // on an H200 a GEMM beside 24 channels' SMs lost 33-35%, 1.57x this
  // prior, and memory-bound kernels slowed 1.07x h / (1 - h)
  // (docs/validation-gpu.md). Note [Interference] in
  // sim/src/engine/executor.cpp applies them.
  for (auto& d : v) {
    const bool nvswitch = d.name.rfind("A100", 0) == 0 || d.name.rfind("H100", 0) == 0 || d.name == "H200" || d.name == "B200" ||
                         d.name == "GB200" || d.name == "GB300";
    if (nvswitch) {
      const double f = static_cast<double>(kNvswitchNcclChannels) / d.compute_units;
      d.comm_slowdown = f / (1 - f);
    }
  }
  // Fused attention (Note [Fused attention] in cost_compute.cpp):
  // FlashAttention-2 reaches 50-73% of an A100's peak (Dao 2023) and 35% of
  // an H100's (Shah et al. 2024); the others have no published figure and
  // take the Hopper one as a prior (CPUs keep their GEMM efficiency).
  // Blackwell Ultra doubles the SFUs' exponential throughput (MUFU.EX2,
  // 10.7 against 5 TeraExp/s a GPU: Verda's GB300 NVL72 analysis), which
  // FlashAttention's softmax waits on between its two matmuls: NVIDIA
  // measures attention's forward about 35% faster on GB300 than on GB200
  // (NVIDIA Technical Blog, "Making Softmax More Efficient with NVIDIA
  // Blackwell Ultra", 2026: FP8, DeepSeek-V3). GB300 takes GB200's
  // efficiency x 1.35 in both passes (the backward recomputes the same
  // exponentials over more matmul work, so that may be generous to it).
  for (auto& d : v) {
    if (d.name.rfind("A100", 0) == 0) {
      d.attention_efficiency = 0.60;
    } else if (d.name == "GB300") {
      d.attention_efficiency = 0.35 * 1.35;
    } else if (!d.gloo_collectives) {
      d.attention_efficiency = 0.35;
    }
  }
  return v;
}

std::string lower(std::string s) {
  std::transform(s.begin(), s.end(), s.begin(), [](unsigned char c) { return static_cast<char>(std::tolower(c)); });
  return s;
}

}  // namespace

const std::vector<DeviceSpec>& builtin_devices() {
  static const std::vector<DeviceSpec> devices = make_devices();
  return devices;
}

const DeviceSpec* find_device(const std::string& name) {
  const std::string want = lower(name);
  for (const auto& d : builtin_devices()) {
    if (lower(d.name) == want) return &d;
  }
  return nullptr;
}

}  // namespace dtsim::sim
