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
from typing import Optional, Tuple

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

    from numerics.threads import map_over_threads

    L, r, t, _ = shape
    dim = L * (r + t)
    engines = [qmc.Sobol(dim, scramble=True, seed=np.random.default_rng(c))
               for c in np.random.SeedSequence(seed).spawn(scrambles)]
    z = np.empty((scrambles, 2**log2_points, dim))

    def draw(j):
        u = engines[j].random_base2(log2_points)
        np.clip(u, 1e-300, 1.0 - 2.0**-53, out=u)
        ndtri(u, out=z[j])

    # scrambling by scrambling into one array, side by side in the kernels' threads (the quantile
    # function holds no Python lock): the same numbers, in a third of the time of one stacked pass
    # on the 2-core machine (2^21 x 8 points in 6 dimensions, the test error's nodes at --refine 3:
    # 7.4 -> 2.3 s), whose 800 MB temporaries were each mapped afresh
    map_over_threads(draw, list(range(scrambles)))
    z = z.reshape(-1, L, r + t)
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


def preactivation_root(ov: MatrixOverlaps, rho: float) -> np.ndarray:
    """:func:`schur_root` at ``ov``, where ``V`` is positive definite (else :class:`OutsideDomain`): the
    map of :func:`preactivations`, for callers that take the nodes in several calls."""
    if not np.all(np.linalg.eigvalsh(ov.V) > 0):
        raise OutsideDomain(f"V is not positive definite (eigenvalues {np.linalg.eigvalsh(ov.V)})")
    return schur_root(ov, rho)


def preactivations(nodes: GaussianNodes, ov: MatrixOverlaps, rho: float, positional_mean: np.ndarray,
                   rows=slice(None), root: Optional[np.ndarray] = None) -> Tuple[np.ndarray, np.ndarray, np.ndarray]:
    """``(zeta, hs, w)`` at the nodes ``rows``, packed (``(n, L r)``, ``(n, L t)``, ``(n, L r)``);
    ``positional_mean`` is ``P m`` packed like ``w``; ``root``: :func:`preactivation_root` at ``ov``,
    where the caller has it. A node's numbers are the same whichever rows are taken with it (so the
    nodes may be taken in blocks)."""
    root = preactivation_root(ov, rho) if root is None else root
    rows = _as_slice(rows)
    y, xi = nodes.y[rows], nodes.xi[rows]
    n, L, t = y.shape
    # one product of the token rows (n L of them) with each small matrix: as a stack of n
    # products of 1 x t by t x r (numpy's matmul of a stack) it cost 3 times as much, with the same numbers
    hs = np.sqrt(rho) * y.reshape(n * L, t)
    zeta = hs @ (ov.theta.T / rho)
    zeta += xi.reshape(n * L, -1) @ root
    zeta = zeta.reshape(n, -1)
    return zeta, hs.reshape(n, -1), zeta + positional_mean[None, :]


def _as_slice(rows):
    """``rows`` as a slice where it is an increasing run of consecutive nodes (one scrambling), so
    that the nodes are taken as a view and not copied."""
    if isinstance(rows, slice):
        return rows
    rows = np.asarray(rows)
    if rows.ndim == 1 and rows.size and rows[-1] - rows[0] == rows.size - 1 and np.all(np.diff(rows) == 1):
        return slice(int(rows[0]), int(rows[-1]) + 1)
    return rows
