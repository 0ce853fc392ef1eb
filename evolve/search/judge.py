"""Judging one program: fit its constants, then score it on every run (pure functions).

Why pure functions of (run context, program, seed): that is what lets the loop farm children
out to worker processes and still write bit-identical archives, and lets ``evolve replay``
re-score a stored program with exactly the code the run used.

Metrics are stored per scenario (or slice, named ``<run>@<from>-<to>s``) as plain dicts
(``RunMetrics.to_dict()`` with the split of the parent run and a ``mode`` key). Only
training runs enter the loss and the fit; validate numbers are read by the pick and the
champion (``evolve.search.pareto``); test numbers are stored for reporting only. With
``fit.transfer_weight > 0`` the loss is the search loss, which also charges for how the
program prices each model's training runs when fitted without them
(:mod:`evolve.search.transfer`).
"""

from __future__ import annotations

import math
from typing import Any

import numpy as np

from evaluator.api import loss
from evolve.assess import physics
from evolve.fitting import const_map, fit_program
from evolve.fitting.bounds import derived_seed
from evolve.program.codegen import step_model
from evolve.program.language import Program
from evolve.search import transfer
from evolve.search.context import RunContext, Scored
from evolve.search.selection import split_loss


def _clean(groups: Any) -> dict[str, dict[str, float]]:
    return {str(g): {str(k): float(v) for k, v in sorted(c.items())}
            for g, c in sorted(dict(groups).items())}


def score_program(ctx: RunContext, program: Program,
                  groups: dict[str, dict[str, float]], train_only: bool = False,
                  sims: dict[tuple[str, bytes], Any] | None = None) -> Scored:
    """Metrics of ``program`` with fixed constants on every scenario: under the default
    closed-loop fitness, closed loop on the stage slices and on validate runs that queue
    (whole); teacher forced elsewhere.

    ``train_only``: the training runs and slices alone (the same training loss and
    rejection reason, no held-out metrics), for choosing among the starts of a fit.
    ``sims``: slice metrics already simulated for this program, by (slice, constants);
    filled with the new ones. The kept start of a fit is then scored on every run
    without simulating its training slices again (the simulation is deterministic).
    """
    ev = ctx.evaluator
    keep = (lambda n: ctx.splits[n] == "train") if train_only else (lambda n: True)
    sliced = set(ctx.slice_parent.values()) | set(ctx.full_runs)
    forced = [n for n in ctx.names if n not in sliced and keep(n)]
    full_runs = [n for n in ctx.full_runs if keep(n)]
    try:
        model = step_model(program)
        consts = const_map(program, groups, ev.scenarios, ctx.scope)
        runs = ev.score(model, consts, names=forced) if forced else {}
        for n in runs:
            runs[n].split = ctx.splits[n]
        if ctx.slices is not None and ctx.slice_parent:
            mine = {s: consts[p] for s, p in ctx.slice_parent.items() if keep(p)}
            known = {} if sims is None else sims
            key = {s: (s, np.asarray(c, dtype=np.float64).tobytes()) for s, c in mine.items()}
            todo = sorted(s for s in mine if key[s] not in known)
            if todo:
                for sname, res in ctx.slices.simulate(model, mine, names=todo).items():
                    res.metrics.split = ctx.splits[ctx.slice_parent[sname]]
                    known[key[sname]] = res.metrics
            for sname in sorted(mine):
                runs[sname] = known[key[sname]]
        if full_runs:
            for name, res in ev.simulate(model, consts, names=full_runs).items():
                res.metrics.split = ctx.splits[name]
                runs[name] = res.metrics
    except (ArithmeticError, ValueError, KeyError) as exc:
        return Scored(groups, reason=f"scoring failed: {type(exc).__name__}: {exc}")
    metrics: dict[str, dict[str, Any]] = {}
    for name in sorted(runs):
        d = runs[name].to_dict()
        d["mode"] = ("closed_loop_slice" if name in ctx.slice_parent else
                     "closed_loop" if name in ctx.full_runs else "teacher_forced")
        metrics[name] = d
    train = sorted(n for n, m in runs.items() if m.split == "train")
    train_loss = loss(runs, train)
    reason = ""
    if not np.isfinite(train_loss):
        bad = [n for n in train if not runs[n].valid]
        reason = (f"invalid on {bad[0]}: {runs[bad[0]].reason}" if bad else
                  "non-finite training loss")
    if not reason and ctx.probes:
        # a model is judged at constants a fit chose: per model, only those with training
        # runs (another model keeps the declared values, which nothing tuned); a shared
        # (global, pooled) set is what an unmeasured model gets, so every model is judged
        judged = ctx.names if ctx.scope in ("global", "pooled") else ctx.train
        reason = physics.check(model, physics.by_model(ev, consts, judged), ctx.probes) or ""
    search = float(train_loss)
    if not reason and not train_only and ctx.transfer_weight > 0:
        search, reason = _with_transfer(ctx, program, metrics, search)
    return Scored(groups, metrics, search, 0, reason, split_loss(metrics, "validate"))


