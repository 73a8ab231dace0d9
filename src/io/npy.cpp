#include "io/npy.h"

#include <cstring>

#include "io/file_util.h"

namespace spore::io {
namespace {

constexpr char kMagic[] = "\x93NUMPY";

struct Descr {
  const char* code;
  DType dtype;
};
// Sized codes NumPy writes for each dtype we support ('<' little endian, '|' byte-sized).
constexpr Descr kDescrs[] = {{"f8", DType::f64}, {"f4", DType::f32}, {"f2", DType::f16}, {"i8", DType::i64},
                             {"i4", DType::i32}, {"i1", DType::i8},  {"u1", DType::u8},  {"b1", DType::boolean}};

// Tiny parser for the header's Python dict literal: {'descr': '<f4', 'fortran_order': False, 'shape': (2, 3), }
class HeaderParser {
 public:
  HeaderParser(std::string_view s, const std::string& name, size_t base) : s_(s), name_(name), base_(base) {}

  void parse(std::string& descr, bool& fortran, Shape& shape, bool& has_descr, bool& has_shape) {
    skip_ws();
    expect('{');
    while (true) {
      skip_ws();
      if (peek() == '}') break;
      std::string key = parse_string();
      skip_ws();
      expect(':');
      skip_ws();
      if (key == "descr") {
        descr = parse_string();
        has_descr = true;
      } else if (key == "fortran_order") {
        fortran = parse_bool();
      } else if (key == "shape") {
        shape = parse_tuple();
        has_shape = true;
      } else {
        fail(fmt::format("unknown header key '{}'", key));
      }
      skip_ws();
      if (peek() == ',') {
        ++pos_;
        continue;
      }
      skip_ws();
      if (peek() != '}') fail("expected ',' or '}' in header dict");
    }
  }

 private:
  [[noreturn]] void fail(const std::string& what) const {
    SPORE_FAIL(ErrorCode::parse_error, "npy '{}': bad header at byte offset {}: {}", name_, base_ + pos_, what);
  }
  char peek() const { return pos_ < s_.size() ? s_[pos_] : '\0'; }
  void skip_ws() {
    while (pos_ < s_.size() && (s_[pos_] == ' ' || s_[pos_] == '\t')) ++pos_;
  }
  void expect(char c) {
    if (peek() != c) fail(fmt::format("expected '{}'", c));
    ++pos_;
  }
  std::string parse_string() {
    char q = peek();
    if (q != '\'' && q != '"') fail("expected a quoted string");
    size_t end = s_.find(q, pos_ + 1);
    if (end == std::string_view::npos) fail("unterminated string");
    std::string out(s_.substr(pos_ + 1, end - pos_ - 1));
    pos_ = end + 1;
    return out;
  }
  bool parse_bool() {
    if (s_.substr(pos_, 4) == "True") {
      pos_ += 4;
      return true;
    }
    if (s_.substr(pos_, 5) == "False") {
      pos_ += 5;
      return false;
    }
    fail("expected True or False");
  }
  Shape parse_tuple() {
    expect('(');
    Shape shape;
    while (true) {
      skip_ws();
      if (peek() == ')') break;
      if (peek() < '0' || peek() > '9') fail("expected a dimension");
      int64_t v = 0;
      while (peek() >= '0' && peek() <= '9') {
        if (v > (int64_t{1} << 50)) fail("dimension too large");
        v = v * 10 + (s_[pos_++] - '0');
      }
      if (peek() == 'L') ++pos_;  // Python 2 longs
      shape.push_back(v);
      skip_ws();
      if (peek() == ',')
        ++pos_;
      else if (peek() != ')')
        fail("expected ',' or ')' in shape");
    }
    ++pos_;
    return shape;
  }

