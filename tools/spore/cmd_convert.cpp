// spore convert: Ascend ATC for spore. A model file (.spore / .onnx) -> a deployable .spore (or .onnx) in a
// precision mode and/or quantized, with a report of what the conversion changed and what it cost:
//   load (--input-shape applied) -> optimize (--optimize-level) -> keep the f32 graph -> quantize (weight_int8, or
//   calibrate + static int8) -> precision mode -> save (metadata: precision_mode, quantize, source)
//   -> report: ops per dtype, casts, ops kept f32, weights quantized, file size f32 vs converted, and the converted
//   model's outputs against the f32 model's on the calibration / eval / seeded random inputs (max abs error, max
//   rel error = max abs error / max |f32 output| of that output, cosine similarity), plus classifier accuracy of
//   both with --eval-data.
// Quantization runs before the precision mode: the int8 passes see f32 weights, and the precision pass leaves
// the dequantize / int8 nodes (not float ops) alone while casting what they feed.
#include <algorithm>
#include <cmath>
#include <filesystem>
#include <iostream>
#include <map>

#include <unistd.h>

#include <CLI/CLI.hpp>
#include <fmt/format.h>
#include <nlohmann/json.hpp>

#include <spore/spore.h>

#include "base/rng.h"
#include "deploy/session.h"
#include "io/model_file.h"
#include "io/npy.h"
#include "ops/graph_ops.h"
#include "ops/ops.h"
#include "passes/pass.h"
#include "passes/precision.h"
#include "passes/quantize.h"
#include "runtime/calibrate.h"
#include "tools/spore/commands.h"
#include "tools/spore/model_util.h"
#include "train/models.h"

