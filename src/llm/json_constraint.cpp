// JSON constrained decoding (llm/json_constraint.h): a schema compiled to nodes, and a byte-at-a-time matcher whose
// state is a few stacks of small frames (one stack per live anyOf alternative).
#include "llm/json_constraint.h"

#include <algorithm>
#include <map>
#include <set>

#include <nlohmann/json.hpp>

#include "base/error.h"

namespace spore::llm {

struct JsonConstraint::Node {
  enum Kind : uint8_t { any, object, any_object, array, string, number, integer, literal, any_of, ref };
  Kind kind = any;
  std::vector<std::string> prop_names;
  std::vector<const Node*> prop_nodes;
  std::vector<bool> prop_required;
  const Node* items = nullptr;
  int64_t min_items = 0, max_items = -1;
  int64_t min_len = 0, max_len = -1;
  std::vector<std::string> literals;  // literal: the exact texts (strings with their quotes)
  std::vector<const Node*> alts;
  std::string ref_to;  // ref: "#/$defs/Name"
  const Node* target = nullptr;
  std::string path;  // for refs that do not resolve
};

JsonConstraint::~JsonConstraint() = default;

using Node = JsonConstraint::Node;

struct SchemaCompiler {
  JsonConstraint& c;
  const nlohmann::json& root;
  std::string root_path;
  std::map<std::string, const Node*> refs;  // "#/$defs/X" -> node

  Node* make(Node::Kind k) {
    c.nodes_.push_back(std::make_unique<Node>());
    c.nodes_.back()->kind = k;
    return c.nodes_.back().get();
  }

  [[noreturn]] static void fail(const std::string& path, const std::string& why) {
    SPORE_FAIL(ErrorCode::invalid_argument, "{}: {}", path, why);
  }

  // The shared nodes of "any JSON value".
  const Node* any_value() {
    if (any_ != nullptr) return any_;
    Node* a = make(Node::any);
    any_ = a;
    return a;
  }
  const Node* any_ = nullptr;

  const Node* compile(const nlohmann::json& s, const std::string& path) {
    if (s.is_boolean()) {
      if (s.get<bool>()) return any_value();
      fail(path, "the schema 'false' accepts nothing");
    }
    if (!s.is_object()) fail(path, "a schema must be an object or a boolean");
    static const std::set<std::string> annotations{"title", "description", "default", "examples", "$schema", "$id",
                                                    "$comment", "$defs", "definitions", "strict", "name"};
    static const std::set<std::string> known{"type", "properties", "required", "additionalProperties", "items",
                                             "minItems", "maxItems", "enum", "const", "anyOf", "$ref", "minLength",
                                             "maxLength"};
    for (auto it = s.begin(); it != s.end(); ++it)
      if (!annotations.count(it.key()) && !known.count(it.key()))
        fail(path + "." + it.key(), "this keyword is not supported by constrained decoding (supported: type, "
                                    "properties, required, additionalProperties, items, minItems, maxItems, enum, "
                                    "const, anyOf, $ref, minLength, maxLength)");
    if (s.contains("$ref")) {
      if (s.size() > 1)
        for (auto it = s.begin(); it != s.end(); ++it)
          if (it.key() != "$ref" && !annotations.count(it.key()))
            fail(path + "." + it.key(), "keywords beside $ref are not supported");
      if (!s["$ref"].is_string()) fail(path + ".$ref", "must be a string");
      Node* r = make(Node::ref);
      r->ref_to = s["$ref"].get<std::string>();
      r->path = path + ".$ref";
      pending_.push_back(r);
      return r;
    }
    if (s.contains("const")) return literal_node({s["const"]}, path + ".const");
    if (s.contains("enum")) {
      if (!s["enum"].is_array() || s["enum"].empty()) fail(path + ".enum", "must be a non-empty array");
      std::vector<nlohmann::json> vals(s["enum"].begin(), s["enum"].end());
      return literal_node(vals, path + ".enum");
    }
    if (s.contains("anyOf")) {
      const auto& a = s["anyOf"];
      if (!a.is_array() || a.empty()) fail(path + ".anyOf", "must be a non-empty array");
      if (a.size() > static_cast<size_t>(JsonMatcher::kMaxAlternatives))
        fail(path + ".anyOf", "more than 16 alternatives");
      Node* n = make(Node::any_of);
      for (size_t i = 0; i < a.size(); ++i) n->alts.push_back(compile(a[i], path + ".anyOf[" + std::to_string(i) + "]"));
      return n;
    }
    if (!s.contains("type")) {
      // No type: any value, unless object/array keywords say which.
      if (s.contains("properties")) return object_node(s, path);
      if (s.contains("items")) return array_node(s, path);
      return any_value();
    }
    const auto& t = s["type"];
    if (t.is_array()) {
      if (t.empty()) fail(path + ".type", "an empty list of types accepts nothing");
      Node* n = make(Node::any_of);
      for (size_t i = 0; i < t.size(); ++i) {
        if (!t[i].is_string()) fail(path + ".type[" + std::to_string(i) + "]", "must be a type name");
        n->alts.push_back(typed(s, t[i].get<std::string>(), path));
      }
      return n;
    }
    if (!t.is_string()) fail(path + ".type", "must be a type name or a list of them");
    return typed(s, t.get<std::string>(), path);
  }

