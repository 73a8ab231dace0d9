#include "deploy/convert.h"

#include <unistd.h>

#include <algorithm>
#include <cmath>
#include <filesystem>
#include <memory>
#include <optional>

#include <fmt/format.h>
#include <nlohmann/json.hpp>

#include "base/error.h"
#include "base/rng.h"
#include "deploy/model_util.h"
#include "deploy/session.h"
#include "io/model_file.h"
#include "io/npy.h"
#include "ops/graph_ops.h"
#include "ops/ops.h"
#include "passes/pass.h"
#include "passes/precision.h"
#include "passes/quantize.h"
#include "runtime/calibrate.h"

namespace spore::deploy {
namespace {

namespace fs = std::filesystem;

std::string dims_spec(const std::string& name, const Shape& shape) {
  std::string spec = name + ":";
  for (size_t d = 0; d < shape.size(); ++d) spec += (d ? "," : "") + std::to_string(shape[d]);
  return spec;
}

// Input 0's spec for a sample of this shape (a sample without a batch dim gets batch 1); "" when the rank fits not.
std::string input_shape_for_sample(const std::string& model, Shape shape) {
  const Session session(model);
  const SessionInput& in = session.inputs().at(0);
  if (static_cast<int>(shape.size()) + 1 == in.type.rank()) shape.insert(shape.begin(), 1);
  if (static_cast<int>(shape.size()) != in.type.rank()) return "";
  return dims_spec(in.name, shape);
}

// Exports that compute shapes from their batch dim (Shape -> Gather -> Reshape: shufflenet, ViT, torchvision's
// segmentation heads) import only with that dim fixed. With .npy calibration data (a directory) or a calibration
// tensor and no input shapes, input 0's dims are taken from the first file / the tensor; "" when not applicable.
std::string input_shape_from_calib(const ConvertOptions& o) {
  if (o.calib_tensor.defined()) return input_shape_for_sample(o.input, o.calib_tensor.shape());
  const std::string& dir = o.calib_data;
  if (dir.empty() || is_dataset_spec(dir) || !fs::is_directory(dir)) return "";
  std::vector<std::string> files;
  for (const auto& e : fs::directory_iterator(dir))
    if (e.path().extension() == ".npy") files.push_back(e.path().string());
  if (files.empty()) return "";
  std::sort(files.begin(), files.end());
  return input_shape_for_sample(o.input, io::read_npy(files.front()).shape());
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

// One sample (the input without its batch dim) or a batch ([N, ...]) of input 0, as f32 [N, ...].
Tensor as_samples(Tensor a, const Graph& g, const std::string& what) {
  const TensorType& t = g.inputs()[0]->type;
  if (a.rank() == t.rank() - 1) a = ops::unsqueeze(a, {0});
  SPORE_CHECK(a.rank() == t.rank(), ErrorCode::shape_mismatch, "{}: {} is neither one sample nor a batch of input '{}' ({})",
              what, shape_str(a.shape()), g.inputs()[0]->name, t.str());
  if (a.dtype() != DType::f32) a = ops::cast(a, DType::f32);
  return a.contiguous();
}

// Samples for input 0: the calibration tensor, or from a SPEC: a labelled dataset (its training split: calibration
// must not see the test images) or a directory of .npy files, one per sample ([...] = the input without its batch
// dim) or per batch ([N, ...]), taken in name order. Pixels are multiplied by `scale` like spore eval's --input-scale.
Tensor load_samples(const ConvertOptions& o, const std::string& spec, const Graph& g, std::string* desc) {
  SPORE_CHECK(g.inputs().size() == 1, ErrorCode::invalid_argument,
              "--calib-data feeds input 0, but model '{}' has {} inputs", g.name(), g.inputs().size());
  const int64_t max_samples = o.calib_samples;
  Tensor x;
  if (spec.empty() && o.calib_tensor.defined()) {
    x = as_samples(o.calib_tensor, g, "calibration tensor");
    *desc = o.calib_data.empty() ? fmt::format("given samples {}", shape_str(o.calib_tensor.shape())) : o.calib_data;
  } else if (is_dataset_spec(spec)) {
    SPORE_CHECK(static_cast<bool>(o.load_dataset), ErrorCode::invalid_argument,
                "'{}': this front end reads no dataset specs", spec);
    x = o.load_dataset(spec, max_samples, 1).train_x;
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
      parts.push_back(as_samples(io::read_npy(p.string()), g, "--calib-data " + p.string()));
      n += parts.back().dim(0);
    }
    x = parts.size() == 1 ? parts[0] : ops::concat(parts, 0);
    *desc = fmt::format("{} ({} .npy files)", spec, parts.size());
  }
  if (x.dim(0) > max_samples) x = x.slice(0, 0, max_samples).contiguous();
  if (o.input_scale != 1.f) x = ops::mul(x, static_cast<double>(o.input_scale));
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

}  // namespace

bool is_dataset_spec(const std::string& s) {
  for (const char* p : {"mnist:", "fashion-mnist:", "digits:"})
    if (s.rfind(p, 0) == 0) return true;
  return false;
}

ConvertReport convert_model(const ConvertOptions& o) {
  // Every option is checked before the model is loaded (one line each, via spore::Error).
  const PrecisionMode mode = parse_precision_mode(o.precision_mode);
  SPORE_CHECK(o.mix_dtype == "f16" || o.mix_dtype == "bf16", ErrorCode::invalid_argument,
              "unknown --mix-dtype '{}' (choices: f16, bf16)", o.mix_dtype);
  const DType low = o.mix_dtype == "bf16" ? DType::bf16 : DType::f16;
  SPORE_CHECK(o.quantize == "none" || o.quantize == "weight_int8" || o.quantize == "int8", ErrorCode::invalid_argument,
              "unknown --quantize '{}' (choices: none, weight_int8, int8)", o.quantize);
  const bool have_calib = !o.calib_data.empty() || o.calib_tensor.defined();
  SPORE_CHECK(o.quantize != "int8" || have_calib, ErrorCode::invalid_argument,
              "--quantize int8 needs calibration data: --calib-data mnist:DIR | fashion-mnist:DIR | digits:FILE | DIR");
  SPORE_CHECK(o.calib_samples > 0, ErrorCode::invalid_argument, "--calib-samples {}: expected a positive number",
              o.calib_samples);
  CalibOptions calib_opts;
  calib_opts.method = parse_calib_method(o.calib_method);
  SPORE_CHECK(o.act_bits == 7 || o.act_bits == 8, ErrorCode::invalid_argument, "--act-bits {}: expected 7 or 8", o.act_bits);
  SPORE_CHECK(o.optimize_level >= 0 && o.optimize_level <= 2, ErrorCode::invalid_argument,
              "--optimize-level {}: expected 0, 1 or 2", o.optimize_level);
  SPORE_CHECK(o.eval_data.empty() || is_dataset_spec(o.eval_data), ErrorCode::invalid_argument,
              "--eval-data '{}': expected mnist:DIR | fashion-mnist:DIR | digits:FILE", o.eval_data);
  SPORE_CHECK(std::isfinite(o.input_scale), ErrorCode::invalid_argument, "--input-scale {}: not a finite number",
              o.input_scale);
  const std::string ext = fs::path(o.output).extension().string();
  SPORE_CHECK(ext == ".spore" || ext == ".onnx", ErrorCode::invalid_argument,
              "-o {}: the output must end in .spore or .onnx", o.output);

  ConvertReport r;
  r.input = o.input;
  r.output = o.output;
  r.precision_mode = precision_mode_name(mode);
  r.quantize = o.quantize;
  r.optimize_level = o.optimize_level;
  if (mode == PrecisionMode::allow_mix_precision) r.mix_dtype = o.mix_dtype;
  if (o.quantize == "int8") {
    r.calib_method = o.calib_method;
    r.act_bits = o.act_bits;
  }

  std::unique_ptr<Graph> g;
  try {
    g = load_model_file(o.input, parse_input_shapes(o.input_shapes));
  } catch (const Error& e) {
    if (!o.input_shapes.empty() || std::string(e.what()).find("symbolic dim") == std::string::npos) throw;
    r.input_shape_fixed = input_shape_from_calib(o);
    if (r.input_shape_fixed.empty()) throw;
    if (o.on_note)
      o.on_note(fmt::format("{} computes shapes from a symbolic input dim; converting it for --input-shape {} (the "
                            "first calibration {}'s shape)",
                            o.input, r.input_shape_fixed, o.calib_tensor.defined() ? "sample" : "file"));
    g = load_model_file(o.input, parse_input_shapes({r.input_shape_fixed}));
  }
  if (o.optimize_level >= 1) {
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
  if (have_calib || !o.eval_data.empty()) {
    const std::string spec = o.calib_tensor.defined() ? "" : !o.calib_data.empty() ? o.calib_data : o.eval_data;
    const Tensor x = load_samples(o, spec, *g, &r.compare_inputs);
    for (Tensor& b : to_batches(x, *g, 32, spec.empty() ? "calibration tensor" : spec)) {
      r.compare_samples += b.dim(0);
      batches.push_back({b});
    }
  } else {
    batches = random_inputs(*g, 4);
    for (const auto& b : batches) r.compare_samples += b.empty() || b[0].rank() == 0 ? 1 : b[0].dim(0);
    r.compare_inputs = "seeded random inputs in [0, 1)";
  }

  QuantReport qrep;
  if (o.quantize == "weight_int8") {
    qrep = quantize_weights_int8(*g);
  } else if (o.quantize == "int8") {
    const CalibrationTable table = calibrate(*g, batches, calib_opts);
    StaticQuantOptions qo;
    qo.activation_bits = o.act_bits;
    qrep = quantize_static_int8(*g, table, qo);
  }
  const PrecisionReport prep = apply_precision_mode(*g, mode, low);
  verify_graph(*g);

  std::map<std::string, std::string> meta{{"precision_mode", r.precision_mode},
                                          {"quantize", o.quantize},
                                          {"source", o.input},
                                          {"optimize_level", std::to_string(o.optimize_level)}};
  if (mode == PrecisionMode::allow_mix_precision) meta["mix_dtype"] = o.mix_dtype;
  if (o.quantize == "int8") {
    meta["calib_method"] = o.calib_method;
    meta["act_bits"] = std::to_string(o.act_bits);
  }
  io::save_model(*g, o.output, meta);
  r.size_after_bytes = static_cast<int64_t>(fs::file_size(o.output));
  r.size_before_bytes = saved_size(*f32, o.output, {{"source", o.input}});
  r.size_ratio = static_cast<double>(r.size_after_bytes) / static_cast<double>(r.size_before_bytes);

  for (const OutputDiff& d : compare(*f32, *g, batches)) r.outputs.push_back({d.name, d.max_abs, d.max_rel(), d.cosine()});
  if (!o.eval_data.empty()) {
    SPORE_CHECK(static_cast<bool>(o.load_dataset), ErrorCode::invalid_argument,
                "--eval-data '{}': this front end reads no dataset specs", o.eval_data);
    const DatasetTensors split = o.load_dataset(o.eval_data, 1, 0);
    const ClassifierEval acc_f32 = evaluate_classifier(*f32, split.test_x, split.test_y, 64, o.input_scale);
    const ClassifierEval acc_conv = evaluate_classifier(*g, split.test_x, split.test_y, 64, o.input_scale);
    r.has_accuracy = true;
    r.eval_data = o.eval_data;
    r.eval_samples = acc_f32.samples;
    r.accuracy_f32 = acc_f32.accuracy;
    r.accuracy_converted = acc_conv.accuracy;
  }

  r.ops_per_dtype_before = ops_per_dtype(*f32);
  r.ops_per_dtype_after = ops_per_dtype(*g);
  r.casts_inserted = prep.casts_inserted;
  r.kept_f32 = prep.kept_f32;
  r.weights_quantized = qrep.weights_quantized;
  r.ops_quantized = qrep.ops_quantized;
  r.quantize_skipped = qrep.skipped;
  return r;
}

std::string ConvertReport::to_json() const {
  nlohmann::json outs = nlohmann::json::array();
  for (const OutputError& d : outputs)
    outs.push_back({{"name", d.name}, {"max_abs_error", d.max_abs_error}, {"max_rel_error", d.max_rel_error},
                    {"cosine", d.cosine}});
  nlohmann::json j{{"input", input},
                   {"output", output},
                   {"precision_mode", precision_mode},
                   {"quantize", quantize},
                   {"optimize_level", optimize_level},
                   {"ops_per_dtype_before", ops_per_dtype_before},
                   {"ops_per_dtype_after", ops_per_dtype_after},
                   {"casts_inserted", casts_inserted},
                   {"kept_f32", kept_f32},
                   {"weights_quantized", weights_quantized},
                   {"ops_quantized", ops_quantized},
                   {"quantize_skipped", quantize_skipped},
                   {"size_before_bytes", size_before_bytes},
                   {"size_after_bytes", size_after_bytes},
                   {"size_ratio", size_ratio},
                   {"compare_inputs", compare_inputs},
                   {"compare_samples", compare_samples},
                   {"outputs", outs}};
  if (!mix_dtype.empty()) j["mix_dtype"] = mix_dtype;
  if (!input_shape_fixed.empty()) j["input_shape_fixed"] = input_shape_fixed;
  if (!calib_method.empty()) {
    j["calib_method"] = calib_method;
    j["act_bits"] = act_bits;
  }
  if (has_accuracy) {
    j["eval_data"] = eval_data;
    j["eval_samples"] = eval_samples;
    j["accuracy_f32"] = accuracy_f32;
    j["accuracy_converted"] = accuracy_converted;
    j["accuracy_delta_points"] = accuracy_delta_points();
  }
  return j.dump();
}

}  // namespace spore::deploy
