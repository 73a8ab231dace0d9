// ONNX export: one spore graph -> one ModelProto at opset 17 (or 18), IR version 8.
//
// Every spore value keeps its name (graph inputs, outputs, intermediates); constants become initializers
// (raw_data) named after their value (or node) name. Each op maps to its ONNX twin with attributes translated
// exactly, or to a small subgraph of opset-17 ops whose helper values are named "<output>/<step>" so they
// never collide with spore names. Ops with no ONNX meaning (training-only backward kernels, custom ops, dropout
// in training mode) fail naming the node. Attributes are normalized against the op schema first, so graphs
// from the parser or the importer that omit defaults export the same as traced ones.
#include <onnx/onnx_pb.h>

#include <cmath>
#include <limits>
#include <unordered_map>
#include <unordered_set>

#include <fmt/format.h>

#include "base/error.h"
#include "io/file_util.h"
#include "io/onnx/onnx.h"
#include "ops/registry.h"
#include "ops/rnn.h"

namespace spore::io {
namespace {

using Ints = std::vector<int64_t>;

// IR version 8 is what opsets 17 and 18 were released with; newer IR versions are rejected by onnx 1.12
// and by ONNX Runtimes of that era.
constexpr int64_t kIrVersion = 8;

int32_t onnx_dtype(DType t) {
  switch (t) {
    case DType::f64: return onnx::TensorProto::DOUBLE;
    case DType::f32: return onnx::TensorProto::FLOAT;
    case DType::f16: return onnx::TensorProto::FLOAT16;
    case DType::bf16: return onnx::TensorProto::BFLOAT16;
    case DType::i64: return onnx::TensorProto::INT64;
    case DType::i32: return onnx::TensorProto::INT32;
    case DType::i8: return onnx::TensorProto::INT8;
    case DType::u8: return onnx::TensorProto::UINT8;
    case DType::boolean: return onnx::TensorProto::BOOL;
  }
  SPORE_FAIL(ErrorCode::internal, "export_onnx: unknown dtype {}", static_cast<int>(t));
}

void set_type(onnx::ValueInfoProto* vi, const TensorType& t) {
  onnx::TypeProto_Tensor* tt = vi->mutable_type()->mutable_tensor_type();
  tt->set_elem_type(onnx_dtype(t.dtype));
  onnx::TensorShapeProto* shape = tt->mutable_shape();
  for (const Dim& d : t.dims) {
    onnx::TensorShapeProto_Dimension* od = shape->add_dim();
    if (d.is_static())
      od->set_dim_value(d.size);
    else
      od->set_dim_param(d.sym);
  }
}

class Exporter {
 public:
  Exporter(const Graph& g, const OnnxExportOptions& opts) : g_(g), opts_(opts) {}

  std::string run() {
    SPORE_CHECK(opts_.opset >= 17 && opts_.opset <= 18, ErrorCode::unsupported,
                "export_onnx: opset {} is not supported (17 or 18)", opts_.opset);
    onnx::ModelProto model;
    model.set_ir_version(kIrVersion);
    model.set_producer_name(opts_.producer);
    onnx::OperatorSetIdProto* os = model.add_opset_import();
    os->set_domain("");
    os->set_version(opts_.opset);
    gp_ = model.mutable_graph();
    gp_->set_name(g_.name().empty() ? "main" : g_.name());

    // Reserve every spore value name first, so helper names made on the way never take one.
    for (const Node* n : g_.nodes())
      for (const Value* v : n->outputs)
        if (!v->name.empty()) used_.insert(v->name);
    for (const Node* n : g_.nodes())
      for (const Value* v : n->outputs) names_[v] = v->name.empty() ? fresh(fmt::format("v{}", v->id)) : v->name;

    for (const Value* v : g_.inputs()) {
      onnx::ValueInfoProto* vi = gp_->add_input();
      vi->set_name(names_.at(v));
      set_type(vi, v->type);
    }
    for (const Node* n : g_.nodes()) {
      if (n->op == "input"_op) continue;
      export_node(*n);
    }
    export_outputs();
    std::string bytes;
    SPORE_CHECK(model.SerializeToString(&bytes), ErrorCode::internal, "export_onnx: protobuf serialization failed");
    return bytes;
  }

 private:
  // ---- names and emission helpers

  std::string fresh(const std::string& base) {
    std::string n = base;
    for (int i = 1; used_.count(n); ++i) n = fmt::format("{}_{}", base, i);
    used_.insert(n);
    return n;
  }
  const std::string& name_of(const Value* v) const { return names_.at(v); }

  onnx::NodeProto* emit(const std::string& op_type, const std::vector<std::string>& ins,
                        const std::vector<std::string>& outs, const std::string& node_name = {}) {
    onnx::NodeProto* p = gp_->add_node();
    p->set_op_type(op_type);
    for (const auto& i : ins) p->add_input(i);
    for (const auto& o : outs) p->add_output(o);
    if (!node_name.empty()) p->set_name(node_name);
    return p;
  }

  static void attr_i(onnx::NodeProto* p, const char* name, int64_t v) {
    onnx::AttributeProto* a = p->add_attribute();
    a->set_name(name);
    a->set_type(onnx::AttributeProto::INT);
    a->set_i(v);
  }
  static void attr_f(onnx::NodeProto* p, const char* name, double v) {
    onnx::AttributeProto* a = p->add_attribute();
    a->set_name(name);
    a->set_type(onnx::AttributeProto::FLOAT);
    a->set_f(static_cast<float>(v));
  }
  static void attr_s(onnx::NodeProto* p, const char* name, const std::string& v) {
    onnx::AttributeProto* a = p->add_attribute();
    a->set_name(name);
    a->set_type(onnx::AttributeProto::STRING);
    a->set_s(v);
  }
  static void attr_ints(onnx::NodeProto* p, const char* name, const Ints& v) {
    onnx::AttributeProto* a = p->add_attribute();
    a->set_name(name);
    a->set_type(onnx::AttributeProto::INTS);
    for (int64_t x : v) a->add_ints(x);
  }

  static void fill_tensor(onnx::TensorProto* tp, const Tensor& t, const std::string& name) {
    const Tensor c = t.contiguous();
    tp->set_name(name);
    tp->set_data_type(onnx_dtype(c.dtype()));
    for (int64_t d : c.shape()) tp->add_dims(d);
    // raw_data is little-endian, which is how spore stores every dtype (bool as one byte, f16/bf16 as bits).
    if (c.numel() > 0) tp->set_raw_data(static_cast<const char*>(c.raw_data()), c.nbytes());
  }

