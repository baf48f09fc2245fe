"""Safeguarded one-dimensional root finding, for functions that cost a fixed-point solve each.

:func:`safeguarded_newton` and :func:`safeguarded_secant` keep a bracket narrowed by the
sign of every value they compute (:class:`SignBracket`); a step that leaves it is
replaced by bisection, and a root that converges onto an end of the range whose sign
was never seen is not a root (:class:`RootFindingError`). The thresholds of
docs/theory.md, sections 3.4-3.5 are found with them (:mod:`numerics.thresholds.deterministic`).
"""
from __future__ import annotations

import logging
from typing import Callable, NamedTuple, Optional

import numpy as np

log = logging.getLogger(__name__)

MAX_STEPS = 60


class RootFindingError(RuntimeError):
    """The iteration did not converge; the message names the root."""


class NoRootInRange(RootFindingError):
    """The function keeps one sign up to an end of the range (or of its domain) whose
    other side was never seen: the root, if any, lies beyond it."""


class UndefinedAt(RuntimeError):
    """Raised by the function: it is not defined at this point (a branch does not exist
    there). Its domain is taken to be an interval around the points where it was
    evaluated, so the root lies on their side and the range is cut there."""


class SignBracket:
    """The interval ``(lo, hi)`` known to hold a root, narrowed by the sign of every solved
    point: ``positive_at_hi`` says on which side of the root the function is positive.
    Only the signs recorded here count (not those of another discretisation of the
    function, whose root may lie elsewhere)."""

    def __init__(self, lo: float, hi: float, positive_at_hi: bool):
        self.lo, self.hi, self.positive_at_hi = lo, hi, positive_at_hi
        self.seen_lo = self.seen_hi = False

    def record(self, alpha: float, value: float) -> None:
        if (value > 0) == self.positive_at_hi:
            self.hi, self.seen_hi = min(self.hi, alpha), True
        else:
            self.lo, self.seen_lo = max(self.lo, alpha), True

    def exclude(self, alpha: float, defined_at: float) -> None:
        """Cut the range at ``alpha``, where the function is not defined, keeping the side
        of ``defined_at``, where it is."""
        # a sign seen beyond the cut no longer bounds the range
        if alpha > defined_at and alpha < self.hi:
            self.hi, self.seen_hi = alpha, False
        elif alpha < defined_at and alpha > self.lo:
            self.lo, self.seen_lo = alpha, False

    def contains(self, alpha: float) -> bool:
        return self.lo < alpha < self.hi or not np.isfinite(self.hi - self.lo)

    @property
    def midpoint(self) -> float:
        return 0.5 * (self.lo + self.hi)


def safeguarded_newton(f: Callable[[float], tuple], a0: float, xtol: float, lo: float, hi: float,
                       positive_at_hi: bool, name: str = "root", one_sign: str = "f keeps one sign") -> tuple:
    """Newton's method on ``f(alpha) -> (value, derivative)`` inside ``[lo, hi]``, where the
    value is positive above the root iff ``positive_at_hi``. Every solved point narrows the
    interval by its sign; a step that leaves it is replaced by bisection. Returns ``(root,
    error)``: the last solved point and the step Newton would take from it (the point's error to
    first order: Newton converges quadratically, so the step's end is far closer), or the final
    bracket's width.

    A root that only converges onto an end whose sign was never seen is not a root:
    :class:`RootFindingError`, as is no convergence in ``MAX_STEPS`` steps. ``name`` (the
    root) and ``one_sign`` (what it means that ``f`` has no root) word the messages."""
    alpha, bracket = a0, SignBracket(lo, hi, positive_at_hi)
    defined_at = None
    for _ in range(MAX_STEPS):
        try:
            value, slope = f(alpha)
        except UndefinedAt as exc:
            if defined_at is None:
                raise
            log.debug("%s: %s; the range is cut there", name, exc)
            bracket.exclude(alpha, defined_at)
            if bracket.hi - bracket.lo < xtol:
                raise NoRootInRange(f"{name}: {one_sign} up to alpha = {defined_at:.6g}, where {exc}") from None
            alpha = bracket.midpoint
            continue
        defined_at = alpha
        bracket.record(alpha, value)
        step = -value / slope
        new = alpha + step
        newton = bracket.contains(new)
        if not newton:
            new = bracket.midpoint
        log.debug("%s: alpha=%.12g value=%.3e %s step to %.12g", name, alpha, value,
                  "Newton" if newton else "bisection", new)
        if newton and abs(new - alpha) < xtol:
            return alpha, abs(step)
        if bracket.hi - bracket.lo < xtol:
            if not (bracket.seen_lo and bracket.seen_hi):
                raise NoRootInRange(f"{name}: {one_sign} up to alpha = {alpha:.6g}, the end of the scanned range")
            return alpha, bracket.hi - bracket.lo
        alpha = new
    raise RootFindingError(f"{name}: the safeguarded Newton method did not converge in {MAX_STEPS} steps")


class SecantRoot(NamedTuple):
    """What :func:`safeguarded_secant` found: ``root`` with its error ``step``, the ``slope`` of the
    starting pair (or the guess), and ``solved``, the last point where the function was evaluated
    (within ``step`` of ``root``)."""

    root: float
    step: float
    slope: float
    solved: float


