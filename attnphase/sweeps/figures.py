"""Phase-diagram figures drawn from the sweep CSVs alone.

``points_from_csv`` turns a tidy file (``theory.csv``: one row per grid point and
branch; ``simulation.csv``: one row per run; or an already derived ``*_points.csv``)
into one row per ``(omega, alpha)``:

* ``train_loss_diff = train_loss(positional) - train_loss(semantic)`` (docs/theory.md, section 3.4:
  negative where the positional minimum is global, i.e. below ``alpha_c``);
* ``test_error_diff = test_error(global minimiser) - linear baseline`` (negative where
  attention beats the linear positional baseline, i.e. above ``alpha_l``).

For theory rows the global minimiser is the existing, converged branch with the lower
training loss (the free energy at the fixed point). For simulations the "branch" is the
start (``init``), values are means over runs, and the baseline is the simulated one.

For the general model (any model but the two-token rank-one one, docs/theory.md, section 4)
a point has ``global_branch``, the existing, converged branch of lowest training loss among
all those followed (semantic, positional, trivial, mixed), ``train_loss_<branch>`` of each,
and ``test_error_diff``; the figure's first map is then ``global_branch``, by colour.

Where the theory rows carry the replica-symmetric stability (``attnphase phase-diagram --stability``),
a point has ``global_rs_unstable``: whether the global branch there is not replica-symmetric stable
(``numerics.api.rs_unstable``; docs/gamp.md, section 5), and both maps mark such points with a cross.

``plot_file`` draws both as colour maps over ``(alpha, omega)`` with ``alpha_c(omega)``
and ``alpha_l(omega)`` from ``thresholds.csv`` overlaid, and the spinodals (those met
while following the branches, from ``theory.csv``, else those of ``thresholds.csv``), in
PNG and PDF. It
never imports pyplot (no display needed) and never recomputes anything.
"""
from __future__ import annotations

import json
import logging
import math
import re
from collections import defaultdict
from pathlib import Path
from typing import Optional, Sequence

import numpy as np

from numerics.api import COMPETING_BRANCHES
from tidyio import UnreadableFile, atomic_output, check_table, is_true, number

from .store import THRESHOLDS_CSV

log = logging.getLogger(__name__)

#: what each file drawn must hold
DIAGRAM_WHAT = "a phase-diagram CSV (theory.csv, simulation.csv or *_points.csv)"
THRESHOLDS_WHAT = "a thresholds CSV of attnphase phase-diagram"
THRESHOLD_FILE_COLUMNS = ("omega", "alpha_c", "alpha_c_error", "alpha_l", "alpha_l_error")
POINT_COLUMNS = ("omega", "alpha", "source", "train_loss_semantic", "train_loss_positional", "train_loss_diff",
                 "train_loss_diff_error", "global_branch", "global_test_error", "linear_test_error",
                 "test_error_diff", "test_error_diff_error")

#: the replica-symmetric stability of a theory row (``numerics.api.rs_unstable``'s arguments, in order)
STABILITY_COLUMNS = ("rs_stability", "rs_switching", "rs_switching_error")
#: the legend of the points marked where the global branch is not replica-symmetric stable
RS_UNSTABLE_TEXT = "global minimum not replica-symmetric stable"

#: the columns of each kind of file whose numbers are drawn (besides ``train_loss_<branch>``)
DRAWN_NUMBERS = {
    "theory": ("train_loss", "train_loss_error", "test_error", "test_error_error", "linear_test_error",
               "linear_test_error_error", "spinodal_lower_alpha", "spinodal_upper_alpha"),
    "simulation": ("train_loss", "test_error", "linear_test_error"),
    "points": tuple(c for c in POINT_COLUMNS if c not in ("source", "global_branch")),
}


def file_kind(rows: list) -> str:
    if not rows:
        raise ValueError("the file has no data rows")
    cols = rows[0].keys()
    if "train_loss_diff" in cols or "test_error_diff" in cols:
        return "points"
    if "branch" in cols:
        return "theory"
    if "init" in cols and "run_index" in cols:
        return "simulation"
    if "alpha_c" in cols:
        return "thresholds"
    raise ValueError("not a phase-diagram CSV (no 'branch', 'init' or 'train_loss_diff' column)")


