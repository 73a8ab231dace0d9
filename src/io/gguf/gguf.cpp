#include "io/gguf/gguf.h"

#include <algorithm>
#include <bit>
#include <cerrno>
#include <cstring>

#include "base/half.h"
#include "io/file_util.h"

namespace spore::io {
namespace {

constexpr uint32_t kMagic = 0x46554747;  // "GGUF" read as a little-endian u32
constexpr int kMaxDims = 4;
// The element count of one tensor is capped well below 2^63 so byte sizes computed from it cannot overflow.
constexpr uint64_t kMaxElements = uint64_t{1} << 52;

struct TypeInfo {
  GgmlType type;
  const char* name;
  int64_t block;  // elements per block
  int64_t bytes;  // bytes per block
  bool decodable; // dequantize_row handles it
};

// Block sizes as ggml lays them out (ggml-common.h): the K-quants use 256-element super-blocks.
constexpr TypeInfo kTypes[] = {
    {GgmlType::f32, "F32", 1, 4, true},        {GgmlType::f16, "F16", 1, 2, true},
    {GgmlType::q4_0, "Q4_0", 32, 18, true},    {GgmlType::q4_1, "Q4_1", 32, 20, true},
    {GgmlType::q5_0, "Q5_0", 32, 22, true},    {GgmlType::q5_1, "Q5_1", 32, 24, true},
    {GgmlType::q8_0, "Q8_0", 32, 34, true},    {GgmlType::q8_1, "Q8_1", 32, 36, false},
    {GgmlType::q2_k, "Q2_K", 256, 84, false},  {GgmlType::q3_k, "Q3_K", 256, 110, false},
    {GgmlType::q4_k, "Q4_K", 256, 144, true},  {GgmlType::q5_k, "Q5_K", 256, 176, false},
    {GgmlType::q6_k, "Q6_K", 256, 210, true},  {GgmlType::q8_k, "Q8_K", 256, 292, false},
    {GgmlType::i8, "I8", 1, 1, true},          {GgmlType::i16, "I16", 1, 2, true},
    {GgmlType::i32, "I32", 1, 4, true},        {GgmlType::i64, "I64", 1, 8, true},
    {GgmlType::f64, "F64", 1, 8, true},        {GgmlType::bf16, "BF16", 1, 2, true},
};

const TypeInfo* type_info(GgmlType t) {
  for (const auto& ti : kTypes)
    if (ti.type == t) return &ti;
  return nullptr;
}

const char* value_type_name(GgufValueType t) {
  static constexpr const char* names[] = {"u8",   "i8",     "u16",   "i16", "u32", "i32", "f32",
                                          "bool", "string", "array", "u64", "i64", "f64"};
  auto i = static_cast<uint32_t>(t);
  return i < std::size(names) ? names[i] : "?";
}

bool is_int_type(GgufValueType t) {
  switch (t) {
    case GgufValueType::u8: case GgufValueType::i8: case GgufValueType::u16: case GgufValueType::i16:
    case GgufValueType::u32: case GgufValueType::i32: case GgufValueType::u64: case GgufValueType::i64:
    case GgufValueType::boolean:
      return true;
    default:
      return false;
  }
}
bool is_float_type(GgufValueType t) { return t == GgufValueType::f32 || t == GgufValueType::f64; }

// Bytes of one scalar of type t (strings: the minimum, their 8-byte length).
uint64_t scalar_size(GgufValueType t) {
  switch (t) {
    case GgufValueType::u8: case GgufValueType::i8: case GgufValueType::boolean: return 1;
    case GgufValueType::u16: case GgufValueType::i16: return 2;
    case GgufValueType::u32: case GgufValueType::i32: case GgufValueType::f32: return 4;
    default: return 8;
  }
}

// Bounds-checked little-endian reader; every error carries the file name and the byte offset.
class Reader {
 public:
  Reader(const uint8_t* p, size_t size, const std::string& file) : p_(p), size_(size), file_(file) {}

  size_t pos() const { return pos_; }
  size_t remaining() const { return size_ - pos_; }

