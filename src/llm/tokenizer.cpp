// Tokenizers: vocabulary loading (GGUF, tokenizer.json), special-token partitioning, pre-tokenizer regexes (PCRE2),
// rank-based BPE, score-based SentencePiece BPE and WordPiece. The algorithms follow llama.cpp's llama-vocab.cpp
// so that ids match its tokenizer tests (which were produced with Hugging Face's tokenizers).
#define PCRE2_CODE_UNIT_WIDTH 8
#include "llm/tokenizer.h"

#include <pcre2.h>

#include <algorithm>
#include <cctype>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <queue>
#include <unordered_map>
#include <nlohmann/json.hpp>

#include "base/error.h"
#include "data/gzip.h"
#include "io/gguf/gguf.h"
#include "llm/unicode.h"

namespace spore::llm {

namespace {

const char* const kSpace = "\xE2\x96\x81";  // U+2581 "▁", SentencePiece's visible space

struct StringHash {
  using is_transparent = void;
  size_t operator()(std::string_view s) const noexcept { return std::hash<std::string_view>{}(s); }
};
using TokenMap = std::unordered_map<std::string, int32_t, StringHash, std::equal_to<>>;

// A compiled pre-tokenizer regex (PCRE2, UTF + Unicode properties, JIT when available).
class Regex {
 public:
  Regex(const std::string& pattern, const std::string& source) {
    int err = 0;
    PCRE2_SIZE err_off = 0;
    const std::string p = adapt(pattern);
    code_ = pcre2_compile(reinterpret_cast<PCRE2_SPTR>(p.data()), p.size(),
                          PCRE2_UTF | PCRE2_UCP | PCRE2_MATCH_INVALID_UTF | PCRE2_DOLLAR_ENDONLY, &err, &err_off,
                          nullptr);
    if (!code_) {
      PCRE2_UCHAR msg[256];
      pcre2_get_error_message(err, msg, sizeof(msg));
      SPORE_FAIL(ErrorCode::parse_error, "{}: pre-tokenizer regex '{}' does not compile at offset {}: {}", source,
                 pattern, err_off, reinterpret_cast<const char*>(msg));
    }
    pcre2_jit_compile(code_, PCRE2_JIT_COMPLETE);  // falls back to the interpreter if JIT is unavailable
  }
  Regex(const Regex&) = delete;
  Regex& operator=(const Regex&) = delete;
  ~Regex() { pcre2_code_free(code_); }

  // Splits each piece of `pieces` (byte ranges of `text`) into matches and the gaps between them, in order, as
  // Hugging Face's Split pre-tokenizer with behavior "Isolated" does. Each piece is matched on its own, so
  // lookarounds and `$` see only that piece.
  void split(std::string_view text, std::vector<std::pair<size_t, size_t>>& pieces,
             pcre2_match_data* md) const {
    std::vector<std::pair<size_t, size_t>> out;
    out.reserve(pieces.size() * 2);
    for (auto [off, len] : pieces) {
      const auto* subject = reinterpret_cast<PCRE2_SPTR>(text.data() + off);
      size_t pos = 0, gap = 0;
      while (pos < len) {
        const int rc = pcre2_match(code_, subject, len, pos, 0, md, nullptr);
        if (rc == PCRE2_ERROR_NOMATCH) break;
        if (rc < 0) {
          PCRE2_UCHAR msg[256];
          pcre2_get_error_message(rc, msg, sizeof(msg));
          SPORE_FAIL(ErrorCode::internal, "pre-tokenizer regex failed on a {}-byte piece at byte offset {}: {}", len,
                     off + pos, reinterpret_cast<const char*>(msg));
        }
        const PCRE2_SIZE* ov = pcre2_get_ovector_pointer(md);
        if (ov[1] == ov[0]) {  // empty match: not a piece; move on by one character
          pos = ov[0] + utf8_len(static_cast<uint8_t>(text[off + ov[0]]));
          continue;
        }
        if (ov[0] > gap) out.emplace_back(off + gap, ov[0] - gap);
        out.emplace_back(off + ov[0], ov[1] - ov[0]);
        pos = gap = ov[1];
      }
      if (gap < len) out.emplace_back(off + gap, len - gap);
    }
    pieces.swap(out);
  }

 private:
  // Rewrites the Hugging Face (Oniguruma) pattern for PCRE2: \s and \S become Unicode White_Space (PCRE2's \s
  // misses U+0085), and the case-insensitive contractions (?i:'s|...) become ASCII-only classes (PCRE2's Unicode
  // caseless matching would also take U+017F "ſ" for s and U+212A "K" for k).
  static std::string adapt(const std::string& pattern) {
    static const char* const ws = "\\t\\n\\x{0B}\\f\\r\\x{20}\\x{85}\\x{A0}\\x{1680}\\x{2000}-\\x{200A}\\x{2028}"
                                  "\\x{2029}\\x{202F}\\x{205F}\\x{3000}";
    std::string p = pattern;
    const std::string ci = "(?i:'s|'t|'re|'ve|'m|'ll|'d)";
    for (size_t at; (at = p.find(ci)) != std::string::npos;)
      p.replace(at, ci.size(), "(?:'[sS]|'[tT]|'[rR][eE]|'[vV][eE]|'[mM]|'[lL][lL]|'[dD])");
    std::string out;
    bool in_class = false;
    for (size_t i = 0; i < p.size(); ++i) {
      const char c = p[i];
      if (c == '\\' && i + 1 < p.size()) {
        const char e = p[i + 1];
        ++i;
        if (e == 's') {
          out += in_class ? std::string(ws) : "[" + std::string(ws) + "]";
        } else if (e == 'S' && !in_class) {
          out += "[^" + std::string(ws) + "]";
        } else {
          out += c;
          out += e;
        }
        continue;
      }
      if (c == '[' && !in_class) {
        in_class = true;
        out += c;
        if (i + 1 < p.size() && p[i + 1] == '^') out += p[++i];
        if (i + 1 < p.size() && p[i + 1] == ']') out += p[++i];  // a literal ']' first in the class
        continue;
      }
      if (c == ']' && in_class) in_class = false;
      out += c;
    }
    return out;
  }

