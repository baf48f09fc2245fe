"""One interface for the channel side, with two implementations (docs/numerics.md, section "The
general model: QMC integrator").

A channel integrator maps the overlaps to the conjugates with their standard errors, ``E[M]`` and
diagnostics: ``integrator.estimate(overlaps, alpha) -> ChannelEstimate``.

* :class:`~numerics.channel.qmc.channel.QMCChannel`: randomised quasi-Monte Carlo over the ``L (r + t)``
  Gaussian variables, for every model;
* :class:`LineChannel`: the line quadrature of :mod:`numerics.channel.lines`, which locates the switches
  of the global prox, for the model it was built for (two tokens, ``r = t = 1``,
  ``P = [[1], [-1]]``); its error is estimated by solving with two rules
  (:func:`numerics.fixed_points.lines.solve_branch`), so a single evaluation carries no standard error.

:func:`choose_integrator` resolves ``auto`` (the line quadrature where it applies).
"""
from __future__ import annotations

import numpy as np

from derivations import ModelSpec

from numerics.matrix_overlaps import MatrixHats, MatrixOverlaps

INTEGRATORS = ("auto", "lines", "qmc")


class IntegratorError(ValueError):
    """An integrator was asked for a model it does not handle (``parameter`` names the option)."""

    def __init__(self, message: str):
        super().__init__(f"integrator: {message}")
        self.parameter = "integrator"


def choose_integrator(spec: ModelSpec, integrator: str = "auto", branch: str = "semantic") -> str:
    """``lines`` or ``qmc``: ``auto`` is the line quadrature for the two-token rank-one model on the
    branches it knows, the quasi-Monte Carlo integrator otherwise."""
    if integrator not in INTEGRATORS:
        raise IntegratorError(f"unknown {integrator!r}; choose from {', '.join(INTEGRATORS)}")
    from numerics.overlaps import FIXED_ZERO

    line_case = spec.is_two_token_rank_one and branch in FIXED_ZERO
    if integrator == "auto":
        return "lines" if line_case else "qmc"
    if integrator == "lines" and not line_case:
        raise IntegratorError(f"the line quadrature handles L = 2 tokens, r = t = 1, P = [[1], [-1]] and the branches "
                              f"{', '.join(FIXED_ZERO)}; got shape {spec.shape}, branch {branch!r} (use qmc)")
    return integrator


class LineChannel:
    """The line quadrature (:mod:`numerics.channel.lines`) behind the channel-integrator interface, with one
    :class:`~numerics.channel.lines.rule.ChannelRule`."""

    def __init__(self, spec: ModelSpec, rule=None):
        from numerics.model.bound import bind
        from numerics.precision import PRECISIONS

        spec.require_two_token_rank_one("the line quadrature")
        self.model = bind(spec)
        self.rule = rule if rule is not None else PRECISIONS["fast"].check_rule

    def estimate(self, ov: MatrixOverlaps, alpha: float):
        from numerics.overlaps import Overlaps
        from numerics.channel.qmc.channel import ChannelEstimate
        from numerics.model.saddle_point import update_hat_overlaps

        side = update_hat_overlaps(self.model, Overlaps(*(float(getattr(ov, n)[0, 0]) for n in ("q", "m", "V", "theta"))),
                                   alpha, self.rule)
        h = side.hats
        hats = MatrixHats(ov.shape, qhat=h.qhat, mhat=h.mhat, Vhat=h.Vhat, thetahat=h.thetahat)
        nan = MatrixHats.unpack(ov.shape, np.full(4, np.nan))
        return ChannelEstimate(
            hats=hats, scramble_hats=(), standard_error=nan, mean_envelope=side.mean_envelope,
            scramble_envelopes=np.array([]),
            other_forms={"Vhat": np.array([[side.Vhat_other_form]]), "thetahat": np.array([[side.thetahat_other_form]])},
            diagnostics={"unresolved_weight": side.channel.unresolved_weight,
                         "max_prox_gradient": side.channel.max_gradient_norm, "nodes": side.channel.n_nodes})