namespace spore::cli {
namespace {

namespace fs = std::filesystem;

bool is_dataset_spec(const std::string& s) {
  for (const char* p : {"mnist:", "fashion-mnist:", "digits:"})
    if (s.rfind(p, 0) == 0) return true;
  return false;
}

// Exports that compute shapes from their batch dim (Shape -> Gather -> Reshape: shufflenet, ViT, torchvision's
// segmentation heads) import only with that dim fixed. With a .npy calibration directory and no --input-shape, input
// 0's dims are taken from its first file (a sample without a batch dim gets batch 1); "" when not applicable.
std::string input_shape_from_npy_dir(const std::string& model, const std::string& dir) {
  if (dir.empty() || is_dataset_spec(dir) || !fs::is_directory(dir)) return "";
  std::vector<std::string> files;
  for (const auto& e : fs::directory_iterator(dir))
    if (e.path().extension() == ".npy") files.push_back(e.path().string());
  if (files.empty()) return "";
  std::sort(files.begin(), files.end());
  const Tensor first = io::read_npy(files.front());
  const deploy::Session session(model);
  const deploy::SessionInput& in = session.inputs().at(0);
  Shape shape = first.shape();
  if (static_cast<int>(shape.size()) + 1 == in.type.rank()) shape.insert(shape.begin(), 1);
  if (static_cast<int>(shape.size()) != in.type.rank()) return "";
  std::string spec = in.name + ":";
  for (size_t d = 0; d < shape.size(); ++d) spec += (d ? "," : "") + std::to_string(shape[d]);
  return spec;
}

// Cuts `x` ([N, ...] samples for input 0) into batches the model accepts: its static batch size, else `batch`.
// With a static batch an incomplete tail is dropped (padding would skew calibration), unless it is all there is.
std::vector<Tensor> to_batches(const Tensor& x, const Graph& g, int64_t batch, const std::string& what) {
  const Value* in = g.inputs().at(0);
  const TensorType& t = in->type;
  SPORE_CHECK(x.rank() == t.rank(), ErrorCode::shape_mismatch, "{}: samples are {} but model input '{}' is {}", what,
              shape_str(x.shape()), in->name, t.str());
  for (int d = 1; d < t.rank(); ++d)
    SPORE_CHECK(!t.dims[d].is_static() || t.dims[d].size == x.dim(d), ErrorCode::shape_mismatch,
                "{}: samples are {} but model input '{}' is {}", what, shape_str(x.shape()), in->name, t.str());
  Tensor xs = x.dtype() == t.dtype ? x : ops::cast(x, t.dtype);
  const int64_t n = xs.dim(0);
  const bool fixed = t.dims[0].is_static();
  const int64_t b = fixed ? t.dims[0].size : batch;
  std::vector<Tensor> out;
  for (int64_t s = 0; s < n; s += b) {
    const int64_t e = std::min(n, s + b);
    if (fixed && e - s < b) {
      if (!out.empty()) break;
      Shape ps = xs.shape();
      ps[0] = b;
      Tensor padded = Tensor::zeros(ps, xs.dtype());
      copy_strided(xs.slice(0, s, e), padded.slice(0, 0, e - s));
      out.push_back(padded);
      break;
    }
    out.push_back(xs.slice(0, s, e).contiguous());
  }
  return out;
}

// Samples for input 0 from a SPEC: a labelled dataset (its training split: calibration must not see the test
// images) or a directory of .npy files, one per sample ([...] = the input without its batch dim) or per batch
// ([N, ...]), taken in name order. Pixels are multiplied by `scale` like spore eval's --input-scale.
Tensor load_samples(const std::string& spec, const Graph& g, int64_t max_samples, float scale, std::string* desc) {
  SPORE_CHECK(g.inputs().size() == 1, ErrorCode::invalid_argument,
              "--calib-data feeds input 0, but model '{}' has {} inputs", g.name(), g.inputs().size());
  const TensorType& t = g.inputs()[0]->type;
  Tensor x;
  if (is_dataset_spec(spec)) {
    const train::TrainTestSplit split = train::load_dataset_spec(spec, max_samples, 1);
    x = split.train.x;
    *desc = fmt::format("{} (training split)", spec);
  } else {
    SPORE_CHECK(fs::is_directory(spec), ErrorCode::invalid_argument,
                "--calib-data '{}': expected mnist:DIR, fashion-mnist:DIR, digits:FILE or a directory of .npy files",
                spec);
    std::vector<fs::path> files;
    for (const auto& e : fs::directory_iterator(spec))
      if (e.is_regular_file() && e.path().extension() == ".npy") files.push_back(e.path());
    std::sort(files.begin(), files.end());
    SPORE_CHECK(!files.empty(), ErrorCode::invalid_argument, "--calib-data '{}': the directory has no .npy files", spec);
    std::vector<Tensor> parts;
    int64_t n = 0;
    for (const fs::path& p : files) {
      if (n >= max_samples) break;
      Tensor a = io::read_npy(p.string());
      if (a.rank() == t.rank() - 1) a = ops::unsqueeze(a, {0});
      SPORE_CHECK(a.rank() == t.rank(), ErrorCode::shape_mismatch,
                  "--calib-data {}: {} is neither one sample nor a batch of input '{}' ({})", p.string(),
                  shape_str(a.shape()), g.inputs()[0]->name, t.str());
      if (a.dtype() != DType::f32) a = ops::cast(a, DType::f32);
      n += a.dim(0);
      parts.push_back(a.contiguous());
    }
    x = parts.size() == 1 ? parts[0] : ops::concat(parts, 0);
    *desc = fmt::format("{} ({} .npy files)", spec, parts.size());
  }
  if (x.dim(0) > max_samples) x = x.slice(0, 0, max_samples).contiguous();
  if (scale != 1.f) x = ops::mul(x, static_cast<double>(scale));
  return x;
}

// Seeded inputs in [0, 1) (image-like), one set per batch, every input of the model.
std::vector<std::vector<Tensor>> random_inputs(const Graph& g, int num_batches) {
  std::vector<std::vector<Tensor>> out;
  const std::vector<Shape> shapes = concrete_input_shapes(g, 8);
  for (int b = 0; b < num_batches; ++b) {
    std::vector<Tensor> ins;
    for (size_t i = 0; i < shapes.size(); ++i) {
      std::vector<double> v(static_cast<size_t>(shape_numel(shapes[i])));
      for (size_t k = 0; k < v.size(); ++k) v[k] = philox_uniform(2024, b * 64 + i, k);
      const DType dt = g.inputs()[i]->type.dtype;
      ins.push_back(Tensor::from_doubles(v, shapes[i], is_floating(dt) ? dt : DType::f32));
      if (!is_floating(dt)) ins.back() = Tensor::zeros(shapes[i], dt);  // ids/masks: zeros are always valid
    }
    out.push_back(std::move(ins));
  }
  return out;
}

struct OutputDiff {
  std::string name;
  double max_abs = 0, max_ref = 0, dot = 0, norm_a = 0, norm_b = 0;
  double max_rel() const { return max_ref > 0 ? max_abs / max_ref : (max_abs > 0 ? INFINITY : 0.0); }
  double cosine() const { return norm_a > 0 && norm_b > 0 ? dot / std::sqrt(norm_a * norm_b) : (norm_a == norm_b ? 1.0 : 0.0); }
};

// Runs both graphs on every batch (one plan per batch shape) and compares output by output.
std::vector<OutputDiff> compare(const Graph& ref, const Graph& conv, const std::vector<std::vector<Tensor>>& batches) {
  std::vector<OutputDiff> d(ref.outputs().size());
  for (size_t i = 0; i < d.size(); ++i) d[i].name = ref.outputs()[i]->name;
  std::map<std::vector<Shape>, std::pair<Plan, Plan>> plans;
  for (const auto& ins : batches) {
    std::vector<Shape> shapes;
    for (const Tensor& t : ins) shapes.push_back(t.shape());
    auto it = plans.find(shapes);
    if (it == plans.end())
      it = plans.emplace(shapes, std::make_pair(compile_for_shapes(ref, shapes), compile_for_shapes(conv, shapes))).first;
    const std::vector<Tensor> a = it->second.first.run(ins);
    const std::vector<Tensor> b = it->second.second.run(ins);
    for (size_t o = 0; o < d.size(); ++o) {
      const std::vector<double> x = a[o].to_doubles(), y = b[o].to_doubles();
      for (size_t k = 0; k < x.size(); ++k) {
        d[o].max_abs = std::max(d[o].max_abs, std::abs(y[k] - x[k]));
        d[o].max_ref = std::max(d[o].max_ref, std::abs(x[k]));
        d[o].dot += x[k] * y[k];
        d[o].norm_a += x[k] * x[k];
        d[o].norm_b += y[k] * y[k];
      }
    }
  }
  return d;
}

int64_t saved_size(const Graph& g, const std::string& like_path, const std::map<std::string, std::string>& meta) {
  // Saved in the output's container next to it, so "before" and "after" are the same kind of bytes.
  const fs::path out(like_path);
  const fs::path tmp =
      out.parent_path() / fmt::format(".{}.f32-{}{}", out.stem().string(), ::getpid(), out.extension().string());
  io::save_model(g, tmp.string(), meta);
  const int64_t n = static_cast<int64_t>(fs::file_size(tmp));
  fs::remove(tmp);
  return n;
}

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

