"""The precision modes of the solver: which channel rules, test-error rules and tolerances
each uses (docs/numerics.md, sections 4 and 8). :data:`PRECISIONS` is the one table of them.
"""
from __future__ import annotations

import dataclasses
from typing import Optional

from numerics.channel.lines.rule import ChannelRule

# Acceptance of the undamped residual of all eight parameters (``Precision.residual_tol``).
# The switch-resolving quadrature is smooth in the overlaps only up to a noise floor
# (lines near the cusp of the two-minima region change rule): measured ~1e-6 relative
# for the draft rule and ~1e-7 for the fast rules. The solver itself iterates to
# ``Precision.tol``; this only decides whether the 8-parameter check passed.


@dataclasses.dataclass(frozen=True)
class Precision:
    """A precision mode: the channel rule, the rule that estimates its error, the
    test-error rule pair and the solver tolerance."""

    name: str
    rule: ChannelRule
    check_rule: ChannelRule
    test_n: int
    test_check_n: int
    tol: float
    residual_tol: float
    # the coarse solve only seeds the fine one and supplies |fine - coarse|: solving
    # it far below the targeted error buys nothing
    coarse_tol: Optional[float] = None
    # the bound on one fixed point (solver.Budget), all starts and both rules together:
    # a healthy solve takes 10-40 map evaluations, one that falls back on every searched
    # start up to ~1000; the time limit stops a solve whose evaluations have become slow
    max_evaluations: int = 1200
    time_limit: float = 600.0
    # the precision whose coarse rule (without the checks) first solves a fixed point from a given start,
    # to seed this one's coarse solve (numerics.fixed_points.lines._seeded_solve): for rules that cost
    # many times that one per evaluation
    seed_precision: Optional[str] = None
    # the precision that first decides a spinodal bisection's probes (numerics.branches.follow,
    # _bisection): this one's solve is made only where that one finds the branch, and a lost end
    # that one alone decided is confirmed by this one's solve
    probe_precision: Optional[str] = None


# The draft and fast checks start from the reflected branch only (check_from_w=False):
# with the switches bracketed, the w start moved no channel expectation by more than
# 7e-8 relative on twelve study points (9e-9 away from the positional folds), far below
# these rules' errors, and cost a quarter of a checked evaluation
# (docs/studies/switch_location.md). High keeps both.
_DRAFT_RULE = ChannelRule(n_eta=12, n_r=6, n_u=6, n_t=10, n_near=4, check_from_w=False)
PRECISIONS = {
    # draft: curves for figures and threshold brackets; one rule, so no error estimate (NaN)
    "draft": Precision("draft", _DRAFT_RULE, _DRAFT_RULE, 16, 16, 1e-8, 1e-5, time_limit=300.0),
    # The reported values use the finer rule; the coarse one supplies the error
    # estimate. Both fast solves stop at 1e-7: the fast map is smooth only to ~1e-7 and
    # its error estimates are 1e-6..1e-4 relative (docs/numerics.md, section 4).
    # The coarse rule is coarser than the reporting one in every factor, so their
    # difference sees each factor's error. Against reference fixed points
    # (80/24/40/48/64) at the six accuracy-target points the reporting rule is within
    # 7.3e-6 relative in every field, the estimate covers the difference in 48 of 48
    # entries, and the largest estimate is 4.8e-5 (benchmarks/accuracy.py reference;
    # docs/studies/soft_direction_lines.md). A pair coarser in the lines
    # (24/10/12/16/8 and 28/12/16/20/16) had errors of 1e-4 at semantic alpha = 1.
    "fast": Precision("fast", ChannelRule(n_eta=20, n_r=12, n_u=10, n_t=14, n_near=6, check_from_w=False),
                      ChannelRule(n_eta=28, n_r=16, n_u=16, n_t=20, n_near=8, check_from_w=False), 16, 24, 1e-7, 2e-6,
                      1e-7, probe_precision="draft"),
    # High: both rules split the unswitched lines where they cross the prox's steep band
    # (ChannelRule.band_split). Against reference fixed points (112/32/48/56/32, band
    # split) at the six accuracy-target points every field is within 1.6e-8 relative
    # and every estimate at most 1.9e-8; the estimates cover the difference in 42 of 48
    # entries, the misses at the 1e-9..1e-8 level (benchmarks/accuracy.py reference;
    # docs/studies/band_beyond_cusp_ends.md). Without the band split (40/14/20/24/10
    # and 56/18/28/32/32) the estimates reached 6.6e-6.
    "high": Precision("high", ChannelRule(n_eta=56, n_r=18, n_u=28, n_t=32, n_near=32, band_split=True),
                      ChannelRule(n_eta=80, n_r=24, n_u=40, n_t=48, n_near=64, band_split=True), 28, 36, 1e-12, 2e-7,
                      1e-10, time_limit=3600.0, seed_precision="fast", probe_precision="fast"),
}
