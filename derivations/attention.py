"""Attentions as data: one row of scores in, one weight out (docs/extending.md).

An attention is a SymPy expression ``f(h1, ..., hL)``: the weight that a token gives to the
token whose score is ``h1``, as a function of the scores ``h1, ..., hL`` of its row. The row
``i`` of the attention matrix of scores ``s = h h^T`` is ``S_ij = f(s_ij, s_i(j+1), ...,
s_i(j+L-1))`` (indices cyclic): the other weights follow by permuting the scores. The built-in
names are such expressions:

* ``softmax``: ``exp(beta h1) / sum_l exp(beta hl)`` (``beta`` the student's inverse temperature);
* ``linear``: ``h1``;
* ``sigmoid``: ``1 / (1 + exp(-h1))``.

Text is parsed with SymPy's parser after a tokenizer has admitted only numbers, the operators
``+ - * / ** ( ) ,``, the score symbols, ``beta`` (student only), the constants ``pi`` and ``E`` and
the functions of :data:`FUNCTIONS`; nothing else reaches the parser, so no name of Python's can be
called. The same parser (:func:`parse_expression`), given another :class:`Vocabulary`, reads a typed
regulariser (:mod:`derivations.regulariser`). Before SymPy sees the text, its syntax tree (Python's
:mod:`ast`, which evaluates nothing) is bounded (:func:`check_size`): its length, its number of
operations, its nesting, the magnitude of its numbers and of every constant exponent, so that
parsing never computes a huge power and the derivation stays small. An admitted expression must be
real, finite and twice differentiable for every real row of scores (:func:`check_real_and_finite`);
then the loss ``(sigma^2/2) |S - T|_F^2`` is a sum of squares of reals, so every prox problem is
bounded below by 0, and the prox's Newton steps have the derivatives they need.

Errors state the reason first and quote at most :data:`QUOTED` characters of the expression
(:func:`quoted`).

Code generation uses the expression in a form that doubles evaluate where the text as written
overflows (:func:`stable_form`): a quotient of exponentials ``exp(a_j) / sum_k c_k exp(a_k)`` is the
softmax of the built-in (``exp(2*h1)/(exp(2*h1) + exp(2*h2))`` is the softmax at ``beta = 2``,
generated in the same form as ``--beta 2``).
"""
from __future__ import annotations

import ast
import dataclasses
import fractions
import functools
import io
import itertools
import math
import tokenize
from typing import Tuple

from .vocabulary import BUILTIN_ATTENTIONS, ModelSpecError

#: the functions an expression may use (name in the text -> SymPy name)
FUNCTIONS = ("exp", "log", "sqrt", "tanh", "sinh", "cosh", "sin", "cos", "atan", "erf", "Abs")
CONSTANTS = ("pi", "E")
_OPERATORS = {"+", "-", "*", "/", "**", "(", ")", ","}
#: the name of the student's inverse temperature inside an expression
BETA = "beta"

#: bounds on a typed expression (:func:`check_size`): characters, operations (nodes of its syntax
#: tree), nesting (an operation inside another of another kind; a chain of sums or of products is
#: one level), the magnitude of a number, and of a constant exponent
MAX_CHARACTERS = 2000
MAX_NODES = 500
MAX_DEPTH = 24
MAX_NUMBER = 1e12
MAX_EXPONENT = 64
#: characters of an expression quoted in an error message
QUOTED = 60


def quoted(text) -> str:
    """``text`` quoted for an error message: whole when short, else its start and end around
    ``...`` with its length."""
    text = " ".join(str(text).split())
    if len(text) <= QUOTED:
        return repr(text)
    return repr(text[:QUOTED - 20] + " ... " + text[-15:]) + f" ({len(text)} characters)"


def score_symbols(L: int):
    """The scores ``h1, ..., hL`` of one row, as real SymPy symbols."""
    import sympy as sp

    return tuple(sp.Symbol(f"h{k}", real=True) for k in range(1, L + 1))


def beta_symbol():
    import sympy as sp

    return sp.Symbol(BETA, positive=True)


