#!/usr/bin/env python3
"""Every op the code names as "name"_op (the FNV-1a hash of the name, src/ir/op_id.h) is a built-in op listed in
src/ir/op_list.inc. The compiler cannot see the list (that is what keeps adding an op from recompiling
everything), so a misspelt name would compile to an id no op has; this check is where it fails instead."""
import pathlib
import re
import sys

root = pathlib.Path(sys.argv[1] if len(sys.argv) > 1 else pathlib.Path(__file__).resolve().parent.parent)
names = set(re.findall(r"^SPORE_OP\((\w+)\)", (root / "src/ir/op_list.inc").read_text(), re.M))
if len(names) < 50:
    sys.exit(f"check_op_names: read only {len(names)} names from src/ir/op_list.inc")
# "relu"_op, and spore::op_id("relu") where code outside namespace spore cannot use the literal.
use = re.compile(r'"([^"\\]*)"_op\b|spore::op_id\("([^"\\]*)"\)')
bad, uses = [], 0
for top in ("src", "include", "tools", "tests", "bench", "examples", "fuzz"):
    for p in sorted((root / top).rglob("*")):
        if p.suffix not in (".cpp", ".h", ".cc", ".hpp", ".inc") or not p.is_file() or p.name in ("op_id.h", "op_list.inc"):
            continue
        for lineno, line in enumerate(p.read_text(errors="replace").splitlines(), 1):
            for m in use.finditer(line):
                uses += 1
                name = m.group(1) if m.group(1) is not None else m.group(2)
                if name not in names:
                    bad.append(f"{p.relative_to(root)}:{lineno}: \"{name}\" is not an op in src/ir/op_list.inc")
if bad:
    print("\n".join(bad))
    sys.exit(1)
print(f"check_op_names: {uses} uses of {len(names)} op names, all known")
