"""The record of one fixed point of the general model (:class:`GeneralFixedPoint`), as a dict
(JSON: matrices as nested lists) and as a flat CSV row (packed component names of
:mod:`derivations.packing`, the same as the flat vector the solver iterates)."""
from __future__ import annotations

import dataclasses
from typing import Dict, List, Optional

from derivations import ModelSpec

from .matrix_overlaps import MatrixHats, MatrixOverlaps, from_scalars


@dataclasses.dataclass(frozen=True)
class GeneralFixedPoint:
    """One solution of the saddle-point equations of the general model with its outputs, gauge
    invariants and error estimates (absolute, keyed by packed component name, ``test_error``,
    ``train_loss`` and the invariants ``q_eigenvalues_1``, ...)."""

    alpha: float
    branch: str
    model: ModelSpec
    precision: str
    integrator: str
    overlaps: MatrixOverlaps
    hats: MatrixHats
    test_error: float
    train_loss: float
    converged: bool
    iterations: int
    residual: float
    error: Dict[str, float]
    invariants: Dict[str, List[float]]
    diagnostics: dict
    wall_time: float
    #: the lowest training loss among the branches solved at this alpha (set by
    #: :func:`numerics.general_fixed_point.solve_all_general` and the continuation)
    global_minimum: Optional[bool] = None

    @property
    def status(self) -> str:
        """``converged``, or why the point is not a result (the solver's or the branch's reason)."""
        if self.converged:
            return "converged"
        return str(self.diagnostics.get("status") or self.diagnostics.get("reason") or "not converged")

    @property
    def values(self) -> Dict[str, float]:
        """Every reported number by name (packed components, invariants, test error, training loss)."""
        out = dict(self.overlaps.as_dict())
        out.update(self.hats.as_dict())
        for key, values in self.invariants.items():
            out.update({f"{key}_{i + 1}": v for i, v in enumerate(values)})
        out.update(test_error=self.test_error, train_loss=self.train_loss)
        return out

    def relative_errors(self) -> Dict[str, float]:
        """``error / |value|`` of every field whose value is not zero (exact zeros are imposed)."""
        return {k: self.error[k] / abs(v) for k, v in self.values.items() if v != 0 and k in self.error}

    def to_dict(self) -> dict:
        d = {"alpha": self.alpha, "branch": self.branch, "integrator": self.integrator}
        d.update(self.overlaps.nested())
        d.update(self.hats.nested())
        d.update(invariants=self.invariants, test_error=self.test_error, train_loss=self.train_loss,
                 converged=self.converged, status=self.status, global_minimum=self.global_minimum,
                 iterations=self.iterations, residual=self.residual, error=dict(self.error),
                 model=self.model.to_dict(), precision=self.precision, wall_time=self.wall_time,
                 diagnostics=dict(self.diagnostics))
        return d

    def to_row(self) -> dict:
        """A flat record for tidy CSV: values and errors by packed name, status, settings, model."""
        row = {"alpha": self.alpha, "branch": self.branch, "integrator": self.integrator}
        row.update(self.values)
        row.update({f"{k}_error": v for k, v in self.error.items()})
        row.update(converged=self.converged, status=self.status, global_minimum=self.global_minimum,
                   residual=self.residual, iterations=self.iterations, precision=self.precision,
                   wall_time=self.wall_time)
        row.update(self.model.to_columns())
        return row

    def to_frame(self):
        """The record as a one-row pandas DataFrame, in the columns of :meth:`to_row`."""
        from .tidy import frame

        return frame([self.to_row()])


