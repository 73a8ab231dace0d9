#include "llm/chat_template.h"

#include "base/error.h"
#include "llm/tokenizer.h"

namespace spore::llm {

namespace {

bool contains(const std::string& s, const char* needle) { return s.find(needle) != std::string::npos; }

std::string trim(const std::string& s) {
  const char* ws = " \t\n\r\f\v";
  const size_t b = s.find_first_not_of(ws);
  if (b == std::string::npos) return "";
  return s.substr(b, s.find_last_not_of(ws) - b + 1);
}

// The first `n` characters of a template for an error message, newlines shown as \n.
std::string head(const std::string& s, size_t n) {
  std::string out;
  for (size_t i = 0; i < s.size() && i < n; ++i) out += s[i] == '\n' ? std::string("\\n") : std::string(1, s[i]);
  return out;
}

}  // namespace

const char* chat_format_name(ChatFormat f) {
  switch (f) {
    case ChatFormat::llama3:
      return "llama3";
    case ChatFormat::chatml:
      return "chatml";
    case ChatFormat::deepseek_r1:
      return "deepseek-r1";
  }
  return "?";
}

ChatStyle detect_chat_style(const std::string& tmpl, const std::string& override_name) {
  ChatStyle st;
  if (!override_name.empty()) {
    if (override_name == "llama3") {
      st.format = ChatFormat::llama3;
    } else if (override_name == "llama3.1") {
      st.format = ChatFormat::llama3;
      st.llama31_dates = true;
    } else if (override_name == "chatml") {
      st.format = ChatFormat::chatml;
    } else if (override_name == "deepseek-r1") {
      st.format = ChatFormat::deepseek_r1;
    } else {
      SPORE_FAIL(ErrorCode::invalid_argument,
                 "chat template '{}' is not known (known: llama3, llama3.1, chatml, deepseek-r1)", override_name);
    }
    return st;
  }
  // DeepSeek-R1 first: its Qwen distills keep Qwen's vocabulary (which has <|im_start|>) but not its template.
  if (contains(tmpl, "<\xEF\xBD\x9C" "User\xEF\xBD\x9C>") && contains(tmpl, "<\xEF\xBD\x9C" "Assistant\xEF\xBD\x9C>")) {
    st.format = ChatFormat::deepseek_r1;
    st.think_prefix = contains(tmpl, "<\xEF\xBD\x9C" "Assistant\xEF\xBD\x9C><think>\\n");
  } else if (contains(tmpl, "<|start_header_id|>") && contains(tmpl, "<|eot_id|>")) {
    st.format = ChatFormat::llama3;
    st.llama31_dates = contains(tmpl, "Cutting Knowledge Date");
  } else if (contains(tmpl, "<|im_start|>") && contains(tmpl, "<|im_end|>")) {
    st.format = ChatFormat::chatml;
    const char* qwen = "You are Qwen, created by Alibaba Cloud. You are a helpful assistant.";
    if (contains(tmpl, qwen)) st.default_system = qwen;
  } else if (tmpl.empty()) {
    SPORE_FAIL(ErrorCode::not_found,
               "the model has no chat template; pick one with --chat-template (llama3, llama3.1, chatml, "
               "deepseek-r1)");
  } else {
    SPORE_FAIL(ErrorCode::unsupported,
               "unrecognized chat template \"{}...\"; pick a known form with --chat-template (llama3, llama3.1, "
               "chatml, deepseek-r1)",
               head(tmpl, 60));
  }
  return st;
}

std::string render_chat(const ChatStyle& st, const std::vector<ChatMessage>& messages, bool add_generation_prompt) {
  for (const auto& m : messages)
    SPORE_CHECK(m.role == "system" || m.role == "user" || m.role == "assistant" || m.role == "tool",
                ErrorCode::invalid_argument, "chat message role '{}' is not one of system, user, assistant, tool",
                m.role);
  std::string out;
  switch (st.format) {
    case ChatFormat::llama3: {
      out = "<|begin_of_text|>";
      size_t first = 0;
      if (st.llama31_dates) {  // Llama 3.1's template always opens with a system turn carrying the dates
        std::string sys;
        if (!messages.empty() && messages[0].role == "system") {
          sys = trim(messages[0].content);
          first = 1;
        }
        out += "<|start_header_id|>system<|end_header_id|>\n\nCutting Knowledge Date: December 2023\n"
               "Today Date: 26 Jul 2024\n\n" +
               sys + "<|eot_id|>";
      }
      for (size_t i = first; i < messages.size(); ++i) {
        const std::string role = messages[i].role == "tool" ? "ipython" : messages[i].role;
        out += "<|start_header_id|>" + role + "<|end_header_id|>\n\n" + trim(messages[i].content) + "<|eot_id|>";
      }
      if (add_generation_prompt) out += "<|start_header_id|>assistant<|end_header_id|>\n\n";
      break;
    }
    case ChatFormat::chatml: {
      if (!st.default_system.empty() && (messages.empty() || messages[0].role != "system"))
        out += "<|im_start|>system\n" + st.default_system + "<|im_end|>\n";
      for (const auto& m : messages) out += "<|im_start|>" + m.role + "\n" + m.content + "<|im_end|>\n";
      if (add_generation_prompt) out += "<|im_start|>assistant\n";
      break;
    }
    case ChatFormat::deepseek_r1: {
      const std::string bar = "\xEF\xBD\x9C";  // U+FF5C, the fullwidth bar of DeepSeek's special tokens
      out = "<" + bar + "begin\xE2\x96\x81of\xE2\x96\x81sentence" + bar + ">";
      for (const auto& m : messages)
        if (m.role == "system") out += m.content;
      for (const auto& m : messages) {
        if (m.role == "user") {
          out += "<" + bar + "User" + bar + ">" + m.content;
        } else if (m.role == "assistant") {
          // The template drops the reasoning of earlier turns: only what follows </think> is kept.
          std::string c = m.content;
          const size_t end_think = c.find("</think>");
          if (end_think != std::string::npos) c = trim(c.substr(end_think + 8));
          out += "<" + bar + "Assistant" + bar + ">" + c + "<" + bar + "end\xE2\x96\x81of\xE2\x96\x81sentence" + bar + ">";
        }
      }
      if (add_generation_prompt) {
        out += "<" + bar + "Assistant" + bar + ">";
        if (st.think_prefix) out += "<think>\n";
      }
      break;
    }
  }
  return out;
}

std::string apply_chat_template(const Tokenizer& tok, const std::vector<ChatMessage>& messages,
                                bool add_generation_prompt, const std::string& override_name) {
  return render_chat(detect_chat_style(tok.chat_template(), override_name), messages, add_generation_prompt);
}

}  // namespace spore::llm
