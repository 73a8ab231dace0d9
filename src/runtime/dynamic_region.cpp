#include "runtime/dynamic_region.h"

#include <algorithm>
#include <unordered_map>
#include <unordered_set>

#include <fmt/format.h>

#include "ops/registry.h"
#include "runtime/eager.h"
#include "runtime/profiler.h"
#include "runtime/runtime.h"

namespace spore {

namespace {

bool has_symbolic_output(const Node* n) {
  return std::any_of(n->outputs.begin(), n->outputs.end(), [](const Value* v) { return !v->type.is_static(); });
}

// Whether run_op_eager can run the node on `backend`: a kernel for its dispatch dtype, a view, or a decomposition.
bool runnable(const Node* n, Backend backend) {
  const OpDef& def = op_registry().get(n->op);
  if (def.decompose || (def.view && def.traits.has(Trait::view))) return true;
  std::vector<TensorType> ins, outs;
  for (const Value* v : n->inputs) ins.push_back(v->type);
  for (const Value* v : n->outputs) outs.push_back(v->type);
  return kernel_registry().find(backend, n->op, def.dispatch_dtype(ins, outs)) != nullptr;
}

}  // namespace

std::shared_ptr<DynamicRegion> split_dynamic_region(Graph& g, Backend backend, std::unique_ptr<Graph>& whole) {
  // The region: nodes with a symbolic output (data-dependent ops, or ops fed by them) and every node they feed.
  std::unordered_set<const Node*> in_region;
  std::vector<Node*> region_nodes;
  for (Node* n : g.nodes()) {
    if (op_registry().get(n->op).traits.has(Trait::graph_structure)) continue;
    bool dyn = has_symbolic_output(n);
    for (const Value* v : n->inputs) dyn = dyn || in_region.count(v->producer);
    if (!dyn) continue;
    in_region.insert(n);
    region_nodes.push_back(n);
  }
  if (region_nodes.empty()) return nullptr;

  std::vector<std::string> missing;
  for (const Node* n : region_nodes)
    if (!runnable(n, backend)) {
      std::vector<TensorType> ins, outs;
      for (const Value* v : n->inputs) ins.push_back(v->type);
      for (const Value* v : n->outputs) outs.push_back(v->type);
      missing.push_back(
          fmt::format("{} ({})", n->label(), dtype_name(op_registry().get(n->op).dispatch_dtype(ins, outs))));
    }
  if (!missing.empty())
    SPORE_FAIL(ErrorCode::unsupported,
               "cannot compile for backend {}: {} node(s) downstream of a data-dependent shape have no kernel and no "
               "decomposition:\n  {}",
               backend_name(backend), missing.size(), fmt::join(missing, "\n  "));

  whole = g.clone();
  auto r = std::make_shared<DynamicRegion>();
  r->backend = backend;
  r->graph = std::make_unique<Graph>(g.name() + "_dynamic");
  r->num_nodes = static_cast<int64_t>(region_nodes.size());
  for (const Node* n : region_nodes) r->lazy = r->lazy || n->op == "if_select"_op;
  Graph& rg = *r->graph;

  // The planned part's new outputs: the whole graph's outputs it computes, then the values the region reads.
  std::vector<Value*> planned_outs;
  std::unordered_map<const Value*, int> planned_index;
  const auto add_planned = [&](Value* v) {
    if (planned_index.emplace(v, static_cast<int>(planned_outs.size())).second) planned_outs.push_back(v);
  };
  for (Value* v : g.outputs())
    if (!in_region.count(v->producer)) add_planned(v);
  for (const Node* n : region_nodes)
    for (Value* v : n->inputs)
      if (!in_region.count(v->producer) && !v->producer->is_constant()) add_planned(v);

  // The region graph: one input per planned output (in order), constants copied, the nodes in graph order.
  std::unordered_map<const Value*, Value*> map;
  for (Value* v : planned_outs) map[v] = rg.add_input(v->type, v->name);
  for (const Node* n : region_nodes) {
    std::vector<Value*> ins;
    for (Value* v : n->inputs) {
      auto it = map.find(v);
      if (it == map.end()) it = map.emplace(v, rg.add_constant(v->producer->payload, v->name)).first;  // a constant
      ins.push_back(it->second);
    }
    std::vector<TensorType> types;
    for (const Value* v : n->outputs) types.push_back(v->type);
    Node* m = rg.add_node(n->op, std::move(ins), n->attrs, std::move(types), n->name);
    for (size_t i = 0; i < n->outputs.size(); ++i) {
      if (!rg.name_taken(n->outputs[i]->name)) rg.rename_value(m->outputs[i], n->outputs[i]->name);
      map[n->outputs[i]] = m->outputs[i];
    }
  }
  std::vector<Value*> region_outs;
  for (Value* v : g.outputs()) {
    if (!in_region.count(v->producer)) {
      r->output_source.push_back(planned_index.at(v));
      continue;
    }
    r->output_source.push_back(-1 - static_cast<int>(region_outs.size()));
    region_outs.push_back(map.at(v));
  }
  rg.set_outputs(region_outs);

  // Release each region value after its last use (values that are region outputs live on).
  {
    std::unordered_map<const Value*, size_t> last_use;
    const std::vector<Node*>& nodes = rg.nodes();
    size_t k = 0;
    for (const Node* n : nodes) {
      if (op_registry().get(n->op).traits.has(Trait::graph_structure)) continue;
      for (const Value* v : n->inputs) last_use[v] = k;
      ++k;
    }
    r->release_after.assign(k, {});
    for (const auto& [v, at] : last_use)
      if (!rg.is_output(v)) r->release_after[at].push_back(v);
  }

  // The planned part: the region's nodes erased (users before producers).
  g.set_outputs(planned_outs);
  for (auto it = region_nodes.rbegin(); it != region_nodes.rend(); ++it) g.erase_node(*it);
  return r;
}

namespace {

// Runs one region node on the tensors in `env` (as eager mode runs an op) and stores its outputs there.
void run_node(const Node* n, std::unordered_map<const Value*, Tensor>& env, Backend backend) {
  const OpDef& def = op_registry().get(n->op);
  std::vector<Tensor> ins;
  std::vector<TensorType> in_types;
  for (const Value* v : n->inputs) {
    const Tensor& t = env.at(v);
    ins.push_back(t);
    in_types.push_back(TensorType::of(t.dtype(), t.shape()));
  }
  const std::string label = n->name.empty() ? n->outputs[0]->name : n->name;
  std::vector<Tensor> outs;
  try {
    const std::vector<TensorType> out_types = def.infer_types(in_types, n->attrs, n->label());
    outs = run_op_eager(def, ins, n->attrs, in_types, out_types, backend, label, true);
    SPORE_CHECK(outs.size() == n->outputs.size(), ErrorCode::internal, "[{}] gave {} outputs, the node has {}",
                def.name, outs.size(), n->outputs.size());
  } catch (const Error& e) {  // a run-time check (a shape the data gave, an index): say which node it was
    if (e.message().find(label) != std::string::npos) throw;
    throw Error(e.code(), fmt::format("{} (node {}, downstream of a data-dependent shape)", e.message(), label));
  }
  for (size_t i = 0; i < outs.size(); ++i) env[n->outputs[i]] = std::move(outs[i]);
}

// On demand from `want`: an if_select asks for its condition, then for the chosen branch's value only.
void run_lazy(const Graph& rg, std::unordered_map<const Value*, Tensor>& env, Backend backend) {
  std::vector<const Value*> todo(rg.outputs().rbegin(), rg.outputs().rend());
  while (!todo.empty()) {
    const Value* v = todo.back();
    if (env.count(v)) {
      todo.pop_back();
      continue;
    }
    const Node* n = v->producer;
    if (n->is_constant()) {
      env[v] = n->payload;
      todo.pop_back();
      continue;
    }
    SPORE_ASSERT(!n->is_input(), "dynamic region: input %{} not bound", v->name);
    if (n->op == "if_select"_op) {
      const Value* cond = n->inputs[0];
      if (!env.count(cond)) {
        todo.push_back(cond);
        continue;
      }
      const Tensor& c = env.at(cond);
      SPORE_CHECK(c.numel() == 1, ErrorCode::shape_mismatch, "node {}: the If condition has {} elements, not 1",
                  n->label(), c.numel());
      const Value* chosen = n->inputs[c.contiguous().item_at(0) != 0 ? 1 : 2];
      if (!env.count(chosen)) {
        todo.push_back(chosen);
        continue;
      }
      env[n->outputs[0]] = env.at(chosen);
      todo.pop_back();
      continue;
    }
    bool ready = true;
    for (const Value* in : n->inputs)
      if (!env.count(in)) {
        todo.push_back(in);
        ready = false;
      }
    if (!ready) continue;
    run_node(n, env, backend);
    todo.pop_back();
  }
}

}  // namespace

std::vector<Tensor> DynamicRegion::run(std::span<const Tensor> planned_outputs) const {
  const Graph& rg = *graph;
  SPORE_ASSERT(planned_outputs.size() == rg.inputs().size(), "dynamic region: {} inputs for {}", planned_outputs.size(),
               rg.inputs().size());
  BackendScope scope(backend);  // decompositions dispatch their ops to the plan's backend
  Profiler* prof = Profiler::active();
  const int64_t t0 = prof ? Profiler::now_ns() : 0;
  std::unordered_map<const Value*, Tensor> env;
  for (size_t i = 0; i < planned_outputs.size(); ++i) env[rg.inputs()[i]] = planned_outputs[i];
  if (lazy) {
    run_lazy(rg, env, backend);
  } else {
    size_t k = 0;
    for (const Node* n : rg.nodes()) {
      if (n->is_input()) continue;
      if (n->is_constant()) {
        env[n->outputs[0]] = n->payload;
        continue;
      }
      run_node(n, env, backend);
      for (const Value* v : release_after[k]) env.erase(v);
      ++k;
    }
  }
  std::vector<Tensor> result;
  for (const Value* v : rg.outputs()) result.push_back(env.at(v).contiguous());
  if (prof) {
    TraceSpan s;
    s.name = "dynamic region";
    s.cat = "dynamic";
    s.start_ns = t0;
    s.end_ns = Profiler::now_ns();
    s.thread = Profiler::thread_number();
    s.args = {{"nodes", static_cast<double>(num_nodes)}};
    prof->record_span(std::move(s));
  }
  return result;
}

}  // namespace spore