def safeguarded_secant(g: Callable[[float], float], a0: float, a1: Optional[float], xtol: float,
                       slope_guess: Optional[float] = None, bracket: Optional[tuple] = None,
                       positive_at_hi: bool = False, name: str = "root", one_sign: str = "g keeps one sign") -> SecantRoot:
    """The secant method on ``g`` from ``a0`` and ``a1``; with ``slope_guess`` (a slope at a
    nearby root, e.g. from another discretisation of ``g``) ``a1`` is instead the Newton
    step from ``a0`` with that slope, and where that step is already below ``xtol`` its end is the
    root, with the step as its error, after one solve. ``bracket = (lo, hi)``: the range searched; every
    solved point narrows it by its sign (``g`` positive above the root iff
    ``positive_at_hi``), and an iterate outside it is replaced by bisection.

    Returns a :class:`SecantRoot`: the root, the end of the last step (below ``xtol``), which was
    not solved, with that step as its error (the method converges superlinearly, so the step's end
    is far closer than that), and the last solved point; the slope is that of the starting pair, or
    ``slope_guess`` where the pair is closer than ``SLOPE_MIN_SPACING`` (differences of
    ``g`` over a shorter interval do not resolve it). Raises :class:`RootFindingError`
    when the iteration converges onto an end of the range whose sign it never saw, or
    does not converge in ``MAX_STEPS`` steps."""
    signs = SignBracket(*(bracket if bracket is not None else (-np.inf, np.inf)), positive_at_hi=positive_at_hi)

    defined = []

    def g_(alpha):
        """``(alpha', g(alpha'))``: ``alpha' = alpha`` unless ``g`` is not defined there, in
        which case the range is cut and its midpoint tried instead."""
        for _ in range(MAX_STEPS):
            try:
                value = g(alpha)
            except UndefinedAt as exc:
                if not defined:
                    raise
                log.debug("%s: %s; the range is cut there", name, exc)
                signs.exclude(alpha, defined[-1])
                if signs.hi - signs.lo < xtol:
                    raise NoRootInRange(f"{name}: {one_sign} up to alpha = {defined[-1]:.6g}, where {exc}") from None
                alpha = signs.midpoint
                continue
            defined.append(alpha)
            signs.record(alpha, value)
            return alpha, value
        raise RootFindingError(f"{name}: no point where the function is defined was found")

    def inside(a):
        return a if signs.contains(a) else signs.midpoint

    def at_range_end(a):
        # converging onto an end of the range whose side was never seen
        return (not signs.seen_lo and abs(a - signs.lo) < 2 * xtol) or \
            (not signs.seen_hi and abs(a - signs.hi) < 2 * xtol)

    a0, g0 = g_(a0)
    if slope_guess is not None:
        newton = a0 - g0 / slope_guess
        a1 = inside(newton)
        if abs(a1 - a0) < xtol:
            if a1 == newton and not at_range_end(a1):
                # already at the root: the step's end is the root and the step its error, as at the
                # secant's last step (a slope wrong by a fraction e moves the end by e times the
                # step). A second point solved only for the slope cost a solve of the reporting
                # rule (high: 6.7 s) and reported a step of about xtol back from it
                return SecantRoot(a1, abs(a1 - a0), slope_guess, a0)
            a1 = a0 + xtol  # a distinct second point for the slope
    a1, g1 = g_(a1)
    slope = (g1 - g0) / (a1 - a0) if slope_guess is None or abs(a1 - a0) > SLOPE_MIN_SPACING else slope_guess
    for _ in range(MAX_STEPS):
        if g1 == g0:
            # one value at two points: near a root this is a fixed-point solve whose start
            # already met its tolerance, so g is resolved no finer than the last step; the
            # root is a1 to that step where it is bracketed or the step is below the spacing
            # that differences of g resolve
            bracketed = signs.seen_lo and signs.seen_hi and signs.lo <= a1 <= signs.hi
            if bracketed or abs(a1 - a0) < SLOPE_MIN_SPACING:
                log.debug("%s: equal values at %.12g and %.12g; the root is resolved to the step", name, a0, a1)
                return SecantRoot(a1, abs(a1 - a0), slope, a1)
            break
        secant = a1 - g1 * (a1 - a0) / (g1 - g0)
        a2 = inside(secant)
        log.debug("%s: alpha=%.12g value=%.3e secant step to %.12g (range [%.12g, %.12g])", name, a1, g1, a2,
                  signs.lo, signs.hi)
        if abs(a2 - a1) < xtol:
            if at_range_end(a2):
                raise NoRootInRange(f"{name}: {one_sign} up to alpha = {a2:.6g}, the end of the scanned range")
            # the step's end is the root, the step its error (far larger than a2's own, as the
            # method converges superlinearly); solving at a2 only to stop would cost a solve. Where
            # the step was a bisection, the last solved point and the bracket
            if a2 != secant:
                return SecantRoot(a1, signs.hi - signs.lo, slope, a1)
            return SecantRoot(a2, abs(a2 - a1), slope, a1)
        a0, g0 = a1, g1
        a1, g1 = g_(a2)
    raise RootFindingError(f"{name}: the safeguarded secant method did not converge")


# below this spacing the secant pair's slope is left to the guess (differences over a
# shorter interval are not resolved well enough to propagate errors)
SLOPE_MIN_SPACING = 1e-5
