#pragma once
// Dataset sources: IDX files (MNIST / Fashion-MNIST, optionally gzip-compressed), numeric CSV, and the
// scikit-learn 8x8 digits CSV. Errors name the file and the byte offset (IDX) or line (CSV).
#include <optional>
#include <string>

#include "tensor/tensor.h"

namespace spore::data {

// Images x [N, ...] and labels y [N] (i64), as loaded from a source.
struct LabeledData {
  Tensor x;
  Tensor y;
};

// Reads an IDX file (.gz or raw). Element codes 0x08 u8, 0x09 i8, 0x0C i32, 0x0D f32, 0x0E f64 map to
// the same dtype; 0x0B (i16) widens to i32 since spore has no i16.
Tensor read_idx(const std::string& path);
Tensor parse_idx(std::string_view bytes, const std::string& name);

// Loads `<dir>/<split>-images-idx3-ubyte[.gz]` and the matching labels (MNIST / Fashion-MNIST naming).
// x is f32 [N, 1, H, W] scaled to [0, 1]; y is i64 [N]. Counts must agree.
LabeledData load_mnist(const std::string& dir, const std::string& split = "t10k");

struct CsvOptions {
  char delimiter = ',';
  bool header = false;              // skip the first line
  std::optional<int> label_column;  // column holding the integer label; negative counts from the end
  DType dtype = DType::f32;         // dtype of x
};
// Reads a numeric CSV (.gz or raw): x [rows, features], y i64 [rows] (undefined without label_column).
LabeledData read_csv(const std::string& path, const CsvOptions& options = {});

// scikit-learn digits (digits.csv[.gz]: 64 pixels 0..16 then the label): x f32 [N, 1, 8, 8] scaled
// to [0, 1], y i64 [N].
LabeledData load_digits(const std::string& path);

}  // namespace spore::data
