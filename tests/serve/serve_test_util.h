#pragma once
// Helpers the serve test suites share: the tiny Llama's tokenizer from the shared data (skip without it, fail under
// CI=true), and the HttpError a request handler throws.
#include <filesystem>
#include <optional>
#include <string>

#include <gtest/gtest.h>

#include "llm/tokenizer.h"
#include "serve/errors.h"
#include "test_util.h"

namespace spore::serve::testing {

inline std::optional<llm::Tokenizer> tiny_tokenizer() {
  const std::string path = spore::testing::shared_data_dir("gguf-models/llama-2-tiny-random.gguf");
  if (!std::filesystem::exists(path)) return std::nullopt;
  return llm::Tokenizer::load(path);
}

// The error f throws as a RequestError, or one with status 0 when it throws none.
template <typename F>
HttpError error_of(F&& f) {
  try {
    f();
  } catch (const RequestError& e) {
    return e.error();
  }
  HttpError none;
  none.status = 0;
  return none;
}

}  // namespace spore::serve::testing

// Declares `tok`, the tiny Llama's tokenizer; skips the test without the shared data (fails under CI=true).
#define NEED_TOKENIZER(tok)                                                             \
  auto tok = ::spore::serve::testing::tiny_tokenizer();                                 \
  if (!tok) {                                                                           \
    if (spore::testing::running_in_ci()) FAIL() << "shared data missing under CI=true"; \
    GTEST_SKIP() << "shared data missing: gguf-models/llama-2-tiny-random.gguf";        \
  }
