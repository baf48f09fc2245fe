"""The one record of the thresholds of every model (:class:`Thresholds`), its changes of the
global branch (:class:`Transition`) and the errors of a threshold search.

The locator (:func:`numerics.thresholds.locate.locate_thresholds`) fills it with either strategy:
the deterministic one (Newton's method on the paper's two competing branches, with the spinodals of
the line quadrature) and the noisy one (every change of the global branch located on the scan, with
the scanned fixed points). ``alpha_c`` is the first change, ``transitions`` all of them.
"""
from __future__ import annotations

import copy
import dataclasses
import math
from typing import List

from derivations import ModelSpec

from numerics.solver.iteration import SolverError
from tidyio import finite_json, frame


class ThresholdError(RuntimeError):
    """There is no threshold to report, for a reason of the model (a subclass says which);
    a failure of the solver is a :class:`~numerics.solver.iteration.SolverError` instead."""


class BranchAbsent(ThresholdError):
    """A branch that the threshold needs does not exist on the scanned range (or where the
    other one does); the message gives its spinodal or what every start gave."""


class CrossingBeyondScan(ThresholdError):
    """Both branches exist, but the crossing is not on the scanned range, extended where
    the crossing lay beyond it; the message gives the range."""


class ThresholdLocationError(SolverError):
    """A solve that locating a threshold needs failed (did not converge, or lost its branch
    inside an interval where the scan found it): a failure of the solver, not an absence."""


class NotConverged(ThresholdLocationError):
    """A solve that a threshold needs did not converge (``point``: the failed fixed point)."""

    def __init__(self, message, point):
        super().__init__(message)
        self.point = point


@dataclasses.dataclass(frozen=True)
class Transition:
    """A change of the global minimum from branch ``below`` to branch ``above`` at ``alpha``."""

    alpha: float
    error: float
    below: str
    above: str
    kind: str          # crossing | appearance | disappearance | bifurcation
    bracket: tuple     # the scanned interval it was found in
    details: dict

    def to_dict(self) -> dict:
        return {"alpha": self.alpha, "error": self.error, "below": self.below, "above": self.above,
                "kind": self.kind, "bracket": list(self.bracket), "details": dict(self.details)}


