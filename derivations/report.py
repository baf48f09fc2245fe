"""Human- and machine-readable renderings of the derivation (text, LaTeX, JSON).

:func:`report` gives, for the two-token rank-one model, the equations in the variables ``xi, y``
of docs/theory.md, section 2 (:class:`Report`), and for any other shape the matrix equations of
section 4 (:class:`MatrixReport`), one entry per independent component, keyed by the names of
:mod:`derivations.packing` (``q_12``, ``thetahat_1_2``, ...).
"""
from __future__ import annotations

import dataclasses
import re
from typing import Dict, Union

import sympy as sp
from sympy.printing.latex import LatexPrinter

from . import packing
from . import symbols as S
from .model import loss as model_loss
from .reduction import Derivation, derive_lines
from .replica import MatrixDerivation, derive
from .spec import ModelSpec

#: the order of the equations in every output (JSON keys)
EQUATION_ORDER = (S.V, S.q, S.m, S.theta, S.qhat, S.mhat, S.Vhat, S.thetahat)

DEFINITIONS = {
    "Expect": "expectation over xi1, xi2, y1, y2, independent standard normals (docs/theory.md, section 2.2)",
    "xi1, xi2, y1, y2": "independent N(0, 1) variables of the expectation",
    "w1": "m + sqrt(q)*xi1",
    "w2": "-m + sqrt(q)*xi2",
    "hs1": "theta/sqrt(q)*xi1 + sqrt(rho - theta**2/q)*y1  (teacher pre-activation h*_1)",
    "hs2": "theta/sqrt(q)*xi2 + sqrt(rho - theta**2/q)*y2  (teacher pre-activation h*_2)",
    "M": "M(w1, w2, hs1, hs2, V) = min_h |h - w|**2/(2*V) + l(h; hs), the Moreau envelope of the loss",
    "l": "l(h; hs) = (sigma**2/2)*|S(h) - T(hs)|_F**2, T(hs) = (1 - omega)*T0(hs hs^T) + omega*A, T0 the teacher's attention; "
         "S(h) the student attention of the model (key 'loss' gives l explicitly)",
    "h1, h2": "the global minimiser (prox) in M",
    "f1, f2": "f_l = (h_l - w_l)/V at the prox: f_l = -dM/dw_l (envelope theorem)",
    "g1, g2": "g_l = dl/dhs_l at the prox: g_l = dM/dhs_l (envelope theorem)",
    "rho": "teacher pre-activation variance, rho = sigma**2",
}

NOTES = ("F is extremised over q, m, V, theta, qhat, mhat, Vhat, thetahat; each equation is dF/d(parameter) = 0 "
         "solved for the conjugate parameter. 'thetahat' is the y form (docs/theory.md, section 2.5); 'Vhat' is "
         "written with the symbol thetahat, as there. 'equivalent_forms' holds the dl/dh* form of thetahat, Vhat "
         "with thetahat expanded in both forms, and the common form of thetahat after Gaussian integration by parts.")

MATRIX_NOTES = ("F is extremised over every independent component of q, m, V, theta (overlaps) and qhat, mhat, Vhat, "
                "thetahat (conjugates); symmetric matrices by their upper triangle. Each equation is dF/d(component) "
                "= 0 solved for the conjugate component (docs/theory.md, sections 4.4-4.6). The channel conjugates "
                "are the Stein f forms: Vhat = -G[:, :r] (symmetrised), thetahat = G[:, r:], G = alpha sum_l "
                "E[f_l x_l^T] Sigma^{-1}. 'equivalent_forms' holds the g (dl/dh*) form of thetahat, Vhat written "
                "with the symbols thetahat and with thetahat in its g form, and the Hessian (Price) forms of Vhat "
                "and thetahat that both come from.")


class _Latex(LatexPrinter):
    def _print_Function(self, expr, exp=None):
        if expr.func == S.Expect:
            out = r"\mathbb{E}\left[" + self._print(expr.args[0]) + r"\right]"
            return out if exp is None else f"{out}^{{{exp}}}"
        return super()._print_Function(expr, exp)


_LATEX_NAMES = {S.lam: r"\lambda", S.hs1: r"h^*_1", S.hs2: r"h^*_2"}
_LATEX_BASES = {"hs": r"h^*", "Sigmainv": r"(\Sigma^{-1})", "thetahat": r"\hat{\theta}", "qhat": r"\hat{q}",
                "mhat": r"\hat{m}", "Vhat": r"\hat{V}", "theta": r"\theta", "zeta": r"\zeta", "alpha": r"\alpha",
                "sigma": r"\sigma", "rho": r"\rho", "omega": r"\omega", "xi": r"\xi"}


