#!/usr/bin/env python3
"""A/B of two spore builds on the same models: `spore bench --json` p50, runs alternating (old, new, new, old, ...),
median of the repetitions per build, ratio new/old. For checking that a change costs no speed.

usage: ab_spore.py OLD_SPORE NEW_SPORE REPS MODEL:BATCH:THREADS [...]   (BATCH 0: the model's own fixed shapes)"""
import json, subprocess, statistics, sys
if len(sys.argv) < 5:
    sys.exit(__doc__)
OLD, NEW, reps = sys.argv[1], sys.argv[2], int(sys.argv[3])
cases = [(m, int(b), int(t)) for m, b, t in (a.rsplit(':', 2) for a in sys.argv[4:])]
print(f"{'model':<18} {'batch':>5} {'thr':>3} {'old p50 ms':>10} {'new p50 ms':>10} {'new/old':>8}")
for model, b, t in cases:
    res = {OLD: [], NEW: []}
    for r in range(reps):
        for exe in (OLD, NEW) if r % 2 == 0 else (NEW, OLD):
            out = subprocess.run([exe, 'bench', model] + (['--batch', str(b)] if b else []) +
                                 ['--threads', str(t), '--time-s', '1', '--json'],
                                 capture_output=True, text=True, env={'PATH': '/usr/bin:/bin'})
            if out.returncode != 0:
                sys.exit(f"ab_spore: {exe} bench {model} failed: {out.stderr.strip()}")
            res[exe].append(json.loads(out.stdout.strip().splitlines()[-1])['p50_ms'])
    o, n = statistics.median(res[OLD]), statistics.median(res[NEW])
    print(f"{model.split('/')[-1]:<18} {b:>5} {t:>3} {o:>10.4f} {n:>10.4f} {n/o:>8.3f}", flush=True)
