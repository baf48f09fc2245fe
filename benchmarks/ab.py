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

Beside the relative change, ``in errors`` is the largest change of a value in units of the error the
*before* side states for it (a fixed point states one per value; a change far below 1 is noise of
the last bits, one above 1 a changed result). ``--list`` names the cases: the theory's solves (the
paper's model and the general one), its whole commands as a user runs them, and the simulator's
training loop and a data set's runs (their largest change is 0 where the numbers are bit for bit the
same). The outputs of the commands, file by file, are compared by ``benchmarks/compare_outputs.py``.
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

#: the simulator's cases: the data drawn before the clock, the numbers every run ends with
_TRAIN = """
from validation.simulate import make_problem, train
PROBLEM = make_problem(ModelSpec(), 1000, 2.0, seed=0, n_test=1)
def run():
    r = train(PROBLEM, 'semantic', steps=500)
    Q = r.Q.double()
    return {'Q_sum': float(Q.sum()), 'Q_norm2': float(Q @ Q), 'loss': float(r.loss_curve[-1][1])}
"""
_DATA_SET = """
from validation.simulate import Training, run_data_set
def run():
    trainings = [Training(init, 1000, None, opt, 2, None) for init, opt in
                 (('semantic', 'gd'), ('positional', 'gd'), ('random', 'gd'), ('random', 'adam'))]
    runs = run_data_set(ModelSpec(), 1000, 2.0, trainings, seed=0, run_index=0, n_test=10000)
    return {f'{k}@{i}': float(r[k]) for i, r in enumerate(runs) for k in
            ('test_error', 'train_loss', 'q_eig_1', 'm_sv_1', 'theta_sv_1', 'linear_test_error')}
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
    "rank2-semantic": ("warm", "def run():\n    return values(api.solve(ModelSpec(rank=2), 2.0, 'semantic', 'fast'))",
                       "(2, 2, 1), alpha = 2, semantic, fast"),
    "rank2-positional": ("warm", "def run():\n    return values(api.solve(ModelSpec(rank=2), 2.0, 'positional', 'fast'))",
                         "(2, 2, 1), alpha = 2, positional, fast"),
    "train": ("warm", _TRAIN, "simulator: train(), default model, d = 1000, alpha = 2, semantic, 500 steps"),
    "data-set": ("warm", _DATA_SET, "simulator: run_data_set, one data set's four runs (semantic, positional, "
                                    "random by GD and by Adam), d = 1000, alpha = 2, 1000 steps"),
    "solve-command": ("cold", ["-m", "attnphase.cli", "solve", "--alpha", "2", "--branch", "semantic"],
                      "attnphase solve --alpha 2 --branch semantic (the whole process)"),
    "curve-command": ("cold", ["-m", "attnphase.cli", "curve", "--alphas", "0.5:2.5:9", "--precision", "draft",
                               "--out", "{tmp}.csv"], "attnphase curve --alphas 0.5:2.5:9 --precision draft"),
    "thresholds-command": ("cold", ["-m", "attnphase.cli", "thresholds", "--precision", "draft"],
                           "attnphase thresholds --precision draft"),
    "run-draft-command": ("cold", ["-m", "attnphase.cli", "run", "--precision", "draft", "--out", "{tmp}",
                                   "--no-progress"], "attnphase run --precision draft"),
    "run-command": ("cold", ["-m", "attnphase.cli", "run", "--out", "{tmp}", "--no-progress"],
                    "attnphase run (the README's main job, the whole process)"),
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


def _largest_change_in_errors(a: dict, b: dict) -> float:
    """The largest ``|b - a|`` of a value over the error ``a`` states for it (``NAME_error``, where
    positive); NaN where no value states one."""
    worst = math.nan
    for k, x in a.items():
        err, y = a.get(f"{k}_error"), b.get(k)
        if isinstance(x, float) and isinstance(y, float) and isinstance(err, float) and err > 0:
            worst = abs(y - x) / err if math.isnan(worst) else max(worst, abs(y - x) / err)
    return worst


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--before", help="a source tree of the code before the change")
    ap.add_argument("--list", action="store_true", help="name the cases and what each runs")
    ap.add_argument("--cases", default="fast,solve-command", help=f"comma-separated, of {', '.join(CASES)}")
    ap.add_argument("--repeats", type=int, default=3)
    ap.add_argument("--tmp", default="/tmp/attnphase-ab")
    args = ap.parse_args()
    if args.list:
        for name, (kind, _, description) in CASES.items():
            print(f"{name:<20} {kind:<5} {description}")
        return
    if not args.before:
        ap.error("--before DIR is needed (or --list)")
    unknown = [c for c in args.cases.split(",") if c not in CASES]
    if unknown:
        ap.error(f"unknown cases {unknown}: see --list")
    trees = {"before": Path(args.before).resolve(), "after": ROOT}
    tmp = Path(args.tmp)
    tmp.mkdir(parents=True, exist_ok=True)
    env_note = ", ".join(f"{k}={os.environ[k]}" for k in ("ATTNPHASE_KERNEL_THREADS", "OPENBLAS_NUM_THREADS",
                                                          "ATTNPHASE_BACKEND") if k in os.environ) or "default"
    print(f"environment: {env_note}; load average at start {os.getloadavg()[0]:.2f}")
    print(f"{'case':<20} {'wall before':>11} {'wall after':>10} {'ratio':>6} {'CPU before':>10} {'CPU after':>9} "
          f"{'ratio':>6} {'largest change':>14} {'in errors':>9}")
    for name in args.cases.split(","):
        got = {"before": [], "after": []}
        for _ in range(args.repeats):
            for label, tree in trees.items():
                got[label].append(_run_case(name, tree, tmp))
        med = {k: (statistics.median(r["wall"] for r in v), statistics.median(r["cpu"] for r in v))
               for k, v in got.items()}
        old, new = got["before"][0]["values"], got["after"][0]["values"]
        change, in_errors = _largest_change(old, new), _largest_change_in_errors(old, new)
        (wb, cb), (wa, ca) = med["before"], med["after"]
        print(f"{name:<20} {wb:10.2f}s {wa:9.2f}s {wa / wb:6.2f} {cb:9.2f}s {ca:8.2f}s {ca / cb:6.2f} {change:14.1e} "
              f"{in_errors:9.2g}", flush=True)
    print(f"load average at end {os.getloadavg()[0]:.2f}")


if __name__ == "__main__":
    main()
