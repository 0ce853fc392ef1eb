"""What the loop carries from one generation to the next, and how to rebuild it on resume.

Why this is spelled out: determinism across an interruption requires that the state a
resumed run starts from equals, field by field, the state the uninterrupted run had after
the same generation. Everything here is therefore either re-derived from archived rows in
the order they were first produced (``programs`` by ``(generation, seq)``, evaluations by
``(generation, seq)``), or recomputed deterministically (corpora, by the loop).
"""

from __future__ import annotations

import hashlib
import math
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any

from evolve.archive import Archive
from evolve.archive.models import CorpusVersion, Evaluation, FrontierRow, GridCell, LLMCall
from evolve.config.schema import Config
from evolve.errors import ArchiveError
from evolve.program.language import Program
from evolve.search.context import Scored
from evolve.search.grid import Elite, Grid
from evolve.search.pareto import Frontier
from evolve.search.selection import split_loss

KEPT_REJECTIONS = 8  # per parent: rejection reasons of its children kept for prompts


def source_id(text: str) -> str:
    """Id of a source that does not parse (no normalisation possible): sha256 of the text."""
    return hashlib.sha256(text.encode("utf-8", "surrogatepass")).hexdigest()


@dataclass
class EliteInfo:
    """What parents and corpus refreshes need of an accepted program."""

    program: Program
    groups: dict[str, dict[str, float]]
    metrics: dict[str, dict[str, Any]]
    loss: float
    val_loss: float = math.nan


@dataclass
class LoopState:
    grid: Grid
    info: dict[str, EliteInfo] = field(default_factory=dict)
    programs: dict[str, Program] = field(default_factory=dict)
    seen_ids: set[str] = field(default_factory=set)
    fingerprints: dict[str, str] = field(default_factory=dict)  # fingerprint -> first id
    fp_of: dict[str, str | None] = field(default_factory=dict)  # id -> fingerprint
    corpus_rows: list[CorpusVersion] = field(default_factory=list)
    ref_loss: float = float("inf")  # champion loss right after the last refresh
    n_refreshes: int = 0  # refreshes after generation 0
    last_refresh_gen: int = 0
    n_fitted: int = 0  # children sent to fitting (the evaluation budget)
    llm_tokens: int = 0
    llm_cost: float = 0.0
    generations_done: int = -1
    _seq: dict[tuple[str, int], int] = field(default_factory=dict)
    # parent id -> reasons its children were rejected after fitting (the last few)
    rejections: dict[str, list[str]] = field(default_factory=dict)

    def note_rejection(self, parent_id: str, reason: str) -> None:
        kept = self.rejections.setdefault(parent_id, [])
        kept.append(reason)
        del kept[:-KEPT_REJECTIONS]

    def next_seq(self, generation: int, what: str = "eval") -> int:
        key = (what, generation)
        self._seq[key] = self._seq.get(key, -1) + 1
        return self._seq[key]

    def remember(self, prog: Program, res: Scored) -> None:
        self.info[prog.id] = EliteInfo(prog, res.groups or {}, res.metrics, res.loss,
                                       res.val_loss)

    def llm_rows(self, run_id: int, generation: int, proposals: Sequence[Any]) -> list[LLMCall]:
        """``llm_calls`` rows of a generation's proposals (one per distinct call), counted
        against the LLM budgets."""
        rows: list[LLMCall] = []
        seen: set[int] = set()
        for prop in proposals:
            call = prop.llm_call
            if call is None or id(call) in seen:
                continue
            seen.add(id(call))
            row = llm_row(run_id, generation, len(rows), call)
            self.llm_tokens += row.prompt_tokens + row.completion_tokens
            # replayed calls cost nothing but count at their recorded price, so a replay
            # stops at the same budget as the recorded run
            self.llm_cost += float(call.get("recorded_cost_usd", row.cost_usd) or 0.0)
            rows.append(row)
        return rows


def evaluation_row(run_id: int, generation: int, seq: int, program_id: str | None, kind: str,
                   operator: str, corpus_version: str, res: Scored | None = None,
                   complexity: int | None = None, reason: str = "") -> Evaluation:
    """An ``evaluations`` row: a fit/score outcome, or (without ``res``) a rejection."""
    if res is None:
        return Evaluation(run_id=run_id, generation=generation, seq=seq,
                          program_id=program_id, kind=kind, operator=operator,
                          corpus_version=corpus_version, constants=None, metrics=None,
                          loss=None, complexity=complexity, n_evals=0, status="rejected",
                          reason=reason)
    return Evaluation(run_id=run_id, generation=generation, seq=seq, program_id=program_id,
                      kind=kind, operator=operator, corpus_version=corpus_version,
                      constants=res.groups, metrics=res.metrics or None, loss=res.loss,
                      complexity=complexity, n_evals=res.n_evals,
                      status="accepted" if res.ok else "rejected", reason=res.reason)