  // Every option is checked before the model is loaded (one line each, via spore::Error).
  const PrecisionMode mode = parse_precision_mode(precision);
  SPORE_CHECK(mix_dtype == "f16" || mix_dtype == "bf16", ErrorCode::invalid_argument,
              "unknown --mix-dtype '{}' (choices: f16, bf16)", mix_dtype);
  const DType low = mix_dtype == "bf16" ? DType::bf16 : DType::f16;
  SPORE_CHECK(quantize == "none" || quantize == "weight_int8" || quantize == "int8", ErrorCode::invalid_argument,
              "unknown --quantize '{}' (choices: none, weight_int8, int8)", quantize);
  SPORE_CHECK(quantize != "int8" || !calib_data.empty(), ErrorCode::invalid_argument,
              "--quantize int8 needs calibration data: --calib-data mnist:DIR | fashion-mnist:DIR | digits:FILE | DIR");
  CalibOptions calib_opts;
  calib_opts.method = parse_calib_method(calib_method);
  SPORE_CHECK(act_bits == 7 || act_bits == 8, ErrorCode::invalid_argument, "--act-bits {}: expected 7 or 8", act_bits);
  SPORE_CHECK(optimize_level >= 0 && optimize_level <= 2, ErrorCode::invalid_argument,
              "--optimize-level {}: expected 0, 1 or 2", optimize_level);
  SPORE_CHECK(eval_data.empty() || is_dataset_spec(eval_data), ErrorCode::invalid_argument,
              "--eval-data '{}': expected mnist:DIR | fashion-mnist:DIR | digits:FILE", eval_data);
  const std::string ext = fs::path(out).extension().string();
  SPORE_CHECK(ext == ".spore" || ext == ".onnx", ErrorCode::invalid_argument,
              "-o {}: the output must end in .spore or .onnx", out);
  set_threads(threads);

