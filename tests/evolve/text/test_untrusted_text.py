"""Regressions of issue 17 fixed here: untrusted text never escapes as a crash, broken
pipes are quiet, and out-of-range settings are one line that states the allowed range."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

from evolve.cli.main import main
from evolve.errors import CassetteError, ProgramError
from evolve.operators.llm.cassette import load_entries
from evolve.program.language import parse_program

ROOT = Path(__file__).resolve().parents[3]
HUGE = "9" * 400


@pytest.mark.parametrize("src", [
    'CONSTANTS = {"a": (1.0, 0.0, 10.0)}\n\ndef step_time(f, c):\n    return c.a * f.kv_read + '
    + HUGE + "\n",
    'CONSTANTS = {"a": (' + HUGE + ', 0.0, 10.0)}\n\ndef step_time(f, c):\n    return c.a\n',
])
def test_a_400_digit_literal_is_a_rejection_not_a_crash(src):
    with pytest.raises(ProgramError) as info:
        parse_program(src)
    assert info.value.rule == "literal"


def test_fit_of_such_a_file_is_one_line_and_exit_2(tmp_path, capsys):
    path = tmp_path / "huge.py"
    path.write_text('CONSTANTS = {"a": (1.0, 0.0, 10.0)}\n\ndef step_time(f, c):\n'
                    f"    return c.a + {HUGE}\n")
    assert main(["fit", str(path)]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and "literal" in err[0]


@pytest.mark.parametrize("argv, needle", [
    (["--seed", "-1"], "run.seed' out of range: must be an integer in [0, 2^63)"),
    (["--wall-time", "nan"], "run.wall_time_s' out of range"),
    (["--head-seconds", "inf"], "run.head_seconds' out of range"),
])
def test_out_of_range_settings_state_the_allowed_range(argv, needle, tmp_path, capsys):
    assert main(["run", *argv, "--archive", str(tmp_path / "a.db")]) == 2
    err = capsys.readouterr().err
    assert needle in err and "Traceback" not in err
    assert not (tmp_path / "a.db").exists() or (tmp_path / "a.db").stat().st_size < 100_000


def test_a_seed_beyond_sqlite_integers_in_toml_is_refused(tmp_path, capsys):
    cfg = tmp_path / "c.toml"
    cfg.write_text(f"[run]\nseed = {2**63}\n[fit]\nslice_seconds = nan\n")
    assert main(["run", "--config", str(cfg), "--archive", str(tmp_path / "a.db")]) == 2
    assert "run.seed' out of range" in capsys.readouterr().err


def test_corrupt_cassette_message_reads_well(tmp_path):
    path = tmp_path / "c.jsonl"
    path.write_text('{"format": 1, "hash": "unterminated\n')
    with pytest.raises(CassetteError) as info:
        load_entries(path)
    assert " at at " not in str(info.value) and ":1:" in str(info.value)


@pytest.mark.slow
def test_a_reader_that_leaves_early_gets_no_traceback(data_path):
    # the reader is gone before evolve writes a byte (as with `| true`)
    proc = subprocess.Popen([sys.executable, "-m", "evolve.cli.main", "data", "--data",
                             str(data_path)], cwd=ROOT, stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, text=True)
    proc.stdout.close()
    err = proc.stderr.read()
    proc.wait(timeout=120)
    assert "Traceback" not in err and "BrokenPipeError" not in err, err
    assert proc.returncode == 141
