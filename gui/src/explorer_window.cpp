#include "dtsim/gui/explorer_window.hpp"

#include <algorithm>
#include <cmath>
#include <filesystem>
#include <map>
#include <optional>
#include <tuple>

#include <QAreaSeries>
#include <QBarCategoryAxis>
#include <QBarSet>
#include <QCategoryAxis>
#include <QChart>
#include <QChartView>
#include <QCheckBox>
#include <QComboBox>
#include <QCoreApplication>
#include <QDoubleSpinBox>
#include <QElapsedTimer>
#include <QFileDialog>
#include <QFormLayout>
#include <QFutureWatcher>
#include <QGraphicsItem>
#include <QPainter>
#include <QGuiApplication>
#include <QGroupBox>
#include <QHBoxLayout>
#include <QHeaderView>
#include <QHorizontalStackedBarSeries>
#include <QLabel>
#include <QLineEdit>
#include <QLegendMarker>
#include <QLineSeries>
#include <QMenuBar>
#include <QPixmap>
#include <QProgressBar>
#include <QPushButton>
#include <QRegularExpressionValidator>
#include <QSaveFile>
#include <QScatterSeries>
#include <QScreen>
#include <QScrollArea>
#include <QScrollBar>
#include <QSpinBox>
#include <QSplitter>
#include <QStackedBarSeries>
#include <QTabWidget>
#include <QTableWidget>
#include <QThread>
#include <QThreadPool>
#include <QTimer>
#include <QValueAxis>
#include <QVBoxLayout>
#include <QWindow>
#include <QtConcurrent/QtConcurrentRun>

#include "dtsim/models/models.hpp"
#include "dtsim/sim/config_io.hpp"
#include "dtsim/sim/cost.hpp"
#include "dtsim/sim/error.hpp"
#include "dtsim/sim/profile.hpp"
#include "dtsim/sim/rules.hpp"
#include "dtsim/sim/search.hpp"

namespace dtsim::gui {
namespace {

/// The ZeRO stage the ZeRO box's value (a stage, or 10 + an FSDP mode) is.
int zero_stage_of_box(int zero_box) {
  return zero_box < 10 ? zero_box : sim::zero_stage_of(static_cast<sim::FsdpMode>(zero_box - 10));
}

constexpr const char* kOpenFile = "__open__";
constexpr int kDebounceMs = 120;
constexpr int kMaxTimelineRows = 48;  // beyond this the lanes are too thin to read
// Note [Chart sizes]: below about 240 x 320 px a chart's plot area collapses
// and Qt Charts elides its axis labels to "..."; the chart views never get
// smaller (the explorer tab scrolls instead), and at 1280 x 800 they fit.
constexpr int kChartMinHeight = 240;
constexpr int kChartMinWidth = 320;
constexpr int kMaxTicks = 6;  // intervals on a value axis, at most

QString qs(const std::string& s) { return QString::fromStdString(s); }

/// Each knob (by object name) in the frameworks' terms: the plan key it sets
/// and the DeepSpeed, Megatron-LM, PyTorch FSDP or torchtitan setting that
/// means the same. Shown as the knob's tooltip and its label's.
constexpr std::pair<const char*, const char*> kKnobTips[] = {
    {"model", "The model: a built-in name, a configs/models YAML or a HuggingFace config.json "
              "(model_type gpt2, bert, llama, mistral, qwen2, qwen3, mixtral, qwen2_moe, qwen3_moe, deepseek_v3)."},
    {"cluster", "The cluster: nodes, GPUs per node, the device and its links (configs/clusters/*.yaml); "
                "the knobs under Cluster override it."},
    {"plan", "The plan the knobs start from (configs/plans/*.yaml, or a search result); "
             "each knob overrides one plan key, as dtsim predict --set plan.KEY=VALUE would."},
    {"profile", "A calibration profile (dtsim calibrate's .h5): measured layer, collective and copy costs "
                "instead of the device's datasheet roofline."},
    {"dp", "plan.dp, the data-parallel degree: model replicas, each on its own share of the batch. "
           "PyTorch DDP / FSDP world size, Megatron's data-parallel size (GPUs / (tp x pp x cp)), "
           "torchtitan data_parallel_replicate_degree x data_parallel_shard_degree. "
           "\"All remaining GPUs\" takes what tp, pp and cp leave."},
    {"tp", "plan.tp, the tensor-parallel degree: every layer's GEMMs split over this many GPUs of a node. "
           "Megatron --tensor-model-parallel-size, torchtitan tensor_parallel_degree."},
    {"pp", "plan.pp, pipeline stages: the layers cut into this many consecutive stages. "
           "Megatron --pipeline-model-parallel-size, torchtitan pipeline_parallel_degree, "
           "DeepSpeed PipelineModule(num_stages=...)."},
    {"cp", "plan.cp, the context-parallel degree: each sequence cut into 2 x cp chunks over cp GPUs, "
           "K/V exchanged for attention. Megatron --context-parallel-size, torchtitan context_parallel_degree."},
    {"cp_comm", "plan.cp_comm, how context parallelism moves K/V: p2p, a ring of sends overlapped with "
                "attention (Megatron --cp-comm-type p2p), or all_gather, one all-gather of K/V "
                "(Megatron --cp-comm-type allgather, torchtitan context_parallel_rotate_method = \"allgather\"). "
                "Only with cp > 1."},
    {"loss_parallel", "plan.loss_parallel, whose vocab-parallel cross-entropy a tensor-parallel LM head runs: "
                      "megatron (Megatron-LM's, the softmax turned into the gradient in place), dtensor (PyTorch's "
                      "loss_parallel, torchtitan's with TP: a new gradient, 8 bytes a logit), or auto (dtensor under "
                      "FSDP, megatron otherwise). Only with tp > 1."},
    {"ep", "plan.ep, the expert-parallel degree: a mixture of experts' routed experts spread over this many "
           "GPUs, tokens sent to them by all-to-all. Megatron --expert-model-parallel-size, "
           "DeepSpeed MoE ep_size, torchtitan expert_parallel_degree. Dense models: 1."},
    {"etp", "plan.etp, tensor parallelism inside each expert: 1 or tp. "
            "Megatron --expert-tensor-parallel-size (default: tp)."},
    {"moe_dispatcher", "plan.moe_dispatcher, how tokens reach their experts: alltoall (each token's k rows sent to "
                       "their experts' ranks), allgather (every token gathered over the etp x ep ranks, Megatron-Core's "
                       "default) or deepep (DeepEP's kernels: once to each node of its experts). "
                       "Megatron --moe-token-dispatcher-type."},
    {"overlap_moe_expert_parallel_comm",
     "plan.overlap_moe_expert_parallel_comm: after the first micro-batch's forward, each next forward runs layer by "
     "layer beside the backward of the one before, each one's all-to-alls under the other's layer. Megatron "
     "--overlap-moe-expert-parallel-comm. Needs ep > 1, with pipeline stages the interleaved schedule, recompute "
     "other than full, 16 bits, ZeRO 0-2."},
    {"moe_imbalance", "plan.moe_imbalance: the busiest expert's tokens over the mean (1: perfectly balanced "
                      "routing); the router's load-balancing loss (Megatron --moe-aux-loss-coeff) keeps it near 1."},
    {"schedule", "plan.schedule, the pipeline schedule (pp > 1). 1F1B: PipeDream-Flush, Megatron's and DeepSpeed's "
                 "default, torchtitan pipeline_parallel_schedule \"1F1B\". GPipe: all forwards, then all backwards "
                 "(torchtitan \"GPipe\"). Interleaved 1F1B: Megatron with virtual stages, torchtitan "
                 "\"Interleaved1F1B\". ZB-H1: zero bubble (Qi et al. 2023), each backward split into its input- and "
                 "weight-gradient passes. Naive model parallel: plan.model_parallel, layers on successive GPUs "
                 "without micro-batching (HuggingFace device_map)."},
    {"virtual_stages", "plan.virtual_stages: model chunks per GPU for interleaved 1F1B. Megatron "
                       "--num-layers-per-virtual-pipeline-stage = layers / (pp x virtual stages); "
                       "torchtitan stages per rank of \"Interleaved1F1B\"."},
    {"sequence_parallel", "plan.sequence_parallel: LayerNorm and dropout activations split along the sequence "
                          "over the tp group, all-reduces become all-gather + reduce-scatter (Korthikanti et al. "
                          "2022). Megatron --sequence-parallel; torchtitan's TP plan (SequenceParallel). Needs tp > 1."},
    {"tp_comm_overlap", "plan.tp_comm_overlap: sequence parallelism's all-gathers and reduce-scatters pipelined "
                        "with the GEMMs beside them, each GEMM run as tp chunks of its rows (fewer rows, emptier "
                        "waves: a loss for short sequences). Megatron --tp-comm-overlap (Transformer Engine "
                        "userbuffers), torchtitan enable_async_tensor_parallel. Needs sequence parallel."},
    {"deallocate_pipeline_outputs",
     "plan.deallocate_pipeline_outputs: each stage frees its output's data once sent and keeps only its "
     "autograd graph, as Megatron-LM always does (deallocate_output_tensor); off, the output stays until its "
     "backward, one more activation per micro-batch in flight (PyTorch's pipelining, DeepSpeed). Pipelines only."},
    {"sync_batchnorm",
     "plan.sync_batchnorm: batch norm over the whole data-parallel batch (torch.nn.SyncBatchNorm."
     "convert_sync_batchnorm): each batch norm all-gathers its ranks' statistics in forward and all-reduces its "
     "gradient sums in backward, in the layer's way. Models with batch norm only."},
    {"micro_batch", "plan.micro_batch: sequences per GPU per forward and backward. DeepSpeed "
                    "train_micro_batch_size_per_gpu, Megatron --micro-batch-size, HuggingFace "
                    "per_device_train_batch_size."},
    {"batch_mode", "Whether the box below gives the gradient-accumulation steps (plan.grad_accum, DeepSpeed "
                   "gradient_accumulation_steps; a pipeline's micro-batches) or the global batch (plan.global_batch, "
                   "DeepSpeed train_batch_size, Megatron --global-batch-size)."},
    {"batch_value", "Gradient-accumulation steps (DeepSpeed gradient_accumulation_steps) or the global batch in "
                    "sequences (DeepSpeed train_batch_size, Megatron --global-batch-size), as \"Batch set by\" says; "
                    "auto: one step."},
    {"seq_len", "plan.seq_len: tokens per sequence. Megatron --seq-length, torchtitan seq_len, HuggingFace "
                "max_length; at most the model's max_position_embeddings."},
    {"zero", "plan.zero_stage / plan.fsdp: what the data-parallel ranks shard. DeepSpeed zero_optimization.stage "
             "(1: optimizer states, Megatron --use-distributed-optimizer; 2: + gradients; 3: + parameters). "
             "PyTorch FSDP sharding_strategy SHARD_GRAD_OP = 2, FULL_SHARD = 3 (torchtitan's FSDP2), "
             "HYBRID_SHARD = 3 inside a node, replicated across nodes."},
    {"fsdp_wrap", "plan.fsdp_wrap: FSDP's units. blocks: each transformer block a unit (PyTorch FSDP "
                  "auto_wrap_policy=transformer_auto_wrap_policy, fully_shard on each block then on the model), the "
                  "embeddings, final norm and head in the root unit, gathered once a micro-batch and kept to the end "
                  "of its backward. layers: every layer its own unit. torchtitan: its apply_fsdp, every layer a unit, "
                  "[norm, output] kept whole from its forward to its backward (reshard_after_forward_policy "
                  "\"default\"). FSDP full or hybrid shard only."},
    {"limit_all_gathers", "plan.limit_all_gathers: PyTorch FSDP limit_all_gathers (True by default): a unit's "
                          "all-gather waits until the unit two before it has freed its parameters, so at most two "
                          "units are gathered at once. FSDP full or hybrid shard only."},
    {"fsdp_version", "plan.fsdp_version: 2 is PyTorch FSDP2 (fully_shard, torchtitan's), whose backward waits for "
                     "the unit before's reduce-scatter before issuing the next: two units' gradients in flight "
                     "however slow the network. Off: FSDP1 (FullyShardedDataParallel), which never waits. FSDP "
                     "full, shard-grad-op or hybrid shard only."},
    {"stage3_prefetch_bucket_size", "plan.stage3_prefetch_bucket_size: DeepSpeed zero_optimization."
                                    "stage3_prefetch_bucket_size, in elements (default 5e7): the parameters of the "
                                    "modules ahead that ZeRO-3 gathers before they are used. DeepSpeed ZeRO-3 only."},
    {"stage3_max_live_parameters", "plan.stage3_max_live_parameters: DeepSpeed zero_optimization."
                                   "stage3_max_live_parameters, in elements (default 1e9): no prefetch once this "
                                   "many gathered parameters are alive. DeepSpeed ZeRO-3 only."},
    {"fp32_grads", "plan.accumulate_allreduce_grads_in_fp32: Megatron-Core's gradient buffer, every gradient kept "
                   "in fp32 for the whole run and reduced in place (Megatron --accumulate-allreduce-grads-in-fp32, "
                   "on by default under --bf16): 18 bytes a parameter with Adam, 6 + 12/dp with the distributed "
                   "optimizer. ZeRO-0 or ZeRO-1 only."},
    {"overlap_param_gather", "plan.overlap_param_gather: Megatron-LM's --overlap-param-gather (overlap_param_gather "
                             "in the Megatron-Bridge and NeMo recipes): the distributed optimizer's parameters "
                             "all-gathered bucket by bucket as the next forward reaches them, one ahead, instead of "
                             "all after the step. ZeRO-1 only (Note [Overlapped parameter gather])."},
    {"optimizer_states", "plan.use_precision_aware_optimizer with exp_avg_dtype and exp_avg_sq_dtype: Megatron-Core's "
                         "--use-precision-aware-optimizer (on in every Megatron-Bridge bf16 Adam performance run), "
                         "Transformer Engine's FusedAdam keeping the states, the master of a bf16 parameter as its "
                         "16-bit remainder, 10 bytes a parameter of the shard instead of 12, and Adam's moments in "
                         "the type named (--exp-avg-dtype, --exp-avg-sq-dtype; bf16 in DeepSeek-V3's and -V4's Bridge "
                         "recipes: 6 bytes); each state kept narrower is copied to fp32 while the step runs (Note "
                         "[Precision-aware optimizer]). fp32: without it; TE: with it. Adam under the distributed "
                         "optimizer (ZeRO-1) only."},
    {"optim_bits", "plan.optim_bits 8: the optimizer's states in 8 bits, as bitsandbytes' AdamW8bit and "
                   "PagedAdamW8bit (transformers' adamw_bnb_8bit, paged_adamw_8bit) and torchao's AdamW8bit keep "
                   "them: a byte each and an fp32 scale for each 256, Adam's 2 bytes a parameter instead of 8 (4 in "
                   "bf16), stepped by one kernel a tensor (Note [8-bit optimizer]). Not with SGD without momentum, "
                   "Megatron's precision-aware optimizer or the optimizer offloaded."},
    {"optimizer_in_backward", "plan.optimizer_in_backward: torchtune's optimizer_in_bwd, each parameter stepped as "
                              "soon as its gradient is made and the gradient freed, so no gradient outlives its "
                              "tensor's backward (Note [Optimizer in backward]). One GPU, one micro-batch a step, "
                              "no ZeRO, as torchtune's single-device recipe runs it."},
    {"enable_activation_offloading", "plan.enable_activation_offloading: torchtune's enable_activation_offloading, "
                                     "each block's saved tensors (its checkpoint under full recompute) copied to the host "
                                     "after its forward and back one block ahead of its backward, on a stream of their "
                                     "own (Note [Saved-tensor offload]). One stage, on a GPU, beside no other offloading "
                                     "of the activations."},
    {"master_weights", "plan.master_weights: an fp32 master copy of the parameters in the optimizer, as mixed "
                       "precision keeps one (Megatron, DeepSpeed's bf16.enabled, autocast over fp32 parameters): "
                       "Adam's 12 bytes a parameter. Off: a model loaded in bf16 and stepped by torch.optim "
                       "(HF Trainer or TRL with torch_dtype=bfloat16, torchtitan's training.dtype bfloat16) keeps "
                       "its states in 16 bits, 4 bytes. fp16 or bf16 only, not with Megatron's fp32 gradients "
                       "or the optimizer offloaded."},
    {"contiguous_gradients", "plan.contiguous_gradients: DeepSpeed zero_optimization.contiguous_gradients "
                             "(default true): ZeRO-2 copies each gradient into one of its reduce_bucket_size "
                             "buffers (two with overlap_comm) and frees it; off, gradients stay where they were "
                             "made until their bucket is reduced, and no buffer is allocated. DeepSpeed ZeRO-2 "
                             "only (Note [ZeRO-2's buffers])."},
    {"reduce_scatter", "plan.reduce_scatter: how ZeRO-1 reduces a gradient bucket. On: reduce-scattered to the ranks "
                       "owning its optimizer shards, as Megatron-LM's --use-distributed-optimizer and DeepSpeed's "
                       "zero_optimization.reduce_scatter (default true) do; off: all-reduced, as PyTorch's "
                       "ZeroRedundancyOptimizer over DDP does, half as many bytes again. ZeRO-1 only (Note "
                       "[ZeRO-1's reduction])."},
    {"offload", "plan.offload_optimizer / plan.offload_params: states kept in host memory, the optimizer step on "
                "the CPU. DeepSpeed zero_optimization.offload_optimizer.device = \"cpu\" (ZeRO-Offload) and "
                "offload_param.device = \"cpu\" (ZeRO-3); PyTorch FSDP CPUOffload(offload_params=True)."},
    {"recompute", "plan.recompute, activation checkpointing. selective: only attention's core recomputed "
                  "(Megatron --recompute-activations, i.e. --recompute-granularity selective). full: each layer's "
                  "forward rerun in backward (Megatron --recompute-granularity full, DeepSpeed "
                  "activation_checkpointing, torchtitan mode = \"full\"). op: torchtitan's activation_checkpoint."
                  "mode = \"selective\" with selective_ac_option = \"op\": every other GEMM's output and attention's "
                  "kept, the rest rerun (Llama-family blocks at tp 1)."},
    {"recompute_modules", "plan.recompute_modules: under selective recompute, the modules rerun, as Megatron-Core's "
                          "--recompute-modules names them: core_attn, layernorm (an MLA block's input norm, a MoE "
                          "block's pre-MLP norm), moe_act, mla_up_proj, mlp, shared_experts, moe (the whole MoE layer, its "
                          "all-to-alls rerun too), mhc (hyper-connections' aggregates, norms and streams); each frees what its part "
                          "keeps beyond its input. Empty: core_attn, Megatron's default (Note [Recompute modules])."},
    {"recompute_num_layers", "Blocks rerun under full recompute. N: plan.recompute_method block with "
                             "plan.recompute_num_layers N, only the first N blocks of each model chunk rerun, the others "
                             "keep their activations (Megatron --recompute-method block --recompute-num-layers N; "
                             "Megatron-Bridge's recompute_num_layers). all: every block, --recompute-method uniform "
                             "--recompute-num-layers 1."},
    {"cpu_offloading_num_layers", "plan.cpu_offloading_num_layers: the first N transformer layers' activations go to "
                                  "host memory after their forward and come back for their backward (Megatron "
                                  "--cpu-offloading --cpu-offloading-num-layers N, Transformer Engine's CPU offload); "
                                  "one stage, no recompute, fewer than the model's layers."},
    {"offload_modules", "plan.offload_modules with plan.fine_grained_activation_offloading: what the named modules "
                        "save for backward goes to host memory as each module's forward ends and comes back before its "
                        "backward (Megatron --fine-grained-activation-offloading --offload-modules ...): attn_norm, "
                        "qkv_linear, core_attn, attn_proj, mlp_norm, expert_fc1, moe_act, fused_group_mlp. Empty: off "
                        "(Note [Fine-grained offload])."},
    {"attention", "plan.attention. auto: flash on a GPU in fp16, bf16 or fp8, eager otherwise. eager: the "
                  "S x S scores kept (HuggingFace attn_implementation=\"eager\"). flash: FlashAttention / SDPA "
                  "(attn_implementation=\"flash_attention_2\" or \"sdpa\", Megatron --use-flash-attn)."},
    {"precision", "plan.precision: the GEMMs' and activations' type, fp32 master weights under mixed precision (fp8, "
                  "fp4: only the transformer blocks' GEMMs quantised, NVFP4 on Blackwell). "
                  "fp16: DeepSpeed fp16.enabled, Megatron --fp16. bf16: DeepSpeed bf16.enabled, Megatron --bf16, "
                  "FSDP MixedPrecision(param_dtype=torch.bfloat16), torchtitan mixed_precision_param = "
                  "\"bfloat16\". fp8: Transformer Engine (Megatron --fp8-format hybrid), on FP8 tensor cores only."},
    {"kernels", "plan.kernels: how a Llama-family block's RMSNorms and SwiGLU run. composite: PyTorch's separate ops "
                "(HuggingFace, eager torchtitan), autograd keeping the norm's fp32 copy and SwiGLU's three intermediates. "
                "fused: one kernel each keeping only its inputs, as Megatron-Core runs them (Transformer Engine's "
                "RMSNorm, --bias-swiglu-fusion)."},
    {"fp8_recipe", "plan.fp8_recipe, under fp8: how a tensor's scale is found before its cast (Megatron --fp8-recipe). "
                   "delayed: Transformer Engine's DelayedScaling, from earlier steps' amax. tensorwise: "
                   "Float8CurrentScaling (Megatron-Bridge's FP8-CS), a pass over the tensor for its amax before each cast. "
                   "mxfp8: MXFP8BlockScaling, a scale for each 32 elements found by the cast, slower GEMMs "
                   "(Blackwell only)."},
    {"nodes", "cluster.nodes: machines (torchrun --nnodes, SLURM --nodes)."},
    {"gpus_per_node", "cluster.gpus_per_node: GPUs per machine (torchrun --nproc-per-node); "
                      "tensor parallelism stays inside one."},
    {"intra_bw", "cluster.intra_node.bandwidth: each GPU's link inside a node (NVLink / NVSwitch, or PCIe), "
                 "one direction, in GB/s (10^9 bytes/s); NCCL's busbw approaches it."},
    {"nccl_proto", "cluster.nccl_proto: NCCL_PROTO, the protocols NCCL may choose from for each collective "
                   "(Note [NCCL protocols]): LL (least latency, half the rate), LL128 (NVLink only) and Simple "
                   "(full rate, most latency). NCCL_PROTO=Simple or ^LL128 as some clusters set it. NVIDIA GPUs "
                   "only; one line elsewhere."},
    {"nvls", "cluster.nccl_nvls_enable: NCCL_NVLS_ENABLE, NVLink SHARP. NCCL reduces an all-reduce inside "
             "one node in the NVSwitch (about 480 GB/s busbw on 8 H100s where a ring reaches 370), from about 8 MB, "
             "and across nodes as NVLSTree (NVLS in each node, a tree between them); NeMo's and Megatron-Bridge's performance recipes set NCCL_NVLS_ENABLE=0 to save memory. Only where "
             "the NVSwitch can reduce (Hopper, Blackwell: the cluster's intra_node.nvls_efficiency)."},
    {"inter_bw", "cluster.inter_node.bandwidth: one NIC between nodes (InfiniBand, RoCE, Ethernet), one "
                 "direction, in GB/s (10^9 bytes/s)."},
    {"s_gpus", "GPUs the search may use (dtsim search --gpus); 0: the whole cluster."},
    {"s_batch", "The global batch in sequences every plan must train (dtsim search --global-batch; "
                "DeepSpeed train_batch_size, Megatron --global-batch-size); 0: 4 per GPU."},
    {"s_top", "How many of the fastest distinct plans to list (dtsim search --top)."},
};

QString fmt_time(TimeNs ns) {
  const double s = static_cast<double>(ns) / 1e9;
  if (s < 1e-3) return QString::number(s * 1e6, 'f', 1) + " µs";
  if (s < 10) return QString::number(s * 1e3, 'f', 2) + " ms";
  return QString::number(s, 'f', 2) + " s";
}

/// The unit a chart shows times in: ms, or s from 10 s on.
struct TimeUnit {
  const char* name;
  double ns;  ///< nanoseconds per unit
};
TimeUnit unit_for(TimeNs span) { return span >= 10 * kNsPerSec ? TimeUnit{"s", 1e9} : TimeUnit{"ms", 1e6}; }
double in(TimeNs t, TimeUnit u) { return static_cast<double>(t) / u.ns; }

/// The fullest GPU of a prediction.
Bytes peak_of(const sim::Prediction& p) {
  Bytes peak = 0;
  for (const auto& r : p.ranks) peak = std::max(peak, r.peak);
  return peak;
}

double gib(Bytes b) { return static_cast<double>(b) / static_cast<double>(kGiB); }
double ms(TimeNs t) { return static_cast<double>(t) / 1e6; }

QColor kind_color(GanttKind k) {
  switch (k) {
    case GanttKind::kForward: return QColor("#4C78A8");
    case GanttKind::kBackward: return QColor("#F58518");
    case GanttKind::kRecompute: return QColor("#B279A2");
    case GanttKind::kOptimizer: return QColor("#54A24B");
    case GanttKind::kComm: return QColor("#E45756");
    case GanttKind::kOffload: return QColor("#72B7B2");
    case GanttKind::kBubble: return QColor("#D0D0D0");
  }
  return Qt::black;
}

/// Ticks every round interval (1, 2 or 5 x 10^k) of the axis's current
/// range, at most `max_ticks` of them, anchored at 0, labelled with just the
/// decimals they need.
void round_ticks(QValueAxis* a, int max_ticks = kMaxTicks) {
  const double step = nice_tick_interval(a->max() - a->min(), max_ticks);
  if (a->tickType() == QValueAxis::TicksDynamic && a->tickInterval() == step) return;
  a->setTickType(QValueAxis::TicksDynamic);
  a->setTickAnchor(0);
  a->setTickInterval(step);
  a->setLabelFormat(QString("%.%1f").arg(tick_decimals(step)));
}

/// The axis from 0 to the first round tick at or above `top` (> 0), ticked there.
void round_range(QValueAxis* a, double top) {
  if (!(top > 0)) top = 1;
  const double step = nice_tick_interval(top, kMaxTicks);
  a->setRange(0, std::ceil(top / step * (1 - 1e-9)) * step);
  round_ticks(a);
}

/// Lays its widgets out left to right, wrapping onto further lines where the
/// width runs out (the headline figures: one line in a wide window, two in a
/// narrow one, never a horizontal scroll bar). After Qt's Flow Layout example.
class FlowLayout : public QLayout {
 public:
  explicit FlowLayout(QWidget* parent = nullptr) : QLayout(parent) {}
  ~FlowLayout() override {
    while (QLayoutItem* item = takeAt(0)) delete item;
  }
  void addItem(QLayoutItem* item) override { items_.push_back(item); }
  int count() const override { return static_cast<int>(items_.size()); }
  QLayoutItem* itemAt(int i) const override { return i >= 0 && i < count() ? items_[static_cast<std::size_t>(i)] : nullptr; }
  QLayoutItem* takeAt(int i) override {
    if (i < 0 || i >= count()) return nullptr;
    QLayoutItem* item = items_[static_cast<std::size_t>(i)];
    items_.erase(items_.begin() + i);
    return item;
  }
  Qt::Orientations expandingDirections() const override { return {}; }
  bool hasHeightForWidth() const override { return true; }
  int heightForWidth(int width) const override { return arrange(QRect(0, 0, width, 0), false); }
  void setGeometry(const QRect& rect) override {
    QLayout::setGeometry(rect);
    arrange(rect, true);
  }
  QSize sizeHint() const override {
    QSize line;  // everything on one line
    for (QLayoutItem* item : items_) {
      line = QSize(line.width() + item->sizeHint().width(), std::max(line.height(), item->sizeHint().height()));
    }
    const QMargins m = contentsMargins();
    return line + QSize(m.left() + m.right(), m.top() + m.bottom());
  }
  QSize minimumSize() const override {
    QSize widest;  // one item a line
    for (QLayoutItem* item : items_) widest = widest.expandedTo(item->minimumSize());
    const QMargins m = contentsMargins();
    return widest + QSize(m.left() + m.right(), m.top() + m.bottom());
  }

