"""Fixed points the iteration cannot reach, how a branch end is classified, and starts
valid for every model."""
import json

import numpy as np
import pytest

from numerics.branches.follow import ANCHORS, classify_end
from numerics.fixed_points.lines import DEFAULT_START, start_for_model


@pytest.mark.parametrize("law, kind", [("fold", "fold"), ("vanishing", "vanishing"), ("neither", "not found")])
def test_a_branch_end_is_classified_from_its_last_points(law, kind):
    """A branch ending at p = 1: at a fold its overlap stays finite while the smallest
    eigenvalue of I - DF falls like sqrt(1 - p); where it meets the trivial branch the
    overlap falls like sqrt(1 - p) (and the eigenvalue too); where neither falls, the end
    is not explained."""
    p = np.array([0.98, 0.995])
    root = np.sqrt(1.0 - p)
    overlaps = {"fold": 0.3 + 0.1 * (1.0 - p), "vanishing": 0.5 * root, "neither": 0.3 + 0.0 * p}[law]
    eigenvalues = {"fold": 0.8 * root, "vanishing": 0.8 * root, "neither": 0.45 + 0.1 * (1.0 - p)}[law]
    got, evidence = classify_end(p, overlaps, eigenvalues, end=1.001, width=0.006)
    assert got == kind
    json.dumps(evidence, allow_nan=False)
    assert evidence["defining_overlap"] == pytest.approx(list(np.abs(overlaps)))


def test_default_starts_lie_in_the_domain_of_every_sigma():
    """theta^2 < rho q (the covariance of (h, h*) is positive) at every default start, for
    sigma from 0.1 to 1; the default model's starts are those of docs/theory.md, section 3.8."""
    for sigma in (0.1, 0.3, 0.5, 1.0):
        for start in list(DEFAULT_START.values()) + [a[1] for a in ANCHORS.values()]:
            s = start_for_model(start, sigma**2)
            assert s.theta**2 < sigma**2 * s.q
    assert start_for_model(ANCHORS["semantic"][1], 0.25) == ANCHORS["semantic"][1]


@pytest.mark.slow
def test_the_root_finder_reaches_a_positional_point_where_the_iteration_stalls():
    """omega = 0.3, alpha = 0.8, lam = 0.003051 (draft), started from the point found at
    lam = 0.003073: the map's Jacobian there has a real eigenvalue near -4 and a complex pair
    of modulus 1.3, and the Anderson iteration stalls (residual ~3e-3); the root finder on
    x - F(x) converges to the positional point (m = 0.1213), where the old study put no
    branch (docs/studies/positional_small_lam.md, section 1b)."""
    from derivations import ModelSpec
    from numerics.model.bound import bind
    from numerics.fixed_points.lines import solve_with_rule
    from numerics.overlaps import Overlaps
    from numerics.precision import PRECISIONS

    prec = PRECISIONS["draft"]
    model = bind(ModelSpec(lam=0.003051, omega=0.3, sigma=0.5))
    start = Overlaps(q=0.09586, m=0.11884, V=66.558, theta=0.0)

    def solve(newton):
        return solve_with_rule(model, 0.8, "positional", prec.rule, start, prec.tol, accept_tol=prec.residual_tol,
                               lost_below=1e-3, newton=newton)

    alone = solve(False)
    assert not alone.converged and alone.residual8 > 1e-4
    found = solve(True)
    assert found.converged and found.residual8 < prec.residual_tol
    assert found.overlaps.m == pytest.approx(0.1213, abs=5e-4)


def test_an_overlap_whose_zero_lies_beyond_the_bracket_does_not_make_an_end_vanishing():
    """Found at 1 and 0.75, not at 0.6875: an overlap (0.378, 0.209) whose square extrapolates
    to zero at 0.64, outside the bracket, does not end the branch there; the smallest
    eigenvalue of I - DF (0.385, 0.100), whose square reaches zero at 0.73 inside it, does."""
    kind, evidence = classify_end([1.0, 0.75], [0.378, 0.209], [0.385, 0.100], end=0.6875, width=0.0625)
    assert kind == "fold"
    assert evidence["extrapolated_zero"]["overlap_square_root"] < 0.6875 - 0.25 * 0.0625


def test_a_branch_is_looked_for_at_the_top_of_the_grid_and_predictions_stay_in_the_domain():
    """The semantic branch exists above its lower end: the grid's top is an anchor candidate
    (at sigma = 0.3 it is the only one of the thresholds' extended scan above that end). A
    prediction with theta^2 >= rho q is no start: the last point is used instead."""
    from types import SimpleNamespace

    from derivations import ModelSpec
    from numerics.branches.follow import anchor_alphas, extrapolate
    from numerics.overlaps import Overlaps

    grid = np.array([3.0, 3.6, 4.32, 5.18, 6.22, 7.5])
    assert anchor_alphas(2.0, grid)[-1] == 7.5
    spec = ModelSpec(omega=0.3, sigma=0.3)
    pts = [SimpleNamespace(alpha=a, model=spec, overlaps=Overlaps(q=q, m=0.0, V=15.0, theta=t))
           for a, q, t in ((7.5, 0.0158, 0.0328), (6.2, 0.0080, 0.0217))]
    out = extrapolate(pts, 4.0)  # linear: q = 0.0019, theta = 0.0033 >= sqrt(rho q) = 0.0013
    assert out == pts[-1].overlaps
    assert extrapolate(pts, 6.0).theta**2 < spec.rho * extrapolate(pts, 6.0).q


