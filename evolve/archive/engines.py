"""Where an archive lives: a SQLite file path or any SQLAlchemy URL, opened the same way.

Why this module: the embedded default (a SQLite file, ``archive.db``) stays, but a team
wants one archive that several people and runs write to, on a server they already run
(PostgreSQL). The store speaks SQLAlchemy only, so the difference is confined here:

* a plain path (or ``sqlite:///path``) is a file: it must exist unless created, its
  directory must exist, and it must start with SQLite's magic; commits are durable
  (``synchronous = FULL``) and readers wait for writers (``busy_timeout``);
* a server URL (``postgresql://user@host:port/db``; psycopg 3 is the driver unless the URL
  names one: the ``postgres`` extra) is checked by connecting; opened with ``create``
  false it must already hold an archive;
* equal runs must give equal archives on every backend. So on PostgreSQL every text column
  of the archive is created ``COLLATE "C"`` (ORDER BY then sorts by code point, as
  SQLite's BINARY collation does, whatever the server's locale: resume and reports read
  rows in the same order), Python booleans are bound as the integers the columns hold,
  and a NaN float is stored as NULL, as SQLite stores it;
* schema creation on a server is serialised with an advisory lock, so runs that open a
  fresh database at once do not race to create the tables.

Passwords never appear in messages (:attr:`Location.label`: ``user:***@``, and ``***`` for
``password=``, ``sslpassword=`` and every other secret parameter, ``evolve.text.untrusted``),
and the archive location is not stored with a run's configuration. An address that does
not parse (a port that is no number, or out of range) is one line, never a traceback.
"""

from __future__ import annotations

import contextlib
import math
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from sqlalchemy import String, create_engine, event, inspect, text
from sqlalchemy.engine import URL, Engine, make_url
from sqlalchemy.exc import ArgumentError, SQLAlchemyError
from sqlalchemy.ext.compiler import compiles
from sqlalchemy.schema import CreateColumn
from sqlalchemy.types import TypeDecorator

from evolve.archive.models import Base
from evolve.errors import ArchiveError
from evolve.text.untrusted import mask_secrets

SQLITE_MAGIC = b"SQLite format 3\x00"
SCHEMA_LOCK_KEY = 0x65766F6C7665  # "evolve": the advisory lock around schema creation
DRIVERS = {"postgresql": "postgresql+psycopg"}  # the driver the extras install


@dataclass(frozen=True)
class Location:
    """An archive's address: its URL, a label for messages, and its file if SQLite."""

    url: URL
    label: str
    file: Path | None  # None: a server (or an in-memory SQLite database)


def is_url(spec: str | Path) -> bool:
    """True for ``dialect[+driver]://...``; anything else is a file path."""
    return isinstance(spec, str) and "://" in spec and spec.split("://", 1)[0].replace(
        "+", "").replace("_", "").isalnum()


def locate(spec: str | Path) -> Location:
    """The location ``spec`` names (a path or a SQLAlchemy URL)."""
    if not is_url(spec):
        path = Path(spec)
        return Location(make_url(f"sqlite:///{path}"), str(path), path)
    try:
        url = make_url(str(spec))
        port = url.port
    except (ArgumentError, ValueError, TypeError) as exc:  # ValueError: port 'abc'
        raise ArchiveError(mask_secrets(f"{spec}: not an archive path or URL ({exc})")) from None
    if port is not None and not 0 < port < 65536:
        raise ArchiveError(mask_secrets(f"{spec}: not an archive URL (port {port} is not in "
                                        "1..65535)"))
    if url.drivername in DRIVERS:
        url = url.set(drivername=DRIVERS[url.drivername])
    label = mask_secrets(url.render_as_string(hide_password=True))
    if url.get_backend_name() == "sqlite":
        return Location(url, url.database or ":memory:",
                        Path(url.database) if url.database and url.database != ":memory:"
                        else None)
    return Location(url, label, None)


def exists(spec: str | Path) -> bool:
    """Cheap check that an archive may be there (a server is assumed to be)."""
    loc = locate(spec)
    return loc.file is None or (loc.file.exists() and loc.file.stat().st_size > 0)


