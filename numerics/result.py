"""The record of one solution of the saddle-point equations of any model (:class:`FixedPoint`), as
a dict (``--json``) and as a flat row of a tidy CSV; what makes a solution a result (:func:`assess`);
which of the branches solved at one alpha is the global minimum (:func:`mark_global_minima`).

The overlaps are matrices (:class:`~numerics.matrix_overlaps.MatrixOverlaps`) for every model and
integrator, with one CSV/JSON schema: packed component names of :mod:`derivations.packing` (bare
names, ``q, m, V, theta``, where a matrix is ``1 x 1``, as in the two-token rank-one model) and the
gauge invariants beside them."""
from __future__ import annotations

import dataclasses
import math
from typing import Dict, List, Optional, Sequence

import numpy as np

from derivations import ModelSpec

from numerics.matrix_overlaps import INVARIANT_OF, MatrixHats, MatrixOverlaps, from_scalars
from numerics.overlaps import ALL_NAMES, FIXED_ZERO, HatOverlaps, Overlaps, value_with_error
from numerics.precision import PRECISIONS
from tidyio import finite_json, frame

#: the status of a :class:`FixedPoint`; only ``CONVERGED`` is a result
CONVERGED = "converged"
NOT_CONVERGED = "not converged"      # the solver did not reach the precision's acceptance tolerance
NON_FINITE = "non-finite"            # a value, its estimate or the residual is NaN or infinite
UNRESOLVED = "unresolved"            # an error estimate at or above its value
STATUSES = (CONVERGED, NOT_CONVERGED, NON_FINITE, UNRESOLVED)

