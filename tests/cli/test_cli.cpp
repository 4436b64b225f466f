// End-to-end tests of the dtsim binary: exit status, one-line errors, JSON
// and trace output.
#include <catch2/catch.hpp>

#include <algorithm>

#include <array>
#include <cctype>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <string>
#include <sys/wait.h>

#include <yaml-cpp/yaml.h>

namespace {

struct Result {
  int status = -1;
  std::string out;  // stdout and stderr together
  std::string err;  // stderr alone
};

Result dtsim(const std::string& args) {
  namespace fs = std::filesystem;
  const fs::path err_file = fs::temp_directory_path() / ("dtsim_cli_err_" + std::to_string(::getpid()));
  const std::string cmd = std::string(DTSIM_BINARY) + " " + args + " 2>" + err_file.string();
  Result r;
  FILE* p = ::popen(cmd.c_str(), "r");
  REQUIRE(p != nullptr);
  std::array<char, 4096> buf{};
  std::size_t n = 0;
  while ((n = std::fread(buf.data(), 1, buf.size(), p)) > 0) r.out.append(buf.data(), n);
  const int st = ::pclose(p);
  r.status = WIFEXITED(st) ? WEXITSTATUS(st) : -1;
  std::ifstream ef(err_file);
  r.err.assign(std::istreambuf_iterator<char>(ef), std::istreambuf_iterator<char>());
  fs::remove(err_file);
  r.out += r.err;
  return r;
}

std::string temp_file(const std::string& name, const std::string& content) {
  const auto path = std::filesystem::temp_directory_path() / name;
  std::ofstream(path) << content;
  return path.string();
}

/// Whether this dtsim has `validate` (not in a DTSIM_CORE_ONLY build, whose
/// validate answers every argument with one "not in this build" line).
bool has_validate() {
  static const bool yes = dtsim("validate --help").out.find("not in this build") == std::string::npos;
  return yes;
}

int lines(const std::string& s) {
  int n = 0;
  for (char c : s) n += c == '\n';
  return n;
}

}  // namespace

TEST_CASE("predict prints a table", "[cli]") {
  const Result r = dtsim("predict --model gpt2 --cluster dgx-a100 --plan ddp");
  CHECK(r.status == 0);
  CHECK_THAT(r.out, Catch::Contains("iteration time") && Catch::Contains("MFU") && Catch::Contains("exposed comm") &&
                        Catch::Contains("fits: yes"));
}

TEST_CASE("the plan line names attention and a sequence length only for a model that has them", "[cli]") {
  // gpt2 attends over 1,024-token sequences; seed 003's CNN reads images
  // (no sequence, no attention); its bag of words reads sequences without
  // attending, and is one layer (its embedding bag) in dtsim's count of blocks.
  const Result gpt2 = dtsim("predict --model gpt2 --cluster 1xh100 --plan single");
  CHECK(gpt2.out.find(" seq_len=1024 fp16 flash-attention adamw") != std::string::npos);
  const Result cnn = dtsim("predict --model cnn --cluster 2xp100 --plan ddp");
  REQUIRE(cnn.status == 0);
  CHECK(cnn.out.find("global_batch=8 fp16 adamw zero_stage=0") != std::string::npos);
  CHECK(cnn.out.find("attention") == std::string::npos);
  CHECK(cnn.out.find("seq_len") == std::string::npos);
  const Result nbow = dtsim("predict --model nbow --cluster 1xk80 --plan single");
  CHECK(nbow.out.find("seq_len=256 fp16 adamw") != std::string::npos);
  CHECK(nbow.out.find(", 1 layer) on 1xk80") != std::string::npos);
}

TEST_CASE("search ranks plans for seed 003's models", "[cli][search][seed003]") {
  // VGG11 and the encoder-decoder on the report's two P100s, batch 64: every
  // plan fits 16 GB; a CNN attends to nothing, so its attn column says "-".
  const Result vgg = dtsim("search --model vgg11 --cluster 2xp100 --global-batch 64 --top 3");
  REQUIRE(vgg.status == 0);
  CHECK(vgg.out.find("fastest 3 plans that fit") != std::string::npos);
  CHECK(vgg.out.find("   flash ") == std::string::npos);
  const Result s2s = dtsim("search --model seq2seq --cluster 2xp100 --global-batch 64 --top 3 --json");
  REQUIRE(s2s.status == 0);
  const YAML::Node j = YAML::Load(s2s.out.substr(0, s2s.out.size() - s2s.err.size()));
  CHECK(j["model"].as<std::string>() == "seq2seq");
  REQUIRE(j["top"].size() == 3);
  for (const auto& e : j["top"]) {
    CHECK(e["plan"]["tp"].as<int>() == 1);  // an LSTM has no tensor-parallel split
    CHECK(e["fits"].as<bool>());
  }
}

TEST_CASE("the plan line names FSDP's units and DeepSpeed's coordinator knobs as counts of elements", "[cli]") {
  // Whole elements, as DeepSpeed's config writes them (1e7 is 10000000).
  const Result z = dtsim("predict --model gpt2 --cluster dgx-a100 --plan zero3 --set plan.stage3_prefetch_bucket_size=1e7");
  CHECK(z.status == 0);
  CHECK_THAT(z.out, Catch::Contains("zero_stage=3 stage3_prefetch_bucket_size=10000000\n"));
  // Note [FSDP's root unit]: the default wrapping is not named; a unit per layer is.
  const Result b = dtsim("predict --model gpt2 --cluster dgx-a100 --plan fsdp");
  CHECK_THAT(b.out, Catch::Contains("(fsdp full_shard)"));
  const Result l = dtsim("predict --model gpt2 --cluster dgx-a100 --plan fsdp --set plan.fsdp_wrap=layers");
  CHECK_THAT(l.out, Catch::Contains("(fsdp full_shard, a unit per layer)"));
  const Result t = dtsim("predict --model gpt2 --cluster dgx-a100 --plan fsdp --set plan.fsdp_wrap=torchtitan");
  CHECK_THAT(t.out, Catch::Contains("(fsdp full_shard, a unit per layer, [norm, output] kept to its backward)"));
}

TEST_CASE("search ranks plans and says how many it tried", "[cli][search]") {
  const Result r = dtsim("search --model gpt2 --cluster 2xa100-80g --global-batch 16 --top 3 --json");
  REQUIRE(r.status == 0);
  const YAML::Node j = YAML::Load(r.out);
  CHECK(j["gpus"].as<int>() == 2);
  CHECK(j["enumerated"].as<int>() == j["pruned_memory"].as<int>() + j["pruned_time"].as<int>() + j["simulated"].as<int>());
  REQUIRE(j["top"].size() == 3);
  CHECK(j["top"][0]["iteration_time_s"].as<double>() <= j["top"][1]["iteration_time_s"].as<double>());
  CHECK(j["top"][0]["plan"]["dp"].as<int>() * j["top"][0]["plan"]["tp"].as<int>() * j["top"][0]["plan"]["pp"].as<int>() == 2);
  const Result csv = dtsim("search --model gpt2 --cluster 2xa100-80g --global-batch 16 --top 3 --csv");
  REQUIRE(csv.status == 0);
  CHECK(lines(csv.out) == 4);  // header + 3 plans
  // Note [Search twins]: a plan's other names in the column `also`, then
  // the blocks of a chunk Megatron's block recompute reruns (0: none or
  // every block), then whether tensor parallelism's collectives overlap
  // the GEMMs; on one DGX A100 gpt2's pipelines are placed alike either way.
  const Result twins = dtsim("search --model gpt2 --cluster dgx-a100 --top 30 --threads 1 --csv");
  REQUIRE(twins.status == 0);
  CHECK(twins.out.find(",precision,also,recompute_blocks,tp_comm_overlap\n") != std::string::npos);
  CHECK(twins.out.find(",tp-pp-dp,") != std::string::npos);
  CHECK(twins.out.find(",placement tp-dp-pp,0,") != std::string::npos);
}

// Note [Search from a framework config]: llama3_8b_run_config.yaml gives the
// model (its shape is the built-in llama-3-8b), the global batch (512), the
// sequence (8192) and bf16; its own plan (cp 2, so dp 4 on 8 GPUs) is
// predicted at that batch and ranked beside the search's.
// Note [Your plan]: a torchtune single-device recipe holds its one GPU, so
// the search runs on one GPU of the 8-GPU node and keeps the recipe's
// numerics (8-bit states stepped in the backward, the chunked loss).
TEST_CASE("search from a torchtune single-device config searches one GPU and ranks its plan", "[cli][search][frameworks]") {
  const std::string file = std::string(DTSIM_SOURCE_DIR) + "/configs/frameworks/torchtune/llama3_2_3B_full_single_device.yaml";
  const Result r = dtsim("search --cluster dgx-a100 --top 3 --json --set plan.document_len=200 --torchtune " + file);
  REQUIRE(r.status == 0);
  const YAML::Node j = YAML::Load(r.out);
  CHECK(j["gpus"].as<int>() == 1);
  CHECK(j["global_batch"].as<int>() == 2);
  REQUIRE(j["top"].size() >= 1);
  for (const auto& e : j["top"]) {
    CHECK(e["plan"]["dp"].as<int>() == 1);
    CHECK(e["plan"]["optim_bits"].as<int>() == 8);
    CHECK(e["plan"]["optimizer_in_backward"].as<bool>());
  }
  const YAML::Node c = j["compared"];
  CHECK(c["error"].as<std::string>().empty());
  CHECK(c["entry"]["plan"]["recompute"].as<std::string>() == "full");
  // The same plan searched prices the same: one of the listed is it, to the byte.
  bool same = false;
  for (const auto& e : j["top"]) {
    same = same || (e["plan"]["recompute"].as<std::string>() == "full" && e["plan"]["micro_batch"].as<int>() == 2 &&
                    e["peak_bytes"].as<std::int64_t>() == c["entry"]["peak_bytes"].as<std::int64_t>());
  }
  CHECK(same);
}

TEST_CASE("search from a Megatron-Bridge config ranks its plan beside the search's", "[cli][search][frameworks]") {
  const std::string file = std::string(DTSIM_SOURCE_DIR) + "/configs/frameworks/megatron-bridge/llama3_8b_run_config.yaml";
  const Result r = dtsim("search --cluster dgx-h100 --top 3 --json --megatron-bridge " + file);
  REQUIRE(r.status == 0);
  const YAML::Node j = YAML::Load(r.out);
  CHECK(j["model"].as<std::string>() == "llama-3-8b");
  CHECK(j["global_batch"].as<int>() == 512);
  REQUIRE(j["top"].size() == 3);
  for (const auto& e : j["top"]) CHECK(e["plan"]["precision"].as<std::string>() == "bf16");  // the config's, held
  const YAML::Node c = j["compared"];
  CHECK(c["name"].as<std::string>() == file + " (Megatron-Bridge)");
  CHECK(c["error"].as<std::string>().empty());
  CHECK(c["entry"]["plan"]["cp"].as<int>() == 2);
  CHECK(c["entry"]["plan"]["dp"].as<int>() == 4);
  CHECK(c["entry"]["plan"]["micro_batches"].as<int>() == 128);  // 512 / (1 x dp 4)
  // Its rank is 1 + the listed plans faster than it (0: it does not fit, or all three are).
  const double mine = c["entry"]["iteration_time_s"].as<double>();
  int faster = 0;
  for (const auto& e : j["top"]) faster += e["iteration_time_s"].as<double>() < mine;
  const int expected = !c["entry"]["fits"].as<bool>() || faster == 3 ? 0 : faster + 1;
  CHECK(c["rank"].as<int>() == expected);
  // Without a config, no plan of the user's: null.
  const Result plain = dtsim("search --model gpt2 --cluster 2xa100-80g --global-batch 16 --top 3 --json");
  REQUIRE(plain.status == 0);
  CHECK(YAML::Load(plain.out)["compared"].IsNull());
  // A table for people says it in words.
  const Result table = dtsim("search --cluster dgx-h100 --top 3 --megatron-bridge " + file);
  REQUIRE(table.status == 0);
  CHECK(table.out.find("  your plan: " + file + " (Megatron-Bridge)\n") != std::string::npos);
  CHECK(table.out.find("    you ") != std::string::npos);
}

