#!/usr/bin/env python3
"""spore check-ops and spore eval on ONNX files.

usage: onnx_import_test.py SPORE check-ops      builds two small models with onnx.helper (python3-onnx): one with
                                                an op spore lacks (listed with its node name, exit code 3) and one
                                                that is fully supported (exit 0; spore run-free import check)
       onnx_import_test.py SPORE dynamic        a model as exporters write it (dynamic batch; Shape -> Gather ->
                                                Concat -> Reshape; opset 18 ReduceMean with axes as an input):
                                                spore run at two batch sizes and spore bench with no --input-shape,
                                                outputs checked against NumPy; check-ops says it compiles
       onnx_import_test.py SPORE sequence       a model with an ONNX sequence input and output (SequenceInsert,
                                                SequenceLength, ConcatFromSequence): spore run feeds it as
                                                --input s=A.npy,B.npy (and s=[]), writes y.0.npy, y.1.npy, ...;
                                                checked against NumPy; a sequence not given is an error naming it
       onnx_import_test.py SPORE eval-mnist8    spore eval on the ONNX zoo mnist-8 over MNIST t10k (>= 98.5%);
                                                exits 77 (skip) without $SPORE_SHARED_DATA unless CI=true
"""
import json
import os
import subprocess
import sys
import tempfile

try:
    import onnx
    from onnx import TensorProto, helper
except ImportError:  # python3-onnx (Debian); a pyenv python on PATH may lack it
    if os.path.exists("/usr/bin/python3") and os.path.realpath(sys.executable) != os.path.realpath("/usr/bin/python3"):
        os.execv("/usr/bin/python3", ["/usr/bin/python3"] + sys.argv)
    raise


def run(*args):
    return subprocess.run(list(args), capture_output=True, text=True, timeout=600)


def fail(msg, p=None):
    if p is not None:
        msg += f"\n--- rc={p.returncode}\n--- stdout:\n{p.stdout[-4000:]}\n--- stderr:\n{p.stderr[-4000:]}"
    sys.exit(msg)


def save(model, path):
    onnx.checker.check_model(model)
    onnx.save(model, path)


