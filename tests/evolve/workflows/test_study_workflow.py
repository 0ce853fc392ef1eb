"""evolve.workflows.study: a seed's command line, the summary over seeds, and the refusal
to reuse a seed's result made with other settings."""

from __future__ import annotations

import json

import pytest

from evolve.errors import UserError
from evolve.workflows.study import StudyOptions, reusable, run_argv, summary


def test_run_argv_resumes_or_configures_and_joins_ray_or_sets_workers():
    opts = StudyOptions(config="c.toml", generations=3, data="d", head_seconds=20.0,
                        workers=2)
    assert run_argv(opts, 5, "a.db", "") == [
        "run", "--seed", "5", "--archive", "a.db", "--no-progress", "--executor", "local",
        "--config", "c.toml", "--generations", "3", "--data", "d", "--head-seconds", "20.0",
        "--workers", "2"]
    resumed = run_argv(opts, 5, "a.db", "ray://x:1", resume=4)
    assert resumed[resumed.index("--resume") + 1] == "4" and "--config" not in resumed
    assert resumed[-2:] == ["--ray-address", "ray://x:1"]


def _seed(e2e, fail=0):
    return {"runs": {"r2": {"split": "test", "ape": {"e2e_mean": e2e},
                            "pred": {"failures": fail}, "meas": {"failures": 1}},
                     "r1": {"split": "train", "ape": {"e2e_mean": 0.1}}}}


def test_summary_gives_median_min_max_in_percent_and_a_missing_ape_as_infinite():
    rows, data = summary({1: _seed(0.1, 2), 2: _seed(0.3, 4), 3: _seed(None, 0)})
    assert [r.name for r in rows] == ["r1", "r2"]
    r2 = rows[1]
    assert r2.split == "test" and r2.failed == 2 and r2.measured_failed == 1
    med, lo, hi = r2.ape["e2e_mean"]
    assert (med, lo, hi) == pytest.approx((30.0, 10.0, float("inf")))
    assert data["r2"]["e2e_mean"] == [0.1, 0.3, None]


def test_a_seed_made_with_other_settings_or_unreadable_is_refused(tmp_path):
    opts = StudyOptions(seeds=[1])
    good = {"program": "p", "runs": {}, "settings": "s1"}
    (tmp_path / "seed-1.json").write_text(json.dumps(good))
    reusable(opts, tmp_path, "s1")  # the same settings: reused
    with pytest.raises(UserError, match="run with other settings"):
        reusable(opts, tmp_path, "s2")
    (tmp_path / "seed-1.json").write_text("{")
    with pytest.raises(UserError, match="not the result of seed 1"):
        reusable(opts, tmp_path, "s1")
