"""Our theory against the authors' gradient descent over their whole grid (docs/validation.md,
section "The authors' gradient descent").

The authors' tables ``empirics/results_{mean,std}_standardA.csv`` (``d = 1000``, ``sigma = 0.5``,
``lam = 0.01``, default ``A``, 24 runs per row, 5000 steps of GD at learning rate 0.15; ``informed =
True``: the semantic start, ``False``: the positional one; 27 values of ``omega`` from 0.02 to 0.7, 25
of ``alpha`` from 0.01 to 2) give per ``(omega, alpha, start)`` the mean and standard deviation over
the runs of the test error, the training loss, ``m`` and ``theta / sigma^2``. Their training loss is
the summed risk ``R`` (ridge included), ours is ``R / d``: theirs is divided by ``d = 1000`` here
(at ``omega = 0.3``, ``alpha = 2`` the ratio is 1017.7 on the semantic start and 1017.9 on the
positional one, ours being ``R/d``).

For each ``omega`` both branches are followed along the table's 25 alphas
(``numerics.branches.follow.follow_branch``, cached per ``(omega, branch, precision)`` under ``--cache``, so
the grid can be built by several processes and resumed), and each cell's start is compared with the
branch it starts on: ``z = (gd - theory) / sqrt(se_gd^2 + err_theory^2)``, ``se_gd = std / sqrt(24)``.
Draft precision states no error: ``--draft-error`` (relative) stands for it, and ``--refine N``
re-solves the ``N`` worst cells at fast precision (started at the draft point) and prints both.

A cell's reason, where ``|z| > 3``: ``branch absent`` (the start's branch does not exist at that
``alpha``), ``finite-d floor`` (an overlap that the branch sets to zero, measured by the runs as a
norm below 0.05), ``runs on the other branch`` (the runs' mean ``m`` and ``theta / sigma^2`` are
nearer, in their standard errors, to the other branch's than to the start's), ``near the branch's
end`` (within 0.1 in ``alpha`` of where the start's branch ends), else ``unexplained``. The last two
are decided by other evidence (docs/validation.md: continued runs, larger ``d``).

Usage::

    python studies/authors_gd.py --data AUTHORS_DATA --omegas all --precision draft --cache authors_gd_cache \
        [--refine 16] [--figure docs/figures/authors_gd_z.png] [--worst 20] [--cells cells.csv]
"""
from __future__ import annotations

import argparse
import csv
import math
import time
from pathlib import Path

import numpy as np

from derivations import ModelSpec
from numerics.branches.follow import follow_branch
from numerics.fixed_points.errors import BranchNotFound
from numerics.fixed_points.lines import solve_branch
from numerics.overlaps import Overlaps
from tidyio import KeyedStore

RUNS = 24
D = 1000
SIGMA, LAM = 0.5, 0.01
# an overlap that the branch sets to zero by symmetry is measured by the runs as a small positive
# number (a norm at finite d): below this (the value below which validate calls a run's overlap
# absent) it is that floor, not a disagreement
FLOOR = 0.05
NEAR_END = 0.1
ABSENT, FLOOR_REASON, OTHER, NEAR, UNEXPLAINED = ("branch absent", "finite-d floor", "runs on the other branch",
                                                  "near the branch's end", "unexplained")
QUANTITIES = (("test_error", "attention_gen_error"), ("train_loss", "attention_train_error"),
              ("m", "attention_mag"), ("theta_over_sigma2", "attention_theta"))
BRANCH_OF_START = {True: "semantic", False: "positional"}
OTHER_BRANCH = {"semantic": "positional", "positional": "semantic"}


def table(path: Path) -> dict:
    with path.open(newline="") as f:
        return {(float(r["omega"]), float(r["alpha"]), r["informed"] == "True"): r for r in csv.DictReader(f)
                if float(r["sigma"]) == SIGMA and float(r["attention_lmbda"]) == LAM}


