"""Solving ``x = F(x)`` and one-dimensional roots: the damped Anderson iteration with a root finder
on ``x - F(x)`` behind it (:mod:`.iteration`), and the safeguarded Newton and secant methods in
``alpha`` (:mod:`.root_finding`)."""
