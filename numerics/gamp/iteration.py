"""Generalised approximate message passing for the empirical risk of a finite instance
(docs/gamp.md, sections 2 to 4).

The instance: ``n`` samples of ``L`` tokens, the token-major design ``X`` (``(L n, d)``, the tokens
with their positional parts) and each sample's coefficients of its exact loss
(:mod:`numerics.gamp.sample_prox`). The estimate ``Q`` is ``d x r``; ``V``, ``Lam`` are ``r x r``.
One iteration ``t`` (``Vt = I_L (x) V``, token by token)::

    omega_i  = X_i Q^t / sqrt(d) - Vt f_i^{t-1}                        (Onsager: the sample's own reaction)
    h_i      = argmin_h 1/2 |h - omega_i|^2_{Vt^-1} + loss_i(h)          (the global prox of the exact loss)
    f_i      = Vt^{-1} (h_i - omega_i),   J_i = df_i/domega_i = Vt^-1 (Hprox_i^-1 Vt^-1 - I)
    Lam^t    = -(sigma^2 / d) sum_i sum_l J_i[l, l]                       (the input side's precision)
    Q^{t+1}  = (Q^t Lam^t + X^T f / sqrt(d)) (lam I + Lam^t)^{-1},     V^{t+1} = sigma^2 (lam I + Lam^t)^{-1}

the ridge's denoiser being linear. ``lam`` here is the ridge strength of the model's regulariser
(:attr:`derivations.spec.ModelSpec.ridge_strength`: ``lam`` for ``ridge``, ``2 c(lam)`` for a typed
``c(lam) w**2``, the only penalties a model admits, each exactly this ridge). At a fixed point ``h_i = X_i Q / sqrt(d)`` and ``lam Q =
X^T f / sqrt(d) = -X^T dloss/dh / sqrt(d)``: a stationary point of the empirical risk, whatever
``V`` and ``Lam`` are. Damping ``gamma < 1`` mixes ``f``, ``Lam`` and ``Q`` with their previous
values (the damped scheme of Rangan, Schniter and Fletcher; at ``t = 0`` with ``f = 0`` and the
``Lam`` of ``V0``); it keeps the fixed points.

Every sample's prox is its global minimiser, as the replica theory has it, and ``Lam`` is the local
response of each sample's minimiser (its Hessian), which is the leave-one-out response of a
stationary point of the risk. Where the global minimisers switch on surfaces of no weight, the
per-iteration overlaps of the undamped iteration follow the state evolution, the saddle-point map of
docs/theory.md, section 4. Where those surfaces carry weight, the theory's ``Vhat`` (its Stein form)
has a part from the jumps of ``f`` across them that no local response has (docs/gamp.md, section
5), and where the cavity fields of some samples sit next to the surface on which
their global minimiser switches between competing minima, each switch moves the other samples'
fields, and the iteration can wander without end while its overlaps stay put: the samples that
switch are counted per iteration (``switched``), and such a run ends as stalled, with its history
(docs/gamp.md, section 4).
"""
from __future__ import annotations

import dataclasses
import logging
import math
import time
from typing import Callable, Optional, Sequence

import numpy as np

from derivations import ModelSpec

from numerics.gamp.sample_prox import SampleLoss, back_projection, empirical_risk, preactivations
from numerics.prox.matrix import GlobalProx

log = logging.getLogger(__name__)

#: the damping schedule: each is tried where the one before stalled, from where it stalled (1 would be
#: plain GAMP, whose overlaps follow the state evolution, docs/gamp.md, section 3)
DAMPINGS = (0.5, 0.25)
#: stop once the relative change of Q per iteration is below this
TOL = 1e-9
#: iterations per run, every damping of its schedule together
MAXITER = 400
#: a damping counts as stalled once the residual has not halved in this many iterations
STALL_WINDOW = 30
#: the full prox search runs while the residual is above this (module docstring)
FULL_SEARCH = 5e-2
#: a sample's prox has switched where its minimum is this far (max norm) from the continuation of the last one
SWITCH = 1e-3


