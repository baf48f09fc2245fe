"""The public theory API used by the command line, validation and the phase diagrams: one front
for every model (any ``L``, ``r``, ``t``, ``P``).

* :func:`solve` one branch at one ``alpha``, :func:`solve_all` every branch of the model there,
  :func:`follow` one branch along an ``alpha`` grid, :func:`thresholds` where the global minimum
  changes branch and where it beats the linear baseline;
* :func:`solve_on_channel`: a branch's fixed point with any object that gives the conjugates at given
  overlaps (your own integrator, docs/extending.md);
* :func:`scramble_workers`: within it, QMC solves hand their independent scramblings to that many
  processes (the same values, to the last bit);
* :func:`run_gamp`: message passing on a finite instance's empirical risk (:class:`SampleLoss` its exact
  per-sample loss), :func:`state_evolution` the undamped saddle-point iteration it follows, and
  :func:`rs_stability` the replica-symmetric stability of a fixed point (docs/gamp.md);
* one record, :class:`FixedPoint`, with one CSV/JSON schema for every model and integrator (matrices
  plus gauge invariants, with errors; the paper's model as the ``1 x 1`` case), and one curve,
  :class:`BranchCurve`.

The channel integrator is chosen by :func:`numerics.channel.integrators.choose_integrator` and stated to
the layers above as a :class:`Method` (:func:`method`): the line
quadrature where it applies (the paper's two-token rank-one model on the branches it knows),
quasi-Monte Carlo elsewhere. That choice is the one place where the model's shape decides a method.

Exceptions: :class:`BranchNotFound` (a solve for a branch fell onto the trivial point),
:class:`SolverError` (the solver failed), :class:`OutsideSolverRange` (``alpha`` or ``lam``
outside the solvable range; a ``ValueError``), :class:`ThresholdError` (no threshold, for a reason
of the model: :class:`BranchAbsent`, :class:`CrossingBeyondScan`), :class:`ThresholdLocationError`
(a solve that locating a threshold needs failed: a :class:`SolverError`) and :class:`RootFindingError`.
"""
from __future__ import annotations

import logging
from typing import TYPE_CHECKING, Optional, Sequence

from derivations import ModelSpec

from numerics.threads import one_blas_thread

if TYPE_CHECKING:  # the annotation's name only: the module is imported at first use
    from numerics.branches.follow import BranchCurve

#: every public name and the module that defines it: imported at first use (PEP 562), so that a
#: command that only parses its options, or fails on them, does not import the solvers (0.7 s)
_LAZY = {
    **dict.fromkeys(("Baseline", "linear_baseline", "linear_baseline_mp"), "numerics.baseline"),
    **dict.fromkeys(("BranchCurve", "follow_branch", "is_on_branch", "walk_branch"), "numerics.branches.follow"),
    **dict.fromkeys(("IntegratorError", "INTEGRATORS", "Method"), "numerics.channel.integrators"),
    "BranchNotFound": "numerics.fixed_points.errors",
    **dict.fromkeys(("branches", "solve"), "numerics.fixed_points.solve"),
    "GENERAL_BRANCHES": "numerics.fixed_points.subspaces",
    "scramble_workers": "numerics.fixed_points.workers",
    "solve_on_channel": "numerics.fixed_points.channel_solve",
    **dict.fromkeys(("DAMPINGS", "GampError", "GampResult", "run_gamp"), "numerics.gamp.iteration"),
    "SampleLoss": "numerics.gamp.sample_prox",
    "state_evolution": "numerics.gamp.state_evolution",
    "MatrixOverlaps": "numerics.matrix_overlaps",
    **dict.fromkeys(("BRANCHES", "COMPETING_BRANCHES", "HatOverlaps", "Overlaps", "value_with_error"),
                    "numerics.overlaps"),
    "PRECISIONS": "numerics.precision",
    **dict.fromkeys(("FixedPoint", "failed_point", "from_row", "mark_global_minima",
                     "zero_by_symmetry"), "numerics.result"),
    "check_model_range": "numerics.solver_range",
    **dict.fromkeys(("RSStability", "rs_stability", "rs_unstable", "with_rs_stability"), "numerics.stability"),
    "locate_thresholds": "numerics.thresholds.locate",
    **dict.fromkeys(("CrossingBeyondScan", "ThresholdError", "ThresholdLocationError", "Thresholds", "Transition"),
                    "numerics.thresholds.record"),
    "scan_curves_from_rows": "numerics.thresholds.scan",
    "WORKER_ENVIRONMENT": "numerics.threads",
    **dict.fromkeys(("BACKENDS", "current_backend", "use_backend"), "numerics.backend"),
}

