"""Branches in ``alpha``: continuation with its ends bisected and classified (:mod:`.follow`, the
line quadrature's), the grid walk of the quasi-Monte Carlo integrator (:mod:`.walk`),
pseudo-arclength continuation through a turn (:mod:`.arclength`), and the births of branches on
their parent (:mod:`.bifurcation`)."""