def gd_value(mean_row, std_row, quantity: str, column: str) -> tuple:
    """The runs' mean and standard error, on our scale (their training loss is ``R``, ours ``R/d``)."""
    scale = 1.0 / D if quantity == "train_loss" else 1.0
    return float(mean_row[f"{column}_mean"]) * scale, float(std_row[f"{column}_mean"]) * scale / math.sqrt(RUNS)


def theory_value(point: dict, quantity: str, draft_error: float) -> tuple:
    """A cached point's value and error on the runs' scale; where the precision states no
    error, ``draft_error`` times the value stands for it."""
    field = {"theta_over_sigma2": "theta"}.get(quantity, quantity)
    scale = 1.0 / SIGMA**2 if quantity == "theta_over_sigma2" else 1.0
    value = abs(point[field]) * scale if field in ("m", "theta") else point[field]
    err = point.get(f"{field}_error", math.nan) * scale
    return value, (err if math.isfinite(err) else draft_error * abs(value))


def branch_store(cache: Path | None):
    """The solved branches and refined points kept under ``cache`` (None: nothing kept)."""
    return (KeyedStore(cache, prefix="branch_"), KeyedStore(cache, prefix="fast_")) if cache else (None, None)


def cached_branch(store, omega: float, branch: str, alphas, precision: str, bisections: int,
                  cached_only: bool = False) -> dict:
    """The branch along ``alphas`` at ``omega``: points (as rows), spinodals, note and wall time,
    read from ``store`` if there, else solved (and stored); with ``cached_only`` a branch not in
    the store is marked ``not_computed`` instead."""
    key = {"omega": omega, "branch": branch, "precision": precision}
    found = store.get(key) if store is not None else None
    if found is not None:
        return found
    if cached_only:
        return {"omega": omega, "branch": branch, "points": [], "spinodals": [], "note": "not computed",
                "failure": "", "wall_s": 0.0, "not_computed": True}
    t0 = time.perf_counter()
    curve = follow_branch(ModelSpec(sigma=SIGMA, lam=LAM, omega=omega), alphas, branch, precision,
                          bisections=bisections)
    rows = [{k: (v if not isinstance(v, (np.floating, np.integer, np.bool_)) else v.item())
             for k, v in p.to_row().items()} for p in curve.points]
    out = {"omega": omega, "branch": branch, "precision": precision, "points": rows,
           "spinodals": curve.spinodals, "note": curve.note, "failure": curve.failure,
           "bisections": bisections, "wall_s": time.perf_counter() - t0}
    if store is not None:
        store.put(key, out, replace=True)
        out = store.get(key)
    return out


def branch_ends(curve: dict) -> str:
    return "; ".join(f"{s['side']} end {s['alpha']:.3g}" for s in curve["spinodals"]) or (
        "not found" if not curve["points"] else "")


def point_at(curve: dict, alpha: float):
    for p in curve["points"]:
        if abs(p["alpha"] - alpha) < 1e-9 and p["converged"] in (True, "True"):
            return p
    return None


def overlap_distance(mean_row, std_row, point) -> float:
    """Sum of squared differences of the runs' mean ``m`` and ``theta/sigma^2`` from a point's,
    in the runs' standard errors."""
    if point is None:
        return math.inf
    total = 0.0
    for quantity, column in QUANTITIES[2:]:
        g, se = gd_value(mean_row, std_row, quantity, column)
        t, _ = theory_value(point, quantity, 0.0)
        total += ((g - t) / se) ** 2
    return total


def near_end(curve: dict, alpha: float) -> bool:
    return any(abs(s["alpha"] - alpha) < NEAR_END for s in curve["spinodals"])


