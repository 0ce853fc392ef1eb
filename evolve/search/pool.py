"""Fitting children in parallel: forked workers that share the parent's corpora.

Why fork: the corpora and fitting windows are large numpy arrays; forked workers see them
copy-on-write for free. Results come back in job order, and each job carries its own seed,
so the output does not depend on the number of workers.
"""

from __future__ import annotations

import multiprocessing as mp
from collections.abc import Callable, Sequence
from typing import Any

from evolve.language import Program, parse_program
from evolve.search.context import RunContext, Scored
from evolve.search.fingerprint import fingerprint
from evolve.search.judge import fit_and_score

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


def _apply_job(job: tuple[Callable[..., Any], tuple[Any, ...]]) -> Any:
    assert _WORKER_CTX is not None
    fn, args = job
    return fn(_WORKER_CTX, *args)


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
        return list(self._workers().map(_job, [(p.source, s, digits) for p, s in jobs],
                                        chunksize=1))

    def apply(self, fn: Callable[..., Any], jobs: Sequence[tuple[Any, ...]]) -> list[Any]:
        """``fn(ctx, *job)`` for every job, results in job order (``fn``: a module-level,
        pure function; the driver's other parallel work: re-scoring, closed-loop refits)."""
        if self.workers == 1 or len(jobs) <= 1 or "fork" not in mp.get_all_start_methods():
            return [fn(self.ctx, *job) for job in jobs]
        return list(self._workers().map(_apply_job, [(fn, job) for job in jobs], chunksize=1))

    def _workers(self) -> Any:
        if self._pool is None:
            global _WORKER_CTX
            _WORKER_CTX = self.ctx
            self._pool = mp.get_context("fork").Pool(self.workers)
        return self._pool

    def reset(self) -> None:
        """Stop the workers (call after the corpora changed, and at the end)."""
        if self._pool is not None:
            self._pool.terminate()
            self._pool.join()
            self._pool = None

