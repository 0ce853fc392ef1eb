"""The archive's tables (SQLAlchemy 2.x declarative, SQLite).

Design choices, and why:

* Keys are natural and deterministic: ``(run_id, generation, seq)`` rather than global
  autoincrement ids, so two runs with the same seed write identical rows and a resumed run
  writes the same rows as an uninterrupted one.
* JSON columns go through :class:`CanonicalJSON` (sorted keys, floats as ``repr``), so the
  stored text is a pure function of the value.
* Programs are keyed per run (``run_id, id``): lineage (parents, operator, generation) is a
  property of the run that found the program; the source is the same everywhere.
* Program ids are untrusted on read: every id column is a :class:`ProgramId` (and
  ``programs.parent_ids`` a checked list), which calls ``evolve.archive.ids.checked_id``,
  so no reader meets an id that is not 64 hex digits (it would become a file name and an
  HTML attribute in the report).
* Wall-clock columns (``created_at``, ``finished_at``, ``latency_s``) and ``code_version``
  are informational; nothing reads them to decide anything.
"""

from __future__ import annotations

import json
import math
from collections.abc import Sequence
from typing import Any

from sqlalchemy import BigInteger, Float, Integer, LargeBinary, String, Text
from sqlalchemy.orm import DeclarativeBase, Mapped, mapped_column
from sqlalchemy.types import TypeDecorator

from evolve.archive.ids import checked_id, checked_ids
from evolve.errors import ArchiveError
from evolve.text.canonical import canonical_json

SCHEMA_VERSION = 1


class CanonicalJSON(TypeDecorator[Any]):
    """JSON stored as canonical text so identical values give identical bytes."""

    impl = Text
    cache_ok = True

    def __init__(self, where: str = "", constants: bool = False, ids: bool = False) -> None:
        """``where``: ``table.column``, named when a stored value is damaged; ``constants``:
        the value is ``{group: {constant: number}}`` and is checked to be that on reading
        (an edited archive must not reach a formatter or the Go exporter as text); ``ids``:
        the value is a list of program ids, each checked."""
        super().__init__()
        self.where, self.constants, self.ids = where, constants, ids

    def process_bind_param(self, value: Any, dialect: Any) -> str | None:
        return None if value is None else canonical_json(value)

    def process_result_value(self, value: str | None, dialect: Any) -> Any:
        if value is None:
            return None
        try:
            out = json.loads(value)
        except (ValueError, RecursionError):  # edited or damaged: one line, not a traceback
            raise ArchiveError(f"the archive's {self.where or 'data'} holds a value that is not "
                               f"JSON ({value[:40]!r}): the file was edited or damaged") from None
        if self.constants:
            _check_constants(out, self.where)
        if self.ids:
            out = checked_ids(out, self.where)
        return out


class ProgramId(TypeDecorator[str]):
    """A program id column: checked on every read (``evolve.archive.ids``); written as is."""

    impl = String
    cache_ok = True

    def __init__(self, where: str) -> None:
        super().__init__()
        self.where = where

    def process_bind_param(self, value: str | None, dialect: Any) -> str | None:
        return value  # a query's prefix (``LIKE 'ab%'``) is no id: not checked

    def process_result_value(self, value: Any, dialect: Any) -> str | None:
        return None if value is None else checked_id(value, self.where)


def _check_constants(value: Any, where: str) -> None:
    """``{group: {constant: number}}``, else a one-line ArchiveError naming the entry."""
    if not isinstance(value, dict):
        raise ArchiveError(f"the archive's {where} holds {type(value).__name__}, not constants "
                           "by group: the file was edited or damaged")
    for group, consts in value.items():
        if not isinstance(consts, dict):
            raise ArchiveError(f"the archive's {where} holds group {group!r} as "
                               f"{type(consts).__name__}, not constants: the file was edited "
                               "or damaged")
        for name, v in consts.items():
            if not isinstance(v, int | float) or isinstance(v, bool):
                raise ArchiveError(f"the archive's {where} holds constant {name!r} of group "
                                   f"{group!r} as {v!r}, not a number: the file was edited "
                                   "or damaged")


