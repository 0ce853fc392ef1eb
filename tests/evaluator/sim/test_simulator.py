"""Simulator invariants on real runs and hand-made scenarios with answers known by hand."""

from __future__ import annotations

import numpy as np
import pytest
from sim_helpers import CONST, hand_scenario

from evaluator.scoring.baselines import TRAINED_PHYSICS, trained_physics_consts
from evaluator.scoring.score import score_corpus
from evaluator.sim.simulator import simulate

_scenario = hand_scenario


@pytest.mark.parametrize(("inp", "out", "steps_to_first"), [(600, 10, 1), (3000, 10, 2),
                                                           (2048, 1, 1), (4000, 5, 2)])
def test_lone_request_constant_step_time(data_path, inp, out, steps_to_first):
    d = 1234.5
    sc = _scenario(data_path, [0.0], [inp], [out])
    res = simulate(sc, CONST, np.array([d]))
    c = res.corpus
    assert c.n_steps == steps_to_first + out - 1
    assert c.end_us[c.first_step[0]] == pytest.approx(steps_to_first * d, rel=1e-12)
    assert c.end_us[c.last_step[0]] == pytest.approx((steps_to_first + out - 1) * d, rel=1e-12)
    assert res.metrics.pred["e2e_mean"] == pytest.approx((steps_to_first + out - 1) * d * 1e-6)


def test_idle_engine_waits_for_the_next_arrival(data_path):
    sc = _scenario(data_path, [0.0, 10e6], [100, 100], [3, 3])
    res = simulate(sc, CONST, np.array([1000.0]))
    c = res.corpus
    assert c.end_us[c.last_step[1]] == pytest.approx(10e6 + 3000.0)
    assert c.wait_us[1] == 0.0


def test_budget_and_max_seqs_limit_batches(data_path):
    n = 40
    sc = _scenario(data_path, np.zeros(n), np.full(n, 700), np.full(n, 4), max_num_seqs=8,
                   max_batched_tokens=1000)
    res = simulate(sc, CONST, np.array([100.0]), record_members=True)
    st = res.corpus.stats
    assert np.all(st[2] + st[3] <= 1000)
    assert np.all(st[0] + st[1] <= 8)
    assert (res.corpus.last_step >= 0).all()


def test_preemption_when_kv_blocks_run_out(data_path):
    # 6 requests of 300 + 200 tokens need 32 blocks each at the end; 100 blocks hold 3.
    n = 6
    sc = _scenario(data_path, np.zeros(n), np.full(n, 300), np.full(n, 200), kv_blocks=100)
    res = simulate(sc, CONST, np.array([100.0]), record_members=True)
    c = res.corpus
    assert res.n_preemptions > 0
    assert c.kv_used.max() <= 100
    assert (c.last_step >= 0).all() and not c.aborted.any()
    _check_tokens(sc, c)


def test_client_timeout_aborts(data_path):
    sc = _scenario(data_path, [0.0, 1.0], [100, 100], [1000, 2])
    res = simulate(sc, CONST, np.array([1e6]))  # 1 s per step: 1000 tokens take 1000 s
    c = res.corpus
    assert c.aborted[0] and c.last_step[0] == -1
    assert not c.aborted[1] and c.last_step[1] >= 0
    assert res.metrics.n_failed == 1


def test_prefix_cache_hits_after_first_request_of_group(data_path):
    sc = _scenario(data_path, [0.0, 1e6], [500, 500], [2, 2], system_prompt_len=100,
                   n_prefix_groups=1)
    res = simulate(sc, CONST, np.array([100.0]), record_members=True)
    c = res.corpus
    first_kv = [c.member_kv[c.member_req == r][0] for r in (0, 1)]
    assert first_kv == [0, 96]  # 6 full blocks of the 100-token system prompt


def test_bad_step_time_is_reported_not_raised(data_path):
    sc = _scenario(data_path, [0.0], [100], [3])
    res = simulate(sc, CONST, np.array([-1.0]))
    assert not res.metrics.valid and "not finite, positive and below 1e+12" in res.error
    huge = simulate(sc, CONST, np.array([2e12]))  # the same rule as teacher forcing
    assert not huge.metrics.valid and "at step 0" in huge.error


def _check_tokens(sc, c):
    """Per request: tokens computed + cache hit = input + output - 1 (without preemption)."""
    per_req_new = np.bincount(c.member_req, weights=c.member_new, minlength=sc.n_requests)
    first_pos = np.full(sc.n_requests, -1)
    first_pos[c.member_req[::-1]] = np.arange(c.member_req.size)[::-1]
    hit = np.where(first_pos >= 0, c.member_kv[np.maximum(first_pos, 0)], 0)
    done = (c.last_step >= 0) & (c.preemptions == 0)
    expect = sc.input_tokens + sc.output_tokens - 1
    np.testing.assert_array_equal((per_req_new + hit)[done], expect[done])
    recomputed = (c.last_step >= 0) & (c.preemptions > 0)
    assert np.all((per_req_new + hit)[recomputed] >= expect[recomputed])


@pytest.mark.parametrize("name", ["20260217-170634-llama-2-7b-tp1-reasoning",
                                  "20260218-130541-mixtral-8x7b-v0-1-tp2-general"])
