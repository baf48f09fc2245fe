"""The generated functions of a model of any shape ``(L, r, t, k)``, bound to its parameters,
with arrays of nodes in and out (docs/theory.md, section 4).

:class:`GeneralModel` is to the general model what :class:`~numerics.model.bound.BoundModel`
is to the two-token rank-one one: it appends the parameter tuple and reshapes, and writes no
equation. Per-node quantities are arrays with one row per node, packed by
:mod:`derivations.packing`: ``h, w, zeta`` are ``(N, L r)`` (token by token), ``hs`` is
``(N, L t)``; matrix order parameters are passed as numpy matrices and packed here.
"""
from __future__ import annotations

import functools
from typing import Dict, Tuple

import numpy as np

from derivations import ModelSpec, packing

from numerics.backend import check_backend, current_backend
from numerics.solver_range import check_model_range


#: nodes per call of a generated per-node function: its few hundred temporaries then stay in the
#: processor's cache (a fast (3, 1, 1) or (2, 2, 1) fixed point costs 0.77-0.89 of the CPU time of
#: calls on whole 32768-node scramblings; ``python benchmarks/kernels.py node-blocks``)
NODE_BLOCK = 4096
#: the same for the compiled backend, whose loops keep no temporaries: the block only bounds the
#: copy of the arguments a call makes
COMPILED_BLOCK = 1 << 16


def _columns(a: np.ndarray):
    return tuple(np.asarray(a, dtype=float).T)


