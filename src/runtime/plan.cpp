#include "runtime/plan.h"

#include <algorithm>
#include <chrono>
#include <cstdlib>
#include <exception>
#include <optional>
#include <string_view>
#include <unordered_map>

#include "base/thread_pool.h"

#include "ops/graph_ops.h"
#include "runtime/dynamic_region.h"
#include "runtime/profiler.h"
#include "runtime/trace.h"

namespace spore {
namespace {
std::vector<TensorType> types_of(const std::vector<Value*>& vs) {
  std::vector<TensorType> t;
  for (const Value* v : vs) t.push_back(v->type);
  return t;
}

// A plan step that moves a graph input onto the plan's device or an output off it (packed tensors).
void device_copy_kernel(KernelContext& k) {
  const Tensor& src = k.in(0);
  Tensor& dst = k.out(0);
  copy_bytes(dst.raw_data(), dst.device(), src.raw_data(), src.device(), src.nbytes());
}

bool has_kernel(const Node* n, Backend b) {
  const OpDef& def = op_registry().get(n->op);
  if (def.traits.has(Trait::graph_structure)) return true;
  const auto ins = types_of(n->inputs), outs = types_of(n->outputs);
  return backend_impl(b).supports(n->op, n->attrs, def.dispatch_dtype(ins, outs));
}

}  // namespace

std::vector<std::string> decompose_unsupported(Graph& g, Backend backend) {
  std::vector<std::string> missing;
  bool changed = true;
  for (int round = 0; changed && round < 16; ++round) {
    changed = false;
    missing.clear();
    for (Node* n : std::vector<Node*>(g.nodes())) {
      if (n->dead || has_kernel(n, backend)) continue;
      const OpDef& def = op_registry().get(n->op);
      if (!def.decompose) {
        const auto ins = types_of(n->inputs), outs = types_of(n->outputs);
        missing.push_back(fmt::format("{} ({})", n->label(), dtype_name(def.dispatch_dtype(ins, outs))));
        continue;
      }
      // Trace the decomposition with this node's inputs bound to their existing values.
      std::vector<Tensor> outs;
      {
        Tracer tracer(g);
        std::vector<Tensor> ins;
        for (Value* v : n->inputs) ins.push_back(tracer.symbolic(v));
        outs = def.decompose(ins, n->attrs);
        SPORE_ASSERT(outs.size() == n->outputs.size(), "decomposition of {} gave {} outputs", def.name, outs.size());
        for (size_t i = 0; i < outs.size(); ++i) {
          Value* nv = tracer.value_of(outs[i]);
          SPORE_CHECK(nv->type == n->outputs[i]->type, ErrorCode::internal, "decomposition of {} changed type {} -> {}",
                      n->label(), n->outputs[i]->type.str(), nv->type.str());
          g.replace_all_uses(n->outputs[i], nv);
        }
      }
      g.erase_node(n);
      changed = true;
    }
    g.topo_sort();
  }
  return missing;
}

Plan compile_plan(std::unique_ptr<Graph> g, const CompileOptions& o) {
  for (const Value* v : g->inputs())
    SPORE_CHECK(v->type.is_static(), ErrorCode::shape_mismatch, "cannot compile: input %{} has symbolic type {}; bind its shape",
                v->name, v->type.str());
  reinfer_types(*g);
  // Nodes downstream of a data-dependent shape run in the plan's dynamic region; the rest compiles as usual.
  std::unique_ptr<Graph> whole;
  if (std::shared_ptr<DynamicRegion> region = split_dynamic_region(*g, o.backend, whole)) {
    Plan p = compile_plan(std::move(g), o);
    region->planned_graph = std::move(p.graph_);
    p.graph_ = std::move(whole);
    p.dynamic_ = std::move(region);
    // Every output is final once the region ran: after the last step.
    p.output_ready_step_.assign(p.graph_->outputs().size(), static_cast<int>(p.steps_.size()) - 1);
    return p;
  }
  auto missing = decompose_unsupported(*g, o.backend);
  if (!missing.empty()) {
    std::string list;
    for (const auto& m : missing) list += "\n  " + m;
    SPORE_FAIL(ErrorCode::unsupported, "cannot compile for backend {}: {} node(s) have no kernel and no decomposition:{}",
               backend_name(o.backend), missing.size(), list);
  }
  PassOptions po;
  po.opt_level = o.opt_level;
  po.verify_each = o.verify_each;
  po.disabled = o.disabled_passes;
  po.save_graphs_dir = o.save_graphs_dir;
  po.memory_optimize_level = o.memory_optimize_level;
  po.max_memory = o.max_memory;
  po.inference = o.inference;
  po.recompute = o.recompute;
  po.fast_conv = o.fast_conv;
  if (o.backend == Backend::null) po.disabled.push_back("fold_constants");  // null kernels compute nothing
  MemoryPlanInfo memory_info;
  po.memory_info = &memory_info;
  PassManager pm(po);
  add_default_pipeline(pm);
  pm.run(*g);

  Plan p;
  p.backend_ = o.backend;
  p.calibrate_threads_ = o.calibrate_threads;
  p.pass_records_ = pm.records();
  p.memory_plan_ = std::move(memory_info);
  for (const Node* n : g->nodes())
    if (n->op == "constant"_op && !n->dead && (!n->outputs[0]->uses.empty() || g->is_output(n->outputs[0])))
      p.weights_bytes_ += n->outputs[0]->type.numel() * static_cast<int64_t>(dtype_size(n->outputs[0]->type.dtype));
  p.input_types_ = types_of(g->inputs());
  p.output_types_ = types_of(g->outputs());
  int64_t arena = 0;
  for (Node* n : g->nodes())
    for (Value* v : n->outputs)
      if (v->arena_offset >= 0)
        arena = std::max<int64_t>(arena, v->arena_offset + static_cast<int64_t>(std::max<int64_t>(v->type.numel(), 1) * dtype_size(v->type.dtype)));
  p.arena_bytes_ = arena;
  const Device dev = backend_impl(o.backend).device();
  const bool on_device = !dev.is_host();
  p.device_ = dev;
  p.arena_ = Storage::allocate(static_cast<size_t>(arena), "plan arena", dev);

  std::unordered_map<const Value*, int> input_index, output_index;
  for (size_t i = 0; i < g->inputs().size(); ++i) input_index[g->inputs()[i]] = static_cast<int>(i);
  // Reshapes of graph inputs that run as views: value -> the graph input whose bytes it reads.
  std::unordered_map<const Value*, int> view_of_input;
  for (Node* n : g->nodes())
    if (is_input_view(*g, *n)) {
      const Value* in = n->inputs[0];
      view_of_input[n->outputs[0]] = input_index.count(in) ? input_index.at(in) : view_of_input.at(in);
    }
  for (size_t i = 0; i < g->outputs().size(); ++i) output_index.emplace(g->outputs()[i], static_cast<int>(i));

  // Off the host, graph inputs and computed outputs get buffers on the device (filled and read by copy steps) and
  // constants are uploaded once, here.
  std::unordered_map<const Value*, Tensor> device_io, device_constants;
  if (on_device) {
    for (const Value* v : g->inputs()) device_io[v] = Tensor::empty_on(dev, v->type.shape(), v->type.dtype);
    for (const Value* v : g->outputs())
      if (!device_io.count(v) && v->producer->op != "constant"_op)
        device_io[v] = Tensor::empty_on(dev, v->type.shape(), v->type.dtype);
  }
  auto tensor_for = [&](const Value* v) -> Tensor {
    if (v->producer->op == "constant"_op) {
      if (!on_device) return v->producer->payload;
      auto it = device_constants.find(v);
      if (it == device_constants.end()) it = device_constants.emplace(v, v->producer->payload.to(dev)).first;
      return it->second;
    }
    if (v->arena_offset >= 0) {
      const Shape s = v->type.shape();
      return Tensor::from_storage(p.arena_, s, contiguous_strides(s), v->arena_offset / static_cast<int64_t>(dtype_size(v->type.dtype)),
                                  v->type.dtype);
    }
    if (on_device) {
      if (auto it = device_io.find(v); it != device_io.end()) return it->second;
      if (auto it = view_of_input.find(v); it != view_of_input.end())
        return device_io.at(g->inputs()[it->second]).view(v->type.shape());
    }
    return Tensor();  // patched at run time (graph input or output)
  };
  static const Attrs no_attrs;
  auto copy_step = [&](const Value* v, Tensor in, Tensor out, const char* impl) {
    Plan::Step st;
    st.def = &op_registry().get("identity"_op);
    st.attrs = &no_attrs;
    st.in_types = st.out_types = {v->type};
    st.fn = device_copy_kernel;
    st.impl = impl;
    st.label = v->name;
    st.copy = true;
    st.ins = {std::move(in)};
    st.outs = {std::move(out)};
    p.steps_.push_back(std::move(st));
  };
  if (on_device)
    for (size_t i = 0; i < g->inputs().size(); ++i) {
      p.patches_.push_back({static_cast<int>(p.steps_.size()), false, 0, static_cast<int>(i)});
      copy_step(g->inputs()[i], Tensor(), device_io.at(g->inputs()[i]), "copy to device");
    }

  // For the schedule below: the step that computes each value (-1: graph inputs, constants, views of them), each
  // step's latest input producer, and whether it is a sink (every output a graph output no node reads).
  std::unordered_map<const Value*, int> value_step;
  std::vector<int> anchor;
  std::vector<bool> sink;
  const auto step_of = [&](const Value* v) {
    auto it = value_step.find(v);
    return it == value_step.end() ? -1 : it->second;
  };
  for (Node* n : g->nodes()) {
    const OpDef& def = op_registry().get(n->op);
    if (def.traits.has(Trait::graph_structure)) continue;
    if (is_arena_alias(*n) || view_of_input.count(n->outputs[0])) {  // no step: its output is its input's bytes
      value_step[n->outputs[0]] = step_of(n->inputs[0]);
      continue;
    }
    {
      int a = -1;
      bool only_outputs = true;
      for (const Value* v : n->inputs) a = std::max(a, step_of(v));
      for (const Value* v : n->outputs) {
        only_outputs = only_outputs && output_index.count(v) && v->uses.empty();
        value_step[v] = static_cast<int>(p.steps_.size());
      }
      anchor.push_back(a);
      sink.push_back(only_outputs && !on_device);
    }
    Plan::Step st;
    st.def = &def;
    st.attrs = &n->attrs;
    st.in_types = types_of(n->inputs);
    st.out_types = types_of(n->outputs);
    const KernelInfo* k = kernel_registry().find(o.backend, n->op, def.dispatch_dtype(st.in_types, st.out_types));
    // A node a pass made (fused_elementwise, conv2d_fused, ...) that this backend has no kernel for.
    SPORE_CHECK(k != nullptr, ErrorCode::unsupported,
                "cannot compile for backend {}: {} has no kernel there; a pass created it (compile at opt_level 0 or "
                "disable the pass)", backend_name(o.backend), n->label());
    st.fn = k->fn;
    st.impl = k->impl;
    st.label = n->name.empty() ? n->outputs[0]->name : n->name;
    const int step_index = static_cast<int>(p.steps_.size());
    for (size_t i = 0; i < n->inputs.size(); ++i) {
      const Value* v = n->inputs[i];
      if (v->producer->op == "constant"_op && i < 64) st.constant_inputs |= uint64_t{1} << i;
      st.ins.push_back(tensor_for(v));
      if (!st.ins.back().defined()) {
        if (input_index.count(v)) p.patches_.push_back({step_index, false, static_cast<int>(i), input_index[v]});
        else if (view_of_input.count(v))
          p.patches_.push_back({step_index, false, static_cast<int>(i), view_of_input.at(v), v->type.shape(), true});
        else if (output_index.count(v)) p.patches_.push_back({step_index, false, static_cast<int>(i), -1 - output_index[v]});
      }
    }
    for (size_t i = 0; i < n->outputs.size(); ++i) {
      const Value* v = n->outputs[i];
      st.outs.push_back(tensor_for(v));
      if (!st.outs.back().defined()) {
        // A graph output: written into a fresh tensor every run. An unused, unplanned extra output
        // (e.g. topk's indices nobody reads) gets a private buffer.
        if (output_index.count(v)) p.patches_.push_back({step_index, true, static_cast<int>(i), output_index[v]});
        else st.outs.back() = Tensor::empty_on(dev, v->type.shape(), v->type.dtype);
      }
    }
    p.steps_.push_back(std::move(st));
  }
  // Sinks run right after their last input is computed rather than where the graph order left them (rewrites append
  // their replacements at the end): an output is final as early as possible - data parallelism allreduces a gradient
  // while backward computes the rest - and the values are the same. Their inputs are live until the old position
  // anyway, so the memory plan stays valid; their outputs are graph outputs, outside the arena.
  if (!on_device && !p.steps_.empty()) {
    const size_t ns = p.steps_.size();
    // after[a + 1]: the sinks whose latest input comes from step a (a sink never feeds a step, so a is no sink).
    std::vector<std::vector<int>> after(ns + 1);
    for (size_t i = 0; i < ns; ++i)
      if (sink[i]) after[static_cast<size_t>(anchor[i] + 1)].push_back(static_cast<int>(i));
    std::vector<int> order(after[0].begin(), after[0].end());
    order.reserve(ns);
    for (size_t i = 0; i < ns; ++i) {
      if (sink[i]) continue;
      order.push_back(static_cast<int>(i));
      order.insert(order.end(), after[i + 1].begin(), after[i + 1].end());
    }
    SPORE_ASSERT(order.size() == ns, "plan schedule: every step once");
    std::vector<int> new_index(ns);
    std::vector<Plan::Step> steps;
    steps.reserve(ns);
    for (size_t k = 0; k < ns; ++k) {
      new_index[static_cast<size_t>(order[k])] = static_cast<int>(k);
      steps.push_back(std::move(p.steps_[static_cast<size_t>(order[k])]));
    }
    p.steps_ = std::move(steps);
    for (Plan::Patch& pt : p.patches_) pt.step = new_index[static_cast<size_t>(pt.step)];
  }
  if (on_device)
    for (size_t j = 0; j < g->outputs().size(); ++j) {
      const Value* v = g->outputs()[j];
      if (input_index.count(v) || v->producer->op == "constant"_op || output_index.at(v) != static_cast<int>(j)) continue;
      p.patches_.push_back({static_cast<int>(p.steps_.size()), true, 0, static_cast<int>(j)});
      copy_step(v, device_io.at(v), Tensor(), "copy to host");
    }
  p.output_from_input_.assign(g->outputs().size(), -2);
  p.output_constants_.resize(g->outputs().size());
  for (size_t i = 0; i < g->outputs().size(); ++i) {
    const Value* v = g->outputs()[i];
    if (input_index.count(v)) p.output_from_input_[i] = input_index[v];
    else if (v->producer->op == "constant"_op) {
      p.output_from_input_[i] = -1;
      p.output_constants_[i] = v->producer->payload;
    } else if (output_index.at(v) != static_cast<int>(i)) {
      p.output_from_input_[i] = -3 - output_index.at(v);
    }
  }
  // When each output is final: after the last step writing it (outputs that alias another take its step).
  p.output_ready_step_.assign(g->outputs().size(), -1);
  for (const Plan::Patch& pt : p.patches_)
    if (pt.is_output && pt.slot >= 0) p.output_ready_step_[pt.slot] = std::max(p.output_ready_step_[pt.slot], pt.step);
  for (size_t i = 0; i < g->outputs().size(); ++i)
    if (p.output_from_input_[i] <= -3) p.output_ready_step_[i] = p.output_ready_step_[-3 - p.output_from_input_[i]];
  p.ready_after_step_.assign(p.steps_.size(), {});
  for (size_t i = 0; i < g->outputs().size(); ++i)
    if (p.output_ready_step_[i] >= 0) p.ready_after_step_[p.output_ready_step_[i]].push_back(static_cast<int>(i));
  p.graph_ = std::move(g);
  return p;
}

std::vector<Tensor> Plan::run(std::span<const Tensor> inputs) { return run(inputs, OutputReady()); }

std::vector<Tensor> Plan::run(std::span<const Tensor> inputs, const OutputReady& on_ready) {
  if (!dynamic_) return run_planned(inputs, on_ready);
  const std::vector<Tensor> planned = run_planned(inputs, OutputReady());
  const std::vector<Tensor> region = dynamic_->run(planned);
  std::vector<Tensor> outs;
  outs.reserve(dynamic_->output_source.size());
  for (int src : dynamic_->output_source)
    outs.push_back(src >= 0 ? planned[static_cast<size_t>(src)] : region[static_cast<size_t>(-1 - src)]);
  if (on_ready)
    for (size_t i = 0; i < outs.size(); ++i) on_ready(i, outs[i]);
  return outs;
}

std::vector<Tensor> Plan::run_planned(std::span<const Tensor> inputs, const OutputReady& on_ready) {
  SPORE_CHECK(inputs.size() == input_types_.size(), ErrorCode::invalid_argument, "plan takes {} inputs, got {}",
              input_types_.size(), inputs.size());
  std::vector<Tensor> ins(inputs.begin(), inputs.end());
  for (size_t i = 0; i < ins.size(); ++i) {
    const TensorType& t = input_types_[i];
    SPORE_CHECK(ins[i].dtype() == t.dtype && TensorType::of(t.dtype, ins[i].shape()) == t, ErrorCode::shape_mismatch,
                "input {} (%{}): expected {}, got {}{}", i, graph_->inputs()[i]->name, t.str(), dtype_name(ins[i].dtype()),
                shape_str(ins[i].shape()));
    if (!ins[i].is_contiguous()) ins[i] = ins[i].contiguous();
  }
  std::vector<Tensor> outs(output_types_.size());
  for (size_t i = 0; i < outs.size(); ++i) {
    if (output_from_input_[i] >= 0) outs[i] = ins[output_from_input_[i]];
    else if (output_from_input_[i] == -1) outs[i] = output_constants_[i];
    else if (output_from_input_[i] <= -3) continue;
    else outs[i] = Tensor::empty(output_types_[i].shape(), output_types_[i].dtype);
  }
  for (const Patch& pt : patches_) {
    Step& st = steps_[pt.step];
    const Tensor& t = pt.slot >= 0 ? (pt.is_output ? outs[pt.slot] : ins[pt.slot]) : outs[-1 - pt.slot];
    (pt.is_output ? st.outs : st.ins)[pt.index] = pt.is_view ? t.view(pt.view) : t;
  }
  Profiler* prof = Profiler::active();
  // Profiled runs time each kernel as it runs and record the events (formatting, allocations) after the run, with
  // the run as a span: recording in between cost more than a small kernel and ran the next kernel colder.
  const int64_t prof_run0 = prof ? Profiler::now_ns() : 0;
  struct Timed {
    const Step* step;
    int64_t start_ns, end_ns;
    const char* impl;  // what the call noted (note_kernel_impl), or null
  };
  std::vector<Timed> timed_kernels;
  if (prof) timed_kernels.reserve(steps_.size());
  // on_ready's calls; its first exception ends them and is rethrown after the run (not through the executor).
  std::exception_ptr ready_error;
  const auto report = [&](int i) {
    if (ready_error) return;
    try {
      on_ready(static_cast<size_t>(i), output_from_input_[i] <= -3 ? outs[-3 - output_from_input_[i]] : outs[i]);
    } catch (...) {
      ready_error = std::current_exception();
    }
  };
  if (on_ready)
    for (size_t i = 0; i < outs.size(); ++i)
      if (output_ready_step_[i] < 0) report(static_cast<int>(i));
  if (!executor_) executor_ = backend_impl(backend_).make_executor({.calibrate_threads = calibrate_threads_});
  executor_->run(steps_.size(), [&](size_t i) {
    Step& st = steps_[i];
    KernelContext ctx{st.ins, st.outs, *st.attrs, st.def->id, {}};
    ctx.constant_inputs = st.constant_inputs;
    try {
      if (prof) {
        take_kernel_impl();
        const int64_t t0 = Profiler::now_ns();
        st.fn(ctx);
        const int64_t t1 = Profiler::now_ns();
        timed_kernels.push_back({&st, t0, t1, take_kernel_impl()});
      } else {
        st.fn(ctx);
      }
    } catch (const Error& e) {  // a kernel's run-time check (an index, a sequence length): say which node it was
      if (st.label.empty() || e.message().find(st.label) != std::string::npos) throw;
      throw Error(e.code(), fmt::format("{} (node {})", e.message(), st.label));
    }
    if (on_ready)
      for (int o : ready_after_step_[i]) report(o);
  });
  for (size_t i = 0; i < outs.size(); ++i)
    if (output_from_input_[i] <= -3) outs[i] = outs[-3 - output_from_input_[i]];
  // Drop references to caller tensors so the plan does not keep them alive.
  for (const Patch& pt : patches_) (pt.is_output ? steps_[pt.step].outs : steps_[pt.step].ins)[pt.index] = Tensor();
  if (prof) {
    prof->record_run(prof_run0, Profiler::now_ns());
    for (const Timed& t : timed_kernels)
      prof->record_kernel(*t.step->def, t.step->label, t.impl ? t.impl : t.step->impl, t.step->in_types, t.step->out_types,
                          *t.step->attrs, t.start_ns, t.end_ns);
  }
  if (ready_error) std::rethrow_exception(ready_error);
  return outs;
}

bool Plan::calibrated() const { return executor_ && executor_->calibrated(); }

int64_t Plan::serial_steps() const { return executor_ ? executor_->serial_steps() : 0; }

int64_t Plan::dynamic_nodes() const { return dynamic_ ? dynamic_->num_nodes : 0; }

std::string Plan::describe() const {
  std::string s = fmt::format("plan: {} kernels, arena {} bytes\n", steps_.size(), arena_bytes_);
  for (const Step& st : steps_)
    s += fmt::format("  {} [{}] {}\n", st.copy ? std::string_view("copy") : std::string_view(st.def->name), st.impl, st.label);
  if (dynamic_) {
    s += fmt::format(
        "dynamic region: {} nodes downstream of a data-dependent shape, run one by one with memory "
        "allocated per run\n",
        dynamic_->num_nodes);
    for (const Node* n : dynamic_->graph->nodes())
      if (!n->is_input() && !n->is_constant())
        s += fmt::format("  {} [dynamic] {}\n", op_name(n->op), n->name.empty() ? n->outputs[0]->name : n->name);
  }
  return s;
}

}  // namespace spore
