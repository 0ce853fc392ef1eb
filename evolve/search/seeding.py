"""Generation 0: the seed programs, the first corpora and the fingerprint probe.

Why this order: teacher forcing needs corpora, and corpora need a model. So the bootstrap
seed at its *initial* constants simulates the first corpora; every seed is fitted on them
(and, with ``fit.seed_polish_evals``, refitted closed loop); the best seed re-simulates the
corpora; and the seeds are fitted again on those, keeping the better of the two fits
(judging is closed loop, so both fits are comparable; a teacher-forced refit on new batches
can land on constants that overload a run and must not replace a good first fit). With
``fit.fitness = "teacher_forced"`` the first fit's score was made on the old batches, so
it is re-scored on the new ones before the comparison (as a corpus refresh re-scores the
elites): the grid must compare like with like.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from evolve.config.schema import Config
from evolve.errors import UserError
from evolve.fitting.closed_loop import SEED_SIGMA0
from evolve.program.language import Program
from evolve.search.books import Books
from evolve.search.context import RunContext
from evolve.search.execution.executors import Executor
from evolve.search.fingerprint import build_probe, fingerprint
from evolve.search.polish import refit_job
from evolve.search.refresh import new_corpus, rescore
from evolve.search.rng import child_seed


def generation_zero(books: Books, ctx: RunContext, cfg: Config, pool: Executor,
                    seed_programs: Sequence[tuple[str, Program]], log: Any) -> list[Any]:
    """Fit and record every seed; returns the generation's rows."""
    st = books.state
    rows: list[Any] = []
    seeds = list(dict((p.id, (stem, p)) for stem, p in seed_programs).values())
    stems = [s for s, _ in seeds]
    boot = seeds[stems.index(cfg.search.bootstrap_seed)][1] if \
        cfg.search.bootstrap_seed in stems else seeds[0][1]
    if cfg.search.bootstrap_seed and cfg.search.bootstrap_seed not in stems:
        log(f"run {books.run_id}: search.bootstrap_seed {cfg.search.bootstrap_seed!r} is not "
            f"among the seeds ({', '.join(stems)}); the first, {stems[0]!r}, stands in")
    init = {"global": dict(zip(boot.const_names, map(float, boot.init_vector()),
                               strict=True))}
    log(f"run {books.run_id}: simulating {len(ctx.names)} runs with seed "
        f"{boot.id[:12]} at its initial constants")
    rows.append(new_corpus(books, ctx, cfg, 0, boot, init, "global"))
    ctx.probe = build_probe(ctx.evaluator, ctx.train)
    digits = cfg.search.fingerprint_digits
    for stem, prog in seeds:
        rows.append(books.program_row(prog, prog.source, (), f"seed:{stem}", 0, fp=(
            fingerprint(prog, ctx.probe, digits) if cfg.search.dedup_fingerprint
            else None)))
        books.register(prog, 0)
    jobs = [(p, child_seed(cfg.run.seed, 0, i)) for i, (_s, p) in enumerate(seeds)]
    first = pool.map(jobs)
    if cfg.fit.seed_polish_evals > 0:  # closed-loop refits of the seeds, in the workers
        first = [r for _improved, r in pool.apply(refit_job, [
            (cfg, p.source, r, cfg.fit.seed_polish_evals, 20_000 + i, 0, SEED_SIGMA0)
            for i, ((_s, p), r) in enumerate(zip(seeds, first, strict=True))])]
    rows += [books.eval_row(0, p, "seed", f"seed:{s}", r) for (s, p), r in zip(
        seeds, first, strict=True)]
    ok = [(r.loss, p.id, p, r) for (_s, p), r in zip(seeds, first, strict=True) if r.ok]
    if not ok:
        raise UserError("no seed program could be fitted: " + first[0].reason)
    _loss, _pid, champ, champ_res = min(ok, key=lambda t: (t[0], t[1]))
    log(f"run {books.run_id}: re-simulating with the best seed {champ.id[:12]}")
    corpus = new_corpus(books, ctx, cfg, 0, champ, champ_res.groups or {}, ctx.scope)
    rows.append(corpus)
    if corpus.adopted:  # fit the seeds again on the champion's batches
        pool.reset()
        jobs = [(p, child_seed(cfg.run.seed, 0, len(seeds) + i))
                for i, (_s, p) in enumerate(seeds)]
        second = pool.map(jobs)
        if cfg.fit.fitness != "closed_loop":  # a teacher-forced score is the corpora's
            fitted = [i for i, r in enumerate(first) if r.ok]
            again = pool.apply(rescore, [(seeds[i][1].source, first[i].groups)
                                         for i in fitted])
            for i, res in zip(fitted, again, strict=True):
                first[i] = res  # recorded: a kept first fit's row must carry its grid loss
                rows.append(books.eval_row(0, seeds[i][1], "rescore", "rescore", res))
        for (stem, prog), res1, res2 in zip(seeds, first, second, strict=True):
            if res2.ok and (not res1.ok or res2.loss < res1.loss):
                rows.append(books.eval_row(0, prog, "refit", f"seed:{stem}", res2))
                books.accept(prog, res2, 0)
            else:
                rows.append(books.rejection_row(
                    0, prog.id, "refit", f"seed:{stem}",
                    f"refit no better than the first fit ({res2.loss:.4f} >= "
                    f"{res1.loss:.4f})", complexity=prog.complexity))
                books.accept(prog, res1, 0)
    else:
        for (_stem, prog), res in zip(seeds, first, strict=True):
            books.accept(prog, res, 0)
    best = st.grid.best()
    corpus.champion_loss = best.loss if best else None
    st.ref_loss = best.loss if best else float("inf")
    return rows
