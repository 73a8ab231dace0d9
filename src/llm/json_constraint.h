#pragma once
// Constrained decoding for JSON output (issue 23: OpenAI's response_format json_object / json_schema). A compiled
// constraint says, for the text generated so far, which next tokens keep it a prefix of a document it accepts; the
// engine masks every other token before sampling, so the output is valid JSON (of the schema) unless max_tokens cuts
// it. It fails closed: a schema keyword it cannot enforce is an error naming the schema path, never a looser
// constraint.
//
//   auto c = llm::JsonConstraint::compile(schema_json, "response_format.json_schema.schema");
//   llm::JsonMatcher m(c);            // at the start of the output
//   m.feed("{\"a\": ");                // false once the text can no longer be completed
//   m.complete();                      // the document is whole: generation stops here
//
// Supported schema keywords: type (a name or a list), properties, required, additionalProperties (extra keys are
// never generated, which every value of additionalProperties allows), items, prefixItems (no), minItems, maxItems,
// enum, const, anyOf, $ref to #/$defs/... or #/definitions/..., minLength / maxLength of strings, and the
// annotations title, description, default, examples, $schema, $id, $comment. Everything else (pattern, format,
// minimum, oneOf, allOf, not, if/then, ...) is refused. An object's properties may come in any order, each at most
// once, and '}' only after every required one. Whitespace between tokens is allowed, at most kMaxSpaces in a row.
#include <cstdint>
#include <memory>
#include <string>
#include <string_view>
#include <vector>

#include <nlohmann/json_fwd.hpp>

namespace spore::llm {

class JsonConstraint {
 public:
  // json_object mode: any JSON object.
  static std::shared_ptr<const JsonConstraint> any_object();
  // A JSON Schema; errors are Error(invalid_argument) "<path>.<keyword>: why" with `path` the schema's location in
  // the request.
  static std::shared_ptr<const JsonConstraint> compile(const nlohmann::json& schema, const std::string& path);
  struct Node;
  const Node* root() const { return root_; }
  ~JsonConstraint();

 private:
  JsonConstraint() = default;
  std::vector<std::unique_ptr<Node>> nodes_;
  const Node* root_ = nullptr;
  friend struct SchemaCompiler;
};

// Where a generation is in the grammar: alternatives (anyOf) of stacks of frames.
class JsonMatcher {
 public:
  static constexpr int kMaxDepth = 16;   // deeper nesting is not generated
  static constexpr int kMaxSpaces = 12;  // consecutive whitespace characters
  static constexpr int kMaxAlternatives = 16;
  explicit JsonMatcher(std::shared_ptr<const JsonConstraint> c);
  // Appends bytes; false (and the matcher unchanged) when they cannot continue an accepted document.
  bool feed(std::string_view bytes);
  // The text so far is a whole document (end of generation is allowed).
  bool complete() const;
  // Nothing more can follow but whitespace: the document is closed.
  bool closed() const;
  // Inside a string with no length limit and no escape pending, in every alternative: any bytes but '"', '\\' and
  // controls continue it (the engine's fast path when masking tokens).
  bool in_free_string() const;

  struct Frame {
    const JsonConstraint::Node* node = nullptr;
    uint8_t kind = 0, phase = 0;
    uint16_t spaces = 0;
    int32_t count = 0;   // array items, string characters, key / literal position
    uint64_t alive = 0;  // candidate keys or literals still matching
    int32_t next = 0;    // object: the property whose key was just read
    uint64_t seen = 0;   // object: the properties written
  };
  struct Stack {
    Frame f[kMaxDepth];
    int depth = 0;
    bool done = false;  // the top-level value is complete
    int spaces = 0;     // trailing whitespace after it
  };

 private:
  std::shared_ptr<const JsonConstraint> c_;
  std::vector<Stack> alts_;
};

// The tokens a matcher accepts next, fast: token texts sorted, walked as an implicit trie (a group of tokens that
// share a prefix is tried once per byte of the prefix, and dropped at the first byte the matcher refuses); inside
// a free string, tokens without a quote, backslash or control byte are accepted without a walk.
class JsonTokenMask {
 public:
  // texts[id]: the bytes token id appends to the output; empty ones are never accepted.
  explicit JsonTokenMask(const std::vector<std::string>& texts);
  // Appends the ids of every token m accepts as its next token.
  void accepted(const JsonMatcher& m, std::vector<int32_t>& out) const;

 private:
  struct Entry {
    std::string_view text;
    int32_t id;
  };
  std::vector<std::string> texts_;
  std::vector<Entry> sorted_;          // by text
  std::vector<int32_t> plain_, other_;  // string-safe tokens, the rest (non-empty)
  void walk(size_t lo, size_t hi, size_t depth, const JsonMatcher& m, std::vector<int32_t>& out) const;
};

}  // namespace spore::llm
