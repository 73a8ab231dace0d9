// Recursive-descent parser for the text IR written by print_graph (see docs/ARCHITECTURE.md).
// Errors carry source:line:col. Types are taken as written; ops::verify_graph re-infers them.
#include <algorithm>
#include <cctype>
#include <cerrno>
#include <charconv>
#include <cmath>
#include <cstdlib>
#include <cstring>
#include <limits>
#include <unordered_map>

#include "ir/graph.h"

namespace spore {
namespace {

class Parser {
 public:
  Parser(std::string_view text, std::string_view source, const ParseOptions& opts)
      : s_(text), source_(source), opts_(opts) {}

  std::unique_ptr<Graph> parse() {
    expect_word("graph");
    expect('@');
    auto g = std::make_unique<Graph>(peek() == '"' ? string_lit() : ident("graph name"));
    g_ = g.get();
    expect('(');
    if (!accept(')')) {
      do {
        std::string name = value_name();
        expect(':');
        TensorType t = type();
        SPORE_CHECK(!values_.count(name), ErrorCode::parse_error, "{}: duplicate value %{}", where(), name);
        Value* v = g->add_input(t, name);
        values_[name] = v;
      } while (accept(','));
      expect(')');
    }
    expect('{');
    for (;;) {
      skip_ws();
      if (peek_word("return")) break;
      statement();
    }
    expect_word("return");
    std::vector<Value*> outs;
    skip_ws();
    if (peek() == '%') {
      do outs.push_back(use()); while (accept(','));
    }
    g->set_outputs(outs);
    expect('}');
    skip_ws();
    SPORE_CHECK(pos_ == s_.size(), ErrorCode::parse_error, "{}: unexpected text after the graph", where());
    return g;
  }

 private:
  void statement() {
    std::vector<std::string> names;
    std::vector<size_t> name_pos;  // errors about a result point at its name
    do {
      skip_ws();
      name_pos.push_back(pos_);
      names.push_back(value_name());
      if (values_.count(names.back()) || std::count(names.begin(), names.end(), names.back()) > 1) {
        pos_ = name_pos.back();
        SPORE_FAIL(ErrorCode::parse_error, "{}: value %{} is defined twice", where(), names.back());
      }
    } while (accept(','));
    expect('=');
    skip_ws();
    const size_t op_pos = pos_;
    std::string opname = ident("op name");
    auto op = op_from_name(opname);
    if (!op) {
      pos_ = op_pos;
      SPORE_FAIL(ErrorCode::parse_error, "{}: unknown op '{}'", where(), opname);
    }
    expect('(');
    std::vector<Value*> ins;
    if (!accept(')')) {
      do ins.push_back(use()); while (accept(','));
      expect(')');
    }
    Attrs attrs;
    skip_ws();
    if (peek() == '{') attrs = attr_dict();
    expect(':');
    std::vector<TensorType> types;
    do types.push_back(type()); while (accept(','));
    if (types.size() != names.size()) {
      pos_ = name_pos[0];
      SPORE_FAIL(ErrorCode::parse_error, "{}: {} results but {} types", where(), names.size(), types.size());
    }
    std::string node_name;
    std::unordered_map<int, int64_t> offsets;
    while (accept('!')) {
      std::string key = ident("annotation");
      expect('=');
      if (key == "name") {
        node_name = string_lit();
      } else if (key.rfind("offset", 0) == 0) {
        const std::string digits = key.substr(6).empty() ? "0" : key.substr(6);
        int idx = -1;
        auto [ptr, ec] = std::from_chars(digits.data(), digits.data() + digits.size(), idx);
        SPORE_CHECK(ec == std::errc() && ptr == digits.data() + digits.size() && idx < static_cast<int>(names.size()),
                    ErrorCode::parse_error, "{}: bad annotation '!{}' (expected !offset<result index>)", where(), key);
        offsets[idx] = integer();
      } else {
        SPORE_FAIL(ErrorCode::parse_error, "{}: unknown annotation '!{}'", where(), key);
      }
    }
    Tensor payload;
    if (accept('=')) {
      SPORE_CHECK(!peek_word("elided"), ErrorCode::parse_error,
                  "{}: this constant's data was elided when the graph was printed for display; print it in full to re-parse",
                  where());
      SPORE_CHECK(*op == "constant"_op && types.size() == 1, ErrorCode::parse_error, "{}: only constants carry data", where());
      if (peek_word("tensor")) {
        payload = external_tensor(types[0]);
      } else {
        payload = hex_data(types[0]);
      }
    } else if (*op == "constant"_op) {
      pos_ = name_pos[0];
      SPORE_FAIL(ErrorCode::parse_error, "{}: constant %{} has no data (= hex\"...\" or = tensor<K>)", where(), names[0]);
    }
    if (*op == "input"_op) {
      pos_ = op_pos;
      SPORE_FAIL(ErrorCode::parse_error, "{}: inputs are declared in the graph signature", where());
    }
    Node* n = g_->add_node(*op, std::move(ins), std::move(attrs), types, "");
    n->payload = payload;
    n->name = node_name;
    // The graph named the results itself ("7", "8"); move them out of the way first so a result
    // written as %8 never collides with a sibling's generated name.
    if (names.size() > 1) {
      for (Value* v : n->outputs) g_->rename_value(v, "\x01tmp" + std::to_string(v->id));
    }
    for (size_t i = 0; i < names.size(); ++i) {
      g_->rename_value(n->outputs[i], names[i]);
      values_[names[i]] = n->outputs[i];
      if (offsets.count(static_cast<int>(i))) n->outputs[i]->arena_offset = offsets[static_cast<int>(i)];
    }
  }

