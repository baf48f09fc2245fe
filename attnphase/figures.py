"""Figures of curves, drawn from tidy rows alone (the CSV files of ``attnphase curve`` and ``run``)."""
from __future__ import annotations

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402

from tidyio import UnreadableFile, atomic_output, check_table  # noqa: E402

#: the columns a curve CSV needs to be drawn: values, branch, global minimum, and the model
CURVE_COLUMNS = ("alpha", "branch", "q", "m", "theta", "test_error", "global_minimum", "sigma", "lam", "omega",
                 "attention", "teacher", "regulariser")
_NUMERIC_CURVE_COLUMNS = ("alpha", "q", "m", "theta", "test_error")


def _save(fig, stem):
    paths = []
    for ext in ("png", "pdf"):
        path = f"{stem}.{ext}"
        with atomic_output(path) as tmp:
            fig.savefig(tmp, dpi=130)
        paths.append(path)
    plt.close(fig)
    return paths


#: talk size: every text of a curve figure at least this many points
TALK_FONT = 13
BRANCH_COLOURS = {"semantic": "tab:blue", "positional": "tab:orange", "trivial": "tab:gray", "mixed": "tab:purple"}
TALK_RC = {"font.size": TALK_FONT, "axes.titlesize": TALK_FONT, "axes.labelsize": TALK_FONT + 1,
           "legend.fontsize": TALK_FONT, "xtick.labelsize": TALK_FONT, "ytick.labelsize": TALK_FONT,
           "figure.titlesize": TALK_FONT + 1, "lines.linewidth": 2}


def _talk_size(draw):
    """A figure function whose texts are drawn at talk size (:data:`TALK_RC`)."""
    import functools

    @functools.wraps(draw)
    def drawn(*args, **kwargs):
        with plt.rc_context(TALK_RC):
            return draw(*args, **kwargs)

    return drawn


def _converged(r) -> bool:
    return str(r.get("converged", "True")) == "True"


def grid_thresholds(rows, linear_test_error: float) -> dict:
    """``alpha_c`` and ``alpha_l`` read off a curve's grid by linear interpolation (no error
    estimate; ``attnphase thresholds`` computes them): where the global minimum first changes
    branch (the root of the two branches' training-loss difference between the grid points, or
    their midpoint where one of them is missing at either), and where the global minimum's test
    error first falls below the linear baseline. NaN where the grid shows neither."""
    import math

    by = {}
    for r in rows:
        if _converged(r):
            by.setdefault(float(r["alpha"]), {})[r["branch"]] = r

    def first_root(points):
        for (a0, f0), (a1, f1) in zip(points, points[1:]):
            if f0 != 0 and (f0 > 0) != (f1 > 0):
                return a0 + (a1 - a0) * f0 / (f0 - f1)
        return math.nan

    glob_rows = sorted((a, r) for a, b in by.items() for r in b.values() if str(r.get("global_minimum")) == "True")
    alpha_c = math.nan
    for (a0, r0), (a1, r1) in zip(glob_rows, glob_rows[1:]):
        if r0["branch"] != r1["branch"]:
            pair = (r0["branch"], r1["branch"])
            if all(set(pair) <= by[a].keys() for a in (a0, a1)):
                alpha_c = first_root([(a, float(by[a][pair[0]]["train_loss"]) - float(by[a][pair[1]]["train_loss"]))
                                      for a in (a0, a1)])
            if math.isnan(alpha_c):
                alpha_c = 0.5 * (a0 + a1)
            break
    glob = [(a, float(r["test_error"]) - linear_test_error) for a, r in glob_rows]
    return {"alpha_c": alpha_c, "alpha_l": first_root(glob)}


#: the overlap that defines each branch, drawn over sigma^2 (the trivial branch: q)
DEFINING = {"semantic": ("theta",), "positional": ("m",), "trivial": ("q",), "mixed": ("theta", "m")}
_INVARIANT = {"theta": "theta_singular_values_1", "m": "m_singular_values_1", "q": "q_eigenvalues_1"}
_SYMBOL = {"theta": r"\theta", "m": "m", "q": "q"}


def _overlap(r, name: str) -> float:
    """The largest invariant of an overlap (its largest singular value, or eigenvalue for ``q``)
    in a row of matrix overlaps; the absolute scalar in a row of the line quadrature's."""
    key = _INVARIANT[name]
    return float(r[key]) if str(r.get(key, "")) != "" else abs(float(r[name]))


def _rs_unstable(r) -> bool:
    """Whether a row's replica-symmetric stability (``attnphase curve --stability``) fails: the smooth
    replicon eigenvalue at or above 1, or switching surfaces of weight above two standard errors
    (docs/gamp.md, section 5). False where it was not computed."""
    def number(key):
        try:
            return float(r.get(key, ""))
        except ValueError:
            return float("nan")

    from numerics.api import rs_unstable

    return rs_unstable(number("rs_stability"), number("rs_switching"), number("rs_switching_error"))