def cells_of(mean: dict, std: dict, theory: dict, omega: float, draft_error: float) -> list:
    """One dict per (alpha, start, quantity) at ``omega``: the runs' value, the theory's on the
    start's branch, z, and the reason where |z| > 3."""
    out = []
    for (w, alpha, informed), r in sorted(mean.items()):
        if abs(w - omega) > 1e-9:
            continue
        s = std[(w, alpha, informed)]
        branch = BRANCH_OF_START[informed]
        if theory[branch].get("not_computed"):
            continue
        point = point_at(theory[branch], alpha)
        other = point_at(theory[OTHER_BRANCH[branch]], alpha)
        on_other = overlap_distance(r, s, other) < overlap_distance(r, s, point)
        for quantity, column in QUANTITIES:
            g, se = gd_value(r, s, quantity, column)
            cell = dict(omega=omega, alpha=alpha, start=branch, quantity=quantity, gd=g, gd_se=se,
                        theory=math.nan, theory_error=math.nan, z=math.nan, other=math.nan, z_other=math.nan,
                        reason=ABSENT)
            if other is not None:
                cell["other"], oe = theory_value(other, quantity, draft_error)
                cell["z_other"] = (g - cell["other"]) / math.hypot(se, oe)
            if point is not None:
                t, te = theory_value(point, quantity, draft_error)
                z = (g - t) / math.hypot(se, te)
                reason = ""
                if abs(z) > 3:
                    reason = (FLOOR_REASON if t == 0.0 and g < FLOOR else OTHER if on_other
                              else NEAR if near_end(theory[branch], alpha) else UNEXPLAINED)
                cell.update(theory=t, theory_error=te, z=z, reason=reason)
            out.append(cell)
    return out


def refined_key(omega: float, alpha: float, branch: str) -> dict:
    return {"omega": omega, "alpha": alpha, "branch": branch}


def refine(omega: float, alpha: float, branch: str, theory: dict, store):
    """The point re-solved at fast precision, started at the cached one (a row, read from and
    written to ``store``), or None where the fast solve does not find it."""
    key = refined_key(omega, alpha, branch)
    if store is not None and key in store:
        return store.get(key)["row"]
    p = point_at(theory[(omega, branch)], alpha)
    start = Overlaps(q=p["q"], m=p["m"], V=p["V"], theta=p["theta"])
    t0 = time.perf_counter()
    try:
        fp = solve_branch(ModelSpec(sigma=SIGMA, lam=LAM, omega=omega), alpha, branch, "fast", start=start)
        row = fp.to_row() if fp.converged else None
    except BranchNotFound:
        row = None
    if row is not None:
        row = {k: (v.item() if isinstance(v, (np.floating, np.integer, np.bool_)) else v) for k, v in row.items()}
    if store is not None:
        store.put(key, {"row": row, "wall_s": time.perf_counter() - t0}, replace=True)
    return row


