"""The solver of the saddle-point equations: fixed points, branches, thresholds (docs/numerics.md).

The public interface is :mod:`numerics.api`; its records are :mod:`numerics.result` and
:mod:`numerics.overlaps`. Beneath it, one subpackage per step of the method: :mod:`.model` (the
generated equations bound to a model), :mod:`.prox`, :mod:`.channel` (the channel side: line
quadrature or quasi-Monte Carlo), :mod:`.solver` (fixed points of a map, roots in ``alpha``),
:mod:`.fixed_points`, :mod:`.branches` and :mod:`.thresholds`; :mod:`.baseline` is the linear
baseline.
"""
