"""Fuzzing the security boundary: the checker (``evolve.program.whitelist`` through
``parse_program``) and the compiler (``evolve.program.codegen``).

Three sources of hostile text, deterministic (``derandomize``) and fast:

* random expressions from Python's grammar (``ast`` nodes, unparsed), with names that
  reach for the interpreter (``__import__``, ``open``, ``__class__``...) and extreme
  literals (400-digit integers, 1e308, 1e-400, complex, strings, bytes);
* token soup from Python-ish fragments (keywords, brackets, operators) in a program body;
* mutations of the valid seed programs (a span replaced, deleted or duplicated).

Properties: ``parse_program`` either accepts or raises ``ProgramError`` (nothing else ever
escapes); an accepted program compiles (numpy and numba) or is a ``ProgramError`` of rule
``compile``; the code it compiles to names nothing outside the whitelist (its ``co_names``:
numpy/math functions of the language, the helpers, its own literal slots); its numpy form
runs on random features without raising.
"""

from __future__ import annotations

import ast
import contextlib
import types
from pathlib import Path

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from evaluator.api import FEATURE_NAMES
from evolve.errors import ProgramError
from evolve.program.codegen import compile_program
from evolve.program.language import parse_program
from evolve.program.whitelist import CALL_ARITY

SEEDS = sorted((Path(__file__).resolve().parents[3] / "seeds").glob("*.py"))
SEED_TEXTS = [p.read_text() for p in SEEDS]
FUZZ = settings(derandomize=True, deadline=None, database=None,
                suppress_health_check=list(HealthCheck))
ALLOWED = {"np", "math", "abs", "_maximum", "_minimum", *CALL_ARITY}
HOSTILE_NAMES = ["__import__", "open", "eval", "exec", "getattr", "globals", "os", "sys",
                 "__builtins__", "breakpoint", "type", "object", "np", "math", "F", "C",
                 "v_x", "k0", "_maximum", "x", "y", "f", "c", "r"]
ATTRS = [*FEATURE_NAMES[:6], "__class__", "__dict__", "__globals__", "system", "a", "b0_us",
         "input_tokens", "mro"]
EXTREME = [0.0, -0.0, 1.0, 0.5, 1e308, -1e308, 1e-400, 5e-324, float("inf"), float("nan"),
           10 ** 400, -(10 ** 400), 2 ** 63, 7, 1j, "s", b"b", True, None, ...]
FRAGMENTS = ["(", ")", "[", "]", "{", "}", ":", ",", ".", "+", "-", "*", "/", "**", "//",
             "%", "@", "<", ">=", "==", "!=", " and ", " or ", " not ", " if ", " else ",
             " lambda x: ", " for i in ", " in ", " is ", "yield ", "await ", "import os",
             "from os import *", "__import__('os')", "f.", "c.", "r.", "f.kv_read",
             "c.a", "9" * 400, "1e999", "1e-999", "0x10", "1_000", "'''", '"', "#", "\\",
             "\n", "\n    ", "\t", ";", "=", ":=", "return ", "del ", "global g", "def g():",
             "class K:", "with open('x') as h:", "try:", "except:", "raise ", "assert ",
             "maximum(", "where(", "clip(", "sqrt(", "log(", "exp(", "abs(", "\x00", "é",
             "\ufeff", "print(", "np.", "math.", "().__class__.__base__.__subclasses__()"]
HEAD = 'CONSTANTS = {"a": (1.0, 0.0, 10.0), "b0_us": (2.0, 0.0, 5.0)}\n\n'


def _mostly(valid: st.SearchStrategy[ast.expr], hostile: st.SearchStrategy[ast.expr],
            one_in: int = 12) -> st.SearchStrategy[ast.expr]:
    """``hostile`` one time in ``one_in``, else ``valid``."""
    return st.integers(0, one_in - 1).flatmap(lambda k: hostile if k == 0 else valid)


