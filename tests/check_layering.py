#!/usr/bin/env python3
"""Fails if a file in src/<layer> includes a header from a layer above it (docs/ARCHITECTURE.md), if a public header
(include/spore/) includes a backend's or the compiler passes' internals, or if the CLI (tools/) includes a backend's
headers (it reaches backends through the runtime)."""
import os
import re
import sys

# layer -> layers it may include (besides itself). Mirrors the CMake link graph.
ALLOWED = {
    "base": set(),
    "tensor": {"base"},
    "ir": {"base", "tensor"},
    "ops": {"base", "tensor", "ir"},
    "passes": {"base", "tensor", "ir", "ops"},
    "backend/reference": {"base", "tensor", "ir", "ops"},
    "backend/null": {"base", "tensor", "ir", "ops"},
    "backend/cpu": {"base", "tensor", "ir", "ops"},
    # The runtime reaches backends only through ops/backend.h (each backend registers its BackendImpl).
    "runtime": {"base", "tensor", "ir", "ops", "autodiff", "passes"},
}
ALLOWED["autodiff"] = {"base", "tensor", "ir", "ops"}
for upper, below in {
    "io": {"base", "tensor", "ir", "ops"},
    "data": {"base", "tensor"},
    # communicators; the MPI module (parallel/module/) is part of the layer's folder
    "parallel": {"base"},
    "nn": {"base", "tensor", "ir", "ops", "autodiff", "passes", "runtime"},
    "train": {"base", "tensor", "ir", "ops", "autodiff", "passes", "runtime", "nn", "data", "io", "llm", "parallel"},
    "llm": {"base", "tensor", "ir", "ops", "autodiff", "passes", "runtime", "nn", "io", "data"},
    # deployed models: load (io) + compile per input signature (runtime)
    "deploy": {"base", "tensor", "ir", "ops", "autodiff", "passes", "runtime", "io"},
    # the HTTP server: drives llm (the engine) and deploy (tensor models); knows HTTP and JSON, not kernels
    "serve": {"base", "tensor", "ir", "ops", "autodiff", "passes", "runtime", "nn", "io", "data", "llm", "deploy"},
}.items():
    ALLOWED[upper] = below

# Above src/: what the public headers and the CLI may include from src/ (their own files are theirs).
OUTER = {
    "include": set(ALLOWED) - {"passes", "backend/reference", "backend/null", "backend/cpu"},
    "tools": set(ALLOWED) - {"backend/reference", "backend/null", "backend/cpu"},
}

INCLUDE = re.compile(r'^\s*#\s*include\s*"([^"]+)"')


def layer_of(path):
    for layer in sorted(ALLOWED, key=len, reverse=True):
        if path == layer or path.startswith(layer + "/"):
            return layer
    return None


def sources(top):
    """(path, path relative to top) of every C++ source under top."""
    for dirpath, _, files in os.walk(top):
        for f in files:
            if f.endswith((".h", ".cpp", ".inc")):
                full = os.path.join(dirpath, f)
                yield full, os.path.relpath(full, top)


def includes(path):
    """(line number, included path, its layer or None) of every quoted include."""
    with open(path, encoding="utf-8") as fh:
        for lineno, line in enumerate(fh, 1):
            m = INCLUDE.match(line)
            if m:
                yield lineno, m.group(1), layer_of(m.group(1))


def main():
    root = sys.argv[1] if len(sys.argv) > 1 else "."
    errors = []
    for full, rel in sources(os.path.join(root, "src")):
        me = layer_of(rel)
        if me is None:
            errors.append(f"{rel}: file is in no known layer (add it to tests/check_layering.py)")
            continue
        for lineno, inc, target in includes(full):
            if target is not None and target != me and target not in ALLOWED[me]:
                errors.append(f"src/{rel}:{lineno}: layer '{me}' includes '{inc}' from layer '{target}'")
    for outer, allowed in OUTER.items():
        for full, rel in sources(os.path.join(root, outer)):
            for lineno, inc, target in includes(full):
                if target is not None and target not in allowed:
                    errors.append(f"{outer}/{rel}:{lineno}: '{outer}' includes '{inc}' from layer '{target}'")
    for e in errors:
        print(e)
    print(f"layering: {len(errors)} violation(s)")
    return 1 if errors else 0


if __name__ == "__main__":
    sys.exit(main())
