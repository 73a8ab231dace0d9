// Chat templates: recognition of the Llama-3, ChatML (Qwen) and DeepSeek-R1 forms from template text, exact
// rendering, overrides, and clear errors for unknown templates.
#include <gtest/gtest.h>

#include <fstream>
#include <nlohmann/json.hpp>

#include "llm/chat_template.h"
#include "llm/tokenizer.h"
#include "test_util.h"

namespace spore::llm {
namespace {

// Excerpts of real templates: enough for recognition (the markers), not a Jinja engine's input.
const char* kLlama3 =
    "{% set loop_messages = messages %}{% for message in loop_messages %}{% set content = '<|start_header_id|>' + "
    "message['role'] + '<|end_header_id|>\n\n'+ message['content'] | trim + '<|eot_id|>' %}...";
const char* kLlama31 =
    "{{- bos_token }}...{{- \"Cutting Knowledge Date: December 2023\\n\" }}...<|start_header_id|>...<|eot_id|>";
const char* kQwen25 =
    "{%- if messages[0]['role'] == 'system' %}...{%- else %}{{- '<|im_start|>system\\nYou are Qwen, created by "
    "Alibaba Cloud. You are a helpful assistant.<|im_end|>\\n' }}{%- endif %}...<|im_start|>...<|im_end|>";
const char* kDeepSeekR1 =
    "{% if not add_generation_prompt is defined %}...{{'<\xEF\xBD\x9CUser\xEF\xBD\x9C>' + message['content']}}..."
    "{% if add_generation_prompt %}{{'<\xEF\xBD\x9C" "Assistant\xEF\xBD\x9C><think>\\n'}}{% endif %}";

const std::vector<ChatMessage> kConversation = {
    {"system", "Be brief."}, {"user", "Hi!"}, {"assistant", "Hello."}, {"user", " What is 2+2? "}};

TEST(ChatTemplate, Llama3) {
  const ChatStyle st = detect_chat_style(kLlama3);
  EXPECT_EQ(st.format, ChatFormat::llama3);
  EXPECT_FALSE(st.llama31_dates);
  EXPECT_EQ(render_chat(st, kConversation, true),
            "<|begin_of_text|><|start_header_id|>system<|end_header_id|>\n\nBe brief.<|eot_id|>"
            "<|start_header_id|>user<|end_header_id|>\n\nHi!<|eot_id|>"
            "<|start_header_id|>assistant<|end_header_id|>\n\nHello.<|eot_id|>"
            "<|start_header_id|>user<|end_header_id|>\n\nWhat is 2+2?<|eot_id|>"
            "<|start_header_id|>assistant<|end_header_id|>\n\n");
  const ChatStyle st31 = detect_chat_style(kLlama31);
  EXPECT_TRUE(st31.llama31_dates);
  EXPECT_EQ(render_chat(st31, {{"user", "Hi"}}, false),
            "<|begin_of_text|><|start_header_id|>system<|end_header_id|>\n\nCutting Knowledge Date: December 2023\n"
            "Today Date: 26 Jul 2024\n\n<|eot_id|><|start_header_id|>user<|end_header_id|>\n\nHi<|eot_id|>");
}

TEST(ChatTemplate, ChatMLWithQwenDefaultSystem) {
  const ChatStyle st = detect_chat_style(kQwen25);
  EXPECT_EQ(st.format, ChatFormat::chatml);
  EXPECT_EQ(render_chat(st, {{"user", "Hi"}}, true),
            "<|im_start|>system\nYou are Qwen, created by Alibaba Cloud. You are a helpful assistant.<|im_end|>\n"
            "<|im_start|>user\nHi<|im_end|>\n<|im_start|>assistant\n");
  // A conversation with its own system prompt gets no default one; content is kept verbatim (not trimmed).
  EXPECT_EQ(render_chat(st, kConversation, false),
            "<|im_start|>system\nBe brief.<|im_end|>\n<|im_start|>user\nHi!<|im_end|>\n"
            "<|im_start|>assistant\nHello.<|im_end|>\n<|im_start|>user\n What is 2+2? <|im_end|>\n");
}

TEST(ChatTemplate, DeepSeekR1) {
  const ChatStyle st = detect_chat_style(kDeepSeekR1);
  EXPECT_EQ(st.format, ChatFormat::deepseek_r1);
  EXPECT_TRUE(st.think_prefix);
  EXPECT_EQ(render_chat(st, {{"user", "Hi"}, {"assistant", "<think>hmm</think> Hello."}, {"user", "Bye"}}, true),
            "<\xEF\xBD\x9C" "begin\xE2\x96\x81of\xE2\x96\x81sentence\xEF\xBD\x9C><\xEF\xBD\x9CUser\xEF\xBD\x9C>Hi"
            "<\xEF\xBD\x9C" "Assistant\xEF\xBD\x9C>Hello.<\xEF\xBD\x9C" "end\xE2\x96\x81of\xE2\x96\x81sentence\xEF\xBD\x9C>"
            "<\xEF\xBD\x9CUser\xEF\xBD\x9C>Bye<\xEF\xBD\x9C" "Assistant\xEF\xBD\x9C><think>\n");
}

TEST(ChatTemplate, OverridesAndErrors) {
  EXPECT_EQ(detect_chat_style("anything", "llama3").format, ChatFormat::llama3);
  EXPECT_EQ(detect_chat_style("", "chatml").format, ChatFormat::chatml);
  const std::string unknown = std::string("{% for m in messages %}[INST] {{ m.content }} [/INST]") + std::string(80, 'x');
  const std::string err = testing::error_of([&] { detect_chat_style(unknown); });
  EXPECT_NE(err.find(unknown.substr(0, 60)), std::string::npos) << err;
  EXPECT_EQ(err.find(unknown.substr(0, 61)), std::string::npos) << err;
  EXPECT_NE(err.find("--chat-template"), std::string::npos) << err;
  EXPECT_NE(testing::error_of([&] { detect_chat_style(kLlama3, "vicuna"); }).find("vicuna"), std::string::npos);
  EXPECT_NE(testing::error_of([&] { detect_chat_style(""); }).find("no chat template"), std::string::npos);
  EXPECT_NE(testing::error_of([&] { render_chat(detect_chat_style(kLlama3), {{"robot", "x"}}, true); }).find("robot"),
            std::string::npos);
}

TEST(ChatTemplate, Qwen3TemplateTokenizes) {
  SPORE_SHARED_DATA_DIR(dir, "tokenizer-tests");
  const Tokenizer tok = Tokenizer::load(dir + "/hf-qwen3");
  EXPECT_EQ(detect_chat_style(tok.chat_template()).format, ChatFormat::chatml);
  const std::string prompt = apply_chat_template(tok, {{"user", "Hi"}}, true);
  EXPECT_EQ(prompt, "<|im_start|>user\nHi<|im_end|>\n<|im_start|>assistant\n");
  const auto ids = tok.encode(prompt, false, true);
  const int32_t im_start = tok.token_id("<|im_start|>");
  EXPECT_EQ(std::count(ids.begin(), ids.end(), im_start), 2);
  EXPECT_EQ(std::count(ids.begin(), ids.end(), tok.token_id("<|im_end|>")), 1);
  EXPECT_EQ(tok.decode(ids), prompt);
}

}  // namespace
}  // namespace spore::llm