 private:
  /// Places the items in `rect` (when `apply`); returns the height used.
  int arrange(const QRect& rect, bool apply) const {
    const QRect r = rect.marginsRemoved(contentsMargins());
    int x = r.x(), y = r.y(), line_height = 0;
    for (QLayoutItem* item : items_) {
      if (item->widget() != nullptr && item->widget()->isHidden()) continue;
      const QSize hint = item->sizeHint();
      if (x > r.x() && x + hint.width() > r.right() + 1) {
        x = r.x();
        y += line_height;
        line_height = 0;
      }
      if (apply) item->setGeometry(QRect(QPoint(x, y), hint));
      x += hint.width();
      line_height = std::max(line_height, hint.height());
    }
    return y + line_height - rect.y() + contentsMargins().bottom();
  }
  std::vector<QLayoutItem*> items_;
};

/// Re-ticks the chart's visible value axes for the room their plot area has:
/// a label every 75 px across, every 40 px up, so labels never collide or
/// get elided (QChart::plotAreaChanged calls it; so does every redraw).
void fit_ticks(QChart* c) {
  const QRectF plot = c->plotArea();
  for (QAbstractAxis* axis : c->axes()) {
    if (axis->type() != QAbstractAxis::AxisTypeValue || !axis->isVisible()) continue;  // not QCategoryAxis
    const bool across = axis->orientation() == Qt::Horizontal;
    const double room = across ? plot.width() : plot.height();
    round_ticks(static_cast<QValueAxis*>(axis), std::clamp(static_cast<int>(room / (across ? 75 : 40)), 2, 10));
  }
}

/// A chart view that asks for no more than its minimum (Note [Chart sizes])
/// and takes what room there is: its preferred size would otherwise count as
/// the explorer page's height for its width, and the page would scroll in a
/// window that has room for it.
class ChartView : public QChartView {
 public:
  using QChartView::QChartView;
  QSize sizeHint() const override { return minimumSize(); }
};

void clear_chart(QChart* c) {
  c->removeAllSeries();
  for (QAbstractAxis* a : c->axes()) {
    c->removeAxis(a);
    delete a;
  }
}

/// Selects the item whose data is `value`, adding it (text `text`) if absent.
void select_data(QComboBox* box, const QString& value, const QString& text) {
  int i = box->findData(value);
  if (i < 0) {
    box->insertItem(std::max(0, box->count() - 1), text, value);  // before "Open file…"
    i = box->findData(value);
  }
  box->setCurrentIndex(i);
}

void set_int_choices(QComboBox* box, const std::vector<int>& values, int current, const QString& zero_text = {}) {
  box->clear();
  if (!zero_text.isEmpty()) box->addItem(zero_text, 0);
  for (int v : values) box->addItem(QString::number(v), v);
  int i = box->findData(current);
  if (i < 0) {  // a value from a file the cluster cannot take: keep it, resolve() will say why
    box->addItem(QString::number(current) + " (invalid here)", current);
    i = box->count() - 1;
  }
  box->setCurrentIndex(i);
}

/// Whether the user moved `box` away from `value`, as setValue(value) would
/// show it (bounded, rounded to the box's decimals): a file's 1.234 or 12
/// reads back unchanged until the box is touched.
bool moved(const QDoubleSpinBox* box, double value) {
  const double step = std::pow(10.0, -box->decimals());
  const double shown = std::round(std::clamp(value, box->minimum(), box->maximum()) / step) * step;
  return std::abs(box->value() - shown) > step / 2;
}

/// Fills `box` with the enum values by name (sim::to_string), selecting
/// `current`; a current value not among them is kept with `note` after it.
template <class E>
void set_enum_choices(QComboBox* box, const std::vector<E>& values, E current, const QString& note) {
  box->clear();
  for (E v : values) box->addItem(sim::to_string(v), static_cast<int>(v));
  int i = box->findData(static_cast<int>(current));
  if (i < 0) {
    box->addItem(QString(sim::to_string(current)) + note, static_cast<int>(current));
    i = box->count() - 1;
  }
  box->setCurrentIndex(i);
}

// Note [Timeline bars]
// The timeline's bars are rectangles one item fills straight into the
// chart's plot area (GanttItem), not Qt Charts series. Drawn as series, a
// QAreaSeries a lane and kind, each bar four points of a step line, they
// cost the most of the explorer's drawing and painting: Qt Charts strokes
// each line series' path for its hit shape whenever the chart lays out
// (QPainterPathStroker, an atan2 at every joint: the explorer's hottest
// function under perf) and fills each area antialiased at every paint.
// The item keeps the bars level_of_detail gave (about one a pixel column a
// lane), maps them through the axes' ranges at each paint and fills them
// unantialiased, each at least a pixel wide so none vanishes. The legend
// keeps one empty area series a kind the iteration has (zooming in shows
// what one pixel column hid), which also gives the rubber band its zoom:
// Qt Charts zooms the domains of a chart's series, and a chart without one
// does not zoom.
class GanttItem : public QGraphicsItem {
 public:
  explicit GanttItem(QChart* chart) : QGraphicsItem(chart), chart_(chart) {
    setZValue(4);  // with Qt Charts' series: above the grid, below the legend
    resized_ = QObject::connect(chart, &QChart::plotAreaChanged, chart, [this] { prepareGeometryChange(); });
  }
  // The chart deletes its child items before it drops its connections.
  ~GanttItem() override { QObject::disconnect(resized_); }
  GanttItem(const GanttItem&) = delete;
  GanttItem& operator=(const GanttItem&) = delete;

  /// The lanes to draw, top to bottom (row i centred at y = n - 1 - i, as
  /// the lanes' category axis counts), over the value axis `y_lo`..`y_hi`,
  /// times shown in `unit`.
  void set_rows(std::vector<GanttRow> rows, double y_lo, double y_hi, TimeUnit unit) {
    rows_ = std::move(rows);
    y_lo_ = y_lo;
    y_hi_ = y_hi;
    unit_ = unit;
    update();
  }
  /// The time axis' range now, in `unit`.
  void set_x_range(double lo, double hi) {
    x_lo_ = lo;
    x_hi_ = hi;
    update();
  }
  void clear() { set_rows({}, 0, 1, unit_); }
  const std::vector<GanttRow>& rows() const { return rows_; }

  QRectF boundingRect() const override { return chart_->plotArea(); }

  void paint(QPainter* p, const QStyleOptionGraphicsItem*, QWidget*) override {
    const QRectF plot = chart_->plotArea();
    if (rows_.empty() || plot.isEmpty() || !(x_hi_ > x_lo_) || !(y_hi_ > y_lo_)) return;
    p->save();
    p->setClipRect(plot);
    p->setRenderHint(QPainter::Antialiasing, false);
    p->setPen(Qt::NoPen);
    const double px_per_unit = plot.width() / (x_hi_ - x_lo_);
    const double px_per_row = plot.height() / (y_hi_ - y_lo_);
    const double n = static_cast<double>(rows_.size());
    for (int k = 0; k < kGanttKinds; ++k) {
      rects_.clear();
      for (std::size_t i = 0; i < rows_.size(); ++i) {
        const auto& bars = rows_[i].bars[k];
        if (bars.empty()) continue;
        const double h = rows_[i].compute ? 0.4 : 0.25;
        const double y = n - 1 - static_cast<double>(i);
        const double bottom = plot.bottom() - (y - h - y_lo_) * px_per_row;
        const double height = 2 * h * px_per_row;
        for (const GanttBar& b : bars) {
          // The bar's band of the lane (Note [Timeline level of detail]).
          const double top = bottom - b.hi * height;
          // Clamped to the plot: zoomed far in, a bar's ends lie hundreds of
          // millions of pixels out.
          const double left = std::max(plot.left() - 1, plot.left() + (in(b.start, unit_) - x_lo_) * px_per_unit);
          const double right = std::min(plot.right() + 1, plot.left() + (in(b.end, unit_) - x_lo_) * px_per_unit);
          if (right < plot.left() || left > plot.right()) continue;
          rects_.emplace_back(left, top, std::max(1.0, right - left), (b.hi - b.lo) * height);
        }
      }
      if (rects_.empty()) continue;
      p->setBrush(kind_color(static_cast<GanttKind>(k)));
      p->drawRects(rects_.data(), static_cast<int>(rects_.size()));
    }
    p->restore();
  }