TEST_CASE("a GPipe plan with a given balance reports every stage", "[cli][pipeline]") {
  // The issue's example: gpt2-xl's 48 blocks as [30, 18]; the embedding
  // joins the first stage and the head the last, so 31 and 19 layers.
  const Result r = dtsim("predict --model gpt2-xl --cluster 2xa100-80g --plan gpipe --set plan.stage_layers=[30,18] "
                         "--set plan.micro_batches=16 --json");
  REQUIRE(r.status == 0);
  const YAML::Node j = YAML::Load(r.out);
  CHECK(j["plan"]["schedule"].as<std::string>() == "gpipe");
  CHECK(j["plan"]["grad_accum"].as<int>() == 16);
  REQUIRE(j["plan"]["stage_layers"].size() == 2);
  CHECK(j["plan"]["stage_layers"][0].as<int>() == 31);
  CHECK(j["plan"]["stage_layers"][1].as<int>() == 19);
  REQUIRE(j["memory"]["ranks"].size() == 2);
  CHECK(j["memory"]["ranks"][1]["stage"].as<int>() == 1);
  CHECK(j["time_breakdown_s"]["bubble"].as<double>() > 0);
  // The trace has a process per stage, so Perfetto shows the schedule.
  const std::string trace = temp_file("dtsim_gpipe_trace.json", "");
  const Result t = dtsim("predict --model gpt2 --cluster 2xa100-80g --plan gpipe --trace " + trace);
  REQUIRE(t.status == 0);
  const YAML::Node tj = YAML::LoadFile(trace);
  int stages = 0, forwards = 0;
  for (const auto& e : tj["traceEvents"]) {
    if (e["name"].as<std::string>() == "process_name" &&
        e["args"]["name"].as<std::string>().find("(stage ") != std::string::npos) {
      ++stages;
    }
    if (e["ph"].as<std::string>() == "X" && e["cat"].as<std::string>() == "forward") ++forwards;
  }
  CHECK(stages == 2);
  CHECK(forwards == 2 * 8);  // 2 stages x 8 micro-batches
}

TEST_CASE("predict in JSON has the documented schema", "[cli]") {
  const Result r = dtsim("predict --model bert-large --cluster 2xa100-80g --plan ddp --set plan.micro_batch=32 --json");
  REQUIRE(r.status == 0);
  const YAML::Node j = YAML::Load(r.out);
  for (const char* k : {"iteration_time_s", "samples_per_s", "tokens_per_s", "tflops_per_gpu", "mfu", "hfu"}) {
    CHECK(j[k].as<double>() > 0);
  }
  for (const char* k : {"compute", "exposed_comm", "bubble", "optimizer", "offload", "other"}) {
    CHECK(j["time_breakdown_s"][k].as<double>() >= 0);
  }
  CHECK(j["model"]["name"].as<std::string>() == "bert-large");
  CHECK(j["model"]["parameters"].as<std::int64_t>() == 335141888);
  CHECK(j["model"]["layers"].as<int>() == 24);
  CHECK(j["cluster"]["gpus"].as<int>() == 2);
  CHECK(j["plan"]["micro_batch"].as<int>() == 32);
  CHECK(j["plan"]["dp"].as<int>() == 2);
  CHECK(j["plan"]["global_batch"].as<int>() == 64);
  CHECK(j["memory"]["fits"].as<bool>());
  const YAML::Node rank = j["memory"]["ranks"][0];
  for (const char* k : {"rank", "stage", "peak_bytes", "parameters_bytes", "gradients_bytes", "optimizer_bytes",
                        "activations_bytes", "buffers_bytes"}) {
    CHECK(rank[k].IsDefined());
  }
  // The breakdown sums to the iteration time (critical-path attribution).
  double sum = 0;
  for (const auto& kv : j["time_breakdown_s"]) sum += kv.second.as<double>();
  CHECK(sum == Approx(j["iteration_time_s"].as<double>()).epsilon(1e-6));
  // samples/s = global batch / iteration time
  CHECK(j["samples_per_s"].as<double>() == Approx(64.0 / j["iteration_time_s"].as<double>()));
}

TEST_CASE("predict simulates a long pipeline's steady state once, and --unabridged every micro-batch", "[cli][pipeline]") {
  // megatron-3d on 64 GPUs: 8 stages of 2 chunks, 512 micro-batches. Stage
  // 0 holds ceil(((8 - 1) x 2 + (2 - 1) x 8) / 2) + 1 = 12 micro-batches at
  // once; an interleaved abridged run takes 6 x 12 = 72 of them (a multiple
  // of pp, Note [Steady state]).
  const std::string args = "predict --model gpt-175b --cluster dgx-a100 --set cluster.nodes=8 --plan megatron-3d --json";
  const Result a = dtsim(args);
  const Result b = dtsim(args + " --unabridged");
  REQUIRE(a.status == 0);
  REQUIRE(b.status == 0);
  const YAML::Node ja = YAML::Load(a.out), jb = YAML::Load(b.out);
  CHECK(ja["plan"]["grad_accum"].as<int>() == 512);
  CHECK(ja["simulation"]["micro_batches_simulated"].as<int>() == 72);
  CHECK(jb["simulation"]["micro_batches_simulated"].as<int>() == 512);
  CHECK(ja["iteration_time_s"].as<std::string>() == jb["iteration_time_s"].as<std::string>());
  CHECK(ja["simulation"]["tasks"].as<int>() == jb["simulation"]["tasks"].as<int>());
  CHECK(ja["memory"]["ranks"][0]["peak_bytes"].as<std::int64_t>() == jb["memory"]["ranks"][0]["peak_bytes"].as<std::int64_t>());
}

TEST_CASE("a flag given a value is refused in one line, exit 2", "[cli]") {
  for (const char* flag : {"--unabridged=yes", "--json=1"}) {
    INFO(flag);
    const Result r = dtsim(std::string("predict --model gpt2 --cluster dgx-a100 ") + flag);
    CHECK(r.status == 2);
    CHECK_THAT(r.err, Catch::Contains(std::string(flag).substr(0, std::string(flag).find('=')) + ": takes no value"));
    CHECK(std::count(r.err.begin(), r.err.end(), '\n') == 1);
  }
}

TEST_CASE("a trace of too many micro-batches, or a plan past this machine's memory, is refused in one line, exit 2",
          "[cli][pipeline]") {
  // Note [Graph size]: 10^8 micro-batches on 2 stages (the 1f1b plan) are
  // predicted from their steady state, but a trace would hold every task.
  const std::string path = (std::filesystem::temp_directory_path() / "dtsim_cli_huge_trace.json").string();
  std::filesystem::remove(path);
  const std::string args = "predict --model gpt2 --cluster dgx-a100 --plan 1f1b --set plan.micro_batches=100000000";
  CHECK(dtsim(args).status == 0);
  const Result r = dtsim(args + " --trace " + path);
  CHECK(r.status == 2);
  CHECK_THAT(r.err, Catch::Contains("100000000 micro-batches") && Catch::Contains("without --trace"));
  CHECK(lines(r.err) == 1);
  CHECK_FALSE(std::filesystem::exists(path));
// AddressSanitizer reserves more address space than the limit (GCC says
// so by __SANITIZE_ADDRESS__, clang 14 by __has_feature).
#if defined(__has_feature)
#if __has_feature(address_sanitizer)
#define DTSIM_TEST_ASAN 1
#endif
#endif
#if !defined(__SANITIZE_ADDRESS__) && !defined(DTSIM_TEST_ASAN)
  // 10^6 micro-batches of DDP are under that bound (2 x 14 layers x 10^6
  // tasks at least) but not under 3 GB of address space: std::bad_alloc, said in one line.
  const std::string cmd = "ulimit -v 3000000; " + std::string(DTSIM_BINARY) +
                          " predict --model gpt2 --cluster dgx-a100 --plan ddp --set plan.grad_accum=1000000 2>&1";
  FILE* p = ::popen(cmd.c_str(), "r");
  REQUIRE(p != nullptr);
  std::string out;
  std::array<char, 4096> buf{};
  std::size_t n = 0;
  while ((n = std::fread(buf.data(), 1, buf.size(), p)) > 0) out.append(buf.data(), n);
  const int st = ::pclose(p);
  CHECK((WIFEXITED(st) ? WEXITSTATUS(st) : -1) == 2);
  CHECK_THAT(out, Catch::StartsWith("dtsim: out of memory") && Catch::Contains("plan.grad_accum"));
  CHECK(lines(out) == 1);
#endif
}

TEST_CASE("predict with a trace file writes Chrome Trace Event JSON", "[cli]") {
  const std::string path = (std::filesystem::temp_directory_path() / "dtsim_cli_trace.json").string();
  std::filesystem::remove(path);
  const Result r = dtsim("predict --model gpt2 --cluster dgx-a100 --plan zero3 --trace " + path);
  REQUIRE(r.status == 0);
  const YAML::Node t = YAML::LoadFile(path);
  const YAML::Node ev = t["traceEvents"];
  REQUIRE(ev.IsSequence());
  int complete = 0, counters = 0, gathers = 0;
  for (const auto& e : ev) {
    const std::string ph = e["ph"].as<std::string>();
    complete += ph == "X";
    counters += ph == "C";
    if (ph == "X" && e["args"] && e["args"]["op"] && e["args"]["op"].as<std::string>() == "all_gather") ++gathers;
  }
  CHECK(complete > 20);
  CHECK(counters > 20);
  CHECK(gathers > 0);
  // Nothing left behind but the file itself.
  for (const auto& f : std::filesystem::directory_iterator(std::filesystem::temp_directory_path())) {
    CHECK(f.path().filename().string().find(".dtsim_cli_trace.json.tmp") == std::string::npos);
  }
  std::filesystem::remove(path);
}

TEST_CASE("a plan that does not fit is reported, not an error", "[cli]") {
  const Result r = dtsim("predict --model gpt2-xl --cluster 1x2080ti --plan single --json");
  REQUIRE(r.status == 0);
  const YAML::Node j = YAML::Load(r.out);
  CHECK_FALSE(j["memory"]["fits"].as<bool>());
  CHECK(j["memory"]["shortfall_bytes"].as<std::int64_t>() > 0);
  CHECK_THAT(dtsim("predict --model gpt2-xl --cluster 1x2080ti --plan single").out, Catch::Contains("fits: NO, short by"));
}

TEST_CASE("comm prints an nccl-tests-like table", "[cli]") {
  const Result r = dtsim("comm --cluster dgx-a100 --op all_reduce --ranks 8 --max-bytes 1048576");
  CHECK(r.status == 0);
  CHECK_THAT(r.out, Catch::Contains("algbw (GB/s)") && Catch::Contains("busbw (GB/s)") && Catch::Contains("1048576"));
  const Result j = dtsim("comm --cluster dgx-a100 --op reduce_scatter --ranks 4 --json --max-bytes 1024");
  REQUIRE(j.status == 0);
  CHECK(YAML::Load(j.out)["rows"].size() == 8);  // 8, 16, ..., 1024
  // NCCL's protocol (Note [NCCL protocols]): 8 B in LL, 6.6 + 14 x 0.6 =
  // 15.0 us on 8 A100s; 1 GiB in Simple.
  CHECK_THAT(r.out, Catch::Contains("proto"));
  const Result p = dtsim("comm --cluster dgx-a100 --ranks 8 --min-bytes 8 --max-bytes 8 --json");
  REQUIRE(p.status == 0);
  const YAML::Node row = YAML::Load(p.out)["rows"][0];
  CHECK(row["protocol"].as<std::string>() == "LL");
  CHECK(row["time_us"].as<double>() == Approx(15.0).margin(0.002));  // and 14 B at 87.7 GB/s
  const Result big = dtsim("comm --cluster dgx-a100 --ranks 8 --min-bytes 1073741824 --max-bytes 1073741824 --json");
  CHECK(YAML::Load(big.out)["rows"][0]["protocol"].as<std::string>() == "Simple");
  // Where the cluster's collectives take one line (Gloo) there is none.
  const Result cpu = dtsim("comm --cluster local-cpu --ranks 2 --max-bytes 8 --json");
  CHECK_FALSE(YAML::Load(cpu.out)["rows"][0]["protocol"]);
}

