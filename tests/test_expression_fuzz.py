"""The attention parser under generated input: expressions drawn from the grammar of
docs/extending.md (numbers of every size, the scores, beta, the constants, the functions, the
operators, deep nesting), and text outside it. Every one ends, in bounded time, in a model or in
one ModelSpecError of one line that names the parameter; nothing else (no SymPy error, no hang,
no code run)."""
from __future__ import annotations

import signal
import time

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from derivations.attention import FUNCTIONS
from derivations.spec import ModelSpec, ModelSpecError

#: one expression may take this long at most (the slowest seen: about 0.3 s, the first one, which imports)
BOUND_S = 5.0

numbers = st.one_of(
    st.integers(min_value=0, max_value=12).map(str),
    st.floats(min_value=0, max_value=10, allow_nan=False, width=32).map(repr),
    st.sampled_from(["1e12", "1e13", "1e308", "1e999999999", "10" * 30, "3.", ".5", "7e-400", "1e-3", "1e6"]),
)
scores = st.sampled_from(["h1", "h2"])
#: scores most often, so that most expressions depend on them
atoms = st.one_of(scores, scores, scores, numbers, st.sampled_from(["beta", "pi", "E"]))


def _combine(children):
    binary = st.tuples(children, st.sampled_from(["+", "-", "*", "/", "**"]), children).map(
        lambda t: f"({t[0]} {t[1]} {t[2]})")
    call = st.tuples(st.sampled_from(FUNCTIONS), children).map(lambda t: f"{t[0]}({t[1]})")
    negate = children.map(lambda c: f"-{c}")
    return st.one_of(binary, call, negate)


expressions = st.recursive(atoms, _combine, max_leaves=40)
#: the grammar's pieces run together without structure, and outside characters
scrambled = st.lists(st.sampled_from(["h1", "h2", "(", ")", "**", "*", "/", "+", "-", "exp", "log", "9", "1e9",
                                      ",", " ", ".", "_", "'", "[", "__import__", "lambda", "j", "1j", "x"]),
                     min_size=1, max_size=30).map("".join)


class _Overran(Exception):
    pass


def _admitted_or_refused(text: str):
    """``None`` for an admitted expression, else the one line that refuses it."""
    def overran(signum, frame):
        raise _Overran(f"{text!r} ran past {BOUND_S} s")

    previous = signal.signal(signal.SIGALRM, overran)
    signal.setitimer(signal.ITIMER_REAL, BOUND_S)
    t0 = time.perf_counter()
    message = None
    try:
        ModelSpec(attention=text)
    except ModelSpecError as exc:
        message = str(exc)
        assert message.startswith("attention: ") and "\n" not in message, message
        assert len(message) < 700, message
    finally:
        signal.setitimer(signal.ITIMER_REAL, 0)
        signal.signal(signal.SIGALRM, previous)
    assert time.perf_counter() - t0 < BOUND_S
    return message


@settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.too_slow], database=None)
@given(expressions)
def test_every_expression_of_the_grammar_is_a_model_or_one_line_in_bounded_time(text):
    _admitted_or_refused(text)


@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.too_slow], database=None)
@given(scrambled)
def test_text_outside_the_grammar_is_refused_in_one_line(text):
    _admitted_or_refused(text)


@pytest.mark.parametrize("text", [
    "10**10**10", "h1*9**9**9", "h1*2**2**2**2**2**2", "h1*1e999999999", "exp(exp(exp(exp(h1))))",
    "exp(" * 15 + "h1" + ")" * 15, "1/(1+" * 30 + "h1" + ")" * 30, "1/(1+h1**1000000)", "exp(1000*h1)",
    "1/(exp(h1) - 2)", "1/sin(h1 - 0.1234)", "h1/0", "log(0)*h1", "1/Abs(h1 - 0.3)", "log(Abs(h1 - 0.3))",
    "+".join(["h1"] * 30000), "(" * 300 + "h1" + ")" * 300, "7" * 5000 + "*h1", "h1**(10**7)",
])
def test_each_expression_that_hung_or_crashed_is_refused_in_one_line(text):
    message = _admitted_or_refused(text)
    assert message is not None and len(message) < 400, message
