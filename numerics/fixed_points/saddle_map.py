"""The one fixed-point map of the saddle-point equations, for every integrator (docs/numerics.md).

``x -> F(x)`` over the free components ``x`` of a branch: the overlaps at ``x`` (the imposed
components held at their values), the channel half-step ``update_hat_overlaps`` (the conjugates,
from an integrator), the prior half-step ``update_overlaps`` (the overlaps from the conjugates), and
the free components of the image. The solver (:mod:`numerics.solver.iteration`) sees only this map.

What an integrator contributes is its pair of half-steps and its packing of the overlaps:
:func:`numerics.fixed_points.lines.line_map` (the line quadrature, the four scalars
``q, m, V, theta``) and :func:`numerics.fixed_points.qmc.qmc_map` (quasi-Monte Carlo, the packed
matrix overlaps) build a :class:`SaddlePointMap` from theirs.
"""
from __future__ import annotations

from typing import Callable, Optional

import numpy as np


class SaddlePointMap:
    """``x -> F(x)`` over the free components; remembers the channel side of its last evaluation.

    ``overlaps_of(x_full)``: the overlaps at a full vector of components (raising one of
    :data:`numerics.solver.iteration.OUTSIDE_DOMAIN` outside the map's domain, which the solver
    answers by shortening its step); ``update_hat_overlaps(overlaps)``: the channel half-step;
    ``update_overlaps(side)``: the prior half-step's overlaps from a channel side; ``pack``: overlaps
    to the full vector. ``free``: the indices (or mask) of the free components in the full vector,
    ``template``: the full vector's imposed values; ``label``: the branch, for messages.

    ``deterministic``: the channel half-step is a function of the overlaps alone (the line
    quadrature's; a QMC prox starts from its nodes' last minimisers). The map then answers its first
    point again from memory: each further attempt of a solve, and its root finder, start there, and
    where every attempt fails (a branch lost, near its end) that is one evaluation fewer per attempt
    after the first."""

    def __init__(self, alpha: float, free, template: np.ndarray, overlaps_of: Callable, pack: Callable,
                 update_hat_overlaps: Callable, update_overlaps: Callable, label: str = "",
                 deterministic: bool = False):
        self.alpha, self.free, self.template, self.label = alpha, free, np.asarray(template, dtype=float), label
        self._overlaps_of, self._pack = overlaps_of, pack
        self._update_hat_overlaps, self._update_overlaps = update_hat_overlaps, update_overlaps
        self.evaluations = 0
        self.last: Optional[tuple] = None  # (x_free, channel side) of the last evaluation
        self.deterministic = deterministic
        self._first: Optional[tuple] = None  # the same of the first, where deterministic

    def full(self, x_free) -> np.ndarray:
        """The full vector of components at ``x_free``."""
        x = self.template.copy()
        x[self.free] = x_free
        return x

    def overlaps(self, x_free):
        """The overlaps at ``x_free`` (the integrator's type; domain checked)."""
        return self._overlaps_of(self.full(x_free))

    def channel_side(self, overlaps):
        """The channel half-step at ``overlaps``, not counted as an evaluation of the map."""
        return self._update_hat_overlaps(overlaps)

    def estimate(self, x_free):
        """The channel half-step at ``x_free``, counted as an evaluation of the map."""
        side = self._update_hat_overlaps(self.overlaps(x_free))
        self.evaluations += 1
        return side

    def side_at(self, x_free):
        """The channel side at ``x_free``: the last evaluation's where it was there, else a new
        (counted) one."""
        if self.last is not None and np.array_equal(self.last[0], x_free):
            return self.last[1]
        return self.estimate(x_free)

    def image(self, side):
        """The overlaps of the prior half-step from the channel side ``side``."""
        return self._update_overlaps(side)

    def __call__(self, x_free) -> np.ndarray:
        x = np.array(x_free, dtype=float)
        if self._first is not None and np.array_equal(self._first[0], x):
            side = self._first[1]
        else:
            side = self.estimate(x)
            if self.deterministic and self._first is None:
                self._first = (x, side)
        self.last = (x, side)
        return self._pack(self.image(side))[self.free]
