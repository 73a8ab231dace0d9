"""spore.set_context / get_context (MindSpore's): execution mode and compile options.

GRAPH_MODE makes spore.train.Model compile each training step (and eval/predict) into a plan; PYNATIVE_MODE runs
them eagerly. Calling a cell directly always runs it eagerly; spore.jit compiles a function explicitly. The compile
options (memory_optimize_level, max_device_memory, save_graphs, recompute) apply to every later compile.
"""
import re

from . import _spore

GRAPH_MODE = 0
PYNATIVE_MODE = 1

_LEVELS = {"O0": 0, "O1": 1, "O2": 2}


_UNITS = {"": 1, "B": 1, "K": 10 ** 3, "KB": 10 ** 3, "M": 10 ** 6, "MB": 10 ** 6, "G": 10 ** 9, "GB": 10 ** 9,
          "T": 10 ** 12, "TB": 10 ** 12, "KIB": 1 << 10, "MIB": 1 << 20, "GIB": 1 << 30, "TIB": 1 << 40}


def _bytes(v, what="max_device_memory"):
    """A byte count: an int, or a size as the CLI's --max-memory takes it ("2GB" = 2e9 bytes, "512MiB" = 512 * 2^20)."""
    if isinstance(v, bool):
        raise TypeError(f"{what}: a byte count or a string such as '2GB'")
    if isinstance(v, int):
        if v < 0:
            raise ValueError(f"{what} {v}: expected >= 0 (0: unlimited)")
        return v
    m = re.fullmatch(r"\s*([0-9]+(?:\.[0-9]*)?(?:[eE][0-9]+)?)\s*([A-Za-z]*)\s*", str(v))
    if not m or m.group(2).upper() not in _UNITS:
        raise ValueError(f"{what} {v!r}: expected a byte count or a size such as 2GB, 512MiB (B, KB, MB, GB, TB: "
                         "powers of 1000; KiB, MiB, GiB, TiB: of 1024)")
    return int(float(m.group(1)) * _UNITS[m.group(2).upper()])


def set_context(mode=None, deterministic=None, memory_optimize_level=None, max_device_memory=None, save_graphs=None,
                save_graphs_path=None, recompute=None, device_target=None, threads=None):
    """mode: GRAPH_MODE or PYNATIVE_MODE. memory_optimize_level: 0/1/2 or "O0"/"O1"/"O2". max_device_memory: bytes or
    a size as the CLI takes it ("3.5GB" = 3.5e9 bytes, "2GiB" = 2^31; plans needing more fail at compile). save_graphs: a directory (or True with save_graphs_path) to dump
    every compile's graph after each pass. device_target: "CPU" (the backend spore has)."""
    opts = {}
    if mode is not None:
        if mode not in (GRAPH_MODE, PYNATIVE_MODE):
            raise ValueError(f"set_context: mode {mode!r} (spore.GRAPH_MODE or spore.PYNATIVE_MODE)")
        opts["mode"] = "graph" if mode == GRAPH_MODE else "pynative"
    if deterministic is not None:
        if isinstance(deterministic, str):
            deterministic = {"ON": True, "OFF": False}.get(deterministic.upper(), deterministic)
        if not isinstance(deterministic, bool):
            raise TypeError(f"set_context: deterministic {deterministic!r} (True/False or 'ON'/'OFF')")
        opts["deterministic"] = deterministic
    if memory_optimize_level is not None:
        lvl = _LEVELS.get(memory_optimize_level, memory_optimize_level)
        if lvl not in (0, 1, 2) or isinstance(lvl, bool):
            raise ValueError(f"set_context: memory_optimize_level {memory_optimize_level!r} (0, 1, 2 or 'O0'..'O2')")
        opts["memory_optimize_level"] = lvl
    if max_device_memory is not None:
        opts["max_device_memory"] = _bytes(max_device_memory)
    if save_graphs is not None:
        if save_graphs is True or save_graphs in (1, 2, 3):
            if not save_graphs_path:
                raise ValueError("set_context: save_graphs=True needs save_graphs_path")
            opts["save_graphs"] = str(save_graphs_path)
        elif save_graphs is False or save_graphs == 0:
            opts["save_graphs"] = ""
        else:
            opts["save_graphs"] = str(save_graphs)
    if recompute is not None:
        opts["recompute"] = bool(recompute)
    if device_target is not None and str(device_target).upper() != "CPU":
        raise ValueError(f"set_context: device_target {device_target!r}: spore runs on 'CPU' here")
    if threads is not None:
        if isinstance(threads, bool) or not isinstance(threads, int) or threads < 1:
            raise ValueError(f"set_context: threads {threads!r} (an int >= 1)")
        opts["threads"] = threads
    _spore._set_context(opts)


def get_context(key):
    """One context value: mode (GRAPH_MODE / PYNATIVE_MODE), deterministic, memory_optimize_level,
    max_device_memory, save_graphs, recompute, threads, device_target."""
    c = _spore._get_context()
    if key == "mode":
        return GRAPH_MODE if c["mode"] == "graph" else PYNATIVE_MODE
    if key == "mode_name":
        return c["mode"]
    if key == "device_target":
        return "CPU"
    if key not in c:
        raise ValueError(f"get_context: unknown key {key!r} ({', '.join(['mode', 'device_target', *c])})")
    return c[key]
