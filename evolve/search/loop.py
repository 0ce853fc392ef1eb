"""The generation loop: seeds, then select -> propose -> screen -> fit -> score -> insert.

The pieces, one job per module: :mod:`~evolve.search.seeding` (generation 0),
:mod:`~evolve.search.parents` (selection), :mod:`~evolve.search.children` (screening,
fitting and recording the proposals), :mod:`~evolve.search.refresh` (corpus refresh),
:mod:`~evolve.search.polish` (closed-loop refits), :mod:`~evolve.search.books` (rows and
state). This module only drives them and owns the run's lifecycle.

Why it is shaped this way:

* Every generation is computed in memory and committed in one transaction (with the grid,
  the frontier and any new corpus version), so the archive always ends at a complete
  generation and ``--resume`` continues from it.
* Every random draw comes from ``generation_rng(seed, generation, purpose)`` and every fit
  from ``child_seed(seed, generation, index)``: a resumed run draws exactly what an
  uninterrupted one would. The state carried between generations (grid, elites' constants,
  seen ids and fingerprints, corpus version, refresh bookkeeping) is all in the archive.
* Finished jobs (fits, closed-loop judgements, LLM exchanges) are journaled as they finish
  (:mod:`~evolve.search.journal`) and served from there by ``--resume``: a kill loses only
  the jobs still computing, and the archive is the same as an uninterrupted run's.
* One process writes a run at a time: it holds the run's lock (``evolve.archive.process_tables``)
  from creation or resume until it ends.
* SIGINT/SIGTERM (:mod:`~evolve.search.stopping`) stop it between two archive writes.
* Wall time only ever *stops* a run, after a complete generation; it decides nothing else.
* Selection sees training loss only. Validate/test metrics are stored, never read here.
"""

from __future__ import annotations

import functools
import sys
import time
from collections import Counter
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from evolve.archive import Archive
from evolve.archive.store import utc_now
from evolve.assess.splits import assign_splits
from evolve.config.llm import LLMConfig
from evolve.config.schema import Config
from evolve.errors import ArchiveError, BudgetExhausted, LLMUnavailable
from evolve.operators.base import Operator, Proposal
from evolve.program.language import parse_program
from evolve.search import final_scores, stopping
from evolve.search.books import Books
from evolve.search.children import evaluate_children
from evolve.search.context import make_context
from evolve.search.execution.executors import make_executor
from evolve.search.fingerprint import probe_bytes, probe_from_bytes
from evolve.search.journal import Journal, JournaledExecutor
from evolve.search.parents import choose
from evolve.search.polish import polish
from evolve.search.refresh import maybe_refresh, rebuild_corpus
from evolve.search.rng import PURPOSE_OPERATOR, generation_rng
from evolve.search.seeding import generation_zero
from evolve.search.setup import build_operator, load_evaluator, load_seeds, require_scenarios
from evolve.search.state import load_state, snapshot_rows
from evolve.search.stopping import StopRequested, critical


@dataclass
class RunSummary:
    run_id: int
    status: str
    generations_done: int
    evaluations: int
    best_id: str | None
    best_loss: float
    pick_id: str | None
    elapsed_s: float
    llm_fallback_generation: int | None = None  # the LLM operator fell back to offline here
    session_evaluations: int | None = None  # fitted by this process (a resume: fewer)


class _Stop(Exception):
    """A budget ran out inside a generation; the generation is dropped, the run stops."""