  const Node* typed(const nlohmann::json& s, const std::string& type, const std::string& path) {
    if (type == "object") return object_node(s, path);
    if (type == "array") return array_node(s, path);
    if (type == "string") {
      Node* n = make(Node::string);
      n->min_len = count(s, "minLength", path, 0);
      n->max_len = count(s, "maxLength", path, -1);
      if (n->max_len >= 0 && n->max_len < n->min_len) fail(path + ".maxLength", "is below minLength");
      return n;
    }
    if (type == "number") return make(Node::number);
    if (type == "integer") return make(Node::integer);
    if (type == "boolean") return literal_node({true, false}, path);
    if (type == "null") return literal_node({nullptr}, path);
    fail(path + ".type", "unknown type '" + type + "'");
  }

  static int64_t count(const nlohmann::json& s, const char* key, const std::string& path, int64_t dflt) {
    if (!s.contains(key)) return dflt;
    if (!s[key].is_number_integer() || s[key].get<int64_t>() < 0)
      fail(path + "." + key, "must be a non-negative integer");
    return s[key].get<int64_t>();
  }

  const Node* literal_node(const std::vector<nlohmann::json>& vals, const std::string& path) {
    if (vals.size() > 64) fail(path, "more than 64 values");
    Node* n = make(Node::literal);
    for (const auto& v : vals) {
      if (v.is_object() || v.is_array()) fail(path, "only strings, numbers, booleans and null are supported");
      n->literals.push_back(v.dump());
    }
    return n;
  }

  const Node* object_node(const nlohmann::json& s, const std::string& path) {
    Node* n = make(Node::object);
    std::set<std::string> required;
    if (s.contains("required")) {
      if (!s["required"].is_array()) fail(path + ".required", "must be an array of property names");
      for (const auto& r : s["required"]) {
        if (!r.is_string()) fail(path + ".required", "must be an array of property names");
        required.insert(r.get<std::string>());
      }
    }
    if (s.contains("additionalProperties") && !s["additionalProperties"].is_boolean() &&
        !s["additionalProperties"].is_object())
      fail(path + ".additionalProperties", "must be a boolean or a schema");
    if (!s.contains("properties")) {
      if (!required.empty()) fail(path + ".required", "names properties the schema does not define");
      // Without properties: any object (json_object's node) when extra keys are allowed, else only {}.
      const bool closed = s.contains("additionalProperties") && s["additionalProperties"].is_boolean() &&
                          !s["additionalProperties"].get<bool>();
      if (!closed) n->kind = Node::any_object;
      return n;
    }
    const auto& props = s["properties"];
    if (!props.is_object()) fail(path + ".properties", "must be an object");
    if (props.size() > 64) fail(path + ".properties", "more than 64 properties");
    for (auto it = props.begin(); it != props.end(); ++it) {
      const std::string& name = it.key();
      for (unsigned char ch : name)
        if (ch < 0x20 || ch == '"' || ch == '\\')
          fail(path + ".properties." + name, "property names that need escaping are not supported");
      n->prop_names.push_back(name);
      n->prop_nodes.push_back(compile(it.value(), path + ".properties." + name));
      n->prop_required.push_back(required.count(name) > 0);
      required.erase(name);
    }
    if (!required.empty()) fail(path + ".required", "names '" + *required.begin() + "', which is not in properties");
    return n;
  }

