"""The range of ``alpha``, ``sigma`` and ``lam`` where the fixed points of the saddle-point
equations can be solved (measured on the two-token rank-one model), and the error for a request outside it (docs/numerics.md,
section 4).

* ``alpha <= ALPHA_MAX``. As ``alpha`` grows the semantic fixed point approaches
  ``theta^2 = rho q``, where the Gaussian pair ``(h, h*)`` of docs/theory.md, section 2.2
  becomes degenerate: the spread of ``w`` given ``h*``, which the channel quadrature
  integrates over, vanishes. For the default model ``1 - theta^2/(rho q)`` is
  2.5e-5 at ``alpha = 1e3`` and falls like ``1/alpha``; once it nears the solver's relative
  tolerance, iterates step outside ``theta^2 < rho q`` (at ``alpha = 1e9`` the draft solve
  stalled at a residual of 1e-5 after 90 s). ``ALPHA_MAX`` keeps it above 1e-6.
* ``SIGMA_MIN <= sigma <= SIGMA_MAX``. The default starts and the channel quadrature are
  scaled for the token spread of docs/theory.md, section 1 (``sigma`` of order 0.5). At
  ``alpha = 1`` (draft) ``sigma`` = 0.75 and 1 are solved (semantic and trivial branches, 94 s
  and 208 s on a loaded two-core machine), ``sigma = 1.5`` did not finish in 320 s, ``sigma = 2``
  stalls at a residual of 1.5e-2 in the 300 s of a draft solve, and at
  ``sigma`` = 5 to 1e6 the channel expectations are not finite at the default start (the
  teacher's softmax of ``h* h*^T``, whose spread grows like ``sigma^2``, saturates; beyond
  ``sigma ~ 1e154`` ``rho = sigma^2`` overflows). Small ``sigma`` is solved down to 1e-6 (only
  the trivial point exists there); ``rho`` underflows below ``~1e-154``. Inside the range a
  branch need not exist: at ``sigma = 0.3``, ``alpha = 2`` the semantic branch is not found
  (the default start lies outside ``theta^2 < rho q`` and every searched start collapses onto
  the trivial point), and ``attnphase thresholds --sigma 0.3`` fails in one line.
* ``lam > 0``. Without the ridge, ``V = sigma^2/(lam + sigma^2 Vhat)`` is bounded only by
  ``Vhat``, and below the interpolation threshold the minimiser's norm is unbounded: at
  ``lam = 0``, ``alpha = 0.5`` the iterates reach ``q = 1.5e5`` and nothing converges. There is
  no upper limit: a strong ridge only pulls the student to the trivial point (``lam = 1e6``,
  ``alpha = 1``, draft: the trivial point, ``q = 2.8e-18``). A typed regulariser ``c(lam) w**2`` is
  the ridge of strength ``k = 2 c(lam)`` (:attr:`derivations.spec.ModelSpec.ridge_strength`), and
  the same bound holds for ``k``.
"""
from __future__ import annotations

from derivations import ModelSpec
from derivations.spec import ModelSpecError

#: the largest alpha solved (module docstring)
ALPHA_MAX = 1e4
#: the range of sigma solved (module docstring)
SIGMA_MIN, SIGMA_MAX = 1e-6, 1.0


class OutsideSolverRange(ModelSpecError):
    """``alpha``, ``sigma`` or ``lam`` lies outside the range where the fixed points can be solved;
    ``parameter`` names it and the message states the range."""


def check_solver_range(spec: ModelSpec, alpha: float) -> None:
    """Raise :class:`OutsideSolverRange` for an ``alpha``, ``sigma`` or ``lam`` outside the range
    of this module."""
    if not 0 < alpha <= ALPHA_MAX:
        raise OutsideSolverRange("alpha", f"{alpha:g} is outside the solvable range 0 < alpha <= {ALPHA_MAX:g} "
                                          "(beyond it the fixed point nears theta^2 = rho q, where the "
                                          "channel quadrature degenerates)")
    check_model_range(spec)


def check_model_range(spec: ModelSpec) -> None:
    """Raise :class:`OutsideSolverRange` for a ``sigma`` or ``lam`` outside the range of this
    module (checked before any number of the model is computed: ``sigma = 1e300`` would
    overflow ``rho``)."""
    if not SIGMA_MIN <= spec.sigma <= SIGMA_MAX:
        raise OutsideSolverRange("sigma", f"{spec.sigma:g} is outside the solvable range {SIGMA_MIN:g} <= sigma <= "
                                          f"{SIGMA_MAX:g} (the starts and the channel quadrature are scaled for "
                                          "sigma of order 0.5; from 1.5 the solve stalls, and from 5 the "
                                          "teacher's softmax saturates and the channel expectations are not finite)")
    if spec.regulariser == "ridge" and not spec.lam > 0:
        raise OutsideSolverRange("lam", f"{spec.lam:g} is outside the solvable range lam > 0 (without the ridge "
                                        "V and q are unbounded below the interpolation threshold)")
    if not spec.ridge_strength > 0:
        raise OutsideSolverRange("lam", f"{spec.lam:g} gives the regulariser {spec.regulariser} the strength "
                                        f"k = {spec.ridge_strength:g}, outside the solvable range k > 0 (without "
                                        "a penalty V and q are unbounded below the interpolation threshold)")
