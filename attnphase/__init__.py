"""attnphase: the solvable model of dot-product attention, from symbols to simulations."""
__version__ = "0.1.0"
