"""Finite-size simulations of the model of docs/theory.md, sections 1 and 4.1, in torch, for any
number of tokens ``L``, student rank ``r``, teacher rank ``t`` and positional matrix ``P``
(``L x k``) of a :class:`~derivations.spec.ModelSpec`. Its parts, each importing only those above it:

* :mod:`.attention`: the attention as a strategy, a row map and its pullback, written once;
* :mod:`.data`: seeding, positions, the teacher, the training and test sets and their statistics;
* :mod:`.kernel`: the loss kernel, the risk and its gradient for a batch of students;
* :mod:`.baseline`: the linear positional baseline;
* :mod:`.training`: the starts, gradient descent and Adam of a batch, divergence, early stops;
* :mod:`.records`: the measured statistics, runs and their aggregates.

Shapes: a weight of rank one is a vector of ``R^d``, a weight of rank ``r > 1`` a ``d x r``
matrix; so ``Q`` has shape ``(d,)`` for ``r = 1`` and ``(d, r)`` otherwise, the teacher ``Q*``
``(d,)`` for ``t = 1`` and ``(d, t)`` otherwise. :mod:`validation.simulate` is the front that
callers import.
"""
