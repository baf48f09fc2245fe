"""The one solve of a fixed point, for every model, whichever channel integrator
(docs/numerics.md, section "The general model: QMC integrator").

:func:`solve` returns a :class:`~numerics.result.FixedPoint` for any shape ``(L, r, t, k)``: with
the line quadrature (the two-token rank-one model on the branches it knows; its solve is
:func:`numerics.fixed_points.lines.solve_branch`, errors from two rules, the record's overlaps the
scalars ``q, m, V, theta``) or with the quasi-Monte Carlo integrator
(:func:`numerics.fixed_points.qmc.solve_qmc`, errors from independent scramblings, matrix overlaps).
:func:`numerics.result.as_matrices` puts the first in the form of the second.
"""
from __future__ import annotations

import logging
from typing import Optional, Sequence

from derivations import ModelSpec

from numerics.channel.integrators import choose_integrator
from numerics.overlaps import Overlaps
from numerics.result import FixedPoint
from numerics.threads import one_blas_thread

log = logging.getLogger(__name__)


def _scalars(start) -> Optional[Overlaps]:
    """A start for the line quadrature: its scalars, or the ``[0, 0]`` entries of matrix overlaps."""
    if start is None or isinstance(start, Overlaps):
        return start
    return Overlaps(*(float(getattr(start, n)[0, 0]) for n in ("q", "m", "V", "theta")))


@one_blas_thread
def solve(spec: ModelSpec, alpha: float, branch: str = "semantic", precision: str = "fast",
          integrator: str = "auto", start=None, roles: Optional[Sequence[str]] = None,
          gauge: bool = True) -> FixedPoint:
    """The fixed point of ``branch`` (:data:`numerics.fixed_points.subspaces.GENERAL_BRANCHES`) at
    ``alpha``, with error estimates.

    ``integrator``: ``auto`` (the line quadrature where it applies, :func:`choose_integrator`),
    ``lines`` or ``qmc``. ``precision``: the mode of that integrator (``numerics.precision.PRECISIONS``
    or ``numerics.channel.qmc.precision.QMC_PRECISIONS``). ``start``: overlaps to start from (scalar
    or matrix). ``roles``: the student directions' roles of a subspace other than the named branch's
    (QMC only, :func:`numerics.fixed_points.subspaces.subspace_of_roles`). ``gauge``: fix the
    orientation at each iteration (QMC; off only to study what it does). Raises
    :class:`~numerics.fixed_points.lines.BranchNotFound` where the solve falls onto a smaller branch."""
    choice = choose_integrator(spec, "qmc" if roles is not None and integrator == "auto" else integrator, branch)
    if choice == "lines":
        from numerics.fixed_points.lines import solve_branch

        return solve_branch(spec, alpha, branch, precision, start=_scalars(start))
    from numerics.fixed_points.qmc import solve_qmc
    from numerics.fixed_points.subspaces import subspace_of_roles

    subspace = None if roles is None else subspace_of_roles(roles, spec.shape, branch)
    return solve_qmc(spec, alpha, branch, precision, start=start, gauge=gauge, subspace=subspace)


def branches(spec: ModelSpec) -> tuple:
    """The branches of ``spec`` (:data:`numerics.fixed_points.subspaces.GENERAL_BRANCHES`; ``mixed`` needs rank >= 2)."""
    from numerics.fixed_points.subspaces import GENERAL_BRANCHES

    return tuple(b for b in GENERAL_BRANCHES if b != "mixed" or spec.rank >= 2)
