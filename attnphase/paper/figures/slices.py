"""Figure 5: slices of the model space: the test error against ``alpha`` for several
``omega``, several ridge strengths ``lam`` and several ``sigma``; theory curves of both
branches and of the global minimiser, with gradient descent from both starts. Its key
numbers are each model's ``alpha_c`` and ``alpha_l``."""
from __future__ import annotations

from tidyio import number
from attnphase.sweeps.grid import fmt

from ..plan import default_model, model_label
from ..tables import Data, gd_rows, key_number, theory_rows, threshold_rows
from . import FigureSpec
from .drawing import finish_axes, new_figure

NAME = "slices"
PARAMETERS = (("omega", "slice_omegas"), ("lam", "slice_lams"), ("sigma", "slice_sigmas"))
COLORS = ("tab:blue", "tab:orange", "tab:green", "tab:red", "tab:purple")


def models(plan) -> list:
    """``(parameter, value, spec)`` of every model of the slices (the others at their defaults)."""
    out = []
    for name, attr in PARAMETERS:
        for v in getattr(plan, attr):
            out.append((name, v, default_model(v) if name == "omega" else default_model().replace(**{name: v})))
    return out


def title(plan) -> str:
    return "Slices: the test error for several omega, lam and sigma"


def what(plan) -> str:
    return ("Test error against alpha. Left: several omega; middle: several ridge strengths lam; right: several "
            f"sigma (the other parameters at the default model's values). Lines: theory ({plan.curve_precision}), "
            "the semantic branch solid, the positional branch dashed, the global minimiser thick and pale. "
            f"Markers: gradient descent (d = {plan.slice_gd.d}, {plan.slice_gd.seeds} runs per point; circles "
            "from the semantic start, squares from the positional one).")


def tasks(b) -> list:
    out = []
    for _, _, spec in models(b.plan):
        out += b.curves(spec) + [b.thresholds(spec)] + b.gd(spec, b.plan.slice_gd)
    return out


def table(data: Data, plan) -> list:
    out = []
    for _, _, spec in models(plan):
        model = model_label(spec)
        out += (theory_rows(data, model, ("test_error",))
                + gd_rows(data, model, plan.slice_gd.d, quantities=("test_error",))
                + threshold_rows(data, model, plan.threshold_precision))
    return out


def key_numbers(data: Data, rows: list, plan) -> list:
    out = []
    default = default_model()
    for name, v, spec in models(plan):
        model = model_label(spec)
        thr = data.thresholds(model, plan.threshold_precision)
        if thr is None:
            continue
        published = spec.replace(omega=default.omega) == default  # only the default family has published values
        for q in ("alpha_c", "alpha_l"):
            out.append(key_number(NAME, q, f"{q} at {name} = {fmt(v)}", number(thr[q]), number(thr[f"{q}_error"]),
                                  f"{plan.threshold_precision} precision"
                                  + (f"; {thr['threshold_message']}" if thr.get("threshold_status", "ok") != "ok"
                                     else ""), model=model, omega=spec.omega,
                                  published_for={"quantity": q, "omega": spec.omega} if published else None))
    return out


def draw(rows: list):
    import numpy as np

    from ..tables import select, series

    fig, axes = new_figure(1, 3, width=5.0, height=4.0)
    models_in = sorted({r["model"] for r in rows if r["model"]})
    for ax, (name, _) in zip(axes[0], PARAMETERS):
        mine = [m for m in models_in if _varies(m, name)]
        for color, model in zip(COLORS, sorted(mine, key=lambda m: _value(m, name))):
            value = _value(m=model, name=name)
            for branch, ls in (("semantic", "-"), ("positional", "--")):
                a, v, _ = series(rows, source="theory", quantity="test_error", branch=branch, model=model)
                ax.plot(a, v, ls, color=color, lw=1.3, label=f"{name} = {fmt(value)}" if branch == "semantic" else None)
            a, v, _ = series(rows, source="theory", quantity="test_error", branch="global", model=model)
            ax.plot(a, v, "-", color=color, lw=3, alpha=0.25)
            for init, marker in (("semantic", "o"), ("positional", "s")):
                a, v, e = series(rows, source="gd", quantity="test_error", init=init, model=model)
                if a.size:
                    ax.errorbar(a, v, yerr=np.where(np.isfinite(e), e, 0.0), fmt=marker, mfc="none", color=color,
                                ms=4, capsize=2, lw=0.8)
            for r in select(rows, source="threshold", quantity="alpha_c", model=model):
                ax.axvline(number(r["value"]), color=color, lw=0.6, ls=":")
        finish_axes(ax, "test error", title=f"several {name}")
    fig.suptitle("Test error against alpha: theory (lines) and gradient descent (markers)", fontsize=10)
    return fig


def _parts(model: str) -> dict:
    """The parameters named in a model label (``omega=0.3,lam=0.05``)."""
    out = {}
    for part in model.split(","):
        k, _, v = part.partition("=")
        out[k] = v
    return out


def _value(m: str, name: str) -> float:
    parts = _parts(m)
    return number(parts[name]) if name in parts else float(getattr(default_model(), name))


def _varies(model: str, name: str) -> bool:
    """Whether ``model`` belongs to the slice over ``name``: the default model belongs to
    all three; a model differing in one parameter to that one's."""
    parts = _parts(model)
    default_omega = _parts(model_label(default_model()))["omega"]
    others = {k for k in parts if k != "omega"}
    if name == "omega":
        return not others
    return (parts.get("omega") == default_omega) and others <= {name}


FIGURE = FigureSpec(NAME, title, what, tasks, table, key_numbers, draw)
