"""Does raising glibc's mmap and trim thresholds pay? The same solver work with and without, side by side.

glibc's malloc returns blocks above its mmap threshold to the kernel when they are
freed, and the generated prox and channel functions create many temporaries of the
size of a node batch, so raising the thresholds (``mallopt``) keeps those blocks for
reuse. It made one fused prox Newton evaluation on 30k nodes 4x faster, but measured
here on whole channel evaluations and solves it does not pay (0.98-1.03x for a
channel evaluation, 0.79-1.05x for a solve, over runs of 3 and 5 rounds on a shared
2-core machine), so the solver leaves the allocator alone. Each variant runs in its own
child process (the tuning cannot be undone within one), alternating, ``--rounds``
times; the minimum per task is printed:

* one checked channel evaluation (``update_hat_overlaps``) with the fast reporting rule
  at the semantic fixed point at alpha = 1;
* one fast solve of the semantic branch at alpha = 2 from a warm start.

Run: python benchmarks/bench_allocator.py [--rounds 3]
"""
import argparse
import json
import subprocess
import sys

CHILD = r"""
import ctypes, ctypes.util, json, sys, time
if sys.argv[1] == "tuned":  # M_MMAP_THRESHOLD (-3) 32 MiB, M_TRIM_THRESHOLD (-1) 256 MiB
    libc = ctypes.CDLL(ctypes.util.find_library("c") or "libc.so.6")
    assert libc.mallopt(-3, 32 << 20) == 1 and libc.mallopt(-1, 256 << 20) == 1
from derivations import ModelSpec
from numerics.model.bound import bind
from numerics.fixed_points.lines import solve_branch
from numerics.overlaps import Overlaps
from numerics.precision import PRECISIONS
from numerics.model.saddle_point import update_hat_overlaps

spec = ModelSpec()
model = bind(spec)
rule = PRECISIONS["fast"].check_rule
point = Overlaps(q=0.0680890, m=0.0, V=21.61982, theta=0.0945858)
update_hat_overlaps(model, point, 1.0, rule)  # warm-up: generated code loaded, caches filled
times = {}
t = time.perf_counter()
for _ in range(3):
    update_hat_overlaps(model, point, 1.0, rule)
times["channel evaluation (fast reporting rule)"] = (time.perf_counter() - t) / 3
t = time.perf_counter()
solve_branch(spec, 2.0, "semantic", "fast", start=Overlaps(q=0.1148, m=0.0, V=12.67, theta=0.1582))
times["fast solve, semantic, alpha = 2, warm start"] = time.perf_counter() - t
print(json.dumps(times))
"""


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--rounds", type=int, default=3)
    args = ap.parse_args()
    best = {}
    for _ in range(args.rounds):
        for variant in ("tuned", "untuned"):
            out = subprocess.run([sys.executable, "-c", CHILD, variant], capture_output=True, text=True, check=True)
            for task, t in json.loads(out.stdout.splitlines()[-1]).items():
                best.setdefault(task, {}).setdefault(variant, []).append(t)
    print(f"{'task':<46} {'tuned/s':>8} {'untuned/s':>10} {'untuned/tuned':>14}")
    for task, t in best.items():
        a, b = min(t["tuned"]), min(t["untuned"])
        print(f"{task:<46} {a:8.3f} {b:10.3f} {b / a:14.2f}")


if __name__ == "__main__":
    main()
