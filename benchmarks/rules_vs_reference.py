"""Fast and high mode against reference fixed points, field by field (docs/numerics.md, section 8).

For the six fixed points of ``accuracy_targets.py`` (default model, both branches,
alpha in {1, 1.5, 2}) it solves the fixed point of a reference rule (112/32/48/56/32 with
the band split of ``ChannelRule.band_split``,
residual tolerance 1e-11, test error with a Gauss-Hermite rule of order 48), then each
precision mode asked for, and prints per field ``|mode - ref| / |ref|`` next to the mode's
relative error estimate (``!`` where the estimate does not cover the difference), the
largest estimate, and how many entries the estimates cover.

The reference rule is itself a discretisation: the table says how far each mode is from
it, which is the mode's error only where the reference's own error is smaller. At
semantic alpha = 1 the high reporting rule and this reference are each a few 1e-9 from
a 160/40/64/64/64 rule at channel level (docs/studies/band_beyond_cusp_ends.md).

Run: python benchmarks/rules_vs_reference.py [--modes fast high] [--points sem1,pos15]
     [--fast-rules 24/14/12/16/8:28/16/16/20/8] [--cache refs.json]
(reference fixed points 1-2 minutes each, high mode about 1 minute a point; ``--cache``
keeps the references between runs; about 20 minutes in all without it)
"""
import argparse
import dataclasses
import json
import os
import time

import numpy as np

from accuracy_targets import STARTS

from derivations import ModelSpec
from numerics.fixed_points import lines as fpm
from numerics.overlaps import ALL_NAMES
from numerics.precision import PRECISIONS
from numerics.channel.lines import ChannelRule
from numerics.model.bound import bind
from numerics.model.saddle_point import free_energy, test_error

FIELDS = ("q", "m", "V", "theta", "qhat", "mhat", "Vhat", "thetahat", "test_error", "train_loss")
NAMES = {("semantic", 1.0): "sem1", ("semantic", 1.5): "sem15", ("semantic", 2.0): "sem2",
         ("positional", 1.0): "pos1", ("positional", 1.5): "pos15", ("positional", 2.0): "pos2"}


def parse_rule(text: str, base: ChannelRule) -> ChannelRule:
    n_eta, n_r, n_u, n_t, n_near = (int(x) for x in text.split("/"))
    return dataclasses.replace(base, n_eta=n_eta, n_r=n_r, n_u=n_u, n_t=n_t, n_near=n_near)


def reference_point(model, branch, alpha, start, rule):
    ref = fpm.solve_with_rule(model, alpha, branch, rule, start, tol=1e-11)
    if not ref.converged:
        raise RuntimeError(f"reference fixed point {branch} alpha={alpha} did not converge ({ref.residual8:.1e})")
    values = dict(zip(ALL_NAMES, np.concatenate([ref.overlaps.as_array(), ref.side.hats.as_array()])))
    values["test_error"] = test_error(model, ref.overlaps, 48)
    values["train_loss"] = free_energy(model, ref.overlaps, ref.side.hats, alpha, ref.side.mean_envelope)
    return {k: float(v) for k, v in values.items()}, ref.residual8


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--modes", nargs="+", default=["fast", "high"])
    ap.add_argument("--points", default=",".join(NAMES.values()))
    ap.add_argument("--fast-rules", metavar="COARSE:FINE", help="replace the fast rules (n_eta/n_r/n_u/n_t/n_near)")
    ap.add_argument("--high-rules", metavar="COARSE:FINE", help="replace the high rules")
    ap.add_argument("--reference", default="112/32/48/56/32")
    ap.add_argument("--cache", help="JSON file keeping the reference fixed points between runs")
    args = ap.parse_args()
    for mode, rules in (("fast", args.fast_rules), ("high", args.high_rules)):
        if rules:
            prec = PRECISIONS[mode]
            coarse, fine = rules.split(":")
            PRECISIONS[mode] = dataclasses.replace(prec, rule=parse_rule(coarse, prec.rule),
                                                       check_rule=parse_rule(fine, prec.check_rule))
    for mode in args.modes:
        p = PRECISIONS[mode]
        print(f"{mode}: coarse {p.rule}\n{' ' * len(mode)}  fine {p.check_rule}")
    spec = ModelSpec()
    model = bind(spec)
    reference_rule = parse_rule(args.reference, ChannelRule(band_split=True))
    cache = json.load(open(args.cache)) if args.cache and os.path.exists(args.cache) else {}
    wanted = args.points.split(",")
    covered = {m: [0, 0] for m in args.modes}
    for (branch, alpha), start in STARTS.items():
        name = NAMES[(branch, alpha)]
        if name not in wanted:
            continue
        solved = {}
        for mode in args.modes:
            t = time.perf_counter()
            solved[mode] = fpm.solve_branch(spec, alpha, branch, mode, start=start, model=model)
            solved[mode].diagnostics["seconds"] = time.perf_counter() - t
        key = f"{name} {args.reference}"
        if key not in cache:
            t = time.perf_counter()
            values, residual = reference_point(model, branch, alpha, solved[args.modes[-1]].overlaps, reference_rule)
            cache[key] = values
            print(f"{name}: reference {args.reference} solved in {time.perf_counter() - t:.0f} s, residual {residual:.1e}")
            if args.cache:
                json.dump(cache, open(args.cache, "w"), indent=1)
        ref = cache[key]
        for mode, fp in solved.items():
            cells, worst_estimate, worst_diff = [], 0.0, 0.0
            for field in FIELDS:
                v = ref[field]
                if abs(v) < 1e-10:
                    continue  # zero by symmetry on this branch
                diff = abs(fp.values[field] - v) / abs(v)
                estimate = fp.error[field] / abs(fp.values[field])
                ok = diff <= estimate
                covered[mode][0] += ok
                covered[mode][1] += 1
                worst_estimate, worst_diff = max(worst_estimate, estimate), max(worst_diff, diff)
                cells.append(f"{field} {diff:.1e}/{estimate:.1e}{'' if ok else '!'}")
            print(f"{name} {mode:4s} ({fp.diagnostics['seconds']:.0f} s, converged {fp.converged}) largest |diff| "
                  f"{worst_diff:.1e}, largest estimate {worst_estimate:.1e}\n    " + "  ".join(cells), flush=True)
    for mode, (ok, n) in covered.items():
        print(f"{mode}: the estimate covers |{mode} - reference| in {ok} of {n} entries")


if __name__ == "__main__":
    main()
