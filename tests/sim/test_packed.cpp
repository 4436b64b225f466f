// Packed sequences (Note [Packed sequences] in models/src/layers.cpp): a
// fused kernel computes each document's causal triangle, MFU counts each
// document's square, and nothing but attention changes; by hand.
#include <catch2/catch.hpp>

#include <algorithm>
#include <string>
#include <vector>

#include "dtsim/models/models.hpp"
#include "dtsim/sim/config_io.hpp"
#include "dtsim/sim/error.hpp"
#include "dtsim/sim/framework_config.hpp"
#include "dtsim/sim/predict.hpp"
#include "test_util.hpp"
#include "lowering/lowering_common.hpp"

using namespace dtsim;
using namespace dtsim::sim;
using dtsim::test::error_of;

namespace {

WorkloadShape packed(std::int64_t doc, bool flash = true) {
  WorkloadShape w;
  w.seq_len = 4096;
  w.document_len = doc;
  w.act_bytes = 2;
  w.flash_attention = flash;
  return w;
}

const Kernel& kernel(const Layer& l, const std::string& name) {
  for (const Kernel& k : l.forward) {
    if (k.name == name) return k;
  }
  FAIL("no kernel " << name);
  return l.forward.front();
}

}  // namespace

TEST_CASE("packed sequences: each document's causal triangle, nothing else changed (Note [Packed sequences])", "[packed]") {
  const auto m = models::load_model("llama-3-8b");
  const Layer whole = m->layers(packed(0))[1];
  const Layer docs = m->layers(packed(512))[1];
  // 32 heads of 128 (q.k and p.v: d + dv = 256): 2 x 32 x (scores) x 256.
  // Whole: the causal half of 4096^2; packed: 8 documents of 512, each
  // 512 x 513 / 2 scores.
  const double whole_scores = 4096.0 * 4096 / 2, doc_scores = 8 * 512.0 * 513 / 2;
  CHECK(kernel(whole, "attn.flash").flops == Approx(2.0 * 32 * whole_scores * 256));
  CHECK(kernel(docs, "attn.flash").flops == Approx(2.0 * 32 * doc_scores * 256));
  CHECK(kernel(docs, "attn.qkv").flops == kernel(whole, "attn.qkv").flops);
  CHECK(docs.saved_bytes == whole.saved_bytes);
  // As the simulator asks for them, an attending layer says its documents,
  // so a profile's whole-sequence measurement does not price it; the
  // embedding does not attend.
  const auto shared = m->shared_layers(packed(512));
  CHECK(shared[1].signature.ends_with(",doc=512"));
  CHECK(shared[0].signature == m->shared_layers(packed(0))[0].signature);
  // A document that does not divide the sequence: 4096 = 3 x 1200 + 496.
  const Layer odd = m->layers(packed(1200))[1];
  CHECK(kernel(odd, "attn.flash").flops == Approx(2.0 * 32 * (3 * 1200.0 * 1201 / 2 + 496.0 * 497 / 2) * 256));
  // Eager attention computes every score, masked or not.
  CHECK(kernel(m->layers(packed(512, false))[1], "attn.scores").flops == kernel(m->layers(packed(0, false))[1], "attn.scores").flops);
  // MFU's model FLOPs: each document's square, 8 x 512^2 of 4096^2 (an
  // eighth of the whole's attention), the rest the same: the difference is
  // 7/8 of the whole's attention, 3 passes of 2 GEMMs of 2 x 32 x 4096^2 x
  // 128 FLOPs in each of 32 blocks.
  WorkloadShape mf = packed(0, false), mfp = packed(512, false);
  mf.model_flops = mfp.model_flops = true;
  const double attention = 32 * 3 * 2 * (2.0 * 32 * 4096 * 4096 * 128);
  CHECK(m->model_flops(mf) - m->model_flops(mfp) == Approx(attention * 7 / 8));
}