def builtin_expression(name: str, L: int):
    """The built-in attention ``name`` as a row expression (``softmax`` carries ``beta``)."""
    import sympy as sp

    h = score_symbols(L)
    if name == "softmax":
        b = beta_symbol()
        return sp.exp(b * h[0]) / sp.Add(*[sp.exp(b * x) for x in h])
    if name == "linear":
        return h[0]
    if name == "sigmoid":
        return 1 / (1 + sp.exp(-h[0]))
    raise ModelSpecError("attention", f"no built-in attention {name!r}; choose from {', '.join(BUILTIN_ATTENTIONS)}")


@dataclasses.dataclass(frozen=True)
class Vocabulary:
    """What a typed expression may name besides numbers, the operators, the constants :data:`CONSTANTS`
    and the functions :data:`FUNCTIONS`, and what its errors call it: one parser
    (:func:`parse_expression`) for attentions and regularisers (:mod:`derivations.regulariser`)."""

    noun: str                                   # "an attention": "too long to be an attention"
    symbols: Tuple[Tuple[str, object], ...]     # (name in the text, its SymPy symbol)
    listed: str                                 # the symbols as an error lists them
    scale: str = "an attention's weights are of order one"   # why a huge number is refused
    aliases: Tuple[Tuple[str, str], ...] = ()   # (another spelling, a name of FUNCTIONS): "abs" for "Abs"

    def names(self) -> Tuple[str, ...]:
        return tuple(n for n, _ in self.symbols) + FUNCTIONS + tuple(a for a, _ in self.aliases) + CONSTANTS

    def described(self) -> str:
        return f"{self.listed}, the constants pi, E and the functions {', '.join(FUNCTIONS)}"


@functools.lru_cache(maxsize=64)
def attention_vocabulary(L: int, role: str) -> Vocabulary:
    """The scores ``h1, ..., hL`` and, for the student (``role`` ``attention``), ``beta``."""
    symbols = tuple((f"h{k}", s) for k, s in enumerate(score_symbols(L), 1))
    if role == "attention":
        symbols += ((BETA, beta_symbol()),)
    scores = "h1, h2" if L == 2 else f"h1, ..., h{L}"
    return Vocabulary("an attention", symbols, f"the scores {scores}" + (", beta" if role == "attention" else ""))


def _tokens_admitted(text: str, vocabulary: Vocabulary, role: str) -> None:
    """Refuse any token other than numbers, the operators and the admitted names (module docstring)."""
    allowed = set(vocabulary.names())
    try:
        tokens = list(tokenize.generate_tokens(io.StringIO(text).readline))
    except (tokenize.TokenError, IndentationError, SyntaxError) as exc:
        raise ModelSpecError(role, f"cannot parse ({exc.args[0]}): {quoted(text)}") from None
    for tok in tokens:
        if tok.type in (tokenize.NEWLINE, tokenize.NL, tokenize.ENDMARKER, tokenize.INDENT, tokenize.DEDENT):
            continue
        if tok.type == tokenize.ERRORTOKEN and not tok.string.strip():  # the blank before a bad character
            continue
        if tok.type == tokenize.NUMBER and not tok.string.lower().endswith("j") and "_" not in tok.string:
            continue
        if tok.type == tokenize.OP and tok.string in _OPERATORS:
            continue
        if tok.type == tokenize.NAME and tok.string in allowed:
            continue
        if tok.type == tokenize.NAME:
            raise ModelSpecError(role, f"unknown symbol {quoted(tok.string)} in {quoted(text)}; {vocabulary.noun} "
                                       f"may use {vocabulary.described()}")
        raise ModelSpecError(role, f"cannot parse: {quoted(tok.string)} is not allowed (numbers, + - * / ** ( ) "
                                   f"and {vocabulary.described()}): {quoted(text)}")


_KIND = {ast.Add: "sum", ast.Sub: "sum", ast.Mult: "product", ast.Div: "product", ast.Pow: "power"}


def _log10(x: "fractions.Fraction") -> float:
    return math.log10(abs(x.numerator)) - math.log10(x.denominator)


