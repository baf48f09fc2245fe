"""The stated errors of the default model's fixed points against what they claim (docs/numerics.md,
section 8), each ending on a table of ``|difference| / |reference|`` beside the stated relative error
(``!`` where the estimate does not cover the difference) and a count of the entries covered.

    python benchmarks/accuracy.py targets [fast|high]       # the accuracy target: one JSON line per point
    python benchmarks/accuracy.py fast-vs-high [--fast-coarse-near N] [--high-near COARSE,FINE]
    python benchmarks/accuracy.py reference [--modes fast high] [--points sem1,pos15] [--cache DIR]
        [--fast-rules COARSE:FINE] [--high-rules COARSE:FINE] [--reference 112/32/48/56/32]
    python benchmarks/accuracy.py high-reference sem1|pos15 [--near 10,12 10,32]
    python benchmarks/accuracy.py diagram DIR [--count 12] [--seed 0]

* ``targets``: the relative error estimate of every field at the six points below (both branches,
  alpha in {1, 1.5, 2}), one JSON line per fixed point (about 4-5 s a point in fast mode).
* ``fast-vs-high``: the six points in fast and in high mode, ``|fast - high|`` against the fast
  estimate (about 8 minutes); high mode is not exact either, so where its own estimate is comparable
  to the difference the comparison says little. The near-node options replace the counts of the fast
  coarse rule and of the high rule pair (docs/studies/near_nodes.md).
* ``reference``: each mode against the fixed point of a reference rule (112/32/48/56/32 with the
  band split of ``ChannelRule.band_split``, residual tolerance 1e-11, test error by a Gauss-Hermite
  rule of order 48), 1-2 minutes per reference point (``--cache DIR`` keeps them), about 20 minutes in
  all. The reference is a discretisation too: the table is the mode's error where the reference's own
  is smaller (at semantic alpha = 1 the high reporting rule and this reference are each a few 1e-9 from
  a 160/40/64/64/64 rule at channel level, docs/studies/band_beyond_cusp_ends.md).
* ``high-reference``: high mode with the near-node counts given against the fixed point of the rule
  80/24/40/48/64 at one point (1-2 minutes).
* ``diagram``: ``--count`` converged fast branch points drawn at random from a phase diagram's
  ``theory.csv`` (``attnphase phase-diagram --out DIR``) re-solved in high mode from their overlaps,
  ``|fast - high|`` against the fast estimate plus high's (about 20 s a row).

The rules and the reference fixed points are the line quadrature's own (``numerics.channel.lines``,
``numerics.fixed_points.lines``): ``numerics.api`` has no name for a rule that is not a precision mode.
"""
from __future__ import annotations

import argparse
import dataclasses
import json
import time

import numpy as np

from derivations import ModelSpec
from numerics.api import PRECISIONS, Overlaps, solve

#: warm starts near each accuracy point (any start on the branch converges to the same point)
STARTS = {
    ("semantic", 2.0): Overlaps(q=0.1148, m=0, V=12.67, theta=0.158),
    ("semantic", 1.5): Overlaps(q=0.093, m=0, V=16.0, theta=0.128),
    ("semantic", 1.0): Overlaps(q=0.065, m=0, V=20.5, theta=0.085),
    ("positional", 2.0): Overlaps(q=0.0512, m=0.258, V=11.4, theta=0),
    ("positional", 1.5): Overlaps(q=0.049, m=0.255, V=13.5, theta=0),
    ("positional", 1.0): Overlaps(q=0.044, m=0.248, V=16.4, theta=0),
}
NAMES = {("semantic", 1.0): "sem1", ("semantic", 1.5): "sem15", ("semantic", 2.0): "sem2",
         ("positional", 1.0): "pos1", ("positional", 1.5): "pos15", ("positional", 2.0): "pos2"}
FIELDS = ("q", "m", "V", "theta", "qhat", "mhat", "Vhat", "thetahat", "test_error", "train_loss")
#: the fast fixed points at semantic alpha = 1 and positional alpha = 1.5 (high-reference's starts)
POINTS = {"sem1": ("semantic", 1.0, Overlaps(q=0.0680890, m=0.0, V=21.61982, theta=0.0945858)),
          "pos15": ("positional", 1.5, Overlaps(q=0.0494719, m=0.2547315, V=13.59291, theta=0.0))}


