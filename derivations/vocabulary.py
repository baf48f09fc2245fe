"""The names a model specification may use and the error it raises where it is invalid: what the
specification (:mod:`derivations.spec`) and the parser of typed attentions (:mod:`derivations.attention`)
share, so that neither imports the other to know it."""
from __future__ import annotations

#: the attentions known by name (derivations.attention); any other is an expression of the scores
BUILTIN_ATTENTIONS = ("softmax", "linear", "sigmoid")
#: the regularisers known by name (derivations.regulariser); any other is a penalty expression of w
REGULARISERS = ("ridge",)


class ModelSpecError(ValueError):
    """A model specification is invalid. ``parameter`` names the culprit."""

    def __init__(self, parameter: str, message: str):
        super().__init__(f"{parameter}: {message}")
        self.parameter = parameter