def _arithmetic(op, left, right):
    """``left op right`` of two exact numbers (fractions), None where it is not a rational number."""
    try:
        if isinstance(op, ast.Add):
            return left + right
        if isinstance(op, ast.Sub):
            return left - right
        if isinstance(op, ast.Mult):
            return left * right
        if isinstance(op, ast.Div):
            return left / right
        return left ** right.numerator if right.denominator == 1 else None
    except ZeroDivisionError:  # SymPy's parser makes it zoo, which check_real_and_finite refuses
        return None


def check_size(text: str, role: str, vocabulary: Vocabulary) -> None:
    """Refuse, before SymPy parses it, a text (its length is checked before) that holds too many
    operations, nests too deep, or writes a number (or a power of numbers) beyond :data:`MAX_NUMBER`
    or a constant exponent beyond :data:`MAX_EXPONENT` in magnitude (module docstring). Reads
    Python's syntax tree of the text, which evaluates nothing; the numbers are computed exactly on
    the way up (as SymPy will) and every power is bounded before it is taken, so that ``10**10**10``
    costs no more than ``10**10``. A number's root of a degree above :data:`MAX_EXPONENT` is refused
    too (SymPy would search for it exactly)."""
    try:
        tree = ast.parse(text.strip(), mode="eval")
    except (SyntaxError, ValueError, RecursionError, MemoryError) as exc:
        reason = exc.msg if isinstance(exc, SyntaxError) else type(exc).__name__
        raise ModelSpecError(role, f"cannot parse ({reason.split(' - ')[0]}): {quoted(text)}") from None
    nodes = sum(1 for _ in ast.walk(tree))
    if nodes > MAX_NODES:
        raise ModelSpecError(role, f"too many operations to be {vocabulary.noun} ({nodes} nodes, at most {MAX_NODES}): "
                                   f"{quoted(text)}")

    def refuse(why: str):
        raise ModelSpecError(role, f"{why}: {quoted(text)}")

    def visit(node, depth: int, kind):
        """``node``'s value when it is a number (a double; else None), after checking its subtree."""
        if depth > MAX_DEPTH:
            refuse(f"nested too deep to be {vocabulary.noun} (more than {MAX_DEPTH} levels)")
        if isinstance(node, ast.Constant):
            if not isinstance(node.value, (int, float)):
                return None
            written = ast.get_source_segment(text.strip(), node) or repr(node.value)
            try:
                size = abs(float(node.value))
            except OverflowError:
                size = math.inf
            if not size <= MAX_NUMBER:
                refuse(f"the number {quoted(written)} exceeds {MAX_NUMBER:g} in magnitude ({vocabulary.scale})")
            # the decimal as written, as SymPy's parser reads it (rationalize)
            return fractions.Fraction(written) if isinstance(node.value, float) else fractions.Fraction(node.value)
        if isinstance(node, ast.UnaryOp):
            value = visit(node.operand, depth + (kind != "unary"), "unary")
            return None if value is None else (-value if isinstance(node.op, ast.USub) else value)
        if isinstance(node, ast.BinOp):
            here = _KIND.get(type(node.op), "power")
            step = depth + (kind != here or here == "power")  # a chain of sums (or products) is one level
            left, right = visit(node.left, step, here), visit(node.right, step, here)
            if here == "power" and right is not None:
                if not abs(right) <= MAX_EXPONENT:
                    refuse(f"the exponent {_shown(right)} exceeds {MAX_EXPONENT} in magnitude")
                if left is not None and right.denominator > MAX_EXPONENT:
                    # SymPy would look for an exact root of that degree (1e-3**(1/1e12) takes minutes)
                    refuse(f"a number raised to {_shown(right)}, a root of degree {_shown(right.denominator)} (at "
                           f"most {MAX_EXPONENT}; write 2**(1/3), not 2**0.3333)")
                if left and float(right) * _log10(left) > math.log10(MAX_NUMBER):
                    refuse(f"a power of numbers exceeds {MAX_NUMBER:g} in magnitude ({vocabulary.scale})")
            if left is None or right is None:
                return None
            return _arithmetic(node.op, left, right)
        for child in ast.iter_child_nodes(node):  # calls, names, tuples: SymPy's parser decides
            visit(child, depth + 1, "call" if isinstance(node, ast.Call) else None)
        return None

    visit(tree.body, 0, None)


