"""The computed rows of an output folder (:class:`Data`), the one long schema of the tidy
tables behind the figures (:data:`FIGURE_COLUMNS`), and the key numbers the report
quotes (:data:`KEY_COLUMNS`, :func:`key_number`).

A figure's table has one row per drawn value: ``source`` (``theory``, ``gd``, ``gamp``, ``baseline``,
``threshold``, ``spinodal``, ``histogram``, ...), the model, ``branch`` (a theory branch,
``global`` for the global minimiser) or ``init`` (a simulation's start), the optimiser,
``d``, ``alpha``, ``run`` (the run index of a single run's row), ``epoch`` (a training
curve's), the ``quantity``, its ``value``, its ``error`` (a theory error estimate, the
standard error of a mean over ``n`` runs, or where a figure says so the standard
deviation over them) and ``n``.
"""
from __future__ import annotations

import math
from collections import defaultdict
from pathlib import Path
from typing import Iterable, Optional

import numpy as np

from tidyio import is_true, number, read_table

from .plan import GAMP_RUNS, GD_RUNS, HISTOGRAM_RUNS, INFORMED, REFERENCE_POINTS, THEORY_CURVES, THRESHOLDS, authors_key
from .published import PUBLISHED, lookup

FIGURE_COLUMNS = ("source", "model", "omega", "branch", "init", "optimizer", "d", "alpha", "run", "epoch",
                  "quantity", "value", "error", "n")
KEY_COLUMNS = ("figure", "quantity", "label", "model", "omega", "branch", "ours", "ours_error", "ours_how",
               "reference", "reference_error", "reference_source", "difference", "tolerance", "verdict",
               "evidence_for")
#: verdicts of a key number against its reference
AGREES, DIFFERS = "agrees", "differs"
NO_ERROR_BAR, NOT_FOUND = "no error bar", "not found"
#: a simulated mean against the theory: agreement within this many combined standard errors
SIMULATION_TOLERANCE = 2.0
#: the quantities of a gradient-descent run that the figures average
GD_QUANTITIES = ("test_error", "train_loss", "m", "theta_over_sigma2", "q", "linear_test_error")
#: the quantities of a GAMP run that the tables average (over its converged runs), besides those it shares
#: with gradient descent's: its iterations and the relative gradient of the risk at its fixed point
GAMP_CHECKS = ("iterations", "risk_gradient_norm")
#: the quantity of a GAMP table row that counts the runs that did not converge at a point
NOT_CONVERGED = "runs_not_converged"
THEORY_QUANTITIES = ("q", "m", "V", "theta", "theta_over_sigma2", "test_error", "train_loss")


class Data:
    """The rows of the data files of ``out``, read once (cells are text)."""

    def __init__(self, out):
        out = Path(out)

        def rows(name):
            # by task key (a task's rows keep their order): the files hold tasks in the order
            # they finished, and a sum over rows must not depend on it (a resumed run's figures
            # are an uninterrupted one's to the last digit)
            return sorted(read_table(out / name).rows, key=lambda r: r["task"])

        self.curves = rows(THEORY_CURVES)
        self.points = rows(REFERENCE_POINTS)
        self.thresholds_rows = rows(THRESHOLDS)
        self.gd_rows = rows(GD_RUNS)
        self.histogram_rows = rows(HISTOGRAM_RUNS)
        self.gamp_rows = rows(GAMP_RUNS)
        self._gd_index = defaultdict(list)
        for r in self.gd_rows:
            self._gd_index[(r["model"], r["d"], r["optimizer"])].append(r)

    def curve(self, model: str, branch: str) -> list:
        """The rows of a branch curve, by ``alpha`` (one per grid point; ``exists`` says whether
        the branch was found there)."""
        key = f"curve:{model}:branch={branch}"
        return sorted((r for r in self.curves if r["task"] == key), key=lambda r: number(r["alpha"]))

    def authors_curve(self, authors) -> list:
        """The rows of our branch at the alphas of one of the authors' files (``TaskBuilder.authors_curve``)."""
        key = authors_key(authors)
        return sorted((r for r in self.curves if r["task"] == key), key=lambda r: number(r["alpha"]))

    def point(self, model: str, branch: str, alpha: float) -> Optional[dict]:
        for r in self.points:
            if r["model"] == model and r["branch"] == branch and abs(number(r["alpha"]) - alpha) < 1e-9:
                return r
        return None

    def thresholds(self, model: str, precision: str) -> Optional[dict]:
        key = f"thresholds:{model}:precision={precision}"
        return next((r for r in self.thresholds_rows if r["task"] == key), None)

    def gd(self, model: str, d: int, optimizer: str = "gd") -> list:
        return self._gd_index.get((model, str(d), optimizer), [])

    def gamp(self, model: str, d: int) -> list:
        """The GAMP runs of ``model`` at ``d``, converged or not (``converged`` says which)."""
        return [r for r in self.gamp_rows if r["model"] == model and r["d"] == str(d)]

    def histogram(self, kind: str) -> list:
        return sorted((r for r in self.histogram_rows if r["kind"] == kind), key=lambda r: int(r["run_index"]))