 private:
  QChart* chart_;
  std::vector<GanttRow> rows_;
  double y_lo_ = 0, y_hi_ = 1, x_lo_ = 0, x_hi_ = 1;
  TimeUnit unit_{"ms", 1e6};
  std::vector<QRectF> rects_;  ///< paint's scratch
  QMetaObject::Connection resized_;
};

struct SearchOutcome {
  std::shared_ptr<const sim::SearchResult> result;
  std::string error;
};

}  // namespace

struct ExplorerWindow::Impl {
  ExplorerWindow* w = nullptr;
  Scenario scenario;
  Outcome outcome;
  std::optional<Measured> measured;

  // Evaluation: generation_ counts requests, answered_ the newest drawn.
  std::uint64_t generation = 0, answered = 0;
  bool running = false;
  QTimer debounce;
  QFutureWatcher<Outcome> watcher;
  bool syncing = false;  // controls are being set from the scenario: no requests

  // Pickers and knobs.
  QComboBox *model = nullptr, *cluster = nullptr, *plan = nullptr, *profile = nullptr;
  QComboBox *dp = nullptr, *tp = nullptr, *pp = nullptr, *cp = nullptr, *cp_comm = nullptr, *loss_parallel = nullptr, *ep = nullptr,
            *etp = nullptr, *moe_dispatcher = nullptr, *schedule = nullptr,
            *zero = nullptr, *offload = nullptr, *recompute = nullptr, *attention = nullptr, *precision = nullptr,
            *kernels_box = nullptr, *fp8_recipe = nullptr,
            *batch_mode = nullptr, *fsdp_wrap = nullptr;
  QSpinBox *vstages = nullptr, *micro_batch = nullptr, *batch_value = nullptr, *seq_len = nullptr, *nodes = nullptr,
           *gpus_per_node = nullptr, *rc_layers = nullptr, *act_offload = nullptr;
  QLineEdit* rc_modules = nullptr;  ///< Megatron-Core's recompute_modules, under selective
  QLineEdit* offload_mods = nullptr;  ///< Megatron-Core's offload_modules (fine-grained activation offloading)
  QDoubleSpinBox *moe_imbalance = nullptr, *intra_bw = nullptr, *inter_bw = nullptr, *z3_prefetch = nullptr,
                 *z3_live = nullptr;
  QCheckBox *eight_bit = nullptr, *in_bwd = nullptr;
  QCheckBox* saved_offload = nullptr;  ///< torchtune's enable_activation_offloading
  QCheckBox *sp = nullptr, *tp_overlap = nullptr, *ep_overlap = nullptr, *fp32_grads = nullptr, *masters = nullptr, *contig = nullptr, *scatter = nullptr, *param_gather = nullptr, *dealloc = nullptr,
            *sync_bn = nullptr, *nvls = nullptr, *limit_ag = nullptr, *fsdp2 = nullptr;
  QComboBox* nccl_proto = nullptr;
  /// The precision-aware optimizer with its moments' type, or -1 for none.
  QComboBox* states = nullptr;
  /// The plan's Megatron-Core 16-bit gradient buffer as loaded: kept where
  /// the rules allow it (no knob of its own; Note [Megatron's gradient buffer]).
  bool grad_buffer = false;

  // Output.
  QLabel *error_line = nullptr, *h_time = nullptr, *h_tokens = nullptr, *h_mfu = nullptr, *h_mem = nullptr,
         *h_fits = nullptr, *resolved = nullptr, *costs = nullptr, *measured_line = nullptr;
  QTabWidget* tabs = nullptr;
  std::map<QString, QChartView*> views;
  QValueAxis* timeline_x = nullptr;
  QCategoryAxis* timeline_y = nullptr;
  GanttItem* gantt = nullptr;  ///< the timeline's bars (Note [Timeline bars])
  TimeUnit timeline_unit{"ms", 1e6};
  std::pair<TimeNs, TimeNs> zoom_range{0, 0};
  QTimer zoom_timer;  // coalesces the range changes of one zoom gesture

  // Comparison.
  std::vector<Pinned> pins;
  QTableWidget* pin_table = nullptr;

  // Search.
  QSpinBox *s_gpus = nullptr, *s_batch = nullptr, *s_top = nullptr;
  QPushButton *s_run = nullptr, *s_load = nullptr;
  QProgressBar* s_progress = nullptr;
  QLabel* s_status = nullptr;
  QTableWidget* s_table = nullptr;
  QFutureWatcher<SearchOutcome> s_watcher;
  std::shared_ptr<const sim::SearchResult> s_result;
  // The search returns the same plan under several names (ZeRO-3 and FSDP
  // FULL_SHARD, placements that change nothing): the table shows each once
  // (distinct_plans), s_rows[row] indexing s_result->top, at most s_keep rows.
  std::vector<std::size_t> s_rows;
  std::size_t s_keep = 20;
  bool s_running = false;

  QChart* chart(const char* name) const { return views.at(name)->chart(); }

  /// Runs `load`, showing any error in the window; true if it succeeded.
  template <class F>
  bool guarded(F&& load) {
    try {
      load();
      return true;
    } catch (const Error& e) {
      show_error(e.what());
    } catch (const std::exception& e) {
      show_error(std::string("could not load: ") + e.what());
    }
    sync_pickers();  // back to what is loaded
    return false;
  }

  void show_error(const std::string& msg) {
    error_line->setText(qs(msg));
    error_line->setVisible(!msg.empty());
  }

  // ---- building the window -------------------------------------------------

  QWidget* build_left() {
    auto* panel = new QWidget;
    auto* v = new QVBoxLayout(panel);

    auto* src = new QGroupBox("Scenario");
    auto* sf = new QFormLayout(src);
    model = new QComboBox;
    model->setObjectName("model");
    for (const auto& n : models::builtin_names()) model->addItem(qs(n), qs(n));
    for (const auto& n : sim::list_configs("models")) {
      model->addItem(qs(n) + " (configs)", qs(sim::config_dir() + "/models/" + n + ".yaml"));
    }
    model->addItem("Open file… (YAML or HF config.json)", kOpenFile);
    cluster = new QComboBox;
    cluster->setObjectName("cluster");
    for (const auto& n : sim::list_configs("clusters")) cluster->addItem(qs(n), qs(n));
    cluster->addItem("Open file…", kOpenFile);
    plan = new QComboBox;
    plan->setObjectName("plan");
    for (const auto& n : sim::list_configs("plans")) plan->addItem(qs(n), qs(n));
    plan->addItem("Open file…", kOpenFile);
    profile = new QComboBox;
    profile->setObjectName("profile");
    profile->addItem("none (datasheet costs)", QString());
    std::error_code ec;
    std::vector<std::string> h5;
    for (const auto& e : std::filesystem::directory_iterator(sim::config_dir() + "/profiles", ec)) {
      if (e.path().extension() == ".h5") h5.push_back(e.path().string());
    }
    std::sort(h5.begin(), h5.end());
    for (const auto& p : h5) profile->addItem(qs(std::filesystem::path(p).filename().string()), qs(p));
    profile->addItem("Open file…", kOpenFile);
    sf->addRow("Model", model);
    sf->addRow("Cluster", cluster);
    sf->addRow("Plan", plan);
    sf->addRow("Profile", profile);
    v->addWidget(src);

    auto* par = new QGroupBox("Parallelism");
    auto* pf = new QFormLayout(par);
    dp = new QComboBox;
    dp->setObjectName("dp");
    tp = new QComboBox;
    tp->setObjectName("tp");
    pp = new QComboBox;
    pp->setObjectName("pp");
    cp = new QComboBox;
    cp->setObjectName("cp");
    cp_comm = new QComboBox;
    cp_comm->setObjectName("cp_comm");
    loss_parallel = new QComboBox;
    loss_parallel->setObjectName("loss_parallel");
    // Mixture-of-experts knobs (plan.ep, plan.etp, plan.moe_imbalance):
    // enabled only where the model has routed experts (refresh_choices).
    ep = new QComboBox;
    ep->setObjectName("ep");
    etp = new QComboBox;
    etp->setObjectName("etp");
    moe_dispatcher = new QComboBox;
    moe_dispatcher->setObjectName("moe_dispatcher");
    moe_imbalance = new QDoubleSpinBox;
    moe_imbalance->setObjectName("moe_imbalance");
    moe_imbalance->setRange(1.0, 8.0);
    moe_imbalance->setSingleStep(0.1);
    moe_imbalance->setDecimals(2);
    schedule = new QComboBox;
    schedule->setObjectName("schedule");
    schedule->addItem("1F1B", static_cast<int>(sim::Schedule::k1f1b));
    schedule->addItem("GPipe", static_cast<int>(sim::Schedule::kGpipe));
    schedule->addItem("interleaved 1F1B", static_cast<int>(sim::Schedule::kInterleaved));
    schedule->addItem("zero bubble (ZB-H1)", static_cast<int>(sim::Schedule::kZbH1));
    schedule->addItem("naive model parallel", static_cast<int>(sim::Schedule::kNaive));
    vstages = new QSpinBox;
    vstages->setObjectName("virtual_stages");
    vstages->setRange(0, 64);
    vstages->setSpecialValueText("auto (2)");
    sp = new QCheckBox("sequence parallel");
    sp->setObjectName("sequence_parallel");
    tp_overlap = new QCheckBox("overlap TP communication");
    tp_overlap->setObjectName("tp_comm_overlap");
    ep_overlap = new QCheckBox("overlap EP all-to-alls");
    ep_overlap->setObjectName("overlap_moe_expert_parallel_comm");
    pf->addRow("Data parallel", dp);
    pf->addRow("Tensor parallel", tp);
    pf->addRow("Pipeline stages", pp);
    pf->addRow("Context parallel", cp);
    pf->addRow("K/V exchange", cp_comm);
    pf->addRow("Vocab-parallel loss", loss_parallel);
    pf->addRow("Expert parallel", ep);
    pf->addRow("Expert tensor parallel", etp);
    pf->addRow("Token dispatcher", moe_dispatcher);
    pf->addRow("Load imbalance", moe_imbalance);
    pf->addRow("", ep_overlap);
    pf->addRow("Schedule", schedule);
    pf->addRow("Virtual stages", vstages);
    pf->addRow("", sp);
    pf->addRow("", tp_overlap);
    dealloc = new QCheckBox("free sent outputs (Megatron)");
    dealloc->setObjectName("deallocate_pipeline_outputs");
    pf->addRow("", dealloc);
    sync_bn = new QCheckBox("SyncBatchNorm");
    sync_bn->setObjectName("sync_batchnorm");
    pf->addRow("", sync_bn);
    v->addWidget(par);

    auto* bat = new QGroupBox("Batch");
    auto* bf = new QFormLayout(bat);
    micro_batch = new QSpinBox;
    micro_batch->setObjectName("micro_batch");
    micro_batch->setRange(0, 1 << 20);
    micro_batch->setSpecialValueText("auto");
    batch_mode = new QComboBox;
    batch_mode->setObjectName("batch_mode");
    batch_mode->addItem("accumulation steps", 0);
    batch_mode->addItem("global batch", 1);
    batch_value = new QSpinBox;
    batch_value->setObjectName("batch_value");
    batch_value->setRange(0, 1 << 30);
    batch_value->setSpecialValueText("auto");
    seq_len = new QSpinBox;
    seq_len->setObjectName("seq_len");
    seq_len->setRange(0, 1 << 24);
    seq_len->setSpecialValueText("model's maximum");
    bf->addRow("Micro-batch", micro_batch);
    bf->addRow("Batch set by", batch_mode);
    bf->addRow("", batch_value);
    bf->addRow("Sequence length", seq_len);
    v->addWidget(bat);

    auto* mem = new QGroupBox("Memory and precision");
    auto* mf = new QFormLayout(mem);
    zero = new QComboBox;
    zero->setObjectName("zero");
    zero->addItem("0 (replicated, DDP)", 0);
    zero->addItem("ZeRO-1 (optimizer)", 1);
    zero->addItem("ZeRO-2 (+ gradients)", 2);
    zero->addItem("ZeRO-3 (+ parameters)", 3);
    zero->addItem("FSDP full shard", 10 + static_cast<int>(sim::FsdpMode::kFullShard));
    zero->addItem("FSDP shard grad op", 10 + static_cast<int>(sim::FsdpMode::kShardGradOp));
    zero->addItem("FSDP hybrid shard", 10 + static_cast<int>(sim::FsdpMode::kHybridShard));
    offload = new QComboBox;
    offload->setObjectName("offload");
    offload->addItem("none", 0);
    offload->addItem("optimizer to CPU", 1);
    offload->addItem("optimizer + parameters to CPU", 2);
    recompute = new QComboBox;
    recompute->setObjectName("recompute");
    recompute->addItem("none", static_cast<int>(sim::Recompute::kNone));
    recompute->addItem("selective", static_cast<int>(sim::Recompute::kSelective));
    recompute->addItem("full", static_cast<int>(sim::Recompute::kFull));
    recompute->addItem("op (torchtitan)", static_cast<int>(sim::Recompute::kOp));
    // Megatron's block method (Note [Block recompute]): 0, every block.
    rc_layers = new QSpinBox;
    rc_layers->setObjectName("recompute_num_layers");
    rc_layers->setRange(0, 999);
    rc_layers->setSpecialValueText("all");  // blocks; N: the first N of each chunk (the tooltip says so)
    // Note [Recompute modules]: only Megatron-Core's names, by commas or spaces.
    rc_modules = new QLineEdit;
    rc_modules->setObjectName("recompute_modules");
    rc_modules->setPlaceholderText("core_attn");
    rc_modules->setValidator(new QRegularExpressionValidator(
        QRegularExpression("^\\s*((core_attn|layernorm|moe_act|mla_up_proj|mlp|shared_experts|moe|mhc)[\\s,]*)*$"), rc_modules));
    // Megatron-Core's CPU offloading (Note [Activation offload]): layers whose activations go to the host.
    act_offload = new QSpinBox;
    act_offload->setObjectName("cpu_offloading_num_layers");
    act_offload->setRange(0, 999);
    act_offload->setSpecialValueText("none");
    act_offload->setSuffix(" layers");
    // Note [Fine-grained offload]: Megatron-Core's offload_modules, by commas or spaces.
    saved_offload = new QCheckBox("all saved");
    saved_offload->setObjectName("enable_activation_offloading");
    offload_mods = new QLineEdit;
    offload_mods->setObjectName("offload_modules");
    offload_mods->setPlaceholderText("or modules");
    offload_mods->setValidator(new QRegularExpressionValidator(
        QRegularExpression("^\\s*((attn_norm|qkv_linear|core_attn|attn_proj|mlp_norm|expert_fc1|moe_act|fused_group_mlp)[\\s,]*)*$"),
        offload_mods));
    attention = new QComboBox;
    attention->setObjectName("attention");
    precision = new QComboBox;
    precision->setObjectName("precision");
    kernels_box = new QComboBox;
    kernels_box->setObjectName("kernels");
    kernels_box->addItem("composite", static_cast<int>(sim::Kernels::kComposite));
    kernels_box->addItem("fused", static_cast<int>(sim::Kernels::kFused));
    fp8_recipe = new QComboBox;
    fp8_recipe->setObjectName("fp8_recipe");
    fp32_grads = new QCheckBox("fp32 grads");
    fp32_grads->setObjectName("fp32_grads");
    param_gather = new QCheckBox("gather in fwd");
    param_gather->setObjectName("overlap_param_gather");
    masters = new QCheckBox("fp32 masters");
    masters->setObjectName("master_weights");
    eight_bit = new QCheckBox("8-bit states");
    eight_bit->setObjectName("optim_bits");
    in_bwd = new QCheckBox("step in bwd");
    in_bwd->setObjectName("optimizer_in_backward");
    states = new QComboBox;
    states->setObjectName("optimizer_states");
    // Short words, and no wider than they need (Note [Chart sizes]): "TE"
    // is Transformer Engine's FusedAdam, its moments' type after it.
    states->addItem("fp32", -1);
    for (sim::StateDtype d : {sim::StateDtype::kFp32, sim::StateDtype::kBf16, sim::StateDtype::kFp16, sim::StateDtype::kFp8}) {
      states->addItem(QString("TE ") + sim::to_string(d), static_cast<int>(d));
    }
    states->setSizeAdjustPolicy(QComboBox::AdjustToMinimumContentsLengthWithIcon);
    states->setMinimumContentsLength(6);
    contig = new QCheckBox("contiguous");
    contig->setObjectName("contiguous_gradients");
    scatter = new QCheckBox("reduce-scatter");
    scatter->setObjectName("reduce_scatter");
    fsdp_wrap = new QComboBox;
    fsdp_wrap->setObjectName("fsdp_wrap");
    fsdp_wrap->addItem("blocks + root", static_cast<int>(sim::FsdpWrap::kBlocks));
    fsdp_wrap->addItem("each layer", static_cast<int>(sim::FsdpWrap::kLayers));
    fsdp_wrap->addItem("torchtitan", static_cast<int>(sim::FsdpWrap::kTorchtitan));
    limit_ag = new QCheckBox("limit all-gathers");
    limit_ag->setObjectName("limit_all_gathers");
    fsdp2 = new QCheckBox("FSDP2");
    fsdp2->setObjectName("fsdp_version");
    // DeepSpeed's element counts: up to 1e12, whole elements.
    z3_prefetch = new QDoubleSpinBox;
    z3_prefetch->setObjectName("stage3_prefetch_bucket_size");
    z3_live = new QDoubleSpinBox;
    z3_live->setObjectName("stage3_max_live_parameters");
    for (QDoubleSpinBox* b : {z3_prefetch, z3_live}) {
      b->setRange(0, 1e12);
      b->setDecimals(0);
      b->setSingleStep(1e7);
    }
    {
      // The optimizer's states beside the sharding, sharing its width: a
      // row more would take the charts' height at 1280 x 800, a third box
      // beside the masters their width (Note [Chart sizes]).
      zero->setSizeAdjustPolicy(QComboBox::AdjustToMinimumContentsLengthWithIcon);
      zero->setMinimumContentsLength(9);
      auto* row = new QHBoxLayout;
      row->setContentsMargins(0, 0, 0, 0);
      row->addWidget(zero, 2);
      row->addWidget(states, 1);
      mf->addRow("Sharding", row);
    }
    // Two check boxes a row, not a row each (Note [Chart sizes]): the
    // optimizer's states, then ZeRO-1's reduction and gather.
    for (auto [left, right] : {std::pair{fp32_grads, masters}, std::pair{eight_bit, in_bwd}, std::pair{scatter, param_gather}}) {
      auto* row = new QHBoxLayout;
      row->setContentsMargins(0, 0, 0, 0);
      row->addWidget(left);
      row->addWidget(right);
      row->addStretch(1);
      mf->addRow("", row);
    }
    {
      // FSDP's units and which FSDP on one row: beside the limit and
      // ZeRO-2's box it widened the panel past what the charts can give
      // (Note [Chart sizes]).
      auto* row = new QHBoxLayout;
      row->setContentsMargins(0, 0, 0, 0);
      row->addWidget(fsdp_wrap, 1);
      row->addWidget(fsdp2);
      mf->addRow("FSDP units", row);
    }
    {
      // FSDP's limit and ZeRO-2's buffers, never both enabled, on one row
      // (Note [Chart sizes]: a row more of knobs takes the charts' height
      // at 1280 x 800).
      auto* row = new QHBoxLayout;
      row->setContentsMargins(0, 0, 0, 0);
      row->addWidget(limit_ag);
      row->addWidget(contig);
      row->addStretch(1);
      mf->addRow("", row);
    }
    mf->addRow("ZeRO-3 prefetch", z3_prefetch);
    mf->addRow("ZeRO-3 live", z3_live);
    mf->addRow("Offload", offload);
    // A row of its own: beside the offload box it would widen the panel
    // past what 1280 x 800 leaves the charts (Note [Chart sizes]).
    {
      // Whole layers, or Megatron-Core's modules, beside them.
      auto* row = new QHBoxLayout;
      row->setContentsMargins(0, 0, 0, 0);
      row->addWidget(act_offload);
      row->addWidget(offload_mods, 1);
      mf->addRow("Acts to CPU", row);
      // torchtune's, a row below: beside them it would widen the panel too.
      mf->addRow("", saved_offload);
    }
    {
      auto* row = new QHBoxLayout;
      row->setContentsMargins(0, 0, 0, 0);
      row->addWidget(recompute, 1);
      row->addWidget(rc_layers);
      mf->addRow("Recompute", row);
      // A row of its own, as "Acts to CPU" (Note [Chart sizes]).
      mf->addRow("Modules", rc_modules);
    }
    // The kernels and the FP8 recipe beside attention and precision, not
    // rows of their own (Note [Chart sizes]).
    for (auto [label, left, right] : {std::tuple{"Attention", attention, kernels_box}, std::tuple{"Precision", precision, fp8_recipe}}) {
      auto* row = new QHBoxLayout;
      row->setContentsMargins(0, 0, 0, 0);
      row->addWidget(left, 1);
      row->addWidget(right, 1);
      mf->addRow(label, row);
    }
    v->addWidget(mem);

    auto* clu = new QGroupBox("Cluster");
    auto* cf = new QFormLayout(clu);
    nodes = new QSpinBox;
    nodes->setObjectName("nodes");
    nodes->setRange(1, 1 << 16);
    gpus_per_node = new QSpinBox;
    gpus_per_node->setObjectName("gpus_per_node");
    gpus_per_node->setRange(1, 1024);
    intra_bw = new QDoubleSpinBox;
    intra_bw->setObjectName("intra_bw");
    intra_bw->setRange(0.001, 1e5);
    intra_bw->setDecimals(3);
    intra_bw->setSuffix(" GB/s");
    inter_bw = new QDoubleSpinBox;
    inter_bw->setObjectName("inter_bw");
    inter_bw->setRange(0.001, 1e5);
    inter_bw->setDecimals(3);
    inter_bw->setSuffix(" GB/s");
    cf->addRow("Nodes", nodes);
    cf->addRow("GPUs per node", gpus_per_node);
    cf->addRow("Intra-node link", intra_bw);
    nvls = new QCheckBox("NVLink SHARP");
    nvls->setObjectName("nvls");
    cf->addRow("", nvls);
    // NCCL_PROTO (Note [NCCL protocols]): a bit per sim::NcclProtocol.
    nccl_proto = new QComboBox;
    nccl_proto->setObjectName("nccl_proto");
    nccl_proto->addItem("NCCL's choice", 7);
    nccl_proto->addItem("^LL128", 5);
    nccl_proto->addItem("Simple only", 4);
    cf->addRow("NCCL protocols", nccl_proto);
    cf->addRow("Inter-node link (per NIC)", inter_bw);
    v->addWidget(clu);
    v->addStretch(1);

    auto* scroll = new QScrollArea;
    scroll->setObjectName("knobs");
    scroll->setWidget(panel);
    scroll->setWidgetResizable(true);
    // As wide as the knobs want, beside the vertical scroll bar: no horizontal one.
    scroll->setHorizontalScrollBarPolicy(Qt::ScrollBarAlwaysOff);
    scroll->setMinimumWidth(std::max(330, panel->sizeHint().width() + scroll->verticalScrollBar()->sizeHint().width() +
                                              2 * scroll->frameWidth()));
    return scroll;
  }

