"""The :class:`Archive`: open/validate an archive, write generations, answer queries.

Where it lives (a SQLite file by default, or any SQLAlchemy URL such as a PostgreSQL
server) is :mod:`evolve.archive.engines`' business; this module speaks SQLAlchemy only.

Why writes are per generation: the loop builds every row of a generation in memory and
hands them over in one call, which commits them in one transaction together with the run's
``generations_done``. A process killed at any moment (even SIGKILL) leaves the archive at
the end of its last complete generation; resume continues from there and, because every
random stream is derived from (seed, generation), writes exactly what an uninterrupted run
would have written.
"""

from __future__ import annotations

import contextlib
import datetime as dt
import re
import sqlite3
import subprocess
import time
from collections.abc import Iterable, Iterator, Sequence
from pathlib import Path
from typing import Any

from sqlalchemy import func, inspect, select
from sqlalchemy.exc import IntegrityError, OperationalError, SQLAlchemyError
from sqlalchemy.orm import Session, sessionmaker

from evolve.archive import process_tables as aux
from evolve.archive.engines import first_line, open_engine, schema_lock
from evolve.archive.informational import INFORMATIONAL, comparable_config
from evolve.archive.models import (
    SCHEMA_VERSION,
    Base,
    CorpusVersion,
    Evaluation,
    FrontierRow,
    GridCell,
    LLMCall,
    ProgramRow,
    Run,
    SchemaVersion,
)
from evolve.errors import ArchiveError
from evolve.text.untrusted import mask_values
from evolve.text.words import EvalStatus


def code_version() -> str:
    """Package version plus ``git describe`` when available (informational only)."""
    from evolve import __version__

    try:
        out = subprocess.run(["git", "describe", "--always", "--dirty", "--tags"],
                             cwd=Path(__file__).resolve().parents[2], capture_output=True,
                             text=True, timeout=5, check=False)
        desc = out.stdout.strip() if out.returncode == 0 else ""
    except (OSError, subprocess.SubprocessError):
        desc = ""
    return f"{__version__}+{desc}" if desc else __version__


def utc_now() -> str:
    return dt.datetime.now(dt.UTC).isoformat(timespec="seconds")


