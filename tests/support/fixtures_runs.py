"""Fixtures of the hardening tests: a finished tiny run to attack, and its digest."""

from __future__ import annotations

import shutil
from pathlib import Path

import pytest
from hardening_helpers import baseline_digest, config_dict, tiny_toml

from evolve.archive import Archive
from evolve.config.schema import Config, apply_dict, validate
from evolve.search.loop import Search


@pytest.fixture(scope="session")
def tiny_config_file(tmp_path_factory, data_path) -> Path:
    return tiny_toml(tmp_path_factory.mktemp("cfg") / "tiny.toml")


@pytest.fixture(scope="session")
def uninterrupted_digest(tmp_path_factory, tiny_config_file) -> str:
    """The digest of the tiny run, uninterrupted (in process: no start-up cost)."""
    return baseline_digest(tmp_path_factory.mktemp("base") / "base.db", tiny_config_file)


@pytest.fixture(scope="session")
def _finished_run(tmp_path_factory, tiny_config_file) -> Path:
    path = tmp_path_factory.mktemp("done") / "done.db"
    cfg = Config()
    apply_dict(cfg, config_dict(generations=1, workers=1), "test")
    cfg.run.archive = str(path)
    validate(cfg, "test")
    with Archive(path) as ar:
        Search(cfg, ar, log=lambda _m: None).run()
    return path


@pytest.fixture()
def finished(tmp_path, _finished_run) -> Path:
    """A private copy of an archive holding one finished run (generation 1)."""
    dest = tmp_path / "a.db"
    shutil.copy(_finished_run, dest)
    return dest
