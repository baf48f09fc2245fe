"""Generated functions of the exact per-sample loss of a finite instance (docs/theory.md, sections
1.3 and 4.1), for message passing on real data sets (docs/gamp.md).

One training sample ``(X_i, Y_i)`` (``L x d`` each) enters the empirical risk only through its Gram
statistics, scaled by ``1/d``::

    g = X_i X_i^T / d      (symmetric L x L, packed by its upper triangle: g_1_1, g_1_2, ..., g_L_L)
    c = Y_i X_i^T / d      (L x L, row-major: c_1_1, c_1_2, ...)
    yy = |Y_i|_F^2 / d

and on the student only through ``h = X_i Q / sqrt(d)`` (``L x r``): ::

    loss(h) = |Y_i - S(h) X_i|_F^2 / (2d) = (yy + sum_ab S_ab (S g - 2 c)_ab) / 2.

Its concentrated limit (``g -> sigma^2 I``, ``c -> sigma^2 T(h*)``, ``yy -> sigma^2 |T|_F^2``) is the
replica theory's ``l(h; h*) = sigma^2/2 |S(h) - T(h*)|_F^2``. The functions (``sample_loss``,
``sample_loss_grad``, ``sample_prox_objective``, ``sample_prox_newton``) take ``h`` (and ``w``)
packed token by token as :mod:`derivations.packing` packs them, then ``g``, ``c``, ``yy``, and the
packed ``V`` for the prox; the objective of the prox is the theory's,
``1/2 sum_l (h_l - w_l)^T V^{-1} (h_l - w_l) + loss(h)``, with the exact loss. The derivatives are
generated as :mod:`derivations.codegen` generates the theory's prox terms (chain rule through the
opaque logistic and softmax values, CSE), and cached on disk by the same kind of key.
"""
from __future__ import annotations

import dataclasses
import hashlib
import json
import logging
from typing import Callable, Dict, Tuple

from .cache import cache_dir, package_source_hash, write_atomic
from .spec import ModelSpec

log = logging.getLogger(__name__)

#: the generated functions, in the order of the module
FUNCTION_NAMES = ("sample_loss", "sample_loss_grad", "sample_prox_objective", "sample_prox_newton")
FORMAT_VERSION = 1


def coefficient_names(L: int) -> Tuple[str, ...]:
    """The names of a sample's coefficients, in argument order: ``g`` (upper triangle, row-major),
    ``c`` (row-major), ``yy``."""
    g = tuple(f"g_{a}_{b}" for a in range(1, L + 1) for b in range(a, L + 1))
    c = tuple(f"c_{a}_{b}" for a in range(1, L + 1) for b in range(1, L + 1))
    return g + c + ("yy",)


