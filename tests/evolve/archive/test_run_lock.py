"""One writer per run (issue 17: two ``--resume`` of one run at once both did the work;
one then died of an ``IntegrityError`` traceback)."""

from __future__ import annotations

import socket
import subprocess
import sys

import pytest
from hardening_helpers import evolve, table_count

from evolve.archive import Archive
from evolve.archive.process_tables import RunLock, RunLocked
from evolve.archive.store import utc_now
from evolve.cli.main import main

pytestmark = pytest.mark.real_data


def _hold(path, run_id: int, pid: int, host: str) -> None:
    """Write the lock row a process ``pid`` on ``host`` would hold."""
    with Archive(path, create=False) as ar:
        ar.prepare_writer()
        with ar.session() as s, s.begin():
            s.merge(RunLock(run_id=run_id, pid=pid, host=host, acquired_at=utc_now()))


def test_two_resumes_of_one_run_at_once_the_second_is_refused(finished, capsys):
    first = evolve("run", "--resume", "1", "--generations", "2", "--archive", str(finished))
    assert first.stdout is not None
    assert first.stdout.readline().startswith("run 1 (resumed)")  # it holds the lock now
    code = main(["run", "--resume", "1", "--generations", "2", "--archive", str(finished)])
    err = capsys.readouterr().err.strip().splitlines()
    _out, ferr = first.communicate(timeout=120)
    assert first.returncode == 0, ferr
    assert code == 2 and len(err) == 1, err
    assert f"pid {first.pid} on this host" in err[0] and "run 1 is being written" in err[0]
    assert table_count(finished, "run_locks") == 0  # released when the first one ended
    with Archive(finished, create=False) as ar:
        assert ar.run(1).generations_done == 2 and ar.run(1).status == "finished"


def test_a_dead_holder_does_not_block_and_the_lock_is_released(finished, capsys):
    gone = subprocess.Popen([sys.executable, "-c", "pass"])
    gone.wait()
    _hold(finished, 1, gone.pid, socket.gethostname())
    assert main(["run", "--resume", "1", "--archive", str(finished)]) == 0
    assert table_count(finished, "run_locks") == 0


def test_a_live_holder_is_named_and_another_hosts_lock_needs_break_lock(finished, capsys):
    sleeper = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(60)"])
    try:
        _hold(finished, 1, sleeper.pid, socket.gethostname())
        assert main(["run", "--resume", "1", "--archive", str(finished)]) == 2
        err = capsys.readouterr().err
        assert f"pid {sleeper.pid} on this host" in err and "Traceback" not in err
    finally:
        sleeper.kill()
        sleeper.wait()
    _hold(finished, 1, 4242, "elsewhere.example")
    assert main(["run", "--resume", "1", "--archive", str(finished)]) == 2
    err = capsys.readouterr().err.strip()
    assert "pid 4242 on host elsewhere.example" in err and "--break-lock" in err
    assert main(["run", "--resume", "1", "--archive", str(finished), "--break-lock"]) == 0
    assert table_count(finished, "run_locks") == 0


def test_the_lock_api_on_an_archive(tmp_path):
    with Archive(tmp_path / "l.db") as ar:
        rid = ar.create_run(1, {}, {}, None, lock=True)
        ar.lock_run(rid)  # our own lock: fine
        with ar.session() as s:
            row = s.get(RunLock, rid)
        assert row is not None and (row.pid, row.host) == (__import__("os").getpid(),
                                                           socket.gethostname())
        ar.unlock_run(rid)
        assert table_count(tmp_path / "l.db", "run_locks") == 0
    _hold(tmp_path / "l.db", rid, 4242, "elsewhere.example")
    with Archive(tmp_path / "l.db", create=False) as ar, pytest.raises(RunLocked):
        ar.lock_run(rid)
