"""The solver of the saddle-point equations: fixed points, branches, thresholds (docs/numerics.md).

The public interface is :mod:`numerics.api`.
"""