  QChartView* make_view(const QString& name, const QString& title) {
    auto* c = new QChart;
    c->setTitle(title);
    c->legend()->setAlignment(Qt::AlignBottom);
    auto* view = new ChartView(c);
    view->setObjectName(name);
    view->setMinimumSize(kChartMinWidth, kChartMinHeight);  // Note [Chart sizes]
    QObject::connect(c, &QChart::plotAreaChanged, w, [c] { fit_ticks(c); });
    view->setRenderHint(QPainter::Antialiasing);
    views[name] = view;
    return view;
  }

  QWidget* build_explorer_tab() {
    // The page scrolls where the window is too small for the charts' minimum
    // (Note [Chart sizes]); at 1280 x 800 and above it fits.
    auto* page = new QWidget;
    auto* scroll = new QScrollArea;
    scroll->setObjectName("explorer_scroll");
    scroll->setWidget(page);
    scroll->setWidgetResizable(true);
    scroll->setFrameShape(QFrame::NoFrame);
    auto* v = new QVBoxLayout(page);
    auto* head = new FlowLayout;
    head->setContentsMargins(0, 0, 0, 0);
    auto headline = [&](QLabel*& l, const char* name) {
      l = new QLabel("—");
      l->setObjectName(name);
      l->setStyleSheet("font-size: 13pt; font-weight: bold; padding: 4px 10px;");
      head->addWidget(l);
    };
    headline(h_time, "h_time");
    headline(h_tokens, "h_tokens");
    headline(h_mfu, "h_mfu");
    headline(h_mem, "h_mem");
    headline(h_fits, "h_fits");
    v->addLayout(head);
    resolved = new QLabel;
    resolved->setObjectName("resolved");
    resolved->setWordWrap(true);
    costs = new QLabel;
    costs->setObjectName("costs");
    costs->setWordWrap(true);
    measured_line = new QLabel;
    measured_line->setObjectName("measured");
    measured_line->setWordWrap(true);
    measured_line->setVisible(false);
    v->addWidget(resolved);
    v->addWidget(costs);
    v->addWidget(measured_line);

    auto* split = new QSplitter(Qt::Vertical);
    auto* top = new QSplitter(Qt::Horizontal);
    top->addWidget(make_view("breakdown", "Iteration time breakdown (critical path)"));
    top->addWidget(make_view("memory", "Peak memory per stage (GiB)"));
    // Six legend entries side by side would be elided at half a window's
    // width; in a column on the right each keeps its whole name.
    for (const char* name : {"breakdown", "memory"}) chart(name)->legend()->setAlignment(Qt::AlignRight);
    split->addWidget(top);
    auto* tl = new QWidget;
    auto* tlv = new QVBoxLayout(tl);
    tlv->setContentsMargins(0, 0, 0, 0);
    QChartView* timeline = make_view("timeline", "One iteration, per stage (drag to zoom, right-click to zoom out)");
    timeline->setRubberBand(QChartView::HorizontalRubberBand);
    gantt = new GanttItem(timeline->chart());
    tlv->addWidget(timeline, 1);
    // In the chart's top right corner, not on a row of its own below it.
    auto* reset = new QPushButton("Reset zoom");
    reset->setObjectName("reset_zoom");
    QObject::connect(reset, &QPushButton::clicked, w, [this] { draw_timeline(); });
    auto* corner = new QVBoxLayout(timeline);
    corner->setContentsMargins(6, 6, 6, 6);
    corner->addWidget(reset, 0, Qt::AlignRight | Qt::AlignTop);
    corner->addStretch(1);
    split->addWidget(tl);
    split->setStretchFactor(0, 1);
    split->setStretchFactor(1, 1);
    split->setChildrenCollapsible(false);
    top->setChildrenCollapsible(false);
    v->addWidget(split, 1);
    return scroll;
  }

  QWidget* build_compare_tab() {
    auto* page = new QWidget;
    auto* v = new QVBoxLayout(page);
    auto* buttons = new QHBoxLayout;
    auto* pin = new QPushButton("Pin current scenario");
    pin->setObjectName("pin");
    auto* remove = new QPushButton("Remove selected");
    auto* csv = new QPushButton("Export CSV…");
    QObject::connect(pin, &QPushButton::clicked, w, [this] { w->pin_current(); });
    QObject::connect(remove, &QPushButton::clicked, w, [this] {
      const int row = pin_table->currentRow();
      if (row < 0 || row >= static_cast<int>(pins.size())) return;
      pins.erase(pins.begin() + row);
      draw_comparison();
    });
    QObject::connect(csv, &QPushButton::clicked, w, [this] {
      const QString f = QFileDialog::getSaveFileName(w, "Export scenarios", "scenarios.csv", "CSV (*.csv)");
      if (!f.isEmpty()) w->export_pins_csv(f);
    });
    buttons->addWidget(pin);
    buttons->addWidget(remove);
    buttons->addWidget(csv);
    buttons->addStretch(1);
    v->addLayout(buttons);
    auto* split = new QSplitter(Qt::Vertical);
    split->addWidget(make_view("comparison", "Pinned scenarios: iteration time against peak memory"));
    pin_table = new QTableWidget(0, 7);
    pin_table->setObjectName("pins");
    pin_table->setHorizontalHeaderLabels({"scenario", "time", "tokens/s", "MFU", "peak GiB", "fits", "Pareto"});
    pin_table->horizontalHeader()->setSectionResizeMode(0, QHeaderView::Stretch);
    pin_table->setSelectionBehavior(QAbstractItemView::SelectRows);
    pin_table->setEditTriggers(QAbstractItemView::NoEditTriggers);
    split->addWidget(pin_table);
    split->setStretchFactor(0, 3);  // the chart is the point; the table is its legend
    split->setStretchFactor(1, 1);
    split->setChildrenCollapsible(false);
    v->addWidget(split, 1);
    return page;
  }

  QWidget* build_search_tab() {
    auto* page = new QWidget;
    auto* v = new QVBoxLayout(page);
    auto* form = new QHBoxLayout;
    s_gpus = new QSpinBox;
    s_gpus->setObjectName("s_gpus");
    s_gpus->setRange(0, 1 << 24);
    s_gpus->setSpecialValueText("whole cluster");
    s_batch = new QSpinBox;
    s_batch->setObjectName("s_batch");
    s_batch->setRange(0, 1 << 30);
    s_batch->setSpecialValueText("4 per GPU");
    s_top = new QSpinBox;
    s_top->setObjectName("s_top");
    s_top->setRange(1, 1000);
    s_top->setValue(20);
    s_run = new QPushButton("Search");
    s_run->setObjectName("s_run");
    s_load = new QPushButton("Load selected plan");
    s_load->setObjectName("s_load");
    s_load->setEnabled(false);
    form->addWidget(new QLabel("GPUs"));
    form->addWidget(s_gpus);
    form->addWidget(new QLabel("Global batch"));
    form->addWidget(s_batch);
    form->addWidget(new QLabel("Keep best"));
    form->addWidget(s_top);
    form->addWidget(s_run);
    form->addWidget(s_load);
    form->addStretch(1);
    v->addLayout(form);
    s_progress = new QProgressBar;
    s_progress->setObjectName("s_progress");
    s_progress->setRange(0, 1);
    s_progress->setValue(0);
    v->addWidget(s_progress);
    s_status = new QLabel("Searches dp × tp × pp, schedules (zero bubble ZB-H1 among them), micro-batches, "
                          "ZeRO/FSDP, offload, recompute and sequence parallelism, and for a mixture-of-experts "
                          "model expert parallelism ep × etp, for the current model and cluster; precision, "
                          "optimizer, sequence length and the experts' load imbalance come from the current plan.");
    s_status->setObjectName("s_status");
    s_status->setWordWrap(true);
    v->addWidget(s_status);
    s_table = new QTableWidget(0, 6);
    s_table->setObjectName("s_table");
    s_table->setHorizontalHeaderLabels({"plan", "time", "tokens/s", "MFU", "peak GiB", "Pareto"});
    s_table->horizontalHeader()->setSectionResizeMode(0, QHeaderView::Stretch);
    s_table->setSelectionBehavior(QAbstractItemView::SelectRows);
    s_table->setSelectionMode(QAbstractItemView::SingleSelection);
    s_table->setEditTriggers(QAbstractItemView::NoEditTriggers);
    v->addWidget(s_table, 1);
    QObject::connect(s_run, &QPushButton::clicked, w, [this] { w->start_search(); });
    QObject::connect(s_load, &QPushButton::clicked, w, [this] {
      if (s_table->currentRow() >= 0) w->load_search_entry(s_table->currentRow());
    });
    QObject::connect(s_table, &QTableWidget::cellDoubleClicked, w, [this](int row, int) { w->load_search_entry(row); });
    QObject::connect(&s_watcher, &QFutureWatcher<SearchOutcome>::finished, w, [this] { search_done(); });
    return page;
  }

  void build() {
    auto* central = new QWidget;
    auto* v = new QVBoxLayout(central);
    error_line = new QLabel;
    error_line->setObjectName("error");
    error_line->setWordWrap(true);
    error_line->setTextInteractionFlags(Qt::TextSelectableByMouse);
    error_line->setStyleSheet("color: #a40000; background: #fde8e8; padding: 6px; border: 1px solid #e0a0a0;");
    error_line->setVisible(false);
    v->addWidget(error_line);
    auto* split = new QSplitter(Qt::Horizontal);
    split->addWidget(build_left());
    tabs = new QTabWidget;
    tabs->setObjectName("tabs");
    tabs->addTab(build_explorer_tab(), "Explorer");
    tabs->addTab(build_compare_tab(), "Compare");
    tabs->addTab(build_search_tab(), "Search");
    split->addWidget(tabs);
    split->setStretchFactor(0, 0);  // the knobs keep their width; the charts take the rest
    split->setStretchFactor(1, 1);
    split->setChildrenCollapsible(false);
    v->addWidget(split, 1);
    w->setCentralWidget(central);
    build_menu();
    connect_knobs();
    for (const auto& [name, tip] : kKnobTips) {
      auto* knob = w->findChild<QWidget*>(name);
      if (knob == nullptr) continue;
      const QString html = "<p>" + QString(tip).toHtmlEscaped() + "</p>";  // rich text wraps
      knob->setToolTip(html);
      if (auto* form = qobject_cast<QFormLayout*>(knob->parentWidget()->layout())) {
        if (QWidget* label = form->labelForField(knob)) label->setToolTip(html);
      }
    }
    debounce.setSingleShot(true);
    debounce.setInterval(kDebounceMs);
    // To the millisecond: a coarse timer (Qt's default) fires up to 5% late,
    // 6 ms added to every knob change, and unevenly.
    debounce.setTimerType(Qt::PreciseTimer);
    QObject::connect(&debounce, &QTimer::timeout, w, [this] { launch(); });
    zoom_timer.setSingleShot(true);
    zoom_timer.setInterval(30);
    QObject::connect(&zoom_timer, &QTimer::timeout, w, [this] { draw_timeline_series(zoom_range.first, zoom_range.second); });
    QObject::connect(&watcher, &QFutureWatcher<Outcome>::finished, w, [this] { finished(); });
  }

