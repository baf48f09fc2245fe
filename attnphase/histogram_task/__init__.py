"""The paper's histogram-task experiment (Cui, Behrens, Krzakala, Zdeborova 2024, section 1):
a one-layer transformer learns, with positional or semantic attention, how often each
token occurs in its sequence (:mod:`attnphase.histogram_task.experiment`; docs/histogram.md).

It is not a check of the theory, so it lives apart from :mod:`validation`.
"""

#: the attention of a model: queries and keys see only the semantic part of the
#: embedding, only the positional part, or both
ATTENTION_KINDS = ("only_sem", "only_pos", "both")
