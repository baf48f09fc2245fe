"""The replica-symmetric (de Almeida-Thouless) stability of a fixed point of the saddle-point
equations (docs/gamp.md, section 5).

A perturbation of the student's pre-activations uncorrelated with everything (the replicon
direction; for GAMP, a perturbation of its estimate orthogonal to the teacher, the positions and
itself) of covariance ``D`` (``r x r``) per token has, after one pass through the channel and the
ridge, the covariance ``A(D)``::

    A(D) = alpha E[ sum_{l, l'} (V J_{l l'}) D (V J_{l l'})^T ],      J = df/dw (an L r x L r matrix)

(the ridge's denoiser is linear, so its factor is exactly ``(sigma^2 K)^2 = V^2``; every admitted
regulariser is a ridge, :mod:`derivations.regulariser`). The replica-symmetric saddle is stable
where the largest eigenvalue of ``A`` is below 1. At zero temperature ``J`` has two parts:

* the smooth response of the global prox, ``V J = dprox/dw - I = Hprox^{-1} Vt^{-1} - I`` where the
  global minimiser is unique (``Hprox`` the Hessian of the prox objective there): its ``A`` has the
  largest eigenvalue :attr:`RSStability.smooth`;
* on the surfaces where the global minimiser switches between two minima ``h_+`` and ``h_-``, a
  jump. At inverse temperature ``beta`` the tilted measure there is the mixture of the two, and its
  covariance ``p (1 - p) Dh Dh^T`` (``Dh = h_+ - h_-``, ``p`` the logistic of ``beta (M_- - M_+)``)
  adds to ``A`` the map ``beta/6 alpha E[delta(M_+ - M_-) (sum_l Dh_l Dh_l^T) tr(u u^T D)]``-like
  operator ``beta C``, ``u_l = V^{-1} Dh_l`` (``int p^2 (1 - p)^2`` across the surface is
  ``1/(6 beta s)``, ``s`` the slope of ``M_+ - M_-``). Its largest eigenvalue is
  :attr:`RSStability.switching`; as ``beta -> infinity`` the replicon eigenvalue is ``smooth + beta
  switching``, so wherever the switching surfaces carry weight (``switching > 0``) the
  zero-temperature replica-symmetric saddle is unstable, however small ``smooth`` is.

Both are estimated by quasi-Monte Carlo on the nodes of :mod:`numerics.channel.qmc.nodes` with the
global prox of :mod:`numerics.prox.matrix` (the runner-up minimum it keeps is the competing one); the
surface term by the nodes whose two lowest minima lie within ``window`` of each other. Errors: one
standard error over the independent scramblings.
"""
from __future__ import annotations

import dataclasses
import math

import numpy as np

from numerics.channel.qmc.nodes import gaussian_nodes, preactivations
from numerics.matrix_overlaps import MatrixOverlaps
from numerics.model.general import bind_general
from numerics.prox.matrix import GlobalProx

#: the default rule: 2^13 points in each of 8 scramblings (about a second for the two-token model)
LOG2_POINTS, SCRAMBLES = 13, 8
#: the window in M_+ - M_- (relative to the mean envelope) in which a node counts as on a switching surface
WINDOW = 0.05


@dataclasses.dataclass(frozen=True)
class RSStability:
    """The replicon eigenvalues of one fixed point (module docstring), each with one standard error."""

    smooth: float
    smooth_error: float
    switching: float
    switching_error: float
    nodes: int
    window: float                 # the window of the surface term, absolute
    #: ``-alpha E[sum_l J_ll]`` with the smooth (Hessian) ``J`` alone, and its relative distance from the
    #: fixed point's ``Vhat`` (Frobenius norms): the jumps' share of the theory's ``Vhat``, which no
    #: local response of a minimiser has (docs/gamp.md, section 5)
    hessian_vhat: tuple = ()
    hessian_vhat_gap: float = math.nan
    hessian_vhat_gap_error: float = math.nan

    @property
    def stable(self) -> bool:
        """Replica-symmetric stability at zero temperature: ``smooth < 1`` and no switching surface."""
        return self.smooth < 1.0 and self.switching == 0.0

    def as_dict(self) -> dict:
        return {"rs_stability": self.smooth, "rs_stability_error": self.smooth_error,
                "rs_switching": self.switching, "rs_switching_error": self.switching_error,
                "rs_hessian_vhat_gap": self.hessian_vhat_gap, "rs_hessian_vhat_gap_error": self.hessian_vhat_gap_error}


def _largest(op: np.ndarray) -> float:
    return float(np.max(np.abs(np.linalg.eigvals(op))))