TEST_CASE("comm prices context parallelism's ring step as send_recv over its ranks (Note [A ring step])", "[cli][cp]") {
  // 1 GiB from each GPU to the next: within a DGX H100 every send has its
  // own NVLink, 1 GiB / 369.9 GB/s (NCCL's share of 450) = 2,902.8 us plus
  // the hop's few us, whether 2 or 8 ranks take part.
  auto time_us = [](const std::string& args) {
    const Result r = dtsim("comm --op send_recv --min-bytes 1073741824 --max-bytes 1073741824 --json " + args);
    REQUIRE(r.status == 0);
    return YAML::Load(r.out)["rows"][0]["time_us"].as<double>();
  };
  const double pair = time_us("--cluster dgx-h100 --ranks 2");
  CHECK(pair > 2902.8);
  CHECK(pair < 2902.8 + 10);
  CHECK(time_us("--cluster dgx-h100 --ranks 8") == pair);
  // Over two nodes the ring crosses each boundary on one NIC (400 Gb/s,
  // 50 GB/s at most): as a pair split across the nodes, at least 21,475 us.
  const double across = time_us("--cluster dgx-h100 --set cluster.nodes=2 --ranks 16");
  CHECK(across == time_us("--cluster dgx-h100 --set cluster.nodes=2 --ranks 2 --ranks-per-node 1"));
  CHECK(across > 1073741824 / 50e3);
  // The ranks must fit the cluster's nodes.
  const Result wide = dtsim("comm --cluster dgx-h100 --set cluster.nodes=2 --op all_reduce --ranks 16 --ranks-per-node 1");
  CHECK(wide.status == 2);
  CHECK(wide.err == "dtsim: --ranks 16: 16 ranks, 1 a node, span 16 nodes; dgx-h100 has 2\n");
  const Result one = dtsim("comm --cluster dgx-h100 --op send_recv --ranks 1");
  CHECK(one.status == 2);
  CHECK(one.err == "dtsim: --ranks 1: send_recv needs a peer; valid: 2 or more\n");
}

TEST_CASE("comm prices all-to-all and predict spreads experts", "[cli][moe]") {
  // 8 ranks of a DGX H100 (NVLink 450 GB/s at NCCL's 0.822: 369.9 GB/s):
  // 1 GiB in (n-1)/n x 1 GiB / 369.9 GB/s + 6.7 us = 2,546.6 us, so busbw =
  // algbw x 7/8 is 368.9 GB/s.
  const Result r = dtsim("comm --cluster dgx-h100 --op all_to_all --ranks 8 --min-bytes 1073741824 --max-bytes 1073741824 --json");
  REQUIRE(r.status == 0);
  CHECK(YAML::Load(r.out)["rows"][0]["busbw_GBps"].as<double>() == Approx(368.9).epsilon(0.001));
  const Result p = dtsim("predict --model mixtral-8x7b --cluster dgx-h100 --set cluster.nodes=4 --plan megatron-moe --json");
  REQUIRE(p.status == 0);
  const YAML::Node j = YAML::Load(p.out);
  CHECK(j["plan"]["ep"].as<int>() == 8);
  CHECK(j["plan"]["edp"].as<int>() == 1);  // 32 GPUs / pp 4 = 8 a stage, all in one expert group
  const Result bad = dtsim("predict --model mixtral-8x7b --cluster dgx-h100 --set plan.ep=3");
  CHECK(bad.status == 2);
  CHECK(bad.err == "dtsim: --set plan.ep: 3: 8 routed experts are not divisible by ep=3; valid: 1, 2, 4, 8\n");
  // validate runs ep with DDP and ZeRO-1/2, not with ZeRO-3: one line before anything starts.
  const Result v = dtsim("validate --model moe-tiny --plan zero3 --set plan.ep=2 --procs 2");
  CHECK(v.status == 2);
  if (v.err.find("not in this build") == std::string::npos) {  // a core-only build has no validate at all
    CHECK(std::count(v.err.begin(), v.err.end(), '\n') == 1);
    CHECK(v.err.find("zero3.yaml:7: ZeRO-3 with plan.ep 2 is not run") != std::string::npos);
  }
}

TEST_CASE("comm --profile prices from a calibration and names the source", "[cli][moe]") {
  // The shipped CPU profile was made before all_to_all was measured: priced
  // by Note [All-to-all] over the link its all-reduce fit gives ("p2p").
  const std::string prof = std::string(DTSIM_SOURCE_DIR) + "/configs/profiles/local-cpu-tiny.h5";
  const Result r = dtsim("comm --cluster local-cpu --op all_to_all --ranks 2 --max-bytes 1024 --json --profile " + prof);
  REQUIRE(r.status == 0);
  const YAML::Node j = YAML::Load(r.out);
  CHECK(j["cost_source"].as<std::string>() == "profile " + prof +
                                                 ": all_to_all over 2 ranks not measured: the datasheet formula over the "
                                                 "intra-node link its all_reduce fit gives");
  CHECK(j["rows"][0]["algorithm"].as<std::string>() == "p2p");
  // Its all-reduce was measured at 24 sizes: priced between them (Note
  // [Measured collectives]), the fit named beside.
  const Result ar = dtsim("comm --cluster local-cpu --op all_reduce --ranks 2 --max-bytes 1024 --profile " + prof);
  REQUIRE(ar.status == 0);
  CHECK_THAT(ar.out, Catch::Contains("all_reduce over 2 ranks measured at 24 sizes, 8 B to 64 MiB, priced between them "
                                     "(fit comm.gloo.all_reduce.2 t = "));
  const Result bad = dtsim("comm --cluster local-cpu --op all_to_all --profile /nonexistent/p.h5");
  CHECK(bad.status == 2);
  CHECK(std::count(bad.err.begin(), bad.err.end(), '\n') == 1);
}

TEST_CASE("list shows the built-ins", "[cli]") {
  CHECK_THAT(dtsim("list models").out, Catch::Contains("gpt2-xl") && Catch::Contains("bert-large") && Catch::Contains("bilstm"));
  CHECK_THAT(dtsim("list clusters").out, Catch::Contains("dgx-a100") && Catch::Contains("8xv100-16g"));
  CHECK_THAT(dtsim("list plans").out, Catch::Contains("zero2-offload") && Catch::Contains("fsdp"));
  CHECK_THAT(dtsim("list devices").out, Catch::Contains("H100-SXM") && Catch::Contains("K80"));
}

TEST_CASE("a HuggingFace config.json is a model", "[cli]") {
  const Result r = dtsim(std::string("predict --model ") + DTSIM_TEST_DATA + "/gpt2_config.json --cluster 1x2080ti --plan single --json");
  REQUIRE(r.status == 0);
  CHECK(YAML::Load(r.out)["model"]["parameters"].as<std::int64_t>() == 124439808);
}

TEST_CASE("an image-and-text config.json is its language model, and predict and search say what is left out", "[cli][hf]") {
  // Gemma 3's wrapper around gemma-3-1b's keys: the prediction carries the
  // note among its warnings, in the table and in JSON, as does the search.
  const std::string file = temp_file("dtsim_gemma3_config.json",
                                     "{\"architectures\": [\"Gemma3ForConditionalGeneration\"], \"model_type\": \"gemma3\",\n"
                                     " \"text_config\": {\"model_type\": \"gemma3_text\", \"hidden_size\": 1152, \"intermediate_size\": 6912,"
                                     " \"num_attention_heads\": 4, \"num_hidden_layers\": 26, \"num_key_value_heads\": 1, \"head_dim\": 256,"
                                     " \"vocab_size\": 262144, \"sliding_window\": 512}}\n");
  const std::string note = file + ": Gemma3ForConditionalGeneration's language model (config.text_config) is what is predicted";
  const Result table = dtsim("predict --model " + file + " --cluster dgx-a100 --set plan.seq_len=1024");
  REQUIRE(table.status == 0);
  CHECK_THAT(table.out, Catch::Contains("warning: " + note));
  const Result json = dtsim("predict --model " + file + " --cluster dgx-a100 --set plan.seq_len=1024 --json");
  REQUIRE(json.status == 0);
  const YAML::Node p = YAML::Load(json.out);
  // gemma-3-1b's count (test_llama.cpp: gemma_params(26, 1152, 4, 1, 256, 6912, 262144, tied)).
  CHECK(p["model"]["parameters"].as<std::int64_t>() == 999'885'952);
  REQUIRE(p["simulation"]["warnings"].size() >= 1);
  CHECK(p["simulation"]["warnings"][0].as<std::string>().rfind(note, 0) == 0);
  const Result search = dtsim("search --model " + file + " --cluster dgx-a100 --set plan.seq_len=1024 --top 1");
  REQUIRE(search.status == 0);
  CHECK_THAT(search.out, Catch::Contains("warning: " + note));
}

