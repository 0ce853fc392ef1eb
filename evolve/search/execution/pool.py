"""Fitting children in parallel: forked workers that share the parent's corpora.

Why fork: the corpora and fitting windows are large numpy arrays; forked workers see them
copy-on-write for free. Results come back in job order, and each job carries its own seed,
so the output does not depend on the number of workers.
"""

from __future__ import annotations

import contextlib
import functools
import multiprocessing as mp
import os
from collections.abc import Callable, Sequence
from typing import Any

from evolve.program.language import Program, parse_program
from evolve.search.context import RunContext, Scored
from evolve.search.judge import fit_and_score
from evolve.search.stopping import worker_signals

_WORKER_CTX: RunContext | None = None
Job = tuple[Program, int]  # (program, fitting seed)
# Niceness of the fitting workers beside a local LLM server (``--llm local``): the model's
# next batch is on the run's critical path (the next generation waits for it), the fits are
# throughput work, so on a busy machine the scheduler gives the model its CPU first.
BESIDE_LOCAL_MODEL_NICE = 10


def _start_worker(nice: int) -> None:
    worker_signals()
    if nice:
        with contextlib.suppress(OSError):  # a lower priority is always allowed; be safe
            os.nice(nice)


def _job(job: tuple[str, int]) -> Scored:
    assert _WORKER_CTX is not None
    source, seed = job
    return fit_and_score(_WORKER_CTX, parse_program(source), seed)


def _apply_job(job: tuple[Callable[..., Any], tuple[Any, ...]]) -> Any:
    assert _WORKER_CTX is not None
    fn, args = job
    return fn(_WORKER_CTX, *args)


def _indexed(job: tuple[Callable[[Any], Any], int, Any]) -> tuple[int, Any]:
    fn, i, payload = job
    return i, fn(payload)


class FitPool:
    """Fits children in forked workers that share the parent's corpora.

    Why fork: the corpora and fitting windows are large numpy arrays; forked workers see
    them copy-on-write for free. After a corpus refresh the pool is restarted so workers
    never fit on stale corpora. Results come back in job order, and each job carries its
    own seed, so the output does not depend on the number of workers.
    """

    def __init__(self, ctx: RunContext, workers: int, nice: int = 0):
        self.ctx = ctx
        self.workers = max(1, int(workers))
        self.nice = int(nice)  # added to the workers' niceness (0: the driver's)
        self._pool: Any = None

    def map(self, jobs: Sequence[Job], on_result: Callable[[int, Any], None] | None = None
            ) -> list[Scored]:
        if self._serial(jobs):
            return self._in_process([functools.partial(fit_and_score, self.ctx, p, s)
                                     for p, s in jobs], on_result)
        return self._gather(_job, [(p.source, s) for p, s in jobs], on_result)

    def apply(self, fn: Callable[..., Any], jobs: Sequence[tuple[Any, ...]],
              on_result: Callable[[int, Any], None] | None = None) -> list[Any]:
        """``fn(ctx, *job)`` for every job, results in job order (``fn``: a module-level,
        pure function; the driver's other parallel work: re-scoring, closed-loop refits)."""
        if self._serial(jobs):
            return self._in_process([functools.partial(fn, self.ctx, *job) for job in jobs],
                                    on_result)
        return self._gather(_apply_job, [(fn, job) for job in jobs], on_result)

    def _serial(self, jobs: Sequence[Any]) -> bool:
        return self.workers == 1 or len(jobs) <= 1 or "fork" not in mp.get_all_start_methods()

    @staticmethod
    def _in_process(calls: list[Callable[[], Any]],
                    on_result: Callable[[int, Any], None] | None) -> list[Any]:
        out = []
        for i, call in enumerate(calls):
            out.append(call())
            if on_result is not None:
                on_result(i, out[-1])
        return out

    def _gather(self, fn: Callable[[Any], Any], payloads: list[Any],
                on_result: Callable[[int, Any], None] | None) -> list[Any]:
        """Results in job order; ``on_result`` as each job finishes, in the driver."""
        out: list[Any] = [None] * len(payloads)
        for i, result in self._workers().imap_unordered(
                _indexed, [(fn, i, p) for i, p in enumerate(payloads)], chunksize=1):
            out[i] = result
            if on_result is not None:
                on_result(i, result)
        return out

    def _workers(self) -> Any:
        if self._pool is None:
            global _WORKER_CTX
            _WORKER_CTX = self.ctx
            self._pool = mp.get_context("fork").Pool(
                self.workers, initializer=_start_worker, initargs=(self.nice,))
        return self._pool

    def reset(self) -> None:
        """Stop the workers (call after the corpora changed, and at the end)."""
        if self._pool is not None:
            self._pool.terminate()
            self._pool.join()
            self._pool = None

