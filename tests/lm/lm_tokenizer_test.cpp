// The byte-level BPE trainer (llm/bpe_train.h): the tokenizer written to GGUF metadata loads in llm::Tokenizer and
// tokenizes exactly as the trainer's own tokenizer; decode(encode(text)) == text, bytes outside the training text
// included; training is deterministic and merges what is frequent.
#include <gtest/gtest.h>

#include "io/gguf/gguf.h"
#include "io/gguf/gguf_writer.h"
#include "llm/bpe_train.h"
#include "llm/tokenizer.h"
#include "test_util.h"

namespace spore::llm {
namespace {

// Pseudo-words of 1-4 syllables (a fixed LCG), punctuation and line breaks: many distinct pairs to merge.
std::string corpus() {
  const char* syl[] = {"ka", "lo", "mi", "ne", "ru", "sa", "to", "vi", "ze", "pa", "qu", "th"};
  std::string s;
  uint32_t x = 12345;
  auto next = [&] { return (x = x * 1103515245u + 12345u) >> 16; };
  for (int i = 0; i < 3000; ++i) {
    const uint32_t n = 1 + next() % 4;
    for (uint32_t j = 0; j < n; ++j) s += syl[next() % 12];
    const uint32_t p = next() % 16;
    s += p == 0 ? ".\n" : p == 1 ? ", " : " ";
  }
  return s;
}

TEST(BpeTrain, GgufTokenizerEncodesAsTheTrainerAndRoundTrips) {
  const std::string text = corpus();
  const BpeVocab v = train_bpe(text, 320);
  EXPECT_EQ(v.tokens.size(), 320u);
  EXPECT_EQ(v.merges.size(), 320u - 257u);
  EXPECT_EQ(v.eos, 319);
  EXPECT_EQ(v.tokens.back(), "<|endoftext|>");
  const Tokenizer trainer = tokenizer_of(v);

  const auto path = testing::temp_dir("bpe") / "tok.gguf";
  io::GgufWriter w;
  w.add_string("general.architecture", "tokenizer");
  add_tokenizer_metadata(w, v);
  w.write(path.string());
  const io::GgufFile f = io::GgufFile::open(path.string());
  EXPECT_EQ(f.get_string("tokenizer.ggml.model"), "gpt2");
  EXPECT_EQ(f.get_string("tokenizer.ggml.pre"), "gpt-2");
  EXPECT_EQ(f.get_strings("tokenizer.ggml.merges").size(), v.merges.size());
  const Tokenizer loaded = Tokenizer::load(path.string());
  EXPECT_EQ(loaded.vocab_size(), 320);
  EXPECT_EQ(loaded.eos_id(), 319);
  EXPECT_EQ(loaded.bos_id(), 319);
  EXPECT_FALSE(loaded.add_bos());
  EXPECT_TRUE(loaded.is_eog(319));

  const std::string other = "Whether 'tis nobler, to suffer? \xc3\xa9t\xc3\xa9 \t 1234 <|endoftext|>\n\n  x";
  for (const std::string& s : {text, other}) {
    const auto a = trainer.encode(s), b = loaded.encode(s);
    EXPECT_EQ(a, b);
    EXPECT_EQ(loaded.decode(b), s);
  }
  // Frequent syllables and words became tokens: well under half as many tokens as bytes.
  EXPECT_LT(trainer.encode(text).size() * 2, text.size());
  // Special tokens are text unless asked for.
  EXPECT_EQ(loaded.encode("<|endoftext|>", false, true), std::vector<int32_t>{319});
}

TEST(BpeTrain, DeterministicAndBounded) {
  const std::string text = corpus();
  const BpeVocab a = train_bpe(text, 300), b = train_bpe(text, 300);
  EXPECT_EQ(a.tokens, b.tokens);
  EXPECT_EQ(a.merges, b.merges);
  // A text with few distinct pairs stops early: every merge is of a pair seen at least twice.
  const BpeVocab tiny = train_bpe("abababab", 1000);
  EXPECT_LT(tiny.tokens.size(), 270u);
  EXPECT_NE(testing::error_of([] { train_bpe("abc", 100); }).find("at least 257"), std::string::npos);
}

}  // namespace
}  // namespace spore::llm