def _constant_columns(rows: list, skip: Sequence[str]) -> dict:
    """Columns whose value is the same in every row (the model and solver settings)."""
    out = {}
    for k in rows[0]:
        if k in skip:
            continue
        v = rows[0][k]
        if v != "" and all(r.get(k) == v for r in rows):
            out[k] = v
    return out


def _point(omega, alpha, source: str, branches: Sequence[str], values: dict, lin: float, lin_err: float) -> dict:
    """One derived point from the values of each usable branch (or start), ``{branch: (train_loss,
    train_loss_error, test_error, test_error_error)}`` with finite training losses: each branch's
    training loss (NaN where it has none), the paper's pair's difference where ``branches`` are those
    two, and the global one (lowest training loss; of two equal ones the first in ``branches``)
    with its test error minus the linear baseline."""
    p = {"omega": omega, "alpha": alpha, "source": source}
    p.update({f"train_loss_{b}": values[b][0] if b in values else math.nan for b in branches})
    if set(branches) == set(COMPETING_BRANCHES):
        p.update(train_loss_diff=p["train_loss_positional"] - p["train_loss_semantic"],
                 train_loss_diff_error=sum(_zero_nan(values[b][1]) for b in COMPETING_BRANCHES if b in values))
    g = min((b for b in branches if b in values), key=lambda b: values[b][0], default="")
    _, _, gte, gerr = values.get(g, (math.nan, 0.0, math.nan, math.nan))
    p.update(global_branch=g, global_train_loss=values[g][0] if g else math.nan, global_test_error=gte,
             linear_test_error=lin, test_error_diff=gte - lin, test_error_diff_error=_zero_nan(gerr) + lin_err)
    return p


def _usable(r: Optional[dict]) -> bool:
    return r is not None and is_true(r.get("exists", "True")) and is_true(r.get("converged", "True"))


def theory_points(rows: list) -> list:
    """The points of a diagram's ``theory.csv``, for every model: at each ``(omega, alpha)`` the
    global branch (lowest training loss among the existing, converged branches; of two equal ones
    the first in the order of the branches), its training loss and its test error minus the linear
    baseline (with their errors), and each branch's training loss (``train_loss_<branch>``); where the
    branches are the paper's two competing ones, also their difference ``train_loss_diff``
    (positional - semantic) with its error, which the first map then shows."""
    from numerics.api import GENERAL_BRANCHES, rs_unstable

    stability = any(str(r.get("rs_stability", "")).strip() for r in rows)
    groups = defaultdict(dict)
    for r in rows:
        groups[(number(r["omega"]), number(r["alpha"]))][r["branch"]] = r
    present = {r["branch"] for r in rows}
    branches = [b for b in GENERAL_BRANCHES if b in present] + sorted(present - set(GENERAL_BRANCHES))
    omegas, alphas = {w for w, _ in groups}, {a for _, a in groups}
    missing = sum(b not in groups.get((w, a), {}) for w in omegas for a in alphas for b in branches)
    if missing:  # a sweep writes every grid point of every branch, existing or not
        log.warning("%d of the %d (omega, alpha, branch) rows of the grid are missing; their points are drawn grey",
                    missing, len(omegas) * len(alphas) * len(branches))
    const = _constant_columns(rows, skip=("task", "omega", "alpha", "branch"))
    keep = {k: v for k, v in const.items() if _is_model_column(k) or k in _CONTEXT_THEORY}
    out = []
    for (w, a), by in sorted(groups.items()):
        values = {b: tuple(number(r.get(k)) for k in ("train_loss", "train_loss_error", "test_error", "test_error_error"))
                  for b, r in by.items() if b in branches and _usable(r)}
        values = {b: v for b, v in values.items() if math.isfinite(v[0])}
        lin_row = next(iter(by.values()))
        lin, lin_err = number(lin_row.get("linear_test_error")), _zero_nan(number(lin_row.get("linear_test_error_error")))
        point = _point(w, a, "theory", branches, values, lin, lin_err)
        if stability:
            g = by.get(point["global_branch"], {})
            point["global_rs_unstable"] = rs_unstable(*(number(g.get(k)) for k in STABILITY_COLUMNS))
        out.append({**point, **keep})
    return out