  std::unique_ptr<Graph> g;
  std::string shape_fixed;  // input spec taken from the calibration data, when the model needed one
  try {
    g = load_model_file(in, parse_input_shapes(input_shapes));
  } catch (const Error& e) {
    if (!input_shapes.empty() || std::string(e.what()).find("symbolic dim") == std::string::npos) throw;
    shape_fixed = input_shape_from_npy_dir(in, calib_data);
    if (shape_fixed.empty()) throw;
    fmt::print(stderr,
               "spore convert: note: {} computes shapes from a symbolic input dim; converting it for --input-shape {} "
               "(the first calibration file's shape)\n",
               in, shape_fixed);
    g = load_model_file(in, parse_input_shapes({shape_fixed}));
  }
  if (optimize_level >= 1) {
    // fold_keeps_size: a converted model stays converted when converted again (no int8/f16 weights folded to f32).
    PassOptions po;
    po.fold_keeps_size = true;
    PassManager pm(po);
    pm.add(make_dce_pass()).add(make_cse_pass()).add(make_fold_constants_pass()).add(make_dce_pass());
    pm.run(*g);
  }
  const std::unique_ptr<Graph> f32 = g->clone();

  // Inputs the report compares on: calibration data, else the eval data's training split, else seeded random.
  std::vector<std::vector<Tensor>> batches;
  std::string compare_desc;
  int64_t compare_samples = 0;
  const std::string sample_spec = !calib_data.empty() ? calib_data : eval_data;
  if (!sample_spec.empty()) {
    const Tensor x = load_samples(sample_spec, *g, calib_samples, input_scale, &compare_desc);
    for (Tensor& b : to_batches(x, *g, 32, sample_spec)) {
      compare_samples += b.dim(0);
      batches.push_back({b});
    }
  } else {
    batches = random_inputs(*g, 4);
    for (const auto& b : batches) compare_samples += b.empty() || b[0].rank() == 0 ? 1 : b[0].dim(0);
    compare_desc = "seeded random inputs in [0, 1)";
  }

  QuantReport qrep;
  if (quantize == "weight_int8") {
    qrep = quantize_weights_int8(*g);
  } else if (quantize == "int8") {
    const CalibrationTable table = calibrate(*g, batches, calib_opts);
    StaticQuantOptions qo;
    qo.activation_bits = act_bits;
    qrep = quantize_static_int8(*g, table, qo);
  }
  const PrecisionReport prep = apply_precision_mode(*g, mode, low);
  verify_graph(*g);

  std::map<std::string, std::string> meta{{"precision_mode", precision_mode_name(mode)},
                                          {"quantize", quantize},
                                          {"source", in},
                                          {"optimize_level", std::to_string(optimize_level)}};
  if (mode == PrecisionMode::allow_mix_precision) meta["mix_dtype"] = mix_dtype;
  if (quantize == "int8") {
    meta["calib_method"] = calib_method;
    meta["act_bits"] = std::to_string(act_bits);
  }
  io::save_model(*g, out, meta);
  const int64_t size_after = static_cast<int64_t>(fs::file_size(out));
  const int64_t size_before = saved_size(*f32, out, {{"source", in}});

  const std::vector<OutputDiff> diffs = compare(*f32, *g, batches);
  std::optional<ClassifierEval> acc_f32, acc_conv;
  int64_t eval_samples = 0;
  if (!eval_data.empty()) {
    const train::TrainTestSplit split = train::load_dataset_spec(eval_data, 1, 0);
    acc_f32 = evaluate_classifier(*f32, split.test, 64, input_scale);
    acc_conv = evaluate_classifier(*g, split.test, 64, input_scale);
    eval_samples = acc_f32->samples;
  }

