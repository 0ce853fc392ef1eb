"""Kills and signals during ``evolve run``: nothing finished is lost, and resuming gives
the uninterrupted archive byte for byte (issue 17: partial generations were lost on a
kill; SIGTERM ended a run with no word from evolve)."""

from __future__ import annotations

import os
import random
import re
import signal
import sqlite3
import subprocess
import time

import pytest
from hardening_helpers import baseline_digest, digest, evolve, table_count, tiny_toml

from evolve.archive import Archive

pytestmark = pytest.mark.real_data


def _runs(path) -> int:
    if not path.exists() or path.stat().st_size == 0:
        return 0
    with Archive(path, create=False) as ar:
        return len(ar.runs())


def _progress(path) -> tuple[int, int]:
    """(generations committed, finished jobs journaled) of run 1: changes with any work."""
    con = sqlite3.connect(f"file:{path}?mode=ro", uri=True, timeout=10)
    try:
        done = con.execute("SELECT generations_done FROM runs WHERE id = 1").fetchone()
        return (done[0] if done else -2), table_count(path, "journal")
    except sqlite3.OperationalError:
        return -2, 0
    finally:
        con.close()


def test_sigkill_ten_times_then_resume_gives_the_uninterrupted_archive(tmp_path):
    """Ten SIGKILLs, each at a seeded random moment after the process has finished some
    work (so that every kill lands inside the search, however loaded the machine), each
    followed by ``--resume``; then the archive must be the uninterrupted one."""
    toml = tiny_toml(tmp_path / "twelve.toml", generations=12)
    expected = baseline_digest(tmp_path / "base.db", toml)
    db = tmp_path / "k.db"
    rng = random.Random(17)
    served, journaled_before, kills = [], [], 0
    for _ in range(10):
        args = (["run", "--resume", "1", "--archive", str(db)] if _runs(db) else
                ["run", "--config", str(toml), "--archive", str(db)])
        journaled_before.append(table_count(db, "journal") if db.exists() else 0)
        proc = evolve(*args)
        assert proc.stdout is not None
        assert proc.stdout.readline().startswith("run 1")  # opened (and locked) the run
        start, deadline = _progress(db), time.monotonic() + 120
        while _progress(db) == start and proc.poll() is None and time.monotonic() < deadline:
            time.sleep(0.02)  # until a job finished (journaled) or a generation committed
        try:
            proc.wait(timeout=rng.uniform(0.0, 0.5))  # seeded: then a random moment
        except subprocess.TimeoutExpired:
            proc.kill()
            kills += 1
        _out, err = proc.communicate()  # reaps it: its pid is dead, its lock stale
        served += [int(n) for n in re.findall(r"(\d+) jobs served from the journal", err)]
        assert proc.returncode in (0, -signal.SIGKILL), err
    assert kills == 10, "the run finished before ten kills: make it longer"
    journaled_before.append(table_count(db, "journal"))
    final = evolve("run", "--resume", "1", "--archive", str(db))
    out, err = final.communicate(timeout=120)
    served += [int(n) for n in re.findall(r"(\d+) jobs served from the journal", err)]
    assert final.returncode == 0, err
    assert "finished after generation 12" in out
    assert digest(db) == expected
    # journaled work was found and reused instead of being computed again (by a resume
    # that lived to commit the generation: which one depends on where the kills landed)
    assert max(journaled_before) > 0 and sum(served) > 0, (journaled_before, served)
    assert table_count(db, "journal") == 0 and table_count(db, "run_locks") == 0


@pytest.mark.parametrize("sig, code, group", [
    (signal.SIGTERM, 143, False), (signal.SIGINT, 130, False), (signal.SIGTERM, 143, True)])
