"""The transfer loss: how a program prices a model whose runs its constants never saw.

Why: a simulator is asked about models nobody measured, and a program whose constants
carry the architecture (a per-model KV multiplier, a per-model step cost standing in for
the weight read the search dropped) fits every measured model and transfers to none. The
training loss cannot tell the two apart: each model's constants are fitted on that
model's own runs. So the transfer has to be measured, per program, and priced.

For every model with training runs, one global constant set is fitted on the *other*
models' training runs and prices the held-out model's training runs, teacher forced. That
is ``evolve generalize --mode lomo`` on the training split, cheapened: one teacher-forced
CMA-ES start of ``fit.max_evals``, no closed-loop polish. A held-out model gets the global
set in every scope, and a pooled fit fits that set first, on every run, before and
independent of the models' own sets; so the fold fits the global set alone (bitwise the
same set as the pooled fit's, at a quarter of its cost with three models left).
The fitting seed comes from the program's id, so the transfer loss is a property of the
program and the corpora: the child's fit, the last generation's polish, a corpus refresh's
re-score and ``evolve replay`` all compute the same number.

The held-out scores are stored with the program's metrics as ``<run>~lomo`` entries, split
``transfer``, mode ``lomo_teacher_forced``; the transfer loss is the training loss's
formula (RMS of mean-E2E and mean-TTFT APEs) over them. The search loss, which the grid,
NSGA-II, the frontier and the pick's tolerance read, is then

    sqrt(train^2 + transfer_weight * max(0, transfer - transfer_margin)^2)

a hinge: transfer within the margin costs nothing, so a program is not pushed to give up
accuracy on the measured models once it transfers well enough. Only training runs are read.

Off by default (``transfer_weight`` 0): it failed the rules set for a default, and it does
not rank programs by their real leave-one-model-out; the measurements:
docs/notes/2026-11-26-transfer-in-the-search.md.
"""

from __future__ import annotations

import math
from typing import TYPE_CHECKING

from evaluator.api import RunMetrics
from evolve.assess.heldout import fitting_loss
from evolve.fitting import const_map, fit_program
from evolve.program.codegen import step_model
from evolve.program.language import Program

if TYPE_CHECKING:
    from evolve.search.context import RunContext

__all__ = ["MODE", "SPLIT", "SUFFIX", "fitting_loss", "search_loss", "transfer_metrics"]

SPLIT = "transfer"
MODE = "lomo_teacher_forced"
SUFFIX = "~lomo"


def transfer_metrics(ctx: RunContext, program: Program) -> dict[str, RunMetrics]:
    """Per training run, its teacher-forced metrics under constants fitted without its model
    (``<run>~lomo`` -> metrics); empty when the training runs hold fewer than two models.

    Raises what fitting or scoring raises (``ArithmeticError``, ``ValueError``,
    ``KeyError``); the caller turns it into a rejection reason.
    """
    ev = ctx.evaluator
    models = sorted({ev.by_name[n].model for n in ctx.train})
    if len(models) < 2:
        return {}
    seed = int(program.id[:12], 16)
    model = step_model(program)
    out: dict[str, RunMetrics] = {}
    for held in models:
        rest = [n for n in ctx.train if ev.by_name[n].model != held]
        mine = [n for n in ctx.train if ev.by_name[n].model == held]
        fit = fit_program(program, ev, rest, "global", seed, ctx.max_evals, ctx.restarts,
                          probes=ctx.probes, pool_strength=ctx.pool_strength,
                          prior_strength=ctx.prior_strength)
        if not fit.groups:
            raise ValueError(f"fit without {held} failed: {fit.status}")
        for name, rm in ev.score(model, const_map(program, fit.groups, ev.scenarios, "global"),
                                 names=mine).items():
            rm.split = SPLIT
            out[name + SUFFIX] = rm
    return out


def search_loss(train: float, transfer: float, weight: float, margin: float) -> float:
    """The loss the search ranks by (module docstring); the training loss when the
    transfer is off (``weight`` 0) or unmeasured (nan: fewer than two models)."""
    if weight <= 0 or math.isnan(transfer):
        return train
    excess = max(0.0, transfer - margin)
    return math.sqrt(train * train + weight * excess * excess)
