"""The simulator in BLIS's engine loop (``Scenario.loop = "blis"``), against vLLM's.

Each test pins one difference docs/blis.md lists between the two loops, on a hand-made
scenario where it can be counted: no async scheduling, TTFT + ``output_token_us``,
re-decode after preemption, a prefix-cache hit priced as no cache, whole-µs steps.
"""

from __future__ import annotations

from dataclasses import replace

import numpy as np
import pytest
from sim_helpers import CONST, hand_scenario

from evaluator.sim.simulator import simulate
from evolve.program.codegen import step_model
from evolve.program.language import parse_program

_scenario = hand_scenario


def _blis(sc):
    return replace(sc, loop="blis", async_scheduling=False)


def test_blis_has_no_async_scheduling(data_path):
    """B arrives while step 2 runs: vLLM's loop prefills it in step 4, BLIS's in step 3."""
    sc = _scenario(data_path, [0.0, 1500.0], [100, 100], [20, 3])
    d = np.array([1000.0])
    vllm = simulate(sc, CONST, d).corpus
    blis = simulate(_blis(sc), CONST, d).corpus
    assert vllm.end_us[vllm.first_step[1]] == pytest.approx(4000.0)
    assert blis.end_us[blis.first_step[1]] == pytest.approx(3000.0)


OTP_PROGRAM = '''"""Constant step with per-token output cost."""
CONSTANTS = {"s": (1000.0, 1.0, 1e5), "output_token_us": (70.0, 0.0, 1e3),
             "post_decode_us": (300.0, 0.0, 1e4)}
def step_time(f, c):
    return c.s + 0.0 * f.tp
'''


def test_blis_ttft_includes_output_token_us_and_e2e_agrees(data_path):
    """BLIS adds OutputTokenProcessingTime to the first token as to every later one; E2E is
    the same in both loops (sim/simulator.go)."""
    prog = parse_program(OTP_PROGRAM)
    model, consts = step_model(prog), prog.init_vector()
    sc = replace(_scenario(data_path, [0.0, 5e5, 9e5], [300, 200, 100], [5, 9, 2]),
                 async_scheduling=False)
    vllm = simulate(sc, model, consts).metrics
    blis = simulate(_blis(sc), model, consts).metrics
    assert blis.pred["ttft_mean"] == pytest.approx(vllm.pred["ttft_mean"] + 70e-6, abs=1e-12)
    assert blis.pred["e2e_mean"] == pytest.approx(vllm.pred["e2e_mean"], abs=1e-12)


def test_blis_counts_whole_microseconds(data_path):
    """Step times, queueing delays and the per-request constants are truncated (clampToInt64);
    a step is at least 1 µs."""
    sc = _scenario(data_path, [0.0], [100], [4])
    blis = simulate(_blis(sc), CONST, np.array([1000.9])).corpus
    assert np.all(blis.end_us == np.array([1000.0, 2000.0, 3000.0, 4000.0]))
    tiny = simulate(_blis(sc), CONST, np.array([0.25])).corpus
    assert np.all(np.diff(np.r_[0.0, tiny.end_us]) == 1.0)
    prog = parse_program(OTP_PROGRAM.replace("70.0, 0.0", "70.6, 0.0"))
    m = simulate(_blis(sc), step_model(prog), prog.init_vector()).metrics
    assert m.pred["ttft_mean"] == pytest.approx((1000.0 + 70.0) * 1e-6, abs=1e-12)
    assert m.pred["e2e_mean"] == pytest.approx((4000.0 + 4 * 70.0 + 300.0) * 1e-6, abs=1e-12)


def test_blis_prices_a_prefix_cache_hit_as_no_cache(data_path):
    """The second request hits the 96-token system prompt: vLLM's step sees kv_len 96, BLIS's
    sees 0 (ProgressIndex advances after StepTime) with the same new tokens."""
    sc = _scenario(data_path, [0.0, 1e6], [500, 500], [2, 2], system_prompt_len=100,
                   n_prefix_groups=1)
    d = np.array([100.0])
    for loop_sc, kv in ((sc, 96), (_blis(sc), 0)):
        c = simulate(loop_sc, CONST, d, record_members=True).corpus
        j = np.flatnonzero(c.member_req == 1)[0]
        assert (c.member_kv[j], c.member_new[j]) == (kv, 500 - 96)


def test_blis_redecodes_every_output_token_after_a_preemption(data_path):
    """6 requests of 300 + 200 tokens in 100 blocks preempt. vLLM recomputes prompt and
    generated tokens as one prefill and goes on; BLIS re-prefills the input and decodes all
    200 tokens again, so it runs more steps and a preempted request's first token is
    re-timed after its preemption."""
    n = 6
    sc = _scenario(data_path, np.zeros(n), np.full(n, 300), np.full(n, 200), kv_blocks=100)
    sc = replace(sc, async_scheduling=False)
    d = np.array([100.0])
    vllm = simulate(sc, CONST, d, record_members=True)
    blis = simulate(_blis(sc), CONST, d, record_members=True)
    assert vllm.n_preemptions > 0 and blis.n_preemptions > 0
    c = blis.corpus
    assert (c.last_step >= 0).all() and not c.aborted.any()
    assert vllm.corpus.stats[3].sum() <= n * (200 - 1)  # no output token decoded twice
    assert c.stats[3].sum() > n * (200 - 1)
    victim = int(np.flatnonzero(c.preemptions > 0)[0])
    mine = c.member_req == victim
    assert int(np.sum(mine & ~c.member_prefill)) > 200 - 1  # decoded again from the start
    prefill_steps = np.flatnonzero(np.isin(np.arange(c.n_steps), _steps_of(c, victim, True)))
    assert c.first_step[victim] == prefill_steps.max()  # TTFT from the last prefill
    # every re-prefill is of the input alone (s = InputLen)
    assert set(c.member_len[mine & c.member_prefill]) == {300}


def _steps_of(c, r, prefill):
    steps = np.searchsorted(c.member_ptr, np.arange(c.member_req.size), side="right") - 1
    sel = (c.member_req == r) & (c.member_prefill == prefill)
    return steps[sel]