def _is_model_column(name: str) -> bool:
    """A column of the model's CSV schema (:meth:`derivations.spec.ModelSpec.to_columns`)
    other than ``omega``, which varies across a diagram: a scalar parameter or an entry
    of ``A`` or ``P``."""
    return name in _MODEL_SCALARS or re.fullmatch(r"[AP]\d+(_\d+)?", name) is not None


_MODEL_SCALARS = ("sigma", "lam", "attention", "teacher", "regulariser", "tokens", "rank", "teacher_rank")
_CONTEXT_THEORY = ("precision", "alpha_grid", "settings_hash")
_CONTEXT_SIM = ("d", "steps", "lr", "optimizer", "dtype", "n_test", "base_seed", "settings_hash")


def _zero_nan(x: float) -> float:
    return 0.0 if not math.isfinite(x) else x


def simulation_points(rows: list) -> list:
    """The points of a diagram's ``simulation.csv``, as :func:`theory_points` with each start
    started on a branch (``init``) in place of the branch: its runs' mean training loss and test
    error with their standard errors, the global start the one of lowest mean training loss, the
    baseline the runs' own. Runs from other starts (``random``) are left out: they are on no
    known branch."""
    from numerics.api import GENERAL_BRANCHES

    groups = defaultdict(lambda: defaultdict(list))
    for r in rows:
        groups[(number(r["omega"]), number(r["alpha"]))][r["init"]].append(r)
    present = {r["init"] for r in rows}
    inits = [b for b in GENERAL_BRANCHES if b in present]
    const = _constant_columns(rows, skip=("task", "omega", "alpha", "init", "run_index"))
    keep = {k: v for k, v in const.items() if _is_model_column(k) or k in _CONTEXT_SIM}
    out = []
    for (w, a), by in sorted(groups.items()):
        values = {b: (*_mean_sem(by[b], "train_loss"), *_mean_sem(by[b], "test_error")) for b in inits if b in by}
        values = {b: v for b, v in values.items() if math.isfinite(v[0])}
        lin, lin_err = _mean_sem([r for b in by for r in by[b]], "linear_test_error")
        p = _point(w, a, "simulation", inits, values, lin, _zero_nan(lin_err))
        p["n_runs"] = sum(len(v) for v in by.values())
        out.append({**p, **keep})
    return out


def _mean_sem(runs: list, key: str) -> tuple:
    """Mean and standard error of ``key`` over the runs where it is finite (NaN, NaN if none; error 0
    for one run)."""
    vals = np.array([number(r.get(key)) for r in runs], dtype=float)
    vals = vals[np.isfinite(vals)]
    if vals.size == 0:
        return math.nan, math.nan
    return float(vals.mean()), float(vals.std(ddof=1) / math.sqrt(vals.size)) if vals.size > 1 else 0.0


def read_diagram_file(path) -> list:
    """The rows of a file to draw, checked (:func:`tidyio.check_table`: readable
    throughout, finite ``omega`` and ``alpha``, of a kind with a grid); otherwise
    :class:`~tidyio.UnreadableFile` naming it."""
    rows = check_table(path, ("omega", "alpha"), DIAGRAM_WHAT, finite=("omega", "alpha")).rows
    try:
        kind = file_kind(rows)
    except ValueError as exc:
        raise UnreadableFile(f"{path}: {exc}") from None
    if kind == "thresholds":
        raise UnreadableFile(f"{path}: a thresholds file has no grid to draw; give theory.csv, simulation.csv "
                             f"or *_points.csv")
    if kind == "theory" and "task" not in rows[0]:
        omegas = sorted({number(r["omega"]) for r in rows})
        raise UnreadableFile(f"{path}: a curve CSV of attnphase curve or run (omega = "
                             f"{', '.join(f'{w:g}' for w in omegas)}), not {DIAGRAM_WHAT}: a map over "
                             f"(alpha, omega) needs a sweep's grid; draw a curve with attnphase curve --figure")
    header = rows[0].keys()
    drawn = [c for c in header if c in DRAWN_NUMBERS[kind] or (kind != "simulation" and c.startswith("train_loss_"))]
    for i, r in enumerate(rows, 1):
        for c in drawn:
            v = r[c].strip()
            if v and not _is_number(v):
                raise UnreadableFile(f"{path}: not {DIAGRAM_WHAT}: data row {i}: {c} = {r[c]!r} is not a number")
    return rows


