"""Prompts carry what a model needs to write physical programs (issue 59): the physics
probe's rules, a line each, and why the parent's children were rejected."""

from __future__ import annotations

import dataclasses

import pytest
from llm_server import LINEAR, make_parent

from evolve.assess.physics import FLOOR_CONTEXT
from evolve.operators.llm.prompting import (
    MAX_REJECTIONS,
    PHYSICS_RULES,
    build_prompt,
    rejection_lines,
)

WHY = ("physics (llama-2-7b): step time grows by 0.0 us from 'decode B=1 L=1024' to "
       "'decode B=1 L=2048', less than 90% of the 12.0 us the measured kernel adds")


@pytest.mark.parametrize("profile", ["full", "compact"])
def test_every_physics_rule_is_a_line_of_the_system_prompt(profile):
    prompt = build_prompt("mutate", [make_parent()], [], 12000, profile=profile)
    system = prompt.messages[0]["content"]
    lines = system.splitlines()
    for rule in PHYSICS_RULES:
        assert f"- {rule}" in lines
    assert f"{FLOOR_CONTEXT:g} tokens" in system and "f.k_dc_attn" in system


@pytest.mark.parametrize("profile", ["full", "compact"])
def test_the_parents_rejection_reasons_are_shown(profile):
    parent = dataclasses.replace(make_parent(), rejections=("fit failed: nan", WHY))
    user = build_prompt("mutate", [parent], [], 12000, profile=profile).messages[1]["content"]
    assert "rejected for" in user and WHY in user and "- fit failed: nan" in user
    plain = build_prompt("mutate", [make_parent()], [], 12000, profile=profile)
    assert "rejected for" not in plain.messages[1]["content"]


def test_crossover_shows_parent_as_rejections():
    a = dataclasses.replace(make_parent(), rejections=(WHY,))
    user = build_prompt("crossover", [a, make_parent(LINEAR)], [], 12000).messages[1]["content"]
    assert WHY in user


def test_rejection_lines_are_the_last_distinct_ones_on_one_line_each():
    reasons = [f"reason {i}\nsecond line" for i in range(6)] + ["reason 5\nsecond line"]
    out = rejection_lines(reasons)
    assert len(out) == MAX_REJECTIONS and out[-1] == "reason 5 second line"
    assert all("\n" not in r for r in out)