TEST_CASE("packed sequences: plan.document_len, refused past the sequence, named in the plan line", "[packed]") {
  const auto m = models::load_model("llama-3-8b");
  const ClusterSpec c = load_cluster("dgx-h100", {parse_override("cluster.gpus_per_node=1")});
  auto spec = [](const std::string& doc) {
    return load_plan("ddp", {parse_override("plan.dp=1"), parse_override("plan.seq_len=4096"), parse_override("plan.precision=bf16"),
                             parse_override("plan.recompute=full"), parse_override("plan.document_len=" + doc)});
  };
  const Prediction p = predict(*m, spec("512"), c), q = predict(*m, spec("0"), c);
  CHECK(p.plan.document_len == 512);
  CHECK(p.iteration_time < q.iteration_time);
  CHECK(p.ranks[0].peak == q.ranks[0].peak);
  CHECK(predict(*m, spec("4096"), c).plan.document_len == 0);  // one document a sequence
  CHECK_THAT(error_of([&] { predict(*m, spec("-5"), c); }), Catch::Contains("plan.document_len: -5 is out of range; valid: 0 to"));
  CHECK_THAT(error_of([&] { predict(*m, spec("8192"), c); }),
             Catch::Contains("plan.document_len: 8192 exceeds seq_len 4096: a packed sequence holds whole documents; valid: 0 (one a sequence) to 4096"));
  // Megatron-Bridge's offline packing is the data's: said, not guessed.
  const FrameworkConfig fc = read_megatron_bridge_config(std::string(DTSIM_SOURCE_DIR) +
                                                         "/configs/frameworks/megatron-bridge/llama3_70b_lora_run_config.yaml");
  REQUIRE(fc.unmodelled.size() == 1);
  CHECK(fc.unmodelled[0].rfind("dataset.enable_offline_packing=true (attention priced over each whole sequence", 0) == 0);
}

