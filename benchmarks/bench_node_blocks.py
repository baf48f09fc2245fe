"""Does evaluating the generated per-node functions in blocks of nodes pay? Whole QMC fixed points
with the blocks of ``numerics.model.general.NODE_BLOCK`` (new) and with every node in one call
(old), side by side in one run.

The generated prox and channel functions are a few hundred numpy operations, each making a
temporary of the size of the node batch; on the 32768 nodes of a fast scrambling those temporaries
(256 kB each) leave the processor's cache, in blocks of 4096 they stay in it. Each variant runs in
its own child process, alternating, ``--rounds`` times; printed per task: the best wall and CPU
time of each, their ratio, and the largest difference of the reported overlaps between the two
(the blocks change no arithmetic, so it must be zero).

Run: python benchmarks/bench_node_blocks.py [--precision fast] [--rounds 2]
"""
import argparse
import json
import subprocess
import sys

CHILD = r"""
import json, resource, sys, time
import numerics.model.general as general
from derivations import ModelSpec
from numerics.api import solve

block, shape, branch, precision = sys.argv[1:5]
if block == "all":
    general.NODE_BLOCK = 1 << 40
spec = ModelSpec(omega=0.3, **json.loads(shape))
t0, r0 = time.perf_counter(), resource.getrusage(resource.RUSAGE_SELF)
fp = solve(spec, 2.0, branch, precision)
r1 = resource.getrusage(resource.RUSAGE_SELF)
print(json.dumps({"wall": time.perf_counter() - t0,
                  "cpu": r1.ru_utime + r1.ru_stime - r0.ru_utime - r0.ru_stime,
                  "overlaps": fp.overlaps.pack().tolist(), "converged": fp.converged}))
"""

TASKS = [({"tokens": 3}, "semantic"), ({"rank": 2}, "mixed")]


def run(block, shape, branch, precision):
    out = subprocess.run([sys.executable, "-c", CHILD, block, json.dumps(shape), branch, precision],
                         check=True, capture_output=True, text=True).stdout
    return json.loads(out.strip().splitlines()[-1])


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--precision", default="fast")
    ap.add_argument("--rounds", type=int, default=2)
    args = ap.parse_args()
    print(f"{'task':28s} {'old wall':>9s} {'new wall':>9s} {'old cpu':>8s} {'new cpu':>8s} {'cpu new/old':>11s} "
          f"{'max |diff|':>10s}")
    for shape, branch in TASKS:
        best = {"all": None, "blocks": None}
        values = {}
        for _ in range(args.rounds):
            for variant in ("all", "blocks"):
                r = run(variant, shape, branch, args.precision)
                values[variant] = r["overlaps"]
                if best[variant] is None or r["cpu"] < best[variant]["cpu"]:
                    best[variant] = r
        diff = max(abs(a - b) for a, b in zip(values["all"], values["blocks"]))
        old, new = best["all"], best["blocks"]
        name = f"{shape} {branch} ({args.precision})"
        print(f"{name:28s} {old['wall']:9.1f} {new['wall']:9.1f} {old['cpu']:8.1f} {new['cpu']:8.1f} "
              f"{new['cpu'] / old['cpu']:11.3f} {diff:10.1e}", flush=True)


if __name__ == "__main__":
    main()