def _exprs() -> st.SearchStrategy[ast.expr]:
    """Expressions that are mostly well-formed programs, with hostile nodes mixed in (so
    that both acceptance and every kind of rejection are exercised)."""
    valid_leaves = st.one_of(
        st.sampled_from(FEATURE_NAMES).map(
            lambda n: ast.Attribute(ast.Name("f", ast.Load()), n, ast.Load())),
        st.sampled_from(["a", "b0_us"]).map(
            lambda n: ast.Attribute(ast.Name("c", ast.Load()), n, ast.Load())),
        st.one_of(st.floats(allow_nan=False), st.sampled_from(EXTREME[:14])).map(
            ast.Constant))
    hostile_leaves = st.one_of(
        st.sampled_from(HOSTILE_NAMES).map(lambda n: ast.Name(n, ast.Load())),
        st.tuples(st.sampled_from(["f", "c", "r", "x", "np", "__builtins__"]),
                  st.sampled_from(ATTRS)).map(
            lambda t: ast.Attribute(ast.Name(t[0], ast.Load()), t[1], ast.Load())),
        st.one_of(st.sampled_from(EXTREME), st.floats(), st.integers(-10**30, 10**30)).map(
            ast.Constant))
    leaves = _mostly(valid_leaves, hostile_leaves)

    def grow(children: st.SearchStrategy[ast.expr]) -> st.SearchStrategy[ast.expr]:
        valid_op = st.sampled_from([ast.Add, ast.Sub, ast.Mult, ast.Div])
        any_op = st.sampled_from([ast.Add, ast.Sub, ast.Mult, ast.Div, ast.Pow, ast.Mod,
                                  ast.FloorDiv, ast.BitOr, ast.MatMult, ast.LShift])
        valid = st.one_of(
            st.tuples(children, valid_op, children).map(
                lambda t: ast.BinOp(t[0], t[1](), t[2])),
            st.tuples(st.sampled_from(sorted(CALL_ARITY)), st.data()).flatmap(
                lambda t: st.lists(children, min_size=CALL_ARITY[t[0]],
                                   max_size=CALL_ARITY[t[0]]).map(
                    lambda xs, name=t[0]: ast.Call(ast.Name(name, ast.Load()), xs, []))),
            children.map(lambda e: ast.UnaryOp(ast.USub(), e)))
        hostile = st.one_of(
            st.tuples(children, any_op, children).map(
                lambda t: ast.BinOp(t[0], t[1](), t[2])),
            st.tuples(st.sampled_from([ast.UAdd, ast.Not, ast.Invert]), children).map(
                lambda t: ast.UnaryOp(t[0](), t[1])),
            st.tuples(st.sampled_from([*CALL_ARITY, *HOSTILE_NAMES[:6]]),
                      st.lists(children, max_size=4)).map(
                lambda t: ast.Call(ast.Name(t[0], ast.Load()), t[1], [])),
            st.tuples(children, st.sampled_from([ast.Lt, ast.Gt, ast.Eq, ast.In, ast.Is]),
                      children).map(lambda t: ast.Compare(t[0], [t[1]()], [t[2]])),
            st.tuples(children, children, children).map(lambda t: ast.IfExp(*t)),
            st.tuples(children, children).map(
                lambda t: ast.Subscript(t[0], t[1], ast.Load())),
            children.map(lambda e: ast.Lambda(ast.arguments([], [ast.arg("x")], None, [],
                                                            [], None, []), e)),
            st.lists(children, max_size=3).map(lambda xs: ast.Tuple(xs, ast.Load())),
            st.tuples(children, st.sampled_from(ATTRS)).map(
                lambda t: ast.Attribute(t[0], t[1], ast.Load())))
        return _mostly(valid, hostile)

    return st.recursive(leaves, grow, max_leaves=10)


def _program(body: str, queue: str | None = None) -> str:
    text = HEAD + "def step_time(f, c):\n" + body + "\n"
    if queue is not None:
        text += "\n\ndef queueing_time(r, c):\n" + queue + "\n"
    return text


@st.composite
def ast_programs(draw: st.DrawFn) -> str:
    exprs = [draw(_exprs()) for _ in range(draw(st.integers(1, 3)))]
    lines = []
    for e in exprs[:-1]:
        lines.append("    " + ast.unparse(ast.fix_missing_locations(
            ast.Assign([ast.Name(draw(st.sampled_from(["x", "y", "x", "np", "v_x"])),
                                 ast.Store())], e))))
    lines.append("    return " + ast.unparse(ast.fix_missing_locations(exprs[-1])))
    queue = None
    if draw(st.booleans()):
        queue = "    return " + ast.unparse(ast.fix_missing_locations(draw(_exprs())))
    return _program("\n".join(lines), queue)


