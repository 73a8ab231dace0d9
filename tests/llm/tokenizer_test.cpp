// Tokenizers against llama.cpp's tokenizer tests (tests/test-tokenizer-0: each .inp holds inputs separated by
// "\n__ggml_vocab_test__\n", each .out line the expected ids; tokenized WITHOUT BOS/EOS and without parsing special
// tokens), plus round trips, special tokens, BOS/EOS rules, errors and speed.
#include <gtest/gtest.h>

#include <chrono>
#include <fstream>
#include <iostream>
#include <set>
#include <sstream>

#include "data/gzip.h"
#include "llm/tokenizer.h"
#include "llm/unicode.h"
#include "test_util.h"

namespace spore::llm {
namespace {

namespace fs = std::filesystem;

std::string read_all(const fs::path& p) {
  std::ifstream f(p, std::ios::binary);
  std::stringstream ss;
  ss << f.rdbuf();
  return ss.str();
}

struct VocabCase {
  const char* name;   // llama.cpp's ggml-vocab-<name>.gguf
  const char* model;  // where the vocabulary comes from, relative to tokenizer-tests/ ("" = GGUF beside the .inp)
};

const VocabCase kCases[] = {
    {"gpt-2", ""},           {"qwen2", "hf-qwen3/tokenizer.json.gz"},
    {"deepseek-r1-qwen", "hf-qwen3/tokenizer.json.gz"},
    {"deepseek-llm", ""},    {"deepseek-coder", ""},  {"falcon", ""},     {"mpt", ""},
    {"starcoder", ""},       {"refact", ""},          {"llama-spm", ""},  {"phi-3", ""},
    {"bert-bge", ""},
};
// llama.cpp test cases in shared data that come without a vocabulary file (only .inp/.out): nothing to run them
// with. CheckedCasesCoverEveryProvidedVocabulary fails if one of them gains a vocabulary or a new one appears.
const char* const kNoVocabulary[] = {"llama-bpe", "command-r", "roberta-bpe", "chameleon"};

// Cache loaded tokenizers: several tests use the same vocabulary.
const Tokenizer& load_cached(const std::string& path) {
  static std::map<std::string, Tokenizer> cache;
  auto it = cache.find(path);
  if (it == cache.end()) it = cache.emplace(path, Tokenizer::load(path)).first;
  return it->second;
}

class LlamaCppVocab : public ::testing::TestWithParam<VocabCase> {};

TEST_P(LlamaCppVocab, MatchesExpectedIds) {
  SPORE_SHARED_DATA_DIR(dir, "tokenizer-tests");
  const VocabCase& c = GetParam();
  const fs::path base = fs::path(dir) / "llama.cpp-vocab" / (std::string("ggml-vocab-") + c.name + ".gguf");
  const fs::path model = *c.model ? fs::path(dir) / c.model : base;
  ASSERT_TRUE(fs::exists(model)) << "vocab '" << c.name << "': no vocabulary file " << model;
  const Tokenizer& tok = load_cached(model.string());

  std::string inp = read_all(base.string() + ".inp");
  ASSERT_FALSE(inp.empty()) << base << ".inp";
  std::vector<std::string> inputs;
  const std::string delim = "\n__ggml_vocab_test__\n";
  for (size_t pos; (pos = inp.find(delim)) != std::string::npos; inp.erase(0, pos + delim.size()))
    inputs.push_back(inp.substr(0, pos));
  std::ifstream out(base.string() + ".out");
  std::vector<std::vector<int32_t>> expected;
  for (std::string line; std::getline(out, line);) {
    std::istringstream ss(line);
    std::vector<int32_t> ids;
    for (int32_t id; ss >> id;) ids.push_back(id);
    expected.push_back(ids);
  }
  ASSERT_EQ(inputs.size(), expected.size()) << c.name << ": .inp and .out disagree on the number of cases";
  ASSERT_GT(inputs.size(), 20u);
  int failures = 0;
  for (size_t i = 0; i < inputs.size(); ++i) {
    const std::vector<int32_t> got = tok.encode(inputs[i], /*add_special=*/false, /*parse_special=*/false);
    if (got != expected[i]) {
      ++failures;
      std::string g, e;
      for (int32_t id : got) g.append(1, ' ').append(std::to_string(id));
      for (int32_t id : expected[i]) e.append(1, ' ').append(std::to_string(id));
      ADD_FAILURE() << c.name << " case " << i << " input '" << inputs[i] << "'\n  expected:" << e
                    << "\n  got:     " << g;
    }
  }
  EXPECT_EQ(failures, 0);
}

INSTANTIATE_TEST_SUITE_P(Tokenizer, LlamaCppVocab, ::testing::ValuesIn(kCases),
                         [](const ::testing::TestParamInfo<VocabCase>& info) {
                           std::string n = info.param.name;
                           for (char& ch : n)
                             if (ch == '-') ch = '_';
                           return n;
                         });

TEST(Tokenizer, CheckedCasesCoverEveryProvidedVocabulary) {
  SPORE_SHARED_DATA_DIR(dir, "tokenizer-tests");
  std::set<std::string> checked, missing(std::begin(kNoVocabulary), std::end(kNoVocabulary));
  for (const VocabCase& c : kCases) checked.insert(c.name);
  int inputs = 0;
  for (const auto& e : fs::directory_iterator(fs::path(dir) / "llama.cpp-vocab")) {
    const std::string f = e.path().filename().string();
    if (!f.starts_with("ggml-vocab-") || !f.ends_with(".gguf.inp")) continue;
    ++inputs;
    const std::string name = f.substr(11, f.size() - 11 - 9);
    const bool has_vocab = fs::exists(e.path().parent_path() / ("ggml-vocab-" + name + ".gguf"));
    if (checked.count(name)) continue;
    EXPECT_TRUE(missing.count(name)) << "test cases for vocab '" << name << "' are not checked: add them to kCases";
    EXPECT_FALSE(has_vocab) << "vocab '" << name << "' now has a vocabulary file: move it to kCases";
    std::cout << "not checked (no vocabulary file in shared data): " << name << "\n";
  }
  EXPECT_EQ(inputs, static_cast<int>(checked.size() + missing.size()));
}

std::string vocab_path(const std::string& dir, const std::string& name) {
  return dir + "/llama.cpp-vocab/ggml-vocab-" + name + ".gguf";
}

TEST(Tokenizer, ByteLevelRoundTripAndPieces) {
  SPORE_SHARED_DATA_DIR(dir, "tokenizer-tests");
  const Tokenizer& tok = load_cached(vocab_path(dir, "gpt-2"));
  EXPECT_EQ(tok.type(), VocabType::bpe);
  EXPECT_EQ(tok.vocab_size(), 50257);
  const std::string text = "Hello world! \xF0\x9F\xA6\x99 caf\xC3\xA9\n\n\tcode  ";
  const auto ids = tok.encode(text);
  EXPECT_EQ(tok.decode(ids), text);
  EXPECT_EQ(tok.token_to_piece(tok.encode(" world")[0]), "\xC4\xA0world");  // "Ġworld"
  EXPECT_NE(testing::error_of([&] { tok.token_to_piece(50257); }).find("out of range"), std::string::npos);
}

TEST(Tokenizer, SentencePieceBosAndDecode) {
  SPORE_SHARED_DATA_DIR(dir, "tokenizer-tests");
  const Tokenizer& tok = load_cached(vocab_path(dir, "llama-spm"));
  EXPECT_EQ(tok.type(), VocabType::spm);
  EXPECT_EQ(tok.bos_id(), 1);
  EXPECT_EQ(tok.eos_id(), 2);
  const auto plain = tok.encode("Hello world");
  const auto with = tok.encode("Hello world", /*add_special=*/true);
  ASSERT_EQ(with.size(), plain.size() + 1);
  EXPECT_EQ(with[0], 1);
  EXPECT_TRUE(std::equal(plain.begin(), plain.end(), with.begin() + 1));
  EXPECT_EQ(tok.decode(with, /*skip_special=*/true), "Hello world");
  EXPECT_EQ(tok.decode(with), "<s>Hello world");
  // Characters without a token fall back to <0xNN> byte tokens and decode back to the same bytes.
  const std::string rare = "\xF0\x9F\xA6\x99 x";
  EXPECT_EQ(tok.decode(tok.encode(rare)), rare);
  EXPECT_TRUE(tok.is_eog(2));
  EXPECT_FALSE(tok.is_eog(1));
  // Control tokens are split out only when asked to parse special tokens.
  EXPECT_EQ(tok.encode("<s>", false, true), std::vector<int32_t>{1});
  EXPECT_NE(tok.encode("<s>", false, false), std::vector<int32_t>{1});
}

TEST(Tokenizer, QwenSpecialTokensAndEog) {
  SPORE_SHARED_DATA_DIR(dir, "tokenizer-tests");
  const Tokenizer& tok = load_cached(dir + "/hf-qwen3/tokenizer.json.gz");
  const int32_t im_start = tok.token_id("<|im_start|>"), im_end = tok.token_id("<|im_end|>");
  ASSERT_GE(im_start, 0);
  ASSERT_GE(im_end, 0);
  EXPECT_TRUE(tok.is_eog(im_end));
  EXPECT_TRUE(tok.is_eog(tok.token_id("<|endoftext|>")));
  EXPECT_FALSE(tok.is_eog(im_start));
  const auto ids = tok.encode("<|im_start|>user\nHi<|im_end|>", false, true);
  ASSERT_GE(ids.size(), 4u);
  EXPECT_EQ(ids.front(), im_start);
  EXPECT_EQ(ids.back(), im_end);
  const auto raw = tok.encode("<|im_start|>", false, false);
  EXPECT_GT(raw.size(), 1u);  // not parsed: plain text
  EXPECT_EQ(tok.decode(raw), "<|im_start|>");
  // Qwen adds no BOS; --add-special changes nothing.
  EXPECT_EQ(tok.encode("Hi", true), tok.encode("Hi", false));
  EXPECT_FALSE(tok.chat_template().empty());
}

TEST(Tokenizer, WordPieceAddsClsSep) {
  SPORE_SHARED_DATA_DIR(dir, "tokenizer-tests");
  const Tokenizer& tok = load_cached(vocab_path(dir, "bert-bge"));
  EXPECT_EQ(tok.type(), VocabType::wpm);
  const auto ids = tok.encode("Hello, World!", true);
  ASSERT_GE(ids.size(), 3u);
  EXPECT_EQ(tok.token_to_piece(ids.front()), "[CLS]");
  EXPECT_EQ(tok.token_to_piece(ids.back()), "[SEP]");
  EXPECT_EQ(tok.decode(tok.encode("Hello, World!")), "hello, world!");
}

TEST(Tokenizer, UnicodeNfc) {
  EXPECT_EQ(nfc("plain ascii"), "plain ascii");
  EXPECT_EQ(nfc("caf" "e\xCC\x81"), "caf\xC3\xA9");                          // e + U+0301 -> U+00E9
  EXPECT_EQ(nfc("\xE1\x84\x80\xE1\x85\xA1\xE1\x86\xA8"), "\xEA\xB0\x81");  // Hangul jamo L V T -> U+AC01
  EXPECT_EQ(nfc("\xE2\x84\xAB"), "\xC3\x85");                               // U+212B ANGSTROM SIGN -> U+00C5
  EXPECT_EQ(nfc("a\xCC\x81\xCC\xA3"), "\xE1\xBA\xA1\xCC\x81");              // reordered, then a+U+0323 composed
  EXPECT_EQ(nfc("\xE0\xA5\x98"), "\xE0\xA4\x95\xE0\xA4\xBC");                // U+0958 is excluded from composition
  EXPECT_EQ(nfc("Ka\xCC\x88\xCC\x80x"), "K\xC3\xA4\xCC\x80x");             // a second mark of the same class stays
}

TEST(Tokenizer, QwenAppliesNfc) {
  SPORE_SHARED_DATA_DIR(dir, "tokenizer-tests");
  const Tokenizer& tok = load_cached(dir + "/hf-qwen3/tokenizer.json.gz");
  EXPECT_EQ(tok.encode("Caf" "e\xCC\x81 au lait"), tok.encode("Caf\xC3\xA9 au lait"));
}

// Hugging Face forms without shared data: a SentencePiece-style BPE (Llama 2 layout: Prepend/Replace normalizer,
// ranked merges, byte fallback) and a WordPiece (BERT) tokenizer.json.
TEST(Tokenizer, HfSentencePieceBpeJson) {
  const std::string json = R"({
    "added_tokens": [{"id": 0, "content": "<unk>", "special": true}, {"id": 1, "content": "<s>", "special": true},
                     {"id": 2, "content": "</s>", "special": true}],
    "normalizer": {"type": "Sequence", "normalizers": [{"type": "Prepend", "prepend": "\u2581"},
                   {"type": "Replace", "pattern": {"String": " "}, "content": "\u2581"}]},
    "pre_tokenizer": null,
    "post_processor": {"type": "TemplateProcessing", "single": [{"SpecialToken": {"id": "<s>", "type_id": 0}},
                       {"Sequence": {"id": "A", "type_id": 0}}]},
    "model": {"type": "BPE", "byte_fallback": true, "unk_token": "<unk>",
              "vocab": {"<unk>": 0, "<s>": 1, "</s>": 2, "<0x21>": 3, "\u2581": 4, "h": 5, "i": 6,
                        "\u2581h": 7, "\u2581hi": 8},
              "merges": ["\u2581 h", "\u2581h i"]}})";
  const Tokenizer tok = Tokenizer::from_hf_json(json, "", "llama2-like");
  EXPECT_EQ(tok.type(), VocabType::spm);
  EXPECT_EQ(tok.encode("hi hi!"), (std::vector<int32_t>{8, 8, 3}));  // "!" has no token: byte <0x21>
  EXPECT_EQ(tok.encode("hi hi!", true), (std::vector<int32_t>{1, 8, 8, 3}));
  EXPECT_EQ(tok.decode(tok.encode("hi hi!", true), true), "hi hi!");
  EXPECT_TRUE(tok.is_eog(2) || tok.eos_id() < 0);
}

