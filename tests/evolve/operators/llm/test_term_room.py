"""A term brings only the constants its parent has room for under MAX_CONSTANTS: the prompt
says how many, the grammar allows no more, and a parent at the cap is passed over – through
a real HTTP endpoint."""

from __future__ import annotations

import numpy as np
import pytest
from lark import Lark
from lark.exceptions import LarkError
from llm_server import Reply, fenced, llm_config, make_parent

from evolve.operators.llm.cassette import canonical_request
from evolve.operators.llm.operator import LLMOperator
from evolve.operators.llm.term import term_room
from evolve.program.grammar_strict import TERM_CONSTANTS, grammar_text, term_gbnf, term_lark
from evolve.program.language import parse_program
from evolve.program.whitelist import MAX_CONSTANTS

FEATURES = ("weight_read", "kv_read", "pf_gemm", "dc_gemm", "dc_attn", "pf_attn", "kv_write",
            "tp_allreduce", "k_step", "k_gemm")
ONE = "def term(f, c):\n    return c.k0 * f.kv_read\n"


def with_constants(n: int) -> str:
    """A checked program with ``n`` constants, each scaling a component time."""
    consts = ", ".join(f'"k{i}": (1.0, 0.0, 10.0)' for i in range(n))
    body = " + ".join(f"c.k{i} * f.{FEATURES[i]}" for i in range(n))
    return (f'"""{n} scaled components."""\nCONSTANTS = {{{consts}}}\n\n'
            f"def step_time(f, c):\n    return {body}\n")


def test_room_is_what_the_cap_leaves_at_most_a_terms_worth():
    assert [term_room(n) for n in (0, 7, 8, 9, 10, 12)] == [TERM_CONSTANTS, 3, 2, 1, 0, 0]
    assert MAX_CONSTANTS == 10  # the figures above assume it


def test_a_smaller_room_has_a_grammar_without_the_other_constants():
    one = Lark(term_lark(fenced=False, constants=1), start="start", parser="earley")
    one.parse(ONE)
    with pytest.raises(LarkError):
        one.parse("def term(f, c):\n    return c.k0 * f.kv_read + c.k1\n")
    assert grammar_text("gbnf", "term:1") == term_gbnf(constants=1) != term_gbnf()
    assert grammar_text("gbnf", "term") == term_gbnf()
    with pytest.raises(ValueError, match="1 to 3 constants"):
        term_gbnf(constants=0)
    msgs = [{"role": "user", "content": "x"}]
    full, small = (canonical_request("m", msgs, 0.8, 1, 64, "v", "gbnf", "term", n)
                   for n in (TERM_CONSTANTS, 1))
    assert full["constrain"]["form"] == "term" and small["constrain"]["form"] == "term:1"
    assert full["constrain"]["grammar"] != small["constrain"]["grammar"]  # their own keys


def _ask(serve, parents, reply=ONE):
    seen: list[dict] = []

    def responder(req, n):
        seen.append(req)
        return Reply(content=fenced(reply))

    server = serve(responder)
    op = LLMOperator(llm_config(server, constrain="gbnf", replies_per_prompt=1))
    try:
        props = op.propose(parents, [], np.random.default_rng(5), len(parents))
    finally:
        op.close()
    return props, seen


def test_a_parent_with_one_constant_of_room_is_asked_for_a_one_constant_term(serve):
    parent = make_parent(with_constants(9))
    (p,), (req,) = _ask(serve, [parent])
    assert req["grammar"] == term_gbnf(constants=1)  # c.k0 only
    user = req["messages"][1]["content"]
    assert "already has 9 of its 10 constants" in user and "at most 1 (c.k0 only)" in user
    assert p.error is None and parse_program(str(p.source)).n_constants == MAX_CONSTANTS
    roomy = make_parent(with_constants(4))
    (_,), (req,) = _ask(serve, [roomy])
    assert req["grammar"] == term_gbnf()
    assert "already has" not in req["messages"][1]["content"]


def test_a_parent_at_the_cap_is_passed_over_and_none_left_asks_nothing(serve):
    full, roomy = make_parent(with_constants(10)), make_parent(with_constants(8), loss=0.3)
    props, seen = _ask(serve, [full, roomy])
    assert [p.parent_ids for p in props] == [(str(roomy.program.id),)] * 2
    assert all(r["grammar"] == term_gbnf(constants=2) for r in seen)
    props, seen = _ask(serve, [full])
    assert seen == [] and props[0].source is None
    assert "no parent has room for a term" in str(props[0].error)