@st.composite
def soups(draw: st.DrawFn) -> str:
    parts = draw(st.lists(st.sampled_from(FRAGMENTS), max_size=25))
    return _program("    return " + "".join(parts))


@st.composite
def mutated_seeds(draw: st.DrawFn) -> str:
    text = draw(st.sampled_from(SEED_TEXTS))
    for _ in range(draw(st.integers(1, 3))):
        i = draw(st.integers(0, len(text)))
        j = draw(st.integers(i, min(len(text), i + 20)))
        how = draw(st.sampled_from(["replace", "delete", "duplicate", "literal"]))
        if how == "replace":
            text = text[:i] + draw(st.sampled_from(FRAGMENTS)) + text[j:]
        elif how == "delete":
            text = text[:i] + text[j:]
        elif how == "duplicate":
            text = text[:j] + text[i:j] + text[j:]
        else:
            lit = repr(draw(st.sampled_from([*EXTREME, 1e+300, 123456789.0])))
            text = text[:i] + lit + text[i:]
    return text


def _co_names(code: types.CodeType) -> set[str]:
    names = set(code.co_names)
    for const in code.co_consts:
        if isinstance(const, types.CodeType):
            names |= _co_names(const)
    return names


def _check(text: str) -> None:
    try:
        program = parse_program(text)
    except ProgramError:
        return  # the only way out of the checker but acceptance
    try:
        comp = compile_program(program)
    except ProgramError as exc:
        assert exc.rule == "compile"
        return
    for source in (comp.vector_source, comp.scalar_source):
        names = _co_names(compile(source, "<generated>", "exec"))
        outside = {n for n in names - ALLOWED if not n.startswith("k")
                   or not n[1:].isdigit()} - {"_vec", "_scalar"}
        assert not outside, (outside, text)
    feats = np.random.default_rng(0).uniform(0.0, 1e4, size=(len(FEATURE_NAMES), 8))
    consts = np.array([s.init for s in program.constants], dtype=np.float64)
    out = comp.vector_fn(feats, consts)
    assert out.shape == (8,)


@pytest.mark.slow
@FUZZ
@given(ast_programs())
def test_random_ast_programs(text):
    _check(text)


@FUZZ
@given(soups())
def test_token_soup(text):
    _check(text)


@pytest.mark.slow
@FUZZ
@given(mutated_seeds())
def test_mutated_seed_programs(text):
    _check(text)


@FUZZ
@given(st.text(max_size=300))
def test_arbitrary_text(text):
    _check(text)


@FUZZ
@given(st.binary(max_size=200))
def test_arbitrary_bytes(data):
    with contextlib.suppress(ProgramError):
        parse_program(data)


def test_the_seeds_themselves_pass():
    for text in SEED_TEXTS:
        _check(text)
        parse_program(text)


def _acceptance(strategy: st.SearchStrategy[str]) -> tuple[int, int]:
    """(programs drawn, programs the checker accepted) over a fixed sample of ``strategy``."""
    seen = {"all": 0, "accepted": 0}

    @settings(FUZZ, max_examples=200)
    @given(strategy)
    def count(text: str) -> None:
        seen["all"] += 1
        with contextlib.suppress(ProgramError):
            parse_program(text)
            seen["accepted"] += 1

    count()
    return seen["all"], seen["accepted"]


@pytest.mark.slow
def test_the_generators_reach_the_compiler():
    """The properties above bite only on programs the checker accepts: generators that
    drifted into producing rejects alone would pass them all without compiling anything.
    On a fixed sample, a good share of the random and the mutated programs is accepted."""
    for strategy, floor in ((ast_programs(), 0.2), (mutated_seeds(), 0.3)):
        drawn, accepted = _acceptance(strategy)
        assert drawn >= 100 and accepted >= floor * drawn, (drawn, accepted)
