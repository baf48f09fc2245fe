"""Attentions as data: one row of scores in, one weight out (docs/extending.md).

An attention is a SymPy expression ``f(h1, ..., hL)``: the weight that a token gives to the
token whose score is ``h1``, as a function of the scores ``h1, ..., hL`` of its row. The row
``i`` of the attention matrix of scores ``s = h h^T`` is ``S_ij = f(s_ij, s_i(j+1), ...,
s_i(j+L-1))`` (indices cyclic): the other weights follow by permuting the scores. The built-in
names are such expressions:

* ``softmax``: ``exp(beta h1) / sum_l exp(beta hl)`` (``beta`` the student's inverse temperature);
* ``linear``: ``h1``;
* ``sigmoid``: ``1 / (1 + exp(-h1))``.

Text is parsed with SymPy's parser after a tokenizer has admitted only numbers, the operators
``+ - * / ** ( ) ,``, the score symbols, ``beta`` (student only), the constants ``pi`` and ``E`` and
the functions of :data:`FUNCTIONS`; nothing else reaches the parser, so no name of Python's can be
called. An admitted expression must be real and finite for every real row of scores
(:func:`check_real_and_finite`); then the loss ``(sigma^2/2) |S - T|_F^2`` is a sum of squares
of reals, so every prox problem is bounded below by 0.
"""
from __future__ import annotations

import functools
import io
import itertools
import math
import tokenize
from typing import Tuple

from .spec import BUILTIN_ATTENTIONS, ModelSpecError

#: the functions an expression may use (name in the text -> SymPy name)
FUNCTIONS = ("exp", "log", "sqrt", "tanh", "sinh", "cosh", "sin", "cos", "atan", "erf", "Abs")
CONSTANTS = ("pi", "E")
_OPERATORS = {"+", "-", "*", "/", "**", "(", ")", ","}
#: the name of the student's inverse temperature inside an expression
BETA = "beta"


def score_symbols(L: int):
    """The scores ``h1, ..., hL`` of one row, as real SymPy symbols."""
    import sympy as sp

    return tuple(sp.Symbol(f"h{k}", real=True) for k in range(1, L + 1))


def beta_symbol():
    import sympy as sp

    return sp.Symbol(BETA, positive=True)


def builtin_expression(name: str, L: int):
    """The built-in attention ``name`` as a row expression (``softmax`` carries ``beta``)."""
    import sympy as sp

    h = score_symbols(L)
    if name == "softmax":
        b = beta_symbol()
        return sp.exp(b * h[0]) / sp.Add(*[sp.exp(b * x) for x in h])
    if name == "linear":
        return h[0]
    if name == "sigmoid":
        return 1 / (1 + sp.exp(-h[0]))
    raise ModelSpecError("attention", f"no built-in attention {name!r}; choose from {', '.join(BUILTIN_ATTENTIONS)}")


def _allowed_names(L: int, role: str) -> Tuple[str, ...]:
    names = tuple(f"h{k}" for k in range(1, L + 1)) + FUNCTIONS + CONSTANTS
    return names + ((BETA,) if role == "attention" else ())


def _vocabulary(L: int, role: str) -> str:
    scores = "h1, h2" if L == 2 else f"h1, ..., h{L}"
    extra = ", beta" if role == "attention" else ""
    return f"the scores {scores}{extra}, the constants pi, E and the functions {', '.join(FUNCTIONS)}"


def _tokens_admitted(text: str, L: int, role: str) -> None:
    """Refuse any token other than numbers, the operators and the admitted names (module docstring)."""
    allowed = set(_allowed_names(L, role))
    try:
        tokens = list(tokenize.generate_tokens(io.StringIO(text).readline))
    except (tokenize.TokenError, IndentationError, SyntaxError) as exc:
        raise ModelSpecError(role, f"cannot parse {text!r} ({exc.args[0]})") from None
    for tok in tokens:
        if tok.type in (tokenize.NEWLINE, tokenize.NL, tokenize.ENDMARKER, tokenize.INDENT, tokenize.DEDENT):
            continue
        if tok.type == tokenize.NUMBER and not tok.string.lower().endswith("j") and "_" not in tok.string:
            continue
        if tok.type == tokenize.OP and tok.string in _OPERATORS:
            continue
        if tok.type == tokenize.NAME and tok.string in allowed:
            continue
        if tok.type == tokenize.NAME:
            raise ModelSpecError(role, f"unknown symbol {tok.string!r} in {text!r}; an attention may use "
                                       f"{_vocabulary(L, role)}")
        raise ModelSpecError(role, f"cannot parse {text!r}: {tok.string!r} is not allowed (numbers, + - * / ** "
                                   f"( ) and {_vocabulary(L, role)})")


