"""Seeded step-time noise and the what-ifs of host time: per open request, and a floor."""

from __future__ import annotations

from dataclasses import replace

import numpy as np
import pytest
from sim_helpers import CONST, hand_scenario

from evaluator.scoring.score import NOISE_PERIOD, noise_seed, score_corpus, step_noise_factors
from evaluator.sim.simulator import simulate


def _busy(data_path, n=400):
    """Requests 20 ms apart, 50 output tokens each: a few thousand steps."""
    return hand_scenario(data_path, np.arange(n) * 2e4, np.full(n, 200), np.full(n, 50))


def test_noise_is_deterministic_and_of_the_configured_size(data_path):
    sc = replace(_busy(data_path), step_noise=0.06)
    a = simulate(sc, CONST, np.array([1000.0]))
    b = simulate(sc, CONST, np.array([1000.0]))
    assert np.array_equal(a.corpus.end_us, b.corpus.end_us)  # same inputs, same outputs
    d = np.diff(np.concatenate([[0.0], a.corpus.end_us]))
    busy = d[d < 5000.0]  # the engine's steps (idle gaps left out)
    r = np.log(busy / 1000.0)
    assert r.std() == pytest.approx(0.06, rel=0.1)
    assert np.mean(busy / 1000.0) == pytest.approx(1.0, abs=0.005)  # mean one
    # the factors: seeded by the run's name, iid normal in log, none at sigma 0
    f = step_noise_factors("hand", 0.06)
    assert f.size == NOISE_PERIOD and np.array_equal(f, step_noise_factors("hand", 0.06))
    assert abs(np.corrcoef(np.log(f[:-1]), np.log(f[1:]))[0, 1]) < 0.02
    assert not np.array_equal(f, step_noise_factors("other", 0.06))
    assert noise_seed("hand") == noise_seed("hand") != noise_seed("other")
    assert step_noise_factors("hand", 0.0).size == 0
    quiet = simulate(_busy(data_path), CONST, np.array([1000.0]))
    assert np.allclose(np.diff(quiet.corpus.end_us)[:10], 1000.0)


def test_teacher_forcing_a_noisy_corpus_reproduces_the_closed_loop(data_path):
    sc = replace(_busy(data_path), step_noise=0.1)
    res = simulate(sc, CONST, np.array([1000.0]))
    tf = score_corpus(sc, res.corpus, CONST, np.array([1000.0]))
    for k in ("e2e_mean", "ttft_mean", "ttft_p99_steady", "e2e_p99"):
        if k in res.metrics.pred:
            assert tf.pred[k] == pytest.approx(res.metrics.pred[k], rel=1e-9)


def test_host_cost_per_open_request(data_path):
    """Ten requests at once, one token each after prefill: every step pays 5 µs per open
    request; the first step sees all ten open."""
    sc = hand_scenario(data_path, np.zeros(10), np.full(10, 100), np.full(10, 3))
    base = simulate(sc, CONST, np.array([1000.0])).corpus
    what_if = simulate(replace(sc, host_us_per_open=5.0), CONST, np.array([1000.0])).corpus
    assert what_if.n_steps == base.n_steps
    assert what_if.end_us[0] == pytest.approx(1000.0 + 10 * 5.0)
    assert what_if.end_us[-1] == pytest.approx(base.end_us[-1] + base.n_steps * 10 * 5.0)


def test_host_floor_lasts_every_step_at_least_the_floor(data_path):
    """A floor above the model's step sets every step's length; one below changes nothing;
    it applies after the noise, so a noisy step never drops under it."""
    sc = hand_scenario(data_path, np.zeros(10), np.full(10, 100), np.full(10, 3))
    base = simulate(sc, CONST, np.array([1000.0])).corpus
    high = simulate(replace(sc, host_floor_us=2500.0), CONST, np.array([1000.0])).corpus
    assert high.n_steps == base.n_steps
    assert np.allclose(np.diff(np.concatenate([[0.0], high.end_us])), 2500.0)
    low = simulate(replace(sc, host_floor_us=400.0), CONST, np.array([1000.0])).corpus
    assert np.array_equal(low.end_us, base.end_us)
    noisy = replace(_busy(data_path), step_noise=0.2)
    d_free = np.diff(simulate(noisy, CONST, np.array([1000.0])).corpus.end_us)
    floored = simulate(replace(noisy, host_floor_us=1000.0), CONST, np.array([1000.0]))
    d = np.diff(floored.corpus.end_us)
    busy = d[d < 5000.0]
    assert busy.min() >= 1000.0 - 1e-9 and busy.max() > 1100.0
    assert d_free[d_free < 5000.0].min() < 900.0  # without the floor, steps run shorter


def test_blis_loop_has_no_noise(data_path):
    """BLIS calls StepTime deterministically: its loop is simulated (and teacher forced)
    without noise whatever the run's sigma, so an export is judged as BLIS will run it."""
    sc = replace(_busy(data_path), loop="blis")
    quiet = simulate(sc, CONST, np.array([1000.0]))
    noisy = simulate(replace(sc, step_noise=0.2), CONST, np.array([1000.0]))
    assert np.array_equal(quiet.corpus.end_us, noisy.corpus.end_us)
    tf = score_corpus(replace(sc, step_noise=0.2), quiet.corpus, CONST, np.array([1000.0]))
    assert tf.pred["e2e_mean"] == pytest.approx(quiet.metrics.pred["e2e_mean"], rel=1e-9)