TEST_CASE("bad input: one line naming what and where, exit status 2", "[cli][bad-input]") {
  struct Case {
    std::string args;
    std::string expect;
  };
  const std::string bad_yaml = temp_file("dtsim_bad.yaml", "dp: 2\nmicro_batch: [1, 2\n");
  const std::string unknown_key = temp_file("dtsim_unknown.yaml", "dp: 2\nzero_stag: 1\n");
  const std::string bad_json = temp_file("dtsim_bad_config.json", "{\"model_type\": \"gpt2\",\n \"n_layer\": 12\n");
  // Note [Strict configs] (sim/src/config/config_node.cpp).
  const std::string twice = temp_file("dtsim_twice.yaml", "dp: 2\nmicro_batch: 4\ndp: 4\n");
  const std::string complex_key = temp_file("dtsim_complex.yaml", "? [a, b]\n: 1\n");
  const std::string scalar = temp_file("dtsim_scalar.yaml", "ddp\n");
  const std::string commented = temp_file("dtsim_comment_config.json", "{\"model_type\": \"gpt2\", // GPT-2\n \"n_layer\": 2}\n");
  std::string nest = "1";
  for (int i = 0; i < 70; ++i) nest = "{k: " + nest + "}";
  const std::string deep = temp_file("dtsim_deep.yaml", "dp: " + nest + "\n");
  const std::string overflow_json = temp_file("dtsim_overflow_config.json", "{\"model_type\": \"gpt2\", \"n_layer\": 1e400}\n");
  // Issue 21: a config.json of a family dtsim does not read, and a Llama
  // whose 5 key/value heads cannot each serve a whole group of its 32.
  const std::string neox = temp_file("dtsim_neox_config.json",
                                     "{\"architectures\": [\"GPTNeoXForCausalLM\"], \"model_type\": \"gpt_neox\", \"hidden_size\": 512}\n");
  const std::string kv5 = temp_file(
      "dtsim_kv5_config.json",
      "{\"architectures\": [\"LlamaForCausalLM\"], \"model_type\": \"llama\", \"hidden_size\": 4096, \"intermediate_size\": "
      "14336,\n \"num_attention_heads\": 32, \"num_hidden_layers\": 2, \"num_key_value_heads\": 5, \"vocab_size\": 1000, "
      "\"max_position_embeddings\": 8192}\n");
  const std::string huge = temp_file("dtsim_huge.yaml", std::string((std::size_t{10} << 20) + 1, '#'));
  // Ten levels of nine aliases each: 9^10 = 3.5e9 values once expanded, in
  // 400 bytes; walking them took minutes (Note [Strict configs]).
  std::string laughs = "l0: &l0 [x, x, x, x, x, x, x, x, x]\n";
  for (int i = 1; i < 10; ++i) {
    laughs += "l" + std::to_string(i) + ": &l" + std::to_string(i) + " [";
    for (int k = 0; k < 9; ++k) laughs += (k ? ", *l" : "*l") + std::to_string(i - 1);
    laughs += "]\n";
  }
  const std::string bomb = temp_file("dtsim_laughs.yaml", laughs + "name: x\nfamily: gpt\nlayers: 2\nhidden: 64\nheads: 2\n");
  // A device of 1e-6 TFLOP/s: gpt-1t's 6 N = 6e12 FLOPs per token, 2048
  // tokens a sample, takes over 1e10 s a sample, past the 2^62 ns (146 years)
  // dtsim simulates (Note [Sizes in 64 bits]).
  const std::string slow = temp_file("dtsim_slow.yaml",
      "name: slow\nnodes: 1\ngpus_per_node: 2\n"
      "device: {base: A100-SXM4-80GB, peak_fp16_TFLOPs: 1e-6, peak_bf16_TFLOPs: 1e-6, peak_fp32_TFLOPs: 1e-6, peak_tf32_TFLOPs: 1e-6}\n"
      "intra_node: {type: nvlink, bandwidth_GBps: 450, latency_us: 0.7}\n"
      "inter_node: {type: infiniband, bandwidth_GBps: 50, latency_us: 5.0, nics_per_node: 1}\n");
  const std::vector<Case> cases = {
      {"predict --model gpt2 --cluster dgx-a100 --plan /no/such/plan.yaml", "/no/such/plan.yaml: no such file"},
      {"predict --model gpt2 --cluster dgx-a100 --plan " + bad_yaml, bad_yaml + ":3:1: malformed YAML"},  // yaml-cpp marks where it gave up
      {"predict --model gpt2 --cluster dgx-a100 --plan " + unknown_key,
       unknown_key + ":2: plan.zero_stag: unknown key (did you mean 'zero_stage'?)"},
      {"predict --model " + bad_json + " --cluster dgx-a100", bad_json + ":3:1: malformed JSON"},  // at the end: the object never closes
      {"predict --model " + commented + " --cluster dgx-a100", commented + ":1:24: malformed JSON"},  // JSON has no comments
      {"predict --model gpt2 --cluster dgx-a100 --plan " + twice, twice + ":3:1: key 'dp' given twice (first at line 1)"},
      {"predict --model gpt2 --cluster dgx-a100 --plan " + complex_key, complex_key + ":1:3: a key must be a plain name, got a list"},
      {"predict --model gpt2 --cluster dgx-a100 --plan " + scalar + " --set plan.dp=2", scalar + ":1: plan: expected a mapping of keys, got 'ddp'"},
      {"predict --model gpt2 --cluster dgx-a100 --set 'plan.dp={a: 1, a: 2}'", "--set plan.dp: key 'a' given twice"},
      {"predict --model gpt2 --cluster dgx-a100 --plan " + deep, "nested more than 64 levels deep"},
      {"predict --model " + bomb + " --cluster dgx-a100", bomb + ": more than 2000000 values once its aliases (*name) are expanded; no dtsim config is"},
      {"predict --model gpt2 --cluster dgx-a100 --plan " + huge, huge + ": 10485761 bytes, larger than a config may be (limit 10 MiB)"},
      {"predict --model gpt2 --cluster dgx-a100 --plan ddp --plan zero3", "dtsim predict: --plan given twice ('ddp' and 'zero3'); give it once"},
      {"predict --model gpt2 --cluster dgx-a100 --json --json", "dtsim predict: --json given twice"},
      {"comm --cluster dgx-a100 extra", "dtsim comm: unexpected argument 'extra'; options name their values (--cluster C, see dtsim comm --help)"},
      {"predict llama-3-8b dgx-h100", "dtsim predict: unexpected argument 'llama-3-8b'; options name their values (--model M, --cluster C, --plan P, "
                                      "see dtsim predict --help)"},
      // 10,000 layers of 12 h^2 with h = 2^24: 3.38e19 parameters (the embeddings add 1e12).
      {"predict --model gpt2 --cluster dgx-a100 --set model.hidden=16777216 --set model.heads=16 --set model.layers=10000",
       "model.layers: with the other sizes gives 3.38e+19 parameters, more than dtsim models (limit 1e15)"},
      {"predict --model gpt-1t --cluster " + slow, "is beyond what dtsim simulates"},
      // 1e43 is whole but past int64: a range error, checked before any conversion.
      {"predict --model gpt2 --cluster dgx-a100 --set model.vocab=10e42", "model.vocab: 10e42 is out of range; valid: 1 to 16777216"},
      {"predict --model gpt2 --cluster dgx-a100 --set model.vocab=99999999999999999999", "model.vocab: 99999999999999999999 is out of range"},
      // Found by tests/fuzz: a JSON number past a double, an integer key of 1e20.
      {"predict --model " + overflow_json + " --cluster dgx-a100", overflow_json + ": malformed JSON: number overflow parsing '1e400'"},
      {"predict --model gpt2 --cluster dgx-a100 --set plan.micro_batch=1e20", "plan.micro_batch: 1e20 is out of range; valid: 1 to 16777216"},
      {"predict --model gpt2 --cluster dgx-a100 --set plan.zero_stage=4", "plan.zero_stage: 4 is not one of 0, 1, 2, 3"},
      // Note [FP8 training]: the A100 has no FP8 tensor cores.
      {"predict --model gpt2 --cluster dgx-a100 --plan ddp --set plan.precision=fp8",
       "plan.precision: fp8 needs FP8 tensor cores (Hopper or later); A100-SXM4-80GB has none; valid: fp32, fp16, bf16"},
      {"predict --model gpt2 --cluster dgx-h100 --plan zero3 --set plan.fp8_param_gather=true",
       "plan.fp8_param_gather: true needs precision fp8"},
      {"predict --model gpt2 --cluster dgx-a100 --set plan.dp=3", "plan.dp: 3 does not divide the 8 GPUs of dgx-a100; valid: 1, 2, 4, 8"},
      // Issue 21: 120 tokens do not cut into 2 x 8 chunks; valid cp divide 8 and leave 120 / (2 cp) whole.
      {"predict --model llama-tiny --cluster dgx-h100 --set plan.cp=8 --set plan.seq_len=120",
       "plan.cp: 8 does not split seq_len 120: context parallelism cuts a sequence into 2 x cp = 16 equal chunks; valid cp: 1, 2, 4"},
      {"predict --model bert-tiny --cluster dgx-h100 --set plan.cp=2", "plan.cp: 2: this model has no context-parallel split"},
      {"predict --model llama-tiny --cluster dgx-h100 --set model.kv_heads=3", "model.kv_heads: 3 does not divide the 4 attention heads"},
      {"predict --model " + neox + " --cluster dgx-h100",
       neox + ":1: config.model_type: 'gpt_neox' is not supported; valid: gpt2, bert, llama, mistral, mistral3, qwen2, qwen2_5_vl, qwen3, qwen3_vl, qwen3_vl_moe, smollm3, phi3, "
               "granite, olmo2, olmo3, gemma2, gemma3, gemma3_text, mixtral"},
      {"predict --model " + kv5 + " --cluster dgx-h100",
       kv5 + ":2: config.num_key_value_heads: 5 does not divide the 32 attention heads"},
      {"predict --model llama-tiny --cluster dgx-h100 --set plan.attention=fast", "plan.attention: 'fast' is not one of auto, eager, flash"},
      {"predict --model llama-tiny --cluster dgx-h100 --set plan.cp_comm=ring", "plan.cp_comm: 'ring' is not one of p2p, all_gather"},
      {"predict --model llama-tiny --cluster dgx-h100 --set plan.tp=2 --set plan.tp_comm_overlap=true",
       "plan.tp_comm_overlap: true needs sequence_parallel: true"},
      {"predict --model gpt2 --cluster dgx-a100 --set plan.micro_batch=0", "plan.micro_batch: 0 is out of range"},
      {"predict --model gpt2 --cluster dgx-a100 --plan zero2 --set plan.offload_params=cpu", "plan.offload_params: cpu needs zero_stage 3"},
      {"predict --model gpt2 --cluster dgx-a100 --set plan.micro_batch=many", "plan.micro_batch: 'many' is not an integer"},
      {"predict --model gpt2 --cluster dgx-a100 --set plan.micro_batch=99999999999999", "plan.micro_batch: 99999999999999 is out of range"},
      {"predict --model gpt2 --cluster dgx-a100 --set model.seq_len=10000000 --set plan.micro_batch=1000", "exceed 100 TB"},
      {"predict --model gpt3 --cluster dgx-a100", "did you mean 'gpt2'?"},
      {"predict --model gpt2 --cluster dgx-a10", "did you mean 'dgx-a100'?"},
      {"predict --model gpt2 --cluster dgx-a100 --jsn", "unknown option --jsn (did you mean --json?)"},
      {"predict --cluster dgx-a100", "--model is required"},
      {"predict --model gpt2 --cluster dgx-a100 --set micro_batch=2", "expected SECTION.KEY=VALUE"},
      {"predict --model gpt2 --cluster dgx-a100 --set cluster.nodes=0", "cluster.nodes: 0 is out of range"},
      {"comm --cluster dgx-a100 --set cluster.nccl_proto=LL9", "cluster.nccl_proto: 'LL9' is not a protocol; valid: LL, LL128, Simple"},
      {"predict --model gpt2 --cluster dgx-a100 --set model.heads=7", "model.heads"},
      {"predict --model gpt2 --cluster dgx-a100 --trace /no/such/dir/t.json", "/no/such/dir/t.json: cannot write"},
      {"comm --cluster dgx-a100 --op allreduce", "did you mean 'all_reduce'?"},
      {"comm --cluster dgx-a100 --ranks 9", "--ranks 9: expected an integer from 1 to 8"},
      {"list gpus", "expected one of models, clusters, plans, devices"},
      {"frobnicate", "unknown command 'frobnicate'"},
      {"calibrate --device tpu --out /tmp/x.h5", "--device: 'tpu' is not one of cpu, cuda"},
      {"calibrate --device cpu", "--out is required"},
      {"calibrate --device cpu --out /no/such/dir/p.h5", "/no/such/dir/p.h5: cannot write: directory '/no/such/dir' does not exist"},
      {"calibrate --device cpu --out /tmp/x.h5 --procs two", "--procs: 'two' is not a whole number"},
      {"calibrate --device cpu --out /tmp/x.h5 --models gpt5", "gpt5"},
      {"calibrate --device cpu --out /tmp/x.h5 --time-limit soon", "--time-limit: 'soon' is not a number of seconds in (0, 2592000]"},
      {"calibrate --device cpu --out /tmp/x.h5 --python ''", "--python: empty; name a Python (e.g. --python /usr/bin/python3) or none"},
      {"predict --model gpt2 --cluster dgx-a100 --set plan.runtime=cpython", "plan.runtime: 'cpython' is not one of libtorch, python"},
      {"profile show /no/such/profile.h5", "/no/such/profile.h5: no such profile"},
      // A key a dotted --set made on its way down is the --set's, not the file's line.
      {"predict --model gpt2 --cluster dgx-a100 --set cluster.intra_node.0.bandwidth_GBps=3",
       "--set cluster.intra_node.0: unknown key; valid keys: bandwidth_GBps, efficiency, latency_us, nvls_efficiency, type"},
      {"profile show /tmp", "/tmp: not a file (a folder, a device or a pipe); give a profile's path"},
      {"predict --model gpt2 --cluster dgx-a100 --profile /dev/null", "/dev/null: not a file (a folder, a device or a pipe)"},
      {"profile list", "dtsim profile: unknown command 'list'; valid: show, upgrade"},
      {"predict --model gpt2 --cluster dgx-a100 --profile /no/such/profile.h5", "/no/such/profile.h5: no such profile"},
      {"predict --model gpt2 --cluster dgx-a100 --set plan.schedule=zigzag", "plan.schedule: 'zigzag' is not one of gpipe, 1f1b, interleaved, zb-h1"},
      {"predict --model gpt2 --cluster dgx-a100 --set plan.pp=2 --set plan.stage_layers=[1,x]", "plan.stage_layers: expected a list of integers"},
      {"predict --model bilstm --cluster dgx-a100 --set plan.tp=2", "plan.tp: 2: an LSTM has no tensor-parallel split"},
      {"predict --model gpt2-medium --cluster dgx-a100 --plan megatron-3d", "plan.pp: tp x pp = 64 does not divide the 8 GPUs of dgx-a100"},
      {"search --model gpt2 --cluster dgx-a100 --global-batch 0", "--global-batch 0: expected an integer from 1"},
      {"search --model gpt2 --cluster dgx-a100 --gpus 3", "--gpus 3: must divide the 8 GPUs of dgx-a100"},
      {"search --model gpt2 --cluster dgx-a100 --json --csv", "--json and --csv exclude each other"},
      {"predict --model gpt2 --cluster dgx-a100 --plan zero2 --set plan.contiguous_gradients=maybe",
       "--set plan.contiguous_gradients: 'maybe' is not a boolean; valid: true, false"},
      // Issue 23: seed 003's models refuse convolutions that cannot be.
      {"predict --model cnn --cluster 1xk80 --set model.image_size=4", "--set model.image_size: 4 leaves conv.0 a 4 x 4 input"},
      {"predict --model cnn --cluster 1xk80 --set model.padding=-2", "model.padding: -2 is out of range; valid: 0 to 1024"},
      {"predict --model conv-autoencoder --cluster 1xk80 --set model.conv_channels=[16,0]", "model.conv_channels: entry 2 is 0"},
      {"predict --model vgg11 --cluster 1xk80 --set model.channels=0", "model.channels: 0 is out of range"},
      {"predict --model vgg11 --cluster 1xk80 --set plan.seq_len=2", "plan.seq_len: 2 exceeds vgg11's maximum of 1; valid: 1 to 1"},
      {"predict --model seq2seq --cluster 1xk80 --set plan.seq_len=1", "plan.seq_len: 1 is below seq2seq's minimum of 2; valid: 2 to 32"},
      {"predict --model vgg11 --cluster 2xp100 --set plan.tp=2", "plan.tp: 2: vgg11 has no tensor-parallel split"},
      {"predict --model vgg11 --cluster 2xp100 --set plan.sync_batchnorm=true", "plan.sync_batchnorm: true, but vgg11 has no batch norm layer"},
      {"predict --model vgg11-bn --cluster 2xp100 --set plan.sync_batchnorm=maybe", "plan.sync_batchnorm: 'maybe' is not a boolean; valid: true, false"},
      // 2^24 images of 2^24 channels at 224 x 224: 8e20 bytes, past 64 bits before any product is formed.
      {"predict --model vgg11 --cluster 2xp100 --set model.channels=16777216 --set plan.micro_batch=16777216", "exceed 100 TB"},
      {"predict --model seq2seq --cluster 2xp100 --set model.embed=16777216 --set plan.micro_batch=16777216", "exceed 100 TB"},
      {"predict --model seq2seq --cluster 1xk80 --set model.cell=rnn", "model.cell: 'rnn' is not one of lstm, gru"},
  };
  for (const auto& c : cases) {
    INFO("dtsim " << c.args);
    const Result r = dtsim(c.args);
    CHECK(r.status == 2);
    // "dtsim: " before a problem of the input, "dtsim SUB: " before one of the command line.
    const std::string sub = c.args.substr(0, c.args.find(' '));
    CHECK_THAT(r.err, (Catch::StartsWith("dtsim: ") || Catch::StartsWith("dtsim " + sub + ": ")) && Catch::Contains(c.expect));
    CHECK(lines(r.err) == 1);
  }
}

