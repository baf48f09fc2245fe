"""One branch's fixed point at one ``alpha``: the line quadrature's solve (:mod:`.lines`), the
quasi-Monte Carlo solve (:mod:`.qmc`), the entry point for any model (:mod:`.general`), and what
they share: starts (:mod:`.start_search`), the orientation gauge (:mod:`.gauge`), the exact
symmetries (:mod:`.symmetry`) and the branches' subspaces (:mod:`.subspaces`)."""