@pytest.mark.slow
def test_the_semantic_branch_at_sigma_0_3_is_found_above_its_lower_end():
    """omega = 0.3, sigma = 0.3 (draft): the semantic branch exists from alpha ~ 4.8 upward,
    where theta vanishes (docs/studies/branch_ends.md); followed on the top of the
    thresholds' extended scan it is found and its lower end is classified vanishing."""
    from derivations import ModelSpec
    from numerics.branches.follow import follow_branch

    curve = follow_branch(ModelSpec(omega=0.3, sigma=0.3), [4.32, 5.18, 6.22, 7.5], "semantic", "draft",
                          bisections=2)
    assert [round(p.alpha, 2) for p in curve.points] == [5.18, 6.22, 7.5]
    (end,) = curve.spinodals
    assert end["side"] == "lower" and 4.3 < end["alpha"] < 5.2 and end["kind"] == "vanishing"


def test_an_end_located_without_its_classification_is_the_same_end():
    """``classify_ends=False`` (the thresholds' scan) changes only the end's kind: the points, the
    bisected end, its bracket and the last alpha found are those of the classified follow (default
    model, semantic branch below its start near alpha = 0.7, draft)."""
    from derivations import ModelSpec
    from numerics.branches.follow import NOT_CLASSIFIED, follow_branch

    grid = [0.5, 0.75, 1.0]
    classified = follow_branch(ModelSpec(), grid, "semantic", "draft", bisections=2)
    located = follow_branch(ModelSpec(), grid, "semantic", "draft", bisections=2, classify_ends=False)
    assert [p.values for p in located.points] == [p.values for p in classified.points]
    (a,), (b,) = classified.spinodals, located.spinodals
    assert a["kind"] == "vanishing" and b["kind"] == NOT_CLASSIFIED
    assert {k: b[k] for k in ("side", "alpha", "alpha_error", "last_found")} == \
        {k: a[k] for k in ("side", "alpha", "alpha_error", "last_found")}
    assert b["evidence"]["first_not_found"] == a["evidence"]["first_not_found"]


@pytest.mark.parametrize("fast_end, draft_end, saved", [(0.72, 0.70, 2), (0.72, 0.74, 0), (0.60, 0.55, 0),
                                                        (0.74, 0.74, 3)],
                         ids=["draft reaches further", "draft ends first", "no draft loss inside", "same end"])
def test_a_bisection_probed_by_a_cheaper_precision_ends_in_the_fast_bracket(monkeypatch, fast_end, draft_end, saved):
    """A spinodal bisection whose probes are first solved at the draft precision (``probe_precision``)
    ends in the bracket of the bisection by fast solves alone, with the same points found, each fast
    solve made from the point the fast bisection makes it from; where the draft branch ends first, its
    loss is not confirmed and the bisection is made again without it. Existence here is a given end per
    precision (the branch found above it)."""
    from types import SimpleNamespace

    from numerics.branches import follow

    calls = []

    def try_solve(spec, alpha, branch, precision, start, model, near=None):
        calls.append((precision, alpha, near.alpha))
        return SimpleNamespace(alpha=alpha, overlaps=None,
                               found=alpha > (fast_end if precision == "fast" else draft_end))

    monkeypatch.setattr(follow, "try_solve", try_solve)
    monkeypatch.setattr(follow, "is_on_branch", lambda fp, branch: fp.found)
    trail = [SimpleNamespace(alpha=1.0, overlaps=None), SimpleNamespace(alpha=0.75, overlaps=None)]
    alone = follow._bisection(None, None, "semantic", "fast", trail, 0.5, 4)
    fast_alone = list(calls)
    calls.clear()
    end, _ = follow._bisect_spinodal(None, None, "semantic", "fast", trail, 0.5, 4, classify=False)
    lo, hi, good, found = alone
    assert (end["alpha"], end["alpha_error"], end["last_found"]) == (0.5 * (lo + hi), abs(hi - lo), good.alpha)
    assert lo - 0.25 / 16 <= fast_end < lo  # the fast end lies in the bracket
    fast_probed = [c for c in calls if c[0] == "fast"]
    if draft_end <= fast_end:  # the draft's losses are the fast precision's: fewer fast solves, the same ones
        assert set(fast_probed) <= set(fast_alone) and len(fast_probed) == len(fast_alone) - saved
        assert follow._bisection(None, None, "semantic", "fast", trail, 0.5, 4, "draft")[:2] == (lo, hi)
    elif draft_end > fast_end:  # a draft loss the fast solve contradicts: bisected again by fast solves
        assert follow._bisection(None, None, "semantic", "fast", trail, 0.5, 4, "draft") is None
        assert fast_probed[-len(fast_alone):] == fast_alone
