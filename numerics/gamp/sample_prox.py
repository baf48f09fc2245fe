"""The exact per-sample loss of a finite instance behind the interface the global prox searches
(:mod:`numerics.prox.matrix`), and the empirical risk with its gradient (docs/gamp.md, section 2).

A sample enters through its coefficients ``(g, c, yy)`` (:func:`derivations.sample_loss.coefficient_names`:
``X_i X_i^T / d``, ``Y_i X_i^T / d``, ``|Y_i|^2 / d``), one row per sample. :class:`SampleLoss` offers
what :func:`~numerics.prox.newton.newton` and :class:`~numerics.prox.matrix.GlobalProx` call on a
model (``backend``, ``newton_terms``, ``loss``, ``teacher``, ``n_h``, ``shape``), with
the sample's coefficients in the place of the teacher's matrix: the theory's prox objective and the
exact one differ only in the loss, so the same search finds the global minimiser of either.
"""
from __future__ import annotations

import math
from typing import Tuple

import numpy as np

from derivations import ModelSpec, packing

#: samples per call of a generated function (as numerics.model.general.NODE_BLOCK: temporaries in cache)
BLOCK = 4096


def _columns(a) -> tuple:
    return tuple(np.asarray(a, dtype=float).T)


class SampleLoss:
    """The generated exact per-sample functions of ``spec`` (:mod:`derivations.sample_loss`),
    vectorised over samples (rows)."""

    def __init__(self, spec: ModelSpec):
        from derivations.sample_loss import coefficient_names, sample_loss_functions

        self.spec = spec
        self.shape = packing.as_shape(spec)
        self.fn = sample_loss_functions(spec)
        L, r, _, _ = self.shape
        self.n_h = L * r
        self.n_coef = len(coefficient_names(L))
        self.triu = np.triu_indices(self.n_h)

    def _call(self, name, columns, *rest):
        n = len(columns[0])
        with np.errstate(all="ignore"):
            if n <= BLOCK:
                out = getattr(self.fn, name)(*columns, *rest)
                if isinstance(out, (list, tuple)):
                    return [np.broadcast_to(np.asarray(o, dtype=float), (n,)) for o in out]
                return np.broadcast_to(np.asarray(out, dtype=float), (n,))
        parts = [self._call(name, [c[i:i + BLOCK] for c in columns], *rest) for i in range(0, n, BLOCK)]
        if isinstance(parts[0], list):
            return [np.concatenate(block) for block in zip(*parts)]
        return np.concatenate(parts)

    def _hessian(self, out, n) -> np.ndarray:
        H = np.empty((n, self.n_h, self.n_h))
        for e, (i, j) in enumerate(zip(*self.triu)):
            H[:, i, j] = out[e]
            H[:, j, i] = out[e]
        return H

    # ------------------------------------------------------------------ the prox's interface
    #: the Newton descent runs on numpy (:func:`numerics.prox.newton.newton`): no compiled kernel is
    #: generated for the exact loss
    backend = "numpy"

    def prox_newton(self, h, w, coef, V) -> Tuple[np.ndarray, np.ndarray, np.ndarray]:
        """``(objective, gradient, Hessian)`` of ``1/2 sum_l (h_l - w_l)^T V^{-1} (h_l - w_l) + loss_i(h)``
        per sample."""
        n = len(h)
        out = self._call("sample_prox_newton", _columns(h) + _columns(w) + _columns(coef),
                         *packing.pack("V", np.asarray(V, dtype=float), self.shape))
        grad = np.stack(out[1:1 + self.n_h], axis=1)
        return out[0], grad, self._hessian(out[1 + self.n_h:], n)

    def newton_terms(self, V):
        """``(terms, objective)`` of each sample's prox objective at ``V`` as functions of ``(h, w, coef)``
        (:meth:`prox_newton`, :meth:`prox_objective`), what the Newton descent evaluates
        (:func:`numerics.prox.newton.newton`; the coefficients of a sample in place of a node's teacher
        matrix)."""
        return (lambda a, b, c: self.prox_newton(a, b, c, V)), (lambda a, b, c: self.prox_objective(a, b, c, V))

    def prox_objective(self, h, w, coef, V) -> np.ndarray:
        return self._call("sample_prox_objective", _columns(h) + _columns(w) + _columns(coef),
                          *packing.pack("V", np.asarray(V, dtype=float), self.shape))

    def loss(self, h, coef) -> np.ndarray:
        """The exact loss ``|Y_i - S(h_i) X_i|_F^2 / (2d)`` per sample."""
        return self._call("sample_loss", _columns(h) + _columns(coef))

    def teacher(self, coef) -> np.ndarray:
        """The prox's search passes the teacher's matrix of a node to the objective; a sample's
        coefficients play that part."""
        return np.asarray(coef, dtype=float)

    # ------------------------------------------------------------------ the empirical risk
    def loss_and_grad(self, h, coef) -> Tuple[np.ndarray, np.ndarray]:
        """The loss per sample and its gradient in ``h`` (``(n, L r)``, packed token by token)."""
        out = self._call("sample_loss_grad", _columns(h) + _columns(coef))
        return out[0], np.stack(out[1:], axis=1)


