#include "base/attrs.h"

#include <algorithm>
#include <cmath>
#include <functional>

#include "base/error.h"

namespace spore {

std::string_view attr_kind_name(AttrKind k) {
  switch (k) {
    case AttrKind::i64: return "int";
    case AttrKind::f64: return "float";
    case AttrKind::boolean: return "bool";
    case AttrKind::str: return "string";
    case AttrKind::dtype: return "dtype";
    case AttrKind::i64s: return "int list";
    case AttrKind::f64s: return "float list";
  }
  return "?";
}

Attrs::Attrs(std::initializer_list<std::pair<std::string, AttrValue>> items) {
  for (auto& [k, v] : items) set(k, v);
}

Attrs& Attrs::set(std::string_view name, AttrValue v) {
  auto it = std::lower_bound(items_.begin(), items_.end(), name,
                             [](const auto& p, std::string_view n) { return p.first < n; });
  if (it != items_.end() && it->first == name) {
    it->second = std::move(v);
  } else {
    items_.insert(it, {std::string(name), std::move(v)});
  }
  return *this;
}

const AttrValue* Attrs::find(std::string_view name) const {
  auto it = std::lower_bound(items_.begin(), items_.end(), name,
                             [](const auto& p, std::string_view n) { return p.first < n; });
  return (it != items_.end() && it->first == name) ? &it->second : nullptr;
}

namespace {
template <typename T>
const T& get(const Attrs& a, std::string_view name, AttrKind want) {
  const AttrValue* v = a.find(name);
  SPORE_CHECK(v != nullptr, ErrorCode::invalid_argument, "missing attribute '{}'", name);
  const T* p = std::get_if<T>(v);
  SPORE_CHECK(p != nullptr, ErrorCode::invalid_argument, "attribute '{}' must be {}, got {}", name,
              attr_kind_name(want), attr_kind_name(attr_kind(*v)));
  return *p;
}
}  // namespace

int64_t Attrs::i(std::string_view name) const { return get<int64_t>(*this, name, AttrKind::i64); }
double Attrs::f(std::string_view name) const {
  const AttrValue* v = find(name);
  if (v && std::holds_alternative<int64_t>(*v)) return static_cast<double>(std::get<int64_t>(*v));
  return get<double>(*this, name, AttrKind::f64);
}
bool Attrs::b(std::string_view name) const { return get<bool>(*this, name, AttrKind::boolean); }
const std::string& Attrs::s(std::string_view name) const { return get<std::string>(*this, name, AttrKind::str); }
DType Attrs::dtype(std::string_view name) const { return get<DType>(*this, name, AttrKind::dtype); }
const std::vector<int64_t>& Attrs::ints(std::string_view name) const {
  return get<std::vector<int64_t>>(*this, name, AttrKind::i64s);
}
std::vector<double> Attrs::floats(std::string_view name) const {
  const AttrValue* v = find(name);
  if (v && std::holds_alternative<std::vector<int64_t>>(*v)) {
    const auto& iv = std::get<std::vector<int64_t>>(*v);
    return std::vector<double>(iv.begin(), iv.end());
  }
  return get<std::vector<double>>(*this, name, AttrKind::f64s);
}

size_t Attrs::hash() const {
  size_t h = 0x9e3779b97f4a7c15ull;
  auto mix = [&h](size_t x) { h ^= x + 0x9e3779b97f4a7c15ull + (h << 6) + (h >> 2); };
  for (const auto& [k, v] : items_) {
    mix(std::hash<std::string>{}(k));
    mix(v.index());
    mix(std::hash<std::string>{}(format_attr_value(v)));
  }
  return h;
}

namespace {
std::string format_double(double d) {
  if (std::isnan(d)) return "nan";
  if (std::isinf(d)) return d > 0 ? "inf" : "-inf";
  std::string s = fmt::format("{}", d);  // shortest repr that round-trips
  if (s.find_first_of(".eE") == std::string::npos) s += ".0";
  return s;
}
std::string quote(const std::string& s) {
  std::string out = "\"";
  for (char c : s) {
    if (c == '"' || c == '\\') { out += '\\'; out += c; }
    else if (c == '\n') out += "\\n";
    else if (static_cast<unsigned char>(c) < 0x20) out += fmt::format("\\x{:02x}", static_cast<unsigned char>(c));
    else out += c;
  }
  return out + "\"";
}
}  // namespace

std::string format_attr_value(const AttrValue& v) {
  switch (attr_kind(v)) {
    case AttrKind::i64: return std::to_string(std::get<int64_t>(v));
    case AttrKind::f64: return format_double(std::get<double>(v));
    case AttrKind::boolean: return std::get<bool>(v) ? "true" : "false";
    case AttrKind::str: return quote(std::get<std::string>(v));
    case AttrKind::dtype: return std::string(dtype_name(std::get<DType>(v)));
    case AttrKind::i64s: {
      std::string s = "[";
      const auto& xs = std::get<std::vector<int64_t>>(v);
      for (size_t i = 0; i < xs.size(); ++i) {
        if (i) s += ',';
        s += std::to_string(xs[i]);
      }
      return s + "]";
    }
    case AttrKind::f64s: {
      const auto& xs = std::get<std::vector<double>>(v);
      if (xs.empty()) return "[:f]";  // keeps the kind of an empty float list
      std::string s = "[";
      for (size_t i = 0; i < xs.size(); ++i) {
        if (i) s += ',';
        s += format_double(xs[i]);
      }
      return s + "]";
    }
  }
  return "?";
}

std::string format_attrs(const Attrs& a) {
  if (a.empty()) return "";
  std::string s = "{";
  bool first = true;
  for (const auto& [k, v] : a.items()) {
    if (!first) s += ", ";
    first = false;
    s += k + "=" + format_attr_value(v);
  }
  return s + "}";
}

}  // namespace spore