def _shown(value) -> str:
    try:
        return f"{float(value):.6g}"
    except OverflowError:
        return "beyond 1e308"


def parse_expression(text: str, vocabulary: Vocabulary, role: str):
    """The SymPy expression of ``text``, which may name only what ``vocabulary`` admits (module
    docstring), its floats as the exact decimals written: its length, tokens and syntax tree are
    checked before SymPy's parser sees it, and the parser gets no builtins. Errors are one-line
    :class:`ModelSpecError` naming ``role``."""
    import sympy as sp
    from sympy.parsing.sympy_parser import parse_expr, rationalize, standard_transformations

    if len(text) > MAX_CHARACTERS:  # before tokenizing it
        raise ModelSpecError(role, f"too long to be {vocabulary.noun} ({len(text)} characters, at most "
                                   f"{MAX_CHARACTERS}): {quoted(text)}")
    _tokens_admitted(text, vocabulary, role)
    check_size(text, role, vocabulary)
    names = dict(vocabulary.symbols)
    names.update({f: getattr(sp, f) for f in FUNCTIONS})
    names.update({a: getattr(sp, f) for a, f in vocabulary.aliases})
    names.update(pi=sp.pi, E=sp.E)
    # the parser's own names (Integer, Float, Rational, Symbol) only: no builtins
    glob = {"__builtins__": {}, "Integer": sp.Integer, "Float": sp.Float, "Rational": sp.Rational,
            "Symbol": sp.Symbol}
    try:
        expr = parse_expr(text, local_dict=names, global_dict=glob,
                          transformations=standard_transformations + (rationalize,))
    except Exception as exc:  # the parser raises SyntaxError, TypeError, TokenError, ...
        raise ModelSpecError(role, f"cannot parse ({type(exc).__name__}: {quoted(exc)}): {quoted(text)}") from None
    # a tuple ("h1,") or a comparison parses, but is no expression to make exact or differentiate
    if not isinstance(expr, sp.Expr) or isinstance(expr, sp.core.relational.Relational):
        raise ModelSpecError(role, f"not an expression of {vocabulary.listed}: {quoted(text)}")
    return _exact(expr)


def _exact(expr):
    """Floats written as the exact decimal the user meant (the mpmath backend keeps full precision)."""
    import sympy as sp

    return expr.xreplace({f: sp.Rational(repr(float(f))) for f in expr.atoms(sp.Float)})


def from_sympy(expr, vocabulary: Vocabulary, role: str):
    """A SymPy expression given directly: its symbols renamed to the vocabulary's by name, its
    functions and size checked (:func:`check_size`'s bounds), floats made exact."""
    import sympy as sp

    if not isinstance(expr, sp.Expr):
        raise ModelSpecError(role, f"must be a name, a text expression or a SymPy expression, got {expr!r}")
    ours = dict(vocabulary.symbols)
    unknown = sorted(s.name for s in expr.free_symbols if s.name not in ours)
    if unknown:
        raise ModelSpecError(role, f"unknown symbol {unknown[0]!r} in {expr}; {vocabulary.noun} may use "
                                   f"{vocabulary.described()}")
    functions = {type(f).__name__ for f in expr.atoms(sp.Function)}
    foreign = sorted(functions - set(FUNCTIONS))
    if foreign:
        raise ModelSpecError(role, f"unknown function {foreign[0]!r} in {expr}; {vocabulary.noun} may use "
                                   f"{vocabulary.described()}")
    _check_tree(expr, role, vocabulary)
    return _exact(expr.xreplace({s: ours[s.name] for s in expr.free_symbols}))


