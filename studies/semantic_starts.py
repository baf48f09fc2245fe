"""Where is the semantic fixed point at another sigma? Root finding from a grid of starts.

    python studies/semantic_starts.py --sigma 0.3 --alphas 2,5 [--omega 0.3]

At each alpha, MINPACK's hybrid method (``scipy.optimize.root``) on ``(F(x) - x) / x`` of the
semantic branch (draft rule, global-prox checks off), in the domain coordinates ``log q, log V,
atanh(theta / sqrt(rho q))`` (``numerics.fixed_points.root_fallback.DomainCoordinates``), from 18 starts: ``q`` in
(0.01, 0.05, 0.2), ``V`` in (3, 12, 40), ``theta`` at half and 0.9 of its bound ``sqrt(rho q)``.
Prints one line per start: the residual and the point reached. About 10-20 s per start on 2 idle cores.
"""
from __future__ import annotations

import argparse
import dataclasses
import itertools

import numpy as np
import scipy.optimize

from derivations import ModelSpec
from numerics.model.bound import bind
from numerics.fixed_points.lines import line_map
from numerics.fixed_points.root_fallback import DomainCoordinates
from numerics.precision import PRECISIONS


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--sigma", type=float, default=0.3)
    ap.add_argument("--omega", type=float, default=0.3)
    ap.add_argument("--alphas", default="2,5")
    args = ap.parse_args()
    rho = args.sigma**2
    model = bind(ModelSpec(omega=args.omega, sigma=args.sigma))
    rule = dataclasses.replace(PRECISIONS["draft"].rule, check_global=False)
    for alpha in (float(a) for a in args.alphas.split(",")):
        F = line_map(model, alpha, "semantic", rule)
        coords = DomainCoordinates.of(F, rho)

        def G(z):
            x = coords.from_z(z)
            try:
                return (F(x) - x) / np.abs(x)
            except (FloatingPointError, ValueError):
                return np.full(3, 1e3)

        for q, V, fraction in itertools.product((0.01, 0.05, 0.2), (3.0, 12.0, 40.0), (0.5, 0.9)):
            z0 = coords.to_z(np.array([q, V, fraction * np.sqrt(rho * q)]))
            sol = scipy.optimize.root(G, z0, method="hybr", options=dict(maxfev=60))
            x = coords.from_z(sol.x)
            print(f"alpha={alpha:g} start q={q} V={V} theta/bound={fraction}: residual "
                  f"{np.max(np.abs(G(sol.x))):.1e}, q={x[0]:.4g} V={x[1]:.4g} theta/sigma^2={x[2] / rho:.4g}",
                  flush=True)


if __name__ == "__main__":
    main()
