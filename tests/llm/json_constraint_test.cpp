// JSON constrained decoding (llm/json_constraint.h): the matcher accepts exactly the prefixes of documents the
// schema accepts (byte by byte, on hand-written documents), schema keywords it cannot enforce are refused naming the
// path, and the engine's constrained output on a real vocabulary is a document of the schema.
#include <gtest/gtest.h>

#include <condition_variable>
#include <filesystem>
#include <mutex>

#include <nlohmann/json.hpp>

#include "llm/engine.h"
#include "llm/json_constraint.h"
#include "llm/model.h"
#include "llm/tokenizer.h"
#include "runtime/runtime.h"
#include "test_util.h"

namespace spore::llm {
namespace {

using nlohmann::json;

// How many bytes of `text` the matcher takes, fed one at a time (text.size() when all).
size_t accepted(const std::shared_ptr<const JsonConstraint>& c, const std::string& text) {
  JsonMatcher m(c);
  for (size_t i = 0; i < text.size(); ++i)
    if (!m.feed(text.substr(i, 1))) return i;
  return text.size();
}

bool whole(const std::shared_ptr<const JsonConstraint>& c, const std::string& text) {
  JsonMatcher m(c);
  return m.feed(text) && m.complete();
}

TEST(JsonConstraint, AnyObjectAcceptsJsonObjectsOnly) {
  const auto c = JsonConstraint::any_object();
  for (const char* ok : {"{}", "{\"a\": 1}", "{\"a\": [1, 2.5e-3, -0, true, null, \"x\\n\\u00e9\"], \"b\": {\"c\": {}}}",
                         " {\n  \"k\" : \"v\"\n}", "{\"\xc3\xa9\": \"\xe2\x82\xac\"}"}) {
    EXPECT_TRUE(whole(c, ok)) << ok;
    JsonMatcher m(c);
    ASSERT_TRUE(m.feed(ok));
    EXPECT_TRUE(m.closed()) << ok;
  }
  // Where each bad document stops being a prefix of a valid one.
  EXPECT_EQ(accepted(c, "[1]"), 0u);
  EXPECT_EQ(accepted(c, "{\"a\" 1}"), 5u);
  EXPECT_EQ(accepted(c, "{\"a\": 01}"), 7u);
  EXPECT_EQ(accepted(c, "{\"a\": tru}"), 9u);
  EXPECT_EQ(accepted(c, "{\"a\": 1,}"), 8u);
  EXPECT_EQ(accepted(c, "{\"a\": \"x\ny\"}"), 8u);  // a raw newline inside a string
  EXPECT_EQ(accepted(c, "{\"a\": \"\\q\"}"), 8u);
  EXPECT_EQ(accepted(c, "{} x"), 3u);
  EXPECT_FALSE(whole(c, "{\"a\": 1"));
  // Whitespace runs are capped.
  EXPECT_EQ(accepted(c, "{" + std::string(20, ' ') + "}"), 1u + JsonMatcher::kMaxSpaces);
  // Nesting deeper than kMaxDepth is not generated.
  std::string deep;
  for (int i = 0; i < JsonMatcher::kMaxDepth + 2; ++i) deep += "{\"a\":";
  EXPECT_LT(accepted(c, deep), deep.size());
}

TEST(JsonConstraint, SchemaObjectsArraysEnumsRefs) {
  const json schema = json::parse(R"({
    "type": "object",
    "properties": {
      "name": {"type": "string", "maxLength": 4},
      "age": {"type": "integer"},
      "tags": {"type": "array", "items": {"enum": ["a", "b", 7]}, "minItems": 1, "maxItems": 2},
      "note": {"type": ["string", "null"]},
      "child": {"$ref": "#/$defs/node"}
    },
    "required": ["name", "tags"],
    "additionalProperties": false,
    "$defs": {"node": {"type": "object", "properties": {"next": {"anyOf": [{"$ref": "#/$defs/node"}, {"type": "null"}]}},
                       "required": ["next"]}}
  })");
  const auto c = JsonConstraint::compile(schema, "response_format.json_schema.schema");
  EXPECT_TRUE(whole(c, R"({"name": "abcd", "tags": ["a"]})"));
  EXPECT_TRUE(whole(c, R"({"name": "", "age": -12, "tags": [7, "b"], "note": null, "child": {"next": {"next": null}}})"));
  EXPECT_TRUE(whole(c, R"({"name": "x", "tags": ["b"], "note": "hi"})"));
  // Required properties cannot be skipped, optional ones can, any order, each once.
  EXPECT_TRUE(whole(c, R"({"tags": ["a"], "name": "q"})"));
  EXPECT_EQ(accepted(c, R"({"tags": ["a"]})"), 14u);  // '}' before the required name
  EXPECT_EQ(accepted(c, R"({"name": "a", "name": "b"})"), 16u);  // "n" could still start "note"
  EXPECT_EQ(accepted(c, R"({"name": "x"})"), 12u);  // '}' before the required tags
  EXPECT_EQ(accepted(c, R"({"name": "x", "age": 1.5})"), 22u);  // integer: no fraction
  EXPECT_EQ(accepted(c, R"({"name": "abcde")"), 14u);  // maxLength 4
  EXPECT_EQ(accepted(c, R"({"name": "x", "tags": []})"), 23u);  // minItems 1
  EXPECT_EQ(accepted(c, R"({"name": "x", "tags": ["a", "b", "a"]})"), 31u);  // maxItems 2
  EXPECT_EQ(accepted(c, R"({"name": "x", "tags": ["c"]})"), 24u);  // not in the enum
  EXPECT_EQ(accepted(c, R"({"name": "x", "tags": [7], "extra": 1})"), 28u);  // no additional properties
  EXPECT_EQ(accepted(c, R"({"name": "x", "tags": [7], "child": {}})"), 37u);  // child.next is required
}

TEST(JsonConstraint, UnenforceableSchemasAreRefusedNamingThePath) {
  const auto err = [](const std::string& s) {
    return testing::error_of([&] { JsonConstraint::compile(json::parse(s), "response_format.json_schema.schema"); });
  };
  std::string m = err(R"({"type": "object", "properties": {"id": {"type": "string", "pattern": "^a"}}})");
  EXPECT_NE(m.find("response_format.json_schema.schema.properties.id.pattern: this keyword is not supported"),
            std::string::npos) << m;
  m = err(R"({"type": "object", "properties": {"a": {"type": "integer"}}, "required": ["b"]})");
  EXPECT_NE(m.find("schema.required: names 'b', which is not in properties"), std::string::npos) << m;
  m = err(R"({"$ref": "#/$defs/missing"})");
  EXPECT_NE(m.find("schema.$ref: '#/$defs/missing' does not resolve"), std::string::npos) << m;
  m = err(R"({"$ref": "http://example.com/s.json"})");
  EXPECT_NE(m.find("only local references"), std::string::npos) << m;
  m = err(R"({"type": "strnig"})");
  EXPECT_NE(m.find("schema.type: unknown type 'strnig'"), std::string::npos) << m;
  m = err(R"({"oneOf": [{"type": "string"}]})");
  EXPECT_NE(m.find("schema.oneOf: this keyword is not supported"), std::string::npos) << m;
  m = err(R"({"$defs": {"a": {"$ref": "#/$defs/a"}}, "$ref": "#/$defs/a"})");
  EXPECT_NE(m.find("cycle"), std::string::npos) << m;
  m = err("3");
  EXPECT_NE(m.find("a schema must be an object or a boolean"), std::string::npos) << m;
}

// The engine on a real vocabulary (random weights): with a schema whose every string is an enum value, the output is
// forced to close within max_tokens; it must parse and match the schema. json_object output must stay a valid
// prefix at every token.
TEST(JsonConstraint, EngineOutputIsADocumentOfTheSchema) {
  SPORE_SHARED_DATA_DIR(dir, "gguf-models");
  init();
  const Model m = Model::load(dir + "/llama-2-tiny-random.gguf");
  const json schema = json::parse(R"({"type": "object", "properties": {
      "color": {"enum": ["red", "green", "blue"]}, "ok": {"type": "boolean"},
      "n": {"type": "array", "items": {"type": "null"}, "maxItems": 3}},
      "required": ["color", "ok", "n"], "additionalProperties": false})");
  struct Out {
    std::mutex mu;
    std::condition_variable cv;
    std::string text;
    std::vector<int32_t> tokens;
    Event done;
    bool finished = false;
  };
  Out a, b;
  Engine e(m, {.slots = 2, .ctx = 512, .kv_dtype = DType::f16, .max_memory = 1 << 30});
  e.wait_ready();
  const auto run = [&](Out& o, std::shared_ptr<const JsonConstraint> c, double temp) {
    Request r;
    r.prompt = m.tokenizer().encode("Answer in JSON:", true);
    r.max_tokens = 200;
    r.sampler.temperature = temp;
    r.sampler.seed = 5;
    r.json = std::move(c);
    r.on_event = [&o](const Event& ev) {
      std::lock_guard<std::mutex> lk(o.mu);
      o.text += ev.text;
      if (ev.kind == Event::Kind::token) o.tokens.push_back(ev.token);
      else {
        o.done = ev;
        o.finished = true;
        o.cv.notify_all();
      }
    };
    e.submit(std::move(r));
  };
  run(a, JsonConstraint::compile(schema, "schema"), 1.0);
  run(b, JsonConstraint::any_object(), 1.0);
  for (Out* o : {&a, &b}) {
    std::unique_lock<std::mutex> lk(o->mu);
    ASSERT_TRUE(o->cv.wait_for(lk, std::chrono::seconds(120), [&] { return o->finished; }));
  }
  EXPECT_EQ(a.done.finish_reason, "stop") << a.text;
  const json doc = json::parse(a.text);
  ASSERT_TRUE(doc.is_object()) << a.text;
  EXPECT_TRUE(doc["color"] == "red" || doc["color"] == "green" || doc["color"] == "blue") << a.text;
  EXPECT_TRUE(doc["ok"].is_boolean()) << a.text;
  EXPECT_TRUE(doc["n"].is_array() && doc["n"].size() <= 3) << a.text;
  // json_object: every token kept the text a valid prefix; closed means parseable.
  JsonMatcher jm(JsonConstraint::any_object());
  for (int32_t id : b.tokens) ASSERT_TRUE(jm.feed(m.tokenizer().token_to_text(id))) << b.text;
  if (b.done.finish_reason == "stop") EXPECT_TRUE(json::parse(b.text).is_object()) << b.text;
  else EXPECT_EQ(b.done.finish_reason, "length");
}

}  // namespace
}  // namespace spore::llm
