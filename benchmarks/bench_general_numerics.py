"""Timing of the general model's fixed points with the QMC integrator, and of the default model's
solve before and after the general numerics, printed side by side in one run.

* one fixed point at L (r + t) = 6, (3, 1, 1) and (2, 2, 1), semantic at alpha = 2, with the QMC
  precision mode given (target: every stated error at most 2e-3 relative, at most 5 minutes);
* with ``--before DIR``, the same fixed points solved by that tree and by this one, one after the
  other in fresh processes, with the largest change of a field in units of its stated error;
* ``attnphase solve --alpha 2`` and ``python benchmarks/bench_numerics.py`` from this tree and from
  ``--before DIR`` (a checkout of the code before the change, e.g. made by
  ``git archive 750f74e | tar -x -C DIR``), alternated ``--repeats`` times (target: no more than
  10% slower).
* with ``--cases`` and ``--workers N`` (no ``--before``), each case solved in one process and with its
  scramblings in ``N`` processes (``numerics.api.scramble_workers``), side by side.
Run: python benchmarks/bench_general_numerics.py [--precision fast] [--before DIR] [--repeats 2] [--skip-general]
[--solve-only] [--thresholds] [--cases tokens3:semantic,rank2:semantic] [--workers N] [--refine K]
"""
import argparse
import json
import os
import subprocess
import sys
import time
from pathlib import Path

from derivations import ModelSpec
from numerics.api import solve

ROOT = Path(__file__).resolve().parents[1]