def check_ops(spore):
    tmp = tempfile.mkdtemp(prefix="spore_onnx_")
    x = helper.make_tensor_value_info("x", TensorProto.FLOAT, ["batch", 4])
    w = helper.make_tensor("w", TensorProto.FLOAT, [3, 4], [0.1 * i for i in range(12)])
    b = helper.make_tensor("b", TensorProto.FLOAT, [3], [0.5, -0.5, 1.0])
    gemm = helper.make_node("Gemm", ["x", "w", "b"], ["h"], name="fc", transB=1)
    relu = helper.make_node("Relu", ["h"], ["y"], name="act")
    y = helper.make_tensor_value_info("y", TensorProto.FLOAT, ["batch", 3])
    ok = helper.make_model(helper.make_graph([gemm, relu], "ok", [x], [y], [w, b]),
                           opset_imports=[helper.make_opsetid("", 13)])
    ok_path = os.path.join(tmp, "ok.onnx")
    save(ok, ok_path)

    # Bernoulli has no spore mapping (its values are random draws no other engine reproduces); two nodes so both names
    # must be listed.
    m = helper.make_tensor_value_info("m", TensorProto.FLOAT, [2, 3])
    det1 = helper.make_node("Bernoulli", ["m"], ["d1"], name="det_first")
    det2 = helper.make_node("Bernoulli", ["m"], ["d2"], name="det_second")
    add = helper.make_node("Add", ["d1", "d2"], ["z"], name="sum")
    z = helper.make_tensor_value_info("z", TensorProto.FLOAT, [2, 3])
    bad = helper.make_model(helper.make_graph([det1, det2, add], "bad", [m], [z]),
                            opset_imports=[helper.make_opsetid("", 15)])
    bad_path = os.path.join(tmp, "bad.onnx")
    save(bad, bad_path)

    p = run(spore, "check-ops", ok_path)
    if p.returncode != 0 or "Gemm" not in p.stdout or "All ops supported" not in p.stdout:
        fail("check-ops on a supported model must list its ops and exit 0", p)
    p = run(spore, "check-ops", ok_path, "--json")
    j = json.loads(p.stdout)
    if p.returncode != 0 or not j["all_supported"] or {o["op"] for o in j["ops"]} != {"Gemm", "Relu"}:
        fail("check-ops --json on a supported model", p)

    p = run(spore, "check-ops", bad_path)
    if p.returncode != 3:
        fail("check-ops on a model with an unsupported op must exit 3", p)
    for want in ("Bernoulli", "unsupported", "det_first", "det_second", "--custom-ops"):
        if want not in p.stdout:
            fail(f"check-ops output lacks '{want}'", p)
    p = run(spore, "check-ops", bad_path, "--json")
    j = json.loads(p.stdout)
    det = [o for o in j["ops"] if o["op"] == "Bernoulli"]
    if p.returncode != 3 or j["all_supported"] or not det or det[0]["status"] != "unsupported" \
            or sorted(det[0]["nodes"]) != ["det_first", "det_second"] or det[0]["count"] != 2:
        fail("check-ops --json on a model with an unsupported op", p)

    # Importing it (spore eval / run / convert load models the same way) fails with the same table, one line per op.
    p = run(spore, "eval", bad_path, "--dataset", "digits:/nonexistent")
    if p.returncode == 0:
        fail("eval of a model with unsupported ops must fail", p)

    p = run(spore, "check-ops", os.path.join(tmp, "missing.onnx"))
    if p.returncode != 1 or "missing.onnx" not in p.stderr:
        fail("check-ops on a missing file: exit 1 naming it", p)
    print("check-ops: ok")