  [[noreturn]] void fail(size_t at, const std::string& what) const {
    SPORE_FAIL(ErrorCode::parse_error, "gguf '{}': byte offset {}: {}", file_, at, what);
  }
  void need(uint64_t n, const std::string& what) const {
    if (n > remaining())
      fail(pos_, fmt::format("truncated: {} needs {} bytes, {} left in the file ({} bytes)", what, n, remaining(),
                             size_));
  }
  template <class T>
  T read(const std::string& what) {
    need(sizeof(T), what);
    T v;
    std::memcpy(&v, p_ + pos_, sizeof(T));
    pos_ += sizeof(T);
    return v;
  }
  std::string read_string(const std::string& what) {
    const size_t at = pos_;
    uint64_t n = read<uint64_t>(what + " length");
    if (n > remaining())
      fail(at, fmt::format("{} has length {}, past the end of the file ({} bytes left)", what, n, remaining()));
    std::string s(reinterpret_cast<const char*>(p_ + pos_), n);
    pos_ += n;
    return s;
  }

 private:
  const uint8_t* p_;
  size_t size_;
  const std::string& file_;
  size_t pos_ = 0;
};

int64_t read_int(Reader& r, GgufValueType t, const std::string& what) {
  switch (t) {
    case GgufValueType::u8: return r.read<uint8_t>(what);
    case GgufValueType::i8: return r.read<int8_t>(what);
    case GgufValueType::u16: return r.read<uint16_t>(what);
    case GgufValueType::i16: return r.read<int16_t>(what);
    case GgufValueType::u32: return r.read<uint32_t>(what);
    case GgufValueType::i32: return r.read<int32_t>(what);
    // u64 values above INT64_MAX wrap around; no GGUF key in use needs them.
    case GgufValueType::u64: return static_cast<int64_t>(r.read<uint64_t>(what));
    case GgufValueType::i64: return r.read<int64_t>(what);
    case GgufValueType::boolean: {
      const size_t at = r.pos();
      uint8_t b = r.read<uint8_t>(what);
      if (b > 1) r.fail(at, fmt::format("{}: bool value {} is neither 0 nor 1", what, b));
      return b;
    }
    default: SPORE_ASSERT(false, "read_int on a non-integer type");
  }
}

double read_float(Reader& r, GgufValueType t, const std::string& what) {
  return t == GgufValueType::f32 ? r.read<float>(what) : r.read<double>(what);
}

GgufValueType read_value_type(Reader& r, const std::string& what) {
  const size_t at = r.pos();
  uint32_t t = r.read<uint32_t>(what);
  if (t > static_cast<uint32_t>(GgufValueType::f64)) r.fail(at, fmt::format("{}: unknown value type {}", what, t));
  return static_cast<GgufValueType>(t);
}

GgufValue read_value(Reader& r, GgufValueType type, const std::string& key) {
  GgufValue v;
  v.type = type;
  const std::string what = fmt::format("value of key '{}'", key);
  if (type == GgufValueType::string) {
    v.s = r.read_string(what);
  } else if (is_float_type(type)) {
    v.f = read_float(r, type, what);
  } else if (type != GgufValueType::array) {
    v.i = read_int(r, type, what);
  } else {
    v.elem_type = read_value_type(r, fmt::format("array element type of key '{}'", key));
    const size_t at = r.pos();
    const uint64_t n = r.read<uint64_t>(fmt::format("array length of key '{}'", key));
    if (v.elem_type == GgufValueType::array)
      r.fail(at - 4, fmt::format("key '{}': arrays of arrays are not supported", key));
    // Checked before allocating, so a corrupt count cannot ask for gigabytes.
    if (n > r.remaining() / scalar_size(v.elem_type))
      r.fail(at, fmt::format("key '{}': array of {} {} elements runs past the end of the file ({} bytes left)", key, n,
                             value_type_name(v.elem_type), r.remaining()));
    if (v.elem_type == GgufValueType::string) {
      v.strings.reserve(n);
      for (uint64_t i = 0; i < n; ++i) v.strings.push_back(r.read_string(fmt::format("{}[{}]", key, i)));
    } else if (is_float_type(v.elem_type)) {
      v.floats.reserve(n);
      for (uint64_t i = 0; i < n; ++i) v.floats.push_back(read_float(r, v.elem_type, what));
    } else {
      v.ints.reserve(n);
      for (uint64_t i = 0; i < n; ++i) v.ints.push_back(read_int(r, v.elem_type, what));
    }
  }
  return v;
}

std::string type_desc(const GgufValue& v) {
  return v.type == GgufValueType::array ? fmt::format("array of {}", value_type_name(v.elem_type))
                                        : std::string(value_type_name(v.type));
}

}  // namespace

std::string_view ggml_type_name(GgmlType t) {
  if (const TypeInfo* ti = type_info(t)) return ti->name;
  // Unknown values: a per-thread buffer keeps the returned view valid until the next call on this thread.
  thread_local std::string buf;
  buf = fmt::format("type {}", static_cast<uint32_t>(t));
  return buf;
}

std::optional<std::pair<int64_t, int64_t>> ggml_block_layout(GgmlType t) {
  if (const TypeInfo* ti = type_info(t)) return std::make_pair(ti->block, ti->bytes);
  return std::nullopt;
}

GgufFile GgufFile::open(const std::string& path, bool use_mmap) {
  size_t size = 0;
  std::shared_ptr<void> bytes = load_file(path, size, use_mmap, "gguf");
  SPORE_CHECK(size > 0, ErrorCode::parse_error, "gguf '{}': byte offset 0: truncated: the file is empty", path);
  GgufFile f = parse(bytes.get(), size, path);
  f.mapping_ = std::move(bytes);
  return f;
}

GgufFile GgufFile::parse(const void* data, size_t size, const std::string& name) {
  GgufFile f;
  f.path_ = name;
  const auto* base = static_cast<const uint8_t*>(data);
  Reader r(base, size, name);

  const uint32_t magic = r.read<uint32_t>("magic");
  if (magic != kMagic)
    r.fail(0, fmt::format("bad magic 0x{:08x} (a GGUF file starts with the bytes 'GGUF')", magic));
  f.version_ = r.read<uint32_t>("version");
  if (f.version_ == 1)
    r.fail(4, "GGUF version 1 is unsupported (spore reads versions 2 and 3; convert the file with a newer llama.cpp)");
  if (f.version_ != 2 && f.version_ != 3)
    r.fail(4, fmt::format("unsupported GGUF version {} (spore reads versions 2 and 3)", f.version_));

  size_t at = r.pos();
  const uint64_t n_tensors = r.read<uint64_t>("tensor count");
  // A tensor info takes at least 24 bytes (name length, n_dims, type, offset), a key/value pair at least 13.
  if (n_tensors > r.remaining() / 24)
    r.fail(at, fmt::format("tensor count {} is impossible for a file of {} bytes", n_tensors, size));
  at = r.pos();
  const uint64_t n_kv = r.read<uint64_t>("metadata count");
  if (n_kv > r.remaining() / 13)
    r.fail(at, fmt::format("metadata count {} is impossible for a file of {} bytes", n_kv, size));

  for (uint64_t i = 0; i < n_kv; ++i) {
    at = r.pos();
    std::string key = r.read_string(fmt::format("key of metadata entry {}", i));
    if (f.metadata_.count(key)) r.fail(at, fmt::format("duplicate key '{}'", key));
    GgufValueType type = read_value_type(r, fmt::format("value type of key '{}'", key));
    const size_t value_at = r.pos();
    GgufValue v = read_value(r, type, key);
    if (key == "general.alignment") {
      if (!is_int_type(v.type) || v.type == GgufValueType::boolean)
        r.fail(value_at, fmt::format("key 'general.alignment' has type {}, expected an integer", type_desc(v)));
      if (v.i <= 0 || !std::has_single_bit(static_cast<uint64_t>(v.i)) || v.i > (int64_t{1} << 30))
        r.fail(value_at, fmt::format("key 'general.alignment' = {} is not a power of two", v.i));
      f.alignment_ = static_cast<uint64_t>(v.i);
    }
    f.metadata_.emplace(std::move(key), std::move(v));
  }

  f.tensors_.reserve(n_tensors);
  for (uint64_t i = 0; i < n_tensors; ++i) {
    at = r.pos();
    GgufTensorInfo t;
    t.name = r.read_string(fmt::format("name of tensor {}", i));
    if (f.tensor_index_.count(t.name)) r.fail(at, fmt::format("duplicate tensor '{}'", t.name));
    at = r.pos();
    const uint32_t n_dims = r.read<uint32_t>(fmt::format("n_dims of tensor '{}'", t.name));
    if (n_dims > kMaxDims)
      r.fail(at, fmt::format("tensor '{}' has {} dims (at most {} allowed)", t.name, n_dims, kMaxDims));
    std::vector<int64_t> ne(n_dims);
    uint64_t numel = 1;
    for (uint32_t d = 0; d < n_dims; ++d) {
      at = r.pos();
      const uint64_t n = r.read<uint64_t>(fmt::format("dim {} of tensor '{}'", d, t.name));
      if (n == 0 || n > kMaxElements / numel)
        r.fail(at, fmt::format("tensor '{}': dim {} = {} is zero or makes the tensor too large", t.name, d, n));
      numel *= n;
      ne[d] = static_cast<int64_t>(n);
    }
    t.shape.assign(ne.rbegin(), ne.rend());
    at = r.pos();
    const uint32_t type = r.read<uint32_t>(fmt::format("type of tensor '{}'", t.name));
    t.type = static_cast<GgmlType>(type);
    const TypeInfo* ti = type_info(t.type);
    if (!ti) r.fail(at, fmt::format("tensor '{}' has unknown ggml type {}", t.name, type));
    const int64_t row = n_dims ? ne[0] : 1;
    if (row % ti->block != 0)
      r.fail(at, fmt::format("tensor '{}': row length {} is not a multiple of the {} block size {}", t.name, row,
                             ti->name, ti->block));
    t.nbytes = numel / static_cast<uint64_t>(ti->block) * static_cast<uint64_t>(ti->bytes);
    at = r.pos();
    t.offset = r.read<uint64_t>(fmt::format("data offset of tensor '{}'", t.name));
    if (t.offset % f.alignment_ != 0)
      r.fail(at, fmt::format("tensor '{}': data offset {} is not a multiple of the alignment {}", t.name, t.offset,
                             f.alignment_));
    f.tensor_index_.emplace(t.name, f.tensors_.size());
    f.tensors_.push_back(std::move(t));
  }

  // The data section starts at the next multiple of the alignment. Files without tensors (vocab-only) may end
  // before it.
  const uint64_t data_start = (r.pos() + f.alignment_ - 1) / f.alignment_ * f.alignment_;
  if (!f.tensors_.empty()) {
    if (data_start > size)
      r.fail(r.pos(), fmt::format("truncated: the data section would start at byte {}, past the end of the file",
                                  data_start));
    const uint64_t data_size = size - data_start;
    std::vector<const GgufTensorInfo*> order;
    for (auto& t : f.tensors_) {
      if (t.offset > data_size || t.nbytes > data_size - t.offset)
        r.fail(data_start + std::min<uint64_t>(t.offset, data_size),
               fmt::format("tensor '{}' ({} {}, {} bytes) at data offset {} runs past the end of the file (data "
                           "section has {} bytes)",
                           t.name, ggml_type_name(t.type), shape_str(t.shape), t.nbytes, t.offset, data_size));
      t.data = base + data_start + t.offset;
      order.push_back(&t);
    }
    std::sort(order.begin(), order.end(),
              [](const GgufTensorInfo* a, const GgufTensorInfo* b) { return a->offset < b->offset; });
    for (size_t i = 1; i < order.size(); ++i)
      if (order[i]->offset < order[i - 1]->offset + order[i - 1]->nbytes)
        r.fail(data_start + order[i]->offset,
               fmt::format("tensor '{}' at data offset {} overlaps tensor '{}' (data offsets {}..{})", order[i]->name,
                           order[i]->offset, order[i - 1]->name, order[i - 1]->offset,
                           order[i - 1]->offset + order[i - 1]->nbytes));
  }
  return f;
}

const GgufValue* GgufFile::find(const std::string& key) const {
  auto it = metadata_.find(key);
  return it == metadata_.end() ? nullptr : &it->second;
}

namespace {
const GgufValue& need_key(const GgufFile& f, const std::string& key) {
  const GgufValue* v = f.find(key);
  SPORE_CHECK(v, ErrorCode::not_found, "gguf '{}': missing metadata key '{}'", f.path(), key);
  return *v;
}
[[noreturn]] void wrong_type(const GgufFile& f, const std::string& key, const GgufValue& v, const char* want) {
  SPORE_FAIL(ErrorCode::parse_error, "gguf '{}': metadata key '{}' has type {}, expected {}", f.path(), key,
             type_desc(v), want);
}
}  // namespace

std::string GgufFile::get_string(const std::string& key) const {
  const GgufValue& v = need_key(*this, key);
  if (v.type != GgufValueType::string) wrong_type(*this, key, v, "string");
  return v.s;
}
int64_t GgufFile::get_int(const std::string& key) const {
  const GgufValue& v = need_key(*this, key);
  if (!is_int_type(v.type)) wrong_type(*this, key, v, "an integer");
  return v.i;
}
double GgufFile::get_float(const std::string& key) const {
  const GgufValue& v = need_key(*this, key);
  if (is_float_type(v.type)) return v.f;
  if (is_int_type(v.type)) return static_cast<double>(v.i);
  wrong_type(*this, key, v, "a number");
}
const std::vector<std::string>& GgufFile::get_strings(const std::string& key) const {
  const GgufValue& v = need_key(*this, key);
  if (v.type != GgufValueType::array || v.elem_type != GgufValueType::string)
    wrong_type(*this, key, v, "array of string");
  return v.strings;
}
const std::vector<int64_t>& GgufFile::get_ints(const std::string& key) const {
  const GgufValue& v = need_key(*this, key);
  if (v.type != GgufValueType::array || !is_int_type(v.elem_type)) wrong_type(*this, key, v, "array of integers");
  return v.ints;
}
const std::vector<double>& GgufFile::get_floats(const std::string& key) const {
  const GgufValue& v = need_key(*this, key);
  if (v.type != GgufValueType::array || !is_float_type(v.elem_type)) wrong_type(*this, key, v, "array of floats");
  return v.floats;
}
std::string GgufFile::get_string_or(const std::string& key, std::string def) const {
  return has(key) ? get_string(key) : def;
}
int64_t GgufFile::get_int_or(const std::string& key, int64_t def) const { return has(key) ? get_int(key) : def; }
double GgufFile::get_float_or(const std::string& key, double def) const { return has(key) ? get_float(key) : def; }

const GgufTensorInfo* GgufFile::find_tensor(const std::string& name) const {
  auto it = tensor_index_.find(name);
  return it == tensor_index_.end() ? nullptr : &tensors_[it->second];
}

const GgufTensorInfo& GgufFile::tensor(const std::string& name) const {
  const GgufTensorInfo* t = find_tensor(name);
  SPORE_CHECK(t, ErrorCode::not_found, "gguf '{}': missing tensor '{}' ({} tensors in the file)", path_, name,
              tensors_.size());
  return *t;
}

const GgufTensorInfo& GgufFile::tensor(const std::string& name, const std::vector<int64_t>& shape) const {
  const GgufTensorInfo& t = tensor(name);
  SPORE_CHECK(t.shape == shape, ErrorCode::shape_mismatch, "gguf '{}': tensor '{}' ({}) has shape {}, expected {}",
              path_, name, ggml_type_name(t.type), shape_str(t.shape), shape_str(shape));
  return t;
}

Tensor GgufFile::view(const std::string& name) const {
  const GgufTensorInfo& t = tensor(name);
  DType dt;
  switch (t.type) {
    case GgmlType::f32: dt = DType::f32; break;
    case GgmlType::f16: dt = DType::f16; break;
    case GgmlType::bf16: dt = DType::bf16; break;
    case GgmlType::f64: dt = DType::f64; break;
    case GgmlType::i8: dt = DType::i8; break;
    case GgmlType::i32: dt = DType::i32; break;
    case GgmlType::i64: dt = DType::i64; break;
    default:
      SPORE_FAIL(ErrorCode::unsupported,
                 "gguf '{}': tensor '{}' has type {}, which has no spore dtype (use dequantize_f32 or the raw bytes)",
                 path_, name, ggml_type_name(t.type));
  }
  // A small alignment (e.g. 1) can leave the data misaligned for its element type: copy then.
  if (reinterpret_cast<uintptr_t>(t.data) % dtype_size(dt) != 0) {
    Tensor out = Tensor::empty(t.shape, dt);
    std::memcpy(out.raw_data(), t.data, t.nbytes);
    return out;
  }
  auto storage = Storage::wrap(const_cast<uint8_t*>(t.data), t.nbytes, [keep = mapping_] {});
  return Tensor::from_storage(std::move(storage), t.shape, contiguous_strides(t.shape), 0, dt);
}

Tensor GgufFile::dequantize_f32(const std::string& name) const {
  const GgufTensorInfo& t = tensor(name);
  const TypeInfo* ti = type_info(t.type);
  SPORE_CHECK(ti && ti->decodable, ErrorCode::unsupported,
              "gguf '{}': tensor '{}' has type {}, which spore cannot dequantize (supported: F32 F16 BF16 F64 I8 I16 "
              "I32 I64 Q4_0 Q4_1 Q5_0 Q5_1 Q8_0 Q4_K Q6_K)",
              path_, name, ggml_type_name(t.type));
  Tensor out = Tensor::empty(t.shape, DType::f32);
  dequantize_row(t.type, t.data, out.data<float>(), out.numel());
  return out;
}

namespace {

inline float f16_at(const uint8_t* p) {
  uint16_t h;
  std::memcpy(&h, p, 2);
  return half_bits_to_float(h);
}

// Q4_K packs 8 (scale, min) pairs of 6 bits into 12 bytes: the first four pairs in the low 6 bits of bytes 0-3
// (scales) and 4-7 (mins); the last four take their low 4 bits from bytes 8-11 and their top 2 bits from the high
// bits of bytes 0-3 / 4-7.
inline void q4k_scale_min(int j, const uint8_t* s, int& sc, int& m) {
  if (j < 4) {
    sc = s[j] & 63;
    m = s[j + 4] & 63;
  } else {
    sc = (s[j + 4] & 0x0f) | ((s[j - 4] >> 6) << 4);
    m = (s[j + 4] >> 4) | ((s[j] >> 6) << 4);
  }
}

}  // namespace

void dequantize_row(GgmlType t, const void* src, float* dst, int64_t n) {
  const TypeInfo* ti = type_info(t);
  SPORE_CHECK(ti && ti->decodable, ErrorCode::unsupported, "dequantize_row: unsupported ggml type {}",
              ggml_type_name(t));
  SPORE_CHECK(n >= 0 && n % ti->block == 0, ErrorCode::invalid_argument,
              "dequantize_row: {} elements is not a multiple of the {} block size {}", n, ti->name, ti->block);
  const auto* p = static_cast<const uint8_t*>(src);
  const int64_t nb = n / ti->block;
  switch (t) {
    case GgmlType::f32: std::memcpy(dst, p, static_cast<size_t>(n) * 4); return;
    case GgmlType::f16:
      for (int64_t i = 0; i < n; ++i) dst[i] = f16_at(p + 2 * i);
      return;
    case GgmlType::bf16:
      for (int64_t i = 0; i < n; ++i) {
        uint16_t b;
        std::memcpy(&b, p + 2 * i, 2);
        dst[i] = bf16_bits_to_float(b);
      }
      return;
    case GgmlType::f64:
      for (int64_t i = 0; i < n; ++i) {
        double d;
        std::memcpy(&d, p + 8 * i, 8);
        dst[i] = static_cast<float>(d);
      }
      return;
    case GgmlType::i8:
      for (int64_t i = 0; i < n; ++i) dst[i] = static_cast<int8_t>(p[i]);
      return;
    case GgmlType::i16:
      for (int64_t i = 0; i < n; ++i) {
        int16_t v;
        std::memcpy(&v, p + 2 * i, 2);
        dst[i] = v;
      }
      return;
    case GgmlType::i32:
      for (int64_t i = 0; i < n; ++i) {
        int32_t v;
        std::memcpy(&v, p + 4 * i, 4);
        dst[i] = static_cast<float>(v);
      }
      return;
    case GgmlType::i64:
      for (int64_t i = 0; i < n; ++i) {
        int64_t v;
        std::memcpy(&v, p + 8 * i, 8);
        dst[i] = static_cast<float>(v);
      }
      return;
    case GgmlType::q8_0:  // d (f16), 32 x int8
      for (int64_t b = 0; b < nb; ++b, p += 34, dst += 32) {
        const float d = f16_at(p);
        for (int j = 0; j < 32; ++j) dst[j] = d * static_cast<float>(static_cast<int8_t>(p[2 + j]));
      }
      return;
    case GgmlType::q4_0:  // d, 16 bytes of nibbles: low nibbles are elements 0-15, high nibbles 16-31; offset 8
      for (int64_t b = 0; b < nb; ++b, p += 18, dst += 32) {
        const float d = f16_at(p);
        for (int j = 0; j < 16; ++j) {
          dst[j] = d * static_cast<float>((p[2 + j] & 0x0f) - 8);
          dst[j + 16] = d * static_cast<float>((p[2 + j] >> 4) - 8);
        }
      }
      return;
    case GgmlType::q4_1:  // d, m, nibbles as Q4_0; x = q*d + m
      for (int64_t b = 0; b < nb; ++b, p += 20, dst += 32) {
        const float d = f16_at(p), m = f16_at(p + 2);
        for (int j = 0; j < 16; ++j) {
          dst[j] = d * static_cast<float>(p[4 + j] & 0x0f) + m;
          dst[j + 16] = d * static_cast<float>(p[4 + j] >> 4) + m;
        }
      }
      return;
    case GgmlType::q5_0:
    case GgmlType::q5_1: {
      // Q5_0: d, 32 high bits (u32), nibbles; offset 16. Q5_1: d, m, high bits, nibbles; x = q*d + m.
      const bool has_min = t == GgmlType::q5_1;
      const int64_t bytes = has_min ? 24 : 22;
      for (int64_t b = 0; b < nb; ++b, p += bytes, dst += 32) {
        const float d = f16_at(p), m = has_min ? f16_at(p + 2) : 0.0f;
        const uint8_t* hp = p + (has_min ? 4 : 2);
        const uint8_t* qs = hp + 4;
        uint32_t qh;
        std::memcpy(&qh, hp, 4);
        const int off = has_min ? 0 : 16;
        for (int j = 0; j < 16; ++j) {
          const int lo = (qs[j] & 0x0f) | static_cast<int>(((qh >> j) & 1u) << 4);
          const int hi = (qs[j] >> 4) | static_cast<int>(((qh >> (j + 16)) & 1u) << 4);
          dst[j] = d * static_cast<float>(lo - off) + m;
          dst[j + 16] = d * static_cast<float>(hi - off) + m;
        }
      }
      return;
    }
    case GgmlType::q4_k:
      // d, dmin (f16), 12 bytes of 6-bit (scale, min) pairs, 128 bytes of nibbles. Each 64 elements: 32 bytes, low
      // nibbles with pair 2k, high nibbles with pair 2k+1; x = d*scale*q - dmin*min.
      for (int64_t b = 0; b < nb; ++b, p += 144) {
        const float d = f16_at(p), dmin = f16_at(p + 2);
        const uint8_t* scales = p + 4;
        const uint8_t* q = p + 16;
        for (int g = 0; g < 4; ++g, q += 32) {
          int sc0, m0, sc1, m1;
          q4k_scale_min(2 * g, scales, sc0, m0);
          q4k_scale_min(2 * g + 1, scales, sc1, m1);
          const float d0 = d * static_cast<float>(sc0), mm0 = dmin * static_cast<float>(m0);
          const float d1 = d * static_cast<float>(sc1), mm1 = dmin * static_cast<float>(m1);
          for (int l = 0; l < 32; ++l) *dst++ = d0 * static_cast<float>(q[l] & 0x0f) - mm0;
          for (int l = 0; l < 32; ++l) *dst++ = d1 * static_cast<float>(q[l] >> 4) - mm1;
        }
      }
      return;
    case GgmlType::q6_k:
      // 128 bytes low nibbles (ql), 64 bytes of 2-bit high parts (qh), 16 int8 scales, d (f16). Each half of 128
      // elements uses 64 ql bytes, 32 qh bytes and 8 scales (one per 16 elements); offset 32.
      for (int64_t b = 0; b < nb; ++b, p += 210) {
        const uint8_t* ql = p;
        const uint8_t* qh = p + 128;
        const auto* sc = reinterpret_cast<const int8_t*>(p + 192);
        const float d = f16_at(p + 208);
        for (int half = 0; half < 2; ++half, ql += 64, qh += 32, sc += 8, dst += 128) {
          for (int l = 0; l < 32; ++l) {
            const int is = l / 16;
            const int q1 = ((ql[l] & 0x0f) | ((qh[l] & 3) << 4)) - 32;
            const int q2 = ((ql[l + 32] & 0x0f) | (((qh[l] >> 2) & 3) << 4)) - 32;
            const int q3 = ((ql[l] >> 4) | (((qh[l] >> 4) & 3) << 4)) - 32;
            const int q4 = ((ql[l + 32] >> 4) | (((qh[l] >> 6) & 3) << 4)) - 32;
            dst[l] = d * static_cast<float>(sc[is]) * static_cast<float>(q1);
            dst[l + 32] = d * static_cast<float>(sc[is + 2]) * static_cast<float>(q2);
            dst[l + 64] = d * static_cast<float>(sc[is + 4]) * static_cast<float>(q3);
            dst[l + 96] = d * static_cast<float>(sc[is + 6]) * static_cast<float>(q4);
          }
        }
      }
      return;
    default: SPORE_ASSERT(false, "dequantize_row: decodable type {} not handled", ti->name);
  }
}

}  // namespace spore::io
