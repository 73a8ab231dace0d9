#pragma once
// Typed op attributes. Values are self-describing (int, float, bool, string, dtype, int list, float
// list), so the IR printer, parser, hashing and serialization all derive from the value itself; each
// OpDef's schema (ops/op_def.h) gives names, kinds and defaults, and is the one list per op.
#include <cstdint>
#include <string>
#include <string_view>
#include <utility>
#include <variant>
#include <vector>

#include "base/dtype.h"

namespace spore {

enum class AttrKind : uint8_t { i64, f64, boolean, str, dtype, i64s, f64s };
std::string_view attr_kind_name(AttrKind k);

using AttrValue = std::variant<int64_t, double, bool, std::string, DType, std::vector<int64_t>, std::vector<double>>;
inline AttrKind attr_kind(const AttrValue& v) { return static_cast<AttrKind>(v.index()); }

// Small ordered map name -> value; kept sorted by name so equality and hashing are canonical.
class Attrs {
 public:
  Attrs() = default;
  Attrs(std::initializer_list<std::pair<std::string, AttrValue>> items);

  Attrs& set(std::string_view name, AttrValue v);
  bool has(std::string_view name) const { return find(name) != nullptr; }
  const AttrValue* find(std::string_view name) const;

  // Typed getters; throw invalid_argument naming the attribute when missing or of the wrong kind.
  int64_t i(std::string_view name) const;
  double f(std::string_view name) const;  // also accepts an int value
  bool b(std::string_view name) const;
  const std::string& s(std::string_view name) const;
  DType dtype(std::string_view name) const;
  const std::vector<int64_t>& ints(std::string_view name) const;
  std::vector<double> floats(std::string_view name) const;  // also accepts an int list

  const std::vector<std::pair<std::string, AttrValue>>& items() const { return items_; }
  bool empty() const { return items_.empty(); }
  size_t hash() const;
  bool operator==(const Attrs& o) const { return items_ == o.items_; }

 private:
  std::vector<std::pair<std::string, AttrValue>> items_;
};

// Text form used by the IR printer: ints "3", floats always with '.', 'e', "inf" or "nan" so they
// re-parse as floats, lists "[1,2]", strings quoted with escapes, dtypes bare ("f32").
std::string format_attr_value(const AttrValue& v);
std::string format_attrs(const Attrs& a);  // "{axis=1, keepdims=true}" or "" when empty

}  // namespace spore
