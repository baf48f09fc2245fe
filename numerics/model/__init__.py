"""The saddle-point equations as the solver sees them: the generated code of a model bound to its
parameters (:mod:`.bound` for the two-token rank-one model, :mod:`.general` for any ``L, r, t, P``)
and the two half-steps of the iteration (:mod:`.saddle_point`)."""
