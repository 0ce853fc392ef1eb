"""evaluator.sim.sensitivity: a scaled model is the model times the factor, and the E2E
response is exactly the step-time change without a queue and amplified at a knee."""

from __future__ import annotations

import numba as nb
import numpy as np
import pytest

from evaluator.api import Evaluator, StepModel
from evaluator.data.scenarios import make_scenario
from evaluator.sim.sensitivity import e2e_response, scaled
from evaluator.sim.simulator import _STEP_SIG, simulate

D = 1000.0  # µs per step


@nb.njit(_STEP_SIG)
def _const_scalar(f, c):
    return c[0]


CONST = StepModel("const", lambda F, c: np.full(F.shape[1], c[0]), _const_scalar)


def _one_at_a_time(data_path, gap_steps: float, n: int = 50):
    """``n`` requests of 10 steps each (a 600-token prefill, then 9 decodes), one running
    at a time, arriving every ``gap_steps`` steps."""
    return make_scenario("knee", np.arange(n) * gap_steps * D, [600] * n, [10] * n,
                         model_dir=data_path / "models" / "Llama-2-7b-hf",
                         hardware=data_path / "hardware" / "h100-sxm.json", max_num_seqs=1)


def test_scaled_multiplies_both_forms(data_path):
    sc = _one_at_a_time(data_path, 20.0, n=1)
    slow = scaled(CONST, 1.5)
    assert slow.name == "const*1.5"
    F = np.zeros((3, 4))
    assert np.array_equal(slow.vector_fn(F, np.array([D])), np.full(4, 1.5 * D))
    base = simulate(sc, CONST, np.array([D])).metrics.pred["e2e_mean"]
    assert simulate(sc, slow, np.array([D])).metrics.pred["e2e_mean"] == \
        pytest.approx(1.5 * base, rel=1e-12)


def _response(sc):
    ev = Evaluator([sc])
    consts = {sc.name: np.array([D])}
    return e2e_response(ev.simulate, CONST, consts, ev.simulate(CONST, consts))[sc.name]


def test_without_a_queue_e2e_follows_the_step_time(data_path):
    r = _response(_one_at_a_time(data_path, 20.0))  # half loaded: no request waits
    assert r["minus"] == pytest.approx(-0.03, abs=1e-9)
    assert r["plus"] == pytest.approx(0.03, abs=1e-9)


def test_at_the_knee_a_slower_step_builds_a_queue(data_path):
    # service takes 10 steps, a request arrives every 10.15: 3 % slower steps no longer
    # keep up and every request waits behind the last (the n-th by 0.15 n steps)
    r = _response(_one_at_a_time(data_path, 10.15))
    assert r["minus"] == pytest.approx(-0.03, abs=1e-9)
    assert r["plus"] > 0.3
    assert r["failed_minus"] == r["failed_plus"] == 0.0  # no client timeout is reached


def test_delta_outside_zero_one_is_refused(data_path):
    sc = _one_at_a_time(data_path, 20.0, n=1)
    with pytest.raises(ValueError, match="delta"):
        e2e_response(Evaluator([sc]).simulate, CONST, {sc.name: np.array([D])}, {},
                     delta=1.5)
