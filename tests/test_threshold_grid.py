"""Thresholds everywhere: every model of a coarse version of the robustness grid
(benchmarks/threshold_grid.py) gives alpha_c and alpha_l with their values, or says why
there is none (a branch absent, with its spinodal or what its starts gave; a crossing
beyond the scanned range, with the range), never a solver failure. Draft precision."""
import numpy as np
import pytest

from derivations import ModelSpec
from numerics.thresholds.locate import locate_thresholds
from numerics.thresholds.record import BranchAbsent, CrossingBeyondScan

SYM, ASYM = ((0.6, 0.4), (0.4, 0.6)), ((0.3, 0.7), (0.8, 0.2))


def outcome(spec):
    """``(kind, text)``: ``ok`` or ``alpha_l beyond the scan`` with the values, or the kind
    of reason why there is no alpha_c. Anything else (a SolverError, a RootFindingError)
    propagates and fails the test."""
    try:
        th = locate_thresholds(spec, "draft")
    except BranchAbsent as exc:
        text = str(exc)
        assert "spinodal" in text or "was not found on alpha in [" in text, text
        return "branch absent", text
    except CrossingBeyondScan as exc:
        text = str(exc)
        assert "alpha in [" in text, text
        return "crossing beyond the scan", text
    assert np.isfinite(th.alpha_c)
    if th.alpha_l_status == "ok":
        assert np.isfinite(th.alpha_l) and th.alpha_l > 0
        return "ok", f"alpha_c = {th.alpha_c:.5f}, alpha_l = {th.alpha_l:.5f}"
    assert th.alpha_l_status.startswith("not bracketed") and "alpha" in th.alpha_l_status
    assert np.isnan(th.alpha_l) and th.to_dict()["alpha_l"] is None
    return "alpha_l beyond the scan", th.alpha_l_status


@pytest.mark.parametrize("A, sigma, lam, omega, expected", [
    # the positional branch ends just above the crossing (about 2 minutes on the 2-core machine)
    pytest.param(SYM, 0.5, 0.01, 0.0, "ok", marks=pytest.mark.slow),
    # alpha_l above the default scan, found on its extension (the extension alone is tested
    # faster in test_numerics)
    pytest.param(SYM, 0.5, 0.01, 0.45, "ok", marks=pytest.mark.slow),
])
def test_coarse_grid_gives_a_threshold_or_a_reason(A, sigma, lam, omega, expected):
    kind, text = outcome(ModelSpec(sigma=sigma, lam=lam, omega=omega, A=A))
    if expected is not None:
        assert kind == expected, text


@pytest.mark.slow
@pytest.mark.parametrize("A", ["sym", "asym"])
@pytest.mark.parametrize("sigma", [0.3, 1.0])
@pytest.mark.parametrize("lam", [0.001, 0.01, 0.1])
@pytest.mark.parametrize("omega", [0.0, 0.25, 0.45])
def test_coarse_grid_everywhere(A, sigma, lam, omega):
    outcome(ModelSpec(sigma=sigma, lam=lam, omega=omega, A=SYM if A == "sym" else ASYM))
