"""The data of one run (docs/theory.md, sections 1.1-1.2 and 4.1): seeding, positions, the teacher,
the training and test sets and their Gram statistics.

Positions
---------
``mu_l = sqrt(d) sum_a P[l, a] e_a`` with the orthonormal vectors of :func:`position_basis`:
``e_1 = (1, ..., 1)/sqrt(d)`` (so the two-token model is that of section 1.1) and, for
``a >= 2``, the real Fourier vectors ``e_a[j] = sqrt(2/d) cos(2 pi f j/d)`` (``a = 2f``) or
``sqrt(2/d) sin(2 pi f j/d)`` (``a = 2f + 1``), ``j = 0..d-1``: dense, deterministic, and
orthonormal for ``d > k``.

Statistics
----------
The per-sample loss ``|Y_i - S(h_i) X_i|_F^2 / (2d)`` depends on the data only through the
``L x L`` statistics ``G = X X^T``, ``C = Y X^T`` and ``|Y|_F^2`` (:class:`Batch`), computed once
per data set in float64 whatever the working dtype, and on the student only through
``h = X Q / sqrt(d)``; ``X`` is stored as one contiguous ``(L n) x d`` matrix for those products.

Seeding
-------
One integer ``seed`` determines everything. Run ``k`` of a call uses the numpy
``SeedSequence(seed, spawn_key=(k,))`` (the same child whatever the number of runs), which
spawns four independent streams: the teacher ``Q*``, the training set, the test set and the
random initialisation. (numpy's global state is never used.) Each stream seeds a CPU
``torch.Generator``; data are drawn in float64 on the CPU and then cast and moved to the device,
so the data do not depend on the device or the working dtype, and a fixed seed reproduces
bit-identical results on the CPU. The start of a run does not enter its data: every start at
one ``(seed, k)`` trains on the same data set.
"""
from __future__ import annotations

import dataclasses
import math
from typing import Optional

import numpy as np
import torch

from derivations.spec import ModelSpec

from .attention import attention_matrix, teacher_attention

STAT_DTYPE = torch.float64  # dtype of the per-sample L x L statistics


def choose_device(device: Optional[str] = None) -> torch.device:
    """The device to run on: ``device`` if given, else CUDA when present, else the CPU."""
    if device:
        return torch.device(device)
    return torch.device("cuda" if torch.cuda.is_available() else "cpu")


def run_seed_sequence(seed: int, run_index: int) -> np.random.SeedSequence:
    """The seed sequence of run ``run_index`` of a call with integer ``seed``."""
    return np.random.SeedSequence(int(seed), spawn_key=(int(run_index),))


def torch_generator(ss: np.random.SeedSequence) -> torch.Generator:
    """A CPU ``torch.Generator`` seeded from ``ss``."""
    state = ss.generate_state(2, dtype=np.uint32)
    g = torch.Generator(device="cpu")
    g.manual_seed(int(state[0]) << 31 ^ int(state[1]))
    return g


# --------------------------------------------------------------------------- positions


def check_dimension(d: int, k: int) -> None:
    if isinstance(d, bool) or not isinstance(d, (int, np.integer)) or d < 1:
        raise ValueError(f"d: must be a positive integer, got {d!r}")
    if k >= d:
        raise ValueError(f"d: must exceed the number of positional directions k = {k}, got d = {d}")


def position_basis(d: int, k: int, dtype: torch.dtype = torch.float64) -> torch.Tensor:
    """The orthonormal ``e_1..e_k`` of ``R^d`` as the columns of a ``d x k`` matrix (module docstring;
    :func:`validation.instances.position_basis`, the one definition, in numpy).

    ``e_1 = (1, ..., 1)/sqrt(d)``; ``e_{2f}`` and ``e_{2f+1}`` are the cosine and sine of
    frequency ``f``, orthonormal to ``e_1`` and to each other while ``2f < d``, which
    ``d > k`` guarantees."""
    from validation.instances import position_basis as basis

    check_dimension(d, k)
    return torch.from_numpy(basis(d, k)).to(dtype)


def position_offsets(spec: ModelSpec, d: int) -> torch.Tensor:
    """``mu_l / sqrt(d) = sum_a P[l, a] e_a`` as an ``L x d`` float64 matrix."""
    P = torch.tensor(spec.positions, dtype=torch.float64)
    return P @ position_basis(d, spec.k).t()


# --------------------------------------------------------------------------- data


@dataclasses.dataclass
class Batch:
    """``n`` samples of ``L`` tokens, stored for fast training (module docstring).

    X : ``(L n, d)`` contiguous, *token-major*: rows ``l n .. (l + 1) n - 1`` are the
        tokens ``x_{i,l}``, so that ``X Q`` splits into ``L`` contiguous blocks
        ``h_l``. Working dtype.
    G : ``(n, L, L)`` float64, ``X_i X_i^T``.
    C : ``(n, L, L)`` float64, ``Y_i X_i^T``.
    yy : ``(n,)`` float64, ``|Y_i|_F^2``.

    ``Gt`` and ``Ct`` are ``G`` and ``C`` in the loss kernel's layout ``(L, L, n)``.
    """

    X: torch.Tensor
    G: torch.Tensor
    C: torch.Tensor
    yy: torch.Tensor
    n: int
    d: int
    L: int = 2

    def __post_init__(self):
        self.Gt = self.G.permute(1, 2, 0).contiguous()
        self.Ct = self.C.permute(1, 2, 0).contiguous()

    @property
    def X3(self) -> torch.Tensor:
        """``X`` as an ``(n, L, d)`` tensor (a copy)."""
        return self.X.view(self.L, self.n, self.d).transpose(0, 1).contiguous()