def open_engine(spec: str | Path, create: bool) -> tuple[Engine, str | Path]:
    """An engine on the archive at ``spec`` and its label for messages (the path for a
    file); raises :class:`ArchiveError` for a missing, foreign or unreachable archive."""
    loc = locate(spec)
    if loc.url.get_backend_name() == "sqlite":
        if loc.file is not None:
            _check_file(loc.file, create)
        engine = create_engine(loc.url)
        event.listen(engine, "connect", _sqlite_pragmas)
        return engine, loc.file if loc.file is not None else loc.label
    try:
        engine = create_engine(loc.url, pool_pre_ping=True)
    except ModuleNotFoundError as exc:
        raise ArchiveError(f"{loc.label}: the database driver {exc.name!r} is not installed "
                           "(PostgreSQL: pip install -e '.[postgres]')") from None
    except (ArgumentError, SQLAlchemyError, ValueError, TypeError) as exc:
        raise ArchiveError(f"{loc.label}: {mask_secrets(first_line(exc))}") from None
    event.listen(engine, "before_cursor_execute", _portable_params, retval=True)
    try:
        with engine.connect() as conn:
            tables = set(inspect(conn).get_table_names())
    except SQLAlchemyError as exc:
        engine.dispose()
        raise ArchiveError(f"{loc.label}: cannot connect ({mask_secrets(first_line(exc))})"
                           ) from None
    if not create and "schema_version" not in tables:
        engine.dispose()
        raise ArchiveError(f"{loc.label}: archive not found (no evolve tables there)")
    return engine, loc.label


@contextlib.contextmanager
def schema_lock(engine: Engine) -> Iterator[None]:
    """Hold the archive's schema lock (a server: a session advisory lock; SQLite: none,
    its file lock serialises writers) while the schema is checked or created."""
    if engine.dialect.name != "postgresql":
        yield
        return
    with engine.connect() as conn:
        conn.execute(text("SELECT pg_advisory_lock(:k)"), {"k": SCHEMA_LOCK_KEY})
        conn.commit()
        try:
            yield
        finally:
            conn.execute(text("SELECT pg_advisory_unlock(:k)"), {"k": SCHEMA_LOCK_KEY})
            conn.commit()


def _check_file(path: Path, create: bool) -> None:
    if path.is_dir():  # also a blank path ('.'): one line, not an IsADirectoryError
        raise ArchiveError(f"{path}: a directory, not an archive file (pass --archive FILE)")
    found = path.exists() and path.stat().st_size > 0
    if not found and not create:
        what = "an empty file, no archive yet" if path.exists() else "archive not found"
        raise ArchiveError(f"{path}: {what} (run `evolve run` first, or pass --archive)")
    if not found and not path.parent.is_dir():
        raise ArchiveError(f"{path}: directory {path.parent} does not exist")
    if not found:  # create it now, so an unwritable directory is named as such
        try:
            open(path, "ab").close()
        except OSError as exc:
            raise ArchiveError(f"archive {path}: cannot create it in {path.parent} "
                               f"({exc.strerror}: the directory is read-only?)") from None
    if found:
        with open(path, "rb") as fh:
            if fh.read(16) != SQLITE_MAGIC:
                raise ArchiveError(f"{path}: not an evolve archive (not SQLite; "
                                   "corrupt or another file)")


def first_line(exc: BaseException) -> str:
    detail = str(getattr(exc, "orig", None) or exc).strip()
    return detail.splitlines()[0] if detail else type(exc).__name__


def _sqlite_pragmas(dbapi_conn: Any, _record: Any) -> None:
    """Durable commits and a busy timeout (a viewer may read while a run writes)."""
    cur = dbapi_conn.cursor()
    cur.execute("PRAGMA busy_timeout = 10000")
    cur.execute("PRAGMA synchronous = FULL")
    cur.close()


def _portable(value: Any) -> Any:
    if isinstance(value, bool):
        return int(value)
    if isinstance(value, float) and math.isnan(value):
        return None
    return value


def _portable_params(_conn: Any, _cursor: Any, statement: str, params: Any, _context: Any,
                     _executemany: bool) -> tuple[str, Any]:
    """Bind values as SQLite stores them: booleans as integers (the columns are INTEGER),
    NaN as NULL."""
    if isinstance(params, dict):
        return statement, {k: _portable(v) for k, v in params.items()}
    if isinstance(params, list | tuple):
        return statement, type(params)(
            {k: _portable(v) for k, v in p.items()} if isinstance(p, dict)
            else tuple(_portable(v) for v in p) if isinstance(p, list | tuple)
            else _portable(p) for p in params)
    return statement, params


@compiles(CreateColumn, "postgresql")
def _c_collation(element: CreateColumn, compiler: Any, **kw: Any) -> str:
    """Text columns of the archive sort by code point on PostgreSQL, as in SQLite."""
    ddl: str = compiler.visit_create_column(element, **kw)
    col = element.element
    table = getattr(col, "table", None)
    typ = col.type.impl_instance if isinstance(col.type, TypeDecorator) else col.type
    if ddl and table is not None and table.metadata is Base.metadata and isinstance(
            typ, String) and " COLLATE " not in ddl:
        head = f"{compiler.preparer.format_column(col)} {compiler.type_compiler.process(typ)}"
        if ddl.startswith(head):
            ddl = f'{head} COLLATE "C"{ddl[len(head):]}'
    return ddl