class Archive:
    """One archive (a SQLite file path or a SQLAlchemy URL). Use as a context manager or
    call :meth:`close`. ``path`` is the file, or the URL without its password."""

    def __init__(self, path: str | Path, create: bool = True):
        self.engine, self.path = open_engine(path, create)
        self._session = sessionmaker(self.engine, expire_on_commit=False)
        try:
            with schema_lock(self.engine):  # runs opening a fresh server archive at once
                self._check_schema(create)
        except (SQLAlchemyError, sqlite3.DatabaseError) as exc:
            self.engine.dispose()
            detail = first_line(exc)
            if _read_only(detail):
                raise ArchiveError(f"archive {self.path}: read-only, cannot create or "
                                   f"write it ({detail})") from None
            raise ArchiveError(f"{self.path}: corrupt archive ({detail})") from None
        except ArchiveError:
            self.engine.dispose()
            raise
        self._aux_ready = False

    def _check_schema(self, create: bool) -> None:
        """Create the tables in an empty archive (only when ``create``: a read-only command
        must not write a schema into someone's empty database); refuse another schema
        version, and an archive that lacks a table or column (damaged, or written by
        another tool) before any command reads it or any run writes to it."""
        inspector = inspect(self.engine)
        tables = set(inspector.get_table_names())
        if "schema_version" not in tables and tables:
            raise ArchiveError(f"{self.path}: not an evolve archive (no schema_version table)")
        versions: list[int] = []
        if "schema_version" in tables:
            with self._session() as s:
                versions = list(s.scalars(select(SchemaVersion.version)))
        if not versions and not tables - {"schema_version", *Base.metadata.tables}:
            # new, or its creation was killed before the version row: (re)create it
            if not create:
                raise ArchiveError(f"{self.path}: no archive yet (an empty database; run "
                                   "`evolve run` first, or pass --archive)")
            Base.metadata.create_all(self.engine)
            with self._session.begin() as s:
                s.add(SchemaVersion(version=SCHEMA_VERSION))
            return
        if versions != [SCHEMA_VERSION]:
            raise ArchiveError(f"{self.path}: archive schema version "
                               f"{versions[0] if versions else '?'}, this evolve "
                               f"reads version {SCHEMA_VERSION}")
        for name, table in sorted(Base.metadata.tables.items()):
            if name not in tables:
                raise ArchiveError(f"archive {self.path}: missing table {name} (damaged, "
                                   "or changed by another tool); it cannot be used")
            have = {c["name"] for c in inspector.get_columns(name)}
            lost = [c.name for c in table.columns if c.name not in have]
            if lost:
                raise ArchiveError(f"archive {self.path}: missing column {name}.{lost[0]} "
                                   "(damaged, or changed by another tool); it cannot be used")

    @contextlib.contextmanager
    def _read_only_is_one_line(self) -> Iterator[None]:
        """A write refused because the archive is read-only becomes one line."""
        try:
            yield
        except OperationalError as exc:
            detail = first_line(exc)
            if _read_only(detail):
                raise ArchiveError(f"archive {self.path}: read-only, cannot write a run to "
                                   f"it ({detail})") from None
            raise

    @contextlib.contextmanager
    def _writing(self) -> Iterator[Session]:
        """A write transaction; a read-only archive is one line, not a traceback."""
        with self._read_only_is_one_line(), self._session.begin() as s:
            yield s

    def close(self) -> None:
        self.engine.dispose()

    def __enter__(self) -> Archive:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def session(self) -> Session:
        return self._session()

    # ---- runs -------------------------------------------------------------------------
    def create_run(self, seed: int, config: Any, splits: dict[str, str],
                   probe: bytes | None, lock: bool = False) -> int:
        """A new run's id; with ``lock``, this process holds its run lock from the start.
        The stored ``config`` has its URLs' secrets masked (``evolve.text.untrusted``): an
        archive is shared, a password in an endpoint's or database's URL is not."""
        version = code_version()
        config = mask_values(config)
        if lock:
            self.prepare_writer()
        for attempt in range(20):  # another writer may take the same id first: next one
            try:
                with self._writing() as s:
                    next_id = (s.scalar(select(func.max(Run.id))) or 0) + 1
                    s.add(Run(id=next_id, seed=seed, config=config, code_version=version,
                              status="running", generations_done=-1, splits=splits,
                              probe=probe, created_at=utc_now(), finished_at=None))
                    if lock:
                        s.flush()
                        aux.acquire(s, next_id, aux.Holder.me(), utc_now(), False,
                                    str(self.path))
                return next_id
            except IntegrityError:
                time.sleep(0.05 * (attempt + 1))
        raise ArchiveError(f"{self.path}: could not allocate a run id (too many writers)")

    def run(self, run_id: int) -> Run:
        with self._session() as s:
            row = s.get(Run, run_id)
        if row is None:
            raise ArchiveError(f"{self.path}: no run {run_id}")
        return row

    def runs(self) -> list[Run]:
        with self._session() as s:
            return list(s.scalars(select(Run).order_by(Run.id)))

    def latest_run_id(self) -> int:
        with self._session() as s:
            rid = s.scalar(select(func.max(Run.id)))
        if rid is None:
            raise ArchiveError(f"{self.path}: the archive has no runs")
        return int(rid)

    def update_run(self, run_id: int, **values: Any) -> None:
        with self._writing() as s:
            row = s.get(Run, run_id)
            if row is None:
                raise ArchiveError(f"{self.path}: no run {run_id}")
            for k, v in values.items():
                setattr(row, k, mask_values(v) if k == "config" else v)

    def commit_generation(self, run_id: int, generation: int, rows: Iterable[Base],
                          **run_values: Any) -> None:
        """Write all rows of one generation and mark it done, in one transaction (which
        also drops the journal of the generation: its results are now in the record)."""
        with self._writing() as s:
            s.add_all(list(rows))
            run = s.get(Run, run_id)
            assert run is not None
            run.generations_done = generation
            for k, v in run_values.items():
                setattr(run, k, v)
            if self._aux_ready:
                aux.forget_through(s, run_id, generation)

    # ---- run locks and the journal (evolve.archive.process_tables)
    # ------------------------------------
    def prepare_writer(self) -> None:
        """Create the lock and journal tables if this archive predates them (a write: a
        read-only archive fails here, with one line)."""
        if not self._aux_ready:
            with self._read_only_is_one_line(), schema_lock(self.engine):
                aux.create_aux_tables(self.engine)
            self._aux_ready = True

    def lock_run(self, run_id: int, force: bool = False) -> None:
        """Hold ``run_id``'s lock until :meth:`unlock_run` (or this process dies)."""
        self.run(run_id)
        self.prepare_writer()
        with self._writing() as s:
            aux.acquire(s, run_id, aux.Holder.me(), utc_now(), force, str(self.path))

    def unlock_run(self, run_id: int) -> None:
        if self._aux_ready:
            with self._writing() as s:
                aux.release(s, run_id, aux.Holder.me())

    def journal_load(self, run_id: int) -> dict[str, bytes]:
        """The journaled results of a run's generation in progress (key -> value)."""
        if not self._aux_ready:
            return {}
        with self._session() as s:
            return aux.journal_rows(s, run_id)

    def journal_put(self, run_id: int, generation: int, key: str, kind: str,
                    value: bytes) -> None:
        """Journal one finished job (a key already there is left as it is)."""
        with self._writing() as s:
            if s.get(aux.JournalEntry, (run_id, key)) is None:
                s.add(aux.JournalEntry(run_id=run_id, key=key, generation=generation,
                                       kind=kind, value=value))

    # ---- queries ------------------------------------------------------------------------
    def programs(self, run_id: int) -> list[ProgramRow]:
        with self._session() as s:
            return list(s.scalars(select(ProgramRow).where(ProgramRow.run_id == run_id)
                                  .order_by(ProgramRow.generation, ProgramRow.seq)))

    def program(self, program_id: str, run_id: int | None = None) -> list[ProgramRow]:
        """Rows of a program (one per run that saw it), oldest run first."""
        q = select(ProgramRow).where(ProgramRow.id == program_id)
        if run_id is not None:
            q = q.where(ProgramRow.run_id == run_id)
        with self._session() as s:
            return list(s.scalars(q.order_by(ProgramRow.run_id)))

    def resolve_id(self, prefix: str, run_id: int | None = None) -> str:
        """The full program id starting with ``prefix``; unknown or ambiguous is an error,
        and so is a ``run_id`` the archive does not hold ("no run N" comes first)."""
        if run_id is not None:
            self.run(run_id)
        prefix = prefix.strip().lower()
        if not re.fullmatch(r"[0-9a-f]{1,64}", prefix):
            raise ArchiveError(f"{self.path}: no program with id {prefix!r} (ids are hex)")
        with self._session() as s:
            ids = sorted(set(s.scalars(select(ProgramRow.id).where(
                ProgramRow.id.like(prefix + "%")))))
        if not ids:
            raise ArchiveError(f"{self.path}: no program with id {prefix!r}")
        if len(ids) > 1:
            raise ArchiveError(f"{self.path}: program id {prefix!r} is ambiguous "
                               f"({len(ids)} matches: {', '.join(i[:12] for i in ids[:4])}...)")
        return ids[0]

    def evaluations(self, run_id: int, program_id: str | None = None,
                    status: str | None = None) -> list[Evaluation]:
        q = select(Evaluation).where(Evaluation.run_id == run_id)
        if program_id is not None:
            q = q.where(Evaluation.program_id == program_id)
        if status is not None:
            q = q.where(Evaluation.status == status)
        with self._session() as s:
            return list(s.scalars(q.order_by(Evaluation.generation, Evaluation.seq)))

    def evaluations_of(self, program_id: str) -> list[Evaluation]:
        with self._session() as s:
            return list(s.scalars(select(Evaluation).where(Evaluation.program_id == program_id)
                                  .order_by(Evaluation.run_id, Evaluation.generation,
                                            Evaluation.seq)))

    def latest_accepted(self, run_id: int) -> dict[str, Evaluation]:
        """Program id -> its most recent accepted evaluation (fit, refit or rescore)."""
        out: dict[str, Evaluation] = {}
        for ev in self.evaluations(run_id, status=EvalStatus.ACCEPTED):
            if ev.program_id is not None:
                out[ev.program_id] = ev
        return out

    def count_evaluations(self, run_id: int, kinds: Sequence[str] = ("child",)) -> int:
        q = select(func.count()).select_from(Evaluation).where(
            Evaluation.run_id == run_id, Evaluation.kind.in_(list(kinds)))
        with self._session() as s:
            return int(s.scalar(q) or 0)

    def grid(self, run_id: int, generation: int) -> list[GridCell]:
        with self._session() as s:
            return list(s.scalars(select(GridCell).where(
                GridCell.run_id == run_id, GridCell.generation == generation)
                .order_by(GridCell.cell)))

    def frontier(self, run_id: int, generation: int | None = None) -> list[FrontierRow]:
        """The frontier after ``generation`` (default: the last one written)."""
        with self._session() as s:
            if generation is None:
                generation = s.scalar(select(func.max(FrontierRow.generation))
                                      .where(FrontierRow.run_id == run_id))
                if generation is None:
                    return []
            return list(s.scalars(select(FrontierRow).where(
                FrontierRow.run_id == run_id, FrontierRow.generation == generation)
                .order_by(FrontierRow.position)))

    def corpus_versions(self, run_id: int) -> list[CorpusVersion]:
        with self._session() as s:
            return list(s.scalars(select(CorpusVersion).where(CorpusVersion.run_id == run_id)
                                  .order_by(CorpusVersion.seq)))

    def llm_usage(self, run_id: int) -> tuple[int, float]:
        """(tokens, cost in USD) of the run's LLM calls."""
        with self._session() as s:
            tok, cost = s.execute(select(
                func.coalesce(func.sum(LLMCall.prompt_tokens + LLMCall.completion_tokens), 0),
                func.coalesce(func.sum(LLMCall.cost_usd), 0.0)).where(
                LLMCall.run_id == run_id)).one()
        return int(tok), float(cost)

    def replayed_llm_tokens(self, run_id: int) -> list[tuple[int, int]]:
        """(prompt, completion) tokens of the run's replayed (cached) LLM calls, which are
        stored at no cost: a resume prices them again to count them against the budget."""
        with self._session() as s:
            rows = s.execute(select(LLMCall.prompt_tokens, LLMCall.completion_tokens).where(
                LLMCall.run_id == run_id, LLMCall.cached == 1)).all()
        return [(int(p), int(c)) for p, c in rows]

    def llm_fallback_generation(self, run_id: int) -> int | None:
        """The first generation whose LLM calls *all* failed at the endpoint (unreachable
        or rejected): where an LLM run with ``on_failure = "offline"`` switched to the
        offline operator. None if it never did."""
        with self.session() as s:
            rows = s.execute(select(LLMCall.generation, LLMCall.status)
                             .where(LLMCall.run_id == run_id)).all()
        by_gen: dict[int, list[str]] = {}
        for generation, status in rows:
            by_gen.setdefault(int(generation), []).append(str(status))
        failed = sorted(g for g, st in by_gen.items()
                        if all(x in ("unreachable", "rejected") for x in st))
        return failed[0] if failed else None

    def table_rows(self, table: str) -> list[dict[str, Any]]:
        """Every row of a table as dicts in primary-key order (tests, comparisons)."""
        tbl = Base.metadata.tables[table]
        order = list(tbl.primary_key.columns)
        with self.engine.connect() as conn:
            return [dict(r._mapping) for r in conn.execute(tbl.select().order_by(*order))]

    def comparable(self) -> dict[str, list[dict[str, Any]]]:
        """Every table without its informational columns: equal for equal runs."""
        out = {}
        for name in sorted(Base.metadata.tables):
            skip = INFORMATIONAL.get(name, frozenset())
            rows = [{k: v for k, v in row.items() if k not in skip}
                    for row in self.table_rows(name)]
            if name == "runs":
                rows = [{**r, "config": comparable_config(r.get("config"))} for r in rows]
            out[name] = rows
        return out


def _read_only(detail: str) -> bool:
    low = detail.lower()
    return "readonly" in low or "read-only" in low or "unable to open database" in low
