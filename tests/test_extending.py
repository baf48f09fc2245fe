"""docs/extending.md: the sections a reader pastes run as written and say what they compute."""
from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

from derivations import ModelSpec
from numerics import api

ROOT = Path(__file__).resolve().parents[1]


def _section_code(title: str) -> str:
    """The Python block of the section ``# title`` of docs/extending.md."""
    text = (ROOT / "docs" / "extending.md").read_text()
    section = text.split(f"\n# {title}\n", 1)[1].split("\n# ", 1)[0]
    return section.split("```python\n", 1)[1].split("```", 1)[0]


def test_the_line_quadrature_as_an_integrator_gives_the_line_solve():
    """The line quadrature behind ``estimate(overlaps, alpha)``, solved by the one map with the matrix
    model's prior half-step: the line solve's fixed point to the solvers' tolerance (two forms of one
    equation), and the test error within its stated error."""
    from numerics.channel.integrators import LineChannel
    from numerics.precision import PRECISIONS

    spec = ModelSpec(omega=0.3)
    line = api.solve(spec, 2.0, "semantic", "draft")
    fp = api.solve_on_channel(spec, 2.0, LineChannel(spec, PRECISIONS["draft"].check_rule), "semantic")
    assert fp.converged and fp.residual < 1e-9 and fp.integrator == "user"
    for name in ("q", "V", "theta"):
        assert float(getattr(fp.overlaps, name)[0, 0]) == pytest.approx(getattr(line.overlaps, name), rel=1e-8)
    assert np.all(fp.overlaps.m == 0)  # the semantic subspace
    assert fp.train_loss == pytest.approx(line.train_loss, rel=1e-10)
    assert abs(fp.test_error - line.test_error) <= 3 * fp.error["test_error"]


def test_your_own_integrator_as_pasted_from_the_docs():
    """The section's plain Monte Carlo integrator, run as written: it converges, and its fixed point is
    the line quadrature's to the Monte Carlo error (at seed 0: 0.16% in q, 0.08% in theta and the training
    loss, 2e-5 in V; 2% allowed)."""
    scope: dict = {}
    exec(compile(_section_code("Your own integrator"), "docs/extending.md", "exec"), scope)
    mc, lines = scope["mc"], scope["lines"]
    assert mc.converged and mc.integrator == "mc"
    for name in ("q", "V", "theta"):
        assert float(getattr(mc.overlaps, name)[0, 0]) == pytest.approx(getattr(lines.overlaps, name), rel=2e-2)
    assert mc.train_loss == pytest.approx(lines.train_loss, rel=2e-2)


def test_an_integrator_solve_that_does_not_converge_says_so():
    from numerics.channel.integrators import LineChannel
    from numerics.precision import PRECISIONS

    spec = ModelSpec(omega=0.3)
    fp = api.solve_on_channel(spec, 2.0, LineChannel(spec, PRECISIONS["draft"].check_rule), "semantic", maxiter=2)
    assert not fp.converged and fp.residual > 1e-6 and "not converged" in fp.status
