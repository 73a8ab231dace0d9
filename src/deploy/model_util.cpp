#include "deploy/model_util.h"

#include <algorithm>
#include <cctype>
#include <cstdlib>

#include <fmt/format.h>

#include "base/error.h"
#include "io/model_file.h"
#include "io/npy.h"
#include "ops/graph_ops.h"
#include "ops/ops.h"
#include "deploy/random_input.h"

namespace spore::deploy {

namespace {
std::vector<std::string> split(const std::string& s, char sep) {
  std::vector<std::string> out;
  size_t start = 0;
  while (true) {
    const size_t p = s.find(sep, start);
    out.push_back(s.substr(start, p == std::string::npos ? std::string::npos : p - start));
    if (p == std::string::npos) break;
    start = p + 1;
  }
  return out;
}
}  // namespace

std::vector<InputShapeSpec> parse_input_shapes(const std::vector<std::string>& specs) {
  std::vector<InputShapeSpec> out;
  for (const std::string& joined : specs) {
    for (const std::string& spec : split(joined, ';')) {
      if (spec.empty()) continue;
      const size_t colon = spec.rfind(':');
      SPORE_CHECK(colon != std::string::npos && colon > 0, ErrorCode::invalid_argument,
                  "--input-shape '{}': expected NAME:D0,D1,... (e.g. x:1,1,28,28)", spec);
      InputShapeSpec s;
      s.name = spec.substr(0, colon);
      const std::string dims = spec.substr(colon + 1);
      if (!dims.empty()) {
        for (const std::string& d : split(dims, ',')) {
          SPORE_CHECK(!d.empty(), ErrorCode::invalid_argument, "--input-shape '{}': empty dim", spec);
          char* end = nullptr;
          const long long v = std::strtoll(d.c_str(), &end, 10);
          if (end && *end == '\0') {
            SPORE_CHECK(v >= -1, ErrorCode::invalid_argument, "--input-shape '{}': dim {} is negative", spec, v);
            s.dims.push_back(v == -1 ? Dim::symbol("") : Dim(static_cast<int64_t>(v)));
          } else {
            const bool ident = std::all_of(d.begin(), d.end(), [](char c) { return std::isalnum((unsigned char)c) || c == '_'; });
            SPORE_CHECK(ident && !std::isdigit((unsigned char)d[0]), ErrorCode::invalid_argument,
                        "--input-shape '{}': dim '{}' is neither a size nor a symbol name", spec, d);
            s.dims.push_back(Dim::symbol(d));
          }
        }
      }
      out.push_back(std::move(s));
    }
  }
  return out;
}

void apply_input_shapes(Graph& g, const std::vector<InputShapeSpec>& specs) {
  apply_input_dims(g, input_dims_of(specs));
}

std::unique_ptr<Graph> load_model_file(const std::string& path, const std::vector<InputShapeSpec>& specs) {
  std::unique_ptr<Graph> g = io::load_model(path, input_dims_of(specs));
  apply_input_shapes(*g, specs);
  return g;
}

namespace {
std::vector<SessionInput> inputs_of(const Graph& g) {
  std::vector<SessionInput> out;
  for (const Value* v : g.inputs()) out.push_back({v->name, v->type});
  return out;
}
}  // namespace

std::vector<Shape> concrete_input_shapes(const Graph& g, int64_t batch) { return concrete_input_shapes(inputs_of(g), batch); }

std::vector<Shape> concrete_input_shapes(const std::vector<SessionInput>& inputs, int64_t batch) {
  std::vector<Shape> out;
  for (const SessionInput& v : inputs) {
    Shape s;
    for (int d = 0; d < v.type.rank(); ++d) {
      const Dim& dim = v.type.dims[d];
      if (dim.is_static()) {
        s.push_back(dim.size);
      } else {
        SPORE_CHECK(d == 0, ErrorCode::invalid_argument,
                    "input '{}' ({}) has a symbolic dim '{}' at position {}: fix it with --input-shape {}:...", v.name,
                    v.type.str(), dim.sym, d, v.name);
        s.push_back(batch);
      }
    }
    out.push_back(std::move(s));
  }
  return out;
}

std::map<std::string, std::vector<Dim>> input_dims_of(const std::vector<InputShapeSpec>& specs) {
  std::map<std::string, std::vector<Dim>> dims;
  for (const InputShapeSpec& s : specs) dims[s.name] = s.dims;
  return dims;
}

Plan compile_for_shapes(const Graph& g, const std::vector<Shape>& shapes, const CompileOptions& opts) {
  std::unique_ptr<Graph> copy = g.clone();
  specialize_inputs(*copy, shapes);
  CompileOptions o = opts;
  o.inference = true;  // the CLI runs models, it never trains them
  return compile_plan(std::move(copy), o);
}

ClassifierEval evaluate_classifier(const Graph& g, const Tensor& images, const Tensor& labels, int64_t batch, float scale) {
  SPORE_CHECK(!g.inputs().empty() && !g.outputs().empty(), ErrorCode::invalid_argument,
              "model '{}' needs at least one input and one output to evaluate", g.name());
  SPORE_CHECK(images.defined() && labels.defined() && images.rank() >= 1 && labels.rank() >= 1 &&
                  labels.dim(0) == images.dim(0),
              ErrorCode::invalid_argument, "evaluate: expected [N, ...] images and [N] labels");
  const TensorType& in_t = g.inputs()[0]->type;
  SPORE_CHECK(in_t.rank() == images.rank(), ErrorCode::shape_mismatch,
              "model input '{}' is {} but the dataset's images are {}", g.inputs()[0]->name, in_t.str(),
              shape_str(images.shape()));
  int64_t run_batch = batch;
  if (in_t.dims[0].is_static()) run_batch = in_t.dims[0].size;
  const int64_t n = images.dim(0);
  const Tensor label_i64 = labels.dtype() == DType::i64 ? labels : ops::cast(labels, DType::i64);
  ClassifierEval r;
  std::map<int64_t, Plan> plans;  // by batch size (the last batch may be smaller)
  for (int64_t start = 0; start < n; start += run_batch) {
    int64_t stop = std::min(n, start + run_batch);
    Tensor x = images.slice(0, start, stop).contiguous();
    if (stop - start < run_batch && in_t.dims[0].is_static()) {  // pad the tail to the model's fixed batch
      Shape ps = images.shape();
      ps[0] = run_batch;
      Tensor padded = Tensor::zeros(ps, images.dtype());
      copy_strided(x, padded.slice(0, 0, stop - start));
      x = padded;
    }
    if (scale != 1.f) x = ops::mul(x, static_cast<double>(scale));
    if (x.dtype() != in_t.dtype) x = ops::cast(x, in_t.dtype);
    const int64_t b = x.dim(0);
    auto it = plans.find(b);
    if (it == plans.end()) {
      Shape s = x.shape();
      std::vector<Shape> shapes{s};
      for (size_t i = 1; i < g.inputs().size(); ++i)
        SPORE_FAIL(ErrorCode::invalid_argument, "model '{}' has {} inputs; a classifier takes one", g.name(), g.inputs().size());
      it = plans.emplace(b, compile_for_shapes(g, shapes)).first;
    }
    std::vector<Tensor> outs = it->second.run(std::span<const Tensor>(&x, 1));
    Tensor logits = outs.at(0);
    if (logits.rank() > 2) logits = logits.contiguous().view({logits.dim(0), -1});
    const Tensor pred = ops::argmax(logits, 1);
    const int64_t* p = pred.contiguous().data<int64_t>();
    const Tensor y = label_i64.slice(0, start, stop).contiguous();
    const int64_t* t = y.data<int64_t>();
    for (int64_t i = 0; i < stop - start; ++i) r.correct += p[i] == t[i];
    const Tensor lsm = ops::log_softmax(ops::cast(logits, DType::f64), 1).contiguous();
    for (int64_t i = 0; i < stop - start; ++i) r.loss -= lsm.data<double>()[i * lsm.dim(1) + t[i]];
    r.samples += stop - start;
  }
  r.accuracy = r.samples ? static_cast<double>(r.correct) / static_cast<double>(r.samples) : 0.0;
  r.loss = r.samples ? r.loss / static_cast<double>(r.samples) : 0.0;
  return r;
}

std::vector<Shape> shapes_for_batch(const Graph& g, int64_t batch, bool batch_given, const std::string& model) {
  return shapes_for_batch(inputs_of(g), batch, batch_given, model);
}

std::vector<Shape> shapes_for_batch(const std::vector<SessionInput>& inputs, int64_t batch, bool batch_given,
                                    const std::string& model) {
  bool has_batch_dim = false;
  for (const SessionInput& in : inputs) has_batch_dim |= in.type.rank() > 0 && !in.type.dims[0].is_static();
  SPORE_CHECK(has_batch_dim || !batch_given, ErrorCode::invalid_argument,
              "--batch {}: no input of '{}' has a symbolic first dim (its shapes are fixed; see --input-shape)", batch,
              model);
  return concrete_input_shapes(inputs, batch);
}

RunInputs gather_run_inputs(const Session& session, const std::vector<std::string>& input_specs, int64_t batch,
                            bool batch_given, uint64_t seed, bool no_random, const std::string& model,
                            const std::map<std::string, Tensor>& given) {
  const std::vector<SessionInput>& model_inputs = session.inputs();
  auto names = [&] {
    std::string s;
    for (const SessionInput& in : model_inputs) s += (s.empty() ? "" : ", ") + in.name;
    return s.empty() ? std::string("none") : s;
  };
  std::map<std::string, std::string> files;
  for (const std::string& spec : input_specs) {
    const size_t eq = spec.find('=');
    SPORE_CHECK(eq != std::string::npos && eq > 0 && eq + 1 < spec.size(), ErrorCode::invalid_argument,
                "--input '{}': expected NAME=FILE.npy", spec);
    const std::string name = spec.substr(0, eq);
    bool known = false;
    for (const SessionInput& in : model_inputs) known |= in.name == name;
    SPORE_CHECK(known, ErrorCode::invalid_argument, "--input {}: the model has no input '{}' (inputs: {})", spec, name,
                names());
    SPORE_CHECK(files.emplace(name, spec.substr(eq + 1)).second, ErrorCode::invalid_argument,
                "--input: input '{}' is given twice", name);
  }
  for (const auto& [name, t] : given) {
    bool known = false;
    for (const SessionInput& in : model_inputs) known |= in.name == name;
    SPORE_CHECK(known, ErrorCode::invalid_argument, "input '{}' is given, but the model has no input '{}' (inputs: {})",
                name, name, names());
    SPORE_CHECK(!files.count(name), ErrorCode::invalid_argument, "input '{}' is given both as a tensor and as a file",
                name);
    SPORE_CHECK(t.defined(), ErrorCode::invalid_argument, "input '{}': the tensor is undefined", name);
  }
  if (no_random) {
    std::string missing;
    for (const SessionInput& in : model_inputs)  // an optional input not given holds nothing
      if (!files.count(in.name) && !given.count(in.name) && in.kind != io::OnnxValueKind::optional &&
          in.kind != io::OnnxValueKind::optional_sequence)
        missing += (missing.empty() ? "" : ", ") + in.name;
    SPORE_CHECK(missing.empty(), ErrorCode::invalid_argument, "--no-random: no --input NAME=FILE.npy for input(s) {}",
                missing);
  }
  if (batch_given) {
    bool has_batch_dim = false;
    for (const SessionInput& in : model_inputs)
      has_batch_dim |= !files.count(in.name) && !given.count(in.name) && in.type.rank() > 0 && !in.type.dims[0].is_static();
    SPORE_CHECK(has_batch_dim, ErrorCode::invalid_argument,
                "--batch {}: no random input of '{}' has a symbolic first dim (its shapes are fixed or given by "
                "--input files; see --input-shape)",
                batch, model);
  }
  // Per model input its tensors: given, read, or undefined (random below); a sequence's from its file list.
  RunInputs r;
  std::vector<size_t> owner;  // per tensor: its model input
  for (size_t i = 0; i < model_inputs.size(); ++i) {
    const SessionInput& in = model_inputs[i];
    const bool seq = in.kind == io::OnnxValueKind::sequence || in.kind == io::OnnxValueKind::optional_sequence;
    const bool optional = in.kind == io::OnnxValueKind::optional || in.kind == io::OnnxValueKind::optional_sequence;
    auto g = given.find(in.name);
    auto it = files.find(in.name);
    auto read = [&](const std::string& file, const std::string& name) {
      try {
        return io::read_npy(file);
      } catch (const Error& e) {
        throw Error(e.code(), fmt::format("--input {}: {}", name, e.what()));
      }
    };
    if (seq) {
      SPORE_CHECK(g == given.end(), ErrorCode::invalid_argument,
                  "input '{}' is a sequence; give its elements as files (--input {}=A.npy,B.npy)", in.name, in.name);
      if (it == files.end()) {
        SPORE_CHECK(optional, ErrorCode::invalid_argument,
                    "input '{}' is a sequence of {} tensors: give its elements with --input {}=A.npy,B.npy,... "
                    "(--input {}=[] for an empty one); spore makes no random sequences",
                    in.name, in.rank_known ? in.type.str() : dtype_name(in.type.dtype), in.name, in.name);
        r.layout.push_back(io::kOnnxAbsent);  // an optional not given holds nothing
        continue;
      }
      std::vector<std::string> parts;
      if (it->second != "[]") {
        for (size_t start = 0;;) {
          const size_t comma = it->second.find(',', start);
          parts.push_back(it->second.substr(start, comma == std::string::npos ? std::string::npos : comma - start));
          if (comma == std::string::npos) break;
          start = comma + 1;
        }
      }
      for (size_t e = 0; e < parts.size(); ++e) {
        const std::string name = io::sequence_element_name(in.name, static_cast<int64_t>(e));
        SPORE_CHECK(!parts[e].empty(), ErrorCode::invalid_argument,
                    "--input {}={}: element {} has no file name (NAME=A.npy,B.npy; NAME=[] for an empty sequence)",
                    in.name, it->second, e);
        r.tensors.push_back(read(parts[e], name));
        r.files.push_back(parts[e]);
        r.names.push_back(name);
        owner.push_back(i);
      }
      r.layout.push_back(static_cast<int64_t>(parts.size()));
      continue;
    }
    if (optional && g == given.end() && it == files.end()) {
      r.layout.push_back(io::kOnnxAbsent);
      continue;
    }
    r.layout.push_back(1);
    r.names.push_back(in.name);
    owner.push_back(i);
    r.files.push_back(it == files.end() ? std::string() : it->second);
    r.tensors.push_back(it != files.end() ? read(it->second, in.name) : g != given.end() ? g->second : Tensor());
  }
  // The given inputs bind the symbolic dims (session.bind checks them); the others get random values.
  std::map<std::string, int64_t> bound;
  try {
    bound = session.bind(r.tensors, r.layout, /*partial=*/true);
  } catch (const Error& e) {
    throw Error(e.code(), fmt::format("{} (given with --input{})", e.what(), given.empty() ? "" : " or as a tensor"));
  }
  for (size_t j = 0; j < r.tensors.size(); ++j) {
    const size_t i = owner[j];
    const SessionInput& in = model_inputs[i];
    if (r.tensors[j].defined()) continue;
    Shape shape;
    for (int d = 0; d < in.type.rank(); ++d) {
      const Dim& dim = in.type.dims[d];
      if (dim.is_static()) {
        shape.push_back(dim.size);
      } else if (auto b = bound.find(dim.sym); b != bound.end()) {
        shape.push_back(b->second);
      } else {
        SPORE_CHECK(d == 0, ErrorCode::invalid_argument,
                    "input '{}' ({}) has a symbolic dim '{}' at position {}: give the input with --input or fix the dim "
                    "with --input-shape {}:...",
                    in.name, in.type.str(), dim.sym, d, in.name);
        shape.push_back(batch);
        bound.emplace(dim.sym, batch);
      }
    }
    r.tensors[j] = random_input(shape, in.type.dtype, seed, i);
  }
  return r;
}

PlannedMemory planned_memory(const Plan& plan) {
  PlannedMemory m;
  m.arena = plan.arena_bytes();
  const Graph& g = plan.graph();
  for (const Node* n : g.nodes())
    if (n->op == "constant"_op && !n->dead) m.weights += tensor_bytes(n->outputs[0]->type);
  for (const Value* v : g.inputs()) m.io += tensor_bytes(v->type);
  for (const Value* v : g.outputs())
    if (v->producer->op != "input"_op && v->producer->op != "constant"_op && v->type.is_static())  // else sized per run
      m.io += tensor_bytes(v->type);
  return m;
}

}  // namespace spore::deploy