def figure(cells: list, path: Path):
    """One panel per quantity and start: z over (alpha, omega) on the table's own grid (cells by
    index, so that the omegas not computed leave no stretched cells), clipped to +-10; x: the
    start's branch is absent; dot: an overlap zero on the branch, measured at its finite-d floor."""
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    omegas = sorted({c["omega"] for c in cells})
    alphas = sorted({c["alpha"] for c in cells})
    fig, axes = plt.subplots(len(QUANTITIES), 2, figsize=(10, 2.2 + 0.22 * len(omegas) * len(QUANTITIES)),
                             squeeze=False, sharex=True, sharey=True, layout="constrained")
    for i, (quantity, _) in enumerate(QUANTITIES):
        for j, branch in enumerate(("semantic", "positional")):
            grid = np.full((len(omegas), len(alphas)), np.nan)
            marks = {ABSENT: [], FLOOR_REASON: []}
            for c in cells:
                if c["start"] == branch and c["quantity"] == quantity:
                    x, y = alphas.index(c["alpha"]), omegas.index(c["omega"])
                    grid[y, x] = c.get("z_fast", c["z"])
                    if c["reason"] in marks:
                        marks[c["reason"]].append((x, y))
            ax = axes[i][j]
            ax.set_facecolor("0.8")
            im = ax.pcolormesh(np.arange(len(alphas) + 1) - 0.5, np.arange(len(omegas) + 1) - 0.5,
                               np.ma.masked_invalid(np.clip(grid, -10, 10)), cmap="RdBu_r", vmin=-10, vmax=10)
            for reason, marker in ((ABSENT, "x"), (FLOOR_REASON, ".")):
                if marks[reason]:
                    ax.scatter(*zip(*marks[reason]), marker=marker, s=8, color="0.3", linewidths=0.6)
            ax.set_title(f"{quantity}, {branch} start", fontsize=9)
            ax.set_yticks(range(len(omegas)), [f"{w:g}" for w in omegas], fontsize=7)
            ticks = list(range(0, len(alphas), 3))
            ax.set_xticks(ticks, [f"{alphas[k]:.2f}" for k in ticks], fontsize=7)
            if i == len(QUANTITIES) - 1:
                ax.set_xlabel("alpha")
            if j == 0:
                ax.set_ylabel("omega")
    fig.colorbar(im, ax=axes, shrink=0.5, label="z = (GD - theory) / combined error, clipped to +-10")
    fig.suptitle("The authors' GD (d = 1000, 24 runs, 5000 steps) against our theory on the start's branch; "
                 "x: branch absent; dot: an overlap zero on the branch (finite-d floor)", fontsize=8)
    fig.savefig(path, dpi=75)


