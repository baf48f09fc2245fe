"""Channel-side expectations ``E_{xi,y}[...]`` of docs/theory.md, section 2.5, for the
two-token rank-one model, integrated with the switching surfaces of the global prox
located and split out (pre-integration).

Why this scheme (docs/numerics.md, section 3; docs/studies/channel_convergence.md):
where the global minimiser of the prox jumps between two local minima the integrands
of the conjugates jump, and a tensor rule converges slowly. We therefore

1. write the Gaussian pair ``(w, h*)`` of docs/theory.md, section 2.2 as
   ``h* = L_hh eta``, ``w = mu_w + L_wh eta + L_ww zeta`` with ``eta, zeta ~ N(0, I_2)``
   (a block Cholesky factor of the covariance read off the generated
   ``preactivations``; :mod:`~numerics.channel.lines.teacher_nodes`);
2. for each teacher node ``eta`` (a polar rule split at the pitchfork radius) find
   ``p0``, the global prox at ``w = 0``. The loss depends on ``h`` only through
   ``h h^T``, so the minima at ``w = 0`` are ``+-p0`` and the switching line passes
   through ``w = 0`` with normal ``p0``. We integrate ``zeta`` along that normal (``t``)
   and across it (``u``, Gauss-Hermite; :mod:`~numerics.channel.lines.geometry`);
3. along each line locate the switch ``t*`` where the objectives of the two
   branches cross, by Newton's method on their difference (its derivative is
   given by the envelope theorem; :mod:`~numerics.channel.lines.switches`), and integrate
   each side with Gauss-Legendre on a branch followed by continuation, so each piece
   is smooth (:mod:`~numerics.channel.lines.accumulation`).

Every node is still checked against Newton from ``w`` and from the reflected
branch; a lower objective found there is used, and its quadrature weight is
reported as ``unresolved_weight`` (an unlocated switch).

Modules: :mod:`~numerics.channel.lines.rule` (:class:`ChannelRule`, :class:`ChannelResult`),
``teacher_nodes``, ``geometry`` (the lines), ``switches``, ``band`` (the band split),
``accumulation`` and ``expectations`` (:func:`channel_expectations`, the composition, and
``update_hat_overlaps``, the channel half-step of the saddle-point iteration built from it).
Attributes are imported lazily, so that the precision table (which holds rules) does
not import scipy.
"""
_LAZY = {"ChannelRule": "rule", "ChannelResult": "rule", "channel_expectations": "expectations",
         "teacher_node_expectations": "expectations", "integrate_lines": "expectations"}

__all__ = sorted(_LAZY)


def __getattr__(name):
    if name in _LAZY:
        import importlib

        value = getattr(importlib.import_module(f".{_LAZY[name]}", __name__), name)
        globals()[name] = value
        return value
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


def __dir__():
    return sorted(set(globals()) | set(_LAZY))
