"""The resolution of the quasi-Monte Carlo channel integrator (:class:`QMCRule`)."""
from __future__ import annotations

import dataclasses


@dataclasses.dataclass(frozen=True)
class QMCRule:
    """Resolution of :class:`~numerics.channel.qmc.channel.QMCChannel`.

    log2_points: ``N = 2^log2_points`` Sobol points per scrambling; scrambles: ``R``, the number of
    independent scramblings (each expectation's standard error is their spread over ``sqrt(R)``);
    n_ellipsoid: random starts per node inside the ellipsoid bound of the prox in a full search,
    besides the warm starts and ``w`` (``first_ellipsoid`` at the first evaluation, which has no
    warm starts); search_move: a full search is made where the overlaps have moved by more than
    this (relative, largest component) since the last one on the same nodes; in between only the
    warm starts are searched, and their sign flips only while the last search of them changed a
    minimum (:meth:`~numerics.prox.matrix.GlobalProx.flips_needed`);
    dense_nodes, dense_starts: size of the subsample of the dense check and its random starts per
    node; dense_every: evaluations of one set of scramblings between its dense checks (the first
    evaluation of a scrambling and the reported one are always checked); test_log2_points, test_scrambles: the test error's own rule (its
    integrand is smooth and needs no prox); seed: of the scramblings; prox_tol: the prox's
    gradient tolerance; form: which first-derivative forms of ``Vhat`` and ``thetahat``
    (docs/theory.md, section 4.6) are reported, ``"dl"`` (``thetahat`` through ``g = dl/dh*``, and
    ``Vhat`` with it) or ``"f"`` (through ``f`` and ``Sigma^{-1}``); the other is a diagnostic.
    line_cells: with ``0``, plain quasi-Monte Carlo over every coordinate; otherwise the coordinate
    ``line_dim`` (of the ``L (r + t)`` normals, token by token, teacher first) is integrated per
    node along its line (:mod:`~numerics.channel.qmc.preintegration`) by ``line_cells`` Gauss-Legendre cells
    of ``line_order`` points on ``[-line_span, line_span]``, and ``2^log2_points`` counts lines.
    """

    log2_points: int = 13
    scrambles: int = 8
    n_ellipsoid: int = 2
    first_ellipsoid: int = 2
    dense_nodes: int = 2048
    dense_starts: int = 48
    dense_every: int = 16
    test_log2_points: int = 14
    test_scrambles: int = 8
    seed: int = 0
    prox_tol: float = 1e-11
    form: str = "dl"
    search_move: float = 5e-2
    line_cells: int = 0
    line_order: int = 5
    line_span: float = 6.0
    line_dim: int = -1

    @property
    def points(self) -> int:
        return 2**self.log2_points
