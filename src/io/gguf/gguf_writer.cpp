#include "io/gguf/gguf_writer.h"

#include <algorithm>
#include <cmath>
#include <cstring>

#include "base/half.h"
#include "io/file_util.h"

namespace spore::io {
namespace {

template <class T>
void put(std::string& out, T v) {
  char b[sizeof(T)];
  std::memcpy(b, &v, sizeof(T));
  out.append(b, sizeof(T));
}
void put_string(std::string& out, const std::string& s) {
  put<uint64_t>(out, s.size());
  out += s;
}

void put_int(std::string& out, GgufValueType t, int64_t v) {
  switch (t) {
    case GgufValueType::u8: case GgufValueType::boolean: put<uint8_t>(out, static_cast<uint8_t>(v)); return;
    case GgufValueType::i8: put<int8_t>(out, static_cast<int8_t>(v)); return;
    case GgufValueType::u16: put<uint16_t>(out, static_cast<uint16_t>(v)); return;
    case GgufValueType::i16: put<int16_t>(out, static_cast<int16_t>(v)); return;
    case GgufValueType::u32: put<uint32_t>(out, static_cast<uint32_t>(v)); return;
    case GgufValueType::i32: put<int32_t>(out, static_cast<int32_t>(v)); return;
    case GgufValueType::u64: put<uint64_t>(out, static_cast<uint64_t>(v)); return;
    case GgufValueType::i64: put<int64_t>(out, v); return;
    default: SPORE_ASSERT(false, "put_int on a non-integer type");
  }
}
void put_float(std::string& out, GgufValueType t, double v) {
  if (t == GgufValueType::f32)
    put<float>(out, static_cast<float>(v));
  else
    put<double>(out, v);
}
bool is_float(GgufValueType t) { return t == GgufValueType::f32 || t == GgufValueType::f64; }

void put_value(std::string& out, const std::string& key, const GgufValue& v) {
  put<uint32_t>(out, static_cast<uint32_t>(v.type));
  if (v.type == GgufValueType::string) {
    put_string(out, v.s);
  } else if (is_float(v.type)) {
    put_float(out, v.type, v.f);
  } else if (v.type != GgufValueType::array) {
    put_int(out, v.type, v.i);
  } else {
    SPORE_CHECK(v.elem_type != GgufValueType::array, ErrorCode::unsupported,
                "GgufWriter: key '{}': arrays of arrays are not supported", key);
    put<uint32_t>(out, static_cast<uint32_t>(v.elem_type));
    if (v.elem_type == GgufValueType::string) {
      put<uint64_t>(out, v.strings.size());
      for (const auto& s : v.strings) put_string(out, s);
    } else if (is_float(v.elem_type)) {
      put<uint64_t>(out, v.floats.size());
      for (double f : v.floats) put_float(out, v.elem_type, f);
    } else {
      put<uint64_t>(out, v.ints.size());
      for (int64_t i : v.ints) put_int(out, v.elem_type, i);
    }
  }
}

uint16_t f16_bits(float f) { return float_to_half_bits(f); }

}  // namespace

GgufWriter::GgufWriter(uint32_t version, uint64_t alignment) : version_(version), alignment_(alignment) {
  SPORE_CHECK(version == 2 || version == 3, ErrorCode::invalid_argument, "GgufWriter: version {} (2 or 3)", version);
  SPORE_CHECK(alignment > 0 && (alignment & (alignment - 1)) == 0, ErrorCode::invalid_argument,
              "GgufWriter: alignment {} is not a power of two", alignment);
  if (alignment != 32) add_int("general.alignment", static_cast<int64_t>(alignment), GgufValueType::u32);
}

void GgufWriter::add(const std::string& key, GgufValue value) {
  for (auto& [k, v] : kv_)
    if (k == key) {
      v = std::move(value);
      return;
    }
  kv_.emplace_back(key, std::move(value));
}
void GgufWriter::add_string(const std::string& key, std::string value) {
  GgufValue v;
  v.type = GgufValueType::string;
  v.s = std::move(value);
  add(key, std::move(v));
}
void GgufWriter::add_int(const std::string& key, int64_t value, GgufValueType type) {
  GgufValue v;
  v.type = type;
  v.i = value;
  add(key, std::move(v));
}
void GgufWriter::add_float(const std::string& key, double value, GgufValueType type) {
  GgufValue v;
  v.type = type;
  v.f = value;
  add(key, std::move(v));
}
void GgufWriter::add_bool(const std::string& key, bool value) { add_int(key, value, GgufValueType::boolean); }
void GgufWriter::add_strings(const std::string& key, std::vector<std::string> values) {
  GgufValue v;
  v.type = GgufValueType::array;
  v.elem_type = GgufValueType::string;
  v.strings = std::move(values);
  add(key, std::move(v));
}
void GgufWriter::add_ints(const std::string& key, std::vector<int64_t> values, GgufValueType elem) {
  GgufValue v;
  v.type = GgufValueType::array;
  v.elem_type = elem;
  v.ints = std::move(values);
  add(key, std::move(v));
}
void GgufWriter::add_floats(const std::string& key, std::vector<double> values, GgufValueType elem) {
  GgufValue v;
  v.type = GgufValueType::array;
  v.elem_type = elem;
  v.floats = std::move(values);
  add(key, std::move(v));
}

void GgufWriter::add_tensor_bytes(const std::string& name, GgmlType type, std::vector<int64_t> shape,
                                  std::string bytes) {
  auto layout = ggml_block_layout(type);
  SPORE_CHECK(layout, ErrorCode::unsupported, "GgufWriter: tensor '{}': unknown type {}", name,
              ggml_type_name(type));
  SPORE_CHECK(shape.size() <= 4, ErrorCode::invalid_argument, "GgufWriter: tensor '{}' has {} dims (at most 4)", name,
              shape.size());
  const int64_t numel = shape_numel(shape);
  const int64_t row = shape.empty() ? 1 : shape.back();
  SPORE_CHECK(numel > 0 && row % layout->first == 0, ErrorCode::invalid_argument,
              "GgufWriter: tensor '{}' {}: empty, or row length not a multiple of the {} block size {}", name,
              shape_str(shape), ggml_type_name(type), layout->first);
  SPORE_CHECK(static_cast<int64_t>(bytes.size()) == numel / layout->first * layout->second,
              ErrorCode::invalid_argument, "GgufWriter: tensor '{}' {} {}: {} bytes given, {} expected", name,
              ggml_type_name(type), shape_str(shape), bytes.size(), numel / layout->first * layout->second);
  for (const auto& e : tensors_)
    SPORE_CHECK(e.name != name, ErrorCode::invalid_argument, "GgufWriter: duplicate tensor '{}'", name);
  tensors_.push_back({name, type, std::move(shape), std::move(bytes)});
}

void GgufWriter::add_tensor(const std::string& name, const Tensor& t, GgmlType as) {
  SPORE_CHECK(t.defined() && !t.is_symbolic() && is_floating(t.dtype()), ErrorCode::invalid_argument,
              "GgufWriter: tensor '{}' must be a concrete float tensor", name);
  std::vector<float> f;
  if (t.dtype() == DType::f32) {
    Tensor c = t.contiguous();
    f.assign(c.data<float>(), c.data<float>() + c.numel());
  } else {
    for (double d : t.to_doubles()) f.push_back(static_cast<float>(d));
  }
  add_tensor_bytes(name, as, t.shape(), quantize_row(as, f.data(), static_cast<int64_t>(f.size())));
}

std::string GgufWriter::encode() const {
  std::string out;
  put<uint32_t>(out, 0x46554747);
  put<uint32_t>(out, version_);
  put<uint64_t>(out, tensors_.size());
  put<uint64_t>(out, kv_.size());
  for (const auto& [k, v] : kv_) {
    put_string(out, k);
    put_value(out, k, v);
  }
  auto align = [&](uint64_t x) { return (x + alignment_ - 1) / alignment_ * alignment_; };
  uint64_t offset = 0;
  for (const auto& e : tensors_) {
    put_string(out, e.name);
    put<uint32_t>(out, static_cast<uint32_t>(e.shape.size()));
    for (auto it = e.shape.rbegin(); it != e.shape.rend(); ++it) put<uint64_t>(out, static_cast<uint64_t>(*it));
    put<uint32_t>(out, static_cast<uint32_t>(e.type));
    put<uint64_t>(out, offset);
    offset = align(offset + e.bytes.size());
  }
  out.resize(align(out.size()), '\0');
  const size_t data_start = out.size();
  for (const auto& e : tensors_) {
    out.resize(align(out.size() - data_start) + data_start, '\0');
    out += e.bytes;
  }
  return out;
}

void GgufWriter::write(const std::string& path) const { write_file_atomic(path, encode()); }

std::string quantize_row(GgmlType t, const float* x, int64_t n) {
  auto layout = ggml_block_layout(t);
  SPORE_CHECK(layout && (t == GgmlType::f32 || t == GgmlType::f16 || t == GgmlType::bf16 || t == GgmlType::q8_0 ||
                         t == GgmlType::q4_0),
              ErrorCode::unsupported, "quantize_row: spore writes F32, F16, BF16, Q8_0 and Q4_0, not {}",
              ggml_type_name(t));
  SPORE_CHECK(n % layout->first == 0, ErrorCode::invalid_argument,
              "quantize_row: {} elements is not a multiple of the {} block size {}", n, ggml_type_name(t),
              layout->first);
  std::string out;
  out.reserve(static_cast<size_t>(n / layout->first * layout->second));
  switch (t) {
    case GgmlType::f32:
      out.assign(reinterpret_cast<const char*>(x), static_cast<size_t>(n) * 4);
      break;
    case GgmlType::f16:
      for (int64_t i = 0; i < n; ++i) put<uint16_t>(out, f16_bits(x[i]));
      break;
    case GgmlType::bf16:
      for (int64_t i = 0; i < n; ++i) put<uint16_t>(out, float_to_bf16_bits(x[i]));
      break;
    case GgmlType::q8_0:
      for (int64_t b = 0; b < n; b += 32) {
        float amax = 0;
        for (int j = 0; j < 32; ++j) amax = std::max(amax, std::fabs(x[b + j]));
        const float d = amax / 127.0f, id = d != 0 ? 1.0f / d : 0.0f;
        put<uint16_t>(out, f16_bits(d));
        for (int j = 0; j < 32; ++j) put<int8_t>(out, static_cast<int8_t>(std::lround(x[b + j] * id)));
      }
      break;
    case GgmlType::q4_0:
      // The scale maps the value of largest magnitude to -8, so the full 16-level range is used on that side.
      for (int64_t b = 0; b < n; b += 32) {
        float amax = 0, vmax = 0;
        for (int j = 0; j < 32; ++j)
          if (std::fabs(x[b + j]) > amax) {
            amax = std::fabs(x[b + j]);
            vmax = x[b + j];
          }
        const float d = vmax / -8.0f, id = d != 0 ? 1.0f / d : 0.0f;
        put<uint16_t>(out, f16_bits(d));
        for (int j = 0; j < 16; ++j) {
          const int lo = std::min(15, static_cast<int>(x[b + j] * id + 8.5f));
          const int hi = std::min(15, static_cast<int>(x[b + 16 + j] * id + 8.5f));
          put<uint8_t>(out, static_cast<uint8_t>(lo | (hi << 4)));
        }
      }
      break;
    default: break;
  }
  return out;
}

}  // namespace spore::io
