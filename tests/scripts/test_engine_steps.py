"""scripts/analysis/engine_steps.py: the figures of the tails note's step-counter section
rest on counting open requests, placing sampled steps in time and reading the sampled
steps' own file; each is checked on inputs whose answer is known."""

from __future__ import annotations

import importlib.util
import math
import sys
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT / "scripts" / "analysis"))
_spec = importlib.util.spec_from_file_location(
    "engine_steps", ROOT / "scripts" / "analysis" / "engine_steps.py")
assert _spec is not None and _spec.loader is not None
engine_steps = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(engine_steps)


def test_a_request_is_open_from_arrival_until_it_completes_or_times_out() -> None:
    arrival = np.array([0.0, 1.0, 2.0])
    end = engine_steps.request_ends(arrival, np.array([5.0, np.nan, 1.0]),
                                    np.array([False, True, False]))
    assert list(end) == [5.0, 301.0, 3.0]
    counts = engine_steps.open_requests(arrival, end, np.array([0.5, 2.5, 4.0, 100.0, 302.0]))
    assert list(counts) == [1, 3, 2, 1, 0]


def test_a_request_that_neither_completed_nor_failed_never_closes_the_count() -> None:
    arrival = np.array([0.0, 0.0])
    end = engine_steps.request_ends(arrival, np.array([np.nan, 2.0]),
                                    np.array([False, False]))
    assert math.isnan(end[0]) and end[1] == 2.0
    assert list(engine_steps.open_requests(arrival, end, np.array([1.0, 3.0]))) == [2, 1]


def test_sampled_steps_are_placed_at_the_same_fraction_of_the_simulated_steps() -> None:
    sim_end_us = np.arange(1, 201, dtype=float) * 1e6  # 200 steps, one per second
    t = engine_steps.step_time(np.array([1, 50, 100]), 100, sim_end_us)
    assert list(t) == [2.0, 100.0, 200.0]  # measured 100 steps: each is two simulated
    assert engine_steps.step_time(np.array([0]), 100, sim_end_us)[0] == 1.0  # clipped


def test_a_one_token_prefill_after_a_real_prefill_is_counted_apart() -> None:
    ids = np.array([5, 1, 2, 3, 4, 10])  # unsorted on purpose; 5 -> 10 is not consecutive
    reqs = np.array([0, 1, 1, 0, 0, 1])
    toks = np.array([0, 14, 1, 0, 0, 1])
    share, after_big, after_none = engine_steps.prefill_followups(ids, reqs, toks)
    assert share == 0.5
    assert after_big == 1.0  # step 1 (14 tokens) -> step 2 (1 token)
    assert after_none == 0.0  # steps 3 and 4 are followed by no one-token prefill
