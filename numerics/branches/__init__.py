"""Branches in ``alpha``: continuation with its ends located and classified (:mod:`.follow`),
pseudo-arclength continuation through a turn (:mod:`.arclength`), and the births of branches on
their parent (:mod:`.bifurcation`)."""
