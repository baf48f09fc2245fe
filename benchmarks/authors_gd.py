"""Our theory against the authors' gradient descent (docs/validation.md, section "The authors'
gradient descent").

The authors' tables ``empirics/results_{mean,std}_standardA.csv`` (``d = 1000``, ``sigma = 0.5``,
``lam = 0.01``, default ``A``, 24 runs per row, 5000 steps of GD at learning rate 0.15; ``informed =
True``: the semantic start, ``False``: the positional one) give per ``(omega, alpha, start)`` the mean
and standard deviation of the test error, ``m`` and ``theta / sigma^2``. For each requested
``omega`` both branches are followed along the table's 25 alphas (``numerics.branches.follow_branch``)
and each cell's start is compared with the branch it starts on: ``z = (gd - theory) /
sqrt(se_gd^2 + err_theory^2)``, ``se_gd = std / sqrt(24)``. Their training loss is on another scale
(4.6 at ``alpha = 2`` where ours is 1e-3) and is not compared.

A cell's reason, where ``|z| > 3``: ``no theory`` (the branch does not exist there), ``run on another
branch`` (the runs' mean ``m`` and ``theta / sigma^2`` say the other branch: the larger of the two is
not the start's), the finite-``d`` floor of an overlap that the branch sets to zero (the runs' mean
below 0.05), else ``unexplained`` (finite size, 5000 steps, or the theory: not decided here).

Usage::

    python benchmarks/authors_gd.py --data ../shared/authors-data --omegas 0.1,0.3,0.5 [--precision fast]
        [--figure docs/figures/authors_gd_z.png]
"""
from __future__ import annotations

import argparse
import csv
import math
import time
from pathlib import Path

import numpy as np

from derivations import ModelSpec
from numerics.branches import follow_branch

RUNS = 24
# an overlap that the branch sets to zero by symmetry is measured by the runs as a small positive
# number (a norm at finite d): below this (the value below which validate calls a run's overlap
# absent) it is that floor, not a disagreement
FLOOR = 0.05
FLOOR_REASON = "finite-d floor of an overlap zero on the branch"
QUANTITIES = (("test_error", "attention_gen_error"), ("m", "attention_mag"), ("theta_over_sigma2", "attention_theta"))


def table(path: Path) -> dict:
    with path.open(newline="") as f:
        return {(float(r["omega"]), float(r["alpha"]), r["informed"] == "True"): r for r in csv.DictReader(f)
                if float(r["sigma"]) == 0.5 and float(r["attention_lmbda"]) == 0.01}


def theory_value(p, quantity: str, sigma: float) -> tuple:
    if quantity == "test_error":
        return p.test_error, p.error["test_error"]
    if quantity == "m":
        return abs(p.overlaps.m), p.error["m"]
    return abs(p.overlaps.theta) / sigma**2, p.error["theta"] / sigma**2