def _check_tree(expr, role: str, vocabulary: Vocabulary) -> None:
    """The bounds of :func:`check_size` on a SymPy expression given directly: operations, numbers
    and constant exponents."""
    import sympy as sp

    def refuse(why: str):
        raise ModelSpecError(role, f"{why}: {quoted(sp.sstr(expr))}")

    for count, e in enumerate(sp.preorder_traversal(expr), 1):
        if count > MAX_NODES:
            refuse(f"too many operations to be {vocabulary.noun} (more than {MAX_NODES} nodes)")
        if isinstance(e, sp.Pow) and e.exp.is_number and not abs(e.exp) <= MAX_EXPONENT:
            refuse(f"an exponent exceeds {MAX_EXPONENT} in magnitude")
        if isinstance(e, sp.Number) and not abs(e) <= MAX_NUMBER:
            refuse(f"a number exceeds {MAX_NUMBER:g} in magnitude ({vocabulary.scale})")


# sample rows of scores for the finiteness check: structured points where denominators and
# logarithms typically vanish (zeros, equal scores, small integers), then pseudo-random ones
_STRUCTURED = (0, 1, -1, 2, -2, 0.5, -0.5, 3, -3, 10, -10)
_SCALES = (0.1, 1.0, 4.0, 20.0)


def _sample_rows(L: int):
    import numpy as np

    rows = [tuple(p) for p in itertools.product(_STRUCTURED[:5], repeat=L)] if L <= 3 else []
    rows += [tuple([v] * L) for v in _STRUCTURED]
    rng = np.random.default_rng(12345)
    for scale in _SCALES:
        rows += [tuple(float(x) for x in scale * rng.standard_normal(L)) for _ in range(40)]
    return rows


#: the lines along which denominators, logarithms and roots are searched for a zero or a negative
#: value (:func:`_domain_problem`): each score over this grid, dense near 0 and reaching +-1000,
#: through the rows of :func:`_line_rows`
_LINE = None


def _line_grid():
    import numpy as np

    global _LINE
    if _LINE is None:
        _LINE = np.sinh(np.linspace(-math.asinh(1000.0), math.asinh(1000.0), 4001))
    return _LINE


def _line_rows(L: int):
    rows = _sample_rows(L)
    structured = len(rows) - 40 * len(_SCALES)
    return rows[:structured] + rows[structured:structured + 10]


def _where(row) -> str:
    return ", ".join(f"h{k}={x:.4g}" for k, x in enumerate(row, 1))


def _evaluate(f, row):
    """``(value, problem)`` of ``f`` at ``row`` in doubles: the problem is ``None``, ``"overflows"``,
    ``"not real"`` or ``"not finite"``."""
    import numpy as np

    args = [np.float64(x) for x in row]
    try:
        with np.errstate(all="raise", under="ignore"):
            value = f(*args)
            value = complex(value) if isinstance(value, complex) else float(value)
    except FloatingPointError as exc:
        if "overflow" in str(exc):
            return None, "overflows"
        if "divide" in str(exc):
            return None, "not finite"
        with np.errstate(all="ignore"):  # an invalid value: a root or logarithm of a negative number?
            try:
                value = complex(f(*[complex(x) for x in row]))
            except (ValueError, TypeError, ZeroDivisionError, OverflowError):
                return None, "not finite"
        complex_valued = math.isfinite(abs(value)) and abs(value.imag) > 1e-12 * abs(value)
        return None, "not real" if complex_valued else "not finite"
    except OverflowError:
        return None, "overflows"
    except (ZeroDivisionError, ValueError):
        return None, "not finite"
    if isinstance(value, complex):
        return None, "not real"
    return value, None if math.isfinite(value) else "not finite"


_PROBLEMS = {
    "overflows": "overflows double precision (the generated code computes in doubles)",
    "not real": "not real",
    "not finite": "not finite",
}


def _domain_conditions(expr):
    """``(kind, u)``: the subexpressions that must not vanish (``"denominator"``: the base of a
    negative power) or must be positive (``"logarithm"``: an argument of ``log``; ``"root"``: the
    base of a fractional power), for ``expr`` to be real and finite."""
    import sympy as sp

    out = []
    for e in sp.preorder_traversal(expr):
        if isinstance(e, sp.Pow) and e.exp.is_number and e.base.free_symbols:
            if e.exp.is_negative:
                out.append(("denominator", e.base))
            if not e.exp.is_integer:
                out.append(("root", e.base))
        elif isinstance(e, sp.log) and e.args[0].free_symbols:
            out.append(("logarithm", e.args[0]))
    return list(dict.fromkeys(out))


