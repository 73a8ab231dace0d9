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


def _bytes(v):
    if isinstance(v, bool):
        raise TypeError("max_device_memory: a byte count or a string such as '2GB'")
    if isinstance(v, int):
        if v < 0:
            raise ValueError(f"max_device_memory {v}: expected >= 0 (0: unlimited)")
        return v
    m = re.fullmatch(r"\s*([0-9]*\.?[0-9]+)\s*(B|KB|MB|GB|TB)?\s*", str(v), re.IGNORECASE)
    if not m:
        raise ValueError(f"max_device_memory {v!r}: expected a byte count or a size such as '3.5GB'")
    unit = (m.group(2) or "B").upper()
    return int(float(m.group(1)) * {"B": 1, "KB": 1 << 10, "MB": 1 << 20, "GB": 1 << 30, "TB": 1 << 40}[unit])


def set_context(mode=None, deterministic=None, memory_optimize_level=None, max_device_memory=None, save_graphs=None,
                save_graphs_path=None, recompute=None, device_target=None, threads=None):
    """mode: GRAPH_MODE or PYNATIVE_MODE. memory_optimize_level: 0/1/2 or "O0"/"O1"/"O2". max_device_memory: bytes or
    "3.5GB" (plans needing more fail at compile). save_graphs: a directory (or True with save_graphs_path) to dump
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