  const auto before = ops_per_dtype(*f32);
  const auto after = ops_per_dtype(*g);
  if (json) {
    nlohmann::json outs = nlohmann::json::array();
    for (const OutputDiff& d : diffs)
      outs.push_back({{"name", d.name}, {"max_abs_error", d.max_abs}, {"max_rel_error", d.max_rel()},
                      {"cosine", d.cosine()}});
    nlohmann::json j{{"input", in},
                     {"output", out},
                     {"precision_mode", precision_mode_name(mode)},
                     {"quantize", quantize},
                     {"optimize_level", optimize_level},
                     {"ops_per_dtype_before", before},
                     {"ops_per_dtype_after", after},
                     {"casts_inserted", prep.casts_inserted},
                     {"kept_f32", prep.kept_f32},
                     {"weights_quantized", qrep.weights_quantized},
                     {"ops_quantized", qrep.ops_quantized},
                     {"quantize_skipped", qrep.skipped},
                     {"size_before_bytes", size_before},
                     {"size_after_bytes", size_after},
                     {"size_ratio", static_cast<double>(size_after) / static_cast<double>(size_before)},
                     {"compare_inputs", compare_desc},
                     {"compare_samples", compare_samples},
                     {"outputs", outs}};
    if (mode == PrecisionMode::allow_mix_precision) j["mix_dtype"] = mix_dtype;
    if (!shape_fixed.empty()) j["input_shape_fixed"] = shape_fixed;
    if (quantize == "int8") {
      j["calib_method"] = calib_method;
      j["act_bits"] = act_bits;
    }
    if (acc_f32) {
      j["eval_data"] = eval_data;
      j["eval_samples"] = eval_samples;
      j["accuracy_f32"] = acc_f32->accuracy;
      j["accuracy_converted"] = acc_conv->accuracy;
      j["accuracy_delta_points"] = (acc_conv->accuracy - acc_f32->accuracy) * 100.0;
    }
    std::cout << j.dump() << std::endl;
    return 0;
  }

  std::string s = fmt::format("converted {} -> {} ({}{}, quantize {}, optimize-level {})\n", in, out,
                              precision_mode_name(mode),
                              mode == PrecisionMode::allow_mix_precision ? " " + mix_dtype : std::string(), quantize,
                              optimize_level);
  s += fmt::format("  {:<14}{:>8}{:>8}\n", "ops per dtype", "before", "after");
  std::map<std::string, int> keys;
  for (const auto& [k, v] : before) keys[k] = 0;
  for (const auto& [k, v] : after) keys[k] = 0;
  for (const auto& [k, v] : keys) {
    const auto b = before.find(k), a = after.find(k);
    s += fmt::format("  {:<14}{:>8}{:>8}\n", k, b == before.end() ? 0 : b->second, a == after.end() ? 0 : a->second);
  }
  s += fmt::format("  casts inserted: {}\n", prep.casts_inserted);
  if (!prep.kept_f32.empty()) {
    s += fmt::format("  kept f32 ({}):\n", prep.kept_f32.size());
    for (const std::string& k : prep.kept_f32) s += "    " + k + "\n";
  }
  if (quantize != "none") {
    s += fmt::format("  weights quantized: {}, ops running int8: {}\n", qrep.weights_quantized, qrep.ops_quantized);
    for (const std::string& k : qrep.skipped) s += "    left in float: " + k + "\n";
  }
  s += fmt::format("  model size: {} (source as {}) -> {} ({:.2f}x)\n", human_bytes(size_before), ext.substr(1),
                   human_bytes(size_after), static_cast<double>(size_after) / static_cast<double>(size_before));
  s += fmt::format("  vs the source model on {} samples of {} (max rel error = max abs error / max |source output|):\n",
                   compare_samples, compare_desc);
  s += fmt::format("    {:<16}{:>14}{:>14}{:>12}\n", "output", "max abs err", "max rel err", "cosine");
  for (const OutputDiff& d : diffs)
    s += fmt::format("    {:<16}{:>14.3e}{:>14.3e}{:>12.6f}\n", d.name, d.max_abs, d.max_rel(), d.cosine());
  if (acc_f32)
    s += fmt::format("  accuracy on {} ({} test samples): source {:.4f}, converted {:.4f}, delta {:+.2f} points\n",
                     eval_data, eval_samples, acc_f32->accuracy, acc_conv->accuracy,
                     (acc_conv->accuracy - acc_f32->accuracy) * 100.0);
  std::cout << s;
  return 0;
}

}  // namespace spore::cli