# --------------------------------------------------------------------------- figure tables


def row(source: str, quantity: str, value, error=math.nan, **context) -> dict:
    """One row of a figure's table (missing columns empty)."""
    out = {k: "" for k in FIGURE_COLUMNS}
    out.update(context, source=source, quantity=quantity, value=float(value), error=float(error))
    return out


def published_rows(quantities: Iterable[str]) -> list:
    """The published values of these quantities (:data:`attnphase.paper.published.PUBLISHED`) as rows of
    source ``published``, so that a figure draws them from its own table."""
    def blank(v):
        return "" if v is None else v

    return [row("published", p.quantity, p.value, p.error, model=p.model, omega=blank(p.omega), branch=p.branch,
                alpha=blank(p.alpha)) for p in PUBLISHED if p.quantity in tuple(quantities)]


def exists(r: dict) -> bool:
    return is_true(r.get("exists")) and is_true(r.get("converged"))


def theory_value(r: dict, quantity: str) -> tuple:
    """``(value, error)`` of a theory row (``theta_over_sigma2`` is ``theta / sigma^2``)."""
    if quantity == "theta_over_sigma2":
        s2 = number(r["sigma"]) ** 2
        return number(r["theta"]) / s2, number(r.get("theta_error")) / s2
    return number(r[quantity]), number(r.get(f"{quantity}_error"))


def theory_rows(data: Data, model: str, quantities: Iterable[str], omega=None) -> list:
    """Both branches of ``model`` where they exist, and the global minimiser (the branch
    with the lower training loss at each ``alpha``), for each quantity."""
    out = []
    quantities = tuple(quantities)
    by_alpha = defaultdict(dict)
    for branch in INFORMED:
        for r in data.curve(model, branch):
            if not exists(r):
                continue
            by_alpha[number(r["alpha"])][branch] = r
            for q in quantities:
                v, e = theory_value(r, q)
                out.append(row("theory", q, v, e, model=model, omega=r["omega"], branch=branch, alpha=r["alpha"]))
    for a, found in sorted(by_alpha.items()):
        best = min(found.values(), key=lambda r: number(r["train_loss"]))
        for q in quantities:
            v, e = theory_value(best, q)
            out.append(row("theory", q, v, e, model=model, omega=best["omega"], branch="global", alpha=a))
    return out


def authors_rows(data: Data, files: Iterable) -> list:
    """The authors' stored fixed points of ``files`` beside ours, field by field
    (:func:`attnphase.paper.authors.compare`)."""
    from .authors import FIELDS, compare

    out = []
    for f in files:
        ours = {}
        for r in data.authors_curve(f):
            if exists(r):
                ours[number(r["alpha"])] = {k: number(r.get(k)) for name, _, _ in FIELDS
                                            for k in (name, f"{name}_error")}
        out += compare(f, ours)
    return out


