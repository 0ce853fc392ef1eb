"""Corpus refresh: when and how the batches teacher forcing prices programs on are rebuilt.

Why: teacher forcing scores a program on batches that another model formed. As the
champion improves, the batches it would form drift from those of the model that made the
corpora, so the loop re-simulates with the champion when its training loss beats the loss
recorded at the last refresh by ``refresh_margin``. The new corpora are kept only if the
champion's closed-loop training loss beats that of their current producer
(``refresh_gate``): a champion found by teacher forcing can be unstable closed loop (queues
that never drain) and its batches would poison every score. When kept, every elite is
re-scored on them with its constants, so the grid compares like with like.
"""

from __future__ import annotations

from typing import Any

from evolve.archive.models import CorpusVersion
from evolve.config.schema import Config
from evolve.errors import ArchiveError, UserError
from evolve.program.language import Program, parse_program
from evolve.search.books import Books
from evolve.search.context import RunContext, Scored
from evolve.search.corpora import refresh, restore_corpora, save_corpora
from evolve.search.execution.executors import Executor
from evolve.search.judge import score_program


def rescore(ctx: RunContext, source: str, groups: dict[str, dict[str, float]]) -> Scored:
    """An elite scored on the current corpora with its constants (a pure job for the
    executor: the elites are re-scored in parallel, not one after another on the driver)."""
    return score_program(ctx, parse_program(source), groups)


def new_corpus(books: Books, ctx: RunContext, cfg: Config, g: int, prog: Program,
               groups: dict[str, dict[str, float]], scope: str) -> CorpusVersion:
    """Simulate with ``prog``; adopt the corpora only if its closed-loop training loss
    beats that of the program behind the current corpora."""
    st = books.state
    adopted_rows = [r for r in st.corpus_rows if r.adopted]
    saved = save_corpora(ctx.evaluator)
    try:  # the first corpora have nothing to fall back on: a failed simulation is fatal
        version, closed = refresh(ctx, prog, groups, scope, strict=not adopted_rows)
    except ValueError as exc:
        raise UserError(f"seed {prog.id[:12]} cannot simulate the runs at its initial "
                        f"constants ({exc}); pick another search.bootstrap_seed") from None
    adopted = (not adopted_rows or not cfg.search.refresh_gate
               or closed < adopted_rows[-1].closed_loop_loss)
    if not adopted:
        restore_corpora(ctx.evaluator, saved)
    row = CorpusVersion(run_id=books.run_id, seq=len(st.corpus_rows), version=version,
                        generation=g, program_id=prog.id, scope=scope, constants=groups,
                        names=ctx.names, window_steps=ctx.window_steps,
                        closed_loop_loss=closed, adopted=adopted, champion_loss=None)
    st.corpus_rows.append(row)
    st.programs[prog.id] = prog
    return row


def rebuild_corpus(books: Books, ctx: RunContext, row: CorpusVersion) -> None:
    """Re-simulate an archived corpus version on resume; it must hash the same."""
    prog = books.state.programs[row.program_id]
    version, _closed = refresh(ctx, prog, row.constants, row.scope)
    if version != row.version:
        raise ArchiveError(f"run {books.run_id}: rebuilt corpus version {version} != "
                           f"stored {row.version}; data or simulator changed")


def maybe_refresh(books: Books, ctx: RunContext, cfg: Config, pool: Executor, g: int,
                  log: Any) -> list[Any]:
    """Refresh the corpora with the champion if it earned it; returns the rows."""
    scfg, st = cfg.search, books.state
    best = st.grid.best()
    if (best is None or scfg.max_refreshes <= st.n_refreshes
            or g - st.last_refresh_gen < scfg.refresh_min_gap
            or not best.loss < st.ref_loss * (1.0 - scfg.refresh_margin)):
        return []
    info = st.info[best.program_id]
    row = new_corpus(books, ctx, cfg, g, info.program, info.groups, ctx.scope)
    log(f"\nrun {books.run_id} gen {g}: champion {best.program_id[:12]} (loss "
        f"{best.loss:.4f} < {st.ref_loss:.4f}): closed-loop loss "
        f"{row.closed_loop_loss:.4f}; corpora " +
        ("refreshed" if row.adopted else "kept (worse in closed loop)"))
    st.n_refreshes += 1
    st.last_refresh_gen = g
    if not row.adopted:
        st.ref_loss = row.champion_loss = best.loss
        return [row]
    pool.reset()
    rows: list[Any] = [row]
    old = st.grid.elites()
    st.grid = books.new_grid()
    infos = [st.info[e.program_id] for e in old]
    # re-score every elite on the new corpora with its constants (in the workers)
    scores = pool.apply(rescore, [(i.program.source, i.groups) for i in infos])
    for e, prev, res in zip(old, infos, scores, strict=True):
        rows.append(books.eval_row(g, prev.program, "rescore", "rescore", res))
        books.accept(prev.program, res, e.generation)
    new_best = st.grid.best()
    st.ref_loss = row.champion_loss = new_best.loss if new_best else float("inf")
    return rows