def _domain_problem(condition, h, rows) -> tuple:
    """Along each score through ``rows`` (:func:`_line_grid`): where a denominator changes sign or
    vanishes between nonzero values (a pole), or a logarithm's or root's argument is negative
    (not real). ``(what, row)`` of the first found, else ``None``."""
    import numpy as np
    import sympy as sp

    kind, u = condition
    g = sp.lambdify(h, u, modules=["scipy", "numpy"])
    grid = _line_grid()
    for row in rows:
        for k in range(len(h)):
            args = [grid if j == k else np.full_like(grid, x) for j, x in enumerate(row)]
            with np.errstate(all="ignore"):
                v = np.broadcast_to(np.asarray(g(*args), dtype=complex), grid.shape)
            if np.any(np.abs(v.imag) > 1e-12 * np.abs(v)):
                i = int(np.argmax(np.abs(v.imag) > 1e-12 * np.abs(v)))
                return "not real", tuple(grid[i] if j == k else x for j, x in enumerate(row))
            v = v.real
            if kind == "denominator":
                sign = np.sign(v)
                change = (sign[:-1] * sign[1:] < 0) & np.isfinite(v[:-1]) & np.isfinite(v[1:])
                isolated = np.zeros_like(change)
                isolated[:-1] |= (v[1:-1] == 0) & (v[:-2] != 0) & (v[2:] != 0)
                at = ((grid[:-1] + grid[1:]) / 2)[change | isolated]
            else:
                at = grid[v < 0]
            if at.size:  # the one nearest the origin
                x = at[np.argmin(np.abs(at))]
                return "pole" if kind == "denominator" else "not real", tuple(
                    x if j == k else y for j, y in enumerate(row))
    return None


def check_real_and_finite(expr, L: int, role: str, text: str) -> None:
    """Refuse an attention that is not real, finite and twice differentiable on the real row of scores.

    * As written: no infinity or undefined value (``h1/0``, ``log(0)``).
    * In doubles, as the generated code computes it, the expression and its first derivatives at
      :func:`_sample_rows` (structured rows where denominators and logarithms typically vanish, and
      pseudo-random ones of scales 0.1 to 20): real, finite, no overflow.
    * Its second derivatives (the prox's Newton steps need them) exist: no kink (``Abs`` of an
      argument that vanishes).
    * Along each score through :func:`_line_rows`, over +-1000 (:func:`_line_grid`): no denominator
      changes sign or vanishes (a pole off the sample rows, ``1/(exp(h1) - 2)``), no logarithm or
      root of a negative number; every polynomial denominator has no real root there (exact).

    A complex value, as ``sqrt`` or ``log`` of a negative score give, would make the squared loss
    complex and the prox problem unbounded below."""
    import sympy as sp

    def refuse(why: str):
        raise ModelSpecError(role, f"{why}: {quoted(text)}")

    if expr.has(sp.zoo, sp.oo, -sp.oo, sp.nan):
        refuse("infinite or undefined as written (a division by zero or a log(0))")
    h = score_symbols(L)
    e1 = expr.xreplace({beta_symbol(): sp.Integer(1)})
    rows = _sample_rows(L)
    why = "an attention must be real and finite for every real row of scores"
    f = sp.lambdify(h, e1, modules=["scipy", "numpy"])
    for row in rows:
        _, problem = _evaluate(f, row)
        if problem:
            refuse(f"{_PROBLEMS[problem]} at {_where(row)} ({why})")
    for x in h:
        if not e1.has(x):
            continue
        derivative = sp.diff(e1, x)
        df = sp.lambdify(h, derivative, modules=["scipy", "numpy"])
        for row in rows:
            _, problem = _evaluate(df, row)
            if problem:
                refuse(f"its derivative in {x} is {_PROBLEMS[problem]} at {_where(row)} (the prox needs the "
                       f"first and second derivatives of an attention)")
        for y in h[h.index(x):]:
            kinks = sp.diff(derivative, y).atoms(sp.DiracDelta)
            if kinks:
                where = sorted(sp.sstr(k.args[0]) for k in kinks)[0]
                refuse(f"not twice differentiable: a kink where {where} = 0 (an Abs of an argument that vanishes; "
                       f"the prox's Newton steps need second derivatives)")
    lines = _line_rows(L)
    for condition in _domain_conditions(e1):
        found = _domain_problem(condition, h, lines)
        if found:
            what, row = found
            u = quoted(sp.sstr(condition[1]))
            if what == "pole":
                refuse(f"has a pole: the denominator {u} vanishes near {_where(row)} (an attention must be finite "
                       f"for every real row of scores)")
            refuse(f"not real near {_where(row)}: the {condition[0]} argument {u} is negative there ({why})")
    _, den = sp.fraction(sp.together(e1))
    if den.is_polynomial(*h) and den.free_symbols:
        for row in rows[:50]:
            for k, x in enumerate(h):
                line = sp.Poly(den.subs({y: sp.Rational(repr(float(v))) for y, v in zip(h, row) if y != x}), x)
                if line.degree() > 0 and line.count_roots() > 0:
                    root = float(sp.real_roots(line)[0].evalf(6))
                    at = tuple(root if j == k else v for j, v in enumerate(row))
                    refuse(f"has a pole: the denominator {quoted(sp.sstr(den))} vanishes at {_where(at)} (an "
                           f"attention must be finite for every real row of scores)")


