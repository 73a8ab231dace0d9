#!/usr/bin/python3
"""Writes one-node (or QDQ-wrapped) ONNX models of the ops issue 41 imports as decompositions, with a seeded float
input as .npy, for comparing spore with ONNX Runtime on the same file and input (outputs and latency):
STFT (a 1 s 16 kHz speech front end: 400-sample Hann frames every 160), DFT (real, 512 points), QLinearConv (64 ->
64 channels, 3x3, on 56 x 56, between QuantizeLinear and DequantizeLinear), QLinearMatMul (128 x 768 x 768 the same
way, with u8 weights at zero point 127 and with symmetric int8
weights), Det (256 matrices 8 x 8). Opset 17; weights and quantization parameters are seeded initializers.

  /usr/bin/python3 bench/peers/make_signal_quant_onnx.py [--out out/bench/i41ops]
  for m in stft dft qlinearconv qlinearmatmul qlinearmatmul_s8 det; do
    build/spore run out/bench/i41ops/$m.onnx --input x=out/bench/i41ops/$m.x.npy --output /tmp/s_$m
    node bench/peers/ort/ort_bench.js out/bench/i41ops/$m.onnx --input-npy x=out/bench/i41ops/$m.x.npy \\
        --save-output /tmp/o_$m --iters 1 --warmup 0
    build/spore bench out/bench/i41ops/$m.onnx --input x=out/bench/i41ops/$m.x.npy --no-random --threads 1 --json
    node bench/peers/ort/ort_bench.js out/bench/i41ops/$m.onnx --input-npy x=out/bench/i41ops/$m.x.npy --native \\
        --threads 1
  done
"""
import argparse
import os

import numpy as np
import onnx
from onnx import TensorProto, helper, numpy_helper


def save(out, name, nodes, x, y_shape, inits):
    g = helper.make_graph(nodes, name, [helper.make_tensor_value_info("x", TensorProto.FLOAT, list(x.shape))],
                          [helper.make_tensor_value_info("y", TensorProto.FLOAT, y_shape)],
                          [numpy_helper.from_array(v, k) for k, v in inits.items()])
    m = helper.make_model(g, opset_imports=[helper.make_opsetid("", 17)])
    m.ir_version = 8
    onnx.checker.check_model(m)
    onnx.save(m, os.path.join(out, name + ".onnx"))
    np.save(os.path.join(out, name + ".x.npy"), x.astype(np.float32))
    print("wrote", os.path.join(out, name + ".onnx"))


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--out", default="out/bench/i41ops")
    a = ap.parse_args()
    os.makedirs(a.out, exist_ok=True)
    rng = np.random.default_rng(41)
    f32 = np.float32
    # STFT: [1, 16000, 1], frames of 400 every 160 with a periodic Hann window -> [1, 98, 201, 2].
    n = np.arange(400)
    hann = (0.5 - 0.5 * np.cos(2 * np.pi * n / 400)).astype(f32)
    save(a.out, "stft", [helper.make_node("STFT", ["x", "step", "win"], ["y"])], rng.standard_normal((1, 16000, 1)),
         [1, 98, 201, 2], {"step": np.array(160, np.int64), "win": hann})
    # DFT: 64 real signals of 512 points -> full complex spectrum [64, 512, 2].
    save(a.out, "dft", [helper.make_node("DFT", ["x"], ["y"], axis=1)], rng.standard_normal((64, 512, 1)),
         [64, 512, 2], {})
    # QLinearConv between QuantizeLinear and DequantizeLinear: u8 activations, per-channel i8 weights, int32 bias.
    xs, ys = f32(0.05), f32(0.2)
    ws = rng.uniform(0.002, 0.01, 64).astype(f32)
    w = rng.integers(-127, 128, (64, 64, 3, 3)).astype(np.int8)
    save(a.out, "qlinearconv", [
        helper.make_node("QuantizeLinear", ["x", "xs", "xz"], ["xq"]),
        helper.make_node("QLinearConv", ["xq", "xs", "xz", "w", "ws", "wz", "ys", "yz", "b"], ["yq"], pads=[1, 1, 1, 1]),
        helper.make_node("DequantizeLinear", ["yq", "ys", "yz"], ["y"])], rng.standard_normal((1, 64, 56, 56)),
         [1, 64, 56, 56], {"xs": xs, "xz": np.uint8(128), "w": w, "ws": ws, "wz": np.zeros(64, np.int8), "ys": ys,
                           "yz": np.uint8(128), "b": rng.integers(-2000, 2000, 64).astype(np.int32)})
    # QLinearMatMul the same way: [128, 768] x [768, 768], u8 x u8.
    wm = rng.integers(0, 256, (768, 768)).astype(np.uint8)
    save(a.out, "qlinearmatmul", [
        helper.make_node("QuantizeLinear", ["x", "xs", "xz"], ["xq"]),
        helper.make_node("QLinearMatMul", ["xq", "xs", "xz", "w", "ws", "wz", "ys", "yz"], ["yq"]),
        helper.make_node("DequantizeLinear", ["yq", "ys", "yz"], ["y"])], rng.standard_normal((128, 768)),
         [128, 768], {"xs": xs, "xz": np.uint8(128), "w": wm, "ws": f32(0.004), "wz": np.uint8(127), "ys": f32(2.0),
                      "yz": np.uint8(128)})
    # The same with symmetric int8 weights (zero point 0), the form ONNX Runtime's quantizer writes.
    save(a.out, "qlinearmatmul_s8", [
        helper.make_node("QuantizeLinear", ["x", "xs", "xz"], ["xq"]),
        helper.make_node("QLinearMatMul", ["xq", "xs", "xz", "w", "ws", "wz", "ys", "yz"], ["yq"]),
        helper.make_node("DequantizeLinear", ["yq", "ys", "yz"], ["y"])], rng.standard_normal((128, 768)),
         [128, 768], {"xs": xs, "xz": np.uint8(128), "w": rng.integers(-127, 128, (768, 768)).astype(np.int8),
                      "ws": f32(0.004), "wz": np.int8(0), "ys": f32(2.0), "yz": np.uint8(128)})
    # Det of 256 random 8 x 8 matrices.
    save(a.out, "det", [helper.make_node("Det", ["x"], ["y"])], rng.standard_normal((256, 8, 8)), [256], {})


if __name__ == "__main__":
    main()
