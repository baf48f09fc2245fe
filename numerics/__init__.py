"""The solver of the saddle-point equations: fixed points, branches, thresholds (docs/numerics.md).

The public interface is :mod:`numerics.api`. :func:`tune_allocator` is called once at
the start of a program that solves (the command line, each sweep task, the benchmarks).
"""
from .allocator import tune_allocator

__all__ = ["tune_allocator"]
