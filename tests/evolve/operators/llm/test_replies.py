"""Reply parsing (evolve.operators.llm.replies): the last fenced block defining step_time wins, a
SEARCH/REPLACE diff must match the parent, and an unfenced program is refused."""

from __future__ import annotations

from llm_server import program_for

from evolve.operators.llm.replies import extract_program


def test_last_fenced_step_time_block_wins():
    reply = ("Draft:\n```python\ndef step_time(f, c):\n    return 1.0\n```\n"
             "Helper:\n```python\nx = 1\n```\nFinal:\n```python\n" + program_for(3) + "```\n")
    got = extract_program(reply, None)
    assert got.error is None and got.source.strip() == program_for(3).strip()


def test_diff_not_found_is_an_error():
    got = extract_program("<<<<<<< SEARCH\nnope\n=======\nyes\n>>>>>>> REPLACE\n", "a = 1\n")
    assert got.source is None and "not found" in got.error


def test_unfenced_program_is_an_error():
    got = extract_program(program_for(2), None)
    assert got.source is None and "fenced" in got.error