  void build_menu() {
    QMenu* file = w->menuBar()->addMenu("&File");
    file->addAction("Open model (YAML or HF config.json)…", w, [this] { pick_file(model, "Model", "Models (*.yaml *.yml *.json)"); });
    file->addAction("Open cluster…", w, [this] { pick_file(cluster, "Cluster", "Clusters (*.yaml *.yml)"); });
    file->addAction("Open plan…", w, [this] { pick_file(plan, "Plan", "Plans (*.yaml *.yml)"); });
    file->addAction("Open profile…", w, [this] { pick_file(profile, "Profile", "Profiles (*.h5)"); });
    file->addAction("Open validation result…", w, [this] {
      const QString f = QFileDialog::getOpenFileName(w, "Validation result", {}, "JSON (*.json)");
      if (!f.isEmpty()) w->open_measured(f);
    });
    file->addSeparator();
    file->addAction("Export charts as PNG…", w, [this] {
      const QString d = QFileDialog::getExistingDirectory(w, "Export charts into");
      if (!d.isEmpty()) w->export_charts_png(d);
    });
    file->addAction("Export pinned scenarios as CSV…", w, [this] {
      const QString f = QFileDialog::getSaveFileName(w, "Export scenarios", "scenarios.csv", "CSV (*.csv)");
      if (!f.isEmpty()) w->export_pins_csv(f);
    });
    file->addSeparator();
    file->addAction("Quit", w, [this] { w->close(); });
  }

  void pick_file(QComboBox* box, const QString& what, const QString& filter) {
    const QString f = QFileDialog::getOpenFileName(w, "Open " + what.toLower(), {}, filter);
    if (f.isEmpty()) {
      sync_pickers();
      return;
    }
    if (box == model) w->open_model(f);
    if (box == cluster) w->open_cluster(f);
    if (box == plan) w->open_plan(f);
    if (box == profile) w->open_profile(f);
  }

  void connect_knobs() {
    auto picker = [this](QComboBox* box, auto open) {
      QObject::connect(box, qOverload<int>(&QComboBox::activated), w, [this, box, open](int i) {
        const QString data = box->itemData(i).toString();
        if (data == kOpenFile) {
          pick_file(box, box->objectName(), box == profile ? "Profiles (*.h5)" : "YAML / JSON (*.yaml *.yml *.json)");
        } else {
          open(data);
        }
      });
    };
    picker(model, [this](const QString& s) { w->open_model(s); });
    picker(cluster, [this](const QString& s) { w->open_cluster(s); });
    picker(plan, [this](const QString& s) {
      if (!s.startsWith("__")) w->open_plan(s);
    });
    picker(profile, [this](const QString& s) { w->open_profile(s); });
    for (QComboBox* b : {dp, tp, pp, cp, cp_comm, loss_parallel, ep, etp, moe_dispatcher, schedule, zero, offload, recompute, attention, precision, batch_mode,
                         fsdp_wrap, kernels_box, fp8_recipe}) {
      QObject::connect(b, qOverload<int>(&QComboBox::currentIndexChanged), w, [this] { knobs_changed(); });
    }
    for (QSpinBox* s : {vstages, micro_batch, batch_value, seq_len, nodes, gpus_per_node, rc_layers, act_offload}) {
      QObject::connect(s, qOverload<int>(&QSpinBox::valueChanged), w, [this] { knobs_changed(); });
    }
    for (QDoubleSpinBox* s : {moe_imbalance, intra_bw, inter_bw, z3_prefetch, z3_live}) {
      QObject::connect(s, qOverload<double>(&QDoubleSpinBox::valueChanged), w, [this] { knobs_changed(); });
    }
    QObject::connect(rc_modules, &QLineEdit::editingFinished, w, [this] { knobs_changed(); });
    QObject::connect(offload_mods, &QLineEdit::editingFinished, w, [this] { knobs_changed(); });
    QObject::connect(sp, &QCheckBox::toggled, w, [this] { knobs_changed(); });
    QObject::connect(tp_overlap, &QCheckBox::toggled, w, [this] { knobs_changed(); });
    QObject::connect(ep_overlap, &QCheckBox::toggled, w, [this] { knobs_changed(); });
    QObject::connect(dealloc, &QCheckBox::toggled, w, [this] { knobs_changed(); });
    QObject::connect(sync_bn, &QCheckBox::toggled, w, [this] { knobs_changed(); });
    QObject::connect(fp32_grads, &QCheckBox::toggled, w, [this] { knobs_changed(); });
    QObject::connect(param_gather, &QCheckBox::toggled, w, [this] { knobs_changed(); });
    QObject::connect(masters, &QCheckBox::toggled, w, [this] { knobs_changed(); });
    QObject::connect(eight_bit, &QCheckBox::toggled, w, [this] { knobs_changed(); });
    QObject::connect(in_bwd, &QCheckBox::toggled, w, [this] { knobs_changed(); });
    QObject::connect(saved_offload, &QCheckBox::toggled, w, [this] { knobs_changed(); });
    QObject::connect(states, qOverload<int>(&QComboBox::currentIndexChanged), w, [this] { knobs_changed(); });
    QObject::connect(contig, &QCheckBox::toggled, w, [this] { knobs_changed(); });
    QObject::connect(scatter, &QCheckBox::toggled, w, [this] { knobs_changed(); });
    QObject::connect(limit_ag, &QCheckBox::toggled, w, [this] { knobs_changed(); });
    QObject::connect(fsdp2, &QCheckBox::toggled, w, [this] { knobs_changed(); });
    QObject::connect(nvls, &QCheckBox::toggled, w, [this] { knobs_changed(); });
    QObject::connect(nccl_proto, qOverload<int>(&QComboBox::currentIndexChanged), w, [this] { knobs_changed(); });
  }

  // ---- scenario <-> controls -----------------------------------------------

  void sync_pickers() {
    syncing = true;
    select_data(model, qs(scenario.model_source), qs(scenario.model_source));
    select_data(cluster, qs(scenario.cluster_source), qs(scenario.cluster_source));
    select_data(plan, qs(scenario.plan_source), qs(scenario.plan_source));
    select_data(profile, qs(scenario.profile_source),
                qs(std::filesystem::path(scenario.profile_source).filename().string()));
    syncing = false;
  }

  /// Sets every knob from the scenario's plan and cluster.
  void sync_knobs() {
    syncing = true;
    const sim::PlanSpec& p = scenario.plan;
    const sim::ClusterSpec& c = scenario.cluster;
    nodes->setValue(c.nodes);
    gpus_per_node->setValue(c.gpus_per_node);
    intra_bw->setValue(c.intra_node.bandwidth / kGiga);
    inter_bw->setValue(c.inter_node.bandwidth / kGiga);
    nvls->setChecked(c.nccl_nvls_enable && c.intra_node.nvls_efficiency > 0);
    nvls->setEnabled(c.intra_node.nvls_efficiency > 0);
    // A mask no item names (a file's "LL"): kept, shown as itself.
    int pi = nccl_proto->findData(c.nccl_proto);
    if (pi < 0) {
      nccl_proto->addItem(QString("NCCL_PROTO mask %1").arg(c.nccl_proto), c.nccl_proto);
      pi = nccl_proto->count() - 1;
    }
    nccl_proto->setCurrentIndex(pi);
    nccl_proto->setEnabled(sim::AnalyticCommModel(c).protocol_model());
    const int pipeline = p.model_parallel > 0 ? p.model_parallel : p.pp;
    schedule->setCurrentIndex(schedule->findData(static_cast<int>(p.model_parallel > 0 ? sim::Schedule::kNaive : p.schedule)));
    vstages->setValue(p.virtual_stages);
    moe_imbalance->setValue(p.moe_imbalance);
    micro_batch->setValue(static_cast<int>(std::min<std::int64_t>(p.micro_batch, micro_batch->maximum())));
    batch_mode->setCurrentIndex(p.global_batch > 0 ? 1 : 0);
    batch_value->setValue(static_cast<int>(
        std::min<std::int64_t>(p.global_batch > 0 ? p.global_batch : p.grad_accum, batch_value->maximum())));
    seq_len->setValue(static_cast<int>(std::min<std::int64_t>(p.seq_len, seq_len->maximum())));
    const int z = p.fsdp != sim::FsdpMode::kNone && p.fsdp != sim::FsdpMode::kNoShard ? 10 + static_cast<int>(p.fsdp)
                                                                                      : p.zero_stage;
    zero->setCurrentIndex(std::max(0, zero->findData(z)));
    offload->setCurrentIndex(p.offload_params == sim::Offload::kCpu ? 2 : p.offload_optimizer == sim::Offload::kCpu ? 1 : 0);
    recompute->setCurrentIndex(recompute->findData(static_cast<int>(p.recompute)));
    rc_layers->setValue(p.recompute_method == sim::RecomputeMethod::kBlock ? p.recompute_num_layers : 0);
    rc_modules->setText(p.recompute_modules_set ? QString::fromStdString(sim::recompute_modules_string(p.recompute_modules)) : QString());
    act_offload->setValue(p.cpu_offloading_num_layers);
    offload_mods->setText(p.fine_grained_activation_offloading ? QString::fromStdString(sim::offload_modules_string(p.offload_modules)) : QString());
    sp->setChecked(p.sequence_parallel);
    tp_overlap->setChecked(p.tp_comm_overlap);
    ep_overlap->setChecked(p.overlap_moe_expert_parallel_comm);
    dealloc->setChecked(p.deallocate_pipeline_outputs);
    sync_bn->setChecked(p.sync_batchnorm);
    fp32_grads->setChecked(p.accumulate_allreduce_grads_in_fp32);
    grad_buffer = p.megatron_grad_buffer;
    param_gather->setChecked(p.overlap_param_gather);
    masters->setChecked(p.master_weights);
    eight_bit->setChecked(p.optim_bits == 8);
    in_bwd->setChecked(p.optimizer_in_backward);
    saved_offload->setChecked(p.enable_activation_offloading);
    states->setCurrentIndex(p.use_precision_aware_optimizer ? std::max(0, states->findData(static_cast<int>(p.exp_avg_dtype))) : 0);
    contig->setChecked(p.contiguous_gradients);
    scatter->setChecked(p.reduce_scatter);
    fsdp_wrap->setCurrentIndex(std::max(0, fsdp_wrap->findData(static_cast<int>(p.fsdp_wrap))));
    kernels_box->setCurrentIndex(std::max(0, kernels_box->findData(static_cast<int>(p.kernels))));
    fp8_recipe->setCurrentIndex(std::max(0, fp8_recipe->findData(static_cast<int>(p.fp8_recipe))));
    limit_ag->setChecked(p.limit_all_gathers);
    fsdp2->setChecked(p.fsdp_version == 2);
    z3_prefetch->setValue(p.stage3_prefetch_bucket_size);
    z3_live->setValue(p.stage3_max_live_parameters);
    refresh_choices(p.tp, pipeline, p.dp, p.cp);
    syncing = false;
  }

  /// Offers only the values the model and cluster allow, keeping the current ones.
  void refresh_choices(int cur_tp, int cur_pp, int cur_dp, int cur_cp) {
    const bool was = syncing;
    syncing = true;
    const KnobChoices ch = knob_choices(*scenario.model, scenario.cluster, cur_tp, cur_pp, cur_cp, scenario.plan.seq_len,
                                        cur_dp, scenario.plan.etp, scenario.plan.attention, scenario.plan.precision);
    set_int_choices(tp, ch.tp, cur_tp);
    set_int_choices(pp, ch.pp, cur_pp);
    set_int_choices(cp, ch.cp, cur_cp);
    set_int_choices(dp, ch.dp, cur_dp, "all remaining GPUs");
    // At cp 1 the exchange is unused: a file's all_gather is kept as it is.
    set_enum_choices(cp_comm, ch.cp_comms, scenario.plan.cp_comm, cur_cp > 1 ? " (invalid here)" : "");
    cp_comm->setEnabled(cur_cp > 1);
    set_enum_choices(loss_parallel, ch.loss_parallels, scenario.plan.loss_parallel, cur_tp > 1 ? " (invalid here)" : "");
    loss_parallel->setEnabled(cur_tp > 1);
    // Experts: a dense model offers ep 1 and etp = tp only; a value from a
    // file it cannot take stays selectable, so it can be set back.
    const sim::PlanSpec& plan_now = scenario.plan;
    set_int_choices(ep, ch.ep, plan_now.ep);
    set_int_choices(etp, ch.etp, plan_now.etp == 0 ? cur_tp : plan_now.etp);
    ep->setEnabled(ch.experts || ep->count() > 1);
    etp->setEnabled(ch.experts || etp->count() > 1);
    set_enum_choices(moe_dispatcher, ch.dispatchers, plan_now.moe_dispatcher, " (invalid here)");
    moe_dispatcher->setEnabled(ch.experts || moe_dispatcher->count() > 1);
    moe_imbalance->setEnabled(ch.experts);
    set_enum_choices(attention, ch.attentions, scenario.plan.attention, " (invalid here)");
    // The rules table's modes (PlanRules::recomputes); op only where described.
    set_enum_choices(recompute, ch.recomputes, scenario.plan.recompute, " (invalid here)");
    attention->setEnabled(ch.attentions.size() > 1);
    const sim::Precision cur_prec = scenario.plan.precision;
    precision->clear();
    for (sim::Precision p : ch.precisions) precision->addItem(sim::to_string(p), static_cast<int>(p));
    int pi = precision->findData(static_cast<int>(cur_prec));
    if (pi < 0) {
      precision->addItem(QString(sim::to_string(cur_prec)) + " (not on this device)", static_cast<int>(cur_prec));
      pi = precision->count() - 1;
    }
    precision->setCurrentIndex(pi);
    const bool piped = cur_pp > 1;
    schedule->setEnabled(piped);
    const bool interleaved = piped && schedule->currentData().toInt() == static_cast<int>(sim::Schedule::kInterleaved);
    // resolve refuses it but with experts split, interleaved stages or none, no full recompute, 16 bits.
    ep_overlap->setEnabled(sim::PlanRules::ep_overlap_values(ep->currentData().toInt(), cur_pp,
                                                             interleaved ? sim::Schedule::kInterleaved : sim::Schedule::k1f1b,
                                                             static_cast<sim::Recompute>(recompute->currentData().toInt()), cur_prec,
                                                             zero_stage_of_box(zero->currentData().toInt()) == 3,
                                                             static_cast<sim::MoeDispatcher>(moe_dispatcher->currentData().toInt()))
                               .back());
    vstages->setEnabled(interleaved);
    dealloc->setEnabled(piped);
    sync_bn->setEnabled(ch.sync_batchnorm);
    vstages->setMaximum(std::max(2, ch.max_virtual_stages));
    sp->setEnabled(ch.sequence_parallel);
    // resolve refuses tp_comm_overlap without sequence parallelism.
    tp_overlap->setEnabled(sim::PlanRules::tp_comm_overlap_values(cur_tp, ch.sequence_parallel && sp->isChecked()).back());
    // and Megatron's buffer beyond ZeRO-1 or with the optimizer offloaded.
    fp32_grads->setEnabled(zero->currentData().toInt() <= 1 && offload->currentData().toInt() == 0);
    // Note [No master weights]: without them only in 16 bits, beside neither of those.
    masters->setEnabled(sixteen_bit_masters());
    // Note [8-bit optimizer]: a state to quantize, on the device, not TE's.
    eight_bit->setEnabled(eight_bit_allowed());
    // Note [Optimizer in backward]: as the rules allow it (one GPU and one
    // micro-batch resolve checks, in one line).
    in_bwd->setEnabled(in_bwd_allowed());
    // Note [Precision-aware optimizer]: Adam under the distributed optimizer.
    states->setEnabled(precision_aware_allowed());
    // FSDP's units and its limit with a sharded FSDP; DeepSpeed's
    // coordinator knobs with its ZeRO-3 (resolve ignores them otherwise).
    const int z = zero->currentData().toInt();
    // DeepSpeed's ZeRO-2 alone has its gradient buffers (resolve ignores the knob elsewhere).
    contig->setEnabled(z == 2);
    // ZeRO-1 alone has the choice (Note [ZeRO-1's reduction]).
    scatter->setEnabled(z == 1);
    // Where the rules allow it: Megatron-LM asserts the distributed optimizer
    // and overlapped reduction (Note [Overlapped parameter gather]).
    param_gather->setEnabled(
        sim::PlanRules::overlap_param_gather_values(z < 10 ? z : 0, z >= 10, plan_now.overlap, plan_now.runtime).back());
    const bool fsdp_params = z == 10 + static_cast<int>(sim::FsdpMode::kFullShard) ||
                             z == 10 + static_cast<int>(sim::FsdpMode::kHybridShard);
    // Under a pipeline a stage is gathered whole once a step (Note [FSDP
    // under a pipeline]): its units and their limit do not matter there.
    fsdp_wrap->setEnabled(fsdp_params && !piped);
    limit_ag->setEnabled(fsdp_params && !piped && !fsdp2->isChecked());
    // Note [FSDP2's reduce-scatter wait]: where FSDP shards gradients, one stage.
    fsdp2->setEnabled(z >= 10 && !piped &&
                      sim::PlanRules::fsdp_versions(static_cast<sim::FsdpMode>(z - 10), plan_now.overlap, true).back() == 2);
    z3_prefetch->setEnabled(z == 3 && !scenario.plan.z3_leaf_layers);
    z3_live->setEnabled(z == 3 && !scenario.plan.z3_leaf_layers);
    rc_layers->setEnabled(recompute->currentData().toInt() == static_cast<int>(sim::Recompute::kFull));
    rc_modules->setEnabled(recompute->currentData().toInt() == static_cast<int>(sim::Recompute::kSelective));
    // The rules table's: one stage, no recompute, a GPU (Note [Activation offload]).
    act_offload->setEnabled(sim::PlanRules(*scenario.model, scenario.cluster)
                                .cpu_offloading_max(cur_pp, static_cast<sim::Recompute>(recompute->currentData().toInt())) > 0);
    // Note [Fine-grained offload]: a model with such modules, on a GPU, without full recompute.
    offload_mods->setEnabled(sim::PlanRules(*scenario.model, scenario.cluster).offload_modules_described() != 0 &&
                             !scenario.cluster.device.gloo_collectives &&
                             recompute->currentData().toInt() != static_cast<int>(sim::Recompute::kFull));
    // Note [Saved-tensor offload]: as the rules allow it.
    saved_offload->setEnabled(saved_offload_allowed(cur_pp, static_cast<sim::Recompute>(recompute->currentData().toInt())));
    // The rules table's: fused where the model's blocks change with it; a
    // recipe to choose under fp8 only (resolve refuses tensorwise elsewhere).
    kernels_box->setEnabled(ch.kernels.size() > 1);
    // The recipes this device runs under fp8 (mxfp8 on Blackwell only, Note
    // [FP8 training]); away from fp8 the box keeps what it shows.
    const sim::Fp8Recipe shown = scenario.plan.precision == sim::Precision::kFp8 || fp8_recipe->count() == 0
                                     ? scenario.plan.fp8_recipe
                                     : static_cast<sim::Fp8Recipe>(fp8_recipe->currentData().toInt());
    set_enum_choices(fp8_recipe, sim::PlanRules(*scenario.model, scenario.cluster).fp8_recipes(sim::Precision::kFp8), shown,
                     " (not on this device)");
    fp8_recipe->setEnabled(ch.fp8_recipes.size() > 1);
    syncing = was;
  }

