"""The resolution of the channel quadrature (:class:`ChannelRule`), what it returns
(:class:`ChannelResult`) and the one-dimensional Gauss rules it is built from."""
from __future__ import annotations

import dataclasses
import functools

from numpy.polynomial.hermite_e import hermegauss as _hermegauss
from numpy.polynomial.legendre import leggauss as _leggauss


def _read_only(nodes_weights):
    for a in nodes_weights:
        a.flags.writeable = False
    return nodes_weights


@functools.lru_cache(maxsize=None)
def leggauss(n: int):
    """numpy's Gauss-Legendre rule, computed once per order (every map evaluation asks
    for the same few orders; numpy refines the nodes by Newton's method on each call)."""
    return _read_only(_leggauss(n))


@functools.lru_cache(maxsize=None)
def hermegauss(n: int):
    """numpy's Gauss-Hermite (probabilists') rule, computed once per order."""
    return _read_only(_hermegauss(n))


@dataclasses.dataclass(frozen=True)
class ChannelRule:
    """Resolution of the channel quadrature.

    n_eta: angles of the polar teacher rule; n_r: Gauss-Legendre nodes on each radial
    piece; n_u: Gauss-Hermite nodes across the lines (along the switching line);
    n_t: Gauss-Legendre nodes on each side of a line's split point (the switch, or
    the point nearest ``w = 0``), plus ``n_near`` nodes within ``near`` of it, graded
    like ``s^grading`` towards it; t_max:
    truncation of the lines (Gaussian mass beyond it below 1e-16); use_symmetry: fold
    the teacher rule by the channel's symmetries (:mod:`numerics.fixed_points.symmetry`) and set the
    integrands odd under one of them to their exact value zero. check_global: check every
    node's followed branch against Newton from ``w`` and from the reflected branch (the
    safety net of :func:`~numerics.channel.lines.accumulation.accumulate`, about 60% of an
    evaluation). Off, the map is the
    one the located switches give; the solver uses it only to approach a fixed point,
    which is then always confirmed with the checks on
    (:func:`numerics.fixed_points.lines.solve_with_rule`). check_from_w: the checks start
    Newton from ``w`` as well as from the reflected branch (off, only the reflected
    start: with the switches bracketed, the ``w`` start changed the fast channel
    expectations by at most 7e-8 relative on twelve study points, near the positional
    fold at ``omega = 0.15``, and by 9e-9 elsewhere, and cost a quarter of a checked
    evaluation; docs/studies/switch_location.md). soft_lines: teacher nodes
    without a pair of minima at ``w = 0`` (inside the pitchfork radius) orient their
    lines along the soft direction of the prox objective at ``h = w = 0``, not along a
    fixed axis. Near the pitchfork the integrands change steeply across a line through
    ``w = 0`` normal to that direction (where the switching line appears past the
    pitchfork); lines normal to it cross it at their split point, where the near nodes
    are. Off only to measure what it gains (docs/studies/soft_direction_lines.md).
    band_split: a line without a switch is split where it
    crosses the steep band of the prox (the root of ``prox . d`` within 2 of ``t_c``, by
    Chandrupatla's elementwise root finder, :mod:`numerics.solver.bracketed_roots`) instead of at
    ``t_c``. The band is the switching
    line or its continuation beyond the cusp ends of the switching segment; it is
    curved, so far from ``w = 0`` it leaves ``t_c``. It costs a global prox per line and
    root-finding step: 20-95% of an evaluation for the fast rules, 13-39% for the high
    ones, which alone use it (docs/studies/band_beyond_cusp_ends.md).
    """

    n_eta: int = 24
    n_u: int = 10
    n_t: int = 24
    t_max: float = 8.5
    newton_tol: float = 1e-12
    n_r: int = 12
    grading: float = 3.0
    n_near: int = 6
    near: float = 1.0
    use_symmetry: bool = True
    check_global: bool = True
    check_from_w: bool = True
    soft_lines: bool = True
    band_split: bool = False


@dataclasses.dataclass(frozen=True)
class ChannelResult:
    expectations: dict          # name -> E[integrand], without the factor alpha
    unresolved_weight: float    # quadrature weight of nodes where an unlocated switch was found
    max_gradient_norm: float    # worst prox stationarity over all nodes
    switch_fraction: float      # fraction of lines carrying a located switch
    n_nodes: int
    symmetry_order: float = 1.0  # teacher nodes per folded node, on average (1: no folding)