class GampError(RuntimeError):
    """GAMP did not reach a fixed point; the message says, for each damping tried, the iteration where
    it went wrong and how."""

    def __init__(self, attempts: Sequence[dict], history: Sequence[dict] = ()):
        self.attempts, self.history = list(attempts), list(history)
        parts = [f"damping {a['damping']:g}: {a['reason']} at iteration {a['iteration']}"
                 for a in self.attempts]
        super().__init__("GAMP did not converge (" + "; ".join(parts) + ")")


@dataclasses.dataclass
class GampResult:
    """The fixed point reached, its per-iteration history and its checks."""

    Q: np.ndarray
    V: np.ndarray
    Lam: np.ndarray
    damping: float
    iterations: int
    residual: float
    history: list                 # per iteration: {"iteration", "damping", "residual", "switched", "V", **track(Q)}
    attempts: list                # the dampings that stalled or failed before (as GampError lists them)
    train_risk: float             # R(Q) / d
    risk_gradient_norm: float     # |dR/dQ|_F / |lam Q|_F: relative to the ridge term the data term balances
    grad_norm: float              # |dR/dQ|_F / sqrt(d), as gradient descent reports it
    instance_stability: float     # the replicon eigenvalue of the prox's response on this instance
    wall_time: float


def _symmetric(A: np.ndarray) -> np.ndarray:
    return 0.5 * (A + A.T)


def _positive_definite(A: np.ndarray) -> bool:
    return bool(np.all(np.isfinite(A)) and np.all(np.linalg.eigvalsh(_symmetric(A)) > 0))


def _jacobians(loss: SampleLoss, h, w, coef, V) -> np.ndarray:
    """``df/domega`` per sample, ``(n, L r, L r)``: ``Vt^-1 (Hprox^-1 Vt^-1 - I)`` with ``Hprox``
    the Hessian of the prox objective at its minimiser ``h``."""
    _, _, H = loss.prox_newton(h, w, coef, V)
    Vt_inv = np.kron(np.eye(loss.shape.L), np.linalg.inv(V))
    M = np.linalg.solve(H, np.broadcast_to(Vt_inv, H.shape))
    return Vt_inv @ M - Vt_inv


def replicon_operator(J: np.ndarray, V: np.ndarray, L: int, d: int) -> np.ndarray:
    """The linear map ``D -> (1/d) sum_i sum_{l, l'} V J_i[l, l'] D J_i[l, l']^T V`` on ``r x r``
    matrices ``D``, as an ``r^2 x r^2`` matrix acting on ``vec D``: the covariance that a perturbation
    of the pre-activations uncorrelated with the estimate has after one iteration (docs/gamp.md,
    section 5)."""
    n, nh, _ = J.shape
    r = nh // L
    blocks = J.reshape(n, L, r, L, r).transpose(0, 1, 3, 2, 4).reshape(-1, r, r)   # J_i[l, l']
    A = V @ blocks                                                                  # V J
    # vec(A D A^T) = (A (x) A) vec(D), summed over the blocks
    return np.einsum("nij,nkl->ikjl", A, A).reshape(r * r, r * r) / d


def spectral_radius(op: np.ndarray) -> float:
    return float(np.max(np.abs(np.linalg.eigvals(op))))


@dataclasses.dataclass
class _State:
    Q: np.ndarray
    V: np.ndarray
    f: np.ndarray        # the (damped) f of the last iteration: the next Onsager term
    Lam: np.ndarray      # the (damped) Lam of the last iteration
    h: Optional[np.ndarray] = None
    omega: Optional[np.ndarray] = None
    J: Optional[np.ndarray] = None


