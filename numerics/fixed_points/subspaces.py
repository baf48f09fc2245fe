"""Branches of the general model as invariant subspaces of sign flips (docs/theory.md, section 4.10).

The loss is invariant under flipping the sign of any student direction (column ``j`` of ``h``, sign
``s_j``) and of any teacher direction (column ``c`` of ``h*``, sign ``s*_c``). The saddle-point map
is equivariant under each flip ``(s, s*)``, so the order parameters left unchanged by a set of
flips form an invariant subspace. A flip multiplies ``q_jk`` and ``V_jk`` by ``s_j s_k``, the column
``m_.j`` by ``s_j`` and ``theta_jc`` by ``s_j s*_c`` (the conjugates alike).

A branch gives each student direction a role:

* ``semantic``: the ``i``-th semantic direction overlaps the ``i``-th teacher direction only
  (``theta_jc`` free for that ``c``), ``m_.j = 0``;
* ``positional``: ``m_.j`` free, ``theta_j. = 0``;
* ``trivial``: ``m_.j = 0`` and ``theta_j. = 0``;

and directions are decoupled (``q_jk = V_jk = 0``) unless they are both positional or both trivial.
This is the subspace fixed by the flips that leave every one of its points unchanged
(:meth:`BranchSubspace.symmetries`; the constructor checks that it is exactly their fixed
subspace, hence invariant). ``theta`` being diagonal is no restriction: every ``theta`` is diagonal
in some gauge (its singular value decomposition, docs/theory.md, section 4.9); the decoupling is
one (a solution of the symmetric kind). Named branches, for a student of rank ``r``, a teacher of
rank ``t`` and ``k`` positional directions:

* ``semantic``: ``min(r, t)`` semantic directions, the others trivial;
* ``positional``: ``min(r, k)`` positional directions, the others trivial;
* ``trivial``: every direction trivial;
* ``mixed`` (``r >= 2``): direction 1 semantic, direction 2 positional, the others trivial.

At ``r = 1`` these are the branches of docs/theory.md, section 3.1. Rotations among the positional
directions, and among the trivial ones, keep the subspace (:meth:`BranchSubspace.gauge_blocks`);
any subspace of roles can be asked for (:func:`subspace_of_roles`).
"""
from __future__ import annotations

import dataclasses
import itertools
from typing import Tuple

import numpy as np

from derivations import packing

from numerics.matrix_overlaps import MatrixOverlaps
from numerics.overlaps import BRANCHES, COMPETING_BRANCHES

#: the branches of the general model; ``mixed`` (one direction of each informed branch) needs a
#: student of rank >= 2
GENERAL_BRANCHES = BRANCHES + ("mixed",)
#: what one student direction does
ROLES = BRANCHES


