"""Symbolic replica free energy and saddle-point equations (SPEC section 2).

Entry points: :func:`derive` (SymPy expressions), :func:`generated_functions`
(lambdified numpy/mpmath functions, cached on disk) and ``attnphase derive``.
"""
from .codegen import CHANNEL_NAMES, GeneratedModel, generated_functions
from .model import DerivationError
from .replica import Derivation, derive
from .spec import ModelSpec, ModelSpecError, parse_A
from .symbols import PARAM_NAMES, PARAMS

__all__ = ["CHANNEL_NAMES", "Derivation", "DerivationError", "GeneratedModel", "ModelSpec", "ModelSpecError",
           "PARAMS", "PARAM_NAMES", "derive", "generated_functions", "parse_A"]