@functools.lru_cache(maxsize=256)
def canonical(value, L: int, role: str) -> Tuple[str, object]:
    """``(text, expression)``: the canonical text stored in a :class:`~derivations.spec.ModelSpec`
    (a built-in name, or the expression's ``sympy.sstr``) and the row expression. ``role`` is
    ``attention`` (the student's, may use ``beta``) or ``teacher``."""
    if isinstance(value, str) and value.strip() in BUILTIN_ATTENTIONS:
        return value.strip(), builtin_expression(value.strip(), L)
    if isinstance(value, str):
        if not value.strip():
            raise ModelSpecError(role, "is empty; give a built-in name "
                                       f"({', '.join(BUILTIN_ATTENTIONS)}) or an expression of the scores")
        expr = parse_expression(value, attention_vocabulary(L, role), role)
        text = value
    else:
        expr = from_sympy(value, attention_vocabulary(L, role), role)
        text = str(value)
    import sympy as sp

    if not isinstance(expr, sp.Expr) or isinstance(expr, sp.core.relational.Relational):
        raise ModelSpecError(role, f"not an expression of the scores: {quoted(text)}")
    if not expr.free_symbols & set(score_symbols(L)):
        raise ModelSpecError(role, f"does not depend on the scores {'h1, h2' if L == 2 else f'h1, ..., h{L}'}: "
                                   f"{quoted(text)}")
    check_real_and_finite(stable_form(expr, score_symbols(L)), L, role, text)
    return sp.sstr(expr, full_prec=True), expr


def row_expression(text: str, L: int, role: str, beta: float = 1.0):
    """The row expression of a canonical attention ``text``, with ``beta`` (the student's inverse
    temperature) substituted as the exact decimal."""
    import sympy as sp

    expr = canonical(text, L, role)[1]
    return expr.xreplace({beta_symbol(): sp.Rational(repr(float(beta)))}) if role == "attention" else expr


def uses_beta(text: str, L: int) -> bool:
    return canonical(text, L, "attention")[1].has(beta_symbol())


def _exponential_terms(expr, h):
    """``[(c_k, b_k)]`` with ``expr = sum_k c_k exp(b_k)``, each ``c_k`` a positive number (``b_k = 0``
    for a constant term), or None when ``expr`` is not such a sum."""
    import sympy as sp

    terms = []
    for term in sp.Add.make_args(expr):
        c, rest = term.as_independent(*h, as_Add=False)
        rest = sp.powsimp(rest, combine="exp")  # exp(a) exp(b) = exp(a + b)
        if not (c.is_number and c.is_positive is True):
            return None
        if rest == 1:
            terms.append((c, sp.Integer(0)))
        elif isinstance(rest, sp.exp):
            terms.append((c, rest.args[0]))
        else:
            return None
    return terms


