// spore plan-parallel: the data x pipeline x tensor parallel cost model and search for the decoder LM
// (train::plan_parallel, train/parallel_plan.h). This file reads the model's configuration, parses options and prints.
#include <cmath>
#include <cstring>
#include <filesystem>
#include <iostream>

#include <CLI/CLI.hpp>
#include <fmt/format.h>
#include <nlohmann/json.hpp>

#include <spore/spore.h>

#include "base/error.h"
#include "io/file_util.h"
#include "io/gguf/gguf.h"
#include "tools/spore/commands.h"
#include "train/parallel_plan.h"

namespace spore::cli {
namespace {
namespace fs = std::filesystem;

// "80G", "80GB", "16GiB", "12.5e9", "10G/s": bytes (decimal K/M/G/T, binary Ki/Mi/Gi/Ti).
double parse_size(std::string s, const char* what) {
  if (s.size() > 2 && s.substr(s.size() - 2) == "/s") s.resize(s.size() - 2);
  if (!s.empty() && (s.back() == 'B' || s.back() == 'b')) s.pop_back();
  double mult = 1;
  bool binary = !s.empty() && s.back() == 'i';
  if (binary) s.pop_back();
  if (!s.empty() && std::string("KMGT").find(static_cast<char>(std::toupper(s.back()))) != std::string::npos) {
    const int k = static_cast<int>(std::string("KMGT").find(static_cast<char>(std::toupper(s.back())))) + 1;
    mult = std::pow(binary ? 1024.0 : 1000.0, k);
    s.pop_back();
  }
  size_t used = 0;
  double v = 0;
  try {
    v = std::stod(s, &used);
  } catch (const std::exception&) {
    used = 0;
  }
  SPORE_CHECK(used == s.size() && used > 0 && v >= 0, ErrorCode::invalid_argument,
              "{}: '{}' is not a size such as 80G, 16GiB or 12.5e9", what, s);
  return v * mult;
}

// "5us", "2ms", "1e-5", "0.3s": seconds.
double parse_seconds(std::string s) {
  double mult = 1;
  for (const auto& [suffix, m] : {std::pair{"us", 1e-6}, {"ms", 1e-3}, {"ns", 1e-9}, {"s", 1.0}})
    if (s.size() > std::strlen(suffix) && s.substr(s.size() - std::strlen(suffix)) == suffix) {
      s.resize(s.size() - std::strlen(suffix));
      mult = m;
      break;
    }
  size_t used = 0;
  double v = 0;
  try {
    v = std::stod(s, &used);
  } catch (const std::exception&) {
    used = 0;
  }
  SPORE_CHECK(used == s.size() && used > 0 && v >= 0, ErrorCode::invalid_argument,
              "'{}' is not a time such as 5us, 0.2ms or 1e-5", s);
  return v * mult;
}

// The model: a GGUF (its llama/qwen2 metadata), a Hugging Face config.json (or its folder), or an inline
// "dim=256,layers=4,heads=4,kv_heads=2,ffn=688,vocab=512,ctx=64[,arch=qwen2]".
nn::LlamaConfig read_model(const std::string& spec) {
  nn::LlamaConfig c;
  if (spec.find('=') != std::string::npos && !fs::exists(spec)) {
    size_t at = 0;
    while (at <= spec.size()) {
      const size_t end = std::min(spec.find(',', at), spec.size());
      const std::string kv = spec.substr(at, end - at);
      at = end + 1;
      const size_t eq = kv.find('=');
      SPORE_CHECK(eq != std::string::npos, ErrorCode::invalid_argument, "model spec: '{}' is not key=value", kv);
      const std::string k = kv.substr(0, eq), v = kv.substr(eq + 1);
      if (k == "arch") {
        c.arch = v;
        continue;
      }
      int64_t* field = k == "dim"        ? &c.dim
                       : k == "layers"   ? &c.layers
                       : k == "heads"    ? &c.heads
                       : k == "kv_heads" ? &c.kv_heads
                       : k == "ffn"      ? &c.ffn
                       : k == "vocab"    ? &c.vocab
                       : k == "ctx"      ? &c.ctx
                                         : nullptr;
      SPORE_CHECK(field != nullptr, ErrorCode::invalid_argument,
                  "model spec: unknown key '{}' (dim, layers, heads, kv_heads, ffn, vocab, ctx, arch)", k);
      *field = std::stoll(v);
    }
    if (c.kv_heads == 0) c.kv_heads = c.heads;
  } else if (fs::is_regular_file(spec) && fs::path(spec).extension() == ".gguf") {
    const io::GgufFile f = io::GgufFile::open(spec);
    c.arch = f.get_string("general.architecture");
    const std::string a = c.arch + ".";
    c.dim = f.get_int(a + "embedding_length");
    c.layers = f.get_int(a + "block_count");
    c.heads = f.get_int(a + "attention.head_count");
    c.kv_heads = f.get_int_or(a + "attention.head_count_kv", c.heads);
    c.ffn = f.get_int(a + "feed_forward_length");
    c.ctx = f.get_int(a + "context_length");
    c.vocab = f.get_int_or(a + "vocab_size", 0);
    if (c.vocab == 0) c.vocab = static_cast<int64_t>(f.get_strings("tokenizer.ggml.tokens").size());
  } else {
    const fs::path p = fs::is_directory(spec) ? fs::path(spec) / "config.json" : fs::path(spec);
    SPORE_CHECK(fs::is_regular_file(p), ErrorCode::not_found,
                "model '{}' is not a GGUF, a config.json (or its folder) or a dim=...,layers=... spec", spec);
    const nlohmann::json j = nlohmann::json::parse(io::read_file_bytes(p.string()));
    c.arch = j.value("model_type", "llama") == "qwen2" ? "qwen2" : "llama";
    c.dim = j.at("hidden_size");
    c.layers = j.at("num_hidden_layers");
    c.heads = j.at("num_attention_heads");
    c.kv_heads = j.value("num_key_value_heads", c.heads);
    c.ffn = j.at("intermediate_size");
    c.vocab = j.at("vocab_size");
    c.ctx = j.value("max_position_embeddings", int64_t{2048});
    c.tie_embeddings = j.value("tie_word_embeddings", false);
  }
  c.validate();
  return c;
}

nlohmann::json to_json(const train::Strategy& s) {
  return {{"dp", s.dp},
          {"pp", s.pp},
          {"tp", s.tp},
          {"micro_batches", s.micro},
          {"micro_batch", s.micro_batch},
          {"step_s", s.step_s},
          {"compute_s", s.compute_s},
          {"bubble_s", s.bubble_s},
          {"update_s", s.update_s},
          {"ops_per_step", s.ops},
          {"tp_comm_s", s.tp_comm_s},
          {"pp_comm_s", s.pp_comm_s},
          {"dp_comm_s", s.dp_comm_s},
          {"memory_bytes", s.memory_bytes},
          {"param_bytes", s.param_bytes},
          {"activation_bytes", s.activation_bytes},
          {"fits", s.fits}};
}

std::string human_bytes(double b) {
  return b >= 1e9 ? fmt::format("{:.2f} GB", b / 1e9) : fmt::format("{:.1f} MB", b / 1e6);
}
std::string human_s(double s) {
  return s >= 1      ? fmt::format("{:.3f} s", s)
         : s >= 1e-3 ? fmt::format("{:.2f} ms", s * 1e3)
                     : fmt::format("{:.1f} us", s * 1e6);
}

}  // namespace

int cmd_plan_parallel(int argc, char** argv) {
  CLI::App app(
      "spore plan-parallel: search data x pipeline x tensor parallelism (and micro-batches) for training a decoder "
      "LM on N devices with a cost model (op FLOPs, alpha-beta collectives, memory per device); prints the chosen "
      "strategy, its predicted step time and memory, and the best alternatives",
      "spore plan-parallel");
  std::string model, mem = "0", bandwidth, latency = "5us", flops_rate;
  train::PlanInput in;
  train::ClusterSpec c;
  double tokens_per_s = 0;
  int64_t top = 5;
  std::string strategy;
  bool json = false;
  app.add_option("model", model,
                 "the model: a GGUF, a Hugging Face config.json (or folder), or "
                 "dim=..,layers=..,heads=..,kv_heads=..,ffn=..,vocab=..,ctx=..")
      ->required();
  app.add_option("--devices", c.devices, "device (rank) count N")->required()->check(CLI::PositiveNumber);
  app.add_option("--mem-per-device", mem, "memory per device, bytes (80G, 16GiB; 0: unlimited)");
  app.add_option("--bandwidth", bandwidth,
                 "collective bandwidth per device, bytes/s (bus bandwidth as bench/allreduce_bench reports it; 25G)")
      ->required();
  app.add_option("--latency", latency, "per-message latency (5us, 0.2ms; default 5us)");
  app.add_option("--global-batch", in.global_batch, "sequences per optimizer step (default: 8 per device)")
      ->check(CLI::PositiveNumber);
  app.add_option("--ctx", in.ctx, "tokens per sequence (default: the model's context)")->check(CLI::PositiveNumber);
  auto* fr = app.add_option("--flops-per-s", flops_rate, "achieved training FLOP rate of one device (300T, 1.2e11)");
  auto* tps = app.add_option("--tokens-per-s", tokens_per_s,
                             "or: one device's measured training throughput on this model (tokens/s of `spore "
                             "train-lm` in one process), turned into a FLOP rate by the model's FLOPs per token")
                  ->check(CLI::PositiveNumber);
  fr->excludes(tps);
  std::string overhead = "0";
  app.add_option("--op-overhead", overhead,
                 "time each op costs beyond its FLOPs (eager dispatch on a CPU, a kernel launch on a GPU: 5us)");
  app.add_option("--shared-cores", c.shared_cores,
                 "the devices are processes sharing this many cores (validation on one host): a step takes at least "
                 "all devices' work spread over them (a fraction: the cores the host really gives, measured)")
      ->check(CLI::NonNegativeNumber);
  app.add_option("--strategy", strategy, "predict this one instead of searching: dp,pp,tp,micro_batches");
  app.add_option("--top", top, "alternatives to print")->check(CLI::NonNegativeNumber);
  app.add_flag("--json", json, "one JSON object: model, flops, chosen, alternatives");
  try {
    app.parse(argc, argv);
  } catch (const CLI::ParseError& e) {
    return app.exit(e);
  }
  in.model = read_model(model);
  if (in.ctx == 0) in.ctx = in.model.ctx;
  if (in.global_batch == 0) in.global_batch = 8 * c.devices;
  c.mem_per_device = parse_size(mem, "--mem-per-device");
  c.bandwidth = parse_size(bandwidth, "--bandwidth");
  c.latency = parse_seconds(latency);
  c.op_overhead = parse_seconds(overhead);
  const train::LmFlops flops = train::count_lm_flops(in.model, in.ctx);
  const double per_token = static_cast<double>(in.model.layers) * flops.block + flops.head;
  SPORE_CHECK(!flops_rate.empty() || tokens_per_s > 0, ErrorCode::invalid_argument,
              "give the device's speed: --flops-per-s R or --tokens-per-s X (measured in one process)");
  c.flops_per_s = tokens_per_s > 0 ? tokens_per_s * per_token : parse_size(flops_rate, "--flops-per-s");

  std::vector<train::Strategy> plans;
  if (!strategy.empty()) {
    int64_t v[4] = {0, 0, 0, 0};
    SPORE_CHECK(std::sscanf(strategy.c_str(), "%ld,%ld,%ld,%ld", &v[0], &v[1], &v[2], &v[3]) == 4 && v[0] > 0 &&
                    v[1] > 0 && v[2] > 0 && v[3] > 0 && v[0] * v[1] * v[2] == c.devices &&
                    in.global_batch % (v[0] * v[3]) == 0,
                ErrorCode::invalid_argument,
                "--strategy '{}': expected dp,pp,tp,micro_batches with dp*pp*tp = {} devices and dp*micro dividing the "
                "global batch {}",
                strategy, c.devices, in.global_batch);
    plans.push_back(train::predict_strategy(in, c, flops, v[0], v[1], v[2], v[3]));
  } else {
    plans = train::plan_parallel(in, c, flops);
  }
  const train::Strategy& best = plans.front();
  const nn::LlamaConfig& m = in.model;
  if (json) {
    nlohmann::json alts = nlohmann::json::array();
    for (size_t i = 1; i < plans.size() && static_cast<int64_t>(i) <= top; ++i) alts.push_back(to_json(plans[i]));
    nlohmann::json j{{"model",
                      {{"arch", m.arch},
                       {"dim", m.dim},
                       {"layers", m.layers},
                       {"heads", m.heads},
                       {"kv_heads", m.kv_heads},
                       {"ffn", m.ffn},
                       {"vocab", m.vocab},
                       {"ctx", in.ctx}}},
                     {"devices", c.devices},
                     {"global_batch", in.global_batch},
                     {"flops",
                      {{"block_per_token", flops.block},
                       {"head_per_token", flops.head},
                       {"per_token", per_token},
                       {"source", flops.source}}},
                     {"ops",
                      {{"block", flops.block_ops},
                       {"head", flops.head_ops},
                       {"block_tensors", flops.block_tensors},
                       {"head_tensors", flops.head_tensors},
                       {"update_per_tensor", flops.update_ops_per_tensor},
                       {"update_shared", flops.update_ops_shared}}},
                     {"op_overhead_s", c.op_overhead},
                     {"flops_per_s", c.flops_per_s},
                     {"candidates", plans.size()},
                     {"chosen", to_json(best)},
                     {"alternatives", alts}};
    std::cout << j.dump() << std::endl;
    return 0;
  }
  std::cout << fmt::format(
      "model: {} dim {} layers {} heads {}/{} ffn {} vocab {}, ctx {}; {:.3g} training GFLOP per token ({}); global "
      "batch {} sequences\ncluster: {} devices, {} each, {}/s, {} latency, {:.3g} GFLOP/s per device{}\n",
      m.arch, m.dim, m.layers, m.heads, m.kv_heads, m.ffn, m.vocab, in.ctx, per_token / 1e9, flops.source,
      in.global_batch, c.devices, c.mem_per_device > 0 ? human_bytes(c.mem_per_device) : "unlimited",
      human_bytes(c.bandwidth), human_s(c.latency), c.flops_per_s / 1e9,
      c.shared_cores > 0 ? fmt::format(" (sharing {:.2f} cores)", c.shared_cores) : "");
  std::cout << fmt::format(
      "chosen: {}: step {} (compute {}, bubble {}, update {}, comm tp {} / pp {} / dp {}), memory {} per "
      "device{}\n",
      best.describe(), human_s(best.step_s), human_s(best.compute_s), human_s(best.bubble_s), human_s(best.update_s),
      human_s(best.tp_comm_s),
      human_s(best.pp_comm_s), human_s(best.dp_comm_s), human_bytes(best.memory_bytes),
      best.fits ? "" : " - DOES NOT FIT");
  if (plans.size() > 1 && top > 0) {
    std::cout << fmt::format("{:<40} {:>11} {:>11} {:>11} {:>11} {:>11}\n", "alternatives", "step", "compute",
                             "comm", "memory", "fits");
    for (size_t i = 1; i < plans.size() && static_cast<int64_t>(i) <= top; ++i) {
      const train::Strategy& s = plans[i];
      std::cout << fmt::format("{:<40} {:>11} {:>11} {:>11} {:>11} {:>11}\n", s.describe(), human_s(s.step_s),
                               human_s(s.compute_s + s.bubble_s + s.update_s), human_s(s.tp_comm_s + s.pp_comm_s + s.dp_comm_s),
                               human_bytes(s.memory_bytes), s.fits ? "yes" : "no");
    }
  }
  return 0;
}

}  // namespace spore::cli
