"""One fold's refit, as `evolve generalize` does it: the fold's own batches, a teacher-forced
fit with the search's physics penalty, then an optional closed-loop polish.

Why a module of its own: `evolve generalize` (every fold), `evolve calibrate` (the rule's
global set before a calibration) and ``scripts/transfer_rank.py`` must fit the same way,
and commands do not import each other.
"""

from __future__ import annotations

from evaluator.api import Evaluator
from evolve.assess.physics import probes_for
from evolve.fitting.bounds import const_map
from evolve.fitting.closed_loop import closed_loop_fit
from evolve.fitting.teacher_forced import fit_program
from evolve.program.codegen import step_model
from evolve.program.language import Program

Groups = dict[str, dict[str, float]]


def refit_fold(program: Program, ev: Evaluator, train: list[str], scope: str,
               start_groups: Groups, seed: int, max_evals: int, polish_evals: int,
               prior: float, pool: float) -> Groups:
    """One fold's constants: the fold's runs re-simulated with the program at
    ``start_groups`` (its batches, not another model's), a teacher-forced fit with the
    search's physics penalty, then a closed-loop polish (none at ``polish_evals=0``)."""
    model = step_model(program)
    ev.refresh_corpora(model, const_map(program, start_groups, ev.scenarios, scope),
                       names=train)
    probes = probes_for(ev, train)  # the same physics penalty as the search's fits
    fitted = fit_program(program, ev, train, scope, seed=seed, max_evals=max_evals,
                         probes=probes, prior_strength=prior, pool_strength=pool).groups
    if polish_evals > 0:
        fitted = closed_loop_fit(program, ev, train, scope, seed, start=fitted,
                                 max_evals=polish_evals, prior_strength=prior,
                                 pool_strength=pool, probes=probes).groups
    return fitted
