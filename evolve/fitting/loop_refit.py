"""Refit a program's constants for the engine loop it will run in (BLIS's), closed loop.

Why: constants fitted in vLLM's loop price a step of async-scheduling delay into TTFT that
BLIS's loop (no async scheduling, TTFT + ``OutputTokenProcessingTime``) does not have;
exported as they were, the pick's mean TTFT inside real BLIS came out 31-38 % low. So an
export refits them against the *measured* runs simulated in the target loop, by the
search's polish rules (closed-loop CMA-ES on the training runs' stage slices, the run's
scope, pool and prior strengths, physics probes and budget), from the fitted constants,
seeded by the program id: the same program and constants always export the same file.
Every constant takes part (``queueing_time``'s, ``output_token_us``, ``post_decode_us``,
the step time's); nothing is offset by hand.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field

from evaluator.api import Evaluator, ProbeBatches, RunMetrics, loss
from evolve.codegen import step_model
from evolve.fitting.bounds import FitResult, const_map
from evolve.fitting.closed_loop import closed_loop_fit
from evolve.language import Program

Groups = dict[str, dict[str, float]]


@dataclass
class LoopRefit:
    """Constants for ``loop`` and how they score there (closed loop, whole runs)."""

    loop: str
    groups: Groups
    start_groups: Groups
    n_evals: int = 0
    train_loss: float = float("inf")  # training runs, closed loop in ``loop``, refit
    start_train_loss: float = float("inf")  # the same at the constants it started from
    kept_start: bool = False  # the refit did not beat its start; its start is returned
    metrics: dict[str, RunMetrics] = field(default_factory=dict)  # every run, at ``groups``


def refit_seed(program: Program) -> int:
    """The refit's CMA-ES seed: a function of the program id alone (an export is
    reproducible without the run that found the program)."""
    return int(program.id[:15], 16)


def refit_for_loop(program: Program, groups: Mapping[str, Mapping[str, float]], scope: str,
                   ev: Evaluator, train: Sequence[str], sliced: Sequence[str], *,
                   evals: int, pool_strength: float, prior_strength: float,
                   probes: Mapping[str, ProbeBatches] | None = None,
                   slice_seconds: float = 120.0, warmup_seconds: float = 30.0,
                   log: Callable[[str], None] | None = None) -> LoopRefit:
    """Refit ``groups`` closed loop in ``ev``'s engine loop; score every run there.

    ``train``: the training runs (the loss that decides); ``sliced``: those of them the
    closed-loop fit simulates in stage slices (the search's rule). Scope ``pooled``: the
    ``global`` set (what a model nobody measured gets) is refitted first as one global
    set on every sliced run, towards the program's declared values, then each model's
    set towards it, as the search's pooled fit shrinks them. The refit is kept only if
    its training loss (whole runs, closed loop) beats its start's.
    """
    model = step_model(program)
    seed = refit_seed(program)
    start: Groups = {g: {k: float(v) for k, v in vals.items()} for g, vals in groups.items()}
    refit: Groups = {g: dict(v) for g, v in start.items()}
    n_evals = 0
    def fit(in_scope: str, at: Groups) -> FitResult:
        return closed_loop_fit(program, ev, sliced, in_scope, seed, start=at, max_evals=evals,
                               width_s=slice_seconds, warmup_s=warmup_seconds, log=log,
                               pool_strength=pool_strength, prior_strength=prior_strength,
                               probes=probes)

    if evals > 0 and sliced:
        if scope == "pooled" and "global" in start:
            glob = fit("global", {"global": start["global"]})
            refit["global"] = glob.groups["global"]
            n_evals += glob.n_evals
        res = fit(scope, refit)
        refit.update(res.groups)
        n_evals += res.n_evals
    out = LoopRefit(loop=ev.scenarios[0].loop, groups=refit, start_groups=start,
                    n_evals=n_evals)
    names = ev.names()
    before = _simulate(program, model, ev, start, scope, names)
    after = before if refit == start else _simulate(program, model, ev, refit, scope, names)
    out.start_train_loss = loss(before, train)
    out.train_loss = loss(after, train)
    if not out.train_loss < out.start_train_loss:
        out.groups, out.train_loss, out.kept_start = start, out.start_train_loss, True
        after = before
    out.metrics = after
    return out


def score_in_loop(program: Program, groups: Mapping[str, Mapping[str, float]], scope: str,
                  ev: Evaluator) -> dict[str, RunMetrics]:
    """Every run of ``ev`` simulated closed loop at ``groups`` (in ``ev``'s loop)."""
    return _simulate(program, step_model(program), ev, groups, scope, ev.names())


def _simulate(program: Program, model, ev: Evaluator, groups: Mapping[str, Mapping[str, float]],
              scope: str, names: Sequence[str]) -> dict[str, RunMetrics]:
    consts = const_map(program, groups, ev.scenarios, scope)
    return {n: r.metrics for n, r in ev.simulate(model, consts, names).items()}
