"""Polishing: refit constants closed loop for the programs that matter.

Why: teacher-forced constants are a good start but not the closed-loop optimum; CMA-ES on
the stage slices (:func:`evolve.fitting.closed_loop_fit`) finds it, at ~1000x the cost of
a teacher-forced evaluation. So it is spent on the seeds (generation 0) and on the pick
and the champion (last generation) only. A polished evaluation is kept only if it beats
the program's current training loss (so the grid stays consistent) without worsening its
validate loss by more than ``VAL_SLACK``: a refit on short-context training slices must
not buy training loss with the held-out accuracy the pick was chosen for.
"""

from __future__ import annotations

from typing import Any

from evolve.config.schema import Config
from evolve.fitting import closed_loop_fit, group_key
from evolve.fitting.closed_loop import SIGMA0, validate_holds
from evolve.program.language import Program, parse_program
from evolve.search.books import Books
from evolve.search.context import RunContext, Scored
from evolve.search.grid import Elite
from evolve.search.judge import score_program
from evolve.search.rng import child_seed


def declared_groups(ctx: RunContext, prog: Program) -> dict[str, dict[str, float]]:
    """Every training group of the run at the program's declared initial constants."""
    init = {k: float(v) for k, v in zip(prog.const_names, prog.init_vector(), strict=True)}
    keys = {group_key(ctx.evaluator.by_name[n], ctx.scope) for n in ctx.train}
    if ctx.scope == "pooled":
        keys.add("global")
    return {k: dict(init) for k in sorted(keys)}


def closed_refit(ctx: RunContext, cfg: Config, prog: Program, res: Scored, evals: int,
                 salt: int, g: int, sigma0: float = SIGMA0) -> Scored:
    """``res`` or, if better, its constants refitted closed loop on the stage slices.

    The refit starts from the better (closed loop) of ``res`` and the program's *declared*
    constants: a seed declares published coefficients (BLIS's trained physics), which
    price long contexts well, and a teacher-forced fit on short-context batches can land
    far from them on constants that overload a run closed loop. ``sigma0``: CMA-ES's first
    step, small from a fitted child (the default), wide for the seeds of generation 0
    (``closed_loop.SEED_SIGMA0``).
    """
    sliced = sorted(set(ctx.slice_parent.values()) & set(ctx.train))
    if not sliced:
        return res
    declared = score_program(ctx, prog, declared_groups(ctx, prog))
    if declared.ok and (not res.ok or declared.loss < res.loss):
        declared.n_evals = res.n_evals
        res = declared
    if not res.ok:
        return res
    fit = closed_loop_fit(prog, ctx.evaluator, sliced, ctx.scope,
                          child_seed(cfg.run.seed, g, salt), start=res.groups,
                          max_evals=evals, sigma0=sigma0, width_s=cfg.fit.slice_seconds,
                          warmup_s=cfg.fit.slice_warmup_seconds,
                          pool_strength=ctx.pool_strength,
                          prior_strength=ctx.prior_strength, probes=ctx.probes)
    out = score_program(ctx, prog, fit.groups)
    out.n_evals = res.n_evals + fit.n_evals
    # a refit on the training slices must not buy training loss with held-out accuracy
    held = validate_holds(res.val_loss, out.val_loss)
    return out if out.ok and out.loss < res.loss and held else res


def refit_job(ctx: RunContext, cfg: Config, source: str, res: Scored, evals: int, salt: int,
              g: int, sigma0: float = SIGMA0) -> tuple[bool, Scored]:
    """:func:`closed_refit` as a pure job for the executor: (improved, outcome)."""
    out = closed_refit(ctx, cfg, parse_program(source), res, evals, salt, g, sigma0)
    return out is not res, out


def polish(books: Books, ctx: RunContext, cfg: Config, g: int, log: Any,
           pool: Any = None) -> list[Any]:
    """Refit the frontier pick and the champion closed loop (last generation only; in
    parallel when an executor is given)."""
    st = books.state
    if ctx.slices is None:
        return []
    targets: list[Elite] = []
    for e in (books.frontier().pick(), books.champion()):
        if e is not None and e.program_id not in [t.program_id for t in targets]:
            targets.append(e)
    rows: list[Any] = []
    jobs = []
    for i, e in enumerate(targets):
        info = st.info[e.program_id]
        current = Scored(info.groups, info.metrics, info.loss, val_loss=info.val_loss)
        jobs.append((cfg, info.program.source, current, cfg.fit.polish_evals, 10_000 + i, g))
    outcomes = (pool.apply(refit_job, jobs) if pool is not None
                else [refit_job(ctx, *job) for job in jobs])
    for e, (improved, res) in zip(targets, outcomes, strict=True):
        info = st.info[e.program_id]
        if improved:
            rows.append(books.eval_row(g, info.program, "polish", "closed_loop_fit", res))
            books.accept(info.program, res, e.generation)
            log(f"run {books.run_id}: polished {e.program_id[:12]} closed loop: "
                f"loss {e.loss:.4f} -> {res.loss:.4f}")
        else:
            rows.append(books.rejection_row(
                g, e.program_id, "polish", "closed_loop_fit",
                f"closed-loop refit found no loss below {e.loss:.4f}"))
    return rows