  pcre2_code* code_ = nullptr;
};

const char* const kGpt2Regex =
    "'s|'t|'re|'ve|'m|'ll|'d| ?\\p{L}+| ?\\p{N}+| ?[^\\s\\p{L}\\p{N}]+|\\s+(?!\\S)";
const char* const kLlama3Regex =
    "(?:'[sS]|'[tT]|'[rR][eE]|'[vV][eE]|'[mM]|'[lL][lL]|'[dD])|[^\\r\\n\\p{L}\\p{N}]?\\p{L}+|\\p{N}{1,3}| "
    "?[^\\s\\p{L}\\p{N}]+[\\r\\n]*|\\s*[\\r\\n]+|\\s+(?!\\S)|\\s+";
const char* const kQwen2Regex =
    "(?:'[sS]|'[tT]|'[rR][eE]|'[vV][eE]|'[mM]|'[lL][lL]|'[dD])|[^\\r\\n\\p{L}\\p{N}]?\\p{L}+|\\p{N}| "
    "?[^\\s\\p{L}\\p{N}]+[\\r\\n]*|\\s*[\\r\\n]+|\\s+(?!\\S)|\\s+";

struct PreTypeInfo {
  std::vector<std::string> regexes;
  bool ignore_merges = false;
};

// The pre-tokenizer regexes for GGUF's tokenizer.ggml.pre (llama.cpp's names). Each regex splits the pieces the
// previous one produced.
PreTypeInfo pre_type_info(const std::string& pre, const std::string& source) {
  PreTypeInfo info;
  auto is = [&](std::initializer_list<const char*> names) {
    return std::any_of(names.begin(), names.end(), [&](const char* n) { return pre == n; });
  };
  if (is({"llama3", "llama-v3", "llama-bpe", "falcon3", "falcon-h1", "pixtral", "midm-2.0", "lfm2", "dbrx",
          "smaug-bpe", "chatglm-bpe"})) {
    info.regexes = {kLlama3Regex};
    info.ignore_merges = is({"llama3", "llama-v3", "llama-bpe", "falcon3", "falcon-h1", "pixtral", "midm-2.0",
                             "lfm2"});
  } else if (is({"deepseek-llm"})) {
    info.regexes = {
        "[\r\n]",
        // Cased letters, as code points: literal characters would not survive Unicode normalization.
        "\\s?[A-Za-z\\x{B5}\\x{C0}-\\x{D6}\\x{D8}-\\x{F6}\\x{F8}-\\x{1BA}\\x{1BC}-\\x{1BF}\\x{1C4}-\\x{293}"
        "\\x{295}-\\x{2AF}\\x{370}-\\x{373}\\x{376}\\x{377}\\x{37B}-\\x{37D}\\x{37F}\\x{386}\\x{388}-\\x{38A}"
        "\\x{38C}\\x{38E}-\\x{3A1}\\x{3A3}-\\x{3F5}\\x{3F7}-\\x{481}\\x{48A}-\\x{52F}\\x{531}-\\x{556}"
        "\\x{10A0}-\\x{10C5}\\x{13A0}-\\x{13F5}\\x{13F8}-\\x{13FD}\\x{1C90}-\\x{1CBA}\\x{1CBD}-\\x{1CBF}"
        "\\x{1D00}-\\x{1D2B}\\x{1D6B}-\\x{1D77}\\x{1D79}-\\x{1D9A}\\x{1E00}-\\x{1F15}\\x{1F18}-\\x{1F1D}"
        "\\x{1F20}-\\x{1F45}\\x{1F48}-\\x{1F4D}\\x{1F50}-\\x{1F57}\\x{1F59}\\x{1F5B}\\x{1F5D}\\x{1F5F}-"
        "\\x{1F7D}\\x{1F80}-\\x{1FB4}\\x{1FB6}-\\x{1FBC}\\x{1FBE}\\x{1FC2}-\\x{1FC4}\\x{1FC6}-\\x{1FCC}"
        "\\x{1FD0}-\\x{1FD3}\\x{1FD6}-\\x{1FDB}\\x{1FE0}-\\x{1FEC}\\x{1FF2}-\\x{1FF4}\\x{1FF6}-\\x{1FFC}"
        "\\x{2102}\\x{2107}\\x{210A}-\\x{2113}\\x{2115}\\x{2119}-\\x{211D}\\x{2124}\\x{2126}\\x{2128}"
        "\\x{212A}-\\x{212D}\\x{212F}-\\x{2134}\\x{2139}\\x{213C}-\\x{213F}\\x{2145}-\\x{2149}\\x{214E}"
        "\\x{2183}\\x{2184}\\x{2C00}-\\x{2C7B}\\x{2C7E}-\\x{2CE4}\\x{2CEB}-\\x{2CEE}\\x{2CF2}\\x{2CF3}"
        "\\x{A640}-\\x{A66D}\\x{A680}-\\x{A69B}\\x{A722}-\\x{A76F}\\x{A771}-\\x{A787}\\x{A78B}-\\x{A78E}"
        "\\x{AB70}-\\x{ABBF}\\x{FB00}-\\x{FB06}\\x{FB13}-\\x{FB17}\\x{FF21}-\\x{FF3A}\\x{FF41}-\\x{FF5A}"
        "\\x{10400}-\\x{1044F}\\x{104B0}-\\x{104D3}\\x{104D8}-\\x{104FB}\\x{10C80}-\\x{10CB2}\\x{10CC0}-"
        "\\x{10CF2}\\x{118A0}-\\x{118DF}\\x{1E900}-\\x{1E943}]+",
        "\\s?[!-/:-~\\x{FF01}-\\x{FF0F}\\x{FF1A}-\\x{FF5E}\\x{2018}-\\x{201F}\\x{3000}-\\x{3002}]+",
        "\\s+$",
        "[\\x{4E00}-\\x{9FA5}\\x{800}-\\x{4E00}\\x{AC00}-\\x{D7FF}]+",
        "\\p{N}+",
    };
  } else if (is({"deepseek-coder"})) {
    info.regexes = {"[\r\n]", "\\s?\\p{L}+", "\\s?\\p{P}+", "[\\x{4E00}-\\x{9FA5}\\x{800}-\\x{4E00}\\x{AC00}-\\x{D7FF}]+",
                    "\\p{N}"};
  } else if (is({"falcon"})) {
    info.regexes = {"[\\p{P}\\$\\+<=>\\^~\\|`]+", kGpt2Regex, "[0-9][0-9][0-9]"};
  } else if (is({"starcoder", "refact", "command-r", "smollm", "codeshell", "exaone", "minerva-7b"})) {
    info.regexes = {"\\p{N}", kGpt2Regex};
  } else if (is({"gpt-2", "phi-2", "jina-es", "jina-de", "jina-v1-en", "jina-v2-es", "jina-v2-de", "jina-v2-code",
                 "roberta-bpe", "mpt", "olmo", "jais", "trillion", "granite-docling"})) {
    info.regexes = {kGpt2Regex};
  } else if (is({"qwen2", "deepseek-r1-qwen", "stablelm2", "megrez", "hunyuan", "grok-2"})) {
    info.regexes = {kQwen2Regex};
  } else if (is({"poro-chat", "bloom", "gpt3-finnish"})) {
    info.regexes = {" ?[^(\\s|.,!?\\x{2026}\\x{3002}\\x{FF0C}\\x{3001}\\x{964}\\x{6D4}\\x{60C})]+"};
  } else if (is({"viking"})) {
    info.regexes = {" ?[^(\\s|.,!?\\x{2026}\\x{3002}\\x{FF0C}\\x{3001}\\x{964}\\x{6D4}\\x{60C})]+", "\\p{N}"};
  } else if (is({"default", ""})) {
    info.regexes = {"[\\p{P}\\$\\+<=>\\^~\\|]+", kGpt2Regex, "\\p{N}+", "[0-9][0-9][0-9]"};
  } else {
    SPORE_FAIL(ErrorCode::unsupported, "{}: unknown BPE pre-tokenizer type tokenizer.ggml.pre='{}'", source, pre);
  }
  return info;
}

struct MatchData {
  pcre2_match_data* md;
  MatchData() : md(pcre2_match_data_create(4, nullptr)) {}
  ~MatchData() { pcre2_match_data_free(md); }
};

}  // namespace

struct Tokenizer::Impl {
  std::string source;  // file name, for errors
  VocabType type = VocabType::bpe;
  std::string pre = "default";
  std::vector<std::string> tokens;
  std::vector<float> scores;
  std::vector<TokenType> types;
  std::vector<uint8_t> lstrip, rstrip;
  TokenMap token_to_id;
  // BPE merges: (left id, right id) -> (rank, merged id).
  std::unordered_map<uint64_t, std::pair<int32_t, int32_t>> merges;
  std::vector<std::unique_ptr<Regex>> regexes;
  std::vector<std::string> regex_src;   // their patterns, as given
  std::vector<int32_t> special_tokens;  // control / unknown / user-defined, longest text first
  bool byte_level = true;        // BPE: bytes mapped to printable characters (GPT-2); else SentencePiece-style
  bool byte_fallback = false;    // unknown characters -> <0xNN> tokens
  bool add_space_prefix = true;  // SentencePiece: a leading space before the text
  bool ignore_merges = false;    // BPE: a pre-tokenized word that is a token is taken whole
  bool nfc_normalize = false;    // HF normalizer NFC (Qwen2/3): applied to the text between special tokens
  bool add_bos_ = false, add_eos_ = false;
  int32_t bos = -1, eos = -1, eot = -1, eom = -1, unk = -1, sep = -1, pad = -1;
  std::vector<int32_t> eog;
  size_t max_token_len = 0;
  std::string chat_template;
  std::vector<int32_t> byte_tokens = std::vector<int32_t>(256, -1);  // <0xNN> ids

