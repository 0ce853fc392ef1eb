"""A damaged or read-only archive is one line and exit 2, before any work (issue 17:
``OperationalError`` tracebacks; ``run`` computed generation 0, then crashed and left a
failed run behind; a read-only directory was reported as a "corrupt archive")."""

from __future__ import annotations

import contextlib
import os
import shutil
import sqlite3
import subprocess
from collections.abc import Iterator
from pathlib import Path

import pytest
from hardening_helpers import table_count

from evolve.archive import Archive
from evolve.cli.main import main
from evolve.errors import ArchiveError

pytestmark = pytest.mark.real_data


def _sql(path: Path, statement: str) -> None:
    con = sqlite3.connect(path)
    con.execute(statement)
    con.commit()
    con.close()


@contextlib.contextmanager
def read_only(path: Path) -> Iterator[None]:
    """Make ``path`` (file or directory) unwritable, even for root (immutable flag)."""
    if os.geteuid() == 0:
        if not shutil.which("chattr") or subprocess.run(
                ["chattr", "+i", str(path)], capture_output=True).returncode:
            pytest.skip("running as root without chattr +i: cannot make a path read-only")
        try:
            yield
        finally:
            subprocess.run(["chattr", "-i", str(path)], check=True)
        return
    mode = path.stat().st_mode
    path.chmod(0o555 if path.is_dir() else 0o444)
    try:
        yield
    finally:
        path.chmod(mode)


@pytest.mark.parametrize("command", [["frontier"], ["show", "0"], ["runs"], ["replay", "0"],
                                     ["export-go", "0"], ["validate", "0", "--no-plots"]])
def test_a_missing_table_is_one_line_for_every_reader(finished, command, capsys):
    _sql(finished, "DROP TABLE frontier")
    assert main([*command, "--archive", str(finished)]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and f"archive {finished}: missing table frontier" in err[0], err


def test_a_missing_column_is_named(finished, capsys):
    _sql(finished, "ALTER TABLE grid_cells DROP COLUMN elite_generation")
    assert main(["frontier", "--archive", str(finished)]) == 2
    assert "missing column grid_cells.elite_generation" in capsys.readouterr().err


def test_run_on_a_damaged_archive_creates_no_run(finished, tiny_config_file, capsys):
    _sql(finished, "DROP TABLE frontier")
    assert main(["run", "--config", str(tiny_config_file), "--archive", str(finished)]) == 2
    assert "missing table frontier" in capsys.readouterr().err
    assert table_count(finished, "runs") == 1


def test_resume_on_a_read_only_archive_is_one_line(finished, capsys):
    with read_only(finished):
        code = main(["run", "--resume", "1", "--generations", "2", "--archive",
                     str(finished)])
    err = capsys.readouterr().err.strip().splitlines()
    assert code == 2 and len(err) == 1, err
    assert f"archive {finished}: read-only" in err[0] and "corrupt" not in err[0]
    with Archive(finished, create=False) as ar:  # untouched
        assert ar.run(1).generations_done == 1 and ar.run(1).status == "finished"


def test_a_new_archive_in_a_read_only_directory_is_one_line(tmp_path, tiny_config_file,
                                                             capsys):
    folder = tmp_path / "ro"
    folder.mkdir()
    with read_only(folder):
        code = main(["run", "--config", str(tiny_config_file), "--archive",
                     str(folder / "a.db")])
    err = capsys.readouterr().err.strip().splitlines()
    assert code == 2 and len(err) == 1, err
    assert "cannot create it" in err[0] and "corrupt" not in err[0]


def test_a_read_only_filesystem_too():
    """/sys refuses new files even to root: the same one line, no chattr needed."""
    if not Path("/sys").is_dir() or Path("/sys/evolve-test.db").exists():
        pytest.skip("no /sys here")
    with pytest.raises(ArchiveError, match="cannot create it in /sys"):
        Archive("/sys/evolve-test.db")


@pytest.mark.parametrize("command", [["frontier"], ["show", "0"]])
def test_a_corrupt_page_inside_a_valid_header_is_one_line(finished, command, capsys):
    """The header and schema read fine; the rows a command reads do not (a disk fault)."""
    size = finished.stat().st_size
    with finished.open("r+b") as fh:
        fh.seek(size * 2 // 5)
        fh.write(b"\0" * (size // 5))
    code = main([*command, "--archive", str(finished)])
    err = capsys.readouterr().err.strip().splitlines()
    assert code == 2 and len(err) == 1 and str(finished) in err[0], err
    assert "malformed" in err[0] or "corrupt" in err[0], err