TEST(Tokenizer, HfWordPieceJson) {
  const std::string json = R"({
    "added_tokens": [{"id": 0, "content": "[PAD]", "special": true}, {"id": 1, "content": "[UNK]", "special": true},
                     {"id": 2, "content": "[CLS]", "special": true}, {"id": 3, "content": "[SEP]", "special": true}],
    "normalizer": {"type": "BertNormalizer", "lowercase": true},
    "pre_tokenizer": {"type": "BertPreTokenizer"},
    "post_processor": {"type": "TemplateProcessing", "single": [{"SpecialToken": {"id": "[CLS]", "type_id": 0}},
                       {"Sequence": {"id": "A", "type_id": 0}}, {"SpecialToken": {"id": "[SEP]", "type_id": 0}}]},
    "model": {"type": "WordPiece", "unk_token": "[UNK]", "continuing_subword_prefix": "##",
              "vocab": {"[PAD]": 0, "[UNK]": 1, "[CLS]": 2, "[SEP]": 3, "hello": 4, "world": 5, "##s": 6, ",": 7,
                        "wor": 8}}})";
  const Tokenizer tok = Tokenizer::from_hf_json(json, "", "bert-like");
  EXPECT_EQ(tok.type(), VocabType::wpm);
  EXPECT_EQ(tok.encode("H\xC3\xA9llo, Worlds xyz", true), (std::vector<int32_t>{2, 4, 7, 5, 6, 1, 3}));
  EXPECT_EQ(tok.decode(tok.encode("Hello, worlds")), "hello, worlds");
}

