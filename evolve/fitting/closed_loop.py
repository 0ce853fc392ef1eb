"""Closed-loop constant fitting: CMA-ES whose every evaluation re-simulates the runs.

Why: teacher forcing prices a candidate on the batches another model formed. Near
capacity the batches react strongly to the step time (slower steps -> more requests in
flight -> bigger, slower steps), so a teacher-forced optimum can be far off closed loop
(measured here: trained-physics per model, teacher-forced loss 0.04 vs closed-loop 0.17;
refitting closed loop brings CodeLlama's run from 0.18 to 0.007). Closed-loop evaluations
cost ~0.1-0.5 s instead of ~0.2 ms, so this is a *polish* for the programs that matter
(seeds' champion, frontier picks), started from their teacher-forced constants: one CMA-ES
pass per group (no restarts), a wider cma ``tolfun`` and a tenth of the teacher-forced
fit's step size (:data:`SIGMA0`), on the same driver (:func:`evolve.fitting.cmaes.minimize`).

Cost control: each training run is replaced by one slice per load stage
(``Scenario.stage_slices``: ``width_s`` seconds mid-stage, after ``warmup_s`` seconds of
unscored warm-up that fill the batches and KV cache to a steady state), 4-10x cheaper than
the whole run. The loss is the fitting loss (RMS of mean-E2E and mean-TTFT APEs) over the
slices; the official score remains the full closed-loop simulation.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Mapping, Sequence

import numpy as np

from evaluator.api import Evaluator, ProbeBatches, StepModel, loss, ordered_map
from evolve.assess.physics import PhysicsPenalty
from evolve.fitting.bounds import Box, FitResult, group_key
from evolve.fitting.cmaes import PENALTY, minimize
from evolve.fitting.inert import inert_constants, names_of
from evolve.fitting.teacher_forced import Penalised, Shrink, request_pairs
from evolve.program.codegen import step_model
from evolve.program.language import Program
from evolve.text.words import FitStatus, Scope

# CMA-ES's first step in the unit box. From a fitted child, 0.01 (about 10 % on a constant
# boxed over four decades): closed loop, a run at its knee prices step time in a valley a
# few per cent wide, which a teacher-forced start lands beside; at 0.08 (until 2026-12-02)
# the samples jumped over it, and the five seed-study picks polished to training losses
# of 0.027-0.047 where 0.01 reaches 0.020-0.027. From far off (the seeds' refits in
# generation 0: published coefficients, or fits on batches an unfitted seed formed, often
# overloading a slice) the wide step is what moves: at 0.01, 11 of 17 of those refits
# ended worse, three still overloaded. Figures and the rule: docs/selection.md, "The
# polish's step size".
SIGMA0 = 0.01
SEED_SIGMA0 = 0.08
# A closed-loop polish may worsen the validate loss by at most this fraction (the search's
# polish of its pick and an export's refit keep a polish only then): a refit on training
# runs must not buy training loss with the held-out accuracy the pick was chosen for.
VAL_SLACK = 0.02


def validate_holds(was: float, now: float) -> bool:
    """Whether a polish that moved the validate loss from ``was`` to ``now`` may be kept:
    at most ``VAL_SLACK`` worse, or nothing to hold (``was`` NaN: no validate runs)."""
    return math.isnan(was) or now <= was * (1.0 + VAL_SLACK)

TOLERANCES = {"tolfun": 1e-6}  # cma's defaults otherwise; each evaluation is a simulation


def slice_evaluator(ev: Evaluator, names: Sequence[str], width_s: float = 120.0,
                    warmup_s: float = 30.0) -> Evaluator:
    """An evaluator whose scenarios are the stage slices of the named runs (simulated in
    as many threads as ``ev``'s)."""
    out = Evaluator([s for n in names for s in ev.by_name[n].stage_slices(width_s, warmup_s)])
    out.threads = ev.threads
    return out


class SliceObjective:
    """``obj(X[P, n_const]) -> loss[P]``: closed-loop fitting loss on a group's slices.

    One simulation per candidate, in row order (the simulator is not vectorised over
    candidates); non-finite losses (invalid constants, runs that fail) score
    :data:`~evolve.fitting.cmaes.PENALTY`.
    """

    def __init__(self, sl: Evaluator, model: StepModel, runs: Sequence[str]) -> None:
        self.sl, self.model, self.runs = sl, model, list(runs)

    def one(self, x: np.ndarray, per_slice: Mapping[str, np.ndarray] | None = None,
            threads: int | None = None) -> float:
        """The slice loss of one constant vector (or of ``per_slice`` vectors); ``inf`` if
        invalid, also where the program refuses them (e.g. a negative ``queueing_time``:
        the simulator reports it as an invalid result), as the judge scores it."""
        consts = per_slice if per_slice is not None else dict.fromkeys(self.runs, x)
        sims = self.sl.simulate(self.model, consts, names=self.runs, threads=threads)
        return float(loss({n: r.metrics for n, r in sims.items()}, self.runs))

    def __call__(self, X: np.ndarray) -> np.ndarray:
        """The candidates of a CMA-ES generation, several at once when the evaluator has
        threads (a group holds few slices of unequal length; a population of candidates
        keeps the threads busy). Each candidate is simulated alone, so the values are
        those computed one by one, in row order."""
        rows = list(X)
        inner = 1 if len(rows) > 1 else None  # one candidate alone: threads over its slices
        vals = ordered_map(lambda x: self.one(x, threads=inner), rows, self.sl.threads)
        return np.array([v if np.isfinite(v) else PENALTY for v in vals], dtype=np.float64)


def closed_loop_fit(program: Program, ev: Evaluator, names: Sequence[str], scope: str,
                    seed: int, start: Mapping[str, Mapping[str, float]] | None = None,
                    max_evals: int = 200, sigma0: float = SIGMA0, width_s: float = 120.0,
                    warmup_s: float = 30.0,
                    log: Callable[[str], None] | None = None,
                    pool_strength: float = 0.5, prior_strength: float = 0.0,
                    probes: Mapping[str, ProbeBatches] | None = None) -> FitResult:
    """Fit constants closed loop on stage slices of ``names``, group by group.

    Group ``g`` starts from ``start[g]`` exactly (the program's initial values if absent)
    and draws from ``derived_seed(seed, f"closed:{g}", 0)``. ``max_evals`` simulations per
    group, the start included. Status: ``ok`` if some group beat its start, else
    ``no_improvement`` (also when no valid constants were found: the polish then keeps what
    it had; ``loss`` and that group's ``group_loss`` are ``inf``). Scope ``pooled``: each
    model's group is also shrunk towards ``start["global"]`` (kept as it is) with strength
    ``pool_strength / (training runs of the model)``, as in the teacher-forced fit; any
    other group, with ``prior_strength`` > 0, towards the program's declared initial values
    with strength ``prior_strength / (training runs)`` (the teacher-forced fit's prior).
    A constant no step time of the group depends on (its runs' teacher-forced windows if
    the evaluator has them, and ``probes``) keeps its start value, as in the teacher-forced
    fit (:mod:`evolve.fitting.inert`).
    ``probes``: the teacher-forced fit's :class:`evolve.assess.physics.PhysicsPenalty` for the
    group's models, so a polish does not trade the physics checks for slice loss (the
    search would then reject the polished constants and keep the unpolished ones).
    """
    sl = slice_evaluator(ev, names, width_s, warmup_s)
    model = step_model(program)
    box = Box(program)
    init = program.init_vector()
    members: dict[str, list[str]] = {}
    for s in sl.scenarios:
        parent = ev.by_name[s.meta["parent"]]
        members.setdefault(group_key(parent, scope), []).append(s.name)
    groups: dict[str, dict[str, float]] = {}
    g_loss: dict[str, float] = {}
    g_status: dict[str, str] = {}
    inert: dict[str, tuple[str, ...]] = {}
    n_total = 0
    for g in sorted(members):
        x_start = (np.array([start[g][k] for k in program.const_names], dtype=np.float64)
                   if start and g in start else init)
        obj: Callable[[np.ndarray], np.ndarray] = SliceObjective(sl, model, members[g])
        parents = {sl.by_name[s].meta["parent"] for s in members[g]}
        n_runs = len(parents)
        terms: list[Callable[[np.ndarray], np.ndarray]] = []
        if probes:
            models = sorted({ev.by_name[p].model for p in parents} & set(probes))
            if models:
                terms.append(PhysicsPenalty(model, [probes[k] for k in models], PENALTY))
        if scope == Scope.POOLED and start and "global" in start:
            centre = np.array([start["global"][k] for k in program.const_names])
            terms.append(Shrink(box, centre, pool_strength / max(n_runs, 1)))
        elif prior_strength > 0.0:
            terms.append(Shrink(box, init, prior_strength / max(n_runs, 1)))
        if terms:
            obj = Penalised(obj, terms)
        seen = [ev.fit_sets[p].features for p in sorted(parents) if p in ev.fit_sets]
        probe_map = probes or {}
        seen += [probe_map[k].features for k in sorted(
            {ev.by_name[p].model for p in parents} & set(probe_map))]
        fixed = inert_constants(program, model, seen, x_start, box, request_pairs(
            ev, [ev.by_name[p] for p in sorted(parents)]))
        inert[g] = names_of(program, fixed)
        m = minimize(obj, box, x_start, seed=seed,
                     label=f"closed:{g}", max_evals=max_evals, sigma0=sigma0,
                     tolerances=TOLERANCES, snap_start=False,
                     fixed=fixed)
        groups[g] = {k: float(v) for k, v in zip(program.const_names, m.x, strict=True)}
        g_loss[g] = m.f if m.f < PENALTY else float("inf")
        g_status[g] = FitStatus.OK if m.f < m.f0 else FitStatus.NO_IMPROVEMENT
        n_total += m.n_evals
        if log is not None:
            f0 = m.f0 if m.f0 < PENALTY else float("inf")
            log(f"closed-loop fit {g}: slice loss {f0:.4f} -> {g_loss[g]:.4f} "
                f"({m.n_evals} simulations)")

    def slice_consts(gr: Mapping[str, Mapping[str, float]]) -> dict[str, np.ndarray]:
        out = {}
        for s in sl.scenarios:
            vals = gr.get(group_key(ev.by_name[s.meta["parent"]], scope), {})
            out[s.name] = np.array([vals.get(k, v) for k, v in
                                    zip(program.const_names, init, strict=True)])
        return out

    if scope == "pooled" and start and "global" in start:
        groups["global"] = {k: float(v) for k, v in start["global"].items()}
    everything = SliceObjective(sl, model, [s.name for s in sl.scenarios])
    final = everything.one(np.array([]), slice_consts(groups))
    init_loss = everything.one(np.array([]), slice_consts(start or {}))
    status = (FitStatus.OK if any(v == FitStatus.OK for v in g_status.values())
              else FitStatus.NO_IMPROVEMENT)
    return FitResult(groups=groups, loss=final, n_evals=n_total, status=status,
                     init_loss=init_loss, group_status=g_status, group_loss=g_loss,
                     inert=inert)
