#pragma once
// Unicode helpers for the tokenizers: lenient UTF-8 decoding, GPT-2's byte <-> printable-character map, and the
// character classes and normalization that the WordPiece (BERT) pre-tokenizer needs. Regex character classes
// (\p{L}, \p{N}, ...) are PCRE2's; the tables here (unicode_data.cpp, generated) cover only what PCRE2 does not.
#include <cstddef>
#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

namespace spore::llm {

// Length of the UTF-8 sequence that starts with byte `b` (1 for a stray continuation or invalid byte).
size_t utf8_len(uint8_t b);
// Decodes one code point at `s[pos]`, advancing `pos`; an invalid or truncated sequence yields U+FFFD and consumes
// one byte, so every input decodes.
uint32_t utf8_next(std::string_view s, size_t& pos);
std::vector<uint32_t> utf8_decode(std::string_view s);
void utf8_append(std::string& out, uint32_t cp);
std::string utf8_encode(uint32_t cp);

// GPT-2 byte-level BPE: every byte maps to a printable code point (printable Latin-1 bytes to themselves, the rest
// to U+0100 + n), so byte strings become vocabulary strings and back.
const std::string& byte_to_unicode(uint8_t b);  // UTF-8 of the mapped code point
int unicode_to_byte(uint32_t cp);               // -1 if `cp` is not one of the 256 mapped code points

bool cpt_is_whitespace(uint32_t cp);   // Unicode White_Space
bool cpt_is_control(uint32_t cp);      // general category C* (BERT treats \t \n \r as whitespace, checked first)
bool cpt_is_punctuation(uint32_t cp);  // general category P*
bool cpt_is_chinese(uint32_t cp);      // CJK ideograph blocks, as BERT's tokenizer defines them
// Unicode normalization form C (canonical decomposition, reordering, canonical composition), as Hugging Face's
// NFC normalizer (Qwen2/Qwen3). ASCII-only text is returned unchanged without work.
std::string nfc(std::string_view s);
// Appends the full canonical decomposition of `cp` (Hangul algorithmically; not reordered by combining class).
void canonical_decompose(uint32_t cp, std::vector<uint32_t>& out);
// BERT's per-character normalization: NFD, combining marks (Mn) dropped, lowercased. Appends UTF-8 to `out`.
void bert_normalize_cpt(uint32_t cp, std::string& out);

namespace unicode_data {
struct FlagRun {
  uint32_t first;
  uint8_t flags;
};
struct NormEntry {
  uint32_t cp;
  uint32_t offset;
  uint32_t len;
};
struct CccEntry {
  uint32_t cp;
  uint8_t ccc;
};
struct DecompEntry {
  uint32_t cp, first, second;
};
struct CompEntry {
  uint32_t first, second, composed;
};
extern const FlagRun flag_runs[];
extern const size_t n_flag_runs;
extern const uint32_t norm_chars[];
extern const NormEntry norm_entries[];
extern const size_t n_norm_entries;
extern const CccEntry ccc_entries[];
extern const size_t n_ccc_entries;
extern const DecompEntry decomp_entries[];
extern const size_t n_decomp_entries;
extern const CompEntry comp_entries[];
extern const size_t n_comp_entries;
}  // namespace unicode_data

}  // namespace spore::llm
