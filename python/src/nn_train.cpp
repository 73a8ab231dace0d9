// spore.nn, spore.train and spore.dataset's C++ half (docs/PYTHON.md): Cells subclassable in Python, parameters,
// the built-in layers and losses, optimizers, learning-rate schedules, callbacks, train::Model, the data pipeline,
// set_context and export. Like module.cpp it binds the engine's own classes and adds no engine code: a Python Cell
// is an nn::Cell whose construct calls back into Python, so train::Model traces it in graph mode exactly as it traces
// a C++ cell.
//
// The GIL: long calls (Model.train/eval/predict, a built-in cell's forward, export) release it; every call back into
// Python (a Python construct, callback, schedule or loss function) takes it back on the calling thread. Between
// training steps the signal check runs Python's signal handlers, so Ctrl-C raises KeyboardInterrupt there and leaves
// the model at a step boundary.
#include <pybind11/pybind11.h>
#include <pybind11/stl.h>

#include <fmt/format.h>

#include <filesystem>
#include <map>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "base/thread_pool.h"
#include "common.h"
#include "data/dataset.h"
#include "data/sources.h"
#include "io/model_file.h"
#include "ir/graph.h"
#include "nn/cell.h"
#include "nn/init.h"
#include "nn/layers.h"
#include "nn/loss.h"
#include "nn/rnn.h"
#include "nn/transformer.h"
#include "runtime/runtime.h"
#include "train/callbacks.h"
#include "train/checkpoint.h"
#include "train/export.h"
#include "train/model.h"
#include "train/models.h"
#include "train/optimizer.h"

namespace py = pybind11;
using spore::DType;
using spore::ErrorCode;
using spore::Tensor;
using spore_py::fail;
using spore_py::type_name;
namespace nn = spore::nn;
namespace train = spore::train;
namespace data = spore::data;

namespace {

// A Python value as a tensor: tensors as they are, anything else through spore.tensor (NumPy arrays shared,
// Python numbers and lists copied).
Tensor as_tensor(py::handle v, const std::string& what) {
  if (py::isinstance<Tensor>(v)) return v.cast<Tensor>();
  if (v.is_none()) fail(ErrorCode::invalid_argument, fmt::format("{}: got None, expected a tensor", what));
  try {
    return py::module_::import("spore._tensor").attr("tensor")(v).cast<Tensor>();
  } catch (py::error_already_set& e) {
    if (!e.matches(PyExc_TypeError) && !e.matches(PyExc_ValueError)) throw;
    fail(ErrorCode::invalid_argument,
         fmt::format("{}: expected a tensor or an array, got {} ({})", what, type_name(v), e.what()));
  }
}

// ---- cells -------------------------------------------------------------------------------------------------------

// A Cell subclassed in Python: construct is the Python method. Called from C++ (train::Model, a C++ container, a
// trace), it takes the GIL and must return one tensor; called from Python it is Python's own call (any arguments and
// results).
class PyCell : public nn::Cell {
 public:
  Tensor construct(const Tensor& x) override {
    const Tensor xs[1] = {x};
    return call_python(xs);
  }
  Tensor construct(std::span<const Tensor> xs) override { return call_python(xs); }

 private:
  Tensor call_python(std::span<const Tensor> xs) {
    py::gil_scoped_acquire gil;
    py::function f = py::get_override(static_cast<const nn::Cell*>(this), "construct");
    if (!f) fail(ErrorCode::unsupported, fmt::format("{} defines no construct(...)", python_type()));
    py::tuple args(xs.size());
    for (size_t i = 0; i < xs.size(); ++i) args[i] = py::cast(xs[i]);
    py::object r = f(*args);
    if (!py::isinstance<Tensor>(r))
      fail(ErrorCode::invalid_argument,
           fmt::format("{}.construct returned {}, not a spore.Tensor (a cell run by train.Model, export or a C++ "
                       "layer returns one tensor)",
                       python_type(), type_name(r)));
    return r.cast<Tensor>();
  }
  // The Python class's name, for errors (only then: a construct call is a hot path in PyNative mode).
  std::string python_type() {
    return type_name(py::cast(static_cast<nn::Cell*>(this), py::return_value_policy::reference));
  }
};

bool is_python_cell(const nn::Cell& c) { return dynamic_cast<const PyCell*>(&c) != nullptr; }

// The engine cell behind a Python object, or null while a subclass's __init__ has not yet called super().__init__()
// (pybind11 has not constructed it: casting then would read garbage).
nn::Cell* cell_or_null(py::handle self) {
  auto* inst = reinterpret_cast<py::detail::instance*>(self.ptr());
  const py::detail::value_and_holder vh = inst->get_value_and_holder(nullptr, /*throw_if_missing=*/false);
  if (!vh || !vh.holder_constructed()) return nullptr;
  return self.cast<nn::Cell*>();
}

// spore.Parameter: made in Python around a tensor, then adopted by the cell it is assigned to (the cell's slot holds
// the value from then on; this object refers to that slot). Parameters a cell lists refer to its slots too, under
// their dotted names.
struct PyParameter {
  std::unique_ptr<nn::Parameter> own;  // before it is assigned to a cell
  nn::Parameter* slot = nullptr;       // own.get() or a cell's slot
  py::object owner;                    // the cell that keeps `slot` alive
  std::string name;                    // the dotted name when it came from a cell, else the slot's name

