"""Finite instances of the model of docs/theory.md, sections 1 and 4.1, drawn with numpy alone (no
torch): what message passing (docs/gamp.md) runs on, and its checks (training loss, test error,
overlaps).

An :class:`Instance` holds the teacher ``Q*``, the training set as the token-major design ``X``
(``(L n, d)``: rows ``l n .. (l + 1) n - 1`` are the tokens ``x_{i,l}``, as
:class:`validation.simulate.Batch` stores it) and each sample's coefficients of its exact loss
(:func:`derivations.sample_loss.coefficient_names`: ``X_i X_i^T / d``, ``Y_i X_i^T / d``,
``|Y_i|_F^2 / d``, float64). The test set is not stored: :func:`test_error` draws it again from its
stream, in chunks.

Seeding. Run ``k`` of seed ``s`` uses ``SeedSequence(s, spawn_key=(k,))`` and its four children
(teacher, training set, test set, initialisation), as :mod:`validation.simulate` does; here each child
seeds a numpy ``Generator`` (PCG64), where the simulator seeds a torch generator from it. So the
instance of ``(s, k)`` has the same law as the simulator's and is independent of the number of runs,
but is not the same draw: :func:`from_problem` takes the simulator's own draw (torch needed), and
:func:`to_problem` hands this one to the simulator's gradient descent.
"""
from __future__ import annotations

import dataclasses
import math
from typing import Optional

import numpy as np

from derivations import ModelSpec

#: samples drawn per chunk (bounds the float64 temporaries: chunk x L x d)
CHUNK = 2048
RANDOM_INIT_SCALE = 0.1  # random start 0.1 N(0, I) (docs/theory.md, section 1.4)
DTYPES = ("float64", "float32")