#: the conjugate of each overlap (an overlap held at zero on a branch makes its conjugate zero too)
CONJUGATE = dict(zip(ALL_NAMES[:4], ALL_NAMES[4:]))
NO_ESTIMATE = "no error estimate: this precision solves with one rule"
#: the diagnostics a row carries where the integrator states them (the line quadrature's self-check
#: of ``thetahat`` in its other form, and the weight its lines leave unresolved)
ROW_DIAGNOSTICS = ("thetahat_other_form", "unresolved_weight")


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
    """One solution of the saddle-point equations with its outputs, gauge invariants and error
    estimates (absolute, keyed by field name: ``q``, ... or packed component names, ``test_error``,
    ``train_loss``, and for matrices the invariants ``q_eigenvalues_1``, ...).

    ``overlaps``/``hats``: :class:`~numerics.matrix_overlaps.MatrixOverlaps`/``MatrixHats``; the line
    quadrature's scalars (:class:`~numerics.overlaps.Overlaps`/``HatOverlaps``) are stored as the
    ``1 x 1`` matrices they are, and each invariant of a ``1 x 1`` matrix (the entry or its modulus)
    shares the entry's error.
    ``status``: one of :data:`STATUSES` or, for other integrators, their reason; left at its default
    on a point that did not converge, it is read from ``diagnostics["status"]`` or ``["reason"]``.
    ``invariants``: computed from the overlaps unless given."""

    alpha: float
    branch: str
    overlaps: object
    hats: object
    test_error: float
    train_loss: float
    converged: bool
    iterations: int
    residual: float               # undamped, every order parameter, relative
    error: dict                   # per-field error estimates (absolute)
    diagnostics: dict
    model: ModelSpec
    precision: str
    wall_time: float
    global_minimum: Optional[bool] = None
    # one of STATUSES (or an integrator's reason); ``converged`` is ``status == CONVERGED``
    status: str = CONVERGED
    # the coarse solve's last Anderson pairs: they seed the next solve of a continuation
    continuation_pairs: tuple = dataclasses.field(default=(), repr=False, compare=False)
    #: the channel integrator that solved it (:func:`numerics.channel.integrators.choose_integrator`)
    integrator: str = "lines"
    invariants: Optional[Dict[str, List[float]]] = None
    #: the replica-symmetric stability (numerics.stability.RSStability.as_dict) where it was computed
    stability: Optional[Dict[str, float]] = None

    def __post_init__(self):
        if isinstance(self.overlaps, Overlaps):
            object.__setattr__(self, "overlaps", from_scalars(*self.overlaps.as_array()))
        if isinstance(self.hats, HatOverlaps):
            object.__setattr__(self, "hats", MatrixHats(self.overlaps.shape, **dataclasses.asdict(self.hats)))
        # plain floats: what a person prints (np.float64(...) is numpy's repr, not a number's)
        error = {k: float(v) if isinstance(v, (float, np.floating)) else v for k, v in self.error.items()}
        if self.one_by_one:
            error.update({f"{name}_1": error[of] for name, of in INVARIANT_OF.items()
                          if of in error and f"{name}_1" not in error})
        object.__setattr__(self, "error", error)
        if not self.converged and self.status == CONVERGED:
            why = self.diagnostics.get("status") or self.diagnostics.get("reason") or NOT_CONVERGED
            object.__setattr__(self, "status", str(why))
        if self.invariants is None:
            object.__setattr__(self, "invariants", self.overlaps.invariants())

    def __str__(self) -> str:
        """A summary a person reads: branch, alpha, status and each field with the digits its error
        supports (the overlaps, or the gauge invariants of a matrix model, then the test error and
        the training loss)."""
        values = self.values
        names = list(self.reported_names())
        zero = zero_by_symmetry(self.branch)
        fields = [f"{n} = 0" if n in zero else f"{n} = {value_with_error(values[n], self.error.get(n, math.nan))}"
                  for n in names + ["test_error", "train_loss"]]
        return f"{self.branch} branch at alpha = {self.alpha:g} ({self.precision}, {self.status}): " + ", ".join(fields)

    @property
    def one_by_one(self) -> bool:
        """Whether every overlap is a ``1 x 1`` matrix (the two-token rank-one model): each entry is then
        its own gauge invariant up to sign, and a person reads the entries."""
        return all(np.size(m) == 1 for m in self.overlaps.matrices().values())

    def reported_names(self) -> tuple:
        """The overlaps a person reads: the bare names where :attr:`one_by_one`, else the gauge
        invariants (``q_eigenvalues_1``, ...)."""
        if self.one_by_one:
            return ALL_NAMES[:4]
        return tuple(f"{key}_{i + 1}" for key, values in self.invariants.items() for i in range(len(values)))

    @property
    def values(self) -> Dict[str, float]:
        """Every reported number by name: the overlaps' and conjugates' packed components, the gauge
        invariants, test error and training loss."""
        d = dict(self.overlaps.as_dict())
        d.update(self.hats.as_dict())
        for key, values in self.invariants.items():
            d.update({f"{key}_{i + 1}": v for i, v in enumerate(values)})
        d.update(test_error=self.test_error, train_loss=self.train_loss)
        return d

    def invariant_errors(self) -> Dict[str, float]:
        """The error of each invariant (``q_eigenvalues_1``, ...)."""
        return {k: v for k, v in self.error.items() if k[:k.rfind("_")] in self.invariants}

    def relative_errors(self) -> Dict[str, float]:
        """``error / |value|`` of every field whose value is not zero (exact zeros are imposed)."""
        return {k: self.error[k] / abs(v) for k, v in self.values.items() if v != 0 and k in self.error}

    def to_dict(self) -> dict:
        """The record as a JSON-safe dict (matrices as nested lists): a number that is not finite is
        ``None``, and ``null_reasons`` says why for each (e.g. no error estimate in draft precision)."""
        d = {"alpha": self.alpha, "branch": self.branch, "integrator": self.integrator}
        d.update(self.overlaps.nested())
        d.update(self.hats.nested())
        d["invariants"] = self.invariants
        d.update(test_error=self.test_error, train_loss=self.train_loss, converged=self.converged,
                 status=self.status, iterations=self.iterations, residual=self.residual, error=dict(self.error),
                 global_minimum=self.global_minimum, model=self.model.to_dict(), precision=self.precision,
                 wall_time=self.wall_time, diagnostics=dict(self.diagnostics))
        if self.stability is not None:
            d.update(self.stability)
        reasons = {}
        if self.error and all(not math.isfinite(e) for e in self.error.values()):
            one_rule = PRECISIONS[self.precision].rule == PRECISIONS[self.precision].check_rule
            why = NO_ESTIMATE if one_rule else "no error estimate: only the coarse rule was solved"
            reasons = {f"error.{k}": why for k in self.error}
        return finite_json(d, reasons)

    def to_row(self) -> dict:
        """A flat record for tidy CSV: values, errors, status, solver setting and the model
        (:meth:`derivations.spec.ModelSpec.to_columns`, read back by ``ModelSpec.from_columns``;
        the record itself by :func:`from_row`)."""
        row = {"alpha": self.alpha, "branch": self.branch, "integrator": self.integrator}
        row.update(self.values)
        row.update({f"{k}_error": v for k, v in self.error.items()})
        row.update(converged=self.converged, status=self.status, residual=self.residual, iterations=self.iterations,
                   global_minimum=self.global_minimum, precision=self.precision, wall_time=self.wall_time)
        if self.stability is not None:
            row.update(self.stability)
        row.update({k: self.diagnostics[k] for k in ROW_DIAGNOSTICS if k in self.diagnostics})
        row.update(self.model.to_columns())
        return row

    def to_frame(self):
        """The record as a one-row pandas DataFrame, in the columns of :meth:`to_row`."""
        return frame([self.to_row()])