TEST_CASE("what a review's bad input found: each one line and exit 2, never ignored, never a hang", "[cli][bad-input]") {
  namespace fs = std::filesystem;
  const fs::path dir = fs::temp_directory_path() / ("dtsim_bad_" + std::to_string(::getpid()));
  fs::create_directories(dir);
  const auto one_line = [](const Result& r, const std::string& says) {
    INFO(r.err);
    CHECK(r.status == 2);
    CHECK(lines(r.err) == 1);
    CHECK(r.err.find(says) != std::string::npos);
  };
  // comm prices a collective on a cluster: a plan's or a model's key is refused, not ignored.
  one_line(dtsim("comm --cluster dgx-a100 --set plan.tp=2"), "only cluster keys apply");
  one_line(dtsim("comm --cluster dgx-a100 --set model.layers=abc"), "--set model.layers=abc");
  // Output that cannot be written is a failure (a full disk: /dev/full).
  one_line(dtsim("list clusters >/dev/full"), "standard output: the output could not be written");
  one_line(dtsim("predict --model gpt2 --cluster dgx-a100 >/dev/full"), "standard output");
  // No command at all: its one line on stderr beside the help.
  one_line(dtsim(""), "a command is required");
  // --megatron-args: one word that is no flag is a file, whatever is wrong with it.
  one_line(dtsim("predict --cluster dgx-a100 --megatron-args " + dir.string()), "is a directory");
  one_line(dtsim("predict --cluster dgx-a100 --megatron-args /nonexistent/gpt.sh"), "/nonexistent/gpt.sh: no such file");
  one_line(dtsim("predict --cluster dgx-a100 --megatron-args /dev/zero"), "/dev/zero: larger than a config may be");
  {
    std::ofstream(dir / "nul.sh", std::ios::binary) << std::string("--micro-batch-size 1\0\0", 22);
    one_line(dtsim("predict --cluster dgx-a100 --megatron-args " + (dir / "nul.sh").string()), "a binary file");
  }
  // A torchtitan model dtsim does not have: the file, the key and what is built in.
  {
    std::ofstream(dir / "tt.toml") << "[model]\nname = \"llama3\"\nflavor = \"999B\"\n[training]\nlocal_batch_size = 1\nseq_len = 2048\n";
    const Result r = dtsim("predict --cluster dgx-h100 --torchtitan " + (dir / "tt.toml").string());
    one_line(r, "--model is required");
    CHECK(r.err.find("tt.toml") != std::string::npos);
    CHECK(r.err.find("flavor=999B") != std::string::npos);
    CHECK(r.err.find("llama3 8B, 70B, 405B") != std::string::npos);
  }
  fs::remove_all(dir);
}

TEST_CASE("a plan's problems are all reported, one 'dtsim:' line each, exit status 2", "[cli][bad-input]") {
  // gpt2 has 12 heads (tp 5 cannot split them) and 1024 positions; a V100 has no bf16.
  const Result r = dtsim("predict --model gpt2 --cluster 8xv100-16g --set plan.tp=5 --set plan.seq_len=4096 --set plan.precision=bf16");
  CHECK(r.status == 2);
  CHECK(lines(r.err) == 3);
  CHECK(r.err ==
        "dtsim: --set plan.tp: 5: 12 attention heads are not divisible by tp=5\n"
        "dtsim: --set plan.seq_len: 4096 exceeds gpt2's maximum of 1024; valid: 1 to 1024\n"
        "dtsim: --set plan.precision: bf16 needs bfloat16 support, which V100-SXM2-16GB lacks; valid: fp32, fp16\n");
}

// ---- Command-line conventions (issue 24): CLI11 behind every subcommand.

namespace {

const std::vector<std::string> kSubcommands = {"predict", "search", "comm", "list", "calibrate", "profile", "validate"};

/// The version as the top-level CMakeLists.txt's project() sets it, read here
/// independently of the program.
std::string project_version() {
  std::ifstream in(std::string(DTSIM_SOURCE_DIR) + "/CMakeLists.txt");
  std::string line;
  while (std::getline(in, line)) {
    const auto at = line.find("project(dtsim VERSION ");
    if (at == std::string::npos) continue;
    const auto from = at + std::string("project(dtsim VERSION ").size();
    return line.substr(from, line.find_first_of(" )", from) - from);
  }
  return "";
}

/// The long options a help text lists ("--model", ...), in order.
std::vector<std::string> options_in_help(const std::string& help) {
  std::vector<std::string> out;
  for (std::size_t at = help.find("--"); at != std::string::npos; at = help.find("--", at + 2)) {
    if (at > 0 && help[at - 1] != ' ' && help[at - 1] != ',') continue;  // only an option's own column
    std::size_t end = at + 2;
    while (end < help.size() && (std::isalnum(static_cast<unsigned char>(help[end])) || help[end] == '-')) ++end;
    const std::string name = help.substr(at, end - at);
    // Options are listed as "  --name" or "-h,--name" at a line's start.
    const std::size_t bol = help.rfind('\n', at);
    const std::string before = help.substr(bol == std::string::npos ? 0 : bol + 1, at - (bol == std::string::npos ? 0 : bol + 1));
    if (before.find_first_not_of(" -h,v") != std::string::npos) continue;
    if (name.size() > 2 && std::find(out.begin(), out.end(), name) == out.end()) out.push_back(name);
  }
  return out;
}

/// What the bash completion offers for the words `line` (the last one being
/// completed), each on its own line, sorted as bash gives them.
std::string complete(const std::string& line) {
  namespace fs = std::filesystem;
  const fs::path script = fs::temp_directory_path() / ("dtsim_complete_" + std::to_string(::getpid()) + ".sh");
  std::ofstream(script) << "source '" << DTSIM_BASH_COMPLETION << "'\n"
                        << "COMP_WORDS=(" << line << (line.back() == ' ' ? "''" : "") << ")\n"
                        << "COMP_CWORD=$((${#COMP_WORDS[@]} - 1))\n"
                        << "_dtsim\n"
                        << "printf '%s\\n' \"${COMPREPLY[@]}\"\n";
  std::string out;
  FILE* p = ::popen(("bash '" + script.string() + "'").c_str(), "r");
  REQUIRE(p != nullptr);
  std::array<char, 4096> buf{};
  std::size_t n = 0;
  while ((n = std::fread(buf.data(), 1, buf.size(), p)) > 0) out.append(buf.data(), n);
  ::pclose(p);
  fs::remove(script);
  return out;
}

}  // namespace

TEST_CASE("every subcommand's --help and -h print its usage and exit 0", "[cli][conventions]") {
  std::vector<std::string> subs = kSubcommands;
  for (const char* sub : {"profile show", "profile upgrade", "profile import-nccl-tests", "profile import-trace", "profile import-layers",
                          "profile import-python-host", "profile import-interference"}) {
    subs.push_back(sub);
  }
  for (const auto& sub : subs) {
    for (const char* flag : {"--help", "-h"}) {
      INFO("dtsim " << sub << " " << flag);
      const Result r = dtsim(sub + " " + flag);
      CHECK(r.status == 0);
      CHECK(r.err.empty());
      CHECK_THAT(r.out, Catch::Contains("Usage: dtsim " + sub + " [OPTIONS]") && Catch::Contains("--help"));
    }
  }
  // Help comes before any check of the others: a --help with a bad option beside it still helps.
  const Result r = dtsim("predict --model nosuch --help");
  CHECK(r.status == 0);
  CHECK_THAT(r.out, Catch::Contains("Usage: dtsim predict") && Catch::Contains("--unabridged"));
  const Result top = dtsim("--help");
  CHECK(top.status == 0);
  for (const auto& sub : kSubcommands) CHECK_THAT(top.out, Catch::Contains("  " + sub));
}

TEST_CASE("dtsim alone prints the usage and exits 2", "[cli][conventions]") {
  const Result r = dtsim("");
  CHECK(r.status == 2);
  CHECK_THAT(r.out, Catch::Contains("Usage: dtsim [OPTIONS] [SUBCOMMAND]") && Catch::Contains("predict"));
}

TEST_CASE("dtsim --version prints its version, first or after a subcommand", "[cli][conventions]") {
  const std::string version = project_version();
  REQUIRE(!version.empty());
  for (const char* args : {"--version", "predict --version", "profile show --version", "validate --version"}) {
    INFO("dtsim " << args);
    const Result r = dtsim(args);
    CHECK(r.status == 0);
    CHECK(r.out == "dtsim " + version + "\n");
  }
}

