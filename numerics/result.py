"""The record of one solution of the saddle-point equations (:class:`FixedPoint`), as a
dict (``--json``) and as a flat row of a tidy CSV; what makes a solution a result
(:func:`assess`)."""
from __future__ import annotations

import dataclasses
import math
from typing import Optional

import numpy as np

from derivations import ModelSpec

from .overlaps import ALL_NAMES, FIXED_ZERO, HatOverlaps, Overlaps
from .precision import PRECISIONS
from .tidy import finite_json, frame

#: the status of a :class:`FixedPoint`; only ``CONVERGED`` is a result
CONVERGED = "converged"
NOT_CONVERGED = "not converged"      # the solver did not reach the precision's acceptance tolerance
NON_FINITE = "non-finite"            # a value, its estimate or the residual is NaN or infinite
UNRESOLVED = "unresolved"            # an error estimate at or above its value
STATUSES = (CONVERGED, NOT_CONVERGED, NON_FINITE, UNRESOLVED)

#: the conjugate of each overlap (an overlap held at zero on a branch makes its conjugate zero too)
CONJUGATE = dict(zip(ALL_NAMES[:4], ALL_NAMES[4:]))
NO_ESTIMATE = "no error estimate: this precision solves with one rule"


def zero_by_symmetry(branch: str) -> tuple:
    """The fields that are exactly zero on ``branch`` (docs/theory.md, section 3.2): the
    overlaps it holds at zero and their conjugates."""
    held = FIXED_ZERO.get(branch, ())
    return held + tuple(CONJUGATE[name] for name in held)


def assess(branch: str, values: dict, error: dict, residual: float, solved: bool, precision, stopped: str = "",
           estimated: bool = True) -> tuple:
    """``(status, reason)`` of a solution with these ``values`` and ``error`` estimates.

    In this order: ``NON_FINITE`` if a value, the residual or (where the precision
    estimates errors and ``estimated``: both of its rules were solved) an estimate is not finite; ``NOT_CONVERGED`` unless ``solved`` (the
    solver reached the precision's acceptance tolerance; ``stopped`` says why it did
    not); ``UNRESOLVED`` if an estimate is at or above ``|value|`` for a field that is
    not zero by symmetry on the branch (those are exact zeros): such a value is not
    known even in sign; else ``CONVERGED`` with an empty reason."""
    estimates = estimated and precision.rule != precision.check_rule
    bad = [k for k, v in values.items() if not math.isfinite(v)]
    bad += [f"{k}_error" for k, e in error.items() if estimates and not math.isfinite(e)]
    if bad or not math.isfinite(residual):
        return NON_FINITE, f"not finite: {', '.join(bad) or 'residual'}"
    if not solved:
        return NOT_CONVERGED, (f"not converged: residual {residual:.2e} (accepted below {precision.residual_tol:g})"
                               + (f"; {stopped}" if stopped else ""))
    zeros = zero_by_symmetry(branch)
    unresolved = [k for k, e in error.items() if k not in zeros and e >= abs(values[k])]
    if unresolved:
        return UNRESOLVED, "error estimate at or above the value: " + ", ".join(
            f"{k} = {values[k]:.3g} +- {error[k]:.2g}" for k in unresolved)
    return CONVERGED, ""


@dataclasses.dataclass(frozen=True)
class FixedPoint:
    """One solution of the saddle-point equations with its outputs and error estimates."""

    alpha: float
    branch: str
    overlaps: Overlaps
    hats: HatOverlaps
    test_error: float
    train_loss: float
    converged: bool
    iterations: int
    residual: float               # undamped, all eight order parameters, relative
    error: dict                   # per-field error estimates (absolute)
    diagnostics: dict
    model: ModelSpec
    precision: str
    wall_time: float
    global_minimum: Optional[bool] = None
    # one of STATUSES; ``converged`` is ``status == CONVERGED``, and diagnostics["reason"] says why not
    status: str = CONVERGED
    # the coarse solve's last Anderson pairs: they seed the next solve of a continuation
    continuation_pairs: tuple = dataclasses.field(default=(), repr=False, compare=False)

    def to_dict(self) -> dict:
        """The record as a JSON-safe dict: a number that is not finite is ``None``, and
        ``null_reasons`` says why for each (e.g. no error estimate in draft precision)."""
        d = {"alpha": self.alpha, "branch": self.branch}
        d.update(dataclasses.asdict(self.overlaps))
        d.update(dataclasses.asdict(self.hats))
        d.update(test_error=self.test_error, train_loss=self.train_loss, converged=self.converged,
                 status=self.status, iterations=self.iterations, residual=self.residual, error=dict(self.error),
                 global_minimum=self.global_minimum, model=self.model.to_dict(), precision=self.precision,
                 wall_time=self.wall_time, diagnostics=dict(self.diagnostics))
        reasons = {}
        if all(not math.isfinite(e) for e in self.error.values()):
            one_rule = PRECISIONS[self.precision].rule == PRECISIONS[self.precision].check_rule
            why = NO_ESTIMATE if one_rule else "no error estimate: only the coarse rule was solved"
            reasons = {f"error.{k}": why for k in self.error}
        return finite_json(d, reasons)

    def to_row(self) -> dict:
        """A flat record for tidy CSV: values, errors, status, solver setting and the model
        (:meth:`derivations.spec.ModelSpec.to_columns`, read back by ``ModelSpec.from_columns``)."""
        row = {"alpha": self.alpha, "branch": self.branch}
        row.update(self.values)
        row.update({f"{k}_error": v for k, v in self.error.items()})
        row.update(converged=self.converged, status=self.status, residual=self.residual, iterations=self.iterations,
                   global_minimum=self.global_minimum, precision=self.precision, wall_time=self.wall_time,
                   thetahat_other_form=self.diagnostics.get("thetahat_other_form"),
                   unresolved_weight=self.diagnostics.get("unresolved_weight"))
        row.update(self.model.to_columns())
        return row

    def to_frame(self):
        """The record as a one-row pandas DataFrame, in the columns of :meth:`to_row`."""
        return frame([self.to_row()])

    @property
    def values(self) -> dict:
        d = dict(zip(ALL_NAMES, np.concatenate([self.overlaps.as_array(), self.hats.as_array()])))
        d.update(test_error=self.test_error, train_loss=self.train_loss)
        return d