  std::string add_initializer(const Tensor& t, const std::string& name) {
    fill_tensor(gp_->add_initializer(), t, name);
    return name;
  }
  // A 1-D i64 initializer (shapes, axes, pads...) named "<base>/<what>".
  std::string ints_init(const Ints& v, const std::string& base, const char* what) {
    Tensor t = Tensor::empty({static_cast<int64_t>(v.size())}, DType::i64);
    std::copy(v.begin(), v.end(), t.data<int64_t>());
    return add_initializer(t, fresh(fmt::format("{}/{}", base, what)));
  }
  // A scalar initializer of `dtype` (converted as spore converts: integers truncate).
  std::string scalar_init(double v, DType dtype, const std::string& base, const char* what) {
    return add_initializer(Tensor::scalar(v, dtype), fresh(fmt::format("{}/{}", base, what)));
  }
  std::string tmp(const std::string& base, const char* what) { return fresh(fmt::format("{}/{}", base, what)); }

  // ---- nodes

  [[noreturn]] void unsupported(const Node& n, const std::string& why) const {
    SPORE_FAIL(ErrorCode::unsupported, "export_onnx: node {} has no ONNX equivalent ({})", n.label(), why);
  }

  // resample as ONNX spells Resize's taps: per tap t, Gather(x, indices[:, t], axis) * weights[:, t] (reshaped to
  // broadcast along axis), summed in tap order.
  void export_resample(const Node& n, const Attrs& a, const std::vector<std::string>& in, const std::string& y) {
    const TensorType& it = n.input(1)->type;
    const int rank = n.input(0)->type.rank();
    SPORE_CHECK(it.dims[0].is_static() && it.dims[1].is_static(), ErrorCode::unsupported,
                "export_onnx: node {} has run-time resample taps {}", n.label(), it.str());
    int64_t axis = a.i("axis");
    if (axis < 0) axis += rank;
    const int64_t out = it.dims[0].size, taps = it.dims[1].size;
    Ints wshape(static_cast<size_t>(rank), 1);
    wshape[static_cast<size_t>(axis)] = out;
    const std::string shape = ints_init(wshape, y, "wshape");
    const std::string& nm = n.name;
    auto sub = [&](const std::string& what) { return nm.empty() ? std::string() : nm + "/" + what; };
    std::string acc;
    for (int64_t t = 0; t < taps; ++t) {
      const std::string tag = fmt::format("tap{}", t);
      const std::string col = scalar_init(static_cast<double>(t), DType::i64, y, "tap");
      const std::string ids = tmp(y, "ids"), w = tmp(y, "w"), wr = tmp(y, "wr"), g = tmp(y, "g");
      attr_i(emit("Gather", {in[1], col}, {ids}, sub(tag + "/ids")), "axis", 1);
      attr_i(emit("Gather", {in[2], col}, {w}, sub(tag + "/w")), "axis", 1);
      emit("Reshape", {w, shape}, {wr}, sub(tag + "/wr"));
      attr_i(emit("Gather", {in[0], ids}, {g}, sub(tag + "/gather")), "axis", axis);
      const std::string m = taps == 1 ? y : tmp(y, "m");
      emit("Mul", {g, wr}, {m}, taps == 1 ? nm : sub(tag + "/mul"));
      if (t == 0) {
        acc = m;
        continue;
      }
      const std::string sum = t == taps - 1 ? y : tmp(y, "sum");
      emit("Add", {acc, m}, {sum}, t == taps - 1 ? nm : sub(tag + "/add"));
      acc = sum;
    }
  }

  void export_constant(const Node& n) {
    const Value* v = n.output(0);
    // The value's own name when it has one, else the node's !name, else a generated one.
    if (v->name.empty() && !n.name.empty()) {
      used_.erase(names_[v]);
      names_[v] = fresh(n.name);
    }
    SPORE_CHECK(n.payload.defined(), ErrorCode::invalid_argument, "export_onnx: constant {} has no data", n.label());
    SPORE_CHECK(n.payload.dtype() == v->type.dtype && TensorType::of(n.payload.dtype(), n.payload.shape()) == v->type,
                ErrorCode::invalid_argument, "export_onnx: constant {} holds {} data for type {}", n.label(),
                TensorType::of(n.payload.dtype(), n.payload.shape()).str(), v->type.str());
    add_initializer(n.payload, names_[v]);
  }

