"""The default model's commands through the one theory front (``numerics.api``), before and after a
change, printed side by side in one run: wall time and CPU time of each command, from this tree and
from ``--before DIR`` (a source tree of the code before, e.g. ``git archive main | tar -x -C DIR``),
alternated ``--repeats`` times, best of each.

CPU time (user + system of the command's process and its children) is printed beside the wall time
because on a shared machine the wall time measures the other jobs as much as the code: the CPU time
of a single-threaded command moves far less with the load (target: after/before at most 1.1).

    python benchmarks/bench_front.py --before /tmp/before [--repeats 3] [--commands solve,curve,thresholds,run,main]
"""
import argparse
import os
import resource
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]


def commands(out: str) -> dict:
    return {
        "solve": ["solve", "--alpha", "1.5", "--precision", "draft"],
        "curve": ["curve", "--alphas", "0.5:2.5:9", "--precision", "draft", "--out", os.path.join(out, "c.csv")],
        "thresholds": ["thresholds", "--precision", "draft"],
        "run": ["run", "--precision", "draft", "--out", os.path.join(out, "run")],
        "main": ["run", "--out", os.path.join(out, "main")],  # the README's main job, at its default precision
    }


def timed(argv, tree: Path) -> tuple:
    """``(wall seconds, CPU seconds)`` of ``attnphase ARGV`` run from ``tree``."""
    env = dict(os.environ, PYTHONPATH=str(tree))
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    t0 = time.perf_counter()
    subprocess.run([sys.executable, "-m", "attnphase.cli", *argv], cwd=tree, env=env, check=True,
                   stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    wall = time.perf_counter() - t0
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    return wall, (after.ru_utime - before.ru_utime) + (after.ru_stime - before.ru_stime)


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--before", required=True, help="a source tree of the code before the change")
    ap.add_argument("--repeats", type=int, default=2)
    ap.add_argument("--commands", default="solve,curve,thresholds",
                    help="of: solve, curve, thresholds, run (draft), main (the README's main job)")
    args = ap.parse_args()
    print(f"{'command':<12} {'wall before':>12} {'wall after':>11} {'CPU before':>11} {'CPU after':>10} "
          f"{'CPU after/before':>17}")
    with tempfile.TemporaryDirectory() as out:
        for name in args.commands.split(","):
            argv = commands(out)[name]
            got = {"before": [], "after": []}
            for _ in range(args.repeats):
                for label, tree in (("before", Path(args.before).resolve()), ("after", ROOT)):
                    got[label].append(timed(argv, tree))
            (wb, cb), (wa, ca) = (min(got[k], key=lambda t: t[1]) for k in ("before", "after"))
            print(f"{name:<12} {wb:11.1f}s {wa:10.1f}s {cb:10.1f}s {ca:9.1f}s {ca / cb:17.3f}", flush=True)
    print(f"best of {args.repeats} by CPU time; load average at the end {os.getloadavg()[0]:.1f} on "
          f"{os.cpu_count()} cores")


if __name__ == "__main__":
    main()