__all__ = sorted(set(_LAZY) | {"method", "default_branches", "default_precision", "solve_all", "follow",
                               "thresholds"})


def __getattr__(name):
    if name in _LAZY:
        import importlib

        value = getattr(importlib.import_module(_LAZY[name]), name)
        globals()[name] = value
        return value
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


def __dir__():
    return sorted(set(globals()) | set(_LAZY))


def _use(name: str):
    """A public name as this module holds it now (imported at first use; a test may have replaced it)."""
    return globals()[name] if name in globals() else __getattr__(name)


log = logging.getLogger(__name__)


def method(spec: ModelSpec, names: Optional[Sequence[str]] = None, integrator: str = "auto"):
    """How the branches ``names`` of ``spec`` are solved (:class:`~numerics.channel.integrators.Method`:
    whether its records are deterministic in ``alpha``, the branches compared by default, the precision
    beside a simulation); ``names=None``: the branches compared by default. :class:`IntegratorError`
    for an integrator the model does not have."""
    from numerics.channel.integrators import method_for

    return method_for(spec, names, integrator, every_branch=_use("branches")(spec))


def default_branches(spec: ModelSpec, integrator: str = "auto") -> tuple:
    """The branches compared by default: the paper's competing pair where the line quadrature
    solves both, every branch of the model (:func:`branches`) otherwise."""
    return method(spec, None, integrator).branches


def default_precision(spec: ModelSpec, integrator: str = "auto") -> str:
    """The precision a theory point is solved at by default beside a simulation: ``fast`` where the
    line quadrature solves the model (a few seconds a point), ``draft`` otherwise (a fast QMC point
    costs tens of seconds)."""
    return method(spec, ("semantic",), integrator).precision


@one_blas_thread
def solve_all(spec: ModelSpec, alpha: float, precision: str = "fast", integrator: str = "auto",
              names: Optional[Sequence[str]] = None) -> list:
    """Every branch of ``names`` (default :func:`branches`) found at ``alpha``, with
    ``global_minimum`` on the lowest training loss among the converged ones
    (:func:`mark_global_minima`; docs/theory.md, section 3.1). A branch whose solve falls onto a
    smaller one (:class:`BranchNotFound`) is absent and left out; a branch whose solve did not
    converge is reported as it is (``converged=False`` with its residual), since a failure is not
    an absence."""
    found = []
    for branch in names or _use("branches")(spec):
        try:
            found.append(_use("solve")(spec, alpha, branch, precision, integrator))
        except _use("BranchNotFound") as exc:
            log.info("%s", exc)
    return _use("mark_global_minima")(found)


@one_blas_thread
def follow(spec: ModelSpec, alphas: Sequence[float], branch: str, precision: str = "fast",
           integrator: str = "auto", progress=None) -> BranchCurve:
    """``branch`` along ``alphas`` by continuation, as a :class:`BranchCurve` (its points, the
    spinodals where the integrator locates them, and a note on where it was not found):
    :func:`numerics.branches.follow.follow_branch`, whose integrator's :class:`Method` decides how the
    ends of the branch are found. ``progress(x)`` is called as the points come (its argument is not
    to be relied on)."""
    return _use("follow_branch")(spec, alphas, branch, precision, progress=progress, integrator=integrator)


@one_blas_thread
def thresholds(spec: ModelSpec, precision: str = "fast", alphas: Optional[Sequence[float]] = None,
               integrator: str = "auto", names: Optional[Sequence[str]] = None, scan: Optional[dict] = None,
               progress=None, mapper=None, **options):
    """Where the global minimum changes branch (``alpha_c``) and where it beats the linear
    baseline (``alpha_l``), with error bars: :func:`numerics.thresholds.locate.locate_thresholds`, one
    locator for every model, whose root-finding strategy the integrator's :class:`Method` decides.

    ``alphas``: the bracketing scan (default 0.5..2.5 in 9 points), extended where the change or
    ``alpha_l`` lies beyond it unless ``scan`` is given; ``scan``: ``{branch: BranchCurve}`` already
    followed on it (e.g. by :func:`follow`); ``names``: the branches compared (default the model's
    competing pair where the line quadrature solves them, else :func:`branches`); ``progress``: told
    the scans and roots or the solves done; ``mapper(function, items)`` runs the branches' walks and
    a birth's scramblings, on workers if it chooses; ``options`` (``strategy``, ``extend``, ``xtol``)
    go to the locator. The record is one :class:`Thresholds`: ``alpha_c`` the first of its
    ``transitions`` (NaN where the global branch does not change on the scan), ``alpha_l`` NaN with
    its ``alpha_l_status`` where it is not bracketed."""
    return _use("locate_thresholds")(spec, precision, alphas, integrator, names, scan, progress, mapper, **options)
