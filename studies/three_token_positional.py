"""Is there a positional branch of the three-token model? Solves from many starts.

The three-token model (``--tokens 3``: ``P = I_3``, default ``A``) has one positional overlap per
token, ``m = (m_1, m_2, m_3)``. The solver's positional start puts ``m = 0.25`` on the first token
only; this script also starts with ``m`` along other combinations of the positions (a contrast of two
tokens, one token against the other two, all three alike, alternating signs), of size ``--sizes``,
and at the scale of gradient descent's positional end points (their ``q = 0.063`` and ``|m| = 0.20``,
docs/validation.md, section "Three tokens"; not their ``m`` vectors, which were not kept), and
prints for each start what the draft QMC solve of the positional branch gives.

    python studies/three_token_positional.py --alphas 1 [--omega 0.3] [--sizes 0.25] [--no-gd]

Each solve costs 25-85 s on 2 idle cores (minutes on a busy machine). One line per start, then a
markdown table.
"""
from __future__ import annotations

import argparse
import logging
import time

import numpy as np

from derivations import ModelSpec
from numerics.fixed_points.errors import BranchNotFound
from numerics.fixed_points.solve import solve
from numerics.matrix_overlaps import MatrixOverlaps
from numerics.solver.iteration import SolverError

#: directions of m over the three positions (normalised below)
PATTERNS = {
    "first token (the solver's own)": (1, 0, 0),
    "two tokens, opposite": (1, -1, 0),
    "one against two": (2, -1, -1),
    "all alike": (1, 1, 1),
    "alternating": (1, -1, 1),
}
#: (q, V) of the start: the solver's positional start, and gradient descent's end points
SCALES = {"solver": (0.05, 14.0), "gd": (0.063, 14.0)}
GD_M = 0.2


def starts(spec: ModelSpec, sizes, gd: bool = True):
    shape = spec.shape
    L, r, t, k = shape
    for name, pattern in PATTERNS.items():
        direction = np.asarray(pattern, dtype=float)
        direction /= np.linalg.norm(direction)
        for size, tag in [(s, "solver") for s in sizes] + ([(GD_M, "gd")] if gd else []):
            q, V = SCALES[tag]
            m = (size * direction).reshape(k, r)
            yield (f"{name}, |m| = {size:g} ({tag})",
                   MatrixOverlaps(shape, q=np.array([[q]]), m=m, V=np.array([[V]]),
                                  theta=np.zeros((r, t))))


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--alphas", default="1,2")
    ap.add_argument("--omega", type=float, default=0.3)
    ap.add_argument("--sizes", default="0.25")
    ap.add_argument("--precision", default="draft")
    ap.add_argument("--no-gd", action="store_true", help="only the solver's scale (q = 0.05, V = 14)")
    args = ap.parse_args()
    logging.basicConfig(level=logging.WARNING)
    spec = ModelSpec(tokens=3, omega=args.omega)
    sizes = [float(s) for s in args.sizes.split(",")]
    rows = []
    for alpha in (float(a) for a in args.alphas.split(",")):
        for name, start in starts(spec, sizes, not args.no_gd):
            t0 = time.perf_counter()
            try:
                fp = solve(spec, alpha, "positional", args.precision, integrator="qmc", start=start)
                inv = fp.overlaps.invariants()
                outcome = ("positional" if fp.converged else f"not converged ({fp.status})",
                           inv["m_singular_values"][0], inv["q_eigenvalues"][0], fp.residual, fp.train_loss)
            except SolverError as exc:
                outcome = (f"solver failed ({str(exc)[:60]})", float("nan"), float("nan"), float("nan"), float("nan"))
            except BranchNotFound as exc:
                pt = exc.point
                m = pt.overlaps.invariants()["m_singular_values"][0] if pt is not None else float("nan")
                q = pt.overlaps.invariants()["q_eigenvalues"][0] if pt is not None else float("nan")
                outcome = (f"fell to the trivial point ({str(exc)[:60]})", m, q, float("nan"), float("nan"))
            row = (alpha, name) + outcome + (time.perf_counter() - t0,)
            rows.append(row)
            print(" | ".join(str(v) for v in row), flush=True)
    print("\n| alpha | start | outcome | m_sv_1 | q | residual | train loss | s |\n|---|---|---|---|---|---|---|---|")
    for a, name, outcome, m, q, res, F, dt in rows:
        print(f"| {a:g} | {name} | {outcome} | {m:.4g} | {q:.4g} | {res:.2g} | {F:.5g} | {dt:.0f} |")


if __name__ == "__main__":
    main()
