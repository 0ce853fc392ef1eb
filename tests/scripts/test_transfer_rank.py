"""scripts/transfer_rank.py: the figures docs/selection.md quotes on how well transfer
proxies rank programs come from a script, cached and reproducible."""

from __future__ import annotations

import json
import math
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
SEEDS = ("linear", "layered", "trained_physics", "transfer", "roofline", "anchored")
CONFIG = """
[run]
seed = 5
generations = 1
head_seconds = 20.0
scenarios = ["20260217-155451-llama-2-7b-tp1-codegen",
             "20260218-130541-mixtral-8x7b-v0-1-tp2-general",
             "20260218-150304-codellama-34b-tp2-general"]
workers = 1
progress = false
seeds_dir = "{seeds}"
[search]
children = 2
[fit]
max_evals = 40
restarts = 0
starts = 1
window_steps = 300
seed_polish_evals = 0
polish_evals = 0
"""


def _run(*args: str) -> str:
    proc = subprocess.run([sys.executable, *args], cwd=ROOT, capture_output=True, text=True,
                          timeout=900)
    assert proc.returncode == 0, proc.stderr
    return proc.stdout


@pytest.mark.slow
@pytest.mark.real_data
def test_proxies_are_ranked_against_the_cached_real_lomo(tmp_path):
    seeds = tmp_path / "seeds"
    seeds.mkdir()
    for stem in SEEDS:
        shutil.copy(ROOT / "seeds" / f"{stem}.py", seeds)
    (tmp_path / "t.toml").write_text(CONFIG.format(seeds=seeds))
    db = str(tmp_path / "a.db")
    _run("-m", "evolve.cli.main", "run", "--config", str(tmp_path / "t.toml"), "--archive", db)
    cache = tmp_path / "lomo"
    args = ("scripts/transfer_rank.py", db, "--out", str(cache), "--top", "3",
            "--max-evals", "30", "--polish-evals", "0", "--json")
    first = json.loads(_run(*args))
    rows = first["programs"]
    assert len(rows) == 3 and len({r["id"] for r in rows}) == 3
    assert sorted(p.stem for p in cache.glob("*.json")) == sorted(r["id"] for r in rows)
    for r in rows:
        lomo = json.loads((cache / f"{r['id']}.json").read_text())
        assert lomo["mode"] == "lomo" and lomo["max_evals"] == 30
        # the count is the held-out normal runs within 10 %, as generalize reports it
        assert r["count"] == lomo["normal_within_10pct"]["runs"]
        for proxy in ("search", "lomo_train", "lomo"):
            assert math.isfinite(r[proxy]) and r[proxy] > 0
    assert set(first["spearman"]) == {"search", "lomo_train", "lomo"}
    # the second call reads the cache (no generalize) and computes the same figures
    stamps = {p: p.stat().st_mtime_ns for p in cache.glob("*.json")}
    assert json.loads(_run(*args)) == first
    assert {p: p.stat().st_mtime_ns for p in cache.glob("*.json")} == stamps