  nn::Parameter& get() const {
    if (slot == nullptr) fail(ErrorCode::invalid_argument, "Parameter: empty");
    return *slot;
  }
};

std::unique_ptr<PyParameter> make_parameter(py::handle data, const std::string& name, bool requires_grad) {
  Tensor t = as_tensor(data, "Parameter");
  if (t.is_symbolic()) fail(ErrorCode::invalid_argument, "Parameter: the tensor is symbolic (being traced)");
  if (requires_grad && !spore::is_floating(t.dtype()))
    fail(ErrorCode::dtype_mismatch,
         fmt::format("Parameter '{}': a trainable parameter must be floating, got {} (pass requires_grad=False for "
                     "a buffer)",
                     name, spore::dtype_name(t.dtype())));
  auto p = std::make_unique<PyParameter>();
  p->own = std::make_unique<nn::Parameter>(nn::Parameter{name, t.contiguous().clone(), requires_grad});
  p->slot = p->own.get();
  p->name = name;
  return p;
}

py::object wrap_slot(nn::Parameter* slot, const std::string& dotted, py::object owner) {
  auto p = std::make_unique<PyParameter>();
  p->slot = slot;
  p->name = dotted;
  p->owner = std::move(owner);
  return py::cast(std::move(p));
}

void set_parameter_data(nn::Parameter& p, py::handle v, const std::string& name) {
  Tensor t = as_tensor(v, fmt::format("parameter '{}'", name));
  const Tensor& old = p.value;
  if (!t.is_symbolic() && old.defined() && !old.is_symbolic() && (t.shape() != old.shape() || t.dtype() != old.dtype()))
    fail(ErrorCode::shape_mismatch,
         fmt::format("parameter '{}': set_data got {} {}, the parameter is {} {}", name, spore::shape_str(t.shape()),
                     spore::dtype_name(t.dtype()), spore::shape_str(old.shape()), spore::dtype_name(old.dtype())));
  p.value = t.is_symbolic() ? t : t.contiguous().clone();
}

nn::Parameter* own_parameter(nn::Cell& c, const std::string& name) {
  for (nn::Parameter* p : c.parameter_slots(/*recurse=*/false))
    if (p->name == name) return p;
  return nullptr;
}

bool has_child(nn::Cell& c, const std::string& name) {
  for (auto& [n, child] : c.cells_and_names())
    if (n == name) return true;
  return false;
}

// Cell.__setattr__: a Parameter (or, for a name that is already a parameter, a tensor) goes into the cell's slots;
// a Cell is registered as a sub-cell (and kept in __dict__, which keeps it alive); anything else is a plain attribute.
void cell_setattr(py::object self, const std::string& name, py::object value) {
  // Leaked on purpose: a static py::object would be released after the interpreter is gone.
  static const auto* object_setattr =
      new py::object(py::module_::import("builtins").attr("object").attr("__setattr__"));
  nn::Cell* c = cell_or_null(self);
  const bool special = name.size() > 4 && name.compare(0, 2, "__") == 0;
  if (c == nullptr || special) {
    if (c == nullptr && (py::isinstance<PyParameter>(value) || py::isinstance<nn::Cell>(value)))
      fail(ErrorCode::invalid_argument,
           fmt::format("{}.{}: call super().__init__() in __init__ before assigning cells or parameters",
                       type_name(self), name));
    (*object_setattr)(self, name, value);
    return;
  }
  if (py::isinstance<PyParameter>(value)) {
    auto& p = value.cast<PyParameter&>();
    if (nn::Parameter* existing = own_parameter(*c, name)) {
      set_parameter_data(*existing, py::cast(p.get().value), name);
      existing->requires_grad = p.get().requires_grad;
    } else {
      if (has_child(*c, name))
        fail(ErrorCode::invalid_argument,
             fmt::format("{}.{} is a sub-cell; it cannot become a parameter", type_name(self), name));
      if (!p.own)
        fail(ErrorCode::invalid_argument,
             fmt::format("{}.{}: this Parameter already belongs to a cell ('{}'); make a new one from its data",
                         type_name(self), name, p.name));
      const std::string local = name;
      c->register_parameter(local, p.own->value, p.own->requires_grad);
      p.slot = own_parameter(*c, local);
      p.own.reset();
      p.name = local;
      p.owner = self;
    }
    return;
  }
  if (nn::Parameter* existing = own_parameter(*c, name)) {
    set_parameter_data(*existing, value, name);
    return;
  }
  if (py::isinstance<nn::Cell>(value)) {
    nn::Cell& child = value.cast<nn::Cell&>();
    if (has_child(*c, name)) {
      py::object cur = py::getattr(self, "__dict__").attr("get")(name);
      if (!cur.is(value))
        fail(ErrorCode::unsupported,
             fmt::format("{}.{}: a sub-cell cannot be replaced once registered (assign it once, in __init__)",
                         type_name(self), name));
    } else {
      c->register_cell(name, child);
    }
  }
  (*object_setattr)(self, name, value);
}

// Cell.__getattr__ (only for names normal lookup misses): the current value of the cell's own parameter, so a
// Python construct reading self.weight sees what the slot holds now (a traced value under graph mode).
py::object cell_getattr(py::object self, const std::string& name) {
  nn::Cell* c = cell_or_null(self);
  if (c != nullptr)
    if (nn::Parameter* p = own_parameter(*c, name)) return py::cast(p->value);
  throw py::attribute_error(fmt::format("'{}' object has no attribute '{}'", type_name(self), name));
}

// Cell.__call__: a Python cell runs its Python construct as any Python call; a built-in runs in C++ without the GIL.
py::object cell_call(py::object self, py::args args, py::kwargs kwargs) {
  nn::Cell& c = self.cast<nn::Cell&>();
  if (is_python_cell(c)) return self.attr("construct")(*args, **kwargs);
  if (kwargs.size() != 0)
    fail(ErrorCode::invalid_argument, fmt::format("{}: takes tensors by position, not keywords", type_name(self)));
  std::vector<Tensor> xs;
  for (size_t i = 0; i < args.size(); ++i)
    xs.push_back(as_tensor(args[i], fmt::format("{} input {}", type_name(self), i)));
  if (xs.empty())
    fail(ErrorCode::invalid_argument, fmt::format("{}: needs at least one input tensor", type_name(self)));
  Tensor out;
  {
    py::gil_scoped_release nogil;
    out = c(std::span<const Tensor>(xs));
  }
  return py::cast(out);
}

py::list parameters_and_names(py::object self, bool recurse) {
  nn::Cell& c = self.cast<nn::Cell&>();
  auto named = c.parameters_and_names(recurse);
  auto slots = c.parameter_slots(recurse);
  py::list out;
  for (size_t i = 0; i < slots.size(); ++i)
    out.append(py::make_tuple(named[i].first, wrap_slot(slots[i], named[i].first, self)));
  return out;
}

// ---- optimizers, schedules, callbacks ----------------------------------------------------------------------------

// A schedule written in Python (a subclass of LrSchedule, or any callable step -> lr wrapped by spore.nn).
class PyLrSchedule : public train::LrSchedule {
 public:
  double lr_at(int64_t step) const override {
    py::gil_scoped_acquire gil;
    py::function f = py::get_override(static_cast<const train::LrSchedule*>(this), "lr_at");
    if (!f) fail(ErrorCode::unsupported, "LrSchedule subclass defines no lr_at(step)");
    py::object r = f(step);
    double lr = 0;
    try {
      lr = r.cast<double>();
    } catch (const py::cast_error&) {
      fail(ErrorCode::invalid_argument,
           fmt::format("LrSchedule.lr_at({}) returned {}, not a number", step, type_name(r)));
    }
    if (!(lr >= 0) || lr > 1e30)
      fail(ErrorCode::invalid_argument,
           fmt::format("LrSchedule.lr_at({}) returned {}: expected a finite lr >= 0", step, lr));
    return lr;
  }
  std::string describe() const override {
    py::gil_scoped_acquire gil;
    py::function f = py::get_override(static_cast<const train::LrSchedule*>(this), "describe");
    if (!f) return "python schedule";
    return f().cast<std::string>();
  }
};

// A callback written in Python. Each hook is looked up under spore's name and MindSpore 2's (on_train_step_end, ...).
class PyCallback : public train::Callback {
 public:
  void on_train_begin(train::RunContext& c) override { hook(c, "on_train_begin", nullptr); }
  void on_epoch_begin(train::RunContext& c) override { hook(c, "on_epoch_begin", "on_train_epoch_begin"); }
  void on_step_end(train::RunContext& c) override { hook(c, "on_step_end", "on_train_step_end"); }
  void on_epoch_end(train::RunContext& c) override { hook(c, "on_epoch_end", "on_train_epoch_end"); }
  void on_train_end(train::RunContext& c) override { hook(c, "on_train_end", nullptr); }