def _with_transfer(ctx: RunContext, program: Program, metrics: dict[str, dict[str, Any]],
                   train_loss: float) -> tuple[float, str]:
    """Add the program's transfer entries to ``metrics``; (search loss, rejection reason).
    See :mod:`evolve.search.transfer`."""
    try:
        held = transfer.transfer_metrics(ctx, program)
    except (ArithmeticError, ValueError, KeyError) as exc:
        return train_loss, f"transfer fit failed: {type(exc).__name__}: {exc}"
    for name in sorted(held):
        metrics[name] = held[name].to_dict() | {"mode": transfer.MODE}
    t = transfer.fitting_loss(metrics, transfer.SPLIT)
    if not math.isnan(t) and not math.isfinite(t):
        bad = next(n for n in sorted(held) if not held[n].valid)
        return train_loss, f"invalid on {bad} (transfer): {held[bad].reason}"
    return transfer.search_loss(train_loss, t, ctx.transfer_weight, ctx.transfer_margin), ""


def fit_and_score(ctx: RunContext, program: Program, seed: int) -> Scored:
    """Fit constants on the training runs (CMA-ES), then score on every run.

    ``ctx.starts`` teacher-forced fits from independent CMA-ES streams (the first draws
    from ``seed`` itself), each judged closed loop; the lowest training loss is kept (ties:
    the earlier start), with the evaluations of all starts counted. Why: fits of one
    program that are equally good teacher forced (0.043-0.047 on 7a8293dea4fe) differ
    closed loop by orders of magnitude (0.10-50): teacher forcing holds each request's
    wait fixed, so it cannot see that constants a few percent slow at a knee stage's batch
    sizes make that stage queue without bound. One fit made a program's score a lottery;
    the best of a few makes it a property of the program. The validate split is never
    read for this choice.
    """
    seeds = [seed if k == 0 else derived_seed(seed, "start", k)
             for k in range(max(1, ctx.starts))]
    if len(seeds) == 1:
        return fit_once(ctx, program, seed)
    # judge each start on the training runs only; score the held-out runs of the kept one
    sims: dict[tuple[str, bytes], Any] = {}
    trials = [fit_once(ctx, program, s, train_only=True, sims=sims) for s in seeds]
    order = sorted((k for k, t in enumerate(trials) if t.ok), key=lambda k: trials[k].loss)
    best = next((out for out in (_rescore(ctx, program, trials[k], sims) for k in order)
                 if out.ok), None)
    if best is None:  # no start valid on every run: the first start, as a single fit
        best = _rescore(ctx, program, trials[0], sims)
    best.n_evals = sum(t.n_evals for t in trials)
    return best


def _rescore(ctx: RunContext, program: Program, trial: Scored,
             sims: dict[tuple[str, bytes], Any]) -> Scored:
    """A start judged on the training runs, scored on every run (its failure kept)."""
    if trial.groups is None or trial.reason.startswith("fit failed"):
        return trial
    return score_program(ctx, program, trial.groups, sims=sims)


def fit_once(ctx: RunContext, program: Program, seed: int,
             train_only: bool = False,
             sims: dict[tuple[str, bytes], Any] | None = None) -> Scored:
    """One teacher-forced fit from ``seed``, judged closed loop (``train_only``: on the
    training runs alone, see :func:`score_program`)."""
    try:
        fit = fit_program(program, ctx.evaluator, ctx.train, ctx.scope, seed, ctx.max_evals,
                          ctx.restarts, probes=ctx.probes, pool_strength=ctx.pool_strength,
                          prior_strength=ctx.prior_strength)
    except (ArithmeticError, ValueError) as exc:
        return Scored(None, reason=f"fit failed: {type(exc).__name__}: {exc}")
    groups = _clean(fit.groups)
    if not groups or not np.isfinite(fit.loss):
        return Scored(groups or None, n_evals=int(fit.n_evals),
                      reason=f"fit failed: {fit.status}")
    out = score_program(ctx, program, groups, train_only, sims)
    out.n_evals = int(fit.n_evals)
    return out
