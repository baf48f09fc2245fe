"""Deprecated: the tidy CSV/JSON writing is :mod:`attnphase.tidy`, at the bottom of the layering. This name
stays for the modules that still import it while they move."""
from attnphase.tidy import *  # noqa: F401,F403
from attnphase.tidy import NULL_REASONS, ROW_CHECK  # noqa: F401
