"""The QMC channel integrator, plain against pre-integrated along one Gaussian line, side by side in
one run, at the fixed points of the general model's branches at alpha = 2, omega = 0.3.

For each case the point is a draft QMC fixed point (its overlaps; the channel is evaluated there).
Per rule: the time of the first evaluation (full prox search, dense check) and of a second one
(warm starts, as inside a fixed-point solve), the largest stated relative error (one standard
error over the scramblings) of the conjugates not zero by symmetry, the switches of the global
prox met on the lines, the stated relative error of every field not zero by symmetry, and the largest |value - finer rule's| in units of the stated error (the
finer rule: plain, 2^17 x 8 points by default). At (2, 1, 1) the line quadrature's conjugates at the same
point are the reference too.

Run: python benchmarks/bench_qmc_preintegration.py [--cases 221s,221m,221p,311s,211s] [--fine 17]
[--rules plain13,plain15,lines8,lines10]
"""
import argparse
import time

import numpy as np

from derivations import ModelSpec
from numerics.api import solve
from numerics.channel.integrators import LineChannel
from numerics.model.general import bind_general
from numerics.channel.qmc.channel import QMCChannel
from numerics.channel.qmc.rule import QMCRule
from numerics.fixed_points.subspaces import branch_subspace

CASES = {"221s": (dict(rank=2), "semantic"), "221m": (dict(rank=2), "mixed"), "221p": (dict(rank=2), "positional"),
         "311s": (dict(tokens=3), "semantic"), "211s": (dict(), "semantic")}
RULES = {"plain13": ("plain 2^13 x 8", QMCRule(log2_points=13)),
         "plain15": ("plain 2^15 x 8", QMCRule(log2_points=15)),
         "lines8": ("lines 2^8 x 8 (30 per line)", QMCRule(log2_points=8, line_cells=6, line_order=5)),
         "lines10": ("lines 2^10 x 8 (30 per line)", QMCRule(log2_points=10, line_cells=6, line_order=5))}


def evaluate(model, subspace, ov, rule):
    t0 = time.perf_counter()
    channel = QMCChannel(model, rule, subspace)
    channel.estimate(ov, 2.0)
    t1 = time.perf_counter()
    est = channel.estimate(ov, 2.0, dense_check=False)
    return est, t1 - t0, time.perf_counter() - t1


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--cases", default=",".join(CASES))
    ap.add_argument("--fine", type=int, default=17, help="log2 points of the finer plain rule")
    ap.add_argument("--rules", default=",".join(RULES), help=f"a subset of {', '.join(RULES)}")
    args = ap.parse_args()
    print(f"{'case':<6} {'rule':<30} {'first/s':>8} {'warm/s':>7} {'max rel err':>11} {'field':<14} "
          f"{'|d|/err fine':>12} {'|d|/err lines':>13} {'switches':>9}  relative error per field")
    for case in args.cases.split(","):
        kw, branch = CASES[case]
        spec = ModelSpec(**kw)
        ov = solve(spec, 2.0, branch, "draft", integrator="qmc").overlaps
        model, subspace = bind_general(spec), branch_subspace(branch, spec.shape)
        fine, t_fine, w_fine = evaluate(model, subspace, ov, QMCRule(log2_points=args.fine))
        names = fine.hats.component_names(spec.shape)
        f_val, f_se = fine.hats.pack(), fine.standard_error.pack()
        lines = None
        if spec.is_two_token_rank_one:
            lines = LineChannel(spec).estimate(ov, 2.0).hats.pack()
        rows = [(f"plain 2^{args.fine} x 8 (finer)", fine, t_fine, w_fine)]
        rows += [(RULES[key][0],) + evaluate(model, subspace, ov, RULES[key][1]) for key in args.rules.split(",")]
        for label, est, first, warm in rows:
            v, se = est.hats.pack(), est.standard_error.pack()
            nonzero = np.abs(f_val) > 1e-12
            rel = np.where(nonzero, se / np.where(nonzero, np.abs(v), 1.0), 0.0)
            worst = int(np.argmax(rel))
            to_fine = np.max(np.abs(v - f_val)[nonzero] / se[nonzero]) if est is not fine else float("nan")
            to_lines = np.max(np.abs(v - lines)[nonzero] / se[nonzero]) if lines is not None else float("nan")
            switches = est.diagnostics.get("switches", "-")
            print(f"{case:<6} {label:<30} {first:8.1f} {warm:7.1f} {rel[worst]:11.2e} {names[worst]:<14} "
                  f"{to_fine:12.2f} {to_lines:13.2f} {switches!s:>9}  "
                  + " ".join(f"{n}={e:.1e}" for n, e, z in zip(names, rel, nonzero) if z), flush=True)


if __name__ == "__main__":
    main()
