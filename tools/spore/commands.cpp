#include <cstdio>
#include <cstring>
#include <exception>
#include <filesystem>
#include <iostream>
#include <streambuf>
#include <string>
#include <vector>

#include <fmt/format.h>
#include <nlohmann/json.hpp>

#include "base/error.h"
#include "parallel/communicator.h"
#include "runtime/plugin.h"
#include "runtime/profiler.h"
#include "tools/spore/commands.h"

namespace spore::cli {
namespace {
constexpr Command commands[] = {
    {"info", "version, build, CPU ISA in use, threads, library versions", cmd_info},
    {"ops", "every registered op: dtypes, backends with kernels, traits (--json)", cmd_ops},
    {"graph", "parse, verify and print a text-IR graph file (--dot for Graphviz)", cmd_graph},
    {"demo", "a small graph-mode demo: trace, compile, run, profile", cmd_demo},
    {"train", "train a model (simplenet, simplenet_bn, lenet, mlp, transformer) on MNIST / digits; checkpoints, --json",
     cmd_train},
    {"train-lm", "pretrain a small Llama/Qwen2 LM on a text file: BPE tokenizer, checkpoints, GGUF out, --json",
     cmd_train_lm},
    {"plan-parallel", "search data x pipeline x tensor parallelism for an LM on N devices: predicted step time, memory",
     cmd_plan_parallel},
    {"finetune", "LoRA fine-tuning of a Llama/Qwen2 GGUF (frozen f32/bf16/q8_0 base): PEFT and GGUF adapters, --json",
     cmd_finetune},
    {"lora", "LoRA adapter tools: lora merge BASE.gguf ADAPTER -o MERGED.gguf [--quantize q8_0]", cmd_lora},
    {"eval", "test accuracy of a training checkpoint or a model file (.spore / .onnx)", cmd_eval},
    {"export", "checkpoint + model -> .spore or ONNX file, with fixed or symbolic --input-shape", cmd_export},
    {"convert", "ONNX/.spore -> .spore: --precision-mode, --quantize, --input-shape; accuracy report", cmd_convert},
    {"check-ops", "which ops of a model spore supports, decomposes or lacks (with node names)", cmd_check_ops},
    {"run", "run a model on .npy inputs (or random ones), write one .npy per output", cmd_run},
    {"bench", "latency p50/p90/p99, throughput and peak memory of a model", cmd_bench},
    {"profile", "per-kernel timeline (Chrome trace), top-k op table, memory report and hints", cmd_profile},
    {"tokenize", "token ids of a text with an LLM's tokenizer (.gguf or Hugging Face folder)", cmd_tokenize},
    {"generate", "generate text with a decoder LLM (.gguf or Hugging Face folder): streaming, sampling, KV cache",
     cmd_generate},
    {"serve", "HTTP server: OpenAI API for LLMs, KServe v2 for tensor models, /health, /metrics (docs/SERVE.md)",
     cmd_serve},
};

// A data-parallel rank that fails ends the whole job (MPI_Abort) after printing its error, so the other ranks do not
// wait for it in their next collective until the timeout.
int fail(const char* command, const char* what) {
  parallel::Communicator* comm = parallel::started_world();
  if (comm != nullptr && comm->size() > 1) {
    std::fprintf(stderr, "spore %s: error: rank %d: %s\n", command, comm->rank(), what);
    std::fflush(stderr);
    comm->abort(1);
  }
  std::fprintf(stderr, "spore %s: error: %s\n", command, what);
  return 1;
}

class NullBuffer : public std::streambuf {
 protected:
  int overflow(int c) override { return c; }
};

void usage(FILE* f) {
  std::fprintf(f, "usage: spore <command> [options]\n\ncommands:\n");
  for (const auto& c : commands) std::fprintf(f, "  %-10s %s\n", c.name, c.summary);
  std::fprintf(f, "\nglobal options (any command, anywhere on the line):\n");
  std::fprintf(f, "  --custom-ops LIB  load a custom-op plugin (.so) first; repeatable; also --custom-ops=LIB\n");
  std::fprintf(f, "\nrun 'spore <command> --help' for a command's options\n");
}
}  // namespace

int main_dispatch(int argc, char** argv) {
  // The global `--custom-ops LIB` option is taken out before dispatch, so no command has to know it.
  std::vector<std::string> plugins;
  std::vector<char*> args{argv[0]};
  for (int i = 1; i < argc; ++i) {
    const char* a = argv[i];
    if (!std::strcmp(a, "--custom-ops") || !std::strncmp(a, "--custom-ops=", 13)) {
      const char* lib = a[12] == '=' ? a + 13 : (i + 1 < argc ? argv[++i] : nullptr);
      if (lib == nullptr || *lib == '\0') {
        std::fprintf(stderr, "spore: --custom-ops needs a plugin library path\n");
        return 2;
      }
      plugins.emplace_back(lib);
      continue;
    }
    args.push_back(argv[i]);
  }
  argc = static_cast<int>(args.size());
  args.push_back(nullptr);
  argv = args.data();
  if (argc < 2 || !std::strcmp(argv[1], "--help") || !std::strcmp(argv[1], "-h") || !std::strcmp(argv[1], "help")) {
    usage(argc < 2 ? stderr : stdout);
    return argc < 2 ? 2 : 0;
  }
  if (!std::strcmp(argv[1], "--version")) argv[1] = const_cast<char*>("info");
  for (const auto& c : commands) {
    if (std::strcmp(argv[1], c.name) != 0) continue;
    try {
      for (const std::string& lib : plugins) load_custom_ops(lib);
      return c.run(argc - 1, argv + 1);
    } catch (const std::exception& e) {
      return fail(c.name, e.what());
    }
  }
  std::fprintf(stderr, "spore: unknown command '%s' (run 'spore --help' for the list)\n", argv[1]);
  return 2;
}

void start_data_parallel() {
  static NullBuffer null_buffer;
  if (parallel::world().rank() != 0) std::cout.rdbuf(&null_buffer);
}

// What to add to this rank's Profiler::now_ns() to read rank 0's clock: 8 ping-pongs with rank 0, the estimate of the
// one with the shortest round trip (its error is at most half that trip; a barrier's exit skew is unbounded when a
// rank is descheduled right after it, which made merged traces disagree by milliseconds under load). Rank 0: 0.
namespace {

int64_t offset_to_rank0(parallel::Communicator& c) {
  constexpr int kTag = 7, kRounds = 8;
  int64_t best_trip = -1, best = 0;
  for (int peer = 1; peer < c.size(); ++peer)
    for (int i = 0; i < kRounds; ++i) {
      if (c.rank() == 0) {
        int64_t ping = 0;
        c.recv(&ping, sizeof ping, peer, kTag);
        const int64_t t0 = Profiler::now_ns();
        c.send(&t0, sizeof t0, peer, kTag);
      } else if (c.rank() == peer) {
        const int64_t a = Profiler::now_ns();
        c.send(&a, sizeof a, 0, kTag);
        int64_t t0 = 0;
        c.recv(&t0, sizeof t0, 0, kTag);
        const int64_t b = Profiler::now_ns();
        if (best_trip < 0 || b - a < best_trip) {
          best_trip = b - a;
          best = t0 - (a + (b - a) / 2);
        }
      }
    }
  return best;
}

}  // namespace

std::string profile_per_rank(Profiler& prof, const std::string& path, parallel::Communicator& c) {
  std::filesystem::path p(path);
  const std::string ext = p.extension().string();
  const int rank = c.rank();
  // Mergeable: each rank is its own process (pid rank + 1) and all count time from one instant of rank 0's clock,
  // each rank's clock mapped onto rank 0's (offset_to_rank0).
  prof.set_process(rank + 1, fmt::format("spore rank {}", rank));
  const int64_t offset = offset_to_rank0(c);
  int64_t origin0 = Profiler::now_ns();  // rank 0's
  c.broadcast(&origin0, sizeof origin0, 0);
  prof.set_origin_ns(origin0 - offset);
  return p.replace_extension(fmt::format(".rank{}{}", rank, ext)).string();
}

nlohmann::json comm_stats_json() {
  nlohmann::json j = nlohmann::json::object();
  if (const parallel::Communicator* comm = parallel::started_world())
    for (const auto& [op, st] : comm->stats())
      j[op] = {{"calls", st.calls},
               {"bytes", st.bytes},
               {"seconds", st.seconds},
               {"wait_seconds", st.wait_seconds},
               {"gbps", st.seconds > 0 ? static_cast<double>(st.bytes) / st.seconds / 1e9 : 0.0}};
  return j;
}

std::string comm_stats_text() {
  const parallel::Communicator* comm = parallel::started_world();
  if (comm == nullptr) return {};
  std::string line;
  for (const auto& [op, st] : comm->stats())
    line += fmt::format("{}{} {} calls, {:.2f} MB, {:.3f} s ({:.3f} s blocked on peers)", line.empty() ? "" : "; ", op,
                        st.calls, static_cast<double>(st.bytes) / 1e6, st.seconds, st.wait_seconds);
  return fmt::format("communication (rank {} of {}, waiting included): {}", comm->rank(), comm->size(),
                     line.empty() ? "none" : line);
}

}  // namespace spore::cli