  // `hex"..."`: the constant's bytes inline.
  Tensor hex_data(const TensorType& type) {
    expect_word("hex");
    std::string hex = string_lit();
    SPORE_CHECK(type.is_static(), ErrorCode::parse_error, "{}: a constant needs a static shape", where());
    // Size check before allocating: a hostile type (f32[99999999999]) must not reach the allocator.
    uint64_t want = dtype_size(type.dtype);
    for (const Dim& d : type.dims) {
      const auto n = static_cast<uint64_t>(d.size);
      want = n != 0 && want > (uint64_t{1} << 62) / n ? uint64_t{1} << 62 : want * n;
    }
    SPORE_CHECK(hex.size() % 2 == 0 && hex.size() / 2 == want, ErrorCode::parse_error,
                "{}: constant data has {} bytes, type {} needs {}", where(), hex.size() / 2, type.str(), want);
    Tensor payload = Tensor::empty(type.shape(), type.dtype);
    auto* p = static_cast<unsigned char*>(payload.raw_data());
    for (size_t i = 0; i < payload.nbytes(); ++i) {
      int hi = hexval(hex[2 * i]), lo = hexval(hex[2 * i + 1]);
      SPORE_CHECK(hi >= 0 && lo >= 0, ErrorCode::parse_error, "{}: bad hex digit in constant data", where());
      p[i] = static_cast<unsigned char>(hi * 16 + lo);
    }
    return payload;
  }

  // `tensor<K>`: the data is entry K of the caller's external tensors (a .spore file's tensor index).
  Tensor external_tensor(const TensorType& type) {
    const size_t at = pos_;
    expect_word("tensor");
    expect('<');
    skip_ws();
    const size_t k_pos = pos_;
    const int64_t k = integer();
    expect('>');
    const size_t end = pos_;
    const auto& ext = opts_.external_constants;
    pos_ = k_pos;
    SPORE_CHECK(!ext.empty(), ErrorCode::parse_error,
                "{}: constant refers to tensor<{}> but no external tensors were given (text IR inlines data as hex\"...\")",
                where(), k);
    SPORE_CHECK(k >= 0 && static_cast<uint64_t>(k) < ext.size(), ErrorCode::parse_error,
                "{}: tensor<{}> does not exist (the tensor index has {} entries)", where(), k, ext.size());
    const Tensor& t = ext[static_cast<size_t>(k)];
    pos_ = at;
    SPORE_CHECK(type.is_static() && t.defined() && t.dtype() == type.dtype && t.shape() == type.shape(),
                ErrorCode::parse_error, "{}: tensor<{}> is {}{} but the constant's type is {}", where(), k,
                t.defined() ? dtype_name(t.dtype()) : "undefined", t.defined() ? shape_str(t.shape()) : "", type.str());
    SPORE_CHECK(t.is_contiguous(), ErrorCode::invalid_argument, "{}: tensor<{}> is not contiguous", where(), k);
    pos_ = end;
    return t;
  }

  Attrs attr_dict() {
    Attrs a;
    expect('{');
    if (accept('}')) return a;
    do {
      std::string key = ident("attribute name");
      expect('=');
      SPORE_CHECK(!a.has(key), ErrorCode::parse_error, "{}: attribute '{}' given twice", where(), key);
      a.set(key, attr_value());
    } while (accept(','));
    expect('}');
    return a;
  }

