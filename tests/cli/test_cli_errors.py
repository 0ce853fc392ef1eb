"""The CLI's one place for errors: every expected error of any command (even one added
tomorrow) is one line and exit 2; a bug is one line naming the file that holds its full
traceback, exit 1."""

from __future__ import annotations

import types
from pathlib import Path

import pytest

from evaluator.api import DataError
from evolve import errors
from evolve.cli import main as cli


def _command(monkeypatch, exc: BaseException) -> None:
    """Register a new command (not in any list of handled commands) that raises ``exc``."""
    mod = types.ModuleType("evolve_test_new_command")
    mod.add_arguments = lambda parser: None  # type: ignore[attr-defined]

    def run(_args):
        raise exc

    mod.run = run  # type: ignore[attr-defined]
    monkeypatch.setitem(__import__("sys").modules, mod.__name__, mod)
    monkeypatch.setitem(cli.COMMANDS, "brand-new", (mod.__name__, "a new command"))


@pytest.mark.parametrize("exc", [
    errors.UserError("bad input\nsecond line"), errors.ConfigError("bad key"),
    errors.ArchiveError("no run 9"), errors.CassetteError("corrupt"),
    errors.BudgetExhausted("spent"), errors.LLMUnavailable("down", []),
    errors.ProgramError("too big", "literal", 3, "9" * 10), errors.ExportError("no Go"),
    DataError("bad data file"),
])
def test_every_expected_error_of_a_new_command_is_one_line_exit_2(monkeypatch, capsys, exc):
    _command(monkeypatch, exc)
    assert cli.main(["brand-new"]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and err[0].startswith("evolve brand-new: error: "), err
    assert str(exc).splitlines()[0] in err[0]


def test_a_bug_is_one_line_and_its_traceback_is_kept_in_a_file(monkeypatch, capsys):
    _command(monkeypatch, RuntimeError("internal invariant broken"))
    assert cli.main(["brand-new", ]) == 1
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and "Traceback" not in err[0], err
    assert "internal error: RuntimeError: internal invariant broken" in err[0]
    path = Path(err[0].rsplit("full traceback in ", 1)[1].rstrip(")"))
    text = path.read_text()
    assert "Traceback (most recent call last)" in text and "internal invariant broken" in text
    assert "evolve brand-new" in text
    path.unlink()


def test_every_registered_command_goes_through_the_one_handler():
    """No command module handles errors on its own terms: each is run by ``cli.main``."""
    import importlib
    import inspect

    for name, (module, _help) in cli.COMMANDS.items():
        mod = importlib.import_module(module)
        assert callable(mod.run) and callable(mod.add_arguments), name
        assert "sys.exit(" not in inspect.getsource(mod), name


def _interrupt_in_compiled_code() -> SystemError:
    """What numba's dispatcher raises on Ctrl-C: SystemError, the interrupt its cause."""
    try:
        try:
            raise KeyboardInterrupt
        except KeyboardInterrupt as ki:
            raise SystemError("CPUDispatcher(<function _run>) returned a result with an "
                              "exception set") from ki
    except SystemError as exc:
        return exc


def test_ctrl_c_inside_compiled_code_is_an_interrupt_not_a_bug(monkeypatch, capsys):
    _command(monkeypatch, _interrupt_in_compiled_code())
    assert cli.main(["brand-new"]) == 130
    assert capsys.readouterr().err.strip().splitlines() == ["evolve brand-new: interrupted"]


def test_a_system_error_without_an_interrupt_is_still_a_bug(monkeypatch, capsys):
    _command(monkeypatch, SystemError("returned a result with an exception set"))
    assert cli.main(["brand-new"]) == 1
    err = capsys.readouterr().err
    assert "internal error: SystemError" in err
    Path(err.strip().rsplit("full traceback in ", 1)[1].rstrip(")")).unlink()


def test_a_disk_that_fills_up_is_one_line_exit_2(monkeypatch, capsys):
    import errno

    _command(monkeypatch, OSError(errno.ENOSPC, "No space left on device", "runs/report/a.svg"))
    assert cli.main(["brand-new"]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert err == ["evolve brand-new: error: runs/report/a.svg: cannot write (No space left on "
                   "device)"], err


def test_a_server_archive_that_fails_mid_run_is_named_without_its_password():
    """Found in review: a PostgreSQL server stopped mid-run gave "archive database error:
    connection failed ..." naming no archive (a file archive was named)."""
    from sqlalchemy.exc import OperationalError

    from evolve.cli.main import expected_error

    exc = OperationalError("SELECT 1", {}, Exception("connection refused"))
    line = expected_error(exc, "postgresql://evolve:s3cret@127.0.0.1:5432/ev")
    assert line is not None and line.startswith(
        "postgresql+psycopg://evolve:***@127.0.0.1:5432/ev: archive database error: "), line
    assert "s3cret" not in line
    assert expected_error(exc, "a.db").startswith("a.db: archive database error")
