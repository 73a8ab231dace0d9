// Byte-level BPE training (llm/bpe_train.h).
#include "llm/bpe_train.h"

#include <algorithm>
#include <unordered_map>

#include "base/error.h"
#include "io/gguf/gguf.h"
#include "io/gguf/gguf_writer.h"
#include "llm/unicode.h"

namespace spore::llm {
namespace {

constexpr const char* kEndOfText = "<|endoftext|>";

TokenizerMetadata metadata_of(const std::vector<std::string>& tokens, const std::vector<int64_t>& types,
                              const std::vector<std::string>& merges, int32_t eos) {
  TokenizerMetadata md;
  md.tokens = tokens;
  md.types = types;
  md.merges = merges;
  md.bos = md.eos = eos;  // <|endoftext|> is both, as GPT-2's
  return md;
}

Tokenizer from_metadata(const TokenizerMetadata& md) {
  io::GgufWriter w;
  w.add_string("general.architecture", "tokenizer");
  add_tokenizer_metadata(w, md);
  const std::string bytes = w.encode();
  const io::GgufFile f = io::GgufFile::parse(bytes.data(), bytes.size(), "trained BPE tokenizer");
  return Tokenizer::from_gguf(f);
}

}  // namespace

BpeVocab train_bpe(std::string_view text, int64_t vocab_size) {
  SPORE_CHECK(vocab_size >= 257, ErrorCode::invalid_argument,
              "a byte-level BPE vocabulary needs at least 257 tokens (256 bytes and <|endoftext|>), got {}",
              vocab_size);
  SPORE_CHECK(vocab_size <= (int64_t{1} << 20), ErrorCode::invalid_argument, "vocabulary size {} is too large",
              vocab_size);
  BpeVocab v;
  for (int b = 0; b < 256; ++b) v.tokens.push_back(byte_to_unicode(static_cast<uint8_t>(b)));
  v.types.assign(256, static_cast<int64_t>(TokenType::normal));

  // Unique words (the pre-tokenizer's pieces) with their counts, as symbol id sequences; first-seen order.
  const Tokenizer base = from_metadata(metadata_of(v.tokens, v.types, {}, -1));
  std::unordered_map<std::string_view, size_t> index;
  std::vector<std::vector<int32_t>> words;
  std::vector<int64_t> counts;
  for (auto [off, len] : base.pre_tokenize(text)) {
    const std::string_view w = text.substr(off, len);
    auto [it, fresh] = index.emplace(w, words.size());
    if (fresh) {
      std::vector<int32_t> syms(w.size());
      for (size_t i = 0; i < w.size(); ++i) syms[i] = static_cast<uint8_t>(w[i]);
      words.push_back(std::move(syms));
      counts.push_back(0);
    }
    ++counts[it->second];
  }

  std::unordered_map<std::string, int32_t> id_of;
  for (int32_t i = 0; i < 256; ++i) id_of.emplace(v.tokens[static_cast<size_t>(i)], i);
  std::unordered_map<uint64_t, int64_t> pairs;
  const auto key = [](int32_t a, int32_t b) {
    return (static_cast<uint64_t>(static_cast<uint32_t>(a)) << 32) | static_cast<uint32_t>(b);
  };
  while (static_cast<int64_t>(v.tokens.size()) < vocab_size - 1) {
    pairs.clear();
    for (size_t w = 0; w < words.size(); ++w)
      for (size_t i = 0; i + 1 < words[w].size(); ++i) pairs[key(words[w][i], words[w][i + 1])] += counts[w];
    uint64_t best = 0;
    int64_t best_n = 1;
    for (const auto& [k, n] : pairs)
      if (n > best_n || (n == best_n && n > 1 && k < best)) best = k, best_n = n;
    if (best_n < 2) break;  // no pair occurs twice: merging would only memorize
    const auto a = static_cast<int32_t>(best >> 32), b = static_cast<int32_t>(best & 0xffffffffu);
    const std::string joined = v.tokens[static_cast<size_t>(a)] + v.tokens[static_cast<size_t>(b)];
    v.merges.push_back(v.tokens[static_cast<size_t>(a)] + " " + v.tokens[static_cast<size_t>(b)]);
    // Two merges can spell one string ("ab" + "c", "a" + "bc"): the token is shared.
    auto [it, fresh] = id_of.emplace(joined, static_cast<int32_t>(v.tokens.size()));
    if (fresh) {
      v.tokens.push_back(joined);
      v.types.push_back(static_cast<int64_t>(TokenType::normal));
    }
    const int32_t m = it->second;
    for (auto& syms : words) {
      size_t o = 0;
      for (size_t i = 0; i < syms.size(); ++i) {
        if (i + 1 < syms.size() && syms[i] == a && syms[i + 1] == b) {
          syms[o++] = m;
          ++i;
        } else {
          syms[o++] = syms[i];
        }
      }
      syms.resize(o);
    }
  }
  v.eos = static_cast<int32_t>(v.tokens.size());
  v.tokens.emplace_back(kEndOfText);
  v.types.push_back(static_cast<int64_t>(TokenType::control));
  return v;
}

void add_tokenizer_metadata(io::GgufWriter& w, const TokenizerMetadata& md) {
  using VT = io::GgufValueType;
  w.add_string("tokenizer.ggml.model", "gpt2");
  w.add_string("tokenizer.ggml.pre", md.pre);
  w.add_strings("tokenizer.ggml.tokens", md.tokens);
  w.add_ints("tokenizer.ggml.token_type", md.types);
  w.add_strings("tokenizer.ggml.merges", md.merges);
  if (md.bos >= 0) w.add_int("tokenizer.ggml.bos_token_id", md.bos, VT::u32);
  if (md.eos >= 0) w.add_int("tokenizer.ggml.eos_token_id", md.eos, VT::u32);
  if (md.unk >= 0) w.add_int("tokenizer.ggml.unknown_token_id", md.unk, VT::u32);
  if (md.pad >= 0) w.add_int("tokenizer.ggml.padding_token_id", md.pad, VT::u32);
  w.add_bool("tokenizer.ggml.add_bos_token", md.add_bos);
  w.add_bool("tokenizer.ggml.add_eos_token", md.add_eos);
  if (!md.chat_template.empty()) w.add_string("tokenizer.chat_template", md.chat_template);
}

void add_tokenizer_metadata(io::GgufWriter& w, const BpeVocab& v) {
  add_tokenizer_metadata(w, metadata_of(v.tokens, v.types, v.merges, v.eos));
}

Tokenizer tokenizer_of(const BpeVocab& v) { return from_metadata(metadata_of(v.tokens, v.types, v.merges, v.eos)); }

}  // namespace spore::llm