class Base(DeclarativeBase):
    pass


class SchemaVersion(Base):
    """One row: the archive layout version; other versions are refused on open."""

    __tablename__ = "schema_version"
    version: Mapped[int] = mapped_column(Integer, primary_key=True)


class Run(Base):
    __tablename__ = "runs"
    id: Mapped[int] = mapped_column(Integer, primary_key=True)
    # any seed the config takes (< 2**63): 64-bit on a server, as SQLite's INTEGER already is
    seed: Mapped[int] = mapped_column(BigInteger().with_variant(Integer, "sqlite"))
    config: Mapped[Any] = mapped_column(CanonicalJSON("runs.config"))
    code_version: Mapped[str] = mapped_column(String)  # informational, not compared
    status: Mapped[str] = mapped_column(String)  # running | finished | stopped:<why>
    generations_done: Mapped[int] = mapped_column(Integer, default=-1)  # last committed gen
    splits: Mapped[Any] = mapped_column(CanonicalJSON("runs.splits"))  # scenario name -> split
    probe: Mapped[bytes | None] = mapped_column(LargeBinary, nullable=True)  # fingerprint set
    created_at: Mapped[str] = mapped_column(String)  # wall clock, informational
    finished_at: Mapped[str | None] = mapped_column(String, nullable=True)


class ProgramRow(Base):
    """Every distinct source a run saw (parsed or not), with where it came from."""

    __tablename__ = "programs"
    run_id: Mapped[int] = mapped_column(Integer, primary_key=True)
    id: Mapped[str] = mapped_column(  # sha256 of the normalised source (of the text if unparsed)
        ProgramId("programs.id"), primary_key=True)
    seq: Mapped[int] = mapped_column(Integer)  # order first seen within its generation
    source: Mapped[str] = mapped_column(Text)
    parent_ids: Mapped[Any] = mapped_column(CanonicalJSON("programs.parent_ids", ids=True))
    operator: Mapped[str] = mapped_column(String)
    generation: Mapped[int] = mapped_column(Integer)  # first seen
    complexity: Mapped[int | None] = mapped_column(Integer, nullable=True)  # None: unparsed
    n_features: Mapped[int | None] = mapped_column(Integer, nullable=True)
    fingerprint: Mapped[str | None] = mapped_column(String, nullable=True)


class Evaluation(Base):
    """One judgement of a program: fitted and scored, rescored, or rejected with a reason."""

    __tablename__ = "evaluations"
    run_id: Mapped[int] = mapped_column(Integer, primary_key=True)
    generation: Mapped[int] = mapped_column(Integer, primary_key=True)
    seq: Mapped[int] = mapped_column(Integer, primary_key=True)
    program_id: Mapped[str | None] = mapped_column(ProgramId("evaluations.program_id"),
                                                   nullable=True, index=True)
    # seed | refit (generation 0) | child (fitted) | screen (rejected before fitting) | rescore
    kind: Mapped[str] = mapped_column(String)
    operator: Mapped[str] = mapped_column(String)
    corpus_version: Mapped[str] = mapped_column(String)
    constants: Mapped[Any] = mapped_column(  # group -> {c: v}
        CanonicalJSON("evaluations.constants", constants=True), nullable=True)
    metrics: Mapped[Any] = mapped_column(  # scenario -> {...}
        CanonicalJSON("evaluations.metrics"), nullable=True)
    loss: Mapped[float | None] = mapped_column(Float, nullable=True)  # search loss (train)
    complexity: Mapped[int | None] = mapped_column(Integer, nullable=True)
    n_evals: Mapped[int] = mapped_column(Integer, default=0)
    status: Mapped[str] = mapped_column(String)  # accepted | rejected
    reason: Mapped[str] = mapped_column(Text, default="")


