#pragma once
// LLM tokenizers: SentencePiece-style BPE (Llama 2, Phi-3: merges by score, byte fallback), byte-level BPE with
// pre-tokenizer regexes (GPT-2, Llama 3, Qwen2, DeepSeek, Falcon, StarCoder, ...: merges by rank) and WordPiece
// (BERT). Loaded from GGUF metadata (`tokenizer.ggml.*`, as llama.cpp writes it) or from a Hugging Face
// tokenizer.json (+ tokenizer_config.json beside it for BOS/EOS rules and the chat template).
//
//   auto tok = llm::Tokenizer::load("model.gguf");       // or a HF folder, or tokenizer.json(.gz)
//   std::vector<int32_t> ids = tok.encode("Hello world", /*add_special=*/true, /*parse_special=*/false);
//   std::string text = tok.decode(ids);
//
// encode: special and added tokens are split out of the text first (control tokens such as <|im_start|> only when
// `parse_special`; user-defined added tokens always), then each remaining span is pre-tokenized and merged.
// `add_special` adds BOS/EOS as the model asks (GGUF add_bos_token/add_eos_token, HF post-processor/config).
// Results match llama.cpp's llama_tokenize (and so Hugging Face's tokenizers) on llama.cpp's tokenizer tests.
#include <cstdint>
#include <memory>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

namespace spore::io {
class GgufFile;
}

namespace spore::llm {

enum class VocabType { spm, bpe, wpm };

// Token types as GGUF stores them (tokenizer.ggml.token_type).
enum class TokenType : uint8_t { undefined = 0, normal = 1, unknown = 2, control = 3, user_defined = 4, unused = 5, byte = 6 };

// A byte-level BPE tokenizer as GGUF metadata holds it (tokenizer.ggml.*; llm::add_tokenizer_metadata in
// llm/bpe_train.h writes it). Ids < 0 are absent.
struct TokenizerMetadata {
  std::string pre = "gpt-2";        // tokenizer.ggml.pre: llama.cpp's name of the pre-tokenizer regexes
  std::vector<std::string> tokens;  // tokenizer.ggml.tokens
  std::vector<int64_t> types;       // tokenizer.ggml.token_type (TokenType values)
  std::vector<std::string> merges;  // "left right", by rank
  int32_t bos = -1, eos = -1, unk = -1, pad = -1;
  bool add_bos = false, add_eos = false;
  std::string chat_template;  // "" if none
};

class Tokenizer {
 public:
  // A .gguf file, a Hugging Face folder (tokenizer.json [+ tokenizer_config.json]), or a tokenizer.json file
  // (gzip-compressed allowed). Errors name the path and what is missing or malformed.
  static Tokenizer load(const std::string& path);
  static Tokenizer from_gguf(const io::GgufFile& file);
  // `json` is the text of tokenizer.json, `config` that of tokenizer_config.json ("" if none); `name` is for errors.
  static Tokenizer from_hf_json(const std::string& json, const std::string& config, const std::string& name);

  std::vector<int32_t> encode(std::string_view text, bool add_special = false, bool parse_special = false) const;
  // Bytes back to text: byte-level tokens to their bytes, SentencePiece's "▁" to a space and <0xNN> to byte NN.
  // Control tokens (BOS, <|im_end|>, ...) are kept as their text unless `skip_special`.
  std::string decode(const std::vector<int32_t>& ids, bool skip_special = false) const;
  // Byte-level BPE: the byte ranges {offset, length} of `text` that the pre-tokenizer regexes cut it into, which
  // merges never cross (special tokens are not split out). What a BPE trainer counts pairs within (llm/bpe_train.h).
  std::vector<std::pair<size_t, size_t>> pre_tokenize(std::string_view text) const;
  // The vocabulary string of a token ("Ġworld", "▁Hello", "<0x0A>"); an out-of-range id is an error.
  const std::string& token_to_piece(int32_t id) const;
  // The bytes one token stands for (as decode would produce them, no leading-space removal).
  std::string token_to_text(int32_t id) const;
  int32_t token_id(std::string_view piece) const;  // -1 if the piece is not in the vocabulary
  TokenType token_type(int32_t id) const;

  VocabType type() const;
  const std::string& pre_type() const;  // GGUF tokenizer.ggml.pre, or "hf" for tokenizer.json regexes
  int32_t vocab_size() const;
  int32_t bos_id() const;  // -1 when the model has none
  int32_t eos_id() const;
  int32_t unk_id() const;
  bool add_bos() const;
  bool add_eos() const;
  // End of generation: EOS, EOT/EOM, and control tokens such as <|im_end|>, <|eot_id|>, <|endoftext|>.
  bool is_eog(int32_t id) const;
  // The model's chat template (GGUF tokenizer.chat_template or tokenizer_config.json chat_template), "" if none.
  const std::string& chat_template() const;

  // This byte-level BPE tokenizer as GGUF metadata that tokenizes alike: a tokenizer.json's pre-tokenizer regexes
  // become the tokenizer.ggml.pre whose regexes are the same. What GGUF cannot express is an unsupported error
  // naming the tokenizer.json field (model.type, model.byte_fallback, pre_tokenizer, normalizer, added_tokens'
  // lstrip/rstrip). An NFC normalizer (Qwen2's) is dropped with `drop_nfc` (text already in NFC, such as ASCII,
  // tokenizes alike; llama.cpp's converter drops it too), else it is such an error.
  TokenizerMetadata gguf_metadata(bool drop_nfc = false) const;
  // Writes this byte-level BPE tokenizer as a Hugging Face tokenizer.json and tokenizer_config.json (bos/eos,
  // add_bos_token/add_eos_token, chat_template) into `dir` (created) in Hugging Face's format, which Tokenizer::load
  // reads back to the same tokens. Another vocabulary type is an unsupported error.
  void write_hf(const std::string& dir) const;

  struct Impl;

 private:
  explicit Tokenizer(std::shared_ptr<const Impl> impl) : impl_(std::move(impl)) {}
  std::shared_ptr<const Impl> impl_;
};

}  // namespace spore::llm
