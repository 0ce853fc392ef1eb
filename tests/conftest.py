"""Shared fixtures: the real data directory, small cuts of real runs, and synthetic data.

Real-data tests run against ``../shared/data`` (or ``EVOLVE_DATA``); fixtures cut runs to
their first seconds so the suite stays fast on 2 cores while still exercising real
requests. When those runs are absent the session stops with one line saying so, unless
``EVOLVE_SKIP_REAL_DATA=1``: then every test that uses a real-data fixture, or is marked
``real_data``, is skipped with that reason (a skip must not hide the real work).
``synthetic_data`` is a data directory the tests build themselves
(``tests/support/synthetic_data.py``: simulated from a known program, written as TraceV2,
ingested), so the ingest path and a search on it run everywhere.
"""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from evaluator.api import DataError, Evaluator, data_dir, load_scenarios

# Shared fixtures by concern (tests/support/fixtures_*.py): every test folder may use them.
pytest_plugins = ["fixtures_fitting", "fixtures_go", "fixtures_llm", "fixtures_report",
                  "fixtures_runs", "fixtures_scale"]

REAL_DATA_REASON = "needs the bundled measured runs (../shared/data)"
REAL_DATA_FIXTURES = {"data_path", "all_scenarios", "small_scenarios", "small_evaluator"}

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


def real_data_available() -> bool:
    """Whether the data directory (``EVOLVE_DATA`` or ``../shared/data``) has the bundled runs."""
    try:
        root = data_dir(None)
    except DataError:
        return False
    return all((root / "experiments" / name).is_dir() for name in SMALL_RUNS)


# The two tiers (docs/development/tests.md): `pytest -q -m "not slow and not service"` is the
# everyday command; `pytest -q` (everything) is CI's. A test is `service` when it starts a
# real service or toolchain (by fixture or module), `slow` when it runs whole searches or
# closed-loop fits (every test under integration/, and the modules named here, measured
# with --durations), or when it says so itself.
SERVICE_FIXTURES = {"go_toolchain", "harness", "pg", "ray_head"}
SERVICE_MODULES = {"test_local_llm", "test_report_browser", "test_report_untrusted",
                   "test_blis_measured", "test_blis_replay", "test_blis_async", "test_go_blis",
                   "test_build_blis",
                   "test_postgres_archive", "test_ray_executor", "test_ray_lost"}
# Session fixtures that run a whole (tiny) search: every test on them waits for it.
SLOW_FIXTURES = {"tiny_run", "_finished_run", "uninterrupted_digest", "sqlite_reference"}
SLOW_FOLDERS = {"integration"}
SLOW_MODULES = {"test_generalize", "test_study", "test_cli_run", "test_calibrate_command",
                "test_export_loop", "test_closed_loop", "test_calibrate", "test_roundtrip"}


def _tier(item) -> None:
    path = Path(str(item.fspath))
    fixtures = set(getattr(item, "fixturenames", ()))
    if fixtures & SERVICE_FIXTURES or path.stem in SERVICE_MODULES:
        item.add_marker(pytest.mark.service)
    if (SLOW_FOLDERS & set(path.parts) or path.stem in SLOW_MODULES
            or fixtures & SLOW_FIXTURES):
        item.add_marker(pytest.mark.slow)


def pytest_collection_modifyitems(config, items) -> None:
    """Mark real-data tests (by fixture use); without the runs, stop (or skip on request).
    Mark the tiers: ``service`` and ``slow`` (see above)."""
    needed = []
    for item in items:
        _tier(item)
        if REAL_DATA_FIXTURES & set(getattr(item, "fixturenames", ())):
            item.add_marker(pytest.mark.real_data)
        if item.get_closest_marker("real_data") is not None:
            needed.append(item)
    if not needed or real_data_available():
        return
    if os.environ.get("EVOLVE_SKIP_REAL_DATA") != "1":
        raise pytest.UsageError(f"{REAL_DATA_REASON}: set EVOLVE_DATA to the data directory, "
                                f"or EVOLVE_SKIP_REAL_DATA=1 to skip its {len(needed)} tests")
    skip = pytest.mark.skip(reason=f"{REAL_DATA_REASON} (EVOLVE_SKIP_REAL_DATA=1)")
    for item in needed:
        item.add_marker(skip)


@pytest.fixture(scope="session")
def synthetic_data(tmp_path_factory) -> Path:
    """A data directory of runs simulated from a known program and ingested as TraceV2."""
    from synthetic_data import build

    return build(tmp_path_factory.mktemp("synthetic"))


@pytest.fixture()
def crash_dir(tmp_path, monkeypatch) -> Path:
    """Where a traceback file would go (``evolve.cli.main.write_traceback``): tests of bad input
    assert it stays empty."""
    import tempfile

    d = tmp_path / "crash"
    d.mkdir()
    monkeypatch.setattr(tempfile, "tempdir", str(d))
    return d