  void export_node(const Node& n) {
    if (n.op == "constant"_op) return export_constant(n);
    const OpDef* def = op_registry().find(n.op);
    if (!def || !is_builtin_op(n.op)) unsupported(n, "a custom op");
    const Attrs a = def->normalize(n.attrs, n.label());
    std::vector<std::string> in;
    for (const Value* v : n.inputs) in.push_back(name_of(v));
    std::vector<std::string> out;
    for (const Value* v : n.outputs) out.push_back(name_of(v));
    const std::string& y = out.at(0);
    const std::string& nm = n.name;
    const DType xt = n.inputs.empty() ? n.output(0)->type.dtype : n.input(0)->type.dtype;
    const int rank = n.inputs.empty() ? 0 : n.input(0)->type.rank();
    auto sub = [&](const char* what) { return nm.empty() ? std::string() : nm + "/" + what; };
    auto simple = [&](const char* op_type) { return emit(op_type, in, out, nm); };

    switch (n.op) {
      case "identity"_op: simple("Identity"); return;
      case "neg"_op: simple("Neg"); return;
      case "abs"_op: simple("Abs"); return;
      case "exp"_op: simple("Exp"); return;
      case "log"_op: simple("Log"); return;
      case "sqrt"_op: simple("Sqrt"); return;
      case "rsqrt"_op: {
        const std::string s = tmp(y, "sqrt");
        emit("Sqrt", in, {s}, sub("sqrt"));
        emit("Reciprocal", {s}, out, nm);
        return;
      }
      case "reciprocal"_op: simple("Reciprocal"); return;
      case "tanh"_op: simple("Tanh"); return;
      case "sigmoid"_op: simple("Sigmoid"); return;
      case "relu"_op: simple("Relu"); return;
      case "leaky_relu"_op: attr_f(simple("LeakyRelu"), "alpha", a.f("alpha")); return;
      case "gelu"_op: return export_gelu(n, a, in[0], y);
      case "silu"_op: {
        const std::string s = tmp(y, "sigmoid");
        emit("Sigmoid", in, {s}, sub("sigmoid"));
        emit("Mul", {in[0], s}, out, nm);
        return;
      }
      case "hardsigmoid"_op: {
        onnx::NodeProto* node = simple("HardSigmoid");
        attr_f(node, "alpha", a.f("alpha"));
        attr_f(node, "beta", a.f("beta"));
        return;
      }
      case "hardswish"_op: simple("HardSwish"); return;
      case "softplus"_op: simple("Softplus"); return;
      case "mish"_op: {  // ONNX Mish is opset 18; the export is opset 17
        const std::string sp = tmp(y, "softplus"), t = tmp(y, "tanh");
        emit("Softplus", in, {sp}, sub("softplus"));
        emit("Tanh", {sp}, {t}, sub("tanh"));
        emit("Mul", {in[0], t}, out, nm);
        return;
      }
      case "erf"_op: simple("Erf"); return;
      case "sin"_op: simple("Sin"); return;
      case "cos"_op: simple("Cos"); return;
      case "asin"_op: simple("Asin"); return;
      case "acos"_op: simple("Acos"); return;
      case "atan"_op: simple("Atan"); return;
      case "floor"_op: simple("Floor"); return;
      case "ceil"_op: simple("Ceil"); return;
      case "round"_op: simple("Round"); return;  // both round half to even
      case "sign"_op: simple("Sign"); return;
      case "clip"_op: {
        const std::string lo = scalar_init(a.f("min"), xt, y, "min"), hi = scalar_init(a.f("max"), xt, y, "max");
        emit("Clip", {in[0], lo, hi}, out, nm);
        return;
      }
      case "logical_not"_op: simple("Not"); return;
      case "cast"_op: attr_i(simple("Cast"), "to", onnx_dtype(a.dtype("dtype"))); return;

      case "add"_op: simple("Add"); return;
      case "sub"_op: simple("Sub"); return;
      case "mul"_op: simple("Mul"); return;
      case "div"_op: simple("Div"); return;
      case "pow"_op: simple("Pow"); return;
      case "maximum"_op: simple("Max"); return;
      case "minimum"_op: simple("Min"); return;
      case "mod"_op: return export_mod(n, a, in, y);
      case "eq"_op: simple("Equal"); return;
      case "ne"_op: {
        const std::string e = tmp(y, "eq");
        emit("Equal", in, {e}, sub("eq"));
        emit("Not", {e}, out, nm);
        return;
      }
      case "lt"_op: simple("Less"); return;
      case "le"_op: simple("LessOrEqual"); return;
      case "gt"_op: simple("Greater"); return;
      case "ge"_op: simple("GreaterOrEqual"); return;
      case "logical_and"_op: simple("And"); return;
      case "logical_or"_op: simple("Or"); return;
      case "where"_op: simple("Where"); return;

      case "reduce_sum"_op:
      case "reduce_mean"_op:
      case "reduce_max"_op:
      case "reduce_min"_op:
      case "reduce_prod"_op: {
        static const std::unordered_map<OpId, const char*> types{{"reduce_sum"_op, "ReduceSum"},
                                                                 {"reduce_mean"_op, "ReduceMean"},
                                                                 {"reduce_max"_op, "ReduceMax"},
                                                                 {"reduce_min"_op, "ReduceMin"},
                                                                 {"reduce_prod"_op, "ReduceProd"}};
        reduce(types.at(n.op), in[0], a.ints("axes"), a.b("keepdims"), y, nm);
        return;
      }
      case "argmax"_op:
      case "argmin"_op: {
        onnx::NodeProto* p = simple(n.op == "argmax"_op ? "ArgMax" : "ArgMin");
        attr_i(p, "axis", a.i("axis"));
        attr_i(p, "keepdims", a.b("keepdims"));
        return;  // select_last_index=0: the first index on ties, like spore
      }
      case "softmax"_op: attr_i(simple("Softmax"), "axis", a.i("axis")); return;
      case "log_softmax"_op: attr_i(simple("LogSoftmax"), "axis", a.i("axis")); return;
      case "cumsum"_op: {
        Tensor ax = Tensor::empty({}, DType::i64);
        *ax.data<int64_t>() = a.i("axis");
        const std::string axis = add_initializer(ax, fresh(y + "/axis"));
        onnx::NodeProto* p = emit("CumSum", {in[0], axis}, out, nm);
        attr_i(p, "exclusive", a.b("exclusive"));
        attr_i(p, "reverse", a.b("reverse"));
        return;
      }
      case "topk"_op: {
        const std::string k = ints_init({a.i("k")}, y, "k");
        onnx::NodeProto* p = emit("TopK", {in[0], k}, out, nm);
        attr_i(p, "axis", a.i("axis"));
        attr_i(p, "largest", a.b("largest"));
        // spore returns sorted order either way; say so, so ONNX consumers agree with spore.
        attr_i(p, "sorted", 1);
        return;
      }

      case "matmul"_op: {
        std::string lhs = in[0], rhs = in[1];
        if (a.b("transpose_a") && n.input(0)->type.rank() >= 2) lhs = transpose_last2(lhs, n.input(0)->type.rank(), y, "a_t", sub("a_t"));
        if (a.b("transpose_b") && n.input(1)->type.rank() >= 2) rhs = transpose_last2(rhs, n.input(1)->type.rank(), y, "b_t", sub("b_t"));
        emit("MatMul", {lhs, rhs}, out, nm);
        return;
      }
      case "linear"_op: return emit_linear(in, rank, y, nm);
      case "conv2d"_op: {
        onnx::NodeProto* p = simple("Conv");
        const auto& wd = n.input(1)->type.dims;
        attr_ints(p, "kernel_shape", {wd[2].size, wd[3].size});
        attr_ints(p, "strides", a.ints("stride"));
        attr_ints(p, "dilations", a.ints("dilation"));
        attr_i(p, "group", a.i("groups"));
        pad_attrs(p, a);
        return;
      }
      case "conv_transpose2d"_op: {
        onnx::NodeProto* p = simple("ConvTranspose");
        const auto& wd = n.input(1)->type.dims;
        attr_ints(p, "kernel_shape", {wd[2].size, wd[3].size});
        attr_ints(p, "strides", a.ints("stride"));
        attr_ints(p, "dilations", a.ints("dilation"));
        attr_i(p, "group", a.i("groups"));
        attr_ints(p, "pads", a.ints("padding"));  // (top, left, bottom, right) is ONNX's begins-then-ends order
        attr_ints(p, "output_padding", a.ints("output_padding"));
        return;
      }
      case "max_pool2d"_op:
      case "avg_pool2d"_op: {
        const bool is_max = n.op == "max_pool2d"_op;
        onnx::NodeProto* p = simple(is_max ? "MaxPool" : "AveragePool");
        const Ints& kernel = a.ints("kernel");
        attr_ints(p, "kernel_shape", kernel);
        attr_ints(p, "strides", a.ints("stride").empty() ? kernel : a.ints("stride"));
        if (is_max) attr_ints(p, "dilations", a.ints("dilation"));
        attr_i(p, "ceil_mode", a.b("ceil_mode"));
        if (!is_max) attr_i(p, "count_include_pad", a.b("count_include_pad"));
        pad_attrs(p, a);
        return;
      }
      case "global_avg_pool"_op: simple("GlobalAveragePool"); return;
      case "conv3d"_op:
      case "conv_transpose3d"_op: {
        const bool transpose = n.op == "conv_transpose3d"_op;
        onnx::NodeProto* p = simple(transpose ? "ConvTranspose" : "Conv");
        const auto& wd = n.input(1)->type.dims;
        attr_ints(p, "kernel_shape", {wd[2].size, wd[3].size, wd[4].size});
        attr_ints(p, "strides", a.ints("stride"));
        attr_ints(p, "dilations", a.ints("dilation"));
        attr_i(p, "group", a.i("groups"));
        if (transpose) {
          attr_ints(p, "pads", a.ints("padding"));  // begins then ends, ONNX's order
          attr_ints(p, "output_padding", a.ints("output_padding"));
        } else {
          pad_attrs(p, a);
        }
        return;
      }
      case "max_pool3d"_op:
      case "avg_pool3d"_op: {
        const bool is_max = n.op == "max_pool3d"_op;
        onnx::NodeProto* p = simple(is_max ? "MaxPool" : "AveragePool");
        const Ints& kernel = a.ints("kernel");
        attr_ints(p, "kernel_shape", kernel);
        attr_ints(p, "strides", a.ints("stride").empty() ? kernel : a.ints("stride"));
        if (is_max) attr_ints(p, "dilations", a.ints("dilation"));
        attr_i(p, "ceil_mode", a.b("ceil_mode"));
        if (!is_max) attr_i(p, "count_include_pad", a.b("count_include_pad"));
        pad_attrs(p, a);
        return;
      }
      case "batch_norm"_op: attr_f(simple("BatchNormalization"), "epsilon", a.f("epsilon")); return;
      case "layer_norm"_op: return export_layer_norm(n, a, in, y);
      case "rms_norm"_op: return export_rms_norm(n, a, in, y);
      case "group_norm"_op: return export_group_norm(n, a, in, y);
      case "dropout"_op:
        if (a.b("training") && a.f("p") > 0)
          unsupported(n, "dropout in training mode; export the model in eval mode (set_train(false))");
        emit("Identity", {in[0]}, out, nm);  // the offset input only keys the mask
        return;

      case "reshape"_op: {
        const Ints& shape = a.ints("shape");
        onnx::NodeProto* p = emit("Reshape", {in[0], ints_init(shape, y, "shape")}, out, nm);
        // spore's 0 is a literal size 0; ONNX's default reads 0 as "copy the input dim".
        if (std::find(shape.begin(), shape.end(), 0) != shape.end()) attr_i(p, "allowzero", 1);
        return;
      }
      case "transpose"_op: {
        Ints perm = a.ints("perm");
        if (perm.empty())
          for (int i = rank - 1; i >= 0; --i) perm.push_back(i);
        for (int64_t& x : perm)
          if (x < 0) x += rank;
        attr_ints(simple("Transpose"), "perm", perm);
        return;
      }
      case "concat"_op: attr_i(simple("Concat"), "axis", a.i("axis")); return;
      case "split"_op: {
        const std::string sizes = ints_init(a.ints("sizes"), y, "split");
        attr_i(emit("Split", {in[0], sizes}, out, nm), "axis", a.i("axis"));
        return;
      }
      case "slice"_op: {
        const Ints& starts = a.ints("starts");
        std::vector<std::string> si = {in[0], ints_init(starts, y, "starts"), ints_init(a.ints("ends"), y, "ends")};
        Ints axes = a.ints("axes");
        const Ints& steps = a.ints("steps");
        if (axes.empty() && !steps.empty())
          for (size_t i = 0; i < starts.size(); ++i) axes.push_back(static_cast<int64_t>(i));
        if (!axes.empty()) si.push_back(ints_init(axes, y, "axes"));
        if (!steps.empty()) si.push_back(ints_init(steps, y, "steps"));
        emit("Slice", si, out, nm);
        return;
      }
      case "gather"_op: attr_i(simple("Gather"), "axis", a.i("axis")); return;
      case "gather_elements"_op: attr_i(simple("GatherElements"), "axis", a.i("axis")); return;
      case "scatter"_op: {
        onnx::NodeProto* p = simple("ScatterElements");
        attr_i(p, "axis", a.i("axis"));
        const std::string& r = a.s("reduction");
        SPORE_CHECK(opts_.opset >= 18 || (r != "max" && r != "min"), ErrorCode::unsupported,
                    "export_onnx: node {}: ScatterElements reduction '{}' needs opset 18", n.label(), r);
        if (r != "none") attr_s(p, "reduction", r);
        return;
      }
      case "index_select"_op: attr_i(simple("Gather"), "axis", a.i("axis")); return;  // 1-D indices
      case "scatter_nd"_op: {  // reductions max/min are ScatterND-18's
        const std::string& r = a.s("reduction");
        SPORE_CHECK(opts_.opset >= 18 || (r != "max" && r != "min"), ErrorCode::unsupported,
                    "export_onnx: node {}: ScatterND reduction '{}' needs opset 18", n.label(), r);
        onnx::NodeProto* p = simple("ScatterND");
        if (r != "none") attr_s(p, "reduction", r);
        return;
      }
      case "gather_nd"_op: attr_i(simple("GatherND"), "batch_dims", a.i("batch_dims")); return;
      case "grid_sample"_op: {
        onnx::NodeProto* p = simple("GridSample");
        attr_s(p, "mode", a.s("mode"));
        attr_s(p, "padding_mode", a.s("padding_mode"));
        attr_i(p, "align_corners", a.b("align_corners") ? 1 : 0);
        return;
      }
      case "roi_align"_op: {
        onnx::NodeProto* p = simple("RoiAlign");
        attr_i(p, "output_height", a.i("output_height"));
        attr_i(p, "output_width", a.i("output_width"));
        attr_i(p, "sampling_ratio", a.i("sampling_ratio"));
        attr_f(p, "spatial_scale", a.f("spatial_scale"));
        attr_s(p, "mode", a.s("mode"));
        attr_s(p, "coordinate_transformation_mode", a.s("coordinate_transformation_mode"));
        return;
      }
      case "einsum"_op: attr_s(simple("Einsum"), "equation", a.s("equation")); return;
      case "resample"_op: return export_resample(n, a, in, y);
      case "embedding"_op: attr_i(simple("Gather"), "axis", 0); return;
      case "pad"_op: {
        std::vector<std::string> pi = {in[0], ints_init(a.ints("pads"), y, "pads")};
        const std::string& mode = a.s("mode");
        if (mode == "constant") pi.push_back(scalar_init(a.f("value"), xt, y, "value"));
        attr_s(emit("Pad", pi, out, nm), "mode", mode);
        return;
      }
      case "expand"_op: emit("Expand", {in[0], ints_init(a.ints("shape"), y, "shape")}, out, nm); return;
      case "squeeze"_op: {
        // spore's empty axes squeeze the static size-1 dims only; ONNX's would also drop run-time ones.
        Ints axes = a.ints("axes");
        if (axes.empty()) {
          const auto& d = n.input(0)->type.dims;
          for (int i = 0; i < rank; ++i)
            if (d[i].is_static() && d[i].size == 1) axes.push_back(i);
        }
        emit("Squeeze", {in[0], ints_init(axes, y, "axes")}, out, nm);
        return;
      }
      case "unsqueeze"_op: emit("Unsqueeze", {in[0], ints_init(a.ints("axes"), y, "axes")}, out, nm); return;
      case "flatten"_op: attr_i(simple("Flatten"), "axis", a.i("axis")); return;
      case "tile"_op: emit("Tile", {in[0], ints_init(a.ints("repeats"), y, "repeats")}, out, nm); return;
      case "one_hot"_op: {
        const DType vt = a.dtype("dtype");
        const std::string depth = ints_init({a.i("depth")}, y, "depth");
        const std::string values = add_initializer(
            Tensor::from_doubles({a.f("off_value"), a.f("on_value")}, {2}, vt), fresh(y + "/values"));
        attr_i(emit("OneHot", {in[0], depth, values}, out, nm), "axis", a.i("axis"));
        return;
      }
      case "arange"_op: return export_arange(n, a, y);
      case "full"_op: {
        onnx::NodeProto* p = emit("ConstantOfShape", {ints_init(a.ints("shape"), y, "shape")}, out, nm);
        onnx::AttributeProto* at = p->add_attribute();
        at->set_name("value");
        at->set_type(onnx::AttributeProto::TENSOR);
        fill_tensor(at->mutable_t(), Tensor::from_doubles({a.f("value")}, {1}, a.dtype("dtype")), "value");
        return;
      }
      case "quantize_linear"_op: attr_i(simple("QuantizeLinear"), "axis", a.i("axis")); return;
      case "dequantize_linear"_op: attr_i(simple("DequantizeLinear"), "axis", a.i("axis")); return;
      case "qconv2d"_op:
      case "qlinear"_op: {
        // ONNX's QLinear* ops requantize their output; spore's give f32, which is dequantize + the float op.
        const std::string xf = tmp(y, "x_f32"), wf = tmp(y, "w_f32");
        emit("DequantizeLinear", {in[0], in[1], in[2]}, {xf}, sub("x_f32"));
        attr_i(emit("DequantizeLinear", {in[3], in[4]}, {wf}, sub("w_f32")), "axis", 0);
        std::vector<std::string> fi = {xf, wf};
        if (in.size() > 5) fi.push_back(in[5]);
        if (n.op == "qlinear"_op) return emit_linear(fi, rank, y, nm);
        onnx::NodeProto* p = emit("Conv", fi, out, nm);
        const auto& wd = n.input(3)->type.dims;
        attr_ints(p, "kernel_shape", {wd[2].size, wd[3].size});
        attr_ints(p, "strides", a.ints("stride"));
        attr_ints(p, "dilations", a.ints("dilation"));
        attr_i(p, "group", a.i("groups"));
        pad_attrs(p, a);
        return;
      }
      case "rnn_sequence"_op: return export_rnn(n, a, in, out);
      case "conv2d_weight_grad"_op:
      case "max_pool2d_grad"_op: unsupported(n, "a training-only backward op");
      case "input"_op:
      case "constant"_op: return;
      default: break;
    }
    unsupported(n, "no mapping for this op");
  }

