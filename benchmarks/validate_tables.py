"""The tables of docs/validation.md, section "The general model", from ``attnphase validate`` output
folders, printed as Markdown:

    python benchmarks/validate_tables.py general OUT
    python benchmarks/validate_tables.py rank2-appendix --runs RUNS [RUNS ...] --theory CSV --figure FILE.png

``python benchmarks/validate_tables.py SUB --help`` describes each.
"""
from __future__ import annotations

import argparse
import collections
import glob
import json
import math
import os
import sys

import numpy as np

from derivations.spec import ModelSpec
from tidyio import read_checked_json, read_rows
from validation.figures import plot_column_overlaps
from validation.statistics import final_loss_fall, result_spec, run_branch


# --------------------------------------------------------------------------- general

GENERAL_DOC = """Every table of one ``attnphase validate`` output folder of the general model.

Prints, as Markdown: how flat each point's training loss was at the end (the largest over its runs of the
relative fall of ``R/d`` over the last 10% of the steps, and of ``|dR/dQ|/sqrt(d)`` at the end); every row
of ``validate.csv`` (alpha, start, branch reached, runs, quantity, simulation mean +- sem, theory +- its
stated error, z); and, from ``validate.json``, the branches the runs reached against the theory's global
minimum at each alpha.

Run: python benchmarks/validate_tables.py general OUT
"""


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


def cmd_general(argv=None) -> int:
    p = argparse.ArgumentParser(prog="validate_tables.py general", description=GENERAL_DOC,
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("out", help="an attnphase validate output folder")
    args = p.parse_args(argv)
    for part in (flatness, rows, global_minimum):
        part(args.out)
        print()
    return 0


# --------------------------------------------------------------------------- rank2-appendix

RANK2_APPENDIX_DOC = """The paper's appendix experiment on a rank-2 student: gradient descent from random starts against the
theory's branches (docs/validation.md, section "The general model").

A rank-2 student, a rank-1 teacher, two tokens, omega = 0.3, random starts at each alpha, several seeds.
The runs are read from the run folders of ``attnphase validate --rank 2 --omega 0.3 --inits random
--alphas ... --steps N --sim-only --out RUNS`` (every cached random-start point of the rank-2 model in
``RUNS/runs``, one marker per number of steps); the theory is a CSV of ``attnphase curve --rank 2 --omega 0.3
--alphas ... --branches positional,mixed,semantic``. Prints, per alpha and number of steps, the branch each
run reached (``validation.statistics.run_branch``), the theory's global minimum there and the training
losses, as a Markdown table, with how flat each run's training loss was at the end; draws the figure.

Run:
    python benchmarks/validate_tables.py rank2-appendix --runs RUNS [RUNS ...] --theory rank2_fine.csv --figure docs/figures/rank2_appendix.png
"""




def cmd_rank2_appendix(argv=None) -> int:
    p = argparse.ArgumentParser(prog="validate_tables.py rank2-appendix", description=RANK2_APPENDIX_DOC,
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--runs", nargs="+", required=True, help="validate output folders holding runs/")
    p.add_argument("--theory", required=True, help="CSV of attnphase curve for the rank-2 model")
    p.add_argument("--figure", required=True)
    args = p.parse_args(argv)

    spec = ModelSpec(rank=2, omega=0.3)
    found = {}  # the same settings cached in two folders are one point
    for folder in args.runs:
        for path in glob.glob(os.path.join(folder, "runs", "sim_*.json")):
            res = read_checked_json(path)
            if res["init"] == "random" and result_spec(res) == spec:
                found[(res["alpha"], res["steps"], res["seeds"], res["seed"], res["d"])] = res
    results = list(found.values())
    by_steps = collections.defaultdict(list)
    for res in sorted(results, key=lambda r: r["alpha"]):
        by_steps[res["steps"]].append(res)
    theory = [r for r in read_rows(args.theory) if int(float(r["rank"])) == 2]

    print("| alpha | steps | runs reached | theory global minimum | theory training loss per branch | "
          "runs' training loss (mean per branch reached) | largest relative fall of R/d over the last 10% |")
    print("|---|---|---|---|---|---|---|")
    for res in sorted(results, key=lambda r: (r["alpha"], r["steps"])):
        a, d = res["alpha"], res["d"]
        losses = collections.defaultdict(list)
        for run in res["runs"]:
            losses[run_branch(run, spec, d)].append(run["train_loss"])
        at = [r for r in theory if abs(float(r["alpha"]) - a) < 1e-9 and r["converged"] == "True"]
        glob_branch = next((r["branch"] for r in at if r["global_minimum"] == "True"), "none converged")
        th = ", ".join(f"{r['branch']} {float(r['train_loss']):.5f}" for r in sorted(at, key=lambda r: r["branch"]))
        went = ", ".join(f"{b} {len(v)}/{len(res['runs'])}" for b, v in sorted(losses.items()))
        sim = ", ".join(f"{b} {np.mean(v):.5f}" for b, v in sorted(losses.items()))
        print(f"| {a:g} | {res['steps']} | {went} | {glob_branch} | {th or '-'} | {sim} | {max(final_loss_fall(run) for run in res['runs']):.0e} |")
    sets = [(f"gradient descent, {steps} steps", rs) for steps, rs in sorted(by_steps.items())]
    d = results[0]["d"] if results else "?"
    plot_column_overlaps(sets, theory, spec.sigma, args.figure,
                         title=f"rank-2 student, rank-1 teacher, L = 2, omega = 0.3, d = {d}: gradient descent from "
                               "random starts (one point per run) and the theory's branches (thick: global minimum)")
    print(f"wrote {args.figure}")


COMMANDS = {"general": cmd_general, "rank2-appendix": cmd_rank2_appendix}


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("what", choices=COMMANDS)
    ap.add_argument("arguments", nargs=argparse.REMAINDER, help="those of the sub-command (SUB --help)")
    args = ap.parse_args(argv)
    return COMMANDS[args.what](args.arguments) or 0


if __name__ == "__main__":
    sys.exit(main())