  /// Reads every knob into the scenario; a key whose value changed is marked
  /// as set in the explorer, so errors point there and not at the file.
  void read_knobs() {
    sim::PlanSpec& p = scenario.plan;
    const sim::PlanSpec before = p;
    auto mark = [&](bool changed, const char* key) {
      if (changed) p.origins.where[std::string("plan.") + key] = std::string("explorer: ") + key;
    };
    p.tp = tp->currentData().toInt();
    const int stages = pp->currentData().toInt();
    const auto sched = static_cast<sim::Schedule>(schedule->currentData().toInt());
    if (sched == sim::Schedule::kNaive && stages > 1) {
      p.model_parallel = stages;
      p.pp = stages;
    } else {
      p.model_parallel = 0;
      p.pp = stages;
      if (sched != sim::Schedule::kNaive) p.schedule = sched;
    }
    p.cp = cp->currentData().toInt();
    if (cp_comm->count() > 0) p.cp_comm = static_cast<sim::CpComm>(cp_comm->currentData().toInt());
    if (loss_parallel->count() > 0) p.loss_parallel = static_cast<sim::LossParallel>(loss_parallel->currentData().toInt());
    p.dp = dp->currentData().toInt();
    p.ep = ep->currentData().toInt();
    // etp 0 follows tp (Megatron-Core's default): kept while the box shows
    // what the plan had; the box's tp is written back as 0 (as the search does).
    const int e = etp->currentData().toInt();
    if (e != (before.etp == 0 ? before.tp : before.etp)) p.etp = e == p.tp ? 0 : e;
    if (moved(moe_imbalance, before.moe_imbalance)) p.moe_imbalance = moe_imbalance->value();
    if (moe_dispatcher->count() > 0) p.moe_dispatcher = static_cast<sim::MoeDispatcher>(moe_dispatcher->currentData().toInt());
    // Virtual stages belong to the interleaved schedule: the box's value
    // while it runs; cleared (the box keeps it) when the user leaves it;
    // otherwise as loaded, where resolve says what is wrong with it.
    const bool interleaved = sched == sim::Schedule::kInterleaved && stages > 1;
    const bool was_interleaved = before.schedule == sim::Schedule::kInterleaved && before.pp > 1 && before.model_parallel == 0;
    if (interleaved) {
      p.virtual_stages = vstages->value();
    } else if (was_interleaved) {
      p.virtual_stages = 0;
    }
    p.sequence_parallel = sp->isChecked() && p.tp > 1;
    p.tp_comm_overlap = tp_overlap->isChecked() && sim::PlanRules::tp_comm_overlap_values(p.tp, p.sequence_parallel).back();
    p.deallocate_pipeline_outputs = dealloc->isChecked();
    p.sync_batchnorm = sync_bn->isChecked() && sync_bn->isEnabled();
    p.micro_batch = micro_batch->value();
    if (batch_mode->currentData().toInt() == 1) {
      p.global_batch = batch_value->value();
      p.grad_accum = 0;
    } else {
      p.grad_accum = batch_value->value();
      p.global_batch = 0;
    }
    p.seq_len = seq_len->value();
    const int z = zero->currentData().toInt();
    p.zero_stage = z < 10 ? z : 0;
    p.fsdp = z < 10 ? sim::FsdpMode::kNone : static_cast<sim::FsdpMode>(z - 10);
    p.offload_optimizer = offload->currentData().toInt() >= 1 ? sim::Offload::kCpu : sim::Offload::kNone;
    p.offload_params = offload->currentData().toInt() >= 2 ? sim::Offload::kCpu : sim::Offload::kNone;
    p.recompute = static_cast<sim::Recompute>(recompute->currentData().toInt());
    // Note [Recompute modules]: the box's names under selective recompute
    // (empty: Megatron's default, the core); elsewhere none.
    p.recompute_modules = sim::kRecomputeModulesDefault;
    p.recompute_modules_set = false;
    if (p.recompute == sim::Recompute::kSelective && !rc_modules->text().trimmed().isEmpty()) {
      p.recompute_modules = 0;
      p.recompute_modules_set = true;
      for (const QString& word : rc_modules->text().split(QRegularExpression("[\\s,]+"), Qt::SkipEmptyParts)) {
        p.recompute_modules = static_cast<std::uint8_t>(p.recompute_modules | sim::recompute_module_of(word.toStdString()));
      }
    }
    // Megatron's block method where the box counts blocks; resolve refuses
    // it without full recompute, so elsewhere every block (the box keeps what it shows).
    const bool block = p.recompute == sim::Recompute::kFull && rc_layers->value() > 0;
    // A file's uniform groups stay as the file has them (the box counts the block method's blocks).
    const bool groups = p.recompute == sim::Recompute::kFull && !block && before.recompute_method == sim::RecomputeMethod::kUniform;
    p.recompute_method = block ? sim::RecomputeMethod::kBlock : sim::RecomputeMethod::kUniform;
    p.recompute_num_layers = block ? rc_layers->value() : groups ? before.recompute_num_layers : 0;
    // Where the rules refuse it (a pipeline, recompute, a CPU): off (the box keeps what it shows).
    p.cpu_offloading_num_layers = act_offload->isEnabled() ? act_offload->value() : 0;
    // Note [Fine-grained offload]: the box's modules, where it is on; its other knobs as the plan has them.
    p.fine_grained_activation_offloading = false;
    p.offload_modules = 0;
    if (offload_mods->isEnabled()) {
      for (const QString& word : offload_mods->text().split(QRegularExpression("[\\s,]+"), Qt::SkipEmptyParts)) {
        p.offload_modules = static_cast<std::uint16_t>(p.offload_modules | sim::offload_module_of(word.toStdString()));
      }
      p.fine_grained_activation_offloading = p.offload_modules != 0;
    }
    // Where the rules refuse it: off (the box keeps what it shows).
    p.enable_activation_offloading = saved_offload->isChecked() && saved_offload_allowed(p.pp, p.recompute);
    // resolve refuses the buffer beyond ZeRO-1 or with the optimizer offloaded.
    p.accumulate_allreduce_grads_in_fp32 = fp32_grads->isChecked() && z <= 1 && offload->currentData().toInt() == 0;
    p.megatron_grad_buffer = grad_buffer && z <= 1 && offload->currentData().toInt() == 0;
    // Elsewhere the plan keeps its own (the box keeps what it shows).
    if (z == 2) p.contiguous_gradients = contig->isChecked();
    if (z == 1) p.reduce_scatter = scatter->isChecked();
    // Where the rules refuse it (beyond ZeRO-1, without overlap, under the Python loop): off.
    p.overlap_param_gather = param_gather->isChecked() &&
                             sim::PlanRules::overlap_param_gather_values(p.zero_stage, p.fsdp != sim::FsdpMode::kNone,
                                                                         p.overlap, p.runtime)
                                 .back();
    if (attention->count() > 0) p.attention = static_cast<sim::Attention>(attention->currentData().toInt());
    if (precision->count() > 0) p.precision = static_cast<sim::Precision>(precision->currentData().toInt());
    // Where the rules refuse it: off (the box keeps what it shows).
    p.overlap_moe_expert_parallel_comm =
        ep_overlap->isChecked() &&
        sim::PlanRules::ep_overlap_values(p.ep, p.pp, p.pp > 1 ? p.schedule : sim::Schedule::k1f1b, p.recompute, p.precision,
                                          std::max(p.zero_stage, sim::zero_stage_of(p.fsdp)) == 3, p.moe_dispatcher)
            .back();
    // resolve refuses them off elsewhere (Note [No master weights]): there, on.
    p.master_weights = masters->isChecked() ||
                       !sim::PlanRules::masters_optional(p.precision, p.accumulate_allreduce_grads_in_fp32, p.offload_optimizer);
    // Note [Precision-aware optimizer]: where the rules allow it (it keeps
    // masters); elsewhere off with fp32 states (the boxes keep what they
    // show). The box's moments, both, where it changed them.
    p.use_precision_aware_optimizer = states->currentData().toInt() >= 0 && precision_aware_allowed();
    if (p.use_precision_aware_optimizer) {
      p.master_weights = true;
      const auto m = static_cast<sim::StateDtype>(states->currentData().toInt());
      if (m != before.exp_avg_dtype || !before.use_precision_aware_optimizer) p.exp_avg_dtype = p.exp_avg_sq_dtype = m;
    } else {
      p.main_params_dtype = p.exp_avg_dtype = p.exp_avg_sq_dtype = sim::StateDtype::kFp32;
    }
    // Where the rules refuse them: off (the boxes keep what they show).
    p.optim_bits = eight_bit->isChecked() && eight_bit_allowed() ? 8 : 32;
    p.optimizer_in_backward = in_bwd->isChecked() && in_bwd_allowed();
    // nanotron's fp32 accumulator (a --nanotron scenario's; no box): kept
    // where the rules allow it, off elsewhere (Note [nanotron's fp32 accumulator]).
    p.fp32_grad_accumulator =
        before.fp32_grad_accumulator &&
        sim::PlanRules::fp32_accumulator_allowed(p.precision, p.master_weights, p.zero_stage, std::max(1, p.dp) * p.cp,
                                                 p.fsdp != sim::FsdpMode::kNone,
                                                 p.offload_optimizer, p.accumulate_allreduce_grads_in_fp32 || p.megatron_grad_buffer,
                                                 p.use_precision_aware_optimizer, p.optimizer_in_backward);
    p.kernels = static_cast<sim::Kernels>(kernels_box->currentData().toInt());
    // Under fp8 only; elsewhere delayed, the default (the box keeps what it shows).
    p.fp8_recipe = p.precision == sim::Precision::kFp8 ? static_cast<sim::Fp8Recipe>(fp8_recipe->currentData().toInt())
                                                        : sim::Fp8Recipe::kDelayed;
    // resolve refuses FSDP's knobs away from FSDP's sharded parameters:
    // there they take FSDP's defaults (the boxes keep what they show).
    const bool fsdp_params = p.fsdp == sim::FsdpMode::kFullShard || p.fsdp == sim::FsdpMode::kHybridShard;
    p.fsdp_wrap = fsdp_params ? static_cast<sim::FsdpWrap>(fsdp_wrap->currentData().toInt()) : sim::FsdpWrap::kBlocks;
    p.fsdp_version = fsdp2->isChecked() && sim::PlanRules::fsdp_versions(p.fsdp, p.overlap, true).back() == 2 ? 2 : 1;
    // FSDP2 has no limit_all_gathers (resolve refuses it off there).
    p.limit_all_gathers = !fsdp_params || p.fsdp_version == 2 || limit_ag->isChecked();
    if (moved(z3_prefetch, before.stage3_prefetch_bucket_size)) p.stage3_prefetch_bucket_size = z3_prefetch->value();
    if (moved(z3_live, before.stage3_max_live_parameters)) p.stage3_max_live_parameters = z3_live->value();
    mark(p.tp != before.tp, "tp");
    mark(p.pp != before.pp, "pp");
    mark(p.model_parallel != before.model_parallel, "model_parallel");
    mark(p.schedule != before.schedule, "schedule");
    mark(p.cp != before.cp, "cp");
    mark(p.cp_comm != before.cp_comm, "cp_comm");
    mark(p.loss_parallel != before.loss_parallel, "loss_parallel");
    mark(p.dp != before.dp, "dp");
    mark(p.ep != before.ep, "ep");
    mark(p.etp != before.etp, "etp");
    mark(p.moe_dispatcher != before.moe_dispatcher, "moe_dispatcher");
    mark(p.moe_imbalance != before.moe_imbalance, "moe_imbalance");
    mark(p.virtual_stages != before.virtual_stages, "virtual_stages");
    mark(p.sequence_parallel != before.sequence_parallel, "sequence_parallel");
    mark(p.tp_comm_overlap != before.tp_comm_overlap, "tp_comm_overlap");
    mark(p.overlap_moe_expert_parallel_comm != before.overlap_moe_expert_parallel_comm, "overlap_moe_expert_parallel_comm");
    mark(p.deallocate_pipeline_outputs != before.deallocate_pipeline_outputs, "deallocate_pipeline_outputs");
    mark(p.sync_batchnorm != before.sync_batchnorm, "sync_batchnorm");
    mark(p.accumulate_allreduce_grads_in_fp32 != before.accumulate_allreduce_grads_in_fp32, "accumulate_allreduce_grads_in_fp32");
    mark(p.contiguous_gradients != before.contiguous_gradients, "contiguous_gradients");
    mark(p.reduce_scatter != before.reduce_scatter, "reduce_scatter");
    mark(p.overlap_param_gather != before.overlap_param_gather, "overlap_param_gather");
    mark(p.master_weights != before.master_weights, "master_weights");
    mark(p.optim_bits != before.optim_bits, "optim_bits");
    mark(p.optimizer_in_backward != before.optimizer_in_backward, "optimizer_in_backward");
    mark(p.enable_activation_offloading != before.enable_activation_offloading, "enable_activation_offloading");
    mark(p.megatron_grad_buffer != before.megatron_grad_buffer, "megatron_grad_buffer");
    mark(p.fp32_grad_accumulator != before.fp32_grad_accumulator, "fp32_grad_accumulator");
    mark(p.use_precision_aware_optimizer != before.use_precision_aware_optimizer, "use_precision_aware_optimizer");
    mark(p.exp_avg_dtype != before.exp_avg_dtype, "exp_avg_dtype");
    mark(p.exp_avg_sq_dtype != before.exp_avg_sq_dtype, "exp_avg_sq_dtype");
    mark(p.micro_batch != before.micro_batch, "micro_batch");
    mark(p.global_batch != before.global_batch, "global_batch");
    mark(p.grad_accum != before.grad_accum, "grad_accum");
    mark(p.seq_len != before.seq_len, "seq_len");
    mark(p.zero_stage != before.zero_stage, "zero_stage");
    mark(p.fsdp != before.fsdp, "fsdp");
    mark(p.offload_optimizer != before.offload_optimizer, "offload_optimizer");
    mark(p.offload_params != before.offload_params, "offload_params");
    mark(p.recompute != before.recompute, "recompute");
    mark(p.recompute_method != before.recompute_method, "recompute_method");
    mark(p.recompute_num_layers != before.recompute_num_layers, "recompute_num_layers");
    mark(p.cpu_offloading_num_layers != before.cpu_offloading_num_layers, "cpu_offloading_num_layers");
    mark(p.offload_modules != before.offload_modules || p.fine_grained_activation_offloading != before.fine_grained_activation_offloading,
         "offload_modules");
    mark(p.attention != before.attention, "attention");
    mark(p.precision != before.precision, "precision");
    mark(p.kernels != before.kernels, "kernels");
    mark(p.fp8_recipe != before.fp8_recipe, "fp8_recipe");
    mark(p.fsdp_wrap != before.fsdp_wrap, "fsdp_wrap");
    mark(p.limit_all_gathers != before.limit_all_gathers, "limit_all_gathers");
    mark(p.fsdp_version != before.fsdp_version, "fsdp_version");
    mark(p.stage3_prefetch_bucket_size != before.stage3_prefetch_bucket_size, "stage3_prefetch_bucket_size");
    mark(p.stage3_max_live_parameters != before.stage3_max_live_parameters, "stage3_max_live_parameters");

    sim::ClusterSpec& c = scenario.cluster;
    c.nodes = nodes->value();
    c.gpus_per_node = gpus_per_node->value();
    c.intra_node.bandwidth = intra_bw->value() * kGiga;
    c.inter_node.bandwidth = inter_bw->value() * kGiga;
    // Only where the switch can reduce; elsewhere as the file has it.
    if (nvls->isEnabled()) c.nccl_nvls_enable = nvls->isChecked();
    if (nccl_proto->isEnabled()) c.nccl_proto = nccl_proto->currentData().toInt();
  }

  /// Whether the plan may go without fp32 masters (Note [No master weights]
  /// in sim/src/parallel/plan.cpp): fp16 or bf16, and neither Megatron's
  /// fp32 gradients nor the optimizer offloaded.
  bool precision_aware_allowed() const {
    const int z = zero->currentData().toInt();
    const sim::PlanSpec& b = scenario.plan;
    return sim::PlanRules::precision_aware_allowed(z < 10 ? z : 0, z >= 10, sim::effective_optimizer(b.optimizer, b.sgd_momentum)) &&
           b.runtime != sim::Runtime::kPython;
  }

  /// Note [Optimizer in backward]: the rules' conditions the panel knows
  /// (the GPUs and micro-batches are resolve's).
  bool in_bwd_allowed() const {
    const bool offloaded = offload->currentData().toInt() != 0;
    const int z = zero->currentData().toInt();
    const bool buffer = (fp32_grads->isChecked() || grad_buffer) && z <= 1 && !offloaded;
    return sim::PlanRules::optimizer_in_backward_allowed(1, 1, z, offloaded ? sim::Offload::kCpu : sim::Offload::kNone, buffer);
  }

