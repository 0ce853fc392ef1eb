"""Teacher-forced fitting: the fitting loss of a constant group for a whole population.

Why not call ``evaluator.scoring.score`` per candidate: it rebuilds per-run metrics (percentiles,
dicts) and calls the program once per run; CMA-ES needs hundreds of evaluations. Here the
fitting windows of the group's runs are concatenated once, the program is evaluated once
per *population* (constants as ``C[n_const, P, 1]`` broadcast against ``F[N_FEATURES, n]``,
a form :mod:`evolve.program.codegen` supports), and only the two means the loss needs are computed.
That is exactly the population objective :func:`evolve.fitting.cmaes.minimize` takes.

The model mirrors ``evaluator/scoring/score.py`` (``score_fit_set``, ``_lifetimes``, ``loss``): a
request's TTFT is its fixed pre-admission time (corpus wait + queueing delay) plus the sum
of the step times from its admission to its first token. Because that is linear in the step
times, the per-run means are precomputed as weight vectors (see :class:`_Run`). The value
equals ``loss(evaluator.score(model, consts, names), names)`` up to float rounding;
``tests/evolve/fitting/test_teacher_forced.py`` checks it to 1e-9. If the evaluator's scoring
changes, that test fails and this module must follow. The reported ``FitResult.loss`` is
recomputed through the evaluator's own scoring.

Per-model and per-scenario groups are fitted by independent CMA-ES runs on each group's own
training runs (the loss separates, so a joint fit would only be slower).
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence

import numpy as np

from evaluator.api import (
    MAX_STEP_US,
    Evaluator,
    FitSet,
    ProbeBatches,
    Scenario,
    StepModel,
    loss,
    request_inputs,
)
from evolve.assess.physics import PhysicsPenalty
from evolve.fitting.bounds import Box, FitResult, const_map, group_key
from evolve.fitting.cmaes import PENALTY, minimize
from evolve.fitting.inert import inert_constants, names_of
from evolve.program.codegen import step_model
from evolve.program.language import Program
from evolve.text.words import FitStatus, Scope

BLOCK = 80_000  # elements per vectorised block (candidates x steps)
DEFAULT_MAX_EVALS = 1500
DEFAULT_RESTARTS = 2
DEFAULT_POOL_STRENGTH = 0.5  # pooled scope: unit-box squared distance -> loss units
SIGMA0 = 0.1  # initial step size in the normalised box (0.1 beat 0.2 and 0.3 on the seeds)
# tighter than cma's defaults: a teacher-forced evaluation is cheap, precision is not
TOLERANCES = {"tolfun": 1e-7, "tolx": 1e-6, "tolstagnation": 60}


class _Run:
    """Precomputed per-run data: the loss is *linear* in the step times of a run.

    A request's in-engine lifetime is the sum of the step times from its admission step to
    its first-token (TTFT) or last (E2E) step, so the mean over requests is ``t @ w`` with
    ``w[k]`` = the share of requests whose interval covers step ``k``. That replaces a
    cumsum and two gathers per candidate by two weighted sums.
    """

    def __init__(self, sc: Scenario, fit: FitSet, offset: int) -> None:
        n = fit.features.shape[1]
        self.a, self.b = offset, offset + n
        n_req = fit.req_index.size
        W = np.zeros((2, n))
        if n_req:
            for row, end in enumerate((fit.first_idx, fit.last_idx)):
                diff = np.zeros(n + 1)
                np.add.at(diff, fit.admit_idx, 1.0)
                np.add.at(diff, end + 1, -1.0)
                W[row] = np.cumsum(diff[:n]) / n_req
        self.W = W  # rows: TTFT, E2E lifetime weights per step
        self.wait = fit.wait_us
        self.wait_mean = float(fit.wait_us.mean()) if n_req else np.nan
        self.out_mean = float(fit.output_tokens.mean()) if n_req else np.nan
        self.R = request_inputs(sc.input_tokens[fit.req_index],
                                sc.output_tokens[fit.req_index], sc.arch_vector)
        meas = fit.meas
        self.valid = bool(n_req) and all(
            k in meas and meas[k] > 0 for k in ("e2e_mean", "ttft_mean", "itl_mean"))
        self.meas_e2e = meas.get("e2e_mean", np.nan)
        self.meas_ttft = meas.get("ttft_mean", np.nan)


def request_pairs(evaluator: Evaluator, scenarios: Sequence[Scenario]) -> np.ndarray:
    """Every distinct (input, output) token pair of ``scenarios``' requests, ``[2, m]``.

    Why cached on the evaluator: a group's requests never change (corpus refreshes
    change its steps, not its requests), and ``np.unique`` over rows cost 9 % of a
    100-generation search's CPU when it ran for every fit of every start. Read-only."""
    cache: dict[tuple[str, ...], np.ndarray] = evaluator.__dict__.setdefault(
        "_request_pairs", {})
    key = tuple(sc.name for sc in scenarios)
    if key not in cache:
        pairs = [request_inputs(sc.input_tokens, sc.output_tokens, sc.arch_vector).T
                 for sc in scenarios]
        q = np.unique(np.concatenate(pairs), axis=0).T.astype(np.float64).copy()
        q.setflags(write=False)
        cache[key] = q
    return cache[key]


