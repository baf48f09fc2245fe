"""The tables of docs/validation.md, section "The general model", from an ``attnphase validate`` output folder.

Prints, as Markdown: how flat each point's training loss was at the end (the largest over its runs of the
relative fall of ``R/d`` over the last 10% of the steps, and of ``|dR/dQ|/sqrt(d)`` at the end); every row
of ``validate.csv`` (alpha, start, branch reached, runs, quantity, simulation mean +- sem, theory +- its
stated error, z); and, from ``validate.json``, the branches the runs reached against the theory's global
minimum at each alpha.

Run: python benchmarks/general_validate_tables.py OUT
"""
from __future__ import annotations

import glob
import json
import math
import os
import sys

from tidyio import read_checked_json, read_rows
from validation.statistics import final_loss_fall


def _f(x) -> float:
    try:
        return float(x)
    except (TypeError, ValueError):
        return float("nan")


def _num(x: float, digits: int = 4) -> str:
    return f"{x:.{digits}g}" if math.isfinite(x) else "-"


def flatness(out: str) -> None:
    print("| alpha | start | runs | largest fall of R/d over the last 10% of steps (relative) | "
          "largest final gradient norm |")
    print("|---|---|---|---|---|")
    results = [read_checked_json(p) for p in glob.glob(os.path.join(out, "runs", "sim_*.json"))]
    for res in sorted(results, key=lambda r: (r["alpha"], r["init"])):
        falls = [final_loss_fall(run) for run in res["runs"]]
        grads = [run["final_grad_norm"] for run in res["runs"]]
        print(f"| {res['alpha']:g} | {res['init']} | {len(res['runs'])} | {max(falls):.1e} | {max(grads):.1e} |")


def rows(out: str) -> None:
    print("| alpha | start | branch reached | runs | quantity | simulation | theory | z |")
    print("|---|---|---|---|---|---|---|---|")
    for r in read_rows(os.path.join(out, "validate.csv")):
        th, err, z = _f(r["theory"]), _f(r["theory_error"]), _f(r["z"])
        theory = f"{_num(th)} +- {err:.1g}" if math.isfinite(th) else "-"
        sim = f"{_num(_f(r['sim_mean']))} +- {_num(_f(r['sim_sem']), 1)}"
        flag = " **" if math.isfinite(z) and abs(z) > 3 else ""
        print(f"| {_f(r['alpha']):g} | {r['init']} | {r['branch']} | {r['n_seeds']} | {r['quantity']} | {sim} | "
              f"{theory} | {(f'{z:+.1f}' if math.isfinite(z) else '-') + flag} |")


def global_minimum(out: str) -> None:
    with open(os.path.join(out, "validate.json")) as fh:
        summary = json.load(fh)
    print("| alpha | start | runs reached | theory global minimum | theory training loss per branch |")
    print("|---|---|---|---|---|")
    for g in summary.get("global_minimum", []):
        reached = ", ".join(f"{b} {n}/{g['runs']}" for b, n in g["reached"].items())
        losses = ", ".join(f"{b} {v['train_loss']:.5f} +- {v['train_loss_error']:.0e}" if "train_loss" in v
                           else f"{b} absent" for b, v in g["theory_train_loss"].items())
        print(f"| {g['alpha']:g} | {g['init']} | {reached} | {g['theory_global'] or 'none'} | {losses} |")


def main() -> None:
    out = sys.argv[1]
    for part in (flatness, rows, global_minimum):
        part(out)
        print()


if __name__ == "__main__":
    main()
