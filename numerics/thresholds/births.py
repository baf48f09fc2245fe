"""A change of the global branch where a branch grows continuously out of the global one (docs/theory.md,
section 4.10), as the noisy strategy of the threshold locator (:mod:`numerics.thresholds.noisy`)
locates it on QMC fixed points.

* :func:`bifurcation`: the child is born where the multiplier of its new direction on the parent
  crosses 1 (:mod:`numerics.branches.bifurcation`), located in ``alpha`` by the noise-aware root finder;
  three errors below that root a probe asks whether the child exists there too (:func:`child_reached`),
  in which case the change is a fold, not a birth.
* :func:`onset`: where that does not apply but the child appears with the global one's ``F``, its
  defining overlap is below the noise next to the onset, so the onset is extrapolated from ``d^2``
  linear in ``alpha`` (:func:`~numerics.thresholds.noisy_roots.pitchfork_onset`).

The functions take the strategy (``locator``: its model, precision, mapper, progress, the error a root
aims at and the solve on a finer rule) and the branches near the scan
(:class:`~numerics.thresholds.scan.BranchNearScan`).
"""
from __future__ import annotations

import dataclasses
import logging
import math
from typing import Optional

from derivations import packing

from numerics.channel.integrators import is_noisy
from numerics.channel.qmc.precision import as_qmc_precision
from numerics.thresholds.noisy_roots import pitchfork_onset, refined_root, root_within_noise, stated_error
from numerics.thresholds.record import NotConverged, ThresholdLocationError, Transition
from numerics.thresholds.scan import EXTEND_DOWN, BranchNearScan

log = logging.getLogger(__name__)

#: an overlap this many scramblings' spreads above zero is resolved (fitted at an onset)
RESOLVED = 3.0
#: the iterations per scrambling of the probe for a child below a birth's crossing: next to a birth
#: the child's map barely contracts, and a whole fast solve there ran every scrambling to its limit
#: (60, minutes) to end unconverged
PROBE_MAXITER = 15


def _scramblings(precision: str) -> float:
    """``sqrt(R)``: one scrambling's spread in stated errors (1 for the line quadrature's modes)."""
    from numerics.channel.qmc.precision import QMC_PRECISIONS

    mode = QMC_PRECISIONS.get(precision)
    return math.sqrt(mode.rule.scrambles) if mode is not None else 1.0


def onset(locator, branch: BranchNearScan, missing: float, lowest: float) -> Optional[tuple]:
    """``(alpha, error, details)`` of a continuous onset of ``branch`` (docs/theory.md, section 4.10)
    from its defining overlap (:meth:`numerics.fixed_points.subspaces.BranchSubspace.defining_overlap`) at the three
    solved points nearest the onset (:func:`pitchfork_onset`). None when fewer than three points, or a
    root outside ``[lowest, first point found]`` by more than its error (a solve near the onset may
    miss a branch whose overlap is below its noise, so the root may lie below ``missing``, and even
    below the scanned point where the branch was not found)."""
    from numerics.fixed_points.subspaces import branch_subspace

    sub = branch_subspace(branch.name, locator.spec.shape)
    sigma = locator.spec.sigma
    key = "theta_singular_values_1" if branch.name in ("semantic", "mixed") else "m_singular_values_1"
    scale = sigma**2 if key.startswith("theta") else 1.0

    def overlap(a):
        return sub.defining_overlap(branch.points[a].overlaps, sigma), stated_error(branch.points[a], key) / scale

    # the overlap is a singular value, so each scrambling's own fixed point has it >= 0 and their mean is
    # biased up by about one scrambling's spread (sqrt(R) stated errors), which the stated error does not
    # carry: draft points next to an onset put it too low. Only points above RESOLVED such spreads are fitted.
    spread = _scramblings(locator.precision)
    alphas = sorted(a for a in branch.points
                    if a > missing and overlap(a)[0] > RESOLVED * spread * overlap(a)[1])[:3]
    if len(alphas) < 3:
        return None
    d, d_err = zip(*(overlap(a) for a in alphas))
    root, error, three_point = pitchfork_onset(alphas, d, d_err)
    if not lowest - error <= root <= alphas[0]:
        return None
    return root, error, {"onset_fit_alphas": list(alphas), "defining_overlap": list(d),
                         "onset_three_point": three_point}


