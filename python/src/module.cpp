// The `spore._spore` extension: spore's tensors, dtypes, errors and op registry for Python (docs/PYTHON.md).
// This file knows pybind11 and the public C++ API only (runtime, ops registry, tensors); the Python-facing API
// (spore.ops functions with signatures, operators, conveniences) is written in Python on top of it (python/spore).
//
// Memory: a NumPy array or a DLPack producer wrapped as a spore tensor stays alive as long as the tensor's storage
// (Storage::wrap's release drops the reference, taking the GIL); a spore tensor given to NumPy (numpy(), the buffer
// protocol, __array__) or to DLPack keeps its storage alive through the Python object or the DLPack context.
#include <pybind11/pybind11.h>
#include <pybind11/stl.h>
#include <pybind11/numpy.h>

#include <fmt/format.h>

#include <cstring>
#include <map>
#include <mutex>
#include <optional>
#include <memory>
#include <string>
#include <vector>

#include "base/attrs.h"
#include "base/dtype.h"
#include "base/error.h"
#include "base/thread_pool.h"
#include "autodiff/autodiff.h"
#include "deploy/session.h"
#include "llm/chat_template.h"
#include "llm/generate.h"
#include "llm/model.h"
#include "ops/dispatch.h"
#include "ops/registry.h"
#include "runtime/jit.h"
#include "runtime/plugin.h"
#include "runtime/runtime.h"
#include "tensor/storage.h"
#include "tensor/tensor.h"
#include "common.h"

namespace py = pybind11;
using spore::DType;
using spore::ErrorCode;
using spore::Tensor;

