"""`evolve --help`, `--version` and every command's `--help`: a summary, an example, defaults."""

from __future__ import annotations

import re

import pytest

from evolve.cli import main as cli
from evolve.config.schema import Config


def _help(capsys, *argv: str) -> str:
    with pytest.raises(SystemExit) as stop:
        cli.main([*argv, "--help"])
    assert stop.value.code == 0
    return capsys.readouterr().out


def test_version(capsys):
    assert cli.main(["--version"]) == 0
    assert re.fullmatch(r"evolve (\d+\.\d+\.\d+\S*|unknown)\n", capsys.readouterr().out)


def test_top_help_groups_every_command_in_the_order_a_user_meets_them(capsys):
    assert cli.main(["--help"]) == 0
    out = capsys.readouterr().out
    assert "--version" in out
    groups = [line.strip() for line in out.splitlines() if re.fullmatch(r"  \S+:", line)]
    assert groups == ["search:", "inspect:", "export:", "data:", "LLM:"]
    listed = [line.split()[0] for line in out.splitlines() if line.startswith("    ")
              and line.split()[0] in cli.COMMANDS]
    assert sorted(listed) == sorted(cli.COMMANDS)  # each once
    assert listed.index("run") < listed.index("frontier") < listed.index("export-go")


@pytest.mark.parametrize("name", sorted(cli.COMMANDS))
def test_every_command_has_a_summary_and_an_example(capsys, name):
    out = _help(capsys, name)
    summary = out.split("\n\n")[1]
    assert summary == cli.COMMANDS[name][1] and "\n" not in summary
    example = out.split("example:\n", 1)[1]
    assert example.lstrip().startswith(f"evolve {name} ")


def test_run_help_shows_the_defaults(capsys):
    out = " ".join(_help(capsys, "run").split())  # argparse wraps lines
    run = Config().run
    assert f"--generations N generations after the seeds (default {run.generations}," in out
    assert f"(default {run.seed}, run.seed)" in out
    assert "data directory (default $EVOLVE_DATA, else ../shared/data; run.data)" in out
    assert f"fitting processes (default {run.workers}, run.workers;" in out