class Coverage:
    """Cells ``field |diff|/estimate`` with ``!`` where the estimate does not cover the difference,
    counted over a run."""

    def __init__(self):
        self.covered = self.total = 0

    def cells(self, values: dict, reference: dict, estimate: dict, fields=FIELDS) -> str:
        out = []
        for field in fields:
            ref = reference[field]
            if abs(ref) <= 1e-10:
                continue  # zero by symmetry on this branch
            diff, est = abs(values[field] - ref) / abs(ref), estimate[field]
            ok = diff <= est
            self.covered += ok
            self.total += 1
            out.append(f"{field} {diff:.1e}/{est:.1e}{'' if ok else '!'}")
        return "  ".join(out)

    def summary(self, what: str) -> str:
        return f"the estimate covers {what} in {self.covered} of {self.total} entries"


def relative_errors(fp) -> dict:
    return {k: fp.error[k] / abs(fp.values[k]) for k in fp.values if abs(fp.values[k]) > 1e-10}


def cmd_targets(args) -> None:
    spec = ModelSpec()
    for (branch, alpha), start in STARTS.items():
        t0 = time.perf_counter()
        fp = solve(spec, alpha, branch, args.precision, start=start)
        rel = relative_errors(fp)
        worst = max(rel, key=rel.get)
        print(json.dumps(dict(branch=branch, alpha=alpha, precision=args.precision, converged=fp.converged,
                              residual=fp.residual, worst=worst, worst_rel=rel[worst], values=fp.values,
                              rel={k: float(f"{x:.2g}") for k, x in rel.items()},
                              wall=time.perf_counter() - t0)), flush=True)


def _with_near_nodes(fast_coarse_near, high_near) -> None:
    fast, high = PRECISIONS["fast"], PRECISIONS["high"]
    if fast_coarse_near is not None:
        PRECISIONS["fast"] = dataclasses.replace(fast, rule=dataclasses.replace(fast.rule, n_near=fast_coarse_near))
    if high_near is not None:
        coarse, fine = (int(x) for x in high_near.split(","))
        PRECISIONS["high"] = dataclasses.replace(high, rule=dataclasses.replace(high.rule, n_near=coarse),
                                                 check_rule=dataclasses.replace(high.check_rule, n_near=fine))
    print(f"fast rules: {PRECISIONS['fast'].rule} / {PRECISIONS['fast'].check_rule}")
    print(f"high rules: {PRECISIONS['high'].rule} / {PRECISIONS['high'].check_rule}", flush=True)


def cmd_fast_vs_high(args) -> None:
    _with_near_nodes(args.fast_coarse_near, args.high_near)
    spec, coverage = ModelSpec(), Coverage()
    for (branch, alpha), start in STARTS.items():
        t0 = time.perf_counter()
        fast = solve(spec, alpha, branch, "fast", start=start)
        high = solve(spec, alpha, branch, "high", start=fast.overlaps)
        high_worst = max(relative_errors(high).values())
        print(f"{branch} alpha={alpha}: converged fast={fast.converged} high={high.converged}, "
              f"high's largest estimate {high_worst:.1e}, {time.perf_counter() - t0:.0f} s")
        print("    |fast - high|/high vs fast estimate: "
              + coverage.cells(fast.values, high.values, relative_errors(fast)), flush=True)
    print(coverage.summary("|fast - high|"))


def _parse_rule(text: str, base):
    n_eta, n_r, n_u, n_t, n_near = (int(x) for x in text.split("/"))
    return dataclasses.replace(base, n_eta=n_eta, n_r=n_r, n_u=n_u, n_t=n_t, n_near=n_near)