def position_basis(d: int, k: int) -> np.ndarray:
    """The orthonormal ``e_1..e_k`` of ``R^d`` (``d x k``, float64): ``e_1 = (1, ..., 1)/sqrt(d)``, then
    the real Fourier vectors ``e_a[j] = sqrt(2/d) cos(2 pi f j/d)`` (``a = 2f``) or ``sqrt(2/d) sin(2 pi
    f j/d)`` (``a = 2f + 1``), orthonormal while ``d > k``."""
    cols = [np.full(d, 1.0 / math.sqrt(d))]
    j = np.arange(d, dtype=float)
    for a in range(2, k + 1):
        phase = (2.0 * math.pi * (a // 2) / d) * j
        cols.append(math.sqrt(2.0 / d) * (np.cos(phase) if a % 2 == 0 else np.sin(phase)))
    return np.stack(cols, axis=1)


def run_streams(seed: int, run_index: int):
    """The four seed sequences of a run: teacher, training set, test set, initialisation."""
    return np.random.SeedSequence(int(seed), spawn_key=(int(run_index),)).spawn(4)


@dataclasses.dataclass
class Instance:
    """One run's teacher and training set (module docstring)."""

    spec: ModelSpec
    d: int
    alpha: float
    n: int
    Qstar: np.ndarray           # (d, t) float64
    X: np.ndarray               # (L n, d), token-major, float64 or float32
    coef: np.ndarray            # (n, n_coef) float64
    seed: int
    run_index: int
    n_test: int = 10000
    source: str = "numpy"       # "numpy" (drawn here) or "simulate" (the simulator's draw, from_problem)
    test: Optional[tuple] = dataclasses.field(default=None, repr=False)  # (X_test, coef_test) when given

    @property
    def E(self) -> np.ndarray:
        return position_basis(self.d, self.spec.k)


def _teacher_matrices(spec: ModelSpec, hs: np.ndarray) -> np.ndarray:
    """``T(h*)`` per sample, ``(n, L, L)``, from the generated teacher (``hs``: ``(n, L, t)``)."""
    from derivations import generated_functions

    gm = generated_functions(spec)
    n, L, t = hs.shape
    with np.errstate(all="ignore"):
        out = gm.teacher(*hs.reshape(n, L * t).T, *gm.params(spec))
    return np.stack([np.broadcast_to(np.asarray(o, dtype=float), (n,)) for o in out], axis=-1).reshape(n, L, L)


def coefficients(X3: np.ndarray, Y3: np.ndarray) -> np.ndarray:
    """Each sample's coefficients (``(n, n_coef)``) from its tokens and targets (``(n, L, d)`` each)."""
    d, L = X3.shape[2], X3.shape[1]
    Xt = np.transpose(X3, (0, 2, 1))
    G = np.matmul(X3, Xt) / d
    C = np.matmul(Y3, Xt) / d
    yy = np.einsum("nld,nld->n", Y3, Y3) / d
    iu = np.triu_indices(L)
    return np.concatenate([G[:, iu[0], iu[1]], C.reshape(len(C), L * L), yy[:, None]], axis=1)


def _chunks(spec: ModelSpec, d: int, n: int, Qstar: np.ndarray, rng: np.random.Generator, chunk: int = CHUNK):
    """``(start, stop, X3, Y3)`` chunk by chunk: ``x_l = mu_l/sqrt(d) + z_l``, ``z_l ~ N(0, sigma^2 I)``,
    ``Y = T(h*) Z`` with ``h*_l = Q*^T z_l / sqrt(d)`` (docs/theory.md, section 4.1), float64."""
    offsets = np.asarray(spec.positions, dtype=float) @ position_basis(d, spec.k).T     # (L, d)
    for start in range(0, n, chunk):
        stop = min(n, start + chunk)
        Z = spec.sigma * rng.standard_normal((stop - start, spec.L, d))
        T = _teacher_matrices(spec, Z @ Qstar / math.sqrt(d))
        yield start, stop, Z + offsets[None], T @ Z


def check_sizes(spec: ModelSpec, d: int, alpha: float, n_test: int = 1) -> int:
    """``n = round(alpha d)``; raises ``ValueError`` naming the bad size."""
    if isinstance(d, bool) or not isinstance(d, (int, np.integer)) or d < 2:
        raise ValueError(f"d: must be an integer >= 2, got {d!r}")
    if d <= spec.k:
        raise ValueError(f"d: must exceed the number of positional directions k = {spec.k}, got {d}")
    if not (math.isfinite(alpha) and alpha > 0):
        raise ValueError(f"alpha: must be a positive number, got {alpha}")
    n = int(round(alpha * d))
    if n < 1:
        raise ValueError(f"alpha: alpha * d = {alpha * d:g} leaves no training sample")
    if n_test < 1:
        raise ValueError(f"n_test: must be >= 1, got {n_test}")
    return n


def draw_instance(spec: ModelSpec, d: int, alpha: float, seed: int = 0, run_index: int = 0,
                  dtype: str = "float64", n_test: int = 10000) -> Instance:
    """Run ``run_index`` of ``seed``: the teacher and the training set (module docstring), ``X`` stored
    in ``dtype`` (float32 halves the memory: ``4 L n d`` bytes)."""
    n = check_sizes(spec, d, alpha, n_test)
    if dtype not in DTYPES:
        raise ValueError(f"dtype: choose from {', '.join(DTYPES)}, got {dtype!r}")
    ss_teacher, ss_train, _, _ = run_streams(seed, run_index)
    Qstar = np.random.default_rng(ss_teacher).standard_normal((d, spec.teacher_rank))
    L = spec.L
    X = np.empty((L * n, d), dtype=dtype)
    coef = None
    for start, stop, X3, Y3 in _chunks(spec, d, n, Qstar, np.random.default_rng(ss_train)):
        c = coefficients(X3, Y3)
        coef = np.empty((n, c.shape[1])) if coef is None else coef
        coef[start:stop] = c
        for l in range(L):
            X[l * n + start:l * n + stop] = X3[:, l, :]
    return Instance(spec=spec, d=d, alpha=float(alpha), n=n, Qstar=Qstar, X=X, coef=coef, seed=int(seed),
                    run_index=int(run_index), n_test=int(n_test))


def initial_Q(instance: Instance, init: str) -> np.ndarray:
    """The starts of docs/theory.md, section 1.4 (``d x r``), as :func:`validation.simulate.initial_Q`
    builds them: ``semantic`` ``Q*`` (cut or padded to ``r`` columns by random ones), ``positional``
    ``e_j`` in column ``j <= min(r, k)``, ``mixed`` ``Q*_1`` and ``e_1``, other columns and ``random``
    ``0.1 N(0, I)`` from the run's initialisation stream (numpy's draw, not the simulator's)."""
    from validation.run_settings import check_start

    spec, d = instance.spec, instance.d
    _, r, t, k = spec.shape
    check_start(init, r, "init")
    Q = RANDOM_INIT_SCALE * np.random.default_rng(run_streams(instance.seed, instance.run_index)[3]).standard_normal(
        (d, r))
    E = instance.E
    if init == "semantic":
        Q[:, :min(r, t)] = instance.Qstar[:, :min(r, t)]
    elif init == "positional":
        Q[:, :min(r, k)] = E[:, :min(r, k)]
    elif init == "mixed":
        Q[:, 0], Q[:, 1] = instance.Qstar[:, 0], E[:, 0]
    return Q


def overlaps(instance: Instance, Q) -> dict:
    """``q = sigma^2 Q^T Q / d``, ``m = E^T Q / sqrt(d)``, ``theta = sigma^2 Q^T Q* / d`` (docs/theory.md,
    section 4.1), as matrices."""
    d, s2 = instance.d, instance.spec.sigma ** 2
    Q = np.asarray(Q, dtype=float).reshape(d, -1)
    return {"q": s2 * Q.T @ Q / d, "m": instance.E.T @ Q / math.sqrt(d), "theta": s2 * Q.T @ instance.Qstar / d}


def _test_batches(instance: Instance):
    """The test set in chunks: ``(X3, coefficients)``, the given one (:func:`from_problem`) or the run's
    test stream drawn again."""
    if instance.test is not None:
        X_test, coef_test = instance.test
        n = len(coef_test)
        L = instance.spec.L
        for start in range(0, n, CHUNK):
            stop = min(n, start + CHUNK)
            yield np.stack([X_test[l * n + start:l * n + stop] for l in range(L)], axis=1), coef_test[start:stop]
        return
    ss_test = run_streams(instance.seed, instance.run_index)[2]
    for _, _, X3, Y3 in _chunks(instance.spec, instance.d, instance.n_test, instance.Qstar,
                               np.random.default_rng(ss_test)):
        yield X3, coefficients(X3, Y3)


def test_error(instance: Instance, Q, loss) -> float:
    """``E |Y - Yhat|_F^2 / (2d)`` on the run's ``n_test`` fresh samples; ``loss``: the exact per-sample
    loss (``loss(h, coef)``, :meth:`numerics.api.SampleLoss.loss`)."""
    d = instance.d
    Q = np.asarray(Q, dtype=float).reshape(d, -1)
    total, count = 0.0, 0
    for X3, c in _test_batches(instance):
        h = (X3 @ Q / math.sqrt(d)).reshape(len(c), -1)
        total += float(np.sum(loss(h, c)))
        count += len(c)
    return total / count


def split_coefficients(coef: np.ndarray, L: int) -> tuple:
    """Each sample's ``X_i X_i^T / d`` (``(n, L, L)``), ``Y_i X_i^T / d`` (``(n, L, L)``) and ``|Y_i|_F^2 / d``
    (``(n,)``) from its coefficients (:func:`coefficients`)."""
    n = len(coef)
    iu = np.triu_indices(L)
    ng = len(iu[0])
    G = np.empty((n, L, L))
    G[:, iu[0], iu[1]] = coef[:, :ng]
    G[:, iu[1], iu[0]] = coef[:, :ng]
    return G, coef[:, ng:ng + L * L].reshape(n, L, L), coef[:, -1]


def linear_test_error(instance: Instance, ridge: Optional[float] = None) -> float:
    """The linear positional baseline's test error (docs/theory.md, section 1.7) on this run's training
    and test sets, as the simulator fits it (:func:`validation.simulate.fit_linear_baseline`): ``B``
    minimises ``sum_i |Y_i - B X_i|_F^2 / (2d) + (ridge / 2) |B|_F^2``, i.e. ``B (sum_i g_i + ridge I) =
    sum_i c_i``, and its loss per test sample is ``(yy + sum_ab B_ab (B g - 2 c)_ab) / 2``."""
    from validation.run_settings import LINEAR_RIDGE

    L = instance.spec.L
    ridge = LINEAR_RIDGE if ridge is None else ridge
    G, C, _ = split_coefficients(instance.coef, L)
    B = np.linalg.solve(G.sum(0) + ridge * np.eye(L), C.sum(0).T).T      # B Gs = Cs, Gs symmetric
    total, count = 0.0, 0
    for _, c in _test_batches(instance):
        g, cc, yy = split_coefficients(c, L)
        total += float(np.sum(yy + np.einsum("ab,nab->n", B, np.einsum("ac,ncb->nab", B, g) - 2 * cc)) / 2)
        count += len(c)
    return total / count


def from_problem(problem) -> Instance:
    """The simulator's own draw (a :class:`validation.simulate.Problem`; needs torch) as an instance, its
    test set included."""
    spec, d, n = problem.spec, problem.d, problem.n

    def convert(batch):
        X = batch.X.detach().cpu().numpy()
        L = spec.L
        G = batch.G.cpu().numpy() / d
        C = batch.C.cpu().numpy() / d
        iu = np.triu_indices(L)
        coef = np.concatenate([G[:, iu[0], iu[1]], C.reshape(len(C), L * L), batch.yy.cpu().numpy()[:, None] / d],
                              axis=1)
        return X, coef

    X, coef = convert(problem.train)
    Qstar = problem.Qstar.detach().cpu().double().numpy().reshape(d, -1)
    return Instance(spec=spec, d=d, alpha=float(problem.alpha), n=n, Qstar=Qstar, X=X, coef=coef,
                    seed=problem.seed, run_index=problem.run_index, n_test=problem.test.n, source="simulate",
                    test=convert(problem.test))


def to_problem(instance: Instance, device=None):
    """This instance as a :class:`validation.simulate.Problem` (needs torch), for the simulator's
    gradient descent on the same training set and test set."""
    import torch

    from validation.simulate import Batch, Problem, choose_device

    spec, d, L = instance.spec, instance.d, instance.spec.L
    device = choose_device(None) if device is None else device
    iu = np.triu_indices(L)

    def batch(X, coef):
        n = len(coef)
        G = np.empty((n, L, L))
        ng = len(iu[0])
        G[:, iu[0], iu[1]] = coef[:, :ng]
        G[:, iu[1], iu[0]] = coef[:, :ng]
        C = coef[:, ng:ng + L * L].reshape(n, L, L)
        return Batch(X=torch.from_numpy(np.ascontiguousarray(X)).to(device), G=torch.from_numpy(G * d).to(device),
                     C=torch.from_numpy(C * d).to(device), yy=torch.from_numpy(coef[:, -1] * d).to(device), n=n, d=d,
                     L=L)

    if instance.test is not None:
        X_test, coef_test = instance.test
    else:
        parts = list(_test_batches(instance))
        X3 = np.concatenate([p[0] for p in parts])
        X_test = np.concatenate([X3[:, l, :] for l in range(L)]).astype(instance.X.dtype)
        coef_test = np.concatenate([p[1] for p in parts])
    dtype = torch.float32 if instance.X.dtype == np.float32 else torch.float64
    Qstar = torch.from_numpy(instance.Qstar[:, 0].copy() if spec.teacher_rank == 1 else instance.Qstar.copy())
    init_seed = run_streams(instance.seed, instance.run_index)[3]
    return Problem(spec=spec, d=d, alpha=instance.alpha, n=instance.n, Qstar=Qstar.to(dtype=dtype, device=device),
                   train=batch(instance.X, instance.coef), test=batch(X_test, coef_test), init_seed=init_seed,
                   seed=instance.seed, run_index=instance.run_index)