  std::string_view s_;
  const std::string& name_;
  size_t base_;
  size_t pos_ = 0;
};

}  // namespace

Tensor parse_npy(const void* data, size_t size, const std::string& name) {
  const auto* p = static_cast<const unsigned char*>(data);
  SPORE_CHECK(size >= 10, ErrorCode::parse_error,
              "npy '{}': truncated at byte offset {} (file has {} bytes, need >= 10)", name, size, size);
  SPORE_CHECK(std::memcmp(p, kMagic, 6) == 0, ErrorCode::parse_error,
              "npy '{}': bad magic at byte offset 0 (expected \\x93NUMPY)", name);
  int major = p[6];
  SPORE_CHECK(major >= 1 && major <= 3, ErrorCode::unsupported,
              "npy '{}': unsupported format version {}.{} at byte offset 6", name, major, static_cast<int>(p[7]));
  size_t header_len = 0, header_start = 0;
  if (major == 1) {
    header_len = p[8] | (size_t{p[9]} << 8);
    header_start = 10;
  } else {
    SPORE_CHECK(size >= 12, ErrorCode::parse_error, "npy '{}': truncated at byte offset {} (header length)", name,
                size);
    header_len = p[8] | (size_t{p[9]} << 8) | (size_t{p[10]} << 16) | (size_t{p[11]} << 24);
    header_start = 12;
  }
  SPORE_CHECK(header_start + header_len <= size, ErrorCode::parse_error,
              "npy '{}': truncated at byte offset {} (header of {} bytes ends at {})", name, size, header_len,
              header_start + header_len);
  std::string descr;
  bool fortran = false, has_descr = false, has_shape = false;
  Shape shape;
  std::string_view header(reinterpret_cast<const char*>(p + header_start), header_len);
  HeaderParser(header, name, header_start).parse(descr, fortran, shape, has_descr, has_shape);
  SPORE_CHECK(has_descr && has_shape, ErrorCode::parse_error, "npy '{}': header at byte offset {} lacks '{}'", name,
              header_start, has_descr ? "shape" : "descr");

  std::optional<DType> dtype;
  if (descr.size() == 3 && (descr[0] == '<' || descr[0] == '|' || descr[0] == '=')) {
    for (const Descr& d : kDescrs)
      if (descr.compare(1, 2, d.code) == 0) dtype = d.dtype;
  }
  SPORE_CHECK(dtype.has_value(), ErrorCode::unsupported,
              "npy '{}': unsupported descr '{}' in header at byte offset {} (supported: f8 f4 f2 i8 i4 i1 u1 b1)",
              name, descr, header_start);

  size_t data_start = header_start + header_len;
  uint64_t count = 1;
  for (int64_t d : shape) {
    // Checked before multiplying so hostile dims cannot wrap around to a small size.
    SPORE_CHECK(d == 0 || count <= (uint64_t{1} << 48) / static_cast<uint64_t>(d), ErrorCode::parse_error,
                "npy '{}': shape {} too large (header at byte offset {})", name, shape_str(shape), header_start);
    count *= static_cast<uint64_t>(d);
  }
  int64_t numel = static_cast<int64_t>(count);
  size_t nbytes = static_cast<size_t>(numel) * dtype_size(*dtype);
  SPORE_CHECK(size - data_start >= nbytes, ErrorCode::parse_error,
              "npy '{}': truncated data: shape {} {} needs {} bytes from byte offset {}, file ends at {}", name,
              shape_str(shape), dtype_name(*dtype), nbytes, data_start, size);
  SPORE_CHECK(size - data_start == nbytes, ErrorCode::parse_error,
              "npy '{}': {} trailing bytes after data ending at byte offset {}", name, size - data_start - nbytes,
              data_start + nbytes);
  if (!fortran || shape.size() < 2) {
    Tensor t = Tensor::empty(shape, *dtype);
    if (nbytes) std::memcpy(t.raw_data(), p + data_start, nbytes);
    return t;
  }
  // Fortran order is C order of the reversed shape, transposed back.
  Shape rev(shape.rbegin(), shape.rend());
  Tensor t = Tensor::empty(rev, *dtype);
  if (nbytes) std::memcpy(t.raw_data(), p + data_start, nbytes);
  std::vector<int64_t> perm(shape.size());
  for (size_t i = 0; i < perm.size(); ++i) perm[i] = static_cast<int64_t>(perm.size() - 1 - i);
  return t.permute(perm).clone();
}

Tensor read_npy(const std::string& path) {
  std::string bytes = read_file_bytes(path);
  return parse_npy(bytes.data(), bytes.size(), path);
}

std::string encode_npy(const Tensor& t) {
  SPORE_CHECK(t.defined() && !t.is_symbolic(), ErrorCode::invalid_argument, "write_npy: tensor has no data");
  const char* code = nullptr;
  for (const Descr& d : kDescrs)
    if (d.dtype == t.dtype()) code = d.code;
  SPORE_CHECK(code != nullptr, ErrorCode::unsupported,
              "write_npy: dtype {} has no NumPy equivalent; convert to f32 first", dtype_name(t.dtype()));
  char order = dtype_size(t.dtype()) == 1 ? '|' : '<';
  std::string shape;
  for (int64_t d : t.shape()) shape += fmt::format("{}{}", shape.empty() ? "" : ", ", d);
  shape = t.rank() == 1 ? "(" + shape + ",)" : "(" + shape + ")";
  std::string dict = fmt::format("{{'descr': '{}{}', 'fortran_order': False, 'shape': {}, }}", order, code, shape);
  // Pad with spaces so the data starts at a multiple of 64 bytes, ending the header with '\n'.
  size_t prefix = 10;
  int version = 1;
  if (dict.size() + 1 + prefix > 65535) version = 2, prefix = 12;
  size_t total = (prefix + dict.size() + 1 + 63) / 64 * 64;
  dict.append(total - prefix - dict.size() - 1, ' ');
  dict += '\n';
  std::string out(kMagic, 6);
  out += static_cast<char>(version);
  out += '\0';
  size_t hl = dict.size();
  out += static_cast<char>(hl & 0xff);
  out += static_cast<char>((hl >> 8) & 0xff);
  if (version == 2) {
    out += static_cast<char>((hl >> 16) & 0xff);
    out += static_cast<char>((hl >> 24) & 0xff);
  }
  out += dict;
  Tensor c = t.contiguous();
  out.append(static_cast<const char*>(c.raw_data()), c.nbytes());
  return out;
}

void write_npy(const std::string& path, const Tensor& t) { write_file_atomic(path, encode_npy(t)); }

}  // namespace spore::io
