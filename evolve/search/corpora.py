"""Re-simulating the corpora (the batches teacher forcing prices programs on).

Why a separate step: teacher forcing scores a program on batches formed by another model;
the loop refreshes them with its champion now and then (``evolve.search.refresh``), and
must be able to put the old ones back if the champion turns out worse closed loop.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from evaluator.api import Evaluator, loss
from evolve.fitting import const_map
from evolve.program.codegen import step_model
from evolve.program.language import Program
from evolve.search.context import RunContext


def refresh(ctx: RunContext, program: Program, groups: dict[str, dict[str, float]],
            scope: str, progress: Callable[[str], None] | None = None,
            strict: bool = False) -> tuple[str, float]:
    """Re-simulate every scenario closed loop with ``program``.

    Returns the new corpus version and the program's *closed-loop* training loss (teacher
    forcing on a whole corpus with the program that produced it reproduces the closed
    loop), the official score the loop uses to decide whether to keep the new corpora.
    """
    ev = ctx.evaluator
    consts = const_map(program, groups, ev.scenarios, scope)
    model = step_model(program)
    version = ev.refresh_corpora(model, consts, ctx.window_steps, names=ctx.names,
                                 progress=progress, strict=strict)
    official = ev.score(model, consts, names=ctx.train, full=True)
    return version, float(loss(official, ctx.train))


def save_corpora(ev: Evaluator) -> tuple[dict[str, Any], dict[str, Any], str]:
    """The evaluator's current corpora, to put back if a refresh is not adopted."""
    return dict(ev.corpora), dict(ev.fit_sets), ev.corpus_version


def restore_corpora(ev: Evaluator, saved: tuple[dict[str, Any], dict[str, Any], str]) -> None:
    ev.corpora, ev.fit_sets, ev.corpus_version = dict(saved[0]), dict(saved[1]), saved[2]

