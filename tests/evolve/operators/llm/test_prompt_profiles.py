"""Prompt profiles: the compact one keeps the parent, 3 worst runs and one other program.

Token counts with a real tokenizer are asserted in tests/local (the local server's own);
here: what the compact prompt contains, that it shrinks to its cap, and how ``auto``
chooses.
"""

from __future__ import annotations

from pathlib import Path

from llm_server import HELDOUT_RUNS, LINEAR, ROOFLINE, make_parent

from evolve.config.llm import LLMConfig
from evolve.operators.llm.prompting import COMPACT_ESTIMATE_CAP, build_prompt

ROOT = Path(__file__).resolve().parents[4]


def test_compact_has_parent_three_worst_runs_and_one_inspiration():
    a, b, c = make_parent(), make_parent(LINEAR, loss=0.31), make_parent(ROOFLINE, loss=0.4)
    p = build_prompt("mutate", [a], [b, c], 12000, HELDOUT_RUNS, profile="compact")
    user = p.messages[1]["content"]
    assert "c.overhead + maximum(compute, memory)" in user  # the parent
    assert user.count("| 2026") == 3  # its 3 worst runs
    assert "c.per_req * f.batch_size" in user and user.count("```python") == 2
    full = build_prompt("mutate", [a], [b, c], 12000, HELDOUT_RUNS)
    assert p.tokens < full.tokens / 2


def test_compact_crossover_shows_the_second_parent_as_the_other_program():
    a, b = make_parent(), make_parent(LINEAR, loss=0.31)
    p = build_prompt("crossover", [a, b], [make_parent(ROOFLINE)], 12000, profile="compact")
    assert "c.per_req * f.batch_size" in p.messages[1]["content"]


def test_compact_drops_the_inspiration_to_fit_its_cap():
    seeds = sorted(ROOT.glob("seeds/*.py"), key=lambda q: -len(q.read_text()))
    a, b = (make_parent(q.read_text()) for q in seeds[:2])
    p = build_prompt("mutate", [a], [b], 12000, profile="compact")
    assert p.tokens <= COMPACT_ESTIMATE_CAP
    long_doc = seeds[0].read_text().split('"""')[1].strip().splitlines()
    assert long_doc[2] not in p.messages[1]["content"]  # docstrings cut to one line


def test_auto_profile():
    assert LLMConfig(model="m").profile() == "full"
    assert LLMConfig(model="m", context_tokens=4096).profile() == "compact"
    assert LLMConfig(model="m", context_tokens=32768).profile() == "full"
    assert LLMConfig(model="m", constrain="vllm").profile() == "compact"
    assert LLMConfig(model="m", constrain="vllm", prompt_profile="full").profile() == "full"
