"""The generation loop: seeds, then select -> propose -> reject -> fit -> score -> insert.

Why it is shaped this way:

* Every generation is computed in memory and committed in one transaction (with the grid,
  the frontier and any new corpus version), so the archive always ends at a complete
  generation and ``--resume`` continues from it.
* Every random draw comes from ``generation_rng(seed, generation, purpose)`` and every fit
  from ``child_seed(seed, generation, index)``: a resumed run draws exactly what an
  uninterrupted one would. The state carried between generations (grid, elites' constants,
  seen ids and fingerprints, corpus version, refresh bookkeeping) is all in the archive.
* Wall time only ever *stops* a run, after a complete generation; it decides nothing else.
* Selection sees training loss only. Validate/test metrics are stored, never read here.
* Generation 0: the bootstrap seed at its initial constants simulates the first corpora,
  every seed is fitted, the best one re-simulates them, and the seeds are fitted again.
* Corpus refresh: when the champion's training loss beats the loss recorded at the last
  refresh by ``refresh_margin``. The new corpora are kept only if the champion's
  closed-loop training loss beats that of their current producer (``refresh_gate``); then
  every elite is re-scored on them with its constants, so the grid compares like with like.
"""

from __future__ import annotations

import sys
import time
from dataclasses import dataclass
from typing import Any

from evolve.archive import Archive
from evolve.archive.models import CorpusVersion, Evaluation, ProgramRow
from evolve.closed_fit import closed_loop_fit
from evolve.config import Config, assign_splits
from evolve.errors import ArchiveError, BudgetExhausted, LLMUnavailable, ProgramError, UserError
from evolve.language import Program, parse_program
from evolve.operators.base import Operator, Parent, Proposal
from evolve.search.evaluate import (
    FitPool,
    Scored,
    build_probe,
    child_seed,
    fingerprint,
    generation_rng,
    make_context,
    probe_bytes,
    probe_from_bytes,
    refresh,
    restore_corpora,
    save_corpora,
    score_program,
)
from evolve.search.grid import Elite, Grid
from evolve.search.pareto import Frontier, select_parents
from evolve.search.setup import build_operator, load_evaluator, load_seeds
from evolve.search.state import (
    LoopState,
    evaluation_row,
    load_state,
    registers_fingerprint,
    snapshot_rows,
    source_id,
)

PURPOSE_SELECT, PURPOSE_OPERATOR = 1, 2


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


class _Stop(Exception):
    """A budget ran out inside a generation; the generation is dropped, the run stops."""


def worst_table(train: dict[str, Any], rows: int = 6) -> str:
    """Where a program errs most: the training runs / load-stage slices with the largest
    mean-E2E error, measured vs simulated (mean E2E, TTFT, per-token decode interval)."""
    ranked = sorted(train.items(), key=lambda kv: -float(kv[1]["ape"].get("e2e_mean", 0.0)))
    lines = ["| run (load stage slice) | E2E sim / meas (s) | TTFT sim / meas (ms) | "
             "decode interval sim / meas (ms) |", "|---|---|---|---|"]
    for name, m in ranked[:rows]:
        p, me = m["pred"], m["meas"]
        if not {"e2e_mean", "ttft_mean", "itl_mean"} <= set(p) & set(me):
            continue
        lines.append(f"| {name} | {p['e2e_mean']:.3f} / {me['e2e_mean']:.3f} | "
                     f"{1e3 * p['ttft_mean']:.1f} / {1e3 * me['ttft_mean']:.1f} | "
                     f"{1e3 * p['itl_mean']:.2f} / {1e3 * me['itl_mean']:.2f} |")
    return "\n".join(lines) if len(lines) > 2 else ""


