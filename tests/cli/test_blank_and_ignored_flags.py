"""Flags that once meant something else without a word: a blank ``--data``/``--archive``
(an unset shell variable) taken as the default, ``--run`` ignored for a program file, an
empty archive file called missing. Each is now one line naming the flag, exit 2."""

from __future__ import annotations

import pytest

from evolve.cli.main import main


def _one_line(capsys) -> str:
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and "Traceback" not in err[0], err
    return err[0]


@pytest.mark.parametrize("argv, needle", [
    (["run", "--data", "", "--print-config"], "evolve run: error: --data: blank"),
    (["run", "--archive", " ", "--print-config"], "evolve run: error: --archive: blank"),
    (["data", "--data", ""], "evolve data: error: --data: blank"),
    (["validate", "layered", "--data", "", "--no-plots"], "evolve validate: error: --data: blank"),
])
def test_a_blank_data_or_archive_is_not_the_default(argv, needle, capsys):
    assert main(argv) == 2
    assert needle in _one_line(capsys)


def test_a_blank_study_data_is_not_the_default(tmp_path, capsys):
    assert main(["study", "--data", "", "--seeds", "1", "--out", str(tmp_path / "s")]) == 2
    assert "evolve study: error: --data: blank" in _one_line(capsys)


@pytest.mark.parametrize("argv", [
    ["validate", "layered", "--run", "2", "--no-plots"],
    ["export-go", "layered", "--run", "2"],
    ["generalize", "layered", "--mode", "lowo", "--run", "2"],
])
def test_run_with_a_program_file_or_seed_is_refused(argv, capsys):
    assert main(argv) == 2
    assert "--run: applies to a program in the archive; " in _one_line(capsys)


@pytest.mark.parametrize("argv", [
    ["validate", "abc123", "--no-plots"],
    ["generalize", "abc123", "--mode", "lomo"],
])
def test_an_empty_archive_file_is_named_as_empty(argv, tmp_path, capsys):
    """``show`` and ``export-go`` said so; these said "archive not found"."""
    db = tmp_path / "a.db"
    db.write_bytes(b"")
    assert main([*argv, "--archive", str(db)]) == 2
    assert f"{db}: an empty file, no archive yet" in _one_line(capsys)
