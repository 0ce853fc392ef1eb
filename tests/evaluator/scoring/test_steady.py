"""Steady percentiles (arrivals after the measured cold start) and the loss's weights."""

from __future__ import annotations

from dataclasses import replace

import numpy as np
import pytest
from sim_helpers import CONST, hand_scenario

from evaluator.scoring.score import (
    DEFAULT_LOSS_WEIGHTS,
    STEADY_WARMUP_S,
    RunMetrics,
    loss,
    run_loss,
    steady_mask,
)
from evaluator.sim.simulator import simulate


def test_steady_percentiles_leave_out_the_cold_start_on_both_sides(data_path):
    """One request a second for 100 s, each alone in the engine: simulated TTFT is one
    step (1 ms); measured TTFT is 2 s in the first 30 s (the cold start), then 10 ms for
    every request but the slowest steady one (50 ms)."""
    n = 100
    arrivals = np.arange(n) * 1e6
    meas_ttft = np.where(arrivals < STEADY_WARMUP_S * 1e6, 2.0, 0.010)
    meas_ttft[60] = 0.050
    sc = hand_scenario(data_path, arrivals, np.full(n, 100), np.full(n, 2),
                       ttft_s=meas_ttft, e2e_s=meas_ttft + 0.001)
    assert steady_mask(sc).sum() == n - 30
    m = simulate(sc, CONST, np.array([1000.0])).metrics
    steady = meas_ttft[30:]
    assert m.meas["ttft_p99_steady"] == pytest.approx(np.percentile(steady, 99))
    assert m.meas["ttft_p90_steady"] == pytest.approx(0.010)
    assert m.meas["e2e_p99_steady"] == pytest.approx(np.percentile(steady + 0.001, 99))
    assert m.pred["ttft_p99_steady"] == pytest.approx(1e-3)  # one step, warm from the start
    assert m.pred["e2e_p99_steady"] == pytest.approx(2e-3)
    assert m.ape["ttft_p90_steady"] == pytest.approx(abs(1e-3 - 0.010) / 0.010)
    # the all-request keys keep their meaning: a make_scenario run's summary is over all
    assert m.meas["ttft_p99"] == pytest.approx(np.percentile(meas_ttft, 99))


def test_a_window_counts_its_requests_in_the_whole_runs_time(data_path):
    n = 100
    sc = hand_scenario(data_path, np.arange(n) * 1e6, np.full(n, 100), np.full(n, 2),
                       ttft_s=np.full(n, 0.01), e2e_s=np.full(n, 0.02))
    w = sc.window(40.0, 80.0, warmup_s=20.0)  # arrivals 20-80 s, shifted to start at 0
    assert w.arrival_us[0] == 0.0
    assert w.meta["offset_s"] == 20.0
    assert steady_mask(w).sum() == 80 - 30  # 30..79 s of the whole run
    head = sc.head(20.0)
    assert not steady_mask(head).any()
    m = simulate(head, CONST, np.array([1000.0])).metrics
    assert "ttft_p99_steady" not in m.pred and "ttft_p99_steady" not in m.ape


def _rm(ape: dict[str, float], weights: dict[str, float] | None = None) -> RunMetrics:
    return RunMetrics("r", "train", "m", "w", ape=ape,
                      loss_weights=dict(weights or DEFAULT_LOSS_WEIGHTS))


def test_loss_weighs_the_steady_percentiles_and_caps_them():
    means = {"e2e_mean": 0.1, "ttft_mean": 0.2}
    pct = {"ttft_p90_steady": 0.4, "ttft_p99_steady": 3.0, "e2e_p99_steady": 0.2}
    w = DEFAULT_LOSS_WEIGHTS
    assert (w["ttft_p90_steady"], w["ttft_p99_steady"], w["e2e_p99_steady"], w["cap"]) == (
        0.5, 0.25, 0.5, 1.0)
    want = (0.01 + 0.04 + 0.5 * 0.16 + 0.25 * 1.0 + 0.5 * 0.04) / (2 + 0.5 + 0.25 + 0.5)
    assert run_loss({**means, **pct}) == pytest.approx(want)  # the p99 TTFT capped at 1
    assert loss({"a": _rm({**means, **pct})}) == pytest.approx(np.sqrt(want))
    # a run without percentiles (fitting windows): the mean-only loss, as before
    assert run_loss(means) == pytest.approx((0.01 + 0.04) / 2)
    # weights 0: the percentiles do not count; other weights, other cap
    off = dict.fromkeys(("ttft_p90_steady", "ttft_p99_steady", "e2e_p99_steady"), 0.0)
    assert loss({"a": _rm({**means, **pct}, {**off, "cap": 1.0})}) == pytest.approx(
        np.sqrt(0.05 / 2))
    only99 = {**off, "ttft_p99_steady": 1.0, "cap": 2.0}
    assert run_loss({**means, **pct}, only99) == pytest.approx((0.05 + 4.0) / 3)


def test_scenario_loss_weights_reach_the_run_metrics(data_path):
    n = 50
    sc = hand_scenario(data_path, np.arange(n) * 1e6, np.full(n, 100), np.full(n, 2),
                       ttft_s=np.full(n, 0.01), e2e_s=np.full(n, 0.02))
    mine = {"ttft_p90_steady": 0.0, "ttft_p99_steady": 2.0, "e2e_p99_steady": 0.0, "cap": 0.5}
    m = simulate(replace(sc, loss_weights=mine), CONST, np.array([1000.0])).metrics
    assert m.loss_weights == mine
    assert m.to_dict()["loss_weights"] == mine
    assert simulate(sc, CONST, np.array([1000.0])).metrics.loss_weights == DEFAULT_LOSS_WEIGHTS
