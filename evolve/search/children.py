"""Producing and evaluating children: screen the proposals, fit them, record every outcome.

Why the order of operations matters: the archive must not depend on how many workers fit
in parallel. So cheap rejections (no source, no parse, a known id, over the complexity
cap) happen first in proposal order; the survivors are fingerprinted in the driver
(numpy only, milliseconds) and, again in proposal order, each claims its fingerprint (a
later twin of an earlier program is rejected) and the evaluation budget is enforced; only
then are the rest fitted in the pool (results come back in job order). Every proposal gets
exactly one evaluation row.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import numpy as np

from evolve.config.schema import Config
from evolve.errors import ProgramError
from evolve.operators.base import Proposal
from evolve.operators.offline.repair import repairable, repairs
from evolve.program.language import Program, parse_program
from evolve.search.books import Books
from evolve.search.execution.executors import Executor
from evolve.search.fingerprint import fingerprint
from evolve.search.rng import child_seed
from evolve.search.state import source_id

Screened = tuple[Program | None, str | None, str, list[Any]]


def screen(books: Books, cfg: Config, g: int, prop: Proposal) -> Screened:
    """Parse one proposal and reject what needs no computation: no source, no parse,
    a known id, complexity over the cap.

    Returns (program to fingerprint and fit, or None; id to record; rejection reason;
    program rows).
    """
    st = books.state
    if prop.source is None:
        return None, None, prop.error or "operator returned no source", []
    try:
        prog = parse_program(prop.source)
    except ProgramError as exc:
        pid = source_id(prop.source)
        rows = [] if pid in st.seen_ids else [
            books.program_row(None, prop.source, prop.parent_ids, prop.operator, g, pid)]
        st.seen_ids.add(pid)
        return None, pid, f"does not parse: {exc}", rows
    if prog.id in st.seen_ids:
        return None, prog.id, f"duplicate of program {prog.id[:12]}", []
    st.seen_ids.add(prog.id)
    if prog.complexity > cfg.search.complexity_cap:
        row = books.program_row(prog, prog.source, prop.parent_ids, prop.operator, g)
        return None, prog.id, (f"complexity {prog.complexity} > cap "
                               f"{cfg.search.complexity_cap}"), [row]
    return prog, prog.id, "", []


def evaluate_children(books: Books, pool: Executor, cfg: Config, g: int,
                      proposals: Sequence[Proposal], probe: np.ndarray | None) -> list[Any]:
    """Screen, fingerprint, fit and record a generation's proposals; returns the rows.
    ``probe``: the run's fingerprint probe steps (None: no fingerprints).

    Then, with ``operator.kind = "llm"`` and ``operator.repairs`` > 0, every LLM child
    rejected after fitting (physics probe, fit) gets up to that many offline repair edits
    (:mod:`evolve.operators.offline.repair`), each a child of its own whose parent is the
    LLM program, screened and fitted the same way after the generation's proposals (fit
    seeds continue the proposals' positions, so the archive does not depend on timing)."""
    rows, failed = _evaluate(books, pool, cfg, g, proposals, probe, 0)
    limit = cfg.operator.repairs if cfg.operator.kind == "llm" else 0
    fixes = [Proposal(src, op, (pid,)) for pid, reason in failed
             for op, src in repairs(books.state.programs[pid].source, reason, limit)]
    if fixes:
        more, _ = _evaluate(books, pool, cfg, g, fixes, probe, len(proposals))
        rows += more
    return rows


def _evaluate(books: Books, pool: Executor, cfg: Config, g: int,
              proposals: Sequence[Proposal], probe: np.ndarray | None, offset: int
              ) -> tuple[list[Any], list[tuple[str, str]]]:
    """The rows of ``proposals`` (fit seeds from position ``offset`` on) and the (id,
    reason) of every LLM child rejected after fitting for a reason a repair may fix."""
    st = books.state
    rows: list[Any] = []
    # 1. parse; drop known ids and over-cap programs (cheap, in proposal order)
    rejected: dict[int, tuple[str | None, str]] = {}
    pending: list[tuple[int, Proposal, Program]] = []
    for i, prop in enumerate(proposals):
        prog, pid, reason, new_rows = screen(books, cfg, g, prop)
        rows += new_rows
        if prog is None:
            rejected[i] = (pid, reason)
        else:
            pending.append((i, prop, prog))
    # 2. fingerprint in the driver (numpy only, milliseconds) and, in proposal order, claim
    #    fingerprints, reject twins and enforce the budget; only the rest are fitted (a
    #    fifth of the children of a 60-generation run were twins, each once fitted for
    #    nothing)
    digits = cfg.search.fingerprint_digits if cfg.search.dedup_fingerprint else None
    to_fit: list[tuple[int, Program]] = []
    for i, prop, prog in pending:
        fp = fingerprint(prog, probe, digits) if digits and probe is not None else None
        rows.append(books.program_row(prog, prog.source, prop.parent_ids, prop.operator, g,
                                      fp=fp))
        twin = st.fingerprints.get(fp) if fp is not None else None
        books.register(prog, g)
        budget = cfg.run.max_evaluations
        if twin is not None:
            rejected[i] = (prog.id, f"same predictions as program {twin[:12]}")
        elif budget and st.n_fitted >= budget:
            rejected[i] = (prog.id, "evaluation budget exhausted")
        else:
            st.n_fitted += 1
            to_fit.append((i, prog))
    # 3. fit in the workers (results in job order)
    results = pool.map([(p, child_seed(cfg.run.seed, g, offset + i)) for i, p in to_fit])
    fitted = {i: (prog, res) for (i, prog), res in zip(to_fit, results, strict=True)}
    # 4. one evaluation row per proposal, in proposal order
    failed: list[tuple[str, str]] = []
    for i, prop in enumerate(proposals):
        if i in fitted:
            prog, res = fitted[i]
            rows.append(books.eval_row(g, prog, "child", prop.operator, res))
            books.accept(prog, res, g)
            if not res.ok and prop.parent_ids:
                books.note_rejection(prop.parent_ids[0], res.reason)
            if not res.ok and prop.operator.startswith("llm:") and repairable(res.reason):
                failed.append((prog.id, res.reason))
            continue
        pid, reason = rejected[i]
        rows.append(books.rejection_row(g, pid, "screen", prop.operator, reason))
    return rows, failed