@_talk_size
def plot_curves(rows, linear_test_error, marks, stem):
    """The branches of any model against alpha (the paper's Figure-2-like panel): the defining
    overlap of each branch over ``sigma^2`` (the largest singular value; the mixed branch both of
    its overlaps, ``m`` dashed) and the test error with its stated error, the global minimum
    dotted bold, a cross where the point is not replica-symmetric stable (:func:`_rs_unstable`), the linear baseline, ``alpha_c``, ``alpha_l`` and the spinodals from ``marks``
    (a dict: ``alpha_c``, ``alpha_l`` with their ``_error``, ``spinodals`` as the branches report
    them, and ``grid``: true where the thresholds are read off the grid, :func:`grid_thresholds`).
    Points that did not converge are not drawn. One legend below the panels; every text at
    least :data:`TALK_FONT` points."""
    import math

    sigma2 = float(rows[0]["sigma"]) ** 2 if rows else 1.0
    fig, axes = plt.subplots(1, 2, figsize=(12, 5.6))
    for branch, colour in BRANCH_COLOURS.items():
        pts = sorted((r for r in rows if r["branch"] == branch and _converged(r)), key=lambda r: float(r["alpha"]))
        if not pts:
            continue
        a = [float(r["alpha"]) for r in pts]
        glob = [str(r["global_minimum"]) == "True" for r in pts]
        test = [float(r["test_error"]) for r in pts]
        series = [(axes[1], test, "-", None)]
        for i, name in enumerate(DEFINING[branch]):
            series.append((axes[0], [_overlap(r, name) / sigma2 for r in pts], "-" if i == 0 else "--",
                           f"{branch} (${_SYMBOL[name]}/\\sigma^2$)"))
        for ax, ys, style, label in series:
            ax.plot(a, ys, style, color=colour, lw=2, label=label)
            ax.plot([x for x, g in zip(a, glob) if g], [y for y, g in zip(ys, glob) if g], "o", ms=6,
                    color=colour)
        unstable = [_rs_unstable(r) for r in pts]
        if any(unstable):
            for ax, ys, _, _ in series:
                ax.plot([x for x, u in zip(a, unstable) if u], [y for y, u in zip(ys, unstable) if u], "x", ms=9,
                        mew=2, color="k", label="not replica-symmetric stable")
        errors = [float(r.get("test_error_error") or "nan") for r in pts]
        if any(math.isfinite(e) and e > 0 for e in errors):
            axes[1].errorbar(a, test, [e if math.isfinite(e) else 0.0 for e in errors], fmt="none", ecolor=colour,
                             lw=0.8)
    axes[1].axhline(linear_test_error, color="k", ls="--", lw=1.5, label="linear baseline")
    axes[0].plot([], [], "o", color="0.3", ms=6, label="global minimum")
    how = " (grid)" if marks.get("grid") else ""
    for key, colour, style, name in (("alpha_c", "tab:red", "--", r"$\alpha_c$"),
                                     ("alpha_l", "tab:green", "-.", r"$\alpha_l$")):
        value = marks.get(key)
        if value is None or not math.isfinite(value):
            continue
        error = marks.get(f"{key}_error")
        text = f"{name} = {value:.4g}" + (f" $\\pm$ {error:.1g}" if error and math.isfinite(error) else "") + how
        for i, ax in enumerate(axes):
            ax.axvline(value, color=colour, ls=style, lw=2, label=text if i == 0 else None)
    seen = set()
    for sp in marks.get("spinodals") or ():
        branch = sp["branch"]
        for ax in axes:
            ax.axvline(sp["alpha"], color=BRANCH_COLOURS.get(branch, "k"), ls=(0, (1, 3)), lw=2,
                       label=None if (branch in seen or ax is axes[1]) else f"spinodal ({branch})")
        seen.add(branch)
    for ax in axes:
        ax.set_xlabel(r"$\alpha = n/d$")
    axes[0].set_ylabel("defining overlap")
    axes[1].set_ylabel("test error")
    m = rows[0] if rows else {}
    shape = "" if not m.get("tokens") else f"L = {m.get('tokens')}, r = {m.get('rank')}, t = {m.get('teacher_rank')}, "
    fig.suptitle(f"{shape}{m.get('attention')} attention, omega = {m.get('omega')}, sigma = {m.get('sigma')}, "
                 f"lam = {m.get('lam')}")
    _one_legend(fig, axes, bottom=0.2)
    return _save(fig, stem)


def _one_legend(fig, axes, bottom: float, ncol: int = 3) -> None:
    """One legend below the panels, of every labelled line in any of them (each label once)."""
    seen = {}
    for ax in axes:
        for handle, label in zip(*ax.get_legend_handles_labels()):
            seen.setdefault(label, handle)
    fig.tight_layout(rect=(0, bottom, 1, 1))
    if seen:
        fig.legend(list(seen.values()), list(seen), loc="lower center", ncol=min(ncol, len(seen)), frameon=False)


