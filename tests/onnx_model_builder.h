#pragma once
// A hand-built ONNX ModelProto for unit tests (tests/io, tests/deploy): inputs with named or fixed dims,
// initializers, nodes with int attributes.
#include <cctype>
#include <fstream>
#include <string>
#include <vector>

#include <onnx/onnx_pb.h>

namespace spore::testing {

struct ModelBuilder {
  onnx::ModelProto m;
  explicit ModelBuilder(int64_t opset = 13) {
    m.set_ir_version(8);
    m.set_producer_name("spore-test");
    auto* o = m.add_opset_import();
    o->set_domain("");
    o->set_version(opset);
    m.mutable_graph()->set_name("g");
  }
  onnx::GraphProto& g() { return *m.mutable_graph(); }
  void input(const std::string& name, int32_t et, const std::vector<std::string>& dims, bool output = false) {
    auto* vi = output ? g().add_output() : g().add_input();
    vi->set_name(name);
    auto* tt = vi->mutable_type()->mutable_tensor_type();
    tt->set_elem_type(et);
    auto* sh = tt->mutable_shape();
    for (const std::string& d : dims) {
      auto* dim = sh->add_dim();
      if (d.empty()) continue;  // unknown
      if (std::isdigit(static_cast<unsigned char>(d[0]))) dim->set_dim_value(std::stoll(d));
      else dim->set_dim_param(d);
    }
  }
  void output(const std::string& name, int32_t et = onnx::TensorProto::FLOAT) {
    auto* vi = g().add_output();
    vi->set_name(name);
    vi->mutable_type()->mutable_tensor_type()->set_elem_type(et);
  }
  void init(const std::string& name, const std::vector<float>& v, const std::vector<int64_t>& dims) {
    auto* t = g().add_initializer();
    t->set_name(name);
    t->set_data_type(onnx::TensorProto::FLOAT);
    for (int64_t d : dims) t->add_dims(d);
    for (float x : v) t->add_float_data(x);
  }
  void init_i64(const std::string& name, const std::vector<int64_t>& v) {
    auto* t = g().add_initializer();
    t->set_name(name);
    t->set_data_type(onnx::TensorProto::INT64);
    t->add_dims(static_cast<int64_t>(v.size()));
    t->set_raw_data(std::string(reinterpret_cast<const char*>(v.data()), v.size() * 8));
  }
  onnx::NodeProto* node(const std::string& op, const std::vector<std::string>& ins, const std::vector<std::string>& outs,
                        const std::string& name = "") {
    auto* n = g().add_node();
    n->set_op_type(op);
    n->set_name(name);
    for (const auto& i : ins) n->add_input(i);
    for (const auto& o : outs) n->add_output(o);
    return n;
  }
  static void attr_i(onnx::NodeProto* n, const std::string& name, int64_t v) {
    auto* a = n->add_attribute();
    a->set_name(name);
    a->set_type(onnx::AttributeProto::INT);
    a->set_i(v);
  }
  // A subgraph attribute (If's branches, Loop's and Scan's body), built by `fill` on a fresh GraphProto.
  static onnx::GraphProto* attr_graph(onnx::NodeProto* n, const std::string& name) {
    auto* a = n->add_attribute();
    a->set_name(name);
    a->set_type(onnx::AttributeProto::GRAPH);
    a->mutable_g()->set_name(name);
    return a->mutable_g();
  }
  static void graph_io(onnx::GraphProto* g, const std::string& name, int32_t et, bool output) {
    auto* vi = output ? g->add_output() : g->add_input();
    vi->set_name(name);
    vi->mutable_type()->mutable_tensor_type()->set_elem_type(et);
  }
  static onnx::NodeProto* graph_node(onnx::GraphProto* g, const std::string& op, const std::vector<std::string>& ins,
                                     const std::vector<std::string>& outs) {
    auto* n = g->add_node();
    n->set_op_type(op);
    for (const auto& i : ins) n->add_input(i);
    for (const auto& o : outs) n->add_output(o);
    return n;
  }
  std::string bytes() const { return m.SerializeAsString(); }
  void save(const std::string& path) const {
    std::ofstream f(path, std::ios::binary);
    f << bytes();
  }
};

// Attributes a node gets beyond ModelBuilder's ints: a string, a list of ints.
inline void attr_s(onnx::NodeProto* n, const std::string& name, const std::string& v) {
  auto* a = n->add_attribute();
  a->set_name(name);
  a->set_type(onnx::AttributeProto::STRING);
  a->set_s(v);
}
inline void attr_ints(onnx::NodeProto* n, const std::string& name, const std::vector<int64_t>& v) {
  auto* a = n->add_attribute();
  a->set_name(name);
  a->set_type(onnx::AttributeProto::INTS);
  for (int64_t x : v) a->add_ints(x);
}

}  // namespace spore::testing
