"""The model specification (docs/theory.md, sections 1, 2 and 4).

A :class:`ModelSpec` is a small frozen object. Its *structural* part (the numbers
of tokens ``L``, student and teacher ranks ``r, t``, the positional matrix ``P``, the
attention nonlinearity, teacher and regulariser) decides the symbolic equations;
its *numerical* part (``sigma``, ``lam``, ``omega``, ``A``) enters the equations as
SymPy symbols and is passed to the generated functions as
arguments, so changing a number never requires regenerating code.
"""
from __future__ import annotations

import dataclasses
import math
import operator
from typing import Optional, Tuple

from .vocabulary import BUILTIN_ATTENTIONS, REGULARISERS, ModelSpecError


#: the largest sigma whose square is a float
SIGMA_LIMIT = 1e150
#: the paper's positional matrix of the teacher for two tokens
DEFAULT_A = ((0.6, 0.4), (0.4, 0.6))


def default_A(L: int) -> Tuple[Tuple[float, ...], ...]:
    """``0.6`` on the diagonal, ``0.4/(L - 1)`` elsewhere (for ``L = 2``, :data:`DEFAULT_A`)."""
    off = 0.4 / (L - 1)
    return tuple(tuple(0.6 if i == j else off for j in range(L)) for i in range(L))


def default_positions(L: int) -> Tuple[Tuple[float, ...], ...]:
    """``P = [[1], [-1]]`` for two tokens (``mu_2 = -mu_1``), the identity ``I_L`` otherwise."""
    if L == 2:
        return ((1.0,), (-1.0,))
    return tuple(tuple(1.0 if i == j else 0.0 for j in range(L)) for i in range(L))