  // rnn_sequence as ONNX's LSTM / GRU / RNN. Its input is already the projection xw [S, B, D*G*H], so X = xw and W
  // selects each direction's block (an identity: x * 1 + 0s, the same values; re-imported, the matmul gives xw
  // back); rb goes to B's R half; activation_alpha/beta list only the values the activations use, as ONNX reads them.
  void export_rnn(const Node& n, const Attrs& a, const std::vector<std::string>& in,
                  const std::vector<std::string>& out) {
    const rnn::Cell cell = rnn::cell_of(a);
    const TensorType& xt = n.input(0)->type;
    const TensorType& rt = n.input(1)->type;
    SPORE_CHECK(xt.is_static(), ErrorCode::unsupported, "export_onnx: node {} has run-time shapes {}", n.label(),
                xt.str());
    const int64_t D = rnn::directions_of(a), H = rt.dims[2].size, GH = rt.dims[1].size;
    const DType dt = xt.dtype;
    const std::string& y = out.at(0);
    std::vector<double> eye(static_cast<size_t>(D * GH * D * GH), 0.0);
    for (int64_t d = 0; d < D; ++d)
      for (int64_t j = 0; j < GH; ++j) eye[static_cast<size_t>((d * GH + j) * D * GH + d * GH + j)] = 1.0;
    const std::string w = add_initializer(Tensor::from_doubles(eye, {D, GH, D * GH}, dt), fresh(y + "/W"));
    std::vector<std::string> ins{in[0], w, in[1], "", "", in[2]};
    if (in.size() > 3) {  // B = [0 (W's half), rb]
      const std::string zeros = add_initializer(Tensor::zeros({D, GH}, dt), fresh(y + "/Wb"));
      ins[3] = tmp(y, "B");
      attr_i(emit("Concat", {zeros, in[3]}, {ins[3]}, n.name.empty() ? "" : n.name + "/B"), "axis", 1);
    }
    if (in.size() > 4) {
      ins[4] = in[4];
      if (n.input(4)->type.dtype != DType::i32) {
        ins[4] = tmp(y, "seq_lens");
        attr_i(emit("Cast", {in[4]}, {ins[4]}, n.name.empty() ? "" : n.name + "/seq_lens"), "to",
               onnx::TensorProto::INT32);
      }
    }
    if (in.size() > 5) ins.push_back(in[5]);
    if (in.size() > 6) ins.push_back(in[6]);
    while (!ins.empty() && ins.back().empty()) ins.pop_back();
    onnx::NodeProto* p = emit(cell == rnn::Cell::lstm  ? "LSTM"
                              : cell == rnn::Cell::gru ? "GRU"
                                                       : "RNN",
                              ins, out, n.name);
    attr_i(p, "hidden_size", H);
    attr_s(p, "direction", a.s("direction"));
    if (a.f("clip") > 0) attr_f(p, "clip", a.f("clip"));
    if (cell == rnn::Cell::gru) attr_i(p, "linear_before_reset", a.b("linear_before_reset") ? 1 : 0);
    if (cell == rnn::Cell::lstm && a.b("input_forget")) attr_i(p, "input_forget", 1);
    const std::vector<rnn::Activation> acts = rnn::activations_of(a);
    onnx::AttributeProto* names = p->add_attribute();
    names->set_name("activations");
    names->set_type(onnx::AttributeProto::STRINGS);
    onnx::AttributeProto* alpha = nullptr;
    onnx::AttributeProto* beta = nullptr;
    for (const rnn::Activation& act : acts) {
      names->add_strings(rnn::activation_name(act.kind));
      const bool uses_alpha = act.kind == rnn::Act::leaky_relu || act.kind == rnn::Act::hard_sigmoid ||
                              act.kind == rnn::Act::affine || act.kind == rnn::Act::scaled_tanh ||
                              act.kind == rnn::Act::elu || act.kind == rnn::Act::thresholded_relu;
      const bool uses_beta =
          act.kind == rnn::Act::hard_sigmoid || act.kind == rnn::Act::affine || act.kind == rnn::Act::scaled_tanh;
      auto list = [&](onnx::AttributeProto*& l, const char* nm) {
        if (!l) {
          l = p->add_attribute();
          l->set_name(nm);
          l->set_type(onnx::AttributeProto::FLOATS);
        }
        return l;
      };
      if (uses_alpha) list(alpha, "activation_alpha")->add_floats(static_cast<float>(act.alpha));
      if (uses_beta) list(beta, "activation_beta")->add_floats(static_cast<float>(act.beta));
    }
  }

