#!/usr/bin/env python3
"""End-to-end check of `spore convert` on the bundled digits (label integration).

usage: convert_test.py SPORE_BINARY DIGITS_CSV_GZ

SimpleNet is trained for 1 epoch (`spore train`), exported (`spore export`, .spore and .onnx) and converted in every
precision / quantization mode with --eval-data on the digits test split (360 images; one image is 0.28 points).
Checks: the --json report's keys, per-dtype op counts that match the mode, accuracy cost within LIMITS points,
outputs close to the source model (max rel error = max abs error / max |source output|), the file shrinking for
fp16 / bf16 / mixed (< 0.6x) and weight_int8 (< 0.4x), force_fp32 turning an f16 model back into f32, and bad options
exiting non-zero with one line on stderr.
"""
import json
import os
import struct
import subprocess
import sys
import tempfile

# name: (convert args, max accuracy cost in points, max output rel error, max size ratio vs the source)
MODES = {
    "fp32": (["--precision-mode", "force_fp32"], 0.0, 0.0, 1.05),
    "fp16": (["--precision-mode", "allow_fp32_to_fp16"], 1.5, 5e-3, 0.6),
    "bf16": (["--precision-mode", "allow_fp32_to_bf16"], 1.5, 3e-2, 0.6),
    "mixed": (["--precision-mode", "allow_mix_precision"], 1.5, 5e-3, 0.6),
    "mixed_bf16": (["--precision-mode", "allow_mix_precision", "--mix-dtype", "bf16"], 1.5, 3e-2, 0.6),
    "weight_int8": (["--quantize", "weight_int8"], 1.5, 3e-2, 0.4),
    "int8": (["--quantize", "int8", "--calib-method", "minmax", "--calib-samples", "128"], 3.0, 0.15, 1.05),
}
KEYS = {"input", "output", "precision_mode", "quantize", "optimize_level", "ops_per_dtype_before",
        "ops_per_dtype_after", "casts_inserted", "kept_f32", "weights_quantized", "ops_quantized", "quantize_skipped",
        "size_before_bytes", "size_after_bytes", "size_ratio", "compare_inputs", "compare_samples", "outputs",
        "eval_data", "eval_samples", "accuracy_f32", "accuracy_converted", "accuracy_delta_points"}


def run(cmd, timeout=280):
    p = subprocess.run(cmd, capture_output=True, text=True, timeout=timeout)
    if p.returncode != 0:
        sys.exit(f"FAIL: {' '.join(cmd)} exited {p.returncode}\n{p.stdout[-3000:]}\n{p.stderr[-3000:]}")
    return p.stdout


def last_json(out):
    return [json.loads(l) for l in out.splitlines() if l.startswith("{")][-1]


def check(cond, msg):
    if not cond:
        sys.exit(f"FAIL: {msg}")


# A minimal ONNX model (hand-encoded protobuf: no onnx package needed) whose one node is an op nobody has.
def pb_varint(n):
    out = b""
    while True:
        b = n & 0x7F
        n >>= 7
        out += bytes([b | (0x80 if n else 0)])
        if not n:
            return out


def pb_field(num, payload):  # length-delimited
    return pb_varint(num << 3 | 2) + pb_varint(len(payload)) + payload


def pb_int(num, v):
    return pb_varint(num << 3) + pb_varint(v)


def onnx_with_unknown_op(path):
    def value_info(name):
        dims = b"".join(pb_field(1, pb_int(1, d)) for d in (1, 4))
        tensor = pb_int(1, 1) + pb_field(2, dims)  # elem_type FLOAT, shape
        return pb_field(1, name.encode()) + pb_field(2, pb_field(1, tensor))
    node = pb_field(1, b"x") + pb_field(2, b"y") + pb_field(3, b"frob_node") + pb_field(4, b"FrobnicateZ")
    graph = pb_field(1, node) + pb_field(2, b"g") + pb_field(11, value_info("x")) + pb_field(12, value_info("y"))
    model = pb_int(1, 8) + pb_field(8, pb_int(2, 17)) + pb_field(7, graph)
    with open(path, "wb") as f:
        f.write(model)


def write_npy_f32(path, shape, values):
    header = "{'descr': '<f4', 'fortran_order': False, 'shape': (%s), }" % "".join(f"{d}," for d in shape)
    header += " " * (63 - (len(header) + 10) % 64) + "\n"
    with open(path, "wb") as f:
        f.write(b"\x93NUMPY\x01\x00" + struct.pack("<H", len(header)) + header.encode())
        f.write(struct.pack(f"<{len(values)}f", *values))