@dataclasses.dataclass(frozen=True)
class ModelSpec:
    """Tied low-rank attention with a mixed teacher (docs/theory.md, sections 1 and 4).

    Attributes
    ----------
    sigma : standard deviation of the semantic token part; ``rho = sigma**2``.
    lam : the strength of the regulariser (the ridge's weight decay).
    omega : weight of the fixed positional matrix ``A`` in the teacher.
    A : the ``L x L`` row-stochastic matrix of the teacher, as a tuple of rows
        (default :func:`default_A`).
    attention : student attention ``S(h)`` of the scores ``h h^T``: a built-in name (``softmax``,
        the row softmax at inverse temperature ``beta``; ``linear``, ``h h^T``; ``sigmoid``, the
        elementwise sigmoid) or an expression of one row of scores ``h1, ..., hL`` (text or SymPy,
        :mod:`derivations.attention`), the weight on the score ``h1``. Stored as the built-in name
        or the expression's canonical text.
    teacher : the teacher's attention ``T0``, ``T = (1 - omega) T0(h* h*^T) + omega A``, set the same
        way (default the softmax; no ``beta``). Also readable as :attr:`teacher_attention`.
    regulariser : the penalty of the student weights, ``sum_ia pen(Q_ia)``: ``ridge``, ``pen(w) = lam/2 w^2``
        (the default), or the per-entry penalty ``pen`` as an expression of one weight entry ``w`` and
        ``lam`` (text or SymPy, :mod:`derivations.regulariser`). Only ``c(lam) w^2`` is admitted: the
        prior integral is done in closed form only for a quadratic row energy (docs/theory.md, section
        4.4); ``lam*Abs(w)`` or ``lam*w**4`` raise :class:`ModelSpecError`. Stored as ``ridge`` (an
        expression equal to ``lam/2 w^2`` too) or the canonical text of ``c(lam)*w**2``; the penalty is
        then the ridge of strength :attr:`ridge_strength`.
    tokens : ``L``, the number of tokens (>= 2).
    rank : ``r``, the rank of the student (columns of ``Q``).
    teacher_rank : ``t``, the rank of the teacher (columns of ``Q*``).
    positions : the ``L x k`` matrix ``P`` of the positional embeddings,
        ``mu_l = sqrt(d) sum_a P[l, a] e_a`` with orthonormal ``e_a`` (default
        :func:`default_positions`).
    beta : the student's inverse temperature: the symbol ``beta`` of its attention (the built-in
        softmax is ``exp(beta h1) / sum_l exp(beta hl)``); must be 1 for an attention without it.
    """

    sigma: float = 0.5
    lam: float = 0.01
    omega: float = 0.3
    A: Optional[Tuple[Tuple[float, ...], ...]] = None
    attention: str = "softmax"
    teacher: str = "softmax"
    regulariser: str = "ridge"
    tokens: int = 2
    rank: int = 1
    teacher_rank: int = 1
    positions: Optional[Tuple[Tuple[float, ...], ...]] = None
    beta: float = 1.0

    def __post_init__(self):
        for name, low, why in (("tokens", 2, "attention mixes tokens"), ("rank", 1, "the student's columns"),
                               ("teacher_rank", 1, "the teacher's columns")):
            value = getattr(self, name)
            try:
                count = operator.index(value)  # an int, or a numpy integer; not a float or bool
            except TypeError:
                count = None
            if isinstance(value, bool) or count is None or count < low:
                raise ModelSpecError(name, f"must be an integer >= {low} ({why}), got {value!r}")
            object.__setattr__(self, name, count)
        L = self.tokens
        object.__setattr__(self, "A", _as_matrix(default_A(L) if self.A is None else self.A, L))
        object.__setattr__(self, "positions",
                           _as_positions(default_positions(L) if self.positions is None else self.positions, L))
        for name in ("sigma", "lam", "omega"):
            value = getattr(self, name)
            if isinstance(value, bool) or not isinstance(value, (int, float)):
                raise ModelSpecError(name, f"must be a real number, got {value!r}")
            if not math.isfinite(value):
                raise ModelSpecError(name, f"must be finite, got {value!r}")
            object.__setattr__(self, name, float(value))
        if self.sigma <= 0:
            raise ModelSpecError("sigma", f"must be > 0 (a standard deviation), got {self.sigma}")
        if not self.sigma <= SIGMA_LIMIT:
            raise ModelSpecError("sigma", f"must be <= {SIGMA_LIMIT:g} (rho = sigma^2 must be a finite float), "
                                          f"got {self.sigma:g}")
        if self.lam < 0:
            raise ModelSpecError("lam", f"must be >= 0 (the strength of a penalty), got {self.lam}")
        if not 0.0 <= self.omega <= 1.0:
            raise ModelSpecError("omega", f"must lie in [0, 1] (the teacher's weight of A against its softmax), "
                                          f"got {self.omega}")
        self._set_attentions()
        self._set_regulariser()

    def _set_attentions(self) -> None:
        """Built-in names as they are; expressions parsed and stored as canonical text
        (SymPy is imported only for an expression, so the default model needs none)."""
        from .attention import check_beta

        object.__setattr__(self, "beta", check_beta(self.beta))
        for name, role in (("attention", "attention"), ("teacher", "teacher")):
            value = getattr(self, name)
            if not (isinstance(value, str) and value in BUILTIN_ATTENTIONS):
                from .attention import canonical

                if not isinstance(value, str) and not hasattr(value, "free_symbols"):
                    raise ModelSpecError(role, f"must be a name ({', '.join(BUILTIN_ATTENTIONS)}), a text "
                                               f"expression of the scores or a SymPy expression, got {value!r}")

                object.__setattr__(self, name, canonical(value, self.tokens, role)[0])
        if self.beta != 1.0:
            from .attention import uses_beta

            if not uses_beta(self.attention, self.tokens):
                raise ModelSpecError("beta", f"the student attention {self.attention!r} does not use beta; "
                                             f"leave beta = 1 or write beta into the expression")

    def _set_regulariser(self) -> None:
        """``ridge`` as it is; an expression parsed, checked and stored as canonical text, and its
        strength checked at this ``lam`` (SymPy is imported only for an expression)."""
        value = self.regulariser
        if isinstance(value, str) and value in REGULARISERS:
            return
        if not isinstance(value, str) and not hasattr(value, "free_symbols"):
            raise ModelSpecError("regulariser", f"must be {' or '.join(REGULARISERS)}, a text expression of one "
                                                f"weight entry w and lam, or a SymPy expression, got {value!r}")
        from .regulariser import canonical, strength

        text = canonical(value)[0]
        object.__setattr__(self, "regulariser", text)
        strength(text, self.lam)

    @property
    def ridge_strength(self) -> float:
        """``k`` of the penalty ``k/2 |Q|_F^2`` that the regulariser is at this ``lam``: ``lam`` for
        ``ridge``, ``2 c(lam)`` for ``c(lam)*w**2`` (:func:`derivations.regulariser.strength`). What
        the simulator and GAMP use; the derivation uses the expression."""
        if self.regulariser in REGULARISERS:
            return self.lam
        from .regulariser import strength

        return strength(self.regulariser, self.lam)

    def regulariser_label(self) -> str:
        """A file-name component: ``ridge``, or ``expr`` and a hash of the expression's canonical text."""
        if self.regulariser in REGULARISERS:
            return self.regulariser
        from .regulariser import label

        return label(self.regulariser)

    @property
    def teacher_attention(self) -> str:
        """The teacher's attention (the field ``teacher``)."""
        return self.teacher

    def attention_label(self, role: str = "attention") -> str:
        """A short name for file names and legends: the built-in name, or ``expr``."""
        text = getattr(self, role)
        return text if text in BUILTIN_ATTENTIONS else "expr"

    @property
    def L(self) -> int:
        """The number of tokens (``tokens``)."""
        return self.tokens

    @property
    def k(self) -> int:
        """The number of positional directions (columns of ``positions``)."""
        return len(self.positions[0])

    @property
    def rho(self) -> float:
        """Teacher pre-activation variance, ``rho = sigma**2`` (docs/theory.md, section 2)."""
        return self.sigma**2

    @property
    def shape(self) -> Tuple[int, int, int, int]:
        """``(L, r, t, k)``."""
        return (self.tokens, self.rank, self.teacher_rank, self.k)

    @property
    def is_two_token_rank_one(self) -> bool:
        """The paper's own case: two tokens, ``r = t = 1`` and ``P = [[1], [-1]]`` (``mu_2 = -mu_1``)."""
        return self.shape == (2, 1, 1, 1) and self.positions == default_positions(2)

    def require_two_token_rank_one(self, what: str) -> None:
        """Raise :class:`ModelSpecError` if ``what`` (a feature) cannot handle this model's shape."""
        if not self.is_two_token_rank_one:
            L, r, t, k = self.shape
            raise ModelSpecError("tokens" if L != 2 else "rank" if r != 1 else "teacher_rank" if t != 1
                                 else "positions",
                                 f"{what} is implemented for L = 2 tokens, r = t = 1 and P = [[1], [-1]] only, "
                                 f"got L = {L}, r = {r}, t = {t}, P = {[list(p) for p in self.positions]}")

    def structural_key(self) -> dict:
        """The part of the specification that determines the symbolic equations (``beta`` only when
        it is not 1, so the paper's model keeps its key)."""
        key = {"tokens": self.tokens, "rank": self.rank, "teacher_rank": self.teacher_rank,
               "positions": [list(p) for p in self.positions], "attention": self.attention,
               "teacher": self.teacher, "regulariser": self.regulariser}
        if self.beta != 1.0:
            key["beta"] = self.beta
        return key

    def to_dict(self) -> dict:
        """Every field (``beta`` only when it is not 1: records of the paper's model keep their form
        and their hashes), plus ``rho``."""
        d = dataclasses.asdict(self)
        if self.beta == 1.0:
            del d["beta"]
        d["A"] = [list(row) for row in self.A]
        d["positions"] = [list(row) for row in self.positions]
        d["rho"] = self.rho
        return d

    def describe(self) -> str:
        """The model in one line as a person reads it (``to_dict()`` is the record)."""
        def matrix(M):
            return "[" + "; ".join(", ".join(f"{x:g}" for x in row) for row in M) + "]"

        parts = [f"sigma = {self.sigma:g}, lam = {self.lam:g}, omega = {self.omega:g}, A = {matrix(self.A)}",
                 f"attention {self.attention}" + (f" at beta = {self.beta:g}" if self.beta != 1.0 else ""),
                 f"teacher {self.teacher}",
                 f"{self.regulariser} penalty" if self.regulariser in REGULARISERS
                 else f"penalty {self.regulariser} per weight entry",
                 f"L = {self.tokens} tokens, rank {self.rank}, teacher rank {self.teacher_rank}",
                 f"positions P = {matrix(self.positions)}"]
        return ", ".join(parts)

    def to_columns(self) -> dict:
        """Every parameter as a flat CSV column: scalars by name, ``A`` as ``A11, A12, ...`` and
        ``P`` as ``P11, P21, ...`` (``A1_10`` style once an index exceeds 9). The one CSV
        schema of a model; :meth:`from_columns` reads it back."""
        cols = {k: v for k, v in self.to_dict().items() if k not in ("A", "positions")}
        cols.update(_matrix_columns("A", self.A))
        cols.update(_matrix_columns("P", self.positions))
        return cols

    @classmethod
    def from_columns(cls, row: dict) -> "ModelSpec":
        """The model of a row written with :meth:`to_columns` (cells may be text)."""
        L = int(row.get("tokens", 2))
        A = _read_matrix(row, "A", L, L)
        k = sum(1 for a in range(1, L + 1) if _column_name("P", 1, a, L, L) in row)
        P = _read_matrix(row, "P", L, k) if k else None
        return cls(sigma=float(row["sigma"]), lam=float(row["lam"]), omega=float(row["omega"]), A=A,
                   attention=row["attention"], teacher=row["teacher"], regulariser=row["regulariser"],
                   tokens=L, rank=int(row.get("rank", 1)), teacher_rank=int(row.get("teacher_rank", 1)),
                   positions=P, beta=float(row.get("beta") or 1.0))

    def replace(self, **changes) -> "ModelSpec":
        return dataclasses.replace(self, **changes)