def failed_point(spec: ModelSpec, alpha: float, branch: str, precision: str, integrator: str,
                 reason: str) -> FixedPoint:
    """The record of a solve that raised (the solver could not evaluate the map, for instance): no
    value, ``converged=False`` and ``reason`` as its status, so that a curve reports it at its alpha
    instead of losing the other points."""
    shape = (spec.tokens, spec.rank, spec.teacher_rank, len(spec.positions[0]))
    ov = MatrixOverlaps(shape, **{name: np.nan for name in MatrixOverlaps.NAMES})
    hats = MatrixHats(shape, **{name: np.nan for name in MatrixHats.NAMES})
    invariants = {"q_eigenvalues": [math.nan] * spec.rank, "V_eigenvalues": [math.nan] * spec.rank,
                  "m_singular_values": [math.nan] * min(shape[3], spec.rank),
                  "theta_singular_values": [math.nan] * min(spec.rank, spec.teacher_rank)}
    return FixedPoint(alpha=float(alpha), branch=branch, model=spec, precision=precision, integrator=integrator,
                      overlaps=ov, hats=hats, test_error=math.nan, train_loss=math.nan, converged=False,
                      iterations=0, residual=math.nan, error={}, invariants=invariants,
                      diagnostics={"status": f"failed: {reason}"}, wall_time=math.nan)


def from_row(row: dict) -> FixedPoint:
    """The fixed point of a row written by :meth:`FixedPoint.to_row` (cells may be text), as read back
    from a curve CSV: values, errors, status and settings; solver diagnostics are not kept in rows
    and come back empty."""
    from tidyio import is_true, number

    model = ModelSpec.from_columns(row)
    shape = (model.tokens, model.rank, model.teacher_rank, len(model.positions[0]))
    ov = MatrixOverlaps.unpack(shape, [number(row[n]) for n in MatrixOverlaps.component_names(shape)])
    hats = MatrixHats.unpack(shape, [number(row[n]) for n in MatrixHats.component_names(shape)])
    # "test_error" is a value, "test_error_error" its error: an error column is one whose base is a column
    error = {k[:-6]: number(v) for k, v in row.items()
             if k.endswith("_error") and k[:-6] in row and v not in ("", None)}
    converged = is_true(row["converged"])
    glob = row.get("global_minimum")
    return FixedPoint(alpha=number(row["alpha"]), branch=row["branch"], model=model,
                      precision=row["precision"], integrator=row["integrator"], overlaps=ov, hats=hats,
                      test_error=number(row["test_error"]), train_loss=number(row["train_loss"]),
                      converged=converged, iterations=int(number(row["iterations"])),
                      residual=number(row["residual"]), error=error, invariants=ov.invariants(),
                      diagnostics={} if converged else {"status": row.get("status", "")},
                      wall_time=number(row["wall_time"]),
                      global_minimum=None if glob in ("", None) else is_true(glob))


def _branch_rank(branch: str) -> tuple:
    from numerics.fixed_points.subspaces import GENERAL_BRANCHES

    return (GENERAL_BRANCHES.index(branch), "") if branch in GENERAL_BRANCHES else (len(GENERAL_BRANCHES), branch)


def mark_global_minima(points: Sequence[FixedPoint]) -> list:
    """``global_minimum`` on each point: the lowest training loss among the converged points of its
    alpha (equal losses, a branch fallen onto another, ordered as
    :data:`numerics.fixed_points.subspaces.GENERAL_BRANCHES`, so that the mark does not depend on the order of
    the points); a point that did not converge is not compared (``False``). Where the lowest
    differs from the next by less than their stated errors, ``global_margin`` in its diagnostics
    says by how many stated errors it is lower (a near tie)."""
    by_alpha = {}
    for p in points:
        if p.converged:
            by_alpha.setdefault(p.alpha, []).append(p)
    out = []
    for p in points:
        rivals = sorted(by_alpha.get(p.alpha, []), key=lambda x: (x.train_loss, _branch_rank(x.branch)))
        best = bool(rivals) and rivals[0] is p
        diagnostics = p.diagnostics
        if best and len(rivals) > 1:
            gap = rivals[1].train_loss - p.train_loss
            spread = p.error.get("train_loss", 0.0) + rivals[1].error.get("train_loss", 0.0)
            if not gap > spread:  # NaN errors (draft precision) state no tie either
                diagnostics = dict(diagnostics, global_margin=gap / spread if spread > 0 else float("inf"))
        out.append(dataclasses.replace(p, global_minimum=best if p.converged else False, diagnostics=diagnostics))
    return out
