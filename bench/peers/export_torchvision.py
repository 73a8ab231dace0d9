#!/usr/bin/python3
"""Export torchvision models (architectures nobody here wrote; issue 22) to ONNX for tv_vs_ort.py.

  /usr/bin/python3 bench/peers/export_torchvision.py [--out out/bench/torchvision] [--models a,b] [--force]

Opset 17, input "x", output "y", dynamic batch axis, eval mode, torch.manual_seed(0) per model, weights=None (seeded
random init), then every BatchNorm's running statistics re-estimated on 4 seeded N(0,1) batches of 8 (train-mode
forward passes, cumulative average) so that, as in a trained network, each BN normalizes the activations it really
sees: with untouched or random statistics the signal of the deeper nets dies out and their output hardly depends on
the input (mobilenet_v3_large's logits varied by 1e-9 across inputs), which makes int8-vs-f32 top-1 agreement a coin
toss between tied classes. Writes NAME.onnx, NAME.json ({"input","shape","opset"}) and seeded inputs NAME.x1.npy / NAME.x8.npy. Also an
LSTM (2-layer nn.LSTM(64,128) over seq 32 + Linear); the transformer encoder lives in make_onnx_models.py.

Issue 41's real exports (--out out/bench/real --models swin_t,raft_small): the Swin transformers (swin_t, swin_s at
224x224; shifted windows, so index assignments -> ScatterND) and the RAFT optical-flow nets (raft_small, raft_large;
two frames "image1", "image2" of 1x3x128x128, the second the first shifted by (2, 3) pixels plus noise; default 12
flow updates unrolled by the tracer, GridSample over the correlation pyramid; output "flow" is the last update's
upsampled flow, the one a user keeps). Models with several inputs list them in NAME.json's "inputs" and write
NAME.INPUT.x{B}.npy per input. Every export also writes PyTorch's own output at batch 1 (NAME.torch.OUTPUT.npy), the
reference tests/integration/real_exports_test.py checks spore against without ONNX Runtime.
A subset is re-written at opsets 18-20 (NAME_opN.onnx) by a small converter (onnx 1.12 has no version_converter past
17) and checked in ONNX Runtime (node) against the opset-17 file.
"""
import argparse
import json
import os
import subprocess
import sys

import numpy as np
import onnx
from onnx import helper, numpy_helper
import torch
import torchvision.models as tvm
import torchvision.models.segmentation as tvs
import torchvision.models.video as tvv

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(os.path.dirname(HERE))

CLS = ["resnet18", "resnet50", "mobilenet_v2", "mobilenet_v3_small", "mobilenet_v3_large", "efficientnet_b0",
       "shufflenet_v2_x1_0", "squeezenet1_1", "regnet_y_400mf", "mnasnet1_0", "googlenet", "convnext_tiny",
       "vit_b_16", "densenet121"]
SEG = ["lraspp_mobilenet_v3_large", "fcn_resnet50"]
# 3-D video nets (issue 41), on an 8-frame 112x112 clip; exported with --out out/bench/video (tv_vs_ort.py --dir).
# s3d is left out: its final AvgPool3d (2,7,7) needs 16 frames at 224x224.
VIDEO = ["r3d_18", "mc3_18", "r2plus1d_18"]
# Windowed-attention transformers and optical flow (issue 41), exported with --out out/bench/real.
SWIN = ["swin_t", "swin_s"]
FLOW = ["raft_small", "raft_large"]
FLOW_HW = [128, 128]  # RAFT needs H, W divisible by 8; its coarsest correlation level is then (H/64) x (W/64)
CONVERT = ["resnet18", "mobilenet_v3_small", "shufflenet_v2_x1_0", "vit_b_16", "efficientnet_b0"]


class SegOut(torch.nn.Module):
    def __init__(self, m):
        super().__init__()
        self.m = m

    def forward(self, x):
        return self.m(x)["out"]


