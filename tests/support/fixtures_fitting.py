"""Fixtures of the fitting tests: an evaluator whose fitting corpora are built."""

from __future__ import annotations

import pytest
from fit_helpers import seed_program

from evaluator.api import Evaluator
from evolve.fitting import const_map
from evolve.program.codegen import step_model


@pytest.fixture(scope="module")
def refreshed(small_scenarios) -> Evaluator:
    """The four 90-second runs, simulated once with the roofline seed's initial values."""
    ev = Evaluator(small_scenarios)
    p = seed_program("roofline")
    ev.refresh_corpora(step_model(p), const_map(p, {}, ev.scenarios, "global"))
    return ev
