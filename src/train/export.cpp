#include "train/export.h"

#include <unordered_map>

#include <fmt/format.h>

#include "autodiff/autodiff.h"
#include "base/error.h"
#include "passes/pass.h"
#include "runtime/trace.h"

namespace spore::train {
namespace {

// Gives each constant that holds a parameter's data the parameter's dotted name ("conv.weight").
void name_parameter_constants(Graph& g, nn::Cell& net) {
  std::unordered_map<const void*, std::pair<std::string, Shape>> by_data;
  for (auto& [name, t] : net.parameters_and_names())
    if (t->defined() && t->is_contiguous()) by_data.emplace(t->raw_data(), std::make_pair(name, t->shape()));
  for (Node* n : g.nodes()) {
    if (n->op != "constant"_op || !n->payload.defined()) continue;
    auto it = by_data.find(n->payload.raw_data());
    if (it == by_data.end() || it->second.second != n->payload.shape()) continue;
    if (g.find_value(it->second.first)) continue;  // already used (the same parameter captured twice)
    g.rename_value(n->output(0), it->second.first);
  }
}

}  // namespace

std::unique_ptr<Graph> export_graph(nn::Cell& net, const ExportSpec& spec) {
  SPORE_CHECK(!spec.inputs.empty(), ErrorCode::invalid_argument, "export: the model needs at least one input type");
  std::vector<std::string> names = spec.input_names;
  if (names.empty()) {
    if (spec.inputs.size() == 1) names.push_back("x");
    else
      for (size_t i = 0; i < spec.inputs.size(); ++i) names.push_back(fmt::format("x{}", i));
  }
  SPORE_CHECK(names.size() == spec.inputs.size(), ErrorCode::invalid_argument,
              "export: {} input names for {} inputs", names.size(), spec.inputs.size());
  const bool was_training = net.training();
  net.set_train(false);
  std::unique_ptr<Graph> g;
  try {
    autodiff::NoGradGuard no_grad;
    g = trace_function([&](std::span<const Tensor> in) { return std::vector<Tensor>{net(in)}; }, spec.inputs, names);
  } catch (...) {
    net.set_train(was_training);
    throw;
  }
  net.set_train(was_training);
  name_parameter_constants(*g, net);
  if (!spec.output_name.empty()) g->rename_value(g->outputs().at(0), spec.output_name);
  PassManager pm;
  pm.add(make_dce_pass()).add(make_cse_pass()).add(make_fold_constants_pass()).add(make_dce_pass());
  pm.run(*g);
  return g;
}

GraphSummary summarize(const Graph& g) {
  GraphSummary s;
  for (const Node* n : g.nodes()) {
    if (n->op == "input"_op) continue;
    if (n->op == "constant"_op) {
      s.params += n->payload.numel();
      s.weight_bytes += static_cast<int64_t>(n->payload.nbytes());
    } else {
      ++s.ops;
    }
  }
  return s;
}

}  // namespace spore::train