class Search:
    """One run (new or resumed) over one archive."""

    def __init__(self, cfg: Config, archive: Archive, run_id: int | None = None,
                 operator: Operator | None = None, log: Any = None):
        self.cfg, self.archive = cfg, archive
        self.t0 = time.monotonic()
        self.log = log or (lambda msg: print(msg, file=sys.stderr))
        self.evaluator = load_evaluator(cfg)
        self.seeds = load_seeds(cfg)
        if run_id is None:
            splits = assign_splits(self.evaluator.scenarios, cfg.split.mode)
        else:
            splits = archive.run(run_id).splits
            missing = sorted(set(splits) - set(self.evaluator.by_name))
            if missing:
                raise ArchiveError(f"run {run_id} used scenario {missing[0]!r}, not in the data")
        self.operator = operator or build_operator(cfg, splits)
        self.run_id = run_id if run_id is not None else archive.create_run(
            cfg.run.seed, cfg.stored_dict(), splits, None)
        self.ctx = make_context(cfg, self.evaluator, splits)
        self.pool = FitPool(self.ctx, cfg.run.workers)
        self.state = LoopState(grid=self._new_grid())

    def _new_grid(self) -> Grid:
        return Grid(tuple(self.cfg.search.complexity_edges))

    # ---- driver -------------------------------------------------------------------------
    def run(self) -> RunSummary:
        cfg, st = self.cfg, self.state
        run = self.archive.run(self.run_id)
        start = run.generations_done + 1
        if start > 0:
            self.state = st = load_state(self.archive, self.run_id, self._new_grid(), cfg,
                                         parse_program)
            self.ctx.probe = probe_from_bytes(run.probe)
            if start <= cfg.run.generations:  # work left: rebuild the current corpora
                self._rebuild_corpus([r for r in st.corpus_rows if r.adopted][-1])
        self.archive.update_run(self.run_id, status="running", finished_at=None)
        status = "finished"
        bar = _progress(cfg, start) if start <= cfg.run.generations else None
        try:
            for g in range(start, cfg.run.generations + 1):
                why = self._budget_exhausted()
                if why:
                    status = f"stopped:{why}"
                    break
                try:
                    rows = self._generation_zero() if g == 0 else self._generation(g)
                except _Stop as stop:
                    status = f"stopped:{stop}"
                    break
                rows += snapshot_rows(self.run_id, g, st.grid, self._frontier())
                extra = {"probe": probe_bytes(self.ctx.probe)} if g == 0 else {}
                self.archive.commit_generation(self.run_id, g, rows, **extra)
                st.generations_done = g
                if bar is not None:
                    best = st.grid.best()
                    bar.update(1)
                    bar.set_postfix(best=f"{best.loss:.4f}" if best else "-",
                                    frontier=len(self._frontier()),
                                    evals_s=f"{st.n_fitted / (time.monotonic() - self.t0):.2f}")
                if cfg.run.wall_time_s > 0 and time.monotonic() - self.t0 > cfg.run.wall_time_s:
                    status = "stopped:wall_time" if g < cfg.run.generations else "finished"
                    break
        except KeyboardInterrupt:
            self.archive.update_run(self.run_id, status="interrupted")
            raise
        except Exception:
            self.archive.update_run(self.run_id, status="failed")
            raise
        finally:
            self.pool.reset()
            if bar is not None:
                bar.close()
        from evolve.archive.store import utc_now

        self.archive.update_run(self.run_id, status=status, finished_at=utc_now())
        best, pick = st.grid.best(), self._frontier().pick()
        return RunSummary(self.run_id, status, st.generations_done, st.n_fitted,
                          best.program_id if best else None,
                          best.loss if best else float("inf"),
                          pick.program_id if pick else None, time.monotonic() - self.t0)

    def _budget_exhausted(self) -> str:
        cfg, st = self.cfg, self.state
        if cfg.run.max_evaluations and st.n_fitted >= cfg.run.max_evaluations:
            return "evaluations"
        if cfg.llm.max_total_tokens is not None and st.llm_tokens >= cfg.llm.max_total_tokens:
            return "llm_tokens"
        if cfg.llm.max_cost_usd is not None and st.llm_cost >= cfg.llm.max_cost_usd:
            return "llm_cost"
        return ""

    # ---- generation 0: seeds --------------------------------------------------------------
    def _generation_zero(self) -> list[Any]:
        cfg, st = self.cfg, self.state
        rows: list[Any] = []
        seeds = list(dict((p.id, (stem, p)) for stem, p in self.seeds).values())
        stems = [s for s, _ in seeds]
        boot = seeds[stems.index(cfg.search.bootstrap_seed)][1] if \
            cfg.search.bootstrap_seed in stems else seeds[0][1]
        init = {"global": dict(zip(boot.const_names, map(float, boot.init_vector()),
                                   strict=True))}
        self.log(f"run {self.run_id}: simulating {len(self.ctx.names)} runs with seed "
                 f"{boot.id[:12]} at its initial constants")
        rows.append(self._new_corpus(0, boot, init, "global"))
        self.ctx.probe = build_probe(self.evaluator, self.ctx.train)
        digits = cfg.search.fingerprint_digits
        for stem, prog in seeds:
            rows.append(self._program_row(prog, prog.source, (), f"seed:{stem}", 0, fp=(
                fingerprint(prog, self.ctx.probe, digits) if cfg.search.dedup_fingerprint
                else None)))
            self._register(prog, 0)
        jobs = [(p, child_seed(cfg.run.seed, 0, i)) for i, (_s, p) in enumerate(seeds)]
        first = [r for _fp, r in self.pool.map(jobs)]
        if cfg.fit.seed_polish_evals > 0:
            first = [self._closed_refit(p, r, cfg.fit.seed_polish_evals, 20_000 + i, 0)
                     for i, ((_s, p), r) in enumerate(zip(seeds, first, strict=True))]
        rows += [self._eval_row(0, p, "seed", f"seed:{s}", r) for (s, p), r in zip(
            seeds, first, strict=True)]
        ok = [(r.loss, p.id, p, r) for (_s, p), r in zip(seeds, first, strict=True) if r.ok]
        if not ok:
            raise UserError("no seed program could be fitted: " + first[0].reason)
        _loss, _pid, champ, champ_res = min(ok, key=lambda t: (t[0], t[1]))
        self.log(f"run {self.run_id}: re-simulating with the best seed {champ.id[:12]}")
        corpus = self._new_corpus(0, champ, champ_res.groups or {}, self.ctx.scope)
        rows.append(corpus)
        if corpus.adopted:  # fit the seeds again on the champion's batches
            self.pool.reset()
            jobs = [(p, child_seed(cfg.run.seed, 0, len(seeds) + i))
                    for i, (_s, p) in enumerate(seeds)]
            second = [r for _fp, r in self.pool.map(jobs)]
            for (stem, prog), res1, res2 in zip(seeds, first, second, strict=True):
                # Judging is closed loop, so both fits are comparable: keep the better one.
                # (A teacher-forced refit on new batches can land on constants that
                # overload a run; it must not replace a good first fit.)
                if res2.ok and (not res1.ok or res2.loss < res1.loss):
                    rows.append(self._eval_row(0, prog, "refit", f"seed:{stem}", res2))
                    self._accept(prog, res2, 0)
                else:
                    rows.append(evaluation_row(
                        self.run_id, 0, st.next_seq(0), prog.id, "refit", f"seed:{stem}",
                        self.evaluator.corpus_version, complexity=prog.complexity,
                        reason=f"refit no better than the first fit ({res2.loss:.4f} >= "
                        f"{res1.loss:.4f})"))
                    self._accept(prog, res1, 0)
        else:
            for (_stem, prog), res in zip(seeds, first, strict=True):
                self._accept(prog, res, 0)
        best = st.grid.best()
        corpus.champion_loss = best.loss if best else None
        st.ref_loss = best.loss if best else float("inf")
        return rows

    # ---- generation g >= 1 ----------------------------------------------------------------
    def _generation(self, g: int) -> list[Any]:
        cfg, st = self.cfg, self.state
        rows: list[Any] = []
        elites = st.grid.elites()
        sel = generation_rng(cfg.run.seed, g, PURPOSE_SELECT)
        k = cfg.search.children * cfg.search.parents_per_child
        parents = [self._parent(e.program_id) for e in select_parents(elites, sel, k)]
        front = sorted(self._frontier().members, key=lambda e: (e.loss, e.program_id))
        insp = [self._parent(e.program_id) for e in front[: cfg.search.inspirations]]
        # Operators derive child i from parents[i % len(parents)] and may cross it with the
        # others: the first K parents are the children's primaries, all are tournament
        # winners.
        try:
            proposals = self.operator.propose(parents, insp, generation_rng(
                cfg.run.seed, g, PURPOSE_OPERATOR), cfg.search.children)
        except BudgetExhausted as exc:  # the LLM operator's own budget
            raise _Stop("llm_budget") from exc
        except LLMUnavailable as exc:  # endpoint gone, on_failure = stop
            raise _Stop("llm_unavailable") from exc
        rows += st.llm_rows(self.run_id, g, proposals)
        # 1. parse; drop known ids and over-cap programs (cheap, in proposal order)
        rejected: dict[int, tuple[str | None, str]] = {}
        pending: list[tuple[int, Proposal, Program]] = []
        for i, prop in enumerate(proposals):
            prog, pid, reason, new_rows = self._screen(g, prop)
            rows += new_rows
            if prog is None:
                rejected[i] = (pid, reason)
            else:
                pending.append((i, prop, prog))
        # 2. fingerprint and fit in the workers; a twin's fit is computed but discarded
        #    (so each program is compiled once, in the worker that fits it)
        digits = cfg.search.fingerprint_digits if cfg.search.dedup_fingerprint else None
        results = self.pool.map([(p, child_seed(cfg.run.seed, g, i)) for i, _, p in pending],
                                digits)
        # 3. in proposal order: claim fingerprints, reject twins, enforce the budget
        fitted: dict[int, tuple[Program, Scored]] = {}
        for (i, prop, prog), (fp, res) in zip(pending, results, strict=True):
            rows.append(self._program_row(prog, prog.source, prop.parent_ids, prop.operator,
                                          g, fp=fp))
            twin = st.fingerprints.get(fp) if fp is not None else None
            self._register(prog, g)
            budget = cfg.run.max_evaluations
            if twin is not None:
                rejected[i] = (prog.id, f"same predictions as program {twin[:12]}")
            elif budget and st.n_fitted >= budget:
                rejected[i] = (prog.id, "evaluation budget exhausted")
            else:
                st.n_fitted += 1
                fitted[i] = (prog, res)
        # 4. one evaluation row per proposal, in proposal order
        for i, prop in enumerate(proposals):
            if i in fitted:
                prog, res = fitted[i]
                rows.append(self._eval_row(g, prog, "child", prop.operator, res))
                self._accept(prog, res, g)
                continue
            pid, reason = rejected[i]
            rows.append(evaluation_row(self.run_id, g, st.next_seq(g), pid, "screen",
                                       prop.operator, self.evaluator.corpus_version,
                                       reason=reason))
        rows += self._maybe_refresh(g)
        if g == cfg.run.generations and cfg.fit.polish_evals > 0:
            rows += self._polish(g)
        return rows

    def _closed_refit(self, prog: Program, res: Scored, evals: int, salt: int, g: int
                      ) -> Scored:
        """``res`` or, if better, its constants refitted closed loop on the stage slices."""
        sliced = sorted(set(self.ctx.slice_parent.values()) & set(self.ctx.train))
        if not res.ok or not sliced:
            return res
        fit = closed_loop_fit(prog, self.evaluator, sliced, self.ctx.scope,
                              child_seed(self.cfg.run.seed, g, salt), start=res.groups,
                              max_evals=evals, width_s=self.cfg.fit.slice_seconds,
                              warmup_s=self.cfg.fit.slice_warmup_seconds)
        out = score_program(self.ctx, prog, fit.groups)
        out.n_evals = res.n_evals + fit.n_evals
        return out if out.ok and out.loss < res.loss else res

    def _polish(self, g: int) -> list[Any]:
        """Refit the frontier pick and the champion closed loop (last generation only).

        Teacher-forced constants are a good start but not the closed-loop optimum; CMA-ES
        on the stage slices (``evolve.closed_fit``) finds it. A polished evaluation is kept
        only if it beats the program's current loss, so the grid stays consistent.
        """
        st = self.state
        if self.ctx.slices is None:
            return []
        targets = []
        for e in (self._frontier().pick(), st.grid.best()):
            if e is not None and e.program_id not in [t.program_id for t in targets]:
                targets.append(e)
        rows: list[Any] = []
        for i, e in enumerate(targets):
            info = st.info[e.program_id]
            current = Scored(info.groups, info.metrics, info.loss)
            res = self._closed_refit(info.program, current, self.cfg.fit.polish_evals,
                                     10_000 + i, g)
            if res is not current:
                rows.append(self._eval_row(g, info.program, "polish", "closed_loop_fit", res))
                self._accept(info.program, res, e.generation)
                self.log(f"run {self.run_id}: polished {e.program_id[:12]} closed loop: "
                         f"loss {e.loss:.4f} -> {res.loss:.4f}")
            else:
                rows.append(evaluation_row(self.run_id, g, st.next_seq(g), e.program_id,
                                           "polish", "closed_loop_fit",
                                           self.evaluator.corpus_version,
                                           reason="closed-loop refit found no loss below "
                                           f"{e.loss:.4f}"))
        return rows

    def _screen(self, g: int, prop: Proposal
                ) -> tuple[Program | None, str | None, str, list[Any]]:
        """Parse one proposal and reject what needs no computation: no source, no parse,
        a known id, complexity over the cap.

        Returns (program to fingerprint and fit, or None; id to record; rejection reason;
        program rows).
        """
        st, cfg = self.state, self.cfg
        if prop.source is None:
            return None, None, prop.error or "operator returned no source", []
        try:
            prog = parse_program(prop.source)
        except ProgramError as exc:
            pid = source_id(prop.source)
            rows = [] if pid in st.seen_ids else [
                self._program_row(None, prop.source, prop.parent_ids, prop.operator, g, pid)]
            st.seen_ids.add(pid)
            return None, pid, f"does not parse: {exc}", rows
        if prog.id in st.seen_ids:
            return None, prog.id, f"duplicate of program {prog.id[:12]}", []
        st.seen_ids.add(prog.id)
        if prog.complexity > cfg.search.complexity_cap:
            row = self._program_row(prog, prog.source, prop.parent_ids, prop.operator, g)
            return None, prog.id, (f"complexity {prog.complexity} > cap "
                                   f"{cfg.search.complexity_cap}"), [row]
        return prog, prog.id, "", []

    # ---- corpus refresh -------------------------------------------------------------------
    def _maybe_refresh(self, g: int) -> list[Any]:
        cfg, st = self.cfg.search, self.state
        best = st.grid.best()
        if (best is None or cfg.max_refreshes <= st.n_refreshes
                or g - st.last_refresh_gen < cfg.refresh_min_gap
                or not best.loss < st.ref_loss * (1.0 - cfg.refresh_margin)):
            return []
        info = st.info[best.program_id]
        row = self._new_corpus(g, info.program, info.groups, self.ctx.scope)
        self.log(f"\nrun {self.run_id} gen {g}: champion {best.program_id[:12]} (loss "
                 f"{best.loss:.4f} < {st.ref_loss:.4f}): closed-loop loss "
                 f"{row.closed_loop_loss:.4f}; corpora " +
                 ("refreshed" if row.adopted else "kept (worse in closed loop)"))
        st.n_refreshes += 1
        st.last_refresh_gen = g
        if not row.adopted:
            st.ref_loss = row.champion_loss = best.loss
            return [row]
        self.pool.reset()
        rows: list[Any] = [row]
        old = st.grid.elites()
        st.grid = self._new_grid()
        for e in old:  # re-score every elite on the new corpora with its constants
            prev = st.info[e.program_id]
            res = score_program(self.ctx, prev.program, prev.groups)
            rows.append(self._eval_row(g, prev.program, "rescore", "rescore", res))
            self._accept(prev.program, res, e.generation)
        new_best = st.grid.best()
        st.ref_loss = row.champion_loss = new_best.loss if new_best else float("inf")
        return rows

    def _new_corpus(self, g: int, prog: Program, groups: dict, scope: str) -> CorpusVersion:
        """Simulate with ``prog``; adopt the corpora only if its closed-loop training loss
        beats that of the program behind the current corpora.

        Why the gate: a champion found by teacher forcing can be unstable in closed loop
        (e.g. queues that never drain); its batches would then poison every score.
        """
        st = self.state
        adopted_rows = [r for r in st.corpus_rows if r.adopted]
        saved = save_corpora(self.evaluator)
        version, closed = refresh(self.ctx, prog, groups, scope)
        adopted = (not adopted_rows or not self.cfg.search.refresh_gate
                   or closed < adopted_rows[-1].closed_loop_loss)
        if not adopted:
            restore_corpora(self.evaluator, saved)
        row = CorpusVersion(run_id=self.run_id, seq=len(st.corpus_rows), version=version,
                            generation=g, program_id=prog.id, scope=scope, constants=groups,
                            names=self.ctx.names, window_steps=self.ctx.window_steps,
                            closed_loop_loss=closed, adopted=adopted, champion_loss=None)
        st.corpus_rows.append(row)
        st.programs[prog.id] = prog
        return row

    def _rebuild_corpus(self, row: CorpusVersion) -> None:
        prog = self.state.programs[row.program_id]
        version, _closed = refresh(self.ctx, prog, row.constants, row.scope)
        if version != row.version:
            raise ArchiveError(f"run {self.run_id}: rebuilt corpus version {version} != "
                               f"stored {row.version}; data or simulator changed")

    # ---- bookkeeping ----------------------------------------------------------------------
    def _register(self, prog: Program, g: int) -> None:
        """Mark a parsed program as seen; it claims its fingerprint per the state's rule."""
        st = self.state
        st.seen_ids.add(prog.id)
        st.programs[prog.id] = prog
        fp = st.fp_of.get(prog.id)
        if fp is not None and registers_fingerprint(g, prog.complexity,
                                                    self.cfg.search.complexity_cap):
            st.fingerprints.setdefault(fp, prog.id)

    def _accept(self, prog: Program, res: Scored, g: int) -> None:
        if res.ok:
            self.state.remember(prog, res)
            self.state.grid.try_insert(Elite(prog.id, res.loss, prog.complexity,
                                             len(prog.features), g))

    def _parent(self, pid: str) -> Parent:
        info = self.state.info[pid]
        train = {n: m for n, m in sorted(info.metrics.items()) if m.get("split") == "train"}
        errors: dict[str, dict[str, float]] = {}
        for n, m in train.items():
            e = dict(m["ape"])
            for k in ("e2e_mean", "ttft_mean", "itl_mean"):
                if k in m["pred"] and k in m["meas"]:
                    e[f"pred_{k}"], e[f"meas_{k}"] = m["pred"][k], m["meas"][k]
            errors[n] = e
        return Parent(program=info.program, constants=info.groups, loss=info.loss,
                      train_errors=errors, worst_batches=worst_table(train))

    def _frontier(self) -> Frontier:
        return Frontier.from_elites(self.state.grid.elites(), self.cfg.search.pick_tolerance)

    def _program_row(self, prog: Program | None, source: str, parents: Any, operator: str,
                     g: int, pid: str | None = None, fp: str | None = None) -> ProgramRow:
        if prog is not None:
            self.state.fp_of[prog.id] = fp
        return ProgramRow(run_id=self.run_id, id=prog.id if prog else pid,
                          seq=self.state.next_seq(g, "program"), source=source,
                          parent_ids=list(parents), operator=operator, generation=g,
                          complexity=prog.complexity if prog else None,
                          n_features=len(prog.features) if prog else None, fingerprint=fp)

    def _eval_row(self, g: int, prog: Program, kind: str, operator: str,
                  res: Scored) -> Evaluation:
        return evaluation_row(self.run_id, g, self.state.next_seq(g), prog.id, kind, operator,
                              self.evaluator.corpus_version, res, prog.complexity)


def _progress(cfg: Config, start: int) -> Any:
    if not cfg.run.progress:
        return None
    from tqdm import tqdm

    return tqdm(total=cfg.run.generations + 1, initial=start, file=sys.stderr,
                desc="generations", unit="gen", dynamic_ncols=True)
