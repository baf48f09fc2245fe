"""The attention of the simulator, written once: a row map and its vector-Jacobian product.

An :class:`Attention` turns the logits ``s = h h^T`` of a sample into its attention matrix
``S`` and, for the gradient, pulls ``P = d loss / d S`` back to ``J = d loss / d s``
(docs/theory.md, sections 1.1 and 4.1). Both work in one layout, ``(..., L, L, n)``: row ``a``,
column ``b``, samples last, any leading axes (the runs of a batch); each row is normalised
over ``b`` (axis ``-2``). The loss kernel (:mod:`validation.simulator.kernel`), the teacher of
the data (:mod:`validation.simulator.data`) and the autograd reference
(:func:`attention_matrix`) all call these two methods.

The built-ins are written elementwise: the softmax at inverse temperature ``beta``, the linear
attention ``s`` and the sigmoid; every other attention, and a built-in with ``generated``, is
evaluated from torch functions lambdified from the theory's own row expression
(:func:`derivations.attention.row_expression`) and its SymPy derivatives, ``S_ab = f(s_ab,
s_a(b+1), ...)`` with cyclic indices (:func:`generated_row`). Tests check that the two agree.
"""
from __future__ import annotations

import dataclasses
import functools
import math
from typing import Callable

import torch

from derivations.spec import BUILTIN_ATTENTIONS, ModelSpec

_LOG2_E = 1.0 / math.log(2.0)

#: torch counterparts of the functions an attention expression may use (derivations.attention.FUNCTIONS)
_TORCH_FUNCTIONS = {"exp": torch.exp, "log": torch.log, "sqrt": torch.sqrt, "tanh": torch.tanh, "sinh": torch.sinh,
                    "cosh": torch.cosh, "sin": torch.sin, "cos": torch.cos, "atan": torch.atan, "erf": torch.erf,
                    "Abs": torch.abs}


@dataclasses.dataclass(frozen=True)
class Attention:
    """An attention as the simulator computes it: the spec's text (a built-in name or a canonical
    expression of one row of scores, :mod:`derivations.attention`), its role (``attention``, the
    student's, or ``teacher``) and the student's inverse temperature ``beta``; ``generated``
    computes a built-in from its row expression too (the module docstring)."""

    text: str = "softmax"
    role: str = "attention"
    beta: float = 1.0
    generated: bool = False

    @property
    def kind(self) -> str:
        """The elementwise form in use: a built-in name, or ``generated``."""
        return "generated" if self.generated or self.text not in BUILTIN_ATTENTIONS else self.text

    @functools.cached_property
    def _rule(self) -> "_Rule":
        if self.kind == "generated":
            return _generated_rule(self)
        return _BUILTIN_RULES[self.kind](self.beta)

    def weights(self, logits: torch.Tensor) -> torch.Tensor:
        """``S`` from the logits, both ``(..., L, L, n)`` (rows normalised over axis ``-2``)."""
        return self._rule.weights(logits)

    def pullback(self, logits: torch.Tensor, S: torch.Tensor, P: torch.Tensor) -> torch.Tensor:
        """``J_ab = sum_c P_ac dS_ac/ds_ab``: ``d loss / d logits`` from ``P = d loss / d S``, where
        ``S = weights(logits)``; same layout. May overwrite ``P``."""
        return self._rule.pullback(logits, S, P)


@dataclasses.dataclass(frozen=True)
class _Rule:
    weights: Callable
    pullback: Callable


def _softmax_rule(beta: float) -> _Rule:
    def weights(s):
        if beta != 1.0:
            s = beta * s
        # exp2, not torch.softmax or torch.exp: on the CPU those open a thread-parallel region even
        # for a few thousand float64 entries, which waits a scheduler slice (~16 ms) for its second
        # thread when the cores are oversubscribed (benchmarks/simulation.py --kernels); exp2
        # and the other elementwise operations here stay on one thread. Out of place, so that
        # autograd can differentiate the reference through it.
        e = torch.exp2((s - s.amax(dim=-2, keepdim=True)) * _LOG2_E)
        return e / e.sum(dim=-2, keepdim=True)

    def pullback(s, S, P):
        J = P.sub_((S * P).sum(dim=-2, keepdim=True)).mul_(S)
        return J if beta == 1.0 else J.mul_(beta)

    return _Rule(weights, pullback)


