"""The term reply form (evolve/operators/llm/term.py): a small model's one expression added
to its parent, through a real HTTP endpoint, its grammar and the checker."""

from __future__ import annotations

import numpy as np
import pytest
from lark import Lark
from lark.exceptions import LarkError
from llm_server import HELDOUT_RUNS, ROOFLINE, Reply, fenced, llm_config, make_parent

from evolve.config.llm import LLMConfig
from evolve.operators.llm.cassette import canonical_request
from evolve.operators.llm.operator import LLMOperator
from evolve.operators.llm.term import extract_term, splice_term
from evolve.program.grammar_strict import strict_gbnf, term_gbnf, term_lark
from evolve.program.language import parse_program

TERM = "def term(f, c):\n    return c.k0 * f.kv_read + c.k1\n"  # what the grammar allows
DECLARED = ('"""KV reads the parent misses."""\nCONSTANTS = {"k0": (1.5, 0.0, 10.0), '
            '"k1": (0.5, 0.0, 1.0)}\n\ndef term(f, c):\n    return c.k0 * f.kv_read + c.k1\n')


def test_a_term_is_added_to_the_parents_return_with_fresh_constants():
    child, error = splice_term(ROOFLINE, TERM)
    assert error is None and child is not None
    program = parse_program(child)  # the checker accepts it
    parent = parse_program(ROOFLINE)
    names = [c.name for c in program.constants]
    assert names[:len(parent.constants)] == [c.name for c in parent.constants]
    assert set(names) - {c.name for c in parent.constants} == {"t1", "t2"}
    assert "c.t1 * f.kv_read + c.t2" in child and "llm:term: +" in child
    # the parent's own expression is still there, unchanged
    body = ROOFLINE.split("return ", 1)[1].strip()
    assert body.split(" + ")[0] in child


def test_a_term_that_vanishes_at_zero_starts_there_and_others_keep_their_inits():
    for term in (TERM, DECLARED):  # c.k0 * f.kv_read + c.k1: 0 at k = 0
        inits = {c.name: c.init for c in parse_program(str(splice_term(ROOFLINE, term)[0]))
                 .constants}
        assert inits["t1"] == 0.0 and inits["t2"] == 0.0
    shifted = ('CONSTANTS = {"k0": (2.5, 0.0, 10.0)}\n\ndef term(f, c):\n'
               '    return f.kv_read / c.k0\n')  # 0 would divide by zero: the model's init
    child, _ = splice_term(ROOFLINE, shifted)
    assert {c.name: c.init for c in parse_program(str(child)).constants}["t1"] == 2.5
    child, _ = splice_term(ROOFLINE, "def term(f, c):\n    return f.kv_read / c.k0\n")
    assert {c.name: c.init for c in parse_program(str(child)).constants}["t1"] == 1.0


def test_undeclared_constants_get_bounds_by_the_unit_of_the_features_beside_them():
    term = ("def term(f, c):\n    return c.k0 * f.kv_read + c.k1 * f.batch_size + c.k2"
            " * (f.dc_attn + f.prefill_tokens)\n")
    child, error = splice_term(ROOFLINE, term)
    assert error is None
    bounds = {c.name: (c.low, c.high) for c in parse_program(str(child)).constants}
    assert bounds["t1"] == (0.0, 10.0)  # a scale on a µs feature
    assert bounds["t2"] == (0.0, 1000.0)  # µs per request
    assert bounds["t3"] == (0.0, 1000.0)  # mixed units: the wider
    declared = {c.name: (c.low, c.high)
                for c in parse_program(str(splice_term(ROOFLINE, DECLARED)[0])).constants}
    assert declared["t2"] == (0.0, 1.0)  # a declared constant keeps its bounds


def test_the_parents_constants_start_at_their_fitted_median_within_bounds():
    parent = parse_program(ROOFLINE)
    name = parent.constants[0].name
    low, high = parent.constants[0].low, parent.constants[0].high
    mid = low + 0.3 * (high - low)
    fitted = {"a": {name: mid}, "b": {name: mid + 0.2 * (high - low)},
              "c": {name: high * 10}}  # the median is b's; a value past high is clipped
    child, _ = splice_term(ROOFLINE, TERM, fitted)
    inits = {c.name: c.init for c in parse_program(str(child)).constants}
    assert inits[name] == pytest.approx(mid + 0.2 * (high - low))
    child, _ = splice_term(ROOFLINE, TERM, {"a": {name: high * 10}})
    assert {c.name: c.init for c in parse_program(str(child)).constants}[name] == high


def test_a_second_term_replaces_the_note_and_takes_the_next_names():
    once, _ = splice_term(ROOFLINE, TERM)
    assert once is not None
    twice, error = splice_term(once, TERM)
    assert error is None and twice is not None
    assert twice.count("llm:term:") == 1
    assert {"t3", "t4"} <= {c.name for c in parse_program(twice).constants}


@pytest.mark.parametrize("term, why", [
    ('CONSTANTS = {"k0": (1.0, 0.0, 10.0)}\ndef term(f, c):\n    x = 1.0\n    return x\n',
     "single return"),
    ('CONSTANTS = {"k0": 1.0}\ndef term(f, c):\n    return c.k0\n', "CONSTANTS"),
    ('CONSTANTS = {"k0": (1.0, 0.0, 10.0)}\ndef step_time(f, c):\n    return c.k0\n',
     "no def term"),
])
def test_a_malformed_term_is_refused_with_the_reason(term, why):
    child, error = splice_term(ROOFLINE, term)
    assert child is None and error is not None and why in error


