#include "data/sources.h"

#include <charconv>
#include <cstring>
#include <filesystem>

#include "data/gzip.h"

namespace spore::data {
namespace {

uint32_t be32(const unsigned char* p) {
  return (uint32_t{p[0]} << 24) | (uint32_t{p[1]} << 16) | (uint32_t{p[2]} << 8) | uint32_t{p[3]};
}

std::string find_file(const std::string& base) {
  if (std::filesystem::exists(base)) return base;
  if (std::filesystem::exists(base + ".gz")) return base + ".gz";
  SPORE_FAIL(ErrorCode::not_found, "dataset file '{}' (or '{}.gz') not found", base, base);
}

Tensor to_scaled_f32(const Tensor& t, double scale) {
  Tensor out = Tensor::empty(t.shape(), DType::f32);
  float* o = out.data<float>();
  const int64_t n = t.numel();
  if (t.dtype() == DType::u8) {
    const uint8_t* p = t.data<uint8_t>();
    for (int64_t i = 0; i < n; ++i) o[i] = static_cast<float>(p[i] * scale);
  } else {
    for (int64_t i = 0; i < n; ++i) o[i] = static_cast<float>(t.item_at(i) * scale);
  }
  return out;
}

Tensor to_i64(const Tensor& t) {
  Tensor out = Tensor::empty(t.shape(), DType::i64);
  int64_t* o = out.data<int64_t>();
  for (int64_t i = 0; i < t.numel(); ++i) o[i] = static_cast<int64_t>(t.item_at(i));
  return out;
}

}  // namespace

Tensor parse_idx(std::string_view bytes, const std::string& name) {
  const auto* p = reinterpret_cast<const unsigned char*>(bytes.data());
  const size_t size = bytes.size();
  SPORE_CHECK(size >= 4, ErrorCode::parse_error, "idx '{}': truncated at byte offset {} (no magic)", name, size);
  SPORE_CHECK(p[0] == 0 && p[1] == 0, ErrorCode::parse_error,
              "idx '{}': bad magic 0x{:02x}{:02x}{:02x}{:02x} at byte offset 0 (expected 0x0000TTNN)", name, p[0], p[1],
              p[2], p[3]);
  int code = p[2], ndim = p[3];
  DType dtype;
  size_t elem;
  switch (code) {
    case 0x08:
      dtype = DType::u8;
      elem = 1;
      break;
    case 0x09:
      dtype = DType::i8;
      elem = 1;
      break;
    case 0x0B:
      dtype = DType::i32;
      elem = 2;
      break;
    case 0x0C:
      dtype = DType::i32;
      elem = 4;
      break;
    case 0x0D:
      dtype = DType::f32;
      elem = 4;
      break;
    case 0x0E:
      dtype = DType::f64;
      elem = 8;
      break;
    default:
      SPORE_FAIL(ErrorCode::parse_error, "idx '{}': unknown element type 0x{:02x} at byte offset 2", name, code);
  }
  SPORE_CHECK(ndim >= 1, ErrorCode::parse_error, "idx '{}': zero dimensions at byte offset 3", name);
  size_t data_start = 4 + 4 * static_cast<size_t>(ndim);
  SPORE_CHECK(size >= data_start, ErrorCode::parse_error,
              "idx '{}': truncated at byte offset {} (header with {} dims needs {} bytes)", name, size, ndim,
              data_start);
  Shape shape;
  uint64_t numel = 1;
  for (int i = 0; i < ndim; ++i) {
    uint32_t d = be32(p + 4 + 4 * i);
    shape.push_back(d);
    // Checked before multiplying so hostile dims cannot wrap around to a small size.
    SPORE_CHECK(d == 0 || numel <= (uint64_t{1} << 40) / d, ErrorCode::parse_error,
                "idx '{}': dims too large at byte offset {}", name, 4 + 4 * i);
    numel *= d;
  }
  uint64_t want = numel * elem;
  SPORE_CHECK(size - data_start >= want, ErrorCode::parse_error,
              "idx '{}': truncated data: dims {} need {} bytes from byte offset {}, file ends at byte offset {}", name,
              shape_str(shape), want, data_start, size);
  SPORE_CHECK(size - data_start == want, ErrorCode::parse_error,
              "idx '{}': dims {} need {} data bytes, but {} extra bytes follow at byte offset {}", name,
              shape_str(shape), want, size - data_start - want, data_start + want);
  Tensor t = Tensor::empty(shape, dtype);
  const unsigned char* d = p + data_start;
  char* o = static_cast<char*>(t.raw_data());
  if (elem == 1) {
    std::memcpy(o, d, numel);
  } else if (code == 0x0B) {
    int32_t* oi = reinterpret_cast<int32_t*>(o);
    for (uint64_t i = 0; i < numel; ++i) oi[i] = static_cast<int16_t>((d[2 * i] << 8) | d[2 * i + 1]);
  } else {
    // Big-endian on disk: reverse the bytes of each element.
    for (uint64_t i = 0; i < numel; ++i)
      for (size_t b = 0; b < elem; ++b) o[i * elem + b] = static_cast<char>(d[i * elem + elem - 1 - b]);
  }
  return t;
}

Tensor read_idx(const std::string& path) { return parse_idx(read_maybe_gzip(path), path); }

LabeledData load_mnist(const std::string& dir, const std::string& split) {
  std::string ipath = find_file(dir + "/" + split + "-images-idx3-ubyte");
  std::string lpath = find_file(dir + "/" + split + "-labels-idx1-ubyte");
  Tensor images = read_idx(ipath);
  Tensor labels = read_idx(lpath);
  SPORE_CHECK(images.rank() == 3, ErrorCode::shape_mismatch, "load_mnist: '{}' has dims {}, expected [N, H, W]", ipath,
              shape_str(images.shape()));
  SPORE_CHECK(labels.rank() == 1, ErrorCode::shape_mismatch, "load_mnist: '{}' has dims {}, expected [N]", lpath,
              shape_str(labels.shape()));
  SPORE_CHECK(images.dim(0) == labels.dim(0), ErrorCode::shape_mismatch,
              "load_mnist: '{}' holds {} images but '{}' holds {} labels", ipath, images.dim(0), lpath, labels.dim(0));
  Tensor x = to_scaled_f32(images, 1.0 / 255.0).view({images.dim(0), 1, images.dim(1), images.dim(2)});
  return {x, to_i64(labels)};
}

LabeledData read_csv(const std::string& path, const CsvOptions& opt) {
  std::string text = read_maybe_gzip(path);
  std::vector<double> values;
  std::vector<int64_t> labels;
  int64_t cols = -1, rows = 0, line_no = 0;
  int label_col = -1;
  size_t pos = 0;
  while (pos < text.size()) {
    size_t end = text.find('\n', pos);
    if (end == std::string::npos) end = text.size();
    std::string_view line(text.data() + pos, end - pos);
    pos = end + 1;
    ++line_no;
    if (!line.empty() && line.back() == '\r') line.remove_suffix(1);
    if (line.empty() || (opt.header && line_no == 1)) continue;
    std::vector<double> fields;
    size_t f = 0;
    while (true) {
      size_t e = line.find(opt.delimiter, f);
      if (e == std::string_view::npos) e = line.size();
      std::string_view cell = line.substr(f, e - f);
      while (!cell.empty() && cell.front() == ' ') cell.remove_prefix(1);
      while (!cell.empty() && cell.back() == ' ') cell.remove_suffix(1);
      double v = 0;
      auto [ptr, ec] = std::from_chars(cell.data(), cell.data() + cell.size(), v);
      SPORE_CHECK(ec == std::errc() && ptr == cell.data() + cell.size(), ErrorCode::parse_error,
                  "csv '{}': line {} column {}: '{}' is not a number", path, line_no, fields.size(), cell);
      fields.push_back(v);
      if (e == line.size()) break;
      f = e + 1;
    }
    if (cols < 0) {
      cols = static_cast<int64_t>(fields.size());
      if (opt.label_column) {
        label_col = *opt.label_column < 0 ? static_cast<int>(cols) + *opt.label_column : *opt.label_column;
        SPORE_CHECK(label_col >= 0 && label_col < cols, ErrorCode::invalid_argument,
                    "csv '{}': label column {} out of range for {} columns", path, *opt.label_column, cols);
      }
    }
    SPORE_CHECK(static_cast<int64_t>(fields.size()) == cols, ErrorCode::parse_error,
                "csv '{}': line {} has {} columns, expected {}", path, line_no, fields.size(), cols);
    for (int64_t c = 0; c < cols; ++c) {
      if (c == label_col) {
        double v = fields[c];
        SPORE_CHECK(v == static_cast<double>(static_cast<int64_t>(v)), ErrorCode::parse_error,
                    "csv '{}': line {}: label {} is not an integer", path, line_no, v);
        labels.push_back(static_cast<int64_t>(v));
      } else {
        values.push_back(fields[c]);
      }
    }
    ++rows;
  }
  SPORE_CHECK(rows > 0, ErrorCode::parse_error, "csv '{}': no data rows", path);
  int64_t features = cols - (label_col >= 0 ? 1 : 0);
  LabeledData out;
  out.x = Tensor::from_doubles(values, {rows, features}, opt.dtype);
  if (label_col >= 0) out.y = Tensor::from_vector(labels, {rows});
  return out;
}

LabeledData load_digits(const std::string& path) {
  CsvOptions opt;
  opt.label_column = -1;
  LabeledData d = read_csv(path, opt);
  SPORE_CHECK(d.x.dim(1) == 64, ErrorCode::shape_mismatch, "load_digits: '{}' has {} pixel columns, expected 64", path,
              d.x.dim(1));
  Tensor x = Tensor::empty({d.x.dim(0), 1, 8, 8}, DType::f32);
  const float* src = d.x.data<float>();
  float* dst = x.data<float>();
  for (int64_t i = 0; i < x.numel(); ++i) dst[i] = src[i] / 16.0f;
  return {x, d.y};
}

}  // namespace spore::data