  int32_t find(std::string_view s) const {
    auto it = token_to_id.find(s);
    return it == token_to_id.end() ? -1 : it->second;
  }
  void add_regex(const std::string& pattern) {
    regexes.push_back(std::make_unique<Regex>(pattern, source));
    regex_src.push_back(pattern);
  }
  void finish();
  void find_eog();
  void partition(std::string_view text, bool parse_special,
                 std::vector<std::pair<int32_t, std::string_view>>& frags) const;
  void encode_bpe(std::string_view text, std::vector<int32_t>& out, pcre2_match_data* md,
                  std::unordered_map<std::string, std::vector<int32_t>>& cache) const;
  void bpe_word(std::string_view word, std::vector<int32_t>& out) const;
  void encode_spm(const std::string& text, std::vector<int32_t>& out) const;
  void encode_wpm(std::string_view text, std::vector<int32_t>& out) const;
  void emit_bytes(std::string_view s, std::vector<int32_t>& out) const;
};

// Everything derived from the vocabulary once it is loaded: the lookup map, byte tokens, special-token order, EOG.
void Tokenizer::Impl::finish() {
  const auto n = static_cast<int32_t>(tokens.size());
  SPORE_CHECK(n > 0, ErrorCode::parse_error, "{}: the tokenizer has an empty vocabulary", source);
  scores.resize(tokens.size(), 0.0f);
  types.resize(tokens.size(), TokenType::normal);
  lstrip.resize(tokens.size(), 0);
  rstrip.resize(tokens.size(), 0);
  token_to_id.reserve(tokens.size());
  for (int32_t i = 0; i < n; ++i) {
    token_to_id.emplace(tokens[static_cast<size_t>(i)], i);  // first id wins for duplicate strings
    max_token_len = std::max(max_token_len, tokens[static_cast<size_t>(i)].size());
  }
  for (int b = 0; b < 256; ++b) byte_tokens[static_cast<size_t>(b)] = find(fmt::format("<0x{:02X}>", b));
  for (int32_t* id : {&bos, &eos, &eot, &eom, &unk, &sep, &pad})
    if (*id >= n) *id = -1;
  for (int32_t i = 0; i < n; ++i) {
    const TokenType t = types[static_cast<size_t>(i)];
    if ((t == TokenType::control || t == TokenType::user_defined || t == TokenType::unknown) &&
        !tokens[static_cast<size_t>(i)].empty())
      special_tokens.push_back(i);
  }
  std::stable_sort(special_tokens.begin(), special_tokens.end(), [&](int32_t a, int32_t b) {
    return tokens[static_cast<size_t>(a)].size() > tokens[static_cast<size_t>(b)].size();
  });
}

// End-of-generation tokens: the declared ones plus the usual turn/text terminators of chat models.
void Tokenizer::Impl::find_eog() {
  const auto n = static_cast<int32_t>(tokens.size());
  for (int32_t* id : {&bos, &eos, &eot, &eom, &unk, &sep, &pad})
    if (*id >= n) *id = -1;
  eog.clear();
  for (int32_t id : {eos, eot, eom})
    if (id >= 0) eog.push_back(id);
  for (const char* s : {"<|eot_id|>", "<|im_end|>", "<|end|>", "<end_of_turn>", "<|endoftext|>", "<|eom_id|>",
                        "<EOT>", "_<EOT>", "<｜end▁of▁sentence｜>", "<|end_of_text|>", "<|return|>", "<|call|>"}) {
    const int32_t id = find(s);
    if (id >= 0 && types[static_cast<size_t>(id)] == TokenType::control &&
        std::find(eog.begin(), eog.end(), id) == eog.end())
      eog.push_back(id);
  }
}

// Splits `text` into raw spans and special-token matches (llama.cpp's tokenizer_st_partition): longest special
// tokens first; control/unknown tokens only when `parse_special`; lstrip/rstrip tokens swallow adjacent spaces.
void Tokenizer::Impl::partition(std::string_view text, bool parse_special,
                                std::vector<std::pair<int32_t, std::string_view>>& frags) const {
  frags.clear();
  if (!text.empty()) frags.emplace_back(-1, text);
  for (int32_t id : special_tokens) {
    const TokenType t = types[static_cast<size_t>(id)];
    if (!parse_special && (t == TokenType::control || t == TokenType::unknown)) continue;
    const std::string& tok = tokens[static_cast<size_t>(id)];
    std::vector<std::pair<int32_t, std::string_view>> next;
    bool found = false;
    for (auto [fid, s] : frags) {
      if (fid >= 0 || s.find(tok) == std::string_view::npos) {
        next.emplace_back(fid, s);
        continue;
      }
      found = true;
      while (!s.empty()) {
        const size_t at = s.find(tok);
        if (at == std::string_view::npos) {
          next.emplace_back(-1, s);
          break;
        }
        std::string_view left = s.substr(0, at);
        if (lstrip[static_cast<size_t>(id)])
          while (!left.empty() && std::isspace(static_cast<unsigned char>(left.back()))) left.remove_suffix(1);
        if (!left.empty()) next.emplace_back(-1, left);
        next.emplace_back(id, s.substr(at, tok.size()));
        s.remove_prefix(at + tok.size());
        if (rstrip[static_cast<size_t>(id)])
          while (!s.empty() && std::isspace(static_cast<unsigned char>(s.front()))) s.remove_prefix(1);
      }
    }
    if (found) frags.swap(next);
  }
}

void Tokenizer::Impl::emit_bytes(std::string_view s, std::vector<int32_t>& out) const {
  for (char c : s) {
    const int32_t b = byte_tokens[static_cast<uint8_t>(c)];
    if (b >= 0) {
      out.push_back(b);
    } else if (unk >= 0) {
      out.push_back(unk);
    }
  }
}

// Rank-based BPE on one pre-tokenized word (already in vocabulary characters): repeatedly merge the adjacent pair
// with the lowest merge rank (leftmost on ties) until no listed merge applies.
void Tokenizer::Impl::bpe_word(std::string_view word, std::vector<int32_t>& out) const {
  if (ignore_merges) {
    const int32_t id = find(word);
    if (id >= 0) {
      out.push_back(id);
      return;
    }
  }
  struct Sym {
    int32_t id;
    int32_t prev, next;
    uint32_t off, len;
  };
  std::vector<Sym> syms;
  syms.reserve(word.size());
  for (size_t pos = 0; pos < word.size();) {
    const size_t n = std::min(word.size() - pos, utf8_len(static_cast<uint8_t>(word[pos])));
    const auto i = static_cast<int32_t>(syms.size());
    syms.push_back({find(word.substr(pos, n)), i - 1, i + 1, static_cast<uint32_t>(pos), static_cast<uint32_t>(n)});
    pos += n;
  }
  if (syms.empty()) return;
  syms.back().next = -1;
  struct Pair {
    int32_t rank, left, right, left_id, right_id, merged;
    bool operator<(const Pair& o) const {  // priority_queue pops the largest: lowest rank, then leftmost
      return rank != o.rank ? rank > o.rank : left > o.left;
    }
  };
  std::priority_queue<Pair> queue;
  auto add_pair = [&](int32_t l, int32_t r) {
    if (l < 0 || r < 0 || syms[static_cast<size_t>(l)].id < 0 || syms[static_cast<size_t>(r)].id < 0) return;
    const int32_t a = syms[static_cast<size_t>(l)].id, b = syms[static_cast<size_t>(r)].id;
    auto it = merges.find((static_cast<uint64_t>(static_cast<uint32_t>(a)) << 32) | static_cast<uint32_t>(b));
    if (it != merges.end()) queue.push({it->second.first, l, r, a, b, it->second.second});
  };
  for (int32_t i = 0; i + 1 < static_cast<int32_t>(syms.size()); ++i) add_pair(i, i + 1);
  while (!queue.empty()) {
    const Pair p = queue.top();
    queue.pop();
    Sym& l = syms[static_cast<size_t>(p.left)];
    Sym& r = syms[static_cast<size_t>(p.right)];
    if (l.len == 0 || r.len == 0 || l.next != p.right || l.id != p.left_id || r.id != p.right_id) continue;  // stale
    l.id = p.merged;
    l.len += r.len;
    r.len = 0;
    l.next = r.next;
    if (r.next >= 0) syms[static_cast<size_t>(r.next)].prev = p.left;
    add_pair(l.prev, p.left);
    add_pair(p.left, l.next);
  }
  for (int32_t i = 0; i >= 0; i = syms[static_cast<size_t>(i)].next) {
    const Sym& s = syms[static_cast<size_t>(i)];
    if (s.id >= 0) {
      out.push_back(s.id);
    } else if (byte_fallback) {
      emit_bytes(word.substr(s.off, s.len), out);
    } else if (unk >= 0) {
      out.push_back(unk);
    }
  }
}

void Tokenizer::Impl::encode_bpe(std::string_view text, std::vector<int32_t>& out, pcre2_match_data* md,
                                 std::unordered_map<std::string, std::vector<int32_t>>& cache) const {
  std::vector<std::pair<size_t, size_t>> pieces{{0, text.size()}};
  for (const auto& re : regexes) re->split(text, pieces, md);
  std::string word;
  for (auto [off, len] : pieces) {
    word.clear();
    if (byte_level) {
      for (size_t i = 0; i < len; ++i) word += byte_to_unicode(static_cast<uint8_t>(text[off + i]));
    } else {
      word.assign(text.substr(off, len));
    }
    auto it = cache.find(word);
    if (it == cache.end()) {
      std::vector<int32_t> ids;
      bpe_word(word, ids);
      if (cache.size() > 100000) cache.clear();
      it = cache.emplace(word, std::move(ids)).first;
    }
    out.insert(out.end(), it->second.begin(), it->second.end());
  }
}

// SentencePiece BPE (llama.cpp's SPM tokenizer): start from characters, repeatedly merge the adjacent pair whose
// concatenation is the highest-scoring token (leftmost on ties); characters left without a token become <0xNN>.
void Tokenizer::Impl::encode_spm(const std::string& text, std::vector<int32_t>& out) const {
  struct Sym {
    int32_t prev, next;
    uint32_t off, len;
  };
  std::vector<Sym> syms;
  for (size_t pos = 0; pos < text.size();) {
    const size_t n = std::min(text.size() - pos, utf8_len(static_cast<uint8_t>(text[pos])));
    const auto i = static_cast<int32_t>(syms.size());
    syms.push_back({i - 1, i + 1, static_cast<uint32_t>(pos), static_cast<uint32_t>(n)});
    pos += n;
  }
  if (syms.empty()) return;
  syms.back().next = -1;
  struct Pair {
    float score;
    int32_t left, right;
    uint32_t len;
    bool operator<(const Pair& o) const { return score != o.score ? score < o.score : left > o.left; }
  };
  std::priority_queue<Pair> queue;
  auto add_pair = [&](int32_t l, int32_t r) {
    if (l < 0 || r < 0) return;
    const Sym& a = syms[static_cast<size_t>(l)];
    const Sym& b = syms[static_cast<size_t>(r)];
    const int32_t id = find(std::string_view(text).substr(a.off, a.len + b.len));
    if (id >= 0) queue.push({scores[static_cast<size_t>(id)], l, r, a.len + b.len});
  };
  for (int32_t i = 0; i + 1 < static_cast<int32_t>(syms.size()); ++i) add_pair(i, i + 1);
  while (!queue.empty()) {
    const Pair p = queue.top();
    queue.pop();
    Sym& l = syms[static_cast<size_t>(p.left)];
    Sym& r = syms[static_cast<size_t>(p.right)];
    if (l.len == 0 || r.len == 0 || l.len + r.len != p.len || l.next != p.right) continue;  // stale
    l.len += r.len;
    r.len = 0;
    l.next = r.next;
    if (r.next >= 0) syms[static_cast<size_t>(r.next)].prev = p.left;
    add_pair(l.prev, p.left);
    add_pair(p.left, l.next);
  }
  for (int32_t i = 0; i >= 0; i = syms[static_cast<size_t>(i)].next) {
    const Sym& s = syms[static_cast<size_t>(i)];
    const std::string_view piece = std::string_view(text).substr(s.off, s.len);
    const int32_t id = find(piece);
    if (id >= 0) {
      out.push_back(id);
    } else {
      emit_bytes(piece, out);
    }
  }
}

// WordPiece (BERT): normalize (drop controls, NFD without accents, lowercase), split on whitespace and around
// punctuation and CJK characters, then greedy longest-prefix matching within each word. Vocabulary strings follow
// llama.cpp's GGUF convention: word-initial pieces start with "▁", continuations have no "##".
void Tokenizer::Impl::encode_wpm(std::string_view text, std::vector<int32_t>& out) const {
  std::vector<std::string> words(1);
  std::string norm;
  for (size_t pos = 0; pos < text.size();) {
    const uint32_t cp = utf8_next(text, pos);
    if (cpt_is_whitespace(cp)) {
      if (!words.back().empty()) words.emplace_back();
      continue;
    }
    if (cp == 0 || cp == 0xFFFD || cpt_is_control(cp)) continue;
    norm.clear();
    bert_normalize_cpt(cp, norm);
    for (size_t np = 0; np < norm.size();) {
      const size_t start = np;
      const uint32_t c = utf8_next(norm, np);
      const bool ascii_punct = c < 0x80 && std::ispunct(static_cast<int>(c));
      if (ascii_punct || cpt_is_punctuation(c) || cpt_is_chinese(c)) {
        if (!words.back().empty()) words.emplace_back();
        words.back() = norm.substr(start, np - start);
        words.emplace_back();
      } else {
        words.back() += norm.substr(start, np - start);
      }
    }
  }
  for (const std::string& w : words) {
    if (w.empty()) continue;
    const std::string word = kSpace + w;
    const size_t first = out.size();
    bool ok = true;
    for (size_t i = 0; i < word.size();) {
      bool matched = false;
      for (size_t j = std::min(word.size(), i + max_token_len); j > i; --j) {
        const int32_t id = find(std::string_view(word).substr(i, j - i));
        if (id >= 0) {
          out.push_back(id);
          i = j;
          matched = true;
          break;
        }
      }
      if (!matched) {
        ok = false;
        break;
      }
    }
    if (!ok) {
      out.resize(first);
      if (unk >= 0) out.push_back(unk);
    }
  }
}

std::vector<int32_t> Tokenizer::encode(std::string_view text, bool add_special, bool parse_special) const {
  const Impl& m = *impl_;
  std::vector<int32_t> out;
  out.reserve(text.size() / 3 + 4);
  if (add_special && m.add_bos_ && m.bos >= 0) out.push_back(m.bos);
  std::vector<std::pair<int32_t, std::string_view>> frags;
  m.partition(text, parse_special, frags);
  MatchData md;
  std::unordered_map<std::string, std::vector<int32_t>> cache;
  bool prev_special = true;
  for (auto [id, s] : frags) {
    if (id >= 0) {
      out.push_back(id);
      prev_special = true;
      continue;
    }
    switch (m.type) {
      case VocabType::spm: {
        std::string t;
        t.reserve(s.size() + 4);
        if (m.add_space_prefix && prev_special) t += kSpace;
        for (char c : s) {
          if (c == ' ') {
            t += kSpace;
          } else {
            t += c;
          }
        }
        if (m.merges.empty()) {
          m.encode_spm(t, out);
        } else {
          m.bpe_word(t, out);  // SentencePiece-style vocabulary with ranked merges (HF tokenizer.json)
        }
        break;
      }
      case VocabType::bpe:
        if (m.nfc_normalize) {
          m.encode_bpe(nfc(s), out, md.md, cache);
        } else {
          m.encode_bpe(s, out, md.md, cache);
        }
        break;
      case VocabType::wpm:
        m.encode_wpm(s, out);
        break;
    }
    prev_special = false;
  }
  if (add_special && m.add_eos_ && m.eos >= 0) out.push_back(m.eos);
  if (add_special && m.type == VocabType::wpm && !m.add_eos_ && m.sep >= 0) out.push_back(m.sep);
  return out;
}

std::vector<std::pair<size_t, size_t>> Tokenizer::pre_tokenize(std::string_view text) const {
  const Impl& m = *impl_;
  SPORE_CHECK(m.type == VocabType::bpe && m.byte_level, ErrorCode::unsupported,
              "{}: pre_tokenize needs a byte-level BPE tokenizer", m.source);
  std::vector<std::pair<size_t, size_t>> pieces{{0, text.size()}};
  if (text.empty()) return {};
  MatchData md;
  for (const auto& re : m.regexes) re->split(text, pieces, md.md);
  return pieces;
}

std::string Tokenizer::token_to_text(int32_t id) const {
  const Impl& m = *impl_;
  const std::string& piece = token_to_piece(id);
  const TokenType t = m.types[static_cast<size_t>(id)];
  if (t == TokenType::control || t == TokenType::user_defined || t == TokenType::unknown) return piece;
  std::string out;
  const bool byte_piece = piece.size() == 6 && piece.rfind("<0x", 0) == 0 && piece[5] == '>' &&
                          std::isxdigit(static_cast<unsigned char>(piece[3])) &&
                          std::isxdigit(static_cast<unsigned char>(piece[4]));
  if (byte_piece && (t == TokenType::byte || m.type != VocabType::bpe)) {
    out += static_cast<char>(std::stoi(piece.substr(3, 2), nullptr, 16));
    return out;
  }
  if (m.type == VocabType::bpe && m.byte_level) {
    for (size_t pos = 0; pos < piece.size();) {
      const size_t start = pos;
      const int b = unicode_to_byte(utf8_next(piece, pos));
      if (b >= 0) {
        out += static_cast<char>(b);
      } else {
        out += piece.substr(start, pos - start);
      }
    }
    return out;
  }
  // SentencePiece / WordPiece: "▁" is a space.
  for (size_t pos = 0; pos < piece.size();) {
    if (piece.compare(pos, 3, kSpace) == 0) {
      out += ' ';
      pos += 3;
    } else {
      out += piece[pos++];
    }
  }
  return out;
}

std::string Tokenizer::decode(const std::vector<int32_t>& ids, bool skip_special) const {
  const Impl& m = *impl_;
  std::string out;
  bool first_text = true;
  for (int32_t id : ids) {
    const TokenType t = token_type(id);
    if (t == TokenType::control && skip_special) continue;
    std::string piece = token_to_text(id);
    const bool text_token = t != TokenType::control;
    // SentencePiece and WordPiece add a space before the first word; decoding removes it again.
    if (text_token && first_text && (m.type == VocabType::wpm || (m.type == VocabType::spm && m.add_space_prefix)) &&
        !piece.empty() && piece[0] == ' ')
      piece.erase(0, 1);
    if (text_token) first_text = false;
    out += piece;
  }
  if (m.type == VocabType::wpm) {
    // BERT's clean_up_tokenization_spaces: no space before punctuation and English contractions.
    for (const char* p : {" .", " ?", " !", " ,", " n't", " 'm", " 's", " 've", " 're"}) {
      for (size_t at; (at = out.find(p)) != std::string::npos;) out.erase(at, 1);
    }
    for (size_t at; (at = out.find(" ' ")) != std::string::npos;) out.replace(at, 3, "'");
  }
  return out;
}

const std::string& Tokenizer::token_to_piece(int32_t id) const {
  SPORE_CHECK(id >= 0 && id < vocab_size(), ErrorCode::invalid_argument,
              "{}: token id {} is out of range (vocabulary size {})", impl_->source, id, vocab_size());
  return impl_->tokens[static_cast<size_t>(id)];
}

int32_t Tokenizer::token_id(std::string_view piece) const { return impl_->find(piece); }
TokenType Tokenizer::token_type(int32_t id) const {
  token_to_piece(id);  // range check
  return impl_->types[static_cast<size_t>(id)];
}
VocabType Tokenizer::type() const { return impl_->type; }
const std::string& Tokenizer::pre_type() const { return impl_->pre; }
int32_t Tokenizer::vocab_size() const { return static_cast<int32_t>(impl_->tokens.size()); }
int32_t Tokenizer::bos_id() const { return impl_->bos; }
int32_t Tokenizer::eos_id() const { return impl_->eos; }
int32_t Tokenizer::unk_id() const { return impl_->unk; }
bool Tokenizer::add_bos() const { return impl_->add_bos_ && impl_->bos >= 0; }
bool Tokenizer::add_eos() const { return impl_->add_eos_ && impl_->eos >= 0; }
bool Tokenizer::is_eog(int32_t id) const {
  return std::find(impl_->eog.begin(), impl_->eog.end(), id) != impl_->eog.end();
}
const std::string& Tokenizer::chat_template() const { return impl_->chat_template; }

// ---------------------------------------------------------------------------------------------------------------
// Loading

namespace {

void add_merge(Tokenizer::Impl& m, std::string_view a, std::string_view b, int32_t rank) {
  const int32_t ia = m.find(a), ib = m.find(b);
  if (ia < 0 || ib < 0) return;  // a merge of strings that are not tokens can never apply
  std::string joined;
  joined.reserve(a.size() + b.size());
  joined.append(a).append(b);
  const int32_t im = m.find(joined);
  if (im < 0) return;
  m.merges.emplace((static_cast<uint64_t>(static_cast<uint32_t>(ia)) << 32) | static_cast<uint32_t>(ib),
                   std::make_pair(rank, im));
}

}  // namespace

Tokenizer Tokenizer::from_gguf(const io::GgufFile& f) {
  auto m = std::make_shared<Impl>();
  m->source = f.path();
  const std::string model = f.get_string_or("tokenizer.ggml.model", "");
  SPORE_CHECK(!model.empty(), ErrorCode::not_found, "{}: no tokenizer (metadata key tokenizer.ggml.model missing)",
              m->source);
  if (model == "llama") {
    m->type = VocabType::spm;
    m->bos = 1, m->eos = 2, m->unk = 0;
    m->add_bos_ = true;
  } else if (model == "gpt2") {
    m->type = VocabType::bpe;
  } else if (model == "bert") {
    m->type = VocabType::wpm;
    m->bos = 101, m->unk = 100, m->sep = 102, m->pad = 0;
    m->add_bos_ = true;
  } else {
    SPORE_FAIL(ErrorCode::unsupported,
               "{}: tokenizer.ggml.model '{}' is not supported (supported: llama (SentencePiece BPE), gpt2 "
               "(byte-level BPE), bert (WordPiece))",
               m->source, model);
  }
  m->tokens = f.get_strings("tokenizer.ggml.tokens");
  const size_t n = m->tokens.size();
  if (f.has("tokenizer.ggml.scores")) {
    const auto& s = f.get_floats("tokenizer.ggml.scores");
    SPORE_CHECK(s.size() == n, ErrorCode::parse_error, "{}: tokenizer.ggml.scores has {} entries for {} tokens",
                m->source, s.size(), n);
    m->scores.assign(s.begin(), s.end());
  }
  if (f.has("tokenizer.ggml.token_type")) {
    const auto& t = f.get_ints("tokenizer.ggml.token_type");
    SPORE_CHECK(t.size() == n, ErrorCode::parse_error, "{}: tokenizer.ggml.token_type has {} entries for {} tokens",
                m->source, t.size(), n);
    m->types.reserve(n);
    for (int64_t v : t) m->types.push_back(v >= 0 && v <= 6 ? static_cast<TokenType>(v) : TokenType::normal);
  }
  auto id_key = [&](const char* key, int32_t& dst) {
    if (f.has(key)) dst = static_cast<int32_t>(f.get_int(key));
  };
  id_key("tokenizer.ggml.bos_token_id", m->bos);
  id_key("tokenizer.ggml.eos_token_id", m->eos);
  id_key("tokenizer.ggml.eot_token_id", m->eot);
  id_key("tokenizer.ggml.eom_token_id", m->eom);
  id_key("tokenizer.ggml.unknown_token_id", m->unk);
  id_key("tokenizer.ggml.seperator_token_id", m->sep);
  id_key("tokenizer.ggml.padding_token_id", m->pad);
  if (m->type == VocabType::wpm) id_key("tokenizer.ggml.cls_token_id", m->bos);
  m->chat_template = f.get_string_or("tokenizer.chat_template", "");

  if (m->type == VocabType::bpe) {
    m->pre = f.get_string_or("tokenizer.ggml.pre", "default");
    PreTypeInfo info = pre_type_info(m->pre, m->source);
    m->ignore_merges = info.ignore_merges;
    if (m->pre == "llama3" || m->pre == "llama-bpe" || m->pre == "llama-v3") m->add_bos_ = true;
    for (const auto& r : info.regexes) m->add_regex(r);
  } else {
    m->pre = model;
  }
  if (f.has("tokenizer.ggml.add_bos_token")) m->add_bos_ = f.get_int("tokenizer.ggml.add_bos_token") != 0;
  if (f.has("tokenizer.ggml.add_eos_token")) m->add_eos_ = f.get_int("tokenizer.ggml.add_eos_token") != 0;
  if (f.has("tokenizer.ggml.add_space_prefix"))
    m->add_space_prefix = f.get_int("tokenizer.ggml.add_space_prefix") != 0;
  m->finish();
  m->find_eog();
  if (m->type == VocabType::bpe) {
    SPORE_CHECK(f.has("tokenizer.ggml.merges"), ErrorCode::not_found,
                "{}: BPE tokenizer without merges (metadata key tokenizer.ggml.merges missing)", m->source);
    const auto& merges = f.get_strings("tokenizer.ggml.merges");
    m->merges.reserve(merges.size());
    for (size_t i = 0; i < merges.size(); ++i) {
      const std::string& s = merges[i];
      const size_t sp = s.find(' ', 1);
      SPORE_CHECK(sp != std::string::npos, ErrorCode::parse_error,
                  "{}: tokenizer.ggml.merges[{}] = '{}' is not two tokens separated by a space", m->source, i, s);
      add_merge(*m, std::string_view(s).substr(0, sp), std::string_view(s).substr(sp + 1), static_cast<int32_t>(i));
    }
  }
  return Tokenizer(std::move(m));
}

Tokenizer Tokenizer::from_hf_json(const std::string& json_text, const std::string& config_text,
                                  const std::string& name) {
  using nlohmann::json;
  auto m = std::make_shared<Impl>();
  m->source = name;
  json j, cfg;
  try {
    j = json::parse(json_text);
    if (!config_text.empty()) cfg = json::parse(config_text);
  } catch (const json::exception& e) {
    SPORE_FAIL(ErrorCode::parse_error, "{}: not valid JSON: {}", name, e.what());
  }
  SPORE_CHECK(j.is_object() && j.contains("model") && j["model"].is_object(), ErrorCode::parse_error,
              "{}: not a Hugging Face tokenizer.json (no \"model\" object)", name);
  try {
    const json& model = j["model"];
    const std::string mtype = model.value("type", "");
    SPORE_CHECK(mtype == "BPE" || mtype == "WordPiece", ErrorCode::unsupported,
                "{}: tokenizer model type '{}' is not supported (BPE, WordPiece)", name, mtype);
    SPORE_CHECK(model.contains("vocab") && model["vocab"].is_object(), ErrorCode::parse_error,
                "{}: model.vocab is missing or not an object (model type '{}')", name, mtype);
    // Vocabulary: model.vocab plus added_tokens (which may extend it).
    int64_t n = 0;
    for (const auto& [k, v] : model["vocab"].items()) n = std::max<int64_t>(n, v.get<int64_t>() + 1);
    const json added = j.value("added_tokens", json::array());
    for (const auto& t : added) n = std::max<int64_t>(n, t.at("id").get<int64_t>() + 1);
    SPORE_CHECK(n > 0 && n < (int64_t{1} << 30), ErrorCode::parse_error, "{}: bad vocabulary size {}", name, n);
    m->tokens.assign(static_cast<size_t>(n), "");
    m->types.assign(static_cast<size_t>(n), TokenType::unused);
    const bool wordpiece = mtype == "WordPiece";
    for (const auto& [k, v] : model["vocab"].items()) {
      const auto id = static_cast<size_t>(v.get<int64_t>());
      m->tokens[id] = k;
      m->types[id] = TokenType::normal;
    }
    m->lstrip.assign(static_cast<size_t>(n), 0);
    m->rstrip.assign(static_cast<size_t>(n), 0);
    std::vector<uint8_t> is_added(static_cast<size_t>(n), 0);
    for (const auto& t : added) {
      const auto id = static_cast<size_t>(t.at("id").get<int64_t>());
      m->tokens[id] = t.at("content").get<std::string>();
      m->types[id] = t.value("special", false) ? TokenType::control : TokenType::user_defined;
      m->lstrip[id] = t.value("lstrip", false);
      m->rstrip[id] = t.value("rstrip", false);
      is_added[id] = 1;
    }
    auto tok_of = [&](const json& v) -> std::string {
      if (v.is_string()) return v.get<std::string>();
      if (v.is_object() && v.contains("content")) return v["content"].get<std::string>();
      return "";
    };
    if (mtype == "BPE") {
      m->type = VocabType::bpe;
      m->byte_fallback = model.value("byte_fallback", false);
      m->ignore_merges = model.value("ignore_merges", false);
      m->pre = "hf";
      const json pre = j.value("pre_tokenizer", json());
      const json norm = j.value("normalizer", json());
      std::vector<json> steps;
      if (pre.is_object()) {
        if (pre.value("type", "") == "Sequence") {
          for (const auto& p : pre.at("pretokenizers")) steps.push_back(p);
        } else {
          steps.push_back(pre);
        }
      }
      bool byte_level = false, metaspace = false;
      for (const auto& p : steps) {
        const std::string t = p.value("type", "");
        if (t == "Split") {
          const json& pat = p.at("pattern");
          SPORE_CHECK(p.value("behavior", "Isolated") == "Isolated" && !p.value("invert", false),
                      ErrorCode::unsupported, "{}: Split pre-tokenizer with behavior '{}' is not supported", name,
                      p.value("behavior", ""));
          if (pat.contains("Regex")) {
            m->add_regex(pat["Regex"].get<std::string>());
          } else {
            std::string lit;  // a literal string pattern: quote it for PCRE2
            lit = "\\Q" + pat.at("String").get<std::string>() + "\\E";
            m->add_regex(lit);
          }
        } else if (t == "ByteLevel") {
          byte_level = true;
          if (p.value("use_regex", true)) m->add_regex(kGpt2Regex);
        } else if (t == "Digits") {
          m->add_regex(p.value("individual_digits", false) ? "\\p{N}" : "\\p{N}+");
        } else if (t == "Metaspace") {
          metaspace = true;
          m->add_space_prefix = p.value("prepend_scheme", "always") != "never" && p.value("add_prefix_space", true);
        } else {
          SPORE_FAIL(ErrorCode::unsupported, "{}: pre-tokenizer type '{}' is not supported", name, t);
        }
      }
      // SentencePiece-style BPE (Llama 2 in HF form): spaces become "▁" via the normalizer or Metaspace.
      const std::string norm_dump = norm.is_null() ? "" : norm.dump();
      m->nfc_normalize = norm_dump.find("\"NFC\"") != std::string::npos;
      for (const char* other : {"\"NFD\"", "\"NFKC\"", "\"NFKD\"", "\"Lowercase\"", "\"StripAccents\""})
        SPORE_CHECK(norm_dump.find(other) == std::string::npos, ErrorCode::unsupported,
                    "{}: normalizer {} is not supported for BPE tokenizers", name, other);
      if (metaspace || norm_dump.find(kSpace) != std::string::npos) {
        m->type = VocabType::spm;
        m->byte_level = false;
        m->pre = "hf-spm";
        if (!metaspace) m->add_space_prefix = norm_dump.find("Prepend") != std::string::npos;
      } else {
        SPORE_CHECK(byte_level, ErrorCode::unsupported,
                    "{}: BPE tokenizer without a ByteLevel or Metaspace pre-tokenizer is not supported", name);
      }
    } else if (wordpiece) {
      m->type = VocabType::wpm;
      m->pre = "bert";
      const std::string prefix = model.value("continuing_subword_prefix", "##");
      // To llama.cpp's convention: word-initial pieces get "▁", continuation pieces lose their prefix.
      for (size_t i = 0; i < m->tokens.size(); ++i) {
        if (m->types[i] != TokenType::normal || is_added[i]) continue;
        std::string& t = m->tokens[i];
        if (!prefix.empty() && t.rfind(prefix, 0) == 0) {
          t.erase(0, prefix.size());
        } else if (!(t.size() > 2 && t.front() == '[' && t.back() == ']')) {
          t = kSpace + t;
        }
      }
    }
    if (model.contains("unk_token") && model["unk_token"].is_string()) {
      const std::string u = model["unk_token"].get<std::string>();
      for (size_t i = 0; i < m->tokens.size(); ++i)
        if (m->tokens[i] == u || (m->type == VocabType::wpm && m->tokens[i] == kSpace + u)) {
          m->unk = static_cast<int32_t>(i);
          m->types[i] = TokenType::unknown;
          break;
        }
    }
    m->finish();
    if (mtype == "BPE") {
      const json& merges = model.at("merges");
      m->merges.reserve(merges.size());
      int32_t rank = 0;
      for (const auto& e : merges) {
        if (e.is_array()) {  // ["a", "b"] (newer tokenizers) or "a b"
          SPORE_CHECK(e.size() == 2, ErrorCode::parse_error, "{}: model.merges[{}] is not a pair", name, rank);
          add_merge(*m, e[0].get<std::string>(), e[1].get<std::string>(), rank);
        } else {
          const std::string& str = e.get_ref<const std::string&>();
          const size_t sp = str.find(' ', 1);
          SPORE_CHECK(sp != std::string::npos, ErrorCode::parse_error,
                      "{}: model.merges[{}] = '{}' is not two tokens separated by a space", name, rank, str);
          add_merge(*m, std::string_view(str).substr(0, sp), std::string_view(str).substr(sp + 1), rank);
        }
        ++rank;
      }
    }
    // BOS/EOS: tokenizer_config.json names them; the post-processor template says whether encode adds them.
    if (cfg.is_object()) {
      if (cfg.contains("bos_token")) m->bos = m->find(tok_of(cfg["bos_token"]));
      if (cfg.contains("eos_token")) m->eos = m->find(tok_of(cfg["eos_token"]));
      if (cfg.contains("add_bos_token") && cfg["add_bos_token"].is_boolean()) m->add_bos_ = cfg["add_bos_token"];
      if (cfg.contains("add_eos_token") && cfg["add_eos_token"].is_boolean()) m->add_eos_ = cfg["add_eos_token"];
      if (cfg.contains("chat_template")) {
        const json& ct = cfg["chat_template"];
        if (ct.is_string()) {
          m->chat_template = ct.get<std::string>();
        } else if (ct.is_array()) {
          for (const auto& e : ct)
            if (e.value("name", "") == "default") m->chat_template = e.value("template", "");
        }
      }
    }
    const json post = j.value("post_processor", json());
    std::vector<json> posts;
    if (post.is_object()) {
      if (post.value("type", "") == "Sequence") {
        for (const auto& p : post.at("processors")) posts.push_back(p);
      } else {
        posts.push_back(post);
      }
    }
    for (const auto& p : posts) {
      if (p.value("type", "") == "TemplateProcessing" && p.contains("single")) {
        bool seen_seq = false;
        for (const auto& e : p["single"]) {
          if (e.contains("Sequence")) {
            seen_seq = true;
          } else if (e.contains("SpecialToken")) {
            const int32_t id = m->find(e["SpecialToken"].at("id").get<std::string>());
            if (!seen_seq) {
              m->bos = id, m->add_bos_ = id >= 0;
            } else {
              m->eos = id, m->add_eos_ = id >= 0;
            }
          }
        }
      } else if (p.value("type", "") == "BertProcessing") {
        m->bos = m->find(p.at("cls").at(0).get<std::string>());
        m->sep = m->find(p.at("sep").at(0).get<std::string>());
        m->add_bos_ = m->bos >= 0;
      }
    }
    if (m->type == VocabType::wpm && m->sep < 0) m->sep = m->find("[SEP]");
    m->find_eog();
  } catch (const json::exception& e) {
    SPORE_FAIL(ErrorCode::parse_error, "{}: malformed tokenizer JSON: {}", name, e.what());
  }
  return Tokenizer(std::move(m));
}

Tokenizer Tokenizer::load(const std::string& path) {
  namespace fs = std::filesystem;
  SPORE_CHECK(fs::exists(path), ErrorCode::not_found, "tokenizer: '{}' does not exist", path);
  auto read_text = [](const std::string& p) { return data::read_maybe_gzip(p); };
  if (fs::is_directory(path)) {
    const fs::path dir(path);
    fs::path tj = dir / "tokenizer.json";
    if (!fs::exists(tj) && fs::exists(dir / "tokenizer.json.gz")) tj = dir / "tokenizer.json.gz";
    SPORE_CHECK(fs::exists(tj), ErrorCode::not_found, "tokenizer: folder '{}' has no tokenizer.json", path);
    const fs::path cfg = dir / "tokenizer_config.json";
    return from_hf_json(read_text(tj.string()), fs::exists(cfg) ? read_text(cfg.string()) : "", tj.string());
  }
  std::string head(4, '\0');
  {
    std::FILE* fp = std::fopen(path.c_str(), "rb");
    SPORE_CHECK(fp, ErrorCode::io_error, "tokenizer: cannot open '{}'", path);
    head.resize(std::fread(head.data(), 1, 4, fp));
    std::fclose(fp);
  }
  if (head == "GGUF") return from_gguf(io::GgufFile::open(path));
  const fs::path cfg = fs::path(path).parent_path() / "tokenizer_config.json";
  return from_hf_json(read_text(path), fs::exists(cfg) ? read_text(cfg.string()) : "", path);
}

// ---------------------------------------------------------------------------------------------------------------
// Export: GGUF metadata and tokenizer.json

namespace {

// GGUF pre-tokenizer names tried for a tokenizer.json's regexes, one per distinct regex list (and ignore_merges).
constexpr const char* kPreCandidates[] = {"gpt-2",          "qwen2",     "llama-bpe", "dbrx",
                                          "starcoder",      "falcon",    "default",   "deepseek-llm",
                                          "deepseek-coder", "poro-chat", "viking"};

// Hugging Face spells GPT-2 contractions case-insensitively; llama.cpp's regexes (pre_type_info) spell the cases.
std::string canonical_regex(std::string r) {
  const std::string hf = "(?i:'s|'t|'re|'ve|'m|'ll|'d)";
  const std::string cased = "(?:'[sS]|'[tT]|'[rR][eE]|'[vV][eE]|'[mM]|'[lL][lL]|'[dD])";
  for (size_t at; (at = r.find(hf)) != std::string::npos;) r.replace(at, hf.size(), cased);
  return r;
}

void require_byte_level(const Tokenizer::Impl& m, VocabType type, const char* what) {
  SPORE_CHECK(type == VocabType::bpe && m.byte_level, ErrorCode::unsupported,
              "{}: {} needs a byte-level BPE tokenizer; this one is {} (model.type / pre_tokenizer: only BPE with a "
              "ByteLevel pre-tokenizer has GGUF gpt2 metadata)",
              m.source, what,
              type == VocabType::spm   ? "SentencePiece-style BPE (Metaspace)"
              : type == VocabType::wpm ? "WordPiece"
                                       : "not byte-level");
}

}  // namespace

TokenizerMetadata Tokenizer::gguf_metadata(bool drop_nfc) const {
  const Impl& m = *impl_;
  require_byte_level(m, m.type, "GGUF tokenizer metadata");
  TokenizerMetadata md;
  if (m.pre == "hf") {
    SPORE_CHECK(!m.byte_fallback, ErrorCode::unsupported,
                "{}: model.byte_fallback is true, which GGUF gpt2 tokenizer metadata cannot express", m.source);
    SPORE_CHECK(!m.nfc_normalize || drop_nfc, ErrorCode::unsupported,
                "{}: normalizer NFC cannot be expressed in GGUF tokenizer metadata (llama.cpp does not normalize)",
                m.source);
    std::vector<std::string> want;
    for (const std::string& r : m.regex_src) want.push_back(canonical_regex(r));
    md.pre.clear();
    for (const char* name : kPreCandidates) {
      const PreTypeInfo info = pre_type_info(name, m.source);
      if (info.regexes == want && info.ignore_merges == m.ignore_merges) {
        md.pre = name;
        break;
      }
    }
    std::string listed;
    for (const std::string& r : m.regex_src) listed += (listed.empty() ? "'" : ", '") + r + "'";
    SPORE_CHECK(!md.pre.empty(), ErrorCode::unsupported,
                "{}: pre_tokenizer regexes [{}] (model.ignore_merges {}) are not those of any GGUF "
                "tokenizer.ggml.pre that llama.cpp knows",
                m.source, listed, m.ignore_merges);
    for (size_t i = 0; i < m.tokens.size(); ++i)
      SPORE_CHECK(!m.lstrip[i] && !m.rstrip[i], ErrorCode::unsupported,
                  "{}: added_tokens '{}' (id {}) has lstrip/rstrip, which GGUF tokenizer metadata cannot express",
                  m.source, m.tokens[i], i);
  } else {
    md.pre = m.pre;
  }
  md.tokens = m.tokens;
  md.types.reserve(m.types.size());
  for (size_t i = 0; i < m.tokens.size(); ++i) {
    // tokenizer.json may leave ids unassigned; llama.cpp's converter names them [PAD<id>].
    if (m.tokens[i].empty()) md.tokens[i] = fmt::format("[PAD{}]", i);
    md.types.push_back(static_cast<int64_t>(m.types[i]));
  }
  std::vector<std::pair<int32_t, uint64_t>> ranked;
  ranked.reserve(m.merges.size());
  for (const auto& [pair, rm] : m.merges) ranked.emplace_back(rm.first, pair);
  std::sort(ranked.begin(), ranked.end());
  md.merges.reserve(ranked.size());
  for (const auto& [rank, pair] : ranked)
    md.merges.push_back(m.tokens[pair >> 32] + " " + m.tokens[pair & 0xffffffffu]);
  md.bos = m.bos, md.eos = m.eos, md.unk = m.unk, md.pad = m.pad;
  md.add_bos = m.add_bos_, md.add_eos = m.add_eos_;
  md.chat_template = m.chat_template;
  return md;
}

void Tokenizer::write_hf(const std::string& dir) const {
  using nlohmann::json;
  const Impl& m = *impl_;
  require_byte_level(m, m.type, "a Hugging Face tokenizer.json");
  const TokenizerMetadata md = gguf_metadata();
  const PreTypeInfo info = pre_type_info(md.pre, m.source);
  auto byte_level = [](bool use_regex) {
    return json{{"type", "ByteLevel"}, {"add_prefix_space", false}, {"trim_offsets", true}, {"use_regex", use_regex}};
  };
  json pre;
  if (info.regexes == std::vector<std::string>{kGpt2Regex}) {
    pre = byte_level(true);
  } else {
    json steps = json::array();
    for (const std::string& r : info.regexes)
      steps.push_back(
          json{{"type", "Split"}, {"pattern", {{"Regex", r}}}, {"behavior", "Isolated"}, {"invert", false}});
    steps.push_back(byte_level(false));
    pre = json{{"type", "Sequence"}, {"pretokenizers", steps}};
  }
  json vocab = json::object(), added = json::array();
  for (size_t i = 0; i < md.tokens.size(); ++i) {
    const std::string& t = md.tokens[i];
    if (!vocab.contains(t)) vocab[t] = i;
    const auto type = static_cast<TokenType>(md.types[i]);
    if (type == TokenType::control || type == TokenType::user_defined || type == TokenType::unknown)
      added.push_back(json{{"id", i},
                           {"content", t},
                           {"single_word", false},
                           {"lstrip", false},
                           {"rstrip", false},
                           {"normalized", type == TokenType::user_defined},
                           {"special", type != TokenType::user_defined}});
  }
  json post = nullptr;
  if (md.add_bos || md.add_eos) {
    // What encode(add_special) adds: [BOS] $A [EOS].
    json single = json::array(), special = json::object();
    auto add_special = [&](int32_t id) {
      const std::string& t = md.tokens[static_cast<size_t>(id)];
      single.push_back(json{{"SpecialToken", {{"id", t}, {"type_id", 0}}}});
      special[t] = json{{"id", t}, {"ids", {id}}, {"tokens", {t}}};
    };
    if (md.add_bos && md.bos >= 0) add_special(md.bos);
    single.push_back(json{{"Sequence", {{"id", "A"}, {"type_id", 0}}}});
    if (md.add_eos && md.eos >= 0) add_special(md.eos);
    post = json{{"type", "TemplateProcessing"}, {"single", single}, {"pair", single}, {"special_tokens", special}};
  }
  const json tj{{"version", "1.0"},
                {"truncation", nullptr},
                {"padding", nullptr},
                {"added_tokens", added},
                {"normalizer", nullptr},
                {"pre_tokenizer", pre},
                {"post_processor", post},
                {"decoder", byte_level(true)},
                {"model",
                 {{"type", "BPE"},
                  {"dropout", nullptr},
                  {"unk_token", md.unk >= 0 ? json(md.tokens[static_cast<size_t>(md.unk)]) : json(nullptr)},
                  {"continuing_subword_prefix", nullptr},
                  {"end_of_word_suffix", nullptr},
                  {"fuse_unk", false},
                  {"byte_fallback", false},
                  {"ignore_merges", info.ignore_merges},
                  {"vocab", vocab},
                  {"merges", md.merges}}}};
  auto name_of = [&](int32_t id) { return id >= 0 ? json(md.tokens[static_cast<size_t>(id)]) : json(nullptr); };
  json cfg{{"tokenizer_class", "PreTrainedTokenizerFast"},
           {"bos_token", name_of(md.bos)},
           {"eos_token", name_of(md.eos)},
           {"unk_token", name_of(md.unk)},
           {"pad_token", name_of(md.pad)},
           {"add_bos_token", md.add_bos},
           {"add_eos_token", md.add_eos},
           {"clean_up_tokenization_spaces", false}};
  if (!md.chat_template.empty()) cfg["chat_template"] = md.chat_template;
  namespace fs = std::filesystem;
  fs::create_directories(dir);
  for (const auto& [file, j] : {std::pair<const char*, const json*>{"tokenizer.json", &tj},
                                std::pair<const char*, const json*>{"tokenizer_config.json", &cfg}}) {
    const fs::path path = fs::path(dir) / file;
    std::ofstream f(path, std::ios::binary | std::ios::trunc);
    f << j->dump(1) << "\n";
    SPORE_CHECK(f.good(), ErrorCode::io_error, "could not write '{}'", path.string());
  }
}

}  // namespace spore::llm
