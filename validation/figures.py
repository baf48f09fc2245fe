"""Figures of ``attnphase validate``, drawn from its CSV files alone, and a Markdown table."""
from __future__ import annotations

import math
import os
from typing import Sequence

import numpy as np

from numerics.overlaps import COMPETING_BRANCHES
from numerics.tidy import atomic_output, read_rows


_PANELS = (("test_error", "test error"), ("train_loss", "training loss"),
           ("theta_over_sigma2", r"$\theta/\sigma^2$"), ("m", "$m$"))
#: the general model's panels: its outputs and the largest singular values of theta and m
_GENERAL_PANELS = (("test_error", "test error"), ("train_loss", "training loss"),
                   ("theta_sv_1", r"largest singular value of $\theta$"), ("m_sv_1", "largest singular value of $m$"))


_COLORS = {"semantic": "tab:blue", "positional": "tab:orange", "random": "tab:green",
           "trivial": "tab:gray", "mixed": "tab:purple", "linear": "k"}


def _f(x):
    try:
        return float(x)
    except (TypeError, ValueError):
        return float("nan")


def plot_validate(out: str) -> str:
    """Fig. 3-like figure from ``validate.csv`` (+ ``theory_curves.csv`` when present)."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    rows = read_rows(os.path.join(out, "validate.csv"))
    curves_path = os.path.join(out, "theory_curves.csv")
    curves = read_rows(curves_path) if os.path.exists(curves_path) else []
    general = not any(r["quantity"] == "m" for r in rows)
    branches = tuple(dict.fromkeys(c["branch"] for c in curves)) if general else COMPETING_BRANCHES + ("linear",)
    fig, axes = plt.subplots(1, 4, figsize=(16, 3.6))
    for ax, (qty, label) in zip(axes, _GENERAL_PANELS if general else _PANELS):
        for branch in branches:
            pts = sorted(((_f(c["alpha"]), _f(c["value"])) for c in curves
                          if c["branch"] == branch and c["quantity"] == qty and c["converged"] == "True"))
            if pts:
                ax.plot(*zip(*pts), color=_COLORS[branch], ls="--" if branch == "linear" else "-",
                        label=f"theory {branch}")
        for init in sorted({r["init"] for r in rows}):
            sel = [r for r in rows if r["init"] == init and r["quantity"] == qty]
            if not sel:
                continue
            for branch in sorted({r["branch"] for r in sel}) if general else (None,):
                part = [r for r in sel if branch is None or r["branch"] == branch]
                # the general model's runs are grouped by the branch they reached: one marker per branch
                ax.errorbar([_f(r["alpha"]) for r in part], [_f(r["sim_mean"]) for r in part],
                            yerr=[_f(r["sim_sem"]) for r in part], fmt="o" if init != "linear" else "s",
                            color=_COLORS.get(init, "k"), capsize=3, ms=4,
                            mfc="none" if branch not in (None, init, "linear") else None,
                            label="sim linear baseline" if init == "linear" else
                            f"sim {init} start" + (f" ({branch})" if branch else ""))
        ax.set_xlabel(r"$\alpha$")
        ax.set_title(label)
    axes[0].legend(fontsize=7)
    d = rows[0]["d"] if rows else "?"
    fig.suptitle(f"theory (lines) vs simulation (mean ± sem over seeds), d = {d}", fontsize=10)
    fig.tight_layout()
    path = os.path.join(out, "validate.png")
    with atomic_output(path) as tmp:
        fig.savefig(tmp, dpi=120)
    plt.close(fig)
    return path


def plot_dscan(out: str) -> str:
    """Quantities against ``1/d`` with the fitted lines and the theory at ``1/d = 0``."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    rows = read_rows(os.path.join(out, "dscan.csv"))
    fits = read_rows(os.path.join(out, "dscan_fit.csv"))
    fig, axes = plt.subplots(1, 4, figsize=(16, 3.6))
    for ax, (qty, label) in zip(axes, _PANELS):
        for init in sorted({r["init"] for r in rows}):
            sel = sorted((r for r in rows if r["init"] == init and r["quantity"] == qty), key=lambda r: _f(r["d"]))
            if not sel:
                continue
            color = _COLORS.get(init, "k")
            x = [1 / _f(r["d"]) for r in sel]
            ax.errorbar(x, [_f(r["sim_mean"]) for r in sel], yerr=[_f(r["sim_sem"]) for r in sel], fmt="o",
                        color=color, capsize=3, ms=4, label=f"sim {init}")
            for fit in fits:
                if fit["init"] == init and fit["quantity"] == qty:
                    xx = np.linspace(0, max(x), 20)
                    ax.plot(xx, _f(fit["a"]) + _f(fit["b"]) * xx, color=color, lw=1)
                    if math.isfinite(_f(fit["theory"])):
                        ax.plot([0], [_f(fit["theory"])], marker="*", color=color, ms=10, ls="none")
        ax.set_xlabel("1/d")
        ax.set_title(label)
    axes[0].legend(fontsize=7)
    fig.suptitle("finite-size scan: fit a + b/d (lines), theory at 1/d = 0 (stars)", fontsize=10)
    fig.tight_layout()
    path = os.path.join(out, "dscan.png")
    with atomic_output(path) as tmp:
        fig.savefig(tmp, dpi=120)
    plt.close(fig)
    return path


def markdown_table(rows: Sequence[dict], digits: int = 4,
                   cols: Sequence[str] = ("alpha", "init", "branch", "quantity", "sim_mean", "sim_sem", "theory", "z"),
                   ) -> str:
    """``validate.csv``-style rows as a Markdown table (for docs/validation.md)."""
    out = ["| " + " | ".join(cols) + " |", "|" + "---|" * len(cols)]
    for r in rows:
        cells = []
        for c in cols:
            v = r.get(c, "")
            x = _f(v)
            if c in ("alpha", "d"):
                cells.append(f"{x:g}")
            elif c == "z":
                cells.append("" if not math.isfinite(x) else f"{x:+.2f}")
            elif isinstance(v, (int, float)) or (isinstance(v, str) and math.isfinite(x)):
                cells.append(f"{x:.{digits}g}" if math.isfinite(x) else "")
            else:
                cells.append(str(v) if str(v) != "nan" else "")
        out.append("| " + " | ".join(cells) + " |")
    return "\n".join(out)
