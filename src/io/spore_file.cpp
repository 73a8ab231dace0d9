// The .spore model file (byte layout in docs/FORMAT.md): a fixed header, the graph as text IR whose
// constants say `= tensor<K>`, a binary tensor index, metadata JSON, and the weights, every tensor
// 64-byte aligned so that a read-only mmap of the file can back the constants directly.
//
// Reading validates in the order a damaged file is best explained: magic, version, size (truncation),
// section layout, checksum, then the contents of each section (index, metadata, graph text) and
// finally ops::verify_graph. Every check names the file and the byte offset or entry it is about.
#include "io/spore_file.h"

#include <fcntl.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cctype>
#include <cerrno>
#include <cstring>
#include <nlohmann/json.hpp>

#include "base/error.h"
#include "io/file_util.h"
#include "io/model_file.h"
#include "ops/graph_ops.h"
#include "ops/registry.h"

namespace spore::io {

namespace spore_layout {

namespace {
constexpr uint64_t p1 = 0x9E3779B185EBCA87ull, p2 = 0xC2B2AE3D27D4EB4Full, p3 = 0x165667B19E3779F9ull,
                   p4 = 0x85EBCA77C2B2AE63ull, p5 = 0x27D4EB2F165667C5ull;
inline uint64_t rotl(uint64_t x, int r) { return (x << r) | (x >> (64 - r)); }
inline uint64_t read64(const uint8_t* p) {
  uint64_t v;
  std::memcpy(&v, p, 8);  // the format is little-endian, and so is every host spore builds for
  return v;
}
inline uint32_t read32(const uint8_t* p) {
  uint32_t v;
  std::memcpy(&v, p, 4);
  return v;
}
inline uint64_t xx_round(uint64_t acc, uint64_t input) { return rotl(acc + input * p2, 31) * p1; }
inline uint64_t xx_merge(uint64_t acc, uint64_t v) { return (acc ^ xx_round(0, v)) * p1 + p4; }
}  // namespace

uint64_t xxhash64(const void* data, size_t n, uint64_t seed) {
  const auto* p = static_cast<const uint8_t*>(data);
  const uint8_t* const end = p + n;
  uint64_t h;
  if (n >= 32) {
    uint64_t v1 = seed + p1 + p2, v2 = seed + p2, v3 = seed, v4 = seed - p1;
    const uint8_t* const limit = end - 32;
    do {
      v1 = xx_round(v1, read64(p));
      v2 = xx_round(v2, read64(p + 8));
      v3 = xx_round(v3, read64(p + 16));
      v4 = xx_round(v4, read64(p + 24));
      p += 32;
    } while (p <= limit);
    h = rotl(v1, 1) + rotl(v2, 7) + rotl(v3, 12) + rotl(v4, 18);
    h = xx_merge(h, v1);
    h = xx_merge(h, v2);
    h = xx_merge(h, v3);
    h = xx_merge(h, v4);
  } else {
    h = seed + p5;
  }
  h += static_cast<uint64_t>(n);
  for (; p + 8 <= end; p += 8) h = rotl(h ^ xx_round(0, read64(p)), 27) * p1 + p4;
  if (p + 4 <= end) {
    h = rotl(h ^ (static_cast<uint64_t>(read32(p)) * p1), 23) * p2 + p3;
    p += 4;
  }
  for (; p < end; ++p) h = rotl(h ^ (*p * p5), 11) * p1;
  h ^= h >> 33;
  h *= p2;
  h ^= h >> 29;
  h *= p3;
  h ^= h >> 32;
  return h;
}

uint64_t file_checksum(std::span<const uint8_t> file) {
  SPORE_ASSERT(file.size() >= header_bytes, "file_checksum needs the whole header");
  const uint64_t head = xxhash64(file.data(), off_checksum, 0);
  return xxhash64(file.data() + off_checksum + 8, file.size() - off_checksum - 8, head);
}

}  // namespace spore_layout

namespace {

using namespace spore_layout;

constexpr uint64_t kMaxElements = uint64_t{1} << 56;  // bounds shapes before multiplying (no wrap-around)

uint64_t align_up(uint64_t x) { return (x + alignment - 1) / alignment * alignment; }

void put_u8(std::string& out, uint8_t v) { out.push_back(static_cast<char>(v)); }
void put_u16(std::string& out, uint16_t v) { for (int i = 0; i < 2; ++i) out.push_back(static_cast<char>(v >> (8 * i))); }
void put_u32(std::string& out, uint32_t v) { for (int i = 0; i < 4; ++i) out.push_back(static_cast<char>(v >> (8 * i))); }
void put_u64(std::string& out, uint64_t v) { for (int i = 0; i < 8; ++i) out.push_back(static_cast<char>(v >> (8 * i))); }
void set_u64(std::string& out, size_t at, uint64_t v) {
  for (int i = 0; i < 8; ++i) out[at + i] = static_cast<char>(v >> (8 * i));
}
uint32_t get_u32(const uint8_t* p) { return p[0] | p[1] << 8 | p[2] << 16 | static_cast<uint32_t>(p[3]) << 24; }
uint64_t get_u64(const uint8_t* p) {
  uint64_t v = 0;
  for (int i = 7; i >= 0; --i) v = (v << 8) | p[i];
  return v;
}

struct Section {
  uint64_t offset = 0, size = 0;
};

// A bounds-checked cursor over the tensor index; errors give the file offset.
class IndexReader {
 public:
  IndexReader(const uint8_t* base, uint64_t begin, uint64_t end, const std::string& file)
      : base_(base), pos_(begin), end_(end), file_(file) {}
  uint64_t pos() const { return pos_; }
  bool done() const { return pos_ == end_; }
  const uint8_t* take(uint64_t n, const char* what) {
    SPORE_CHECK(n <= end_ - pos_, ErrorCode::parse_error,
                "spore file '{}': tensor index ends inside {} at byte offset {} (needs {} bytes, {} left)", file_, what,
                pos_, n, end_ - pos_);
    const uint8_t* p = base_ + pos_;
    pos_ += n;
    return p;
  }
  uint8_t u8(const char* what) { return *take(1, what); }
  uint16_t u16(const char* what) {
    const uint8_t* p = take(2, what);
    return static_cast<uint16_t>(p[0] | p[1] << 8);
  }
  uint32_t u32(const char* what) { return get_u32(take(4, what)); }
  uint64_t u64(const char* what) { return get_u64(take(8, what)); }