def main():
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--data", type=Path, required=True,
                   help="the authors' data folder (its empirics/ holds results_{mean,std}_standardA.csv)")
    p.add_argument("--omegas", default="all", help="comma-separated, or all (the table's 27)")
    p.add_argument("--precision", default="draft", choices=("draft", "fast", "high"))
    p.add_argument("--cache", type=Path, default=None,
                   help="folder of solved branches and refined points (tidyio.KeyedStore; read, and written)")
    p.add_argument("--draft-error", type=float, default=1e-3,
                   help="relative theory error where the precision states none (default 1e-3)")
    p.add_argument("--bisections", type=int, default=1,
                   help="bisections of a branch's end between grid points (default 1: the end to half a step)")
    p.add_argument("--cached-only", action="store_true",
                   help="solve nothing: a branch not in the cache is left out (its start's cells too)")
    p.add_argument("--solve-only", action="store_true", help="only fill the cache")
    p.add_argument("--refine", type=int, default=0, help="re-solve the N worst cells at fast precision")
    p.add_argument("--refine-budget", type=float, default=math.inf,
                   help="seconds after which no new point is refined (those cached still are read)")
    p.add_argument("--worst", type=int, default=20)
    p.add_argument("--figure", type=Path, default=None)
    p.add_argument("--cells", type=Path, default=None, help="write every cell to this CSV")
    args = p.parse_args()
    mean = table(args.data / "empirics" / "results_mean_standardA.csv")
    std = table(args.data / "empirics" / "results_std_standardA.csv")
    all_omegas = sorted({w for (w, _, _) in mean})
    omegas = all_omegas if args.omegas == "all" else [float(w) for w in args.omegas.split(",")]
    theory, cells, wall = {}, [], 0.0
    branches, refined = branch_store(args.cache)
    for omega in omegas:
        alphas = sorted({a for (w, a, _) in mean if abs(w - omega) < 1e-9})
        if not alphas:
            raise SystemExit(f"no rows at omega = {omega}")
        for branch in ("semantic", "positional"):
            curve = cached_branch(branches, omega, branch, alphas, args.precision, args.bisections,
                                  args.cached_only)
            theory[(omega, branch)] = curve
            wall += curve["wall_s"]
            print(f"omega = {omega:g}: {branch} branch at {len(curve['points'])} of {len(alphas)} alphas "
                  f"({curve['wall_s']:.0f} s){'; ' + branch_ends(curve) if branch_ends(curve) else ''}"
                  f"{'; ' + curve['failure'] if curve['failure'] else ''}", flush=True)
        if not args.solve_only:
            cells += cells_of(mean, std, {b: theory[(omega, b)] for b in ("semantic", "positional")}, omega,
                              args.draft_error)
    missing = [f"{w:g} {b}" for (w, b), c in theory.items() if c.get("not_computed")]
    print(f"theory: {len(omegas)} omegas, {wall:.0f} s of solving (summed over the cached branches)"
          + (f"; not computed: {', '.join(missing)}" if missing else ""))
    if args.solve_only:
        return
    finite = [c for c in cells if math.isfinite(c["z"])]
    print(f"\n{len(cells)} cells; {len(cells) - len(finite)} with the start's branch absent; of {len(finite)} "
          f"with a theory value |z| <= 2 in {sum(abs(c['z']) <= 2 for c in finite)}, <= 3 in "
          f"{sum(abs(c['z']) <= 3 for c in finite)}")
    for quantity, _ in QUANTITIES:
        sel = [c for c in finite if c["quantity"] == quantity]
        print(f"  {quantity}: |z| <= 3 in {sum(abs(c['z']) <= 3 for c in sel)} of {len(sel)}; |z| > 3 by reason: "
              + ", ".join(f"{r} {sum(c['reason'] == r for c in sel)}"
                          for r in (FLOOR_REASON, OTHER, NEAR, UNEXPLAINED)))
    worst = sorted((c for c in finite if c["reason"] != FLOOR_REASON), key=lambda c: -abs(c["z"]))
    points = list(dict.fromkeys((c["omega"], c["alpha"], c["start"]) for c in worst))[:args.refine]
    started = time.perf_counter()
    for key in points:
        t0 = time.perf_counter()
        if t0 - started > args.refine_budget and not (refined is not None and refined_key(*key) in refined):
            continue
        row = refine(*key, theory, refined)
        print(f"refined omega = {key[0]:g}, alpha = {key[1]:.4g}, {key[2]} at fast: "
              f"{'converged' if row else 'not found'} ({time.perf_counter() - t0:.0f} s)", flush=True)
        for c in cells:
            if (c["omega"], c["alpha"], c["start"]) == key and row is not None:
                t, te = theory_value(row, c["quantity"], 0.0)
                c.update(theory_fast=t, theory_fast_error=te, z_fast=(c["gd"] - t) / math.hypot(c["gd_se"], te))
    worst.sort(key=lambda c: -abs(c.get("z_fast", c["z"])))
    print(f"\nthe {args.worst} worst cells (the finite-d floor left out):")
    print("| omega | alpha | start | quantity | GD | theory (precision) | z | other branch | z other | reason |")
    print("|---|---|---|---|---|---|---|---|---|---|")
    for c in worst[:args.worst]:
        fast = (f"; fast {c['theory_fast']:.5g} +- {c['theory_fast_error']:.1g}, z {c['z_fast']:+.1f}"
                if "z_fast" in c else "")
        print(f"| {c['omega']:g} | {c['alpha']:.3f} | {c['start']} | {c['quantity']} | {c['gd']:.5g} +- "
              f"{c['gd_se']:.2g} | {c['theory']:.5g} ({args.precision}{fast}) | {c['z']:+.1f} | {c['other']:.5g} | "
              f"{c['z_other']:+.1f} | {c['reason']} |")
    if args.cells is not None:
        keys = sorted({k for c in cells for k in c}, key=lambda k: (k not in cells[0], k))
        with args.cells.open("w", newline="") as f:
            w = csv.DictWriter(f, keys)
            w.writeheader()
            w.writerows(cells)
        print(f"cells: {args.cells}")
    if args.figure is not None:
        figure(cells, args.figure)
        print(f"figure: {args.figure}")


if __name__ == "__main__":
    main()