def _column_name(prefix: str, i: int, j: int, rows: int, cols: int) -> str:
    return f"{prefix}{i}{j}" if max(rows, cols) <= 9 else f"{prefix}{i}_{j}"


def _matrix_columns(prefix: str, M) -> dict:
    rows, cols = len(M), len(M[0])
    return {_column_name(prefix, i + 1, j + 1, rows, cols): x for i, row in enumerate(M) for j, x in enumerate(row)}


def _read_matrix(row: dict, prefix: str, rows: int, cols: int):
    try:
        return tuple(tuple(float(row[_column_name(prefix, i + 1, j + 1, rows, cols)]) for j in range(cols))
                     for i in range(rows))
    except KeyError as exc:
        raise ModelSpecError(prefix, f"missing column {exc.args[0]} in a model row") from None


def _as_rows(M, name: str):
    try:
        rows = tuple(tuple(float(x) for x in row) for row in M)
    except (TypeError, ValueError):
        raise ModelSpecError(name, f"must be a matrix of numbers, got {M!r}") from None
    if not rows or any(len(r) != len(rows[0]) for r in rows) or not rows[0]:
        raise ModelSpecError(name, f"must be a non-empty matrix with rows of equal length, got {M!r}")
    if not all(math.isfinite(x) for r in rows for x in r):
        raise ModelSpecError(name, f"entries must be finite, got {rows}")
    return rows