  AttrValue attr_value() {
    skip_ws();
    char c = peek();
    if (c == '"') return AttrValue(string_lit());
    if (c == '[') {
      ++pos_;
      skip_ws();
      if (s_.substr(pos_, 3) == ":f]") {
        pos_ += 3;
        return AttrValue(std::vector<double>{});
      }
      if (accept(']')) return AttrValue(std::vector<int64_t>{});
      std::vector<AttrValue> items;
      do items.push_back(number()); while (accept(','));
      expect(']');
      bool any_float = false;
      for (auto& v : items) any_float |= std::holds_alternative<double>(v);
      if (any_float) {
        std::vector<double> out;
        for (auto& v : items) out.push_back(std::holds_alternative<double>(v) ? std::get<double>(v) : static_cast<double>(std::get<int64_t>(v)));
        return AttrValue(out);
      }
      std::vector<int64_t> out;
      for (auto& v : items) out.push_back(std::get<int64_t>(v));
      return AttrValue(out);
    }
    if (c == '-' || c == '+' || std::isdigit(static_cast<unsigned char>(c))) return number();
    std::string word = ident("attribute value");
    if (word == "true") return AttrValue(true);
    if (word == "false") return AttrValue(false);
    if (word == "inf") return AttrValue(std::numeric_limits<double>::infinity());
    if (word == "nan") return AttrValue(std::numeric_limits<double>::quiet_NaN());
    if (auto dt = parse_dtype(word)) return AttrValue(*dt);
    SPORE_FAIL(ErrorCode::parse_error, "{}: bad attribute value '{}'", where(), word);
  }

  AttrValue number() {
    skip_ws();
    size_t start = pos_;
    if (peek() == '-' || peek() == '+') ++pos_;
    if (s_.substr(pos_, 3) == "inf") {
      pos_ += 3;
      return AttrValue(s_[start] == '-' ? -std::numeric_limits<double>::infinity() : std::numeric_limits<double>::infinity());
    }
    if (s_.substr(pos_, 3) == "nan") {  // float lists may hold nan too
      pos_ += 3;
      return AttrValue(std::numeric_limits<double>::quiet_NaN());
    }
    bool is_float = false;
    while (pos_ < s_.size()) {
      char c = s_[pos_];
      if (std::isdigit(static_cast<unsigned char>(c))) { ++pos_; continue; }
      if (c == '.' || c == 'e' || c == 'E') { is_float = true; ++pos_; continue; }
      if ((c == '-' || c == '+') && (s_[pos_ - 1] == 'e' || s_[pos_ - 1] == 'E')) { ++pos_; continue; }
      break;
    }
    std::string text(s_.substr(start, pos_ - start));
    SPORE_CHECK(!text.empty() && text != "-" && text != "+", ErrorCode::parse_error, "{}: expected a number", where());
    // strtod, not stod: stod rejects subnormals (5e-324) as out of range.
    char* end = nullptr;
    errno = 0;
    if (is_float) {
      const double d = std::strtod(text.c_str(), &end);
      if (end == text.c_str() + text.size() && !(errno == ERANGE && std::isinf(d))) return AttrValue(d);
    } else {
      const long long i = std::strtoll(text.c_str(), &end, 10);
      if (end == text.c_str() + text.size() && errno != ERANGE) return AttrValue(static_cast<int64_t>(i));
    }
    pos_ = start;
    SPORE_FAIL(ErrorCode::parse_error, "{}: bad number '{}'", where(), text);
  }

  int64_t integer() {
    AttrValue v = number();
    SPORE_CHECK(std::holds_alternative<int64_t>(v), ErrorCode::parse_error, "{}: expected an integer", where());
    return std::get<int64_t>(v);
  }

  TensorType type() {
    std::string dt = ident("dtype");
    auto d = parse_dtype(dt);
    SPORE_CHECK(d.has_value(), ErrorCode::parse_error, "{}: unknown dtype '{}'", where(), dt);
    TensorType t;
    t.dtype = *d;
    expect('[');
    if (accept(']')) return t;
    do {
      // Symbolic dims made by inference may hold '*', '-' or '+' ("batch*3", "h_k3s1p-1"): read the
      // whole token; all digits is a static size.
      skip_ws();
      const size_t start = pos_;
      while (pos_ < s_.size() && (std::isalnum(static_cast<unsigned char>(s_[pos_])) || std::strchr("_.*+-", s_[pos_]))) ++pos_;
      const std::string_view tok = s_.substr(start, pos_ - start);
      if (tok.empty()) SPORE_FAIL(ErrorCode::parse_error, "{}: expected a dimension", where());
      if (std::all_of(tok.begin(), tok.end(), [](char c) { return std::isdigit(static_cast<unsigned char>(c)); })) {
        int64_t v = 0;
        auto [ptr, ec] = std::from_chars(tok.data(), tok.data() + tok.size(), v);
        if (ec != std::errc()) {
          pos_ = start;
          SPORE_FAIL(ErrorCode::parse_error, "{}: dimension {} is out of range", where(), tok);
        }
        t.dims.emplace_back(v);
      } else {
        t.dims.push_back(Dim::symbol(std::string(tok)));
      }
    } while (accept(','));
    expect(']');
    return t;
  }