def _operators(model, ov: MatrixOverlaps, h, second, w, T, alpha: float, window: float):
    """``(smooth, switching, Hessian Vhat)``: the operators (``r^2 x r^2``) of the nodes given and
    ``-alpha E[sum_l J_ll]`` with the smooth ``J`` (``r x r``)."""
    L, r = model.shape.L, model.shape.r
    V = np.asarray(ov.V)
    Vinv = np.linalg.inv(V)
    Vt_inv = np.kron(np.eye(L), Vinv)
    _, _, H = model.prox_newton(h, w, T, V)
    VJ = np.linalg.solve(H, np.broadcast_to(Vt_inv, H.shape)) - np.eye(L * r)   # dprox/dw - I = Vt J
    # Vt J is block-diagonal in V: (V J)_{l l'} = [Vt J]_{l l'}
    n = len(h)
    blocks = VJ.reshape(n, L, r, L, r).transpose(0, 1, 3, 2, 4).reshape(-1, r, r)
    smooth = alpha * np.einsum("nij,nkl->ikjl", blocks, blocks).reshape(r * r, r * r) / n
    diagonal = VJ.reshape(n, L, r, L, r)[:, np.arange(L), :, np.arange(L), :].sum(axis=0)   # sum_l (V J)_ll
    hessian_vhat = -alpha * Vinv @ diagonal.mean(axis=0)
    switching = np.zeros((r * r, r * r))
    has = ~np.isnan(second[:, 0])
    if has.any():
        obj_h = model.prox_objective(h[has], w[has], T[has], V)
        obj_s = model.prox_objective(second[has], w[has], T[has], V)
        near = np.abs(obj_s - obj_h) < window
        if near.any():
            Dh = (second[has] - h[has])[near].reshape(-1, L, r)
            U = Dh @ Vinv                                   # u_l = V^{-1} Dh_l (rows)
            W = np.einsum("nli,nlj->nij", Dh, Dh)            # sum_l Dh_l Dh_l^T = sum_l (V u_l)(V u_l)^T
            S = np.einsum("nli,nlj->nij", U, U)              # D -> tr(S D) = sum_l u_l^T D u_l
            # E[delta(M_+ - M_-) G] from the nodes within the window of |M_+ - M_-| (density of the
            # signed difference at 0: half that of its modulus), times 1/6 from the width of the mixture
            weight = alpha / (6.0 * 2.0 * window * n)
            switching = weight * np.einsum("nij,nkl->ijkl", W, S).reshape(r * r, r * r)
    return smooth, switching, 0.5 * (hessian_vhat + hessian_vhat.T)


def rs_stability(fp, log2_points: int = LOG2_POINTS, scrambles: int = SCRAMBLES, window: float = WINDOW,
                 seed: int = 11) -> RSStability:
    """The replicon eigenvalues of the fixed point ``fp`` (a :class:`~numerics.result.FixedPoint`),
    module docstring. ``window``: relative to the mean envelope ``E[M]`` of ``fp``."""
    spec = fp.model
    model = bind_general(spec)
    ov = fp.overlaps
    alpha = float(fp.alpha)
    nodes = gaussian_nodes(model.shape, log2_points, scrambles, seed)
    _, hs, w = preactivations(nodes, ov, spec.rho, model.positional_mean(ov.m))
    T = model.teacher(hs)
    prox = GlobalProx(model, nodes.size, n_ellipsoid=4, first_ellipsoid=8)
    h, _, _ = prox(w, hs, ov.V)
    second = prox.state(np.arange(nodes.size))["second"]
    envelope = fp.diagnostics.get("mean_envelope")
    if envelope is None or not math.isfinite(envelope):
        envelope = float(np.mean(model.prox_objective(h, w, T, ov.V)))
    absolute = window * abs(envelope)
    smooth, switching, vhat = [], [], []
    for j in range(scrambles):
        rows = nodes.rows(j)
        s, c, v = _operators(model, ov, h[rows], second[rows], w[rows], T[rows], alpha, absolute)
        smooth.append(_largest(s))
        switching.append(_largest(c))
        vhat.append(v)
    se = (lambda x: float(np.std(x, ddof=1) / math.sqrt(len(x))) if len(x) > 1 else math.nan)
    Vhat = np.asarray(fp.hats.Vhat, dtype=float)
    gaps = [float(np.linalg.norm(v - Vhat) / np.linalg.norm(Vhat)) for v in vhat]
    mean_vhat = np.mean(vhat, axis=0)
    return RSStability(smooth=float(np.mean(smooth)), smooth_error=se(smooth), switching=float(np.mean(switching)),
                       switching_error=se(switching), nodes=int(nodes.size), window=absolute,
                       hessian_vhat=tuple(map(tuple, mean_vhat)),
                       hessian_vhat_gap=float(np.linalg.norm(mean_vhat - Vhat) / np.linalg.norm(Vhat)),
                       hessian_vhat_gap_error=se(gaps))


def rs_unstable(rs_stability: float, rs_switching: float, rs_switching_error: float) -> bool:
    """Whether a point is not replica-symmetric stable (docs/gamp.md, section 5): the smooth replicon
    eigenvalue at or above 1, or switching surfaces of weight above two standard errors. False where it
    was not computed (NaN)."""
    return bool(rs_stability >= 1.0 or rs_switching > 2.0 * rs_switching_error)


def with_rs_stability(fp, **options):
    """``fp`` with its :func:`rs_stability` in the record (``FixedPoint.stability``: the columns
    ``rs_stability``, ``rs_switching`` and their errors); a point that did not converge is returned
    as it is. ``options`` go to :func:`rs_stability`."""
    if not fp.converged:
        return fp
    return dataclasses.replace(fp, stability=rs_stability(fp, **options).as_dict())
