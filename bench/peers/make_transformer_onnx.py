#!/usr/bin/env python3
"""The 6-layer transformer encoder of make_onnx_models.py written with onnx.helper, for machines without PyTorch,
in the op form torch.onnx (opset 14) exports nn.TransformerEncoderLayer(d_model 128, nhead 4, dim_feedforward 512,
ReLU, post-norm, batch_first) as: in-projection MatMul + Add, Split into q/k/v, Reshape + Transpose to heads, q
scaled by 1/sqrt(32), MatMul / Softmax / MatMul, out-projection, residual Add, LayerNorm written out (ReduceMean,
Sub, Pow, ReduceMean, Add, Sqrt, Div, Mul, Add), the ReLU feed-forward; then the mean over the sequence and a
Linear(128 -> 10). Each layer has its own random weights (normal, std 1/sqrt(fan_in); LayerNorm gamma ~ N(1, 0.1),
beta ~ N(0, 0.1)). Input [batch, 32, 128], dynamic batch. usage: make_transformer_onnx.py OUT.onnx"""
import sys

import numpy as np
import onnx
from onnx import TensorProto, helper, numpy_helper

D, HEADS, FF, SEQ, LAYERS = 128, 4, 512, 32, 6
HD = D // HEADS
rng = np.random.default_rng(0)
nodes, inits = [], []


def const(name, arr):
    inits.append(numpy_helper.from_array(np.asarray(arr), name))
    return name


def node(op, ins, out, **attrs):
    nodes.append(helper.make_node(op, ins, [out], **attrs))
    return out


def linear(x, fan_in, fan_out, name):
    w = (rng.standard_normal((fan_in, fan_out)) / np.sqrt(fan_in)).astype(np.float32)  # stored transposed, as exported
    b = (rng.standard_normal(fan_out) * 0.02).astype(np.float32)
    return node("Add", [node("MatMul", [x, const(name + ".w", w)], name + ".mm"), const(name + ".b", b)], name)


def layer_norm(x, name):
    g = (1.0 + 0.1 * rng.standard_normal(D)).astype(np.float32)
    b = (0.1 * rng.standard_normal(D)).astype(np.float32)
    mean = node("ReduceMean", [x], name + ".mean", axes=[-1], keepdims=1)
    d = node("Sub", [x, mean], name + ".d")
    var = node("ReduceMean", [node("Pow", [d, const(name + ".two", np.float32(2.0))], name + ".sq")], name + ".var",
               axes=[-1], keepdims=1)
    den = node("Sqrt", [node("Add", [var, const(name + ".eps", np.float32(1e-5))], name + ".ve")], name + ".den")
    n = node("Div", [d, den], name + ".n")
    return node("Add", [node("Mul", [n, const(name + ".g", g)], name + ".ng"), const(name + ".b", b)], name)


heads_shape = const("heads_shape", np.array([0, 0, HEADS, HD], np.int64))
merge_shape = const("merge_shape", np.array([0, 0, D], np.int64))
split_sizes = const("split_sizes", np.array([D, D, D], np.int64))
scale = const("scale", np.float32(1.0 / np.sqrt(HD)))
x = "x"
for l in range(LAYERS):
    p = f"l{l}"
    qkv = linear(x, D, 3 * D, p + ".in_proj")
    nodes.append(helper.make_node("Split", [qkv, split_sizes], [p + ".q", p + ".k", p + ".v"], axis=2))
    q = node("Transpose", [node("Reshape", [p + ".q", heads_shape], p + ".qh")], p + ".qt", perm=[0, 2, 1, 3])
    k = node("Transpose", [node("Reshape", [p + ".k", heads_shape], p + ".kh")], p + ".kt", perm=[0, 2, 3, 1])
    v = node("Transpose", [node("Reshape", [p + ".v", heads_shape], p + ".vh")], p + ".vt", perm=[0, 2, 1, 3])
    s = node("MatMul", [node("Mul", [q, scale], p + ".qs"), k], p + ".scores")
    o = node("MatMul", [node("Softmax", [s], p + ".probs", axis=-1), v], p + ".ctx")
    o = node("Reshape", [node("Transpose", [o], p + ".ctx_t", perm=[0, 2, 1, 3]), merge_shape], p + ".ctx_m")
    x = layer_norm(node("Add", [x, linear(o, D, D, p + ".out_proj")], p + ".res1"), p + ".norm1")
    f = linear(node("Relu", [linear(x, D, FF, p + ".linear1")], p + ".relu"), FF, D, p + ".linear2")
    x = layer_norm(node("Add", [x, f], p + ".res2"), p + ".norm2")
pooled = node("ReduceMean", [x], "pooled", axes=[1], keepdims=0)
hw = (rng.standard_normal((10, D)) / np.sqrt(D)).astype(np.float32)
node("Gemm", [pooled, const("head.w", hw), const("head.b", np.zeros(10, np.float32))], "output", transB=1)
g = helper.make_graph(nodes, "transformer", [helper.make_tensor_value_info("x", TensorProto.FLOAT, ["batch", SEQ, D])],
                      [helper.make_tensor_value_info("output", TensorProto.FLOAT, ["batch", 10])], inits)
m = helper.make_model(g, opset_imports=[helper.make_opsetid("", 14)])
m.ir_version = 7
onnx.checker.check_model(m)
out = sys.argv[1] if len(sys.argv) > 1 else "transformer.onnx"
if out.startswith("-"):  # --help (or any option): a file named "--help" was once written and committed this way
    sys.exit(__doc__)
onnx.save(m, out)