def _softmax_quotient(e, h):
    """``(K, j, s)`` with ``e = K Softmax_j(s) = K exp(s_j) / sum_k exp(s_k)`` when ``e`` is a quotient
    ``K c_j exp(a) / sum_k c_k exp(b_k)`` with ``b_j = a`` (``s_k = b_k + log c_k``), else None."""
    import sympy as sp

    if isinstance(e, sp.Pow):
        factors = [e]
    elif isinstance(e, sp.Mul):
        factors = list(e.args)
    else:
        return None
    below = [f for f in factors if isinstance(f, sp.Pow) and f.exp == -1 and isinstance(f.base, sp.Add)]
    if len(below) != 1:
        return None
    top = _exponential_terms(sp.Mul(*[f for f in factors if f is not below[0]]), h)
    bottom = _exponential_terms(below[0].base, h)
    if top is None or len(top) != 1 or bottom is None or len(bottom) < 2:
        return None
    (K, a), = top
    for j, (c, b) in enumerate(bottom):
        if sp.expand(b - a) == 0:
            return K / c, j, [b if c == 1 else b + sp.log(c) for c, b in bottom]
    return None


def stable_form(expr, h, logistic: bool = False):
    """``expr`` with every quotient of exponentials ``K exp(s_j) / sum_k exp(s_k)`` (:func:`_softmax_quotient`)
    written as the built-in softmax is (:func:`derivations.model.softmax_rows`): ``K / sum_k exp(s_k - s_j)``,
    which doubles evaluate where ``inf/inf`` would not, or with ``logistic`` the opaque
    :class:`~derivations.model.Logistic` (two terms) or :class:`~derivations.model.Softmax` values that
    code generation differentiates. Equal expressions; the softmax typed at ``beta = 2``,
    ``exp(2*h1)/(exp(2*h1) + exp(2*h2))``, becomes the built-in's form at ``--beta 2``."""
    import sympy as sp

    from .model import Logistic, Softmax

    def rewrite(e):  # from the top: the largest quotient is the softmax, not a factor of it
        found = _softmax_quotient(e, h)
        if found is None:
            return e.func(*[rewrite(a) for a in e.args]) if e.args else e
        K, j, s = found
        s = [rewrite(x) for x in s]
        if logistic and len(s) == 2:
            return K * Logistic(s[j] - s[1 - j])
        if logistic:
            return K * Softmax(j, *s)
        return K / sp.Add(*[sp.exp(x - s[j]) for x in s])

    return rewrite(expr)


def attention_rows(text: str, scores, role: str, beta: float = 1.0, logistic: bool = False):
    """The ``n x L`` matrix ``S_ij = f(s_ij, s_i(j+1), ...)`` (cyclic) of the row expression ``f`` of
    ``text`` applied to the rows of ``scores`` (a SymPy matrix), in the form of :func:`stable_form`
    (``logistic``: with opaque logistic and softmax values)."""
    import sympy as sp

    n, L = scores.shape
    h = score_symbols(L)
    f = stable_form(row_expression(text, L, role, beta), h, logistic)
    return sp.Matrix(n, L, lambda i, j: f.xreplace({h[k]: scores[i, (j + k) % L] for k in range(L)}))


def canonical_form(text: str, L: int, role: str, beta: float = 1.0) -> str:
    """``sympy.srepr`` of the row expression: the canonical form that keys generated code."""
    import sympy as sp

    return sp.srepr(row_expression(text, L, role, beta))


def is_builtin(text: str) -> bool:
    return text in BUILTIN_ATTENTIONS


def check_beta(beta) -> float:
    if isinstance(beta, bool) or not isinstance(beta, (int, float)) or not math.isfinite(beta) or beta <= 0:
        raise ModelSpecError("beta", f"must be a finite number > 0, got {beta!r}")
    return float(beta)
