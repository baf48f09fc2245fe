"""Randomised quasi-Monte Carlo nodes for the Gaussian variables of the general model
(docs/theory.md, section 4.2).

Each node is ``L (r + t)`` standard normals: ``y_l`` (``t`` of them) and ``xi_l`` (``r``) for each
token, from a scrambled Sobol sequence (scipy's ``qmc.Sobol``, ``2^m`` points) mapped through the
normal quantile function. ``R`` independent scramblings give ``R`` independent estimates of every
expectation, hence a standard error. The standard normals are drawn once; the overlaps only
enter the map from them to the pre-activations (:func:`preactivations`), so an evaluation of the
saddle-point map at any overlaps uses the same points (the map is deterministic).

The pre-activations, teacher first: ``h*_l = sqrt(rho) y_l``, and
``zeta_l = theta h*_l / rho + S^{1/2} xi_l`` with ``S = q - theta theta^T / rho`` (the Schur
complement: ``x_l = (zeta_l, h*_l)`` then has covariance ``Sigma = [[q, theta], [theta^T, rho]]``);
``w_l = (P m)_l + zeta_l``.
"""
from __future__ import annotations

import dataclasses
from typing import Tuple

import numpy as np
from scipy.special import ndtri

from numerics.matrix_overlaps import MatrixOverlaps


class OutsideDomain(FloatingPointError):
    """The overlaps leave the domain where the Gaussian measure exists: ``Sigma`` is not positive
    semidefinite, or ``V`` not positive definite (the solver shortens a step that lands here)."""


@dataclasses.dataclass(frozen=True)
class GaussianNodes:
    """``R`` scramblings of ``N`` Sobol points: ``y`` (``(R N, L, t)``) and ``xi`` (``(R N, L, r)``),
    scrambling ``j`` in rows ``j N, ..., (j + 1) N - 1``."""

    y: np.ndarray
    xi: np.ndarray
    scrambles: int
    points: int

    @property
    def size(self) -> int:
        return self.scrambles * self.points

    def rows(self, scramble: int) -> np.ndarray:
        return np.arange(scramble * self.points, (scramble + 1) * self.points)


def gaussian_nodes(shape, log2_points: int, scrambles: int, seed: int = 0) -> GaussianNodes:
    """``scrambles`` independent scramblings (LMS and digital shift, seeded from ``seed``) of the
    first ``2^log2_points`` Sobol points in ``L (r + t)`` dimensions, as standard normals. The
    dimensions go token by token, the teacher's ``y_l`` before the student's ``xi_l``."""
    # scipy.stats is half a second of imports: paid where nodes are drawn, not by every importer
    # of this module (the figures' stability predicate, the line quadrature's commands)
    from scipy.stats import qmc

    L, r, t, _ = shape
    dim = L * (r + t)
    children = np.random.SeedSequence(seed).spawn(scrambles)
    u = np.stack([qmc.Sobol(dim, scramble=True, seed=np.random.default_rng(c)).random_base2(log2_points)
                  for c in children]).reshape(-1, L, r + t)
    z = ndtri(np.clip(u, 1e-300, 1.0 - 2.0**-53))
    z.flags.writeable = False
    return GaussianNodes(z[..., :t], z[..., t:], scrambles, 2**log2_points)


def schur_root(ov: MatrixOverlaps, rho: float, tol: float = 1e-12) -> np.ndarray:
    """``S^{1/2}`` (symmetric) for ``S = q - theta theta^T / rho``; raises :class:`OutsideDomain`
    where ``S`` has an eigenvalue below ``-tol`` times its scale (negative ones above are rounding
    and are set to zero)."""
    S = ov.q - ov.theta @ ov.theta.T / rho
    lam, U = np.linalg.eigh(0.5 * (S + S.T))
    scale = max(float(np.max(np.abs(np.diag(ov.q)))), 1e-300)
    if not np.isfinite(lam).all() or lam[0] < -tol * scale:
        raise OutsideDomain(f"q - theta theta^T / rho has the eigenvalue {lam[0]:.3g}: the covariance of "
                            f"(zeta, h*) is not positive semidefinite")
    return (U * np.sqrt(np.maximum(lam, 0.0))) @ U.T


def preactivations(nodes: GaussianNodes, ov: MatrixOverlaps, rho: float, positional_mean: np.ndarray,
                   rows=slice(None)) -> Tuple[np.ndarray, np.ndarray, np.ndarray]:
    """``(zeta, hs, w)`` at the nodes ``rows``, packed (``(n, L r)``, ``(n, L t)``, ``(n, L r)``);
    ``positional_mean`` is ``P m`` packed like ``w``."""
    if not np.all(np.linalg.eigvalsh(ov.V) > 0):
        raise OutsideDomain(f"V is not positive definite (eigenvalues {np.linalg.eigvalsh(ov.V)})")
    root = schur_root(ov, rho)
    y, xi = nodes.y[rows], nodes.xi[rows]
    hs = np.sqrt(rho) * y
    zeta = hs @ (ov.theta.T / rho) + xi @ root
    n = len(y)
    zeta = zeta.reshape(n, -1)
    return zeta, hs.reshape(n, -1), zeta + positional_mean[None, :]