  // y = x w^T (+ b): Gemm for 2-D x, else MatMul with the transposed weight (+ Add).
  void emit_linear(const std::vector<std::string>& in, int rank, const std::string& y, const std::string& nm) {
    auto sub = [&](const char* what) { return nm.empty() ? std::string() : nm + "/" + what; };
    if (rank == 2) {
      attr_i(emit("Gemm", in, {y}, nm), "transB", 1);
      return;
    }
    const std::string wt = tmp(y, "w_t");
    attr_ints(emit("Transpose", {in[1]}, {wt}, sub("w_t")), "perm", {1, 0});
    if (in.size() <= 2) {
      emit("MatMul", {in[0], wt}, {y}, nm);
      return;
    }
    const std::string mm = tmp(y, "matmul");
    emit("MatMul", {in[0], wt}, {mm}, sub("matmul"));
    emit("Add", {mm, in[2]}, {y}, nm);
  }

  // conv/pool padding: pad_mode "same" is SAME_UPPER (the odd pad at the end) in both, "valid" is VALID.
  static void pad_attrs(onnx::NodeProto* p, const Attrs& a) {
    const std::string& mode = a.s("pad_mode");
    if (mode == "same")
      attr_s(p, "auto_pad", "SAME_UPPER");
    else if (mode == "valid")
      attr_s(p, "auto_pad", "VALID");
    else
      attr_ints(p, "pads", a.ints("padding"));
  }

