"""Order parameters (docs/theory.md, section 2.2) as small frozen dataclasses."""
from __future__ import annotations

import dataclasses
import math

import numpy as np

OVERLAP_NAMES = ("q", "m", "V", "theta")
HAT_NAMES = ("qhat", "mhat", "Vhat", "thetahat")
ALL_NAMES = OVERLAP_NAMES + HAT_NAMES

#: the branches of fixed points (docs/theory.md, section 3.1): invariant subspaces of the
#: saddle-point equations, each defined by the overlaps it holds at zero (``FIXED_ZERO``;
#: ``free`` imposes nothing and tests the stability of a branch)
BRANCHES = ("semantic", "positional", "trivial")
FIXED_ZERO = {"semantic": ("m",), "positional": ("theta",), "trivial": ("m", "theta"), "free": ()}
#: the two branches whose training losses cross at alpha_c (docs/theory.md, section 3.4)
COMPETING_BRANCHES = BRANCHES[:2]
#: a branch whose defining overlap (``|theta|/sigma^2`` semantic, ``|m|`` positional; for the
#: general model its subspace's) falls below this has merged with the trivial one
COLLAPSE = 1e-4


def named_values(names, values) -> str:
    """``q = 0.11, m = 0, ...``: values by name as a person reads them (plain floats, 6 digits)."""
    return ", ".join(f"{n} = {float(v) + 0.0:.6g}" for n, v in zip(names, values))


def value_with_error(value: float, error: float = math.nan) -> str:
    """A value as its error supports it: to the error's second significant digit, ``0.1148173073771
    +- 4.5e-12``; seven significant digits where no error is stated (a one-rule precision); never
    ``-0``."""
    value = float(value) + 0.0  # -0.0 + 0.0 is 0.0
    if not math.isfinite(value):
        return "not finite"
    if not (math.isfinite(error) and error > 0):
        return f"{value:.7g}"
    if value == 0:
        return f"0 +- {error:.1e}"
    digits = min(17, max(2, math.floor(math.log10(abs(value))) - math.floor(math.log10(error)) + 2))
    return f"{value:.{digits}g} +- {error:.1e}"


@dataclasses.dataclass(frozen=True)
class Overlaps:
    """Student self-overlap ``q``, positional overlap ``m``, response ``V``, teacher overlap ``theta``."""

    q: float
    m: float
    V: float
    theta: float

    def as_array(self) -> np.ndarray:
        return np.array([self.q, self.m, self.V, self.theta], dtype=float)

    def __str__(self) -> str:  # what a person reads in a message: no dataclass repr
        return named_values(OVERLAP_NAMES, self.as_array())

    @classmethod
    def from_array(cls, x) -> "Overlaps":
        return cls(*(float(v) for v in x))

    @classmethod
    def of(cls, overlaps) -> "Overlaps":
        """The line quadrature's scalars of ``overlaps``: these, or the entries of ``1 x 1`` matrix
        overlaps (:class:`~numerics.matrix_overlaps.MatrixOverlaps`, what a record holds)."""
        return overlaps if isinstance(overlaps, cls) else cls.from_array(overlaps.pack())

    def inside(self, rho: float) -> bool:
        """Whether these overlaps lie in the domain where the Gaussian measure of docs/theory.md,
        section 2.2 exists: ``q > 0``, ``V > 0`` and ``theta^2 < rho q`` (``theta = 0`` always)."""
        return bool(self.q > 0 and self.V > 0 and (self.theta == 0 or self.theta**2 < rho * self.q))

    def validate(self) -> None:
        """Raise if the overlaps leave the domain where the Gaussian measure of docs/theory.md, section 2.2 exists."""
        if not (np.isfinite(self.as_array()).all()):
            raise FloatingPointError(f"non-finite overlaps {self}")
        if self.q <= 0 or self.V <= 0:
            raise FloatingPointError(f"q and V must be positive, got {self}")


@dataclasses.dataclass(frozen=True)
class HatOverlaps:
    """Conjugate order parameters ``qhat, mhat, Vhat, thetahat``."""

    qhat: float
    mhat: float
    Vhat: float
    thetahat: float

    def as_array(self) -> np.ndarray:
        return np.array([self.qhat, self.mhat, self.Vhat, self.thetahat], dtype=float)

    def __str__(self) -> str:
        return named_values(HAT_NAMES, self.as_array())

    @classmethod
    def from_array(cls, x) -> "HatOverlaps":
        return cls(*(float(v) for v in x))

    @classmethod
    def of(cls, hats) -> "HatOverlaps":
        """The scalars of ``hats``: these, or the entries of ``1 x 1`` matrix conjugates."""
        return hats if isinstance(hats, cls) else cls.from_array(hats.pack())
