"""Scoring: the loss, fitting windows, and the simulator reproducing BLIS's published miss."""

from __future__ import annotations

import numpy as np
import pytest

from evaluator.api import Evaluator
from evaluator.scoring.baselines import (
    LINEAR,
    LINEAR_INIT,
    ROOFLINE,
    TRAINED_PHYSICS,
    roofline_consts,
    trained_physics_consts,
)
from evaluator.scoring.score import RunMetrics, loss


def _rm(e2e: float, ttft: float, valid: bool = True) -> RunMetrics:
    return RunMetrics("r", "train", "m", "w", ape={"e2e_mean": e2e, "ttft_mean": ttft},
                      valid=valid)


def test_loss_is_rms_of_e2e_and_ttft_apes():
    m = {"a": _rm(0.1, 0.3), "b": _rm(0.0, 0.0)}
    assert loss(m, ["a", "b"]) == pytest.approx(np.sqrt((0.01 + 0.09) / 4))
    assert loss({"a": _rm(0.1, 0.1, valid=False)}, ["a"]) == float("inf")
    assert loss(m, []) == float("inf")


def test_fitting_windows_track_the_full_corpus(small_evaluator):
    ev = small_evaluator
    consts = {s.name: trained_physics_consts(s) for s in ev.scenarios}
    ev.refresh_corpora(TRAINED_PHYSICS, consts)
    assert len(ev.corpus_version) == 16
    fit = ev.score(TRAINED_PHYSICS, consts)
    full = ev.score(TRAINED_PHYSICS, consts, full=True)
    for name in ev.names():
        assert ev.fit_sets[name].req_index.size >= 50
        assert fit[name].valid
        # windows are a subsample: same ballpark as the whole run, not identical
        assert fit[name].pred["e2e_mean"] == pytest.approx(full[name].pred["e2e_mean"], rel=0.25)
    slower = {n: c * np.where(np.arange(c.size) < 11, 1.5, 1.0) for n, c in consts.items()}
    assert all(ev.score(TRAINED_PHYSICS, slower)[n].pred["e2e_mean"] > fit[n].pred["e2e_mean"]
               for n in ev.names())


def test_invalid_step_times_give_reasons(small_evaluator):
    ev = small_evaluator
    ev.refresh_corpora(LINEAR, dict.fromkeys(ev.names(), LINEAR_INIT))
    neg = ev.score(LINEAR, dict.fromkeys(ev.names(), np.array([-1e6, 0.0, 0.0])))
    assert all(not m.valid and "-1000000.0 us at step 0" in m.reason for m in neg.values())
    nan = ev.score(LINEAR, dict.fromkeys(ev.names(), np.array([np.nan, 0.0, 0.0])))
    assert all(not m.valid and "step time nan us" in m.reason for m in nan.values())
    huge = ev.score(LINEAR, dict.fromkeys(ev.names(), np.array([2e12, 0.0, 0.0])))
    assert all(not m.valid and "below 1e+12" in m.reason for m in huge.values())  # as closed loop


def test_blis_trained_physics_misses_as_published(all_scenarios):
    """BLIS's default model lands within 10 % mean E2E on only 3 of the 12 non-overloaded
    runs, Llama-2-7B 45-57 % high (DEVELOPERS brief): our simulator must agree."""
    ev = Evaluator([s for s in all_scenarios if s.workload != "reasoning"])
    sims = ev.simulate(TRAINED_PHYSICS, {s.name: trained_physics_consts(s)
                                         for s in ev.scenarios})
    ape = {n: r.metrics.ape["e2e_mean"] for n, r in sims.items()}
    assert sum(v < 0.10 for v in ape.values()) == 3
    seven = [v for n, v in ape.items() if "llama-2-7b-" in n and "general" not in n]
    assert all(0.40 < v < 0.60 for v in seven)


def test_roofline_underestimates_llama_70b(all_scenarios):
    sc = next(s for s in all_scenarios if "70b-hf-tp4-codegen" in s.name).head(200.0)
    res = Evaluator([sc]).simulate(ROOFLINE, {sc.name: roofline_consts(sc)})[sc.name]
    assert res.metrics.pred["e2e_mean"] < 0.7 * res.metrics.meas["e2e_mean"]
