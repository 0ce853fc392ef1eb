"""Archives for the report's tests: a synthetic one (every feature, instant) and a tiny
real run made by ``evolve run --report`` itself (three cut runs, three generations)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from report_synthetic import make_archive

from evolve.cli.main import main

SCENARIOS = ["20260217-155451-llama-2-7b-tp1-codegen",      # train
             "20260218-150956-codellama-34b-tp2-codegen",   # validate
             "20260217-170634-llama-2-7b-tp1-reasoning"]    # test
TINY = f"""
[run]
seed = 7
generations = 3
head_seconds = 20.0
scenarios = {json.dumps(SCENARIOS)}
workers = 1
progress = false
[search]
children = 4
[fit]
max_evals = 40
restarts = 0
window_steps = 300
"""


@pytest.fixture(scope="session")
def tiny_run(tmp_path_factory, data_path) -> tuple[Path, Path]:
    """(archive, report directory) of a tiny real search run with ``--report``."""
    d = tmp_path_factory.mktemp("tiny")
    (d / "tiny.toml").write_text(TINY)
    archive, out = d / "a.db", d / "report"
    assert main(["run", "--config", str(d / "tiny.toml"), "--archive", str(archive),
                 "--data", str(data_path), "--report", str(out)]) == 0
    return archive, out


@pytest.fixture(scope="session")
def synthetic_archive(tmp_path_factory) -> Path:
    return make_archive(tmp_path_factory.mktemp("synth") / "s.db", n_programs=80,
                        generations=6)
