"""Where a generation's children are fitted and judged: the Executor seam.

Why a seam here and nowhere else: a child's evaluation is a pure function of (run context,
program, seed) -> :class:`~evolve.search.context.Scored`
(:func:`evolve.search.judge.fit_and_score`), and every job carries its own seed. So
*where* the jobs run (forked processes on this machine, Ray tasks on a cluster) cannot
change *what* they return, and the archive stays the same byte for byte. Everything that
decides (selection, the operator and its LLM calls, screening, the archive writes) stays
with the driver, the process that runs the loop.

Executors (``run.executor``, ``evolve run --executor``):

* ``local`` (default): :class:`~evolve.search.execution.pool.FitPool`, ``run.workers`` forked
  processes sharing the driver's corpora copy-on-write (1 = in process).
* ``ray``: :class:`~evolve.search.execution.ray_tasks.RayExecutor`, one Ray task per child on a
  cluster (``run.ray_address``) or on a Ray instance started for the run with
  ``run.workers`` CPUs. Needs the ``ray`` extra (``pip install -e '.[ray]'``).
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import TYPE_CHECKING, Any, Protocol

from evolve.errors import ConfigError
from evolve.search.context import RunContext, Scored
from evolve.search.execution.pool import BESIDE_LOCAL_MODEL_NICE, FitPool, Job

if TYPE_CHECKING:
    from evolve.config.schema import Config

EXECUTORS = ("local", "ray")
Result = Scored  # the outcome of a child's fit and judging
OnResult = Callable[[int, Any], None] | None  # called as each job finishes: (job index, result)


class Executor(Protocol):
    """What the loop needs from whoever fits its children."""

    def map(self, jobs: Sequence[Job], on_result: OnResult = None) -> list[Result]:
        """Fit and judge every job; results in job order.
        ``on_result(i, result)`` is called in the driver as each job finishes (in any
        order): the journal keeps finished work that way."""
        ...

    def apply(self, fn: Callable[..., Any], jobs: Sequence[tuple[Any, ...]],
              on_result: OnResult = None) -> list[Any]:
        """``fn(ctx, *job)`` for every job; results in job order. ``fn`` is a module-level
        pure function of the run context (re-scoring elites, closed-loop refits)."""
        ...

    def reset(self) -> None:
        """The corpora changed, or the run ended: drop whatever holds the old ones."""
        ...


def make_executor(ctx: RunContext, cfg: Config | Any) -> Executor:
    """The configured executor for a run's context."""
    kind = getattr(cfg.run, "executor", "local")
    if kind == "ray":
        from evolve.search.execution.ray_tasks import RayExecutor

        return RayExecutor(ctx, cfg.run.workers, getattr(cfg.run, "ray_address", ""))
    from evolve.config.schema import cpu_count

    cap = max(2, cpu_count())  # checked again here, before any process exists: a config
    if cfg.run.workers > cap and not getattr(cfg.run, "force_workers", False):  # not validated
        raise ConfigError(f"key 'run.workers' out of range: must be an integer in [1, {cap}] "
                          "(this machine's CPUs; --force-workers or run.force_workers = true "
                          "to exceed it)")
    threads = min(cfg.run.workers, max(1, cpu_count()))  # see Evaluator.threads
    for ev in (ctx.evaluator, ctx.slices):
        if ev is not None:
            ev.threads = threads
    return FitPool(ctx, cfg.run.workers, nice=BESIDE_LOCAL_MODEL_NICE if serves_local_model(cfg)
                   else 0)


def serves_local_model(cfg: Config | Any) -> bool:
    """Whether the run asks a llama.cpp server of its own on this machine (``--llm local``,
    not replaying a cassette): its fitting workers then yield the CPU to the model."""
    llm = getattr(cfg, "llm", None)
    return (getattr(cfg.operator, "kind", "offline") == "llm" and llm is not None
            and llm.model == "local" and llm.cassette_mode != "replay")
