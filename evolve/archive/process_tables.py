"""Tables beside the archive's record: who is writing a run, and the work it has finished.

Why separate tables, in their own metadata: they are bookkeeping of *processes*, not part
of what a run found. The determinism digest (:meth:`Archive.comparable`) covers
``Base.metadata`` only, so an interrupted-and-resumed run and an uninterrupted one still
compare equal, and archives written before these tables existed stay valid (the tables are
created when a run is first written, never by a reader).

* ``run_locks``: one row per run being written, naming the process (pid, host) that holds
  it. Taken when a run is created or resumed, removed when that process ends the run. A
  row whose process is gone (same host, pid no longer alive) is stale and is taken over;
  a row from another host cannot be checked, so it is only taken over when forced. A row
  in the database (not a file lock) works the same for SQLite files and server archives.
* ``journal``: results of finished jobs of the generation in progress (fits, closed-loop
  judgements, LLM exchanges), keyed by a content hash of the job, written as each job
  finishes. ``--resume`` serves a job from here instead of computing it again; the rows of
  a generation are deleted in the transaction that commits it.
"""

from __future__ import annotations

import os
import socket
from dataclasses import dataclass
from pathlib import Path

from sqlalchemy import Integer, LargeBinary, String, delete, select
from sqlalchemy.engine import Engine
from sqlalchemy.exc import IntegrityError
from sqlalchemy.orm import DeclarativeBase, Mapped, Session, mapped_column

from evolve.errors import ArchiveError


class AuxBase(DeclarativeBase):
    pass


class RunLock(AuxBase):
    __tablename__ = "run_locks"
    run_id: Mapped[int] = mapped_column(Integer, primary_key=True)
    pid: Mapped[int] = mapped_column(Integer)
    host: Mapped[str] = mapped_column(String)
    acquired_at: Mapped[str] = mapped_column(String)


class JournalEntry(AuxBase):
    __tablename__ = "journal"
    run_id: Mapped[int] = mapped_column(Integer, primary_key=True)
    key: Mapped[str] = mapped_column(String, primary_key=True)  # sha256 of the job
    generation: Mapped[int] = mapped_column(Integer)
    kind: Mapped[str] = mapped_column(String)  # fit | apply:<function> | llm
    value: Mapped[bytes] = mapped_column(LargeBinary)


class RunLocked(ArchiveError):
    """Another live process is writing this run."""


@dataclass(frozen=True)
class Holder:
    """Who holds (or wants) a run lock."""

    pid: int
    host: str

    @classmethod
    def me(cls) -> Holder:
        return cls(os.getpid(), socket.gethostname())

    def alive(self) -> bool | None:
        """True/False for a process on this host; None: another host (cannot tell)."""
        if self.host != socket.gethostname():
            return None
        return pid_alive(self.pid)


def pid_alive(pid: int) -> bool:
    """Whether ``pid`` is a running (not zombie) process on this machine."""
    if pid <= 0:
        return False
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    stat = Path(f"/proc/{pid}/stat")
    try:  # a killed child not yet reaped by its parent is a zombie: gone for our purposes
        return stat.read_text().rsplit(")", 1)[1].split()[0] != "Z"
    except (OSError, IndexError):
        return True


def create_aux_tables(engine: Engine) -> None:
    AuxBase.metadata.create_all(engine)


def acquire(session: Session, run_id: int, me: Holder, now: str, force: bool,
            label: str) -> None:
    """Take the lock of ``run_id`` for ``me`` (in the caller's transaction), or raise
    :class:`RunLocked` naming the holder. Our own row is fine; a dead holder's is taken
    over; another host's only with ``force``."""
    row = session.get(RunLock, run_id)
    if row is not None:
        holder = Holder(row.pid, row.host)
        if holder != me:
            alive = holder.alive()
            if alive or (alive is None and not force):
                where = "this host" if alive else f"host {holder.host}"
                hint = ("wait for it to end, or stop it" if alive else
                        "if that process is gone, pass --break-lock")
                raise RunLocked(f"archive {label}: run {run_id} is being written by pid "
                                f"{holder.pid} on {where} (since {row.acquired_at}); {hint}")
        session.delete(row)
        session.flush()
    session.add(RunLock(run_id=run_id, pid=me.pid, host=me.host, acquired_at=now))
    try:
        session.flush()
    except IntegrityError:  # another process took it between our read and our write
        raise RunLocked(f"archive {label}: run {run_id} was just locked by another "
                        "process; try again") from None


def release(session: Session, run_id: int, me: Holder) -> None:
    session.execute(delete(RunLock).where(RunLock.run_id == run_id, RunLock.pid == me.pid,
                                          RunLock.host == me.host))


def journal_rows(session: Session, run_id: int) -> dict[str, bytes]:
    return {k: bytes(v) for k, v in session.execute(
        select(JournalEntry.key, JournalEntry.value).where(JournalEntry.run_id == run_id))}


def forget_through(session: Session, run_id: int, generation: int) -> None:
    """Drop the journal of every generation up to ``generation`` (it is committed)."""
    session.execute(delete(JournalEntry).where(JournalEntry.run_id == run_id,
                                               JournalEntry.generation <= generation))
