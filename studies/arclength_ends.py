"""Branch ends followed by pseudo-arclength continuation (``numerics.branches.arclength``), draft rule.

    python studies/arclength_ends.py --omega 0 --branch positional --alpha 0.88 --direction 1
    python studies/arclength_ends.py --omega 0.3 --branch semantic --alpha 0.9 --direction -1
    python studies/arclength_ends.py --omega 0.3 --branch positional --alpha 0.8 --lam 0.0035 \\
        --parameter lam --direction -1

Solves the branch at the start (draft), follows it by arclength in ``alpha`` (or ``lam`` at fixed
``alpha``) the way ``--direction`` says, and prints every point (parameter, overlaps, residual
``|x - F(x)|``), each turn with its kind (``fold``: the defining overlap keeps its sign;
``pitchfork``: it changes sign, the curve has gone through the trivial point onto the branch's
mirror image) and the smallest ``|eig(I - DF)|`` at the turn, and the evaluations and wall time.
"""
from __future__ import annotations

import argparse
import json
import logging
import time

from derivations import ModelSpec
from numerics.branches.arclength import follow_through_fold, fold_eigenvalue
from numerics.fixed_points.lines import solve_branch
from numerics.overlaps import Overlaps


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--omega", type=float, default=0.3)
    ap.add_argument("--sigma", type=float, default=0.5)
    ap.add_argument("--lam", type=float, default=0.01)
    ap.add_argument("--alpha", type=float, required=True)
    ap.add_argument("--branch", default="positional")
    ap.add_argument("--parameter", default="alpha", choices=("alpha", "lam"))
    ap.add_argument("--direction", type=float, default=1.0)
    ap.add_argument("--step", type=float, default=0.05)
    ap.add_argument("--points", type=int, default=25)
    ap.add_argument("--start", help="q,m,V,theta to start from (solved at the start's parameter first); "
                                    "default: the draft solve of the branch")
    args = ap.parse_args()
    logging.basicConfig(level=logging.INFO, format="%(relativeCreated)8.0f %(message)s")
    for name in ("numerics.fixed_points.lines", "numerics.solver.iteration", "numerics.branches.follow"):
        logging.getLogger(name).setLevel(logging.WARNING)
    spec = ModelSpec(omega=args.omega, sigma=args.sigma, lam=args.lam)
    t0 = time.perf_counter()
    if args.start:
        start = Overlaps(*(float(v) for v in args.start.split(",")))
    else:
        solved = solve_branch(spec, args.alpha, args.branch, "draft")
        start = solved.overlaps
        print(f"start: {start} residual {solved.residual:.1e} ({time.perf_counter() - t0:.0f} s)")
    curve = follow_through_fold(spec, args.alpha, args.branch, start, args.parameter, args.direction,
                                step=args.step, max_points=args.points)
    print(f"| {args.parameter} | q | m | V | theta | residual |\n|---|---|---|---|---|---|")
    for p in curve.points:
        o = p.overlaps
        print(f"| {p.parameter:.6g} | {o.q:.5g} | {o.m:.5g} | {o.V:.5g} | {o.theta:.5g} | {p.residual:.1e} |")
    print("stopped:", curve.stopped)
    for turn in curve.folds():
        print(json.dumps(turn))
    if curve.turns:
        print(f"smallest |eig(I - DF)| at the turn: {fold_eigenvalue(spec, args.alpha, curve):.2e}")
    print(f"wall time {time.perf_counter() - t0:.0f} s")


if __name__ == "__main__":
    main()