def _latex_name(symbol: sp.Symbol) -> str:
    """``thetahat_1_2 -> \\hat{\\theta}_{1,2}``, ``q_12 -> q_{12}``, ``hs_2_1 -> h^*_{2,1}``."""
    if symbol in _LATEX_NAMES:
        return _LATEX_NAMES[symbol]
    found = re.fullmatch(r"([A-Za-z]+?)(\d+|_\d+|_\d+_\d+)", symbol.name)
    if not found:
        return sp.latex(symbol)
    base, index = found.groups()
    return f"{_LATEX_BASES.get(base, base)}_{{{index.strip('_').replace('_', ',')}}}"


def _subscript(index: str) -> str:
    index = index.strip("_").replace("_", ",")
    return f"_{{{index}}}" if index else ""


def latex(expr) -> str:
    names = {s: _latex_name(s) for s in getattr(expr, "free_symbols", ()) if isinstance(s, sp.Symbol)}
    return _Latex({"symbol_names": names}).doprint(expr)


class _Rendering:
    """Text, LaTeX and JSON of a derivation; subclasses say which equations and definitions."""

    spec: ModelSpec
    #: the docs/theory.md sections of the free energy and of the equations, and the loss's arguments
    SECTIONS = ("", "")
    LOSS_ARGUMENTS = "h; hs"

    @property
    def loss(self) -> sp.Expr:
        """The per-sample loss of this model (it defines ``M``)."""
        return model_loss(self.spec)

    def _extra_json(self) -> dict:
        return {}

    def as_json(self) -> dict:
        return {
            "model": self.spec.to_dict(),
            **self._extra_json(),
            "free_energy": str(self.derivation.free_energy),
            "loss": str(self.loss),
            "equations": {k.name: str(v) for k, v in self.equations.items()},
            "equivalent_forms": {k: str(v) for k, v in self.equivalent_forms.items()},
            "definitions": self.definitions,
            "notes": self.notes,
        }

    def as_text(self) -> str:
        free_energy, equations = self.SECTIONS
        lines = [f"Model: {self.spec.describe()}", "",
                 f"Free energy (docs/theory.md, section {free_energy}):", f"  F = {self.derivation.free_energy}", "",
                 f"Loss l({self.LOSS_ARGUMENTS}) (student attention {self.spec.attention}"
                 + (f" at beta = {self.spec.beta:g}" if self.spec.beta != 1.0 else "")
                 + f", teacher attention {self.spec.teacher}):", f"  l = {self.loss}", "",
                 f"Saddle-point equations (dF/d(parameter) = 0; docs/theory.md, section {equations}):"]
        lines += [f"  {k} = {v}" for k, v in self.equations.items()]
        lines += ["", "Equivalent forms:"]
        lines += [f"  {k} = {v}" for k, v in self.equivalent_forms.items()]
        lines += ["", "Definitions:"]
        lines += [f"  {k}: {v}" for k, v in self.definitions.items()]
        return "\n".join(lines)

    def as_latex(self) -> str:
        section = self.SECTIONS[0].split(".")[0]
        lines = [rf"% free energy and saddle-point equations (docs/theory.md, section {section}), generated by "
                 r"attnphase derive", r"\begin{align}", rf"F &= {latex(self.derivation.free_energy)} \\",
                 rf"\ell &= {latex(self.loss)} \\"]
        lines += [rf"{latex(k)} &= {latex(v)} \\" for k, v in self.equations.items()]
        lines += [rf"\hat{{\theta}}^{{\mathrm{{dl}}}}{_subscript(k[len('thetahat_dl'):])} &= {latex(v)} \\"
                  for k, v in self.equivalent_forms.items() if k.startswith("thetahat_dl")]
        lines[-1] = lines[-1].removesuffix(r" \\")
        lines.append(r"\end{align}")
        return "\n".join(lines)


@dataclasses.dataclass(frozen=True)
class Report(_Rendering):
    """The equations of the two-token rank-one model, in ``xi, y`` (docs/theory.md, section 2)."""

    spec: ModelSpec
    derivation: Derivation

    SECTIONS = ("2.4", "2.5")
    LOSS_ARGUMENTS = "h1, h2; hs1, hs2"
    definitions = DEFINITIONS
    notes = NOTES

    @property
    def equations(self) -> Dict[sp.Symbol, sp.Expr]:
        d = self.derivation
        out = dict(d.overlaps)
        out.update(d.conjugates)
        return {k: out[k] for k in EQUATION_ORDER}

    @property
    def equivalent_forms(self) -> Dict[str, sp.Expr]:
        d = self.derivation
        return {"thetahat_dl": d.thetahat_dl, "Vhat_y": d.Vhat_y, "Vhat_dl": d.Vhat_dl,
                "thetahat_ibp": d.thetahat_second_order[0]}