def _multipliers(locator, parent: BranchNearScan, child: str, seen: dict):
    """The multiplier of ``child``'s direction on ``parent`` at an ``alpha``, kept in ``seen``."""
    from numerics.branches.bifurcation import growth_multiplier

    def multiplier(a):
        if a not in seen:
            p = parent.solve(a)
            if p is None:
                raise ThresholdLocationError(f"{parent.name} branch lost at alpha = {a:g} while locating the "
                                             f"{child} branch's birth on it")
            seen[a] = growth_multiplier(locator.spec, p, child, locator.precision, mapper=locator.mapper)
            log.info("%s at alpha = %g: multiplier of the %s direction %.5f +- %.1e", parent.name, a, child,
                     seen[a].value, seen[a].error)
        return seen[a]

    return multiplier


def bifurcation(locator, parent: BranchNearScan, child: BranchNearScan, a0: float, a1: float) -> Optional[Transition]:
    """The birth of ``child`` out of ``parent`` in ``[a0, a1]``, located on the parent where the
    multiplier of the child's new direction crosses 1 (:mod:`numerics.branches.bifurcation`): the root in alpha
    (Brent, as :func:`root_within_noise`), its error the multiplier's stated error over its slope plus the
    tolerance. Where the multiplier is above 1 at ``a0`` already, the bracket is looked for a few
    steps below it. None where this does not apply: the child's subspace does not contain the
    parent's, the parent is not a QMC solution at both ends, the multiplier does not cross 1 there, or
    the child is found below the crossing (it then does not grow out of the parent there)."""
    from numerics.branches.bifurcation import embedding
    from numerics.fixed_points.subspaces import branch_subspace

    shape = packing.as_shape(locator.spec)
    if embedding(branch_subspace(parent.name, shape), branch_subspace(child.name, shape)) is None:
        return None

    def on_parent(a) -> bool:
        p = parent.solve(a)
        return p is not None and is_noisy(p.integrator)

    if not on_parent(a0):
        return None
    seen = {}
    multiplier = _multipliers(locator, parent, child.name, seen)
    g0 = multiplier(a0).value - 1.0
    if g0 >= 0:
        # the multiplier is above 1 already at a0 (the child's draft solve there, falling to the
        # parent, hid a birth just below): the bracket is looked for below a0 on the parent, on the
        # first steps of the downward extension grid (the multiplier at a1 is not needed then)
        g1 = g0
        for f in EXTEND_DOWN[:3]:
            try:
                if parent.solve(a0 * f) is None:
                    break
            except NotConverged:
                break
            a1, g1, a0, g0 = a0, g0, a0 * f, multiplier(a0 * f).value - 1.0
            if g0 < 0:
                break
    else:
        if not on_parent(a1):
            return None
        g1 = multiplier(a1).value - 1.0
    if not g0 < 0 < g1:
        log.info("the %s direction's multiplier on %s does not cross 1 on [%g, %g] (%.4f, %.4f)", child.name,
                 parent.name, a0, a1, g0 + 1, g1 + 1)
        return None
    root, error, details = root_within_noise(lambda a: multiplier(a).value - 1.0, a0, a1,
                                             lambda a: seen[min(seen, key=lambda x: abs(x - a))].error,
                                             lambda: locator.aim(parent, a0))
    # a child found below the crossing, beyond its error bar, coexists with the parent there (a fold,
    # not a birth); nearer, a draft solve can find a child whose overlap is its noise (at 1.3 errors
    # below a draft root it did). Where that lies below a0, the scan's a0 is the probe.
    probe = root - 3.0 * error
    # next to a birth the child's map barely contracts (its multiplier is near 1) and each scrambling
    # sees its own birth, a spread of the root's error apart: an unconverged probe is no evidence
    # either way, and its cost is capped (child_reached)
    found, probe_note = child_reached(locator, child, probe) if probe > a0 else (False, "")
    if found:
        log.info("%s found at alpha = %g, below the crossing %g: not a continuous birth", child.name, probe, root)
        return None
    details.update(method="multiplier on the parent", multipliers=[m.to_dict() for _, m in sorted(seen.items())],
                   child_absent_at=max(probe, a0), probe_note=probe_note)
    if error > locator.aim(parent, root):
        root, error = _refined_birth(locator, parent, child.name, root, error, seen, details)
    return Transition(root, error, parent.name, child.name, "bifurcation", (a0, a1), details)