TEST_CASE("A chunked cross-entropy holds one chunk's gradients at a time (Note [Chunked loss])", "[packed][memory]") {
  const auto m = models::load_model("llama-3-8b");
  WorkloadShape w = packed(0);
  const std::vector<Layer> whole = m->layers(w);
  w.loss_chunks = 8;
  const std::vector<Layer> chunked = m->layers(w);
  const Layer& a = whole.back();
  const Layer& b = chunked.back();
  REQUIRE(a.kind == LayerKind::kLmHead);
  // 4096 tokens x 128,256 logits: the fp32 gradients of the log-softmax and
  // of the logits, 8 bytes a logit, for all of them or for one chunk of 512
  // tokens at a time; what the loss keeps (the fp32 log-softmax) and the
  // kernels' work are the same.
  CHECK(a.backward_workspace_bytes == 8LL * 4096 * 128'256);
  CHECK(b.backward_workspace_bytes == 8LL * 512 * 128'256);
  CHECK(b.saved_bytes == a.saved_bytes);
  CHECK(b.forward_flops() == a.forward_flops());
  CHECK(b.signature == a.signature + ",lchunks=8");
  // Nothing but the head changes.
  for (std::size_t i = 0; i + 1 < whole.size(); ++i) CHECK(chunked[i].signature == whole[i].signature);
  // A LoRA fine-tune on one GPU (its optimizer step is small): the head's
  // backward is the peak, 7 x 512 x 128,256 x 8 bytes lower with 8 chunks.
  const ClusterSpec one = load_cluster("dgx-h100", {parse_override("cluster.gpus_per_node=1")});
  const auto lora = models::load_model("llama-3-8b", {parse_override("model.peft=lora")});
  const auto peak = [&](const std::string& chunks) {
    const Prediction p = predict(*lora, load_plan("ddp", {parse_override("plan.dp=1"), parse_override("plan.micro_batch=1"),
                                                        parse_override("plan.seq_len=4096"), parse_override("plan.precision=bf16"),
                                                        parse_override("plan.recompute=full"), parse_override("plan.loss_chunks=" + chunks)}),
                                 one);
    return p.ranks[0].peak;
  };
  CHECK(peak("1") - peak("8") == 7LL * 512 * 128'256 * 8);
  // Chunks along the sequence: no more than its tokens, and not beside a
  // vocab-parallel loss.
  CHECK_THAT(error_of([&] { predict(*m, load_plan("ddp", {parse_override("plan.seq_len=16"), parse_override("plan.loss_chunks=32")}), one); }),
             Catch::Contains("plan.loss_chunks: 32 exceeds seq_len 16"));
  const ClusterSpec two = load_cluster("dgx-h100", {parse_override("cluster.gpus_per_node=2")});
  CHECK_THAT(error_of([&] { predict(*m, load_plan("megatron-tp", {parse_override("plan.tp=2"), parse_override("plan.loss_chunks=8")}), two); }),
             Catch::Contains("plan.loss_chunks: 8 with tp = 2: a vocab-parallel cross-entropy is not chunked here"));
}

TEST_CASE("A fused linear cross-entropy keeps no logits (Note [Fused linear cross-entropy])", "[packed][memory]") {
  const auto m = models::load_model("llama-3-8b");
  WorkloadShape w = packed(0);
  const Layer ce = m->layers(w).back();
  w.loss_kernel = LossKernel::kLigerFused;
  const Layer liger = m->layers(w).back();
  w.loss_kernel = LossKernel::kCutCrossEntropy;
  const Layer cce = m->layers(w).back();
  REQUIRE(ce.kind == LayerKind::kLmHead);
  const std::int64_t t = 4096, v = 128'256, h = 4096;
  const Flops gemm = 2.0 * t * v * h;  // the projection onto the vocabulary
  // Liger keeps its input's gradient where the unfused head keeps the
  // projection's input (the same e t h), the weight's gradient (2 v h in
  // bf16) and no fp32 log-softmax (4 t v); its backward holds no fp32
  // logits (8 t v) but scales both gradients.
  CHECK(ce.saved_bytes - liger.saved_bytes == 4 * t * v - 2 * v * h);
  CHECK(ce.backward_workspace_bytes == 8 * t * v);
  // Its forward's chunk, priced as the workspace of the backward that
  // follows: ceil(128,256 / 4,096) = 32, so chunks of next_power_of_2(4096 /
  // 32) = 128 tokens, their bf16 logits, then beside them the weight
  // gradient's bf16 product with its fp32 copy (6 v h), the larger of that
  // and the input gradient's chunk product (2 x 128 x h).
  CHECK(liger.backward_workspace_bytes == 2 * 128 * v + 6 * v * h);
  // Its forward runs the projection and both gradient GEMMs; the backward none.
  std::vector<std::string> names;
  for (const Kernel& k : liger.forward) names.push_back(k.name);
  CHECK(names == std::vector<std::string>{"norm", "lm_head", "lm_head.ce", "lm_head.dgrad", "lm_head.wgrad"});
  REQUIRE(liger.backward.size() >= 2);
  CHECK(liger.backward[0].name == "lm_head.scale");
  CHECK(liger.backward[1].name == "lm_head.wgrad.scale");
  const auto gemm_flops = [](const std::vector<Kernel>& ks) {
    Flops f = 0;
    for (const Kernel& k : ks) f += k.kind == KernelKind::kGemm ? k.flops * static_cast<double>(k.repeat) : 0;
    return f;
  };
  CHECK(gemm_flops(liger.forward) == Approx(3 * gemm));
  CHECK(gemm_flops(liger.backward) == 0);
  CHECK(gemm_flops(ce.forward) + gemm_flops(ce.backward) == Approx(3 * gemm));
  // Cut Cross-Entropy keeps the projection's input and the log-sum-exp
  // (4 t); its backward recomputes the logits: one projection more.
  CHECK(ce.saved_bytes - cce.saved_bytes == 4 * t * v - 4 * t);
  CHECK(cce.backward_workspace_bytes == 0);
  CHECK(gemm_flops(cce.forward) == Approx(gemm));
  CHECK(gemm_flops(cce.backward) == Approx(3 * gemm));
  CHECK(liger.signature == ce.signature + ",lk=liger");
  CHECK(cce.signature == ce.signature + ",lk=cce");
  // A LoRA's frozen head makes no weight gradient in Liger's forward, keeps
  // none and scales none.
  const auto lora = models::load_model("llama-3-8b", {parse_override("model.peft=lora")});
  w.loss_kernel = LossKernel::kCrossEntropy;
  const Layer frozen_ce = lora->layers(w).back();
  w.loss_kernel = LossKernel::kLigerFused;
  const Layer frozen = lora->layers(w).back();
  for (const Kernel& k : frozen.forward) CHECK(k.name != "lm_head.wgrad");
  for (const Kernel& k : frozen.backward) CHECK(k.name != "lm_head.wgrad.scale");
  CHECK(frozen.forward.back().name == "lm_head.dgrad");
  CHECK(frozen_ce.saved_bytes - frozen.saved_bytes == 4 * t * v);
  CHECK(frozen.backward_workspace_bytes == 2 * 128 * (v + h));
  // Chunks of next_power_of_2(ceil(t / ceil(v / h))) tokens: Qwen2.5 7B's
  // head (v 152,064, h 3,584) gives ceil(v / h) = 43 and ceil(4096 / 43) =
  // 96, so 128-token chunks; 2 x 4096 tokens, ceil(8192 / 43) = 191: 256.
  const auto qwen = models::load_model("qwen2.5-7b", {parse_override("model.peft=lora")});
  WorkloadShape qs = packed(0);
  qs.loss_kernel = LossKernel::kLigerFused;
  CHECK(qwen->layers(qs).back().backward_workspace_bytes == 2 * 128 * (152'064 + 3584));
  qs.micro_batch = 2;
  CHECK(qwen->layers(qs).back().backward_workspace_bytes == 2 * 256 * (152'064 + 3584));
  // Plans: the fused kernels take the whole vocabulary and chunk for themselves.
  const ClusterSpec two = load_cluster("dgx-h100", {parse_override("cluster.gpus_per_node=2")});
  CHECK_THAT(error_of([&] { predict(*m, load_plan("megatron-tp", {parse_override("plan.tp=2"), parse_override("plan.loss_kernel=liger_fused_linear")}), two); }),
             Catch::Contains("plan.loss_kernel: liger_fused_linear with tp = 2: the fused kernels take the whole vocabulary"));
  CHECK_THAT(error_of([&] { predict(*m, load_plan("ddp", {parse_override("plan.loss_chunks=8"), parse_override("plan.loss_kernel=cut_cross_entropy")}), two); }),
             Catch::Contains("plan.loss_kernel: cut_cross_entropy with loss_chunks 8: the fused kernel chunks the logits itself"));
  CHECK_THAT(error_of([&] { load_plan("ddp", {parse_override("plan.loss_kernel=liger")}); }),
             Catch::Contains("plan.loss_kernel"));
  const Prediction p = predict(*lora, load_plan("ddp", {parse_override("plan.precision=bf16"), parse_override("plan.seq_len=4096"),
                                                     parse_override("plan.loss_kernel=liger_fused_linear")}),
                               two);
  CHECK(p.plan.loss_kernel == LossKernel::kLigerFused);
  // MFU counts the model's FLOPs, whichever kernel runs the loss: the same
  // FLOPs per GPU (TFLOP/s x seconds) for the fused and the unfused loss.
  const Prediction q = predict(*lora, load_plan("ddp", {parse_override("plan.precision=bf16"), parse_override("plan.seq_len=4096")}), two);
  CHECK(p.tflops_per_gpu * p.iteration_time == Approx(q.tflops_per_gpu * q.iteration_time).epsilon(1e-9));
  CHECK(p.iteration_time != q.iteration_time);
}

TEST_CASE("TRL's chunked_nll keeps a sorted copy, reruns each 256-token chunk, casts its weight a chunk at a time (Note [Fused linear cross-entropy])",
          "[packed][memory]") {
  const auto m = models::load_model("llama-3-8b");
  WorkloadShape w = packed(0);
  const Layer ce = m->layers(w).back();
  w.loss_kernel = LossKernel::kChunkedNll;
  const Layer trl = m->layers(w).back();
  const std::int64_t t = 4096, v = 128'256, h = 4096, chunks = 4096 / 256;
  // It keeps the sorted copy of the head's input (e t h) and the reordered
  // labels, mask and order (8 + 1 + 8 bytes a token) where F.cross_entropy
  // keeps the fp32 log-softmax (4 t v).
  CHECK(trl.saved_bytes - ce.saved_bytes == 2 * t * h + 17 * t - 4 * t * v);
  // Its backward holds one chunk of 256 tokens: the recomputed log-softmax
  // and its exponential (8 bytes a logit), their fp32 gradients (8) and the
  // logits' bf16 one (2); the weight's bf16 cast its GEMM keeps (2 v h);
  // and the weight's gradient of a chunk, bf16 with its fp32 copy (6 v h).
  CHECK(trl.backward_workspace_bytes == 18 * 256 * v + 8 * v * h);
  Flops fwd = 0, bwd = 0;
  for (const Kernel& k : trl.forward) fwd += k.kind == KernelKind::kGemm ? k.flops : 0;
  for (const Kernel& k : trl.backward) bwd += k.kind == KernelKind::kGemm ? k.flops : 0;
  const Flops gemm = 2.0 * t * v * h;
  CHECK(fwd == Approx(gemm));
  CHECK(bwd == Approx(3 * gemm));  // the projection again, then both gradients
  // Each pass over the logits reads the bf16 logits twice and the fp32
  // log-softmax and its exponential four times (2 x 2 + 4 x 4 = 20 bytes a
  // logit) and writes three fp32 tensors (12); it runs in the forward and
  // again in the backward.
  CHECK(kernel(trl, "lm_head.ce").bytes == 32 * t * v);
  int passes = 0;
  for (const Kernel& k : trl.backward) passes += k.name == "lm_head.ce.recompute" && k.bytes == 32 * t * v;
  CHECK(passes == 1);
  // The weight, held in fp32 (the plan's master copies), cast to bf16 (4 +
  // 2 bytes a weight): once in the forward, whose autocast caches a trained
  // leaf's cast, and again for each of the 16 chunks the backward reruns.
  const Kernel& cast = kernel(trl, "lm_head.wcast");
  CHECK(cast.bytes == 6 * v * h);
  CHECK(cast.repeat == 1);
  const auto find = [](const std::vector<Kernel>& ks, const std::string& name) {
    return *std::find_if(ks.begin(), ks.end(), [&](const Kernel& k) { return k.name == name; });
  };
  CHECK(find(trl.backward, "lm_head.wcast.recompute").repeat == chunks);
  CHECK(trl.signature == ce.signature + ",lk=chunked");
  // Held in bf16 (no master copies, or DeepSpeed's module, FSDP's gathered
  // param_dtype): w.float() then autocast's cast back, (2 + 4) + (4 + 2)
  // bytes a weight, a chunk at a time in both passes.
  w.fp32_weights = false;
  const Layer bf16 = m->layers(w).back();
  CHECK(kernel(bf16, "lm_head.wcast").bytes == 12 * v * h);
  CHECK(kernel(bf16, "lm_head.wcast").repeat == chunks);
  const auto weights32 = [&](const std::string& yaml) {
    const ClusterSpec eight = load_cluster("dgx-h100");
    return detail::workload_shape(resolve(parse_plan(yaml, "p.yaml"), *m, eight), eight.device).fp32_weights;
  };
  CHECK(weights32("dp: 8\nseq_len: 4096\nprecision: bf16\n"));
  CHECK_FALSE(weights32("dp: 8\nseq_len: 4096\nprecision: bf16\nmaster_weights: false\n"));
  CHECK_FALSE(weights32("dp: 8\nseq_len: 4096\nprecision: bf16\nzero_stage: 2\n"));
  CHECK_FALSE(weights32("dp: 8\nseq_len: 4096\nprecision: bf16\nfsdp: full_shard\n"));
  CHECK(weights32("dp: 8\nseq_len: 4096\nprecision: fp32\nzero_stage: 3\n"));
  // Without autocast over a 16-bit weight (chunked_nll_fp32, as DeepSpeed
  // runs): below. Over an fp32 one w.float() is itself: no cast, no copy.
  w.loss_kernel = LossKernel::kChunkedNllFp32;
  const Layer f32_over_fp32 = m->layers([&] { WorkloadShape s = w; s.fp32_weights = true; return s; }()).back();
  for (const Kernel& k : f32_over_fp32.forward) CHECK(k.name != "lm_head.wcast");
  CHECK(f32_over_fp32.backward_workspace_bytes == 20 * 256 * v + 6 * v * h);
  w.loss_kernel = LossKernel::kChunkedNll;
  // Without autocast (chunked_nll_fp32): w.float() (2 + 4 bytes a weight) a
  // chunk at a time in both passes, the GEMMs and logits in fp32: each pass
  // reads 2 x 4 + 16 and writes 12 bytes a logit; the backward holds one
  // chunk's (16 + 4) bytes a logit, the weight's fp32 copy (4 v h) and its
  // gradient (fp32, then its bf16 copy: 6 v h).
  w.loss_kernel = LossKernel::kChunkedNllFp32;
  const Layer f32 = m->layers(w).back();  // over bf16 weights
  CHECK(kernel(f32, "lm_head.wcast").bytes == 6 * v * h);
  CHECK(kernel(f32, "lm_head.wcast").repeat == chunks);
  CHECK(kernel(f32, "lm_head").fp32);
  CHECK(kernel(f32, "lm_head.ce").bytes == 36 * t * v);
  CHECK(find(f32.backward, "lm_head.dgrad").fp32);
  CHECK(f32.backward_workspace_bytes == 20 * 256 * v + 10 * v * h);
  CHECK(f32.signature == ce.signature + ",lk=chunked32");
  w.loss_kernel = LossKernel::kChunkedNll;
  w.fp32_weights = true;
  // A frozen head: no gradient arrives, and its cast is cached for no pass:
  // a 16-bit base's (12 bytes a weight) or an fp32 base's (6) a chunk at a
  // time in both; the fp32 base's own cast before the GEMM is the loss's.
  const auto lora = models::load_model("llama-3-8b", {parse_override("model.peft=lora")});
  const Layer frozen = lora->layers(w).back();
  CHECK(frozen.backward_workspace_bytes == 18 * 256 * v + 2 * v * h);
  CHECK(kernel(frozen, "lm_head.wcast").bytes == 12 * v * h);
  CHECK(kernel(frozen, "lm_head.wcast").repeat == chunks);
  const auto lora32 = models::load_model("llama-3-8b", {parse_override("model.peft=lora_fp32")});
  const Layer frozen32 = lora32->layers(w).back();
  CHECK(kernel(frozen32, "lm_head.wcast").bytes == 6 * v * h);
  CHECK(kernel(frozen32, "lm_head.wcast").repeat == chunks);
  CHECK(find(frozen32.backward, "lm_head.wcast.recompute").bytes == 6 * v * h);
  for (const Kernel& k : frozen32.forward) CHECK(k.name != "lm_head.cast");
  CHECK(frozen32.saved_bytes == frozen.saved_bytes);  // the chunks keep no copy of the weight
  // Fewer than 256 tokens make one chunk of them all.
  w.seq_len = 100;
  CHECK(m->layers(w).back().backward_workspace_bytes == 18 * 100 * v + 8 * v * h);
  // Plans: named chunked_nll, refused under tensor parallelism.
  const ClusterSpec two = load_cluster("dgx-h100", {parse_override("cluster.gpus_per_node=2")});
  CHECK(load_plan("ddp", {parse_override("plan.loss_kernel=chunked_nll")}).loss_kernel == LossKernel::kChunkedNll);
  CHECK(load_plan("ddp", {parse_override("plan.loss_kernel=chunked_nll_fp32")}).loss_kernel == LossKernel::kChunkedNllFp32);
  CHECK_THAT(error_of([&] { predict(*m, load_plan("megatron-tp", {parse_override("plan.tp=2"), parse_override("plan.loss_kernel=chunked_nll")}), two); }),
             Catch::Contains("plan.loss_kernel: chunked_nll with tp = 2"));
}