def authors_threshold_rows(data: Data, files: Iterable, precision: str) -> list:
    """Per model of ``files`` and threshold: the printed value (where the paper prints one), the
    one the authors' stored points give (:func:`attnphase.paper.authors.stored_thresholds`, with our
    linear baseline of the model) and ours (the model's thresholds row, where computed)."""
    from .authors import stored_thresholds
    from .plan import model_label

    groups = defaultdict(list)
    for f in files:
        groups[f.spec].append(f)
    out = []
    for spec, mine in groups.items():
        model = model_label(spec)
        rows = [r for b in INFORMED for r in data.curve(model, b)] + [r for f in mine for r in data.authors_curve(f)]
        baseline = next((number(r.get("linear_test_error")) for r in rows if r.get("linear_test_error", "") != ""),
                        math.nan)
        stored = stored_thresholds(mine, baseline)
        ours = data.thresholds(model, precision)
        for q in ("alpha_c", "alpha_l"):
            # the paper prints thresholds of the default model only
            printed = lookup(q, omega=spec.omega) if spec == spec.__class__(omega=spec.omega) else None
            out.append({"model": model, "quantity": q, "printed": printed.value if printed else math.nan,
                        "stored": stored[q], "ours": number(ours[q]) if ours else math.nan,
                        "ours_error": number(ours[f"{q}_error"]) if ours else math.nan, "baseline": baseline})
    return out


def loss_gap_rows(data: Data, model: str) -> list:
    """``F_pos - F_sem`` where both branches exist (negative below ``alpha_c``)."""
    sem = {number(r["alpha"]): r for r in data.curve(model, "semantic") if exists(r)}
    out = []
    for r in data.curve(model, "positional"):
        a = number(r["alpha"])
        if exists(r) and a in sem:
            gap = number(r["train_loss"]) - number(sem[a]["train_loss"])
            err = number(r.get("train_loss_error")) + number(sem[a].get("train_loss_error"))
            out.append(row("theory", "train_loss_gap", gap, err, model=model, omega=r["omega"], alpha=a))
    return out


def spinodal_rows(data: Data, model: str) -> list:
    """Where each branch ended while it was followed along the grid."""
    out = []
    for branch in INFORMED:
        rows = data.curve(model, branch)
        for side in ("lower", "upper"):
            a = number(rows[0].get(f"spinodal_{side}_alpha")) if rows else math.nan
            if math.isfinite(a):
                out.append(row("spinodal", side, a, number(rows[0].get(f"spinodal_{side}_alpha_error")),
                               model=model, omega=rows[0]["omega"], branch=branch, alpha=a))
    return out


def baseline_rows(data: Data, model: str) -> list:
    rows = [r for b in INFORMED for r in data.curve(model, b)]
    if not rows:
        return []
    r = rows[0]
    return [row("baseline", "linear_test_error", number(r["linear_test_error"]), number(r["linear_test_error_error"]),
                model=model, omega=r["omega"])]


def threshold_rows(data: Data, model: str, precision: str) -> list:
    r = data.thresholds(model, precision)
    if r is None:
        return []
    return [row("threshold", q, number(r[q]), number(r[f"{q}_error"]), model=model, omega=r["omega"],
                branch=precision) for q in ("alpha_c", "alpha_l")]


def gd_rows(data: Data, model: str, d: int, optimizer: str = "gd", quantities=GD_QUANTITIES,
            inits: Optional[Iterable[str]] = None) -> list:
    """Means and standard errors over the runs at each ``(alpha, init)``."""
    groups = defaultdict(list)
    for r in data.gd(model, d, optimizer):
        if inits is None or r["init"] in inits:
            groups[(number(r["alpha"]), r["init"])].append(r)
    out = []
    for (a, init), runs in sorted(groups.items()):
        for q in quantities:
            vals = np.array([number(r.get(q)) for r in runs], dtype=float)
            mean, sem = mean_sem(vals)
            out.append(row("gd", q, mean, sem, model=model, omega=runs[0]["omega"], init=init, optimizer=optimizer,
                           d=d, alpha=a, n=len(vals)))
    return out