def points_from_csv(path) -> list:
    return points_from_rows(read_diagram_file(path))


def points_from_rows(rows: list) -> list:
    kind = file_kind(rows)
    if kind == "theory":
        return theory_points(rows)
    if kind == "simulation":
        return simulation_points(rows)
    if kind == "points":
        return [{k: (number(v) if k not in ("source", "global_branch") and _is_number(v) else v)
                 for k, v in r.items()} for r in rows]
    raise ValueError("a thresholds file has no grid to draw; give theory.csv, simulation.csv or *_points.csv")


def _is_number(s) -> bool:
    try:
        float(s)
        return True
    except (TypeError, ValueError):
        return s == ""


def default_thresholds(path) -> Optional[Path]:
    """``thresholds.csv`` next to a diagram file, if there is one."""
    sibling = Path(path).parent / THRESHOLDS_CSV
    return sibling if sibling.exists() else None


def read_thresholds(path) -> tuple:
    """``(curves, spinodals)``: ``alpha_c``/``alpha_l`` per omega, and ``(branch, omega, alpha)``
    triples, from a thresholds file checked as :func:`read_diagram_file` checks its file."""
    curves, spinodals = [], []
    rows = check_table(path, THRESHOLD_FILE_COLUMNS, THRESHOLDS_WHAT, numeric=THRESHOLD_FILE_COLUMNS[1:],
                       finite=("omega",)).rows
    for r in rows:
        d = {k: number(r.get(k)) for k in ("omega", "alpha_c", "alpha_c_error", "alpha_l", "alpha_l_error")}
        curves.append(d)
        try:
            for sp in json.loads(r.get("spinodals") or "[]"):
                spinodals.append((sp.get("branch"), d["omega"], number(sp.get("alpha"))))
        except (ValueError, AttributeError):
            pass
    return sorted(curves, key=lambda d: d["omega"]), spinodals


def theory_spinodals(rows: list) -> list:
    """``(branch, omega, alpha)`` of the spinodals met while following the branches (theory.csv)."""
    found = set()
    for r in rows:
        for side in ("lower", "upper"):
            a = number(r.get(f"spinodal_{side}_alpha"))
            if math.isfinite(a):
                found.add((r.get("branch"), number(r.get("omega")), a))
    return sorted(found)


# --------------------------------------------------------------------------- drawing


def _edges(v: np.ndarray) -> np.ndarray:
    if v.size == 1:
        h = 0.05 * max(abs(v[0]), 1.0)
        return np.array([v[0] - h, v[0] + h])
    mid = 0.5 * (v[1:] + v[:-1])
    return np.concatenate([[v[0] - (mid[0] - v[0])], mid, [v[-1] + (v[-1] - mid[-1])]])


def _grid(points: list, key: str):
    omegas = np.array(sorted({p["omega"] for p in points}), dtype=float)
    alphas = np.array(sorted({p["alpha"] for p in points}), dtype=float)
    Z = np.full((omegas.size, alphas.size), np.nan)
    wi = {w: i for i, w in enumerate(omegas)}
    ai = {a: j for j, a in enumerate(alphas)}
    for p in points:
        Z[wi[p["omega"]], ai[p["alpha"]]] = number(p.get(key))
    return omegas, alphas, Z


def _title(points: list) -> str:
    p = points[0]
    parts = []
    for k in ("sigma", "lam"):
        if k in p:
            parts.append(f"{k}={p[k]}")
    if _compares_every_branch(points):
        parts.append(" ".join(f"{name}={number(p.get(k)):g}" for name, k in (("L", "tokens"), ("r", "rank"),
                                                                              ("t", "teacher_rank"))))
    elif all(f"A{i}{j}" in p for i in (1, 2) for j in (1, 2)):
        parts.append(f"A=[[{p['A11']},{p['A12']}],[{p['A21']},{p['A22']}]]")
    if "attention" in p:
        parts.append(str(p["attention"]))
    src = p.get("source", "")
    if src == "theory" and "precision" in p:
        src += f" ({p['precision']})"
    if src == "simulation" and "d" in p:
        src += f" (d={p['d']}, {p.get('n_runs', '?')} runs at the first point)"
    return " ".join(parts) + (f" - {src}" if src else "")