def main():
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--data", type=Path, default=Path(__file__).resolve().parents[1].parent / "shared" / "authors-data")
    p.add_argument("--omegas", default="0.3")
    p.add_argument("--precision", default="fast", choices=("draft", "fast", "high"))
    p.add_argument("--worst", type=int, default=12)
    p.add_argument("--figure", type=Path, default=None)
    args = p.parse_args()
    mean = table(args.data / "empirics" / "results_mean_standardA.csv")
    std = table(args.data / "empirics" / "results_std_standardA.csv")
    sigma = 0.5
    cells = []
    for omega in [float(w) for w in args.omegas.split(",")]:
        alphas = sorted({a for (w, a, _) in mean if abs(w - omega) < 1e-9})
        if not alphas:
            raise SystemExit(f"no rows at omega = {omega}")
        theory = {}
        for branch in ("semantic", "positional"):
            t0 = time.perf_counter()
            curve = follow_branch(ModelSpec(sigma=sigma, lam=0.01, omega=omega),
                                  alphas, branch, args.precision)
            theory[branch] = {round(q.alpha, 9): q for q in curve.points}
            ends = ", ".join(f"{s['side']} end {s['alpha']:.4g} +- {s['alpha_error']:.1g} ({s.get('kind', '')})"
                             for s in curve.spinodals)
            print(f"omega = {omega}: {branch} branch at {len(curve.points)} of {len(alphas)} alphas "
                  f"({time.perf_counter() - t0:.0f} s){'; ' + ends if ends else ''}", flush=True)
        for alpha in alphas:
            for informed in (True, False):
                branch = "semantic" if informed else "positional"
                r, s = mean.get((omega, alpha, informed)), std.get((omega, alpha, informed))
                if r is None:
                    continue
                point = theory[branch].get(round(alpha, 9))
                gd_m, gd_t = float(r["attention_mag_mean"]), float(r["attention_theta_mean"])
                other = (gd_m > gd_t) if informed else (gd_t > gd_m)
                for quantity, column in QUANTITIES:
                    g, se = float(r[f"{column}_mean"]), float(s[f"{column}_mean"]) / math.sqrt(RUNS)
                    if point is None:
                        cells.append((omega, alpha, branch, quantity, g, se, math.nan, math.nan, math.nan, "no theory"))
                        continue
                    t, te = theory_value(point, quantity, sigma)
                    z = (g - t) / math.hypot(se, te if math.isfinite(te) else 0.0)
                    reason = "" if abs(z) <= 3 else ("run on another branch" if other else
                                                      FLOOR_REASON if t == 0.0 and g < FLOOR else "unexplained")
                    cells.append((omega, alpha, branch, quantity, g, se, t, te, z, reason))
    print("| omega | alpha | start | quantity | gd | gd s.e. | theory | theory error | z | reason |")
    print("|---|---|---|---|---|---|---|---|---|---|")
    for c in cells:
        print(f"| {c[0]:g} | {c[1]:.4g} | {c[2]} | {c[3]} | {c[4]:.5g} | {c[5]:.2g} | {c[6]:.5g} | {c[7]:.2g} | "
              f"{c[8]:+.2f} | {c[9]} |")
    finite = [c for c in cells if math.isfinite(c[8])]
    print(f"\n{len(finite)} cells with a theory value: |z| <= 2 in {sum(abs(c[8]) <= 2 for c in finite)}, "
          f"<= 3 in {sum(abs(c[8]) <= 3 for c in finite)}; {len(cells) - len(finite)} cells without (no theory)")
    for reason in ("run on another branch", FLOOR_REASON, "unexplained"):
        print(f"|z| > 3, {reason}: {sum(c[9] == reason for c in finite)}")
    print(f"\nthe {args.worst} worst cells:")
    for c in sorted(finite, key=lambda c: -abs(c[8]))[:args.worst]:
        print(f"omega = {c[0]:g}, alpha = {c[1]:.4g}, {c[2]} start, {c[3]}: gd {c[4]:.5g} +- {c[5]:.2g}, theory "
              f"{c[6]:.5g} +- {c[7]:.2g}, z = {c[8]:+.1f} ({c[9] or 'within 3'})")
    if args.figure is not None:
        import matplotlib
        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
        omegas = sorted({c[0] for c in cells})
        alphas = sorted({c[1] for c in cells})
        fig, axes = plt.subplots(len(QUANTITIES), 2, figsize=(10, 3 * len(QUANTITIES)), squeeze=False)
        for i, (quantity, _) in enumerate(QUANTITIES):
            for j, branch in enumerate(("semantic", "positional")):
                grid = np.full((len(omegas), len(alphas)), np.nan)
                for c in cells:
                    if c[2] == branch and c[3] == quantity:
                        grid[omegas.index(c[0]), alphas.index(c[1])] = c[8]
                ax = axes[i][j]
                im = ax.pcolormesh(alphas, omegas, np.clip(grid, -10, 10), cmap="RdBu_r", vmin=-10, vmax=10,
                                   shading="nearest")
                ax.set_title(f"{quantity}, {branch} start: z (clipped to 10)")
                ax.set_xlabel("alpha")
                ax.set_ylabel("omega")
                fig.colorbar(im, ax=ax)
        fig.tight_layout()
        fig.savefig(args.figure, dpi=110)
        print(f"figure: {args.figure}")


if __name__ == "__main__":
    main()