  /// Note [Saved-tensor offload]: the rules' conditions as the panel shows
  /// them (Megatron's offloading and the recompute blocks from its boxes;
  /// DeepSpeed's checkpoints and a file's uniform groups as the scenario's
  /// plan has them, as the panel's plan keeps them).
  bool saved_offload_allowed(int pp, sim::Recompute rc) const {
    const bool megatron = (act_offload->isEnabled() && act_offload->value() > 0) ||
                          (offload_mods->isEnabled() && !offload_mods->text().trimmed().isEmpty());
    const sim::PlanSpec& b = scenario.plan;
    const bool block = rc == sim::Recompute::kFull && rc_layers->value() > 0;
    const int group = rc == sim::Recompute::kFull && !block && b.recompute_method == sim::RecomputeMethod::kUniform ? b.recompute_num_layers : 1;
    return sim::PlanRules(*scenario.model, scenario.cluster)
        .saved_tensor_offload_allowed(pp, megatron, b.cpu_checkpointing || b.partition_activations, group);
  }

  bool eight_bit_allowed() const {
    const sim::PlanSpec& b = scenario.plan;
    return sim::PlanRules::eight_bit_states_allowed(sim::effective_optimizer(b.optimizer, b.sgd_momentum),
                                                    states->currentData().toInt() >= 0 && precision_aware_allowed(),
                                                    offload->currentData().toInt() != 0 ? sim::Offload::kCpu : sim::Offload::kNone);
  }

  bool sixteen_bit_masters() const {
    const sim::Precision pr =
        precision->count() > 0 ? static_cast<sim::Precision>(precision->currentData().toInt()) : scenario.plan.precision;
    const bool offloaded = offload->currentData().toInt() != 0;
    const bool fp32g = fp32_grads->isChecked() && zero->currentData().toInt() <= 1 && !offloaded;
    return sim::PlanRules::masters_optional(pr, fp32g, offloaded ? sim::Offload::kCpu : sim::Offload::kNone) &&
           !(states->currentData().toInt() >= 0 && precision_aware_allowed());
  }

  void knobs_changed() {
    if (syncing || !scenario.model) return;
    read_knobs();
    const int stages = scenario.plan.model_parallel > 0 ? scenario.plan.model_parallel : scenario.plan.pp;
    refresh_choices(scenario.plan.tp, stages, scenario.plan.dp, scenario.plan.cp);
    read_knobs();  // a refreshed list may have dropped the current choice
    request();
  }

  // ---- evaluation ------------------------------------------------------------

  void request() {
    ++generation;
    debounce.start();
  }

  void launch() {
    if (running) return;  // finished() relaunches for the newest request
    running = true;
    const Scenario copy = scenario;
    const std::uint64_t gen = generation;
    watcher.setFuture(QtConcurrent::run([copy, gen] { return evaluate(copy, gen); }));
  }

  void finished() {
    running = false;
    Outcome o = watcher.result();
    if (o.generation > answered) draw(std::move(o));
    if (answered < generation && !debounce.isActive()) launch();
  }

  void draw(Outcome o) {
    // The answer drawn before goes on a worker: the last owner of a long
    // pipeline's graph and spans frees them, 2-3 ms of a frozen window for
    // gpt-175b's 56k tasks (dtsim_bench_gui).
    QThreadPool::globalInstance()->start([old = std::exchange(outcome, std::move(o))]() mutable { old = {}; });
    answered = outcome.generation;
    if (!outcome.ok()) {
      show_error(outcome.error);
      for (QLabel* l : {h_time, h_tokens, h_mfu, h_mem}) l->setText("—");
      h_fits->setText("invalid plan");
      h_fits->setStyleSheet("font-size: 13pt; font-weight: bold; padding: 4px 10px; color: #a40000;");
      emit w->evaluated();
      return;
    }
    show_error("");
    const sim::Prediction& p = *outcome.prediction;
    h_time->setText(fmt_time(p.iteration_time) + " / iteration");
    h_tokens->setText(QString::number(p.tokens_per_s, 'f', 0) + " tokens/s");
    h_mfu->setText("MFU " + QString::number(p.mfu * 100, 'f', 1) + "%");
    h_mem->setText(QString::number(gib(peak_of(p)), 'f', 2) + " / " + QString::number(gib(p.capacity), 'f', 1) + " GiB");
    h_fits->setText(p.fits ? "fits" : "does not fit (" + QString::number(gib(p.shortfall), 'f', 2) + " GiB over)");
    h_fits->setStyleSheet(QString("font-size: 13pt; font-weight: bold; padding: 4px 10px; color: %1;")
                              .arg(p.fits ? "#1a7f37" : "#a40000"));
    const sim::ResolvedPlan& rp = p.plan;
    resolved->setText(QString("%1 · %2 params · %3 × %4 GPUs (%5) · %6 · global batch %7 = micro-batch %8 × %9 steps × dp %10")
                          .arg(qs(p.model_name))
                          .arg(QString::number(static_cast<double>(p.model_parameters) / 1e9, 'f', 3) + "B")
                          .arg(qs(p.cluster_name))
                          .arg(p.gpus)
                          .arg(qs(p.device_name))
                          .arg(qs(plan_label(rp)))
                          .arg(rp.global_batch)
                          .arg(rp.micro_batch)
                          .arg(rp.grad_accum)
                          .arg(rp.dp));
    QString cost = "Costs: " + qs(p.cost_source == "analytic" ? std::string("datasheet roofline (no profile)") : p.cost_source);
    if (scenario.profile) {
      const sim::CostSources& s = p.sources;
      cost += QString(" · layers: %1 measured, %2 interpolated, %3 other precision, %4 fitted, %5 analytic"
                      " · collectives: %6 measured, %7 scaled, %8 analytic · copies: %9 measured, %10 analytic")
                  .arg(s.layers_measured)
                  .arg(s.layers_interpolated)
                  .arg(s.layers_other_precision)
                  .arg(s.layers_fitted)
                  .arg(s.layers_analytic)
                  .arg(s.comm_measured)
                  .arg(s.comm_scaled)
                  .arg(s.comm_analytic)
                  .arg(s.copies_measured)
                  .arg(s.copies_analytic);
    }
    for (const auto& wmsg : p.warnings) cost += "\nwarning: " + qs(wmsg);
    costs->setText(cost);
    draw_measured_line();
    draw_breakdown();
    draw_memory();
    draw_timeline();
    emit w->evaluated();
  }

  // ---- charts ----------------------------------------------------------------

  /// Measured phases mapped onto the breakdown's components.
  std::array<double, 6> measured_breakdown_ms() const {
    const Measured& m = *measured;
    const double total = m.iteration_time_s * 1e3;
    const double compute = (m.forward_s + m.backward_s) * 1e3;
    const double comm = m.comm_wait_s * 1e3;
    const double opt = m.optimizer_s * 1e3;
    return {compute, comm, 0.0, opt, 0.0, std::max(0.0, total - compute - comm - opt)};
  }

  void draw_measured_line() {
    if (!measured) {
      measured_line->setVisible(false);
      return;
    }
    measured_line->setVisible(true);
    const Measured& m = *measured;
    if (m.partial) {
      measured_line->setText("Validation result " + qs(m.source) + " is partial (the run did not finish): not a measurement, not overlaid.");
      return;
    }
    QString text = "Measured (" + qs(m.source) + "): " + QString::number(m.iteration_time_s * 1e3, 'f', 2) + " ms";
    if (outcome.ok()) {
      const double pred = static_cast<double>(outcome.prediction->iteration_time) / 1e9;
      text += QString(" · predicted %1 ms · error %2%")
                  .arg(pred * 1e3, 0, 'f', 2)
                  .arg((pred - m.iteration_time_s) / m.iteration_time_s * 100, 0, 'f', 1);
    }
    measured_line->setText(text);
  }

  bool overlay() const { return measured && !measured->partial; }

  void draw_breakdown() {
    QChart* c = chart("breakdown");
    clear_chart(c);
    if (!outcome.ok()) return;
    const sim::TimeBreakdown& b = outcome.prediction->breakdown;
    const std::pair<const char*, TimeNs> parts[] = {{"compute", b.compute},     {"exposed comm", b.exposed_comm},
                                                         {"bubble", b.bubble},       {"optimizer", b.optimizer},
                                                         {"offload", b.offload},     {"other", b.other}};
    const QColor colors[] = {QColor("#4C78A8"), QColor("#E45756"), QColor("#D0D0D0"),
                             QColor("#54A24B"), QColor("#72B7B2"), QColor("#9D9D9D")};
    auto* series = new QHorizontalStackedBarSeries;
    std::array<double, 6> meas{};
    if (overlay()) meas = measured_breakdown_ms();
    TimeNs longest = outcome.prediction->iteration_time;
    if (overlay()) longest = std::max(longest, static_cast<TimeNs>(measured->iteration_time_s * 1e9));
    const TimeUnit u = unit_for(longest);
    for (int i = 0; i < 6; ++i) {
      auto* set = new QBarSet(parts[i].first);
      set->setColor(colors[i]);
      *set << in(parts[i].second, u);
      if (overlay()) *set << meas[i] * 1e6 / u.ns;
      series->append(set);
    }
    c->addSeries(series);
    auto* cats = new QBarCategoryAxis;
    cats->append("predicted");
    if (overlay()) cats->append("measured");
    c->addAxis(cats, Qt::AlignLeft);
    series->attachAxis(cats);
    auto* x = new QValueAxis;
    x->setTitleText(u.name);
    c->addAxis(x, Qt::AlignBottom);
    series->attachAxis(x);
    round_range(x, in(longest, u) * 1.02);
    fit_ticks(c);
  }

  void draw_memory() {
    QChart* c = chart("memory");
    clear_chart(c);
    if (!outcome.ok()) return;
    const sim::Prediction& p = *outcome.prediction;
    const int n = static_cast<int>(p.ranks.size());
    auto* series = new QStackedBarSeries;
    const char* names[] = {"parameters", "gradients", "optimizer", "activations", "buffers"};
    const QColor colors[] = {QColor("#4C78A8"), QColor("#F58518"), QColor("#54A24B"), QColor("#B279A2"), QColor("#9D9D9D")};
    QStringList cats;
    for (const auto& r : p.ranks) {
      // Short: eight or more stages must fit under the bars.
      cats << (p.plan.pp > 1 ? QString("S%1").arg(r.stage) : QString("rank %1").arg(r.rank)) +
                  (p.plan.pp == 1 && r.replicas > 1 ? QString(" (×%1)").arg(r.replicas) : QString());
    }
    for (int k = 0; k < 5; ++k) {
      auto* set = new QBarSet(names[k]);
      set->setColor(colors[k]);
      for (const auto& r : p.ranks) {
        const Bytes v[] = {r.parameters, r.gradients, r.optimizer, r.activations, r.buffers};
        *set << gib(v[k]);
      }
      series->append(set);
    }
    c->addSeries(series);
    auto* xcat = new QBarCategoryAxis;
    xcat->append(cats);
    c->addAxis(xcat, Qt::AlignBottom);
    series->attachAxis(xcat);
    auto* y = new QValueAxis;
    y->setTitleText("GiB");
    c->addAxis(y, Qt::AlignLeft);
    series->attachAxis(y);
    // The capacity line and measured peaks sit on a hidden value axis whose
    // integers are the category centres.
    auto* xv = new QValueAxis;
    xv->setRange(-0.5, n - 0.5);
    xv->setVisible(false);
    c->addAxis(xv, Qt::AlignBottom);
    auto* cap = new QLineSeries;
    cap->setName("capacity");
    cap->setPen(QPen(QColor("#a40000"), 2, Qt::DashLine));
    cap->append(-0.5, gib(p.capacity));
    cap->append(n - 0.5, gib(p.capacity));
    c->addSeries(cap);
    cap->attachAxis(xv);
    cap->attachAxis(y);
    double top = gib(p.capacity);
    for (const auto& r : p.ranks) top = std::max(top, gib(r.peak));
    if (overlay() && !measured->rank_peaks.empty()) {
      // A real rank's stage follows the placement (the mesh's pp coordinate).
      std::map<int, Bytes> by_stage;
      for (const auto& [rank, peak] : measured->rank_peaks) {
        const int stage = p.plan.mesh.coord(sim::Axis::kPp, rank);
        by_stage[stage] = std::max(by_stage[stage], peak);
      }
      auto* pts = new QScatterSeries;
      pts->setName("measured peak");
      pts->setMarkerShape(QScatterSeries::MarkerShapeRectangle);
      pts->setMarkerSize(12);
      pts->setColor(Qt::black);
      for (int i = 0; i < n; ++i) {
        auto it = by_stage.find(p.ranks[i].stage);
        if (it == by_stage.end()) continue;
        pts->append(i, gib(it->second));
        top = std::max(top, gib(it->second));
      }
      c->addSeries(pts);
      pts->attachAxis(xv);
      pts->attachAxis(y);
    }
    round_range(y, top * 1.05);
    fit_ticks(c);
  }

  /// The whole iteration: axes, lanes and the series at full range.
  void draw_timeline() {
    QChart* c = chart("timeline");
    timeline_x = nullptr;
    clear_chart(c);
    gantt->clear();
    if (!outcome.ok() || !outcome.timeline) return;
    const sim::Prediction& p = *outcome.prediction;
    const std::vector<GanttRow>& rows = *outcome.timeline;
    const bool cut = rows.size() > static_cast<std::size_t>(kMaxTimelineRows);
    c->setTitle(cut ? QString("One iteration: the first %1 lanes (drag to zoom, right-click to zoom out)").arg(kMaxTimelineRows)
                    : QString("One iteration, per stage (drag to zoom, right-click to zoom out)"));
    const int n = static_cast<int>(std::min<std::size_t>(rows.size(), kMaxTimelineRows));
    timeline_unit = unit_for(p.exec.makespan);
    auto* x = new QValueAxis;
    x->setTitleText(timeline_unit.name);
    x->setRange(0, std::max(1e-9, in(p.exec.makespan, timeline_unit)));
    c->addAxis(x, Qt::AlignBottom);
    auto* y = new QCategoryAxis;
    y->setStartValue(-0.5);
    // One label a stage ("S0"), centred over its lanes ("S0", "S0 comm",
    // "S0 host"), bottom to top: a label a lane would not fit thin lanes, and
    // Qt Charts hides every other one. The bars' colours tell lanes apart.
    int groups = 0;
    for (int i = n - 1; i >= 0; --i) {
      const std::string& label = rows[static_cast<std::size_t>(i)].label;
      const std::string stage = label.substr(0, label.find(' '));
      const std::string above = i > 0 ? rows[static_cast<std::size_t>(i - 1)].label : std::string();
      if (i > 0 && above.substr(0, above.find(' ')) == stage) continue;  // the stage goes on above
      QString text = qs(stage);
      while (y->categoriesLabels().contains(text)) text += ' ';  // labels must be unique
      y->append(text, (n - 1 - i) + 0.5);
      ++groups;
    }
    // A hair beyond the outer lanes: Qt Charts hides a centred category label
    // at the plot's edge when its category is lower than the label's box.
    y->setRange(-0.51, n - 0.49);
    // Room for every stage's label (about 18 px each) besides title, axis and legend.
    views.at("timeline")->setMinimumHeight(std::max(kChartMinHeight, 130 + 18 * groups));
    y->setLabelsPosition(QCategoryAxis::AxisLabelsPositionCenter);
    y->setGridLineVisible(false);
    QFont small = y->labelsFont();
    small.setPointSizeF(n > 12 ? 6.5 : 8.5);  // lanes get thin with many stages
    y->setLabelsFont(small);
    y->setTruncateLabels(false);
    c->addAxis(y, Qt::AlignLeft);
    timeline_x = x;
    timeline_y = y;
    // The legend, a kind a series without points, which also carries the
    // rubber band's zoom (Note [Timeline bars]).
    for (int k = 0; k < kGanttKinds; ++k) {
      const bool drawn = std::any_of(rows.begin(), rows.begin() + n, [k](const GanttRow& r) { return !r.bars[k].empty(); });
      if (!drawn) continue;
      auto* area = new QAreaSeries(new QLineSeries);
      area->upperSeries()->setParent(area);
      area->setName(to_string(static_cast<GanttKind>(k)));
      area->setColor(kind_color(static_cast<GanttKind>(k)));
      area->setPen(Qt::NoPen);
      c->addSeries(area);
      area->attachAxis(x);
      area->attachAxis(y);
    }
    gantt->set_x_range(x->min(), x->max());
    draw_timeline_series(0, p.exec.makespan);
    // Zooming (rubber band, right-click) changes the range: the bars follow
    // at once, their detail a moment later.
    fit_ticks(c);
    QObject::connect(x, &QValueAxis::rangeChanged, w, [this](qreal lo, qreal hi) {
      fit_ticks(chart("timeline"));  // a zoomed range gets its own round interval
      gantt->set_x_range(lo, hi);
      zoom_range = {static_cast<TimeNs>(lo * timeline_unit.ns), static_cast<TimeNs>(hi * timeline_unit.ns)};
      zoom_timer.start();
    });
  }

  /// The lanes' bars over [lo, hi), at about one bar per pixel column.
  void draw_timeline_series(TimeNs lo, TimeNs hi) {
    if (!outcome.timeline || timeline_x == nullptr) return;
    const std::vector<GanttRow>& rows = *outcome.timeline;
    const int n = static_cast<int>(std::min<std::size_t>(rows.size(), kMaxTimelineRows));
    const int bins = std::max(200, views.at("timeline")->width());
    std::vector<GanttRow> drawn;
    drawn.reserve(static_cast<std::size_t>(n));
    for (int i = 0; i < n; ++i) drawn.push_back(level_of_detail(rows[i], std::max<TimeNs>(0, lo), hi, bins));
    gantt->set_rows(std::move(drawn), timeline_y->min(), timeline_y->max(), timeline_unit);
  }