namespace {

// ---- errors ------------------------------------------------------------------------------------------------------

// spore.Error and its subclasses are Python classes (spore/errors.py), one per ErrorCode; __init__.py hands them
// over with _set_error_classes before any call can fail.
std::map<std::string, py::object>& error_classes() {
  static auto* m = new std::map<std::string, py::object>();  // never destroyed: outlives interpreter teardown
  return *m;
}

void raise_spore_error(const spore::Error& e) {
  auto& m = error_classes();
  auto it = m.find(std::string(spore::error_code_name(e.code())));
  if (it == m.end()) it = m.find("");
  if (it == m.end()) {
    PyErr_SetString(PyExc_RuntimeError, e.what());
    return;
  }
  PyErr_SetString(it->second.ptr(), e.what());
}

using spore_py::fail;

// ---- dtypes ------------------------------------------------------------------------------------------------------

// NumPy's name of a dtype ("" for bf16, which NumPy lacks) and its buffer-protocol format.
const char* numpy_name(DType t) {
  switch (t) {
    case DType::f64: return "float64";
    case DType::f32: return "float32";
    case DType::f16: return "float16";
    case DType::bf16: return "";
    case DType::i64: return "int64";
    case DType::i32: return "int32";
    case DType::i8: return "int8";
    case DType::u8: return "uint8";
    case DType::boolean: return "bool";
  }
  return "";
}

const char* buffer_format(DType t) {
  switch (t) {
    case DType::f64: return "d";
    case DType::f32: return "f";
    case DType::f16: return "e";
    case DType::bf16: return "";
    case DType::i64: return "q";
    case DType::i32: return "i";
    case DType::i8: return "b";
    case DType::u8: return "B";
    case DType::boolean: return "?";
  }
  return "";
}

// A NumPy dtype as a spore dtype; a clear error naming what is not supported.
DType from_numpy_dtype(const py::dtype& d, const char* what) {
  const char kind = d.kind();
  const auto size = d.itemsize();
  if (kind == 'f' && size == 8) return DType::f64;
  if (kind == 'f' && size == 4) return DType::f32;
  if (kind == 'f' && size == 2) return DType::f16;
  if (kind == 'i' && size == 8) return DType::i64;
  if (kind == 'i' && size == 4) return DType::i32;
  if (kind == 'i' && size == 1) return DType::i8;
  if (kind == 'u' && size == 1) return DType::u8;
  if (kind == 'b' && size == 1) return DType::boolean;
  fail(ErrorCode::dtype_mismatch,
       fmt::format("{}: NumPy dtype {} has no spore dtype (float64/32/16, int64/32/8, uint8, bool; cast it first, "
                   "e.g. arr.astype(np.float32))",
                   what, std::string(py::str(static_cast<py::handle>(d)))));
}

// ---- tensors <-> NumPy -------------------------------------------------------------------------------------------

// Wraps a NumPy array's memory as a spore tensor (no copy). Strides must be non-negative multiples of the item size.
Tensor tensor_from_numpy(const py::array& a) {
  const DType dt = from_numpy_dtype(a.dtype(), "from_numpy");
  const auto nd = a.ndim();
  spore::Shape shape;
  spore::Strides strides;
  const auto item = static_cast<py::ssize_t>(spore::dtype_size(dt));
  py::ssize_t span = item;  // bytes from the first element to one past the last
  bool empty = false;
  for (py::ssize_t i = 0; i < nd; ++i) {
    const py::ssize_t n = a.shape(i), s = a.strides(i);
    if (n == 0) empty = true;
    if (s < 0 || s % item != 0)
      fail(ErrorCode::invalid_argument,
           fmt::format("from_numpy: dim {} has a stride of {} bytes (spore needs non-negative multiples of the {}-byte "
                       "item; copy it with np.ascontiguousarray)",
                       i, s, item));
    shape.push_back(n);
    strides.push_back(s / item);
    if (n > 0) span += (n - 1) * s;
  }
  if (empty) span = 0;
  if (!a.writeable())
    fail(ErrorCode::invalid_argument,
         "from_numpy: the array is read-only (spore tensors are writable views; pass arr.copy())");
  auto* keep = new py::object(a);  // released with the storage, under the GIL
  auto storage = spore::Storage::wrap(const_cast<void*>(a.data()), static_cast<size_t>(span), [keep] {
    if (!Py_IsInitialized()) return;  // the interpreter is gone: leak the reference rather than crash
    py::gil_scoped_acquire gil;
    delete keep;
  });
  return Tensor::from_storage(std::move(storage), std::move(shape), std::move(strides), 0, dt);
}

void check_host_data(const Tensor& t, const char* what) {
  if (!t.defined()) fail(ErrorCode::invalid_argument, fmt::format("{}: the tensor is undefined", what));
  if (t.is_symbolic())
    fail(ErrorCode::invalid_argument,
         fmt::format("{}: the tensor is symbolic (a value being traced has no data yet)", what));
  if (!(t.device() == spore::host_device))
    fail(ErrorCode::unsupported, fmt::format("{}: the tensor is on a device, not in host memory", what));
}

// A host tensor's shape and its strides in bytes of its own elements, as NumPy and the buffer protocol take them;
// `what` names the caller in the errors (no data, or bfloat16, which neither has a format for, unless the caller
// views the bits).
struct ByteLayout {
  py::ssize_t item = 0;
  std::vector<py::ssize_t> shape, strides;
};
ByteLayout byte_layout(const Tensor& t, const char* what, bool bf16_bits = false) {
  check_host_data(t, what);
  if (t.dtype() == DType::bf16 && !bf16_bits)
    fail(ErrorCode::dtype_mismatch,
         fmt::format("{}: NumPy and the buffer protocol have no bfloat16; convert first (t.to(spore.float32)) or "
                     "view the bits (t.view_bits())", what));
  ByteLayout l;
  l.item = static_cast<py::ssize_t>(spore::dtype_size(t.dtype()));
  for (int i = 0; i < t.rank(); ++i) {
    l.shape.push_back(t.shape()[static_cast<size_t>(i)]);
    l.strides.push_back(t.strides()[static_cast<size_t>(i)] * l.item);
  }
  return l;
}

// A NumPy view of a tensor's elements; `owner` (the Python tensor) keeps the storage alive.
py::array numpy_view(const Tensor& t, py::handle owner) {
  const ByteLayout l = byte_layout(t, "numpy");
  void* p = t.numel() == 0 ? nullptr : t.raw_data();
  return py::array(py::dtype(numpy_name(t.dtype())), l.shape, l.strides, p, owner);
}

// ---- DLPack ------------------------------------------------------------------------------------------------------
// The DLPack ABI (dmlc/dlpack, v0.x, the version torch 1.13 and NumPy 1.24 exchange): declared here from the spec.

struct DLDevice {
  int32_t device_type;  // 1 = CPU
  int32_t device_id;
};
struct DLDataType {
  uint8_t code;  // 0 int, 1 uint, 2 float, 4 bfloat, 6 bool
  uint8_t bits;
  uint16_t lanes;
};
struct DLTensor {
  void* data;
  DLDevice device;
  int32_t ndim;
  DLDataType dtype;
  int64_t* shape;
  int64_t* strides;  // in elements; may be null (compact row-major)
  uint64_t byte_offset;
};
struct DLManagedTensor {
  DLTensor dl_tensor;
  void* manager_ctx;
  void (*deleter)(DLManagedTensor* self);
};

DLDataType dl_type(DType t) {
  switch (t) {
    case DType::f64: return {2, 64, 1};
    case DType::f32: return {2, 32, 1};
    case DType::f16: return {2, 16, 1};
    case DType::bf16: return {4, 16, 1};
    case DType::i64: return {0, 64, 1};
    case DType::i32: return {0, 32, 1};
    case DType::i8: return {0, 8, 1};
    case DType::u8: return {1, 8, 1};
    case DType::boolean: return {6, 8, 1};
  }
  return {0, 0, 0};
}

DType from_dl_type(DLDataType d) {
  if (d.lanes != 1) fail(ErrorCode::dtype_mismatch, fmt::format("from_dlpack: {} lanes (vector types)", d.lanes));
  if (d.code == 2 && d.bits == 64) return DType::f64;
  if (d.code == 2 && d.bits == 32) return DType::f32;
  if (d.code == 2 && d.bits == 16) return DType::f16;
  if (d.code == 4 && d.bits == 16) return DType::bf16;
  if (d.code == 0 && d.bits == 64) return DType::i64;
  if (d.code == 0 && d.bits == 32) return DType::i32;
  if (d.code == 0 && d.bits == 8) return DType::i8;
  if (d.code == 1 && d.bits == 8) return DType::u8;
  if (d.code == 6 && d.bits == 8) return DType::boolean;
  fail(ErrorCode::dtype_mismatch,
       fmt::format("from_dlpack: DLPack type code {} with {} bits has no spore dtype", d.code, d.bits));
}

struct DlpackContext {
  Tensor tensor;  // keeps the storage alive
  std::vector<int64_t> shape, strides;
  DLManagedTensor managed{};
};

py::capsule to_dlpack(const Tensor& t) {
  check_host_data(t, "__dlpack__");
  auto* ctx = new DlpackContext{t, {}, {}, {}};
  for (int i = 0; i < t.rank(); ++i) {
    ctx->shape.push_back(t.shape()[static_cast<size_t>(i)]);
    ctx->strides.push_back(t.strides()[static_cast<size_t>(i)]);
  }
  DLTensor& d = ctx->managed.dl_tensor;
  d.data = t.numel() == 0 ? nullptr : t.raw_data();
  d.device = {1, 0};
  d.ndim = t.rank();
  d.dtype = dl_type(t.dtype());
  d.shape = ctx->shape.data();
  d.strides = ctx->strides.data();
  d.byte_offset = 0;
  ctx->managed.manager_ctx = ctx;
  ctx->managed.deleter = [](DLManagedTensor* self) { delete static_cast<DlpackContext*>(self->manager_ctx); };
  // A capsule the consumer did not take ("dltensor" still its name) is freed with it.
  return py::capsule(&ctx->managed, "dltensor", [](PyObject* cap) {
    if (!PyCapsule_IsValid(cap, "dltensor")) return;  // consumed: renamed "used_dltensor", the consumer frees it
    auto* m = static_cast<DLManagedTensor*>(PyCapsule_GetPointer(cap, "dltensor"));
    if (m && m->deleter) m->deleter(m);
  });
}

Tensor from_dlpack_capsule(py::capsule cap) {
  if (!PyCapsule_IsValid(cap.ptr(), "dltensor"))
    fail(ErrorCode::invalid_argument, "from_dlpack: not an unused DLPack capsule (named 'dltensor')");
  auto* m = static_cast<DLManagedTensor*>(PyCapsule_GetPointer(cap.ptr(), "dltensor"));
  const DLTensor& d = m->dl_tensor;
  if (d.device.device_type != 1)
    fail(ErrorCode::unsupported,
         fmt::format("from_dlpack: the tensor is on DLPack device type {} (spore reads CPU memory, type 1)",
                     d.device.device_type));
  const DType dt = from_dl_type(d.dtype);
  spore::Shape shape;
  spore::Strides strides(static_cast<size_t>(d.ndim));
  int64_t expect = 1, span = 1;
  bool empty = false;
  for (int i = 0; i < d.ndim; ++i) shape.push_back(d.shape[i]);
  for (int i = d.ndim - 1; i >= 0; --i) {
    const int64_t s = d.strides ? d.strides[i] : expect;
    if (s < 0) fail(ErrorCode::invalid_argument, fmt::format("from_dlpack: dim {} has a negative stride", i));
    strides[static_cast<size_t>(i)] = s;
    expect *= shape[static_cast<size_t>(i)];
    if (shape[static_cast<size_t>(i)] == 0) empty = true;
    else span += (shape[static_cast<size_t>(i)] - 1) * s;
  }
  const size_t bytes = empty ? 0 : static_cast<size_t>(span) * spore::dtype_size(dt);
  auto* data = static_cast<uint8_t*>(d.data) + d.byte_offset;
  PyCapsule_SetName(cap.ptr(), "used_dltensor");  // the producer no longer frees it: the storage's release does
  auto storage = spore::Storage::wrap(data, bytes, [m] {
    if (m->deleter == nullptr) return;
    if (!Py_IsInitialized()) return;
    py::gil_scoped_acquire gil;  // producers (torch) may touch Python objects when freeing
    m->deleter(m);
  });
  return Tensor::from_storage(std::move(storage), std::move(shape), std::move(strides), 0, dt);
}

// ---- attributes --------------------------------------------------------------------------------------------------

spore::AttrValue to_attr(const spore::AttrSpec& spec, py::handle v, const std::string& op) {
  const std::string where = fmt::format("{}: attribute '{}'", op, spec.name);
  try {
    switch (spec.kind) {
      case spore::AttrKind::i64:
        if (py::isinstance<py::bool_>(v) || !py::isinstance<py::int_>(v)) break;
        return v.cast<int64_t>();
      case spore::AttrKind::f64:
        if (py::isinstance<py::bool_>(v) || !(py::isinstance<py::float_>(v) || py::isinstance<py::int_>(v))) break;
        return v.cast<double>();
      case spore::AttrKind::boolean:
        if (!py::isinstance<py::bool_>(v)) break;
        return v.cast<bool>();
      case spore::AttrKind::str:
        if (!py::isinstance<py::str>(v)) break;
        return v.cast<std::string>();
      case spore::AttrKind::dtype:
        if (py::isinstance<DType>(v)) return v.cast<DType>();
        if (py::isinstance<py::str>(v)) {
          if (auto d = spore::parse_dtype(v.cast<std::string>())) return *d;
          fail(ErrorCode::invalid_argument, fmt::format("{}: unknown dtype '{}'", where, v.cast<std::string>()));
        }
        break;
      case spore::AttrKind::i64s: {
        if (py::isinstance<py::str>(v) || !py::isinstance<py::sequence>(v)) {
          if (py::isinstance<py::int_>(v) && !py::isinstance<py::bool_>(v))
            return std::vector<int64_t>{v.cast<int64_t>()};
          break;
        }
        std::vector<int64_t> out;
        for (py::handle x : v) {
          if (py::isinstance<py::bool_>(x) || !py::isinstance<py::int_>(x))
            fail(ErrorCode::invalid_argument, fmt::format("{}: expects a list of ints, got an element of type {}",
                                                          where, std::string(py::str(py::type::of(x).attr("__name__")))));
          out.push_back(x.cast<int64_t>());
        }
        return out;
      }
      case spore::AttrKind::f64s: {
        if (py::isinstance<py::str>(v) || !py::isinstance<py::sequence>(v)) break;
        std::vector<double> out;
        for (py::handle x : v) {
          if (py::isinstance<py::bool_>(x) || !(py::isinstance<py::float_>(x) || py::isinstance<py::int_>(x)))
            fail(ErrorCode::invalid_argument, fmt::format("{}: expects a list of numbers", where));
          out.push_back(x.cast<double>());
        }
        return out;
      }
    }
  } catch (const py::cast_error&) {
  }
  fail(ErrorCode::invalid_argument,
       fmt::format("{}: expects {}, got {}", where, spore::attr_kind_name(spec.kind),
                   std::string(py::str(py::type::of(v).attr("__name__")))));
}

py::object from_attr(const spore::AttrValue& v) {
  return std::visit([](const auto& x) -> py::object { return py::cast(x); }, v);
}

// Calls op `name` on tensors with keyword attributes (checked against the schema); returns a list of outputs.
std::vector<Tensor> op_call(const std::string& name, const std::vector<Tensor>& inputs, const py::dict& attrs) {
  const spore::OpDef* def = spore::op_registry().find(name);
  if (def == nullptr) fail(ErrorCode::not_found, fmt::format("unknown op '{}'", name));
  spore::Attrs a;
  for (auto [k, v] : attrs) {
    const std::string key = py::str(k);
    if (v.is_none()) continue;  // None: the schema's default
    const spore::AttrSpec* spec = nullptr;
    for (const auto& s : def->attrs)
      if (s.name == key) spec = &s;
    if (spec == nullptr) {
      std::string known;
      for (const auto& s : def->attrs) known += (known.empty() ? "" : ", ") + s.name;
      fail(ErrorCode::invalid_argument, fmt::format("{}: no attribute '{}' (it has: {})", name, key,
                                                    known.empty() ? "none" : known));
    }
    a.set(key, to_attr(*spec, v, name));
  }
  for (size_t i = 0; i < inputs.size(); ++i)
    if (!inputs[i].defined())
      fail(ErrorCode::invalid_argument, fmt::format("{}: input {} is undefined", name, i));
  const int n = static_cast<int>(inputs.size());
  if (n < def->min_inputs || (def->max_inputs >= 0 && n > def->max_inputs))
    fail(ErrorCode::invalid_argument,
         fmt::format("{}: takes {} inputs, got {}", name,
                     def->max_inputs < 0                 ? fmt::format("at least {}", def->min_inputs)
                     : def->min_inputs == def->max_inputs ? fmt::format("{}", def->min_inputs)
                                                          : fmt::format("{} to {}", def->min_inputs, def->max_inputs),
                     n));
  py::gil_scoped_release nogil;
  return spore::ops::call(def->id, inputs, a);
}

// ---- the hot path of spore.ops and the operators -----------------------------------------------------------------
// `_op_index(name)` gives an op a small index once; `_fast_call(index, *tensors)` then calls it with no attributes
// (the schema's defaults) through CPython's vectorcall convention, without pybind11's per-argument type lookups and
// Tensor list copies: the arguments' type is compared with Tensor's cached type object and the result is wrapped
// with Tensor's cached type_info. It returns NotImplemented when an argument is not exactly a spore.Tensor (the
// caller falls back to the general path, whose errors name the argument). Eager small ops spend most of their time
// here rather than in the kernel (bench/python/dispatch_vs_torch.py).
struct FastCall {
  PyTypeObject* tensor_type = nullptr;
  const py::detail::type_info* tensor_info = nullptr;
  std::vector<const spore::OpDef*> ops;
};
FastCall& fast_call_state() {
  static auto* s = new FastCall();  // never destroyed: used until interpreter teardown
  return *s;
}

int64_t op_index(const std::string& name) {
  const spore::OpDef* def = spore::op_registry().find(name);
  if (def == nullptr) fail(ErrorCode::not_found, fmt::format("unknown op '{}'", name));
  auto& ops = fast_call_state().ops;
  for (size_t i = 0; i < ops.size(); ++i)
    if (ops[i] == def) return static_cast<int64_t>(i);
  ops.push_back(def);
  return static_cast<int64_t>(ops.size() - 1);
}

PyObject* wrap_tensor(Tensor&& t) {
  const FastCall& fc = fast_call_state();
  return py::detail::type_caster_generic::cast(&t, py::return_value_policy::move, py::handle(), fc.tensor_info,
                                               nullptr, [](const void* p) -> void* {
                                                 return new Tensor(std::move(*const_cast<Tensor*>(
                                                     static_cast<const Tensor*>(p))));
                                               })
      .ptr();
}

// Op `def` on args[0..n): a new reference, NotImplemented, or null with a Python error set.
PyObject* call_op(const spore::OpDef* def, PyObject* const* argv, Py_ssize_t nargs) {
  FastCall& fc = fast_call_state();
  const int n = static_cast<int>(nargs);
  if (n < def->min_inputs || (def->max_inputs >= 0 && n > def->max_inputs)) Py_RETURN_NOTIMPLEMENTED;
  constexpr int kMax = 8;
  if (n > kMax) Py_RETURN_NOTIMPLEMENTED;
  const Tensor* in[kMax] = {};
  const Tensor* like = nullptr;  // the first tensor argument: Python numbers take its dtype
  for (int i = 0; i < n; ++i) {
    PyObject* a = argv[i];
    if (Py_TYPE(a) == fc.tensor_type) {
      auto* inst = reinterpret_cast<py::detail::instance*>(a);
      const py::detail::value_and_holder vh = inst->get_value_and_holder(fc.tensor_info, false);
      if (!vh || !vh.holder_constructed()) Py_RETURN_NOTIMPLEMENTED;
      in[i] = vh.template value_ptr<Tensor>();
      if (!in[i]->defined()) {
        PyErr_SetString(PyExc_ValueError, fmt::format("{}: input {} is undefined", def->name, i).c_str());
        return nullptr;
      }
      if (like == nullptr) like = in[i];
    } else if (!PyFloat_CheckExact(a) && !PyLong_CheckExact(a)) {
      Py_RETURN_NOTIMPLEMENTED;
    }
  }
  std::vector<Tensor> out;
  try {
    // The inputs as one contiguous span (copies of the handles: a refcount and the shape/strides each). A Python
    // int or float becomes a 0-d tensor of the first tensor's dtype, as spore's operators make NumPy-style weak
    // scalars, for the dtypes where that is one exact conversion (f32, f64; ints for i64/i32); anything else goes
    // back to the Python path.
    std::vector<Tensor> xs;
    xs.reserve(static_cast<size_t>(n));
    for (int i = 0; i < n; ++i) {
      if (in[i] != nullptr) {
        xs.push_back(*in[i]);
        continue;
      }
      if (like == nullptr) Py_RETURN_NOTIMPLEMENTED;
      PyObject* a = argv[i];
      const DType dt = like->dtype();
      if (PyFloat_CheckExact(a)) {
        if (dt != DType::f32 && dt != DType::f64) Py_RETURN_NOTIMPLEMENTED;
        xs.push_back(Tensor::scalar(PyFloat_AS_DOUBLE(a), dt));
      } else {
        int overflow = 0;
        const long long v = PyLong_AsLongLongAndOverflow(a, &overflow);
        if (overflow != 0 || (v == -1 && PyErr_Occurred())) {
          PyErr_Clear();
          Py_RETURN_NOTIMPLEMENTED;
        }
        if (dt == DType::f32) xs.push_back(Tensor::scalar(static_cast<double>(static_cast<float>(v)), dt));
        else if (dt == DType::f64) xs.push_back(Tensor::scalar(static_cast<double>(v), dt));
        else if (dt == DType::i64 && v > -(1LL << 53) && v < (1LL << 53)) xs.push_back(Tensor::scalar(static_cast<double>(v), dt));
        else if (dt == DType::i32 && v >= INT32_MIN && v <= INT32_MAX) xs.push_back(Tensor::scalar(static_cast<double>(v), dt));
        else Py_RETURN_NOTIMPLEMENTED;
      }
    }
    static const spore::Attrs no_attrs;
    Py_BEGIN_ALLOW_THREADS
    try {
      out = spore::ops::call(def->id, xs, no_attrs);
    } catch (...) {
      Py_BLOCK_THREADS
      throw;
    }
    Py_END_ALLOW_THREADS
  } catch (const spore::Error& e) {
    raise_spore_error(e);
    return nullptr;
  } catch (const std::exception& e) {
    PyErr_SetString(PyExc_RuntimeError, e.what());
    return nullptr;
  }
  if (out.size() == 1) return wrap_tensor(std::move(out[0]));
  PyObject* tup = PyTuple_New(static_cast<Py_ssize_t>(out.size()));
  if (tup == nullptr) return nullptr;
  for (size_t i = 0; i < out.size(); ++i) {
    PyObject* o = wrap_tensor(std::move(out[i]));
    if (o == nullptr) {
      Py_DECREF(tup);
      return nullptr;
    }
    PyTuple_SET_ITEM(tup, static_cast<Py_ssize_t>(i), o);
  }
  return tup;
}

PyObject* fast_call(PyObject*, PyObject* const* args, Py_ssize_t nargs) {
  FastCall& fc = fast_call_state();
  if (nargs < 1 || !PyLong_CheckExact(args[0])) {
    PyErr_SetString(PyExc_TypeError, "_fast_call(op_index, *tensors)");
    return nullptr;
  }
  const long idx = PyLong_AsLong(args[0]);
  if (idx < 0 || static_cast<size_t>(idx) >= fc.ops.size()) {
    PyErr_SetString(PyExc_IndexError, "_fast_call: unknown op index");
    return nullptr;
  }
  return call_op(fc.ops[static_cast<size_t>(idx)], args + 1, nargs - 1);
}

PyMethodDef fast_call_def = {"_fast_call", reinterpret_cast<PyCFunction>(reinterpret_cast<void (*)()>(&fast_call)),
                             METH_FASTCALL, "_fast_call(op_index, *tensors): an op with default attributes (spore.ops)"};

// spore.ops functions: a callable per op whose positional-only calls run call_op with no Python frame in between;
// keyword arguments, and calls call_op answers NotImplemented for, go to `fallback` (the Python function that binds
// the signature and says what was wrong). Instances take attributes (__name__, __doc__, __signature__, ...), so
// help() and inspect.signature() see the op's.
// As a Tensor operator (`reversed` for __radd__ and the like: the two operands swap) it is a method descriptor: Python
// calls it with (self, other) without binding.
struct OpFunction {
  PyObject_HEAD
  vectorcallfunc vectorcall;
  const spore::OpDef* def;
  PyObject* fallback;
  PyObject* dict;
  bool reversed;
};

PyObject* op_function_vectorcall(PyObject* self, PyObject* const* args, size_t nargsf, PyObject* kwnames) {
  auto* f = reinterpret_cast<OpFunction*>(self);
  const Py_ssize_t n = PyVectorcall_NARGS(nargsf);
  if (kwnames == nullptr || PyTuple_GET_SIZE(kwnames) == 0) {
    PyObject* r = nullptr;
    if (f->reversed && n == 2) {
      PyObject* const swapped[2] = {args[1], args[0]};
      r = call_op(f->def, swapped, 2);
    } else {
      r = call_op(f->def, args, n);
    }
    if (r != Py_NotImplemented) return r;
    Py_DECREF(r);
  }
  return PyObject_Vectorcall(f->fallback, args, nargsf, kwnames);
}

void op_function_dealloc(PyObject* self) {
  auto* f = reinterpret_cast<OpFunction*>(self);
  PyObject_GC_UnTrack(self);
  Py_CLEAR(f->fallback);
  Py_CLEAR(f->dict);
  Py_TYPE(self)->tp_free(self);
}

int op_function_traverse(PyObject* self, visitproc visit, void* arg) {
  auto* f = reinterpret_cast<OpFunction*>(self);
  Py_VISIT(f->fallback);
  Py_VISIT(f->dict);
  return 0;
}

int op_function_clear(PyObject* self) {
  auto* f = reinterpret_cast<OpFunction*>(self);
  Py_CLEAR(f->fallback);
  Py_CLEAR(f->dict);
  return 0;
}

// A descriptor that binds to nothing (as staticmethod): inspect then counts an OpFunction as a routine, so help()
// prints its signature like a function's.
PyObject* op_function_get(PyObject* self, PyObject*, PyObject*) {
  Py_INCREF(self);
  return self;
}

// Tensor operators are methods: bound to the tensor they are read from.
PyObject* op_method_get(PyObject* self, PyObject* obj, PyObject*) {
  if (obj == nullptr || obj == Py_None) {
    Py_INCREF(self);
    return self;
  }
  return PyMethod_New(self, obj);
}

PyTypeObject op_type(const char* name, bool method) {
  PyTypeObject t{PyVarObject_HEAD_INIT(nullptr, 0)};
  t.tp_name = name;
  t.tp_basicsize = sizeof(OpFunction);
  t.tp_dealloc = op_function_dealloc;
  t.tp_vectorcall_offset = offsetof(OpFunction, vectorcall);
  t.tp_call = PyVectorcall_Call;
  t.tp_getattro = PyObject_GenericGetAttr;
  t.tp_setattro = PyObject_GenericSetAttr;
  t.tp_flags = Py_TPFLAGS_DEFAULT | Py_TPFLAGS_HAVE_GC | Py_TPFLAGS_HAVE_VECTORCALL |
               (method ? Py_TPFLAGS_METHOD_DESCRIPTOR : 0);
  t.tp_doc = method ? "A spore op as a Tensor operator" : "A spore op as a Python function (spore.ops)";
  t.tp_traverse = op_function_traverse;
  t.tp_clear = op_function_clear;
  t.tp_dictoffset = offsetof(OpFunction, dict);
  t.tp_descr_get = method ? op_method_get : op_function_get;
  return t;
}
PyTypeObject op_function_type = op_type("spore._spore.OpFunction", false);
PyTypeObject op_method_type = op_type("spore._spore.OpMethod", true);

// _op_function(name, fallback, method, reversed): the spore.ops callable of op `name`, or (method) a Tensor operator.
py::object make_op_function(const std::string& name, py::object fallback, bool method, bool reversed) {
  const spore::OpDef* def = spore::op_registry().find(name);
  if (def == nullptr) fail(ErrorCode::not_found, fmt::format("unknown op '{}'", name));
  if (!PyCallable_Check(fallback.ptr())) fail(ErrorCode::invalid_argument, "_op_function: fallback must be callable");
  auto* f = PyObject_GC_New(OpFunction, method ? &op_method_type : &op_function_type);
  if (f == nullptr) throw py::error_already_set();
  f->vectorcall = op_function_vectorcall;
  f->def = def;
  f->fallback = fallback.release().ptr();
  f->dict = nullptr;
  f->reversed = reversed;
  PyObject_GC_Track(reinterpret_cast<PyObject*>(f));
  return py::reinterpret_steal<py::object>(reinterpret_cast<PyObject*>(f));
}

py::list op_defs() {
  py::list out;
  for (const spore::OpDef* d : spore::op_registry().all()) {
    py::list attrs;
    for (const auto& s : d->attrs)
      attrs.append(py::make_tuple(s.name, std::string(spore::attr_kind_name(s.kind)),
                                  s.default_value ? from_attr(*s.default_value) : py::object(py::none()),
                                  s.default_value.has_value(), s.choices));
    py::dict e;
    e["name"] = d->name;
    e["doc"] = d->doc;
    e["inputs"] = d->input_names;
    e["min_inputs"] = d->min_inputs;
    e["max_inputs"] = d->max_inputs;
    e["attrs"] = attrs;
    out.append(e);
  }
  return out;
}

// t[key] as NumPy's basic indexing: ints, slices with positive steps, Ellipsis and None, alone or in a tuple; the
// result is a view sharing t's memory (as NumPy's basic indexing). Out-of-range ints are IndexError.
Tensor getitem(const Tensor& t, const py::object& key) {
  check_host_data(t, "indexing");
  std::vector<py::object> keys;
  if (py::isinstance<py::tuple>(key)) {
    for (py::handle k : key.cast<py::tuple>()) keys.push_back(py::reinterpret_borrow<py::object>(k));
  } else {
    keys.push_back(key);
  }
  int consuming = 0, ellipses = 0;
  for (const auto& k : keys) {
    if (k.is(py::ellipsis())) ++ellipses;
    else if (!k.is_none()) ++consuming;
  }
  if (ellipses > 1) throw py::index_error("an index can only have a single ellipsis ('...')");
  if (consuming > t.rank())
    throw py::index_error(fmt::format("too many indices: the tensor has {} dims, the index {}", t.rank(), consuming));
  spore::Shape shape;
  spore::Strides strides;
  int64_t offset = t.offset();
  int d = 0;  // t's dim the next key applies to
  for (const auto& k : keys) {
    if (k.is(py::ellipsis())) {
      for (int n = t.rank() - consuming; n > 0; --n, ++d) {
        shape.push_back(t.shape()[static_cast<size_t>(d)]);
        strides.push_back(t.strides()[static_cast<size_t>(d)]);
      }
    } else if (k.is_none()) {
      shape.push_back(1);
      strides.push_back(0);
    } else if (py::isinstance<py::slice>(k)) {
      const int64_t n = t.shape()[static_cast<size_t>(d)];
      Py_ssize_t start = 0, stop = 0, step = 0;
      if (PySlice_Unpack(k.ptr(), &start, &stop, &step) < 0) throw py::error_already_set();
      if (step <= 0)
        throw py::index_error(fmt::format("dim {}: slice step {} (spore views need a positive step; use "
                                          "np.flip on .numpy() or the ops for reversal)", d, step));
      const Py_ssize_t len = PySlice_AdjustIndices(static_cast<Py_ssize_t>(n), &start, &stop, step);
      offset += static_cast<int64_t>(start) * t.strides()[static_cast<size_t>(d)];
      shape.push_back(len);
      strides.push_back(t.strides()[static_cast<size_t>(d)] * step);
      ++d;
    } else if (py::isinstance<py::int_>(k) && !py::isinstance<py::bool_>(k)) {
      const int64_t n = t.shape()[static_cast<size_t>(d)];
      int64_t i = k.cast<int64_t>();
      if (i < -n || i >= n)
        throw py::index_error(fmt::format("index {} is out of range for dim {} of size {}", i, d, n));
      if (i < 0) i += n;
      offset += i * t.strides()[static_cast<size_t>(d)];
      ++d;
    } else {
      throw py::type_error(fmt::format("tensor indices must be ints, slices, ... or None (basic indexing), not {}; "
                                       "index with arrays through spore.ops.gather / index_select",
                                       std::string(py::str(py::type::of(k).attr("__name__")))));
    }
  }
  for (; d < t.rank(); ++d) {
    shape.push_back(t.shape()[static_cast<size_t>(d)]);
    strides.push_back(t.strides()[static_cast<size_t>(d)]);
  }
  return t.as_strided(std::move(shape), std::move(strides), offset);
}

// bf_getbuffer of spore.Tensor: the tensor's memory with its shape and byte strides, writable.
int tensor_getbuffer(PyObject* obj, Py_buffer* view, int flags) {
  if (view == nullptr) {
    PyErr_SetString(PyExc_BufferError, "spore.Tensor: no view to fill");
    return -1;
  }
  std::memset(view, 0, sizeof(Py_buffer));
  try {
    const Tensor& t = py::handle(obj).cast<const Tensor&>();
    const ByteLayout l = byte_layout(t, "buffer");
    if ((flags & PyBUF_STRIDES) != PyBUF_STRIDES && !t.is_contiguous())
      fail(ErrorCode::invalid_argument, "buffer: the tensor is strided and the consumer asked for a contiguous buffer");
    auto* info = new py::buffer_info(t.numel() ? t.raw_data() : nullptr, l.item, buffer_format(t.dtype()), t.rank(),
                                     l.shape, l.strides, false);
    view->obj = obj;
    view->internal = info;  // pybind11's bf_releasebuffer deletes it
    view->buf = info->ptr;
    view->itemsize = info->itemsize;
    view->len = info->itemsize * t.numel();
    view->readonly = 0;
    view->ndim = 1;
    if ((flags & PyBUF_FORMAT) == PyBUF_FORMAT) view->format = const_cast<char*>(info->format.c_str());
    if ((flags & PyBUF_STRIDES) == PyBUF_STRIDES) {
      view->ndim = static_cast<int>(info->ndim);
      view->strides = info->strides.data();
      view->shape = info->shape.data();
    }
    Py_INCREF(obj);
    return 0;
  } catch (const std::exception& e) {
    view->obj = nullptr;
    PyErr_SetString(PyExc_BufferError, e.what());
    return -1;
  }
}

// ---- LLMs --------------------------------------------------------------------------------------------------------

// A loaded LLM with one decoding session (KV cache), reset before every generate call: spore.llm.LLM.
struct PyLlm {
  explicit PyLlm(spore::llm::Model m) : model(std::move(m)) {}
  spore::llm::Model model;
  std::unique_ptr<spore::llm::Session> session;
  std::mutex mu;  // one generation at a time (the session's cache is shared)
};

spore::DType kv_dtype_of(const std::string& k) {
  if (k == "f32") return DType::f32;
  if (k == "f16") return DType::f16;
  if (k == "bf16") return DType::bf16;
  if (k == "int8") return DType::i8;
  fail(ErrorCode::invalid_argument, fmt::format("kv_type '{}': expected f32, f16, bf16 or int8", k));
}

std::unique_ptr<PyLlm> llm_load(const std::string& path, int64_t ctx, const std::string& kv_type, int64_t max_memory) {
  const DType kv = kv_dtype_of(kv_type);
  if (ctx < 0) fail(ErrorCode::invalid_argument, fmt::format("ctx {}: 0 (what fits) or a positive length", ctx));
  py::gil_scoped_release nogil;
  auto p = std::make_unique<PyLlm>(spore::llm::Model::load(path));
  spore::llm::SessionOptions so;
  so.ctx = ctx;
  so.kv_dtype = kv;
  so.max_memory = max_memory;
  p->session = std::make_unique<spore::llm::Session>(p->model, so);
  return p;
}

// Generates from prompt ids; on_text (may be None) receives text pieces as they become safe to show, called with
// the GIL held. Returns a dict of the result.
py::dict llm_generate(PyLlm& l, const std::vector<int32_t>& ids, const py::dict& opts, py::object on_text) {
  spore::llm::GenerateOptions go;
  auto get = [&](const char* k) -> py::object { return opts.contains(k) ? py::object(opts[k]) : py::object(py::none()); };
  if (auto v = get("max_tokens"); !v.is_none()) go.max_tokens = v.cast<int64_t>();
  if (go.max_tokens < 1) fail(ErrorCode::invalid_argument, fmt::format("max_tokens {}: at least 1", go.max_tokens));
  if (auto v = get("temperature"); !v.is_none()) go.sampler.temperature = v.cast<double>();
  if (auto v = get("top_k"); !v.is_none()) go.sampler.top_k = v.cast<int64_t>();
  if (auto v = get("top_p"); !v.is_none()) go.sampler.top_p = v.cast<double>();
  if (auto v = get("min_p"); !v.is_none()) go.sampler.min_p = v.cast<double>();
  if (auto v = get("repeat_penalty"); !v.is_none()) go.sampler.repeat_penalty = v.cast<double>();
  if (auto v = get("frequency_penalty"); !v.is_none()) go.sampler.frequency_penalty = v.cast<double>();
  if (auto v = get("presence_penalty"); !v.is_none()) go.sampler.presence_penalty = v.cast<double>();
  if (auto v = get("penalty_last_n"); !v.is_none()) go.sampler.penalty_last_n = v.cast<int64_t>();
  if (auto v = get("seed"); !v.is_none()) go.sampler.seed = v.cast<uint64_t>();
  if (auto v = get("stop"); !v.is_none()) go.stop = v.cast<std::vector<std::string>>();
  if (auto v = get("ignore_eos"); !v.is_none()) go.ignore_eos = v.cast<bool>();
  go.sampler.validate();
  if (ids.empty()) fail(ErrorCode::invalid_argument, "generate: the prompt has no tokens");
  const int32_t vocab = l.model.tokenizer().vocab_size();
  for (size_t i = 0; i < ids.size(); ++i)
    if (ids[i] < 0 || ids[i] >= vocab)
      fail(ErrorCode::invalid_argument, fmt::format("generate: prompt token {} at index {} is out of range (vocabulary "
                                                    "of {})", ids[i], i, vocab));
  spore::llm::GenerateResult r;
  {
    py::gil_scoped_release nogil;
    std::lock_guard<std::mutex> lk(l.mu);
    l.session->reset();
    std::function<void(const std::string&)> cb;
    if (!on_text.is_none())
      cb = [&on_text](const std::string& t) {
        py::gil_scoped_acquire gil;
        on_text(py::bytes(t));
      };
    r = spore::llm::generate(*l.session, ids, go, cb);
  }
  py::dict d;
  d["text"] = py::bytes(r.text);
  d["tokens"] = r.tokens;
  d["stop_reason"] = r.stop_reason;
  d["prompt_tokens"] = r.prompt_tokens;
  d["ttft_ms"] = r.ttft_ms;
  d["prefill_tok_s"] = r.prefill_tok_s;
  d["decode_tok_s"] = r.decode_tok_s;
  return d;
}

// ---- autodiff ----------------------------------------------------------------------------------------------------

// spore.GradientTape: a context manager over autodiff::GradientTape, which records on the thread that made it (the
// Python thread calling the ops, which stays the same OS thread while the GIL is released).
class PyTape {
 public:
  PyTape& enter() {
    if (tape_) fail(ErrorCode::invalid_argument, "GradientTape: already entered");
    tape_ = std::make_unique<spore::autodiff::GradientTape>();
    return *this;
  }
  void exit(const py::args&) { tape_.reset(); }
  Tensor watch(const Tensor& t) {
    live("watch");
    if (!t.defined()) fail(ErrorCode::invalid_argument, "GradientTape.watch: the tensor is undefined");
    return tape_->watch(t);
  }
  std::vector<Tensor> gradient(const Tensor& target, const std::vector<Tensor>& sources, std::optional<Tensor> seed) {
    live("gradient");
    if (!target.defined()) fail(ErrorCode::invalid_argument, "GradientTape.gradient: the target is undefined");
    for (size_t i = 0; i < sources.size(); ++i)
      if (!tape_->is_watched(sources[i]))
        fail(ErrorCode::invalid_argument,
             fmt::format("GradientTape.gradient: source {} is not watched by this tape (pass what watch() returned)", i));
    py::gil_scoped_release nogil;
    return tape_->gradient(target, sources, seed ? *seed : Tensor());
  }

