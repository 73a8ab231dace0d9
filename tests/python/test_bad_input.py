"""Bad input from Python never aborts the process: every spore.ops function, every nn class, the training model,
datasets, export / load / convert / profile and the LLM loader are called with wrong types, None, wrong shapes and
out-of-range values; each call must return or raise a Python exception. The sweep runs in a child process so a
crash (an abort, a segfault) fails the test instead of killing pytest, and it reports the call that crashed."""
import os
import subprocess
import sys
import textwrap

SWEEP = textwrap.dedent('''
    import itertools, sys
    import numpy as np
    import spore
    from spore import nn

    t0 = spore.tensor(np.float32(1.5))
    t1 = spore.tensor(np.arange(6, dtype=np.float32))
    t2 = spore.tensor(np.ones((2, 3), np.float32))
    t4 = spore.tensor(np.ones((1, 2, 3, 3), np.float32))
    ti = spore.tensor(np.arange(6, dtype=np.int64))
    tb = spore.tensor(np.ones(3, np.bool_))
    empty = spore.tensor(np.zeros((0, 3), np.float32))
    junk = [None, "x", -1, 0, 2.5, [1, 2], t0, t1, t2, t4, ti, tb, empty]
    tensors = [t0, t1, t2, t4, ti, tb, empty]
    calls = 0

    def attempt(what, f, *args, **kw):
        global calls
        calls += 1
        sys.stderr.write(what + "\\n")  # the last line names the call if the process dies
        try:
            f(*args, **kw)
        except Exception:
            pass

    for name in spore.ops.__all__:
        f = getattr(spore.ops, name)
        for k in (0, 1, 2):
            for args in itertools.product(junk, repeat=k):
                attempt(f"ops.{name}{args!r:.200}", f, *args)
        for args in itertools.product(tensors, repeat=3):
            attempt(f"ops.{name}(3 tensors)", f, *args)

    classes = [getattr(nn, n) for n in nn.__all__ if isinstance(getattr(nn, n), type)
               and issubclass(getattr(nn, n), spore.nn.Cell)]
    for cls in classes:
        for k in (0, 1, 2, 3):
            for args in itertools.product([None, "x", -1, 0, 2.5, 3], repeat=k):
                attempt(f"nn.{cls.__name__}{args!r}", cls, *args)
        try:
            cell = cls(4, 4) if cls not in (nn.ReLU, nn.SiLU, nn.Tanh, nn.Sigmoid, nn.Flatten, nn.SequentialCell,
                                            nn.CellList) else cls()
        except Exception:
            continue
        for args in itertools.product(junk, repeat=2):
            attempt(f"{cls.__name__}(4, 4)({args!r:.200})", cell, *args)
    for fn in (nn.SGD, nn.Momentum, nn.Adam, nn.AdamWeightDecay):
        for args in itertools.product([None, "x", -1.0, [t1], [], nn.Dense(2, 2)], repeat=2):
            attempt(f"{fn.__name__}{args!r:.200}", fn, *args)

    net = nn.Dense(4, 3)
    loss = nn.SoftmaxCrossEntropyWithLogits(True, "mean")
    opt = nn.SGD(net.trainable_params(), 0.1)
    for args in itertools.product([None, "x", net, loss, opt, 1], repeat=3):
        attempt(f"Model{args!r:.200}", spore.Model, *args)
    model = spore.Model(net, loss, opt)
    ds = spore.dataset.NumpySlicesDataset((np.ones((8, 4), np.float32), np.zeros(8, np.int32))).batch(4)
    bad_ds = spore.dataset.NumpySlicesDataset((np.ones((8, 5), np.float32), np.full(8, 7, np.int32))).batch(4)
    for m in ("train", "eval", "predict", "train_step", "save_checkpoint", "load_checkpoint"):
        for args in itertools.product([None, "x", -1, 0, 1, t2, t4, ti, ds, bad_ds, "/nonexistent/c.st"], repeat=2):
            attempt(f"Model.{m}{args!r:.200}", getattr(model, m), *args)
    for f in (spore.dataset.NumpySlicesDataset, spore.dataset.GeneratorDataset, spore.dataset.load):
        for args in itertools.product([None, "x", -1, [], [[1], [2, 3]], np.ones(3), "digits:/nope"], repeat=1):
            attempt(f"{f.__name__}{args!r:.200}", f, *args)
    for args in itertools.product([None, "x", 0, -2, 10 ** 12], repeat=2):
        attempt(f"ds.batch/shuffle{args!r}", lambda a, b: ds.batch(a).shuffle(b), *args)
    for f, args in ((spore.export, (net, None)), (spore.export, (net, t1)), (spore.export, (None, t2)),
                    (spore.load, ("/nonexistent.onnx",)), (spore.load, (None,)), (spore.convert, (None, None)),
                    (spore.convert, ("/nonexistent.onnx", "/tmp/x.spore")), (spore.profile, (None,)),
                    (spore.llm.load, ("/nonexistent.gguf",)), (spore.llm.load, (None,)),
                    (spore.load_custom_ops, ("/nonexistent.so",)), (spore.set_context, ()),
                    (spore.from_numpy, (None,)), (spore.from_numpy, (np.ones(3, np.complex64),)),
                    (spore.tensor, (object(),)), (spore.jit, (None,))):
        attempt(f"{getattr(f, '__name__', f)}{args!r:.200}", f, *args)
        attempt(f"{getattr(f, '__name__', f)}(file_name=...)", f, *args, file_name="/nonexistent/dir/x")
    print("calls", calls)
''')


def test_no_bad_input_crashes_the_process(tmp_path):
    script = tmp_path / "sweep.py"
    script.write_text(SWEEP)
    p = subprocess.run([sys.executable, str(script)], capture_output=True, text=True, timeout=600, env=os.environ)
    last = p.stderr.strip().splitlines()[-3:]
    assert p.returncode == 0, f"the process died ({p.returncode}) after: {last}"
    assert int(p.stdout.split()[-1]) > 30000