def timed(command, tree):
    env = dict(os.environ, PYTHONPATH=str(tree))
    t0 = time.perf_counter()
    subprocess.run(command, cwd=tree, env=env, check=True, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    return time.perf_counter() - t0


CASES = {"tokens3": dict(tokens=3), "rank2": dict(rank=2)}

#: run in a fresh process with the tree on the path: one fixed point, printed as JSON; with a
#: fourth argument N > 1, the scramblings in N processes, started (and the solver imported there)
#: before the clock starts, their start-up timed apart
_SOLVE = """
import contextlib, json, sys, time
from derivations import ModelSpec
from numerics.api import solve
kw, branch, precision = json.loads(sys.argv[1]), sys.argv[2], sys.argv[3]
workers = int(sys.argv[4]) if len(sys.argv) > 4 else 1
if len(sys.argv) > 5 and int(sys.argv[5]):
    from numerics.channel.qmc.precision import refined
    precision = refined(precision, int(sys.argv[5]))
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


def solve_in(tree, kw, branch, precision, workers=1, refine=0):
    """One fixed point solved by the source tree ``tree``, in a fresh process (its scramblings in
    ``workers`` processes; ``refine``: on ``refined(precision, refine)``'s rule)."""
    env = dict(os.environ, PYTHONPATH=str(tree))
    out = subprocess.run([sys.executable, "-c", _SOLVE, json.dumps(kw), branch, precision, str(workers), str(refine)],
                         cwd=tree, env=env, check=True, capture_output=True, text=True)
    return json.loads(out.stdout.strip().splitlines()[-1])


def processes_side_by_side(cases, precision, workers, refine=0):
    """Rows of the general fixed points solved in one process and with ``workers`` processes for
    the scramblings, one after the other in fresh processes of this tree."""
    rows = []
    if refine:
        precision = f"{precision}, 2^{refine} times the points"
    for case in cases:
        name, branch = case.split(":")
        base = precision.split(",")[0]
        one = solve_in(ROOT, CASES[name], branch, base, 1, refine)
        many = solve_in(ROOT, CASES[name], branch, base, workers, refine)
        same = one["values"] == many["values"] and one["error"] == many["error"]
        worst, field = max((v, k) for k, v in one["relative"].items())
        rows.append((f"{name} {branch} alpha=2 ({precision}): 1 process", one["time"], one["time"],
                     f"largest relative error {worst:.1e} ({field}), converged {one['converged']}"))
        rows.append((f"{name} {branch} alpha=2 ({precision}): {workers} processes", many["time"], one["time"],
                     f"the same values and errors: {same}; the pool's start-up before: {many['startup']:.1f} s"))
    return rows


def general_before_after(before, cases, precision):
    """Rows of the general fixed points solved by ``before`` and by this tree, side by side."""
    rows = []
    for case in cases:
        name, branch = case.split(":")
        old, new = solve_in(before, CASES[name], branch, precision), solve_in(ROOT, CASES[name], branch, precision)
        shift = max(abs(new["values"][k] - old["values"][k]) / old["error"][k] for k in old["values"]
                    if k in new["values"] and old["error"].get(k, 0) > 0)
        for label, r in (("before", old), ("after", new)):
            worst, field = max((v, k) for k, v in r["relative"].items())
            rows.append((f"{name} {branch} alpha=2 ({precision}): {label}", r["time"], old["time"],
                         f"largest relative error {worst:.1e} ({field}), converged {r['converged']}"
                         + (f"; largest change {shift:.2g} stated errors" if label == "after" else "")))
    return rows


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--precision", default="fast")
    ap.add_argument("--before", help="a source tree of the code before the change")
    ap.add_argument("--repeats", type=int, default=2)
    ap.add_argument("--out-dir", default="/tmp/bench_general_numerics", help="where the timed run writes")
    ap.add_argument("--skip-general", action="store_true")
    ap.add_argument("--solve-only", action="store_true", help="time only attnphase solve --alpha 2 before/after")
    ap.add_argument("--cases", help="with --before: general fixed points solved by both trees, "
                                    "e.g. tokens3:semantic,rank2:mixed (omega = 0.3, alpha = 2)")
    ap.add_argument("--workers", type=int, default=1,
                    help="with --cases and without --before: each case also solved with its scramblings in this "
                         "many processes, side by side with one")
    ap.add_argument("--refine", type=int, default=0,
                    help="with --workers: the cases on the rule with 2^REFINE times the points per scrambling")
    ap.add_argument("--thresholds", action="store_true",
                    help="also time attnphase thresholds --precision draft and attnphase run --precision draft before/after")
    args = ap.parse_args()
    rows = []
    if not args.skip_general and not args.cases:
        for kw in (dict(tokens=3), dict(rank=2)):
            spec = ModelSpec(**kw)
            t0 = time.perf_counter()
            fp = solve(spec, 2.0, "semantic", args.precision, integrator="qmc")
            elapsed = time.perf_counter() - t0
            worst, field = max((v, k) for k, v in fp.relative_errors().items())
            rows.append((f"QMC fixed point {spec.shape[:3]} semantic alpha=2 ({args.precision})", elapsed, 300.0,
                         f"largest relative error {worst:.1e} ({field}), converged {fp.converged}"))
    if args.before and args.cases:
        rows += general_before_after(Path(args.before), args.cases.split(","), args.precision)
    if args.cases and not args.before and args.workers > 1:
        rows += processes_side_by_side(args.cases.split(","), args.precision, args.workers, args.refine)
    if args.before and not args.cases:
        commands = {"attnphase solve --alpha 2": [sys.executable, "-m", "attnphase.cli", "solve", "--alpha", "2"],
                    "benchmarks/bench_numerics.py": [sys.executable, str(ROOT / "benchmarks" / "bench_numerics.py")]}
        if args.solve_only:
            commands.pop("benchmarks/bench_numerics.py")
        if args.thresholds:
            cli = [sys.executable, "-m", "attnphase.cli"]
            commands["attnphase thresholds --precision draft"] = cli + ["thresholds", "--precision", "draft"]
            commands["attnphase run --precision draft"] = cli + ["run", "--precision", "draft", "--out",
                                                                 str(Path(args.out_dir) / "run")]
        for name, command in commands.items():
            times = {"before": [], "after": []}
            for _ in range(args.repeats):
                for label, tree in (("before", Path(args.before)), ("after", ROOT)):
                    cmd = command if "attnphase" in name else [sys.executable, str(tree / "benchmarks" / "bench_numerics.py")]
                    times[label].append(timed(cmd, tree))
            before, after = min(times["before"]), min(times["after"])
            rows.append((f"{name}: before (best of {args.repeats})", before, before, ""))
            rows.append((f"{name}: after (best of {args.repeats})", after, 1.1 * before,
                         f"after/before = {after / before:.3f}"))
    print(f"{'task':<64} {'time/s':>8} {'target/s':>9} {'ratio':>6}  result")
    for name, t, target, result in rows:
        print(f"{name:<64} {t:8.1f} {target:9.1f} {t / target:6.2f}  {result}")


if __name__ == "__main__":
    main()
