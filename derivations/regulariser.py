"""Regularisers as data: the penalty of one weight entry (docs/extending.md, "Your own regulariser").

A regulariser is ``ridge`` (``lam/2 w^2``) or an expression ``pen(w)`` of one entry ``w`` of the
student's weights ``Q`` and the strength ``lam``; the penalty of ``Q`` is ``sum_ia pen(Q_ia)``.
Text is read by the parser of typed attentions (:func:`derivations.attention.parse_expression`)
with the vocabulary :func:`vocabulary`: numbers, ``+ - * / ** ( )``, ``w``, ``lam``, ``pi``, ``E``
and the functions of :data:`derivations.attention.FUNCTIONS` (``abs`` is ``Abs``).

The prior term of the free energy (docs/theory.md, section 4.4) is the zero-temperature limit of
an integral over one row ``Q_i`` of the energy ``sum_a pen(Q_ia) + (sigma^2/2) Q_i^T Vhat Q_i -
b^T Q_i``; it is Gaussian, and done in closed form, only when that energy is quadratic in ``Q_i``.
A penalty is therefore admitted only as ``c(lam) w^2``, ``c`` free of ``w``:

* not quadratic in ``w`` (``lam*Abs(w)``, ``lam*w**4``): the integral has no closed form;
* a linear term: the penalty would not be even in ``w``, as the loss is (it depends on ``h`` through
  ``h h^T``); the solver's symmetric fixed points and the simulator's and GAMP's penalty
  ``k/2 |Q|_F^2`` assume an even one;
* a constant term: it only shifts the training loss, and would have to be carried by every
  consumer of the model (the simulator's empirical risk); written without it, the model is the same.

An admitted penalty is the ridge ``k/2 |Q|_F^2`` of strength ``k = 2 c(lam)`` (:func:`strength`):
the symbolic derivation uses the expression itself, the simulator and GAMP the number ``k``
(:attr:`derivations.spec.ModelSpec.ridge_strength`). One equal to ``lam/2 w^2`` is stored as
``ridge``, so that it keys the same cached code.
"""
from __future__ import annotations

import functools
import hashlib
import math
from typing import Tuple

import sympy as sp

from . import symbols as S
from .attention import Vocabulary, from_sympy, parse_expression, quoted
from .vocabulary import ModelSpecError

#: the built-in regulariser, ``lam/2 w^2``
RIDGE = "ridge"
#: the name of one weight entry inside an expression
WEIGHT = "w"
ROLE = "regulariser"
#: the admitted form, as errors state it
FORM = "c(lam)*w**2"


def weight_symbol() -> sp.Symbol:
    return sp.Symbol(WEIGHT, real=True)


@functools.lru_cache(maxsize=1)
def vocabulary() -> Vocabulary:
    """``w`` and ``lam`` (the derivation's own symbol, so that the expression enters it as typed)."""
    return Vocabulary("a regulariser", ((WEIGHT, weight_symbol()), ("lam", S.lam)),
                      "the weight entry w, the strength lam", scale="a penalty's coefficients are of order one",
                      aliases=(("abs", "Abs"),))


def _refuse(why: str, text) -> None:
    raise ModelSpecError(ROLE, f"{why}: {quoted(text)}")


@functools.lru_cache(maxsize=256)
def canonical(value) -> Tuple[str, sp.Expr]:
    """``(text, c)``: the text stored in a :class:`~derivations.spec.ModelSpec` (``ridge``, or the
    ``sympy.sstr`` of ``c(lam) w**2``) and the coefficient ``c(lam)`` of ``w**2``. Refuses (one-line
    :class:`ModelSpecError`) any penalty that is not ``c(lam) w**2`` (module docstring)."""
    if isinstance(value, str) and value.strip() == RIDGE:
        return RIDGE, S.lam / 2
    if isinstance(value, str):
        if not value.strip():
            _refuse(f"is empty; give {RIDGE} or a penalty {FORM} of one weight entry w", value)
        expr, text = parse_expression(value, vocabulary(), ROLE), value
    else:
        expr, text = from_sympy(value, vocabulary(), ROLE), str(value)
    if not isinstance(expr, sp.Expr) or isinstance(expr, sp.core.relational.Relational):
        _refuse("not an expression of the weight entry w", text)
    if expr.has(sp.zoo, sp.oo, -sp.oo, sp.nan):
        _refuse("infinite or undefined as written (a division by zero or a log(0))", text)
    w = weight_symbol()
    if not expr.has(w):
        _refuse("does not depend on the weight entry w", text)
    if not expr.is_polynomial(w) or sp.Poly(expr, w).degree() != 2:
        _refuse(f"not a quadratic penalty {FORM} (the prior integral over a row of Q is done in closed form "
                f"only for a quadratic row energy, docs/theory.md section 4.4)", text)
    poly = sp.Poly(expr, w)
    c, linear, constant = (sp.simplify(poly.coeff_monomial(w**k)) for k in (2, 1, 0))
    if linear != 0:
        _refuse(f"a linear term in w: a penalty must be {FORM}, even in w like the loss", text)
    if constant != 0:
        _refuse(f"a constant term: a penalty must be {FORM}, zero at w = 0 (a constant only shifts the "
                f"training loss)", text)
    if sp.simplify(c - S.lam / 2) == 0:
        return RIDGE, S.lam / 2
    return sp.sstr(c * w**2, full_prec=True), c


def coefficient(text: str) -> sp.Expr:
    """``c(lam)`` of the canonical ``text`` (``lam/2`` for ``ridge``)."""
    return canonical(text)[1]


def penalty(text: str, entry: sp.Symbol) -> sp.Expr:
    """The penalty ``c(lam) entry**2`` of one weight entry (``lam`` the derivation's symbol)."""
    return coefficient(text) * entry**2


@functools.lru_cache(maxsize=1024)
def strength(text: str, lam: float) -> float:
    """``k = 2 c(lam)`` at the number ``lam``: the penalty is the ridge ``k/2 |Q|_F^2``. Refuses a
    ``k`` that is negative, not real or not finite there (the row energy would be unbounded below)."""
    if text == RIDGE:
        return float(lam)
    value = (2 * coefficient(text)).xreplace({S.lam: sp.Rational(repr(float(lam)))})
    try:
        k = complex(sp.N(value, 30))
    except (TypeError, ValueError, OverflowError):
        k = complex(math.nan)
    if not (math.isfinite(k.real) and math.isfinite(k.imag)):
        shown = "not finite"
    elif k.imag != 0:
        shown = f"not real ({k:.6g})"
    else:
        shown = f"{k.real:.6g}"
    if shown != f"{k.real:.6g}" or k.real < 0:
        _refuse(f"its strength k = 2 c(lam) is {shown} at lam = {lam:g}; it must be finite and >= 0 (the "
                f"penalty k/2 |Q|^2 bounds the weights)", text)
    return k.real


def label(text: str) -> str:
    """A file-name component: ``ridge``, or ``expr`` and a hash of the canonical text (never the text)."""
    return text if text == RIDGE else "expr" + hashlib.sha256(text.encode()).hexdigest()[:10]