def main():
    spore, digits = sys.argv[1], sys.argv[2]
    ds = f"digits:{digits}"
    with tempfile.TemporaryDirectory() as tmp:
        run([spore, "train", "--model", "simplenet", "--dataset", ds, "--epochs", "1", "--batch", "16", "--lr", "0.05",
             "--optimizer", "momentum", "--mode", "graph", "--seed", "1", "--threads", "2", "--ckpt-dir", tmp,
             "--json", "--no-progress"])
        ckpt = os.path.join(tmp, "simplenet_epoch1.safetensors")
        src = {}
        for ext in ("spore", "onnx"):
            src[ext] = os.path.join(tmp, f"net.{ext}")
            run([spore, "export", "--model", "simplenet", "--ckpt", ckpt, "--dataset", ds, "-o", src[ext]])

        reports = {}
        for name, (args, max_cost, max_rel, max_ratio) in MODES.items():
            source = src["onnx"] if name in ("fp16", "int8") else src["spore"]  # both importers are exercised
            out = os.path.join(tmp, f"net_{name}.spore")
            calib = ["--calib-data", ds] if name == "int8" else []
            rep = last_json(run([spore, "convert", source, "-o", out, "--eval-data", ds, "--json", "--threads", "2"]
                                + args + calib))
            reports[name] = rep
            rel = max(o["max_rel_error"] for o in rep["outputs"])
            cos = min(o["cosine"] for o in rep["outputs"])
            print(f"{name:12s} accuracy {rep['accuracy_f32']:.4f} -> {rep['accuracy_converted']:.4f} "
                  f"({rep['accuracy_delta_points']:+.2f} pt), max rel err {rel:.2e}, cosine {cos:.6f}, "
                  f"size {rep['size_before_bytes']} -> {rep['size_after_bytes']} ({rep['size_ratio']:.2f}x), "
                  f"ops {rep['ops_per_dtype_after']}", flush=True)
            missing = KEYS - rep.keys()
            check(not missing, f"{name}: keys {sorted(missing)} missing in {rep}")
            check(rep["size_after_bytes"] == os.path.getsize(out), f"{name}: size_after_bytes is not the file's size")
            check(rep["eval_samples"] == 360, f"{name}: eval_samples {rep['eval_samples']}")
            check(-rep["accuracy_delta_points"] <= max_cost, f"{name}: accuracy cost {-rep['accuracy_delta_points']} pt")
            check(rel <= max_rel, f"{name}: max rel error {rel} > {max_rel}")
            check(rep["size_ratio"] <= max_ratio, f"{name}: size ratio {rep['size_ratio']} > {max_ratio}")
            check(rep["ops_per_dtype_before"] == {"f32": sum(rep["ops_per_dtype_before"].values())},
                  f"{name}: the source is f32: {rep['ops_per_dtype_before']}")

        low = {"fp16": "f16", "bf16": "bf16", "mixed": "f16", "mixed_bf16": "bf16"}
        for name, dt in low.items():
            after = reports[name]["ops_per_dtype_after"]
            check(after.get(dt, 0) >= 5 and reports[name]["casts_inserted"] >= 2, f"{name}: {after}")
        check(reports["fp32"]["outputs"][0]["max_abs_error"] == 0, "force_fp32 on an f32 model changed its outputs")
        check(reports["weight_int8"]["weights_quantized"] == 2, reports["weight_int8"])
        check(reports["int8"]["ops_quantized"] >= 1, reports["int8"])

        # An f16 model back to f32: every op f32 again, the weights f32 (the file grows back).
        back = last_json(run([spore, "convert", os.path.join(tmp, "net_fp16.spore"), "-o", os.path.join(tmp, "back.spore"),
                              "--precision-mode", "force_fp32", "--json"]))
        check(set(back["ops_per_dtype_after"]) == {"f32"}, f"force_fp32 of an f16 model: {back['ops_per_dtype_after']}")
        check(back["size_ratio"] > 1.5, f"force_fp32 of an f16 model: size ratio {back['size_ratio']}")
        # A weight_int8 model converted again stays int8 (optimize-level 1 must not fold the dequantize back).
        again = last_json(run([spore, "convert", os.path.join(tmp, "net_weight_int8.spore"), "-o",
                               os.path.join(tmp, "again.spore"), "--json"]))
        check(again["size_ratio"] < 1.1, f"re-converting weight_int8 grew the file: {again['size_ratio']}")

        # Calibration from a directory of .npy files (5 single samples + one batch of 3) into a model whose batch is
        # fixed to 1 by --input-shape: every sample is used, one batch each.
        npy_dir = os.path.join(tmp, "calib")
        os.mkdir(npy_dir)
        for i in range(5):
            write_npy_f32(os.path.join(npy_dir, f"s{i}.npy"), [1, 8, 8], [((i * 37 + k * 11) % 17) / 17 for k in range(64)])
        write_npy_f32(os.path.join(npy_dir, "t_batch.npy"), [3, 1, 8, 8], [(k % 13) / 13 for k in range(192)])
        q = last_json(run([spore, "convert", src["spore"], "-o", os.path.join(tmp, "npy_int8.spore"), "--input-shape",
                           "x:1,1,8,8", "--quantize", "int8", "--calib-data", npy_dir, "--json"]))
        check(q["compare_samples"] == 8 and q["ops_quantized"] >= 1, f"int8 from .npy calibration: {q}")

        # Bad input: non-zero exit, one line naming the problem.
        bad_onnx = os.path.join(tmp, "frob.onnx")
        onnx_with_unknown_op(bad_onnx)
        out = os.path.join(tmp, "bad.spore")
        for args, needle, one_line in [
            ([src["spore"], "-o", out, "--precision-mode", "fp8"], "unknown precision mode 'fp8'", True),
            ([src["spore"], "-o", out, "--quantize", "int8"], "--calib-data", True),
            ([src["spore"], "-o", out, "--quantize", "int4"], "unknown --quantize 'int4'", True),
            ([src["spore"], "-o", out, "--input-shape", "image:1,1,8,8"], "no input 'image'", True),
            ([src["spore"], "-o", out, "--calib-method", "best"], "best", True),
            ([src["spore"], "-o", out, "--no-such-option"], "--no-such-option", True),
            ([bad_onnx, "-o", out], "FrobnicateZ", False),  # the import report's table lists the op
        ]:
            p = subprocess.run([spore, "convert"] + args, capture_output=True, text=True, timeout=60)
            check(p.returncode != 0, f"convert {args} exited 0")
            check(needle in p.stderr, f"convert {args}: '{needle}' not in stderr: {p.stderr}")
            if one_line:
                check(len(p.stderr.strip().splitlines()) == 1, f"convert {args}: more than one line: {p.stderr}")
            check(not os.path.exists(out), f"convert {args} wrote {out}")
    print("OK")


if __name__ == "__main__":
    main()