  std::string transpose_last2(const std::string& x, int r, const std::string& base, const char* what,
                              const std::string& node_name) {
    Ints perm;
    for (int i = 0; i < r; ++i) perm.push_back(i);
    std::swap(perm[r - 1], perm[r - 2]);
    const std::string t = tmp(base, what);
    attr_ints(emit("Transpose", {x}, {t}, node_name), "perm", perm);
    return t;
  }

  // ReduceSum takes axes as an input from opset 13, the others from opset 18 (an attribute before).
  // Empty axes means all axes in both spore and ONNX (noop_with_empty_axes stays 0).
  void reduce(const char* op_type, const std::string& x, const Ints& axes, bool keepdims, const std::string& y,
              const std::string& node_name) {
    const bool as_input = std::string_view(op_type) == "ReduceSum" || opts_.opset >= 18;
    std::vector<std::string> ins = {x};
    if (as_input && !axes.empty()) ins.push_back(ints_init(axes, y, "axes"));
    onnx::NodeProto* p = emit(op_type, ins, {y}, node_name);
    if (!as_input && !axes.empty()) attr_ints(p, "axes", axes);
    attr_i(p, "keepdims", keepdims);
  }

  // Gelu is an opset-20 op: write the composition it is defined by.
  void export_gelu(const Node& n, const Attrs& a, const std::string& x, const std::string& y) {
    const DType t = n.input(0)->type.dtype;
    const std::string& nm = n.name;
    auto sub = [&](const char* what) { return nm.empty() ? std::string() : nm + "/" + what; };
    std::string inner;  // 1 + erf(x/sqrt2) or 1 + tanh(sqrt(2/pi)(x + 0.044715 x^3))
    if (a.s("approximate") == "tanh") {
      const std::string x2 = tmp(y, "x2"), x3 = tmp(y, "x3"), kx3 = tmp(y, "kx3"), u = tmp(y, "u"), cu = tmp(y, "cu"),
                        th = tmp(y, "tanh");
      emit("Mul", {x, x}, {x2}, sub("x2"));
      emit("Mul", {x2, x}, {x3}, sub("x3"));
      emit("Mul", {x3, scalar_init(0.044715, t, y, "k")}, {kx3}, sub("kx3"));
      emit("Add", {x, kx3}, {u}, sub("u"));
      emit("Mul", {u, scalar_init(0.79788456080286535588, t, y, "sqrt_2_over_pi")}, {cu}, sub("cu"));
      emit("Tanh", {cu}, {th}, sub("tanh"));
      inner = th;
    } else {
      const std::string xs = tmp(y, "x_over_sqrt2"), e = tmp(y, "erf");
      emit("Mul", {x, scalar_init(0.70710678118654752440, t, y, "inv_sqrt2")}, {xs}, sub("x_over_sqrt2"));
      emit("Erf", {xs}, {e}, sub("erf"));
      inner = e;
    }
    const std::string one_plus = tmp(y, "one_plus"), half_x = tmp(y, "half_x");
    emit("Add", {inner, scalar_init(1.0, t, y, "one")}, {one_plus}, sub("one_plus"));
    emit("Mul", {x, scalar_init(0.5, t, y, "half")}, {half_x}, sub("half_x"));
    emit("Mul", {half_x, one_plus}, {y}, nm);
  }

