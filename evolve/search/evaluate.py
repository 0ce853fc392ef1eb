"""Judging programs for the loop: fit, score, fingerprint, rebuild corpora; in parallel.

Why a separate module: the loop decides *what* to evaluate and in which order; this module
says *how*, as pure functions of (run context, program, seed), which is what lets the loop
farm children out to worker processes and still write bit-identical archives, and lets
``evolve replay`` re-score a stored program with exactly the code the run used.

Fitness (``fit.fitness``): constants are always fitted teacher forced (fast), but with
``closed_loop`` (the default) the program is then *judged* closed loop: every run that is
not queue-dominated is replaced by one slice per load stage (``Scenario.stage_slices``),
simulated with the fitted constants, and the loss is taken over the training slices. Why:
a teacher-forced optimum can overload a run when the batches react (measured: the best
teacher-forced seed scored 0.12 on its windows and 20.9 closed loop), and selection on
that number filled the frontier with programs that fall apart in BLIS. A slice costs
~10 ms of simulation. Queue-dominated runs (measured mean TTFT over 5 s: the overloaded
reasoning runs) keep teacher-forced metrics; they are never in the default training split.

Metrics are stored per scenario (or slice, named ``<run>@<from>-<to>s``) as plain dicts
(``RunMetrics.to_dict()`` with the split of the parent run and a ``mode`` key). Only
training runs enter the loss; validate/test numbers are stored for reporting and never
read by selection.
"""

from __future__ import annotations

import hashlib
import io
import multiprocessing as mp
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from evaluator.api import Evaluator, loss
from evolve.codegen import step_model
from evolve.fitting import const_map, fit_program
from evolve.language import Program, parse_program

# Requests used to probe queueing_time for the fingerprint: (input_tokens, output_tokens).
_PROBE_REQUESTS = np.array([[64.0, 550.0, 900.0, 1500.0, 3000.0],
                            [1.0, 248.0, 251.0, 1000.0, 1448.0]])
PROBE_STEPS_PER_RUN = 48


@dataclass
class RunContext:
    """The fixed parts of a run that every evaluation needs."""

    evaluator: Evaluator
    splits: dict[str, str]  # scenario name -> train / validate / test
    scope: str
    window_steps: int
    max_evals: int
    restarts: int = 1
    probe: np.ndarray | None = None  # float64[N_FEATURES, n] fingerprint steps
    slices: Evaluator | None = None  # closed-loop fitness: stage slices of sliceable runs
    slice_parent: dict[str, str] = field(default_factory=dict)  # slice name -> run name

    @property
    def names(self) -> list[str]:
        return sorted(self.splits)

    @property
    def train(self) -> list[str]:
        return [n for n in self.names if self.splits[n] == "train"]


@dataclass
class Scored:
    """The outcome of fitting and/or scoring one program on the current corpora."""

    groups: dict[str, dict[str, float]] | None
    metrics: dict[str, dict[str, Any]] = field(default_factory=dict)
    loss: float = float("inf")
    n_evals: int = 0
    reason: str = ""  # empty if accepted

    @property
    def ok(self) -> bool:
        return not self.reason and np.isfinite(self.loss)


QUEUE_DOMINATED_TTFT_S = 5.0


def make_context(cfg: Any, evaluator: Evaluator, splits: dict[str, str]) -> RunContext:
    """The run context of a config: fitting knobs and, for closed-loop fitness, the slices."""
    ctx = RunContext(evaluator, dict(splits), cfg.fit.scope, cfg.fit.window_steps,
                     cfg.fit.max_evals, cfg.fit.restarts)
    if cfg.fit.fitness == "closed_loop":
        slices = []
        for name in sorted(splits):
            sc = evaluator.by_name[name]
            if sc.measured.summary.get("ttft_mean", np.inf) >= QUEUE_DOMINATED_TTFT_S:
                continue
            for sl in sc.stage_slices(cfg.fit.slice_seconds, cfg.fit.slice_warmup_seconds):
                slices.append(sl)
                ctx.slice_parent[sl.name] = name
        ctx.slices = Evaluator(slices)
    return ctx


def _clean(groups: Any) -> dict[str, dict[str, float]]:
    return {str(g): {str(k): float(v) for k, v in sorted(c.items())}
            for g, c in sorted(dict(groups).items())}