def _run(spec: ModelSpec, loss: SampleLoss, X, coef, state: _State, dampings: Sequence[float], tol: float,
         maxiter: int, track: Optional[Callable], progress: Optional[Callable], history: list,
         orthogonal_to: Optional[np.ndarray] = None, stall_window: int = STALL_WINDOW):
    """One run from ``state`` (module docstring), the first of ``dampings`` first and each next where
    the last stalled, from where it stalled. Returns ``(converged, state, failures, damping)``;
    ``failures``: one ``{"damping", "iteration", "reason", "left"}`` per damping that stalled or left
    the domain (``left``: the last did, and the run ended there)."""
    L, r, _, _ = loss.shape
    n, d = coef.shape[0], X.shape[1]
    sigma2, lam = spec.sigma ** 2, spec.ridge_strength
    prox = GlobalProx(loss, n)
    failures = []
    stage = 0
    damping = float(dampings[0])
    best, best_at = math.inf, 0
    h_prev = None
    last_residual, forced_until = math.inf, 0

    def fail(t, reason, left=False):
        failures.append({"damping": damping, "iteration": t, "reason": reason, "left": left})

    for t in range(maxiter):
        V, Q = state.V, state.Q
        Vt = np.kron(np.eye(L), V)
        omega = preactivations(X, Q, n, L) - state.f @ Vt
        # the full search (w and random points of the ellipsoid bound besides the warm starts and
        # their sign flips) while the estimate moves; the converged point is checked by one below
        full = last_residual > FULL_SEARCH or t < forced_until
        # the sign flips of the warm starts too, while the last search with them changed a minimum
        h, _, gn = prox(omega, coef, V, full=full, flips=full or prox.flips_needed())
        # the samples whose prox point jumped by a quarter of its size: switches between minima
        switched = 0 if h_prev is None else int(np.sum(
            np.max(np.abs(h - h_prev), axis=1) > 0.25 * np.maximum(np.max(np.abs(h), axis=1), SWITCH)))
        if not (np.all(np.isfinite(h)) and np.all(np.isfinite(gn))):
            fail(t, "the prox is not finite", True)
            return False, state, failures, damping
        f = (h - omega) @ np.linalg.inv(Vt)
        J = _jacobians(loss, h, omega, coef, V)
        diag = sum(J[:, l * r:(l + 1) * r, l * r:(l + 1) * r] for l in range(L))
        Lam = _symmetric(-(sigma2 / d) * diag.sum(axis=0))
        f = damping * f + (1.0 - damping) * state.f
        Lam = damping * Lam + (1.0 - damping) * state.Lam
        P = lam * np.eye(r) + Lam
        if not _positive_definite(P):
            fail(t, f"lam + Lam is not positive definite (eigenvalues {np.linalg.eigvalsh(_symmetric(P))})", True)
            return False, state, failures, damping
        K = np.linalg.inv(P)
        Q_new = (Q @ Lam + back_projection(X, f, n, L)) @ K
        if orthogonal_to is not None:
            Q_new = Q_new - orthogonal_to @ (orthogonal_to.T @ Q_new)
        if not np.all(np.isfinite(Q_new)):
            fail(t, "the estimate is not finite", True)
            return False, state, failures, damping
        residual = float(np.linalg.norm(Q_new - Q) / max(np.linalg.norm(Q_new), 1e-300))
        record = {"iteration": t, "damping": damping, "residual": residual, "switched": switched,
                  "full_search": full, "V": V.copy(), "Lam": Lam.copy()}
        if track is not None:
            record.update(track(Q))
        history.append(record)
        if progress is not None:
            progress(t, residual)
        current = _State(Q=Q, V=V, f=f, Lam=Lam, h=h, omega=omega, J=J)
        if residual < tol:
            if full:
                return True, current, failures, damping
            # the check: a full search at the converged point; a lower minimum anywhere resumes the
            # iteration with full searches
            checked, _, _ = prox(omega, coef, V, full=True)
            if not np.any(np.max(np.abs(checked - h), axis=1) > SWITCH):
                return True, current, failures, damping
            forced_until = t + stall_window
            residual = math.inf
        if residual < 0.5 * best:
            best, best_at = residual, t
        elif t - best_at >= stall_window:
            fail(best_at, f"stalled (the residual {best:.2e} there had not halved by iteration {t}: {residual:.2e})")
            stage += 1
            if stage == len(dampings):
                return False, current, failures, damping
            damping = float(dampings[stage])
            best, best_at = residual, t
        state = _State(Q=damping * Q_new + (1.0 - damping) * Q, V=sigma2 * K, f=f, Lam=Lam, h=h)
        h_prev, last_residual = h, residual
    fail(best_at, f"not converged in {maxiter} iterations (best residual {best:.2e} there)")
    return False, state, failures, damping