  // ONNX Mod with fmod=0 is integers-only; for floats, the Python-style remainder is fmod plus the divisor when
  // the signs differ (exactly what spore computes).
  void export_mod(const Node& n, const Attrs& a, const std::vector<std::string>& in, const std::string& y) {
    const DType t = n.input(0)->type.dtype;
    const std::string& nm = n.name;
    if (a.b("fmod") || !is_floating(t)) {
      attr_i(emit("Mod", in, {y}, nm), "fmod", a.b("fmod") ? 1 : 0);
      return;
    }
    auto sub = [&](const char* what) { return nm.empty() ? std::string() : nm + "/" + what; };
    const std::string r = tmp(y, "fmod"), zero = scalar_init(0.0, t, y, "zero");
    attr_i(emit("Mod", in, {r}, sub("fmod")), "fmod", 1);
    const std::string r_zero = tmp(y, "r_zero"), r_nonzero = tmp(y, "r_nonzero"), r_neg = tmp(y, "r_neg"),
                      b_neg = tmp(y, "b_neg"), signs_differ = tmp(y, "signs_differ"), fix = tmp(y, "fix"),
                      shifted = tmp(y, "shifted");
    emit("Equal", {r, zero}, {r_zero}, sub("r_zero"));
    emit("Not", {r_zero}, {r_nonzero}, sub("r_nonzero"));
    emit("Less", {r, zero}, {r_neg}, sub("r_neg"));
    emit("Less", {in[1], zero}, {b_neg}, sub("b_neg"));
    const std::string same_sign = tmp(y, "same_sign");
    emit("Equal", {r_neg, b_neg}, {same_sign}, sub("same_sign"));
    emit("Not", {same_sign}, {signs_differ}, sub("signs_differ"));
    emit("And", {r_nonzero, signs_differ}, {fix}, sub("fix"));
    emit("Add", {r, in[1]}, {shifted}, sub("shifted"));
    emit("Where", {fix, shifted, r}, {y}, nm);
  }

  // LayerNormalization (opset 17) needs a Scale input: ones of the normalized shape when spore has no weight.
  void export_layer_norm(const Node& n, const Attrs& a, const std::vector<std::string>& in, const std::string& y) {
    const TensorType& xt = n.input(0)->type;
    int64_t axis = a.i("axis");
    if (axis < 0) axis += xt.rank();
    std::vector<std::string> li = {in[0]};
    if (in.size() > 1) {
      li.push_back(in[1]);
    } else {
      Shape norm;
      for (int64_t d = axis; d < xt.rank(); ++d) {
        SPORE_CHECK(xt.dims[d].is_static(), ErrorCode::unsupported,
                    "export_onnx: node {} normalizes over the symbolic dim {} without a weight (ONNX needs a Scale "
                    "of static shape)", n.label(), xt.dims[d].str());
        norm.push_back(xt.dims[d].size);
      }
      Tensor ones = Tensor::empty(norm, xt.dtype);
      std::vector<double> v(static_cast<size_t>(ones.numel()), 1.0);
      li.push_back(add_initializer(Tensor::from_doubles(v, norm, xt.dtype), fresh(y + "/scale")));
    }
    if (in.size() > 2) li.push_back(in[2]);
    onnx::NodeProto* p = emit("LayerNormalization", li, {y}, n.name);
    attr_i(p, "axis", a.i("axis"));
    attr_f(p, "epsilon", a.f("epsilon"));
  }

  // x / sqrt(mean(x^2 over axis..end) + eps) * weight.
  void export_rms_norm(const Node& n, const Attrs& a, const std::vector<std::string>& in, const std::string& y) {
    const TensorType& xt = n.input(0)->type;
    const std::string& nm = n.name;
    auto sub = [&](const char* what) { return nm.empty() ? std::string() : nm + "/" + what; };
    int64_t axis = a.i("axis");
    if (axis < 0) axis += xt.rank();
    Ints axes;
    for (int64_t d = axis; d < xt.rank(); ++d) axes.push_back(d);
    const std::string sq = tmp(y, "sq"), ms = tmp(y, "mean_sq"), mse = tmp(y, "mean_sq_eps"), rms = tmp(y, "rms");
    emit("Mul", {in[0], in[0]}, {sq}, sub("sq"));
    reduce("ReduceMean", sq, axes, true, ms, sub("mean_sq"));
    emit("Add", {ms, scalar_init(a.f("epsilon"), xt.dtype, y, "epsilon")}, {mse}, sub("mean_sq_eps"));
    emit("Sqrt", {mse}, {rms}, sub("rms"));
    if (in.size() < 2) {
      emit("Div", {in[0], rms}, {y}, nm);
      return;
    }
    const std::string normed = tmp(y, "normed");
    emit("Div", {in[0], rms}, {normed}, sub("normed"));
    emit("Mul", {normed, in[1]}, {y}, nm);
  }