def _parse_text(text: str, L: int, role: str):
    import sympy as sp
    from sympy.parsing.sympy_parser import parse_expr, rationalize, standard_transformations

    _tokens_admitted(text, L, role)
    names = {f"h{k}": s for k, s in enumerate(score_symbols(L), 1)}
    names.update({f: getattr(sp, f) for f in FUNCTIONS})
    names.update(pi=sp.pi, E=sp.E)
    if role == "attention":
        names[BETA] = beta_symbol()
    # the parser's own names (Integer, Float, Rational, Symbol) only: no builtins
    glob = {"__builtins__": {}, "Integer": sp.Integer, "Float": sp.Float, "Rational": sp.Rational,
            "Symbol": sp.Symbol}
    try:
        expr = parse_expr(text, local_dict=names, global_dict=glob,
                          transformations=standard_transformations + (rationalize,))
    except Exception as exc:  # the parser raises SyntaxError, TypeError, TokenError, ...
        raise ModelSpecError(role, f"cannot parse {text!r} ({type(exc).__name__}: {exc})") from None
    return expr


def _exact(expr):
    """Floats written as the exact decimal the user meant (the mpmath backend keeps full precision)."""
    import sympy as sp

    return expr.xreplace({f: sp.Rational(repr(float(f))) for f in expr.atoms(sp.Float)})


def _from_sympy(expr, L: int, role: str):
    """A SymPy expression given directly: its symbols renamed to ours, its functions checked."""
    import sympy as sp

    if not isinstance(expr, sp.Expr):
        raise ModelSpecError(role, f"must be a name, a text expression or a SymPy expression, got {expr!r}")
    allowed = _allowed_names(L, role)
    ours = {f"h{k}": s for k, s in enumerate(score_symbols(L), 1)}
    ours[BETA] = beta_symbol()
    unknown = sorted(s.name for s in expr.free_symbols if s.name not in allowed)
    if unknown:
        raise ModelSpecError(role, f"unknown symbol {unknown[0]!r} in {expr}; an attention may use "
                                   f"{_vocabulary(L, role)}")
    functions = {type(f).__name__ for f in expr.atoms(sp.Function)}
    foreign = sorted(functions - set(FUNCTIONS))
    if foreign:
        raise ModelSpecError(role, f"unknown function {foreign[0]!r} in {expr}; an attention may use "
                                   f"{_vocabulary(L, role)}")
    return _exact(expr.xreplace({s: ours[s.name] for s in expr.free_symbols}))


# sample rows of scores for the finiteness check: structured points where denominators and
# logarithms typically vanish (zeros, equal scores, small integers), then pseudo-random ones
_STRUCTURED = (0, 1, -1, 2, -2, 0.5, -0.5, 3, -3, 10, -10)
_SCALES = (0.1, 1.0, 4.0, 20.0)


def _sample_rows(L: int):
    import numpy as np

    rows = [tuple(p) for p in itertools.product(_STRUCTURED[:5], repeat=L)] if L <= 3 else []
    rows += [tuple([v] * L) for v in _STRUCTURED]
    rng = np.random.default_rng(12345)
    for scale in _SCALES:
        rows += [tuple(float(x) for x in scale * rng.standard_normal(L)) for _ in range(40)]
    return rows


