"""The quasi-Monte Carlo integrator against the line quadrature on the two-token rank-one model
(docs/numerics.md, section "The general model: QMC integrator"), printed as one table.

For each of semantic and positional at alpha = 1, 1.5, 2: the line quadrature's fast fixed point
and the QMC fixed point (``--precision``), every field that is not zero by symmetry (the eight
order parameters, test error, training loss) with both estimates and errors, ``|QMC - lines|`` in
units of the QMC stated error, and the QMC relative error; the times side by side.
Run: python benchmarks/qmc_vs_lines.py [--precision fast|high] [--alphas 1,1.5,2] [--branches semantic,positional]
[--log2-points N]  (``N``: that precision's rule with ``2^N`` points per scrambling)
"""
import argparse
import dataclasses
import time

from derivations import ModelSpec
from numerics.api import solve
from numerics.channel.qmc.precision import QMC_PRECISIONS

FIELDS = ("q", "m", "V", "theta", "qhat", "mhat", "Vhat", "thetahat", "test_error", "train_loss")


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--precision", default="high")
    ap.add_argument("--alphas", default="1,1.5,2")
    ap.add_argument("--branches", default="semantic,positional")
    ap.add_argument("--log2-points", type=int, help="points per scrambling: 2^N (default the precision's)")
    args = ap.parse_args()
    precision = args.precision
    if args.log2_points:
        base = QMC_PRECISIONS[args.precision]
        precision = dataclasses.replace(base, name=f"{base.name} at 2^{args.log2_points} points",
                                        rule=dataclasses.replace(base.rule, log2_points=args.log2_points))
    spec = ModelSpec()
    worst_z, worst_rel = 0.0, 0.0
    print(f"{'branch':<10} {'alpha':>5} {'field':<10} {'lines':>14} {'+-':>8} {'qmc':>14} {'+-':>8} "
          f"{'|d|/err':>8} {'rel err':>8}")
    for branch in args.branches.split(","):
        for alpha in (float(a) for a in args.alphas.split(",")):
            t0 = time.perf_counter()
            lines = solve(spec, alpha, branch, "fast", integrator="lines")
            t_lines = time.perf_counter() - t0
            t0 = time.perf_counter()
            qmc = solve(spec, alpha, branch, precision, integrator="qmc")
            t_qmc = time.perf_counter() - t0
            for field in FIELDS:
                a, b = lines.values[field], qmc.values[field]
                if b == 0 and a == 0:
                    continue
                ea, eb = lines.error[field], qmc.error[field]
                z, rel = abs(a - b) / eb, eb / abs(b)
                worst_z, worst_rel = max(worst_z, z), max(worst_rel, rel)
                print(f"{branch:<10} {alpha:5.2f} {field:<10} {a:14.8g} {ea:8.1e} {b:14.8g} {eb:8.1e} {z:8.2f} {rel:8.1e}")
            print(f"{branch:<10} {alpha:5.2f} time: lines {t_lines:.1f} s, qmc {t_qmc:.1f} s "
                  f"(converged {lines.converged}/{qmc.converged}, qmc residual {qmc.residual:.1e}, "
                  f"dense check {qmc.diagnostics['dense_improved_fraction']})", flush=True)
    print(f"largest |QMC - lines| / QMC error: {worst_z:.2f}; largest QMC relative error: {worst_rel:.2e}")


if __name__ == "__main__":
    main()
