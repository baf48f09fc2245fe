"""The state evolution of GAMP (docs/gamp.md, section 3): the undamped saddle-point iteration of
docs/theory.md, section 4, from given overlaps.

In the high-dimensional limit the overlaps of GAMP's iterate ``Q^t`` (``q^t, m^t, theta^t``) and its
variance ``V^t`` are those of the saddle-point map applied ``t`` times: the cavity fields ``omega_i``
are the theory's ``w`` at ``(q^t, m^t, theta^t)`` (jointly Gaussian with the teacher's ``h*``), the
output side's averages are the channel side's conjugates, and the ridge's linear denoiser is the
prior side. One step here is one channel estimate (the integrator of :mod:`numerics.channel.integrators`)
and the generated prior updates; nothing is damped, projected or accelerated, except that a model
other than the two-token rank-one one is evaluated on the branch's subspace (the QMC channel folds
the moments odd under its symmetries).
"""
from __future__ import annotations

from typing import List

from derivations import ModelSpec

from numerics.channel.integrators import channel_for
from numerics.matrix_overlaps import MatrixOverlaps
from numerics.model.general import bind_general


def state_evolution(spec: ModelSpec, alpha: float, start: MatrixOverlaps, steps: int, branch: str = "semantic",
                    precision: str = "fast", integrator: str = "auto") -> List[MatrixOverlaps]:
    """``[x_0, x_1, ..., x_steps]`` with ``x_0 = start`` and ``x_{t+1}`` the prior side of the channel
    side at ``x_t`` (module docstring). ``branch``: the subspace the QMC channel folds on (the line
    quadrature takes any point of the two-token model). Stops early, with the points so far, where a
    point leaves the domain of the Gaussian measure (``FloatingPointError``/``OutsideDomain``)."""
    model = bind_general(spec)
    channel, subspace = channel_for(spec, branch, precision, integrator)
    x = start if subspace is None else subspace.project(start)
    out = [x]
    for _ in range(steps):
        try:
            est = channel.estimate(x, alpha)
        except (FloatingPointError, ValueError):
            break
        new = model.prior_updates(**est.hats.matrices())
        x = MatrixOverlaps(spec.shape, **new)
        if subspace is not None:
            x = subspace.project(x)
        out.append(x)
    return out