  // GroupNormalization (opset 18) changed meaning in opset 21; write the composition instead:
  // x [N,C,...] -> [N,G,-1], normalize over the last axis, back to x's shape, then per-channel weight and bias.
  void export_group_norm(const Node& n, const Attrs& a, const std::vector<std::string>& in, const std::string& y) {
    const TensorType& xt = n.input(0)->type;
    const std::string& nm = n.name;
    auto sub = [&](const char* what) { return nm.empty() ? std::string() : nm + "/" + what; };
    const std::string grouped = tmp(y, "grouped"), mean = tmp(y, "mean"), centered = tmp(y, "centered"),
                      sq = tmp(y, "sq"), var = tmp(y, "var"), var_eps = tmp(y, "var_eps"), sd = tmp(y, "std"),
                      normed = tmp(y, "normed"), shape = tmp(y, "x_shape");
    emit("Reshape", {in[0], ints_init({0, a.i("num_groups"), -1}, y, "group_shape")}, {grouped}, sub("grouped"));
    reduce("ReduceMean", grouped, {2}, true, mean, sub("mean"));
    emit("Sub", {grouped, mean}, {centered}, sub("centered"));
    emit("Mul", {centered, centered}, {sq}, sub("sq"));
    reduce("ReduceMean", sq, {2}, true, var, sub("var"));
    emit("Add", {var, scalar_init(a.f("epsilon"), xt.dtype, y, "epsilon")}, {var_eps}, sub("var_eps"));
    emit("Sqrt", {var_eps}, {sd}, sub("std"));
    emit("Div", {centered, sd}, {normed}, sub("normed"));
    emit("Shape", {in[0]}, {shape}, sub("x_shape"));
    const bool has_w = in.size() > 1, has_b = in.size() > 2;
    const std::string restored = has_w || has_b ? tmp(y, "restored") : y;
    emit("Reshape", {normed, shape}, {restored}, has_w || has_b ? sub("restored") : nm);
    // [C] -> [C,1,...] so it broadcasts over the spatial dims of [N,C,...].
    Ints spatial;
    for (int d = 1; d < xt.rank() - 1; ++d) spatial.push_back(d);
    auto per_channel = [&](const std::string& p, const char* what) {
      if (spatial.empty()) return p;
      const std::string u = tmp(y, what);
      emit("Unsqueeze", {p, ints_init(spatial, y, "channel_axes")}, {u}, sub(what));
      return u;
    };
    std::string cur = restored;
    if (has_w) {
      const std::string w = per_channel(in[1], "weight_c");
      const std::string scaled = has_b ? tmp(y, "scaled") : y;
      emit("Mul", {cur, w}, {scaled}, has_b ? sub("scaled") : nm);
      cur = scaled;
    }
    if (has_b) emit("Add", {cur, per_channel(in[2], "bias_c")}, {y}, nm);
  }

  // Range computes in the output dtype by repeated addition in some runtimes; spore computes start + i*step in
  // double. Integer ranges agree exactly either way; other ones are written as the values themselves.
  void export_arange(const Node& n, const Attrs& a, const std::string& y) {
    const DType t = a.dtype("dtype");
    const double start = a.f("start"), step = a.f("step");
    const bool integral = (t == DType::i64 || t == DType::i32) && start == std::floor(start) &&
                          step == std::floor(step) && std::abs(start) < 1e15 && std::abs(step) < 1e15;
    if (integral) {
      const std::string s = scalar_init(start, t, y, "start"), l = scalar_init(a.f("stop"), t, y, "limit"),
                        d = scalar_init(step, t, y, "delta");
      // stop may be fractional; Range's length is ceil((limit - start)/delta) on the converted limit, so only use
      // it when the converted limit gives the same length.
      const double stop_t = Tensor::scalar(a.f("stop"), t).item();
      if (std::ceil((stop_t - start) / step) == std::ceil((a.f("stop") - start) / step)) {
        emit("Range", {s, l, d}, {y}, n.name);
        return;
      }
    }
    const int64_t len = n.output(0)->type.dims.at(0).size;
    std::vector<double> v(static_cast<size_t>(len));
    for (int64_t i = 0; i < len; ++i) v[static_cast<size_t>(i)] = start + static_cast<double>(i) * step;
    // A node (Identity of an initializer) keeps the output name owned by a node, like every other op.
    const std::string values = add_initializer(Tensor::from_doubles(v, {len}, t), fresh(y + "/values"));
    emit("Identity", {values}, {y}, n.name);
  }

  // Graph outputs keep their value names; an output listed twice, or one that is a graph input or an initializer,
  // goes through an Identity node (ONNX wants each output name produced once, by a node).
  void export_outputs() {
    std::unordered_set<const Value*> seen;
    for (const Value* v : g_.outputs()) {
      const bool by_node = v->producer && v->producer->op != "input"_op && v->producer->op != "constant"_op;
      std::string name = name_of(v);
      if (!by_node || seen.count(v)) {
        const std::string out = fresh(name + "_out");
        emit("Identity", {name}, {out});
        name = out;
      }
      seen.insert(v);
      onnx::ValueInfoProto* vi = gp_->add_output();
      vi->set_name(name);
      set_type(vi, v->type);
    }
    // Types of the intermediate spore values help readers (Netron) and let ONNX shape inference check them.
    for (const Node* n : g_.nodes()) {
      if (n->op == "input"_op || n->op == "constant"_op) continue;
      for (const Value* v : n->outputs) {
        if (g_.is_output(v)) continue;
        onnx::ValueInfoProto* vi = gp_->add_value_info();
        vi->set_name(name_of(v));
        set_type(vi, v->type);
      }
    }
  }

  const Graph& g_;
  const OnnxExportOptions& opts_;
  onnx::GraphProto* gp_ = nullptr;
  std::unordered_map<const Value*, std::string> names_;
  std::unordered_set<std::string> used_;
};

}  // namespace

std::string export_onnx_bytes(const Graph& g, const OnnxExportOptions& opts) { return Exporter(g, opts).run(); }

void export_onnx(const Graph& g, const std::string& path, const OnnxExportOptions& opts) {
  write_file_atomic(path, export_onnx_bytes(g, opts));
}

}  // namespace spore::io
