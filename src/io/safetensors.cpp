#include "io/safetensors.h"

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <nlohmann/json.hpp>

#include "io/file_util.h"

namespace spore::io {
namespace {

constexpr std::pair<const char*, DType> kDtypes[] = {
    {"F64", DType::f64}, {"F32", DType::f32}, {"F16", DType::f16}, {"BF16", DType::bf16},   {"I64", DType::i64},
    {"I32", DType::i32}, {"I8", DType::i8},   {"U8", DType::u8},   {"BOOL", DType::boolean}};
// Dtypes valid in the format that spore has no type for.
constexpr const char* kForeign[] = {"I16", "U16", "U32", "U64", "F8_E4M3", "F8_E5M2"};

std::optional<DType> st_dtype(const std::string& s) {
  for (auto& [n, t] : kDtypes)
    if (s == n) return t;
  return std::nullopt;
}
const char* st_name(DType t) {
  for (auto& [n, d] : kDtypes)
    if (d == t) return n;
  return "?";
}

struct Entry {
  std::string name;
  DType dtype;
  Shape shape;
  uint64_t begin, end;
  bool skip;
};

// With `mapping` set, tensors alias `data` (which the mapping keeps alive) instead of being copied.
SafetensorsFile parse_impl(const void* data, size_t size, const std::string& file, bool skip_unsupported,
                           const std::shared_ptr<void>& mapping) {
  const auto* p = static_cast<const unsigned char*>(data);
  SPORE_CHECK(size >= 8, ErrorCode::parse_error,
              "safetensors '{}': truncated at byte offset {} (need an 8-byte header length)", file, size);
  uint64_t n = 0;
  for (int i = 7; i >= 0; --i) n = (n << 8) | p[i];
  SPORE_CHECK(n <= size - 8, ErrorCode::parse_error,
              "safetensors '{}': header length {} at byte offset 0 runs past the end of the file ({} bytes)", file, n,
              size);
  nlohmann::json header;
  try {
    header = nlohmann::json::parse(reinterpret_cast<const char*>(p + 8), reinterpret_cast<const char*>(p + 8 + n));
  } catch (const nlohmann::json::parse_error& e) {
    SPORE_FAIL(ErrorCode::parse_error, "safetensors '{}': bad header JSON at byte offset {}: {}", file, 8 + e.byte,
               e.what());
  }
  SPORE_CHECK(header.is_object(), ErrorCode::parse_error,
              "safetensors '{}': header at byte offset 8 is not a JSON object", file);
  const uint64_t data_start = 8 + n, data_size = size - data_start;
  SafetensorsFile out;
  std::vector<Entry> entries;
  for (auto& item : header.items()) {  // no structured binding: clang 14 cannot capture one in `bad` below
    const std::string& name = item.key();
    auto& v = item.value();
    if (name == "__metadata__") {
      SPORE_CHECK(v.is_object(), ErrorCode::parse_error, "safetensors '{}': __metadata__ is not an object", file);
      for (auto& [k, mv] : v.items()) {
        SPORE_CHECK(mv.is_string(), ErrorCode::parse_error, "safetensors '{}': __metadata__['{}'] is not a string",
                    file, k);
        out.metadata[k] = mv.get<std::string>();
      }
      continue;
    }
    auto bad = [&](const std::string& what) {
      SPORE_FAIL(ErrorCode::parse_error, "safetensors '{}': tensor '{}': {}", file, name, what);
    };
    if (!v.is_object() || !v.contains("dtype") || !v.contains("shape") || !v.contains("data_offsets"))
      bad("entry needs dtype, shape and data_offsets");
    const auto& jd = v["dtype"];
    const auto& js = v["shape"];
    const auto& jo = v["data_offsets"];
    if (!jd.is_string()) bad("dtype is not a string");
    if (!js.is_array()) bad("shape is not an array");
    if (!jo.is_array() || jo.size() != 2 || !jo[0].is_number_unsigned() || !jo[1].is_number_unsigned())
      bad("data_offsets must be [begin, end] of non-negative integers");
    Entry e{name, DType::u8, {}, jo[0].get<uint64_t>(), jo[1].get<uint64_t>(), false};
    for (const auto& d : js) {
      if (!d.is_number_unsigned() || d.get<uint64_t>() > (uint64_t{1} << 56))
        bad("shape has a non-integer, negative or huge dimension");
      e.shape.push_back(d.get<int64_t>());
    }
    std::string ds = jd.get<std::string>();
    size_t elem = 0;
    if (auto t = st_dtype(ds)) {
      e.dtype = *t;
      elem = dtype_size(*t);
    } else {
      bool foreign = std::find_if(std::begin(kForeign), std::end(kForeign), [&](const char* f) { return ds == f; }) !=
                     std::end(kForeign);
      if (!foreign || !skip_unsupported)
        SPORE_FAIL(ErrorCode::unsupported,
                   "safetensors '{}': tensor '{}': unsupported dtype '{}' (spore reads F64 F32 "
                   "F16 BF16 I64 I32 I8 U8 BOOL)",
                   file, name, ds);
      e.skip = true;
      elem = ds.starts_with("F8") ? 1 : ds.ends_with("16") ? 2 : ds.ends_with("32") ? 4 : 8;
    }
    if (e.begin > e.end) bad(fmt::format("data_offsets [{}, {}] begin after end", e.begin, e.end));
    if (e.end > data_size)
      bad(fmt::format("data_offsets [{}, {}] out of range: data section has {} bytes (file offset {} > {})", e.begin,
                      e.end, data_size, data_start + e.end, size));
    uint64_t want = elem;
    for (int64_t d : e.shape) {
      // Checked before multiplying so hostile shapes cannot wrap around to a small size.
      if (d != 0 && want > (uint64_t{1} << 56) / static_cast<uint64_t>(d))
        bad(fmt::format("shape {} too large", shape_str(e.shape)));
      want *= static_cast<uint64_t>(d);
    }
    if (e.end - e.begin != want)
      bad(fmt::format("data_offsets [{}, {}] span {} bytes, but shape {} of {} needs {}", e.begin, e.end,
                      e.end - e.begin, shape_str(e.shape), ds, want));
    entries.push_back(std::move(e));
  }
  // The buffer must be exactly covered: no overlaps and no holes (as the reference implementation requires).
  std::vector<const Entry*> order;
  for (const auto& e : entries) order.push_back(&e);
  std::sort(order.begin(), order.end(), [](const Entry* a, const Entry* b) {
    return a->begin != b->begin ? a->begin < b->begin : a->end < b->end;
  });
  uint64_t pos = 0;
  const Entry* prev = nullptr;
  for (const Entry* e : order) {
    SPORE_CHECK(e->begin >= pos, ErrorCode::parse_error,
                "safetensors '{}': tensor '{}' at data offset {} overlaps tensor '{}' ending at {}", file, e->name,
                e->begin, prev ? prev->name : "", pos);
    SPORE_CHECK(e->begin == pos, ErrorCode::parse_error,
                "safetensors '{}': hole in data section: bytes [{}, {}) before tensor '{}' belong to no tensor", file,
                pos, e->begin, e->name);
    pos = e->end;
    prev = e;
  }
  SPORE_CHECK(pos == data_size, ErrorCode::parse_error,
              "safetensors '{}': {} trailing bytes after data offset {} belong to no tensor", file, data_size - pos,
              pos);
  for (const auto& e : entries) {
    if (e.skip) {
      out.skipped.push_back(e.name);
      continue;
    }
    const unsigned char* src = p + data_start + e.begin;
    // The header length is arbitrary, so data can be misaligned for its dtype: such tensors are copied.
    if (mapping && e.end > e.begin && reinterpret_cast<uintptr_t>(src) % dtype_size(e.dtype) == 0) {
      auto storage = Storage::wrap(const_cast<unsigned char*>(src), e.end - e.begin, [keep = mapping] {});
      out.tensors.emplace(e.name,
                          Tensor::from_storage(std::move(storage), e.shape, contiguous_strides(e.shape), 0, e.dtype));
      continue;
    }
    Tensor t = Tensor::empty(e.shape, e.dtype);
    if (e.end > e.begin) std::memcpy(t.raw_data(), src, e.end - e.begin);
    out.tensors.emplace(e.name, std::move(t));
  }
  return out;
}

}  // namespace

SafetensorsFile parse_safetensors(const void* data, size_t size, const std::string& file, bool skip_unsupported) {
  return parse_impl(data, size, file, skip_unsupported, nullptr);
}

SafetensorsFile map_safetensors(const std::string& path, bool skip_unsupported, bool use_mmap) {
  size_t size = 0;
  std::shared_ptr<void> bytes = load_file(path, size, use_mmap, "");
  if (size == 0) return parse_impl("", 0, path, skip_unsupported, nullptr);  // the parser reports the truncation
  const void* data = bytes.get();
  return parse_impl(data, size, path, skip_unsupported, bytes);
}

SafetensorsFile read_safetensors(const std::string& path, bool skip_unsupported) {
  std::string bytes = read_file_bytes(path);
  return parse_safetensors(bytes.data(), bytes.size(), path, skip_unsupported);
}

std::string encode_safetensors(const std::map<std::string, Tensor>& tensors,
                               const std::map<std::string, std::string>& metadata) {
  nlohmann::json header = nlohmann::json::object();
  if (!metadata.empty()) header["__metadata__"] = metadata;
  uint64_t offset = 0;
  std::vector<Tensor> packed;
  for (const auto& [name, t] : tensors) {
    SPORE_CHECK(name != "__metadata__", ErrorCode::invalid_argument, "write_safetensors: '__metadata__' is reserved");
    SPORE_CHECK(t.defined() && !t.is_symbolic(), ErrorCode::invalid_argument,
                "write_safetensors: tensor '{}' has no data", name);
    packed.push_back(t.contiguous());
    uint64_t nb = packed.back().nbytes();
    header[name] = {{"dtype", st_name(t.dtype())}, {"shape", t.shape()}, {"data_offsets", {offset, offset + nb}}};
    offset += nb;
  }
  std::string js = header.dump();
  js.append((8 - js.size() % 8) % 8, ' ');  // keeps the data section 8-byte aligned
  std::string out(8, '\0');
  for (int i = 0; i < 8; ++i) out[i] = static_cast<char>((static_cast<uint64_t>(js.size()) >> (8 * i)) & 0xff);
  out += js;
  out.reserve(out.size() + offset);
  for (const Tensor& t : packed) out.append(static_cast<const char*>(t.raw_data()), t.nbytes());
  return out;
}

void write_safetensors(const std::string& path, const std::map<std::string, Tensor>& tensors,
                       const std::map<std::string, std::string>& metadata) {
  write_file_atomic(path, encode_safetensors(tensors, metadata));
}

void load_into(std::map<std::string, Tensor>& params, const std::string& path) {
  SafetensorsFile f = read_safetensors(path);
  std::vector<std::string> problems;
  for (const auto& [name, p] : params) {
    auto it = f.tensors.find(name);
    if (it == f.tensors.end()) {
      problems.push_back(
          fmt::format("missing tensor '{}' (expected {} {})", name, dtype_name(p.dtype()), shape_str(p.shape())));
    } else if (it->second.shape() != p.shape()) {
      problems.push_back(fmt::format("tensor '{}' has shape {}, expected {}", name, shape_str(it->second.shape()),
                                     shape_str(p.shape())));
    } else if (it->second.dtype() != p.dtype()) {
      problems.push_back(fmt::format("tensor '{}' has dtype {}, expected {}", name, dtype_name(it->second.dtype()),
                                     dtype_name(p.dtype())));
    }
  }
  for (const auto& [name, t] : f.tensors)
    if (!params.count(name))
      problems.push_back(
          fmt::format("unexpected tensor '{}' ({} {})", name, dtype_name(t.dtype()), shape_str(t.shape())));
  if (!problems.empty()) {
    std::string msg = fmt::format("load_into '{}': {} problem(s):", path, problems.size());
    for (const auto& s : problems) msg += "\n  " + s;
    throw_error(ErrorCode::shape_mismatch, msg);
  }
  for (auto& [name, p] : params) copy_strided(f.tensors.at(name), p);
}

}  // namespace spore::io