def _reference_point(model, branch, alpha, start, rule) -> tuple:
    """The fixed point of ``rule`` (tolerance 1e-11) as ``{field: value}``, and its residual."""
    from numerics.fixed_points import lines as fpm
    from numerics.model.saddle_point import free_energy, test_error
    from numerics.overlaps import ALL_NAMES

    ref = fpm.solve_with_rule(model, alpha, branch, rule, start, tol=1e-11)
    if not ref.converged:
        raise RuntimeError(f"reference fixed point {branch} alpha={alpha} did not converge ({ref.residual8:.1e})")
    values = dict(zip(ALL_NAMES, np.concatenate([ref.overlaps.as_array(), ref.side.hats.as_array()])))
    values["test_error"] = test_error(model, ref.overlaps, 48)
    values["train_loss"] = free_energy(model, ref.overlaps, ref.side.hats, alpha, ref.side.mean_envelope)
    return {k: float(v) for k, v in values.items()}, ref.residual8


def cmd_reference(args) -> None:
    from numerics.channel.lines import ChannelRule
    from numerics.model.bound import bind
    from tidyio import KeyedStore

    for mode, rules in (("fast", args.fast_rules), ("high", args.high_rules)):
        if rules:
            prec = PRECISIONS[mode]
            coarse, fine = rules.split(":")
            PRECISIONS[mode] = dataclasses.replace(prec, rule=_parse_rule(coarse, prec.rule),
                                                   check_rule=_parse_rule(fine, prec.check_rule))
    for mode in args.modes:
        p = PRECISIONS[mode]
        print(f"{mode}: coarse {p.rule}\n{' ' * len(mode)}  fine {p.check_rule}")
    spec = ModelSpec()
    model = bind(spec)
    reference_rule = _parse_rule(args.reference, ChannelRule(band_split=True))
    store = KeyedStore(args.cache, prefix="reference_") if args.cache else None
    wanted = args.points.split(",")
    coverage = {m: Coverage() for m in args.modes}
    for (branch, alpha), start in STARTS.items():
        name = NAMES[(branch, alpha)]
        if name not in wanted:
            continue
        solved = {}
        for mode in args.modes:
            t = time.perf_counter()
            solved[mode] = (solve(spec, alpha, branch, mode, start=start), time.perf_counter() - t)

        def compute():
            t = time.perf_counter()
            values, residual = _reference_point(model, branch, alpha, solved[args.modes[-1]][0].overlaps,
                                                reference_rule)
            print(f"{name}: reference {args.reference} solved in {time.perf_counter() - t:.0f} s, "
                  f"residual {residual:.1e}")
            return values

        key = {"point": name, "reference": args.reference}
        ref = store.cached(key, compute) if store is not None else compute()
        for mode, (fp, seconds) in solved.items():
            rel = relative_errors(fp)
            worst_diff = max(abs(fp.values[f] - ref[f]) / abs(ref[f]) for f in FIELDS if abs(ref[f]) > 1e-10)
            cells = coverage[mode].cells(fp.values, ref, rel)
            print(f"{name} {mode:4s} ({seconds:.0f} s, converged {fp.converged}) largest |diff| {worst_diff:.1e}, "
                  f"largest estimate {max(rel.values()):.1e}\n    {cells}", flush=True)
    for mode, c in coverage.items():
        print(f"{mode}: {c.summary(f'|{mode} - reference|')}")


def cmd_high_reference(args) -> None:
    from numerics.channel.lines import ChannelRule
    from numerics.fixed_points import lines as fpm
    from numerics.model.bound import bind
    from numerics.overlaps import ALL_NAMES

    spec = ModelSpec()
    model = bind(spec)
    branch, alpha, start = POINTS[args.point]
    high = PRECISIONS["high"]
    solved = {}
    for pair in args.near:
        coarse, fine = (int(x) for x in pair.split(","))
        PRECISIONS["high-variant"] = dataclasses.replace(
            high, rule=dataclasses.replace(high.rule, n_near=coarse),
            check_rule=dataclasses.replace(high.check_rule, n_near=fine))
        t = time.perf_counter()
        solved[pair] = fpm.solve_branch(spec, alpha, branch, "high-variant", start=start, model=model)
        print(f"high {pair}: {time.perf_counter() - t:.0f} s, converged {solved[pair].converged}", flush=True)
    reference = ChannelRule(n_eta=80, n_r=24, n_u=40, n_t=48, n_near=64)
    t = time.perf_counter()
    ref = fpm.solve_with_rule(model, alpha, branch, reference, solved[args.near[-1]].overlaps, tol=1e-11)
    print(f"reference 80/24/40/48/64: {time.perf_counter() - t:.0f} s, converged {ref.converged}, "
          f"residual {ref.residual8:.1e}")
    values = dict(zip(ALL_NAMES, np.concatenate([ref.overlaps.as_array(), ref.side.hats.as_array()])))
    coverage = Coverage()
    for pair, fp in solved.items():
        print(f"high {pair} |high - ref|/ref vs estimate: "
              + coverage.cells(fp.values, values, relative_errors(fp), fields=tuple(values)))
    print(coverage.summary("|high - reference|"))


