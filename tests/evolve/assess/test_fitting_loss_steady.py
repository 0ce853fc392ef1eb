"""The stored-metrics training loss (``fitting_loss``) equals ``evaluator.api.loss``, the
steady percentiles weighted and capped as each run stored them (issue 58)."""

from __future__ import annotations

import pytest

from evaluator.api import DEFAULT_LOSS_WEIGHTS, RunMetrics, loss
from evolve.assess.heldout import fitting_loss


def test_fitting_loss_of_stored_metrics_equals_the_search_loss():
    runs = {"a": RunMetrics("a", "train", "m", "w", ape={
                "e2e_mean": 0.1, "ttft_mean": 0.2, "ttft_p90_steady": 0.3,
                "ttft_p99_steady": 2.5, "e2e_p99_steady": 0.05}),
            "b": RunMetrics("b", "train", "m", "w", ape={"e2e_mean": 0.0, "ttft_mean": 0.4},
                            loss_weights={**DEFAULT_LOSS_WEIGHTS, "ttft_p90_steady": 2.0})}
    stored = {n: r.to_dict() for n, r in runs.items()}
    assert fitting_loss(stored, "train") == pytest.approx(loss(runs), rel=1e-12)
    old = {n: {k: v for k, v in d.items() if k != "loss_weights"} for n, d in stored.items()}
    means = [(0.01 + 0.04) / 2, 0.16 / 2]
    assert fitting_loss(old, "train") == pytest.approx((sum(means) / 2) ** 0.5)
