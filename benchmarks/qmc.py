"""The quasi-Monte Carlo channel integrator of the general model (docs/numerics.md, section "The
general model: QMC integrator"; docs/studies/qmc_integrator.md), each check ending on its table.

    python benchmarks/qmc.py vs-lines [--precision fast|high] [--alphas 1,1.5,2] [--branches semantic,positional]
        [--log2-points N]
    python benchmarks/qmc.py rules [--cases 221s,221m,221p,311s,211s] [--fine 17] [--rules plain13,plain15,lines8,lines10]
    python benchmarks/qmc.py errors [--log2 11,13,15]
    python benchmarks/qmc.py conditioning [--precision draft] [--alphas 0.5,1,2,4]

* ``vs-lines``: on the two-token rank-one model, at semantic and positional alpha = 1, 1.5, 2, the
  line quadrature's fast fixed point beside the QMC one (``--precision``; ``--log2-points N``: that
  precision's rule with ``2^N`` points per scrambling): every field not zero by symmetry with both
  estimates and errors, ``|QMC - lines|`` in units of the QMC stated error, the QMC relative error,
  and the times side by side. Reference: the line quadrature, whose errors are 1e-6 relative or less.
* ``rules``: the plain QMC rule against the rule pre-integrated along one Gaussian line, at the draft
  fixed points of the general model's branches (alpha = 2): per rule the time of a first evaluation
  (full prox search, dense check) and of a warm second one, the largest stated relative error of the
  conjugates not zero by symmetry, the prox switches met on the lines, and the largest ``|value -
  finer rule's|`` in units of the stated error (the finer rule: plain, ``2^fine x 8`` points); at
  ``(2, 1, 1)`` the line quadrature's conjugates at the same point are a reference too.
* ``errors``: at fast fixed points of several models, the relative standard error of each conjugate
  with ``2^m`` points per scrambling (8 scramblings), ``Vhat`` and ``thetahat`` in their ``dl`` and
  ``f`` forms, beside the plain Monte Carlo error of the same nodes, and the time of a warm
  evaluation.
* ``conditioning``: how close the fixed points come to a singular covariance (docs/theory.md,
  section 4.11): the smallest eigenvalue of ``q`` over its largest, and of the Schur complement
  ``q - theta theta^T / rho`` (which ``Sigma^{-1}`` in the Stein forms inverts) over ``q``'s largest,
  per model, branch and alpha.

``rules`` and ``errors`` evaluate the channel itself at fixed overlaps (``numerics.channel.qmc``):
``numerics.api`` solves fixed points and has no name for one evaluation of the channel.
"""
from __future__ import annotations

import argparse
import dataclasses
import time

import numpy as np

from derivations import ModelSpec
from numerics.api import branches, solve

FIELDS = ("q", "m", "V", "theta", "qhat", "mhat", "Vhat", "thetahat", "test_error", "train_loss")
CASES = {"221s": (dict(rank=2), "semantic"), "221m": (dict(rank=2), "mixed"), "221p": (dict(rank=2), "positional"),
         "311s": (dict(tokens=3), "semantic"), "211s": (dict(), "semantic")}


def cmd_vs_lines(args) -> None:
    from numerics.channel.qmc.precision import QMC_PRECISIONS

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


def _channel_parts(spec, branch):
    from numerics.fixed_points.subspaces import branch_subspace
    from numerics.model.general import bind_general

    return bind_general(spec), branch_subspace(branch, spec.shape)


def _evaluate(model, subspace, ov, rule):
    """One channel estimate at ``ov`` (alpha = 2) with ``rule``, timed cold and warm."""
    from numerics.channel.qmc.channel import QMCChannel

    t0 = time.perf_counter()
    channel = QMCChannel(model, rule, subspace)
    channel.estimate(ov, 2.0)
    t1 = time.perf_counter()
    est = channel.estimate(ov, 2.0, dense_check=False)
    return est, t1 - t0, time.perf_counter() - t1


def cmd_rules(args) -> None:
    from numerics.channel.integrators import LineChannel
    from numerics.channel.qmc.rule import QMCRule

    rules = {"plain13": ("plain 2^13 x 8", QMCRule(log2_points=13)),
             "plain15": ("plain 2^15 x 8", QMCRule(log2_points=15)),
             "lines8": ("lines 2^8 x 8 (30 per line)", QMCRule(log2_points=8, line_cells=6, line_order=5)),
             "lines10": ("lines 2^10 x 8 (30 per line)", QMCRule(log2_points=10, line_cells=6, line_order=5))}
    print(f"{'case':<6} {'rule':<30} {'first/s':>8} {'warm/s':>7} {'max rel err':>11} {'field':<14} "
          f"{'|d|/err fine':>12} {'|d|/err lines':>13} {'switches':>9}  relative error per field")
    for case in args.cases.split(","):
        kw, branch = CASES[case]
        spec = ModelSpec(**kw)
        ov = solve(spec, 2.0, branch, "draft", integrator="qmc").overlaps
        model, subspace = _channel_parts(spec, branch)
        fine, t_fine, w_fine = _evaluate(model, subspace, ov, QMCRule(log2_points=args.fine))
        names = fine.hats.component_names(spec.shape)
        f_val = fine.hats.pack()
        lines = LineChannel(spec).estimate(ov, 2.0).hats.pack() if case == "211s" else None
        rows = [(f"plain 2^{args.fine} x 8 (finer)", fine, t_fine, w_fine)]
        rows += [(rules[key][0],) + _evaluate(model, subspace, ov, rules[key][1]) for key in args.rules.split(",")]
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


