"""The docs site's reference pages are generated from the parsers and the config dataclasses
(scripts/gen_reference.py): the files in docs/reference/ must be what the code gives, and
every command, flag and config key must appear in them."""

from __future__ import annotations

import dataclasses
import sys
from pathlib import Path

import pytest

from evolve.cli.main import COMMANDS, GROUPS, command_parser
from evolve.config.schema import Config

sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "scripts"))

import gen_reference

ROOT = Path(__file__).resolve().parents[2]


@pytest.mark.parametrize("rel", sorted(gen_reference.PAGES))
def test_the_committed_page_is_what_the_code_gives(rel):
    assert (ROOT / rel).read_text() == gen_reference.PAGES[rel](), (
        f"{rel} is out of date: run python scripts/gen_reference.py")


def test_every_command_is_in_one_group_and_on_the_page():
    grouped = [name for _, names in GROUPS for name in names]
    assert sorted(grouped) == sorted(COMMANDS)  # each command once, none left out
    page = (ROOT / "docs/reference/commands.md").read_text()
    for name in COMMANDS:
        assert f"### evolve {name}\n" in page
        _module, parser = command_parser(name)
        for action in parser._actions:
            for flag in action.option_strings:
                if flag not in ("-h", "--help"):
                    assert f"`{flag}`" in page.split(f"### evolve {name}\n")[1], (name, flag)


def test_every_config_key_is_on_the_page():
    page = (ROOT / "docs/reference/config.md").read_text()
    cfg = Config()
    keys = [f"{s.name}.{f.name}" for s in dataclasses.fields(cfg)
            for f in dataclasses.fields(getattr(cfg, s.name))]
    assert len(keys) > 40
    for key in keys:
        assert f"| `{key}` |" in page, key
