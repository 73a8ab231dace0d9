#!/usr/bin/python3
"""A small Loop-based decoder for measuring per-iteration overhead (issue 41): Loop M=50 whose body runs a one-step
GRU (hidden 128, batch 1, linear_before_reset) on the carried state, and the same cell as one GRU over a 50-step
input sequence. Writes gru_loop.onnx, gru_seq.onnx, x.npy, xs.npy into out/bench/rnn_loop (or argv[1]).

  /usr/bin/python3 bench/peers/make_rnn_loop.py
  spore bench out/bench/rnn_loop/gru_loop.onnx --input x=out/bench/rnn_loop/x.npy --no-random --threads 1 --json
  node bench/peers/ort/ort_bench.js out/bench/rnn_loop/gru_loop.onnx --input-npy x=out/bench/rnn_loop/x.npy --threads 1
"""
import os
import sys

import numpy as np
import onnx
from onnx import helper as h, TensorProto as T, numpy_helper as nh
HERE = os.path.dirname(os.path.abspath(__file__))
OUT = sys.argv[1] if len(sys.argv) > 1 else os.path.join(os.path.dirname(os.path.dirname(HERE)), "out", "bench", "rnn_loop")
os.makedirs(OUT, exist_ok=True)
H, B, STEPS = 128, 1, 50
rng = np.random.default_rng(0)
W = (rng.standard_normal((1, 3*H, H)) * 0.1).astype(np.float32)
R = (rng.standard_normal((1, 3*H, H)) * 0.1).astype(np.float32)
Bb = (rng.standard_normal((1, 6*H)) * 0.1).astype(np.float32)
# body: (i, cond, h) -> (cond, h', h') ; h' = GRU(x = h as a one-step sequence, initial_h = h)
body = h.make_graph(
    [h.make_node("Unsqueeze", ["h_in", "ax0"], ["x1"]),
     h.make_node("Unsqueeze", ["h_in", "ax0"], ["h0"]),
     h.make_node("GRU", ["x1", "W", "R", "B", "", "h0"], ["", "yh"], hidden_size=H, linear_before_reset=1),
     h.make_node("Squeeze", ["yh", "ax0"], ["h_out"]),
     h.make_node("Identity", ["cond_in"], ["cond_out"]),
     h.make_node("Identity", ["h_out"], ["scan_out"])],
    "body",
    [h.make_tensor_value_info("i", T.INT64, []), h.make_tensor_value_info("cond_in", T.BOOL, []),
     h.make_tensor_value_info("h_in", T.FLOAT, [B, H])],
    [h.make_tensor_value_info("cond_out", T.BOOL, []), h.make_tensor_value_info("h_out", T.FLOAT, [B, H]),
     h.make_tensor_value_info("scan_out", T.FLOAT, [B, H])],
    [nh.from_array(np.array([0], np.int64), "ax0")])
g = h.make_graph(
    [h.make_node("Loop", ["M", "cond", "x"], ["h_last", "hs"], body=body)],
    "decoder", [h.make_tensor_value_info("x", T.FLOAT, [B, H])],
    [h.make_tensor_value_info("h_last", T.FLOAT, [B, H]), h.make_tensor_value_info("hs", T.FLOAT, [STEPS, B, H])],
    [nh.from_array(np.array(STEPS, np.int64), "M"), nh.from_array(np.array(True), "cond"),
     nh.from_array(W, "W"), nh.from_array(R, "R"), nh.from_array(Bb, "B")])
m = h.make_model(g, opset_imports=[h.make_opsetid("", 17)])
onnx.checker.check_model(m)
onnx.save(m, os.path.join(OUT, "gru_loop.onnx"))
# the same cell over a 50-step input sequence (one GRU node), for comparison
g2 = h.make_graph([h.make_node("Unsqueeze", ["x", "ax0"], ["h0"]),
                   h.make_node("GRU", ["xs", "W", "R", "B", "", "h0"], ["y", "yh"], hidden_size=H, linear_before_reset=1)],
                  "seq", [h.make_tensor_value_info("xs", T.FLOAT, [STEPS, B, H]), h.make_tensor_value_info("x", T.FLOAT, [B, H])],
                  [h.make_tensor_value_info("y", T.FLOAT, [STEPS, 1, B, H])],
                  [nh.from_array(W, "W"), nh.from_array(R, "R"), nh.from_array(Bb, "B"), nh.from_array(np.array([0], np.int64), "ax0")])
m2 = h.make_model(g2, opset_imports=[h.make_opsetid("", 17)])
onnx.save(m2, os.path.join(OUT, "gru_seq.onnx"))
np.save(os.path.join(OUT, "x.npy"), rng.standard_normal((B, H)).astype(np.float32))
np.save(os.path.join(OUT, "xs.npy"), rng.standard_normal((STEPS, B, H)).astype(np.float32))