def failed_point(spec: ModelSpec, alpha: float, branch: str, precision: str, integrator: str,
                 reason: str) -> GeneralFixedPoint:
    """The record of a solve that raised (the solver could not evaluate the map, for instance): no
    value, ``converged=False`` and ``reason`` as its status, so that a curve reports it at its alpha
    instead of losing the other points."""
    import math

    import numpy as np

    shape = (spec.tokens, spec.rank, spec.teacher_rank, len(spec.positions[0]))
    nan = {name: np.nan for name in MatrixOverlaps.NAMES}
    ov = MatrixOverlaps(shape, **nan)
    hats = MatrixHats(shape, **{name: np.nan for name in MatrixHats.NAMES})
    invariants = {"q_eigenvalues": [math.nan] * spec.rank, "V_eigenvalues": [math.nan] * spec.rank,
                  "m_singular_values": [math.nan] * min(shape[3], spec.rank),
                  "theta_singular_values": [math.nan] * min(spec.rank, spec.teacher_rank)}
    return GeneralFixedPoint(alpha=float(alpha), branch=branch, model=spec, precision=precision, integrator=integrator,
                             overlaps=ov, hats=hats, test_error=math.nan, train_loss=math.nan, converged=False,
                             iterations=0, residual=math.nan, error={}, invariants=invariants,
                             diagnostics={"status": f"failed: {reason}"}, wall_time=math.nan)


def from_row(row: dict) -> GeneralFixedPoint:
    """The fixed point of a row written by :meth:`GeneralFixedPoint.to_row` (cells may be text), as
    read back from a curve CSV: values, errors, status and settings; solver diagnostics are not
    kept in rows and come back empty."""
    from .tidy import is_true, number

    model = ModelSpec.from_columns(row)
    shape = (model.tokens, model.rank, model.teacher_rank, len(model.positions[0]))
    ov = MatrixOverlaps.unpack(shape, [number(row[n]) for n in MatrixOverlaps.component_names(shape)])
    hats = MatrixHats.unpack(shape, [number(row[n]) for n in MatrixHats.component_names(shape)])
    # "test_error" is a value, "test_error_error" its error: an error column is one whose base is a column
    error = {k[:-6]: number(v) for k, v in row.items()
             if k.endswith("_error") and k[:-6] in row and v not in ("", None)}
    converged = is_true(row["converged"])
    glob = row.get("global_minimum")
    return GeneralFixedPoint(alpha=number(row["alpha"]), branch=row["branch"], model=model,
                             precision=row["precision"], integrator=row["integrator"], overlaps=ov, hats=hats,
                             test_error=number(row["test_error"]), train_loss=number(row["train_loss"]),
                             converged=converged, iterations=int(number(row["iterations"])),
                             residual=number(row["residual"]), error=error, invariants=ov.invariants(),
                             diagnostics={} if converged else {"status": row.get("status", "")},
                             wall_time=number(row["wall_time"]),
                             global_minimum=None if glob in ("", None) else is_true(glob))


def from_line_fixed_point(fp) -> GeneralFixedPoint:
    """The :class:`~numerics.result.FixedPoint` of the line quadrature (two tokens, rank one) as a
    general record: ``1 x 1`` matrices with their bare names, so values and errors keep their keys."""
    ov = from_scalars(fp.overlaps.q, fp.overlaps.m, fp.overlaps.V, fp.overlaps.theta)
    hats = MatrixHats(ov.shape, qhat=fp.hats.qhat, mhat=fp.hats.mhat, Vhat=fp.hats.Vhat, thetahat=fp.hats.thetahat)
    invariants = ov.invariants()
    error = {k: float(v) for k, v in fp.error.items()}
    for key, name in (("q_eigenvalues_1", "q"), ("V_eigenvalues_1", "V"), ("m_singular_values_1", "m"),
                      ("theta_singular_values_1", "theta")):
        error[key] = error[name]
    diagnostics = dict(fp.diagnostics, integrator="lines")
    if not fp.converged:
        diagnostics["status"] = f"{fp.status}: {fp.diagnostics.get('reason', '')}"
    return GeneralFixedPoint(alpha=fp.alpha, branch=fp.branch, global_minimum=fp.global_minimum, model=fp.model, precision=fp.precision,
                             integrator="lines", overlaps=ov, hats=hats, test_error=fp.test_error,
                             train_loss=fp.train_loss, converged=fp.converged, iterations=fp.iterations,
                             residual=fp.residual, error=error, invariants=invariants,
                             diagnostics=diagnostics, wall_time=fp.wall_time)