#: rows of a float32 design cast to float64 at a time (2048 x d doubles)
ROW_CHUNK = 2048


def _times(X, Q) -> np.ndarray:
    """``X Q`` in float64 (``Q`` float64). A float32 design is read in chunks of rows cast to float64:
    the storage halves and the products keep float64's precision (float32 products floor GAMP's
    residual near 1e-7)."""
    if X.dtype == np.float64:
        return X @ Q
    out = np.empty((X.shape[0], Q.shape[1]))
    for start in range(0, X.shape[0], ROW_CHUNK):
        out[start:start + ROW_CHUNK] = X[start:start + ROW_CHUNK].astype(np.float64) @ Q
    return out


def _transposed_times(X, F) -> np.ndarray:
    """``X^T F`` in float64, as :func:`_times`."""
    if X.dtype == np.float64:
        return X.T @ F
    out = np.zeros((X.shape[1], F.shape[1]))
    for start in range(0, X.shape[0], ROW_CHUNK):
        out += X[start:start + ROW_CHUNK].astype(np.float64).T @ F[start:start + ROW_CHUNK]
    return out


def preactivations(X, Q, n: int, L: int) -> np.ndarray:
    """``h = X Q / sqrt(d)`` of every sample, ``(n, L r)`` packed token by token, from the token-major
    ``X`` (``(L n, d)``: rows ``l n .. (l + 1) n - 1`` are token ``l``), in float64."""
    d = X.shape[1]
    h = _times(X, np.asarray(Q, dtype=float)) / math.sqrt(d)          # (L n, r)
    r = h.shape[1]
    return h.reshape(L, n, r).transpose(1, 0, 2).reshape(n, L * r)


def back_projection(X, F, n: int, L: int) -> np.ndarray:
    """``X^T F / sqrt(d)`` (``(d, r)``, float64) for per-sample ``F`` packed like :func:`preactivations`."""
    d = X.shape[1]
    r = F.shape[1] // L
    Ft = np.ascontiguousarray(F.reshape(n, L, r).transpose(1, 0, 2).reshape(L * n, r), dtype=float)
    return _transposed_times(X, Ft) / math.sqrt(d)


def empirical_risk(loss: SampleLoss, X, coef, Q, lam: float) -> Tuple[float, np.ndarray, float]:
    """``(R(Q), dR/dQ, |data term|_F)``: ``R = sum_i loss_i + lam/2 |Q|_F^2`` (docs/theory.md, section 1.3;
    ``lam`` the ridge strength :attr:`~derivations.spec.ModelSpec.ridge_strength` of the regulariser),
    its gradient ``X^T G / sqrt(d) + lam Q`` (``G = d loss / d h``) and the norm of the data term alone."""
    n = coef.shape[0]
    L = loss.shape.L
    Q = np.asarray(Q, dtype=float).reshape(X.shape[1], -1)
    values, G = loss.loss_and_grad(preactivations(X, Q, n, L), coef)
    data = back_projection(X, G, n, L)
    return float(values.sum() + 0.5 * lam * np.sum(Q * Q)), data + lam * Q, float(np.linalg.norm(data))
