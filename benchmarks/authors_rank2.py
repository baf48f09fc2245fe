"""The authors' rank-two student from random starts against our theory's rank-two branches
(docs/validation.md, "The appendix experiment: a rank-two student from random starts").

Theirs: ``results_{mean,std}_r=2.csv`` at ``omega = 0.3`` (``attnphase/paper/authors_data/``; ``d =
1000``, 10 runs per ``alpha``, 5000 steps of GD at learning rate 0.15), per column of ``Q`` the
largest and smallest ``|m|`` and ``theta / sigma^2``. Per-column values depend on the rotation of
the columns, so the theory is compared through the invariants ``m_sv_1`` and ``theta_sv_1 /
sigma^2`` (root mean square over their runs, ``attnphase.paper.authors.column_invariant``), the test
error and the training loss (theirs ``R``, divided by their ``d``).

Ours: a tidy CSV of the rank-two branches (``attnphase curve --rank 2 --omega 0.3 --alphas 0.25:4:16
--branches positional,mixed,semantic --precision draft --out FILE``), linearly interpolated in
``alpha`` to theirs within each branch's range; the interpolation's error (half the largest second
difference of the neighbouring points, times ``t (1 - t)``) is added to the theory's stated one.
``z = (theirs - theory) / sqrt(se_theirs^2 + err_theory^2)`` per branch, and the branch nearest to
the runs in the invariants.

Usage::

    python benchmarks/authors_rank2.py --theory docs/figures/rank2_curve.csv [--every 3]
"""
from __future__ import annotations

import argparse
import csv
import math
from pathlib import Path

import numpy as np

from attnphase.paper.authors import rank_two_gd

SIGMA2 = 0.25
BRANCHES = ("positional", "mixed", "semantic")
QUANTITIES = (("m_sv_1", "m_singular_values_1", 1.0), ("theta_sv_1_over_sigma2", "theta_singular_values_1",
                                                        1.0 / SIGMA2),
              ("test_error", "test_error", 1.0), ("train_loss", "train_loss", 1.0))


def theory(path: Path) -> dict:
    """Per branch, per quantity: arrays ``(alpha, value, error)`` of the converged points."""
    with path.open(newline="") as f:
        rows = [r for r in csv.DictReader(f) if r.get("status", "converged") == "converged"]
    out = {}
    for b in BRANCHES:
        sel = sorted((r for r in rows if r["branch"] == b), key=lambda r: float(r["alpha"]))
        out[b] = {name: (np.array([float(r["alpha"]) for r in sel]),
                         np.array([float(r[col]) * scale for r in sel]),
                         np.array([float(r.get(f"{col}_error") or "nan") * scale for r in sel]))
                  for name, col, scale in QUANTITIES}
    return out


def interpolate(a: np.ndarray, v: np.ndarray, e: np.ndarray, alpha: float) -> tuple:
    """Linear interpolation with its error; NaN outside the branch's points."""
    if a.size < 2 or not a[0] <= alpha <= a[-1]:
        return math.nan, math.nan
    i = min(int(np.searchsorted(a, alpha, side="right")) - 1, a.size - 2)
    t = (alpha - a[i]) / (a[i + 1] - a[i])
    value = (1 - t) * v[i] + t * v[i + 1]
    lo, hi = max(i - 1, 0), min(i + 3, a.size)
    second = np.abs(np.diff(v[lo:hi], 2)).max() if hi - lo >= 3 else 0.0
    err = math.hypot(max(e[i], e[i + 1]) if np.isfinite(e[i:i + 2]).all() else 0.0, 0.5 * t * (1 - t) * second)
    return float(value), err


def main():
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--theory", type=Path, default=Path("docs/figures/rank2_curve.csv"))
    p.add_argument("--every", type=int, default=3, help="print every k-th alpha of theirs (default 3)")
    args = p.parse_args()
    th = theory(args.theory)
    print("| alpha | quantity | authors' GD | " + " | ".join(f"{b} (z)" for b in BRANCHES) + " | nearest branch |")
    print("|---|---|---|" + "---|" * len(BRANCHES) + "---|")
    for k, point in enumerate(rank_two_gd()):
        alpha = point["alpha"]
        if k % args.every:
            continue
        dist = {}
        lines = []
        for name, _, _ in QUANTITIES:
            g, se = point["values"][name]
            cells = []
            for b in BRANCHES:
                t, te = interpolate(*th[b][name], alpha)
                z = (g - t) / math.hypot(se, te) if math.isfinite(t) else math.nan
                if name in ("m_sv_1", "theta_sv_1_over_sigma2") and math.isfinite(z):
                    dist[b] = dist.get(b, 0.0) + z * z
                cells.append(f"{t:.4g} ({z:+.1f})" if math.isfinite(t) else "absent")
            lines.append((name, g, se, cells))
        nearest = min(dist, key=dist.get) if dist else "-"
        for name, g, se, cells in lines:
            print(f"| {alpha:.3f} | {name} | {g:.4g} +- {se:.2g} | " + " | ".join(cells) + f" | {nearest} |")


if __name__ == "__main__":
    main()
