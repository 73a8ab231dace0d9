#!/usr/bin/python3
"""Export an SSD-style detector with its post-processing (score threshold, top-k, box decoding, NMS) to ONNX
(issue 41: data-dependent output shapes).

  /usr/bin/python3 bench/peers/export_detection.py [--out out/bench/detection] [--force]

torchvision 0.14's ssdlite320_mobilenet_v3_large (Debian python3-torchvision), torch.manual_seed(0) + the model's
own init (no downloaded weights), exported by torch.onnx.export at opset 17 with one image input "x" [1, 3, 320, 320]
and outputs "boxes" [K, 4], "scores" [K], "labels" [K] (K is decided by the data). With its init's BatchNorm
statistics the backbone's features vanish (std ~1e-14) and every score is 1/91, a tie everywhere; so the BatchNorm
statistics are first estimated from 16 seeded uniform images (train mode, cumulative averages), then eval mode. The
score threshold --score-thresh (default 0.1, above all but the top few hundred of the 290k class scores) lets some, not all, boxes survive;
the script prints how many PyTorch keeps. Writes ssdlite320.onnx, ssdlite320.json
({"input","shape","opset"}) and a seeded input ssdlite320.x1.npy (uniform [0, 1), numpy seed 0), as
export_torchvision.py does. Compare with ONNX Runtime:

  /usr/bin/python3 bench/peers/infer_vs_ort.py --model out/bench/detection/ssdlite320.onnx \\
      --input x=out/bench/detection/ssdlite320.x1.npy
"""
import argparse
import json
import os

import numpy as np
import torch
import torchvision

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(os.path.dirname(HERE))


class Detector(torch.nn.Module):
    """One image in, the first image's detections out (torchvision's detectors take and return lists)."""

    def __init__(self, model):
        super().__init__()
        self.model = model

    def forward(self, x):
        d = self.model([x[0]])[0]
        return d["boxes"], d["scores"], d["labels"]


def main():
    p = argparse.ArgumentParser()
    p.add_argument("--out", default=os.path.join(ROOT, "out", "bench", "detection"))
    p.add_argument("--score-thresh", type=float, default=0.1)
    p.add_argument("--force", action="store_true")
    a = p.parse_args()
    os.makedirs(a.out, exist_ok=True)
    name = "ssdlite320"
    path = os.path.join(a.out, f"{name}.onnx")
    torch.manual_seed(0)
    model = torchvision.models.detection.ssdlite320_mobilenet_v3_large(
        weights=None, weights_backbone=None, score_thresh=a.score_thresh)
    for mod in model.modules():
        if isinstance(mod, torch.nn.BatchNorm2d):
            mod.momentum = None  # a cumulative average over the calibration batches
    model.train()
    g = torch.Generator().manual_seed(2)
    with torch.no_grad():
        for _ in range(4):
            feats = model.backbone(torch.rand(4, 3, 320, 320, generator=g))
            model.head(list(feats.values()))
    model.eval()
    m = Detector(model).eval()
    rng = np.random.default_rng(0)
    x = rng.random((1, 3, 320, 320), dtype=np.float32)
    with torch.no_grad():
        boxes, scores, labels = m(torch.from_numpy(x))
    print(f"pytorch keeps {boxes.shape[0]} boxes at score_thresh {a.score_thresh}", flush=True)
    if not os.path.exists(path) or a.force:
        with torch.no_grad():
            torch.onnx.export(m, torch.from_numpy(x), path, opset_version=17, input_names=["x"],
                              output_names=["boxes", "scores", "labels"], do_constant_folding=True)
        print(f"wrote {path}", flush=True)
    json.dump({"input": "x", "shape": [3, 320, 320], "opset": 17}, open(os.path.join(a.out, f"{name}.json"), "w"))
    np.save(os.path.join(a.out, f"{name}.x1.npy"), x)


if __name__ == "__main__":
    main()