@dataclasses.dataclass(frozen=True)
class MatrixReport(_Rendering):
    """The matrix equations of the general model, one per independent component (docs/theory.md, section 4)."""

    spec: ModelSpec
    derivation: MatrixDerivation

    SECTIONS = ("4.4", "4.5-4.6")
    notes = MATRIX_NOTES

    def _extra_json(self) -> dict:
        return {"shape": dict(zip(("L", "r", "t", "k"), self.spec.shape))}

    @property
    def equations(self) -> Dict[sp.Symbol, sp.Expr]:
        """Prior side (``V, q, m, theta``) then channel side (``qhat, mhat, Vhat, thetahat``), component by component."""
        d, ms = self.derivation, self.derivation.symbols
        out = {}
        for name in ("V", "q", "m", "theta"):
            out.update({c: d.overlaps[c] for c in ms.packed(name)})
        for name in packing.CONJUGATES:
            out.update({c: d.conjugates[c] for c in ms.packed(name)})
        return out

    @property
    def equivalent_forms(self) -> Dict[str, sp.Expr]:
        """``thetahat_dl_*``, ``Vhat_thetahat_*``, ``Vhat_dl_*``, ``*_second_order`` keyed by component name."""
        d = self.derivation

        def renamed(forms, prefix, base):
            return {prefix + c.name[len(base):]: e for c, e in forms.items()}

        out = renamed(d.thetahat_dl, "thetahat_dl", "thetahat")
        out.update(renamed(d.Vhat_thetahat, "Vhat_thetahat", "Vhat"))
        out.update(renamed(d.Vhat_dl, "Vhat_dl", "Vhat"))
        for c, e in d.second_order.items():
            base = "Vhat" if c.name.startswith("Vhat") else "thetahat"
            out[base + "_second_order" + c.name[len(base):]] = e
        return out

    @property
    def definitions(self) -> Dict[str, str]:
        d, ms = self.derivation, self.derivation.symbols
        L, r, t, k = ms.shape
        x = ", ".join(n for n in packing.token_names("zeta", ms.shape)[:r]) + ", " \
            + ", ".join(packing.token_names("hs", ms.shape)[:t])
        return {
            "shape": f"L = {L} tokens, student rank r = {r}, teacher rank t = {t}, k = {k} positional directions",
            "P": f"positions, the L x k matrix {[list(p) for p in d.positions]}",
            "Expect": "expectation over the per-token Gaussians x_l = (zeta_l, h*_l), independent across tokens, "
                      "each N(0, Sigma) (docs/theory.md, section 4.2)",
            "Sigma": f"{ms.Sigma.tolist()}, the covariance of x_l (token 1: {x}); rho = sigma**2",
            "Sigmainv": "the entries of Sigma^{-1}",
            "K": f"the entries of K = C^{{-1}}, C = {d.curvature.tolist()} (the penalty's curvature plus sigma**2 Vhat)",
            "w": "w_l = (P m)_l + zeta_l (names " + ", ".join(packing.token_names("w", ms.shape)) + ")",
            "hs": "h*_l, the teacher pre-activations (names " + ", ".join(packing.token_names("hs", ms.shape)) + ")",
            "M": f"{ms.M_of} = min_h 1/2 sum_l (h_l - w_l)^T V^{{-1}} (h_l - w_l) + l(h; hs), the Moreau envelope "
                 "(docs/theory.md, section 4.3)",
            "l": "l(h; hs) = (sigma**2/2)*|S(h) - T(hs)|_F**2, S(h) of h h^T, T(hs) = (1 - omega)*"
                 "T0(hs hs^T) + omega*A, T0 the teacher's attention (key 'loss' gives l explicitly)",
            "f": "f_l = V^{-1} (h_l - w_l) at the prox h: f_l = -dM/dw_l (envelope theorem; names "
                 + ", ".join(packing.token_names("f", ms.shape)) + ")",
            "g": "g_l = dl/dhs_l at the prox: g_l = dM/dhs_l (names " + ", ".join(packing.token_names("g", ms.shape))
                 + ")",
            "packing": "symmetric r x r matrices (q, V, qhat, Vhat) by their upper triangle, q_12 = q[1, 2]; "
                       "others row-major, m_1_2 = m[1, 2]; a 1 x 1 matrix by its bare name",
        }


def report(spec: ModelSpec) -> Union[Report, MatrixReport]:
    """The equations of ``spec``: in ``xi, y`` for the two-token rank-one model, as matrices otherwise."""
    if spec.is_two_token_rank_one:
        return Report(spec=spec, derivation=derive_lines(spec))
    return MatrixReport(spec=spec, derivation=derive(spec))
