"""Our fixed points beside the authors' stored ones, field by field (docs/validation.md, section
"The authors' stored fixed points").

The authors' data (``theory/repl_softmax_Mixed_sig{sigma}_lamb{lam}_omega{omega}[_para|_agno][_Aalt].csv``,
columns ``q, m, V, theta, mse, alpha, lambda, Phi``; their solver: a degree-7 cubature iterated to
1e-4) name the branch by suffix: none = semantic, ``_para`` = positional, ``_agno`` = trivial,
``_Aalt`` = ``A = [[0.3, 0.7], [0.8, 0.2]]`` (a copy ships with the package,
``attnphase/paper/authors_data/``; the reading and the comparison are ``attnphase.paper.authors``,
which the paper's report uses too). Each file's branch is followed here along the
file's own alphas (``numerics.branches.follow.follow_branch``, the requested precision), and each of
``q, m, V, theta``, the test error (beside their ``mse / 2``) and the training loss (beside their
``-Phi``) is printed beside the authors' value with the difference
in our stated errors. A row of theirs whose point lies on another branch (a positional file's
row with ``theta`` far from zero, say) is marked so.

Usage::

    python benchmarks/authors_theory.py [--data ../shared/authors-data/theory] [--precision fast] [--only omega0.3]

One line per field and alpha, then a summary per file: the largest |difference| / our error per
field and the largest relative difference.
"""
from __future__ import annotations

import argparse
import time
from pathlib import Path

from attnphase.paper.authors import DATA, compare, files, worst
from numerics.branches.follow import follow_branch


def compare_file(f, precision: str) -> list:
    t0 = time.perf_counter()
    curve = follow_branch(f.spec, list(f.alphas), f.branch, precision)
    ours = {p.alpha: {**p.values, **{f"{k}_error": v for k, v in p.error.items()}} for p in curve.points}
    print(f"## {f.name}: {f.branch}, sigma = {f.spec.sigma}, lam = {f.spec.lam}, omega = {f.spec.omega}"
          f"{', other A' if f.spec.A is not None else ''} ({len(curve.points)} of {len(f.rows)} alphas solved, "
          f"{time.perf_counter() - t0:.0f} s){'; ' + curve.note if curve.note else ''}", flush=True)
    for sp in curve.spinodals:
        print(f"   our branch ends at alpha = {sp['alpha']:.4g} +- {sp['alpha_error']:.1g} ({sp.get('kind', '')})")
    out = compare(f, ours)
    for r in out:
        print(f"alpha = {r['alpha']:.4f} {r['field']:10s} ours {r['ours']: .6g} +- {r['ours_error']:.1g}  theirs "
              f"{r['theirs']: .6g}  difference {r['difference']: .2e} = {r['in_our_errors']: .3g} of our errors"
              f"{'' if r['their_point_on_branch'] else '  (their point is on another branch)'}")
    for field, w in worst(out).items():
        print(f"   {field}: largest |difference| {w['in_our_errors']:.3g} of our errors; largest relative difference "
              f"{w['relative']:.2e} (alpha = {w['alpha']:.4f})")
    return out


def main():
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--data", type=Path, default=DATA, help="folder of the authors' theory files")
    p.add_argument("--precision", default="fast", choices=("draft", "fast", "high"))
    p.add_argument("--only", default="", help="only the files whose name contains this text")
    args = p.parse_args()
    chosen = [f for f in files(args.data) if args.only in f.name]
    if not chosen:
        raise SystemExit(f"no theory files under {args.data} matching {args.only!r}")
    for f in chosen:
        compare_file(f, args.precision)


if __name__ == "__main__":
    main()
