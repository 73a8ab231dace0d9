#include "deploy/session.h"

#include <list>
#include <unordered_map>

#include <fmt/format.h>

#include "base/error.h"
#include "deploy/random_input.h"
#include "io/file_util.h"
#include "io/model_file.h"
#include "io/onnx/onnx.h"
#include "ops/graph_ops.h"

namespace spore::deploy {

// An input bound as a value becomes part of the key; more elements than this is a model we refuse to specialise
// on (it would compile a plan per input value).
constexpr int64_t max_bound_value_elements = 1 << 16;

void apply_input_dims(Graph& g, const std::map<std::string, std::vector<Dim>>& dims, const std::string& option) {
  if (dims.empty()) return;
  for (const auto& [name, want_dims] : dims) {
    Value* v = nullptr;
    for (Value* in : g.inputs())
      if (in->name == name) v = in;
    if (!v) {
      std::string names;
      for (Value* in : g.inputs()) names += (names.empty() ? "" : ", ") + in->name;
      SPORE_FAIL(ErrorCode::invalid_argument, "{}: the model has no input '{}' (inputs: {})", option, name, names);
    }
    SPORE_CHECK(static_cast<int>(want_dims.size()) == v->type.rank(), ErrorCode::shape_mismatch,
                "{} {}: {} dims given, but input '{}' is {} (rank {})", option, name, want_dims.size(), name,
                v->type.str(), v->type.rank());
    for (size_t d = 0; d < want_dims.size(); ++d) {
      const Dim& want = want_dims[d];
      Dim& have = v->type.dims[d];
      if (!want.is_static() && want.sym.empty()) continue;  // -1: keep the model's dim
      if (have.is_static() && want.is_static())
        SPORE_CHECK(have.size == want.size, ErrorCode::shape_mismatch,
                    "{} {}: dim {} is fixed to {} in the model, cannot become {}", option, name, d, have.size, want.size);
      have = want;
    }
  }
  reinfer_types(g);
}

namespace {
bool is_sequence_kind(io::OnnxValueKind k) {
  return k == io::OnnxValueKind::sequence || k == io::OnnxValueKind::optional_sequence;
}
bool is_optional_kind(io::OnnxValueKind k) {
  return k == io::OnnxValueKind::optional || k == io::OnnxValueKind::optional_sequence;
}
// Kept on a Specialization only when some output is not one tensor (Specialization::outputs).
std::vector<io::OnnxValueLayout> composite_outputs(const std::vector<io::OnnxValueLayout>& outs) {
  for (const io::OnnxValueLayout& o : outs)
    if (o.kind != io::OnnxValueKind::tensor) return outs;
  return {};
}
}  // namespace

std::vector<std::string> flat_input_names(const std::vector<SessionInput>& inputs, const Layout& layout) {
  SPORE_CHECK(layout.size() == inputs.size(), ErrorCode::invalid_argument,
              "the layout gives {} counts for the model's {} input(s)", layout.size(), inputs.size());
  std::vector<std::string> names;
  for (size_t i = 0; i < inputs.size(); ++i) {
    const SessionInput& in = inputs[i];
    const int64_t n = layout[i];
    const bool ok = n == io::kOnnxAbsent ? is_optional_kind(in.kind) : is_sequence_kind(in.kind) ? n >= 0 : n == 1;
    SPORE_CHECK(ok, ErrorCode::invalid_argument, "input '{}' is {} ({}); it cannot be given as {}", in.name,
                io::onnx_value_kind_name(in.kind), in.type.str(),
                n == io::kOnnxAbsent ? std::string("absent") : fmt::format("{} tensor(s)", n));
    if (n == io::kOnnxAbsent) continue;
    if (!is_sequence_kind(in.kind)) {
      names.push_back(in.name);
      continue;
    }
    for (int64_t e = 0; e < n; ++e) names.push_back(io::sequence_element_name(in.name, e));
  }
  return names;
}

struct Session::Impl {
  std::string path;
  SessionOptions opts;
  std::string name;
  std::vector<SessionInput> inputs;
  std::unique_ptr<Graph> symbolic;  // one graph for every signature, when it imports (or is not ONNX)
  std::string onnx_bytes;           // kept when the model is re-imported per signature
  std::string reason;               // why it is
  std::set<std::string> value_inputs;  // inputs learned to be needed as values (tensor names: a sequence's NAME.i)
  std::vector<io::OnnxValueLayout> symbolic_outputs;  // the symbolic graph's sequence/optional outputs
  SessionStats stats;

