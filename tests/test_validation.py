"""evolve.validation: the decode interval by admission time, on known arrays and on the
overloaded validate run whose drift docs/selection.md and evaluator/simulator.py describe."""

from __future__ import annotations

import json

import numpy as np
import pytest

from evolve.cli import main
from evolve.validation import DRIFT_MIN_REQUESTS, decode_drift

MIXTRAL_REASONING = "20260218-135247-mixtral-8x7b-v0-1-tp2-reasoning"


def _side(admit_s: np.ndarray, itl_ms: np.ndarray, out: int = 101) -> tuple[np.ndarray, ...]:
    """Completed requests with the given admission times and decode intervals."""
    arrival = admit_s - 5.0
    ttft = np.full(admit_s.shape, 5.0)
    e2e = ttft + itl_ms * 1e-3 * (out - 1)
    return arrival, ttft, e2e, np.full(admit_s.shape, out)


def test_decode_drift_windows_by_admission_time():
    n = DRIFT_MIN_REQUESTS
    admit = np.concatenate([np.linspace(1, 99, n), np.linspace(101, 199, n),
                            np.linspace(201, 220, n - 1)])  # the last window is short of n
    itl = np.concatenate([np.full(n, 30.0), np.full(n, 40.0), np.full(n - 1, 50.0)])
    flat = np.full(admit.shape, 31.0)
    rows = decode_drift(_side(admit, itl), _side(admit, flat), window_s=100.0)
    assert [(r["from_s"], r["to_s"]) for r in rows] == [(0, 100), (100, 200), (200, 300)]
    assert rows[0]["measured_ms"] == pytest.approx(30.0)
    assert rows[1]["measured_ms"] == pytest.approx(40.0)
    assert rows[2]["measured_ms"] is None and rows[2]["measured_n"] == n - 1
    assert [r["simulated_ms"] for r in rows[:2]] == [pytest.approx(31.0)] * 2
    # a side with no completed request reports nothing, the other side still does
    empty = tuple(np.zeros(0) for _ in range(4))
    rows = decode_drift(_side(admit, itl), empty, window_s=100.0)
    assert len(rows) == 3 and all(r["simulated_ms"] is None for r in rows)
    assert rows[0]["measured_ms"] == pytest.approx(30.0)


def test_validate_reports_the_drift_of_the_overloaded_validate_run(capsys, data_path):
    code = main(["validate", "layered", "--data", str(data_path), "--split", "validate",
                 "--json", "--no-plots"])
    assert code == 0
    out = json.loads(capsys.readouterr().out)
    assert set(out["admission_drift"]) == {MIXTRAL_REASONING}  # the only run that queues
    rows = [r for r in out["admission_drift"][MIXTRAL_REASONING]
            if r["measured_ms"] is not None]
    # measured: the batch is full throughout, yet the interval grows with the wait
    assert rows[-1]["measured_ms"] > 1.15 * rows[0]["measured_ms"]
    every = out["admission_drift"][MIXTRAL_REASONING]
    meas = out["runs"][MIXTRAL_REASONING]["meas"]
    assert sum(r["measured_n"] for r in every) == 4800 - meas["failures"]  # every completion
    assert any(r["simulated_ms"] is not None for r in out["admission_drift"][
        MIXTRAL_REASONING])
