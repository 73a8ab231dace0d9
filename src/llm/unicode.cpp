#include "llm/unicode.h"

#include <algorithm>
#include <array>

namespace spore::llm {

size_t utf8_len(uint8_t b) {
  if (b < 0x80) return 1;
  if ((b & 0xE0) == 0xC0) return 2;
  if ((b & 0xF0) == 0xE0) return 3;
  if ((b & 0xF8) == 0xF0) return 4;
  return 1;
}

uint32_t utf8_next(std::string_view s, size_t& pos) {
  const auto b0 = static_cast<uint8_t>(s[pos]);
  const size_t n = utf8_len(b0);
  if (n == 1) {
    ++pos;
    return b0 < 0x80 ? b0 : 0xFFFD;
  }
  if (pos + n > s.size()) {
    ++pos;
    return 0xFFFD;
  }
  uint32_t cp = b0 & (0x7F >> n);
  for (size_t i = 1; i < n; ++i) {
    const auto b = static_cast<uint8_t>(s[pos + i]);
    if ((b & 0xC0) != 0x80) {
      ++pos;
      return 0xFFFD;
    }
    cp = (cp << 6) | (b & 0x3F);
  }
  pos += n;
  return cp;
}

std::vector<uint32_t> utf8_decode(std::string_view s) {
  std::vector<uint32_t> out;
  out.reserve(s.size());
  for (size_t pos = 0; pos < s.size();) out.push_back(utf8_next(s, pos));
  return out;
}

void utf8_append(std::string& out, uint32_t cp) {
  if (cp < 0x80) {
    out += static_cast<char>(cp);
  } else if (cp < 0x800) {
    out += static_cast<char>(0xC0 | (cp >> 6));
    out += static_cast<char>(0x80 | (cp & 0x3F));
  } else if (cp < 0x10000) {
    out += static_cast<char>(0xE0 | (cp >> 12));
    out += static_cast<char>(0x80 | ((cp >> 6) & 0x3F));
    out += static_cast<char>(0x80 | (cp & 0x3F));
  } else {
    out += static_cast<char>(0xF0 | (cp >> 18));
    out += static_cast<char>(0x80 | ((cp >> 12) & 0x3F));
    out += static_cast<char>(0x80 | ((cp >> 6) & 0x3F));
    out += static_cast<char>(0x80 | (cp & 0x3F));
  }
}

std::string utf8_encode(uint32_t cp) {
  std::string s;
  utf8_append(s, cp);
  return s;
}

namespace {

struct ByteMap {
  std::array<std::string, 256> to_unicode;
  std::array<int, 512> from_unicode{};  // mapped code points are all < 0x144
  ByteMap() {
    from_unicode.fill(-1);
    int next = 256;
    for (int b = 0; b < 256; ++b) {
      const bool printable = (b >= 0x21 && b <= 0x7E) || (b >= 0xA1 && b <= 0xAC) || (b >= 0xAE && b <= 0xFF);
      const uint32_t cp = printable ? static_cast<uint32_t>(b) : static_cast<uint32_t>(next++);
      to_unicode[static_cast<size_t>(b)] = utf8_encode(cp);
      from_unicode[cp] = b;
    }
  }
};

const ByteMap& byte_map() {
  static const ByteMap m;
  return m;
}

uint8_t cpt_flags(uint32_t cp) {
  using unicode_data::flag_runs;
  const auto* end = flag_runs + unicode_data::n_flag_runs;
  const auto* it = std::upper_bound(flag_runs, end, cp,
                                    [](uint32_t c, const unicode_data::FlagRun& r) { return c < r.first; });
  return it == flag_runs ? 0 : (it - 1)->flags;
}

}  // namespace

const std::string& byte_to_unicode(uint8_t b) { return byte_map().to_unicode[b]; }

int unicode_to_byte(uint32_t cp) { return cp < 512 ? byte_map().from_unicode[cp] : -1; }

bool cpt_is_whitespace(uint32_t cp) { return cpt_flags(cp) & 1; }
bool cpt_is_control(uint32_t cp) { return cpt_flags(cp) & 2; }
bool cpt_is_punctuation(uint32_t cp) { return cpt_flags(cp) & 4; }

bool cpt_is_chinese(uint32_t cp) {
  return (cp >= 0x4E00 && cp <= 0x9FFF) || (cp >= 0x3400 && cp <= 0x4DBF) || (cp >= 0x20000 && cp <= 0x2A6DF) ||
         (cp >= 0x2A700 && cp <= 0x2B73F) || (cp >= 0x2B740 && cp <= 0x2B81F) || (cp >= 0x2B920 && cp <= 0x2CEAF) ||
         (cp >= 0xF900 && cp <= 0xFAFF) || (cp >= 0x2F800 && cp <= 0x2FA1F);
}

void bert_normalize_cpt(uint32_t cp, std::string& out) {
  if (cp >= 0xAC00 && cp <= 0xD7A3) {  // Hangul syllable: NFD gives its jamo (not marks, no case)
    std::vector<uint32_t> jamo;
    canonical_decompose(cp, jamo);
    for (uint32_t j : jamo) utf8_append(out, j);
    return;
  }
  using unicode_data::norm_entries;
  const auto* end = norm_entries + unicode_data::n_norm_entries;
  const auto* it = std::lower_bound(norm_entries, end, cp,
                                    [](const unicode_data::NormEntry& e, uint32_t c) { return e.cp < c; });
  if (it == end || it->cp != cp) {
    utf8_append(out, cp);
    return;
  }
  for (uint32_t i = 0; i < it->len; ++i) utf8_append(out, unicode_data::norm_chars[it->offset + i]);
}

namespace {

constexpr uint32_t kSBase = 0xAC00, kLBase = 0x1100, kVBase = 0x1161, kTBase = 0x11A7;
constexpr uint32_t kLCount = 19, kVCount = 21, kTCount = 28, kNCount = kVCount * kTCount, kSCount = kLCount * kNCount;

uint8_t ccc_of(uint32_t cp) {
  using unicode_data::ccc_entries;
  const auto* end = ccc_entries + unicode_data::n_ccc_entries;
  const auto* it =
      std::lower_bound(ccc_entries, end, cp, [](const unicode_data::CccEntry& e, uint32_t c) { return e.cp < c; });
  return it != end && it->cp == cp ? it->ccc : 0;
}

}  // namespace

// Full canonical decomposition of one code point (not reordered).
void canonical_decompose(uint32_t cp, std::vector<uint32_t>& out) {
  if (cp >= kSBase && cp < kSBase + kSCount) {  // Hangul syllable: L V (T)
    const uint32_t s = cp - kSBase;
    out.push_back(kLBase + s / kNCount);
    out.push_back(kVBase + (s % kNCount) / kTCount);
    if (s % kTCount) out.push_back(kTBase + s % kTCount);
    return;
  }
  using unicode_data::decomp_entries;
  const auto* end = decomp_entries + unicode_data::n_decomp_entries;
  const auto* it = std::lower_bound(decomp_entries, end, cp,
                                    [](const unicode_data::DecompEntry& e, uint32_t c) { return e.cp < c; });
  if (it == end || it->cp != cp) {
    out.push_back(cp);
    return;
  }
  canonical_decompose(it->first, out);
  if (it->second) canonical_decompose(it->second, out);
}

namespace {

// The primary composite of (a, b), or 0.
uint32_t compose(uint32_t a, uint32_t b) {
  if (a >= kLBase && a < kLBase + kLCount && b >= kVBase && b < kVBase + kVCount)
    return kSBase + ((a - kLBase) * kVCount + (b - kVBase)) * kTCount;
  if (a >= kSBase && a < kSBase + kSCount && (a - kSBase) % kTCount == 0 && b > kTBase && b < kTBase + kTCount)
    return a + (b - kTBase);
  using unicode_data::comp_entries;
  const auto* end = comp_entries + unicode_data::n_comp_entries;
  const auto* it = std::lower_bound(comp_entries, end, std::make_pair(a, b),
                                    [](const unicode_data::CompEntry& e, std::pair<uint32_t, uint32_t> k) {
                                      return std::make_pair(e.first, e.second) < k;
                                    });
  return it != end && it->first == a && it->second == b ? it->composed : 0;
}

}  // namespace

std::string nfc(std::string_view s) {
  if (std::all_of(s.begin(), s.end(), [](char c) { return static_cast<uint8_t>(c) < 0x80; })) return std::string(s);
  std::vector<uint32_t> d;
  d.reserve(s.size());
  for (size_t pos = 0; pos < s.size();) canonical_decompose(utf8_next(s, pos), d);
  // Canonical ordering: stable sort of each run of non-starters by combining class.
  for (size_t i = 0; i < d.size();) {
    if (ccc_of(d[i]) == 0) {
      ++i;
      continue;
    }
    size_t j = i;
    while (j < d.size() && ccc_of(d[j]) != 0) ++j;
    std::stable_sort(d.begin() + static_cast<std::ptrdiff_t>(i), d.begin() + static_cast<std::ptrdiff_t>(j),
                     [](uint32_t a, uint32_t b) { return ccc_of(a) < ccc_of(b); });
    i = j;
  }
  // Canonical composition: a character joins the last starter unless a character in between blocks it.
  std::vector<uint32_t> out;
  out.reserve(d.size());
  size_t starter = SIZE_MAX;
  int last_ccc = -1;
  for (uint32_t c : d) {
    const int cc = ccc_of(c);
    if (starter != SIZE_MAX && (last_ccc < cc || (last_ccc == 0 && starter == out.size() - 1))) {
      if (const uint32_t k = compose(out[starter], c)) {
        out[starter] = k;
        continue;
      }
    }
    if (cc == 0) starter = out.size();
    last_ccc = cc;
    out.push_back(c);
  }
  std::string r;
  r.reserve(s.size());
  for (uint32_t c : out) utf8_append(r, c);
  return r;
}

}  // namespace spore::llm