def _linear_rule(beta: float) -> _Rule:
    return _Rule(lambda s: s, lambda s, S, P: P)


def _sigmoid_rule(beta: float) -> _Rule:
    return _Rule(torch.sigmoid, lambda s, S, P: P.mul_(S).mul_(1.0 - S))


_BUILTIN_RULES = {"softmax": _softmax_rule, "linear": _linear_rule, "sigmoid": _sigmoid_rule}


@functools.lru_cache(maxsize=64)
def generated_row(text: str, role: str, beta: float, L: int):
    """``(f, (df/dh1, ..., df/dhL))``: torch functions of ``L`` score tensors, lambdified from the
    row expression of the theory (:func:`derivations.attention.row_expression`) and its
    SymPy derivatives. A constant derivative comes back as a Python number."""
    import sympy as sp

    from derivations.attention import row_expression, score_symbols

    f = row_expression(text, L, role, beta)
    h = score_symbols(L)
    modules = [_TORCH_FUNCTIONS, "math"]
    return (sp.lambdify(h, f, modules=modules),
            tuple(sp.lambdify(h, sp.diff(f, x), modules=modules) for x in h))


def _as_tensor(value, like: torch.Tensor) -> torch.Tensor:
    return value if isinstance(value, torch.Tensor) else torch.full_like(like, float(value))


def _generated_rule(att: Attention) -> _Rule:
    def row_arguments(s, a, b):
        L = s.shape[-2]
        return [s[..., a, (b + k) % L, :] for k in range(L)]

    def weights(s):
        f, _ = generated_row(att.text, att.role, att.beta, s.shape[-2])
        L = s.shape[-2]
        rows = []
        for a in range(L):
            args = [row_arguments(s, a, b) for b in range(L)]
            rows.append(torch.stack([_as_tensor(f(*x), x[0]) for x in args], dim=-2))
        return torch.stack(rows, dim=-3)

    def pullback(s, S, P):
        # S_ab depends on s_a(b+k) through df/dh(k+1): J_ac = sum_b P_ab dS_ab/ds_ac, c = b + k
        _, df = generated_row(att.text, att.role, att.beta, s.shape[-2])
        L = s.shape[-2]
        rows = []
        for a in range(L):
            J = [None] * L
            for b in range(L):
                x = row_arguments(s, a, b)
                for k, g in enumerate(df):
                    c = (b + k) % L
                    term = P[..., a, b, :] * _as_tensor(g(*x), x[0])
                    J[c] = term if J[c] is None else J[c] + term
            rows.append(torch.stack(J, dim=-2))
        return torch.stack(rows, dim=-3)

    return _Rule(weights, pullback)


def student_attention(spec: ModelSpec, generated: bool = False) -> Attention:
    return Attention(spec.attention, "attention", spec.beta, generated)


def teacher_attention(spec: ModelSpec, generated: bool = False) -> Attention:
    return Attention(spec.teacher, "teacher", 1.0, generated)


def as_attention(attention) -> Attention:
    """An :class:`Attention` from itself or a built-in name."""
    if isinstance(attention, Attention):
        return attention
    if isinstance(attention, str) and attention in BUILTIN_ATTENTIONS:
        return Attention(attention)
    raise ValueError(f"attention: unknown nonlinearity {attention!r}; give a built-in name "
                     f"({', '.join(BUILTIN_ATTENTIONS)}) or an Attention (student_attention(spec))")


def attention_matrix(h: torch.Tensor, attention) -> torch.Tensor:
    """The attention ``S(h h^T)`` for ``h`` of shape ``(n, L)`` (rank one) or ``(n, L, r)``, shape
    ``(n, L, L)``; ``attention`` an :class:`Attention` or a built-in name. Plain torch operations,
    differentiable by autograd (the reference of :func:`validation.simulator.kernel.risk_autograd`)."""
    logits = h[:, :, None] * h[:, None, :] if h.dim() == 2 else h @ h.transpose(1, 2)
    return as_attention(attention).weights(logits.movedim(0, -1)).movedim(-1, 0)
