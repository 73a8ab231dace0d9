#pragma once
// Training a small byte-level BPE tokenizer (GPT-2 style) on a text, and writing it as GGUF tokenizer metadata
// (tokenizer.ggml.model "gpt2", pre "gpt-2", tokens, token types, merges, bos/eos ids) that llm::Tokenizer and
// llama.cpp load.
//
//   llm::BpeVocab v = llm::train_bpe(text, 512);   // 256 byte tokens, 255 merges, <|endoftext|>
//   io::GgufWriter w;  llm::add_tokenizer_metadata(w, v);
//   llm::Tokenizer tok = llm::tokenizer_of(v);     // encodes as the GGUF written above will
//
// Words are the pre-tokenizer's pieces (Tokenizer::pre_tokenize with GPT-2's regex); each step merges the most
// frequent adjacent pair over all words (ties: the smallest (left, right) id pair), so the result depends only on
// the text and the size.
#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

#include "llm/tokenizer.h"

namespace spore::io {
class GgufWriter;
}

namespace spore::llm {

struct BpeVocab {
  std::vector<std::string> tokens;  // vocabulary strings (bytes mapped GPT-2 style)
  std::vector<int64_t> types;       // TokenType values
  std::vector<std::string> merges;  // "left right", by rank
  int32_t eos = -1;                 // <|endoftext|>, also BOS (not added by encode)
};

// vocab_size >= 257 (the 256 bytes and <|endoftext|>); fewer tokens when the text runs out of pairs seen twice.
BpeVocab train_bpe(std::string_view text, int64_t vocab_size);
void add_tokenizer_metadata(io::GgufWriter& w, const BpeVocab& v);
// Any byte-level BPE's metadata (Tokenizer::gguf_metadata: a tokenizer.json's, for one): tokenizer.ggml.model
// "gpt2", pre, tokens, token types, merges, bos/eos/unk/padding ids (when >= 0), add_bos/add_eos, chat template.
void add_tokenizer_metadata(io::GgufWriter& w, const TokenizerMetadata& md);
Tokenizer tokenizer_of(const BpeVocab& v);

}  // namespace spore::llm
