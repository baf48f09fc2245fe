"""The threshold locator: where the global minimum changes branch (``alpha_c``, and every such change)
and where its test error falls below the linear baseline's (``alpha_l``), with error bars, for every
model (docs/theory.md, sections 3.4-3.6 and 4.10), into the one record
:class:`~numerics.thresholds.record.Thresholds`.

One skeleton (:func:`locate_thresholds`):

1. **scan** the branches compared on a grid of ``alpha`` at draft precision (or take a scan already
   solved);
2. **bracket**: find where the global branch changes between scanned points, and where the global
   minimum's test error crosses the baseline's, extending the scan on geometric grids
   (:data:`~numerics.thresholds.scan.EXTEND_UP`, :data:`~numerics.thresholds.scan.EXTEND_DOWN`) where
   either lies beyond it;
3. **refine** each root from its bracket, each solve warm-started from the nearest solved point of
   its branch (:class:`~numerics.thresholds.scan.BranchNearScan`), and ``alpha_l`` on the branch
   global there;
4. **record** the roots with their errors.

What differs between integrators is a strategy, chosen from the integrator's
:class:`~numerics.channel.integrators.Method` (:func:`strategy_for`):

* ``deterministic`` (:mod:`.deterministic`), where the records are smooth functions of ``alpha``
  without quadrature noise (the line quadrature, on the paper's competing pair): the branches'
  ends are bisected to spinodals on the scan, the crossing found by Newton's method on the
  training losses (their derivative is the envelope ``E[M]``) and ``alpha_l`` by the secant method,
  along a chain of channel rules whose last two roots' difference is the error;
* ``noisy`` (:mod:`.noisy`), where they carry quadrature noise (QMC, any model and branches): every
  branch is walked on the scan, each change located by a root finder that stops within the stated
  noise (:mod:`.noisy_roots`), births of a branch out of the global one on the parent's multiplier
  (:mod:`.births`), and the error is the noise over the slope.
"""
from __future__ import annotations

import math
import time
from typing import Callable, Optional, Protocol, Sequence

from derivations import ModelSpec

from numerics.baseline import linear_baseline
from numerics.channel.integrators import method_for
from numerics.overlaps import COMPETING_BRANCHES
from numerics.thresholds.deterministic import Deterministic
from numerics.thresholds.noisy import Noisy
from numerics.thresholds.record import Thresholds



class Strategy(Protocol):
    """What the skeleton asks of a root-finding strategy, built as ``strategy(spec, precision,
    integrator, names, progress, mapper, xtol)``."""

    def scan(self, alphas: Optional[Sequence[float]], given: Optional[dict]):
        """Step 1: the branches on the scan (``given``'s where it serves)."""

    def bracket(self, scanned, eps_lin: float, extend: bool):
        """Step 2: where the global branch changes and where the test error crosses ``eps_lin`` on the
        scan, the scan extended (with ``extend``) where either lies beyond it; raises
        :class:`~numerics.thresholds.record.ThresholdError` where there is no change to locate."""

    def refine(self, brackets, baseline) -> dict:
        """Step 3: each root refined, and ``alpha_l``: the
        :class:`~numerics.thresholds.record.Thresholds` fields but ``alpha_c`` (the first of
        ``transitions``), the baseline's, the precision, the model and the wall time."""


#: the root-finding strategies, by name
STRATEGIES = {"deterministic": Deterministic, "noisy": Noisy}


def strategy_for(spec: ModelSpec, names: Optional[Sequence[str]] = None, integrator: str = "auto",
                 scan: Optional[dict] = None) -> str:
    """``deterministic`` where the integrator's :class:`~numerics.channel.integrators.Method` is
    deterministic for the branches compared (``names``, default the paper's competing pair), these are
    that pair, and a given ``scan`` was solved by that integrator; ``noisy`` otherwise."""
    compared = tuple(names or COMPETING_BRANCHES)
    solved = method_for(spec, compared, integrator)
    # a scan solved by another integrator is located as any other model's (its points start no line solve)
    foreign = scan is not None and any(getattr(p, "integrator", solved.integrator) != solved.integrator
                                       for c in scan.values() for p in c.points)
    pair = set(compared) == set(COMPETING_BRANCHES)
    return "deterministic" if pair and not foreign and solved.deterministic else "noisy"


def locate_thresholds(spec: ModelSpec, precision: str = "fast", alphas: Optional[Sequence[float]] = None,
                      integrator: str = "auto", names: Optional[Sequence[str]] = None, scan: Optional[dict] = None,
                      progress: Optional[Callable] = None, mapper: Optional[Callable] = None,
                      strategy: Optional[str] = None, extend: bool = True, xtol: Optional[float] = None) -> Thresholds:
    """``alpha_c`` (the first change of the global branch; every change in ``transitions``) and
    ``alpha_l`` with their errors, by the module docstring's skeleton.

    ``alphas``: the scan (default :data:`~numerics.thresholds.scan.DEFAULT_ALPHAS`; the deterministic
    strategy spaces its points evenly between its ends); ``scan``: ``{branch: BranchCurve}`` already
    followed (e.g. by :func:`numerics.api.follow`, or a phase diagram's rows through
    :func:`~numerics.thresholds.scan.scan_curves_from_rows`), not solved again where it serves: the
    deterministic strategy brackets on it within the default range and refines a draft scan itself,
    the noisy one locates from its points where they are at ``precision`` and walks its alphas again
    otherwise. ``names``: the branches compared (default the competing pair where the line quadrature
    solves them, else every branch of the model). ``strategy``: ``deterministic`` or ``noisy``
    (default :func:`strategy_for`). ``extend``: a scan solved here is extended where a threshold lies
    beyond it (a given scan never is). ``xtol``: the deterministic root finders' stopping step.
    ``progress``: told the scans and roots (a message) or the solves done (a count); ``mapper(function,
    items)``: runs the noisy strategy's independent walks and scramblings, on workers if it chooses
    (:class:`~numerics.thresholds.noisy.Noisy`).

    No threshold for a reason of the model raises a
    :class:`~numerics.thresholds.record.ThresholdError` (``BranchAbsent``, ``CrossingBeyondScan``)
    and a failure of the solver a :class:`~numerics.solver.iteration.SolverError`; an ``alpha_l``
    that is not bracketed is NaN with the reason in ``alpha_l_status`` (``alpha_c`` is kept)."""
    t0 = time.perf_counter()
    chosen = strategy or strategy_for(spec, names, integrator, scan)
    if chosen not in STRATEGIES:
        raise ValueError(f"strategy: {chosen!r} is not one of {', '.join(STRATEGIES)}")
    locator: Strategy = STRATEGIES[chosen](spec, precision, integrator, names, progress, mapper, xtol)
    baseline = linear_baseline(spec)
    scanned = locator.scan(alphas, scan)
    brackets = locator.bracket(scanned, baseline.test_error, extend)
    fields = locator.refine(brackets, baseline)
    first = fields["transitions"][0] if fields["transitions"] else None
    return Thresholds(alpha_c=first.alpha if first else math.nan, alpha_c_error=first.error if first else math.nan,
                      linear_test_error=baseline.test_error, linear_test_error_error=baseline.error,
                      precision=precision, model=spec, wall_time=time.perf_counter() - t0, **fields)
