"""The precision modes of the quasi-Monte Carlo integrator (:data:`QMC_PRECISIONS`), in the style of
:mod:`numerics.precision`: the rule (points, scramblings, prox starts, dense check) and the solver
tolerances of each mode. docs/numerics.md (section "The general model: QMC integrator") gives the
measurements behind them.
"""
from __future__ import annotations

import dataclasses

from numerics.channel.qmc.rule import QMCRule


@dataclasses.dataclass(frozen=True)
class QMCPrecision:
    """A precision mode of the QMC solve: its rule, the solver tolerance on the scaled residual of
    each scrambling's fixed point, and the residual accepted for a solve that stops improving
    (the map of ``N`` fixed nodes is piecewise smooth, with steps of order ``1/N`` where a node's
    prox switches)."""

    name: str
    rule: QMCRule
    tol: float
    residual_tol: float
    maxiter: int = 60


QMC_PRECISIONS = {
    "draft": QMCPrecision("draft", QMCRule(log2_points=11, scrambles=4, test_log2_points=12, test_scrambles=4,
                                           dense_nodes=512), 1e-4, 1e-3),
    "fast": QMCPrecision("fast", QMCRule(log2_points=15, scrambles=8, test_log2_points=18, test_scrambles=8),
                         1e-5, 1e-4),
    "high": QMCPrecision("high", QMCRule(log2_points=18, scrambles=8, test_log2_points=18, test_scrambles=8,
                                         dense_nodes=8192), 1e-6, 1e-5),
}
