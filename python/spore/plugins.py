"""Custom-op plugins from Python (docs/CUSTOM_OPS.md): spore.load_custom_ops("libmyops.so") registers the library's
ops with the engine (eager, graph mode, gradients, .spore and ONNX files, as `--custom-ops` does for the CLI) and adds
a spore.ops function for each."""
import os

from . import _spore, ops


def load_custom_ops(path):
    """Loads a plugin (.so exporting include/spore/custom_op_abi.h) and returns what it registered: a dict of path,
    name, version, domain and ops. Loading the same library again is a no-op returning the same dict. A path without
    '/' is a file in the current directory. Errors (not a library, another ABI version, a clashing op name) raise
    spore.Error naming the library and the op, and register nothing."""
    info = _spore._load_custom_ops(os.fspath(path))
    for d in _spore._op_defs():
        name = d["name"]
        if name in info["ops"] and name.isidentifier() and not hasattr(ops, name):
            setattr(ops, name, ops._make(d))
            ops.names.append(name)
            ops.__all__.append(name)
    return info
