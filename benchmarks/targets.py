"""The theory's time and accuracy targets (docs/numerics.md), each measured beside its target in one table.

    python benchmarks/targets.py time [--high] [--skip-thresholds] [--skip-commands]
    python benchmarks/targets.py general [--precision fast] [--cases tokens3:semantic,rank2:mixed]
    python benchmarks/targets.py general --workers 2 [--precision high --refine 2]

``time``: the default model (``omega = 0.3``, semantic, ``alpha = 2``) against the time targets of
the theory: a fast fixed point from a warm start in this process (1 s) and as a whole command in a
fresh process (2 s), ``thresholds`` in fast mode (5 s), the main job ``attnphase run`` as a whole
command (15 s) and a fast curve of both branches on ``0.5..2.5`` in 9 points (1 CPU-second per point
and branch, the command's CPU time over its rows); with ``--high`` also the high fixed point (10 s) and
high thresholds (60 s). Whole commands run ``python -m attnphase.cli`` of this tree.

``general``: one QMC fixed point per case (``omega = 0.3``, ``alpha = 2``; ``tokens3`` is ``(3, 1, 1)``,
``rank2`` is ``(2, 2, 1)``) at the precision given: target at most 5 minutes and every stated error at
most 2e-3 relative. With ``--workers N`` each case is solved in a fresh process of this tree twice,
its scramblings in one process and in ``N`` (``numerics.api.scramble_workers``; the pool and its
imports started before the clock, their start-up printed apart), side by side, with whether the two
gave the same values and errors to the last bit; ``--refine K``: on the precision's rule with ``2^K``
times the points per scrambling.
"""
from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
CASES = {"tokens3": dict(tokens=3), "rank2": dict(rank=2)}

#: one general fixed point in a fresh process, printed as JSON (argv: model keywords, branch,
#: precision, workers, refine)
_SOLVE = """
import contextlib, json, sys, time
from derivations import ModelSpec
from numerics.api import solve
kw, branch, precision = json.loads(sys.argv[1]), sys.argv[2], sys.argv[3]
workers, refine = int(sys.argv[4]), int(sys.argv[5])
if refine:
    from numerics.channel.qmc.precision import refined
    precision = refined(precision, refine)
context, startup = contextlib.nullcontext(), 0.0
if workers > 1:
    import pkgutil
    from numerics.api import scramble_workers
    from numerics.fixed_points.workers import pool
    t0 = time.perf_counter()
    # each worker imports the solver (a name resolved there; a module itself does not pickle)
    for task in [pool(workers).submit(pkgutil.resolve_name, "numerics.fixed_points.qmc:DAMPING")
                 for _ in range(workers)]:
        task.result()
    startup, context = time.perf_counter() - t0, scramble_workers(workers)
t0 = time.perf_counter()
with context:
    fp = solve(ModelSpec(omega=0.3, **kw), 2.0, branch, precision, integrator="qmc")
print(json.dumps({"time": time.perf_counter() - t0, "values": fp.values, "error": fp.error, "startup": startup,
                  "relative": fp.relative_errors(), "converged": fp.converged}))
"""


def _table(rows) -> None:
    print(f"{'task':<64} {'time/s':>8} {'target/s':>9} {'ratio':>6}  result")
    for name, t, target, result in rows:
        print(f"{name:<64} {t:8.1f} {target:9.1f} {t / target:6.2f}  {result}")


def _command(argv: list) -> tuple:
    """``(wall seconds, CPU seconds of the child, stdout)`` of ``python -m attnphase.cli ARGV`` in a fresh
    process of this tree."""
    env = dict(os.environ, PYTHONPATH=str(ROOT))
    before = os.times()
    t0 = time.perf_counter()
    out = subprocess.run([sys.executable, "-m", "attnphase.cli", *argv], cwd=ROOT, env=env, check=True,
                         capture_output=True, text=True)
    wall = time.perf_counter() - t0
    after = os.times()
    return wall, (after.children_user - before.children_user) + (after.children_system - before.children_system), \
        out.stdout


