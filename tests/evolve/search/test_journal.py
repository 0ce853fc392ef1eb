"""The journal's keys and its guard against a tampered archive."""

from __future__ import annotations

import os
import pickle

import numpy as np

from evolve.archive import Archive
from evolve.config.schema import Config
from evolve.search.context import Scored
from evolve.search.journal import Journal, job_key


class _Evil:
    def __reduce__(self):
        return (os.system, ("touch " + os.environ["EVOLVE_TEST_PWNED"],))


def test_keys_depend_on_content_only():
    a = Scored({"global": {"x": 1.5}}, {"run": {"ape": {"e2e": 0.25}}}, 0.125, 40)
    b = Scored({"global": {"x": np.float64(1.5)}}, {"run": {"ape": {"e2e": 0.25}}}, 0.125, 40)
    assert job_key("apply", Config(), "src", a) == job_key("apply", Config(), "src", b)
    c = Config()
    c.run.workers = 1  # not stored with a run: cannot change a result
    assert job_key(Config()) == job_key(c)
    c.run.seed = 8
    assert job_key(Config()) != job_key(c)
    assert job_key("fit", "id", 1, None, "v1") != job_key("fit", "id", 1, None, "v2")


def test_keys_ignore_when_the_run_stops():
    """``--resume --generations N`` or a new wall time or budget must reuse the journal."""
    c = Config()
    c.run.generations, c.run.wall_time_s, c.run.max_evaluations = 7, 60.0, 90
    c.llm.max_total_tokens, c.llm.max_cost_usd = 1000, 2.5
    assert job_key("apply", c, "src") == job_key("apply", Config(), "src")
    c.fit.polish_evals += 1  # this one changes what a refit computes
    assert job_key("apply", c, "src") != job_key("apply", Config(), "src")


def test_a_journal_entry_that_is_not_a_result_is_ignored_not_run(tmp_path, monkeypatch):
    flag = tmp_path / "pwned"
    monkeypatch.setenv("EVOLVE_TEST_PWNED", str(flag))
    with Archive(tmp_path / "j.db") as ar:
        rid = ar.create_run(1, {}, {}, None, lock=True)
        good = Scored({"global": {"x": 1.0}}, {}, 0.5, 3)
        ar.journal_put(rid, 0, "good", "fit", pickle.dumps(("fp", good)))
        ar.journal_put(rid, 0, "evil", "fit", pickle.dumps(_Evil()))
        journal = Journal(ar, rid)
        assert journal.loaded == 2
        fp, back = journal.get("good")
        assert fp == "fp" and repr(back) == repr(good)
        assert journal.get("evil") is None  # recomputed instead
        assert not flag.exists()
        ar.commit_generation(rid, 0, [])
        assert Journal(ar, rid).loaded == 0  # a committed generation's journal is dropped


def test_results_holding_the_domain_words_are_served_back(tmp_path):
    """A fit's status is a ``FitStatus`` (a StrEnum): the allow-list must admit the domain
    words, or every journaled fit is silently recomputed on resume (found: it was)."""
    from evolve.text.words import FitStatus, Scope, ScoreMode, Split

    words = {"status": FitStatus.OK, "scope": Scope.POOLED, "split": Split.TRAIN,
             "mode": ScoreMode.CLOSED_LOOP}
    with Archive(tmp_path / "j.db") as ar:
        rid = ar.create_run(1, {}, {}, None, lock=True)
        ar.journal_put(rid, 0, "k", "fit", pickle.dumps(Scored({}, {"run": words}, 0.5, 3)))
        back = Journal(ar, rid).get("k")
    assert back is not None and back.metrics["run"] == words
    assert type(back.metrics["run"]["status"]) is FitStatus
