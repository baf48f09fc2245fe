"""Timing benchmark for numerics against its time targets, printed side by side in one run.

* one fixed point from a warm start, fast mode (target <= 5 s);
* ``thresholds`` in fast mode (target <= 60 s);
* optionally (--high) thresholds in high mode (target <= 15 min).
Run: python benchmarks/bench_numerics.py [--high]
"""
import argparse
import time

from derivations import ModelSpec
from numerics.api import solve, thresholds
from numerics.overlaps import Overlaps


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--high", action="store_true")
    ap.add_argument("--skip-thresholds", action="store_true")
    args = ap.parse_args()
    spec = ModelSpec()
    rows = []
    warm = Overlaps(q=0.1148, m=0.0, V=12.67, theta=0.1582)
    t0 = time.perf_counter()
    fp = solve(spec, 2.0, "semantic", "fast", start=warm)
    rows.append(("fixed point, fast, warm start (semantic, alpha=2)", time.perf_counter() - t0, 5.0,
                 f"q={fp.overlaps.q:.7f}+-{fp.error['q']:.1e} converged={fp.converged}"))
    modes = [] if args.skip_thresholds else ["fast"] + (["high"] if args.high else [])
    for mode in modes:
        t0 = time.perf_counter()
        th = thresholds(spec, mode)
        rows.append((f"thresholds, {mode}", time.perf_counter() - t0, 60.0 if mode == "fast" else 900.0,
                     f"alpha_c={th.alpha_c:.7f}+-{th.alpha_c_error:.1e} alpha_l={th.alpha_l:.7f}+-{th.alpha_l_error:.1e}"))
    print(f"{'task':<52} {'time/s':>8} {'target/s':>9} {'ratio':>6}  result")
    for name, t, target, result in rows:
        print(f"{name:<52} {t:8.1f} {target:9.0f} {t / target:6.2f}  {result}")


if __name__ == "__main__":
    main()