  std::string value_name() {
    expect('%');
    if (peek() == '"') return string_lit();
    std::string n = ident_chars();
    SPORE_CHECK(!n.empty(), ErrorCode::parse_error, "{}: expected a value name after '%'", where());
    return n;
  }

  Value* use() {
    skip_ws();
    const size_t at = pos_;
    std::string n = value_name();
    auto it = values_.find(n);
    if (it == values_.end()) {
      pos_ = at;
      SPORE_FAIL(ErrorCode::parse_error, "{}: use of undefined value %{}", where(), n);
    }
    return it->second;
  }

  std::string string_lit() {
    skip_ws();
    SPORE_CHECK(peek() == '"', ErrorCode::parse_error, "{}: expected a string", where());
    ++pos_;
    std::string out;
    while (pos_ < s_.size() && s_[pos_] != '"') {
      char c = s_[pos_++];
      if (c == '\\' && pos_ < s_.size()) {
        char e = s_[pos_++];
        if (e == 'n') out += '\n';
        else if (e == 'x' && pos_ + 1 < s_.size()) {
          SPORE_CHECK(hexval(s_[pos_]) >= 0 && hexval(s_[pos_ + 1]) >= 0, ErrorCode::parse_error,
                      "{}: bad \\x escape in a string", where());
          out += static_cast<char>(hexval(s_[pos_]) * 16 + hexval(s_[pos_ + 1]));
          pos_ += 2;
        } else out += e;
      } else {
        out += c;
      }
    }
    SPORE_CHECK(pos_ < s_.size(), ErrorCode::parse_error, "{}: unterminated string", where());
    ++pos_;
    return out;
  }

  static int hexval(char c) {
    if (c >= '0' && c <= '9') return c - '0';
    if (c >= 'a' && c <= 'f') return c - 'a' + 10;
    if (c >= 'A' && c <= 'F') return c - 'A' + 10;
    return -1;
  }

  std::string ident_chars() {
    size_t start = pos_;
    while (pos_ < s_.size() && (std::isalnum(static_cast<unsigned char>(s_[pos_])) || s_[pos_] == '_' || s_[pos_] == '.')) ++pos_;
    return std::string(s_.substr(start, pos_ - start));
  }

  std::string ident(const char* what) {
    skip_ws();
    std::string w = ident_chars();
    SPORE_CHECK(!w.empty(), ErrorCode::parse_error, "{}: expected {}", where(), what);
    return w;
  }

  void skip_ws() {
    while (pos_ < s_.size()) {
      if (std::isspace(static_cast<unsigned char>(s_[pos_]))) { ++pos_; continue; }
      if (s_[pos_] == '#') {  // comment to end of line
        while (pos_ < s_.size() && s_[pos_] != '\n') ++pos_;
        continue;
      }
      break;
    }
  }
  char peek() const { return pos_ < s_.size() ? s_[pos_] : '\0'; }
  bool accept(char c) {
    skip_ws();
    if (peek() == c) { ++pos_; return true; }
    return false;
  }
  void expect(char c) {
    SPORE_CHECK(accept(c), ErrorCode::parse_error, "{}: expected '{}'", where(), c);
  }
  bool peek_word(std::string_view w) {
    skip_ws();
    return s_.substr(pos_, w.size()) == w &&
           (pos_ + w.size() >= s_.size() || !std::isalnum(static_cast<unsigned char>(s_[pos_ + w.size()])));
  }
  void expect_word(std::string_view w) {
    SPORE_CHECK(peek_word(w), ErrorCode::parse_error, "{}: expected '{}'", where(), w);
    pos_ += w.size();
  }
  std::string where() const {
    int line = 1, col = 1;
    for (size_t i = 0; i < pos_ && i < s_.size(); ++i) {
      if (s_[i] == '\n') { ++line; col = 1; } else { ++col; }
    }
    std::string_view rest = s_.substr(std::min(pos_, s_.size()), 20);
    auto nl = rest.find('\n');
    if (nl != std::string_view::npos) rest = rest.substr(0, nl);
    return fmt::format("{}:{}:{} (at '{}')", source_, line, col, rest);
  }

  std::string_view s_;
  std::string_view source_;
  const ParseOptions& opts_;
  size_t pos_ = 0;
  Graph* g_ = nullptr;
  std::unordered_map<std::string, Value*> values_;
};

}  // namespace

std::unique_ptr<Graph> parse_graph(std::string_view text, std::string_view source_name, const ParseOptions& opts) {
  return Parser(text, source_name, opts).parse();
}

}  // namespace spore
