"""Fixtures of the Go-export tests: the Go toolchain, and the parity harness built once per
session (building it compiles every export, the slow part)."""

from __future__ import annotations

import pytest
from go_parity import Harness
from needs import require_go


@pytest.fixture()
def go_toolchain() -> None:
    require_go()


@pytest.fixture(scope="session")
def harness(tmp_path_factory) -> Harness:
    require_go()
    return Harness(tmp_path_factory.mktemp("go_harness"))
