"""``evolve study``: seeds run in parallel, each pick validated, the README's table printed;
each seed's pick is the one its own run would pick alone; a finished seed is not rerun."""

from __future__ import annotations

import json
import re

import pytest
from scale_helpers import tiny_toml

from evolve.cli.main import main

pytestmark = pytest.mark.real_data  # the tiny search cuts the bundled measured runs


def picked(tables) -> str:
    """The pick of a run's last frontier."""
    last = max(r["generation"] for r in tables["frontier"])
    return next(r["program_id"] for r in tables["frontier"]
                if r["generation"] == last and r["picked"])


def check_study_output(text: str, seeds: list[int]) -> None:
    assert "| run | split | mean E2E | mean TTFT | decode | p99 E2E | failed |" in text
    rows = [ln for ln in text.splitlines() if ln.startswith("| llama-2-7b-tp1-codegen |")]
    assert len(rows) == 1
    assert re.fullmatch(r"\| [\w.-]+ \| train \|( \d+\.\d \[\d+\.\d, \d+\.\d\] \|){4}"
                        r" \d+/\d+ \|", rows[0]), rows[0]
    for s in seeds:
        assert f"seed {s}: run " in text


def test_study_runs_seeds_in_parallel(tmp_path, capsys, sqlite_reference):
    cfg = tiny_toml(tmp_path / "tiny.toml")
    out = tmp_path / "study"
    argv = ["study", "--seeds", "11", "12", "--config", str(cfg), "--out", str(out),
            "--parallel", "2", "--workers", "1"]
    assert main(argv) == 0
    text = capsys.readouterr().out
    check_study_output(text, [11, 12])
    summary = json.loads((out / "summary.json").read_text())
    for seed in (11, 12):
        _s, ref = sqlite_reference(seed)
        assert summary["picks"][str(seed)] == picked(ref), f"seed {seed}"
        assert (out / f"seed-{seed}.db").exists() and (out / f"seed-{seed}.log").exists()
    # run again: both seeds are done, nothing is searched, the same table is printed
    assert main(argv) == 0
    again = capsys.readouterr().out
    assert "(earlier)" in again and again.split("\n\n", 1)[1] == text.split("\n\n", 1)[1]
    # other settings must not pass off the earlier seeds' results as theirs
    assert main([*argv, "--generations", "5"]) == 2
    err = capsys.readouterr().err
    assert "seed-11.json: seed 11 was run with other settings" in err, err


@pytest.mark.parametrize("extra, needle", [
    (["--generations", "-2"], "run.generations' out of range"),
    (["--head-seconds", "-4"], "run.head_seconds' out of range"),
    (["--config", "{tmp}/bad.toml"], "bad.toml: unknown key 'run.generationz'"),
    (["--data", "{tmp}/nothere"], "data directory not found"),
    (["--archive", "foo://bar"], "--archive foo://bar: "),
])
def test_bad_settings_are_one_line_before_any_seed_runs(tmp_path, capsys, extra, needle):
    """`evolve run --print-config` judges what every seed would get: one line, exit 2, no
    seed log (each seed used to fail on its own, with the reason in its log)."""
    (tmp_path / "bad.toml").write_text("[run]\ngenerationz = 3\n")
    out = tmp_path / "study"
    argv = ["study", "--seeds", "1", "2", "--out", str(out),
            *(a.format(tmp=tmp_path) for a in extra)]
    assert main(argv) == 2
    err = capsys.readouterr().err.strip()
    assert err.startswith("evolve study: error: ") and needle in err and "\n" not in err, err
    assert not list(out.glob("seed-*"))


@pytest.mark.parametrize("shared", [False, True])
def test_a_stopped_study_stops_its_seeds_and_the_same_command_resumes(tmp_path, shared):
    """Found in review: SIGTERM left the seed's `evolve run` running, re-parented to init;
    Ctrl-C ran every queued seed first; running the study again deleted the interrupted
    seed's archive and started it from generation 0 (with one archive for every seed,
    `--archive`, it started new runs and left the old ones 'running')."""
    import signal
    import sqlite3
    import subprocess
    import sys

    from scale_helpers import run_tiny, wait_for_generation

    cfg = tiny_toml(tmp_path / "tiny.toml")
    out = tmp_path / "study"
    argv = [sys.executable, "-m", "evolve.cli.main", "study", "--seeds", "11", "12", "--config",
            str(cfg), "--out", str(out), "--parallel", "1", "--workers", "1",
            "--generations", "8"]
    db = tmp_path / "shared.db" if shared else out / "seed-11.db"
    argv += ["--archive", str(db)] if shared else []
    proc = subprocess.Popen(argv, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    wait_for_generation(db, 1, proc)
    proc.send_signal(signal.SIGTERM)  # to the study alone, not its process group
    _out, err = proc.communicate(timeout=180)
    assert proc.returncode == 143, err
    assert "run the same command again" in err
    with sqlite3.connect(db) as con:  # the seed's own run heard the stop and said so
        assert con.execute("SELECT status FROM runs").fetchall() == [("interrupted",)]
    assert not (out / "seed-12.log").exists()  # the queued seed never started

    again = subprocess.run(argv, capture_output=True, text=True, timeout=900)
    assert again.returncode == 0, again.stderr[-2000:]
    assert "resuming run 1 of" in (out / "seed-11.log").read_text()
    with sqlite3.connect(db) as con:  # seed 11 continued its run; no new one was started
        seeds = con.execute("SELECT id, seed, status FROM runs ORDER BY id").fetchall()
    assert seeds[0] == (1, 11, "finished") and [r[1] for r in seeds].count(11) == 1, seeds
    summary = json.loads((out / "summary.json").read_text())
    _s, ref = run_tiny(tmp_path / "ref.db", 11, generations=8)
    assert summary["picks"]["11"] == picked(ref)  # as if never stopped
