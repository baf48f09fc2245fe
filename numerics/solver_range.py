"""The range of ``alpha`` and ``lam`` where the fixed points of the two-token rank-one
equations can be solved, and the error for a request outside it (docs/numerics.md,
section 4).

* ``alpha <= ALPHA_MAX``. As ``alpha`` grows the semantic fixed point approaches
  ``theta^2 = rho q``, where the Gaussian pair ``(h, h*)`` of docs/theory.md, section 2.2
  becomes degenerate: the spread of ``w`` given ``h*``, which the channel quadrature
  integrates over, vanishes. For the default model ``1 - theta^2/(rho q)`` is
  2.5e-5 at ``alpha = 1e3`` and falls like ``1/alpha``; once it nears the solver's relative
  tolerance, iterates step outside ``theta^2 < rho q`` (at ``alpha = 1e9`` the draft solve
  stalled at a residual of 1e-5 after 90 s). ``ALPHA_MAX`` keeps it above 1e-6.
* ``lam > 0``. Without the ridge, ``V = sigma^2/(lam + sigma^2 Vhat)`` is bounded only by
  ``Vhat``, and below the interpolation threshold the minimiser's norm is unbounded: at
  ``lam = 0``, ``alpha = 0.5`` the iterates reach ``q = 1.5e5`` and nothing converges.
"""
from __future__ import annotations

from derivations import ModelSpec
from derivations.spec import ModelSpecError

#: the largest alpha solved (module docstring)
ALPHA_MAX = 1e4


class OutsideSolverRange(ModelSpecError):
    """``alpha`` or ``lam`` lies outside the range where the fixed points can be solved;
    ``parameter`` names it and the message states the range."""


def check_solver_range(spec: ModelSpec, alpha: float) -> None:
    """Raise :class:`OutsideSolverRange` for an ``alpha`` or ``lam`` outside the range of
    this module."""
    if not 0 < alpha <= ALPHA_MAX:
        raise OutsideSolverRange("alpha", f"{alpha:g} is outside the solvable range 0 < alpha <= {ALPHA_MAX:g} "
                                          "(beyond it the fixed point nears theta^2 = rho q, where the "
                                          "channel quadrature degenerates)")
    if not spec.lam > 0:
        raise OutsideSolverRange("lam", f"{spec.lam:g} is outside the solvable range lam > 0 (without the ridge "
                                        "V and q are unbounded below the interpolation threshold)")