TEST_CASE("dtsim help SUB prints SUB's help", "[cli][conventions]") {
  const Result help = dtsim("help predict");
  CHECK(help.status == 0);
  CHECK(help.out == dtsim("predict --help").out);
  CHECK_THAT(help.out, Catch::Contains("Usage: dtsim predict"));
  CHECK(dtsim("help profile show").out == dtsim("profile show --help").out);
  const Result bad = dtsim("help predcit");
  CHECK(bad.status == 2);
  CHECK(bad.err == "dtsim help: no command 'predcit' (did you mean 'predict'?); valid: predict, search, comm, list, calibrate, "
                   "profile, validate, help\n");
}

TEST_CASE("a bad option is one line naming the subcommand and what is valid, exit 2", "[cli][conventions][bad-input]") {
  for (const auto& sub : kSubcommands) {
    INFO("dtsim " << sub << " --bogus");
    const Result r = dtsim(sub + " --bogus");
    CHECK(r.status == 2);
    if (sub == "validate" && !has_validate()) {
      CHECK_THAT(r.err, Catch::StartsWith("dtsim validate: not in this build"));
    } else {
      CHECK_THAT(r.err, Catch::StartsWith("dtsim " + sub + ": unknown option --bogus"));
    }
    CHECK(lines(r.err) == 1);
  }
  // The valid ones are those --help lists.
  const Result r = dtsim("search --model gpt2 --cluster dgx-a100 --gobal-batch 8");
  CHECK(r.err ==
        "dtsim search: unknown option --gobal-batch (did you mean --global-batch?); valid: --model, --cluster, --profile, --set, "
        "--deepspeed, --megatron-args, --megatron-bridge, --torchtitan, --torchtune, --axolotl, --llamafactory, --trl, --nanotron, --accelerate, --gpus, --global-batch, "
        "--top, --threads, --json, --csv\n");
  const Result missing = dtsim("predict --cluster dgx-a100 --model");
  CHECK(missing.status == 2);
  CHECK(missing.err == "dtsim predict: --model: missing value\n");
  const Result profile = dtsim("profile show");
  CHECK(profile.status == 2);
  CHECK_THAT(profile.err, Catch::StartsWith("dtsim profile show: FILE.h5 is required"));
  CHECK(lines(profile.err) == 1);
  const Result upgrade_json = dtsim("profile upgrade x.h5 --json");
  CHECK(upgrade_json.status == 2);
  CHECK(upgrade_json.err == "dtsim profile upgrade: unknown option --json; it takes none but --help\n");
  if (has_validate()) {
    const Result validate = dtsim("validate --model gpt2-tiny --step 3");
    CHECK(validate.status == 2);
    CHECK_THAT(validate.err, Catch::StartsWith("dtsim validate: unknown option --step (did you mean --steps?); valid: --model"));
    CHECK(lines(validate.err) == 1);
  }
}

TEST_CASE("an option given twice is refused, naming both values", "[cli][conventions][bad-input]") {
  const std::vector<std::pair<std::string, std::string>> cases = {
      {"search --model gpt2 --cluster dgx-a100 --top 3 --top 4", "dtsim search: --top given twice ('3' and '4'); give it once\n"},
      {"comm --cluster dgx-a100 --op all_gather --op=broadcast", "dtsim comm: --op given twice ('all_gather' and 'broadcast'); give it once\n"},
      {"calibrate --out a.h5 --quick --quick", "dtsim calibrate: --quick given twice; give it once\n"},
      {"list models --json --json", "dtsim list: --json given twice; give it once\n"},
      {"validate --model gpt2-tiny --model bert-tiny", "dtsim validate: --model given twice ('gpt2-tiny' and 'bert-tiny'); give it once\n"},
  };
  for (const auto& [args, expect] : cases) {
    INFO("dtsim " << args);
    if (args.rfind("validate", 0) == 0 && !has_validate()) continue;  // a core-only build's validate: one line, above
    const Result r = dtsim(args);
    CHECK(r.status == 2);
    CHECK(r.err == expect);
  }
  // --set is the one that repeats.
  const Result sets = dtsim("predict --model gpt2 --cluster dgx-a100 --set plan.micro_batch=2 --set cluster.nodes=2 --json");
  CHECK(sets.status == 0);
  CHECK(YAML::Load(sets.out)["plan"]["micro_batch"].as<int>() == 2);
}

TEST_CASE("the bash completion completes subcommands, options and built-in names", "[cli][conventions][completion]") {
  CHECK(complete("dtsim pre") == "predict\n");
  CHECK(complete("dtsim predict --mo") == "--model\n");
  CHECK(complete("dtsim profile ") == "show\nupgrade\nimport-nccl-tests\nimport-trace\nimport-layers\nimport-python-host\nimport-interference\n");
  CHECK(complete("dtsim profile import-n") == "import-nccl-tests\n");
  CHECK(complete("dtsim list cl") == "clusters\n");
  // Names come from `dtsim list`: gpt2-x completes to the one built-in GPT-2 XL.
  CHECK(complete(std::string(DTSIM_BINARY) + " predict --model gpt2-x") == "gpt2-xl\n");
  CHECK(complete(std::string(DTSIM_BINARY) + " search --cluster dgx-a1") == "dgx-a100\n");
}

TEST_CASE("the bash completion offers every option each subcommand's --help lists", "[cli][conventions][completion]") {
  std::vector<std::string> subs = kSubcommands;
  for (const char* sub : {"profile show", "profile upgrade", "profile import-nccl-tests", "profile import-trace", "profile import-layers",
                          "profile import-python-host"}) {
    subs.push_back(sub);
  }
  for (const auto& sub : subs) {
    INFO("dtsim " << sub);
    const auto options = options_in_help(dtsim(sub + " --help").out);
    CHECK(options.size() >= 2);  // --help and --version at least
    const std::string offered = complete("dtsim " + sub + " --");
    for (const auto& o : options) {
      INFO(o);
      CHECK_THAT(offered, Catch::Contains(o + "\n"));
    }
  }
}

