"""Shared fixtures: the real data directory and small cuts of real runs.

Tests run against ``../shared/data`` (or ``EVOLVE_DATA``); fixtures cut runs to their
first seconds so the suite stays fast on 2 cores while still exercising real requests.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from evaluator.api import Evaluator
from evaluator.scenarios import data_dir, load_scenarios

SMALL_RUNS = (
    "20260217-155451-llama-2-7b-tp1-codegen",
    "20260217-202857-llama-2-70b-tp4-general",
    "20260218-130541-mixtral-8x7b-v0-1-tp2-general",
    "20260218-150956-codellama-34b-tp2-codegen",
)


@pytest.fixture(scope="session")
def data_path() -> Path:
    return data_dir(None)


@pytest.fixture(scope="session")
def all_scenarios(data_path):
    return load_scenarios(data_path)


@pytest.fixture(scope="session")
def small_scenarios(all_scenarios):
    """Four runs (one per model), cut to their first 90 seconds."""
    by = {s.name: s for s in all_scenarios}
    return [by[n].head(90.0) for n in SMALL_RUNS]


@pytest.fixture()
def small_evaluator(small_scenarios) -> Evaluator:
    return Evaluator(small_scenarios)