class LLMCall(Base):
    __tablename__ = "llm_calls"
    run_id: Mapped[int] = mapped_column(Integer, primary_key=True)
    generation: Mapped[int] = mapped_column(Integer, primary_key=True)
    seq: Mapped[int] = mapped_column(Integer, primary_key=True)
    request_hash: Mapped[str] = mapped_column(String)
    model: Mapped[str] = mapped_column(String)
    template_version: Mapped[str] = mapped_column(String)
    prompt_tokens: Mapped[int] = mapped_column(Integer)
    completion_tokens: Mapped[int] = mapped_column(Integer)
    cost_usd: Mapped[float] = mapped_column(Float)
    latency_s: Mapped[float] = mapped_column(Float)  # wall clock, informational
    status: Mapped[str] = mapped_column(String)
    reply: Mapped[str] = mapped_column(Text)
    error: Mapped[str] = mapped_column(Text)
    cached: Mapped[bool] = mapped_column(Integer)


class GridCell(Base):
    """The full MAP-Elites grid after each generation (resume reads the last one)."""

    __tablename__ = "grid_cells"
    run_id: Mapped[int] = mapped_column(Integer, primary_key=True)
    generation: Mapped[int] = mapped_column(Integer, primary_key=True)
    cell: Mapped[str] = mapped_column(String, primary_key=True)  # JSON of the cell key
    program_id: Mapped[str] = mapped_column(ProgramId("grid_cells.program_id"))
    loss: Mapped[float] = mapped_column(Float)
    complexity: Mapped[int] = mapped_column(Integer)
    n_features: Mapped[int] = mapped_column(Integer)
    elite_generation: Mapped[int] = mapped_column(Integer)


class FrontierRow(Base):
    """The hall of fame after each generation: the best elite of every complexity, with
    the pick marked. The Pareto frontier (training loss vs complexity) is its
    non-dominated subset (:func:`on_frontier`); archives written before the hall of fame
    was stored hold the frontier alone, which the same function keeps whole."""

    __tablename__ = "frontier"
    run_id: Mapped[int] = mapped_column(Integer, primary_key=True)
    generation: Mapped[int] = mapped_column(Integer, primary_key=True)
    position: Mapped[int] = mapped_column(Integer, primary_key=True)
    program_id: Mapped[str] = mapped_column(ProgramId("frontier.program_id"))
    loss: Mapped[float] = mapped_column(Float)
    complexity: Mapped[int] = mapped_column(Integer)
    picked: Mapped[bool] = mapped_column(Integer)


def on_frontier(rows: Sequence[FrontierRow]) -> list[bool]:
    """For stored hall-of-fame rows: whether each is on the frontier, i.e. has a training
    loss strictly lower than every simpler row's (the sweep of ``Frontier.from_elites``)."""
    flags, best = [False] * len(rows), math.inf
    for i in sorted(range(len(rows)), key=lambda i: (rows[i].complexity, rows[i].position)):
        flags[i], best = rows[i].loss < best, min(best, rows[i].loss)
    return flags


class CorpusVersion(Base):
    """Every corpus refresh: what produced it (so replay can re-simulate it exactly), its
    producer's closed-loop loss, and whether the loop adopted it."""

    __tablename__ = "corpus_versions"
    run_id: Mapped[int] = mapped_column(Integer, primary_key=True)
    seq: Mapped[int] = mapped_column(Integer, primary_key=True)
    version: Mapped[str] = mapped_column(String, index=True)
    generation: Mapped[int] = mapped_column(Integer)
    program_id: Mapped[str] = mapped_column(ProgramId("corpus_versions.program_id"))
    scope: Mapped[str] = mapped_column(String)
    constants: Mapped[Any] = mapped_column(  # group -> {c: v}
        CanonicalJSON("corpus_versions.constants", constants=True))
    names: Mapped[Any] = mapped_column(CanonicalJSON("corpus_versions.names"))  # simulated
    window_steps: Mapped[int] = mapped_column(Integer)
    closed_loop_loss: Mapped[float] = mapped_column(Float)  # the producer's official loss
    adopted: Mapped[bool] = mapped_column(Integer)  # False: worse in closed loop, discarded
    champion_loss: Mapped[float | None] = mapped_column(Float, nullable=True)  # refresh ref.