def _compares_every_branch(points: list) -> bool:
    """Points of a diagram of more than the paper's two branches (:func:`theory_points`): a global
    branch among several, no two-branch training-loss difference."""
    return "train_loss_diff" not in points[0]


#: the colour of each branch in the general model's map of the global branch
BRANCH_COLOURS = {"semantic": "tab:purple", "positional": "tab:orange", "mixed": "tab:cyan", "trivial": "0.55"}


def _draw_global_branch(ax, points: list) -> tuple:
    """The global branch at each grid point, one colour per branch; returns the grid's
    ``(omegas, alphas)``."""
    from matplotlib.colors import BoundaryNorm, ListedColormap
    from matplotlib.patches import Patch

    names = [b for b in BRANCH_COLOURS if any(p.get("global_branch") == b for p in points)]
    names += sorted({p.get("global_branch") for p in points} - set(BRANCH_COLOURS) - {"", None})
    code = {b: i for i, b in enumerate(names)}
    coded = [dict(p, global_branch_code=code.get(p.get("global_branch"), math.nan)) for p in points]
    omegas, alphas, Z = _grid(coded, "global_branch_code")
    colours = [BRANCH_COLOURS.get(b, f"C{i}") for i, b in enumerate(names)] or ["white"]
    ax.pcolormesh(_edges(alphas), _edges(omegas), np.ma.masked_invalid(Z), cmap=ListedColormap(colours),
                  norm=BoundaryNorm(np.arange(len(colours) + 1) - 0.5, len(colours)), shading="flat")
    if names:
        ax.legend(handles=[Patch(color=c, label=b) for b, c in zip(names, colours)], loc="best", fontsize=8,
                  title="global minimum", title_fontsize=8)
    return omegas, alphas


#: the colour of a grid point without a value, and what it means
NO_VALUE_COLOUR = "0.85"
NO_VALUE_TEXT = "grey: no value (a branch absent, past its spinodal, or not converged)"


def draw(points: list, thresholds: Optional[list] = None, spinodals: Optional[list] = None,
         title: Optional[str] = None):
    """A matplotlib Figure with the two colour maps and the threshold curves: the training-loss
    difference of the two branches (the two-token rank-one model) or the global branch (the
    general model), and the global minimiser's test error minus the linear baseline; a cross where
    the global branch is not replica-symmetric stable (``global_rs_unstable``)."""
    from matplotlib.colors import Normalize
    from matplotlib.figure import Figure

    fig = Figure(figsize=(12, 4.8), layout="constrained")
    axes = fig.subplots(1, 2)
    first = ("global_branch", "global minimum (lowest training loss)") if _compares_every_branch(points) \
        else ("train_loss_diff", "training loss: positional - semantic")
    panels = (first, ("test_error_diff", "test error: global minimiser - linear baseline"))
    grey = False
    for ax, (key, label) in zip(axes, panels):
        ax.set_facecolor(NO_VALUE_COLOUR)
        if key == "global_branch":
            omegas, alphas = _draw_global_branch(ax, points)
            grey = grey or any(not p.get("global_branch") for p in points)
        else:
            omegas, alphas, Z = _grid(points, key)
            grey = grey or not np.isfinite(Z).all()
            finite = Z[np.isfinite(Z)]
            vmax = float(np.max(np.abs(finite))) if finite.size else 1.0
            vmax = vmax if vmax > 0 else 1.0
            mesh = ax.pcolormesh(_edges(alphas), _edges(omegas), np.ma.masked_invalid(Z), cmap="RdBu_r",
                                 norm=Normalize(-vmax, vmax), shading="flat")
            fig.colorbar(mesh, ax=ax, label=label)
        _overlay(ax, thresholds or [], spinodals or [])
        _mark_rs_unstable(ax, points)
        ax.set_xlim(_edges(alphas)[[0, -1]])
        ax.set_ylim(_edges(omegas)[[0, -1]])
        ax.set_xlabel(r"$\alpha = n/d$")
        ax.set_ylabel(r"$\omega$")
        ax.set_title(label, fontsize=10)
    # one legend below the maps, for the curves and the grey cells (the general model's first map
    # carries the legend of its branch colours)
    handles, labels = axes[0].get_legend_handles_labels()
    if grey:
        from matplotlib.patches import Patch

        handles.append(Patch(facecolor=NO_VALUE_COLOUR, edgecolor="0.5", label=NO_VALUE_TEXT))
        labels.append(NO_VALUE_TEXT)
    if handles:
        fig.legend(handles, labels, loc="outside lower center", ncol=min(3, len(handles)), fontsize=9, frameon=False)
    fig.suptitle(title if title is not None else _title(points), fontsize=10)
    return fig