def test_extract_takes_the_last_fenced_term_and_refuses_prose():
    reply = f"Draft:\n```python\nnot python (\n```\n{fenced(TERM, 'Final:')}"
    assert extract_term(reply).source == TERM
    assert extract_term("Use more KV reads.").source is None
    assert "not valid Python" in str(extract_term(fenced("def term(f, c):\n  return (")).error)


def test_the_term_grammar_accepts_terms_and_not_programs():
    parser = Lark(term_lark(fenced=False), start="start", parser="earley")
    parser.parse(TERM)
    parser.parse("def term(f, c):\n    return c.k2 * maximum(f.kv_read, c.k0)\n")
    for bad in (TERM.replace("def term", "def step_time"),
                DECLARED,  # no docstring, no CONSTANTS: the splice declares them
                "def term(f, c):\n    return c.k3 * f.kv_read\n"):  # above the cap
        with pytest.raises(LarkError):
            parser.parse(bad)
    assert term_gbnf().startswith("root ::=") and term_gbnf() != strict_gbnf()


def test_term_requests_have_their_own_cassette_key_and_program_requests_keep_theirs():
    msgs = [{"role": "user", "content": "x"}]
    program = canonical_request("m", msgs, 0.8, 1, 64, "v", "gbnf")
    term = canonical_request("m", msgs, 0.8, 1, 64, "v", "gbnf", "term")
    assert "reply_form" not in program and "form" not in program["constrain"]
    assert term["reply_form"] == "term" and term["constrain"]["form"] == "term"
    assert term["constrain"]["grammar"] != program["constrain"]["grammar"]


def test_auto_is_term_with_the_compact_profile_only():
    assert LLMConfig(model="m", constrain="gbnf").form() == "term"
    assert LLMConfig(model="m").form() == "program"
    assert LLMConfig(model="m", constrain="gbnf", reply_form="program").form() == "program"
    with pytest.raises(ValueError, match="reply_form must be one of"):
        LLMConfig(model="m", reply_form="diff")  # type: ignore[arg-type]


def test_an_endpoints_term_becomes_a_child_of_its_parent(serve):
    """Through a real HTTP server: the request carries the term grammar and a term prompt,
    the reply's term is spliced into the parent, and the child passes the checker."""
    seen: list[dict] = []

    def responder(req, n):
        seen.append(req)
        return Reply(content=fenced(TERM))

    server = serve(responder)
    parent = make_parent()
    op = LLMOperator(llm_config(server, constrain="gbnf"))
    try:
        (p,) = op.propose([parent], [], np.random.default_rng(5), 1)
    finally:
        op.close()
    assert p.error is None and p.source is not None, p.error
    assert p.operator == "llm:term" and p.parent_ids == (str(parent.program.id),)
    child = parse_program(p.source)
    assert len(child.constants) == len(parent.program.constants) + 2
    (req,) = seen
    assert "def term(f, c)" in req["grammar"] and "def step_time" not in req["grammar"]
    system, user = (m["content"] for m in req["messages"])
    assert "ADDED" in system and "Its worst training runs" in user
    assert "CONSTANTS" not in user  # the parent's functions only: the term adds to them
    assert "| llama-2-70b-tp4-general |" in user and "20260217" not in user  # short names
    assert str(parent.program.source).strip().splitlines()[-1].strip() in user


def test_a_term_prompt_with_short_run_names_still_refuses_a_held_out_run():
    """Run names lose their date-time prefix in a term prompt; the held-out check looks for
    the short names too, so a held-out run cannot slip in without its prefix."""
    from dataclasses import replace

    from evolve.operators.llm.prompting import HeldoutLeak, build_prompt
    parent = make_parent()
    prompt = build_prompt("mutate", [parent], [], 4000, HELDOUT_RUNS, "compact", "term")
    assert "| codellama-34b-tp2-general |" in prompt.messages[1]["content"]
    short = HELDOUT_RUNS[0].split("-", 2)[2]  # llama-2-7b-tp1-general
    leaky = replace(parent, rejections=(f"too slow on {short}",))
    with pytest.raises(HeldoutLeak, match=short):
        build_prompt("mutate", [leaky], [], 4000, HELDOUT_RUNS, "compact", "term")


def test_a_term_prompts_table_names_runs_without_window_and_gives_whole_percents():
    """Digits are a token each for a small model: the term table drops the run's window
    suffix and the APE's decimals (160 of ~400 user tokens before); a held-out run named
    so is still refused."""
    from dataclasses import replace

    from evolve.operators.llm.prompting import HeldoutLeak, build_prompt
    windowed = {f"{name}@840-960s": {**m, "pred_e2e_mean": 1.0, "meas_e2e_mean": 2.0}
                for name, m in make_parent().train_errors.items()}
    parent = replace(make_parent(), train_errors=windowed)
    user = build_prompt("mutate", [parent], [], 4000, HELDOUT_RUNS, "compact",
                        "term").messages[1]["content"]
    assert "| llama-2-70b-tp4-general | -21% | 44% |" in user  # signed where it can be
    assert "@840-960s" not in user and ".4%" not in user
    full = build_prompt("mutate", [parent], [], 4000, HELDOUT_RUNS, "compact", "program")
    assert "@840-960s" in full.messages[1]["content"]  # the program form keeps them
    label = HELDOUT_RUNS[1].split("-", 2)[2]  # codellama-34b-tp2-reasoning
    leaky = replace(parent, rejections=(f"too fast on {label}",))
    with pytest.raises(HeldoutLeak, match=label):
        build_prompt("mutate", [leaky], [], 4000, HELDOUT_RUNS, "compact", "term")