class GeneralModel:
    """Generated functions of ``spec`` (any shape), parameters bound; ``backend``: ``compiled`` or
    ``numpy`` (:mod:`numerics.backend`)."""

    def __init__(self, spec: ModelSpec, backend: str = "compiled"):
        from derivations import generated_functions

        check_model_range(spec)
        self.spec = spec
        self.shape = packing.as_shape(spec)
        self.gm = generated_functions(spec, backend=check_backend(backend))
        # the backend that runs: compiled may have fallen back to numpy (with a logged line)
        self.backend = self.gm.backend
        self.params = self.gm.params(spec)
        L, r, t, k = self.shape
        self.n_h = L * r
        self.n_hs = L * t
        self.triu = np.triu_indices(self.n_h)
        self.positions = np.array(spec.positions, dtype=float)

    # the names are read from the derivation, which imports SymPy: only where they are asked
    # (the integrator), not where a teacher is evaluated (the linear baseline)
    @functools.cached_property
    def moment_names(self) -> Tuple[str, ...]:
        return self.gm.moment_names

    @functools.cached_property
    def conjugate_names(self) -> Tuple[str, ...]:
        return self.gm.conjugate_names

    # ------------------------------------------------------------------ packing
    def pack(self, name: str, matrix) -> Tuple[float, ...]:
        return packing.pack(name, np.asarray(matrix, dtype=float), self.shape)

    def unpack(self, name: str, values) -> np.ndarray:
        return np.array(packing.unpack(name, list(values), self.shape), dtype=float)

    def _call(self, name, *args):
        # as numerics.model.bound: overflow and 0/0 give inf or nan, which the solver reports
        # as its own error, instead of numpy warnings that quote the generated lines
        with np.errstate(all="ignore"):
            return getattr(self.gm, name)(*args, *self.params)

    def _per_node(self, name, columns, *rest):
        """``name`` on the node arrays ``columns`` (each ``(N,)``) and the scalars ``rest``, evaluated
        in blocks of :data:`NODE_BLOCK` nodes; each output broadcast to ``(N,)`` (one array, or a list
        for a function of several outputs)."""
        n = len(columns[0]) if columns else 0
        block = COMPILED_BLOCK if self.backend == "compiled" else NODE_BLOCK
        if n <= block:
            out = self._call(name, *columns, *rest)
            return ([np.broadcast_to(np.asarray(o, dtype=float), (n,)) for o in out] if isinstance(out, (list, tuple))
                    else np.broadcast_to(np.asarray(out, dtype=float), (n,)))
        parts = [self._per_node(name, [c[i:i + block] for c in columns], *rest) for i in range(0, n, block)]
        if isinstance(parts[0], list):
            return [np.concatenate(block) for block in zip(*parts)]
        return np.concatenate(parts)

    # ------------------------------------------------------------------ per node
    def prox_newton(self, h, w, T, V) -> Tuple[np.ndarray, np.ndarray, np.ndarray]:
        """``(objective (N,), gradient (N, L r), Hessian (N, L r, L r))`` of the prox objective. ``T``: the
        teacher's matrix at each node (:meth:`teacher` of its ``h*``), through which alone the objective
        depends on ``h*``: an iteration at fixed nodes computes it once."""
        n = len(h)
        out = self._per_node("prox_newton_of_T", _columns(h) + _columns(w) + _columns(T), *self.pack("V", V))
        obj = out[0]
        grad = np.empty((n, self.n_h))
        for i in range(self.n_h):
            grad[:, i] = out[1 + i]
        H = np.empty((n, self.n_h, self.n_h))
        for e, (i, j) in enumerate(zip(*self.triu)):
            H[:, i, j] = out[1 + self.n_h + e]
            if i != j:
                H[:, j, i] = H[:, i, j]
        return obj, grad, H

    def newton_terms(self, V):
        """``(terms, objective)`` of the prox objective at ``V`` as functions of the nodes' ``(h, w, T)``
        (:meth:`prox_newton`, :meth:`prox_objective`), what the numpy reference of the Newton descent
        evaluates (:func:`numerics.prox.newton.newton`)."""
        return (lambda a, b, c: self.prox_newton(a, b, c, V)), (lambda a, b, c: self.prox_objective(a, b, c, V))

    def prox_objective(self, h, w, T, V) -> np.ndarray:
        """The prox objective per node; ``T`` as in :meth:`prox_newton`."""
        return self._per_node("prox_objective_of_T", _columns(h) + _columns(w) + _columns(T), *self.pack("V", V))

    def loss(self, h, hs) -> np.ndarray:
        return self._per_node("loss", _columns(h) + _columns(hs))

    def teacher(self, hs) -> np.ndarray:
        """The teacher's attention matrix ``T(h*)`` per node, row-major ``(N, L^2)``."""
        return np.stack(self._per_node("teacher", _columns(hs)), axis=-1)

    def positional_mean(self, m) -> np.ndarray:
        """``P m`` packed like ``w`` (``(L r,)``)."""
        return np.array([float(v) for v in self._call("positional_mean", *self.pack("m", m))])

    def channel_moments(self, h, zeta, hs, m, V) -> np.ndarray:
        """Per-node moments ``(N, len(moment_names))`` (:mod:`derivations.moments`), the last the envelope ``M``."""
        out = self._per_node("channel_moments", _columns(h) + _columns(zeta) + _columns(hs), *self.pack("m", m),
                             *self.pack("V", V))
        return np.stack(out, axis=-1)

    def test_error_integrand(self, zeta, hs, m) -> np.ndarray:
        return self._per_node("test_error_integrand_x", _columns(zeta) + _columns(hs), *self.pack("m", m))

    # ------------------------------------------------------------------ averaged
    def conjugates_from_moments(self, alpha: float, means, q, theta) -> Dict[str, np.ndarray]:
        """``{form: matrix}`` for each of ``expressions.CONJUGATE_FORMS`` from the averaged moments
        ``means`` (without the envelope). ``means`` may be ``(n_moments - 1,)`` or
        ``(R, n_moments - 1)``; each matrix then carries the leading ``R``."""
        means = np.asarray(means, dtype=float)
        lead = means.shape[:-1]
        out = self._call("conjugates_from_moments", alpha, *np.moveaxis(means, -1, 0), *self.pack("q", q),
                         *self.pack("theta", theta))
        values = np.stack([np.broadcast_to(np.asarray(o, dtype=float), lead) for o in out], axis=-1)
        from derivations.expressions import CONJUGATE_FORMS

        forms, start = {}, 0
        for form in CONJUGATE_FORMS:
            base = form.split("_")[0]
            size = len(packing.names(base, self.shape))
            rows, cols, sym = packing.dimensions(base, self.shape)
            block = values[..., start:start + size]
            start += size
            mat = np.zeros(lead + (rows, cols))
            for c, (i, j) in enumerate(packing.matrix_index(rows, cols, sym)):
                mat[..., i, j] = block[..., c]
                if sym:
                    mat[..., j, i] = block[..., c]
            forms[form] = mat
        return forms

    def prior_updates(self, qhat, mhat, Vhat, thetahat) -> Dict[str, np.ndarray]:
        """``{V, q, m, theta}`` from the conjugates (docs/theory.md, section 4.5)."""
        out = [float(v) for v in self._call("prior_updates", *self.pack("qhat", qhat), *self.pack("mhat", mhat),
                                            *self.pack("Vhat", Vhat), *self.pack("thetahat", thetahat))]
        result, start = {}, 0
        for name in ("V", "q", "m", "theta"):
            size = len(packing.names(name, self.shape))
            result[name] = self.unpack(name, out[start:start + size])
            start += size
        return result

    def prior_free_energy(self, overlaps: dict, hats: dict) -> float:
        """``F`` without ``alpha E[M]`` (docs/theory.md, section 4.4); ``overlaps``, ``hats``: name -> matrix."""
        args = [v for name in packing.OVERLAPS for v in self.pack(name, overlaps[name])]
        args += [v for name in packing.CONJUGATES for v in self.pack(name, hats[name])]
        return float(self._call("prior_free_energy", *args))


def bind_general(spec: ModelSpec, backend=None) -> GeneralModel:
    """The model of ``spec`` bound with ``backend`` (default: :func:`numerics.backend.current_backend`)."""
    return _bound_with(spec, backend or current_backend())


@functools.lru_cache(maxsize=16)
def _bound_with(spec: ModelSpec, backend: str) -> GeneralModel:
    # memoised per (spec, backend): binding loads the generated module and its compiled kernels
    return GeneralModel(spec, backend)
