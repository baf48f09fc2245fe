"""Our fixed points beside the authors' stored ones, field by field (docs/validation.md, section
"The authors' stored fixed points").

The authors' data (``theory/repl_softmax_Mixed_sig{sigma}_lamb{lam}_omega{omega}[_para|_agno][_Aalt].csv``,
columns ``q, m, V, theta, mse, alpha, lambda, Phi``; their solver: a degree-7 cubature iterated to
1e-4) name the branch by suffix: none = semantic, ``_para`` = positional, ``_agno`` = trivial,
``_Aalt`` = ``A = [[0.3, 0.7], [0.8, 0.2]]``. Each file's branch is followed here along the
file's own alphas (``numerics.branches.follow_branch``, the requested precision), and each of
``q, m, V, theta`` and the test error is printed beside the authors' value with the difference
in our stated errors. A row of theirs whose point lies on another branch (a positional file's
row with ``theta`` far from zero, say) is marked so.

Usage::

    python benchmarks/authors_theory.py --data ../shared/authors-data [--precision fast] [--only omega0.3]

One line per field and alpha, then a summary per file: the largest |difference| / our error per
field and the largest relative difference.
"""
from __future__ import annotations

import argparse
import csv
import re
import time
from pathlib import Path

import numpy as np

from derivations import ModelSpec
from numerics.branches import follow_branch

BRANCH_OF_SUFFIX = {"": "semantic", "_para": "positional", "_agno": "trivial"}
OTHER_A = ((0.3, 0.7), (0.8, 0.2))
FIELDS = (("q", "q"), ("m", "m"), ("V", "V"), ("theta", "theta"), ("test_error", "mse"))
ZERO_ON = {"semantic": ("m",), "positional": ("theta",), "trivial": ("m", "theta")}
NAME = re.compile(r"repl_softmax_Mixed_sig(?P<sigma>[\d.]+)_lamb(?P<lam>[\d.]+)_omega(?P<omega>[\d.]+)"
                  r"(?P<branch>_para|_agno)?(?P<alt>_Aalt)?\.csv$")


def read(path: Path) -> list:
    with path.open(newline="") as f:
        return [{k: float(v) for k, v in r.items() if k} for r in csv.DictReader(f)]


def on_branch(row: dict, branch: str, sigma: float) -> bool:
    """The authors' point lies on the branch its file names (its defining overlap above 1e-3,
    the other one below)."""
    sem, pos = abs(row["theta"]) / sigma**2 > 1e-3, abs(row["m"]) > 1e-3
    return {"semantic": sem and not pos, "positional": pos and not sem, "trivial": not sem and not pos}[branch]


def compare(path: Path, precision: str) -> list:
    g = NAME.search(path.name)
    sigma, lam, omega = float(g["sigma"]), float(g["lam"]), float(g["omega"])
    branch = BRANCH_OF_SUFFIX[g["branch"] or ""]
    spec = ModelSpec(sigma=sigma, lam=lam, omega=omega, A=OTHER_A if g["alt"] else None)
    rows = read(path)
    t0 = time.perf_counter()
    curve = follow_branch(spec, sorted({r["alpha"] for r in rows}), branch, precision)
    ours = {round(p.alpha, 9): p for p in curve.points}
    print(f"## {path.name}: {branch}, sigma = {sigma}, lam = {lam}, omega = {omega}"
          f"{', other A' if g['alt'] else ''} ({len(curve.points)} of {len(rows)} alphas solved, "
          f"{time.perf_counter() - t0:.0f} s){'; ' + curve.note if curve.note else ''}", flush=True)
    for sp in curve.spinodals:
        print(f"   our branch ends at alpha = {sp['alpha']:.4g} +- {sp['alpha_error']:.1g} ({sp.get('kind', '')})")
    out = []
    for r in sorted(rows, key=lambda r: r["alpha"]):
        p = ours.get(round(r["alpha"], 9))
        theirs_on = on_branch(r, branch, sigma)
        for ours_name, their_name in FIELDS:
            if ours_name in ZERO_ON[branch]:
                continue  # zero on the branch by symmetry (theirs to their tolerance)
            theirs = r[their_name]
            if p is None:
                out.append((r["alpha"], ours_name, np.nan, np.nan, theirs, np.nan, theirs_on))
                continue
            value = getattr(p.overlaps, ours_name) if ours_name != "test_error" else p.test_error
            err = p.error[ours_name]
            z = (value - theirs) / err if err > 0 else np.inf
            out.append((r["alpha"], ours_name, value, err, theirs, z, theirs_on))
            print(f"alpha = {r['alpha']:.4f} {ours_name:10s} ours {value: .6g} +- {err:.1g}  theirs {theirs: .6g}"
                  f"  difference {value - theirs: .2e} = {z: .3g} of our errors"
                  f"{'' if theirs_on else '  (their point is on another branch)'}", flush=True)
    for _, name in FIELDS:
        name = {"mse": "test_error"}.get(name, name)
        sel = [o for o in out if o[1] == name and o[6] and np.isfinite(o[2])]
        if sel:
            worst = max(sel, key=lambda o: abs(o[5]))
            rel = max(abs(o[2] - o[4]) / max(abs(o[4]), 1e-12) for o in sel)
            print(f"   {name}: largest |difference| {abs(worst[5]):.3g} of our errors (alpha = {worst[0]:.4f}); "
                  f"largest relative difference {rel:.2e}")
    return out


def main():
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--data", type=Path, default=Path(__file__).resolve().parents[1].parent / "shared" / "authors-data")
    p.add_argument("--precision", default="fast", choices=("draft", "fast", "high"))
    p.add_argument("--only", default="", help="only the files whose name contains this text")
    args = p.parse_args()
    files = sorted(f for f in (args.data / "theory").glob("*.csv") if args.only in f.name)
    if not files:
        raise SystemExit(f"no theory files under {args.data / 'theory'} matching {args.only!r}")
    for f in files:
        compare(f, args.precision)


if __name__ == "__main__":
    main()
