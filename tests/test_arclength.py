"""Pseudo-arclength continuation: a branch followed through the point where it turns back in
its parameter, every point on the way a fixed point."""
import json

import numpy as np
import pytest

from numerics.branches.arclength import ArcCurve, ArcPoint, follow_through_fold
from numerics.overlaps import Overlaps


def _curve(params, overlaps, branch="positional"):
    pts = tuple(ArcPoint(float(p), Overlaps(q=0.05, m=float(v), V=20.0, theta=0.0) if branch == "positional"
                         else Overlaps(q=0.05, m=0.0, V=20.0, theta=float(v)), 1e-12)
                for p, v in zip(params, overlaps))
    return ArcCurve(branch, "alpha", pts, "", 0.5)


@pytest.mark.parametrize("overlap, kind", [(lambda s: 0.3 + 0.1 * s, "fold"), (lambda s: 0.2 * s, "pitchfork")])
def test_a_turn_is_a_fold_where_the_overlap_keeps_its_sign_and_a_pitchfork_where_it_changes(overlap, kind):
    """A curve whose parameter 1 - s^2 turns back at s = 0: where the defining overlap stays
    finite through the turn it is a fold; where it changes sign the curve has gone through
    the trivial point onto the mirror branch (Q -> -Q)."""
    s = np.linspace(-1.0, 1.0, 9)
    curve = _curve(1.0 - 0.1 * s**2, overlap(s))
    assert curve.turns == (4,)
    (fold,) = curve.folds()
    assert fold["kind"] == kind
    assert fold["turn"] == pytest.approx(1.0, abs=2e-3)
    assert fold["points_past_fold"] == 4
    json.dumps(fold, allow_nan=False)


def test_a_curve_that_does_not_turn_has_no_fold():
    curve = _curve(np.linspace(0.5, 1.0, 6), np.linspace(0.3, 0.1, 6))
    assert curve.turns == () and curve.folds() == []


def test_a_curve_whose_start_failed_has_no_fold():
    """Where the start is not a fixed point the curve has no points (the end of the
    positional branch at lam = 0.001 ended the curve command with an IndexError)."""
    assert ArcCurve("positional", "alpha", (), "the start is not a fixed point", 0.5).folds() == []
    assert _curve([0.5, 0.6], [0.3, 0.2]).folds() == []


def _residual(spec, alpha, branch, point):
    """|x - F(x)| relative, over the branch's free overlaps, through the public map."""
    from numerics.model.bound import bind
    from numerics.precision import PRECISIONS
    from numerics.channel.lines.expectations import update_hat_overlaps
    from numerics.model.saddle_point import update_overlaps

    model = bind(spec)
    rule = PRECISIONS["draft"].rule
    x = point.overlaps.as_array()
    y = update_overlaps(model, update_hat_overlaps(model, point.overlaps, alpha, rule).hats).as_array()
    free = x != 0
    return float(np.max(np.abs(y[free] - x[free]) / np.abs(x[free])))


@pytest.mark.slow
def test_the_semantic_branch_is_followed_through_its_turn_at_omega_0_3():
    """omega = 0.3, sigma = 0.5, lam = 0.01 (draft), from alpha = 0.9 downward: alpha falls to
    about 0.694 and turns back while theta/sigma^2 goes through zero onto the mirror branch
    (a pitchfork: the branch's end is theta vanishing, as the continuation's classification
    says); every point past the turn is a fixed point of the map."""
    from derivations import ModelSpec
    from numerics.fixed_points.lines import solve_branch

    spec = ModelSpec(omega=0.3, sigma=0.5, lam=0.01)
    start = solve_branch(spec, 0.9, "semantic", "draft").overlaps
    curve = follow_through_fold(spec, 0.9, "semantic", start, "alpha", direction=-1.0)
    assert curve.turns, curve.stopped
    i = curve.turns[0]
    (turn,) = curve.folds()
    assert turn["kind"] == "pitchfork"
    assert 0.68 < turn["extreme_found"] < 0.70
    after = curve.points[i + 1:]
    assert after and all(p.parameter > curve.points[i].parameter for p in after)
    for p in curve.points[i:]:
        assert _residual(spec, p.parameter, "semantic", p) < 1e-7


@pytest.mark.slow
def test_an_end_the_branch_goes_past_is_not_called_a_fold():
    """The semantic branch at omega = 0.3 (draft) exists down to alpha ~ 0.694: an end put at
    0.8 from points at 0.9 and 0.85 (whose overlap does not extrapolate to zero there) is
    followed by arclength, which finds fixed points below 0.8, so the end is not explained."""
    from derivations import ModelSpec
    from numerics.model.bound import bind
    from numerics.branches.follow import UNEXPLAINED, end_evidence
    from numerics.fixed_points.lines import solve_branch
    from numerics.precision import PRECISIONS

    spec = ModelSpec(omega=0.3, sigma=0.5, lam=0.01)
    found = [solve_branch(spec, a, "semantic", "draft") for a in (0.9, 0.85)]
    kind, evidence = end_evidence(bind(spec), "semantic", PRECISIONS["draft"].rule, found, 0.8, 0.05)
    assert kind == UNEXPLAINED
    assert min(evidence["arclength"]["parameters"]) < 0.8
    json.dumps(evidence, allow_nan=False)
