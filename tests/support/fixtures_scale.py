"""Fixtures of the scale-out tests: SQLite references of the tiny search, real servers."""

from __future__ import annotations

from typing import Any

import pytest
from scale_helpers import run_tiny
from scale_services import postgres_server, ray_cluster

from evolve.search.loop import RunSummary


@pytest.fixture(scope="session")
def sqlite_reference(tmp_path_factory, data_path) -> Any:
    """seed -> (summary, tables) of the tiny search into SQLite, local executor, 1 worker."""
    cache: dict[int, tuple[RunSummary, dict[str, Any]]] = {}

    def get(seed: int) -> tuple[RunSummary, dict[str, Any]]:
        if seed not in cache:
            path = tmp_path_factory.mktemp(f"ref{seed}") / "ref.db"
            cache[seed] = run_tiny(path, seed)
        return cache[seed]

    return get


@pytest.fixture(scope="session")
def pg():
    with postgres_server() as server:
        yield server


@pytest.fixture(scope="module")
def ray_head():
    with ray_cluster(cpus=2) as cluster:
        yield cluster
