"""Where a line without a switch crosses the steep band of the prox (``ChannelRule.band_split``;
docs/studies/band_beyond_cusp_ends.md)."""
from __future__ import annotations

import numpy as np

from numerics.prox.scalar import global_prox
from numerics.solver.bracketed_roots import find_roots

#: the band's split point is found to this absolute tolerance in ``t`` (the lines' ``t`` lies within
#: ``+-t_max``). It is a quadrature parameter, not a kink: both sides are smooth there. Found to 1e-10
#: instead of scipy's default of 4 ulps, the split moved the checked channel expectations of both high
#: rules at five overlaps (both branches, V from 2 to 30) by at most 2.8e-13 relative (6e-16 at 8 of
#: the 10), five orders below those rules' errors, with a third fewer global-prox evaluations (each
#: iteration is a global prox of every open line)
BAND_XATOL = 1e-10


def locate_bands(model, rule, V, w_of, t_c, D1, D2, HS1, HS2, teacher, lines, half_width: float = 2.0):
    """Where an unswitched line crosses the steep band of the prox: the root of
    ``prox(w(t)) . d`` within ``half_width`` of ``t_c``. The band is where the switching
    line runs, or would run (beyond its cusp ends, or inside the pitchfork radius); it
    is curved, so away from ``w = 0`` it leaves ``t_c``. Lines without a sign change
    keep ``t_c``. ``teacher``: the lines' teacher matrices (``ChannelLines.teacher``)."""
    t_c = t_c.copy()
    if lines.size == 0:
        return t_c

    def g(t, idx):
        idx = idx.astype(int)
        w1, w2 = w_of(t, idx)
        p1, p2 = global_prox(model, w1, w2, HS1[idx], HS2[idx], V, tol=rule.newton_tol, teacher=teacher[idx])[:2]
        return p1 * D1[idx] + p2 * D2[idx]

    lo = np.maximum(t_c[lines] - half_width, -rule.t_max + 1.0)
    hi = np.minimum(t_c[lines] + half_width, rule.t_max - 1.0)
    # a bracket without a sign change fails after its two end evaluations (status -1).
    # The split is a quadrature parameter: where there is no root, or the root finder
    # fails, the line keeps t_c, a valid split that is only less accurate
    found = find_roots(g, lo, hi, args=(lines.astype(float),), xatol=BAND_XATOL)
    t_c[lines[found.success]] = found.x[found.success]
    return t_c
