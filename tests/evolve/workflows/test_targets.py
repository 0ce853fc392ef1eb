"""What a command acts on: a file, a seed name or an archived id (evolve/workflows/targets.py)."""

from __future__ import annotations

import argparse
import json
from dataclasses import dataclass

import pytest

from evolve.errors import UserError
from evolve.workflows.targets import SEEDS_DIR, load_target, seed_path, write_file


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


# --constants files (found in review: a typo'd group validated the declared values, exit 0;
# malformed files were internal errors)
LINEAR = {"b0_us": 20000.0, "prefill_us": 1.0, "decode_us": 1.0}


@pytest.mark.parametrize(("text", "needle"), [
    ("[1, 2]", "expected a JSON object"),
    ('{"global": 5}', "group 'global' is not an object"),
    ('{"global": {"b0_us": "x", "prefill_us": 1, "decode_us": 1}}',
     "b0_us = 'x' is not a finite number"),
    ('{"global": {"b0_us": 1, "prefill_us": 1}}', "lacks constant 'decode_us'"),
    ('{"global": {"b0_us": 1, "prefill_us": 1, "decode_us": 1, "zz": 2}}',
     "'zz' is not a constant of the program"),
    ('{"b0_us": NaN, "prefill_us": 1, "decode_us": 1}', "b0_us = nan is not a finite number"),
    ("[" * 100_000, "nested too deeply"),
    ("{", "not JSON"),
])
def test_a_bad_constants_file_is_one_line_naming_it(tmp_path, text, needle):
    path = tmp_path / "c.json"
    path.write_text(text)
    args = _args("linear", tmp_path)
    args.constants = str(path)
    with pytest.raises(UserError) as info:
        load_target(args)
    assert str(info.value).startswith(f"--constants {path}: ") and needle in str(info.value)


def test_constants_files_flat_nested_with_a_bom_and_not_utf8(tmp_path):
    from evolve.program.language import parse_program
    from evolve.workflows.targets import read_constants

    program = parse_program((SEEDS_DIR / "linear.py").read_bytes())
    flat = tmp_path / "flat.json"
    flat.write_bytes(b"\xef\xbb\xbf" + json.dumps(LINEAR).encode())
    assert read_constants(str(flat), program) == {"global": LINEAR}
    assert read_constants(json.dumps({"m": LINEAR}), program, inline=True) == {"m": LINEAR}
    bad = tmp_path / "bad.json"
    bad.write_bytes(b'{"global": \xff}')
    with pytest.raises(UserError, match="not UTF-8 text"):
        read_constants(str(bad), program)


@dataclass
class _Sc:
    name: str
    model: str


RUNS = [_Sc("a-codegen", "m1"), _Sc("a-general", "m1")]


def test_scope_is_read_from_the_groups_that_name_something_in_the_data():
    from evolve.workflows.targets import check_groups, infer_scope, unmatched_runs

    # an archive fitted on four models, validated on data holding one of them
    pooled = {"global": {}, "m1": {}, "m2": {}, "m3": {}}
    assert infer_scope(pooled, RUNS) == "pooled" and unmatched_runs(pooled, RUNS, "pooled") == []
    assert infer_scope({"m1": {}, "m2": {}}, RUNS) == "per_model"
    assert infer_scope({"a-codegen": {}}, RUNS) == "per_scenario"
    assert unmatched_runs({"a-codegen": {}}, RUNS, "per_scenario") == ["a-general"]
    with pytest.raises(UserError, match=r"no group names a model or run .* Global"):
        check_groups({"Global": {}}, RUNS, "--constants c.json")
    check_groups({"m2": {}, "m1": {}}, RUNS, "--constants c.json")  # one match is enough


def test_constants_for_an_archived_program_are_refused(tmp_path):
    args = _args("4e26069dc792", tmp_path)
    args.constants = "c.json"
    with pytest.raises(UserError, match="--constants: applies to a program file"):
        load_target(args)
