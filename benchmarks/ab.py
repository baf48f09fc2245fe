"""Before and after, side by side in one run: the same cases solved by another source tree and by
this one, in fresh processes, interleaved, with the time and the largest change of a value.

    git worktree add --detach /tmp/before REV        # or: git archive REV | tar -x -C /tmp/before
    python benchmarks/ab.py --before /tmp/before [--cases fast,high,...] [--repeats 3]

Each case runs in a fresh process with its tree first on the path. A case with ``warm`` solves once
to load the model and the compiled code, then times a second solve in the process (``wall`` and the
process's CPU time); the others time the whole process (``cold``: the command as a user runs it).
The table prints the medians, the ratio after/before of each, and the largest relative change of any
value the case reports (its overlaps, conjugates, test error, training loss, thresholds), so a speed-up
that changed a number shows it. Set ``ATTNPHASE_KERNEL_THREADS=1`` (and ``OPENBLAS_NUM_THREADS=1``)
to compare single-threaded work, which moves far less with the machine's load than wall time.
"""
from __future__ import annotations

import argparse
import json
import math
import os
import resource
import statistics
import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]

_WARM = """
import json, sys, time
from derivations import ModelSpec
import numerics.api as api
def values(fp):
    row = fp.to_row()
    return {k: v for k, v in row.items() if isinstance(v, float) and not k.endswith("wall_time") and k != "residual"}
CASE
run()
t0, c0 = time.perf_counter(), time.process_time()
out = run()
print(json.dumps({"wall": time.perf_counter() - t0, "cpu": time.process_time() - c0, "values": out}))
"""

#: name -> (kind, code or command, description)
CASES = {
    "fast": ("warm", "def run():\n    return values(api.solve(ModelSpec(), 2.0, 'semantic', 'fast'))",
             "paper case, alpha = 2, semantic, fast"),
    "high": ("warm", "def run():\n    return values(api.solve(ModelSpec(), 2.0, 'semantic', 'high'))",
             "paper case, alpha = 2, semantic, high"),
    "positional": ("warm", "def run():\n    return values(api.solve(ModelSpec(), 1.0, 'positional', 'fast'))",
                   "paper case, alpha = 1, positional, fast"),
    "curve": ("warm", "def run():\n    c = api.follow(ModelSpec(), [0.5 + 0.25 * i for i in range(9)], 'semantic', 'fast')\n"
                      "    return {f'{k}@{p.alpha}': v for p in c.points for k, v in values(p).items()}",
              "paper case, semantic curve, 9 points, fast"),
    "thresholds": ("warm", "def run():\n    t = api.thresholds(ModelSpec(), 'fast')\n"
                           "    return {'alpha_c': t.alpha_c, 'alpha_l': t.alpha_l}",
                   "paper-case thresholds, fast"),
    "thresholds-high": ("warm", "def run():\n    t = api.thresholds(ModelSpec(), 'high')\n"
                                "    return {'alpha_c': t.alpha_c, 'alpha_l': t.alpha_l}",
                        "paper-case thresholds, high"),
    "tokens3": ("warm", "def run():\n    return values(api.solve(ModelSpec(tokens=3), 2.0, 'semantic', 'fast'))",
                "(3, 1, 1), alpha = 2, semantic, fast"),
    "rank2": ("warm", "def run():\n    return values(api.solve(ModelSpec(rank=2), 2.0, 'mixed', 'fast'))",
              "(2, 2, 1), alpha = 2, mixed, fast"),
    "solve-command": ("cold", ["-m", "attnphase.cli", "solve", "--alpha", "2", "--branch", "semantic"],
                      "attnphase solve --alpha 2 --branch semantic (the whole process)"),
    "run-command": ("cold", ["-m", "attnphase.cli", "run", "--out", "{tmp}", "--no-progress"],
                    "attnphase run (the whole process)"),
}


def _run_case(name: str, tree: Path, tmp: Path) -> dict:
    kind, what, _ = CASES[name]
    env = dict(os.environ, PYTHONPATH=str(tree))
    if kind == "warm":
        out = subprocess.run([sys.executable, "-c", _WARM.replace("CASE", what)], cwd=tree, env=env,
                             capture_output=True, text=True)
        if out.returncode:
            raise RuntimeError(f"{name} in {tree}: {out.stderr.strip().splitlines()[-1] if out.stderr else ''}")
        return json.loads(out.stdout.strip().splitlines()[-1])
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    t0 = time.perf_counter()
    target = tmp / f"{name}-{tree.name}-{time.time_ns()}"
    args = [a.replace("{tmp}", str(target)) for a in what]
    subprocess.run([sys.executable, *args], cwd=tree, env=env, check=True, capture_output=True)
    wall = time.perf_counter() - t0
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    return {"wall": wall, "cpu": (after.ru_utime - before.ru_utime) + (after.ru_stime - before.ru_stime),
            "values": {}}


def _largest_change(a: dict, b: dict) -> float:
    """The largest relative change of a value (the error estimates, and values zero by symmetry,
    below 1e-20, left out)."""
    worst = 0.0
    for k, x in a.items():
        y = b.get(k)
        if not isinstance(x, float) or not isinstance(y, float) or (math.isnan(x) and math.isnan(y)):
            continue
        if "_error" in k or max(abs(x), abs(y)) < 1e-20:
            continue
        worst = max(worst, abs(x - y) / max(abs(x), 1e-300) if x != 0 else abs(y))
    return worst


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--before", required=True, help="a source tree of the code before the change")
    ap.add_argument("--cases", default="fast,solve-command", help=f"comma-separated, of {', '.join(CASES)}")
    ap.add_argument("--repeats", type=int, default=3)
    ap.add_argument("--tmp", default="/tmp/attnphase-ab")
    args = ap.parse_args()
    trees = {"before": Path(args.before).resolve(), "after": ROOT}
    tmp = Path(args.tmp)
    tmp.mkdir(parents=True, exist_ok=True)
    env_note = ", ".join(f"{k}={os.environ[k]}" for k in ("ATTNPHASE_KERNEL_THREADS", "OPENBLAS_NUM_THREADS",
                                                          "ATTNPHASE_BACKEND") if k in os.environ) or "default"
    print(f"environment: {env_note}; load average at start {os.getloadavg()[0]:.2f}")
    print(f"{'case':<16} {'wall before':>11} {'wall after':>10} {'ratio':>6} {'CPU before':>10} {'CPU after':>9} "
          f"{'ratio':>6} {'largest change':>14}")
    for name in args.cases.split(","):
        got = {"before": [], "after": []}
        for _ in range(args.repeats):
            for label, tree in trees.items():
                got[label].append(_run_case(name, tree, tmp))
        med = {k: (statistics.median(r["wall"] for r in v), statistics.median(r["cpu"] for r in v))
               for k, v in got.items()}
        change = _largest_change(got["before"][0]["values"], got["after"][0]["values"])
        (wb, cb), (wa, ca) = med["before"], med["after"]
        print(f"{name:<16} {wb:10.2f}s {wa:9.2f}s {wa / wb:6.2f} {cb:9.2f}s {ca:8.2f}s {ca / cb:6.2f} {change:14.1e}")
    print(f"load average at end {os.getloadavg()[0]:.2f}")


if __name__ == "__main__":
    main()