class Search:
    """One run (new or resumed) over one archive."""

    def __init__(self, cfg: Config, archive: Archive, run_id: int | None = None,
                 operator: Operator | None = None, log: Any = None, break_lock: bool = False,
                 on_run: Any = None, llm: LLMConfig | None = None):
        """``on_run(run_id)`` is called as soon as the run exists (so a stop signal during
        the rest of the setup can still name the run to resume); ``llm`` overrides the
        config's endpoint settings (``--llm local`` fills in the started server)."""
        self.cfg, self.archive = cfg, archive
        self._on_run = on_run or (lambda _rid: None)
        self.t0 = time.monotonic()
        self.log = log or (lambda msg: print(msg, file=sys.stderr))
        if run_id is not None:  # before any work: a second writer of the run stops here
            archive.lock_run(run_id, force=break_lock)
        try:
            self._setup(run_id, operator, llm)
        except BaseException:
            locked = run_id if run_id is not None else getattr(self, "run_id", None)
            if locked is not None:
                archive.unlock_run(locked)
            raise

    def _setup(self, run_id: int | None, operator: Operator | None,
               llm: LLMConfig | None) -> None:
        cfg, archive = self.cfg, self.archive
        self.evaluator = load_evaluator(cfg)
        self.seeds = load_seeds(cfg)
        if run_id is None:
            splits = assign_splits(self.evaluator.scenarios, cfg.split.mode)
        else:
            splits = archive.run(run_id).splits
            require_scenarios(self.evaluator, splits, run_id)
        self.operator = operator or build_operator(cfg, splits, llm)
        self.fallback_generation: int | None = None
        self.run_id = run_id if run_id is not None else archive.create_run(
            cfg.run.seed, cfg.stored_dict(), splits, None, lock=True)
        self._on_run(self.run_id)
        self.ctx = make_context(cfg, self.evaluator, splits)
        self.journal = Journal(archive, self.run_id)
        self.pool = JournaledExecutor(make_executor(self.ctx, cfg), self.journal,
                                      lambda: self.evaluator.corpus_version)
        self.operator.attach_journal(self.journal)  # the LLM operator keeps its replies there
        self.books = Books(cfg, self.run_id, self.evaluator)

    def run(self) -> RunSummary:
        """Run (or resume) to the configured generation or the first exhausted budget."""
        cfg, books = self.cfg, self.books
        run = self.archive.run(self.run_id)
        start = run.generations_done + 1
        if start > 0:
            books.state = load_state(self.archive, self.run_id, books.new_grid(), cfg,
                                     parse_program)
            if run.probe is None:
                raise ArchiveError(f"run {self.run_id}: no fingerprint probe stored")
            self.ctx.probe = probe_from_bytes(run.probe)
            if start <= cfg.run.generations:  # work left: rebuild the current corpora
                rebuild_corpus(books, self.ctx,
                               [r for r in books.state.corpus_rows if r.adopted][-1])
        st = books.state
        fitted0 = st.n_fitted
        if start > 0 and start > cfg.run.generations:
            self.log(f"run {self.run_id}: generation {start - 1} is done, the configuration "
                     f"asks for {cfg.run.generations}; nothing to compute")
        if self.journal.loaded:
            self.log(f"run {self.run_id}: {self.journal.loaded} finished jobs of generation "
                     f"{start} in the journal")
        with critical():
            self.archive.update_run(self.run_id, status="running", finished_at=None)
        status = "finished"
        if start == 0:  # a quiet stretch before the bar moves: say what it is
            self.log(f"run {self.run_id}: generation 0 simulates the {len(self.ctx.names)} "
                     f"measured runs and fits the {len(self.seeds)} seed programs on them "
                     "(a few minutes on 2 cores) before the first generation's bar moves")
        bar = _progress(cfg, start) if start <= cfg.run.generations else None
        try:
            for g in range(start, cfg.run.generations + 1):
                stopping.check()  # a stop whose exception was dropped (stopping.check)
                why = self._budget_exhausted()
                if why:
                    status = f"stopped:{why}"
                    break
                self.journal.generation = g
                try:
                    rows = self._generation(g)
                except _Stop as stop:
                    status = f"stopped:{stop}"
                    break
                rows += snapshot_rows(self.run_id, g, st.grid, books.frontier())
                extra = ({"probe": probe_bytes(self.ctx.probe)}
                         if g == 0 and self.ctx.probe is not None else {})
                with critical():
                    self.archive.commit_generation(self.run_id, g, rows, **extra)
                self.journal.committed()
                st.generations_done = g
                if self.journal.hits:
                    self.log(f"run {self.run_id} gen {g}: {self.journal.hits} jobs served "
                             "from the journal")
                    self.journal.hits = 0
                if bar is not None:
                    best = st.grid.best()
                    rate = (st.n_fitted - fitted0) / (time.monotonic() - self.t0)
                    bar.update(1)
                    bar.set_postfix(best=f"{best.loss:.4f}" if best else "-",
                                    frontier=len(books.frontier()), evals_s=f"{rate:.2f}")
                if cfg.run.wall_time_s > 0 and time.monotonic() - self.t0 > cfg.run.wall_time_s:
                    status = "stopped:wall_time" if g < cfg.run.generations else "finished"
                    break
            stopping.check()
        except (KeyboardInterrupt, StopRequested):
            self._interrupted()
            raise
        except Exception as exc:
            wrapped = stopping.chained_stop(exc)  # a stop that compiled code wrapped
            if wrapped is not None:
                self._interrupted()
                raise wrapped from exc
            self.archive.update_run(self.run_id, status="failed")
            self.archive.unlock_run(self.run_id)
            raise
        finally:
            self.pool.reset()
            if hasattr(self.operator, "prefetch"):  # no LLM batch left in flight
                getattr(self.operator, "close")()  # noqa: B009
            if bar is not None:
                bar.close()
        with critical():
            self.archive.update_run(self.run_id, status=status, finished_at=utc_now())
            self.archive.unlock_run(self.run_id)
        final_scores.record(self.archive, self.run_id, self.ctx, cfg.run.workers, self.log)
        best, pick = st.grid.best(), books.frontier().pick()
        return RunSummary(self.run_id, status, st.generations_done, st.n_fitted,
                          best.program_id if best else None,
                          best.loss if best else float("inf"),
                          pick.program_id if pick else None, time.monotonic() - self.t0,
                          self.fallback_generation, st.n_fitted - fitted0)

    def _interrupted(self) -> None:
        """Mark the run interrupted and release it, the workers stopped first (they must
        not compute on while the archive is written)."""
        self.pool.reset()
        with critical():
            self.archive.update_run(self.run_id, status="interrupted")
            self.archive.unlock_run(self.run_id)

    def _budget_exhausted(self) -> str:
        cfg, st = self.cfg, self.books.state
        if cfg.run.max_evaluations and st.n_fitted >= cfg.run.max_evaluations:
            return "evaluations"
        if cfg.llm.max_total_tokens is not None and st.llm_tokens >= cfg.llm.max_total_tokens:
            return "llm_tokens"
        if cfg.llm.max_cost_usd is not None and st.llm_cost >= cfg.llm.max_cost_usd:
            return "llm_cost"
        return ""

    def _generation(self, g: int) -> list[Any]:
        """The rows of generation ``g`` (0: the seeds), computed in memory."""
        cfg, books, ctx = self.cfg, self.books, self.ctx
        if g == 0:
            return generation_zero(books, ctx, cfg, self.pool, self.seeds, self.log)
        parents, insp = choose(books, cfg, g)
        prefetch = getattr(self.operator, "prefetch", None)
        propose: Callable[..., list[Proposal]] = self.operator.propose
        if prefetch is not None:  # the mixed operator: it collects generation g's batch
            propose = functools.partial(propose, generation=g)
        try:
            proposals = propose(parents, insp, generation_rng(cfg.run.seed, g, PURPOSE_OPERATOR),
                                cfg.search.children)
        except BudgetExhausted as exc:  # the LLM operator's own budget
            raise _Stop("llm_budget") from exc
        except LLMUnavailable as exc:  # endpoint gone, on_failure = stop
            raise _Stop("llm_unavailable") from exc
        if self.fallback_generation is None and getattr(self.operator, "fallen_back", False):
            self.fallback_generation = g
            self.log(f"generation {g}: the LLM endpoint failed every request; later "
                     "children come from the offline operator")
        asked = [p for p in proposals if p.operator.startswith("llm:")]  # mixed: the LLM's
        mixed = bool(asked) and len(asked) < len(proposals)
        asked = asked if mixed else list(proposals)
        if asked and all(p.source is None for p in asked):  # said, not just stored
            why = Counter(p.error or "no program" for p in asked).most_common(2)
            self.log(f"generation {g}: none of the {len(asked)} {'LLM ' * mixed}proposals "
                     "held a program (" + ", ".join(f"{n} x {r}" for r, n in why) + ")")
        if prefetch is not None:
            # overlap: the next generations' LLM requests run while this one fits
            for t in range(g + 1, min(g + cfg.operator.lookahead, cfg.run.generations) + 1):
                prefetch(parents, insp, generation_rng(cfg.run.seed, t, PURPOSE_OPERATOR),
                         cfg.search.children, generation=t)
        rows = books.llm_rows(g, proposals)
        rows += evaluate_children(books, self.pool, cfg, g, proposals, ctx.probe)
        rows += maybe_refresh(books, ctx, cfg, self.pool, g, self.log)
        if g == cfg.run.generations and cfg.fit.polish_evals > 0:
            rows += polish(books, ctx, cfg, g, self.log, self.pool)
        return rows


def _progress(cfg: Config, start: int) -> Any:
    if not cfg.run.progress:
        return None
    from tqdm import tqdm

    return tqdm(total=cfg.run.generations + 1, initial=start, file=sys.stderr,
                desc="generations", unit="gen", dynamic_ncols=True)
