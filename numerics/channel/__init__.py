"""The channel side of the saddle-point equations behind one interface (:mod:`.integrators`), with
two implementations: the line quadrature of the two-token rank-one model (:mod:`.lines`) and
randomised quasi-Monte Carlo for any model (:mod:`.qmc`)."""