def _expressions(spec: ModelSpec) -> Dict[str, tuple]:
    import sympy as sp

    from . import symbols as S
    from .expressions import prox_derivatives, shared_logistics
    from .model import attention_matrix, explicit_softmax, inverse

    ms = S.matrix_symbols(spec.shape)
    L = ms.shape.L
    names = coefficient_names(L)
    coef = [sp.Symbol(n, real=True) for n in names]
    g = sp.zeros(L, L)
    it = iter(coef)
    for a in range(L):
        for b in range(a, L):
            g[a, b] = g[b, a] = next(it)
    c = sp.Matrix(L, L, [next(it) for _ in range(L * L)])
    yy = next(it)
    H, W = S.components(ms.h), S.components(ms.w)
    Vp = ms.packed("V")

    def loss(logistic: bool):
        Sm = attention_matrix(spec, ms.h, logistic)
        D = Sm * g - 2 * c
        return (yy + sum(Sm[a, b] * D[a, b] for a in range(L) for b in range(L))) / 2

    Vinv = inverse(ms.V)
    quad = sum(((ms.h[l, :] - ms.w[l, :]) * Vinv * (ms.h[l, :] - ms.w[l, :]).T)[0, 0] for l in range(L)) / 2
    loss_opaque = shared_logistics(loss(True))
    loss_grad, _ = prox_derivatives(loss_opaque, H)
    obj_opaque = shared_logistics(quad + loss(True))
    grad, hess = prox_derivatives(obj_opaque, H)
    obj = explicit_softmax(obj_opaque)
    hess_names = ", ".join(f"H[{i},{j}]" for i in range(len(H)) for j in range(i, len(H)))
    coefs = tuple(coef)
    return {
        "sample_loss": (H + coefs, explicit_softmax(loss_opaque),
                        "(yy + sum_ab S_ab (S g - 2 c)_ab) / 2 = |Y - S(h) X|_F**2 / (2d) of one sample, from "
                        "g = X X^T/d, c = Y X^T/d, yy = |Y|**2/d"),
        "sample_loss_grad": (H + coefs, (explicit_softmax(loss_opaque),) + loss_grad,
                             f"(loss, d loss/d({', '.join(a.name for a in H)})...) of one sample"),
        "sample_prox_objective": (H + W + coefs + Vp, obj,
                                  "1/2 sum_l (h_l - w_l)^T V^{-1} (h_l - w_l) + the sample's exact loss"),
        "sample_prox_newton": (H + W + coefs + Vp, (obj,) + grad + hess,
                               "(objective, gradient..., Hessian upper triangle...) of the sample's prox "
                               f"objective in h; Hessian order {hess_names}"),
    }


def _cache_key(spec: ModelSpec) -> str:
    from .codegen import _sympy_version, expression_forms

    content = {"structure": spec.structural_key(), "kind": "sample_loss", "sympy": _sympy_version(),
               "source": package_source_hash(), "format": FORMAT_VERSION}
    forms = expression_forms(spec)
    if forms:
        content["expressions"] = forms
    return hashlib.sha256(json.dumps(content, sort_keys=True).encode()).hexdigest()[:20]


@dataclasses.dataclass(frozen=True)
class SampleLossFunctions:
    """The generated functions of one model structure (numpy backend, CSE); each is an attribute."""

    spec_key: dict
    cache_file: str
    functions: Dict[str, Callable] = dataclasses.field(repr=False)

    def __getattr__(self, name):
        if name != "functions" and name in self.__dict__.get("functions", {}):
            return self.functions[name]
        raise AttributeError(f"{type(self).__name__} has no attribute {name!r}")


_MEMO: Dict[str, SampleLossFunctions] = {}


def sample_loss_functions(spec: ModelSpec) -> SampleLossFunctions:
    """The generated per-sample functions of ``spec`` (memoised in-process, cached on disk; only the
    structure of ``spec`` matters: the loss has no parameter but the attention's)."""
    from .codegen import _function_source, _load

    key = _cache_key(spec)
    if key in _MEMO:
        return _MEMO[key]
    L, r, t, k = spec.shape
    path = cache_dir() / f"sample_{spec.attention_label()}_L{L}r{r}_{key}.py"
    source = None
    if path.is_file():
        try:
            source = path.read_text()
            functions = _load(source, str(path), "numpy", FUNCTION_NAMES)
        except Exception as exc:  # a corrupt or foreign file: regenerate
            log.warning("ignoring unreadable cache file %s (%s)", path, exc)
            source = None
    if source is None:
        exprs = _expressions(spec)
        parts = [f"# Generated by derivations.sample_loss; do not edit.\n# structure: "
                 f"{json.dumps(spec.structural_key(), sort_keys=True)}\n"]
        for name in FUNCTION_NAMES:
            args, expr, doc = exprs[name]
            parts.append(_function_source(name, args, expr, doc, "numpy", True, spec))
        source = "\n\n".join(parts)
        functions = _load(source, str(path), "numpy", FUNCTION_NAMES)
        write_atomic(path, source)
    out = SampleLossFunctions(spec_key=spec.structural_key(), cache_file=str(path), functions=functions)
    _MEMO[key] = out
    return out