  void draw_comparison() {
    QChart* c = chart("comparison");
    clear_chart(c);
    pin_table->setRowCount(static_cast<int>(pins.size()));
    const std::vector<std::size_t> front = pareto_front(pins);
    for (std::size_t i = 0; i < pins.size(); ++i) {
      const Pinned& p = pins[i];
      const bool on_front = std::find(front.begin(), front.end(), i) != front.end();
      const QString cells[] = {qs(p.label),
                               fmt_time(p.iteration_time),
                               QString::number(p.tokens_per_s, 'f', 0),
                               QString::number(p.mfu * 100, 'f', 1) + "%",
                               QString::number(gib(p.peak), 'f', 2),
                               p.fits ? "yes" : "no",
                               on_front ? "yes" : ""};
      for (int col = 0; col < 7; ++col) pin_table->setItem(static_cast<int>(i), col, new QTableWidgetItem(cells[col]));
    }
    if (pins.empty()) return;
    auto* x = new QValueAxis;
    x->setTitleText("iteration time (ms)");
    auto* y = new QValueAxis;
    y->setTitleText("peak GiB");
    c->addAxis(x, Qt::AlignBottom);
    c->addAxis(y, Qt::AlignLeft);
    auto* all = new QScatterSeries;
    all->setName("pinned");
    all->setMarkerSize(11);
    double xmax = 0, ymax = 0;
    for (const Pinned& p : pins) {
      all->append(ms(p.iteration_time), gib(p.peak));
      xmax = std::max(xmax, ms(p.iteration_time));
      ymax = std::max(ymax, gib(p.peak));
    }
    auto* line = new QLineSeries;
    line->setName("Pareto front");
    line->setPen(QPen(QColor("#E45756"), 2));
    for (std::size_t i : front) line->append(ms(pins[i].iteration_time), gib(pins[i].peak));
    c->addSeries(line);
    c->addSeries(all);
    for (QAbstractSeries* s : {static_cast<QAbstractSeries*>(line), static_cast<QAbstractSeries*>(all)}) {
      s->attachAxis(x);
      s->attachAxis(y);
    }
    round_range(x, xmax * 1.05);
    round_range(y, ymax * 1.05);
    fit_ticks(c);
  }

  // ---- search ----------------------------------------------------------------

  /// Where the plan shown ranks among the rows (Note [Your plan]), in words.
  QString compared_text(const sim::SearchResult& r) const {
    if (!r.compared) {
      return r.compared_error.empty() ? QString() : "The plan shown is no plan at this batch and GPU count: " + qs(r.compared_error) + ".";
    }
    const sim::SearchEntry& e = *r.compared;
    QString text = "The plan shown takes " + fmt_time(e.iteration_time);
    if (!e.fits) {
      text += QString(" but does not fit (%1 GiB at its peak).").arg(gib(e.peak), 0, 'f', 2);
    } else {
      std::size_t faster = 0;
      for (std::size_t i : s_rows) faster += r.top[i].iteration_time < e.iteration_time;
      if (faster == s_rows.size() && s_rows.size() >= s_keep) {
        text += QString(": slower than the %1 listed.").arg(s_rows.size());
      } else {
        text += QString(": it would rank %1.").arg(faster + 1);
      }
    }
    if (!r.top.empty() && r.top.front().iteration_time < e.iteration_time) {
      text += QString(" The fastest is %1x as fast.")
                  .arg(static_cast<double>(e.iteration_time) / static_cast<double>(r.top.front().iteration_time), 0, 'f', 2);
    }
    return text;
  }

  void search_done() {
    s_running = false;
    s_run->setEnabled(true);
    const SearchOutcome o = s_watcher.result();
    if (!o.result) {
      s_status->setText("Search failed: " + qs(o.error));
      show_error(o.error);
      emit w->search_finished();
      return;
    }
    s_result = o.result;
    const sim::SearchResult& r = *s_result;
    s_progress->setRange(0, 1);
    s_progress->setValue(1);
    s_status->setText(QString("%1 on %2 GPUs, global batch %3: %4 plans, %5 pruned (model states alone too big) and %10 "
                              "(compute alone too slow to rank), %6 simulated, %7 do not fit; %8 s on %9 threads. "
                              "Double-click a plan to load it.")
                          .arg(qs(r.model_name))
                          .arg(r.gpus)
                          .arg(r.global_batch)
                          .arg(r.enumerated)
                          .arg(r.pruned_memory)
                          .arg(r.simulated)
                          .arg(r.not_fitting)
                          .arg(r.seconds, 0, 'f', 2)
                          .arg(r.threads)
                          .arg(r.pruned_time));
    s_rows = distinct_plans(r.top, s_keep);
    const std::size_t hidden = [&] {
      std::size_t n = 0;  // entries ranked above the last shown row that repeat a shown plan
      for (std::size_t i = 0; !s_rows.empty() && i <= s_rows.back(); ++i) n += std::find(s_rows.begin(), s_rows.end(), i) == s_rows.end();
      for (std::size_t i : s_rows) n += r.top[i].also.size();  // folded by the search (Note [Search twins])
      return n;
    }();
    if (hidden > 0) {
      s_status->setText(s_status->text() + QString(" %1 more listed the same plan under another name (ZeRO-3 as FSDP "
                                                   "FULL_SHARD, a placement that changes nothing, or the same GPUs "
                                                   "and tokens split another way between dp and cp): shown once, "
                                                   "the other names in the plan's tooltip.").arg(hidden));
    }
    // A knob of the current plan the rules allowed in no plan searched.
    for (const std::string& warning : r.warnings) s_status->setText(s_status->text() + " Note: " + qs(warning) + ".");
    s_status->setText(s_status->text() + " " + compared_text(r));
    s_table->setRowCount(static_cast<int>(s_rows.size()));
    for (std::size_t row = 0; row < s_rows.size(); ++row) {
      const std::size_t i = s_rows[row];
      const sim::SearchEntry& e = r.top[i];
      QStringList aliases;
      for (const auto& n : e.also) aliases << qs(n);
      for (std::size_t j = 0; j < r.top.size(); ++j) {
        if (j != i && sim::same_plan(e, r.top[j])) aliases << qs(plan_label(r.top[j].plan));
      }
      bool on_front = false;
      for (const auto& f : r.pareto) on_front = on_front || (f.iteration_time == e.iteration_time && f.peak == e.peak);
      const QString cells[] = {qs(plan_label(e.plan)),
                               fmt_time(e.iteration_time),
                               QString::number(e.tokens_per_s, 'f', 0),
                               QString::number(e.mfu * 100, 'f', 1) + "%",
                               QString::number(gib(e.peak), 'f', 2),
                               on_front ? "yes" : ""};
      for (int col = 0; col < 6; ++col) s_table->setItem(static_cast<int>(row), col, new QTableWidgetItem(cells[col]));
      if (!aliases.isEmpty()) s_table->item(static_cast<int>(row), 0)->setToolTip("Also listed as: " + aliases.join("; "));
    }
    s_load->setEnabled(!r.top.empty());
    if (!r.top.empty()) s_table->selectRow(0);
    emit w->search_finished();
  }
};

ExplorerWindow::ExplorerWindow(QWidget* parent) : QMainWindow(parent), d_(std::make_unique<Impl>()) {
  d_->w = this;
  setWindowTitle("dtsim explorer");
  d_->build();
  // 1600 x 1000, or the screen where that is smaller (a 1280 x 800 display);
  // offscreen (--screenshot without a display) has no screen to fit.
  QSize size(1600, 1000);
  const QString platform = QGuiApplication::platformName();
  if (platform != "offscreen" && platform != "minimal" && screen() != nullptr) {
    size = size.boundedTo(screen()->availableGeometry().size());
  }
  resize(size);
}

ExplorerWindow::~ExplorerWindow() {
  // Let running work finish before the widgets it reports to go away.
  d_->watcher.waitForFinished();
  d_->s_watcher.waitForFinished();
}

void ExplorerWindow::set_scenario(Scenario s) {
  d_->scenario = std::move(s);
  d_->measured.reset();
  d_->sync_pickers();
  d_->sync_knobs();
  d_->read_knobs();
  d_->request();
}

const Scenario& ExplorerWindow::scenario() const { return d_->scenario; }

bool ExplorerWindow::wait_for_result(int timeout_ms) {
  QElapsedTimer t;
  t.start();
  while (d_->answered < d_->generation && t.elapsed() < timeout_ms) {
    QCoreApplication::processEvents(QEventLoop::AllEvents, 20);
    if (d_->answered < d_->generation) QThread::msleep(2);
  }
  return d_->answered == d_->generation;
}

const Outcome& ExplorerWindow::outcome() const { return d_->outcome; }

QString ExplorerWindow::error_text() const { return d_->error_line->isHidden() ? QString() : d_->error_line->text(); }

bool ExplorerWindow::open_model(const QString& name_or_path) {
  return d_->guarded([&] {
    sim::ModelPtr m = models::load_model(name_or_path.toStdString());
    d_->scenario.model = std::move(m);
    d_->scenario.model_source = name_or_path.toStdString();
    d_->show_error("");
    d_->sync_pickers();
    d_->sync_knobs();
    d_->read_knobs();
    d_->request();
  });
}

bool ExplorerWindow::open_cluster(const QString& name_or_path) {
  return d_->guarded([&] {
    sim::ClusterSpec c = sim::load_cluster(name_or_path.toStdString());
    d_->scenario.cluster = std::move(c);
    d_->scenario.cluster_source = name_or_path.toStdString();
    d_->show_error("");
    d_->sync_pickers();
    d_->sync_knobs();
    d_->read_knobs();
    d_->request();
  });
}

bool ExplorerWindow::open_plan(const QString& name_or_path) {
  return d_->guarded([&] {
    sim::PlanSpec p = sim::load_plan(name_or_path.toStdString());
    d_->scenario.plan = std::move(p);
    d_->scenario.plan_source = name_or_path.toStdString();
    d_->show_error("");
    d_->sync_pickers();
    d_->sync_knobs();
    d_->read_knobs();
    d_->request();
  });
}

bool ExplorerWindow::open_profile(const QString& path) {
  return d_->guarded([&] {
    std::shared_ptr<const sim::ProfileCosts> costs;
    if (!path.isEmpty()) costs = std::make_shared<const sim::ProfileCosts>(sim::load_profile(path.toStdString()));
    d_->scenario.profile = std::move(costs);
    d_->scenario.profile_source = path.toStdString();
    d_->show_error("");
    d_->sync_pickers();
    d_->request();
  });
}

bool ExplorerWindow::open_measured(const QString& path) {
  return d_->guarded([&] {
    d_->measured = load_measured(path.toStdString());
    d_->show_error("");
    d_->draw_measured_line();
    d_->draw_breakdown();
    d_->draw_memory();
  });
}

QChart* ExplorerWindow::chart(const QString& name) const {
  auto it = d_->views.find(name);
  return it == d_->views.end() ? nullptr : it->second->chart();
}

const std::vector<GanttRow>& ExplorerWindow::timeline_lanes() const { return d_->gantt->rows(); }

void ExplorerWindow::pin_current() {
  if (!d_->outcome.ok()) {
    d_->show_error("nothing to pin: the current plan has no prediction");
    return;
  }
  const sim::Prediction& p = *d_->outcome.prediction;
  Pinned pin;
  pin.model = p.model_name;
  pin.cluster = p.cluster_name + " (" + std::to_string(p.gpus) + " GPUs)";
  pin.plan = plan_label(p.plan);
  pin.label = pin.model + " · " + pin.cluster + " · " + pin.plan;
  pin.iteration_time = p.iteration_time;
  pin.peak = peak_of(p);
  pin.tokens_per_s = p.tokens_per_s;
  pin.mfu = p.mfu;
  pin.fits = p.fits;
  d_->pins.push_back(std::move(pin));
  d_->draw_comparison();
}

const std::vector<Pinned>& ExplorerWindow::pins() const { return d_->pins; }

bool ExplorerWindow::export_pins_csv(const QString& path) {
  QSaveFile f(path);  // atomic: a temporary beside it, renamed on commit
  const std::string csv = pins_to_csv(d_->pins);
  if (!f.open(QIODevice::WriteOnly) || f.write(csv.data(), static_cast<qint64>(csv.size())) < 0 || !f.commit()) {
    d_->show_error(path.toStdString() + ": cannot write: " + f.errorString().toStdString());
    return false;
  }
  return true;
}

namespace {

bool save_png(const QPixmap& pm, const QString& path, QString* error) {
  QSaveFile f(path);
  if (!f.open(QIODevice::WriteOnly) || !pm.save(&f, "PNG") || !f.commit()) {
    *error = path + ": cannot write: " + f.errorString();
    return false;
  }
  return true;
}

}  // namespace

bool ExplorerWindow::export_charts_png(const QString& dir) {
  for (const auto& [name, view] : d_->views) {
    QString err;
    if (!save_png(view->grab(), dir + "/" + name + ".png", &err)) {
      d_->show_error(err.toStdString());
      return false;
    }
  }
  return true;
}

void ExplorerWindow::start_search() {
  if (d_->s_running || !d_->scenario.model) return;
  d_->s_running = true;
  d_->s_run->setEnabled(false);
  d_->s_load->setEnabled(false);
  d_->s_progress->setRange(0, 0);  // busy until the first progress report
  d_->s_status->setText("Searching…");
  sim::SearchOptions so;
  so.gpus = d_->s_gpus->value();
  so.global_batch = d_->s_batch->value();
  // The search ranks each plan once (Note [Search twins]); the table keeps
  // distinct_plans as a guard.
  d_->s_keep = static_cast<std::size_t>(d_->s_top->value());
  so.top = d_->s_top->value();
  so.base = d_->scenario.plan;
  // The plan shown, ranked beside the search's at its batch (Note [Your plan]).
  so.compare = d_->scenario.plan;
  so.compare_name = "the plan shown";
  so.profile = d_->scenario.profile;
  QProgressBar* bar = d_->s_progress;
  auto clock = std::make_shared<QElapsedTimer>();  // read on the search's thread only
  clock->start();
  QLabel* status = d_->s_status;
  so.progress = [bar, status, clock](std::size_t done, std::size_t total) {
    const double secs = static_cast<double>(clock->elapsed()) / 1e3;
    const double eta = done > 0 ? secs * static_cast<double>(total - done) / static_cast<double>(done) : 0;
    QMetaObject::invokeMethod(bar, [bar, status, done, total, eta] {
      bar->setRange(0, static_cast<int>(std::min<std::size_t>(total, 1 << 30)));
      bar->setValue(static_cast<int>(std::min<std::size_t>(done, 1 << 30)));
      status->setText(QString("Searching: %1 of %2 plans, about %3 s left").arg(done).arg(total).arg(eta, 0, 'f', 0));
    }, Qt::QueuedConnection);
  };
  const sim::ModelPtr model = d_->scenario.model;
  const sim::ClusterSpec cluster = d_->scenario.cluster;
  d_->s_watcher.setFuture(QtConcurrent::run([model, cluster, so] {
    SearchOutcome o;
    try {
      o.result = std::make_shared<const sim::SearchResult>(sim::search(*model, cluster, so));
    } catch (const Error& e) {
      o.error = e.what();
    } catch (const std::exception& e) {
      o.error = std::string("internal error: ") + e.what();
    }
    return o;
  }));
}

bool ExplorerWindow::wait_for_search(int timeout_ms) {
  QElapsedTimer t;
  t.start();
  while (d_->s_running && t.elapsed() < timeout_ms) {
    QCoreApplication::processEvents(QEventLoop::AllEvents, 20);
    if (d_->s_running) QThread::msleep(5);
  }
  return !d_->s_running;
}

bool ExplorerWindow::load_search_entry(int row) {
  if (!d_->s_result || row < 0 || row >= static_cast<int>(d_->s_rows.size())) return false;
  const int index = static_cast<int>(d_->s_rows[static_cast<std::size_t>(row)]);
  sim::PlanSpec spec = d_->s_result->top[static_cast<std::size_t>(index)].plan.spec;
  const std::string label = "__search_" + std::to_string(row + 1);  // as the table numbers it
  spec.name = "search #" + std::to_string(row + 1);
  spec.origins.file = "search result #" + std::to_string(row + 1);
  spec.origins.where.clear();
  d_->scenario.plan = spec;
  d_->scenario.plan_source = label;
  d_->syncing = true;
  select_data(d_->plan, qs(label), qs(spec.name + ": " + plan_label(d_->s_result->top[static_cast<std::size_t>(index)].plan)));
  d_->syncing = false;
  d_->sync_knobs();
  d_->read_knobs();
  d_->request();
  d_->tabs->setCurrentIndex(0);
  return true;
}

bool ExplorerWindow::wait_for_exposed(int timeout_ms) {
  QElapsedTimer t;
  t.start();
  auto exposed = [this] { return windowHandle() != nullptr && windowHandle()->isExposed(); };
  while (!exposed() && t.elapsed() < timeout_ms) {
    QCoreApplication::processEvents(QEventLoop::AllEvents, 20);
    if (!exposed()) QThread::msleep(5);
  }
  // The server's configure and expose events, then the layouts they start.
  for (int i = 0; i < 10; ++i) {
    QCoreApplication::processEvents(QEventLoop::AllEvents, 20);
    QThread::msleep(10);
  }
  return exposed();
}

bool ExplorerWindow::save_screenshot(const QString& path) {
  // On a display (X11, Xvfb included) the window is shown for real, so the
  // screenshot has the layout a user gets; offscreen it is laid out unseen.
  const QString platform = QGuiApplication::platformName();
  const bool headless = platform == "offscreen" || platform == "minimal";
  if (!isVisible()) {
    if (headless) setAttribute(Qt::WA_DontShowOnScreen, true);
    show();
  }
  if (!headless) wait_for_exposed(5000);
  for (int i = 0; i < 5; ++i) QCoreApplication::processEvents();
  QString err;
  if (!save_png(grab(), path, &err)) {
    d_->show_error(err.toStdString());
    return false;
  }
  return true;
}

}  // namespace dtsim::gui
