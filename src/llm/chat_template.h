#pragma once
// Chat prompts for instruction-tuned models. spore does not run Jinja: it recognizes the model's chat template
// (GGUF tokenizer.chat_template or tokenizer_config.json chat_template) by its markers and renders the known
// forms itself:
//   llama3       <|start_header_id|>role<|end_header_id|>\n\ncontent<|eot_id|> (Llama 3 / 3.1 / 3.2)
//   chatml       <|im_start|>role\ncontent<|im_end|>\n (Qwen2, Qwen2.5, Qwen3, many fine-tunes)
//   deepseek-r1  <｜User｜>content<｜Assistant｜>  (DeepSeek-R1 and its Qwen/Llama distills)
// The rendered text contains the special tokens as text: tokenize it with parse_special=true and add_special=false
// (the BOS, where the form has one, is already in the text).
#include <string>
#include <vector>

namespace spore::llm {

class Tokenizer;

struct ChatMessage {
  std::string role;  // "system", "user", "assistant"
  std::string content;
};

enum class ChatFormat { llama3, chatml, deepseek_r1 };

struct ChatStyle {
  ChatFormat format = ChatFormat::chatml;
  std::string default_system;  // a system prompt the template adds when the conversation has none ("" = none)
  bool llama31_dates = false;  // Llama 3.1+: the system turn starts with "Cutting Knowledge Date: ..."
  bool think_prefix = false;   // DeepSeek-R1: the generation prompt opens a <think> block
};

// Recognizes the template. `override_name` ("llama3", "chatml", "deepseek-r1"), when not empty, wins; an unknown
// override or an unrecognized template is an error (the latter quotes the template's first 60 characters and
// names the --chat-template override).
ChatStyle detect_chat_style(const std::string& tmpl, const std::string& override_name = "");
const char* chat_format_name(ChatFormat f);

// Renders the conversation; with `add_generation_prompt` it ends with the opening of the assistant's turn.
std::string render_chat(const ChatStyle& style, const std::vector<ChatMessage>& messages, bool add_generation_prompt);

// detect_chat_style(tokenizer.chat_template(), override_name) then render_chat.
std::string apply_chat_template(const Tokenizer& tok, const std::vector<ChatMessage>& messages,
                                bool add_generation_prompt, const std::string& override_name = "");

}  // namespace spore::llm
