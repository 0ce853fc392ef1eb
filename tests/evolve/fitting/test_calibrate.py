"""Calibrating a program to a reference program (constants for a model nobody measured):
the match objective is zero exactly at the reference, a calibration finds the reference's
step times from the declared values, reads no measurement, and is deterministic."""

from __future__ import annotations

import dataclasses

import numpy as np
import pytest
from fit_helpers import seed_program

from evaluator.api import Evaluator
from evaluator.data.scenarios import Measured
from evolve.assess.physics import probes_for
from evolve.fitting.calibrate import MatchObjective, calibrate
from evolve.program.codegen import step_model

RUN = "20260217-202857-llama-2-70b-tp4-general"  # one model's run, as a LOMO fold has
# the roofline seed at other constants than it declares (1.5, 1.2, 1.0, 3000)
REFERENCE = np.array([{"compute_eff": 2.0, "memory_eff": 1.5, "comm": 1.0,
                       "overhead_us": 6000.0}[k] for k in seed_program("roofline").const_names])


def _on_reference_batches(ev: Evaluator) -> dict[str, np.ndarray]:
    """The roofline seed at :data:`REFERENCE` simulates RUN; its batches become the
    corpus (as `evolve generalize` refreshes the held-out runs with `layered`)."""
    ref_consts = {RUN: REFERENCE.copy()}
    ev.refresh_corpora(step_model(seed_program("roofline")), ref_consts, names=[RUN],
                       measured=False)
    return ref_consts


def _log_rms(ev: Evaluator, program, x: np.ndarray, ref: np.ndarray) -> float:
    F = ev.fit_sets[RUN].features
    roof = step_model(seed_program("roofline"))
    got = step_model(program).vector_fn(F, x)
    return float(np.sqrt(np.mean(np.log(got / roof.vector_fn(F, ref)) ** 2)))


def test_the_match_objective_is_zero_at_the_reference(small_evaluator):
    """The same program at the reference's constants predicts the same steps and the same
    means: nothing but the reference enters the target."""
    p = seed_program("roofline")
    ref_consts = _on_reference_batches(small_evaluator)
    obj = MatchObjective(p, step_model(p), small_evaluator, [RUN], p, ref_consts)
    at = obj(np.vstack([REFERENCE, p.init_vector()]))
    assert at[0] == pytest.approx(0.0, abs=1e-12)
    assert at[1] > 0.05  # the declared values price the steps differently


def test_calibration_finds_the_reference_step_times(small_evaluator):
    """From the declared values (3 ms overhead where the reference has 6 ms), the
    calibrated roofline's steps are within 1 % of the reference's; a different program shape
    (the linear seed) gets much closer than it starts, and the same seed gives the same
    constants."""
    ref_consts = _on_reference_batches(small_evaluator)
    roof = seed_program("roofline")
    probes = probes_for(small_evaluator, [RUN])
    consts, match = calibrate(roof, small_evaluator, [RUN], roof, ref_consts, seed=3,
                              probes=probes, max_evals=600)
    x = np.array([consts[k] for k in roof.const_names])
    assert _log_rms(small_evaluator, roof, roof.init_vector(), REFERENCE) > 0.2
    assert _log_rms(small_evaluator, roof, x, REFERENCE) < 0.01
    assert match < 0.01
    # (not the constants themselves: one model's weight read is one number, so its memory
    # efficiency and the per-step overhead trade freely on its batches)

    linear = seed_program("linear")
    lin, lin_match = calibrate(linear, small_evaluator, [RUN], roof, ref_consts, seed=3,
                               probes=probes, max_evals=600)
    xl = np.array([lin[k] for k in linear.const_names])
    assert _log_rms(small_evaluator, linear, xl, REFERENCE) < \
        0.5 * _log_rms(small_evaluator, linear, linear.init_vector(), REFERENCE)
    again, _ = calibrate(linear, small_evaluator, [RUN], roof, ref_consts, seed=3,
                         probes=probes, max_evals=600)
    assert again == lin and np.isfinite(lin_match)


def test_calibration_reads_no_measurement(small_evaluator):
    """The calibration's requests are every one the reference completed, with no measured
    target; a corpus kept with the measurements (a search's) is refused."""
    ref_consts = _on_reference_batches(small_evaluator)
    fit = small_evaluator.fit_sets[RUN]
    corpus = small_evaluator.corpora[RUN]
    done = (corpus.last_step >= 0) & ~corpus.aborted & (corpus.first_step >= 0)
    assert fit.meas == {} and fit.req_index.size and done[fit.req_index].all()
    # the run's measurements replaced by junk (every request failed, no latency): the same
    # requests and the same calibration, so nothing measured was read
    sc = small_evaluator.by_name[RUN]
    m = sc.measured
    junk = Measured(e2e_s=np.full_like(m.e2e_s, np.nan), ttft_s=np.full_like(m.ttft_s, np.nan),
                    failed=np.ones_like(m.failed), summary={})
    blind = Evaluator([dataclasses.replace(s, measured=junk) if s.name == RUN else s
                       for s in small_evaluator.scenarios])
    _on_reference_batches(blind)
    assert np.array_equal(blind.fit_sets[RUN].req_index, fit.req_index)
    roof, linear = seed_program("roofline"), seed_program("linear")
    assert calibrate(linear, blind, [RUN], roof, ref_consts, seed=3, max_evals=200) == \
        calibrate(linear, small_evaluator, [RUN], roof, ref_consts, seed=3, max_evals=200)
    small_evaluator.refresh_corpora(step_model(roof), ref_consts, names=[RUN])
    assert small_evaluator.fit_sets[RUN].meas  # a search's corpus carries the targets
    with pytest.raises(ValueError, match="reads measurements"):
        calibrate(roof, small_evaluator, [RUN], roof, ref_consts, seed=1)


def test_calibration_needs_the_reference_batches(small_evaluator):
    roof = seed_program("roofline")
    with pytest.raises(ValueError, match="refresh_corpora first"):
        calibrate(roof, small_evaluator, [RUN], roof, {RUN: REFERENCE}, seed=1)
    with pytest.raises(ValueError, match="at least one scenario"):
        calibrate(roof, small_evaluator, [], roof, {}, seed=1)
