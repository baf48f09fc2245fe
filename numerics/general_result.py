"""Deprecated names of :mod:`numerics.result`, kept for the modules that still import them
(the QMC solver builds its records as ``GeneralFixedPoint``): one record serves every model."""
from __future__ import annotations

from .result import FixedPoint as GeneralFixedPoint
from .result import as_matrices as from_line_fixed_point
from .result import failed_point, from_row

__all__ = ["GeneralFixedPoint", "failed_point", "from_row", "from_line_fixed_point"]
