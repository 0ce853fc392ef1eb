"""`evolve data`: how typical of its load stage each stage's fitting slice is."""

from __future__ import annotations

import json

import numpy as np
import pytest

from evaluator.api import load_scenarios
from evolve.cli.main import main

BURST = "20260217-202857-llama-2-70b-tp4-general"  # 845-880 s: a burst queues at the cap


@pytest.mark.slow
def test_each_stage_slice_is_compared_with_its_stage(capsys, data_path):
    """The ratio is the slice's measured mean TTFT (the scored window mid-stage, 840-960 s
    of the 20 req/s stage for 120 s slices) over the stage's, recomputed here from the
    requests; only Llama-2-70B `general`'s second stage, which holds a burst, is named;
    a run the search does not slice (its mean TTFT says it queues throughout: the four
    overloaded `reasoning` runs) gets no ratio."""
    assert main(["data", "--data", str(data_path), "--json"]) == 0
    rows = {r["name"]: r for r in json.loads(capsys.readouterr().out)["experiments"]}
    sc = next(s for s in load_scenarios(data_path) if s.name == BURST)
    t = sc.arrival_us / 1e6
    ok = ~sc.measured.failed
    stage2 = sc.measured.ttft_s[ok & (t >= 600)].mean()  # the last stage keeps late arrivals
    window = sc.measured.ttft_s[ok & (t >= 840) & (t < 960)].mean()
    first, second = rows[BURST]["slice_ttft_ratio"]
    assert np.isclose(second, window / stage2, rtol=1e-12) and second > 1.5
    assert 2 / 3 <= first <= 1.5
    for name, r in rows.items():
        if "reasoning" in name:
            assert r["slice_ttft_ratio"] is None, name
        elif name != BURST:
            assert all(2 / 3 <= v <= 1.5 for v in r["slice_ttft_ratio"]), name
    assert main(["data", "--data", str(data_path)]) == 0
    notes = [ln for ln in capsys.readouterr().out.splitlines() if "not typical" in ln]
    assert notes == [f"{BURST}: the fitting slice of stage 2 is not typical of its stage "
                     f"(mean TTFT {second:.1f}x the stage's); closed-loop fits weigh it as "
                     "the whole stage"]
