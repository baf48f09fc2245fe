"""The proximal operator of the loss and its global minimiser: :mod:`.scalar` for the two-token
rank-one model, :mod:`.matrix` for the general model's ``L x r`` argument."""