def dynamic(spore):
    import numpy as np
    tmp = tempfile.mkdtemp(prefix="spore_onnx_dyn_")
    x = helper.make_tensor_value_info("x", TensorProto.FLOAT, ["batch", 3, 4, 4])
    y = helper.make_tensor_value_info("y", TensorProto.FLOAT, ["batch", 3])
    w = np.linspace(-1, 1, 48 * 3, dtype=np.float32).reshape(48, 3)
    nodes = [
        helper.make_node("Relu", ["x"], ["r"], name="relu"),
        helper.make_node("Shape", ["r"], ["shp"], name="shape"),
        helper.make_node("Gather", ["shp", "zero"], ["n"], axis=0, name="gather"),
        helper.make_node("Concat", ["n", "minus1"], ["newshape"], axis=0, name="concat"),
        helper.make_node("Reshape", ["r", "newshape"], ["flat"], name="flatten"),
        helper.make_node("MatMul", ["flat", "w"], ["h"], name="fc"),
        helper.make_node("Unsqueeze", ["h", "last"], ["h3"], name="unsq"),
        helper.make_node("ReduceMean", ["h3", "last"], ["y"], keepdims=0, name="mean"),  # opset 18: axes input
    ]
    inits = [helper.make_tensor("zero", TensorProto.INT64, [1], [0]),
             helper.make_tensor("minus1", TensorProto.INT64, [1], [-1]),
             helper.make_tensor("last", TensorProto.INT64, [1], [2]),
             helper.make_tensor("w", TensorProto.FLOAT, [48, 3], w.flatten().tolist())]
    m = helper.make_model(helper.make_graph(nodes, "dyn", [x], [y], inits), opset_imports=[helper.make_opsetid("", 18)])
    path = os.path.join(tmp, "dyn.onnx")
    onnx.save(m, path)  # onnx 1.12's checker knows opsets up to 17
    for batch in (1, 5):
        xv = np.random.default_rng(batch).standard_normal((batch, 3, 4, 4)).astype(np.float32)
        np.save(os.path.join(tmp, "x.npy"), xv)
        out = os.path.join(tmp, f"out{batch}")
        p = run(spore, "run", path, "--input", f"x={os.path.join(tmp, 'x.npy')}", "--output", out)
        if p.returncode != 0 or "imported for these shapes" not in p.stdout:
            fail(f"spore run of a dynamic-batch model at batch {batch} without --input-shape", p)
        want = np.maximum(xv, 0).reshape(batch, -1) @ w
        got = np.load(os.path.join(out, "y.npy"))
        if got.shape != want.shape or not np.allclose(got, want, rtol=1e-4, atol=1e-5):
            fail(f"batch {batch}: output differs from NumPy (max err {np.abs(got - want).max()})")
    p = run(spore, "bench", path, "--batch", "4", "--iters", "3", "--json")
    if p.returncode != 0 or json.loads(p.stdout.splitlines()[-1])["batch"] != 4:
        fail("spore bench --batch 4 of a dynamic-batch model without --input-shape", p)
    p = run(spore, "check-ops", path)
    if p.returncode != 0 or "compiles for batch 1" not in p.stdout:
        fail("check-ops must compile the model and say so", p)
    # spore convert: the model imports only with its batch fixed. Without --input-shape or .npy calibration data it
    # says so; with a .npy calibration directory it takes the first file's shape, says so and records it.
    p = run(spore, "convert", path, "-o", os.path.join(tmp, "f16.spore"), "--precision-mode", "allow_fp32_to_fp16")
    if p.returncode == 0 or "--input-shape" not in p.stderr or "symbolic dim" not in p.stderr:
        fail("convert of a shape-computing dynamic model without --input-shape must fail naming --input-shape", p)
    calib = os.path.join(tmp, "calib")
    os.mkdir(calib)
    rng = np.random.default_rng(7)
    for i in range(4):
        np.save(os.path.join(calib, f"{i}.npy"), rng.standard_normal((1, 3, 4, 4)).astype(np.float32))
    q = os.path.join(tmp, "int8.spore")
    p = run(spore, "convert", path, "-o", q, "--quantize", "int8", "--calib-data", calib, "--json")
    if p.returncode != 0 or "x:1,3,4,4" not in p.stderr:
        fail("convert --quantize int8 with .npy calibration of a shape-computing model: shape from the data", p)
    rep = json.loads(p.stdout.splitlines()[-1])
    if rep.get("input_shape_fixed") != "x:1,3,4,4" or rep["ops_quantized"] != 1:
        fail(f"convert report: input_shape_fixed / ops_quantized: {rep}", p)
    xv = rng.standard_normal((1, 3, 4, 4)).astype(np.float32)
    np.save(os.path.join(tmp, "xq.npy"), xv)
    p = run(spore, "run", q, "--input", f"x={os.path.join(tmp, 'xq.npy')}", "--output", os.path.join(tmp, "outq"))
    if p.returncode != 0:
        fail("spore run of the int8 conversion", p)
    want = np.maximum(xv, 0).reshape(1, -1) @ w
    got = np.load(os.path.join(tmp, "outq", "y.npy"))
    err = np.abs(got - want).max() / np.abs(want).max()
    if got.shape != want.shape or err > 0.05:
        fail(f"int8 conversion: output {got} vs NumPy {want} (max err {err:.3f} of the largest output)")
    print("dynamic: ok")