def score_program(ctx: RunContext, program: Program,
                  groups: dict[str, dict[str, float]]) -> Scored:
    """Teacher-forced metrics of ``program`` with fixed constants on every scenario."""
    ev = ctx.evaluator
    sliced = set(ctx.slice_parent.values())
    forced = [n for n in ctx.names if n not in sliced]
    try:
        model = step_model(program)
        consts = const_map(program, groups, ev.scenarios, ctx.scope)
        runs = ev.score(model, consts, names=forced) if forced else {}
        for n in runs:
            runs[n].split = ctx.splits[n]
        if ctx.slices is not None and ctx.slice_parent:
            sims = ctx.slices.simulate(model, {s: consts[p] for s, p in
                                               ctx.slice_parent.items()})
            for sname, res in sims.items():
                res.metrics.split = ctx.splits[ctx.slice_parent[sname]]
                runs[sname] = res.metrics
    except (ArithmeticError, ValueError, KeyError) as exc:
        return Scored(groups, reason=f"scoring failed: {type(exc).__name__}: {exc}")
    metrics: dict[str, dict[str, Any]] = {}
    for name in sorted(runs):
        d = runs[name].to_dict()
        d["mode"] = "closed_loop_slice" if name in ctx.slice_parent else "teacher_forced"
        metrics[name] = d
    train = sorted(n for n, m in runs.items() if m.split == "train")
    train_loss = loss(runs, train)
    reason = ""
    if not np.isfinite(train_loss):
        bad = [n for n in train if not runs[n].valid]
        reason = (f"invalid on {bad[0]}: {runs[bad[0]].reason}" if bad else
                  "non-finite training loss")
    return Scored(groups, metrics, float(train_loss), 0, reason)


def fit_and_score(ctx: RunContext, program: Program, seed: int) -> Scored:
    """Fit constants on the training runs (CMA-ES), then score on every run."""
    try:
        fit = fit_program(program, ctx.evaluator, ctx.train, ctx.scope, seed, ctx.max_evals,
                          ctx.restarts)
    except (ArithmeticError, ValueError) as exc:
        return Scored(None, reason=f"fit failed: {type(exc).__name__}: {exc}")
    groups = _clean(fit.groups)
    if not groups or not np.isfinite(fit.loss):
        return Scored(groups or None, n_evals=int(fit.n_evals),
                      reason=f"fit failed: {fit.status}")
    out = score_program(ctx, program, groups)
    out.n_evals = int(fit.n_evals)
    return out


def child_seed(run_seed: int, generation: int, index: int) -> int:
    """A positive 31-bit seed for one child's fit, derived only from its position."""
    ss = np.random.SeedSequence([int(run_seed), int(generation), int(index), 2])
    return int(ss.generate_state(1, np.uint32)[0] % (2**31 - 2)) + 1


def generation_rng(run_seed: int, generation: int, purpose: int) -> np.random.Generator:
    """The random stream of one purpose in one generation (resume draws the same)."""
    return np.random.default_rng(np.random.SeedSequence([int(run_seed), int(generation),
                                                         int(purpose)]))


# ---- fingerprints ---------------------------------------------------------------------
def build_probe(ev: Evaluator, names: Sequence[str]) -> np.ndarray:
    """Fixed probe steps: evenly spaced steps of each named run's fitting windows."""
    cols = []
    for name in sorted(names):
        feats = ev.fit_sets[name].features
        if feats.size == 0:
            continue
        idx = np.unique(np.linspace(0, feats.shape[1] - 1, PROBE_STEPS_PER_RUN).astype(int))
        cols.append(feats[:, idx])
    return np.ascontiguousarray(np.concatenate(cols, axis=1))


def probe_bytes(probe: np.ndarray) -> bytes:
    buf = io.BytesIO()
    np.save(buf, probe, allow_pickle=False)
    return buf.getvalue()


def probe_from_bytes(data: bytes) -> np.ndarray:
    return np.load(io.BytesIO(data), allow_pickle=False)


def probe_constants(program: Program) -> np.ndarray:
    """A second evaluation point: each constant at a position in its bounds derived from
    its *name* (sha256), so programs sharing constant names share the point."""
    low, high = program.bounds()
    u = np.array([0.2 + 0.6 * int.from_bytes(hashlib.sha256(n.encode()).digest()[:4],
                                              "little") / 2**32 for n in program.const_names])
    logscale = (low > 0) & (high > 100 * low)
    with np.errstate(all="ignore"):
        geo = np.exp(np.log(np.where(logscale, low, 1.0)) + u * np.log(
            np.where(logscale, high / np.where(low > 0, low, 1.0), 1.0)))
    return np.where(logscale, geo, low + u * (high - low)).astype(np.float64)


def _predictions(program: Program, probe: np.ndarray, c: np.ndarray) -> list[np.ndarray]:
    model = step_model(program)
    parts: list[np.ndarray] = []
    with np.errstate(all="ignore"):
        parts.append(np.broadcast_to(np.asarray(model.vector_fn(probe, c), np.float64),
                                     (probe.shape[1],)))
        if model.queue_fn is not None:
            parts.append(np.broadcast_to(np.asarray(
                model.queue_fn(_PROBE_REQUESTS, c), np.float64), (_PROBE_REQUESTS.shape[1],)))
    for idx in (model.post_decode_index, model.output_token_index):
        parts.append(np.array([c[idx] if idx is not None else 0.0]))
    return parts


