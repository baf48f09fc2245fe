"""Which backend evaluates the generated per-node functions: ``compiled`` or ``numpy``.

``compiled`` (the default) runs the per-node functions and the prox's whole Newton iteration as
numba kernels generated from the model's expressions (:mod:`derivations.compiled`); ``numpy`` runs
the same expressions vectorised over the nodes, the reference that the compiled kernels are tested
against. Where numba cannot be imported or a model's expressions do not compile, the compiled
backend falls back to numpy with one logged line (:func:`derivations.generated_functions`).

The choice is :func:`use_backend` within a block, else ``ATTNPHASE_BACKEND`` in the environment
(which worker processes inherit), else ``compiled``.
"""
from __future__ import annotations

import contextlib
import contextvars
import os

BACKENDS = ("compiled", "numpy")
_BACKEND = contextvars.ContextVar("backend", default=None)


def check_backend(name: str) -> str:
    if name not in BACKENDS:
        raise ValueError(f"backend: unknown {name!r}; choose from {', '.join(BACKENDS)}")
    return name


def current_backend() -> str:
    """The backend a model bound now uses."""
    chosen = _BACKEND.get()
    if chosen is None:
        chosen = os.environ.get("ATTNPHASE_BACKEND", "").strip() or "compiled"
        try:
            check_backend(chosen)
        except ValueError as exc:
            raise ValueError(f"ATTNPHASE_BACKEND: {exc}") from None
    return chosen


@contextlib.contextmanager
def use_backend(name: str):
    """Within the block, models are bound with the backend ``name``."""
    token = _BACKEND.set(check_backend(name))
    try:
        yield
    finally:
        _BACKEND.reset(token)
