"""Bookkeeping: the archive rows of one run and the loop state they must agree with.

Why one object for both: every decision the loop makes (a program seen, a fingerprint
claimed, an elite accepted) must be recorded in the same generation's rows, in the order
it was made, so that ``--resume`` rebuilds the same state from the archive
(:func:`evolve.search.state.load_state`). Keeping the writers of rows and the writers of
state together makes that pairing visible in one place.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from evaluator.api import Evaluator
from evolve.archive.models import Evaluation, ProgramRow
from evolve.config.schema import Config
from evolve.program.language import Program
from evolve.search.context import Scored
from evolve.search.grid import Elite, Grid
from evolve.search.pareto import Frontier
from evolve.search.selection import champion
from evolve.search.state import LoopState, evaluation_row, registers_fingerprint


class Books:
    """The rows and the state of one run (``state`` is replaced wholesale on resume)."""

    def __init__(self, cfg: Config, run_id: int, evaluator: Evaluator):
        self.cfg, self.run_id, self.evaluator = cfg, run_id, evaluator
        self.state = LoopState(grid=self.new_grid())

    def new_grid(self) -> Grid:
        return Grid(tuple(self.cfg.search.complexity_edges))

    def frontier(self) -> Frontier:
        return Frontier.from_elites(self.state.grid.elites(), self.cfg.search.pick_tolerance,
                                    self.cfg.search.pick_rule)

    def champion(self) -> Elite | None:
        """The elite chosen with the validate split in view (``evolve.search.selection``)."""
        return champion(self.state.grid.elites(), self.cfg.search.pick_tolerance)

    def register(self, prog: Program, g: int) -> None:
        """Mark a parsed program as seen; it claims its fingerprint per the state's rule."""
        st = self.state
        st.seen_ids.add(prog.id)
        st.programs[prog.id] = prog
        fp = st.fp_of.get(prog.id)
        if fp is not None and registers_fingerprint(g, prog.complexity,
                                                    self.cfg.search.complexity_cap):
            st.fingerprints.setdefault(fp, prog.id)

    def accept(self, prog: Program, res: Scored, g: int) -> None:
        """A valid evaluation competes for its grid cell (and becomes a possible parent)."""
        if res.ok:
            self.state.remember(prog, res)
            self.state.grid.try_insert(Elite(prog.id, res.loss, prog.complexity,
                                             len(prog.features), g, res.val_loss))

    def note_rejection(self, parent_id: str, reason: str) -> None:
        """A child of ``parent_id`` was rejected after fitting: its reason is shown to the
        LLM with that parent (:attr:`evolve.operators.base.Parent.rejections`)."""
        self.state.note_rejection(parent_id, reason)

    def program_row(self, prog: Program | None, source: str, parents: Sequence[str],
                    operator: str, g: int, pid: str | None = None,
                    fp: str | None = None) -> ProgramRow:
        """A ``programs`` row (``prog`` None: a source that did not parse, id ``pid``)."""
        if prog is not None:
            self.state.fp_of[prog.id] = fp
        return ProgramRow(run_id=self.run_id, id=prog.id if prog else pid,
                          seq=self.state.next_seq(g, "program"), source=source,
                          parent_ids=list(parents), operator=operator, generation=g,
                          complexity=prog.complexity if prog else None,
                          n_features=len(prog.features) if prog else None, fingerprint=fp)

    def eval_row(self, g: int, prog: Program, kind: str, operator: str,
                 res: Scored) -> Evaluation:
        """An ``evaluations`` row for a fit/score outcome of ``prog``."""
        return evaluation_row(self.run_id, g, self.state.next_seq(g), prog.id, kind, operator,
                              self.evaluator.corpus_version, res, prog.complexity)

    def rejection_row(self, g: int, pid: str | None, kind: str, operator: str, reason: str,
                      complexity: int | None = None) -> Evaluation:
        """An ``evaluations`` row for a rejection (nothing fitted, or nothing kept)."""
        return evaluation_row(self.run_id, g, self.state.next_seq(g), pid, kind, operator,
                              self.evaluator.corpus_version, complexity=complexity,
                              reason=reason)

    def llm_rows(self, g: int, proposals: Sequence[Any]) -> list[Any]:
        return self.state.llm_rows(self.run_id, g, proposals)