 private:
  const uint8_t* base_;
  uint64_t pos_, end_;
  const std::string& file_;
};

struct IndexEntry {
  std::string name;
  DType dtype = DType::f32;
  Shape shape;
  uint64_t offset = 0, size = 0;  // offset relative to the weights section
  uint64_t entry_at = 0;          // file offset of the entry (for errors)
};

std::string entry_label(size_t k, const IndexEntry& e) { return fmt::format("tensor<{}> '{}'", k, e.name); }

std::vector<IndexEntry> read_index(const uint8_t* p, const Section& idx, const Section& weights, const std::string& file) {
  IndexReader r(p, idx.offset, idx.offset + idx.size, file);
  const uint64_t count = r.u64("the tensor count");
  // Each entry takes at least 24 bytes; a count the section cannot hold is rejected before allocating.
  SPORE_CHECK(count <= idx.size / 24, ErrorCode::parse_error,
              "spore file '{}': tensor index at byte offset {} claims {} tensors, more than its {} bytes can hold", file,
              idx.offset, count, idx.size);
  std::vector<IndexEntry> entries(count);
  for (uint64_t k = 0; k < count; ++k) {
    IndexEntry& e = entries[k];
    e.entry_at = r.pos();
    const uint32_t name_size = r.u32("a tensor name length");
    const uint8_t* name = r.take(name_size, "a tensor name");
    e.name.assign(reinterpret_cast<const char*>(name), name_size);
    auto bad = [&](const std::string& what) {
      SPORE_FAIL(ErrorCode::parse_error, "spore file '{}': tensor index entry {} ('{}') at byte offset {}: {}", file, k,
                 e.name, e.entry_at, what);
    };
    const uint8_t code = r.u8("a dtype code");
    if (code >= num_dtypes) bad(fmt::format("bad dtype code {} (known codes are 0..{})", code, num_dtypes - 1));
    e.dtype = static_cast<DType>(code);
    const uint8_t rank = r.u8("a rank");
    if (const uint16_t reserved = r.u16("reserved bytes"); reserved != 0)
      bad(fmt::format("reserved bytes are {:#06x}, expected 0", reserved));
    uint64_t numel = 1;
    for (int d = 0; d < rank; ++d) {
      const uint64_t dim = r.u64("a dimension");
      if (dim > kMaxElements || (dim != 0 && numel > kMaxElements / dim))
        bad(fmt::format("dimension {} = {} makes the tensor impossibly large", d, static_cast<int64_t>(dim)));
      numel *= dim;
      e.shape.push_back(static_cast<int64_t>(dim));
    }
    e.offset = r.u64("a data offset");
    e.size = r.u64("a data size");
    const uint64_t want = numel * dtype_size(e.dtype);
    if (e.size != want)
      bad(fmt::format("size {} bytes, but shape {} of {} needs {}", e.size, shape_str(e.shape), dtype_name(e.dtype), want));
    if (e.offset % alignment != 0) bad(fmt::format("data offset {} is not a multiple of {}", e.offset, alignment));
    if (e.offset > weights.size || e.size > weights.size - e.offset)
      bad(fmt::format("data [{}, {}) runs past the end of the weights section ({} bytes, file offsets {}..{})", e.offset,
                      e.offset + e.size, weights.size, weights.offset, weights.offset + weights.size));
  }
  SPORE_CHECK(r.done(), ErrorCode::parse_error,
              "spore file '{}': {} unexpected bytes after the last tensor index entry (byte offset {})", file,
              idx.offset + idx.size - r.pos(), r.pos());
  // No two tensors may share bytes: each constant owns its data.
  std::vector<size_t> order(count);
  for (size_t k = 0; k < count; ++k) order[k] = k;
  std::sort(order.begin(), order.end(), [&](size_t a, size_t b) {
    return entries[a].offset != entries[b].offset ? entries[a].offset < entries[b].offset : a < b;
  });
  const IndexEntry* prev = nullptr;
  size_t prev_k = 0;
  for (size_t k : order) {
    const IndexEntry& e = entries[k];
    if (e.size == 0) continue;
    if (prev)
      SPORE_CHECK(e.offset >= prev->offset + prev->size, ErrorCode::parse_error,
                  "spore file '{}': {} (weights bytes [{}, {})) overlaps {} (weights bytes [{}, {}))", file,
                  entry_label(k, e), e.offset, e.offset + e.size, entry_label(prev_k, *prev), prev->offset,
                  prev->offset + prev->size);
    prev = &e;
    prev_k = k;
  }
  return entries;
}

std::map<std::string, std::string> read_metadata(const uint8_t* p, const Section& s, const std::string& file) {
  nlohmann::json j;
  try {
    j = nlohmann::json::parse(p + s.offset, p + s.offset + s.size);
  } catch (const nlohmann::json::exception& e) {
    SPORE_FAIL(ErrorCode::parse_error, "spore file '{}': metadata section at byte offset {} is not valid JSON: {}", file,
               s.offset, e.what());
  }
  SPORE_CHECK(j.is_object(), ErrorCode::parse_error, "spore file '{}': metadata at byte offset {} is not a JSON object",
              file, s.offset);
  std::map<std::string, std::string> out;
  for (auto& [k, v] : j.items()) {
    SPORE_CHECK(v.is_string(), ErrorCode::parse_error,
                "spore file '{}': metadata key '{}' has a {} value; values must be strings", file, k, v.type_name());
    out[k] = v.get<std::string>();
  }
  return out;
}

// Metadata key prefix naming the plugin each custom op came from: {"custom_op:scale2x": "testplugin"}.
constexpr std::string_view custom_op_key = "custom_op:";

// A graph that uses an op from a plugin that is not loaded cannot parse; say which plugin to load instead of
// "unknown op".
void check_custom_ops(const std::map<std::string, std::string>& metadata, const std::string& file, uint64_t meta_offset) {
  for (const auto& [key, plugin] : metadata) {
    if (key.rfind(custom_op_key, 0) != 0) continue;
    const std::string op = key.substr(custom_op_key.size());
    const OpDef* d = op_registry().find(std::string_view(op));
    SPORE_CHECK(d != nullptr, ErrorCode::not_found,
                "spore file '{}': op '{}' needs custom-op plugin '{}' (load it with --custom-ops)", file, op, plugin);
    SPORE_CHECK(d->plugin.empty() || d->plugin == plugin, ErrorCode::invalid_argument,
                "spore file '{}': op '{}' was saved from custom-op plugin '{}' (metadata at byte offset {}), but the "
                "loaded op '{}' comes from plugin '{}'",
                file, op, plugin, meta_offset, op, d->plugin);
  }
}

// Validates `n` bytes at `p` (which `backing` keeps alive, 64-byte aligned) and builds the graph whose
// constants are views of `backing`.
std::unique_ptr<Graph> decode(const uint8_t* p, uint64_t n, const std::shared_ptr<Storage>& backing,
                              const std::string& file, SporeFileInfo* info) {
  const size_t head = static_cast<size_t>(std::min<uint64_t>(n, sizeof(magic)));
  if (head > 0 && std::memcmp(p, magic, head) != 0) {
    std::string seen;
    for (size_t i = 0; i < head; ++i) seen += std::isprint(p[i]) ? std::string(1, static_cast<char>(p[i])) : fmt::format("\\x{:02x}", p[i]);
    SPORE_FAIL(ErrorCode::parse_error, "'{}' is not a .spore file: bad magic '{}' at byte offset 0 (expected 'SPOREMDL')",
               file, seen);
  }
  SPORE_CHECK(n >= off_header_size + 4, ErrorCode::parse_error,
              "spore file '{}' is truncated: expected at least {} header bytes, got {}", file, header_bytes, n);
  const uint32_t version = get_u32(p + off_version);
  SPORE_CHECK(version != 0, ErrorCode::parse_error, "spore file '{}': bad format version 0 at byte offset {}", file,
              off_version);
  SPORE_CHECK(version <= spore_format_version, ErrorCode::unsupported,
              "spore file '{}': format version {} is newer than this spore (reads <= {}); upgrade spore", file, version,
              spore_format_version);
  const uint32_t header_size = get_u32(p + off_header_size);
  SPORE_CHECK(header_size >= header_bytes && header_size % 8 == 0, ErrorCode::parse_error,
              "spore file '{}': header size {} at byte offset {} is invalid (version {} needs >= {}, a multiple of 8)", file,
              header_size, off_header_size, version, header_bytes);
  SPORE_CHECK(n >= header_bytes, ErrorCode::parse_error,
              "spore file '{}' is truncated: expected at least {} header bytes, got {}", file, header_bytes, n);
  const uint64_t file_size = get_u64(p + off_file_size);
  SPORE_CHECK(n >= file_size, ErrorCode::parse_error, "spore file '{}' is truncated: expected {} bytes, got {}", file,
              file_size, n);
  SPORE_CHECK(n == file_size, ErrorCode::parse_error,
              "spore file '{}' has {} bytes but its header (byte offset {}) says {}: trailing data", file, n, off_file_size,
              file_size);
  SPORE_CHECK(header_size <= n, ErrorCode::parse_error,
              "spore file '{}': header size {} is larger than the file ({} bytes)", file, header_size, n);

  Section sec[num_sections];
  for (int i = 0; i < num_sections; ++i) {
    const size_t at = off_sections + 16 * static_cast<size_t>(i);
    sec[i] = {get_u64(p + at), get_u64(p + at + 8)};
    SPORE_CHECK(sec[i].offset >= header_size && sec[i].offset <= n && sec[i].size <= n - sec[i].offset,
                ErrorCode::parse_error,
                "spore file '{}': {} section [{}, +{}) (header byte offset {}) lies outside the file body [{}, {})", file,
                section_names[i], sec[i].offset, sec[i].size, at, header_size, n);
  }
  for (int i = 0; i < num_sections; ++i) {
    for (int j = i + 1; j < num_sections; ++j) {
      const Section &a = sec[i], &b = sec[j];
      const bool disjoint = a.size == 0 || b.size == 0 || a.offset + a.size <= b.offset || b.offset + b.size <= a.offset;
      SPORE_CHECK(disjoint, ErrorCode::parse_error, "spore file '{}': {} section [{}, {}) overlaps {} section [{}, {})", file,
                  section_names[i], a.offset, a.offset + a.size, section_names[j], b.offset, b.offset + b.size);
    }
  }
  const Section &graph_s = sec[0], &index_s = sec[1], &meta_s = sec[2], &weights_s = sec[3];
  SPORE_CHECK(weights_s.offset % alignment == 0, ErrorCode::parse_error,
              "spore file '{}': weights section offset {} is not {}-byte aligned", file, weights_s.offset, alignment);

#ifndef FUZZING_BUILD_MODE_UNSAFE_FOR_PRODUCTION  // fuzzers cannot forge a hash; let them reach the parsers
  const uint64_t stored = get_u64(p + off_checksum);
  const uint64_t actual = file_checksum({p, static_cast<size_t>(n)});
  SPORE_CHECK(stored == actual, ErrorCode::parse_error,
              "spore file '{}': checksum mismatch: the header (byte offset {}) says {:016x}, the contents hash to "
              "{:016x}; the file is corrupt",
              file, off_checksum, stored, actual);
#endif

  const std::vector<IndexEntry> entries = read_index(p, index_s, weights_s, file);
  std::map<std::string, std::string> metadata = read_metadata(p, meta_s, file);
  check_custom_ops(metadata, file, meta_s.offset);

  std::vector<Tensor> tensors;
  tensors.reserve(entries.size());
  const uint64_t base = static_cast<uint64_t>(p - static_cast<const uint8_t*>(backing->data()));
  int64_t weight_bytes = 0;
  for (const IndexEntry& e : entries) {
    const uint64_t byte_offset = base + weights_s.offset + e.offset;  // 64-aligned: a multiple of any dtype size
    tensors.push_back(Tensor::from_storage(backing, e.shape, contiguous_strides(e.shape),
                                           static_cast<int64_t>(byte_offset / dtype_size(e.dtype)), e.dtype));
    weight_bytes += static_cast<int64_t>(e.size);
  }

  const std::string_view text(reinterpret_cast<const char*>(p + graph_s.offset), graph_s.size);
  std::unique_ptr<Graph> g;
  try {
    g = parse_graph(text, "graph", ParseOptions{.external_constants = tensors});
    verify_graph(*g);
  } catch (const Error& e) {
    throw Error(e.code(), fmt::format("spore file '{}': graph section (byte offset {}): {}", file, graph_s.offset, e.what()));
  }
  if (info) {
    info->format_version = version;
    const char* prod = reinterpret_cast<const char*>(p + off_producer);
    info->producer.assign(prod, strnlen(prod, producer_bytes));
    info->metadata = std::move(metadata);
    info->file_bytes = static_cast<int64_t>(n);
    info->weight_bytes = weight_bytes;
    info->num_tensors = static_cast<int64_t>(entries.size());
  }
  return g;
}

}  // namespace

std::string encode_spore(const Graph& g, const std::map<std::string, std::string>& metadata) {
  std::vector<const Node*> constants;
  const std::string text = print_graph(g, PrintOptions{.external_constants = &constants});

  std::string index;
  put_u64(index, constants.size());
  std::vector<Tensor> data;
  uint64_t weights_size = 0;
  for (const Node* n : constants) {
    const Tensor t = n->payload.contiguous();
    SPORE_CHECK(t.defined() && t.rank() <= 255, ErrorCode::invalid_argument,
                "encode_spore: constant {} has no data or more than 255 dims", n->label());
    const std::string& name = n->output(0)->name;
    put_u32(index, static_cast<uint32_t>(name.size()));
    index += name;
    put_u8(index, static_cast<uint8_t>(t.dtype()));
    put_u8(index, static_cast<uint8_t>(t.rank()));
    put_u16(index, 0);
    for (int64_t d : t.shape()) put_u64(index, static_cast<uint64_t>(d));
    put_u64(index, weights_size);
    put_u64(index, t.nbytes());
    weights_size = align_up(weights_size + t.nbytes());
    data.push_back(t);
  }
  // Plugin ops are recorded from the graph itself (stale entries of the caller's metadata are dropped).
  std::map<std::string, std::string> meta_map;
  for (const auto& [k, v] : metadata)
    if (k.rfind(custom_op_key, 0) != 0) meta_map[k] = v;
  for (const Node* n : g.nodes())
    if (const OpDef* d = op_registry().find(n->op); d && !d->plugin.empty())
      meta_map[std::string(custom_op_key) + d->name] = d->plugin;
  const std::string meta = nlohmann::json(meta_map).dump();

  const uint64_t graph_off = header_bytes, index_off = graph_off + text.size(), meta_off = index_off + index.size();
  const uint64_t weights_off = align_up(meta_off + meta.size());
  const uint64_t file_size = weights_off + weights_size;

  std::string out;
  out.reserve(file_size);
  out.append(magic, sizeof(magic));
  put_u32(out, spore_format_version);
  put_u32(out, header_bytes);
  put_u64(out, file_size);
  for (auto [off, size] : {std::pair{graph_off, text.size()}, {index_off, index.size()}, {meta_off, meta.size()},
                           {weights_off, weights_size}}) {
    put_u64(out, off);
    put_u64(out, size);
  }
  std::string producer = "spore " SPORE_VERSION;
  producer.resize(producer_bytes, '\0');
  out += producer;
  put_u64(out, 0);  // checksum, filled in below
  out += text;
  out += index;
  out += meta;
  out.resize(weights_off, '\0');
  for (const Tensor& t : data) {
    out.append(static_cast<const char*>(t.raw_data()), t.nbytes());
    out.resize(align_up(out.size()), '\0');
  }
  out.resize(file_size, '\0');
  set_u64(out, off_checksum, file_checksum({reinterpret_cast<const uint8_t*>(out.data()), out.size()}));
  return out;
}

void save_spore(const Graph& g, const std::string& path, const std::map<std::string, std::string>& metadata) {
  write_file_atomic(path, encode_spore(g, metadata));
}

std::unique_ptr<Graph> load_spore(const std::string& path, SporeFileInfo* info) {
  const int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
  SPORE_CHECK(fd >= 0, ErrorCode::io_error, "cannot open spore file '{}': {}", path, std::strerror(errno));
  struct stat st {};
  if (::fstat(fd, &st) != 0 || !S_ISREG(st.st_mode)) {
    const int err = errno;
    ::close(fd);
    SPORE_FAIL(ErrorCode::io_error, "spore file '{}' is not a regular file{}", path,
               S_ISDIR(st.st_mode) ? " (a directory)" : err ? std::string(": ") + std::strerror(err) : "");
  }
  const size_t n = static_cast<size_t>(st.st_size);
  if (n == 0) {
    ::close(fd);
    return decode(nullptr, 0, nullptr, path, info);  // throws: truncated
  }
  void* map = ::mmap(nullptr, n, PROT_READ, MAP_PRIVATE, fd, 0);
  const int err = errno;
  ::close(fd);  // the mapping keeps the file open
  SPORE_CHECK(map != MAP_FAILED, ErrorCode::io_error, "cannot mmap spore file '{}' ({} bytes): {}", path, n,
              std::strerror(err));
  // One Storage for the whole mapping; every constant is a view of it, and the last one to go unmaps.
  std::shared_ptr<Storage> mapping = Storage::wrap(map, n, [map, n] { ::munmap(map, n); });
  return decode(static_cast<const uint8_t*>(map), n, mapping, path, info);
}

std::unique_ptr<Graph> parse_spore(std::span<const uint8_t> bytes, const std::string& name, SporeFileInfo* info) {
  if (bytes.empty()) return decode(nullptr, 0, nullptr, name, info);  // throws: truncated
  std::shared_ptr<Storage> copy = Storage::allocate(bytes.size(), name.c_str());
  std::memcpy(copy->data(), bytes.data(), bytes.size());
  return decode(static_cast<const uint8_t*>(copy->data()), bytes.size(), copy, name, info);
}

}  // namespace spore::io
