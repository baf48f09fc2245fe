"""Pre-integration of the QMC channel along one Gaussian line (numerics/channel/qmc/preintegration.py).

Identities and behaviour: the line rule integrates smooth functions against the normal density; on
a line where the global prox switches, the fixed nodes plus the switch correction give the line's
integral of a rule a hundred times finer, and the fixed nodes alone do not; the pre-integrated
channel agrees with the line quadrature at (2, 1, 1) on both informed branches.
"""
from __future__ import annotations

import math

import numpy as np
import pytest
from scipy.stats import norm

from derivations import ModelSpec
from numerics.channel.integrators import LineChannel
from numerics.model.general import bind_general
from numerics.matrix_overlaps import from_scalars
from numerics.prox.matrix import GlobalProx
from numerics.channel.qmc.channel import QMCChannel, moment_parities
from numerics.channel.qmc.nodes import preactivations
from numerics.channel.qmc.preintegration import LineRule, line_direction, line_nodes, switch_corrections
from numerics.channel.qmc.rule import QMCRule
from numerics.fixed_points.subspaces import branch_subspace

#: the (2, 1, 1) fast fixed points at alpha = 2 (the line quadrature's)
POINTS = {"semantic": from_scalars(0.1148173, 0.0, 12.66840, 0.1581585),
          "positional": from_scalars(0.0510709, 0.2582290, 11.36879, 0.0)}


def test_the_line_rule_integrates_smooth_functions_against_the_normal_density():
    rule = LineRule.make(6, 5, 6.0)
    t, w = rule.t, rule.weights
    assert abs(w.sum() - 1.0) < 1e-6  # six cells of five points: 4.4e-7
    assert abs(w @ t**2 - 1.0) < 1e-5
    assert abs(w @ t**4 - 3.0) < 3e-5
    assert abs(w @ np.cos(2 * t) - math.exp(-2.0)) < 3e-5
    a, b = np.array([-0.3, 1.1]), np.array([0.2, 1.9])
    _, wq = rule.piece(a, b)
    assert np.allclose(wq.sum(axis=1), norm.cdf(b) - norm.cdf(a), rtol=1e-9, atol=0)


def _line_integrals(model, ov, subspace, rule, nodes, dim):
    """Per line: the fixed nodes' sum, and that sum plus the switch corrections, of the moments."""
    rho = model.spec.rho
    zeta, hs, w = preactivations(nodes, ov, rho, model.positional_mean(ov.m))
    prox = GlobalProx(model, nodes.size, 2, 8)
    h, _, _ = prox(w, hs, ov.V)
    odd = moment_parities(model, subspace)
    moments = model.channel_moments(h, zeta, hs, ov.m, ov.V)
    moments[:, odd] = 0.0
    n = len(rule.t)
    fixed = np.einsum("lnk,n->lk", moments.reshape(-1, n, moments.shape[1]), rule.weights)
    unit = line_direction(model.shape, dim)
    z1, s1, _ = preactivations(unit, ov, rho, np.zeros(zeta.shape[1]))
    z0, s0, _ = preactivations(type(unit)(0 * unit.y, 0 * unit.xi, 1, 1), ov, rho, np.zeros(zeta.shape[1]))
    corrections, report = switch_corrections(model, ov, rule, h, zeta, hs, w, (z1 - z0)[0], (s1 - s0)[0], odd,
                                             1e-11)
    return fixed, fixed + corrections, report


def test_the_switch_correction_gives_the_integral_of_a_much_finer_rule_on_lines_with_a_switch():
    spec = ModelSpec()
    model = bind_general(spec)
    subspace = branch_subspace("positional", spec.shape)
    ov, dim = POINTS["positional"], 3
    rule = LineRule.make(6, 5, 6.0)
    nodes = line_nodes(model.shape, 8, 1, 0, rule, dim)
    fixed, corrected, report = _line_integrals(model, ov, subspace, rule, nodes, dim)
    switched = np.nonzero(np.any(corrected != fixed, axis=1))[0]
    assert report["switches"] > 0 and switched.size > 0
    # the same lines by a rule of 600 cells (no switch location: its error is a few thousandths of
    # a switch's jump times the density there)
    fine = LineRule.make(600, 5, 6.0)
    n, m = len(rule.t), len(fine.t)
    lines = switched[:3]
    y = np.repeat(nodes.y[lines * n], m, axis=0)
    xi = np.repeat(nodes.xi[lines * n], m, axis=0)
    z = np.concatenate([y, xi], axis=-1).reshape(len(y), -1)
    z[:, dim] = np.tile(fine.t, len(lines))
    z = z.reshape(len(y), model.shape.L, -1)
    fine_nodes = type(nodes)(z[..., :model.shape.t], z[..., model.shape.t:], 1, len(z))
    _, reference, _ = _line_integrals(model, ov, subspace, fine, fine_nodes, dim)
    error_corrected = np.max(np.abs(corrected[lines] - reference))
    error_fixed = np.max(np.abs(fixed[lines] - reference))
    assert error_corrected < 0.1 * error_fixed, (error_corrected, error_fixed)


@pytest.mark.parametrize("branch", [pytest.param("semantic", marks=pytest.mark.slow), "positional"])
def test_the_preintegrated_channel_agrees_with_the_line_quadrature(branch):
    spec = ModelSpec()
    ov = POINTS[branch]
    rule = QMCRule(log2_points=7, scrambles=8, line_cells=6, line_order=5)
    est = QMCChannel(bind_general(spec), rule, branch_subspace(branch, spec.shape)).estimate(ov, 2.0)
    ref = LineChannel(spec).estimate(ov, 2.0)
    value, se, exact = est.hats.pack(), est.standard_error.pack(), ref.hats.pack()
    nonzero = exact != 0
    assert np.all(value[~nonzero] == 0.0)
    assert np.all(np.abs(value - exact)[nonzero] <= 4 * se[nonzero]), (value, exact, se)
    assert np.all(se[nonzero] < 5e-2 * np.abs(exact[nonzero]))
    assert est.diagnostics["lines"] == 8 * 2**7