def run_gamp(spec: ModelSpec, X: np.ndarray, coef: np.ndarray, Q0: np.ndarray, V0=None,
             dampings: Sequence[float] = DAMPINGS, tol: float = TOL, maxiter: int = MAXITER,
             track: Optional[Callable] = None, progress: Optional[Callable] = None,
             orthogonal_to: Optional[np.ndarray] = None,
             stall_window: int = STALL_WINDOW) -> GampResult:
    """GAMP on one instance from the estimate ``Q0`` (``d x r``, or a vector for ``r = 1``) with the
    variance ``V0`` (default ``sigma^2 / lam I``: the ridge's alone, before any data), module docstring.

    ``dampings``: the schedule, each damping taken where the one before stalled (its residual not
    halved in ``stall_window`` iterations), from where it stalled; a run that leaves the domain
    (``lam + Lam`` not positive definite, a value not finite) starts again from ``Q0`` with the next
    damping. ``maxiter``: iterations per run. ``X``: the token-major design (``(L n, d)``, float64
    or float32); ``coef``: each sample's coefficients (``(n, len(coefficient_names(L)))``, float64).
    ``track(Q)``: a dict recorded at each iteration (the caller's overlaps with the teacher and the
    positions). ``progress(t, residual)``: told each iteration. ``orthogonal_to``: orthonormal columns (``d x k``) that the estimate is held
    orthogonal to: GAMP for the risk on that subspace, whose ridge denoiser is the projection of the
    linear one (its divergence differs by ``k/d``); with the positional directions, the semantic
    branch's subspace ``m = 0``, on which the state evolution of a branch is the saddle-point map of
    the branch (docs/gamp.md, section 3). Raises :class:`GampError` naming, for
    each damping tried, the iteration where it went wrong, with the last run's history."""
    t0 = time.perf_counter()
    loss = SampleLoss(spec)
    L, r, _, _ = loss.shape
    d = X.shape[1]
    if X.shape[0] != L * coef.shape[0] or coef.shape[1] != loss.n_coef:
        raise ValueError(f"X: expected {L} x {coef.shape[0]} rows and coefficients of {loss.n_coef} columns, got "
                         f"X {X.shape} and coefficients {coef.shape}")
    if not dampings or not all(0.0 < g <= 1.0 for g in dampings):
        raise ValueError(f"dampings: each must be in (0, 1], got {list(dampings)}")
    lam = spec.ridge_strength
    V0 = spec.sigma ** 2 / lam * np.eye(r) if V0 is None else np.asarray(V0, dtype=float).reshape(r, r)
    if not _positive_definite(V0):
        raise ValueError(f"V0: must be positive definite, got {V0.tolist()}")
    Q0 = np.array(Q0, dtype=float).reshape(d, r)
    if orthogonal_to is not None:
        orthogonal_to = np.asarray(orthogonal_to, dtype=float).reshape(d, -1)
        Q0 = Q0 - orthogonal_to @ (orthogonal_to.T @ Q0)
    start = _State(Q=Q0, V=V0, f=np.zeros((coef.shape[0], L * r)),
                   Lam=spec.sigma ** 2 * np.linalg.inv(V0) - lam * np.eye(r))
    attempts, history = [], []
    schedule = list(dampings)
    while schedule:
        history = []
        converged, state, failures, last = _run(spec, loss, X, coef, start, schedule, tol, maxiter, track, progress,
                                                history, orthogonal_to, stall_window)
        attempts += failures
        for a in failures:
            log.info("GAMP, damping %g: %s at iteration %d", a["damping"], a["reason"], a["iteration"])
        if converged:
            R, grad, _ = empirical_risk(loss, X, coef, state.Q, lam)
            return GampResult(
                Q=state.Q, V=state.V, Lam=state.Lam, damping=last, iterations=len(history),
                residual=history[-1]["residual"], history=history, attempts=attempts, train_risk=R / d,
                risk_gradient_norm=float(np.linalg.norm(grad) / max(lam * np.linalg.norm(state.Q), 1e-300)),
                grad_norm=float(np.linalg.norm(grad) / math.sqrt(d)),
                instance_stability=spectral_radius(replicon_operator(state.J, state.V, L, d)),
                wall_time=time.perf_counter() - t0)
        if not failures[-1]["left"]:
            break
        # a run that left the domain starts again with a smaller damping
        schedule = schedule[schedule.index(last) + 1:]
    raise GampError(attempts, history)
