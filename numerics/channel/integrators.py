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

:func:`choose_integrator` resolves ``auto`` (the line quadrature where it applies);
:func:`method_for` states, as a :class:`Method`, what the layers above need to know of the choice
(whether the records are deterministic in ``alpha``, which branches are compared, at which precision
a point is solved beside a simulation), so that none of them asks which integrator it is;
:func:`channel_for` builds the integrator of a branch.
"""
from __future__ import annotations

import dataclasses
from typing import Optional, Sequence

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


#: integrators whose estimates carry quadrature noise that varies with the point (independent scramblings)
NOISY = frozenset({"qmc"})


def is_noisy(integrator: str) -> bool:
    """Whether a record solved by ``integrator`` (its ``integrator`` field) carries quadrature noise that
    varies from point to point, so that a root on it needs a noise-aware finder."""
    return integrator in NOISY


@dataclasses.dataclass(frozen=True)
class Method:
    """How the branches of a model are solved, as the layers above the channel need to know it.

    ``integrator``: the name the records carry; ``deterministic``: the records are smooth functions
    of ``alpha`` with no quadrature noise (the line quadrature: a branch's end is bisected, the
    crossing of two branches found by Newton's method, the gauge's signs fixed); otherwise a branch is
    walked on its grid and each change of the global branch located by a noise-aware root finder (QMC).
    Every integrator's records are matrix overlaps with their invariants. ``branches``: the branches
    compared by default; ``precision``: the precision of a theory point beside a simulation (a fast
    line point costs seconds, a fast QMC point tens of seconds)."""

    integrator: str
    deterministic: bool
    branches: tuple
    precision: str

    @property
    def signed_overlaps(self) -> bool:
        """Whether the records' overlaps are signed values (the line quadrature fixes the gauge's signs,
        ``m, theta >= 0`` on their branches), compared as such rather than by their invariants alone."""
        return self.deterministic


def method_for(spec: ModelSpec, names: Optional[Sequence[str]], integrator: str = "auto",
               every_branch: Sequence[str] = ()) -> Method:
    """The :class:`Method` that solves every branch of ``names`` with ``integrator`` (the line quadrature
    only if it applies to all of them; :class:`IntegratorError` for one the model does not have).
    ``names=None``: the paper's competing pair where the line quadrature solves both, else
    ``every_branch`` (the model's branches)."""
    from numerics.overlaps import COMPETING_BRANCHES

    if names is None:
        pair = tuple(COMPETING_BRANCHES)
        names = pair if {choose_integrator(spec, integrator, b) for b in pair} == {"lines"} else tuple(every_branch)
    chosen = {choose_integrator(spec, integrator, b) for b in names}
    deterministic = chosen == {"lines"}
    return Method("lines" if deterministic else "qmc", deterministic, tuple(names), "fast" if deterministic else "draft")


def channel_for(spec: ModelSpec, branch: str, precision: str, integrator: str = "auto"):
    """``(channel, subspace)``: the integrator of ``branch`` at ``precision`` behind the
    ``estimate(overlaps, alpha)`` interface, and the subspace it folds on (``None`` for the line
    quadrature, which takes any point of its model)."""
    if choose_integrator(spec, integrator, branch) == "lines":
        from numerics.precision import PRECISIONS

        return LineChannel(spec, PRECISIONS[precision].check_rule), None
    from numerics.channel.qmc.channel import QMCChannel
    from numerics.channel.qmc.precision import as_qmc_precision
    from numerics.fixed_points.subspaces import branch_subspace
    from numerics.model.general import bind_general

    subspace = branch_subspace(branch, spec.shape)
    return QMCChannel(bind_general(spec), as_qmc_precision(precision).rule, subspace), subspace


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
        from numerics.channel.lines.expectations import update_hat_overlaps

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
