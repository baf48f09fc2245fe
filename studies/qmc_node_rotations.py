"""Does the orientation of the QMC nodes matter? The channel's stated errors with the Sobol
coordinates mapped to the model's normals as they are (each token's teacher and student normals
in turn), and through fixed orthogonal rotations of them, in one run.

A rotation of standard normals leaves their Gaussian measure unchanged, so every rule integrates
the same expectations; only the quasi-Monte Carlo error can change (randomised QMC favours
integrands whose variation lies along few, early coordinates). For each case: a draft fixed
point at alpha = 2, omega = 0.3 (its overlaps), then the channel evaluated there on 2^N x 8 points
with seeds 0, 1, 2 for each orientation; printed: the root mean square over the seeds of each
field's stated relative error, the largest four.

Orientations: ``identity`` (the nodes as the integrator uses them), ``tokens`` (the Sobol
coordinates along the mean over tokens and the Helmert differences, per component), ``tokens-cm``
(the same, component by component), ``reversed`` (the coordinates in reverse order), ``random1``,
``random2`` (Haar-random rotations).

Run: python studies/qmc_node_rotations.py [--cases 221m,311s] [--log2-points 15]
"""
import argparse

import numpy as np

import numerics.channel.qmc.channel as channel_module
from derivations import ModelSpec
from numerics.api import solve
from numerics.channel.qmc.nodes import GaussianNodes, gaussian_nodes
from numerics.channel.qmc.rule import QMCRule
from numerics.fixed_points.subspaces import branch_subspace
from numerics.model.general import bind_general

CASES = {"221m": (dict(rank=2), "mixed"), "221s": (dict(rank=2), "semantic"),
         "221p": (dict(rank=2), "positional"), "311s": (dict(tokens=3), "semantic")}


def rotated_nodes(rotation):
    """``gaussian_nodes`` with each node's normals (packed token by token, teacher first) rotated:
    ``z -> z @ rotation``."""
    def make(shape, log2_points, scrambles, seed=0):
        base = gaussian_nodes(shape, log2_points, scrambles, seed)
        if rotation is None:
            return base
        L, r, t, _ = shape
        z = np.concatenate([base.y, base.xi], axis=2).reshape(base.size, -1) @ rotation
        z = z.reshape(base.size, L, r + t)
        return GaussianNodes(z[..., :t], z[..., t:], scrambles, base.points)
    return make


def helmert(L):
    """An orthonormal basis over tokens: the mean first, then the Helmert differences."""
    H = np.zeros((L, L))
    H[0] = 1 / np.sqrt(L)
    for k in range(1, L):
        H[k, :k], H[k, k] = 1.0, -k
        H[k] /= np.linalg.norm(H[k])
    return H


def rotations(shape):
    L, r, t, _ = shape
    c = r + t
    dim = L * c
    H = helmert(L)
    tokens, by_component = np.zeros((dim, dim)), np.zeros((dim, dim))
    for k in range(L):
        for comp in range(c):
            tokens[k * c + comp, comp::c] = H[k]
            by_component[comp * L + k, comp::c] = H[k]
    out = {"identity": None, "tokens": tokens, "tokens-cm": by_component, "reversed": np.eye(dim)[::-1]}
    for s in (1, 2):
        out[f"random{s}"] = np.linalg.qr(np.random.default_rng(s).standard_normal((dim, dim)))[0]
    return out


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--cases", default="221m,311s", help=f"a subset of {', '.join(CASES)}")
    ap.add_argument("--log2-points", type=int, default=15)
    args = ap.parse_args()
    for case in args.cases.split(","):
        kw, branch = CASES[case]
        spec = ModelSpec(omega=0.3, **kw)
        ov = solve(spec, 2.0, branch, "draft", integrator="qmc").overlaps
        model, subspace = bind_general(spec), branch_subspace(branch, spec.shape)
        for name, rotation in rotations(spec.shape).items():
            channel_module.gaussian_nodes = rotated_nodes(rotation)
            rel = []
            for seed in (0, 1, 2):
                est = channel_module.QMCChannel(model, QMCRule(log2_points=args.log2_points, seed=seed),
                                                subspace).estimate(ov, 2.0)
                v, se = est.hats.pack(), est.standard_error.pack()
                nonzero = np.abs(v) > 1e-12
                rel.append(np.where(nonzero, se / np.where(nonzero, np.abs(v), 1.0), 0.0))
            rms = np.sqrt(np.mean(np.square(rel), axis=0))
            names = est.hats.component_names(spec.shape)
            print(f"{case} {name:<10} largest {rms.max():.2e}  "
                  + " ".join(f"{names[i]}={rms[i]:.1e}" for i in np.argsort(-rms)[:4]), flush=True)
        channel_module.gaussian_nodes = gaussian_nodes


if __name__ == "__main__":
    main()
