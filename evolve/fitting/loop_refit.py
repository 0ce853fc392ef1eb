"""Refit a program's constants for the engine loop it will run in (BLIS's).

Why: constants fitted in vLLM's loop price a step of async-scheduling delay into TTFT that
BLIS's loop (no async scheduling, TTFT + ``OutputTokenProcessingTime``) does not have;
exported as they were, the pick's mean TTFT inside real BLIS came out 31-38 % low. So an
export refits them against the *measured* runs simulated in the target loop, as the search
fits a child (teacher-forced fits on the batches the program forms there, judged closed
loop) and polishes its pick (closed-loop CMA-ES on the stage slices), with the run's scope,
pool and prior strengths, physics probes and budgets, seeded by the program id: the same
program and constants always export the same file. Every constant takes part
(``queueing_time``'s, ``output_token_us``, ``post_decode_us``, the step time's); nothing
is offset by hand. As the search's polish, a group's polish is kept only where its
validate runs hold.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field

from evaluator.api import Evaluator, ProbeBatches, RunMetrics, loss
from evolve.fitting.bounds import const_map, derived_seed, group_key
from evolve.fitting.closed_loop import closed_loop_fit, validate_holds
from evolve.program.codegen import step_model
from evolve.program.language import Program

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
                   tf_evals: int = 300, tf_restarts: int = 1, tf_starts: int = 3,
                   held: Sequence[str] = (),
                   log: Callable[[str], None] | None = None) -> LoopRefit:
    """Refit ``groups`` in ``ev``'s engine loop as the search fits a child; score every run.

    The search's procedure, in the target loop: the runs are simulated at the given
    constants (the batches the program forms there), ``tf_starts`` teacher-forced fits
    from the program's declared values (``tf_evals`` evaluations per group, its scope,
    pool and prior strengths and physics probes) join the given constants as candidates,
    the one with the lowest closed-loop training loss (whole runs) is polished closed loop
    on the stage slices of ``sliced`` (``evals`` simulations per group, as the search's
    final polish), kept group by group where it lowers that group's training loss
    without raising its ``held`` runs' loss by more than ``VAL_SLACK`` (the search's
    polish rule).
    ``train``: the training runs (the loss that decides); ``held``: the validate runs.
    """
    from evolve.fitting.teacher_forced import fit_program

    model = step_model(program)
    seed = refit_seed(program)
    start: Groups = {g: {k: float(v) for k, v in vals.items()} for g, vals in groups.items()}
    names = ev.names()

    def train_loss(at: Groups) -> tuple[float, dict[str, RunMetrics]]:
        sims = _simulate(program, model, ev, at, scope, names)
        return loss(sims, train), sims

    def keep_better(base: Groups, base_loss: float, base_sims: dict[str, RunMetrics],
                    cand: Groups) -> tuple[Groups, float, dict[str, RunMetrics]]:
        def by_group(runs: Sequence[str]) -> dict[str, list[str]]:
            return {g: [n for n in runs if group_key(ev.by_name[n], scope) == g] for g in cand}

        out = better_groups(base, cand, base_sims,
                            _simulate(program, model, ev, cand, scope, names),
                            by_group(train), by_group(held))
        if out == base:
            return base, base_loss, base_sims
        out_loss, out_sims = train_loss(out)
        return (out, out_loss, out_sims) if out_loss < base_loss else (base, base_loss,
                                                                        base_sims)

    start_loss, start_sims = train_loss(start)
    best, best_loss, best_sims = start, start_loss, start_sims
    n_evals = 0
    if tf_evals > 0 and tf_starts > 0:
        ev.refresh_corpora(model, const_map(program, start, ev.scenarios, scope))
        for k in range(tf_starts):
            tf = fit_program(program, ev, train, scope, derived_seed(seed, "loop_tf", k),
                             tf_evals, tf_restarts, probes=probes,
                             pool_strength=pool_strength, prior_strength=prior_strength)
            n_evals += tf.n_evals
            cand = {g: dict(v) for g, v in tf.groups.items()}
            cand_loss, cand_sims = train_loss(cand)
            if log is not None:
                log(f"teacher-forced fit {k + 1}/{tf_starts}: training loss {cand_loss:.4f} "
                    f"closed loop (given constants: {start_loss:.4f})")
            if cand_loss < best_loss:
                best, best_loss, best_sims = cand, cand_loss, cand_sims
    refit: Groups = {g: dict(v) for g, v in best.items()}
    if evals > 0 and sliced:
        res = closed_loop_fit(program, ev, sliced, scope, seed, start=refit, max_evals=evals,
                              width_s=slice_seconds, warmup_s=warmup_seconds, log=log,
                              pool_strength=pool_strength, prior_strength=prior_strength,
                              probes=probes)
        n_evals += res.n_evals
        refit, best_loss, best_sims = keep_better(refit, best_loss, best_sims, res.groups)
    out = LoopRefit(loop=ev.scenarios[0].loop, groups=refit, start_groups=start,
                    n_evals=n_evals, train_loss=best_loss, start_train_loss=start_loss,
                    kept_start=refit == start, metrics=best_sims)
    return out


def better_groups(base: Mapping[str, Mapping[str, float]], cand: Mapping[str, Mapping[str, float]],
                  base_runs: Mapping[str, RunMetrics], cand_runs: Mapping[str, RunMetrics],
                  members: Mapping[str, Sequence[str]],
                  guard: Mapping[str, Sequence[str]] | None = None) -> Groups:
    """``base`` with each group of ``cand`` taken where that group's training runs
    (``members[g]``) score a lower loss in ``cand_runs`` than in ``base_runs`` and its
    held-out runs (``guard[g]``, if any) a loss at most ``VAL_SLACK`` higher.

    Why by group: groups share no run, so the training loss is a sum over groups; judged
    as a whole set, one group's gain was vetoed by another group's loss (seed 7's pick:
    Mixtral's polish, worth 4 points of mean E2E in BLIS, was thrown away that way).
    """
    out = {g: dict(v) for g, v in base.items()}
    for g in sorted(cand):
        runs, held_out = list(members.get(g, ())), list((guard or {}).get(g, ()))
        held = not held_out or validate_holds(loss(base_runs, held_out),
                                              loss(cand_runs, held_out))
        if runs and loss(cand_runs, runs) < loss(base_runs, runs) and held:
            out[g] = dict(cand[g])
    return out


def score_in_loop(program: Program, groups: Mapping[str, Mapping[str, float]], scope: str,
                  ev: Evaluator) -> dict[str, RunMetrics]:
    """Every run of ``ev`` simulated closed loop at ``groups`` (in ``ev``'s loop)."""
    return _simulate(program, step_model(program), ev, groups, scope, ev.names())


def _simulate(program: Program, model, ev: Evaluator, groups: Mapping[str, Mapping[str, float]],
              scope: str, names: Sequence[str]) -> dict[str, RunMetrics]:
    consts = const_map(program, groups, ev.scenarios, scope)
    return {n: r.metrics for n, r in ev.simulate(model, consts, names).items()}
