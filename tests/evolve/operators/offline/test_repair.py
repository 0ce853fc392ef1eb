"""Repair edits (issue 59): offline fixes for an LLM program the physics probe or the fit
rejected: which edits, in which order, and that they yield valid programs."""

from __future__ import annotations

import pytest

from evolve.operators.offline.repair import KINDS, order, repair, repairable, repairs
from evolve.program.language import parse_program

SMALL = '''"""Per-token cost only (what a small model writes)."""
CONSTANTS = {"k0": (3000.0, 0.0, 10000.0), "k1": (1.5, 0.0, 10.0)}

def step_time(f, c):
    return c.k0 + c.k1 * f.decode_tokens
'''
SLOPE = ("physics (llama-2-7b): step time grows by 0.0 us from 'decode B=1 L=1024' to "
         "'decode B=1 L=2048', less than 90% of the 12.0 us the measured decode-attention "
         "kernel adds")
FLOOR = "physics (llama-2-7b): step time 10.0 us on 'x' undercuts the physical floor 90.0 us"


@pytest.mark.parametrize("kind", KINDS)
def test_every_repair_is_a_valid_program_with_the_probes_terms(kind):
    fixed = repair(SMALL, kind)
    assert fixed is not None
    prog = parse_program(fixed)
    names = {c.name for c in prog.constants}
    assert {"k0", "k1"} <= names and len(names) == 2 + (2 if kind == "floor_context" else 1)
    body = fixed.split("def step_time")[1]
    assert ("f.k_dc_attn" in body) == (kind != "memory_floor")
    assert ("f.weight_read + f.kv_read" in body) == (kind != "context_term")
    assert f"repair:{kind}" in fixed  # the docstring says what was done


def test_the_reason_decides_the_order_and_the_limit_bounds_it():
    assert order(SLOPE)[0] == "context_term"
    assert order(FLOOR)[0] == "memory_floor"
    assert [op for op, _ in repairs(SMALL, SLOPE, 2)] == ["repair:context_term",
                                                          "repair:floor_context"]
    assert len(repairs(SMALL, FLOOR, 3)) == 3
    assert repairs(SMALL, SLOPE, 0) == []


def test_only_rejections_after_fitting_are_repaired():
    assert repairable(SLOPE) and repairable("fit failed: nan") and repairable("invalid on x: y")
    assert not repairable("complexity 31 > cap 30")
    assert not repairable("duplicate of program 0123456789ab")
    assert repairs(SMALL, "same predictions as program abc", 2) == []


def test_repairs_are_pure():
    assert repairs(SMALL, SLOPE, 3) == repairs(SMALL, SLOPE, 3)
    assert repair("not a program", "memory_floor") is None
