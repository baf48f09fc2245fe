"""The SymPy symbols of the theory (SPEC section 2), with the names used in output.

Every generated function takes the model parameters last, in the fixed order
:data:`PARAMS` = ``(sigma, lam, omega, rho, a11, a12, a21, a22)``.  ``rho`` is a
separate argument (SPEC: ``rho = sigma**2``) so that the teacher variance can be
varied independently in checks.
"""
from __future__ import annotations

import sympy as sp

# order parameters and their conjugates
q = sp.Symbol("q", positive=True)
m = sp.Symbol("m", real=True)
V = sp.Symbol("V", positive=True)
theta = sp.Symbol("theta", real=True)
qhat = sp.Symbol("qhat", real=True)
mhat = sp.Symbol("mhat", real=True)
Vhat = sp.Symbol("Vhat", real=True)
thetahat = sp.Symbol("thetahat", real=True)

# model parameters
alpha = sp.Symbol("alpha", positive=True)
sigma = sp.Symbol("sigma", positive=True)
lam = sp.Symbol("lam", nonnegative=True)
rho = sp.Symbol("rho", positive=True)
omega = sp.Symbol("omega", real=True)
a11, a12, a21, a22 = sp.symbols("a11 a12 a21 a22", real=True)
A = sp.Matrix([[a11, a12], [a21, a22]])

#: trailing arguments of every generated function, in this order
PARAMS = (sigma, lam, omega, rho, a11, a12, a21, a22)
PARAM_NAMES = tuple(s.name for s in PARAMS)

# Gaussian quadrature variables (xi, y ~ N(0, I_2), independent)
xi1, xi2, y1, y2 = sp.symbols("xi1 xi2 y1 y2", real=True)
XI = (xi1, xi2)
Y = (y1, y2)
GAUSSIANS = (xi1, xi2, y1, y2)

# student pre-activations, prox point, teacher pre-activations
w1, w2 = sp.symbols("w1 w2", real=True)
h1, h2 = sp.symbols("h1 h2", real=True)
hs1, hs2 = sp.symbols("hs1 hs2", real=True)
W = (w1, w2)
H = (h1, h2)
HS = (hs1, hs2)

# stand-ins inside expectations: f_l = (prox_l - w_l)/V, g_l = dl/dhs_l at the prox
f1, f2, g1, g2 = sp.symbols("f1 f2 g1 g2", real=True)
F_ = (f1, f2)
G_ = (g1, g2)

#: the Moreau envelope M(w, hs; V), an undefined function of its five arguments
M = sp.Function("M")
M_ARGS = (w1, w2, hs1, hs2, V)
M_OF = M(*M_ARGS)

#: expectation over (xi, y), an unevaluated function. Not ``E`` (Euler's number
#: in ``sympify``).
Expect = sp.Function("Expect")

# auxiliary symbols of the prior (regulariser) integral; never in output
Qw = sp.Symbol("Qw", real=True)          # one coordinate of the student weights
Qstar = sp.Symbol("Qstar", real=True)    # one coordinate of the teacher weights
xi0 = sp.Symbol("xi0", real=True)        # Gaussian field of the prior term
beta = sp.Symbol("beta_", positive=True)  # inverse temperature (zero-temperature limit)

#: symbols that are random under ``Expect`` (everything else is a coefficient)
RANDOM = GAUSSIANS + F_ + G_ + W + HS + H

OVERLAPS = (q, m, V, theta)
CONJUGATES = (qhat, mhat, Vhat, thetahat)
