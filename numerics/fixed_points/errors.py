"""What a solve for a branch raises where it does not find the branch: it fell onto another (the
trivial point), or its iteration left the branch. Both integrators raise them; every caller above
reads them through :mod:`numerics.api`."""
from __future__ import annotations

from typing import TYPE_CHECKING, Optional

if TYPE_CHECKING:
    from numerics.result import FixedPoint


class BranchNotFound(RuntimeError):
    """A solve for a branch ended on another one (the trivial point): the branch does not
    exist there, or not from that start. ``point``: what the solve fell to, labelled as
    what it is (or ``None`` when the solve was abandoned while collapsing)."""

    def __init__(self, message: str, branch: str = "", alpha: float = float("nan"),
                 point: Optional[FixedPoint] = None):
        super().__init__(message)
        self.branch, self.alpha, self.point = branch, alpha, point


class BranchLost(BranchNotFound):
    """The iteration left the branch: its defining overlap fell below ``lost_below``."""