  // `layout` checked against the inputs' kinds and the `n` tensors given (empty: one tensor each, which a model with
  // sequence or optional inputs cannot take).
  Layout full_layout(size_t n, const Layout& layout) const {
    if (layout.empty()) {
      SPORE_CHECK(n == inputs.size(), ErrorCode::invalid_argument, "'{}' takes {} input(s), {} given", path,
                  inputs.size(), n);
      for (const SessionInput& in : inputs)
        SPORE_CHECK(in.kind == io::OnnxValueKind::tensor, ErrorCode::invalid_argument,
                    "'{}': input '{}' is {}; give its tensors with a layout (Session::run(tensors, layout); `spore "
                    "run --input {}=A.npy,B.npy`)",
                    path, in.name, io::onnx_value_kind_name(in.kind), in.name);
      return Layout(inputs.size(), 1);
    }
    const size_t total = flat_input_names(inputs, layout).size();
    SPORE_CHECK(total == n, ErrorCode::invalid_argument, "'{}': the layout holds {} tensor(s), {} given", path, total,
                n);
    return layout;
  }

  using Entry = std::pair<std::string, std::unique_ptr<Specialization>>;
  std::list<Entry> lru;  // most recently used first
  std::unordered_map<std::string, std::list<Entry>::iterator> index;

  std::string key_of(std::span<const Tensor> xs, const Layout& layout, const std::vector<std::string>& names) const {
    std::string k = fmt::format("{};", fmt::join(layout, ","));
    for (size_t i = 0; i < xs.size(); ++i) {
      const Tensor& x = xs[i];
      k += fmt::format("{}{};", dtype_name(x.dtype()), shape_str(x.shape()));
      if (!value_inputs.count(names[i])) continue;
      const Tensor c = x.contiguous();
      const auto* p = static_cast<const unsigned char*>(c.raw_data());
      k += fmt::format("={:02x};", fmt::join(p, p + c.nbytes(), ""));
    }
    return k;
  }

