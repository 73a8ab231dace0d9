// Throughput and latency of the serving engine (llm/engine.h) without HTTP: closed-loop clients, each sending its
// next request when the previous one finishes, at several concurrencies. Prints aggregate generated tokens/s, TTFT
// and inter-token latency percentiles per concurrency, and (--json) one object per line.
//
//   build/bench/llm_engine_bench MODEL.gguf --clients 1,4,16 --parallel 4 --prompt 64 --gen 32 --requests 2
//
// Prompts are distinct per request (no prefix-cache hits unless --shared-prefix N gives them N common tokens).
// --json-object constrains every request to a JSON object (the cost of token masking).
#include <algorithm>
#include <chrono>
#include <condition_variable>
#include <cstdio>
#include <cstring>
#include <mutex>
#include <sstream>
#include <string>
#include <thread>
#include <vector>

#include "llm/engine.h"
#include "llm/json_constraint.h"
#include "llm/model.h"
#include "runtime/runtime.h"

namespace {

using clk = std::chrono::steady_clock;

std::vector<int64_t> parse_list(const std::string& s) {
  std::vector<int64_t> v;
  std::stringstream ss(s);
  std::string x;
  while (std::getline(ss, x, ',')) v.push_back(std::stoll(x));
  return v;
}

double pct(std::vector<double> v, double p) {
  if (v.empty()) return 0;
  std::sort(v.begin(), v.end());
  const auto i = static_cast<size_t>(p / 100.0 * static_cast<double>(v.size() - 1) + 0.5);
  return v[std::min(i, v.size() - 1)];
}

}  // namespace

