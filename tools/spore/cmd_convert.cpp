// spore convert: Ascend ATC for spore. A model file (.spore / .onnx) -> a deployable .spore (or .onnx) in a
// precision mode and/or quantized, with a report of what the conversion changed and what it cost. The conversion
// itself is deploy::convert_model (src/deploy/convert.h), which Python's spore.convert runs too; this file parses
// the options, resolves dataset specs (the train layer's) and prints the report.
#include <filesystem>
#include <iostream>
#include <map>
#include <string>
#include <vector>

#include <CLI/CLI.hpp>
#include <fmt/format.h>

#include <spore/spore.h>

#include "deploy/convert.h"
#include "tools/spore/commands.h"
#include "train/models.h"

namespace spore::cli {
namespace {

std::string human_bytes(int64_t b) {
  if (b >= (1 << 20)) return fmt::format("{:.2f} MiB", b / 1048576.0);
  if (b >= (1 << 10)) return fmt::format("{:.1f} KiB", b / 1024.0);
  return fmt::format("{} B", b);
}

}  // namespace

int cmd_convert(int argc, char** argv) {
  CLI::App app("spore convert: model file -> .spore in a precision mode / quantized, with an accuracy report",
               "spore convert");
  std::string in, out, precision = "force_fp32", mix_dtype = "f16", quantize = "none", calib_data, calib_method = "minmax",
                       eval_data;
  std::vector<std::string> input_shapes;
  int64_t calib_samples = 256;
  int optimize_level = 1, threads = 0;
  float input_scale = 1.f;
  bool json = false;
  app.add_option("model", in, "input model (.spore or .onnx)")->required();
  app.add_option("-o,--output", out, "output model file (OUT.spore, or OUT.onnx)")->required();
  app.add_option("--input-shape", input_shapes, "NAME:D0,D1,... (repeatable; a symbol keeps a dim dynamic, -1 keeps it)")
      ->allow_extra_args(false);  // one value per --input-shape: the model path may follow
  app.add_option("--precision-mode", precision,
                 "force_fp32 | allow_fp32_to_fp16 | allow_fp32_to_bf16 | allow_mix_precision (default force_fp32)");
  app.add_option("--mix-dtype", mix_dtype, "low dtype of allow_mix_precision: f16 | bf16 (default f16)");
  app.add_option("--quantize", quantize, "none | weight_int8 | int8 (static; needs --calib-data)");
  app.add_option("--calib-data", calib_data,
                 "mnist:DIR | fashion-mnist:DIR | digits:FILE (training split) | DIR of .npy files (input 0)");
  app.add_option("--calib-samples", calib_samples, "calibration samples (default 256)")->check(CLI::PositiveNumber);
  app.add_option("--calib-method", calib_method, "minmax | percentile | entropy (default minmax)");
  int act_bits = 8;
  app.add_option("--act-bits", act_bits,
                 "int8: activation code bits, 8 (default; fast on CPUs with VNNI) or 7 (for CPUs without VNNI, whose "
                 "int8 kernels saturate on 8-bit codes)");
  app.add_option("--eval-data", eval_data, "classifier accuracy before/after on a dataset's test split: mnist:DIR | ...");
  app.add_option("--input-scale", input_scale, "multiply dataset pixels by this (255 for models trained on raw pixels)");
  app.add_option("--optimize-level", optimize_level, "0: none, 1: dce + cse + fold (default), 2: the same for now");
  app.add_option("--threads", threads, "thread count (default: all cores)")->check(CLI::NonNegativeNumber);
  app.add_flag("--json", json, "print the report as one JSON object");
  try {
    app.parse(argc, argv);
  } catch (const CLI::CallForHelp& e) {
    return app.exit(e);
  } catch (const CLI::ParseError& e) {
    std::fprintf(stderr, "spore convert: error: %s\n", e.what());
    return 2;
  }

  set_threads(threads);

  deploy::ConvertOptions o;
  o.input = in;
  o.output = out;
  o.input_shapes = input_shapes;
  o.precision_mode = precision;
  o.mix_dtype = mix_dtype;
  o.quantize = quantize;
  o.calib_data = calib_data;
  o.calib_samples = calib_samples;
  o.calib_method = calib_method;
  o.act_bits = act_bits;
  o.eval_data = eval_data;
  o.input_scale = input_scale;
  o.optimize_level = optimize_level;
  o.load_dataset = [](const std::string& spec, int64_t limit_train, int64_t limit_test) {
    train::TrainTestSplit split = train::load_dataset_spec(spec, limit_train, limit_test);
    return deploy::DatasetTensors{split.train.x, split.test.x, split.test.y};
  };
  o.on_note = [](const std::string& note) { fmt::print(stderr, "spore convert: note: {}\n", note); };
  const deploy::ConvertReport r = deploy::convert_model(o);
  if (json) {
    std::cout << r.to_json() << std::endl;
    return 0;
  }

  const std::string ext = std::filesystem::path(r.output).extension().string();
  std::string s = fmt::format("converted {} -> {} ({}{}, quantize {}, optimize-level {})\n", r.input, r.output,
                              r.precision_mode, r.mix_dtype.empty() ? std::string() : " " + r.mix_dtype, r.quantize,
                              r.optimize_level);
  s += fmt::format("  {:<14}{:>8}{:>8}\n", "ops per dtype", "before", "after");
  std::map<std::string, int> keys;
  const auto& before = r.ops_per_dtype_before;
  const auto& after = r.ops_per_dtype_after;
  for (const auto& [k, v] : before) keys[k] = 0;
  for (const auto& [k, v] : after) keys[k] = 0;
  for (const auto& [k, v] : keys) {
    const auto b = before.find(k), a = after.find(k);
    s += fmt::format("  {:<14}{:>8}{:>8}\n", k, b == before.end() ? 0 : b->second, a == after.end() ? 0 : a->second);
  }
  s += fmt::format("  casts inserted: {}\n", r.casts_inserted);
  if (!r.kept_f32.empty()) {
    s += fmt::format("  kept f32 ({}):\n", r.kept_f32.size());
    for (const std::string& k : r.kept_f32) s += "    " + k + "\n";
  }
  if (r.quantize != "none") {
    s += fmt::format("  weights quantized: {}, ops running int8: {}\n", r.weights_quantized, r.ops_quantized);
    for (const std::string& k : r.quantize_skipped) s += "    left in float: " + k + "\n";
  }
  s += fmt::format("  model size: {} (source as {}) -> {} ({:.2f}x)\n", human_bytes(r.size_before_bytes), ext.substr(1),
                   human_bytes(r.size_after_bytes), r.size_ratio);
  s += fmt::format("  vs the source model on {} samples of {} (max rel error = max abs error / max |source output|):\n",
                   r.compare_samples, r.compare_inputs);
  s += fmt::format("    {:<16}{:>14}{:>14}{:>12}\n", "output", "max abs err", "max rel err", "cosine");
  for (const deploy::OutputError& d : r.outputs)
    s += fmt::format("    {:<16}{:>14.3e}{:>14.3e}{:>12.6f}\n", d.name, d.max_abs_error, d.max_rel_error, d.cosine);
  if (r.has_accuracy)
    s += fmt::format("  accuracy on {} ({} test samples): source {:.4f}, converted {:.4f}, delta {:+.2f} points\n",
                     r.eval_data, r.eval_samples, r.accuracy_f32, r.accuracy_converted,
                     r.accuracy_delta_points());
  std::cout << s;
  return 0;
}

}  // namespace spore::cli