def llm_row(run_id: int, generation: int, seq: int, call: dict[str, Any]) -> LLMCall:
    """An ``llm_calls`` row from an operator's ``Proposal.llm_call`` dict."""
    g = call.get
    return LLMCall(run_id=run_id, generation=generation, seq=seq,
                   request_hash=str(g("request_hash") or ""), model=str(g("model") or ""),
                   template_version=str(g("template_version") or ""),
                   prompt_tokens=int(g("prompt_tokens") or 0),
                   completion_tokens=int(g("completion_tokens") or 0),
                   cost_usd=float(g("cost_usd") or 0.0), latency_s=float(g("latency_s") or 0.0),
                   status=str(g("status") or ""), reply=str(g("reply") or ""),
                   error=str(g("error") or ""), cached=bool(g("cached")))


def registers_fingerprint(generation: int, complexity: int | None, cap: int) -> bool:
    """The loop's rule for which programs claim their fingerprint (seeds always do)."""
    return complexity is not None and (generation == 0 or complexity <= cap)


def load_state(archive: Archive, run_id: int, grid: Grid, cfg: Config,
               parse: Callable[[str], Program]) -> LoopState:
    """The loop state after the run's last committed generation."""
    run = archive.run(run_id)
    g_done = run.generations_done
    st = LoopState(grid=grid, generations_done=g_done)
    rows = sorted(archive.programs(run_id), key=lambda r: (r.generation, r.seq))
    for r in rows:
        st.seen_ids.add(r.id)
        st.fp_of[r.id] = r.fingerprint
        if r.fingerprint is not None and registers_fingerprint(
                r.generation, r.complexity, cfg.search.complexity_cap):
            st.fingerprints.setdefault(r.fingerprint, r.id)
    sources = {r.id: r.source for r in rows}

    def program(pid: str) -> Program:
        if pid not in st.programs:
            if pid not in sources:
                raise ArchiveError(f"run {run_id}: program {pid[:12]} missing from the archive")
            st.programs[pid] = parse(sources[pid])
        return st.programs[pid]

    cells = []
    latest = archive.latest_accepted(run_id)
    for c in archive.grid(run_id, g_done):
        a, b = (int(x) for x in c.cell.split(","))
        cell = (a, b)
        ev = latest.get(c.program_id)
        val = split_loss(ev.metrics, "validate") if ev is not None else math.nan
        cells.append((cell, Elite(c.program_id, c.loss, c.complexity, c.n_features,
                                  c.elite_generation, val)))
        if ev is None or ev.loss != c.loss:
            raise ArchiveError(f"run {run_id}: grid elite {c.program_id[:12]} has no matching "
                               "accepted evaluation")
        st.info[c.program_id] = EliteInfo(program(c.program_id), ev.constants, ev.metrics,
                                          ev.loss, val)
    st.grid = type(grid).from_cells(cells, grid.complexity_edges, grid.max_features)
    st.corpus_rows = archive.corpus_versions(run_id)
    if not st.corpus_rows:
        raise ArchiveError(f"run {run_id}: no corpus version recorded")
    for row in st.corpus_rows:
        program(row.program_id)
    last = st.corpus_rows[-1]
    st.ref_loss = last.champion_loss if last.champion_loss is not None else float("inf")
    later = [r.generation for r in st.corpus_rows if r.generation > 0]
    st.n_refreshes, st.last_refresh_gen = len(later), max(later, default=0)
    st.n_fitted = archive.count_evaluations(run_id, ("child",))
    if cfg.operator.kind == "llm":  # what prompts show: the children's rejection reasons
        parents = {r.id: r.parent_ids for r in rows}
        for ev in sorted(archive.evaluations(run_id), key=lambda e: (e.generation, e.seq)):
            first = parents.get(ev.program_id or "") or []
            if ev.kind == "child" and ev.status == "rejected" and first:
                st.note_rejection(first[0], ev.reason or "")
    st.llm_tokens, st.llm_cost = archive.llm_usage(run_id)
    # replayed calls are stored at no cost but counted at their price (LoopState.llm_rows):
    # the run's own prices give it again, so a resumed run stops at the same budget
    st.llm_cost += sum(cfg.llm.cost_usd(p, c) for p, c in archive.replayed_llm_tokens(run_id))
    return st


def snapshot_rows(run_id: int, generation: int, grid: Grid, front: Frontier) -> list[Any]:
    """The grid and the hall of fame (with the pick) after a generation, as archive rows."""
    rows: list[Any] = [GridCell(run_id=run_id, generation=generation, cell=f"{c[0]},{c[1]}",
                                program_id=e.program_id, loss=e.loss, complexity=e.complexity,
                                n_features=e.n_features, elite_generation=e.generation)
                       for c, e in grid.cells()]
    pick = front.pick()
    rows += [FrontierRow(run_id=run_id, generation=generation, position=i,
                         program_id=e.program_id, loss=e.loss, complexity=e.complexity,
                         picked=pick is not None and e.program_id == pick.program_id)
             for i, e in enumerate(front.hall)]
    return rows
