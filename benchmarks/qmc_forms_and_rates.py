"""The QMC channel's standard errors by conjugate form and number of points (docs/numerics.md,
section "The general model: QMC integrator"): at a fixed point of each (shape, branch, alpha), one
evaluation of the map with ``2^m`` points per scrambling (8 scramblings, so the standard error is
their spread over sqrt(8)), the relative standard error of each conjugate with ``Vhat`` and
``thetahat`` in their ``dl`` and ``f`` forms, the plain Monte Carlo error of the same nodes for
comparison, and the time of a warm (second) evaluation.
Run: python benchmarks/qmc_forms_and_rates.py [--log2 11,13,15]
"""
import argparse
import time

import numpy as np

from derivations import ModelSpec, packing
from numerics.api import solve
from numerics.model.general import bind_general
from numerics.channel.qmc.channel import QMCChannel
from numerics.channel.qmc.nodes import preactivations
from numerics.channel.qmc.rule import QMCRule
from numerics.fixed_points.subspaces import branch_subspace

POINTS = [(dict(), "semantic", 1.0), (dict(), "semantic", 2.0), (dict(), "positional", 2.0),
          (dict(tokens=3), "semantic", 2.0), (dict(rank=2), "semantic", 2.0)]


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--log2", default="11,13,15")
    args = ap.parse_args()
    for kw, branch, alpha in POINTS:
        spec = ModelSpec(**kw)
        model = bind_general(spec)
        fp = solve(spec, alpha, branch, "fast", integrator="qmc")
        subspace = branch_subspace(branch, spec.shape)
        print(f"{spec.shape[:3]} {branch} alpha={alpha}: relative standard errors (Vhat, thetahat in dl | f form)")
        for m in (int(x) for x in args.log2.split(",")):
            row = {}
            for form in ("dl", "f"):
                channel = QMCChannel(model, QMCRule(log2_points=m, scrambles=8, form=form), subspace)
                est = channel.estimate(fp.overlaps, alpha, dense_check=False)
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


if __name__ == "__main__":
    main()
