"""Two variance reductions of the plain QMC channel tried at one point, against the plain rule on the
same prox minima (a study; neither is used by the integrator).

* a polynomial control variate: per scrambling, the moments regressed on the products of
  normalised Hermite polynomials of the ``L (r + t)`` normals up to total degree ``p`` (their
  expectations are zero), the estimate being the intercept: a reweighting of the nodes that makes
  the rule exact on those polynomials;
* importance sampling by a wider normal: the nodes scaled by ``s``, each weighted by the ratio of
  the densities (the weighted integrand decays at the edges of the cube).

The point: the draft fixed point of ``--case`` at alpha = 2. Printed: the largest stated relative
error (one standard error over 8 scramblings) of the conjugates, and the largest change from the
plain estimate in units of the plain standard error.

Run: python studies/qmc_variance_reduction.py [--case 311s] [--log2-points 13] [--degrees 2,3,4] [--scales 1.25,1.5]
"""
import argparse
import dataclasses
import itertools
import time
from math import factorial

import numpy as np
from numpy.polynomial.hermite_e import hermevander

from derivations import ModelSpec
from numerics.api import solve
from numerics.model.general import bind_general
from numerics.prox.matrix import GlobalProx
from numerics.channel.qmc.channel import QMCChannel
from numerics.channel.qmc.nodes import preactivations
from numerics.channel.qmc.rule import QMCRule
from numerics.fixed_points.subspaces import branch_subspace

CASES = {"221s": (dict(rank=2), "semantic"), "221m": (dict(rank=2), "mixed"), "311s": (dict(tokens=3), "semantic"),
         "211s": (dict(), "semantic")}


def moments_at_nodes(channel, ov):
    """The folded moments at the channel's nodes, after one estimate (which solves the prox)."""
    model = channel.model
    zeta, hs, _ = preactivations(channel.nodes, ov, channel.rho, model.positional_mean(ov.m))
    moments = model.channel_moments(channel.prox.best, zeta, hs, ov.m, ov.V)
    moments[:, channel.odd] = 0.0
    return moments


def relative_errors(channel, ov, per_scramble):
    """The conjugates of the pooled averages and the largest relative standard error."""
    R = len(per_scramble)
    forms = channel._reported(channel._conjugates(2.0, np.vstack([per_scramble.mean(0)[None], per_scramble]), ov))
    c = np.concatenate([v.reshape(R + 1, -1) for v in forms.values()], axis=1)
    se = c[1:].std(0, ddof=1) / np.sqrt(R)
    nonzero = np.abs(c[0]) > 1e-12
    return c[0], se, float(np.max(se[nonzero] / np.abs(c[0][nonzero])))


def hermite_weights(x, degree):
    """Node weights whose sum of ``f`` is the intercept of the regression of ``f`` on the Hermite
    products of total degree ``<= degree``."""
    n, d = x.shape
    one = hermevander(x, degree) / np.sqrt([factorial(k) for k in range(degree + 1)])
    index = [a for a in itertools.product(range(degree + 1), repeat=d) if sum(a) <= degree]
    X = np.stack([np.prod(one[:, np.arange(d), a], axis=1) for a in index], axis=1)
    Q, Rm = np.linalg.qr(X)
    e0 = np.zeros(len(index))
    e0[0] = 1.0
    return Q @ np.linalg.solve(Rm.T, e0)


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--case", default="311s", choices=sorted(CASES))
    ap.add_argument("--log2-points", type=int, default=13)
    ap.add_argument("--degrees", default="2,3,4")
    ap.add_argument("--scales", default="1.25,1.5")
    args = ap.parse_args()
    kw, branch = CASES[args.case]
    spec = ModelSpec(**kw)
    ov = solve(spec, 2.0, branch, "draft", integrator="qmc").overlaps
    model, subspace = bind_general(spec), branch_subspace(branch, spec.shape)
    rule = QMCRule(log2_points=args.log2_points)
    R, N = rule.scrambles, rule.points
    t0 = time.perf_counter()
    channel = QMCChannel(model, rule, subspace)
    channel.estimate(ov, 2.0)
    moments = moments_at_nodes(channel, ov)
    plain, plain_se, plain_rel = relative_errors(channel, ov, moments.reshape(R, N, -1).mean(1))
    nonzero = np.abs(plain) > 1e-12
    print(f"{args.case} 2^{args.log2_points} x {R}")
    print(f"{'estimator':<36} {'max rel err':>11} {'max |d|/err(plain)':>18} {'time/s':>7}")
    print(f"{'plain':<36} {plain_rel:11.2e} {0.0:18.2f} {time.perf_counter() - t0:7.1f}")
    x = np.concatenate([channel.nodes.y.reshape(channel.nodes.size, -1),
                        channel.nodes.xi.reshape(channel.nodes.size, -1)], axis=1)
    for degree in map(int, args.degrees.split(",")):
        t0 = time.perf_counter()
        per = np.array([hermite_weights(x[j * N:(j + 1) * N], degree) @ moments[j * N:(j + 1) * N] for j in range(R)])
        value, _, rel = relative_errors(channel, ov, per)
        shift = np.max(np.abs(value - plain)[nonzero] / plain_se[nonzero])
        print(f"{'Hermite control variate, degree ' + str(degree):<36} {rel:11.2e} {shift:18.2f} "
              f"{time.perf_counter() - t0:7.1f}", flush=True)
    for s in map(float, args.scales.split(",")):
        t0 = time.perf_counter()
        scaled = QMCChannel(model, rule, subspace)
        nodes = scaled.nodes
        z = s * x
        weights = np.exp(z.shape[1] * np.log(s) - 0.5 * (1 - 1 / s**2) * np.sum(z**2, axis=1))
        scaled.nodes = dataclasses.replace(nodes, y=s * nodes.y, xi=s * nodes.xi)
        scaled.prox = GlobalProx(model, nodes.size, rule.n_ellipsoid, rule.first_ellipsoid, rule.prox_tol)
        scaled.estimate(ov, 2.0)
        m = moments_at_nodes(scaled, ov) * weights[:, None]
        value, _, rel = relative_errors(scaled, ov, m.reshape(R, N, -1).mean(1))
        shift = np.max(np.abs(value - plain)[nonzero] / plain_se[nonzero])
        print(f"{'wider normal, scale ' + str(s):<36} {rel:11.2e} {shift:18.2f} {time.perf_counter() - t0:7.1f}",
              flush=True)


if __name__ == "__main__":
    main()
