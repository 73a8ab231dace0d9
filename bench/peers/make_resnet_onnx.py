#!/usr/bin/env python3
"""The ResNet-style model of make_onnx_models.py written with onnx.helper, for machines without PyTorch: BN folded
into conv biases as torch.onnx's eval export does, opset 14, dynamic batch. usage: make_resnet_onnx.py OUT.onnx"""
import sys
import numpy as np, onnx
from onnx import helper, TensorProto, numpy_helper
rng = np.random.default_rng(0)
nodes, inits = [], []
def conv(x, cin, cout, k, stride, name):
    w = (rng.standard_normal((cout, cin, k, k)) * np.sqrt(2.0 / (cin * k * k))).astype(np.float32)
    b = (rng.standard_normal(cout) * 0.1).astype(np.float32)
    inits.append(numpy_helper.from_array(w, name + ".w")); inits.append(numpy_helper.from_array(b, name + ".b"))
    p = k // 2
    nodes.append(helper.make_node("Conv", [x, name + ".w", name + ".b"], [name], kernel_shape=[k, k],
                                  strides=[stride, stride], pads=[p, p, p, p]))
    return name
def relu(x, name):
    nodes.append(helper.make_node("Relu", [x], [name])); return name
def add(a, b, name):
    nodes.append(helper.make_node("Add", [a, b], [name])); return name
x = relu(conv("input", 3, 32, 3, 1, "stem"), "stem_r")
for i, (cin, cout, s) in enumerate([(32, 32, 1), (32, 64, 2), (64, 64, 1), (64, 128, 2)]):
    y = relu(conv(x, cin, cout, 3, s, f"b{i}c1"), f"b{i}r1")
    y = conv(y, cout, cout, 3, 1, f"b{i}c2")
    sk = x if (s == 1 and cin == cout) else conv(x, cin, cout, 1, s, f"b{i}skip")
    x = relu(add(y, sk, f"b{i}add"), f"b{i}out")
nodes.append(helper.make_node("ReduceMean", [x], ["pooled"], axes=[2, 3], keepdims=0))
fw = (rng.standard_normal((10, 128)) * 0.1).astype(np.float32); fb = np.zeros(10, np.float32)
inits += [numpy_helper.from_array(fw, "fc.w"), numpy_helper.from_array(fb, "fc.b")]
nodes.append(helper.make_node("Gemm", ["pooled", "fc.w", "fc.b"], ["output"], transB=1))
g = helper.make_graph(nodes, "resnet", [helper.make_tensor_value_info("input", TensorProto.FLOAT, ["batch", 3, 32, 32])],
                      [helper.make_tensor_value_info("output", TensorProto.FLOAT, ["batch", 10])], inits)
m = helper.make_model(g, opset_imports=[helper.make_opsetid("", 14)]); m.ir_version = 7
onnx.checker.check_model(m)
out = sys.argv[1] if len(sys.argv) > 1 else "resnet.onnx"
if out.startswith("-"):  # --help (or any option): a file named "--help" was once written and committed this way
    sys.exit(__doc__)
onnx.save(m, out)