TEST(Tokenizer, OneMegabyteIsFast) {
  SPORE_SHARED_DATA_DIR(dir, "tokenizer-tests");
  const Tokenizer& tok = load_cached(vocab_path(dir, "gpt-2"));
  std::string text;
  const std::string para =
      "The quick brown fox jumps over the lazy dog; it's 1234 times faster than you'd think. "
      "Gr\xC3\xBC\xC3\x9F" "e aus M\xC3\xBCnchen! \xE4\xBD\xA0\xE5\xA5\xBD\xE4\xB8\x96\xE7\x95\x8C\n";
  while (text.size() < (1u << 20)) text += para + std::to_string(text.size()) + " ";
  const auto t0 = std::chrono::steady_clock::now();
  const auto ids = tok.encode(text);
  const double s = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  EXPECT_GT(ids.size(), text.size() / 8);
  EXPECT_EQ(tok.decode(ids), text);
  EXPECT_LT(s, 2.0) << "1 MB took " << s << " s";
  RecordProperty("seconds_per_MB", std::to_string(s));
}

TEST(Tokenizer, LongRunsRoundTrip) {
  SPORE_SHARED_DATA_DIR(dir, "tokenizer-tests");
  for (const std::string& model : {vocab_path(dir, "gpt-2"), dir + "/hf-qwen3/tokenizer.json.gz",
                                  vocab_path(dir, "llama-spm")}) {
    const Tokenizer& tok = load_cached(model);
    for (const std::string& text : {std::string(200000, ' ') + "x", std::string(200000, 'a'),
                                    std::string(100000, '\n') + "\t" + std::string(100000, '7')}) {
      const auto ids = tok.encode(text);
      std::string back = tok.decode(ids);
      EXPECT_EQ(back.size(), text.size()) << model;
      EXPECT_TRUE(back == text) << model;
    }
  }
}

TEST(Tokenizer, BadFilesAreClearErrors) {
  const auto tmp = testing::temp_dir("tokenizer");
  const std::string missing = (tmp / "nope.gguf").string();
  EXPECT_NE(testing::error_of([&] { Tokenizer::load(missing); }).find("nope.gguf"), std::string::npos);
  const std::string junk = (tmp / "tokenizer.json").string();
  std::ofstream(junk) << "{\"model\": 3";
  EXPECT_NE(testing::error_of([&] { Tokenizer::load(junk); }).find("not valid JSON"), std::string::npos);
  std::ofstream(junk) << R"({"model": {"type": "Unigram", "vocab": {}}})";
  EXPECT_NE(testing::error_of([&] { Tokenizer::load(junk); }).find("Unigram"), std::string::npos);
}

}  // namespace
}  // namespace spore::llm