  std::unique_ptr<Specialization> compile(std::span<const Tensor> xs, const Layout& layout,
                                          const std::vector<std::string>& names) {
    CompileOptions co = opts.compile;
    co.inference = true;
    auto sp = std::make_unique<Specialization>();
    std::vector<Shape> shapes;
    for (const Tensor& x : xs) shapes.push_back(x.shape());
    if (symbolic) {
      std::unique_ptr<Graph> g = symbolic->clone();
      specialize_inputs(*g, shapes);
      sp->plan = compile_plan(std::move(g), co);
      for (size_t i = 0; i < xs.size(); ++i) sp->plan_inputs.push_back(i);
      sp->how = "symbolic graph";
      sp->outputs = symbolic_outputs;
      return sp;
    }
    // Re-import with the dims bound, and the values of the inputs ops take as attributes; learn new such inputs
    // from the importer (each round binds at least one more, so this ends).
    for (;;) {
      io::OnnxImportOptions o;
      o.input_dims = opts.input_dims;
      for (size_t i = 0; i < inputs.size(); ++i)
        if (inputs[i].kind != io::OnnxValueKind::tensor) o.input_counts[inputs[i].name] = layout[i];
      for (size_t i = 0; i < xs.size(); ++i) {
        const std::string& n = names[i];
        if (value_inputs.count(n)) {
          SPORE_CHECK(xs[i].numel() <= max_bound_value_elements, ErrorCode::unsupported,
                      "'{}': input '{}' ({} elements) is taken as an attribute by an op; spore compiles such inputs "
                      "in as constants and does so only for up to {} elements",
                      path, n, xs[i].numel(), max_bound_value_elements);
          o.input_values[n] = xs[i];
        } else {
          std::vector<Dim> d;
          for (int64_t s : shapes[i]) d.emplace_back(s);
          o.input_dims[n] = std::move(d);
        }
      }
      io::OnnxImportReport rep;
      std::unique_ptr<Graph> g;
      try {
        g = io::import_onnx_bytes(onnx_bytes, path, o, &rep);
      } catch (const Error&) {
        bool learned = false;
        for (const std::string& n : rep.needs_values) learned |= value_inputs.insert(n).second;
        if (!learned) throw;
        continue;
      }
      ++stats.imports;
      sp->how = "imported for these shapes";
      sp->outputs = composite_outputs(rep.outputs);
      for (size_t i = 0; i < xs.size(); ++i) {
        if (value_inputs.count(names[i])) {
          sp->bound_values.push_back(names[i]);
          continue;
        }
        sp->plan_inputs.push_back(i);
      }
      if (!sp->bound_values.empty())
        sp->how += fmt::format(" and the values of {}", fmt::join(sp->bound_values, ", "));
      sp->plan = compile_plan(std::move(g), co);
      return sp;
    }
  }
};

std::vector<Tensor> Specialization::select(std::span<const Tensor> inputs) const {
  std::vector<Tensor> out;
  out.reserve(plan_inputs.size());
  for (size_t i : plan_inputs) out.push_back(inputs[i]);
  return out;
}

Session::Session(const std::string& path, SessionOptions opts) : impl_(std::make_unique<Impl>()) {
  Impl& m = *impl_;
  m.path = path;
  m.opts = std::move(opts);
  const std::string head = io::read_file_bytes(path).substr(0, 64);
  if (!io::looks_like_onnx(head) || head.rfind("SPOREMDL", 0) == 0) {
    m.symbolic = io::load_model(path, m.opts.input_dims);
  } else {
    std::string bytes = io::read_file_bytes(path);
    io::OnnxImportOptions o;
    o.input_dims = m.opts.input_dims;
    io::OnnxImportReport rep;
    try {
      m.symbolic = io::import_onnx_bytes(bytes, path, o, &rep);
      m.symbolic_outputs = composite_outputs(rep.outputs);
    } catch (const Error& e) {
      // Unsupported ops and malformed files fail now; what concrete shapes or values may fix waits for them.
      if (rep.has_unsupported() || rep.refused || rep.opset == 0 || e.code() == ErrorCode::parse_error ||
          e.code() == ErrorCode::io_error)
        throw;
      m.reason = e.what();
      m.onnx_bytes = std::move(bytes);
    }
  }
  if (m.symbolic) {
    apply_input_dims(*m.symbolic, m.opts.input_dims);
    m.name = m.symbolic->name();
    for (const Value* v : m.symbolic->inputs()) m.inputs.push_back({v->name, v->type});
  } else {
    m.name = path;
    io::OnnxImportOptions o;
    o.input_dims = m.opts.input_dims;
    for (io::OnnxInputInfo& in : io::onnx_graph_inputs(m.onnx_bytes, path, o))
      m.inputs.push_back({std::move(in.name), std::move(in.type), in.kind, in.rank_known});
  }
}

Session::~Session() = default;
Session::Session(Session&&) noexcept = default;
Session& Session::operator=(Session&&) noexcept = default;

const std::string& Session::path() const { return impl_->path; }
const std::string& Session::model_name() const { return impl_->name; }
const std::vector<SessionInput>& Session::inputs() const { return impl_->inputs; }
const std::string& Session::per_signature_reason() const { return impl_->reason; }
const SessionStats& Session::stats() const { return impl_->stats; }
const std::set<std::string>& Session::value_inputs() const { return impl_->value_inputs; }
size_t Session::cached_plans() const { return impl_->lru.size(); }

std::map<std::string, int64_t> Session::bind(std::span<const Tensor> xs, bool partial) const {
  return bind(xs, {}, partial);
}

std::map<std::string, int64_t> Session::bind(std::span<const Tensor> xs, const Layout& layout, bool partial) const {
  const std::vector<SessionInput>& ins = impl_->inputs;
  const Layout lay = impl_->full_layout(xs.size(), layout);
  std::map<std::string, int64_t> bound;
  size_t j = 0;
  for (size_t i = 0; i < ins.size(); ++i) {
    const SessionInput& in = ins[i];
    const int64_t count = lay[i] == io::kOnnxAbsent ? 0 : lay[i];
    const bool seq = is_sequence_kind(in.kind);
    for (int64_t e = 0; e < count; ++e) {
      const Tensor& t = xs[j++];
      const std::string name = seq ? io::sequence_element_name(in.name, e) : in.name;
      if (partial && !t.defined()) continue;
      SPORE_CHECK(t.defined(), ErrorCode::invalid_argument, "input '{}' is not given", name);
      SPORE_CHECK(t.dtype() == in.type.dtype, ErrorCode::dtype_mismatch, "input '{}' is {}{}, the model wants {}{}",
                  name, dtype_name(t.dtype()), shape_str(t.shape()), in.rank_known ? "" : "a ",
                  in.rank_known ? in.type.str() : dtype_name(in.type.dtype));
      if (!in.rank_known) continue;
      SPORE_CHECK(t.rank() == in.type.rank(), ErrorCode::shape_mismatch, "input '{}' has shape {}, the model wants {}",
                  name, shape_str(t.shape()), in.type.str());
      for (int d = 0; d < t.rank(); ++d) {
        const Dim& dim = in.type.dims[d];
        if (dim.is_static()) {
          SPORE_CHECK(dim.size == t.dim(d), ErrorCode::shape_mismatch,
                      "input '{}' has shape {}, the model wants {} (dim {} differs)", name, shape_str(t.shape()),
                      in.type.str(), d);
          continue;
        }
        if (seq) continue;  // each element of a sequence has its own sizes
        auto [it, fresh] = bound.emplace(dim.sym, t.dim(d));
        SPORE_CHECK(fresh || it->second == t.dim(d), ErrorCode::shape_mismatch,
                    "input '{}' has shape {}, but dim '{}' is {} in another input", name, shape_str(t.shape()), dim.sym,
                    it->second);
      }
    }
  }
  return bound;
}

Specialization& Session::specialize(std::span<const Tensor> xs) { return specialize(xs, {}); }

Specialization& Session::specialize(std::span<const Tensor> xs, const Layout& layout) {
  Impl& m = *impl_;
  bind(xs, layout);
  ++m.stats.runs;
  const Layout lay = m.full_layout(xs.size(), layout);
  const std::vector<std::string> names = flat_input_names(m.inputs, lay);
  const std::string key = m.key_of(xs, lay, names);
  if (auto it = m.index.find(key); it != m.index.end()) {
    m.lru.splice(m.lru.begin(), m.lru, it->second);
    return *m.lru.front().second;
  }
  std::unique_ptr<Specialization> sp = m.compile(xs, lay, names);
  ++m.stats.compiles;
  // compile may have learned value inputs: the key then includes their values
  const std::string final_key = m.key_of(xs, lay, names);
  if (auto it = m.index.find(final_key); it != m.index.end()) {  // the same specialization, found under its new key
    m.lru.splice(m.lru.begin(), m.lru, it->second);
    return *m.lru.front().second;
  }
  m.lru.emplace_front(final_key, std::move(sp));
  m.index[final_key] = m.lru.begin();
  while (m.lru.size() > std::max<size_t>(m.opts.max_plans, 1)) {
    m.index.erase(m.lru.back().first);
    m.lru.pop_back();
    ++m.stats.evictions;
  }
  return *m.lru.front().second;
}

std::vector<Tensor> Session::run(std::span<const Tensor> xs) { return run(xs, {}); }

std::vector<Tensor> Session::run(std::span<const Tensor> xs, const Layout& layout) {
  Specialization& sp = specialize(xs, layout);
  const std::vector<Tensor> in = sp.select(xs);
  return sp.plan.run(in);
}

CompileCheck check_compiles(const std::string& path, const SessionOptions& opts, std::span<const Tensor> given,
                            const Layout& layout) {
  CompileCheck r;
  try {
    Session s(path, opts);
    std::vector<Tensor> xs;
    Layout lay = layout;
    bool any_random = false;
    if (!layout.empty()) xs.assign(given.begin(), given.end());
    for (size_t i = 0; i < s.inputs().size() && layout.empty(); ++i) {
      const SessionInput& in = s.inputs()[i];
      if (in.kind == io::OnnxValueKind::sequence) {
        r.note = fmt::format(
            "not compiled: input '{}' is a sequence; give its tensors (--input {}=A.npy,B.npy) to "
            "check it",
            in.name, in.name);
        return r;
      }
      const bool optional = is_optional_kind(in.kind);
      if (optional && !(i < given.size() && given[i].defined() && in.kind == io::OnnxValueKind::optional)) {
        lay.push_back(io::kOnnxAbsent);  // an optional input not given holds nothing
        continue;
      }
      lay.push_back(1);
      if (i < given.size() && given[i].defined()) {
        xs.push_back(given[i]);
        continue;
      }
      Shape shape;
      for (int d = 0; d < in.type.rank(); ++d) {
        const Dim& dim = in.type.dims[d];
        if (dim.is_static()) {
          shape.push_back(dim.size);
        } else if (d == 0) {
          shape.push_back(1);
        } else {
          r.note = fmt::format("not compiled: input '{}' ({}) has the symbolic dim '{}' beyond the batch; give "
                               "--input-shape {}:... or --input {}=FILE.npy to check it",
                               in.name, in.type.str(), dim.sym, in.name, in.name);
          return r;
        }
      }
      xs.push_back(random_input(shape, in.type.dtype, 0, i));
      any_random = true;
    }
    try {
      Specialization& sp = s.specialize(xs, lay);
      r.compiled = true;
      r.note = fmt::format("compiles for {} ({} kernels, {})", any_random ? "batch 1" : "the given inputs",
                           sp.plan.num_kernels(), sp.how);
    } catch (const Error& e) {
      if (!s.value_inputs().empty() && any_random)  // random values of a shape/k input need not suit the model
        r.note = fmt::format("not verified: the model takes input(s) {} as attributes and compiles once per value; "
                             "random values do not compile ({}); check it with --input NAME=FILE.npy",
                             fmt::join(s.value_inputs(), ", "), e.what());
      else
        r.note = fmt::format("does not compile for {}: {}", any_random ? "batch 1 with random inputs" : "the given inputs",
                             e.what());
    }
  } catch (const Error& e) {
    r.note = fmt::format("does not import: {}", e.what());
  }
  return r;
}

}  // namespace spore::deploy
