#include <fmt/format.h>

#include "ir/graph.h"

namespace spore {
namespace {

bool plain_ident(const std::string& s) {
  if (s.empty()) return false;
  for (char c : s) {
    if (!(std::isalnum(static_cast<unsigned char>(c)) || c == '_' || c == '.')) return false;
  }
  return true;
}

// %name, quoted when it holds characters outside [A-Za-z0-9_.] (ONNX names often do).
std::string ref(const Value* v) {
  std::string s = "%";
  s += plain_ident(v->name) ? v->name : format_attr_value(AttrValue(v->name));
  return s;
}

std::string hex(const Tensor& t) {
  static const char* digits = "0123456789abcdef";
  const auto* p = static_cast<const unsigned char*>(t.raw_data());
  std::string s;
  s.reserve(t.nbytes() * 2);
  for (size_t i = 0; i < t.nbytes(); ++i) {
    s += digits[p[i] >> 4];
    s += digits[p[i] & 15];
  }
  return s;
}

}  // namespace

std::string print_graph(const Graph& g, const PrintOptions& opts) {
  std::string out = "graph @";
  out += plain_ident(g.name()) ? g.name() : format_attr_value(AttrValue(g.name()));
  out += '(';
  for (size_t i = 0; i < g.inputs().size(); ++i) {
    const Value* v = g.inputs()[i];
    if (i) out += ", ";
    out += ref(v) + ": " + v->type.str();
  }
  out += ") {\n";
  for (const Node* n : g.nodes()) {
    if (n->op == "input"_op) continue;
    out += "  ";
    for (size_t i = 0; i < n->outputs.size(); ++i) {
      if (i) out += ", ";
      out += ref(n->outputs[i]);
    }
    out += " = ";
    out += op_name(n->op);
    out += "(";
    for (size_t i = 0; i < n->inputs.size(); ++i) {
      if (i) out += ", ";
      out += ref(n->inputs[i]);
    }
    out += ")";
    if (!n->attrs.empty()) {
      out += ' ';
      out += format_attrs(n->attrs);
    }
    out += " :";
    for (size_t i = 0; i < n->outputs.size(); ++i) {
      out += i ? ", " : " ";
      out += n->outputs[i]->type.str();
    }
    if (!n->name.empty()) {
      out += " !name=";
      out += format_attr_value(AttrValue(n->name));
    }
    for (size_t i = 0; i < n->outputs.size(); ++i) {
      if (n->outputs[i]->arena_offset >= 0) out += fmt::format(" !offset{}={}", i, n->outputs[i]->arena_offset);
    }
    if (n->op == "constant"_op) {
      if (opts.external_constants) {
        out += fmt::format(" = tensor<{}>", opts.external_constants->size());
        opts.external_constants->push_back(n);
      } else if (opts.max_constant_bytes >= 0 && n->payload.nbytes() > static_cast<size_t>(opts.max_constant_bytes)) {
        out += fmt::format(" = elided<{} bytes>", n->payload.nbytes());  // display only: does not re-parse
      } else {
        out += " = hex\"";
        out += hex(n->payload);
        out += '"';
      }
    }
    out += "\n";
  }
  out += "  return";
  for (size_t i = 0; i < g.outputs().size(); ++i) {
    out += i ? ", " : " ";
    out += ref(g.outputs()[i]);
  }
  out += "\n}\n";
  return out;
}

std::string graph_to_dot(const Graph& g) {
  auto esc = [](const std::string& s) {
    std::string o;
    for (char c : s) {
      if (c == '"' || c == '\\') o += '\\';
      o += c;
    }
    return o;
  };
  std::string out = "digraph \"" + esc(g.name()) + "\" {\n  rankdir=TB;\n  node [fontname=\"Helvetica\", fontsize=10];\n";
  for (const Node* n : g.nodes()) {
    std::string label(op_name(n->op));
    if (!n->name.empty()) label += "\\n" + esc(n->name);
    std::string shape = n->op == "input"_op ? "ellipse" : n->op == "constant"_op ? "note" : "box";
    std::string types;
    for (const Value* v : n->outputs) types += "\\n" + v->type.str();
    out += fmt::format("  n{} [label=\"{}{}\", shape={}];\n", n->id, label, types, shape);
    for (const Value* v : n->inputs) {
      out += fmt::format("  n{} -> n{} [label=\"%{}\"];\n", v->producer->id, n->id, esc(v->name));
    }
  }
  out += "  out [label=\"return\", shape=doublecircle];\n";
  for (const Value* v : g.outputs()) out += fmt::format("  n{} -> out [label=\"%{}\"];\n", v->producer->id, esc(v->name));
  return out + "}\n";
}

}  // namespace spore