int main(int argc, char** argv) {
  using namespace spore;
  if (argc < 2) {
    std::fprintf(stderr,
                 "usage: llm_engine_bench MODEL [--clients 1,4,16] [--parallel N] [--prompt N] [--gen N] "
                 "[--requests R per client] [--threads T] [--kv-type f16] [--step-tokens N] [--shared-prefix N] "
                 "[--json-object] [--json]\n");
    return 2;
  }
  std::string model = argv[1], kv = "f16";
  std::vector<int64_t> clients{1, 4, 16};
  int64_t parallel = 4, prompt = 64, gen = 32, requests = 2, threads = 2, step = 128, shared = 0;
  bool json = false, json_object = false;
  for (int i = 2; i < argc; ++i) {
    const std::string a = argv[i];
    const auto next = [&]() -> std::string {
      if (i + 1 >= argc) {
        std::fprintf(stderr, "%s needs a value\n", a.c_str());
        std::exit(2);
      }
      return argv[++i];
    };
    if (a == "--clients") clients = parse_list(next());
    else if (a == "--parallel") parallel = std::stoll(next());
    else if (a == "--prompt") prompt = std::stoll(next());
    else if (a == "--gen") gen = std::stoll(next());
    else if (a == "--requests") requests = std::stoll(next());
    else if (a == "--threads") threads = std::stoll(next());
    else if (a == "--kv-type") kv = next();
    else if (a == "--step-tokens") step = std::stoll(next());
    else if (a == "--shared-prefix") shared = std::stoll(next());
    else if (a == "--json") json = true;
    else if (a == "--json-object") json_object = true;
    else {
      std::fprintf(stderr, "unknown option %s\n", a.c_str());
      return 2;
    }
  }
  try {
    init();
    set_threads(static_cast<int>(threads));
    const auto t_load = clk::now();
    const llm::Model m = llm::Model::load(model);
    llm::EngineOptions eo;
    eo.slots = parallel;
    eo.ctx = std::max<int64_t>(256, prompt + gen + 16);
    eo.kv_dtype = parse_dtype(kv).value_or(DType::f16);
    eo.step_tokens = step;
    eo.max_queue = 1024;
    eo.max_queued_tokens = 1 << 30;
    llm::Engine e(m, eo);
    e.wait_ready();
    const double load_ms = std::chrono::duration<double, std::milli>(clk::now() - t_load).count();
    if (!json)
      std::printf("model %s, %lld slots, ctx %lld, %lld threads, kv %s: load + warm-up %.0f ms (warm-up %.0f ms)\n",
                  model.c_str(), static_cast<long long>(parallel), static_cast<long long>(eo.ctx),
                  static_cast<long long>(threads), kv.c_str(), load_ms, e.startup_ms());
    const int64_t V = m.config().n_vocab;
    uint64_t salt = 1;
    for (int64_t c : clients) {
      std::mutex mu;
      std::vector<double> ttft, itl, e2e;
      int64_t tokens = 0;
      const auto t0 = clk::now();
      std::vector<std::thread> th;
      for (int64_t ci = 0; ci < c; ++ci)
        th.emplace_back([&, ci, base = salt + static_cast<uint64_t>(ci) * 1000] {
          for (int64_t r = 0; r < requests; ++r) {
            llm::Request q;
            for (int64_t i = 0; i < prompt; ++i) {
              const uint64_t x = i < shared ? static_cast<uint64_t>(i) : base + static_cast<uint64_t>(r * 7919 + i * 31);
              q.prompt.push_back(static_cast<int32_t>((x * 2654435761u) % static_cast<uint64_t>(V)));
            }
            q.max_tokens = gen;
            q.ignore_eos = true;
            if (json_object) q.json = llm::JsonConstraint::any_object();
            std::mutex wm;
            std::condition_variable cv;
            bool done = false;
            clk::time_point last{};
            std::vector<double> gaps;
            llm::Event fin;
            q.on_event = [&](const llm::Event& ev) {
              std::lock_guard<std::mutex> lk(wm);
              const auto now = clk::now();
              if (ev.kind == llm::Event::Kind::token) {
                if (last != clk::time_point{}) gaps.push_back(std::chrono::duration<double, std::milli>(now - last).count());
                last = now;
              } else {
                fin = ev;
                done = true;
                cv.notify_all();
              }
            };
            e.submit(std::move(q));
            std::unique_lock<std::mutex> lk(wm);
            cv.wait(lk, [&] { return done; });
            std::lock_guard<std::mutex> g(mu);
            ttft.push_back(fin.ttft_ms);
            e2e.push_back(fin.total_ms);
            itl.insert(itl.end(), gaps.begin(), gaps.end());
            tokens += fin.completion_tokens;
          }
          (void)ci;
        });
      for (auto& t : th) t.join();
      salt += 1000003;
      const double wall = std::chrono::duration<double>(clk::now() - t0).count();
      const double tps = static_cast<double>(tokens) / wall;
      if (json)
        std::printf("{\"clients\": %lld, \"parallel\": %lld, \"requests\": %zu, \"tok_s\": %.2f, \"ttft_p50_ms\": %.1f, "
                    "\"ttft_p99_ms\": %.1f, \"itl_p50_ms\": %.2f, \"itl_p99_ms\": %.2f, \"e2e_p50_ms\": %.1f}\n",
                    static_cast<long long>(c), static_cast<long long>(parallel), e2e.size(), tps, pct(ttft, 50),
                    pct(ttft, 99), pct(itl, 50), pct(itl, 99), pct(e2e, 50));
      else
        std::printf("clients %3lld: %6.1f tok/s  TTFT p50 %7.1f p99 %7.1f ms  ITL p50 %6.2f p99 %6.2f ms  (%zu requests)\n",
                    static_cast<long long>(c), tps, pct(ttft, 50), pct(ttft, 99), pct(itl, 50), pct(itl, 99),
                    e2e.size());
      if (!json) {
        const llm::EngineStats st = e.stats();
        std::printf("             engine: %lld steps so far, batch sizes", static_cast<long long>(st.steps));
        for (int64_t b : st.batch_hist) std::printf(" %lld", static_cast<long long>(b));
        std::printf(" (1, 2, 3-4, 5-8, 9-16, 17-32, 33+), prefix-cache hits %lld of %lld prompt tokens\n",
                    static_cast<long long>(st.prefix_cache_hits), static_cast<long long>(st.prefix_cache_queries));
      }
      std::fflush(stdout);
    }
  } catch (const std::exception& x) {
    std::fprintf(stderr, "llm_engine_bench: %s\n", x.what());
    return 1;
  }
  return 0;
}
