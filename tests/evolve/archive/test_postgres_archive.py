"""A PostgreSQL archive, for real: the same seed gives the same archive as SQLite, the CLI
reads it back, and two runs writing to it at once both finish without losing rows.

The server is Debian's ``postgresql`` started in a temporary directory on a free loopback
port (tests/support/scale_services.py); each test gets a fresh database with an ICU en-US
collation, under which text sorts unlike SQLite, so the archive's own ordering is tested.
"""

from __future__ import annotations

import subprocess
import sys

import pytest
from scale_helpers import run_rows, run_tiny, tiny_toml

from evolve.archive import Archive
from evolve.archive.digest import archive_digest
from evolve.cli.main import main
from evolve.errors import ArchiveError

pytestmark = pytest.mark.real_data  # the tiny search cuts the bundled measured runs


def test_search_into_postgres_equals_sqlite(pg, sqlite_reference, tmp_path, capsys):
    url = pg.create_database("same_seed")
    summary, tables = run_tiny(url, 11)
    ref_summary, ref_tables = sqlite_reference(11)
    assert summary.status == "finished" and summary.best_id == ref_summary.best_id
    for name in ref_tables:
        assert tables[name] == ref_tables[name], f"table {name} differs"
    with Archive(url, create=False) as ar:
        assert "***" not in str(ar.path) and str(ar.path).startswith("postgresql+psycopg://")
        digest = archive_digest(ar)
    sqlite_path = tmp_path / "again.db"
    run_tiny(sqlite_path, 11)
    with Archive(sqlite_path, create=False) as ar:
        assert archive_digest(ar) == digest
    # read back with the CLI, as a user would
    assert main(["frontier", "--archive", url]) == 0
    from_pg = capsys.readouterr().out
    assert main(["frontier", "--archive", str(sqlite_path)]) == 0
    assert capsys.readouterr().out == from_pg and "*" in from_pg
    assert main(["runs", "--archive", url]) == 0
    assert "finished" in capsys.readouterr().out
    best = summary.best_id[:12]
    assert main(["show", best, "--archive", url]) == 0
    assert best in capsys.readouterr().out
    assert main(["replay", best, "--archive", url]) == 0
    out = tmp_path / "report"
    assert main(["report", "--archive", url, "--out", str(out)]) == 0
    assert best in (out / "index.html").read_text()


def test_two_runs_write_one_postgres_archive_at_once(pg, sqlite_reference, tmp_path):
    url = pg.create_database("two_writers")  # empty: both runs also race to create tables
    cfg = tiny_toml(tmp_path / "tiny.toml")
    procs = {seed: subprocess.Popen(
        [sys.executable, "-m", "evolve.cli.main", "run", "--config", str(cfg), "--seed", str(seed),
         "--archive", url, "--no-progress"], stdout=subprocess.PIPE, stderr=subprocess.PIPE,
        text=True) for seed in (11, 12)}
    for seed, p in procs.items():
        _out, err = p.communicate(timeout=600)
        assert p.returncode == 0, f"seed {seed}: {err[-2000:]}"
    with Archive(url, create=False) as ar:
        runs = {r.seed: r for r in ar.runs()}
        assert sorted(runs) == [11, 12]
        assert {r.status for r in runs.values()} == {"finished"}
        tables = ar.comparable()
    for seed, run in runs.items():
        _s, ref = sqlite_reference(seed)
        assert run_rows(tables, run.id) == run_rows(ref, 1), f"seed {seed} lost or changed rows"


def test_server_archive_errors_are_one_line(pg):
    url = pg.create_database("empty", icu=False)
    with pytest.raises(ArchiveError, match="archive not found"):
        Archive(url, create=False)
    bad = pg.url("no_such_db").replace("postgres@", "postgres:secret@")
    with pytest.raises(ArchiveError, match="cannot connect") as err:
        Archive(bad)
    assert "secret" not in str(err.value)
    assert main(["frontier", "--archive", url]) == 2


def test_run_lock_and_journal_on_postgres(pg):
    """The run lock and the journal are rows, so a server archive has them too: a second
    writer is refused naming the holder; a dead holder's lock is taken over."""
    import socket

    from evolve.archive.process_tables import RunLock, RunLocked
    from evolve.archive.store import utc_now

    url = pg.create_database("locks", icu=False)
    with Archive(url) as ar:
        big = ar.create_run(2**62 + 5, {}, {}, None)  # the config takes seeds < 2**63
        assert ar.run(big).seed == 2**62 + 5
        rid = ar.create_run(1, {}, {}, None, lock=True)
        ar.journal_put(rid, 0, "k", "fit", b"\x00result")
        assert ar.journal_load(rid) == {"k": b"\x00result"}
        ar.commit_generation(rid, 0, [])
        assert ar.journal_load(rid) == {}  # the journal of a committed generation is gone
        sleeper = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(60)"])
        try:
            with ar.session() as s, s.begin():
                s.merge(RunLock(run_id=rid, pid=sleeper.pid, host=socket.gethostname(),
                                acquired_at=utc_now()))
            with pytest.raises(RunLocked, match=f"pid {sleeper.pid} on this host"):
                ar.lock_run(rid)
        finally:
            sleeper.kill()
            sleeper.wait()
        ar.lock_run(rid)  # its holder is gone: taken over
        ar.unlock_run(rid)
        with ar.session() as s:
            assert s.get(RunLock, rid) is None
