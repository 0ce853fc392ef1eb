"""scripts/analysis/blis_bar.py: the bar docs/blis.md quotes (issue 54's targets as one
number per model) is the worst run's worst figure, scaled by its own limit."""

from __future__ import annotations

import importlib.util
import math
from pathlib import Path

from evaluator.api import RunMetrics

ROOT = Path(__file__).resolve().parents[2]
_spec = importlib.util.spec_from_file_location("blis_bar",
                                               ROOT / "scripts" / "analysis" / "blis_bar.py")
assert _spec is not None and _spec.loader is not None
blis_bar = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(blis_bar)


def _run(name: str, e2e: float, ttft: float) -> RunMetrics:
    """A run whose simulated means are off by ``e2e`` and ``ttft`` (relative)."""
    return RunMetrics(name=name, split="train", model="m", workload="w",
                      meas={"e2e_mean": 2.0, "ttft_mean": 0.05},
                      pred={"e2e_mean": 2.0 * (1 + e2e), "ttft_mean": 0.05 * (1 + ttft)})


def test_the_bar_is_the_worst_figure_over_its_limit() -> None:
    sims = {"a": _run("a", 0.015, 0.02), "b": _run("b", -0.01, -0.12)}
    assert math.isclose(blis_bar.bar(sims), 1.2)  # b's TTFT: 12 % against 10 %
    sims["a"] = _run("a", 0.045, 0.0)
    assert math.isclose(blis_bar.bar(sims), 1.5)  # a's E2E: 4.5 % against 3 %


def test_every_run_within_its_limits_scores_at_most_one() -> None:
    assert blis_bar.bar({"a": _run("a", 0.029, -0.099), "b": _run("b", 0.0, 0.0)}) < 1.0


def test_an_invalid_run_cannot_pass() -> None:
    bad = RunMetrics(name="c", split="train", model="m", workload="w", valid=False,
                     reason="overloaded")
    assert blis_bar.bar({"a": _run("a", 0.0, 0.0), "c": bad}) == math.inf