def gamp_rows(data: Data, model: str, d: int, quantities=GD_QUANTITIES[:-1] + GAMP_CHECKS,
              inits: Optional[Iterable[str]] = None) -> list:
    """Per ``(alpha, init)`` of the GAMP runs: means and standard errors over the runs that converged
    (``n`` their count), source ``gamp``, and one row :data:`NOT_CONVERGED` whose value counts the
    others. A point none of whose runs converged has that row alone: no mean is made of nothing."""
    groups = defaultdict(list)
    for r in data.gamp(model, d):
        if inits is None or r["init"] in inits:
            groups[(number(r["alpha"]), r["init"])].append(r)
    out = []
    for (a, init), runs in sorted(groups.items()):
        converged = [r for r in runs if is_true(r.get("converged"))]
        context = dict(model=model, omega=runs[0]["omega"], init=init, optimizer="gamp", d=d, alpha=a)
        for q in quantities if converged else ():
            vals = np.array([number(r.get(q)) for r in converged], dtype=float)
            mean, sem = mean_sem(vals)
            out.append(row("gamp", q, mean, sem, n=len(vals), **context))
        out.append(row("gamp", NOT_CONVERGED, len(runs) - len(converged), n=len(runs), **context))
    return out


def mean_sem(values) -> tuple:
    """Mean and standard error of the mean (NaN for fewer than two values)."""
    v = np.asarray(values, dtype=float)
    v = v[np.isfinite(v)]
    if v.size == 0:
        return math.nan, math.nan
    return float(v.mean()), float(v.std(ddof=1) / math.sqrt(v.size)) if v.size > 1 else math.nan


def select(rows: Iterable[dict], **match) -> list:
    """Rows whose cells equal ``match`` (compared as text; numbers through :func:`number`)."""
    out = []
    for r in rows:
        ok = True
        for k, v in match.items():
            cell = r.get(k, "")
            if isinstance(v, (int, float)) and not isinstance(v, bool):
                if not (cell != "" and abs(number(cell) - v) <= 1e-9 * max(1.0, abs(v))):
                    ok = False
                    break
            elif str(cell) != str(v):
                ok = False
                break
        if ok:
            out.append(r)
    return out


def series(rows: Iterable[dict], **match) -> tuple:
    """``(alpha, value, error)`` arrays of the matching rows, sorted by ``alpha``."""
    sel = sorted(select(rows, **match), key=lambda r: number(r["alpha"]))
    a = np.array([number(r["alpha"]) for r in sel], dtype=float)
    v = np.array([number(r["value"]) for r in sel], dtype=float)
    e = np.array([number(r["error"]) for r in sel], dtype=float)
    return a, v, e


def one(rows: Iterable[dict], **match) -> Optional[dict]:
    sel = select(rows, **match)
    return sel[0] if sel else None


# --------------------------------------------------------------------------- key numbers


def key_number(figure: str, quantity: str, label: str, ours: float, ours_error: float, how: str, *,
               model: str = "", omega=None, branch: str = "", evidence_for: str = "",
               published_for: Optional[dict] = None, theory: Optional[tuple] = None) -> dict:
    """A key number and what it is compared with: the published value that applies
    (``published_for``: the arguments of :func:`attnphase.paper.published.lookup`), or for a
    simulated number our theory (``theory = (value, error, how)``). ``difference`` is
    ``ours - reference``; the verdict compares it with the ``tolerance``: our error bar
    combined in quadrature with the reference's stated error, for a published value, and
    twice that for a simulation against the theory (a mean of few runs scatters by its
    standard error). ``evidence_for``: the key number of the same figure that this one
    bears on (the report lists it under that one when that one differs)."""
    out = {k: "" for k in KEY_COLUMNS}
    out.update(figure=figure, quantity=quantity, label=label, model=model, omega="" if omega is None else omega,
               branch=branch, ours=float(ours), ours_error=float(ours_error), ours_how=how,
               evidence_for=evidence_for)
    ref = None
    p = lookup(**published_for) if published_for is not None else None
    if p is not None:
        ref, factor = (p.value, p.error, p.source), 1.0
    elif theory is not None:
        ref, factor = theory, SIMULATION_TOLERANCE
    if ref is None:
        return out
    value, error, source = ref
    diff = float(ours) - float(value)
    out.update(reference=float(value), reference_error=float(error), reference_source=source, difference=diff)
    spread = math.hypot(ours_error, error if math.isfinite(error) else 0.0)
    if not math.isfinite(ours) or not math.isfinite(float(value)):
        out["verdict"] = NOT_FOUND
    elif not math.isfinite(spread):
        out["verdict"] = NO_ERROR_BAR
    else:
        out["tolerance"] = factor * spread
        out["verdict"] = AGREES if abs(diff) <= factor * spread else DIFFERS
    return out