class LSTMNet(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.lstm = torch.nn.LSTM(64, 128, num_layers=2, batch_first=True)
        self.fc = torch.nn.Linear(128, 10)

    def forward(self, x):
        y, _ = self.lstm(x)
        return self.fc(y[:, -1])


class FlowLast(torch.nn.Module):
    """RAFT returns every update's upsampled flow; inference keeps the last one."""

    def __init__(self, m):
        super().__init__()
        self.m = m

    def forward(self, image1, image2):
        return self.m(image1, image2)[-1]


def io_names(name):
    """(input names, output names) of an export."""
    return (["image1", "image2"], ["flow"]) if name in FLOW else (["x"], ["y"])


def make_inputs(name, shape, batch, rng):
    """Seeded inputs, one array per input name. RAFT's second frame is the first shifted by (2, 3) pixels plus a
    little noise, so the two frames are related as video frames are."""
    x = rng.standard_normal((batch, *shape)).astype(np.float32)
    if name not in FLOW:
        return [x]
    y = np.roll(x, (2, 3), axis=(2, 3)) + 0.1 * rng.standard_normal(x.shape).astype(np.float32)
    return [x, y.astype(np.float32)]


def build(name):
    torch.manual_seed(0)
    if name in SWIN:
        m, shape = getattr(tvm, name)(weights=None), [3, 224, 224]
    elif name in FLOW:
        import torchvision.models.optical_flow as tvf

        m, shape = FlowLast(getattr(tvf, name)(weights=None)), [3, *FLOW_HW]
    elif name in CLS:
        kw = {"aux_logits": False, "init_weights": True} if name == "googlenet" else {}
        m, shape = getattr(tvm, name)(weights=None, **kw), [3, 224, 224]
    elif name in SEG:
        m, shape = SegOut(getattr(tvs, name)(weights=None, weights_backbone=None, aux_loss=False)), [3, 256, 256]
    elif name in VIDEO:
        m, shape = getattr(tvv, name)(weights=None), [3, 8, 112, 112]
    elif name == "lstm":
        m, shape = LSTMNet(), [32, 64]
    else:
        raise SystemExit(f"unknown model {name}")
    if name == "vit_b_16":
        # torchvision zero-initialises ViT's classifier head (weights=None), so its logits were 0 for every input:
        # precision and int8 agreement on it measured nothing. Seeded N(0, 0.02) weights, as its other Linears.
        torch.nn.init.normal_(m.heads.head.weight, std=0.02)
    bns = [mod for mod in m.modules() if isinstance(mod, torch.nn.modules.batchnorm._BatchNorm)]
    if bns:
        for mod in bns:
            mod.reset_running_stats()
            mod.momentum = None  # cumulative moving average over the batches below
        g = torch.Generator().manual_seed(1)
        m.train()
        with torch.no_grad():
            for _ in range(4):  # video clips and frame pairs: batches of 2 (8 costs minutes on 2 cores)
                b = 2 if name in VIDEO + FLOW else 8
                m(*[torch.randn(b, *shape, generator=g) for _ in io_names(name)[0]])
    return m.eval(), shape


def fix_int_sqrt(path):
    """torch 1.13 writes `torch.sqrt(torch.tensor(C))` (RAFT's correlation scale, C from a traced shape) as
    Cast(to=int64) -> Sqrt -> Cast(to=float): ONNX's Sqrt takes floats only, and ONNX Runtime refuses the file ("Type
    Error: Type 'tensor(int64)' of input parameter ... of operator (Sqrt)"). PyTorch computes that square root in
    float, so the first Cast is retyped to float: the graph then computes what PyTorch does. Returns the count."""
    m = onnx.load(path)
    prod = {o: n for n in m.graph.node for o in n.output}
    fixed = 0
    for n in m.graph.node:
        c = prod.get(n.input[0]) if n.op_type == "Sqrt" else None
        if c is not None and c.op_type == "Cast":
            to = [a for a in c.attribute if a.name == "to"][0]
            if to.i in (onnx.TensorProto.INT64, onnx.TensorProto.INT32):
                to.i = onnx.TensorProto.FLOAT
                fixed += 1
    if fixed:
        onnx.save(m, path)
    return fixed


def export(name, out, force):
    path = os.path.join(out, f"{name}.onnx")
    if os.path.exists(path) and not force:
        return path
    m, shape = build(name)
    ins, outs = io_names(name)
    # Not under torch.no_grad(): with grad disabled, nn.MultiheadAttention (vit_b_16) takes its fused fast path,
    # aten::_native_multi_head_attention, which the exporter cannot write.
    args = tuple(torch.randn(1, *shape) for _ in ins)
    torch.onnx.export(m, args if len(args) > 1 else args[0], path, opset_version=17, input_names=ins,
                      output_names=outs, dynamic_axes={n: {0: "batch"} for n in ins + outs}, do_constant_folding=True)
    meta = {"input": ins[0], "shape": shape, "opset": 17}
    if fixed := fix_int_sqrt(path):
        meta["fixed_int_sqrt"] = fixed
    if len(ins) > 1:
        meta["inputs"] = ins
    if name in FLOW:
        meta["flow_updates"] = 12
    json.dump(meta, open(os.path.join(out, f"{name}.json"), "w"))
    rng = np.random.default_rng(0)
    for b in (1, 2) if name in VIDEO + FLOW else (1, 8):
        xs = make_inputs(name, shape, b, rng)
        for n, x in zip(ins, xs):
            np.save(os.path.join(out, f"{name}.x{b}.npy" if len(ins) == 1 else f"{name}.{n}.x{b}.npy"), x)
        if b == 1:
            with torch.no_grad():
                y = m(*[torch.from_numpy(x) for x in xs])
            for n, v in zip(outs, y if isinstance(y, (list, tuple)) else [y]):
                np.save(os.path.join(out, f"{name}.torch.{n}.npy"), v.numpy())
    print(f"exported {name}", flush=True)
    return path


REDUCE_AXES_18 = {"ReduceMean", "ReduceMax", "ReduceMin", "ReduceProd", "ReduceL1", "ReduceL2", "ReduceLogSum",
                  "ReduceLogSumExp", "ReduceSumSquare"}


def convert(src, dst, opset):
    """Rewrite an opset-17 model into opset `opset` (18-20) for the ops these models use. 18: reductions' axes
    attribute becomes an int64 input; Split gains num_outputs when it has no split input. 19/20: AveragePool (19,
    dilations default 1), Pad/Resize (18/19, new attributes/inputs with defaults), Reshape/Shape/Size/Constant/Cast
    (19, new types or attributes with defaults) keep their opset-17 meaning."""
    m = onnx.load(src)
    g = m.graph
    inits = []
    for i, n in enumerate(g.node):
        if n.op_type in REDUCE_AXES_18:
            axes = [a for a in n.attribute if a.name == "axes"]
            if axes:
                vals = list(axes[0].ints)
                n.attribute.remove(axes[0])
                an = f"_axes_{i}"
                inits.append(numpy_helper.from_array(np.array(vals, dtype=np.int64), an))
                del n.input[1:]
                n.input.append(an)
        elif n.op_type == "Split":
            if len(n.input) < 2 or not n.input[1]:
                n.attribute.append(helper.make_attribute("num_outputs", len(n.output)))
    g.initializer.extend(inits)
    for op in m.opset_import:
        if op.domain in ("", "ai.onnx"):
            op.version = opset
    m.ir_version = 8 if opset == 18 else 9
    onnx.save(m, dst)


def ort_run(path, npy, outdir):
    os.makedirs(outdir, exist_ok=True)
    r = subprocess.run(["node", os.path.join(HERE, "ort", "ort_bench.js"), path, "--input-npy", f"x={npy}",
                        "--warmup", "0", "--iters", "1", "--save-output", outdir], capture_output=True, text=True)
    if r.returncode != 0:
        raise RuntimeError(r.stderr.strip()[-400:])
    return np.load(os.path.join(outdir, "y.npy"))


def main():
    p = argparse.ArgumentParser()
    p.add_argument("--out", default=os.path.join(ROOT, "out", "bench", "torchvision"))
    p.add_argument("--models", default=",".join(CLS + SEG + ["lstm"]))
    p.add_argument("--force", action="store_true")
    p.add_argument("--no-convert", action="store_true")
    a = p.parse_args()
    os.makedirs(a.out, exist_ok=True)
    names = a.models.split(",")
    for name in names:
        export(name, a.out, a.force)
    if a.no_convert:
        return
    summary = []
    for name in [n for n in CONVERT if n in names]:
        src = os.path.join(a.out, f"{name}.onnx")
        npy = os.path.join(a.out, f"{name}.x1.npy")
        ref = ort_run(src, npy, os.path.join(a.out, "_ort", name))
        for opset in (18, 19, 20):
            dst = os.path.join(a.out, f"{name}_op{opset}.onnx")
            if not os.path.exists(dst) or a.force:
                convert(src, dst, opset)
                json.dump({"input": "x", "shape": json.load(open(os.path.join(a.out, f"{name}.json")))["shape"],
                           "opset": opset}, open(os.path.join(a.out, f"{name}_op{opset}.json"), "w"))
            try:
                y = ort_run(dst, npy, os.path.join(a.out, "_ort", f"{name}_op{opset}"))
                ok = y.shape == ref.shape and np.allclose(y, ref, rtol=1e-4, atol=1e-6)
                summary.append((name, opset, "ok" if ok else f"MISMATCH max abs {np.abs(y - ref).max():.3g}"))
            except RuntimeError as e:
                summary.append((name, opset, f"ORT FAIL {e}"))
    for name, opset, s in summary:
        print(f"{name:22s} opset {opset}: {s}")
    if any(s != "ok" for _, _, s in summary):
        sys.exit(1)


if __name__ == "__main__":
    main()