def fingerprint(program: Program, probe: np.ndarray, digits: int) -> str:
    """Hash of the program's rounded predictions on the probe steps.

    Predictions (step times, queueing delays, E2E-only offsets) are taken at the declared
    initial constants *and* at :func:`probe_constants`. Equal prints mean the same function
    at both points, e.g. an algebraic rewrite; fitting the second would waste the budget.
    The second point is needed because mutations start new constants where they are
    neutral (a new term at coefficient 0): such a child equals its parent at the initial
    constants but is a different function.
    """
    try:
        vals = np.concatenate([*_predictions(program, probe, program.init_vector()),
                               *_predictions(program, probe, probe_constants(program))])
    except Exception as exc:  # a program that cannot even run gets a unique print
        return "error:" + hashlib.sha256(f"{program.id}:{exc}".encode()).hexdigest()[:24]
    text = ",".join(np.format_float_scientific(v, precision=digits - 1, unique=False)
                    if np.isfinite(v) else repr(float(v)) for v in vals)
    return hashlib.sha256(text.encode()).hexdigest()[:32]


# ---- corpora ----------------------------------------------------------------------------
def refresh(ctx: RunContext, program: Program, groups: dict[str, dict[str, float]],
            scope: str, progress: Callable[[str], None] | None = None) -> tuple[str, float]:
    """Re-simulate every scenario closed loop with ``program``.

    Returns the new corpus version and the program's *closed-loop* training loss (teacher
    forcing on a whole corpus with the program that produced it reproduces the closed
    loop), the official score the loop uses to decide whether to keep the new corpora.
    """
    ev = ctx.evaluator
    consts = const_map(program, groups, ev.scenarios, scope)
    model = step_model(program)
    version = ev.refresh_corpora(model, consts, ctx.window_steps, names=ctx.names,
                                 progress=progress)
    official = ev.score(model, consts, names=ctx.train, full=True)
    return version, float(loss(official, ctx.train))


def save_corpora(ev: Evaluator) -> tuple[dict[str, Any], dict[str, Any], str]:
    """The evaluator's current corpora, to put back if a refresh is not adopted."""
    return dict(ev.corpora), dict(ev.fit_sets), ev.corpus_version


def restore_corpora(ev: Evaluator, saved: tuple[dict[str, Any], dict[str, Any], str]) -> None:
    ev.corpora, ev.fit_sets, ev.corpus_version = dict(saved[0]), dict(saved[1]), saved[2]


# ---- parallel fitting -------------------------------------------------------------------
_WORKER_CTX: RunContext | None = None
Job = tuple[Program, int]  # (program, fitting seed)


def fingerprint_and_fit(ctx: RunContext, program: Program, seed: int,
                        digits: int | None) -> tuple[str | None, Scored]:
    """The fingerprint (if ``digits``) and the fit of one child, in one place, so the
    program is compiled once."""
    fp = fingerprint(program, ctx.probe, digits) if digits and ctx.probe is not None else None
    return fp, fit_and_score(ctx, program, seed)


def _job(job: tuple[str, int, int | None]) -> tuple[str | None, Scored]:
    assert _WORKER_CTX is not None
    source, seed, digits = job
    return fingerprint_and_fit(_WORKER_CTX, parse_program(source), seed, digits)


class FitPool:
    """Fingerprints and fits children in forked workers that share the parent's corpora.

    Why fork: the corpora and fitting windows are large numpy arrays; forked workers see
    them copy-on-write for free. After a corpus refresh the pool is restarted so workers
    never fit on stale corpora. Results come back in job order, and each job carries its
    own seed, so the output does not depend on the number of workers.
    """

    def __init__(self, ctx: RunContext, workers: int):
        self.ctx = ctx
        self.workers = max(1, int(workers))
        self._pool: Any = None

    def map(self, jobs: Sequence[Job], digits: int | None = None
            ) -> list[tuple[str | None, Scored]]:
        if self.workers == 1 or len(jobs) <= 1 or "fork" not in mp.get_all_start_methods():
            return [fingerprint_and_fit(self.ctx, p, s, digits) for p, s in jobs]
        if self._pool is None:
            global _WORKER_CTX
            _WORKER_CTX = self.ctx
            self._pool = mp.get_context("fork").Pool(self.workers)
        return list(self._pool.map(_job, [(p.source, s, digits) for p, s in jobs],
                                   chunksize=1))

    def reset(self) -> None:
        """Stop the workers (call after the corpora changed, and at the end)."""
        if self._pool is not None:
            self._pool.terminate()
            self._pool.join()
            self._pool = None