def teacher_matrix(hstar: torch.Tensor, spec: ModelSpec) -> torch.Tensor:
    """``T = (1 - omega) T0(h* h*^T) + omega A`` (docs/theory.md, sections 1.2 and 4.1), ``T0`` the
    teacher's attention, for ``hstar`` of shape ``(n, L)`` (rank one) or ``(n, L, t)``."""
    A = torch.tensor(spec.A, dtype=hstar.dtype, device=hstar.device)
    S = attention_matrix(hstar, teacher_attention(spec))
    return (1.0 - spec.omega) * S + spec.omega * A


def sample_raw(spec: ModelSpec, d: int, n: int, Qstar: torch.Tensor, generator: torch.Generator):
    """Draw ``n`` samples of docs/theory.md, section 4.1 in float64 on the CPU.

    Returns ``(X, Y, Z)`` each of shape ``(n, L, d)``: ``x_l = mu_l/sqrt(d) + z_l`` with
    ``mu_l`` from :func:`position_offsets`, ``z_l ~ N(0, sigma^2 I)``, ``Y = T Z`` with the
    teacher seeing only the semantic part, ``h*_l = Q*^T z_l / sqrt(d)``.
    """
    L = spec.L
    Z = spec.sigma * torch.randn(n, L, d, generator=generator, dtype=torch.float64)
    Qs = Qstar.to(device="cpu", dtype=torch.float64)
    hstar = (Z @ Qs) / math.sqrt(d)
    T = teacher_matrix(hstar, spec)
    Y = T @ Z
    X = Z + position_offsets(spec, d)[None]
    return X, Y, Z


def _raw_chunks(spec: ModelSpec, d: int, n: int, Qstar: torch.Tensor, generator: torch.Generator, chunk: int):
    for start in range(0, n, chunk):
        stop = min(n, start + chunk)
        yield start, stop, sample_raw(spec, d, stop - start, Qstar, generator)


def make_batch(spec: ModelSpec, d: int, n: int, Qstar: torch.Tensor, generator: torch.Generator,
               dtype: torch.dtype, device: torch.device, chunk: int = 4096) -> Batch:
    """Draw ``n`` samples and precompute their Gram statistics (drawn in chunks to bound memory)."""
    L = spec.L
    X_out = torch.empty(n * L, d, dtype=dtype, device=device)
    G = torch.empty(n, L, L, dtype=STAT_DTYPE)
    C = torch.empty(n, L, L, dtype=STAT_DTYPE)
    yy = torch.empty(n, dtype=STAT_DTYPE)
    for start, stop, (X, Y, _) in _raw_chunks(spec, d, n, Qstar, generator, chunk):
        G[start:stop] = X @ X.transpose(1, 2)
        C[start:stop] = Y @ X.transpose(1, 2)
        # one dot product per sample: (Y * Y).sum() writes a copy of Y first, 3.5 times slower
        m = stop - start
        yy[start:stop] = (Y.view(m, 1, -1) @ Y.view(m, -1, 1)).view(m)
        for l in range(L):
            X_out[l * n + start:l * n + stop] = X[:, l, :].to(dtype=dtype, device=device)
    return Batch(X=X_out, G=G.to(device), C=C.to(device), yy=yy.to(device), n=n, d=d, L=L)


@dataclasses.dataclass
class Problem:
    """One data set: the teacher, the training set (``n = alpha d``) and a test set, drawn from
    run ``run_index`` of ``seed``; ``init_seed`` is the stream of its random starts."""

    spec: ModelSpec
    d: int
    alpha: float
    n: int
    Qstar: torch.Tensor
    train: Batch
    test: Batch
    init_seed: np.random.SeedSequence
    seed: int
    run_index: int


def make_problem(spec: ModelSpec, d: int, alpha: float, seed: int = 0, run_index: int = 0,
                 n_test: int = 10000, dtype: torch.dtype = torch.float32,
                 device: Optional[torch.device] = None) -> Problem:
    """Draw the teacher, the training set (``n = round(alpha d)``) and the test set of one run."""
    device = choose_device(None) if device is None else device
    check_dimension(d, spec.k)
    n = int(round(alpha * d))
    if n < 1:
        raise ValueError(f"alpha: alpha * d = {alpha * d} gives no samples")
    if n_test < 1:
        raise ValueError(f"n_test: must be >= 1, got {n_test}")
    ss_teacher, ss_train, ss_test, ss_init = run_seed_sequence(seed, run_index).spawn(4)
    g_teacher = torch_generator(ss_teacher)
    t = spec.teacher_rank
    Qstar = torch.randn((d,) if t == 1 else (d, t), generator=g_teacher, dtype=torch.float64)
    train = make_batch(spec, d, n, Qstar, torch_generator(ss_train), dtype, device)
    test = make_batch(spec, d, n_test, Qstar, torch_generator(ss_test), dtype, device)
    return Problem(spec=spec, d=d, alpha=alpha, n=n, Qstar=Qstar.to(dtype=dtype, device=device),
                   train=train, test=test, init_seed=ss_init, seed=seed, run_index=run_index)


def raw_training_set(problem: Problem, chunk: int = 4096):
    """The run's training ``(X, Y)`` as ``(n, L, d)`` float64 CPU tensors, redrawn from its seed
    (the stored batch keeps only ``X`` and the statistics; reference implementations need ``Y``)."""
    ss_train = run_seed_sequence(problem.seed, problem.run_index).spawn(4)[1]
    parts = list(_raw_chunks(problem.spec, problem.d, problem.n, problem.Qstar.double().cpu(),
                             torch_generator(ss_train), chunk))
    return torch.cat([x for _, _, (x, _, _) in parts]), torch.cat([y for _, _, (_, y, _) in parts])
