"""End-of-run closed-loop test figures (``evolve.search.final_scores``, issue 57 item 7).

A finished run stores, for each member of its last hall of fame, the closed-loop metrics
of every whole test run, outside the determinism digest; ``evolve frontier`` shows them
as its test columns, and an archive without them (written before) shows no test columns.
"""

from __future__ import annotations

import json
import sqlite3

import pytest

from evolve.archive import Archive, final_scores
from evolve.archive.digest import archive_digest
from evolve.cli.main import main
from evolve.search import final_scores as compute
from evolve.search.context import make_context
from evolve.search.setup import load_evaluator

pytestmark = pytest.mark.slow  # a tiny whole search (session fixture) and its replays


def test_a_finished_run_stores_closed_loop_test_figures_of_its_hall_of_fame(finished):
    with Archive(finished, create=False) as ar:
        rows = ar.frontier(1)
        latest = ar.latest_accepted(1)
        finals = final_scores.read(ar, 1)
        splits = ar.run(1).splits
    tests = sorted(n for n, s in splits.items() if s == "test")
    assert tests and set(finals) == {r.program_id for r in rows}
    for r in rows:
        f = finals[r.program_id]
        ev = latest[r.program_id]
        assert f.evaluation == (ev.generation, ev.seq) and f.generation == rows[0].generation
        assert sorted(f.metrics) == tests
        assert all(m["mode"] == final_scores.MODE and m["split"] == "test"
                   for m in f.metrics.values())
        stored = {n: m for n, m in ev.metrics.items() if n in tests}
        assert all(m["mode"] != final_scores.MODE for m in stored.values())


def test_the_figures_are_outside_the_digest_and_recomputed_alike(finished):
    """Dropping them changes no digest; recording again (a resume that ends again) skips
    current figures and, once they are gone, writes the same ones."""
    with Archive(finished, create=False) as ar:
        before, digest = final_scores.read(ar, 1), archive_digest(ar)
        cfg_run = ar.run(1)
    con = sqlite3.connect(finished)
    con.execute("DELETE FROM final_scores")
    con.commit()
    con.close()
    from evolve.config.schema import Config, apply_dict, validate

    cfg = Config()
    apply_dict(cfg, {k: v for k, v in cfg_run.config.items() if k in ("run", "fit", "search")},
                 "stored")
    validate(cfg, "stored")
    said: list[str] = []
    with Archive(finished, create=False) as ar:
        assert archive_digest(ar) == digest
        ctx = make_context(cfg, load_evaluator(cfg), cfg_run.splits)
        compute.record(ar, 1, ctx, 1, said.append)
        assert final_scores.read(ar, 1) == before
        compute.record(ar, 1, ctx, 1, said.append)  # current: nothing to compute
    assert len(said) == 1 and "closed loop" in said[0]


def test_frontier_shows_closed_loop_test_columns_or_none(finished, capsys):
    assert main(["frontier", "--archive", str(finished)]) == 0
    out = capsys.readouterr().out
    assert "test E2E" in out and "test closed loop on each whole run" in out
    assert main(["frontier", "--archive", str(finished), "--json"]) == 0
    members = json.loads(capsys.readouterr().out)["members"]
    assert all(set(m["test_closed_loop"]) == {"e2e_mean", "ttft_mean"} for m in members)
    con = sqlite3.connect(finished)  # an archive written before the figures existed
    con.execute("DROP TABLE final_scores")
    con.commit()
    con.close()
    assert main(["frontier", "--archive", str(finished)]) == 0
    out = capsys.readouterr().out
    assert "test E2E" not in out and "no test columns" in out
    assert main(["frontier", "--archive", str(finished), "--json"]) == 0
    members = json.loads(capsys.readouterr().out)["members"]
    assert all(m["test_closed_loop"] is None for m in members)