def cmd_errors(args) -> None:
    from derivations import packing
    from numerics.channel.qmc.channel import QMCChannel
    from numerics.channel.qmc.nodes import preactivations
    from numerics.channel.qmc.rule import QMCRule

    points = [(dict(), "semantic", 1.0), (dict(), "semantic", 2.0), (dict(), "positional", 2.0),
              (dict(tokens=3), "semantic", 2.0), (dict(rank=2), "semantic", 2.0)]
    for kw, branch, alpha in points:
        spec = ModelSpec(**kw)
        model, subspace = _channel_parts(spec, branch)
        fp = solve(spec, alpha, branch, "fast", integrator="qmc")
        print(f"{spec.shape[:3]} {branch} alpha={alpha}: relative standard errors (Vhat, thetahat in dl | f form)")
        for m in (int(x) for x in args.log2.split(",")):
            row = {}
            for form in ("dl", "f"):
                channel = QMCChannel(model, QMCRule(log2_points=m, scrambles=8, form=form), subspace)
                channel.estimate(fp.overlaps, alpha, dense_check=False)
                t0 = time.perf_counter()
                est = channel.estimate(fp.overlaps, alpha, dense_check=False)
                elapsed = time.perf_counter() - t0
                value, se = est.hats.as_dict(), est.standard_error.as_dict()
                row[form] = {k: se[k] / abs(v) for k, v in value.items() if v != 0}
            # plain Monte Carlo error of the same nodes (the dl form), for comparison
            zeta, hs, w = preactivations(channel.nodes, fp.overlaps, spec.rho, model.positional_mean(fp.overlaps.m))
            moments = model.channel_moments(channel.prox.best, zeta, hs, fp.overlaps.m, fp.overlaps.V)
            moments[:, channel.odd] = 0.0
            per_node = model.conjugates_from_moments(alpha, moments[:, :-1], fp.overlaps.q, fp.overlaps.theta)
            mc = {}
            for name in ("qhat", "mhat", "Vhat_dl", "thetahat_dl"):
                base = name.split("_")[0]
                rows, cols, sym = packing.dimensions(base, spec.shape)
                for key, (i, j) in zip(packing.names(base, spec.shape), packing.matrix_index(rows, cols, sym)):
                    flat = per_node[name][:, i, j]
                    if key in row["dl"]:
                        mc[key] = flat.std() / np.sqrt(len(flat)) / abs(flat.mean())
            cells = "  ".join(f"{k} {row['dl'][k]:.1e}|{row['f'][k]:.1e} (MC {mc.get(k, float('nan')):.1e})"
                              for k in row["dl"])
            print(f"  N = 2^{m} x 8: {cells}; warm evaluation {elapsed:.2f} s", flush=True)


def cmd_conditioning(args) -> None:
    print(f"{'model':<28} {'branch':<11} {'alpha':>5} {'min eig q / max':>15} {'min eig S / max q':>17} "
          f"{'converged':>9} {'time/s':>7}")
    for kw in (dict(), dict(tokens=3), dict(rank=2), dict(teacher_rank=2)):
        spec = ModelSpec(**kw)
        for branch in branches(spec):
            for alpha in (float(a) for a in args.alphas.split(",")):
                t0 = time.perf_counter()
                try:
                    fp = solve(spec, alpha, branch, args.precision, integrator="qmc")
                except Exception as exc:  # noqa: BLE001  (a branch that does not exist there: say so, go on)
                    print(f"{str(spec.shape):<28} {branch:<11} {alpha:5.2f} {type(exc).__name__}: {exc}")
                    continue
                q, theta = fp.overlaps.q, fp.overlaps.theta
                top = float(np.max(np.linalg.eigvalsh(q)))
                S = q - theta @ theta.T / spec.rho
                print(f"{str(spec.shape):<28} {branch:<11} {alpha:5.2f} {np.min(np.linalg.eigvalsh(q)) / top:15.3g} "
                      f"{np.min(np.linalg.eigvalsh(S)) / top:17.3g} {str(fp.converged):>9} "
                      f"{time.perf_counter() - t0:7.1f}", flush=True)


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    sub = ap.add_subparsers(dest="what", required=True)
    v = sub.add_parser("vs-lines", help="QMC fixed points against the line quadrature's")
    v.add_argument("--precision", default="high")
    v.add_argument("--alphas", default="1,1.5,2")
    v.add_argument("--branches", default="semantic,positional")
    v.add_argument("--log2-points", type=int, help="points per scrambling: 2^N (default the precision's)")
    r = sub.add_parser("rules", help="plain and pre-integrated QMC rules at the general model's fixed points")
    r.add_argument("--cases", default=",".join(CASES))
    r.add_argument("--fine", type=int, default=17, help="log2 points of the finer plain rule")
    r.add_argument("--rules", default="plain13,plain15,lines8,lines10")
    e = sub.add_parser("errors", help="standard errors by conjugate form and number of points")
    e.add_argument("--log2", default="11,13,15")
    c = sub.add_parser("conditioning", help="how close the fixed points come to a singular covariance")
    c.add_argument("--precision", default="draft")
    c.add_argument("--alphas", default="0.5,1,2,4")
    args = ap.parse_args(argv)
    {"vs-lines": cmd_vs_lines, "rules": cmd_rules, "errors": cmd_errors, "conditioning": cmd_conditioning}[args.what](args)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