  const Node* array_node(const nlohmann::json& s, const std::string& path) {
    Node* n = make(Node::array);
    n->items = s.contains("items") ? compile(s["items"], path + ".items") : any_value();
    n->min_items = count(s, "minItems", path, 0);
    n->max_items = count(s, "maxItems", path, -1);
    if (n->max_items >= 0 && n->max_items < n->min_items) fail(path + ".maxItems", "is below minItems");
    return n;
  }

  std::vector<Node*> pending_;

  void resolve_refs() {
    for (size_t i = 0; i < pending_.size(); ++i) {  // compiling a target may add more
      Node* r = pending_[i];
      auto it = refs.find(r->ref_to);
      if (it == refs.end()) {
        std::string key;
        if (r->ref_to.rfind("#/$defs/", 0) == 0) key = "$defs";
        else if (r->ref_to.rfind("#/definitions/", 0) == 0) key = "definitions";
        else fail(r->path, "only local references to #/$defs/... or #/definitions/... are supported");
        const std::string name = r->ref_to.substr(key.size() + 3);
        if (!root.contains(key) || !root[key].is_object() || !root[key].contains(name))
          fail(r->path, "'" + r->ref_to + "' does not resolve");
        refs[r->ref_to] = nullptr;  // a reference cycle resolves to the node being compiled
        const Node* t = compile(root[key][name], root_path + "." + key + "." + name);
        it = refs.insert_or_assign(r->ref_to, t).first;
      }
      r->target = it->second;
    }
    for (Node* r : pending_)
      if (r->target == nullptr) r->target = refs.at(r->ref_to);
    // A chain of references that never reaches a schema (#/$defs/a is {"$ref": "#/$defs/a"}) accepts nothing.
    for (Node* r : pending_) {
      const Node* t = r;
      for (size_t hops = 0; t->kind == Node::ref; ++hops, t = t->target)
        if (hops > pending_.size()) fail(r->path, "the references form a cycle that never reaches a schema");
    }
  }
};

std::shared_ptr<const JsonConstraint> JsonConstraint::any_object() {
  auto c = std::shared_ptr<JsonConstraint>(new JsonConstraint());
  c->nodes_.push_back(std::make_unique<Node>());
  c->nodes_.back()->kind = Node::any_object;
  c->root_ = c->nodes_.back().get();
  return c;
}

std::shared_ptr<const JsonConstraint> JsonConstraint::compile(const nlohmann::json& schema, const std::string& path) {
  auto c = std::shared_ptr<JsonConstraint>(new JsonConstraint());
  SchemaCompiler sc{*c, schema, path, {}};
  c->root_ = sc.compile(schema, path);
  sc.resolve_refs();
  return c;
}

// ---------------------------------------------------------------------------------------------------------------
// matcher

namespace {

enum FrameKind : uint8_t { k_value, k_object, k_array, k_string, k_number, k_literal };
// object phases
enum : uint8_t { o_open, o_key, o_colon, o_after, o_comma, o_child };
// array phases
enum : uint8_t { a_open, a_after, a_comma, a_child };
// number phases
enum : uint8_t { n_sign, n_zero, n_int, n_dot, n_frac, n_e, n_esign, n_exp };

bool is_ws(unsigned char c) { return c == ' ' || c == '\t' || c == '\n' || c == '\r'; }
bool is_digit(unsigned char c) { return c >= '0' && c <= '9'; }
bool is_hex(unsigned char c) { return is_digit(c) || (c >= 'a' && c <= 'f') || (c >= 'A' && c <= 'F'); }
bool number_can_end(uint8_t phase) { return phase == n_zero || phase == n_int || phase == n_frac || phase == n_exp; }

const Node* resolve(const Node* n) {
  while (n->kind == Node::ref) n = n->target;
  return n;
}

// Shared stand-ins for parts of "any value".
Node make_node(Node::Kind k, const Node* items = nullptr, std::vector<std::string> literals = {}) {
  Node x;
  x.kind = k;
  x.items = items;
  x.literals = std::move(literals);
  return x;
}
// The stand-in of one kind of "any value": any, string, number, any_object, array (of any) or literal (true, false,
// null).
const Node* stand_in(Node::Kind k) {
  static const Node any = make_node(Node::any), str = make_node(Node::string), num = make_node(Node::number),
                    obj = make_node(Node::any_object), arr = make_node(Node::array, &any),
                    lit = make_node(Node::literal, nullptr, {"true", "false", "null"});
  switch (k) {
    case Node::string: return &str;
    case Node::number: return &num;
    case Node::any_object: return &obj;
    case Node::array: return &arr;
    case Node::literal: return &lit;
    default: return &any;
  }
}

using Stack = JsonMatcher::Stack;
using Frame = JsonMatcher::Frame;

// Whitespace where JSON allows it between tokens, at most kMaxSpaces in a row.
bool space(Stack& s, std::vector<Stack>& out) {
  if (s.spaces >= JsonMatcher::kMaxSpaces) return false;
  ++s.spaces;
  out.push_back(s);
  return true;
}

bool push(Stack& s, const Node* node) {
  if (s.depth >= JsonMatcher::kMaxDepth) return false;
  Frame& f = s.f[s.depth++];
  f = Frame{};
  f.kind = k_value;
  f.node = node;
  return true;
}

// The top frame's value is complete: pop it and tell its parent.
void pop_value(Stack& s) {
  --s.depth;
  if (s.depth == 0) {
    s.done = true;
    s.spaces = 0;
    return;
  }
  Frame& p = s.f[s.depth - 1];
  if (p.kind == k_object) p.phase = p.phase == o_key ? o_colon : o_after;  // any_object keys are string children
  else if (p.kind == k_array) {
    p.phase = a_after;
    ++p.count;
  }
}

// Every required property of an object node has been written ('}' may close it).
bool required_done(const Node* n, uint64_t seen) {
  for (size_t i = 0; i < n->prop_names.size(); ++i)
    if (n->prop_required[i] && !(seen >> i & 1)) return false;
  return true;
}

// Properties not written yet: the keys that may come next.
uint64_t unseen_keys(const Node* n, uint64_t seen) {
  const size_t k = n->prop_names.size();
  const uint64_t all = k >= 64 ? ~uint64_t{0} : (uint64_t{1} << k) - 1;
  return all & ~seen;
}

// Feeds one byte to one stack; appends the stacks it can become (none: dead).
void step(Stack s, unsigned char c, std::vector<Stack>& out) {
  for (;;) {
    if (s.done) {
      if (is_ws(c)) space(s, out);
      return;
    }
    Frame& f = s.f[s.depth - 1];
    const bool ws = is_ws(c);
    if (!ws && f.kind != k_string && f.kind != k_literal && f.kind != k_number) s.spaces = 0;
    switch (f.kind) {
      case k_value: {
        if (ws) {
          space(s, out);
          return;
        }
        const Node* n = resolve(f.node);
        // The value starts here: the frame becomes the value's.
        const auto open = [&](FrameKind k, uint8_t phase) {
          f.node = n;
          f.kind = k;
          f.phase = phase;
          f.count = 0;
          f.seen = 0;
          out.push_back(s);
        };
        switch (n->kind) {
          case Node::any_of:
            for (const Node* a : n->alts) {
              Stack t = s;
              t.f[t.depth - 1].node = a;
              step(t, c, out);
            }
            return;
          case Node::any:
            f.node = c == '{' ? stand_in(Node::any_object) : c == '[' ? stand_in(Node::array) : c == '"' ? stand_in(Node::string)
                     : (c == '-' || is_digit(c)) ? stand_in(Node::number) : stand_in(Node::literal);
            continue;
          case Node::object:
          case Node::any_object:
            if (c == '{') open(k_object, o_open);
            return;
          case Node::array:
            if (c == '[') open(k_array, a_open);
            return;
          case Node::string:
            if (c == '"') open(k_string, 0);
            return;
          case Node::number:
          case Node::integer:
            f.node = n;
            f.kind = k_number;
            if (c == '-') f.phase = n_sign;
            else if (c == '0') f.phase = n_zero;
            else if (is_digit(c)) f.phase = n_int;
            else return;
            out.push_back(s);
            return;
          case Node::literal:  // every literal is a candidate; the k_literal case reads the byte
            f.node = n;
            f.kind = k_literal;
            f.count = 0;
            f.alive = n->literals.size() >= 64 ? ~uint64_t{0} : (uint64_t{1} << n->literals.size()) - 1;
            continue;
          case Node::ref: return;  // resolved above
        }
        return;
      }
      case k_literal: {
        const Node* n = f.node;
        uint64_t alive = 0;
        for (size_t i = 0; i < n->literals.size(); ++i)
          if ((f.alive >> i & 1) && n->literals[i].size() > static_cast<size_t>(f.count) &&
              static_cast<unsigned char>(n->literals[i][static_cast<size_t>(f.count)]) == c)
            alive |= uint64_t{1} << i;
        if (alive == 0) return;
        ++f.count;
        f.alive = alive;
        // A literal that is whole here ends the value, while longer ones may go on (enum 1 and 12): both readings.
        for (size_t i = 0; i < n->literals.size(); ++i)
          if ((alive >> i & 1) && n->literals[i].size() == static_cast<size_t>(f.count)) {
            Stack t = s;
            pop_value(t);
            out.push_back(t);
            f.alive &= ~(uint64_t{1} << i);
          }
        if (f.alive) out.push_back(s);
        return;
      }
      case k_string: {
        const Node* n = f.node;
        if (f.phase == 0) {
          if (c == '"') {
            if (f.count < n->min_len) return;
            pop_value(s);
            out.push_back(s);
            return;
          }
          if (c < 0x20) return;
          const bool starts_char = (c & 0xC0) != 0x80;
          if (starts_char) {
            if (n->max_len >= 0 && f.count >= n->max_len) return;
            ++f.count;
          }
          if (c == '\\') f.phase = 1;
          out.push_back(s);
          return;
        }
        if (f.phase == 1) {
          if (c == 'u') f.phase = 2;
          else if (c == '"' || c == '\\' || c == '/' || c == 'b' || c == 'f' || c == 'n' || c == 'r' || c == 't')
            f.phase = 0;
          else return;
          out.push_back(s);
          return;
        }
        if (!is_hex(c)) return;
        f.phase = f.phase == 5 ? 0 : static_cast<uint8_t>(f.phase + 1);
        out.push_back(s);
        return;
      }
      case k_number: {
        const bool integer = f.node->kind == Node::integer;
        uint8_t next = 255;
        switch (f.phase) {
          case n_sign: next = c == '0' ? n_zero : is_digit(c) ? n_int : 255; break;
          case n_zero: next = (!integer && c == '.') ? n_dot : (!integer && (c == 'e' || c == 'E')) ? n_e : 255; break;
          case n_int:
            next = is_digit(c) ? n_int : (!integer && c == '.') ? n_dot : (!integer && (c == 'e' || c == 'E')) ? n_e : 255;
            break;
          case n_dot: next = is_digit(c) ? n_frac : 255; break;
          case n_frac: next = is_digit(c) ? n_frac : (c == 'e' || c == 'E') ? n_e : 255; break;
          case n_e: next = (c == '+' || c == '-') ? n_esign : is_digit(c) ? n_exp : 255; break;
          case n_esign: next = is_digit(c) ? n_exp : 255; break;
          case n_exp: next = is_digit(c) ? n_exp : 255; break;
          default: break;
        }
        if (next != 255) {
          f.phase = next;
          out.push_back(s);
          return;
        }
        if (!number_can_end(f.phase)) return;
        pop_value(s);  // the byte ends the number: the parent reads it
        continue;
      }
      case k_object: {
        const Node* n = f.node;
        const bool any = n->kind == Node::any_object;
        switch (f.phase) {
          case o_open:
          case o_comma:
            if (ws) {
              space(s, out);
              return;
            }
            if (c == '}' && f.phase == o_open && (any || required_done(n, f.seen))) {
              pop_value(s);
              out.push_back(s);
              return;
            }
            if (c != '"') return;
            if (any) {
              f.phase = o_key;
              if (!push(s, stand_in(Node::string))) return;
              continue;  // the string frame reads the quote
            }
            f.alive = unseen_keys(n, f.seen);
            if (f.alive == 0) return;
            f.phase = o_key;
            f.count = 0;
            out.push_back(s);
            return;
          case o_key: {  // typed objects only: any_object keys are string children
            if (c == '"') {
              for (size_t i = 0; i < n->prop_names.size(); ++i)
                if ((f.alive >> i & 1) && n->prop_names[i].size() == static_cast<size_t>(f.count)) {
                  f.next = static_cast<int32_t>(i);  // the chosen property, until ':'
                  f.phase = o_colon;
                  out.push_back(s);
                  return;
                }
              return;
            }
            uint64_t alive = 0;
            for (size_t i = 0; i < n->prop_names.size(); ++i)
              if ((f.alive >> i & 1) && n->prop_names[i].size() > static_cast<size_t>(f.count) &&
                  static_cast<unsigned char>(n->prop_names[i][static_cast<size_t>(f.count)]) == c)
                alive |= uint64_t{1} << i;
            if (alive == 0) return;
            f.alive = alive;
            ++f.count;
            out.push_back(s);
            return;
          }
          case o_colon:
            if (ws) {
              space(s, out);
              return;
            }
            if (c != ':') return;
            f.phase = o_child;
            if (any) {
              if (!push(s, stand_in(Node::any))) return;
            } else {
              const auto i = static_cast<size_t>(f.next);
              f.seen |= uint64_t{1} << i;
              if (!push(s, n->prop_nodes[i])) return;
            }
            out.push_back(s);
            return;
          case o_after:
            if (ws) {
              space(s, out);
              return;
            }
            if (c == ',' && (any || unseen_keys(n, f.seen) != 0)) {
              f.phase = o_comma;
              out.push_back(s);
              return;
            }
            if (c == '}' && (any || required_done(n, f.seen))) {
              pop_value(s);
              out.push_back(s);
            }
            return;
          default: return;  // o_child: a child frame is on top
        }
      }
      case k_array: {
        const Node* n = f.node;
        switch (f.phase) {
          case a_open:
          case a_comma:
            if (ws) {
              space(s, out);
              return;
            }
            if (c == ']' && f.phase == a_open && n->min_items == 0) {
              pop_value(s);
              out.push_back(s);
              return;
            }
            if (n->max_items >= 0 && f.count >= n->max_items) return;
            f.phase = a_child;
            if (!push(s, n->items)) return;
            continue;  // the item reads this byte
          case a_after:
            if (ws) {
              space(s, out);
              return;
            }
            if (c == ',' && (n->max_items < 0 || f.count < n->max_items)) {
              f.phase = a_comma;
              out.push_back(s);
              return;
            }
            if (c == ']' && f.count >= n->min_items) {
              pop_value(s);
              out.push_back(s);
            }
            return;
          default: return;
        }
      }
      default: return;
    }
  }
}

}  // namespace

JsonMatcher::JsonMatcher(std::shared_ptr<const JsonConstraint> c) : c_(std::move(c)) {
  Stack s;
  push(s, c_->root());
  alts_.push_back(s);
}

bool JsonMatcher::feed(std::string_view bytes) {
  std::vector<Stack> cur = alts_, next;
  for (unsigned char ch : bytes) {
    next.clear();
    for (const Stack& s : cur) step(s, ch, next);
    if (next.empty()) return false;
    if (next.size() > static_cast<size_t>(kMaxAlternatives)) next.resize(static_cast<size_t>(kMaxAlternatives));
    cur.swap(next);
  }
  alts_ = std::move(cur);
  return true;
}

bool JsonMatcher::complete() const {
  for (const Stack& s : alts_) {
    if (s.done) return true;
    if (s.depth == 1 && s.f[0].kind == k_number && number_can_end(s.f[0].phase)) return true;
  }
  return false;
}

bool JsonMatcher::in_free_string() const {
  for (const Stack& s : alts_) {
    if (s.done || s.depth == 0) return false;
    const Frame& f = s.f[s.depth - 1];
    if (f.kind != k_string || f.phase != 0 || f.node->max_len >= 0) return false;
  }
  return !alts_.empty();
}

bool JsonMatcher::closed() const {
  for (const Stack& s : alts_)
    if (!s.done) return false;
  return !alts_.empty();
}

// ---------------------------------------------------------------------------------------------------------------
// token masks

JsonTokenMask::JsonTokenMask(const std::vector<std::string>& texts) : texts_(texts) {
  for (size_t i = 0; i < texts_.size(); ++i) {
    const std::string& t = texts_[i];
    if (t.empty()) continue;
    const auto id = static_cast<int32_t>(i);
    sorted_.push_back({t, id});
    bool plain = true;
    for (unsigned char ch : t) plain = plain && ch >= 0x20 && ch != '"' && ch != '\\';
    (plain ? plain_ : other_).push_back(id);
  }
  std::sort(sorted_.begin(), sorted_.end(),
            [](const Entry& a, const Entry& b) { return a.text != b.text ? a.text < b.text : a.id < b.id; });
}

void JsonTokenMask::walk(size_t lo, size_t hi, size_t depth, const JsonMatcher& m, std::vector<int32_t>& out) const {
  // Tokens that end here come first in the sorted range.
  while (lo < hi && sorted_[lo].text.size() == depth) out.push_back(sorted_[lo++].id);
  while (lo < hi) {
    const auto b = static_cast<unsigned char>(sorted_[lo].text[depth]);
    // The group of tokens with this byte at `depth`: binary search for its end.
    const size_t end = static_cast<size_t>(
        std::partition_point(sorted_.begin() + static_cast<std::ptrdiff_t>(lo), sorted_.begin() + static_cast<std::ptrdiff_t>(hi),
                             [&](const Entry& e) { return static_cast<unsigned char>(e.text[depth]) == b; }) -
        sorted_.begin());
    JsonMatcher next = m;
    const char ch = static_cast<char>(b);
    if (next.feed(std::string_view(&ch, 1))) walk(lo, end, depth + 1, next, out);
    lo = end;
  }
}

void JsonTokenMask::accepted(const JsonMatcher& m, std::vector<int32_t>& out) const {
  if (m.in_free_string()) {
    out.insert(out.end(), plain_.begin(), plain_.end());
    for (int32_t id : other_) {
      JsonMatcher x = m;
      if (x.feed(texts_[static_cast<size_t>(id)])) out.push_back(id);
    }
    return;
  }
  walk(0, sorted_.size(), 0, m, out);
}

}  // namespace spore::llm
