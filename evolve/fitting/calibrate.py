"""Constants for a model nobody measured: a program calibrated to a reference program.

Why: a searched program's constants are per model (pooled), and the ones it carries for
the measured models do not transfer: a per-step constant of 5.5 ms for Llama-2-7B and
16 ms for Mixtral absorbs the weight read the program has no term for, and a held-out
model given the others' global set misses by 20-2,500 % (docs/selection.md). A reference
built for transfer (the ``layered`` seed, fitted globally: every constant means the same
on every server) predicts an unmeasured model's steps from its config.json alone. This
module hands that knowledge to any program: on the batches the reference simulates for
the unmeasured model's workloads, the program's constants are fitted so that its step
times (each one, in log ratio) and its teacher-forced mean E2E and TTFT per run match the
reference's. No measurement of the model is read: the targets are the reference's
predictions, and the scenarios contribute only their workloads (arrivals and request
sizes, the inputs a capacity planner states).

The program keeps its own shape: a program whose long-context price is steeper than the
reference's keeps it where the reference's batches cannot pin it, under the same physics
penalty as every fit (so, measured, the seed-study picks calibrated this way also land the
held-out reasoning runs closer than the reference does; README).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

import numpy as np

from evaluator.api import ConstMap, Evaluator, ProbeBatches, StepModel
from evolve.assess.physics import PhysicsPenalty, probes_for
from evolve.fitting.bounds import Box, const_map
from evolve.fitting.cmaes import PENALTY, minimize
from evolve.fitting.inert import inert_constants
from evolve.fitting.refit import refit_fold
from evolve.fitting.teacher_forced import (
    DEFAULT_MAX_EVALS,
    DEFAULT_RESTARTS,
    SIGMA0,
    TOLERANCES,
    GroupObjective,
    Penalised,
    fitting_names,
    request_pairs,
)
from evolve.program.codegen import step_model
from evolve.program.language import Program


class MatchObjective(GroupObjective):
    """The teacher-forced loss against the reference's predicted means, combined in
    quadrature with the RMS log ratio of every step time to the reference's.

    Why both: the two means per run are few numbers for the constants that shape a step
    (a program could match them with a wrong split between per-step and per-token cost,
    which a closed-loop run then turns into a queue); the step term pins the shape, the
    means the E2E-only constants (post-decode and per-output-token time, queueing delay)
    that no step time reads."""

    def __init__(self, program: Program, model: StepModel, evaluator: Evaluator,
                 names: Sequence[str], reference: Program, ref_consts: ConstMap) -> None:
        measured = [n for n in names if evaluator.fit_sets[n].meas]
        if measured:
            raise ValueError(f"{measured[0]}: its fitting corpus reads measurements; "
                             "refresh_corpora(..., measured=False) for a calibration")
        scenarios = [evaluator.by_name[n] for n in names]
        super().__init__(program, model, evaluator, scenarios)
        ref_model = step_model(reference)
        logs = []
        for run, sc in zip(self.runs, scenarios, strict=True):
            ref = GroupObjective(reference, ref_model, evaluator, [sc])
            x = np.asarray(ref_consts[sc.name], np.float64)
            ok, ttft, e2e = ref.means(x[None, :])
            run.meas_ttft, run.meas_e2e = float(ttft[0, 0]), float(e2e[0, 0])
            n_req = evaluator.fit_sets[sc.name].req_index.size
            run.valid = bool(ok[0]) and n_req > 0 and min(run.meas_ttft, run.meas_e2e) > 0.0
            with np.errstate(all="ignore"):
                logs.append(np.log(np.broadcast_to(
                    ref_model.vector_fn(ref.F, x), (ref.n,))))
        self.log_ref = np.concatenate(logs) if logs else np.zeros(0)
        self.always_invalid = not all(r.valid for r in self.runs) or not bool(
            np.all(np.isfinite(self.log_ref)))
        self._T = np.zeros((0, 0))

    def _times(self, C: np.ndarray, P: int) -> np.ndarray:
        self._T = super()._times(C, P)  # kept for the step term of this very call
        return self._T

    def __call__(self, X: np.ndarray) -> np.ndarray:
        f = super().__call__(X)
        if self.always_invalid:
            return f
        with np.errstate(all="ignore"):
            d = np.log(self._T) - self.log_ref
            step = np.sqrt(np.mean(d * d, axis=1))
            out = np.sqrt(f * f + step * step)
        return np.where((f >= PENALTY) | ~np.isfinite(out), PENALTY,
                        np.minimum(out, PENALTY))


def calibrate(program: Program, evaluator: Evaluator, names: Sequence[str],
              reference: Program, ref_consts: ConstMap, *, seed: int,
              probes: Mapping[str, ProbeBatches] | None = None,
              max_evals: int = DEFAULT_MAX_EVALS,
              restarts: int = DEFAULT_RESTARTS) -> tuple[dict[str, float], float]:
    """One constant set for ``program`` on the named runs (one model's), matched to
    ``reference`` at ``ref_consts`` (module docstring); returns it and the match loss.

    The evaluator's corpora for ``names`` must be the reference's own batches, kept
    without measurements (``evaluator.refresh_corpora(step_model(reference), ref_consts,
    names=names, measured=False)``; a ``ValueError`` otherwise): the program is judged on
    what the reference would have scheduled, against what the reference predicts there.
    CMA-ES starts from the program's declared values (nothing fitted on other models leaks
    in) and keeps the search's physics penalty (``probes``: model name -> synthetic
    batches)."""
    names = fitting_names(evaluator, names, "calibrate")
    model = step_model(program)
    base = MatchObjective(program, model, evaluator, names, reference, ref_consts)
    models = sorted({evaluator.by_name[n].model for n in names} & set(probes or {}))
    terms = ([PhysicsPenalty(model, [(probes or {})[k] for k in models], PENALTY)]
             if models else [])
    obj = Penalised(base, terms) if terms else base
    start = program.init_vector()
    if program.n_constants == 0:
        return {}, float(obj(start[None, :])[0])
    box = Box(program)
    seen = [base.F, *((probes or {})[k].features for k in models)]
    fixed = inert_constants(program, model, seen, start, box,
                            request_pairs(evaluator, [evaluator.by_name[n] for n in names]))
    m = minimize(obj, box, start, seed=seed, label="calibrate", max_evals=max_evals,
                 sigma0=SIGMA0, restarts=restarts, tolerances=TOLERANCES, fixed=fixed)
    return ({k: float(v) for k, v in zip(program.const_names, m.x, strict=True)},
            float(m.f) if m.f < PENALTY else float("inf"))


def carry(program: Program, reference: Program, evaluator: Evaluator, fit_on: Sequence[str],
          unseen: Sequence[str], *, seed: int, max_evals: int, prior: float,
          pool: float) -> dict[str, Any]:
    """docs/selection.md's rule for a model nobody measured, for any ``program``: the
    ``reference`` fitted with one global set on the measured runs ``fit_on`` as the rule's
    own LOMO fold is (teacher forced, ``max_evals``, no polish), its batches for the
    ``unseen`` runs (kept without measurements), and ``program`` calibrated to it there.
    Returns the reference's set, the calibrated set and the match loss."""
    ref_groups = refit_fold(reference, evaluator, list(fit_on), "global", {}, seed, max_evals,
                            0, prior, pool)
    ref_consts = const_map(reference, ref_groups, [evaluator.by_name[n] for n in unseen],
                           "global")
    evaluator.refresh_corpora(step_model(reference), ref_consts, names=list(unseen),
                              measured=False)
    calibrated, match = calibrate(program, evaluator, list(unseen), reference, ref_consts,
                                  seed=seed, probes=probes_for(evaluator, list(unseen)))
    return {"reference": ref_groups["global"], "calibrated": calibrated,
            "match_loss": match}
