#include "ops/op_def.h"

#include <cmath>

namespace spore {

void InferContext::fail(ErrorCode code, const std::string& msg) const {
  if (where.empty()) throw_error(code, fmt::format("[{}] {}", def.name, msg));
  throw_error(code, fmt::format("[{}] {} (node {})", def.name, msg, where));
}

const AttrSpec* OpDef::find_attr(std::string_view n) const {
  for (const auto& a : attrs) if (a.name == n) return &a;
  return nullptr;
}

Attrs OpDef::normalize(const Attrs& given, std::string_view where) const {
  auto prefix = [&] { return where.empty() ? fmt::format("[{}]", name) : fmt::format("[{}] (node {})", name, where); };
  Attrs out;
  for (const auto& [k, v] : given.items()) {
    const AttrSpec* spec = find_attr(k);
    SPORE_CHECK(spec != nullptr, ErrorCode::invalid_argument, "{} unknown attribute '{}'", prefix(), k);
    AttrValue val = v;
    const AttrKind got = attr_kind(v);
    if (got != spec->kind) {
      if (spec->kind == AttrKind::f64 && got == AttrKind::i64) val = static_cast<double>(std::get<int64_t>(v));
      else if (spec->kind == AttrKind::f64s && got == AttrKind::i64s) {
        const auto& iv = std::get<std::vector<int64_t>>(v);
        val = std::vector<double>(iv.begin(), iv.end());
      } else if (spec->kind == AttrKind::i64s && got == AttrKind::f64s && std::get<std::vector<double>>(v).empty()) {
        val = std::vector<int64_t>{};
      } else {
        SPORE_FAIL(ErrorCode::invalid_argument, "{} attribute '{}' must be {}, got {}", prefix(), k,
                   attr_kind_name(spec->kind), attr_kind_name(got));
      }
    }
    if (!spec->choices.empty()) {
      const std::string& s = std::get<std::string>(val);
      bool known = false;
      for (const std::string& c : spec->choices) known |= c == s;
      if (!known) {
        std::string list;
        for (const std::string& c : spec->choices) list += fmt::format("{}\"{}\"", list.empty() ? "" : ", ", c);
        SPORE_FAIL(ErrorCode::invalid_argument, "{} attribute '{}' must be one of {}; got \"{}\"", prefix(), k, list, s);
      }
    }
    out.set(k, std::move(val));
  }
  for (const auto& spec : attrs) {
    if (out.has(spec.name)) continue;
    SPORE_CHECK(spec.default_value.has_value(), ErrorCode::invalid_argument, "{} missing required attribute '{}'", prefix(),
                spec.name);
    out.set(spec.name, *spec.default_value);
  }
  return out;
}

DType OpDef::dispatch_dtype(std::span<const TensorType> ins, std::span<const TensorType> outs) const {
  if (dispatch_input >= 0 && dispatch_input < static_cast<int>(ins.size())) return ins[dispatch_input].dtype;
  return outs.empty() ? DType::f32 : outs[0].dtype;
}

std::vector<TensorType> OpDef::infer_types(std::span<const TensorType> ins, const Attrs& a, std::string_view where) const {
  InferContext ctx{*this, ins, a, where};
  const int n = static_cast<int>(ins.size());
  // Messages are built only on failure: this runs on every eager op call.
  if (max_inputs >= 0 && (n < min_inputs || n > max_inputs)) {
    ctx.fail(ErrorCode::invalid_argument, min_inputs == max_inputs
                                              ? fmt::format("expects {} inputs, got {}", min_inputs, n)
                                              : fmt::format("expects {} to {} inputs, got {}", min_inputs, max_inputs, n));
  }
  if (max_inputs < 0 && n < min_inputs) ctx.fail(ErrorCode::invalid_argument, fmt::format("expects at least {} inputs, got {}", min_inputs, n));
  if (dispatch_input >= 0 && dispatch_input < n && !dtypes.has(ins[dispatch_input].dtype)) {
    ctx.fail(ErrorCode::dtype_mismatch,
             fmt::format("does not support dtype {} for input '{}'", dtype_name(ins[dispatch_input].dtype),
                         dispatch_input < static_cast<int>(input_names.size()) ? input_names[dispatch_input] : "?"));
  }
  SPORE_ASSERT(infer != nullptr, "op {} has no inference function", name);
  std::vector<TensorType> outs = infer(ctx);
  if (dispatch_input < 0 && !outs.empty() && !dtypes.has(outs[0].dtype)) {
    ctx.fail(ErrorCode::dtype_mismatch, fmt::format("does not support output dtype {}", dtype_name(outs[0].dtype)));
  }
  return outs;
}

OpCost OpDef::cost_of(std::span<const TensorType> ins, std::span<const TensorType> outs, const Attrs& a) const {
  if (cost) return cost(ins, outs, a);
  OpCost c;
  for (const auto& t : ins) c.bytes += static_cast<double>(std::max<int64_t>(t.numel(), 0)) * dtype_size(t.dtype);
  for (const auto& t : outs) c.bytes += static_cast<double>(std::max<int64_t>(t.numel(), 0)) * dtype_size(t.dtype);
  if (traits.has(Trait::elementwise) || traits.has(Trait::broadcast)) {
    for (const auto& t : outs) c.flops += static_cast<double>(std::max<int64_t>(t.numel(), 0));
  }
  return c;
}

OpDefBuilder& OpDefBuilder::inputs(std::vector<std::string> names) {
  int required = 0;
  bool seen_optional = false;
  for (auto& n : names) {
    if (!n.empty() && n.back() == '?') {
      n.pop_back();
      seen_optional = true;
    } else {
      SPORE_ASSERT(!seen_optional, "op {}: required input '{}' after an optional one", d_.name, n);
      ++required;
    }
  }
  d_.min_inputs = required;
  d_.max_inputs = static_cast<int>(names.size());
  d_.input_names = std::move(names);
  return *this;
}

OpDefBuilder& OpDefBuilder::variadic_inputs(std::string name, int min_count) {
  d_.input_names = {std::move(name)};
  d_.min_inputs = min_count;
  d_.max_inputs = -1;
  return *this;
}

OpDefBuilder& OpDefBuilder::attr(std::string name, AttrKind kind, std::optional<AttrValue> def) {
  if (def && attr_kind(*def) != kind) {
    if (kind == AttrKind::f64 && attr_kind(*def) == AttrKind::i64) def = static_cast<double>(std::get<int64_t>(*def));
    else if (kind == AttrKind::f64s && attr_kind(*def) == AttrKind::i64s) {
      const auto& iv = std::get<std::vector<int64_t>>(*def);
      def = std::vector<double>(iv.begin(), iv.end());
    }
    else SPORE_ASSERT(false, "op {}: default of attribute '{}' has the wrong kind", d_.name, name);
  }
  d_.attrs.push_back({std::move(name), kind, std::move(def), {}});
  return *this;
}

OpDefBuilder& OpDefBuilder::fusable(std::vector<std::string> params) {
  SPORE_ASSERT(d_.min_inputs == d_.max_inputs && d_.max_inputs >= 1 && d_.max_inputs <= 2,
               "op {}: a fusable op takes one or two inputs (declare them first)", d_.name);
  SPORE_ASSERT(params.size() <= 2, "op {}: a fused instruction carries at most two parameters", d_.name);
  for (const std::string& p : params) {
    const AttrSpec* a = d_.find_attr(p);
    SPORE_ASSERT(a != nullptr && (a->kind == AttrKind::f64 || !a->choices.empty()),
                 "op {}: fused parameter '{}' must be a declared number or choice attribute", d_.name, p);
  }
  d_.fused = FusedForm{d_.max_inputs, std::move(params)};
  return *this;
}

OpDefBuilder& OpDefBuilder::choice(std::string name, std::vector<std::string> choices) {
  SPORE_ASSERT(!choices.empty(), "op {}: attribute '{}' has no choices", d_.name, name);
  AttrValue def = choices.front();
  d_.attrs.push_back({std::move(name), AttrKind::str, std::move(def), std::move(choices)});
  return *this;
}

}  // namespace spore