def check_real_and_finite(expr, L: int, role: str, text: str) -> None:
    """Refuse an attention that is not real and finite on the real row of scores.

    Sampled at :func:`_sample_rows` in 30-digit arithmetic (an overflow of doubles is not a
    singularity); every polynomial denominator is also checked for real roots along each score
    through those points, so a pole off the sample points is found too. A complex value, as
    ``sqrt`` or ``log`` of a negative score give, would make the squared loss complex and the prox
    problem unbounded below."""
    import mpmath
    import sympy as sp

    h = score_symbols(L)
    symbols = h + ((beta_symbol(),) if expr.has(beta_symbol()) else ())
    f = sp.lambdify(symbols, expr, modules="mpmath")
    rows = _sample_rows(L)
    with mpmath.workdps(30):
        for row in rows:
            args = [mpmath.mpf(x) for x in row] + ([mpmath.mpf(1)] if len(symbols) > L else [])
            try:
                value = f(*args)
                ok = isinstance(value, (mpmath.mpf, int, float)) and mpmath.isfinite(value)
            except (ZeroDivisionError, ValueError, OverflowError, TypeError):
                ok, value = False, "undefined"
            if not ok:
                where = ", ".join(f"h{k}={x:g}" for k, x in enumerate(row, 1))
                kind = "not real" if isinstance(value, mpmath.mpc) else "not finite"
                raise ModelSpecError(role, f"{text!r} is {kind} at {where}: an attention must be real and finite "
                                           f"for every real row of scores (else the prox problem is unbounded "
                                           f"below or undefined)")
    _, den = sp.fraction(sp.together(expr.subs(beta_symbol(), 1)))
    if den.is_polynomial(*h) and den.free_symbols:
        for row in rows[:50]:
            for k, x in enumerate(h):
                line = sp.Poly(den.subs({y: sp.Rational(repr(float(v))) for y, v in zip(h, row) if y != x}), x)
                if line.degree() > 0 and sp.real_roots(line):
                    raise ModelSpecError(role, f"{text!r} has a pole where its denominator {den} vanishes: an "
                                               f"attention must be finite for every real row of scores")


@functools.lru_cache(maxsize=256)
def canonical(value, L: int, role: str) -> Tuple[str, object]:
    """``(text, expression)``: the canonical text stored in a :class:`~derivations.spec.ModelSpec`
    (a built-in name, or the expression's ``sympy.sstr``) and the row expression. ``role`` is
    ``attention`` (the student's, may use ``beta``) or ``teacher``."""
    if isinstance(value, str) and value.strip() in BUILTIN_ATTENTIONS:
        return value.strip(), builtin_expression(value.strip(), L)
    if isinstance(value, str):
        if not value.strip():
            raise ModelSpecError(role, "is empty; give a built-in name "
                                       f"({', '.join(BUILTIN_ATTENTIONS)}) or an expression of the scores")
        expr = _exact(_parse_text(value, L, role))
        text = value
    else:
        expr = _from_sympy(value, L, role)
        text = str(value)
    import sympy as sp

    if not isinstance(expr, sp.Expr) or isinstance(expr, sp.core.relational.Relational):
        raise ModelSpecError(role, f"{text!r} is not an expression of the scores")
    if not expr.free_symbols & set(score_symbols(L)):
        raise ModelSpecError(role, f"{text!r} does not depend on the scores {'h1, h2' if L == 2 else f'h1, ..., h{L}'}")
    check_real_and_finite(expr, L, role, text)
    return sp.sstr(expr, full_prec=True), expr


def row_expression(text: str, L: int, role: str, beta: float = 1.0):
    """The row expression of a canonical attention ``text``, with ``beta`` (the student's inverse
    temperature) substituted as the exact decimal."""
    import sympy as sp

    expr = canonical(text, L, role)[1]
    return expr.xreplace({beta_symbol(): sp.Rational(repr(float(beta)))}) if role == "attention" else expr


def uses_beta(text: str, L: int) -> bool:
    return canonical(text, L, "attention")[1].has(beta_symbol())


def attention_rows(text: str, scores, role: str, beta: float = 1.0):
    """The ``n x L`` matrix ``S_ij = f(s_ij, s_i(j+1), ...)`` (cyclic) of the row expression ``f`` of
    ``text`` applied to the rows of ``scores`` (a SymPy matrix)."""
    import sympy as sp

    n, L = scores.shape
    f = row_expression(text, L, role, beta)
    h = score_symbols(L)
    return sp.Matrix(n, L, lambda i, j: f.xreplace({h[k]: scores[i, (j + k) % L] for k in range(L)}))


def canonical_form(text: str, L: int, role: str, beta: float = 1.0) -> str:
    """``sympy.srepr`` of the row expression: the canonical form that keys generated code."""
    import sympy as sp

    return sp.srepr(row_expression(text, L, role, beta))


def is_builtin(text: str) -> bool:
    return text in BUILTIN_ATTENTIONS


def check_beta(beta) -> float:
    if isinstance(beta, bool) or not isinstance(beta, (int, float)) or not math.isfinite(beta) or beta <= 0:
        raise ModelSpecError("beta", f"must be a finite number > 0, got {beta!r}")
    return float(beta)