 private:
  void live(const char* what) const {
    if (!tape_) fail(ErrorCode::invalid_argument, fmt::format("GradientTape.{}: use it inside `with spore.GradientTape() as tape:`", what));
  }
  std::unique_ptr<spore::autodiff::GradientTape> tape_;
};

// ---- jit ---------------------------------------------------------------------------------------------------------

// spore.jit: a Python function of tensors traced once per input signature into a compiled plan (CompiledFunction).
// Tracing calls the Python function with symbolic tensors (the GIL taken back for it); its ops record nodes, and
// reading a value raises the symbolic-tensor error at the Python line that did it.
std::unique_ptr<spore::CompiledFunction> make_jit(py::function f, const std::string& name) {
  spore::TensorFn fn = [f, name](std::span<const Tensor> in) -> std::vector<Tensor> {
    py::gil_scoped_acquire gil;
    py::tuple args(in.size());
    for (size_t i = 0; i < in.size(); ++i) args[i] = py::cast(in[i]);
    py::object r = f(*args);
    std::vector<Tensor> out;
    if (py::isinstance<Tensor>(r)) {
      out.push_back(r.cast<Tensor>());
    } else if (py::isinstance<py::tuple>(r) || py::isinstance<py::list>(r)) {
      for (py::handle x : r) {
        if (!py::isinstance<Tensor>(x))
          fail(ErrorCode::invalid_argument, fmt::format("jit '{}': the function returned a {} among its outputs; "
                                                        "it must return tensors", name,
                                                        std::string(py::str(py::type::of(x).attr("__name__")))));
        out.push_back(x.cast<Tensor>());
      }
    } else {
      fail(ErrorCode::invalid_argument, fmt::format("jit '{}': the function returned {}, not a tensor or a tuple of "
                                                    "tensors", name,
                                                    std::string(py::str(py::type::of(r).attr("__name__")))));
    }
    return out;
  };
  return std::make_unique<spore::CompiledFunction>(std::move(fn), spore::CompileRole{name, false});
}

std::string repr(const Tensor& t) {
  if (!t.defined()) return "spore.Tensor(undefined)";
  std::string shape;
  for (int i = 0; i < t.rank(); ++i) shape += (i ? ", " : "") + std::to_string(t.shape()[static_cast<size_t>(i)]);
  if (t.is_symbolic())
    return fmt::format("spore.Tensor(symbolic, shape=({}), dtype={})", shape, spore::dtype_name(t.dtype()));
  return "spore." + t.to_string(64);
}

}  // namespace

