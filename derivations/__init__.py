"""Symbolic replica free energy and saddle-point equations (SPEC section 2)."""
from .spec import ModelSpec, ModelSpecError, parse_A

__all__ = ["ModelSpec", "ModelSpecError", "parse_A"]