def _as_matrix(A, L: int) -> Tuple[Tuple[float, ...], ...]:
    rows = _as_rows(A, "A")
    if len(rows) != L or any(len(r) != L for r in rows):
        raise ModelSpecError("A", f"must be an {L}x{L} matrix, got shape {len(rows)}x{len(rows[0])}")
    if any(x < 0 for r in rows for x in r) or any(abs(sum(r) - 1.0) > 1e-9 for r in rows):
        raise ModelSpecError("A", f"must be row-stochastic (an attention matrix: entries >= 0, rows sum to 1), "
                                  f"got {rows}")
    return rows


def _as_positions(P, L: int) -> Tuple[Tuple[float, ...], ...]:
    rows = _as_rows(P, "positions")
    if len(rows) != L:
        raise ModelSpecError("positions", f"must have one row per token ({L}), got {len(rows)} rows")
    if len(rows[0]) > L:
        raise ModelSpecError("positions", f"must have at most L = {L} columns (L positions span at most L "
                                          f"directions), got {len(rows[0])}")
    return rows


def parse_matrix(text: str, name: str) -> Tuple[Tuple[float, ...], ...]:
    """``"a,b;c,d"`` (rows separated by ``;``, entries by ``,``) as a tuple of rows."""
    try:
        rows = tuple(tuple(float(x) for x in row.split(",")) for row in str(text).split(";"))
    except ValueError:
        raise ModelSpecError(name, f"expected rows of comma-separated numbers separated by ';', got {text!r}") \
            from None
    return _as_rows(rows, name)


def parse_A(text: str, L: Optional[int] = None) -> Tuple[Tuple[float, ...], ...]:
    """The teacher matrix from ``"0.6,0.4;0.4,0.6"`` (rows separated by ``;``) or, for
    ``L x L`` entries without ``;``, row-major ``a11,a12,a21,a22,...``."""
    if ";" in str(text):
        rows = parse_matrix(text, "A")
    else:
        try:
            values = [float(x) for x in str(text).split(",")]
        except ValueError:
            raise ModelSpecError("A", f"expected comma-separated numbers, got {text!r}") from None
        n = L if L is not None else math.isqrt(len(values))
        if n * n != len(values):
            raise ModelSpecError("A", f"expected {n * n if L is not None else 'a square number of'} "
                                      f"comma-separated numbers (or rows separated by ';'), got {len(values)}")
        rows = tuple(tuple(values[i * n:(i + 1) * n]) for i in range(n))
    if L is not None and len(rows) != L:
        raise ModelSpecError("A", f"must be an {L}x{L} matrix, got {len(rows)} rows")
    return _as_matrix(rows, len(rows))
