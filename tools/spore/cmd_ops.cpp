// spore ops: every registered op, generated from the op and kernel registries only (no second list).
#include <CLI/CLI.hpp>
#include <nlohmann/json.hpp>

#include <spore/spore.h>

#include "tools/spore/commands.h"

namespace spore::cli {
namespace {

constexpr std::pair<Trait, const char*> trait_names[] = {
    {Trait::elementwise, "elementwise"}, {Trait::broadcast, "broadcast"},   {Trait::injective, "injective"},
    {Trait::reduction, "reduction"},     {Trait::commutative, "commutative"}, {Trait::inplace_ok, "inplace_ok"},
    {Trait::view, "view"},               {Trait::random, "random"},         {Trait::nondeterministic, "nondeterministic"},
    {Trait::no_grad, "no_grad"},         {Trait::graph_structure, "graph_structure"}, {Trait::reshape, "reshape"},
};

const char* fusion_name(FusionKind f) {
  switch (f) {
    case FusionKind::elementwise: return "elementwise";
    case FusionKind::broadcast: return "broadcast";
    case FusionKind::injective: return "injective";
    case FusionKind::reduce: return "reduce";
    case FusionKind::out_fusable: return "out_fusable";
    case FusionKind::opaque: return "opaque";
  }
  return "?";
}

const char* amp_name(AmpPolicy a) {
  switch (a) {
    case AmpPolicy::low: return "low";
    case AmpPolicy::follow: return "follow";
    case AmpPolicy::keep_f32: return "keep_f32";
  }
  return "?";
}

std::vector<std::string> dtype_list(DTypeSet s) {
  std::vector<std::string> out;
  for (int i = 0; i < num_dtypes; ++i)
    if (s.has(static_cast<DType>(i))) out.emplace_back(dtype_name(static_cast<DType>(i)));
  return out;
}

std::string join(const std::vector<std::string>& xs, const char* sep = ",") {
  std::string s;
  for (size_t i = 0; i < xs.size(); ++i) s += (i ? sep : "") + xs[i];
  return s;
}

std::vector<std::string> input_list(const OpDef& d) {
  std::vector<std::string> out;
  for (size_t i = 0; i < d.input_names.size(); ++i) {
    std::string n = d.input_names[i];
    if (d.max_inputs < 0) n += "...";
    else if (static_cast<int>(i) >= d.min_inputs) n += "?";
    out.push_back(n);
  }
  return out;
}

std::string attr_text(const AttrSpec& a) {
  std::string s = a.name + ":" + std::string(attr_kind_name(a.kind));
  if (!a.choices.empty()) {  // pad_mode:str{pad|same|valid}=pad
    s += "{";
    for (size_t i = 0; i < a.choices.size(); ++i) s += (i ? "|" : "") + a.choices[i];
    s += "}";
  }
  return s + (a.default_value ? "=" + format_attr_value(*a.default_value) : " (required)");
}

nlohmann::json op_json(const OpDef& d) {
  nlohmann::json attrs = nlohmann::json::array();
  for (const auto& a : d.attrs) {
    nlohmann::json j = {{"name", a.name}, {"kind", attr_kind_name(a.kind)}, {"required", !a.default_value}};
    if (a.default_value) j["default"] = format_attr_value(*a.default_value);
    if (!a.choices.empty()) j["choices"] = a.choices;
    attrs.push_back(j);
  }
  nlohmann::json kernels = nlohmann::json::object();
  for (int b = 0; b < num_backends(); ++b)
    kernels[std::string(backend_name(static_cast<Backend>(b)))] = dtype_list(kernel_registry().dtypes_of(static_cast<Backend>(b), d.id));
  std::vector<std::string> traits;
  for (const auto& [t, name] : trait_names)
    if (d.traits.has(t)) traits.emplace_back(name);
  nlohmann::json weight = nullptr;
  if (d.weight.defined()) {
    weight = {{"input", d.weight.input}, {"channel_axis", d.weight.channel_axis},
              {"bias_input", d.weight.bias_input}, {"output_channel_axis", d.weight.output_channel_axis}};
    if (!d.weight.transpose_attr.empty()) weight[d.weight.transpose_attr] = {{"channel_axis", d.weight.transposed_axis}};
  }
  return {{"name", d.name},       {"id", static_cast<uint32_t>(d.id)}, {"doc", d.doc}, {"weight", weight},
          {"inputs", input_list(d)}, {"attrs", attrs},              {"dtypes", dtype_list(d.dtypes)},
          {"kernels", kernels},   {"traits", traits},               {"fusion", fusion_name(d.fusion)},
          {"amp", amp_name(d.amp)}, {"decomposition", static_cast<bool>(d.decompose)},
          {"gradient", static_cast<bool>(d.grad)}};
}

}  // namespace

int cmd_ops(int argc, char** argv) {
  CLI::App app("spore ops: every registered op with its inputs, attributes, dtypes, kernels per backend and traits",
               "spore ops");
  bool json = false;
  std::string only;
  app.add_flag("--json", json, "print a JSON array (one object per op)");
  app.add_option("--op", only, "show only this op");
  try {
    app.parse(argc, argv);
  } catch (const CLI::ParseError& e) {
    return app.exit(e);
  }
  std::vector<const OpDef*> defs = op_registry().all();
  if (!only.empty()) {
    const OpDef* d = op_registry().find(only);
    SPORE_CHECK(d != nullptr, ErrorCode::not_found, "no op named '{}' is registered", only);
    defs = {d};
  }
  if (json) {
    nlohmann::json out = nlohmann::json::array();
    for (const OpDef* d : defs) out.push_back(op_json(*d));
    std::printf("%s\n", out.dump(1).c_str());
    return 0;
  }
  for (const OpDef* d : defs) {
    const nlohmann::json j = op_json(*d);
    std::vector<std::string> attrs;
    for (const auto& a : d->attrs) attrs.push_back(attr_text(a));
    std::string kernels;
    for (const auto& [backend, dts] : j["kernels"].items())
      if (!dts.empty()) kernels += (kernels.empty() ? "" : "  ") + backend + "[" + join(dts.get<std::vector<std::string>>()) + "]";
    std::printf("%s(%s)%s%s\n", d->name.c_str(), join(input_list(*d), ", ").c_str(), d->doc.empty() ? "" : "  -- ",
                d->doc.c_str());
    if (!attrs.empty()) std::printf("  attrs     %s\n", join(attrs, ", ").c_str());
    std::printf("  dtypes    %s\n", join(dtype_list(d->dtypes)).c_str());
    if (d->weight.defined())
      std::printf("  weight    input %d, output channels on its axis %lld%s; bias input %d; output channel axis %lld\n",
                  d->weight.input, static_cast<long long>(d->weight.channel_axis),
                  d->weight.transpose_attr.empty()
                      ? ""
                      : fmt::format(" ({} if {})", d->weight.transposed_axis, d->weight.transpose_attr).c_str(),
                  d->weight.bias_input, static_cast<long long>(d->weight.output_channel_axis));
    std::printf("  kernels   %s\n", kernels.empty() ? "(none)" : kernels.c_str());
    std::printf("  traits    %s; fusion %s; amp %s; decomposition %s; gradient %s\n",
                j["traits"].empty() ? "-" : join(j["traits"].get<std::vector<std::string>>()).c_str(), fusion_name(d->fusion),
                amp_name(d->amp), d->decompose ? "yes" : "no", d->grad ? "yes" : "no");
  }
  std::printf("%zu ops\n", defs.size());
  return 0;
}

}  // namespace spore::cli