@_talk_size
def plot_model_comparison(curves, stem):
    """Curves of several models side by side (e.g. linear against softmax attention):
    ``curves`` maps a label to ``(rows, linear_test_error)``. Panels: ``q``, the defining
    overlap of each branch (``theta/sigma^2`` semantic, ``m/sigma^2`` positional) and the
    test error against alpha; colour by branch, line style by model, dots at the global
    minimum, each model's linear baseline dashed in its line style."""
    fig, axes = plt.subplots(1, 3, figsize=(16, 6))
    colours = {"semantic": "tab:blue", "positional": "tab:orange", "trivial": "tab:gray"}
    styles = ["-", "--", ":", "-."]
    for k, (label, (rows, linear_test_error)) in enumerate(curves.items()):
        ls = styles[k % len(styles)]
        for branch, colour in colours.items():
            pts = sorted((r for r in rows if r["branch"] == branch), key=lambda r: float(r["alpha"]))
            if not pts:
                continue
            sigma2 = float(pts[0]["sigma"]) ** 2
            a = [float(r["alpha"]) for r in pts]
            glob = [str(r["global_minimum"]) == "True" for r in pts]
            series = [(axes[0], [float(r["q"]) for r in pts]),
                      (axes[2], [float(r["test_error"]) for r in pts])]
            if branch != "trivial":
                key = "theta" if branch == "semantic" else "m"
                series.append((axes[1], [abs(float(r[key])) / sigma2 for r in pts]))
            for ax, ys in series:
                ax.plot(a, ys, ls, color=colour, lw=1.2, label=f"{label}: {branch}")
                ax.plot([x for x, g in zip(a, glob) if g], [y for y, g in zip(ys, glob) if g], "o", ms=3,
                        color=colour)
        axes[2].axhline(linear_test_error, color="k", ls=ls, lw=0.8, label=f"{label}: linear baseline")
    axes[0].set_ylabel("q")
    axes[1].set_ylabel(r"$\theta/\sigma^2$ (semantic), $m/\sigma^2$ (positional)")
    axes[2].set_ylabel("test error")
    axes[2].set_yscale("log")
    for ax in axes:
        ax.set_xlabel(r"$\alpha$")
    fig.suptitle("dots: global minimum among the branches found")
    _one_legend(fig, axes, bottom=0.22)
    return _save(fig, stem)


def read_curve_file(path, allow_empty: bool = False) -> tuple:
    """``(rows, model)`` of a curve CSV (written by ``attnphase curve`` or ``run``), checked:
    readable throughout, the :data:`CURVE_COLUMNS`, numbers where numbers belong and one
    model (:meth:`derivations.spec.ModelSpec.from_columns`); otherwise
    :class:`~tidyio.UnreadableFile` naming the file. ``allow_empty``: a file with a
    header and no rows gives ``([], None)``."""
    from derivations.spec import ModelSpec, ModelSpecError

    import math

    from tidyio import number

    what = "a curve CSV of attnphase curve or run"
    rows = check_table(path, CURVE_COLUMNS, what, numeric=_NUMERIC_CURVE_COLUMNS, finite=("alpha",),
                       allow_empty=allow_empty).rows
    if not rows:
        return [], None
    for i, r in enumerate(rows, 1):  # a converged point is drawn: its values must be numbers
        bad = [c for c in _NUMERIC_CURVE_COLUMNS if not math.isfinite(number(r[c]))]
        if bad and _converged(r):
            raise UnreadableFile(f"{path}: not {what}: data row {i} (alpha = {r['alpha']}, {r['branch']}) is marked "
                                 f"converged but {bad[0]} = {r[bad[0]]!r} is not a finite number")
    if not any(_converged(r) for r in rows):
        raise UnreadableFile(f"{path}: no converged point to draw (every row has converged = False)")
    try:
        model = ModelSpec.from_columns(rows[0])
    except (ModelSpecError, ValueError, KeyError) as exc:
        raise UnreadableFile(f"{path}: not {what}: its model columns do not give a model ({exc})") from None
    return rows, model


def model_label(spec) -> str:
    """A legend label: the student's attention, and the teacher's and ``beta`` where not the default."""
    parts = [f"{spec.attention} attention"]
    if spec.beta != 1.0:
        parts.append(f"beta={spec.beta:g}")
    if spec.teacher != "softmax":
        parts.append(f"teacher {spec.teacher}")
    return ", ".join(parts + [f"omega={spec.omega:g}"])


def plot_curve_files(paths, stem, default_model=None, labels=None):
    """The curves of several curve CSVs side by side (:func:`plot_model_comparison`), each
    read back from its file (:func:`read_curve_file`) and labelled by the model in its rows
    (:func:`model_label`, or ``labels[i]`` for file ``i``), with that model's linear baseline.
    ``default_model``: the model of a file without rows. Returns the figure paths."""
    from numerics.api import linear_baseline

    curves = {}
    for i, path in enumerate(paths):
        rows, model = read_curve_file(path, allow_empty=default_model is not None)
        model = model or default_model
        name = labels[i] if labels else model_label(model)
        while name in curves:
            name += "'"
        curves[name] = (rows, linear_baseline(model).test_error)
    return plot_model_comparison(curves, stem)