def cmd_time(args) -> None:
    import tempfile

    from derivations import ModelSpec
    from numerics.api import Overlaps, solve, thresholds

    spec = ModelSpec()
    rows = []
    warm = Overlaps(q=0.1148, m=0.0, V=12.67, theta=0.1582)
    solve(spec, 2.0, "semantic", "draft", start=warm)  # the generated code loaded: the solve alone is timed
    precisions = ["fast"] + (["high"] if args.high else [])
    for precision, target in zip(precisions, (1.0, 10.0)):
        t0 = time.perf_counter()
        fp = solve(spec, 2.0, "semantic", precision, start=warm)
        rows.append((f"fixed point, {precision}, warm start, in process", time.perf_counter() - t0, target,
                     f"q={fp.values['q']:.10g}+-{fp.error['q']:.1e} converged={fp.converged}"))
    if not args.skip_commands:
        wall, _, _ = _command(["solve", "--alpha", "2", "--branch", "semantic", "--omega", "0.3"])
        rows.append(("attnphase solve (fast), whole command, fresh process", wall, 2.0, ""))
    for precision in [] if args.skip_thresholds else precisions:
        t0 = time.perf_counter()
        th = thresholds(spec, precision)
        rows.append((f"thresholds, {precision}", time.perf_counter() - t0, 5.0 if precision == "fast" else 60.0,
                     f"alpha_c={th.alpha_c:.8g}+-{th.alpha_c_error:.1e} alpha_l={th.alpha_l:.8g}+-{th.alpha_l_error:.1e}"))
    if not args.skip_commands:
        with tempfile.TemporaryDirectory() as tmp:
            wall, _, _ = _command(["run", "--out", os.path.join(tmp, "run")])
            rows.append(("attnphase run (the main job), whole command", wall, 15.0, ""))
            csv = os.path.join(tmp, "curve.csv")
            _, cpu, _ = _command(["curve", "--alphas", "0.5:2.5:9", "--precision", "fast", "--out", csv])
            with open(csv) as fh:
                points = sum(1 for _ in fh) - 1
            rows.append((f"attnphase curve (fast), CPU seconds per point and branch ({points} rows)", cpu / points,
                         1.0, ""))
    _table(rows)


def solve_in_process(kw: dict, branch: str, precision: str, workers: int = 1, refine: int = 0) -> dict:
    env = dict(os.environ, PYTHONPATH=str(ROOT))
    out = subprocess.run([sys.executable, "-c", _SOLVE, json.dumps(kw), branch, precision, str(workers), str(refine)],
                         cwd=ROOT, env=env, check=True, capture_output=True, text=True)
    return json.loads(out.stdout.strip().splitlines()[-1])


def cmd_general(args) -> None:
    rows = []
    label = args.precision + (f", 2^{args.refine} times the points" if args.refine else "")
    for case in args.cases.split(","):
        name, branch = case.split(":")
        one = solve_in_process(CASES[name], branch, args.precision, 1, args.refine)
        worst, field = max((v, k) for k, v in one["relative"].items())
        rows.append((f"{name} {branch} alpha=2 ({label}): 1 process", one["time"], 300.0,
                     f"largest relative error {worst:.1e} ({field}; target 2e-3), converged {one['converged']}"))
        if args.workers > 1:
            many = solve_in_process(CASES[name], branch, args.precision, args.workers, args.refine)
            same = one["values"] == many["values"] and one["error"] == many["error"]
            rows.append((f"{name} {branch} alpha=2 ({label}): {args.workers} processes", many["time"], one["time"],
                         f"the same values and errors: {same}; the pool's start-up before: {many['startup']:.1f} s"))
    _table(rows)


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    sub = ap.add_subparsers(dest="what", required=True)
    t = sub.add_parser("time", help="the default model's fixed point and thresholds against their time targets")
    t.add_argument("--high", action="store_true", help="also the high fixed point (target 10 s) and thresholds (60 s)")
    t.add_argument("--skip-thresholds", action="store_true")
    t.add_argument("--skip-commands", action="store_true", help="only the in-process solves and thresholds")
    g = sub.add_parser("general", help="QMC fixed points of the general model against their targets")
    g.add_argument("--precision", default="fast")
    g.add_argument("--cases", default="tokens3:semantic,rank2:mixed", help="model:branch, of tokens3, rank2")
    g.add_argument("--workers", type=int, default=1, help="also solve each case with its scramblings in N processes")
    g.add_argument("--refine", type=int, default=0, help="the precision's rule with 2^REFINE times the points")
    args = ap.parse_args(argv)
    {"time": cmd_time, "general": cmd_general}[args.what](args)
    return 0


if __name__ == "__main__":
    sys.exit(main())
