"""One branch's fixed point at one ``alpha``: the one solve for any model (:mod:`.solve`), through
the line quadrature's solve (:mod:`.lines`) or the quasi-Monte Carlo solve (:mod:`.qmc`), and what
they share: starts (:mod:`.start_search`), the orientation gauge (:mod:`.gauge`), the exact
symmetries (:mod:`.symmetry`) and the branches' subspaces (:mod:`.subspaces`)."""