 private:
  void hook(train::RunContext& c, const char* name, const char* alias) {
    py::gil_scoped_acquire gil;
    py::function f = py::get_override(static_cast<const train::Callback*>(this), name);
    if (!f && alias) f = py::get_override(static_cast<const train::Callback*>(this), alias);
    if (f) f(py::cast(&c, py::return_value_policy::reference));
  }
};

// Runs Python's signal handlers between steps (the training loop runs without the GIL): Ctrl-C raises
// KeyboardInterrupt out of Model.train at a step boundary.
class SignalCheck : public train::Callback {
 public:
  void on_epoch_begin(train::RunContext&) override { check(); }
  void on_step_end(train::RunContext&) override { check(); }

 private:
  static void check() {
    py::gil_scoped_acquire gil;
    if (PyErr_CheckSignals() != 0) throw py::error_already_set();
  }
};

std::unique_ptr<train::Optimizer> make_optimizer(const std::string& kind, const std::vector<std::string>& names,
                                                 const py::dict& o) {
  auto num = [&](const char* k, double dflt) { return o.contains(k) ? o[k].cast<double>() : dflt; };
  auto check = [&](const char* k, double v, double lo) {
    if (!(v >= lo) || v > 1e30)
      fail(ErrorCode::invalid_argument, fmt::format("{}: {} = {} (expected a finite value >= {})", kind, k, v, lo));
    return v;
  };
  if (names.empty()) fail(ErrorCode::invalid_argument, fmt::format("{}: no parameters to optimize", kind));
  if (kind == "sgd" || kind == "momentum") {
    train::SgdOptions s;
    s.lr = check("learning_rate", num("learning_rate", 0.01), 0);
    s.momentum = check("momentum", num("momentum", kind == "momentum" ? 0.9 : 0.0), 0);
    s.weight_decay = check("weight_decay", num("weight_decay", 0.0), 0);
    s.dampening = check("dampening", num("dampening", 0.0), 0);
    s.nesterov = o.contains("nesterov") && o["nesterov"].cast<bool>();
    return kind == "sgd" ? train::make_sgd(names, s) : train::make_momentum(names, s);
  }
  if (kind == "adam" || kind == "adamw") {
    train::AdamOptions a;
    a.lr = check("learning_rate", num("learning_rate", 1e-3), 0);
    a.beta1 = check("beta1", num("beta1", 0.9), 0);
    a.beta2 = check("beta2", num("beta2", 0.999), 0);
    a.eps = check("eps", num("eps", 1e-8), 0);
    a.weight_decay = check("weight_decay", num("weight_decay", kind == "adamw" ? 1e-2 : 0.0), 0);
    if (a.beta1 >= 1 || a.beta2 >= 1)
      fail(ErrorCode::invalid_argument, fmt::format("{}: beta1 and beta2 must be below 1", kind));
    return kind == "adam" ? train::make_adam(names, a) : train::make_adamw(names, a);
  }
  fail(ErrorCode::invalid_argument, fmt::format("unknown optimizer '{}' (sgd, momentum, adam, adamw)", kind));
}

// ---- the training model ------------------------------------------------------------------------------------------

// train::Model over Python-held objects: the net, the loss and the optimizer stay alive as long as the model.
struct PyModel {
  py::object net_ref, loss_ref, opt_ref;
  std::unique_ptr<train::Model> model;
};

std::unique_ptr<PyModel> make_model(py::object net, py::object loss, py::object opt, std::vector<std::string> metrics,
                                    const std::string& mode, int64_t grad_accumulation, double clip_norm, uint64_t seed,
                                    const std::string& amp_level, DType amp_dtype, const py::dict& loss_scale) {
  if (!py::isinstance<nn::Cell>(net))
    fail(ErrorCode::invalid_argument, fmt::format("Model: network must be a spore.nn.Cell, got {}", type_name(net)));
  if (!py::isinstance<train::Optimizer>(opt))
    fail(ErrorCode::invalid_argument,
         fmt::format("Model: optimizer must be a spore.nn optimizer (Momentum, SGD, Adam, AdamWeightDecay), got {}",
                     type_name(opt)));
  train::LossFn fn;
  if (py::isinstance<nn::Cell>(loss)) {
    fn = train::loss_of(loss.cast<nn::Cell&>());
  } else if (PyCallable_Check(loss.ptr())) {
    fn = [loss](const Tensor& logits, const Tensor& labels) {
      py::gil_scoped_acquire gil;
      py::object r = loss(py::cast(logits), py::cast(labels));
      if (!py::isinstance<Tensor>(r))
        fail(ErrorCode::invalid_argument, fmt::format("Model: loss_fn returned {}, not a spore.Tensor", type_name(r)));
      return r.cast<Tensor>();
    };
  } else {
    fail(ErrorCode::invalid_argument,
         fmt::format("Model: loss_fn must be a loss cell or a function (logits, labels) -> tensor, got {}",
                     type_name(loss)));
  }
  train::ModelOptions mo;
  mo.mode = mode;
  mo.grad_accumulation = grad_accumulation;
  mo.clip_norm = clip_norm;
  mo.seed = seed;
  mo.amp_level = amp_level;
  mo.amp_dtype = amp_dtype;
  if (loss_scale.contains("kind")) mo.loss_scale.kind = loss_scale["kind"].cast<std::string>();
  if (loss_scale.contains("scale")) mo.loss_scale.scale = loss_scale["scale"].cast<double>();
  if (loss_scale.contains("factor")) mo.loss_scale.factor = loss_scale["factor"].cast<double>();
  if (loss_scale.contains("window")) mo.loss_scale.window = loss_scale["window"].cast<int64_t>();
  if (loss_scale.contains("drop_overflow_update"))
    mo.loss_scale.drop_overflow_update = loss_scale["drop_overflow_update"].cast<bool>();
  auto p = std::make_unique<PyModel>();
  p->net_ref = net;
  p->loss_ref = loss;
  p->opt_ref = opt;
  p->model = std::make_unique<train::Model>(net.cast<nn::Cell&>(), std::move(fn), opt.cast<train::Optimizer&>(),
                                            std::move(metrics), mo);
  return p;
}

const data::Dataset& as_dataset(py::handle d, const char* what) {
  if (!py::isinstance<data::Dataset>(d))
    fail(ErrorCode::invalid_argument,
         fmt::format("Model.{}: expected a spore.dataset dataset (NumpySlicesDataset, GeneratorDataset, ...), got {}",
                     what, type_name(d)));
  return d.cast<const data::Dataset&>();
}

void model_train(PyModel& m, int64_t epochs, py::object ds, py::object callbacks, py::object eval_ds) {
  if (epochs < 1) fail(ErrorCode::invalid_argument, fmt::format("Model.train: epoch {} (at least 1)", epochs));
  const data::Dataset& train_ds = as_dataset(ds, "train");
  const data::Dataset* eval = eval_ds.is_none() ? nullptr : &as_dataset(eval_ds, "train (valid_dataset)");
  std::vector<std::shared_ptr<train::Callback>> cbs;
  if (!callbacks.is_none()) {
    py::list items = py::isinstance<train::Callback>(callbacks) ? py::list() : py::list(callbacks);
    if (py::isinstance<train::Callback>(callbacks)) items.append(callbacks);
    for (size_t i = 0; i < items.size(); ++i) {
      if (!py::isinstance<train::Callback>(items[i]))
        fail(ErrorCode::invalid_argument,
             fmt::format("Model.train: callbacks[{}] is a {}, not a spore.train.Callback", i, type_name(items[i])));
      cbs.push_back(items[i].cast<std::shared_ptr<train::Callback>>());
    }
  }
  cbs.push_back(std::make_shared<SignalCheck>());
  py::gil_scoped_release nogil;
  m.model->train(epochs, train_ds, std::move(cbs), eval);
}

// ---- export ------------------------------------------------------------------------------------------------------

// (dtype, dims) per input; a dim is an int or a symbol name.
py::dict export_cell(nn::Cell& net, const std::vector<std::pair<DType, std::vector<py::object>>>& inputs,
                     const std::vector<std::string>& names, const std::string& path) {
  train::ExportSpec spec;
  for (size_t i = 0; i < inputs.size(); ++i) {
    std::vector<spore::Dim> dims;
    for (const py::object& d : inputs[i].second) {
      if (py::isinstance<py::str>(d)) {
        const std::string s = d.cast<std::string>();
        if (s.empty()) fail(ErrorCode::invalid_argument, fmt::format("export: input {} has an empty symbol name", i));
        dims.push_back(spore::Dim::symbol(s));
      } else if (py::isinstance<py::int_>(d) && !py::isinstance<py::bool_>(d) && d.cast<int64_t>() >= 0) {
        dims.push_back(spore::Dim(d.cast<int64_t>()));
      } else {
        fail(ErrorCode::invalid_argument,
             fmt::format("export: input {} has a dim {} (expected a size >= 0 or a symbol name)", i,
                         std::string(py::repr(d))));
      }
    }
    spec.inputs.emplace_back(inputs[i].first, std::move(dims));
  }
  spec.input_names = names;
  std::unique_ptr<spore::Graph> g;
  {
    py::gil_scoped_release nogil;
    g = train::export_graph(net, spec);
    spore::io::save_model(*g, path, {{"exported_by", "spore.export"}});
  }
  const train::GraphSummary s = train::summarize(*g);
  py::dict d;
  d["path"] = path;
  d["ops"] = s.ops;
  d["params"] = s.params;
  d["weight_bytes"] = s.weight_bytes;
  d["file_bytes"] = static_cast<int64_t>(std::filesystem::file_size(path));
  return d;
}

py::tuple labeled(const data::LabeledData& d) { return py::make_tuple(d.x, d.y); }

}  // namespace