def eval_mnist8(spore):
    data = os.environ.get("SPORE_SHARED_DATA", "")
    model = os.path.join(data, "onnx-models", "mnist-8.onnx")
    mnist = os.path.join(data, "mnist")
    if not data or not os.path.exists(model) or not os.path.isdir(mnist):
        if os.environ.get("CI") == "true":
            fail(f"shared data missing under CI=true: {model}")
        print("SKIP: no $SPORE_SHARED_DATA/onnx-models/mnist-8.onnx")
        sys.exit(77)
    # mnist-8 was trained on raw pixels 0..255; spore's MNIST loader gives [0, 1].
    p = run(spore, "eval", model, "--dataset", f"mnist:{mnist}", "--split", "t10k", "--input-scale", "255", "--json")
    if p.returncode != 0:
        fail("spore eval mnist-8", p)
    j = json.loads(p.stdout)
    for key in ("accuracy", "loss", "samples"):
        if key not in j:
            fail(f"eval --json lacks '{key}'", p)
    if j["samples"] != 10000 or j["accuracy"] < 0.985:
        fail(f"mnist-8 on t10k: accuracy {j['accuracy']} over {j['samples']} samples (want >= 0.985 over 10000)", p)
    print(f"mnist-8: accuracy {j['accuracy']:.4f} on {j['samples']} t10k images")


def sequence(spore):
    import numpy as np
    tmp = tempfile.mkdtemp(prefix="spore_onnx_seq_")
    seq_t = helper.make_sequence_type_proto(helper.make_tensor_type_proto(TensorProto.FLOAT, ["N"]))
    g = helper.make_graph(
        [helper.make_node("SequenceInsert", ["s", "x", "zero"], ["y"], name="insert"),
         helper.make_node("SequenceLength", ["y"], ["n"], name="len"),
         helper.make_node("ConcatFromSequence", ["y"], ["c"], name="cat", axis=0)],
        "seq_io", [helper.make_value_info("s", seq_t), helper.make_tensor_value_info("x", TensorProto.FLOAT, ["M"])],
        [helper.make_value_info("y", seq_t), helper.make_tensor_value_info("n", TensorProto.INT64, []),
         helper.make_tensor_value_info("c", TensorProto.FLOAT, ["K"])],
        [helper.make_tensor("zero", TensorProto.INT64, [], [0])])
    path = os.path.join(tmp, "seq.onnx")
    save(helper.make_model(g, opset_imports=[helper.make_opsetid("", 17)]), path)
    rng = np.random.default_rng(3)
    arrs = {"a": rng.standard_normal(3).astype(np.float32), "b": rng.standard_normal(5).astype(np.float32),
            "x": rng.standard_normal(2).astype(np.float32)}
    files = {}
    for k, v in arrs.items():
        files[k] = os.path.join(tmp, k + ".npy")
        np.save(files[k], v)
    for elems in (["a", "b"], []):
        out = os.path.join(tmp, "out%d" % len(elems))
        spec = ",".join(files[e] for e in elems) if elems else "[]"
        p = run(spore, "run", path, "--input", f"s={spec}", "--input", f"x={files['x']}", "--output", out)
        if p.returncode != 0 or f"output y: sequence of {len(elems) + 1}" not in p.stdout:
            fail(f"spore run with a sequence of {len(elems)}", p)
        want = [arrs["x"]] + [arrs[e] for e in elems]
        for i, w in enumerate(want):
            got = np.load(os.path.join(out, f"y.{i}.npy"))
            if not np.array_equal(got, w):
                fail(f"y.{i}: {got} vs {w}", p)
        if os.path.exists(os.path.join(out, f"y.{len(want)}.npy")):
            fail(f"y.{len(want)}.npy written for a sequence of {len(want)}", p)
        if int(np.load(os.path.join(out, "n.npy"))) != len(want):
            fail("n (SequenceLength) differs", p)
        if not np.array_equal(np.load(os.path.join(out, "c.npy")), np.concatenate(want)):
            fail("c (ConcatFromSequence) differs from numpy.concatenate", p)
    p = run(spore, "run", path, "--input", f"x={files['x']}")
    if p.returncode != 1 or "input 's' is a sequence" not in p.stderr:
        fail("spore run without the sequence input should fail naming it", p)
    print("sequence input and output through spore run: ok")


if __name__ == "__main__":
    spore, what = sys.argv[1], sys.argv[2]
    {"check-ops": check_ops, "dynamic": dynamic, "sequence": sequence, "eval-mnist8": eval_mnist8}[what](spore)