// Issue 28: "a 7.5B model at dp 64, micro-batch 1, 16 tokens, shows 11.5 GB
// of gradients at its peak" under ZeRO-2, where DeepSpeed holds them in its
// buffers (Note [ZeRO-2's buffers]).
TEST_CASE("DeepSpeed's ZeRO-2 keeps a 7.5B model's gradients within its buffers at 16 tokens", "[cli][frameworks]") {
  auto json_of = [](const Result& r) { return YAML::Load(r.out.substr(0, r.out.size() - r.err.size())); };
  // gpt-7.5b: V h + s h + L (12 h^2 + 13 h) + 2 h with V 51,200, s 2,048,
  // L 36, h 4,096 = 7,467,786,240 parameters. Its gradients at the peak are
  // at most the bf16 partition (2 B x psi / 64 = 233,368,320 B), its fp32
  // copy at the step (466,736,640 B) and the largest layer's gradients as
  // it makes them (the embedding's (51,200 + 2,048) x 4,096 x 2 B =
  // 436,207,616 B): 1,136,312,576 B, where 11.5 GB piled up before.
  constexpr std::int64_t kMostGradients = 1'136'312'576;
  for (const bool overlap : {false, true}) {
    const std::string config = temp_file("dtsim_cli_zero2_" + std::to_string(::getpid()) + ".json",
                                         std::string(R"({"train_micro_batch_size_per_gpu": 1, "bf16": {"enabled": true},)") +
                                             R"( "zero_optimization": {"stage": 2)" + (overlap ? R"(, "overlap_comm": true)" : "") + "}}");
    const Result r = dtsim("predict --model gpt-7.5b --cluster dgx-a100 --set cluster.nodes=8 --set plan.seq_len=16 --json --deepspeed " + config);
    std::filesystem::remove(config);
    REQUIRE(r.status == 0);
    const YAML::Node j = json_of(r);
    CHECK(j["plan"]["dp"].as<int>() == 64);
    CHECK(j["plan"]["overlap"].as<bool>() == overlap);  // DeepSpeed's default for stage 2 is false
    const YAML::Node rank = j["memory"]["ranks"][0];
    CHECK(rank["gradients_bytes"].as<std::int64_t>() <= kMostGradients);
    // The buffers: reduce_bucket_size (5e8 elements of bf16) once, twice with overlap_comm.
    CHECK(rank["buffers_bytes"].as<std::int64_t>() >= (overlap ? 2 : 1) * 1'000'000'000LL);
  }
}

// Issue 24: the configs users already have, as predict's plan (Note
// [Framework options] in cli/src/scenario_options.cpp).
TEST_CASE("predict reads a DeepSpeed config, a Megatron command line and a torchtitan TOML as the plan", "[cli][frameworks]") {
  const std::string dir = std::string(DTSIM_SOURCE_DIR) + "/configs/frameworks/";
  auto json_of = [](const Result& r) { return YAML::Load(r.out.substr(0, r.out.size() - r.err.size())); };
  {
    // zero3.json: train_batch_size 512, train_micro_batch_size_per_gpu 8,
    // stage 3, bf16; on dgx-h100's 8 GPUs DeepSpeed's rule train_batch_size =
    // micro x accumulation x dp gives 512 / (8 x 8) = 8 accumulation steps.
    const Result r = dtsim("predict --model llama-3-8b --cluster dgx-h100 --set plan.seq_len=2048 --json --deepspeed " + dir +
                           "deepspeed/zero3.json");
    REQUIRE(r.status == 0);
    const YAML::Node p = json_of(r)["plan"];
    CHECK(p["zero_stage"].as<int>() == 3);
    CHECK(p["dp"].as<int>() == 8);
    CHECK(p["micro_batch"].as<int>() == 8);
    CHECK(p["grad_accum"].as<int>() == 8);
    CHECK(p["global_batch"].as<int>() == 512);
    CHECK(p["precision"].as<std::string>() == "bf16");
    // Its stage3_param_persistence_threshold (1e6, ten times DeepSpeed's
    // default) is the plan's (Note [ZeRO-3 modules]); nothing is left out.
    CHECK(p["stage3_param_persistence_threshold"].as<std::int64_t>() == 1000000);
    CHECK(r.err.find("warning:") == std::string::npos);
  }
  {
    // gpt3-175b.sh: --tensor-model-parallel-size 8, --pipeline-model-parallel-size 8,
    // 96 layers at --num-layers-per-virtual-pipeline-stage 6 (12 a stage: 2 chunks),
    // --micro-batch-size 1, --global-batch-size 1536; on 64 DGX A100s
    // (512 GPUs) dp = 512 / 64 = 8 and 1536 / (1 x 8) = 192 micro-batches.
    // No --model: the flags' shape is the built-in gpt-175b.
    const Result r = dtsim("predict --cluster dgx-a100 --set cluster.nodes=64 --json --megatron-args " + dir + "megatron/gpt3-175b.sh");
    REQUIRE(r.status == 0);
    const YAML::Node j = json_of(r);
    CHECK(j["model"]["name"].as<std::string>() == "gpt-175b");
    CHECK(j["plan"]["tp"].as<int>() == 8);
    CHECK(j["plan"]["pp"].as<int>() == 8);
    CHECK(j["plan"]["virtual_stages"].as<int>() == 2);
    CHECK(j["plan"]["dp"].as<int>() == 8);
    CHECK(j["plan"]["grad_accum"].as<int>() == 192);
  }
  {
    // The same flags inline; a user's --set wins over them.
    const Result r = dtsim("predict --model gpt-175b --cluster dgx-a100 --set cluster.nodes=64 --set plan.tp=4 --json "
                           "--megatron-args \"--tensor-model-parallel-size 8 --pipeline-model-parallel-size 8 --micro-batch-size 1 "
                           "--global-batch-size 1536\"");
    REQUIRE(r.status == 0);
    const YAML::Node p = json_of(r)["plan"];
    CHECK(p["tp"].as<int>() == 4);
    CHECK(p["pp"].as<int>() == 8);
    CHECK(p["dp"].as<int>() == 16);  // 512 / (4 x 8)
  }
  {
    const Result r = dtsim("predict --cluster dgx-h100 --json --torchtitan " + dir + "torchtitan/llama3_8b.toml");
    REQUIRE(r.status == 0);
    const YAML::Node j = json_of(r);
    CHECK(j["model"]["name"].as<std::string>() == "llama-3-8b");  // [model] name llama3, flavor 8B
    CHECK(j["plan"]["fsdp"].as<std::string>() == "full_shard");   // data_parallel_shard_degree -1: all 8 GPUs
    CHECK(j["plan"]["dp"].as<int>() == 8);
  }
}

// Note [Megatron-Bridge configs]: deepseek_v3_run_config.yaml, Bridge's
// recipe for 1,024 H100s (tp 2, pp 16, ep 64, global batch 4096 of 1): on
// 128 DGX H100s dp = 1024 / (2 x 16) = 32 and 4096 / (1 x 32) = 128
// micro-batches; its layout's 4 decoders a stage, the embedding joining the
// first and the MTP depth and head the last.
TEST_CASE("predict reads Megatron-Bridge's run_config.yaml as the plan and the model", "[cli][frameworks]") {
  const std::string file = std::string(DTSIM_SOURCE_DIR) + "/configs/frameworks/megatron-bridge/deepseek_v3_run_config.yaml";
  const Result r = dtsim("predict --cluster dgx-h100 --set cluster.nodes=128 --json --megatron-bridge " + file);
  REQUIRE(r.status == 0);
  const YAML::Node j = YAML::Load(r.out.substr(0, r.out.size() - r.err.size()));
  CHECK(j["model"]["name"].as<std::string>() == "megatron-DeepSeekV3");
  CHECK(j["plan"]["dp"].as<int>() == 32);
  CHECK(j["plan"]["ep"].as<int>() == 64);
  CHECK(j["plan"]["grad_accum"].as<int>() == 128);
  CHECK(j["plan"]["stage_layers"][0].as<int>() == 5);
  CHECK(j["plan"]["stage_layers"][15].as<int>() == 3);
  CHECK(j["plan"]["moe_dispatcher"].as<std::string>() == "deepep");
  // Its precision-aware optimizer with bf16 moments, modelled now (Note
  // [Precision-aware optimizer]): no warning.
  CHECK(r.err.empty());
  CHECK(j["plan"]["use_precision_aware_optimizer"].as<bool>());
  CHECK(j["plan"]["exp_avg_dtype"].as<std::string>() == "bf16");
  CHECK(j["plan"]["exp_avg_sq_dtype"].as<std::string>() == "bf16");
  CHECK(j["plan"]["main_params_dtype"].as<std::string>() == "fp32");
  // A field of the wrong type: its file, line and key, exit 2.
  const std::string bad_file = temp_file("dtsim_cli_bridge_bad.yaml", "train:\n  micro_batch_size: one\nmodel:\n  num_layers: 2\n");
  const Result bad = dtsim("predict --cluster dgx-h100 --megatron-bridge " + bad_file);
  CHECK(bad.status == 2);
  CHECK(lines(bad.err) == 1);
  CHECK(bad.err.find(bad_file + ":2: train.micro_batch_size: expected an integer, got 'one'") != std::string::npos);
  std::filesystem::remove(bad_file);
  const Result missing = dtsim("predict --cluster dgx-h100 --megatron-bridge " + bad_file);
  CHECK(missing.status == 2);
  CHECK(lines(missing.err) == 1);
}

TEST_CASE("a framework's config does not combine with --plan or another, one line, exit 2", "[cli][frameworks][bad-input]") {
  const std::string dir = std::string(DTSIM_SOURCE_DIR) + "/configs/frameworks/";
  Result r = dtsim("predict --model gpt2 --cluster dgx-a100 --plan zero2 --deepspeed " + dir + "deepspeed/zero3.json");
  CHECK(r.status == 2);
  CHECK(lines(r.err) == 1);
  CHECK(r.err.find("--plan zero2 and --deepspeed both describe the plan") != std::string::npos);
  r = dtsim("predict --model gpt2 --cluster dgx-a100 --deepspeed " + dir + "deepspeed/zero3.json --torchtitan " + dir +
            "torchtitan/llama3_8b.toml");
  CHECK(r.status == 2);
  CHECK(lines(r.err) == 1);
  // A DeepSpeed config given as the plan says which option reads it.
  r = dtsim("predict --model gpt2 --cluster dgx-a100 --plan " + dir + "deepspeed/zero3.json");
  CHECK(r.status == 2);
  CHECK(lines(r.err) == 1);
  CHECK(r.err.find("looks like a DeepSpeed config; pass it as --deepspeed") != std::string::npos);
}

// Issue 23: batch norm measured on a CPU. configs/profiles/local-cpu-bn.h5
// prices every layer of vgg11-bn-tiny from its measurements: its 8
// convolutions with batch norm, the average pool and 3 linear layers, a
// forward and a backward each.
TEST_CASE("the shipped batch-norm profile prices vgg11-bn-tiny's layers from measurements", "[cli][seed003]") {
  const std::string src = DTSIM_SOURCE_DIR;
  const Result r = dtsim("predict --model " + src + "/configs/models/vgg11-bn-tiny.yaml --cluster local-cpu --plan ddp --set plan.precision=fp32 "
                         "--profile " + src + "/configs/profiles/local-cpu-bn.h5 --json");
  REQUIRE(r.status == 0);
  const YAML::Node sources = YAML::Load(r.out)["simulation"]["cost_sources"];
  CHECK(sources["layers_measured"].as<int>() == 24);
  CHECK(sources["layers_interpolated"].as<int>() == 0);
  CHECK(sources["layers_other_precision"].as<int>() == 0);
  CHECK(sources["layers_fitted"].as<int>() == 0);
  CHECK(sources["layers_analytic"].as<int>() == 0);
  // And `profile show` lists the batch-norm convolutions it measured.
  const Result show = dtsim("profile show " + src + "/configs/profiles/local-cpu-bn.h5");
  REQUIRE(show.status == 0);
  CHECK(show.out.find("conv.layer:ci=3,co=8,k=3,s=1,p=1,hw=32,bn=1") != std::string::npos);
}

// docs/json.md: every --json output starts with schema_version and dtsim_version.
TEST_CASE("profile show --json carries schema_version and dtsim_version", "[cli][json]") {
  const Result r = dtsim("profile show " + std::string(DTSIM_SOURCE_DIR) + "/configs/profiles/local-cpu-moe.h5 --json");
  REQUIRE(r.status == 0);
  const YAML::Node doc = YAML::Load(r.out);
  CHECK(doc["schema_version"].as<int>() == 1);
  CHECK(doc["dtsim_version"].as<std::string>() == project_version());
}

TEST_CASE("profile import-nccl-tests writes a profile that comm then prices from", "[cli][import]") {
  namespace fs = std::filesystem;
  const std::string log = std::string(DTSIM_TEST_DATA) + "/nccl-tests/all_reduce_perf_dgx-a100_8gpu.txt";
  const fs::path out = fs::temp_directory_path() / ("dtsim_cli_import_" + std::to_string(::getpid()) + ".h5");
  Result r = dtsim("profile import-nccl-tests " + log + " --cluster dgx-a100 --out " + out.string());
  REQUIRE(r.status == 0);
  CHECK(fs::exists(out));
  CHECK(r.out.find("comm.nccl.all_reduce.8") != std::string::npos);
  r = dtsim("comm --cluster dgx-a100 --ranks 8 --profile " + out.string());
  CHECK(r.status == 0);
  CHECK(r.out.find("all_reduce over 8 ranks measured at 28 sizes, 8 B to 1 GiB, priced between them (fit "
                   "comm.nccl.all_reduce.8 t = ") != std::string::npos);
  // The log's own times at its sizes (out of place: 10.44 us at 8 B, 10.51
  // at 16 B), the line between them at 12 B: 10.475 us.
  r = dtsim("comm --cluster dgx-a100 --ranks 8 --min-bytes 8 --max-bytes 16 --json --profile " + out.string());
  REQUIRE(r.status == 0);
  const YAML::Node rows = YAML::Load(r.out)["rows"];
  REQUIRE(rows.size() == 2);
  CHECK(rows[0]["time_us"].as<double>() == Approx(10.44).margin(0.0015));
  CHECK(rows[1]["time_us"].as<double>() == Approx(10.51).margin(0.0015));
  r = dtsim("comm --cluster dgx-a100 --ranks 8 --min-bytes 12 --max-bytes 12 --json --profile " + out.string());
  REQUIRE(r.status == 0);
  CHECK(YAML::Load(r.out)["rows"][0]["time_us"].as<double>() == Approx(10.475).margin(0.0015));
  fs::remove(out);
  // No --out: one line, exit 2; a missing log: one line naming it.
  r = dtsim("profile import-nccl-tests " + log);
  CHECK(r.status == 2);
  CHECK(lines(r.err) == 1);
  CHECK(r.err.find("--out FILE.h5 is required") != std::string::npos);
  // A damaged row (line 16 of the sample, 8 B: its time made "x"): the
  // file and line, exit 2, and no profile written.
  {
    std::ifstream in(log);
    std::string text((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
    const std::string row = "           8             2     float     sum      -1    10.44";
    const auto at = text.find(row);
    REQUIRE(at != std::string::npos);
    text.replace(at, row.size(), "           8             2     float     sum      -1        x");
    const std::string bad = temp_file("dtsim_cli_bad_nccl.txt", text);
    r = dtsim("profile import-nccl-tests " + bad + " --out " + out.string());
    CHECK(r.status == 2);
    CHECK(lines(r.err) == 1);
    CHECK(r.err.find(bad + ":16") != std::string::npos);
    CHECK_FALSE(fs::exists(out));
    fs::remove(bad);
  }
  // A profiler trace of a training step prices the kernels it saw.
  r = dtsim("profile import-trace " + std::string(DTSIM_TEST_DATA) + "/traces/gpt_2layers_dgx-a100_bf16.json --out " + out.string());
  CHECK(r.status == 0);
  CHECK(fs::exists(out));
  fs::remove(out);
  r = dtsim("profile import-trace /nonexistent/trace.json --out " + out.string());
  CHECK(r.status == 2);
  CHECK(lines(r.err) == 1);
  CHECK(r.err.find("/nonexistent/trace.json") != std::string::npos);
  CHECK_FALSE(fs::exists(out));
  // import-layers (no --cluster of its own: on the H100 it once failed with
  // "unexpected error: --cluster not found"). The H100 profile into itself
  // adds nothing: refused in one line, nothing written.
  const std::string h100 = std::string(DTSIM_SOURCE_DIR) + "/configs/profiles/h100-sxm.h5";
  r = dtsim("profile import-layers " + h100 + " --into " + h100 + " --out " + out.string());
  CHECK(r.status == 2);
  CHECK(lines(r.err) == 1);
  CHECK(r.err.find("nothing was written") != std::string::npos);
  CHECK_FALSE(fs::exists(out));
  // The H100's layers into the local CPU profile: another device, named.
  r = dtsim("profile import-layers " + h100 + " --into " + std::string(DTSIM_SOURCE_DIR) + "/configs/profiles/local-cpu.h5 --out " +
            out.string());
  CHECK(r.status == 2);
  CHECK(lines(r.err) == 1);
  CHECK(r.err.find("same device") != std::string::npos);
  CHECK_FALSE(fs::exists(out));
  // A missing OLDER, or no --into: one line each, nothing written.
  r = dtsim("profile import-layers /nonexistent/older.h5 --into " + h100 + " --out " + out.string());
  CHECK(r.status == 2);
  CHECK(lines(r.err) == 1);
  CHECK(r.err.find("/nonexistent/older.h5") != std::string::npos);
  r = dtsim("profile import-layers " + h100 + " --out " + out.string());
  CHECK(r.status == 2);
  CHECK(lines(r.err) == 1);
  CHECK(r.err.find("--into NEWER.h5 is required") != std::string::npos);
  CHECK_FALSE(fs::exists(out));
  // import-python-host (Note [Importing the Python host cost]): the H100
  // profile timed no Python loop, so it has none to give; no OTHER, or no
  // --into: one line each, nothing written.
  r = dtsim("profile import-python-host " + h100 + " --into " + h100 + " --out " + out.string());
  CHECK(r.status == 2);
  CHECK(lines(r.err) == 1);
  CHECK(r.err.find("no Python host cost to import") != std::string::npos);
  r = dtsim("profile import-python-host --into " + h100 + " --out " + out.string());
  CHECK(r.status == 2);
  CHECK(lines(r.err) == 1);
  r = dtsim("profile import-python-host " + h100 + " --out " + out.string());
  CHECK(r.status == 2);
  CHECK(lines(r.err) == 1);
  CHECK(r.err.find("--into PROFILE.h5 is required") != std::string::npos);
  CHECK_FALSE(fs::exists(out));
}

// Note [axolotl configs]: its deepspeed: path is found beside the config
// when the working directory does not have it, and a missing one is one line.
TEST_CASE("predict reads an axolotl config and the DeepSpeed JSON it names", "[cli][frameworks]") {
  const std::string dir = std::string(DTSIM_SOURCE_DIR) + "/configs/frameworks/axolotl/";
  const Result r = dtsim("predict --cluster dgx-a100 --json --axolotl " + dir + "llama-3.1-8b-fft-zero3.yaml");
  REQUIRE(r.status == 0);
  const YAML::Node j = YAML::Load(r.out.substr(0, r.out.size() - r.err.size()));
  CHECK(j["model"]["name"].as<std::string>() == "llama-3.1-8b");
  // zero3_bf16.json's stage 3; its "auto" batch is axolotl's: 1 x 2 x 8 GPUs.
  CHECK(j["plan"]["zero_stage"].as<int>() == 3);
  CHECK(j["plan"]["global_batch"].as<int>() == 16);
  CHECK(r.err.find("warning: " + dir + "llama-3.1-8b-fft-zero3.yaml: axolotl settings dtsim does not model") != std::string::npos);
  const std::string file = (std::filesystem::temp_directory_path() / ("dtsim_cli_axolotl_" + std::to_string(::getpid()) + ".yml")).string();
  std::ofstream(file) << "base_model: meta-llama/Llama-3.1-8B\nmicro_batch_size: 1\ndeepspeed: zero9.json\n";
  const Result missing = dtsim("predict --cluster dgx-a100 --axolotl " + file);
  std::filesystem::remove(file);
  CHECK(missing.status == 2);
  CHECK(missing.err == "dtsim: " + file + ":3: deepspeed: zero9.json: no such file (looked in the working directory and beside " + file +
                           "; `axolotl fetch deepspeed_configs` writes axolotl's own)\n");
}

// Note [LLaMA-Factory configs]: examples/deepspeed/ds_z3_config.json is
// found beside the config, and a search from it keeps what transformers'
// Trainer runs: no pipeline.
TEST_CASE("predict and search read a LLaMA-Factory config", "[cli][frameworks]") {
  const std::string dir = std::string(DTSIM_SOURCE_DIR) + "/configs/frameworks/llamafactory/";
  const Result r = dtsim("predict --cluster dgx-h100 --json --llamafactory " + dir + "qwen3_full_sft_ds3.yaml --set plan.document_len=512");
  REQUIRE(r.status == 0);
  const YAML::Node j = YAML::Load(r.out.substr(0, r.out.size() - r.err.size()));
  CHECK(j["model"]["name"].as<std::string>() == "qwen3-4b");
  // ds_z3_config.json's stage 3; its "auto" batch is LLaMA-Factory's: 2 x 4 x 8 GPUs.
  CHECK(j["plan"]["zero_stage"].as<int>() == 3);
  CHECK(j["plan"]["global_batch"].as<int>() == 64);
  CHECK(r.err.find("warning: " + dir + "qwen3_full_sft_ds3.yaml: LLaMA-Factory settings dtsim does not model") != std::string::npos);
  const Result two = dtsim("predict --cluster dgx-h100 --llamafactory " + dir + "qwen3_lora_sft.yaml --axolotl x.yml");
  CHECK(two.status == 2);
  CHECK_THAT(two.err, Catch::Contains("--axolotl, --llamafactory, --trl and --nanotron each describe the whole plan; give one"));
  // Under accelerate launch --config_file: its FSDP, the trainer's batch (Note [accelerate under a trainer]).
  const Result a = dtsim("predict --cluster dgx-h100 --json --accelerate " + dir + "fsdp_config.yaml --llamafactory " + dir + "qwen3_lora_sft.yaml");
  REQUIRE(a.status == 0);
  const YAML::Node ja = YAML::Load(a.out.substr(0, a.out.size() - a.err.size()));
  CHECK(ja["plan"]["fsdp"].as<std::string>() == "full_shard");
  CHECK(ja["plan"]["fsdp_version"].as<int>() == 2);
  CHECK(ja["plan"]["global_batch"].as<int>() == 64);
  const Result tune = dtsim("predict --cluster dgx-h100 --accelerate " + dir + "fsdp_config.yaml --torchtune x.yaml");
  CHECK(tune.status == 2);
  CHECK(tune.err == "dtsim: --accelerate launches transformers' Trainer; it combines with --llamafactory, --axolotl or --trl, not --torchtune\n");
  const Result s = dtsim("search --cluster dgx-h100 --top 20 --threads 1 --json --llamafactory " + dir + "qwen3_lora_sft.yaml");
  REQUIRE(s.status == 0);
  const YAML::Node js = YAML::Load(s.out.substr(0, s.out.size() - s.err.size()));
  REQUIRE(js["top"].size() > 0);
  for (const YAML::Node& e : js["top"]) CHECK(e["plan"]["pp"].as<int>() == 1);
}

// Note [TRL configs]: its own accelerate_config, or one beside it; a search
// from it runs no pipeline.
TEST_CASE("predict and search read a TRL config", "[cli][frameworks]") {
  const std::string dir = std::string(DTSIM_SOURCE_DIR) + "/configs/frameworks/trl/";
  const Result r = dtsim("predict --cluster dgx-h100 --set cluster.nodes=2 --json --trl " + dir + "llama31_8b_full_zero3.yaml");
  REQUIRE(r.status == 0);
  const YAML::Node j = YAML::Load(r.out.substr(0, r.out.size() - r.err.size()));
  CHECK(j["model"]["name"].as<std::string>() == "llama-3.1-8b");
  // trl/accelerate_configs/zero3.yaml: ZeRO-3 over its 8 processes, on 2 nodes too.
  CHECK(j["plan"]["zero_stage"].as<int>() == 3);
  CHECK(j["plan"]["dp"].as<int>() == 8);
  CHECK(j["plan"]["global_batch"].as<int>() == 2 * 8 * 8);
  CHECK(r.err.find("warning: " + dir + "llama31_8b_full_zero3.yaml: TRL under accelerate settings dtsim does not model") != std::string::npos);
  const Result both = dtsim("predict --cluster dgx-h100 --trl " + dir + "llama31_8b_full_zero3.yaml --accelerate " + dir + "zero2.yaml");
  CHECK(both.status == 2);
  CHECK_THAT(both.err, Catch::Contains("llama31_8b_full_zero3.yaml: names its own accelerate_config; give it there or as"));
  const Result a = dtsim("predict --cluster dgx-h100 --json --trl " + dir + "qwen3_8b_lora_sft.yaml --accelerate " + dir + "zero2.yaml");
  REQUIRE(a.status == 0);
  const YAML::Node ja = YAML::Load(a.out.substr(0, a.out.size() - a.err.size()));
  CHECK(ja["plan"]["zero_stage"].as<int>() == 2);
  CHECK(ja["model"]["name"].as<std::string>() == "qwen3-8b+lora32");  // DeepSpeed casts the fp32 base
  CHECK(ja["plan"]["loss_kernel"].as<std::string>() == "chunked_nll_fp32");  // and runs without autocast
  const Result s = dtsim("search --cluster dgx-h100 --top 10 --threads 1 --json --trl " + dir + "qwen3_8b_lora_sft.yaml");
  REQUIRE(s.status == 0);
  const YAML::Node js = YAML::Load(s.out.substr(0, s.out.size() - s.err.size()));
  REQUIRE(js["top"].size() > 0);
  for (const YAML::Node& e : js["top"]) {
    CHECK(e["plan"]["pp"].as<int>() == 1);
    CHECK(e["plan"]["zero_stage"].as<int>() < 3);  // an fp32 base is not sharded
  }
}

// Note [nanotron configs]: its parallelism, batch and model from the YAML,
// its fp32 accumulator in the plan; a search from it.
TEST_CASE("predict and search read a nanotron config", "[cli][frameworks]") {
  const std::string file = std::string(DTSIM_SOURCE_DIR) + "/configs/frameworks/nanotron/smollm3_3b.yaml";
  const Result r = dtsim("predict --cluster dgx-h100 --json --nanotron " + file);
  REQUIRE(r.status == 0);
  const YAML::Node j = YAML::Load(r.out.substr(0, r.out.size() - r.err.size()));
  CHECK(j["model"]["name"].as<std::string>() == "nanotron-smollm3_3b");
  CHECK(j["plan"]["dp"].as<int>() == 4);
  CHECK(j["plan"]["tp"].as<int>() == 2);
  CHECK(j["plan"]["sequence_parallel"].as<bool>());
  CHECK(j["plan"]["fp32_grad_accumulator"].as<bool>());
  CHECK(j["plan"]["global_batch"].as<int>() == 12);
  CHECK(r.err.find("warning: " + file + ": nanotron settings dtsim does not model, ignored: parallelism.tp_linear_async_communication") !=
        std::string::npos);
  const Result plan = dtsim("predict --cluster dgx-h100 --model gpt2 --plan " + file);
  CHECK(plan.status == 2);
  CHECK(plan.err == "dtsim: " + file + " looks like a nanotron config; pass it as --nanotron " + file + "\n");
  const Result s = dtsim("search --cluster dgx-h100 --top 5 --threads 1 --json --nanotron " + file);
  REQUIRE(s.status == 0);
  const YAML::Node js = YAML::Load(s.out.substr(0, s.out.size() - s.err.size()));
  REQUIRE(js["top"].size() > 0);
  CHECK(js["global_batch"].as<int>() == 12);
  // What nanotron can run: its ZeRO stage (0 here), no expert parallelism,
  // FSDP or offload, its pipeline engine (1f1b).
  for (const YAML::Node& e : js["top"]) {
    CHECK(e["plan"]["zero_stage"].as<int>() == 0);
    CHECK(e["plan"]["ep"].as<int>() == 1);
    CHECK(e["plan"]["fsdp"].as<std::string>() == "none");
    CHECK(e["plan"]["offload_optimizer"].as<std::string>() == "none");
    CHECK(e["plan"]["fp32_grad_accumulator"].as<bool>());
    const std::string schedule = e["plan"]["schedule"].as<std::string>();
    CHECK((schedule == "none" || schedule == "1f1b"));
  }
}

// Note [Search from a framework config]: a search from an axolotl config
// proposes what axolotl can run: no pipeline, no forward parameter gather.
TEST_CASE("search from an axolotl config keeps to what axolotl runs", "[cli][frameworks][search]") {
  const std::string file = std::string(DTSIM_SOURCE_DIR) + "/configs/frameworks/axolotl/llama-3.1-8b-lora.yml";
  const Result r = dtsim("search --cluster dgx-a100 --top 40 --threads 1 --json --axolotl " + file);
  REQUIRE(r.status == 0);
  const YAML::Node j = YAML::Load(r.out.substr(0, r.out.size() - r.err.size()));
  REQUIRE(j["top"].size() > 0);
  for (const auto* list : {"top", "pareto"}) {
    for (const YAML::Node& e : j[list]) {
      CHECK(e["plan"]["pp"].as<int>() == 1);
      CHECK(e["plan"]["overlap_param_gather"].as<bool>() == false);
      CHECK(e["plan"]["fsdp"].as<std::string>() == "none");  // an 8-bit base: FSDP wraps no int8 weights
    }
  }
}