def test_a_stop_signal_journals_says_how_to_resume_and_exits_128_plus_n(
        tmp_path, tiny_config_file, uninterrupted_digest, sig, code, group):
    """``group``: as coreutils ``timeout`` does, the signal goes to the process and then to
    its whole process group (the workers too, and the driver a second time, while it is
    stopping); it once left dead workers holding the pool's queue lock and hung."""
    db = tmp_path / "s.db"
    proc = evolve("run", "--config", str(tiny_config_file), "--archive", str(db))
    assert proc.stdout is not None
    assert proc.stdout.readline().startswith("run 1 -> ")  # the run exists
    deadline = time.monotonic() + 60
    while table_count(db, "journal") == 0 and time.monotonic() < deadline:
        time.sleep(0.05)  # until the first finished job is journaled
    proc.send_signal(sig)
    if group:
        os.killpg(proc.pid, sig)  # its own session (hardening_helpers.evolve)
    try:
        _out, err = proc.communicate(timeout=60)
    except subprocess.TimeoutExpired:
        os.killpg(proc.pid, signal.SIGKILL)
        proc.communicate()
        raise
    assert proc.returncode == code, err
    lines = [ln for ln in err.splitlines() if "evolve run" in ln]
    assert len(lines) == 1 and "Traceback" not in err, err
    assert f"stopped by {signal.Signals(sig).name}" in lines[0]
    command = lines[0].split("Resume with: ", 1)[1]
    assert command == f"evolve run --resume 1 --archive {db}"
    with Archive(db, create=False) as ar:
        assert ar.run(1).status == "interrupted"
    assert table_count(db, "journal") > 0 and table_count(db, "run_locks") == 0
    if sig == signal.SIGTERM:  # the printed command finishes the run as if never stopped
        again = evolve(*command.split()[1:])
        _out, err = again.communicate(timeout=120)
        assert again.returncode == 0, err
        assert digest(db) == uninterrupted_digest


def test_resume_with_more_generations_reuses_every_journaled_job(tmp_path, tiny_config_file):
    """The README's ``evolve run --resume --generations N`` changes the stored config; the
    journal keys must not (they once held ``run.generations``, and generation 0's
    closed-loop refits were all computed again)."""
    db = tmp_path / "g.db"
    proc = evolve("run", "--config", str(tiny_config_file), "--archive", str(db))
    assert proc.stdout is not None
    assert proc.stdout.readline().startswith("run 1 -> ")
    deadline = time.monotonic() + 120
    while time.monotonic() < deadline and proc.poll() is None:
        con = sqlite3.connect(f"file:{db}?mode=ro", uri=True, timeout=10)
        try:
            refits = con.execute("SELECT count(*) FROM journal WHERE kind LIKE 'apply:%'"
                                 ).fetchone()[0]
        except sqlite3.OperationalError:
            refits = 0
        finally:
            con.close()
        if refits:
            break
        time.sleep(0.05)  # until a closed-loop refit of generation 0 is journaled
    proc.send_signal(signal.SIGTERM)
    _out, err = proc.communicate(timeout=60)
    assert proc.returncode == 143, err
    journaled = table_count(db, "journal")
    again = evolve("run", "--resume", "1", "--generations", "4", "--archive", str(db))
    _out, err = again.communicate(timeout=180)
    assert again.returncode == 0, err
    served = re.findall(r"gen 0: (\d+) jobs served from the journal", err)
    assert served and int(served[0]) == journaled, (journaled, err)


def test_resuming_a_run_past_its_generations_says_there_is_nothing_to_do(finished):
    """And its summary counts this process's children apart from the run's."""
    proc = evolve("run", "--resume", "1", "--generations", "1", "--archive", str(finished))
    out, err = proc.communicate(timeout=120)
    assert proc.returncode == 0, err
    assert "generation 1 is done, the configuration asks for 1; nothing to compute" in err
    total = re.findall(r"0 children fitted in \d+ s \((\d+) in the run\)", out)
    assert total and int(total[0]) > 0, out


def test_a_target_below_the_done_generations_leaves_the_run_as_it_was(finished):
    """Found in review: the lower target was stored, and `evolve runs` said "finished 1/0"."""
    before = digest(finished)
    proc = evolve("run", "--resume", "1", "--generations", "0", "--archive", str(finished))
    _out, err = proc.communicate(timeout=120)
    assert proc.returncode == 0, err
    assert "nothing to compute" in err
    assert digest(finished) == before
