"""Names and packing of the matrix order parameters and per-token quantities (docs/theory.md, section 4.2).

One convention, shared by the generated functions (their argument names), the solver's flat
vectors, CSV columns and JSON keys. It imports neither SymPy nor NumPy at module level, so
numerics can use it on a cache hit of the generated code.

Order parameters (``Shape = (L, r, t, k)``)::

    symmetric r x r   q, V, qhat, Vhat         upper triangle, row-major: q_11, q_12, ..., q_rr
    k x r             m, mhat                  row-major: m_1_1, m_1_2, ..., m_k_r
    r x t             theta, thetahat          row-major: theta_1_1, ..., theta_r_t

A ``1 x 1`` matrix is a number and keeps its bare name (``q``, ``m``, ``theta``): the two-token
rank-one model of docs/theory.md, section 2 has the names ``q, m, V, theta`` it always had.
Symmetric components are ``q_12`` while ``r <= 9`` and ``q_1_12`` style beyond.

Per-token quantities are ``L x n`` matrices (``n = r`` for ``h, w, zeta, f``; ``n = t`` for
``hs, g``), packed token by token: ``h_1_1, ..., h_1_r, h_2_1, ...``; with ``n = 1`` the name is
``h1, h2, ...`` (section 2's ``h1, h2, w1, w2, hs1, hs2``).

The teacher's ``L x L`` matrix ``A`` is passed as ``a11, a12, ...`` (``a_1_10`` style once ``L > 9``).
"""
from __future__ import annotations

from typing import Dict, Iterable, List, NamedTuple, Sequence, Tuple


class Shape(NamedTuple):
    """``(L, r, t, k)``: tokens, student rank, teacher rank, positional directions."""

    L: int
    r: int
    t: int
    k: int


#: matrix order parameters: name -> (rows, columns, symmetric), rows and columns as shape fields
ORDER_PARAMETERS = {
    "q": ("r", "r", True), "m": ("k", "r", False), "V": ("r", "r", True), "theta": ("r", "t", False),
    "qhat": ("r", "r", True), "mhat": ("k", "r", False), "Vhat": ("r", "r", True),
    "thetahat": ("r", "t", False),
}
#: the overlaps and the conjugates, each in the order of the generated functions' arguments
OVERLAPS = ("q", "m", "V", "theta")
CONJUGATES = ("qhat", "mhat", "Vhat", "thetahat")

#: per-token quantities: name -> width (a shape field)
PER_TOKEN = {"h": "r", "w": "r", "zeta": "r", "f": "r", "hs": "t", "g": "t"}

#: scalar model parameters before the entries of ``A``
SCALAR_PARAMS = ("sigma", "lam", "omega", "rho")


def as_shape(shape) -> Shape:
    """A :class:`Shape` from a tuple ``(L, r, t, k)`` or a ``ModelSpec`` (its ``shape``)."""
    return Shape(*getattr(shape, "shape", shape))


def _sep(*indices: int) -> str:
    return "".join(str(i) for i in indices) if max(indices) <= 9 else "_".join(str(i) for i in indices)


def matrix_names(name: str, rows: int, cols: int, symmetric: bool = False) -> Tuple[str, ...]:
    """Component names of a ``rows x cols`` matrix called ``name`` (see the module docstring)."""
    if rows == cols == 1:
        return (name,)
    if symmetric:
        if rows != cols:
            raise ValueError(f"{name}: a symmetric matrix must be square, got {rows}x{cols}")
        return tuple(f"{name}_{_sep(i, j)}" for i in range(1, rows + 1) for j in range(i, cols + 1))
    return tuple(f"{name}_{i}_{j}" for i in range(1, rows + 1) for j in range(1, cols + 1))


def matrix_index(rows: int, cols: int, symmetric: bool = False) -> Tuple[Tuple[int, int], ...]:
    """The ``(row, column)`` (0-based) of each packed component, in packing order."""
    if symmetric:
        return tuple((i, j) for i in range(rows) for j in range(i, cols))
    return tuple((i, j) for i in range(rows) for j in range(cols))


def dimensions(name: str, shape) -> Tuple[int, int, bool]:
    """``(rows, columns, symmetric)`` of the order parameter ``name`` for ``shape``."""
    s = as_shape(shape)
    rows, cols, sym = ORDER_PARAMETERS[name]
    return getattr(s, rows), getattr(s, cols), sym


def names(name: str, shape) -> Tuple[str, ...]:
    """Component names of the order parameter ``name`` (e.g. ``names("q", (2, 2, 1, 1))``)."""
    return matrix_names(name, *dimensions(name, shape))


def token_names(name: str, shape) -> Tuple[str, ...]:
    """Component names of the per-token quantity ``name`` (``h, w, zeta, f, hs, g``), token by token."""
    s = as_shape(shape)
    width = getattr(s, PER_TOKEN[name])
    if width == 1:
        return tuple(f"{name}{l}" for l in range(1, s.L + 1))
    return tuple(f"{name}_{l}_{i}" for l in range(1, s.L + 1) for i in range(1, width + 1))


def param_names(L: int) -> Tuple[str, ...]:
    """Trailing arguments of every generated function: ``sigma, lam, omega, rho`` and the entries of ``A``."""
    return SCALAR_PARAMS + tuple(f"a{_sep(i, j)}" for i in range(1, L + 1) for j in range(1, L + 1))


def parameter_names(shape, which: Sequence[str] = OVERLAPS + CONJUGATES) -> Tuple[str, ...]:
    """The flat vector of independent components of the order parameters ``which``, in that order."""
    return tuple(n for name in which for n in names(name, shape))


def pack(name: str, matrix, shape) -> Tuple[float, ...]:
    """The independent components of ``matrix`` (nested sequences or an array), in packing order.

    A symmetric parameter is read from its upper triangle; it is not checked for symmetry."""
    rows, cols, sym = dimensions(name, shape)
    get = (lambda i, j: matrix[i][j]) if rows * cols > 1 or _is_nested(matrix) else (lambda i, j: matrix)
    return tuple(float(get(i, j)) for i, j in matrix_index(rows, cols, sym))


def _is_nested(x) -> bool:
    try:
        x[0]
    except (TypeError, IndexError):
        return False
    return True


def unpack(name: str, values: Sequence[float], shape) -> List[List[float]]:
    """The ``rows x cols`` matrix (nested lists) of the packed ``values`` (symmetric ones filled in)."""
    rows, cols, sym = dimensions(name, shape)
    index = matrix_index(rows, cols, sym)
    values = list(values)
    if len(values) != len(index):
        raise ValueError(f"{name}: expected {len(index)} components for shape {tuple(as_shape(shape))}, "
                         f"got {len(values)}")
    out = [[0.0] * cols for _ in range(rows)]
    for (i, j), v in zip(index, values):
        out[i][j] = v
        if sym:
            out[j][i] = v
    return out


def as_dict(name: str, values: Iterable[float], shape) -> Dict[str, float]:
    """``{component name: value}`` of a packed order parameter (the JSON and CSV keys)."""
    return dict(zip(names(name, shape), values))
