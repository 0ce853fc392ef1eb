"""What a command acts on: a file, a seed name or an archived id (evolve/targets.py)."""

from __future__ import annotations

import argparse

import pytest

from evolve.errors import UserError
from evolve.targets import SEEDS_DIR, load_target, seed_path, write_file


def _args(program: str, tmp_path) -> argparse.Namespace:
    return argparse.Namespace(program=program, archive=str(tmp_path / "none.db"), run=None,
                              constants=None)


def test_a_seed_name_loads_the_seed_file(tmp_path):
    program, groups, label = load_target(_args("transfer", tmp_path))
    assert label == "transfer" and groups == {}
    assert "ar_lat" in {s.name for s in program.constants}


def test_hex_names_and_unknown_names_go_to_the_archive(tmp_path):
    assert seed_path("beef") is None and seed_path("seeds/transfer.py") is None
    assert seed_path("no_such_seed") is None
    assert seed_path("linear") == SEEDS_DIR / "linear.py"
    with pytest.raises(UserError, match="archive not found"):
        load_target(_args("beef", tmp_path))
    with pytest.raises(UserError, match=r"^no_such_seed: not a program file, a seed name \(.*"
                                        r"linear.*\) or a program id in "):
        load_target(_args("no_such_seed", tmp_path))


def test_a_full_disk_is_one_line_naming_the_flag(tmp_path):
    """/dev/full (Linux) fails every write with ENOSPC."""
    with pytest.raises(UserError, match=r"^--save-constants /dev/full: cannot write \(No space"):
        write_file("/dev/full", "{}" * 10_000, "--save-constants")
    write_file(tmp_path / "c.json", "{}", "--save-constants")
    assert (tmp_path / "c.json").read_text() == "{}"
