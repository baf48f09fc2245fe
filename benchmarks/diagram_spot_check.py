"""Spot check of a phase diagram's fast error estimates against high mode.

Picks ``--count`` rows at random (seeded) among the converged branch points of a phase
diagram's ``theory.csv`` (``attnphase phase-diagram --out DIR``), solves each in high
mode from the fast overlaps, and prints per field ``|fast - high|`` against the fast
estimate plus high's own (``!`` where their sum does not cover the difference), and how
many entries are covered.

Run: python benchmarks/diagram_spot_check.py DIR [--count 12] [--seed 0]   (about 20 s a row)
"""
import argparse

import numpy as np

from derivations.spec import ModelSpec
from numerics.fixed_points.lines import solve_branch
from numerics.overlaps import Overlaps
from tidyio import read_rows

FIELDS = ("q", "m", "V", "theta", "test_error", "train_loss")


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("directory")
    ap.add_argument("--count", type=int, default=12)
    ap.add_argument("--seed", type=int, default=0)
    args = ap.parse_args()
    rows = [r for r in read_rows(f"{args.directory}/theory.csv")
            if r["exists"] == "True" and r["converged"] == "True" and r["precision"] == "fast"]
    picked = np.random.default_rng(args.seed).choice(len(rows), size=min(args.count, len(rows)), replace=False)
    covered = total = 0
    worst = 0.0
    for i in sorted(picked):
        row = rows[i]
        spec = ModelSpec.from_columns(row)
        alpha = float(row["alpha"])
        start = Overlaps(q=float(row["q"]), m=float(row["m"]), V=float(row["V"]), theta=float(row["theta"]))
        high = solve_branch(spec, alpha, row["branch"], "high", start=start)
        cells = []
        for field in FIELDS:
            fast_value, h = float(row[field]), high.values[field]
            if abs(h) <= 1e-10:
                continue
            diff = abs(fast_value - h)
            bound = float(row[f"{field}_error"]) + high.error[field]
            ok = diff <= bound
            covered += ok
            total += 1
            worst = max(worst, diff / abs(h))
            cells.append(f"{field} {diff / abs(h):.1e}/{bound / abs(h):.1e}{'' if ok else '!'}")
        print(f"omega={row['omega']} alpha={alpha:.4f} {row['branch']:10s} high converged {high.converged}: "
              + "  ".join(cells), flush=True)
    print(f"the fast estimate (plus high's) covers |fast - high| in {covered} of {total} entries; "
          f"largest relative difference {worst:.1e}")


if __name__ == "__main__":
    main()