@dataclasses.dataclass(frozen=True)
class BranchSubspace:
    """The subspace where student direction ``j`` has the role ``roles[j]`` (module docstring)."""

    name: str
    roles: Tuple[str, ...]
    #: nothing imposed: every component free, no symmetry, one gauge block (for checks at generic points)
    free: bool = False

    def __post_init__(self):
        unknown = set(self.roles) - set(ROLES)
        if unknown:
            raise ValueError(f"roles: unknown {sorted(unknown)}; choose from {', '.join(ROLES)}")

    @property
    def r(self) -> int:
        return len(self.roles)

    @property
    def semantic_count(self) -> int:
        return sum(role == "semantic" for role in self.roles)

    def _mask(self, role: str) -> np.ndarray:
        return np.array([x == role for x in self.roles])

    def teacher_of(self) -> Tuple[int, ...]:
        """The teacher direction of each student direction (``-1`` for those not semantic)."""
        out, i = [], 0
        for role in self.roles:
            out.append(i if role == "semantic" else -1)
            i += role == "semantic"
        return tuple(out)

    def zero_pattern(self, name: str, shape) -> np.ndarray:
        """Boolean matrix of the components of ``name`` (an order parameter or conjugate) imposed zero."""
        base = name.replace("hat", "")
        rows, cols = packing.dimensions(base, shape)[:2]
        if self.free:
            return np.zeros((rows, cols), dtype=bool)
        roles = np.array(self.roles)
        if base in ("q", "V"):
            same = roles[:, None] == roles[None, :]
            semantic = roles == "semantic"
            return ~same | ((semantic[:, None] | semantic[None, :]) & ~np.eye(self.r, dtype=bool))
        if base == "m":
            return np.broadcast_to(~self._mask("positional")[None, :], (rows, cols)).copy()
        teacher = np.array(self.teacher_of())
        return teacher[:, None] != np.arange(cols)[None, :]

    def free_mask(self, shape, names=packing.OVERLAPS) -> np.ndarray:
        """Which components of the flat vector of ``names`` (packing order) are free."""
        out = []
        for name in names:
            rows, cols, sym = packing.dimensions(name, shape)
            zero = self.zero_pattern(name, shape)
            out += [not zero[i, j] for i, j in packing.matrix_index(rows, cols, sym)]
        return np.array(out, dtype=bool)

    def project(self, record):
        """``record`` (overlaps or conjugates) with the imposed components set to zero exactly."""
        out = {name: np.where(self.zero_pattern(name, record.shape), 0.0, value)
               for name, value in record.matrices().items()}
        return type(record)(record.shape, **out)

    def check(self, shape) -> None:
        """Raise ``ValueError`` unless the subspace fits ``shape`` and is exactly the fixed subspace of
        :meth:`symmetries` (hence invariant under the map)."""
        if len(self.roles) != packing.as_shape(shape).r:
            raise ValueError(f"roles: {len(self.roles)} roles for a student of rank {packing.as_shape(shape).r}")
        if self.semantic_count > packing.as_shape(shape).t:
            raise ValueError(f"roles: {self.semantic_count} semantic directions for a teacher of rank "
                             f"{packing.as_shape(shape).t}")
        fixed = np.ones(len(self.free_mask(shape)), dtype=bool)
        for flip in self.symmetries(shape):
            fixed &= self.characters(flip, shape) == 1
        if not np.array_equal(fixed, self.free_mask(shape)):
            raise ValueError(f"roles: {self.roles} do not define the fixed subspace of a set of sign flips")

    def characters(self, flip, shape, names=packing.OVERLAPS) -> np.ndarray:
        """The sign each component of the flat vector of ``names`` takes under ``flip = (s, s*)``."""
        s, ts = (np.asarray(x, dtype=float) for x in flip)
        out = []
        for name in names:
            base = name.replace("hat", "")
            rows, cols, sym = packing.dimensions(name, shape)
            for i, j in packing.matrix_index(rows, cols, sym):
                out.append(s[i] * s[j] if base in ("q", "V") else s[j] if base == "m" else s[i] * ts[j])
        return np.array(out)

    def symmetries(self, shape) -> Tuple[Tuple[Tuple[int, ...], Tuple[int, ...]], ...]:
        """Every flip ``(s, s*)`` other than the identity under which each free component has the
        character ``+1`` (``s`` over the student directions, ``s*`` over the teacher's)."""
        t = packing.as_shape(shape).t
        free = self.free_mask(shape)
        out = []
        if self.free:
            return ()
        for signs in itertools.product((1, -1), repeat=self.r + t):
            if all(x == 1 for x in signs):
                continue
            flip = (tuple(signs[:self.r]), tuple(signs[self.r:]))
            if np.all(self.characters(flip, shape)[free] == 1):
                out.append(flip)
        return tuple(out)

    def gauge_blocks(self) -> Tuple[Tuple[int, ...], ...]:
        """Groups of student directions that rotations may mix without leaving the subspace: the
        positional ones, the trivial ones, and each semantic one alone (its sign only); the gauge is
        fixed group by group (:mod:`numerics.fixed_points.gauge`)."""
        if self.free:
            return (tuple(range(self.r)),)
        blocks = [(j,) for j, role in enumerate(self.roles) if role == "semantic"]
        for role in ("positional", "trivial"):
            group = tuple(j for j, x in enumerate(self.roles) if x == role)
            if group:
                blocks.append(group)
        return tuple(blocks)

    def isotropic_blocks(self) -> Tuple[Tuple[int, ...], ...]:
        """The blocks of two or more trivial directions: rotations among them are a symmetry of the
        map on the subspace (the loss sees ``h`` only through inner products, and the trivial
        directions carry no ``m`` or ``theta``), so the points they leave unchanged, ``q`` and
        ``V`` multiples of the identity on the block, form an invariant subspace."""
        if self.free:
            return ()
        group = tuple(j for j, x in enumerate(self.roles) if x == "trivial")
        return (group,) if len(group) >= 2 else ()

    def isotropic(self, record):
        """``record`` (overlaps or conjugates) averaged over the rotations of each block of
        :meth:`isotropic_blocks`: on the block, each symmetric ``r x r`` matrix becomes its mean
        diagonal entry times the identity (the other matrices vanish there on the subspace)."""
        blocks = self.isotropic_blocks()
        if not blocks:
            return record
        out = {}
        for name, value in record.matrices().items():
            value = np.array(value)
            if packing.ORDER_PARAMETERS[name] == ("r", "r", True):
                for b in blocks:
                    ix = np.ix_(b, b)
                    value[ix] = np.trace(value[ix]) / len(b) * np.eye(len(b))
            out[name] = value
        return type(record)(record.shape, **out)

    def defining_overlap(self, ov: MatrixOverlaps, sigma: float) -> float:
        """The overlap that vanishes where the branch merges with a smaller one: the smallest of the
        largest singular value of ``theta / sigma^2`` over the semantic directions and of ``m`` over
        the positional ones; ``inf`` with neither (nothing to lose)."""
        values = []
        if self._mask("semantic").any():
            values.append(float(np.linalg.norm(ov.theta[self._mask("semantic")], 2)) / sigma**2)
        if self._mask("positional").any():
            values.append(float(np.linalg.norm(ov.m[:, self._mask("positional")], 2)))
        return min(values) if values else float("inf")


def free_subspace(shape) -> BranchSubspace:
    """Every component free (no branch): for checks at generic points."""
    return BranchSubspace("free", ("trivial",) * packing.as_shape(shape).r, free=True)


def subspace_of_roles(roles, shape, name: str = "custom") -> BranchSubspace:
    """The subspace of the given per-direction roles (``semantic``, ``positional``, ``trivial``),
    checked against ``shape``."""
    subspace = BranchSubspace(name, tuple(roles))
    subspace.check(shape)
    return subspace


def branch_subspace(branch: str, shape) -> BranchSubspace:
    """The named branch (:data:`GENERAL_BRANCHES`) of a model of shape ``(L, r, t, k)``."""
    _, r, t, k = packing.as_shape(shape)
    if branch == "semantic":
        roles = ("semantic",) * min(r, t)
    elif branch == "positional":
        roles = ("positional",) * min(r, k)
    elif branch == "trivial":
        roles = ()
    elif branch == "mixed":
        if r < 2:
            raise ValueError(f"branch: the mixed branch needs a student of rank >= 2, got rank {r}")
        roles = COMPETING_BRANCHES
    else:
        raise ValueError(f"branch: unknown branch {branch!r}; choose from {', '.join(GENERAL_BRANCHES)}")
    return subspace_of_roles(roles + ("trivial",) * (r - len(roles)), shape, branch)
