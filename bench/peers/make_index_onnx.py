#!/usr/bin/python3
"""Writes one-node ONNX models of the indexing ops (issue 41) for bench/peers/infer_vs_ort.py: GridSample (optical
flow warping), ScatterND (Swin-style index assignment), RoiAlign (a detector head) and Einsum (attention scores).
The image / token tensor is the model input; grids, indices, rois and the second einsum operand are seeded
initializers. Batch 1, opset 17.

  /usr/bin/python3 bench/peers/make_index_onnx.py [--out out/bench/index]
  /usr/bin/python3 bench/peers/infer_vs_ort.py --batches 1 --threads 1,2 \\
      --model gridsample=out/bench/index/gridsample.onnx:x:32,96,96 --model scatternd=out/bench/index/scatternd.onnx:x:3136,96 ...
"""
import argparse
import os

import numpy as np
import onnx
from onnx import TensorProto, helper, numpy_helper


def save(path, node, x_shape, inits, y_shape):
    g = helper.make_graph([node], os.path.basename(path)[:-5],
                          [helper.make_tensor_value_info("x", TensorProto.FLOAT, x_shape)],
                          [helper.make_tensor_value_info("y", TensorProto.FLOAT, y_shape)],
                          [numpy_helper.from_array(v, k) for k, v in inits.items()])
    m = helper.make_model(g, opset_imports=[helper.make_opsetid("", 17)])
    m.ir_version = 8
    onnx.checker.check_model(m)
    onnx.save(m, path)
    print("wrote", path)


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--out", default="out/bench/index")
    a = ap.parse_args()
    os.makedirs(a.out, exist_ok=True)
    rng = np.random.default_rng(41)
    # GridSample: a flow field of +-4 pixels around the identity grid, bilinear, border padding.
    H = W = 96
    ys, xs = np.meshgrid(np.linspace(-1, 1, H), np.linspace(-1, 1, W), indexing="ij")
    grid = np.stack([xs, ys], -1)[None] + rng.uniform(-4 / W, 4 / W, (1, H, W, 2))
    save(os.path.join(a.out, "gridsample.onnx"),
         helper.make_node("GridSample", ["x", "grid"], ["y"], mode="bilinear", padding_mode="border", align_corners=0),
         [1, 32, H, W], {"grid": grid.astype(np.float32)}, [1, 32, H, W])
    # ScatterND: half of 3136 tokens (56 x 56, Swin stage 1) overwritten with 96-wide rows.
    idx = np.stack([np.zeros(1568, np.int64), rng.permutation(3136)[:1568]], -1)
    save(os.path.join(a.out, "scatternd.onnx"), helper.make_node("ScatterND", ["x", "idx", "upd"], ["y"]),
         [1, 3136, 96], {"idx": idx, "upd": rng.standard_normal((1568, 96)).astype(np.float32)}, [1, 3136, 96])
    # RoiAlign: 300 rois on a 256-channel 50 x 50 map (stride 16 of an 800 x 800 image), 7 x 7 output.
    x1y1 = rng.uniform(0, 600, (300, 2))
    rois = np.concatenate([x1y1, x1y1 + rng.uniform(16, 200, (300, 2))], 1).astype(np.float32)
    save(os.path.join(a.out, "roialign.onnx"),
         helper.make_node("RoiAlign", ["x", "rois", "bi"], ["y"], output_height=7, output_width=7, sampling_ratio=2,
                          spatial_scale=1 / 16, coordinate_transformation_mode="half_pixel"),
         [1, 256, 50, 50], {"rois": rois, "bi": np.zeros(300, np.int64)}, [300, 256, 7, 7])
    # Einsum: attention scores of 8 heads over 196 tokens.
    save(os.path.join(a.out, "einsum.onnx"), helper.make_node("Einsum", ["x", "k"], ["y"], equation="bhqd,bhkd->bhqk"),
         [1, 8, 196, 64], {"k": rng.standard_normal((1, 8, 196, 64)).astype(np.float32)}, [1, 8, 196, 196])


if __name__ == "__main__":
    main()
