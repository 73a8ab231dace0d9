#pragma once
// Conversion of a model file for deployment (Ascend ATC for spore): what `spore convert` and Python's
// spore.convert run. A model file (.spore / .onnx) -> a deployable .spore (or .onnx) in a precision mode and/or
// quantized, with a report of what the conversion changed and what it cost:
//   load (input shapes applied) -> optimize (optimize_level) -> keep the f32 graph -> quantize (weight_int8, or
//   calibrate + static int8) -> precision mode -> save (metadata: precision_mode, quantize, source)
//   -> report: ops per dtype, casts, ops kept f32, weights quantized, file size f32 vs converted, and the converted
//   model's outputs against the f32 model's on the calibration / eval / seeded random inputs (max abs error, max
//   rel error = max abs error / max |f32 output| of that output, cosine similarity), plus classifier accuracy of
//   both with eval data.
// Quantization runs before the precision mode: the int8 passes see f32 weights, and the precision pass leaves
// the dequantize / int8 nodes (not float ops) alone while casting what they feed.
//
// Labelled datasets ("mnist:DIR", "digits:FILE", ...) are read by the train layer, above this one: the front end
// passes `load_dataset` (train::load_dataset_spec's splits as tensors).
#include <cstdint>
#include <functional>
#include <map>
#include <string>
#include <vector>

#include "tensor/tensor.h"

namespace spore::deploy {

// "mnist:", "fashion-mnist:" or "digits:" (a labelled dataset spec, as `spore train --dataset` takes).
bool is_dataset_spec(const std::string& s);

// A labelled dataset's splits as tensors: training images (calibration must not see the test images), test images
// and their integer labels.
struct DatasetTensors {
  Tensor train_x;
  Tensor test_x, test_y;
};
// Reads a dataset spec, at most limit_train / limit_test samples of each split (0: all).
using DatasetLoader = std::function<DatasetTensors(const std::string& spec, int64_t limit_train, int64_t limit_test)>;

struct ConvertOptions {
  std::string input;                      // .spore, .onnx or text IR
  std::string output;                     // OUT.spore or OUT.onnx
  std::vector<std::string> input_shapes;  // NAME:D0,D1,... as --input-shape (a symbol keeps a dim, -1 the model's)
  std::string precision_mode = "force_fp32";  // force_fp32 | allow_fp32_to_fp16 | allow_fp32_to_bf16 | allow_mix_precision
  std::string mix_dtype = "f16";              // low dtype of allow_mix_precision: f16 | bf16
  std::string quantize = "none";              // none | weight_int8 | int8 (static; needs calibration samples)
  // Calibration samples for input 0: a dataset spec (its training split) or a directory of .npy files (one per sample
  // or per batch, in name order). Or `calib_tensor`: the samples themselves ([N, ...], or one sample without its batch
  // dim); `calib_data` is then only their name in the report ("" names them by shape).
  std::string calib_data;
  Tensor calib_tensor;
  int64_t calib_samples = 256;
  std::string calib_method = "minmax";  // minmax | percentile | entropy
  int act_bits = 8;                     // int8 activation code bits: 8 or 7 (CPUs without VNNI)
  std::string eval_data;                // classifier accuracy before/after on a dataset spec's test split
  float input_scale = 1.f;              // multiplies the samples (255 for models trained on raw pixels)
  int optimize_level = 1;               // 0: none, 1: dce + cse + fold, 2: the same for now
  DatasetLoader load_dataset;           // needed when calib_data or eval_data is a dataset spec
  // Called with a note the user should see (the input shape taken from the calibration data); may be empty.
  std::function<void(const std::string&)> on_note;
};

struct OutputError {
  std::string name;
  double max_abs_error = 0, max_rel_error = 0, cosine = 1;
};

struct ConvertReport {
  std::string input, output;
  std::string precision_mode, quantize;
  int optimize_level = 1;
  std::string mix_dtype;          // allow_mix_precision only, else ""
  std::string calib_method;       // quantize int8 only, else ""
  int act_bits = 0;               // quantize int8 only, else 0
  std::string input_shape_fixed;  // the input spec taken from the calibration data, "" when none was needed
  std::map<std::string, int64_t> ops_per_dtype_before, ops_per_dtype_after;
  int64_t casts_inserted = 0;
  std::vector<std::string> kept_f32;
  int64_t weights_quantized = 0, ops_quantized = 0;
  std::vector<std::string> quantize_skipped;
  int64_t size_before_bytes = 0, size_after_bytes = 0;  // the f32 model saved in the output's container vs the output
  double size_ratio = 0;
  std::string compare_inputs;  // what the outputs were compared on
  int64_t compare_samples = 0;
  std::vector<OutputError> outputs;
  bool has_accuracy = false;  // eval_data given
  std::string eval_data;
  int64_t eval_samples = 0;
  double accuracy_f32 = 0, accuracy_converted = 0;

  double accuracy_delta_points() const { return (accuracy_converted - accuracy_f32) * 100.0; }
  // The report as one JSON object (what `spore convert --json` prints).
  std::string to_json() const;
};

// Checks every option (before anything is loaded; one-line errors naming the CLI option), converts and saves the
// model, and reports.
ConvertReport convert_model(const ConvertOptions& opts);

}  // namespace spore::deploy