def _refined_birth(locator, parent: BranchNearScan, child: str, root: float, error: float, seen: dict,
                   details: dict) -> tuple:
    """A birth refined (:func:`refined_root`) on the multiplier of ``child``'s direction on the parent."""
    from numerics.branches.bifurcation import growth_multiplier

    def fine_value(fine):
        m = growth_multiplier(locator.spec, locator.solve_on(parent, fine, root), child, fine, mapper=locator.mapper)
        log.info("%s at alpha = %g on the %s rule: multiplier of the %s direction %.5f +- %.1e", parent.name, root,
                 fine.name, child, m.value, m.error)
        return m.value - 1.0, m.error, {"multiplier": m.to_dict()}

    samples = [(a, g.value - 1.0, g.error) for a, g in sorted(seen.items())]
    return refined_root(locator.precision, root, error, samples, fine_value, details)


def child_reached(locator, child: BranchNearScan, alpha: float) -> tuple:
    """``(found, note)``: whether ``child`` is found at ``alpha`` from its nearest point, tested
    first by the approach of a QMC solve alone (:func:`~numerics.fixed_points.qmc.approach_qmc`):
    where that falls to a smaller branch it is not found, where it does not settle ``(None,
    note)``; where it settles, at draft precision by a solve of at most :data:`PROBE_MAXITER`
    iterations per scrambling, found where it converges and ``(None, note)`` where it does not;
    at a finer precision ``(None, note)`` (that solve is not affordable there)."""
    from numerics.fixed_points.errors import BranchNotFound
    from numerics.fixed_points.qmc import approach_qmc
    from numerics.fixed_points.solve import solve

    start = locator.start(child, alpha)
    reach = approach_qmc(locator.spec, alpha, child.name, locator.precision, start=start)
    log.info("%s at alpha = %g from the nearest point: approach %s (defining overlap %.2e, residual %.1e)",
             child.name, alpha, "collapsed" if reach.collapsed else ("settled" if reach.converged else
                                                                     "did not settle"),
             reach.defining, reach.residual)
    if reach.collapsed:
        return False, ""
    if not reach.converged:
        # a whole solve would not settle either, at a higher cost: with the cap below, at fast
        # precision one scrambling of the three-token child took 22-66 s and ended unconverged
        return None, (f"the approach from the nearest point did not settle in {reach.iterations} iterations "
                      f"(residual {reach.residual:.1e}, defining overlap {reach.defining:.2e})")
    if locator.precision != "draft":
        # next to a birth the child's map contracts at a rate within a few 1e-3 of 1, so that a
        # settled approach is weak evidence and a capped solve rarely converges; at fast it cost
        # more than 10 minutes for the rank-2 mixed child (approach settled at 7e-3 below the
        # birth) and is left out, the birth standing with this note
        return None, (f"the approach from the nearest point settled (defining overlap {reach.defining:.2e}, "
                      f"residual {reach.residual:.1e}); the capped solve that would decide is run at draft "
                      f"precision only")
    capped = dataclasses.replace(as_qmc_precision(locator.precision), maxiter=PROBE_MAXITER)
    try:
        fp = solve(locator.spec, alpha, child.name, capped, "qmc", start=start)
    except BranchNotFound as exc:
        log.info("%s", exc)
        return False, ""
    finally:
        if locator.progress:
            locator.progress(1)
    if not fp.converged:
        return None, f"the probe did not converge in {PROBE_MAXITER} iterations per scrambling: {fp.status}"
    return True, ""
