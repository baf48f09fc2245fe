"""The thresholds ``alpha_c`` (the free energies' crossing) and ``alpha_l`` (the global minimum's
test error crossing the linear baseline's): root finding on the line quadrature's branches
(:mod:`.lines`) and on any model's (:mod:`.general`)."""
