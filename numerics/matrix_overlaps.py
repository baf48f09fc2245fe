"""Matrix order parameters of the general model (docs/theory.md, sections 4.2 and 4.9), with the
one packing of :mod:`derivations.packing`.

:class:`MatrixOverlaps` holds ``q, m, V, theta``; :class:`MatrixHats` the conjugates ``qhat, mhat,
Vhat, thetahat``. Both are frozen, hold read-only numpy matrices, and convert to and from the flat
vector of independent components (symmetric matrices by their upper triangle) that the solver
iterates, the CSV columns and the JSON keys use (``q_12``, ``m_1_1``, ...; bare names at ``1 x 1``).
Their invariants under the gauge group ``O(r) x O(t)`` (section 4.9) are what runs and theory
compare: the eigenvalues of ``q`` (and ``V``), the singular values of ``m`` and of ``theta``.
"""
from __future__ import annotations

import dataclasses
from typing import ClassVar, Dict, List, Tuple

import numpy as np

from derivations import packing


def _frozen(a) -> np.ndarray:
    out = np.array(a, dtype=float)
    out.flags.writeable = False
    return out


@dataclasses.dataclass(frozen=True, eq=False)
class _Matrices:
    """Base of the two records: ``NAMES`` are the matrix fields, in packing order."""

    shape: packing.Shape

    NAMES: ClassVar[Tuple[str, ...]] = ()

    def __post_init__(self):
        object.__setattr__(self, "shape", packing.as_shape(self.shape))
        for name in self.NAMES:
            rows, cols, _ = packing.dimensions(name, self.shape)
            value = np.broadcast_to(np.asarray(getattr(self, name), dtype=float), (rows, cols))
            object.__setattr__(self, name, _frozen(value))

    @classmethod
    def component_names(cls, shape) -> Tuple[str, ...]:
        """The names of the flat vector's components (``packing.parameter_names``)."""
        return packing.parameter_names(shape, cls.NAMES)

    def pack(self) -> np.ndarray:
        """The flat vector of independent components, in :meth:`component_names` order."""
        return np.array([v for name in self.NAMES for v in packing.pack(name, getattr(self, name), self.shape)])

    @classmethod
    def unpack(cls, shape, flat):
        """The record of a flat vector (symmetric matrices filled from their upper triangle)."""
        shape = packing.as_shape(shape)
        flat = list(np.asarray(flat, dtype=float))
        matrices, start = {}, 0
        for name in cls.NAMES:
            size = len(packing.names(name, shape))
            matrices[name] = np.array(packing.unpack(name, flat[start:start + size], shape))
            start += size
        if start != len(flat):
            raise ValueError(f"expected {start} components for shape {tuple(shape)}, got {len(flat)}")
        return cls(shape, **matrices)

    def matrices(self) -> Dict[str, np.ndarray]:
        return {name: getattr(self, name) for name in self.NAMES}

    def as_dict(self) -> Dict[str, float]:
        """``{component name: value}`` (the CSV columns)."""
        return dict(zip(self.component_names(self.shape), (float(v) for v in self.pack())))

    def nested(self) -> Dict[str, List[List[float]]]:
        """``{name: matrix as nested lists}`` (the JSON form)."""
        return {name: getattr(self, name).tolist() for name in self.NAMES}

    def rotated(self, O: np.ndarray, W=None):
        """The record in the gauge ``h -> h O`` (and ``h* -> h* W``), docs/theory.md, section 4.9:
        symmetric ``r x r`` matrices ``-> O^T X O``, ``k x r`` ones ``-> X O``, ``r x t`` ones ``-> O^T X W``."""
        W = np.eye(self.shape.t) if W is None else np.asarray(W, dtype=float)
        out = {}
        for name in self.NAMES:
            X = getattr(self, name)
            kind = packing.ORDER_PARAMETERS[name]
            if kind == ("r", "r", True):
                out[name] = O.T @ X @ O
            elif kind == ("k", "r", False):
                out[name] = X @ O
            else:
                out[name] = O.T @ X @ W
        return type(self)(self.shape, **out)

    def isfinite(self) -> bool:
        return bool(np.isfinite(self.pack()).all())


#: the overlap whose matrix each gauge invariant of :meth:`MatrixOverlaps.invariants` is computed from
INVARIANT_OF = {"q_eigenvalues": "q", "V_eigenvalues": "V", "m_singular_values": "m", "theta_singular_values": "theta"}


@dataclasses.dataclass(frozen=True, eq=False)
class MatrixOverlaps(_Matrices):
    """``q`` (``r x r``), ``m`` (``k x r``), ``V`` (``r x r``), ``theta`` (``r x t``), docs/theory.md, section 4.2."""

    q: np.ndarray
    m: np.ndarray
    V: np.ndarray
    theta: np.ndarray

    NAMES = packing.OVERLAPS

    def invariants(self) -> Dict[str, List[float]]:
        """Gauge invariants (docs/theory.md, section 4.9): eigenvalues of ``q`` and ``V`` (descending),
        singular values of ``m`` and ``theta`` (descending)."""
        return {"q_eigenvalues": sorted(np.linalg.eigvalsh(self.q).tolist(), reverse=True),
                "V_eigenvalues": sorted(np.linalg.eigvalsh(self.V).tolist(), reverse=True),
                "m_singular_values": np.linalg.svd(self.m, compute_uv=False).tolist(),
                "theta_singular_values": np.linalg.svd(self.theta, compute_uv=False).tolist()}

    def covariance(self, rho: float) -> np.ndarray:
        """``Sigma = [[q, theta], [theta^T, rho I_t]]`` of ``x_l = (zeta_l, h*_l)`` (docs/theory.md, section 4.2)."""
        t = self.shape.t
        return np.block([[self.q, self.theta], [self.theta.T, rho * np.eye(t)]])


@dataclasses.dataclass(frozen=True, eq=False)
class MatrixHats(_Matrices):
    """``qhat, mhat, Vhat, thetahat``, shaped like ``q, m, V, theta``."""

    qhat: np.ndarray
    mhat: np.ndarray
    Vhat: np.ndarray
    thetahat: np.ndarray

    NAMES = packing.CONJUGATES


def from_scalars(q: float, m: float, V: float, theta: float) -> MatrixOverlaps:
    """The overlaps of the two-token rank-one model as ``1 x 1`` matrices (shape ``(2, 1, 1, 1)``)."""
    return MatrixOverlaps(packing.Shape(2, 1, 1, 1), q=q, m=m, V=V, theta=theta)
