"""The record of one solution of the saddle-point equations (:class:`FixedPoint`), as a
dict (``--json``) and as a flat row of a tidy CSV."""
from __future__ import annotations

import dataclasses
from typing import Optional

import numpy as np

from derivations import ModelSpec

from .overlaps import ALL_NAMES, HatOverlaps, Overlaps


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
    # the coarse solve's last Anderson pairs: they seed the next solve of a continuation
    continuation_pairs: tuple = dataclasses.field(default=(), repr=False, compare=False)

    def to_dict(self) -> dict:
        d = {"alpha": self.alpha, "branch": self.branch}
        d.update(dataclasses.asdict(self.overlaps))
        d.update(dataclasses.asdict(self.hats))
        d.update(test_error=self.test_error, train_loss=self.train_loss, converged=self.converged,
                 iterations=self.iterations, residual=self.residual, error=dict(self.error),
                 global_minimum=self.global_minimum, model=self.model.to_dict(), precision=self.precision,
                 wall_time=self.wall_time, diagnostics=dict(self.diagnostics))
        return d

    def to_row(self) -> dict:
        """A flat record for tidy CSV: values, errors, status, solver setting and the model
        (:meth:`derivations.spec.ModelSpec.to_columns`, read back by ``ModelSpec.from_columns``)."""
        row = {"alpha": self.alpha, "branch": self.branch}
        row.update(self.values)
        row.update({f"{k}_error": v for k, v in self.error.items()})
        row.update(converged=self.converged, residual=self.residual, iterations=self.iterations,
                   global_minimum=self.global_minimum, precision=self.precision, wall_time=self.wall_time,
                   thetahat_other_form=self.diagnostics.get("thetahat_other_form"),
                   unresolved_weight=self.diagnostics.get("unresolved_weight"))
        row.update(self.model.to_columns())
        return row

    @property
    def values(self) -> dict:
        d = dict(zip(ALL_NAMES, np.concatenate([self.overlaps.as_array(), self.hats.as_array()])))
        d.update(test_error=self.test_error, train_loss=self.train_loss)
        return d
