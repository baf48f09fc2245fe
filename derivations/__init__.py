"""Symbolic replica free energy and saddle-point equations (docs/theory.md, sections 2 and 4).

Entry points: :func:`derive` (SymPy expressions of the general model, any ``(L, r, t, k)``),
:func:`derive_lines` (the same equations of the two-token rank-one model in the variables
``xi, y`` of docs/theory.md, section 2), :func:`generated_functions` (lambdified numpy/mpmath
functions, cached on disk), :mod:`derivations.packing` (names and packing of the matrix order
parameters) and ``attnphase derive``.
Attributes are imported lazily, so that ``from derivations import ModelSpec`` or
a cache hit of :func:`generated_functions` does not import SymPy.
"""
from .spec import ModelSpec, ModelSpecError, parse_A

_LAZY = {
    "CHANNEL_NAMES": "codegen", "GeneratedModel": "codegen", "generated_functions": "codegen",
    "DerivationError": "model", "MatrixDerivation": "replica", "derive": "replica",
    "Derivation": "reduction", "derive_lines": "reduction",
    "PARAMS": "symbols", "PARAM_NAMES": "symbols",
}

__all__ = ["ModelSpec", "ModelSpecError", "parse_A", *sorted(_LAZY)]


def __getattr__(name):
    if name in _LAZY:
        import importlib

        value = getattr(importlib.import_module(f".{_LAZY[name]}", __name__), name)
        globals()[name] = value
        return value
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


def __dir__():
    return sorted(set(globals()) | set(_LAZY))