def test_invariants_on_real_runs(all_scenarios, name):
    sc = next(s for s in all_scenarios if s.name == name)
    sc = sc if "reasoning" in name else sc.head(300.0)
    res = simulate(sc, TRAINED_PHYSICS, trained_physics_consts(sc), record_members=True)
    c = res.corpus
    sv = sc.server
    # every request admitted at most once as new, and finished xor aborted
    assert np.all((c.last_step >= 0) ^ c.aborted)
    assert np.all((c.admit_step >= 0) | c.aborted)
    assert np.all(c.stats[2] + c.stats[3] <= sv.max_batched_tokens)
    assert np.all(c.stats[0] + c.stats[1] <= sv.max_num_seqs)
    assert c.kv_used.max() <= sv.kv_blocks
    assert np.all(np.diff(c.end_us) > 0)
    ptr = c.member_ptr
    sizes = np.diff(ptr)
    np.testing.assert_array_equal(sizes, (c.stats[0] + c.stats[1]).astype(int))
    # no request appears twice in one step
    step_of = np.repeat(np.arange(c.n_steps), sizes)
    pairs = step_of.astype(np.int64) * sc.n_requests + c.member_req
    assert np.unique(pairs).size == pairs.size
    _check_tokens(sc, c)
    if "reasoning" in name:
        assert c.aborted.sum() > 1000  # overloaded: client timeouts abort requests


@pytest.mark.parametrize("idx", [0, 3, 9])
def test_teacher_forcing_reproduces_closed_loop(small_scenarios, idx):
    sc = small_scenarios[idx % len(small_scenarios)]
    c = trained_physics_consts(sc)
    res = simulate(sc, TRAINED_PHYSICS, c)
    tf = score_corpus(sc, res.corpus, TRAINED_PHYSICS, c)
    assert res.metrics.valid and tf.valid
    for k, v in res.metrics.pred.items():
        assert tf.pred[k] == pytest.approx(v, rel=1e-9), k


def test_simulation_is_deterministic(small_scenarios):
    sc = small_scenarios[1]
    c = trained_physics_consts(sc)
    a = simulate(sc, TRAINED_PHYSICS, c).corpus
    b = simulate(sc, TRAINED_PHYSICS, c).corpus
    assert a.digest() == b.digest()
    np.testing.assert_array_equal(a.end_us, b.end_us)


def test_threaded_simulation_equals_serial_in_order(small_scenarios):
    """Evaluator.threads runs the scenarios in threads (the compiled simulator releases the
    GIL): the same corpora and metrics as one at a time, progress reported in order."""
    from evaluator.api import Evaluator

    ev = Evaluator(small_scenarios)
    consts = {s.name: trained_physics_consts(s) for s in small_scenarios}
    names = [s.name for s in reversed(small_scenarios)]
    serial = ev.simulate(TRAINED_PHYSICS, consts, names)
    ev.threads = 3
    seen: list[str] = []
    threaded = ev.simulate(TRAINED_PHYSICS, consts, names, progress=seen.append)
    assert list(threaded) == names and seen == names
    for n in names:
        assert threaded[n].corpus.digest() == serial[n].corpus.digest()
        assert threaded[n].metrics.to_dict() == serial[n].metrics.to_dict()


def test_bad_queueing_time_is_reported_not_raised(data_path):
    """As a bad step time: an invalid result with the reason (``evolve validate`` of such a
    program file was an internal error)."""
    from evolve.program.codegen import step_model
    from evolve.program.language import parse_program

    p = parse_program('CONSTANTS = {"s": (20000.0, 1000.0, 80000.0), "q": (-5.0, -9.0, 9.0)}\n'
                      "def step_time(f, c):\n    return c.s + 0.0 * f.tp\n"
                      "def queueing_time(r, c):\n    return c.q + 0.0 * r.input_tokens\n")
    sc = _scenario(data_path, [0.0], [100], [3])
    res = simulate(sc, step_model(p), p.init_vector())
    assert not res.metrics.valid and "queueing_time is not finite and non-negative" in res.error
    assert res.metrics.reason == res.error


def test_async_scheduling_delays_a_request_arriving_mid_step_by_one_step(data_path):
    """vLLM's async scheduling forms a step as the previous one begins: B, arriving while
    step 2 runs (1.0-2.0 ms), misses step 3 (formed at 1.0 ms) and is prefilled in step 4."""
    from dataclasses import replace

    sc = _scenario(data_path, [0.0, 1500.0], [100, 100], [20, 3])
    d = np.array([1000.0])
    sync = simulate(replace(sc, async_scheduling=False), CONST, d).corpus
    overlap = simulate(sc, CONST, d).corpus  # async scheduling is the default
    assert sync.end_us[sync.first_step[1]] == pytest.approx(3000.0)
    assert overlap.end_us[overlap.first_step[1]] == pytest.approx(4000.0)
    # an idle engine schedules an arrival at once, as without it
    lone = _scenario(data_path, [0.0, 1e6], [100, 100], [2, 2])
    idle = simulate(lone, CONST, d).corpus
    assert idle.end_us[idle.first_step[1]] == pytest.approx(1e6 + 1000.0)
