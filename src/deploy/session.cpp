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


struct Session::Impl {
  std::string path;
  SessionOptions opts;
  std::string name;
  std::vector<SessionInput> inputs;
  std::unique_ptr<Graph> symbolic;  // one graph for every signature, when it imports (or is not ONNX)
  std::string onnx_bytes;           // kept when the model is re-imported per signature
  std::string reason;               // why it is
  std::set<std::string> value_inputs;  // inputs learned to be needed as values
  SessionStats stats;

  using Entry = std::pair<std::string, std::unique_ptr<Specialization>>;
  std::list<Entry> lru;  // most recently used first
  std::unordered_map<std::string, std::list<Entry>::iterator> index;

  std::string key_of(std::span<const Tensor> xs) const {
    std::string k;
    for (size_t i = 0; i < xs.size(); ++i) {
      const Tensor& x = xs[i];
      k += fmt::format("{}{};", dtype_name(x.dtype()), shape_str(x.shape()));
      if (!value_inputs.count(inputs[i].name)) continue;
      const Tensor c = x.contiguous();
      const auto* p = static_cast<const unsigned char*>(c.raw_data());
      k += fmt::format("={:02x};", fmt::join(p, p + c.nbytes(), ""));
    }
    return k;
  }

  std::unique_ptr<Specialization> compile(std::span<const Tensor> xs) {
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
      return sp;
    }
    // Re-import with the dims bound, and the values of the inputs ops take as attributes; learn new such inputs
    // from the importer (each round binds at least one more, so this ends).
    for (;;) {
      io::OnnxImportOptions o;
      o.input_dims = opts.input_dims;
      for (size_t i = 0; i < xs.size(); ++i) {
        const std::string& n = inputs[i].name;
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
      for (size_t i = 0; i < xs.size(); ++i) {
        if (value_inputs.count(inputs[i].name)) {
          sp->bound_values.push_back(inputs[i].name);
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
      m.inputs.push_back({std::move(in.name), std::move(in.type)});
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
  const std::vector<SessionInput>& ins = impl_->inputs;
  SPORE_CHECK(xs.size() == ins.size(), ErrorCode::invalid_argument, "'{}' takes {} input(s), {} given", impl_->path,
              ins.size(), xs.size());
  std::map<std::string, int64_t> bound;
  for (size_t i = 0; i < xs.size(); ++i) {
    const SessionInput& in = ins[i];
    const Tensor& t = xs[i];
    if (partial && !t.defined()) continue;
    SPORE_CHECK(t.defined(), ErrorCode::invalid_argument, "input '{}' is not given", in.name);
    SPORE_CHECK(t.dtype() == in.type.dtype, ErrorCode::dtype_mismatch, "input '{}' is {}{}, the model wants {}",
                in.name, dtype_name(t.dtype()), shape_str(t.shape()), in.type.str());
    SPORE_CHECK(t.rank() == in.type.rank(), ErrorCode::shape_mismatch, "input '{}' has shape {}, the model wants {}",
                in.name, shape_str(t.shape()), in.type.str());
    for (int d = 0; d < t.rank(); ++d) {
      const Dim& dim = in.type.dims[d];
      if (dim.is_static()) {
        SPORE_CHECK(dim.size == t.dim(d), ErrorCode::shape_mismatch,
                    "input '{}' has shape {}, the model wants {} (dim {} differs)", in.name, shape_str(t.shape()),
                    in.type.str(), d);
        continue;
      }
      auto [it, fresh] = bound.emplace(dim.sym, t.dim(d));
      SPORE_CHECK(fresh || it->second == t.dim(d), ErrorCode::shape_mismatch,
                  "input '{}' has shape {}, but dim '{}' is {} in another input", in.name, shape_str(t.shape()),
                  dim.sym, it->second);
    }
  }
  return bound;
}

Specialization& Session::specialize(std::span<const Tensor> xs) {
  Impl& m = *impl_;
  bind(xs);
  ++m.stats.runs;
  const std::string key = m.key_of(xs);
  if (auto it = m.index.find(key); it != m.index.end()) {
    m.lru.splice(m.lru.begin(), m.lru, it->second);
    return *m.lru.front().second;
  }
  std::unique_ptr<Specialization> sp = m.compile(xs);
  ++m.stats.compiles;
  // compile may have learned value inputs: the key then includes their values
  const std::string final_key = m.key_of(xs);
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

std::vector<Tensor> Session::run(std::span<const Tensor> xs) {
  Specialization& sp = specialize(xs);
  const std::vector<Tensor> in = sp.select(xs);
  return sp.plan.run(in);
}

CompileCheck check_compiles(const std::string& path, const SessionOptions& opts, std::span<const Tensor> given) {
  CompileCheck r;
  try {
    Session s(path, opts);
    std::vector<Tensor> xs;
    bool any_random = false;
    for (size_t i = 0; i < s.inputs().size(); ++i) {
      if (i < given.size() && given[i].defined()) {
        xs.push_back(given[i]);
        continue;
      }
      const SessionInput& in = s.inputs()[i];
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
      Specialization& sp = s.specialize(xs);
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