class GroupObjective:
    """``obj(X[P, n_const]) -> loss[P]`` on the fitting windows of ``scenarios``."""

    def __init__(self, program: Program, model: StepModel, evaluator: Evaluator,
                 scenarios: Sequence[Scenario]) -> None:
        self.model = model
        self.post = program.post_decode_index
        self.otok = program.output_token_index
        fits = [evaluator.fit_sets[sc.name] for sc in scenarios]
        self.runs: list[_Run] = []
        offset = 0
        for sc, fit in zip(scenarios, fits, strict=True):
            self.runs.append(_Run(sc, fit, offset))
            offset += fit.features.shape[1]
        self.n = offset
        self.F = (np.ascontiguousarray(np.concatenate([f.features for f in fits], axis=1))
                  if offset else np.zeros((0, 0)))
        self.always_invalid = not all(r.valid for r in self.runs)
        self.has_queue = model.queue_fn is not None
        if self.has_queue:
            # every distinct (input, output) pair of the runs: the evaluator rejects a
            # queueing delay that is bad for *any* request, not only those in a window
            self.q_all = request_pairs(evaluator, scenarios)

    def _times(self, C: np.ndarray, P: int) -> np.ndarray:
        """Step times ``T[P, n]``, computed in column blocks of about ``BLOCK`` elements
        so numpy's temporaries stay in cache (3x faster than one pass on 50k steps)."""
        T = np.empty((P, self.n))
        step = max(1024, BLOCK // P)
        fn = self.model.vector_fn
        for a in range(0, self.n, step):
            blk = fn(self.F[:, a:a + step], C)
            if blk.shape != (P, min(step, self.n - a)):  # no population support
                blk = np.stack([np.broadcast_to(fn(self.F[:, a:a + step], C[:, p, 0]),
                                                (min(step, self.n - a),)) for p in range(P)])
            T[:, a:a + step] = blk
        return T

    def means(self, X: np.ndarray) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        """``(ok[P], ttft[P, runs], e2e[P, runs])``: the teacher-forced mean TTFT and mean
        E2E (s) of every run for every row of ``X``; ``ok`` is False where the constants
        are invalid (step times not finite, positive and below MAX_STEP_US; bad queueing
        delays)."""
        X = np.atleast_2d(np.asarray(X, dtype=np.float64))
        P = X.shape[0]
        C = np.ascontiguousarray(X.T)[:, :, None]
        qfn = self.model.queue_fn
        ttft = np.empty((P, len(self.runs)))
        e2e = np.empty((P, len(self.runs)))
        with np.errstate(all="ignore"):
            T = self._times(C, P)
            ok = (T.min(axis=1) > 0.0) & (T.max(axis=1) < MAX_STEP_US)  # the judge's rule
            if qfn is not None:
                d_all = np.broadcast_to(qfn(self.q_all, C), (P, self.q_all.shape[1]))
                ok &= np.all(np.isfinite(d_all) & (d_all >= 0.0), axis=1)
            for j, r in enumerate(self.runs):
                # mean lifetime to first / last token; multiply-and-sum rather than a BLAS
                # matmul, whose summation order may depend on the thread count
                Tr = T[:, r.a:r.b]
                life_first = (Tr * r.W[0]).sum(axis=1)
                life_last = (Tr * r.W[1]).sum(axis=1)
                pre = r.wait_mean
                if qfn is not None:
                    d = np.broadcast_to(qfn(r.R, C), (P, r.R.shape[1]))
                    pre = (r.wait + d).mean(axis=1)
                extra: np.ndarray | float = 0.0
                if self.post is not None:
                    extra = extra + X[:, self.post]
                if self.otok is not None:
                    extra = extra + X[:, self.otok] * r.out_mean
                ttft[:, j] = (pre + life_first) * 1e-6
                e2e[:, j] = (pre + life_last + extra) * 1e-6
        return ok, ttft, e2e

    def __call__(self, X: np.ndarray) -> np.ndarray:
        """Loss of every row of ``X``; :data:`PENALTY` where the constants are invalid
        (:meth:`means`)."""
        X = np.atleast_2d(np.asarray(X, dtype=np.float64))
        P = X.shape[0]
        if self.always_invalid:
            return np.full(P, PENALTY)
        ok, ttft, e2e = self.means(X)
        meas_e2e = np.array([r.meas_e2e for r in self.runs])
        meas_ttft = np.array([r.meas_ttft for r in self.runs])
        acc = np.zeros(P)
        with np.errstate(all="ignore"):
            for j in range(len(self.runs)):  # run by run: the archive's rounding
                ape_e = np.abs(e2e[:, j] - meas_e2e[j]) / meas_e2e[j]
                ape_t = np.abs(ttft[:, j] - meas_ttft[j]) / meas_ttft[j]
                acc = acc + (ape_e ** 2 + ape_t ** 2) / 2.0
            out = np.sqrt(acc / len(self.runs))
        ok &= np.isfinite(out)
        return np.where(ok, out, PENALTY)


class Shrink:
    """``pen(X) = strength * sum((u - u_centre)^2)`` in the unit box: pooled scope's pull of
    a model's constants towards the constants fitted on every run."""

    def __init__(self, box: Box, centre: np.ndarray, strength: float) -> None:
        self.box, self.u0, self.strength = box, box.to_unit(centre), float(strength)

    def __call__(self, X: np.ndarray) -> np.ndarray:
        U = self.box.to_unit(np.atleast_2d(X))
        return self.strength * ((U - self.u0) ** 2).sum(axis=1)


class Penalised:
    """A loss plus extra terms (physics, shrinkage); invalid points stay at :data:`PENALTY`.

    The terms are evaluated first and the loss only for candidates they leave below
    ``PENALTY``: in the closed-loop fit every loss evaluation is a simulation.
    """

    def __init__(self, base: Callable[[np.ndarray], np.ndarray],
                 terms: Sequence[Callable[[np.ndarray], np.ndarray]]) -> None:
        self.base, self.terms = base, list(terms)

    def __call__(self, X: np.ndarray) -> np.ndarray:
        extra = sum((t(X) for t in self.terms), np.zeros(X.shape[0]))
        out = np.full(X.shape[0], PENALTY)
        ok = extra < PENALTY
        if ok.any():
            f = self.base(X[ok])
            out[ok] = np.where(f >= PENALTY, PENALTY, np.minimum(f + extra[ok], PENALTY))
        return out


def fitting_names(evaluator: Evaluator, names: Sequence[str], who: str) -> list[str]:
    """``names`` as a list, checked: at least one, and each with a fitting corpus (a
    ``ValueError`` naming the first without)."""
    out = list(names)
    if not out:
        raise ValueError(f"{who} needs at least one scenario name")
    missing = [n for n in out if n not in evaluator.fit_sets]
    if missing:
        raise ValueError(f"no fitting corpus for {missing[0]!r}: refresh_corpora first")
    return out


def fit_program(program: Program, evaluator: Evaluator, names: Sequence[str], scope: str,
                seed: int, max_evals: int = DEFAULT_MAX_EVALS,
                restarts: int = DEFAULT_RESTARTS,
                probes: Mapping[str, ProbeBatches] | None = None,
                pool_strength: float = DEFAULT_POOL_STRENGTH,
                prior_strength: float = 0.0) -> FitResult:
    """Fit ``program``'s constants on the named scenarios' fitting windows.

    ``max_evals`` and ``restarts`` are per constant group; group ``g``'s restart ``r``
    draws from ``derived_seed(seed, g, r)``. The evaluator's corpora must have been
    refreshed (``evaluator.refresh_corpora``) for every named scenario.

    ``probes`` (model name -> synthetic batches): add :class:`evolve.assess.physics.PhysicsPenalty`
    for the group's models to the loss, so the fit prefers physical constants. Scope
    ``pooled``: first a ``"global"`` group on every run, then each model's group starting
    there, with :class:`Shrink` of strength ``pool_strength / (training runs of the
    model)``: a model with one training run stays near what all runs say, one with many
    may depart where its data insist.

    ``prior_strength`` > 0: the program's declared initial values are a prior (a seed
    declares published coefficients, e.g. BLIS's trained physics): each group not shrunk
    towards the pooled set is pulled towards them by :class:`Shrink` of strength
    ``prior_strength / (training runs of the group)``, so a coefficient the training runs
    barely see (the long-context KV read, on short-context runs) keeps its prior value.

    A constant no step time of the group depends on (:mod:`evolve.fitting.inert`: its
    fitting windows and, with ``probes``, its models' synthetic batches) keeps its start
    value (the declared one, or the ``"global"`` one under ``pooled``); ``inert`` in the
    result names them per group.
    """
    names = fitting_names(evaluator, names, "fit_program")
    model = step_model(program)
    scenarios = [evaluator.by_name[n] for n in names]
    members: dict[str, list[Scenario]] = {}
    for sc in scenarios:
        members.setdefault(group_key(sc, scope), []).append(sc)
    order = sorted(members)
    if scope == "pooled":
        members["global"] = list(scenarios)
        order = ["global", *order]
    box = Box(program)
    init = program.init_vector()
    groups: dict[str, dict[str, float]] = {}
    g_status: dict[str, str] = {}
    g_loss: dict[str, float] = {}
    inert: dict[str, tuple[str, ...]] = {}
    n_evals = 0
    for g in order:
        terms: list[Callable[[np.ndarray], np.ndarray]] = []
        if probes:
            models = sorted({sc.model for sc in members[g]} & set(probes))
            if models:
                terms.append(PhysicsPenalty(model, [probes[k] for k in models], PENALTY))
        start = init
        n_runs = len({sc.meta.get("parent", sc.name) for sc in members[g]})
        if scope == Scope.POOLED and g != "global":
            start = np.array([groups["global"][k] for k in program.const_names])
            terms.append(Shrink(box, start, pool_strength / max(n_runs, 1)))
        elif prior_strength > 0.0:
            terms.append(Shrink(box, init, prior_strength / max(n_runs, 1)))
        base = GroupObjective(program, model, evaluator, members[g])
        obj = Penalised(base, terms) if terms else base
        if program.n_constants == 0:
            x, f, st, n = init, float(obj(init[None, :])[0]), FitStatus.NO_CONSTANTS, 1
        else:
            probe_map = probes or {}
            seen = [base.F, *(probe_map[k].features for k in sorted(
                {sc.model for sc in members[g]} & set(probe_map)))]
            fixed = inert_constants(program, model, seen, start, box,
                                    request_pairs(evaluator, members[g]))
            inert[g] = names_of(program, fixed)
            m = minimize(obj, box, start, seed=seed, label=g, max_evals=max_evals,
                         sigma0=SIGMA0, restarts=restarts, tolerances=TOLERANCES,
                         fixed=fixed)
            x, f, st, n = m.x, m.f, m.status, m.n_evals
        groups[g] = {k: float(v) for k, v in zip(program.const_names, x, strict=True)}
        g_status[g], g_loss[g] = st, (f if f < PENALTY else float("inf"))
        n_evals += n
    init_map = const_map(program, {}, scenarios, scope)
    init_loss = loss(evaluator.score(model, init_map, names), names)
    final = loss(evaluator.score(model, const_map(program, groups, scenarios, scope), names),
                 names)
    statuses = set(g_status.values())
    if FitStatus.NO_CONSTANTS in statuses:
        status = FitStatus.NO_CONSTANTS
    elif FitStatus.INVALID in statuses:
        status = FitStatus.INVALID
    elif statuses == {FitStatus.NO_IMPROVEMENT}:
        status = FitStatus.NO_IMPROVEMENT
    else:
        status = FitStatus.OK
    return FitResult(groups=groups, loss=final, n_evals=n_evals, status=status,
                     init_loss=init_loss, group_status=g_status, group_loss=g_loss,
                     inert=inert)
