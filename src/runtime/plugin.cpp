// Custom-op plugin loader (runtime/plugin.h, ABI in include/spore/custom_op_abi.h).
//
// A plugin's whole description is validated before anything is registered, so a bad plugin leaves the
// registries as they were. Each op becomes an OpDef whose inference, gradient and kernels forward to the
// plugin. KernelFn is a plain function pointer, so every plugin kernel is the one trampoline below, which
// finds the plugin op by the kernel context's op id.
#include "runtime/plugin.h"

#include <dlfcn.h>

#include <algorithm>
#include <array>
#include <atomic>
#include <cctype>
#include <cmath>
#include <cstring>
#include <deque>
#include <mutex>
#include <set>

#include "base/error.h"
#include "base/thread_pool.h"
#include "ops/dispatch.h"
#include "ops/kernel.h"
#include "ops/ops.h"
#include "ops/registry.h"
#include "runtime/runtime.h"
#include "spore/custom_op_abi.h"

namespace spore {
namespace {

constexpr int max_arity = 64;   // inputs or outputs of one plugin op: far beyond any real op, bounds bad structs
constexpr int max_attrs = 256;
constexpr size_t err_capacity = 1024;
constexpr uint32_t known_traits =
    SPORE_TRAIT_ELEMENTWISE | SPORE_TRAIT_INPLACE_OK | SPORE_TRAIT_NONDETERMINISTIC | SPORE_TRAIT_NO_GRAD;

static_assert(SPORE_F64 == static_cast<int>(DType::f64) && SPORE_F32 == static_cast<int>(DType::f32) &&
                  SPORE_F16 == static_cast<int>(DType::f16) && SPORE_BF16 == static_cast<int>(DType::bf16) &&
                  SPORE_I64 == static_cast<int>(DType::i64) && SPORE_I32 == static_cast<int>(DType::i32) &&
                  SPORE_I8 == static_cast<int>(DType::i8) && SPORE_U8 == static_cast<int>(DType::u8) &&
                  SPORE_BOOL == static_cast<int>(DType::boolean) && num_dtypes == 9,
              "spore_dtype must match spore::DType");
static_assert(static_cast<uint32_t>(Trait::elementwise) == SPORE_TRAIT_ELEMENTWISE &&
                  static_cast<uint32_t>(Trait::inplace_ok) == SPORE_TRAIT_INPLACE_OK &&
                  static_cast<uint32_t>(Trait::nondeterministic) == SPORE_TRAIT_NONDETERMINISTIC &&
                  static_cast<uint32_t>(Trait::no_grad) == SPORE_TRAIT_NO_GRAD,
              "SPORE_TRAIT_* must match spore::Trait");

// One registered plugin op: what the trampoline, inference and gradient need.
struct PluginOp {
  const spore_custom_op* op = nullptr;
  std::string name;
  std::string plugin;  // plugin name
  std::string path;    // library path
  std::array<const spore_kernel_def*, num_dtypes> kernels{};
  std::vector<std::string> attr_names;
  std::vector<int32_t> attr_kinds;
};

struct Loaded {
  void* handle = nullptr;
  PluginInfo info;
};

std::mutex& load_mutex() {
  static std::mutex m;
  return m;
}
std::deque<Loaded>& loaded() {  // deque: references handed out stay valid
  static auto* l = new std::deque<Loaded>();  // never destroyed: plugins are never unloaded
  return *l;
}
std::deque<PluginOp>& plugin_ops() {
  static auto* d = new std::deque<PluginOp>();
  return *d;
}
// op_index() -> plugin op, read by kernels without load_mutex (op_index of a custom id takes the op-name table's
// short lock); written once per op under load_mutex.
constexpr size_t max_op_ids = 65536 + 1024;  // custom ops (at most 65535) after the built-ins
std::atomic<const PluginOp*>* by_id() {
  static auto* t = new std::atomic<const PluginOp*>[max_op_ids]();
  return t;
}

const PluginOp* find_plugin_op(OpId id) {
  const int i = op_index(id);
  return i < 0 || static_cast<size_t>(i) >= max_op_ids ? nullptr : by_id()[static_cast<size_t>(i)].load(std::memory_order_acquire);
}

std::string c_message(const char* err) {
  std::string m(err, strnlen(err, err_capacity - 1));
  return m.empty() ? "(no message)" : m;
}

// ------------------------------------------------------------------------------------------ kernels

void host_parallel_for(void* /*host*/, int64_t n, int64_t grain, spore_range_fn fn, void* user) {
  if (n <= 0 || fn == nullptr) return;
  if (grain < 1) grain = 1;
  const int64_t chunks = num_chunks(n, grain);
  if (chunks == 1) {
    fn(user, 0, n);
    return;
  }
  parallel_for(chunks, [&](int64_t c) {
    const int64_t begin = c * grain;
    fn(user, begin, std::min(n, begin + grain));
  });
}

void fill_type(spore_tensor_type& t, const Tensor& x, const PluginOp& p, const char* role, int i) {
  SPORE_CHECK(x.rank() <= SPORE_MAX_DIMS, ErrorCode::unsupported,
              "custom op '{}' (plugin '{}'): {} {} has rank {}; plugins take at most {} dims", p.name, p.plugin, role, i,
              x.rank(), SPORE_MAX_DIMS);
  t.dtype = static_cast<int32_t>(x.dtype());
  t.ndim = static_cast<int32_t>(x.rank());
  for (int d = 0; d < x.rank(); ++d) t.shape[d] = x.shape()[d];
}

std::vector<spore_attr> c_attrs(const PluginOp& p, const Attrs& attrs) {
  std::vector<spore_attr> out(p.attr_names.size());
  for (size_t i = 0; i < out.size(); ++i) {
    out[i].name = p.attr_names[i].c_str();
    out[i].kind = p.attr_kinds[i];
    if (p.attr_kinds[i] == 0) {
      out[i].i = attrs.i(p.attr_names[i]);
      out[i].f = static_cast<double>(out[i].i);
    } else {
      out[i].f = attrs.f(p.attr_names[i]);
    }
  }
  return out;
}

void plugin_kernel(KernelContext& k) {
  const PluginOp* p = find_plugin_op(k.op);
  SPORE_CHECK(p != nullptr, ErrorCode::internal, "op '{}' has no custom-op plugin kernel", op_name(k.op));
  const DType dt = k.num_inputs() > 0 ? k.in(0).dtype() : k.out(0).dtype();
  const spore_kernel_def* kd = p->kernels[static_cast<int>(dt)];
  SPORE_CHECK(kd != nullptr, ErrorCode::unsupported, "custom op '{}' (plugin '{}') has no {} kernel", p->name, p->plugin,
              dtype_name(dt));
  std::vector<Tensor> keep;  // packed copies of strided inputs, alive for the call
  keep.reserve(k.inputs.size());
  std::vector<spore_tensor> ins(k.inputs.size()), outs(k.outputs.size());
  for (size_t i = 0; i < ins.size(); ++i) {
    keep.push_back(k.in(static_cast<int>(i)).contiguous());
    fill_type(ins[i].type, keep.back(), *p, "input", static_cast<int>(i));
    ins[i].data = keep.back().raw_data();
  }
  for (size_t i = 0; i < outs.size(); ++i) {
    Tensor& o = k.out(static_cast<int>(i));
    SPORE_CHECK(o.is_contiguous(), ErrorCode::internal, "custom op '{}': output {} is not contiguous", p->name, i);
    fill_type(outs[i].type, o, *p, "output", static_cast<int>(i));
    outs[i].data = o.raw_data();
  }
  const std::vector<spore_attr> attrs = c_attrs(*p, k.attrs);
  spore_kernel_context ctx{};
  ctx.num_inputs = static_cast<int32_t>(ins.size());
  ctx.inputs = ins.data();
  ctx.num_outputs = static_cast<int32_t>(outs.size());
  ctx.outputs = outs.data();
  ctx.num_attrs = static_cast<int32_t>(attrs.size());
  ctx.attrs = attrs.empty() ? nullptr : attrs.data();
  ctx.num_threads = num_threads();
  ctx.parallel_for = host_parallel_for;
  ctx.host = nullptr;
  char err[err_capacity] = {};
  if (kd->fn(&ctx, err, sizeof(err)) != 0)
    SPORE_FAIL(ErrorCode::invalid_argument, "custom op '{}' (plugin '{}', {} kernel '{}') failed: {}", p->name, p->plugin,
               dtype_name(dt), kd->impl ? kd->impl : "", c_message(err));
}

// ------------------------------------------------------------------------------------ inference

std::vector<TensorType> plugin_infer(const PluginOp& p, const InferContext& c) {
  const spore_custom_op& op = *p.op;
  if (op.infer == nullptr) return std::vector<TensorType>(static_cast<size_t>(op.num_outputs), c.in(0));
  std::vector<spore_tensor_type> ins(static_cast<size_t>(c.num_inputs())), outs(static_cast<size_t>(op.num_outputs));
  for (int i = 0; i < c.num_inputs(); ++i) {
    const TensorType& t = c.in(i);
    c.check(t.rank() <= SPORE_MAX_DIMS, ErrorCode::unsupported, "input {} has rank {}; plugins take at most {} dims", i,
            t.rank(), SPORE_MAX_DIMS);
    ins[i].dtype = static_cast<int32_t>(t.dtype);
    ins[i].ndim = t.rank();
    for (int d = 0; d < t.rank(); ++d) ins[i].shape[d] = t.dims[d].is_static() ? t.dims[d].size : -1;
  }
  for (auto& o : outs) o.dtype = ins.empty() ? SPORE_F32 : ins[0].dtype;
  const std::vector<spore_attr> attrs = c_attrs(p, c.attrs);
  char err[err_capacity] = {};
  const int rc = op.infer(ins.data(), static_cast<int32_t>(ins.size()), attrs.empty() ? nullptr : attrs.data(),
                          static_cast<int32_t>(attrs.size()), outs.data(), static_cast<int32_t>(outs.size()), err,
                          sizeof(err));
  if (rc != 0) c.fail(ErrorCode::shape_mismatch, fmt::format("plugin '{}': {}", p.plugin, c_message(err)));
  std::vector<TensorType> types;
  for (size_t o = 0; o < outs.size(); ++o) {
    const spore_tensor_type& t = outs[o];
    c.check(t.dtype >= 0 && t.dtype < num_dtypes, ErrorCode::internal,
            "plugin '{}' inferred output {} with an invalid dtype code {}", p.plugin, o, t.dtype);
    c.check(t.ndim >= 0 && t.ndim <= SPORE_MAX_DIMS, ErrorCode::internal,
            "plugin '{}' inferred output {} with rank {} (0..{} allowed)", p.plugin, o, t.ndim, SPORE_MAX_DIMS);
    TensorType tt;
    tt.dtype = static_cast<DType>(t.dtype);
    for (int d = 0; d < t.ndim; ++d) {
      const int64_t s = t.shape[d];
      if (s >= 0) {
        tt.dims.emplace_back(s);
        continue;
      }
      // -1: a dim unknown until run time; it must be input 0's (symbolic) dim on the same axis.
      const bool from_input = s == -1 && c.num_inputs() > 0 && d < c.in(0).rank() && !c.in(0).dims[d].is_static();
      c.check(from_input, ErrorCode::internal,
              "plugin '{}' inferred output {} with dim {} = {} (only -1, for input 0's unknown dim on that axis, may "
              "be negative)", p.plugin, o, d, s);
      tt.dims.push_back(c.in(0).dims[d]);
    }
    types.push_back(std::move(tt));
  }
  return types;
}

// ------------------------------------------------------------------------------------- gradient

std::vector<Tensor> plugin_grad(const PluginOp& p, const GradContext& g) {
  const std::string grad_name = p.op->grad_op;
  bool any = false;
  for (const Tensor& og : g.output_grads) any |= og.defined();
  if (!any) return std::vector<Tensor>(g.inputs.size());
  const auto gid = op_from_name(grad_name);
  SPORE_CHECK(gid.has_value(), ErrorCode::not_found, "custom op '{}' (plugin '{}'): its gradient op '{}' is not registered",
              p.name, p.plugin, grad_name);
  const OpDef& gd = op_registry().get(*gid);
  std::vector<Tensor> args(g.inputs.begin(), g.inputs.end());
  args.insert(args.end(), g.outputs.begin(), g.outputs.end());
  for (size_t i = 0; i < g.outputs.size(); ++i)
    args.push_back(g.output_grads[i].defined() ? g.output_grads[i]
                                               : ops::zeros(g.outputs[i].shape(), g.outputs[i].dtype()));
  Attrs attrs;  // the forward node's attributes that the gradient op also declares
  for (const auto& [name, value] : g.attrs.items())
    if (gd.find_attr(name)) attrs.set(name, value);
  std::vector<Tensor> grads = ops::call(*gid, args, attrs);
  SPORE_CHECK(grads.size() == g.inputs.size(), ErrorCode::internal,
              "custom op '{}' (plugin '{}'): gradient op '{}' returned {} tensors for {} inputs", p.name, p.plugin,
              grad_name, grads.size(), g.inputs.size());
  return grads;
}

// ----------------------------------------------------------------------------------- validation

bool valid_op_name(const char* s) {
  if (!std::isalpha(static_cast<unsigned char>(s[0])) && s[0] != '_') return false;
  for (const char* c = s; *c; ++c)
    if (!std::isalnum(static_cast<unsigned char>(*c)) && *c != '_' && *c != '.') return false;
  return true;
}

// Who already owns an op name: "a built-in op", "op 'x' of plugin 'p' (lib)", "a custom op registered in this process".
std::string owner_of(OpId id) {
  if (is_builtin_op(id)) return "a built-in op";
  if (const PluginOp* p = find_plugin_op(id))
    return fmt::format("an op of custom-op plugin '{}' ({})", p->plugin, p->path);
  return "a custom op already registered in this process";
}

// Throws naming the library (and op) for anything that would make the plugin unsafe or ambiguous to register.
void validate(const spore_plugin& pl, const std::string& path, const std::string& pname) {
  const std::string lib = fmt::format("custom-op plugin '{}' ({})", pname, path);
  SPORE_CHECK(pl.num_ops >= 1 && pl.ops != nullptr, ErrorCode::invalid_argument, "{} declares no ops (num_ops = {})", lib,
              pl.num_ops);
  SPORE_CHECK(pl.domain == nullptr || pl.domain[0] != '\0', ErrorCode::invalid_argument,
              "{}: domain is an empty string (use NULL for \"spore.custom\")", lib);
  std::set<std::string> names;
  for (int32_t i = 0; i < pl.num_ops; ++i) {
    const spore_custom_op& op = pl.ops[i];
    SPORE_CHECK(op.name != nullptr, ErrorCode::invalid_argument, "{}: op #{} has a NULL name", lib, i);
    const std::string where = fmt::format("{}: op '{}'", lib, op.name);
    SPORE_CHECK(valid_op_name(op.name), ErrorCode::invalid_argument,
                "{}: op #{} name '{}' is not an identifier (letters, digits, '_', '.'; not starting with a digit)", lib,
                i, op.name);
    SPORE_CHECK(names.insert(op.name).second, ErrorCode::invalid_argument, "{} is declared twice", where);
    if (auto id = op_from_name(op.name))
      SPORE_FAIL(ErrorCode::invalid_argument, "{} clashes with {} of the same name", where, owner_of(*id));
    SPORE_CHECK(op.num_inputs >= 0 && op.num_inputs <= max_arity, ErrorCode::invalid_argument,
                "{}: num_inputs {} is outside 0..{}", where, op.num_inputs, max_arity);
    SPORE_CHECK(op.num_outputs >= 1 && op.num_outputs <= max_arity, ErrorCode::invalid_argument,
                "{}: num_outputs {} is outside 1..{}", where, op.num_outputs, max_arity);
    SPORE_CHECK(op.num_inputs > 0 || op.infer != nullptr, ErrorCode::invalid_argument,
                "{} has no inputs, so it needs an infer function", where);
    SPORE_CHECK((op.traits & ~known_traits) == 0, ErrorCode::invalid_argument, "{}: unknown trait bits 0x{:x}", where,
                op.traits & ~known_traits);
    SPORE_CHECK(op.num_attrs >= 0 && op.num_attrs <= max_attrs && (op.num_attrs == 0 || op.attr_defs != nullptr),
                ErrorCode::invalid_argument, "{}: num_attrs {} with attr_defs {}", where, op.num_attrs,
                op.attr_defs ? "set" : "NULL");
    std::set<std::string> attr_names;
    for (int32_t a = 0; a < op.num_attrs; ++a) {
      const spore_attr_def& ad = op.attr_defs[a];
      SPORE_CHECK(ad.name != nullptr && valid_op_name(ad.name), ErrorCode::invalid_argument,
                  "{}: attribute #{} has a NULL or invalid name", where, a);
      SPORE_CHECK(attr_names.insert(ad.name).second, ErrorCode::invalid_argument, "{}: attribute '{}' is declared twice",
                  where, ad.name);
      SPORE_CHECK(ad.kind == 0 || ad.kind == 1, ErrorCode::invalid_argument,
                  "{}: attribute '{}' has kind {} (0 = int64, 1 = float64)", where, ad.name, ad.kind);
    }
    SPORE_CHECK(op.num_kernels >= 1 && op.kernels != nullptr, ErrorCode::invalid_argument,
                "{} has no kernels (num_kernels = {})", where, op.num_kernels);
    std::set<int32_t> dts;
    for (int32_t k = 0; k < op.num_kernels; ++k) {
      const spore_kernel_def& kd = op.kernels[k];
      SPORE_CHECK(kd.dtype >= 0 && kd.dtype < num_dtypes, ErrorCode::invalid_argument,
                  "{}: kernel #{} has an invalid dtype code {} (0..{} are spore_dtype values)", where, k, kd.dtype,
                  num_dtypes - 1);
      SPORE_CHECK(kd.fn != nullptr, ErrorCode::invalid_argument, "{}: kernel #{} ({}) has a NULL function", where, k,
                  dtype_name(static_cast<DType>(kd.dtype)));
      SPORE_CHECK(dts.insert(kd.dtype).second, ErrorCode::invalid_argument, "{}: two kernels for dtype {}", where,
                  dtype_name(static_cast<DType>(kd.dtype)));
    }
    if (op.grad_op != nullptr) {
      SPORE_CHECK(!(op.traits & SPORE_TRAIT_NO_GRAD), ErrorCode::invalid_argument,
                  "{} has both SPORE_TRAIT_NO_GRAD and a grad_op ('{}')", where, op.grad_op);
      // The gradient op: in this plugin (checked below, after every name is known) or already registered.
      const spore_custom_op* own = nullptr;
      for (int32_t j = 0; j < pl.num_ops; ++j)
        if (pl.ops[j].name && std::strcmp(pl.ops[j].name, op.grad_op) == 0) own = &pl.ops[j];
      const int want_in = op.num_inputs + 2 * op.num_outputs;
      if (own) {
        SPORE_CHECK(own->num_inputs == want_in && own->num_outputs == op.num_inputs, ErrorCode::invalid_argument,
                    "{}: gradient op '{}' takes {} inputs and returns {} outputs; it must take {} (inputs, outputs, "
                    "output gradients) and return {} (one gradient per input)",
                    where, op.grad_op, own->num_inputs, own->num_outputs, want_in, op.num_inputs);
      } else {
        const OpDef* gd = op_registry().find(std::string_view(op.grad_op));
        SPORE_CHECK(gd != nullptr, ErrorCode::invalid_argument,
                    "{}: gradient op '{}' is neither in this plugin nor a registered op", where, op.grad_op);
        SPORE_CHECK(want_in >= gd->min_inputs && (gd->max_inputs < 0 || want_in <= gd->max_inputs),
                    ErrorCode::invalid_argument, "{}: gradient op '{}' cannot take {} inputs", where, op.grad_op,
                    want_in);
      }
    }
  }
}

// Registers one validated op.
void register_op(const spore_custom_op& op, const spore_plugin& pl, const Loaded& lib) {
  PluginOp& p = plugin_ops().emplace_back();
  p.op = &op;
  p.name = op.name;
  p.plugin = lib.info.name;
  p.path = lib.info.path;
  DTypeSet dtypes;
  for (int32_t k = 0; k < op.num_kernels; ++k) {
    p.kernels[op.kernels[k].dtype] = &op.kernels[k];
    dtypes = dtypes | DTypeSet{static_cast<DType>(op.kernels[k].dtype)};
  }
  OpDef d;
  d.name = op.name;
  d.doc = op.doc ? op.doc : "";
  for (int32_t i = 0; i < op.num_inputs; ++i) d.input_names.push_back(op.num_inputs == 1 ? "x" : fmt::format("x{}", i));
  d.min_inputs = d.max_inputs = op.num_inputs;
  for (int32_t a = 0; a < op.num_attrs; ++a) {
    const spore_attr_def& ad = op.attr_defs[a];
    p.attr_names.emplace_back(ad.name);
    p.attr_kinds.push_back(ad.kind);
    d.attrs.push_back(AttrSpec{ad.name, ad.kind == 0 ? AttrKind::i64 : AttrKind::f64,
                               ad.kind == 0 ? AttrValue(ad.default_i) : AttrValue(ad.default_f)});
  }
  d.dtypes = dtypes;
  d.dispatch_input = op.num_inputs > 0 ? 0 : -1;
  d.traits.bits = op.traits;
  // Elementwise plugin ops may be recomputed (remat); the elementwise fusion pass only fuses ops it knows.
  d.fusion = (op.traits & SPORE_TRAIT_ELEMENTWISE) ? FusionKind::elementwise : FusionKind::opaque;
  d.amp = AmpPolicy::follow;  // the precision pass keeps f32 where the plugin has no low-precision kernel
  const PluginOp* pp = &p;
  d.infer = [pp](const InferContext& c) { return plugin_infer(*pp, c); };
  if (op.grad_op) d.grad = [pp](const GradContext& g) { return plugin_grad(*pp, g); };
  d.plugin = lib.info.name;
  d.onnx_domain = pl.domain ? pl.domain : "spore.custom";
  const OpId id = op_registry().add_custom(std::move(d)).id;
  const auto index = static_cast<size_t>(op_index(id));
  SPORE_CHECK(index < max_op_ids, ErrorCode::invalid_argument, "too many custom ops");
  by_id()[index].store(pp, std::memory_order_release);
  KernelRegistry& kr = kernel_registry();
  for (int32_t k = 0; k < op.num_kernels; ++k) {
    const spore_kernel_def& kd = op.kernels[k];
    const DTypeSet one{static_cast<DType>(kd.dtype)};
    const char* impl = kd.impl ? kd.impl : "plugin";
    kr.add(Backend::cpu, id, one, plugin_kernel, impl);
    kr.add(Backend::reference, id, one, plugin_kernel, impl);
  }
  // The null backend counts every op with one shared counting kernel; reuse it.
  if (const KernelInfo* counter = kr.find(Backend::null, "relu"_op, DType::f32))
    kr.add(Backend::null, id, dtypes, counter->fn, counter->impl);
}

}  // namespace

const PluginInfo& load_custom_ops(const std::string& path) {
  init();
  std::lock_guard<std::mutex> lk(load_mutex());
  SPORE_CHECK(!path.empty(), ErrorCode::invalid_argument, "load_custom_ops: empty plugin path");
  // dlopen only searches the library path for names without '/'; a plugin is a file the user names.
  const std::string open_path = path.find('/') == std::string::npos ? "./" + path : path;
  dlerror();
  void* handle = dlopen(open_path.c_str(), RTLD_NOW | RTLD_LOCAL);
  if (handle == nullptr) {
    const char* e = dlerror();
    SPORE_FAIL(ErrorCode::io_error, "cannot load custom-op plugin '{}': {}", path, e ? e : "dlopen failed");
  }
  for (const Loaded& l : loaded()) {
    if (l.handle == handle) {  // the loader maps one file once, whatever path reached it
      dlclose(handle);
      return l.info;
    }
  }
  const spore_plugin* pl = nullptr;
  try {
    dlerror();
    void* sym = dlsym(handle, SPORE_PLUGIN_ENTRY_SYMBOL);
    SPORE_CHECK(sym != nullptr, ErrorCode::invalid_argument,
                "custom-op plugin '{}' does not export '{}' (declare it extern \"C\" SPORE_PLUGIN_EXPORT)", path,
                SPORE_PLUGIN_ENTRY_SYMBOL);
    pl = reinterpret_cast<spore_plugin_entry_fn>(sym)();
    SPORE_CHECK(pl != nullptr, ErrorCode::invalid_argument, "custom-op plugin '{}': {}() returned NULL", path,
                SPORE_PLUGIN_ENTRY_SYMBOL);
    SPORE_CHECK(pl->abi_version == SPORE_CUSTOM_OP_ABI_VERSION, ErrorCode::unsupported,
                "custom-op plugin '{}' was built against custom-op ABI version {}, but this spore implements version "
                "{}; rebuild it against this spore's include/spore/custom_op_abi.h",
                path, pl->abi_version, SPORE_CUSTOM_OP_ABI_VERSION);
    SPORE_CHECK(pl->struct_size >= sizeof(spore_plugin), ErrorCode::invalid_argument,
                "custom-op plugin '{}': struct_size {} is smaller than sizeof(spore_plugin) = {} of ABI version {}", path,
                pl->struct_size, sizeof(spore_plugin), SPORE_CUSTOM_OP_ABI_VERSION);
    SPORE_CHECK(pl->name != nullptr && pl->name[0] != '\0', ErrorCode::invalid_argument,
                "custom-op plugin '{}' has a NULL or empty name", path);
    for (const Loaded& l : loaded())
      SPORE_CHECK(l.info.name != pl->name, ErrorCode::invalid_argument,
                  "custom-op plugin '{}' ({}) has the same name as the already loaded plugin from '{}'", pl->name, path,
                  l.info.path);
    validate(*pl, path, pl->name);
  } catch (...) {
    dlclose(handle);  // nothing was registered: the library may go
    throw;
  }
  // From here on the registries point into the library, which therefore stays loaded.
  Loaded& l = loaded().emplace_back();
  l.handle = handle;
  l.info.path = path;
  l.info.name = pl->name;
  l.info.version = pl->version ? pl->version : "";
  l.info.domain = pl->domain ? pl->domain : "spore.custom";
  for (int32_t i = 0; i < pl->num_ops; ++i) {
    register_op(pl->ops[i], *pl, l);
    l.info.ops.emplace_back(pl->ops[i].name);
  }
  return l.info;
}

std::vector<PluginInfo> loaded_plugins() {
  std::lock_guard<std::mutex> lk(load_mutex());
  std::vector<PluginInfo> out;
  for (const Loaded& l : loaded()) out.push_back(l.info);
  return out;
}

}  // namespace spore
