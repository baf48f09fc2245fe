"""The saddle-point equations as the solver sees them: the generated code of a model bound to its
parameters (:mod:`.bound` for the two-token rank-one model, :mod:`.general` for any ``L, r, t, P``)
and the prior half-step of the iteration with the outputs at a fixed point (:mod:`.saddle_point`;
the line quadrature's channel half-step is :func:`numerics.channel.lines.expectations.update_hat_overlaps`)."""