namespace spore_py {

void bind_nn_train(py::module_& m) {
  // ---- cells and parameters
  py::class_<PyParameter>(m, "Parameter",
                          "A trainable tensor (or a buffer, requires_grad=False). Assigned to a cell attribute, it is "
                          "adopted by the cell: this object then refers to the cell's slot")
      .def(py::init(&make_parameter), py::arg("data"), py::arg("name") = "", py::arg("requires_grad") = true)
      .def_property_readonly("name", [](const PyParameter& p) { return p.name; })
      .def_property(
          "requires_grad", [](const PyParameter& p) { return p.get().requires_grad; },
          [](PyParameter& p, bool v) {
            if (v && !spore::is_floating(p.get().value.dtype()))
              fail(ErrorCode::dtype_mismatch, fmt::format("Parameter '{}': only floating parameters can "
                                                          "require gradients",
                                                          p.name));
            p.get().requires_grad = v;
          })
      .def_property(
          "data", [](const PyParameter& p) { return p.get().value; },
          [](PyParameter& p, py::object v) { set_parameter_data(p.get(), v, p.name); })
      .def(
          "set_data", [](PyParameter& p, py::object v) { set_parameter_data(p.get(), v, p.name); }, py::arg("data"),
          "Replaces the value (same shape and dtype), copying it")
      .def(
          "_swap",
          [](PyParameter& p, const Tensor& v) {
            Tensor old = p.get().value;
            p.get().value = v;
            return old;
          },
          py::arg("value"),
          "Puts `value` in the slot as it is (no check, no copy) and returns what was there (spore.jit)")
      .def_property_readonly("shape", [](const PyParameter& p) { return py::tuple(py::cast(p.get().value.shape())); })
      .def_property_readonly("dtype", [](const PyParameter& p) { return p.get().value.dtype(); })
      .def("numpy", [](const PyParameter& p) { return py::cast(p.get().value).attr("numpy")(); })
      .def("__repr__", [](const PyParameter& p) {
        return fmt::format("Parameter(name='{}', shape={}, dtype={}, requires_grad={})", p.name,
                           spore::shape_str(p.get().value.shape()), spore::dtype_name(p.get().value.dtype()),
                           p.get().requires_grad ? "True" : "False");
      });

  py::class_<nn::Cell, PyCell>(m, "Cell",
                               "The base of layers and models (MindSpore's nn.Cell): subclass it, call "
                               "super().__init__(), assign sub-cells and spore.Parameter objects as attributes, and "
                               "define construct(self, *inputs)")
      .def(py::init<>())
      .def("__setattr__", &cell_setattr)
      .def("__getattr__", &cell_getattr)
      .def("__call__", &cell_call)
      .def("construct",
           [](py::object self, py::args args) {
             // Only a built-in reaches this (a Python cell's own construct shadows it).
             return cell_call(self, args, py::kwargs());
           })
      .def("parameters_and_names", &parameters_and_names, py::arg("recurse") = true,
           "(dotted name, Parameter) for every parameter and buffer, in registration order")
      .def(
          "get_parameters",
          [](py::object self, bool recurse) {
            py::list out;
            for (auto item : parameters_and_names(self, recurse)) out.append(item.cast<py::tuple>()[1]);
            return out;
          },
          py::arg("recurse") = true)
      .def(
          "trainable_params",
          [](py::object self, bool recurse) {
            py::list out;
            for (auto item : parameters_and_names(self, recurse)) {
              py::object p = item.cast<py::tuple>()[1];
              if (p.cast<PyParameter&>().get().requires_grad) out.append(p);
            }
            return out;
          },
          py::arg("recurse") = true)
      .def(
          "cells_and_names",
          [](py::object self) {
            py::list out;
            for (auto& [n, c] : self.cast<nn::Cell&>().cells_and_names())
              out.append(py::make_tuple(n, py::cast(c, py::return_value_policy::reference_internal, self)));
            return out;
          },
          "(name, cell) of the direct sub-cells")
      .def(
          "set_train",
          [](py::object self, bool mode) {
            self.cast<nn::Cell&>().set_train(mode);
            return self;
          },
          py::arg("mode") = true,
          "Training (Dropout active, BatchNorm on batch statistics) or inference mode; returns self")
      .def_property_readonly("training", &nn::Cell::training)
      .def(
          "to_float",
          [](py::object self, DType t) {
            if (!spore::is_floating(t)) fail(ErrorCode::dtype_mismatch, "Cell.to_float: a floating dtype");
            self.cast<nn::Cell&>().to(t);
            return self;
          },
          py::arg("dtype"), "Converts floating parameters and buffers to dtype in place; returns self")
      .def("num_parameters", &nn::Cell::num_parameters, py::arg("trainable_only") = false);

  // Built-in layers. Defaults follow spore's C++ API (PyTorch's): Dense/Conv2d have a bias, Conv2d pads `padding`
  // explicitly unless pad_mode is "same" or "valid".
  py::class_<nn::Dense, nn::Cell>(m, "Dense")
      .def(py::init([](int64_t in, int64_t out, bool has_bias, std::optional<std::string> act, DType dt) {
             return std::make_unique<nn::Dense>(in, out, has_bias, act.value_or(""), dt);
           }),
           py::arg("in_channels"), py::arg("out_channels"), py::arg("has_bias") = true,
           py::arg("activation") = py::none(), py::arg("dtype") = DType::f32);
  py::class_<nn::Conv2d, nn::Cell>(m, "Conv2d")
      .def(py::init([](int64_t in, int64_t out, int64_t k, int64_t stride, const std::string& pad_mode, int64_t padding,
                       int64_t dilation, int64_t group, bool has_bias, DType dt) {
             nn::Conv2dConfig c;
             c.stride = stride;
             c.pad_mode = pad_mode;
             c.padding = padding;
             c.dilation = dilation;
             c.groups = group;
             c.has_bias = has_bias;
             return std::make_unique<nn::Conv2d>(in, out, k, c, dt);
           }),
           py::arg("in_channels"), py::arg("out_channels"), py::arg("kernel_size"), py::arg("stride") = 1,
           py::arg("pad_mode") = "pad", py::arg("padding") = 0, py::arg("dilation") = 1, py::arg("group") = 1,
           py::arg("has_bias") = true, py::arg("dtype") = DType::f32);
  py::class_<nn::Conv2dTranspose, nn::Cell>(m, "Conv2dTranspose")
      .def(py::init([](int64_t in, int64_t out, int64_t k, int64_t stride, int64_t padding, int64_t output_padding,
                       int64_t dilation, int64_t group, bool has_bias, DType dt) {
             nn::Conv2dTransposeConfig c;
             c.stride = stride;
             c.padding = padding;
             c.output_padding = output_padding;
             c.dilation = dilation;
             c.groups = group;
             c.has_bias = has_bias;
             return std::make_unique<nn::Conv2dTranspose>(in, out, k, c, dt);
           }),
           py::arg("in_channels"), py::arg("out_channels"), py::arg("kernel_size"), py::arg("stride") = 1,
           py::arg("padding") = 0, py::arg("output_padding") = 0, py::arg("dilation") = 1, py::arg("group") = 1,
           py::arg("has_bias") = true, py::arg("dtype") = DType::f32);
  py::class_<nn::ReLU, nn::Cell>(m, "ReLU").def(py::init<>());
  py::class_<nn::GELU, nn::Cell>(m, "GELU").def(py::init<bool>(), py::arg("approximate") = false);
  py::class_<nn::SiLU, nn::Cell>(m, "SiLU").def(py::init<>());
  py::class_<nn::Tanh, nn::Cell>(m, "Tanh").def(py::init<>());
  py::class_<nn::Sigmoid, nn::Cell>(m, "Sigmoid").def(py::init<>());
  py::class_<nn::Softmax, nn::Cell>(m, "Softmax").def(py::init<int64_t>(), py::arg("axis") = -1);
  py::class_<nn::MaxPool2d, nn::Cell>(m, "MaxPool2d")
      .def(py::init<int64_t, int64_t, std::string, int64_t>(), py::arg("kernel_size") = 1, py::arg("stride") = 0,
           py::arg("pad_mode") = "valid", py::arg("padding") = 0, "stride 0: the kernel size");
  py::class_<nn::AvgPool2d, nn::Cell>(m, "AvgPool2d")
      .def(py::init<int64_t, int64_t, std::string, int64_t>(), py::arg("kernel_size") = 1, py::arg("stride") = 0,
           py::arg("pad_mode") = "valid", py::arg("padding") = 0, "stride 0: the kernel size");
  py::class_<nn::AdaptiveAvgPool2d, nn::Cell>(m, "AdaptiveAvgPool2d")
      .def(py::init([](py::object size) {
             if (py::isinstance<py::int_>(size)) return std::make_unique<nn::AdaptiveAvgPool2d>(size.cast<int64_t>());
             auto hw = size.cast<std::pair<int64_t, int64_t>>();
             return std::make_unique<nn::AdaptiveAvgPool2d>(hw.first, hw.second);
           }),
           py::arg("output_size") = 1);
  py::class_<nn::Flatten, nn::Cell>(m, "Flatten").def(py::init<int64_t>(), py::arg("axis") = 1);
  py::class_<nn::Dropout, nn::Cell>(m, "Dropout")
      .def(py::init([](double p, std::optional<uint64_t> seed) {
             if (!(p >= 0 && p < 1))
               fail(ErrorCode::invalid_argument, fmt::format("Dropout: p = {} (expected 0 <= p < 1)", p));
             return std::make_unique<nn::Dropout>(p, seed);
           }),
           py::arg("p") = 0.5, py::arg("seed") = py::none());
  py::class_<nn::BatchNorm, nn::Cell>(m, "_BatchNorm");
  py::class_<nn::BatchNorm1d, nn::BatchNorm>(m, "BatchNorm1d")
      .def(py::init<int64_t, double, double, DType>(), py::arg("num_features"), py::arg("eps") = 1e-5,
           py::arg("momentum") = 0.9, py::arg("dtype") = DType::f32);
  py::class_<nn::BatchNorm2d, nn::BatchNorm>(m, "BatchNorm2d")
      .def(py::init<int64_t, double, double, DType>(), py::arg("num_features"), py::arg("eps") = 1e-5,
           py::arg("momentum") = 0.9, py::arg("dtype") = DType::f32);
  py::class_<nn::LayerNorm, nn::Cell>(m, "LayerNorm")
      .def(py::init([](py::object shape, double eps, bool affine, DType dt) {
             std::vector<int64_t> s = py::isinstance<py::int_>(shape) ? std::vector<int64_t>{shape.cast<int64_t>()}
                                                                      : shape.cast<std::vector<int64_t>>();
             return std::make_unique<nn::LayerNorm>(s, eps, affine, dt);
           }),
           py::arg("normalized_shape"), py::arg("epsilon") = 1e-5, py::arg("elementwise_affine") = true,
           py::arg("dtype") = DType::f32);
  py::class_<nn::RMSNorm, nn::Cell>(m, "RMSNorm")
      .def(py::init<int64_t, double, DType>(), py::arg("dim"), py::arg("eps") = 1e-6, py::arg("dtype") = DType::f32);
  py::class_<nn::Embedding, nn::Cell>(m, "Embedding")
      .def(py::init<int64_t, int64_t, DType>(), py::arg("vocab_size"), py::arg("embedding_size"),
           py::arg("dtype") = DType::f32);
  py::class_<nn::RnnBase, nn::Cell>(m, "_Rnn").def(
      "forward",
      [](nn::RnnBase& r, const Tensor& x, std::optional<Tensor> h0, std::optional<Tensor> c0) {
        nn::RnnOutput o;
        {
          py::gil_scoped_release nogil;
          o = r.forward(x, h0.value_or(Tensor()), c0.value_or(Tensor()));
        }
        return py::make_tuple(o.output, o.h_n, o.c_n.defined() ? py::cast(o.c_n) : py::object(py::none()));
      },
      py::arg("x"), py::arg("h0") = py::none(), py::arg("c0") = py::none(),
      "(output, h_n, c_n) (c_n None for GRU); calling the cell gives the output alone");
  py::class_<nn::LSTM, nn::RnnBase>(m, "LSTM").def(py::init<int64_t, int64_t, int64_t, bool, bool, DType>(),
                                                   py::arg("input_size"), py::arg("hidden_size"),
                                                   py::arg("num_layers") = 1, py::arg("has_bias") = true,
                                                   py::arg("batch_first") = false, py::arg("dtype") = DType::f32);
  py::class_<nn::GRU, nn::RnnBase>(m, "GRU").def(py::init<int64_t, int64_t, int64_t, bool, bool, DType>(),
                                                 py::arg("input_size"), py::arg("hidden_size"),
                                                 py::arg("num_layers") = 1, py::arg("has_bias") = true,
                                                 py::arg("batch_first") = false, py::arg("dtype") = DType::f32);
  py::class_<nn::MultiHeadAttention, nn::Cell>(m, "MultiHeadAttention")
      .def(py::init<int64_t, int64_t, bool, DType>(), py::arg("embed_dim"), py::arg("num_heads"),
           py::arg("has_bias") = true, py::arg("dtype") = DType::f32);
  py::class_<nn::TransformerEncoderLayer, nn::Cell>(m, "TransformerEncoderLayer")
      .def(py::init<int64_t, int64_t, int64_t, double, std::string, bool, double, DType>(), py::arg("d_model"),
           py::arg("nhead"), py::arg("dim_feedforward") = 2048, py::arg("dropout") = 0.1,
           py::arg("activation") = "relu", py::arg("norm_first") = false, py::arg("layer_norm_eps") = 1e-5,
           py::arg("dtype") = DType::f32);

  // Losses (called with (prediction, target)).
  py::class_<nn::LossBase, nn::Cell>(m, "LossBase").def_property_readonly("reduction", &nn::LossBase::reduction);
  py::class_<nn::SoftmaxCrossEntropyWithLogits, nn::LossBase>(m, "SoftmaxCrossEntropyWithLogits")
      .def(py::init<bool, std::string, double>(), py::arg("sparse") = false, py::arg("reduction") = "none",
           py::arg("label_smoothing") = 0.0);
  py::class_<nn::MSELoss, nn::LossBase>(m, "MSELoss").def(py::init<std::string>(), py::arg("reduction") = "mean");
  py::class_<nn::L1Loss, nn::LossBase>(m, "L1Loss").def(py::init<std::string>(), py::arg("reduction") = "mean");
  py::class_<nn::SmoothL1Loss, nn::LossBase>(m, "SmoothL1Loss")
      .def(py::init<double, std::string>(), py::arg("beta") = 1.0, py::arg("reduction") = "mean");
  py::class_<nn::BCEWithLogitsLoss, nn::LossBase>(m, "BCEWithLogitsLoss")
      .def(py::init<std::string>(), py::arg("reduction") = "mean");
  py::class_<nn::NLLLoss, nn::LossBase>(m, "NLLLoss").def(py::init<std::string>(), py::arg("reduction") = "mean");

  m.def(
      "set_seed", [](uint64_t s) { nn::set_seed(s); }, py::arg("seed"),
      "Seeds the initial weights (every layer made after it draws from this stream) and unseeded Dropout");

  // ---- optimizers and schedules
  py::class_<train::LrSchedule, PyLrSchedule, std::shared_ptr<train::LrSchedule>>(
      m, "LrSchedule", "A learning rate per (0-based) step; subclass it and define lr_at(step)")
      .def(py::init<>())
      .def("lr_at", &train::LrSchedule::lr_at, py::arg("step"))
      .def("describe", &train::LrSchedule::describe);
  m.def("_constant_lr", &train::constant_lr);
  m.def("_step_lr", &train::step_lr);
  m.def("_exponential_lr", &train::exponential_lr);
  m.def("_cosine_lr", &train::cosine_lr);
  m.def("_warmup_lr", &train::warmup_lr);

  py::class_<train::Optimizer>(m, "Optimizer", py::dynamic_attr(),
                               "Made by spore.nn.SGD / Momentum / Adam / AdamWeightDecay")
      .def_property_readonly("name", &train::Optimizer::name)
      .def_property_readonly("param_names", &train::Optimizer::param_names)
      .def("lr_at", &train::Optimizer::lr_at, py::arg("step"))
      .def("set_schedule", &train::Optimizer::set_schedule, py::arg("schedule"));
  m.def("_make_optimizer", &make_optimizer, py::arg("kind"), py::arg("names"), py::arg("options"));

  // ---- callbacks
  py::class_<train::RunContext>(m, "RunContext", "What a callback sees (MindSpore's run_context and cb_params)")
      .def_readonly("epoch", &train::RunContext::epoch, "0-based epoch being run")
      .def_readonly("epochs", &train::RunContext::epochs)
      .def_readonly("batch", &train::RunContext::batch, "0-based batch within the epoch")
      .def_readonly("batches_per_epoch", &train::RunContext::batches_per_epoch)
      .def_readonly("step", &train::RunContext::step, "optimizer steps taken so far")
      .def_readonly("batch_size", &train::RunContext::batch_size)
      .def_readonly("loss", &train::RunContext::loss, "the last batch's loss")
      .def_readonly("lr", &train::RunContext::lr)
      .def_readonly("loss_scale", &train::RunContext::loss_scale, "loss scaling: the scale the next step uses")
      .def_readonly("overflow", &train::RunContext::overflow, "loss scaling: the last step overflowed (was skipped)")
      .def_property_readonly("metrics", [](const train::RunContext& c) { return c.metrics; })
      .def_readwrite("stop", &train::RunContext::stop, "set True to end training after this step")
      .def("request_stop", [](train::RunContext& c) { c.stop = true; })
      .def(
          "original_args", [](py::object self) { return self; }, "self (MindSpore's cb_params)")
      .def_property_readonly("cur_epoch_num", [](const train::RunContext& c) { return c.epoch + 1; })
      .def_property_readonly("cur_step_num", [](const train::RunContext& c) { return c.step; })
      .def_property_readonly("net_outputs", [](const train::RunContext& c) { return c.loss; });

  py::class_<train::Callback, PyCallback, std::shared_ptr<train::Callback>>(
      m, "Callback",
      "Hooks around training: on_train_begin, on_epoch_begin, on_step_end, on_epoch_end, on_train_end (each takes a "
      "RunContext; MindSpore 2's on_train_epoch_begin / on_train_step_end / on_train_epoch_end work too)")
      .def(py::init<>());
  py::class_<train::LossMonitor, train::Callback, std::shared_ptr<train::LossMonitor>>(m, "LossMonitor")
      .def(py::init([](int64_t every) { return std::make_shared<train::LossMonitor>(every); }),
           py::arg("per_print_times") = 1);
  py::class_<train::TimeMonitor, train::Callback, std::shared_ptr<train::TimeMonitor>>(m, "TimeMonitor")
      .def(py::init([] { return std::make_shared<train::TimeMonitor>(); }));
  py::class_<train::ProgressBar, train::Callback, std::shared_ptr<train::ProgressBar>>(m, "ProgressBar")
      .def(py::init([](int64_t every) { return std::make_shared<train::ProgressBar>(nullptr, every); }),
           py::arg("plain_every") = 50);
  py::class_<train::ModelCheckpoint, train::Callback, std::shared_ptr<train::ModelCheckpoint>>(m, "ModelCheckpoint")
      .def(py::init<std::string, int64_t, int64_t, int64_t, std::string>(), py::arg("directory"),
           py::arg("save_checkpoint_steps") = 0, py::arg("save_checkpoint_epochs") = 1,
           py::arg("keep_checkpoint_max") = 0, py::arg("prefix") = "ckpt")
      .def_property_readonly("saved", [](const train::ModelCheckpoint& c) {
        return std::vector<std::string>(c.saved().begin(), c.saved().end());
      });
  py::class_<train::EarlyStopping, train::Callback, std::shared_ptr<train::EarlyStopping>>(m, "EarlyStopping")
      .def(py::init<std::string, int64_t, double, std::string>(), py::arg("monitor") = "loss", py::arg("patience") = 3,
           py::arg("min_delta") = 0.0, py::arg("mode") = "min")
      .def_property_readonly("stopped_epoch", &train::EarlyStopping::stopped_epoch);

  // ---- data
  py::class_<data::Dataset>(m, "Dataset",
                            "A deterministic input pipeline: samples x[i], y[i]; shuffle, per-sample transforms, "
                            "batch and repeat, every random choice keyed by (seed, epoch, sample)")
      .def_static(
          "from_tensors",
          [](const Tensor& x, std::optional<Tensor> y) { return data::Dataset::from_tensors(x, y.value_or(Tensor())); },
          py::arg("x"), py::arg("y") = py::none())
      .def("shuffle", &data::Dataset::shuffle, py::arg("seed"))
      .def("seed", &data::Dataset::seed, py::arg("seed"))
      .def(
          "batch",
          [](const data::Dataset& d, int64_t size, bool drop) {
            if (size < 1) fail(ErrorCode::invalid_argument, fmt::format("batch: size {} (at least 1)", size));
            return d.batch(size, drop);
          },
          py::arg("batch_size"), py::arg("drop_remainder") = false)
      .def("repeat", &data::Dataset::repeat, py::arg("count") = -1)
      .def("prefetch", &data::Dataset::prefetch, py::arg("depth"))
      .def(
          "normalize",
          [](const data::Dataset& d, std::vector<float> mean, std::vector<float> std) {
            return d.map(data::transforms::normalize(std::move(mean), std::move(std)));
          },
          py::arg("mean"), py::arg("std"), "x -> (x - mean[c]) / std[c] per sample ([C, ...])")
      .def(
          "random_crop",
          [](const data::Dataset& d, int64_t h, int64_t w, int64_t pad) {
            return d.map(data::transforms::random_crop(h, w, pad));
          },
          py::arg("height"), py::arg("width"), py::arg("padding") = 0)
      .def(
          "random_flip_horizontal",
          [](const data::Dataset& d, float p) { return d.map(data::transforms::random_flip_horizontal(p)); },
          py::arg("p") = 0.5f)
      .def("get_dataset_size", &data::Dataset::batches_per_epoch, "batches per epoch")
      .def_property_readonly("num_samples", &data::Dataset::size)
      .def("_batch_at", [](const data::Dataset& d, int64_t epoch, int64_t b) {
        if (b < 0 || b >= d.batches_per_epoch())
          fail(ErrorCode::invalid_argument, fmt::format("batch {} of {}", b, d.batches_per_epoch()));
        data::Batch bt;
        {
          py::gil_scoped_release nogil;
          bt = d.make_batch(epoch, b);
        }
        return py::make_tuple(bt.x, bt.y.defined() ? py::cast(bt.y) : py::object(py::none()));
      });
  m.def(
      "_load_digits", [](const std::string& p) { return labeled(data::load_digits(p)); }, py::arg("path"));
  m.def(
      "_load_mnist",
      [](const std::string& dir, const std::string& split) { return labeled(data::load_mnist(dir, split)); },
      py::arg("directory"), py::arg("split") = "t10k");
  m.def(
      "_load_dataset_spec",
      [](const std::string& spec, int64_t limit_train, int64_t limit_test) {
        const train::TrainTestSplit s = train::load_dataset_spec(spec, limit_train, limit_test);
        return py::make_tuple(labeled(s.train), labeled(s.test), s.description);
      },
      py::arg("spec"), py::arg("limit_train") = 0, py::arg("limit_test") = 0);

  // ---- the training model
  py::class_<PyModel>(m, "_TrainModel")
      .def(py::init(&make_model), py::arg("network"), py::arg("loss_fn"), py::arg("optimizer"), py::arg("metrics"),
           py::arg("mode"), py::arg("grad_accumulation"), py::arg("clip_norm"), py::arg("seed"),
           py::arg("amp_level") = "O0", py::arg("amp_dtype") = DType::bf16, py::arg("loss_scale") = py::dict())
      .def("train", &model_train, py::arg("epoch"), py::arg("train_dataset"), py::arg("callbacks") = py::none(),
           py::arg("valid_dataset") = py::none())
      .def(
          "train_step",
          [](PyModel& m, const Tensor& x, const Tensor& y) {
            py::gil_scoped_release nogil;
            return m.model->train_step(x, y);
          },
          py::arg("x"), py::arg("y"))
      .def(
          "eval",
          [](PyModel& m, py::object ds) {
            const data::Dataset& d = as_dataset(ds, "eval");
            py::gil_scoped_release nogil;
            return m.model->eval(d);
          },
          py::arg("valid_dataset"))
      .def(
          "predict",
          [](PyModel& m, const Tensor& x) {
            py::gil_scoped_release nogil;
            return m.model->predict(x);
          },
          py::arg("x"))
      .def(
          "save_checkpoint",
          [](PyModel& m, const std::string& p) {
            py::gil_scoped_release nogil;
            m.model->save_checkpoint(p);
          },
          py::arg("path"))
      .def(
          "load_checkpoint",
          [](PyModel& m, const std::string& p) {
            py::gil_scoped_release nogil;
            m.model->load_checkpoint(p);
          },
          py::arg("path"))
      .def_property_readonly("global_step", [](const PyModel& m) { return m.model->global_step(); })
      .def_property_readonly("epoch", [](const PyModel& m) { return m.model->epoch(); })
      .def_property_readonly("mode", [](const PyModel& m) { return m.model->options().mode; })
      .def_property_readonly("loss_scale", [](const PyModel& m) { return m.model->loss_scale(); })
      .def_property_readonly("overflow_steps", [](const PyModel& m) { return m.model->overflow_steps(); });

  m.def(
      "_save_checkpoint",
      [](nn::Cell& net, const std::string& path) {
        py::gil_scoped_release nogil;
        train::save_checkpoint(path, net, nullptr, {}, train::CheckpointInfo{});
      },
      py::arg("network"), py::arg("path"));
  m.def(
      "_load_checkpoint",
      [](nn::Cell& net, const std::string& path) {
        py::gil_scoped_release nogil;
        return train::load_checkpoint(path, net).step;
      },
      py::arg("network"), py::arg("path"));

  // ---- context and export
  m.def("_set_context", [](const py::dict& d) {
    spore::ContextOptions o = spore::context();
    o.threads = spore::num_threads();  // set_context applies the thread count: keep the current one unless given
    for (auto [k, v] : d) {
      const std::string key = py::str(k);
      if (key == "mode") o.mode = v.cast<std::string>() == "graph" ? spore::ExecMode::graph : spore::ExecMode::pynative;
      else if (key == "deterministic") o.deterministic = v.cast<bool>();
      else if (key == "memory_optimize_level") o.memory_optimize_level = v.cast<int>();
      else if (key == "max_device_memory") o.max_device_memory = v.cast<size_t>();
      else if (key == "save_graphs") o.save_graphs = v.cast<std::string>();
      else if (key == "recompute") o.recompute = v.cast<bool>();
      else if (key == "threads") o.threads = v.cast<int>();
      else fail(ErrorCode::invalid_argument, fmt::format("set_context: unknown option '{}'", key));
    }
    spore::set_context(o);
  });
  m.def("_get_context", [] {
    const spore::ContextOptions& o = spore::context();
    py::dict d;
    d["mode"] = o.mode == spore::ExecMode::graph ? "graph" : "pynative";
    d["deterministic"] = o.deterministic;
    d["memory_optimize_level"] = o.memory_optimize_level;
    d["max_device_memory"] = o.max_device_memory;
    d["save_graphs"] = o.save_graphs;
    d["recompute"] = o.recompute;
    d["threads"] = spore::num_threads();
    return d;
  });
  m.def("_export", &export_cell, py::arg("network"), py::arg("inputs"), py::arg("names"), py::arg("path"));
}

}  // namespace spore_py
