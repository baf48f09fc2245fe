"""How close the general model's fixed points come to a singular covariance (docs/theory.md,
section 4.11): for each (shape, branch, alpha) the smallest eigenvalue of ``q`` against its largest,
and of the Schur complement ``q - theta theta^T / rho`` (which ``Sigma^{-1}`` in the Stein forms
inverts) against ``q``'s largest, at the QMC fixed point of a precision mode (default draft).
Run: python benchmarks/qmc_conditioning.py [--precision draft] [--alphas 0.5,1,2,4]
"""
import argparse
import time

import numpy as np

from derivations import ModelSpec
from numerics.api import solve
from numerics.fixed_points.subspaces import GENERAL_BRANCHES

CASES = [dict(), dict(tokens=3), dict(rank=2), dict(teacher_rank=2)]


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--precision", default="draft")
    ap.add_argument("--alphas", default="0.5,1,2,4")
    args = ap.parse_args()
    print(f"{'model':<28} {'branch':<11} {'alpha':>5} {'min eig q / max':>15} {'min eig S / max q':>17} "
          f"{'converged':>9} {'time/s':>7}")
    for kw in CASES:
        spec = ModelSpec(**kw)
        for branch in GENERAL_BRANCHES:
            if branch == "mixed" and spec.rank < 2:
                continue
            for alpha in (float(a) for a in args.alphas.split(",")):
                t0 = time.perf_counter()
                try:
                    fp = solve(spec, alpha, branch, args.precision, integrator="qmc")
                except Exception as exc:  # a branch that does not exist there: say so and go on
                    print(f"{str(spec.shape):<28} {branch:<11} {alpha:5.2f} {type(exc).__name__}: {exc}")
                    continue
                q, theta = fp.overlaps.q, fp.overlaps.theta
                top = float(np.max(np.linalg.eigvalsh(q)))
                S = q - theta @ theta.T / spec.rho
                print(f"{str(spec.shape):<28} {branch:<11} {alpha:5.2f} {np.min(np.linalg.eigvalsh(q)) / top:15.3g} "
                      f"{np.min(np.linalg.eigvalsh(S)) / top:17.3g} {str(fp.converged):>9} "
                      f"{time.perf_counter() - t0:7.1f}", flush=True)


if __name__ == "__main__":
    main()