def _mark_rs_unstable(ax, points: list) -> None:
    """A black cross at each point whose global branch is not replica-symmetric stable."""
    marked = sorted((p["alpha"], p["omega"]) for p in points if is_true(p.get("global_rs_unstable", "")))
    if marked:
        a, w = zip(*marked)
        ax.plot(a, w, "+", color="k", ms=6, mew=1.2, ls="none", label=RS_UNSTABLE_TEXT)


def _overlay(ax, thresholds: list, spinodals: list) -> None:
    w = np.array([t["omega"] for t in thresholds])
    for key, style, color, label in (("alpha_c", "-o", "k", r"$\alpha_c(\omega)$"),
                                     ("alpha_l", "--s", "tab:green", r"$\alpha_l(\omega)$")):
        a = np.array([t[key] for t in thresholds])
        e = np.array([t[f"{key}_error"] for t in thresholds])
        ok = np.isfinite(a)
        if ok.any():
            ax.errorbar(a[ok], w[ok], xerr=np.where(np.isfinite(e[ok]), e[ok], 0.0), fmt=style, color=color,
                        ms=3, lw=1.3, capsize=2, label=label)
    for branch, color in (("semantic", "tab:purple"), ("positional", "tab:orange")):
        pts = sorted((o, a) for b, o, a in spinodals if b == branch and math.isfinite(a))
        if pts:
            o, a = zip(*pts)
            ax.plot(a, o, "x", color=color, ms=5, label=f"spinodal ({branch})")


def figure_paths(path, out_dir=None, formats: Sequence[str] = ("png", "pdf")) -> list:
    """The files :func:`plot_file` writes for ``path``: ``<stem>_diagram.<fmt>`` in ``out_dir``
    (default: next to it)."""
    path = Path(path)
    out_dir = Path(out_dir) if out_dir else path.parent
    stem = path.stem[:-len("_points")] if path.stem.endswith("_points") else path.stem
    return [out_dir / f"{stem}_diagram.{fmt_}" for fmt_ in formats]


def plot_file(path, out_dir=None, thresholds=None, formats: Sequence[str] = ("png", "pdf")) -> list:
    """Draw the figure of ``path`` into ``out_dir`` (default: next to it) as ``<stem>_diagram.<fmt>``.

    ``thresholds``: a thresholds CSV; ``None``: ``thresholds.csv`` next to ``path`` if present;
    ``False``: none.
    """
    path = Path(path)
    rows = read_diagram_file(path)
    if thresholds is None:
        thresholds = default_thresholds(path)
    curves, spinodals = read_thresholds(thresholds) if thresholds else ([], [])
    points = points_from_rows(rows)
    if file_kind(rows) == "theory":  # the spinodals met on the sweep's own grid and precision
        spinodals = theory_spinodals(rows) or spinodals
    fig = draw(points, curves, spinodals)
    targets = figure_paths(path, out_dir, formats)
    targets[0].parent.mkdir(parents=True, exist_ok=True)
    written = []
    for fmt_, target in zip(formats, targets):
        with atomic_output(target) as tmp:
            fig.savefig(tmp, dpi=150)
        written.append(target)
    return written