def cmd_diagram(args) -> None:
    from tidyio import read_rows

    fields = ("q", "m", "V", "theta", "test_error", "train_loss")
    rows = [r for r in read_rows(f"{args.directory}/theory.csv")
            if r["exists"] == "True" and r["converged"] == "True" and r["precision"] == "fast"]
    picked = np.random.default_rng(args.seed).choice(len(rows), size=min(args.count, len(rows)), replace=False)
    coverage, worst = Coverage(), 0.0
    for i in sorted(picked):
        row = rows[i]
        spec, alpha = ModelSpec.from_columns(row), float(row["alpha"])
        start = Overlaps(q=float(row["q"]), m=float(row["m"]), V=float(row["V"]), theta=float(row["theta"]))
        high = solve(spec, alpha, row["branch"], "high", start=start)
        fast = {f: float(row[f]) for f in fields}
        # the fast estimate plus high's own, relative to high
        bound = {f: (float(row[f"{f}_error"]) + high.error[f]) / max(abs(high.values[f]), 1e-300) for f in fields}
        worst = max([worst] + [abs(fast[f] - high.values[f]) / abs(high.values[f]) for f in fields
                               if abs(high.values[f]) > 1e-10])
        print(f"omega={row['omega']} alpha={alpha:.4f} {row['branch']:10s} high converged {high.converged}: "
              + coverage.cells(fast, high.values, bound, fields), flush=True)
    print(f"{coverage.summary('|fast - high| (fast estimate plus high)')}; largest relative difference {worst:.1e}")


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    sub = ap.add_subparsers(dest="what", required=True)
    t = sub.add_parser("targets", help="the relative error estimates at the six accuracy points")
    t.add_argument("precision", nargs="?", default="fast", choices=("fast", "high"))
    f = sub.add_parser("fast-vs-high", help="fast mode against high mode at the six points")
    f.add_argument("--fast-coarse-near", type=int, default=None)
    f.add_argument("--high-near", default=None, metavar="COARSE,FINE")
    r = sub.add_parser("reference", help="the modes against reference fixed points")
    r.add_argument("--modes", nargs="+", default=["fast", "high"])
    r.add_argument("--points", default=",".join(NAMES.values()))
    r.add_argument("--fast-rules", metavar="COARSE:FINE", help="replace the fast rules (n_eta/n_r/n_u/n_t/n_near)")
    r.add_argument("--high-rules", metavar="COARSE:FINE", help="replace the high rules")
    r.add_argument("--reference", default="112/32/48/56/32")
    r.add_argument("--cache", help="folder keeping the reference fixed points between runs")
    h = sub.add_parser("high-reference", help="high mode with other near-node counts against a reference point")
    h.add_argument("point", choices=sorted(POINTS))
    h.add_argument("--near", nargs="+", default=["10,32"], metavar="COARSE,FINE")
    d = sub.add_parser("diagram", help="a phase diagram's fast points against high mode")
    d.add_argument("directory")
    d.add_argument("--count", type=int, default=12)
    d.add_argument("--seed", type=int, default=0)
    args = ap.parse_args(argv)
    {"targets": cmd_targets, "fast-vs-high": cmd_fast_vs_high, "reference": cmd_reference,
     "high-reference": cmd_high_reference, "diagram": cmd_diagram}[args.what](args)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