@dataclasses.dataclass(frozen=True, repr=False)
class Thresholds:
    """``alpha_c`` (the first change of the global branch, ``transitions[0]``; NaN where there is
    none) and ``alpha_l`` (where the global minimum's test error falls below the linear baseline's;
    NaN with the reason in ``alpha_l_status``), with their errors; the baseline; every change
    of the global branch; the spinodals met (line quadrature); the scanned fixed points with
    the global minima marked (scan method); ``details`` of the root finding; ``notes``.
    ``error_reasons``: why an error is NaN (``{field: reason}``, e.g. a one-rule precision)."""

    alpha_c: float
    alpha_c_error: float
    alpha_l: float
    alpha_l_error: float
    linear_test_error: float
    linear_test_error_error: float
    precision: str
    model: ModelSpec
    wall_time: float
    alpha_l_status: str = "ok"   # otherwise why alpha_l is NaN (alpha_c is still valid)
    transitions: tuple = ()
    spinodals: list = dataclasses.field(default_factory=list)
    scan: tuple = ()
    details: dict = dataclasses.field(default_factory=dict)
    notes: tuple = ()
    error_reasons: dict = dataclasses.field(default_factory=dict)

    def __str__(self) -> str:
        """A summary a person reads: each change of the global branch, ``alpha_l``, the baseline, the
        spinodals and the notes, each number with its error (``to_dict()`` holds the whole record)."""
        from numerics.overlaps import value_with_error

        lines = [f"alpha_c = {value_with_error(t.alpha, t.error)}   {t.below} -> {t.above} ({t.kind})"
                 for t in self.transitions] or ["alpha_c: no change of the global branch on the scan"]
        lines.append(f"alpha_l = {value_with_error(self.alpha_l, self.alpha_l_error)}" if self.alpha_l_status == "ok"
                     else f"alpha_l: {self.alpha_l_status}")
        lines.append(f"linear baseline test error = "
                     f"{value_with_error(self.linear_test_error, self.linear_test_error_error)}")
        lines += [f"spinodal: {s['branch']} branch, {s.get('side', '')} end at alpha = "
                  f"{value_with_error(s['alpha'], s.get('alpha_error', math.nan))}" for s in self.spinodals]
        lines += [f"note: {n}" for n in self.notes]
        return f"thresholds ({self.precision})\n" + "\n".join(lines)

    def __repr__(self) -> str:
        first = f"alpha_c = {self.alpha_c:.6g}" if self.transitions else "no alpha_c"
        return f"<Thresholds {self.precision}: {first}, alpha_l = {self.alpha_l:.6g}>"

    def global_branches(self) -> List[tuple]:
        """``(alpha, branch)`` of the global minimum at each scanned alpha (empty without a scan)."""
        return sorted((p.alpha, p.branch) for p in self.scan if p.global_minimum)

    def to_dict(self) -> dict:
        """The record as a JSON-safe dict: a number that is not finite is ``None``, and
        ``null_reasons`` says why for each (``alpha_l``: its status; an error: ``error_reasons``)."""
        d = {"alpha_c": self.alpha_c, "alpha_c_error": self.alpha_c_error, "alpha_l": self.alpha_l,
             "alpha_l_error": self.alpha_l_error, "linear_test_error": self.linear_test_error,
             "linear_test_error_error": self.linear_test_error_error,
             "spinodals": [dict(s) for s in self.spinodals], "precision": self.precision,
             "model": self.model.to_dict(), "wall_time": self.wall_time,
             "details": copy.deepcopy(self.details), "alpha_l_status": self.alpha_l_status,
             "transitions": [t.to_dict() for t in self.transitions],
             "global_minimum": [{"alpha": a, "branch": b} for a, b in self.global_branches()],
             "scan": [{"alpha": p.alpha, "branch": p.branch, "status": p.status, "train_loss": p.train_loss,
                       "train_loss_error": p.error.get("train_loss"), "test_error": p.test_error,
                       "test_error_error": p.error.get("test_error"), "global_minimum": p.global_minimum,
                       "invariants": p.invariants} for p in self.scan],
             "notes": list(self.notes)}
        reasons = {"alpha_l": self.alpha_l_status, "alpha_l_error": self.alpha_l_status}
        reasons.update(self.error_reasons)
        return finite_json(d, reasons)

    def to_row(self) -> dict:
        """A flat record: the thresholds with their errors, the first change's branches and kind,
        the baseline, each spinodal as ``spinodal_<branch>_<side>`` (and ``_error``), precision,
        and the model's columns."""
        row = {k: getattr(self, k) for k in ("alpha_c", "alpha_c_error", "alpha_l", "alpha_l_error", "alpha_l_status",
                                             "linear_test_error", "linear_test_error_error", "precision",
                                             "wall_time")}
        first = self.transitions[0] if self.transitions else None
        row.update(alpha_c_below=first.below if first else "", alpha_c_above=first.above if first else "",
                   alpha_c_kind=first.kind if first else "")
        for s in self.spinodals:
            name = f"spinodal_{s['branch']}" + (f"_{s['side']}" if s.get("side") else "")
            row.update({name: s["alpha"], f"{name}_error": s.get("alpha_error", math.nan)})
        row.update(self.model.to_columns())
        return row

    def to_frame(self):
        """One row per change of the global branch (``alpha``, ``error``, ``below``, ``above``,
        ``kind``; one row of NaN where there is none), each with the columns of :meth:`to_row`."""
        common = self.to_row()
        none = {"alpha": math.nan, "error": math.nan, "below": "", "above": "", "kind": ""}
        return frame([{"alpha": t.alpha, "error": t.error, "below": t.below, "above": t.above, "kind": t.kind,
                       **common} for t in self.transitions] or [{**none, **common}])
