"""The model specification (SPEC section 1-2, section 4 for the generalisations).

A :class:`ModelSpec` is a small frozen object. Its *structural* part (number of
tokens, attention nonlinearity, teacher, regulariser) decides the symbolic
equations; its *numerical* part (``sigma``, ``lam``, ``omega``, ``A``) enters the
equations as SymPy symbols and is passed to the generated functions as
arguments, so changing a number never requires regenerating code.
"""
from __future__ import annotations

import dataclasses
import hashlib
import json
import math
from typing import Tuple

ATTENTIONS = ("softmax", "linear", "sigmoid")
TEACHERS = ("softmax",)
REGULARISERS = ("ridge",)

DEFAULT_A = ((0.6, 0.4), (0.4, 0.6))


class ModelSpecError(ValueError):
    """A model specification is invalid. ``parameter`` names the culprit."""

    def __init__(self, parameter: str, message: str):
        super().__init__(f"{parameter}: {message}")
        self.parameter = parameter


@dataclasses.dataclass(frozen=True)
class ModelSpec:
    """Tied rank-1 softmax attention with a mixed teacher (SPEC section 1).

    Attributes
    ----------
    L : number of tokens (only 2 is implemented).
    rank : student rank (only 1 is implemented).
    attention : student attention nonlinearity ``S(h)``: ``softmax`` (row softmax of
        ``h h^T``), ``linear`` (``h h^T``) or ``sigmoid`` (elementwise sigmoid of ``h h^T``).
    teacher : teacher attention, ``T = (1 - omega) softmax(h* h*^T) + omega A``.
    regulariser : ``ridge``, the penalty ``lam/2 |Q|^2``.
    sigma : standard deviation of the semantic token part; ``rho = sigma**2``.
    lam : ridge strength (weight decay).
    omega : weight of the fixed positional matrix ``A`` in the teacher.
    A : the ``L x L`` row-stochastic matrix of the teacher, as a tuple of rows.
    """

    sigma: float = 0.5
    lam: float = 0.01
    omega: float = 0.3
    A: Tuple[Tuple[float, ...], ...] = DEFAULT_A
    attention: str = "softmax"
    teacher: str = "softmax"
    regulariser: str = "ridge"
    L: int = 2
    rank: int = 1

    def __post_init__(self):
        object.__setattr__(self, "A", _as_matrix(self.A, self.L))
        for name in ("sigma", "lam", "omega"):
            value = getattr(self, name)
            if isinstance(value, bool) or not isinstance(value, (int, float)):
                raise ModelSpecError(name, f"must be a real number, got {value!r}")
            if not math.isfinite(value):
                raise ModelSpecError(name, f"must be finite, got {value!r}")
            object.__setattr__(self, name, float(value))
        if self.sigma <= 0:
            raise ModelSpecError("sigma", f"must be > 0, got {self.sigma}")
        if self.lam < 0:
            raise ModelSpecError("lam", f"must be >= 0, got {self.lam}")
        if not 0.0 <= self.omega <= 1.0:
            raise ModelSpecError("omega", f"must lie in [0, 1], got {self.omega}")
        if self.attention not in ATTENTIONS:
            raise ModelSpecError(
                "attention", f"unknown nonlinearity {self.attention!r}; choose from {', '.join(ATTENTIONS)}"
            )
        if self.teacher not in TEACHERS:
            raise ModelSpecError("teacher", f"unknown teacher {self.teacher!r}; choose from {', '.join(TEACHERS)}")
        if self.regulariser not in REGULARISERS:
            raise ModelSpecError(
                "regulariser", f"unknown regulariser {self.regulariser!r}; choose from {', '.join(REGULARISERS)}"
            )
        if self.L != 2:
            raise ModelSpecError("L", f"only L = 2 tokens is implemented, got {self.L}")
        if self.rank != 1:
            raise ModelSpecError("rank", f"only a rank-1 student is implemented, got {self.rank}")

    @property
    def rho(self) -> float:
        """Teacher pre-activation variance, ``rho = sigma**2`` (SPEC section 2)."""
        return self.sigma**2

    @property
    def A_commutes_with_swap(self) -> bool:
        """Whether ``A`` commutes with the token swap, so that ``theta = 0`` is exact (SPEC section 3)."""
        (a11, a12), (a21, a22) = self.A
        return a11 == a22 and a12 == a21

    def structural_key(self) -> dict:
        """The part of the specification that determines the symbolic equations."""
        return {"L": self.L, "rank": self.rank, "attention": self.attention,
                "teacher": self.teacher, "regulariser": self.regulariser}

    def structural_hash(self) -> str:
        blob = json.dumps(self.structural_key(), sort_keys=True).encode()
        return hashlib.sha256(blob).hexdigest()[:16]

    def to_dict(self) -> dict:
        d = dataclasses.asdict(self)
        d["A"] = [list(row) for row in self.A]
        d["rho"] = self.rho
        return d

    def replace(self, **changes) -> "ModelSpec":
        return dataclasses.replace(self, **changes)


def _as_matrix(A, L: int) -> Tuple[Tuple[float, ...], ...]:
    try:
        rows = tuple(tuple(float(x) for x in row) for row in A)
    except (TypeError, ValueError):
        raise ModelSpecError("A", f"must be an {L}x{L} matrix of numbers, got {A!r}") from None
    if len(rows) != L or any(len(r) != L for r in rows):
        raise ModelSpecError("A", f"must be an {L}x{L} matrix, got shape {[len(r) for r in rows]}")
    if not all(math.isfinite(x) for r in rows for x in r):
        raise ModelSpecError("A", f"entries must be finite, got {rows}")
    if any(x < 0 for r in rows for x in r) or any(abs(sum(r) - 1.0) > 1e-9 for r in rows):
        raise ModelSpecError("A", f"must be row-stochastic (entries >= 0, rows sum to 1), got {rows}")
    return rows


def parse_A(text: str, L: int = 2) -> Tuple[Tuple[float, ...], ...]:
    """Parse ``a11,a12,a21,a22`` (row-major) into a matrix."""
    try:
        values = [float(x) for x in text.split(",")]
    except ValueError:
        raise ModelSpecError("A", f"expected {L * L} comma-separated numbers, got {text!r}") from None
    if len(values) != L * L:
        raise ModelSpecError("A", f"expected {L * L} comma-separated numbers, got {len(values)}")
    return _as_matrix([values[i * L:(i + 1) * L] for i in range(L)], L)
