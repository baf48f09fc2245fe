"""Fixed points of the general model through one entry point, whichever channel integrator
(docs/numerics.md, section "The general model: QMC integrator").

:func:`solve_general` returns a :class:`~numerics.general_result.GeneralFixedPoint` for any shape
``(L, r, t, k)``: with the line quadrature (the two-token rank-one model; its solve is
:func:`numerics.fixed_point.solve_branch`, errors from two rules) or with the quasi-Monte Carlo
integrator (:func:`numerics.qmc.solve.solve_qmc`, errors from independent scramblings).
"""
from __future__ import annotations

from typing import Optional, Sequence

from derivations import ModelSpec

from .channel_integrators import choose_integrator
from .general_result import GeneralFixedPoint, from_line_fixed_point
from .matrix_overlaps import MatrixOverlaps


def solve_general(spec: ModelSpec, alpha: float, branch: str = "semantic", precision: str = "fast",
                  integrator: str = "auto", start: Optional[MatrixOverlaps] = None,
                  roles: Optional[Sequence[str]] = None, gauge: bool = True) -> GeneralFixedPoint:
    """The fixed point of ``branch`` (:data:`numerics.subspaces.GENERAL_BRANCHES`) at ``alpha``.

    ``integrator``: ``auto`` (the line quadrature where it applies, :func:`choose_integrator`),
    ``lines`` or ``qmc``. ``precision``: the mode of that integrator (``numerics.precision.PRECISIONS``
    or ``numerics.qmc.precision.QMC_PRECISIONS``). ``start``: overlaps to start from. ``roles``: the
    student directions' roles of a subspace other than the named branch's (QMC only,
    :func:`numerics.subspaces.subspace_of_roles`). ``gauge``: fix the orientation at each
    iteration (QMC; off only to study what it does)."""
    choice = choose_integrator(spec, "qmc" if roles is not None and integrator == "auto" else integrator, branch)
    if choice == "lines":
        from .fixed_point import solve_branch
        from .overlaps import Overlaps

        scalar = None if start is None else Overlaps(*(float(getattr(start, n)[0, 0]) for n in ("q", "m", "V", "theta")))
        return from_line_fixed_point(solve_branch(spec, alpha, branch, precision, start=scalar))
    from .qmc.solve import solve_qmc
    from .subspaces import subspace_of_roles

    subspace = None if roles is None else subspace_of_roles(roles, spec.shape, branch)
    return solve_qmc(spec, alpha, branch, precision, start=start, gauge=gauge, subspace=subspace)
