"""The accuracy target of docs/numerics.md, section 8: relative error estimates of every field at alpha in {1, 1.5, 2},
both branches (default model), one JSON line per fixed point.

Run: python benchmarks/accuracy_targets.py [fast|high]
"""
import json
import sys
import time

from derivations import ModelSpec
from numerics.fixed_points.lines import solve_branch
from numerics.overlaps import Overlaps

# warm starts near each fixed point (any start on the branch converges to the same point)
STARTS = {
    ("semantic", 2.0): Overlaps(q=0.1148, m=0, V=12.67, theta=0.158),
    ("semantic", 1.5): Overlaps(q=0.093, m=0, V=16.0, theta=0.128),
    ("semantic", 1.0): Overlaps(q=0.065, m=0, V=20.5, theta=0.085),
    ("positional", 2.0): Overlaps(q=0.0512, m=0.258, V=11.4, theta=0),
    ("positional", 1.5): Overlaps(q=0.049, m=0.255, V=13.5, theta=0),
    ("positional", 1.0): Overlaps(q=0.044, m=0.248, V=16.4, theta=0),
}


def main():
    precision = sys.argv[1] if len(sys.argv) > 1 else "fast"
    spec = ModelSpec()
    for (branch, alpha), start in STARTS.items():
        t0 = time.perf_counter()
        fp = solve_branch(spec, alpha, branch, precision, start=start)
        values = fp.values
        rel = {k: fp.error[k] / abs(values[k]) for k in values if abs(values[k]) > 1e-10}
        worst = max(rel, key=rel.get)
        print(json.dumps(dict(branch=branch, alpha=alpha, precision=precision, converged=fp.converged,
                              residual=fp.residual, worst=worst, worst_rel=rel[worst], values=values,
                              rel={k: float(f"{x:.2g}") for k, x in rel.items()},
                              wall=time.perf_counter() - t0)), flush=True)


if __name__ == "__main__":
    main()
