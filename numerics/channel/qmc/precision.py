"""The precision modes of the quasi-Monte Carlo integrator (:data:`QMC_PRECISIONS`), in the style of
:mod:`numerics.precision`: the rule (points, scramblings, prox starts, dense check) and the solver
tolerances of each mode. docs/numerics.md (section "The general model: QMC integrator") gives the
measurements behind them.
"""
from __future__ import annotations

import dataclasses
import math

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
    #: the error aimed at for a threshold located at this mode: one located with a larger error is
    #: refined once on :func:`refined`'s rule (:func:`numerics.thresholds.noisy_roots.refined_root`)
    threshold_aim: float = math.inf


def as_qmc_precision(precision) -> QMCPrecision:
    """``precision``: a :class:`QMCPrecision`, or the name of one of :data:`QMC_PRECISIONS`."""
    return precision if isinstance(precision, QMCPrecision) else QMC_PRECISIONS[precision]


def refined(precision, extra_log2_points: int = 2) -> QMCPrecision:
    """``precision`` (a mode or its name) on a rule with ``2^extra_log2_points`` times the points per
    scrambling, for the channel and for the test error alike, named by the channel's (e.g. ``fast,
    2^17 points``)."""
    base = as_qmc_precision(precision)
    n = base.rule.log2_points + extra_log2_points
    return dataclasses.replace(base, name=f"{base.name}, 2^{n} points",
                               rule=dataclasses.replace(base.rule, log2_points=n,
                                                        test_log2_points=base.rule.test_log2_points + extra_log2_points))


QMC_PRECISIONS = {
    "draft": QMCPrecision("draft", QMCRule(log2_points=11, scrambles=4, test_log2_points=12, test_scrambles=4,
                                           dense_nodes=512), 1e-4, 1e-3),
    "fast": QMCPrecision("fast", QMCRule(log2_points=15, scrambles=8, test_log2_points=18, test_scrambles=8),
                         1e-5, 1e-4, threshold_aim=1e-3),
    "high": QMCPrecision("high", QMCRule(log2_points=18, scrambles=8, test_log2_points=18, test_scrambles=8,
                                         dense_nodes=8192), 1e-6, 1e-5, threshold_aim=1e-4),
}