PYBIND11_MODULE(_spore, m) {
  m.doc() = "spore's C++ engine (the spore package wraps it)";
  spore::init();

  py::register_exception_translator([](std::exception_ptr p) {
    try {
      if (p) std::rethrow_exception(p);
    } catch (const spore::Error& e) {
      raise_spore_error(e);
    }
  });
  m.def("_set_error_classes", [](py::dict d) {
    for (auto [k, v] : d) error_classes()[py::str(k)] = py::reinterpret_borrow<py::object>(v);
  });

  py::enum_<DType>(m, "dtype", "An element type: float64, float32, float16, bfloat16, int64, int32, int8, uint8, bool_")
      .value("float64", DType::f64)
      .value("float32", DType::f32)
      .value("float16", DType::f16)
      .value("bfloat16", DType::bf16)
      .value("int64", DType::i64)
      .value("int32", DType::i32)
      .value("int8", DType::i8)
      .value("uint8", DType::u8)
      .value("bool_", DType::boolean)
      .def_property_readonly("itemsize", [](DType t) { return spore::dtype_size(t); })
      .def_property_readonly("short_name", [](DType t) { return std::string(spore::dtype_name(t)); })
      .def_property_readonly("is_floating_point", [](DType t) { return spore::is_floating(t); })
      .def_property_readonly("numpy_name", [](DType t) { return std::string(numpy_name(t)); });

  py::class_<Tensor> tensor_cls(m, "Tensor", py::buffer_protocol(), "A spore tensor (see spore.tensor, spore.from_numpy)");
  // The buffer protocol: pybind11's def_buffer cannot raise (an exception there aborts the process), so the slot
  // is spore's own, which turns every failure into a BufferError; pybind11's release slot frees the buffer_info.
  reinterpret_cast<PyTypeObject*>(tensor_cls.ptr())->tp_as_buffer->bf_getbuffer = &tensor_getbuffer;
  tensor_cls
      .def_property_readonly("shape", [](const Tensor& t) { return py::tuple(py::cast(t.shape())); })
      .def_property_readonly("dtype", &Tensor::dtype)
      .def_property_readonly("ndim", &Tensor::rank)
      .def_property_readonly("strides", [](const Tensor& t) { return py::tuple(py::cast(t.strides())); },
                             "Strides in elements (NumPy's are in bytes)")
      .def_property_readonly("is_symbolic", &Tensor::is_symbolic)
      .def("numel", &Tensor::numel)
      .def("is_contiguous", &Tensor::is_contiguous)
      .def("contiguous", &Tensor::contiguous, "Self if packed row-major, else a packed copy")
      .def("clone", &Tensor::clone, "A packed copy")
      .def("data_ptr", [](const Tensor& t) {
        check_host_data(t, "data_ptr");
        return reinterpret_cast<uintptr_t>(t.numel() == 0 ? nullptr : t.raw_data());
      })
      .def("numpy", [](py::object self) { return numpy_view(self.cast<const Tensor&>(), self); },
           "A NumPy array sharing this tensor's memory (no copy)")
      .def("view_bits", [](const Tensor& t) {
        const ByteLayout l = byte_layout(t, "view_bits", /*bf16_bits=*/true);
        if (l.item != 2) fail(ErrorCode::unsupported, "view_bits: only 16-bit dtypes (float16, bfloat16)");
        return py::array(py::dtype("uint16"), l.shape, l.strides, t.numel() ? t.raw_data() : nullptr, py::cast(t));
      }, "The 16-bit patterns of a float16 / bfloat16 tensor as a uint16 NumPy array sharing its memory")
      .def("item", [](const Tensor& t) {
        check_host_data(t, "item");
        if (t.numel() != 1) fail(ErrorCode::invalid_argument, fmt::format("item: the tensor has {} elements, not 1", t.numel()));
        const double v = t.item();
        if (spore::is_floating(t.dtype())) return py::object(py::float_(v));
        if (t.dtype() == DType::boolean) return py::object(py::bool_(v != 0));
        return py::object(py::int_(static_cast<int64_t>(v)));
      })
      .def("__dlpack__", [](const Tensor& t, py::object stream) {
        if (!stream.is_none() && !(py::isinstance<py::int_>(stream) && stream.cast<int64_t>() == -1))
          fail(ErrorCode::invalid_argument, "__dlpack__: spore tensors live in host memory; stream must be None");
        return to_dlpack(t);
      }, py::arg("stream") = py::none())
      .def("__dlpack_device__", [](const Tensor&) { return py::make_tuple(1, 0); })
      .def("__repr__", &repr)
      .def("__getitem__", &getitem, "Basic indexing (ints, slices, ..., None): a view sharing memory")
      ;

  using spore::deploy::Session;
  py::class_<Session>(m, "Session", "A deployed model (.onnx, .spore, text IR) run on whatever inputs it is given")
      .def(py::init([](const std::string& path) {
             py::gil_scoped_release nogil;  // import and first compile can take a while
             return std::make_unique<Session>(path);
           }),
           py::arg("path"))
      .def_property_readonly("path", &Session::path)
      .def_property_readonly("inputs", [](const Session& s) {
        py::list out;
        for (const auto& in : s.inputs()) {
          py::list dims;
          for (const auto& d : in.type.dims) dims.append(d.is_static() ? py::object(py::int_(d.size)) : py::object(py::str(d.sym)));
          out.append(py::make_tuple(in.name, in.type.dtype, py::tuple(dims)));
        }
        return out;
      }, "(name, dtype, dims) per input; a symbolic dim is its name")
      .def("run", [](Session& s, const std::vector<Tensor>& xs) {
        py::gil_scoped_release nogil;
        return s.run(xs);
      }, py::arg("inputs"))
      .def_property_readonly("stats", [](const Session& s) {
        const auto& st = s.stats();
        py::dict d;
        d["runs"] = st.runs;
        d["compiles"] = st.compiles;
        d["imports"] = st.imports;
        d["evictions"] = st.evictions;
        d["cached_plans"] = s.cached_plans();
        return d;
      });

  py::class_<PyLlm>(m, "Llm", "A GGUF / Hugging Face LLM with one decoding session (spore.llm wraps it)")
      .def(py::init(&llm_load), py::arg("path"), py::arg("ctx") = 0, py::arg("kv_type") = "f32",
           py::arg("max_memory") = 0)
      .def("encode", [](const PyLlm& l, const std::string& text, bool add_special, bool parse_special) {
        return l.model.tokenizer().encode(text, add_special, parse_special);
      }, py::arg("text"), py::arg("add_special") = true, py::arg("parse_special") = false)
      .def("decode", [](const PyLlm& l, const std::vector<int32_t>& ids) {
        const int32_t vocab = l.model.tokenizer().vocab_size();
        for (size_t i = 0; i < ids.size(); ++i)
          if (ids[i] < 0 || ids[i] >= vocab)
            fail(ErrorCode::invalid_argument, fmt::format("decode: token {} at index {} is out of range (vocabulary "
                                                          "of {})", ids[i], i, vocab));
        return py::bytes(l.model.tokenizer().decode(ids));
      }, py::arg("ids"))
      .def("chat_prompt", [](const PyLlm& l, const std::vector<std::pair<std::string, std::string>>& messages) {
        std::vector<spore::llm::ChatMessage> ms;
        for (const auto& [role, content] : messages) ms.push_back({role, content});
        return spore::llm::apply_chat_template(l.model.tokenizer(), ms, true);
      }, py::arg("messages"))
      .def("generate", &llm_generate, py::arg("ids"), py::arg("options"), py::arg("on_text") = py::none())
      .def_property_readonly("ctx", [](const PyLlm& l) { return l.session->ctx(); })
      .def_property_readonly("vocab_size", [](const PyLlm& l) { return l.model.tokenizer().vocab_size(); })
      .def_property_readonly("arch", [](const PyLlm& l) { return l.model.config().arch; });

  py::class_<PyTape>(m, "GradientTape", "Records the ops on watched tensors for reverse-mode gradients")
      .def(py::init<>())
      .def("__enter__", &PyTape::enter, py::return_value_policy::reference_internal)
      .def("__exit__", &PyTape::exit)
      .def("watch", &PyTape::watch, py::arg("tensor"), "A handle to the tensor (same data) the tape follows")
      .def("gradient", &PyTape::gradient, py::arg("target"), py::arg("sources"), py::arg("seed") = py::none(),
           "d(sum(target * seed)) / d(source) per source (seed: ones); once per tape");

  py::class_<spore::CompiledFunction>(m, "CompiledFunction", "A traced, compiled Python function (spore.jit)")
      .def(py::init(&make_jit), py::arg("fn"), py::arg("name") = "jit")
      .def("__call__", [](spore::CompiledFunction& cf, const std::vector<Tensor>& xs) {
        for (size_t i = 0; i < xs.size(); ++i)
          if (!xs[i].defined()) fail(ErrorCode::invalid_argument, fmt::format("jit: input {} is undefined", i));
        py::gil_scoped_release nogil;
        return cf(xs);
      })
      .def_property_readonly("cache_size", &spore::CompiledFunction::cache_size);

  m.def("from_numpy", [](py::array a) { return tensor_from_numpy(a); }, py::arg("array"),
        "A tensor sharing the NumPy array's memory (no copy); the array stays alive while the tensor does");
  m.def("_from_dlpack_capsule", &from_dlpack_capsule, py::arg("capsule"));
  m.def("_op_call", &op_call, py::arg("name"), py::arg("inputs"), py::arg("attrs"));
  m.def("_op_defs", &op_defs);
  m.def("_op_index", &op_index, py::arg("name"));
  fast_call_state().tensor_type = reinterpret_cast<PyTypeObject*>(tensor_cls.ptr());
  fast_call_state().tensor_info = py::detail::get_type_info(typeid(Tensor));
  m.add_object("_fast_call", py::reinterpret_steal<py::object>(PyCFunction_NewEx(&fast_call_def, nullptr, m.ptr())));
  if (PyType_Ready(&op_function_type) < 0 || PyType_Ready(&op_method_type) < 0) throw py::error_already_set();
  m.def("_op_function", &make_op_function, py::arg("name"), py::arg("fallback"), py::arg("method") = false,
        py::arg("reversed") = false);
  m.def("set_threads", [](int n) {
    if (n < 1) fail(ErrorCode::invalid_argument, fmt::format("set_threads: {} (at least 1)", n));
    spore::set_threads(n);
  }, py::arg("n"));
  m.def("get_threads", [] { return spore::num_threads(); });
  m.def("_load_custom_ops", [](const std::string& path) {
    spore::PluginInfo info;
    {
      py::gil_scoped_release nogil;
      info = spore::load_custom_ops(path);
    }
    py::dict d;
    d["path"] = info.path;
    d["name"] = info.name;
    d["version"] = info.version;
    d["domain"] = info.domain;
    d["ops"] = info.ops;
    return d;
  }, py::arg("path"));
  m.def("version", [] { return std::string(SPORE_VERSION); });
  spore_py::bind_nn_train(m);
  spore_py::bind_deploy(m);
  spore_py::bind_serve(m);
}
