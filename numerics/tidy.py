"""Deprecated: the tidy CSV/JSON writing is :mod:`tidyio`, at the bottom of the layering. This name
stays for the modules that still import it while they move."""
from tidyio import *  # noqa: F401,F403
from tidyio import NULL_REASONS, ROW_CHECK  # noqa: F401
